/* Status table, errors, outcomes, clocks, context and cancellation. */
#include <stdint.h>
#include <string.h>

#include "core/internal.h"
#include "test_util.h"

static void status_names_and_messages_come_from_one_table(void **state) {
  (void)state;
  assert_string_equal(resil_status_name(RESIL_OK), "RESIL_OK");
  assert_string_equal(resil_status_name(RESIL_EINVAL), "RESIL_EINVAL");
  assert_string_equal(resil_strerror(RESIL_ENOMEM), "out of memory");
  assert_string_equal(resil_strerror((resil_status)999), "unknown status");
  assert_string_equal(resil_status_name((resil_status)999), "RESIL_UNKNOWN");
  for (int s = 0; s < (int)RESIL_STATUS_COUNT_; s++) {
    assert_non_null(resil_strerror((resil_status)s));
    assert_string_not_equal(resil_strerror((resil_status)s), "unknown status");
  }
}

static void range_error_carries_field_range_and_value(void **state) {
  (void)state;
  resil_error e;
  resil_error_clear(&e);
  assert_int_equal(resil__check_range(&e, "window_size", 0, 1, 100),
                   RESIL_EINVAL);
  assert_int_equal(e.status, RESIL_EINVAL);
  assert_string_equal(e.field, "window_size");
  assert_int_equal(e.has_range, 1);
  assert_int_equal(e.min, 1);
  assert_int_equal(e.max, 100);
  assert_int_equal(e.got, 0);
  assert_string_equal(e.msg, "window_size: must be 1..100, got 0");
  assert_int_equal(resil__check_range(&e, "x", 5, 1, 100), RESIL_OK);
  assert_int_equal(resil__check_range(NULL, "x", 500, 1, 100), RESIL_EINVAL);
}

/* The policies' fast paths take resil__common_success for the class
 * SUCCESS without classifying: it must never say 1 for an outcome that
 * resil_outcome_classify() puts in another class, and says 1 for the two
 * common successes, a plain one and an HTTP 2xx. */
static void common_success_is_only_ever_the_success_class(void **state) {
  (void)state;
  static const int statuses[] = {INT32_MIN, -200, -1, 0, 1, 99, 100, 101, 199, 200, 201,
                                 204, 250, 299, 300, 302, 304, 399, 400, 404, 408, 425,
                                 429, 499, 500, 503, 599, 600, 1000, INT32_MAX};
  int ones = 0;
  for (int kind = 0; kind <= (int)RESIL_REJECTED + 1; kind++)
    for (int reason = 0; reason <= (int)RESIL_REASON_COUNT_; reason++)
      for (size_t i = 0; i < sizeof statuses / sizeof *statuses; i++) {
        resil_outcome o = resil_outcome_make((resil_outcome_kind)kind, (resil_reason)reason);
        o.http_status = statuses[i];
        if (!resil__common_success(o.kind, o.reason, o.http_status)) continue;
        ones++;
        if (resil_outcome_classify(&o) != RESIL_CLASS_SUCCESS)
          fail_msg("kind %d reason %d status %d: common success, class %d", kind, reason,
                   statuses[i], (int)resil_outcome_classify(&o));
      }
  assert_true(ones > 0);
  resil_outcome o = resil_outcome_ok();
  assert_true(resil__common_success(o.kind, o.reason, o.http_status));
  for (int st = 200; st < 300; st++) {
    o = resil_outcome_http(st);
    assert_true(resil__common_success(o.kind, o.reason, o.http_status));
  }
  static const int not_common[] = {100, 199, 300, 304, 404, 429, 500, 599};
  for (size_t i = 0; i < sizeof not_common / sizeof *not_common; i++) {
    o = resil_outcome_http(not_common[i]);
    assert_false(resil__common_success(o.kind, o.reason, o.http_status));
  }
}

static void outcome_classes_follow_design_table(void **state) {
  (void)state;
  resil_outcome o = resil_outcome_http(200);
  assert_int_equal(resil_outcome_classify(&o), RESIL_CLASS_SUCCESS);
  o = resil_outcome_http(404);
  assert_int_equal(resil_outcome_classify(&o), RESIL_CLASS_CLIENT_ERROR);
  assert_false(resil_outcome_maybe_executed(&o));
  int throttled[] = {408, 425, 429};
  resil_outcome_class throttled_class[] = {RESIL_CLASS_HTTP_408, RESIL_CLASS_HTTP_425,
                                           RESIL_CLASS_HTTP_429};
  for (size_t i = 0; i < 3; i++) {
    o = resil_outcome_http(throttled[i]);
    assert_int_equal(resil_outcome_classify(&o), throttled_class[i]);
    assert_true(RESIL_CLASSES_THROTTLED & RESIL_CLASS_BIT(resil_outcome_classify(&o)));
    assert_true(resil_outcome_maybe_executed(&o));
  }
  o = resil_outcome_http(302);
  assert_int_equal(resil_outcome_classify(&o), RESIL_CLASS_REDIRECT);
  assert_true(resil_outcome_is_success(&o));
  o = resil_outcome_http(503);
  assert_int_equal(resil_outcome_classify(&o), RESIL_CLASS_SERVER_ERROR);
  assert_true(resil_outcome_maybe_executed(&o));
  o = resil_outcome_make(RESIL_NOT_SENT, RESIL_REASON_CONNECT_REFUSED);
  assert_int_equal(resil_outcome_classify(&o), RESIL_CLASS_NOT_SENT);
  assert_false(resil_outcome_maybe_executed(&o));
  o.flags |= RESIL_OF_PRIOR_MAYBE_EXECUTED;
  assert_true(resil_outcome_maybe_executed(&o));
  o = resil_outcome_make(RESIL_UNKNOWN, RESIL_REASON_TIMEOUT);
  assert_true(resil_outcome_maybe_executed(&o));
  o = resil_outcome_make(RESIL_REJECTED, RESIL_REASON_BREAKER_OPEN);
  assert_int_equal(resil_outcome_classify(&o), RESIL_CLASS_REJECTED);
  o = resil_outcome_failure();
  assert_int_equal(resil_outcome_classify(&o), RESIL_CLASS_SERVER_ERROR);
  o = resil_outcome_ok();
  assert_true(resil_outcome_is_success(&o));
  char buf[64];
  o = resil_outcome_http(503);
  assert_string_equal(resil_outcome_format(&o, buf, sizeof buf), "ANSWERED(503)");
  o = resil_outcome_make(RESIL_UNKNOWN, RESIL_REASON_TIMEOUT);
  assert_string_equal(resil_outcome_format(&o, buf, sizeof buf),
                      "UNKNOWN(timeout after sending)");
}

static void manual_clock_moves_only_when_told(void **state) {
  (void)state;
  resil_manual_clock *mc = NULL;
  assert_status(RESIL_OK, resil_manual_clock_new(MS(5), 1000, &mc));
  const resil_clock *c = resil_manual_clock_get(mc);
  assert_int_equal(resil_clock_now_ns(c), MS(5));
  resil_manual_clock_advance_ns(mc, MS(2000));
  assert_int_equal(resil_clock_now_ns(c), MS(2005));
  assert_int_equal(resil_clock_wall_ms(c), 3000);
  assert_int_equal(resil_clock_sleep_ns(c, MS(7), NULL), 0);
  assert_int_equal(resil_manual_clock_now_ns(mc), MS(2012));
  assert_int_equal(resil_manual_clock_slept_ns(mc), MS(7));
  resil_manual_clock_free(mc);
}

static void ctx_deadline_and_attempt_timeout(void **state) {
  (void)state;
  resil_manual_clock *mc = NULL;
  assert_status(RESIL_OK, resil_manual_clock_new(0, 0, &mc));
  resil_ctx ctx;
  resil_ctx_init(&ctx);
  ctx.clock = resil_manual_clock_get(mc);
  assert_int_equal(resil_ctx_remaining_ns(&ctx), INT64_MAX);
  assert_int_equal(resil_ctx_attempt_timeout_ns(&ctx, MS(400)), MS(400));
  resil_ctx_set_timeout_ns(&ctx, MS(700));
  assert_int_equal(resil_ctx_remaining_ns(&ctx), MS(700));
  resil_manual_clock_advance_ns(mc, MS(500));
  assert_int_equal(resil_ctx_attempt_timeout_ns(&ctx, MS(400)), MS(200));
  assert_int_equal(resil_ctx_attempt_timeout_ns(&ctx, 0), MS(200));
  resil_manual_clock_advance_ns(mc, MS(900));
  assert_int_equal(resil_ctx_remaining_ns(&ctx), 0);
  /* NULL is the defaults (no deadline); a ctx never passed through
   * resil_ctx_init() has no time at all (fail closed). */
  assert_int_equal(resil_ctx_remaining_ns(NULL), INT64_MAX);
  resil_ctx raw;
  memset(&raw, 0, sizeof raw);
  raw.deadline_ns = RESIL_NO_DEADLINE;
  assert_int_equal(resil_ctx_remaining_ns(&raw), 0);
  assert_int_equal(resil_ctx_attempt_timeout_ns(&raw, MS(400)), 0);
  resil_ctx_set_timeout_ns(&raw, MS(5)); /* left alone */
  assert_int_equal(raw.deadline_ns, RESIL_NO_DEADLINE);
  resil_manual_clock_free(mc);
}

static void cancel_token_wakes_sleeper(void **state) {
  (void)state;
  resil_cancel *c = NULL;
  assert_status(RESIL_OK, resil_cancel_new(&c));
  assert_false(resil_cancel_is_set(c));
  assert_int_equal(resil_cancel_wait_ns(c, MS(1)), 0);
  resil_cancel_signal(c);
  assert_true(resil_cancel_is_set(c));
  /* A signalled token makes the system sleep return at once with 1. */
  int64_t t0 = resil_clock_now_ns(NULL);
  assert_int_equal(resil_clock_sleep_ns(NULL, MS(5000), c), 1);
  assert_true(resil_clock_now_ns(NULL) - t0 < MS(1000));
  resil_cancel_free(c);
  assert_false(resil_cancel_is_set(NULL));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(status_names_and_messages_come_from_one_table),
      cmocka_unit_test(range_error_carries_field_range_and_value),
      cmocka_unit_test(outcome_classes_follow_design_table),
      cmocka_unit_test(common_success_is_only_ever_the_success_class),
      cmocka_unit_test(manual_clock_moves_only_when_told),
      cmocka_unit_test(ctx_deadline_and_attempt_timeout),
      cmocka_unit_test(cancel_token_wakes_sleeper),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
