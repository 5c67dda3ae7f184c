/* libresil-redis on the async engine (DESIGN §8.2's engine path, issue 21):
 * engine calls on the fixture upstream (127.0.0.1) through a rate limiter
 * kept in a redis-server of the test's own. A decision never blocks the
 * loop: the engine asks the limiter asynchronously, the decisions of a
 * loop iteration are pipelined on the loop's one connection (EVALSHA
 * written back to back, replies matched in order), and each is bounded by
 * the Redis timeout, after which the failure policy answers it.
 *
 * Cases: 1,000 calls in flight are exact (admitted <= the GCRA bound) and
 * pipelined (fewer writes than decisions), with the decisions' rate and
 * latency printed; Redis frozen (SIGSTOP): each of 1,000 decisions ends
 * within the 20 ms Redis timeout + slack by the failure policy, the late
 * replies are discarded after SIGCONT and Redis decides again; SCRIPT
 * FLUSH between two batches costs one SCRIPT LOAD and no failed decision;
 * Redis restarted between two batches costs no failed decision; calls
 * whose deadline ends first withdraw their decisions, and a limiter freed
 * before the engine. On the test adapter, resil_loop and libuv. */
#include "test_engine_common.h"
#include "test_redis_common.h"

#include "resil/metrics.h"
#include "resil/ratelimit.h"

static const resil_http_endpoint eps[] = {
    {.struct_size = sizeof(resil_http_endpoint), .name = "item", .path = "/items/{id}"},
};
#define NEPS (sizeof eps / sizeof eps[0])

enum { N = 1000 };

/* Slack on the frozen-Redis bound: the loop's own work for 1,000 calls on
 * two shared cores, more under the sanitizers. */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define BOUND_SLACK_NS RESIL_MS(60)
#else
#define BOUND_SLACK_NS RESIL_MS(20)
#endif

/* Each call's completion, with its time (ns) and outcome. */
typedef struct rec {
  atomic_size_t done;
  pthread_t loop_thread;
  size_t wrong_thread;
  int64_t sub_ns[N], done_ns[N];
  resil_outcome o[N];
  int status[N];
  unsigned char count[N];
  size_t tag[N];
} rec;

static rec R;

static void rec_done(void *user, resil_engine_handle *h, resil_outcome o, resil_http_response *r) {
  (void)h;
  size_t i = *(size_t *)user;
  if (!pthread_equal(pthread_self(), R.loop_thread)) R.wrong_thread++;
  R.count[i]++;
  R.o[i] = o;
  R.status[i] = r ? resil_http_response_status(r) : -1;
  R.done_ns[i] = mono_ns();
  resil_http_response_free(r);
  atomic_fetch_add(&R.done, 1);
}

static void rec_reset(void) {
  memset(&R, 0, sizeof R);
  R.loop_thread = pthread_self();
}

static void submit_ctx(resil_engine *e, const resil_engine_policies *pol, size_t from, size_t to,
                       const resil_ctx *ctx) {
  resil_http_param p = {.name = "id", .value = "1"};
  resil_http_args args;
  resil_http_args_init(&args);
  args.params = &p;
  args.param_count = 1;
  for (size_t i = from; i < to; i++) {
    R.tag[i] = i;
    R.sub_ns[i] = mono_ns();
    resil_error err;
    if (resil_engine_call(e, "item", &args, pol, ctx, rec_done, &R.tag[i], NULL, &err) !=
        RESIL_OK)
      fail_msg("submit: %s", err.msg);
  }
}

static void submit_range(resil_engine *e, const resil_engine_policies *pol, size_t from,
                         size_t to) {
  submit_ctx(e, pol, from, to, NULL);
}

static void run_until_done(te_env *t, size_t want) {
  if (!tl_run_until(&t->l, &R.done, want, 60000))
    fail_msg("%zu of %zu calls done after 60 s", atomic_load(&R.done), want);
}

static resil_ratelimiter *limiter(const redis_srv *s, const char *name, int64_t limit,
                                  int64_t period_ns, int64_t redis_timeout_ns,
                                  resil_redis_failure failure, int breaker_never_opens) {
  resil_redis_ratelimiter_config cfg;
  resil_redis_ratelimiter_config_init(&cfg);
  cfg.uri = s->uri;
  cfg.name = name;
  cfg.limit_for_period = limit;
  cfg.refresh_period_ns = period_ns;
  cfg.timeout_ns = 0; /* fail fast: GO or DENY, no reservation */
  cfg.failure = failure;
  cfg.redis_timeout_ns = redis_timeout_ns;
  resil_breaker_config bc;
  if (breaker_never_opens) {
    resil_breaker_config_init(&bc);
    bc.window_size = 100000;
    bc.minimum_calls = 100000;
    cfg.breaker = &bc;
  }
  resil_ratelimiter *rl = NULL;
  resil_error err;
  if (resil_redis_ratelimiter_new(&cfg, &rl, &err) != RESIL_OK) fail_msg("%s", err.msg);
  return rl;
}

static int cmp64(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return x < y ? -1 : x > y;
}

/* 1,000 calls in flight, one limiter of 200 per second: the admitted are
 * within the GCRA bound (burst + elapsed / T), the decisions pipelined. */
static void thousand_calls_in_flight_are_exact_and_pipelined(void **state) {
  fx_state *fs = *state;
  redis_srv s;
  redis_start(&s);
  /* A Redis timeout of 1 s: this case tests what Redis decides (a
   * sanitizer build on a loaded machine may exceed 20 ms). */
  resil_ratelimiter *rl = limiter(&s, "exact", 200, RESIL_S(1), RESIL_S(1),
                                  RESIL_REDIS_FAILURE_CLOSED, 0);
  te_env *t = te_open(fs->f, eps, NEPS, NULL, NULL);
  resil_engine_policies pol;
  resil_engine_policies_init(&pol);
  pol.ratelimiter = rl;
  rec_reset();
  int64_t t0 = mono_ns();
  submit_range(t->e, &pol, 0, N);
  /* The decisions first: their rate, without the admitted calls' HTTP. */
  int64_t end = mono_ns() + RESIL_S(60);
  while (redis_metrics(rl).redis_decisions < N && mono_ns() < end) tl_run_once(&t->l, 10);
  int64_t decided = mono_ns();
  run_until_done(t, N);
  int64_t t1 = mono_ns();
  size_t admitted = 0, limited = 0;
  for (size_t i = 0; i < N; i++) {
    assert_int_equal(R.count[i], 1);
    if (R.status[i] == 200) admitted++;
    else if (R.o[i].kind == RESIL_REJECTED && R.o[i].reason == RESIL_REASON_RATE_LIMITED)
      limited++;
  }
  resil_redis_ratelimiter_metrics m = redis_metrics(rl);
  /* GCRA: at most burst + L / T over the run's length L (T = 5 ms). */
  size_t bound = 200 + (size_t)((t1 - t0) / RESIL_MS(5)) + 1;
  print_message("%zu admitted, %zu rate-limited (bound %zu); %llu decisions by Redis in "
                "%.1f ms (%.0f decisions/s), %llu writes (%.3f per decision), %llu connects\n",
                admitted, limited, bound, (unsigned long long)m.redis_decisions,
                (double)(decided - t0) / 1e6, (double)N * 1e9 / (double)(decided - t0),
                (unsigned long long)m.writes, (double)m.writes / (double)m.redis_decisions,
                (unsigned long long)m.connects);
  assert_true(admitted >= 200);
  assert_true(admitted <= bound);
  assert_int_equal(admitted + limited, N);
  assert_int_equal(m.redis_decisions, N);
  assert_int_equal(m.redis_errors, 0);
  assert_int_equal(m.fallback_closed, 0);
  assert_int_equal(m.connects, 1);
  /* Pipelined: far fewer writes than decisions. */
  assert_true(m.writes > 0);
  assert_true(m.writes * 10 <= m.redis_decisions);
  /* The collector shows the writes. */
  resil_metrics *mc;
  assert_status(RESIL_OK, resil_metrics_new(NULL, &mc));
  assert_status(RESIL_OK, resil_redis_ratelimiter_metrics_add(mc, NULL, rl));
  char *text = NULL, want[96];
  assert_status(RESIL_OK, resil_metrics_render_alloc(mc, &text, NULL));
  snprintf(want, sizeof want, "resil_redis_ratelimiter_writes_total{name=\"exact\"} %llu\n",
           (unsigned long long)m.writes);
  if (!strstr(text, want)) fail_msg("missing %s in:\n%s", want, text);
  resil_metrics_text_free(mc, text);
  resil_metrics_free(mc);
  resil_ratelimiter_metrics lm;
  assert_status(RESIL_OK, resil_ratelimiter_get_metrics(rl, &lm));
  assert_int_equal(lm.permitted, admitted);
  assert_int_equal(lm.refused, limited);
  assert_int_equal(R.wrong_thread, 0);
  te_close(t);
  resil_ratelimiter_free(rl);
  redis_stop(&s);
}

/* The decisions' latency with 1,000 in flight: a limiter of one permit per
 * hour refuses 999 calls, each done when its decision is. */
static void decision_latency_with_a_thousand_in_flight(void **state) {
  fx_state *fs = *state;
  redis_srv s;
  redis_start(&s);
  resil_ratelimiter *rl = limiter(&s, "latency", 1, RESIL_S(3600), RESIL_S(1),
                                  RESIL_REDIS_FAILURE_CLOSED, 0);
  te_env *t = te_open(fs->f, eps, NEPS, NULL, NULL);
  resil_engine_policies pol;
  resil_engine_policies_init(&pol);
  pol.ratelimiter = rl;
  for (int round = 0; round < 2; round++) { /* the first connects */
    rec_reset();
    submit_range(t->e, &pol, 0, N);
    run_until_done(t, N);
  }
  static int64_t lat[N];
  size_t n = 0;
  int64_t first = INT64_MAX, last = 0;
  for (size_t i = 0; i < N; i++) {
    if (R.status[i] == 200) continue;
    assert_int_equal(R.o[i].reason, RESIL_REASON_RATE_LIMITED);
    lat[n++] = R.done_ns[i] - R.sub_ns[i];
    if (R.sub_ns[i] < first) first = R.sub_ns[i];
    if (R.done_ns[i] > last) last = R.done_ns[i];
  }
  assert_int_equal(n, N);
  qsort(lat, n, sizeof lat[0], cmp64);
  resil_redis_ratelimiter_metrics m = redis_metrics(rl);
  print_message("1,000 decisions in flight: p50 %.2f ms, p99 %.2f ms, max %.2f ms (from "
                "submit, the engine's start included); all in %.1f ms (%.0f decisions/s); "
                "%llu writes for %llu decisions\n",
                (double)lat[n / 2] / 1e6, (double)lat[n * 99 / 100] / 1e6,
                (double)lat[n - 1] / 1e6, (double)(last - first) / 1e6,
                (double)n * 1e9 / (double)(last - first), (unsigned long long)m.writes,
                (unsigned long long)m.redis_decisions);
  assert_int_equal(m.redis_decisions, 2 * N);
  assert_int_equal(m.redis_errors, 0);
  te_close(t);
  resil_ratelimiter_free(rl);
  redis_stop(&s);
}

/* A timer of another adapter on the same resil_loop, every 1 ms: how late
 * it fires says how long the loop was held. */
typedef struct tick {
  resil_loop_adapter *ad;
  int64_t due, worst;
  size_t n;
} tick;

static __attribute__((unused)) void on_tick(void *arg) {
  tick *k = arg;
  int64_t now = mono_ns();
  if (now - k->due > k->worst) k->worst = now - k->due;
  k->n++;
  k->due = now + RESIL_MS(1);
  k->ad->timer(k->ad->self, RESIL_MS(1), on_tick, k);
}

/* Redis frozen (SIGSTOP) with a Redis timeout of 20 ms: each of 1,000
 * decisions is answered by the failure policy (CLOSED: refused, unavailable)
 * within 20 ms + slack of its submission, all at once (a loop blocked on
 * one would take 1,000 x 20 ms); after SIGCONT the late replies are
 * discarded and Redis decides the next calls. The breaker never opens here
 * (every decision goes to Redis and waits for its bound). On resil_loop,
 * another adapter's 1 ms timer fires meanwhile, never held for a Redis
 * timeout. */
static void frozen_redis_each_decision_ends_within_the_bound(void **state) {
  fx_state *fs = *state;
  redis_srv s;
  redis_start(&s);
  resil_ratelimiter *rl = limiter(&s, "frozen", 100000, RESIL_S(1), RESIL_MS(20),
                                  RESIL_REDIS_FAILURE_CLOSED, 1);
  te_env *t = te_open(fs->f, eps, NEPS, NULL, NULL);
  resil_engine_policies pol;
  resil_engine_policies_init(&pol);
  pol.ratelimiter = rl;
  /* Connected first (the decisions then go to a live connection). */
  rec_reset();
  submit_range(t->e, &pol, 0, 1);
  run_until_done(t, 1);
  assert_int_equal(R.status[0], 200);

  tick k = {0};
  (void)k;
#ifdef RESIL_HAVE_LOOP
  if (t->l.rl) {
    assert_status(RESIL_OK, resil_loop_adapter_new(t->l.rl, &k.ad));
    k.due = mono_ns() + RESIL_MS(1);
    assert_int_equal(k.ad->timer(k.ad->self, RESIL_MS(1), on_tick, &k), 0);
  }
#endif
  redis_freeze(&s);
  rec_reset();
  submit_range(t->e, &pol, 0, N);
  run_until_done(t, N);
#ifdef RESIL_HAVE_LOOP
  if (k.ad) {
    print_message("another adapter's 1 ms timer: %zu ticks, the latest %.2f ms late\n", k.n,
                  (double)k.worst / 1e6);
    assert_true(k.n > 0);
    assert_true(k.worst <= BOUND_SLACK_NS);
    resil_loop_adapter_free(k.ad);
  }
#endif
  int64_t worst = 0;
  for (size_t i = 0; i < N; i++) {
    assert_int_equal(R.o[i].kind, RESIL_REJECTED);
    assert_int_equal(R.o[i].reason, RESIL_REASON_RATE_LIMITER_UNAVAILABLE);
    int64_t d = R.done_ns[i] - R.sub_ns[i];
    if (d > worst) worst = d;
  }
  resil_redis_ratelimiter_metrics m = redis_metrics(rl);
  print_message("Redis frozen: 1,000 decisions by the failure policy, the longest %.1f ms "
                "from submit (bound 20 ms + %.0f ms)\n",
                (double)worst / 1e6, (double)BOUND_SLACK_NS / 1e6);
  assert_true(worst <= RESIL_MS(20) + BOUND_SLACK_NS);
  assert_int_equal(m.fallback_closed, N);
  assert_int_equal(m.redis_errors, N);
  assert_int_equal(m.fallbacks_entered, 1);

  redis_thaw(&s);
  /* The late replies arrive and are discarded (Redis runs the 1,000
   * EVALSHAs it was sent first: given time, so that the next decisions'
   * 20 ms do not include them on a loaded machine); Redis decides again. */
  int64_t drain = mono_ns() + RESIL_MS(300);
  while (mono_ns() < drain) tl_run_once(&t->l, 10);
  rec_reset();
  submit_range(t->e, &pol, 0, 10);
  run_until_done(t, 10);
  for (size_t i = 0; i < 10; i++) assert_int_equal(R.status[i], 200);
  resil_redis_ratelimiter_metrics m2 = redis_metrics(rl);
  assert_int_equal(m2.redis_decisions, 1 + 10);
  assert_int_equal(m2.fallback_closed, N);
  assert_int_equal(m2.connects, 1);
  te_close(t);
  resil_ratelimiter_free(rl);
  redis_stop(&s);
}

/* 100 calls through a limiter on a fresh server, then `disrupt`, then 200
 * more: every call succeeds; the limiter's metrics after all 300. */
static resil_redis_ratelimiter_metrics run_disrupted(fx_state *fs, const char *name,
                                                     void (*disrupt)(redis_srv *)) {
  redis_srv s;
  redis_start(&s);
  resil_ratelimiter *rl = limiter(&s, name, 100000, RESIL_S(1), RESIL_S(1),
                                  RESIL_REDIS_FAILURE_CLOSED, 0);
  te_env *t = te_open(fs->f, eps, NEPS, NULL, NULL);
  resil_engine_policies pol;
  resil_engine_policies_init(&pol);
  pol.ratelimiter = rl;
  rec_reset();
  submit_range(t->e, &pol, 0, 100);
  run_until_done(t, 100);
  disrupt(&s);
  submit_range(t->e, &pol, 100, 300);
  run_until_done(t, 300);
  for (size_t i = 0; i < 300; i++) assert_int_equal(R.status[i], 200);
  resil_redis_ratelimiter_metrics m = redis_metrics(rl);
  print_message("%s mid-run: %llu reloads, %llu decisions by Redis, %llu errors, %llu connects\n",
                name, (unsigned long long)m.noscript_reloads,
                (unsigned long long)m.redis_decisions, (unsigned long long)m.redis_errors,
                (unsigned long long)m.connects);
  te_close(t);
  resil_ratelimiter_free(rl);
  redis_stop(&s);
  return m;
}

static void flush_scripts(redis_srv *s) { assert_true(redis_do(s, "SCRIPT FLUSH", NULL)); }

/* SCRIPT FLUSH between two batches: the second's pipelined EVALSHAs are
 * answered NOSCRIPT; one SCRIPT LOAD, each sent again, none fails. */
static void script_flush_mid_run_costs_one_load(void **state) {
  resil_redis_ratelimiter_metrics m = run_disrupted(*state, "noscript", flush_scripts);
  assert_int_equal(m.noscript_reloads, 1);
  assert_int_equal(m.redis_decisions, 300);
  assert_int_equal(m.redis_errors, 0);
  assert_int_equal(m.fallback_closed, 0);
}

/* Redis restarted between two batches (killed, a new empty one on the same
 * port): the decisions sent on the old connection are sent again once on a
 * new one, within their bound; none fails. */
static void redis_restarted_mid_run_costs_no_decision(void **state) {
  resil_redis_ratelimiter_metrics m = run_disrupted(*state, "restart", redis_restart);
  assert_int_equal(m.redis_decisions, 300);
  assert_int_equal(m.redis_errors, 0);
  assert_int_equal(m.fallback_closed, 0);
  assert_int_equal(m.connects, 2);
}

/* Calls whose deadline (5 ms) ends before Redis, frozen, answers: each
 * ends DEADLINE and withdraws its decision (its late reply discarded after
 * SIGCONT); then the limiter is freed before the engine: its connection on
 * the engine goes with the engine (ASan: nothing used after free, nothing
 * leaked). */
static void withdrawn_decisions_and_a_limiter_freed_before_the_engine(void **state) {
  fx_state *fs = *state;
  redis_srv s;
  redis_start(&s);
  resil_ratelimiter *rl = limiter(&s, "withdrawn", 100000, RESIL_S(1), RESIL_S(1),
                                  RESIL_REDIS_FAILURE_CLOSED, 1);
  te_env *t = te_open(fs->f, eps, NEPS, NULL, NULL);
  resil_engine_policies pol;
  resil_engine_policies_init(&pol);
  pol.ratelimiter = rl;
  rec_reset();
  submit_range(t->e, &pol, 0, 1);
  run_until_done(t, 1);
  assert_int_equal(R.status[0], 200);
  redis_freeze(&s);
  rec_reset();
  resil_ctx ctx;
  resil_ctx_init(&ctx);
  resil_ctx_set_timeout_ns(&ctx, RESIL_MS(5));
  submit_ctx(t->e, &pol, 0, 100, &ctx);
  run_until_done(t, 100);
  for (size_t i = 0; i < 100; i++) {
    assert_int_equal(R.o[i].kind, RESIL_REJECTED);
    assert_true(R.o[i].reason == RESIL_REASON_DEADLINE ||
                R.o[i].reason == RESIL_REASON_RATE_LIMITER_UNAVAILABLE);
  }
  redis_thaw(&s);
  resil_ratelimiter_free(rl); /* before the engine */
  int64_t end = mono_ns() + RESIL_MS(100);
  while (mono_ns() < end) tl_run_once(&t->l, 10); /* the late replies */
  te_close(t);
  redis_stop(&s);
}

static int teardown(void **state) {
  redis_teardown(state);
  return fx_teardown(state);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(thousand_calls_in_flight_are_exact_and_pipelined,
                                      fx_setup, teardown),
      cmocka_unit_test_setup_teardown(decision_latency_with_a_thousand_in_flight, fx_setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(frozen_redis_each_decision_ends_within_the_bound,
                                      fx_setup, teardown),
      cmocka_unit_test_setup_teardown(script_flush_mid_run_costs_one_load, fx_setup, teardown),
      cmocka_unit_test_setup_teardown(redis_restarted_mid_run_costs_no_decision, fx_setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(withdrawn_decisions_and_a_limiter_freed_before_the_engine,
                                      fx_setup, teardown),
  };
  int failed = cmocka_run_group_tests_name("Redis limiter on the engine, test adapter", tests,
                                           NULL, NULL);
#ifdef RESIL_HAVE_LOOP
  tl_use_builtin_loop = 1;
  failed += cmocka_run_group_tests_name("Redis limiter on the engine, resil_loop", tests, NULL,
                                        NULL);
  tl_use_builtin_loop = 0;
#endif
#ifdef RESIL_HAVE_UV
  tl_use_uv = 1;
  failed += cmocka_run_group_tests_name("Redis limiter on the engine, libuv (libresil-uv)",
                                        tests, NULL, NULL);
#endif
  return failed;
}
