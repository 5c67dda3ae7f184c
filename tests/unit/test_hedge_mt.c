/* One hedge (percentile mode, shared retry budget) driven from several
 * threads at once: every counter adds up, the budget is never overdrawn,
 * and the tracker stays consistent (run under ThreadSanitizer). */
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#include "test_util.h"

enum { THREADS = 4, CALLS = 2000 };

typedef struct shared {
  resil_hedge *h;
  _Atomic long hedges, wins_by_hedge, losers, unsafe;
} shared;

static void *driver(void *p) {
  shared *s = p;
  resil_outcome ok = resil_outcome_http(200), bad = resil_outcome_http(503);
  for (int i = 0; i < CALLS; i++) {
    resil_ctx ctx;
    resil_ctx_init(&ctx);
    ctx.flags = (i % 5 == 0) ? 0 : RESIL_CALL_IDEMPOTENT;
    resil_hedge_call hc;
    int64_t delay;
    if (resil_hedge_begin(s->h, &ctx, &hc, &delay) != RESIL_DECISION_WAIT) {
      atomic_fetch_add(&s->unsafe, 1);
      resil_hedge_record(s->h, &hc, 1, 1000 * (i % 97), &ok);
      continue;
    }
    int sent = 0;
    while (resil_hedge_on_timer(s->h, &hc, &delay) == RESIL_DECISION_GO) sent++;
    atomic_fetch_add(&s->hedges, sent);
    /* The primary fails when hedged, the last hedge wins. */
    if (sent == 0) {
      resil_hedge_record(s->h, &hc, 1, 1000 * (i % 89), &ok);
      continue;
    }
    resil_hedge_record(s->h, &hc, 1, 1000 * (i % 83), &bad);
    if (resil_hedge_record(s->h, &hc, hc.attempts, 1000, &ok) == RESIL_HEDGE_WINNER) {
      atomic_fetch_add(&s->wins_by_hedge, 1);
      atomic_fetch_add(&s->losers, (long)sent - 1);
    }
  }
  return NULL;
}

static void hedge_counters_add_up_under_concurrent_calls(void **state) {
  (void)state;
  resil_retry_budget_config bc;
  resil_retry_budget_config_init(&bc);
  bc.percent_can_retry_pct = 50;
  bc.min_retries_per_s = 0;
  resil_retry_budget *b = NULL;
  assert_status(RESIL_OK, resil_retry_budget_new(&bc, &b, NULL));
  resil_hedge_config cfg;
  resil_hedge_config_init(&cfg);
  cfg.delay_percentile_permille = 950;
  cfg.window_size = 64;
  cfg.min_samples = 8;
  cfg.max_hedges = 2;
  cfg.budget = b;
  cfg.deposit_calls = 1;
  shared s;
  memset(&s, 0, sizeof s);
  assert_status(RESIL_OK, resil_hedge_new(&cfg, &s.h, NULL));
  pthread_t t[THREADS];
  for (int i = 0; i < THREADS; i++)
    assert_int_equal(pthread_create(&t[i], NULL, driver, &s), 0);
  for (int i = 0; i < THREADS; i++) pthread_join(t[i], NULL);
  resil_hedge_metrics m;
  assert_status(RESIL_OK, resil_hedge_get_metrics(s.h, &m));
  assert_int_equal(m.calls, (uint64_t)THREADS * CALLS);
  assert_int_equal(m.passed_unsafe, (uint64_t)atomic_load(&s.unsafe));
  assert_int_equal(m.passed_unsafe, (uint64_t)THREADS * CALLS / 5);
  assert_int_equal(m.hedges_sent, (uint64_t)atomic_load(&s.hedges));
  assert_int_equal(m.hedges_won, (uint64_t)atomic_load(&s.wins_by_hedge));
  assert_int_equal(m.cancelled_losers, (uint64_t)atomic_load(&s.losers));
  /* 50 % of the calls fund hedges: never more were sent. */
  assert_true(m.hedges_sent <= m.calls / 2);
  assert_true(m.hedges_sent > 0);
  assert_true(m.refused_by_budget > 0);
  assert_int_equal(m.samples, 64);
  assert_true(m.delay_ns >= cfg.min_delay_ns && m.delay_ns <= cfg.max_delay_ns);
  resil_hedge_free(s.h);
  resil_retry_budget_free(b);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(hedge_counters_add_up_under_concurrent_calls),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
