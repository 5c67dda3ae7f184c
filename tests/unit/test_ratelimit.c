/* Rate limiter: configuration, P4, reservation semantics, deadline,
 * cancellation and cycle wraparound, all on a manual clock. */
#include <limits.h>
#include <string.h>

#include "ratelimit/ratelimit_int.h"
#include "test_util.h"

#define HOUR (INT64_C(3600) * INT64_C(1000000000))

typedef struct fixture {
  resil_manual_clock *mc;
  resil_ratelimiter *rl;
} fixture;

/* A limiter on a fresh manual clock; its first cycle starts at t = 0. */
static void make(fixture *f, int64_t limit, int64_t period_ns,
                 int64_t timeout_ns) {
  assert_status(RESIL_OK, resil_manual_clock_new(0, 0, &f->mc));
  resil_ratelimiter_config cfg;
  resil_ratelimiter_config_init(&cfg);
  cfg.limit_for_period = limit;
  cfg.refresh_period_ns = period_ns;
  cfg.timeout_ns = timeout_ns;
  cfg.clock = resil_manual_clock_get(f->mc);
  f->rl = NULL;
  assert_status(RESIL_OK, resil_ratelimiter_new(&cfg, &f->rl, NULL));
}

static void destroy(fixture *f) {
  resil_ratelimiter_free(f->rl);
  resil_manual_clock_free(f->mc);
}

/* The five answers a request can get, from a decision and its reason, so
 * that each assertion says which one it expects. */
enum { RL_PERMITTED, RL_RESERVED, RL_REFUSED, RL_CANCELLED, RL_MISUSE };

static int rl_code(resil_decision d, resil_reason why) {
  switch (d) {
  case RESIL_DECISION_GO:
    assert_int_equal(why, RESIL_REASON_OK);
    return RL_PERMITTED;
  case RESIL_DECISION_WAIT:
    assert_int_equal(why, RESIL_REASON_OK);
    return RL_RESERVED;
  default:
    if (why == RESIL_REASON_RATE_LIMITED || why == RESIL_REASON_DEADLINE)
      return RL_REFUSED;
    if (why == RESIL_REASON_CANCELLED) return RL_CANCELLED;
    assert_int_equal(why, RESIL_REASON_LOCAL_ERROR);
    return RL_MISUSE;
  }
}

static int acq(resil_ratelimiter *rl, int n, const resil_ctx *ctx) {
  resil_reason why = RESIL_REASON_COUNT_;
  resil_decision d = resil_ratelimiter_acquire(rl, n, ctx, &why);
  return rl_code(d, why);
}

static int res(resil_ratelimiter *rl, int n, const resil_ctx *ctx,
               int64_t *wait) {
  resil_reason why = RESIL_REASON_COUNT_;
  resil_decision d = resil_ratelimiter_reserve(rl, n, ctx, wait, &why);
  return rl_code(d, why);
}

typedef struct seen_ctx {
  const resil_ctx *ptr;
  const resil_clock *clock;
} seen_ctx;

static int calls;
static resil_outcome count_call(void *arg, const resil_ctx *ctx) {
  calls++;
  if (arg) {
    seen_ctx *seen = arg;
    seen->ptr = ctx;
    seen->clock = ctx->clock;
  }
  return resil_outcome_ok();
}

static void ratelimiter_defaults_match_resilience4j(void **state) {
  (void)state;
  resil_ratelimiter_config cfg;
  resil_ratelimiter_config_init(&cfg);
  assert_int_equal(cfg.struct_size, sizeof cfg);
  assert_string_equal(cfg.name, "ratelimiter");
  assert_int_equal(cfg.limit_for_period, 50);
  /* 1 s, not Resilience4j's 500 ns builder default (which silently makes
   * the default limiter almost unlimited). */
  assert_int_equal(cfg.refresh_period_ns, RESIL_S(1));
  assert_int_equal(cfg.timeout_ns, INT64_C(5000000000));
  assert_null(cfg.clock);
  assert_null(cfg.alloc);
  resil_ratelimiter *rl = NULL;
  assert_status(RESIL_OK, resil_ratelimiter_new(&cfg, &rl, NULL));
  assert_string_equal(resil_ratelimiter_name(rl), "ratelimiter");
  resil_ratelimiter_free(rl);
  resil_ratelimiter_free(NULL);
}

static void expect_range(resil_ratelimiter_config *cfg, const char *field,
                         int64_t min, int64_t max, int64_t got) {
  resil_ratelimiter *rl = NULL;
  resil_error err;
  assert_status(RESIL_EINVAL, resil_ratelimiter_new(cfg, &rl, &err));
  assert_null(rl);
  assert_int_equal(err.status, RESIL_EINVAL);
  assert_string_equal(err.field, field);
  assert_int_equal(err.has_range, 1);
  assert_int_equal(err.min, min);
  assert_int_equal(err.max, max);
  assert_int_equal(err.got, got);
}

static void ratelimiter_rejects_invalid_config_naming_field_range_and_value(
    void **state) {
  (void)state;
  resil_ratelimiter_config cfg;
  resil_ratelimiter_config_init(&cfg);
  cfg.limit_for_period = 0;
  expect_range(&cfg, "limit_for_period", 1, INT32_MAX, 0);
  cfg.limit_for_period = INT64_C(3000000000);
  expect_range(&cfg, "limit_for_period", 1, INT32_MAX, INT64_C(3000000000));

  resil_ratelimiter_config_init(&cfg);
  cfg.refresh_period_ns = 0;
  expect_range(&cfg, "refresh_period_ns", 1, INT64_MAX, 0);

  resil_ratelimiter_config_init(&cfg);
  cfg.timeout_ns = -1;
  expect_range(&cfg, "timeout_ns", 0, INT64_MAX, -1);

  /* Range errors on durations speak human units. */
  resil_ratelimiter_config_init(&cfg);
  cfg.timeout_ns = -1;
  resil_ratelimiter *bad = NULL;
  resil_error e;
  assert_status(RESIL_EINVAL, resil_ratelimiter_new(&cfg, &bad, &e));
  assert_non_null(strstr(e.msg, "timeout_ns: must be 0 ns.."));
  assert_non_null(strstr(e.msg, "got -1 ns"));

  /* A config never passed through _init is refused, naming the fix. */
  memset(&cfg, 0, sizeof cfg);
  cfg.limit_for_period = 5;
  cfg.refresh_period_ns = RESIL_S(1);
  assert_status(RESIL_EINVAL, resil_ratelimiter_new(&cfg, &bad, &e));
  assert_null(bad);
  assert_string_equal(e.field, "struct_size");
  assert_non_null(strstr(e.msg, "call resil_ratelimiter_config_init()"));

  /* 1000 permits per 500 ns for 5 s could owe 10^10 permits: the largest
   * timeout that fits is reported, never clamped. */
  resil_ratelimiter_config_init(&cfg);
  cfg.limit_for_period = 1000;
  cfg.refresh_period_ns = 500;
  int64_t max_timeout = (INT32_MAX / 1000 - 1) * INT64_C(500) + 499;
  expect_range(&cfg, "timeout_ns", 0, max_timeout, INT64_C(5000000000));
  cfg.timeout_ns = max_timeout;
  resil_ratelimiter *rl = NULL;
  assert_status(RESIL_OK, resil_ratelimiter_new(&cfg, &rl, NULL));
  resil_ratelimiter_free(rl);

  resil_error err;
  assert_status(RESIL_EINVAL, resil_ratelimiter_new(NULL, &rl, &err));
  assert_string_equal(err.field, "cfg");
  assert_status(RESIL_EINVAL, resil_ratelimiter_new(&cfg, NULL, &err));
  assert_string_equal(err.field, "out");
}

static void ratelimiter_allocation_failures_leak_nothing(void **state) {
  (void)state;
  resil_ratelimiter_config cfg;
  resil_ratelimiter_config_init(&cfg);
  cfg.name = "orders";
  long n = 1;
  for (;; n++) {
    test_alloc ta;
    test_alloc_init(&ta, n);
    cfg.alloc = &ta.a;
    resil_ratelimiter *rl = NULL;
    resil_error err;
    resil_status st = resil_ratelimiter_new(&cfg, &rl, &err);
    if (st == RESIL_OK) {
      assert_string_equal(resil_ratelimiter_name(rl), "orders");
      resil_ratelimiter_free(rl);
      assert_int_equal(ta.live, 0);
      break;
    }
    assert_status(RESIL_ENOMEM, st);
    assert_int_equal(err.status, RESIL_ENOMEM);
    assert_null(rl);
    assert_int_equal(ta.live, 0);
  }
  assert_true(n > 1); /* at least one allocation was made to fail */
}

/* P4: 2 per period (1 h), timeout 0 -> true, true, false; 0 available. */
static void ratelimiter_p4_two_per_hour_grants_two_then_refuses(void **state) {
  (void)state;
  fixture f;
  make(&f, 2, HOUR, 0);
  assert_int_equal(resil_ratelimiter_available(f.rl), 2);
  assert_int_equal(acq(f.rl, 1, NULL), RL_PERMITTED);
  assert_int_equal(acq(f.rl, 1, NULL), RL_PERMITTED);
  assert_int_equal(acq(f.rl, 1, NULL), RL_REFUSED);
  assert_int_equal(resil_ratelimiter_available(f.rl), 0);

  calls = 0;
  resil_outcome o = resil_ratelimiter_run(f.rl, NULL, count_call, NULL);
  assert_int_equal(o.kind, RESIL_REJECTED);
  assert_int_equal(o.reason, RESIL_REASON_RATE_LIMITED);
  assert_int_equal(calls, 0);

  resil_ratelimiter_metrics m;
  assert_status(RESIL_OK, resil_ratelimiter_get_metrics(f.rl, &m));
  assert_int_equal(m.permitted, 2);
  assert_int_equal(m.reserved, 0);
  assert_int_equal(m.refused, 2);
  assert_int_equal(m.available, 0);
  assert_int_equal(resil_manual_clock_slept_ns(f.mc), 0);
  destroy(&f);
}

static void ratelimiter_new_cycle_restores_the_limit_without_accumulating(
    void **state) {
  (void)state;
  fixture f;
  make(&f, 2, HOUR, 0);
  assert_int_equal(acq(f.rl, 2, NULL), RL_PERMITTED);
  assert_int_equal(resil_ratelimiter_available(f.rl), 0);
  resil_manual_clock_advance_ns(f.mc, HOUR - 1);
  assert_int_equal(resil_ratelimiter_available(f.rl), 0);
  resil_manual_clock_advance_ns(f.mc, 1);
  assert_int_equal(resil_ratelimiter_available(f.rl), 2);
  /* Ten idle hours still give one cycle's permits, not twenty. */
  resil_manual_clock_advance_ns(f.mc, 10 * HOUR);
  assert_int_equal(resil_ratelimiter_available(f.rl), 2);
  calls = 0;
  for (int i = 0; i < 2; i++) {
    resil_outcome o = resil_ratelimiter_run(f.rl, NULL, count_call, NULL);
    assert_true(resil_outcome_is_success(&o));
  }
  assert_int_equal(resil_ratelimiter_run(f.rl, NULL, count_call, NULL).kind,
                   RESIL_REJECTED);
  assert_int_equal(calls, 2);
  destroy(&f);
}

/* Permits left over in a cycle do not carry into the next one, also when
 * the next one is reached at its first nanosecond by a permit taken from
 * the state as it is (the fast path takes one only inside the state's own
 * cycle). */
static void ratelimiter_leftover_permits_end_at_the_cycle_boundary(
    void **state) {
  (void)state;
  fixture f;
  make(&f, 2, MS(10), 0);
  assert_int_equal(acq(f.rl, 1, NULL), RL_PERMITTED); /* 1 left in cycle 0 */
  resil_manual_clock_advance_ns(f.mc, MS(10) - 1);
  assert_int_equal(resil_ratelimiter_available(f.rl), 1);
  resil_manual_clock_advance_ns(f.mc, 1); /* cycle 1 begins */
  assert_int_equal(acq(f.rl, 1, NULL), RL_PERMITTED);
  assert_int_equal(acq(f.rl, 1, NULL), RL_PERMITTED);
  assert_int_equal(acq(f.rl, 1, NULL), RL_REFUSED);
  /* The same through the chain's entry point, on given readings: cycle 2
   * left with one permit, then cycle 3's first nanosecond. */
  resil_manual_clock_advance_ns(f.mc, MS(10));
  int64_t now = resil_clock_now_ns(resil_manual_clock_get(f.mc));
  resil_reason why;
  assert_int_equal(resil__ratelimiter_acquire_at(f.rl, 1, NULL, now, &why),
                   RESIL_DECISION_GO);
  now += MS(10);
  assert_int_equal(resil__ratelimiter_acquire_at(f.rl, 1, NULL, now, &why),
                   RESIL_DECISION_GO);
  assert_int_equal(resil__ratelimiter_acquire_at(f.rl, 1, NULL, now, &why),
                   RESIL_DECISION_GO);
  assert_int_equal(resil__ratelimiter_acquire_at(f.rl, 1, NULL, now, &why),
                   RESIL_DECISION_DENY);
  assert_int_equal(why, RESIL_REASON_RATE_LIMITED);
  resil_ratelimiter_metrics m;
  assert_status(RESIL_OK, resil_ratelimiter_get_metrics(f.rl, &m));
  assert_int_equal(m.permitted, 6);
  assert_int_equal(m.refused, 2);
  destroy(&f);
}

/* Limit 1 per 100 ms, timeout 250 ms, at t = 30 ms: the next permits come at
 * 100 and 200 ms (waits 70 and 170 ms); the one at 300 ms (wait 270) cannot
 * come in time and is refused at once, consuming nothing. */
static void ratelimiter_reserves_permits_that_free_within_the_timeout(
    void **state) {
  (void)state;
  fixture f;
  make(&f, 1, MS(100), MS(250));
  resil_manual_clock_advance_ns(f.mc, MS(30));
  int64_t wait = -1;
  assert_int_equal(res(f.rl, 1, NULL, &wait),
                   RL_PERMITTED);
  assert_int_equal(wait, 0);
  assert_int_equal(res(f.rl, 1, NULL, &wait),
                   RL_RESERVED);
  assert_int_equal(wait, MS(70));
  assert_int_equal(resil_ratelimiter_available(f.rl), -1);
  assert_int_equal(res(f.rl, 1, NULL, &wait),
                   RL_RESERVED);
  assert_int_equal(wait, MS(170));
  assert_int_equal(resil_ratelimiter_available(f.rl), -2);

  assert_int_equal(res(f.rl, 1, NULL, &wait),
                   RL_REFUSED);
  assert_int_equal(wait, MS(270));
  assert_int_equal(resil_ratelimiter_available(f.rl), -2); /* nothing taken */
  assert_int_equal(resil_manual_clock_slept_ns(f.mc), 0);   /* no wait */

  /* The reservations are paid by the coming cycles. */
  resil_manual_clock_advance_ns(f.mc, MS(70));
  assert_int_equal(resil_ratelimiter_available(f.rl), -1);
  resil_manual_clock_advance_ns(f.mc, MS(100));
  assert_int_equal(resil_ratelimiter_available(f.rl), 0);
  resil_manual_clock_advance_ns(f.mc, MS(100));
  assert_int_equal(resil_ratelimiter_available(f.rl), 1);

  resil_ratelimiter_metrics m;
  assert_status(RESIL_OK, resil_ratelimiter_get_metrics(f.rl, &m));
  assert_int_equal(m.permitted, 1);
  assert_int_equal(m.reserved, 2);
  assert_int_equal(m.refused, 1);
  destroy(&f);
}

static void ratelimiter_acquire_sleeps_through_the_clock_for_a_reserved_permit(
    void **state) {
  (void)state;
  fixture f;
  make(&f, 1, MS(100), MS(250));
  resil_manual_clock_advance_ns(f.mc, MS(30));
  assert_int_equal(acq(f.rl, 1, NULL), RL_PERMITTED);
  assert_int_equal(acq(f.rl, 1, NULL), RL_PERMITTED);
  assert_int_equal(resil_manual_clock_slept_ns(f.mc), MS(70));
  assert_int_equal(resil_manual_clock_now_ns(f.mc), MS(100));
  /* Now at the start of the cycle the permit was reserved from. */
  assert_int_equal(resil_ratelimiter_available(f.rl), 0);
  /* The run form waits the same way: the next permit is at 200 ms. */
  calls = 0;
  assert_int_equal(resil_ratelimiter_run(f.rl, NULL, count_call, NULL).reason,
                   RESIL_REASON_OK);
  assert_int_equal(calls, 1);
  assert_int_equal(resil_manual_clock_now_ns(f.mc), MS(200));
  destroy(&f);
}

static void ratelimiter_permit_beyond_the_timeout_is_refused_at_once(
    void **state) {
  (void)state;
  fixture f;
  make(&f, 1, MS(100), MS(50));
  assert_int_equal(acq(f.rl, 1, NULL), RL_PERMITTED);
  /* The next permit is 100 ms away, the timeout 50 ms: Resilience4j would
   * wait 50 ms first; we refuse without waiting. */
  assert_int_equal(acq(f.rl, 1, NULL), RL_REFUSED);
  assert_int_equal(resil_manual_clock_slept_ns(f.mc), 0);
  assert_int_equal(resil_ratelimiter_available(f.rl), 0);
  resil_manual_clock_advance_ns(f.mc, MS(60));
  /* 40 ms away now: within the timeout. */
  int64_t wait;
  assert_int_equal(res(f.rl, 1, NULL, &wait),
                   RL_RESERVED);
  assert_int_equal(wait, MS(40));
  destroy(&f);
}

static void ratelimiter_deadline_shorter_than_the_wait_refuses_at_once(
    void **state) {
  (void)state;
  fixture f;
  make(&f, 1, MS(100), MS(250));
  assert_int_equal(acq(f.rl, 1, NULL), RL_PERMITTED);
  resil_ctx ctx;
  resil_ctx_init(&ctx);
  ctx.clock = resil_manual_clock_get(f.mc);
  resil_ctx_set_timeout_ns(&ctx, MS(40));
  int64_t wait;
  /* The permit comes in 100 ms, within the 250 ms timeout, but after the
   * deadline. */
  resil_reason why;
  assert_int_equal(resil_ratelimiter_reserve(f.rl, 1, &ctx, &wait, &why),
                   RESIL_DECISION_DENY);
  assert_int_equal(why, RESIL_REASON_DEADLINE);
  assert_int_equal(wait, MS(100));
  calls = 0;
  resil_outcome o = resil_ratelimiter_run(f.rl, &ctx, count_call, NULL);
  assert_int_equal(o.kind, RESIL_REJECTED);
  assert_int_equal(o.reason, RESIL_REASON_DEADLINE);
  assert_int_equal(calls, 0);
  assert_int_equal(resil_manual_clock_slept_ns(f.mc), 0);
  assert_int_equal(resil_ratelimiter_available(f.rl), 0);

  /* A deadline on another clock is read on that clock. */
  resil_manual_clock *other;
  assert_status(RESIL_OK, resil_manual_clock_new(0, 0, &other));
  ctx.clock = resil_manual_clock_get(other);
  resil_ctx_set_timeout_ns(&ctx, MS(150));
  assert_int_equal(res(f.rl, 1, &ctx, &wait),
                   RL_RESERVED);
  assert_int_equal(wait, MS(100));
  resil_manual_clock_free(other);
  destroy(&f);
}

static void ratelimiter_cancelled_wait_gives_the_permit_back(void **state) {
  (void)state;
  fixture f;
  make(&f, 1, MS(100), MS(250));
  resil_cancel *c;
  assert_status(RESIL_OK, resil_cancel_new(&c));
  resil_cancel_signal(c);
  resil_ctx ctx;
  resil_ctx_init(&ctx);
  ctx.cancel = c;
  assert_int_equal(acq(f.rl, 1, &ctx), RL_PERMITTED);
  assert_int_equal(acq(f.rl, 1, &ctx), RL_CANCELLED);
  assert_int_equal(resil_ratelimiter_available(f.rl), 0);
  calls = 0;
  resil_outcome o = resil_ratelimiter_run(f.rl, &ctx, count_call, NULL);
  assert_int_equal(o.kind, RESIL_NOT_SENT);
  assert_int_equal(o.reason, RESIL_REASON_CANCELLED);
  assert_int_equal(calls, 0);
  assert_int_equal(resil_ratelimiter_available(f.rl), 0);
  resil_ratelimiter_metrics m;
  assert_status(RESIL_OK, resil_ratelimiter_get_metrics(f.rl, &m));
  assert_int_equal(m.reserved, 2);
  assert_int_equal(m.cancelled, 2);
  /* The given-back permit is the next cycle's, as if never reserved. */
  resil_manual_clock_advance_ns(f.mc, MS(100));
  assert_int_equal(resil_ratelimiter_available(f.rl), 1);
  resil_cancel_free(c);
  destroy(&f);
}

static void ratelimiter_multi_permit_requests_reach_into_later_cycles(
    void **state) {
  (void)state;
  fixture f;
  make(&f, 2, MS(100), MS(1000));
  int64_t wait;
  /* 2 now + 2 at 100 ms cover 3. */
  assert_int_equal(res(f.rl, 3, NULL, &wait),
                   RL_RESERVED);
  assert_int_equal(wait, MS(100));
  assert_int_equal(resil_ratelimiter_available(f.rl), -1);
  /* Owing 1: the cycle at 100 ms leaves 1, the one at 200 ms covers 2. */
  assert_int_equal(res(f.rl, 2, NULL, &wait),
                   RL_RESERVED);
  assert_int_equal(wait, MS(200));
  /* A request no timeout can cover reports a saturated wait. */
  assert_int_equal(res(f.rl, INT_MAX, NULL, &wait),
                   RL_REFUSED);
  assert_true(wait > MS(1000));
  assert_int_equal(resil_ratelimiter_available(f.rl), -3);
  destroy(&f);

  make(&f, 1, HOUR, 0);
  assert_int_equal(res(f.rl, INT_MAX, NULL, &wait),
                   RL_REFUSED);
  assert_int_equal(wait, INT64_MAX);
  destroy(&f);
}

/* A 1 ns period makes the 32-bit cycle tag wrap every 4.3 s of clock time:
 * idle gaps of exactly 2^32 cycles (same tag) and beyond must still refill. */
static void ratelimiter_idle_gaps_across_cycle_tag_wraparound_refill(
    void **state) {
  (void)state;
  fixture f;
  make(&f, 3, 1, 0);
  const int64_t wrap = INT64_C(1) << 32;
  int64_t gaps[] = {wrap, wrap - 1, wrap + 1, 2 * wrap, (INT64_C(1) << 31) + 7,
                    INT64_C(5) * wrap + 12345, 1};
  for (size_t i = 0; i < sizeof gaps / sizeof gaps[0]; i++) {
    assert_int_equal(acq(f.rl, 3, NULL), RL_PERMITTED);
    assert_int_equal(acq(f.rl, 1, NULL), RL_REFUSED);
    assert_int_equal(resil_ratelimiter_available(f.rl), 0);
    resil_manual_clock_advance_ns(f.mc, gaps[i]);
    assert_int_equal(resil_ratelimiter_available(f.rl), 3);
  }
  destroy(&f);

  /* Debt across a wrap: reserve 2 cycles ahead, then the same tag again. */
  make(&f, 1, 1, 2);
  int64_t wait;
  assert_int_equal(res(f.rl, 1, NULL, &wait),
                   RL_PERMITTED);
  assert_int_equal(res(f.rl, 2, NULL, &wait),
                   RL_RESERVED);
  assert_int_equal(wait, 2);
  assert_int_equal(resil_ratelimiter_available(f.rl), -2);
  resil_manual_clock_advance_ns(f.mc, wrap);
  assert_int_equal(resil_ratelimiter_available(f.rl), 1);
  destroy(&f);
}

static void ratelimiter_misuse_is_reported_not_crashed(void **state) {
  (void)state;
  fixture f;
  make(&f, 2, HOUR, 0);
  int64_t wait = 7;
  assert_int_equal(res(f.rl, 0, NULL, &wait),
                   RL_MISUSE);
  assert_int_equal(wait, 0);
  assert_int_equal(acq(f.rl, -1, NULL), RL_MISUSE);
  assert_int_equal(acq(NULL, 1, NULL), RL_MISUSE);
  assert_int_equal(resil_ratelimiter_available(f.rl), 2);
  resil_outcome o = resil_ratelimiter_run(f.rl, NULL, NULL, NULL);
  assert_int_equal(o.kind, RESIL_NOT_SENT);
  assert_int_equal(o.reason, RESIL_REASON_LOCAL_ERROR);
  o = resil_ratelimiter_run(NULL, NULL, count_call, NULL);
  assert_int_equal(o.reason, RESIL_REASON_LOCAL_ERROR);
  resil_ratelimiter_metrics m;
  assert_status(RESIL_EINVAL, resil_ratelimiter_get_metrics(f.rl, NULL));
  assert_status(RESIL_EMISUSE, resil_ratelimiter_get_metrics(NULL, &m));
  assert_null(resil_ratelimiter_name(NULL));
  assert_int_equal(resil_ratelimiter_available(NULL), 0);
  assert_int_equal(resil_ratelimiter_nanos_to_wait(NULL), 0);
  /* A ctx never passed through resil_ctx_init(): nothing consumed. */
  resil_ctx raw;
  memset(&raw, 0, sizeof raw);
  assert_int_equal(res(f.rl, 1, &raw, &wait), RL_MISUSE);
  assert_int_equal(resil_ratelimiter_available(f.rl), 2);
  o = resil_ratelimiter_run(f.rl, &raw, count_call, NULL);
  assert_int_equal(o.reason, RESIL_REASON_LOCAL_ERROR);
  destroy(&f);
}

/* The default limiter really limits: 50 permits per second. */
static void ratelimiter_default_period_is_one_second(void **state) {
  (void)state;
  resil_manual_clock *mc;
  assert_status(RESIL_OK, resil_manual_clock_new(0, 0, &mc));
  resil_ratelimiter_config cfg;
  resil_ratelimiter_config_init(&cfg);
  cfg.timeout_ns = 0;
  cfg.clock = resil_manual_clock_get(mc);
  resil_ratelimiter *rl = NULL;
  assert_status(RESIL_OK, resil_ratelimiter_new(&cfg, &rl, NULL));
  resil_manual_clock_advance_ns(mc, RESIL_MS(400));
  for (int i = 0; i < 50; i++) assert_int_equal(acq(rl, 1, NULL), RL_PERMITTED);
  resil_reason why;
  assert_int_equal(resil_ratelimiter_acquire(rl, 1, NULL, &why), RESIL_DECISION_DENY);
  assert_int_equal(why, RESIL_REASON_RATE_LIMITED);
  /* The next permit comes with the next cycle, at t = 1 s. */
  assert_int_equal(resil_ratelimiter_nanos_to_wait(rl), RESIL_MS(600));
  resil_manual_clock_advance_ns(mc, RESIL_MS(600));
  assert_int_equal(resil_ratelimiter_nanos_to_wait(rl), 0);
  assert_int_equal(acq(rl, 1, NULL), RL_PERMITTED);
  resil_ratelimiter_free(rl);
  resil_manual_clock_free(mc);
}

/* Resilience4j's getNanosToWait: 0 while a permit is free now, else the
 * time to the cycle that covers one more permit, reservations counted. */
static void ratelimiter_nanos_to_wait_for_one_more_permit(void **state) {
  (void)state;
  fixture f;
  make(&f, 2, MS(100), MS(1000));
  assert_int_equal(resil_ratelimiter_nanos_to_wait(f.rl), 0);
  assert_int_equal(acq(f.rl, 1, NULL), RL_PERMITTED);
  assert_int_equal(resil_ratelimiter_nanos_to_wait(f.rl), 0);
  assert_int_equal(acq(f.rl, 1, NULL), RL_PERMITTED);
  resil_manual_clock_advance_ns(f.mc, MS(30));
  assert_int_equal(resil_ratelimiter_nanos_to_wait(f.rl), MS(70));
  /* Reserve the two permits of the next cycle: one more is two cycles
   * away. */
  int64_t wait;
  assert_int_equal(res(f.rl, 2, NULL, &wait), RL_RESERVED);
  assert_int_equal(wait, MS(70));
  assert_int_equal(resil_ratelimiter_nanos_to_wait(f.rl), MS(170));
  /* The getter changes nothing, and the metrics carry the same value. */
  assert_int_equal(resil_ratelimiter_nanos_to_wait(f.rl), MS(170));
  resil_ratelimiter_metrics m;
  assert_status(RESIL_OK, resil_ratelimiter_get_metrics(f.rl, &m));
  assert_int_equal(m.struct_size, sizeof m);
  assert_int_equal(m.nanos_to_wait, MS(170));
  assert_int_equal(m.available, -2);
  resil_manual_clock_advance_ns(f.mc, MS(170));
  assert_int_equal(resil_ratelimiter_nanos_to_wait(f.rl), 0);
  destroy(&f);
}

static void ratelimiter_run_passes_the_callers_ctx_through(void **state) {
  (void)state;
  fixture f;
  make(&f, 2, HOUR, 0);
  resil_ctx ctx;
  resil_ctx_init(&ctx);
  ctx.flags = RESIL_CALL_IDEMPOTENT;
  seen_ctx seen = {NULL, NULL};
  resil_ratelimiter_run(f.rl, &ctx, count_call, &seen);
  assert_ptr_equal(seen.ptr, &ctx);
  resil_ratelimiter_run(f.rl, NULL, count_call, &seen);
  /* A default ctx on the limiter's clock. */
  assert_ptr_not_equal(seen.ptr, &ctx);
  assert_ptr_equal(seen.clock, resil_manual_clock_get(f.mc));
  destroy(&f);
}

/* The internal _at entry points (the chain's) count cycles on the reading
 * they are given, not on the clock, which stays at 0 here; cycle
 * boundaries are exact on both sides (the state's cycle is checked with a
 * multiplication before any division). */
static void ratelimiter_at_counts_cycles_on_the_given_reading(void **state) {
  (void)state;
  fixture f;
  make(&f, 1, 1000, 0);
  assert_ptr_equal(resil_manual_clock_get(f.mc), resil__ratelimiter_clock(f.rl));
  resil_reason why;
  int64_t w = -1;
  assert_int_equal(RESIL_DECISION_GO,
                   resil__ratelimiter_reserve_at(f.rl, 1, NULL, 999, &w, &why));
  assert_int_equal(0, w);
  assert_int_equal(RESIL_DECISION_DENY,
                   resil__ratelimiter_reserve_at(f.rl, 1, NULL, 999, &w, &why));
  assert_int_equal(RESIL_REASON_RATE_LIMITED, why);
  assert_int_equal(1, w); /* the next cycle starts at 1000 */
  assert_int_equal(RESIL_DECISION_GO,
                   resil__ratelimiter_acquire_at(f.rl, 1, NULL, 1000, &why));
  assert_int_equal(RESIL_DECISION_DENY,
                   resil__ratelimiter_acquire_at(f.rl, 1, NULL, 1999, &why));
  assert_int_equal(RESIL_DECISION_GO,
                   resil__ratelimiter_acquire_at(f.rl, 1, NULL, 2000, &why));
  /* The public form reads the clock (0): the state's later cycle stands,
   * and its one permit is taken. */
  assert_int_equal(RESIL_DECISION_DENY,
                   resil_ratelimiter_acquire(f.rl, 1, NULL, &why));
  assert_int_equal(RESIL_DECISION_GO,
                   resil__ratelimiter_acquire_at(f.rl, 1, NULL,
                                                 INT64_C(1000000000001), &why));
  assert_int_equal(RESIL_DECISION_DENY,
                   resil__ratelimiter_acquire_at(f.rl, 1, NULL,
                                                 INT64_C(1000000000999), &why));
  resil_ratelimiter_metrics m;
  assert_status(RESIL_OK, resil_ratelimiter_get_metrics(f.rl, &m));
  assert_int_equal(4, m.permitted);
  assert_int_equal(4, m.refused);
  assert_int_equal(RESIL_DECISION_DENY,
                   resil__ratelimiter_acquire_at(NULL, 1, NULL, 0, &why));
  assert_null(resil__ratelimiter_clock(NULL));
  destroy(&f);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(ratelimiter_defaults_match_resilience4j),
      cmocka_unit_test(
          ratelimiter_rejects_invalid_config_naming_field_range_and_value),
      cmocka_unit_test(ratelimiter_allocation_failures_leak_nothing),
      cmocka_unit_test(ratelimiter_p4_two_per_hour_grants_two_then_refuses),
      cmocka_unit_test(
          ratelimiter_new_cycle_restores_the_limit_without_accumulating),
      cmocka_unit_test(ratelimiter_leftover_permits_end_at_the_cycle_boundary),
      cmocka_unit_test(ratelimiter_reserves_permits_that_free_within_the_timeout),
      cmocka_unit_test(
          ratelimiter_acquire_sleeps_through_the_clock_for_a_reserved_permit),
      cmocka_unit_test(ratelimiter_permit_beyond_the_timeout_is_refused_at_once),
      cmocka_unit_test(ratelimiter_deadline_shorter_than_the_wait_refuses_at_once),
      cmocka_unit_test(ratelimiter_cancelled_wait_gives_the_permit_back),
      cmocka_unit_test(ratelimiter_multi_permit_requests_reach_into_later_cycles),
      cmocka_unit_test(ratelimiter_idle_gaps_across_cycle_tag_wraparound_refill),
      cmocka_unit_test(ratelimiter_misuse_is_reported_not_crashed),
      cmocka_unit_test(ratelimiter_run_passes_the_callers_ctx_through),
      cmocka_unit_test(ratelimiter_default_period_is_one_second),
      cmocka_unit_test(ratelimiter_nanos_to_wait_for_one_more_permit),
      cmocka_unit_test(ratelimiter_at_counts_cycles_on_the_given_reading),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
