/* Call context and cancellation token. */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <time.h>

#include "internal.h"

static void ctx_defaults(resil_ctx *ctx) {
  ctx->struct_size = sizeof *ctx;
  ctx->clock = NULL;
  ctx->deadline_ns = RESIL_NO_DEADLINE;
  ctx->cancel = NULL;
  ctx->flags = 0;
  ctx->attempt = 0;
  ctx->user = NULL;
  ctx->idempotency_key = NULL;
}

void resil_ctx_init_sized(resil_ctx *ctx, size_t struct_size) {
  if (!ctx) return;
  resil_ctx full;
  ctx_defaults(&full);
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

struct resil_cancel {
  atomic_int set;
  pthread_mutex_t mu;
  pthread_cond_t cv;
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
  atomic_store_explicit(&c->set, 1, memory_order_release);
  pthread_cond_broadcast(&c->cv);
  pthread_mutex_unlock(&c->mu);
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
