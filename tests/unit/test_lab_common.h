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

#endif
