/* Lab experiments R (tools/lab/exp_recovery.c): recovery in the seed's
 * order against the fixture. R1, the breaker's ramp after HALF_OPEN ->
 * CLOSED under 10 callers flat out; R2, Retry(Breaker(HTTP)) sends no retry
 * during HALF_OPEN and the ramp; R3, a failure during the ramp reopens the
 * breaker with the next, longer wait and the ramp starts over. Each runs on
 * the blocking path and, when the built-in loop is built, on the async
 * engine (R1/engine, ...: 10 or 4 calls kept in flight, the engine's own
 * retry for R2). On each path each must pass with the figures, and
 * its wrong variant (no ramp, retry_during_recovery = 1,
 * open_wait_multiplier 1) must fail through its named check. */
#include <stdio.h>
#include <string.h>

#include "test_lab_common.h"
#include "test_util.h"

static int yes(json_t *o, const char *k) {
  json_t *v = json_object_get(o, k);
  if (!json_is_boolean(v)) fail_msg("observed.%s missing", k);
  return json_is_true(v);
}

static void r1_figures(json_t *o) {
  assert_true(obs_real(o, "first_bucket_share") <= 0.25);
  assert_true(obs_real(o, "last_bucket_share") >= 0.95);
  assert_true(yes(o, "monotone"));
  assert_true(obs_real(o, "wrong_first_bucket_share") >= 0.95);
  json_t *shares = json_object_get(o, "bucket_shares");
  assert_int_equal(json_array_size(shares), 11);
  for (size_t k = 1; k < json_array_size(shares); k++)
    assert_true(json_number_value(json_array_get(shares, k)) >=
                json_number_value(json_array_get(shares, k - 1)));
  /* The series the report draws. */
  assert_true(json_array_size(json_object_get(o, "ramp_share")) == 11);
  assert_true(json_array_size(json_object_get(o, "ramps")) >= 1);
  assert_true(obs_int(o, "ramp_rejected") > 0);
}

static void r1_the_ramp_grows_and_never_falls(void **s) {
  (void)s;
  on_both_paths("R1", r1_figures);
}

static void r2_figures(json_t *o) {
  assert_int_equal(obs_int(o, "retries_during_recovery"), 0);
  assert_true(obs_int(o, "suppressed_retries") > 0);
  assert_true(obs_int(o, "retries_after_ramp") > 0);
}

static void r2_no_retry_while_recovering(void **s) {
  (void)s;
  on_both_paths("R2", r2_figures);
}

static void r3_figures(json_t *o) {
  assert_true(yes(o, "reopened"));
  assert_true(obs_real(o, "wait_ms") > obs_real(o, "first_wait_ms"));
  assert_true(yes(o, "ramp_restarted"));
  assert_true(obs_real(o, "second_ramp_first_bucket_share") <= 0.25);
}

static void r3_a_failure_in_the_ramp_reopens_with_a_longer_wait(void **s) {
  (void)s;
  on_both_paths("R3", r3_figures);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(r1_the_ramp_grows_and_never_falls),
      cmocka_unit_test(r2_no_retry_while_recovering),
      cmocka_unit_test(r3_a_failure_in_the_ramp_reopens_with_a_longer_wait),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
