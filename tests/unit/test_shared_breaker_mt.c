#define _GNU_SOURCE /* MAP_ANONYMOUS */
/* The circuit breaker with its state in a shared segment (DESIGN §8.1):
 * one window for every process (M1), global HALF_OPEN permits (M2),
 * generations honoured across processes, a lock holder killed inside a
 * change, SIGKILL chaos, config mismatch, fallback, and threads on one
 * shared handle. Real processes (fork); every child is killed or waited for
 * by the test that started it. */
#include <sched.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "test_util.h"

#include "breaker/breaker_int.h"
#include "resil/breaker.h"
#include "resil/shared.h"

#define SHARED_TEST_PREFIX "br"
#include "test_shared_common.h"

/* M1's breaker: count window 20, minimum 20, 50 %, OPEN for a minute. */
static void m1_config(resil_breaker_config *c, resil_shared *seg) {
  resil_breaker_config_init(c);
  c->name = "upstream";
  c->window_size = 20;
  c->minimum_calls = 20;
  c->failure_rate_threshold_pct = 50;
  c->open_wait_ns = RESIL_S(60);
  c->shared = seg;
}

static resil_breaker *breaker_of(const resil_breaker_config *c) {
  resil_breaker *br = NULL;
  resil_error err;
  if (resil_breaker_new(c, &br, &err) != RESIL_OK) fail_msg("%s", err.msg);
  return br;
}

static resil_outcome failure(void) {
  return resil_outcome_http(503);
}

static void wait_all(pid_t *pids, int n) {
  for (int i = 0; i < n; i++) {
    int status = 0;
    assert_int_equal(waitpid(pids[i], &status, 0), pids[i]);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
  }
}

static void check_ok(resil_breaker *br) {
  char why[256];
  if (resil__breaker_check(br, why, sizeof why) != 0) fail_msg("invariant: %s", why);
}

/* ---- M1: one window for every process ------------------------------------- */

#define WORKERS 8

typedef struct board {
  _Atomic int go;      /* start line */
  _Atomic long calls;  /* permitted calls (each an upstream call) */
  _Atomic long rejected;
  _Atomic long bad;
  _Atomic long probes[128]; /* M2: permits per generation (< 128: 400 ms / 15 ms periods) */
} board;

static board *board_new(void) {
  board *b = mmap(NULL, sizeof *b, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
                  -1, 0);
  assert_true(b != MAP_FAILED);
  memset(b, 0, sizeof *b);
  return b;
}

/* Calls through its own handle (seg NULL: per-process breaker) until
 * rejected; every call fails. */
static pid_t m1_worker(resil_shared *seg, board *b) {
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid != 0) return pid;
  resil_breaker_config c;
  m1_config(&c, seg);
  resil_breaker *br = NULL;
  if (resil_breaker_new(&c, &br, NULL) != RESIL_OK) _exit(1);
  while (!atomic_load(&b->go)) sched_yield();
  int64_t end = mono() + RESIL_S(10);
  for (;;) {
    resil_breaker_permit p;
    if (resil_breaker_try_acquire(br, &p) != RESIL_DECISION_GO) break;
    atomic_fetch_add(&b->calls, 1);
    resil_outcome o = failure();
    sched_yield(); /* the call: others run meanwhile */
    if (resil_breaker_record(br, &p, &o, 1000) != RESIL_OK) _exit(2);
    if (mono() > end) _exit(3);
  }
  atomic_fetch_add(&b->rejected, 1);
  _exit(resil_breaker_state(br) == RESIL_BREAKER_OPEN ? 0 : 4);
}

static long m1_run(resil_shared *seg) {
  board *b = board_new();
  pid_t w[WORKERS];
  for (int i = 0; i < WORKERS; i++) w[i] = m1_worker(seg, b);
  atomic_store(&b->go, 1);
  wait_all(w, WORKERS);
  assert_int_equal(atomic_load(&b->rejected), WORKERS);
  long calls = atomic_load(&b->calls);
  munmap(b, sizeof *b);
  return calls;
}

static void m1_eight_processes_open_one_breaker_after_at_most_27_calls(void **state) {
  (void)state;
  resil_shared_config sc;
  char name[64];
  seg_config(&sc, name, sizeof name, "m1");
  resil_shared *seg = seg_open(&sc);
  long shared_calls = m1_run(seg);
  long wrong = m1_run(NULL);
  print_message("workers %d, upstream_calls_before_open %ld, wrong_variant_calls %ld\n",
                WORKERS, shared_calls, wrong);
  assert_true(shared_calls >= 20);
  assert_true(shared_calls <= 20 + WORKERS - 1);
  assert_true(wrong >= 100); /* 8 x 20: each process opens its own */
  /* The parent's handle sees the state the workers left. */
  resil_breaker_config c;
  m1_config(&c, seg);
  resil_breaker *br = breaker_of(&c);
  assert_int_equal(resil_breaker_state(br), RESIL_BREAKER_OPEN);
  resil_breaker_metrics m;
  assert_status(RESIL_OK, resil_breaker_get_metrics(br, &m));
  assert_int_equal(m.total_transitions, 1);
  assert_int_equal(m.total_failures, 20);
  assert_true(m.total_not_permitted >= WORKERS);
  check_ok(br);
  resil_breaker_free(br);
  seg_done(seg, &sc);
}

/* ---- M2: one probe per HALF_OPEN period across processes -------------------- */

static void m2_config(resil_breaker_config *c, resil_shared *seg) {
  resil_breaker_config_init(c);
  c->name = "probe";
  c->window_size = 4;
  c->minimum_calls = 4;
  c->open_wait_ns = RESIL_MS(15);
  c->half_open_permitted_calls = 1;
  c->half_open_max_wait_ns = 0;
  c->shared = seg;
}

static pid_t m2_worker(resil_shared *seg, board *b, int64_t end) {
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid != 0) return pid;
  resil_breaker_config c;
  m2_config(&c, seg);
  resil_breaker *br = NULL;
  if (resil_breaker_new(&c, &br, NULL) != RESIL_OK) _exit(1);
  while (!atomic_load(&b->go)) sched_yield();
  while (mono() < end) {
    resil_breaker_permit p;
    if (resil_breaker_try_acquire(br, &p) != RESIL_DECISION_GO) {
      atomic_fetch_add(&b->rejected, 1);
      sched_yield();
      continue;
    }
    if (p.state != RESIL_BREAKER_HALF_OPEN) atomic_fetch_add(&b->bad, 1);
    atomic_fetch_add(&b->probes[p.generation % 128], 1);
    atomic_fetch_add(&b->calls, 1);
    resil_outcome o = failure(); /* the probe fails: OPEN again */
    if (resil_breaker_record(br, &p, &o, 1000) != RESIL_OK) _exit(2);
  }
  _exit(0);
}

static void m2_half_open_lets_one_probe_in_across_eight_processes(void **state) {
  (void)state;
  resil_shared_config sc;
  char name[64];
  seg_config(&sc, name, sizeof name, "m2");
  resil_shared *seg = seg_open(&sc);
  resil_breaker_config c;
  m2_config(&c, seg);
  resil_breaker *br = breaker_of(&c);
  assert_status(RESIL_OK, resil_breaker_transition(br, RESIL_BREAKER_OPEN));
  board *b = board_new();
  int64_t end = mono() + RESIL_MS(400);
  pid_t w[WORKERS];
  for (int i = 0; i < WORKERS; i++) w[i] = m2_worker(seg, b, end);
  atomic_store(&b->go, 1);
  wait_all(w, WORKERS);
  long periods = 0, over = 0;
  for (int g = 0; g < 128; g++) {
    long n = atomic_load(&b->probes[g]);
    periods += n > 0;
    over += n > 1;
  }
  print_message("HALF_OPEN periods %ld, probes %ld, rejected %ld, periods with >1 probe %ld\n",
                periods, atomic_load(&b->calls), atomic_load(&b->rejected), over);
  assert_int_equal(over, 0);
  assert_int_equal(atomic_load(&b->bad), 0);
  assert_true(periods >= 3);
  assert_int_equal(atomic_load(&b->calls), periods); /* probes_seen 1 per period */
  assert_true(atomic_load(&b->rejected) >= 7);
  check_ok(br);
  munmap(b, sizeof *b);
  resil_breaker_free(br);
  seg_done(seg, &sc);
}

/* ---- generations across processes ------------------------------------------- */

static void a_permit_from_an_older_generation_is_ignored_in_another_process(void **state) {
  (void)state;
  resil_shared_config sc;
  char name[64];
  seg_config(&sc, name, sizeof name, "gen");
  resil_shared *seg = seg_open(&sc);
  resil_breaker_config c;
  m1_config(&c, seg);
  c.minimum_calls = 1;
  resil_breaker *br = breaker_of(&c);
  int up[2], down[2];
  assert_int_equal(pipe(up), 0);
  assert_int_equal(pipe(down), 0);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    /* B: a permit of generation 1, recorded after A reset the breaker. */
    resil_breaker *mine = NULL;
    if (resil_breaker_new(&c, &mine, NULL) != RESIL_OK) _exit(1);
    resil_breaker_permit p;
    if (resil_breaker_try_acquire(mine, &p) != RESIL_DECISION_GO) _exit(2);
    char ch = 'a';
    if (write(up[1], &ch, 1) != 1 || read(down[0], &ch, 1) != 1) _exit(3);
    resil_outcome o = failure();
    if (resil_breaker_record(mine, &p, &o, 1000) != RESIL_OK) _exit(4);
    /* A permit of the current generation counts (and opens: minimum 1). */
    if (resil_breaker_try_acquire(mine, &p) != RESIL_DECISION_GO) _exit(5);
    if (p.generation != 2) _exit(6);
    if (write(up[1], &ch, 1) != 1 || read(down[0], &ch, 1) != 1) _exit(7);
    if (resil_breaker_record(mine, &p, &o, 1000) != RESIL_OK) _exit(8);
    resil_breaker_free(mine);
    _exit(0);
  }
  char ch;
  assert_int_equal(read(up[0], &ch, 1), 1);
  assert_status(RESIL_OK, resil_breaker_reset(br)); /* generation 2 */
  assert_int_equal(write(down[1], "g", 1), 1);
  assert_int_equal(read(up[0], &ch, 1), 1);
  resil_breaker_metrics m;
  assert_status(RESIL_OK, resil_breaker_get_metrics(br, &m));
  assert_int_equal(m.generation, 2);
  assert_int_equal(m.total_calls, 0);
  assert_int_equal(m.buffered_calls, 0);
  assert_int_equal(m.state, RESIL_BREAKER_CLOSED);
  assert_int_equal(write(down[1], "g", 1), 1);
  wait_all(&pid, 1);
  assert_status(RESIL_OK, resil_breaker_get_metrics(br, &m));
  assert_int_equal(m.total_calls, 1);
  assert_int_equal(m.total_failures, 1);
  assert_int_equal(m.state, RESIL_BREAKER_OPEN);
  assert_int_equal(m.generation, 3);
  /* The transition was B's: this process's ring has only its own reset. */
  resil_breaker_event ev[4];
  size_t n = resil_breaker_events(br, ev, 4);
  assert_int_equal(n, 1);
  assert_int_equal(ev[0].kind, RESIL_BREAKER_EVENT_RESET);
  check_ok(br);
  close(up[0]);
  close(up[1]);
  close(down[0]);
  close(down[1]);
  resil_breaker_free(br);
  seg_done(seg, &sc);
}

/* ---- the run form and listeners ---------------------------------------------- */

static resil_outcome fail_fn(void *arg, const resil_ctx *ctx) {
  (void)arg;
  (void)ctx;
  return resil_outcome_http(503);
}

static void count_events(void *user, resil_breaker *br, const resil_breaker_event *e) {
  (void)br;
  if (e->kind == RESIL_BREAKER_EVENT_TRANSITION) (*(int *)user)++;
}

static void the_run_form_works_and_a_transition_is_told_by_its_maker_only(void **state) {
  (void)state;
  resil_shared_config sc;
  char name[64];
  seg_config(&sc, name, sizeof name, "run");
  resil_shared *seg = seg_open(&sc);
  resil_breaker_config c;
  m1_config(&c, seg);
  c.window_size = 4;
  c.minimum_calls = 4;
  resil_breaker *br = breaker_of(&c);
  int seen = 0;
  assert_status(RESIL_OK, resil_breaker_listener_add(br, count_events, &seen));
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    resil_breaker *mine = NULL;
    if (resil_breaker_new(&c, &mine, NULL) != RESIL_OK) _exit(1);
    int told = 0;
    if (resil_breaker_listener_add(mine, count_events, &told) != RESIL_OK) _exit(2);
    for (int i = 0; i < 4; i++) (void)resil_breaker_run(mine, NULL, fail_fn, NULL);
    /* This process opened it: its listener was told. */
    _exit(told == 1 && resil_breaker_state(mine) == RESIL_BREAKER_OPEN ? 0 : 3);
  }
  wait_all(&pid, 1);
  assert_int_equal(resil_breaker_state(br), RESIL_BREAKER_OPEN);
  assert_int_equal(seen, 0); /* another process's transition: no event here */
  resil_outcome o = resil_breaker_run(br, NULL, fail_fn, NULL);
  assert_int_equal(o.kind, RESIL_REJECTED);
  assert_int_equal(o.reason, RESIL_REASON_BREAKER_OPEN);
  assert_status(RESIL_OK, resil_breaker_transition(br, RESIL_BREAKER_CLOSED));
  assert_int_equal(seen, 1);
  resil_breaker_metrics m;
  assert_status(RESIL_OK, resil_breaker_get_metrics(br, &m));
  assert_int_equal(m.total_failures, 4);
  assert_int_equal(m.total_not_permitted, 1);
  assert_int_equal(m.total_transitions, 2);
  check_ok(br);
  resil_breaker_free(br);
  seg_done(seg, &sc);
}

/* ---- a lock holder killed inside a change ---------------------------------- */

static void a_lock_holder_that_dies_mid_change_is_taken_over_and_repaired(void **state) {
  (void)state;
  resil_shared_config sc;
  char name[64];
  seg_config(&sc, name, sizeof name, "die");
  resil_shared *seg = seg_open(&sc);
  resil_breaker_config c;
  m1_config(&c, seg);
  resil_breaker *br = breaker_of(&c);
  resil_outcome f = failure();
  for (int i = 0; i < 5; i++) {
    resil_breaker_permit p;
    assert_int_equal(resil_breaker_try_acquire(br, &p), RESIL_DECISION_GO);
    assert_status(RESIL_OK, resil_breaker_record(br, &p, &f, 1000));
  }
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    resil__breaker_test_die_locked(br);
    _exit(0);
  }
  wait_all(&pid, 1);
  /* The lock is held by a dead process: a record must take it over. */
  int64_t t0 = mono();
  resil_breaker_permit p;
  assert_int_equal(resil_breaker_try_acquire(br, &p), RESIL_DECISION_GO);
  assert_status(RESIL_OK, resil_breaker_record(br, &p, &f, 1000));
  int64_t took = mono() - t0;
  print_message("lock taken over from a dead holder in %.2f ms\n", (double)took / 1e6);
  assert_true(took < RESIL_MS(100));
  check_ok(br);
  resil_breaker_metrics m;
  assert_status(RESIL_OK, resil_breaker_get_metrics(br, &m));
  assert_int_equal(m.failed_calls, 6); /* recomputed from the window's slots */
  assert_int_equal(m.state, RESIL_BREAKER_CLOSED);
  resil_breaker_free(br);
  seg_done(seg, &sc);
}

/* ---- SIGKILL chaos ----------------------------------------------------------- */

#define CHAOS_WORKERS 6
#define CHAOS_NS (2000 * 1000000LL)

static void chaos_config(resil_breaker_config *c, resil_shared *seg) {
  resil_breaker_config_init(c);
  c->name = "chaos";
  c->window_size = 20;
  c->minimum_calls = 10;
  c->failure_rate_threshold_pct = 50;
  c->open_wait_ns = RESIL_MS(1);
  c->half_open_permitted_calls = 3;
  c->half_open_max_wait_ns = RESIL_MS(5); /* a killed probe's period ends */
  c->shared = seg;
}

static pid_t chaos_spawn(resil_shared *seg, board *b, unsigned seed) {
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid != 0) return pid;
  resil_breaker_config c;
  chaos_config(&c, seg);
  resil_breaker *br = NULL;
  if (resil_breaker_new(&c, &br, NULL) != RESIL_OK) _exit(1);
  resil_outcome ok = resil_outcome_make(RESIL_ANSWERED, RESIL_REASON_OK);
  resil_outcome f = failure();
  for (;;) {
    resil_breaker_permit p;
    if (resil_breaker_try_acquire(br, &p) != RESIL_DECISION_GO) {
      atomic_fetch_add(&b->rejected, 1);
      sched_yield();
      continue;
    }
    atomic_fetch_add(&b->calls, 1);
    resil_breaker_record(br, &p, rand_r(&seed) % 2 ? &f : &ok, 1000);
  }
}

static void sigkill_chaos_leaves_the_state_consistent_and_nobody_wedged(void **state) {
  (void)state;
  resil_shared_config sc;
  char name[64];
  seg_config(&sc, name, sizeof name, "chaos");
  resil_shared *seg = seg_open(&sc);
  resil_breaker_config c;
  chaos_config(&c, seg);
  resil_breaker *br = breaker_of(&c);
  board *b = board_new();
  unsigned seed = (unsigned)getpid();
  pid_t w[CHAOS_WORKERS];
  for (int i = 0; i < CHAOS_WORKERS; i++) w[i] = chaos_spawn(seg, b, seed + (unsigned)i);
  int64_t end = mono() + CHAOS_NS;
  long kills = 0;
  while (mono() < end) {
    struct timespec ts = {0, (long)(rand_r(&seed) % 1000000)};
    nanosleep(&ts, NULL);
    int k = rand_r(&seed) % CHAOS_WORKERS;
    assert_int_equal(kill(w[k], SIGKILL), 0);
    assert_int_equal(waitpid(w[k], NULL, 0), w[k]);
    kills++;
    w[k] = chaos_spawn(seg, b, (unsigned)rand_r(&seed));
  }
  for (int i = 0; i < CHAOS_WORKERS; i++) {
    assert_int_equal(kill(w[i], SIGKILL), 0);
    assert_int_equal(waitpid(w[i], NULL, 0), w[i]);
  }
  /* A fresh process: the lock may still name a dead holder; it must get
   * a decision (and a state read, which takes the lock) quickly. */
  int64_t *fresh_ns = mmap(NULL, sizeof *fresh_ns, PROT_READ | PROT_WRITE,
                           MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  assert_true(fresh_ns != MAP_FAILED);
  pid_t f = fork();
  assert_true(f >= 0);
  if (f == 0) {
    resil_shared *s2 = NULL;
    if (resil_shared_open(&sc, &s2, NULL) != RESIL_OK) _exit(1);
    resil_breaker_config c2;
    chaos_config(&c2, s2);
    resil_breaker *mine = NULL;
    if (resil_breaker_new(&c2, &mine, NULL) != RESIL_OK) _exit(2);
    int64_t t0 = mono();
    (void)resil_breaker_state(mine);
    resil_breaker_permit p;
    if (resil_breaker_try_acquire(mine, &p) == RESIL_DECISION_GO)
      resil_breaker_release(mine, &p);
    *fresh_ns = mono() - t0;
    char why[256];
    if (resil__breaker_check(mine, why, sizeof why) != 0) _exit(3);
    _exit(0);
  }
  wait_all(&f, 1);
  resil_breaker_metrics m;
  assert_status(RESIL_OK, resil_breaker_get_metrics(br, &m));
  print_message("kills %ld, calls %ld, rejected %ld, transitions %llu, fresh process "
                "decided in %.3f ms\n",
                kills, atomic_load(&b->calls), atomic_load(&b->rejected),
                (unsigned long long)m.total_transitions, (double)*fresh_ns / 1e6);
  assert_true(kills >= 100);
  assert_true(atomic_load(&b->calls) > 0);
  assert_true(m.total_transitions > 0);
  assert_true(*fresh_ns < RESIL_MS(10));
  check_ok(br);
  assert_true(m.half_open_permits_available <= 3);
  munmap(fresh_ns, sizeof *fresh_ns);
  munmap(b, sizeof *b);
  resil_breaker_free(br);
  seg_done(seg, &sc);
}

/* ---- resil_shared_reset while processes record ------------------------------ */

static void a_reset_while_processes_record_keeps_the_window_consistent(void **state) {
  (void)state;
  resil_shared_config sc;
  char name[64];
  seg_config(&sc, name, sizeof name, "reset");
  resil_shared *seg = seg_open(&sc);
  resil_breaker_config c;
  chaos_config(&c, seg); /* the workers' (chaos_spawn) */
  resil_breaker *br = breaker_of(&c);
  board *b = board_new();
  pid_t w[2];
  for (int i = 0; i < 2; i++) w[i] = chaos_spawn(seg, b, (unsigned)i + 7u);
  /* The workers attach (under the table's mutex) and record first. */
  while (atomic_load(&b->calls) < 1000) sched_yield();
  int64_t end = mono() + RESIL_MS(500);
  long resets = 0;
  while (mono() < end) {
    struct timespec ts = {0, 20000};
    nanosleep(&ts, NULL);
    assert_status(RESIL_OK, resil_shared_reset(seg, "chaos", NULL));
    resets++;
    char why[256];
    if (resil__breaker_check(br, why, sizeof why) != 0) {
      for (int i = 0; i < 2; i++) kill(w[i], SIGKILL);
      fail_msg("after %ld resets: %s", resets, why);
    }
  }
  for (int i = 0; i < 2; i++) {
    assert_int_equal(kill(w[i], SIGKILL), 0);
    assert_int_equal(waitpid(w[i], NULL, 0), w[i]);
  }
  print_message("resets %ld, calls %ld\n", resets, atomic_load(&b->calls));
  check_ok(br);
  /* A lock left by a dead holder does not stop a reset. */
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    resil__breaker_test_die_locked(br);
    _exit(0);
  }
  wait_all(&pid, 1);
  int64_t t0 = mono();
  assert_status(RESIL_OK, resil_shared_reset(seg, "chaos", NULL));
  int64_t took = mono() - t0;
  print_message("reset past a dead holder in %.2f ms\n", (double)took / 1e6);
  assert_true(took < RESIL_MS(100));
  check_ok(br);
  munmap(b, sizeof *b);
  resil_breaker_free(br);
  seg_done(seg, &sc);
}

/* ---- configuration ------------------------------------------------------------ */

static int64_t fake_now(void *self) {
  (void)self;
  return 0;
}

static void another_config_names_the_field_and_bad_shared_configs_are_refused(void **state) {
  (void)state;
  resil_shared_config sc;
  char name[64];
  seg_config(&sc, name, sizeof name, "cfg");
  resil_shared *seg = seg_open(&sc);
  resil_breaker_config c;
  m1_config(&c, seg);
  resil_breaker *br = breaker_of(&c);
  resil_breaker *other = NULL;
  resil_error err;
  c.window_size = 30;
  assert_int_equal(resil_breaker_new(&c, &other, &err), RESIL_EINVAL);
  assert_string_equal(err.field, "window_size");
  assert_non_null(strstr(err.msg, "breaker 'upstream' exists"));
  assert_non_null(strstr(err.msg, "window_size 20; this config has 30"));
  m1_config(&c, seg);
  c.open_wait_multiplier = 2.0;
  assert_int_equal(resil_breaker_new(&c, &other, &err), RESIL_EINVAL);
  assert_string_equal(err.field, "open_wait_multiplier");
  m1_config(&c, seg);
  c.failure_classes = RESIL_CLASS_BIT(RESIL_CLASS_SERVER_ERROR);
  assert_int_equal(resil_breaker_new(&c, &other, &err), RESIL_EINVAL);
  assert_string_equal(err.field, "failure_classes");
  /* Per-process fields may differ. */
  m1_config(&c, seg);
  c.event_capacity = 2;
  other = breaker_of(&c);
  resil_breaker_free(other);
  /* A custom clock is refused. */
  resil_clock clk = {0};
  clk.now_ns = fake_now;
  m1_config(&c, seg);
  c.clock = &clk;
  assert_int_equal(resil_breaker_new(&c, &other, &err), RESIL_EINVAL);
  assert_string_equal(err.field, "clock");
  /* A window larger than a slot, naming the field and the maximum. */
  m1_config(&c, seg);
  c.name = "big";
  c.window_size = 20000;
  c.minimum_calls = 10;
  assert_int_equal(resil_breaker_new(&c, &other, &err), RESIL_EINVAL);
  assert_string_equal(err.field, "window_size");
  assert_non_null(strstr(err.msg, "at most 13632"));
  c.window_size = 13632;
  other = breaker_of(&c);
  resil_breaker_free(other);
  c.name = "bigtime";
  c.window_type = RESIL_BREAKER_WINDOW_TIME;
  c.window_size = 400;
  assert_int_equal(resil_breaker_new(&c, &other, &err), RESIL_EINVAL);
  assert_string_equal(err.field, "window_size");
  assert_non_null(strstr(err.msg, "time window holds at most 212 seconds"));
  c.window_size = 212;
  other = breaker_of(&c);
  check_ok(other);
  resil_breaker_free(other);
  resil_breaker_free(br);
  seg_done(seg, &sc);
}

static void an_unusable_segment_gives_a_per_process_breaker_unless_required(void **state) {
  (void)state;
  resil_shared_config sc;
  resil_shared_config_init(&sc);
  char name[64];
  snprintf(name, sizeof name, "brfb%ld", (long)getpid());
  sc.name = name;
  sc.dir = "/nonexistent-resil-dir";
  resil_shared *seg = NULL;
  assert_status(RESIL_OK, resil_shared_open(&sc, &seg, NULL));
  assert_true(resil_shared_is_fallback(seg));
  resil_breaker_config c;
  m1_config(&c, seg);
  c.minimum_calls = 1;
  resil_breaker *br = breaker_of(&c);
  assert_int_equal(resil_shared_fallbacks(seg), 2);
  /* Works as a plain breaker. */
  resil_breaker_permit p;
  resil_outcome f = failure();
  assert_int_equal(resil_breaker_try_acquire(br, &p), RESIL_DECISION_GO);
  assert_status(RESIL_OK, resil_breaker_record(br, &p, &f, 1000));
  assert_int_equal(resil_breaker_state(br), RESIL_BREAKER_OPEN);
  check_ok(br);
  resil_breaker_free(br);
  resil_shared_close(seg);

  /* A full segment, required: the creation fails with the reason. */
  char name2[64];
  seg_config(&sc, name2, sizeof name2, "full");
  sc.capacity = 1;
  seg = seg_open(&sc);
  m1_config(&c, seg);
  br = breaker_of(&c);
  c.name = "second";
  resil_breaker *other = NULL;
  resil_error err;
  assert_int_equal(resil_breaker_new(&c, &other, &err), RESIL_ESTATE);
  assert_non_null(strstr(err.msg, "is full (capacity 1)"));
  resil_breaker_free(br);
  seg_done(seg, &sc);
}

/* ---- threads on one shared handle (ThreadSanitizer) ------------------------ */

#define THREADS 4
#define PER_THREAD 20000

static void *hammer(void *arg) {
  resil_breaker *br = arg;
  resil_outcome ok = resil_outcome_make(RESIL_ANSWERED, RESIL_REASON_OK);
  for (int i = 0; i < PER_THREAD; i++) {
    resil_breaker_permit p;
    if (resil_breaker_try_acquire(br, &p) == RESIL_DECISION_GO)
      resil_breaker_record(br, &p, &ok, 1000);
  }
  return NULL;
}

static void threads_and_a_process_share_one_window(void **state) {
  (void)state;
  resil_shared_config sc;
  char name[64];
  seg_config(&sc, name, sizeof name, "thr");
  resil_shared *seg = seg_open(&sc);
  resil_breaker_config c;
  m1_config(&c, seg);
  resil_breaker *br = breaker_of(&c);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    resil_breaker *mine = NULL;
    if (resil_breaker_new(&c, &mine, NULL) != RESIL_OK) _exit(1);
    hammer(mine);
    _exit(0);
  }
  pthread_t t[THREADS];
  for (int i = 0; i < THREADS; i++)
    assert_int_equal(pthread_create(&t[i], NULL, hammer, br), 0);
  for (int i = 0; i < THREADS; i++) assert_int_equal(pthread_join(t[i], NULL), 0);
  wait_all(&pid, 1);
  resil_breaker_metrics m;
  assert_status(RESIL_OK, resil_breaker_get_metrics(br, &m));
  assert_int_equal(m.total_calls, (THREADS + 1) * PER_THREAD);
  assert_int_equal(m.buffered_calls, 20);
  assert_int_equal(m.state, RESIL_BREAKER_CLOSED);
  check_ok(br);
  resil_breaker_free(br);
  seg_done(seg, &sc);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(m1_eight_processes_open_one_breaker_after_at_most_27_calls),
      cmocka_unit_test(m2_half_open_lets_one_probe_in_across_eight_processes),
      cmocka_unit_test(a_permit_from_an_older_generation_is_ignored_in_another_process),
      cmocka_unit_test(the_run_form_works_and_a_transition_is_told_by_its_maker_only),
      cmocka_unit_test(a_lock_holder_that_dies_mid_change_is_taken_over_and_repaired),
      cmocka_unit_test(sigkill_chaos_leaves_the_state_consistent_and_nobody_wedged),
      cmocka_unit_test(a_reset_while_processes_record_keeps_the_window_consistent),
      cmocka_unit_test(another_config_names_the_field_and_bad_shared_configs_are_refused),
      cmocka_unit_test(an_unusable_segment_gives_a_per_process_breaker_unless_required),
      cmocka_unit_test(threads_and_a_process_share_one_window),
  };
  return cmocka_run_group_tests(tests, NULL, seg_unlink_all);
}
