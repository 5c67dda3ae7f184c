/* libresil-http safety: no hidden re-sends (H16), secrets never logged
 * (H13), stable idempotency keys that interceptors cannot change, unsafe
 * retries only when opted in (H6), abandoned attempts, and one deadline
 * across retry and HTTP (P13 without the breaker, time limiter and
 * bulkhead layers). */
#include <stdlib.h>

#include "http/client_int.h"
#include "test_http_common.h"

static const char *const secret_headers[] = {
    "Authorization: Bearer {auth}", "Cookie: session={cookie}", "X-Api-Key: {apikey}",
    "X-Trace: visible-trace", NULL};

static const resil_http_endpoint eps[] = {
    {.struct_size = sizeof(resil_http_endpoint), .name = "ka_get", .path = "/ka"},
    {.struct_size = sizeof(resil_http_endpoint), .name = "ka_post", .method = RESIL_HTTP_POST, .path = "/ka",
     .request_codec = RESIL_HTTP_CODEC_JSON},
    {.struct_size = sizeof(resil_http_endpoint), .name = "echo_secret", .method = RESIL_HTTP_POST, .path = "/echo", .query = "token={qt}&page=2",
     .headers = secret_headers, .request_codec = RESIL_HTTP_CODEC_JSON,
     .response_codec = RESIL_HTTP_CODEC_JSON},
    {.struct_size = sizeof(resil_http_endpoint), .name = "echo_keyed", .method = RESIL_HTTP_POST, .path = "/echo",
     .idempotency_key = RESIL_HTTP_KEY_SEND, .response_codec = RESIL_HTTP_CODEC_JSON},
    {.struct_size = sizeof(resil_http_endpoint), .name = "flaky_keyed", .method = RESIL_HTTP_POST, .path = "/flaky/{id}", .query = "fail={n}",
     .idempotency_key = RESIL_HTTP_KEY_SEND},
    {.struct_size = sizeof(resil_http_endpoint), .name = "slow_post", .method = RESIL_HTTP_POST, .path = "/slow", .query = "ms={ms}"},
    {.struct_size = sizeof(resil_http_endpoint), .name = "idem", .method = RESIL_HTTP_POST, .path = "/idem/{name}", .query = "sleep_ms={ms}",
     .idempotency_key = RESIL_HTTP_KEY_SEND, .response_codec = RESIL_HTTP_CODEC_JSON},
    {.struct_size = sizeof(resil_http_endpoint), .name = "item_slow", .path = "/items/{id}", .query = "delay_ms={ms}",
     .response_codec = RESIL_HTTP_CODEC_JSON},
    {.struct_size = sizeof(resil_http_endpoint), .name = "commit_close", .method = RESIL_HTTP_POST, .path = "/commit-close"},
};
#define NEPS (sizeof eps / sizeof eps[0])

/* ---- H16 ------------------------------------------------------------------ */

static void set_resend(resil_http_client_config *cfg, void *u) {
  cfg->resend_stale = *(resil_http_resend *)u;
}

/* GET /ka leaves a kept-alive connection; the POST goes out on it, the
 * server reads it, counts the effect and closes without answering. */
static resil_outcome ka_post(resil_http_client *c, const char *key, const char *body,
                             resil_http_response **r) {
  resil_outcome o = resil_http_call(c, "ka_get", NULL, NULL, NULL, NULL);
  assert_int_equal(o.http_status, 200);
  resil_http_args args;
  resil_http_args_init(&args);
  args.body = body;
  args.body_len = body ? strlen(body) : 0;
  args.idempotency_key = key;
  return resil_http_call(c, "ka_post", &args, NULL, NULL, r);
}

static void h16_post_on_dead_keepalive_connection_is_not_resent(void **state) {
  fx_state *s = *state;
  const char *bodies[] = {"{\"a\":1}", NULL};
  for (size_t k = 0; k < 2; k++) {
    resil_fixture_reset(s->f);
    resil_http_resend mode = RESIL_HTTP_RESEND_NEVER;
    resil_http_client *c = client_on(s->f, eps, NEPS, set_resend, &mode);
    resil_http_response *r = NULL;
    resil_outcome o = ka_post(c, NULL, bodies[k], &r);
    assert_outcome(o, RESIL_UNKNOWN, RESIL_REASON_CONNECTION_CLOSED);
    assert_true(resil_outcome_maybe_executed(&o));
    assert_int_equal(resil_fixture_effects(s->f, "ka"), 1);
    /* The refused re-send never even opened its connection. */
    assert_int_equal(resil_fixture_connections(s->f), 1);
    resil_http_info info;
    resil_http_response_info(r, &info);
    assert_int_equal(info.resends, 0);
    assert_int_equal(info.reused_connection, 1);
    resil_http_stats st;
    resil_http_client_get_stats(c, &st);
    assert_int_equal(st.resends_prevented, 1);
    assert_int_equal(st.resends_counted, 0);
    assert_int_equal(st.attempts, 2);
    assert_int_equal(st.requests_sent, 2);
    assert_int_equal(st.outcomes[RESIL_UNKNOWN], 1);
    resil_http_response_free(r);
    /* The client stays usable: the next call opens a fresh connection. */
    o = resil_http_call(c, "ka_get", NULL, NULL, NULL, NULL);
    assert_int_equal(o.http_status, 200);
    resil_http_client_free(c);
  }
}

static void h16_if_safe_resends_a_keyed_post_once_and_counts_it(void **state) {
  fx_state *s = *state;
  resil_http_resend mode = RESIL_HTTP_RESEND_IF_SAFE;
  resil_http_client *c = client_on(s->f, eps, NEPS, set_resend, &mode);
  resil_http_response *r = NULL;
  resil_outcome o = ka_post(c, "k-h16", "{\"a\":1}", &r);
  assert_int_equal(o.http_status, 200);
  /* The ka route does not deduplicate: the counted re-send shows up as a
   * second effect, which is exactly what "counted" must make visible. */
  assert_int_equal(resil_fixture_effects(s->f, "ka"), 2);
  resil_http_info info;
  resil_http_response_info(r, &info);
  assert_int_equal(info.resends, 1);
  assert_int_equal(info.connections, 1);
  resil_http_stats st;
  resil_http_client_get_stats(c, &st);
  assert_int_equal(st.resends_counted, 1);
  assert_int_equal(st.resends_prevented, 0);
  assert_int_equal(st.attempts, 3);
  resil_http_response_free(r);

  /* The same client refuses the re-send of a POST that has no key. */
  resil_fixture_reset(s->f);
  o = ka_post(c, NULL, "{\"a\":1}", NULL);
  assert_outcome(o, RESIL_UNKNOWN, RESIL_REASON_CONNECTION_CLOSED);
  assert_int_equal(resil_fixture_effects(s->f, "ka"), 1);
  resil_http_client_get_stats(c, &st);
  assert_int_equal(st.resends_prevented, 1);
  resil_http_client_free(c);
}

/* libcurl's hidden re-send passes two guards (slot.c): the socket opened
 * for it (CURLOPT_OPENSOCKETFUNCTION), then the second request of the
 * transfer (CURLOPT_PREREQFUNCTION). With libcurl 7.88 every re-send opens
 * a socket first, so the test above never reaches the second guard. Here
 * the slot's socket opener is replaced by a plain one: the re-send gets its
 * connection, and only the request guard stands between it and a second
 * effect. */
static curl_socket_t plain_socket(void *ud, curlsocktype purpose, struct curl_sockaddr *addr) {
  (void)purpose;
  (*(int *)ud)++;
  return socket(addr->family, addr->socktype | SOCK_CLOEXEC, addr->protocol);
}

static void one_slot(resil_http_client_config *cfg, void *u) {
  (void)u;
  cfg->max_connections = 1;
  cfg->max_connections_per_host = 1;
}

static void h16_request_guard_alone_refuses_the_resend(void **state) {
  fx_state *s = *state;
  resil_http_client *c = client_on(s->f, eps, NEPS, one_slot, NULL);
  /* The slot's handle exists and keeps the connection alive. */
  resil_outcome o = resil_http_call(c, "ka_get", NULL, NULL, NULL, NULL);
  assert_int_equal(o.http_status, 200);
  int opened = 0;
  CURL *e = c->slots[0].e;
  assert_non_null(e);
  curl_easy_setopt(e, CURLOPT_OPENSOCKETFUNCTION, plain_socket);
  curl_easy_setopt(e, CURLOPT_OPENSOCKETDATA, &opened);
  resil_http_args args;
  resil_http_args_init(&args);
  args.body = "{\"a\":1}";
  args.body_len = strlen(args.body);
  resil_http_response *r = NULL;
  o = resil_http_call(c, "ka_post", &args, NULL, NULL, &r);
  assert_outcome(o, RESIL_UNKNOWN, RESIL_REASON_CONNECTION_CLOSED);
  /* libcurl did try: it opened a new connection for the re-send... */
  assert_int_equal(opened, 1);
  /* ...and the request guard kept the POST from going out again. */
  assert_int_equal(resil_fixture_effects(s->f, "ka"), 1);
  assert_non_null(strstr(resil_http_response_error(r), "re-send"));
  resil_http_stats st;
  resil_http_client_get_stats(c, &st);
  assert_int_equal(st.resends_prevented, 1);
  assert_int_equal(st.requests_sent, 2);
  resil_http_response_free(r);
  resil_http_client_free(c);
}

static void commit_then_close_before_headers_is_unknown(void **state) {
  fx_state *s = *state;
  resil_http_client *c = client_on(s->f, eps, NEPS, NULL, NULL);
  resil_http_response *r = NULL;
  resil_outcome o = resil_http_call(c, "commit_close", NULL, NULL, NULL, &r);
  assert_outcome(o, RESIL_UNKNOWN, RESIL_REASON_CONNECTION_CLOSED);
  assert_int_equal(resil_fixture_effects(s->f, "commit_close"), 1);
  /* A fresh connection: libcurl has nothing to re-send, nothing refused. */
  resil_http_stats st;
  resil_http_client_get_stats(c, &st);
  assert_int_equal(st.resends_prevented, 0);
  assert_int_equal(resil_http_response_status(r), 0);
  resil_http_response_free(r);
  resil_http_client_free(c);
}

/* ---- H13 ------------------------------------------------------------------ */

typedef struct log_capture {
  char *text;
  size_t len;
  size_t lines;
  int levels_seen[5];
} log_capture;

static void capture(void *user, resil_http_log_level level, const char *line) {
  log_capture *lc = user;
  size_t n = strlen(line);
  lc->text = realloc(lc->text, lc->len + n + 2);
  memcpy(lc->text + lc->len, line, n);
  lc->text[lc->len + n] = '\n';
  lc->len += n + 1;
  lc->text[lc->len] = '\0';
  lc->lines++;
  if ((unsigned)level < 5) lc->levels_seen[level] = 1;
}

typedef struct log_cfg {
  resil_http_log_level level;
  log_capture *lc;
} log_cfg;

static void set_log(resil_http_client_config *cfg, void *u) {
  log_cfg *l = u;
  cfg->log_level = l->level;
  cfg->log_fn = capture;
  cfg->log_user = l->lc;
}

static void h13_secrets_never_appear_at_any_log_level(void **state) {
  fx_state *s = *state;
  static const char *const secrets[] = {"SECRET-AUTH-9f2", "SECRET-COOKIE-71c", "SECRET-APIKEY-3d0",
                                        "SECRET-QUERY-b44", "SECRET-BODY-e15"};
  resil_http_log_level levels[] = {RESIL_HTTP_LOG_BASIC, RESIL_HTTP_LOG_HEADERS,
                                   RESIL_HTTP_LOG_FULL, RESIL_HTTP_LOG_METADATA};
  for (size_t k = 0; k < 4; k++) {
    log_capture lc = {0};
    log_cfg lcfg = {levels[k], &lc};
    resil_http_client *c = client_on(s->f, eps, NEPS, set_log, &lcfg);
    resil_http_param ps[] = {{"auth", secrets[0]}, {"cookie", secrets[1]},
                             {"apikey", secrets[2]}, {"qt", secrets[3]}};
    resil_http_args args;
    resil_http_args_init(&args);
    args.params = ps;
    args.param_count = 4;
    char body[128];
    snprintf(body, sizeof body, "{\"user\":\"ann\",\"password\":\"%s\",\"n\":1}", secrets[4]);
    args.body = body;
    args.body_len = strlen(body);
    resil_outcome o = resil_http_call(c, "echo_secret", &args, NULL, NULL, NULL);
    assert_int_equal(o.http_status, 200);
    /* The secrets did reach the server (so a leak would be possible)... */
    char hv[128];
    assert_int_equal(resil_fixture_last_header(s->f, "echo", "authorization", hv, sizeof hv), 1);
    assert_non_null(strstr(hv, secrets[0]));
    /* ...and never the log. */
    assert_true(lc.lines > 0);
    for (size_t i = 0; i < 5; i++)
      if (strstr(lc.text, secrets[i])) fail_msg("level %d leaked %s:\n%s", levels[k], secrets[i], lc.text);
    if (levels[k] == RESIL_HTTP_LOG_METADATA) {
      assert_int_equal(lc.lines, 1);
      assert_non_null(strstr(lc.text, "method=POST endpoint=echo_secret status=200"));
      assert_non_null(strstr(lc.text, "outcome=ANSWERED(200)"));
      assert_null(strstr(lc.text, "/echo"));
    } else {
      assert_non_null(strstr(lc.text, "--> POST http://127.0.0.1:"));
      assert_non_null(strstr(lc.text, "token=[REDACTED]&page=2"));
    }
    if (levels[k] == RESIL_HTTP_LOG_HEADERS || levels[k] == RESIL_HTTP_LOG_FULL) {
      assert_non_null(strstr(lc.text, "Authorization: [REDACTED]"));
      assert_non_null(strstr(lc.text, "Cookie: [REDACTED]"));
      assert_non_null(strstr(lc.text, "X-Api-Key: [REDACTED]"));
      assert_non_null(strstr(lc.text, "X-Trace: visible-trace"));
    }
    if (levels[k] == RESIL_HTTP_LOG_FULL) {
      assert_non_null(strstr(lc.text, "\"user\":\"ann\""));
      assert_non_null(strstr(lc.text, "\"password\":\"[REDACTED]\""));
    }
    free(lc.text);
    resil_http_client_free(c);
  }
}

/* ---- idempotency keys and interceptors --------------------------------------- */

typedef struct ic_log {
  char keys[8][64];
  uint32_t attempts[8];
  int n;
  resil_status key_change;
  int refuse;
} ic_log;

static resil_status signer(void *user, const resil_http_attempt_info *info, resil_http_headers *h) {
  ic_log *l = user;
  if (l->refuse) return RESIL_EINVAL;
  if (l->n < 8) {
    snprintf(l->keys[l->n], sizeof l->keys[0], "%s", info->idempotency_key ? info->idempotency_key : "");
    l->attempts[l->n] = info->attempt;
    l->n++;
  }
  char sig[32];
  snprintf(sig, sizeof sig, "sig-%u", info->attempt);
  assert_status(RESIL_OK, resil_http_headers_set(h, "X-Signature", sig));
  l->key_change = resil_http_headers_set(h, "idempotency-key", "forged");
  assert_status(RESIL_EMISUSE, resil_http_headers_set(h, "Content-Length", "1"));
  assert_status(RESIL_EINVAL, resil_http_headers_set(h, "X-Bad", "a\r\nInjected: 1"));
  return RESIL_OK;
}

static void set_signer(resil_http_client_config *cfg, void *u) {
  static resil_http_interceptor ic[1];
  ic[0].fn = signer;
  ic[0].user = u;
  cfg->interceptors = ic;
  cfg->interceptor_count = 1;
}

static void key_is_generated_once_and_sent_on_every_attempt(void **state) {
  fx_state *s = *state;
  ic_log l = {0};
  resil_http_client *c = client_on(s->f, eps, NEPS, set_signer, &l);
  resil_retry_config rc;
  resil_retry_config_init(&rc);
  rc.max_attempts = 3;
  rc.wait_ns = 0;
  rc.respect_retry_after = 0;
  resil_retry *retry = NULL;
  assert_status(RESIL_OK, resil_retry_new(&rc, &retry, NULL));
  resil_http_request *req = NULL;
  resil_http_param ps[] = {{"id", "k1"}, {"n", "2"}};
  resil_http_args args;
  resil_http_args_init(&args);
  args.params = ps;
  args.param_count = 2;
  assert_status(RESIL_OK, resil_http_request_new(c, "flaky_keyed", &args, &req, NULL));
  char key[64];
  assert_non_null(resil_http_request_idempotency_key(req));
  snprintf(key, sizeof key, "%s", resil_http_request_idempotency_key(req));
  assert_int_equal(strlen(key), 32);
  assert_int_equal(strspn(key, "0123456789abcdef"), 32);
  uint32_t flags = resil_http_request_call_flags(req);
  assert_true(flags & RESIL_CALL_STABLE_KEY);
  assert_false(flags & RESIL_CALL_IDEMPOTENT);
  resil_ctx ctx;
  resil_ctx_init(&ctx);
  ctx.flags = flags;
  resil_outcome o = resil_retry_run(retry, &ctx, resil_http_request_attempt, req);
  assert_int_equal(o.http_status, 200);
  assert_int_equal(o.attempts, 3);
  assert_int_equal(resil_fixture_attempts(s->f, "flaky"), 3);
  assert_int_equal(l.n, 3);
  for (int i = 0; i < 3; i++) {
    assert_string_equal(l.keys[i], key);
    assert_int_equal(l.attempts[i], (uint32_t)i + 1);
  }
  assert_status(RESIL_EMISUSE, l.key_change);
  char hv[128];
  assert_int_equal(resil_fixture_last_header(s->f, "flaky", "idempotency-key", hv, sizeof hv), 1);
  assert_string_equal(hv, key);
  assert_int_equal(resil_fixture_last_header(s->f, "flaky", "x-signature", hv, sizeof hv), 1);
  assert_string_equal(hv, "sig-3");
  resil_http_response *r = resil_http_request_take_response(req);
  resil_http_info info;
  resil_http_response_info(r, &info);
  assert_int_equal(info.attempt, 3);
  resil_http_response_free(r);
  assert_null(resil_http_request_take_response(req));
  resil_http_request_free(req);

  /* A second logical call gets another key; a caller's key is used as is. */
  assert_status(RESIL_OK, resil_http_request_new(c, "flaky_keyed", &args, &req, NULL));
  assert_string_not_equal(resil_http_request_idempotency_key(req), key);
  resil_http_request_free(req);
  resil_http_args_init(&args);
  args.idempotency_key = "caller-key-1";
  o = resil_http_call(c, "echo_keyed", &args, NULL, NULL, NULL);
  assert_int_equal(o.http_status, 200);
  assert_int_equal(resil_fixture_last_header(s->f, "echo", "idempotency-key", hv, sizeof hv), 1);
  assert_string_equal(hv, "caller-key-1");
  resil_retry_free(retry);
  resil_http_client_free(c);
}

static void interceptor_refusal_sends_nothing(void **state) {
  fx_state *s = *state;
  ic_log l = {.refuse = 1};
  resil_http_client *c = client_on(s->f, eps, NEPS, set_signer, &l);
  resil_http_response *r = NULL;
  resil_outcome o = resil_http_call(c, "echo_keyed", NULL, NULL, NULL, &r);
  assert_outcome(o, RESIL_NOT_SENT, RESIL_REASON_LOCAL_ERROR);
  assert_non_null(strstr(resil_http_response_error(r), "interceptor 0"));
  assert_int_equal(resil_fixture_connections(s->f), 0);
  resil_http_response_free(r);
  resil_http_client_free(c);
}

/* ---- H6 ------------------------------------------------------------------------ */

static void short_response_timeout(resil_http_client_config *cfg, void *u) {
  (void)u;
  cfg->response_timeout_ns = MS(150);
}

static void h6_unsafe_retries_only_when_opted_in_stable_key_gives_one_effect(void **state) {
  fx_state *s = *state;
  resil_http_client *c = client_on(s->f, eps, NEPS, short_response_timeout, NULL);
  resil_retry_config rc;
  resil_retry_config_init(&rc);
  rc.max_attempts = 3;
  rc.wait_ns = 0;
  resil_retry *safe = NULL, *unsafe = NULL;
  assert_status(RESIL_OK, resil_retry_new(&rc, &safe, NULL));
  rc.unsafe_retry_non_idempotent = 1;
  assert_status(RESIL_OK, resil_retry_new(&rc, &unsafe, NULL));
  resil_http_param ps[] = {{"ms", "500"}, {"name", "h6"}};
  resil_http_args args;
  resil_http_args_init(&args);
  args.params = ps;
  args.param_count = 2;

  resil_outcome o = resil_http_call(c, "slow_post", &args, unsafe, NULL, NULL);
  assert_outcome(o, RESIL_UNKNOWN, RESIL_REASON_TIMEOUT);
  assert_int_equal(o.attempts, 3);
  assert_int_equal(resil_fixture_effects(s->f, "slow"), 3);

  resil_fixture_reset(s->f);
  o = resil_http_call(c, "slow_post", &args, safe, NULL, NULL);
  assert_outcome(o, RESIL_UNKNOWN, RESIL_REASON_TIMEOUT);
  assert_int_equal(o.stop, RESIL_STOP_UNSAFE);
  assert_int_equal(o.attempts, 1);
  assert_int_equal(resil_fixture_effects(s->f, "slow"), 1);

  /* The idempotent endpoint commits, then sleeps past the timeout; the
   * retry with the same key gets the stored answer. */
  resil_fixture_reset(s->f);
  resil_http_response *r = NULL;
  o = resil_http_call(c, "idem", &args, safe, NULL, &r);
  assert_int_equal(o.http_status, 201);
  assert_int_equal(o.attempts, 2);
  assert_int_equal(resil_fixture_effects(s->f, "idem"), 1);
  assert_string_equal(resil_http_response_header(r, "idempotent-replayed"), "true");
  resil_http_response_free(r);
  resil_retry_free(safe);
  resil_retry_free(unsafe);
  resil_http_client_free(c);
}

/* ---- abandoned attempts ----------------------------------------------------------- */

typedef struct runner {
  resil_http_request *req;
  resil_ctx ctx;
  resil_outcome o;
} runner;

static void *run_attempt(void *u) {
  runner *r = u;
  r->o = resil_http_request_attempt(r->req, &r->ctx);
  return NULL;
}

/* Opens when an attempt numbered `attempt` has begun: its interceptor runs
 * inside the attempt, after it took its sequence number and its reference
 * on the request, before anything is sent. The ordering the tests need,
 * without sleeping for it. */
typedef struct start_gate {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  uint32_t attempt;
  int started;
} start_gate;

static resil_status open_gate(void *u, const resil_http_attempt_info *info,
                              resil_http_headers *h) {
  (void)h;
  start_gate *g = u;
  pthread_mutex_lock(&g->mu);
  if (info->attempt == g->attempt) g->started = 1;
  pthread_cond_broadcast(&g->cv);
  pthread_mutex_unlock(&g->mu);
  return RESIL_OK;
}

static void wait_gate(start_gate *g) {
  pthread_mutex_lock(&g->mu);
  while (!g->started) pthread_cond_wait(&g->cv, &g->mu);
  pthread_mutex_unlock(&g->mu);
}

static void set_gate(resil_http_client_config *cfg, void *u) {
  static resil_http_interceptor ic[1];
  ic[0].fn = open_gate;
  ic[0].user = u;
  cfg->interceptors = ic;
  cfg->interceptor_count = 1;
}

static void abandoned_attempt_never_overwrites_the_current_result(void **state) {
  fx_state *s = *state;
  start_gate g = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 1, 0};
  resil_http_client *c = client_on(s->f, eps, NEPS, set_gate, &g);
  resil_http_request *req = NULL;
  resil_http_param ps[] = {{"id", "5"}, {"ms", "400"}};
  resil_http_args args;
  resil_http_args_init(&args);
  args.params = ps;
  args.param_count = 2;
  assert_status(RESIL_OK, resil_http_request_new(c, "item_slow", &args, &req, NULL));
  /* Attempt 1 runs on a thread, as under a time limiter that gave up. */
  runner r1 = {.req = req};
  resil_ctx_init(&r1.ctx);
  r1.ctx.attempt = 1;
  pthread_t t;
  pthread_create(&t, NULL, run_attempt, &r1);
  wait_gate(&g);
  /* Attempt 2 starts while 1 still runs (its 400 ms answer is far off)
   * and times out first. */
  resil_ctx ctx;
  resil_ctx_init(&ctx);
  ctx.attempt = 2;
  resil_ctx_set_timeout_ns(&ctx, MS(100));
  resil_outcome o2 = resil_http_request_attempt(req, &ctx);
  assert_outcome(o2, RESIL_UNKNOWN, RESIL_REASON_TIMEOUT);
  pthread_join(t, NULL);
  assert_int_equal(r1.o.http_status, 200);
  resil_http_response *r = resil_http_request_take_response(req);
  assert_non_null(r);
  resil_http_info info;
  resil_http_response_info(r, &info);
  assert_int_equal(info.attempt, 2);
  assert_int_equal(resil_http_response_outcome(r).reason, RESIL_REASON_TIMEOUT);
  resil_http_response_free(r);
  resil_http_request_free(req);
  resil_http_client_free(c);
}

static void request_and_client_freed_while_attempt_runs(void **state) {
  fx_state *s = *state;
  start_gate g = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0};
  resil_http_client *c = client_on(s->f, eps, NEPS, set_gate, &g);
  resil_http_request *req = NULL;
  resil_http_param ps[] = {{"id", "6"}, {"ms", "200"}};
  resil_http_args args;
  resil_http_args_init(&args);
  args.params = ps;
  args.param_count = 2;
  assert_status(RESIL_OK, resil_http_request_new(c, "item_slow", &args, &req, NULL));
  runner r1 = {.req = req};
  resil_ctx_init(&r1.ctx);
  pthread_t t;
  pthread_create(&t, NULL, run_attempt, &r1);
  wait_gate(&g);
  /* The caller gives up: it frees everything while the attempt runs. */
  resil_http_request_free(req);
  resil_http_client_free(c);
  pthread_join(t, NULL);
  assert_int_equal(r1.o.http_status, 200);
  assert_int_equal(resil_fixture_attempts(s->f, "items"), 1);
}

/* ---- P13 (HTTP and retry only) ------------------------------------------------------- */

static void set_rt(resil_http_client_config *cfg, void *u) {
  cfg->response_timeout_ns = *(int64_t *)u;
}

static void p13_deadline_shared_by_retry_and_http(void **state) {
  /* DESIGN P13 with the HTTP response timeout standing in for the 400 ms
   * time limiter; the full Retry(Breaker(TimeLimiter(Bulkhead(HTTP))))
   * chain belongs to the chain tests. */
  fx_state *s = *state;
  int64_t rt = MS(400);
  resil_http_client *c = client_on(s->f, eps, NEPS, set_rt, &rt);
  resil_retry_config rc;
  resil_retry_config_init(&rc);
  rc.max_attempts = 3;
  rc.wait_ns = MS(100);
  rc.min_attempt_budget_ns = MS(500);
  resil_retry *retry = NULL;
  assert_status(RESIL_OK, resil_retry_new(&rc, &retry, NULL));
  resil_http_param ps[] = {{"id", "13"}, {"ms", "900"}};
  resil_http_args args;
  resil_http_args_init(&args);
  args.params = ps;
  args.param_count = 2;
  resil_ctx ctx;
  resil_ctx_init(&ctx);
  resil_ctx_set_timeout_ns(&ctx, MS(700));
  int64_t t0 = mono_ms();
  resil_outcome o = resil_http_call(c, "item_slow", &args, retry, &ctx, NULL);
  int64_t took = mono_ms() - t0;
  assert_int_equal(o.kind, RESIL_UNKNOWN);
  assert_int_equal(o.stop, RESIL_STOP_DEADLINE);
  assert_int_equal(o.attempts, 1);
  assert_int_equal(resil_fixture_attempts(s->f, "items"), 1);
  assert_true(took < 650);
  /* The upstream recovers: a new 700 ms budget, one attempt. */
  ps[1].value = "0";
  resil_ctx_set_timeout_ns(&ctx, MS(700));
  o = resil_http_call(c, "item_slow", &args, retry, &ctx, NULL);
  assert_int_equal(o.http_status, 200);
  assert_int_equal(o.attempts, 1);
  resil_retry_free(retry);
  resil_http_client_free(c);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(h16_post_on_dead_keepalive_connection_is_not_resent, fx_setup, fx_teardown),
      cmocka_unit_test_setup_teardown(h16_if_safe_resends_a_keyed_post_once_and_counts_it, fx_setup, fx_teardown),
      cmocka_unit_test_setup_teardown(h16_request_guard_alone_refuses_the_resend, fx_setup, fx_teardown),
      cmocka_unit_test_setup_teardown(commit_then_close_before_headers_is_unknown, fx_setup, fx_teardown),
      cmocka_unit_test_setup_teardown(h13_secrets_never_appear_at_any_log_level, fx_setup, fx_teardown),
      cmocka_unit_test_setup_teardown(key_is_generated_once_and_sent_on_every_attempt, fx_setup, fx_teardown),
      cmocka_unit_test_setup_teardown(interceptor_refusal_sends_nothing, fx_setup, fx_teardown),
      cmocka_unit_test_setup_teardown(h6_unsafe_retries_only_when_opted_in_stable_key_gives_one_effect, fx_setup, fx_teardown),
      cmocka_unit_test_setup_teardown(abandoned_attempt_never_overwrites_the_current_result, fx_setup, fx_teardown),
      cmocka_unit_test_setup_teardown(request_and_client_freed_while_attempt_runs, fx_setup, fx_teardown),
      cmocka_unit_test_setup_teardown(p13_deadline_shared_by_retry_and_http, fx_setup, fx_teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
