/* Typed adders: the library's policies as chain layers. Each wrapper only
 * converts the policy pointer; the policy's own run form does the work. */
#include "resil/breaker.h"
#include "resil/bulkhead.h"
#include "resil/chain.h"
#include "resil/hedge.h"
#include "resil/ratelimit.h"
#include "resil/retry.h"
#include "resil/timelimit.h"
#include "chain/chain_int.h"
#include "retry/retry_int.h"

resil_outcome resil__chain_run_retry(void *p, const resil_ctx *ctx,
                                     resil_call_fn fn, void *arg) {
  return resil_retry_run(p, ctx, fn, arg);
}
resil_outcome resil__chain_run_breaker(void *p, const resil_ctx *ctx,
                                       resil_call_fn fn, void *arg) {
  return resil_breaker_run(p, ctx, fn, arg);
}
resil_outcome resil__chain_run_ratelimiter(void *p, const resil_ctx *ctx,
                                           resil_call_fn fn, void *arg) {
  return resil_ratelimiter_run(p, ctx, fn, arg);
}
static resil_outcome run_timelimiter(void *p, const resil_ctx *ctx,
                                     resil_call_fn fn, void *arg) {
  return resil_timelimiter_run(p, ctx, fn, arg);
}
static resil_outcome run_timelimiter_owned(void *p, const resil_ctx *ctx,
                                           resil_call_fn fn, void *arg,
                                           void (*arg_done)(void *)) {
  return resil_timelimiter_run_owned(p, ctx, fn, arg, arg_done);
}
resil_outcome resil__chain_run_bulkhead(void *p, const resil_ctx *ctx,
                                        resil_call_fn fn, void *arg) {
  return resil_bulkhead_run(p, ctx, fn, arg);
}
static resil_outcome run_threadpool(void *p, const resil_ctx *ctx,
                                    resil_call_fn fn, void *arg) {
  return resil_threadpool_run(p, ctx, fn, arg);
}

static resil_outcome run_hedge(void *p, const resil_ctx *ctx, resil_call_fn fn,
                               void *arg) {
  return resil_hedge_run(p, ctx, fn, arg);
}

static resil_status add(resil_chain *ch, resil_layer_kind kind, void *p,
                        const char *name, resil_layer_run_fn run) {
  if (!p) return RESIL_EINVAL;
  resil_layer l = {.struct_size = sizeof l, .kind = kind, .name = name, .policy = p, .run = run,
                   .max_attempts = 1};
  return resil_chain_add_layer(ch, &l);
}

resil_status resil_chain_add_retry(resil_chain *ch, resil_retry *p) {
  if (!p) return RESIL_EINVAL;
  resil_layer l = {.struct_size = sizeof l,
                   .kind = RESIL_LAYER_RETRY,
                   .name = resil_retry_name(p),
                   .policy = p,
                   .run = resil__chain_run_retry,
                   .max_attempts = resil_retry_max_attempts(p),
                   .worst_wait_ns = resil__retry_worst_wait_of(p)};
  return resil_chain_add_layer(ch, &l);
}

resil_status resil_chain_add_breaker(resil_chain *ch, resil_breaker *p) {
  return add(ch, RESIL_LAYER_BREAKER, p, p ? resil_breaker_name(p) : NULL,
             resil__chain_run_breaker);
}

resil_status resil_chain_add_ratelimiter(resil_chain *ch, resil_ratelimiter *p) {
  return add(ch, RESIL_LAYER_RATELIMITER, p, p ? resil_ratelimiter_name(p) : NULL,
             resil__chain_run_ratelimiter);
}

resil_status resil_chain_add_timelimiter(resil_chain *ch, resil_timelimiter *p) {
  if (!p) return RESIL_EINVAL;
  resil_layer l = {.struct_size = sizeof l,
                   .kind = RESIL_LAYER_TIMELIMITER,
                   .name = resil_timelimiter_name(p),
                   .policy = p,
                   .run = run_timelimiter,
                   .run_owned = run_timelimiter_owned,
                   .max_attempts = 1,
                   .attempt_timeout_ns = resil_timelimiter_timeout_ns(p)};
  return resil_chain_add_layer(ch, &l);
}

resil_status resil_chain_add_bulkhead(resil_chain *ch, resil_bulkhead *p) {
  return add(ch, RESIL_LAYER_BULKHEAD, p, p ? resil_bulkhead_name(p) : NULL,
             resil__chain_run_bulkhead);
}

resil_status resil_chain_add_threadpool(resil_chain *ch, resil_threadpool *p) {
  return add(ch, RESIL_LAYER_THREADPOOL, p, p ? resil_threadpool_name(p) : NULL,
             run_threadpool);
}

resil_status resil_chain_add_hedge(resil_chain *ch, resil_hedge *p) {
  if (!p) return RESIL_EINVAL;
  resil_layer l = {.struct_size = sizeof l,
                   .kind = RESIL_LAYER_HEDGE,
                   .name = resil_hedge_name(p),
                   .policy = p,
                   .run = run_hedge,
                   .max_attempts = 1,
                   .max_hedges = resil_hedge_max_hedges(p),
                   .hedge_delay_ns = resil_hedge_worst_delay_ns(p),
                   .hedges_blocking = resil_hedge_has_executor(p)};
  return resil_chain_add_layer(ch, &l);
}

int resil__chain_layer_typed(const resil_layer *l) {
  switch (l->kind) {
  case RESIL_LAYER_RETRY: return l->run == resil__chain_run_retry;
  case RESIL_LAYER_BREAKER: return l->run == resil__chain_run_breaker;
  case RESIL_LAYER_RATELIMITER: return l->run == resil__chain_run_ratelimiter;
  case RESIL_LAYER_TIMELIMITER: return l->run == run_timelimiter;
  case RESIL_LAYER_BULKHEAD: return l->run == resil__chain_run_bulkhead;
  case RESIL_LAYER_THREADPOOL: return l->run == run_threadpool;
  case RESIL_LAYER_HEDGE: return l->run == run_hedge;
  default: return 0;
  }
}
