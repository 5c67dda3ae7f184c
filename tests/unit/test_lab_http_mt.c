/* The lab's HTTP experiments (H1-H16, P13) run here against the in-process
 * fixture, and the numbers DESIGN §7 gives are asserted again from each
 * experiment's evidence object. */
#include <string.h>

#include "lab.h"
#include "test_util.h"

static json_t *run(const char *id, lab_result *r) {
  const lab_experiment *e = lab_find(id);
  if (!e) fail_msg("no experiment %s", id);
  if (!lab_run_one(e, r)) fail_msg("%s failed: %s (%s)", id, r->failure, r->summary);
  return r->observed;
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

static void h3_h4_h9_h16_attempt_counts(void **s) {
  (void)s;
  lab_result r;
  json_t *o = run("H3", &r);
  assert_int_equal(num(o, "attempts"), 3);
  assert_int_equal(num(o, "attempts_without_retry"), 1);
  lab_result_clear(&r);
  o = run("H4", &r);
  assert_int_equal(num(o, "attempts"), 4); /* four calls, one attempt each */
  lab_result_clear(&r);
  o = run("H9", &r);
  assert_int_equal(num(o, "upstream_saw"), 0);
  assert_string_equal(str(o, "outcome"), "NOT_SENT(connection pool lease timeout)");
  lab_result_clear(&r);
  o = run("H16", &r);
  assert_int_equal(num(o, "effects"), 1);
  assert_int_equal(num(o, "resends_prevented"), 1);
  lab_result_clear(&r);
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

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(every_http_experiment_reports_attempts_and_outcome),
      cmocka_unit_test(h5_h6_effects_show_what_the_server_did),
      cmocka_unit_test(h3_h4_h9_h16_attempt_counts),
      cmocka_unit_test(p13_second_attempt_refused_before_sending),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
