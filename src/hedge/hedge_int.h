/* Internal entry points of the hedge policy for the chain (Since 0.2).
 * Not installed, not exported from libresil.so. */
#ifndef RESIL_HEDGE_INT_H
#define RESIL_HEDGE_INT_H

#include "resil/breaker.h"
#include "resil/hedge.h"

/* resil_hedge_run and resil_hedge_run_on whose timer watches `watch` (the
 * library breaker layer a chain found inside the hedge layer) for hedges
 * last (DESIGN §2.9), as resil_hedge_on_timer_watch; NULL: the config's
 * recovery_breaker, as the public forms. */
resil_outcome resil__hedge_run_watch(resil_hedge *h, const resil_ctx *ctx,
                                     resil_call_fn fn, void *arg,
                                     resil_breaker *watch);
resil_outcome resil__hedge_run_on_watch(resil_hedge *h, const resil_ctx *ctx,
                                        resil_threadpool *tp, resil_call_fn fn,
                                        void *arg, resil_breaker *watch);

/* For describing a chain (resil_chain_describe): 1 when h hedges during
 * recovery (hedge_during_recovery), else 0 (also for an invalid handle);
 * *watch (may be NULL) gets the config's recovery_breaker (NULL: none, or
 * hedge_during_recovery). */
int resil__hedge_recovery(const resil_hedge *h, resil_breaker **watch);

#endif
