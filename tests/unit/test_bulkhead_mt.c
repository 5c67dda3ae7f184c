/* Bulkheads with real threads: P5, concurrency limits under contention,
 * waiting and waking, the slot around a time-limited call, and the thread
 * pool's queue, rejection, futures and drain. */
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <time.h>

#include "test_util.h"

#define LONG_NS (10 * INT64_C(1000000000))

/* A call that announces it runs, then waits until released. */
typedef struct held {
  resil_cancel *entered;
  resil_cancel *release;
  int64_t linger_ns; /* real sleep after the release, before returning */
  _Atomic int ran;
  _Atomic int finished;
} held;

static void held_init(held *h) {
  memset(h, 0, sizeof *h);
  assert_status(RESIL_OK, resil_cancel_new(&h->entered));
  assert_status(RESIL_OK, resil_cancel_new(&h->release));
}

static void held_destroy(held *h) {
  resil_cancel_free(h->entered);
  resil_cancel_free(h->release);
}

static resil_outcome hold_call(void *arg, const resil_ctx *ctx) {
  (void)ctx;
  held *h = arg;
  atomic_fetch_add(&h->ran, 1);
  resil_cancel_signal(h->entered);
  resil_cancel_wait_ns(h->release, LONG_NS);
  if (h->linger_ns > 0) resil_clock_sleep_ns(NULL, h->linger_ns, NULL);
  atomic_fetch_add(&h->finished, 1);
  return resil_outcome_ok();
}

static _Atomic int counted;
static resil_outcome count_call(void *arg, const resil_ctx *ctx) {
  (void)arg;
  (void)ctx;
  atomic_fetch_add(&counted, 1);
  return resil_outcome_ok();
}

static resil_bulkhead *make(uint32_t max, int64_t max_wait_ns) {
  resil_bulkhead_config cfg;
  resil_bulkhead_config_init(&cfg);
  cfg.max_concurrent = max;
  cfg.max_wait_ns = max_wait_ns;
  resil_bulkhead *bh = NULL;
  assert_status(RESIL_OK, resil_bulkhead_new(&cfg, &bh, NULL));
  return bh;
}

typedef struct runner {
  resil_bulkhead *bh;
  held *h;
  resil_ctx *ctx;
  resil_outcome out;
  resil_reason decision; /* RESIL_REASON_OK when the slot was acquired */
} runner;

static void *run_held(void *p) {
  runner *r = p;
  r->out = resil_bulkhead_run(r->bh, NULL, hold_call, r->h);
  return NULL;
}

/* P5: max 2, wait 0. Two calls held in flight, the third rejected at once
 * without running; after release 2 available again; peak 2. */
static void bulkhead_p5_third_call_rejected_while_two_are_in_flight(
    void **state) {
  (void)state;
  resil_bulkhead *bh = make(2, 0);
  held h[2];
  runner r[2];
  pthread_t t[2];
  for (int i = 0; i < 2; i++) {
    held_init(&h[i]);
    r[i].bh = bh;
    r[i].h = &h[i];
    assert_int_equal(pthread_create(&t[i], NULL, run_held, &r[i]), 0);
  }
  for (int i = 0; i < 2; i++)
    assert_int_equal(resil_cancel_wait_ns(h[i].entered, LONG_NS), 1);
  assert_int_equal(resil_bulkhead_available(bh), 0);

  atomic_store(&counted, 0);
  int64_t t0 = resil_clock_now_ns(NULL);
  resil_outcome o = resil_bulkhead_run(bh, NULL, count_call, NULL);
  assert_true(resil_clock_now_ns(NULL) - t0 < MS(500)); /* at once */
  assert_int_equal(o.kind, RESIL_REJECTED);
  assert_int_equal(o.reason, RESIL_REASON_BULKHEAD_FULL);
  assert_int_equal(atomic_load(&counted), 0);

  for (int i = 0; i < 2; i++) resil_cancel_signal(h[i].release);
  for (int i = 0; i < 2; i++) {
    pthread_join(t[i], NULL);
    assert_true(resil_outcome_is_success(&r[i].out));
    assert_int_equal(atomic_load(&h[i].ran), 1);
    held_destroy(&h[i]);
  }
  assert_int_equal(resil_bulkhead_available(bh), 2);
  resil_bulkhead_metrics m;
  assert_status(RESIL_OK, resil_bulkhead_get_metrics(bh, &m));
  assert_int_equal(m.peak_in_flight, 2);
  assert_int_equal(m.in_flight, 0);
  assert_int_equal(m.permitted, 2);
  assert_int_equal(m.rejected, 1);
  resil_bulkhead_free(bh);
}

typedef struct contention {
  resil_bulkhead *bh;
  int rounds;
  _Atomic int inside;
  _Atomic int max_inside;
  _Atomic long ok;
  _Atomic long rejected;
} contention;

static resil_outcome occupy(void *arg, const resil_ctx *ctx) {
  (void)ctx;
  contention *c = arg;
  int now = atomic_fetch_add(&c->inside, 1) + 1;
  int m = atomic_load(&c->max_inside);
  while (now > m && !atomic_compare_exchange_weak(&c->max_inside, &m, now)) {
  }
  for (volatile int spin = 0; spin < 200; spin++) {
  }
  atomic_fetch_sub(&c->inside, 1);
  return resil_outcome_ok();
}

static void *contend(void *p) {
  contention *c = p;
  for (int i = 0; i < c->rounds; i++) {
    resil_outcome o = resil_bulkhead_run(c->bh, NULL, occupy, c);
    if (o.kind == RESIL_REJECTED)
      atomic_fetch_add(&c->rejected, 1);
    else
      atomic_fetch_add(&c->ok, 1);
  }
  return NULL;
}

static void run_contention(contention *c, int threads) {
  pthread_t t[8];
  for (int i = 0; i < threads; i++)
    assert_int_equal(pthread_create(&t[i], NULL, contend, c), 0);
  for (int i = 0; i < threads; i++) pthread_join(t[i], NULL);
}

static void bulkhead_threads_never_exceed_max_concurrent(void **state) {
  (void)state;
  contention c;
  memset(&c, 0, sizeof c);
  c.bh = make(3, 0);
  c.rounds = 3000;
  run_contention(&c, 8);
  assert_true(atomic_load(&c.max_inside) <= 3);
  assert_int_equal(atomic_load(&c.ok) + atomic_load(&c.rejected), 8 * 3000);
  resil_bulkhead_metrics m;
  assert_status(RESIL_OK, resil_bulkhead_get_metrics(c.bh, &m));
  assert_int_equal(m.in_flight, 0);
  assert_true(m.peak_in_flight <= 3);
  assert_int_equal(m.permitted, (uint64_t)atomic_load(&c.ok));
  assert_int_equal(m.rejected, (uint64_t)atomic_load(&c.rejected));
  resil_bulkhead_free(c.bh);
}

static void bulkhead_waiters_are_woken_by_releases_and_all_get_through(
    void **state) {
  (void)state;
  contention c;
  memset(&c, 0, sizeof c);
  c.bh = make(1, LONG_NS);
  c.rounds = 300;
  run_contention(&c, 4);
  assert_int_equal(atomic_load(&c.max_inside), 1);
  assert_int_equal(atomic_load(&c.ok), 4 * 300);
  assert_int_equal(atomic_load(&c.rejected), 0);
  assert_int_equal(resil_bulkhead_available(c.bh), 1);
  resil_bulkhead_free(c.bh);
}

static void *acquire_then_release(void *p) {
  runner *r = p;
  resil_decision d = resil_bulkhead_acquire(r->bh, r->ctx, &r->decision);
  if (d == RESIL_DECISION_GO) resil_bulkhead_release(r->bh);
  return NULL;
}

static void wait_for_waiters(resil_bulkhead *bh, uint32_t n) {
  resil_bulkhead_metrics m;
  for (int i = 0; i < 10000; i++) {
    resil_bulkhead_get_metrics(bh, &m);
    if (m.waiting == n) return;
    resil_clock_sleep_ns(NULL, MS(1), NULL);
  }
  fail_msg("no waiter showed up");
}

static void bulkhead_waiter_gets_the_slot_released_while_it_waits(void **state) {
  (void)state;
  resil_bulkhead *bh = make(1, LONG_NS);
  assert_int_equal(resil_bulkhead_try_acquire(bh, NULL), 1);
  runner r = {.bh = bh};
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, acquire_then_release, &r), 0);
  wait_for_waiters(bh, 1);
  int64_t t0 = resil_clock_now_ns(NULL);
  assert_status(RESIL_OK, resil_bulkhead_release(bh));
  pthread_join(t, NULL);
  assert_true(resil_clock_now_ns(NULL) - t0 < MS(2000));
  assert_int_equal(r.decision, RESIL_REASON_OK);
  assert_int_equal(resil_bulkhead_available(bh), 1);
  resil_bulkhead_free(bh);
}

static void bulkhead_cancel_from_another_thread_ends_a_wait(void **state) {
  (void)state;
  resil_bulkhead *bh = make(1, LONG_NS);
  assert_int_equal(resil_bulkhead_try_acquire(bh, NULL), 1);
  resil_cancel *c;
  assert_status(RESIL_OK, resil_cancel_new(&c));
  resil_ctx ctx;
  resil_ctx_init(&ctx);
  ctx.cancel = c;
  runner r = {.bh = bh, .ctx = &ctx};
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, acquire_then_release, &r), 0);
  wait_for_waiters(bh, 1);
  int64_t t0 = resil_clock_now_ns(NULL);
  resil_cancel_signal(c);
  pthread_join(t, NULL);
  assert_true(resil_clock_now_ns(NULL) - t0 < MS(2000));
  assert_int_equal(r.decision, RESIL_REASON_CANCELLED);
  assert_int_equal(resil_bulkhead_available(bh), 0); /* main still holds it */
  resil_bulkhead_release(bh);
  resil_cancel_free(c);
  resil_bulkhead_free(bh);
}

/* Bulkhead(TimeLimiter(call)): the limiter stops waiting at its timeout,
 * run returns, and the slot is back although the task still runs. */
typedef struct limited {
  resil_timelimiter *tl;
  held *h;
} limited;

static resil_outcome time_limited(void *arg, const resil_ctx *ctx) {
  limited *l = arg;
  return resil_timelimiter_run(l->tl, ctx, hold_call, l->h);
}

static void bulkhead_slot_is_returned_after_a_time_limited_call(void **state) {
  (void)state;
  resil_bulkhead *bh = make(1, 0);
  resil_timelimiter_config tc;
  resil_timelimiter_config_init(&tc);
  tc.timeout_ns = MS(20);
  limited l;
  assert_status(RESIL_OK, resil_timelimiter_new(&tc, &l.tl, NULL));
  held h;
  held_init(&h);
  l.h = &h;
  resil_outcome o = resil_bulkhead_run(bh, NULL, time_limited, &l);
  assert_int_equal(o.kind, RESIL_UNKNOWN);
  assert_int_equal(o.reason, RESIL_REASON_TIMEOUT);
  assert_true(o.flags & RESIL_OF_TIME_LIMITER);
  assert_int_equal(resil_bulkhead_available(bh), 1);
  assert_int_equal(atomic_load(&h.finished), 0); /* the task runs on */
  resil_cancel_signal(h.release);
  assert_status(RESIL_OK, resil_timelimiter_wait_idle(l.tl, LONG_NS));
  assert_int_equal(atomic_load(&h.finished), 1);
  resil_timelimiter_free(l.tl);
  held_destroy(&h);
  resil_bulkhead_free(bh);
}

/* ---- thread pool ------------------------------------------------------ */

static resil_threadpool *make_pool(uint32_t threads, uint32_t capacity) {
  resil_threadpool_config cfg;
  resil_threadpool_config_init(&cfg);
  cfg.threads = threads;
  cfg.queue_capacity = capacity;
  cfg.name = "pool";
  resil_threadpool *tp = NULL;
  assert_status(RESIL_OK, resil_threadpool_new(&cfg, &tp, NULL));
  return tp;
}

static void wait_pool(resil_threadpool *tp, uint32_t idle, uint64_t completed) {
  resil_threadpool_metrics m;
  for (int i = 0; i < 10000; i++) {
    resil_threadpool_get_metrics(tp, &m);
    if (m.idle == idle && m.completed == completed) return;
    resil_clock_sleep_ns(NULL, MS(1), NULL);
  }
  fail_msg("pool did not settle: idle %u completed %lu", m.idle,
           (unsigned long)m.completed);
}

static pthread_t caller_thread;
static _Atomic int ran_elsewhere;
static resil_outcome where_am_i(void *arg, const resil_ctx *ctx) {
  (void)ctx;
  atomic_store(&ran_elsewhere, !pthread_equal(pthread_self(), caller_thread));
  return *(const resil_outcome *)arg;
}

static void threadpool_runs_calls_on_its_workers(void **state) {
  (void)state;
  resil_threadpool *tp = make_pool(2, 4);
  assert_string_equal(resil_threadpool_name(tp), "pool");
  caller_thread = pthread_self();
  resil_outcome want = resil_outcome_http(503);
  resil_outcome o = resil_threadpool_run(tp, NULL, where_am_i, &want);
  assert_int_equal(o.kind, RESIL_ANSWERED);
  assert_int_equal(o.http_status, 503);
  assert_int_equal(atomic_load(&ran_elsewhere), 1);
  resil_threadpool_metrics m;
  assert_status(RESIL_OK, resil_threadpool_get_metrics(tp, &m));
  assert_int_equal(m.threads, 2);
  assert_int_equal(m.queue_capacity, 4);
  assert_int_equal(m.submitted, 1);
  assert_int_equal(m.completed, 1);
  assert_int_equal(m.rejected, 0);
  resil_threadpool_free(tp);
}

static void threadpool_full_queue_rejects_without_running(void **state) {
  (void)state;
  resil_threadpool *tp = make_pool(1, 1);
  held h;
  held_init(&h);
  resil_future *f1 = NULL, *f2 = NULL, *f3 = NULL;
  assert_status(RESIL_OK, resil_threadpool_submit(tp, NULL, hold_call, &h, &f1));
  assert_int_equal(resil_cancel_wait_ns(h.entered, LONG_NS), 1);
  atomic_store(&counted, 0);
  assert_status(RESIL_OK, resil_threadpool_submit(tp, NULL, count_call, NULL, &f2));
  assert_status(RESIL_EBUSY,
                resil_threadpool_submit(tp, NULL, count_call, NULL, &f3));
  assert_null(f3);
  resil_outcome o = resil_threadpool_run(tp, NULL, count_call, NULL);
  assert_int_equal(o.kind, RESIL_REJECTED);
  assert_int_equal(o.reason, RESIL_REASON_QUEUE_FULL);
  resil_threadpool_metrics m;
  assert_status(RESIL_OK, resil_threadpool_get_metrics(tp, &m));
  assert_int_equal(m.queue_depth, 1);
  assert_int_equal(m.active, 1);
  assert_int_equal(m.rejected, 2);
  assert_int_equal(m.submitted, 2);
  assert_int_equal(resil_future_done(f2), 0);
  assert_status(RESIL_ETIMEDOUT, resil_future_wait_ns(f2, 0));

  resil_cancel_signal(h.release);
  assert_status(RESIL_OK, resil_future_wait_ns(f1, LONG_NS));
  assert_status(RESIL_OK, resil_future_wait_ns(f2, LONG_NS));
  assert_int_equal(resil_future_done(f2), 1);
  o = resil_future_outcome(f2);
  assert_true(resil_outcome_is_success(&o));
  assert_int_equal(atomic_load(&counted), 1); /* only the accepted call ran */
  resil_future_free(f1);
  resil_future_free(f2);
  wait_pool(tp, 1, 2);
  resil_threadpool_free(tp);
  held_destroy(&h);
}

static void threadpool_future_dropped_before_the_call_ends_is_freed_cleanly(
    void **state) {
  (void)state;
  resil_threadpool *tp = make_pool(1, 1);
  held h;
  held_init(&h);
  resil_future *f = NULL;
  assert_status(RESIL_OK, resil_threadpool_submit(tp, NULL, hold_call, &h, &f));
  assert_status(RESIL_ETIMEDOUT, resil_future_wait_ns(f, MS(1)));
  resil_outcome o = resil_future_outcome(f);
  assert_int_equal(o.kind, RESIL_UNKNOWN);
  assert_int_equal(o.reason, RESIL_REASON_NONE);
  resil_future_free(f); /* the waiter gives up; the call still runs */
  assert_int_equal(resil_cancel_wait_ns(h.entered, LONG_NS), 1);
  resil_cancel_signal(h.release);
  wait_pool(tp, 1, 1);
  assert_int_equal(atomic_load(&h.finished), 1);
  resil_threadpool_free(tp);
  held_destroy(&h);
  assert_status(RESIL_EMISUSE, resil_future_wait_ns(NULL, 0));
  assert_int_equal(resil_future_done(NULL), 0);
  resil_future_free(NULL);
}

static void threadpool_free_drains_queued_calls(void **state) {
  (void)state;
  resil_threadpool *tp = make_pool(1, 10);
  held h;
  held_init(&h);
  h.linger_ns = MS(20); /* the queue is still full when free starts */
  assert_status(RESIL_OK, resil_threadpool_submit(tp, NULL, hold_call, &h, NULL));
  assert_int_equal(resil_cancel_wait_ns(h.entered, LONG_NS), 1);
  atomic_store(&counted, 0);
  resil_future *f = NULL;
  for (int i = 0; i < 5; i++)
    assert_status(RESIL_OK,
                  resil_threadpool_submit(tp, NULL, count_call, NULL,
                                          i == 4 ? &f : NULL));
  resil_cancel_signal(h.release);
  resil_threadpool_free(tp);
  assert_int_equal(atomic_load(&counted), 5);
  /* The caller's future outlives the pool. */
  assert_status(RESIL_OK, resil_future_wait_ns(f, 0));
  resil_outcome o = resil_future_outcome(f);
  assert_true(resil_outcome_is_success(&o));
  resil_future_free(f);
  held_destroy(&h);
}

static void threadpool_zero_capacity_accepts_only_for_idle_workers(
    void **state) {
  (void)state;
  resil_threadpool *tp = make_pool(2, 0);
  wait_pool(tp, 2, 0);
  held h[2];
  for (int i = 0; i < 2; i++) {
    held_init(&h[i]);
    assert_status(RESIL_OK,
                  resil_threadpool_submit(tp, NULL, hold_call, &h[i], NULL));
  }
  assert_status(RESIL_EBUSY,
                resil_threadpool_submit(tp, NULL, count_call, NULL, NULL));
  for (int i = 0; i < 2; i++) {
    assert_int_equal(resil_cancel_wait_ns(h[i].entered, LONG_NS), 1);
    resil_cancel_signal(h[i].release);
  }
  wait_pool(tp, 2, 2);
  resil_threadpool_free(tp);
  for (int i = 0; i < 2; i++) held_destroy(&h[i]);
}

typedef struct submitters {
  resil_threadpool *tp;
  _Atomic long accepted;
  _Atomic long busy;
} submitters;

static void *submit_many(void *p) {
  submitters *s = p;
  for (int i = 0; i < 500; i++) {
    resil_future *f = NULL;
    resil_status st =
        resil_threadpool_submit(s->tp, NULL, count_call, NULL, i % 2 ? &f : NULL);
    if (st == RESIL_OK) {
      atomic_fetch_add(&s->accepted, 1);
      if (f) {
        if (i % 4 == 1) resil_future_wait_ns(f, INT64_MAX);
        resil_future_free(f);
      }
    } else {
      assert_status(RESIL_EBUSY, st);
      atomic_fetch_add(&s->busy, 1);
    }
  }
  return NULL;
}

static void threadpool_concurrent_submitters_account_for_every_call(
    void **state) {
  (void)state;
  submitters s;
  memset(&s, 0, sizeof s);
  s.tp = make_pool(2, 8);
  atomic_store(&counted, 0);
  pthread_t t[4];
  for (int i = 0; i < 4; i++)
    assert_int_equal(pthread_create(&t[i], NULL, submit_many, &s), 0);
  for (int i = 0; i < 4; i++) pthread_join(t[i], NULL);
  long accepted = atomic_load(&s.accepted);
  assert_int_equal(accepted + atomic_load(&s.busy), 4 * 500);
  wait_pool(s.tp, 2, (uint64_t)accepted);
  resil_threadpool_metrics m;
  assert_status(RESIL_OK, resil_threadpool_get_metrics(s.tp, &m));
  assert_int_equal(m.submitted, (uint64_t)accepted);
  assert_int_equal(m.rejected, (uint64_t)atomic_load(&s.busy));
  assert_int_equal(m.queue_depth, 0);
  resil_threadpool_free(s.tp);
  assert_int_equal(atomic_load(&counted), accepted);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(bulkhead_p5_third_call_rejected_while_two_are_in_flight),
      cmocka_unit_test(bulkhead_threads_never_exceed_max_concurrent),
      cmocka_unit_test(bulkhead_waiters_are_woken_by_releases_and_all_get_through),
      cmocka_unit_test(bulkhead_waiter_gets_the_slot_released_while_it_waits),
      cmocka_unit_test(bulkhead_cancel_from_another_thread_ends_a_wait),
      cmocka_unit_test(bulkhead_slot_is_returned_after_a_time_limited_call),
      cmocka_unit_test(threadpool_runs_calls_on_its_workers),
      cmocka_unit_test(threadpool_full_queue_rejects_without_running),
      cmocka_unit_test(
          threadpool_future_dropped_before_the_call_ends_is_freed_cleanly),
      cmocka_unit_test(threadpool_free_drains_queued_calls),
      cmocka_unit_test(threadpool_zero_capacity_accepts_only_for_idle_workers),
      cmocka_unit_test(threadpool_concurrent_submitters_account_for_every_call),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
