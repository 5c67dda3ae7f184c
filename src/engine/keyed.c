/* resil_engine_call_keyed() (include/resil/engine.h): the recovery flow of
 * resil_http_call_keyed() on the engine. Every decision is
 * src/http/recover_rules.c's (shared with the blocking recover.c); this file
 * only carries them out: each physical request (write or status query) is a
 * resil_engine_call() without a retry, each wait (retry backoff, PENDING
 * poll) a timer on the engine's heap.
 *
 * Phases of a keyed call:
 *   START   submitted; its timer fires on a later loop iteration
 *   WRITE   a write attempt in the engine (cur)
 *   QUERY   a status query in the engine (cur)
 *   POLL    waiting after a PENDING answer (timer)
 *   BACKOFF waiting for the retry's next write (timer)
 * Cross-thread cancel: under mu, with cur (the engine call in flight) or a
 * post to the loop thread when waiting. The ctx token: the keyed call
 * subscribes to it (tsub) until finish; a signal posts to the loop thread,
 * which ends a wait as its timer would (on_post); a physical request in
 * flight is cancelled by its own engine call's subscription. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine_int.h"
#include "http/message.h"
#include "http/recover_rules.h"
#include "http/response_int.h"

enum { PH_START = 0, PH_WRITE, PH_QUERY, PH_POLL, PH_BACKOFF, PH_DONE };

struct resil_engine_keyed {
  resil__engine_ext ext; /* first */
  atomic_int refs;
  pthread_mutex_t mu;
  int cancel;              /* under mu */
  int finished;            /* under mu */
  resil_engine_handle *cur; /* the engine call in flight, under mu */
  int shutting;            /* the engine is being freed (loop thread) */
  resil_engine *e;
  resil_http_client *c;
  const resil_allocator *alloc;
  /* the caller's args, owned */
  resil_http_args args;
  char *store;
  char key[RESIL_HTTP_MAX_KEY + 1];
  int has_key;
  const http_endpoint *ep;
  resil_engine_policies pol; /* per physical request: retry NULL */
  /* resil_engine_call_chain_keyed: the order of each request's policies
   * (resil__engine_set_plan), when has_plan. */
  resil__engine_plan plan;
  int has_plan;
  /* The instance the latest write went to (-1 none): status queries
   * prefer another (DESIGN §8.4). */
  int w_instance;
  resil_retry *retry;
  resil_ctx ctx;
  resil__recov rv;
  resil__kr kr;
  int kr_started;
  resil_http_recovery rep;
  resil_http_recovery *urep;
  size_t urep_size;
  int phase;
  resil__timer t;
  resil_outcome wo;      /* the last write's outcome   */
  int64_t w_t0, wdur;    /* its start, its duration    */
  uint32_t write_attempt;
  int64_t wait_t0;
  resil_http_response *res; /* the last write's response */
  resil_http_response *rec; /* the recovered one         */
  resil_engine_keyed_done_fn done;
  void *user;
  resil_cancel_sub *tsub; /* the ctx token's subscription, until finish */
};

static void keyed_unref(resil_engine_keyed *k) {
  if (atomic_fetch_sub_explicit(&k->refs, 1, memory_order_acq_rel) != 1) return;
  pthread_mutex_destroy(&k->mu);
  resil__free(k->alloc, k);
}

/* ---- args, copied ------------------------------------------------------------ */

static size_t pairs_size(const resil_http_param *p, size_t n) {
  size_t s = n * sizeof *p;
  for (size_t i = 0; i < n; i++)
    s += (p[i].name ? strlen(p[i].name) + 1 : 0) + (p[i].value ? strlen(p[i].value) + 1 : 0);
  return s;
}

static char *put_str(char **cur, const char *s) {
  if (!s) return NULL;
  size_t n = strlen(s) + 1;
  memcpy(*cur, s, n);
  char *r = *cur;
  *cur += n;
  return r;
}

static const resil_http_param *put_pairs(char **cur, const resil_http_param *p, size_t n) {
  if (!n) return NULL;
  resil_http_param *d = (resil_http_param *)(void *)*cur;
  *cur += n * sizeof *p;
  for (size_t i = 0; i < n; i++) {
    d[i].name = put_str(cur, p[i].name);
    d[i].value = put_str(cur, p[i].value);
  }
  return d;
}

/* k->args = a deep copy of a (full size); a json value is serialised now
 * (compact, as the request builder does) and sent as the body text. */
static int copy_args(resil_engine_keyed *k, const resil_http_args *a) {
  char *dumped = NULL;
  const void *body = a->body;
  size_t blen = a->body_len;
  if (a->json) {
    dumped = json_dumps(a->json, JSON_COMPACT | JSON_ENCODE_ANY);
    if (!dumped) return -1;
    body = dumped;
    blen = strlen(dumped);
  }
  size_t align = sizeof(void *);
  size_t sz = pairs_size(a->params, a->param_count) + pairs_size(a->query, a->query_count) +
              pairs_size(a->headers, a->header_count) + 4 * align + blen + 1;
  k->store = resil__alloc(k->alloc, sz);
  if (!k->store) {
    free(dumped);
    return -1;
  }
  char *cur = k->store;
  k->args = *a;
  k->args.json = NULL;
  k->args.idempotency_key = NULL;
  k->args.params = put_pairs(&cur, a->params, a->param_count);
  cur += (align - (size_t)(cur - k->store) % align) % align;
  k->args.query = put_pairs(&cur, a->query, a->query_count);
  cur += (align - (size_t)(cur - k->store) % align) % align;
  k->args.headers = put_pairs(&cur, a->headers, a->header_count);
  if (body && blen) memcpy(cur, body, blen);
  cur[blen] = '\0';
  k->args.body = body ? cur : NULL;
  k->args.body_len = blen;
  free(dumped);
  return 0;
}

/* ---- the machine ---------------------------------------------------------------- */

static const resil_ctx *actx_of(const resil_engine_keyed *k) { return resil__kr_ctx(&k->kr); }

static void finish(resil_engine_keyed *k, resil_outcome o) {
  resil_engine *e = k->e;
  /* First: once it returns no token_fired runs or will run, and the
   * detach below drops a post it made. */
  resil_cancel_unsubscribe(k->tsub);
  k->tsub = NULL;
  pthread_mutex_lock(&k->mu);
  k->finished = 1;
  pthread_mutex_unlock(&k->mu);
  k->phase = PH_DONE;
  resil__engine_disarm(e, &k->t);
  resil__engine_detach(e, &k->ext);
  resil_http_response *r = k->res;
  if (k->rec) {
    resil_http_response_free(r);
    r = k->rec;
  }
  k->res = k->rec = NULL;
  if (k->urep) resil__sized_out(k->urep, k->urep_size, &k->rep, sizeof k->rep);
  k->done(k->user, k, o, r);
  if (k->kr_started) resil__kr_free(&k->kr);
  resil__recov_free(&k->rv);
  resil__free(k->alloc, k->store);
  k->store = NULL;
  keyed_unref(k);
}

/* Ended by resil_engine_keyed_cancel or the engine's free, between
 * requests or after one. */
static void finish_cancelled(resil_engine_keyed *k) {
  resil_outcome o;
  if (k->rep.write_attempts) {
    o = k->wo;
    if (k->rv.seen_pending) o.flags |= RESIL_OF_STATUS_PENDING;
    o.attempts = k->retry ? k->rep.write_attempts : 0;
  } else {
    o = resil_outcome_make(RESIL_NOT_SENT, RESIL_REASON_CANCELLED);
    o.attempts = 0;
  }
  o.stop = RESIL_STOP_CANCELLED;
  finish(k, o);
}

static int cancelled(resil_engine_keyed *k) {
  pthread_mutex_lock(&k->mu);
  int c = k->cancel;
  pthread_mutex_unlock(&k->mu);
  return c || k->shutting;
}

static void on_write_done(void *user, resil_engine_handle *h, resil_outcome o,
                          resil_http_response *r);
static void on_query_done(void *user, resil_engine_handle *h, resil_outcome o,
                          resil_http_response *r);

/* Submits one physical request to the engine; 0, or -1 when it could not
 * be (then nothing was sent). */
static int submit(resil_engine_keyed *k, const char *ep, const resil_http_args *a,
                  const resil_ctx *cx, resil_engine_done_fn fn) {
  resil_engine_handle *h = NULL;
  if (resil_engine_call(k->e, ep, a, &k->pol, cx, fn, k, &h, NULL) != RESIL_OK) return -1;
  if (k->has_plan) resil__engine_set_plan(h, &k->plan);
  /* A status query is reported once its answer is read (on_query_done). */
  if (fn == on_query_done) {
    resil__engine_defer_report(h);
    resil__http_request_avoid(resil__engine_request(h), k->w_instance);
  }
  pthread_mutex_lock(&k->mu);
  k->cur = h;
  int c = k->cancel;
  pthread_mutex_unlock(&k->mu);
  /* A cancel that came meanwhile found no request to cancel. */
  if (c) resil_engine_cancel(h);
  return 0;
}

/* Takes the finished request back: 1 when the flow goes on. */
static int took_back(resil_engine_keyed *k, resil_engine_handle *h) {
  pthread_mutex_lock(&k->mu);
  k->cur = NULL;
  pthread_mutex_unlock(&k->mu);
  resil_engine_handle_release(h);
  return !cancelled(k);
}

static void write_attempt(resil_engine_keyed *k);

static void after_write(resil_engine_keyed *k, resil_outcome o) {
  k->wo = o;
  k->rep.write_attempts++;
  if (resil__recov_should_ask(&k->rv, &o)) {
    resil__recov_new_write(&k->rv);
    k->write_attempt = actx_of(k)->attempt;
    k->phase = PH_QUERY;
    resil_http_args a;
    resil_ctx qctx;
    resil__recov_query_begin(&k->rv, actx_of(k), &a, &qctx);
    if (submit(k, k->rv.sep->name, &a, &qctx, on_query_done) != 0) {
      resil_outcome qo = resil_outcome_make(RESIL_NOT_SENT, RESIL_REASON_LOCAL_ERROR);
      on_query_done(k, NULL, qo, NULL);
    }
    return;
  }
  int64_t delay = 0;
  resil_outcome final;
  if (!resil__kr_next(&k->kr, &o, k->wdur, &delay, &final)) {
    finish(k, final);
    return;
  }
  if (delay <= 0) {
    write_attempt(k);
    return;
  }
  k->phase = PH_BACKOFF;
  if (resil__engine_arm(k->e, &k->t, resil__sat_add(resil__engine_now(k->e), delay)) != 0)
    write_attempt(k);
}

static void write_attempt(resil_engine_keyed *k) {
  if (cancelled(k)) {
    finish_cancelled(k);
    return;
  }
  k->phase = PH_WRITE;
  resil_http_args a = k->args;
  a.idempotency_key = k->has_key ? k->key : NULL;
  k->w_t0 = resil__engine_now(k->e);
  if (submit(k, k->ep->name, &a, actx_of(k), on_write_done) != 0) {
    k->wdur = 0;
    after_write(k, resil_outcome_make(RESIL_NOT_SENT, RESIL_REASON_LOCAL_ERROR));
  }
}

static void on_write_done(void *user, resil_engine_handle *h, resil_outcome o,
                          resil_http_response *r) {
  resil_engine_keyed *k = user;
  k->wdur = resil__engine_now(k->e) - k->w_t0;
  resil_http_response_free(k->res);
  k->res = r;
  k->w_instance = r ? resil_http_response_instance(r) : -1;
  if (!took_back(k, h)) {
    k->wo = o;
    k->rep.write_attempts++;
    finish_cancelled(k);
    return;
  }
  after_write(k, o);
}

static void on_query_done(void *user, resil_engine_handle *h, resil_outcome o,
                          resil_http_response *q) {
  resil_engine_keyed *k = user;
  int usable = 0;
  int64_t ra = -1;
  resil_http_response *rec = NULL;
  resil_http_op_state s =
      resil__recov_query_end(&k->rv, &o, q, k->write_attempt, &usable, &ra, &rec);
  resil_http_response_free(q);
  /* The listener sees which query read the stored result (the blocking
   * path's rule). */
  if (h) {
    resil_outcome ro = resil__recov_query_reported(&o, usable, s);
    resil__engine_report(h, &ro, k->rv.key); /* the call's key, as blocking */
  }
  int go = h ? took_back(k, h) : !cancelled(k);
  resil__recov_step step = resil__recov_after(&k->rv, usable, s);
  if (step == RESIL__RECOV_COMMITTED) {
    /* Even when cancelled meanwhile: the server reported this result. */
    k->rec = rec;
    finish(k, resil__recov_final_committed(&k->rv, &k->kr, rec, k->wdur));
    return;
  }
  if (!go) {
    finish_cancelled(k);
    return;
  }
  if (step == RESIL__RECOV_UNKNOWN) {
    int64_t delay = 0;
    resil_outcome final;
    if (!resil__kr_next(&k->kr, &k->wo, k->wdur, &delay, &final)) {
      finish(k, final);
      return;
    }
    if (delay <= 0) {
      write_attempt(k);
      return;
    }
    k->phase = PH_BACKOFF;
    if (resil__engine_arm(k->e, &k->t, resil__sat_add(resil__engine_now(k->e), delay)) != 0)
      write_attempt(k);
    return;
  }
  int64_t wait = resil__recov_poll_wait(&k->rv, actx_of(k), ra);
  if (wait < 0) {
    finish(k, resil__recov_final_pending(&k->kr, &k->wo, k->wdur));
    return;
  }
  k->phase = PH_POLL;
  k->wait_t0 = resil__engine_now(k->e);
  if (resil__engine_arm(k->e, &k->t, resil__sat_add(k->wait_t0, wait)) != 0)
    finish(k, resil__recov_final_pending(&k->kr, &k->wo, k->wdur));
}

/* Another status query after a PENDING wait. */
static void poll_again(resil_engine_keyed *k) {
  resil__recov_waited(&k->rv, resil__engine_now(k->e) - k->wait_t0);
  const resil_ctx *actx = actx_of(k);
  if (resil_cancel_is_set(actx->cancel)) {
    finish(k, resil__recov_final_pending(&k->kr, &k->wo, k->wdur));
    return;
  }
  k->phase = PH_QUERY;
  resil_http_args a;
  resil_ctx qctx;
  resil__recov_query_begin(&k->rv, actx, &a, &qctx);
  if (submit(k, k->rv.sep->name, &a, &qctx, on_query_done) != 0)
    on_query_done(k, NULL, resil_outcome_make(RESIL_NOT_SENT, RESIL_REASON_LOCAL_ERROR), NULL);
}

static void on_timer(void *arg) {
  resil_engine_keyed *k = arg;
  if (cancelled(k)) {
    finish_cancelled(k);
    return;
  }
  switch (k->phase) {
  case PH_START: {
    resil_outcome final;
    k->kr_started = 1;
    if (!resil__kr_begin(&k->kr, k->retry, &k->ctx, &final)) {
      finish(k, final);
      return;
    }
    write_attempt(k);
    return;
  }
  case PH_BACKOFF:
    write_attempt(k);
    return;
  case PH_POLL:
    poll_again(k);
    return;
  default:
    return;
  }
}

/* A cancel, or a signal of the ctx token, reached the loop thread: a wait
 * ends now (a token: as its timer would, which reads the token). */
static void on_post(resil__engine_ext *x) {
  resil_engine_keyed *k = (resil_engine_keyed *)(void *)x;
  if (k->phase != PH_START && k->phase != PH_POLL && k->phase != PH_BACKOFF) return;
  if (cancelled(k)) {
    finish_cancelled(k);
  } else if (resil_cancel_is_set(k->ctx.cancel)) {
    resil__engine_disarm(k->e, &k->t);
    on_timer(k);
  }
}

/* The ctx token's listener: any thread, while k->tsub is live. */
static void token_fired(void *user) {
  resil_engine_keyed *k = user;
  resil__engine_post(k->e, &k->ext);
}

static void on_engine_free(resil__engine_ext *x) {
  resil_engine_keyed *k = (resil_engine_keyed *)(void *)x;
  k->shutting = 1;
  resil__engine_detach(k->e, &k->ext);
  /* A request in flight ends with the engine's calls, and the flow with it. */
  if (k->phase == PH_START || k->phase == PH_POLL || k->phase == PH_BACKOFF) finish_cancelled(k);
}

void resil__engine_keyed_set_plan(resil_engine_keyed *k, const resil__engine_plan *p) {
  k->plan = *p;
  k->has_plan = 1;
}

/* ---- public API -------------------------------------------------------------- */

resil_status resil_engine_call_keyed_sized(resil_engine *e, const char *endpoint,
                                           const resil_http_args *uargs,
                                           const resil_engine_policies *policies,
                                           const resil_ctx *ctx, resil_engine_keyed_done_fn done,
                                           void *user, resil_http_recovery *report,
                                           size_t report_size, resil_engine_keyed **out,
                                           resil_error *err) {
  if (out) *out = NULL;
  if (!e) return resil__err(err, RESIL_EINVAL, NULL, "engine must not be NULL");
  if (!done) return resil__err(err, RESIL_EINVAL, "done", "must not be NULL");
  if (resil__engine_freeing(e))
    return resil__err(err, RESIL_ESTATE, NULL, "the engine is being freed (a done_fn run by resil_engine_free)");
  resil_ctx lc;
  const resil_ctx *cx = resil__ctx_in(&lc, ctx);
  if (!cx) return resil__err(err, RESIL_EINVAL, "ctx", "call resil_ctx_init()");
  resil_engine_policies pol;
  resil_engine_policies_init(&pol);
  resil_status st;
  if (policies &&
      (st = resil__sized_in(&pol, sizeof pol, policies, offsetof(resil_engine_policies, attempt_timeout_ns) + sizeof(int64_t),
                            "resil_engine_policies", "resil_engine_policies_init", err)))
    return st;
  resil_http_args args;
  if ((st = resil__http_args_in(&args, uargs, err))) return st;
  resil_http_client *c = resil__engine_client(e);
  /* The request is built once here: it checks the args and fixes the key
   * (the one rule for keys, message.c). */
  resil_http_request *req = NULL;
  if ((st = resil_http_request_new(c, endpoint, &args, &req, err))) return st;
  resil_engine_keyed *k = resil__calloc(c->t.alloc, sizeof *k);
  if (!k) {
    resil_http_request_free(req);
    return resil__err(err, RESIL_ENOMEM, NULL, "out of memory");
  }
  k->alloc = c->t.alloc;
  k->w_instance = -1;
  k->e = e;
  k->c = c;
  k->ep = req->ep;
  if (req->key) {
    snprintf(k->key, sizeof k->key, "%s", req->key);
    snprintf(k->rep.idempotency_key, sizeof k->rep.idempotency_key, "%s", req->key);
    k->has_key = 1;
  }
  k->ctx = *cx;
  k->ctx.flags |= req->flags;
  k->ctx.idempotency_key = k->has_key ? k->key : NULL;
  resil_http_request_free(req);
  k->rep.struct_size = sizeof k->rep;
  k->retry = pol.retry;
  k->pol = pol;
  k->pol.retry = NULL;
  if (copy_args(k, &args) != 0 ||
      resil__recov_init(&k->rv, c, k->ep, k->has_key ? k->key : NULL, &k->args, &k->rep) != 0) {
    resil__free(k->alloc, k->store);
    resil__free(k->alloc, k);
    return resil__err(err, RESIL_ENOMEM, NULL, "out of memory");
  }
  if (pthread_mutex_init(&k->mu, NULL) != 0) {
    resil__recov_free(&k->rv);
    resil__free(k->alloc, k->store);
    resil__free(k->alloc, k);
    return resil__err(err, RESIL_ESYS, NULL, "pthread_mutex_init failed");
  }
  atomic_init(&k->refs, out ? 2 : 1);
  k->urep = report;
  k->urep_size = report_size;
  k->done = done;
  k->user = user;
  k->phase = PH_START;
  k->t.cb = on_timer;
  k->t.arg = k;
  k->ext.on_post = on_post;
  k->ext.on_free = on_engine_free;
  /* The start is deferred to a later loop iteration: done is never called
   * from inside this function. */
  resil_status ts = RESIL_OK;
  if (k->ctx.cancel) ts = resil_cancel_subscribe(k->ctx.cancel, token_fired, k, &k->tsub);
  /* RESIL_ESTATE (already set): the start reads the token. */
  if ((ts != RESIL_OK && ts != RESIL_ESTATE) ||
      resil__engine_arm(e, &k->t, resil__engine_now(e)) != 0) {
    resil_cancel_unsubscribe(k->tsub);
    resil__engine_detach(e, &k->ext); /* drops a post token_fired made */
    pthread_mutex_destroy(&k->mu);
    resil__recov_free(&k->rv);
    resil__free(k->alloc, k->store);
    resil__free(k->alloc, k);
    return resil__err(err, RESIL_ENOMEM, NULL, "out of memory");
  }
  resil__engine_attach(e, &k->ext);
  if (out) *out = k;
  if (err) resil_error_clear(err);
  return RESIL_OK;
}

void resil_engine_keyed_cancel(resil_engine_keyed *k) {
  if (!k) return;
  pthread_mutex_lock(&k->mu);
  if (k->finished || k->cancel) {
    pthread_mutex_unlock(&k->mu);
    return;
  }
  k->cancel = 1;
  resil_engine_handle *h = k->cur;
  /* Waiting (or between steps on the loop thread, which checks the flag
   * before its next step): the loop thread is told. */
  if (!h) resil__engine_post(k->e, &k->ext);
  else resil_engine_cancel(h);
  pthread_mutex_unlock(&k->mu);
}

void resil_engine_keyed_release(resil_engine_keyed *k) {
  if (k) keyed_unref(k);
}
