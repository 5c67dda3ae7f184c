/* libresil-redis: a rate limiter whose permits are kept in Redis, exact
 * for any number of processes and hosts (DESIGN §8.2). A separate library:
 * link libresil-redis (pkg-config resil-redis, CMake resil::redis) and
 * include <resil/redis.h>; the umbrella header resil.h does not include it.
 * libresil itself does not depend on hiredis. Since 0.2.
 *
 * resil_redis_ratelimiter_new() returns an ordinary resil_ratelimiter
 * (ratelimit.h, "backends"): reserve, acquire, run, a chain's layer and the
 * metrics work on it unchanged, and resil_ratelimiter_free() frees it.
 *
 * The rule is GCRA (the generic cell rate algorithm), run by one Lua
 * script with EVALSHA (loaded with SCRIPT LOAD when a connection is made,
 * loaded again once when Redis answers NOSCRIPT: after a restart, a
 * failover or SCRIPT FLUSH). Redis's TIME is the only clock (read inside
 * the script; Redis 7 replicates a script's effects, so that is allowed);
 * all arithmetic is on integer microseconds, the emission interval
 * refresh_period / limit_for_period kept as a whole part and a remainder
 * in 1/limit_for_period of a microsecond, so no rounding accumulates. The
 * key holds the theoretical arrival time and the limiter's rate, and
 * expires (PX, set by the same script) when it would say nothing more than
 * a missing key. Over any interval of length L, the permits admitted are
 * at most burst + L / (refresh_period / limit_for_period), for any number
 * of clients. A reservation's wait is rounded up to the microsecond, so a
 * permit is never used early.
 *
 * Each decision takes one round trip on one of the limiter's connections
 * (blocking sockets' I/O done with poll() under one deadline, hiredis only
 * formats and parses), and waits for it at most
 *   min(the limiter's timeout_ns, the ctx's remaining deadline,
 *       redis_timeout_ns)
 * (timeout_ns counts when above 0: a fail-fast limiter, timeout 0, still
 * asks Redis within the other two)
 * (connecting, AUTH, SELECT and SCRIPT LOAD included, and the wait for a
 * free connection); a host name is resolved by getaddrinfo(), which that
 * bound does not cover: give an address to have every wait bounded. A
 * permit the limiter reserves from the future is then waited for as the
 * local limiter's are (bounded by timeout_ns and the deadline, less the
 * time the decision spent before its command was sent).
 * resil_ratelimiter_available, _nanos_to_wait and _get_metrics ask Redis
 * too (a round trip bounded the same way; 0 when Redis cannot answer).
 *
 * When Redis cannot decide (no connection, a timeout, an error reply, no
 * free connection before the bound, or the breaker on the connection open)
 * the failure policy decides instead, and each such decision is counted:
 *   OPEN    the permit is given;
 *   CLOSED  refused with RESIL_REASON_RATE_LIMITER_UNAVAILABLE (REJECTED,
 *           "rate limiter unavailable");
 *   LOCAL   a local limiter of limit_for_period / expected_instances
 *           (at least 1) per refresh_period decides, named NAME + ":local",
 *           in cfg.shared when a segment is given (shared by the host's
 *           processes).
 * A breaker (breaker.h) guards the Redis connection: once it is open, a
 * decision costs no I/O until its wait ends and a probe goes through.
 *
 * Passwords are never printed: an error that quotes the URI shows its
 * userinfo as [REDACTED].
 *
 * The engine path (DESIGN §8.2; the backend's reserve_async, ratelimit.h):
 * on the async engine (engine.h) a decision never blocks the loop. Each
 * engine that asks gets one connection of its own (made on its first
 * decision, non-blocking: connect, AUTH, SELECT and SCRIPT LOAD pipelined;
 * the pool of `connections` is the blocking path's), driven only by the
 * engine's loop thread: its fd is watched through the engine's adapter and
 * its one timer is multiplexed on the engine's (the adapter keeps its one
 * timer). The decisions are pipelined on it: the EVALSHAs of one loop
 * iteration go out in one write, the replies are matched in order. Each
 * decision is bounded as above, on the loop's clock: when the bound passes
 * the failure policy answers it, and its reply, if it comes later, is
 * discarded. A connection error sends the decisions pending on it to the
 * failure policy, except those sent on a connection made before they
 * began, which are sent again once on a new one within their bound (as
 * on the blocking path); NOSCRIPT costs one SCRIPT LOAD for all the
 * decisions pipelined before it, each then sent again. The breaker, the
 * failure policy and the counters are the blocking path's; `writes` counts
 * the engine path's writes. A host name is resolved by getaddrinfo()
 * when the connection is made, on the loop's thread: give an address to
 * keep every call on the loop non-blocking. The engine's check before a
 * hedged attempt asks with a deadline of now: no Redis I/O fits, so the
 * failure policy answers it. A limiter may be freed before an engine that
 * used it (once its calls are done): its connection on that engine, and
 * what the limiter needs for it, go when the engine is freed.
 *
 * Thread-safety: a limiter may be used from any number of threads at once
 * (connections are taken under a mutex each; a thread that finds none free
 * waits for one within its bound). A limiter, like its connections, must
 * not be used in a child after fork(). */
#ifndef RESIL_REDIS_H
#define RESIL_REDIS_H

#include <stddef.h>
#include <stdint.h>

#include "alloc.h"
#include "breaker.h"
#include "clock.h"
#include "metrics.h"
#include "ratelimit.h"
#include "shared.h"
#include "status.h"
#include "version.h"

#ifdef __cplusplus
extern "C" {
#endif

/* What decides when Redis cannot (see above). Since 0.2. */
typedef enum resil_redis_failure {
  RESIL_REDIS_FAILURE_OPEN = 1,
  RESIL_REDIS_FAILURE_CLOSED = 2,
  RESIL_REDIS_FAILURE_LOCAL = 3
} resil_redis_failure;

typedef struct resil_redis_ratelimiter_config {
  /* Sized struct (version.h); set by resil_redis_ratelimiter_config_init(). */
  size_t struct_size;
  /* Instance name, copied; also the Redis key's suffix. Default
   * "ratelimiter". */
  const char *name;
  /* Required: redis://[[USER]:PASSWORD@]HOST[:PORT][/DB]. HOST a name, an
   * IPv4 address or an IPv6 one in brackets; PORT 1..65535, default 6379;
   * DB 0..2147483647, default 0 (SELECT when not 0). USER and PASSWORD are
   * percent-decoded; with a PASSWORD the connection sends AUTH (with USER
   * when given: Redis 6 ACLs). Nothing else (no query, no rediss://).
   * Default NULL (an error naming "uri"). */
  const char *uri;
  /* The key is key_prefix followed by name. Every limiter of the same key
   * shares the permits; all must have the same limit_for_period and
   * refresh_period_ns (a limiter finding another rate in the key is
   * refused by Redis: an error reply, counted in redis_errors, and the
   * failure policy decides; unless it takes the key over:
   * take_over_other_rate). Default "resil:rl:". */
  const char *key_prefix;
  /* Permits per refresh period, 1..2147483647. Default 50. */
  int64_t limit_for_period;
  /* A whole number of microseconds (Redis's clock), 1 us..2^50 us.
   * Default 1 s. */
  int64_t refresh_period_ns;
  /* Permits that may be taken at once after an idle time (GCRA's burst),
   * 0..2147483647; 0 = limit_for_period (as a fresh cycle of the local
   * limiter). burst × limit_for_period and burst × refresh_period (in us)
   * must not exceed 2^50 (the script's numbers are exact below 2^53).
   * Default 0. */
  int64_t burst;
  /* Longest wait for a reserved permit, as the local limiter's timeout_ns
   * (0 = fail fast: never reserve). It bounds the permit's wait, not the
   * time Redis takes to answer (redis_timeout_ns does). 0..2^50 us, and
   * as for the local limiter (whose rules the handle keeps, and which the
   * LOCAL policy uses) limit_for_period × (timeout / refresh_period + 1)
   * at most 2^31 - 1. Default 5 s. */
  int64_t timeout_ns;
  /* Longest wait for Redis per decision, 1 ms..60 s. Default 20 ms. */
  int64_t redis_timeout_ns;
  /* Default RESIL_REDIS_FAILURE_LOCAL. */
  resil_redis_failure failure;
  /* Processes expected to share the key, for the LOCAL policy's share,
   * 1..1000000. Default 1. */
  int64_t expected_instances;
  /* A segment (shared.h) for the LOCAL policy's limiter, or NULL (per
   * process). Must stay open until the limiter is freed. Default NULL. */
  resil_shared *shared;
  /* Connections to Redis, each used by one decision at a time, made when
   * first needed and made again after an error, 1..64. Default 4. */
  int connections;
  /* The breaker on the Redis connection, or NULL for its default: a count
   * window of 10 results, 5 at least, opening at 50 % failures, OPEN for
   * 1 s, 1 probe; named NAME + ":redis". Any breaker config; its clock
   * and allocator default to this config's. Default NULL. */
  const resil_breaker_config *breaker;
  /* NULL = resil_clock_system(). The clock a reserved permit is waited
   * for on, and the breaker's; Redis's I/O is always bounded on
   * CLOCK_MONOTONIC. */
  const resil_clock *clock;
  /* NULL = malloc/free. */
  const resil_allocator *alloc;
  /* Told when the failure policy takes over (entered 1, cause a static
   * sentence: the breaker is open, no answer, an error reply, no free
   * connection) and when Redis decides again (entered 0, cause NULL):
   * called by the deciding thread, inside the decision, once per change
   * (calls from two threads may overlap; an entered is followed by at most
   * one left). It must not call the limiter. NULL = none. Default NULL. */
  void (*on_fallback)(void *user, const char *name, int entered, const char *cause);
  void *on_fallback_user;
  /* 1: the limiter's first decision takes over a key holding another rate
   * (limit_for_period or refresh_period_ns) instead of being refused: the
   * key starts afresh under this limiter's rate (as a fresh key: a full
   * burst), and from then on a limiter of the old rate is refused (its
   * failure policy decides) until it is made again with the new one. What
   * a configuration change wants (the registry sets it: the file is the
   * truth, as for a shared segment's instances, DESIGN 8.1); never set it
   * on limiters whose rates may differ by mistake. 0 (default): another
   * rate is always refused. Since 0.2. */
  int take_over_other_rate;
} resil_redis_ratelimiter_config;

/* Writes the documented defaults and struct_size. A macro passing
 * sizeof(resil_redis_ratelimiter_config). NULL is a no-op. Since 0.2. */
RESIL_API void resil_redis_ratelimiter_config_init_sized(resil_redis_ratelimiter_config *cfg,
                                                         size_t struct_size);
#define resil_redis_ratelimiter_config_init(cfg)                               \
  resil_redis_ratelimiter_config_init_sized((cfg), sizeof(resil_redis_ratelimiter_config))

/* Validates cfg and creates the limiter. Does not connect: the first
 * decision does (so a Redis down at start is the failure policy's, not an
 * error). Returns RESIL_OK; RESIL_EINVAL (cfg or out NULL, a config never
 * passed through _init, a field out of range or a bad URI: err names the
 * field, e.g. "uri", "burst", with the URI's password redacted);
 * RESIL_ESTATE (the LOCAL policy's segment is required and unusable, as
 * resil_ratelimiter_new says); RESIL_ENOMEM. err may be NULL. Since 0.2. */
RESIL_API resil_status resil_redis_ratelimiter_new(const resil_redis_ratelimiter_config *cfg,
                                                   resil_ratelimiter **out,
                                                   resil_error *err);

/* Counters since creation, each monotonic (not one snapshot). */
typedef struct resil_redis_ratelimiter_metrics {
  /* Sized struct (version.h): the bytes the library wrote. */
  size_t struct_size;
  uint64_t redis_decisions;  /* decisions Redis made (granted or refused; the
                                peeks of _available and the metrics are not
                                counted, their failures are)                 */
  uint64_t redis_errors;     /* round trips that failed (I/O, timeout, error
                                reply, protocol): the connection is dropped
                                unless the reply was an error                 */
  uint64_t breaker_rejected; /* decisions that skipped Redis: breaker open    */
  uint64_t busy;             /* no free connection within the bound           */
  uint64_t fallback_open;    /* decisions of the failure policy, by policy    */
  uint64_t fallback_closed;
  uint64_t fallback_local;
  uint64_t noscript_reloads; /* NOSCRIPT answered: the script loaded again    */
  uint64_t connects;         /* connections made (the first ones included)    */
  int64_t last_decision_ns;  /* the last Redis round trip's duration          */
  int64_t max_decision_ns;   /* the longest decision (failures included)      */
  int64_t total_decision_ns; /* the Redis decisions' round trips, summed      */
  uint64_t fallbacks_entered; /* times the failure policy took over          */
  uint64_t writes; /* the engine path's writes to Redis, each carrying the
                      commands queued since the last (pipelined): compare
                      with redis_decisions. Since 0.2 (added after
                      fallbacks_entered)                                   */
  /* Since 0.2: permits of cancelled reserved waits given back to Redis
   * (the blocking path's acquire; one round trip each). */
  uint64_t given_back;
} resil_redis_ratelimiter_metrics;

/* Fills *out up to the caller's struct size (a macro passing
 * sizeof(resil_redis_ratelimiter_metrics)). RESIL_OK; RESIL_EINVAL (out
 * NULL); RESIL_EMISUSE (rl NULL or not a Redis limiter). Thread-safe.
 * Since 0.2. */
RESIL_API resil_status resil_redis_ratelimiter_get_metrics_sized(
    const resil_ratelimiter *rl, resil_redis_ratelimiter_metrics *out, size_t struct_size);
#define resil_redis_ratelimiter_get_metrics(rl, out)                           \
  resil_redis_ratelimiter_get_metrics_sized((rl), (out),                       \
                                            sizeof(resil_redis_ratelimiter_metrics))

/* Adds the limiter's Redis figures to a collector (metrics.h; the
 * limiter's own, resil_metrics_add_ratelimiter, are added apart):
 *   resil_redis_ratelimiter_decisions_total{by=redis|open|closed|local}
 *   resil_redis_ratelimiter_failures_total{cause=error|breaker_open|busy}
 *   resil_redis_ratelimiter_noscript_reloads_total
 *   resil_redis_ratelimiter_connects_total
 *   resil_redis_ratelimiter_fallbacks_entered_total
 *   resil_redis_ratelimiter_writes_total (the engine path's writes)
 *   resil_redis_ratelimiter_decision_seconds_total (Redis decisions, summed)
 *   resil_redis_ratelimiter_decision_seconds{stat=last|max}
 *   resil_redis_ratelimiter_given_back_total (cancelled waits' permits)
 * name NULL = the limiter's. resil_metrics_remove(m, rl) removes them (with
 * the limiter's own). RESIL_OK; RESIL_EMISUSE (m NULL); RESIL_EINVAL (rl
 * not a Redis limiter); RESIL_ENOMEM. Since 0.2. */
RESIL_API resil_status resil_redis_ratelimiter_metrics_add(resil_metrics *m, const char *name,
                                                           const resil_ratelimiter *rl);

/* The breaker on the limiter's Redis connection (owned by the limiter), or
 * NULL when rl is not a Redis limiter. Since 0.2. */
RESIL_API resil_breaker *resil_redis_ratelimiter_breaker(const resil_ratelimiter *rl);

/* The local limiter of the LOCAL policy (owned by the limiter), or NULL
 * (another policy, or not a Redis limiter). Since 0.2. */
RESIL_API resil_ratelimiter *resil_redis_ratelimiter_local(const resil_ratelimiter *rl);

#ifdef __cplusplus
}
#endif
#endif
