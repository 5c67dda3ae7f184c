/* Lab experiment A7 (tools/lab/exp_async_keyed.c): H16 and I1 on the
 * engine, on the built-in loop against the in-process fixture and its
 * store (and I4's commit-then-close). The counts are asserted exactly (no timing bound); the wrong
 * variant (the re-send allowed, a new key per attempt) must fail its named
 * checks. Skipped when the built-in loop, the fixture or the store is not
 * built. */
#include <stdio.h>
#include <string.h>

#include "lab.h"
#include "test_util.h"

static long long num(json_t *o, const char *k) {
  json_t *v = json_object_get(o, k);
  if (!json_is_integer(v)) fail_msg("observed.%s missing", k);
  return json_integer_value(v);
}

static const char *str(json_t *o, const char *k) {
  const char *v = json_string_value(json_object_get(o, k));
  if (!v) fail_msg("observed.%s missing", k);
  return v;
}

static void a7_h16_and_i1_on_the_engine(void **s) {
  (void)s;
  const lab_experiment *e = lab_find("A7");
  if (!e) {
    print_message("A7: the built-in loop, fixture or store is not built; skipped\n");
    skip();
  }
  lab_result r;
  lab_run_one(e, &r);
  print_message("A7: %s\n", r.summary);
  json_t *o = r.observed;
  /* H16: one effect, the re-send refused. */
  assert_int_equal(num(o, "h16_effects"), 1);
  assert_int_equal(num(o, "resends_prevented"), 1);
  assert_non_null(strstr(str(o, "h16_outcome"), "UNKNOWN"));
  /* I1 through the keyed flow: COMMITTED, one write, one effect. */
  assert_int_equal(num(o, "effects"), 1);
  assert_int_equal(num(o, "write_attempts"), 1);
  assert_true(num(o, "status_queries") >= 1);
  assert_string_equal(str(o, "status"), "COMMITTED");
  assert_true(json_is_true(json_object_get(o, "recovered")));
  /* I4 through the keyed flow: commit then close, COMMITTED, one effect. */
  assert_int_equal(num(o, "i4_effects"), 1);
  assert_int_equal(num(o, "i4_write_attempts"), 1);
  assert_true(json_is_true(json_object_get(o, "i4_recovered")));
  assert_int_equal(num(o, "loop_threads"), 1);
  if (!r.pass) fail_msg("A7 failed: %s", r.failure);
  lab_result_clear(&r);

  /* The wrong variant: both parts make more than one effect. */
  if (lab_run_wrong(e, &r) != 0) fail_msg("A7 against %s passed: %s", e->wrong, r.summary);
  print_message("A7 against %s fails as it must: [%s] %s\n", e->wrong, r.failed_checks,
                r.summary);
  assert_true(lab_check_failed(&r, e->wrong_fails));
  assert_true(lab_check_failed(&r, "one_effect"));
  assert_true(lab_check_failed(&r, "h16_one_effect"));
  assert_true(lab_check_failed(&r, "committed"));
  assert_true(lab_check_failed(&r, "i4_one_effect"));
  assert_true(num(r.observed, "i4_effects") >= 2);
  assert_true(num(r.observed, "effects") >= 2);
  assert_int_equal(num(r.observed, "h16_effects"), 2);
  lab_result_clear(&r);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(a7_h16_and_i1_on_the_engine),
  };
  return cmocka_run_group_tests_name("lab A7 (the engine's keyed flow)", tests, NULL, NULL);
}
