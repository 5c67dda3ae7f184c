/* Internal entry points of the rate limiter for callers that have already
 * read the clock (the chain reads it once per call and hands it down). Not
 * installed, not exported from libresil.so.
 *
 * `now` must be a reading of the limiter's own clock
 * (resil__ratelimiter_clock()), its precise reading (resil__now), taken
 * earlier in the same call: a reading that lags hands a new cycle's
 * permits out late, never early, as the coarse clock does, and the
 * deadline of a ctx on the same clock is checked against it. Arguments,
 * results and counters are those of resil_ratelimiter_reserve /
 * resil_ratelimiter_acquire. */
#ifndef RESIL_RATELIMIT_INT_H
#define RESIL_RATELIMIT_INT_H

#include <stdint.h>

#include "resil/ratelimit.h"

resil_decision resil__ratelimiter_reserve_at(resil_ratelimiter *rl, int permits,
                                             const resil_ctx *ctx, int64_t now,
                                             int64_t *wait_ns,
                                             resil_reason *why);
resil_decision resil__ratelimiter_acquire_at(resil_ratelimiter *rl, int permits,
                                             const resil_ctx *ctx, int64_t now,
                                             resil_reason *why);
/* The limiter's clock (never NULL for a valid limiter; NULL otherwise). */
const resil_clock *resil__ratelimiter_clock(const resil_ratelimiter *rl);
/* 1 when the limiter reads its cycles on its clock's coarse reading (then
 * a coarse reading of that clock is as good a `now` as its own, for a ctx
 * without a deadline on that clock); 0 otherwise (Since 0.2). */
int resil__ratelimiter_coarse(const resil_ratelimiter *rl);

/* resil_ratelimiter_run's permit, for a caller that makes the call itself
 * (the chain's acquire/release pass, Since 0.2): 1 to make the call, 0 with
 * *refusal the outcome resil_ratelimiter_run ends with. rl: a valid limiter
 * (resil__ratelimiter_clock is not NULL; the caller checks it once, as the
 * chain does when the layer is added: this does not). ctx: a full-size ctx
 * (resil__ctx_in's result) whose clock is set (not checked either). now:
 * NULL (the limiter reads its clock) or a reading as
 * resil__ratelimiter_acquire_at takes one. Nothing to do after the call. */
int resil__ratelimiter_enter(resil_ratelimiter *rl, const resil_ctx *ctx,
                             const int64_t *now, resil_outcome *refusal);

#endif
