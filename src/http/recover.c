/* The client recovery flow (DESIGN §6): after a keyed write attempt that may
 * have executed, ask the status endpoint before deciding anything.
 * COMMITTED gives the stored result, PENDING is waited for within the
 * deadline, and UNKNOWN (a 404 included) goes back to the retry policy,
 * which re-sends with the same key. Every physical request (write or
 * status query) runs through the caller's chain; the retry drives the
 * writes through its split form. The decisions (when to ask, how to ask,
 * what an answer says, what comes next) are recover_rules.c's, shared with
 * the engine's resil_engine_call_keyed(); this file carries them out with
 * blocking requests and sleeps. See
 * resil_http_call_keyed() and resil_http_operation_status() in
 * include/resil/http.h. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "recover_rules.h"

#include "base.h"
#include "client_int.h"
#include "message.h"
#include "response_int.h"

/* ---- one logical keyed call ------------------------------------------------ */

typedef struct keyed_call {
  resil__recov rv;    /* the shared recovery state (recover_rules.h)  */
  resil_chain *chain; /* wraps every physical request; may be NULL    */
  /* The last status query, reported to the client's listener once what
   * follows it is known. */
  int query_unreported;
  resil_outcome query_o;
  int64_t query_ns;
  int64_t query_wait_before;
  /* The write request: its status queries prefer another instance than
   * its latest attempt's (the store is shared, DESIGN §8.4). */
  const resil_http_request *wreq;
} keyed_call;

typedef enum rec_result { REC_UNKNOWN = 0, REC_PENDING, REC_COMMITTED } rec_result;

/* One physical request of the call, through the caller's chain. */
static resil_outcome physical(const keyed_call *k, resil_http_request *req,
                              const resil_ctx *ctx) {
  return k->chain ? resil_chain_run(k->chain, ctx, resil_http_request_attempt, req)
                  : resil_http_request_attempt(req, ctx);
}

/* NULL when chain may wrap a physical request, else why not. */
static const char *chain_refused(resil_chain *chain) {
  if (!chain) return NULL;
  resil_amplification amp;
  if (resil_chain_amplification(chain, &amp) != RESIL_OK) return "chain: invalid handle";
  if (amp.attempts > 1)
    return "chain: it has a retry layer, which would re-send a write before its status is "
           "asked; pass the retry as the retry argument and keep the chain for the other "
           "policies";
  return NULL;
}

/* Reports the last status query to the client's listener. */
static void flush_query(keyed_call *k, int64_t next_wait_ns, resil_stop stop) {
  if (!k->query_unreported) return;
  k->query_unreported = 0;
  resil__http_report(k->rv.c, k->rv.rep->status_queries, &k->query_o, k->query_ns,
                     k->query_wait_before, next_wait_ns, stop, k->rv.key);
}

/* One status query: its own logical call on the status endpoint, through
 * the caller's chain, within the write's deadline and token. Returns the
 * state it learned; *usable is 0 when the query got no usable answer (the
 * state is then UNKNOWN). *qout (may be NULL: dropped) receives the
 * query's own response. */
static resil_http_op_state query_status(keyed_call *k, const resil_ctx *actx,
                                        uint32_t write_attempt, int64_t wait_before,
                                        int *usable, int64_t *retry_after_ms,
                                        resil_http_response **rec, resil_http_response **qout) {
  resil_http_client *c = k->rv.c;
  flush_query(k, wait_before, RESIL_STOP_NONE);
  resil_http_args a;
  resil_ctx qctx;
  resil__recov_query_begin(&k->rv, actx, &a, &qctx);
  resil_http_request *sreq = NULL;
  resil_outcome qo = resil_outcome_make(RESIL_NOT_SENT, RESIL_REASON_LOCAL_ERROR);
  resil_http_response *q = NULL;
  int64_t t0 = resil__http_mono_ns();
  if (resil_http_request_new(c, k->rv.sep->name, &a, &sreq, NULL) == RESIL_OK) {
    resil__http_request_avoid(sreq, resil__http_request_instance(k->wreq));
    qo = physical(k, sreq, &qctx);
    q = resil_http_request_take_response(sreq);
    resil_http_request_free(sreq);
  }
  k->query_unreported = 1;
  k->query_ns = resil__http_mono_ns() - t0;
  k->query_wait_before = wait_before;
  resil_http_op_state s =
      resil__recov_query_end(&k->rv, &qo, q, write_attempt, usable, retry_after_ms, rec);
  /* The listener sees which query read the stored result. */
  k->query_o = resil__recov_query_reported(&qo, *usable, s);
  if (qout) *qout = q;
  else resil_http_response_free(q);
  return s;
}

/* Asks the status endpoint after a write attempt that may have executed,
 * and waits while the operation is PENDING. */
static rec_result recover(keyed_call *k, const resil_ctx *actx, uint32_t write_attempt,
                          resil_http_response **rec) {
  int64_t waited = 0;
  resil__recov_new_write(&k->rv);
  for (;;) {
    int usable = 0;
    int64_t ra = -1;
    resil_http_op_state s = query_status(k, actx, write_attempt, waited, &usable, &ra, rec, NULL);
    resil__recov_step step = resil__recov_after(&k->rv, usable, s);
    if (step == RESIL__RECOV_COMMITTED) return REC_COMMITTED;
    if (step == RESIL__RECOV_UNKNOWN) return REC_UNKNOWN;
    int64_t wait = resil__recov_poll_wait(&k->rv, actx, ra);
    if (wait < 0) return REC_PENDING;
    int64_t now = resil_clock_now_ns(actx->clock);
    int cancelled = resil_clock_sleep_ns(actx->clock, wait, actx->cancel);
    int64_t slept = resil_clock_now_ns(actx->clock) - now;
    waited = slept > 0 ? slept : 0;
    resil__recov_waited(&k->rv, waited);
    if (cancelled) return REC_PENDING;
  }
}

static resil_outcome call_keyed(resil_http_client *c, const char *endpoint,
                                const resil_http_args *uargs, resil_retry *retry,
                                resil_chain *chain, const resil_ctx *ctx,
                                resil_http_response **out, resil_http_recovery *rep) {
  resil_ctx lc;
  const resil_ctx *uc = resil__ctx_in(&lc, ctx);
  if (!uc) return resil__http_not_built(c, "ctx: call resil_ctx_init()", out);
  if (uc != &lc) lc = *uc;
  const char *why = chain_refused(chain);
  if (why) return resil__http_not_built(c, why, out);
  /* The caller's args as a full-size copy: the status query reads them. */
  resil_http_args args;
  resil_error err;
  if (resil__http_args_in(&args, uargs, &err) != RESIL_OK)
    return resil__http_not_built(c, err.msg, out);
  resil_http_request *req = NULL;
  if (resil_http_request_new(c, endpoint, &args, &req, &err) != RESIL_OK)
    return resil__http_not_built(c, err.msg, out);
  if (req->key) snprintf(rep->idempotency_key, sizeof rep->idempotency_key, "%s", req->key);

  keyed_call k;
  memset(&k, 0, sizeof k);
  k.chain = chain;
  k.wreq = req;
  if (resil__recov_init(&k.rv, c, req->ep, req->key, &args, rep) != 0) {
    resil_http_request_free(req);
    return resil__http_not_built(c, "out of memory", out);
  }
  lc.flags |= req->flags;
  lc.idempotency_key = req->key;

  resil_outcome final = resil_outcome_make(RESIL_NOT_SENT, RESIL_REASON_LOCAL_ERROR);
  resil_http_response *rec = NULL;
  resil__kr kr;
  int go = resil__kr_begin(&kr, retry, &lc, &final);
  while (go) {
    const resil_ctx *actx = resil__kr_ctx(&kr);
    int64_t t0 = resil__http_mono_ns();
    resil_outcome o = physical(&k, req, actx);
    int64_t dur = resil__http_mono_ns() - t0;
    rep->write_attempts++;
    int ask = resil__recov_should_ask(&k.rv, &o);
    /* Without a retry the client decided this attempt: it reports it. */
    if (!retry)
      resil__http_report(c, 1, &o, dur, 0, ask ? 0 : -1,
                         RESIL_STOP_NONE, k.rv.key);
    rec_result rr = ask ? recover(&k, actx, actx->attempt, &rec) : REC_UNKNOWN;
    if (rr == REC_COMMITTED) {
      final = resil__recov_final_committed(&k.rv, &kr, rec, dur);
      break;
    }
    if (rr == REC_PENDING) {
      final = resil__recov_final_pending(&kr, &o, dur);
      break;
    }
    int64_t delay = 0;
    go = resil__kr_next(&kr, &o, dur, &delay, &final);
    if (!go) break;
    flush_query(&k, delay, RESIL_STOP_NONE);
    /* A token that fires during the wait stops the next attempt before it
     * sends (NOT_SENT(CANCELLED)), and the retry then ends the call. */
    const resil_ctx *nctx = resil__kr_ctx(&kr);
    if (delay > 0) (void)resil_clock_sleep_ns(nctx->clock, delay, nctx->cancel);
  }
  flush_query(&k, -1, final.stop);
  resil__kr_free(&kr);

  resil_http_response *r = resil_http_request_take_response(req);
  if (rec) {
    resil_http_response_free(r);
    r = rec;
  }
  if (out) *out = r;
  else resil_http_response_free(r);
  resil__recov_free(&k.rv);
  resil_http_request_free(req);
  return final;
}

resil_outcome resil_http_call_keyed_sized(resil_http_client *c, const char *endpoint,
                                          const resil_http_args *args, resil_retry *retry,
                                          resil_chain *chain, const resil_ctx *ctx,
                                          resil_http_response **out,
                                          resil_http_recovery *report, size_t report_size) {
  resil_http_recovery rep;
  memset(&rep, 0, sizeof rep);
  rep.struct_size = sizeof rep;
  if (out) *out = NULL;
  resil_outcome o = call_keyed(c, endpoint, args, retry, chain, ctx, out, &rep);
  if (report) resil__sized_out(report, report_size, &rep, sizeof rep);
  return o;
}

resil_outcome resil_http_operation_status(resil_http_client *c, const char *endpoint,
                                          const char *key, const resil_http_args *uargs,
                                          resil_chain *chain, const resil_ctx *ctx,
                                          resil_http_op_state *state,
                                          resil_http_response **out) {
  resil_outcome bad = resil_outcome_make(RESIL_NOT_SENT, RESIL_REASON_LOCAL_ERROR);
  if (!state) return bad;
  *state = RESIL_HTTP_OP_NONE;
  if (out) *out = NULL;
  resil_ctx lc;
  const resil_ctx *uc = resil__ctx_in(&lc, ctx);
  if (!uc) return resil__http_not_built(c, "ctx: call resil_ctx_init()", out);
  if (!c || c->magic != RESIL_MAGIC_HTTP_CLIENT || !endpoint)
    return resil__http_not_built(c, "client and endpoint must not be NULL", out);
  const char *why = chain_refused(chain);
  if (why) return resil__http_not_built(c, why, out);
  const http_endpoint *ep = resil__http_find_endpoint(c, endpoint);
  if (!ep) return resil__http_not_built(c, "unknown endpoint", out);
  if (ep->status_ep < 0)
    return resil__http_not_built(c, "endpoint has no status_endpoint", out);
  if (!resil__http_key_ok(key)) return resil__http_not_built(c, "key: must be 1..255 visible ASCII characters", out);
  resil_http_args args;
  resil_error err;
  if (resil__http_args_in(&args, uargs, &err) != RESIL_OK)
    return resil__http_not_built(c, err.msg, out);

  resil_http_recovery rep;
  memset(&rep, 0, sizeof rep);
  keyed_call k;
  memset(&k, 0, sizeof k);
  k.chain = chain;
  if (resil__recov_init_status(&k.rv, c, ep, key, &args, &rep) != 0)
    return resil__http_not_built(c, "out of memory", out);
  int usable = 0;
  int64_t ra = -1;
  resil_http_response *rec = NULL, *q = NULL;
  resil_http_op_state s = query_status(&k, uc, 0, 0, &usable, &ra, &rec, &q);
  flush_query(&k, -1, RESIL_STOP_NONE);
  resil__recov_free(&k.rv);
  *state = s;
  resil_outcome o = rep.last_query;
  if (s == RESIL_HTTP_OP_COMMITTED && rec) {
    o = rec->outcome;
    resil_http_response_free(q);
    q = rec;
  }
  if (out) *out = q;
  else resil_http_response_free(q);
  return o;
}

int resil_http_response_recovered(const resil_http_response *r) {
  return r && r->magic == RESIL_MAGIC_HTTP_RESPONSE && r->recovered;
}
