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
#define _GNU_SOURCE /* syscall(SYS_futex) */
#include <errno.h>
#include <linux/futex.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "bulkhead/bulkhead_int.h"
#include "bulkhead/sync_int.h"
#include "core/internal.h"
#include "resil/bulkhead.h"
#include "shared/shared_int.h"

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

/* A shared bulkhead's slot words (see "shared bulkheads" below). */
typedef struct bh_shared {
  _Atomic uint32_t seq;   /* bumped by every release: the futex word */
  _Atomic uint32_t nwait; /* sleepers on seq (a hint: a dead one stays) */
  _Atomic int64_t last_reclaim_ns; /* CLOCK_MONOTONIC of the last pass */
  _Atomic uint64_t reserved[6];
  _Atomic uint64_t permit[]; /* 0 free, else pid << 32 | start time */
} bh_shared;

#define SH_PERMIT_WORD0 8

struct resil_bulkhead {
  _Atomic uint64_t word;
  _Atomic uint32_t waiters; /* length of the list; written under mu */
  _Atomic uint32_t peak;
  uint32_t max;
  unsigned magic;
  /* A shared bulkhead's slot words, or NULL: read by every take and
   * release, so on the first cache line with word, max and magic. */
  bh_shared *sh;
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
  /* Shared bulkheads only (sh, above, is NULL otherwise). */
  resil_shared *shared;       /* the segment sh points into (a reference) */
  resil__shared_owner_cache me; /* this process's permit word */
  _Atomic uint32_t sh_held;   /* permits this process holds */
  _Atomic uint64_t sh_permitted;
  _Atomic uint32_t sh_blocked; /* callers sleeping in sh_wait */
  pthread_cond_t poll_cv;     /* wakes the helper thread (under mu) */
  pthread_t poller;
  int64_t poller_pid;         /* the process whose helper runs, 0: none */
  int poll_stop;              /* under mu */
};

static inline int valid(const resil_bulkhead *bh) {
  return bh && bh->magic == RESIL_MAGIC_BULKHEAD;
}

static int sh_take_or_reclaim(resil_bulkhead *bh);
static resil_status sh_release(resil_bulkhead *bh);
static resil_reason sh_wait(resil_bulkhead *bh, int64_t until_ns, resil_cancel *cancel);
static int sh_take_or_queue(resil_bulkhead *bh, resil_bulkhead_waiter *w);
static uint32_t sh_in_flight(const resil_bulkhead *bh);
static resil_status use_shared(resil_bulkhead *bh, const resil_bulkhead_config *cfg,
                               resil_error *err);
static void sh_free(resil_bulkhead *bh);

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
  cfg->shared = NULL;
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
  if (cfg->shared && (st = use_shared(bh, cfg, err)) != RESIL_OK) {
    pthread_mutex_destroy(&bh->mu);
    goto fail_mu;
  }
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
  if (bh->sh) sh_free(bh);
  bh->magic = RESIL_MAGIC_DEAD;
  pthread_mutex_destroy(&bh->mu);
  const resil_allocator *a = bh->alloc;
  resil__free(a, bh->name);
  resil__free(a, bh);
}

/* Takes a slot if one is free: the lock-free fast path. */
static inline int take_slot(resil_bulkhead *bh) {
  if (RESIL_UNLIKELY(bh->sh != NULL)) return sh_take_or_reclaim(bh);
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
  if (wait > 0 && bh->sh)
    d = sh_wait(bh, resil__sat_add(resil__mono_ns(), wait), c ? c->cancel : NULL);
  else if (wait > 0)
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
  if (RESIL_UNLIKELY(bh->sh != NULL)) return sh_release(bh);
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
    int q = bh->sh ? sh_take_or_queue(bh, w) : take_or_queue(bh, w);
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
  if (bh->sh) return bh->max - sh_in_flight(bh);
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
  if (bh->sh) {
    out->in_flight = sh_in_flight(bh);
    out->available = bh->max - out->in_flight;
    out->permitted = atomic_load_explicit(&m->sh_permitted, memory_order_relaxed);
    out->waiting += atomic_load_explicit(&m->sh_blocked, memory_order_relaxed);
  }
  resil__sized_out(dst, n, &full, sizeof full);
  return RESIL_OK;
}

const char *resil_bulkhead_name(const resil_bulkhead *bh) {
  return valid(bh) ? bh->name : NULL;
}

/* ---- shared bulkheads (DESIGN §8.1) ---------------------------------------
 *
 * The slot's words (bh_shared): a futex word `seq` that every release
 * bumps, a count of its sleepers, the time of the last reclaim pass, and
 * from word 8 one word per permit: 0 when free, else the owner's
 * pid << 32 | the low 32 bits of its start time in clock ticks since boot
 * (/proc/<pid>/stat field 22), so that a pid reused by a new process is
 * not taken for the dead owner. Every change of a permit is one
 * compare-and-swap; seq, nwait and last_reclaim_ns are hints (a process
 * killed between the swap and the bump costs a sleeper at most one poll
 * interval), so a SIGKILL at any instruction leaves every permit either
 * with a live owner, free, or with a dead owner that the next reclaim pass
 * frees. The words are only touched with atomic operations. */

#define SH_RECLAIM_EVERY_NS (10 * RESIL_NS_PER_MS)
#define SH_POLL_NS (2 * RESIL_NS_PER_MS)
#define SH_HELPER_POLL_NS (10 * RESIL_NS_PER_MS)

static void futex_wait(_Atomic uint32_t *w, uint32_t old, int64_t ns) {
  struct timespec ts = {(time_t)(ns / RESIL_NS_PER_S), (long)(ns % RESIL_NS_PER_S)};
  /* Not FUTEX_PRIVATE_FLAG: the word is in memory shared with other
   * processes. EAGAIN (it changed), EINTR, ETIMEDOUT: the caller looks. */
  syscall(SYS_futex, (uint32_t *)w, FUTEX_WAIT, old, &ts, NULL, 0);
}

static void futex_wake(_Atomic uint32_t *w, int n) {
  syscall(SYS_futex, (uint32_t *)w, FUTEX_WAKE, n, NULL, NULL, 0);
}

/* This process's permit word, recomputed after fork(). */
static inline uint64_t sh_me(resil_bulkhead *bh) { return resil__shared_owner(&bh->me); }

static int sh_take(resil_bulkhead *bh) {
  const uint64_t me = sh_me(bh);
  for (uint32_t i = 0; i < bh->max; i++) {
    uint64_t v = atomic_load_explicit(&bh->sh->permit[i], memory_order_relaxed);
    if (v != 0) continue;
    if (atomic_compare_exchange_strong_explicit(&bh->sh->permit[i], &v, me,
                                                memory_order_seq_cst,
                                                memory_order_relaxed)) {
      atomic_fetch_add_explicit(&bh->sh_permitted, 1, memory_order_relaxed);
      uint32_t held = atomic_fetch_add_explicit(&bh->sh_held, 1, memory_order_relaxed) + 1;
      uint32_t peak = atomic_load_explicit(&bh->peak, memory_order_relaxed);
      while (held > peak &&
             !atomic_compare_exchange_weak_explicit(&bh->peak, &peak, held,
                                                    memory_order_relaxed,
                                                    memory_order_relaxed)) {
      }
      return 1;
    }
  }
  return 0;
}

/* 1 when the owner of permit word v is gone. A small memo of the pids
 * seen in this pass saves re-reading /proc for a process holding several
 * permits. */
typedef struct sh_memo {
  uint64_t word[16];
  int dead[16];
  int n;
} sh_memo;

static int owner_gone(uint64_t v, sh_memo *memo) {
  for (int k = 0; k < memo->n; k++)
    if (memo->word[k] == v) return memo->dead[k];
  int dead = resil__shared_owner_gone(v);
  if (memo->n < 16) {
    memo->word[memo->n] = v;
    memo->dead[memo->n++] = dead;
  }
  return dead;
}

/* A reclaim pass when none was made in the last SH_RECLAIM_EVERY_NS by
 * any process: frees the permits of dead owners. Returns how many. */
static int sh_reclaim(resil_bulkhead *bh) {
  bh_shared *sh = bh->sh;
  int64_t now = resil__mono_ns();
  int64_t last = atomic_load_explicit(&sh->last_reclaim_ns, memory_order_relaxed);
  if (now - last < SH_RECLAIM_EVERY_NS && now >= last) return 0;
  if (!atomic_compare_exchange_strong_explicit(&sh->last_reclaim_ns, &last, now,
                                               memory_order_relaxed,
                                               memory_order_relaxed))
    return 0; /* another process (or thread) makes this pass */
  const uint64_t me = sh_me(bh);
  sh_memo memo;
  memo.n = 0;
  int freed = 0;
  for (uint32_t i = 0; i < bh->max; i++) {
    uint64_t v = atomic_load_explicit(&sh->permit[i], memory_order_relaxed);
    if (v == 0 || (v >> 32) == (me >> 32) || !owner_gone(v, &memo)) continue;
    if (atomic_compare_exchange_strong_explicit(&sh->permit[i], &v, 0,
                                                memory_order_seq_cst,
                                                memory_order_relaxed))
      freed++;
  }
  if (freed) {
    atomic_fetch_add_explicit(&sh->seq, 1, memory_order_seq_cst);
    futex_wake(&sh->seq, freed);
  }
  return freed;
}

static int sh_take_or_reclaim(resil_bulkhead *bh) {
  if (RESIL_LIKELY(sh_take(bh))) return 1;
  return sh_reclaim(bh) > 0 && sh_take(bh);
}

/* Frees one of this process's permits and wakes a sleeper. */
static resil_status sh_free_permit(resil_bulkhead *bh) {
  bh_shared *sh = bh->sh;
  const uint64_t me = sh_me(bh);
  for (uint32_t i = 0; i < bh->max; i++) {
    uint64_t v = me;
    if (atomic_load_explicit(&sh->permit[i], memory_order_relaxed) != me) continue;
    if (atomic_compare_exchange_strong_explicit(&sh->permit[i], &v, 0,
                                                memory_order_seq_cst,
                                                memory_order_relaxed)) {
      atomic_fetch_sub_explicit(&bh->sh_held, 1, memory_order_relaxed);
      atomic_fetch_add_explicit(&sh->seq, 1, memory_order_seq_cst);
      if (atomic_load_explicit(&sh->nwait, memory_order_seq_cst) > 0)
        futex_wake(&sh->seq, 1);
      return RESIL_OK;
    }
  }
  return RESIL_EMISUSE;
}

/* Hands a permit this process holds to the head of its queue (mu held,
 * queue not empty); returns with mu released after calling the waiter's
 * callback. */
static void sh_hand_over(resil_bulkhead *bh) {
  resil_bulkhead_waiter *h = bh->head;
  unlink_waiter(bh, h);
  atomic_fetch_add_explicit(&bh->sh_permitted, 1, memory_order_relaxed);
  atomic_fetch_add_explicit(&bh->handed_over, 1, memory_order_relaxed);
  h->state = W_HANDED;
  resil_bulkhead_ready_fn cb = h->cb;
  void *arg = h->arg;
  pthread_mutex_unlock(&bh->mu);
  if (cb) cb(arg);
}

static resil_status sh_release(resil_bulkhead *bh) {
  if (RESIL_UNLIKELY(atomic_load_explicit(&bh->waiters, memory_order_relaxed) > 0)) {
    pthread_mutex_lock(&bh->mu);
    if (bh->head) {
      const uint64_t me = sh_me(bh);
      int held = 0;
      for (uint32_t i = 0; i < bh->max && !held; i++)
        held = atomic_load_explicit(&bh->sh->permit[i], memory_order_relaxed) == me;
      if (!held) {
        pthread_mutex_unlock(&bh->mu);
        return RESIL_EMISUSE;
      }
      sh_hand_over(bh); /* the permit stays this process's */
      return RESIL_OK;
    }
    pthread_mutex_unlock(&bh->mu);
  }
  return sh_free_permit(bh);
}

/* A blocked acquire: sleeps on seq, re-checking at least every SH_POLL_NS
 * (the token, reclaims, a wake lost to a killed releaser). nwait is raised
 * before seq is read and the permits are looked at, and a release frees
 * its permit before it bumps seq: a release after the look changes seq,
 * so the futex does not sleep. */
static resil_reason sh_wait(resil_bulkhead *bh, int64_t until_ns, resil_cancel *cancel) {
  bh_shared *sh = bh->sh;
  resil_reason d = RESIL_REASON_BULKHEAD_FULL;
  atomic_fetch_add_explicit(&bh->sh_blocked, 1, memory_order_relaxed);
  for (;;) {
    atomic_fetch_add_explicit(&sh->nwait, 1, memory_order_seq_cst);
    uint32_t seen = atomic_load_explicit(&sh->seq, memory_order_seq_cst);
    int got = sh_take_or_reclaim(bh);
    int64_t now = resil__mono_ns();
    if (!got && !resil_cancel_is_set(cancel) && now < until_ns) {
      int64_t slice = until_ns - now;
      if (slice > SH_POLL_NS) slice = SH_POLL_NS;
      futex_wait(&sh->seq, seen, slice);
    }
    atomic_fetch_sub_explicit(&sh->nwait, 1, memory_order_relaxed);
    if (got) {
      d = RESIL_REASON_OK;
      break;
    }
    if (resil_cancel_is_set(cancel)) {
      d = RESIL_REASON_CANCELLED;
      break;
    }
    if (resil__mono_ns() >= until_ns) break;
  }
  atomic_fetch_sub_explicit(&bh->sh_blocked, 1, memory_order_relaxed);
  return d;
}

/* The helper thread of a shared bulkhead with queued (enqueued) waiters:
 * hands permits freed by any process to the head of the queue. */
static void *sh_helper(void *arg) {
  resil_bulkhead *bh = arg;
  bh_shared *sh = bh->sh;
  pthread_mutex_lock(&bh->mu);
  while (!bh->poll_stop) {
    if (!bh->head) {
      pthread_cond_wait(&bh->poll_cv, &bh->mu);
      continue;
    }
    atomic_fetch_add_explicit(&sh->nwait, 1, memory_order_seq_cst);
    uint32_t seen = atomic_load_explicit(&sh->seq, memory_order_seq_cst);
    if (sh_take_or_reclaim(bh)) {
      atomic_fetch_sub_explicit(&sh->nwait, 1, memory_order_relaxed);
      /* mu is held: the queue still has its head. sh_take counted the
       * permit; the handover counts it again. */
      atomic_fetch_sub_explicit(&bh->sh_permitted, 1, memory_order_relaxed);
      sh_hand_over(bh);
      pthread_mutex_lock(&bh->mu);
      continue;
    }
    pthread_mutex_unlock(&bh->mu);
    futex_wait(&sh->seq, seen, SH_HELPER_POLL_NS);
    atomic_fetch_sub_explicit(&sh->nwait, 1, memory_order_relaxed);
    pthread_mutex_lock(&bh->mu);
  }
  pthread_mutex_unlock(&bh->mu);
  return NULL;
}

/* resil_bulkhead_enqueue's queueing for a shared bulkhead (mu held): a
 * free permit (1), or w queued and the helper told (0), or the queue is
 * full (-1). */
static int sh_take_or_queue(resil_bulkhead *bh, resil_bulkhead_waiter *w) {
  if (sh_take_or_reclaim(bh)) return 1;
  if (bh->max_queued == 0 ||
      atomic_load_explicit(&bh->waiters, memory_order_relaxed) >= bh->max_queued)
    return -1;
  int64_t pid = (int64_t)getpid();
  if (bh->poller_pid != pid) {
    /* No helper in this process yet (or only the parent's, before fork). */
    bh->poll_stop = 0;
    if (pthread_create(&bh->poller, NULL, sh_helper, bh) != 0) return -1;
    bh->poller_pid = pid;
  }
  append_waiter(bh, w);
  pthread_cond_signal(&bh->poll_cv);
  return 0;
}

static uint32_t sh_in_flight(const resil_bulkhead *bh) {
  uint32_t n = 0;
  for (uint32_t i = 0; i < bh->max; i++)
    n += atomic_load_explicit(&bh->sh->permit[i], memory_order_relaxed) != 0;
  return n;
}

typedef struct bh_shared_rec {
  int64_t max_concurrent;
} bh_shared_rec;

static const resil__shared_field bh_shared_fields[] = {
    {"max_concurrent", offsetof(bh_shared_rec, max_concurrent), sizeof(int64_t)},
};

static resil_status use_shared(resil_bulkhead *bh, const resil_bulkhead_config *cfg,
                               resil_error *err) {
  resil_shared *seg = cfg->shared;
  if (!resil__shared_valid(seg))
    return resil__err(err, RESIL_EINVAL, "shared", "is not a resil_shared handle");
  resil_status st;
  if ((st = resil__check_range(err, "max_concurrent", cfg->max_concurrent, 1,
                               RESIL_BULKHEAD_SHARED_MAX_CONCURRENT)))
    return st;
  bh_shared_rec rec;
  memset(&rec, 0, sizeof rec);
  rec.max_concurrent = cfg->max_concurrent;
  resil__shared_req q;
  memset(&q, 0, sizeof q);
  q.kind = RESIL__SHK_BULKHEAD;
  q.name = bh->name;
  q.cfg = &rec;
  q.cfg_len = sizeof rec;
  q.fields = bh_shared_fields;
  q.nfields = 1;
  uint64_t *words = NULL;
  st = resil__shared_join(seg, NULL, "bulkhead", &q, &words, err);
  if (st == RESIL_OK && words) {
    if (resil__cond_init_mono(&bh->poll_cv) != 0) {
      resil__shared_release(seg);
      return resil__err(err, RESIL_ESYS, NULL, "cannot create a condition variable");
    }
    _Static_assert(sizeof(bh_shared) == SH_PERMIT_WORD0 * sizeof(uint64_t),
                   "permits start at word 8");
    _Static_assert(SH_PERMIT_WORD0 + RESIL_BULKHEAD_SHARED_MAX_CONCURRENT <=
                       RESIL__SHARED_STATE_WORDS,
                   "the permits fit in a slot");
    bh->sh = (bh_shared *)(void *)words;
    bh->shared = seg;
    atomic_init(&bh->me.pid, 0);
    atomic_init(&bh->me.word, 0);
    atomic_init(&bh->sh_held, 0);
    atomic_init(&bh->sh_permitted, 0);
    atomic_init(&bh->sh_blocked, 0);
  }
  return st;
}

static void sh_free(resil_bulkhead *bh) {
  if (bh->poller_pid == (int64_t)getpid()) {
    pthread_mutex_lock(&bh->mu);
    bh->poll_stop = 1;
    pthread_cond_signal(&bh->poll_cv);
    pthread_mutex_unlock(&bh->mu);
    pthread_join(bh->poller, NULL);
  }
  pthread_cond_destroy(&bh->poll_cv);
  resil__shared_release(bh->shared);
}

resil_status resil_bulkhead_shared_peek(resil_shared *seg, const char *name,
                                        uint32_t *available, uint32_t *max,
                                        resil_error *err) {
  if (!seg || !name)
    return resil__err(err, RESIL_EINVAL, seg ? "name" : "seg", "must not be NULL");
  bh_shared_rec rec;
  resil_status st = resil__shared_find_cfg(seg, RESIL__SHK_BULKHEAD, name, &rec,
                                           sizeof rec, err);
  if (st != RESIL_OK) return st;
  resil_bulkhead_config c;
  resil_bulkhead_config_init(&c);
  c.name = name;
  c.max_concurrent = (uint32_t)rec.max_concurrent;
  c.shared = seg;
  resil_bulkhead *bh;
  if ((st = resil_bulkhead_new(&c, &bh, err)) != RESIL_OK) return st;
  if (!bh->sh) {
    resil_bulkhead_free(bh);
    return resil__err(err, RESIL_ESTATE, "shared", "the segment is in fallback mode");
  }
  if (available) *available = resil_bulkhead_available(bh);
  if (max) *max = (uint32_t)rec.max_concurrent;
  resil_bulkhead_free(bh);
  return RESIL_OK;
}
