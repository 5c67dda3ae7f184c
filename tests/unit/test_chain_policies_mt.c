/* The library's policies composed in chains, with real threads: one shared
 * deadline across Retry(Breaker(TimeLimiter(Bulkhead(call)))), frames of
 * abandoned tasks, and per-layer accounting under concurrency. */
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#include "resil/chain.h"
#include "test_util.h"

typedef struct slow_call {
  atomic_int calls;
  atomic_int ended;
  int64_t delay_ns;
} slow_call;

/* Takes delay_ns unless its token is signalled (a cooperative call). */
static resil_outcome slow_fn(void *arg, const resil_ctx *ctx) {
  slow_call *s = arg;
  atomic_fetch_add(&s->calls, 1);
  int cancelled = 0;
  if (s->delay_ns > 0) {
    if (ctx->cancel)
      cancelled = resil_cancel_wait_ns(ctx->cancel, s->delay_ns);
    else
      test_sleep_ms((long)(s->delay_ns / 1000000));
  }
  atomic_fetch_add(&s->ended, 1);
  return cancelled ? resil_outcome_make(RESIL_UNKNOWN, RESIL_REASON_CANCELLED)
                   : resil_outcome_ok();
}

typedef struct p13_set {
  resil_retry *rt;
  resil_breaker *br;
  resil_timelimiter *tl;
  resil_bulkhead *bh;
  resil_chain *ch;
} p13_set;

static void p13_make(p13_set *s) {
  resil_retry_config rc;
  resil_retry_config_init(&rc);
  rc.max_attempts = 3;
  rc.wait_ns = MS(100);
  rc.min_attempt_budget_ns = MS(500);
  assert_status(RESIL_OK, resil_retry_new(&rc, &s->rt, NULL));
  resil_breaker_config bc;
  resil_breaker_config_init(&bc);
  bc.window_size = 10;
  bc.minimum_calls = 10;
  assert_status(RESIL_OK, resil_breaker_new(&bc, &s->br, NULL));
  resil_timelimiter_config tc;
  resil_timelimiter_config_init(&tc);
  tc.timeout_ns = MS(400);
  assert_status(RESIL_OK, resil_timelimiter_new(&tc, &s->tl, NULL));
  resil_bulkhead_config hc;
  resil_bulkhead_config_init(&hc);
  hc.max_concurrent = 2;
  assert_status(RESIL_OK, resil_bulkhead_new(&hc, &s->bh, NULL));
  resil_chain_config cc;
  resil_chain_config_init(&cc);
  cc.total_timeout_ns = MS(700);
  assert_status(RESIL_OK, resil_chain_new(&cc, &s->ch, NULL));
  assert_status(RESIL_OK, resil_chain_add_retry(s->ch, s->rt));
  assert_status(RESIL_OK, resil_chain_add_breaker(s->ch, s->br));
  assert_status(RESIL_OK, resil_chain_add_timelimiter(s->ch, s->tl));
  assert_status(RESIL_OK, resil_chain_add_bulkhead(s->ch, s->bh));
}

static void p13_free(p13_set *s) {
  resil_chain_free(s->ch);
  resil_timelimiter_free(s->tl);
  resil_bulkhead_free(s->bh);
  resil_breaker_free(s->br);
  resil_retry_free(s->rt);
}

static void one_deadline_refuses_the_attempt_that_cannot_fit(void **state) {
  (void)state;
  p13_set s;
  p13_make(&s);
  char nest[128];
  resil_chain_nesting(s.ch, nest, sizeof nest);
  assert_string_equal(nest, "Retry(Breaker(TimeLimiter(Bulkhead(call))))");
  resil_ctx ctx;
  resil_ctx_init(&ctx);
  ctx.flags = RESIL_CALL_IDEMPOTENT;
  slow_call up = {.delay_ns = MS(900)};
  atomic_init(&up.calls, 0);
  atomic_init(&up.ended, 0);
  int64_t t0 = resil_clock_now_ns(NULL);
  resil_outcome o = resil_chain_run(s.ch, &ctx, slow_fn, &up);
  int64_t took = resil_clock_now_ns(NULL) - t0;
  /* Attempt 1 timed out at 400 ms; after a 100 ms wait only 200 ms would
   * remain, less than the 500 ms minimum: refused before sending. */
  assert_int_equal(o.kind, RESIL_UNKNOWN);
  assert_int_equal(o.reason, RESIL_REASON_TIMEOUT);
  assert_int_equal(o.stop, RESIL_STOP_DEADLINE);
  assert_int_equal(o.attempts, 1);
  assert_int_equal(atomic_load(&up.calls), 1);
  assert_true(took >= MS(400) && took < MS(1000)); /* bound generous for loaded CI */
  resil_retry_stats rs;
  resil_retry_get_stats(s.rt, &rs);
  assert_int_equal(rs.refused_by_deadline, 1);
  resil_layer_stats ls;
  resil_chain_layer_stats(s.ch, 0, &ls);
  assert_int_equal(ls.calls_in, 1);
  assert_int_equal(ls.attempts_out, 1);
  /* The abandoned task was signalled and ends; the slot comes back. */
  assert_status(RESIL_OK, resil_timelimiter_wait_idle(s.tl, MS(2000)));
  assert_int_equal(atomic_load(&up.ended), 1);
  assert_int_equal(resil_bulkhead_available(s.bh), 2);

  /* The upstream recovers: a new logical call, a new 700 ms budget. */
  up.delay_ns = 0;
  o = resil_chain_run(s.ch, &ctx, slow_fn, &up);
  assert_true(resil_outcome_is_success(&o));
  assert_int_equal(o.attempts, 1);
  assert_int_equal(atomic_load(&up.calls), 2);
  p13_free(&s);
}

/* A task queued behind a busy worker and abandoned there never runs; the
 * chain's frame for it must still be freed (ASan's leak check). */
static void frame_of_a_task_dropped_from_the_queue_is_freed(void **state) {
  (void)state;
  resil_threadpool_config pc;
  resil_threadpool_config_init(&pc);
  pc.threads = 1;
  pc.queue_capacity = 4;
  resil_threadpool *pool;
  assert_status(RESIL_OK, resil_threadpool_new(&pc, &pool, NULL));
  resil_timelimiter_config tc;
  resil_timelimiter_config_init(&tc);
  tc.timeout_ns = MS(30);
  tc.executor = pool;
  resil_timelimiter *tl;
  assert_status(RESIL_OK, resil_timelimiter_new(&tc, &tl, NULL));
  resil_chain_config cc;
  resil_chain_config_init(&cc);
  resil_chain *ch;
  assert_status(RESIL_OK, resil_chain_new(&cc, &ch, NULL));
  assert_status(RESIL_OK, resil_chain_add_timelimiter(ch, tl));
  slow_call busy = {.delay_ns = MS(200)};
  atomic_init(&busy.calls, 0);
  atomic_init(&busy.ended, 0);
  /* The first call occupies the only worker (its token is signalled at the
   * timeout, so it ends early); the second waits in the queue, is
   * abandoned there, and is dropped when the worker reaches it. */
  resil_outcome a = resil_chain_run(ch, NULL, slow_fn, &busy);
  resil_outcome b = resil_chain_run(ch, NULL, slow_fn, &busy);
  assert_int_equal(a.kind, RESIL_UNKNOWN);
  assert_int_equal(b.kind, RESIL_UNKNOWN);
  assert_status(RESIL_OK, resil_timelimiter_wait_idle(tl, MS(2000)));
  assert_true(atomic_load(&busy.calls) <= 2);
  resil_chain_free(ch);
  resil_timelimiter_free(tl);
  resil_threadpool_free(pool);
}

typedef struct hammer {
  resil_chain *ch;
  int n;
  atomic_int *ok;
} hammer;

static resil_outcome quick(void *arg, const resil_ctx *ctx) {
  (void)arg;
  (void)ctx;
  return resil_outcome_ok();
}

static void *hammer_thread(void *p) {
  hammer *h = p;
  for (int i = 0; i < h->n; i++) {
    resil_outcome o = resil_chain_run(h->ch, NULL, quick, NULL);
    if (resil_outcome_is_success(&o)) atomic_fetch_add(h->ok, 1);
  }
  return NULL;
}

static void layer_counters_add_up_under_concurrency(void **state) {
  (void)state;
  resil_retry *rt;
  resil_retry_config rc;
  resil_retry_config_init(&rc);
  assert_status(RESIL_OK, resil_retry_new(&rc, &rt, NULL));
  resil_breaker *br;
  resil_breaker_config bc;
  resil_breaker_config_init(&bc);
  assert_status(RESIL_OK, resil_breaker_new(&bc, &br, NULL));
  resil_ratelimiter *rl;
  resil_ratelimiter_config lc;
  resil_ratelimiter_config_init(&lc);
  lc.limit_for_period = 1000000;
  lc.refresh_period_ns = MS(1000);
  lc.timeout_ns = 0;
  assert_status(RESIL_OK, resil_ratelimiter_new(&lc, &rl, NULL));
  resil_bulkhead *bh;
  resil_bulkhead_config hc;
  resil_bulkhead_config_init(&hc);
  hc.max_concurrent = 8;
  assert_status(RESIL_OK, resil_bulkhead_new(&hc, &bh, NULL));
  resil_chain_config cc;
  resil_chain_config_init(&cc);
  resil_chain *ch;
  assert_status(RESIL_OK, resil_chain_new(&cc, &ch, NULL));
  assert_status(RESIL_OK, resil_chain_add_retry(ch, rt));
  assert_status(RESIL_OK, resil_chain_add_breaker(ch, br));
  assert_status(RESIL_OK, resil_chain_add_ratelimiter(ch, rl));
  assert_status(RESIL_OK, resil_chain_add_bulkhead(ch, bh));
  atomic_int ok = 0;
  enum { T = 4, N = 5000 };
  hammer h = {ch, N, &ok};
  pthread_t t[T];
  for (int i = 0; i < T; i++) pthread_create(&t[i], NULL, hammer_thread, &h);
  for (int i = 0; i < T; i++) pthread_join(t[i], NULL);
  assert_int_equal(atomic_load(&ok), T * N);
  for (size_t i = 0; i < 4; i++) {
    resil_layer_stats st;
    assert_status(RESIL_OK, resil_chain_layer_stats(ch, i, &st));
    assert_int_equal(st.calls_in, T * N);
    assert_int_equal(st.attempts_out, T * N);
    assert_int_equal(st.successes, T * N);
    assert_int_equal(st.rejections, 0);
  }
  resil_breaker_metrics m;
  resil_breaker_get_metrics(br, &m);
  assert_int_equal(m.total_successes, T * N);
  assert_int_equal(resil_bulkhead_available(bh), 8);
  resil_chain_free(ch);
  resil_bulkhead_free(bh);
  resil_ratelimiter_free(rl);
  resil_breaker_free(br);
  resil_retry_free(rt);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(one_deadline_refuses_the_attempt_that_cannot_fit),
      cmocka_unit_test(frame_of_a_task_dropped_from_the_queue_is_freed),
      cmocka_unit_test(layer_counters_add_up_under_concurrency),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
