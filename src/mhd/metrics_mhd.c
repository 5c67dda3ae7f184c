/* resil_metrics_mhd_serve / _access and the idempotency helper as a
 * metrics source (metrics_mhd.h). */
#include <string.h>

#include "resil/idem_mhd.h"
#include "resil/metrics_mhd.h"

static enum MHD_Result queue(struct MHD_Connection *conn, unsigned status,
                             const char *body, size_t len, enum MHD_ResponseMemoryMode mode,
                             const char *allow) {
  struct MHD_Response *r = MHD_create_response_from_buffer(len, (void *)body, mode);
  if (!r) return MHD_NO;
  MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE,
                          status == MHD_HTTP_OK ? RESIL_METRICS_CONTENT_TYPE
                                                : "text/plain; charset=utf-8");
  if (allow) MHD_add_response_header(r, MHD_HTTP_HEADER_ALLOW, allow);
  enum MHD_Result rc = MHD_queue_response(conn, status, r);
  MHD_destroy_response(r);
  return rc;
}

enum MHD_Result resil_metrics_mhd_serve(resil_metrics *m, struct MHD_Connection *conn,
                                        const char *method) {
  if (!conn) return MHD_NO;
  int head = method && strcmp(method, MHD_HTTP_METHOD_HEAD) == 0;
  if (!method || (!head && strcmp(method, MHD_HTTP_METHOD_GET) != 0)) {
    static const char msg[] = "method not allowed\n";
    return queue(conn, MHD_HTTP_METHOD_NOT_ALLOWED, msg, sizeof msg - 1,
                 MHD_RESPMEM_PERSISTENT, "GET, HEAD");
  }
  char *text = NULL;
  size_t len = 0;
  if (resil_metrics_render_alloc(m, &text, &len) != RESIL_OK) {
    static const char msg[] = "metrics unavailable\n";
    return queue(conn, MHD_HTTP_SERVICE_UNAVAILABLE, msg, sizeof msg - 1,
                 MHD_RESPMEM_PERSISTENT, NULL);
  }
  /* MHD copies the buffer, so the collector's allocator frees it. */
  enum MHD_Result rc = queue(conn, MHD_HTTP_OK, text, len, MHD_RESPMEM_MUST_COPY, NULL);
  resil_metrics_text_free(m, text);
  return rc;
}

enum MHD_Result resil_metrics_mhd_access(void *cls, struct MHD_Connection *conn,
                                         const char *url, const char *method,
                                         const char *version, const char *upload_data,
                                         size_t *upload_data_size, void **con_cls) {
  (void)version, (void)upload_data;
  /* A body is read and dropped: the first call only marks the request. */
  if (!*con_cls) {
    static int marker;
    *con_cls = &marker;
    return MHD_YES;
  }
  if (*upload_data_size) {
    *upload_data_size = 0;
    return MHD_YES;
  }
  if (url && strcmp(url, RESIL_METRICS_MHD_PATH) == 0)
    return resil_metrics_mhd_serve(cls, conn, method);
  static const char msg[] = "not found\n";
  return queue(conn, MHD_HTTP_NOT_FOUND, msg, sizeof msg - 1, MHD_RESPMEM_PERSISTENT, NULL);
}

/* ---- the idempotency helper as a source --------------------------------- */

static const resil_metric_family idem_fams[] = {
    {"resil_idem_requests_total", RESIL_METRIC_COUNTER,
     "Operation requests served, by result (executed, replayed, in_progress, conflict, rejected, handler_failed, store_error, dropped, deadline_refused)."},
    {"resil_idem_status_queries_total", RESIL_METRIC_COUNTER, "Status route requests."},
    {"resil_idem_recovered_total", RESIL_METRIC_COUNTER, "Operations completed by recovery."},
    {"resil_idem_damaged_total", RESIL_METRIC_COUNTER, "Damaged PENDING rows recovery skipped."},
};

static resil_status idem_snapshot(const void *obj, void *snap) {
  return resil_idem_mhd_get_stats((const resil_idem_mhd *)obj, (resil_idem_mhd_stats *)snap);
}

static void res(resil_metrics_emitter *e, const char *v, uint64_t n) {
  const char *l[2] = {"result", v};
  resil_metrics_sample(e, (double)n, 1, l);
}

static void idem_emit(const void *snap, size_t f, resil_metrics_emitter *e) {
  const resil_idem_mhd_stats *s = snap;
  switch (f) {
  case 0:
    res(e, "executed", s->executed);
    res(e, "replayed", s->replayed);
    res(e, "in_progress", s->in_progress);
    res(e, "conflict", s->conflicts);
    res(e, "rejected", s->rejected);
    res(e, "handler_failed", s->handler_failed);
    res(e, "store_error", s->store_errors);
    res(e, "dropped", s->dropped);
    res(e, "deadline_refused", s->deadline_refused);
    break;
  case 1: resil_metrics_sample(e, (double)s->status_queries, 0, NULL); break;
  case 2: resil_metrics_sample(e, (double)s->recovered, 0, NULL); break;
  case 3: resil_metrics_sample(e, (double)s->damaged, 0, NULL); break;
  default: break;
  }
}

static const resil_metrics_source idem_src = {
    sizeof(resil_metrics_source), idem_fams, sizeof idem_fams / sizeof idem_fams[0],
    sizeof(resil_idem_mhd_stats), idem_snapshot, idem_emit};

resil_status resil_idem_mhd_metrics_add(resil_metrics *m, const char *name,
                                        const resil_idem_mhd *h) {
  if (!m) return RESIL_EMISUSE;
  if (!h) return RESIL_EINVAL;
  return resil_metrics_add_source(m, name ? name : resil_idem_mhd_name(h), &idem_src, h);
}

/* ---- the deadline helper as a source -------------------------------------- */

static const resil_metric_family dl_fams[] = {
    {"resil_deadline_requests_total", RESIL_METRIC_COUNTER,
     "Requests whose caller's deadline was read, by result (given, none, refused)."},
    {"resil_deadline_clamped_total", RESIL_METRIC_COUNTER,
     "Caller's budgets cut to the server's maximum."},
    {"resil_deadline_invalid_total", RESIL_METRIC_COUNTER,
     "Requests carrying at least one invalid deadline value (ignored)."},
};

static resil_status dl_snapshot(const void *obj, void *snap) {
  return resil_deadline_mhd_get_stats((const resil_deadline_mhd *)obj,
                                      (resil_deadline_mhd_stats *)snap);
}

static void dl_emit(const void *snap, size_t f, resil_metrics_emitter *e) {
  const resil_deadline_mhd_stats *s = snap;
  switch (f) {
  case 0:
    res(e, "given", s->given);
    res(e, "none", s->none);
    res(e, "refused", s->refused);
    break;
  case 1: resil_metrics_sample(e, (double)s->clamped, 0, NULL); break;
  case 2: resil_metrics_sample(e, (double)s->invalid, 0, NULL); break;
  default: break;
  }
}

static const resil_metrics_source dl_src = {
    sizeof(resil_metrics_source), dl_fams, sizeof dl_fams / sizeof dl_fams[0],
    sizeof(resil_deadline_mhd_stats), dl_snapshot, dl_emit};

resil_status resil_deadline_mhd_metrics_add(resil_metrics *m, const char *name,
                                            const resil_deadline_mhd *d) {
  if (!m) return RESIL_EMISUSE;
  if (!d) return RESIL_EINVAL;
  return resil_metrics_add_source(m, name ? name : resil_deadline_mhd_name(d), &dl_src, d);
}
