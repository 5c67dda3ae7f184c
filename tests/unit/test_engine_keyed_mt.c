/* resil_engine_call_keyed() (engine.h): the recovery flow of
 * resil_http_call_keyed() on the engine, against the real fixture on
 * 127.0.0.1 and its operation store: COMMITTED after a lost answer (one
 * effect, no re-send), PENDING polled on timers until COMMITTED or until
 * pending_wait_max_ns, UNKNOWN (404) re-sent by the retry with the same
 * key, cancellation from another thread during a PENDING wait, the
 * engine's free ending a waiting keyed call, submit errors, the status query
 * that read the stored result reported RESIL_OF_RECOVERED (the event log). Completion once,
 * on the loop thread, never inside submit. Runs on the test adapter and on
 * the built-in loop; concurrency test (TSan). */
#include "test_engine_common.h"

#include "resil/breaker.h"
#include "resil/events.h"

static const resil_http_endpoint eps[] = {
    {.struct_size = sizeof(resil_http_endpoint), .name = "op_status", .path = "/operations/{key}",
     .response_codec = RESIL_HTTP_CODEC_JSON},
    {.struct_size = sizeof(resil_http_endpoint), .name = "idem_post", .method = RESIL_HTTP_POST,
     .path = "/idem/{name}", .query = "sleep_ms={ms}", .idempotency_key = RESIL_HTTP_KEY_SEND,
     .content_type = "application/json", .status_endpoint = "op_status"},
    {.struct_size = sizeof(resil_http_endpoint), .name = "idem_close", .method = RESIL_HTTP_POST,
     .path = "/idem-close", .idempotency_key = RESIL_HTTP_KEY_SEND,
     .content_type = "application/json", .status_endpoint = "op_status"},
    {.struct_size = sizeof(resil_http_endpoint), .name = "slow_keyed", .method = RESIL_HTTP_POST,
     .path = "/slow", .query = "ms={ms}", .idempotency_key = RESIL_HTTP_KEY_SEND,
     .response_codec = RESIL_HTTP_CODEC_JSON, .status_endpoint = "op_status"},
};
#define NEPS (sizeof eps / sizeof eps[0])

typedef struct kopts {
  int64_t timeout_ms;
  int64_t poll_ms;
  int64_t pending_max_ms;
} kopts;

static void apply(resil_http_client_config *cfg, void *u) {
  kopts *o = u;
  cfg->response_timeout_ns = MS(o->timeout_ms);
  if (o->poll_ms) cfg->status_poll_ns = MS(o->poll_ms);
  if (o->pending_max_ms) cfg->pending_wait_max_ns = MS(o->pending_max_ms);
}

typedef struct kdone {
  atomic_size_t done;
  int in_submit;
  size_t inside_submit;
  size_t wrong_thread;
  pthread_t loop_thread;
  resil_outcome o;
  resil_http_response *r;
  int64_t at_ms;
} kdone;

static void on_kdone(void *user, resil_engine_keyed *h, resil_outcome o, resil_http_response *r) {
  (void)h;
  kdone *d = user;
  if (d->in_submit) d->inside_submit++;
  if (!pthread_equal(pthread_self(), d->loop_thread)) d->wrong_thread++;
  d->o = o;
  resil_http_response_free(d->r);
  d->r = r;
  d->at_ms = mono_ms();
  atomic_fetch_add(&d->done, 1);
}

static resil_retry *retry_fixed(uint32_t n, int64_t wait_ms) {
  resil_retry_config rc;
  resil_retry_config_init(&rc);
  rc.max_attempts = n;
  rc.backoff = RESIL_RETRY_FIXED;
  rc.wait_ns = MS(wait_ms);
  resil_retry *r = NULL;
  assert_int_equal(resil_retry_new(&rc, &r, NULL), RESIL_OK);
  return r;
}

/* Submits a keyed call of ep with kv params, key, body and the retry. */
static void submit_keyed(resil_engine *e, kdone *d, const char *ep, const char *const *kv,
                         const char *key, const char *body, resil_retry *retry, int64_t timeout_ms,
                         resil_http_recovery *rep, resil_engine_keyed **out) {
  resil_http_param ps[4];
  size_t n = 0;
  for (; kv && kv[2 * n] && n < 4; n++) ps[n] = (resil_http_param){kv[2 * n], kv[2 * n + 1]};
  resil_http_args args;
  resil_http_args_init(&args);
  args.params = ps;
  args.param_count = n;
  args.idempotency_key = key;
  args.body = body;
  args.body_len = body ? strlen(body) : 0;
  resil_engine_policies pol;
  resil_engine_policies_init(&pol);
  pol.retry = retry;
  resil_ctx ctx;
  resil_ctx_init(&ctx);
  if (timeout_ms) resil_ctx_set_timeout_ns(&ctx, MS(timeout_ms));
  resil_error err;
  d->in_submit = 1;
  resil_status st =
      resil_engine_call_keyed(e, ep, &args, &pol, &ctx, on_kdone, d, rep, out, &err);
  d->in_submit = 0;
  if (st != RESIL_OK) fail_msg("submit: %s", err.msg);
}

static void kd_init(kdone *d) {
  memset(d, 0, sizeof *d);
  d->loop_thread = pthread_self();
}

static void kd_check_once(test_loop *l, kdone *d) {
  /* Exactly once: a few more iterations bring no second completion. */
  for (int i = 0; i < 5; i++) tl_run_once(l, 10);
  assert_int_equal(atomic_load(&d->done), 1);
  assert_int_equal(d->inside_submit, 0);
  assert_int_equal(d->wrong_thread, 0);
}

/* ---- COMMITTED after a lost answer (I1's setup) ---------------------------------- */

static void commit_then_slow_answer_is_recovered_committed_with_one_effect(void **state) {
  fx_state *s = *state;
  /* I1's setup with wider margins for a loaded machine: the write's answer
   * is lost at 300 ms, the status query has 300 ms too. */
  kopts opt = {.timeout_ms = 300};
  te_env *t = te_open(s->f, eps, NEPS, apply, &opt);
  resil_retry *retry = retry_fixed(3, 30);
  kdone d;
  kd_init(&d);
  resil_http_recovery rep;
  memset(&rep, 0xab, sizeof rep);
  submit_keyed(t->e, &d, "idem_post", KV("name", "k1", "ms", "1500"), "keyed-i1", "{\"amount\":1}",
               retry, 0, &rep, NULL);
  assert_int_equal(atomic_load(&d.done), 0);
  assert_true(tl_run_until(&t->l, &d.done, 1, 20000));
  kd_check_once(&t->l, &d);
  assert_int_equal(d.o.kind, RESIL_ANSWERED);
  assert_int_equal(d.o.http_status, 201);
  assert_true(d.o.flags & RESIL_OF_RECOVERED);
  assert_int_equal(d.o.stop, RESIL_STOP_SUCCESS);
  assert_true(resil_http_response_recovered(d.r));
  assert_string_equal(resil_http_response_idempotency_key(d.r), "keyed-i1");
  assert_int_equal(rep.struct_size, sizeof rep);
  assert_int_equal(rep.write_attempts, 1);
  assert_int_equal(rep.status_queries, 1);
  assert_int_equal(rep.state, RESIL_HTTP_OP_COMMITTED);
  assert_string_equal(rep.idempotency_key, "keyed-i1");
  /* One write, one effect: the stored result came from the status query. */
  assert_int_equal(resil_fixture_attempts(s->f, "idem"), 1);
  assert_int_equal(resil_fixture_effects(s->f, "idem"), 1);
  assert_int_equal(resil_fixture_attempts(s->f, "operations"), 1);
  resil_http_stats st;
  resil_http_client_get_stats(t->c, &st);
  assert_int_equal(st.recovered, 1);
  assert_int_equal(st.status_committed, 1);
  resil_http_response_free(d.r);
  te_close(t);
  resil_retry_free(retry);
}

/* ---- PENDING, polled on timers, then COMMITTED ------------------------------------- */

typedef struct committer {
  resil_fixture *f;
  const char *key;
  const char *body;
  long after_ms;
  int rc;
} committer;

/* Commits once the first status query came (event order, not time): at
 * least one PENDING answer precedes the COMMITTED one. */
static void *commit_later(void *u) {
  committer *cm = u;
  while (resil_fixture_attempts(cm->f, "operations") < 1) sleep_ms(2);
  sleep_ms(cm->after_ms);
  cm->rc = resil_fixture_op_complete(cm->f, cm->key, 201, cm->body, 1);
  return NULL;
}

static void pending_is_polled_on_timers_until_committed(void **state) {
  fx_state *s = *state;
  kopts opt = {.timeout_ms = 300, .poll_ms = 40};
  te_env *t = te_open(s->f, eps, NEPS, apply, &opt);
  resil_retry *retry = retry_fixed(3, 0);
  const char *key = "keyed-pending";
  assert_int_equal(resil_fixture_op_pending(s->f, key, NULL, NULL), 0);
  committer cm = {.f = s->f, .key = key, .body = "{\"effect\":1}", .after_ms = 60};
  pthread_t th;
  assert_int_equal(pthread_create(&th, NULL, commit_later, &cm), 0);
  kdone d;
  kd_init(&d);
  resil_http_recovery rep;
  submit_keyed(t->e, &d, "slow_keyed", KV("ms", "2000"), key, NULL, retry, 5000, &rep, NULL);
  assert_true(tl_run_until(&t->l, &d.done, 1, 20000));
  pthread_join(th, NULL);
  assert_int_equal(cm.rc, 0);
  kd_check_once(&t->l, &d);
  assert_int_equal(d.o.kind, RESIL_ANSWERED);
  assert_int_equal(d.o.http_status, 201);
  assert_true(d.o.flags & RESIL_OF_RECOVERED);
  assert_false(d.o.flags & RESIL_OF_STATUS_PENDING);
  assert_int_equal(rep.write_attempts, 1);
  assert_int_equal(rep.state, RESIL_HTTP_OP_COMMITTED);
  assert_true(rep.pending_answers >= 1);
  assert_int_equal(rep.status_queries, rep.pending_answers + 1);
  assert_true(rep.pending_wait_ns >= MS(40) * (int64_t)rep.pending_answers);
  assert_int_equal(resil_fixture_attempts(s->f, "slow"), 1);
  assert_int_equal(resil_fixture_attempts(s->f, "operations"), (long)rep.status_queries);
  assert_string_equal(resil_http_response_body(d.r, NULL), cm.body);
  resil_http_response_free(d.r);
  te_close(t);
  resil_retry_free(retry);
}

static void pending_wait_ends_at_pending_wait_max_without_a_resend(void **state) {
  fx_state *s = *state;
  kopts opt = {.timeout_ms = 200, .poll_ms = 50, .pending_max_ms = 400};
  te_env *t = te_open(s->f, eps, NEPS, apply, &opt);
  resil_retry *retry = retry_fixed(3, 0);
  const char *key = "keyed-pending-forever";
  assert_int_equal(resil_fixture_op_pending(s->f, key, NULL, NULL), 0);
  kdone d;
  kd_init(&d);
  resil_http_recovery rep;
  int64_t t0 = mono_ms();
  submit_keyed(t->e, &d, "slow_keyed", KV("ms", "1500"), key, NULL, retry, 20000, &rep, NULL);
  assert_true(tl_run_until(&t->l, &d.done, 1, 20000));
  kd_check_once(&t->l, &d);
  assert_int_equal(d.o.kind, RESIL_UNKNOWN);
  assert_true(d.o.flags & RESIL_OF_STATUS_PENDING);
  assert_false(d.o.flags & RESIL_OF_RECOVERED);
  assert_int_equal(d.o.stop, RESIL_STOP_DEADLINE);
  assert_int_equal(rep.write_attempts, 1);
  assert_int_equal(rep.state, RESIL_HTTP_OP_PENDING);
  assert_true(rep.pending_answers >= 2);
  assert_true(rep.pending_wait_ns < MS(400));
  /* Well before the 20 s deadline: the wait is bounded by 400 ms. */
  assert_true(d.at_ms - t0 < 8000);
  assert_int_equal(resil_fixture_attempts(s->f, "slow"), 1);
  resil_http_response_free(d.r);
  te_close(t);
  resil_retry_free(retry);
}

/* ---- UNKNOWN: the retry re-sends with the same key ----------------------------------- */

static void unknown_status_lets_the_retry_resend_with_the_same_key(void **state) {
  fx_state *s = *state;
  kopts opt = {.timeout_ms = 150};
  te_env *t = te_open(s->f, eps, NEPS, apply, &opt);
  resil_retry *retry = retry_fixed(3, 20);
  kdone d;
  kd_init(&d);
  resil_http_recovery rep;
  /* No key given: one is generated at submit and sent on every write. */
  submit_keyed(t->e, &d, "slow_keyed", KV("ms", "600"), NULL, NULL, retry, 0, &rep, NULL);
  assert_true(tl_run_until(&t->l, &d.done, 1, 20000));
  kd_check_once(&t->l, &d);
  assert_int_equal(d.o.kind, RESIL_UNKNOWN);
  assert_false(d.o.flags & (RESIL_OF_RECOVERED | RESIL_OF_STATUS_PENDING));
  assert_int_equal(d.o.stop, RESIL_STOP_MAX_ATTEMPTS);
  assert_int_equal(d.o.attempts, 3);
  assert_int_equal(rep.write_attempts, 3);
  /* A status query after each write, each 404 (never "did not happen"). */
  assert_int_equal(rep.status_queries, 3);
  assert_int_equal(rep.unknown_answers, 3);
  assert_int_equal(rep.state, RESIL_HTTP_OP_UNKNOWN);
  assert_int_equal(resil_fixture_attempts(s->f, "slow"), 3);
  assert_int_equal(resil_fixture_attempts(s->f, "operations"), 3);
  assert_int_equal(strlen(rep.idempotency_key), 32);
  char seen[300] = "";
  assert_int_equal(resil_fixture_last_header(s->f, "slow", "idempotency-key", seen, sizeof seen), 1);
  assert_string_equal(seen, rep.idempotency_key);
  assert_string_equal(resil_http_response_idempotency_key(d.r), rep.idempotency_key);
  resil_http_response_free(d.r);
  te_close(t);
  resil_retry_free(retry);
}

/* ---- per-request policies see every physical request ----------------------------- */

static void breaker_sees_the_write_and_the_status_query(void **state) {
  fx_state *s = *state;
  kopts opt = {.timeout_ms = 2000};
  te_env *t = te_open(s->f, eps, NEPS, apply, &opt);
  resil_breaker_config bc;
  resil_breaker_config_init(&bc);
  resil_breaker *br = NULL;
  assert_int_equal(resil_breaker_new(&bc, &br, NULL), RESIL_OK);
  kdone d;
  kd_init(&d);
  resil_http_recovery rep;
  resil_http_args args;
  resil_http_args_init(&args);
  args.body = "{\"amount\":1}";
  args.body_len = strlen(args.body);
  resil_engine_policies pol;
  resil_engine_policies_init(&pol);
  pol.breaker = br;
  d.in_submit = 1;
  assert_int_equal(resil_engine_call_keyed(t->e, "idem_close", &args, &pol, NULL, on_kdone, &d,
                                           &rep, NULL, NULL),
                   RESIL_OK);
  d.in_submit = 0;
  assert_true(tl_run_until(&t->l, &d.done, 1, 20000));
  kd_check_once(&t->l, &d);
  /* Commit, then the connection closed: UNKNOWN, asked, COMMITTED. */
  assert_int_equal(d.o.http_status, 201);
  assert_true(d.o.flags & RESIL_OF_RECOVERED);
  assert_int_equal(rep.write_attempts, 1);
  assert_int_equal(rep.status_queries, 1);
  assert_int_equal(resil_fixture_effects(s->f, "idem_close"), 1);
  /* The breaker recorded both physical requests. */
  resil_breaker_metrics m;
  assert_int_equal(resil_breaker_get_metrics(br, &m), RESIL_OK);
  assert_int_equal(m.total_calls + m.total_ignored, 2);
  resil_http_response_free(d.r);
  te_close(t);
  resil_breaker_free(br);
}

/* ---- many keyed calls at once on one thread -------------------------------------------- */

#define NMANY 50
static void many_keyed_calls_recover_at_once_each_once(void **state) {
  fx_state *s = *state;
  kopts opt = {.timeout_ms = 5000};
  te_env *t = te_open(s->f, eps, NEPS, apply, &opt);
  static kdone d[NMANY];
  static resil_http_recovery rep[NMANY];
  resil_http_args args;
  resil_http_args_init(&args);
  args.body = "{\"amount\":1}";
  args.body_len = strlen(args.body);
  for (size_t i = 0; i < NMANY; i++) {
    kd_init(&d[i]);
    assert_int_equal(resil_engine_call_keyed(t->e, "idem_close", &args, NULL, NULL, on_kdone, &d[i],
                                             &rep[i], NULL, NULL),
                     RESIL_OK);
  }
  int64_t end = mono_ms() + 30000;
  size_t n = 0;
  while (n < NMANY && mono_ms() < end) {
    tl_run_once(&t->l, 50);
    n = 0;
    for (size_t i = 0; i < NMANY; i++) n += atomic_load(&d[i].done);
  }
  assert_int_equal(n, NMANY);
  for (size_t i = 0; i < NMANY; i++) {
    assert_int_equal(atomic_load(&d[i].done), 1);
    assert_int_equal(d[i].wrong_thread, 0);
    assert_int_equal(d[i].o.http_status, 201);
    assert_true(d[i].o.flags & RESIL_OF_RECOVERED);
    assert_int_equal(rep[i].write_attempts, 1);
    assert_int_equal(rep[i].status_queries, 1);
    /* Each call its own generated key, and its own stored result. */
    for (size_t j = 0; j < i; j++) assert_string_not_equal(rep[i].idempotency_key, rep[j].idempotency_key);
    resil_http_response_free(d[i].r);
  }
  assert_int_equal(resil_fixture_effects(s->f, "idem_close"), NMANY);
  assert_int_equal(resil_fixture_attempts(s->f, "operations"), NMANY);
  te_close(t);
}

/* ---- cancellation and the engine's free ------------------------------------------------ */

typedef struct canceller {
  resil_fixture *f;
  resil_engine_keyed *h;
  int64_t at_ms;
} canceller;

static void *cancel_when_polling(void *u) {
  canceller *cn = u;
  /* Event order, not time: two status queries answered PENDING. */
  while (resil_fixture_attempts(cn->f, "operations") < 2) sleep_ms(5);
  sleep_ms(10);
  cn->at_ms = mono_ms();
  resil_engine_keyed_cancel(cn->h);
  resil_engine_keyed_cancel(cn->h); /* twice: a no-op */
  return NULL;
}

static void cancel_from_another_thread_ends_a_pending_wait(void **state) {
  fx_state *s = *state;
  kopts opt = {.timeout_ms = 200, .poll_ms = 300, .pending_max_ms = 60000};
  te_env *t = te_open(s->f, eps, NEPS, apply, &opt);
  const char *key = "keyed-cancel";
  assert_int_equal(resil_fixture_op_pending(s->f, key, NULL, NULL), 0);
  kdone d;
  kd_init(&d);
  resil_http_recovery rep;
  resil_engine_keyed *h = NULL;
  submit_keyed(t->e, &d, "slow_keyed", KV("ms", "1500"), key, NULL, NULL, 60000, &rep, &h);
  canceller cn = {.f = s->f, .h = h};
  pthread_t th;
  assert_int_equal(pthread_create(&th, NULL, cancel_when_polling, &cn), 0);
  assert_true(tl_run_until(&t->l, &d.done, 1, 30000));
  pthread_join(th, NULL);
  kd_check_once(&t->l, &d);
  assert_int_equal(d.o.kind, RESIL_UNKNOWN);
  assert_int_equal(d.o.stop, RESIL_STOP_CANCELLED);
  assert_true(d.o.flags & RESIL_OF_STATUS_PENDING);
  assert_int_equal(rep.write_attempts, 1);
  assert_int_equal(resil_fixture_attempts(s->f, "slow"), 1);
  /* Not at the next poll (300 ms) or pending_wait_max (60 s): at once
   * (bound generous for a loaded machine; a query in flight is cancelled
   * too). */
  assert_true(d.at_ms - cn.at_ms < 250);
  resil_engine_keyed_cancel(h); /* after completion: a no-op */
  resil_engine_keyed_release(h);
  resil_http_response_free(d.r);
  te_close(t);
}

static void engine_free_ends_a_waiting_keyed_call_once(void **state) {
  fx_state *s = *state;
  kopts opt = {.timeout_ms = 200, .poll_ms = 200, .pending_max_ms = 60000};
  te_env *t = te_open(s->f, eps, NEPS, apply, &opt);
  const char *key = "keyed-free";
  assert_int_equal(resil_fixture_op_pending(s->f, key, NULL, NULL), 0);
  kdone d;
  kd_init(&d);
  resil_http_recovery rep;
  submit_keyed(t->e, &d, "slow_keyed", KV("ms", "1500"), key, NULL, NULL, 60000, &rep, NULL);
  int64_t end = mono_ms() + 20000;
  while (resil_fixture_attempts(s->f, "operations") < 2 && mono_ms() < end) tl_run_once(&t->l, 20);
  assert_int_equal(atomic_load(&d.done), 0);
  resil_engine_free(t->e);
  t->e = NULL;
  assert_int_equal(atomic_load(&d.done), 1);
  assert_int_equal(d.o.stop, RESIL_STOP_CANCELLED);
  assert_int_equal(rep.write_attempts, 1);
  assert_true(rep.status_queries >= 2);
  resil_http_response_free(d.r);
  te_close(t);
}

/* A keyed done that submits a new keyed call on every completion, also
 * the ones resil_engine_free runs: refused there (RESIL_ESTATE), and free
 * ends. (Stops after 200 so that the code before the refusal ends too.) */
typedef struct kresub {
  resil_engine *e;
  size_t completions, accepted, refused, other;
} kresub;

static void kresub_done(void *user, resil_engine_keyed *h, resil_outcome o,
                        resil_http_response *r) {
  (void)h, (void)o;
  kresub *k = user;
  resil_http_response_free(r);
  if (++k->completions > 200) return;
  resil_http_param p = {"ms", "1500"};
  resil_http_args args;
  resil_http_args_init(&args);
  args.params = &p;
  args.param_count = 1;
  args.idempotency_key = "keyed-resubmit";
  resil_status st = resil_engine_call_keyed(k->e, "slow_keyed", &args, NULL, NULL, kresub_done, k,
                                            NULL, NULL, NULL);
  if (st == RESIL_OK) k->accepted++;
  else if (st == RESIL_ESTATE) k->refused++;
  else k->other++;
}

static void engine_free_refuses_keyed_calls_submitted_by_the_done_it_runs(void **state) {
  fx_state *s = *state;
  kopts opt = {.timeout_ms = 1000};
  te_env *t = te_open(s->f, eps, NEPS, apply, &opt);
  kresub k = {.e = t->e};
  resil_http_param p = {"ms", "1500"};
  resil_http_args args;
  resil_http_args_init(&args);
  args.params = &p;
  args.param_count = 1;
  args.idempotency_key = "keyed-resubmit";
  for (int i = 0; i < 2; i++)
    assert_int_equal(resil_engine_call_keyed(t->e, "slow_keyed", &args, NULL, NULL, kresub_done,
                                             &k, NULL, NULL, NULL),
                     RESIL_OK);
  resil_engine_free(t->e);
  t->e = NULL;
  assert_int_equal(k.completions, 2);
  assert_int_equal(k.accepted, 0);
  assert_int_equal(k.refused, 2);
  assert_int_equal(k.other, 0);
  te_close(t);
}

static void submit_errors_never_call_back(void **state) {
  fx_state *s = *state;
  kopts opt = {.timeout_ms = 1000};
  te_env *t = te_open(s->f, eps, NEPS, apply, &opt);
  kdone d;
  kd_init(&d);
  resil_engine_keyed *h = (resil_engine_keyed *)&d;
  resil_error err;
  assert_int_equal(resil_engine_call_keyed(t->e, "nope", NULL, NULL, NULL, on_kdone, &d, NULL, &h,
                                           &err),
                   RESIL_EINVAL);
  assert_null(h);
  assert_int_equal(resil_engine_call_keyed(t->e, "idem_post", NULL, NULL, NULL, NULL, &d, NULL, &h,
                                           &err),
                   RESIL_EINVAL);
  assert_int_equal(resil_engine_call_keyed(NULL, "idem_post", NULL, NULL, NULL, on_kdone, &d, NULL,
                                           &h, &err),
                   RESIL_EINVAL);
  resil_ctx bad;
  memset(&bad, 0, sizeof bad);
  assert_int_equal(resil_engine_call_keyed(t->e, "op_status", NULL, NULL, &bad, on_kdone, &d, NULL,
                                           &h, &err),
                   RESIL_EINVAL);
  for (int i = 0; i < 5; i++) tl_run_once(&t->l, 10);
  assert_int_equal(atomic_load(&d.done), 0);
  resil_engine_keyed_cancel(NULL);
  resil_engine_keyed_release(NULL);
  te_close(t);
}

/* ---- the ctx token ends a wait at once ------------------------------------------------ */

typedef struct token_signaller {
  resil_fixture *f;
  resil_cancel *tok;
  int64_t at_ms;
} token_signaller;

static void *signal_when_polling(void *u) {
  token_signaller *g = u;
  /* Event order: the first status query was answered PENDING; the call
   * then waits 5 s for the next. */
  while (resil_fixture_attempts(g->f, "operations") < 1) sleep_ms(5);
  sleep_ms(100);
  g->at_ms = mono_ms();
  resil_cancel_signal(g->tok);
  return NULL;
}

static void ctx_token_signal_ends_a_pending_wait_at_once(void **state) {
  fx_state *s = *state;
  kopts opt = {.timeout_ms = 200, .poll_ms = 5000, .pending_max_ms = 60000};
  resil_http_client *c = client_on(s->f, eps, NEPS, apply, &opt);
  test_loop l;
  tl_init(&l);
  resil_engine *e = engine_on(&l, c);
  const char *key = "keyed-token";
  assert_int_equal(resil_fixture_op_pending(s->f, key, NULL, NULL), 0);
  resil_cancel *tok = NULL;
  assert_int_equal(resil_cancel_new(&tok), RESIL_OK);
  kdone d;
  kd_init(&d);
  resil_http_recovery rep;
  resil_http_param p = {"ms", "1500"};
  resil_http_args args;
  resil_http_args_init(&args);
  args.params = &p;
  args.param_count = 1;
  args.idempotency_key = key;
  resil_ctx ctx;
  resil_ctx_init(&ctx);
  resil_ctx_set_timeout_ns(&ctx, MS(60000));
  ctx.cancel = tok;
  resil_engine_keyed *h = NULL;
  assert_int_equal(resil_engine_call_keyed(e, "slow_keyed", &args, NULL, &ctx, on_kdone, &d, &rep,
                                           &h, NULL),
                   RESIL_OK);
  token_signaller g = {.f = s->f, .tok = tok};
  pthread_t th;
  assert_int_equal(pthread_create(&th, NULL, signal_when_polling, &g), 0);
  assert_true(tl_run_until(&l, &d.done, 1, 30000));
  pthread_join(th, NULL);
  kd_check_once(&l, &d);
  /* What the end of the wait gives with the token set: the write's
   * outcome, PENDING seen, no new query or write. */
  assert_int_equal(d.o.kind, RESIL_UNKNOWN);
  assert_true(d.o.flags & RESIL_OF_STATUS_PENDING);
  assert_int_equal(rep.write_attempts, 1);
  assert_int_equal(rep.status_queries, 1);
  assert_int_equal(resil_fixture_attempts(s->f, "slow"), 1);
  print_message("token ended the PENDING wait %lld ms after the signal\n",
                (long long)(d.at_ms - g.at_ms));
  /* Not at the next poll, 5 s later (read when the wait ended before). */
  assert_true(d.at_ms - g.at_ms < 2500);
  resil_engine_keyed_release(h);
  resil_http_response_free(d.r);
  resil_engine_free(e);
  tl_close(&l);
  resil_cancel_free(tok);
  resil_http_client_free(c);
}

/* ---- the status query that read the stored result is reported recovered ----- */

typedef struct ev_lines {
  size_t n, recovered;
  char first_recovered[512];
} ev_lines;

static void ev_line(void *user, const char *line) {
  ev_lines *l = user; /* the loop thread, under the sink's mutex */
  l->n++;
  if (strstr(line, "\"kind\":\"recovered\"")) {
    if (!l->recovered++) snprintf(l->first_recovered, sizeof l->first_recovered, "%s", line);
  }
}

static resil_event_sink *ev_sink;

static void apply_events(resil_http_client_config *cfg, void *u) {
  apply(cfg, u);
  cfg->on_attempt = resil_event_attempt_listener;
  cfg->on_attempt_user = ev_sink;
}

/* As on the blocking path, the status query whose answer was the stored
 * result (COMMITTED) reaches the client's attempt listener with
 * RESIL_OF_RECOVERED: the event log writes one `recovered` line. */
static void status_query_reading_the_stored_result_is_reported_recovered(void **state) {
  fx_state *s = *state;
  ev_lines l;
  memset(&l, 0, sizeof l);
  resil_event_sink_config sc;
  resil_event_sink_config_init(&sc);
  sc.fn = ev_line;
  sc.user = &l;
  assert_int_equal(resil_event_sink_new(&sc, &ev_sink, NULL), RESIL_OK);
  kopts opt = {.timeout_ms = 300};
  te_env *t = te_open(s->f, eps, NEPS, apply_events, &opt);
  resil_retry *retry = retry_fixed(3, 30);
  kdone d;
  kd_init(&d);
  submit_keyed(t->e, &d, "idem_post", KV("name", "k-ev", "ms", "1500"), "keyed-ev",
               "{\"amount\":1}", retry, 0, NULL, NULL);
  assert_true(tl_run_until(&t->l, &d.done, 1, 20000));
  kd_check_once(&t->l, &d);
  assert_int_equal(d.o.http_status, 201);
  assert_true(d.o.flags & RESIL_OF_RECOVERED);
  assert_int_equal(resil_fixture_attempts(s->f, "operations"), 1);
  /* The write (lost answer) and the query: two lines, then the recovered
   * one the query's flag gives. */
  assert_int_equal(l.recovered, 1);
  assert_true(l.n >= 3);
  assert_non_null(strstr(l.first_recovered, "\"idempotency_key\":\"keyed-ev\""));
  assert_non_null(strstr(l.first_recovered, "\"http_status\":200"));
  resil_http_response_free(d.r);
  te_close(t);
  resil_retry_free(retry);
  resil_event_sink_free(ev_sink);
  ev_sink = NULL;
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(commit_then_slow_answer_is_recovered_committed_with_one_effect,
                                      fx_setup, fx_teardown),
      cmocka_unit_test_setup_teardown(pending_is_polled_on_timers_until_committed, fx_setup,
                                      fx_teardown),
      cmocka_unit_test_setup_teardown(pending_wait_ends_at_pending_wait_max_without_a_resend,
                                      fx_setup, fx_teardown),
      cmocka_unit_test_setup_teardown(unknown_status_lets_the_retry_resend_with_the_same_key,
                                      fx_setup, fx_teardown),
      cmocka_unit_test_setup_teardown(breaker_sees_the_write_and_the_status_query, fx_setup,
                                      fx_teardown),
      cmocka_unit_test_setup_teardown(many_keyed_calls_recover_at_once_each_once, fx_setup,
                                      fx_teardown),
      cmocka_unit_test_setup_teardown(cancel_from_another_thread_ends_a_pending_wait, fx_setup,
                                      fx_teardown),
      cmocka_unit_test_setup_teardown(engine_free_ends_a_waiting_keyed_call_once, fx_setup,
                                      fx_teardown),
      cmocka_unit_test_setup_teardown(submit_errors_never_call_back, fx_setup, fx_teardown),
      cmocka_unit_test_setup_teardown(engine_free_refuses_keyed_calls_submitted_by_the_done_it_runs,
                                      fx_setup, fx_teardown),
      cmocka_unit_test_setup_teardown(ctx_token_signal_ends_a_pending_wait_at_once, fx_setup,
                                      fx_teardown),
      cmocka_unit_test_setup_teardown(
          status_query_reading_the_stored_result_is_reported_recovered, fx_setup, fx_teardown),
  };
  int failed = cmocka_run_group_tests_name("keyed calls on the test adapter", tests, NULL, NULL);
#ifdef RESIL_HAVE_LOOP
  tl_use_builtin_loop = 1;
  failed += cmocka_run_group_tests_name("keyed calls on resil_loop", tests, NULL, NULL);
  tl_use_builtin_loop = 0;
#endif
  return failed;
}
