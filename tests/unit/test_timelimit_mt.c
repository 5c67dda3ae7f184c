/* Time limiter (tasks run on real threads): P10, P11, cancellation,
 * deadlines, executors, and the safety of abandoned tasks. */
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#include "test_util.h"

#define LONG_NS (10 * INT64_C(1000000000))

/* A task that counts its effect first, then waits to be released. It
 * ignores its token (cooperation is optional) but notes whether it was
 * signalled by the time it was released. */
typedef struct task {
  resil_cancel *release;
  _Atomic int effects;
  _Atomic int finished;
  _Atomic int saw_cancel;
  int effect_after_release; /* P11: count the effect only after release */
} task;

static void task_init(task *t) {
  memset(t, 0, sizeof *t);
  assert_status(RESIL_OK, resil_cancel_new(&t->release));
}

static resil_outcome task_call(void *arg, const resil_ctx *ctx) {
  task *t = arg;
  if (!t->effect_after_release) atomic_fetch_add(&t->effects, 1);
  resil_cancel_wait_ns(t->release, LONG_NS);
  if (t->effect_after_release) atomic_fetch_add(&t->effects, 1);
  if (resil_cancel_is_set(ctx->cancel)) atomic_fetch_add(&t->saw_cancel, 1);
  atomic_fetch_add(&t->finished, 1);
  return resil_outcome_ok();
}

static resil_timelimiter *make(int64_t timeout_ns, int cancel_running,
                               resil_threadpool *executor) {
  resil_timelimiter_config cfg;
  resil_timelimiter_config_init(&cfg);
  cfg.timeout_ns = timeout_ns;
  cfg.cancel_running = cancel_running;
  cfg.executor = executor;
  resil_timelimiter *tl = NULL;
  assert_status(RESIL_OK, resil_timelimiter_new(&cfg, &tl, NULL));
  return tl;
}

static void assert_time_limited(resil_outcome o) {
  assert_int_equal(o.kind, RESIL_UNKNOWN);
  assert_int_equal(o.reason, RESIL_REASON_TIMEOUT);
  assert_true(o.flags & RESIL_OF_TIME_LIMITER);
}

static void timelimiter_defaults_and_validation(void **state) {
  (void)state;
  resil_timelimiter_config cfg;
  resil_timelimiter_config_init(&cfg);
  assert_int_equal(cfg.struct_size, sizeof cfg);
  assert_string_equal(cfg.name, "timelimiter");
  assert_int_equal(cfg.timeout_ns, INT64_C(1000000000));
  assert_int_equal(cfg.cancel_running, 1);
  assert_null(cfg.executor);
  assert_null(cfg.alloc);
  resil_timelimiter *tl = NULL;
  resil_error err;
  cfg.timeout_ns = 0;
  assert_status(RESIL_EINVAL, resil_timelimiter_new(&cfg, &tl, &err));
  assert_string_equal(err.field, "timeout_ns");
  assert_string_equal(err.msg, "timeout_ns: must be 1 ns..forever, got 0 ns");
  assert_int_equal(err.min, 1);
  assert_int_equal(err.max, INT64_MAX);
  assert_int_equal(err.got, 0);
  resil_timelimiter_config_init(&cfg);
  cfg.cancel_running = 2;
  assert_status(RESIL_EINVAL, resil_timelimiter_new(&cfg, &tl, &err));
  assert_string_equal(err.field, "cancel_running");
  assert_int_equal(err.got, 2);
  resil_timelimiter_config_init(&cfg);
  _Alignas(16) unsigned char junk[256] = {0};
  cfg.executor = (resil_threadpool *)junk;
  assert_status(RESIL_EINVAL, resil_timelimiter_new(&cfg, &tl, &err));
  assert_string_equal(err.field, "executor");
  assert_null(tl);
  resil_timelimiter_config_init(&cfg);
  assert_status(RESIL_OK, resil_timelimiter_new(&cfg, &tl, NULL));
  assert_string_equal(resil_timelimiter_name(tl), "timelimiter");
  assert_int_equal(resil_timelimiter_timeout_ns(tl), INT64_C(1000000000));
  resil_timelimiter_free(tl);
  resil_timelimiter_free(NULL);
}

static void timelimiter_allocation_failures_leak_nothing(void **state) {
  (void)state;
  resil_timelimiter_config cfg;
  resil_timelimiter_config_init(&cfg);
  long n = 1;
  for (;; n++) {
    test_alloc ta;
    test_alloc_init(&ta, n);
    cfg.alloc = &ta.a;
    resil_timelimiter *tl = NULL;
    resil_status st = resil_timelimiter_new(&cfg, &tl, NULL);
    if (st == RESIL_OK) {
      /* The run allocates its job next: failing it sends nothing. */
      ta.fail_at = ta.count + 1;
      task t;
      task_init(&t);
      resil_outcome o = resil_timelimiter_run(tl, NULL, task_call, &t);
      assert_int_equal(o.kind, RESIL_NOT_SENT);
      assert_int_equal(o.reason, RESIL_REASON_LOCAL_ERROR);
      assert_int_equal(atomic_load(&t.effects), 0);
      resil_timelimiter_metrics m;
      assert_status(RESIL_OK, resil_timelimiter_get_metrics(tl, &m));
      assert_int_equal(m.errors, 1);
      assert_int_equal(m.running, 0);
      resil_timelimiter_free(tl);
      resil_cancel_free(t.release);
      assert_int_equal(ta.live, 0);
      break;
    }
    assert_status(RESIL_ENOMEM, st);
    assert_null(tl);
    assert_int_equal(ta.live, 0);
  }
  assert_true(n > 1);
}

static resil_outcome answer_503(void *arg, const resil_ctx *ctx) {
  (void)arg;
  /* The task gets a token of its own, never signalled for a call in time. */
  if (!ctx->cancel || resil_cancel_is_set(ctx->cancel))
    return resil_outcome_make(RESIL_NOT_SENT, RESIL_REASON_LOCAL_ERROR);
  return resil_outcome_http(503);
}

static resil_outcome answer_ok(void *arg, const resil_ctx *ctx) {
  (void)arg;
  (void)ctx;
  return resil_outcome_ok();
}

static const resil_clock *seen_clock;
static resil_outcome note_clock(void *arg, const resil_ctx *ctx) {
  (void)arg;
  seen_clock = ctx->clock;
  return resil_outcome_ok();
}

static void timelimiter_task_without_caller_ctx_gets_the_configured_clock(
    void **state) {
  (void)state;
  resil_manual_clock *mc;
  assert_status(RESIL_OK, resil_manual_clock_new(0, 0, &mc));
  resil_timelimiter_config cfg;
  resil_timelimiter_config_init(&cfg);
  assert_null(cfg.clock);
  cfg.clock = resil_manual_clock_get(mc);
  resil_timelimiter *tl = NULL;
  assert_status(RESIL_OK, resil_timelimiter_new(&cfg, &tl, NULL));
  resil_outcome o = resil_timelimiter_run(tl, NULL, note_clock, NULL);
  assert_true(resil_outcome_is_success(&o));
  assert_ptr_equal(seen_clock, resil_manual_clock_get(mc));
  resil_timelimiter_free(tl);
  resil_manual_clock_free(mc);
}

static void timelimiter_returns_the_tasks_outcome_when_in_time(void **state) {
  (void)state;
  resil_timelimiter *tl = make(LONG_NS, 1, NULL);
  resil_ctx ctx;
  resil_ctx_init(&ctx);
  ctx.flags = RESIL_CALL_IDEMPOTENT;
  resil_outcome o = resil_timelimiter_run(tl, &ctx, answer_503, NULL);
  assert_int_equal(o.kind, RESIL_ANSWERED);
  assert_int_equal(o.http_status, 503);
  o = resil_timelimiter_run(tl, NULL, answer_ok, NULL);
  assert_true(resil_outcome_is_success(&o));
  resil_timelimiter_metrics m;
  assert_status(RESIL_OK, resil_timelimiter_get_metrics(tl, &m));
  assert_int_equal(m.calls, 2);
  assert_int_equal(m.successes, 1);
  assert_int_equal(m.failures, 1);
  assert_int_equal(m.timeouts, 0);
  assert_status(RESIL_OK, resil_timelimiter_wait_idle(tl, LONG_NS));
  resil_timelimiter_free(tl);
}

/* A timeout for calls whose task must have started when it expires: with
 * cancellation a task not yet in its call then is dropped, and a new thread
 * (or a woken worker) on a loaded machine under ThreadSanitizer can take
 * longer than the lab's 25 ms to get there. */
#define STARTED_BY_NS MS(250)

/* P10 (with STARTED_BY_NS for the lab's 25 ms): a limiter with
 * cancellation, "retry 2" on timeout (two runs), each task counts its effect
 * before waiting: final TIMEOUT, effects 2, both tasks finish after the
 * release (and both saw their token signalled). */
static void timelimiter_p10_retry_after_timeout_doubles_the_effect(
    void **state) {
  (void)state;
  resil_timelimiter *tl = make(STARTED_BY_NS, 1, NULL);
  task t;
  task_init(&t);
  resil_outcome o = resil_outcome_ok();
  int64_t t0 = resil_clock_now_ns(NULL);
  for (int attempt = 0; attempt < 2; attempt++) {
    o = resil_timelimiter_run(tl, NULL, task_call, &t);
    if (!(o.kind == RESIL_UNKNOWN && o.reason == RESIL_REASON_TIMEOUT)) break;
  }
  assert_true(resil_clock_now_ns(NULL) - t0 >= 2 * STARTED_BY_NS);
  assert_time_limited(o);
  assert_int_equal(atomic_load(&t.effects), 2);
  assert_int_equal(atomic_load(&t.finished), 0);
  resil_timelimiter_metrics m;
  assert_status(RESIL_OK, resil_timelimiter_get_metrics(tl, &m));
  assert_int_equal(m.calls, 2);
  assert_int_equal(m.timeouts, 2);
  assert_int_equal(m.abandoned_running, 2);
  assert_int_equal(m.running, 2);
  assert_status(RESIL_ETIMEDOUT, resil_timelimiter_wait_idle(tl, MS(1)));

  resil_cancel_signal(t.release);
  assert_status(RESIL_OK, resil_timelimiter_wait_idle(tl, LONG_NS));
  assert_int_equal(atomic_load(&t.finished), 2);
  assert_int_equal(atomic_load(&t.saw_cancel), 2);
  assert_int_equal(atomic_load(&t.effects), 2);
  assert_status(RESIL_OK, resil_timelimiter_get_metrics(tl, &m));
  assert_int_equal(m.abandoned_running, 0);
  assert_int_equal(m.running, 0);
  resil_timelimiter_free(tl);
  resil_cancel_free(t.release);
}

/* P11: without cancellation the caller stops waiting at the timeout, and
 * the task still reaches its effect after the caller returned. */
static void timelimiter_p11_task_reaches_its_effect_after_the_caller_left(
    void **state) {
  (void)state;
  resil_timelimiter *tl = make(MS(25), 0, NULL);
  task t;
  task_init(&t);
  t.effect_after_release = 1;
  resil_outcome o = resil_timelimiter_run(tl, NULL, task_call, &t);
  assert_time_limited(o);
  assert_int_equal(atomic_load(&t.effects), 0); /* not yet */
  resil_cancel_signal(t.release);
  assert_status(RESIL_OK, resil_timelimiter_wait_idle(tl, LONG_NS));
  assert_int_equal(atomic_load(&t.effects), 1);
  assert_int_equal(atomic_load(&t.saw_cancel), 0); /* never signalled */
  resil_timelimiter_free(tl);
  resil_cancel_free(t.release);
}

/* Signals the caller's token once the task has started. */
typedef struct canceller {
  resil_cancel *c;
  task *t;
} canceller;

static void *cancel_once_started(void *p) {
  canceller *k = p;
  for (int i = 0; i < 10000 && atomic_load(&k->t->effects) == 0; i++)
    resil_clock_sleep_ns(NULL, MS(1), NULL);
  resil_cancel_signal(k->c);
  return NULL;
}

static void timelimiter_callers_cancel_ends_the_wait_and_reaches_the_task(
    void **state) {
  (void)state;
  /* Even with cancel_running 0, the caller's own cancellation is passed on. */
  resil_timelimiter *tl = make(LONG_NS, 0, NULL);
  task t;
  task_init(&t);
  resil_ctx ctx;
  resil_ctx_init(&ctx);
  canceller k = {.t = &t};
  assert_status(RESIL_OK, resil_cancel_new(&k.c));
  ctx.cancel = k.c;
  pthread_t th;
  assert_int_equal(pthread_create(&th, NULL, cancel_once_started, &k), 0);
  int64_t t0 = resil_clock_now_ns(NULL);
  resil_outcome o = resil_timelimiter_run(tl, &ctx, task_call, &t);
  assert_true(resil_clock_now_ns(NULL) - t0 < MS(2000));
  pthread_join(th, NULL);
  assert_int_equal(o.kind, RESIL_UNKNOWN);
  assert_int_equal(o.reason, RESIL_REASON_CANCELLED);
  assert_false(o.flags & RESIL_OF_TIME_LIMITER);
  resil_cancel_signal(t.release);
  assert_status(RESIL_OK, resil_timelimiter_wait_idle(tl, LONG_NS));
  assert_int_equal(atomic_load(&t.saw_cancel), 1);
  resil_timelimiter_metrics m;
  assert_status(RESIL_OK, resil_timelimiter_get_metrics(tl, &m));
  assert_int_equal(m.cancelled, 1);
  resil_timelimiter_free(tl);
  resil_cancel_free(t.release);
  resil_cancel_free(k.c);
}

static void timelimiter_call_already_cancelled_is_not_started(void **state) {
  (void)state;
  resil_timelimiter *tl = make(LONG_NS, 1, NULL);
  task t;
  task_init(&t);
  resil_cancel *c;
  assert_status(RESIL_OK, resil_cancel_new(&c));
  resil_cancel_signal(c);
  resil_ctx ctx;
  resil_ctx_init(&ctx);
  ctx.cancel = c;
  resil_outcome o = resil_timelimiter_run(tl, &ctx, task_call, &t);
  assert_int_equal(o.kind, RESIL_NOT_SENT);
  assert_int_equal(o.reason, RESIL_REASON_CANCELLED);
  assert_int_equal(atomic_load(&t.effects), 0);
  resil_timelimiter_metrics m;
  assert_status(RESIL_OK, resil_timelimiter_get_metrics(tl, &m));
  assert_int_equal(m.cancelled, 1);
  assert_int_equal(m.running, 0);
  resil_timelimiter_free(tl);
  resil_cancel_free(c);
  resil_cancel_free(t.release);
}

static void timelimiter_ctx_deadline_shorter_than_the_timeout_bounds_the_wait(
    void **state) {
  (void)state;
  resil_timelimiter *tl = make(LONG_NS, 1, NULL);
  task t;
  task_init(&t);
  resil_ctx ctx;
  resil_ctx_init(&ctx);
  resil_ctx_set_timeout_ns(&ctx, MS(20));
  int64_t t0 = resil_clock_now_ns(NULL);
  resil_outcome o = resil_timelimiter_run(tl, &ctx, task_call, &t);
  int64_t waited = resil_clock_now_ns(NULL) - t0;
  assert_time_limited(o);
  assert_true(waited >= MS(15));
  assert_true(waited < MS(5000));
  resil_cancel_signal(t.release);
  resil_timelimiter_free(tl); /* blocks until the task ended */
  assert_int_equal(atomic_load(&t.finished), 1);
  resil_cancel_free(t.release);
}

static void timelimiter_passed_deadline_rejects_without_running(void **state) {
  (void)state;
  resil_timelimiter *tl = make(LONG_NS, 1, NULL);
  resil_manual_clock *mc;
  assert_status(RESIL_OK, resil_manual_clock_new(0, 0, &mc));
  resil_ctx ctx;
  resil_ctx_init(&ctx);
  ctx.clock = resil_manual_clock_get(mc);
  resil_ctx_set_timeout_ns(&ctx, MS(5));
  resil_manual_clock_advance_ns(mc, MS(5));
  task t;
  task_init(&t);
  resil_outcome o = resil_timelimiter_run(tl, &ctx, task_call, &t);
  assert_int_equal(o.kind, RESIL_REJECTED);
  assert_int_equal(o.reason, RESIL_REASON_DEADLINE);
  assert_int_equal(atomic_load(&t.effects), 0);
  resil_timelimiter_metrics m;
  assert_status(RESIL_OK, resil_timelimiter_get_metrics(tl, &m));
  assert_int_equal(m.rejected, 1);
  assert_int_equal(m.running, 0);
  resil_timelimiter_free(tl);
  resil_manual_clock_free(mc);
  resil_cancel_free(t.release);
}

static resil_threadpool *make_pool(uint32_t threads, uint32_t capacity) {
  resil_threadpool_config cfg;
  resil_threadpool_config_init(&cfg);
  cfg.threads = threads;
  cfg.queue_capacity = capacity;
  resil_threadpool *tp = NULL;
  assert_status(RESIL_OK, resil_threadpool_new(&cfg, &tp, NULL));
  return tp;
}

static void wait_idle_worker(resil_threadpool *tp) {
  resil_threadpool_metrics m;
  for (int i = 0; i < 10000; i++) {
    assert_status(RESIL_OK, resil_threadpool_get_metrics(tp, &m));
    if (m.idle == m.threads) return;
    resil_clock_sleep_ns(NULL, MS(1), NULL);
  }
  fail_msg("the pool's workers never became idle");
}

static void timelimiter_runs_tasks_on_an_executor_and_reports_its_rejection(
    void **state) {
  (void)state;
  resil_threadpool *tp = make_pool(1, 0);
  resil_timelimiter *tl = make(STARTED_BY_NS, 1, tp);
  wait_idle_worker(tp); /* with no queue, only an idle worker accepts */
  resil_outcome o = resil_timelimiter_run(tl, NULL, answer_503, NULL);
  assert_int_equal(o.http_status, 503);
  wait_idle_worker(tp); /* the worker is back from the first call */

  /* The one worker is busy with an abandoned task and the queue holds
   * nothing: the next call is rejected before it runs. */
  task t;
  task_init(&t);
  o = resil_timelimiter_run(tl, NULL, task_call, &t);
  assert_time_limited(o);
  task t2;
  task_init(&t2);
  o = resil_timelimiter_run(tl, NULL, task_call, &t2);
  assert_int_equal(o.kind, RESIL_REJECTED);
  assert_int_equal(o.reason, RESIL_REASON_QUEUE_FULL);
  assert_int_equal(atomic_load(&t2.effects), 0);
  resil_cancel_signal(t.release);
  assert_status(RESIL_OK, resil_timelimiter_wait_idle(tl, LONG_NS));
  resil_timelimiter_metrics m;
  assert_status(RESIL_OK, resil_timelimiter_get_metrics(tl, &m));
  assert_int_equal(m.calls, 3);
  assert_int_equal(m.rejected, 1);
  assert_int_equal(m.timeouts, 1);
  resil_timelimiter_free(tl);
  resil_threadpool_free(tp);
  resil_cancel_free(t.release);
  resil_cancel_free(t2.release);
}

static void timelimiter_task_abandoned_in_the_executor_queue_never_starts(
    void **state) {
  (void)state;
  resil_threadpool *tp = make_pool(1, 1);
  resil_timelimiter *tl = make(MS(10), 1, tp);
  task blocker;
  task_init(&blocker);
  assert_status(RESIL_OK,
                resil_threadpool_submit(tp, NULL, task_call, &blocker, NULL));
  for (int i = 0; i < 10000 && atomic_load(&blocker.effects) == 0; i++)
    resil_clock_sleep_ns(NULL, MS(1), NULL);
  assert_int_equal(atomic_load(&blocker.effects), 1); /* the worker is busy */
  task t;
  task_init(&t);
  resil_outcome o = resil_timelimiter_run(tl, NULL, task_call, &t);
  assert_time_limited(o); /* it waited in the queue the whole time */
  resil_cancel_signal(blocker.release);
  assert_status(RESIL_OK, resil_timelimiter_wait_idle(tl, LONG_NS));
  assert_int_equal(atomic_load(&t.effects), 0); /* dropped, never sent */
  resil_timelimiter_free(tl);
  resil_threadpool_free(tp); /* drains: the blocker ended */
  assert_int_equal(atomic_load(&blocker.finished), 1);
  resil_cancel_free(blocker.release);
  resil_cancel_free(t.release);
}

typedef struct freeing {
  resil_timelimiter *tl;
  task *t;
  _Atomic int freed;
} freeing;

static void *free_limiter(void *p) {
  freeing *f = p;
  resil_timelimiter_free(f->tl);
  atomic_store(&f->freed, 1);
  return NULL;
}

static void timelimiter_free_blocks_until_abandoned_tasks_end(void **state) {
  (void)state;
  freeing f;
  memset(&f, 0, sizeof f);
  f.tl = make(MS(5), 0, NULL);
  task t;
  task_init(&t);
  assert_time_limited(resil_timelimiter_run(f.tl, NULL, task_call, &t));
  pthread_t th;
  assert_int_equal(pthread_create(&th, NULL, free_limiter, &f), 0);
  resil_clock_sleep_ns(NULL, MS(30), NULL);
  assert_int_equal(atomic_load(&f.freed), 0); /* still blocked */
  resil_cancel_signal(t.release);
  pthread_join(th, NULL);
  assert_int_equal(atomic_load(&f.freed), 1);
  assert_int_equal(atomic_load(&t.finished), 1);
  resil_cancel_free(t.release);
}

/* Tasks that end around the timeout, so that every interleaving of "task
 * ends" and "caller gives up" happens; ASan and TSan check the job's
 * refcount. */
static resil_outcome jittery(void *arg, const resil_ctx *ctx) {
  (void)ctx;
  _Atomic unsigned *seq = arg;
  unsigned n = atomic_fetch_add(seq, 1);
  resil_clock_sleep_ns(NULL, (int64_t)(n % 5) * 250000, NULL); /* 0..1 ms */
  return resil_outcome_ok();
}

typedef struct stress {
  resil_timelimiter *tl;
  _Atomic unsigned seq;
  _Atomic long ok;
  _Atomic long timed_out;
} stress;

static void *stress_caller(void *p) {
  stress *s = p;
  for (int i = 0; i < 150; i++) {
    resil_outcome o = resil_timelimiter_run(s->tl, NULL, jittery, &s->seq);
    if (resil_outcome_is_success(&o))
      atomic_fetch_add(&s->ok, 1);
    else if (o.reason == RESIL_REASON_TIMEOUT)
      atomic_fetch_add(&s->timed_out, 1);
  }
  return NULL;
}

static void timelimiter_abandoned_tasks_are_freed_by_whichever_side_ends_last(
    void **state) {
  (void)state;
  stress s;
  memset(&s, 0, sizeof s);
  resil_threadpool *tp = make_pool(4, 64);
  for (int round = 0; round < 2; round++) {
    s.tl = make(MS(1) / 2, 1, round ? tp : NULL);
    atomic_store(&s.ok, 0);
    atomic_store(&s.timed_out, 0);
    pthread_t t[4];
    for (int i = 0; i < 4; i++)
      assert_int_equal(pthread_create(&t[i], NULL, stress_caller, &s), 0);
    for (int i = 0; i < 4; i++) pthread_join(t[i], NULL);
    assert_status(RESIL_OK, resil_timelimiter_wait_idle(s.tl, LONG_NS));
    resil_timelimiter_metrics m;
    assert_status(RESIL_OK, resil_timelimiter_get_metrics(s.tl, &m));
    assert_int_equal(m.calls, 600);
    assert_int_equal(m.successes + m.timeouts + m.rejected, 600);
    assert_int_equal(m.successes, (uint64_t)atomic_load(&s.ok));
    assert_int_equal(m.timeouts, (uint64_t)atomic_load(&s.timed_out));
    assert_int_equal(m.running, 0);
    assert_int_equal(m.abandoned_running, 0);
    resil_timelimiter_free(s.tl);
  }
  resil_threadpool_free(tp);
}

static void timelimiter_misuse_is_reported_not_crashed(void **state) {
  (void)state;
  resil_outcome o = resil_timelimiter_run(NULL, NULL, answer_ok, NULL);
  assert_int_equal(o.kind, RESIL_NOT_SENT);
  assert_int_equal(o.reason, RESIL_REASON_LOCAL_ERROR);
  resil_timelimiter *tl = make(LONG_NS, 1, NULL);
  o = resil_timelimiter_run(tl, NULL, NULL, NULL);
  assert_int_equal(o.reason, RESIL_REASON_LOCAL_ERROR);
  assert_status(RESIL_EINVAL, resil_timelimiter_wait_idle(tl, -1));
  assert_status(RESIL_EMISUSE, resil_timelimiter_wait_idle(NULL, 0));
  resil_timelimiter_metrics m;
  assert_status(RESIL_EINVAL, resil_timelimiter_get_metrics(tl, NULL));
  assert_status(RESIL_EMISUSE, resil_timelimiter_get_metrics(NULL, &m));
  assert_null(resil_timelimiter_name(NULL));
  assert_int_equal(resil_timelimiter_timeout_ns(NULL), 0);
  /* A ctx never passed through resil_ctx_init(): nothing is started. */
  resil_ctx raw;
  memset(&raw, 0, sizeof raw);
  o = resil_timelimiter_run(tl, &raw, answer_ok, NULL);
  assert_int_equal(o.kind, RESIL_NOT_SENT);
  assert_int_equal(o.reason, RESIL_REASON_LOCAL_ERROR);
  assert_status(RESIL_OK, resil_timelimiter_get_metrics(tl, &m));
  assert_int_equal(m.calls, 0);
  resil_timelimiter_free(tl);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(timelimiter_defaults_and_validation),
      cmocka_unit_test(timelimiter_allocation_failures_leak_nothing),
      cmocka_unit_test(
          timelimiter_task_without_caller_ctx_gets_the_configured_clock),
      cmocka_unit_test(timelimiter_returns_the_tasks_outcome_when_in_time),
      cmocka_unit_test(timelimiter_p10_retry_after_timeout_doubles_the_effect),
      cmocka_unit_test(
          timelimiter_p11_task_reaches_its_effect_after_the_caller_left),
      cmocka_unit_test(
          timelimiter_callers_cancel_ends_the_wait_and_reaches_the_task),
      cmocka_unit_test(timelimiter_call_already_cancelled_is_not_started),
      cmocka_unit_test(
          timelimiter_ctx_deadline_shorter_than_the_timeout_bounds_the_wait),
      cmocka_unit_test(timelimiter_passed_deadline_rejects_without_running),
      cmocka_unit_test(
          timelimiter_runs_tasks_on_an_executor_and_reports_its_rejection),
      cmocka_unit_test(
          timelimiter_task_abandoned_in_the_executor_queue_never_starts),
      cmocka_unit_test(timelimiter_free_blocks_until_abandoned_tasks_end),
      cmocka_unit_test(
          timelimiter_abandoned_tasks_are_freed_by_whichever_side_ends_last),
      cmocka_unit_test(timelimiter_misuse_is_reported_not_crashed),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
