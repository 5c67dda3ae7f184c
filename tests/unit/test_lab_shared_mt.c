/* Lab experiments M (tools/lab/exp_shared.c): state shared by forked
 * worker processes through a segment in a temporary directory, by
 * successive `resil call --state` invocations (M5, RESIL_BIN: the built
 * tool), and the fallback when the segment cannot be opened (M6). Each
 * must pass, and its wrong variant must fail through the named check. M3
 * takes 3 s per run. */
#include <stdio.h>
#include <string.h>

#include "test_lab_common.h"
#include "test_util.h"

static const char *str(json_t *o, const char *k) {
  json_t *v = json_object_get(o, k);
  if (!json_is_string(v)) fail_msg("observed.%s missing", k);
  return json_string_value(v);
}

static void m1_eight_processes_open_one_shared_breaker(void **s) {
  (void)s;
  const lab_experiment *e = find("M1");
  lab_result r;
  lab_run_one(e, &r);
  print_message("M1: %s\n", r.summary);
  json_t *o = r.observed;
  assert_int_equal(obs_int(o, "workers"), 8);
  assert_in_range(obs_int(o, "upstream_calls_before_open"), 20, 27);
  assert_string_equal(str(o, "breaker_state"), "OPEN");
  assert_true(obs_int(o, "wrong_variant_calls") >= 100);
  if (!r.pass) fail_msg("M1 failed: %s", r.failure);
  lab_result_clear(&r);

  wrong_fails(e, &r);
  assert_true(obs_int(r.observed, "upstream_calls_before_open") >= 100);
  lab_result_clear(&r);
}

static double real(json_t *o, const char *k) {
  json_t *v = json_object_get(o, k);
  if (!json_is_real(v)) fail_msg("observed.%s missing", k);
  return json_real_value(v);
}

static void m2_half_open_lets_one_probe_in_per_period_across_processes(void **s) {
  (void)s;
  const lab_experiment *e = find("M2");
  lab_result r;
  lab_run_one(e, &r);
  print_message("M2: %s\n", r.summary);
  json_t *o = r.observed;
  assert_int_equal(obs_int(o, "workers"), 8);
  assert_int_equal(obs_int(o, "probes_seen"), 1);
  assert_true(obs_int(o, "half_open_periods") >= 3);
  assert_int_equal(obs_int(o, "probes"), obs_int(o, "half_open_periods"));
  assert_true(obs_int(o, "rejected") >= 7);
  if (!r.pass) fail_msg("M2 failed: %s", r.failure);
  lab_result_clear(&r);

  wrong_fails(e, &r);
  assert_true(obs_int(r.observed, "probes_seen") > 1);
  lab_result_clear(&r);
}

static void m3_eight_processes_share_one_rate_limiter(void **s) {
  (void)s;
  const lab_experiment *e = find("M3");
  lab_result r;
  lab_run_one(e, &r);
  print_message("M3: %s\n", r.summary);
  json_t *o = r.observed;
  assert_int_equal(obs_int(o, "workers"), 8);
  assert_true(obs_int(o, "admitted") <= obs_int(o, "bound"));
  assert_true(obs_int(o, "bound") >= 300); /* 30 cycles of 100 ms + the first */
  assert_true(real(o, "ratio") <= 1.0);
  if (!r.pass) fail_msg("M3 failed: %s", r.failure);
  lab_result_clear(&r);

  wrong_fails(e, &r);
  assert_true(obs_int(r.observed, "admitted") > 2 * obs_int(r.observed, "bound"));
  lab_result_clear(&r);
}

#ifdef RESIL_HAVE_FIXTURE
static void m5_resil_call_state_in_a_shell_loop_opens_the_breaker_across_invocations(void **s) {
  (void)s;
  const lab_experiment *e = find("M5");
  lab_result r;
  lab_run_one(e, &r);
  print_message("M5: %s\n", r.summary);
  json_t *o = r.observed;
  if (!r.pass) fail_msg("M5 failed: %s", r.failure);
  assert_int_equal(obs_int(o, "invocations"), 25);
  assert_int_equal(obs_int(o, "upstream_calls"), obs_int(o, "window_minimum"));
  assert_int_equal(obs_int(o, "rejected_invocations"), 20);
  assert_int_equal(obs_int(o, "probe_after_wait"), 1);
  assert_string_equal(str(o, "breaker_state"), "OPEN");
  assert_string_equal(str(o, "exit_statuses_after_wait"), "6 7");
  lab_result_clear(&r);

  /* Without --state every invocation has its own breaker: all 25 (and
   * both after the wait) reach the upstream. */
  wrong_fails(e, &r);
  assert_int_equal(obs_int(r.observed, "upstream_calls"), 25);
  assert_int_equal(obs_int(r.observed, "rejected_invocations"), 0);
  lab_result_clear(&r);
}
#endif

static void m6_a_segment_that_cannot_be_opened_falls_back_with_one_event(void **s) {
  (void)s;
  const lab_experiment *e = find("M6");
  lab_result r;
  lab_run_one(e, &r);
  print_message("M6: %s\n", r.summary);
  print_message("M6 exercised %s\n", str(r.observed, "exercised"));
  json_t *o = r.observed;
  if (!r.pass) fail_msg("M6 failed: %s", r.failure);
  assert_int_equal(obs_int(o, "fallback_events"), 1);
  assert_int_equal(obs_int(o, "resil_shared_fallback_total"), 1);
  assert_int_equal(obs_int(o, "breaker_open_after_failures"), 4);
  assert_string_equal(str(o, "second_handle_state"), "CLOSED");
  assert_non_null(strstr(str(o, "required_error"), "RESIL_ESTATE: segment: cannot open segment "));
  assert_non_null(strstr(str(o, "required_error"), "Permission denied"));
  lab_result_clear(&r);

  /* A segment it can open: no fallback, and the second handle shares the
   * first one's OPEN state. */
  wrong_fails(e, &r);
  assert_int_equal(obs_int(r.observed, "fallback_events"), 0);
  assert_string_equal(str(r.observed, "second_handle_state"), "OPEN");
  lab_result_clear(&r);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(m1_eight_processes_open_one_shared_breaker),
      cmocka_unit_test(m2_half_open_lets_one_probe_in_per_period_across_processes),
      cmocka_unit_test(m3_eight_processes_share_one_rate_limiter),
#ifdef RESIL_HAVE_FIXTURE
      cmocka_unit_test(m5_resil_call_state_in_a_shell_loop_opens_the_breaker_across_invocations),
#endif
      cmocka_unit_test(m6_a_segment_that_cannot_be_opened_falls_back_with_one_event),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
