/* A chain's library breaker and rate limiter run on the policies' internal
 * now-taking entry points with clock readings handed between layers
 * (chain.c). These tests run one script through Breaker(RateLimiter(call))
 * in a chain and through the public run forms nested by hand, each on its
 * own manual clock, and require identical outcomes and metrics at every
 * step, with fewer clock reads in the chain. The calls move the clock (slow
 * calls) and time moves between calls (rate-limiter cycles), so a reading
 * used where it is stale changes a slow count or a permit. */
#include <string.h>

#include "resil/breaker.h"
#include "resil/chain.h"
#include "resil/ratelimit.h"
#include "test_util.h"

/* A manual clock whose readings are counted; with `coarse`, it also has a
 * coarse reading (the same time, counted too) of 1 ms resolution. */
typedef struct counting_clock {
  resil_manual_clock *mc;
  const resil_clock *inner;
  resil_clock clock;
  long reads;
} counting_clock;

static int64_t cc_now(void *self) {
  counting_clock *c = self;
  c->reads++;
  return c->inner->now_ns(c->inner->self);
}

static int cc_sleep(void *self, int64_t ns, resil_cancel *cancel) {
  counting_clock *c = self;
  return c->inner->sleep_ns(c->inner->self, ns, cancel);
}

static void cc_init(counting_clock *c, int coarse) {
  memset(c, 0, sizeof *c);
  assert_int_equal(resil_manual_clock_new(0, 1700000000000, &c->mc), RESIL_OK);
  c->inner = resil_manual_clock_get(c->mc);
  c->clock = *c->inner;
  c->clock.self = c;
  c->clock.now_ns = cc_now;
  c->clock.sleep_ns = c->inner->sleep_ns ? cc_sleep : NULL;
  c->clock.coarse_ns = coarse ? cc_now : NULL;
  c->clock.coarse_resolution_ns = coarse ? RESIL_MS(1) : 0;
}

typedef struct side {
  counting_clock clk;
  resil_breaker *br;
  resil_ratelimiter *rl;
  resil_chain *ch;
  int64_t call_takes_ns; /* how far the next call moves the clock */
  int call_fails;
  int calls;
} side;

static void side_new(side *s, int coarse) {
  memset(s, 0, sizeof *s);
  cc_init(&s->clk, coarse);
  resil_error err;
  resil_breaker_config bc;
  resil_breaker_config_init(&bc);
  bc.window_type = RESIL_BREAKER_WINDOW_COUNT;
  bc.window_size = 4;
  bc.minimum_calls = 4;
  bc.failure_rate_threshold_pct = 50;
  bc.slow_call_rate_threshold_pct = 50;
  bc.slow_call_duration_ns = RESIL_S(1);
  bc.open_wait_ns = RESIL_S(2);
  bc.half_open_permitted_calls = 1;
  bc.clock = &s->clk.clock;
  assert_int_equal(resil_breaker_new(&bc, &s->br, &err), RESIL_OK);
  resil_ratelimiter_config rc;
  resil_ratelimiter_config_init(&rc);
  rc.limit_for_period = 2;
  rc.refresh_period_ns = RESIL_MS(500);
  rc.timeout_ns = 0;
  rc.clock = &s->clk.clock;
  assert_int_equal(resil_ratelimiter_new(&rc, &s->rl, &err), RESIL_OK);
  resil_chain_config cc;
  resil_chain_config_init(&cc);
  cc.clock = &s->clk.clock;
  assert_int_equal(resil_chain_new(&cc, &s->ch, &err), RESIL_OK);
  assert_int_equal(resil_chain_add_breaker(s->ch, s->br), RESIL_OK);
  assert_int_equal(resil_chain_add_ratelimiter(s->ch, s->rl), RESIL_OK);
}

static void side_free(side *s) {
  resil_chain_free(s->ch);
  resil_ratelimiter_free(s->rl);
  resil_breaker_free(s->br);
  resil_manual_clock_free(s->clk.mc);
}

static resil_outcome the_call(void *arg, const resil_ctx *ctx) {
  (void)ctx;
  side *s = arg;
  s->calls++;
  resil_manual_clock_advance_ns(s->clk.mc, s->call_takes_ns);
  return s->call_fails ? resil_outcome_http(500) : resil_outcome_ok();
}

static resil_outcome rl_layer(void *arg, const resil_ctx *ctx) {
  side *s = arg;
  return resil_ratelimiter_run(s->rl, ctx, the_call, s);
}

/* The reference: the public run forms, each reading its own clock. */
static resil_outcome run_direct(side *s, const resil_ctx *ctx) {
  return resil_breaker_run(s->br, ctx, rl_layer, s);
}

static void assert_same(side *a, side *b, resil_outcome oa, resil_outcome ob,
                        int step) {
  if (oa.kind != ob.kind || oa.reason != ob.reason || oa.http_status != ob.http_status)
    fail_msg("step %d: outcome %d/%d/%d vs %d/%d/%d", step, oa.kind, oa.reason,
             oa.http_status, ob.kind, ob.reason, ob.http_status);
  assert_int_equal(a->calls, b->calls);
  resil_breaker_metrics ma, mb;
  assert_int_equal(resil_breaker_get_metrics(a->br, &ma), RESIL_OK);
  assert_int_equal(resil_breaker_get_metrics(b->br, &mb), RESIL_OK);
  if (ma.state != mb.state || ma.buffered_calls != mb.buffered_calls ||
      ma.failed_calls != mb.failed_calls || ma.slow_calls != mb.slow_calls ||
      ma.total_calls != mb.total_calls || ma.total_slow != mb.total_slow ||
      ma.total_not_permitted != mb.total_not_permitted ||
      ma.state_since_ns != mb.state_since_ns)
    fail_msg("step %d: breaker state %d/%d buffered %u/%u failed %u/%u slow "
             "%u/%u total slow %llu/%llu not permitted %llu/%llu",
             step, ma.state, mb.state, (unsigned)ma.buffered_calls,
             (unsigned)mb.buffered_calls, (unsigned)ma.failed_calls,
             (unsigned)mb.failed_calls, (unsigned)ma.slow_calls,
             (unsigned)mb.slow_calls, (unsigned long long)ma.total_slow,
             (unsigned long long)mb.total_slow,
             (unsigned long long)ma.total_not_permitted,
             (unsigned long long)mb.total_not_permitted);
  resil_ratelimiter_metrics ra, rb;
  assert_int_equal(resil_ratelimiter_get_metrics(a->rl, &ra), RESIL_OK);
  assert_int_equal(resil_ratelimiter_get_metrics(b->rl, &rb), RESIL_OK);
  if (ra.permitted != rb.permitted || ra.refused != rb.refused ||
      ra.available != rb.available)
    fail_msg("step %d: limiter permitted %llu/%llu refused %llu/%llu "
             "available %lld/%lld",
             step, (unsigned long long)ra.permitted,
             (unsigned long long)rb.permitted, (unsigned long long)ra.refused,
             (unsigned long long)rb.refused, (long long)ra.available,
             (long long)rb.available);
}

/* One script: per step, the time before the call, how long the call takes
 * and whether it fails. Slow calls and failures open the breaker; time
 * between calls crosses the limiter's 500 ms cycles and the breaker's 2 s
 * open wait. */
/* before_ms: to the start of the limiter's next cycle (both sides' clocks
 * and limiters started at 0). */
#define TO_CYCLE (-1)

static void run_script(int coarse, const resil_ctx *ctx_in_chain) {
  side a, b;
  side_new(&a, coarse);
  side_new(&b, coarse);
  static const struct {
    int64_t before_ms, takes_ms;
    int fails;
  } steps[] = {
      {0, 10, 0},    {0, 1200, 0},  {0, 0, 0},     {100, 0, 0},  {0, 0, 0},
      {400, 999, 0}, {0, 1000, 0},  {1, 0, 1},     {0, 0, 1},    {0, 0, 0},
      {2500, 1500, 0}, {0, 0, 0},   {2100, 5, 0},  {0, 0, 0},    {0, 0, 0},
      {499, 0, 0},   {1, 0, 0},     {0, 0, 0},     {0, 0, 0},    {250, 2000, 1},
      {0, 0, 1},     {0, 0, 0},     {3000, 0, 0},  {0, 3000, 0}, {499, 0, 0},
      /* Two permits taken, then a call exactly at the next cycle's start:
       * a reading 1 ns older finds the old cycle empty. */
      {3000, 0, 0},  {0, 0, 0},     {0, 0, 0},     {TO_CYCLE, 0, 0},
      {0, 0, 0},     {0, 0, 0},     {TO_CYCLE, 0, 0},
  };
  long chain_reads = 0, direct_reads = 0;
  for (size_t i = 0; i < sizeof steps / sizeof steps[0]; i++) {
    int64_t before = RESIL_MS(steps[i].before_ms);
    if (steps[i].before_ms == TO_CYCLE) {
      int64_t t = a.clk.inner->now_ns(a.clk.inner->self);
      before = RESIL_MS(500) - t % RESIL_MS(500);
    }
    resil_manual_clock_advance_ns(a.clk.mc, before);
    resil_manual_clock_advance_ns(b.clk.mc, before);
    a.call_takes_ns = b.call_takes_ns = RESIL_MS(steps[i].takes_ms);
    a.call_fails = b.call_fails = steps[i].fails;
    long ra = a.clk.reads, rb = b.clk.reads;
    resil_outcome oa = resil_chain_run(a.ch, ctx_in_chain, the_call, &a);
    resil_outcome ob = run_direct(&b, ctx_in_chain);
    chain_reads += a.clk.reads - ra;
    direct_reads += b.clk.reads - rb;
    assert_same(&a, &b, oa, ob, (int)i);
  }
  /* The script ran every path: opened, refused, limited, reclosed. */
  resil_breaker_metrics m;
  assert_int_equal(resil_breaker_get_metrics(a.br, &m), RESIL_OK);
  assert_true(m.total_not_permitted > 0);
  assert_true(m.total_slow > 0);
  resil_ratelimiter_metrics r;
  assert_int_equal(resil_ratelimiter_get_metrics(a.rl, &r), RESIL_OK);
  assert_true(r.refused > 0);
  assert_true(r.permitted > 0);
  /* The limiter used the breaker's reading: one read fewer per call the
   * breaker let in. */
  assert_true(chain_reads < direct_reads);
  side_free(&a);
  side_free(&b);
}

static void chain_hands_precise_readings_exactly(void **state) {
  (void)state;
  run_script(0, NULL);
}

static void chain_hands_coarse_readings_exactly(void **state) {
  (void)state;
  run_script(1, NULL);
}

/* A ctx deadline on the limiter's clock is checked on a precise reading:
 * the coarse reading is then not handed down, and the figures still match. */
static void chain_with_deadline_matches_direct_calls(void **state) {
  (void)state;
  side a, b;
  side_new(&a, 1);
  side_new(&b, 1);
  for (int i = 0; i < 6; i++) {
    resil_ctx ca, cb;
    resil_ctx_init(&ca);
    resil_ctx_init(&cb);
    ca.clock = &a.clk.clock;
    cb.clock = &b.clk.clock;
    resil_ctx_set_timeout_ns(&ca, RESIL_S(10));
    resil_ctx_set_timeout_ns(&cb, RESIL_S(10));
    resil_manual_clock_advance_ns(a.clk.mc, RESIL_MS(200));
    resil_manual_clock_advance_ns(b.clk.mc, RESIL_MS(200));
    a.call_takes_ns = b.call_takes_ns = RESIL_MS(300 * i);
    resil_outcome oa = resil_chain_run(a.ch, &ca, the_call, &a);
    resil_outcome ob = run_direct(&b, &cb);
    assert_same(&a, &b, oa, ob, i);
  }
  side_free(&a);
  side_free(&b);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(chain_hands_precise_readings_exactly),
      cmocka_unit_test(chain_hands_coarse_readings_exactly),
      cmocka_unit_test(chain_with_deadline_matches_direct_calls),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
