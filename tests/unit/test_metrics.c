/* Prometheus text exposition (metrics.h): the exact text for a fixed set of
 * instances, monotonic counters, the size query, label escaping, the
 * source interface's checks, and `promtool check metrics` on the output. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "metrics_common.h"

static char *render(resil_metrics *m) {
  size_t len = 0;
  assert_status(RESIL_OK, resil_metrics_render(m, NULL, 0, &len));
  char *buf = malloc(len + 1);
  assert_non_null(buf);
  size_t len2 = 0;
  assert_status(RESIL_OK, resil_metrics_render(m, buf, len + 1, &len2));
  assert_int_equal(len, len2);
  assert_int_equal(strlen(buf), len);
  return buf;
}

static void dump_on_mismatch(const char *got, const char *want) {
  if (strcmp(got, want) == 0) return;
  size_t i = 0;
  while (got[i] && got[i] == want[i]) i++;
  fprintf(stderr, "first difference at byte %zu\n--- got:\n%s\n", i, got);
  fail_msg("exposition differs from the golden text");
}

/* The exposition of mx_make()'s set, checked line by line against the
 * getters' figures (2 successes + 2 failures: 50 %). */
static const char golden[] =
    "# HELP resil_circuitbreaker_calls_total Calls recorded or refused by the breaker, by kind (successful, failed, ignored, not_permitted, ramp_rejected: refused by a ramp after recovery).\n"
    "# TYPE resil_circuitbreaker_calls_total counter\n"
    "resil_circuitbreaker_calls_total{name=\"payments\",kind=\"successful\"} 2\n"
    "resil_circuitbreaker_calls_total{name=\"payments\",kind=\"failed\"} 2\n"
    "resil_circuitbreaker_calls_total{name=\"payments\",kind=\"ignored\"} 0\n"
    "resil_circuitbreaker_calls_total{name=\"payments\",kind=\"not_permitted\"} 0\n"
    "resil_circuitbreaker_calls_total{name=\"payments\",kind=\"ramp_rejected\"} 0\n"
    "# HELP resil_circuitbreaker_slow_calls_total Recorded calls slower than the slow-call threshold, by kind (successful, failed).\n"
    "# TYPE resil_circuitbreaker_slow_calls_total counter\n"
    "resil_circuitbreaker_slow_calls_total{name=\"payments\",kind=\"successful\"} 0\n"
    "resil_circuitbreaker_slow_calls_total{name=\"payments\",kind=\"failed\"} 0\n"
    "# HELP resil_circuitbreaker_state 1 for the breaker's current state, 0 for the others.\n"
    "# TYPE resil_circuitbreaker_state gauge\n"
    "resil_circuitbreaker_state{name=\"payments\",state=\"closed\"} 1\n"
    "resil_circuitbreaker_state{name=\"payments\",state=\"open\"} 0\n"
    "resil_circuitbreaker_state{name=\"payments\",state=\"half_open\"} 0\n"
    "resil_circuitbreaker_state{name=\"payments\",state=\"disabled\"} 0\n"
    "resil_circuitbreaker_state{name=\"payments\",state=\"forced_open\"} 0\n"
    "resil_circuitbreaker_state{name=\"payments\",state=\"metrics_only\"} 0\n"
    "# HELP resil_circuitbreaker_failure_rate Failure rate of the current window in percent; NaN until minimum_calls are buffered.\n"
    "# TYPE resil_circuitbreaker_failure_rate gauge\n"
    "resil_circuitbreaker_failure_rate{name=\"payments\"} 50\n"
    "# HELP resil_circuitbreaker_slow_call_rate Slow-call rate of the current window in percent; NaN until minimum_calls are buffered.\n"
    "# TYPE resil_circuitbreaker_slow_call_rate gauge\n"
    "resil_circuitbreaker_slow_call_rate{name=\"payments\"} 0\n"
    "# HELP resil_circuitbreaker_buffered_calls Calls in the current window, by kind (successful, failed).\n"
    "# TYPE resil_circuitbreaker_buffered_calls gauge\n"
    "resil_circuitbreaker_buffered_calls{name=\"payments\",kind=\"successful\"} 2\n"
    "resil_circuitbreaker_buffered_calls{name=\"payments\",kind=\"failed\"} 2\n"
    "# HELP resil_circuitbreaker_transitions_total State transitions.\n"
    "# TYPE resil_circuitbreaker_transitions_total counter\n"
    "resil_circuitbreaker_transitions_total{name=\"payments\"} 0\n"
    "# HELP resil_circuitbreaker_ramp_ratio Share of calls the breaker admits now: below 1 during the ramp after recovery, else 1.\n"
    "# TYPE resil_circuitbreaker_ramp_ratio gauge\n"
    "resil_circuitbreaker_ramp_ratio{name=\"payments\"} 1\n"
    "# HELP resil_retry_calls_total Finished logical calls, by kind (successful_without_retry, successful_with_retry, failed_with_retry, failed_without_retry).\n"
    "# TYPE resil_retry_calls_total counter\n"
    "resil_retry_calls_total{name=\"payments_retry\",kind=\"successful_without_retry\"} 2\n"
    "resil_retry_calls_total{name=\"payments_retry\",kind=\"successful_with_retry\"} 0\n"
    "resil_retry_calls_total{name=\"payments_retry\",kind=\"failed_with_retry\"} 0\n"
    "resil_retry_calls_total{name=\"payments_retry\",kind=\"failed_without_retry\"} 0\n"
    "# HELP resil_retry_attempts_total Physical attempts made.\n"
    "# TYPE resil_retry_attempts_total counter\n"
    "resil_retry_attempts_total{name=\"payments_retry\"} 2\n"
    "# HELP resil_retry_refused_attempts_total Attempts not made, by reason (deadline too short, retry budget refused, recovering: the watched breaker was half-open or ramping).\n"
    "# TYPE resil_retry_refused_attempts_total counter\n"
    "resil_retry_refused_attempts_total{name=\"payments_retry\",reason=\"deadline\"} 0\n"
    "resil_retry_refused_attempts_total{name=\"payments_retry\",reason=\"budget\"} 0\n"
    "resil_retry_refused_attempts_total{name=\"payments_retry\",reason=\"recovering\"} 0\n"
    "# HELP resil_ratelimiter_available_permissions Permits available now (negative while permits of coming cycles are reserved).\n"
    "# TYPE resil_ratelimiter_available_permissions gauge\n"
    "resil_ratelimiter_available_permissions{name=\"api\"} 3\n"
    "# HELP resil_ratelimiter_waiting_calls Callers sleeping for a reserved permit in acquire or run.\n"
    "# TYPE resil_ratelimiter_waiting_calls gauge\n"
    "resil_ratelimiter_waiting_calls{name=\"api\"} 0\n"
    "# HELP resil_ratelimiter_calls_total Permit requests, by kind (permitted, reserved, refused, cancelled).\n"
    "# TYPE resil_ratelimiter_calls_total counter\n"
    "resil_ratelimiter_calls_total{name=\"api\",kind=\"permitted\"} 1\n"
    "resil_ratelimiter_calls_total{name=\"api\",kind=\"reserved\"} 0\n"
    "resil_ratelimiter_calls_total{name=\"api\",kind=\"refused\"} 0\n"
    "resil_ratelimiter_calls_total{name=\"api\",kind=\"cancelled\"} 0\n"
    "# HELP resil_bulkhead_available_concurrent_calls Free slots now.\n"
    "# TYPE resil_bulkhead_available_concurrent_calls gauge\n"
    "resil_bulkhead_available_concurrent_calls{name=\"db\"} 2\n"
    "# HELP resil_bulkhead_max_allowed_concurrent_calls Configured slots.\n"
    "# TYPE resil_bulkhead_max_allowed_concurrent_calls gauge\n"
    "resil_bulkhead_max_allowed_concurrent_calls{name=\"db\"} 3\n"
    "# HELP resil_bulkhead_waiting_calls Waiters queued for a slot now.\n"
    "# TYPE resil_bulkhead_waiting_calls gauge\n"
    "resil_bulkhead_waiting_calls{name=\"db\"} 0\n"
    "# HELP resil_bulkhead_calls_total Slot requests, by kind (permitted, rejected).\n"
    "# TYPE resil_bulkhead_calls_total counter\n"
    "resil_bulkhead_calls_total{name=\"db\",kind=\"permitted\"} 1\n"
    "resil_bulkhead_calls_total{name=\"db\",kind=\"rejected\"} 0\n"
    "# HELP resil_timelimiter_calls_total Runs, by kind (successful, failed, timeout, cancelled, rejected, error).\n"
    "# TYPE resil_timelimiter_calls_total counter\n"
    "resil_timelimiter_calls_total{name=\"slow\",kind=\"successful\"} 0\n"
    "resil_timelimiter_calls_total{name=\"slow\",kind=\"failed\"} 0\n"
    "resil_timelimiter_calls_total{name=\"slow\",kind=\"timeout\"} 0\n"
    "resil_timelimiter_calls_total{name=\"slow\",kind=\"cancelled\"} 0\n"
    "resil_timelimiter_calls_total{name=\"slow\",kind=\"rejected\"} 0\n"
    "resil_timelimiter_calls_total{name=\"slow\",kind=\"error\"} 0\n"
    "# HELP resil_timelimiter_running_tasks Tasks started or queued and not yet ended.\n"
    "# TYPE resil_timelimiter_running_tasks gauge\n"
    "resil_timelimiter_running_tasks{name=\"slow\"} 0\n"
    "# HELP resil_timelimiter_abandoned_tasks Running tasks whose caller stopped waiting.\n"
    "# TYPE resil_timelimiter_abandoned_tasks gauge\n"
    "resil_timelimiter_abandoned_tasks{name=\"slow\"} 0\n"
    "# HELP resil_hedge_calls_total Logical calls, by kind (hedged, passed_unsafe, passed_blocking, single: the rest).\n"
    "# TYPE resil_hedge_calls_total counter\n"
    "resil_hedge_calls_total{name=\"search\",kind=\"hedged\"} 0\n"
    "resil_hedge_calls_total{name=\"search\",kind=\"passed_unsafe\"} 0\n"
    "resil_hedge_calls_total{name=\"search\",kind=\"passed_blocking\"} 0\n"
    "resil_hedge_calls_total{name=\"search\",kind=\"single\"} 0\n"
    "# HELP resil_hedge_hedges_total Hedge attempts, by kind (sent, won, refused_by_budget, refused_recovering: the watched breaker was half-open or ramping), and losers cancelled (cancelled_loser).\n"
    "# TYPE resil_hedge_hedges_total counter\n"
    "resil_hedge_hedges_total{name=\"search\",kind=\"sent\"} 0\n"
    "resil_hedge_hedges_total{name=\"search\",kind=\"won\"} 0\n"
    "resil_hedge_hedges_total{name=\"search\",kind=\"refused_by_budget\"} 0\n"
    "resil_hedge_hedges_total{name=\"search\",kind=\"refused_recovering\"} 0\n"
    "resil_hedge_hedges_total{name=\"search\",kind=\"cancelled_loser\"} 0\n"
    "# HELP resil_hedge_delay_seconds The delay a call beginning now would get.\n"
    "# TYPE resil_hedge_delay_seconds gauge\n"
    "resil_hedge_delay_seconds{name=\"search\"} 0.05\n"
    "# HELP resil_chain_layer_calls_total Calls that returned from the layer.\n"
    "# TYPE resil_chain_layer_calls_total counter\n"
    "resil_chain_layer_calls_total{name=\"checkout\",position=\"0\",layer=\"Retry\",instance=\"payments_retry\"} 2\n"
    "resil_chain_layer_calls_total{name=\"checkout\",position=\"1\",layer=\"Breaker\",instance=\"payments\"} 2\n"
    "# HELP resil_chain_layer_attempts_total Calls the layer made to the next layer (or the protected call) that returned.\n"
    "# TYPE resil_chain_layer_attempts_total counter\n"
    "resil_chain_layer_attempts_total{name=\"checkout\",position=\"0\",layer=\"Retry\",instance=\"payments_retry\"} 2\n"
    "resil_chain_layer_attempts_total{name=\"checkout\",position=\"1\",layer=\"Breaker\",instance=\"payments\"} 2\n"
    "# HELP resil_chain_layer_rejections_total Calls the layer refused itself.\n"
    "# TYPE resil_chain_layer_rejections_total counter\n"
    "resil_chain_layer_rejections_total{name=\"checkout\",position=\"0\",layer=\"Retry\",instance=\"payments_retry\"} 0\n"
    "resil_chain_layer_rejections_total{name=\"checkout\",position=\"1\",layer=\"Breaker\",instance=\"payments\"} 0\n"
    "# HELP resil_chain_call_attempts_total Physical attempts that reached the protected call.\n"
    "# TYPE resil_chain_call_attempts_total counter\n"
    "resil_chain_call_attempts_total{name=\"checkout\"} 2\n";

static void exposition_of_every_kind_is_exact(void **state) {
  (void)state;
  mx_set s;
  mx_make(&s);
  char *text = render(s.m);
  dump_on_mismatch(text, golden);
  free(text);
  mx_free(&s);
}

/* Pulls the value of the sample line starting with `series` + ' '. */
static double value_of(const char *text, const char *series) {
  size_t n = strlen(series);
  for (const char *p = text; (p = strstr(p, series)) != NULL; p++) {
    if ((p == text || p[-1] == '\n') && p[n] == ' ') return strtod(p + n + 1, NULL);
  }
  fail_msg("no sample %s", series);
  return 0;
}

static void counters_never_go_down_between_renders(void **state) {
  (void)state;
  mx_set s;
  mx_make(&s);
  const char *series[] = {
      "resil_circuitbreaker_calls_total{name=\"payments\",kind=\"successful\"}",
      "resil_circuitbreaker_calls_total{name=\"payments\",kind=\"not_permitted\"}",
      "resil_retry_calls_total{name=\"payments_retry\",kind=\"successful_without_retry\"}",
      "resil_chain_call_attempts_total{name=\"checkout\"}",
      "resil_circuitbreaker_transitions_total{name=\"payments\"}"};
  double last[5] = {0};
  for (int round = 0; round < 6; round++) {
    char *text = render(s.m);
    for (int i = 0; i < 5; i++) {
      double v = value_of(text, series[i]);
      if (v < last[i]) fail_msg("%s went down: %g -> %g", series[i], last[i], v);
      last[i] = v;
    }
    free(text);
    resil_chain_run(s.ch, NULL, mx_ok, NULL);
    /* Open, reject, reset: the window restarts, the totals do not. */
    resil_breaker_transition(s.br, RESIL_BREAKER_FORCED_OPEN);
    resil_breaker_permit p;
    assert_int_equal(RESIL_DECISION_DENY, resil_breaker_try_acquire(s.br, &p));
    resil_breaker_reset(s.br);
  }
  assert_true(last[0] >= 7);  /* 2 + 5 chain calls recorded before the last render */
  assert_true(last[1] >= 5);
  assert_true(last[3] >= 7);
  mx_free(&s);
}

static void too_small_buffer_reports_the_size_needed(void **state) {
  (void)state;
  mx_set s;
  mx_make(&s);
  size_t need = 0;
  assert_status(RESIL_OK, resil_metrics_render(s.m, NULL, 0, &need));
  assert_true(need > 1000);
  char *buf = malloc(need + 1);
  size_t got = 0;
  memset(buf, 'x', need + 1);
  assert_status(RESIL_ENOMEM, resil_metrics_render(s.m, buf, need, &got));
  assert_int_equal(need, got);
  assert_string_equal("", buf); /* never a truncated exposition */
  assert_status(RESIL_ENOMEM, resil_metrics_render(s.m, buf, 1, &got));
  assert_int_equal(need, got);
  assert_status(RESIL_OK, resil_metrics_render(s.m, buf, need + 1, &got));
  assert_int_equal(need, strlen(buf));
  assert_status(RESIL_EINVAL, resil_metrics_render(s.m, NULL, 5, &got));
  assert_status(RESIL_EMISUSE, resil_metrics_render(NULL, buf, need + 1, &got));
  free(buf);
  /* The allocating and fd forms give the same text. */
  char *a = NULL;
  size_t alen = 0;
  assert_status(RESIL_OK, resil_metrics_render_alloc(s.m, &a, &alen));
  assert_int_equal(need, alen);
  char path[] = "/tmp/resil_metrics_XXXXXX";
  int fd = mkstemp(path);
  assert_true(fd >= 0);
  assert_status(RESIL_OK, resil_metrics_write_fd(s.m, fd));
  assert_status(RESIL_EINVAL, resil_metrics_write_fd(s.m, -1));
  off_t size = lseek(fd, 0, SEEK_END);
  assert_int_equal(need, (size_t)size);
  char *back = malloc(need + 1);
  assert_int_equal((ssize_t)need, pread(fd, back, need, 0));
  back[need] = '\0';
  assert_string_equal(a, back);
  close(fd);
  unlink(path);
  free(back);
  resil_metrics_text_free(s.m, a);
  mx_free(&s);
}

static void label_values_are_escaped(void **state) {
  (void)state;
  resil_breaker_config bc;
  resil_breaker_config_init(&bc);
  resil_breaker *br = NULL;
  assert_status(RESIL_OK, resil_breaker_new(&bc, &br, NULL));
  resil_metrics *m = NULL;
  assert_status(RESIL_OK, resil_metrics_new(NULL, &m));
  assert_status(RESIL_OK, resil_metrics_add_breaker(m, "a\"b\\c\nd", br));
  /* The same name twice for one kind would duplicate series. */
  assert_status(RESIL_EINVAL, resil_metrics_add_breaker(m, "a\"b\\c\nd", br));
  assert_status(RESIL_EINVAL, resil_metrics_add_breaker(m, "bad\xff", br));
  assert_status(RESIL_EINVAL, resil_metrics_add_breaker(m, "", br));
  assert_status(RESIL_EINVAL, resil_metrics_add_breaker(m, "x", NULL));
  assert_status(RESIL_EMISUSE, resil_metrics_add_breaker(NULL, "x", br));
  char *text = render(m);
  assert_non_null(strstr(text,
      "resil_circuitbreaker_state{name=\"a\\\"b\\\\c\\nd\",state=\"closed\"} 1\n"));
  /* A fresh breaker has no rates yet: NaN, not a made-up 0 or -1. */
  assert_non_null(strstr(text,
      "resil_circuitbreaker_failure_rate{name=\"a\\\"b\\\\c\\nd\"} NaN\n"));
  /* No raw newline inside a sample line: every line starts a known way. */
  for (const char *p = text; *p; p = strchr(p, '\n') + 1)
    assert_true(strncmp(p, "# ", 2) == 0 || strncmp(p, "resil_", 6) == 0);
  free(text);
  assert_int_equal(1, resil_metrics_count(m));
  assert_status(RESIL_OK, resil_metrics_remove(m, br));
  assert_status(RESIL_EINVAL, resil_metrics_remove(m, br));
  assert_int_equal(0, resil_metrics_count(m));
  size_t len = 99;
  assert_status(RESIL_OK, resil_metrics_render(m, NULL, 0, &len));
  assert_int_equal(0, len);
  resil_metrics_free(m);
  resil_breaker_free(br);
}

/* A source of the application's own: samples with extra labels, escaping
 * of HELP, and the checks on the family table. */
typedef struct app_snap {
  double v;
} app_snap;
static resil_status app_snapshot(const void *obj, void *snap) {
  ((app_snap *)snap)->v = *(const double *)obj;
  return RESIL_OK;
}
static void app_emit(const void *snap, size_t f, resil_metrics_emitter *e) {
  const app_snap *s = snap;
  const char *l[] = {"zone", "eu\"1", "tier", "gold"};
  if (f == 0) resil_metrics_sample(e, s->v, 2, l);
  const char *bad[] = {"name", "dup"}; /* "name" is the collector's */
  if (f == 0) resil_metrics_sample(e, 1, 1, bad);
  const char *bad2[] = {"9x", "v"};
  if (f == 0) resil_metrics_sample(e, 1, 1, bad2);
  if (f == 1) resil_metrics_sample(e, 0.25, 0, NULL);
}

static void source_interface_writes_help_type_and_labels(void **state) {
  (void)state;
  static const resil_metric_family fams[] = {
      {"app_jobs_total", RESIL_METRIC_COUNTER, "Jobs \\ done\nby zone."},
      {"app_load", RESIL_METRIC_GAUGE, "Load."}};
  static const resil_metrics_source src = {sizeof(resil_metrics_source), fams, 2,
                                           sizeof(app_snap), app_snapshot, app_emit};
  static const resil_metric_family badfam[] = {{"app_jobs", RESIL_METRIC_COUNTER, "x"}};
  static const resil_metrics_source bad = {sizeof(resil_metrics_source), badfam, 1,
                                           sizeof(app_snap), app_snapshot, app_emit};
  double v = 12;
  resil_metrics *m = NULL;
  assert_status(RESIL_OK, resil_metrics_new(NULL, &m));
  assert_status(RESIL_OK, resil_metrics_add_source(m, "w1", &src, &v));
  assert_status(RESIL_EINVAL, resil_metrics_add_source(m, "w2", &bad, &v));
  assert_status(RESIL_EINVAL, resil_metrics_add_source(m, NULL, &src, &v));
  char *text = render(m);
  assert_string_equal(
      "# HELP app_jobs_total Jobs \\\\ done\\nby zone.\n"
      "# TYPE app_jobs_total counter\n"
      "app_jobs_total{name=\"w1\",zone=\"eu\\\"1\",tier=\"gold\"} 12\n"
      "# HELP app_load Load.\n"
      "# TYPE app_load gauge\n"
      "app_load{name=\"w1\"} 0.25\n",
      text);
  free(text);
  resil_metrics_free(m);
}

/* `promtool check metrics` on the exposition of every core kind
 * (mx_promtool_check, metrics_common.h; test_metrics_io_mt adds the HTTP
 * client, the store and the idempotency helper). */
static void promtool_accepts_the_exposition(void **state) {
  (void)state;
  mx_set s;
  mx_make(&s);
  mx_promtool_check(s.m);
  mx_free(&s);
}

/* Since 0.2 (DESIGN §2.9): during a breaker's ramp after recovery the
 * ramp ratio gauge is the share admitted now and the ramp's refusals are
 * kind "ramp_rejected"; a retry and a hedge watching it count what they
 * did not send (reason "recovering", kind "refused_recovering"); promtool
 * accepts the exposition. On the manual clock: a 1 s linear ramp from
 * 10 %, 250 ms in (share 0.25), 100 decisions (25 admitted). */
static resil_outcome mx_503(void *arg, const resil_ctx *ctx) {
  (void)arg, (void)ctx;
  return resil_outcome_http(503);
}

static void ramp_and_recovery_figures(void **state) {
  (void)state;
  resil_manual_clock *mc = NULL;
  assert_status(RESIL_OK, resil_manual_clock_new(0, 0, &mc));
  const resil_clock *clk = resil_manual_clock_get(mc);
  resil_breaker_config bc;
  resil_breaker_config_init(&bc);
  bc.name = "ramped";
  bc.window_size = 4;
  bc.minimum_calls = 2;
  bc.open_wait_ns = RESIL_MS(100);
  bc.half_open_permitted_calls = 1;
  bc.clock = clk;
  bc.ramp_duration_ns = RESIL_MS(1000);
  resil_breaker *br = NULL;
  assert_status(RESIL_OK, resil_breaker_new(&bc, &br, NULL));
  resil_retry_config rc;
  resil_retry_config_init(&rc);
  rc.name = "ramped_retry";
  rc.max_attempts = 3;
  rc.wait_ns = 0;
  rc.clock = clk;
  rc.recovery_breaker = br;
  resil_retry *rt = NULL;
  assert_status(RESIL_OK, resil_retry_new(&rc, &rt, NULL));
  resil_hedge_config hc;
  resil_hedge_config_init(&hc);
  hc.name = "ramped_hedge";
  hc.delay_ns = RESIL_MS(5);
  hc.clock = clk;
  hc.recovery_breaker = br;
  resil_hedge *hg = NULL;
  assert_status(RESIL_OK, resil_hedge_new(&hc, &hg, NULL));
  resil_metrics *m = NULL;
  assert_status(RESIL_OK, resil_metrics_new(NULL, &m));
  assert_status(RESIL_OK, resil_metrics_add_breaker(m, NULL, br));
  assert_status(RESIL_OK, resil_metrics_add_retry(m, NULL, rt));
  assert_status(RESIL_OK, resil_metrics_add_hedge(m, NULL, hg));

  /* open, wait, one healthy probe: CLOSED and ramping */
  resil_breaker_permit p;
  for (int i = 0; i < 2; i++) {
    assert_int_equal(RESIL_DECISION_GO, resil_breaker_try_acquire(br, &p));
    resil_outcome o = resil_outcome_http(503);
    assert_status(RESIL_OK, resil_breaker_record(br, &p, &o, 0));
  }
  resil_manual_clock_advance_ns(mc, RESIL_MS(100));
  assert_int_equal(RESIL_DECISION_GO, resil_breaker_try_acquire(br, &p));
  resil_outcome ok = resil_outcome_ok();
  assert_status(RESIL_OK, resil_breaker_record(br, &p, &ok, 0));
  resil_manual_clock_advance_ns(mc, RESIL_MS(250));
  int admitted = 0;
  for (int i = 0; i < 100; i++)
    if (resil_breaker_try_acquire(br, &p) == RESIL_DECISION_GO) {
      admitted++;
      assert_status(RESIL_OK, resil_breaker_record(br, &p, &ok, 0));
    }
  /* a retry due while ramping is not made; a hedge due is not sent */
  resil_ctx ctx;
  resil_ctx_init(&ctx);
  ctx.flags = RESIL_CALL_IDEMPOTENT;
  resil_outcome o = resil_retry_run(rt, &ctx, mx_503, NULL);
  assert_int_equal(o.stop, RESIL_STOP_RECOVERING);
  resil_hedge_call call;
  int64_t delay = 0;
  assert_int_equal(resil_hedge_begin(hg, &ctx, &call, &delay), RESIL_DECISION_WAIT);
  assert_int_equal(resil_hedge_on_timer(hg, &call, &delay), RESIL_DECISION_DENY);

  char *text = render(m);
  assert_true(fabs(value_of(text, "resil_circuitbreaker_ramp_ratio{name=\"ramped\"}") - 0.25) <
              1e-9);
  assert_true(value_of(text, "resil_circuitbreaker_calls_total{name=\"ramped\",kind="
                             "\"ramp_rejected\"}") == (double)(100 - admitted));
  assert_true(admitted >= 24 && admitted <= 26);
  /* not counted as refusals of an OPEN breaker */
  assert_true(value_of(text, "resil_circuitbreaker_calls_total{name=\"ramped\",kind="
                             "\"not_permitted\"}") == 0);
  assert_true(value_of(text, "resil_retry_refused_attempts_total{name=\"ramped_retry\","
                             "reason=\"recovering\"}") == 1);
  assert_true(value_of(text, "resil_hedge_hedges_total{name=\"ramped_hedge\",kind="
                             "\"refused_recovering\"}") == 1);
  free(text);
  mx_promtool_check(m);
  /* the ramp over: the ratio is 1 again */
  resil_manual_clock_advance_ns(mc, RESIL_MS(750));
  text = render(m);
  assert_true(value_of(text, "resil_circuitbreaker_ramp_ratio{name=\"ramped\"}") == 1.0);
  free(text);
  resil_metrics_free(m);
  resil_hedge_free(hg);
  resil_retry_free(rt);
  resil_breaker_free(br);
  resil_manual_clock_free(mc);
}

/* Since 0.2: the chain's layer accessors the chain metrics label with. */
static void chain_layer_accessors(void **state) {
  (void)state;
  mx_set s;
  mx_make(&s);
  assert_string_equal("Retry", resil_chain_layer_label(s.ch, 0));
  assert_string_equal("payments_retry", resil_chain_layer_name(s.ch, 0));
  assert_int_equal(RESIL_LAYER_RETRY, resil_chain_layer_kind(s.ch, 0));
  assert_string_equal("Breaker", resil_chain_layer_label(s.ch, 1));
  assert_string_equal("payments", resil_chain_layer_name(s.ch, 1));
  assert_int_equal(RESIL_LAYER_BREAKER, resil_chain_layer_kind(s.ch, 1));
  assert_null(resil_chain_layer_label(s.ch, 2));
  assert_null(resil_chain_layer_name(NULL, 0));
  assert_int_equal(-1, resil_chain_layer_kind(s.ch, 2));
  assert_int_equal(-1, resil_chain_layer_kind(NULL, 0));
  mx_free(&s);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(exposition_of_every_kind_is_exact),
      cmocka_unit_test(counters_never_go_down_between_renders),
      cmocka_unit_test(too_small_buffer_reports_the_size_needed),
      cmocka_unit_test(label_values_are_escaped),
      cmocka_unit_test(source_interface_writes_help_type_and_labels),
      cmocka_unit_test(promtool_accepts_the_exposition),
      cmocka_unit_test(chain_layer_accessors),
      cmocka_unit_test(ramp_and_recovery_figures),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
