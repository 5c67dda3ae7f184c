/* Lab experiment M4 (tools/lab/exp_shared_chaos.c): SIGKILL chaos on one
 * shared breaker, rate limiter and bulkhead. 1,000 kills of forked workers
 * calling flat out; afterwards nobody is wedged, the invariants hold and
 * every permit of a dead holder comes back within 1 s. Its wrong variant (a
 * bulkhead that is a plain counter in shared memory) must leak permits.
 * About 4 s per run plain, 5 s under ASan+UBSan. */
#include <stdio.h>
#include <string.h>

#include "lab.h"
#include "test_util.h"

static long long num(json_t *o, const char *k) {
  json_t *v = json_object_get(o, k);
  if (!json_is_integer(v)) fail_msg("observed.%s missing", k);
  return json_integer_value(v);
}

static double real(json_t *o, const char *k) {
  json_t *v = json_object_get(o, k);
  if (!json_is_real(v)) fail_msg("observed.%s missing", k);
  return json_real_value(v);
}

static void m4_sigkill_chaos_wedges_nobody_and_leaks_no_permit(void **s) {
  (void)s;
  const lab_experiment *e = lab_find("M4");
  if (!e) fail_msg("M4 is not registered");
  lab_result r;
  lab_run_one(e, &r);
  print_message("M4: %s\n", r.summary);
  json_t *o = r.observed;
  char *dump = json_dumps(o, JSON_COMPACT);
  print_message("M4 observed: %s\n", dump ? dump : "?");
  free(dump);
  assert_true(num(o, "kills") >= 1000);
  assert_int_equal(num(o, "wedged"), 0);
  assert_int_equal(num(o, "invariant_violations"), 0);
  assert_int_equal(num(o, "permits_leaked"), 0);
  double reclaim = real(o, "reclaim_ms_max");
  assert_true(reclaim >= 0.0 && reclaim <= 1000.0);
  assert_true(num(o, "reclaims_timed") >= 16 * 4);
  /* The kills hit calls in progress: permits held, results being
   * recorded (under the breaker's lock) among them. */
  assert_true(num(o, "kills_holding_permit") > 0);
  assert_true(num(o, "kills_in_breaker_record") >= 100);
  assert_true(num(o, "kills_in_breaker") + num(o, "kills_in_limiter") +
                  num(o, "kills_in_bulkhead") >
              num(o, "kills") / 2);
  assert_true(num(o, "transitions") > 0);
  assert_true(num(o, "limiter_permits_in_own_cycle") == 500);
  assert_true(real(o, "permits_back_after_kills_ms_max") <= 1000.0);
  /* A check at every 100 kills and one after: each found the invariants,
   * and a third of them at least rolled a CLOSED window. */
  assert_true(num(o, "checks") >= 10);
  assert_int_equal(num(o, "checks_made"), num(o, "checks"));
  assert_true(num(o, "windows_rolled") >= num(o, "checks") / 3);
  if (!r.pass) fail_msg("M4 failed: %s", r.failure);
  lab_result_clear(&r);

  if (lab_run_wrong(e, &r) != 0) fail_msg("M4 against %s passed: %s", e->wrong, r.summary);
  print_message("M4 against %s fails as it must: [%s] %s\n", e->wrong, r.failed_checks,
                r.summary);
  assert_true(lab_check_failed(&r, e->wrong_fails));
  assert_true(num(r.observed, "permits_leaked") > 0);
  assert_true(num(r.observed, "kills") >= 1000);
  lab_result_clear(&r);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(m4_sigkill_chaos_wedges_nobody_and_leaks_no_permit),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
