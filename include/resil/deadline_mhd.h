/* resil_deadline_mhd: the caller's deadline for libmicrohttpd handlers
 * (DESIGN §8.3), in libresil-mhd (pkg-config resil-mhd; this header
 * includes <microhttpd.h>). The rule is resil_deadline_from_headers()
 * (deadline.h): the configured header (Request-Timeout by default),
 * grpc-timeout and x-envoy-expected-rq-timeout-ms, the smallest valid value
 * wins, invalid values are ignored (and counted), at most the server's
 * maximum; below the floor (default 5 ms) the request is refused before
 * any work. Only the first value of each header is read (as
 * MHD_lookup_connection_value does).
 *
 * In a handler, on the first call for a request (its headers are complete,
 * the body not yet read: the budget counts from there):
 *
 *   resil_ctx ctx;
 *   resil_ctx_init(&ctx);
 *   if (resil_deadline_mhd_read(dl, conn, &ctx) == RESIL_DEADLINE_REFUSE)
 *     return resil_deadline_mhd_refuse(dl, conn);   // 504, nothing done
 *   ... every call the handler makes takes &ctx: the caller's deadline
 *   ... flows on (libresil-http sends what is left to the next hop)
 *
 * resil_idem_mhd applies it itself when its config names one
 * (resil_idem_mhd_config.deadline): a refused operation never reaches the
 * store (no PENDING row), and the handler gets the deadline in call->ctx.
 *
 * Create/free pair: resil_deadline_mhd_new / resil_deadline_mhd_free.
 * Thread-safety: every function but _free may be called from any thread
 * at once (libmicrohttpd's thread per connection). Since 0.2. */
#ifndef RESIL_DEADLINE_MHD_H
#define RESIL_DEADLINE_MHD_H

#include <stddef.h>
#include <stdint.h>

#include <microhttpd.h>

#include "alloc.h"
#include "call.h"
#include "clock.h"
#include "deadline.h"
#include "status.h"
#include "version.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct resil_deadline_mhd resil_deadline_mhd;

typedef struct resil_deadline_mhd_config {
  /* Set by resil_deadline_mhd_config_init(). Fields only appended. */
  size_t struct_size;
  /* Instance name, copied. Default "deadline". */
  const char *name;
  /* The header libresil-http (or any client) sends the budget in, gRPC's
   * grammar: an HTTP token of 1..64 characters. Copied. Default
   * "Request-Timeout". */
  const char *header;
  /* 1 (default): also read grpc-timeout; 0: not. */
  int read_grpc;
  /* 1 (default): also read x-envoy-expected-rq-timeout-ms; 0: not. */
  int read_envoy;
  /* The server's own maximum for a request: a larger budget is cut to it,
   * and a request without a valid value gets it. 0 (default): none (such
   * a request has no deadline). 0..1 day. */
  int64_t max_ns;
  /* A budget below it is refused. 0..max_ns (0: only what is left is
   * checked, nothing refused). Default RESIL_DEADLINE_FLOOR_NS (5 ms). */
  int64_t floor_ns;
  /* Status of the refusal, 400..599. Default 504 (Gateway Timeout: the
   * budget the caller gave ran out before this hop could answer). */
  unsigned refuse_status;
  /* The clock the deadlines are set on (the ctx's clock); NULL = system.
   * The clock handlers' policies use. */
  const resil_clock *clock;
  /* NULL = malloc/free. */
  const resil_allocator *alloc;
} resil_deadline_mhd_config;

/* Writes the documented defaults (a macro passing sizeof). NULL is a
 * no-op. Since 0.2. */
RESIL_API void resil_deadline_mhd_config_init_sized(resil_deadline_mhd_config *cfg,
                                                    size_t struct_size);
#define resil_deadline_mhd_config_init(cfg)                                    \
  resil_deadline_mhd_config_init_sized((cfg), sizeof(resil_deadline_mhd_config))

/* Validates cfg and creates the helper. Returns RESIL_OK, RESIL_EINVAL
 * (NULL argument, a config not passed through the init, a field out of
 * range: err names it), RESIL_ENOMEM. *out untouched on failure.
 * Since 0.2. */
RESIL_API resil_status resil_deadline_mhd_new(const resil_deadline_mhd_config *cfg,
                                              resil_deadline_mhd **out, resil_error *err);
/* NULL is a no-op. Needs exclusive access (stop the daemon first).
 * Since 0.2. */
RESIL_API void resil_deadline_mhd_free(resil_deadline_mhd *d);

/* The helper's name (owned by d); NULL for a NULL handle. Since 0.2. The
 * counters below go to a metrics collector with
 * resil_deadline_mhd_metrics_add (metrics_mhd.h). */
RESIL_API const char *resil_deadline_mhd_name(const resil_deadline_mhd *d);

/* Reads the request's deadline headers from conn. GIVEN or NONE: sets
 * ctx->deadline_ns to now + the budget on ctx->clock (NULL: the helper's
 * clock is set in ctx->clock first), or leaves ctx without a deadline for
 * NONE when there is no maximum; *budget_ns (may be NULL) gets the budget.
 * REFUSE: ctx is not touched, the refusal is counted; answer it with
 * resil_deadline_mhd_refuse() and do nothing else. A NULL or invalid
 * handle, conn or ctx (or a ctx not passed through resil_ctx_init()):
 * RESIL_DEADLINE_NONE, nothing touched. Since 0.2. */
RESIL_API resil_deadline_verdict resil_deadline_mhd_read(resil_deadline_mhd *d,
                                                         struct MHD_Connection *conn,
                                                         resil_ctx *ctx, int64_t *budget_ns);

/* Queues the refusal on conn: refuse_status with
 * {"error":"deadline below the floor","floor_us":F} (application/json).
 * Returns what MHD_queue_response() returned (MHD_NO for a NULL handle or
 * when out of memory). Since 0.2. */
RESIL_API enum MHD_Result resil_deadline_mhd_refuse(resil_deadline_mhd *d,
                                                    struct MHD_Connection *conn);

typedef struct resil_deadline_mhd_stats {
  size_t struct_size; /* bytes the library filled                     */
  uint64_t requests;  /* requests read                                 */
  uint64_t given;     /* ... with a caller's budget taken (GIVEN)      */
  uint64_t clamped;   /* ... of which cut to max_ns                    */
  uint64_t none;      /* ... without a valid value (NONE)              */
  uint64_t refused;   /* ... refused below the floor (REFUSE)          */
  uint64_t invalid;   /* ... carrying at least one invalid value       */
} resil_deadline_mhd_stats;

/* Snapshot of the counters up to struct_size. RESIL_OK, RESIL_EMISUSE (a
 * NULL or freed handle), RESIL_EINVAL (out NULL). Since 0.2. */
RESIL_API resil_status resil_deadline_mhd_get_stats_sized(const resil_deadline_mhd *d,
                                                          resil_deadline_mhd_stats *out,
                                                          size_t struct_size);
#define resil_deadline_mhd_get_stats(d, out)                                   \
  resil_deadline_mhd_get_stats_sized((d), (out), sizeof(resil_deadline_mhd_stats))

#ifdef __cplusplus
}
#endif
#endif
