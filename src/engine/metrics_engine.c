/* resil_engine_metrics_add (engine.h): an engine's counters
 * (resil_engine_get_stats) as a metrics source (metrics.h). Here, in
 * libresil-http with the engine, so that libresil does not depend on
 * libcurl.
 *
 * The render runs on the scraping thread while the engine runs on its
 * loop thread: it reads only what resil_engine_get_stats reads, atomics
 * the loop thread alone writes (engine.c eng_stats), and the BREAKER_OPEN
 * counter beside them; never the loop-thread-only gauges
 * (resil_engine_in_flight, _queued, _active). */
#include "resil/engine.h"
#include "resil/metrics.h"

#include "engine/engine_int.h"

static const resil_metric_family eng_fams[] = {
    {"resil_engine_calls_submitted_total", RESIL_METRIC_COUNTER,
     "Logical calls accepted by resil_engine_call()."},
    {"resil_engine_calls_total", RESIL_METRIC_COUNTER,
     "Logical calls completed (done_fn called), by the final outcome (answered, not_sent, "
     "unknown, rejected)."},
    {"resil_engine_calls_in_flight", RESIL_METRIC_GAUGE,
     "Logical calls submitted and not yet completed."},
    {"resil_engine_transfers_total", RESIL_METRIC_COUNTER,
     "Physical transfers started: attempts' primaries and hedges."},
    {"resil_engine_retries_total", RESIL_METRIC_COUNTER,
     "Attempts after the first of a call (the retry's; hedges excluded)."},
    {"resil_engine_retries_suppressed_recovering_total", RESIL_METRIC_COUNTER,
     "Calls whose due retry was not made: the breaker was half-open or ramping (retries last)."},
    {"resil_engine_hedges_total", RESIL_METRIC_COUNTER,
     "Hedges, by kind (sent; rejected: sent but no permit or slot at once; won; "
     "refused_recovering: the breaker was half-open or ramping), and transfers removed because "
     "another of the attempt won (cancelled_loser)."},
    {"resil_engine_unhedged_attempts_total", RESIL_METRIC_COUNTER,
     "Attempts with a hedge policy passed through unhedged (neither idempotent nor keyed)."},
    {"resil_engine_rejected_total", RESIL_METRIC_COUNTER,
     "Attempts and hedges refused with nothing sent, by reason (ratelimiter, breaker_open, "
     "recovering: a breaker's ramp, bulkhead_full, bulkhead_wait, pool_timeout)."},
};

typedef struct eng_snap {
  resil_engine_stats s;
  uint64_t breaker_open;
} eng_snap;

static resil_status eng_snapshot(const void *obj, void *snap) {
  const resil_engine *e = obj;
  eng_snap *es = snap;
  resil_status st = resil_engine_get_stats(e, &es->s);
  if (st == RESIL_OK) es->breaker_open = resil__engine_breaker_open(e);
  return st;
}

static void by(resil_metrics_emitter *e, const char *label, const char *v, uint64_t n) {
  const char *l[2] = {label, v};
  resil_metrics_sample(e, (double)n, 1, l);
}

static void eng_emit(const void *snap, size_t f, resil_metrics_emitter *e) {
  const eng_snap *es = snap;
  const resil_engine_stats *s = &es->s;
  switch (f) {
  case 0: resil_metrics_sample(e, (double)s->calls_submitted, 0, NULL); break;
  case 1:
    by(e, "outcome", "answered", s->completed_answered);
    by(e, "outcome", "not_sent", s->completed_not_sent);
    by(e, "outcome", "unknown", s->completed_unknown);
    by(e, "outcome", "rejected", s->completed_rejected);
    break;
  case 2: {
    /* Two counters read one after the other: a call completing between
     * the reads must not make it negative. */
    uint64_t sub = s->calls_submitted, done = s->calls_completed;
    resil_metrics_sample(e, (double)(sub > done ? sub - done : 0), 0, NULL);
    break;
  }
  case 3: resil_metrics_sample(e, (double)s->transfers, 0, NULL); break;
  case 4: resil_metrics_sample(e, (double)s->retries, 0, NULL); break;
  case 5: resil_metrics_sample(e, (double)s->retries_suppressed_recovering, 0, NULL); break;
  case 6:
    by(e, "kind", "sent", s->hedges_sent);
    by(e, "kind", "rejected", s->hedges_rejected);
    by(e, "kind", "won", s->hedge_wins);
    by(e, "kind", "refused_recovering", s->hedges_refused_recovering);
    by(e, "kind", "cancelled_loser", s->cancelled_losers);
    break;
  case 7: resil_metrics_sample(e, (double)s->unhedged, 0, NULL); break;
  case 8:
    by(e, "reason", "ratelimiter", s->rejected_ratelimiter);
    by(e, "reason", "breaker_open", es->breaker_open);
    by(e, "reason", "recovering", s->rejected_recovering);
    by(e, "reason", "bulkhead_full", s->rejected_bulkhead_full);
    by(e, "reason", "bulkhead_wait", s->rejected_bulkhead_wait);
    by(e, "reason", "pool_timeout", s->rejected_pool_timeout);
    break;
  default: break;
  }
}

static const resil_metrics_source eng_src = {
    sizeof(resil_metrics_source), eng_fams, sizeof eng_fams / sizeof eng_fams[0],
    sizeof(eng_snap), eng_snapshot, eng_emit};

resil_status resil_engine_metrics_add(resil_metrics *m, const char *name, const resil_engine *e) {
  if (!m) return RESIL_EMISUSE;
  if (!e) return RESIL_EINVAL;
  return resil_metrics_add_source(m, name, &eng_src, e);
}
