/* Time limiter.
 *
 * Each run allocates one job: the state its caller and its task share (the
 * task's ctx and token, the outcome, "done", "abandoned"). The job starts
 * with two references, one per side, and whoever drops the last one frees
 * it, so the caller can return at the timeout while the task runs on.
 *
 * Lock order: a job's mutex is never held while taking the limiter's. The
 * task publishes its outcome under the job's mutex, lets go, drops its job
 * reference, and only then reports its end to the limiter, under the
 * limiter's mutex: that report is its last access to the limiter, so once
 * `running` reaches 0 the limiter may be freed. */
#include <stdatomic.h>
#include <string.h>

#include "bulkhead/sync_int.h"
#include "core/internal.h"
#include "resil/timelimit.h"

struct resil_timelimiter {
  unsigned magic;
  int cancel_running;
  int64_t timeout_ns;
  resil_threadpool *executor;
  const resil_clock *clock; /* for the task's default ctx */
  pthread_mutex_t mu;
  pthread_cond_t idle_cv; /* running reached 0 */
  uint64_t running;       /* under mu */
  _Atomic uint64_t abandoned;
  _Atomic uint64_t calls, successes, failures, timeouts, cancelled, rejected,
      errors;
  char *name;
  const resil_allocator *alloc;
};

typedef struct tl_job {
  _Atomic int refs;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int done;      /* under mu */
  int abandoned; /* under mu */
  resil_outcome outcome;
  resil_call_fn fn;
  void *arg;
  void (*arg_done)(void *arg); /* called once when arg is no longer used */
  resil_ctx ctx; /* the task's: the caller's copy with ctx.cancel = token */
  resil_cancel *token;
  resil_timelimiter *tl;
  const resil_allocator *alloc;
} tl_job;

static inline int valid(const resil_timelimiter *tl) {
  return tl && tl->magic == RESIL_MAGIC_TIMELIM;
}

static inline void count(_Atomic uint64_t *c) {
  atomic_fetch_add_explicit(c, 1, memory_order_relaxed);
}

static void job_unref(tl_job *j) {
  if (atomic_fetch_sub_explicit(&j->refs, 1, memory_order_acq_rel) != 1) return;
  resil_cancel_free(j->token);
  pthread_cond_destroy(&j->cv);
  pthread_mutex_destroy(&j->mu);
  resil__free(j->alloc, j);
}

static void task_ended(resil_timelimiter *tl, int abandoned) {
  if (abandoned) atomic_fetch_sub_explicit(&tl->abandoned, 1, memory_order_relaxed);
  pthread_mutex_lock(&tl->mu);
  if (--tl->running == 0) pthread_cond_broadcast(&tl->idle_cv);
  pthread_mutex_unlock(&tl->mu);
}

/* The task side. Also the executor's call function (its ctx is unused: the
 * task's ctx lives in the job). */
static resil_outcome job_run(void *arg, const resil_ctx *unused) {
  (void)unused;
  tl_job *j = arg;
  resil_outcome o;
  /* Only the limiter signals this token, and only for a caller that gave
   * up: a task still queued by then is dropped before it sends anything. */
  if (resil_cancel_is_set(j->token))
    o = resil_outcome_make(RESIL_NOT_SENT, RESIL_REASON_CANCELLED);
  else
    o = j->fn(j->arg, &j->ctx);
  if (j->arg_done) j->arg_done(j->arg);
  resil_timelimiter *tl = j->tl;
  pthread_mutex_lock(&j->mu);
  j->outcome = o;
  j->done = 1;
  int abandoned = j->abandoned;
  pthread_cond_signal(&j->cv);
  pthread_mutex_unlock(&j->mu);
  job_unref(j);
  task_ended(tl, abandoned);
  return o;
}

static void *job_thread(void *arg) {
  job_run(arg, NULL);
  return NULL;
}

/* The 0.1 layout ends with `alloc`. */
#define TL_CONFIG_MIN_SIZE                                                     \
  (offsetof(resil_timelimiter_config, alloc) + sizeof(const resil_allocator *))

static void config_defaults(resil_timelimiter_config *cfg) {
  memset(cfg, 0, sizeof *cfg);
  cfg->struct_size = sizeof *cfg;
  cfg->name = "timelimiter";
  cfg->timeout_ns = RESIL_NS_PER_S;
  cfg->cancel_running = 1;
  cfg->executor = NULL;
  cfg->clock = NULL;
  cfg->alloc = NULL;
}

void resil_timelimiter_config_init_sized(resil_timelimiter_config *cfg,
                                         size_t n) {
  if (!cfg) return;
  resil_timelimiter_config full;
  config_defaults(&full);
  resil__sized_out(cfg, n, &full, sizeof full);
}

resil_status resil_timelimiter_new(const resil_timelimiter_config *ucfg,
                                   resil_timelimiter **out, resil_error *err) {
  if (!ucfg) return resil__err(err, RESIL_EINVAL, "cfg", "must not be NULL");
  if (!out) return resil__err(err, RESIL_EINVAL, "out", "must not be NULL");
  resil_timelimiter_config full;
  const resil_timelimiter_config *cfg = &full;
  config_defaults(&full);
  resil_status st = resil__sized_in(&full, sizeof full, ucfg, TL_CONFIG_MIN_SIZE,
                                    "resil_timelimiter_config",
                                    "resil_timelimiter_config_init", err);
  if (st != RESIL_OK) return st;
  if ((st = resil__check_ns(err, "timeout_ns", cfg->timeout_ns, 1,
                            INT64_MAX)))
    return st;
  if ((st = resil__check_range(err, "cancel_running", cfg->cancel_running, 0,
                               1)))
    return st;
  if (cfg->executor) {
    resil_threadpool_metrics m;
    if (resil_threadpool_get_metrics(cfg->executor, &m) != RESIL_OK)
      return resil__err(err, RESIL_EINVAL, "executor",
                        "must be NULL or a live thread pool");
  }

  const resil_allocator *a = cfg->alloc;
  resil_timelimiter *tl = resil__calloc(a, sizeof *tl);
  if (!tl) return resil__err(err, RESIL_ENOMEM, NULL, "out of memory");
  int ok;
  tl->name = resil__strdup(a, cfg->name ? cfg->name : "timelimiter", &ok);
  if (!ok) {
    st = resil__err(err, RESIL_ENOMEM, NULL, "out of memory");
    goto fail_name;
  }
  if (pthread_mutex_init(&tl->mu, NULL) != 0) {
    st = resil__err(err, RESIL_ESYS, NULL, "cannot create a mutex");
    goto fail_mu;
  }
  if (resil__cond_init_mono(&tl->idle_cv) != 0) {
    st = resil__err(err, RESIL_ESYS, NULL, "cannot create a condition variable");
    goto fail_cv;
  }
  tl->timeout_ns = cfg->timeout_ns;
  tl->cancel_running = cfg->cancel_running;
  tl->executor = cfg->executor;
  tl->clock = cfg->clock;
  tl->alloc = a;
  tl->magic = RESIL_MAGIC_TIMELIM;
  *out = tl;
  return RESIL_OK;

fail_cv:
  pthread_mutex_destroy(&tl->mu);
fail_mu:
  resil__free(a, tl->name);
fail_name:
  resil__free(a, tl);
  return st;
}

void resil_timelimiter_free(resil_timelimiter *tl) {
  if (!valid(tl)) return;
  pthread_mutex_lock(&tl->mu);
  while (tl->running > 0) pthread_cond_wait(&tl->idle_cv, &tl->mu);
  pthread_mutex_unlock(&tl->mu);
  tl->magic = RESIL_MAGIC_DEAD;
  pthread_cond_destroy(&tl->idle_cv);
  pthread_mutex_destroy(&tl->mu);
  const resil_allocator *a = tl->alloc;
  resil__free(a, tl->name);
  resil__free(a, tl);
}

static tl_job *job_new(resil_timelimiter *tl, const resil_ctx *ctx,
                       resil_call_fn fn, void *arg, void (*arg_done)(void *)) {
  tl_job *j = resil__calloc(tl->alloc, sizeof *j);
  if (!j) return NULL;
  if (resil_cancel_new(&j->token) != RESIL_OK) goto fail_token;
  if (pthread_mutex_init(&j->mu, NULL) != 0) goto fail_mu;
  if (resil__cond_init_mono(&j->cv) != 0) goto fail_cv;
  atomic_init(&j->refs, 2);
  j->fn = fn;
  j->arg = arg;
  j->arg_done = arg_done;
  if (ctx) {
    j->ctx = *ctx;
  } else {
    resil_ctx_init(&j->ctx);
    j->ctx.clock = tl->clock;
  }
  j->ctx.cancel = j->token;
  j->tl = tl;
  j->alloc = tl->alloc;
  return j;
fail_cv:
  pthread_mutex_destroy(&j->mu);
fail_mu:
  resil_cancel_free(j->token);
fail_token:
  resil__free(tl->alloc, j);
  return NULL;
}

/* Starts the task; on failure nothing runs, the job is freed and *o says
 * why. */
static int job_start(resil_timelimiter *tl, tl_job *j, resil_outcome *o) {
  pthread_mutex_lock(&tl->mu);
  tl->running++;
  pthread_mutex_unlock(&tl->mu);
  int started;
  if (tl->executor) {
    resil_status st =
        resil_threadpool_submit(tl->executor, &j->ctx, job_run, j, NULL);
    started = st == RESIL_OK;
    if (st == RESIL_EBUSY) {
      count(&tl->rejected);
      *o = resil_outcome_make(RESIL_REJECTED, RESIL_REASON_QUEUE_FULL);
    }
  } else {
    pthread_attr_t attr;
    pthread_t tid;
    started = pthread_attr_init(&attr) == 0;
    if (started) {
      pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
      started = pthread_create(&tid, &attr, job_thread, j) == 0;
      pthread_attr_destroy(&attr);
    }
  }
  if (started) return 1;
  if (o->kind != RESIL_REJECTED) {
    count(&tl->errors);
    *o = resil_outcome_make(RESIL_NOT_SENT, RESIL_REASON_LOCAL_ERROR);
  }
  if (j->arg_done) j->arg_done(j->arg);
  atomic_store_explicit(&j->refs, 1, memory_order_relaxed);
  job_unref(j);
  task_ended(tl, 0);
  return 0;
}

resil_outcome resil_timelimiter_run(resil_timelimiter *tl, const resil_ctx *ctx,
                                    resil_call_fn fn, void *arg) {
  return resil_timelimiter_run_owned(tl, ctx, fn, arg, NULL);
}

/* Returns o after handing arg back: fn was never started. */
static resil_outcome not_started(resil_outcome o, void (*arg_done)(void *),
                                 void *arg) {
  if (arg_done) arg_done(arg);
  return o;
}

resil_outcome resil_timelimiter_run_owned(resil_timelimiter *tl,
                                          const resil_ctx *ctx,
                                          resil_call_fn fn, void *arg,
                                          void (*arg_done)(void *arg)) {
  resil_ctx lc;
  const resil_ctx *c = ctx ? resil__ctx_in(&lc, ctx) : NULL;
  if (!fn || !valid(tl) || (ctx && !c))
    return not_started(resil_outcome_make(RESIL_NOT_SENT, RESIL_REASON_LOCAL_ERROR),
                       arg_done, arg);
  ctx = c; /* from here on, only the normalised context is read */
  count(&tl->calls);
  int64_t wait = tl->timeout_ns;
  if (ctx && ctx->deadline_ns != RESIL_NO_DEADLINE) {
    int64_t left = resil_ctx_remaining_ns(ctx);
    if (left == 0) {
      count(&tl->rejected);
      return not_started(resil_outcome_make(RESIL_REJECTED, RESIL_REASON_DEADLINE),
                         arg_done, arg);
    }
    if (left < wait) wait = left;
  }
  resil_cancel *caller_cancel = ctx ? ctx->cancel : NULL;
  if (resil_cancel_is_set(caller_cancel)) {
    count(&tl->cancelled);
    return not_started(resil_outcome_make(RESIL_NOT_SENT, RESIL_REASON_CANCELLED),
                       arg_done, arg);
  }
  const int64_t until = resil__sat_add(resil__mono_ns(), wait);

  tl_job *j = job_new(tl, ctx, fn, arg, arg_done);
  if (!j) {
    count(&tl->errors);
    return not_started(resil_outcome_make(RESIL_NOT_SENT, RESIL_REASON_LOCAL_ERROR),
                       arg_done, arg);
  }
  resil_outcome o = resil_outcome_make(RESIL_NOT_SENT, RESIL_REASON_NONE);
  if (!job_start(tl, j, &o)) return o;

  /* The caller's token cannot wake this condition variable, so with a
   * token the wait is cut into slices of RESIL_CANCEL_POLL_NS. */
  int caller_cancelled = 0;
  pthread_mutex_lock(&j->mu);
  while (!j->done) {
    if (resil_cancel_is_set(caller_cancel)) {
      caller_cancelled = 1;
      break;
    }
    int64_t now = resil__mono_ns();
    if (now >= until) break;
    int64_t wake = until;
    if (caller_cancel && until - now > RESIL_CANCEL_POLL_NS)
      wake = now + RESIL_CANCEL_POLL_NS;
    resil__cond_wait_until(&j->cv, &j->mu, wake);
  }
  if (j->done) {
    o = j->outcome;
    pthread_mutex_unlock(&j->mu);
    job_unref(j);
    count(resil_outcome_is_success(&o) ? &tl->successes : &tl->failures);
    return o;
  }
  /* Counted before the task can see the flag, so that its decrement at the
   * end always follows this increment. */
  atomic_fetch_add_explicit(&tl->abandoned, 1, memory_order_relaxed);
  j->abandoned = 1;
  pthread_mutex_unlock(&j->mu);
  if (caller_cancelled || tl->cancel_running) resil_cancel_signal(j->token);
  job_unref(j);
  if (caller_cancelled) {
    count(&tl->cancelled);
    return resil_outcome_make(RESIL_UNKNOWN, RESIL_REASON_CANCELLED);
  }
  count(&tl->timeouts);
  o = resil_outcome_make(RESIL_UNKNOWN, RESIL_REASON_TIMEOUT);
  o.flags |= RESIL_OF_TIME_LIMITER;
  return o;
}

resil_status resil_timelimiter_wait_idle(resil_timelimiter *tl,
                                         int64_t timeout_ns) {
  if (!valid(tl)) return RESIL_EMISUSE;
  if (timeout_ns < 0) return RESIL_EINVAL;
  int64_t until = timeout_ns == INT64_MAX
                      ? INT64_MAX
                      : resil__sat_add(resil__mono_ns(), timeout_ns);
  pthread_mutex_lock(&tl->mu);
  while (tl->running > 0 && (until == INT64_MAX || resil__mono_ns() < until))
    resil__cond_wait_until(&tl->idle_cv, &tl->mu, until);
  int idle = tl->running == 0;
  pthread_mutex_unlock(&tl->mu);
  return idle ? RESIL_OK : RESIL_ETIMEDOUT;
}

int64_t resil_timelimiter_timeout_ns(const resil_timelimiter *tl) {
  return valid(tl) ? tl->timeout_ns : 0;
}

resil_status resil_timelimiter_get_metrics_sized(const resil_timelimiter *tl,
                                                 resil_timelimiter_metrics *dst,
                                                 size_t n) {
  if (!valid(tl)) return RESIL_EMISUSE;
  if (!dst) return RESIL_EINVAL;
  resil_timelimiter *m = (resil_timelimiter *)tl; /* atomics, lock */
  resil_timelimiter_metrics full, *out = &full;
  memset(out, 0, sizeof *out);
  out->struct_size = sizeof *out;
  out->calls = atomic_load_explicit(&m->calls, memory_order_relaxed);
  out->successes = atomic_load_explicit(&m->successes, memory_order_relaxed);
  out->failures = atomic_load_explicit(&m->failures, memory_order_relaxed);
  out->timeouts = atomic_load_explicit(&m->timeouts, memory_order_relaxed);
  out->cancelled = atomic_load_explicit(&m->cancelled, memory_order_relaxed);
  out->rejected = atomic_load_explicit(&m->rejected, memory_order_relaxed);
  out->errors = atomic_load_explicit(&m->errors, memory_order_relaxed);
  out->abandoned_running = atomic_load_explicit(&m->abandoned, memory_order_relaxed);
  pthread_mutex_lock(&m->mu);
  out->running = m->running;
  pthread_mutex_unlock(&m->mu);
  resil__sized_out(dst, n, &full, sizeof full);
  return RESIL_OK;
}

const char *resil_timelimiter_name(const resil_timelimiter *tl) {
  return valid(tl) ? tl->name : NULL;
}
