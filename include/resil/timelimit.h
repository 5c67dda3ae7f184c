/* resil_timelimiter: stops the CALLER's wait after a timeout (DESIGN §2.6).
 *
 * The call runs on another thread (a thread of its own, or a worker of a
 * resil_threadpool given as executor) while the caller waits up to
 * min(timeout_ns, remaining deadline of its ctx). When the time is up the
 * caller gets UNKNOWN (reason TIMEOUT, flag RESIL_OF_TIME_LIMITER): the call
 * may have had its effect, may have it later, or never. The limiter undoes
 * nothing. The task keeps running, and its side effects stay. With
 * `cancel_running` the task's cancellation token is signalled, which is a
 * request the task may honour (the HTTP layer aborts its transfer) or
 * ignore.
 *
 * The task's ctx is a copy of the caller's with a fresh resil_cancel token
 * that belongs to this one call. An abandoned task (its caller stopped
 * waiting) stays safe: the state it shares with the caller is refcounted
 * and freed by whichever side finishes last, and the limiter counts tasks
 * still running so that a program can wait for them
 * (resil_timelimiter_wait_idle) and resil_timelimiter_free can block until
 * they end.
 *
 * Waits are real time: a condition variable on CLOCK_MONOTONIC. The ctx
 * deadline is read on the ctx's clock (once, when the call starts) and
 * turned into a real-time wait; an injected clock cannot shorten the
 * limiter's own timeout.
 *
 *   resil_timelimiter_config cfg;
 *   resil_timelimiter_config_init(&cfg);
 *   cfg.timeout_ns = 25 * INT64_C(1000000);   // 25 ms
 *   resil_timelimiter *tl;
 *   if (resil_timelimiter_new(&cfg, &tl, NULL) != RESIL_OK) ...
 *   resil_outcome o = resil_timelimiter_run(tl, &ctx, my_call, my_arg);
 *   if (o.kind == RESIL_UNKNOWN && (o.flags & RESIL_OF_TIME_LIMITER)) ...
 *   resil_timelimiter_free(tl);   // waits for abandoned tasks
 *
 * Thread-safety: every function may be called on the same limiter from any
 * thread at once, except resil_timelimiter_free(), which needs exclusive
 * access (no run may be in progress; abandoned tasks may still run).
 *
 * Create/free pair: resil_timelimiter_new / resil_timelimiter_free. */
#ifndef RESIL_TIMELIMIT_H
#define RESIL_TIMELIMIT_H

#include <stddef.h>
#include <stdint.h>

#include "alloc.h"
#include "bulkhead.h"
#include "call.h"
#include "clock.h"
#include "outcome.h"
#include "status.h"
#include "version.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct resil_timelimiter resil_timelimiter;

typedef struct resil_timelimiter_config {
  /* Sized struct (version.h); set by resil_timelimiter_config_init(). */
  size_t struct_size;
  /* Instance name, copied. Default "timelimiter". */
  const char *name;
  /* How long the caller waits, 1 ns..INT64_MAX nanoseconds of real time.
   * Default 1 s (Resilience4j). */
  int64_t timeout_ns;
  /* 1: when the caller stops waiting at the timeout, signal the task's
   * token. 0: leave the task alone. Default 1 (Resilience4j's
   * cancelRunningFuture). A cancellation of the caller's own ctx->cancel is
   * always passed on to the task, whatever this says. */
  int cancel_running;
  /* Where tasks run: a thread pool, borrowed (it must outlive the limiter),
   * or NULL (default) for a new detached thread per call. With a pool, time
   * spent in its queue counts against the timeout, and a call the pool
   * rejects returns REJECTED with reason QUEUE_FULL. */
  resil_threadpool *executor;
  /* The clock of the task's ctx when resil_timelimiter_run gets a NULL ctx;
   * NULL = resil_clock_system(). It cannot shorten the limiter's wait,
   * which is real time; a ctx deadline is read on the ctx's own clock. */
  const resil_clock *clock;
  /* NULL = malloc/free. Used by _new, _free and every run (one job state
   * per call); it must outlive the limiter and its tasks. */
  const resil_allocator *alloc;
} resil_timelimiter_config;

/* Counters since creation, and the gauges. Each value is read atomically;
 * the set is not one snapshot. */
typedef struct resil_timelimiter_metrics {
  /* Sized struct (version.h): the bytes the library wrote. */
  size_t struct_size;
  uint64_t calls;     /* runs entered                                   */
  uint64_t successes; /* task ended in time with a success outcome      */
  uint64_t failures;  /* task ended in time with any other outcome      */
  uint64_t timeouts;  /* caller stopped waiting at the timeout/deadline */
  uint64_t cancelled; /* caller's ctx->cancel fired before or during
                         the wait                                       */
  uint64_t rejected;  /* not started: deadline already passed, or the
                         executor's queue was full                      */
  uint64_t errors;    /* not started: out of memory, no thread          */
  uint64_t running;   /* tasks started (or queued) and not yet ended    */
  uint64_t abandoned_running; /* of those, tasks whose caller stopped
                                 waiting                                */
} resil_timelimiter_metrics;

/* Writes the documented defaults and struct_size. A macro passing
 * sizeof(resil_timelimiter_config). NULL is a no-op. Since 0.1. */
RESIL_API void resil_timelimiter_config_init_sized(resil_timelimiter_config *cfg,
                                                   size_t struct_size);
#define resil_timelimiter_config_init(cfg)                                     \
  resil_timelimiter_config_init_sized((cfg), sizeof(resil_timelimiter_config))

/* Validates cfg and creates a limiter.
 * Returns RESIL_OK; RESIL_EINVAL for cfg or out NULL, a config never passed
 * through resil_timelimiter_config_init() ("call
 * resil_timelimiter_config_init()"), or a field out of range (err says
 * which field, its range and the value received); RESIL_ENOMEM;
 * RESIL_ESYS (mutex or condition variable). err may be NULL. *out is written
 * only on success. Since 0.1. */
RESIL_API resil_status resil_timelimiter_new(const resil_timelimiter_config *cfg,
                                             resil_timelimiter **out,
                                             resil_error *err);

/* BLOCKS until every task of the limiter has ended (abandoned ones
 * included), then frees it. A task that never returns makes this never
 * return: call resil_timelimiter_wait_idle with a timeout first when that
 * matters. NULL is a no-op. Since 0.1. */
RESIL_API void resil_timelimiter_free(resil_timelimiter *tl);

/* The run form. Runs fn(arg, ctx') on another thread, where ctx' is a copy
 * of *ctx (a default ctx on the configured clock when NULL) whose `cancel`
 * is a fresh token of this call, and waits for it up to min(timeout_ns,
 * remaining deadline of ctx). What ctx points to (clock, user) must stay
 * valid until the task ends, which may be after run returns.
 * Returns:
 *  - fn's outcome when it ended in time;
 *  - UNKNOWN, reason TIMEOUT, flag RESIL_OF_TIME_LIMITER when the time was
 *    up (the task is abandoned, and signalled when cancel_running);
 *  - UNKNOWN, reason CANCELLED when ctx->cancel was signalled during the
 *    wait (polled every millisecond; the task's token is signalled);
 *  - NOT_SENT, reason CANCELLED, fn not called, when ctx->cancel was
 *    signalled before the run;
 *  - REJECTED, reason DEADLINE, fn not called, when the ctx deadline has
 *    already passed;
 *  - REJECTED, reason QUEUE_FULL, fn not called, when the executor's queue
 *    is full;
 *  - NOT_SENT, reason LOCAL_ERROR, fn not called: NULL handle, NULL fn, a
 *    ctx never passed through resil_ctx_init(), out of memory, or no
 *    thread could be started.
 * A task whose token was signalled before fn was entered (its caller gave
 * up while it sat in the executor's queue, or before its thread got going)
 * never calls fn: nothing was sent. Since 0.1. */
RESIL_API resil_outcome resil_timelimiter_run(resil_timelimiter *tl,
                                              const resil_ctx *ctx,
                                              resil_call_fn fn, void *arg);

/* resil_timelimiter_run for an `arg` whose lifetime the limiter must end:
 * arg_done(arg) (may be NULL) is called exactly once, when arg is no longer
 * used by the limiter or its task — after fn returned (on the task's thread,
 * possibly after the caller gave up), or before this function returns when
 * fn was never started (refused, queued and dropped, no thread). Chains use
 * it so that an abandoned task never sees freed memory. Since 0.1. */
RESIL_API resil_outcome resil_timelimiter_run_owned(resil_timelimiter *tl,
                                                    const resil_ctx *ctx,
                                                    resil_call_fn fn, void *arg,
                                                    void (*arg_done)(void *arg));

/* Waits up to timeout_ns of real time (INT64_MAX: without limit) until no
 * task of the limiter is running. When no run is in progress, that means
 * every abandoned task has ended. Returns RESIL_OK, RESIL_ETIMEDOUT,
 * RESIL_EINVAL (timeout_ns < 0) or RESIL_EMISUSE (NULL handle).
 * Since 0.1. */
RESIL_API resil_status resil_timelimiter_wait_idle(resil_timelimiter *tl,
                                                   int64_t timeout_ns);

/* The configured timeout (for the chain's amplification report); 0 for a
 * NULL handle. Since 0.1. */
RESIL_API int64_t resil_timelimiter_timeout_ns(const resil_timelimiter *tl);

/* Fills *out up to the caller's struct size (a macro passing
 * sizeof(resil_timelimiter_metrics)). RESIL_OK, RESIL_EMISUSE (NULL handle),
 * RESIL_EINVAL (out NULL). Since 0.1. */
RESIL_API resil_status resil_timelimiter_get_metrics_sized(
    const resil_timelimiter *tl, resil_timelimiter_metrics *out,
    size_t struct_size);
#define resil_timelimiter_get_metrics(tl, out)                                 \
  resil_timelimiter_get_metrics_sized((tl), (out),                             \
                                      sizeof(resil_timelimiter_metrics))

/* The instance name, owned by the limiter until it is freed; NULL for a
 * NULL handle. Since 0.1. */
RESIL_API const char *resil_timelimiter_name(const resil_timelimiter *tl);

#ifdef __cplusplus
}
#endif
#endif
