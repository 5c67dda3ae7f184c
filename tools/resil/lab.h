/* The lab: experiments of DESIGN §7, each measured against real code (and,
 * for the HTTP ones, a real loopback upstream), each producing one
 * observation line and a JSON object of what it measured. */
#ifndef RESIL_TOOL_LAB_H
#define RESIL_TOOL_LAB_H

#include <jansson.h>
#include <stddef.h>

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

/* Experiment tables, each terminated by {NULL}. */
extern const lab_experiment lab_policy_experiments[];
extern const lab_experiment lab_http_experiments[];
extern const lab_experiment lab_idem_experiments[];
/* A1-A6 and A8 (lab_async.c): empty unless the built-in loop is built. */
extern const lab_experiment lab_async_experiments[];
/* A7 (lab_async_keyed.c): empty unless the built-in loop, the fixture and
 * the store are built. */
extern const lab_experiment lab_async_keyed_experiments[];
/* O1 (lab_registry.c): empty unless the built-in loop, the fixture and
 * libresil-config are built. */
extern const lab_experiment lab_registry_experiments[];

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

/* Runs one experiment into r (fresh) on the blocking path. Returns r->pass. */
int lab_run_one(const lab_experiment *e, lab_result *r);
/* Runs e->run_wrong into r (fresh), as lab_run_one does; returns r->pass,
 * or -1 (r cleared) when e has no wrong variant. */
int lab_run_wrong(const lab_experiment *e, lab_result *r);
/* The same on a given path (LAB_PATH_*): -1 (r cleared) when e does not
 * run on it or the path is not built. */
int lab_run_on(const lab_experiment *e, int path, lab_result *r);
int lab_run_wrong_on(const lab_experiment *e, int path, lab_result *r);
/* 1 when e runs on path in this build. */
int lab_runs_on(const lab_experiment *e, int path);
/* "blocking" or "engine". */
const char *lab_path_name(int path);
void lab_result_clear(lab_result *r);

/* Finds an experiment by id in all tables; NULL when none. */
const lab_experiment *lab_find(const char *id);

#ifdef RESIL_HAVE_HTTP
#include "resil/http.h"
/* One logical call on client c (lab_http.c): kv is a NULL-terminated list of
 * name, value pairs for the endpoint's placeholders (at most 8 pairs), key
 * the idempotency key or NULL, body text sent as is or NULL; rt, ctx and out
 * may be NULL, as for resil_http_call. */
resil_outcome lab_http_call(resil_http_client *c, const char *ep,
                            const char *const *kv, const char *key,
                            const char *body, resil_retry *rt,
                            const resil_ctx *ctx, resil_http_response **out);
/* The same on the engine path when le is not NULL (lab_engine.h: the call
 * submitted to le's engine, which must be on client c), else as above. */
typedef struct lab_engine lab_engine;
resil_outcome lab_http_call_on(lab_engine *le, resil_http_client *c, const char *ep,
                               const char *const *kv, const char *key, const char *body,
                               resil_retry *rt, const resil_ctx *ctx,
                               resil_http_response **out);
#endif

/* `resil lab ...` */
int lab_main(int argc, char **argv);

#endif
