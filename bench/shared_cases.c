/* The shared-state cases (issue 20, DESIGN 8.1): what keeping a policy in a
 * resil_shared segment costs when several processes use it, and what
 * `resil call --state` adds to a command's start-to-exit time.
 *
 *   shared_breaker_Nprocs      N = 2, 4, 8. Two sides, alternating runs of
 *                              --procs-run-ms each (default 1 s):
 *                                threads  N threads of this process on one
 *                                         in-process breaker
 *                                         (breaker_2threads' body:
 *                                         try_acquire + record(success) in
 *                                         a loop);
 *                                procs    N forked processes, each of which
 *                                         opens the segment by name and
 *                                         attaches its own handle to one
 *                                         breaker in it (created first by
 *                                         this process, same config), the
 *                                         same body.
 *                              Thread or process i runs on the
 *                              (i mod CPUs)-th CPU on both sides (unless
 *                              --no-pin); with more of them than CPUs they
 *                              share CPUs, the same way on both sides. The
 *                              figure of a side is the total ops/s of its
 *                              N workers (each one's ops over its own time,
 *                              from the start line to its stop), median over
 *                              runs; the ratio procs / threads is the
 *                              median of the per-round ratios (each round
 *                              runs both sides, threads first in even rounds
 *                              and processes first in odd ones), the ratio
 *                              of the medians recorded too. Target:
 *                              >= BENCH_SHARED_MIN_RATIO.
 *   shared_ratelimiter_Nprocs  the same with the rate limiter (acquire of 1
 *                              permit; 2^31-1 permits per 1 s cycle, so
 *                              every acquire is granted).
 *   cli_call_state_nginx       whole processes: `resil call URL/ka`
 *                              (plain) and `resil call --state S
 *                              --state-dir D --breaker window=100 --rate
 *                              1000000/1s URL/ka` (state), started one after
 *                              the other (plain, state, plain, state ...)
 *                              --cli-pairs times after 3 pairs not counted
 *                              (the first creates the segment, a file in a
 *                              new directory D next to resil_bench); each
 *                              timed from just before posix_spawn to just
 *                              after wait4, its CPU time from wait4's
 *                              rusage; output to /dev/null. Reported: each
 *                              side's median, and the median of the pairwise
 *                              differences (state - plain), held against
 *                              BENCH_CLI_STATE_MAX_ADDED_MS. Against the
 *                              nginx of the other *_nginx cases; skipped
 *                              without it or without --resil-cli.
 *
 * The load average is recorded at each case's start and end: with 4 and 8
 * workers on a 2-CPU machine the figures are what the scheduler makes of
 * the oversubscription, and other work on the machine moves them. */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench.h"

extern char **environ;

/* ---- helpers --------------------------------------------------------------- */

/* The 1-minute load average, or -1. */
static double loadavg(void) {
  double v = -1.0;
  FILE *f = fopen("/proc/loadavg", "r");
  if (!f) return v;
  if (fscanf(f, "%lf", &v) != 1) v = -1.0;
  fclose(f);
  return v;
}

static json_t *load_json(double v) {
  return v < 0 ? json_null() : json_real(v);
}

static json_t *reals(const double *v, int n) {
  json_t *a = json_array();
  for (int i = 0; i < n; i++) json_array_append_new(a, json_real(v[i]));
  return a;
}

static void sleep_ns(int64_t ns) {
  struct timespec ts = {.tv_sec = (time_t)(ns / 1000000000), .tv_nsec = (long)(ns % 1000000000)};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

/* ---- N processes on one shared instance ------------------------------------- */

typedef enum pkind { P_BREAKER, P_LIMITER } pkind;

/* The page the parent and its forked workers share (MAP_SHARED,
 * anonymous, inherited). */
typedef struct proc_board {
  _Alignas(64) atomic_int ready;
  atomic_int go;
  _Alignas(64) atomic_int stop; /* read by the bodies; its own line */
  struct {
    _Alignas(64) uint64_t ops;
    uint64_t failures;
    int64_t ns;
    char error[160];
  } w[BENCH_MAX_THREADS];
} proc_board;

typedef struct procs_case {
  pkind kind;
  const resil_shared_config *sc;
} procs_case;

/* The worker process: its own handle on the segment and on the instance,
 * pinned like the threads; reports through the board and _exits. */
static void proc_worker(const bench_opts *o, const procs_case *pc, proc_board *b, int i) {
#ifdef CPU_SET
  int cpu = o->pin_threads ? bench_nth_allowed_cpu(i) : -1;
  if (cpu >= 0) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    (void)sched_setaffinity(0, sizeof set, &set);
  }
#else
  (void)o;
#endif
  resil_shared *seg = NULL;
  resil_breaker *br = NULL;
  resil_ratelimiter *rl = NULL;
  resil_error err;
  resil_status st = resil_shared_open(pc->sc, &seg, &err);
  if (st == RESIL_OK)
    st = pc->kind == P_BREAKER ? bench_make_breaker(seg, &br, &err)
                               : bench_make_ratelimiter(seg, &rl, &err);
  if (st != RESIL_OK) {
    snprintf(b->w[i].error, sizeof b->w[i].error, "worker %d: %s: %.100s", i,
             resil_status_name(st), err.msg);
    atomic_fetch_add(&b->ready, 1);
    _exit(1);
  }
  atomic_fetch_add(&b->ready, 1);
  while (!atomic_load_explicit(&b->go, memory_order_acquire)) sched_yield();
  uint64_t ops = 0;
  int64_t t0 = bench_now_ns();
  uint64_t failures = pc->kind == P_BREAKER
                          ? bench_thread_breaker_split(br, &b->stop, &ops)
                          : bench_thread_ratelimiter_acquire(rl, &b->stop, &ops);
  b->w[i].ns = bench_now_ns() - t0;
  b->w[i].ops = ops;
  b->w[i].failures = failures;
  resil_breaker_free(br);
  resil_ratelimiter_free(rl);
  resil_shared_close(seg);
  _exit(0);
}

/* One timed run of n worker processes; total ops/s, or -1 after writing
 * err. */
static double procs_run(const bench_opts *o, const procs_case *pc, proc_board *b, int n,
                        int64_t run_ns, char *err, size_t errsize) {
  memset(b, 0, sizeof *b);
  pid_t pid[BENCH_MAX_THREADS];
  int started = 0;
  fflush(stdout);
  fflush(stderr);
  for (; started < n; started++) {
    pid_t p = fork();
    if (p < 0) break;
    if (p == 0) proc_worker(o, pc, b, started);
    pid[started] = p;
  }
  if (started < n) snprintf(err, errsize, "fork: %s", strerror(errno));
  /* Every started worker reports ready (or its error) before the start. */
  int64_t until = bench_now_ns() + INT64_C(30000000000);
  while (atomic_load(&b->ready) < started && bench_now_ns() < until) sched_yield();
  atomic_store_explicit(&b->go, 1, memory_order_release);
  if (started == n) sleep_ns(run_ns);
  atomic_store_explicit(&b->stop, 1, memory_order_release);
  double total = 0.0;
  uint64_t failures = 0;
  for (int i = 0; i < started; i++) {
    int status = 0;
    while (waitpid(pid[i], &status, 0) < 0 && errno == EINTR) {
    }
    if (!err[0] && b->w[i].error[0]) snprintf(err, errsize, "%s", b->w[i].error);
    if (!err[0] && !(WIFEXITED(status) && WEXITSTATUS(status) == 0))
      snprintf(err, errsize, "worker %d ended with status 0x%x", i, (unsigned)status);
    failures += b->w[i].failures;
    if (b->w[i].ns > 0) total += (double)b->w[i].ops * 1e9 / (double)b->w[i].ns;
  }
  if (!err[0] && failures)
    snprintf(err, errsize, "%llu operations did not succeed", (unsigned long long)failures);
  return err[0] ? -1.0 : total;
}

static void procs_case_run(const bench_opts *o, json_t *entries, pkind kind, int n) {
  char name[64];
  snprintf(name, sizeof name, "%s_%dprocs",
           kind == P_BREAKER ? "shared_breaker" : "shared_ratelimiter", n);
  json_t *e = json_object();
  json_object_set_new(e, "name", json_string(name));
  json_object_set_new(e, "kind", json_string("procs"));
  json_object_set_new(e, "workers", json_integer(n));
  json_object_set_new(
      e, "measures",
      json_string(kind == P_BREAKER
                      ? "total ops/s of try_acquire + record(success) loops: N forked processes "
                        "on one breaker in a resil_shared segment (POSIX shm; each its own "
                        "handle) against N threads on one in-process breaker; CLOSED, count "
                        "window 100"
                      : "total ops/s of acquire(1 permit) loops: N forked processes on one "
                        "rate limiter in a resil_shared segment (POSIX shm; each its own "
                        "handle) against N threads on one in-process limiter; 2^31-1 permits "
                        "per 1 s cycle"));
  double la0 = loadavg(), la1;
  char err[256] = "";

  char segname[64];
  snprintf(segname, sizeof segname, "bench-procs-%ld", (long)getpid());
  resil_shared_config sc;
  resil_shared_config_init(&sc);
  sc.name = segname;
  sc.required = 1;
  resil_shared *seg = NULL;
  resil_breaker *br_in = NULL, *br_sh = NULL;
  resil_ratelimiter *rl_in = NULL, *rl_sh = NULL;
  proc_board *b = MAP_FAILED;
  resil_error rerr;
  resil_status st = resil_shared_open(&sc, &seg, &rerr);
  if (st != RESIL_OK) {
    snprintf(err, sizeof err, "resil_shared_open: %s (%s)", resil_status_name(st), rerr.msg);
  } else {
    if (kind == P_BREAKER) {
      if ((st = bench_make_breaker(NULL, &br_in, &rerr)) == RESIL_OK)
        st = bench_make_breaker(seg, &br_sh, &rerr);
    } else if ((st = bench_make_ratelimiter(NULL, &rl_in, &rerr)) == RESIL_OK) {
      st = bench_make_ratelimiter(seg, &rl_sh, &rerr);
    }
    if (st != RESIL_OK)
      snprintf(err, sizeof err, "creating the policy: %s (%s)", resil_status_name(st),
               rerr.msg);
  }
  if (!err[0]) {
    b = mmap(NULL, sizeof *b, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (b == MAP_FAILED) snprintf(err, sizeof err, "mmap: %s", strerror(errno));
  }

  procs_case pc = {.kind = kind, .sc = &sc};
  bench_thread_fn tbody = kind == P_BREAKER ? bench_thread_breaker_split
                                            : bench_thread_ratelimiter_acquire;
  void *tstate = kind == P_BREAKER ? (void *)br_in : (void *)rl_in;
  bench_result tr;
  memset(&tr, 0, sizeof tr);
  double thr[BENCH_MAX_RUNS], prc[BENCH_MAX_RUNS], ratio[BENCH_MAX_RUNS];
  int nr = 0;
  if (!err[0]) {
    /* A warm-up run of each side, half as long. */
    if (bench_thread_run(o, n, tbody, tstate, o->procs_run_ns / 2, &tr) < 0)
      snprintf(err, sizeof err, "threads: %.200s", tr.error);
    else if (procs_run(o, &pc, b, n, o->procs_run_ns / 2, err, sizeof err) < 0) {
      /* err says why */
    }
  }
  for (int r = 0; !err[0] && r < o->runs && r < BENCH_MAX_RUNS; r++) {
    double t = 0, p = 0;
    for (int side = 0; side < 2 && !err[0]; side++) {
      if ((side == 0) == (r % 2 == 0)) {
        t = bench_thread_run(o, n, tbody, tstate, o->procs_run_ns, &tr);
        if (t <= 0) snprintf(err, sizeof err, "threads, run %d: %.200s", r + 1,
                             tr.error[0] ? tr.error : "no progress");
      } else {
        p = procs_run(o, &pc, b, n, o->procs_run_ns, err, sizeof err);
        if (p <= 0 && !err[0]) snprintf(err, sizeof err, "processes, run %d: no progress", r + 1);
      }
    }
    if (err[0]) break;
    thr[nr] = t;
    prc[nr] = p;
    ratio[nr] = p / t;
    nr++;
  }
  if (!err[0] && kind == P_BREAKER &&
      (resil_breaker_state(br_in) != RESIL_BREAKER_CLOSED ||
       resil_breaker_state(br_sh) != RESIL_BREAKER_CLOSED))
    snprintf(err, sizeof err, "a breaker left CLOSED");
  la1 = loadavg();

  json_object_set_new(e, "loadavg_start", load_json(la0));
  json_object_set_new(e, "loadavg_end", load_json(la1));
  if (err[0]) {
    json_object_set_new(e, "error", json_string(err));
    printf("  %-26s INVALID: %s\n", name, err);
  } else {
    double mt = bench_median(thr, nr), mp = bench_median(prc, nr);
    double mr = bench_median(ratio, nr);
    json_object_set_new(e, "ops_per_s_threads", json_real(mt));
    json_object_set_new(e, "ops_per_s_procs", json_real(mp));
    json_object_set_new(e, "ratio", json_real(mr));
    json_object_set_new(e, "ratio_of_medians", json_real(mp / mt));
    json_object_set_new(e, "runs_ops_per_s_threads", reals(thr, nr));
    json_object_set_new(e, "runs_ops_per_s_procs", reals(prc, nr));
    json_object_set_new(e, "runs_ratio", reals(ratio, nr));
    json_object_set_new(e, "rounds", json_integer(nr));
    json_object_set_new(e, "run_ms", json_integer(o->procs_run_ns / 1000000));
    json_object_set_new(e, "pinned", json_boolean(o->pin_threads && bench_nth_allowed_cpu(0) >= 0));
    double lo = ratio[0], hi = ratio[0];
    for (int i = 1; i < nr; i++) {
      if (ratio[i] < lo) lo = ratio[i];
      if (ratio[i] > hi) hi = ratio[i];
    }
    printf("  %-26s threads %7.2f M ops/s, processes %7.2f M ops/s: x%.3f (rounds %.3f..%.3f; "
           "load %.2f -> %.2f)\n",
           name, mt / 1e6, mp / 1e6, mr, lo, hi, la0, la1);
  }
  fflush(stdout);
  if (b != MAP_FAILED) munmap(b, sizeof *b);
  resil_breaker_free(br_in);
  resil_breaker_free(br_sh);
  resil_ratelimiter_free(rl_in);
  resil_ratelimiter_free(rl_sh);
  if (seg) {
    resil_shared_close(seg);
    resil_shared_unlink(&sc, NULL);
  }
  json_array_append_new(entries, e);
}

/* ---- resil call --state, whole processes ------------------------------------ */

/* Runs argv with stdin, stdout and stderr on /dev/null; *wall_ns from just
 * before the spawn to just after the wait, *cpu_ns its user + system time.
 * 0, or -1 after writing err (a failed start or a non-zero exit). */
static int spawn_timed(char *const argv[], int64_t *wall_ns, int64_t *cpu_ns, char *err,
                       size_t errsize) {
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
  pid_t pid;
  int64_t t0 = bench_now_ns();
  int rc = posix_spawn(&pid, argv[0], &fa, NULL, argv, environ);
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0) {
    snprintf(err, errsize, "posix_spawn %s: %s", argv[0], strerror(rc));
    return -1;
  }
  int status = 0;
  struct rusage ru;
  memset(&ru, 0, sizeof ru);
  while (wait4(pid, &status, 0, &ru) < 0 && errno == EINTR) {
  }
  *wall_ns = bench_now_ns() - t0;
  *cpu_ns = ((int64_t)ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1000000000 +
            ((int64_t)ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1000;
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    snprintf(err, errsize, "%s ... exited with status 0x%x (run it by hand to see why)",
             argv[0], (unsigned)status);
    return -1;
  }
  return 0;
}

#define CLI_WARMUP_PAIRS 3
#define CLI_MAX_PAIRS 1000

static int cmp_d(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* The median of n values (n may exceed BENCH_MAX_RUNS); sorts v. */
static double median_sort(double *v, int n) {
  if (n <= 0) return 0.0;
  qsort(v, (size_t)n, sizeof *v, cmp_d);
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2.0;
}

static void case_cli_state(const bench_opts *o, json_t *entries) {
  const char *name = "cli_call_state_nginx";
  json_t *e = json_object();
  json_object_set_new(e, "name", json_string(name));
  json_object_set_new(e, "kind", json_string("cli"));
  json_object_set_new(
      e, "measures",
      json_string("start-to-exit time of `resil call --state S --state-dir D --breaker "
                  "window=100 --rate 1000000/1s URL/ka` against plain `resil call URL/ka`, "
                  "whole processes started alternately (plain, state, ...), nginx on "
                  "127.0.0.1; the segment exists (created by the warm-up)"));
  if (!o->nginx_url || !o->resil_cli) {
    const char *why = !o->nginx_url ? (o->nginx_skipped ? o->nginx_skipped : "no --nginx-url")
                                    : "no --resil-cli (the resil executable)";
    json_object_set_new(e, "skipped", json_string(why));
    printf("  %-26s SKIPPED: %s\n", name, why);
    json_array_append_new(entries, e);
    return;
  }
  double la0 = loadavg(), la1;
  char err[512] = "";
  /* D: a new directory next to resil_bench (or under --store-dir). */
  char dir[4096];
  const char *base = o->store_dir ? o->store_dir : ".";
  snprintf(dir, sizeof dir, "%s/resil-cli-state.XXXXXX", base);
  if (!mkdtemp(dir)) {
    snprintf(err, sizeof err, "mkdtemp %.300s: %s", dir, strerror(errno));
    dir[0] = '\0';
  }
  char url[1024];
  snprintf(url, sizeof url, "%s/ka", o->nginx_url);
  char *plain[] = {(char *)o->resil_cli, "call", url, NULL};
  char *state[] = {(char *)o->resil_cli, "call", "--state", "bench-cli", "--state-dir", dir,
                   "--breaker", "window=100", "--rate", "1000000/1s", url, NULL};
  int pairs = o->cli_pairs < 1 ? 1 : o->cli_pairs > CLI_MAX_PAIRS ? CLI_MAX_PAIRS : o->cli_pairs;
  double *a = calloc((size_t)pairs * 5, sizeof *a);
  double *bq = a + pairs, *d = a + 2 * pairs, *ca = a + 3 * pairs, *cb = a + 4 * pairs;
  if (!a && !err[0]) snprintf(err, sizeof err, "out of memory");
  int n = 0;
  for (int i = -CLI_WARMUP_PAIRS; !err[0] && i < pairs; i++) {
    int64_t wa, wb, ua, ub;
    if (spawn_timed(plain, &wa, &ua, err, sizeof err) != 0) break;
    if (spawn_timed(state, &wb, &ub, err, sizeof err) != 0) break;
    if (i < 0) continue;
    a[n] = (double)wa / 1e6;
    bq[n] = (double)wb / 1e6;
    d[n] = bq[n] - a[n];
    ca[n] = (double)ua / 1e6;
    cb[n] = (double)ub / 1e6;
    n++;
  }
  la1 = loadavg();
  json_object_set_new(e, "loadavg_start", load_json(la0));
  json_object_set_new(e, "loadavg_end", load_json(la1));
  if (err[0]) {
    json_object_set_new(e, "error", json_string(err));
    printf("  %-26s INVALID: %s\n", name, err);
  } else {
    /* The pairs as measured, before median_sort() sorts each array. */
    json_object_set_new(e, "runs_wall_ms_plain", reals(a, n));
    json_object_set_new(e, "runs_wall_ms_state", reals(bq, n));
    double mdiff = median_sort(d, n);
    double lo = d[0], hi = d[n - 1];
    double ma = median_sort(a, n), mb = median_sort(bq, n);
    double mca = median_sort(ca, n), mcb = median_sort(cb, n);
    json_object_set_new(e, "wall_ms_plain", json_real(ma));
    json_object_set_new(e, "wall_ms_state", json_real(mb));
    json_object_set_new(e, "added_ms", json_real(mdiff));
    json_object_set_new(e, "cpu_ms_plain", json_real(mca));
    json_object_set_new(e, "cpu_ms_state", json_real(mcb));
    json_object_set_new(e, "pairs", json_integer(n));
    json_object_set_new(e, "command_plain",
                        json_string("resil call URL/ka"));
    json_object_set_new(e, "command_state",
                        json_string("resil call --state bench-cli --state-dir D --breaker "
                                    "window=100 --rate 1000000/1s URL/ka"));
    printf("  %-26s plain %.3f ms, --state %.3f ms; added %+.3f ms (median of %d pairwise "
           "differences, %+.3f..%+.3f); CPU %.2f / %.2f ms (load %.2f -> %.2f)\n",
           name, ma, mb, mdiff, n, lo, hi, mca, mcb, la0, la1);
  }
  fflush(stdout);
  free(a);
  if (dir[0]) {
    resil_shared_config sc;
    resil_shared_config_init(&sc);
    sc.name = "bench-cli";
    sc.dir = dir;
    (void)resil_shared_unlink(&sc, NULL);
    rmdir(dir);
  }
  json_array_append_new(entries, e);
}

int bench_run_shared_cases(const bench_opts *opts, const char *json_path) {
  static const int ns[] = {2, 4, 8};
  json_t *entries = json_array();
  int any = 0;
  for (int k = 0; k < 2; k++) {
    for (size_t i = 0; i < sizeof ns / sizeof ns[0]; i++) {
      char name[64];
      snprintf(name, sizeof name, "%s_%dprocs", k == 0 ? "shared_breaker" : "shared_ratelimiter",
               ns[i]);
      if (!bench_selected(opts, name)) continue;
      if (!any)
        printf("shared state, N processes on one instance in a segment vs N threads on one "
               "in-process instance (alternating runs of %lld ms, %d rounds, %s):\n",
               (long long)(opts->procs_run_ns / 1000000), opts->runs,
               opts->pin_threads ? "worker i on CPU i mod CPUs" : "not pinned");
      any = 1;
      procs_case_run(opts, entries, k == 0 ? P_BREAKER : P_LIMITER, ns[i]);
    }
  }
  if (bench_selected(opts, "cli_call_state_nginx")) case_cli_state(opts, entries);
  char method[400];
  snprintf(method, sizeof method,
           "processes vs threads: after a warm-up run of each side (half as long), %d rounds "
           "of one %lld ms run per side, threads first in even rounds; figure = median of "
           "the runs' total ops/s, ratio = median of per-round ratios. resil call --state: "
           "%d pairs of whole processes after %d pairs not counted, median of each and of "
           "the pairwise differences",
           opts->runs, (long long)(opts->procs_run_ns / 1000000), opts->cli_pairs,
           CLI_WARMUP_PAIRS);
  return bench_append_cases(json_path, entries, "shared_method", method);
}
