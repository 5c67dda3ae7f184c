#define _GNU_SOURCE /* MAP_ANONYMOUS */
/* The semaphore bulkhead with its permits in a shared segment (DESIGN
 * §8.1): the bound across processes, permits of killed processes back
 * within 1 s, waiting across processes (blocked and enqueued), and SIGKILL
 * chaos. Real processes (fork); every child is killed or waited for by the
 * test that started it. The tests that start threads (the enqueue helper)
 * run after every fork. */
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

#include "resil/bulkhead.h"
#include "resil/ratelimit.h"
#include "resil/shared.h"
#include "shared/shared_int.h"

#define SHARED_TEST_PREFIX "bh"
#include "test_shared_common.h"

static resil_bulkhead *bulkhead(resil_shared *seg, uint32_t max, int64_t max_wait_ns) {
  resil_bulkhead_config c;
  resil_bulkhead_config_init(&c);
  c.name = "db";
  c.max_concurrent = max;
  c.max_wait_ns = max_wait_ns;
  c.shared = seg;
  resil_bulkhead *bh = NULL;
  resil_error err;
  if (resil_bulkhead_new(&c, &bh, &err) != RESIL_OK) fail_msg("%s", err.msg);
  return bh;
}

/* A child that takes a permit, says so on `up`, and then either waits for
 * a byte on `down` and releases (down >= 0) or sleeps until killed. */
static pid_t holder(resil_bulkhead *bh, int up, int down) {
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid != 0) return pid;
  char c = resil_bulkhead_try_acquire(bh, NULL) == RESIL_DECISION_GO ? 'y' : 'n';
  if (write(up, &c, 1) != 1) _exit(8);
  if (c != 'y') _exit(1);
  if (down < 0)
    for (;;) pause();
  if (read(down, &c, 1) != 1) _exit(9);
  _exit(resil_bulkhead_release(bh) == RESIL_OK ? 0 : 2);
}

static char rd(int fd) {
  char c = 0;
  assert_int_equal(read(fd, &c, 1), 1);
  return c;
}

static void wait_exit0(pid_t pid) {
  int status = 0;
  assert_int_equal(waitpid(pid, &status, 0), pid);
  assert_true(WIFEXITED(status));
  assert_int_equal(WEXITSTATUS(status), 0);
}

typedef struct run_seen {
  resil_bulkhead *bh;
  uint32_t available_inside;
} run_seen;

static resil_outcome run_fn(void *arg, const resil_ctx *ctx) {
  (void)ctx;
  run_seen *s = arg;
  s->available_inside = resil_bulkhead_available(s->bh);
  return resil_outcome_make(RESIL_ANSWERED, RESIL_REASON_OK);
}

static void at_most_max_concurrent_across_processes(void **state) {
  (void)state;
  resil_shared_config sc;
  char name[64];
  seg_config(&sc, name, sizeof name, "max");
  resil_shared *seg = seg_open(&sc);
  resil_bulkhead *bh = bulkhead(seg, 2, 0);
  int up[2], down[2];
  assert_int_equal(pipe(up), 0);
  assert_int_equal(pipe(down), 0);
  resil_reason why;
  assert_int_equal(resil_bulkhead_try_acquire(bh, &why), RESIL_DECISION_GO);
  pid_t a = holder(bh, up[1], down[0]);
  assert_int_equal(rd(up[0]), 'y');
  assert_int_equal(resil_bulkhead_available(bh), 0);
  assert_int_equal(resil_bulkhead_try_acquire(bh, &why), RESIL_DECISION_DENY);
  assert_int_equal(why, RESIL_REASON_BULKHEAD_FULL);
  /* A third process finds it full too. */
  pid_t b = holder(bh, up[1], down[0]);
  assert_int_equal(rd(up[0]), 'n');
  int status;
  assert_int_equal(waitpid(b, &status, 0), b);
  assert_int_equal(WEXITSTATUS(status), 1);
  /* A handle of its own in the same process sees the same permits. */
  resil_bulkhead *bh2 = bulkhead(seg, 2, 0);
  assert_int_equal(resil_bulkhead_try_acquire(bh2, &why), RESIL_DECISION_DENY);
  resil_bulkhead_metrics m;
  assert_status(RESIL_OK, resil_bulkhead_get_metrics(bh2, &m));
  assert_int_equal(m.in_flight, 2);
  assert_int_equal(m.available, 0);
  assert_int_equal(m.rejected, 1);
  /* The child releases: one permit for anybody. */
  assert_int_equal(write(down[1], "r", 1), 1);
  wait_exit0(a);
  assert_int_equal(resil_bulkhead_available(bh), 1);
  assert_int_equal(resil_bulkhead_try_acquire(bh2, &why), RESIL_DECISION_GO);
  assert_int_equal(resil_bulkhead_release(bh2), RESIL_OK);
  /* The run form takes and gives back a shared permit. */
  run_seen seen = {bh2, 99};
  resil_outcome o = resil_bulkhead_run(bh2, NULL, run_fn, &seen);
  assert_int_equal(o.kind, RESIL_ANSWERED);
  assert_int_equal(seen.available_inside, 0);
  assert_int_equal(resil_bulkhead_available(bh), 1);
  assert_int_equal(resil_bulkhead_release(bh), RESIL_OK);
  /* A process releases only what it holds. */
  assert_int_equal(resil_bulkhead_release(bh), RESIL_EMISUSE);
  assert_int_equal(resil_bulkhead_available(bh), 2);

  /* Another max_concurrent is refused, naming it; so is one too large. */
  resil_bulkhead_config c;
  resil_bulkhead_config_init(&c);
  c.name = "db";
  c.max_concurrent = 3;
  c.shared = seg;
  resil_bulkhead *bad = NULL;
  resil_error err;
  assert_status(RESIL_EINVAL, resil_bulkhead_new(&c, &bad, &err));
  assert_string_equal(err.field, "max_concurrent");
  assert_non_null(strstr(err.msg, "bulkhead 'db' exists in segment"));
  c.name = "big";
  c.max_concurrent = RESIL_BULKHEAD_SHARED_MAX_CONCURRENT + 1;
  assert_status(RESIL_EINVAL, resil_bulkhead_new(&c, &bad, &err));
  assert_string_equal(err.field, "max_concurrent");
  resil_bulkhead_free(bh2);
  resil_bulkhead_free(bh);
  resil_shared_close(seg);
  close(up[0]);
  close(up[1]);
  close(down[0]);
  close(down[1]);
  assert_status(RESIL_OK, resil_shared_unlink(&sc, NULL));
}

static void a_killed_holders_permit_comes_back_within_a_second(void **state) {
  (void)state;
  resil_shared_config sc;
  char name[64];
  seg_config(&sc, name, sizeof name, "kill");
  resil_shared *seg = seg_open(&sc);
  resil_bulkhead *bh = bulkhead(seg, 2, RESIL_S(1));
  int up[2];
  assert_int_equal(pipe(up), 0);
  for (int reap_first = 1; reap_first >= 0; reap_first--) {
    pid_t a = holder(bh, up[1], -1);
    pid_t b = holder(bh, up[1], -1);
    assert_int_equal(rd(up[0]), 'y');
    assert_int_equal(rd(up[0]), 'y');
    assert_int_equal(resil_bulkhead_try_acquire(bh, NULL), RESIL_DECISION_DENY);
    int64_t t0 = mono();
    assert_int_equal(kill(a, SIGKILL), 0);
    if (reap_first) assert_int_equal(waitpid(a, NULL, 0), a);
    /* Not reaped: a zombie, which /proc tells apart from a live owner. */
    resil_reason why;
    assert_int_equal(resil_bulkhead_acquire(bh, NULL, &why), RESIL_DECISION_GO);
    int64_t ms = (mono() - t0) / 1000000;
    print_message("%s: permit back after %lld ms\n", reap_first ? "reaped" : "zombie",
                  (long long)ms);
    assert_true(ms < 1000);
    /* The live holder's permit is not taken. */
    assert_int_equal(resil_bulkhead_try_acquire(bh, NULL), RESIL_DECISION_DENY);
    assert_int_equal(resil_bulkhead_release(bh), RESIL_OK);
    if (!reap_first) assert_int_equal(waitpid(a, NULL, 0), a);
    assert_int_equal(kill(b, SIGKILL), 0);
    assert_int_equal(waitpid(b, NULL, 0), b);
    assert_int_equal(resil_bulkhead_acquire(bh, NULL, &why), RESIL_DECISION_GO);
    assert_int_equal(resil_bulkhead_acquire(bh, NULL, &why), RESIL_DECISION_GO);
    assert_int_equal(resil_bulkhead_release(bh), RESIL_OK);
    assert_int_equal(resil_bulkhead_release(bh), RESIL_OK);
  }
  close(up[0]);
  close(up[1]);
  resil_bulkhead_free(bh);
  seg_done(seg, &sc);
}

static void a_blocked_acquire_wakes_on_another_processs_release(void **state) {
  (void)state;
  resil_shared_config sc;
  char name[64];
  seg_config(&sc, name, sizeof name, "wake");
  resil_shared *seg = seg_open(&sc);
  resil_bulkhead *bh = bulkhead(seg, 1, RESIL_S(5));
  int up[2], down[2];
  assert_int_equal(pipe(up), 0);
  assert_int_equal(pipe(down), 0);
  pid_t a = holder(bh, up[1], down[0]);
  assert_int_equal(rd(up[0]), 'y');
  /* The child releases in 100 ms (it sleeps after its read). */
  pid_t timer = fork();
  assert_true(timer >= 0);
  if (timer == 0) {
    struct timespec ts = {0, 100000000};
    nanosleep(&ts, NULL);
    _exit(write(down[1], "r", 1) == 1 ? 0 : 1);
  }
  int64_t t0 = mono();
  resil_reason why;
  assert_int_equal(resil_bulkhead_acquire(bh, NULL, &why), RESIL_DECISION_GO);
  int64_t ms = (mono() - t0) / 1000000;
  print_message("woken after %lld ms\n", (long long)ms);
  assert_true(ms >= 80 && ms < 1000);
  wait_exit0(timer);
  wait_exit0(a);
  /* A wait that runs out: full, within its max wait. */
  resil_bulkhead_config c;
  resil_bulkhead_config_init(&c);
  c.name = "db";
  c.max_concurrent = 1;
  c.max_wait_ns = RESIL_MS(30);
  c.shared = seg;
  resil_bulkhead *short_wait = NULL;
  assert_status(RESIL_OK, resil_bulkhead_new(&c, &short_wait, NULL));
  t0 = mono();
  assert_int_equal(resil_bulkhead_acquire(short_wait, NULL, &why), RESIL_DECISION_DENY);
  assert_int_equal(why, RESIL_REASON_BULKHEAD_FULL);
  ms = (mono() - t0) / 1000000;
  assert_true(ms >= 29 && ms < 500);
  assert_int_equal(resil_bulkhead_release(bh), RESIL_OK);
  resil_bulkhead_free(short_wait);
  resil_bulkhead_free(bh);
  resil_shared_close(seg);
  close(up[0]);
  close(up[1]);
  close(down[0]);
  close(down[1]);
  assert_status(RESIL_OK, resil_shared_unlink(&sc, NULL));
}

/* White-box: permit words (from word 8 of the slot) naming a live process
 * with another start time (its pid was reused) are reclaimed; the live
 * process's own word is not. */
static void a_permit_of_a_reused_pid_is_reclaimed_a_live_owners_kept(void **state) {
  (void)state;
  resil_shared_config sc;
  char name[64];
  seg_config(&sc, name, sizeof name, "reuse");
  resil_shared *seg = seg_open(&sc);
  resil_bulkhead *bh = bulkhead(seg, 2, RESIL_MS(500));
  uint64_t *w = NULL;
  assert_status(RESIL_OK, resil__shared_find(seg, RESIL__SHK_BULKHEAD, "db", &w, NULL));
  int up[2], down[2];
  assert_int_equal(pipe(up), 0);
  assert_int_equal(pipe(down), 0);
  pid_t a = holder(bh, up[1], down[0]); /* a live owner of one permit */
  assert_int_equal(rd(up[0]), 'y');
  uint64_t live = __atomic_load_n(&w[8], __ATOMIC_ACQUIRE);
  assert_int_equal(live >> 32, (uint64_t)a);
  /* The other permit: a's pid with another start time. */
  __atomic_store_n(&w[9], live ^ 1, __ATOMIC_RELEASE);
  resil_reason why;
  assert_int_equal(resil_bulkhead_acquire(bh, NULL, &why), RESIL_DECISION_GO);
  assert_int_equal(__atomic_load_n(&w[8], __ATOMIC_ACQUIRE), live);
  assert_int_equal(resil_bulkhead_try_acquire(bh, NULL), RESIL_DECISION_DENY);
  assert_int_equal(resil_bulkhead_release(bh), RESIL_OK);
  assert_int_equal(write(down[1], "r", 1), 1);
  wait_exit0(a);
  assert_int_equal(resil_bulkhead_available(bh), 2);
  close(up[0]);
  close(up[1]);
  close(down[0]);
  close(down[1]);
  resil__shared_release(seg);
  resil_bulkhead_free(bh);
  seg_done(seg, &sc);
}

/* ---- SIGKILL chaos ---------------------------------------------------------- */

#define CHAOS_WORKERS 6
#define CHAOS_NS (2000 * 1000000LL)
#define CHAOS_MAX 2

typedef struct chaos_board {
  _Atomic int64_t acquired;
  _Atomic int64_t over; /* a worker saw more than CHAOS_MAX held */
} chaos_board;

static void chaos_worker(resil_bulkhead *bh, resil_ratelimiter *rl, chaos_board *b) {
  for (;;) {
    resil_reason why;
    (void)resil_ratelimiter_acquire(rl, 1, NULL, &why);
    if (resil_bulkhead_acquire(bh, NULL, &why) != RESIL_DECISION_GO) continue;
    atomic_fetch_add(&b->acquired, 1);
    /* Held: the segment shows it (available < max). Held for a moment,
     * and a pause after: the workers sleep half the time, so the killer
     * gets the CPU (2 cores) and kills holders as often as not. */
    if (resil_bulkhead_available(bh) > CHAOS_MAX - 1) atomic_fetch_add(&b->over, 1);
    struct timespec ts = {0, 50000};
    nanosleep(&ts, NULL);
    if (resil_bulkhead_release(bh) != RESIL_OK) atomic_fetch_add(&b->over, 1);
    nanosleep(&ts, NULL);
  }
}

static pid_t spawn(resil_bulkhead *bh, resil_ratelimiter *rl, chaos_board *b) {
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) chaos_worker(bh, rl, b);
  return pid;
}

static void sigkill_chaos_leaves_no_permit_leaked_and_nobody_wedged(void **state) {
  (void)state;
  resil_shared_config sc;
  char name[64];
  seg_config(&sc, name, sizeof name, "chaos");
  resil_shared *seg = seg_open(&sc);
  resil_bulkhead *bh = bulkhead(seg, CHAOS_MAX, RESIL_MS(5));
  resil_ratelimiter_config rc;
  resil_ratelimiter_config_init(&rc);
  rc.name = "chaos";
  rc.limit_for_period = 1000;
  rc.refresh_period_ns = RESIL_MS(10);
  rc.timeout_ns = 0;
  rc.shared = seg;
  resil_ratelimiter *rl = NULL;
  assert_status(RESIL_OK, resil_ratelimiter_new(&rc, &rl, NULL));
  chaos_board *b = mmap(NULL, sizeof *b, PROT_READ | PROT_WRITE,
                        MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  assert_true(b != MAP_FAILED);
  memset(b, 0, sizeof *b);
  pid_t w[CHAOS_WORKERS];
  for (int i = 0; i < CHAOS_WORKERS; i++) w[i] = spawn(bh, rl, b);
  unsigned seed = (unsigned)getpid();
  int64_t end = mono() + CHAOS_NS;
  long kills = 0;
  while (mono() < end) {
    struct timespec ts = {0, (long)(rand_r(&seed) % 1000000)};
    nanosleep(&ts, NULL);
    int k = rand_r(&seed) % CHAOS_WORKERS;
    assert_int_equal(kill(w[k], SIGKILL), 0);
    assert_int_equal(waitpid(w[k], NULL, 0), w[k]);
    kills++;
    w[k] = spawn(bh, rl, b);
  }
  for (int i = 0; i < CHAOS_WORKERS; i++) {
    assert_int_equal(kill(w[i], SIGKILL), 0);
    assert_int_equal(waitpid(w[i], NULL, 0), w[i]);
  }
  /* A fresh process: not wedged, its acquisition is quick. */
  int64_t *fresh_ns = mmap(NULL, sizeof *fresh_ns, PROT_READ | PROT_WRITE,
                           MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  assert_true(fresh_ns != MAP_FAILED);
  pid_t f = fork();
  assert_true(f >= 0);
  if (f == 0) {
    resil_shared *s2 = NULL;
    if (resil_shared_open(&sc, &s2, NULL) != RESIL_OK) _exit(1);
    resil_bulkhead *mine = bulkhead(s2, CHAOS_MAX, RESIL_S(1));
    int64_t t0 = mono();
    if (resil_bulkhead_acquire(mine, NULL, NULL) != RESIL_DECISION_GO) _exit(2);
    if (resil_bulkhead_acquire(mine, NULL, NULL) != RESIL_DECISION_GO) _exit(3);
    *fresh_ns = mono() - t0;
    if (resil_bulkhead_release(mine) || resil_bulkhead_release(mine)) _exit(4);
    if (resil_ratelimiter_acquire(rl, 1, NULL, NULL) != RESIL_DECISION_GO) {
      /* This cycle may be spent: the next one is at most 10 ms away. */
      struct timespec ts = {0, 11000000};
      nanosleep(&ts, NULL);
      if (resil_ratelimiter_acquire(rl, 1, NULL, NULL) != RESIL_DECISION_GO) _exit(5);
    }
    _exit(0);
  }
  wait_exit0(f);
  print_message("kills %ld, acquisitions %lld, fresh process got both permits in %.2f ms\n",
                kills, (long long)atomic_load(&b->acquired), (double)*fresh_ns / 1e6);
  assert_true(kills >= 100);
  assert_int_equal(atomic_load(&b->over), 0);
  assert_true(atomic_load(&b->acquired) > 0);
  assert_true(*fresh_ns < RESIL_MS(100)); /* 0.01..8.3 ms measured; slack for load */
  /* No permit leaked: every one is free once the dead are reclaimed. */
  assert_int_equal(resil_bulkhead_available(bh), CHAOS_MAX);
  int64_t avail = resil_ratelimiter_available(rl);
  assert_true(avail >= 0 && avail <= 1000);
  munmap(fresh_ns, sizeof *fresh_ns);
  munmap(b, sizeof *b);
  resil_ratelimiter_free(rl);
  resil_bulkhead_free(bh);
  seg_done(seg, &sc);
}

/* ---- enqueue (event loops): one helper thread, no thread per waiter ------ */

typedef struct ready_flag {
  _Atomic int n;
} ready_flag;

static void on_ready(void *arg) {
  ready_flag *r = arg;
  atomic_fetch_add(&r->n, 1);
}

static void an_enqueued_waiter_gets_a_permit_another_process_frees(void **state) {
  (void)state;
  resil_shared_config sc;
  char name[64];
  seg_config(&sc, name, sizeof name, "enq");
  resil_shared *seg = seg_open(&sc);
  resil_bulkhead *bh = bulkhead(seg, 1, RESIL_S(5));
  int up[2], down[2];
  assert_int_equal(pipe(up), 0);
  assert_int_equal(pipe(down), 0);
  pid_t a = holder(bh, up[1], down[0]);
  assert_int_equal(rd(up[0]), 'y');
  /* Three waiters queued: served in order, by one helper thread. */
  resil_bulkhead_waiter *w[3];
  ready_flag r[3];
  for (int i = 0; i < 3; i++) {
    atomic_init(&r[i].n, 0);
    assert_status(RESIL_OK, resil_bulkhead_waiter_new(bh, &w[i]));
    int64_t wait_ns = 0;
    resil_reason why;
    assert_int_equal(resil_bulkhead_enqueue(bh, NULL, w[i], on_ready, &r[i], &wait_ns, &why),
                     RESIL_DECISION_WAIT);
    assert_int_equal(wait_ns, RESIL_S(5));
  }
  resil_bulkhead_metrics m;
  assert_status(RESIL_OK, resil_bulkhead_get_metrics(bh, &m));
  assert_int_equal(m.waiting, 3);
  /* The other process releases: the helper hands the permit to w[0]. */
  assert_int_equal(write(down[1], "r", 1), 1);
  wait_exit0(a);
  int64_t t0 = mono();
  while (atomic_load(&r[0].n) == 0 && mono() - t0 < RESIL_S(2)) test_sleep_ms(1);
  assert_int_equal(atomic_load(&r[0].n), 1);
  assert_int_equal(resil_bulkhead_dequeue(bh, w[0]), RESIL_BH_HANDED_OVER);
  assert_int_equal(atomic_load(&r[1].n), 0);
  /* This process's release hands its permit on to w[1] directly. */
  assert_int_equal(resil_bulkhead_release(bh), RESIL_OK);
  assert_int_equal(atomic_load(&r[1].n), 1);
  assert_int_equal(resil_bulkhead_dequeue(bh, w[1]), RESIL_BH_HANDED_OVER);
  /* w[2] gives up (its timer): withdrawn, never called. */
  assert_int_equal(resil_bulkhead_dequeue(bh, w[2]), RESIL_BH_WITHDRAWN);
  assert_int_equal(resil_bulkhead_release(bh), RESIL_OK);
  assert_int_equal(resil_bulkhead_available(bh), 1);
  assert_int_equal(atomic_load(&r[2].n), 0);
  for (int i = 0; i < 3; i++) resil_bulkhead_waiter_free(w[i]);
  resil_bulkhead_free(bh); /* joins the helper */
  resil_shared_close(seg);
  close(up[0]);
  close(up[1]);
  close(down[0]);
  close(down[1]);
  assert_status(RESIL_OK, resil_shared_unlink(&sc, NULL));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(at_most_max_concurrent_across_processes),
      cmocka_unit_test(a_killed_holders_permit_comes_back_within_a_second),
      cmocka_unit_test(a_blocked_acquire_wakes_on_another_processs_release),
      cmocka_unit_test(a_permit_of_a_reused_pid_is_reclaimed_a_live_owners_kept),
      cmocka_unit_test(sigkill_chaos_leaves_no_permit_leaked_and_nobody_wedged),
      /* Last: it starts a thread, and the others fork. */
      cmocka_unit_test(an_enqueued_waiter_gets_a_permit_another_process_frees),
  };
  return cmocka_run_group_tests(tests, NULL, seg_unlink_all);
}
