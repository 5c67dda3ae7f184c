/* A ready /metrics endpoint for libmicrohttpd servers: the Prometheus text
 * exposition of a resil_metrics collector (metrics.h). Part of libresil-mhd
 * (pkg-config resil-mhd); includes <microhttpd.h>; the umbrella header
 * resil.h does not include it. Since 0.2.
 *
 * Either call resil_metrics_mhd_serve() from your own access handler for
 * the requests to your metrics path, or start a daemon that serves only
 * the metrics with resil_metrics_mhd_access as its handler and the
 * collector as its cls:
 *
 *   struct sockaddr_in addr = {.sin_family = AF_INET,       // 127.0.0.1
 *                              .sin_port = htons(9464),     // only
 *                              .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
 *   MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD, 0, NULL, NULL,
 *                    resil_metrics_mhd_access, metrics,
 *                    MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&addr,
 *                    MHD_OPTION_END);
 *
 * Thread-safety: both may run on any number of MHD threads at once (renders
 * serialize on the collector's mutex). The collector must outlive the
 * daemon. */
#ifndef RESIL_METRICS_MHD_H
#define RESIL_METRICS_MHD_H

#include <stddef.h>

#include <microhttpd.h>

#include "metrics.h"
#include "version.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Queues the answer to one request for the exposition: GET or HEAD gives
 * 200 with Content-Type RESIL_METRICS_CONTENT_TYPE and the text (HEAD: no
 * body); another method 405 with "Allow: GET, HEAD"; a render that fails
 * (out of memory) 503. Call it once the request's headers are in (the
 * first call of the access handler is fine: the exposition reads no body).
 * Returns what MHD_queue_response() returns, MHD_NO when no response could
 * be made. Since 0.2. */
RESIL_API enum MHD_Result resil_metrics_mhd_serve(resil_metrics *m,
                                                  struct MHD_Connection *conn,
                                                  const char *method);

/* A complete MHD_AccessHandlerCallback with cls = the collector: serves
 * RESIL_METRICS_MHD_PATH with resil_metrics_mhd_serve() and answers 404 to
 * every other path. Since 0.2. */
#define RESIL_METRICS_MHD_PATH "/metrics"
RESIL_API enum MHD_Result resil_metrics_mhd_access(void *cls,
                                                   struct MHD_Connection *conn,
                                                   const char *url,
                                                   const char *method,
                                                   const char *version,
                                                   const char *upload_data,
                                                   size_t *upload_data_size,
                                                   void **con_cls);

/* Adds a resil_idem_mhd helper (idem_mhd.h) to a collector under `name`
 * (NULL: the helper's name): resil_idem_requests_total{name,result}
 * (executed, replayed, in_progress, conflict, rejected, handler_failed,
 * store_error, dropped, and since 0.2 deadline_refused),
 * resil_idem_status_queries_total,
 * resil_idem_recovered_total, resil_idem_damaged_total. Same statuses as
 * resil_metrics_add_source. Since 0.2. */
typedef struct resil_idem_mhd resil_idem_mhd;
RESIL_API resil_status resil_idem_mhd_metrics_add(resil_metrics *m, const char *name,
                                                  const resil_idem_mhd *h);

/* Adds a resil_deadline_mhd helper (deadline_mhd.h) to a collector under
 * `name` (NULL: the helper's name): resil_deadline_requests_total{name,
 * result} (given, none, refused), resil_deadline_clamped_total,
 * resil_deadline_invalid_total. Same statuses as resil_metrics_add_source.
 * Since 0.2. */
typedef struct resil_deadline_mhd resil_deadline_mhd;
RESIL_API resil_status resil_deadline_mhd_metrics_add(resil_metrics *m, const char *name,
                                                      const resil_deadline_mhd *d);

#ifdef __cplusplus
}
#endif
#endif
