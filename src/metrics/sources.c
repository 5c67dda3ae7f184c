/* The library's own kinds as metrics sources (metrics.h): one family table
 * and one emit function per kind, reading the kind's sized getter. Names
 * follow Resilience4j's Micrometer names (resilience4j_circuitbreaker_* ->
 * resil_circuitbreaker_*). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "resil/breaker.h"
#include "resil/bulkhead.h"
#include "resil/chain.h"
#include "resil/hedge.h"
#include "resil/metrics.h"
#include "resil/ratelimit.h"
#include "resil/retry.h"
#include "resil/timelimit.h"

#define C RESIL_METRIC_COUNTER
#define G RESIL_METRIC_GAUGE
#define NFAM(t) (sizeof(t) / sizeof((t)[0]))

static void one(resil_metrics_emitter *e, double v) {
  resil_metrics_sample(e, v, 0, NULL);
}
static void l1(resil_metrics_emitter *e, const char *ln, const char *lv, double v) {
  const char *l[2] = {ln, lv};
  resil_metrics_sample(e, v, 1, l);
}

static resil_status add(resil_metrics *m, const char *name, const char *own,
                        const resil_metrics_source *src, const void *obj) {
  if (!m) return RESIL_EMISUSE;
  if (!obj) return RESIL_EINVAL;
  return resil_metrics_add_source(m, name ? name : own, src, obj);
}

/* ---- circuit breaker ---------------------------------------------------- */

static const resil_metric_family breaker_fams[] = {
    {"resil_circuitbreaker_calls_total", C,
     "Calls recorded or refused by the breaker, by kind (successful, failed, ignored, not_permitted, ramp_rejected: refused by a ramp after recovery)."},
    {"resil_circuitbreaker_slow_calls_total", C,
     "Recorded calls slower than the slow-call threshold, by kind (successful, failed)."},
    {"resil_circuitbreaker_state", G, "1 for the breaker's current state, 0 for the others."},
    {"resil_circuitbreaker_failure_rate", G,
     "Failure rate of the current window in percent; NaN until minimum_calls are buffered."},
    {"resil_circuitbreaker_slow_call_rate", G,
     "Slow-call rate of the current window in percent; NaN until minimum_calls are buffered."},
    {"resil_circuitbreaker_buffered_calls", G,
     "Calls in the current window, by kind (successful, failed)."},
    {"resil_circuitbreaker_transitions_total", C, "State transitions."},
    {"resil_circuitbreaker_ramp_ratio", G,
     "Share of calls the breaker admits now: below 1 during the ramp after recovery, else 1."},
};

static resil_status breaker_snap(const void *obj, void *snap) {
  resil_breaker_metrics *s = snap;
  return resil_breaker_get_metrics((resil_breaker *)obj, s);
}

static void breaker_emit(const void *snap, size_t f, resil_metrics_emitter *e) {
  const resil_breaker_metrics *s = snap;
  static const char *const states[] = {"closed", "open", "half_open",
                                       "disabled", "forced_open", "metrics_only"};
  int rates = s->rates == RESIL_BREAKER_RATES_AVAILABLE;
  switch (f) {
  case 0:
    l1(e, "kind", "successful", (double)s->total_successes);
    l1(e, "kind", "failed", (double)s->total_failures);
    l1(e, "kind", "ignored", (double)s->total_ignored);
    l1(e, "kind", "not_permitted", (double)s->total_not_permitted);
    l1(e, "kind", "ramp_rejected", (double)s->total_ramp_rejected);
    break;
  case 1:
    l1(e, "kind", "successful", (double)s->total_slow_successful);
    l1(e, "kind", "failed", (double)s->total_slow_failed);
    break;
  case 2:
    for (int i = 0; i < 6; i++)
      l1(e, "state", states[i], (int)s->state == i ? 1.0 : 0.0);
    break;
  case 3: one(e, rates ? s->failure_rate_pct : NAN); break;
  case 4: one(e, rates ? s->slow_call_rate_pct : NAN); break;
  case 5:
    l1(e, "kind", "successful", (double)s->successful_calls);
    l1(e, "kind", "failed", (double)s->failed_calls);
    break;
  case 6: one(e, (double)s->total_transitions); break;
  case 7: one(e, s->ramp_share); break;
  default: break;
  }
}

static const resil_metrics_source breaker_src = {
    sizeof(resil_metrics_source), breaker_fams, NFAM(breaker_fams),
    sizeof(resil_breaker_metrics), breaker_snap, breaker_emit};

resil_status resil_metrics_add_breaker(resil_metrics *m, const char *name,
                                       resil_breaker *br) {
  return add(m, name, resil_breaker_name(br), &breaker_src, br);
}

/* ---- retry -------------------------------------------------------------- */

static const resil_metric_family retry_fams[] = {
    {"resil_retry_calls_total", C,
     "Finished logical calls, by kind (successful_without_retry, successful_with_retry, failed_with_retry, failed_without_retry)."},
    {"resil_retry_attempts_total", C, "Physical attempts made."},
    {"resil_retry_refused_attempts_total", C,
     "Attempts not made, by reason (deadline too short, retry budget refused, recovering: the watched breaker was half-open or ramping)."},
};

static resil_status retry_snap(const void *obj, void *snap) {
  return resil_retry_get_stats((const resil_retry *)obj, (resil_retry_stats *)snap);
}

static void retry_emit(const void *snap, size_t f, resil_metrics_emitter *e) {
  const resil_retry_stats *s = snap;
  switch (f) {
  case 0:
    l1(e, "kind", "successful_without_retry", (double)s->successful_without_retry);
    l1(e, "kind", "successful_with_retry", (double)s->successful_with_retry);
    l1(e, "kind", "failed_with_retry", (double)s->failed_with_retry);
    l1(e, "kind", "failed_without_retry", (double)s->failed_without_retry);
    break;
  case 1: one(e, (double)s->attempts); break;
  case 2:
    l1(e, "reason", "deadline", (double)s->refused_by_deadline);
    l1(e, "reason", "budget", (double)s->refused_by_budget);
    l1(e, "reason", "recovering", (double)s->suppressed_recovering);
    break;
  default: break;
  }
}

static const resil_metrics_source retry_src = {
    sizeof(resil_metrics_source), retry_fams, NFAM(retry_fams),
    sizeof(resil_retry_stats), retry_snap, retry_emit};

resil_status resil_metrics_add_retry(resil_metrics *m, const char *name,
                                     const resil_retry *r) {
  return add(m, name, resil_retry_name(r), &retry_src, r);
}

/* ---- rate limiter ------------------------------------------------------- */

static const resil_metric_family rl_fams[] = {
    {"resil_ratelimiter_available_permissions", G,
     "Permits available now (negative while permits of coming cycles are reserved)."},
    {"resil_ratelimiter_waiting_calls", G,
     "Callers sleeping for a reserved permit in acquire or run."},
    {"resil_ratelimiter_calls_total", C,
     "Permit requests, by kind (permitted, reserved, refused, cancelled)."},
};

static resil_status rl_snap(const void *obj, void *snap) {
  return resil_ratelimiter_get_metrics((const resil_ratelimiter *)obj,
                                       (resil_ratelimiter_metrics *)snap);
}

static void rl_emit(const void *snap, size_t f, resil_metrics_emitter *e) {
  const resil_ratelimiter_metrics *s = snap;
  switch (f) {
  case 0: one(e, (double)s->available); break;
  case 1: one(e, (double)s->waiting); break;
  case 2:
    l1(e, "kind", "permitted", (double)s->permitted);
    l1(e, "kind", "reserved", (double)s->reserved);
    l1(e, "kind", "refused", (double)s->refused);
    l1(e, "kind", "cancelled", (double)s->cancelled);
    break;
  default: break;
  }
}

static const resil_metrics_source rl_src = {
    sizeof(resil_metrics_source), rl_fams, NFAM(rl_fams),
    sizeof(resil_ratelimiter_metrics), rl_snap, rl_emit};

resil_status resil_metrics_add_ratelimiter(resil_metrics *m, const char *name,
                                           const resil_ratelimiter *rl) {
  return add(m, name, resil_ratelimiter_name(rl), &rl_src, rl);
}

/* ---- bulkhead ----------------------------------------------------------- */

static const resil_metric_family bh_fams[] = {
    {"resil_bulkhead_available_concurrent_calls", G, "Free slots now."},
    {"resil_bulkhead_max_allowed_concurrent_calls", G, "Configured slots."},
    {"resil_bulkhead_waiting_calls", G, "Waiters queued for a slot now."},
    {"resil_bulkhead_calls_total", C, "Slot requests, by kind (permitted, rejected)."},
};

static resil_status bh_snap(const void *obj, void *snap) {
  return resil_bulkhead_get_metrics((const resil_bulkhead *)obj,
                                    (resil_bulkhead_metrics *)snap);
}

static void bh_emit(const void *snap, size_t f, resil_metrics_emitter *e) {
  const resil_bulkhead_metrics *s = snap;
  switch (f) {
  case 0: one(e, (double)s->available); break;
  case 1: one(e, (double)s->max_concurrent); break;
  case 2: one(e, (double)s->waiting); break;
  case 3:
    l1(e, "kind", "permitted", (double)s->permitted);
    l1(e, "kind", "rejected", (double)s->rejected);
    break;
  default: break;
  }
}

static const resil_metrics_source bh_src = {
    sizeof(resil_metrics_source), bh_fams, NFAM(bh_fams),
    sizeof(resil_bulkhead_metrics), bh_snap, bh_emit};

resil_status resil_metrics_add_bulkhead(resil_metrics *m, const char *name,
                                        const resil_bulkhead *bh) {
  return add(m, name, resil_bulkhead_name(bh), &bh_src, bh);
}

/* ---- time limiter ------------------------------------------------------- */

static const resil_metric_family tl_fams[] = {
    {"resil_timelimiter_calls_total", C,
     "Runs, by kind (successful, failed, timeout, cancelled, rejected, error)."},
    {"resil_timelimiter_running_tasks", G, "Tasks started or queued and not yet ended."},
    {"resil_timelimiter_abandoned_tasks", G,
     "Running tasks whose caller stopped waiting."},
};

static resil_status tl_snap(const void *obj, void *snap) {
  return resil_timelimiter_get_metrics((const resil_timelimiter *)obj,
                                       (resil_timelimiter_metrics *)snap);
}

static void tl_emit(const void *snap, size_t f, resil_metrics_emitter *e) {
  const resil_timelimiter_metrics *s = snap;
  switch (f) {
  case 0:
    l1(e, "kind", "successful", (double)s->successes);
    l1(e, "kind", "failed", (double)s->failures);
    l1(e, "kind", "timeout", (double)s->timeouts);
    l1(e, "kind", "cancelled", (double)s->cancelled);
    l1(e, "kind", "rejected", (double)s->rejected);
    l1(e, "kind", "error", (double)s->errors);
    break;
  case 1: one(e, (double)s->running); break;
  case 2: one(e, (double)s->abandoned_running); break;
  default: break;
  }
}

static const resil_metrics_source tl_src = {
    sizeof(resil_metrics_source), tl_fams, NFAM(tl_fams),
    sizeof(resil_timelimiter_metrics), tl_snap, tl_emit};

resil_status resil_metrics_add_timelimiter(resil_metrics *m, const char *name,
                                           const resil_timelimiter *tl) {
  return add(m, name, resil_timelimiter_name(tl), &tl_src, tl);
}

/* ---- hedge -------------------------------------------------------------- */

static const resil_metric_family hedge_fams[] = {
    {"resil_hedge_calls_total", C,
     "Logical calls, by kind (hedged, passed_unsafe, passed_blocking, single: the rest)."},
    {"resil_hedge_hedges_total", C,
     "Hedge attempts, by kind (sent, won, refused_by_budget, refused_recovering: the watched breaker was half-open or ramping), and losers cancelled (cancelled_loser)."},
    {"resil_hedge_delay_seconds", G, "The delay a call beginning now would get."},
};

static resil_status hedge_snap(const void *obj, void *snap) {
  return resil_hedge_get_metrics((const resil_hedge *)obj, (resil_hedge_metrics *)snap);
}

static void hedge_emit(const void *snap, size_t f, resil_metrics_emitter *e) {
  const resil_hedge_metrics *s = snap;
  switch (f) {
  case 0: {
    uint64_t other = s->hedged_calls + s->passed_unsafe + s->passed_blocking;
    l1(e, "kind", "hedged", (double)s->hedged_calls);
    l1(e, "kind", "passed_unsafe", (double)s->passed_unsafe);
    l1(e, "kind", "passed_blocking", (double)s->passed_blocking);
    l1(e, "kind", "single", (double)(s->calls > other ? s->calls - other : 0));
    break;
  }
  case 1:
    l1(e, "kind", "sent", (double)s->hedges_sent);
    l1(e, "kind", "won", (double)s->hedges_won);
    l1(e, "kind", "refused_by_budget", (double)s->refused_by_budget);
    l1(e, "kind", "refused_recovering", (double)s->suppressed_recovering);
    l1(e, "kind", "cancelled_loser", (double)s->cancelled_losers);
    break;
  case 2: one(e, (double)s->delay_ns / 1e9); break;
  default: break;
  }
}

static const resil_metrics_source hedge_src = {
    sizeof(resil_metrics_source), hedge_fams, NFAM(hedge_fams),
    sizeof(resil_hedge_metrics), hedge_snap, hedge_emit};

resil_status resil_metrics_add_hedge(resil_metrics *m, const char *name,
                                     const resil_hedge *h) {
  return add(m, name, resil_hedge_name(h), &hedge_src, h);
}

/* ---- chain -------------------------------------------------------------- */

typedef struct chain_snap {
  size_t n;
  resil_layer_stats layer[RESIL_CHAIN_MAX_LAYERS];
  const char *label[RESIL_CHAIN_MAX_LAYERS];
  const char *inst[RESIL_CHAIN_MAX_LAYERS];
  resil_layer_stats call;
} chain_snap;

static const resil_metric_family chain_fams[] = {
    {"resil_chain_layer_calls_total", C, "Calls that returned from the layer."},
    {"resil_chain_layer_attempts_total", C,
     "Calls the layer made to the next layer (or the protected call) that returned."},
    {"resil_chain_layer_rejections_total", C, "Calls the layer refused itself."},
    {"resil_chain_call_attempts_total", C,
     "Physical attempts that reached the protected call."},
};

static resil_status chain_snapshot(const void *obj, void *snap) {
  const resil_chain *ch = obj;
  chain_snap *s = snap;
  s->n = resil_chain_layers(ch);
  for (size_t i = 0; i < s->n; i++) {
    resil_status st = resil_chain_layer_stats(ch, i, &s->layer[i]);
    if (st != RESIL_OK) return st;
    s->label[i] = resil_chain_layer_label(ch, i);
    s->inst[i] = resil_chain_layer_name(ch, i);
  }
  return resil_chain_call_stats(ch, &s->call);
}

static void chain_emit(const void *snap, size_t f, resil_metrics_emitter *e) {
  const chain_snap *s = snap;
  if (f == 3) {
    one(e, (double)s->call.calls_in);
    return;
  }
  for (size_t i = 0; i < s->n; i++) {
    char pos[24];
    snprintf(pos, sizeof pos, "%zu", i);
    const char *l[6] = {"position", pos, "layer", s->label[i] ? s->label[i] : "",
                        "instance", s->inst[i] ? s->inst[i] : ""};
    const resil_layer_stats *L = &s->layer[i];
    double v = f == 0 ? (double)L->calls_in
               : f == 1 ? (double)L->attempts_out
                        : (double)L->rejections;
    resil_metrics_sample(e, v, 3, l);
  }
}

static const resil_metrics_source chain_src = {
    sizeof(resil_metrics_source), chain_fams, NFAM(chain_fams), sizeof(chain_snap),
    chain_snapshot, chain_emit};

resil_status resil_metrics_add_chain(resil_metrics *m, const char *name,
                                     const resil_chain *ch) {
  if (!m) return RESIL_EMISUSE;
  if (!ch || !name) return RESIL_EINVAL; /* a chain has no name getter */
  return add(m, name, NULL, &chain_src, ch);
}
