/* The rules of the client recovery flow (DESIGN §6), once, for both paths:
 * the blocking resil_http_call_keyed() (recover.c) and the engine's
 * resil_engine_call_keyed() (src/engine/keyed.c). What is shared:
 *   - when a write attempt's outcome calls for a status query,
 *   - how a status query is built (its args: {key} first, then the call's
 *     params and extra headers; its ctx: a safe read numbered within the
 *     write's call, carrying the key),
 *   - how its answer is read (404, 200 COMMITTED/PENDING/UNKNOWN/FAILED, the
 *     "key" member, body / body_base64, the stored status 200..599) and
 *     counted (report and client counters),
 *   - what comes next (COMMITTED ends the call with the stored result,
 *     PENDING waits status_poll_ns or the Retry-After, bounded by
 *     pending_wait_max_ns and the deadline, UNKNOWN goes back to the retry),
 *   - and the retry's split form driving the writes (kr_*), with the final
 *     outcome of a COMMITTED or an ended PENDING.
 * Each path only carries the physical requests and the waits (a blocking
 * chain run and a clock sleep; an engine call and a timer). Internal.
 * Layer 6 of libresil-http (see src/http/README.md): above the client and
 * the built requests (message.h), below the blocking recovery flow
 * (recover.c) and the engine's keyed flow (src/engine/keyed.c). */
#ifndef RESIL_HTTP_RECOVER_RULES_H
#define RESIL_HTTP_RECOVER_RULES_H

#include "message.h"

/* One logical keyed call's recovery state. */
typedef struct resil__recov {
  resil_http_client *c;
  const char *key;          /* the call's idempotency key (may be NULL)  */
  const http_endpoint *ep;  /* the write endpoint                        */
  const http_endpoint *sep; /* its status endpoint; NULL: no recovery    */
  resil_http_param *sparams; /* {key} first, then the call's params      */
  size_t nsparams;
  const resil_http_param *headers;
  size_t nheaders;
  resil_http_recovery *rep;
  int seen_pending;      /* this write's queries saw PENDING            */
  int pending_started;
  int64_t pending_since; /* ctx clock, first PENDING answer of the call  */
} resil__recov;

/* What follows a status query's answer. */
typedef enum resil__recov_step {
  RESIL__RECOV_UNKNOWN = 0, /* back to the retry with the write's outcome */
  RESIL__RECOV_POLL,        /* PENDING: wait, then ask again              */
  RESIL__RECOV_COMMITTED    /* the stored result is the answer            */
} resil__recov_step;

/* Sets up k for a call of write endpoint ep with key (NULL: none) and the
 * caller's full-size args (params and headers are borrowed: they must stay
 * valid while k is used). The status query is used only when the call has
 * a key, ep a status endpoint and the client status_query_classes.
 * Returns 0, -1 when out of memory. */
int resil__recov_init(resil__recov *k, resil_http_client *c, const http_endpoint *ep,
                      const char *key, const resil_http_args *args, resil_http_recovery *rep);
/* Like resil__recov_init, always with the status endpoint (for
 * resil_http_operation_status; the caller checked it exists). */
int resil__recov_init_status(resil__recov *k, resil_http_client *c, const http_endpoint *ep,
                             const char *key, const resil_http_args *args,
                             resil_http_recovery *rep);
void resil__recov_free(resil__recov *k);

/* 1 when write outcome o calls for a status query. */
int resil__recov_should_ask(const resil__recov *k, const resil_outcome *o);
/* A new write attempt: its queries start afresh (PENDING seen, not the
 * call's PENDING start). */
static inline void resil__recov_new_write(resil__recov *k) { k->seen_pending = 0; }

/* Counts one status query and gives its args (*a, full size) and ctx
 * (*qctx, from the write attempt's actx). */
void resil__recov_query_begin(resil__recov *k, const resil_ctx *actx, resil_http_args *a,
                              resil_ctx *qctx);
/* Reads the query's outcome qo and response q (may be NULL), counts what it
 * said, and returns the state (UNKNOWN for no usable answer, *usable 0).
 * *retry_after_ms: the answer's Retry-After (-1 none). For COMMITTED, *rec
 * receives the recovered response (write_attempt its info.attempt). */
resil_http_op_state resil__recov_query_end(resil__recov *k, const resil_outcome *qo,
                                           const resil_http_response *q,
                                           uint32_t write_attempt, int *usable,
                                           int64_t *retry_after_ms, resil_http_response **rec);
/* The outcome the client's attempt listener is given for a status query
 * whose outcome qo resil__recov_query_end read as (usable, s): qo, with
 * RESIL_OF_RECOVERED when the query read the operation's stored result
 * (COMMITTED), so the event log's `recovered` comes from it. Both paths
 * report through it. */
resil_outcome resil__recov_query_reported(const resil_outcome *qo, int usable,
                                          resil_http_op_state s);
/* What comes after that answer (updates the report's state). */
resil__recov_step resil__recov_after(resil__recov *k, int usable, resil_http_op_state s);
/* After RESIL__RECOV_POLL: how long to wait before asking again (> 0), or
 * -1 when the PENDING wait ends now (cancelled, or the wait would reach
 * pending_wait_max_ns from the first PENDING answer or the deadline).
 * Reads actx's clock, deadline and cancel token; retry_after_ms from the
 * answer. */
int64_t resil__recov_poll_wait(resil__recov *k, const resil_ctx *actx, int64_t retry_after_ms);
/* Records a PENDING wait that lasted waited_ns. */
static inline void resil__recov_waited(resil__recov *k, int64_t waited_ns) {
  k->rep->pending_wait_ns += waited_ns > 0 ? waited_ns : 0;
}

/* ---- the retry's split form ------------------------------------------------
 * Everything the keyed flow asks of the retry goes through these functions.
 * retry NULL drives exactly one attempt. */
typedef struct resil__kr {
  resil_retry *r;
  resil_retry_state *st; /* NULL without a retry                         */
  resil_ctx ctx; /* the attempt's context when no retry drives the call */
} resil__kr;

/* Starts the logical call: 1 to make the first attempt with
 * resil__kr_ctx(), 0 when the retry refused it (*final says why).
 * resil__kr_free() in every case. */
int resil__kr_begin(resil__kr *kr, resil_retry *r, const resil_ctx *ctx, resil_outcome *final);
void resil__kr_free(resil__kr *kr);
/* The context for the next attempt (numbered by the retry). */
const resil_ctx *resil__kr_ctx(const resil__kr *kr);
/* Records the attempt's outcome (which took duration_ns): 1 with *delay for
 * another attempt, 0 with *final the call's outcome. */
int resil__kr_next(resil__kr *kr, const resil_outcome *o, int64_t duration_ns, int64_t *delay,
                   resil_outcome *final);
/* The call's outcome after a COMMITTED answer (rec the recovered
 * response): no write is sent again (counts the client's recovered). */
resil_outcome resil__recov_final_committed(resil__recov *k, resil__kr *kr,
                                           const resil_http_response *rec, int64_t duration_ns);
/* The call's outcome when the PENDING wait ended after write outcome o. */
resil_outcome resil__recov_final_pending(resil__kr *kr, const resil_outcome *o,
                                         int64_t duration_ns);

#endif
