/* libresil-http recovery flow with other threads involved: a PENDING
 * operation completed by another thread while the client waits, PENDING
 * until the deadline (the outcome stays UNKNOWN, and a chain fallback can
 * answer PENDING), a cancellation during the wait, and many keyed calls
 * recovering at once. Runs again under ThreadSanitizer. */
#include <stdlib.h>

#include "fixture/fixture.h"
#include "resil/chain.h"
#include "test_http_common.h"

static const resil_http_endpoint eps[] = {
    {.struct_size = sizeof(resil_http_endpoint), .name = "op_status", .path = "/operations/{key}", .response_codec = RESIL_HTTP_CODEC_JSON},
    {.struct_size = sizeof(resil_http_endpoint), .name = "slow_keyed", .method = RESIL_HTTP_POST, .path = "/slow", .query = "ms={ms}",
     .idempotency_key = RESIL_HTTP_KEY_SEND, .response_codec = RESIL_HTTP_CODEC_JSON,
     .status_endpoint = "op_status"},
    {.struct_size = sizeof(resil_http_endpoint), .name = "idem_close", .method = RESIL_HTTP_POST, .path = "/idem-close",
     .idempotency_key = RESIL_HTTP_KEY_SEND, .response_codec = RESIL_HTTP_CODEC_JSON,
     .status_endpoint = "op_status"},
};
#define NEPS (sizeof eps / sizeof eps[0])

typedef struct client_opts {
  int64_t poll_ms;
  int64_t pending_max_ms;
  int64_t response_timeout_ms;
} client_opts;

/* Writes to the slow route time out after WRITE_TIMEOUT_MS (the status
 * queries share that timeout, and the margin keeps them inside it on a
 * loaded machine); PENDING is polled every poll_ms. */
#define WRITE_TIMEOUT_MS 400
static void apply_opts(resil_http_client_config *cfg, void *u) {
  client_opts *o = u;
  cfg->response_timeout_ns = MS(o->response_timeout_ms ? o->response_timeout_ms : WRITE_TIMEOUT_MS);
  cfg->status_poll_ns = MS(o->poll_ms);
  if (o->pending_max_ms) cfg->pending_wait_max_ns = MS(o->pending_max_ms);
}

/* The fixture's operation store: key stored PENDING, as while its
 * first request is still executing. */
static void op_pending(resil_fixture *f, const char *key) {
  assert_int_equal(resil_fixture_op_pending(f, key, NULL, NULL), 0);
}

typedef struct committer {
  resil_fixture *f;
  const char *key;
  const char *body;
  long after_ms;
  int rc;
} committer;

static void *commit_later(void *u) {
  committer *cm = u;
  sleep_ms(cm->after_ms);
  cm->rc = resil_fixture_op_complete(cm->f, cm->key, 201, cm->body, 1);
  return NULL;
}

/* ---- PENDING, then COMMITTED -------------------------------------------------- */

static void pending_operation_committed_meanwhile_is_recovered(void **state) {
  fx_state *s = *state;
  client_opts opt = {.poll_ms = 40};
  resil_http_client *c = client_on(s->f, eps, NEPS, apply_opts, &opt);
  resil_retry *retry = retry_n(3);
  const char *key = "pending-then-committed";
  op_pending(s->f, key);
  committer cm = {.f = s->f, .key = key, .body = "{\"key\":\"pending-then-committed\",\"effect\":1}",
                  .after_ms = WRITE_TIMEOUT_MS + 150};
  pthread_t th;
  assert_int_equal(pthread_create(&th, NULL, commit_later, &cm), 0);

  resil_http_param ps[] = {{"ms", "2000"}};
  resil_http_args args;
  resil_http_args_init(&args);
  args.params = ps;
  args.param_count = 1;
  args.idempotency_key = key;
  resil_ctx ctx;
  resil_ctx_init(&ctx);
  resil_ctx_set_timeout_ns(&ctx, MS(3000));
  resil_http_response *r = NULL;
  resil_http_recovery rep;
  resil_outcome o = resil_http_call_keyed(c, "slow_keyed", &args, retry, NULL, &ctx, &r, &rep);
  pthread_join(th, NULL);
  assert_int_equal(cm.rc, 0);

  assert_int_equal(o.kind, RESIL_ANSWERED);
  assert_int_equal(o.http_status, 201);
  assert_true(o.flags & RESIL_OF_RECOVERED);
  assert_false(o.flags & RESIL_OF_STATUS_PENDING);
  assert_int_equal(o.attempts, 1);
  assert_int_equal(rep.write_attempts, 1);
  assert_int_equal(rep.state, RESIL_HTTP_OP_COMMITTED);
  /* The write timed out at ~400 ms and the commit came at ~550 ms: at
   * least one PENDING answer came before the COMMITTED one. */
  assert_true(rep.pending_answers >= 1);
  assert_int_equal(rep.status_queries, rep.pending_answers + 1);
  assert_true(rep.pending_wait_ns >= MS(40));
  assert_int_equal(resil_fixture_attempts(s->f, "slow"), 1);
  assert_int_equal(resil_fixture_attempts(s->f, "operations"), (long)rep.status_queries);
  assert_true(resil_http_response_recovered(r));
  assert_string_equal(resil_http_response_body(r, NULL), cm.body);
  assert_int_equal(json_integer_value(json_object_get(resil_http_response_json(r), "effect")), 1);
  resil_http_stats st;
  resil_http_client_get_stats(c, &st);
  assert_int_equal(st.status_pending, rep.pending_answers);
  assert_int_equal(st.status_committed, 1);
  assert_int_equal(st.recovered, 1);
  resil_http_response_free(r);
  resil_retry_free(retry);
  resil_http_client_free(c);
}

/* ---- PENDING until the end ----------------------------------------------------- */

static void pending_until_the_deadline_stays_unknown_with_the_pending_flag(void **state) {
  fx_state *s = *state;
  client_opts opt = {.poll_ms = 50};
  resil_http_client *c = client_on(s->f, eps, NEPS, apply_opts, &opt);
  resil_retry *retry = retry_n(3);
  const char *key = "pending-forever";
  op_pending(s->f, key);
  resil_http_param ps[] = {{"ms", "3000"}};
  resil_http_args args;
  resil_http_args_init(&args);
  args.params = ps;
  args.param_count = 1;
  args.idempotency_key = key;
  resil_ctx ctx;
  resil_ctx_init(&ctx);
  resil_ctx_set_timeout_ns(&ctx, MS(1000));
  int64_t t0 = mono_ms();
  resil_http_response *r = NULL;
  resil_http_recovery rep;
  resil_outcome o = resil_http_call_keyed(c, "slow_keyed", &args, retry, NULL, &ctx, &r, &rep);
  int64_t took = mono_ms() - t0;

  assert_outcome(o, RESIL_UNKNOWN, RESIL_REASON_TIMEOUT);
  assert_false(resil_outcome_is_success(&o));
  assert_true(o.flags & RESIL_OF_STATUS_PENDING);
  assert_false(o.flags & RESIL_OF_RECOVERED);
  assert_int_equal(o.stop, RESIL_STOP_DEADLINE);
  assert_int_equal(o.attempts, 1);
  assert_int_equal(rep.state, RESIL_HTTP_OP_PENDING);
  assert_int_equal(rep.write_attempts, 1);
  assert_true(rep.pending_answers >= 3);
  assert_int_equal(rep.pending_answers, rep.status_queries);
  /* The wait stopped before the deadline rather than sleeping past it. */
  assert_true(took >= 850);
  assert_true(took < 1000 + 1000);
  /* No re-send of a write the server is still working on. */
  assert_int_equal(resil_fixture_attempts(s->f, "slow"), 1);
  assert_false(resil_http_response_recovered(r));
  assert_int_equal(resil_http_response_status(r), 0);
  resil_retry_stats rs;
  resil_retry_get_stats(retry, &rs);
  assert_int_equal(rs.calls, 1);
  assert_int_equal(rs.stops[RESIL_STOP_DEADLINE], 1);
  resil_http_response_free(r);

  /* Without a retry: the same answer, stop NONE. */
  resil_ctx_set_timeout_ns(&ctx, MS(800));
  o = resil_http_call_keyed(c, "slow_keyed", &args, NULL, NULL, &ctx, NULL, &rep);
  assert_outcome(o, RESIL_UNKNOWN, RESIL_REASON_TIMEOUT);
  assert_true(o.flags & RESIL_OF_STATUS_PENDING);
  assert_int_equal(o.stop, RESIL_STOP_NONE);
  assert_int_equal(rep.state, RESIL_HTTP_OP_PENDING);
  resil_retry_free(retry);
  resil_http_client_free(c);
}

static void pending_wait_max_bounds_a_call_without_deadline(void **state) {
  fx_state *s = *state;
  client_opts opt = {.poll_ms = 50, .pending_max_ms = 200};
  resil_http_client *c = client_on(s->f, eps, NEPS, apply_opts, &opt);
  resil_retry *retry = retry_n(3);
  op_pending(s->f, "pending-no-deadline");
  resil_http_param ps[] = {{"ms", "3000"}};
  resil_http_args args;
  resil_http_args_init(&args);
  args.params = ps;
  args.param_count = 1;
  args.idempotency_key = "pending-no-deadline";
  int64_t t0 = mono_ms();
  resil_http_recovery rep;
  resil_outcome o = resil_http_call_keyed(c, "slow_keyed", &args, retry, NULL, NULL, NULL, &rep);
  int64_t took = mono_ms() - t0;
  assert_int_equal(o.kind, RESIL_UNKNOWN);
  assert_true(o.flags & RESIL_OF_STATUS_PENDING);
  assert_int_equal(o.stop, RESIL_STOP_DEADLINE);
  assert_int_equal(rep.write_attempts, 1);
  assert_true(took >= WRITE_TIMEOUT_MS + 150);
  assert_true(took < WRITE_TIMEOUT_MS + 200 + 1000);
  assert_int_equal(resil_fixture_attempts(s->f, "slow"), 1);
  resil_retry_free(retry);
  resil_http_client_free(c);
}

typedef struct canceller {
  resil_cancel *tok;
  long after_ms;
} canceller;

static void *cancel_later(void *u) {
  canceller *cn = u;
  sleep_ms(cn->after_ms);
  resil_cancel_signal(cn->tok);
  return NULL;
}

static void cancellation_during_the_pending_wait_ends_the_call(void **state) {
  fx_state *s = *state;
  client_opts opt = {.poll_ms = 50};
  resil_http_client *c = client_on(s->f, eps, NEPS, apply_opts, &opt);
  resil_retry *retry = retry_n(3);
  op_pending(s->f, "pending-cancelled");
  resil_cancel *tok = NULL;
  assert_status(RESIL_OK, resil_cancel_new(&tok));
  canceller cn = {.tok = tok, .after_ms = WRITE_TIMEOUT_MS + 200};
  pthread_t th;
  assert_int_equal(pthread_create(&th, NULL, cancel_later, &cn), 0);
  resil_http_param ps[] = {{"ms", "3000"}};
  resil_http_args args;
  resil_http_args_init(&args);
  args.params = ps;
  args.param_count = 1;
  args.idempotency_key = "pending-cancelled";
  resil_ctx ctx;
  resil_ctx_init(&ctx);
  ctx.cancel = tok;
  resil_ctx_set_timeout_ns(&ctx, MS(5000));
  int64_t t0 = mono_ms();
  resil_http_recovery rep;
  resil_outcome o = resil_http_call_keyed(c, "slow_keyed", &args, retry, NULL, &ctx, NULL, &rep);
  int64_t took = mono_ms() - t0;
  pthread_join(th, NULL);
  assert_int_equal(o.kind, RESIL_UNKNOWN);
  assert_true(o.flags & RESIL_OF_STATUS_PENDING);
  assert_int_equal(o.stop, RESIL_STOP_CANCELLED);
  assert_int_equal(rep.state, RESIL_HTTP_OP_PENDING);
  assert_true(took < 2000);
  assert_int_equal(resil_fixture_attempts(s->f, "slow"), 1);
  resil_cancel_free(tok);
  resil_retry_free(retry);
  resil_http_client_free(c);
}

/* ---- chain fallback ------------------------------------------------------------- */

typedef struct keyed_arg {
  resil_http_client *c;
  resil_retry *retry;
  const resil_http_args *args;
} keyed_arg;

static resil_outcome keyed_call_fn(void *arg, const resil_ctx *ctx) {
  keyed_arg *k = arg;
  return resil_http_call_keyed(k->c, "slow_keyed", k->args, k->retry, NULL, ctx, NULL, NULL);
}

typedef struct fb_seen {
  int calls;
  uint32_t flags;
  resil_outcome_kind kind;
} fb_seen;

/* Answers PENDING when the status endpoint said so, UNAVAILABLE otherwise;
 * it never claims the write succeeded. */
static resil_fallback_kind pending_fallback(void *fallback_arg, void *call_arg,
                                            const resil_outcome *final) {
  (void)call_arg;
  fb_seen *f = fallback_arg;
  f->calls++;
  f->flags = final->flags;
  f->kind = final->kind;
  return (final->flags & RESIL_OF_STATUS_PENDING) ? RESIL_FALLBACK_PENDING
                                                  : RESIL_FALLBACK_UNAVAILABLE;
}

static void chain_fallback_answers_pending_and_never_success(void **state) {
  fx_state *s = *state;
  client_opts opt = {.poll_ms = 50};
  resil_http_client *c = client_on(s->f, eps, NEPS, apply_opts, &opt);
  op_pending(s->f, "pending-fallback");
  fb_seen seen = {0};
  resil_chain_config cc;
  resil_chain_config_init(&cc);
  cc.total_timeout_ns = MS(900);
  cc.fallback = pending_fallback;
  cc.fallback_arg = &seen;
  resil_chain *ch = NULL;
  assert_status(RESIL_OK, resil_chain_new(&cc, &ch, NULL));
  resil_http_param ps[] = {{"ms", "3000"}};
  resil_http_args args;
  resil_http_args_init(&args);
  args.params = ps;
  args.param_count = 1;
  args.idempotency_key = "pending-fallback";
  keyed_arg ka = {.c = c, .retry = NULL, .args = &args};
  resil_ctx ctx;
  resil_ctx_init(&ctx);
  ctx.flags = RESIL_CALL_STABLE_KEY;
  resil_outcome o = resil_chain_run(ch, &ctx, keyed_call_fn, &ka);
  assert_int_equal(seen.calls, 1);
  assert_int_equal(seen.kind, RESIL_UNKNOWN);
  assert_true(seen.flags & RESIL_OF_STATUS_PENDING);
  assert_int_equal(o.kind, RESIL_UNKNOWN);
  assert_false(resil_outcome_is_success(&o));
  assert_true(o.flags & RESIL_OF_FALLBACK_PENDING);
  assert_true(o.flags & RESIL_OF_STATUS_PENDING);
  assert_int_equal(resil_fixture_attempts(s->f, "slow"), 1);
  resil_chain_free(ch);
  resil_http_client_free(c);
}

/* ---- many calls at once --------------------------------------------------------- */

#define NTHREADS 8

typedef struct worker {
  resil_http_client *c;
  char key[32];
  resil_outcome o;
  resil_http_recovery rep;
  char body[128];
} worker;

static void *run_worker(void *u) {
  worker *w = u;
  resil_http_args args;
  resil_http_args_init(&args);
  args.idempotency_key = w->key;
  resil_http_response *r = NULL;
  w->o = resil_http_call_keyed(w->c, "idem_close", &args, NULL, NULL, NULL, &r, &w->rep);
  snprintf(w->body, sizeof w->body, "%s", r ? (const char *)resil_http_response_body(r, NULL) : "");
  resil_http_response_free(r);
  return NULL;
}

static void concurrent_keyed_calls_each_recover_their_own_result(void **state) {
  fx_state *s = *state;
  client_opts opt = {.poll_ms = 50, .response_timeout_ms = 10000};
  resil_http_client *c = client_on(s->f, eps, NEPS, apply_opts, &opt);
  worker w[NTHREADS];
  pthread_t th[NTHREADS];
  for (int i = 0; i < NTHREADS; i++) {
    memset(&w[i], 0, sizeof w[i]);
    w[i].c = c;
    snprintf(w[i].key, sizeof w[i].key, "mt-key-%d", i);
    assert_int_equal(pthread_create(&th[i], NULL, run_worker, &w[i]), 0);
  }
  for (int i = 0; i < NTHREADS; i++) pthread_join(th[i], NULL);
  for (int i = 0; i < NTHREADS; i++) {
    assert_int_equal(w[i].o.http_status, 201);
    assert_true(w[i].o.flags & RESIL_OF_RECOVERED);
    assert_int_equal(w[i].rep.write_attempts, 1);
    assert_int_equal(w[i].rep.status_queries, 1);
    /* Each call got the result stored under its own key. */
    assert_non_null(strstr(w[i].body, w[i].key));
  }
  assert_int_equal(resil_fixture_effects(s->f, "idem_close"), NTHREADS);
  resil_http_stats st;
  resil_http_client_get_stats(c, &st);
  assert_int_equal(st.status_queries, NTHREADS);
  assert_int_equal(st.status_committed, NTHREADS);
  assert_int_equal(st.recovered, NTHREADS);
  assert_int_equal(st.leased, 0);
  resil_http_client_free(c);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(pending_operation_committed_meanwhile_is_recovered, fx_setup,
                                      fx_teardown),
      cmocka_unit_test_setup_teardown(
          pending_until_the_deadline_stays_unknown_with_the_pending_flag, fx_setup, fx_teardown),
      cmocka_unit_test_setup_teardown(pending_wait_max_bounds_a_call_without_deadline, fx_setup,
                                      fx_teardown),
      cmocka_unit_test_setup_teardown(cancellation_during_the_pending_wait_ends_the_call, fx_setup,
                                      fx_teardown),
      cmocka_unit_test_setup_teardown(chain_fallback_answers_pending_and_never_success, fx_setup,
                                      fx_teardown),
      cmocka_unit_test_setup_teardown(concurrent_keyed_calls_each_recover_their_own_result,
                                      fx_setup, fx_teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
