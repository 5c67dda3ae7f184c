/* Call context and cancellation token. */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <time.h>

#include "internal.h"


void resil_ctx_init_sized(resil_ctx *ctx, size_t struct_size) {
  if (!ctx) return;
  resil_ctx full;
  resil__ctx_defaults(&full);
  resil__sized_out(ctx, struct_size, &full, sizeof full);
}

/* resil__ctx_in_slow() is in ctx_in.c: the HTTP and store libraries
 * compile it in too (libresil.so does not export resil__* helpers). */

void resil_ctx_set_timeout_ns(resil_ctx *ctx, int64_t timeout_ns) {
  resil_ctx lc;
  const resil_ctx *in = resil__ctx_in(&lc, ctx);
  if (!ctx || !in) return;
  const resil_clock *c = resil__clock(in->clock);
  if (timeout_ns < 0) timeout_ns = 0;
  /* deadline_ns lies within every size resil__ctx_in accepts. */
  ctx->deadline_ns = resil__sat_add(resil__now(c), timeout_ns);
}

int64_t resil_ctx_remaining_ns(const resil_ctx *ctx) {
  resil_ctx lc;
  const resil_ctx *c = resil__ctx_in(&lc, ctx);
  if (!c) return 0;
  if (c->deadline_ns == RESIL_NO_DEADLINE) return INT64_MAX;
  int64_t left = c->deadline_ns - resil__now(resil__clock(c->clock));
  return left > 0 ? left : 0;
}

int64_t resil_ctx_attempt_timeout_ns(const resil_ctx *ctx,
                                     int64_t attempt_timeout_ns) {
  int64_t left = resil_ctx_remaining_ns(ctx);
  if (attempt_timeout_ns > 0 && attempt_timeout_ns < left)
    return attempt_timeout_ns;
  return left;
}

/* The token. Subscriptions are a doubly linked list under mu. A signal
 * sets `set`, wakes the sleepers, then takes the subscriptions off the
 * list one at a time and calls each fn with mu released; `running` is the
 * one whose fn runs now (on thread `runner`), so that an unsubscribe from
 * another thread can wait for it (on cv, broadcast after each fn) and one
 * from inside fn does not. Only the first signal runs fns: a later one
 * finds `set` and returns. */
struct resil_cancel_sub {
  resil_cancel *c;
  resil_cancel_fn fn;
  void *user;
  struct resil_cancel_sub *prev, *next; /* under c->mu */
  int linked;                           /* under c->mu */
};

struct resil_cancel {
  atomic_int set;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  resil_cancel_sub *subs;    /* under mu */
  resil_cancel_sub *running; /* under mu: its fn runs now */
  pthread_t runner;          /* under mu: valid while running != NULL */
};

resil_status resil_cancel_new(resil_cancel **out) {
  if (!out) return RESIL_EINVAL;
  resil_cancel *c = resil__calloc(NULL, sizeof *c);
  if (!c) return RESIL_ENOMEM;
  atomic_init(&c->set, 0);
  pthread_condattr_t ca;
  if (pthread_mutex_init(&c->mu, NULL) != 0) goto fail_mu;
  if (pthread_condattr_init(&ca) != 0) goto fail_ca;
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  if (pthread_cond_init(&c->cv, &ca) != 0) {
    pthread_condattr_destroy(&ca);
    goto fail_ca;
  }
  pthread_condattr_destroy(&ca);
  *out = c;
  return RESIL_OK;
fail_ca:
  pthread_mutex_destroy(&c->mu);
fail_mu:
  resil__free(NULL, c);
  return RESIL_ESYS;
}

void resil_cancel_free(resil_cancel *c) {
  if (!c) return;
  pthread_cond_destroy(&c->cv);
  pthread_mutex_destroy(&c->mu);
  resil__free(NULL, c);
}

void resil_cancel_signal(resil_cancel *c) {
  if (!c) return;
  pthread_mutex_lock(&c->mu);
  if (atomic_load_explicit(&c->set, memory_order_relaxed)) {
    pthread_mutex_unlock(&c->mu);
    return;
  }
  atomic_store_explicit(&c->set, 1, memory_order_release);
  pthread_cond_broadcast(&c->cv);
  c->runner = pthread_self();
  resil_cancel_sub *s;
  while ((s = c->subs) != NULL) {
    c->subs = s->next;
    if (c->subs) c->subs->prev = NULL;
    s->prev = s->next = NULL;
    s->linked = 0;
    c->running = s;
    resil_cancel_fn fn = s->fn;
    void *user = s->user;
    pthread_mutex_unlock(&c->mu);
    /* From here on s may be freed (an unsubscribe from inside fn). */
    fn(user);
    pthread_mutex_lock(&c->mu);
    c->running = NULL;
    pthread_cond_broadcast(&c->cv);
  }
  pthread_mutex_unlock(&c->mu);
}

resil_status resil_cancel_subscribe(resil_cancel *c, resil_cancel_fn fn, void *user,
                                    resil_cancel_sub **out) {
  if (out) *out = NULL;
  if (!c || !fn || !out) return RESIL_EINVAL;
  /* Allocated before the lock: a signal never allocates or frees. */
  resil_cancel_sub *s = resil__calloc(NULL, sizeof *s);
  if (!s) return RESIL_ENOMEM;
  s->c = c;
  s->fn = fn;
  s->user = user;
  pthread_mutex_lock(&c->mu);
  if (atomic_load_explicit(&c->set, memory_order_relaxed)) {
    pthread_mutex_unlock(&c->mu);
    resil__free(NULL, s);
    return RESIL_ESTATE;
  }
  s->next = c->subs;
  if (c->subs) c->subs->prev = s;
  c->subs = s;
  s->linked = 1;
  pthread_mutex_unlock(&c->mu);
  *out = s;
  return RESIL_OK;
}

int resil_cancel_unsubscribe(resil_cancel_sub *s) {
  if (!s) return 0;
  resil_cancel *c = s->c;
  int removed = 0;
  pthread_mutex_lock(&c->mu);
  if (s->linked) {
    if (s->prev) s->prev->next = s->next;
    else c->subs = s->next;
    if (s->next) s->next->prev = s->prev;
    s->linked = 0;
    removed = 1;
  } else if (!pthread_equal(c->runner, pthread_self())) {
    /* fn may be running on the signalling thread: wait for its end. */
    while (c->running == s) pthread_cond_wait(&c->cv, &c->mu);
  }
  /* else: from inside fn (this thread runs the signal's fns): s is no
   * longer c->running's concern once fn returns, so no wait. */
  pthread_mutex_unlock(&c->mu);
  resil__free(NULL, s);
  return removed;
}

int resil_cancel_is_set(const resil_cancel *c) {
  return c ? atomic_load_explicit(&((resil_cancel *)c)->set,
                                  memory_order_acquire)
           : 0;
}

int resil_cancel_wait_ns(resil_cancel *c, int64_t timeout_ns) {
  struct timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  int64_t t = (int64_t)now.tv_sec * RESIL_NS_PER_S + now.tv_nsec +
              (timeout_ns > 0 ? timeout_ns : 0);
  struct timespec until = {.tv_sec = (time_t)(t / RESIL_NS_PER_S),
                           .tv_nsec = (long)(t % RESIL_NS_PER_S)};
  pthread_mutex_lock(&c->mu);
  while (!atomic_load_explicit(&c->set, memory_order_acquire)) {
    int rc = pthread_cond_timedwait(&c->cv, &c->mu, &until);
    if (rc == ETIMEDOUT) break;
  }
  int set = atomic_load_explicit(&c->set, memory_order_acquire);
  pthread_mutex_unlock(&c->mu);
  return set;
}
