/* Concurrency: a retry budget and a retry shared by many threads. Run again
 * under ThreadSanitizer (label "concurrency"). */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <string.h>

#include "test_util.h"

#define THREADS 8

typedef struct shared {
  resil_retry_budget *b;
  resil_retry *r;
  resil_manual_clock *mc;
  int iterations;
  atomic_long granted;
  atomic_long deposited;
  atomic_int done;
  atomic_int bad;
  pthread_barrier_t start; /* used by withdraw_together */
} shared;

static resil_retry_budget *budget_new(resil_retry_budget_config *bc) {
  resil_retry_budget *b = NULL;
  resil_error err;
  if (resil_retry_budget_new(bc, &b, &err) != RESIL_OK)
    fail_msg("resil_retry_budget_new: %s", err.msg);
  return b;
}

static void run_threads(void *(*fn)(void *), shared *sh, int n) {
  pthread_t t[THREADS * 2];
  for (int i = 0; i < n; i++)
    assert_int_equal(pthread_create(&t[i], NULL, fn, sh), 0);
  for (int i = 0; i < n; i++) pthread_join(t[i], NULL);
}

static void *withdraw_many(void *arg) {
  shared *sh = arg;
  for (int i = 0; i < sh->iterations; i++)
    if (resil_retry_budget_try_withdraw(sh->b)) atomic_fetch_add(&sh->granted, 1);
  return NULL;
}

static void concurrent_withdrawals_never_exceed_the_balance(void **state) {
  (void)state;
  shared sh;
  memset(&sh, 0, sizeof sh);
  assert_status(RESIL_OK, resil_manual_clock_new(0, 0, &sh.mc));
  resil_retry_budget_config bc;
  resil_retry_budget_config_init(&bc);
  bc.percent_can_retry_pct = 0;
  bc.min_retries_per_s = 100; /* a reserve of 100 x 10 s = 1000 tokens */
  bc.clock = resil_manual_clock_get(sh.mc);
  sh.b = budget_new(&bc);
  sh.iterations = 500; /* 8 x 500 = 4000 requests for 1000 tokens */
  run_threads(withdraw_many, &sh, THREADS);
  assert_int_equal(atomic_load(&sh.granted), 1000);
  assert_int_equal(resil_retry_budget_balance(sh.b), 0);
  resil_retry_budget_free(sh.b);
  resil_manual_clock_free(sh.mc);
}

static void *withdraw_together(void *arg) {
  shared *sh = arg;
  pthread_barrier_wait(&sh->start);
  for (int i = 0; i < sh->iterations; i++)
    if (resil_retry_budget_try_withdraw(sh->b)) atomic_fetch_add(&sh->granted, 1);
  return NULL;
}

/* Many short rounds started together: a check-then-act race shows up as a
 * round granting more than the reserve. */
static void concurrent_withdrawals_never_exceed_the_balance_in_any_round(
    void **state) {
  (void)state;
  resil_manual_clock *mc = NULL;
  assert_status(RESIL_OK, resil_manual_clock_new(0, 0, &mc));
  for (int round = 0; round < 500; round++) {
    shared sh;
    memset(&sh, 0, sizeof sh);
    resil_retry_budget_config bc;
    resil_retry_budget_config_init(&bc);
    bc.percent_can_retry_pct = 0;
    bc.min_retries_per_s = 1;
    bc.ttl_ns = MS(1000); /* a reserve of one token, raced for at once */
    bc.clock = resil_manual_clock_get(mc);
    sh.b = budget_new(&bc);
    sh.iterations = 4;
    assert_int_equal(pthread_barrier_init(&sh.start, NULL, THREADS), 0);
    run_threads(withdraw_together, &sh, THREADS);
    pthread_barrier_destroy(&sh.start);
    long granted = atomic_load(&sh.granted);
    resil_retry_budget_free(sh.b);
    if (granted != 1) {
      resil_manual_clock_free(mc);
      fail_msg("round %d granted %ld of 1 token", round, granted);
    }
  }
  resil_manual_clock_free(mc);
}

static void *deposit_many(void *arg) {
  shared *sh = arg;
  for (int i = 0; i < sh->iterations; i++) {
    resil_retry_budget_deposit(sh->b);
    atomic_fetch_add(&sh->deposited, 1);
  }
  return NULL;
}

static void *withdraw_until_done(void *arg) {
  shared *sh = arg;
  for (;;) {
    int finished = atomic_load(&sh->done);
    if (resil_retry_budget_try_withdraw(sh->b)) {
      atomic_fetch_add(&sh->granted, 1);
      /* 20 %: never more than a fifth of what was deposited so far. */
      if (atomic_load(&sh->granted) * 5 > atomic_load(&sh->deposited) + 5 * THREADS)
        atomic_store(&sh->bad, 1);
    } else if (finished) {
      return NULL; /* drained after the last deposit */
    }
  }
}

static void *depositors_then_done(void *arg) {
  shared *sh = arg;
  pthread_t t[THREADS / 2];
  for (int i = 0; i < THREADS / 2; i++)
    pthread_create(&t[i], NULL, deposit_many, sh);
  for (int i = 0; i < THREADS / 2; i++) pthread_join(t[i], NULL);
  atomic_store(&sh->done, 1);
  return NULL;
}

static void deposits_and_withdrawals_race_without_losing_a_token(void **state) {
  (void)state;
  shared sh;
  memset(&sh, 0, sizeof sh);
  assert_status(RESIL_OK, resil_manual_clock_new(0, 0, &sh.mc));
  resil_retry_budget_config bc;
  resil_retry_budget_config_init(&bc);
  bc.percent_can_retry_pct = 20;
  bc.min_retries_per_s = 0;
  bc.clock = resil_manual_clock_get(sh.mc);
  sh.b = budget_new(&bc);
  sh.iterations = 20000;
  pthread_t dep, wd[THREADS / 2];
  assert_int_equal(pthread_create(&dep, NULL, depositors_then_done, &sh), 0);
  for (int i = 0; i < THREADS / 2; i++)
    assert_int_equal(pthread_create(&wd[i], NULL, withdraw_until_done, &sh), 0);
  pthread_join(dep, NULL);
  for (int i = 0; i < THREADS / 2; i++) pthread_join(wd[i], NULL);
  /* 4 x 20000 deposits at 20 % = 16000 tokens: every one withdrawn exactly
   * once, none invented. */
  assert_int_equal(atomic_load(&sh.granted), 16000);
  assert_int_equal(resil_retry_budget_balance(sh.b), 0);
  assert_false(atomic_load(&sh.bad));
  resil_retry_budget_free(sh.b);
  resil_manual_clock_free(sh.mc);
}

static void *advance_clock_while_running(void *arg) {
  shared *sh = arg;
  while (!atomic_load(&sh->done)) {
    resil_manual_clock_advance_ns(sh->mc, MS(37));
    sched_yield();
  }
  return NULL;
}

static void window_rotation_under_contention_never_overdraws(void **state) {
  (void)state;
  shared sh;
  memset(&sh, 0, sizeof sh);
  assert_status(RESIL_OK, resil_manual_clock_new(0, 0, &sh.mc));
  resil_retry_budget_config bc;
  resil_retry_budget_config_init(&bc);
  bc.percent_can_retry_pct = 20;
  bc.min_retries_per_s = 0;
  bc.ttl_ns = MS(1000); /* 100 ms slices, rotated constantly below */
  bc.clock = resil_manual_clock_get(sh.mc);
  sh.b = budget_new(&bc);
  sh.iterations = 20000;
  pthread_t clk, dep, wd[THREADS / 2];
  assert_int_equal(pthread_create(&clk, NULL, advance_clock_while_running, &sh), 0);
  assert_int_equal(pthread_create(&dep, NULL, depositors_then_done, &sh), 0);
  for (int i = 0; i < THREADS / 2; i++)
    assert_int_equal(pthread_create(&wd[i], NULL, withdraw_until_done, &sh), 0);
  pthread_join(dep, NULL);
  for (int i = 0; i < THREADS / 2; i++) pthread_join(wd[i], NULL);
  pthread_join(clk, NULL);
  /* Expiry only removes credit: never more than a fifth of the deposits. */
  assert_true(atomic_load(&sh.granted) * 5 <= atomic_load(&sh.deposited));
  assert_false(atomic_load(&sh.bad));
  assert_true(resil_retry_budget_balance(sh.b) >= 0);
  resil_retry_budget_free(sh.b);
  resil_manual_clock_free(sh.mc);
}

static void *grpc_churn(void *arg) {
  shared *sh = arg;
  for (int i = 0; i < sh->iterations; i++) {
    if (i % 3 == 0)
      resil_retry_budget_record_failure(sh->b);
    else
      resil_retry_budget_deposit(sh->b);
    int64_t bal = resil_retry_budget_balance(sh->b);
    if (bal < 0 || bal > 10) atomic_store(&sh->bad, 1);
    resil_retry_budget_try_withdraw(sh->b);
  }
  return NULL;
}

static void grpc_token_count_stays_within_zero_and_max(void **state) {
  (void)state;
  shared sh;
  memset(&sh, 0, sizeof sh);
  resil_retry_budget_config bc;
  resil_retry_budget_config_init(&bc);
  bc.mode = RESIL_BUDGET_GRPC;
  bc.max_tokens = 10;
  bc.token_ratio_milli = 500;
  sh.b = budget_new(&bc);
  sh.iterations = 20000;
  run_threads(grpc_churn, &sh, THREADS);
  assert_false(atomic_load(&sh.bad));
  int64_t bal = resil_retry_budget_balance(sh.b);
  assert_true(bal >= 0 && bal <= 10);
  resil_retry_budget_free(sh.b);
}

/* Fails the first attempt of every logical call, then succeeds. */
static resil_outcome fail_first_attempt(void *arg, const resil_ctx *ctx) {
  (void)arg;
  if (ctx->attempt == 1)
    return resil_outcome_make(RESIL_NOT_SENT, RESIL_REASON_CONNECT_REFUSED);
  return resil_outcome_ok();
}

static void *run_many(void *arg) {
  shared *sh = arg;
  for (int i = 0; i < sh->iterations; i++) {
    resil_outcome o = resil_retry_run(sh->r, NULL, fail_first_attempt, NULL);
    if (o.stop != RESIL_STOP_SUCCESS || o.attempts != 2)
      atomic_store(&sh->bad, 1);
  }
  return NULL;
}

static void shared_retry_counts_every_call_from_many_threads(void **state) {
  (void)state;
  shared sh;
  memset(&sh, 0, sizeof sh);
  assert_status(RESIL_OK, resil_manual_clock_new(0, 0, &sh.mc));
  resil_retry_budget_config bc;
  resil_retry_budget_config_init(&bc);
  bc.percent_can_retry_pct = 100; /* each call pays for its own retry */
  bc.min_retries_per_s = 0;
  /* The budget's window stands still (its own clock) while the retry's
   * sleeps move the other one: no deposit expires during the test. */
  resil_manual_clock *budget_clock = NULL;
  assert_status(RESIL_OK, resil_manual_clock_new(0, 0, &budget_clock));
  bc.clock = resil_manual_clock_get(budget_clock);
  sh.b = budget_new(&bc);
  resil_retry_config c;
  resil_retry_config_init(&c);
  c.backoff = RESIL_RETRY_EXPONENTIAL_FULL_JITTER; /* per-call generators */
  c.initial_wait_ns = MS(1);
  c.budget = sh.b;
  c.clock = resil_manual_clock_get(sh.mc);
  assert_status(RESIL_OK, resil_retry_new(&c, &sh.r, NULL));
  sh.iterations = 2000;
  run_threads(run_many, &sh, THREADS);
  assert_false(atomic_load(&sh.bad));
  resil_retry_stats st;
  assert_status(RESIL_OK, resil_retry_get_stats(sh.r, &st));
  assert_int_equal(st.calls, THREADS * 2000);
  assert_int_equal(st.attempts, THREADS * 2000 * 2);
  assert_int_equal(st.successful_with_retry, THREADS * 2000);
  assert_int_equal(st.successful_without_retry, 0);
  assert_int_equal(st.refused_by_budget, 0);
  assert_int_equal(resil_retry_budget_balance(sh.b), 0);
  resil_retry_free(sh.r);
  assert_true(resil_manual_clock_slept_ns(sh.mc) > 0);
  resil_retry_budget_free(sh.b);
  resil_manual_clock_free(budget_clock);
  resil_manual_clock_free(sh.mc);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(concurrent_withdrawals_never_exceed_the_balance),
      cmocka_unit_test(
          concurrent_withdrawals_never_exceed_the_balance_in_any_round),
      cmocka_unit_test(deposits_and_withdrawals_race_without_losing_a_token),
      cmocka_unit_test(window_rotation_under_contention_never_overdraws),
      cmocka_unit_test(grpc_token_count_stays_within_zero_and_max),
      cmocka_unit_test(shared_retry_counts_every_call_from_many_threads),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
