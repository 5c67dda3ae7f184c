/* The blocking form of the hedge (hedge.h, resil_hedge_run_on): the split
 * form driven by the calling thread, every attempt run on the caller's
 * thread pool. The caller's thread owns the resil_hedge_call (begin,
 * on_timer and record all run on it); the attempts only report their
 * outcome into a small queue under a mutex and signal a condition
 * variable. The run returns only after every attempt it started has
 * returned, so fn's arg and the race state may live on the caller's stack;
 * losers are asked to stop through their own cancellation token at once. */
#include <pthread.h>
#include <string.h>

#include "bulkhead/sync_int.h"
#include "core/internal.h"
#include "resil/bulkhead.h"
#include "resil/hedge.h"
#include "hedge/hedge_int.h"

#define MAX_ATTEMPTS (RESIL_HEDGE_MAX_HEDGES + 1)

typedef struct race race;

typedef struct attempt {
  race *r;
  uint32_t n;          /* 1-based */
  resil_cancel *token; /* this attempt's own token */
  int64_t started_ns;  /* real time */
  int64_t duration_ns;
  resil_outcome out;
  int ended;           /* under r->mu */
  uint32_t end_order;  /* 1 for the first attempt to end, ... (under r->mu) */
  int reported;        /* handed to record (caller's thread only) */
} attempt;

struct race {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  resil_call_fn fn;
  void *arg;
  uint32_t started, ended;
  uint32_t ends; /* attempts ended, those that never started included */
  attempt a[MAX_ATTEMPTS];
};

static resil_outcome attempt_fn(void *p, const resil_ctx *ctx) {
  attempt *at = p;
  race *r = at->r;
  resil_outcome o = r->fn(r->arg, ctx);
  int64_t d = resil__mono_ns() - at->started_ns;
  pthread_mutex_lock(&r->mu);
  at->out = o;
  at->duration_ns = d;
  at->ended = 1;
  at->end_order = ++r->ends;
  r->ended++;
  pthread_cond_signal(&r->cv);
  pthread_mutex_unlock(&r->mu);
  return o;
}

/* Starts attempt n on the pool with its own token (the caller's deadline,
 * flags and user kept). Returns 0, or -1 when it could not be started (the
 * pool's queue is full, or no memory for a token): *why says which. */
static int start(race *r, resil_threadpool *tp, const resil_ctx *c, uint32_t n,
                 resil_reason *why) {
  attempt *at = &r->a[n - 1];
  memset(at, 0, sizeof *at);
  at->r = r;
  at->n = n;
  if (resil_cancel_new(&at->token) != RESIL_OK) {
    *why = RESIL_REASON_LOCAL_ERROR;
    return -1;
  }
  resil_ctx ac = *c;
  ac.cancel = at->token;
  at->started_ns = resil__mono_ns();
  pthread_mutex_lock(&r->mu);
  r->started++;
  pthread_mutex_unlock(&r->mu);
  resil_status st = resil_threadpool_submit(tp, &ac, attempt_fn, at, NULL);
  if (st != RESIL_OK) {
    pthread_mutex_lock(&r->mu);
    r->started--;
    pthread_mutex_unlock(&r->mu);
    resil_cancel_free(at->token);
    at->token = NULL;
    *why = st == RESIL_EBUSY ? RESIL_REASON_QUEUE_FULL : RESIL_REASON_LOCAL_ERROR;
    return -1;
  }
  return 0;
}

resil_outcome resil_hedge_run_on(resil_hedge *h, const resil_ctx *ctx,
                                 resil_threadpool *tp, resil_call_fn fn,
                                 void *arg) {
  return resil__hedge_run_on_watch(h, ctx, tp, fn, arg, NULL);
}

resil_outcome resil__hedge_run_on_watch(resil_hedge *h, const resil_ctx *ctx,
                                        resil_threadpool *tp, resil_call_fn fn,
                                        void *arg, resil_breaker *watch) {
  resil_ctx lc;
  const resil_ctx *c = resil__ctx_in(&lc, ctx);
  if (!h || !tp || !fn || !c || !resil_hedge_name(h))
    return resil_outcome_make(RESIL_NOT_SENT, RESIL_REASON_LOCAL_ERROR);
  resil_hedge_call hc;
  int64_t delay = 0;
  if (resil_hedge_begin(h, c, &hc, &delay) != RESIL_DECISION_WAIT)
    return fn(arg, c); /* not safe to repeat: one attempt, here */

  race r;
  memset(&r, 0, sizeof r);
  r.fn = fn;
  r.arg = arg;
  if (pthread_mutex_init(&r.mu, NULL) != 0)
    return resil_outcome_make(RESIL_NOT_SENT, RESIL_REASON_LOCAL_ERROR);
  if (resil__cond_init_mono(&r.cv) != 0) {
    pthread_mutex_destroy(&r.mu);
    return resil_outcome_make(RESIL_NOT_SENT, RESIL_REASON_LOCAL_ERROR);
  }
  resil_reason why;
  resil_outcome result = resil_outcome_make(RESIL_NOT_SENT, RESIL_REASON_LOCAL_ERROR);
  if (start(&r, tp, c, 1, &why) != 0) {
    /* The primary could not start: nothing ran. */
    resil_outcome o = resil_outcome_make(
        why == RESIL_REASON_QUEUE_FULL ? RESIL_REJECTED : RESIL_NOT_SENT, why);
    resil_hedge_record(h, &hc, 1, 0, &o);
    result = o;
    goto out;
  }
  int64_t next_at = resil__sat_add(resil__mono_ns(), delay);
  int over = 0;
  pthread_mutex_lock(&r.mu);
  while (!over) {
    /* Hand every ended attempt to the split form in the order they ended,
     * as a caller of the split form would have seen them: when both ended
     * while this thread slept, a 409 that came first is recorded before the
     * primary's later 201, which then wins with nothing left in flight
     * (in attempt order the 201 won and the ended 409 counted as a
     * cancelled loser). */
    int progressed = 0;
    while (!over) {
      attempt *at = NULL;
      for (uint32_t i = 0; i < hc.attempts; i++)
        if (r.a[i].ended && !r.a[i].reported &&
            (!at || r.a[i].end_order < at->end_order))
          at = &r.a[i];
      if (!at) break;
      at->reported = 1;
      progressed = 1;
      resil_hedge_verdict v = resil_hedge_record(h, &hc, at->n, at->duration_ns, &at->out);
      if (v == RESIL_HEDGE_WINNER || v == RESIL_HEDGE_LAST) {
        result = hc.result; /* the winner, or resil_hedge_record's rule */
        over = 1;
      }
    }
    if (over || progressed) continue;
    /* The caller's cancellation reaches every attempt. */
    if (resil_cancel_is_set(c->cancel)) {
      for (uint32_t i = 0; i < hc.attempts; i++)
        if (r.a[i].token) resil_cancel_signal(r.a[i].token);
      next_at = INT64_MAX; /* and no further hedge */
    }
    int64_t now = resil__mono_ns();
    if (next_at != INT64_MAX && now >= next_at) {
      next_at = INT64_MAX;
      int64_t nd = -1;
      if ((watch ? resil_hedge_on_timer_watch(h, &hc, &nd, watch)
                 : resil_hedge_on_timer(h, &hc, &nd)) == RESIL_DECISION_GO) {
        pthread_mutex_unlock(&r.mu);
        if (start(&r, tp, c, hc.attempts, &why) != 0) {
          /* Counted as sent by the split form; it ends at once, not sent. */
          attempt *at = &r.a[hc.attempts - 1];
          at->out = resil_outcome_make(
              why == RESIL_REASON_QUEUE_FULL ? RESIL_REJECTED : RESIL_NOT_SENT, why);
          pthread_mutex_lock(&r.mu);
          at->ended = 1;
          at->end_order = ++r.ends;
        } else {
          pthread_mutex_lock(&r.mu);
        }
        if (nd >= 0) next_at = resil__sat_add(resil__mono_ns(), nd);
      }
      continue;
    }
    int64_t wake = next_at;
    if (c->cancel && (wake == INT64_MAX || wake - now > RESIL_CANCEL_POLL_NS))
      wake = now + RESIL_CANCEL_POLL_NS;
    resil__cond_wait_until(&r.cv, &r.mu, wake);
  }
  /* Ask the others to stop, then wait until every started attempt has
   * returned: fn's arg and this frame must outlive them. */
  for (uint32_t i = 0; i < hc.attempts; i++)
    if (r.a[i].token && !r.a[i].ended) resil_cancel_signal(r.a[i].token);
  while (r.ended < r.started) resil__cond_wait_until(&r.cv, &r.mu, INT64_MAX);
  pthread_mutex_unlock(&r.mu);
out:
  for (uint32_t i = 0; i < MAX_ATTEMPTS; i++)
    if (r.a[i].token) resil_cancel_free(r.a[i].token);
  pthread_cond_destroy(&r.cv);
  pthread_mutex_destroy(&r.mu);
  return result;
}
