/* Internal entry point of the semaphore bulkhead for a caller that makes
 * the call itself (the chain's acquire/release pass). Not installed, not
 * exported from libresil.so. */
#ifndef RESIL_BULKHEAD_INT_H
#define RESIL_BULKHEAD_INT_H

#include "resil/bulkhead.h"

/* resil_bulkhead_run's slot (Since 0.2): resil_bulkhead_run(bh, ctx, fn,
 * arg) is exactly
 *   if (!resil__bulkhead_enter(bh, ctx, &o)) return o;
 *   o = fn(arg, ctx); resil_bulkhead_release(bh); return o;
 * 1: a slot is held (waiting for one as resil_bulkhead_acquire waits);
 * 0: *refusal is the outcome resil_bulkhead_run ends with (also for an
 * invalid bulkhead). ctx: a full-size ctx (resil__ctx_in's result) whose
 * clock is set. */
int resil__bulkhead_enter(resil_bulkhead *bh, const resil_ctx *ctx,
                          resil_outcome *refusal);

#endif
