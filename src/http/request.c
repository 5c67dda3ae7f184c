/* The blocking call: one physical attempt at a time on a leased pool slot,
 * driven by the slot's own multi handle on the calling thread, publishing
 * each attempt's response, and resil_http_call() on top. The transport
 * rules are transfer.c's, the request building message.c's. Layer 5
 * (src/http/README.md). */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "message.h"

#include "base.h"
#include "client_int.h"
#include "response_int.h"
#include "slot.h"
#include "transfer.h"

resil_http_response *resil_http_request_take_response(resil_http_request *req) {
  if (!req || req->magic != RESIL_MAGIC_HTTP_REQUEST) return NULL;
  pthread_mutex_lock(&req->mu);
  resil_http_response *r = req->taken ? NULL : req->pub;
  req->pub = NULL;
  req->taken = 1;
  pthread_mutex_unlock(&req->mu);
  return r;
}

/* ---- one attempt ---------------------------------------------------------------- */


static int run_transfer(http_slot *s, resil_cancel *cancel, int64_t deadline,
                        CURLcode *rc_out) {
  int aborted = ABORT_NONE;
  CURLcode rc = CURLE_OK;
  if (curl_multi_add_handle(s->m, s->e) != CURLM_OK) {
    *rc_out = CURLE_FAILED_INIT;
    return ABORT_LOCAL;
  }
  for (;;) {
    int running = 0;
    if (curl_multi_perform(s->m, &running) != CURLM_OK) {
      aborted = ABORT_LOCAL;
      break;
    }
    if (!running) break;
    int64_t now = resil__http_mono_ns();
    if (cancel && resil_cancel_is_set(cancel)) {
      aborted = ABORT_CANCEL;
      break;
    }
    if (now >= deadline) {
      aborted = ABORT_DEADLINE;
      break;
    }
    if (s->x.prereqs && now >= s->x.resp_deadline) {
      aborted = ABORT_RESPONSE;
      break;
    }
    /* At most 1 s, the deadline and the response timeout: curl_multi_poll
     * itself shortens the wait to libcurl's own next timer
     * (curl_multi_timeout), so that needs no call of ours. */
    int64_t wait = RESIL_NS_PER_S;
    if (deadline - now < wait) wait = deadline - now;
    if (s->x.prereqs && s->x.resp_deadline - now < wait) wait = s->x.resp_deadline - now;
    /* A token cannot wake curl_multi_poll: look at it every 10 ms. */
    if (cancel && wait > 10 * RESIL_NS_PER_MS) wait = 10 * RESIL_NS_PER_MS;
    int wms = wait <= 0 ? 0 : (int)((wait + RESIL_NS_PER_MS - 1) / RESIL_NS_PER_MS);
    curl_multi_poll(s->m, NULL, 0, wms, NULL);
  }
  if (!aborted) {
    int left = 0;
    CURLMsg *msg;
    while ((msg = curl_multi_info_read(s->m, &left)) != NULL)
      if (msg->msg == CURLMSG_DONE) rc = msg->data.result;
  }
  /* Removing a transfer that has not finished closes its connection. */
  curl_multi_remove_handle(s->m, s->e);
  *rc_out = rc;
  return aborted;
}


/* An attempt that ended before any transfer (no time, cancelled, no pool
 * slot): publishes a response carrying only the outcome. */
static resil_outcome finish_bare(resil_http_request *req, uint32_t seq, resil_outcome o,
                                 const resil_ctx *ctx, int64_t t0, const char *why) {
  resil_http_client *c = req->client;
  resil__http_count_outcome(c, &o);
  int64_t total = resil__http_mono_ns() - t0;
  pthread_mutex_lock(&req->mu);
  if (!req->taken && atomic_load_explicit(&req->seq, memory_order_relaxed) == seq) {
    if (!req->pub) req->pub = resil__http_response_new(c->t.alloc);
    else resil__http_response_reset(req->pub);
    resil_http_response *r = req->pub;
    if (r) {
      r->outcome = o;
      r->info.attempt = ctx->attempt;
      r->info.lease_wait_ns = o.reason == RESIL_REASON_POOL_TIMEOUT ? total : 0;
      r->info.total_ns = total;
      resil__http_response_set_key(r, req->key);
      if (why) {
        snprintf(r->error, sizeof r->error, "%s", why);
        r->has_error = 1;
      }
    }
  }
  pthread_mutex_unlock(&req->mu);
  resil__http_log_bare(c, req->ep, &o, ctx->attempt, total);
  return o;
}

/* An attempt that chose instance i (probe: it probes it) and ended before
 * its transfer began: i hears the outcome (instances.c judges it). */
static resil_outcome inst_bare(http_inst *i, int probe, resil_outcome o) {
  if (i) resil__http_inst_done(i, probe, &o);
  return o;
}

static resil_outcome run_attempt(resil_http_client *c, resil_http_request *req, http_slot *s,
                                 const resil_ctx *ctx, uint32_t seq, int64_t t0, int64_t t_leased,
                                 int64_t deadline, http_inst *inst, int probe) {
  resil_outcome o;
  const char *why = NULL;
  uint32_t origin = inst ? inst->origin : req->ep->origin;
  if (!s->e && resil__http_slot_setup(c, s) != 0) why = "could not create libcurl handles";
  if (!why && !s->res && !(s->res = resil__http_response_new(c->t.alloc))) why = "out of memory";
  if (why) {
    resil__http_pool_release(c, s, origin);
    return inst_bare(inst, probe,
                     finish_bare(req, seq,
                                 resil_outcome_make(RESIL_NOT_SENT, RESIL_REASON_LOCAL_ERROR),
                                 ctx, t0, why));
  }
  /* resil__http_attempt_done gives the instance back. */
  s->inst = inst;
  s->probe = probe;
  /* t_leased was read after the lease: the time left from then. */
  int64_t left = deadline == INT64_MAX ? INT64_MAX : deadline - t_leased;
  /* deadline is the ctx's, converted to CLOCK_MONOTONIC once at t0: what
   * the deadline header counts down to. */
  if (resil__http_attempt_begin(c, req, s, ctx->attempt, ctx->flags, left, deadline, &o) == 0) {
    CURLcode rc = CURLE_OK;
    int aborted = run_transfer(s, ctx->cancel, deadline, &rc);
    o = resil__http_attempt_end(c, req, s, aborted, rc);
  }
  /* Before the slot goes back: an attempt of this request waiting for it
   * must see this answer (resil_http_request_attempt). */
  if (o.kind == RESIL_ANSWERED) atomic_fetch_add_explicit(&req->answered, 1u, memory_order_relaxed);
  resil__http_attempt_done(c, req, s, &o, ctx->attempt, t_leased - t0, resil__http_mono_ns() - t0);

  /* Publish this attempt's response unless a later attempt has started or
   * the response was taken: an abandoned attempt never overwrites. */
  resil_http_response *res = s->res;
  pthread_mutex_lock(&req->mu);
  if (!req->taken && atomic_load_explicit(&req->seq, memory_order_relaxed) == seq) {
    resil_http_response *old = req->pub;
    req->pub = res;
    s->res = old;
  }
  pthread_mutex_unlock(&req->mu);
  resil__http_pool_release(c, s, origin);
  return o;
}


/* How the wait for a resolved name's first lookup ended (first_lookup). */
enum { DNS_READY = 1, DNS_LATE = 2, DNS_CANCELLED = 3 };

/* An attempt on upstream g: 0 when g needs no wait (a list of instances,
 * or a name whose first lookup has ended), else waits for the first
 * lookup as long as the attempt may wait to connect, as libcurl counts
 * a name's lookup in its connect timeout (transfer.c: the connect
 * timeout, cut to the deadline), looking at the cancel token every
 * 10 ms as run_transfer does: DNS_READY, DNS_LATE or DNS_CANCELLED. */
static int first_lookup(resil_http_client *c, http_group *g, resil_cancel *cancel, int64_t t0,
                        int64_t deadline) {
  if (resil__http_group_ready(g)) return 0;
  int64_t end = resil__sat_add(t0, c->t.connect_timeout_ns);
  if (deadline < end) end = deadline;
  for (;;) {
    if (cancel && resil_cancel_is_set(cancel)) return DNS_CANCELLED;
    int64_t now = resil__http_mono_ns();
    if (now >= end) return resil__http_group_ready(g) ? DNS_READY : DNS_LATE;
    int64_t until = cancel ? resil__sat_add(now, 10 * RESIL_NS_PER_MS) : end;
    if (until > end) until = end;
    if (resil__http_group_wait_first(g, until)) return DNS_READY;
  }
}

resil_outcome resil_http_request_attempt(void *arg, const resil_ctx *uctx) {
  resil_http_request *req = arg;
  if (!req || req->magic != RESIL_MAGIC_HTTP_REQUEST)
    return resil_outcome_make(RESIL_NOT_SENT, RESIL_REASON_LOCAL_ERROR);
  resil_ctx lctx;
  const resil_ctx *ctx = resil__ctx_in(&lctx, uctx);
  if (!ctx) return resil_outcome_make(RESIL_NOT_SENT, RESIL_REASON_LOCAL_ERROR);
  resil_http_client *c = req->client;
  int64_t t0 = resil__http_mono_ns();
  atomic_fetch_add_explicit(&req->refs, 1, memory_order_relaxed);
  uint32_t seq = atomic_fetch_add_explicit(&req->seq, 1u, memory_order_relaxed) + 1u;
  uint32_t answered = atomic_load_explicit(&req->answered, memory_order_relaxed);

  resil_outcome o;
  int64_t budget = resil_ctx_remaining_ns(ctx);
  if (resil_cancel_is_set(ctx->cancel)) {
    o = finish_bare(req, seq, resil_outcome_make(RESIL_NOT_SENT, RESIL_REASON_CANCELLED), ctx, t0,
                    "cancelled before sending");
  } else if (budget <= 0) {
    o = finish_bare(req, seq, resil_outcome_make(RESIL_REJECTED, RESIL_REASON_DEADLINE), ctx, t0,
                    "no time left before the deadline");
  } else {
    int64_t deadline = budget == INT64_MAX ? INT64_MAX : resil__sat_add(t0, budget);
    http_slot *s = NULL;
    int waited = 0, probe = 0;
    http_inst *inst = NULL;
    uint32_t origin = req->ep->origin;
    http_lease_rc lr;
    /* A resolved name whose first lookup has not ended: wait for it. */
    int dns = req->ep->group ? first_lookup(c, req->ep->group, ctx->cancel, t0, deadline) : 0;
    int64_t now = dns ? resil__http_mono_ns() : t0;
    int64_t left = deadline == INT64_MAX ? INT64_MAX : deadline - now;
    int64_t lease_to = c->lease_timeout_ns < left ? c->lease_timeout_ns : left;
    if ((dns == 0 || dns == DNS_READY) && left > 0 && req->ep->group) {
      inst = resil__http_inst_pick(req->ep->group, &req->tried, &probe);
      if (inst) {
        origin = inst->origin;
        atomic_store_explicit(&req->last_bit, inst->bit + 1, memory_order_relaxed);
      }
    }
    if (dns == DNS_CANCELLED) {
      o = finish_bare(req, seq, resil_outcome_make(RESIL_NOT_SENT, RESIL_REASON_CANCELLED), ctx,
                      t0, "cancelled while waiting for the first lookup of the upstream's name");
    } else if (dns == DNS_LATE) {
      o = finish_bare(req, seq, resil_outcome_make(RESIL_NOT_SENT, RESIL_REASON_DNS), ctx, t0,
                      "the first lookup of the upstream's name had not ended within the "
                      "attempt's time (its deadline or the connect timeout)");
    } else if (left <= 0) {
      /* The first lookup ended just as the time did. */
      o = finish_bare(req, seq, resil_outcome_make(RESIL_REJECTED, RESIL_REASON_DEADLINE), ctx,
                      t0, "no time left before the deadline");
    } else if (req->ep->group && !inst) {
      o = finish_bare(req, seq, resil_outcome_make(RESIL_NOT_SENT, RESIL_REASON_DNS), ctx, t0,
                      "no address of the upstream's name is known yet");
    } else if ((lr = resil__http_pool_lease(c, origin, lease_to, ctx->cancel, &s, &waited)) ==
               HTTP_LEASE_TIMEOUT) {
      atomic_fetch_add_explicit(&c->st_lease_timeouts, 1, memory_order_relaxed);
      o = inst_bare(inst, probe,
                    finish_bare(req, seq,
                                resil_outcome_make(RESIL_NOT_SENT, RESIL_REASON_POOL_TIMEOUT),
                                ctx, t0, "no pool connection free within the lease timeout"));
    } else if (lr == HTTP_LEASE_CANCELLED) {
      o = inst_bare(inst, probe,
                    finish_bare(req, seq,
                                resil_outcome_make(RESIL_NOT_SENT, RESIL_REASON_CANCELLED), ctx,
                                t0, "cancelled while waiting for a pool connection"));
    } else if (waited && atomic_load_explicit(&req->answered, memory_order_relaxed) != answered) {
      /* Another attempt of this request (a hedge's primary, holding the
       * connection this one waited for) got its answer meanwhile: the
       * call is being decided, and sending now would only repeat it. The
       * answer was counted before that slot was given back (run_attempt),
       * and the lease's mutex orders the two. */
      resil__http_pool_release(c, s, origin);
      o = inst_bare(inst, probe,
                    finish_bare(req, seq,
                                resil_outcome_make(RESIL_NOT_SENT, RESIL_REASON_CANCELLED), ctx,
                                t0,
                                "another attempt of this request was answered while this one "
                                "waited for a pool connection"));
    } else {
      /* A slot taken without waiting was taken at t0 (lease_wait_ns 0):
       * no second clock read. */
      o = run_attempt(c, req, s, ctx, seq, t0, waited ? resil__http_mono_ns() : now, deadline,
                      inst, probe);
    }
  }
  resil__http_request_unref(req);
  return o;
}

resil_outcome resil_http_call(resil_http_client *c, const char *endpoint,
                              const resil_http_args *args, resil_retry *retry,
                              const resil_ctx *ctx, resil_http_response **out) {
  if (out) *out = NULL;
  resil_ctx lc;
  const resil_ctx *uc = resil__ctx_in(&lc, ctx);
  if (!uc) return resil__http_not_built(c, "ctx: call resil_ctx_init()", out);
  if (uc != &lc) lc = *uc;
  resil_http_request *req = NULL;
  resil_error err;
  resil_status st = resil_http_request_new(c, endpoint, args, &req, &err);
  if (st != RESIL_OK) return resil__http_not_built(c, err.msg, out);
  lc.flags |= req->flags;
  lc.idempotency_key = req->key;
  resil_outcome o;
  if (retry) {
    /* The retry decides the attempts, so its own listener reports them. */
    o = resil_retry_run(retry, &lc, resil_http_request_attempt, req);
  } else {
    int64_t t0 = resil__http_mono_ns();
    o = resil_http_request_attempt(req, &lc);
    resil__http_report(c, 1, &o, resil__http_mono_ns() - t0, 0, -1, RESIL_STOP_NONE, req->key);
  }
  resil_http_response *r = resil_http_request_take_response(req);
  if (out) *out = r;
  else resil_http_response_free(r);
  resil_http_request_free(req);
  return o;
}
