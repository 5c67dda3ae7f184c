#define _DEFAULT_SOURCE /* MAP_ANONYMOUS */
/* Lab experiments M (issue 20, "Lab"): state shared by the processes of one
 * host (resil/shared.h). Every worker is a real process (fork) of the lab;
 * the "upstream" is a function that counts its calls in a MAP_SHARED page,
 * so every process's calls are counted in one place. The segment lives in
 * a temporary directory (resil_shared_config.dir), removed afterwards:
 * nothing is left in /dev/shm. Every child is waited for, within a bounded
 * time (killed and reaped past it).
 *
 * M1: 8 workers share one breaker (count window 20, minimum 20, 50 %) and
 *     call until it rejects them; every call fails. The upstream sees at
 *     most 20 + 7 calls. Wrong variant: per-process breakers (each process
 *     opens its own after 20: about 8 x 20).
 * M2: a shared breaker, OPEN for 15 ms at a time, HALF_OPEN lets 1 call in;
 *     8 workers call flat out for 400 ms and every probe fails (OPEN
 *     again): exactly 1 probe per HALF_OPEN period (a period is a state
 *     generation, the permit's). Wrong variant: per-process breakers (8
 *     probes per period).
 * M3: a rate limiter of 10 per 100 ms (100 per second) shared by 8 workers
 *     calling flat out for 3 s: at most the exact bound (the cycles up to
 *     the last grant x 10 + the first period's 10) and at least 95 % of
 *     the permits of the cycles in which workers were calling. Wrong
 *     variant: per-process limiters (about 8 x the bound).
 * M5: the resil tool itself (lab_resil_bin: RESIL_BIN, or this process
 *     when it is `resil lab`) in a /bin/sh loop: 25 sequential `resil call
 *     --state S --state-dir DIR --breaker window=5,min=5,...` against the
 *     fixture's /status/503 (the fixture in this process): 5 reach the
 *     upstream and open the breaker, 20 exit 7; after the wait, one probe.
 *     The wait is 35 x one invocation's time, measured first (300 ms at
 *     least: about 300 ms plain, 1 s under ASan). Wrong variant: the same
 *     loop without --state (all 25 reach the upstream). Needs the fixture.
 * M6: a process opens a segment it cannot open: fallback, one event,
 *     resil_shared_fallback_total 1, a breaker on it per process; with
 *     `required`, the error. Run as root, a forked child drops to uid and
 *     gid 65534 and finds root's real segment (mode 0600) under its own
 *     segment's name in a 1777 directory (as another user's object could
 *     squat the name in /dev/shm); run as another user, which cannot make
 *     another user's object, the child finds the user's own segment made
 *     unopenable (chmod 000). Wrong variant: a segment it can open (no
 *     fallback; the second breaker handle shares the first's OPEN). */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <signal.h>
#include <sched.h>
#include <spawn.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "lab_families.h"
#include "lab_procs.h"
#include "lab_result.h"
#include "resil/breaker.h"
#include "resil/metrics.h"
#include "resil/ratelimit.h"
#include "resil/shared.h"
#ifdef RESIL_HAVE_FIXTURE
#include "fixture/fixture.h"
extern char **environ;
#endif

enum { M_WORKERS = 8 };

/* ---- the workers ------------------------------------------------------------ */

typedef int (*m_work_fn)(void *arg, int i); /* the child's body: its exit status */

typedef struct m_crew {
  pid_t pid[M_WORKERS];
  int started;
  int exited_ok;  /* exited with status 0 */
  int failed;     /* another status, or a signal */
  int killed;     /* still running at the deadline: killed */
  int last_bad;   /* the last bad exit status (or 128 + signal) */
} m_crew;

/* Forks n workers, each running fn(arg, i) and _exit()ing with its result.
 * A failed fork leaves started < n. */
static void m_crew_start(m_crew *c, int n, m_work_fn fn, void *arg) {
  memset(c, 0, sizeof *c);
  for (int i = 0; i < n; i++) {
    pid_t pid = fork();
    if (pid < 0) break;
    if (pid == 0) _exit(fn(arg, i));
    c->pid[c->started++] = pid;
  }
}

/* Waits for every started worker until deadline (monotonic ns); those still
 * running then are killed (SIGKILL) and reaped. */
static void m_crew_reap(m_crew *c, int64_t deadline) {
  int left = c->started;
  int done[M_WORKERS] = {0};
  while (left > 0) {
    for (int i = 0; i < c->started; i++) {
      if (done[i]) continue;
      int st = 0;
      pid_t w = waitpid(c->pid[i], &st, WNOHANG);
      if (w == 0 || (w < 0 && errno == EINTR)) continue;
      done[i] = 1;
      left--;
      if (w > 0 && WIFEXITED(st) && WEXITSTATUS(st) == 0) {
        c->exited_ok++;
      } else {
        c->failed++;
        c->last_bad = w < 0 ? -1 : WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
      }
    }
    if (left == 0) break;
    if (lab_now_ns() > deadline) {
      for (int i = 0; i < c->started; i++)
        if (!done[i] && kill(c->pid[i], SIGKILL) == 0) c->killed++;
      deadline = INT64_MAX; /* the killed ones are reaped by the next passes */
    }
    struct timespec ts = {0, 1000000};
    nanosleep(&ts, NULL);
  }
}

/* Spins (yielding) until the start line, bounded. */
static int m_wait_go(_Atomic int *go, int64_t until) {
  while (!atomic_load(go))
    if (lab_now_ns() > until) return -1;
    else sched_yield();
  return 0;
}

/* ---- M1: one window for 8 processes ---------------------------------------- */

typedef struct m1_board {
  _Atomic int go;
  _Atomic int started;  /* workers that got their breaker */
  _Atomic long calls;   /* calls that reached the upstream */
  _Atomic int rejected; /* workers rejected (OPEN) */
} m1_board;

typedef struct m1 {
  resil_shared *seg; /* NULL: per-process breakers (the wrong variant) */
  m1_board *b;
  int64_t deadline;
} m1;

static void m1_config(resil_breaker_config *c, resil_shared *seg) {
  resil_breaker_config_init(c);
  c->name = "m1";
  c->window_size = 20;
  c->minimum_calls = 20;
  c->failure_rate_threshold_pct = 50;
  c->open_wait_ns = RESIL_S(60);
  c->shared = seg;
}

/* The upstream: counts the call in the shared page, lets the other
 * processes run meanwhile, and fails. */
static resil_outcome m1_upstream(void *arg, const resil_ctx *ctx) {
  (void)ctx;
  m1_board *b = arg;
  atomic_fetch_add(&b->calls, 1);
  sched_yield();
  return resil_outcome_http(503);
}

/* A worker: its own handle on the breaker (shared or per-process); calls
 * until rejected. */
static int m1_worker(void *arg, int i) {
  (void)i;
  m1 *x = arg;
  resil_breaker_config c;
  m1_config(&c, x->seg);
  resil_breaker *br = NULL;
  if (resil_breaker_new(&c, &br, NULL) != RESIL_OK) return 1;
  atomic_fetch_add(&x->b->started, 1);
  if (m_wait_go(&x->b->go, x->deadline) != 0) return 2;
  for (;;) {
    resil_outcome o = resil_breaker_run(br, NULL, m1_upstream, x->b);
    if (o.kind == RESIL_REJECTED && o.reason == RESIL_REASON_BREAKER_OPEN) break;
    if (lab_now_ns() > x->deadline) return 3;
  }
  atomic_fetch_add(&x->b->rejected, 1);
  int open = resil_breaker_state(br) == RESIL_BREAKER_OPEN;
  resil_breaker_free(br);
  return open ? 0 : 4;
}

/* One run of 8 workers; returns the upstream's calls (-1: not run). */
static long m1_round(lab_result *r, resil_shared *seg, m_crew *crew, int *started,
                     int *rejected) {
  m1 x = {seg, lab_board(sizeof(m1_board)), lab_now_ns() + RESIL_S(10)};
  if (!lab_check(r, x.b != NULL, "mmap: %s", strerror(errno))) return -1;
  m_crew_start(crew, M_WORKERS, m1_worker, &x);
  while (atomic_load(&x.b->started) < crew->started && lab_now_ns() < x.deadline) sched_yield();
  atomic_store(&x.b->go, 1);
  m_crew_reap(crew, x.deadline + RESIL_S(1));
  long calls = atomic_load(&x.b->calls);
  *started = atomic_load(&x.b->started);
  *rejected = atomic_load(&x.b->rejected);
  munmap(x.b, sizeof(m1_board));
  return calls;
}

static int m1_run(lab_result *r, int wrong) {
  lab_seg s;
  memset(&s, 0, sizeof s);
  if (lab_seg_open(r, &s, "m1") != 0) goto out;
  m_crew crew;
  int started = 0, rejected = 0;
  long calls = m1_round(r, wrong ? NULL : s.seg, &crew, &started, &rejected);
  if (calls < 0) goto out;
  /* What a fresh process on the same configuration sees: this one. */
  resil_breaker_config c;
  m1_config(&c, wrong ? NULL : s.seg);
  resil_breaker *br = NULL;
  resil_error err;
  if (!lab_check(r, resil_breaker_new(&c, &br, &err) == RESIL_OK, "breaker: %s", err.msg))
    goto out;
  resil_breaker_state_kind st = resil_breaker_state(br);
  resil_breaker_permit p;
  int fresh_rejected = resil_breaker_try_acquire(br, &p) != RESIL_DECISION_GO;
  if (!fresh_rejected) resil_breaker_release(br, &p);
  resil_breaker_free(br);
  /* The wrong variant, inline: per-process breakers. */
  m_crew wcrew;
  int wstarted = 0, wrejected = 0;
  long wrong_calls = m1_round(r, NULL, &wcrew, &wstarted, &wrejected);

  lab_obs_str(r, "breakers", wrong ? "one per process" : "one, in a shared segment");
  lab_obs_int(r, "workers", started);
  lab_obs_int(r, "workers_exited_ok", crew.exited_ok);
  lab_obs_int(r, "workers_rejected", rejected);
  lab_obs_int(r, "upstream_calls_before_open", calls);
  lab_obs_str(r, "breaker_state", resil_breaker_state_name(st));
  lab_obs_bool(r, "fresh_process_rejected", fresh_rejected);
  lab_obs_int(r, "wrong_variant_calls", wrong_calls);
  lab_summary(r,
              "%d processes, %s: the upstream saw %ld calls before every worker was "
              "rejected (per-process breakers: %ld); a fresh process sees %s",
              started, wrong ? "per-process breakers" : "one shared breaker", calls, wrong_calls,
              resil_breaker_state_name(st));
  lab_expect(r, "workers_ran",
             started == M_WORKERS && crew.exited_ok == M_WORKERS && crew.killed == 0,
             "%d of %d workers started, %d exited 0, %d killed (last bad status %d)", started,
             M_WORKERS, crew.exited_ok, crew.killed, crew.last_bad);
  lab_expect(r, "every_worker_rejected", rejected == M_WORKERS, "%d of %d workers rejected",
             rejected, M_WORKERS);
  lab_expect(r, "upstream_calls_before_open", calls >= 20 && calls <= 20 + M_WORKERS - 1,
             "the upstream saw %ld calls before every worker was rejected, not 20..%d", calls,
             20 + M_WORKERS - 1);
  lab_expect(r, "breaker_open", st == RESIL_BREAKER_OPEN && fresh_rejected,
             "a fresh process sees %s and is %s", resil_breaker_state_name(st),
             fresh_rejected ? "rejected" : "let through");
  lab_expect(r, "wrong_variant_lets_more_through",
             wrong_calls >= 100 && wstarted == M_WORKERS && wrejected == M_WORKERS,
             "per-process breakers let %ld calls through (%d workers, %d rejected), not >= 100",
             wrong_calls, wstarted, wrejected);
out:
  lab_seg_done(&s);
  return r->pass;
}

static int m1_right(lab_result *r) { return m1_run(r, 0); }
static int m1_wrong(lab_result *r) { return m1_run(r, 1); }

/* ---- M2: one probe per HALF_OPEN period across 8 processes ------------------ */

enum { M2_GENS = 256 };

typedef struct m2_board {
  _Atomic int go;
  _Atomic int started;
  _Atomic int64_t end; /* set before go (the workers are forked before) */
  _Atomic long probes;   /* calls that reached the upstream */
  _Atomic long rejected; /* calls not permitted */
  _Atomic long not_half_open;
  _Atomic long per_gen[M2_GENS]; /* probes per state generation */
} m2_board;

typedef struct m2 {
  resil_shared *seg;
  m2_board *b;
  int64_t deadline;
} m2;

static void m2_config(resil_breaker_config *c, resil_shared *seg) {
  resil_breaker_config_init(c);
  c->name = "m2";
  c->window_size = 4;
  c->minimum_calls = 4;
  c->open_wait_ns = RESIL_MS(15);
  c->half_open_permitted_calls = 1;
  c->half_open_max_wait_ns = 0;
  c->initial_state = RESIL_BREAKER_OPEN;
  c->shared = seg;
}

static int m2_worker(void *arg, int i) {
  (void)i;
  m2 *x = arg;
  resil_breaker_config c;
  m2_config(&c, x->seg);
  resil_breaker *br = NULL;
  if (resil_breaker_new(&c, &br, NULL) != RESIL_OK) return 1;
  atomic_fetch_add(&x->b->started, 1);
  if (m_wait_go(&x->b->go, x->deadline) != 0) return 2;
  int rc = 0;
  const int64_t end = atomic_load(&x->b->end);
  while (lab_now_ns() < end) {
    resil_breaker_permit p;
    if (resil_breaker_try_acquire(br, &p) != RESIL_DECISION_GO) {
      atomic_fetch_add(&x->b->rejected, 1);
      sched_yield();
      continue;
    }
    /* The probe reaches the upstream, which fails it: OPEN again. */
    if (p.state != RESIL_BREAKER_HALF_OPEN) atomic_fetch_add(&x->b->not_half_open, 1);
    if (p.generation < M2_GENS) atomic_fetch_add(&x->b->per_gen[p.generation], 1);
    atomic_fetch_add(&x->b->probes, 1);
    resil_outcome o = resil_outcome_http(503);
    if (resil_breaker_record(br, &p, &o, 1000) != RESIL_OK) {
      rc = 3;
      break;
    }
  }
  resil_breaker_free(br);
  return rc;
}

static int m2_run(lab_result *r, int wrong) {
  lab_seg s;
  memset(&s, 0, sizeof s);
  resil_breaker *br = NULL;
  m2 x = {NULL, NULL, 0};
  if (lab_seg_open(r, &s, "m2") != 0) goto out;
  x.seg = wrong ? NULL : s.seg;
  x.b = lab_board(sizeof(m2_board));
  if (!lab_check(r, x.b != NULL, "mmap: %s", strerror(errno))) goto out;
  resil_breaker_config c;
  m2_config(&c, x.seg);
  resil_error err;
  /* The parent's handle (created first: the shared state starts OPEN). */
  if (!lab_check(r, resil_breaker_new(&c, &br, &err) == RESIL_OK, "breaker: %s", err.msg))
    goto out;
  x.deadline = lab_now_ns() + RESIL_S(10);
  m_crew crew;
  m_crew_start(&crew, M_WORKERS, m2_worker, &x);
  while (atomic_load(&x.b->started) < crew.started && lab_now_ns() < x.deadline) sched_yield();
  atomic_store(&x.b->end, lab_now_ns() + RESIL_MS(400));
  atomic_store(&x.b->go, 1);
  m_crew_reap(&crew, x.deadline);
  long periods = 0, most = 0, over = 0, sum = 0;
  for (int g = 0; g < M2_GENS; g++) {
    long n = atomic_load(&x.b->per_gen[g]);
    periods += n > 0;
    over += n > 1;
    sum += n;
    if (n > most) most = n;
  }
  long probes = atomic_load(&x.b->probes), rejected = atomic_load(&x.b->rejected);
  long not_half_open = atomic_load(&x.b->not_half_open);
  resil_breaker_metrics m;
  int have_m = resil_breaker_get_metrics(br, &m) == RESIL_OK;

  lab_obs_str(r, "breakers", wrong ? "one per process" : "one, in a shared segment");
  lab_obs_int(r, "workers", atomic_load(&x.b->started));
  lab_obs_int(r, "half_open_periods", periods);
  lab_obs_int(r, "probes_seen", most);
  lab_obs_int(r, "probes", probes);
  lab_obs_int(r, "periods_with_more_than_one_probe", over);
  lab_obs_int(r, "rejected", rejected);
  lab_obs_int(r, "probes_outside_half_open", not_half_open);
  if (have_m) lab_obs_int(r, "transitions", (long long)m.total_transitions);
  lab_summary(r,
              "%d processes, %s, 400 ms: %ld HALF_OPEN periods, at most %ld probe(s) in one "
              "(%ld in all), %ld calls rejected",
              atomic_load(&x.b->started), wrong ? "per-process breakers" : "one shared breaker",
              periods, most, probes, rejected);
  lab_expect(r, "workers_ran",
             crew.started == M_WORKERS && crew.exited_ok == M_WORKERS && crew.killed == 0,
             "%d of %d workers started, %d exited 0, %d killed (last bad status %d)",
             crew.started, M_WORKERS, crew.exited_ok, crew.killed, crew.last_bad);
  lab_expect(r, "several_periods", periods >= 3, "%ld HALF_OPEN periods in 400 ms, not >= 3",
             periods);
  lab_expect(r, "one_probe_per_period", most == 1 && over == 0 && sum == probes,
             "%ld periods let in more than one probe (at most %ld in one)", over, most);
  lab_expect(r, "probes_in_half_open", not_half_open == 0,
             "%ld permits were handed out outside HALF_OPEN", not_half_open);
  lab_expect(r, "others_rejected", rejected >= M_WORKERS - 1, "%ld calls rejected, not >= %d",
             rejected, M_WORKERS - 1);
out:
  if (br) resil_breaker_free(br);
  if (x.b) munmap(x.b, sizeof(m2_board));
  lab_seg_done(&s);
  return r->pass;
}

static int m2_right(lab_result *r) { return m2_run(r, 0); }
static int m2_wrong(lab_result *r) { return m2_run(r, 1); }

/* ---- M3: one rate limiter for 8 processes ---------------------------------- */

enum { M3_LIMIT = 10, M3_CYCLES = 64 };
#define M3_PERIOD_NS RESIL_MS(100)
#define M3_RUN_NS RESIL_S(3)

typedef struct m3_board {
  _Atomic int go;
  _Atomic int started;
  _Atomic int64_t t_before; /* just before the limiter's creation */
  _Atomic long admitted;
  _Atomic int64_t last_grant;
  /* 1 for each cycle (from t_before) in which some worker was calling. */
  _Atomic int called[M3_CYCLES];
} m3_board;

typedef struct m3 {
  resil_shared *seg;
  m3_board *b;
  int64_t deadline;
} m3;

static resil_status m3_limiter(resil_shared *seg, resil_ratelimiter **out, resil_error *err) {
  resil_ratelimiter_config c;
  resil_ratelimiter_config_init(&c);
  c.name = "m3";
  c.limit_for_period = M3_LIMIT;
  c.refresh_period_ns = M3_PERIOD_NS;
  c.timeout_ns = 0;
  c.shared = seg;
  return resil_ratelimiter_new(&c, out, err);
}

static int m3_worker(void *arg, int i) {
  (void)i;
  m3 *x = arg;
  resil_ratelimiter *rl = NULL;
  /* Shared: created by the parent first, after the forks (cycle 0 is not
   * spent forking); this handle attaches to it. */
  if (m_wait_go(&x->b->go, x->deadline) != 0) return 2;
  if (m3_limiter(x->seg, &rl, NULL) != RESIL_OK) return 1;
  atomic_fetch_add(&x->b->started, 1);
  const int64_t t_before = atomic_load(&x->b->t_before);
  long n = 0;
  int64_t last = 0, marked = -1;
  for (int64_t now = lab_now_ns(); now < t_before + M3_RUN_NS; now = lab_now_ns()) {
    int64_t cy = (now - t_before) / M3_PERIOD_NS;
    if (cy != marked && cy >= 0 && cy < M3_CYCLES) {
      atomic_store_explicit(&x->b->called[cy], 1, memory_order_relaxed);
      marked = cy;
    }
    if (resil_ratelimiter_acquire(rl, 1, NULL, NULL) == RESIL_DECISION_GO) {
      n++;
      last = lab_now_ns();
    }
  }
  atomic_fetch_add(&x->b->admitted, n);
  int64_t seen = atomic_load(&x->b->last_grant);
  while (last > seen && !atomic_compare_exchange_weak(&x->b->last_grant, &seen, last)) {
  }
  resil_ratelimiter_free(rl);
  return 0;
}

static int m3_run(lab_result *r, int wrong) {
  lab_seg s;
  memset(&s, 0, sizeof s);
  resil_ratelimiter *rl = NULL;
  m3 x = {NULL, NULL, 0};
  if (lab_seg_open(r, &s, "m3") != 0) goto out;
  x.seg = wrong ? NULL : s.seg;
  x.b = lab_board(sizeof(m3_board));
  if (!lab_check(r, x.b != NULL, "mmap: %s", strerror(errno))) goto out;
  x.deadline = lab_now_ns() + M3_RUN_NS + RESIL_S(10);
  m_crew crew;
  m_crew_start(&crew, M_WORKERS, m3_worker, &x);
  int64_t t_before = lab_now_ns();
  resil_error err;
  if (!lab_check(r, m3_limiter(x.seg, &rl, &err) == RESIL_OK, "limiter: %s", err.msg)) {
    atomic_store(&x.b->t_before, t_before - M3_RUN_NS); /* the workers stop at once */
    atomic_store(&x.b->go, 1);
    m_crew_reap(&crew, x.deadline);
    goto out;
  }
  atomic_store(&x.b->t_before, t_before);
  atomic_store(&x.b->go, 1);
  m_crew_reap(&crew, x.deadline);
  long admitted = atomic_load(&x.b->admitted);
  int64_t last = atomic_load(&x.b->last_grant);
  long cycles_called = 0;
  for (int c = 0; c < M3_CYCLES; c++) cycles_called += atomic_load(&x.b->called[c]);
  /* Every grant up to `last` is in the cycles 0..(last - t_before) /
   * period of the limiter (created after t_before): at most their count
   * x the limit, i.e. the cycles elapsed x 10 + the first period's 10. */
  long cycles = last > t_before ? (long)((last - t_before) / M3_PERIOD_NS) : 0;
  long bound = (cycles + 1) * M3_LIMIT;
  /* The permits of the cycles in which some worker was calling (a cycle
   * in which none ran, every worker descheduled, was not asked for). */
  long offered = cycles_called * M3_LIMIT;
  long floor_of = offered < bound ? offered : bound;
  double ratio = bound > 0 ? (double)admitted / (double)bound : 0.0;

  lab_obs_str(r, "limiters", wrong ? "one per process" : "one, in a shared segment");
  lab_obs_int(r, "workers", atomic_load(&x.b->started));
  lab_obs_int(r, "limit_for_period", M3_LIMIT);
  lab_obs_int(r, "refresh_period_ms", M3_PERIOD_NS / 1000000);
  lab_obs_real(r, "run_s", (double)M3_RUN_NS / 1e9);
  lab_obs_int(r, "admitted", admitted);
  lab_obs_int(r, "bound", bound);
  lab_obs_int(r, "cycles_called", cycles_called);
  lab_obs_int(r, "offered", offered);
  lab_obs_real(r, "ratio", ratio);
  lab_obs_real(r, "ratio_of_cycles_called", floor_of > 0 ? (double)admitted / (double)floor_of : 0);
  lab_summary(r,
              "%d processes, %s, 10 per 100 ms for 3 s: %ld admitted, bound %ld (%ld cycles "
              "+ the first), ratio %.3f",
              atomic_load(&x.b->started), wrong ? "per-process limiters" : "one shared limiter",
              admitted, bound, cycles, ratio);
  lab_expect(r, "workers_ran",
             crew.started == M_WORKERS && crew.exited_ok == M_WORKERS && crew.killed == 0,
             "%d of %d workers started, %d exited 0, %d killed (last bad status %d)",
             crew.started, M_WORKERS, crew.exited_ok, crew.killed, crew.last_bad);
  lab_expect(r, "admitted_within_bound", admitted <= bound,
             "%ld admitted, more than the bound %ld", admitted, bound);
  lab_expect(r, "admitted_at_least_95_pct", admitted * 100 >= floor_of * 95,
             "%ld admitted, less than 95 %% of %ld (the permits of the %ld cycles called)",
             admitted, floor_of, cycles_called);
out:
  if (rl) resil_ratelimiter_free(rl);
  if (x.b) munmap(x.b, sizeof(m3_board));
  lab_seg_done(&s);
  return r->pass;
}

static int m3_right(lab_result *r) { return m3_run(r, 0); }
static int m3_wrong(lab_result *r) { return m3_run(r, 1); }

/* ---- M5: `resil call --state` from a shell loop ---------------------------- */

#ifdef RESIL_HAVE_FIXTURE

enum { M5_INVOCATIONS = 25, M5_MIN = 5, M5_STATUS_MAX = 32 };

/* `sh -c M5_LOOP sh BIN N ERR ARGS...`: runs `BIN ARGS...` N times, one
 * after the other, stdout to /dev/null and stderr appended to the file
 * ERR, and prints each invocation's exit status on a line. */
static const char m5_loop[] =
    "bin=$1 n=$2 err=$3; shift 3; i=0\n"
    "while [ \"$i\" -lt \"$n\" ]; do\n"
    "  i=$((i + 1))\n"
    "  \"$bin\" \"$@\" >/dev/null 2>>\"$err\"\n"
    "  echo $?\n"
    "done\n";

typedef struct m5_sh {
  int status[M5_STATUS_MAX]; /* the invocations' exit statuses, in order */
  int count;
  int exit;      /* the shell's exit status (128 + signal; -1 not reaped) */
  int timed_out; /* killed (its process group) at the limit */
  int64_t ns;    /* from spawning the shell to its exit */
} m5_sh;

/* Runs the loop (n <= M5_STATUS_MAX) within limit_ns. 0, or -1 when the
 * shell could not be started. */
static int m5_run_sh(const char *bin, int n, const char *errfile, char *const *args, int nargs,
                     m5_sh *out, int64_t limit_ns) {
  memset(out, 0, sizeof *out);
  out->exit = -1;
  char n_s[16];
  snprintf(n_s, sizeof n_s, "%d", n);
  char *argv[16];
  int k = 0;
  argv[k++] = "/bin/sh";
  argv[k++] = "-c";
  argv[k++] = (char *)m5_loop;
  argv[k++] = "sh";
  argv[k++] = (char *)bin;
  argv[k++] = n_s;
  argv[k++] = (char *)errfile;
  for (int i = 0; i < nargs && k < 15; i++) argv[k++] = args[i];
  argv[k] = NULL;
  int fds[2];
  if (pipe(fds) != 0) return -1;
  fcntl(fds[0], F_SETFD, FD_CLOEXEC);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, fds[1], STDOUT_FILENO);
  posix_spawn_file_actions_addclose(&fa, fds[1]);
  posix_spawnattr_t at;
  posix_spawnattr_init(&at);
  posix_spawnattr_setflags(&at, POSIX_SPAWN_SETPGROUP); /* its own group: killed whole */
  posix_spawnattr_setpgroup(&at, 0);
  const int64_t t0 = lab_now_ns();
  pid_t pid = -1;
  int rc = posix_spawn(&pid, "/bin/sh", &fa, &at, argv, environ);
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&at);
  close(fds[1]);
  if (rc != 0) {
    close(fds[0]);
    return -1;
  }
  char buf[256];
  size_t len = 0;
  const int64_t end = t0 + limit_ns;
  for (;;) {
    int64_t left_ms = (end - lab_now_ns()) / 1000000;
    if (left_ms <= 0) {
      out->timed_out = 1;
      break;
    }
    struct pollfd p = {.fd = fds[0], .events = POLLIN};
    int pr = poll(&p, 1, (int)(left_ms < 1000 ? left_ms : 1000));
    if (pr < 0 && errno == EINTR) continue;
    if (pr <= 0) continue;
    ssize_t got = read(fds[0], buf + len, sizeof buf - 1 - len);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) break; /* EOF: the loop is over */
    len += (size_t)got;
    buf[len] = '\0';
    char *nl;
    while ((nl = strchr(buf, '\n')) != NULL) {
      *nl = '\0';
      if (out->count < M5_STATUS_MAX) out->status[out->count++] = atoi(buf);
      len -= (size_t)(nl + 1 - buf);
      memmove(buf, nl + 1, len + 1);
    }
    if (len == sizeof buf - 1) len = 0; /* a line that is no status */
  }
  close(fds[0]);
  if (out->timed_out) kill(-pid, SIGKILL);
  int st = 0;
  while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
  }
  out->ns = lab_now_ns() - t0;
  out->exit = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  return 0;
}

/* Lines of the file that contain needle (-1: it cannot be read). */
static long m5_count_lines(const char *path, const char *needle) {
  FILE *f = fopen(path, "r");
  if (!f) return -1;
  char line[512];
  long n = 0;
  while (fgets(line, sizeof line, f))
    if (strstr(line, needle)) n++;
  fclose(f);
  return n;
}

static int m5_run(lab_result *r, int wrong) {
  char bin[512];
  if (!lab_check(r, lab_resil_bin(bin, sizeof bin),
                 "M5 runs `resil call` in a shell loop: set RESIL_BIN to the resil binary"))
    return 0;
  resil_fixture *fx = NULL;
  lab_seg s;
  memset(&s, 0, sizeof s);
  char errfile[128] = "";
  char eb[256];
  if (!lab_check(r, resil_fixture_start(NULL, &fx, eb, sizeof eb) == 0, "fixture: %s", eb))
    return 0;
  if (lab_seg_dir(r, &s, "m5") != 0) goto out;
  snprintf(errfile, sizeof errfile, "%s/stderr", s.dir);
  char url[160];
  snprintf(url, sizeof url, "%s/status/503", resil_fixture_url(fx));

  /* The wait: long enough for the 20 rejected invocations on this machine
   * (35 x one invocation, measured: `resil call --help` 3 times through
   * the same loop), 300 ms at least, 8 s at most. */
  m5_sh cal;
  char *help[] = {"call", "--help"};
  if (!lab_check(r, m5_run_sh(bin, 3, "/dev/null", help, 2, &cal, RESIL_S(60)) == 0,
                 "cannot start /bin/sh: %s", strerror(errno)))
    goto out;
  int64_t one_ms = cal.ns / 3 / 1000000 + 1;
  int64_t wait_ms = (one_ms * 35 + 49) / 50 * 50;
  if (wait_ms < 300) wait_ms = 300;
  if (wait_ms > 8000) wait_ms = 8000;
  char spec[96];
  snprintf(spec, sizeof spec, "window=%d,min=%d,rate=50,wait=%lldms,probes=1", M5_MIN, M5_MIN,
           (long long)wait_ms);
  char *args_state[] = {"call", "--state", s.name, "--state-dir", s.dir, "--breaker", spec, url};
  char *args_plain[] = {"call", url};
  char *const *args = wrong ? args_plain : args_state;
  int nargs = wrong ? 2 : 8;

  /* The loop: 25 invocations. */
  m5_sh loop;
  if (!lab_check(r, m5_run_sh(bin, M5_INVOCATIONS, errfile, args, nargs, &loop,
                              RESIL_S(120)) == 0,
                 "cannot start /bin/sh: %s", strerror(errno)))
    goto out;
  const int64_t loop_end = lab_now_ns();
  long upstream = resil_fixture_attempts(fx, "status");
  int made = 0, rejected = 0, other = 0;
  for (int i = 0; i < loop.count; i++) {
    if (loop.status[i] == 6) made++;
    else if (loop.status[i] == 7) rejected++;
    else other++;
  }
  long rejected_lines = m5_count_lines(errfile, "REJECTED(circuit breaker open) after 0 attempts");

  /* What another process (this one) finds in the segment after the loop. */
  resil_breaker_metrics bm;
  memset(&bm, 0, sizeof bm);
  int peeked = 0;
  if (!wrong) {
    s.sc.existing_only = 1;
    resil_shared *seg = NULL;
    resil_error err;
    memset(&err, 0, sizeof err);
    if (resil_shared_open(&s.sc, &seg, &err) == RESIL_OK) {
      peeked = resil_breaker_shared_peek(seg, "breaker", &bm, &err) == RESIL_OK;
      resil_shared_close(seg);
    }
    lab_check(r, peeked, "the breaker in segment %s: %s", s.name, err.msg);
  }

  /* After the wait (counted from the loop's end: the breaker opened
   * before it), the same invocation twice: the probe goes through (and
   * fails: OPEN again), the next is rejected. */
  int64_t until = loop_end + RESIL_MS(wait_ms) + RESIL_MS(50);
  while (lab_now_ns() < until) {
    struct timespec ts = {0, 5000000};
    nanosleep(&ts, NULL);
  }
  m5_sh after;
  if (!lab_check(r, m5_run_sh(bin, 2, errfile, args, nargs, &after, RESIL_S(60)) == 0,
                 "cannot start /bin/sh: %s", strerror(errno)))
    goto out;
  long probes = resil_fixture_attempts(fx, "status") - upstream;
  char after_s[32];
  snprintf(after_s, sizeof after_s, "%d %d", after.count > 0 ? after.status[0] : -1,
           after.count > 1 ? after.status[1] : -1);

  char loop_s[400];
  if (wrong)
    snprintf(loop_s, sizeof loop_s, "for i in 1..%d: resil call %s; echo $?", M5_INVOCATIONS,
             url);
  else
    snprintf(loop_s, sizeof loop_s,
             "for i in 1..%d: resil call --state %s --state-dir DIR --breaker %s %s; echo $?",
             M5_INVOCATIONS, s.name, spec, url);
  lab_obs_str(r, "loop", loop_s);
  lab_obs_str(r, "breaker", wrong ? "none kept (no --state: each invocation its own)"
                                  : "one, in the --state segment");
  lab_obs_int(r, "invocations", loop.count);
  lab_obs_int(r, "upstream_calls", upstream);
  lab_obs_int(r, "window_minimum", M5_MIN);
  lab_obs_int(r, "made_invocations", made);
  lab_obs_int(r, "rejected_invocations", rejected);
  lab_obs_int(r, "rejected_messages", rejected_lines);
  lab_obs_int(r, "invocation_ms", one_ms);
  lab_obs_int(r, "wait_ms", wait_ms);
  lab_obs_int(r, "loop_ms", loop.ns / 1000000);
  if (peeked) {
    lab_obs_str(r, "breaker_state", resil_breaker_state_name(bm.state));
    lab_obs_int(r, "breaker_total_calls", (long long)bm.total_calls);
    lab_obs_int(r, "breaker_not_permitted", (long long)bm.total_not_permitted);
  }
  lab_obs_int(r, "probe_after_wait", probes);
  lab_obs_str(r, "exit_statuses_after_wait", after_s);
  lab_summary(r,
              "%d sequential `resil call`%s against a failing route: the upstream saw %ld "
              "calls, %d invocations rejected (exit 7) in %lld ms; after the %lld ms wait "
              "%ld of 2 invocations reached it (exits %s)",
              loop.count, wrong ? " without --state" : " --state --breaker", upstream, rejected,
              (long long)(loop.ns / 1000000), (long long)wait_ms, probes, after_s);
  lab_expect(r, "invocations_ran",
             loop.count == M5_INVOCATIONS && other == 0 && loop.exit == 0 && !loop.timed_out,
             "%d of %d invocations reported, %d exited neither 6 nor 7, the loop exited %d%s",
             loop.count, M5_INVOCATIONS, other, loop.exit, loop.timed_out ? " (timed out)" : "");
  lab_expect(r, "upstream_calls", upstream == M5_MIN,
             "the upstream saw %ld calls, not the window's minimum %d (the loop took %lld ms, "
             "the wait is %lld ms)",
             upstream, M5_MIN, (long long)(loop.ns / 1000000), (long long)wait_ms);
  lab_expect(r, "rejected_invocations",
             rejected == M5_INVOCATIONS - M5_MIN && rejected_lines == rejected,
             "%d invocations exited 7 and %ld said REJECTED(circuit breaker open), not %d",
             rejected, rejected_lines, M5_INVOCATIONS - M5_MIN);
  if (!wrong)
    lab_expect(r, "breaker_open",
               peeked && bm.state == RESIL_BREAKER_OPEN &&
                   bm.total_not_permitted == (uint64_t)rejected,
               "the segment's breaker is %s with %llu calls not permitted (%d rejected)",
               peeked ? resil_breaker_state_name(bm.state) : "absent",
               (unsigned long long)bm.total_not_permitted, rejected);
  lab_expect(r, "probe_after_wait",
             probes == 1 && after.count == 2 && after.status[0] == 6 && after.status[1] == 7,
             "after the wait %ld call(s) reached the upstream (exits %s), not 1 probe (6 then 7)",
             probes, after_s);
out:
  if (s.dir[0]) {
    s.sc.existing_only = 0;
    (void)resil_shared_unlink(&s.sc, NULL); /* absent in the wrong variant */
    if (errfile[0]) unlink(errfile);
  }
  lab_seg_done(&s);
  resil_fixture_stop(fx);
  return r->pass;
}

static int m5_right(lab_result *r) { return m5_run(r, 0); }
static int m5_wrong(lab_result *r) { return m5_run(r, 1); }

#endif /* RESIL_HAVE_FIXTURE */

/* ---- M6: a segment the user cannot open ------------------------------------ */

enum { M6_NOBODY = 65534, M6_WINDOW = 4 };

typedef struct m6_board {
  int ran;        /* the child reached the end */
  long uid;       /* its effective user id */
  int stat_errno; /* 0: it could stat the object under its segment's name */
  long owner;     /* that object's owner and mode bits, as it saw them */
  unsigned mode;
  int is_fallback;
  int events;        /* on_fallback calls after the open */
  int event_segment; /* the first one was about the segment (instance NULL) */
  char event_msg[192];
  double total;      /* resil_shared_fallback_total after the open */
  double mode_gauge; /* resil_shared_fallback_mode */
  int opened_after;  /* failures after which its breaker was OPEN (0: never) */
  int rejects;       /* the call after that was REJECTED(circuit breaker open) */
  int second_state;  /* a second handle's state, same name (resil_breaker_state_kind) */
  int events_after;  /* on_fallback calls after the two breakers */
  double total_after;
  int required_status; /* resil_shared_open with required 1 */
  char required_field[48];
  char required_msg[192];
} m6_board;

typedef struct m6 {
  m6_board *b;
  const char *dir;
  const char *name;
  int drop; /* drop to uid and gid 65534 (nobody) first */
} m6;

typedef struct m6_hook {
  int calls;
  int first_segment;
  char first_msg[192];
} m6_hook;

static void m6_on_fallback(void *user, const char *instance, const resil_error *why) {
  m6_hook *h = user;
  if (h->calls++ == 0) {
    h->first_segment = instance == NULL;
    snprintf(h->first_msg, sizeof h->first_msg, "%s", why->msg);
  }
}

/* The value of the series family{name="seg"} in m's exposition (-1: none). */
static double m6_metric(resil_metrics *m, const char *family, const char *seg) {
  char *text = NULL;
  if (resil_metrics_render_alloc(m, &text, NULL) != RESIL_OK) return -1;
  char key[160];
  snprintf(key, sizeof key, "\n%s{name=\"%s\"} ", family, seg);
  const char *p = strstr(text, key);
  double v = p ? strtod(p + strlen(key), NULL) : -1;
  resil_metrics_text_free(m, text);
  return v;
}

static resil_outcome m6_fail(void *arg, const resil_ctx *ctx) {
  (void)arg;
  (void)ctx;
  return resil_outcome_http(503);
}

/* The process that opens the segment: after the fallback, a breaker on it
 * (count window 4, minimum 4) and a second handle under the same name;
 * then the same segment, required. Its findings go to the board. */
static int m6_child(void *arg, int i) {
  (void)i;
  m6 *x = arg;
  m6_board *b = x->b;
  if (x->drop) {
    if (setgroups(0, NULL) != 0 || setgid(M6_NOBODY) != 0 || setuid(M6_NOBODY) != 0) return 10;
    if (setuid(0) == 0) return 11; /* for good */
    /* Changing ids made it undumpable: /proc/self would be root's, and
     * the sanitizers read it. */
    (void)prctl(PR_SET_DUMPABLE, 1, 0, 0, 0);
  }
  b->uid = (long)geteuid();
  char path[256];
  snprintf(path, sizeof path, "%s/resil-%lu-v%d-%s", x->dir, (unsigned long)geteuid(),
           RESIL_SHARED_LAYOUT, x->name);
  struct stat sb;
  if (stat(path, &sb) == 0) {
    b->owner = (long)sb.st_uid;
    b->mode = (unsigned)(sb.st_mode & 07777);
  } else {
    b->stat_errno = errno;
  }
  m6_hook h;
  memset(&h, 0, sizeof h);
  resil_shared_config sc;
  resil_shared_config_init(&sc);
  sc.name = x->name;
  sc.dir = x->dir;
  sc.on_fallback = m6_on_fallback;
  sc.user = &h;
  resil_shared *seg = NULL;
  if (resil_shared_open(&sc, &seg, NULL) != RESIL_OK) return 12;
  b->is_fallback = resil_shared_is_fallback(seg);
  b->events = h.calls;
  b->event_segment = h.first_segment;
  snprintf(b->event_msg, sizeof b->event_msg, "%s", h.first_msg);
  resil_metrics *m = NULL;
  if (resil_metrics_new(NULL, &m) != RESIL_OK) return 13;
  if (resil_shared_metrics_add(m, NULL, seg) != RESIL_OK) return 13;
  b->total = m6_metric(m, "resil_shared_fallback_total", x->name);
  b->mode_gauge = m6_metric(m, "resil_shared_fallback_mode", x->name);

  resil_breaker_config c;
  resil_breaker_config_init(&c);
  c.name = "m6";
  c.window_size = M6_WINDOW;
  c.minimum_calls = M6_WINDOW;
  c.failure_rate_threshold_pct = 50;
  c.open_wait_ns = RESIL_S(60);
  c.shared = seg;
  resil_breaker *b1 = NULL, *b2 = NULL;
  if (resil_breaker_new(&c, &b1, NULL) != RESIL_OK) return 14;
  for (int k = 1; k <= 2 * M6_WINDOW && !b->opened_after; k++) {
    (void)resil_breaker_run(b1, NULL, m6_fail, NULL);
    if (resil_breaker_state(b1) == RESIL_BREAKER_OPEN) b->opened_after = k;
  }
  resil_outcome o = resil_breaker_run(b1, NULL, m6_fail, NULL);
  b->rejects = o.kind == RESIL_REJECTED && o.reason == RESIL_REASON_BREAKER_OPEN;
  if (resil_breaker_new(&c, &b2, NULL) != RESIL_OK) return 15;
  b->second_state = (int)resil_breaker_state(b2);
  b->events_after = h.calls;
  b->total_after = m6_metric(m, "resil_shared_fallback_total", x->name);
  resil_metrics_remove(m, seg);
  resil_metrics_free(m);
  resil_breaker_free(b2);
  resil_breaker_free(b1);
  resil_shared_close(seg);

  sc.required = 1;
  sc.on_fallback = NULL;
  resil_error err;
  resil_error_clear(&err);
  resil_shared *req = NULL;
  b->required_status = (int)resil_shared_open(&sc, &req, &err);
  if (b->required_status == RESIL_OK) resil_shared_close(req);
  snprintf(b->required_field, sizeof b->required_field, "%s", err.field);
  snprintf(b->required_msg, sizeof b->required_msg, "%s", err.msg);
  b->ran = 1;
  return 0;
}

static int m6_run(lab_result *r, int wrong) {
  lab_seg s;
  memset(&s, 0, sizeof s);
  m6_board *b = NULL;
  char own[160] = "", squat[160] = "";
  const int root = geteuid() == 0;
  if (lab_seg_dir(r, &s, "m6") != 0) goto out;
  b = lab_board(sizeof *b);
  if (!lab_check(r, b != NULL, "mmap: %s", strerror(errno))) goto out;
  /* A real segment of this process's user: created and closed (the
   * object stays). */
  resil_error err;
  resil_error_clear(&err);
  if (!lab_check(r, resil_shared_open(&s.sc, &s.seg, &err) == RESIL_OK, "segment: %s", err.msg))
    goto out;
  resil_shared_close(s.seg);
  s.seg = NULL;
  snprintf(own, sizeof own, "%s/resil-%lu-v%d-%s", s.dir, (unsigned long)geteuid(),
           RESIL_SHARED_LAYOUT, s.name);
  const char *how;
  if (root) {
    /* The directory as /dev/shm is (1777: anyone creates, nobody removes
     * another's); the child is uid 65534, whose segment's name is
     * resil-65534-...: there, root's segment (the right experiment). */
    snprintf(squat, sizeof squat, "%s/resil-%d-v%d-%s", s.dir, M6_NOBODY, RESIL_SHARED_LAYOUT,
             s.name);
    if (!lab_check(r, chmod(s.dir, 01777) == 0, "chmod %s: %s", s.dir, strerror(errno)))
      goto out;
    if (!wrong && !lab_check(r, link(own, squat) == 0, "link %s: %s", squat, strerror(errno)))
      goto out;
    how = wrong ? "as uid 65534 (a child of the root lab, dropped to nobody by setgid/setuid) "
                  "in a 1777 dir where nothing has its segment's name: it creates its own"
                : "as uid 65534 (a child of the root lab, dropped to nobody by setgid/setuid): "
                  "the object under its segment's name is root's real segment, mode 0600 "
                  "(hard-linked there, in a 1777 dir as /dev/shm is: another user's object "
                  "squatting the name)";
  } else {
    if (!wrong && !lab_check(r, chmod(own, 0) == 0, "chmod %s: %s", own, strerror(errno)))
      goto out;
    how = wrong ? "as this user (not root), its own segment: it opens"
                : "as this user (not root, who alone can make another user's object): its "
                  "own real segment made unopenable (chmod 000), not another user's";
  }
  m6 x = {b, s.dir, s.name, root};
  m_crew crew;
  m_crew_start(&crew, 1, m6_child, &x);
  m_crew_reap(&crew, lab_now_ns() + RESIL_S(20));

  const char *eacces = strerror(EACCES);
  char mode_s[8];
  snprintf(mode_s, sizeof mode_s, "%04o", b->mode);
  char required_s[280];
  snprintf(required_s, sizeof required_s, "%s: %s",
           resil_status_name((resil_status)b->required_status), b->required_msg);
  lab_obs_str(r, "exercised", how);
  lab_obs_int(r, "process_uid", b->uid);
  if (b->stat_errno == 0) {
    lab_obs_int(r, "segment_owner_uid", b->owner);
    lab_obs_str(r, "segment_mode", mode_s);
  } else {
    lab_obs_str(r, "segment_stat", strerror(b->stat_errno));
  }
  lab_obs_bool(r, "fallback_mode", b->is_fallback);
  lab_obs_int(r, "fallback_events", b->events);
  lab_obs_str(r, "fallback_event", b->event_msg);
  lab_obs_int(r, "resil_shared_fallback_total", (long long)b->total);
  lab_obs_int(r, "breaker_open_after_failures", b->opened_after);
  lab_obs_bool(r, "breaker_rejects_when_open", b->rejects);
  lab_obs_str(r, "second_handle_state",
              resil_breaker_state_name((resil_breaker_state_kind)b->second_state));
  lab_obs_int(r, "fallback_events_after_breakers", b->events_after);
  lab_obs_int(r, "resil_shared_fallback_total_after_breakers", (long long)b->total_after);
  lab_obs_str(r, "required_error", required_s);
  lab_obs_str(r, "required_error_field", b->required_field);
  lab_summary(r,
              "uid %ld opens a segment %s: %s, %d fallback event(s), "
              "resil_shared_fallback_total %.0f; its breaker opens after %d failures, a second "
              "handle is %s; required: %s",
              b->uid, wrong ? "it can open" : "it cannot open",
              b->is_fallback ? "per-process state" : "shared state", b->events, b->total,
              b->opened_after,
              resil_breaker_state_name((resil_breaker_state_kind)b->second_state), required_s);
  lab_expect(r, "child_ran", crew.exited_ok == 1 && b->ran,
             "the child %s (status %d)", crew.started ? "failed" : "was not started",
             crew.last_bad);
  if (!wrong)
    lab_expect(r, "segment_not_openable",
               b->stat_errno == 0 &&
                   (root ? b->uid == M6_NOBODY && b->owner == 0 && b->mode == 0600
                         : b->mode == 0),
               "uid %ld sees %s under its segment's name, owner %ld, mode %s", b->uid,
               b->stat_errno ? strerror(b->stat_errno) : "an object", b->owner, mode_s);
  lab_expect(r, "fallback_events",
             b->is_fallback && b->events == 1 && b->event_segment && b->total == 1.0 &&
                 b->mode_gauge == 1.0,
             "fallback mode %d, %d event(s), resil_shared_fallback_total %.0f, "
             "resil_shared_fallback_mode %.0f; not 1, 1, 1, 1",
             b->is_fallback, b->events, b->total, b->mode_gauge);
  lab_expect(r, "fallback_names_the_reason",
             strstr(b->event_msg, "cannot open segment ") && strstr(b->event_msg, eacces),
             "the event says '%s'", b->event_msg);
  lab_expect(r, "breaker_per_process",
             b->opened_after == M6_WINDOW && b->rejects &&
                 b->second_state == RESIL_BREAKER_CLOSED && b->events_after == 3 &&
                 b->total_after == 3.0,
             "its breaker opened after %d failures (rejects next: %d), a second handle is %s, "
             "%d events and resil_shared_fallback_total %.0f after both (not 4, 1, CLOSED, 3, 3)",
             b->opened_after, b->rejects,
             resil_breaker_state_name((resil_breaker_state_kind)b->second_state), b->events_after,
             b->total_after);
  lab_expect(r, "required_error",
             b->required_status == RESIL_ESTATE && strcmp(b->required_field, "segment") == 0 &&
                 strstr(b->required_msg, "cannot open segment ") &&
                 strstr(b->required_msg, eacces),
             "required: %s", required_s);
out:
  if (squat[0]) unlink(squat);
  if (own[0]) unlink(own);
  if (b) munmap(b, sizeof *b);
  lab_seg_done(&s);
  return r->pass;
}

static int m6_right(lab_result *r) { return m6_run(r, 0); }
static int m6_wrong(lab_result *r) { return m6_run(r, 1); }

const lab_experiment lab_shared_experiments[] = {
    {"M1",
     "8 processes share one breaker (count window 20, minimum 20, 50 %): the failing upstream "
     "sees at most 27 calls before every worker is rejected",
     m1_right, m1_wrong, "a breaker per process", "upstream_calls_before_open", 0},
    {"M2",
     "HALF_OPEN with 1 permitted call across 8 processes calling at once: exactly 1 probe per "
     "HALF_OPEN period",
     m2_right, m2_wrong, "a breaker per process", "one_probe_per_period", 0},
    {"M3",
     "a rate limiter of 100 per second (10 per 100 ms) shared by 8 processes flat out for 3 s: "
     "admitted within the exact bound and at least 95 % of it",
     m3_right, m3_wrong, "a limiter per process", "admitted_within_bound", 0},
#ifdef RESIL_HAVE_FIXTURE
    {"M5",
     "`resil call --state` from a shell loop: 25 invocations against a failing route open the "
     "breaker after the window's minimum (5), the rest exit 7 and the upstream stops seeing "
     "calls; after the wait one probe goes through",
     m5_right, m5_wrong, "the same loop without --state (a breaker per invocation)",
     "upstream_calls", 0},
#endif
    {"M6",
     "a segment the process cannot open (another user's, mode 0600): per-process state with "
     "one fallback event and resil_shared_fallback_total 1, a breaker on it works per process; "
     "required, the open fails naming the reason",
     m6_right, m6_wrong, "a segment the process can open", "fallback_events", 0},
    {NULL, NULL, NULL, NULL, NULL, NULL, 0}};
