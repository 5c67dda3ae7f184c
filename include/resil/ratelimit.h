/* resil_ratelimiter: periodic permits (DESIGN §2.4), the Resilience4j
 * AtomicRateLimiter model.
 *
 * Time is cut into cycles of `refresh_period_ns`, counted from the
 * limiter's creation. Each cycle grants `limit_for_period` permits; unused
 * permits do not carry over (a new cycle starts with at most the limit). A
 * call that finds no permit in the current cycle may reserve one from a
 * coming cycle when it will arrive within `timeout_ns` (and within the
 * call's remaining deadline): the permit is taken now and the caller waits
 * for the cycle it belongs to. When it cannot arrive in time the call is
 * refused AT ONCE and nothing is consumed (Resilience4j first waits out the
 * whole timeout; we do not, because the answer is already known).
 *
 *   resil_ratelimiter_config cfg;
 *   resil_ratelimiter_config_init(&cfg);
 *   cfg.limit_for_period = 2;
 *   cfg.refresh_period_ns = 3600 * INT64_C(1000000000);   // 1 h
 *   cfg.timeout_ns = 0;                                     // fail fast
 *   resil_ratelimiter *rl;
 *   resil_error err;
 *   if (resil_ratelimiter_new(&cfg, &rl, &err) != RESIL_OK) ...
 *   if (resil_ratelimiter_acquire(rl, 1, NULL) == RESIL_RL_PERMITTED) ...
 *   resil_ratelimiter_free(rl);
 *
 * Permits are per instance (per process); a global quota needs a shared
 * store (DESIGN §8).
 *
 * Lock-free: the whole state (cycle and permits) is one 64-bit word updated
 * with a compare-and-swap; no call takes a lock or allocates. One precise
 * clock read (now_ns) per reservation: cycles may be as short as 1 ns, and
 * the coarse clock may lag by a whole scheduler tick, which would make the
 * limiter see an old cycle.
 *
 * Thread-safety: every function may be called on the same limiter from any
 * thread at once, except resil_ratelimiter_free(), which needs exclusive
 * access.
 *
 * Create/free pair: resil_ratelimiter_new / resil_ratelimiter_free. */
#ifndef RESIL_RATELIMIT_H
#define RESIL_RATELIMIT_H

#include <stdint.h>

#include "alloc.h"
#include "call.h"
#include "clock.h"
#include "outcome.h"
#include "status.h"
#include "version.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct resil_ratelimiter resil_ratelimiter;

typedef struct resil_ratelimiter_config {
  /* Set to 1 by resil_ratelimiter_config_init. */
  unsigned version;
  /* Instance name, copied. Default "ratelimiter". */
  const char *name;
  /* Permits per cycle, 1..2147483647. Default 50 (Resilience4j). */
  int64_t limit_for_period;
  /* Cycle length in nanoseconds, 1..INT64_MAX. Default 500 (Resilience4j's
   * 500 ns, which makes the default limiter almost unlimited: set it). */
  int64_t refresh_period_ns;
  /* Longest wait for a permit, 0..INT64_MAX; 0 = fail fast. Default 5 s
   * (Resilience4j). Permits reserved ahead are owed by coming cycles, and
   * the debt is kept in 31 bits, so limit_for_period ×
   * (timeout_ns / refresh_period_ns + 1) must not exceed 2147483647; the
   * constructor reports the largest timeout_ns that fits otherwise. */
  int64_t timeout_ns;
  /* NULL = resil_clock_system(). Reservations read now_ns, or coarse_ns
   * when refresh_period_ns is at least 100 x coarse_resolution_ns (1 s and
   * more on Linux: new permits come at most 1 % of a period late, never
   * early; deadlines are still read on now_ns); acquire sleeps
   * through sleep_ns. */
  const resil_clock *clock;
  /* NULL = malloc/free. Used only by _new and _free. */
  const resil_allocator *alloc;
} resil_ratelimiter_config;

/* What a request for permits got. */
typedef enum resil_rl_decision {
  /* The permits are the caller's now. */
  RESIL_RL_PERMITTED = 0,
  /* The permits are the caller's, but belong to a coming cycle: wait
   * *wait_ns before using them. Returned by resil_ratelimiter_reserve only
   * (acquire waits and then returns PERMITTED). */
  RESIL_RL_RESERVED = 1,
  /* The permits cannot come within the timeout or the ctx deadline. Nothing
   * was consumed. */
  RESIL_RL_REFUSED = 2,
  /* resil_ratelimiter_acquire only: ctx->cancel was signalled during the
   * wait. The reserved permits were given back. */
  RESIL_RL_CANCELLED = 3,
  /* Invalid handle or permits < 1. Nothing was consumed. */
  RESIL_RL_MISUSE = 4
} resil_rl_decision;

/* Counters since creation. Monotonic; each is read atomically, but the set
 * is not one snapshot. */
typedef struct resil_ratelimiter_metrics {
  uint64_t permitted; /* requests granted without a wait                */
  uint64_t reserved;  /* requests granted from a coming cycle           */
  uint64_t refused;   /* requests refused (nothing consumed)            */
  uint64_t cancelled; /* reserved waits ended by ctx->cancel (given back) */
  int64_t available;  /* permits available now (negative when reserved) */
} resil_ratelimiter_metrics;

/* Writes the documented defaults (version 1). Since 0.1. */
RESIL_API void resil_ratelimiter_config_init(resil_ratelimiter_config *cfg);

/* Validates cfg and creates a limiter whose first cycle starts now, with
 * limit_for_period permits.
 * Returns RESIL_OK; RESIL_EINVAL for cfg or out NULL or a field out of range
 * (err says which field, its range and the value received); RESIL_ENOMEM.
 * err may be NULL. *out is written only on success. Since 0.1. */
RESIL_API resil_status resil_ratelimiter_new(const resil_ratelimiter_config *cfg,
                                             resil_ratelimiter **out,
                                             resil_error *err);

/* Frees the limiter. NULL is a no-op. Needs exclusive access. Since 0.1. */
RESIL_API void resil_ratelimiter_free(resil_ratelimiter *rl);

/* The split form: decides at once and never blocks.
 *
 * Takes `permits` (>= 1) now, or reserves them from a coming cycle when they
 * arrive within min(timeout_ns, remaining deadline of ctx). ctx may be NULL
 * (no deadline). *wait_ns (may be NULL) receives how long the caller must
 * wait before using reserved permits: 0 for PERMITTED, > 0 for RESERVED, and
 * for REFUSED the wait that would have been needed (INT64_MAX when it does
 * not fit in 64 bits), so a caller can tell a refusal caused by the deadline
 * (wait <= timeout_ns) from one caused by the timeout.
 * Returns RESIL_RL_PERMITTED, RESIL_RL_RESERVED, RESIL_RL_REFUSED or
 * RESIL_RL_MISUSE. Reads the limiter's clock once, and ctx's clock once more
 * only when ctx has a deadline on another clock. Since 0.1. */
RESIL_API resil_rl_decision resil_ratelimiter_reserve(resil_ratelimiter *rl,
                                                      int permits,
                                                      const resil_ctx *ctx,
                                                      int64_t *wait_ns);

/* The blocking form: resil_ratelimiter_reserve, then, when the permits are
 * reserved, sleeps through the limiter clock's sleep_ns until they are due
 * (a manual clock advances instead of sleeping). The sleep ends early when
 * ctx->cancel is signalled; the reserved permits are then given back (never
 * above the limit of the current cycle) and RESIL_RL_CANCELLED is returned.
 * Returns RESIL_RL_PERMITTED (after any wait), RESIL_RL_REFUSED (at once,
 * nothing consumed), RESIL_RL_CANCELLED or RESIL_RL_MISUSE. Since 0.1. */
RESIL_API resil_rl_decision resil_ratelimiter_acquire(resil_ratelimiter *rl,
                                                      int permits,
                                                      const resil_ctx *ctx);

/* The run form: acquires one permit, then calls fn(arg, ctx) with the
 * caller's ctx (a default ctx on the limiter's clock when NULL) and returns
 * its outcome. A refusal
 * returns REJECTED with reason RATE_LIMITED, or DEADLINE when the permit
 * would have come within timeout_ns but not within the ctx deadline; fn is
 * not called. A wait cancelled through ctx->cancel returns NOT_SENT with
 * reason CANCELLED (fn was not called, nothing was sent). An invalid handle
 * or a NULL fn returns NOT_SENT with reason LOCAL_ERROR. Since 0.1. */
RESIL_API resil_outcome resil_ratelimiter_run(resil_ratelimiter *rl,
                                              const resil_ctx *ctx,
                                              resil_call_fn fn, void *arg);

/* Permits available now: limit_for_period at the start of an untouched
 * cycle, negative when permits of coming cycles are reserved. Reads the
 * clock; changes nothing. 0 for an invalid handle. Since 0.1. */
RESIL_API int64_t resil_ratelimiter_available(const resil_ratelimiter *rl);

/* Fills *out. RESIL_OK, or RESIL_EINVAL (out NULL), RESIL_EMISUSE (invalid
 * handle). Since 0.1. */
RESIL_API resil_status resil_ratelimiter_get_metrics(
    const resil_ratelimiter *rl, resil_ratelimiter_metrics *out);

/* The instance name, owned by the limiter until it is freed; "" for an
 * invalid handle. Since 0.1. */
RESIL_API const char *resil_ratelimiter_name(const resil_ratelimiter *rl);

#ifdef __cplusplus
}
#endif
#endif
