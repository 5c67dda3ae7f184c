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

void resil_bulkhead_config_init(resil_bulkhead_config *cfg) {
  if (!cfg) return;
  memset(cfg, 0, sizeof *cfg);
  cfg->version = 1;
  cfg->name = "bulkhead";
  cfg->max_concurrent = 25;
  cfg->max_wait_ns = 0;
  cfg->clock = NULL;
  cfg->alloc = NULL;
}

resil_status resil_bulkhead_new(const resil_bulkhead_config *cfg,
                                resil_bulkhead **out, resil_error *err) {
  if (!cfg) return resil__err(err, RESIL_EINVAL, "cfg", "must not be NULL");
  if (!out) return resil__err(err, RESIL_EINVAL, "out", "must not be NULL");
  resil_status st;
  if ((st = resil__check_range(err, "version", cfg->version, 1, 1))) return st;
  if ((st = resil__check_range(err, "max_concurrent", cfg->max_concurrent, 1,
                               RESIL_BULKHEAD_MAX_CONCURRENT)))
    return st;
  if ((st = resil__check_range(err, "max_wait_ns", cfg->max_wait_ns, 0,
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

int resil_bulkhead_try_acquire(resil_bulkhead *bh) {
  if (RESIL_UNLIKELY(!valid(bh))) return 0;
  if (RESIL_LIKELY(take_slot(bh))) return 1;
  atomic_fetch_add_explicit(&bh->rejected, 1, memory_order_relaxed);
  return 0;
}

/* The waiting path: sleeps until a slot is free, real time reaches
 * until_ns, or the token fires. The token has no way to wake this
 * condition variable, so with a token the sleep is cut into slices of
 * RESIL_CANCEL_POLL_NS. */
static resil_bh_decision wait_for_slot(resil_bulkhead *bh, int64_t until_ns,
                                       resil_cancel *cancel) {
  resil_bh_decision d = RESIL_BH_FULL;
  pthread_mutex_lock(&bh->mu);
  atomic_fetch_add_explicit(&bh->waiters, 1, memory_order_seq_cst);
  for (;;) {
    if (take_slot(bh)) {
      d = RESIL_BH_ACQUIRED;
      break;
    }
    if (resil_cancel_is_set(cancel)) {
      d = RESIL_BH_CANCELLED;
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

resil_bh_decision resil_bulkhead_acquire(resil_bulkhead *bh,
                                         const resil_ctx *ctx) {
  if (RESIL_UNLIKELY(!valid(bh))) return RESIL_BH_MISUSE;
  if (RESIL_LIKELY(take_slot(bh))) return RESIL_BH_ACQUIRED;
  int64_t wait = bh->max_wait_ns;
  if (wait > 0 && ctx) {
    int64_t left = resil_ctx_remaining_ns(ctx);
    if (left < wait) wait = left;
  }
  resil_bh_decision d = RESIL_BH_FULL;
  if (wait > 0)
    d = wait_for_slot(bh, resil__sat_add(resil__mono_ns(), wait),
                      ctx ? ctx->cancel : NULL);
  if (d != RESIL_BH_ACQUIRED)
    atomic_fetch_add_explicit(&bh->rejected, 1, memory_order_relaxed);
  return d;
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
  if (!fn || !valid(bh))
    return resil_outcome_make(RESIL_NOT_SENT, RESIL_REASON_LOCAL_ERROR);
  switch (resil_bulkhead_acquire(bh, ctx)) {
  case RESIL_BH_ACQUIRED:
    break;
  case RESIL_BH_FULL:
    return resil_outcome_make(RESIL_REJECTED, RESIL_REASON_BULKHEAD_FULL);
  case RESIL_BH_CANCELLED:
    return resil_outcome_make(RESIL_NOT_SENT, RESIL_REASON_CANCELLED);
  default:
    return resil_outcome_make(RESIL_NOT_SENT, RESIL_REASON_LOCAL_ERROR);
  }
  resil_ctx dflt;
  if (!ctx) {
    resil_ctx_init(&dflt);
    dflt.clock = bh->clock;
    ctx = &dflt;
  }
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

resil_status resil_bulkhead_get_metrics(const resil_bulkhead *bh,
                                        resil_bulkhead_metrics *out) {
  if (!out) return RESIL_EINVAL;
  if (!valid(bh)) return RESIL_EMISUSE;
  resil_bulkhead *m = (resil_bulkhead *)bh; /* atomics need non-const */
  uint64_t wraps = atomic_load_explicit(&m->permitted_wraps, memory_order_relaxed);
  uint64_t w = atomic_load_explicit(&m->word, memory_order_relaxed);
  out->max_concurrent = bh->max;
  out->in_flight = (uint32_t)(w & IN_FLIGHT_MASK);
  out->available = bh->max - out->in_flight;
  out->peak_in_flight = atomic_load_explicit(&m->peak, memory_order_relaxed);
  out->waiting = atomic_load_explicit(&m->waiters, memory_order_relaxed);
  out->permitted = (wraps << (64 - IN_FLIGHT_BITS)) + (w >> IN_FLIGHT_BITS);
  out->rejected = atomic_load_explicit(&m->rejected, memory_order_relaxed);
  return RESIL_OK;
}

const char *resil_bulkhead_name(const resil_bulkhead *bh) {
  return valid(bh) ? bh->name : "";
}
