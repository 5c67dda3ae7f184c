/* libresil benchmarks: the measuring harness shared by the cases
 * (harness.c), the cases themselves (cases.c) and the report that merges them
 * with the Node.js peers (report.c). Not part of the library. */
#ifndef RESIL_BENCH_H
#define RESIL_BENCH_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "resil/breaker.h"
#include "resil/ratelimit.h"
#include "resil/shared.h"

#define BENCH_MAX_RUNS 31
/* Threads (or processes) of a multi-thread case, at most. */
#define BENCH_MAX_THREADS 16

/* How every case is measured; set from the command line. */
typedef struct bench_opts {
  int runs;               /* runs per case; the median is reported        */
  int64_t min_run_ns;     /* single-thread cases: each run lasts at least this */
  int64_t thread_run_ns;  /* multi-thread cases: each run lasts this long  */
  int pin_threads;        /* pin thread i to the i-th allowed CPU          */
  const char *only;       /* NULL, or a comma-separated list of case names */
  const char *store_dir;  /* NULL: the directory of resil_bench; where the
                             SQLite store case makes its mkdtemp directory */
  const char *pg_uri;     /* NULL: the PostgreSQL store case is skipped    */
  const char *pg_skipped; /* why there is no pg_uri, for the report        */
  int store_effect_insert; /* BENCH_EFFECT_*: what the store cases' effect
                              does (0: no SQL)                              */
  const char *nginx_url;  /* NULL: the cases against nginx are skipped     */
  const char *nginx_skipped; /* why there is no nginx_url, for the report  */
  int nginx_cpu;          /* the CPU nginx's one worker is pinned to (-1:
                             not pinned, or not known): the sequential
                             nginx case pins its caller to another one  */
  const char *nginx_instances; /* NULL, or comma-separated base URLs of
                             the same nginx on several ports (server
                             blocks): the many-instances cases; skipped
                             without it                                 */
  int64_t procs_run_ns;   /* the processes-vs-threads cases: each run of
                             either side lasts this long                 */
  const char *resil_cli;  /* NULL: the `resil call --state` case is
                             skipped; else the resil executable          */
  int cli_pairs;          /* that case's timed pairs of invocations      */
} bench_opts;

/* bench_opts.store_effect_insert: the store cases' effect inserts its row
 * through resil_store_txn_exec (the default), through its own prepared
 * statement on the transaction's connection, or runs no SQL. */
enum { BENCH_EFFECT_NONE = 0, BENCH_EFFECT_EXEC = 1, BENCH_EFFECT_DIRECT = 2 };

/* 1 when the case is selected by opts->only. */
int bench_selected(const bench_opts *opts, const char *name);

/* A single-thread case body: performs `iters` operations and returns how
 * many of them succeeded (the harness requires all of them to). */
typedef uint64_t (*bench_body_fn)(void *state, uint64_t iters);

/* A multi-thread case body: performs operations until *stop is set, checking
 * it at most every few hundred operations; writes the number done to *ops
 * and returns how many did not succeed. */
typedef uint64_t (*bench_thread_fn)(void *state, const atomic_int *stop,
                                    uint64_t *ops);

typedef struct bench_result {
  const char *name;
  const char *measures;         /* one sentence: what one call does        */
  double ns_per_call;           /* median over runs                        */
  double ops_per_s;             /* median over runs (thread cases only)    */
  int has_ops;
  int threads;                  /* 0 for single-thread cases               */
  double runs[BENCH_MAX_RUNS];  /* ns per call of each run                 */
  double runs_ops[BENCH_MAX_RUNS];
  int nruns;
  uint64_t iters_per_run;       /* single-thread cases                     */
  char error[256];              /* non-empty: the case is invalid          */
} bench_result;

/* Stores v where the compiler must assume it is read, so the work that
 * produced it cannot be removed. */
void bench_sink(uint64_t v);

int64_t bench_now_ns(void);
/* The calling thread's CPU time (CLOCK_THREAD_CPUTIME_ID: user + system),
 * ns. */
int64_t bench_thread_cpu_ns(void);
/* The 1-minute load average, NAN when unknown. */
double bench_loadavg1(void);
/* Pins the calling thread to cpu; 0, or -1 (affinity unchanged). */
int bench_pin_self(int cpu);
double bench_median(const double *v, int n);

/* Warm-up, calibration to opts->min_run_ns, then opts->runs timed runs of a
 * fixed iteration count. Fills out (name and measures are the caller's). */
void bench_measure(const bench_opts *opts, bench_body_fn body, void *state,
                   bench_result *out);

/* nthreads threads run body on the same state for opts->thread_run_ns, after
 * a warm-up run; repeated opts->runs times. ops_per_s is the total of all
 * threads; ns_per_call is the time one thread spends per call
 * (nthreads / ops_per_s). */
void bench_measure_threads(const bench_opts *opts, int nthreads,
                           bench_thread_fn body, void *state,
                           bench_result *out);

/* One timed run of bench_measure_threads(): nthreads threads (pinned as
 * opts->pin_threads says) run body on state for run_ns; returns the total
 * ops/s (the sum of each thread's ops over its own time), or a negative
 * value after writing out->error. */
double bench_thread_run(const bench_opts *opts, int nthreads,
                        bench_thread_fn body, void *state, int64_t run_ns,
                        bench_result *out);

/* The CPU thread i of a pinned multi-thread case runs on: the
 * (i mod count)-th CPU this process may use; -1 with fewer than 2. */
int bench_nth_allowed_cpu(int i);

/* The policies as the cases configure them (cases.c), in seg or (NULL) in
 * the process: a breaker with a count window of 100, minimum 100 calls,
 * slow-call detection at 1 s; a rate limiter of 2^31-1 permits per 1 s
 * cycle, timeout 0. */
resil_status bench_make_breaker(resil_shared *seg, resil_breaker **out,
                                resil_error *err);
resil_status bench_make_ratelimiter(resil_shared *seg, resil_ratelimiter **out,
                                    resil_error *err);

/* Thread bodies (bench_thread_fn) on a resil_breaker * (try_acquire +
 * record(success) in the split form) and on a resil_ratelimiter * (acquire
 * of 1 permit) (cases.c). */
uint64_t bench_thread_breaker_split(void *breaker, const atomic_int *stop,
                                    uint64_t *ops);
uint64_t bench_thread_ratelimiter_acquire(void *limiter, const atomic_int *stop,
                                          uint64_t *ops);

/* Appends a case to a JSON array. */
void bench_result_to_json(const bench_result *r, json_t *array);

/* Machine description: nproc, CPU model, kernel, compiler, and the physical
 * references measured in this run like a single-thread case (median of
 * opts->runs runs, each >= min(opts->min_run_ns, 20 ms)), printed and kept
 * under "physical" keyed by name: atomic_fetch_add, atomic_exchange,
 * atomic_cas (uncontended), clock_monotonic, clock_monotonic_coarse (one
 * clock_gettime), indirect_call (a no-op through a pointer); each an entry
 * as bench_result_to_json() writes it. The report prices the policy cases
 * with them. */
json_t *bench_machine_json(const bench_opts *opts);

/* Runs every libresil case and writes the JSON to path (cases.c). */
int bench_run_cases(const bench_opts *opts, const char *json_path);

/* The HTTP cases' targets: libresil's req/s at least this fraction of bare
 * libcurl's measured in the same run, and its p50 latency at most this many
 * microseconds above libcurl's. */
#define BENCH_HTTP_MIN_RATIO 0.95
#define BENCH_HTTP_MAX_ADDED_US 3.0
/* And the calling thread(s)' CPU time per request at most this many times
 * bare libcurl's (issue 10; 1 and 8 callers). */
#define BENCH_HTTP_MAX_CPU_RATIO 1.05

/* Runs the HTTP cases (bare libcurl vs libresil's client behind a full
 * chain, against an in-process loopback server) and appends them, marked
 * "kind": "http", to the JSON that bench_run_cases() wrote to path; in a
 * build without libresil-http they are appended as skipped
 * (http_cases.c). */
int bench_run_http_cases(const bench_opts *opts, const char *json_path);

/* The async cases' target: requests/s through libresil's engine at least
 * this fraction of bare libcurl multi_socket's on the same loop, same run. */
#define BENCH_ASYNC_MIN_RATIO 0.95
/* And the loop thread's CPU time per request at most this many times bare
 * multi_socket's. */
#define BENCH_ASYNC_MAX_CPU_RATIO 1.05

/* Runs the async engine cases (async_get_1000_inflight,
 * async_get_10000_inflight: libresil's engine vs bare libcurl multi_socket
 * on resil_loop, against the nginx at opts->nginx_url) and appends them,
 * marked "kind": "async"; skipped without nginx or libresil-http
 * (async_cases.c). */
int bench_run_async_cases(const bench_opts *opts, const char *json_path);

/* The breaker's ramp (issue 23): breaker_acquire_record on a ramping
 * breaker at most this many times the plain CLOSED breaker's, same run
 * (median of per-round ratios, cases.c ramp_cases). */
#define BENCH_RAMP_MAX_RATIO 1.2
/* ... and on a breaker with a ramp configured, not ramping: within noise,
 * taken as at most 5 % above the plain breaker's, same run. */
#define BENCH_RAMP_OFF_MAX_RATIO 1.05

/* shared_breaker_acquire_record and shared_ratelimiter_acquire (one
 * process, the state in a segment): their ns per call at most this many
 * times breaker_acquire_record's and ratelimiter_acquire's, same run
 * (issue 20). */
#define BENCH_SHARED_MAX_NS_RATIO 1.5
/* The processes-vs-threads cases' target: N forked processes on one
 * breaker (or rate limiter) in a resil_shared segment reach at least this
 * fraction of the total ops/s of N threads on one in-process instance,
 * same run (issue 20). */
#define BENCH_SHARED_MIN_RATIO 0.5
/* The `resil call --state` case's target: its start-to-exit time at most
 * this many milliseconds above plain `resil call`'s (median of pairwise
 * differences, same run, against nginx). */
#define BENCH_CLI_STATE_MAX_ADDED_MS 1.0

/* Runs the shared-state cases (shared_cases.c): shared_breaker_Nprocs and
 * shared_ratelimiter_Nprocs for N = 2, 4, 8 (N forked processes on one
 * instance in a segment against N threads on one in-process instance,
 * alternating runs of opts->procs_run_ns), marked "kind": "procs"; and
 * cli_call_state_nginx (`resil call --state` against plain `resil call`,
 * whole processes, against the nginx at opts->nginx_url), marked "kind":
 * "cli", skipped without nginx or opts->resil_cli. Appends them to the JSON
 * that bench_run_cases() wrote to path. */
int bench_run_shared_cases(const bench_opts *opts, const char *json_path);

/* The operation-store cases' target: libresil's keyed operations per
 * second (begin + complete) at least this fraction of the raw ceiling
 * (single-row INSERT transactions) measured in the same run. */
#define BENCH_STORE_MIN_RATIO 0.45

/* Runs the operation-store cases (SQLite, and PostgreSQL when
 * opts->pg_uri is set) and appends them, marked "kind": "store", to the
 * JSON that bench_run_cases() wrote to path; in a build without
 * libresil-store, or without a server, they are appended as skipped
 * (store_cases.c). */
int bench_run_store_cases(const bench_opts *opts, const char *json_path);

/* The rate limiter on Redis cases' target: redis_ratelimiter_acquire's
 * decisions per second at least this fraction of a bare hiredis EVALSHA of
 * the same script's, and redis_engine_decisions' (1,000 in flight) of bare
 * hiredis async's, same run (issue 21). */
#define BENCH_REDIS_MIN_RATIO 0.9

/* Runs redis_ratelimiter_acquire (libresil-redis's blocking decision vs a
 * bare hiredis EVALSHA of the same script) and redis_engine_decisions (its
 * engine path with 1,000 decisions in flight vs bare hiredis async),
 * alternating rounds, against a redis-server it starts, and appends them,
 * marked "kind": "redis"; skipped without libresil-redis or redis-server
 * (redis_cases.c). */
int bench_run_redis_cases(const bench_opts *opts, const char *json_path);

/* The deadline header's cost (issue 21): libresil-http's caller CPU per
 * keep-alive GET with the deadline header sent at most this many times the
 * same call with the same deadline and no header, same run. */
#define BENCH_DEADLINE_HDR_MAX_CPU_RATIO 1.01

/* Runs http_deadline_header_cost (against an in-process fixture) and
 * http_deadline_header_cost_nginx (against opts->nginx_url; skipped
 * without it): alternating rounds of the same GET with and without the
 * header, and appends them, marked "kind": "deadline" (deadline_cases.c). */
int bench_run_deadline_cases(const bench_opts *opts, const char *json_path);

/* The many-instances cases' targets (issue 22): a keep-alive GET through
 * a client of several instances costs at most this many times the caller
 * CPU of the same GET through a client of one, same run; and the engine
 * with 1,000 in flight over several instances reaches at least this
 * fraction of its req/s over one. */
#define BENCH_INSTANCES_MAX_CPU_RATIO 1.02
#define BENCH_INSTANCES_MIN_RATIO 0.95

/* Runs http_instances_choice_nginx (caller CPU per keep-alive GET, a
 * client of the instances in opts->nginx_instances vs a client of the
 * first one only, alternating blocks) and async_instances_1000_inflight
 * (the engine, 1,000 in flight, the same two clients, alternating
 * batches), and appends them, marked "kind": "instances"; skipped without
 * opts->nginx_instances or libresil-http (instances_cases.c). */
int bench_run_instances_cases(const bench_opts *opts, const char *json_path);

/* Merges the C results with the Node peers' JSON (or the reason they were
 * skipped) and perf-r4j's (run.sh --out FILE; or the reason it was not
 * run), prints the tables (each ratio with its reference, target and
 * verdict; each policy case against the physical references of the same
 * run) and writes results.json (report.c). */
int bench_report(const char *c_json, const char *peers_json,
                 const char *peers_skipped, const char *r4j_json,
                 const char *r4j_skipped, const char *out_path);

/* Appends entries (stolen) to the "cases" array of the JSON file
 * bench_run_cases() wrote and writes it back; when method_key and method are
 * given, also sets root[method_key] = method. Returns 0, or 1 after printing
 * why. */
int bench_append_cases(const char *json_path, json_t *entries,
                       const char *method_key, const char *method);

#endif
