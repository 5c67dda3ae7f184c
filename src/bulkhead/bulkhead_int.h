/* Internal entry point of the semaphore bulkhead for a caller that makes
 * the call itself (the chain's acquire/release pass). Not installed, not
 * exported from libresil.so. */
#ifndef RESIL_BULKHEAD_INT_H
#define RESIL_BULKHEAD_INT_H

#include "resil/bulkhead.h"

/* resil_bulkhead_run's slot (Since 0.2): for a valid bh,
 * resil_bulkhead_run(bh, ctx, fn, arg) is exactly
 *   if (!resil__bulkhead_enter(bh, ctx, &o)) return o;
 *   o = fn(arg, ctx); resil__bulkhead_leave(bh); return o;
 * 1: a slot is held (waiting for one as resil_bulkhead_acquire waits);
 * 0: *refusal is the outcome resil_bulkhead_run ends with. bh: a valid
 * bulkhead (resil__bulkhead_valid; the caller checks it once, as the chain
 * does when the layer is added: these do not). ctx: a full-size ctx
 * (resil__ctx_in's result) whose clock is set. leave:
 * resil_bulkhead_release for a slot enter took. */
int resil__bulkhead_enter(resil_bulkhead *bh, const resil_ctx *ctx,
                          resil_outcome *refusal);
void resil__bulkhead_leave(resil_bulkhead *bh);
/* 1 when bh is a live bulkhead handle (not NULL, right magic). */
int resil__bulkhead_valid(const resil_bulkhead *bh);

#endif
