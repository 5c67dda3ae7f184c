/* The lab's HTTP experiments (H1-H16, P13) run here against the in-process
 * fixture, and the numbers DESIGN §7 gives are asserted again from each
 * experiment's evidence object. */
#include <stdio.h>
#include <string.h>

#include "lab.h"
#include "test_util.h"

static json_t *run(const char *id, lab_result *r) {
  const lab_experiment *e = lab_find(id);
  if (!e) fail_msg("no experiment %s", id);
  if (!lab_run_one(e, r)) fail_msg("%s failed: %s (%s)", id, r->failure, r->summary);
  return r->observed;
}

/* Runs the experiment's deliberately wrong variant: it must FAIL, and
 * through each named check of `checks` (space-separated) and the one its
 * table entry names. */
static void run_wrong_fails(const char *id, const char *checks) {
  const lab_experiment *e = lab_find(id);
  if (!e || !e->run_wrong) fail_msg("no wrong variant for %s", id);
  lab_result r;
  if (lab_run_wrong(e, &r) != 0)
    fail_msg("%s run against %s passed: %s", id, e->wrong, r.summary);
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

static long long num(json_t *o, const char *k) {
  json_t *v = json_object_get(o, k);
  if (!json_is_integer(v)) fail_msg("observed.%s missing", k);
  return json_integer_value(v);
}

static const char *str(json_t *o, const char *k) {
  json_t *v = json_object_get(o, k);
  if (!json_is_string(v)) fail_msg("observed.%s missing", k);
  return json_string_value(v);
}

/* Every H experiment reports attempts and outcome (the evidence format). */
static void every_http_experiment_reports_attempts_and_outcome(void **s) {
  (void)s;
  for (const lab_experiment *e = lab_http_experiments; e->id; e++) {
    lab_result r;
    json_t *o = run(e->id, &r);
    assert_non_null(json_object_get(o, "attempts"));
    assert_non_null(json_object_get(o, "outcome"));
    lab_result_clear(&r);
  }
}

static void h5_h6_effects_show_what_the_server_did(void **s) {
  (void)s;
  lab_result r;
  json_t *o = run("H5", &r);
  assert_int_equal(num(o, "effects"), 1);
  assert_string_equal(str(o, "outcome"), "UNKNOWN(timeout after sending)");
  lab_result_clear(&r);
  o = run("H6", &r);
  assert_int_equal(num(o, "unsafe_effects"), 3);
  assert_int_equal(num(o, "safe_effects"), 1);
  assert_int_equal(num(o, "keyed_effects"), 1);
  lab_result_clear(&r);
}

static void h3_each_wait_is_the_capped_retry_after(void **s) {
  (void)s;
  lab_result r;
  json_t *o = run("H3", &r);
  assert_int_equal(num(o, "attempts"), 3);
  assert_int_equal(num(o, "upstream_attempts"), 3);
  assert_int_equal(num(o, "attempts_without_retry"), 1);
  assert_int_equal(num(o, "upstream_attempts_without_retry"), 1);
  json_t *w = json_object_get(o, "waits_ms"), *m = json_object_get(o, "measured_waits_ms");
  assert_int_equal(json_array_size(w), 2);
  assert_int_equal(json_array_size(m), 2);
  for (size_t i = 0; i < 2; i++) {
    assert_int_equal(json_integer_value(json_array_get(w, i)), 50);
    assert_true(json_real_value(json_array_get(m, i)) >= 49.5);
  }
  lab_result_clear(&r);
}

static void h3_with_retry_after_ignored_fails(void **s) {
  (void)s;
  /* The planned waits catch it. The measured ones nearly always do too,
   * but a 20 ms sleep delayed by 30 ms on an overloaded machine would
   * measure as 50 ms, so that is not asserted here. */
  run_wrong_fails("H3", "waits_are_capped_retry_after");
}

static void h4_h8_h9_h13_h14_measured_attempts(void **s) {
  (void)s;
  lab_result r;
  json_t *o = run("H4", &r);
  assert_int_equal(num(o, "attempts"), 4); /* four calls, one attempt each */
  assert_int_equal(num(o, "client_attempts"), 4);
  assert_string_equal(str(o, "outcome"), "ANSWERED(503), ANSWERED(429)");
  lab_result_clear(&r);
  o = run("H8", &r);
  assert_int_equal(num(o, "attempts"), 2);
  assert_int_equal(num(o, "connections"), 1);
  assert_string_equal(str(o, "outcome"), "ANSWERED(200)");
  lab_result_clear(&r);
  o = run("H9", &r);
  assert_int_equal(num(o, "attempts"), 1);
  assert_int_equal(num(o, "lease_timeouts"), 1);
  assert_int_equal(num(o, "upstream_saw"), 0);
  assert_string_equal(str(o, "outcome"), "NOT_SENT(connection pool lease timeout)");
  lab_result_clear(&r);
  o = run("H13", &r);
  assert_int_equal(num(o, "attempts"), 5); /* one call per log level */
  assert_int_equal(num(o, "secrets_found"), 0);
  assert_string_equal(str(o, "outcome"), "ANSWERED(200)");
  lab_result_clear(&r);
  o = run("H14", &r);
  assert_int_equal(num(o, "attempts"), 2);
  assert_string_equal(str(o, "outcome"), "ANSWERED(200), ANSWERED(200)");
  lab_result_clear(&r);
}

static void h16_post_not_resent(void **s) {
  (void)s;
  lab_result r;
  json_t *o = run("H16", &r);
  assert_int_equal(num(o, "effects"), 1);
  assert_int_equal(num(o, "attempts"), 1);
  assert_int_equal(num(o, "upstream_saw"), 1);
  assert_int_equal(num(o, "resends_prevented"), 1);
  assert_int_equal(num(o, "resends_counted"), 0);
  lab_result_clear(&r);
}

static void h16_with_the_resend_allowed_fails(void **s) {
  (void)s;
  run_wrong_fails("H16", "one_effect resend_refused");
}

static void p13_second_attempt_refused_before_sending(void **s) {
  (void)s;
  lab_result r;
  json_t *o = run("P13", &r);
  assert_int_equal(num(o, "attempts"), 1);
  assert_int_equal(num(o, "upstream_saw"), 1);
  assert_string_equal(str(o, "stop"), "DEADLINE");
  assert_int_equal(num(o, "bulkhead_available"), 4);
  assert_int_equal(num(o, "recovered_attempts"), 1);
  lab_result_clear(&r);
}

static void p13_without_the_minimum_attempt_budget_fails(void **s) {
  (void)s;
  run_wrong_fails("P13", "second_refused_by_deadline upstream_saw_one");
}

/* Every other experiment's wrong variant fails through the check its
 * table entry names (H3, H16 and P13 have tests of their own above). */
static void every_other_wrong_variant_fails(void **s) {
  (void)s;
  static const char *const own[] = {"H3", "H16", "P13"};
  int n = 0;
  for (const lab_experiment *e = lab_http_experiments; e->id; e++) {
    int skip = 0;
    for (size_t i = 0; i < sizeof own / sizeof own[0]; i++)
      if (strcmp(e->id, own[i]) == 0) skip = 1;
    if (skip) continue;
    if (!e->run_wrong) fail_msg("%s has no wrong variant", e->id);
    run_wrong_fails(e->id, e->wrong_fails);
    n++;
  }
  assert_int_equal(n, 14);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(every_http_experiment_reports_attempts_and_outcome),
      cmocka_unit_test(h5_h6_effects_show_what_the_server_did),
      cmocka_unit_test(h3_each_wait_is_the_capped_retry_after),
      cmocka_unit_test(h3_with_retry_after_ignored_fails),
      cmocka_unit_test(h4_h8_h9_h13_h14_measured_attempts),
      cmocka_unit_test(h16_post_not_resent),
      cmocka_unit_test(h16_with_the_resend_allowed_fails),
      cmocka_unit_test(p13_second_attempt_refused_before_sending),
      cmocka_unit_test(p13_without_the_minimum_attempt_budget_fails),
      cmocka_unit_test(every_other_wrong_variant_fails),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
