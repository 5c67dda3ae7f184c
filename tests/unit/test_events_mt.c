/* The JSON event log (events.h): every line parses as one JSON object with
 * time, instance and kind; breaker transitions and rejections, retries
 * with their wait, a re-send prevented on a real keep-alive connection of
 * the fixture, hedges, reloads and store recoveries; and no secret (Authorization,
 * cookies, tokens in the query, URL userinfo) ever appears. */
#include <fcntl.h>
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "resil/events.h"
#include "resil/store.h"
#include "test_http_common.h"

typedef struct lines {
  char *v[64];
  size_t n;
} lines;

static void collect(void *user, const char *line) {
  lines *l = user;
  if (l->n < 64) l->v[l->n++] = strdup(line);
}

static void lines_free(lines *l) {
  for (size_t i = 0; i < l->n; i++) free(l->v[i]);
  l->n = 0;
}

static resil_event_sink *sink_fn(lines *l, const resil_clock *clk) {
  resil_event_sink_config cfg;
  resil_event_sink_config_init(&cfg);
  cfg.fn = collect;
  cfg.user = l;
  cfg.clock = clk;
  resil_event_sink *s = NULL;
  assert_status(RESIL_OK, resil_event_sink_new(&cfg, &s, NULL));
  return s;
}

/* Parses line i, checks the common fields, returns the object. */
static json_t *parsed(const lines *l, size_t i, const char *instance, const char *kind) {
  assert_true(i < l->n);
  assert_null(strchr(l->v[i], '\n'));
  json_error_t e;
  json_t *o = json_loads(l->v[i], 0, &e);
  if (!json_is_object(o)) fail_msg("line %zu is not a JSON object: %s", i, l->v[i]);
  assert_true(json_is_string(json_object_get(o, "time")));
  assert_true(json_is_integer(json_object_get(o, "time_ms")));
  assert_string_equal(instance, json_string_value(json_object_get(o, "instance")));
  if (strcmp(kind, json_string_value(json_object_get(o, "kind"))) != 0)
    fail_msg("line %zu: kind %s, expected %s", i, l->v[i], kind);
  return o;
}

static const char *sget(json_t *o, const char *k) {
  const char *v = json_string_value(json_object_get(o, k));
  if (!v) fail_msg("no string member %s", k);
  return v;
}

/* Breaker "payments" (count window 2, minimum 2, OPEN wait 100 ms, 1 probe,
 * ramp_ns after recovery, 0 none) on the manual clock, its events to sink s
 * (one line to attach). */
static resil_breaker *payments_breaker(resil_manual_clock *mc, resil_event_sink *s,
                                       int64_t ramp_ns) {
  resil_breaker_config bc;
  resil_breaker_config_init(&bc);
  bc.name = "payments";
  bc.window_size = 2;
  bc.minimum_calls = 2;
  bc.open_wait_ns = MS(100);
  bc.half_open_permitted_calls = 1;
  bc.ramp_duration_ns = ramp_ns;
  bc.clock = resil_manual_clock_get(mc);
  resil_breaker *br = NULL;
  assert_status(RESIL_OK, resil_breaker_new(&bc, &br, NULL));
  assert_status(RESIL_OK, resil_breaker_listener_add(br, resil_event_breaker_listener, s));
  return br;
}

/* Two failures bad: the breaker opens. */
static void open_with(resil_breaker *br, resil_outcome bad) {
  for (int i = 0; i < 2; i++) {
    resil_breaker_permit p;
    assert_int_equal(RESIL_DECISION_GO, resil_breaker_try_acquire(br, &p));
    assert_status(RESIL_OK, resil_breaker_record(br, &p, &bad, 0));
  }
}

static void breaker_events_are_json_lines(void **state) {
  (void)state;
  resil_manual_clock *mc = NULL;
  /* Wall time 2026-12-01T11:38:23.123Z. */
  assert_status(RESIL_OK, resil_manual_clock_new(0, INT64_C(1796125103123), &mc));
  lines l = {0};
  resil_event_sink *s = sink_fn(&l, resil_manual_clock_get(mc));
  resil_breaker *br = payments_breaker(mc, s, 0);
  open_with(br, resil_outcome_make(RESIL_NOT_SENT, RESIL_REASON_CONNECT_REFUSED));
  resil_breaker_permit p;
  assert_int_equal(RESIL_DECISION_DENY, resil_breaker_try_acquire(br, &p));
  assert_int_equal(2, l.n);
  json_t *o = parsed(&l, 0, "payments", "breaker_transition");
  assert_string_equal("closed", sget(o, "from"));
  assert_string_equal("open", sget(o, "to"));
  assert_string_equal("FAILURE_RATE", sget(o, "cause"));
  assert_string_equal("2026-12-01T11:38:23.123Z", sget(o, "time"));
  assert_int_equal(INT64_C(1796125103123), json_integer_value(json_object_get(o, "time_ms")));
  json_decref(o);
  o = parsed(&l, 1, "payments", "breaker_rejected");
  assert_string_equal("open", sget(o, "state"));
  json_decref(o);
  assert_status(RESIL_OK, resil_breaker_listener_remove(br, resil_event_breaker_listener, s));
  assert_int_equal(2, resil_event_sink_lines(s));
  resil_breaker_free(br);
  resil_event_sink_free(s);
  lines_free(&l);
  resil_manual_clock_free(mc);
}

static resil_outcome answers_503(void *arg, const resil_ctx *ctx) {
  (void)arg, (void)ctx;
  return resil_outcome_http(503);
}

/* Line i, a breaker_ramp line of "payments" (event, cause, a seq): its
 * share. */
static double share_of(const lines *l, size_t i, const char *event, const char *cause) {
  json_t *o = parsed(l, i, "payments", "breaker_ramp");
  assert_string_equal(event, sget(o, "event"));
  assert_string_equal(cause, sget(o, "cause"));
  assert_true(json_is_integer(json_object_get(o, "seq")));
  double share = json_real_value(json_object_get(o, "share"));
  json_decref(o);
  return share;
}

/* A retry of 3 attempts, wait_ns apart on mc, watching `watch` (or none),
 * whose attempts go to the sink s. */
static resil_retry *logged_retry(const char *name, int64_t wait_ns, resil_manual_clock *mc,
                                 resil_breaker *watch, resil_event_sink *s) {
  resil_retry_config rc;
  resil_retry_config_init(&rc);
  rc.name = name;
  rc.max_attempts = 3;
  rc.wait_ns = wait_ns;
  rc.clock = resil_manual_clock_get(mc);
  rc.recovery_breaker = watch;
  rc.on_attempt = resil_event_attempt_listener;
  rc.on_attempt_user = s;
  resil_retry *r = NULL;
  assert_status(RESIL_OK, resil_retry_new(&rc, &r, NULL));
  return r;
}

/* The ramp after recovery and retries last (DESIGN §2.9): the ramp's start
 * and end are breaker_ramp lines (not breaker_thresholds_exceeded), a
 * retry stopped by the recovering breaker ends with call_done stop
 * RECOVERING, a hedge not sent is a rejected hedge line with reason
 * RECOVERING. Manual clock: a 1 s linear ramp from 10 %. */
static void recovery_events_are_json_lines(void **state) {
  (void)state;
  resil_manual_clock *mc = NULL;
  assert_status(RESIL_OK, resil_manual_clock_new(0, INT64_C(1796125103123), &mc));
  lines l = {0};
  resil_event_sink *s = sink_fn(&l, resil_manual_clock_get(mc));
  resil_breaker *br = payments_breaker(mc, s, MS(1000));
  resil_outcome ok = resil_outcome_ok();
  resil_breaker_permit p;
  open_with(br, resil_outcome_http(503));
  resil_manual_clock_advance_ns(mc, MS(100));
  assert_int_equal(RESIL_DECISION_GO, resil_breaker_try_acquire(br, &p));
  assert_status(RESIL_OK, resil_breaker_record(br, &p, &ok, 0));
  /* closed->open, open->half_open, half_open->closed, the ramp's start */
  if (l.n != 4) fail_msg("%zu lines, the last: %s", l.n, l.n ? l.v[l.n - 1] : "");
  json_t *o = parsed(&l, 2, "payments", "breaker_transition");
  assert_string_equal("closed", sget(o, "to"));
  json_decref(o);
  assert_true(fabs(share_of(&l, 3, "started", "BELOW_THRESHOLDS") - 0.1) < 1e-6);

  /* a retry due while it ramps: call_done, stop RECOVERING */
  resil_retry *r = logged_retry("payments_retry", MS(10), mc, br, s);
  resil_ctx ctx;
  resil_ctx_init(&ctx);
  ctx.flags = RESIL_CALL_IDEMPOTENT;
  resil_outcome out = resil_retry_run(r, &ctx, answers_503, NULL);
  assert_int_equal(RESIL_STOP_RECOVERING, out.stop);
  assert_int_equal(5, l.n);
  o = parsed(&l, 4, "payments_retry", "call_done");
  assert_string_equal("RECOVERING", sget(o, "stop"));
  assert_int_equal(1, json_integer_value(json_object_get(o, "attempt")));
  assert_int_equal(503, json_integer_value(json_object_get(o, "http_status")));
  json_decref(o);

  /* a hedge due while it ramps: rejected, reason RECOVERING */
  resil_hedge_config hc;
  resil_hedge_config_init(&hc);
  hc.name = "search";
  hc.delay_ns = MS(5);
  hc.clock = resil_manual_clock_get(mc);
  hc.recovery_breaker = br;
  hc.on_event = resil_event_hedge_listener;
  hc.on_event_user = s;
  resil_hedge *h = NULL;
  assert_status(RESIL_OK, resil_hedge_new(&hc, &h, NULL));
  resil_hedge_call call;
  int64_t delay;
  assert_int_equal(RESIL_DECISION_WAIT, resil_hedge_begin(h, &ctx, &call, &delay));
  resil_manual_clock_advance_ns(mc, MS(5));
  assert_int_equal(RESIL_DECISION_DENY, resil_hedge_on_timer(h, &call, &delay));
  assert_int_equal(6, l.n);
  o = parsed(&l, 5, "search", "hedge");
  assert_string_equal("rejected", sget(o, "event"));
  assert_string_equal("REJECTED", sget(o, "outcome"));
  assert_string_equal("RECOVERING", sget(o, "reason"));
  json_decref(o);

  /* the ramp's time is up: its end, RAMP_COMPLETED, share 1 */
  resil_manual_clock_advance_ns(mc, MS(1000));
  assert_int_equal(RESIL_BREAKER_CLOSED, resil_breaker_state(br));
  assert_int_equal(7, l.n);
  assert_true(share_of(&l, 6, "ended", "RAMP_COMPLETED") == 1.0);
  assert_status(RESIL_OK, resil_breaker_listener_remove(br, resil_event_breaker_listener, s));
  resil_hedge_free(h);
  resil_retry_free(r);
  resil_breaker_free(br);
  resil_event_sink_free(s);
  lines_free(&l);
  resil_manual_clock_free(mc);
}

/* A listener ahead of the sink that takes 400 ms (on the manual clock) over
 * each ramp event: the sink writes the line 400 ms after the event. */
static void slow_on_ramp(void *user, resil_breaker *br, const resil_breaker_event *ev) {
  (void)br;
  if (ev->kind == RESIL_BREAKER_EVENT_RAMP_STARTED || ev->kind == RESIL_BREAKER_EVENT_RAMP_ENDED)
    resil_manual_clock_advance_ns(user, MS(400));
}

/* A breaker_ramp line's share is the share at its event's instant, not
 * when the line is written: with a listener ahead of the sink that lets
 * 400 ms pass, the start says the ramp's first share (0.1, not 0.4), a
 * ramp cut short by an OPEN 600 ms into its 1 s says the 0.6 it had
 * reached (not 1, the breaker being OPEN when the line is written), and a
 * completed one 1. */
static void ramp_line_share_is_the_share_at_the_events_instant(void **state) {
  (void)state;
  resil_manual_clock *mc = NULL;
  assert_status(RESIL_OK, resil_manual_clock_new(0, INT64_C(1796125103123), &mc));
  lines l = {0};
  resil_event_sink *s = sink_fn(&l, resil_manual_clock_get(mc));
  resil_breaker *br = payments_breaker(mc, s, MS(1000));
  assert_status(RESIL_OK, resil_breaker_listener_remove(br, resil_event_breaker_listener, s));
  assert_status(RESIL_OK, resil_breaker_listener_add(br, slow_on_ramp, mc));
  assert_status(RESIL_OK, resil_breaker_listener_add(br, resil_event_breaker_listener, s));
  resil_outcome ok = resil_outcome_ok(), bad = resil_outcome_http(503);
  resil_breaker_permit p;
  open_with(br, bad);
  resil_manual_clock_advance_ns(mc, MS(100));
  assert_int_equal(RESIL_DECISION_GO, resil_breaker_try_acquire(br, &p));
  assert_status(RESIL_OK, resil_breaker_record(br, &p, &ok, 0));
  /* closed->open, open->half_open, half_open->closed, the ramp's start */
  if (l.n != 4) fail_msg("%zu lines, the last: %s", l.n, l.n ? l.v[l.n - 1] : "");
  double share = share_of(&l, 3, "started", "BELOW_THRESHOLDS");
  if (fabs(share - 0.1) > 1e-6) fail_msg("started with share %.9f, expected 0.1", share);

  /* 400 ms into the ramp now; two failures 600 ms into it open it again */
  resil_manual_clock_advance_ns(mc, MS(200));
  for (int failed = 0, tries = 0; failed < 2; tries++) {
    assert_true(tries < 100);
    if (resil_breaker_try_acquire(br, &p) != RESIL_DECISION_GO) continue;
    assert_status(RESIL_OK, resil_breaker_record(br, &p, &bad, 0));
    failed++;
  }
  assert_int_equal(RESIL_BREAKER_OPEN, resil_breaker_state(br));
  if (l.n != 6) fail_msg("%zu lines, the last: %s", l.n, l.n ? l.v[l.n - 1] : "");
  share = share_of(&l, 4, "ended", "FAILURE_RATE");
  if (fabs(share - 0.6) > 1e-6) fail_msg("cut short with share %.9f, expected 0.6", share);
  json_decref(parsed(&l, 5, "payments", "breaker_transition"));
  /* the breaker's event ring keeps the same shares */
  resil_breaker_event evs[8];
  size_t nev = resil_breaker_events(br, evs, 8), ramps = 0;
  for (size_t i = 0; i < nev; i++) {
    double want = evs[i].kind == RESIL_BREAKER_EVENT_RAMP_STARTED ? 0.1
                  : evs[i].kind == RESIL_BREAKER_EVENT_RAMP_ENDED ? 0.6
                                                                 : 1.0;
    if (fabs(evs[i].ramp_share - want) > 1e-6)
      fail_msg("event %zu (%s): ramp_share %.9f, expected %g", i,
               resil_breaker_event_kind_name(evs[i].kind), evs[i].ramp_share, want);
    ramps += want < 1.0;
  }
  assert_int_equal(6, nev);
  assert_int_equal(2, ramps);

  /* the next probe starts it over; its time up, it ends with share 1 */
  resil_manual_clock_advance_ns(mc, MS(100));
  assert_int_equal(RESIL_DECISION_GO, resil_breaker_try_acquire(br, &p));
  assert_status(RESIL_OK, resil_breaker_record(br, &p, &ok, 0));
  if (l.n != 9) fail_msg("%zu lines, the last: %s", l.n, l.n ? l.v[l.n - 1] : "");
  share = share_of(&l, 8, "started", "BELOW_THRESHOLDS");
  if (fabs(share - 0.1) > 1e-6) fail_msg("started again with share %.9f, expected 0.1", share);
  resil_manual_clock_advance_ns(mc, MS(600));
  assert_int_equal(RESIL_BREAKER_CLOSED, resil_breaker_state(br));
  assert_int_equal(10, l.n);
  assert_true(share_of(&l, 9, "ended", "RAMP_COMPLETED") == 1.0);
  assert_status(RESIL_OK, resil_breaker_listener_remove(br, resil_event_breaker_listener, s));
  assert_status(RESIL_OK, resil_breaker_listener_remove(br, slow_on_ramp, mc));
  resil_breaker_free(br);
  resil_event_sink_free(s);
  lines_free(&l);
  resil_manual_clock_free(mc);
}

static resil_outcome refused(void *arg, const resil_ctx *ctx) {
  (void)arg, (void)ctx;
  return resil_outcome_make(RESIL_NOT_SENT, RESIL_REASON_CONNECT_REFUSED);
}

static void retries_are_logged_with_their_wait(void **state) {
  (void)state;
  resil_manual_clock *mc = NULL;
  assert_status(RESIL_OK, resil_manual_clock_new(0, 0, &mc));
  lines l = {0};
  resil_event_sink *s = sink_fn(&l, resil_manual_clock_get(mc));
  resil_retry *r = logged_retry("orders", RESIL_MS(250), mc, NULL, s);
  resil_retry_run(r, NULL, refused, NULL);
  assert_int_equal(3, l.n);
  for (size_t i = 0; i < 2; i++) {
    json_t *o = parsed(&l, i, "orders", "retry");
    assert_int_equal(i + 1, json_integer_value(json_object_get(o, "attempt")));
    assert_true(json_real_value(json_object_get(o, "wait_ms")) == 250.0);
    assert_string_equal("NOT_SENT", sget(o, "outcome"));
    assert_string_equal("CONNECT_REFUSED", sget(o, "reason"));
    json_decref(o);
  }
  json_t *o = parsed(&l, 2, "orders", "call_done");
  assert_string_equal("MAX_ATTEMPTS", sget(o, "stop"));
  json_decref(o);
  resil_retry_free(r);
  resil_event_sink_free(s);
  lines_free(&l);
  resil_manual_clock_free(mc);
}

static const char *const secret_headers[] = {"Authorization: Bearer {auth}",
                                             "Cookie: session={cookie}", NULL};
static const resil_http_endpoint eps[] = {
    {.struct_size = sizeof(resil_http_endpoint), .name = "ka_get", .path = "/ka",
     .query = "access_token={qt}", .headers = secret_headers},
    {.struct_size = sizeof(resil_http_endpoint), .name = "ka_post", .method = RESIL_HTTP_POST,
     .path = "/ka", .query = "access_token={qt}", .headers = secret_headers,
     .request_codec = RESIL_HTTP_CODEC_JSON},
};

typedef struct client_args {
  resil_event_sink *sink;
} client_args;

static void with_listener(resil_http_client_config *cfg, void *u) {
  cfg->on_attempt = resil_event_attempt_listener;
  cfg->on_attempt_user = u;
  cfg->resend_stale = RESIL_HTTP_RESEND_NEVER;
}

static resil_outcome call_secret(resil_http_client *c, const char *ep, const char *body) {
  resil_http_param ps[] = {{"auth", "SECRETBEARER9"}, {"cookie", "SECRETCOOKIE9"},
                           {"qt", "SECRETQUERY9"}};
  resil_http_args args;
  resil_http_args_init(&args);
  args.params = ps;
  args.param_count = 3;
  args.body = body;
  args.body_len = body ? strlen(body) : 0;
  return resil_http_call(c, ep, &args, NULL, NULL, NULL);
}

static char *slurp(int fd) {
  off_t n = lseek(fd, 0, SEEK_END);
  char *b = calloc(1, (size_t)n + 1);
  assert_int_equal(n, pread(fd, b, (size_t)n, 0));
  return b;
}

/* A POST on a kept-alive connection the fixture closes without answering:
 * the refused hidden re-send is an event (RESIL_OF_RESEND_PREVENTED). The
 * sink writes to a file; nothing secret reaches it. */
static void resend_prevented_is_logged_and_no_secret_appears(void **state) {
  fx_state *st = *state;
  char path[] = "/tmp/resil_events_XXXXXX";
  int fd = mkstemp(path);
  assert_true(fd >= 0);
  resil_event_sink_config cfg;
  resil_event_sink_config_init(&cfg);
  cfg.fd = fd;
  resil_event_sink *s = NULL;
  assert_status(RESIL_OK, resil_event_sink_new(&cfg, &s, NULL));
  resil_http_client *c = client_on(st->f, eps, 2, with_listener, s);
  resil_outcome o = call_secret(c, "ka_get", NULL);
  assert_int_equal(200, o.http_status);
  o = call_secret(c, "ka_post", "{\"password\":\"SECRETBODY9\"}");
  assert_outcome(o, RESIL_UNKNOWN, RESIL_REASON_CONNECTION_CLOSED);
  assert_true(o.flags & RESIL_OF_RESEND_PREVENTED);
  /* A URL given to the log is redacted by the HTTP log's rules. */
  assert_status(RESIL_OK,
                resil_event_emit_url(s, "http", "redirect",
                                     "https://user:SECRETPW9@h/p?token=SECRETTOK9&page=2#SECRETFRAG9",
                                     "{\"status\":302}"));
  char *text = slurp(fd);
  lines l = {0};
  for (char *p = text, *nl; (nl = strchr(p, '\n')) != NULL; p = nl + 1) {
    *nl = '\0';
    collect(&l, p);
  }
  /* ka_get's call_done, resend_prevented, ka_post's call_done, redirect. */
  assert_int_equal(4, l.n);
  json_decref(parsed(&l, 0, "http", "call_done"));
  json_t *e = parsed(&l, 1, "http", "resend_prevented");
  json_decref(e);
  e = parsed(&l, 2, "http", "call_done");
  assert_string_equal("UNKNOWN", sget(e, "outcome"));
  json_decref(e);
  e = parsed(&l, 3, "http", "redirect");
  assert_string_equal("https://[REDACTED]@h/p?token=[REDACTED]&page=2", sget(e, "url"));
  assert_int_equal(302, json_integer_value(json_object_get(e, "status")));
  json_decref(e);
  for (size_t i = 0; i < l.n; i++)
    if (strstr(l.v[i], "SECRET")) fail_msg("a secret in line %zu: %s", i, l.v[i]);
  lines_free(&l);
  free(text);
  resil_http_client_free(c);
  resil_event_sink_free(s);
  close(fd);
  unlink(path);
}

static const resil_http_endpoint keyed_eps[] = {
    {.struct_size = sizeof(resil_http_endpoint), .name = "op_status", .path = "/operations/{key}",
     .response_codec = RESIL_HTTP_CODEC_JSON},
    {.struct_size = sizeof(resil_http_endpoint), .name = "idem_close", .method = RESIL_HTTP_POST,
     .path = "/idem-close", .idempotency_key = RESIL_HTTP_KEY_SEND,
     .response_codec = RESIL_HTTP_CODEC_JSON, .status_endpoint = "op_status"},
};

static void on_listener(resil_http_client_config *cfg, void *u) {
  cfg->on_attempt = resil_event_attempt_listener;
  cfg->on_attempt_user = u;
}

/* I4 shape: the write commits and the connection closes before any
 * response byte; the status query reads the stored result: a recovered
 * event, from the client's own report of that query. */
static void recovery_by_status_query_is_logged(void **state) {
  fx_state *st = *state;
  lines l = {0};
  resil_event_sink *s = sink_fn(&l, NULL);
  resil_http_client *c = client_on(st->f, keyed_eps, 2, on_listener, s);
  resil_http_args args;
  resil_http_args_init(&args);
  args.idempotency_key = "ev-key-1";
  resil_http_recovery rep;
  resil_outcome o = resil_http_call_keyed(c, "idem_close", &args, NULL, NULL, NULL, NULL, &rep);
  assert_int_equal(201, o.http_status);
  assert_true(o.flags & RESIL_OF_RECOVERED);
  /* The write attempt (call_done UNKNOWN), then the query: recovered, and
   * its call_done. */
  size_t found = l.n;
  for (size_t i = 0; i < l.n; i++)
    if (strstr(l.v[i], "\"kind\":\"recovered\"")) found = i;
  if (found == l.n) fail_msg("no recovered event among %zu lines", l.n);
  json_t *e = parsed(&l, found, "http", "recovered");
  assert_string_equal("ev-key-1", sget(e, "idempotency_key"));
  json_decref(e);
  resil_http_client_free(c);
  resil_event_sink_free(s);
  lines_free(&l);
}

static void reloads_recoveries_and_bad_input(void **state) {
  (void)state;
  lines l = {0};
  resil_event_sink *s = sink_fn(&l, NULL);
  assert_status(RESIL_OK, resil_event_reload(s, "registry", 0, "/etc/app.yaml", 0, 7,
                                             "app.yaml:3:5: breakers.x.window_size: bad"));
  assert_status(RESIL_OK, resil_event_reload(s, "registry", 1, "/etc/app.yaml", 2, 5, NULL));
  resil_store_recovery rep;
  memset(&rep, 0, sizeof rep);
  rep.struct_size = sizeof rep;
  rep.selected = 3;
  rep.recovered = 2;
  rep.failed = 1;
  assert_status(RESIL_OK, resil_event_store_recovery(s, "ops", &rep));
  /* Invalid UTF-8 becomes U+FFFD; the reserved keys cannot be replaced. */
  assert_status(RESIL_OK, resil_event_emit(s, "bad\xff", "hedge",
                                           "{\"hedges\":2,\"kind\":\"x\"}"));
  assert_status(RESIL_EINVAL, resil_event_emit(s, "a", "b", "[1]"));
  assert_status(RESIL_EINVAL, resil_event_emit(s, "a", "b", "{"));
  assert_status(RESIL_EMISUSE, resil_event_emit(NULL, "a", "b", NULL));
  assert_int_equal(4, l.n);
  json_t *o = parsed(&l, 0, "registry", "reload");
  assert_true(json_is_false(json_object_get(o, "ok")));
  assert_non_null(strstr(sget(o, "error"), "window_size"));
  json_decref(o);
  o = parsed(&l, 1, "registry", "reload");
  assert_int_equal(2, json_integer_value(json_object_get(o, "changed")));
  assert_null(json_object_get(o, "error"));
  json_decref(o);
  o = parsed(&l, 2, "ops", "store_recovery");
  assert_int_equal(2, json_integer_value(json_object_get(o, "recovered")));
  json_decref(o);
  o = parsed(&l, 3, "bad\xef\xbf\xbd", "hedge");
  assert_int_equal(2, json_integer_value(json_object_get(o, "hedges")));
  json_decref(o);
  resil_event_sink_free(s);
  lines_free(&l);
  /* A config never passed through _init, and one with nowhere to write. */
  resil_event_sink_config cfg;
  memset(&cfg, 0, sizeof cfg);
  resil_event_sink *t = NULL;
  resil_error err;
  assert_status(RESIL_EINVAL, resil_event_sink_new(&cfg, &t, &err));
  assert_non_null(strstr(err.msg, "resil_event_sink_config_init"));
  resil_event_sink_config_init(&cfg);
  assert_status(RESIL_EINVAL, resil_event_sink_new(&cfg, &t, &err));
  assert_null(t);
}

/* The event log's URL redaction also hides userinfo without a scheme and
 * URLs with userinfo inside query values, plain or percent-encoded. */
static void urls_without_scheme_and_in_query_values_are_redacted(void **state) {
  (void)state;
  static const char *const urls[] = {
      "user:S-NOSCHEME@host/path?x=1",
      "https://h/cb?next=https://u:S-NEXT@h2/x&page=2",
      "https://h/cb?redirect=http%3A%2F%2Fuser%3AS-ENC%40host&page=2",
  };
  lines l = {0};
  resil_event_sink *s = sink_fn(&l, NULL);
  for (size_t i = 0; i < sizeof urls / sizeof urls[0]; i++)
    assert_status(RESIL_OK, resil_event_emit_url(s, "api", "fetch", urls[i], NULL));
  assert_int_equal(3, l.n);
  for (size_t i = 0; i < l.n; i++) {
    if (strstr(l.v[i], "S-")) fail_msg("secret in line %zu: %s", i, l.v[i]);
    json_t *o = parsed(&l, i, "api", "fetch");
    assert_non_null(strstr(sget(o, "url"), "[REDACTED]"));
    json_decref(o);
  }
  resil_event_sink_free(s);
  lines_free(&l);
}

/* DEL, the C1 controls (NEL U+0085 among them), U+2028 and U+2029 leave
 * as \uXXXX escapes, never raw, from an instance name, a URL and a reload
 * error alike, and parse back to the same text. */
static void line_breaks_and_c1_controls_are_escaped(void **state) {
  (void)state;
  static const char *const raw[] = {"\x7f", "\xc2\x80", "\xc2\x85", "\xc2\x9f",
                                    "\xe2\x80\xa8", "\xe2\x80\xa9"};
  static const char *const esc[] = {"\\u007f", "\\u0080", "\\u0085", "\\u009f",
                                    "\\u2028", "\\u2029"};
  const char *text = "a\x7f" "b\xc2\x80" "c\xc2\x85" "d\xc2\x9f" "e\xe2\x80\xa8" "f\xe2\x80\xa9" "g";
  char url[128];
  snprintf(url, sizeof url, "http://127.0.0.1/p%s?q=1", text);
  lines l = {0};
  resil_event_sink *s = sink_fn(&l, NULL);
  assert_status(RESIL_OK, resil_event_emit(s, text, "app", NULL));
  assert_status(RESIL_OK, resil_event_emit_url(s, "u", "fetch", url, NULL));
  assert_status(RESIL_OK, resil_event_reload(s, "registry", 0, "app.yaml", 0, 0, text));
  assert_int_equal(3, l.n);
  for (size_t i = 0; i < l.n; i++) {
    for (size_t k = 0; k < sizeof raw / sizeof raw[0]; k++) {
      if (strstr(l.v[i], raw[k])) fail_msg("line %zu holds a raw %s: %s", i, esc[k], l.v[i]);
      if (!strstr(l.v[i], esc[k])) fail_msg("line %zu lacks %s: %s", i, esc[k], l.v[i]);
    }
  }
  json_t *o = parsed(&l, 0, text, "app");
  json_decref(o);
  o = parsed(&l, 1, "u", "fetch");
  assert_non_null(strstr(sget(o, "url"), text));
  json_decref(o);
  o = parsed(&l, 2, "registry", "reload");
  assert_string_equal(text, sget(o, "error"));
  json_decref(o);
  resil_event_sink_free(s);
  lines_free(&l);
}

/* A hedge's events (resil_event_hedge_listener, attached in one line):
 * sent with the delay used, won with the winner's outcome, the primary
 * cancelled as a loser, a budget refusal, and an unsafe pass-through. */
static void hedge_events_are_json_lines(void **state) {
  (void)state;
  resil_manual_clock *mc = NULL;
  assert_status(RESIL_OK, resil_manual_clock_new(0, INT64_C(1796125103123), &mc));
  lines l = {0};
  resil_event_sink *s = sink_fn(&l, resil_manual_clock_get(mc));
  resil_hedge_config hc;
  resil_hedge_config_init(&hc);
  hc.name = "search";
  hc.delay_ns = MS(25);
  hc.clock = resil_manual_clock_get(mc);
  hc.on_event = resil_event_hedge_listener;
  hc.on_event_user = s;
  resil_hedge *h = NULL;
  assert_status(RESIL_OK, resil_hedge_new(&hc, &h, NULL));
  resil_ctx get;
  resil_ctx_init(&get);
  get.flags = RESIL_CALL_IDEMPOTENT;
  resil_hedge_call call;
  int64_t delay;
  assert_int_equal(RESIL_DECISION_WAIT, resil_hedge_begin(h, &get, &call, &delay));
  resil_manual_clock_advance_ns(mc, MS(25));
  assert_int_equal(RESIL_DECISION_GO, resil_hedge_on_timer(h, &call, &delay));
  resil_manual_clock_advance_ns(mc, MS(10));
  resil_outcome ok = resil_outcome_http(200);
  assert_int_equal(RESIL_HEDGE_WINNER, resil_hedge_record(h, &call, 2, MS(10), &ok));
  resil_ctx post;
  resil_ctx_init(&post);
  assert_int_equal(RESIL_DECISION_DENY, resil_hedge_begin(h, &post, &call, &delay));
  assert_int_equal(4, l.n);
  json_t *o = parsed(&l, 0, "search", "hedge");
  assert_string_equal("sent", sget(o, "event"));
  assert_int_equal(1, json_integer_value(json_object_get(o, "hedge")));
  assert_true(json_real_value(json_object_get(o, "delay_ms")) == 25.0);
  assert_true(json_real_value(json_object_get(o, "elapsed_ms")) == 25.0);
  assert_null(json_object_get(o, "outcome"));
  json_decref(o);
  o = parsed(&l, 1, "search", "hedge");
  assert_string_equal("won", sget(o, "event"));
  assert_int_equal(1, json_integer_value(json_object_get(o, "hedge")));
  assert_string_equal("ANSWERED", sget(o, "outcome"));
  assert_int_equal(200, json_integer_value(json_object_get(o, "http_status")));
  assert_true(json_real_value(json_object_get(o, "elapsed_ms")) == 35.0);
  assert_null(json_object_get(o, "delay_ms"));
  json_decref(o);
  o = parsed(&l, 2, "search", "hedge");
  assert_string_equal("cancelled_loser", sget(o, "event"));
  assert_int_equal(0, json_integer_value(json_object_get(o, "hedge")));
  json_decref(o);
  o = parsed(&l, 3, "search", "hedge");
  assert_string_equal("passed_unsafe", sget(o, "event"));
  json_decref(o);
  resil_hedge_free(h);

  /* A budget that refuses: rejected, with the reason. */
  resil_retry_budget_config bc;
  resil_retry_budget_config_init(&bc);
  bc.min_retries_per_s = 0;
  bc.clock = resil_manual_clock_get(mc);
  resil_retry_budget *b = NULL;
  assert_status(RESIL_OK, resil_retry_budget_new(&bc, &b, NULL));
  hc.budget = b;
  assert_status(RESIL_OK, resil_hedge_new(&hc, &h, NULL));
  lines_free(&l);
  assert_int_equal(RESIL_DECISION_WAIT, resil_hedge_begin(h, &get, &call, &delay));
  assert_int_equal(RESIL_DECISION_DENY, resil_hedge_on_timer(h, &call, &delay));
  assert_int_equal(1, l.n);
  o = parsed(&l, 0, "search", "hedge");
  assert_string_equal("rejected", sget(o, "event"));
  assert_string_equal("REJECTED", sget(o, "outcome"));
  assert_string_equal(resil_reason_name(RESIL_REASON_RETRY_BUDGET), sget(o, "reason"));
  json_decref(o);
  resil_hedge_free(h);
  resil_retry_budget_free(b);
  resil_event_sink_free(s);
  lines_free(&l);
  resil_manual_clock_free(mc);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(breaker_events_are_json_lines),
      cmocka_unit_test(recovery_events_are_json_lines),
      cmocka_unit_test(ramp_line_share_is_the_share_at_the_events_instant),
      cmocka_unit_test(retries_are_logged_with_their_wait),
      cmocka_unit_test_setup_teardown(resend_prevented_is_logged_and_no_secret_appears,
                                      fx_setup, fx_teardown),
      cmocka_unit_test_setup_teardown(recovery_by_status_query_is_logged, fx_setup, fx_teardown),
      cmocka_unit_test(reloads_recoveries_and_bad_input),
      cmocka_unit_test(line_breaks_and_c1_controls_are_escaped),
      cmocka_unit_test(urls_without_scheme_and_in_query_values_are_redacted),
      cmocka_unit_test(hedge_events_are_json_lines),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
