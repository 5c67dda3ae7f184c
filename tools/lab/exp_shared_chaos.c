#define _DEFAULT_SOURCE /* MAP_ANONYMOUS */
/* Lab experiment M4 (issue 20, "Lab"): SIGKILL chaos on shared state
 * (resil/shared.h, DESIGN §8.1 "SIGKILL-safe").
 *
 * 8 worker processes (fork()s of the lab) hammer ONE breaker, ONE rate
 * limiter and ONE semaphore bulkhead, all in one segment in a temporary
 * directory, flat out: every loop takes a limiter permit and a breaker
 * permit, every 4th permitted call also a bulkhead permit (waiting up to
 * 2 ms, held 20 us), and records a result. The lab process is the killer:
 * every 0-4 ms it SIGKILLs a worker, at random, or every other time the
 * first seen recording a result (under the breaker's lock, a change of
 * several words), and forks a new one in its place; the dead are reaped by
 * pid without waiting for them. Each worker marks the call it is in, in a
 * MAP_SHARED page: the killer tallies what its kills interrupted.
 *
 * Every 100 kills all 8 are killed at once and a check runs on what they
 * left; the segments between checks alternate 10 % failures (the breaker
 * stays CLOSED: its window fills under the kills) and 40 % (it goes
 * through OPEN and HALF_OPEN and back, about 1,500 transitions in all).
 * After 1,000 kills the results turn to successes for 30 ms (the breaker
 * back to CLOSED) and a last check runs.
 *
 * A check is a fresh process (a fork that opens the segment and creates
 * its own handles). Nobody wedged: within 10 ms each it gets a breaker
 * permit, a limiter permit and a bulkhead permit, and every max_concurrent
 * bulkhead permit within 1 s (the dead holders' come back). The invariants,
 * as the public API shows them (the lab uses no library internals,
 * scripts/check-layers.sh):
 *   - breaker (resil_breaker_shared_peek): a state of the three, the
 *     window's failed/slow/successful counts within its buffered calls,
 *     buffered within the window (or HALF_OPEN's permitted calls),
 *     HALF_OPEN permits within the permitted count and none outside
 *     HALF_OPEN, total calls = successes + failures, generation above the
 *     transitions; and "the window's totals equal its contents": in CLOSED
 *     it records window-size successes, which replace every result the
 *     window held, so the totals must then read exactly window-size calls,
 *     0 failed, 0 slow (a drift between totals and contents would stay);
 *   - limiter: permits available within 0..limit, and exactly limit in a
 *     cycle of its own (no permit lost to a killed compare-and-swap, none
 *     made up);
 *   - bulkhead: every permit back, and none beyond max_concurrent while it
 *     holds them all (the workers check that too, holding theirs).
 * Then 16 rounds time the reclaim: 4 holder processes take all 4 permits,
 * 1-4 of them are killed (reaped at once, or only after, so a zombie holds
 * the permit meanwhile), and the lab process times each blocked acquire
 * from the kill until it gets the permit: reclaim_ms_max, the longest.
 *
 * Wrong variant: a bulkhead without owners, a plain counter of permits in
 * shared memory (what an ad hoc shared semaphore does): a holder killed
 * before its release leaks its permit for ever (permits_leaked > 0).
 *
 * Bounded: the whole experiment stops at 40 s whatever happens; every
 * process it starts is killed and reaped by its pid. */
#include <errno.h>
#include <signal.h>
#include <sched.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "lab_families.h"
#include "lab_procs.h"
#include "lab_result.h"
#include "resil/breaker.h"
#include "resil/bulkhead.h"
#include "resil/ratelimit.h"
#include "resil/shared.h"

enum {
  M4_WORKERS = 8,
  M4_KILLS = 1000,
  M4_MAX = 4,     /* bulkhead permits */
  M4_WINDOW = 20, /* breaker count window */
  M4_HALF = 2,    /* HALF_OPEN permitted calls */
  M4_LIMIT = 500, /* limiter permits per period */
  M4_ROUNDS = 16, /* reclaim rounds */
  M4_CHECK_EVERY = 100, /* kills between two checks */
  M4_BH_EVERY = 4,      /* a worker's calls that take a bulkhead permit: 1 in 4 */
  M4_FAIL_PCT_CLOSED = 10,
  M4_FAIL_PCT_MOVING = 40
};
#define M4_PERIOD_NS RESIL_MS(5)
#define M4_HARD_NS RESIL_S(40)

static void m4_sleep_ns(int64_t ns) {
  struct timespec ts = {(time_t)(ns / 1000000000), (long)(ns % 1000000000)};
  nanosleep(&ts, NULL);
}

static double m4_ms(int64_t ns) { return (double)ns / 1e6; }

/* ---- what the processes share (a MAP_SHARED page) ------------------------ */

/* The call a worker is in, for the killer's tally. */
enum { OP_NONE = 0, OP_LIMITER, OP_BREAKER, OP_BULKHEAD, OP_HOLDING, OP_RECORD, OP_N };

typedef struct m4_slot {
  _Alignas(64) _Atomic int op;
  _Atomic long loops, limiter_go, breaker_go, breaker_rejected, bh_go, bh_full;
  _Atomic long over; /* more than max_concurrent held, or a refused release */
} m4_slot;

/* The fresh processes' findings: summed or the worst over every check,
 * and the last (final) check's own. */
typedef struct m4_fresh {
  int checks;     /* checker processes that ran to the end */
  int wedged;     /* no breaker or limiter permit, no bulkhead decision in 10 ms */
  int violations; /* invariants broken */
  char why[200];  /* the first broken invariant or wedge */
  int rolls;      /* CLOSED windows replaced by successes */
  int leaked_max; /* permits one check did not get back within 1 s */
  int64_t breaker_ns_max, limiter_ns_max, bh_first_ns_max;
  int64_t bh_back_ns_max; /* from the last kill to the last permit back */
  /* The last check's. */
  int rolled;
  char state[16]; /* the breaker's state as found */
  uint64_t generation, transitions, calls;
  int64_t limiter_available, limiter_cycle;
} m4_fresh;

typedef struct m4_board {
  _Atomic int fail_pct;
  _Atomic int64_t last_kill_ns;
  _Atomic uint32_t counter; /* the wrong variant's bulkhead */
  _Atomic int held[M4_MAX]; /* reclaim holders: 1 held, -1 could not */
  m4_slot w[M4_WORKERS];
  m4_fresh f;
} m4_board;

/* ---- the segment, the instances ----------------------------------------- */

typedef struct m4 {
  lab_seg s;
  int wrong;
  m4_board *b;
  resil_breaker *br;
  resil_ratelimiter *rl;
  resil_bulkhead *bh_short; /* max wait 2 ms: the workers' */
  resil_bulkhead *bh_long;  /* max wait 1 s: the holders' and the lab's */
  int64_t hard_deadline;
} m4;

static int m4_breaker(resil_shared *seg, resil_breaker **out, resil_error *err) {
  resil_breaker_config c;
  resil_breaker_config_init(&c);
  c.name = "m4";
  c.window_size = M4_WINDOW;
  c.minimum_calls = M4_WINDOW;
  c.failure_rate_threshold_pct = 50;
  c.open_wait_ns = RESIL_MS(2);
  c.half_open_permitted_calls = M4_HALF;
  /* A probe's holder killed never returns its permit: the period ends
   * after 3 ms (OPEN again). */
  c.half_open_max_wait_ns = RESIL_MS(3);
  c.shared = seg;
  return resil_breaker_new(&c, out, err) == RESIL_OK ? 0 : -1;
}

static int m4_limiter(resil_shared *seg, int64_t timeout_ns, resil_ratelimiter **out,
                      resil_error *err) {
  resil_ratelimiter_config c;
  resil_ratelimiter_config_init(&c);
  c.name = "m4";
  c.limit_for_period = M4_LIMIT;
  c.refresh_period_ns = M4_PERIOD_NS;
  c.timeout_ns = timeout_ns;
  c.shared = seg;
  return resil_ratelimiter_new(&c, out, err) == RESIL_OK ? 0 : -1;
}

static int m4_bulkhead(resil_shared *seg, int64_t max_wait_ns, resil_bulkhead **out,
                       resil_error *err) {
  resil_bulkhead_config c;
  resil_bulkhead_config_init(&c);
  c.name = "m4";
  c.max_concurrent = M4_MAX;
  c.max_wait_ns = max_wait_ns;
  c.shared = seg;
  return resil_bulkhead_new(&c, out, err) == RESIL_OK ? 0 : -1;
}

/* The bulkhead of the run: the shared one, or (wrong) a counter of permits
 * in the shared page, taken and given back with compare-and-swap, which
 * records no owner. 1 when a permit was taken: at once (wait_ns 0), or
 * within the handle's max wait (the counter: within wait_ns). */
static int bh_take(m4 *x, resil_bulkhead *bh, int64_t wait_ns) {
  if (!x->wrong)
    return (wait_ns == 0 ? resil_bulkhead_try_acquire(bh, NULL)
                         : resil_bulkhead_acquire(bh, NULL, NULL)) == RESIL_DECISION_GO;
  int64_t until = lab_now_ns() + wait_ns;
  for (;;) {
    uint32_t v = atomic_load(&x->b->counter);
    if (v < M4_MAX) {
      if (atomic_compare_exchange_weak(&x->b->counter, &v, v + 1)) return 1;
      continue;
    }
    if (lab_now_ns() >= until) return 0;
    m4_sleep_ns(RESIL_US(100));
  }
}

static int bh_give(m4 *x, resil_bulkhead *bh) {
  if (!x->wrong) return resil_bulkhead_release(bh) == RESIL_OK;
  atomic_fetch_sub(&x->b->counter, 1);
  return 1;
}

/* Permits free now (the counter's or the bulkhead's). */
static uint32_t bh_available(m4 *x, resil_bulkhead *bh) {
  if (!x->wrong) return resil_bulkhead_available(bh);
  uint32_t v = atomic_load(&x->b->counter);
  return v < M4_MAX ? M4_MAX - v : 0;
}

/* ---- the workers and the killer -------------------------------------------- */

static void m4_op(m4_slot *s, int op) { atomic_store_explicit(&s->op, op, memory_order_relaxed); }

static void m4_add(_Atomic long *c) { atomic_fetch_add_explicit(c, 1, memory_order_relaxed); }

/* A worker, on the handles it inherited; runs until killed. */
static _Noreturn void m4_worker(m4 *x, int slot, unsigned seed) {
  m4_slot *s = &x->b->w[slot];
  const resil_outcome ok = resil_outcome_http(200), failed = resil_outcome_http(503);
  unsigned n = 0;
  for (;;) {
    m4_add(&s->loops);
    m4_op(s, OP_LIMITER);
    if (resil_ratelimiter_acquire(x->rl, 1, NULL, NULL) == RESIL_DECISION_GO)
      m4_add(&s->limiter_go);
    m4_op(s, OP_BREAKER);
    resil_breaker_permit p;
    if (resil_breaker_try_acquire(x->br, &p) != RESIL_DECISION_GO) {
      m4_add(&s->breaker_rejected);
      continue;
    }
    m4_add(&s->breaker_go);
    /* The bulkhead on every 4th call: the others only take the breaker's
     * lock to record, more often (more kills land while it is held). */
    if (++n % M4_BH_EVERY != 0) {
    } else if (m4_op(s, OP_BULKHEAD), bh_take(x, x->bh_short, RESIL_MS(2))) {
      m4_op(s, OP_HOLDING);
      m4_add(&s->bh_go);
      if (bh_available(x, x->bh_short) > M4_MAX - 1) m4_add(&s->over);
      m4_sleep_ns(RESIL_US(20));
      m4_op(s, OP_BULKHEAD);
      if (!bh_give(x, x->bh_short)) m4_add(&s->over);
    } else {
      m4_add(&s->bh_full);
    }
    m4_op(s, OP_RECORD);
    int fail = (int)(rand_r(&seed) % 100) < atomic_load_explicit(&x->b->fail_pct,
                                                                 memory_order_relaxed);
    (void)resil_breaker_record(x->br, &p, fail ? &failed : &ok, 1000);
  }
}

static pid_t m4_spawn(m4 *x, int slot, unsigned seed) {
  atomic_store(&x->b->w[slot].op, OP_NONE);
  pid_t pid = fork();
  if (pid == 0) m4_worker(x, slot, seed);
  return pid;
}

/* Kills pid and reaps it; 0, or -1 when it was not ours to reap. */
static int m4_kill(pid_t pid) {
  if (pid <= 0) return -1;
  (void)kill(pid, SIGKILL);
  for (;;) {
    pid_t w = waitpid(pid, NULL, 0);
    if (w == pid) return 0;
    if (w < 0 && errno == EINTR) continue;
    return -1;
  }
}

/* Workers killed and not reaped yet: reaped by pid, without waiting for
 * their death (the next kill does not wait for a victim to be scheduled
 * to die); all of them before a check. */
enum { M4_DYING = 64 };
typedef struct m4_dying {
  pid_t pid[M4_DYING];
  int n;
} m4_dying;

/* Reaps the dead among d (all of them, waiting, when `all`). */
static void m4_reap(m4_dying *d, int all) {
  for (int i = 0; i < d->n;) {
    pid_t w = waitpid(d->pid[i], NULL, all ? 0 : WNOHANG);
    if (w == 0 || (w < 0 && errno == EINTR)) {
      i++;
      continue;
    }
    d->pid[i] = d->pid[--d->n]; /* reaped (or not ours: ECHILD) */
  }
}

typedef struct m4_chaos {
  m4_dying dying;
  long kills;
  long by_op[OP_N]; /* kills by the call the victim was in */
  long spawn_failed;
  int checkpoints;  /* checks made during the chaos and after it */
  int check_failed; /* checker processes that did not end with status 0 */
  int64_t ns;       /* from the first kill to the last */
  int timed_out;
} m4_chaos;

static int m4_check_in_child(m4 *x);

/* Kills every worker at once (mid-call), runs a checker process on what
 * they left, and (unless last) forks 8 new workers. */
static void m4_checkpoint(m4 *x, pid_t *pid, m4_chaos *c, unsigned *seed, int last) {
  for (int i = 0; i < M4_WORKERS; i++) {
    int op = atomic_load(&x->b->w[i].op);
    if (pid[i] > 0 && kill(pid[i], SIGKILL) == 0) {
      c->kills++;
      c->by_op[op >= 0 && op < OP_N ? op : OP_NONE]++;
    }
  }
  atomic_store(&x->b->last_kill_ns, lab_now_ns());
  for (int i = 0; i < M4_WORKERS; i++) {
    if (pid[i] > 0) (void)m4_kill(pid[i]);
    pid[i] = -1;
  }
  m4_reap(&c->dying, 1);
  c->checkpoints++;
  if (m4_check_in_child(x) != 0) c->check_failed++;
  if (last) return;
  for (int i = 0; i < M4_WORKERS; i++) {
    pid[i] = m4_spawn(x, i, (unsigned)rand_r(seed));
    if (pid[i] < 0) c->spawn_failed++;
  }
}

static void m4_run_chaos(m4 *x, m4_chaos *c) {
  memset(c, 0, sizeof *c);
  pid_t pid[M4_WORKERS];
  unsigned seed = (unsigned)getpid() ^ (unsigned)lab_now_ns();
  int segment = 0;
  long next_check = M4_CHECK_EVERY;
  atomic_store(&x->b->fail_pct, M4_FAIL_PCT_CLOSED);
  for (int i = 0; i < M4_WORKERS; i++) pid[i] = m4_spawn(x, i, (unsigned)rand_r(&seed));
  int64_t t0 = lab_now_ns();
  while (c->kills < M4_KILLS) {
    if (lab_now_ns() > x->hard_deadline) {
      c->timed_out = 1;
      break;
    }
    if (c->kills >= next_check) {
      m4_checkpoint(x, pid, c, &seed, 0);
      next_check += M4_CHECK_EVERY;
      /* Segments alternate: 10 % failures keep the breaker CLOSED (its
       * window under the kills until the next check rolls it), 40 %
       * move it through OPEN and HALF_OPEN and back. */
      atomic_store(&x->b->fail_pct, ++segment % 2 ? M4_FAIL_PCT_MOVING : M4_FAIL_PCT_CLOSED);
      continue;
    }
    m4_sleep_ns((int64_t)(rand_r(&seed) % 4000) * 1000);
    int k = (int)(rand_r(&seed) % M4_WORKERS);
    /* Every other kill aims at a worker recording a result, the first
     * seen within 500 us (the breaker's lock is taken there: a kill
     * inside it leaves a change half made for the next holder to
     * repair). */
    for (int64_t until = lab_now_ns() + RESIL_US(500); c->kills % 2 && lab_now_ns() < until;) {
      int i = 0;
      for (; i < M4_WORKERS; i++)
        if (atomic_load(&x->b->w[(k + i) % M4_WORKERS].op) == OP_RECORD) break;
      if (i < M4_WORKERS) {
        k = (k + i) % M4_WORKERS;
        break;
      }
    }
    if (pid[k] <= 0) {
      pid[k] = m4_spawn(x, k, (unsigned)rand_r(&seed));
      if (pid[k] < 0) c->spawn_failed++;
      continue;
    }
    int op = atomic_load(&x->b->w[k].op);
    if (c->dying.n == M4_DYING) m4_reap(&c->dying, 1);
    if (kill(pid[k], SIGKILL) == 0) {
      c->kills++;
      c->by_op[op >= 0 && op < OP_N ? op : OP_NONE]++;
    }
    c->dying.pid[c->dying.n++] = pid[k];
    pid[k] = m4_spawn(x, k, (unsigned)rand_r(&seed));
    if (pid[k] < 0) c->spawn_failed++;
    m4_reap(&c->dying, 0);
  }
  /* Calm: successes only for 30 ms, under the live workers (the breaker
   * back to CLOSED, its window filled), then the last check. */
  atomic_store(&x->b->fail_pct, 0);
  m4_sleep_ns(RESIL_MS(30));
  c->ns = lab_now_ns() - t0;
  m4_checkpoint(x, pid, c, &seed, 1);
}

/* ---- the fresh process ------------------------------------------------------ */

static void m4_why(m4_fresh *f, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void m4_why(m4_fresh *f, const char *fmt, ...) {
  if (f->why[0]) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(f->why, sizeof f->why, fmt, ap);
  va_end(ap);
}

#define m4_violation(f, ...) ((f)->violations++, m4_why((f), __VA_ARGS__))

static void m4_wedge(m4_fresh *f, const char *what, int64_t ns) {
  f->wedged++;
  m4_why(f, "wedged: %s took %.2f ms", what, m4_ms(ns));
}

static void m4_max(int64_t *m, int64_t v) {
  if (v > *m) *m = v;
}

/* What the breaker's figures must satisfy whatever the kills did. */
static void m4_check_breaker(m4_fresh *f, const resil_breaker_metrics *m, const char *when) {
  resil_breaker_state_kind st = m->state;
  if (st != RESIL_BREAKER_CLOSED && st != RESIL_BREAKER_OPEN && st != RESIL_BREAKER_HALF_OPEN)
    m4_violation(f, "%s: breaker state %s", when, resil_breaker_state_name(st));
  uint64_t cap = st == RESIL_BREAKER_HALF_OPEN ? M4_HALF : M4_WINDOW;
  if (m->buffered_calls > cap || m->failed_calls > m->buffered_calls ||
      m->slow_calls > m->buffered_calls || m->slow_failed_calls > m->slow_calls ||
      m->slow_failed_calls > m->failed_calls ||
      m->successful_calls != m->buffered_calls - m->failed_calls)
    m4_violation(f,
                 "%s: %s window of %llu buffered, %llu failed, %llu slow, %llu successful "
                 "(at most %llu)",
                 when, resil_breaker_state_name(st), (unsigned long long)m->buffered_calls,
                 (unsigned long long)m->failed_calls, (unsigned long long)m->slow_calls,
                 (unsigned long long)m->successful_calls, (unsigned long long)cap);
  if (m->half_open_permits_available > (st == RESIL_BREAKER_HALF_OPEN ? M4_HALF : 0u))
    m4_violation(f, "%s: %u HALF_OPEN permits available in %s", when,
                 m->half_open_permits_available, resil_breaker_state_name(st));
  if (m->total_calls != m->total_successes + m->total_failures ||
      m->total_slow > m->total_calls)
    m4_violation(f, "%s: totals %llu calls, %llu successes, %llu failures, %llu slow", when,
                 (unsigned long long)m->total_calls, (unsigned long long)m->total_successes,
                 (unsigned long long)m->total_failures, (unsigned long long)m->total_slow);
  /* Every transition starts a generation (a process killed between the
   * two leaves one uncounted: generation may be ahead, never behind). */
  if (m->generation < 1 + m->total_transitions)
    m4_violation(f, "%s: generation %llu after %llu transitions", when,
                 (unsigned long long)m->generation, (unsigned long long)m->total_transitions);
}

/* A check, in a fresh process (a fork that opens the segment and creates
 * handles of its own) after every worker was killed: nobody wedged, the
 * invariants, every bulkhead permit back. Adds its findings to the board.
 * Its exit status: 0 when it could make the checks. */
static int m4_check(m4 *x) {
  m4_fresh *f = &x->b->f;
  resil_shared *seg = NULL;
  resil_breaker *br = NULL;
  resil_ratelimiter *rl = NULL, *rl0 = NULL;
  resil_bulkhead *bh = NULL;
  if (resil_shared_open(&x->s.sc, &seg, NULL) != RESIL_OK) return 1;
  if (m4_breaker(seg, &br, NULL) || m4_limiter(seg, RESIL_MS(10), &rl, NULL) ||
      m4_limiter(seg, 0, &rl0, NULL) || m4_bulkhead(seg, RESIL_S(1), &bh, NULL))
    return 2;

  /* The breaker as the kills left it. */
  resil_breaker_metrics m;
  if (resil_breaker_shared_peek(seg, "m4", &m, NULL) != RESIL_OK) return 3;
  snprintf(f->state, sizeof f->state, "%s", resil_breaker_state_name(m.state));
  m4_check_breaker(f, &m, "as found");
  /* A permit within 10 ms (the lock may name a dead holder: taken over;
   * OPEN lasts 2 ms, a HALF_OPEN period 3 ms at most). */
  int64_t t0 = lab_now_ns(), t;
  resil_breaker_permit p;
  int go = 0;
  while (!(go = resil_breaker_try_acquire(br, &p) == RESIL_DECISION_GO) &&
         lab_now_ns() - t0 < RESIL_S(1))
    sched_yield();
  t = lab_now_ns() - t0;
  m4_max(&f->breaker_ns_max, t);
  if (!go || t > RESIL_MS(10)) m4_wedge(f, "a breaker permit", t);
  const resil_outcome ok = resil_outcome_http(200);
  if (go) (void)resil_breaker_record(br, &p, &ok, 1000);
  /* The window's totals equal its contents: window-size successes replace
   * all it held; a drift would stay. */
  f->rolled = 0;
  if (resil_breaker_state(br) == RESIL_BREAKER_CLOSED) {
    int n = 0;
    for (; n < M4_WINDOW; n++) {
      if (resil_breaker_try_acquire(br, &p) != RESIL_DECISION_GO) break;
      (void)resil_breaker_record(br, &p, &ok, 1000);
    }
    if (n == M4_WINDOW && resil_breaker_get_metrics(br, &m) == RESIL_OK) {
      f->rolled = 1;
      f->rolls++;
      m4_check_breaker(f, &m, "after the roll");
      if (m.state != RESIL_BREAKER_CLOSED || m.buffered_calls != M4_WINDOW ||
          m.failed_calls != 0 || m.slow_calls != 0)
        m4_violation(f,
                     "after %d successes the %s window reads %llu calls, %llu failed, "
                     "%llu slow (its contents: %d, 0, 0)",
                     M4_WINDOW, resil_breaker_state_name(m.state),
                     (unsigned long long)m.buffered_calls, (unsigned long long)m.failed_calls,
                     (unsigned long long)m.slow_calls, M4_WINDOW);
    }
  }
  if (resil_breaker_get_metrics(br, &m) == RESIL_OK) {
    f->generation = m.generation;
    f->transitions = m.total_transitions;
    f->calls = m.total_calls;
  }

  /* The bulkhead: a decision at once (try_acquire: the call itself never
   * waits on the dead), every permit back within 1 s (a dead holder's
   * comes back when a reclaim pass frees it, one every 10 ms at most, so
   * when the dead hold them all the first may take a little more than
   * 10 ms: measured, bounded by the 1 s of DESIGN §8.1), and none beyond
   * max_concurrent. Once permits leaked (the wrong variant) the later
   * checks skip it: they would only wait 1 s each. */
  if (f->leaked_max == 0) {
    int64_t last_kill = atomic_load(&x->b->last_kill_ns);
    t0 = lab_now_ns();
    int got = bh_take(x, bh, 0);
    t = lab_now_ns() - t0;
    if (t > RESIL_MS(10)) m4_wedge(f, "a bulkhead decision", t);
    int64_t first = got ? t : -1;
    while (got < M4_MAX && bh_take(x, bh, RESIL_S(1)))
      if (++got == 1) first = lab_now_ns() - t0;
    if (first >= 0) m4_max(&f->bh_first_ns_max, first);
    if (got == M4_MAX) m4_max(&f->bh_back_ns_max, lab_now_ns() - last_kill);
    if (got == 0) m4_wedge(f, "a bulkhead permit (none within 1 s)", lab_now_ns() - t0);
    if (M4_MAX - got > f->leaked_max) f->leaked_max = M4_MAX - got;
    if (got == M4_MAX && bh_take(x, bh, 0)) {
      m4_violation(f, "bulkhead: a permit beyond the %d held", M4_MAX);
      (void)bh_give(x, bh);
    }
    for (int i = 0; i < got; i++) (void)bh_give(x, bh);
  }

  /* The limiter: within 0..limit, a permit within 10 ms, and exactly the
   * limit in a cycle of its own. */
  int64_t avail = 0, limit = 0;
  if (resil_ratelimiter_shared_peek(seg, "m4", &avail, &limit, NULL) != RESIL_OK) return 4;
  f->limiter_available = avail;
  if (avail < 0 || avail > M4_LIMIT || limit != M4_LIMIT)
    m4_violation(f, "limiter: %lld available of %lld (limit %d)", (long long)avail,
                 (long long)limit, M4_LIMIT);
  t0 = lab_now_ns();
  go = resil_ratelimiter_acquire(rl, 1, NULL, NULL) == RESIL_DECISION_GO;
  t = lab_now_ns() - t0;
  m4_max(&f->limiter_ns_max, t);
  if (!go || t > RESIL_MS(10)) m4_wedge(f, "a limiter permit", t);
  f->limiter_cycle = -1;
  for (int tries = 0; tries < 5 && f->limiter_cycle < 0; tries++) {
    while (resil_ratelimiter_acquire(rl0, 1, NULL, NULL) == RESIL_DECISION_GO) {
    }
    int64_t before = lab_now_ns(), wait = resil_ratelimiter_nanos_to_wait(rl0);
    if (wait <= 0) continue; /* the cycle turned meanwhile: drain again */
    m4_sleep_ns(wait + RESIL_US(50));
    long n = 0;
    while (resil_ratelimiter_acquire(rl0, 1, NULL, NULL) == RESIL_DECISION_GO) n++;
    /* The cycle began at before + wait or later, and the takes after it:
     * all in that one cycle when they ended before before + wait + period. */
    if (lab_now_ns() < before + wait + M4_PERIOD_NS) f->limiter_cycle = n;
  }
  if (f->limiter_cycle >= 0 && f->limiter_cycle != M4_LIMIT)
    m4_violation(f, "limiter: %lld permits in a cycle of its own, not %d",
                 (long long)f->limiter_cycle, M4_LIMIT);
  return 0;
}

/* Runs m4_check in a child, waited for until the hard deadline (then
 * killed and reaped); its exit status, -1 when killed or not started. */
static int m4_check_in_child(m4 *x) {
  pid_t pid = fork();
  if (pid < 0) return -1;
  if (pid == 0) {
    int rc = m4_check(x);
    if (rc == 0) x->b->f.checks++;
    _exit(rc);
  }
  for (;;) {
    int st = 0;
    pid_t w = waitpid(pid, &st, WNOHANG);
    if (w == pid) return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    if (w < 0 && errno != EINTR) return -1;
    if (lab_now_ns() > x->hard_deadline) {
      (void)m4_kill(pid);
      return -1;
    }
    m4_sleep_ns(RESIL_MS(1));
  }
}

/* ---- reclaim rounds --------------------------------------------------------- */

static _Noreturn void m4_holder(m4 *x, int j) {
  int got = bh_take(x, x->bh_long, RESIL_S(1));
  atomic_store(&x->b->held[j], got ? 1 : -1);
  for (;;) pause();
}

typedef struct m4_reclaim {
  int rounds;
  long timed;       /* permits timed from a holder's kill to its return */
  int64_t max_ns;   /* the longest; -1: one never came back */
  long not_held;    /* holders that could not take a permit */
} m4_reclaim;

/* Takes n permits in the lab process, each timed from t0; max into r.
 * Returns how many it got (each within 1 s). */
static int m4_take_timed(m4 *x, int n, int64_t t0, m4_reclaim *r) {
  int got = 0;
  for (; got < n; got++) {
    if (!bh_take(x, x->bh_long, RESIL_S(1))) break;
    int64_t ns = lab_now_ns() - t0;
    r->timed++;
    if (ns > r->max_ns) r->max_ns = ns;
  }
  return got;
}

static void m4_run_reclaim(m4 *x, m4_reclaim *r) {
  memset(r, 0, sizeof *r);
  unsigned seed = (unsigned)getpid() ^ 0x5eedu;
  for (int round = 0; round < M4_ROUNDS && lab_now_ns() < x->hard_deadline; round++) {
    pid_t h[M4_MAX];
    int reaped[M4_MAX] = {0};
    int n = 0;
    for (int j = 0; j < M4_MAX; j++) atomic_store(&x->b->held[j], 0);
    for (; n < M4_MAX; n++) {
      h[n] = fork();
      if (h[n] < 0) break;
      if (h[n] == 0) m4_holder(x, n);
    }
    int64_t until = lab_now_ns() + RESIL_S(2);
    int ready = 0, bad = 0;
    while (lab_now_ns() < until) {
      ready = bad = 0;
      for (int j = 0; j < n; j++) {
        int v = atomic_load(&x->b->held[j]);
        ready += v != 0;
        bad += v < 0;
      }
      if (ready == n) break;
      m4_sleep_ns(RESIL_US(200));
    }
    r->rounds++;
    int ok = n == M4_MAX && ready == n && bad == 0;
    r->not_held += M4_MAX - (ready - bad);
    if (ok) {
      /* Kill k of the 4; reaped at once (even rounds) or after (a zombie
       * owns the permit meanwhile, which /proc tells apart from a live
       * process). */
      int k = 1 + (int)(rand_r(&seed) % M4_MAX);
      int reap_first = round % 2 == 0;
      int64_t t0 = lab_now_ns();
      for (int j = 0; j < k; j++) {
        (void)kill(h[j], SIGKILL);
        if (reap_first) reaped[j] = m4_kill(h[j]) == 0;
      }
      int got = m4_take_timed(x, k, t0, r);
      if (got == k) {
        /* The rest, killed while the lab holds the first k's permits. */
        int64_t t1 = lab_now_ns();
        for (int j = k; j < n; j++) reaped[j] = m4_kill(h[j]) == 0;
        got += m4_take_timed(x, M4_MAX - k, t1, r);
      }
      for (int i = 0; i < got; i++) (void)bh_give(x, x->bh_long);
      if (got != M4_MAX) ok = 0;
    }
    for (int j = 0; j < n; j++)
      if (!reaped[j]) (void)m4_kill(h[j]); /* killed and reaped by pid, once */
    if (!ok) {
      r->max_ns = -1;
      break;
    }
  }
}

/* ---- M4 --------------------------------------------------------------------- */

static int m4_open(lab_result *r, m4 *x) {
  if (lab_seg_open(r, &x->s, "m4") != 0) return -1;
  resil_error err;
  x->b = lab_board(sizeof(m4_board));
  if (!lab_check(r, x->b != NULL, "mmap: %s", strerror(errno))) return -1;
  if (!lab_check(r, m4_breaker(x->s.seg, &x->br, &err) == 0, "breaker: %s", err.msg) ||
      !lab_check(r, m4_limiter(x->s.seg, 0, &x->rl, &err) == 0, "limiter: %s", err.msg) ||
      !lab_check(r, m4_bulkhead(x->s.seg, RESIL_MS(2), &x->bh_short, &err) == 0, "bulkhead: %s",
                 err.msg) ||
      !lab_check(r, m4_bulkhead(x->s.seg, RESIL_S(1), &x->bh_long, &err) == 0, "bulkhead: %s",
                 err.msg))
    return -1;
  return 0;
}

static void m4_close(m4 *x) {
  if (x->bh_long) resil_bulkhead_free(x->bh_long);
  if (x->bh_short) resil_bulkhead_free(x->bh_short);
  if (x->rl) resil_ratelimiter_free(x->rl);
  if (x->br) resil_breaker_free(x->br);
  if (x->b) munmap(x->b, sizeof(m4_board));
  lab_seg_done(&x->s);
}

static int m4_run(lab_result *r, int wrong) {
  m4 x;
  memset(&x, 0, sizeof x);
  x.wrong = wrong;
  int64_t start = lab_now_ns();
  x.hard_deadline = start + M4_HARD_NS;
  if (m4_open(r, &x) != 0) {
    m4_close(&x);
    return r->pass;
  }
  m4_chaos c;
  m4_run_chaos(&x, &c);
  const m4_fresh *f = &x.b->f;
  m4_reclaim rc;
  m4_run_reclaim(&x, &rc);
  int64_t duration = lab_now_ns() - start;

  long loops = 0, limiter_go = 0, breaker_go = 0, rejected = 0, bh_go = 0, bh_full = 0,
       over = 0;
  for (int i = 0; i < M4_WORKERS; i++) {
    const m4_slot *s = &x.b->w[i];
    loops += atomic_load(&s->loops);
    limiter_go += atomic_load(&s->limiter_go);
    breaker_go += atomic_load(&s->breaker_go);
    rejected += atomic_load(&s->breaker_rejected);
    bh_go += atomic_load(&s->bh_go);
    bh_full += atomic_load(&s->bh_full);
    over += atomic_load(&s->over);
  }
  int violations = f->violations + (over > 0);
  int permits_leaked = f->leaked_max;
  int64_t reclaim_ns = rc.max_ns;
  lab_obs_str(r, "bulkhead", wrong ? "a counter of permits in shared memory (no owners)"
                                   : "a shared semaphore bulkhead (permits record owners)");
  lab_obs_int(r, "workers", M4_WORKERS);
  lab_obs_int(r, "kills", c.kills);
  lab_obs_int(r, "kills_in_limiter", c.by_op[OP_LIMITER]);
  lab_obs_int(r, "kills_in_breaker", c.by_op[OP_BREAKER] + c.by_op[OP_RECORD]);
  lab_obs_int(r, "kills_in_breaker_record", c.by_op[OP_RECORD]);
  lab_obs_int(r, "kills_in_bulkhead", c.by_op[OP_BULKHEAD]);
  lab_obs_int(r, "kills_holding_permit", c.by_op[OP_HOLDING]);
  lab_obs_int(r, "kills_before_first_call", c.by_op[OP_NONE]);
  lab_obs_real(r, "chaos_s", (double)c.ns / 1e9);
  lab_obs_int(r, "loops", loops);
  lab_obs_int(r, "limiter_permits", limiter_go);
  lab_obs_int(r, "breaker_permits", breaker_go);
  lab_obs_int(r, "breaker_rejected", rejected);
  lab_obs_int(r, "bulkhead_acquisitions", bh_go);
  lab_obs_int(r, "bulkhead_full", bh_full);
  lab_obs_int(r, "transitions", (long long)f->transitions);
  lab_obs_int(r, "generation", (long long)f->generation);
  lab_obs_int(r, "checks", c.checkpoints);
  lab_obs_int(r, "checks_made", f->checks);
  lab_obs_int(r, "windows_rolled", f->rolls);
  lab_obs_str(r, "breaker_state_after", f->state);
  lab_obs_bool(r, "window_rolled_after", f->rolled);
  lab_obs_int(r, "limiter_available_after", f->limiter_available);
  lab_obs_int(r, "limiter_permits_in_own_cycle", f->limiter_cycle);
  lab_obs_real(r, "fresh_breaker_ms_max", m4_ms(f->breaker_ns_max));
  lab_obs_real(r, "fresh_limiter_ms_max", m4_ms(f->limiter_ns_max));
  lab_obs_real(r, "fresh_bulkhead_ms_max", m4_ms(f->bh_first_ns_max)); /* the first permit */
  lab_obs_real(r, "permits_back_after_kills_ms_max",
               permits_leaked ? -1.0 : m4_ms(f->bh_back_ns_max));
  lab_obs_int(r, "wedged", f->wedged);
  lab_obs_int(r, "invariant_violations", violations);
  if (f->why[0]) lab_obs_str(r, "first_violation", f->why);
  lab_obs_int(r, "permits_leaked", permits_leaked);
  lab_obs_int(r, "reclaim_rounds", rc.rounds);
  lab_obs_int(r, "reclaims_timed", rc.timed);
  lab_obs_real(r, "reclaim_ms_max", reclaim_ns >= 0 ? m4_ms(reclaim_ns) : -1.0);
  lab_obs_real(r, "duration_s", (double)duration / 1e9);
  lab_summary(r,
              "8 processes, %s: %ld SIGKILLs in %.1f s (%ld holding a permit), %ld calls; "
              "%d checks: %d wedged, %d invariant violations (%d windows rolled), %d of %d "
              "permits leaked, reclaim max %.1f ms",
              wrong ? "a counter bulkhead" : "one shared breaker, limiter and bulkhead", c.kills,
              (double)c.ns / 1e9, c.by_op[OP_HOLDING], breaker_go, f->checks, f->wedged,
              violations, f->rolls, permits_leaked, M4_MAX,
              reclaim_ns >= 0 ? m4_ms(reclaim_ns) : -1.0);
  lab_expect(r, "kills", c.kills >= M4_KILLS && !c.timed_out && c.spawn_failed == 0,
             "%ld kills (%ld forks failed%s), not >= %d", c.kills, c.spawn_failed,
             c.timed_out ? ", stopped at the time bound" : "", M4_KILLS);
  lab_expect(r, "workers_called", breaker_go > 0 && bh_go > 0 && limiter_go > 0 &&
                                      f->transitions > 0,
             "the workers got %ld breaker, %ld bulkhead and %ld limiter permits, %llu "
             "transitions",
             breaker_go, bh_go, limiter_go, (unsigned long long)f->transitions);
  lab_expect(r, "checks_made", c.check_failed == 0 && f->checks == c.checkpoints,
             "%d of %d checker processes could not check", c.checkpoints - f->checks,
             c.checkpoints);
  lab_expect(r, "not_wedged", f->wedged == 0, "%d of the fresh processes' acquisitions: %s",
             f->wedged, f->why);
  lab_expect(r, "invariants_hold", violations == 0, "%d violations (%ld by the workers): %s",
             violations, over, f->violations ? f->why : "more than max_concurrent held");
  lab_expect(r, "windows_rolled", f->rolled && f->rolls >= c.checkpoints / 3,
             "the breaker was %s after the calm (rolled %d), %d of %d checks rolled its window",
             f->state, f->rolled, f->rolls, c.checkpoints);
  lab_expect(r, "no_permit_leaked", permits_leaked == 0,
             "a fresh process got %d of the %d bulkhead permits within 1 s each",
             M4_MAX - permits_leaked, M4_MAX);
  lab_expect(r, "reclaim_within_1s", reclaim_ns >= 0 && reclaim_ns <= RESIL_S(1),
             "%s (%d rounds, %ld holders without a permit)",
             reclaim_ns < 0 ? "a killed holder's permit never came back"
                            : "a killed holder's permit came back after more than 1 s",
             rc.rounds, rc.not_held);
  m4_close(&x);
  return r->pass;
}

static int m4_right(lab_result *r) { return m4_run(r, 0); }
static int m4_wrong(lab_result *r) { return m4_run(r, 1); }

const lab_experiment lab_shared_chaos_experiments[] = {
    {"M4",
     "SIGKILL chaos: 8 processes hammer one shared breaker, rate limiter and bulkhead while "
     "one is killed every few ms and replaced, 1,000 kills: nobody wedged, the invariants "
     "hold, every dead holder's permit back within 1 s",
     m4_right, m4_wrong, "a bulkhead that is a plain shared counter (no owners)",
     "no_permit_leaked", 0},
    {NULL, NULL, NULL, NULL, NULL, NULL, 0}};
