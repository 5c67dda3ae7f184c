/* resil_http_client_metrics_add (http.h): an HTTP client as a metrics
 * source (metrics.h). Here, in libresil-http, so that libresil does not
 * depend on libcurl. */
#include "resil/http.h"
#include "resil/metrics.h"

#include "client_int.h"

static const resil_metric_family http_fams[] = {
    {"resil_http_client_requests_total", RESIL_METRIC_COUNTER, "Logical calls (requests) created."},
    {"resil_http_client_attempts_total", RESIL_METRIC_COUNTER,
     "Attempts, by outcome (not_sent, unknown, answered, rejected)."},
    {"resil_http_client_requests_sent_total", RESIL_METRIC_COUNTER,
     "Requests put on the wire, redirect hops and allowed re-sends included."},
    {"resil_http_client_resends_total", RESIL_METRIC_COUNTER,
     "Hidden re-sends of a request, by kind (prevented: refused; allowed: counted, IF_SAFE)."},
    {"resil_http_client_connections_opened_total", RESIL_METRIC_COUNTER, "Sockets opened."},
    {"resil_http_client_lease_timeouts_total", RESIL_METRIC_COUNTER,
     "Attempts that found no pool slot in time (NOT_SENT POOL_TIMEOUT)."},
    {"resil_http_client_pool_in_use", RESIL_METRIC_GAUGE, "Pool slots in use now."},
    {"resil_http_client_pool_max", RESIL_METRIC_GAUGE, "Pool size."},
    {"resil_http_client_status_queries_total", RESIL_METRIC_COUNTER,
     "Recovery status queries, by answer (committed, pending, unknown)."},
    {"resil_http_client_recovered_total", RESIL_METRIC_COUNTER,
     "Keyed calls answered with a stored result."},
    {"resil_http_instance_in_flight", RESIL_METRIC_GAUGE,
     "Attempts in flight to an instance of an upstream with several."},
    {"resil_http_instance_state", RESIL_METRIC_GAUGE,
     "An instance's state: 0 healthy, 1 out (ejected), 2 probing, 3 gone."},
    {"resil_http_instance_ejections_total", RESIL_METRIC_COUNTER,
     "Times an instance was ejected."},
    {"resil_http_instance_ejections_skipped_total", RESIL_METRIC_COUNTER,
     "Ejections the cap on the share of instances out refused."},
    {"resil_http_instance_attempts_total", RESIL_METRIC_COUNTER,
     "Attempts that went to an instance, by outcome."},
    {"resil_http_instance_ramp_ratio", RESIL_METRIC_GAUGE,
     "An instance's share of the choices now: 1, or its ramp's share back from ejection."},
};

/* What one scrape reads: the client's counters, and the client itself
 * for its instances, which the instance families read as they are emitted
 * (a client may have 64 instances per upstream and any number of
 * upstreams: more than a snapshot of at most 64 KiB holds). The client is
 * borrowed by the collector, so it is alive during the render. */
typedef struct http_snap {
  resil_http_stats s;
  const resil_http_client *c;
} http_snap;

static resil_status http_snapshot(const void *obj, void *snap) {
  const resil_http_client *c = obj;
  http_snap *h = snap;
  h->c = c;
  return resil_http_client_get_stats(c, &h->s);
}

static void inst_sample(resil_metrics_emitter *e, const resil_http_instance_stats *i, double v,
                        const char *outcome) {
  const char *l[6] = {"upstream", i->upstream, "instance", i->instance, "outcome", outcome};
  resil_metrics_sample(e, v, outcome ? 3 : 2, l);
}

static void inst_emit(const http_snap *h, size_t f, resil_metrics_emitter *e) {
  size_t n = resil_http_client_instance_count(h->c);
  for (size_t k = 0; k < n; k++) {
    resil_http_instance_stats st, *i = &st;
    /* The labels redacted: a base URL may carry a password. */
    if (resil_http_client_instance_stats(h->c, k, i) != RESIL_OK ||
        resil__http_instance_labels(h->c, k, i->instance, sizeof i->instance, i->upstream,
                                    sizeof i->upstream) != 0)
      continue;
    switch (f) {
    case 10: inst_sample(e, i, (double)i->in_flight, NULL); break;
    case 11: inst_sample(e, i, (double)i->state, NULL); break;
    case 12: inst_sample(e, i, (double)i->ejections, NULL); break;
    case 13: inst_sample(e, i, (double)i->ejections_skipped, NULL); break;
    case 14:
      inst_sample(e, i, (double)i->outcomes[RESIL_NOT_SENT], "not_sent");
      inst_sample(e, i, (double)i->outcomes[RESIL_UNKNOWN], "unknown");
      inst_sample(e, i, (double)i->outcomes[RESIL_ANSWERED], "answered");
      inst_sample(e, i, (double)i->outcomes[RESIL_REJECTED], "rejected");
      break;
    case 15: inst_sample(e, i, i->ramp_share, NULL); break;
    default: break;
    }
  }
}

static void by(resil_metrics_emitter *e, const char *label, const char *v, uint64_t n) {
  const char *l[2] = {label, v};
  resil_metrics_sample(e, (double)n, 1, l);
}

static void http_emit(const void *snap, size_t f, resil_metrics_emitter *e) {
  const resil_http_stats *s = &((const http_snap *)snap)->s;
  if (f >= 10) {
    inst_emit(snap, f, e);
    return;
  }
  switch (f) {
  case 0: resil_metrics_sample(e, (double)s->requests, 0, NULL); break;
  case 1:
    by(e, "outcome", "not_sent", s->outcomes[RESIL_NOT_SENT]);
    by(e, "outcome", "unknown", s->outcomes[RESIL_UNKNOWN]);
    by(e, "outcome", "answered", s->outcomes[RESIL_ANSWERED]);
    by(e, "outcome", "rejected", s->outcomes[RESIL_REJECTED]);
    break;
  case 2: resil_metrics_sample(e, (double)s->requests_sent, 0, NULL); break;
  case 3:
    by(e, "kind", "prevented", s->resends_prevented);
    by(e, "kind", "allowed", s->resends_counted);
    break;
  case 4: resil_metrics_sample(e, (double)s->connections_opened, 0, NULL); break;
  case 5: resil_metrics_sample(e, (double)s->lease_timeouts, 0, NULL); break;
  case 6: resil_metrics_sample(e, (double)s->leased, 0, NULL); break;
  case 7: resil_metrics_sample(e, (double)s->max_connections, 0, NULL); break;
  case 8:
    by(e, "answer", "committed", s->status_committed);
    by(e, "answer", "pending", s->status_pending);
    by(e, "answer", "unknown", s->status_unknown);
    break;
  case 9: resil_metrics_sample(e, (double)s->recovered, 0, NULL); break;
  default: break;
  }
}

static const resil_metrics_source http_src = {
    sizeof(resil_metrics_source), http_fams, sizeof http_fams / sizeof http_fams[0],
    sizeof(http_snap), http_snapshot, http_emit};

resil_status resil_http_client_metrics_add(resil_metrics *m, const char *name,
                                           const resil_http_client *c) {
  if (!m) return RESIL_EMISUSE;
  if (!c) return RESIL_EINVAL;
  return resil_metrics_add_source(m, name ? name : resil_http_client_name(c), &http_src, c);
}
