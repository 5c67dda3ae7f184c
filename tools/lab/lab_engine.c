/* The lab's engine path: see lab_engine.h. */
#include "lab_engine.h"

void lab_engine_expect_ran(lab_result *r, size_t n) {
  if (r->path != LAB_PATH_ENGINE) return;
  lab_obs_int(r, "engine_calls", (long long)n);
  lab_expect(r, "ran_on_engine", n > 0, "no call went through the engine");
}

#if defined(RESIL_HAVE_HTTP) && defined(RESIL_HAVE_LOOP)
#include <stdlib.h>
#include <string.h>

#include "resil/clock.h"
#include "resil/loop.h"

struct lab_engine {
  resil_loop *loop;
  resil_loop_adapter *ad;
  resil_engine *e;
  size_t pending; /* requests of the running batch not yet complete */
  size_t calls;   /* submissions accepted, in all */
};

lab_engine *lab_engine_open(lab_result *r, resil_http_client *c) {
  lab_engine *le = calloc(1, sizeof *le);
  if (!lab_check(r, le != NULL, "engine path: out of memory")) return NULL;
  if (!lab_check(r, resil_loop_new(NULL, &le->loop) == RESIL_OK, "engine path: resil_loop_new failed") ||
      !lab_check(r, resil_loop_adapter_new(le->loop, &le->ad) == RESIL_OK,
                 "engine path: resil_loop_adapter_new failed")) {
    lab_engine_close(le);
    return NULL;
  }
  resil_engine_config ec;
  resil_engine_config_init(&ec);
  ec.adapter = le->ad;
  ec.client = c;
  resil_error err;
  if (!lab_check(r, resil_engine_new(&ec, &le->e, &err) == RESIL_OK, "engine path: %s", err.msg)) {
    lab_engine_close(le);
    return NULL;
  }
  return le;
}

void lab_engine_close(lab_engine *le) {
  if (!le) return;
  resil_engine_free(le->e); /* ends what still runs, done_fn from inside */
  resil_loop_adapter_free(le->ad);
  resil_loop_free(le->loop);
  free(le);
}

resil_engine *lab_engine_engine(lab_engine *le) { return le ? le->e : NULL; }

size_t lab_engine_calls(const lab_engine *le) { return le ? le->calls : 0; }

resil_loop *lab_engine_loop(lab_engine *le) { return le ? le->loop : NULL; }

resil_status lab_engine_submit(lab_engine *le, const char *endpoint, const resil_http_args *args,
                               const resil_engine_policies *policies, const resil_ctx *ctx,
                               resil_engine_done_fn done, void *user, resil_error *err) {
  resil_status st =
      resil_engine_call(le->e, endpoint, args, policies, ctx, done, user, NULL, err);
  if (st == RESIL_OK) le->calls++;
  return st;
}

static void finish(lab_engine *le, lab_engine_req *q, resil_outcome o, resil_http_response *resp) {
  q->outcome = o;
  q->response = resp;
  q->done = 1;
  q->done_ns = resil_clock_now_ns(NULL);
  if (--le->pending == 0) resil_loop_stop(le->loop);
}

typedef struct req_ctx {
  lab_engine *le;
  lab_engine_req *q;
} req_ctx;

static void plain_done(void *user, resil_engine_handle *h, resil_outcome o,
                       resil_http_response *resp) {
  (void)h;
  req_ctx *rc = user;
  finish(rc->le, rc->q, o, resp);
}

static void keyed_done(void *user, resil_engine_keyed *h, resil_outcome o,
                       resil_http_response *resp) {
  (void)h;
  req_ctx *rc = user;
  finish(rc->le, rc->q, o, resp);
}

size_t lab_engine_run(lab_engine *le, lab_engine_req *reqs, size_t n) {
  if (!le || n == 0) return 0;
  req_ctx *rcs = calloc(n, sizeof *rcs);
  if (!rcs) return 0;
  le->pending = 0;
  for (size_t i = 0; i < n; i++) {
    lab_engine_req *q = &reqs[i];
    q->done = 0;
    q->done_ns = 0;
    q->submitted = 0;
    q->response = NULL;
    q->outcome = resil_outcome_make(RESIL_NOT_SENT, RESIL_REASON_LOCAL_ERROR);
    memset(&q->err, 0, sizeof q->err);
    rcs[i].le = le;
    rcs[i].q = q;
    /* Counted before the submission: a completion can only come from the
     * loop, which runs after every request is submitted. */
    le->pending++;
    resil_status st;
    if (q->keyed)
      st = resil_engine_call_keyed(le->e, q->endpoint, q->args, q->policies, q->ctx, keyed_done,
                                   &rcs[i], q->report, NULL, &q->err);
    else
      st = resil_engine_call(le->e, q->endpoint, q->args, q->policies, q->ctx, plain_done,
                             &rcs[i], NULL, &q->err);
    if (st == RESIL_OK) {
      q->submitted = 1;
      le->calls++;
    } else
      le->pending--;
  }
  if (le->pending > 0) resil_loop_run(le->loop);
  size_t done = 0;
  for (size_t i = 0; i < n; i++) done += reqs[i].done ? 1u : 0u;
  free(rcs);
  return done;
}

static resil_outcome one(lab_engine *le, const char *endpoint, const resil_http_args *args,
                         resil_retry *retry, const resil_ctx *ctx, int keyed,
                         resil_http_recovery *report, resil_http_response **out) {
  resil_engine_policies pol;
  resil_engine_policies_init(&pol);
  pol.retry = retry;
  lab_engine_req q;
  memset(&q, 0, sizeof q);
  q.endpoint = endpoint;
  q.args = args;
  q.policies = &pol;
  q.ctx = ctx;
  q.keyed = keyed;
  q.report = report;
  lab_engine_run(le, &q, 1);
  if (out)
    *out = q.response;
  else
    resil_http_response_free(q.response);
  return q.outcome;
}

resil_outcome lab_engine_call(lab_engine *le, const char *endpoint, const resil_http_args *args,
                              resil_retry *retry, const resil_ctx *ctx,
                              resil_http_response **out) {
  return one(le, endpoint, args, retry, ctx, 0, NULL, out);
}

resil_outcome lab_engine_call_keyed(lab_engine *le, const char *endpoint,
                                    const resil_http_args *args, resil_retry *retry,
                                    const resil_ctx *ctx, resil_http_recovery *report,
                                    resil_http_response **out) {
  return one(le, endpoint, args, retry, ctx, 1, report, out);
}
#endif
