/* One hedge (percentile mode, shared retry budget) driven from several
 * threads at once: every counter adds up, the budget is never overdrawn,
 * and the tracker stays consistent (run under ThreadSanitizer). */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <string.h>
#include <time.h>

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

/* ---- the blocking form on a thread pool --------------------------------- */

/* The first attempt hangs until its token fires (up to 10 s); later ones
 * answer at once. */
typedef struct slow_first {
  _Atomic int calls;
  _Atomic int primary_cancelled;
  _Atomic int on_caller_thread;
  pthread_t caller;
} slow_first;

/* The hedge delay in the races where the first call to begin is the slow
 * one: the primary's pool task must begin before the hedge is sent, and an
 * idle worker woken on a loaded machine under ThreadSanitizer can take
 * longer than 20 ms to run. */
#define PRIMARY_FIRST_NS MS(200)

static resil_outcome slow_then_fast(void *arg, const resil_ctx *ctx) {
  slow_first *s = arg;
  if (pthread_equal(pthread_self(), s->caller)) atomic_fetch_add(&s->on_caller_thread, 1);
  if (atomic_fetch_add(&s->calls, 1) == 0) {
    if (resil_cancel_wait_ns(ctx->cancel, MS(10000))) {
      atomic_store(&s->primary_cancelled, 1);
      return resil_outcome_make(RESIL_NOT_SENT, RESIL_REASON_CANCELLED);
    }
    return resil_outcome_http(200);
  }
  return resil_outcome_http(201);
}

static resil_threadpool *make_pool(uint32_t threads) {
  resil_threadpool_config pc;
  resil_threadpool_config_init(&pc);
  pc.threads = threads;
  resil_threadpool *tp = NULL;
  assert_status(RESIL_OK, resil_threadpool_new(&pc, &tp, NULL));
  return tp;
}

static void hedge_run_on_pool_wins_with_the_hedge_and_cancels_the_primary(
    void **state) {
  (void)state;
  resil_threadpool *tp = make_pool(3);
  resil_hedge_config cfg;
  resil_hedge_config_init(&cfg);
  cfg.delay_ns = PRIMARY_FIRST_NS;
  resil_hedge *h = NULL;
  assert_status(RESIL_OK, resil_hedge_new(&cfg, &h, NULL));
  slow_first s;
  memset(&s, 0, sizeof s);
  s.caller = pthread_self();
  resil_ctx ctx;
  resil_ctx_init(&ctx);
  ctx.flags = RESIL_CALL_IDEMPOTENT;
  resil_outcome o = resil_hedge_run_on(h, &ctx, tp, slow_then_fast, &s);
  assert_int_equal(o.http_status, 201); /* the hedge's answer */
  assert_int_equal(atomic_load(&s.calls), 2);
  /* The loser was cancelled through its token, and had returned. */
  assert_int_equal(atomic_load(&s.primary_cancelled), 1);
  assert_int_equal(atomic_load(&s.on_caller_thread), 0);
  resil_hedge_metrics m;
  assert_status(RESIL_OK, resil_hedge_get_metrics(h, &m));
  assert_int_equal(m.calls, 1);
  assert_int_equal(m.hedged_calls, 1);
  assert_int_equal(m.hedges_sent, 1);
  assert_int_equal(m.hedges_won, 1);
  assert_int_equal(m.cancelled_losers, 1);

  /* An unkeyed write runs once, on the calling thread, never hedged. */
  memset(&s, 0, sizeof s);
  s.caller = pthread_self();
  resil_cancel *pre;
  assert_status(RESIL_OK, resil_cancel_new(&pre));
  resil_cancel_signal(pre); /* so the single attempt does not hang */
  resil_ctx post;
  resil_ctx_init(&post);
  post.cancel = pre;
  o = resil_hedge_run_on(h, &post, tp, slow_then_fast, &s);
  assert_int_equal(o.kind, RESIL_NOT_SENT);
  assert_int_equal(atomic_load(&s.calls), 1);
  assert_int_equal(atomic_load(&s.on_caller_thread), 1);
  assert_status(RESIL_OK, resil_hedge_get_metrics(h, &m));
  assert_int_equal(m.passed_unsafe, 1);
  assert_int_equal(m.hedges_sent, 1);
  resil_cancel_free(pre);
  /* Misuse. */
  o = resil_hedge_run_on(h, &ctx, NULL, slow_then_fast, &s);
  assert_int_equal(o.reason, RESIL_REASON_LOCAL_ERROR);
  o = resil_hedge_run_on(NULL, &ctx, tp, slow_then_fast, &s);
  assert_int_equal(o.reason, RESIL_REASON_LOCAL_ERROR);
  resil_hedge_free(h);
  resil_threadpool_free(tp);
}

static resil_outcome fast_ok(void *arg, const resil_ctx *ctx) {
  (void)ctx;
  atomic_fetch_add((_Atomic int *)arg, 1);
  return resil_outcome_ok();
}

/* A primary that answers before the delay is the only attempt; the
 * caller's cancellation reaches a hanging attempt. */
static void hedge_run_on_pool_fast_primary_and_caller_cancel(void **state) {
  (void)state;
  resil_threadpool *tp = make_pool(2);
  resil_hedge_config cfg;
  resil_hedge_config_init(&cfg);
  cfg.delay_ns = MS(60000);
  resil_hedge *h = NULL;
  assert_status(RESIL_OK, resil_hedge_new(&cfg, &h, NULL));
  _Atomic int n = 0;
  resil_ctx ctx;
  resil_ctx_init(&ctx);
  ctx.flags = RESIL_CALL_STABLE_KEY;
  resil_outcome o = resil_hedge_run_on(h, &ctx, tp, fast_ok, &n);
  assert_true(resil_outcome_is_success(&o));
  assert_int_equal(atomic_load(&n), 1);
  /* The caller's token, set before the run, is passed on: the hanging
   * primary returns at once and ends the call. */
  slow_first s;
  memset(&s, 0, sizeof s);
  s.caller = pthread_self();
  resil_cancel *tok;
  assert_status(RESIL_OK, resil_cancel_new(&tok));
  resil_cancel_signal(tok);
  ctx.cancel = tok;
  o = resil_hedge_run_on(h, &ctx, tp, slow_then_fast, &s);
  assert_int_equal(o.kind, RESIL_NOT_SENT);
  assert_int_equal(o.reason, RESIL_REASON_CANCELLED);
  assert_int_equal(atomic_load(&s.primary_cancelled), 1);
  resil_hedge_metrics m;
  assert_status(RESIL_OK, resil_hedge_get_metrics(h, &m));
  assert_int_equal(m.hedges_sent, 0);
  resil_cancel_free(tok);
  resil_hedge_free(h);
  resil_threadpool_free(tp);
}

/* A keyed write on the thread pool: the primary holds the key (it answers
 * 201 only after the hedge has answered), the hedge meets it PENDING and
 * gets 409. The 409 must not win (the default keyed rule, the same
 * resil_hedge_acceptable the engine applies): the run returns the
 * primary's 201, nothing cancelled. The primary returns the moment the pool
 * says the hedge's task has run to its end, so both often end while the
 * caller's thread has not yet woken: the run must record them in the order
 * they ended (in attempt order the 201 won first and the 409, already
 * ended, counted as a cancelled loser: seen in CI under ThreadSanitizer).
 * The roles go by call order, and a loaded pool can start the hedge's task
 * before the primary's: such a race (both submitted before the first call)
 * is not checked for which attempt won. */
typedef struct keyed_race {
  resil_threadpool *tp;
  uint64_t completed_before; /* the pool's counts before the run */
  uint64_t submitted_before;
  _Atomic int calls;
  _Atomic int hedge_answered;
  _Atomic int primary_cancelled;
  _Atomic int gave_up;   /* the hedge's task never completed (10 s) */
  _Atomic int ambiguous; /* both tasks were submitted before the first call
                            began: which attempt plays the primary is not
                            known (the pool may have run the hedge first) */
} keyed_race;

static void pool_counts(resil_threadpool *tp, uint64_t *completed, uint64_t *submitted) {
  resil_threadpool_metrics pm;
  memset(&pm, 0, sizeof pm);
  assert_status(RESIL_OK, resil_threadpool_get_metrics(tp, &pm));
  *completed = pm.completed;
  if (submitted) *submitted = pm.submitted;
}

/* Waits until every task submitted has been counted as completed (a
 * worker counts its task just after the run that waited for it has
 * returned), then takes the pool's counts. */
static void pool_quiet(resil_threadpool *tp, uint64_t *completed, uint64_t *submitted) {
  for (int i = 0; i < 100000; i++) {
    pool_counts(tp, completed, submitted);
    if (*completed == *submitted) return;
    sched_yield();
  }
  fail_msg("the pool's tasks never all completed");
}

static int64_t mono_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* The first call plays the primary (201 once the other task has completed),
 * the second the hedge (409 at once). */
static resil_outcome keyed_primary_then_409(void *arg, const resil_ctx *ctx) {
  keyed_race *k = arg;
  if (atomic_fetch_add(&k->calls, 1) == 0) {
    uint64_t done, submitted;
    pool_counts(k->tp, &done, &submitted);
    if (submitted != k->submitted_before + 1) atomic_store(&k->ambiguous, 1);
    int64_t give_up = mono_ns() + MS(10000);
    while (done == k->completed_before) {
      if (resil_cancel_is_set(ctx->cancel)) {
        atomic_store(&k->primary_cancelled, 1);
        return resil_outcome_make(RESIL_UNKNOWN, RESIL_REASON_CANCELLED);
      }
      if (mono_ns() > give_up) {
        atomic_store(&k->gave_up, 1);
        break;
      }
      sched_yield();
      pool_counts(k->tp, &done, NULL);
    }
    return resil_outcome_http(201);
  }
  atomic_store(&k->hedge_answered, 1);
  return resil_outcome_http(409);
}

static void hedge_run_on_pool_keyed_409_does_not_win(void **state) {
  (void)state;
  resil_threadpool *tp = make_pool(3);
  resil_hedge_config cfg;
  resil_hedge_config_init(&cfg);
  cfg.delay_ns = MS(1);
  resil_hedge *h = NULL;
  assert_status(RESIL_OK, resil_hedge_new(&cfg, &h, NULL));
  enum { RACES = 200 };
  int clear = 0;
  resil_hedge_metrics before;
  assert_status(RESIL_OK, resil_hedge_get_metrics(h, &before));
  for (int i = 0; i < RACES; i++) {
    keyed_race k;
    memset(&k, 0, sizeof k);
    k.tp = tp;
    pool_quiet(tp, &k.completed_before, &k.submitted_before);
    resil_ctx ctx;
    resil_ctx_init(&ctx);
    ctx.flags = RESIL_CALL_STABLE_KEY;
    resil_outcome o = resil_hedge_run_on(h, &ctx, tp, keyed_primary_then_409, &k);
    /* Whichever attempt played the primary, the 409 never wins and, having
     * ended first, is never counted as a cancelled loser. */
    assert_int_equal(atomic_load(&k.gave_up), 0);
    assert_int_equal(o.http_status, 201);
    assert_int_equal(atomic_load(&k.calls), 2);
    assert_int_equal(atomic_load(&k.hedge_answered), 1);
    assert_int_equal(atomic_load(&k.primary_cancelled), 0);
    resil_hedge_metrics m;
    assert_status(RESIL_OK, resil_hedge_get_metrics(h, &m));
    if (m.cancelled_losers != before.cancelled_losers)
      fail_msg("race %d: the 409 that ended first counted as a cancelled loser", i);
    assert_int_equal(m.hedges_sent, before.hedges_sent + 1);
    /* The 201 is the primary's unless the pool ran the hedge first. */
    if (!atomic_load(&k.ambiguous)) {
      assert_int_equal(m.hedges_won, before.hedges_won);
      clear++;
    }
    before = m;
  }
  /* The hedge waits 1 ms: nearly always the primary is running by then. */
  assert_true(clear >= RACES / 2);
  resil_hedge_free(h);
  resil_threadpool_free(tp);
}

/* A keyed write on the pool whose primary times out after sending while
 * its hedge then meets the key PENDING (409): the call's outcome is the
 * primary's UNKNOWN, not the definitive-looking 409 that ended last. */
typedef struct unknown_race {
  _Atomic int calls;
  _Atomic int primary_returned;
} unknown_race;

static resil_outcome primary_unknown_hedge_409(void *arg, const resil_ctx *ctx) {
  unknown_race *u = arg;
  (void)ctx;
  if (atomic_fetch_add(&u->calls, 1) == 0) {
    /* the primary: wait (bounded) for the hedge to start, then time out */
    for (int i = 0; i < 10000 && atomic_load(&u->calls) < 2; i++) test_sleep_ms(1);
    atomic_store(&u->primary_returned, 1);
    return resil_outcome_make(RESIL_UNKNOWN, RESIL_REASON_TIMEOUT);
  }
  /* the hedge: answers 409 after the primary ended */
  for (int i = 0; i < 10000 && !atomic_load(&u->primary_returned); i++) test_sleep_ms(1);
  test_sleep_ms(50);
  return resil_outcome_http(409);
}

static void hedge_run_on_pool_keyed_unknown_is_not_hidden_by_a_late_409(void **state) {
  (void)state;
  resil_threadpool *tp = make_pool(3);
  resil_hedge_config cfg;
  resil_hedge_config_init(&cfg);
  cfg.delay_ns = 0;
  resil_hedge *h = NULL;
  assert_status(RESIL_OK, resil_hedge_new(&cfg, &h, NULL));
  unknown_race u;
  memset(&u, 0, sizeof u);
  resil_ctx ctx;
  resil_ctx_init(&ctx);
  ctx.flags = RESIL_CALL_STABLE_KEY;
  resil_outcome o = resil_hedge_run_on(h, &ctx, tp, primary_unknown_hedge_409, &u);
  assert_int_equal(atomic_load(&u.calls), 2);
  assert_int_equal(o.kind, RESIL_UNKNOWN);
  assert_int_equal(o.reason, RESIL_REASON_TIMEOUT);
  resil_hedge_metrics m;
  assert_status(RESIL_OK, resil_hedge_get_metrics(h, &m));
  assert_int_equal(m.hedges_sent, 1);
  assert_int_equal(m.hedges_won, 0);
  resil_hedge_free(h);
  resil_threadpool_free(tp);
}

/* ---- the event listener on the thread-pool form ------------------------- */

typedef struct ev_rec {
  pthread_mutex_t mu;
  pthread_t caller;
  int off_caller; /* events seen on another thread than the caller's */
  size_t n;
  resil_hedge_event ev[16];
} ev_rec;

static void record_ev(void *user, const resil_hedge_event *ev) {
  ev_rec *r = user;
  pthread_mutex_lock(&r->mu);
  if (!pthread_equal(pthread_self(), r->caller)) r->off_caller++;
  if (r->n < 16) r->ev[r->n++] = *ev;
  pthread_mutex_unlock(&r->mu);
}

/* resil_hedge_run_on goes through the split form: the hedge that wins is
 * reported SENT then WON, the primary CANCELLED_LOSER, all on the calling
 * thread; an unkeyed write PASSED_UNSAFE. */
static void hedge_run_on_pool_reports_sent_won_and_the_cancelled_primary(void **state) {
  (void)state;
  resil_threadpool *tp = make_pool(3);
  ev_rec r;
  memset(&r, 0, sizeof r);
  pthread_mutex_init(&r.mu, NULL);
  r.caller = pthread_self();
  resil_hedge_config cfg;
  resil_hedge_config_init(&cfg);
  cfg.name = "pool-hedge";
  cfg.delay_ns = PRIMARY_FIRST_NS;
  cfg.on_event = record_ev;
  cfg.on_event_user = &r;
  resil_hedge *h = NULL;
  assert_status(RESIL_OK, resil_hedge_new(&cfg, &h, NULL));
  slow_first s;
  memset(&s, 0, sizeof s);
  s.caller = pthread_self();
  resil_ctx ctx;
  resil_ctx_init(&ctx);
  ctx.flags = RESIL_CALL_IDEMPOTENT;
  resil_outcome o = resil_hedge_run_on(h, &ctx, tp, slow_then_fast, &s);
  assert_int_equal(o.http_status, 201);
  pthread_mutex_lock(&r.mu);
  assert_int_equal(r.n, 3);
  assert_int_equal(r.off_caller, 0);
  assert_int_equal(r.ev[0].kind, RESIL_HEDGE_EVENT_SENT);
  assert_string_equal(r.ev[0].name, "pool-hedge");
  assert_int_equal(r.ev[0].hedge, 1);
  assert_int_equal(r.ev[0].delay_ns, PRIMARY_FIRST_NS);
  assert_true(r.ev[0].elapsed_ns >= PRIMARY_FIRST_NS);
  assert_int_equal(r.ev[1].kind, RESIL_HEDGE_EVENT_WON);
  assert_int_equal(r.ev[1].hedge, 1);
  assert_int_equal(r.ev[1].has_outcome, 1);
  assert_int_equal(r.ev[1].outcome.http_status, 201);
  assert_int_equal(r.ev[2].kind, RESIL_HEDGE_EVENT_CANCELLED_LOSER);
  assert_int_equal(r.ev[2].hedge, 0);
  r.n = 0;
  pthread_mutex_unlock(&r.mu);
  /* An unkeyed write: one attempt, reported passed through. */
  _Atomic int calls = 0;
  resil_ctx post;
  resil_ctx_init(&post);
  o = resil_hedge_run_on(h, &post, tp, fast_ok, &calls);
  assert_true(resil_outcome_is_success(&o));
  assert_int_equal(atomic_load(&calls), 1);
  pthread_mutex_lock(&r.mu);
  assert_int_equal(r.n, 1);
  assert_int_equal(r.ev[0].kind, RESIL_HEDGE_EVENT_PASSED_UNSAFE);
  pthread_mutex_unlock(&r.mu);
  resil_hedge_free(h);
  resil_threadpool_free(tp);
  pthread_mutex_destroy(&r.mu);
}

/* ---- listeners added and removed while events fire ---------------------- */

typedef struct churn {
  resil_hedge *h;
  _Atomic int stop;
  _Atomic long seen[2];
  _Atomic int removed[2]; /* set after resil_hedge_listener_remove returned */
  _Atomic long late;      /* calls of a listener after its removal returned */
} churn;

typedef struct churn_user {
  churn *c;
  int i;
} churn_user;

static void churn_ev(void *user, const resil_hedge_event *ev) {
  churn_user *u = user;
  (void)ev;
  if (atomic_load(&u->c->removed[u->i])) atomic_fetch_add(&u->c->late, 1);
  atomic_fetch_add(&u->c->seen[u->i], 1);
}

static void *churn_caller(void *p) {
  churn *c = p;
  resil_ctx ctx;
  resil_ctx_init(&ctx); /* unkeyed: every begin is one PASSED_UNSAFE event */
  while (!atomic_load(&c->stop)) {
    resil_hedge_call hc;
    (void)resil_hedge_begin(c->h, &ctx, &hc, NULL);
  }
  return NULL;
}

/* Callers fire events while listeners are added and removed: once remove
 * returned the listener is never called again (so its user may be freed),
 * and a listener added is called (TSan checks the list's accesses). */
static void hedge_listener_add_remove_while_events_fire(void **state) {
  (void)state;
  resil_hedge_config cfg;
  resil_hedge_config_init(&cfg);
  churn c;
  memset(&c, 0, sizeof c);
  assert_status(RESIL_OK, resil_hedge_new(&cfg, &c.h, NULL));
  churn_user u[2] = {{&c, 0}, {&c, 1}};
  pthread_t t[2];
  for (int i = 0; i < 2; i++) assert_int_equal(pthread_create(&t[i], NULL, churn_caller, &c), 0);
  for (int round = 0; round < 200; round++) {
    for (int i = 0; i < 2; i++) {
      atomic_store(&c.removed[i], 0);
      assert_status(RESIL_OK, resil_hedge_listener_add(c.h, churn_ev, &u[i]));
    }
    long before = atomic_load(&c.seen[0]);
    for (int k = 0; k < 1000 && atomic_load(&c.seen[0]) == before; k++) test_sleep_ms(1);
    for (int i = 0; i < 2; i++) {
      assert_status(RESIL_OK, resil_hedge_listener_remove(c.h, churn_ev, &u[i]));
      atomic_store(&c.removed[i], 1);
    }
  }
  atomic_store(&c.stop, 1);
  for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
  assert_int_equal(atomic_load(&c.late), 0);
  assert_true(atomic_load(&c.seen[0]) >= 200);
  assert_true(atomic_load(&c.seen[1]) > 0);
  assert_status(RESIL_EINVAL, resil_hedge_listener_remove(c.h, churn_ev, &u[0]));
  resil_hedge_free(c.h);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(hedge_counters_add_up_under_concurrent_calls),
      cmocka_unit_test(hedge_run_on_pool_wins_with_the_hedge_and_cancels_the_primary),
      cmocka_unit_test(hedge_run_on_pool_fast_primary_and_caller_cancel),
      cmocka_unit_test(hedge_run_on_pool_keyed_409_does_not_win),
      cmocka_unit_test(hedge_run_on_pool_keyed_unknown_is_not_hidden_by_a_late_409),
      cmocka_unit_test(hedge_listener_add_remove_while_events_fire),
      cmocka_unit_test(hedge_run_on_pool_reports_sent_won_and_the_cancelled_primary),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
