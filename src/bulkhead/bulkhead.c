/* Semaphore bulkhead.
 *
 * One 64-bit word holds the slots in use, a "somebody is queued" flag and
 * the count of slots handed out:
 *
 *   bits 19..0   in flight, 0..max_concurrent (max 1,000,000 < 2^20)
 *   bit 20       QUEUED: the FIFO queue of waiters is not empty
 *   bits 63..21  slots handed out, modulo 2^43; `permitted_wraps` counts
 *                the wraps (one per 8.8e12 acquisitions)
 *
 * so an acquisition is one compare-and-swap that both takes the slot and
 * counts it, and a release is one compare-and-swap that refuses to go below
 * zero. A newcomer never overtakes a waiter because a release does not free
 * its slot while anyone is queued: it hands it over (below). Since QUEUED
 * (2^20) is above any max_concurrent, the fast path's one comparison
 * `(w & (IN_FLIGHT_MASK | QUEUED)) >= max` refuses a slot while anyone is
 * queued as well, at no cost (by the invariants below the bulkhead is full
 * then anyway).
 *
 * Waiters (blocked acquires and enqueued event-loop waiters) sit in one
 * intrusive FIFO list under the mutex. Invariants, under the mutex:
 *   - QUEUED is set exactly when the list is not empty;
 *   - QUEUED set implies in flight == max_concurrent: a waiter sets QUEUED
 *     with a compare-and-swap that checks the bulkhead is full (else it
 *     takes the free slot instead), and while QUEUED is set no release
 *     lowers in flight: it takes the slow path, locks, and hands its slot to
 *     the head of the list (in flight unchanged, one more handed out).
 * A waiter leaves the list either handed a slot (by a release) or withdrawn
 * (timeout, cancellation, dequeue), both under the mutex, so exactly one of
 * the two happens. An enqueued waiter's callback is called after the mutex
 * is dropped, from cb and arg copied under it: the library never touches
 * the waiter after the handover. */
#include <errno.h>
#include <stdatomic.h>
#include <string.h>

#include "bulkhead/bulkhead_int.h"
#include "bulkhead/sync_int.h"
#include "core/internal.h"
#include "resil/bulkhead.h"

#if defined(__GNUC__)
#define RESIL_NOINLINE_ __attribute__((noinline))
#else
#define RESIL_NOINLINE_
#endif

#define IN_FLIGHT_BITS 20
#define IN_FLIGHT_MASK ((UINT64_C(1) << IN_FLIGHT_BITS) - 1)
#define QUEUED (UINT64_C(1) << IN_FLIGHT_BITS)
#define PERMITTED_SHIFT (IN_FLIGHT_BITS + 1)
#define ONE_PERMITTED (UINT64_C(1) << PERMITTED_SHIFT)

#define MAGIC_WAITER 0x424b5754u /* "BKWT" */

/* A waiter's fate; written under the bulkhead's mutex. */
enum { W_IDLE = 0, W_QUEUED, W_HANDED, W_WITHDRAWN };

struct resil_bulkhead_waiter {
  unsigned magic;
  int state;
  resil_bulkhead *bh;
  resil_bulkhead_waiter *prev, *next;
  resil_bulkhead_ready_fn cb; /* NULL for a blocked acquire */
  void *arg;
  pthread_cond_t *cv;         /* a blocked acquire's own condition variable */
};

struct resil_bulkhead {
  _Atomic uint64_t word;
  _Atomic uint32_t waiters; /* length of the list; written under mu */
  _Atomic uint32_t peak;
  uint32_t max;
  unsigned magic;
  int64_t max_wait_ns;
  uint32_t max_queued;
  _Atomic uint32_t peak_waiters;
  _Atomic uint64_t permitted_wraps;
  _Atomic uint64_t rejected;
  _Atomic uint64_t handed_over;
  _Atomic uint64_t withdrawn;
  pthread_mutex_t mu;
  resil_bulkhead_waiter *head, *tail; /* the FIFO queue, under mu */
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
  cfg->max_queued = RESIL_BULKHEAD_MAX_QUEUED;
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
  if ((st = resil__check_range(err, "max_queued", cfg->max_queued, 0,
                               RESIL_BULKHEAD_MAX_QUEUED)))
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
  bh->alloc = cfg->alloc;
  bh->clock = cfg->clock;
  bh->max = cfg->max_concurrent;
  bh->max_wait_ns = cfg->max_wait_ns;
  bh->max_queued = cfg->max_queued;
  bh->head = bh->tail = NULL;
  atomic_init(&bh->peak_waiters, 0);
  atomic_init(&bh->handed_over, 0);
  atomic_init(&bh->withdrawn, 0);
  atomic_init(&bh->word, 0);
  atomic_init(&bh->waiters, 0);
  atomic_init(&bh->peak, 0);
  atomic_init(&bh->permitted_wraps, 0);
  atomic_init(&bh->rejected, 0);
  bh->magic = RESIL_MAGIC_BULKHEAD;
  *out = bh;
  return RESIL_OK;

fail_mu:
  resil__free(cfg->alloc, bh->name);
  resil__free(cfg->alloc, bh);
  return st;
}

void resil_bulkhead_free(resil_bulkhead *bh) {
  if (!valid(bh)) return;
  bh->magic = RESIL_MAGIC_DEAD;
  pthread_mutex_destroy(&bh->mu);
  const resil_allocator *a = bh->alloc;
  resil__free(a, bh->name);
  resil__free(a, bh);
}

/* Takes a slot if one is free: the lock-free fast path. */
static inline int take_slot(resil_bulkhead *bh) {
  uint64_t w = atomic_load_explicit(&bh->word, memory_order_seq_cst);
  for (;;) {
    /* QUEUED is above every max: one comparison refuses both. */
    if ((w & (IN_FLIGHT_MASK | QUEUED)) >= bh->max) return 0;
    uint64_t nw = w + ONE_PERMITTED + 1;
    if (atomic_compare_exchange_weak_explicit(&bh->word, &w, nw,
                                              memory_order_seq_cst,
                                              memory_order_seq_cst)) {
      if (RESIL_UNLIKELY((nw >> PERMITTED_SHIFT) == 0))
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

/* ---- the FIFO queue (under bh->mu) ---------------------------------- */

static void append_waiter(resil_bulkhead *bh, resil_bulkhead_waiter *w) {
  w->next = NULL;
  w->prev = bh->tail;
  if (bh->tail)
    bh->tail->next = w;
  else
    bh->head = w;
  bh->tail = w;
  w->state = W_QUEUED;
  uint32_t n = atomic_load_explicit(&bh->waiters, memory_order_relaxed) + 1;
  atomic_store_explicit(&bh->waiters, n, memory_order_relaxed);
  if (n > atomic_load_explicit(&bh->peak_waiters, memory_order_relaxed))
    atomic_store_explicit(&bh->peak_waiters, n, memory_order_relaxed);
}

/* Removes w; clears QUEUED when the list becomes empty (in flight stays
 * max_concurrent, so the fast path finds the bulkhead full, not free). */
static void unlink_waiter(resil_bulkhead *bh, resil_bulkhead_waiter *w) {
  if (w->prev)
    w->prev->next = w->next;
  else
    bh->head = w->next;
  if (w->next)
    w->next->prev = w->prev;
  else
    bh->tail = w->prev;
  w->prev = w->next = NULL;
  atomic_store_explicit(&bh->waiters,
                        atomic_load_explicit(&bh->waiters, memory_order_relaxed) - 1,
                        memory_order_relaxed);
  if (!bh->head) atomic_fetch_and_explicit(&bh->word, ~QUEUED, memory_order_seq_cst);
}

/* Takes a free slot (1), or queues w at the tail (0), or refuses because
 * the queue holds max_queued waiters (-1). QUEUED is set only by a
 * compare-and-swap that sees the bulkhead full, so a slot freed by a
 * concurrent fast-path release is taken here instead of being waited for. */
static int take_or_queue(resil_bulkhead *bh, resil_bulkhead_waiter *w) {
  uint64_t x = atomic_load_explicit(&bh->word, memory_order_seq_cst);
  for (;;) {
    if (x & QUEUED) break; /* others wait: join them */
    if ((x & IN_FLIGHT_MASK) < bh->max) {
      if (take_slot(bh)) return 1;
      x = atomic_load_explicit(&bh->word, memory_order_seq_cst);
      continue;
    }
    if (bh->max_queued == 0) return -1;
    if (atomic_compare_exchange_weak_explicit(&bh->word, &x, x | QUEUED,
                                              memory_order_seq_cst,
                                              memory_order_seq_cst))
      break;
  }
  if (atomic_load_explicit(&bh->waiters, memory_order_relaxed) >= bh->max_queued)
    return -1; /* QUEUED was set by others: the list is not empty */
  append_waiter(bh, w);
  return 0;
}

static void withdraw(resil_bulkhead *bh, resil_bulkhead_waiter *w) {
  unlink_waiter(bh, w);
  w->state = W_WITHDRAWN;
  atomic_fetch_add_explicit(&bh->withdrawn, 1, memory_order_relaxed);
}

/* The waiting path of a blocked acquire: queues a node of its own (with
 * its own condition variable, so a handover wakes exactly this thread) and
 * sleeps until a release hands it a slot, real time reaches until_ns, or
 * the token fires. The token has no way to wake the condition variable,
 * so with a token the sleep is cut into slices of RESIL_CANCEL_POLL_NS. */
static resil_reason wait_for_slot(resil_bulkhead *bh, int64_t until_ns,
                                  resil_cancel *cancel) {
  pthread_cond_t cv;
  if (resil__cond_init_mono(&cv) != 0) return RESIL_REASON_BULKHEAD_FULL;
  resil_bulkhead_waiter me;
  memset(&me, 0, sizeof me);
  me.magic = MAGIC_WAITER;
  me.bh = bh;
  me.cv = &cv;
  resil_reason d = RESIL_REASON_BULKHEAD_FULL;
  pthread_mutex_lock(&bh->mu);
  int r = take_or_queue(bh, &me);
  if (r == 1) d = RESIL_REASON_OK;
  while (r == 0) {
    if (me.state == W_HANDED) {
      d = RESIL_REASON_OK;
      break;
    }
    if (resil_cancel_is_set(cancel)) {
      withdraw(bh, &me);
      d = RESIL_REASON_CANCELLED;
      break;
    }
    int64_t now = resil__mono_ns();
    if (now >= until_ns) {
      withdraw(bh, &me);
      break;
    }
    int64_t wake = until_ns;
    if (cancel && until_ns - now > RESIL_CANCEL_POLL_NS)
      wake = now + RESIL_CANCEL_POLL_NS;
    resil__cond_wait_until(&cv, &bh->mu, wake);
  }
  pthread_mutex_unlock(&bh->mu);
  pthread_cond_destroy(&cv);
  return d;
}

/* How long a waiter may wait: min(max_wait_ns, remaining deadline). */
static int64_t wait_budget(const resil_bulkhead *bh, const resil_ctx *c) {
  int64_t wait = bh->max_wait_ns;
  if (wait > 0 && c) {
    int64_t left = resil_ctx_remaining_ns(c);
    if (left < wait) wait = left;
  }
  return wait;
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
  int64_t wait = wait_budget(bh, c);
  resil_reason d = RESIL_REASON_BULKHEAD_FULL;
  if (wait > 0)
    d = wait_for_slot(bh, resil__sat_add(resil__mono_ns(), wait),
                      c ? c->cancel : NULL);
  set_why(why, d);
  if (d == RESIL_REASON_OK) return RESIL_DECISION_GO;
  atomic_fetch_add_explicit(&bh->rejected, 1, memory_order_relaxed);
  return RESIL_DECISION_DENY;
}

/* A release that found QUEUED: hand the slot to the head of the queue (in
 * flight unchanged), or, when the queue emptied meanwhile, free it. */
static RESIL_NOINLINE_ resil_status release_slow(resil_bulkhead *bh) {
  pthread_mutex_lock(&bh->mu);
  resil_bulkhead_waiter *h = bh->head;
  if (!h) {
    uint64_t w = atomic_load_explicit(&bh->word, memory_order_relaxed);
    do {
      if ((w & IN_FLIGHT_MASK) == 0) {
        pthread_mutex_unlock(&bh->mu);
        return RESIL_EMISUSE;
      }
    } while (!atomic_compare_exchange_weak_explicit(
        &bh->word, &w, w - 1, memory_order_seq_cst, memory_order_relaxed));
    pthread_mutex_unlock(&bh->mu);
    return RESIL_OK;
  }
  unlink_waiter(bh, h);
  uint64_t nw = atomic_fetch_add_explicit(&bh->word, ONE_PERMITTED,
                                          memory_order_seq_cst) + ONE_PERMITTED;
  if (RESIL_UNLIKELY((nw >> PERMITTED_SHIFT) == 0))
    atomic_fetch_add_explicit(&bh->permitted_wraps, 1, memory_order_relaxed);
  atomic_fetch_add_explicit(&bh->handed_over, 1, memory_order_relaxed);
  h->state = W_HANDED;
  resil_bulkhead_ready_fn cb = h->cb;
  void *arg = h->arg;
  if (h->cv) pthread_cond_signal(h->cv);
  pthread_mutex_unlock(&bh->mu);
  /* h is not touched after this point: its owner may free it. */
  if (cb) cb(arg);
  return RESIL_OK;
}

/* resil_bulkhead_release for a valid bh. */
static inline resil_status release_valid(resil_bulkhead *bh) {
  uint64_t w = atomic_load_explicit(&bh->word, memory_order_relaxed);
  do {
    if (RESIL_UNLIKELY(w & QUEUED)) return release_slow(bh);
    if (RESIL_UNLIKELY((w & IN_FLIGHT_MASK) == 0)) return RESIL_EMISUSE;
  } while (!atomic_compare_exchange_weak_explicit(
      &bh->word, &w, w - 1, memory_order_seq_cst, memory_order_relaxed));
  return RESIL_OK;
}

resil_status resil_bulkhead_release(resil_bulkhead *bh) {
  if (RESIL_UNLIKELY(!valid(bh))) return RESIL_EMISUSE;
  return release_valid(bh);
}

void resil__bulkhead_leave(resil_bulkhead *bh) { (void)release_valid(bh); }

int resil__bulkhead_valid(const resil_bulkhead *bh) { return valid(bh); }

/* ---- waiters for event loops ------------------------------------------ */

resil_status resil_bulkhead_waiter_new(resil_bulkhead *bh,
                                       resil_bulkhead_waiter **out) {
  if (!valid(bh)) return RESIL_EMISUSE;
  if (!out) return RESIL_EINVAL;
  resil_bulkhead_waiter *w = resil__calloc(bh->alloc, sizeof *w);
  if (!w) return RESIL_ENOMEM;
  w->magic = MAGIC_WAITER;
  w->bh = bh;
  w->state = W_IDLE;
  *out = w;
  return RESIL_OK;
}

void resil_bulkhead_waiter_free(resil_bulkhead_waiter *w) {
  if (!w || w->magic != MAGIC_WAITER) return;
  resil_bulkhead *bh = w->bh;
  pthread_mutex_lock(&bh->mu);
  if (w->state == W_QUEUED) {
    withdraw(bh, w);
    atomic_fetch_add_explicit(&bh->rejected, 1, memory_order_relaxed);
  }
  pthread_mutex_unlock(&bh->mu);
  w->magic = RESIL_MAGIC_DEAD;
  resil__free(bh->alloc, w);
}

resil_decision resil_bulkhead_enqueue(resil_bulkhead *bh, const resil_ctx *ctx,
                                      resil_bulkhead_waiter *w,
                                      resil_bulkhead_ready_fn cb, void *arg,
                                      int64_t *wait_ns, resil_reason *why) {
  resil_ctx lc;
  const resil_ctx *c = NULL;
  if (RESIL_UNLIKELY(!valid(bh) || !w || w->magic != MAGIC_WAITER ||
                     w->bh != bh || !cb ||
                     (ctx && !(c = resil__ctx_in(&lc, ctx))))) {
    set_why(why, RESIL_REASON_LOCAL_ERROR);
    return RESIL_DECISION_DENY;
  }
  if (RESIL_LIKELY(take_slot(bh))) {
    set_why(why, RESIL_REASON_OK);
    return RESIL_DECISION_GO;
  }
  resil_reason r = RESIL_REASON_BULKHEAD_FULL;
  int64_t wait = wait_budget(bh, c);
  if (c && resil_cancel_is_set(c->cancel)) {
    r = RESIL_REASON_CANCELLED;
  } else if (wait > 0) {
    pthread_mutex_lock(&bh->mu);
    if (w->state == W_QUEUED) {
      pthread_mutex_unlock(&bh->mu);
      set_why(why, RESIL_REASON_LOCAL_ERROR);
      return RESIL_DECISION_DENY;
    }
    w->cb = cb;
    w->arg = arg;
    w->cv = NULL;
    int q = take_or_queue(bh, w);
    pthread_mutex_unlock(&bh->mu);
    if (q >= 0) {
      set_why(why, RESIL_REASON_OK);
      if (q == 1) return RESIL_DECISION_GO;
      if (wait_ns) *wait_ns = wait;
      return RESIL_DECISION_WAIT;
    }
  }
  atomic_fetch_add_explicit(&bh->rejected, 1, memory_order_relaxed);
  set_why(why, r);
  return RESIL_DECISION_DENY;
}

resil_bh_dequeue_result resil_bulkhead_dequeue(resil_bulkhead *bh,
                                               resil_bulkhead_waiter *w) {
  if (!valid(bh) || !w || w->magic != MAGIC_WAITER || w->bh != bh)
    return RESIL_BH_NOT_QUEUED;
  resil_bh_dequeue_result r = RESIL_BH_NOT_QUEUED;
  pthread_mutex_lock(&bh->mu);
  switch (w->state) {
  case W_QUEUED:
    withdraw(bh, w);
    atomic_fetch_add_explicit(&bh->rejected, 1, memory_order_relaxed);
    r = RESIL_BH_WITHDRAWN;
    break;
  case W_WITHDRAWN:
    r = RESIL_BH_WITHDRAWN;
    break;
  case W_HANDED:
    r = RESIL_BH_HANDED_OVER;
    break;
  default:
    break;
  }
  pthread_mutex_unlock(&bh->mu);
  return r;
}

int64_t resil_bulkhead_max_wait_ns(const resil_bulkhead *bh) {
  return valid(bh) ? bh->max_wait_ns : 0;
}

/* The run form's slot: 1 to make the call (then release), or 0 with
 * *refusal the outcome the run form ends with. */
static RESIL_NOINLINE_ int enter_slow(resil_bulkhead *bh, const resil_ctx *c,
                                      resil_outcome *refusal) {
  resil_reason why;
  if (resil_bulkhead_acquire(bh, c, &why) == RESIL_DECISION_GO) return 1;
  *refusal = resil_outcome_make(
      why == RESIL_REASON_BULKHEAD_FULL ? RESIL_REJECTED : RESIL_NOT_SENT, why);
  return 0;
}

/* A free slot is taken inline; otherwise resil_bulkhead_acquire decides
 * (a failed take_slot changes nothing, so it simply tries again). */
static inline int enter_run(resil_bulkhead *bh, const resil_ctx *c,
                            resil_outcome *refusal) {
  if (RESIL_LIKELY(take_slot(bh))) return 1;
  return enter_slow(bh, c, refusal);
}

int resil__bulkhead_enter(resil_bulkhead *bh, const resil_ctx *ctx,
                          resil_outcome *refusal) {
  return enter_run(bh, ctx, refusal);
}

resil_outcome resil_bulkhead_run(resil_bulkhead *bh, const resil_ctx *ctx,
                                 resil_call_fn fn, void *arg) {
  resil_ctx lc;
  const resil_ctx *c;
  if (ctx) {
    c = resil__ctx_in(&lc, ctx);
  } else {
    /* The defaults with the bulkhead's clock, built inline. */
    resil__ctx_defaults(&lc);
    c = &lc;
  }
  if (!fn || !valid(bh) || !c)
    return resil_outcome_make(RESIL_NOT_SENT, RESIL_REASON_LOCAL_ERROR);
  if (!ctx) lc.clock = bh->clock;
  resil_outcome o;
  if (!enter_run(bh, c, &o)) return o;
  /* fn returns on every path (success, failure, its own timeout or
   * cancellation), and the slot goes back after it whatever it returned. */
  o = fn(arg, c);
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
  out->permitted = (wraps << (64 - PERMITTED_SHIFT)) + (w >> PERMITTED_SHIFT);
  out->rejected = atomic_load_explicit(&m->rejected, memory_order_relaxed);
  out->handed_over = atomic_load_explicit(&m->handed_over, memory_order_relaxed);
  out->withdrawn = atomic_load_explicit(&m->withdrawn, memory_order_relaxed);
  out->peak_waiting = atomic_load_explicit(&m->peak_waiters, memory_order_relaxed);
  out->max_queued = bh->max_queued;
  resil__sized_out(dst, n, &full, sizeof full);
  return RESIL_OK;
}

const char *resil_bulkhead_name(const resil_bulkhead *bh) {
  return valid(bh) ? bh->name : NULL;
}
