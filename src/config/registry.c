/* The registry (registry.h): YAML (libyaml's document API, which keeps the
 * line and column of every node) -> resolved C configs -> the policies' own
 * constructors, which validate every range. A policy's resil_error (its
 * field name and range) is mapped back to the YAML node that set the
 * field. Instances are refcounted entries; a snapshot is the sorted set the
 * lookups see, swapped under a rwlock by a reload. */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>
#include <yaml.h>

#include "config/registry_int.h"
#include "core/internal.h"
#include "resil/breaker.h"
#include "resil/bulkhead.h"
#include "resil/chain.h"
#include "resil/hedge.h"
#include "resil/ratelimit.h"
#include "resil/registry.h"
#include "resil/retry.h"
#include "resil/shared.h"
#include "resil/timelimit.h"
#include "resil/metrics.h"
#ifdef RESIL_CONFIG_HTTP
#include "resil/events.h"
#include "resil/http.h"
#endif
#ifdef RESIL_CONFIG_REDIS
#include "resil/redis.h"
#endif
#ifdef RESIL_CONFIG_STORE
#include "resil/store.h"
#endif

/* ---- field tables ----------------------------------------------------------- */

typedef enum ftype {
  F_U32, F_I64, F_DUR, F_DBL, F_BOOL, F_PCT, F_ENUM, F_CLASSES,
  F_STR,  /* const char *, pointing into the document during the build */
  F_SIZE, /* size_t, with a size unit */
  F_REF,  /* a pointer to another instance, named in the file (ref_kind) */
  F_OCT,  /* uint32_t written in octal ("0600") */
  F_STRS  /* const char *const *, a NULL-terminated list of strings (a YAML
             sequence of scalars): the array lives until the load ends
             (lctx_alloc), the strings in the document */
} ftype;

typedef struct field {
  const char *key;    /* YAML key */
  const char *cfield; /* C field, as the policy names it in resil_error */
  ftype type;
  size_t off;
  const char *const *names; /* F_ENUM: value i is names[i]; NULL-terminated */
  int ref_kind;             /* F_REF: the resil_registry_kind it names */
} field;

static const char *const WINDOW_TYPES[] = {"count", "time", NULL};
static const char *const BREAKER_STATES[] = {"closed", "open", "half_open", "disabled",
                                             "forced_open", "metrics_only", NULL};
static const char *const BACKOFFS[] = {"fixed", "exponential", "exponential_full_jitter",
                                       "exponential_equal_jitter", "decorrelated_jitter",
                                       NULL};

#define FLD(T, k, c, t) {k, #c, t, offsetof(T, c), NULL, 0}
#define FEN(T, k, c, names) {k, #c, F_ENUM, offsetof(T, c), names, 0}
#define FREF(T, k, c, kind) {k, #c, F_REF, offsetof(T, c), NULL, kind}

static const field BREAKER_FIELDS[] = {
    FEN(resil_breaker_config, "window_type", window_type, WINDOW_TYPES),
    FLD(resil_breaker_config, "window_size", window_size, F_U32),
    FLD(resil_breaker_config, "minimum_calls", minimum_calls, F_U32),
    FLD(resil_breaker_config, "failure_rate_threshold", failure_rate_threshold_pct, F_PCT),
    FLD(resil_breaker_config, "slow_call_rate_threshold", slow_call_rate_threshold_pct, F_PCT),
    FLD(resil_breaker_config, "slow_call_duration", slow_call_duration_ns, F_DUR),
    FLD(resil_breaker_config, "open_wait", open_wait_ns, F_DUR),
    FLD(resil_breaker_config, "open_wait_multiplier", open_wait_multiplier, F_DBL),
    FLD(resil_breaker_config, "open_wait_max", open_wait_max_ns, F_DUR),
    FLD(resil_breaker_config, "half_open_permitted_calls", half_open_permitted_calls, F_U32),
    FLD(resil_breaker_config, "half_open_max_wait", half_open_max_wait_ns, F_DUR),
    FLD(resil_breaker_config, "automatic_half_open", automatic_half_open, F_BOOL),
    FLD(resil_breaker_config, "failure_classes", failure_classes, F_CLASSES),
    FLD(resil_breaker_config, "event_capacity", event_capacity, F_U32),
    FLD(resil_breaker_config, "ignored_classes", ignored_classes, F_CLASSES),
    FEN(resil_breaker_config, "initial_state", initial_state, BREAKER_STATES),
    FLD(resil_breaker_config, "half_open_max_wait_to_closed", half_open_max_wait_to_closed,
        F_BOOL),
    FREF(resil_breaker_config, "shared", shared, RESIL_REG_SHARED),
    FLD(resil_breaker_config, "ramp_duration", ramp_duration_ns, F_DUR),
    FLD(resil_breaker_config, "ramp_min_percent", ramp_min_percent, F_PCT),
    FLD(resil_breaker_config, "ramp_aggression", ramp_aggression, F_DBL),
};

static const field RETRY_FIELDS[] = {
    FLD(resil_retry_config, "max_attempts", max_attempts, F_U32),
    FEN(resil_retry_config, "backoff", backoff, BACKOFFS),
    FLD(resil_retry_config, "wait", wait_ns, F_DUR),
    FLD(resil_retry_config, "initial_wait", initial_wait_ns, F_DUR),
    FLD(resil_retry_config, "multiplier", multiplier, F_DBL),
    FLD(resil_retry_config, "max_wait", max_wait_ns, F_DUR),
    FLD(resil_retry_config, "respect_retry_after", respect_retry_after, F_BOOL),
    FLD(resil_retry_config, "max_retry_after", max_retry_after_ns, F_DUR),
    FLD(resil_retry_config, "retry_classes", retry_classes, F_CLASSES),
    FLD(resil_retry_config, "retry_on_rejected", retry_on_rejected, F_BOOL),
    FLD(resil_retry_config, "unsafe_retry_non_idempotent", unsafe_retry_non_idempotent,
        F_BOOL),
    FLD(resil_retry_config, "min_attempt_budget", min_attempt_budget_ns, F_DUR),
    FREF(resil_retry_config, "budget", budget, RESIL_REG_RETRY_BUDGET),
    FREF(resil_retry_config, "recovery_breaker", recovery_breaker, RESIL_REG_BREAKER),
    FLD(resil_retry_config, "retry_during_recovery", retry_during_recovery, F_BOOL),
};

/* A rate limiter's config, and (with libresil-redis) the keys of a limiter
 * on Redis: `redis: redis://...` makes one (resil_redis_ratelimiter_new);
 * its other keys are refused without it. Unset (the library's defaults):
 * failure, burst, expected_instances and redis_timeout_ns -1, key_prefix
 * NULL. `shared` is then the
 * segment of the `local` policy's limiter. */
typedef struct rl_cfg {
  resil_ratelimiter_config rl;
  const char *redis;
  int failure; /* index into FAILURES */
  int64_t burst;
  int64_t expected_instances;
  int64_t redis_timeout_ns;
  const char *key_prefix;
} rl_cfg;
#ifdef RESIL_CONFIG_REDIS
static const char *const FAILURES[] = {"open", "closed", "local", NULL};
#endif
#define RLF(k, c, t) {k, #c, t, offsetof(rl_cfg, rl.c), NULL, 0}
static const field RATELIMITER_FIELDS[] = {
    RLF("limit_for_period", limit_for_period, F_I64),
    RLF("refresh_period", refresh_period_ns, F_DUR),
    RLF("timeout", timeout_ns, F_DUR),
    {"shared", "shared", F_REF, offsetof(rl_cfg, rl.shared), NULL, RESIL_REG_SHARED},
#ifdef RESIL_CONFIG_REDIS
    {"redis", "uri", F_STR, offsetof(rl_cfg, redis), NULL, 0},
    {"failure", "failure", F_ENUM, offsetof(rl_cfg, failure), FAILURES, 0},
    {"burst", "burst", F_I64, offsetof(rl_cfg, burst), NULL, 0},
    {"expected_instances", "expected_instances", F_I64, offsetof(rl_cfg, expected_instances),
     NULL, 0},
    {"redis_timeout", "redis_timeout_ns", F_DUR, offsetof(rl_cfg, redis_timeout_ns), NULL, 0},
    {"key_prefix", "key_prefix", F_STR, offsetof(rl_cfg, key_prefix), NULL, 0},
#endif
};
#undef RLF

static const field BULKHEAD_FIELDS[] = {
    FLD(resil_bulkhead_config, "max_concurrent", max_concurrent, F_U32),
    FLD(resil_bulkhead_config, "max_wait", max_wait_ns, F_DUR),
    FLD(resil_bulkhead_config, "max_queued", max_queued, F_U32),
    FREF(resil_bulkhead_config, "shared", shared, RESIL_REG_SHARED),
};

static const field TIMELIMITER_FIELDS[] = {
    FLD(resil_timelimiter_config, "timeout", timeout_ns, F_DUR),
    FLD(resil_timelimiter_config, "cancel_running", cancel_running, F_BOOL),
    FREF(resil_timelimiter_config, "executor", executor, RESIL_REG_THREADPOOL),
};

static const field HEDGE_FIELDS[] = {
    FLD(resil_hedge_config, "delay", delay_ns, F_DUR),
    FLD(resil_hedge_config, "delay_percentile_permille", delay_percentile_permille, F_U32),
    FLD(resil_hedge_config, "min_delay", min_delay_ns, F_DUR),
    FLD(resil_hedge_config, "max_delay", max_delay_ns, F_DUR),
    FLD(resil_hedge_config, "min_samples", min_samples, F_U32),
    FLD(resil_hedge_config, "window_size", window_size, F_U32),
    FLD(resil_hedge_config, "max_hedges", max_hedges, F_U32),
    FLD(resil_hedge_config, "unacceptable_classes", unacceptable_classes, F_CLASSES),
    FLD(resil_hedge_config, "deposit_calls", deposit_calls, F_BOOL),
    FREF(resil_hedge_config, "budget", budget, RESIL_REG_RETRY_BUDGET),
    FREF(resil_hedge_config, "executor", executor, RESIL_REG_THREADPOOL),
    FREF(resil_hedge_config, "recovery_breaker", recovery_breaker, RESIL_REG_BREAKER),
    FLD(resil_hedge_config, "hedge_during_recovery", hedge_during_recovery, F_BOOL),
};

static const char *const BUDGET_MODES[] = {"finagle", "grpc", NULL};
static const field BUDGET_FIELDS[] = {
    FEN(resil_retry_budget_config, "mode", mode, BUDGET_MODES),
    FLD(resil_retry_budget_config, "ttl", ttl_ns, F_DUR),
    FLD(resil_retry_budget_config, "min_retries_per_s", min_retries_per_s, F_U32),
    FLD(resil_retry_budget_config, "percent_can_retry", percent_can_retry_pct, F_U32),
    FLD(resil_retry_budget_config, "max_tokens", max_tokens, F_U32),
    FLD(resil_retry_budget_config, "token_ratio_milli", token_ratio_milli, F_U32),
    FREF(resil_retry_budget_config, "shared", shared, RESIL_REG_SHARED),
};

static const field THREADPOOL_FIELDS[] = {
    FLD(resil_threadpool_config, "threads", threads, F_U32),
    FLD(resil_threadpool_config, "queue_capacity", queue_capacity, F_U32),
};

static const field CHAIN_FIELDS[] = {
    FLD(resil_chain_config, "total_timeout", total_timeout_ns, F_DUR),
};

#ifdef RESIL_CONFIG_HTTP
static const char *const METHODS[] = {"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE",
                                      "OPTIONS", NULL};
static const char *const IDEMPOTENCY[] = {"default", "true", "false", NULL};
static const char *const CODECS[] = {"raw", "json", NULL};
static const char *const KEYS[] = {"none", "send", NULL};
static const char *const RESENDS[] = {"never", "if_safe", NULL};
/* Indexed by resil_http_balance. */
static const char *const BALANCES[] = {"p2c", "round_robin", NULL};

static const field HTTP_FIELDS[] = {
    FLD(resil_http_client_config, "base_url", base_url, F_STR),
    FLD(resil_http_client_config, "max_connections", max_connections, F_U32),
    FLD(resil_http_client_config, "max_connections_per_host", max_connections_per_host, F_U32),
    FLD(resil_http_client_config, "lease_timeout", lease_timeout_ns, F_DUR),
    FLD(resil_http_client_config, "connect_timeout", connect_timeout_ns, F_DUR),
    FLD(resil_http_client_config, "response_timeout", response_timeout_ns, F_DUR),
    FLD(resil_http_client_config, "follow_redirects", follow_redirects, F_BOOL),
    FLD(resil_http_client_config, "max_redirects", max_redirects, F_U32),
    FLD(resil_http_client_config, "request_gzip", request_gzip, F_BOOL),
    FLD(resil_http_client_config, "gzip_min_bytes", gzip_min_bytes, F_SIZE),
    FLD(resil_http_client_config, "response_decompression", response_decompression, F_BOOL),
    FEN(resil_http_client_config, "resend_stale", resend_stale, RESENDS),
    FLD(resil_http_client_config, "idempotency_header", idempotency_header, F_STR),
    FLD(resil_http_client_config, "max_response_bytes", max_response_bytes, F_SIZE),
    FLD(resil_http_client_config, "proxy", proxy, F_STR),
    FLD(resil_http_client_config, "verify_peer", verify_peer, F_BOOL),
    FLD(resil_http_client_config, "ca_file", ca_file, F_STR),
    FLD(resil_http_client_config, "user_agent", user_agent, F_STR),
    FLD(resil_http_client_config, "status_query_classes", status_query_classes, F_CLASSES),
    FLD(resil_http_client_config, "status_poll", status_poll_ns, F_DUR),
    FLD(resil_http_client_config, "pending_wait_max", pending_wait_max_ns, F_DUR),
    FLD(resil_http_client_config, "deadline_propagation", deadline_propagation, F_BOOL),
    FLD(resil_http_client_config, "deadline_header", deadline_header, F_STR),
    /* Many instances of the upstream (http.h, "Many instances"; Since 0.2) */
    FLD(resil_http_client_config, "instances", instances, F_STRS),
    FLD(resil_http_client_config, "resolve_instances", resolve_instances, F_BOOL),
    FLD(resil_http_client_config, "resolve_interval", resolve_interval_ns, F_DUR),
    FEN(resil_http_client_config, "balance", balance, BALANCES),
    FLD(resil_http_client_config, "eject_consecutive", eject_consecutive, F_U32),
    FLD(resil_http_client_config, "eject_classes", eject_classes, F_CLASSES),
    FLD(resil_http_client_config, "eject_base", eject_base_ns, F_DUR),
    FLD(resil_http_client_config, "eject_max", eject_max_ns, F_DUR),
    FLD(resil_http_client_config, "eject_max_percent", eject_max_percent, F_PCT),
    /* An instance back from ejection ramps (http.h; DESIGN §2.9) */
    FLD(resil_http_client_config, "instance_ramp", instance_ramp_ns, F_DUR),
    FLD(resil_http_client_config, "instance_ramp_min_percent", instance_ramp_min_percent, F_PCT),
    FLD(resil_http_client_config, "instance_ramp_aggression", instance_ramp_aggression, F_DBL),
};

/* An endpoint's keys (its name is its key in `endpoints`); headers is a
 * list of "Name: value" strings, read apart. */
static const field EP_FIELDS[] = {
    FEN(resil_http_endpoint, "method", method, METHODS),
    FLD(resil_http_endpoint, "path", path, F_STR),
    FLD(resil_http_endpoint, "query", query, F_STR),
    FEN(resil_http_endpoint, "idempotent", idempotent, IDEMPOTENCY),
    FEN(resil_http_endpoint, "request_codec", request_codec, CODECS),
    FEN(resil_http_endpoint, "response_codec", response_codec, CODECS),
    FLD(resil_http_endpoint, "content_type", content_type, F_STR),
    FEN(resil_http_endpoint, "idempotency_key", idempotency_key, KEYS),
    FLD(resil_http_endpoint, "empty_is_error", empty_is_error, F_BOOL),
    FLD(resil_http_endpoint, "base_url", base_url, F_STR),
    FLD(resil_http_endpoint, "status_endpoint", status_endpoint, F_STR),
    FLD(resil_http_endpoint, "no_deadline_header", no_deadline_header, F_BOOL),
    FLD(resil_http_endpoint, "instances", instances, F_STRS),
    FLD(resil_http_endpoint, "resolve_instances", resolve_instances, F_BOOL),
};
#define NEPF (sizeof EP_FIELDS / sizeof *EP_FIELDS)
#define EP_MAX_HEADERS 32
#endif

#ifdef RESIL_CONFIG_STORE
/* The store's URI is not in its config struct: kept next to it. */
typedef struct store_cfg {
  resil_store_config sc;
  const char *uri;
  int check_only; /* RESIL_REGISTRY_NO_OPEN: resil_store_check, no handle */
} store_cfg;
static const field STORE_FIELDS[] = {
    FLD(store_cfg, "uri", uri, F_STR),
    {"busy_timeout", "busy_timeout_ns", F_DUR, offsetof(store_cfg, sc.busy_timeout_ns), NULL, 0},
    {"pool_size", "pool_size", F_U32, offsetof(store_cfg, sc.pool_size), NULL, 0},
    {"effects_in_store", "effects_in_store", F_BOOL, offsetof(store_cfg, sc.effects_in_store),
     NULL, 0},
};
#endif

/* Shared segments (section `shared`): the instance's name is the
 * segment's. Which kinds can be shared is said once, by the F_REF fields
 * `shared` (ref_kind RESIL_REG_SHARED) of their tables above. */
typedef struct seg_hook seg_hook;
typedef struct shared_cfg {
  resil_shared_config sc;
  int check_only;        /* RESIL_REGISTRY_NO_OPEN: the config checked, nothing opened */
  resil__reg_events *ev; /* where fallback lines go (NULL: nowhere) */
  seg_hook *hook;        /* out: made by new_shared, then the entry's */
} shared_cfg;
static const field SHARED_FIELDS[] = {
    {"dir", "dir", F_STR, offsetof(shared_cfg, sc.dir), NULL, 0},
    {"capacity", "capacity", F_U32, offsetof(shared_cfg, sc.capacity), NULL, 0},
    {"mode", "mode", F_OCT, offsetof(shared_cfg, sc.mode), NULL, 0},
    {"required", "required", F_BOOL, offsetof(shared_cfg, sc.required), NULL, 0},
};

/* The most fields of one kind (spec.src, the unknown key's candidates). */
#define MAXF 40
#define FITS(t) _Static_assert(sizeof t / sizeof *t <= MAXF, #t " has more than MAXF fields")
FITS(BREAKER_FIELDS);
FITS(RETRY_FIELDS);
FITS(RATELIMITER_FIELDS);
FITS(BULKHEAD_FIELDS);
FITS(TIMELIMITER_FIELDS);
FITS(HEDGE_FIELDS);
FITS(BUDGET_FIELDS);
FITS(THREADPOOL_FIELDS);
FITS(CHAIN_FIELDS);
FITS(SHARED_FIELDS);
#ifdef RESIL_CONFIG_HTTP
FITS(HTTP_FIELDS);
#endif
#ifdef RESIL_CONFIG_STORE
FITS(STORE_FIELDS);
#endif
#undef FITS

typedef union anycfg {
  size_t struct_size;
  resil_breaker_config br;
  resil_retry_config rt;
  rl_cfg rl;
  resil_bulkhead_config bh;
  resil_timelimiter_config tl;
  resil_hedge_config hg;
  resil_chain_config ch;
  resil_retry_budget_config rb;
  resil_threadpool_config tp;
  shared_cfg sh;
#ifdef RESIL_CONFIG_HTTP
  resil_http_client_config hc;
#endif
#ifdef RESIL_CONFIG_STORE
  store_cfg st;
#endif
} anycfg;

static void init_br(anycfg *c) { resil_breaker_config_init(&c->br); }
static void init_rt(anycfg *c) { resil_retry_config_init(&c->rt); }
static void init_rl(anycfg *c) {
  memset(&c->rl, 0, sizeof c->rl);
  resil_ratelimiter_config_init(&c->rl.rl);
  c->rl.failure = -1;
  c->rl.burst = -1;
  c->rl.expected_instances = -1;
  c->rl.redis_timeout_ns = -1;
}
static void init_bh(anycfg *c) { resil_bulkhead_config_init(&c->bh); }
static void init_tl(anycfg *c) { resil_timelimiter_config_init(&c->tl); }
static void init_hg(anycfg *c) { resil_hedge_config_init(&c->hg); }
static void init_ch(anycfg *c) { resil_chain_config_init(&c->ch); }
static void init_rb(anycfg *c) { resil_retry_budget_config_init(&c->rb); }
static void init_tp(anycfg *c) { resil_threadpool_config_init(&c->tp); }
static resil_status new_rb(anycfg *c, const char *name, void **o, resil_error *e) {
  c->rb.name = name;
  return resil_retry_budget_new(&c->rb, (resil_retry_budget **)o, e);
}
static resil_status new_tp(anycfg *c, const char *name, void **o, resil_error *e) {
  c->tp.name = name;
  return resil_threadpool_new(&c->tp, (resil_threadpool **)o, e);
}
static void free_rb(void *h) { resil_retry_budget_free(h); }
static void free_tp(void *h) { resil_threadpool_free(h); }

static resil_status new_br(anycfg *c, const char *name, void **o, resil_error *e) {
  c->br.name = name;
  return resil_breaker_new(&c->br, (resil_breaker **)o, e);
}
static resil_status new_rt(anycfg *c, const char *name, void **o, resil_error *e) {
  c->rt.name = name;
  return resil_retry_new(&c->rt, (resil_retry **)o, e);
}
static resil_status new_rl(anycfg *c, const char *name, void **o, resil_error *e) {
  rl_cfg *r = &c->rl;
  r->rl.name = name;
#ifdef RESIL_CONFIG_REDIS
  if (r->redis) {
    resil_redis_ratelimiter_config rc;
    resil_redis_ratelimiter_config_init(&rc);
    rc.name = name;
    rc.uri = r->redis;
    rc.limit_for_period = r->rl.limit_for_period;
    rc.refresh_period_ns = r->rl.refresh_period_ns;
    rc.timeout_ns = r->rl.timeout_ns;
    rc.shared = r->rl.shared;
    rc.clock = r->rl.clock;
    rc.alloc = r->rl.alloc;
    if (r->failure >= 0) rc.failure = (resil_redis_failure)(r->failure + 1);
    if (r->burst >= 0) rc.burst = r->burst;
    if (r->expected_instances >= 0) rc.expected_instances = r->expected_instances;
    if (r->redis_timeout_ns >= 0) rc.redis_timeout_ns = r->redis_timeout_ns;
    if (r->key_prefix) rc.key_prefix = r->key_prefix;
    /* The file is the truth (as for a shared segment's instances): a load
     * or reload that changed the rate takes the key over; processes still
     * on the old rate are refused until they reload. */
    rc.take_over_other_rate = 1;
    return resil_redis_ratelimiter_new(&rc, (resil_ratelimiter **)o, e);
  }
#endif
  /* The Redis keys mean nothing to a local limiter: refused, not ignored. */
  const char *set = r->failure >= 0 ? "failure"
                    : r->burst >= 0 ? "burst"
                    : r->expected_instances >= 0 ? "expected_instances"
                    : r->redis_timeout_ns >= 0 ? "redis_timeout_ns"
                    : r->key_prefix ? "key_prefix"
                                    : NULL;
  if (set)
    return resil__err(e, RESIL_EINVAL, set, "is a key of a rate limiter on Redis: set `redis` too");
  return resil_ratelimiter_new(&r->rl, (resil_ratelimiter **)o, e);
}
static resil_status new_bh(anycfg *c, const char *name, void **o, resil_error *e) {
  c->bh.name = name;
  return resil_bulkhead_new(&c->bh, (resil_bulkhead **)o, e);
}
static resil_status new_tl(anycfg *c, const char *name, void **o, resil_error *e) {
  c->tl.name = name;
  return resil_timelimiter_new(&c->tl, (resil_timelimiter **)o, e);
}
static resil_status new_hg(anycfg *c, const char *name, void **o, resil_error *e) {
  c->hg.name = name;
  return resil_hedge_new(&c->hg, (resil_hedge **)o, e);
}
static resil_status new_ch(anycfg *c, const char *name, void **o, resil_error *e) {
  c->ch.name = name;
  return resil_chain_new(&c->ch, (resil_chain **)o, e);
}
static void free_br(void *h) { resil_breaker_free(h); }
static void free_rt(void *h) { resil_retry_free(h); }
static void free_rl(void *h) { resil_ratelimiter_free(h); }
static void free_bh(void *h) { resil_bulkhead_free(h); }
static void free_tl(void *h) { resil_timelimiter_free(h); }
static void free_hg(void *h) { resil_hedge_free(h); }
static void free_ch(void *h) { resil_chain_free(h); }

struct spec;
static resil_status new_http(anycfg *c, const char *name, void **o, resil_error *e);
static resil_status new_store(anycfg *c, const char *name, void **o, resil_error *e);
static void free_http(void *h);
static void free_store(void *h);
static void init_http(anycfg *c);
static void init_store(anycfg *c);
static void init_sh(anycfg *c);
static resil_status new_sh(anycfg *c, const char *name, void **o, resil_error *e);
static void free_sh(void *h);

typedef struct kinddesc {
  const char *section;
  const field *fields;
  size_t nfields;
  void (*init)(anycfg *c);
  resil_status (*create)(anycfg *c, const char *name, void **out, resil_error *err);
  void (*destroy)(void *h);
  int available; /* 0: the library was built without the module */
  int check_configs; /* 1: a config is built on its own to check it */
} kinddesc;

#define KD(sec, f, i, n, d) {sec, f, sizeof f / sizeof *f, i, n, d, 1, 1}
#if !defined(RESIL_CONFIG_HTTP) || !defined(RESIL_CONFIG_STORE)
static const field NO_FIELDS[1] = {{"", "", F_U32, 0, NULL, 0}};
#endif
static const kinddesc KINDS[RESIL_REG_KIND_COUNT_] = {
    KD("circuitbreaker", BREAKER_FIELDS, init_br, new_br, free_br),
    KD("retry", RETRY_FIELDS, init_rt, new_rt, free_rt),
    KD("ratelimiter", RATELIMITER_FIELDS, init_rl, new_rl, free_rl),
    KD("bulkhead", BULKHEAD_FIELDS, init_bh, new_bh, free_bh),
    KD("timelimiter", TIMELIMITER_FIELDS, init_tl, new_tl, free_tl),
    KD("hedge", HEDGE_FIELDS, init_hg, new_hg, free_hg),
    KD("chain", CHAIN_FIELDS, init_ch, new_ch, free_ch),
#ifdef RESIL_CONFIG_HTTP
    {"http_client", HTTP_FIELDS, sizeof HTTP_FIELDS / sizeof *HTTP_FIELDS, init_http, new_http,
     free_http, 1, 0},
#else
    {"http_client", NO_FIELDS, 0, init_http, new_http, free_http, 0, 0},
#endif
#ifdef RESIL_CONFIG_STORE
    {"store", STORE_FIELDS, sizeof STORE_FIELDS / sizeof *STORE_FIELDS, init_store, new_store,
     free_store, 1, 0},
#else
    {"store", NO_FIELDS, 0, init_store, new_store, free_store, 0, 0},
#endif
    KD("retry_budget", BUDGET_FIELDS, init_rb, new_rb, free_rb),
    KD("threadpool", THREADPOOL_FIELDS, init_tp, new_tp, free_tp),
    /* configs are not checked on their own: that would open a segment */
    {"shared", SHARED_FIELDS, sizeof SHARED_FIELDS / sizeof *SHARED_FIELDS, init_sh, new_sh,
     free_sh, 1, 0},
};

/* A segment's fallback hook: writes a shared_fallback line through the
 * registry's event box, or keeps it (up to HOOK_PENDING) until a sink is
 * attached (a segment opened by the first load falls back before anyone
 * could attach one). */
enum { HOOK_PENDING = 8 };
struct seg_hook {
  pthread_mutex_t mu;
  resil__reg_events *ev; /* a reference, or NULL */
  char segment[RESIL_SHARED_NAME_MAX + 1];
  size_t npending;
  struct {
    int has_instance;
    char instance[RESIL_SHARED_NAME_MAX + 1];
    char reason[256];
  } pending[HOOK_PENDING];
};

static void hook_fallback(void *user, const char *instance, const resil_error *why) {
  seg_hook *h = user;
  if (!h->ev) return;
  pthread_mutex_lock(&h->mu);
  const char *reason = why ? why->msg : "";
  if (!resil__reg_events_fallback(h->ev, h->segment, instance, reason) &&
      h->npending < HOOK_PENDING) {
    size_t i = h->npending++;
    h->pending[i].has_instance = instance != NULL;
    snprintf(h->pending[i].instance, sizeof h->pending[i].instance, "%s",
             instance ? instance : "");
    snprintf(h->pending[i].reason, sizeof h->pending[i].reason, "%s", reason);
  }
  pthread_mutex_unlock(&h->mu);
}

/* Writes the kept lines once a sink is attached. */
static void hook_flush(seg_hook *h) {
  if (!h || !h->ev) return;
  pthread_mutex_lock(&h->mu);
  size_t i = 0;
  for (; i < h->npending; i++)
    if (!resil__reg_events_fallback(h->ev, h->segment,
                                    h->pending[i].has_instance ? h->pending[i].instance : NULL,
                                    h->pending[i].reason))
      break;
  if (i) {
    memmove(h->pending, h->pending + i, (h->npending - i) * sizeof h->pending[0]);
    h->npending -= i;
  }
  pthread_mutex_unlock(&h->mu);
}

static void hook_free(seg_hook *h) {
  if (!h) return;
  resil__reg_events_unref(h->ev);
  pthread_mutex_destroy(&h->mu);
  free(h);
}

static void init_sh(anycfg *c) {
  memset(&c->sh, 0, sizeof c->sh);
  resil_shared_config_init(&c->sh.sc);
  /* The file is the truth: a changed instance replaces the segment's
   * (for every process), an unchanged one attaches (shared.h). */
  c->sh.sc.replace_differing = 1;
}
static resil_status new_sh(anycfg *c, const char *name, void **o, resil_error *e) {
  *o = NULL;
  c->sh.hook = NULL;
  c->sh.sc.name = name;
  if (c->sh.check_only) return resil_shared_config_check(&c->sh.sc, e);
  seg_hook *h = calloc(1, sizeof *h);
  if (!h || pthread_mutex_init(&h->mu, NULL) != 0) {
    free(h);
    return resil__err(e, RESIL_ENOMEM, NULL, "out of memory");
  }
  snprintf(h->segment, sizeof h->segment, "%s", name);
  if (c->sh.ev) {
    resil__reg_events_ref(c->sh.ev);
    h->ev = c->sh.ev;
  }
  c->sh.sc.on_fallback = hook_fallback;
  c->sh.sc.user = h;
  resil_status st = resil_shared_open(&c->sh.sc, (resil_shared **)o, e);
  if (st != RESIL_OK) {
    hook_free(h);
    return st;
  }
  c->sh.hook = h;
  return RESIL_OK;
}
static void free_sh(void *h) { resil_shared_close(h); }

#ifdef RESIL_CONFIG_HTTP
static void init_http(anycfg *c) { resil_http_client_config_init(&c->hc); }
static resil_status new_http(anycfg *c, const char *name, void **o, resil_error *e) {
  c->hc.name = name; /* endpoints set by build() */
  return resil_http_client_new(&c->hc, (resil_http_client **)o, e);
}
static void free_http(void *h) { resil_http_client_free(h); }
#else
static void init_http(anycfg *c) { (void)c; }
static resil_status new_http(anycfg *c, const char *name, void **o, resil_error *e) {
  (void)c, (void)name, (void)o, (void)e;
  return RESIL_EINVAL;
}
static void free_http(void *h) { (void)h; }
#endif
#ifdef RESIL_CONFIG_STORE
static void init_store(anycfg *c) {
  resil_store_config_init(&c->st.sc);
  c->st.uri = NULL;
  c->st.check_only = 0;
}
static resil_status new_store(anycfg *c, const char *name, void **o, resil_error *e) {
  (void)name;
  if (c->st.check_only) {
    *o = NULL;
    return resil_store_check(c->st.uri, &c->st.sc, e);
  }
  return resil_store_open(c->st.uri, &c->st.sc, (resil_store **)o, e);
}
static void free_store(void *h) { resil_store_close(h); }
#else
static void init_store(anycfg *c) { (void)c; }
static resil_status new_store(anycfg *c, const char *name, void **o, resil_error *e) {
  (void)c, (void)name, (void)o, (void)e;
  return RESIL_EINVAL;
}
static void free_store(void *h) { (void)h; }
#endif

const char *resil_registry_kind_name(resil_registry_kind kind) {
  if ((unsigned)kind >= RESIL_REG_KIND_COUNT_) return NULL;
  return KINDS[kind].section;
}

/* ---- errors ----------------------------------------------------------------- */

void resil_registry_error_init_sized(resil_registry_error *err, size_t struct_size) {
  if (!err) return;
  resil_registry_error full;
  memset(&full, 0, sizeof full);
  full.struct_size = sizeof full;
  resil__sized_out(err, struct_size, &full, sizeof full);
}

size_t resil_registry_error_format(const resil_registry_error *e, char *buf, size_t size) {
  char tmp[1024];
  size_t n = 0;
  if (!e) {
    tmp[0] = 0;
  } else {
    int k = 0;
    if (e->file[0] && e->line)
      k = snprintf(tmp, sizeof tmp, "%s:%u:%u: ", e->file, (unsigned)e->line,
                   (unsigned)e->column);
    else if (e->file[0])
      k = snprintf(tmp, sizeof tmp, "%s: ", e->file);
    n = (size_t)(k > 0 ? k : 0);
    if (e->key_path[0])
      n += (size_t)snprintf(tmp + n, sizeof tmp - n, "%s: ", e->key_path);
    snprintf(tmp + n, sizeof tmp - n, "%s", e->message);
  }
  n = strlen(tmp);
  if (buf && size) snprintf(buf, size, "%s", tmp);
  return n;
}

/* Load context: the document and where the first error goes. */
typedef struct lctx {
  const char *file;
  resil__reg_events *ev; /* attempt listeners of retries and clients built */
  yaml_document_t *doc;
  size_t old_n; /* a reload: the instances the registry has now */
  uint32_t flags; /* RESIL_REGISTRY_NO_OPEN */
  void **allocs;  /* lctx_alloc's blocks, freed when the load ends */
  size_t nallocs, callocs;
  resil_registry_error err; /* full size; copied out at the end */
} lctx;

/* dst = a + sep + b, truncated to n bytes (paths are for messages). */
static void join(char *dst, size_t n, const char *a, const char *sep, const char *b) {
  if (snprintf(dst, n, "%s%s%s", a, sep, b) >= (int)n) dst[n - 1] = 0;
}

static yaml_node_t *node(lctx *c, int i) { return yaml_document_get_node(c->doc, i); }

RESIL_PRINTF(4, 5)
static resil_status fail_at(lctx *c, const yaml_node_t *n, const char *path, const char *fmt,
                            ...) {
  if (c->err.status != RESIL_OK) return RESIL_EINVAL; /* keep the first */
  c->err.status = RESIL_EINVAL;
  snprintf(c->err.file, sizeof c->err.file, "%s", c->file);
  if (n) {
    c->err.line = (uint32_t)n->start_mark.line + 1;
    c->err.column = (uint32_t)n->start_mark.column + 1;
  }
  snprintf(c->err.key_path, sizeof c->err.key_path, "%s", path ? path : "");
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(c->err.message, sizeof c->err.message, fmt, ap);
  va_end(ap);
  return RESIL_EINVAL;
}

static size_t edit_distance(const char *a, const char *b) {
  size_t la = strlen(a), lb = strlen(b);
  if (la > 63 || lb > 63) return 64;
  size_t d[64 + 1], prev;
  for (size_t j = 0; j <= lb; j++) d[j] = j;
  for (size_t i = 1; i <= la; i++) {
    prev = d[0];
    d[0] = i;
    for (size_t j = 1; j <= lb; j++) {
      size_t cur = d[j];
      size_t sub = prev + (a[i - 1] != b[j - 1]);
      size_t del = d[j] + 1, ins = d[j - 1] + 1;
      d[j] = sub < del ? (sub < ins ? sub : ins) : (del < ins ? del : ins);
      prev = cur;
    }
  }
  return d[lb];
}

/* The closest candidate, or NULL when none is close (distance at most a
 * third of the word's length, at least 2). */
static const char *suggest(const char *word, const char *const *cand, size_t n) {
  const char *best = NULL;
  size_t bd = (size_t)-1, lim = strlen(word) / 3;
  if (lim < 2) lim = 2;
  for (size_t i = 0; i < n; i++) {
    if (!cand[i]) continue;
    size_t d = edit_distance(word, cand[i]);
    if (d < bd) {
      bd = d;
      best = cand[i];
    }
  }
  return bd <= lim ? best : NULL;
}

static resil_status fail_unknown(lctx *c, const yaml_node_t *n, const char *path,
                                 const char *what, const char *word,
                                 const char *const *cand, size_t ncand) {
  const char *s = suggest(word, cand, ncand);
  if (s) return fail_at(c, n, path, "unknown %s '%s' (did you mean '%s'?)", what, word, s);
  char list[200] = "";
  size_t k = 0;
  for (size_t i = 0; i < ncand; i++) {
    if (!cand[i]) continue;
    size_t need = (k ? 2 : 0) + strlen(cand[i]);
    if (k + need + 5 >= sizeof list) { /* whole names only, then ", ..." */
      snprintf(list + k, sizeof list - k, "%s...", k ? ", " : "");
      break;
    }
    k += (size_t)snprintf(list + k, sizeof list - k, "%s%s", k ? ", " : "", cand[i]);
  }
  return fail_at(c, n, path, "unknown %s '%s' (expected one of: %s)", what, word, list);
}

/* ---- YAML helpers --------------------------------------------------------------- */

static const char *scalar(const yaml_node_t *n) {
  return n && n->type == YAML_SCALAR_NODE ? (const char *)n->data.scalar.value : NULL;
}

/* A scalar that means "nothing": an empty value, ~ or null (plain only). */
static int is_null(const yaml_node_t *n) {
  const char *s = scalar(n);
  if (!s || n->data.scalar.style != YAML_PLAIN_SCALAR_STYLE) return 0;
  return !*s || strcmp(s, "~") == 0 || strcmp(s, "null") == 0;
}

static const char *node_type_name(const yaml_node_t *n) {
  switch (n->type) {
  case YAML_SCALAR_NODE: return "a scalar";
  case YAML_SEQUENCE_NODE: return "a sequence";
  case YAML_MAPPING_NODE: return "a mapping";
  default: return "nothing";
  }
}

/* A mapping's keys sorted (by key, then by position): the duplicate check
 * and the lookups of big mappings (configs by name) in O(n log n), never
 * O(n^2), whatever the keys (a sort has no worst case a file can choose,
 * which a fixed hash would have). */
typedef struct keyent {
  const char *key;
  size_t pos;
  yaml_node_pair_t *pair;
} keyent;

static int cmp_keyent(const void *a, const void *b) {
  const keyent *x = a, *y = b;
  int r = strcmp(x->key, y->key);
  if (r) return r;
  return x->pos < y->pos ? -1 : x->pos > y->pos;
}

static resil_status oom(lctx *c);

/* n bytes that live until the load ends (freed by load()); NULL out of
 * memory (reported). */
static void *lctx_alloc(lctx *c, size_t n) {
  if (c->nallocs == c->callocs) {
    size_t nc = c->callocs ? 2 * c->callocs : 8;
    void **nv = realloc(c->allocs, nc * sizeof *nv);
    if (!nv) {
      oom(c);
      return NULL;
    }
    c->allocs = nv;
    c->callocs = nc;
  }
  void *p = malloc(n ? n : 1);
  if (!p) {
    oom(c);
    return NULL;
  }
  c->allocs[c->nallocs++] = p;
  return p;
}

/* Checks that n is a mapping (or null: an empty one) with scalar keys and no
 * duplicate key; the first fault in file order is reported. With idx, the
 * sorted keys are left there (free them; NULL for an empty mapping). */
static resil_status check_mapping_idx(lctx *c, yaml_node_t *n, const char *path, keyent **idx,
                                      size_t *nidx) {
  if (idx) *idx = NULL;
  if (nidx) *nidx = 0;
  if (is_null(n)) return RESIL_OK;
  if (n->type != YAML_MAPPING_NODE)
    return fail_at(c, n, path, "expected a mapping, got %s", node_type_name(n));
  yaml_node_pair_t *ps = n->data.mapping.pairs.start;
  size_t np = (size_t)(n->data.mapping.pairs.top - ps);
  size_t bad = np; /* the first key that is not a scalar */
  for (size_t i = 0; i < np && bad == np; i++)
    if (!scalar(node(c, ps[i].key))) bad = i;
  if (np < 2 && bad == np) return RESIL_OK;
  keyent *v = malloc((np ? np : 1) * sizeof *v);
  if (!v) return oom(c);
  size_t nv = 0;
  for (size_t i = 0; i < bad; i++) v[nv++] = (keyent){scalar(node(c, ps[i].key)), i, &ps[i]};
  qsort(v, nv, sizeof *v, cmp_keyent);
  /* The duplicate that comes first in the file, and its first occurrence. */
  size_t dup = np, first = 0;
  for (size_t i = 1; i < nv; i++)
    if (strcmp(v[i - 1].key, v[i].key) == 0 && v[i].pos < dup &&
        (i < 2 || strcmp(v[i - 2].key, v[i].key) != 0)) {
      dup = v[i].pos;
      first = v[i - 1].pos;
    }
  resil_status st = RESIL_OK;
  if (dup < bad) {
    yaml_node_t *k = node(c, ps[dup].key);
    char sub[256];
    join(sub, sizeof sub, path, *path ? "." : "", scalar(k));
    st = fail_at(c, k, sub, "duplicate key (first at line %u)",
                 (unsigned)node(c, ps[first].key)->start_mark.line + 1);
  } else if (bad < np) {
    st = fail_at(c, node(c, ps[bad].key), path, "keys must be scalars");
  }
  if (st == RESIL_OK && idx) {
    *idx = v;
    *nidx = nv;
  } else {
    free(v);
  }
  return st;
}

static resil_status check_mapping(lctx *c, yaml_node_t *n, const char *path) {
  return check_mapping_idx(c, n, path, NULL, NULL);
}

/* The value of key in a mapping indexed by check_mapping_idx. */
static yaml_node_t *idx_get(lctx *c, const keyent *idx, size_t n, const char *key) {
  size_t lo = 0, hi = n;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    int r = strcmp(key, idx[mid].key);
    if (r == 0) return node(c, idx[mid].pair->value);
    if (r < 0)
      hi = mid;
    else
      lo = mid + 1;
  }
  return NULL;
}

#define FOR_PAIRS(c, n, p)                                                             \
  for (yaml_node_pair_t *p = (n)->type == YAML_MAPPING_NODE ? (n)->data.mapping.pairs.start \
                                                          : NULL;                   \
       p && p < (n)->data.mapping.pairs.top; p++)

static yaml_node_t *map_get(lctx *c, yaml_node_t *m, const char *key) {
  FOR_PAIRS(c, m, p) {
    if (strcmp(scalar(node(c, p->key)), key) == 0) return node(c, p->value);
  }
  return NULL;
}

/* ---- values ----------------------------------------------------------------------- */

/* The decimal number s[0..len), nothing else, at most max. */
static int parse_u64(const char *s, size_t len, uint64_t max, uint64_t *out) {
  if (!s || len == 0) return -1;
  uint64_t v = 0;
  for (size_t i = 0; i < len; i++) {
    if (!isdigit((unsigned char)s[i]) || v > (UINT64_MAX - 9) / 10) return -1;
    v = v * 10 + (uint64_t)(s[i] - '0');
  }
  if (v > max) return -1;
  *out = v;
  return 0;
}

static int class_of(const char *s) {
  for (int i = 0; i < RESIL_CLASS_COUNT_; i++)
    if (strcasecmp(s, resil_outcome_class_name((resil_outcome_class)i)) == 0) return i;
  return -1;
}

/* Parses v into the field f of cfg; errors at v with path. */
static resil_status parse_value(lctx *c, const field *f, yaml_node_t *v, const char *path,
                                anycfg *cfg) {
  unsigned char *dst = (unsigned char *)cfg + f->off;
  const char *s = scalar(v);
  if (f->type == F_CLASSES) {
    if (v->type != YAML_SEQUENCE_NODE)
      return fail_at(c, v, path,
                     "expected a list of outcome classes such as [server_error, "
                     "not_sent, unknown], got %s",
                     node_type_name(v));
    /* A mask has RESIL_CLASS_COUNT_ classes; a longer list repeats some. A
     * bound, too: a config or an anchor applied to every instance would
     * otherwise walk a list of 65,536 items once per instance. */
    if (v->data.sequence.items.top - v->data.sequence.items.start > 4 * RESIL_CLASS_COUNT_)
      return fail_at(c, v, path, "at most %d outcome classes in a list",
                     4 * RESIL_CLASS_COUNT_);
    uint32_t mask = 0;
    for (yaml_node_item_t *it = v->data.sequence.items.start; it < v->data.sequence.items.top;
         it++) {
      yaml_node_t *e = node(c, *it);
      int k = scalar(e) ? class_of(scalar(e)) : -1;
      if (k < 0) {
        const char *names[RESIL_CLASS_COUNT_];
        char low[RESIL_CLASS_COUNT_][24];
        for (int i = 0; i < RESIL_CLASS_COUNT_; i++) {
          snprintf(low[i], sizeof low[i], "%s", resil_outcome_class_name((resil_outcome_class)i));
          for (char *q = low[i]; *q; q++) *q = (char)tolower((unsigned char)*q);
          names[i] = low[i];
        }
        char w[64];
        snprintf(w, sizeof w, "%s", scalar(e) ? scalar(e) : "?");
        for (char *q = w; *q; q++) *q = (char)tolower((unsigned char)*q);
        return fail_unknown(c, e, path, "outcome class", w, names, RESIL_CLASS_COUNT_);
      }
      mask |= RESIL_CLASS_BIT(k);
    }
    memcpy(dst, &mask, sizeof mask);
    return RESIL_OK;
  }
  if (f->type == F_STR && s && !is_null(v)) {
    memcpy(dst, &s, sizeof s);
    return RESIL_OK;
  }
  if (f->type == F_STRS) {
    /* The only such keys are lists of base URLs (`instances`). */
    if (v->type != YAML_SEQUENCE_NODE)
      return fail_at(c, v, path,
                     "expected a list of base URLs such as [\"http://10.0.0.1:8080\", "
                     "\"http://10.0.0.2:8080\"], got %s",
                     node_type_name(v));
    size_t n = (size_t)(v->data.sequence.items.top - v->data.sequence.items.start);
    /* A bound before the copy, as for classes: a list in a config or an
     * anchor is copied and walked once per instance that takes it, and the
     * client checks the count (1..64) only after. 4 x 64 leaves the exact
     * error to the client for any list a person could mean. */
    if (n > 4 * 64)
      return fail_at(c, v, path,
                     "at most %d base URLs in a list (an upstream has at most 64 instances), "
                     "got %zu",
                     4 * 64, n);
    const char **list = lctx_alloc(c, (n + 1) * sizeof *list);
    if (!list) return RESIL_ENOMEM;
    for (size_t i = 0; i < n; i++) {
      yaml_node_t *e = node(c, v->data.sequence.items.start[i]);
      if (!scalar(e) || is_null(e))
        return fail_at(c, e, path, "item %zu: expected a base URL, got %s", i,
                       scalar(e) ? "nothing" : node_type_name(e));
      list[i] = scalar(e);
    }
    list[n] = NULL;
    memcpy(dst, &list, sizeof list);
    return RESIL_OK;
  }
  if (!s || (is_null(v) && f->type != F_ENUM))
    return fail_at(c, v, path, "expected a value, got %s",
                   s ? "nothing" : node_type_name(v));
  char why[160];
  switch (f->type) {
  case F_U32:
  case F_PCT: {
    /* Read whole: a copy into a fixed buffer cut a long value short. */
    size_t l = strlen(s);
    if (f->type == F_PCT && l && s[l - 1] == '%') l--;
    uint64_t x;
    if (parse_u64(s, l, UINT32_MAX, &x))
      return fail_at(c, v, path, "expected a whole number 0..4294967295%s, got '%s'",
                     f->type == F_PCT ? " (percent)" : "", s);
    uint32_t u = (uint32_t)x;
    memcpy(dst, &u, sizeof u);
    return RESIL_OK;
  }
  case F_I64: {
    char *end;
    errno = 0;
    long long x = strtoll(s, &end, 10);
    if (errno || end == s || *end)
      return fail_at(c, v, path, "expected a whole number, got '%s'", s);
    int64_t i = (int64_t)x;
    memcpy(dst, &i, sizeof i);
    return RESIL_OK;
  }
  case F_DUR: {
    int64_t ns;
    if (resil_parse_duration(s, &ns, why, sizeof why))
      return fail_at(c, v, path, "%s", why);
    memcpy(dst, &ns, sizeof ns);
    return RESIL_OK;
  }
  case F_DBL: {
    char *end;
    errno = 0;
    double d = strtod(s, &end);
    if (errno == ERANGE && end != s && !*end)
      return fail_at(c, v, path,
                     "'%s' is out of a number's range (a double: magnitudes from about "
                     "2.2e-308 to 1.8e308)",
                     s);
    if (errno || end == s || *end || d != d)
      return fail_at(c, v, path, "expected a number, got '%s'", s);
    memcpy(dst, &d, sizeof d);
    return RESIL_OK;
  }
  case F_BOOL: {
    int b;
    if (strcmp(s, "true") == 0 || strcmp(s, "True") == 0 || strcmp(s, "TRUE") == 0)
      b = 1;
    else if (strcmp(s, "false") == 0 || strcmp(s, "False") == 0 || strcmp(s, "FALSE") == 0)
      b = 0;
    else
      return fail_at(c, v, path, "expected true or false, got '%s'", s);
    memcpy(dst, &b, sizeof b);
    return RESIL_OK;
  }
  case F_ENUM: {
    size_t n = 0;
    while (f->names[n]) n++;
    for (size_t i = 0; i < n; i++)
      if (strcmp(s, f->names[i]) == 0) {
        int e = (int)i;
        memcpy(dst, &e, sizeof e);
        return RESIL_OK;
      }
    return fail_unknown(c, v, path, "value", s, f->names, n);
  }
  case F_SIZE: {
    uint64_t b;
    if (resil_parse_size(s, &b, why, sizeof why)) return fail_at(c, v, path, "%s", why);
    if (b > (uint64_t)SIZE_MAX) return fail_at(c, v, path, "'%s' is too large", s);
    size_t z = (size_t)b;
    memcpy(dst, &z, sizeof z);
    return RESIL_OK;
  }
  case F_OCT: {
    uint64_t x = 0;
    const char *q = s;
    for (; *q >= '0' && *q <= '7' && x <= 0777777; q++) x = x * 8 + (uint64_t)(*q - '0');
    if (q == s || *q || x > 0777777)
      return fail_at(c, v, path, "expected permission bits in octal such as 0600, got '%s'", s);
    uint32_t u = (uint32_t)x;
    memcpy(dst, &u, sizeof u);
    return RESIL_OK;
  }
  case F_CLASSES:
  case F_STR:
  case F_REF:
  case F_STRS:
    break;
  }
  return RESIL_EINVAL;
}

/* ---- fingerprints: the resolved settings as bytes ------------------------------
 * Equal fingerprints, equal settings, and the reverse: every string is
 * written with its length before it ("S12:sqlite:/a.db"), so no value can
 * pass for another or for the text around it, and nothing is cut. */

typedef struct fpbuf {
  char *p;
  size_t len, cap;
  int oom;
} fpbuf;

static void fp_put(fpbuf *b, const char *s, size_t n) {
  if (b->oom) return;
  if (b->cap - b->len < n + 1) {
    size_t nc = b->cap ? b->cap : 1024;
    while (nc - b->len < n + 1) {
      if (nc > SIZE_MAX / 2) {
        b->oom = 1;
        return;
      }
      nc *= 2;
    }
    char *np = realloc(b->p, nc);
    if (!np) {
      b->oom = 1;
      return;
    }
    b->p = np;
    b->cap = nc;
  }
  memcpy(b->p + b->len, s, n);
  b->len += n;
  b->p[b->len] = 0;
}

RESIL_PRINTF(2, 3)
static void fp_fmt(fpbuf *b, const char *fmt, ...) {
  char tmp[128]; /* numbers and pointers only */
  va_list ap;
  va_start(ap, fmt);
  int k = vsnprintf(tmp, sizeof tmp, fmt, ap);
  va_end(ap);
  if (k < 0 || (size_t)k >= sizeof tmp) {
    b->oom = 1; /* never: the callers print numbers */
    return;
  }
  fp_put(b, tmp, (size_t)k);
}

/* A string: "S<len>:<bytes>", or "N" for NULL. */
static void fp_str(fpbuf *b, const char *s) {
  if (!s) {
    fp_put(b, "N", 1);
    return;
  }
  size_t n = strlen(s);
  fp_fmt(b, "S%zu:", n);
  fp_put(b, s, n);
}

/* "key=<value>;" for field f of cfg. */
static void fp_field(fpbuf *b, const field *f, const anycfg *cfg) {
  const unsigned char *src = (const unsigned char *)cfg + f->off;
  fp_put(b, f->key, strlen(f->key));
  fp_put(b, "=", 1);
  switch (f->type) {
  case F_U32:
  case F_PCT:
  case F_OCT:
  case F_CLASSES: {
    uint32_t u;
    memcpy(&u, src, sizeof u);
    fp_fmt(b, "%u", (unsigned)u);
    break;
  }
  case F_I64:
  case F_DUR: {
    int64_t i;
    memcpy(&i, src, sizeof i);
    fp_fmt(b, "%lld", (long long)i);
    break;
  }
  case F_DBL: {
    double d;
    memcpy(&d, src, sizeof d);
    fp_fmt(b, "%.17g", d);
    break;
  }
  case F_BOOL:
  case F_ENUM: {
    int e;
    memcpy(&e, src, sizeof e);
    fp_fmt(b, "%d", e);
    break;
  }
  case F_STR: {
    const char *p;
    memcpy(&p, src, sizeof p);
    fp_str(b, p);
    break;
  }
  case F_SIZE: {
    size_t z;
    memcpy(&z, src, sizeof z);
    fp_fmt(b, "%zu", z);
    break;
  }
  case F_STRS: {
    /* "L<count>:" then each string as fp_str writes it; N for NULL */
    const char *const *l;
    memcpy(&l, src, sizeof l);
    if (!l) {
      fp_put(b, "N", 1);
      break;
    }
    size_t n = 0;
    while (l[n]) n++;
    fp_fmt(b, "L%zu:", n);
    for (size_t i = 0; i < n; i++) fp_str(b, l[i]);
    break;
  }
  case F_REF: {
    /* the object itself: a kept reference keeps the referrer */
    void *p;
    memcpy(&p, src, sizeof p);
    fp_fmt(b, "%p", p);
    break;
  }
  }
  fp_put(b, ";", 1);
}

/* ---- specs: what the file says, resolved ------------------------------------------ */

enum { SRC_NONE = 0, SRC_DEFAULT, SRC_BASE, SRC_INSTANCE };

typedef struct layer_ref {
  resil_registry_kind kind;
  const char *name;
  yaml_node_t *node;
  char path[256];
} layer_ref;

typedef struct entry entry;

typedef struct spec {
  resil_registry_kind kind;
  const char *name;     /* in the document */
  yaml_node_t *at;      /* the instance's name node */
  char path[256];       /* "circuitbreaker.instances.payments" or ".configs.X" */
  char base_path[256];  /* the base config's path */
  char def_path[256];   /* the default config's path */
  int is_config;        /* a config checked on its own (not an instance) */
  anycfg cfg;
  uint8_t src[MAXF];
  yaml_node_t *src_node[MAXF];
  const char *ref_name[MAXF]; /* F_REF fields: the name given */
  layer_ref *layers; /* chains: RESIL_CHAIN_MAX_LAYERS of them (the rest is small) */
  size_t nlayers;
#ifdef RESIL_CONFIG_HTTP
  struct ep_spec *eps; /* http_client: its endpoints, in file order */
  size_t neps;
#endif
  entry *made;
} spec;

#ifdef RESIL_CONFIG_HTTP
typedef struct ep_spec {
  resil_http_endpoint ep;
  const char *headers[EP_MAX_HEADERS + 1];
  yaml_node_t *at;
  char path[256];
  yaml_node_t *src_node[NEPF];
  yaml_node_t *headers_node;
} ep_spec;
#endif

/* Applies the keys of mapping m (the instance's or a config's) onto s. */
static resil_status apply_map(lctx *c, spec *s, yaml_node_t *m, const char *path, int src,
                              int instance_level) {
  const kinddesc *kd = &KINDS[s->kind];
  if (check_mapping(c, m, path)) return RESIL_EINVAL;
  FOR_PAIRS(c, m, p) {
    yaml_node_t *k = node(c, p->key), *v = node(c, p->value);
    const char *key = scalar(k);
    char sub[256];
    join(sub, sizeof sub, path, ".", key);
    if (instance_level && strcmp(key, "base_config") == 0) continue; /* resolved before */
    if (s->kind == RESIL_REG_CHAIN && strcmp(key, "layers") == 0) {
      if (!instance_level) return fail_at(c, k, sub, "layers belong to chain instances, not configs");
      continue; /* read by read_layers */
    }
    if (s->kind == RESIL_REG_HTTP_CLIENT && strcmp(key, "endpoints") == 0) {
      if (!instance_level)
        return fail_at(c, k, sub, "endpoints belong to http_client instances, not configs");
      continue; /* read by read_endpoints */
    }
    size_t fi = kd->nfields;
    for (size_t i = 0; i < kd->nfields; i++)
      if (strcmp(kd->fields[i].key, key) == 0) fi = i;
    if (fi == kd->nfields && strcmp(key, "shared") == 0) {
      /* The kinds that can be: those with a `shared` reference field. */
      char list[160] = "";
      size_t len = 0;
      for (int j = 0; j < RESIL_REG_KIND_COUNT_; j++)
        for (size_t i = 0; i < KINDS[j].nfields; i++)
          if (KINDS[j].fields[i].type == F_REF && KINDS[j].fields[i].ref_kind == RESIL_REG_SHARED &&
              len < sizeof list)
            len += (size_t)snprintf(list + len, sizeof list - len, "%s%s", len ? ", " : "",
                                    KINDS[j].section);
      return fail_at(c, k, sub, "%s instances cannot be shared (shared state exists for %s)",
                     KINDS[s->kind].section, list);
    }
    if (fi == kd->nfields) {
      const char *cand[MAXF + 2];
      size_t nc = 0;
      for (size_t i = 0; i < kd->nfields; i++) cand[nc++] = kd->fields[i].key;
      if (instance_level) cand[nc++] = "base_config";
      if (s->kind == RESIL_REG_CHAIN && instance_level) cand[nc++] = "layers";
      if (s->kind == RESIL_REG_HTTP_CLIENT && instance_level) cand[nc++] = "endpoints";
      return fail_unknown(c, k, sub, "key", key, cand, nc);
    }
    if (kd->fields[fi].type == F_REF) {
      if (!scalar(v) || is_null(v))
        return fail_at(c, v, sub, "expected the name of a %s instance",
                       KINDS[kd->fields[fi].ref_kind].section);
      s->ref_name[fi] = scalar(v);
    } else if (parse_value(c, &kd->fields[fi], v, sub, &s->cfg)) {
      return RESIL_EINVAL;
    }
    s->src[fi] = (uint8_t)src;
    s->src_node[fi] = v;
#ifdef RESIL_CONFIG_HTTP
    /* A client's upstream is base_url or instances (registry.h: "instead
     * of"): one given here replaces the other inherited from a config;
     * both in one mapping stay the client's error. */
    if (s->kind == RESIL_REG_HTTP_CLIENT &&
        (strcmp(key, "base_url") == 0 || strcmp(key, "instances") == 0)) {
      const char *other = key[0] == 'b' ? "instances" : "base_url";
      for (size_t i = 0; i < kd->nfields; i++)
        if (strcmp(kd->fields[i].key, other) == 0 && s->src[i] != SRC_NONE && s->src[i] < src) {
          const char *none = NULL;
          memcpy((unsigned char *)&s->cfg + kd->fields[i].off, &none, sizeof none);
          s->src[i] = SRC_NONE;
          s->src_node[i] = NULL;
        }
    }
#endif
  }
  return RESIL_OK;
}

static resil_status read_layers(lctx *c, spec *s, yaml_node_t *inst) {
  yaml_node_t *ls = map_get(c, inst, "layers");
  char path[256];
  join(path, sizeof path, s->path, ".", "layers");
  if (!ls) return fail_at(c, s->at, path, "a chain needs layers (a list of KIND: NAME, outermost first)");
  if (ls->type != YAML_SEQUENCE_NODE)
    return fail_at(c, ls, path, "expected a list of KIND: NAME, got %s", node_type_name(ls));
  s->layers = calloc(RESIL_CHAIN_MAX_LAYERS, sizeof *s->layers);
  if (!s->layers) return oom(c);
  size_t i = 0;
  for (yaml_node_item_t *it = ls->data.sequence.items.start; it < ls->data.sequence.items.top;
       it++, i++) {
    yaml_node_t *e = node(c, *it);
    char ip[256];
    char ix[24];
    snprintf(ix, sizeof ix, "[%zu]", i);
    join(ip, sizeof ip, path, "", ix);
    if (i >= RESIL_CHAIN_MAX_LAYERS)
      return fail_at(c, e, ip, "at most %d layers", RESIL_CHAIN_MAX_LAYERS);
    if (e->type != YAML_MAPPING_NODE ||
        e->data.mapping.pairs.top - e->data.mapping.pairs.start != 1)
      return fail_at(c, e, ip, "expected one KIND: NAME pair, such as 'retry: payments'");
    yaml_node_t *k = node(c, e->data.mapping.pairs.start->key);
    yaml_node_t *v = node(c, e->data.mapping.pairs.start->value);
    const char *kn = scalar(k);
    static const resil_registry_kind LAYER_KINDS[] = {
        RESIL_REG_RETRY,       RESIL_REG_BREAKER,  RESIL_REG_RATELIMITER, RESIL_REG_TIMELIMITER,
        RESIL_REG_BULKHEAD,    RESIL_REG_HEDGE,    RESIL_REG_THREADPOOL};
    enum { NLK = sizeof LAYER_KINDS / sizeof *LAYER_KINDS };
    int kind = -1;
    for (size_t j = 0; j < NLK; j++)
      if (kn && strcmp(kn, KINDS[LAYER_KINDS[j]].section) == 0) kind = (int)LAYER_KINDS[j];
    if (kind < 0) {
      const char *cand[NLK];
      for (size_t j = 0; j < NLK; j++) cand[j] = KINDS[LAYER_KINDS[j]].section;
      return fail_unknown(c, k, ip, "layer kind", kn ? kn : "?", cand, NLK);
    }
    if (!scalar(v) || is_null(v))
      return fail_at(c, v, ip, "expected the name of a %s instance", kn);
    layer_ref *l = &s->layers[s->nlayers++];
    l->kind = (resil_registry_kind)kind;
    l->name = scalar(v);
    l->node = v;
    snprintf(l->path, sizeof l->path, "%s", ip);
  }
  if (i == 0) return fail_at(c, ls, path, "a chain needs at least one layer");
  return RESIL_OK;
}

#ifdef RESIL_CONFIG_HTTP
/* An http_client's `endpoints: {NAME: {method: POST, path: /x, ...}}`. */
static resil_status read_endpoints(lctx *c, spec *s, yaml_node_t *inst) {
  yaml_node_t *m = is_null(inst) ? NULL : map_get(c, inst, "endpoints");
  char path[256];
  join(path, sizeof path, s->path, ".", "endpoints");
  if (!m) return fail_at(c, s->at, path, "an http_client needs endpoints (NAME: {path: /...})");
  if (check_mapping(c, m, path)) return RESIL_EINVAL;
  size_t n = is_null(m) ? 0 : (size_t)(m->data.mapping.pairs.top - m->data.mapping.pairs.start);
  if (n == 0) return fail_at(c, m, path, "an http_client needs at least one endpoint");
  s->eps = calloc(n, sizeof *s->eps);
  if (!s->eps) return oom(c);
  FOR_PAIRS(c, m, p) {
    ep_spec *e = &s->eps[s->neps++];
    e->ep.struct_size = sizeof e->ep;
    e->at = node(c, p->key);
    e->ep.name = scalar(e->at);
    join(e->path, sizeof e->path, path, ".", e->ep.name);
    yaml_node_t *body = node(c, p->value);
    if (check_mapping(c, body, e->path)) return RESIL_EINVAL;
    FOR_PAIRS(c, body, q) {
      yaml_node_t *k = node(c, q->key), *v = node(c, q->value);
      const char *key = scalar(k);
      char sub[256];
      join(sub, sizeof sub, e->path, ".", key);
      if (strcmp(key, "headers") == 0) {
        if (v->type != YAML_SEQUENCE_NODE)
          return fail_at(c, v, sub, "expected a list of 'Name: value' strings, got %s",
                         node_type_name(v));
        size_t h = 0;
        for (yaml_node_item_t *it = v->data.sequence.items.start;
             it < v->data.sequence.items.top; it++) {
          yaml_node_t *hv = node(c, *it);
          if (!scalar(hv)) return fail_at(c, hv, sub, "expected a 'Name: value' string");
          if (h == EP_MAX_HEADERS) return fail_at(c, hv, sub, "at most %d headers", EP_MAX_HEADERS);
          e->headers[h++] = scalar(hv);
        }
        e->headers[h] = NULL;
        e->ep.headers = e->headers;
        e->headers_node = v;
        continue;
      }
      size_t fi = NEPF;
      for (size_t i = 0; i < NEPF; i++)
        if (strcmp(EP_FIELDS[i].key, key) == 0) fi = i;
      if (fi == NEPF) {
        const char *cand[NEPF + 1];
        for (size_t i = 0; i < NEPF; i++) cand[i] = EP_FIELDS[i].key;
        cand[NEPF] = "headers";
        return fail_unknown(c, k, sub, "key", key, cand, NEPF + 1);
      }
      if (parse_value(c, &EP_FIELDS[fi], v, sub, (anycfg *)(void *)&e->ep)) return RESIL_EINVAL;
      e->src_node[fi] = v;
    }
  }
  return RESIL_OK;
}

/* The endpoints' settings, for the fingerprint: each endpoint's name, its
 * fields and its headers, every string length-prefixed, the header count
 * first. */
static void fingerprint_endpoints(const spec *s, fpbuf *b) {
  for (size_t i = 0; i < s->neps; i++) {
    const ep_spec *e = &s->eps[i];
    fp_put(b, "E", 1);
    fp_str(b, e->ep.name);
    fp_put(b, "{", 1);
    for (size_t f = 0; f < NEPF; f++)
      fp_field(b, &EP_FIELDS[f], (const anycfg *)(const void *)&e->ep);
    size_t nh = 0;
    while (e->ep.headers && e->ep.headers[nh]) nh++;
    fp_fmt(b, "H%zu:", nh);
    for (size_t h = 0; h < nh; h++) fp_str(b, e->ep.headers[h]);
    fp_put(b, "}", 1);
  }
}
#endif

typedef struct specs {
  spec *v;
  size_t n, cap;
} specs;

static spec *spec_add(specs *ss) {
  if (ss->n == ss->cap) {
    size_t nc = ss->cap ? ss->cap * 2 : 16;
    spec *nv = realloc(ss->v, nc * sizeof *nv);
    if (!nv) return NULL;
    ss->v = nv;
    ss->cap = nc;
  }
  spec *s = &ss->v[ss->n++];
  memset(s, 0, sizeof *s);
  return s;
}

static resil_status oom(lctx *c) {
  if (c->err.status == RESIL_OK) {
    c->err.status = RESIL_ENOMEM;
    snprintf(c->err.file, sizeof c->err.file, "%s", c->file);
    snprintf(c->err.message, sizeof c->err.message, "out of memory");
  }
  return RESIL_ENOMEM;
}

/* One section (kind k): its configs (each checked as a spec of its own) and
 * its instances. *cidx: the configs' index, for the caller to free. */
static resil_status read_section_in(lctx *c, resil_registry_kind k, yaml_node_t *sec, specs *ss,
                                    keyent **cidx) {
  const char *sname = KINDS[k].section;
  if (check_mapping(c, sec, sname)) return RESIL_EINVAL;
  yaml_node_t *configs = NULL, *instances = NULL;
  FOR_PAIRS(c, sec, p) {
    yaml_node_t *kn = node(c, p->key);
    const char *key = scalar(kn);
    if (strcmp(key, "configs") == 0)
      configs = node(c, p->value);
    else if (strcmp(key, "instances") == 0)
      instances = node(c, p->value);
    else {
      static const char *const cand[] = {"configs", "instances"};
      char sub[256];
      join(sub, sizeof sub, sname, ".", key);
      return fail_unknown(c, kn, sub, "key", key, cand, 2);
    }
  }
  char cpath[256], ipath[256];
  join(cpath, sizeof cpath, sname, ".", "configs");
  join(ipath, sizeof ipath, sname, ".", "instances");
  yaml_node_t *defcfg = NULL;
  size_t ncidx = 0; /* 0: configs has fewer than two keys (no index) */
  if (configs) {
    if (check_mapping_idx(c, configs, cpath, cidx, &ncidx)) return RESIL_EINVAL;
    defcfg = is_null(configs) ? NULL : map_get(c, configs, "default");
    FOR_PAIRS(c, configs, p) {
      spec *s = spec_add(ss);
      if (!s) return oom(c);
      s->kind = k;
      s->is_config = 1;
      s->at = node(c, p->key);
      s->name = scalar(s->at);
      join(s->path, sizeof s->path, cpath, ".", s->name);
      join(s->def_path, sizeof s->def_path, cpath, ".", "default");
      KINDS[k].init(&s->cfg);
      yaml_node_t *body = node(c, p->value);
      if (defcfg && body != defcfg && apply_map(c, s, defcfg, s->def_path, SRC_DEFAULT, 0))
        return RESIL_EINVAL;
      if (apply_map(c, s, body, s->path, SRC_INSTANCE, 0)) return RESIL_EINVAL;
    }
  }
  if (!instances) return RESIL_OK;
  if (check_mapping(c, instances, ipath)) return RESIL_EINVAL;
  FOR_PAIRS(c, instances, p) {
    spec *s = spec_add(ss);
    if (!s) return oom(c);
    s->kind = k;
    s->at = node(c, p->key);
    s->name = scalar(s->at);
    join(s->path, sizeof s->path, ipath, ".", s->name);
    join(s->def_path, sizeof s->def_path, cpath, ".", "default");
    if (!*s->name) return fail_at(c, s->at, s->path, "an instance needs a name");
    /* A name goes into metric labels, event lines and `resil describe`'s
     * output as it is: no control characters. */
    for (const unsigned char *q = (const unsigned char *)s->name; *q; q++)
      if (*q < 0x20 || *q == 0x7f)
        return fail_at(c, s->at, s->path,
                       "an instance name must not contain control characters (byte 0x%02x "
                       "at offset %zu)",
                       *q, (size_t)(q - (const unsigned char *)s->name));
    KINDS[k].init(&s->cfg);
    yaml_node_t *body = node(c, p->value);
    if (check_mapping(c, body, s->path)) return RESIL_EINVAL;
    yaml_node_t *basen = is_null(body) ? NULL : map_get(c, body, "base_config");
    yaml_node_t *base = NULL;
    if (basen) {
      char bp[256];
      join(bp, sizeof bp, s->path, ".", "base_config");
      const char *bn = scalar(basen);
      if (!bn || is_null(basen)) return fail_at(c, basen, bp, "expected the name of a config");
      base = ncidx                           ? idx_get(c, *cidx, ncidx, bn)
             : configs && !is_null(configs) ? map_get(c, configs, bn)
                                            : NULL;
      if (!base) {
        const char *cand[64];
        size_t nc = 0;
        if (configs) FOR_PAIRS(c, configs, q) {
            if (nc < 64) cand[nc++] = scalar(node(c, q->key));
          }
        if (nc == 0) return fail_at(c, basen, bp, "no config '%s': %s has no configs", bn, cpath);
        return fail_unknown(c, basen, bp, "config", bn, cand, nc);
      }
      join(s->base_path, sizeof s->base_path, cpath, ".", bn);
    }
    if (defcfg && base != defcfg && apply_map(c, s, defcfg, s->def_path, SRC_DEFAULT, 0))
      return RESIL_EINVAL;
    if (base && apply_map(c, s, base, s->base_path, SRC_BASE, 0)) return RESIL_EINVAL;
    if (!is_null(body) && apply_map(c, s, body, s->path, SRC_INSTANCE, 1)) return RESIL_EINVAL;
    if (k == RESIL_REG_CHAIN && read_layers(c, s, body)) return RESIL_EINVAL;
#ifdef RESIL_CONFIG_HTTP
    if (k == RESIL_REG_HTTP_CLIENT && read_endpoints(c, s, body)) return RESIL_EINVAL;
#endif
  }
  return RESIL_OK;
}

static resil_status read_section(lctx *c, resil_registry_kind k, yaml_node_t *sec, specs *ss) {
  keyent *cidx = NULL;
  resil_status st = read_section_in(c, k, sec, ss, &cidx);
  free(cidx);
  return st;
}

static resil_status read_doc(lctx *c, specs *ss) {
  yaml_node_t *root = yaml_document_get_root_node(c->doc);
  int no_sections = !root || is_null(root) ||
                    (root->type == YAML_MAPPING_NODE &&
                     root->data.mapping.pairs.top == root->data.mapping.pairs.start);
  /* An empty file loads as an empty registry; a reload refuses it when it
   * would remove instances: that is what a truncated or half-written file
   * looks like (registry.h, "Reloads from an empty document"). */
  if (no_sections && c->old_n)
    return fail_at(c, root, "",
                   "the document has no sections: a reload from it would remove all %zu "
                   "instances (to remove them, name a section: 'retry: {}')",
                   c->old_n);
  if (!root || is_null(root)) return RESIL_OK;
  if (check_mapping(c, root, "")) return RESIL_EINVAL;
  FOR_PAIRS(c, root, p) {
    yaml_node_t *k = node(c, p->key);
    const char *key = scalar(k);
    int kind = -1;
    for (int j = 0; j < RESIL_REG_KIND_COUNT_; j++)
      if (strcmp(key, KINDS[j].section) == 0) kind = j;
    if (kind < 0) {
      const char *cand[RESIL_REG_KIND_COUNT_];
      for (int j = 0; j < RESIL_REG_KIND_COUNT_; j++) cand[j] = KINDS[j].section;
      return fail_unknown(c, k, key, "section", key, cand, RESIL_REG_KIND_COUNT_);
    }
    if (!KINDS[kind].available)
      return fail_at(c, k, key, "this libresil-config was built without %s",
                     kind == RESIL_REG_HTTP_CLIENT ? "libresil-http" : "libresil-store");
    if (read_section(c, (resil_registry_kind)kind, node(c, p->value), ss)) return RESIL_EINVAL;
  }
  /* Instance names are unique per kind (YAML duplicate keys were refused);
   * configs do not count. */
  return RESIL_OK;
}

/* Replaces whole-word occurrences of C field names by their keys. */
static void rename_fields(const kinddesc *kd, char *msg, size_t n) {
  for (size_t i = 0; i < kd->nfields; i++) {
    const char *cf = kd->fields[i].cfield, *key = kd->fields[i].key;
    size_t lc = strlen(cf), lk = strlen(key);
    if (lc == lk) continue;
    char *p = msg;
    while ((p = strstr(p, cf)) != NULL) {
      int word_start = p == msg || !(isalnum((unsigned char)p[-1]) || p[-1] == '_');
      int word_end = !(isalnum((unsigned char)p[lc]) || p[lc] == '_');
      if (!word_start || !word_end) {
        p += lc;
        continue;
      }
      size_t tail = strlen(p + lc);
      if ((size_t)(p - msg) + lk + tail + 1 > n) break;
      memmove(p + lk, p + lc, tail + 1);
      memcpy(p, key, lk);
      p += lk;
    }
  }
}

/* A field as a policy names an item of a list field ("instances[2]"): 1
 * with the name's length (before the '[') in *namelen and N in *idx; else
 * 0, *namelen the whole length. */
static int field_index(const char *f, size_t *namelen, size_t *idx) {
  const char *b = strchr(f, '[');
  *namelen = b ? (size_t)(b - f) : strlen(f);
  int used = 0;
  return b && sscanf(b, "[%zu]%n", idx, &used) == 1 && b[used] == '\0';
}

/* Item idx of sequence n (the node of a list field), or n itself. */
static const yaml_node_t *item_at(lctx *c, const yaml_node_t *n, size_t idx) {
  if (!n || n->type != YAML_SEQUENCE_NODE ||
      idx >= (size_t)(n->data.sequence.items.top - n->data.sequence.items.start))
    return n;
  return node(c, n->data.sequence.items.start[idx]);
}

/* 1 when the C field named cfield is f's name (f without its "[N]"). */
static int field_is(const char *cfield, const char *f, size_t namelen) {
  return strncmp(cfield, f, namelen) == 0 && cfield[namelen] == '\0';
}

/* Maps the policy's error back to the node that set the field (an item of
 * a list field, "instances[2]", to that item). */
static resil_status policy_error(lctx *c, const spec *s, const resil_error *pe) {
  const kinddesc *kd = &KINDS[s->kind];
#ifdef RESIL_CONFIG_HTTP
  size_t ei;
  int used = 0;
  if (s->kind == RESIL_REG_HTTP_CLIENT &&
      sscanf(pe->field, "endpoints[%zu].%n", &ei, &used) == 1 && used > 0 && ei < s->neps) {
    const ep_spec *e = &s->eps[ei];
    const char *fname = pe->field + used;
    const yaml_node_t *at = e->at;
    char path[256];
    join(path, sizeof path, e->path, fname[0] ? "." : "", fname);
    size_t nl = 0, idx = 0;
    int has_idx = field_index(fname, &nl, &idx);
    for (size_t i = 0; i < NEPF; i++)
      if (field_is(EP_FIELDS[i].cfield, fname, nl) && e->src_node[i])
        at = has_idx ? item_at(c, e->src_node[i], idx) : e->src_node[i];
    if (strcmp(fname, "headers") == 0 && e->headers_node) at = e->headers_node;
    const char *m = pe->msg;
    size_t lf = strlen(pe->field);
    if (strncmp(m, pe->field, lf) == 0 && m[lf] == ':' && m[lf + 1] == ' ') m += lf + 2;
    fail_at(c, at, path, "%s", m);
    c->err.status = pe->status == RESIL_OK ? RESIL_EINVAL : pe->status;
    if (pe->has_range) {
      c->err.has_range = 1;
      c->err.min = pe->min;
      c->err.max = pe->max;
      c->err.got = pe->got;
    }
    return c->err.status;
  }
#endif
  size_t fi = kd->nfields, nl = 0, idx = 0;
  int has_idx = field_index(pe->field, &nl, &idx);
  for (size_t i = 0; i < kd->nfields; i++)
    if (field_is(kd->fields[i].cfield, pe->field, nl)) fi = i;
  /* A store that cannot be opened: its uri is at fault (fields[0]). */
  if (fi == kd->nfields && s->kind == RESIL_REG_STORE) fi = 0;
  const yaml_node_t *at = s->at;
  char path[256];
  const char *base = s->path;
  if (fi < kd->nfields) {
    if (s->src[fi] != SRC_NONE) at = has_idx ? item_at(c, s->src_node[fi], idx) : s->src_node[fi];
    if (s->src[fi] == SRC_DEFAULT) base = s->def_path;
    if (s->src[fi] == SRC_BASE) base = s->base_path;
    join(path, sizeof path, base, ".", kd->fields[fi].key);
    if (has_idx) {
      char ix[24];
      snprintf(ix, sizeof ix, "[%zu]", idx);
      size_t l = strlen(path);
      join(path + l, sizeof path - l, "", "", ix);
    }
  } else {
    snprintf(path, sizeof path, "%s", base);
  }
  char msg[256];
  const char *m = pe->msg;
  size_t lf = strlen(pe->field);
  if (lf && strncmp(m, pe->field, lf) == 0 && m[lf] == ':' && m[lf + 1] == ' ') m += lf + 2;
  snprintf(msg, sizeof msg, "%s", m);
  rename_fields(kd, msg, sizeof msg);
  if (s->is_config == 0 && fi < kd->nfields && s->src[fi] != SRC_INSTANCE &&
      s->src[fi] != SRC_NONE) {
    /* Inherited: say which instance it broke. */
    size_t l = strlen(msg);
    join(msg + l, sizeof msg - l, " (in instance ", s->path, ")");
  }
  if (pe->status != RESIL_EINVAL && c->err.status == RESIL_OK) {
    fail_at(c, at, path, "%s", msg);
    c->err.status = pe->status;
    return pe->status;
  }
  fail_at(c, at, path, "%s", msg);
  if (pe->has_range) {
    c->err.has_range = 1;
    c->err.min = pe->min;
    c->err.max = pe->max;
    c->err.got = pe->got;
  }
  return RESIL_EINVAL;
}

/* ---- entries and snapshots ---------------------------------------------------------- */

struct entry {
  atomic_size_t refs;
  resil_registry_kind kind;
  char *name;
  char *fp; /* fingerprint(), fp_len bytes */
  size_t fp_len;
  void *handle;
  entry *deps[RESIL_CHAIN_MAX_LAYERS + MAXF]; /* kept alive while this lives */
  size_t ndeps;
  int64_t total_timeout_ns; /* chains */
  resil_registry_http_timeouts http; /* http clients */
  resil_registry_http_balance http_balance; /* http clients */
  resil_registry_recovery recovery; /* breakers, retries and hedges */
  resil__reg_events *ev;    /* retries and clients: their listener's box */
  seg_hook *hook;           /* shared segments: their fallback hook */
};

static void entry_unref(entry *e) {
  if (!e) return;
  if (atomic_fetch_sub_explicit(&e->refs, 1, memory_order_acq_rel) != 1) return;
  KINDS[e->kind].destroy(e->handle);
  hook_free(e->hook);
#ifdef RESIL_CONFIG_HTTP
  resil__reg_events_unref(e->ev);
#endif
  for (size_t i = 0; i < e->ndeps; i++) entry_unref(e->deps[i]);
  free(e->name);
  free(e->fp);
  free(e);
}

static void entry_ref(entry *e) { atomic_fetch_add_explicit(&e->refs, 1, memory_order_relaxed); }

typedef struct snapshot {
  entry **v;
  size_t n;
} snapshot;

static int cmp_key(resil_registry_kind k, const char *name, const entry *e) {
  if (k != e->kind) return k < e->kind ? -1 : 1;
  return strcmp(name, e->name);
}
static int cmp_entries(const void *a, const void *b) {
  const entry *x = *(entry *const *)a, *y = *(entry *const *)b;
  return cmp_key(x->kind, x->name, y);
}

static entry *snap_find(const snapshot *s, resil_registry_kind k, const char *name) {
  if (!s) return NULL;
  size_t lo = 0, hi = s->n;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    int r = cmp_key(k, name, s->v[mid]);
    if (r == 0) return s->v[mid];
    if (r < 0)
      hi = mid;
    else
      lo = mid + 1;
  }
  return NULL;
}

static void snap_free(snapshot *s) {
  if (!s) return;
  for (size_t i = 0; i < s->n; i++) entry_unref(s->v[i]);
  free(s->v);
  free(s);
}

enum { MAX_COLLECTORS = 8 };

struct resil_registry {
  pthread_rwlock_t lock; /* guards cur and last */
  pthread_mutex_t reload_mu; /* serialises reloads; guards what follows cur */
  snapshot *cur;
  snapshot *grave; /* removed by the last reload, to come back (reload_mu) */
  _Atomic uint64_t gen;
  resil_registry_reload_stats last;
  resil_metrics *collectors[MAX_COLLECTORS]; /* resil_registry_metrics_add */
  size_t ncollectors;
  struct resil_event_sink *sink; /* resil_registry_events_attach */
  uint32_t flags;                /* resil_registry_load_options.flags */
  resil__reg_events *ev; /* the attempt listeners' box (registry_int.h) */
};

/* The resolved settings as bytes into b (emptied first): equal
 * fingerprints, equal settings (see fpbuf). */
static void fingerprint(const spec *s, fpbuf *b) {
  const kinddesc *kd = &KINDS[s->kind];
  b->len = 0;
  for (size_t i = 0; i < kd->nfields; i++) fp_field(b, &kd->fields[i], &s->cfg);
#ifdef RESIL_CONFIG_HTTP
  fingerprint_endpoints(s, b);
#endif
}

/* What resil_registry_recovery() reads back: a breaker's ramp, a retry's
 * or a hedge's flag and the breaker its recovery_breaker names. */
static void recovery_of(const spec *s, resil_registry_recovery *r) {
  memset(r, 0, sizeof *r);
  r->struct_size = sizeof *r;
  const kinddesc *kd = &KINDS[s->kind];
  if (s->kind == RESIL_REG_BREAKER) {
    r->ramp_duration_ns = s->cfg.br.ramp_duration_ns;
    r->ramp_min_percent = s->cfg.br.ramp_min_percent;
    r->ramp_aggression = s->cfg.br.ramp_aggression;
    return;
  }
  r->during_recovery = s->kind == RESIL_REG_RETRY ? s->cfg.rt.retry_during_recovery
                                                  : s->cfg.hg.hedge_during_recovery;
  for (size_t f = 0; f < kd->nfields; f++)
    if (kd->fields[f].type == F_REF && kd->fields[f].ref_kind == RESIL_REG_BREAKER &&
        s->ref_name[f])
      snprintf(r->recovery_breaker, sizeof r->recovery_breaker, "%s", s->ref_name[f]);
}

static entry *entry_new(const spec *s, const fpbuf *fp) {
  entry *e = calloc(1, sizeof *e);
  if (!e) return NULL;
  atomic_init(&e->refs, 1);
  e->kind = s->kind;
  e->name = strdup(s->name);
  e->fp = malloc(fp->len + 1);
  if (e->fp) memcpy(e->fp, fp->p, fp->len + 1);
  e->fp_len = fp->len;
  if (!e->name || !e->fp) {
    free(e->name);
    free(e->fp);
    free(e);
    return NULL;
  }
  return e;
}

static resil_status add_layer(resil_chain *ch, entry *l) {
  switch (l->kind) {
  case RESIL_REG_BREAKER: return resil_chain_add_breaker(ch, l->handle);
  case RESIL_REG_RETRY: return resil_chain_add_retry(ch, l->handle);
  case RESIL_REG_RATELIMITER: return resil_chain_add_ratelimiter(ch, l->handle);
  case RESIL_REG_BULKHEAD: return resil_chain_add_bulkhead(ch, l->handle);
  case RESIL_REG_TIMELIMITER: return resil_chain_add_timelimiter(ch, l->handle);
  case RESIL_REG_HEDGE: return resil_chain_add_hedge(ch, l->handle);
  case RESIL_REG_THREADPOOL: return resil_chain_add_threadpool(ch, l->handle);
  default: return RESIL_EINVAL;
  }
}

/* The instances of ss sorted by kind and name, for resolve(). */
typedef struct spec_index {
  const spec **v;
  size_t n;
} spec_index;

static int cmp_spec_key(resil_registry_kind k, const char *name, const spec *t) {
  if (k != t->kind) return k < t->kind ? -1 : 1;
  return strcmp(name, t->name);
}
static int cmp_specs(const void *a, const void *b) {
  const spec *x = *(const spec *const *)a, *y = *(const spec *const *)b;
  return cmp_spec_key(x->kind, x->name, y);
}

static resil_status spec_index_build(lctx *c, const specs *ss, spec_index *ix) {
  ix->n = 0;
  ix->v = malloc((ss->n ? ss->n : 1) * sizeof *ix->v);
  if (!ix->v) return oom(c);
  for (size_t i = 0; i < ss->n; i++)
    if (!ss->v[i].is_config) ix->v[ix->n++] = &ss->v[i];
  qsort(ix->v, ix->n, sizeof *ix->v, cmp_specs);
  return RESIL_OK;
}

/* The entry built for instance `name` of `kind`, or an error at node/path
 * ("unknown retry instance 'x' (did you mean ...)"). */
static resil_status resolve(lctx *c, const specs *ss, const spec_index *ix,
                            resil_registry_kind kind, const char *name, const yaml_node_t *at,
                            const char *path, entry **out) {
  *out = NULL;
  size_t lo = 0, hi = ix->n;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    int r = cmp_spec_key(kind, name, ix->v[mid]);
    if (r == 0) {
      *out = ix->v[mid]->made;
      break;
    }
    if (r < 0)
      hi = mid;
    else
      lo = mid + 1;
  }
  if (*out) return RESIL_OK;
  const char *cand[64];
  size_t nc = 0;
  for (size_t q = 0; q < ss->n && nc < 64; q++)
    if (!ss->v[q].is_config && ss->v[q].kind == kind) cand[nc++] = ss->v[q].name;
  char what[64];
  snprintf(what, sizeof what, "%s instance", KINDS[kind].section);
  return nc ? fail_unknown(c, at, path, what, name, cand, nc)
            : fail_at(c, at, path, "no %s instance '%s' in this file", KINDS[kind].section,
                      name);
}

/* Builds (or, from old, keeps) every instance of ss into *out. On an error
 * nothing is left: every entry taken is released. */
static resil_status build(lctx *c, specs *ss, const snapshot *old, const snapshot *grave,
                          snapshot **out, resil_registry_reload_stats *rs) {
  resil_status st = RESIL_OK;
  fpbuf fp = {0};
  spec_index ix = {0};
  if (spec_index_build(c, ss, &ix)) return RESIL_ENOMEM;
  /* Configs on their own (a range error in an unused config is an error
   * too), then shared segments, then what policies refer to (budgets,
   * thread pools, and breakers: a retry's or a hedge's recovery_breaker),
   * then the other policies, then the chains. */
  for (int pass = 0; pass < 5 && st == RESIL_OK; pass++) {
    for (size_t i = 0; i < ss->n && st == RESIL_OK; i++) {
      spec *s = &ss->v[i];
      int named = s->kind == RESIL_REG_RETRY_BUDGET || s->kind == RESIL_REG_THREADPOOL ||
                  s->kind == RESIL_REG_BREAKER;
      int want = s->is_config                 ? 0
                 : s->kind == RESIL_REG_SHARED ? 1
                 : named                       ? 2
                 : s->kind == RESIL_REG_CHAIN  ? 4
                                               : 3;
      if (want != pass) continue;
      resil_error pe;
      resil_error_clear(&pe);
      if (s->is_config) {
        if (!KINDS[s->kind].check_configs) continue; /* needs an instance's uri/endpoints */
        void *h = NULL;
        anycfg tmp = s->cfg;
        if ((st = KINDS[s->kind].create(&tmp, s->name, &h, &pe)) != RESIL_OK)
          st = policy_error(c, s, &pe);
        else
          KINDS[s->kind].destroy(h);
        continue;
      }
      /* deps: a chain's layers (in order), then what F_REF fields name. */
      entry *deps[RESIL_CHAIN_MAX_LAYERS + MAXF];
      size_t ndeps = 0;
      {
        const kinddesc *kd = &KINDS[s->kind];
        for (size_t f = 0; f < kd->nfields && st == RESIL_OK; f++) {
          if (kd->fields[f].type != F_REF) continue;
          void *h = NULL;
          if (s->ref_name[f]) {
            char rp[256];
            const char *base = s->src[f] == SRC_DEFAULT ? s->def_path
                               : s->src[f] == SRC_BASE  ? s->base_path
                                                        : s->path;
            join(rp, sizeof rp, base, ".", kd->fields[f].key);
            entry *d;
            st = resolve(c, ss, &ix, (resil_registry_kind)kd->fields[f].ref_kind, s->ref_name[f],
                         s->src_node[f], rp, &d);
            if (st) break;
            h = d->handle;
            if (s->kind != RESIL_REG_CHAIN) deps[RESIL_CHAIN_MAX_LAYERS + ndeps++] = d;
          }
          memcpy((unsigned char *)&s->cfg + kd->fields[f].off, &h, sizeof h);
        }
        if (st) break;
      }
      if (s->kind == RESIL_REG_CHAIN) {
        for (size_t j = 0; j < s->nlayers; j++) {
          if ((st = resolve(c, ss, &ix, s->layers[j].kind, s->layers[j].name, s->layers[j].node,
                            s->layers[j].path, &deps[j])) != RESIL_OK)
            break;
          for (size_t q = 0; q < j; q++)
            if (deps[q] == deps[j]) {
              st = fail_at(c, s->layers[j].node, s->layers[j].path,
                           "%s '%s' is already layer %zu of this chain",
                           KINDS[deps[j]->kind].section, deps[j]->name, q);
              break;
            }
          if (st) break;
        }
        if (st) break;
      }
      fingerprint(s, &fp);
      if (s->kind == RESIL_REG_CHAIN) {
        /* A chain is kept only when its layers are the very same objects. */
        for (size_t j = 0; j < s->nlayers; j++) fp_fmt(&fp, "D%zu=%p;", j, (void *)deps[j]);
      }
      if (fp.oom) {
        st = oom(c);
        break;
      }
      entry *prev = snap_find(old, s->kind, s->name);
      if (prev && prev->fp_len == fp.len && memcmp(prev->fp, fp.p, fp.len) == 0) {
        entry_ref(prev);
        s->made = prev;
        rs->kept++;
        continue;
      }
      if (prev) {
        rs->replaced++;
      } else {
        rs->added++;
        /* Removed by the reload before and named again with the same
         * settings: the same object, its state back (registry.h). */
        entry *ghost = snap_find(grave, s->kind, s->name);
        if (ghost && ghost->fp_len == fp.len && memcmp(ghost->fp, fp.p, fp.len) == 0) {
          entry_ref(ghost);
          s->made = ghost;
          rs->restored++;
          continue;
        }
      }
      entry *e = entry_new(s, &fp);
      if (!e) {
        st = oom(c);
        break;
      }
      anycfg tmp = s->cfg;
      if (s->kind == RESIL_REG_SHARED) {
        tmp.sh.check_only = (c->flags & RESIL_REGISTRY_NO_OPEN) != 0;
        tmp.sh.ev = c->ev;
      }
#ifdef RESIL_CONFIG_STORE
      if (s->kind == RESIL_REG_STORE) tmp.st.check_only = (c->flags & RESIL_REGISTRY_NO_OPEN) != 0;
#endif
#ifdef RESIL_CONFIG_HTTP
      /* Attempt events (resil_registry_events_attach) through the box. */
      if (c->ev && s->kind == RESIL_REG_RETRY) {
        tmp.rt.on_attempt = resil__reg_events_on_attempt;
        tmp.rt.on_attempt_user = c->ev;
      } else if (c->ev && s->kind == RESIL_REG_HTTP_CLIENT) {
        tmp.hc.on_attempt = resil__reg_events_on_attempt;
        tmp.hc.on_attempt_user = c->ev;
        tmp.hc.on_instance = resil__reg_events_on_instance;
        tmp.hc.on_instance_user = c->ev;
      }
      resil_http_endpoint *table = NULL;
      if (s->kind == RESIL_REG_HTTP_CLIENT) {
        table = calloc(s->neps, sizeof *table);
        if (!table) {
          free(e->name);
          free(e->fp);
          free(e);
          st = oom(c);
          break;
        }
        for (size_t j = 0; j < s->neps; j++) table[j] = s->eps[j].ep;
        tmp.hc.endpoints = table;
        tmp.hc.endpoint_count = s->neps;
        if (c->flags & RESIL_REGISTRY_NO_OPEN) {
          /* Checked, not run: a resolved name is built as its base_url
           * alone, so the client starts no resolver and nothing looks the
           * name up (registry.h, RESIL_REGISTRY_NO_OPEN). Every setting is
           * still checked; resolve_instances without a base_url stays, for
           * its error. */
          if (tmp.hc.base_url) tmp.hc.resolve_instances = 0;
          for (size_t j = 0; j < s->neps; j++)
            if (table[j].base_url) table[j].resolve_instances = 0;
        }
      }
      st = KINDS[s->kind].create(&tmp, s->name, &e->handle, &pe);
      free(table);
#else
      st = KINDS[s->kind].create(&tmp, s->name, &e->handle, &pe);
#endif
      if (st != RESIL_OK) {
        free(e->name);
        free(e->fp);
        free(e);
        st = policy_error(c, s, &pe);
        break;
      }
#ifdef RESIL_CONFIG_HTTP
      if (c->ev && (s->kind == RESIL_REG_RETRY || s->kind == RESIL_REG_HTTP_CLIENT)) {
        resil__reg_events_ref(c->ev);
        e->ev = c->ev;
      }
#endif
      for (size_t j = 0; j < ndeps; j++) {
        entry_ref(deps[RESIL_CHAIN_MAX_LAYERS + j]);
        e->deps[e->ndeps++] = deps[RESIL_CHAIN_MAX_LAYERS + j];
      }
      if (s->kind == RESIL_REG_CHAIN) {
        for (size_t j = 0; j < s->nlayers; j++) {
          entry_ref(deps[j]);
          e->deps[e->ndeps++] = deps[j];
          if ((st = add_layer(e->handle, deps[j])) != RESIL_OK) {
            fail_at(c, s->layers[j].node, s->layers[j].path, "cannot add the layer: %s",
                    resil_strerror(st));
            break;
          }
        }
      }
      if (s->kind == RESIL_REG_CHAIN) e->total_timeout_ns = s->cfg.ch.total_timeout_ns;
      if (s->kind == RESIL_REG_BREAKER || s->kind == RESIL_REG_RETRY ||
          s->kind == RESIL_REG_HEDGE)
        recovery_of(s, &e->recovery);
      if (s->kind == RESIL_REG_SHARED) e->hook = tmp.sh.hook;
#ifdef RESIL_CONFIG_HTTP
      if (s->kind == RESIL_REG_HTTP_CLIENT) {
        e->http.struct_size = sizeof e->http;
        e->http.lease_timeout_ns = s->cfg.hc.lease_timeout_ns;
        e->http.connect_timeout_ns = s->cfg.hc.connect_timeout_ns;
        e->http.response_timeout_ns = s->cfg.hc.response_timeout_ns;
        e->http.max_hops = 1 + (s->cfg.hc.follow_redirects ? s->cfg.hc.max_redirects : 0);
        resil_registry_http_balance *hb = &e->http_balance;
        hb->struct_size = sizeof *hb;
        hb->balance = (int)s->cfg.hc.balance;
        hb->resolve_instances = s->cfg.hc.resolve_instances;
        hb->resolve_interval_ns = s->cfg.hc.resolve_interval_ns;
        hb->eject_consecutive = s->cfg.hc.eject_consecutive;
        hb->eject_classes = s->cfg.hc.eject_classes;
        hb->eject_base_ns = s->cfg.hc.eject_base_ns;
        hb->eject_max_ns = s->cfg.hc.eject_max_ns;
        hb->eject_max_percent = s->cfg.hc.eject_max_percent;
        hb->instance_ramp_ns = s->cfg.hc.instance_ramp_ns;
        hb->instance_ramp_min_percent = s->cfg.hc.instance_ramp_min_percent;
        hb->instance_ramp_aggression = s->cfg.hc.instance_ramp_aggression;
        for (size_t j = 0; s->cfg.hc.instances && s->cfg.hc.instances[j]; j++)
          hb->listed_instances++;
        for (size_t k = 0; k < s->neps; k++)
          for (size_t j = 0; s->eps[k].ep.instances && s->eps[k].ep.instances[j]; j++)
            hb->listed_instances++;
      }
#endif
      s->made = e;
      if (st) break;
    }
  }
  snapshot *snap = NULL;
  if (st == RESIL_OK) {
    snap = calloc(1, sizeof *snap);
    size_t n = 0;
    for (size_t i = 0; i < ss->n; i++) n += ss->v[i].made != NULL;
    if (snap) snap->v = calloc(n ? n : 1, sizeof *snap->v);
    if (!snap || !snap->v) {
      free(snap);
      snap = NULL;
      st = oom(c);
    } else {
      for (size_t i = 0; i < ss->n; i++)
        if (ss->v[i].made) {
          snap->v[snap->n++] = ss->v[i].made;
          ss->v[i].made = NULL;
        }
      qsort(snap->v, snap->n, sizeof *snap->v, cmp_entries);
      for (size_t i = 0; old && i < old->n; i++)
        if (!snap_find(snap, old->v[i]->kind, old->v[i]->name)) rs->removed++;
    }
  }
  for (size_t i = 0; i < ss->n; i++) {
    entry_unref(ss->v[i].made);
    ss->v[i].made = NULL;
  }
  free(fp.p);
  free(ix.v);
  if (st == RESIL_OK) *out = snap;
  return st;
}

/* Every error leaves through here: the file name, the key path and the
 * message (which may quote keys and values of the file) escaped like a log
 * line (resil__escape_excerpt: control bytes, DEL and bytes >= 0x80 as
 * "\xNN"), so that no raw control byte reaches a terminal or a log. */
static void err_escape(resil_registry_error *e) {
  char tmp[sizeof e->message];
  snprintf(tmp, sizeof tmp, "%s", e->file);
  resil__escape_excerpt(e->file, sizeof e->file, tmp, strlen(tmp));
  snprintf(tmp, sizeof tmp, "%s", e->key_path);
  resil__escape_excerpt(e->key_path, sizeof e->key_path, tmp, strlen(tmp));
  snprintf(tmp, sizeof tmp, "%s", e->message);
  resil__escape_excerpt(e->message, sizeof e->message, tmp, strlen(tmp));
}

/* ---- bounds --------------------------------------------------------------------
 * libyaml's document loader holds the whole tree in memory and has no limit
 * of its own: a first pass over the events (memory: one counter per open
 * collection) refuses a document deeper, wider or bigger than the limits
 * of registry.h before the tree is built. A YAML error found here is left
 * for the loader, which reports it the same way. */

static resil_status bound_fail(lctx *c, const yaml_mark_t *m, const char *fmt, unsigned long v) {
  yaml_node_t at;
  memset(&at, 0, sizeof at);
  at.start_mark = *m;
  return fail_at(c, &at, "", fmt, v);
}

static resil_status scan_bounds(lctx *c, const char *text, size_t len) {
  yaml_parser_t p;
  if (!yaml_parser_initialize(&p)) return oom(c);
  yaml_parser_set_input_string(&p, (const unsigned char *)text, len);
  size_t items[RESIL_REGISTRY_MAX_DEPTH]; /* per open collection: items so far */
  int is_map[RESIL_REGISTRY_MAX_DEPTH];
  size_t depth = 0, nodes = 0;
  resil_status st = RESIL_OK;
  for (int done = 0; !done && st == RESIL_OK;) {
    yaml_event_t ev;
    if (!yaml_parser_parse(&p, &ev)) break; /* the loader reports it */
    switch (ev.type) {
    case YAML_STREAM_END_EVENT: done = 1; break;
    case YAML_SCALAR_EVENT:
      /* "\0" in a double-quoted scalar: C strings would cut the value there */
      if (memchr(ev.data.scalar.value, 0, ev.data.scalar.length)) {
        st = bound_fail(c, &ev.start_mark,
                        "a NUL byte (\\0) at offset %lu of a scalar: not allowed (a C "
                        "string would end there)",
                        (unsigned long)((const unsigned char *)memchr(ev.data.scalar.value, 0,
                                                                      ev.data.scalar.length) -
                                        ev.data.scalar.value));
        break;
      }
      /* fall through */
    case YAML_ALIAS_EVENT:
    case YAML_SEQUENCE_START_EVENT:
    case YAML_MAPPING_START_EVENT:
      if (ev.type != YAML_ALIAS_EVENT && ++nodes > RESIL_REGISTRY_MAX_NODES) {
        st = bound_fail(c, &ev.start_mark, "more than %lu nodes in the document",
                        (unsigned long)RESIL_REGISTRY_MAX_NODES);
        break;
      }
      if (depth > 0 && ++items[depth - 1] > (is_map[depth - 1] ? 2u : 1u) *
                                                 (size_t)RESIL_REGISTRY_MAX_KEYS) {
        st = bound_fail(c, &ev.start_mark,
                        is_map[depth - 1] ? "more than %lu keys in one mapping"
                                          : "more than %lu items in one sequence",
                        (unsigned long)RESIL_REGISTRY_MAX_KEYS);
        break;
      }
      if (ev.type == YAML_SEQUENCE_START_EVENT || ev.type == YAML_MAPPING_START_EVENT) {
        if (depth == RESIL_REGISTRY_MAX_DEPTH) {
          st = bound_fail(c, &ev.start_mark, "nested deeper than %lu levels",
                          (unsigned long)RESIL_REGISTRY_MAX_DEPTH);
          break;
        }
        items[depth] = 0;
        is_map[depth++] = ev.type == YAML_MAPPING_START_EVENT;
      }
      break;
    case YAML_SEQUENCE_END_EVENT:
    case YAML_MAPPING_END_EVENT:
      if (depth) depth--;
      break;
    default: break;
    }
    yaml_event_delete(&ev);
  }
  yaml_parser_delete(&p);
  return st;
}

/* Parses text and builds the snapshot, keeping entries of old when they did
 * not change. */
static resil_status load(const char *text, size_t len, const char *file, uint32_t flags,
                         const snapshot *old, const snapshot *grave, snapshot **out,
                         resil_registry_reload_stats *rs, resil_registry_error *uerr,
                         resil__reg_events *ev) {
  lctx c;
  memset(&c, 0, sizeof c);
  c.file = file ? file : "<string>";
  c.old_n = old ? old->n : 0;
  c.flags = flags;
  c.ev = ev;
  c.err.struct_size = sizeof c.err;
  yaml_parser_t parser;
  yaml_document_t doc;
  resil_status st = scan_bounds(&c, text, len);
  if (st != RESIL_OK) goto out;
  if (!yaml_parser_initialize(&parser)) {
    st = oom(&c);
    goto out;
  }
  yaml_parser_set_input_string(&parser, (const unsigned char *)text, len);
  if (!yaml_parser_load(&parser, &doc)) {
    snprintf(c.err.file, sizeof c.err.file, "%s", c.file);
    c.err.status = parser.error == YAML_MEMORY_ERROR ? RESIL_ENOMEM : RESIL_EINVAL;
    c.err.line = (uint32_t)parser.problem_mark.line + 1;
    c.err.column = (uint32_t)parser.problem_mark.column + 1;
    snprintf(c.err.message, sizeof c.err.message, "YAML: %s%s%s",
             parser.problem ? parser.problem : "syntax error", parser.context ? " " : "",
             parser.context ? parser.context : "");
    st = c.err.status;
    yaml_parser_delete(&parser);
    goto out;
  }
  c.doc = &doc;
  specs ss = {0};
  {
    /* One document per file: a second one would be silently ignored. */
    yaml_document_t more;
    if (!yaml_parser_load(&parser, &more)) {
      snprintf(c.err.file, sizeof c.err.file, "%s", c.file);
      c.err.status = RESIL_EINVAL;
      c.err.line = (uint32_t)parser.problem_mark.line + 1;
      c.err.column = (uint32_t)parser.problem_mark.column + 1;
      snprintf(c.err.message, sizeof c.err.message, "YAML: %s",
               parser.problem ? parser.problem : "syntax error");
      st = RESIL_EINVAL;
    } else {
      yaml_node_t *r2 = yaml_document_get_root_node(&more);
      if (r2) {
        c.doc = &more;
        st = fail_at(&c, r2, "", "one YAML document per file: a second one starts here");
        c.doc = &doc;
      }
      yaml_document_delete(&more);
    }
  }
  if (st == RESIL_OK) st = read_doc(&c, &ss);
  if (st == RESIL_OK) st = build(&c, &ss, old, grave, out, rs);
  if (st != RESIL_OK && c.err.status == RESIL_OK) c.err.status = st;
  for (size_t i = 0; i < ss.n; i++) {
    free(ss.v[i].layers);
#ifdef RESIL_CONFIG_HTTP
    free(ss.v[i].eps);
#endif
  }
  free(ss.v);
  for (size_t i = 0; i < c.nallocs; i++) free(c.allocs[i]);
  free(c.allocs);
  yaml_document_delete(&doc);
  yaml_parser_delete(&parser);
out:
  err_escape(&c.err);
  if (uerr && resil__sized_size(uerr) >= sizeof(resil_registry_error))
    resil__sized_out(uerr, resil__sized_size(uerr), &c.err, sizeof c.err);
  return st;
}

/* Reads a registry file: a regular file of at most
 * RESIL_REGISTRY_MAX_FILE_BYTES. Opened with O_NONBLOCK so that a FIFO
 * (whose open would wait for a writer) or a device is refused at once,
 * not read. */
static resil_status read_file(const char *path, char **text, size_t *len,
                              resil_registry_error *uerr) {
  char *buf = NULL;
  size_t n = 0;
  int e = 0;
  const char *why = NULL; /* instead of strerror(e) */
  char whybuf[96];
  int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
  struct stat sb;
  if (fd < 0) {
    e = errno;
  } else if (fstat(fd, &sb) != 0) {
    e = errno;
  } else if (!S_ISREG(sb.st_mode)) {
    e = EINVAL;
    why = S_ISFIFO(sb.st_mode)  ? "not a regular file (a FIFO)"
          : S_ISDIR(sb.st_mode) ? "not a regular file (a directory)"
          : S_ISSOCK(sb.st_mode) ? "not a regular file (a socket)"
                                 : "not a regular file (a device)";
  } else if ((uint64_t)sb.st_size > RESIL_REGISTRY_MAX_FILE_BYTES) {
    e = EFBIG;
  } else {
    /* The size may change under us: read at most the limit plus one byte. */
    size_t cap = (size_t)sb.st_size + 1;
    buf = malloc(cap + 1);
    if (!buf) e = ENOMEM;
    while (!e) {
      if (n == cap) {
        if (cap > RESIL_REGISTRY_MAX_FILE_BYTES) {
          e = EFBIG;
          break;
        }
        size_t nc = cap * 2 > RESIL_REGISTRY_MAX_FILE_BYTES + 1
                        ? (size_t)RESIL_REGISTRY_MAX_FILE_BYTES + 1
                        : cap * 2;
        char *nb = realloc(buf, nc + 1);
        if (!nb) {
          e = ENOMEM;
          break;
        }
        buf = nb;
        cap = nc;
      }
      ssize_t r = read(fd, buf + n, cap - n);
      if (r < 0 && errno == EINTR) continue;
      if (r < 0) e = errno;
      if (r <= 0) break;
      n += (size_t)r;
    }
  }
  if (e == EFBIG) {
    snprintf(whybuf, sizeof whybuf, "larger than the %lu-byte limit of a registry file",
             (unsigned long)RESIL_REGISTRY_MAX_FILE_BYTES);
    why = whybuf;
  }
  if (fd >= 0) close(fd);
  if (e) {
    free(buf);
    resil_registry_error full;
    memset(&full, 0, sizeof full);
    full.struct_size = sizeof full;
    full.status = e == ENOMEM ? RESIL_ENOMEM : RESIL_EIO;
    snprintf(full.file, sizeof full.file, "%s", path);
    snprintf(full.message, sizeof full.message, "cannot read: %s", why ? why : strerror(e));
    err_escape(&full);
    if (uerr && resil__sized_size(uerr) >= sizeof(resil_registry_error))
      resil__sized_out(uerr, resil__sized_size(uerr), &full, sizeof full);
    return full.status;
  }
  buf[n] = 0;
  *text = buf;
  *len = n;
  return RESIL_OK;
}

static void clear_err(resil_registry_error *uerr) {
  if (uerr && resil__sized_size(uerr) >= sizeof(resil_registry_error))
    resil_registry_error_init_sized(uerr, resil__sized_size(uerr));
}

/* ---- collectors and the event sink (resil_registry_metrics_add,
 * resil_registry_events_attach) -------------------------------------------
 * Both are updated by a reload under reload_mu, after the swap and before
 * the old snapshot's references are dropped: an object leaves a collector
 * (resil_metrics_remove waits for a render reading it) and loses its sink
 * listener while the registry still holds it, so a render or a listener
 * never reads a freed object. */

static resil_status metrics_add_entry(resil_metrics *m, const entry *e) {
  if (!e->handle) return RESIL_OK; /* a store not opened (RESIL_REGISTRY_NO_OPEN) */
  switch (e->kind) {
  case RESIL_REG_BREAKER: return resil_metrics_add_breaker(m, e->name, e->handle);
  case RESIL_REG_RETRY: return resil_metrics_add_retry(m, e->name, e->handle);
  case RESIL_REG_RATELIMITER: {
    resil_status st = resil_metrics_add_ratelimiter(m, e->name, e->handle);
#ifdef RESIL_CONFIG_REDIS
    /* A limiter on Redis: its Redis figures too. */
    if (st == RESIL_OK && resil_redis_ratelimiter_breaker(e->handle))
      st = resil_redis_ratelimiter_metrics_add(m, e->name, e->handle);
#endif
    return st;
  }
  case RESIL_REG_BULKHEAD: return resil_metrics_add_bulkhead(m, e->name, e->handle);
  case RESIL_REG_TIMELIMITER: return resil_metrics_add_timelimiter(m, e->name, e->handle);
  case RESIL_REG_HEDGE: return resil_metrics_add_hedge(m, e->name, e->handle);
  case RESIL_REG_CHAIN: return resil_metrics_add_chain(m, e->name, e->handle);
#ifdef RESIL_CONFIG_HTTP
  case RESIL_REG_HTTP_CLIENT: return resil_http_client_metrics_add(m, e->name, e->handle);
#endif
#ifdef RESIL_CONFIG_STORE
  case RESIL_REG_STORE: return resil_store_metrics_add(m, e->name, e->handle);
#endif
  case RESIL_REG_SHARED: return resil_shared_metrics_add(m, e->name, e->handle);
  default: return RESIL_OK; /* retry budgets and thread pools have no figures */
  }
}

static void metrics_remove_entry(resil_metrics *m, const entry *e) {
  if (!e->handle) return;
  (void)resil_metrics_remove(m, e->handle); /* EINVAL: a kind without figures */
}

static void sink_attach_entry(resil_registry *reg, const entry *e) {
  /* A segment's fallbacks kept until a sink came (seg_hook). */
  if (reg->sink && e->kind == RESIL_REG_SHARED) hook_flush(e->hook);
#ifdef RESIL_CONFIG_HTTP
  if (reg->sink && e->kind == RESIL_REG_BREAKER)
    (void)resil_breaker_listener_add(e->handle, resil_event_breaker_listener, reg->sink);
  if (reg->sink && e->kind == RESIL_REG_HEDGE)
    (void)resil_hedge_listener_add(e->handle, resil_event_hedge_listener, reg->sink);
#else
  (void)reg, (void)e;
#endif
}

static void sink_detach_entry(resil_registry *reg, const entry *e) {
#ifdef RESIL_CONFIG_HTTP
  if (reg->sink && e->kind == RESIL_REG_BREAKER)
    (void)resil_breaker_listener_remove(e->handle, resil_event_breaker_listener, reg->sink);
  if (reg->sink && e->kind == RESIL_REG_HEDGE)
    (void)resil_hedge_listener_remove(e->handle, resil_event_hedge_listener, reg->sink);
#else
  (void)reg, (void)e;
#endif
}

/* After a swap from old to cur (reload_mu held): what left goes out first,
 * so a replaced instance's name is free for its successor. */
static void follow_swap(resil_registry *reg, const snapshot *old, const snapshot *cur) {
  for (size_t i = 0; i < old->n; i++) {
    entry *e = old->v[i];
    if (snap_find(cur, e->kind, e->name) == e) continue;
    for (size_t c = 0; c < reg->ncollectors; c++) metrics_remove_entry(reg->collectors[c], e);
    sink_detach_entry(reg, e);
  }
  for (size_t i = 0; i < cur->n; i++) {
    entry *e = cur->v[i];
    if (snap_find(old, e->kind, e->name) == e) continue;
    for (size_t c = 0; c < reg->ncollectors; c++)
      (void)metrics_add_entry(reg->collectors[c], e); /* ENOMEM: left out (registry.h) */
    sink_attach_entry(reg, e);
  }
}

resil_status resil_registry_metrics_add(resil_registry *reg, resil_metrics *m) {
  if (!reg) return RESIL_EMISUSE;
  if (!m) return RESIL_EINVAL;
  resil_status st = RESIL_OK;
  pthread_mutex_lock(&reg->reload_mu);
  for (size_t c = 0; c < reg->ncollectors; c++)
    if (reg->collectors[c] == m) st = RESIL_EINVAL;
  if (st == RESIL_OK && reg->ncollectors == MAX_COLLECTORS) st = RESIL_ESTATE;
  size_t i = 0;
  for (; st == RESIL_OK && i < reg->cur->n; i++) st = metrics_add_entry(m, reg->cur->v[i]);
  if (st == RESIL_OK) {
    reg->collectors[reg->ncollectors++] = m;
  } else {
    /* i - 1 failed (or nothing was tried): undo the ones before it */
    for (size_t k = 0; i > 0 && k + 1 < i; k++) metrics_remove_entry(m, reg->cur->v[k]);
  }
  pthread_mutex_unlock(&reg->reload_mu);
  return st;
}

static void collector_drop(resil_registry *reg, size_t c) {
  for (size_t i = 0; i < reg->cur->n; i++) metrics_remove_entry(reg->collectors[c], reg->cur->v[i]);
  reg->collectors[c] = reg->collectors[--reg->ncollectors];
}

resil_status resil_registry_metrics_remove(resil_registry *reg, resil_metrics *m) {
  if (!reg) return RESIL_EMISUSE;
  resil_status st = RESIL_EINVAL;
  pthread_mutex_lock(&reg->reload_mu);
  for (size_t c = 0; c < reg->ncollectors; c++)
    if (reg->collectors[c] == m) {
      collector_drop(reg, c);
      st = RESIL_OK;
      break;
    }
  pthread_mutex_unlock(&reg->reload_mu);
  return st;
}

static void sink_drop(resil_registry *reg) {
  for (size_t i = 0; i < reg->cur->n; i++) sink_detach_entry(reg, reg->cur->v[i]);
  resil__reg_events_set(reg->ev, NULL);
  reg->sink = NULL;
}

resil_status resil_registry_events_attach(resil_registry *reg, resil_event_sink *sink) {
  if (!reg) return RESIL_EMISUSE;
#ifdef RESIL_CONFIG_HTTP
  pthread_mutex_lock(&reg->reload_mu);
  if (reg->sink) sink_drop(reg);
  reg->sink = sink;
  resil__reg_events_set(reg->ev, sink);
  for (size_t i = 0; sink && i < reg->cur->n; i++) sink_attach_entry(reg, reg->cur->v[i]);
  pthread_mutex_unlock(&reg->reload_mu);
  return RESIL_OK;
#else
  return sink ? RESIL_ESTATE : RESIL_OK;
#endif
}

/* The reload's line (reload_mu held). */
static void sink_reload(resil_registry *reg, const char *file, resil_status st,
                        const resil_registry_error *e) {
#ifdef RESIL_CONFIG_HTTP
  if (!reg->sink) return;
  if (st == RESIL_OK) {
    (void)resil_event_reload_counts(reg->sink, "registry", file, reg->last.generation,
                                    reg->last.kept, reg->last.replaced, reg->last.added,
                                    reg->last.removed);
  } else {
    char msg[1024];
    if (e->status != RESIL_OK)
      (void)resil_registry_error_format(e, msg, sizeof msg);
    else
      snprintf(msg, sizeof msg, "%s", resil_strerror(st));
    (void)resil_event_reload(reg->sink, "registry", 0, file, 0, 0, msg);
  }
#else
  (void)reg, (void)file, (void)st, (void)e;
#endif
}

void resil_registry_load_options_init_sized(resil_registry_load_options *o, size_t struct_size) {
  if (!o) return;
  resil_registry_load_options full;
  memset(&full, 0, sizeof full);
  full.struct_size = sizeof full;
  resil__sized_out(o, struct_size, &full, sizeof full);
}

/* The flags of opts (0 for NULL), or RESIL_EINVAL with err set. */
static resil_status opts_flags(const resil_registry_load_options *opts, uint32_t *flags,
                               resil_registry_error *uerr) {
  *flags = 0;
  if (!opts) return RESIL_OK;
  const char *why = NULL;
  if (resil__sized_size(opts) < offsetof(resil_registry_load_options, flags) + sizeof opts->flags)
    why = "resil_registry_load_options: not passed through resil_registry_load_options_init()";
  else if (opts->flags & ~(uint32_t)RESIL_REGISTRY_NO_OPEN)
    why = "resil_registry_load_options: unknown flags";
  if (!why) {
    *flags = opts->flags;
    return RESIL_OK;
  }
  if (uerr && resil__sized_size(uerr) >= sizeof(resil_registry_error)) {
    resil_registry_error full;
    memset(&full, 0, sizeof full);
    full.struct_size = sizeof full;
    full.status = RESIL_EINVAL;
    snprintf(full.message, sizeof full.message, "%s", why);
    resil__sized_out(uerr, resil__sized_size(uerr), &full, sizeof full);
  }
  return RESIL_EINVAL;
}

resil_status resil_registry_load_string(const char *text, size_t len, const char *name,
                                        resil_registry **out, resil_registry_error *err) {
  return resil_registry_load_string_ex(text, len, name, NULL, out, err);
}

resil_status resil_registry_load_string_ex(const char *text, size_t len, const char *name,
                                           const resil_registry_load_options *opts,
                                           resil_registry **out, resil_registry_error *err) {
  clear_err(err);
  if (!text || !out) return RESIL_EINVAL;
  uint32_t flags;
  resil_status st = opts_flags(opts, &flags, err);
  if (st) return st;
  snapshot *snap = NULL;
  resil_registry_reload_stats rs;
  memset(&rs, 0, sizeof rs);
  resil__reg_events *ev = NULL;
#ifdef RESIL_CONFIG_HTTP
  if (!(ev = resil__reg_events_new())) return RESIL_ENOMEM;
#endif
  st = load(text, len, name, flags, NULL, NULL, &snap, &rs, err, ev);
  if (st) {
    resil__reg_events_unref(ev);
    return st;
  }
  resil_registry *r = calloc(1, sizeof *r);
  if (!r || pthread_rwlock_init(&r->lock, NULL)) {
    free(r);
    snap_free(snap);
    resil__reg_events_unref(ev);
    return RESIL_ENOMEM;
  }
  if (pthread_mutex_init(&r->reload_mu, NULL)) {
    pthread_rwlock_destroy(&r->lock);
    free(r);
    snap_free(snap);
    resil__reg_events_unref(ev);
    return RESIL_ESYS;
  }
  r->ev = ev;
  r->cur = snap;
  r->flags = flags;
  atomic_init(&r->gen, 1);
  rs.struct_size = sizeof rs;
  rs.generation = 1;
  r->last = rs;
  *out = r;
  return RESIL_OK;
}

resil_status resil_registry_load_file(const char *path, resil_registry **out,
                                      resil_registry_error *err) {
  return resil_registry_load_file_ex(path, NULL, out, err);
}

resil_status resil_registry_load_file_ex(const char *path, const resil_registry_load_options *opts,
                                         resil_registry **out, resil_registry_error *err) {
  clear_err(err);
  if (!path || !out) return RESIL_EINVAL;
  uint32_t flags;
  resil_status st = opts_flags(opts, &flags, err);
  if (st) return st;
  char *text;
  size_t len;
  st = read_file(path, &text, &len, err);
  if (st) return st;
  st = resil_registry_load_string_ex(text, len, path, opts, out, err);
  free(text);
  return st;
}

void resil_registry_free(resil_registry *reg) {
  if (!reg) return;
  while (reg->ncollectors) collector_drop(reg, reg->ncollectors - 1);
  if (reg->sink) sink_drop(reg);
  snap_free(reg->cur);
  snap_free(reg->grave);
  resil__reg_events_unref(reg->ev);
  pthread_mutex_destroy(&reg->reload_mu);
  pthread_rwlock_destroy(&reg->lock);
  free(reg);
}

/* 1 when e, or what it keeps alive, holds something outside the process's
 * memory and threads of its own making that a removal must release: an
 * open store, an HTTP client's connections, a thread pool's threads. */
static int holds_resources(const entry *e) {
  if (e->kind == RESIL_REG_STORE || e->kind == RESIL_REG_HTTP_CLIENT ||
      e->kind == RESIL_REG_THREADPOOL || e->kind == RESIL_REG_SHARED)
    return 1;
  for (size_t i = 0; i < e->ndeps; i++)
    if (holds_resources(e->deps[i])) return 1;
  return 0;
}

/* The entries of old that cur no longer holds and that may come back (no
 * resources held), each with a reference; NULL when there are none (or no
 * memory: then they are freed as before, their state not kept). */
static snapshot *grave_of(const snapshot *old, const snapshot *cur) {
  size_t n = 0;
  for (size_t i = 0; i < old->n; i++) {
    entry *e = old->v[i];
    if (snap_find(cur, e->kind, e->name) != e && !holds_resources(e)) n++;
  }
  if (n == 0) return NULL;
  snapshot *g = calloc(1, sizeof *g);
  if (g) g->v = calloc(n, sizeof *g->v);
  if (!g || !g->v) {
    free(g);
    return NULL;
  }
  for (size_t i = 0; i < old->n; i++) { /* old is sorted: so is g */
    entry *e = old->v[i];
    if (snap_find(cur, e->kind, e->name) != e && !holds_resources(e)) {
      entry_ref(e);
      g->v[g->n++] = e;
    }
  }
  return g;
}

/* reload_mu held. The caller's err gets the error (when its size allows). */
static resil_status reload_locked(resil_registry *reg, const char *text, size_t len,
                                  const char *name, resil_registry_error *uerr) {
  /* Only reloads replace cur, and they are serialised by reload_mu: cur can
   * be read here without the rwlock. */
  snapshot *snap = NULL;
  resil_registry_reload_stats rs;
  memset(&rs, 0, sizeof rs);
  resil_registry_error le;
  resil_registry_error_init(&le);
  resil_status st = load(text, len, name, reg->flags, reg->cur, reg->grave, &snap, &rs, &le, reg->ev);
  if (st == RESIL_OK) {
    pthread_rwlock_wrlock(&reg->lock);
    snapshot *old = reg->cur;
    reg->cur = snap;
    rs.struct_size = sizeof rs;
    rs.generation = atomic_fetch_add(&reg->gen, 1) + 1;
    reg->last = rs;
    pthread_rwlock_unlock(&reg->lock);
    follow_swap(reg, old, snap);
    snapshot *prev_grave = reg->grave;
    reg->grave = grave_of(old, snap);
    snap_free(old); /* entries kept or leased live on */
    snap_free(prev_grave); /* those that did not come back */
  }
  sink_reload(reg, name, st, &le);
  if (st != RESIL_OK && uerr && resil__sized_size(uerr) >= sizeof(resil_registry_error))
    resil__sized_out(uerr, resil__sized_size(uerr), &le, sizeof le);
  return st;
}

resil_status resil_registry_reload_string(resil_registry *reg, const char *text, size_t len,
                                          const char *name, resil_registry_error *err) {
  clear_err(err);
  if (!reg) return RESIL_EMISUSE;
  if (!text) return RESIL_EINVAL;
  pthread_mutex_lock(&reg->reload_mu);
  resil_status st = reload_locked(reg, text, len, name, err);
  pthread_mutex_unlock(&reg->reload_mu);
  return st;
}

resil_status resil_registry_reload(resil_registry *reg, const char *path,
                                   resil_registry_error *err) {
  clear_err(err);
  if (!reg) return RESIL_EMISUSE;
  if (!path) return RESIL_EINVAL;
  char *text;
  size_t len;
  resil_registry_error le;
  resil_registry_error_init(&le);
  resil_status st = read_file(path, &text, &len, &le);
  if (st) {
    pthread_mutex_lock(&reg->reload_mu);
    sink_reload(reg, path, st, &le);
    pthread_mutex_unlock(&reg->reload_mu);
    if (err && resil__sized_size(err) >= sizeof(resil_registry_error))
      resil__sized_out(err, resil__sized_size(err), &le, sizeof le);
    return st;
  }
  st = resil_registry_reload_string(reg, text, len, path, err);
  free(text);
  return st;
}

resil_status resil_registry_last_reload_sized(resil_registry *reg,
                                             resil_registry_reload_stats *out,
                                             size_t struct_size) {
  if (!reg) return RESIL_EMISUSE;
  if (!out) return RESIL_EINVAL;
  pthread_rwlock_rdlock(&reg->lock);
  resil_registry_reload_stats rs = reg->last;
  pthread_rwlock_unlock(&reg->lock);
  resil__sized_out(out, struct_size, &rs, sizeof rs);
  return RESIL_OK;
}

uint64_t resil_registry_generation(resil_registry *reg) {
  return reg ? atomic_load(&reg->gen) : 0;
}

void *resil_registry_get(resil_registry *reg, resil_registry_kind kind, const char *name) {
  if (!reg || !name || (unsigned)kind >= RESIL_REG_KIND_COUNT_) return NULL;
  pthread_rwlock_rdlock(&reg->lock);
  entry *e = snap_find(reg->cur, kind, name);
  void *h = e ? e->handle : NULL;
  pthread_rwlock_unlock(&reg->lock);
  return h;
}

int64_t resil_registry_chain_total_timeout_ns(resil_registry *reg, const char *name) {
  if (!reg || !name) return -1;
  pthread_rwlock_rdlock(&reg->lock);
  entry *e = snap_find(reg->cur, RESIL_REG_CHAIN, name);
  int64_t t = e ? e->total_timeout_ns : -1;
  pthread_rwlock_unlock(&reg->lock);
  return t;
}

resil_status resil_registry_http_client_timeouts_sized(resil_registry *reg, const char *name,
                                                      resil_registry_http_timeouts *out,
                                                      size_t struct_size) {
  if (!reg) return RESIL_EMISUSE;
  if (!name || !out) return RESIL_EINVAL;
  pthread_rwlock_rdlock(&reg->lock);
  entry *e = snap_find(reg->cur, RESIL_REG_HTTP_CLIENT, name);
  resil_registry_http_timeouts t;
  if (e) t = e->http;
  pthread_rwlock_unlock(&reg->lock);
  if (!e) return RESIL_EINVAL;
  resil__sized_out(out, struct_size, &t, sizeof t);
  return RESIL_OK;
}

resil_status resil_registry_http_client_balance_sized(resil_registry *reg, const char *name,
                                                     resil_registry_http_balance *out,
                                                     size_t struct_size) {
  if (!reg) return RESIL_EMISUSE;
  if (!name || !out) return RESIL_EINVAL;
  pthread_rwlock_rdlock(&reg->lock);
  entry *e = snap_find(reg->cur, RESIL_REG_HTTP_CLIENT, name);
  resil_registry_http_balance b;
  if (e) b = e->http_balance;
  pthread_rwlock_unlock(&reg->lock);
  if (!e) return RESIL_EINVAL;
  resil__sized_out(out, struct_size, &b, sizeof b);
  return RESIL_OK;
}

resil_status resil_registry_recovery_sized(resil_registry *reg, resil_registry_kind kind,
                                          const char *name, resil_registry_recovery *out,
                                          size_t struct_size) {
  if (!reg) return RESIL_EMISUSE;
  if (!name || !out ||
      (kind != RESIL_REG_BREAKER && kind != RESIL_REG_RETRY && kind != RESIL_REG_HEDGE))
    return RESIL_EINVAL;
  pthread_rwlock_rdlock(&reg->lock);
  entry *e = snap_find(reg->cur, kind, name);
  resil_registry_recovery r;
  if (e) r = e->recovery;
  pthread_rwlock_unlock(&reg->lock);
  if (!e) return RESIL_EINVAL;
  resil__sized_out(out, struct_size, &r, sizeof r);
  return RESIL_OK;
}

resil_breaker *resil_registry_breaker(resil_registry *reg, const char *name) {
  return resil_registry_get(reg, RESIL_REG_BREAKER, name);
}
resil_retry *resil_registry_retry(resil_registry *reg, const char *name) {
  return resil_registry_get(reg, RESIL_REG_RETRY, name);
}
resil_ratelimiter *resil_registry_ratelimiter(resil_registry *reg, const char *name) {
  return resil_registry_get(reg, RESIL_REG_RATELIMITER, name);
}
resil_bulkhead *resil_registry_bulkhead(resil_registry *reg, const char *name) {
  return resil_registry_get(reg, RESIL_REG_BULKHEAD, name);
}
resil_timelimiter *resil_registry_timelimiter(resil_registry *reg, const char *name) {
  return resil_registry_get(reg, RESIL_REG_TIMELIMITER, name);
}
resil_hedge *resil_registry_hedge(resil_registry *reg, const char *name) {
  return resil_registry_get(reg, RESIL_REG_HEDGE, name);
}
resil_chain *resil_registry_chain(resil_registry *reg, const char *name) {
  return resil_registry_get(reg, RESIL_REG_CHAIN, name);
}
resil_http_client *resil_registry_http_client(resil_registry *reg, const char *name) {
  return resil_registry_get(reg, RESIL_REG_HTTP_CLIENT, name);
}
resil_store *resil_registry_store(resil_registry *reg, const char *name) {
  return resil_registry_get(reg, RESIL_REG_STORE, name);
}
resil_retry_budget *resil_registry_retry_budget(resil_registry *reg, const char *name) {
  return resil_registry_get(reg, RESIL_REG_RETRY_BUDGET, name);
}
resil_shared *resil_registry_shared(resil_registry *reg, const char *name) {
  return resil_registry_get(reg, RESIL_REG_SHARED, name);
}
resil_threadpool *resil_registry_threadpool(resil_registry *reg, const char *name) {
  return resil_registry_get(reg, RESIL_REG_THREADPOOL, name);
}

void *resil_registry_acquire(resil_registry *reg, resil_registry_kind kind, const char *name,
                             resil_registry_lease **lease) {
  if (lease) *lease = NULL;
  if (!reg || !name || !lease || (unsigned)kind >= RESIL_REG_KIND_COUNT_) return NULL;
  pthread_rwlock_rdlock(&reg->lock);
  entry *e = snap_find(reg->cur, kind, name);
  if (e) entry_ref(e);
  pthread_rwlock_unlock(&reg->lock);
  if (!e) return NULL;
  *lease = (resil_registry_lease *)e;
  return e->handle;
}

void resil_registry_release(resil_registry_lease *lease) { entry_unref((entry *)lease); }

size_t resil_registry_count(resil_registry *reg, resil_registry_kind kind) {
  if (!reg) return 0;
  size_t n = 0;
  pthread_rwlock_rdlock(&reg->lock);
  for (size_t i = 0; i < reg->cur->n; i++)
    if (kind == RESIL_REG_KIND_COUNT_ || reg->cur->v[i]->kind == kind) n++;
  pthread_rwlock_unlock(&reg->lock);
  return n;
}

resil_status resil_registry_foreach(resil_registry *reg, resil_registry_visit_fn fn,
                                    void *user) {
  if (!reg) return RESIL_EMISUSE;
  if (!fn) return RESIL_EINVAL;
  pthread_rwlock_rdlock(&reg->lock);
  for (size_t i = 0; i < reg->cur->n; i++) {
    entry *e = reg->cur->v[i];
    if (fn(user, e->kind, e->name, e->handle)) break;
  }
  pthread_rwlock_unlock(&reg->lock);
  return RESIL_OK;
}
