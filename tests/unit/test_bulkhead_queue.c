/* The semaphore bulkhead's FIFO queue of non-blocking waiters, one thread:
 * enqueue's three answers, handover on release, FIFO order, withdrawal,
 * the bound, and the new metrics. The races (handover against withdrawal,
 * blocked and enqueued waiters in one order) are in
 * test_bulkhead_queue_mt.c. */
#include <pthread.h>
#include <string.h>

#include "test_util.h"

#define WAIT_NS MS(1000)

static resil_bulkhead *make_q(uint32_t max, int64_t max_wait_ns,
                              uint32_t max_queued) {
  resil_bulkhead_config cfg;
  resil_bulkhead_config_init(&cfg);
  cfg.max_concurrent = max;
  cfg.max_wait_ns = max_wait_ns;
  cfg.max_queued = max_queued;
  resil_bulkhead *bh = NULL;
  assert_status(RESIL_OK, resil_bulkhead_new(&cfg, &bh, NULL));
  return bh;
}

/* Records the order in which waiters were handed their slot, and on which
 * thread. */
typedef struct order_log {
  int seen[16];
  int n;
  pthread_t thread[16];
} order_log;

typedef struct tag {
  order_log *log;
  int id;
} tag;

static void on_slot(void *arg) {
  tag *t = arg;
  t->log->thread[t->log->n] = pthread_self();
  t->log->seen[t->log->n++] = t->id;
}

static void bulkhead_max_queued_default_and_range(void **state) {
  (void)state;
  resil_bulkhead_config cfg;
  resil_bulkhead_config_init(&cfg);
  assert_int_equal(cfg.max_queued, RESIL_BULKHEAD_MAX_QUEUED);
  cfg.max_queued = RESIL_BULKHEAD_MAX_QUEUED + 1;
  resil_bulkhead *bh = NULL;
  resil_error err;
  assert_status(RESIL_EINVAL, resil_bulkhead_new(&cfg, &bh, &err));
  assert_string_equal(err.field, "max_queued");
  assert_null(bh);
  cfg.max_queued = 0;
  assert_status(RESIL_OK, resil_bulkhead_new(&cfg, &bh, &err));
  resil_bulkhead_metrics m;
  assert_status(RESIL_OK, resil_bulkhead_get_metrics(bh, &m));
  assert_int_equal(m.max_queued, 0);
  resil_bulkhead_free(bh);
}

/* A caller built against the 0.1 header (no max_queued) gets the default
 * bound, and a 0.1-sized metrics struct is written only that far. */
static void bulkhead_0_1_config_gets_the_default_queue_bound(void **state) {
  (void)state;
  union {
    resil_bulkhead_config cfg;
    unsigned char bytes[sizeof(resil_bulkhead_config) + 16];
  } u;
  memset(&u, 0xAB, sizeof u);
  const size_t old = offsetof(resil_bulkhead_config, max_queued);
  resil_bulkhead_config_init_sized(&u.cfg, old);
  assert_int_equal(u.cfg.struct_size, old);
  assert_int_equal(u.bytes[old], 0xAB); /* nothing written past its size */
  u.cfg.max_concurrent = 1;
  u.cfg.max_wait_ns = WAIT_NS;
  resil_bulkhead *bh = NULL;
  assert_status(RESIL_OK, resil_bulkhead_new(&u.cfg, &bh, NULL));
  resil_bulkhead_metrics m;
  assert_status(RESIL_OK, resil_bulkhead_get_metrics(bh, &m));
  assert_int_equal(m.max_queued, RESIL_BULKHEAD_MAX_QUEUED);
  union {
    resil_bulkhead_metrics m;
    unsigned char bytes[sizeof(resil_bulkhead_metrics)];
  } om;
  memset(&om, 0xCD, sizeof om);
  const size_t old_m = offsetof(resil_bulkhead_metrics, handed_over);
  assert_status(RESIL_OK, resil_bulkhead_get_metrics_sized(bh, &om.m, old_m));
  assert_int_equal(om.m.struct_size, old_m);
  assert_int_equal(om.bytes[old_m], 0xCD);
  resil_bulkhead_free(bh);
}

static void bulkhead_enqueue_goes_when_free_and_queues_when_full(void **state) {
  (void)state;
  resil_bulkhead *bh = make_q(1, WAIT_NS, 10);
  resil_bulkhead_waiter *w1, *w2;
  assert_status(RESIL_OK, resil_bulkhead_waiter_new(bh, &w1));
  assert_status(RESIL_OK, resil_bulkhead_waiter_new(bh, &w2));
  order_log log = {0};
  tag t1 = {&log, 1}, t2 = {&log, 2};
  int64_t wait = -1;
  resil_reason why = RESIL_REASON_COUNT_;
  /* Free: GO at once, the callback never runs. */
  assert_int_equal(resil_bulkhead_enqueue(bh, NULL, w1, on_slot, &t1, &wait, &why),
                   RESIL_DECISION_GO);
  assert_int_equal(why, RESIL_REASON_OK);
  assert_int_equal(resil_bulkhead_available(bh), 0);
  /* Full: queued, with the wait it may take. */
  assert_int_equal(resil_bulkhead_enqueue(bh, NULL, w2, on_slot, &t2, &wait, &why),
                   RESIL_DECISION_WAIT);
  assert_int_equal(why, RESIL_REASON_OK);
  assert_int_equal(wait, WAIT_NS);
  assert_int_equal(log.n, 0); /* never from inside enqueue */
  /* Queuing the same waiter twice is misuse. */
  assert_int_equal(resil_bulkhead_enqueue(bh, NULL, w2, on_slot, &t2, &wait, &why),
                   RESIL_DECISION_DENY);
  assert_int_equal(why, RESIL_REASON_LOCAL_ERROR);
  /* A newcomer never overtakes a waiter: the slot goes to w2, not to the
   * free slot try_acquire would see without the queue. */
  assert_status(RESIL_OK, resil_bulkhead_release(bh));
  assert_int_equal(log.n, 1);
  assert_int_equal(log.seen[0], 2);
  assert_true(pthread_equal(log.thread[0], pthread_self())); /* releasing thread */
  assert_int_equal(resil_bulkhead_available(bh), 0);           /* handed, not freed */
  assert_int_equal(resil_bulkhead_try_acquire(bh, NULL), RESIL_DECISION_DENY);
  assert_int_equal(resil_bulkhead_dequeue(bh, w2), RESIL_BH_HANDED_OVER);
  assert_int_equal(resil_bulkhead_dequeue(bh, w2), RESIL_BH_HANDED_OVER);
  assert_status(RESIL_OK, resil_bulkhead_release(bh));
  assert_int_equal(resil_bulkhead_available(bh), 1);
  resil_bulkhead_metrics m;
  assert_status(RESIL_OK, resil_bulkhead_get_metrics(bh, &m));
  assert_int_equal(m.permitted, 2);
  assert_int_equal(m.handed_over, 1);
  assert_int_equal(m.withdrawn, 0);
  assert_int_equal(m.peak_waiting, 1);
  assert_int_equal(m.waiting, 0);
  assert_int_equal(m.rejected, 1); /* the try_acquire */
  resil_bulkhead_waiter_free(w1);
  resil_bulkhead_waiter_free(w2);
  resil_bulkhead_free(bh);
}

static void bulkhead_queue_is_fifo_and_withdrawal_keeps_the_order(void **state) {
  (void)state;
  resil_bulkhead *bh = make_q(2, WAIT_NS, 10);
  enum { N = 5 };
  resil_bulkhead_waiter *w[N];
  order_log log = {0};
  tag t[N];
  assert_int_equal(resil_bulkhead_try_acquire(bh, NULL), RESIL_DECISION_GO);
  assert_int_equal(resil_bulkhead_try_acquire(bh, NULL), RESIL_DECISION_GO);
  for (int i = 0; i < N; i++) {
    t[i].log = &log;
    t[i].id = i;
    assert_status(RESIL_OK, resil_bulkhead_waiter_new(bh, &w[i]));
    assert_int_equal(resil_bulkhead_enqueue(bh, NULL, w[i], on_slot, &t[i], NULL, NULL),
                     RESIL_DECISION_WAIT);
  }
  /* Waiter 1 gives up (its timer fired): it leaves, nobody else moves. */
  assert_int_equal(resil_bulkhead_dequeue(bh, w[1]), RESIL_BH_WITHDRAWN);
  assert_int_equal(resil_bulkhead_dequeue(bh, w[1]), RESIL_BH_WITHDRAWN);
  resil_bulkhead_metrics m;
  assert_status(RESIL_OK, resil_bulkhead_get_metrics(bh, &m));
  assert_int_equal(m.waiting, N - 1);
  assert_int_equal(m.peak_waiting, N);
  for (int i = 0; i < N - 1; i++) assert_status(RESIL_OK, resil_bulkhead_release(bh));
  assert_int_equal(log.n, N - 1);
  int expect[] = {0, 2, 3, 4};
  for (int i = 0; i < N - 1; i++) assert_int_equal(log.seen[i], expect[i]);
  /* Still two slots in use: every handover kept in flight at 2. */
  assert_int_equal(resil_bulkhead_available(bh), 0);
  assert_status(RESIL_OK, resil_bulkhead_release(bh));
  assert_status(RESIL_OK, resil_bulkhead_release(bh));
  assert_status(RESIL_EMISUSE, resil_bulkhead_release(bh));
  assert_int_equal(resil_bulkhead_available(bh), 2);
  assert_status(RESIL_OK, resil_bulkhead_get_metrics(bh, &m));
  assert_int_equal(m.handed_over, N - 1);
  assert_int_equal(m.withdrawn, 1);
  assert_int_equal(m.rejected, 1);
  assert_int_equal(m.permitted, 2 + N - 1);
  /* A reused waiter queues again. */
  assert_int_equal(resil_bulkhead_enqueue(bh, NULL, w[0], on_slot, &t[0], NULL, NULL),
                   RESIL_DECISION_GO);
  assert_status(RESIL_OK, resil_bulkhead_release(bh));
  for (int i = 0; i < N; i++) resil_bulkhead_waiter_free(w[i]);
  resil_bulkhead_free(bh);
}

static void bulkhead_enqueue_denies_full_queue_no_wait_deadline_and_cancel(
    void **state) {
  (void)state;
  order_log log = {0};
  tag t = {&log, 0};
  resil_reason why;
  /* The queue holds max_queued waiters: the next is refused at once. */
  resil_bulkhead *bh = make_q(1, WAIT_NS, 2);
  resil_bulkhead_waiter *w[3];
  for (int i = 0; i < 3; i++) assert_status(RESIL_OK, resil_bulkhead_waiter_new(bh, &w[i]));
  assert_int_equal(resil_bulkhead_try_acquire(bh, NULL), RESIL_DECISION_GO);
  assert_int_equal(resil_bulkhead_enqueue(bh, NULL, w[0], on_slot, &t, NULL, &why),
                   RESIL_DECISION_WAIT);
  assert_int_equal(resil_bulkhead_enqueue(bh, NULL, w[1], on_slot, &t, NULL, &why),
                   RESIL_DECISION_WAIT);
  assert_int_equal(resil_bulkhead_enqueue(bh, NULL, w[2], on_slot, &t, NULL, &why),
                   RESIL_DECISION_DENY);
  assert_int_equal(why, RESIL_REASON_BULKHEAD_FULL);
  assert_int_equal(resil_bulkhead_dequeue(bh, w[2]), RESIL_BH_NOT_QUEUED);
  /* A blocked acquire shares the bound: refused at once, no 1 s wait. */
  assert_int_equal(resil_bulkhead_acquire(bh, NULL, &why), RESIL_DECISION_DENY);
  assert_int_equal(why, RESIL_REASON_BULKHEAD_FULL);
  /* Freeing a queued waiter withdraws it; the other still gets the slot. */
  resil_bulkhead_waiter_free(w[0]);
  assert_status(RESIL_OK, resil_bulkhead_release(bh));
  assert_int_equal(log.n, 1);
  assert_int_equal(resil_bulkhead_dequeue(bh, w[1]), RESIL_BH_HANDED_OVER);
  assert_status(RESIL_OK, resil_bulkhead_release(bh));
  resil_bulkhead_metrics m;
  assert_status(RESIL_OK, resil_bulkhead_get_metrics(bh, &m));
  assert_int_equal(m.withdrawn, 1);
  assert_int_equal(m.rejected, 3); /* queue full twice, one withdrawn */
  resil_bulkhead_waiter_free(w[1]);
  resil_bulkhead_waiter_free(w[2]);
  resil_bulkhead_free(bh);

  /* max_wait_ns 0 (the default): nobody waits. */
  bh = make_q(1, 0, 10);
  resil_bulkhead_waiter *v;
  assert_status(RESIL_OK, resil_bulkhead_waiter_new(bh, &v));
  assert_int_equal(resil_bulkhead_try_acquire(bh, NULL), RESIL_DECISION_GO);
  assert_int_equal(resil_bulkhead_enqueue(bh, NULL, v, on_slot, &t, NULL, &why),
                   RESIL_DECISION_DENY);
  assert_int_equal(why, RESIL_REASON_BULKHEAD_FULL);
  assert_status(RESIL_OK, resil_bulkhead_release(bh));
  resil_bulkhead_waiter_free(v);
  resil_bulkhead_free(bh);

  /* max_queued 0: nobody waits either. */
  bh = make_q(1, WAIT_NS, 0);
  assert_status(RESIL_OK, resil_bulkhead_waiter_new(bh, &v));
  assert_int_equal(resil_bulkhead_try_acquire(bh, NULL), RESIL_DECISION_GO);
  assert_int_equal(resil_bulkhead_enqueue(bh, NULL, v, on_slot, &t, NULL, &why),
                   RESIL_DECISION_DENY);
  assert_int_equal(why, RESIL_REASON_BULKHEAD_FULL);

  /* The deadline cuts the wait; a passed one refuses; a set token refuses. */
  resil_bulkhead_free(NULL);
  resil_manual_clock *mc;
  assert_status(RESIL_OK, resil_manual_clock_new(0, 0, &mc));
  resil_ctx ctx;
  resil_ctx_init(&ctx);
  ctx.clock = resil_manual_clock_get(mc);
  ctx.deadline_ns = MS(300);
  resil_bulkhead *bh2 = make_q(1, WAIT_NS, 10);
  resil_bulkhead_waiter *u;
  assert_status(RESIL_OK, resil_bulkhead_waiter_new(bh2, &u));
  assert_int_equal(resil_bulkhead_try_acquire(bh2, NULL), RESIL_DECISION_GO);
  int64_t wait = 0;
  assert_int_equal(resil_bulkhead_enqueue(bh2, &ctx, u, on_slot, &t, &wait, &why),
                   RESIL_DECISION_WAIT);
  assert_int_equal(wait, MS(300));
  assert_int_equal(resil_bulkhead_dequeue(bh2, u), RESIL_BH_WITHDRAWN);
  resil_manual_clock_advance_ns(mc, MS(300));
  assert_int_equal(resil_bulkhead_enqueue(bh2, &ctx, u, on_slot, &t, &wait, &why),
                   RESIL_DECISION_DENY);
  assert_int_equal(why, RESIL_REASON_BULKHEAD_FULL);
  resil_cancel *cancel;
  assert_status(RESIL_OK, resil_cancel_new(&cancel));
  resil_cancel_signal(cancel);
  resil_ctx c2;
  resil_ctx_init(&c2);
  c2.cancel = cancel;
  assert_int_equal(resil_bulkhead_enqueue(bh2, &c2, u, on_slot, &t, &wait, &why),
                   RESIL_DECISION_DENY);
  assert_int_equal(why, RESIL_REASON_CANCELLED);
  assert_status(RESIL_OK, resil_bulkhead_release(bh2));
  assert_int_equal(log.n, 1); /* no callback from any refusal */
  resil_cancel_free(cancel);
  resil_bulkhead_waiter_free(u);
  resil_bulkhead_free(bh2);
  resil_manual_clock_free(mc);
  assert_status(RESIL_OK, resil_bulkhead_release(bh));
  resil_bulkhead_waiter_free(v);
  resil_bulkhead_free(bh);
}

static void bulkhead_waiter_misuse_fails_closed(void **state) {
  (void)state;
  resil_bulkhead *a = make_q(1, WAIT_NS, 10), *b = make_q(1, WAIT_NS, 10);
  resil_bulkhead_waiter *w = NULL;
  order_log log = {0};
  tag t = {&log, 0};
  resil_reason why;
  assert_status(RESIL_EMISUSE, resil_bulkhead_waiter_new(NULL, &w));
  assert_status(RESIL_EINVAL, resil_bulkhead_waiter_new(a, NULL));
  assert_status(RESIL_OK, resil_bulkhead_waiter_new(a, &w));
  assert_int_equal(resil_bulkhead_enqueue(NULL, NULL, w, on_slot, &t, NULL, &why),
                   RESIL_DECISION_DENY);
  assert_int_equal(why, RESIL_REASON_LOCAL_ERROR);
  assert_int_equal(resil_bulkhead_enqueue(a, NULL, NULL, on_slot, &t, NULL, &why),
                   RESIL_DECISION_DENY);
  assert_int_equal(resil_bulkhead_enqueue(a, NULL, w, NULL, &t, NULL, &why),
                   RESIL_DECISION_DENY);
  /* A waiter of another bulkhead. */
  assert_int_equal(resil_bulkhead_enqueue(b, NULL, w, on_slot, &t, NULL, &why),
                   RESIL_DECISION_DENY);
  assert_int_equal(why, RESIL_REASON_LOCAL_ERROR);
  resil_ctx bad;
  memset(&bad, 0, sizeof bad);
  assert_int_equal(resil_bulkhead_enqueue(a, &bad, w, on_slot, &t, NULL, &why),
                   RESIL_DECISION_DENY);
  assert_int_equal(why, RESIL_REASON_LOCAL_ERROR);
  assert_int_equal(resil_bulkhead_dequeue(a, w), RESIL_BH_NOT_QUEUED);
  assert_int_equal(resil_bulkhead_dequeue(b, w), RESIL_BH_NOT_QUEUED);
  assert_int_equal(resil_bulkhead_dequeue(NULL, w), RESIL_BH_NOT_QUEUED);
  assert_int_equal(resil_bulkhead_dequeue(a, NULL), RESIL_BH_NOT_QUEUED);
  /* Nothing was counted or taken by any of it. */
  resil_bulkhead_metrics m;
  assert_status(RESIL_OK, resil_bulkhead_get_metrics(a, &m));
  assert_int_equal(m.permitted + m.rejected + m.withdrawn, 0);
  assert_int_equal(resil_bulkhead_max_wait_ns(a), WAIT_NS);
  assert_int_equal(resil_bulkhead_max_wait_ns(NULL), 0);
  resil_bulkhead_waiter_free(NULL);
  resil_bulkhead_waiter_free(w);
  resil_bulkhead_free(a);
  resil_bulkhead_free(b);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(bulkhead_max_queued_default_and_range),
      cmocka_unit_test(bulkhead_0_1_config_gets_the_default_queue_bound),
      cmocka_unit_test(bulkhead_enqueue_goes_when_free_and_queues_when_full),
      cmocka_unit_test(bulkhead_queue_is_fifo_and_withdrawal_keeps_the_order),
      cmocka_unit_test(bulkhead_enqueue_denies_full_queue_no_wait_deadline_and_cancel),
      cmocka_unit_test(bulkhead_waiter_misuse_fails_closed),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
