/* Every policy experiment of the lab (P1-P12, P14) runs here too, and the
 * observed values DESIGN §7 gives are asserted again from the evidence
 * object, independently of the experiment's own verdict. The experiments
 * use real threads (P5, P10, P11), so this is also a concurrency test. */
#include <stdio.h>
#include <string.h>

#include "lab.h"
#include "test_util.h"

static json_t *run(const char *id, lab_result *r) {
  const lab_experiment *e = lab_find(id);
  assert_non_null(e);
  int pass = lab_run_one(e, r);
  if (!pass) fail_msg("%s failed: %s (%s)", id, r->failure, r->summary);
  assert_non_null(r->observed);
  return r->observed;
}

/* Runs the experiment's deliberately wrong variant: it must FAIL, and
 * through each named check of `checks` (space-separated) and the one its
 * table entry names. */
static void run_wrong_fails(const char *id, const char *checks) {
  const lab_experiment *e = lab_find(id);
  assert_non_null(e);
  assert_non_null(e->run_wrong);
  lab_result r;
  int pass = lab_run_wrong(e, &r);
  if (pass != 0) fail_msg("%s run against %s passed: %s", id, e->wrong, r.summary);
  assert_int_equal(r.pass, 0);
  char list[128];
  snprintf(list, sizeof list, "%s", checks);
  for (char *save = NULL, *c = strtok_r(list, " ", &save); c; c = strtok_r(NULL, " ", &save))
    if (!lab_check_failed(&r, c))
      fail_msg("%s against %s: check %s did not fail (failed: %s; %s)", id, e->wrong, c,
               r.failed_checks, r.failure);
  assert_true(lab_check_failed(&r, e->wrong_fails));
  print_message("%s against %s fails as it must: [%s] %s\n", id, e->wrong, r.failed_checks,
                r.failure);
  lab_result_clear(&r);
}

static long long obs_int(json_t *o, const char *k) {
  json_t *v = json_object_get(o, k);
  if (!json_is_integer(v)) fail_msg("observed.%s missing or not an integer", k);
  return json_integer_value(v);
}

static const char *obs_str(json_t *o, const char *k) {
  json_t *v = json_object_get(o, k);
  if (!json_is_string(v)) fail_msg("observed.%s missing or not a string", k);
  return json_string_value(v);
}

static void p1_retry_outside_breaker_makes_one_physical_call(void **s) {
  (void)s;
  lab_result r;
  json_t *o = run("P1", &r);
  assert_int_equal(obs_int(o, "physical_calls"), 1);
  assert_string_equal(obs_str(o, "breaker_state"), "OPEN");
  assert_string_equal(obs_str(o, "outcome"), "REJECTED(circuit breaker open)");
  lab_result_clear(&r);
}

static void p2_breaker_outside_retry_sees_one_success(void **s) {
  (void)s;
  lab_result r;
  json_t *o = run("P2", &r);
  assert_int_equal(obs_int(o, "physical_calls"), 3);
  assert_string_equal(obs_str(o, "breaker_state"), "CLOSED");
  assert_int_equal(obs_int(o, "breaker_successes"), 1);
  assert_int_equal(obs_int(o, "breaker_failures"), 0);
  lab_result_clear(&r);
}

static void p3_breaker_failures_depend_on_position(void **s) {
  (void)s;
  lab_result r;
  json_t *o = run("P3", &r);
  assert_int_equal(obs_int(o, "retry_outside_failures"), 3);
  assert_int_equal(obs_int(o, "breaker_outside_failures"), 1);
  lab_result_clear(&r);
}

static void p4_rate_limiter_permits(void **s) {
  (void)s;
  lab_result r;
  json_t *o = run("P4", &r);
  json_t *p = json_object_get(o, "permits");
  assert_int_equal(json_array_size(p), 3);
  assert_true(json_is_true(json_array_get(p, 0)));
  assert_true(json_is_true(json_array_get(p, 1)));
  assert_true(json_is_false(json_array_get(p, 2)));
  assert_int_equal(obs_int(o, "available"), 0);
  lab_result_clear(&r);
}

static void p5_bulkhead_rejects_third_at_once(void **s) {
  (void)s;
  lab_result r;
  json_t *o = run("P5", &r);
  assert_int_equal(obs_int(o, "business_calls"), 2);
  assert_int_equal(obs_int(o, "available_after_release"), 2);
  assert_int_equal(obs_int(o, "peak_in_flight"), 2);
  lab_result_clear(&r);
}

static void p6_breaker_state_sequence(void **s) {
  (void)s;
  lab_result r;
  json_t *o = run("P6", &r);
  const char *want[] = {"CLOSED", "OPEN", "OPEN", "OPEN", "CLOSED"};
  json_t *st = json_object_get(o, "states");
  assert_int_equal(json_array_size(st), 5);
  for (size_t i = 0; i < 5; i++)
    assert_string_equal(json_string_value(json_array_get(st, i)), want[i]);
  assert_int_equal(obs_int(o, "not_permitted"), 1);
  json_t *tr = json_object_get(o, "transitions");
  const char *want_tr[] = {"CLOSED->OPEN", "OPEN->HALF_OPEN", "HALF_OPEN->OPEN",
                           "OPEN->HALF_OPEN", "HALF_OPEN->CLOSED"};
  assert_int_equal(json_array_size(tr), 5);
  for (size_t i = 0; i < 5; i++)
    assert_string_equal(json_string_value(json_array_get(tr, i)), want_tr[i]);
  lab_result_clear(&r);
}

static void p7_failed_probe_was_admitted_in_half_open(void **s) {
  (void)s;
  lab_result r;
  json_t *o = run("P7", &r);
  assert_true(json_is_true(json_object_get(o, "first_probe_permitted")));
  assert_true(json_is_false(json_object_get(o, "second_probe_permitted")));
  assert_string_equal(obs_str(o, "after_probe_success"), "CLOSED");
  assert_string_equal(obs_str(o, "failed_probe_admitted_in"), "HALF_OPEN");
  assert_string_equal(obs_str(o, "after_probe_failure"), "OPEN");
  lab_result_clear(&r);
}

static void p7_with_two_probes_fails(void **s) {
  (void)s;
  run_wrong_fails("P7", "one_probe_admitted");
}

static void p8_p11_p12_pass(void **s) {
  (void)s;
  const char *ids[] = {"P8", "P11", "P12"};
  for (size_t i = 0; i < sizeof ids / sizeof ids[0]; i++) {
    lab_result r;
    run(ids[i], &r);
    lab_result_clear(&r);
  }
}

static void p9_planned_waits_are_20_and_40_ms(void **s) {
  (void)s;
  lab_result r;
  json_t *o = run("P9", &r);
  json_t *pl = json_object_get(o, "planned_waits_ms");
  assert_true(json_array_size(pl) >= 1);
  for (size_t i = 0; i < json_array_size(pl); i++) {
    json_t *one = json_array_get(pl, i);
    assert_int_equal(json_array_size(one), 2);
    assert_int_equal(json_integer_value(json_array_get(one, 0)), 20);
    assert_int_equal(json_integer_value(json_array_get(one, 1)), 40);
  }
  assert_int_equal(obs_int(o, "attempts"), 3);
  assert_int_equal(obs_int(o, "non_retryable_attempts"), 1);
  lab_result_clear(&r);
}

static void p9_with_a_fixed_40_ms_wait_fails(void **s) {
  (void)s;
  /* The planned waits, and the measured gaps on their own, catch it. */
  run_wrong_fails("P9", "planned_waits_20_40 gap1_below_40");
}

static void p10_both_tasks_saw_the_cancellation(void **s) {
  (void)s;
  lab_result r;
  json_t *o = run("P10", &r);
  assert_int_equal(obs_int(o, "attempts"), 2);
  assert_int_equal(obs_int(o, "effects"), 2);
  assert_int_equal(obs_int(o, "finished_after_release"), 2);
  assert_int_equal(obs_int(o, "tasks_saw_cancel"), 2);
  lab_result_clear(&r);
}

static void p10_without_cancellation_fails(void **s) {
  (void)s;
  run_wrong_fails("P10", "tasks_saw_cancel");
}

static void p14_amplification_computed_and_measured(void **s) {
  (void)s;
  lab_result r;
  json_t *o = run("P14", &r);
  assert_int_equal(obs_int(o, "attempts_2x3x2"), 12);
  assert_int_equal(obs_int(o, "measured_calls_2x3x2"), 12);
  assert_int_equal(obs_int(o, "measured_backoff_2x3x2_ms"), 700);
  assert_int_equal(obs_int(o, "attempts_retries_2_3_2"), 36);
  assert_int_equal(obs_int(o, "measured_calls_retries_2_3_2"), 36);
  json_t *la = json_object_get(o, "layer_attempts_retries_2_3_2");
  assert_int_equal(json_array_size(la), 3);
  assert_int_equal(json_integer_value(json_array_get(la, 0)), 3);
  assert_int_equal(json_integer_value(json_array_get(la, 1)), 4);
  assert_int_equal(json_integer_value(json_array_get(la, 2)), 3);
  lab_result_clear(&r);
}

/* Every policy experiment has a wrong variant, and each fails through the
 * check its table entry names (P7, P9 and P10 also have tests above). */
static void every_wrong_variant_fails(void **s) {
  (void)s;
  int n = 0;
  for (const lab_experiment *e = lab_policy_experiments; e->id; e++, n++) {
    if (!e->run_wrong) fail_msg("%s has no wrong variant", e->id);
    assert_non_null(e->wrong);
    assert_non_null(e->wrong_fails);
    run_wrong_fails(e->id, e->wrong_fails);
  }
  assert_int_equal(n, 13);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(p1_retry_outside_breaker_makes_one_physical_call),
      cmocka_unit_test(p2_breaker_outside_retry_sees_one_success),
      cmocka_unit_test(p3_breaker_failures_depend_on_position),
      cmocka_unit_test(p4_rate_limiter_permits),
      cmocka_unit_test(p5_bulkhead_rejects_third_at_once),
      cmocka_unit_test(p6_breaker_state_sequence),
      cmocka_unit_test(p7_failed_probe_was_admitted_in_half_open),
      cmocka_unit_test(p7_with_two_probes_fails),
      cmocka_unit_test(p8_p11_p12_pass),
      cmocka_unit_test(p9_planned_waits_are_20_and_40_ms),
      cmocka_unit_test(p9_with_a_fixed_40_ms_wait_fails),
      cmocka_unit_test(p10_both_tasks_saw_the_cancellation),
      cmocka_unit_test(p10_without_cancellation_fails),
      cmocka_unit_test(p14_amplification_computed_and_measured),
      cmocka_unit_test(every_wrong_variant_fails),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
