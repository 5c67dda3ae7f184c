/* A hedge layer in a chain: describe shows it with its unit and worst
 * case, the amplification calculator includes hedges, per-layer counts
 * keep hedges apart from retries, and resil_chain_run passes calls through
 * it unhedged, as documented. */
#include <string.h>

#include "resil/chain.h"
#include "test_util.h"

#define AMP(a, w) {.struct_size = sizeof(resil_amp_layer), .max_attempts = (a), .wait_per_run_ns = (w)}
#define HEDGE_AMP(k, d)                                                        \
  {.struct_size = sizeof(resil_amp_layer), .max_attempts = 1, .hedges = (k),   \
   .hedge_delay_ns = (d)}

static resil_hedge *make_hedge(uint32_t max_hedges, int64_t delay_ns) {
  resil_hedge_config cfg;
  resil_hedge_config_init(&cfg);
  cfg.name = "h";
  cfg.max_hedges = max_hedges;
  cfg.delay_ns = delay_ns;
  resil_hedge *h = NULL;
  assert_status(RESIL_OK, resil_hedge_new(&cfg, &h, NULL));
  return h;
}

static resil_retry *make_retry(uint32_t attempts, int64_t wait_ns) {
  resil_retry_config c;
  resil_retry_config_init(&c);
  c.name = "r";
  c.max_attempts = attempts;
  c.wait_ns = wait_ns;
  c.respect_retry_after = 0;
  resil_retry *r = NULL;
  assert_status(RESIL_OK, resil_retry_new(&c, &r, NULL));
  return r;
}

static resil_chain *make_chain(int64_t deadline_ns) {
  resil_chain_config cc;
  resil_chain_config_init(&cc);
  cc.total_timeout_ns = deadline_ns;
  resil_chain *ch = NULL;
  assert_status(RESIL_OK, resil_chain_new(&cc, &ch, NULL));
  return ch;
}

static void assert_contains(const char *hay, const char *needle) {
  if (!strstr(hay, needle)) fail_msg("missing \"%s\" in:\n%s", needle, hay);
}

static void amplification_multiplies_attempts_by_hedges_and_adds_their_delay(
    void **state) {
  (void)state;
  /* Retry(2, 100 ms) > Hedge(2 hedges, 50 ms) > Retry(3, 150 ms), 500 ms
   * per attempt. */
  resil_amp_layer l[3] = {AMP(2, MS(100)), HEDGE_AMP(2, MS(50)), AMP(3, MS(150))};
  resil_amplification a;
  assert_status(RESIL_OK, resil_amplification_compute(l, 3, MS(500), &a));
  assert_int_equal(a.attempts, 2 * 3 * 3);
  assert_int_equal(a.serial_attempts, 2 * 3);
  /* Backoff: 100 once, 150 per serial run of the inner retry (2). */
  assert_int_equal(a.wait_ns, MS(100 + 2 * 150));
  /* Hedge delay: 2 hedges x 50 ms, per serial run of the hedge (2). */
  assert_int_equal(a.hedge_delay_ns, MS(2 * 2 * 50));
  assert_int_equal(a.time_ns, MS(6 * 500 + 400 + 200));
  /* A hedge alone: 1 + max_hedges attempts, time = one attempt + delays. */
  resil_amp_layer h1[1] = {HEDGE_AMP(1, MS(80))};
  assert_status(RESIL_OK, resil_amplification_compute(h1, 1, MS(500), &a));
  assert_int_equal(a.attempts, 2);
  assert_int_equal(a.serial_attempts, 1);
  assert_int_equal(a.time_ns, MS(580));
  /* A hedge layer with serial attempts, or too many hedges, is refused. */
  resil_amp_layer bad = HEDGE_AMP(2, MS(1));
  bad.max_attempts = 2;
  assert_status(RESIL_EINVAL, resil_amplification_compute(&bad, 1, 0, &a));
  resil_amp_layer many = HEDGE_AMP(RESIL_HEDGE_MAX_HEDGES + 1, MS(1));
  assert_status(RESIL_EINVAL, resil_amplification_compute(&many, 1, 0, &a));
  resil_amp_layer neg = HEDGE_AMP(1, -1);
  assert_status(RESIL_EINVAL, resil_amplification_compute(&neg, 1, 0, &a));
}

static void describe_shows_the_hedge_layer_its_unit_and_worst_case(void **state) {
  (void)state;
  resil_retry *r = make_retry(3, MS(500));
  resil_hedge *h = make_hedge(2, MS(50));
  resil_timelimiter_config tc;
  resil_timelimiter_config_init(&tc);
  tc.timeout_ns = MS(1000);
  resil_timelimiter *tl = NULL;
  assert_status(RESIL_OK, resil_timelimiter_new(&tc, &tl, NULL));
  resil_chain *ch = make_chain(MS(10000));
  assert_status(RESIL_OK, resil_chain_add_retry(ch, r));
  assert_status(RESIL_OK, resil_chain_add_hedge(ch, h));
  assert_status(RESIL_OK, resil_chain_add_timelimiter(ch, tl));
  char buf[4096];
  size_t need = resil_chain_describe(ch, buf, sizeof buf);
  assert_true(need < sizeof buf);
  assert_contains(buf, "Retry(Hedge(TimeLimiter(call)))\n");
  assert_contains(buf, "2 Hedge \"h\": observes attempts of the retry outside it; sends up "
                       "to 1 + max_hedges attempts in parallel for each; up to 2 hedges, "
                       "each after at most 50 ms; worst case 3 attempts per call (all "
                       "may be in flight at once), the last sent 100 ms after the first\n");
  assert_contains(buf, "3 TimeLimiter \"timelimiter\": observes physical attempts (every "
                       "retry attempt and every hedge passes here)");
  assert_contains(buf, "note: hedge \"h\" hedges only calls whose ctx flags carry "
                       "RESIL_CALL_IDEMPOTENT or RESIL_CALL_STABLE_KEY");
  assert_contains(buf, "note: hedge \"h\": resil_chain_run passes calls through it "
                       "unhedged, one attempt (it has no executor); hedging runs on the "
                       "async engine");
  assert_contains(buf, "warning: retries and hedges multiply: up to 9 physical attempts "
                       "per logical call");
  assert_int_equal(resil_chain_warnings(ch), 1);
  resil_amplification a;
  assert_status(RESIL_OK, resil_chain_amplification(ch, &a));
  assert_int_equal(a.attempts, 9);
  assert_int_equal(a.serial_attempts, 3);
  assert_int_equal(a.wait_ns, MS(1000));
  assert_int_equal(a.hedge_delay_ns, MS(3 * 2 * 50));
  assert_int_equal(a.time_ns, MS(3 * 1000 + 1000 + 300));
  resil_chain_free(ch);

  /* A hedge alone, outermost: logical calls, and no multiplication trap. */
  ch = make_chain(MS(10000));
  assert_status(RESIL_OK, resil_chain_add_hedge(ch, h));
  assert_status(RESIL_OK, resil_chain_add_timelimiter(ch, tl));
  resil_chain_describe(ch, buf, sizeof buf);
  assert_contains(buf, "Hedge(TimeLimiter(call))\n");
  assert_contains(buf, "1 Hedge \"h\": observes logical calls; sends up to 1 + "
                       "max_hedges attempts in parallel");
  assert_contains(buf, "observes physical attempts (the primary and every hedge pass here)");
  assert_null(strstr(buf, "warning"));
  assert_int_equal(resil_chain_warnings(ch), 0);
  assert_status(RESIL_OK, resil_chain_amplification(ch, &a));
  assert_int_equal(a.attempts, 3);
  assert_int_equal(a.time_ns, MS(1000 + 100));
  resil_chain_free(ch);
  resil_timelimiter_free(tl);
  resil_hedge_free(h);
  resil_retry_free(r);
}

typedef struct script {
  int calls;
  int fail_first;
} script;

static resil_outcome scripted(void *arg, const resil_ctx *ctx) {
  (void)ctx;
  script *s = arg;
  s->calls++;
  return s->calls <= s->fail_first ? resil_outcome_http(503) : resil_outcome_ok();
}

static void chain_run_passes_hedge_through_and_counts_hedges_apart_from_retries(
    void **state) {
  (void)state;
  resil_retry *r = make_retry(3, 0);
  resil_hedge *h = make_hedge(2, MS(50));
  resil_chain *ch = make_chain(0);
  assert_status(RESIL_OK, resil_chain_add_retry(ch, r));
  assert_status(RESIL_OK, resil_chain_add_hedge(ch, h));
  resil_ctx ctx;
  resil_ctx_init(&ctx);
  ctx.flags = RESIL_CALL_IDEMPOTENT;
  script s = {0, 2};
  resil_outcome o = resil_chain_run(ch, &ctx, scripted, &s);
  assert_true(resil_outcome_is_success(&o));
  assert_int_equal(s.calls, 3); /* one attempt per retry attempt: no hedge */
  resil_layer_stats rs, hs, cs;
  assert_status(RESIL_OK, resil_chain_layer_stats(ch, 0, &rs));
  assert_status(RESIL_OK, resil_chain_layer_stats(ch, 1, &hs));
  assert_status(RESIL_OK, resil_chain_call_stats(ch, &cs));
  assert_int_equal(rs.calls_in, 1);
  assert_int_equal(rs.attempts_out, 3);
  assert_int_equal(rs.retries, 2);
  assert_int_equal(rs.hedges, 0);
  assert_int_equal(hs.calls_in, 3);
  assert_int_equal(hs.attempts_out, 3);
  assert_int_equal(hs.unhedged, 3);
  assert_int_equal(hs.hedges, 0);
  assert_int_equal(hs.retries, 0);
  assert_int_equal(cs.calls_in, 3);
  resil_hedge_metrics m;
  assert_status(RESIL_OK, resil_hedge_get_metrics(h, &m));
  assert_int_equal(m.passed_blocking, 3);
  assert_int_equal(m.hedges_sent, 0);
  /* A driver of the split form adds the hedges it sent. */
  assert_status(RESIL_OK, resil_chain_count_hedges(ch, 1, 2));
  assert_status(RESIL_OK, resil_chain_layer_stats(ch, 1, &hs));
  assert_int_equal(hs.hedges, 2);
  assert_status(RESIL_EINVAL, resil_chain_count_hedges(ch, 0, 1)); /* a retry */
  assert_status(RESIL_EINVAL, resil_chain_count_hedges(ch, 2, 1));
  assert_status(RESIL_EMISUSE, resil_chain_count_hedges(NULL, 1, 1));
  resil_chain_free(ch);
  resil_hedge_free(h);
  resil_retry_free(r);
}

static resil_outcome pass_run(void *policy, const resil_ctx *ctx, resil_call_fn fn,
                              void *arg) {
  (void)policy;
  return fn(arg, ctx);
}

static void custom_hedge_layers_need_a_hedge_count(void **state) {
  (void)state;
  resil_chain *ch = make_chain(0);
  int dummy = 0;
  resil_layer l = {.struct_size = sizeof l, .kind = RESIL_LAYER_HEDGE, .policy = &dummy,
                   .run = pass_run};
  assert_status(RESIL_EINVAL, resil_chain_add_layer(ch, &l));
  l.max_hedges = RESIL_HEDGE_MAX_HEDGES + 1;
  assert_status(RESIL_EINVAL, resil_chain_add_layer(ch, &l));
  l.max_hedges = 1;
  l.hedge_delay_ns = -1;
  assert_status(RESIL_EINVAL, resil_chain_add_layer(ch, &l));
  l.hedge_delay_ns = MS(20);
  assert_status(RESIL_OK, resil_chain_add_layer(ch, &l));
  char nest[64];
  resil_chain_nesting(ch, nest, sizeof nest);
  assert_string_equal(nest, "Hedge(call)");
  resil_amplification a;
  assert_status(RESIL_OK, resil_chain_amplification(ch, &a));
  assert_int_equal(a.attempts, 2);
  assert_int_equal(a.hedge_delay_ns, MS(20));
  /* Hedge fields on other kinds are ignored. */
  resil_layer b = {.struct_size = sizeof b, .kind = RESIL_LAYER_BREAKER, .policy = &dummy,
                   .run = pass_run, .max_hedges = 5, .hedge_delay_ns = MS(1)};
  assert_status(RESIL_OK, resil_chain_add_layer(ch, &b));
  assert_status(RESIL_OK, resil_chain_amplification(ch, &a));
  assert_int_equal(a.attempts, 2);
  resil_chain_free(ch);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(amplification_multiplies_attempts_by_hedges_and_adds_their_delay),
      cmocka_unit_test(describe_shows_the_hedge_layer_its_unit_and_worst_case),
      cmocka_unit_test(chain_run_passes_hedge_through_and_counts_hedges_apart_from_retries),
      cmocka_unit_test(custom_hedge_layers_need_a_hedge_count),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
