/* Metrics under concurrency: renders while other threads update the
 * instances (counters never go down, every render parses), and the rate
 * limiter's waiting gauge while a caller really sleeps for a permit. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "metrics_common.h"

typedef struct worker {
  mx_set *s;
  atomic_int *stop;
} worker;

static void *work(void *arg) {
  worker *w = arg;
  while (!atomic_load(w->stop)) {
    resil_chain_run(w->s->ch, NULL, mx_ok, NULL);
    resil_breaker_permit p;
    if (resil_breaker_try_acquire(w->s->br, &p) == RESIL_DECISION_GO) {
      resil_outcome o = resil_outcome_make(RESIL_NOT_SENT, RESIL_REASON_CONNECT_REFUSED);
      resil_breaker_record(w->s->br, &p, &o, 0);
    }
    if (resil_bulkhead_try_acquire(w->s->bh, NULL) == RESIL_DECISION_GO)
      resil_bulkhead_release(w->s->bh);
  }
  return NULL;
}

static double value_of(const char *text, const char *series) {
  size_t n = strlen(series);
  for (const char *p = text; (p = strstr(p, series)) != NULL; p++)
    if ((p == text || p[-1] == '\n') && p[n] == ' ') return strtod(p + n + 1, NULL);
  fail_msg("no sample %s", series);
  return 0;
}

static void render_while_updating_keeps_counters_monotonic(void **state) {
  (void)state;
  mx_set s;
  mx_make(&s);
  atomic_int stop = 0;
  worker w = {&s, &stop};
  pthread_t th[2];
  for (int i = 0; i < 2; i++) assert_int_equal(0, pthread_create(&th[i], NULL, work, &w));
  const char *series[] = {
      "resil_circuitbreaker_calls_total{name=\"payments\",kind=\"failed\"}",
      "resil_circuitbreaker_calls_total{name=\"payments\",kind=\"not_permitted\"}",
      "resil_chain_call_attempts_total{name=\"checkout\"}",
      "resil_bulkhead_calls_total{name=\"db\",kind=\"permitted\"}"};
  double last[4] = {0};
  for (int round = 0; round < 300; round++) {
    char *text = NULL;
    size_t len = 0;
    assert_status(RESIL_OK, resil_metrics_render_alloc(s.m, &text, &len));
    assert_int_equal(strlen(text), len);
    for (int i = 0; i < 4; i++) {
      double v = value_of(text, series[i]);
      if (v < last[i]) fail_msg("%s went down: %g -> %g", series[i], last[i], v);
      last[i] = v;
    }
    /* A state is one-hot in every render. */
    int ones = 0;
    for (const char *p = text; (p = strstr(p, "resil_circuitbreaker_state{")) != NULL; p++)
      ones += strstr(p, "} 1\n") == strchr(p, '}');
    assert_int_equal(1, ones);
    resil_metrics_text_free(s.m, text);
  }
  atomic_store(&stop, 1);
  for (int i = 0; i < 2; i++) pthread_join(th[i], NULL);
  assert_true(last[2] > 0);
  mx_free(&s);
}

typedef struct waiter {
  resil_ratelimiter *rl;
  resil_ctx ctx;
  resil_decision d;
} waiter;

static void *wait_permit(void *arg) {
  waiter *w = arg;
  w->d = resil_ratelimiter_acquire(w->rl, 1, &w->ctx, NULL);
  return NULL;
}

static uint64_t waiting(resil_ratelimiter *rl) {
  resil_ratelimiter_metrics mt;
  assert_status(RESIL_OK, resil_ratelimiter_get_metrics(rl, &mt));
  return mt.waiting;
}

/* Since 0.2: resil_ratelimiter_metrics.waiting counts the callers sleeping
 * in resil_ratelimiter_acquire (real clock: 1 permit per hour, so the
 * second caller sleeps until its token is cancelled). */
static void ratelimiter_counts_callers_waiting_for_a_permit(void **state) {
  (void)state;
  resil_ratelimiter_config cfg;
  resil_ratelimiter_config_init(&cfg);
  cfg.limit_for_period = 1;
  cfg.refresh_period_ns = RESIL_H(1);
  cfg.timeout_ns = RESIL_H(2);
  resil_ratelimiter *rl = NULL;
  assert_status(RESIL_OK, resil_ratelimiter_new(&cfg, &rl, NULL));
  assert_int_equal(RESIL_DECISION_GO, resil_ratelimiter_acquire(rl, 1, NULL, NULL));
  assert_int_equal(0, waiting(rl));
  resil_cancel *tok = NULL;
  assert_status(RESIL_OK, resil_cancel_new(&tok));
  waiter w = {.rl = rl, .d = RESIL_DECISION_GO};
  resil_ctx_init(&w.ctx);
  w.ctx.cancel = tok;
  pthread_t th;
  assert_int_equal(0, pthread_create(&th, NULL, wait_permit, &w));
  for (int i = 0; i < 6000 && waiting(rl) == 0; i++) test_sleep_ms(5);
  assert_int_equal(1, waiting(rl));
  resil_metrics *m = NULL;
  assert_status(RESIL_OK, resil_metrics_new(NULL, &m));
  assert_status(RESIL_OK, resil_metrics_add_ratelimiter(m, "one", rl));
  char *text = NULL;
  assert_status(RESIL_OK, resil_metrics_render_alloc(m, &text, NULL));
  assert_non_null(strstr(text, "resil_ratelimiter_waiting_calls{name=\"one\"} 1\n"));
  resil_metrics_text_free(m, text);
  resil_cancel_signal(tok);
  pthread_join(th, NULL);
  assert_int_equal(RESIL_DECISION_DENY, w.d);
  assert_int_equal(0, waiting(rl));
  resil_metrics_free(m);
  resil_cancel_free(tok);
  resil_ratelimiter_free(rl);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(render_while_updating_keeps_counters_monotonic),
      cmocka_unit_test(ratelimiter_counts_callers_waiting_for_a_permit),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
