/* Lab experiments F1-F4 (tools/lab/exp_instances.c): many instances of one
 * upstream, each an in-process fixture on 127.0.0.1. Each must pass with
 * the observed names the issue asks for, and its wrong variant (no
 * ejection, no retry, round robin as P2C, no ejection cap) must fail
 * through the named check. F1, F2 and F4 run on the blocking API and on
 * the async engine; F3 drives the engine itself and is skipped when the
 * built-in loop is not built. */
#include <stdio.h>
#include <string.h>

#include "test_lab_common.h"
#include "test_util.h"

static void f1_figures(json_t *o) {
  assert_int_equal(obs_int(o, "instances"), 4);
  assert_int_equal(obs_int(o, "calls"), 1000);
  assert_int_equal(obs_int(o, "failed_calls"), 0);
  assert_true(obs_int(o, "ejections") >= 1);
  assert_true(obs_int(o, "calls_to_bad_before_ejection") <= 5);
  assert_true(obs_int(o, "calls_to_bad_after_ejection") <= 1);
  assert_true(obs_int(o, "ejection_periods") >= 2);
}

static void f1_bad_instance_is_ejected_and_probed(void **s) {
  (void)s;
  on_both_paths("F1", f1_figures);
}

static void f2_figures(json_t *o) {
  assert_int_equal(obs_int(o, "caller_failures"), 0);
  assert_true(obs_int(o, "moved_not_sent") > 0);
  assert_true(obs_int(o, "posts_moved") > 0);
  assert_int_equal(obs_int(o, "post_effects"), obs_int(o, "posts"));
}

static void f2_not_sent_moves_to_another_instance(void **s) {
  (void)s;
  on_both_paths("F2", f2_figures);
}

static void f3_p2c_avoids_the_slow_instance(void **s) {
  (void)s;
  const lab_experiment *e = lab_find("F3");
  if (!e) {
    print_message("F3: the built-in loop is not built; skipped\n");
    skip();
  }
  lab_result r;
  lab_run_one(e, &r);
  print_message("F3: %s%s%s%s\n", r.summary, r.pass ? "" : " [failed: ",
                r.pass ? "" : r.failed_checks, r.pass ? "" : "]");
  json_t *o = r.observed;
#ifdef RESIL_SANITIZED
  /* Under a sanitizer on a loaded 2-core machine the loop thread may fall
   * behind two calls a millisecond (the fast instances' answers pile up in
   * flight, and P2C cannot tell them from the slow one as well): the run's
   * numbers are reported, P2C must still send the slow one less than half
   * of round robin's share, and only the timing checks may fail. The plain
   * build holds the lab's checks. (Measured under TSan at a load average
   * of 8 on 2 cores: 0.73 %, p99 61 ms against 522 ms, passed.) */
  if (!r.pass) {
    /* Only the timing checks failed (the first failure is one of them, so
     * no unnamed check failed before). */
    char rest[256];
    snprintf(rest, sizeof rest, "%s", r.failed_checks);
    static const char *const timing[] = {"share_slow_p2c ", "p99_ms_p2c "};
    for (size_t i = 0; i < 2; i++) {
      char *at = strstr(rest, timing[i]);
      if (at) memmove(at, at + strlen(timing[i]), strlen(at + strlen(timing[i])) + 1);
    }
    if (rest[0] || (strncmp(r.failure, "share_slow_p2c:", 15) != 0 &&
                    strncmp(r.failure, "p99_ms_p2c:", 11) != 0))
      fail_msg("F3 failed beyond its timing checks: %s", r.failure);
  }
  assert_true(obs_real(o, "share_slow_p2c") < obs_real(o, "share_slow_rr") / 2);
#else
  if (!r.pass) fail_msg("F3 failed: %s", r.failure);
  assert_true(obs_real(o, "share_slow_p2c") <= obs_real(o, "share_slow_rr") / 4);
  assert_true(obs_real(o, "p99_ms_p2c") < obs_real(o, "p99_ms_rr"));
#endif
  assert_true(obs_real(o, "share_slow_rr") > 0.15);
  assert_int_equal(obs_int(o, "failed_calls"), 0);
  lab_result_clear(&r);
  wrong_fails(e, &r);
  lab_result_clear(&r);
}

static void f4_figures(json_t *o) {
  assert_true(obs_int(o, "max_ejected") <= 2);
  assert_true(obs_int(o, "max_ejected") >= 1);
  json_t *st = json_object_get(o, "breaker_state");
  assert_true(json_is_string(st) && strcmp(json_string_value(st), "OPEN") == 0);
}

static void f4_half_at_most_ejected_and_breaker_opens(void **s) {
  (void)s;
  on_both_paths("F4", f4_figures);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(f1_bad_instance_is_ejected_and_probed),
      cmocka_unit_test(f2_not_sent_moves_to_another_instance),
      cmocka_unit_test(f3_p2c_avoids_the_slow_instance),
      cmocka_unit_test(f4_half_at_most_ejected_and_breaker_opens),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
