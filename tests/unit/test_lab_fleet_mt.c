/* Lab experiment F5 (tools/lab/exp_fleet.c): a fleet of 4 `resil upstream`
 * processes (RESIL_BIN: the built tool) on one PostgreSQL server the
 * experiment starts itself (initdb and postgres in a temp dir), 1,000 keyed
 * payments from one client with the 4 instances, one instance SIGKILLed
 * mid-run and another restarted. It must pass with exactly 1,000 effects
 * counted in the store, and its wrong variant (a new key per attempt, no
 * status query) must fail through no_duplicates. */
#include <stdio.h>
#include <string.h>

#include "test_lab_common.h"
#include "test_util.h"

static long long num(json_t *o, const char *k) {
  json_t *v = json_object_get(o, k);
  if (!json_is_integer(v)) fail_msg("observed.%s missing", k);
  return json_integer_value(v);
}

static void f5_a_fleet_on_one_store_loses_and_repeats_no_payment(void **s) {
  (void)s;
  const lab_experiment *e = find("F5");
  lab_result r;
  lab_run_one(e, &r);
  print_message("F5: %s\n", r.summary);
  if (!r.pass) fail_msg("F5 failed: %s [%s]", r.failure, r.failed_checks);
  json_t *o = r.observed;
  assert_int_equal(num(o, "instances"), 4);
  assert_int_equal(num(o, "payments"), 1000);
  assert_int_equal(num(o, "paid"), 1000);
  assert_int_equal(num(o, "effects"), 1000);
  assert_int_equal(num(o, "duplicates"), 0);
  assert_int_equal(num(o, "lost"), 0);
  assert_int_equal(num(o, "killed"), 1);
  assert_int_equal(num(o, "restarted"), 1);
  assert_int_equal(num(o, "committed_operations"), 1000);
  assert_int_equal(num(o, "pending_left"), 0);
  /* The kill landed on calls in flight, and every one of them was
   * resolved through another instance's status query. */
  assert_true(num(o, "unknown_calls") >= 1);
  assert_int_equal(num(o, "unknown_resolved"), num(o, "unknown_calls"));
  assert_int_equal(num(o, "status_same_instance"), 0);
  assert_true(num(o, "status_queries") >= num(o, "unknown_calls"));
  lab_result_clear(&r);

  wrong_fails(e, &r);
  assert_true(num(r.observed, "duplicates") > 0);
  assert_int_equal(num(r.observed, "status_queries"), 0);
  lab_result_clear(&r);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(f5_a_fleet_on_one_store_loses_and_repeats_no_payment),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
