/* Lab experiments D (tools/lab/exp_hops.c): deadlines across a chain of
 * hops on 127.0.0.1. Each must pass, and its wrong variant (a hop that
 * does not propagate, a hop without a floor) must fail through the named
 * check. */
#include <stdio.h>
#include <string.h>

#include "test_lab_common.h"
#include "test_util.h"

static void run_and_wrong(const char *id) {
  const lab_experiment *e = find(id);
  lab_result r;
  lab_run_one(e, &r);
  print_message("%s: %s\n", id, r.summary);
  if (!r.pass) fail_msg("%s failed: %s", id, r.failure);
  lab_result_clear(&r);
  if (!e->run_wrong) return;
  if (lab_run_wrong(e, &r) != 0) fail_msg("%s against %s passed: %s", id, e->wrong, r.summary);
  print_message("%s against %s fails as it must: [%s] %s\n", id, e->wrong, r.failed_checks,
                r.summary);
  assert_true(lab_check_failed(&r, e->wrong_fails));
  lab_result_clear(&r);
}

static void d1_budgets_follow_the_chain(void **s) {
  (void)s;
  lab_result r;
  lab_run_one(find("D1"), &r);
  json_t *o = r.observed;
  json_t *b = json_object_get(o, "budgets_ms");
  assert_int_equal(json_array_size(b), 3);
  /* 300 ms, less each hop's 40 ms of work. */
  double b1 = json_number_value(json_array_get(b, 0)), b2 = json_number_value(json_array_get(b, 1)),
         b3 = json_number_value(json_array_get(b, 2));
  assert_true(b1 <= 300 && b1 > 250);
  assert_true(b2 <= b1 - 40 && b3 <= b2 - 40);
  assert_true(obs_real(o, "late_work_ms") == 0);
  assert_int_equal(obs_int(o, "client_status"), 200);
  if (!r.pass) fail_msg("D1 failed: %s", r.failure);
  lab_result_clear(&r);
  run_and_wrong("D1");
}

static void d2_retry_carries_what_is_left(void **s) {
  (void)s;
  run_and_wrong("D2");
}

static void d3_refused_below_the_floor_leaves_nothing(void **s) {
  (void)s;
  lab_result r;
  lab_run_one(find("D3"), &r);
  print_message("D3: %s\n", r.summary);
  json_t *o = r.observed;
  assert_int_equal(obs_int(o, "refused"), 1);
  assert_int_equal(obs_int(o, "effects"), 0);
  assert_int_equal(obs_int(o, "pending_rows"), 0);
  if (!r.pass) fail_msg("D3 failed: %s", r.failure);
  lab_result_clear(&r);
  run_and_wrong("D3");
}

static void d4_clock_offsets_change_nothing(void **s) {
  (void)s;
  run_and_wrong("D4");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(d1_budgets_follow_the_chain),
      cmocka_unit_test(d2_retry_carries_what_is_left),
      cmocka_unit_test(d3_refused_below_the_floor_leaves_nothing),
      cmocka_unit_test(d4_clock_offsets_change_nothing),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
