/* The lab's idempotency experiments (I1-I8) run here against the fixture on
 * temporary SQLite files (and `resil upstream` child processes for I8), and
 * the numbers DESIGN §7 gives are asserted again from each experiment's
 * evidence object. Every test runs twice: on the blocking path and, as
 * "<test>/engine", on the async engine (lab_run_on); the engine runs are
 * skipped in a build without the built-in loop. */
#include <stdlib.h>
#include <string.h>

#include "lab.h"
#include "test_util.h"

static const int blocking = LAB_PATH_BLOCKING;
static const int engine = LAB_PATH_ENGINE;

/* The path a test runs on (its cmocka initial state). */
static int path_of(void **s) { return *(const int *)*s; }

/* The experiment, or the test is skipped when it does not run on path in
 * this build (the engine path without the built-in loop). */
static const lab_experiment *find_on(const char *id, int path) {
  const lab_experiment *e = lab_find(id);
  if (!e)
    fail_msg("no experiment %s", id);
  if (path == LAB_PATH_ENGINE && !lab_runs_on(e, LAB_PATH_BLOCKING))
    fail_msg("%s does not run on the blocking path", id);
  if (!lab_runs_on(e, path)) {
    print_message("%s does not run on the %s path in this build: skipped\n", id,
                  lab_path_name(path));
    skip();
  }
  return e;
}

static json_t *run(const char *id, int path, lab_result *r) {
  const lab_experiment *e = find_on(id, path);
  if (lab_run_on(e, path, r) != 1)
    fail_msg("%s on the %s path failed: %s (%s)", id, lab_path_name(path), r->failure,
             r->summary);
  /* The evidence format every experiment follows. */
  if (!json_object_get(r->observed, "attempts") ||
      !json_object_get(r->observed, "effects") ||
      !json_object_get(r->observed, "outcome"))
    fail_msg("%s: observed lacks attempts, effects or outcome", id);
  /* On the engine path every client call took the engine. */
  if (path == LAB_PATH_ENGINE) {
    json_t *n = json_object_get(r->observed, "engine_calls");
    if (!json_is_integer(n) || json_integer_value(n) < 1)
      fail_msg("%s/engine: observed.engine_calls missing or 0", id);
  }
  return r->observed;
}

/* Runs the experiment's deliberately wrong variant: it must FAIL, and
 * through the check its table entry names. */
static void run_wrong_fails(const char *id, int path) {
  const lab_experiment *e = find_on(id, path);
  if (!e->run_wrong)
    fail_msg("no wrong variant for %s", id);
  lab_result r;
  if (lab_run_wrong_on(e, path, &r) != 0)
    fail_msg("%s on the %s path against %s passed: %s", id, lab_path_name(path), e->wrong,
             r.summary);
  assert_int_equal(r.pass, 0);
  if (!lab_check_failed(&r, e->wrong_fails))
    fail_msg("%s on the %s path against %s: check %s did not fail (failed: %s; %s)", id,
             lab_path_name(path), e->wrong, e->wrong_fails, r.failed_checks, r.failure);
  /* Failing for the named reason, not because the engine was not used. */
  if (lab_check_failed(&r, "ran_on_engine"))
    fail_msg("%s/%s against %s: ran_on_engine failed", id, lab_path_name(path), e->wrong);
  print_message("%s on the %s path against %s fails as it must: [%s] %s\n", id,
                lab_path_name(path), e->wrong, r.failed_checks, r.failure);
  lab_result_clear(&r);
}

static long long num(json_t *o, const char *k) {
  json_t *v = json_object_get(o, k);
  if (!json_is_integer(v))
    fail_msg("observed.%s missing", k);
  return json_integer_value(v);
}

static const char *str(json_t *o, const char *k) {
  json_t *v = json_object_get(o, k);
  if (!json_is_string(v))
    fail_msg("observed.%s missing", k);
  return json_string_value(v);
}

static int truth(json_t *o, const char *k) {
  json_t *v = json_object_get(o, k);
  if (!json_is_boolean(v))
    fail_msg("observed.%s missing", k);
  return json_is_true(v);
}

static void stable_key_retry_makes_two_attempts_and_one_effect(void **s) {
  lab_result r;
  json_t *o = run("I1", path_of(s), &r);
  assert_int_equal(num(o, "attempts"), 2);
  assert_int_equal(num(o, "effects"), 1);
  assert_string_equal(str(o, "status"), "COMMITTED");
  assert_string_equal(str(o, "outcome"), "ANSWERED(201)");
  assert_true(truth(o, "second_attempt_replayed"));
  lab_result_clear(&r);
}

static void stable_key_with_a_new_key_per_attempt_fails(void **s) {
  run_wrong_fails("I1", path_of(s));
}

static void new_key_per_attempt_makes_three_effects_and_still_fails(void **s) {
  lab_result r;
  json_t *o = run("I2", path_of(s), &r);
  assert_int_equal(num(o, "attempts"), 3);
  assert_int_equal(num(o, "effects"), 3);
  assert_int_equal(num(o, "distinct_keys"), 3);
  assert_string_equal(str(o, "outcome"), "UNKNOWN(timeout after sending)");
  lab_result_clear(&r);
}

static void status_query_tells_committed_from_unknown_and_expired(void **s) {
  lab_result r;
  json_t *o = run("I3", path_of(s), &r);
  assert_string_equal(str(o, "committed_key_state"), "COMMITTED");
  assert_int_equal(num(o, "committed_key_http"), 200);
  assert_string_equal(str(o, "unknown_key_state"), "UNKNOWN");
  assert_int_equal(num(o, "unknown_key_http"), 404);
  assert_int_equal(num(o, "effects"), 1);
  /* Key expiry: swept, the key is UNKNOWN though its effect exists, and
   * reusing it pays again; PENDING is never swept. */
  assert_int_equal(num(o, "swept"), 1);
  assert_int_equal(num(o, "expired_key_http"), 404);
  assert_int_equal(num(o, "effects_after_expiry"), 1);
  assert_string_equal(str(o, "pending_key_after_sweep"), "PENDING");
  assert_int_equal(num(o, "reused_expired_key_http"), 201);
  assert_int_equal(num(o, "effects_after_reuse"), 2);
  lab_result_clear(&r);
}

static void lost_response_is_unknown_then_committed_by_status_and_replay(
    void **s) {
  lab_result r;
  json_t *o = run("I4", path_of(s), &r);
  assert_true(strncmp(str(o, "outcome"), "UNKNOWN", 7) == 0);
  assert_string_equal(str(o, "status"), "COMMITTED");
  assert_int_equal(num(o, "status_effects"), 1);
  assert_string_equal(str(o, "replay_outcome"), "ANSWERED(201)");
  assert_int_equal(num(o, "replay_effects"), 1);
  assert_true(truth(o, "replay_same_bytes"));
  lab_result_clear(&r);
}

static void rollback_leaves_pending_that_survives_reopen_and_recovers_once(
    void **s) {
  lab_result r;
  json_t *o = run("I5", path_of(s), &r);
  assert_int_equal(num(o, "attempts"), 1);
  assert_string_equal(str(o, "status_after_rollback"), "PENDING");
  assert_int_equal(num(o, "effects_after_rollback"), 0);
  assert_int_equal(num(o, "retry_before_recovery_http"), 409);
  assert_string_equal(str(o, "status_after_reopen"), "PENDING");
  assert_int_equal(num(o, "effects_after_reopen"), 0);
  assert_int_equal(num(o, "recovered_first"), 1);
  assert_string_equal(str(o, "status_after_recover"), "COMMITTED");
  assert_int_equal(num(o, "effects_after_recover"), 1);
  assert_int_equal(num(o, "recovered_second"), 0);
  assert_int_equal(num(o, "effects_after_second_recover"), 1);
  lab_result_clear(&r);
}

static void twelve_concurrent_posts_and_a_recovery_make_one_effect(void **s) {
  lab_result r;
  json_t *o = run("I6", path_of(s), &r);
  json_t *b = json_object_get(o, "backends");
  json_t *sq = json_object_get(b, "sqlite");
  assert_non_null(sq);
  assert_int_equal(num(sq, "effects"), 1);
  assert_int_equal(num(sq, "route_effects"), 1);
  assert_int_equal(num(sq, "attempts"), 13);
  assert_string_equal(str(sq, "state"), "COMMITTED");
  assert_int_equal(num(sq, "fresh") + num(sq, "replays") + num(sq, "in_progress"), 12);
  assert_int_equal(num(o, "attempts"), 13); /* 12 POSTs and the recovery, seen */
  assert_int_equal(num(o, "effects"), 1);
  /* On the engine: one batch, the 12 POSTs in flight at once on one thread. */
  if (path_of(s) == LAB_PATH_ENGINE)
    assert_true(num(o, "peak_in_flight") >= 12);
  const char *pg = getenv("RESIL_TEST_PG_URI");
  if (pg && *pg) {
    json_t *p = json_object_get(b, "postgresql");
    assert_non_null(p);
    assert_int_equal(num(p, "effects"), 1);
    assert_int_equal(num(p, "route_effects"), 1);
    assert_int_equal(num(p, "attempts"), 13);
    assert_string_equal(str(p, "state"), "COMMITTED");
  }
  lab_result_clear(&r);
}

static void concurrent_posts_with_a_key_each_fail(void **s) {
  run_wrong_fails("I6", path_of(s));
}

static void early_commit_is_caught_as_pending_with_one_effect(void **s) {
  lab_result r;
  json_t *o = run("I7", path_of(s), &r);
  assert_int_equal(num(o, "attempts"), 1);
  assert_string_equal(str(o, "status_after_rollback"), "PENDING");
  assert_int_equal(num(o, "effects_after_rollback"), 1);
  assert_int_equal(num(o, "effects_after_recover"), 2);
  assert_true(truth(o, "caught"));
  lab_result_clear(&r);
}

static void sigkill_inside_an_operation_recovers_to_one_effect(void **s) {
  lab_result r;
  json_t *o = run("I8", path_of(s), &r);
  json_t *pts = json_object_get(o, "kills_at_points");
  assert_int_equal(json_array_size(pts), 3);
  for (size_t i = 0; i < json_array_size(pts); i++) {
    json_t *p = json_array_get(pts, i);
    assert_int_equal(num(p, "signal"), 9);
    assert_int_equal(num(p, "effects"), 1);
    assert_string_equal(str(p, "state_after_recover"), "COMMITTED");
    assert_int_equal(num(p, "conflict_http"), 422);
  }
  assert_int_equal(num(o, "kills"), 13);
  assert_int_equal(num(o, "duplicates"), 0);
  assert_int_equal(num(o, "lost"), 0);
  lab_result_clear(&r);
}

/* Every other experiment's wrong variant fails through the check its
 * table entry names (I1 and I6 have tests of their own above). */
static void every_other_wrong_variant_fails(void **s) {
  int n = 0;
  for (const lab_experiment *e = lab_idem_experiments; e->id; e++) {
    if (strcmp(e->id, "I1") == 0 || strcmp(e->id, "I6") == 0)
      continue;
    run_wrong_fails(e->id, path_of(s));
    n++;
  }
  assert_int_equal(n, 6);
}

static void idem_table_lists_i1_to_i8_in_order(void **s) {
  (void)s;
  static const char *const ids[] = {"I1", "I2", "I3", "I4",
                                    "I5", "I6", "I7", "I8"};
  size_t n = 0;
  for (const lab_experiment *e = lab_idem_experiments; e->id; e++, n++) {
    assert_true(n < 8);
    assert_string_equal(e->id, ids[n]);
    assert_ptr_equal(lab_find(ids[n]), e);
    /* Every I experiment runs on the blocking API and on the engine. */
    assert_int_equal(e->paths, LAB_PATHS_BOTH);
  }
  assert_int_equal(n, 8);
}

/* A test on the blocking path, and again on the engine path. */
#define BOTH_PATHS(f) \
  {#f, f, NULL, NULL, (void *)&blocking}, { #f "/engine", f, NULL, NULL, (void *)&engine }

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(idem_table_lists_i1_to_i8_in_order),
      BOTH_PATHS(stable_key_retry_makes_two_attempts_and_one_effect),
      BOTH_PATHS(stable_key_with_a_new_key_per_attempt_fails),
      BOTH_PATHS(new_key_per_attempt_makes_three_effects_and_still_fails),
      BOTH_PATHS(status_query_tells_committed_from_unknown_and_expired),
      BOTH_PATHS(lost_response_is_unknown_then_committed_by_status_and_replay),
      BOTH_PATHS(rollback_leaves_pending_that_survives_reopen_and_recovers_once),
      BOTH_PATHS(twelve_concurrent_posts_and_a_recovery_make_one_effect),
      BOTH_PATHS(concurrent_posts_with_a_key_each_fail),
      BOTH_PATHS(early_commit_is_caught_as_pending_with_one_effect),
      BOTH_PATHS(sigkill_inside_an_operation_recovers_to_one_effect),
      BOTH_PATHS(every_other_wrong_variant_fails),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
