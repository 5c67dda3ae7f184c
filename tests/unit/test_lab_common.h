/* What the lab's tests share (test_lab_*_mt.c): an experiment by its id
 * (a test fails when it is not registered), and the run of its wrong
 * variant, which must fail through its named check, and the observed
 * figures it reports. Header-only. */
#ifndef RESIL_TEST_LAB_COMMON_H
#define RESIL_TEST_LAB_COMMON_H

#include "lab.h"
#include "test_util.h"

/* observed.k of a result's JSON, which must be there: an integer, or any
 * number. */
static inline long long obs_int(json_t *o, const char *k) {
  json_t *v = json_object_get(o, k);
  if (!json_is_integer(v)) fail_msg("observed.%s missing", k);
  return json_integer_value(v);
}

static inline double obs_real(json_t *o, const char *k) {
  json_t *v = json_object_get(o, k);
  if (!json_is_number(v)) fail_msg("observed.%s missing", k);
  return json_number_value(v);
}

static inline const lab_experiment *find(const char *id) {
  const lab_experiment *e = lab_find(id);
  if (!e) fail_msg("%s is not registered", id);
  return e;
}

static inline void wrong_fails(const lab_experiment *e, lab_result *r) {
  if (lab_run_wrong(e, r) != 0) fail_msg("%s against %s passed: %s", e->id, e->wrong, r->summary);
  print_message("%s against %s fails as it must: [%s] %s\n", e->id, e->wrong, r->failed_checks,
                r->summary);
  assert_true(lab_check_failed(r, e->wrong_fails));
}


/* The figures a test asserts of an experiment's observed object. */
typedef void (*lab_figures_fn)(json_t *o);

/* Runs experiment id on each path it has in this build (the blocking one,
 * and the async engine when the built-in loop is built): each run must
 * pass, with the figures check_fn asserts (on the engine, calls through
 * it: engine_calls > 0), and each path's wrong variant must fail through
 * its named check. */
static inline void on_both_paths(const char *id, lab_figures_fn check_fn) {
  const lab_experiment *e = find(id);
  for (int path = LAB_PATH_BLOCKING; path <= LAB_PATH_ENGINE; path++) {
    if (!lab_runs_on(e, path)) {
      print_message("%s/%s: not built; skipped\n", id, lab_path_name(path));
      continue;
    }
    lab_result r;
    lab_run_on(e, path, &r);
    print_message("%s/%s: %s\n", id, lab_path_name(path), r.summary);
    if (!r.pass) fail_msg("%s/%s failed: %s", id, lab_path_name(path), r.failure);
    check_fn(r.observed);
    if (path == LAB_PATH_ENGINE) assert_true(obs_int(r.observed, "engine_calls") > 0);
    lab_result_clear(&r);
    if (lab_run_wrong_on(e, path, &r) != 0)
      fail_msg("%s/%s against %s passed: %s", id, lab_path_name(path), e->wrong, r.summary);
    print_message("%s/%s against %s fails as it must: [%s] %s\n", id, lab_path_name(path),
                  e->wrong, r.failed_checks, r.summary);
    assert_true(lab_check_failed(&r, e->wrong_fails));
    lab_result_clear(&r);
  }
}

#endif
