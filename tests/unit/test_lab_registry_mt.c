/* Lab experiment O1 (tools/lab/exp_registry.c): a registry chain drives
 * 1,000 calls on the engine while its file is reloaded 20 times with a
 * changed retry; every call completes once and none mixes generations
 * (measured from the attempt events of each call's key). Its wrong variant
 * (instances looked up by name per attempt, no lease) must fail
 * no_mixed_generations. */
#include <stdio.h>
#include <string.h>

#include "lab.h"
#include "test_util.h"

static long long num(json_t *o, const char *k) {
  json_t *v = json_object_get(o, k);
  if (!json_is_integer(v)) fail_msg("observed.%s missing", k);
  return json_integer_value(v);
}

static void o1_registry_drives_the_engine_across_reloads(void **s) {
  (void)s;
  const lab_experiment *e = lab_find("O1");
  if (!e) {
    print_message("O1: the built-in loop, fixture or libresil-config is not built; skipped\n");
    skip();
  }
  lab_result r;
  lab_run_one(e, &r);
  print_message("O1: %s\n", r.summary);
  json_t *o = r.observed;
  assert_int_equal(num(o, "calls"), 1000);
  assert_int_equal(num(o, "completed"), 1000);
  assert_int_equal(num(o, "ended_twice"), 0);
  assert_int_equal(num(o, "reloads"), 20);
  assert_int_equal(num(o, "mixed_generation_calls"), 0);
  assert_true(num(o, "attempt_events") >= 2000); /* 2 or 3 attempts per call */
  assert_int_equal(num(o, "stray_events"), 0);
  if (!r.pass) fail_msg("O1 failed: %s", r.failure);
  lab_result_clear(&r);

  if (lab_run_wrong(e, &r) != 0) fail_msg("O1 against %s passed: %s", e->wrong, r.summary);
  print_message("O1 against %s fails as it must: [%s] %s\n", e->wrong, r.failed_checks,
                r.summary);
  assert_true(lab_check_failed(&r, e->wrong_fails));
  assert_true(num(r.observed, "mixed_generation_calls") > 0);
  assert_int_equal(num(r.observed, "completed"), 1000);
  lab_result_clear(&r);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(o1_registry_drives_the_engine_across_reloads),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
