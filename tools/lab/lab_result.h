/* What an experiment works with (one exp_*.c per family): its result (the
 * pass flag, the observation line, the JSON object of what it measured),
 * the checks that record failures into it, and the lab_experiment entry a
 * family's table holds. The base of tools/lab: it includes no other lab
 * header, and the runner (lab.h), the run's metrics and events (lab_ops.h)
 * and the engine path (lab_engine.h) build on it. */
#ifndef RESIL_TOOL_LAB_RESULT_H
#define RESIL_TOOL_LAB_RESULT_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

typedef struct lab_result {
  int pass;
  char summary[320]; /* one line: what was measured */
  json_t *observed;  /* object, snake_case keys; owned by the result */
  char failure[320]; /* first failed check, empty when passed */
  /* Names of the named checks (lab_expect) that failed, each followed by
   * one space; empty when none did. */
  char failed_checks[256];
  /* The path the experiment's HTTP calls take (set by the runner before
   * the experiment starts): LAB_PATH_BLOCKING (resil_http_call and
   * friends) or LAB_PATH_ENGINE (the same calls submitted to the async
   * engine on a built-in loop, lab_engine.c). */
  int path;
  /* --metrics / --events (lab_ops.h): the run's collector of figures and
   * event sink, set by the runner; NULL when neither was asked for. */
  struct lab_ops *ops;
} lab_result;

enum { LAB_PATH_BLOCKING = 0, LAB_PATH_ENGINE = 1 };
/* lab_experiment.paths: which paths an experiment runs on. */
#define LAB_PATHS_BLOCKING (1u << LAB_PATH_BLOCKING)
#define LAB_PATHS_ENGINE (1u << LAB_PATH_ENGINE)
#define LAB_PATHS_BOTH (LAB_PATHS_BLOCKING | LAB_PATHS_ENGINE)

typedef int (*lab_fn)(lab_result *r);

typedef struct lab_experiment {
  const char *id;
  const char *title;
  lab_fn run;
  /* The same experiment, same checks, run against a deliberately wrong
   * configuration or policy that its checks must catch (a negative
   * control, as I7 is for I5); NULL when it has none. Only the tests run
   * it: `resil lab` runs `run` alone. */
  lab_fn run_wrong;
  /* What is wrong in run_wrong, and the named check (lab_expect) that must
   * fail there. */
  const char *wrong;
  const char *wrong_fails;
  /* The paths it runs on (LAB_PATHS_*); 0 means LAB_PATHS_BLOCKING. The H
   * and I experiments run on both: `resil lab` lists the engine run as
   * "<id>/engine" (when the built-in loop is built). */
  unsigned paths;
} lab_experiment;

/* Checks used by experiments: record the first failure into r and return
 * the condition. */
int lab_check(lab_result *r, int cond, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* lab_check with a name (snake_case) that a negative control can name as
 * the check that must fail; a failed one is added to r->failed_checks, and
 * when it is the first failure, r->failure reads "name: message". */
int lab_expect(lab_result *r, const char *check, int cond, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* 1 when the named check failed in r. */
int lab_check_failed(const lab_result *r, const char *check);
void lab_obs_int(lab_result *r, const char *key, long long v);
void lab_obs_str(lab_result *r, const char *key, const char *v);
void lab_obs_bool(lab_result *r, const char *key, int v);
void lab_obs_real(lab_result *r, const char *key, double v);
void lab_obs_json(lab_result *r, const char *key, json_t *v); /* steals v */
void lab_summary(lab_result *r, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* "blocking" or "engine". */
const char *lab_path_name(int path);
/* Frees r->observed and zeroes r. */
void lab_result_clear(lab_result *r);

/* The resil binary, for experiments that run it as a child process (I8's
 * `resil upstream`, M5's `resil call`): $RESIL_BIN when set (the tests set
 * it), else this process's own executable when it is resil (`resil lab`,
 * /proc/self/exe). 1 with its path in out, 0 when there is none (or
 * RESIL_BIN is not executable). */
int lab_resil_bin(char *out, size_t n);

/* CLOCK_MONOTONIC in nanoseconds: the clock every experiment times with. */
int64_t lab_now_ns(void);

#endif
