/* Semaphore bulkhead and thread pool, single caller: configuration,
 * allocation failures, slots on every path of the run form, misuse. The
 * tests with several threads in flight are in test_bulkhead_mt.c. */
#include <string.h>

#include "test_util.h"

static int calls;
static resil_bulkhead *seen_bh;
static uint32_t seen_available;

/* Returns the outcome given in arg, and notes the free slots while it runs. */
static resil_outcome returns(void *arg, const resil_ctx *ctx) {
  (void)ctx;
  calls++;
  seen_available = resil_bulkhead_available(seen_bh);
  return *(const resil_outcome *)arg;
}

static resil_bulkhead *make(uint32_t max, int64_t max_wait_ns) {
  resil_bulkhead_config cfg;
  resil_bulkhead_config_init(&cfg);
  cfg.max_concurrent = max;
  cfg.max_wait_ns = max_wait_ns;
  resil_bulkhead *bh = NULL;
  assert_status(RESIL_OK, resil_bulkhead_new(&cfg, &bh, NULL));
  return bh;
}

/* resil_bulkhead_acquire's answer as one value: RESIL_REASON_OK for GO,
 * else why it denied (checking the two agree). */
static resil_reason bh_acquire(resil_bulkhead *bh, const resil_ctx *ctx) {
  resil_reason why = RESIL_REASON_COUNT_;
  resil_decision d = resil_bulkhead_acquire(bh, ctx, &why);
  assert_true(d == RESIL_DECISION_GO ? why == RESIL_REASON_OK
                                     : d == RESIL_DECISION_DENY && why != RESIL_REASON_OK);
  return why;
}

static void bulkhead_defaults_match_resilience4j(void **state) {
  (void)state;
  resil_bulkhead_config cfg;
  resil_bulkhead_config_init(&cfg);
  assert_int_equal(cfg.struct_size, sizeof cfg);
  assert_string_equal(cfg.name, "bulkhead");
  assert_int_equal(cfg.max_concurrent, 25);
  assert_int_equal(cfg.max_wait_ns, 0);
  assert_null(cfg.alloc);
  resil_bulkhead *bh = NULL;
  assert_status(RESIL_OK, resil_bulkhead_new(&cfg, &bh, NULL));
  assert_int_equal(resil_bulkhead_available(bh), 25);
  assert_string_equal(resil_bulkhead_name(bh), "bulkhead");
  resil_bulkhead_free(bh);
  resil_bulkhead_free(NULL);
}

static void expect_bh_range(resil_bulkhead_config *cfg, const char *field,
                            int64_t min, int64_t max, int64_t got) {
  resil_bulkhead *bh = NULL;
  resil_error err;
  assert_status(RESIL_EINVAL, resil_bulkhead_new(cfg, &bh, &err));
  assert_null(bh);
  assert_string_equal(err.field, field);
  assert_int_equal(err.has_range, 1);
  assert_int_equal(err.min, min);
  assert_int_equal(err.max, max);
  assert_int_equal(err.got, got);
}

static void bulkhead_rejects_invalid_config_naming_field_range_and_value(
    void **state) {
  (void)state;
  resil_bulkhead_config cfg;
  resil_bulkhead_config_init(&cfg);
  cfg.max_concurrent = 0;
  expect_bh_range(&cfg, "max_concurrent", 1, 1000000, 0);
  cfg.max_concurrent = 1000001;
  expect_bh_range(&cfg, "max_concurrent", 1, 1000000, 1000001);
  resil_bulkhead_config_init(&cfg);
  cfg.max_wait_ns = -5;
  expect_bh_range(&cfg, "max_wait_ns", 0, INT64_MAX, -5);
  {
    resil_bulkhead *none = NULL;
    resil_error e;
    assert_status(RESIL_EINVAL, resil_bulkhead_new(&cfg, &none, &e));
    assert_string_equal(e.msg, "max_wait_ns: must be 0 ns..forever, got -5 ns");
  }
  resil_bulkhead_config_init(&cfg);
  resil_bulkhead *bh;
  /* A config never passed through _init is refused, naming the fix. */
  resil_bulkhead_config raw;
  memset(&raw, 0, sizeof raw);
  raw.max_concurrent = 2;
  resil_error err;
  assert_status(RESIL_EINVAL, resil_bulkhead_new(&raw, &bh, &err));
  assert_non_null(strstr(err.msg, "call resil_bulkhead_config_init()"));
  assert_status(RESIL_EINVAL, resil_bulkhead_new(NULL, &bh, NULL));
  resil_bulkhead_config_init(&cfg);
  assert_status(RESIL_EINVAL, resil_bulkhead_new(&cfg, NULL, NULL));
  cfg.max_concurrent = 1000000;
  assert_status(RESIL_OK, resil_bulkhead_new(&cfg, &bh, NULL));
  assert_int_equal(resil_bulkhead_available(bh), 1000000);
  resil_bulkhead_free(bh);
}

static void bulkhead_allocation_failures_leak_nothing(void **state) {
  (void)state;
  resil_bulkhead_config cfg;
  resil_bulkhead_config_init(&cfg);
  cfg.name = "payments";
  long n = 1;
  for (;; n++) {
    test_alloc ta;
    test_alloc_init(&ta, n);
    cfg.alloc = &ta.a;
    resil_bulkhead *bh = NULL;
    resil_status st = resil_bulkhead_new(&cfg, &bh, NULL);
    if (st == RESIL_OK) {
      assert_string_equal(resil_bulkhead_name(bh), "payments");
      resil_bulkhead_free(bh);
      assert_int_equal(ta.live, 0);
      break;
    }
    assert_status(RESIL_ENOMEM, st);
    assert_null(bh);
    assert_int_equal(ta.live, 0);
  }
  assert_true(n > 1);
}

static void bulkhead_try_acquire_fills_then_rejects_and_release_restores(
    void **state) {
  (void)state;
  resil_bulkhead *bh = make(2, 0);
  assert_int_equal(resil_bulkhead_try_acquire(bh, NULL), 1);
  assert_int_equal(resil_bulkhead_available(bh), 1);
  assert_int_equal(resil_bulkhead_try_acquire(bh, NULL), 1);
  assert_int_equal(resil_bulkhead_try_acquire(bh, NULL), 0);
  assert_int_equal(bh_acquire(bh, NULL), RESIL_REASON_BULKHEAD_FULL);
  assert_int_equal(resil_bulkhead_available(bh), 0);
  assert_status(RESIL_OK, resil_bulkhead_release(bh));
  assert_int_equal(resil_bulkhead_available(bh), 1);
  assert_int_equal(bh_acquire(bh, NULL), RESIL_REASON_OK);
  assert_status(RESIL_OK, resil_bulkhead_release(bh));
  assert_status(RESIL_OK, resil_bulkhead_release(bh));
  resil_bulkhead_metrics m;
  assert_status(RESIL_OK, resil_bulkhead_get_metrics(bh, &m));
  assert_int_equal(m.max_concurrent, 2);
  assert_int_equal(m.in_flight, 0);
  assert_int_equal(m.available, 2);
  assert_int_equal(m.peak_in_flight, 2);
  assert_int_equal(m.permitted, 3);
  assert_int_equal(m.rejected, 2);
  assert_int_equal(m.waiting, 0);
  resil_bulkhead_free(bh);
}

static void bulkhead_release_without_a_slot_is_misuse_and_never_exceeds_max(
    void **state) {
  (void)state;
  resil_bulkhead *bh = make(2, 0);
  assert_status(RESIL_EMISUSE, resil_bulkhead_release(bh));
  assert_int_equal(resil_bulkhead_available(bh), 2);
  assert_int_equal(resil_bulkhead_try_acquire(bh, NULL), 1);
  assert_status(RESIL_OK, resil_bulkhead_release(bh));
  assert_status(RESIL_EMISUSE, resil_bulkhead_release(bh));
  assert_int_equal(resil_bulkhead_available(bh), 2);
  resil_bulkhead_metrics m;
  assert_status(RESIL_OK, resil_bulkhead_get_metrics(bh, &m));
  assert_int_equal(m.permitted, 1); /* the failed releases changed nothing */
  resil_bulkhead_free(bh);
}

static void bulkhead_run_returns_the_slot_on_every_outcome(void **state) {
  (void)state;
  resil_bulkhead *bh = make(3, 0);
  seen_bh = bh;
  resil_outcome outs[] = {
      resil_outcome_ok(),
      resil_outcome_failure(),
      resil_outcome_http(503),
      resil_outcome_make(RESIL_UNKNOWN, RESIL_REASON_TIMEOUT),
      resil_outcome_make(RESIL_UNKNOWN, RESIL_REASON_CANCELLED),
      resil_outcome_make(RESIL_NOT_SENT, RESIL_REASON_CONNECT_REFUSED),
  };
  calls = 0;
  for (size_t i = 0; i < sizeof outs / sizeof outs[0]; i++) {
    seen_available = 99;
    resil_outcome o = resil_bulkhead_run(bh, NULL, returns, &outs[i]);
    assert_int_equal(o.kind, outs[i].kind);
    assert_int_equal(o.reason, outs[i].reason);
    assert_int_equal(o.http_status, outs[i].http_status);
    assert_int_equal(seen_available, 2); /* the call held one slot */
    assert_int_equal(resil_bulkhead_available(bh), 3);
  }
  assert_int_equal(calls, 6);
  resil_bulkhead_free(bh);
}

static const resil_clock *seen_clock;
static resil_outcome note_clock(void *arg, const resil_ctx *ctx) {
  (void)arg;
  seen_clock = ctx->clock;
  return resil_outcome_ok();
}

static void bulkhead_run_without_ctx_gives_fn_a_ctx_on_its_clock(void **state) {
  (void)state;
  resil_manual_clock *mc;
  assert_status(RESIL_OK, resil_manual_clock_new(0, 0, &mc));
  resil_bulkhead_config cfg;
  resil_bulkhead_config_init(&cfg);
  assert_null(cfg.clock);
  cfg.clock = resil_manual_clock_get(mc);
  resil_bulkhead *bh = NULL;
  assert_status(RESIL_OK, resil_bulkhead_new(&cfg, &bh, NULL));
  seen_clock = NULL;
  resil_bulkhead_run(bh, NULL, note_clock, NULL);
  assert_ptr_equal(seen_clock, resil_manual_clock_get(mc));
  resil_ctx ctx;
  resil_ctx_init(&ctx);
  resil_bulkhead_run(bh, &ctx, note_clock, NULL);
  assert_null(seen_clock); /* the caller's ctx, passed through */
  resil_bulkhead_free(bh);
  resil_manual_clock_free(mc);
}

static void bulkhead_run_when_full_rejects_without_calling(void **state) {
  (void)state;
  resil_bulkhead *bh = make(1, 0);
  seen_bh = bh;
  assert_int_equal(resil_bulkhead_try_acquire(bh, NULL), 1);
  resil_outcome ok = resil_outcome_ok();
  calls = 0;
  resil_outcome o = resil_bulkhead_run(bh, NULL, returns, &ok);
  assert_int_equal(o.kind, RESIL_REJECTED);
  assert_int_equal(o.reason, RESIL_REASON_BULKHEAD_FULL);
  assert_int_equal(calls, 0);
  assert_status(RESIL_OK, resil_bulkhead_release(bh));
  o = resil_bulkhead_run(bh, NULL, returns, &ok);
  assert_true(resil_outcome_is_success(&o));
  assert_int_equal(calls, 1);
  resil_bulkhead_free(bh);
}

static void bulkhead_wait_is_cut_by_a_passed_deadline(void **state) {
  (void)state;
  resil_bulkhead *bh = make(1, 10 * INT64_C(1000000000));
  assert_int_equal(resil_bulkhead_try_acquire(bh, NULL), 1);
  resil_manual_clock *mc;
  assert_status(RESIL_OK, resil_manual_clock_new(0, 0, &mc));
  resil_ctx ctx;
  resil_ctx_init(&ctx);
  ctx.clock = resil_manual_clock_get(mc);
  resil_ctx_set_timeout_ns(&ctx, MS(5));
  resil_manual_clock_advance_ns(mc, MS(6));
  int64_t t0 = resil_clock_now_ns(NULL);
  assert_int_equal(bh_acquire(bh, &ctx), RESIL_REASON_BULKHEAD_FULL);
  assert_true(resil_clock_now_ns(NULL) - t0 < MS(1000)); /* not 10 s */
  resil_bulkhead_release(bh);
  resil_manual_clock_free(mc);
  resil_bulkhead_free(bh);
}

static void bulkhead_cancelled_wait_ends_without_calling(void **state) {
  (void)state;
  resil_bulkhead *bh = make(1, 10 * INT64_C(1000000000));
  seen_bh = bh;
  assert_int_equal(resil_bulkhead_try_acquire(bh, NULL), 1);
  resil_cancel *c;
  assert_status(RESIL_OK, resil_cancel_new(&c));
  resil_cancel_signal(c);
  resil_ctx ctx;
  resil_ctx_init(&ctx);
  ctx.cancel = c;
  int64_t t0 = resil_clock_now_ns(NULL);
  assert_int_equal(bh_acquire(bh, &ctx), RESIL_REASON_CANCELLED);
  resil_outcome ok = resil_outcome_ok();
  calls = 0;
  resil_outcome o = resil_bulkhead_run(bh, &ctx, returns, &ok);
  assert_int_equal(o.kind, RESIL_NOT_SENT);
  assert_int_equal(o.reason, RESIL_REASON_CANCELLED);
  assert_int_equal(calls, 0);
  assert_true(resil_clock_now_ns(NULL) - t0 < MS(1000));
  resil_bulkhead_metrics m;
  assert_status(RESIL_OK, resil_bulkhead_get_metrics(bh, &m));
  assert_int_equal(m.rejected, 2);
  assert_int_equal(m.in_flight, 1);
  resil_bulkhead_release(bh);
  resil_cancel_free(c);
  resil_bulkhead_free(bh);
}

static void bulkhead_waits_up_to_max_wait_then_rejects(void **state) {
  (void)state;
  resil_bulkhead *bh = make(1, MS(20));
  assert_int_equal(resil_bulkhead_try_acquire(bh, NULL), 1);
  int64_t t0 = resil_clock_now_ns(NULL);
  assert_int_equal(bh_acquire(bh, NULL), RESIL_REASON_BULKHEAD_FULL);
  int64_t waited = resil_clock_now_ns(NULL) - t0;
  assert_true(waited >= MS(20));
  assert_true(waited < MS(2000));
  resil_bulkhead_release(bh);
  resil_bulkhead_free(bh);
}

static void bulkhead_misuse_is_reported_not_crashed(void **state) {
  (void)state;
  assert_int_equal(resil_bulkhead_try_acquire(NULL, NULL), 0);
  assert_int_equal(bh_acquire(NULL, NULL), RESIL_REASON_LOCAL_ERROR);
  assert_status(RESIL_EMISUSE, resil_bulkhead_release(NULL));
  assert_int_equal(resil_bulkhead_available(NULL), 0);
  assert_null(resil_bulkhead_name(NULL));
  resil_bulkhead_metrics m;
  assert_status(RESIL_EMISUSE, resil_bulkhead_get_metrics(NULL, &m));
  resil_bulkhead *bh = make(1, 0);
  assert_status(RESIL_EINVAL, resil_bulkhead_get_metrics(bh, NULL));
  resil_outcome o = resil_bulkhead_run(bh, NULL, NULL, NULL);
  assert_int_equal(o.kind, RESIL_NOT_SENT);
  assert_int_equal(o.reason, RESIL_REASON_LOCAL_ERROR);
  assert_int_equal(resil_bulkhead_available(bh), 1);
  /* A ctx never passed through resil_ctx_init(): no slot taken, nothing
   * counted. */
  resil_ctx raw;
  memset(&raw, 0, sizeof raw);
  assert_int_equal(bh_acquire(bh, &raw), RESIL_REASON_LOCAL_ERROR);
  resil_outcome ok = resil_outcome_ok();
  calls = 0;
  o = resil_bulkhead_run(bh, &raw, returns, &ok);
  assert_int_equal(o.reason, RESIL_REASON_LOCAL_ERROR);
  assert_int_equal(calls, 0);
  assert_int_equal(resil_bulkhead_available(bh), 1);
  resil_bulkhead_metrics bm;
  assert_status(RESIL_OK, resil_bulkhead_get_metrics(bh, &bm));
  assert_int_equal(bm.rejected, 0);
  assert_int_equal(bm.struct_size, sizeof bm);
  resil_bulkhead_free(bh);
}

/* ---- thread pool: configuration only (threads run in the _mt tests) ---- */

static void threadpool_defaults_and_validation(void **state) {
  (void)state;
  resil_threadpool_config cfg;
  resil_threadpool_config_init(&cfg);
  assert_int_equal(cfg.struct_size, sizeof cfg);
  assert_string_equal(cfg.name, "threadpool");
  assert_true(cfg.threads >= 1);
  assert_int_equal(cfg.queue_capacity, 100);
  resil_threadpool *tp = NULL;
  resil_error err;
  cfg.threads = 0;
  assert_status(RESIL_EINVAL, resil_threadpool_new(&cfg, &tp, &err));
  assert_string_equal(err.field, "threads");
  assert_int_equal(err.min, 1);
  assert_int_equal(err.max, 1024);
  assert_int_equal(err.got, 0);
  cfg.threads = 1;
  cfg.queue_capacity = 1000001;
  assert_status(RESIL_EINVAL, resil_threadpool_new(&cfg, &tp, &err));
  assert_string_equal(err.field, "queue_capacity");
  assert_int_equal(err.max, 1000000);
  assert_int_equal(err.got, 1000001);
  assert_null(tp);
  resil_threadpool_free(NULL);
}

static void threadpool_allocation_failures_leak_nothing(void **state) {
  (void)state;
  resil_threadpool_config cfg;
  resil_threadpool_config_init(&cfg);
  cfg.threads = 2;
  long n = 1;
  for (;; n++) {
    test_alloc ta;
    test_alloc_init(&ta, n);
    cfg.alloc = &ta.a;
    resil_threadpool *tp = NULL;
    resil_status st = resil_threadpool_new(&cfg, &tp, NULL);
    if (st == RESIL_OK) {
      resil_threadpool_free(tp);
      assert_int_equal(ta.live, 0);
      break;
    }
    assert_status(RESIL_ENOMEM, st);
    assert_null(tp);
    assert_int_equal(ta.live, 0);
  }
  assert_true(n > 2);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(bulkhead_defaults_match_resilience4j),
      cmocka_unit_test(
          bulkhead_rejects_invalid_config_naming_field_range_and_value),
      cmocka_unit_test(bulkhead_allocation_failures_leak_nothing),
      cmocka_unit_test(
          bulkhead_try_acquire_fills_then_rejects_and_release_restores),
      cmocka_unit_test(
          bulkhead_release_without_a_slot_is_misuse_and_never_exceeds_max),
      cmocka_unit_test(bulkhead_run_returns_the_slot_on_every_outcome),
      cmocka_unit_test(bulkhead_run_without_ctx_gives_fn_a_ctx_on_its_clock),
      cmocka_unit_test(bulkhead_run_when_full_rejects_without_calling),
      cmocka_unit_test(bulkhead_wait_is_cut_by_a_passed_deadline),
      cmocka_unit_test(bulkhead_cancelled_wait_ends_without_calling),
      cmocka_unit_test(bulkhead_waits_up_to_max_wait_then_rejects),
      cmocka_unit_test(bulkhead_misuse_is_reported_not_crashed),
      cmocka_unit_test(threadpool_defaults_and_validation),
      cmocka_unit_test(threadpool_allocation_failures_leak_nothing),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
