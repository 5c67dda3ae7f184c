/* The semaphore bulkhead's one FIFO queue with real threads: blocked
 * acquires and enqueued waiters served in arrival order, the callback on
 * the releasing thread, and handover racing withdrawal without a slot lost
 * or given twice (run under ThreadSanitizer: label concurrency). */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <string.h>

#include "test_util.h"

static resil_bulkhead *make_q(uint32_t max, int64_t max_wait_ns) {
  resil_bulkhead_config cfg;
  resil_bulkhead_config_init(&cfg);
  cfg.max_concurrent = max;
  cfg.max_wait_ns = max_wait_ns;
  resil_bulkhead *bh = NULL;
  assert_status(RESIL_OK, resil_bulkhead_new(&cfg, &bh, NULL));
  return bh;
}

static uint32_t waiting(resil_bulkhead *bh) {
  resil_bulkhead_metrics m;
  assert_status(RESIL_OK, resil_bulkhead_get_metrics(bh, &m));
  return m.waiting;
}

/* Waits (real time, bounded) until n waiters are queued. */
static void until_waiting(resil_bulkhead *bh, uint32_t n) {
  for (int i = 0; i < 10000 && waiting(bh) != n; i++) test_sleep_ms(1);
  assert_int_equal(waiting(bh), n);
}

/* Event order shared by the threads of one test. */
typedef struct events {
  pthread_mutex_t mu;
  int seq[8];
  int n;
  pthread_t cb_thread;
} events;

static void note(events *e, int id) {
  pthread_mutex_lock(&e->mu);
  e->seq[e->n++] = id;
  pthread_mutex_unlock(&e->mu);
}

typedef struct blocker {
  resil_bulkhead *bh;
  events *ev;
  int id;
  int release_after; /* 1: release at once once it holds the slot */
  resil_decision d;
} blocker;

static void *block_acquire(void *p) {
  blocker *b = p;
  b->d = resil_bulkhead_acquire(b->bh, NULL, NULL);
  if (b->d == RESIL_DECISION_GO) {
    note(b->ev, b->id);
    if (b->release_after) resil_bulkhead_release(b->bh);
  }
  return NULL;
}

typedef struct async_waiter {
  events *ev;
  int id;
} async_waiter;

static void on_slot(void *arg) {
  async_waiter *a = arg;
  pthread_mutex_lock(&a->ev->mu);
  a->ev->cb_thread = pthread_self();
  pthread_mutex_unlock(&a->ev->mu);
  note(a->ev, a->id);
}

/* Blocked acquire first, enqueued waiter second, blocked acquire third: a
 * release serves them in that order, the enqueued waiter's callback on the
 * thread that released. */
static void bulkhead_blocked_and_enqueued_waiters_share_one_fifo(void **state) {
  (void)state;
  resil_bulkhead *bh = make_q(1, MS(20000));
  events ev;
  memset(&ev, 0, sizeof ev);
  pthread_mutex_init(&ev.mu, NULL);
  assert_int_equal(resil_bulkhead_try_acquire(bh, NULL), RESIL_DECISION_GO);

  blocker b1 = {bh, &ev, 1, 1, RESIL_DECISION_DENY};
  pthread_t t1, t3;
  assert_int_equal(pthread_create(&t1, NULL, block_acquire, &b1), 0);
  until_waiting(bh, 1);
  resil_bulkhead_waiter *w;
  assert_status(RESIL_OK, resil_bulkhead_waiter_new(bh, &w));
  async_waiter a2 = {&ev, 2};
  assert_int_equal(resil_bulkhead_enqueue(bh, NULL, w, on_slot, &a2, NULL, NULL),
                   RESIL_DECISION_WAIT);
  blocker b3 = {bh, &ev, 3, 0, RESIL_DECISION_DENY};
  assert_int_equal(pthread_create(&t3, NULL, block_acquire, &b3), 0);
  until_waiting(bh, 3);

  /* Main's release goes to blocker 1, which releases at once: that hands
   * the slot to the enqueued waiter, whose callback runs on thread 1. */
  assert_status(RESIL_OK, resil_bulkhead_release(bh));
  pthread_join(t1, NULL);
  assert_int_equal(b1.d, RESIL_DECISION_GO);
  assert_int_equal(resil_bulkhead_dequeue(bh, w), RESIL_BH_HANDED_OVER);
  pthread_mutex_lock(&ev.mu);
  assert_int_equal(ev.n, 2);
  assert_true(pthread_equal(ev.cb_thread, t1));
  pthread_mutex_unlock(&ev.mu);
  assert_int_equal(waiting(bh), 1); /* blocker 3 still waits */
  /* The enqueued waiter's slot goes to blocker 3. */
  assert_status(RESIL_OK, resil_bulkhead_release(bh));
  pthread_join(t3, NULL);
  assert_int_equal(b3.d, RESIL_DECISION_GO);
  assert_int_equal(ev.n, 3);
  for (int i = 0; i < 3; i++) assert_int_equal(ev.seq[i], i + 1);
  assert_status(RESIL_OK, resil_bulkhead_release(bh));
  assert_int_equal(resil_bulkhead_available(bh), 1);
  resil_bulkhead_metrics m;
  assert_status(RESIL_OK, resil_bulkhead_get_metrics(bh, &m));
  assert_int_equal(m.handed_over, 3);
  assert_int_equal(m.permitted, 4);
  assert_int_equal(m.peak_waiting, 3);
  resil_bulkhead_waiter_free(w);
  resil_bulkhead_free(bh);
  pthread_mutex_destroy(&ev.mu);
}

typedef struct cancel_blocker {
  resil_bulkhead *bh;
  resil_cancel *cancel;
  resil_reason why;
  resil_decision d;
} cancel_blocker;

static void *block_with_token(void *p) {
  cancel_blocker *b = p;
  resil_ctx ctx;
  resil_ctx_init(&ctx);
  ctx.cancel = b->cancel;
  b->d = resil_bulkhead_acquire(b->bh, &ctx, &b->why);
  return NULL;
}

/* A blocked acquire that is cancelled leaves the queue without a slot; the
 * enqueued waiter behind it moves up and gets the next one. */
static void bulkhead_cancelled_blocked_waiter_leaves_the_queue(void **state) {
  (void)state;
  resil_bulkhead *bh = make_q(1, MS(20000));
  events ev;
  memset(&ev, 0, sizeof ev);
  pthread_mutex_init(&ev.mu, NULL);
  assert_int_equal(resil_bulkhead_try_acquire(bh, NULL), RESIL_DECISION_GO);
  cancel_blocker b = {bh, NULL, RESIL_REASON_OK, RESIL_DECISION_GO};
  assert_status(RESIL_OK, resil_cancel_new(&b.cancel));
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, block_with_token, &b), 0);
  until_waiting(bh, 1);
  resil_bulkhead_waiter *w;
  assert_status(RESIL_OK, resil_bulkhead_waiter_new(bh, &w));
  async_waiter a = {&ev, 7};
  assert_int_equal(resil_bulkhead_enqueue(bh, NULL, w, on_slot, &a, NULL, NULL),
                   RESIL_DECISION_WAIT);
  resil_cancel_signal(b.cancel);
  pthread_join(t, NULL);
  assert_int_equal(b.d, RESIL_DECISION_DENY);
  assert_int_equal(b.why, RESIL_REASON_CANCELLED);
  assert_int_equal(waiting(bh), 1);
  assert_status(RESIL_OK, resil_bulkhead_release(bh));
  assert_int_equal(ev.n, 1);
  assert_int_equal(ev.seq[0], 7);
  assert_int_equal(resil_bulkhead_dequeue(bh, w), RESIL_BH_HANDED_OVER);
  assert_status(RESIL_OK, resil_bulkhead_release(bh));
  resil_bulkhead_metrics m;
  assert_status(RESIL_OK, resil_bulkhead_get_metrics(bh, &m));
  assert_int_equal(m.withdrawn, 1);
  assert_int_equal(m.handed_over, 1);
  assert_int_equal(m.available, 1);
  resil_bulkhead_waiter_free(w);
  resil_cancel_free(b.cancel);
  resil_bulkhead_free(bh);
  pthread_mutex_destroy(&ev.mu);
}

/* ---- handover against withdrawal ------------------------------------- */

enum { MAXC = 2, ASYNC_THREADS = 3, BLOCK_THREADS = 2, ROUNDS = 3000 };

typedef struct race {
  resil_bulkhead *bh;
  _Atomic int holders;
  _Atomic int max_holders;
  _Atomic long go, handed, withdrawn, cbs, blk_go, blk_deny, bad;
} race;

typedef struct racer {
  race *r;
  _Atomic int got; /* set by the callback */
} racer;

static void race_cb(void *arg) {
  racer *me = arg;
  atomic_fetch_add(&me->r->cbs, 1);
  if (atomic_exchange(&me->got, 1) != 0) atomic_fetch_add(&me->r->bad, 1);
}

static void hold(race *r) {
  int h = atomic_fetch_add(&r->holders, 1) + 1;
  int m = atomic_load(&r->max_holders);
  while (h > m && !atomic_compare_exchange_weak(&r->max_holders, &m, h)) {
  }
  if (h > MAXC) atomic_fetch_add(&r->bad, 1);
  sched_yield();
  atomic_fetch_sub(&r->holders, 1);
  if (resil_bulkhead_release(r->bh) != RESIL_OK) atomic_fetch_add(&r->bad, 1);
}

static void *async_racer(void *p) {
  racer *me = p;
  race *r = me->r;
  resil_bulkhead_waiter *w;
  if (resil_bulkhead_waiter_new(r->bh, &w) != RESIL_OK) {
    atomic_fetch_add(&r->bad, 1);
    return NULL;
  }
  for (int i = 0; i < ROUNDS; i++) {
    atomic_store(&me->got, 0);
    resil_decision d = resil_bulkhead_enqueue(r->bh, NULL, w, race_cb, me, NULL, NULL);
    if (d == RESIL_DECISION_GO) {
      atomic_fetch_add(&r->go, 1);
      hold(r);
      continue;
    }
    if (d != RESIL_DECISION_WAIT) {
      atomic_fetch_add(&r->bad, 1);
      continue;
    }
    /* Give up after a short while (as a loop's timer would), racing the
     * releases of the other threads. */
    for (int k = 0; k < (i % 4); k++) sched_yield();
    resil_bh_dequeue_result res = resil_bulkhead_dequeue(r->bh, w);
    if (res == RESIL_BH_WITHDRAWN) {
      atomic_fetch_add(&r->withdrawn, 1);
      if (atomic_load(&me->got)) atomic_fetch_add(&r->bad, 1); /* cb ran anyway */
    } else if (res == RESIL_BH_HANDED_OVER) {
      atomic_fetch_add(&r->handed, 1);
      /* The callback has run or is running: it runs exactly once. */
      while (!atomic_load(&me->got)) sched_yield();
      hold(r);
    } else {
      atomic_fetch_add(&r->bad, 1);
    }
  }
  resil_bulkhead_waiter_free(w);
  return NULL;
}

static void *block_racer(void *p) {
  race *r = p;
  for (int i = 0; i < ROUNDS; i++) {
    if (resil_bulkhead_acquire(r->bh, NULL, NULL) == RESIL_DECISION_GO) {
      atomic_fetch_add(&r->blk_go, 1);
      hold(r);
    } else {
      atomic_fetch_add(&r->blk_deny, 1);
    }
  }
  return NULL;
}

static void bulkhead_handover_races_withdrawal_without_losing_a_slot(void **state) {
  (void)state;
  race r;
  memset(&r, 0, sizeof r);
  r.bh = make_q(MAXC, MS(60000));
  racer rs[ASYNC_THREADS];
  pthread_t t[ASYNC_THREADS + BLOCK_THREADS];
  for (int i = 0; i < ASYNC_THREADS; i++) {
    rs[i].r = &r;
    atomic_init(&rs[i].got, 0);
    assert_int_equal(pthread_create(&t[i], NULL, async_racer, &rs[i]), 0);
  }
  for (int i = 0; i < BLOCK_THREADS; i++)
    assert_int_equal(pthread_create(&t[ASYNC_THREADS + i], NULL, block_racer, &r), 0);
  for (int i = 0; i < ASYNC_THREADS + BLOCK_THREADS; i++) pthread_join(t[i], NULL);

  print_message("go %ld handed %ld withdrawn %ld blk %ld\n", atomic_load(&r.go), atomic_load(&r.handed), atomic_load(&r.withdrawn), atomic_load(&r.blk_go));
  assert_int_equal(atomic_load(&r.bad), 0);
  assert_true(atomic_load(&r.max_holders) <= MAXC);
  /* Every WAIT ended in exactly one of the two fates, each callback once. */
  assert_int_equal(atomic_load(&r.go) + atomic_load(&r.handed) + atomic_load(&r.withdrawn),
                   (long)ASYNC_THREADS * ROUNDS);
  assert_int_equal(atomic_load(&r.cbs), atomic_load(&r.handed));
  assert_int_equal(atomic_load(&r.blk_deny), 0);
  resil_bulkhead_metrics m;
  assert_status(RESIL_OK, resil_bulkhead_get_metrics(r.bh, &m));
  /* No slot lost or doubled: all free again, the counts add up. */
  assert_int_equal(m.in_flight, 0);
  assert_int_equal(m.available, MAXC);
  assert_int_equal(m.waiting, 0);
  assert_int_equal(m.permitted, atomic_load(&r.go) + atomic_load(&r.handed) +
                                    atomic_load(&r.blk_go));
  assert_int_equal(m.withdrawn, atomic_load(&r.withdrawn));
  assert_true(m.handed_over >= (uint64_t)atomic_load(&r.handed));
  /* And the fast path works again. */
  for (int i = 0; i < MAXC; i++)
    assert_int_equal(resil_bulkhead_try_acquire(r.bh, NULL), RESIL_DECISION_GO);
  assert_int_equal(resil_bulkhead_try_acquire(r.bh, NULL), RESIL_DECISION_DENY);
  for (int i = 0; i < MAXC; i++) assert_status(RESIL_OK, resil_bulkhead_release(r.bh));
  resil_bulkhead_free(r.bh);
}

/* Waiters queued by one thread are served in that order by releases on
 * another. */
typedef struct releaser {
  resil_bulkhead *bh;
  int n;
} releaser;

static void *release_n(void *p) {
  releaser *rl = p;
  for (int i = 0; i < rl->n; i++) resil_bulkhead_release(rl->bh);
  return NULL;
}

static void bulkhead_enqueued_waiters_are_served_in_order_by_another_thread(
    void **state) {
  (void)state;
  enum { N = 8 };
  resil_bulkhead *bh = make_q(1, MS(60000));
  events ev;
  memset(&ev, 0, sizeof ev);
  pthread_mutex_init(&ev.mu, NULL);
  resil_bulkhead_waiter *w[N];
  async_waiter a[N];
  assert_int_equal(resil_bulkhead_try_acquire(bh, NULL), RESIL_DECISION_GO);
  for (int i = 0; i < N; i++) {
    a[i].ev = &ev;
    a[i].id = i;
    assert_status(RESIL_OK, resil_bulkhead_waiter_new(bh, &w[i]));
    assert_int_equal(resil_bulkhead_enqueue(bh, NULL, w[i], on_slot, &a[i], NULL, NULL),
                     RESIL_DECISION_WAIT);
  }
  releaser rl = {bh, N};
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, release_n, &rl), 0);
  pthread_join(t, NULL);
  assert_int_equal(ev.n, N);
  for (int i = 0; i < N; i++) assert_int_equal(ev.seq[i], i);
  assert_true(pthread_equal(ev.cb_thread, t));
  assert_status(RESIL_OK, resil_bulkhead_release(bh));
  assert_int_equal(resil_bulkhead_available(bh), 1);
  for (int i = 0; i < N; i++) resil_bulkhead_waiter_free(w[i]);
  resil_bulkhead_free(bh);
  pthread_mutex_destroy(&ev.mu);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(bulkhead_blocked_and_enqueued_waiters_share_one_fifo),
      cmocka_unit_test(bulkhead_cancelled_blocked_waiter_leaves_the_queue),
      cmocka_unit_test(bulkhead_handover_races_withdrawal_without_losing_a_slot),
      cmocka_unit_test(bulkhead_enqueued_waiters_are_served_in_order_by_another_thread),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
