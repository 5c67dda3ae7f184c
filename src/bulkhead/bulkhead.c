/* Semaphore bulkhead.
 *
 * One 64-bit word holds the slots in use and the count of slots handed out:
 *
 *   bits 19..0   in flight, 0..max_concurrent (max 1,000,000 < 2^20)
 *   bits 63..20  slots handed out, modulo 2^44; `permitted_wraps` counts
 *                the wraps (one per 1.7e13 acquisitions)
 *
 * so an acquisition is one compare-and-swap that both takes the slot and
 * counts it, and a release is one compare-and-swap that refuses to go below
 * zero. Waiting callers sleep on a condition variable; a release looks at
 * the waiter count (one atomic load) and takes the mutex only when someone
 * waits.
 *
 * No lost wake-up: a waiter raises `waiters`, then retries the slot, all
 * under the mutex, before it sleeps; a release lowers the word, then reads
 * `waiters`. Both sides use sequentially consistent operations, so either
 * the waiter's retry sees the free slot or the release sees the waiter and
 * signals it under the mutex (which the waiter holds until it sleeps). */
#include <errno.h>
#include <stdatomic.h>
#include <string.h>

#include "bulkhead/sync_int.h"
#include "core/internal.h"
#include "resil/bulkhead.h"

#define IN_FLIGHT_BITS 20
#define IN_FLIGHT_MASK ((UINT64_C(1) << IN_FLIGHT_BITS) - 1)
#define ONE_PERMITTED (UINT64_C(1) << IN_FLIGHT_BITS)

struct resil_bulkhead {
  _Atomic uint64_t word;
  _Atomic uint32_t waiters;
  _Atomic uint32_t peak;
  uint32_t max;
  unsigned magic;
  int64_t max_wait_ns;
  _Atomic uint64_t permitted_wraps;
  _Atomic uint64_t rejected;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  char *name;
  const resil_clock *clock; /* for the default ctx of run */
  const resil_allocator *alloc;
};

static inline int valid(const resil_bulkhead *bh) {
  return bh && bh->magic == RESIL_MAGIC_BULKHEAD;
}

/* The 0.1 layout ends with `alloc`. */
#define BH_CONFIG_MIN_SIZE                                                     \
  (offsetof(resil_bulkhead_config, alloc) + sizeof(const resil_allocator *))

static void config_defaults(resil_bulkhead_config *cfg) {
  memset(cfg, 0, sizeof *cfg);
  cfg->struct_size = sizeof *cfg;
  cfg->name = "bulkhead";
  cfg->max_concurrent = 25;
  cfg->max_wait_ns = 0;
  cfg->clock = NULL;
  cfg->alloc = NULL;
}

void resil_bulkhead_config_init_sized(resil_bulkhead_config *cfg, size_t n) {
  if (!cfg) return;
  resil_bulkhead_config full;
  config_defaults(&full);
  resil__sized_out(cfg, n, &full, sizeof full);
}

resil_status resil_bulkhead_new(const resil_bulkhead_config *ucfg,
                                resil_bulkhead **out, resil_error *err) {
  if (!ucfg) return resil__err(err, RESIL_EINVAL, "cfg", "must not be NULL");
  if (!out) return resil__err(err, RESIL_EINVAL, "out", "must not be NULL");
  resil_bulkhead_config full;
  const resil_bulkhead_config *cfg = &full;
  config_defaults(&full);
  resil_status st = resil__sized_in(&full, sizeof full, ucfg, BH_CONFIG_MIN_SIZE,
                                    "resil_bulkhead_config",
                                    "resil_bulkhead_config_init", err);
  if (st != RESIL_OK) return st;
  if ((st = resil__check_range(err, "max_concurrent", cfg->max_concurrent, 1,
                               RESIL_BULKHEAD_MAX_CONCURRENT)))
    return st;
  if ((st = resil__check_ns(err, "max_wait_ns", cfg->max_wait_ns, 0,
                            INT64_MAX)))
    return st;

  resil_bulkhead *bh = resil__alloc(cfg->alloc, sizeof *bh);
  if (!bh) return resil__err(err, RESIL_ENOMEM, NULL, "out of memory");
  memset(bh, 0, sizeof *bh);
  int ok;
  bh->name = resil__strdup(cfg->alloc, cfg->name ? cfg->name : "bulkhead", &ok);
  if (!ok) {
    resil__free(cfg->alloc, bh);
    return resil__err(err, RESIL_ENOMEM, NULL, "out of memory");
  }
  if (pthread_mutex_init(&bh->mu, NULL) != 0) {
    st = resil__err(err, RESIL_ESYS, NULL, "cannot create a mutex");
    goto fail_mu;
  }
  if (resil__cond_init_mono(&bh->cv) != 0) {
    st = resil__err(err, RESIL_ESYS, NULL, "cannot create a condition variable");
    goto fail_cv;
  }
  bh->alloc = cfg->alloc;
  bh->clock = cfg->clock;
  bh->max = cfg->max_concurrent;
  bh->max_wait_ns = cfg->max_wait_ns;
  atomic_init(&bh->word, 0);
  atomic_init(&bh->waiters, 0);
  atomic_init(&bh->peak, 0);
  atomic_init(&bh->permitted_wraps, 0);
  atomic_init(&bh->rejected, 0);
  bh->magic = RESIL_MAGIC_BULKHEAD;
  *out = bh;
  return RESIL_OK;

fail_cv:
  pthread_mutex_destroy(&bh->mu);
fail_mu:
  resil__free(cfg->alloc, bh->name);
  resil__free(cfg->alloc, bh);
  return st;
}

void resil_bulkhead_free(resil_bulkhead *bh) {
  if (!valid(bh)) return;
  bh->magic = RESIL_MAGIC_DEAD;
  pthread_cond_destroy(&bh->cv);
  pthread_mutex_destroy(&bh->mu);
  const resil_allocator *a = bh->alloc;
  resil__free(a, bh->name);
  resil__free(a, bh);
}

/* Takes a slot if one is free: the lock-free fast path. */
static inline int take_slot(resil_bulkhead *bh) {
  uint64_t w = atomic_load_explicit(&bh->word, memory_order_seq_cst);
  for (;;) {
    if ((w & IN_FLIGHT_MASK) >= bh->max) return 0;
    uint64_t nw = w + ONE_PERMITTED + 1;
    if (atomic_compare_exchange_weak_explicit(&bh->word, &w, nw,
                                              memory_order_seq_cst,
                                              memory_order_seq_cst)) {
      if (RESIL_UNLIKELY((nw >> IN_FLIGHT_BITS) == 0))
        atomic_fetch_add_explicit(&bh->permitted_wraps, 1, memory_order_relaxed);
      uint32_t now = (uint32_t)(nw & IN_FLIGHT_MASK);
      uint32_t peak = atomic_load_explicit(&bh->peak, memory_order_relaxed);
      while (RESIL_UNLIKELY(now > peak) &&
             !atomic_compare_exchange_weak_explicit(&bh->peak, &peak, now,
                                                    memory_order_relaxed,
                                                    memory_order_relaxed)) {
      }
      return 1;
    }
  }
}

static inline void set_why(resil_reason *why, resil_reason r) {
  if (why) *why = r;
}

resil_decision resil_bulkhead_try_acquire(resil_bulkhead *bh,
                                          resil_reason *why) {
  if (RESIL_UNLIKELY(!valid(bh))) {
    set_why(why, RESIL_REASON_LOCAL_ERROR);
    return RESIL_DECISION_DENY;
  }
  if (RESIL_LIKELY(take_slot(bh))) {
    set_why(why, RESIL_REASON_OK);
    return RESIL_DECISION_GO;
  }
  atomic_fetch_add_explicit(&bh->rejected, 1, memory_order_relaxed);
  set_why(why, RESIL_REASON_BULKHEAD_FULL);
  return RESIL_DECISION_DENY;
}

/* The waiting path: sleeps until a slot is free, real time reaches
 * until_ns, or the token fires. The token has no way to wake this
 * condition variable, so with a token the sleep is cut into slices of
 * RESIL_CANCEL_POLL_NS. */
static resil_reason wait_for_slot(resil_bulkhead *bh, int64_t until_ns,
                                  resil_cancel *cancel) {
  resil_reason d = RESIL_REASON_BULKHEAD_FULL;
  pthread_mutex_lock(&bh->mu);
  atomic_fetch_add_explicit(&bh->waiters, 1, memory_order_seq_cst);
  for (;;) {
    if (take_slot(bh)) {
      d = RESIL_REASON_OK;
      break;
    }
    if (resil_cancel_is_set(cancel)) {
      d = RESIL_REASON_CANCELLED;
      break;
    }
    int64_t now = resil__mono_ns();
    if (now >= until_ns) break;
    int64_t wake = until_ns;
    if (cancel && until_ns - now > RESIL_CANCEL_POLL_NS)
      wake = now + RESIL_CANCEL_POLL_NS;
    resil__cond_wait_until(&bh->cv, &bh->mu, wake);
  }
  atomic_fetch_sub_explicit(&bh->waiters, 1, memory_order_seq_cst);
  pthread_mutex_unlock(&bh->mu);
  return d;
}

resil_decision resil_bulkhead_acquire(resil_bulkhead *bh, const resil_ctx *ctx,
                                      resil_reason *why) {
  resil_ctx lc;
  const resil_ctx *c = NULL;
  if (RESIL_UNLIKELY(!valid(bh) || (ctx && !(c = resil__ctx_in(&lc, ctx))))) {
    set_why(why, RESIL_REASON_LOCAL_ERROR);
    return RESIL_DECISION_DENY;
  }
  if (RESIL_LIKELY(take_slot(bh))) {
    set_why(why, RESIL_REASON_OK);
    return RESIL_DECISION_GO;
  }
  int64_t wait = bh->max_wait_ns;
  if (wait > 0 && c) {
    int64_t left = resil_ctx_remaining_ns(c);
    if (left < wait) wait = left;
  }
  resil_reason d = RESIL_REASON_BULKHEAD_FULL;
  if (wait > 0)
    d = wait_for_slot(bh, resil__sat_add(resil__mono_ns(), wait),
                      c ? c->cancel : NULL);
  set_why(why, d);
  if (d == RESIL_REASON_OK) return RESIL_DECISION_GO;
  atomic_fetch_add_explicit(&bh->rejected, 1, memory_order_relaxed);
  return RESIL_DECISION_DENY;
}

resil_status resil_bulkhead_release(resil_bulkhead *bh) {
  if (RESIL_UNLIKELY(!valid(bh))) return RESIL_EMISUSE;
  uint64_t w = atomic_load_explicit(&bh->word, memory_order_relaxed);
  do {
    if (RESIL_UNLIKELY((w & IN_FLIGHT_MASK) == 0)) return RESIL_EMISUSE;
  } while (!atomic_compare_exchange_weak_explicit(
      &bh->word, &w, w - 1, memory_order_seq_cst, memory_order_relaxed));
  if (atomic_load_explicit(&bh->waiters, memory_order_seq_cst) > 0) {
    pthread_mutex_lock(&bh->mu);
    pthread_cond_signal(&bh->cv);
    pthread_mutex_unlock(&bh->mu);
  }
  return RESIL_OK;
}

resil_outcome resil_bulkhead_run(resil_bulkhead *bh, const resil_ctx *ctx,
                                 resil_call_fn fn, void *arg) {
  resil_ctx lc;
  const resil_ctx *c = resil__ctx_in(&lc, ctx);
  if (!fn || !valid(bh) || !c)
    return resil_outcome_make(RESIL_NOT_SENT, RESIL_REASON_LOCAL_ERROR);
  if (!ctx) lc.clock = bh->clock; /* c == &lc: the defaults */
  resil_reason why;
  if (resil_bulkhead_acquire(bh, c, &why) != RESIL_DECISION_GO)
    return resil_outcome_make(why == RESIL_REASON_BULKHEAD_FULL ? RESIL_REJECTED
                                                                : RESIL_NOT_SENT,
                              why);
  ctx = c;
  /* fn returns on every path (success, failure, its own timeout or
   * cancellation), and the slot goes back after it whatever it returned. */
  resil_outcome o = fn(arg, ctx);
  resil_bulkhead_release(bh);
  return o;
}

uint32_t resil_bulkhead_available(const resil_bulkhead *bh) {
  if (!valid(bh)) return 0;
  uint64_t w = atomic_load_explicit(&((resil_bulkhead *)bh)->word,
                                    memory_order_relaxed);
  return bh->max - (uint32_t)(w & IN_FLIGHT_MASK);
}

resil_status resil_bulkhead_get_metrics_sized(const resil_bulkhead *bh,
                                              resil_bulkhead_metrics *dst,
                                              size_t n) {
  if (!valid(bh)) return RESIL_EMISUSE;
  if (!dst) return RESIL_EINVAL;
  resil_bulkhead *m = (resil_bulkhead *)bh; /* atomics need non-const */
  resil_bulkhead_metrics full, *out = &full;
  memset(out, 0, sizeof *out);
  out->struct_size = sizeof *out;
  uint64_t wraps = atomic_load_explicit(&m->permitted_wraps, memory_order_relaxed);
  uint64_t w = atomic_load_explicit(&m->word, memory_order_relaxed);
  out->max_concurrent = bh->max;
  out->in_flight = (uint32_t)(w & IN_FLIGHT_MASK);
  out->available = bh->max - out->in_flight;
  out->peak_in_flight = atomic_load_explicit(&m->peak, memory_order_relaxed);
  out->waiting = atomic_load_explicit(&m->waiters, memory_order_relaxed);
  out->permitted = (wraps << (64 - IN_FLIGHT_BITS)) + (w >> IN_FLIGHT_BITS);
  out->rejected = atomic_load_explicit(&m->rejected, memory_order_relaxed);
  resil__sized_out(dst, n, &full, sizeof full);
  return RESIL_OK;
}

const char *resil_bulkhead_name(const resil_bulkhead *bh) {
  return valid(bh) ? bh->name : NULL;
}
