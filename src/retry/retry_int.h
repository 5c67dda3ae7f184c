/* Private parts of the retry module, shared by retry.c and budget.c. */
#ifndef RESIL_RETRY_INT_H
#define RESIL_RETRY_INT_H

#include "core/internal.h"
#include "resil/retry.h"

/* 1 when b is a live budget. */
int resil__budget_valid(const resil_retry_budget *b);
/* Called once per logical call by resil_retry_begin: the Finagle deposit
 * (nothing in gRPC mode). */
void resil__budget_on_call(resil_retry_budget *b);
/* Called for every attempt's outcome by resil_retry_next: in gRPC mode a
 * success adds token_ratio and a failure removes one token (nothing in
 * Finagle mode). */
void resil__budget_on_attempt(resil_retry_budget *b, resil_outcome_class c);
/* May one more retry go? Finagle: withdraws one token. gRPC: checks the
 * threshold. */
int resil__budget_allow_retry(resil_retry_budget *b);

/* resil_retry_worst_wait_ns() of the config r was made from, for the chain's
 * static amplification report; -1 for a NULL handle. */
int64_t resil__retry_worst_wait_of(const resil_retry *r);

/* resil_retry_run's fast path for a caller that makes the first attempt
 * itself (the chain, Since 0.2). With a ctx, resil_retry_run(r, ctx, fn,
 * arg) is exactly
 *   if (!resil__retry_fast_first(r, ctx, &first)) -> its general path;
 *   o = fn(arg, &first); resil__retry_fast_rest(r, &first, fn, arg, &o);
 * fast_first: 1 when nothing needs checking before the first attempt (no
 * budget, listener, deadline or token; ctx full-size), with *first the
 * first attempt's ctx; 0 otherwise (call resil_retry_run). fast_rest: *io
 * holds the first attempt's outcome; a plain success is counted and gets
 * its stop and attempts, anything else goes on with the later attempts
 * through fn/arg (made as resil_retry_run makes them), and *io gets the
 * call's final outcome. */
int resil__retry_fast_first(const resil_retry *r, const resil_ctx *ctx,
                            resil_ctx *first);
void resil__retry_fast_rest(resil_retry *r, const resil_ctx *first,
                            resil_call_fn fn, void *arg, resil_outcome *io,
                            struct resil_breaker *watch);
/* Retries last (DESIGN §2.9, Since 0.2): `watch` (NULL: none) is the
 * breaker a chain found inside this retry layer; it replaces the config's
 * recovery_breaker for this call (neither is watched with
 * retry_during_recovery). resil__retry_run_watch is resil_retry_run with
 * it; resil__retry_fast_rest above takes it too. */
resil_outcome resil__retry_run_watch(resil_retry *r, const resil_ctx *ctx,
                                     resil_call_fn fn, void *arg,
                                     struct resil_breaker *watch);

/* For a caller that decides once whether the fast path applies (the chain
 * at build time, Since 0.2): 1 when r is valid and has no budget, attempt
 * listener or predicate (all fixed when r is made). Then, for a full-size
 * ctx without deadline or token, resil__retry_fast_first returns 1, and a
 * first attempt that returns a plain success (ANSWERED, REASON_OK) ends
 * the call: resil__retry_fast_rest then does exactly what
 * resil__retry_first_ok(r) does and sets the outcome's stop to
 * RESIL_STOP_SUCCESS and attempts to 1. */
int resil__retry_plain_first(const resil_retry *r);

/* For describing a chain (resil_chain_describe, Since 0.2): 1 when r
 * retries during recovery (retry_during_recovery), else 0 (also for an
 * invalid handle); *watch (may be NULL) gets the config's
 * recovery_breaker it watches (NULL: none, or retry_during_recovery). */
int resil__retry_recovery(const resil_retry *r, struct resil_breaker **watch);
void resil__retry_first_ok(resil_retry *r);

#endif
