/* The report: merges the C cases with the Node.js peers measured in the same
 * run and with perf-r4j's Resilience4j comparison, checks the targets of the
 * benchmark issues, prints the tables (the policy cases also against the
 * physical references measured in the run; every ratio with its reference,
 * target and verdict) and writes results.json. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "bench.h"

/* The factor every case must beat the fastest Node peer by. */
#define PEER_FACTOR 10.0
/* Bytes a breaker with a 100-call window may occupy. */
#define BREAKER_BYTES_MAX 512

/* Per-case targets from the issue; kinds of check below. */
typedef enum target_kind { T_NONE, T_NS_MAX, T_THREADS } target_kind;

typedef struct case_target {
  const char *name;
  target_kind kind;
  double limit;     /* T_NS_MAX: ns per call; T_THREADS: total ops/s   */
  const char *text; /* as printed                                       */
} case_target;

static const case_target targets[] = {
    {"breaker_acquire_record", T_NS_MAX, 10.0, "<= 10 ns"},
    {"breaker_run", T_NS_MAX, 40.0, "<= 40 ns"},
    {"retry_run", T_NONE, 0, NULL},
    {"ratelimiter_acquire", T_NONE, 0, NULL},
    {"bulkhead_acquire_release", T_NONE, 0, NULL},
    {"chain4_run", T_NS_MAX, 50.0, "<= 50 ns"},
    {"breaker_2threads", T_THREADS, 20e6, ">= 20 M ops/s and >= 1/2 of 1thread"},
    {"breaker_1thread", T_NONE, 0, NULL},
};

static const case_target *target_for(const char *name) {
  for (size_t i = 0; i < sizeof targets / sizeof targets[0]; i++)
    if (!strcmp(targets[i].name, name)) return &targets[i];
  return NULL;
}

/* ---- the physical floor of each policy case ------------------------------
 *
 * What one call of the case's hot path performs that costs more than plain
 * loads, stores and arithmetic, as counted in src/ (documentation, not
 * measured; counted on main at 577c0f7, chain4_run with its one-pass
 * layers: recount when a hot path in
 * src/breaker, retry, ratelimit, bulkhead or chain changes; the ctest
 * bench_report_format expects the breaker_run and bulkhead_acquire_release
 * rows, bench/test_report.cmake). The report prices each count
 * at the physical reference of the same run (harness.c, machine.physical)
 * and prints the case against the sum, its "floor": a call cannot cost less
 * than the operations it must perform, uncontended. */
typedef struct hw_floor {
  const char *name;
  int add;    /* atomic fetch_add (counters)                            */
  int xchg;   /* atomic exchange (the breaker's spinlock; unlock is a
                 plain release store)                                   */
  int cas;    /* compare-exchange that succeeds                         */
  int clock;  /* CLOCK_MONOTONIC reads                                  */
  int coarse; /* CLOCK_MONOTONIC_COARSE reads                           */
  int icall;  /* calls through a function pointer: the protected call,
                 the clock's now_ns/coarse_ns, the chain's layers       */
  const char *what;
} hw_floor;

static const hw_floor floors[] = {
    {"breaker_acquire_record", 0, 1, 0, 0, 0, 0,
     "acquire in CLOSED is one load of the state word; record takes the "
     "spinlock (1 xchg), counts, unlocks (a store)"},
    {"breaker_run", 0, 1, 0, 0, 2, 1,
     "acquire (a load), the system clock's coarse reading inline before and "
     "after the call (slow-call threshold 1 s), the call, record under the "
     "spinlock (1 xchg)"},
    {"retry_run", 0, 0, 0, 0, 0, 1,
     "fast path (no budget, deadline, listener): the call, then the "
     "thread's part of a counter (a plain load and store, core/shard.h); no "
     "atomic read-modify-write, no clock read"},
    {"ratelimiter_acquire", 0, 0, 1, 0, 1, 1,
     "one coarse reading through the clock's pointer (1 s period), one CAS "
     "of the state word; the permitted count in the thread's part"},
    {"bulkhead_acquire_release", 0, 0, 2, 0, 0, 0,
     "a CAS of the slot word each way"},
    {"chain4_run", 0, 1, 3, 0, 2, 1,
     "the retry's first attempt made by the chain (its count and the "
     "chain's clean-pass count in thread parts); breaker, rate limiter and "
     "bulkhead entered in one pass: 2 coarse readings inline and the "
     "spinlock xchg, the limiter reuses the breaker's reading: one CAS, a "
     "CAS of the bulkhead's slot word each way; the call"},
    {"breaker_1thread", 0, 1, 0, 0, 0, 0,
     "as breaker_acquire_record"},
    {"breaker_2threads", 0, 1, 0, 0, 0, 0,
     "as breaker_acquire_record, but the lock's and counters' cache lines move "
     "between the cores: contention is not in the floor"},
    /* The ramp's cases (report_ramp prints them against their target). */
    {"breaker_ramp_acquire_record", 1, 1, 0, 0, 1, 0,
     "acquire: the state word, one coarse reading (the share is a function "
     "of time; the coarse clock's resolution is under 1 % of the ramp), one "
     "fetch_add on the ramp's accumulator (the decisions' one order, which "
     "makes the share exact under concurrency); record as CLOSED's (1 xchg)"},
    {"breaker_ramp_pow_acquire_record", 1, 1, 0, 0, 1, 0,
     "as breaker_ramp_acquire_record; pow() for an aggression other than 1 "
     "is arithmetic, not priced"},
    {"breaker_ramp_off_acquire_record", 0, 1, 0, 0, 0, 0,
     "as breaker_acquire_record: CLOSED's fast path does not look at the ramp"},
};

static const hw_floor *floor_for(const char *name) {
  for (size_t i = 0; i < sizeof floors / sizeof floors[0]; i++)
    if (!strcmp(floors[i].name, name)) return &floors[i];
  return NULL;
}

/* The targets against Resilience4j 2.3.0 (perf-r4j, same cases):
 * R4j ns per call / libresil's at least min_ratio. */
typedef struct r4j_target {
  const char *name;
  double min_ratio;
} r4j_target;

static const r4j_target r4j_targets[] = {
    {"breaker_acquire_record", 3.0}, {"breaker_run", 4.0},
    {"retry_run", 5.0},              {"ratelimiter_acquire", 3.0},
    {"bulkhead_acquire_release", 2.0}, {"chain4_run", 4.0},
    {"breaker_1thread", 3.0},        {"breaker_2threads", 4.0},
};
/* breaker_2threads also: its total ops/s at least this fraction of
 * breaker_1thread's (the C side of the same perf-r4j run). */
#define R4J_2THREADS_MIN_SCALING 0.5

static json_t *find_case(json_t *cases, const char *name) {
  size_t i;
  json_t *c;
  json_array_foreach(cases, i, c) {
    const char *n = json_string_value(json_object_get(c, "name"));
    if (n && !strcmp(n, name)) return c;
  }
  return NULL;
}

static double num(json_t *o, const char *key) {
  json_t *v = json_object_get(o, key);
  return json_is_number(v) ? json_number_value(v) : NAN;
}

static const char *str(json_t *o, const char *key, const char *dflt) {
  const char *s = json_string_value(json_object_get(o, key));
  return s ? s : dflt;
}

static void fmt_ops(char *buf, size_t size, double ops) {
  if (isnan(ops))
    snprintf(buf, size, "-");
  else
    snprintf(buf, size, "%.2f M", ops / 1e6);
}

/* Adds one line to the "targets" summary and returns met. */
static int add_check(json_t *checks, const char *what, double value, int met,
                     int evaluated) {
  json_t *o = json_object();
  json_object_set_new(o, "target", json_string(what));
  json_object_set_new(o, "value", isnan(value) ? json_null() : json_real(value));
  json_object_set_new(o, "met", evaluated ? json_boolean(met) : json_null());
  json_array_append_new(checks, o);
  return met;
}

static int is_http_case(json_t *c) {
  return !strcmp(str(c, "kind", ""), "http");
}

static int is_store_case(json_t *c) {
  return !strcmp(str(c, "kind", ""), "store");
}

static int is_redis_case(json_t *c) {
  return !strcmp(str(c, "kind", ""), "redis");
}

static int is_deadline_case(json_t *c) {
  return !strcmp(str(c, "kind", ""), "deadline");
}

static int is_instances_case(json_t *c) {
  return !strcmp(str(c, "kind", ""), "instances");
}

static int is_ramp_case(json_t *c) {
  return !strcmp(str(c, "kind", ""), "ramp");
}

static int is_async_case(json_t *c) {
  return !strcmp(str(c, "kind", ""), "async");
}

/* The shared-state cases (shared_cases.c): processes against threads, and
 * `resil call --state` against plain `resil call`. */
static int is_shared_case(json_t *c) {
  return !strcmp(str(c, "kind", ""), "procs") || !strcmp(str(c, "kind", ""), "cli");
}

/* A case with no figure to judge: one marked "skipped" is checked as not
 * evaluated, one with an "error" (or, failing that, the reason invalid
 * when not NULL) as missed. Adds the check what, sets o's "met", prints the
 * SKIPPED or INVALID line (name in a column of width) and returns 1 then;
 * else 0, and does nothing. */
static int case_unjudged(json_t *cc, json_t *o, json_t *checks, int width, const char *name,
                         const char *what, const char *invalid) {
  const char *skipped = json_string_value(json_object_get(cc, "skipped"));
  const char *err = json_string_value(json_object_get(cc, "error"));
  if (!err) err = invalid;
  if (skipped) {
    add_check(checks, what, NAN, 0, 0);
    json_object_set_new(o, "met", json_null());
    printf("  %-*s SKIPPED: %s\n", width, name, skipped);
    return 1;
  }
  if (err) {
    add_check(checks, what, NAN, 0, 1);
    json_object_set_new(o, "met", json_false());
    printf("  %-*s INVALID: %s\n", width, name, err);
    return 1;
  }
  return 0;
}

/* The common verdict of a case judged on one figure, value, that met says
 * is on target: case_unjudged's, and -1, for a case with no figure; else
 * adds the check what with value, sets o's "met" and returns 1 (met) or 0
 * (missed), for the caller to print the figures. */
static int case_verdict(json_t *cc, json_t *o, json_t *checks, int width, const char *name,
                        const char *what, const char *invalid, double value, int met) {
  if (case_unjudged(cc, o, checks, width, name, what, invalid)) return -1;
  add_check(checks, what, value, met, 1);
  json_object_set_new(o, "met", json_boolean(met));
  return met;
}

/* The shared-state cases (shared_cases.c): N processes on one shared
 * instance against N threads on one in-process instance (ratio of total
 * ops/s, same run), and `resil call --state`'s added start-to-exit time.
 * Appends each case, with "target" and "met", to ocases. */
static void report_shared(json_t *ccases, json_t *ocases, json_t *checks) {
  char target[96], what[200];
  int header = 0;
  size_t i;
  json_t *cc;
  /* One process: the policy with its state in a segment against the same
   * policy in the process, both policy cases of this run. */
  static const char *const one[][2] = {
      {"shared_breaker_acquire_record", "breaker_acquire_record"},
      {"shared_ratelimiter_acquire", "ratelimiter_acquire"}};
  for (size_t k = 0; k < sizeof one / sizeof one[0]; k++) {
    json_t *sh = find_case(ccases, one[k][0]), *in = find_case(ccases, one[k][1]);
    if (!sh) continue;
    if (!header) {
      printf("\nShared state in one process: the policy case with its state in a "
             "resil_shared segment against the same case in the process, same run; target "
             "<= %.2fx its ns per call:\n", BENCH_SHARED_MAX_NS_RATIO);
      header = 1;
    }
    double ns_sh = num(sh, "ns_per_call"), ns_in = num(in, "ns_per_call");
    double ratio = ns_sh / ns_in;
    /* The shared case invalid: missed; the in-process one: not evaluated. */
    int evaluated = !isnan(ratio) || json_object_get(sh, "error") != NULL;
    int met = !isnan(ratio) && ratio <= BENCH_SHARED_MAX_NS_RATIO;
    snprintf(what, sizeof what, "%s ns_per_call <= %.2fx %s's (same run)", one[k][0],
             BENCH_SHARED_MAX_NS_RATIO, one[k][1]);
    add_check(checks, what, ratio, met, evaluated);
    if (!isnan(ratio))
      printf("  %-30s %.2f ns / %s %.2f ns = x%.3f (target <= %.2f) %s\n", one[k][0], ns_sh,
             one[k][1], ns_in, ratio, BENCH_SHARED_MAX_NS_RATIO, met ? "yes" : "NO");
    else
      printf("  %-30s %s: %s or %s missing or invalid\n", one[k][0],
             evaluated ? "NO" : "not evaluated", one[k][0], one[k][1]);
  }
  header = 0;
  snprintf(target, sizeof target, ">= %.2fx the threads' total ops/s", BENCH_SHARED_MIN_RATIO);
  json_array_foreach(ccases, i, cc) {
    if (strcmp(str(cc, "kind", ""), "procs") != 0) continue;
    if (!header) {
      printf("\nShared state across processes: N forked processes on one instance in a "
             "resil_shared segment against N threads on one in-process instance, "
             "alternating runs, same run; target %s; medians over rounds, ratio = median "
             "of per-round ratios (with more workers than CPUs both sides share them):\n",
             target);
      header = 1;
    }
    const char *name = str(cc, "name", "?");
    long long workers = (long long)json_integer_value(json_object_get(cc, "workers"));
    json_t *o = json_deep_copy(cc);
    json_object_set_new(o, "target", json_string(target));
    snprintf(what, sizeof what, "%s processes' total ops/s >= %.2fx threads' (same run)", name,
             BENCH_SHARED_MIN_RATIO);
    int met = case_verdict(cc, o, checks, 26, name, what, NULL, num(cc, "ratio"),
                           num(cc, "ratio") >= BENCH_SHARED_MIN_RATIO);
    if (met >= 0)
      printf("  %-26s %lld processes %.2f M ops/s / %lld threads %.2f M ops/s = %.3f "
             "(target >= %.2f) %s (ratio of the medians %.3f) [%lld rounds of %lld ms, "
             "load %.2f..%.2f]\n",
             name, workers, num(cc, "ops_per_s_procs") / 1e6, workers,
             num(cc, "ops_per_s_threads") / 1e6, num(cc, "ratio"), BENCH_SHARED_MIN_RATIO,
             met ? "yes" : "NO", num(cc, "ratio_of_medians"),
             (long long)json_integer_value(json_object_get(cc, "rounds")),
             (long long)json_integer_value(json_object_get(cc, "run_ms")),
             num(cc, "loadavg_start"), num(cc, "loadavg_end"));
    json_array_append_new(ocases, o);
  }
  json_array_foreach(ccases, i, cc) {
    if (strcmp(str(cc, "kind", ""), "cli") != 0) continue;
    const char *name = str(cc, "name", "?");
    snprintf(target, sizeof target, "added <= %.1f ms", BENCH_CLI_STATE_MAX_ADDED_MS);
    printf("\n`resil call --state` against plain `resil call`, whole processes started "
           "alternately against nginx, same run; target: %s (median of pairwise "
           "differences):\n", target);
    json_t *o = json_deep_copy(cc);
    json_object_set_new(o, "target", json_string(target));
    snprintf(what, sizeof what, "%s start-to-exit time added by --state <= %.1f ms", name,
             BENCH_CLI_STATE_MAX_ADDED_MS);
    double added = num(cc, "added_ms");
    int met = case_verdict(cc, o, checks, 26, name, what, NULL, added,
                           added <= BENCH_CLI_STATE_MAX_ADDED_MS);
    if (met >= 0)
      printf("  %-26s plain %.3f ms, --state %.3f ms, added %+.3f ms (target <= %.1f) %s; "
             "CPU %.2f / %.2f ms [%lld pairs, load %.2f..%.2f]\n",
             name, num(cc, "wall_ms_plain"), num(cc, "wall_ms_state"), added,
             BENCH_CLI_STATE_MAX_ADDED_MS, met ? "yes" : "NO", num(cc, "cpu_ms_plain"),
             num(cc, "cpu_ms_state"), (long long)json_integer_value(json_object_get(cc, "pairs")),
             num(cc, "loadavg_start"), num(cc, "loadavg_end"));
    json_array_append_new(ocases, o);
  }
}

static double floor_ns(const hw_floor *f, json_t *machine);
static void fmt_counts(char *buf, size_t size, const hw_floor *f);

/* The breaker's ramp cases (cases.c ramp_cases, issue 23): each against
 * breaker_acquire_record alternated with it in the same run; ratio = median
 * of the per-round ratios, with its range. Appends each case, with
 * "target" and "met", to ocases. With the run's physical references, each
 * case also gets its floor as a ratio: the reference's measured ns plus
 * what the case's floor adds to the reference's floor (floors[]), over the
 * reference's ns: the lowest ratio the case's operations allow
 * ("floor_ratio"; a target below it cannot be met by this design). */
static void report_ramp(json_t *ccases, json_t *ocases, json_t *checks, json_t *machine) {
  char target[96], what[200];
  int header = 0;
  size_t i;
  json_t *cc;
  json_array_foreach(ccases, i, cc) {
    if (!is_ramp_case(cc)) continue;
    if (!header) {
      printf("\nThe breaker's ramp: acquire + record on a ramping breaker (or one with a ramp "
             "configured, not ramping) against breaker_acquire_record, alternating rounds, same "
             "run; ratio = median of per-round ratios:\n");
      header = 1;
    }
    const char *name = str(cc, "name", "?");
    double max = num(cc, "target_max_ratio");
    snprintf(target, sizeof target, "<= %.2fx breaker_acquire_record's ns per call", max);
    snprintf(what, sizeof what, "%s ns_per_call <= %.2fx breaker_acquire_record's (same run)",
             name, max);
    json_t *o = json_deep_copy(cc);
    json_object_set_new(o, "target", json_string(target));
    double ratio = num(cc, "ratio");
    int met = case_verdict(cc, o, checks, 34, name, what, isnan(ratio) ? "no ratio" : NULL,
                           ratio, ratio <= max);
    if (met >= 0)
      printf("  %-34s %.2f ns / %.2f ns = x%.3f (x%.3f..x%.3f) (target <= %.2f) %s "
             "[admitted %.1f %%, %lld rounds, load %.2f..%.2f]\n",
             name, num(cc, "ns_per_call"), num(cc, "ns_per_call_ref"), ratio,
             num(cc, "ratio_min"), num(cc, "ratio_max"), max, met ? "yes" : "NO",
             100.0 * num(cc, "admitted_share"),
             (long long)json_integer_value(json_object_get(cc, "rounds")),
             num(cc, "loadavg_start"), num(cc, "loadavg_end"));
    const hw_floor *f = floor_for(name), *fr = floor_for("breaker_acquire_record");
    double ref = num(cc, "ns_per_call_ref");
    double added = f && fr ? floor_ns(f, machine) - floor_ns(fr, machine) : NAN;
    if (met >= 0 && !isnan(added) && ref > 0) {
      char counts[200];
      fmt_counts(counts, sizeof counts, f);
      double fratio = (ref + added) / ref;
      json_object_set_new(o, "floor_ratio", json_real(fratio));
      printf("    its floor: %s = the reference's + %.2f ns: x%.3f%s\n", counts, added, fratio,
             fratio > max ? " (the target is below it)" : "");
    }
    json_array_append_new(ocases, o);
  }
}

/* The async cases (async_cases.c): libresil's engine against bare libcurl
 * multi_socket on the same loop, same run. Appends each case, with
 * "target" and "met", to ocases. */
static void report_async(json_t *ccases, json_t *ocases, json_t *checks) {
  char target[128], what[200];
  snprintf(target, sizeof target, ">= %.2fx bare multi_socket's req/s, CPU/req <= %.2fx its",
           BENCH_ASYNC_MIN_RATIO, BENCH_ASYNC_MAX_CPU_RATIO);
  int header = 0;
  size_t i;
  json_t *cc;
  json_array_foreach(ccases, i, cc) {
    if (!is_async_case(cc)) continue;
    if (!header) {
      printf("\nAsync, one loop thread against nginx: libresil's engine with {retry, breaker, "
             "bulkhead} against its reference, bare libcurl multi_socket on the same loop, "
             "same run; targets: %s; medians over rounds:\n", target);
      header = 1;
    }
    const char *name = str(cc, "name", "?");
    json_t *o = json_deep_copy(cc);
    json_object_set_new(o, "target", json_string(target));
    double ratio = num(cc, "ratio");
    snprintf(what, sizeof what, "%s libresil engine req/s >= %.2fx bare multi_socket's "
             "(same run)", name, BENCH_ASYNC_MIN_RATIO);
    int met = case_verdict(cc, o, checks, 26, name, what, NULL, ratio,
                           ratio >= BENCH_ASYNC_MIN_RATIO);
    if (met >= 0) {
      double cpu = num(cc, "cpu_ratio");
      int cpu_ok = isnan(cpu) || cpu <= BENCH_ASYNC_MAX_CPU_RATIO; /* NaN: not evaluated */
      snprintf(what, sizeof what, "%s libresil engine CPU per request <= %.2fx bare "
               "multi_socket's (same run)", name, BENCH_ASYNC_MAX_CPU_RATIO);
      add_check(checks, what, cpu, cpu_ok, !isnan(cpu));
      if (!cpu_ok) json_object_set_new(o, "met", json_false());
      printf("  %-26s vs bare multi_socket [%lld in flight, %lld rounds, load %.2f..%.2f]: "
             "req/s %.0f / %.0f = %.3f (target >= %.2f) %s; CPU/req %.1f / %.1f us = x%.2f "
             "(target <= %.2f) %s; bytes/in-flight %.0f / %.0f = x%.2f (not a target)\n",
             name, (long long)json_integer_value(json_object_get(cc, "inflight")),
             (long long)json_integer_value(json_object_get(cc, "rounds")),
             num(cc, "loadavg_start"), num(cc, "loadavg_end"), num(cc, "req_per_s_libresil"),
             num(cc, "req_per_s_libcurl_multi"), ratio, BENCH_ASYNC_MIN_RATIO,
             met ? "yes" : "NO", num(cc, "cpu_us_per_req_libresil"),
             num(cc, "cpu_us_per_req_libcurl_multi"), cpu, BENCH_ASYNC_MAX_CPU_RATIO,
             isnan(cpu) ? "-" : cpu_ok ? "yes" : "NO", num(cc, "bytes_per_inflight_libresil"),
             num(cc, "bytes_per_inflight_libcurl_multi"), num(cc, "mem_ratio"));
      if (json_object_get(cc, "req_per_s_libcurl_multi_window"))
        printf("  %-26s bare multi handing libcurl <= %lld transfers at a time (the rest "
               "queued by the caller): %.0f req/s, CPU/req %.1f us; libresil / it: ratio "
               "%.3f, CPU x%.2f (not a target)\n",
               "", (long long)json_integer_value(json_object_get(cc, "max_connections")),
               num(cc, "req_per_s_libcurl_multi_window"),
               num(cc, "cpu_us_per_req_libcurl_multi_window"), num(cc, "ratio_capped"),
               num(cc, "cpu_ratio_capped"));
    }
    json_array_append_new(ocases, o);
  }
}

/* The HTTP cases (http_cases.c): their own lines and checks, against bare
 * libcurl measured in the same run rather than against the Node peers.
 * Appends each case, with "target" and "met", to ocases. */
static void report_http(json_t *ccases, json_t *ocases, json_t *checks) {
  char target[128], what[200];
  snprintf(target, sizeof target, "caller CPU/req <= %.2fx libcurl's, p50 added <= %.0f us, "
           ">= %.2fx libcurl req/s", BENCH_HTTP_MAX_CPU_RATIO, BENCH_HTTP_MAX_ADDED_US,
           BENCH_HTTP_MIN_RATIO);
  int header = 0;
  size_t i;
  json_t *cc;
  json_array_foreach(ccases, i, cc) {
    if (!is_http_case(cc)) continue;
    if (!header) {
      printf("\nHTTP, libresil's client behind Retry(Breaker(RateLimiter(Bulkhead(HTTP)))) "
             "against its reference, bare libcurl (curl_easy_perform on the same "
             "keep-alive connection), same run; targets: %s; medians of per-round "
             "figures:\n", target);
      header = 1;
    }
    const char *name = str(cc, "name", "?");
    json_t *o = json_deep_copy(cc);
    json_object_set_new(o, "target", json_string(target));
    double ratio = num(cc, "ratio"), added = num(cc, "p50_added_us");
    snprintf(what, sizeof what, "%s libresil req/s >= %.2fx bare libcurl's (same run)",
             name, BENCH_HTTP_MIN_RATIO);
    if (!case_unjudged(cc, o, checks, 28, name, what, NULL)) {
      double cpu = num(cc, "cpu_ratio");
      int ratio_ok = ratio >= BENCH_HTTP_MIN_RATIO;
      int added_ok = added <= BENCH_HTTP_MAX_ADDED_US;
      int cpu_ok = isnan(cpu) || cpu <= BENCH_HTTP_MAX_CPU_RATIO; /* NaN: not evaluated */
      snprintf(what, sizeof what, "%s caller CPU per request <= %.2fx bare libcurl's "
               "(same run)", name, BENCH_HTTP_MAX_CPU_RATIO);
      add_check(checks, what, cpu, cpu_ok, !isnan(cpu));
      snprintf(what, sizeof what, "%s libresil req/s >= %.2fx bare libcurl's (same run)",
               name, BENCH_HTTP_MIN_RATIO);
      add_check(checks, what, ratio, ratio_ok, 1);
      snprintf(what, sizeof what, "%s p50 added by libresil <= %.0f us", name,
               BENCH_HTTP_MAX_ADDED_US);
      add_check(checks, what, added, added_ok, 1);
      json_object_set_new(o, "met", json_boolean(ratio_ok && added_ok && cpu_ok));
      printf("  %-34s vs bare libcurl [%lld caller%s, %lld rounds]: caller CPU/req %.2f / "
             "%.2f us = x%.3f (target <= %.2f) %s; p50 %.1f / %.1f us, added %+.2f us "
             "(target <= %.0f us) %s; req/s %.0f / %.0f = %.3f (target >= %.2f) %s; "
             "p99 %.1f / %.1f us\n",
             name, (long long)json_integer_value(json_object_get(cc, "callers")),
             json_integer_value(json_object_get(cc, "callers")) == 1 ? "" : "s",
             (long long)json_integer_value(json_object_get(cc, "rounds")),
             num(cc, "caller_cpu_us_per_req_libresil"),
             num(cc, "caller_cpu_us_per_req_libcurl"), cpu, BENCH_HTTP_MAX_CPU_RATIO,
             isnan(cpu) ? "-" : cpu_ok ? "yes" : "NO", num(cc, "p50_us_libresil"),
             num(cc, "p50_us_libcurl"), added, BENCH_HTTP_MAX_ADDED_US,
             added_ok ? "yes" : "NO", num(cc, "req_per_s_libresil"),
             num(cc, "req_per_s_libcurl"), ratio, BENCH_HTTP_MIN_RATIO,
             ratio_ok ? "yes" : "NO", num(cc, "p99_us_libresil"), num(cc, "p99_us_libcurl"));
      if (json_object_get(cc, "ratio_vs_libcurl_multi"))
        printf("  %-34s vs libcurl driven through a multi handle like libresil (not a "
               "target): CPU/req x%.3f, p50 added %+.2f us, req/s ratio %.3f\n", "",
               num(cc, "cpu_ratio_vs_libcurl_multi"),
               num(cc, "p50_added_us_vs_libcurl_multi"), num(cc, "ratio_vs_libcurl_multi"));
    }
    json_array_append_new(ocases, o);
  }
}

/* The operation-store cases (store_cases.c): keyed operations per second
 * against the raw INSERT ceiling measured in the same run. Appends each
 * case, with "target" and "met", to ocases. */
static void report_store(json_t *ccases, json_t *ocases, json_t *checks) {
  char target[96], what[200];
  snprintf(target, sizeof target, ">= %.2f of the raw ceiling's ops/s", BENCH_STORE_MIN_RATIO);
  int header = 0;
  size_t i;
  json_t *cc;
  json_array_foreach(ccases, i, cc) {
    if (!is_store_case(cc)) continue;
    if (!header) {
      printf("\nOperation store, keyed operations (begin + complete, trivial effect) against "
             "their reference, raw single-row INSERT transactions on the same database, "
             "same run, one thread; target %s; ratio = median of per-round ratios:\n",
             target);
      header = 1;
    }
    const char *name = str(cc, "name", "?");
    json_t *o = json_deep_copy(cc);
    json_object_set_new(o, "target", json_string(target));
    double ratio = num(cc, "ratio");
    snprintf(what, sizeof what, "%s libresil keyed ops/s >= %.2fx raw INSERT transactions' "
             "(same run)", name, BENCH_STORE_MIN_RATIO);
    int met = case_verdict(cc, o, checks, 26, name, what, NULL, ratio,
                           ratio >= BENCH_STORE_MIN_RATIO);
    if (met >= 0) {
      printf("  %-26s vs raw INSERT: ops/s %.0f / %.0f = %.3f (target >= %.2f) %s (ratio of "
             "the medians %.3f)  commits/op libresil %.2f raw %.2f  [%s, %lld rounds]\n",
             name, num(cc, "ops_per_s_libresil"), num(cc, "ops_per_s_raw"), ratio,
             BENCH_STORE_MIN_RATIO, met ? "yes" : "NO", num(cc, "ratio_of_medians"),
             num(cc, "commits_per_op_libresil"), num(cc, "commits_per_op_raw"),
             str(cc, "filesystem", "?"),
             (long long)json_integer_value(json_object_get(cc, "rounds")));
    }
    json_array_append_new(ocases, o);
  }
}

/* The rate limiter on Redis (redis_cases.c), each case against bare
 * hiredis sending EVALSHA of the same script, same run:
 * redis_ratelimiter_acquire, the limiter's blocking decisions per second
 * against blocking redisCommandArgv; redis_engine_decisions (a case with
 * "in_flight"), its engine path's decisions per second with that many in
 * flight against hiredis async. Appends each case, with "target" and
 * "met", to ocases. */
static void report_redis(json_t *ccases, json_t *ocases, json_t *checks) {
  char target[96], what[200];
  int header = 0;
  size_t i;
  json_t *cc;
  json_array_foreach(ccases, i, cc) {
    if (!is_redis_case(cc)) continue;
    if (!header) {
      printf("\nRate limiter on Redis against its reference, bare hiredis sending EVALSHA of "
             "the same script with the same arguments to the same redis-server on loopback, "
             "same run, one thread; target >= %.2f of the reference's decisions/s; medians "
             "over alternating rounds:\n",
             BENCH_REDIS_MIN_RATIO);
      header = 1;
    }
    const char *name = str(cc, "name", "?");
    json_t *o = json_deep_copy(cc);
    double ratio = num(cc, "ratio");
    long long in_flight = (long long)json_integer_value(json_object_get(cc, "in_flight"));
    if (in_flight > 0) {
      snprintf(target, sizeof target,
               ">= %.2f of bare hiredis async's decisions/s, %lld in flight",
               BENCH_REDIS_MIN_RATIO, in_flight);
      snprintf(what, sizeof what, "%s libresil-redis engine-path decisions/s >= %.2fx bare "
               "hiredis async's, %lld in flight (same run)", name, BENCH_REDIS_MIN_RATIO,
               in_flight);
    } else {
      snprintf(target, sizeof target, ">= %.2f of a bare hiredis EVALSHA's decisions/s",
               BENCH_REDIS_MIN_RATIO);
      snprintf(what, sizeof what, "%s libresil-redis decisions/s >= %.2fx a bare hiredis "
               "EVALSHA's (same run)", name, BENCH_REDIS_MIN_RATIO);
    }
    json_object_set_new(o, "target", json_string(target));
    int met = case_verdict(cc, o, checks, 26, name, what, NULL, ratio,
                           ratio >= BENCH_REDIS_MIN_RATIO);
    if (met >= 0 && in_flight > 0)
      printf("  %-26s vs bare hiredis async, %lld in flight [%lld rounds of %lld, load "
             "%.2f..%.2f]: %.0f / %.0f decisions/s, rate ratio %.3f (target >= %.2f) %s "
             "(median of per-round ratios %.3f); loop CPU %.2f / %.2f us per decision = "
             "x%.2f, redis-server busy %.2f / %.2f (not targets)\n",
             name, in_flight, (long long)json_integer_value(json_object_get(cc, "rounds")),
             (long long)json_integer_value(json_object_get(cc, "decisions_per_round")),
             num(cc, "loadavg_start"), num(cc, "loadavg_end"),
             num(cc, "decisions_per_s_libresil"), num(cc, "decisions_per_s_bare"), ratio,
             BENCH_REDIS_MIN_RATIO, met ? "yes" : "NO", num(cc, "ratio_median_of_rounds"),
             num(cc, "cpu_ns_per_decision_libresil") / 1e3,
             num(cc, "cpu_ns_per_decision_bare") / 1e3, num(cc, "cpu_ratio"),
             num(cc, "server_busy_libresil"), num(cc, "server_busy_bare"));
    else if (met >= 0)
      printf("  %-26s vs bare hiredis EVALSHA [%lld rounds of %lld, load %.2f..%.2f]: "
             "%.2f / %.2f us per decision, rate ratio %.3f (target >= %.2f) %s (median of "
             "per-round ratios %.3f); caller CPU %.2f / %.2f us = x%.2f (not a target)\n",
             name, (long long)json_integer_value(json_object_get(cc, "rounds")),
             (long long)json_integer_value(json_object_get(cc, "decisions_per_round")),
             num(cc, "loadavg_start"), num(cc, "loadavg_end"),
             num(cc, "ns_per_decision_libresil") / 1e3, num(cc, "ns_per_decision_bare") / 1e3,
             ratio, BENCH_REDIS_MIN_RATIO, met ? "yes" : "NO",
             num(cc, "ratio_median_of_rounds"), num(cc, "cpu_ns_per_decision_libresil") / 1e3,
             num(cc, "cpu_ns_per_decision_bare") / 1e3, num(cc, "cpu_ratio"));
    json_array_append_new(ocases, o);
  }
}

/* The deadline header's cost (deadline_cases.c): caller CPU per keep-alive
 * GET with the header against the same call and deadline without it, same
 * run. Appends the case, with "target" and "met", to ocases. */
static void report_deadline(json_t *ccases, json_t *ocases, json_t *checks) {
  char target[96], what[240];
  snprintf(target, sizeof target, "caller CPU <= %.2fx the same call without the header",
           BENCH_DEADLINE_HDR_MAX_CPU_RATIO);
  int header = 0;
  size_t i;
  json_t *cc;
  json_array_foreach(ccases, i, cc) {
    if (!is_deadline_case(cc)) continue;
    if (!header) {
      printf("\nDeadline header (Request-Timeout) cost, keep-alive GET through resil_http_call "
             "with a ctx deadline, header sent vs no_deadline_header, same client, same run; "
             "target %s; medians over alternating rounds:\n", target);
      header = 1;
    }
    const char *name = str(cc, "name", "?");
    json_t *o = json_deep_copy(cc);
    json_object_set_new(o, "target", json_string(target));
    snprintf(what, sizeof what, "%s caller CPU per request with the deadline header <= %.2fx "
             "without (median of per-round ratios, same run)", name,
             BENCH_DEADLINE_HDR_MAX_CPU_RATIO);
    double ratio = num(cc, "ratio");
    int met = case_verdict(cc, o, checks, 32, name, what, NULL, ratio,
                           ratio <= BENCH_DEADLINE_HDR_MAX_CPU_RATIO);
    if (met >= 0) {
      printf("  %-32s caller CPU %.2f / %.2f us per request, ratio %.4f (target <= %.2f) %s "
             "(ratio of the medians %.4f); wall %.2f / %.2f us = x%.3f  [%lld rounds of %lld, "
             "load %.2f..%.2f]\n",
             name, num(cc, "cpu_ns_per_request_header") / 1e3,
             num(cc, "cpu_ns_per_request_no_header") / 1e3, ratio,
             BENCH_DEADLINE_HDR_MAX_CPU_RATIO, met ? "yes" : "NO",
             num(cc, "cpu_ratio_of_medians"), num(cc, "ns_per_request_header") / 1e3,
             num(cc, "ns_per_request_no_header") / 1e3, num(cc, "wall_ratio"),
             (long long)json_integer_value(json_object_get(cc, "rounds")),
             (long long)json_integer_value(json_object_get(cc, "requests_per_round")),
             num(cc, "loadavg_start"), num(cc, "loadavg_end"));
      if (json_object_get(cc, "bare_ratio"))
        printf("  %-32s bare libcurl, the same line or none: caller CPU %.2f / %.2f us, ratio "
               "%.4f (the reference: what libcurl charges for the line; not a target)\n",
               "", num(cc, "bare_cpu_ns_per_request_header") / 1e3,
               num(cc, "bare_cpu_ns_per_request_no_header") / 1e3, num(cc, "bare_ratio"));
    }
    json_array_append_new(ocases, o);
  }
}

/* Each instance's share, "a / b / c / d", from the case's
 * "instance_shares". */
static void fmt_shares(json_t *cc, char *buf, size_t size) {
  json_t *a = json_object_get(cc, "instance_shares");
  size_t i, used = 0;
  json_t *v;
  buf[0] = '\0';
  json_array_foreach(a, i, v) {
    int k = snprintf(buf + used, size - used, "%s%.3f", i ? " / " : "", json_number_value(v));
    if (k < 0 || (size_t)k >= size - used) break;
    used += (size_t)k;
  }
}

/* The many-instances cases (instances_cases.c), a client of several
 * instances against a client of one, same run: http_instances_choice_nginx,
 * caller CPU per keep-alive GET (at most BENCH_INSTANCES_MAX_CPU_RATIO
 * times); async_instances_1000_inflight (a case with "inflight"), the
 * engine's req/s (at least BENCH_INSTANCES_MIN_RATIO of it). Appends each
 * case, with "target" and "met", to ocases. */
static void report_instances(json_t *ccases, json_t *ocases, json_t *checks) {
  char target[96], what[240], sh[160];
  int header = 0;
  size_t i;
  json_t *cc;
  json_array_foreach(ccases, i, cc) {
    if (!is_instances_case(cc)) continue;
    if (!header) {
      printf("\nMany instances, a client of several nginx ports (P2C) against a client of the "
             "first one, same run; medians over alternating rounds:\n");
      header = 1;
    }
    const char *name = str(cc, "name", "?");
    json_t *o = json_deep_copy(cc);
    long long n = (long long)json_integer_value(json_object_get(cc, "instances"));
    long long in_flight = (long long)json_integer_value(json_object_get(cc, "inflight"));
    fmt_shares(cc, sh, sizeof sh);
    double ratio = num(cc, "ratio");
    if (in_flight > 0) {
      snprintf(target, sizeof target, ">= %.2f of the req/s over one instance",
               BENCH_INSTANCES_MIN_RATIO);
      snprintf(what, sizeof what, "%s engine req/s over several instances >= %.2fx over one, "
               "%lld in flight (same run)", name, BENCH_INSTANCES_MIN_RATIO, in_flight);
      json_object_set_new(o, "target", json_string(target));
      int met = case_verdict(cc, o, checks, 26, name, what, NULL, ratio,
                             ratio >= BENCH_INSTANCES_MIN_RATIO);
      if (met >= 0)
        printf("  %-32s %lld in flight: %.0f req/s over %lld instances (%lld connections each "
               "at most), %.0f over one, ratio %.3f (target >= %.2f) %s (ratio of the medians "
               "%.3f); loop CPU %.2f / %.2f us per request (not a target); shares %s  [%lld "
               "rounds, load %.2f..%.2f]\n",
               name, in_flight, num(cc, "req_per_s_many"), n,
               (long long)json_integer_value(
                   json_object_get(cc, "max_connections_per_host_many")),
               num(cc, "req_per_s_one"), ratio, BENCH_INSTANCES_MIN_RATIO, met ? "yes" : "NO",
               num(cc, "ratio_of_medians"), num(cc, "cpu_us_per_req_many"),
               num(cc, "cpu_us_per_req_one"), sh,
               (long long)json_integer_value(json_object_get(cc, "rounds")),
               num(cc, "loadavg_start"), num(cc, "loadavg_end"));
      if (met >= 0 && json_object_get(cc, "ratio_shared"))
        printf("  %-32s the same client with %lld connections per instance: %.0f req/s, "
               "ratio %.3f, loop CPU %.2f us per request, %.3f connections opened per "
               "request (not a target)\n",
               "",
               (long long)json_integer_value(
                   json_object_get(cc, "max_connections_per_host_many_shared")),
               num(cc, "req_per_s_many_shared"), num(cc, "ratio_shared"),
               num(cc, "cpu_us_per_req_many_shared"),
               num(cc, "connections_per_request_many_shared"));
      json_array_append_new(ocases, o);
      continue;
    }
    snprintf(target, sizeof target, "caller CPU <= %.2fx the same GET over one instance",
             BENCH_INSTANCES_MAX_CPU_RATIO);
    snprintf(what, sizeof what, "%s caller CPU per keep-alive GET over several instances <= "
             "%.2fx over one (median of per-round ratios, same run)", name,
             BENCH_INSTANCES_MAX_CPU_RATIO);
    json_object_set_new(o, "target", json_string(target));
    int met = case_verdict(cc, o, checks, 32, name, what, NULL, ratio,
                           ratio <= BENCH_INSTANCES_MAX_CPU_RATIO);
    if (met >= 0) {
      printf("  %-32s caller CPU %.2f us per request over %lld instances, %.2f over one, "
             "ratio %.4f (target <= %.2f) %s (ratio of the medians %.4f); wall %.2f / %.2f us "
             "= x%.3f; shares %s; %.3f connections opened per request  [%lld rounds of %lld, "
             "load %.2f..%.2f]\n",
             name, num(cc, "cpu_ns_per_request_many") / 1e3, n,
             num(cc, "cpu_ns_per_request_one") / 1e3, ratio, BENCH_INSTANCES_MAX_CPU_RATIO,
             met ? "yes" : "NO", num(cc, "cpu_ratio_of_medians"),
             num(cc, "ns_per_request_many") / 1e3, num(cc, "ns_per_request_one") / 1e3,
             num(cc, "wall_ratio"), sh, num(cc, "connections_per_request_many"),
             (long long)json_integer_value(json_object_get(cc, "rounds")),
             (long long)json_integer_value(json_object_get(cc, "requests_per_round")),
             num(cc, "loadavg_start"), num(cc, "loadavg_end"));
      if (json_object_get(cc, "ratio_same"))
        printf("  %-32s %lld instances that are all the first URL (one origin, one "
               "connection): caller CPU %.2f us per request, ratio %.4f (not a target)\n",
               "", n, num(cc, "cpu_ns_per_request_many_same") / 1e3, num(cc, "ratio_same"));
    }
    json_array_append_new(ocases, o);
  }
}

/* ---- physical references and floors ------------------------------------ */

static double phys(json_t *machine, const char *key) {
  return num(json_object_get(json_object_get(machine, "physical"), key), "ns_per_call");
}

/* "1 xchg + 2 coarse reads + 3 indirect calls" */
static void fmt_counts(char *buf, size_t size, const hw_floor *f) {
  const struct {
    int n;
    const char *one, *many;
  } parts[] = {{f->add, "fetch_add", "fetch_adds"},
               {f->xchg, "xchg", "xchgs"},
               {f->cas, "CAS", "CAS"},
               {f->clock, "CLOCK_MONOTONIC read", "CLOCK_MONOTONIC reads"},
               {f->coarse, "coarse read", "coarse reads"},
               {f->icall, "indirect call", "indirect calls"}};
  size_t used = 0;
  buf[0] = '\0';
  for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++) {
    if (!parts[i].n) continue;
    int w = snprintf(buf + used, size - used, "%s%d %s", used ? " + " : "", parts[i].n,
                     parts[i].n == 1 ? parts[i].one : parts[i].many);
    if (w < 0 || (size_t)w >= size - used) break;
    used += (size_t)w;
  }
  if (!used) snprintf(buf, size, "nothing");
}

/* The floor of f in ns at this run's references; NAN when one it needs is
 * missing. */
static double floor_ns(const hw_floor *f, json_t *machine) {
  const struct {
    int n;
    const char *key;
  } parts[] = {{f->add, "atomic_fetch_add"},   {f->xchg, "atomic_exchange"},
               {f->cas, "atomic_cas"},         {f->clock, "clock_monotonic"},
               {f->coarse, "clock_monotonic_coarse"}, {f->icall, "indirect_call"}};
  double sum = 0.0;
  for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++) {
    if (!parts[i].n) continue;
    double ns = phys(machine, parts[i].key);
    if (isnan(ns)) return NAN;
    sum += parts[i].n * ns;
  }
  return sum;
}

/* One line of physical references for the header. */
static void print_physical(json_t *machine) {
  if (!json_is_object(json_object_get(machine, "physical"))) {
    printf("physical references: not in the C results (an older resil_bench?)\n");
    return;
  }
  printf("physical references, this run (median of runs, one thread, uncontended): "
         "atomic fetch_add %.2f ns, xchg %.2f ns, CAS %.2f ns; CLOCK_MONOTONIC read "
         "%.2f ns, CLOCK_MONOTONIC_COARSE read %.2f ns; indirect call %.2f ns\n",
         phys(machine, "atomic_fetch_add"), phys(machine, "atomic_exchange"),
         phys(machine, "atomic_cas"), phys(machine, "clock_monotonic"),
         phys(machine, "clock_monotonic_coarse"), phys(machine, "indirect_call"));
}

/* Each policy case against the hardware: its ns in atomic RMWs (fetch_add)
 * and against its floor. Returns the "hardware_floor" array of
 * results.json. */
static json_t *report_floors(json_t *ccases, json_t *machine) {
  json_t *arr = json_array();
  double rmw = phys(machine, "atomic_fetch_add");
  printf("\nAgainst the hardware, same run: each policy case's ns per call in uncontended "
         "atomic RMWs (fetch_add, %.2f ns) and against its floor, the atomics, clock "
         "reads and indirect calls its hot path performs (counted in src/, "
         "bench/report.c), priced at the references above:\n", rmw);
  size_t i;
  json_t *cc;
  json_array_foreach(ccases, i, cc) {
    if (is_http_case(cc) || is_store_case(cc) || is_async_case(cc) || is_shared_case(cc) ||
        is_redis_case(cc) || is_deadline_case(cc) || is_instances_case(cc) ||
        is_ramp_case(cc))
      continue;
    const char *name = str(cc, "name", "?");
    const hw_floor *f = floor_for(name);
    if (!f) continue;
    char counts[200];
    fmt_counts(counts, sizeof counts, f);
    double ns = num(cc, "ns_per_call");
    double fl = floor_ns(f, machine);
    json_t *o = json_object();
    json_object_set_new(o, "name", json_string(name));
    json_t *n = json_object();
    json_object_set_new(n, "atomic_fetch_add", json_integer(f->add));
    json_object_set_new(n, "atomic_exchange", json_integer(f->xchg));
    json_object_set_new(n, "atomic_cas", json_integer(f->cas));
    json_object_set_new(n, "clock_monotonic", json_integer(f->clock));
    json_object_set_new(n, "clock_monotonic_coarse", json_integer(f->coarse));
    json_object_set_new(n, "indirect_call", json_integer(f->icall));
    json_object_set_new(o, "counts", n);
    json_object_set_new(o, "floor", json_string(counts));
    json_object_set_new(o, "what", json_string(f->what));
    json_object_set_new(o, "floor_ns", isnan(fl) ? json_null() : json_real(fl));
    const char *err = json_string_value(json_object_get(cc, "error"));
    if (err || isnan(ns)) {
      printf("  %-26s INVALID; its floor (%.2f ns: %s)\n", name, fl, counts);
    } else {
      double in_rmw = ns / rmw;
      json_object_set_new(o, "ns_per_call", json_real(ns));
      json_object_set_new(o, "in_rmw", isnan(in_rmw) ? json_null() : json_real(in_rmw));
      if (fl > 0) json_object_set_new(o, "ratio_to_floor", json_real(ns / fl));
      char ratio[32] = "x-";
      if (fl > 0) snprintf(ratio, sizeof ratio, "x%.2f", ns / fl);
      printf("  %-26s %7.2f ns = %5.1f RMW = %6s its floor (%.2f ns: %s)\n", name, ns,
             in_rmw, ratio, fl, counts);
    }
    json_array_append_new(arr, o);
  }
  printf("  (thread cases: ns/call per thread; breaker_2threads' floor is "
         "uncontended, its cache-line transfers are not priced)\n");
  return arr;
}

/* ---- Resilience4j ---------------------------------------------------------- */

/* "load average: a, b, c" of an uptime line, or the line. */
static const char *load_of(const char *uptime) {
  const char *p = uptime ? strstr(uptime, "load average:") : NULL;
  return p ? p + strlen("load average:") + 1 : (uptime ? uptime : "?");
}

/* perf-r4j's JSON (compare.py: cases[].name, r4j_ns_per_call,
 * c_ns_per_call, ratio_r4j_over_c, per_alternation.ratio_r4j_over_c,
 * c_ops_per_s_total, mapping, problems), or why there is none. Every
 * target of r4j_targets becomes a check (not evaluated when skipped).
 * Returns the "r4j" object of results.json. */
static json_t *report_r4j(json_t *doc, const char *skipped, json_t *checks) {
  json_t *out = json_object();
  char what[200];
  if (!doc) {
    printf("\nR4j: skipped (%s)\n", skipped);
    json_object_set_new(out, "skipped", json_string(skipped));
    for (size_t i = 0; i < sizeof r4j_targets / sizeof r4j_targets[0]; i++) {
      snprintf(what, sizeof what, "%s Resilience4j ns / libresil ns >= %.0f (perf-r4j)",
               r4j_targets[i].name, r4j_targets[i].min_ratio);
      add_check(checks, what, NAN, 0, 0);
    }
    snprintf(what, sizeof what, "breaker_2threads C ops/s >= %.1f of breaker_1thread's "
             "(perf-r4j)", R4J_2THREADS_MIN_SCALING);
    add_check(checks, what, NAN, 0, 0);
    return out;
  }
  json_t *cases = json_object_get(doc, "cases");
  json_t *load = json_object_get(doc, "load");
  long long alts = (long long)json_integer_value(json_object_get(doc, "alternations"));
  printf("\nResilience4j %s vs libresil, same cases (perf-r4j run.sh on this checkout, %s; "
         "%lld alternation%s C then R4j, %s; load at start %s, at end %s):\n",
         str(json_object_get(doc, "resilience4j"), "version", "?"),
         str(json_object_get(doc, "checkout"), "git", "?"), alts, alts == 1 ? "" : "s",
         str(doc, "settings", ""), load_of(str(load, "uptime_start", NULL)),
         load_of(str(load, "uptime_end", NULL)));
  printf("  %-26s %9s %9s %7s %13s  %-8s %-5s %s\n", "case", "R4j ns", "C ns", "R4j/C",
         "ratio range", "target", "met?", "mapping");
  json_t *ocases = json_array();
  double ops1 = num(find_case(cases, "breaker_1thread"), "c_ops_per_s_total");
  for (size_t t = 0; t < sizeof r4j_targets / sizeof r4j_targets[0]; t++) {
    const r4j_target *tg = &r4j_targets[t];
    json_t *e = find_case(cases, tg->name);
    double r4j = num(e, "r4j_ns_per_call"), cns = num(e, "c_ns_per_call");
    double ratio = num(e, "ratio_r4j_over_c");
    snprintf(what, sizeof what, "%s Resilience4j ns / libresil ns >= %.0f (perf-r4j)",
             tg->name, tg->min_ratio);
    json_t *o = json_object();
    json_object_set_new(o, "name", json_string(tg->name));
    json_object_set_new(o, "target_min_ratio", json_real(tg->min_ratio));
    char target[16];
    snprintf(target, sizeof target, ">= %.0f", tg->min_ratio);
    if (!e || isnan(ratio)) {
      const char *why = !e ? "not in perf-r4j's results" : "no ratio (a side was invalid)";
      json_t *pr = json_object_get(e, "problems");
      if (json_array_size(pr)) why = json_string_value(json_array_get(pr, 0));
      printf("  %-26s %9s %9s %7s %13s  %-8s %-5s %s\n", tg->name, "-", "-", "-", "-",
             target, "NO", why ? why : "?");
      add_check(checks, what, NAN, 0, 1);
      json_object_set_new(o, "met", json_false());
      json_object_set_new(o, "why", json_string(why ? why : "?"));
      json_array_append_new(ocases, o);
      continue;
    }
    json_t *rs = json_object_get(json_object_get(e, "per_alternation"), "ratio_r4j_over_c");
    double lo = NAN, hi = NAN;
    size_t k;
    json_t *v;
    json_array_foreach(rs, k, v) {
      double x = json_number_value(v);
      if (isnan(lo) || x < lo) lo = x;
      if (isnan(hi) || x > hi) hi = x;
    }
    int met = ratio >= tg->min_ratio;
    add_check(checks, what, ratio, met, 1);
    json_object_set_new(o, "r4j_ns_per_call", json_real(r4j));
    json_object_set_new(o, "c_ns_per_call", json_real(cns));
    json_object_set_new(o, "ratio_r4j_over_c", json_real(ratio));
    if (!isnan(lo)) {
      json_object_set_new(o, "ratio_min", json_real(lo));
      json_object_set_new(o, "ratio_max", json_real(hi));
    }
    json_object_set_new(o, "mapping", json_string(str(e, "mapping", "?")));
    char range[32] = "-";
    if (!isnan(lo)) snprintf(range, sizeof range, "%.2f..%.2f", lo, hi);
    int all_met = met;
    char extra[160] = "";
    if (!strcmp(tg->name, "breaker_2threads")) {
      double ops2 = num(e, "c_ops_per_s_total");
      double scaling = ops2 / ops1;
      int ok = !isnan(scaling) && scaling >= R4J_2THREADS_MIN_SCALING;
      snprintf(what, sizeof what, "breaker_2threads C ops/s >= %.1f of breaker_1thread's "
               "(perf-r4j)", R4J_2THREADS_MIN_SCALING);
      add_check(checks, what, scaling, ok, !isnan(scaling));
      if (!isnan(scaling)) {
        json_object_set_new(o, "c_ops_per_s_over_1thread", json_real(scaling));
        snprintf(extra, sizeof extra, "; C ops/s %.2f M = %.2f of breaker_1thread's "
                 "(target >= %.1f) %s", ops2 / 1e6, scaling, R4J_2THREADS_MIN_SCALING,
                 ok ? "yes" : "NO");
      } else {
        snprintf(extra, sizeof extra, "; ops/s against breaker_1thread not evaluated "
                 "(breaker_1thread missing)");
      }
      all_met = met && ok;
    }
    json_object_set_new(o, "met", json_boolean(all_met));
    printf("  %-26s %9.2f %9.2f %7.2f %13s  %-8s %-5s %s%s\n", tg->name, r4j, cns, ratio,
           range, target, met ? "yes" : "NO", str(e, "mapping", "?"), extra);
    json_array_append_new(ocases, o);
  }
  printf("  (ns: median over alternations of each side; R4j/C: median of the "
         "per-alternation ratios; reference: Resilience4j 2.3.0, JIT-warmed)\n");
  json_object_set_new(out, "cases", ocases);
  json_object_set_new(out, "alternations", json_integer(alts));
  json_object_set(out, "settings", json_object_get(doc, "settings"));
  json_object_set(out, "load", load ? load : json_null());
  json_object_set(out, "checkout", json_object_get(doc, "checkout"));
  json_object_set(out, "generated_at", json_object_get(doc, "generated_at"));
  return out;
}

int bench_report(const char *c_json, const char *peers_json,
                 const char *peers_skipped, const char *r4j_json,
                 const char *r4j_skipped, const char *out_path) {
  json_error_t jerr;
  json_t *c = json_load_file(c_json, 0, &jerr);
  if (!c) {
    fprintf(stderr, "resil_bench report: %s: %s (line %d)\n", c_json, jerr.text,
            jerr.line);
    return 1;
  }
  json_t *peers_doc = NULL;
  char skip_reason[512] = "";
  if (peers_json) {
    peers_doc = json_load_file(peers_json, 0, &jerr);
    if (!peers_doc || !json_is_array(json_object_get(peers_doc, "cases")))
      snprintf(skip_reason, sizeof skip_reason,
               "node bench.js output unreadable: %s", peers_doc ? "no cases" : jerr.text);
  } else {
    snprintf(skip_reason, sizeof skip_reason, "%s",
             peers_skipped ? peers_skipped : "not run");
  }
  if (skip_reason[0] && peers_doc) {
    json_decref(peers_doc);
    peers_doc = NULL;
  }
  json_t *r4j_doc = NULL;
  char r4j_reason[600] = "";
  if (r4j_json) {
    r4j_doc = json_load_file(r4j_json, 0, &jerr);
    if (!r4j_doc || !json_is_array(json_object_get(r4j_doc, "cases"))) {
      snprintf(r4j_reason, sizeof r4j_reason, "perf-r4j output %s unreadable: %s", r4j_json,
               r4j_doc ? "no cases" : jerr.text);
      json_decref(r4j_doc);
      r4j_doc = NULL;
    }
  } else {
    snprintf(r4j_reason, sizeof r4j_reason, "%s", r4j_skipped ? r4j_skipped : "not run");
  }

  json_t *ccases = json_object_get(c, "cases");
  json_t *machine = json_deep_copy(json_object_get(c, "machine"));
  if (!machine) machine = json_object();
  json_t *out = json_object();
  json_t *ocases = json_array();
  json_t *checks = json_array();
  json_t *ratios = json_array();
  json_t *opeers = json_array();

  /* The fastest library peer (the await baseline is a reference, not a
   * peer). */
  json_t *pcases = peers_doc ? json_object_get(peers_doc, "cases") : NULL;
  const char *fastest = NULL;
  double fastest_ns = NAN;
  if (pcases) {
    size_t i;
    json_t *p;
    json_array_foreach(pcases, i, p) {
      json_array_append(opeers, p);
      if (!json_is_true(json_object_get(p, "peer"))) continue;
      double ns = num(p, "ns_per_call");
      if (!isnan(ns) && (isnan(fastest_ns) || ns < fastest_ns)) {
        fastest_ns = ns;
        fastest = str(p, "name", "?");
      }
    }
    json_object_set_new(machine, "node", json_string(str(peers_doc, "node", "?")));
  }

  double ops_1thread = num(find_case(ccases, "breaker_1thread"), "ops_per_s");

  printf("\n== libresil benchmark results\n");
  printf("machine: %s, %lld CPUs, %s; clock_gettime(CLOCK_MONOTONIC) %.1f ns, "
         "coarse %.1f ns, indirect no-op call %.1f ns\n",
         str(machine, "cpu_model", "?"),
         (long long)json_integer_value(json_object_get(machine, "nproc")),
         str(machine, "kernel", "?"), num(machine, "clock_gettime_monotonic_ns"),
         num(machine, "clock_gettime_monotonic_coarse_ns"),
         num(machine, "indirect_noop_call_ns"));
  print_physical(machine);
  double load1 = num(machine, "loadavg_1min_at_start");
  if (!isnan(load1))
    printf("load average (1 min) when the C cases started: %.2f%s\n", load1,
           load1 > 0.5 ? " -- other work was running; figures may be inflated" : "");
  printf("\n%-26s %9s %10s  %-36s %-5s  %s\n", "case", "ns/call", "ops/s",
         "target", "met?", "vs fastest peer (>= 10x)");

  int met_n = 0, missed_n = 0, unevaluated_n = 0;
  size_t i;
  json_t *cc;
  json_array_foreach(ccases, i, cc) {
    if (is_http_case(cc) || is_store_case(cc) || is_async_case(cc) || is_shared_case(cc) ||
        is_redis_case(cc) || is_deadline_case(cc) || is_instances_case(cc) ||
        is_ramp_case(cc))
      continue;
    const char *name = str(cc, "name", "?");
    const case_target *t = target_for(name);
    json_t *o = json_deep_copy(cc);
    const char *err = json_string_value(json_object_get(cc, "error"));
    double ns = num(cc, "ns_per_call");
    double ops = num(cc, "ops_per_s");
    char opsbuf[32], tbuf[64], what[160];
    fmt_ops(opsbuf, sizeof opsbuf, ops);
    const char *ttext = t && t->text ? t->text : "-";
    const char *mettext = "-";

    if (t && t->kind != T_NONE) {
      int met = 0;
      json_object_set_new(o, "target", json_string(t->text));
      if (err) {
        met = 0;
      } else if (t->kind == T_NS_MAX) {
        met = ns <= t->limit;
        snprintf(what, sizeof what, "%s ns_per_call %s", name, t->text);
        add_check(checks, what, ns, met, 1);
      } else {
        int total_ok = ops >= t->limit;
        int half_ok = !isnan(ops_1thread) && ops >= ops_1thread / 2.0;
        met = total_ok && half_ok;
        snprintf(what, sizeof what, "%s ops_per_s >= 20 M", name);
        add_check(checks, what, ops, total_ok, 1);
        snprintf(what, sizeof what, "%s ops_per_s >= 1/2 of breaker_1thread (%.2f M)",
                 name, ops_1thread / 1e6);
        add_check(checks, what, isnan(ops_1thread) ? NAN : ops / ops_1thread,
                  half_ok, !isnan(ops_1thread));
      }
      if (err) {
        snprintf(what, sizeof what, "%s %s", name, t->text);
        add_check(checks, what, NAN, 0, 1);
      }
      json_object_set_new(o, "met", json_boolean(met));
      mettext = met ? "yes" : "NO";
    }

    /* Every case against the fastest peer. */
    char peerbuf[96] = "not evaluated (peers skipped)";
    snprintf(what, sizeof what, "%s >= %.0fx faster than the fastest Node peer",
             name, PEER_FACTOR);
    if (err) {
      snprintf(peerbuf, sizeof peerbuf, "-");
      add_check(checks, what, NAN, 0, 1);
    } else if (fastest) {
      double factor = fastest_ns / ns;
      int met = factor >= PEER_FACTOR;
      json_t *vs = json_object();
      json_object_set_new(vs, "peer", json_string(fastest));
      json_object_set_new(vs, "peer_ns_per_call", json_real(fastest_ns));
      json_object_set_new(vs, "times_faster", json_real(factor));
      json_object_set_new(vs, "met", json_boolean(met));
      json_object_set_new(o, "vs_fastest_peer", vs);
      add_check(checks, what, factor, met, 1);
      snprintf(peerbuf, sizeof peerbuf, "%.1fx faster  %s", factor, met ? "yes" : "NO");
    } else {
      add_check(checks, what, NAN, 0, 0);
    }

    if (err) {
      printf("%-26s INVALID: %s\n", name, err);
    } else {
      snprintf(tbuf, sizeof tbuf, "%s", ttext);
      printf("%-26s %9.2f %10s  %-36s %-5s  %s\n", name, ns, opsbuf, tbuf,
             mettext, peerbuf);
    }
    json_array_append_new(ocases, o);
  }
  printf("(thread cases: ns/call is the time one thread spends per call; ops/s "
         "is the total of all threads)\n");
  json_t *hw = report_floors(ccases, machine);
  json_t *r4j = report_r4j(r4j_doc, r4j_reason, checks);
  report_http(ccases, ocases, checks);
  report_async(ccases, ocases, checks);
  report_store(ccases, ocases, checks);
  report_shared(ccases, ocases, checks);
  report_ramp(ccases, ocases, checks, machine);
  report_redis(ccases, ocases, checks);
  report_deadline(ccases, ocases, checks);
  report_instances(ccases, ocases, checks);

  /* Memory. */
  json_t *bytes = json_object_get(c, "breaker_bytes_100_window");
  if (json_is_integer(bytes)) {
    json_int_t b = json_integer_value(bytes);
    int met = b <= BREAKER_BYTES_MAX;
    printf("\nbreaker with a 100-call count window: %lld bytes (target <= %d): %s\n",
           (long long)b, BREAKER_BYTES_MAX, met ? "met" : "MISSED");
    add_check(checks, "breaker with a 100-call window occupies <= 512 bytes",
              (double)b, met, 1);
  } else {
    printf("\nbreaker with a 100-call count window: size unavailable\n");
    add_check(checks, "breaker with a 100-call window occupies <= 512 bytes", NAN,
              0, 1);
  }

  /* Peers and ratios. */
  if (pcases) {
    printf("\nNode.js peers, measured in this run (node %s; %s):\n",
           str(peers_doc, "node", "?"), str(peers_doc, "method", ""));
    json_t *p;
    json_array_foreach(pcases, i, p) {
      printf("  %-38s %9.1f ns/call  %s %s%s\n", str(p, "name", "?"),
             num(p, "ns_per_call"), str(p, "library", "?"), str(p, "version", "?"),
             json_is_true(json_object_get(p, "peer")) ? "" : " (reference, not a peer)");
      printf("  %-38s   measures: %s\n", "", str(p, "measures", ""));
    }
    printf("  fastest peer: %s, %.1f ns/call\n", fastest ? fastest : "none",
           fastest_ns);
    printf("\nours vs theirs (their ns per call / ours):\n");
    json_array_foreach(pcases, i, p) {
      const char *ours = json_string_value(json_object_get(p, "comparable"));
      if (!ours || !json_is_true(json_object_get(p, "peer"))) continue;
      json_t *oc = find_case(ccases, ours);
      double our_ns = num(oc, "ns_per_call");
      double their_ns = num(p, "ns_per_call");
      if (!oc || isnan(our_ns) || isnan(their_ns)) continue;
      double factor = their_ns / our_ns;
      json_t *r = json_object();
      json_object_set_new(r, "ours", json_string(ours));
      json_object_set_new(r, "theirs", json_string(str(p, "name", "?")));
      json_object_set_new(r, "ours_ns_per_call", json_real(our_ns));
      json_object_set_new(r, "theirs_ns_per_call", json_real(their_ns));
      json_object_set_new(r, "times_faster", json_real(factor));
      json_array_append_new(ratios, r);
      printf("  %-22s %8.1f ns  vs  %-38s %8.1f ns  ->  %.1fx faster\n", ours,
             our_ns, str(p, "name", "?"), their_ns, factor);
    }
  } else {
    printf("\nNode.js peers: SKIPPED (%s); the 10x-faster-than-peers target "
           "was not evaluated.\n", skip_reason);
  }

  json_t *p;
  json_array_foreach(checks, i, p) {
    json_t *m = json_object_get(p, "met");
    if (json_is_true(m))
      met_n++;
    else if (json_is_false(m))
      missed_n++;
    else
      unevaluated_n++;
  }
  printf("\ntargets: %d met, %d missed, %d not evaluated\n", met_n, missed_n,
         unevaluated_n);
  json_array_foreach(checks, i, p) {
    if (json_is_false(json_object_get(p, "met")))
      printf("  MISSED: %s (value %.4g)\n", str(p, "target", "?"), num(p, "value"));
  }

  json_object_set_new(out, "cases", ocases);
  json_object_set_new(out, "peers", opeers);
  if (!pcases) {
    json_t *s = json_object();
    json_object_set_new(s, "skipped", json_true());
    json_object_set_new(s, "reason", json_string(skip_reason));
    json_object_set_new(out, "peers_skipped", s);
  } else {
    json_object_set_new(out, "peers_method", json_string(str(peers_doc, "method", "")));
  }
  json_object_set_new(out, "ratios", ratios);
  json_object_set(out, "physical", json_object_get(machine, "physical"));
  json_object_set_new(out, "hardware_floor", hw);
  json_object_set_new(out, "r4j", r4j);
  json_object_set(out, "breaker_bytes_100_window", bytes ? bytes : json_null());
  json_object_set_new(out, "targets", checks);
  json_t *summary = json_object();
  json_object_set_new(summary, "met", json_integer(met_n));
  json_object_set_new(summary, "missed", json_integer(missed_n));
  json_object_set_new(summary, "not_evaluated", json_integer(unevaluated_n));
  json_object_set_new(out, "summary", summary);
  json_object_set_new(out, "machine", machine);
  json_object_set(out, "method", json_object_get(c, "method"));
  if (json_object_get(c, "http_method"))
    json_object_set(out, "http_method", json_object_get(c, "http_method"));
  if (json_object_get(c, "async_method"))
    json_object_set(out, "async_method", json_object_get(c, "async_method"));
  if (json_object_get(c, "store_method"))
    json_object_set(out, "store_method", json_object_get(c, "store_method"));
  if (json_object_get(c, "shared_method"))
    json_object_set(out, "shared_method", json_object_get(c, "shared_method"));
  if (json_object_get(c, "redis_method"))
    json_object_set(out, "redis_method", json_object_get(c, "redis_method"));
  if (json_object_get(c, "deadline_method"))
    json_object_set(out, "deadline_method", json_object_get(c, "deadline_method"));
  if (json_object_get(c, "instances_method"))
    json_object_set(out, "instances_method", json_object_get(c, "instances_method"));
  json_object_set(out, "library_version", json_object_get(c, "library_version"));

  int rc = json_dump_file(out, out_path, JSON_INDENT(2) | JSON_REAL_PRECISION(10));
  if (rc != 0)
    fprintf(stderr, "resil_bench report: cannot write %s\n", out_path);
  else
    printf("\nwrote %s\n", out_path);
  json_decref(out);
  json_decref(c);
  json_decref(peers_doc);
  json_decref(r4j_doc);
  return rc != 0;
}
