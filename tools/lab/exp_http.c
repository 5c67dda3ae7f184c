/* Lab experiments H1-H16 and P13 (DESIGN §7): libresil-http against the
 * fault-injecting fixture upstream on 127.0.0.1, real sockets, real time.
 * Each experiment starts its own fixture so that its counters are its
 * own. The H experiments run on both paths (lab_result.h): the blocking API, and
 * the same calls on the async engine (lab_engine.h), with the same checks
 * and observed values, plus `ran_on_engine` there; where the engine
 * differs (its own connection cache instead of the client's pool: H8, H9,
 * H16) the experiment says so. H9 runs on the blocking path only until the
 * engine has a lease timeout. P13 (a chain over the blocking request) is
 * blocking only. */
#include "lab_result.h"
#include "lab_families.h"
#include "lab_ops.h"
#include "lab_engine.h"

#ifdef RESIL_HAVE_FIXTURE
#include <string.h>

/* args from kv (name, value pairs, at most 8, into ps), key and body. */
static void fill_args(resil_http_args *args, resil_http_param ps[8], const char *const *kv,
                      const char *key, const char *body) {
  size_t n = 0;
  for (; kv && kv[2 * n] && n < 8; n++) {
    ps[n].name = kv[2 * n];
    ps[n].value = kv[2 * n + 1];
  }
  resil_http_args_init(args);
  args->params = ps;
  args->param_count = n;
  args->idempotency_key = key;
  if (body) {
    args->body = body;
    args->body_len = strlen(body);
  }
}

/* One call with ready args: on le's engine when le is not NULL. */
static resil_outcome call_args_on(lab_engine *le, resil_http_client *c, const char *ep,
                                  const resil_http_args *args, resil_retry *rt,
                                  const resil_ctx *ctx, resil_http_response **out) {
#ifdef RESIL_HAVE_LOOP
  if (le) return lab_engine_call(le, ep, args, rt, ctx, out);
#else
  (void)le;
#endif
  return resil_http_call(c, ep, args, rt, ctx, out);
}

/* One logical call on client c, on le's engine when le is not NULL
 * (lab_engine.h: the call submitted to le's engine, which must be on client
 * c): kv is a NULL-terminated list of name, value pairs for the endpoint's
 * placeholders (at most 8 pairs), key the idempotency key or NULL, body
 * text sent as is or NULL; rt, ctx and out may be NULL, as for
 * resil_http_call. */
static resil_outcome lab_http_call_on(lab_engine *le, resil_http_client *c, const char *ep,
                                      const char *const *kv, const char *key, const char *body,
                                      resil_retry *rt, const resil_ctx *ctx,
                                      resil_http_response **out) {
  resil_http_param ps[8];
  resil_http_args args;
  fill_args(&args, ps, kv, key, body);
  return call_args_on(le, c, ep, &args, rt, ctx, out);
}

#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "fixture/fixture.h"
#include "resil/chain.h"
#include "resil/http.h"
#include "resil/resil.h"

#define MS(x) ((int64_t)(x) * INT64_C(1000000))

static const char *const item_headers[] = {"X-Token: {token}", NULL};
static const char *const secret_headers[] = {
    "Authorization: {auth}", "Cookie: {cookie}", "X-Api-Key: {apikey}", NULL};

static resil_outcome business_decoder(void *user, const resil_http_response *r,
                                      resil_outcome proposed) {
  (void)user;
  if (resil_http_response_status(r) == 422) proposed.reason = RESIL_REASON_BUSINESS;
  return proposed;
}

static const resil_http_endpoint lab_endpoints[] = {
    {.struct_size = sizeof(resil_http_endpoint), .name = "get_item", .path = "/items/{id}", .headers = item_headers,
     .response_codec = RESIL_HTTP_CODEC_JSON},
    {.struct_size = sizeof(resil_http_endpoint), .name = "status", .path = "/status/{code}"},
    {.struct_size = sizeof(resil_http_endpoint), .name = "status_ra", .path = "/status/{code}", .query = "retry_after={ra}"},
    {.struct_size = sizeof(resil_http_endpoint), .name = "post_status", .method = RESIL_HTTP_POST, .path = "/status/{code}",
     .query = "retry_after={ra}"},
    {.struct_size = sizeof(resil_http_endpoint), .name = "slow_post", .method = RESIL_HTTP_POST, .path = "/slow", .query = "ms={ms}"},
    {.struct_size = sizeof(resil_http_endpoint), .name = "slow_get", .path = "/slow", .query = "ms={ms}"},
    {.struct_size = sizeof(resil_http_endpoint), .name = "idem_post", .method = RESIL_HTTP_POST, .path = "/idem/{name}",
     .query = "sleep_ms={ms}", .idempotency_key = RESIL_HTTP_KEY_SEND},
    {.struct_size = sizeof(resil_http_endpoint), .name = "empty", .path = "/empty", .response_codec = RESIL_HTTP_CODEC_JSON},
    {.struct_size = sizeof(resil_http_endpoint), .name = "badjson", .path = "/badjson", .response_codec = RESIL_HTTP_CODEC_JSON},
    {.struct_size = sizeof(resil_http_endpoint), .name = "seq", .path = "/seq/{id}", .query = "codes={codes}"},
    {.struct_size = sizeof(resil_http_endpoint), .name = "business", .method = RESIL_HTTP_POST, .path = "/status/422",
     .decoder = business_decoder},
    {.struct_size = sizeof(resil_http_endpoint), .name = "echo", .method = RESIL_HTTP_POST, .path = "/echo",
     .request_codec = RESIL_HTTP_CODEC_JSON, .response_codec = RESIL_HTTP_CODEC_JSON},
    {.struct_size = sizeof(resil_http_endpoint), .name = "redirect", .path = "/redirect/{n}"},
    {.struct_size = sizeof(resil_http_endpoint), .name = "ka_get", .path = "/ka"},
    {.struct_size = sizeof(resil_http_endpoint), .name = "ka_post", .method = RESIL_HTTP_POST, .path = "/ka"},
    {.struct_size = sizeof(resil_http_endpoint), .name = "secret", .path = "/items/{id}", .query = "token={qt}&page=2",
     .headers = secret_headers},
};

typedef struct lab_http {
  resil_fixture *fx;
  resil_http_client *c;
  /* The engine path (r->path LAB_PATH_ENGINE): an engine on c that call()
   * submits to; NULL on the blocking path. */
  lab_engine *le;
  lab_result *r; /* --metrics / --events (lab_ops.h) */
} lab_http;

#define LAB_ENDPOINTS (sizeof lab_endpoints / sizeof lab_endpoints[0])

/* A copy of the endpoint table for a wrong variant to change. */
typedef struct endpoint_table {
  resil_http_endpoint eps[LAB_ENDPOINTS];
} endpoint_table;

static resil_http_endpoint *endpoint_copy(endpoint_table *t, const char *name) {
  memcpy(t->eps, lab_endpoints, sizeof t->eps);
  for (size_t i = 0; i < LAB_ENDPOINTS; i++)
    if (strcmp(t->eps[i].name, name) == 0) return &t->eps[i];
  return NULL;
}

static void set_endpoints(resil_http_client_config *cfg, void *u) {
  cfg->endpoints = ((endpoint_table *)u)->eps;
}

typedef void (*cfg_fn)(resil_http_client_config *cfg, void *u);

static int lab_http_open(lab_result *r, lab_http *h, cfg_fn fn, void *u) {
  memset(h, 0, sizeof *h);
  h->r = r;
  char eb[256];
  if (!lab_check(r, resil_fixture_start(NULL, &h->fx, eb, sizeof eb) == 0,
                 "fixture: %s", eb))
    return 0;
  resil_http_client_config cfg;
  resil_http_client_config_init(&cfg);
  cfg.base_url = resil_fixture_url(h->fx);
  cfg.endpoints = lab_endpoints;
  cfg.endpoint_count = LAB_ENDPOINTS;
  if (fn) fn(&cfg, u);
  lab_ops_client_config(r, &cfg, "client"); /* its name, the event log */
  resil_error err;
  if (!lab_check(r, resil_http_client_new(&cfg, &h->c, &err) == RESIL_OK, "client: %s",
                 err.msg))
    return 0;
#ifdef RESIL_HAVE_LOOP
  if (r->path == LAB_PATH_ENGINE && !(h->le = lab_engine_open(r, h->c))) return 0;
#endif
  return 1;
}

static void lab_http_close(lab_http *h) {
  if (h->r) { /* --metrics: the client's figures before it goes */
    lab_ops_add_client(h->r, "client", h->c);
    lab_capture(h->r);
  }
#ifdef RESIL_HAVE_LOOP
  lab_engine_close(h->le);
#endif
  resil_http_client_free(h->c);
  resil_fixture_stop(h->fx);
}

/* One logical call through the experiment's client (on its engine on the
 * engine path). */
static resil_outcome call(lab_http *h, const char *ep, const char *const *kv,
                          resil_retry *rt, const resil_ctx *ctx,
                          resil_http_response **out) {
  return lab_http_call_on(h->le, h->c, ep, kv, NULL, NULL, rt, ctx, out);
}

/* The same with ready args (a body of its own, flags). */
static resil_outcome call_args(lab_http *h, const char *ep, const resil_http_args *args,
                               resil_retry *rt, const resil_ctx *ctx,
                               resil_http_response **out) {
  return call_args_on(h->le, h->c, ep, args, rt, ctx, out);
}

/* Calls h's engine accepted (0 on the blocking path). */
static size_t engine_calls(const lab_http *h) {
#ifdef RESIL_HAVE_LOOP
  return lab_engine_calls(h->le);
#else
  (void)h;
  return 0;
#endif
}

#define KV(...) ((const char *const[]){__VA_ARGS__, NULL})

static const char *fmt(const resil_outcome *o, char *b, size_t n) {
  return resil_outcome_format(o, b, n);
}

static int64_t now_ms(void) { return resil_clock_now_ns(NULL) / 1000000; }

static resil_retry *make_retry(uint32_t attempts, resil_retry_backoff kind,
                               int64_t wait_ns, int64_t cap_ns, int unsafe,
                               resil_attempt_listener_fn listener, void *user) {
  resil_retry_config c;
  resil_retry_config_init(&c);
  c.max_attempts = attempts;
  c.backoff = kind;
  c.wait_ns = wait_ns;
  c.initial_wait_ns = wait_ns > 0 ? wait_ns : MS(1);
  c.multiplier = 2.0;
  c.max_wait_ns = cap_ns > c.initial_wait_ns ? cap_ns : c.initial_wait_ns;
  c.unsafe_retry_non_idempotent = unsafe;
  c.on_attempt = listener;
  c.on_attempt_user = user;
  resil_retry *r = NULL;
  return resil_retry_new(&c, &r, NULL) == RESIL_OK ? r : NULL;
}

static long effects(lab_http *h, const char *route) {
  return resil_fixture_effects(h->fx, route);
}
static long attempts(lab_http *h, const char *route) {
  return resil_fixture_attempts(h->fx, route);
}
/* Attempts the client made so far (resil_http_stats.attempts). */
static long long client_attempts(lab_http *h) {
  resil_http_stats st;
  memset(&st, 0, sizeof st);
  resil_http_client_get_stats(h->c, &st);
  return (long long)st.attempts;
}

/* ---- H1 ---------------------------------------------------------------- */
static const char *const other_headers[] = {"X-Other: {token}", NULL};

/* The wrong variant's endpoint sends the token in another header. */
static int h1_run(lab_result *r, int wrong) {
  lab_http h;
  endpoint_table t;
  endpoint_copy(&t, "get_item")->headers = wrong ? other_headers : item_headers;
  if (!lab_http_open(r, &h, set_endpoints, &t)) goto out;
  resil_http_response *resp = NULL;
  resil_outcome o = call(&h, "get_item", KV("id", "42", "token", "tok-42"), NULL, NULL, &resp);
  json_t *j = resil_http_response_json(resp);
  long long id = json_integer_value(json_object_get(j, "id"));
  const char *name = json_string_value(json_object_get(j, "name"));
  char tok[64] = "";
  resil_fixture_last_header(h.fx, "items", "x-token", tok, sizeof tok);
  long seen = attempts(&h, "items");
  char ob[96];
  lab_obs_str(r, "outcome", fmt(&o, ob, sizeof ob));
  lab_obs_int(r, "attempts", seen);
  lab_obs_int(r, "id", id);
  lab_obs_str(r, "name", name ? name : "");
  lab_obs_str(r, "token_header_seen", tok);
  lab_summary(r, "GET /items/{id} id=42 X-Token: tok-42 -> %s, decoded {id %lld, name \"%s\"}, upstream saw %ld request(s) with X-Token %s",
              ob, id, name ? name : "", seen, tok);
  lab_check(r, o.http_status == 200, "outcome %s", ob);
  lab_check(r, id == 42 && name && strcmp(name, "item-42") == 0, "decoded wrong");
  lab_expect(r, "token_bound", strcmp(tok, "tok-42") == 0, "token header not bound");
  lab_check(r, seen == 1, "upstream saw %ld requests", seen);
  resil_http_response_free(resp);
  lab_engine_expect_ran(r, engine_calls(&h));
out:
  lab_http_close(&h);
  return r->pass;
}

static int h1(lab_result *r) { return h1_run(r, 0); }
static int h1_wrong(lab_result *r) { return h1_run(r, 1); }

/* ---- H2 ---------------------------------------------------------------- */
/* The wrong variant passes a retry (3 attempts) as if it were the default. */
static int h2_run(lab_result *r, int wrong) {
  lab_http h;
  resil_retry *rt = wrong ? make_retry(3, RESIL_RETRY_FIXED, MS(1), 0, 0, NULL, NULL) : NULL;
  if (!lab_http_open(r, &h, NULL, NULL)) goto out;
  resil_outcome a = call(&h, "status", KV("code", "400"), rt, NULL, NULL);
  long n400 = attempts(&h, "status");
  resil_fixture_reset(h.fx);
  resil_outcome b = call(&h, "status", KV("code", "500"), rt, NULL, NULL);
  long n500 = attempts(&h, "status");
  char oa[64], ob[64];
  lab_obs_int(r, "attempts_400", n400);
  lab_obs_int(r, "attempts_500", n500);
  lab_obs_int(r, "attempts", n400 + n500);
  lab_obs_str(r, "outcome", fmt(&b, ob, sizeof ob));
  lab_obs_str(r, "outcome_400", fmt(&a, oa, sizeof oa));
  lab_summary(r, "no retry policy: 400 -> %s after %ld attempt(s); 500 -> %s after %ld attempt(s)",
              oa, n400, ob, n500);
  lab_check(r, a.http_status == 400 && n400 == 1, "400: %s, %ld attempts", oa, n400);
  lab_expect(r, "one_attempt_500", b.http_status == 500 && n500 == 1, "500: %s, %ld attempts",
             ob, n500);
  lab_engine_expect_ran(r, engine_calls(&h));
out:
  lab_http_close(&h);
  resil_retry_free(rt);
  return r->pass;
}

static int h2(lab_result *r) { return h2_run(r, 0); }
static int h2_wrong(lab_result *r) { return h2_run(r, 1); }

/* ---- H3 ---------------------------------------------------------------- */
/* The waits of a retried call, as planned and as they happened: the retry's
 * listener gives the planned wait and the instant the failed attempt ended;
 * an interceptor gives the instant the next attempt started. */
typedef struct waits {
  int n;
  int64_t planned_ns[8];
  int64_t ended_ns[8];
  int starts;
  int64_t started_ns[8];
  resil_http_interceptor ic;
} waits;

static void record_wait(void *user, const resil_attempt_info *info) {
  waits *w = user;
  if (info->next_wait_ns < 0) return; /* the last attempt: no wait follows */
  if (w->n < 8) {
    w->planned_ns[w->n] = info->next_wait_ns;
    w->ended_ns[w->n++] = resil_clock_now_ns(NULL);
  }
}

static resil_status record_start(void *user, const resil_http_attempt_info *info,
                                 resil_http_headers *hd) {
  (void)info;
  (void)hd;
  waits *w = user;
  if (w->starts < 8) w->started_ns[w->starts++] = resil_clock_now_ns(NULL);
  return RESIL_OK;
}

static void set_start_recorder(resil_http_client_config *cfg, void *u) {
  waits *w = u;
  w->ic.fn = record_start;
  w->ic.user = w;
  cfg->interceptors = &w->ic;
  cfg->interceptor_count = 1;
}

/* The measured wait before attempt k + 2: from the end of attempt k + 1 to
 * the start of the next; -1 when there is none. */
static double measured_wait_ms(const waits *w, int k) {
  if (k >= w->n || k + 1 >= w->starts) return -1;
  return (double)(w->started_ns[k + 1] - w->ended_ns[k]) / 1e6;
}

/* 502 + Retry-After: 1 (1000 ms) with an exponential retry 20 ms x 2, cap
 * 50 ms: each wait must be the Retry-After capped at 50 ms, not the computed
 * 20 and 40 ms. The planned waits (the retry's listener) must be exactly
 * 50 ms. The measured ones must be at least that (a sleep is never shorter
 * than asked; 0.5 ms allows for the two clock reads) and at most 250 ms:
 * 200 ms of scheduling delay is generous for a loaded 2-core machine and
 * still far below the uncapped 1000 ms. The wrong variant ignores
 * Retry-After (respect_retry_after 0). */
#define H3_CAP_MS 50
#define H3_SLACK_MS 200

static int h3_run(lab_result *r, int respect_retry_after) {
  lab_http h;
  waits w;
  memset(&w, 0, sizeof w);
  resil_retry_config rc;
  resil_retry_config_init(&rc);
  rc.max_attempts = 3;
  rc.backoff = RESIL_RETRY_EXPONENTIAL;
  rc.initial_wait_ns = MS(20);
  rc.multiplier = 2.0;
  rc.max_wait_ns = MS(H3_CAP_MS);
  rc.respect_retry_after = respect_retry_after;
  rc.on_attempt = record_wait;
  rc.on_attempt_user = &w;
  resil_retry *rt = NULL;
  if (!lab_check(r, resil_retry_new(&rc, &rt, NULL) == RESIL_OK, "retry setup") ||
      !lab_http_open(r, &h, set_start_recorder, &w)) {
    resil_retry_free(rt);
    return 0;
  }
  int64_t t0 = now_ms();
  resil_outcome o = call(&h, "status_ra", KV("code", "502", "ra", "1"), rt, NULL, NULL);
  int64_t took = now_ms() - t0;
  long with_retry = attempts(&h, "status");
  resil_fixture_reset(h.fx);
  long long before = client_attempts(&h);
  call(&h, "status_ra", KV("code", "502", "ra", "1"), NULL, NULL, NULL);
  long long made_without = client_attempts(&h) - before;
  long without = attempts(&h, "status");
  json_t *planned = json_array(), *measured = json_array();
  int planned_ok = w.n == 2, measured_ok = w.n == 2;
  double lo = 1e9, hi = -1;
  for (int i = 0; i < w.n; i++) {
    double m = measured_wait_ms(&w, i);
    json_array_append_new(planned, json_integer(w.planned_ns[i] / 1000000));
    json_array_append_new(measured, json_real(m));
    if (w.planned_ns[i] != MS(H3_CAP_MS)) planned_ok = 0;
    if (m < H3_CAP_MS - 0.5 || m > H3_CAP_MS + H3_SLACK_MS) measured_ok = 0;
    if (m < lo) lo = m;
    if (m > hi) hi = m;
  }
  char ob[64];
  lab_obs_int(r, "attempts", o.attempts);
  lab_obs_int(r, "upstream_attempts", with_retry);
  lab_obs_int(r, "attempts_without_retry", made_without);
  lab_obs_int(r, "upstream_attempts_without_retry", without);
  lab_obs_bool(r, "respect_retry_after", respect_retry_after);
  lab_obs_json(r, "waits_ms", planned);
  lab_obs_json(r, "measured_waits_ms", measured);
  lab_obs_int(r, "total_ms", took);
  lab_obs_str(r, "outcome", fmt(&o, ob, sizeof ob));
  lab_summary(r, "502 + Retry-After: 1, retry exp 20 ms cap 50 ms x3: %u attempts (upstream saw %ld), planned waits %lld/%lld ms, measured %.1f..%.1f ms, %lld ms in all; without retry: %lld attempt (upstream saw %ld)",
              o.attempts, with_retry,
              (long long)(w.n > 0 ? w.planned_ns[0] / 1000000 : -1),
              (long long)(w.n > 1 ? w.planned_ns[1] / 1000000 : -1), lo, hi, (long long)took,
              made_without, without);
  lab_expect(r, "three_attempts", with_retry == 3 && o.attempts == 3,
             "%ld attempts seen, %u counted with retry, expected 3", with_retry, o.attempts);
  lab_expect(r, "waits_are_capped_retry_after", planned_ok,
             "planned waits %lld/%lld ms (%d), expected %d/%d: the capped Retry-After",
             (long long)(w.n > 0 ? w.planned_ns[0] / 1000000 : -1),
             (long long)(w.n > 1 ? w.planned_ns[1] / 1000000 : -1), w.n, H3_CAP_MS,
             H3_CAP_MS);
  lab_expect(r, "measured_waits_capped", measured_ok,
             "measured waits %.1f..%.1f ms, expected %d..%d", lo, hi, H3_CAP_MS,
             H3_CAP_MS + H3_SLACK_MS);
  lab_expect(r, "one_attempt_without_retry", without == 1 && made_without == 1,
             "%ld attempts seen, %lld made without retry, expected 1", without, made_without);
  lab_engine_expect_ran(r, engine_calls(&h));
  lab_http_close(&h);
  resil_retry_free(rt);
  return r->pass;
}

static int h3(lab_result *r) { return h3_run(r, 1); }
static int h3_wrong(lab_result *r) { return h3_run(r, 0); }

/* ---- H4 ---------------------------------------------------------------- */
static void set_timeout(resil_http_client_config *cfg, void *u) {
  cfg->response_timeout_ns = *(int64_t *)u;
}

/* The wrong variant passes a retry with the unsafe opt-in. */
static int h4_run(lab_result *r, int wrong) {
  resil_retry *rt = wrong ? make_retry(2, RESIL_RETRY_FIXED, MS(1), 0, 1, NULL, NULL) : NULL;
  /* A short and a long response timeout; the short one still well above
   * what an immediate answer takes on a loaded machine under a sanitizer
   * (50 ms, before, was not always). */
  int64_t timeouts[2] = {MS(500), MS(5000)};
  const char *codes[2] = {"503", "429"};
  json_t *arr = json_array();
  long total = 0;
  long long made = 0;
  size_t on_engine = 0;
  int ok = 1;
  char outs[2][64] = {"", ""};
  for (int t = 0; t < 2; t++) {
    lab_http h;
    if (!lab_http_open(r, &h, set_timeout, &timeouts[t])) {
      lab_http_close(&h);
      json_decref(arr);
      resil_retry_free(rt);
      return 0;
    }
    for (int k = 0; k < 2; k++) {
      resil_fixture_reset(h.fx);
      resil_outcome o = call(&h, "post_status", KV("code", codes[k], "ra", "1"), rt, NULL, NULL);
      long n = attempts(&h, "status");
      total += n;
      char ob[64];
      fmt(&o, ob, sizeof ob);
      if (t == 0) snprintf(outs[k], sizeof outs[k], "%s", ob);
      json_t *x = json_object();
      json_object_set_new(x, "status", json_integer(o.http_status));
      json_object_set_new(x, "outcome", json_string(ob));
      json_object_set_new(x, "response_timeout_ms", json_integer(timeouts[t] / 1000000));
      json_object_set_new(x, "attempts", json_integer(n));
      json_array_append_new(arr, x);
      if (n != 1 || o.http_status != atoi(codes[k])) ok = 0;
    }
    resil_http_stats st;
    resil_http_client_get_stats(h.c, &st);
    made += (long long)st.attempts;
    if (st.resends_counted != 0 || st.requests_sent != 2 || st.attempts != 2) ok = 0;
    on_engine += engine_calls(&h);
    lab_http_close(&h);
  }
  char both[140];
  snprintf(both, sizeof both, "%s, %s", outs[0], outs[1]);
  lab_obs_json(r, "cases", arr);
  lab_obs_int(r, "attempts", total);
  lab_obs_int(r, "client_attempts", made);
  lab_obs_str(r, "outcome", both);
  lab_summary(r, "POST 503 and 429 with response timeouts %lld ms and %lld s: %s; upstream saw %ld attempts for 4 calls, the clients made %lld, no transport re-send",
              (long long)(timeouts[0] / MS(1)), (long long)(timeouts[1] / MS(1000)), both, total,
              made);
  lab_expect(r, "one_attempt_each", ok && total == 4 && made == 4,
             "some call made more than one attempt");
  lab_engine_expect_ran(r, on_engine);
  resil_retry_free(rt);
  return r->pass;
}

static int h4(lab_result *r) { return h4_run(r, 0); }
static int h4_wrong(lab_result *r) { return h4_run(r, 1); }

/* ---- H5 ---------------------------------------------------------------- */
static void set_250(resil_http_client_config *cfg, void *u) {
  (void)u;
  cfg->response_timeout_ns = MS(250);
}

static void set_2000(resil_http_client_config *cfg, void *u) {
  (void)u;
  cfg->response_timeout_ns = MS(2000);
}

/* The wrong variant waits 2 s for the response. */
static int h5_run(lab_result *r, int wrong) {
  lab_http h;
  if (!lab_http_open(r, &h, wrong ? set_2000 : set_250, NULL)) goto out;
  int64_t t0 = now_ms();
  resil_outcome o = call(&h, "slow_post", KV("ms", "900"), NULL, NULL, NULL);
  int64_t took = now_ms() - t0;
  long eff = effects(&h, "slow");
  char ob[96];
  lab_obs_str(r, "outcome", fmt(&o, ob, sizeof ob));
  lab_obs_int(r, "attempts", attempts(&h, "slow"));
  lab_obs_int(r, "effects", eff);
  lab_obs_int(r, "elapsed_ms", took);
  lab_summary(r, "POST /slow (effect, then 900 ms), response timeout 250 ms: %s after %lld ms, effects %ld: the server did it",
              ob, (long long)took, eff);
  lab_expect(r, "unknown_timeout", o.kind == RESIL_UNKNOWN && o.reason == RESIL_REASON_TIMEOUT,
             "outcome %s", ob);
  lab_check(r, eff == 1, "effects %ld, expected 1", eff);
  lab_engine_expect_ran(r, engine_calls(&h));
out:
  lab_http_close(&h);
  return r->pass;
}

static int h5(lab_result *r) { return h5_run(r, 0); }
static int h5_wrong(lab_result *r) { return h5_run(r, 1); }

/* ---- H6 ---------------------------------------------------------------- */
/* The wrong variant's "safe default" has the unsafe opt-in. */
static int h6_run(lab_result *r, int wrong) {
  lab_http h;
  resil_retry *unsafe = make_retry(3, RESIL_RETRY_FIXED, MS(10), 0, 1, NULL, NULL);
  resil_retry *safe = make_retry(3, RESIL_RETRY_FIXED, MS(10), 0, wrong, NULL, NULL);
  if (!lab_check(r, unsafe && safe, "retry setup") || !lab_http_open(r, &h, set_250, NULL))
    goto out;
  resil_outcome ou = call(&h, "slow_post", KV("ms", "900"), unsafe, NULL, NULL);
  long eff_unsafe = effects(&h, "slow");
  resil_fixture_reset(h.fx);
  resil_outcome os = call(&h, "slow_post", KV("ms", "900"), safe, NULL, NULL);
  long eff_safe = effects(&h, "slow");
  resil_fixture_reset(h.fx);
  resil_outcome ok = call(&h, "idem_post", KV("name", "pay-1", "ms", "900"), safe, NULL, NULL);
  long eff_key = effects(&h, "idem");
  long att_key = attempts(&h, "idem");
  char b1[96], b2[96], b3[96];
  lab_obs_int(r, "unsafe_attempts", ou.attempts);
  lab_obs_int(r, "unsafe_effects", eff_unsafe);
  lab_obs_int(r, "safe_attempts", os.attempts);
  lab_obs_int(r, "safe_effects", eff_safe);
  lab_obs_str(r, "safe_stop", resil_stop_name(os.stop));
  lab_obs_int(r, "keyed_attempts", att_key);
  lab_obs_int(r, "keyed_effects", eff_key);
  lab_obs_int(r, "attempts", ou.attempts + os.attempts + (long long)att_key);
  lab_obs_int(r, "effects", eff_unsafe + eff_safe + eff_key);
  lab_obs_str(r, "outcome", fmt(&ok, b3, sizeof b3));
  lab_obs_json(r, "bars",
               json_pack("[{s:s, s:i, s:i}, {s:s, s:i, s:i}, {s:s, s:I, s:i}]", "label",
                         "unsafe opt-in", "attempts", (int)ou.attempts, "effects",
                         (int)eff_unsafe, "label", "safe default", "attempts", (int)os.attempts,
                         "effects", (int)eff_safe, "label", "stable key", "attempts",
                         (json_int_t)att_key, "effects", (int)eff_key));
  lab_summary(r, "POST timing out at 250 ms, retry 3: unsafe opt-in -> %u attempts, %ld effects (%s); safe default -> %u attempt, %ld effect (stop %s); stable key on /idem -> %ld attempts, %ld effect, %s",
              ou.attempts, eff_unsafe, fmt(&ou, b1, sizeof b1), os.attempts, eff_safe,
              resil_stop_name(os.stop), att_key, eff_key, b3);
  (void)b2;
  lab_check(r, eff_unsafe == 3, "unsafe effects %ld, expected 3", eff_unsafe);
  lab_expect(r, "safe_not_retried",
             eff_safe == 1 && os.attempts == 1 && os.stop == RESIL_STOP_UNSAFE,
             "safe default: effects %ld attempts %u", eff_safe, os.attempts);
  lab_check(r, eff_key == 1 && att_key >= 2 && resil_outcome_is_success(&ok),
            "keyed: effects %ld attempts %ld", eff_key, att_key);
  lab_engine_expect_ran(r, engine_calls(&h));
out:
  lab_http_close(&h);
  resil_retry_free(unsafe);
  resil_retry_free(safe);
  return r->pass;
}

static int h6(lab_result *r) { return h6_run(r, 0); }
static int h6_wrong(lab_result *r) { return h6_run(r, 1); }

/* ---- H7 ---------------------------------------------------------------- */
static int closed_port(void) {
  int s = socket(AF_INET, SOCK_STREAM, 0);
  if (s < 0) return -1;
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = 0};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  int port = -1;
  if (bind(s, (struct sockaddr *)&a, sizeof a) == 0 &&
      getsockname(s, (struct sockaddr *)&a, &len) == 0)
    port = ntohs(a.sin_port);
  close(s); /* nobody listens there now */
  return port;
}

static void set_refused_base(resil_http_client_config *cfg, void *u) {
  cfg->base_url = u;
}

/* The wrong variant connects to the listening fixture instead. */
static int h7_run(lab_result *r, int wrong) {
  int port = closed_port();
  char base[64];
  snprintf(base, sizeof base, "http://127.0.0.1:%d", port);
  lab_http h;
  if (!lab_check(r, port > 0, "no port") ||
      !lab_http_open(r, &h, wrong ? NULL : set_refused_base, base))
    goto out;
  resil_http_response *resp = NULL;
  resil_outcome o = call(&h, "get_item", KV("id", "1", "token", "t"), NULL, NULL, &resp);
  char ob[96];
  const char *cause = resil_reason_text(o.reason);
  long seen = resil_fixture_connections(h.fx);
  resil_http_stats st;
  resil_http_client_get_stats(h.c, &st);
  lab_obs_str(r, "outcome", fmt(&o, ob, sizeof ob));
  lab_obs_str(r, "cause", cause);
  lab_obs_int(r, "attempts", (long long)st.attempts);
  lab_obs_int(r, "requests_seen", seen);
  lab_summary(r, "connect to a closed port: %s, cause \"%s\" (%s), requests seen 0 by design: %ld connections to the fixture",
              ob, cause, resp && resil_http_response_error(resp) ? resil_http_response_error(resp) : "",
              seen);
  lab_expect(r, "refused", o.kind == RESIL_NOT_SENT && o.reason == RESIL_REASON_CONNECT_REFUSED,
             "outcome %s", ob);
  lab_check(r, st.requests_sent == 0, "%llu requests sent", (unsigned long long)st.requests_sent);
  resil_http_response_free(resp);
  lab_engine_expect_ran(r, engine_calls(&h));
out:
  lab_http_close(&h);
  return r->pass;
}

static int h7(lab_result *r) { return h7_run(r, 0); }
static int h7_wrong(lab_result *r) { return h7_run(r, 1); }

/* ---- H8 ---------------------------------------------------------------- */
/* The wrong variant makes the second call on a new client (a new pool).
 * On the engine path the connection kept alive is in the engine's own
 * connection cache (its multi handle), not in the client's pool: the same
 * checks hold there, and the wrong variant's new client comes with a new
 * engine on it (a new cache). */
static int h8_run(lab_result *r, int wrong) {
  lab_http h;
  resil_http_client *other = NULL;
  lab_engine *other_le = NULL;
  size_t on_engine = 0;
  if (!lab_http_open(r, &h, NULL, NULL)) goto out;
  if (wrong) {
    resil_http_client_config cfg;
    resil_http_client_config_init(&cfg);
    cfg.base_url = resil_fixture_url(h.fx);
    cfg.endpoints = lab_endpoints;
    cfg.endpoint_count = LAB_ENDPOINTS;
    if (!lab_check(r, resil_http_client_new(&cfg, &other, NULL) == RESIL_OK, "client"))
      goto out;
#ifdef RESIL_HAVE_LOOP
    if (r->path == LAB_PATH_ENGINE && !(other_le = lab_engine_open(r, other))) goto out;
#endif
  }
  unsigned ports[2] = {0, 0};
  resil_outcome o[2];
  for (int i = 0; i < 2; i++) {
    int second = i == 1 && other;
    o[i] = lab_http_call_on(second ? other_le : h.le, second ? other : h.c, "get_item",
                            KV("id", "1", "token", "t"), NULL, NULL, NULL, NULL, NULL);
    ports[i] = resil_fixture_last_peer_port(h.fx, "items");
  }
#ifdef RESIL_HAVE_LOOP
  on_engine = engine_calls(&h) + lab_engine_calls(other_le);
#endif
  long conns = resil_fixture_connections(h.fx);
  long seen = attempts(&h, "items");
  char ob[64];
  lab_obs_int(r, "attempts", seen);
  lab_obs_int(r, "local_port_1", ports[0]);
  lab_obs_int(r, "local_port_2", ports[1]);
  lab_obs_int(r, "connections", conns);
  lab_obs_str(r, "outcome", fmt(&o[1], ob, sizeof ob));
  lab_summary(r, "two sequential GETs (%s, upstream saw %ld): client ports %u and %u, server accepted %ld connection(s)",
              ob, seen, ports[0], ports[1], conns);
  lab_check(r, o[0].http_status == 200 && o[1].http_status == 200 && seen == 2,
            "calls answered %d and %d, upstream saw %ld", o[0].http_status, o[1].http_status,
            seen);
  lab_expect(r, "same_port", ports[0] != 0 && ports[0] == ports[1], "ports differ");
  lab_expect(r, "one_connection", conns == 1, "%ld connections", conns);
  lab_engine_expect_ran(r, on_engine);
out:
#ifdef RESIL_HAVE_LOOP
  lab_engine_close(other_le);
#endif
  resil_http_client_free(other);
  lab_http_close(&h);
  return r->pass;
}

static int h8(lab_result *r) { return h8_run(r, 0); }
static int h8_wrong(lab_result *r) { return h8_run(r, 1); }

/* ---- H9 ---------------------------------------------------------------- */
static void set_pool_1(resil_http_client_config *cfg, void *u) {
  cfg->max_connections = 1;
  cfg->max_connections_per_host = 1;
  cfg->lease_timeout_ns = *(const int64_t *)u;
}

typedef struct holder {
  lab_http *h;
  resil_outcome o;
} holder;

static void *hold_slot(void *p) {
  holder *x = p;
  x->o = call(x->h, "slow_get", KV("ms", "600"), NULL, NULL, NULL);
  return NULL;
}

/* The second call, made while the slow call holds the pool's one
 * connection: blocking, from another thread while the slow call runs on
 * `x`'s; on the engine path, both in one batch of concurrent calls (an
 * engine belongs to one thread), the slow one submitted first so that it
 * takes the connection. The engine has its own connection cache instead of
 * the client's pool, bounded by the client's max_connections, with calls
 * waiting for a connection queued, the client's lease timeout their
 * timer: the same checks hold there. Sets *o, *waited (ms from the start
 * of the second call to its end) and the stats around it. */
static void h9_second_call(lab_http *h, resil_outcome *o, int64_t *waited,
                           resil_http_stats *st0, resil_http_stats *st1) {
#ifdef RESIL_HAVE_LOOP
  if (h->le) {
    resil_http_param ps[2][8];
    resil_http_args args[2];
    fill_args(&args[0], ps[0], KV("ms", "600"), NULL, NULL);
    fill_args(&args[1], ps[1], KV("id", "9", "token", "t"), NULL, NULL);
    lab_engine_req q[2];
    memset(q, 0, sizeof q);
    q[0].endpoint = "slow_get";
    q[0].args = &args[0];
    q[1].endpoint = "get_item";
    q[1].args = &args[1];
    resil_http_client_get_stats(h->c, st0);
    int64_t t0 = resil_clock_now_ns(NULL);
    lab_engine_run(h->le, q, 2);
    *waited = (q[1].done_ns - t0) / 1000000;
    resil_http_client_get_stats(h->c, st1);
    /* The slow call's attempts are not the second call's: the fixture
     * counts the requests it saw on the slow route. */
    uint64_t slow = (uint64_t)attempts(h, "slow");
    st1->attempts = st1->attempts - st0->attempts >= slow ? st1->attempts - slow : st0->attempts;
    *o = q[1].outcome;
    resil_http_response_free(q[0].response);
    resil_http_response_free(q[1].response);
    return;
  }
#endif
  holder x = {h, {0}};
  pthread_t t;
  pthread_create(&t, NULL, hold_slot, &x);
  for (int i = 0; i < 500 && attempts(h, "slow") < 1; i++) {
    struct timespec ts = {0, 2000000};
    nanosleep(&ts, NULL);
  }
  resil_http_client_get_stats(h->c, st0);
  int64_t t0 = now_ms();
  *o = call(h, "get_item", KV("id", "9", "token", "t"), NULL, NULL, NULL);
  *waited = now_ms() - t0;
  resil_http_client_get_stats(h->c, st1);
  pthread_join(t, NULL);
}

/* The wrong variant waits up to 2 s for the slot. */
static int h9_run(lab_result *r, int64_t lease_timeout_ns) {
  lab_http h;
  if (!lab_http_open(r, &h, set_pool_1, &lease_timeout_ns)) goto out;
  resil_http_stats st0, st1;
  memset(&st0, 0, sizeof st0);
  memset(&st1, 0, sizeof st1);
  resil_outcome o;
  int64_t waited = 0;
  h9_second_call(&h, &o, &waited, &st0, &st1);
  /* After the slow call ended on both paths: the second call's request,
   * had it been sent late, is counted too. */
  long items_seen = attempts(&h, "items");
  /* The attempt that timed out waiting for a slot, and any that got one. */
  long long lease_timeouts = (long long)(st1.lease_timeouts - st0.lease_timeouts);
  long long made = lease_timeouts + (long long)(st1.attempts - st0.attempts);
  resil_outcome after = call(&h, "get_item", KV("id", "9", "token", "t"), NULL, NULL, NULL);
  char ob[96], ab[96];
  lab_obs_str(r, "outcome", fmt(&o, ob, sizeof ob));
  lab_obs_int(r, "lease_wait_ms", waited);
  lab_obs_int(r, "attempts", made);
  lab_obs_int(r, "lease_timeouts", lease_timeouts);
  lab_obs_int(r, "upstream_saw", items_seen);
  lab_obs_str(r, "after_release", fmt(&after, ab, sizeof ab));
  lab_summary(r, "pool of 1 held by a slow call: second call %s after %lld ms, upstream saw %ld; after release %s",
              ob, (long long)waited, items_seen, ab);
  lab_expect(r, "not_sent", o.kind == RESIL_NOT_SENT && o.reason == RESIL_REASON_POOL_TIMEOUT,
             "outcome %s", ob);
  lab_check(r, waited >= 95 && waited < 400, "lease wait %lld ms", (long long)waited);
  lab_check(r, items_seen == 0, "upstream saw %ld requests", items_seen);
  lab_check(r, made == 1 && lease_timeouts == 1, "%lld attempts, %lld lease timeouts, expected 1",
            made, lease_timeouts);
  lab_check(r, after.http_status == 200, "after release %s", ab);
  lab_engine_expect_ran(r, engine_calls(&h));
out:
  lab_http_close(&h);
  return r->pass;
}

static int h9(lab_result *r) { return h9_run(r, MS(100)); }
static int h9_wrong(lab_result *r) { return h9_run(r, MS(2000)); }

/* ---- H10 --------------------------------------------------------------- */
/* On the engine path: an engine on what creation gave (the client, or
 * NULL). With no client, no engine can be made (resil_engine_new refuses a
 * NULL client, RESIL_EINVAL): the engine path is refused at creation too,
 * and that refusal is what `ran_on_engine` counts, as H10 makes no call on
 * either path. With a client (the wrong variant), the engine is made and
 * one call of "ok" goes through it. Returns the engine path's evidence
 * count for ran_on_engine; *est the engine's creation status. */
static size_t h10_engine(lab_result *r, resil_http_client *c, resil_status *est) {
  *est = RESIL_OK;
#ifdef RESIL_HAVE_LOOP
  if (r->path != LAB_PATH_ENGINE) return 0;
  if (c) {
    lab_engine *le = lab_engine_open(r, c);
    const resil_http_param p[] = {{"id", "1"}};
    resil_http_args args;
    resil_http_args_init(&args);
    args.params = p;
    args.param_count = 1;
    if (le) lab_engine_call(le, "ok", &args, NULL, NULL, NULL);
    size_t n = lab_engine_calls(le);
    lab_engine_close(le);
    return n;
  }
  resil_loop *loop = NULL;
  resil_loop_adapter *ad = NULL;
  resil_engine *e = NULL;
  if (!lab_check(r, resil_loop_new(NULL, &loop) == RESIL_OK &&
                        resil_loop_adapter_new(loop, &ad) == RESIL_OK,
                 "engine path: no loop")) {
    resil_loop_free(loop);
    return 0;
  }
  resil_engine_config ec;
  resil_engine_config_init(&ec);
  ec.adapter = ad;
  ec.client = c;
  *est = resil_engine_new(&ec, &e, NULL);
  resil_engine_free(e);
  resil_loop_adapter_free(ad);
  resil_loop_free(loop);
  return *est == RESIL_EINVAL ? 1u : 0u;
#else
  (void)r;
  (void)c;
  return 0;
#endif
}

/* The wrong variant's second template is valid. */
static int h10_run(lab_result *r, int wrong) {
  resil_fixture *fx = NULL;
  char eb[256];
  if (!lab_check(r, resil_fixture_start(NULL, &fx, eb, sizeof eb) == 0, "fixture: %s", eb))
    return 0;
  static const resil_http_endpoint bad[] = {
      {.struct_size = sizeof(resil_http_endpoint), .name = "ok", .path = "/items/{id}"},
      {.struct_size = sizeof(resil_http_endpoint), .name = "broken", .path = "/items/{id"},
  };
  static const resil_http_endpoint good[] = {
      {.struct_size = sizeof(resil_http_endpoint), .name = "ok", .path = "/items/{id}"},
      {.struct_size = sizeof(resil_http_endpoint), .name = "broken", .path = "/items/{id}"},
  };
  resil_http_client_config cfg;
  resil_http_client_config_init(&cfg);
  cfg.base_url = resil_fixture_url(fx);
  cfg.endpoints = wrong ? good : bad;
  cfg.endpoint_count = 2;
  resil_http_client *c = NULL;
  resil_error err;
  memset(&err, 0, sizeof err);
  resil_status st = resil_http_client_new(&cfg, &c, &err);
  resil_status est = RESIL_OK;
  size_t on_engine = h10_engine(r, c, &est);
  long conns = resil_fixture_connections(fx);
  lab_obs_str(r, "status", resil_status_name(st));
  lab_obs_str(r, "field", err.field);
  lab_obs_str(r, "message", err.msg);
  lab_obs_int(r, "attempts", resil_fixture_attempts(fx, "items"));
  lab_obs_int(r, "requests_seen", conns);
  lab_obs_str(r, "outcome", "none: client not created");
  if (r->path == LAB_PATH_ENGINE) lab_obs_str(r, "engine_status", resil_status_name(est));
  lab_summary(r, "endpoint \"broken\" with path /items/{id: %s at creation (%s), upstream connections %ld",
              resil_status_name(st), err.msg, conns);
  lab_expect(r, "refused_at_creation",
             st == RESIL_EINVAL && c == NULL &&
                 (r->path != LAB_PATH_ENGINE || est == RESIL_EINVAL),
             "client created%s%s", r->path == LAB_PATH_ENGINE ? ", engine " : "",
             r->path == LAB_PATH_ENGINE ? resil_status_name(est) : "");
  lab_check(r, strcmp(err.field, "endpoints[1].path") == 0, "field %s", err.field);
  lab_check(r, conns == 0, "%ld connections", conns);
  lab_engine_expect_ran(r, on_engine);
  resil_http_client_free(c);
  resil_fixture_stop(fx);
  return r->pass;
}

static int h10(lab_result *r) { return h10_run(r, 0); }
static int h10_wrong(lab_result *r) { return h10_run(r, 1); }

/* ---- H11 --------------------------------------------------------------- */
/* The wrong variant's endpoint does not decode JSON. */
static int h11_run(lab_result *r, int wrong) {
  lab_http h;
  endpoint_table t;
  if (wrong) endpoint_copy(&t, "badjson")->response_codec = RESIL_HTTP_CODEC_RAW;
  else endpoint_copy(&t, "badjson");
  if (!lab_http_open(r, &h, set_endpoints, &t)) goto out;
  resil_http_response *e = NULL, *b = NULL, *n = NULL;
  resil_outcome oe = call(&h, "empty", NULL, NULL, NULL, &e);
  resil_outcome ob = call(&h, "badjson", NULL, NULL, NULL, &b);
  resil_outcome on = call(&h, "get_item", KV("id", "7", "token", "t"), NULL, NULL, &n);
  int empty = resil_http_response_is_empty(e);
  const char *derr = resil_http_response_decode_error(b);
  char b1[64], b2[64], b3[64];
  lab_obs_bool(r, "empty_204", empty);
  lab_obs_str(r, "badjson_outcome", fmt(&ob, b2, sizeof b2));
  lab_obs_str(r, "decode_error", derr ? derr : "");
  lab_obs_str(r, "outcome", fmt(&on, b3, sizeof b3));
  lab_obs_int(r, "attempts", attempts(&h, "empty") + attempts(&h, "badjson") + attempts(&h, "items"));
  lab_summary(r, "204 -> %s, empty=%d; invalid JSON -> %s (%s); next call -> %s",
              fmt(&oe, b1, sizeof b1), empty, b2, derr ? derr : "", b3);
  lab_check(r, oe.http_status == 204 && empty, "204 not empty");
  lab_expect(r, "decode_error", ob.reason == RESIL_REASON_DECODE && derr != NULL,
             "no decode error");
  lab_check(r, on.http_status == 200 && resil_http_response_json(n) != NULL, "next call failed");
  resil_http_response_free(e);
  resil_http_response_free(b);
  resil_http_response_free(n);
  lab_engine_expect_ran(r, engine_calls(&h));
out:
  lab_http_close(&h);
  return r->pass;
}

static int h11(lab_result *r) { return h11_run(r, 0); }
static int h11_wrong(lab_result *r) { return h11_run(r, 1); }

/* ---- H12 --------------------------------------------------------------- */
/* The wrong variant's endpoint has no decoder. */
static int h12_run(lab_result *r, int wrong) {
  lab_http h;
  endpoint_table t;
  resil_http_endpoint *biz = endpoint_copy(&t, "business");
  if (wrong) biz->decoder = NULL;
  resil_retry *rt = make_retry(3, RESIL_RETRY_FIXED, MS(5), 0, 0, NULL, NULL);
  if (!lab_check(r, rt != NULL, "retry") || !lab_http_open(r, &h, set_endpoints, &t)) goto out;
  resil_ctx ctx;
  resil_ctx_init(&ctx);
  ctx.flags = RESIL_CALL_IDEMPOTENT; /* even so, a business rejection is final */
  resil_outcome b = call(&h, "business", NULL, rt, &ctx, NULL);
  long b_att = attempts(&h, "status");
  resil_outcome s = call(&h, "seq", KV("id", "h12", "codes", "429,200"), rt, NULL, NULL);
  long s_att = attempts(&h, "seq");
  char b1[64], b2[64];
  lab_obs_str(r, "business_outcome", fmt(&b, b1, sizeof b1));
  lab_obs_str(r, "business_class", resil_outcome_class_name(resil_outcome_classify(&b)));
  lab_obs_int(r, "business_attempts", b_att);
  lab_obs_int(r, "throttled_then_ok_attempts", s_att);
  lab_obs_int(r, "attempts", b_att + s_att);
  lab_obs_str(r, "outcome", fmt(&s, b2, sizeof b2));
  lab_summary(r, "decoder 422 -> %s (%s): %ld attempt; 429 then 200 -> %s after %ld attempts",
              b1, resil_outcome_class_name(resil_outcome_classify(&b)), b_att, b2, s_att);
  lab_expect(r, "business_rejection", b.reason == RESIL_REASON_BUSINESS && b_att == 1,
             "422: %s, %ld attempts", b1, b_att);
  lab_check(r, s.http_status == 200 && s_att == 2, "429,200: %s, %ld attempts", b2, s_att);
  lab_engine_expect_ran(r, engine_calls(&h));
out:
  lab_http_close(&h);
  resil_retry_free(rt);
  return r->pass;
}

static int h12(lab_result *r) { return h12_run(r, 0); }
static int h12_wrong(lab_result *r) { return h12_run(r, 1); }

/* ---- H13 --------------------------------------------------------------- */
typedef struct log_capture {
  size_t lines;
  int leaked;
  int redacted_seen;
  char first_leak[160];
} log_capture;

static const char *const secrets[] = {"sekret-auth-123", "sekret-cookie-456",
                                      "sekret-key-789", "sekret-qt-000"};

static void capture(void *user, resil_http_log_level level, const char *line) {
  (void)level;
  log_capture *c = user;
  c->lines++;
  for (size_t i = 0; i < 4; i++)
    if (strstr(line, secrets[i])) {
      if (!c->leaked) snprintf(c->first_leak, sizeof c->first_leak, "%s", line);
      c->leaked = 1;
    }
  if (strstr(line, "[REDACTED]")) c->redacted_seen = 1;
}

typedef struct log_setup {
  resil_http_log_level level;
  log_capture *cap;
  endpoint_table *t; /* NULL: the lab's table */
} log_setup;

static void set_log(resil_http_client_config *cfg, void *u) {
  log_setup *s = u;
  cfg->log_level = s->level;
  cfg->log_fn = capture;
  cfg->log_user = s->cap;
  if (s->t) cfg->endpoints = s->t->eps;
}

/* The wrong variant also sends the query token in a header no redaction
 * rule knows (X-Note): the check must see it leak. */
static const char *const leaky_headers[] = {"Authorization: {auth}", "Cookie: {cookie}",
                                            "X-Api-Key: {apikey}", "X-Note: {qt}", NULL};

static int h13_run(lab_result *r, int wrong) {
  endpoint_table t;
  endpoint_copy(&t, "secret")->headers = wrong ? leaky_headers : secret_headers;
  const resil_http_log_level levels[] = {RESIL_HTTP_LOG_NONE, RESIL_HTTP_LOG_BASIC,
                                         RESIL_HTTP_LOG_HEADERS, RESIL_HTTP_LOG_FULL,
                                         RESIL_HTTP_LOG_METADATA};
  const char *names[] = {"NONE", "BASIC", "HEADERS", "FULL", "METADATA"};
  json_t *per = json_object();
  int leaks = 0;
  size_t total = 0;
  int headers_redacted = 0;
  long seen = 0;
  size_t on_engine = 0;
  char last[64] = "";
  for (size_t i = 0; i < 5; i++) {
    log_capture cap = {0};
    log_setup ls = {levels[i], &cap, &t};
    lab_http h;
    if (lab_http_open(r, &h, set_log, &ls)) {
      resil_outcome o = call(&h, "secret",
                             KV("id", "5", "qt", secrets[3], "auth", "Bearer sekret-auth-123",
                                "cookie", "session=sekret-cookie-456", "apikey", secrets[2]),
                             NULL, NULL, NULL);
      lab_check(r, o.http_status == 200, "call at %s failed", names[i]);
      fmt(&o, last, sizeof last);
      seen += attempts(&h, "items");
      on_engine += engine_calls(&h);
    }
    lab_http_close(&h);
    json_object_set_new(per, names[i], json_integer((json_int_t)cap.lines));
    total += cap.lines;
    if (cap.leaked) {
      leaks++;
      lab_expect(r, "no_secret_logged", 0, "secret in %s log: %s", names[i], cap.first_leak);
    }
    if (levels[i] == RESIL_HTTP_LOG_HEADERS) headers_redacted = cap.redacted_seen;
  }
  lab_obs_json(r, "lines_per_level", per);
  lab_obs_int(r, "secrets_found", leaks);
  lab_obs_int(r, "attempts", seen);
  lab_obs_str(r, "outcome", last);
  lab_summary(r, "Authorization, Cookie, X-Api-Key and ?token= sent at 5 log levels (upstream saw %ld requests, last %s): %zu lines logged, secrets found in %d levels, [REDACTED] shown at HEADERS: %s",
              seen, last, total, leaks, headers_redacted ? "yes" : "no");
  lab_check(r, seen == 5, "upstream saw %ld requests, expected 5", seen);
  lab_check(r, total > 0, "nothing was logged: the check would prove nothing");
  lab_check(r, headers_redacted, "HEADERS level showed no redaction marker");
  lab_engine_expect_ran(r, on_engine);
  return r->pass;
}

static int h13(lab_result *r) { return h13_run(r, 0); }
static int h13_wrong(lab_result *r) { return h13_run(r, 1); }

/* ---- H14 --------------------------------------------------------------- */
static void set_gzip(resil_http_client_config *cfg, void *u) {
  cfg->request_gzip = *(const int *)u;
}

/* The wrong variant leaves request_gzip off. */
static int h14_run(lab_result *r, int gzip) {
  lab_http h;
  if (!lab_http_open(r, &h, set_gzip, &gzip)) goto out;
  size_t sizes[2] = {2049, 2048};
  long decoded[2] = {0, 0};
  char enc[2][32] = {"", ""};
  char outs[2][64] = {"", ""};
  for (int k = 0; k < 2; k++) {
    /* {"pad":"xxx...x"} of exactly sizes[k] bytes. */
    size_t n = sizes[k];
    char *body = malloc(n + 1);
    if (!body) break;
    memcpy(body, "{\"pad\":\"", 8);
    memset(body + 8, 'x', n - 10);
    memcpy(body + n - 2, "\"}", 2);
    body[n] = 0;
    resil_http_args args;
    resil_http_args_init(&args);
    args.body = body;
    args.body_len = n;
    resil_http_response *resp = NULL;
    resil_outcome o = call_args(&h, "echo", &args, NULL, NULL, &resp);
    fmt(&o, outs[k], sizeof outs[k]);
    json_t *j = resil_http_response_json(resp);
    decoded[k] = (long)json_integer_value(json_object_get(j, "body_len"));
    const char *ce = json_string_value(json_object_get(j, "content_encoding"));
    snprintf(enc[k], sizeof enc[k], "%s", ce && *ce ? ce : "identity");
    resil_http_response_free(resp);
    free(body);
  }
  lab_obs_str(r, "encoding_2049", enc[0]);
  lab_obs_str(r, "encoding_2048", enc[1]);
  lab_obs_int(r, "server_decoded_2049", decoded[0]);
  lab_obs_int(r, "server_decoded_2048", decoded[1]);
  long seen = attempts(&h, "echo");
  char both[140];
  snprintf(both, sizeof both, "%s, %s", outs[0], outs[1]);
  lab_obs_int(r, "attempts", seen);
  lab_obs_str(r, "outcome", both);
  lab_summary(r, "JSON body of 2049 bytes sent as %s, server decoded %ld bytes; 2048 bytes sent as %s, server read %ld",
              enc[0], decoded[0], enc[1], decoded[1]);
  lab_expect(r, "gzip_above_2048", strcmp(enc[0], "gzip") == 0 && decoded[0] == 2049,
             "2049 not gzipped/decoded");
  lab_check(r, strcmp(enc[1], "identity") == 0 && decoded[1] == 2048, "2048 gzipped");
  lab_check(r, seen == 2, "upstream saw %ld requests, expected 2", seen);
  lab_engine_expect_ran(r, engine_calls(&h));
out:
  lab_http_close(&h);
  return r->pass;
}

static int h14(lab_result *r) { return h14_run(r, 1); }
static int h14_wrong(lab_result *r) { return h14_run(r, 0); }

/* ---- H15 --------------------------------------------------------------- */
static void set_follow(resil_http_client_config *cfg, void *u) {
  (void)u;
  cfg->follow_redirects = 1;
}

/* The wrong variant's "off" client follows redirects too. */
static int h15_run(lab_result *r, int wrong) {
  lab_http off, on;
  int ok_off = lab_http_open(r, &off, wrong ? set_follow : NULL, NULL);
  int ok_on = ok_off && lab_http_open(r, &on, set_follow, NULL);
  if (!ok_on) {
    if (ok_off) lab_http_close(&off);
    return 0;
  }
  resil_http_response *a = NULL, *b = NULL;
  resil_outcome oa = call(&off, "redirect", KV("n", "2"), NULL, NULL, &a);
  resil_outcome ob = call(&on, "redirect", KV("n", "2"), NULL, NULL, &b);
  resil_http_info ia, ib;
  resil_http_response_info(a, &ia);
  resil_http_response_info(b, &ib);
  resil_http_stats sa, sb;
  resil_http_client_get_stats(off.c, &sa);
  resil_http_client_get_stats(on.c, &sb);
  char b1[64], b2[64];
  lab_obs_str(r, "off_outcome", fmt(&oa, b1, sizeof b1));
  lab_obs_int(r, "off_hops", ia.hops);
  lab_obs_str(r, "outcome", fmt(&ob, b2, sizeof b2));
  lab_obs_int(r, "hops", ib.hops);
  lab_obs_int(r, "attempts", (long long)sb.attempts);
  lab_obs_int(r, "requests_sent", (long long)sb.requests_sent);
  lab_summary(r, "redirects off: %s, hops %u, attempts %llu; on: %s, hops %u, attempts %llu, requests on the wire %llu",
              b1, ia.hops, (unsigned long long)sa.attempts, b2, ib.hops,
              (unsigned long long)sb.attempts, (unsigned long long)sb.requests_sent);
  lab_expect(r, "off_as_is", oa.http_status == 302 && ia.hops == 0 && sa.attempts == 1,
             "off: %s", b1);
  lab_check(r, ob.http_status == 200 && ib.hops == 2 && sb.attempts == 1, "on: %s hops %u", b2, ib.hops);
  lab_engine_expect_ran(r, engine_calls(&off) + engine_calls(&on));
  resil_http_response_free(a);
  resil_http_response_free(b);
  lab_http_close(&off);
  lab_http_close(&on);
  return r->pass;
}

static int h15(lab_result *r) { return h15_run(r, 0); }
static int h15_wrong(lab_result *r) { return h15_run(r, 1); }

/* ---- H16 --------------------------------------------------------------- */
/* The wrong variant lets libcurl re-send: RESIL_HTTP_RESEND_IF_SAFE and the
 * POST declared idempotent, so the hidden re-send is allowed and happens. */
static void set_resend_if_safe(resil_http_client_config *cfg, void *u) {
  (void)u;
  cfg->resend_stale = RESIL_HTTP_RESEND_IF_SAFE;
}

/* On the engine path the warm-up GET leaves its connection in the engine's
 * own connection cache (not the client's pool), and the POST reuses it
 * there: the same transport rule (refusing libcurl's hidden re-send, the
 * client's resends_prevented counter) holds, as A7 also shows. */
static int h16_run(lab_result *r, int wrong) {
  lab_http h;
  if (!lab_http_open(r, &h, wrong ? set_resend_if_safe : NULL, NULL)) goto out;
  resil_outcome g = call(&h, "ka_get", NULL, NULL, NULL, NULL);
  resil_http_stats st0;
  memset(&st0, 0, sizeof st0);
  resil_http_client_get_stats(h.c, &st0);
  long seen0 = attempts(&h, "ka");
  resil_http_args args;
  resil_http_args_init(&args);
  args.body = "pay=10";
  args.body_len = 6;
  resil_ctx ctx;
  resil_ctx_init(&ctx);
  if (wrong) ctx.flags = RESIL_CALL_IDEMPOTENT;
  resil_http_response *resp = NULL;
  resil_outcome o = call_args(&h, "ka_post", &args, NULL, &ctx, &resp);
  resil_http_stats st;
  memset(&st, 0, sizeof st);
  resil_http_client_get_stats(h.c, &st);
  resil_http_info info;
  memset(&info, 0, sizeof info);
  resil_http_response_info(resp, &info);
  long eff = effects(&h, "ka");
  long seen = attempts(&h, "ka") - seen0;
  long conns = resil_fixture_connections(h.fx);
  long long made = (long long)(st.attempts - st0.attempts);
  long long prevented = (long long)(st.resends_prevented - st0.resends_prevented);
  long long counted = (long long)(st.resends_counted - st0.resends_counted);
  char ob[96];
  lab_obs_str(r, "outcome", fmt(&o, ob, sizeof ob));
  lab_obs_int(r, "effects", eff);
  lab_obs_int(r, "attempts", made);
  lab_obs_int(r, "upstream_saw", seen);
  lab_obs_int(r, "resends_prevented", prevented);
  lab_obs_int(r, "resends_counted", counted);
  lab_obs_int(r, "connections", conns);
  lab_obs_bool(r, "post_on_reused_connection", info.reused_connection);
  lab_summary(r, "POST on a reused keep-alive connection that the server closes after reading it: %s, %lld attempt(s), upstream saw %ld POST(s), effects %ld, libcurl's silent re-send refused %lld time(s), allowed %lld, connections %ld",
              ob, made, seen, eff, prevented, counted, conns);
  lab_expect(r, "warm_up", g.http_status == 200, "warm-up GET failed");
  lab_expect(r, "unknown", o.kind == RESIL_UNKNOWN, "outcome %s, expected UNKNOWN", ob);
  lab_expect(r, "one_effect", eff == 1 && seen == 1,
             "effects %ld, POSTs seen %ld, expected exactly 1", eff, seen);
  lab_expect(r, "resend_refused", prevented == 1 && counted == 0,
             "re-sends refused %lld, allowed %lld, expected 1 and 0", prevented, counted);
  lab_expect(r, "one_attempt", made == 1, "%lld attempts, expected 1", made);
  resil_http_response_free(resp);
  lab_engine_expect_ran(r, engine_calls(&h));
out:
  lab_http_close(&h);
  return r->pass;
}

static int h16(lab_result *r) { return h16_run(r, 0); }
static int h16_wrong(lab_result *r) { return h16_run(r, 1); }

/* ---- P13 --------------------------------------------------------------- */
/* The report's series: each attempt of the first call as the retry's
 * attempt listener saw it (end instant, duration, planned next wait, stop),
 * relative to the call's start. */
typedef struct p13_attempts {
  int64_t t0_ns; /* 0: not recording */
  json_t *arr;
} p13_attempts;

static void p13_on_attempt(void *user, const resil_attempt_info *info) {
  p13_attempts *pa = user;
  if (!pa->t0_ns || !pa->arr) return;
  int64_t end = resil_clock_now_ns(NULL) - pa->t0_ns;
  json_array_append_new(
      pa->arr, json_pack("{s:i, s:f, s:f, s:f, s:s}", "attempt", (int)info->attempt, "start_ms",
                         (double)(end - info->duration_ns) / 1e6, "end_ms", (double)end / 1e6,
                         "next_wait_ms",
                         info->next_wait_ns < 0 ? -1.0 : (double)info->next_wait_ns / 1e6,
                         "stop", resil_stop_name(info->stop)));
}

/* The wrong variant has no minimum attempt budget: the second attempt is
 * sent into the 200 ms left. */
static int p13_run(lab_result *r, int64_t min_attempt_budget_ns) {
  lab_http h;
  resil_retry *rt = NULL;
  resil_breaker *br = NULL;
  resil_timelimiter *tl = NULL;
  resil_bulkhead *bh = NULL;
  resil_chain *ch = NULL;
  resil_retry_config rc;
  resil_retry_config_init(&rc);
  rc.max_attempts = 3;
  rc.wait_ns = MS(100);
  rc.min_attempt_budget_ns = min_attempt_budget_ns;
  p13_attempts pa = {0, json_array()};
  rc.on_attempt = p13_on_attempt;
  rc.on_attempt_user = &pa;
  resil_breaker_config bc;
  resil_breaker_config_init(&bc);
  resil_timelimiter_config tc;
  resil_timelimiter_config_init(&tc);
  tc.timeout_ns = MS(400);
  resil_bulkhead_config hc;
  resil_bulkhead_config_init(&hc);
  hc.max_concurrent = 4;
  resil_chain_config cc;
  resil_chain_config_init(&cc);
  cc.total_timeout_ns = MS(700);
  int ok = resil_retry_new(&rc, &rt, NULL) == RESIL_OK &&
           resil_breaker_new(&bc, &br, NULL) == RESIL_OK &&
           resil_timelimiter_new(&tc, &tl, NULL) == RESIL_OK &&
           resil_bulkhead_new(&hc, &bh, NULL) == RESIL_OK &&
           resil_chain_new(&cc, &ch, NULL) == RESIL_OK &&
           resil_chain_add_retry(ch, rt) == RESIL_OK &&
           resil_chain_add_breaker(ch, br) == RESIL_OK &&
           resil_chain_add_timelimiter(ch, tl) == RESIL_OK &&
           resil_chain_add_bulkhead(ch, bh) == RESIL_OK;
  if (!lab_check(r, ok, "policy setup") || !lab_http_open(r, &h, NULL, NULL)) goto out;

  resil_http_request *req = NULL;
  resil_http_param p[] = {{"ms", "900"}};
  resil_http_args args;
  resil_http_args_init(&args);
  args.params = p;
  args.param_count = 1;
  resil_http_request_new(h.c, "slow_get", &args, &req, NULL);
  resil_ctx ctx;
  resil_ctx_init(&ctx);
  ctx.flags = resil_http_request_call_flags(req);
  int64_t t0 = now_ms();
  pa.t0_ns = resil_clock_now_ns(NULL);
  resil_outcome o = resil_chain_run(ch, &ctx, resil_http_request_attempt, req);
  int64_t took = now_ms() - t0;
  double took_exact = (double)(resil_clock_now_ns(NULL) - pa.t0_ns) / 1e6;
  pa.t0_ns = 0;
  long seen = attempts(&h, "slow");
  resil_retry_stats rs;
  resil_retry_get_stats(rt, &rs);
  resil_http_request_free(req);
  resil_timelimiter_wait_idle(tl, MS(3000));
  uint32_t avail = resil_bulkhead_available(bh);

  /* The upstream recovers; a new logical call gets a new 700 ms budget. */
  p[0].value = "0";
  resil_http_request_new(h.c, "slow_get", &args, &req, NULL);
  resil_ctx ctx2;
  resil_ctx_init(&ctx2);
  ctx2.flags = resil_http_request_call_flags(req);
  resil_outcome o2 = resil_chain_run(ch, &ctx2, resil_http_request_attempt, req);
  resil_http_request_free(req);
  char nest[128], b1[96], b2[96];
  resil_chain_nesting(ch, nest, sizeof nest);
  lab_obs_str(r, "chain", nest);
  lab_obs_str(r, "outcome", fmt(&o, b1, sizeof b1));
  lab_obs_str(r, "stop", resil_stop_name(o.stop));
  lab_obs_int(r, "attempts", o.attempts);
  lab_obs_int(r, "refused_by_deadline", (long long)rs.refused_by_deadline);
  lab_obs_int(r, "upstream_saw", seen);
  lab_obs_int(r, "elapsed_ms", took);
  lab_obs_int(r, "bulkhead_available", avail);
  lab_obs_str(r, "recovered_outcome", fmt(&o2, b2, sizeof b2));
  lab_obs_int(r, "recovered_attempts", o2.attempts);
  lab_obs_int(r, "min_attempt_budget_ms", min_attempt_budget_ns / 1000000);
  /* Per layer: its budget and what the first call used of it (measured):
   * the chain's deadline against the call's time, the time limiter's
   * against each attempt's, the retry's minimum attempt budget against
   * what the deadline had left when the retry decided after the last
   * attempt. */
  json_t *layers = json_array();
  json_array_append_new(layers, json_pack("{s:s, s:f, s:f}", "layer", "chain deadline",
                                          "budget_ms", (double)cc.total_timeout_ns / 1e6,
                                          "used_ms", took_exact));
  size_t na = json_array_size(pa.arr);
  for (size_t i = 0; i < na; i++) {
    json_t *at = json_array_get(pa.arr, i);
    char name[48];
    snprintf(name, sizeof name, "time limiter, attempt %zu", i + 1);
    json_array_append_new(
        layers, json_pack("{s:s, s:f, s:f}", "layer", name, "budget_ms", (double)tc.timeout_ns / 1e6, "used_ms",
                          json_real_value(json_object_get(at, "end_ms")) -
                              json_real_value(json_object_get(at, "start_ms"))));
  }
  if (na > 0) {
    double deadline_ms = (double)cc.total_timeout_ns / 1e6;
    double last_end = json_real_value(json_object_get(json_array_get(pa.arr, na - 1), "end_ms"));
    json_array_append_new(
        layers, json_pack("{s:s, s:f, s:f, s:s}", "layer", "retry: deadline left vs min budget",
                          "budget_ms", (double)min_attempt_budget_ns / 1e6, "used_ms",
                          deadline_ms - last_end > 0 ? deadline_ms - last_end : 0.0, "note",
                          "left when the retry decided"));
  }
  lab_obs_json(r, "budget_layers", layers);
  lab_obs_json(r, "attempt_times", pa.arr);
  pa.arr = NULL;
  lab_summary(r, "%s, deadline 700 ms, limiter 400 ms, wait 100 ms, min budget %lld ms, upstream 900 ms: %s after %u attempt(s), stop %s, upstream saw %ld, %lld ms, bulkhead %u/4 free; recovered: %s in %u attempt",
              nest, (long long)(min_attempt_budget_ns / 1000000), b1, o.attempts,
              resil_stop_name(o.stop), seen, (long long)took, avail, b2, o2.attempts);
  lab_expect(r, "timeout", o.kind == RESIL_UNKNOWN && o.reason == RESIL_REASON_TIMEOUT,
             "outcome %s", b1);
  lab_expect(r, "second_refused_by_deadline",
             o.attempts == 1 && o.stop == RESIL_STOP_DEADLINE && rs.refused_by_deadline == 1,
             "attempts %u stop %s, refused by deadline %llu", o.attempts,
             resil_stop_name(o.stop), (unsigned long long)rs.refused_by_deadline);
  lab_expect(r, "upstream_saw_one", seen == 1, "upstream saw %ld requests", seen);
  lab_expect(r, "bulkhead_full_again", avail == 4, "bulkhead %u free", avail);
  lab_expect(r, "recovered", o2.http_status == 200 && o2.attempts == 1, "recovered: %s", b2);
out:
  json_decref(pa.arr);
  lab_http_close(&h);
  resil_chain_free(ch);
  resil_timelimiter_free(tl);
  resil_bulkhead_free(bh);
  resil_breaker_free(br);
  resil_retry_free(rt);
  return r->pass;
}

static int p13(lab_result *r) { return p13_run(r, MS(500)); }
static int p13_wrong(lab_result *r) { return p13_run(r, 0); }

const lab_experiment lab_http_experiments[] = {
    {"P13", "one deadline through Retry(Breaker(TimeLimiter(Bulkhead(HTTP))))", p13,
     p13_wrong, "no minimum attempt budget", "second_refused_by_deadline", 0},
    {"H1", "GET /items/42: path and header bound, JSON decoded", h1, h1_wrong,
     "the token bound to another header", "token_bound", LAB_PATHS_BOTH},
    {"H2", "400 and 500: one attempt each by default", h2, h2_wrong,
     "a retry of 3 attempts passed", "one_attempt_500", LAB_PATHS_BOTH},
    {"H3", "502 + Retry-After with a capped retry", h3, h3_wrong,
     "Retry-After ignored (respect_retry_after 0)", "waits_are_capped_retry_after", LAB_PATHS_BOTH},
    {"H4", "503 and 429: no hidden transport retry", h4, h4_wrong,
     "a retry with the unsafe opt-in passed", "one_attempt_each", LAB_PATHS_BOTH},
    {"H5", "POST /slow, response timeout 250 ms", h5, h5_wrong,
     "a 2 s response timeout", "unknown_timeout", LAB_PATHS_BOTH},
    {"H6", "unsafe retries vs safe default vs stable key", h6, h6_wrong,
     "the unsafe opt-in on the safe default", "safe_not_retried", LAB_PATHS_BOTH},
    {"H7", "connection refused", h7, h7_wrong,
     "the listening fixture as the target", "refused", LAB_PATHS_BOTH},
    {"H8", "keep-alive reuses one connection", h8, h8_wrong,
     "a new client for the second call", "one_connection", LAB_PATHS_BOTH},
    /* On the engine the wait is in the engine's own connection queue
     * (max_connections), bounded by the client's lease timeout. */
    {"H9", "pool of 1: lease timeout fails NOT_SENT", h9, h9_wrong,
     "a 2 s lease timeout", "not_sent", LAB_PATHS_BOTH},
    {"H10", "bad endpoint template fails at creation", h10, h10_wrong,
     "a valid endpoint table", "refused_at_creation", LAB_PATHS_BOTH},
    {"H11", "204, invalid JSON, then a normal call", h11, h11_wrong,
     "no JSON codec on the endpoint", "decode_error", LAB_PATHS_BOTH},
    {"H12", "custom decoder: 422 business, 429 retryable", h12, h12_wrong,
     "no decoder on the endpoint", "business_rejection", LAB_PATHS_BOTH},
    {"H13", "secrets never logged at any level", h13, h13_wrong,
     "the token also in an X-Note header", "no_secret_logged", LAB_PATHS_BOTH},
    {"H14", "gzip above 2048 bytes, server decodes", h14, h14_wrong,
     "request_gzip off", "gzip_above_2048", LAB_PATHS_BOTH},
    {"H15", "redirects off and on: hops apart from attempts", h15, h15_wrong,
     "the off client follows redirects", "off_as_is", LAB_PATHS_BOTH},
    {"H16", "dead reused connection: no silent re-send", h16, h16_wrong,
     "the re-send allowed (RESEND_IF_SAFE, POST declared idempotent)", "one_effect", LAB_PATHS_BOTH},
    {NULL, NULL, NULL, NULL, NULL, NULL, 0}};

#else /* !RESIL_HAVE_FIXTURE */

const lab_experiment lab_http_experiments[] = {{NULL, NULL, NULL, NULL, NULL, NULL, 0}};

#endif
