/* Internal hooks of the engine (engine.c) for flows built on top of
 * resil_engine_call(), such as the keyed recovery flow (keyed.c): the
 * engine's clock and timer heap, and "extensions" the engine ends when it
 * is freed and can wake on the loop thread from another thread. Loop
 * thread only unless said otherwise. */
#ifndef RESIL_ENGINE_INT_H
#define RESIL_ENGINE_INT_H

#include "core/timerheap.h"
#include "resil/chain.h"
#include "resil/engine.h"

/* The adapter's clock (CLOCK_MONOTONIC without now_ns). */
int64_t resil__engine_now(const resil_engine *e);
resil_http_client *resil__engine_client(const resil_engine *e);
/* 1 from the start of resil_engine_free(): submissions are refused. */
int resil__engine_freeing(const resil_engine *e);
/* Arms t (cb, arg set) on the engine's heap at at_ns (adapter clock) and
 * puts the earliest timer on the adapter. Returns 0, -1 out of memory. */
int resil__engine_arm(resil_engine *e, resil__timer *t, int64_t at_ns);
void resil__engine_disarm(resil_engine *e, resil__timer *t);
/* Breaker refusals that were BREAKER_OPEN (rejected_breaker less
 * rejected_recovering), a counter of its own: the metrics' reason
 * "breaker_open" never goes down, which the difference of two counters
 * read one after the other could. Any thread, as resil_engine_get_stats. */
uint64_t resil__engine_breaker_open(const resil_engine *e);

/* h (just returned by resil_engine_call, no retry in its policies): its
 * attempt is not reported to the client's listener when it ends; the flow
 * reports it from its done callback with resil__engine_report, with the
 * outcome it decides (keyed.c: a status query's, marked recovered). */
void resil__engine_defer_report(resil_engine_handle *h);
/* The request of h's logical call (valid until h's done_fn returns). */
resil_http_request *resil__engine_request(resil_engine_handle *h);
/* From h's done callback: reports h's deferred attempt with outcome *o
 * and idempotency key `key` (NULL: the request's own), the engine's
 * duration, attempt 1, next_wait_ns -1. Once; a no-op when nothing is
 * deferred (a cancelled call, a call never deferred). */
void resil__engine_report(resil_engine_handle *h, const resil_outcome *o, const char *key);

/* How resil_engine_call_chain runs a chain (engine_chain.c). */
enum { ENG_STEP_RL = 1, ENG_STEP_BR, ENG_STEP_BH };
typedef struct resil__engine_plan {
  /* The per-attempt steps (ENG_STEP_*, outermost first, each kind at most
   * once, each policy set in the call's policies), and the chain layer
   * index of each. */
  unsigned char steps[3];
  unsigned char step_layer[3];
  size_t nsteps;
  /* The layers outside the retry, once per logical call: a breaker (NULL:
   * none) and a rate limiter (NULL: none), as steps (ENG_STEP_BR,
   * ENG_STEP_RL) in the chain's order, with their layer indices. */
  resil_breaker *cbr;
  resil_ratelimiter *crl;
  unsigned char outer[2];
  unsigned char outer_layer[2];
  size_t nouter;
  /* The chain whose layer counters the call feeds (resil_chain_count_layer),
   * its number of layers, and its retry layer's index (-1: none). */
  resil_chain *chain;
  int nlayers;
  int retry_layer;
  int hedge_layer; /* -1: none */
} resil__engine_plan;
/* h: just returned by resil_engine_call, not started yet. */
void resil__engine_set_plan(resil_engine_handle *h, const resil__engine_plan *p);
/* k: just returned by resil_engine_call_keyed, not started yet: each of its
 * physical requests gets p (no outer steps; p->chain NULL: the keyed flow
 * does not feed the chain's counters). */
void resil__engine_keyed_set_plan(resil_engine_keyed *k, const resil__engine_plan *p);

typedef struct resil__engine_ext {
  /* Loop thread, on a later loop iteration after resil__engine_post(). */
  void (*on_post)(struct resil__engine_ext *x);
  /* From resil_engine_free(), before its calls are ended: must detach x
   * (it may complete x's flow from inside it). */
  void (*on_free)(struct resil__engine_ext *x);
  struct resil__engine_ext *prev, *next; /* attached list (loop thread) */
  struct resil__engine_ext *post_next;   /* under the engine's mutex    */
  int posted;                            /* under the engine's mutex    */
} resil__engine_ext;

void resil__engine_attach(resil_engine *e, resil__engine_ext *x);
/* Detaches x and drops a post not yet run. */
void resil__engine_detach(resil_engine *e, resil__engine_ext *x);
/* Any thread (not concurrently with resil_engine_free): runs x->on_post on
 * the loop thread soon (the adapter is woken). Once per post. */
void resil__engine_post(resil_engine *e, resil__engine_ext *x);

#endif
