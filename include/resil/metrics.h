/* resil_metrics: the Prometheus text exposition (format 0.0.4) of named
 * instances. Since 0.2.
 *
 * A collector holds borrowed instances, each under a name, and renders the
 * figures their getters report (resil_breaker_get_metrics and friends) as
 * one exposition: every family once, with its # HELP and # TYPE lines, its
 * samples for every instance of its kind after it. Names follow
 * Resilience4j's Micrometer names with the `resil_` prefix (the table is in
 * the README and in tests/unit/test_metrics.c's golden text):
 *
 *   resil_circuitbreaker_calls_total{name,kind}     counter  successful,
 *                                                            failed, ignored,
 *                                                            not_permitted,
 *                                                            ramp_rejected
 *   resil_circuitbreaker_slow_calls_total{name,kind} counter successful, failed
 *   resil_circuitbreaker_state{name,state}          gauge    one-hot, 6 states
 *   resil_circuitbreaker_failure_rate{name}         gauge    percent; NaN until
 *   resil_circuitbreaker_slow_call_rate{name}       gauge    minimum calls
 *   resil_circuitbreaker_buffered_calls{name,kind}  gauge    successful, failed
 *   resil_circuitbreaker_transitions_total{name}    counter
 *   resil_circuitbreaker_ramp_ratio{name}           gauge    share admitted now
 *                                         (breaker.h "Ramp"; 1 when not ramping)
 *   resil_retry_calls_total{name,kind}              counter  successful_without_
 *                                retry, successful_with_retry, failed_with_retry,
 *                                failed_without_retry
 *   resil_retry_attempts_total, resil_retry_refused_attempts_total{reason}
 *                                (deadline, budget, recovering: retries last)
 *   resil_ratelimiter_available_permissions, _waiting_calls (gauges),
 *   resil_ratelimiter_calls_total{kind}
 *   resil_bulkhead_available_concurrent_calls, _max_allowed_concurrent_calls,
 *   _waiting_calls (gauges), resil_bulkhead_calls_total{kind}
 *   resil_timelimiter_calls_total{kind}, _running_tasks, _abandoned_tasks
 *   resil_hedge_calls_total{kind}, resil_hedge_hedges_total{kind} (sent,
 *   won, refused_by_budget, refused_recovering, cancelled_loser),
 *   resil_hedge_delay_seconds
 *   resil_chain_layer_calls_total, _attempts_total, _rejections_total
 *   {name,position,layer,instance}, resil_chain_call_attempts_total
 *
 * The HTTP client's, the engine's, the operation store's and the
 * idempotency helper's figures come from their own libraries, which add
 * them through the source interface below (resil_http_client_metrics_add
 * in http.h and resil_engine_metrics_add in engine.h, libresil-http;
 * resil_store_metrics_add in store.h, libresil-store;
 * resil_idem_mhd_metrics_add in metrics_mhd.h, libresil-mhd, which also has
 * the /metrics handler), so libresil keeps depending on libc and threads
 * only.
 *
 * Counters are the getters' monotonic totals, so they never go down from
 * one render to the next. Label values are escaped as the format says
 * (backslash, double quote and newline); instance names must be valid
 * UTF-8.
 *
 * Thread-safety: every function may be called from any thread at once,
 * except resil_metrics_free(), which needs exclusive access. Renders are
 * serialized on the collector's mutex; they read the instances through
 * their thread-safe getters while other threads use them (a breaker's
 * getter may deliver overdue events to its listeners on the rendering
 * thread: a listener must not call the collector). An instance must
 * outlive its membership (remove it, or free the collector, first).
 *
 * Every instance of a registry (registry.h, libresil-config) is added in
 * one call, resil_registry_metrics_add(), and then follows its reloads.
 *
 * Create/free pair: resil_metrics_new / resil_metrics_free. */
#ifndef RESIL_METRICS_H
#define RESIL_METRICS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "alloc.h"
#include "status.h"
#include "version.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct resil_metrics resil_metrics;
typedef struct resil_breaker resil_breaker;
typedef struct resil_retry resil_retry;
typedef struct resil_ratelimiter resil_ratelimiter;
typedef struct resil_bulkhead resil_bulkhead;
typedef struct resil_timelimiter resil_timelimiter;
typedef struct resil_hedge resil_hedge;
typedef struct resil_chain resil_chain;

/* Creates an empty collector. alloc NULL = malloc/free. Returns RESIL_OK
 * (*out set), RESIL_EINVAL (out NULL), RESIL_ENOMEM, RESIL_ESYS (mutex).
 * Since 0.2. */
RESIL_API resil_status resil_metrics_new(const resil_allocator *alloc,
                                         resil_metrics **out);
/* Frees the collector (not the instances). NULL is a no-op. Since 0.2. */
RESIL_API void resil_metrics_free(resil_metrics *m);

/* Adds a borrowed instance under `name` (copied; NULL takes the instance's
 * own name, except for a chain, which has none: its name is required). Returns RESIL_OK; RESIL_EMISUSE (NULL collector); RESIL_EINVAL
 * (NULL instance, a name that is empty or not UTF-8, or a name already
 * added for this kind: two series would have the same labels);
 * RESIL_ENOMEM. Since 0.2. */
RESIL_API resil_status resil_metrics_add_breaker(resil_metrics *m,
                                                 const char *name,
                                                 resil_breaker *br);
RESIL_API resil_status resil_metrics_add_retry(resil_metrics *m,
                                               const char *name,
                                               const resil_retry *r);
RESIL_API resil_status resil_metrics_add_ratelimiter(resil_metrics *m,
                                                     const char *name,
                                                     const resil_ratelimiter *rl);
RESIL_API resil_status resil_metrics_add_bulkhead(resil_metrics *m,
                                                  const char *name,
                                                  const resil_bulkhead *bh);
RESIL_API resil_status resil_metrics_add_timelimiter(resil_metrics *m,
                                                     const char *name,
                                                     const resil_timelimiter *tl);
RESIL_API resil_status resil_metrics_add_hedge(resil_metrics *m,
                                               const char *name,
                                               const resil_hedge *h);
RESIL_API resil_status resil_metrics_add_chain(resil_metrics *m,
                                               const char *name,
                                               const resil_chain *ch);

/* Removes every membership of instance `obj` (any kind). Returns RESIL_OK,
 * RESIL_EMISUSE (NULL collector), RESIL_EINVAL (obj not a member). When it
 * returns, no render reads obj any more. Since 0.2. */
RESIL_API resil_status resil_metrics_remove(resil_metrics *m, const void *obj);

/* Number of instances added; 0 for NULL. Since 0.2. */
RESIL_API size_t resil_metrics_count(const resil_metrics *m);

/* Renders the exposition into buf (cap bytes) with a terminating NUL, and
 * sets *len (may be NULL) to its length without the NUL. With buf NULL and
 * cap 0 it only measures. Returns RESIL_OK; RESIL_EMISUSE (NULL collector);
 * RESIL_EINVAL (buf NULL with cap > 0); RESIL_ENOMEM when cap is too small
 * for the text and its NUL: *len is then the length needed (a render a
 * moment later can be a few bytes longer as numbers grow: leave room) and
 * buf holds "" (never a truncated exposition). Since 0.2. */
RESIL_API resil_status resil_metrics_render(resil_metrics *m, char *buf,
                                            size_t cap, size_t *len);
/* Renders into a buffer allocated with the collector's allocator, freed
 * with resil_metrics_text_free(). *out NUL-terminated, *len (may be NULL)
 * its length. Returns RESIL_OK, RESIL_EMISUSE, RESIL_EINVAL (out NULL),
 * RESIL_ENOMEM. Since 0.2. */
RESIL_API resil_status resil_metrics_render_alloc(resil_metrics *m, char **out,
                                                  size_t *len);
RESIL_API void resil_metrics_text_free(resil_metrics *m, char *text);
/* Writes the exposition to a file descriptor (retrying short writes and
 * EINTR) or a stdio stream (not flushed). Returns RESIL_OK, RESIL_EMISUSE,
 * RESIL_EINVAL (fd < 0, f NULL), RESIL_ENOMEM, RESIL_EIO (a write failed).
 * Since 0.2. */
RESIL_API resil_status resil_metrics_write_fd(resil_metrics *m, int fd);
RESIL_API resil_status resil_metrics_write_file(resil_metrics *m, FILE *f);

/* The exposition's Content-Type. Static text. Since 0.2. */
#define RESIL_METRICS_CONTENT_TYPE "text/plain; version=0.0.4; charset=utf-8"

/* ---- sources: figures of other libraries and of the application ----------
 *
 * A source describes one kind of instance: its families, and two
 * functions. At each render the collector calls snapshot() once per
 * instance of the source (into snapshot_size bytes it owns), then, family by
 * family, emit() for each instance, which calls resil_metrics_sample() for
 * each of the family's samples. The collector writes the HELP and TYPE
 * lines and the `name` label (the instance's name, first); the source adds
 * up to RESIL_METRICS_MAX_LABELS more. Instances of one source are
 * grouped, in the order their sources were first added. The source struct
 * and its tables must outlive the collector's use (static const data).
 * Callbacks run inside the render, on its thread, with the collector's
 * mutex held: they must not call the collector. */

typedef enum resil_metric_type {
  RESIL_METRIC_COUNTER = 0, /* monotonic total; name ends in _total */
  RESIL_METRIC_GAUGE = 1
} resil_metric_type;

typedef struct resil_metric_family {
  const char *name; /* [a-zA-Z_:][a-zA-Z0-9_:]* */
  resil_metric_type type;
  const char *help; /* one line; backslashes and newlines are escaped */
} resil_metric_family;

typedef struct resil_metrics_emitter resil_metrics_emitter;

#define RESIL_METRICS_MAX_LABELS 4

typedef struct resil_metrics_source {
  size_t struct_size; /* sizeof(resil_metrics_source) */
  const resil_metric_family *families;
  size_t n_families;
  size_t snapshot_size; /* bytes given to snapshot(); at most 64 KiB */
  /* Fills snap from obj. Anything but RESIL_OK leaves the instance out of
   * this render. */
  resil_status (*snapshot)(const void *obj, void *snap);
  /* Emits family `family` (an index into families) from snap. */
  void (*emit)(const void *snap, size_t family, resil_metrics_emitter *e);
} resil_metrics_source;

/* Adds a borrowed instance of a source. Same statuses as
 * resil_metrics_add_breaker, plus RESIL_EINVAL for a NULL or malformed
 * source (a family name that is not a metric name, a counter not ending in
 * _total). name may not be NULL here. Since 0.2. */
RESIL_API resil_status resil_metrics_add_source(resil_metrics *m,
                                                const char *name,
                                                const resil_metrics_source *src,
                                                const void *obj);

/* Emits one sample of the current family: `nlabels` (0..
 * RESIL_METRICS_MAX_LABELS) label names and values in `labels` as
 * name, value, name, value, ... Values are escaped; names must be label
 * names ([a-zA-Z_][a-zA-Z0-9_]*, not "name"): a bad one drops the sample.
 * A NaN value is written "NaN", infinities "+Inf"/"-Inf", integers exactly
 * up to 2^53. Only valid inside emit(). Since 0.2. */
RESIL_API void resil_metrics_sample(resil_metrics_emitter *e, double value,
                                    size_t nlabels, const char *const *labels);

#ifdef __cplusplus
}
#endif
#endif
