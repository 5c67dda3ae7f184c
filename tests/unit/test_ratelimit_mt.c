/* Rate limiter under concurrency: permits are never over-issued within a
 * cycle, and with a manual clock every cycle grants exactly its limit. */
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#include "test_util.h"

#define THREADS 8
#define HOUR (INT64_C(3600) * INT64_C(1000000000))

typedef struct shared {
  resil_ratelimiter *rl;
  pthread_barrier_t start;
  pthread_barrier_t phase_done;
  int phases;
  int tries;
  _Atomic long permitted;
  _Atomic long refused;
  _Atomic long by_wait[8]; /* reservations by wait, in whole periods */
  int64_t period_ns;
} shared;

static void *hammer(void *p) {
  shared *s = p;
  pthread_barrier_wait(&s->start);
  for (int i = 0; i < s->tries; i++) {
    if (resil_ratelimiter_acquire(s->rl, 1, NULL, NULL) == RESIL_DECISION_GO)
      atomic_fetch_add(&s->permitted, 1);
    else
      atomic_fetch_add(&s->refused, 1);
  }
  return NULL;
}

static void run_threads(shared *s, void *(*fn)(void *)) {
  pthread_t t[THREADS];
  for (int i = 0; i < THREADS; i++)
    assert_int_equal(pthread_create(&t[i], NULL, fn, s), 0);
  for (int i = 0; i < THREADS; i++) pthread_join(t[i], NULL);
}

static void ratelimiter_threads_never_obtain_more_than_the_limit_in_a_cycle(
    void **state) {
  (void)state;
  resil_ratelimiter_config cfg;
  resil_ratelimiter_config_init(&cfg);
  cfg.limit_for_period = 1000;
  cfg.refresh_period_ns = HOUR; /* the test runs within the first cycle */
  cfg.timeout_ns = 0;
  shared s;
  memset(&s, 0, sizeof s);
  assert_status(RESIL_OK, resil_ratelimiter_new(&cfg, &s.rl, NULL));
  s.tries = 2000;
  pthread_barrier_init(&s.start, NULL, THREADS);
  run_threads(&s, hammer);
  pthread_barrier_destroy(&s.start);
  assert_int_equal(atomic_load(&s.permitted), 1000);
  assert_int_equal(atomic_load(&s.refused), THREADS * 2000 - 1000);
  assert_int_equal(resil_ratelimiter_available(s.rl), 0);
  resil_ratelimiter_metrics m;
  assert_status(RESIL_OK, resil_ratelimiter_get_metrics(s.rl, &m));
  assert_int_equal(m.permitted, 1000);
  assert_int_equal(m.refused, THREADS * 2000 - 1000);
  resil_ratelimiter_free(s.rl);
}

/* Phases on a manual clock: all threads hammer one cycle until refused,
 * then the main thread moves the clock one period on. */
static void *phased(void *p) {
  shared *s = p;
  for (int ph = 0; ph < s->phases; ph++) {
    pthread_barrier_wait(&s->start);
    for (int i = 0; i < s->tries; i++) {
      if (resil_ratelimiter_acquire(s->rl, 1, NULL, NULL) == RESIL_DECISION_GO)
        atomic_fetch_add(&s->permitted, 1);
    }
    pthread_barrier_wait(&s->phase_done);
  }
  return NULL;
}

static void ratelimiter_manual_clock_cycles_grant_exactly_the_limit_each(
    void **state) {
  (void)state;
  resil_manual_clock *mc;
  assert_status(RESIL_OK, resil_manual_clock_new(0, 0, &mc));
  resil_ratelimiter_config cfg;
  resil_ratelimiter_config_init(&cfg);
  cfg.limit_for_period = 97;
  cfg.refresh_period_ns = MS(10);
  cfg.timeout_ns = 0;
  cfg.clock = resil_manual_clock_get(mc);
  shared s;
  memset(&s, 0, sizeof s);
  assert_status(RESIL_OK, resil_ratelimiter_new(&cfg, &s.rl, NULL));
  s.phases = 6;
  s.tries = 50;
  pthread_barrier_init(&s.start, NULL, THREADS + 1);
  pthread_barrier_init(&s.phase_done, NULL, THREADS + 1);
  pthread_t t[THREADS];
  for (int i = 0; i < THREADS; i++)
    assert_int_equal(pthread_create(&t[i], NULL, phased, &s), 0);
  for (int ph = 0; ph < s.phases; ph++) {
    atomic_store(&s.permitted, 0);
    pthread_barrier_wait(&s.start);
    pthread_barrier_wait(&s.phase_done);
    assert_int_equal(atomic_load(&s.permitted), 97);
    assert_int_equal(resil_ratelimiter_available(s.rl), 0);
    /* Part of a period, then the rest: the cycle changes exactly once. */
    resil_manual_clock_advance_ns(mc, MS(3));
    assert_int_equal(resil_ratelimiter_available(s.rl), 0);
    resil_manual_clock_advance_ns(mc, MS(7));
  }
  for (int i = 0; i < THREADS; i++) pthread_join(t[i], NULL);
  pthread_barrier_destroy(&s.start);
  pthread_barrier_destroy(&s.phase_done);
  resil_ratelimiter_metrics m;
  assert_status(RESIL_OK, resil_ratelimiter_get_metrics(s.rl, &m));
  assert_int_equal(m.permitted, 6 * 97);
  assert_int_equal(m.refused, 6 * (THREADS * 50 - 97));
  assert_int_equal(m.reserved, 0);
  resil_ratelimiter_free(s.rl);
  resil_manual_clock_free(mc);
}

static void *reserver(void *p) {
  shared *s = p;
  pthread_barrier_wait(&s->start);
  for (int i = 0; i < s->tries; i++) {
    int64_t wait;
    resil_decision d = resil_ratelimiter_reserve(s->rl, 1, NULL, &wait, NULL);
    if (d == RESIL_DECISION_DENY) {
      atomic_fetch_add(&s->refused, 1);
      continue;
    }
    atomic_fetch_add(&s->permitted, 1);
    long k = (long)(wait / s->period_ns);
    if (wait % s->period_ns == 0 && k >= 0 && k < 8)
      atomic_fetch_add(&s->by_wait[k], 1);
  }
  return NULL;
}

/* At the start of a cycle with a timeout of 3 periods, exactly 4 cycles'
 * permits can be had: the current one's now, and 3 more with waits of
 * exactly 1, 2 and 3 periods. */
static void ratelimiter_concurrent_reservations_take_exactly_the_cycles_in_reach(
    void **state) {
  (void)state;
  resil_manual_clock *mc;
  assert_status(RESIL_OK, resil_manual_clock_new(0, 0, &mc));
  resil_ratelimiter_config cfg;
  resil_ratelimiter_config_init(&cfg);
  cfg.limit_for_period = 50;
  cfg.refresh_period_ns = MS(10);
  cfg.timeout_ns = MS(30);
  cfg.clock = resil_manual_clock_get(mc);
  shared s;
  memset(&s, 0, sizeof s);
  s.period_ns = MS(10);
  s.tries = 100;
  assert_status(RESIL_OK, resil_ratelimiter_new(&cfg, &s.rl, NULL));
  pthread_barrier_init(&s.start, NULL, THREADS);
  run_threads(&s, reserver);
  pthread_barrier_destroy(&s.start);
  assert_int_equal(atomic_load(&s.permitted), 200);
  for (int k = 0; k < 4; k++) assert_int_equal(atomic_load(&s.by_wait[k]), 50);
  assert_int_equal(resil_ratelimiter_available(s.rl), -150);
  resil_ratelimiter_metrics m;
  assert_status(RESIL_OK, resil_ratelimiter_get_metrics(s.rl, &m));
  assert_int_equal(m.permitted, 50);
  assert_int_equal(m.reserved, 150);
  assert_int_equal(m.refused, THREADS * 100 - 200);
  resil_ratelimiter_free(s.rl);
  resil_manual_clock_free(mc);
}

/* The default 500 ns period on the real clock: threads race across many
 * cycle changes. Grants can never exceed the limit times the cycles the run
 * spanned. */
static void *timed_hammer(void *p) {
  shared *s = p;
  pthread_barrier_wait(&s->start);
  for (int i = 0; i < s->tries; i++) {
    if (resil_ratelimiter_reserve(s->rl, 1, NULL, NULL, NULL) == RESIL_DECISION_GO)
      atomic_fetch_add(&s->permitted, 1);
    else
      atomic_fetch_add(&s->refused, 1);
  }
  return NULL;
}

static void ratelimiter_short_real_cycles_never_over_issue(void **state) {
  (void)state;
  resil_ratelimiter_config cfg;
  resil_ratelimiter_config_init(&cfg);
  cfg.limit_for_period = 3;
  cfg.refresh_period_ns = 2000;
  cfg.timeout_ns = 0;
  shared s;
  memset(&s, 0, sizeof s);
  s.tries = 20000;
  int64_t t0 = resil_clock_now_ns(NULL);
  assert_status(RESIL_OK, resil_ratelimiter_new(&cfg, &s.rl, NULL));
  pthread_barrier_init(&s.start, NULL, THREADS);
  run_threads(&s, timed_hammer);
  int64_t t1 = resil_clock_now_ns(NULL);
  pthread_barrier_destroy(&s.start);
  long cycles = (long)((t1 - t0) / 2000) + 1;
  long permitted = atomic_load(&s.permitted);
  assert_true(permitted > 0);
  assert_true(permitted <= 3 * cycles);
  assert_int_equal(permitted + atomic_load(&s.refused), THREADS * 20000);
  resil_ratelimiter_free(s.rl);
}

/* Every acquire granted at once (the fast path) from more threads than the
 * limiter's counter shards have slots, in two waves: the permitted figure
 * is exact. */
static void ratelimiter_metrics_are_exact_across_many_threads(void **state) {
  (void)state;
  resil_ratelimiter_config cfg;
  resil_ratelimiter_config_init(&cfg);
  cfg.limit_for_period = 2147483647;
  cfg.refresh_period_ns = HOUR;
  cfg.timeout_ns = 0;
  shared s;
  memset(&s, 0, sizeof s);
  assert_status(RESIL_OK, resil_ratelimiter_new(&cfg, &s.rl, NULL));
  s.tries = 5000;
  enum { MANY = 20 };
  for (int wave = 0; wave < 2; wave++) {
    pthread_t t[MANY];
    pthread_barrier_init(&s.start, NULL, MANY);
    for (int i = 0; i < MANY; i++)
      assert_int_equal(pthread_create(&t[i], NULL, hammer, &s), 0);
    for (int i = 0; i < MANY; i++) pthread_join(t[i], NULL);
    pthread_barrier_destroy(&s.start);
  }
  assert_int_equal(atomic_load(&s.permitted), 2 * MANY * 5000);
  resil_ratelimiter_metrics m;
  assert_status(RESIL_OK, resil_ratelimiter_get_metrics(s.rl, &m));
  assert_int_equal(m.permitted, 2 * MANY * 5000);
  assert_int_equal(m.refused, 0);
  assert_int_equal(m.available, 2147483647 - 2 * MANY * 5000);
  resil_ratelimiter_free(s.rl);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(
          ratelimiter_threads_never_obtain_more_than_the_limit_in_a_cycle),
      cmocka_unit_test(
          ratelimiter_manual_clock_cycles_grant_exactly_the_limit_each),
      cmocka_unit_test(
          ratelimiter_concurrent_reservations_take_exactly_the_cycles_in_reach),
      cmocka_unit_test(ratelimiter_short_real_cycles_never_over_issue),
      cmocka_unit_test(ratelimiter_metrics_are_exact_across_many_threads),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
