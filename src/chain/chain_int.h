/* The chain's typed adders and runner share these: a layer whose run is one
 * of them is a library breaker, rate limiter or semaphore bulkhead, which
 * resil_chain_run enters through the policies' internal enter entry points
 * (chain.c, split_pass). Not
 * installed, not exported from libresil.so. */
#ifndef RESIL_CHAIN_INT_H
#define RESIL_CHAIN_INT_H

#include "resil/chain.h"

resil_outcome resil__chain_run_breaker(void *p, const resil_ctx *ctx,
                                       resil_call_fn fn, void *arg);
resil_outcome resil__chain_run_ratelimiter(void *p, const resil_ctx *ctx,
                                           resil_call_fn fn, void *arg);
resil_outcome resil__chain_run_retry(void *p, const resil_ctx *ctx,
                                     resil_call_fn fn, void *arg);
resil_outcome resil__chain_run_bulkhead(void *p, const resil_ctx *ctx,
                                        resil_call_fn fn, void *arg);

/* 1 when layer l was added by a typed adder (chain_add.c): its policy is
 * the library object of its kind. */
int resil__chain_layer_typed(const resil_layer *l);

#endif
