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

#endif
