/* Thread-pool bulkhead: a fixed set of workers and a bounded FIFO queue.
 *
 * A queued call and its future are one object: the queue links the futures
 * themselves, so a submission allocates once. The future is refcounted: one
 * reference for the pool until the call has ended, one for the caller when
 * it asked for the future. Whoever drops the last reference frees it, so a
 * caller may give up on a call that is still queued or running. */
#include <stdatomic.h>
#include <string.h>
#include <unistd.h>

#include "bulkhead/sync_int.h"
#include "core/internal.h"
#include "resil/bulkhead.h"

#define RESIL_MAGIC_FUTURE 0x46555452u /* "FUTR" */

struct resil_future {
  unsigned magic;
  _Atomic int refs;
  _Atomic int done; /* set (release) after outcome is written */
  resil_outcome outcome;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  resil_call_fn fn;
  void *arg;
  resil_ctx ctx;
  resil_future *next; /* queue link, under the pool's mutex */
  const resil_allocator *alloc;
};

struct resil_threadpool {
  unsigned magic;
  pthread_mutex_t mu;
  pthread_cond_t work_cv; /* a call was queued, or the pool is stopping */
  resil_future *head, *tail;
  uint32_t depth;  /* calls queued */
  uint32_t idle;   /* workers waiting for a call */
  uint32_t active; /* calls running */
  uint32_t threads;
  uint32_t capacity;
  int stopping;
  uint64_t submitted, completed, rejected;
  pthread_t *tids;
  char *name;
  const resil_allocator *alloc;
};

static inline int valid(const resil_threadpool *tp) {
  return tp && tp->magic == RESIL_MAGIC_POOL;
}

static inline int valid_future(const resil_future *f) {
  return f && f->magic == RESIL_MAGIC_FUTURE;
}

static void future_unref(resil_future *f) {
  if (atomic_fetch_sub_explicit(&f->refs, 1, memory_order_acq_rel) != 1) return;
  f->magic = RESIL_MAGIC_DEAD;
  pthread_cond_destroy(&f->cv);
  pthread_mutex_destroy(&f->mu);
  resil__free(f->alloc, f);
}

/* Publishes the outcome, wakes the waiters and drops the pool's reference.
 * The waiters read the outcome only after seeing `done`. */
static void future_complete(resil_future *f, resil_outcome o) {
  pthread_mutex_lock(&f->mu);
  f->outcome = o;
  atomic_store_explicit(&f->done, 1, memory_order_release);
  pthread_cond_broadcast(&f->cv);
  pthread_mutex_unlock(&f->mu);
  future_unref(f);
}

static void *worker_main(void *p) {
  resil_threadpool *tp = p;
  pthread_mutex_lock(&tp->mu);
  for (;;) {
    while (!tp->head && !tp->stopping) {
      tp->idle++;
      pthread_cond_wait(&tp->work_cv, &tp->mu);
      tp->idle--;
    }
    resil_future *f = tp->head;
    if (!f) break; /* stopping, and the queue is drained */
    tp->head = f->next;
    if (!tp->head) tp->tail = NULL;
    tp->depth--;
    tp->active++;
    pthread_mutex_unlock(&tp->mu);

    resil_outcome o = f->fn(f->arg, &f->ctx);

    /* Counted before the outcome is published, so that a caller who has
     * seen it also sees it in the metrics. Nobody takes a future's mutex
     * and then the pool's, so this nesting cannot deadlock. */
    pthread_mutex_lock(&tp->mu);
    tp->active--;
    tp->completed++;
    future_complete(f, o);
  }
  pthread_mutex_unlock(&tp->mu);
  return NULL;
}

/* The 0.1 layout ends with `alloc`. */
#define TP_CONFIG_MIN_SIZE                                                     \
  (offsetof(resil_threadpool_config, alloc) + sizeof(const resil_allocator *))

static void config_defaults(resil_threadpool_config *cfg) {
  memset(cfg, 0, sizeof *cfg);
  cfg->struct_size = sizeof *cfg;
  cfg->name = "threadpool";
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  if (n < 1) n = 1;
  if (n > RESIL_THREADPOOL_MAX_THREADS) n = RESIL_THREADPOOL_MAX_THREADS;
  cfg->threads = (uint32_t)n;
  cfg->queue_capacity = 100;
  cfg->alloc = NULL;
}

void resil_threadpool_config_init_sized(resil_threadpool_config *cfg,
                                        size_t n) {
  if (!cfg) return;
  resil_threadpool_config full;
  config_defaults(&full);
  resil__sized_out(cfg, n, &full, sizeof full);
}

/* Stops and joins the first `started` workers. */
static void stop_workers(resil_threadpool *tp, uint32_t started) {
  pthread_mutex_lock(&tp->mu);
  tp->stopping = 1;
  pthread_cond_broadcast(&tp->work_cv);
  pthread_mutex_unlock(&tp->mu);
  for (uint32_t i = 0; i < started; i++) pthread_join(tp->tids[i], NULL);
}

resil_status resil_threadpool_new(const resil_threadpool_config *ucfg,
                                  resil_threadpool **out, resil_error *err) {
  if (!ucfg) return resil__err(err, RESIL_EINVAL, "cfg", "must not be NULL");
  if (!out) return resil__err(err, RESIL_EINVAL, "out", "must not be NULL");
  resil_threadpool_config full;
  const resil_threadpool_config *cfg = &full;
  config_defaults(&full);
  resil_status st = resil__sized_in(&full, sizeof full, ucfg, TP_CONFIG_MIN_SIZE,
                                    "resil_threadpool_config",
                                    "resil_threadpool_config_init", err);
  if (st != RESIL_OK) return st;
  if ((st = resil__check_range(err, "threads", cfg->threads, 1,
                               RESIL_THREADPOOL_MAX_THREADS)))
    return st;
  if ((st = resil__check_range(err, "queue_capacity", cfg->queue_capacity, 0,
                               RESIL_THREADPOOL_MAX_QUEUE)))
    return st;

  const resil_allocator *a = cfg->alloc;
  resil_threadpool *tp = resil__calloc(a, sizeof *tp);
  if (!tp) return resil__err(err, RESIL_ENOMEM, NULL, "out of memory");
  int ok;
  tp->name = resil__strdup(a, cfg->name ? cfg->name : "threadpool", &ok);
  if (!ok) goto fail_nomem;
  tp->tids = resil__calloc(a, sizeof *tp->tids * cfg->threads);
  if (!tp->tids) goto fail_nomem;
  if (pthread_mutex_init(&tp->mu, NULL) != 0) {
    st = resil__err(err, RESIL_ESYS, NULL, "cannot create a mutex");
    goto fail;
  }
  if (pthread_cond_init(&tp->work_cv, NULL) != 0) {
    pthread_mutex_destroy(&tp->mu);
    st = resil__err(err, RESIL_ESYS, NULL, "cannot create a condition variable");
    goto fail;
  }
  tp->alloc = a;
  tp->threads = cfg->threads;
  tp->capacity = cfg->queue_capacity;
  tp->magic = RESIL_MAGIC_POOL;
  for (uint32_t i = 0; i < cfg->threads; i++) {
    if (pthread_create(&tp->tids[i], NULL, worker_main, tp) != 0) {
      stop_workers(tp, i);
      pthread_cond_destroy(&tp->work_cv);
      pthread_mutex_destroy(&tp->mu);
      st = resil__err(err, RESIL_ESYS, NULL, "cannot start worker thread %u", i);
      goto fail;
    }
  }
  *out = tp;
  return RESIL_OK;

fail_nomem:
  st = resil__err(err, RESIL_ENOMEM, NULL, "out of memory");
fail:
  tp->magic = RESIL_MAGIC_DEAD;
  resil__free(a, tp->tids);
  resil__free(a, tp->name);
  resil__free(a, tp);
  return st;
}

void resil_threadpool_free(resil_threadpool *tp) {
  if (!valid(tp)) return;
  /* Workers keep taking calls until the queue is empty, then exit. */
  stop_workers(tp, tp->threads);
  tp->magic = RESIL_MAGIC_DEAD;
  pthread_cond_destroy(&tp->work_cv);
  pthread_mutex_destroy(&tp->mu);
  const resil_allocator *a = tp->alloc;
  resil__free(a, tp->tids);
  resil__free(a, tp->name);
  resil__free(a, tp);
}

resil_status resil_threadpool_submit(resil_threadpool *tp, const resil_ctx *ctx,
                                     resil_call_fn fn, void *arg,
                                     resil_future **out) {
  if (!valid(tp)) return RESIL_EMISUSE;
  resil_ctx lc;
  const resil_ctx *c = resil__ctx_in(&lc, ctx);
  if (!fn || !c) return RESIL_EINVAL;
  resil_status st = RESIL_OK;
  pthread_mutex_lock(&tp->mu);
  if (tp->stopping) {
    st = RESIL_EMISUSE;
    goto out;
  }
  /* A call waits in the queue only when every worker is busy; each idle
   * worker can take one queued call at once. */
  if (tp->depth >= tp->capacity + tp->idle) {
    tp->rejected++;
    st = RESIL_EBUSY;
    goto out;
  }
  resil_future *f = resil__alloc(tp->alloc, sizeof *f);
  if (!f) {
    st = RESIL_ENOMEM;
    goto out;
  }
  memset(f, 0, sizeof *f);
  if (pthread_mutex_init(&f->mu, NULL) != 0) {
    resil__free(tp->alloc, f);
    st = RESIL_ESYS;
    goto out;
  }
  if (resil__cond_init_mono(&f->cv) != 0) {
    pthread_mutex_destroy(&f->mu);
    resil__free(tp->alloc, f);
    st = RESIL_ESYS;
    goto out;
  }
  f->magic = RESIL_MAGIC_FUTURE;
  atomic_init(&f->refs, out ? 2 : 1);
  atomic_init(&f->done, 0);
  f->outcome = resil_outcome_make(RESIL_UNKNOWN, RESIL_REASON_NONE);
  f->fn = fn;
  f->arg = arg;
  f->ctx = *c;
  f->alloc = tp->alloc;
  f->next = NULL;
  if (tp->tail)
    tp->tail->next = f;
  else
    tp->head = f;
  tp->tail = f;
  tp->depth++;
  tp->submitted++;
  pthread_cond_signal(&tp->work_cv);
  if (out) *out = f;
out:
  pthread_mutex_unlock(&tp->mu);
  return st;
}

resil_outcome resil_threadpool_run(resil_threadpool *tp, const resil_ctx *ctx,
                                   resil_call_fn fn, void *arg) {
  resil_future *f = NULL;
  resil_status st = resil_threadpool_submit(tp, ctx, fn, arg, &f);
  if (st == RESIL_EBUSY)
    return resil_outcome_make(RESIL_REJECTED, RESIL_REASON_QUEUE_FULL);
  if (st != RESIL_OK)
    return resil_outcome_make(RESIL_NOT_SENT, RESIL_REASON_LOCAL_ERROR);
  resil_future_wait_ns(f, INT64_MAX);
  resil_outcome o = resil_future_outcome(f);
  resil_future_free(f);
  return o;
}

resil_status resil_threadpool_get_metrics_sized(const resil_threadpool *tp,
                                                resil_threadpool_metrics *dst,
                                                size_t n) {
  if (!valid(tp)) return RESIL_EMISUSE;
  if (!dst) return RESIL_EINVAL;
  resil_threadpool *m = (resil_threadpool *)tp; /* the lock needs non-const */
  resil_threadpool_metrics full, *out = &full;
  memset(out, 0, sizeof *out);
  out->struct_size = sizeof *out;
  pthread_mutex_lock(&m->mu);
  out->threads = m->threads;
  out->queue_capacity = m->capacity;
  out->queue_depth = m->depth;
  out->active = m->active;
  out->idle = m->idle;
  out->submitted = m->submitted;
  out->completed = m->completed;
  out->rejected = m->rejected;
  pthread_mutex_unlock(&m->mu);
  resil__sized_out(dst, n, &full, sizeof full);
  return RESIL_OK;
}

const char *resil_threadpool_name(const resil_threadpool *tp) {
  return valid(tp) ? tp->name : NULL;
}

resil_status resil_future_wait_ns(resil_future *f, int64_t timeout_ns) {
  if (!valid_future(f)) return RESIL_EMISUSE;
  if (timeout_ns < 0) return RESIL_EINVAL;
  if (atomic_load_explicit(&f->done, memory_order_acquire)) return RESIL_OK;
  if (timeout_ns == 0) return RESIL_ETIMEDOUT;
  int64_t until = timeout_ns == INT64_MAX
                      ? INT64_MAX
                      : resil__sat_add(resil__mono_ns(), timeout_ns);
  pthread_mutex_lock(&f->mu);
  while (!atomic_load_explicit(&f->done, memory_order_acquire) &&
         (until == INT64_MAX || resil__mono_ns() < until))
    resil__cond_wait_until(&f->cv, &f->mu, until);
  int done = atomic_load_explicit(&f->done, memory_order_acquire);
  pthread_mutex_unlock(&f->mu);
  return done ? RESIL_OK : RESIL_ETIMEDOUT;
}

int resil_future_done(const resil_future *f) {
  if (!valid_future(f)) return 0;
  return atomic_load_explicit(&((resil_future *)f)->done, memory_order_acquire);
}

resil_outcome resil_future_outcome(const resil_future *f) {
  if (!resil_future_done(f))
    return resil_outcome_make(RESIL_UNKNOWN, RESIL_REASON_NONE);
  return f->outcome;
}

void resil_future_free(resil_future *f) {
  if (!valid_future(f)) return;
  future_unref(f);
}
