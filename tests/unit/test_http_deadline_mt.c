/* Deadline propagation, the out direction (DESIGN §8.3, http.h
 * deadline_propagation): every attempt of a call with a deadline carries
 * the budget left at send time, in gRPC's grammar, on the blocking path
 * and on the async engine; a retry carries what is left, not the original;
 * off per client and per endpoint; never two values when the caller sets a
 * header of the same name. The upstream is a libmicrohttpd server in this
 * file that records, for every request, when it arrived (CLOCK_MONOTONIC,
 * the clock the system ctx deadline is on) and every value of the header. */
#include <microhttpd.h>
#include <stdatomic.h>
#include <strings.h>

#include "core/timeout_hdr.h"
#include "resil/engine.h"
#include "resil/loop.h"
#include "test_http_common.h"

#define MAXREQ 16

typedef struct seen {
  int64_t at_ns;     /* arrival (first access call) */
  int nvalues;       /* values of the header */
  char value[64];    /* the first one */
  int64_t budget_ns; /* parsed, -1 when absent or invalid */
} seen;

typedef struct upstream {
  struct MHD_Daemon *d;
  char base[64];
  const char *header;
  pthread_mutex_t mu;
  seen req[MAXREQ];
  int n;
  /* The first `fail_first` requests sleep fail_sleep_ms, then answer 503. */
  int fail_first;
  int fail_sleep_ms;
} upstream;

static int64_t mono_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

typedef struct hdr_scan {
  const char *name;
  seen *s;
} hdr_scan;

static enum MHD_Result each_header(void *cls, enum MHD_ValueKind kind, const char *key,
                                   const char *value) {
  (void)kind;
  hdr_scan *h = cls;
  if (strcasecmp(key, h->name) != 0) return MHD_YES;
  if (h->s->nvalues++ == 0) snprintf(h->s->value, sizeof h->s->value, "%s", value);
  return MHD_YES;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
                                  const char *method, const char *version,
                                  const char *upload, size_t *upload_size, void **con_cls) {
  (void)method, (void)version, (void)upload;
  upstream *u = cls;
  if (!*con_cls) {
    /* First call: the headers are complete. */
    int64_t at = mono_ns();
    pthread_mutex_lock(&u->mu);
    int i = u->n < MAXREQ ? u->n++ : -1;
    if (i >= 0) {
      seen *s = &u->req[i];
      memset(s, 0, sizeof *s);
      s->at_ns = at;
      hdr_scan h = {u->header, s};
      MHD_get_connection_values(conn, MHD_HEADER_KIND, each_header, &h);
      s->budget_ns = -1;
      if (s->nvalues) {
        int64_t ns;
        if (resil__timeout_parse(s->value, strlen(s->value), &ns) == 0) s->budget_ns = ns;
      }
    }
    pthread_mutex_unlock(&u->mu);
    *con_cls = (void *)(intptr_t)(i + 2);
    return MHD_YES;
  }
  if (*upload_size) {
    *upload_size = 0;
    return MHD_YES;
  }
  int i = (int)(intptr_t)*con_cls - 2;
  int fail = i >= 0 && i < u->fail_first;
  if (fail) sleep_ms(u->fail_sleep_ms);
  static const char body[] = "{}";
  struct MHD_Response *r =
      MHD_create_response_from_buffer(2, (void *)(uintptr_t)body, MHD_RESPMEM_PERSISTENT);
  int redirect = strcmp(url, "/redir") == 0;
  if (redirect) {
    /* 30 ms, then a redirect: the hop is sent at least 30 ms after this
     * request arrived. */
    sleep_ms(30);
    MHD_add_response_header(r, "Location", "/get");
  }
  enum MHD_Result ret = MHD_queue_response(conn, redirect ? 302 : fail ? 503 : 200, r);
  MHD_destroy_response(r);
  return ret;
}

static upstream *up_start(const char *header) {
  upstream *u = calloc(1, sizeof *u);
  assert_non_null(u);
  pthread_mutex_init(&u->mu, NULL);
  u->header = header;
  struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = 0,
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  u->d = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION |
                              MHD_USE_AUTO | MHD_USE_ITC,
                          0, NULL, NULL, on_request, u, MHD_OPTION_SOCK_ADDR,
                          (struct sockaddr *)&addr, MHD_OPTION_CONNECTION_TIMEOUT, 10u,
                          MHD_OPTION_END);
  assert_non_null(u->d);
  const union MHD_DaemonInfo *di = MHD_get_daemon_info(u->d, MHD_DAEMON_INFO_BIND_PORT);
  snprintf(u->base, sizeof u->base, "http://127.0.0.1:%u", (unsigned)di->port);
  return u;
}

static void up_stop(upstream *u) {
  MHD_stop_daemon(u->d);
  pthread_mutex_destroy(&u->mu);
  free(u);
}

static seen up_req(upstream *u, int i) {
  pthread_mutex_lock(&u->mu);
  assert_true(i < u->n);
  seen s = u->req[i];
  pthread_mutex_unlock(&u->mu);
  return s;
}

static int up_count(upstream *u) {
  pthread_mutex_lock(&u->mu);
  int n = u->n;
  pthread_mutex_unlock(&u->mu);
  return n;
}

static const char *const tpl_headers[] = {"Request-Timeout: 999S", NULL};

static const resil_http_endpoint eps[] = {
    RESIL_HTTP_ENDPOINT(.name = "get", .path = "/get"),
    RESIL_HTTP_ENDPOINT(.name = "quiet", .path = "/quiet", .no_deadline_header = 1),
    RESIL_HTTP_ENDPOINT(.name = "tpl", .path = "/tpl", .headers = tpl_headers),
    RESIL_HTTP_ENDPOINT(.name = "redir", .path = "/redir"),
};

typedef struct opts {
  int off;
  const char *header;
  int interceptor;
} opts;

/* When the slow interceptor last finished: the request is sent after. */
static _Atomic int64_t g_ic_done;

static resil_status slow_ic(void *user, const resil_http_attempt_info *info,
                            resil_http_headers *h) {
  (void)user, (void)info, (void)h;
  sleep_ms(30);
  atomic_store(&g_ic_done, mono_ns());
  return RESIL_OK;
}

static resil_status set_rt(void *user, const resil_http_attempt_info *info,
                           resil_http_headers *h) {
  (void)user, (void)info;
  return resil_http_headers_set(h, "request-timeout", "77S");
}

static void cfg_opts(resil_http_client_config *cfg, void *p) {
  const opts *o = p;
  static const resil_http_interceptor ic[] = {{set_rt, NULL}};
  static const resil_http_interceptor slow[] = {{slow_ic, NULL}};
  if (o->off) cfg->deadline_propagation = 0;
  cfg->follow_redirects = 1;
  if (o->header) cfg->deadline_header = o->header;
  if (o->interceptor) {
    cfg->interceptors = o->interceptor == 2 ? slow : ic;
    cfg->interceptor_count = 1;
  }
}

static resil_http_client *client_up(upstream *u, const opts *o) {
  resil_http_client_config cfg;
  resil_http_client_config_init(&cfg);
  cfg.base_url = u->base;
  cfg.endpoints = eps;
  cfg.endpoint_count = sizeof eps / sizeof eps[0];
  cfg_opts(&cfg, (void *)(uintptr_t)o);
  resil_http_client *c = NULL;
  resil_error err;
  if (resil_http_client_new(&cfg, &c, &err) != RESIL_OK) fail_msg("client: %s", err.msg);
  return c;
}

/* The budget the server got, against the client's deadline. It was read
 * at send, which comes after `sent_after` (the call's start, or a later
 * moment the test knows the send came after) and before the request's
 * arrival: so it is never more than what was left at sent_after, and at
 * most 2 ms less than what was left at arrival. Returns value minus what
 * was left at arrival, in ns: the time from send to the server's first
 * look at the request (the transit, plus the server's own scheduling; not
 * bounded here: under a sanitizer a new connection's thread takes ms). */
static int64_t check_budget(const seen *s, int64_t deadline_ns, int64_t sent_after) {
  if (s->nvalues != 1) fail_msg("%d values of the header, expected 1", s->nvalues);
  if (s->budget_ns < 0) fail_msg("header value \"%s\" does not parse", s->value);
  int64_t left_at_arrival = deadline_ns - s->at_ns;
  if (s->budget_ns > deadline_ns - sent_after)
    fail_msg("budget %lld ns > %lld ns left before it was sent", (long long)s->budget_ns,
             (long long)(deadline_ns - sent_after));
  if (left_at_arrival - s->budget_ns > RESIL_MS(2))
    fail_msg("budget %lld ns is more than 2 ms below the %lld ns left at arrival",
             (long long)s->budget_ns, (long long)left_at_arrival);
  return s->budget_ns - left_at_arrival;
}

static resil_ctx ctx_ms(int64_t ms) {
  resil_ctx ctx;
  resil_ctx_init(&ctx);
  resil_ctx_set_timeout_ns(&ctx, RESIL_MS(ms));
  return ctx;
}

static void blocking_attempt_carries_what_is_left_at_send(void **state) {
  (void)state;
  upstream *u = up_start("Request-Timeout");
  opts o = {0};
  resil_http_client *c = client_up(u, &o);
  resil_ctx ctx = ctx_ms(300);
  /* 40 ms pass before the call: the header says what is left, not 300 ms. */
  sleep_ms(40);
  int64_t t = mono_ns();
  resil_outcome out = resil_http_call(c, "get", NULL, NULL, &ctx, NULL);
  assert_true(resil_outcome_is_success(&out));
  seen s = up_req(u, 0);
  int64_t gap = check_budget(&s, ctx.deadline_ns, t);
  assert_true(s.budget_ns <= RESIL_MS(260));
  print_message("blocking: budget %s, %+lld us against what was left at arrival\n", s.value,
                (long long)(gap / 1000));
  /* A second call on the kept-alive connection: the same rule. */
  resil_ctx ctx2 = ctx_ms(120);
  t = mono_ns();
  out = resil_http_call(c, "get", NULL, NULL, &ctx2, NULL);
  assert_true(resil_outcome_is_success(&out));
  seen s2 = up_req(u, 1);
  gap = check_budget(&s2, ctx2.deadline_ns, t);
  print_message("blocking, kept-alive connection: budget %s, %+lld us\n", s2.value,
                (long long)(gap / 1000));
  /* Read for each request at its send, not once when the attempt starts:
   * a redirect hop sent 30 ms after the first request arrived carries 30
   * ms less. */
  resil_ctx ctx4 = ctx_ms(300);
  t = mono_ns();
  out = resil_http_call(c, "redir", NULL, NULL, &ctx4, NULL);
  assert_true(resil_outcome_is_success(&out));
  seen h1 = up_req(u, 2), h2 = up_req(u, 3);
  check_budget(&h1, ctx4.deadline_ns, t);
  check_budget(&h2, ctx4.deadline_ns, h1.at_ns + RESIL_MS(30));
  print_message("blocking, redirect hop: %s then %s\n", h1.value, h2.value);
  resil_http_client_free(c);
  /* An interceptor that takes 30 ms runs before the request is built: the
   * budget is no more than what was left after it. */
  opts slow = {.interceptor = 2};
  c = client_up(u, &slow);
  resil_ctx ctx3 = ctx_ms(300);
  out = resil_http_call(c, "get", NULL, NULL, &ctx3, NULL);
  assert_true(resil_outcome_is_success(&out));
  seen s3 = up_req(u, 4);
  gap = check_budget(&s3, ctx3.deadline_ns, atomic_load(&g_ic_done));
  assert_true(s3.budget_ns <= RESIL_MS(270));
  print_message("blocking, after a 30 ms interceptor: budget %s, %+lld us\n", s3.value,
                (long long)(gap / 1000));
  resil_http_client_free(c);
  up_stop(u);
}

static void retry_carries_what_is_left_not_the_original(void **state) {
  (void)state;
  upstream *u = up_start("Request-Timeout");
  u->fail_first = 1;
  u->fail_sleep_ms = 30;
  opts o = {0};
  resil_http_client *c = client_up(u, &o);
  resil_retry_config rc;
  resil_retry_config_init(&rc);
  rc.max_attempts = 2;
  rc.wait_ns = RESIL_MS(20);
  resil_retry *r = NULL;
  resil_error err;
  assert_status(RESIL_OK, resil_retry_new(&rc, &r, &err));
  resil_ctx ctx = ctx_ms(400);
  int64_t t = mono_ns();
  resil_outcome out = resil_http_call(c, "get", NULL, r, &ctx, NULL);
  assert_true(resil_outcome_is_success(&out));
  assert_int_equal(up_count(u), 2);
  seen a = up_req(u, 0), b = up_req(u, 1);
  check_budget(&a, ctx.deadline_ns, t);
  check_budget(&b, ctx.deadline_ns, t);
  int64_t elapsed = b.at_ns - a.at_ns;
  /* The retry was sent after the first request arrived, the server's 30 ms
   * and the 20 ms backoff: it carries no more than was left then. */
  assert_true(elapsed >= RESIL_MS(50));
  check_budget(&b, ctx.deadline_ns, a.at_ns + RESIL_MS(50));
  if (a.budget_ns - b.budget_ns < RESIL_MS(50))
    fail_msg("retry budget %lld ns, first %lld ns: smaller by less than the 50 ms elapsed",
             (long long)b.budget_ns, (long long)a.budget_ns);
  print_message("blocking retry: first %s, retry %s, %lld ms apart\n", a.value, b.value,
                (long long)(elapsed / 1000000));
  resil_retry_free(r);
  resil_http_client_free(c);
  up_stop(u);
}

static void no_deadline_no_header_and_off_switches(void **state) {
  (void)state;
  upstream *u = up_start("Request-Timeout");
  opts o = {0};
  resil_http_client *c = client_up(u, &o);
  /* No deadline: nothing to propagate. */
  resil_outcome out0 = resil_http_call(c, "get", NULL, NULL, NULL, NULL);
  assert_true(resil_outcome_is_success(&out0));
  assert_int_equal(up_req(u, 0).nvalues, 0);
  /* The endpoint's switch. */
  resil_ctx ctx = ctx_ms(300);
  resil_outcome out = resil_http_call(c, "quiet", NULL, NULL, &ctx, NULL);
  assert_true(resil_outcome_is_success(&out));
  assert_int_equal(up_req(u, 1).nvalues, 0);
  resil_http_client_free(c);
  /* The client's switch. */
  o.off = 1;
  c = client_up(u, &o);
  ctx = ctx_ms(300);
  out = resil_http_call(c, "get", NULL, NULL, &ctx, NULL);
  assert_true(resil_outcome_is_success(&out));
  assert_int_equal(up_req(u, 2).nvalues, 0);
  resil_http_client_free(c);
  up_stop(u);
}

static void callers_header_of_the_same_name_is_replaced_not_doubled(void **state) {
  (void)state;
  upstream *u = up_start("Request-Timeout");
  opts o = {.interceptor = 0};
  resil_http_client *c = client_up(u, &o);
  /* The endpoint's template says 999S, the call's args 5S (another case):
   * with a deadline, one value, the library's. */
  resil_http_param hs[] = {{"REQUEST-TIMEOUT", "5S"}};
  resil_http_args args;
  resil_http_args_init(&args);
  args.headers = hs;
  args.header_count = 1;
  resil_ctx ctx = ctx_ms(300);
  int64_t t = mono_ns();
  resil_outcome out = resil_http_call(c, "tpl", &args, NULL, &ctx, NULL);
  assert_true(resil_outcome_is_success(&out));
  seen s = up_req(u, 0);
  check_budget(&s, ctx.deadline_ns, t);
  /* Without a deadline the caller's headers go as given. */
  out = resil_http_call(c, "tpl", NULL, NULL, NULL, NULL);
  assert_true(resil_outcome_is_success(&out));
  s = up_req(u, 1);
  assert_int_equal(s.nvalues, 1);
  assert_string_equal(s.value, "999S");
  resil_http_client_free(c);
  /* An interceptor's header of that name: replaced too. */
  o.interceptor = 1;
  c = client_up(u, &o);
  ctx = ctx_ms(300);
  t = mono_ns();
  out = resil_http_call(c, "get", NULL, NULL, &ctx, NULL);
  assert_true(resil_outcome_is_success(&out));
  s = up_req(u, 2);
  check_budget(&s, ctx.deadline_ns, t);
  out = resil_http_call(c, "get", NULL, NULL, NULL, NULL);
  assert_true(resil_outcome_is_success(&out));
  s = up_req(u, 3);
  assert_int_equal(s.nvalues, 1);
  assert_string_equal(s.value, "77S");
  resil_http_client_free(c);
  up_stop(u);
}

static void header_name_is_configurable_and_validated(void **state) {
  (void)state;
  upstream *u = up_start("grpc-timeout");
  opts o = {.header = "grpc-timeout"};
  resil_http_client *c = client_up(u, &o);
  resil_ctx ctx = ctx_ms(300);
  int64_t t = mono_ns();
  resil_outcome out = resil_http_call(c, "get", NULL, NULL, &ctx, NULL);
  assert_true(resil_outcome_is_success(&out));
  seen s = up_req(u, 0);
  check_budget(&s, ctx.deadline_ns, t);
  resil_http_client_free(c);
  up_stop(u);
  static const char *const bad[] = {"",         "Bad Name",         "Idempotency-Key",
                                    "content-length", "Host",         "a:b",
                                    "x12345678901234567890123456789012345678901234567890123456789012345"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    resil_http_client_config cfg;
    resil_http_client_config_init(&cfg);
    cfg.base_url = "http://127.0.0.1:9";
    cfg.endpoints = eps;
    cfg.endpoint_count = 1;
    cfg.deadline_header = bad[i];
    resil_http_client *x = NULL;
    resil_error err;
    assert_status(RESIL_EINVAL, resil_http_client_new(&cfg, &x, &err));
    assert_string_equal(err.field, "deadline_header");
    /* Not read when propagation is off. */
    cfg.deadline_propagation = 0;
    assert_status(RESIL_OK, resil_http_client_new(&cfg, &x, &err));
    resil_http_client_free(x);
  }
  resil_http_client_config cfg;
  resil_http_client_config_init(&cfg);
  assert_int_equal(cfg.deadline_propagation, 1);
  assert_string_equal(cfg.deadline_header, "Request-Timeout");
}

/* ---- the async engine on the built-in loop ------------------------------- */

#ifdef RESIL_HAVE_LOOP
typedef struct eng_done {
  int done;
  resil_outcome o;
} eng_done;

static void on_eng_done(void *user, resil_engine_handle *h, resil_outcome o,
                        resil_http_response *r) {
  (void)h;
  eng_done *d = user;
  d->done = 1;
  d->o = o;
  resil_http_response_free(r);
}

static void engine_attempts_carry_what_is_left(void **state) {
  (void)state;
  upstream *u = up_start("Request-Timeout");
  u->fail_first = 1;
  u->fail_sleep_ms = 30;
  opts o = {0};
  resil_http_client *c = client_up(u, &o);
  resil_loop *loop = NULL;
  resil_loop_adapter *ad = NULL;
  assert_status(RESIL_OK, resil_loop_new(NULL, &loop));
  assert_status(RESIL_OK, resil_loop_adapter_new(loop, &ad));
  resil_engine_config ec;
  resil_engine_config_init(&ec);
  ec.adapter = ad;
  ec.client = c;
  resil_engine *e = NULL;
  resil_error err;
  assert_status(RESIL_OK, resil_engine_new(&ec, &e, &err));
  resil_retry_config rc;
  resil_retry_config_init(&rc);
  rc.max_attempts = 2;
  rc.wait_ns = RESIL_MS(20);
  resil_retry *r = NULL;
  assert_status(RESIL_OK, resil_retry_new(&rc, &r, &err));
  resil_engine_policies pol;
  resil_engine_policies_init(&pol);
  pol.retry = r;
  resil_ctx ctx = ctx_ms(400);
  int64_t t = mono_ns();
  eng_done d = {0};
  assert_status(RESIL_OK, resil_engine_call(e, "get", NULL, &pol, &ctx, on_eng_done, &d, NULL,
                                            &err));
  int64_t t0 = mono_ms();
  while (!d.done && mono_ms() - t0 < 5000) resil_loop_run_once(loop, RESIL_MS(50), NULL);
  assert_true(d.done);
  assert_true(resil_outcome_is_success(&d.o));
  assert_int_equal(up_count(u), 2);
  seen a = up_req(u, 0), b = up_req(u, 1);
  int64_t ga = check_budget(&a, ctx.deadline_ns, t);
  int64_t gb = check_budget(&b, ctx.deadline_ns, t);
  int64_t elapsed = b.at_ns - a.at_ns;
  assert_true(elapsed >= RESIL_MS(50));
  check_budget(&b, ctx.deadline_ns, a.at_ns + RESIL_MS(50));
  assert_true(a.budget_ns - b.budget_ns >= RESIL_MS(50));
  /* An attempt timeout shorter than the deadline does not shorten the
   * budget: the header is the call's. */
  pol.retry = NULL;
  pol.attempt_timeout_ns = RESIL_MS(100);
  ctx = ctx_ms(400);
  d.done = 0;
  int64_t sent_at = mono_ns();
  assert_status(RESIL_OK, resil_engine_call(e, "get", NULL, &pol, &ctx, on_eng_done, &d, NULL,
                                            &err));
  t0 = mono_ms();
  while (!d.done && mono_ms() - t0 < 5000) resil_loop_run_once(loop, RESIL_MS(50), NULL);
  assert_true(d.done);
  assert_true(resil_outcome_is_success(&d.o));
  seen tt = up_req(u, 2);
  assert_int_equal(tt.nvalues, 1);
  check_budget(&tt, ctx.deadline_ns, sent_at);
  assert_true(tt.budget_ns > RESIL_MS(100));
  print_message("engine: first %s (%+lld us), retry %s (%+lld us), with a 100 ms attempt "
                "timeout %s\n",
                a.value, (long long)(ga / 1000), b.value, (long long)(gb / 1000), tt.value);
  resil_engine_free(e);
  resil_retry_free(r);
  resil_loop_adapter_free(ad);
  resil_loop_free(loop);
  resil_http_client_free(c);
  up_stop(u);
}
#endif

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(blocking_attempt_carries_what_is_left_at_send),
      cmocka_unit_test(retry_carries_what_is_left_not_the_original),
      cmocka_unit_test(no_deadline_no_header_and_off_switches),
      cmocka_unit_test(callers_header_of_the_same_name_is_replaced_not_doubled),
      cmocka_unit_test(header_name_is_configurable_and_validated),
#ifdef RESIL_HAVE_LOOP
      cmocka_unit_test(engine_attempts_carry_what_is_left),
#endif
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
