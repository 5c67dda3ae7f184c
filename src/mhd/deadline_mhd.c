/* resil_deadline_mhd (deadline_mhd.h): a libmicrohttpd request's deadline
 * from its caller's budget, by resil_deadline_from_headers' rule. */
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "core/internal.h"
#include "resil/deadline_mhd.h"

#define DL_MAGIC 0x444c4d48u /* "DLMH" */
#define MAX_HEADER_NAME 64
#define DAY_NS (INT64_C(86400) * RESIL_NS_PER_S)

/* The 0.2 layout ends with alloc. */
#define CONFIG_MIN_SIZE \
  (offsetof(resil_deadline_mhd_config, alloc) + sizeof(const resil_allocator *))

struct resil_deadline_mhd {
  unsigned magic;
  char *name;
  char *header;
  int read_grpc;
  int read_envoy;
  int64_t max_ns;
  int64_t floor_ns;
  unsigned refuse_status;
  const resil_clock *clock; /* NULL: the system's */
  const resil_allocator *alloc;
  atomic_uint_fast64_t requests, given, clamped, none, refused, invalid;
};

static int valid(const resil_deadline_mhd *d) { return d && d->magic == DL_MAGIC; }

static void bump(atomic_uint_fast64_t *c) { atomic_fetch_add_explicit(c, 1, memory_order_relaxed); }

static void config_defaults(resil_deadline_mhd_config *cfg) {
  memset(cfg, 0, sizeof *cfg);
  cfg->struct_size = sizeof *cfg;
  cfg->name = "deadline";
  cfg->header = RESIL_DEADLINE_HEADER;
  cfg->read_grpc = 1;
  cfg->read_envoy = 1;
  cfg->max_ns = 0;
  cfg->floor_ns = RESIL_DEADLINE_FLOOR_NS;
  cfg->refuse_status = 504;
}

void resil_deadline_mhd_config_init_sized(resil_deadline_mhd_config *cfg, size_t struct_size) {
  if (!cfg) return;
  resil_deadline_mhd_config full;
  config_defaults(&full);
  resil__sized_out(cfg, struct_size, &full, sizeof full);
}

static int is_tchar(unsigned char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
         (c && strchr("!#$%&'*+-.^_`|~", c));
}

static resil_status check_config(const resil_deadline_mhd_config *cfg, resil_error *err) {
  resil_status st;
  const char *h = cfg->header;
  if (!h || !*h || strlen(h) > MAX_HEADER_NAME)
    return resil__err(err, RESIL_EINVAL, "header", "must be an HTTP token of 1..%d characters",
                      MAX_HEADER_NAME);
  for (const char *p = h; *p; p++)
    if (!is_tchar((unsigned char)*p))
      return resil__err(err, RESIL_EINVAL, "header", "must be an HTTP token, got \"%.64s\"", h);
  if ((st = resil__check_range(err, "read_grpc", cfg->read_grpc, 0, 1))) return st;
  if ((st = resil__check_range(err, "read_envoy", cfg->read_envoy, 0, 1))) return st;
  if ((st = resil__check_ns(err, "max_ns", cfg->max_ns, 0, DAY_NS))) return st;
  if ((st = resil__check_ns(err, "floor_ns", cfg->floor_ns, 0, cfg->max_ns ? cfg->max_ns : DAY_NS)))
    return st;
  if ((st = resil__check_range(err, "refuse_status", cfg->refuse_status, 400, 599))) return st;
  return RESIL_OK;
}

resil_status resil_deadline_mhd_new(const resil_deadline_mhd_config *ucfg, resil_deadline_mhd **out,
                                    resil_error *err) {
  if (!ucfg) return resil__err(err, RESIL_EINVAL, "cfg", "must not be NULL");
  if (!out) return resil__err(err, RESIL_EINVAL, "out", "must not be NULL");
  resil_deadline_mhd_config full;
  config_defaults(&full);
  resil_status st = resil__sized_in(&full, sizeof full, ucfg, CONFIG_MIN_SIZE,
                                    "resil_deadline_mhd_config", "resil_deadline_mhd_config_init",
                                    err);
  if (st != RESIL_OK) return st;
  const resil_deadline_mhd_config *cfg = &full;
  if ((st = check_config(cfg, err)) != RESIL_OK) return st;
  resil_deadline_mhd *d = resil__calloc(cfg->alloc, sizeof *d);
  if (!d) return resil__err(err, RESIL_ENOMEM, NULL, "out of memory");
  d->alloc = cfg->alloc;
  int ok1, ok2;
  d->name = resil__strdup(d->alloc, cfg->name ? cfg->name : "deadline", &ok1);
  d->header = resil__strdup(d->alloc, cfg->header, &ok2);
  if (!ok1 || !ok2) {
    resil__free(d->alloc, d->name);
    resil__free(d->alloc, d->header);
    resil__free(d->alloc, d);
    return resil__err(err, RESIL_ENOMEM, NULL, "out of memory");
  }
  d->read_grpc = cfg->read_grpc;
  d->read_envoy = cfg->read_envoy;
  d->max_ns = cfg->max_ns;
  d->floor_ns = cfg->floor_ns;
  d->refuse_status = cfg->refuse_status;
  d->clock = cfg->clock;
  d->magic = DL_MAGIC;
  *out = d;
  return RESIL_OK;
}

void resil_deadline_mhd_free(resil_deadline_mhd *d) {
  if (!valid(d)) return;
  d->magic = RESIL_MAGIC_DEAD;
  resil__free(d->alloc, d->name);
  resil__free(d->alloc, d->header);
  resil__free(d->alloc, d);
}

const char *resil_deadline_mhd_name(const resil_deadline_mhd *d) {
  return valid(d) ? d->name : NULL;
}

resil_deadline_verdict resil_deadline_mhd_read(resil_deadline_mhd *d, struct MHD_Connection *conn,
                                               resil_ctx *ctx, int64_t *budget_ns) {
  if (!valid(d) || !conn || !ctx || ctx->struct_size == 0) return RESIL_DEADLINE_NONE;
  const char *own = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, d->header);
  const char *grpc =
      d->read_grpc ? MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "grpc-timeout") : NULL;
  const char *envoy = d->read_envoy ? MHD_lookup_connection_value(
                                          conn, MHD_HEADER_KIND, "x-envoy-expected-rq-timeout-ms")
                                    : NULL;
  int64_t budget = INT64_MAX;
  unsigned from = 0, invalid = 0;
  resil_deadline_verdict v =
      resil_deadline_from_headers(own, grpc, envoy, d->max_ns, d->floor_ns, &budget, &from, &invalid);
  bump(&d->requests);
  if (invalid) bump(&d->invalid);
  if (budget_ns) *budget_ns = budget;
  if (v == RESIL_DEADLINE_REFUSE) {
    bump(&d->refused);
    return v;
  }
  if (v == RESIL_DEADLINE_GIVEN) {
    bump(&d->given);
    if (d->max_ns && budget == d->max_ns) {
      /* Cut when the caller's own value was larger. */
      int64_t raw = INT64_MAX;
      (void)resil_deadline_from_headers(own, grpc, envoy, 0, 0, &raw, NULL, NULL);
      if (raw > d->max_ns) bump(&d->clamped);
    }
  } else {
    bump(&d->none);
  }
  if (!ctx->clock && d->clock) ctx->clock = d->clock;
  if (budget != INT64_MAX) resil_ctx_set_timeout_ns(ctx, budget);
  return v;
}

enum MHD_Result resil_deadline_mhd_refuse(resil_deadline_mhd *d, struct MHD_Connection *conn) {
  if (!valid(d) || !conn) return MHD_NO;
  char body[96];
  int n = snprintf(body, sizeof body, "{\"error\":\"deadline below the floor\",\"floor_us\":%lld}",
                   (long long)(d->floor_ns / 1000));
  struct MHD_Response *r =
      MHD_create_response_from_buffer((size_t)n, body, MHD_RESPMEM_MUST_COPY);
  if (!r) return MHD_NO;
  MHD_add_response_header(r, "Content-Type", "application/json");
  enum MHD_Result rc = MHD_queue_response(conn, d->refuse_status, r);
  MHD_destroy_response(r);
  return rc;
}

resil_status resil_deadline_mhd_get_stats_sized(const resil_deadline_mhd *d,
                                                resil_deadline_mhd_stats *out, size_t struct_size) {
  if (!out) return RESIL_EINVAL;
  if (!valid(d)) return RESIL_EMISUSE;
  resil_deadline_mhd_stats s;
  memset(&s, 0, sizeof s);
  s.struct_size = sizeof s;
  s.requests = atomic_load_explicit(&d->requests, memory_order_relaxed);
  s.given = atomic_load_explicit(&d->given, memory_order_relaxed);
  s.clamped = atomic_load_explicit(&d->clamped, memory_order_relaxed);
  s.none = atomic_load_explicit(&d->none, memory_order_relaxed);
  s.refused = atomic_load_explicit(&d->refused, memory_order_relaxed);
  s.invalid = atomic_load_explicit(&d->invalid, memory_order_relaxed);
  resil__sized_out(out, struct_size, &s, sizeof s);
  return RESIL_OK;
}
