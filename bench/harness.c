/* The measuring harness: warm-up, calibration, repeated runs, medians,
 * threads, and the machine description. */
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

#include "bench.h"

/* Atomic because thread-case bodies call bench_sink() concurrently;
 * volatile so the store is never dropped. Called once per body call, not
 * per operation, so its cost is outside the measured work. */
static volatile _Atomic uint64_t sink_word;

void bench_sink(uint64_t v) {
  atomic_store_explicit(&sink_word, v, memory_order_relaxed);
}

int64_t bench_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

int64_t bench_thread_cpu_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

double bench_loadavg1(void) {
  double l[3];
  return getloadavg(l, 3) >= 1 ? l[0] : NAN;
}

int bench_pin_self(int cpu) {
#ifdef CPU_SET
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  return pthread_setaffinity_np(pthread_self(), sizeof set, &set) == 0 ? 0 : -1;
#else
  (void)cpu;
  return -1;
#endif
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

double bench_median(const double *v, int n) {
  double tmp[BENCH_MAX_RUNS];
  if (n <= 0) return 0.0;
  if (n > BENCH_MAX_RUNS) n = BENCH_MAX_RUNS;
  memcpy(tmp, v, (size_t)n * sizeof *tmp);
  qsort(tmp, (size_t)n, sizeof *tmp, cmp_double);
  return n % 2 ? tmp[n / 2] : (tmp[n / 2 - 1] + tmp[n / 2]) / 2.0;
}

int bench_selected(const bench_opts *opts, const char *name) {
  if (!opts->only) return 1;
  size_t n = strlen(name);
  for (const char *p = opts->only; *p;) {
    size_t len = strcspn(p, ",");
    if (len == n && !strncmp(p, name, n)) return 1;
    p += len;
    if (*p == ',') p++;
  }
  return 0;
}

/* ---- single-thread cases ------------------------------------------------ */

/* The warm-up lasts at least this long and ends with a run of at least
 * CALIBRATE_NS, whose speed sets the iteration count of the timed runs. */
#define WARMUP_NS INT64_C(100000000)
#define CALIBRATE_NS INT64_C(20000000)

void bench_measure(const bench_opts *opts, bench_body_fn body, void *state,
                   bench_result *out) {
  uint64_t iters = 1000;
  int64_t warm_total = 0, el = 0;
  for (;;) {
    int64_t t0 = bench_now_ns();
    uint64_t ok = body(state, iters);
    el = bench_now_ns() - t0;
    warm_total += el;
    if (ok != iters) {
      snprintf(out->error, sizeof out->error,
               "warm-up: %llu of %llu operations did not succeed",
               (unsigned long long)(iters - ok), (unsigned long long)iters);
      return;
    }
    if (el >= CALIBRATE_NS && warm_total >= WARMUP_NS) break;
    if (el < CALIBRATE_NS) iters *= 2;
  }
  double per_call = (double)el / (double)iters;
  double want = (double)opts->min_run_ns / per_call;
  uint64_t n = (uint64_t)want + 1;
  out->iters_per_run = n;
  out->nruns = 0;
  for (int r = 0; r < opts->runs && r < BENCH_MAX_RUNS; r++) {
    int64_t t0 = bench_now_ns();
    uint64_t ok = body(state, n);
    int64_t t1 = bench_now_ns();
    if (ok != n) {
      snprintf(out->error, sizeof out->error,
               "run %d: %llu of %llu operations did not succeed", r + 1,
               (unsigned long long)(n - ok), (unsigned long long)n);
      return;
    }
    out->runs[out->nruns++] = (double)(t1 - t0) / (double)n;
  }
  out->ns_per_call = bench_median(out->runs, out->nruns);
}

/* ---- multi-thread cases ------------------------------------------------- */

typedef struct thread_slot {
  pthread_t tid;
  bench_thread_fn body;
  void *state;
  atomic_int *ready;
  atomic_int *go;
  atomic_int *stop;
  int cpu; /* -1: not pinned */
  uint64_t ops;
  uint64_t failures;
  int64_t ns;
} thread_slot;

int bench_nth_allowed_cpu(int i) {
#ifdef CPU_SET
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) != 0) return -1;
  int count = CPU_COUNT(&set);
  if (count < 2) return -1;
  int want = i % count;
  for (int c = 0; c < CPU_SETSIZE; c++) {
    if (!CPU_ISSET(c, &set)) continue;
    if (want-- == 0) return c;
  }
#else
  (void)i;
#endif
  return -1;
}

static void *thread_main(void *p) {
  thread_slot *s = p;
#ifdef CPU_SET
  if (s->cpu >= 0) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(s->cpu, &set);
    if (pthread_setaffinity_np(pthread_self(), sizeof set, &set) != 0) s->cpu = -1;
  }
#endif
  atomic_fetch_add(s->ready, 1);
  while (!atomic_load_explicit(s->go, memory_order_acquire)) {
  }
  int64_t t0 = bench_now_ns();
  s->failures = s->body(s->state, s->stop, &s->ops);
  s->ns = bench_now_ns() - t0;
  return NULL;
}

double bench_thread_run(const bench_opts *opts, int nthreads,
                        bench_thread_fn body, void *state, int64_t run_ns,
                        bench_result *out) {
  if (nthreads < 1 || nthreads > BENCH_MAX_THREADS) {
    snprintf(out->error, sizeof out->error, "bad thread count %d", nthreads);
    return -1.0;
  }
  thread_slot slots[BENCH_MAX_THREADS];
  atomic_int ready, go, stop;
  atomic_init(&ready, 0);
  atomic_init(&go, 0);
  atomic_init(&stop, 0);
  for (int i = 0; i < nthreads; i++) {
    slots[i] = (thread_slot){.body = body, .state = state, .ready = &ready,
                             .go = &go, .stop = &stop,
                             .cpu = opts->pin_threads ? bench_nth_allowed_cpu(i) : -1};
    if (pthread_create(&slots[i].tid, NULL, thread_main, &slots[i]) != 0) {
      snprintf(out->error, sizeof out->error, "pthread_create failed");
      atomic_store(&go, 1);
      atomic_store(&stop, 1);
      for (int j = 0; j < i; j++) pthread_join(slots[j].tid, NULL);
      return -1.0;
    }
  }
  while (atomic_load(&ready) < nthreads) {
  }
  atomic_store_explicit(&go, 1, memory_order_release);
  struct timespec ts = {.tv_sec = (time_t)(run_ns / 1000000000),
                        .tv_nsec = (long)(run_ns % 1000000000)};
  while (nanosleep(&ts, &ts) != 0) {
  }
  atomic_store_explicit(&stop, 1, memory_order_release);
  double total = 0.0;
  uint64_t failures = 0;
  for (int i = 0; i < nthreads; i++) {
    pthread_join(slots[i].tid, NULL);
    failures += slots[i].failures;
    if (slots[i].ns > 0) total += (double)slots[i].ops * 1e9 / (double)slots[i].ns;
  }
  if (failures) {
    snprintf(out->error, sizeof out->error,
             "%llu operations did not succeed", (unsigned long long)failures);
    return -1.0;
  }
  return total;
}

void bench_measure_threads(const bench_opts *opts, int nthreads,
                           bench_thread_fn body, void *state,
                           bench_result *out) {
  if (nthreads < 1 || nthreads > BENCH_MAX_THREADS) {
    snprintf(out->error, sizeof out->error, "bad thread count %d", nthreads);
    return;
  }
  out->threads = nthreads;
  out->has_ops = 1;
  if (bench_thread_run(opts, nthreads, body, state, opts->thread_run_ns / 2, out) < 0)
    return;
  out->nruns = 0;
  for (int r = 0; r < opts->runs && r < BENCH_MAX_RUNS; r++) {
    double ops = bench_thread_run(opts, nthreads, body, state, opts->thread_run_ns, out);
    if (ops <= 0.0) {
      if (!out->error[0])
        snprintf(out->error, sizeof out->error, "run %d made no progress", r + 1);
      return;
    }
    out->runs_ops[r] = ops;
    out->runs[r] = (double)nthreads * 1e9 / ops;
    out->nruns++;
  }
  out->ops_per_s = bench_median(out->runs_ops, out->nruns);
  out->ns_per_call = (double)nthreads * 1e9 / out->ops_per_s;
}

void bench_result_to_json(const bench_result *r, json_t *array) {
  json_t *o = json_object();
  json_object_set_new(o, "name", json_string(r->name));
  json_object_set_new(o, "measures", json_string(r->measures));
  if (r->error[0]) {
    json_object_set_new(o, "error", json_string(r->error));
    json_array_append_new(array, o);
    return;
  }
  json_object_set_new(o, "ns_per_call", json_real(r->ns_per_call));
  if (r->has_ops) json_object_set_new(o, "ops_per_s", json_real(r->ops_per_s));
  json_t *runs = json_array();
  for (int i = 0; i < r->nruns; i++) json_array_append_new(runs, json_real(r->runs[i]));
  json_object_set_new(o, "runs", runs);
  if (r->has_ops) {
    json_t *ops = json_array();
    for (int i = 0; i < r->nruns; i++)
      json_array_append_new(ops, json_real(r->runs_ops[i]));
    json_object_set_new(o, "runs_ops_per_s", ops);
    json_object_set_new(o, "threads", json_integer(r->threads));
  } else {
    json_object_set_new(o, "iterations_per_run", json_integer((json_int_t)r->iters_per_run));
  }
  json_array_append_new(array, o);
}

/* ---- machine description ------------------------------------------------ */

static void cpu_model(char *buf, size_t size) {
  snprintf(buf, size, "unknown");
  FILE *f = fopen("/proc/cpuinfo", "r");
  if (!f) return;
  char line[512];
  while (fgets(line, sizeof line, f)) {
    /* x86 says "model name"; some ARM kernels say "Model" or "Hardware". */
    if (strncmp(line, "model name", 10) && strncmp(line, "Model", 5) &&
        strncmp(line, "Hardware", 8))
      continue;
    char *colon = strchr(line, ':');
    if (!colon) continue;
    colon++;
    while (*colon == ' ' || *colon == '\t') colon++;
    colon[strcspn(colon, "\n")] = '\0';
    if (*colon) {
      snprintf(buf, size, "%s", colon);
      break;
    }
  }
  fclose(f);
}

static uint64_t body_clock_monotonic(void *state, uint64_t iters) {
  (void)state;
  uint64_t acc = 0;
  for (uint64_t i = 0; i < iters; i++) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    acc += (uint64_t)ts.tv_nsec;
  }
  bench_sink(acc);
  return iters;
}

#ifdef CLOCK_MONOTONIC_COARSE
static uint64_t body_clock_coarse(void *state, uint64_t iters) {
  (void)state;
  uint64_t acc = 0;
  for (uint64_t i = 0; i < iters; i++) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
    acc += (uint64_t)ts.tv_nsec;
  }
  bench_sink(acc);
  return iters;
}
#endif

__attribute__((noinline)) static uint64_t noop_u64(uint64_t x) {
  __asm__ volatile("" : "+r"(x));
  return x;
}
/* Read through a volatile pointer so the compiler cannot see the target. */
static uint64_t (*volatile noop_ptr)(uint64_t) = noop_u64;

static uint64_t body_indirect_call(void *state, uint64_t iters) {
  (void)state;
  uint64_t (*fn)(uint64_t) = noop_ptr;
  uint64_t acc = 0;
  for (uint64_t i = 0; i < iters; i++) acc += fn(i);
  bench_sink(acc);
  return iters;
}

/* ---- physical references ------------------------------------------------ */

/* The word the atomic references operate on, alone on its cache line: one
 * thread, so every operation is uncontended (the line stays in this core's
 * cache), as on the single-thread cases' hot paths. */
static struct {
  _Alignas(64) _Atomic uint64_t v;
  char pad[64 - sizeof(_Atomic uint64_t)];
} phys_word;

/* Each result feeds the sum, so no operation can be dropped or merged. */
static uint64_t body_atomic_fetch_add(void *state, uint64_t iters) {
  (void)state;
  uint64_t acc = 0;
  for (uint64_t i = 0; i < iters; i++)
    acc += atomic_fetch_add_explicit(&phys_word.v, 1, memory_order_relaxed);
  bench_sink(acc);
  return iters;
}

static uint64_t body_atomic_exchange(void *state, uint64_t iters) {
  (void)state;
  uint64_t acc = 0;
  for (uint64_t i = 0; i < iters; i++)
    acc += atomic_exchange_explicit(&phys_word.v, i, memory_order_acquire);
  bench_sink(acc);
  return iters;
}

/* A compare-exchange that succeeds (the expected value is the current one),
 * as an uncontended acquire's CAS does; returns how many succeeded. */
static uint64_t body_atomic_cas(void *state, uint64_t iters) {
  (void)state;
  uint64_t ok = 0;
  uint64_t expect = atomic_load_explicit(&phys_word.v, memory_order_relaxed);
  for (uint64_t i = 0; i < iters; i++) {
    uint64_t want = expect + 1;
    if (atomic_compare_exchange_strong_explicit(&phys_word.v, &expect, want,
                                                memory_order_seq_cst,
                                                memory_order_relaxed)) {
      expect = want;
      ok++;
    }
  }
  bench_sink(ok);
  return ok;
}

#define PHYS_RUN_NS INT64_C(20000000)

typedef struct phys_ref {
  const char *key;      /* in results.json: machine.physical.<key> */
  const char *measures;
  bench_body_fn body;
} phys_ref;

/* The physical references the policy cases are priced against (report.c
 * names them by key). */
static const phys_ref phys_refs[] = {
    {"atomic_fetch_add", "one uncontended atomic fetch_add (relaxed; lock xadd on x86) "
                         "on a word alone on its cache line, one thread", body_atomic_fetch_add},
    {"atomic_exchange", "one uncontended atomic exchange (acquire; xchg on x86), as a "
                        "spinlock's acquire", body_atomic_exchange},
    {"atomic_cas", "one uncontended compare-exchange that succeeds (seq_cst; lock cmpxchg "
                   "on x86)", body_atomic_cas},
    {"clock_monotonic", "one clock_gettime(CLOCK_MONOTONIC) (vDSO)", body_clock_monotonic},
#ifdef CLOCK_MONOTONIC_COARSE
    {"clock_monotonic_coarse", "one clock_gettime(CLOCK_MONOTONIC_COARSE) (vDSO)",
     body_clock_coarse},
#endif
    {"indirect_call", "one call of a no-op function through a pointer the compiler "
                      "cannot see through (load, call, return)", body_indirect_call},
};

/* Measures each reference like a single-thread case (warm-up, calibration,
 * opts->runs runs, median), prints it and returns machine.physical. */
static json_t *physical_json(const bench_opts *opts) {
  json_t *phys = json_object();
  printf("  physical references (median of %d runs, one thread):", opts->runs);
  for (size_t i = 0; i < sizeof phys_refs / sizeof phys_refs[0]; i++) {
    bench_result r;
    memset(&r, 0, sizeof r);
    r.name = phys_refs[i].key;
    r.measures = phys_refs[i].measures;
    bench_measure(opts, phys_refs[i].body, NULL, &r);
    json_t *a = json_array();
    bench_result_to_json(&r, a);
    json_object_set(phys, phys_refs[i].key, json_array_get(a, 0));
    json_decref(a);
    if (r.error[0])
      printf(" %s INVALID (%s)", r.name, r.error);
    else
      printf(" %s %.2f ns%s", r.name, r.ns_per_call,
             i + 1 < sizeof phys_refs / sizeof phys_refs[0] ? "," : "");
  }
  printf("\n");
  fflush(stdout);
  return phys;
}

static double phys_ns(json_t *phys, const char *key) {
  json_t *v = json_object_get(json_object_get(phys, key), "ns_per_call");
  return json_is_number(v) ? json_number_value(v) : -1.0;
}

json_t *bench_machine_json(const bench_opts *opts) {
  /* Runs of 20 ms (millions of operations each) are plenty for a
   * reference, and keep `resil_bench run --only CASE` quick to repeat. */
  bench_opts quick = *opts;
  if (quick.min_run_ns > PHYS_RUN_NS) quick.min_run_ns = PHYS_RUN_NS;
  json_t *m = json_object();
  json_object_set_new(m, "nproc", json_integer(sysconf(_SC_NPROCESSORS_ONLN)));
  char model[256];
  cpu_model(model, sizeof model);
  json_object_set_new(m, "cpu_model", json_string(model));
  /* Other work on the machine skews every figure; record how busy it was. */
  FILE *la = fopen("/proc/loadavg", "r");
  double load1 = 0.0;
  if (la) {
    if (fscanf(la, "%lf", &load1) == 1)
      json_object_set_new(m, "loadavg_1min_at_start", json_real(load1));
    fclose(la);
  }
  struct utsname u;
  if (uname(&u) == 0) {
    char k[600];
    snprintf(k, sizeof k, "%s %s %s", u.sysname, u.release, u.machine);
    json_object_set_new(m, "kernel", json_string(k));
  }
#ifdef __VERSION__
#ifdef __clang__
  json_object_set_new(m, "compiler", json_string(__VERSION__));
#else
  json_object_set_new(m, "compiler", json_string("gcc " __VERSION__));
#endif
#endif
#ifdef RESIL_BENCH_BUILD_TYPE
  json_object_set_new(m, "build_type", json_string(RESIL_BENCH_BUILD_TYPE));
#endif
#ifdef RESIL_BENCH_C_FLAGS
  json_object_set_new(m, "c_flags", json_string(RESIL_BENCH_C_FLAGS));
#endif

  /* The physical references, measured like the cases; the flat keys are
   * the older names of three of them (perf-r4j's notes cite them). */
  json_t *phys = physical_json(&quick);
  json_object_set_new(m, "clock_gettime_monotonic_ns",
                      json_real(phys_ns(phys, "clock_monotonic")));
#ifdef CLOCK_MONOTONIC_COARSE
  json_object_set_new(m, "clock_gettime_monotonic_coarse_ns",
                      json_real(phys_ns(phys, "clock_monotonic_coarse")));
#endif
  json_object_set_new(m, "indirect_noop_call_ns", json_real(phys_ns(phys, "indirect_call")));
  json_object_set_new(m, "physical", phys);
  return m;
}

int bench_append_cases(const char *json_path, json_t *entries,
                       const char *method_key, const char *method) {
  json_error_t jerr;
  json_t *root = json_load_file(json_path, 0, &jerr);
  if (!root) {
    fprintf(stderr, "resil_bench: %s: %s\n", json_path, jerr.text);
    json_decref(entries);
    return 1;
  }
  json_t *cases = json_object_get(root, "cases");
  if (!json_is_array(cases)) {
    cases = json_array();
    json_object_set_new(root, "cases", cases);
  }
  json_array_extend(cases, entries);
  json_decref(entries);
  if (method_key && method) json_object_set_new(root, method_key, json_string(method));
  int rc = json_dump_file(root, json_path, JSON_INDENT(2) | JSON_REAL_PRECISION(6));
  json_decref(root);
  if (rc != 0) {
    fprintf(stderr, "resil_bench: cannot write %s\n", json_path);
    return 1;
  }
  return 0;
}
