/* Lab experiment A7 (issue 8, DESIGN §9): H16 and I1 on the engine, on the
 * built-in loop (resil_loop), one loop thread, against the in-process
 * fixture and its operation store.
 *   H16  a POST on a reused keep-alive connection the server reads, acts on
 *        and drops: the engine refuses libcurl's silent re-send (one effect,
 *        UNKNOWN).
 *   I1   a keyed POST whose server commits, then sleeps 1.5 s, with a
 *        600 ms response timeout and a retry of 3: resil_engine_call_keyed()
 *        asks the status endpoint after the lost answer and ends COMMITTED
 *        with the stored result, one write, one effect.
 *   I4   a keyed POST whose server commits, then closes the connection
 *        before the response: the keyed flow ends COMMITTED too.
 * The wrong variant allows libcurl's re-send for the H16 POST (declared
 * idempotent) and makes every I1 attempt a new logical call with a new
 * key (no status query): both make more than one effect. Built when the
 * built-in loop, the fixture and the store are. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "lab_result.h"
#include "lab_families.h"
#include "lab_ops.h"

#if defined(RESIL_HAVE_FIXTURE) && defined(RESIL_HAVE_LOOP) && defined(RESIL_HAVE_STORE)

#include "fixture/fixture.h"
#include "resil/engine.h"
#include "resil/loop.h"
#include "resil/retry.h"

#define MS(n) ((int64_t)(n) * 1000000)

static const resil_http_endpoint keyed_endpoints[] = {
    {.struct_size = sizeof(resil_http_endpoint), .name = "ka_get", .path = "/ka"},
    {.struct_size = sizeof(resil_http_endpoint), .name = "ka_post", .method = RESIL_HTTP_POST,
     .path = "/ka"},
    {.struct_size = sizeof(resil_http_endpoint), .name = "op_status", .path = "/operations/{key}",
     .response_codec = RESIL_HTTP_CODEC_JSON},
    {.struct_size = sizeof(resil_http_endpoint), .name = "idem_post", .method = RESIL_HTTP_POST,
     .path = "/idem/{name}", .query = "sleep_ms={ms}", .idempotency_key = RESIL_HTTP_KEY_SEND,
     .content_type = "application/json", .status_endpoint = "op_status"},
    {.struct_size = sizeof(resil_http_endpoint), .name = "idem_close", .method = RESIL_HTTP_POST,
     .path = "/idem-close", .idempotency_key = RESIL_HTTP_KEY_SEND,
     .content_type = "application/json", .status_endpoint = "op_status"},
};

static int64_t now_ms(void) { return lab_now_ns() / 1000000; }

typedef struct a7_state {
  resil_fixture *fx;
  resil_http_client *c;
  resil_loop *loop;
  resil_loop_adapter *ad;
  resil_engine *e;
  pthread_t loop_thread;
  size_t other_threads;
  int wrong;
  /* H16 */
  size_t h16_done;
  resil_outcome h16_get, h16_post;
  /* I1 */
  size_t i1_done;
  resil_outcome i1;
  int recovered;
  resil_http_recovery rep;
  /* I4 */
  size_t i4_done;
  resil_outcome i4;
  int i4_recovered;
  resil_http_recovery i4_rep;
  /* the wrong variant's attempts, each a new logical call */
  const char *wep;   /* endpoint */
  size_t *wdone;     /* completion counter */
  resil_outcome *wo; /* outcome */
  resil_http_args wargs;
  resil_http_param wps[2];
  uint32_t wrong_attempts;
  char keys[3][64];
} a7_state;

static void note_thread(a7_state *x) {
  if (!pthread_equal(pthread_self(), x->loop_thread)) x->other_threads++;
}

static void h16_post_done(void *user, resil_engine_handle *h, resil_outcome o,
                          resil_http_response *r) {
  (void)h;
  a7_state *x = user;
  note_thread(x);
  x->h16_post = o;
  x->h16_done++;
  resil_http_response_free(r);
}

static void h16_get_done(void *user, resil_engine_handle *h, resil_outcome o,
                         resil_http_response *r) {
  (void)h;
  a7_state *x = user;
  note_thread(x);
  x->h16_get = o;
  resil_http_response_free(r);
  /* The POST goes out on the connection the GET left alive. */
  resil_http_args args;
  resil_http_args_init(&args);
  args.body = "pay=10";
  args.body_len = 6;
  resil_ctx ctx;
  resil_ctx_init(&ctx);
  if (x->wrong) ctx.flags = RESIL_CALL_IDEMPOTENT;
  if (resil_engine_call(x->e, "ka_post", &args, NULL, &ctx, h16_post_done, x, NULL, NULL) !=
      RESIL_OK)
    x->h16_done++;
}

static void i1_done(void *user, resil_engine_keyed *h, resil_outcome o, resil_http_response *r) {
  (void)h;
  a7_state *x = user;
  note_thread(x);
  x->i1 = o;
  x->recovered = resil_http_response_recovered(r);
  x->i1_done++;
  resil_http_response_free(r);
}

static void i4_done(void *user, resil_engine_keyed *h, resil_outcome o, resil_http_response *r) {
  (void)h;
  a7_state *x = user;
  note_thread(x);
  x->i4 = o;
  x->i4_recovered = resil_http_response_recovered(r);
  x->i4_done++;
  resil_http_response_free(r);
}

/* The wrong variant: each attempt a new resil_engine_call (a new key),
 * retried by hand on UNKNOWN, three at most, with no status query. */
static void wrong_attempt_done(void *user, resil_engine_handle *h, resil_outcome o,
                               resil_http_response *r);

static void wrong_attempt(a7_state *x) {
  x->wrong_attempts++;
  if (resil_engine_call(x->e, x->wep, &x->wargs, NULL, NULL, wrong_attempt_done, x, NULL,
                        NULL) != RESIL_OK)
    (*x->wdone)++;
}

static void wrong_attempt_done(void *user, resil_engine_handle *h, resil_outcome o,
                               resil_http_response *r) {
  (void)h;
  a7_state *x = user;
  note_thread(x);
  const char *k = resil_http_response_idempotency_key(r);
  if (k && x->wrong_attempts <= 3)
    snprintf(x->keys[x->wrong_attempts - 1], sizeof x->keys[0], "%s", k);
  resil_http_response_free(r);
  *x->wo = o;
  x->wo->attempts = x->wrong_attempts;
  if (x->wdone == &x->i1_done) x->rep.write_attempts = x->wrong_attempts;
  if (o.kind == RESIL_UNKNOWN && x->wrong_attempts < 3) wrong_attempt(x);
  else (*x->wdone)++;
}

static void set_client(resil_http_client_config *cfg, a7_state *x) {
  cfg->base_url = resil_fixture_url(x->fx);
  cfg->endpoints = keyed_endpoints;
  cfg->endpoint_count = sizeof keyed_endpoints / sizeof keyed_endpoints[0];
  /* One connection: the H16 POST reuses the GET's. */
  cfg->max_connections = 1;
  cfg->max_connections_per_host = 1;
  /* Well after the write's commit (the fixture opens its store on the
   * first write and makes two flushed commits, on a loaded machine under a
   * sanitizer: a status query that arrives before the commit sends the
   * write again), well before the server's answer (1.5 s after it, below). */
  cfg->response_timeout_ns = MS(600);
  if (x->wrong) cfg->resend_stale = RESIL_HTTP_RESEND_IF_SAFE;
}

/* Runs the loop until *count reaches want or max_ms pass. */
static int run_until(a7_state *x, const size_t *count, size_t want, int64_t max_ms) {
  int64_t end = now_ms() + max_ms;
  while (*count < want) {
    if (now_ms() > end) return 0;
    resil_loop_run_once(x->loop, MS(50), NULL);
  }
  return 1;
}

static int a7_run(lab_result *r, int wrong) {
  a7_state x;
  memset(&x, 0, sizeof x);
  x.wrong = wrong;
  x.loop_thread = pthread_self();
  resil_retry *retry = NULL;
  char eb[256];
  if (!lab_check(r, resil_fixture_start(NULL, &x.fx, eb, sizeof eb) == 0, "fixture: %s", eb))
    return 0;
  resil_http_client_config cfg;
  resil_http_client_config_init(&cfg);
  set_client(&cfg, &x);
  lab_ops_client_config(r, &cfg, "client"); /* its name, the event log */
  resil_error err;
  if (!lab_check(r, resil_http_client_new(&cfg, &x.c, &err) == RESIL_OK, "client: %s", err.msg))
    goto out;
  if (!lab_check(r, resil_loop_new(NULL, &x.loop) == RESIL_OK &&
                        resil_loop_adapter_new(x.loop, &x.ad) == RESIL_OK,
                 "built-in loop"))
    goto out;
  resil_engine_config ec;
  resil_engine_config_init(&ec);
  ec.adapter = x.ad;
  ec.client = x.c;
  if (!lab_check(r, resil_engine_new(&ec, &x.e, &err) == RESIL_OK, "engine: %s", err.msg))
    goto out;
  resil_retry_config rc;
  resil_retry_config_init(&rc);
  rc.max_attempts = 3;
  rc.backoff = RESIL_RETRY_FIXED;
  rc.wait_ns = MS(30);
  if (!lab_check(r, resil_retry_new(&rc, &retry, NULL) == RESIL_OK, "retry setup")) goto out;

  /* H16 */
  if (!lab_check(r, resil_engine_call(x.e, "ka_get", NULL, NULL, NULL, h16_get_done, &x, NULL,
                                      &err) == RESIL_OK,
                 "submit: %s", err.msg))
    goto out;
  int h16_ok = run_until(&x, &x.h16_done, 1, 20000);
  long h16_eff = resil_fixture_effects(x.fx, "ka");
  long h16_seen = resil_fixture_attempts(x.fx, "ka");
  resil_http_stats st;
  memset(&st, 0, sizeof st);
  resil_http_client_get_stats(x.c, &st);
  long long prevented = (long long)st.resends_prevented;

  /* I1 */
  x.wps[0] = (resil_http_param){"name", "a7"};
  x.wps[1] = (resil_http_param){"ms", "1500"};
  resil_http_args_init(&x.wargs);
  x.wargs.params = x.wps;
  x.wargs.param_count = 2;
  x.wargs.body = "{\"amount\":1}";
  x.wargs.body_len = strlen(x.wargs.body);
  int64_t t0 = now_ms();
  if (wrong) {
    x.wep = "idem_post";
    x.wdone = &x.i1_done;
    x.wo = &x.i1;
    wrong_attempt(&x);
  } else {
    resil_http_args args = x.wargs;
    args.idempotency_key = "a7-stable-key";
    resil_engine_policies pol;
    resil_engine_policies_init(&pol);
    pol.retry = retry;
    if (!lab_check(r, resil_engine_call_keyed(x.e, "idem_post", &args, &pol, NULL, i1_done, &x,
                                              &x.rep, NULL, &err) == RESIL_OK,
                   "submit keyed: %s", err.msg))
      goto out;
  }
  int i1_ok = run_until(&x, &x.i1_done, 1, 30000);
  int64_t elapsed = now_ms() - t0;
  long eff = resil_fixture_effects(x.fx, "idem");
  long seen = resil_fixture_attempts(x.fx, "idem");
  long queries = resil_fixture_attempts(x.fx, "operations");

  /* I4 */
  resil_http_args a4;
  resil_http_args_init(&a4);
  a4.body = "{\"amount\":1}";
  a4.body_len = strlen(a4.body);
  if (wrong) {
    x.wargs = a4;
    x.wrong_attempts = 0;
    x.wep = "idem_close";
    x.wdone = &x.i4_done;
    x.wo = &x.i4;
    wrong_attempt(&x);
  } else {
    resil_engine_policies pol;
    resil_engine_policies_init(&pol);
    pol.retry = retry;
    if (!lab_check(r, resil_engine_call_keyed(x.e, "idem_close", &a4, &pol, NULL, i4_done, &x,
                                              &x.i4_rep, NULL, &err) == RESIL_OK,
                   "submit keyed: %s", err.msg))
      goto out;
  }
  int i4_ok = run_until(&x, &x.i4_done, 1, 30000);
  long i4_eff = resil_fixture_effects(x.fx, "idem_close");
  long i4_seen = resil_fixture_attempts(x.fx, "idem_close");
  char ob[96], hb[96], o4[96];
  resil_outcome_format(&x.i4, o4, sizeof o4);
  resil_outcome_format(&x.i1, ob, sizeof ob);
  resil_outcome_format(&x.h16_post, hb, sizeof hb);
  const char *state = x.rep.state == RESIL_HTTP_OP_COMMITTED  ? "COMMITTED"
                      : x.rep.state == RESIL_HTTP_OP_PENDING  ? "PENDING"
                      : x.rep.state == RESIL_HTTP_OP_UNKNOWN  ? "UNKNOWN"
                      : x.rep.state == RESIL_HTTP_OP_FAILED   ? "FAILED"
                                                              : "NONE";
  lab_obs_str(r, "h16_outcome", hb);
  lab_obs_int(r, "h16_effects", h16_eff);
  lab_obs_int(r, "h16_upstream_saw", h16_seen);
  lab_obs_int(r, "resends_prevented", prevented);
  lab_obs_str(r, "outcome", ob);
  lab_obs_int(r, "effects", eff);
  lab_obs_int(r, "write_attempts", seen);
  lab_obs_int(r, "status_queries", queries);
  lab_obs_str(r, "status", state);
  lab_obs_bool(r, "recovered", x.recovered);
  lab_obs_int(r, "elapsed_ms", elapsed);
  lab_obs_str(r, "i4_outcome", o4);
  lab_obs_int(r, "i4_effects", i4_eff);
  lab_obs_int(r, "i4_write_attempts", i4_seen);
  lab_obs_bool(r, "i4_recovered", x.i4_recovered);
  lab_obs_int(r, "loop_threads", x.other_threads ? 2 : 1);
  /* hb and o4 shortened to their kind: the line must fit. */
  char *cut = strchr(hb, '(');
  if (cut) *cut = '\0';
  cut = strchr(o4, '(');
  if (cut) *cut = '\0';
  lab_summary(r, "engine: H16 POST on a dropped reused connection %s, effects %ld, re-sends "
                 "refused %lld; I1 %s: %s, %ld write(s), %ld quer%s, %s, effects %ld, %lld ms; "
                 "I4: %s, %ld write(s), effects %ld",
              hb, h16_eff, prevented, wrong ? "(a new key per attempt)" : "(keyed, retry 3)", ob,
              seen, queries, queries == 1 ? "y" : "ies", state, eff, (long long)elapsed, o4,
              i4_seen, i4_eff);
  lab_expect(r, "completed", h16_ok && i1_ok && i4_ok && x.other_threads == 0,
             "completions %zu/%zu/%zu, %zu on another thread", x.h16_done, x.i1_done, x.i4_done,
             x.other_threads);
  lab_expect(r, "h16_unknown", x.h16_get.http_status == 200 && x.h16_post.kind == RESIL_UNKNOWN,
             "GET %d, POST %s, expected UNKNOWN", x.h16_get.http_status, hb);
  lab_expect(r, "h16_one_effect", h16_eff == 1 && h16_seen == 2,
             "effects %ld, /ka requests %ld, expected 1 and 2 (GET + POST)", h16_eff, h16_seen);
  lab_expect(r, "resend_refused", prevented == 1, "re-sends refused %lld, expected 1", prevented);
  lab_expect(r, "committed", x.i1.kind == RESIL_ANSWERED && x.i1.http_status == 201 &&
                                 (x.i1.flags & RESIL_OF_RECOVERED) && x.recovered &&
                                 x.rep.state == RESIL_HTTP_OP_COMMITTED,
             "outcome %s, status %s, expected the stored 201 (recovered, COMMITTED)", ob, state);
  lab_expect(r, "one_effect", eff == 1, "effects %ld, expected 1", eff);
  lab_expect(r, "one_write", seen == 1 && x.rep.write_attempts == 1 && queries >= 1,
             "%ld writes (flow counted %u), %ld status queries; expected 1 write and a query",
             seen, x.rep.write_attempts, queries);
  lab_expect(r, "i4_committed", x.i4.kind == RESIL_ANSWERED && x.i4.http_status == 201 &&
                                    (x.i4.flags & RESIL_OF_RECOVERED) && x.i4_recovered,
             "commit then close: %s, expected the stored 201 (recovered)", o4);
  lab_expect(r, "i4_one_effect", i4_eff == 1 && i4_seen == 1,
             "commit then close: effects %ld after %ld writes, expected 1 and 1", i4_eff, i4_seen);
out:
  lab_ops_add_client(r, "client", x.c); /* --metrics (lab_ops.h) */
  lab_ops_add_retry(r, "retry", retry);
  lab_capture(r);
  resil_engine_free(x.e);
  resil_loop_adapter_free(x.ad);
  resil_loop_free(x.loop);
  resil_http_client_free(x.c);
  resil_fixture_stop(x.fx);
  resil_retry_free(retry);
  return r->pass;
}

static int a7(lab_result *r) { return a7_run(r, 0); }
static int a7_wrong(lab_result *r) { return a7_run(r, 1); }

const lab_experiment lab_async_keyed_experiments[] = {
    {"A7", "H16 and I1 on the engine: no silent re-send, keyed recovery ends COMMITTED", a7,
     a7_wrong, "the re-send allowed and a new key per attempt", "one_effect", 0},
    {NULL, NULL, NULL, NULL, NULL, NULL, 0}};

#else /* the built-in loop, the fixture or the store is not built */

const lab_experiment lab_async_keyed_experiments[] = {{NULL, NULL, NULL, NULL, NULL, NULL, 0}};

#endif
