/* Circuit breaker under concurrency: HALF_OPEN never admits more than the
 * permitted probes, totals stay consistent under a CLOSED hammering, and
 * transitions, resets and listener changes racing with calls keep every
 * invariant. Run again under ThreadSanitizer. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "test_breaker_common.h"

#define THREADS 4

static void run_threads(void *(*fn)(void *), void *arg) {
  pthread_t th[THREADS];
  for (int i = 0; i < THREADS; i++)
    assert_int_equal(pthread_create(&th[i], NULL, fn, arg), 0);
  for (int i = 0; i < THREADS; i++)
    pthread_join(th[i], NULL);
}

/* ---- HALF_OPEN probes ---------------------------------------------------- */

#define PERMITTED 5

typedef struct probe_run {
  resil_breaker *br;
  atomic_int go;
  atomic_long admitted;
  atomic_long attempts;
  atomic_int in_flight;
  atomic_int max_in_flight;
  atomic_long recorded;
  int iterations;
  int phase; /* 0: keep permits, 1: acquire/release, 2: record success */
  resil_breaker_permit kept[PERMITTED * 4];
  atomic_int nkept;
} probe_run;

static void *probe_worker(void *arg) {
  probe_run *r = arg;
  while (!atomic_load(&r->go)) {
  }
  for (int i = 0; i < r->iterations; i++) {
    resil_breaker_permit p;
    atomic_fetch_add(&r->attempts, 1);
    if (!resil_breaker_try_acquire(r->br, &p))
      continue;
    atomic_fetch_add(&r->admitted, 1);
    if (r->phase == 0) {
      int k = atomic_fetch_add(&r->nkept, 1);
      if (k < PERMITTED * 4)
        r->kept[k] = p;
      continue;
    }
    int now = atomic_fetch_add(&r->in_flight, 1) + 1;
    int seen = atomic_load(&r->max_in_flight);
    while (now > seen &&
           !atomic_compare_exchange_weak(&r->max_in_flight, &seen, now)) {
    }
    for (volatile int spin = 0; spin < 50; spin++) {
    }
    atomic_fetch_sub(&r->in_flight, 1);
    if (r->phase == 1) {
      assert_status(RESIL_OK, resil_breaker_release(r->br, &p));
    } else {
      resil_outcome ok = resil_outcome_ok();
      assert_status(RESIL_OK, resil_breaker_record(r->br, &p, &ok, 1000));
      atomic_fetch_add(&r->recorded, 1);
    }
  }
  return NULL;
}

static void count_closes(void *user, resil_breaker *br,
                         const resil_breaker_event *ev) {
  (void)br;
  if (ev->kind == RESIL_BREAKER_EVENT_TRANSITION &&
      ev->to == RESIL_BREAKER_CLOSED)
    atomic_fetch_add((atomic_int *)user, 1);
}

static void start(probe_run *r, int phase, int iterations) {
  atomic_store(&r->go, 0);
  atomic_store(&r->admitted, 0);
  atomic_store(&r->attempts, 0);
  atomic_store(&r->max_in_flight, 0);
  atomic_store(&r->recorded, 0);
  r->phase = phase;
  r->iterations = iterations;
}

static void *release_go(void *arg) {
  atomic_store(&((probe_run *)arg)->go, 1);
  return NULL;
}

static void run_phase(probe_run *r) {
  pthread_t th[THREADS], g;
  for (int i = 0; i < THREADS; i++)
    assert_int_equal(pthread_create(&th[i], NULL, probe_worker, r), 0);
  assert_int_equal(pthread_create(&g, NULL, release_go, r), 0);
  pthread_join(g, NULL);
  for (int i = 0; i < THREADS; i++)
    pthread_join(th[i], NULL);
}

static void
half_open_never_admits_more_than_the_permitted_probes(void **state) {
  (void)state;
  resil_manual_clock *mc = clock_new();
  resil_breaker_config cfg;
  resil_breaker_config_init(&cfg);
  cfg.window_size = 10;
  cfg.minimum_calls = 10;
  cfg.half_open_permitted_calls = PERMITTED;
  cfg.half_open_max_wait_ns = 0;
  cfg.clock = resil_manual_clock_get(mc);
  probe_run *r = calloc(1, sizeof *r);
  assert_non_null(r);
  r->br = breaker_new(&cfg);
  atomic_int closed_events = 0;
  assert_status(RESIL_OK, resil_breaker_listener_add(r->br, count_closes,
                                                     &closed_events));
  assert_status(RESIL_OK, resil_breaker_transition(r->br, RESIL_BREAKER_OPEN));
  assert_status(RESIL_OK,
                resil_breaker_transition(r->br, RESIL_BREAKER_HALF_OPEN));

  /* Everyone grabs and keeps: exactly PERMITTED permits exist. */
  start(r, 0, 5000);
  run_phase(r);
  assert_int_equal(atomic_load(&r->admitted), PERMITTED);
  resil_breaker_metrics m = metrics_of(r->br);
  assert_int_equal(m.total_not_permitted,
                   (uint64_t)atomic_load(&r->attempts) - PERMITTED);
  assert_int_equal(m.half_open_permits_available, 0);
  for (int i = 0; i < PERMITTED; i++)
    assert_status(RESIL_OK, resil_breaker_release(r->br, &r->kept[i]));
  assert_int_equal(metrics_of(r->br).half_open_permits_available, PERMITTED);

  /* Acquire/release churn: never more than PERMITTED in flight at once,
   * and nothing counted. */
  start(r, 1, 20000);
  run_phase(r);
  assert_true(atomic_load(&r->max_in_flight) <= PERMITTED);
  assert_true(atomic_load(&r->max_in_flight) >= 1);
  assert_true(atomic_load(&r->admitted) > PERMITTED);
  m = metrics_of(r->br);
  assert_int_equal(m.state, RESIL_BREAKER_HALF_OPEN);
  assert_int_equal(m.total_calls, 0);
  assert_int_equal(m.half_open_permits_available, PERMITTED);

  /* Successful probes race: the breaker closes exactly once; results of
   * HALF_OPEN permits that land after it closed are of an older generation
   * and change nothing (not even total_ignored). */
  start(r, 2, 2000);
  run_phase(r);
  assert_true(atomic_load(&r->max_in_flight) <= THREADS);
  m = metrics_of(r->br);
  assert_int_equal(m.state, RESIL_BREAKER_CLOSED);
  assert_int_equal(atomic_load(&closed_events), 1);
  assert_true(m.total_calls <= (uint64_t)atomic_load(&r->recorded));
  assert_true((uint64_t)atomic_load(&r->recorded) - m.total_calls < PERMITTED);
  assert_int_equal(m.total_ignored, 0);
  resil_breaker_free(r->br);
  free(r);
  resil_manual_clock_free(mc);
}

/* ---- CLOSED hammering ---------------------------------------------------- */

#define PER_THREAD 100000

typedef struct hammer {
  resil_breaker *br;
  atomic_int next_id;
} hammer;

static resil_outcome slow_ok(void *arg, const resil_ctx *ctx) {
  (void)arg;
  (void)ctx;
  return resil_outcome_ok();
}

static void *closed_worker(void *arg) {
  hammer *h = arg;
  int id = atomic_fetch_add(&h->next_id, 1);
  for (int i = 0; i < PER_THREAD; i++) {
    /* One failure in four; one slow call in eight (never a failure). */
    int fail = i % 4 == 0, slow = i % 8 == 1;
    if (id % 2 == 1 && !fail && !slow) {
      resil_outcome o = resil_breaker_run(h->br, NULL, slow_ok, NULL);
      assert_int_equal(o.kind, RESIL_ANSWERED);
      continue;
    }
    resil_breaker_permit p;
    assert_int_equal(resil_breaker_try_acquire(h->br, &p), 1);
    resil_outcome o = fail ? resil_outcome_http(502) : resil_outcome_ok();
    assert_status(RESIL_OK,
                  resil_breaker_record(h->br, &p, &o, slow ? MS(2) : 1000));
  }
  return NULL;
}

static void closed_hammering_keeps_totals_and_window_consistent(void **state) {
  (void)state;
  /* A clock that never moves: the run form measures 0 ns however the
   * threads are scheduled, so only the split form's slow calls are slow. */
  resil_manual_clock *mc = clock_new();
  resil_breaker_config cfg;
  resil_breaker_config_init(&cfg);
  cfg.slow_call_duration_ns = MS(1);
  cfg.clock = resil_manual_clock_get(mc);
  hammer h = {.next_id = 0};
  h.br = breaker_new(&cfg);
  run_threads(closed_worker, &h);
  resil_breaker_metrics m = metrics_of(h.br);
  uint64_t n = (uint64_t)THREADS * PER_THREAD;
  assert_int_equal(m.state, RESIL_BREAKER_CLOSED);
  assert_int_equal(m.total_calls, n);
  assert_int_equal(m.total_failures, n / 4);
  assert_int_equal(m.total_successes, n - n / 4);
  assert_int_equal(m.total_slow, n / 8);
  assert_int_equal(m.total_ignored, 0);
  assert_int_equal(m.total_not_permitted, 0);
  assert_int_equal(m.total_transitions, 0);
  assert_int_equal(m.generation, 1);
  /* The window holds the last 100 results. Each thread's share of them is
   * a contiguous run of its own sequence, so it holds a quarter of that
   * run's length in failures, give or take one: 25 +- THREADS. */
  assert_int_equal(m.buffered_calls, 100);
  assert_true(m.failed_calls >= 25 - THREADS && m.failed_calls <= 25 + THREADS);
  assert_true(m.slow_calls <= 13 + THREADS);
  assert_int_equal(m.successful_calls, 100 - m.failed_calls);
  resil_breaker_free(h.br);
  resil_manual_clock_free(mc);
}

/* Mostly successes with a rare failure: the window keeps going from clean
 * (a success only counts) to holding a failure and back while threads
 * contend for the lock. Totals stay exact, and once the threads are done
 * a hundred successes leave a clean, full window again. */
#define RARE_PER_THREAD 20000
#define RARE_EVERY 151

static void *rare_failure_worker(void *arg) {
  hammer *h = arg;
  int id = atomic_fetch_add(&h->next_id, 1);
  for (int i = 0; i < RARE_PER_THREAD; i++) {
    int fail = i % RARE_EVERY == RARE_EVERY - 1;
    if (id % 2 == 1 && !fail) {
      resil_outcome o = resil_breaker_run(h->br, NULL, slow_ok, NULL);
      assert_int_equal(o.kind, RESIL_ANSWERED);
      continue;
    }
    resil_breaker_permit p;
    assert_int_equal(resil_breaker_try_acquire(h->br, &p), 1);
    resil_outcome o = fail ? resil_outcome_http(502) : resil_outcome_ok();
    assert_status(RESIL_OK, resil_breaker_record(h->br, &p, &o, 1000));
  }
  return NULL;
}

static void clean_window_successes_under_contention_stay_exact(void **state) {
  (void)state;
  resil_manual_clock *mc = clock_new();
  resil_breaker_config cfg;
  resil_breaker_config_init(&cfg);
  cfg.clock = resil_manual_clock_get(mc);
  hammer h = {.next_id = 0};
  h.br = breaker_new(&cfg);
  run_threads(rare_failure_worker, &h);
  resil_breaker_metrics m = metrics_of(h.br);
  uint64_t n = (uint64_t)THREADS * RARE_PER_THREAD;
  uint64_t f = (uint64_t)THREADS * (RARE_PER_THREAD / RARE_EVERY);
  assert_int_equal(m.state, RESIL_BREAKER_CLOSED);
  assert_int_equal(m.total_calls, n);
  assert_int_equal(m.total_failures, f);
  assert_int_equal(m.total_slow, 0);
  assert_int_equal(m.buffered_calls, 100);
  /* Each thread fails once in 151 calls: at most one failure of each
   * thread's share of the last hundred results. */
  assert_true(m.failed_calls <= THREADS);
  for (int i = 0; i < 100; i++) {
    resil_breaker_permit p;
    resil_outcome o = resil_outcome_ok();
    assert_int_equal(resil_breaker_try_acquire(h.br, &p), 1);
    assert_status(RESIL_OK, resil_breaker_record(h.br, &p, &o, 1000));
    m = metrics_of(h.br);
    assert_int_equal(m.buffered_calls, 100);
  }
  m = metrics_of(h.br);
  assert_int_equal(m.failed_calls, 0);
  assert_int_equal(m.slow_calls, 0);
  assert_int_equal(m.total_calls, n + 100);
  assert_int_equal(m.total_failures, f);
  resil_breaker_free(h.br);
  resil_manual_clock_free(mc);
}

/* ---- everything at once -------------------------------------------------- */

typedef struct chaos {
  resil_breaker *br;
  resil_manual_clock *mc;
  atomic_int stop;
  atomic_long records;       /* results handed to record() */
  atomic_long rejected_runs; /* run form refusals */
  atomic_long delivered;
  int alive; /* read by the listener, written after remove */
} chaos;

static void chaos_listener(void *user, resil_breaker *br,
                           const resil_breaker_event *ev) {
  (void)br;
  (void)ev;
  chaos *c = user;
  /* A plain read: if remove() returned while a delivery was still running,
   * ThreadSanitizer sees this race with the write after it. */
  if (c->alive != 1)
    fail_msg("listener called after removal");
  atomic_fetch_add(&c->delivered, 1);
}

static resil_outcome failing_call(void *arg, const resil_ctx *ctx) {
  (void)arg;
  (void)ctx;
  return resil_outcome_make(RESIL_UNKNOWN, RESIL_REASON_TIMEOUT);
}

static void *chaos_caller(void *arg) {
  chaos *c = arg;
  unsigned i = 0;
  while (!atomic_load(&c->stop)) {
    i++;
    if (i % 3 == 0) {
      resil_outcome o = resil_breaker_run(c->br, NULL, failing_call, NULL);
      if (o.kind == RESIL_REJECTED)
        atomic_fetch_add(&c->rejected_runs, 1);
      else
        atomic_fetch_add(&c->records, 1);
      continue;
    }
    resil_breaker_permit p;
    if (!resil_breaker_try_acquire(c->br, &p))
      continue;
    if (i % 7 == 0) {
      assert_status(RESIL_OK, resil_breaker_release(c->br, &p));
      continue;
    }
    resil_outcome o = (i % 2) ? resil_outcome_ok() : resil_outcome_http(503);
    assert_status(RESIL_OK, resil_breaker_record(c->br, &p, &o, i % 5));
    atomic_fetch_add(&c->records, 1);
  }
  return NULL;
}

static void *chaos_operator(void *arg) {
  chaos *c = arg;
  static const resil_breaker_state_kind targets[] = {
      RESIL_BREAKER_CLOSED,    RESIL_BREAKER_OPEN,
      RESIL_BREAKER_HALF_OPEN, RESIL_BREAKER_METRICS_ONLY,
      RESIL_BREAKER_DISABLED,  RESIL_BREAKER_FORCED_OPEN};
  for (unsigned i = 0; i < 3000; i++) {
    resil_manual_clock_advance_ns(c->mc, MS(3));
    if (i % 11 == 0) {
      assert_status(RESIL_OK, resil_breaker_reset(c->br));
    } else {
      resil_status st = resil_breaker_transition(c->br, targets[i % 6]);
      assert_true(st == RESIL_OK || st == RESIL_ESTATE);
    }
    resil_breaker_metrics m;
    assert_status(RESIL_OK, resil_breaker_get_metrics(c->br, &m));
    assert_true(m.buffered_calls >= m.failed_calls);
    resil_breaker_event ev[8];
    size_t n = resil_breaker_events(c->br, ev, 8);
    for (size_t k = 1; k < n; k++)
      assert_int_equal(ev[k].seq, ev[k - 1].seq + 1);
  }
  atomic_store(&c->stop, 1);
  return NULL;
}

static void transitions_racing_with_calls_keep_every_invariant(void **state) {
  (void)state;
  chaos c;
  memset(&c, 0, sizeof c);
  c.mc = clock_new();
  resil_breaker_config cfg;
  resil_breaker_config_init(&cfg);
  cfg.window_size = 8;
  cfg.minimum_calls = 4;
  cfg.open_wait_ns = MS(2);
  cfg.half_open_permitted_calls = 2;
  cfg.half_open_max_wait_ns = MS(5);
  cfg.automatic_half_open = 1;
  cfg.open_wait_multiplier = 1.5;
  cfg.open_wait_max_ns = MS(20);
  cfg.clock = resil_manual_clock_get(c.mc);
  c.br = breaker_new(&cfg);
  c.alive = 1;
  pthread_t callers[THREADS - 1], op;
  for (int i = 0; i < THREADS - 1; i++)
    assert_int_equal(pthread_create(&callers[i], NULL, chaos_caller, &c), 0);
  assert_int_equal(pthread_create(&op, NULL, chaos_operator, &c), 0);
  /* Listeners come and go while events flow. */
  for (int i = 0; i < 200 && !atomic_load(&c.stop); i++) {
    assert_status(RESIL_OK,
                  resil_breaker_listener_add(c.br, chaos_listener, &c));
    assert_status(RESIL_OK,
                  resil_breaker_listener_remove(c.br, chaos_listener, &c));
    /* Removed and waited for: writing what the listener reads is safe. */
    c.alive = 2;
    c.alive = 1;
  }
  pthread_join(op, NULL);
  for (int i = 0; i < THREADS - 1; i++)
    pthread_join(callers[i], NULL);

  resil_breaker_metrics m = metrics_of(c.br);
  /* Every result handed to record() was counted, except those of an older
   * generation and those recorded in DISABLED, which change nothing: so
   * at most equal. No class is ignored here. */
  assert_true(m.total_calls <= (uint64_t)atomic_load(&c.records));
  assert_int_equal(m.total_ignored, 0);
  assert_int_equal(m.total_calls, m.total_successes + m.total_failures);
  assert_true(m.total_not_permitted >= (uint64_t)atomic_load(&c.rejected_runs));
  assert_true(m.total_transitions > 100);
  assert_true(m.buffered_calls <= 8);
  resil_breaker_free(c.br);
  resil_manual_clock_free(c.mc);
}

/* ---- idle catch-up shared by threads --------------------------------------- */

typedef struct catchup {
  resil_breaker *br;
  atomic_long transitions; /* TRANSITION events delivered */
  atomic_long bad_order;   /* a thread saw its own events out of seq order */
} catchup;

static _Thread_local uint64_t tl_last_seq;

static void catchup_listener(void *user, resil_breaker *br,
                             const resil_breaker_event *ev) {
  (void)br;
  catchup *c = user;
  if (ev->seq <= tl_last_seq)
    atomic_fetch_add(&c->bad_order, 1);
  tl_last_seq = ev->seq;
  if (ev->kind == RESIL_BREAKER_EVENT_TRANSITION)
    atomic_fetch_add(&c->transitions, 1);
}

static void *catchup_worker(void *arg) {
  catchup *c = arg;
  tl_last_seq = 0;
  for (int i = 0; i < 40; i++) {
    resil_breaker_permit p;
    switch (i % 3) {
    case 0:
      (void)resil_breaker_state(c->br);
      break;
    case 1:
      if (resil_breaker_try_acquire(c->br, &p) == RESIL_DECISION_GO)
        assert_status(RESIL_OK, resil_breaker_release(c->br, &p));
      break;
    default: {
      resil_breaker_metrics m;
      assert_status(RESIL_OK, resil_breaker_get_metrics(c->br, &m));
    }
    }
  }
  return NULL;
}

static void idle_catch_up_delivers_each_transition_once(void **state) {
  (void)state;
  resil_manual_clock *mc = clock_new();
  resil_breaker_config cfg;
  resil_breaker_config_init(&cfg);
  cfg.open_wait_ns = MS(1);
  cfg.half_open_max_wait_ns = MS(1);
  cfg.automatic_half_open = 1;
  cfg.clock = resil_manual_clock_get(mc);
  catchup c;
  memset(&c, 0, sizeof c);
  c.br = breaker_new(&cfg);
  assert_status(RESIL_OK,
                resil_breaker_listener_add(c.br, catchup_listener, &c));
  assert_status(RESIL_OK, resil_breaker_transition(c.br, RESIL_BREAKER_OPEN));
  /* An idle day of 2 ms cycles: threads share the catch-up, each call
   * applying at most RESIL_BREAKER_MAX_CATCHUP transitions. */
  resil_manual_clock_advance_ns(mc, 86400 * INT64_C(1000000000));
  run_threads(catchup_worker, &c);
  resil_breaker_metrics m = metrics_of(c.br);
  assert_true(m.total_transitions > 4 * RESIL_BREAKER_MAX_CATCHUP);
  assert_true(m.total_transitions <=
              1 + (uint64_t)(THREADS * 40 + 1) * RESIL_BREAKER_MAX_CATCHUP);
  assert_int_equal((uint64_t)atomic_load(&c.transitions), m.total_transitions);
  assert_int_equal(atomic_load(&c.bad_order), 0);
  resil_breaker_free(c.br);
  resil_manual_clock_free(mc);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(half_open_never_admits_more_than_the_permitted_probes),
      cmocka_unit_test(closed_hammering_keeps_totals_and_window_consistent),
      cmocka_unit_test(clean_window_successes_under_contention_stay_exact),
      cmocka_unit_test(transitions_racing_with_calls_keep_every_invariant),
      cmocka_unit_test(idle_catch_up_delivers_each_transition_once),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
