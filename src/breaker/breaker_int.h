/* Internal entry points of the circuit breaker for callers that have
 * already read the clock (the chain reads it once per call and hands it
 * down). Not installed, not exported from libresil.so.
 *
 * `now` is a precise reading (resil__now) of the breaker's own clock
 * (resil__breaker_clock()) taken earlier in the same call, or RESIL__NO_NOW:
 * the breaker then reads its clock itself, and only where it needs it.
 * Arguments, results, counters and events are those of
 * resil_breaker_try_acquire and resil_breaker_record. */
#ifndef RESIL_BREAKER_INT_H
#define RESIL_BREAKER_INT_H

#include <stddef.h>
#include <stdint.h>

#include "resil/breaker.h"

/* "No reading supplied." */
#ifndef RESIL__NO_NOW
#define RESIL__NO_NOW INT64_MIN
/* Checks the breaker's invariants under its lock (Since 0.2; tests and
 * the shared breaker's SIGKILL tests): the window is one its state may
 * hold, its totals (calls, failures, slow, slow failures, head) equal its
 * contents, the HALF_OPEN permits left are at most the permitted count,
 * and the monotonic totals agree. 0 when they hold; -1 with why (n bytes)
 * saying what does not. */
int resil__breaker_check(resil_breaker *br, char *why, size_t n);

/* For tests only: takes the lock, breaks the window's totals and the
 * HALF_OPEN permits as a process killed in the middle of a change would
 * leave them, and returns with the lock held: the caller (a child) then
 * _exits. The next process to need the lock takes it over and repairs. */
void resil__breaker_test_die_locked(resil_breaker *br);

#endif

/* Acquire in CLOSED, DISABLED and METRICS_ONLY is one atomic load and uses
 * no time: `now` is read only in the other states. */
resil_decision resil__breaker_acquire_at(resil_breaker *br,
                                         resil_breaker_permit *permit,
                                         int64_t now);
/* `now` should be taken when the call ended (it places a result in a time
 * window and dates a transition the result causes). A CLOSED breaker with
 * a count window that reaches no threshold uses no time at all. */
resil_status resil__breaker_record_at(resil_breaker *br,
                                      const resil_breaker_permit *permit,
                                      const resil_outcome *o,
                                      int64_t duration_ns, int64_t now);
/* The breaker's clock (NULL for an invalid handle). */
const resil_clock *resil__breaker_clock(const resil_breaker *br);
/* 1 when call durations may be measured on the clock's coarse reading
 * (its resolution is at most 1 % of slow_call_duration_ns), as
 * resil_breaker_run does; 0 when they need precise readings. */
int resil__breaker_coarse_durations(const resil_breaker *br);
/* resil_breaker_run (Since 0.2) that also stores the reading it takes
 * right before calling fn (the start of the call's duration, coarse when
 * resil__breaker_coarse_durations is 1, precise otherwise) in *t0_out
 * before calling fn, so that fn may use it as its own reading of the
 * breaker's clock. */
resil_outcome resil__breaker_run_at(resil_breaker *br, const resil_ctx *ctx,
                                    resil_call_fn fn, void *arg,
                                    int64_t *t0_out);

/* resil_breaker_run in two halves, for a caller that makes the call
 * between them (the chain's acquire/release pass, Since 0.2):
 * for a valid br, resil_breaker_run(br, ctx, fn, arg) is exactly
 *   if (!resil__breaker_enter(br, &permit, &t0, &o)) return o;
 *   o = fn(arg, ctx); resil__breaker_leave(br, &permit, &o, t0); return o;
 * br: a valid breaker (resil__breaker_clock is not NULL; the caller checks
 * it once, as the chain does when the layer is added: these do not).
 * enter: 1 when permitted, with *permit and *t0 (the reading right before
 * the call, on the kind of reading resil__breaker_run_at describes) set;
 * 0 when refused, with *refusal the outcome resil_breaker_run ends with.
 * leave: records o, taking the reading that ends the call's duration
 * itself; exactly once per permitted enter. */
int resil__breaker_enter(resil_breaker *br, resil_breaker_permit *permit,
                         int64_t *t0, resil_outcome *refusal);
void resil__breaker_leave(resil_breaker *br, const resil_breaker_permit *permit,
                          const resil_outcome *o, int64_t t0);
/* resil__breaker_leave for an outcome that is a plain success (ANSWERED,
 * REASON_OK), as resil_breaker_run records one (Since 0.2). */
void resil__breaker_leave_ok(resil_breaker *br,
                             const resil_breaker_permit *permit, int64_t t0);

/* Checks the breaker's invariants under its lock (Since 0.2; tests and
 * the shared breaker's SIGKILL tests): the window is one its state may
 * hold, its totals (calls, failures, slow, slow failures, head) equal its
 * contents, the HALF_OPEN permits left are at most the permitted count,
 * and the monotonic totals agree. 0 when they hold; -1 with why (n bytes)
 * saying what does not. */
int resil__breaker_check(resil_breaker *br, char *why, size_t n);

/* For tests only: takes the lock, breaks the window's totals and the
 * HALF_OPEN permits as a process killed in the middle of a change would
 * leave them, and returns with the lock held: the caller (a child) then
 * _exits. The next process to need the lock takes it over and repairs. */
void resil__breaker_test_die_locked(resil_breaker *br);

#endif
