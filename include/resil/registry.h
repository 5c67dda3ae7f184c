/* resil_registry: named policy instances and chains built from one YAML
 * file (DESIGN §10). Since 0.2. Library libresil-config (pkg-config
 * resil-config), parsed with libyaml.
 *
 * File format, after Resilience4j's Spring configuration: one section per
 * kind (circuitbreaker, retry, ratelimiter, bulkhead, timelimiter, hedge,
 * chain, http_client, store, retry_budget, threadpool), each with optional
 * `configs` (named sets of
 * settings) and `instances` (the objects created):
 *
 *   circuitbreaker:
 *     configs:
 *       default:      {failure_rate_threshold: 50, open_wait: 30s}
 *       slow_backend: {slow_call_duration: 2s, window_size: 20, minimum_calls: 10}
 *     instances:
 *       payments: {base_config: slow_backend, failure_rate_threshold: 25}
 *   retry:
 *     instances:
 *       payments: {max_attempts: 3, backoff: exponential, initial_wait: 100ms}
 *   chain:
 *     instances:
 *       payments:
 *         total_timeout: 2s
 *         layers:                   # outermost first
 *           - retry: payments
 *           - circuitbreaker: payments
 *
 * An instance's settings are, from weakest to strongest: the library's
 * defaults (the policy's _config_init), `configs.default`, the config named
 * by `base_config` (when given), then the instance's own keys. Keys are the
 * C config fields' names (breaker.h, retry.h, ...) without the `_ns` and
 * `_pct` suffixes. Durations take a unit: ns, us, ms, s, m (or min), h, d,
 * with an optional decimal part ("1.5s"); a bare 0 is accepted. Sizes take
 * B, KB, KiB, MB, MiB, GB or GiB. Percentages may be written 50 or "50%".
 * Booleans are true/false. Enumerations are written in lower case
 * (window_type: count | time; backoff: fixed | exponential |
 * exponential_full_jitter | exponential_equal_jitter | decorrelated_jitter;
 * initial_state: closed | open | half_open | disabled | forced_open |
 * metrics_only); class masks are lists of class names (failure_classes:
 * [server_error, not_sent, unknown, http_429]). A chain's `layers` is a
 * sequence of one-key maps `KIND: NAME` naming instances of the same file
 * (retry, circuitbreaker, ratelimiter, timelimiter, bulkhead, hedge,
 * threadpool).
 *
 * Shared objects are instances too and are named where they are used:
 * `retry_budget` (mode: finagle | grpc, ttl, min_retries_per_s,
 * percent_can_retry, max_tokens, token_ratio_milli) by a retry's or a
 * hedge's `budget: NAME`; `threadpool` (threads, queue_capacity) by a time
 * limiter's or a hedge's `executor: NAME` (a hedge with an executor hedges
 * in a blocking resil_chain_run, hedge.h). An instance that names another
 * is kept by a reload only when the one it names was kept.
 *
 * Recovery in the seed's order (Since 0.2; breaker.h "Ramp", DESIGN §2.9):
 * a circuitbreaker takes ramp_duration (0, the default, = no ramp; else at
 * least 1ms), ramp_min_percent (1..100, default 10) and ramp_aggression (a
 * number > 0, default 1 = linear); a retry takes retry_during_recovery and
 * a hedge hedge_during_recovery (true | false, default false: retries and
 * hedges last), and a standalone retry or hedge `recovery_breaker: NAME`,
 * a circuitbreaker instance of the file it watches (in a chain with a
 * breaker layer inside the retry or hedge layer, that one instead). A value out
 * of range is reported at its key as any other; a name that is no
 * circuitbreaker instance as a budget's ("no circuitbreaker instance 'x'
 * in this file", or a "did you mean"). A reload that changes a breaker's
 * ramp settings replaces it (a new object in its initial state), and with
 * it every retry and hedge naming it and every chain using them:
 *
 *   circuitbreaker:
 *     instances:
 *       payments: {open_wait: 10s, ramp_duration: 30s, ramp_min_percent: 10}
 *   retry:
 *     instances:
 *       payments: {max_attempts: 3, recovery_breaker: payments}
 *       reports: {max_attempts: 3, retry_during_recovery: true}
 *
 * resil_registry_recovery() reads these settings back (`resil describe`).
 *
 * Shared segments (Since 0.2; shared.h, DESIGN §8.1): section `shared`
 * names segments, each instance's name being the segment's, with the keys
 * of resil_shared_config: dir (a directory the segment is a file in;
 * default POSIX shared memory), capacity, mode (octal: 0600, 0640, 0660),
 * required (true: a segment or instance that cannot be used is an error;
 * false, the default: per-process state, counted and logged):
 *
 *   shared:
 *     instances:
 *       app: {dir: /run/myapp, capacity: 128, mode: 0600, required: false}
 *   ratelimiter:
 *     instances:
 *       upstream: {limit_for_period: 100, refresh_period: 1s, shared: app}
 *
 * Circuit breakers, rate limiters, bulkheads and retry budgets take
 * `shared: NAME` (the
 * segment keeps their state, shared by every process that loads the same
 * names; `shared:` on another kind is an error naming those that accept
 * it). A segment is opened (and created) by the load, not under
 * RESIL_REGISTRY_NO_OPEN (its config is checked, nothing opened; the
 * instances then get per-process state), and kept across reloads while its
 * settings do not change; instances naming it are kept only when it was.
 * Segments are opened with replace_differing: a reload (or a load) whose
 * settings for a shared instance differ from the segment's replaces it
 * there for every process (generation + 1, state reset); a process that
 * loads the same settings attaches to it; an unchanged instance keeps its
 * object and state. Processes that have not reloaded keep their cached
 * settings (a limiter's limit) on the reset state until they reload. Each
 * segment's figures are added by resil_registry_metrics_add
 * (resil_shared_metrics_add); each fallback is a shared_fallback line
 * through the sink of resil_registry_events_attach (those of the first
 * load are kept, up to 8 per segment, until a sink is attached).
 * resil_registry_shared() returns a segment's handle.
 *
 * HTTP clients (section http_client, when libresil-config is built with
 * libresil-http) take the client config's keys (base_url, max_connections,
 * connect_timeout, response_timeout, max_response_bytes: 64MiB, ...;
 * since 0.2 deadline_propagation: true | false and deadline_header) and an
 * endpoint table, each endpoint under its name with the keys of
 * resil_http_endpoint (method: GET | HEAD | POST | PUT | PATCH | DELETE |
 * OPTIONS; path; query; headers: ["Name: value", ...]; idempotent: default |
 * true | false; request_codec and response_codec: raw | json;
 * content_type; idempotency_key: none | send; empty_is_error; base_url;
 * status_endpoint; since 0.2 no_deadline_header):
 *
 *   http_client:
 *     instances:
 *       payments:
 *         base_url: http://127.0.0.1:8080
 *         response_timeout: 2s
 *         endpoints:
 *           create_payment: {method: POST, path: /payments, idempotency_key: send}
 *           get_payment: {path: "/payments/{id}", response_codec: json}
 *
 * Many instances of an upstream (Since 0.2; http.h, "Many instances",
 * DESIGN §8.4): a client takes `instances`, a list of base URLs, instead of
 * base_url (both in one mapping is an error naming the two; either one
 * replaces the other inherited from a config: the instance's over its
 * base_config's, that over the default's), or `resolve_instances: true`
 * with base_url (its host name's every address is an instance), and the
 * keys resolve_interval (1s..1d, default 30s), balance (p2c | round_robin;
 * default p2c), eject_consecutive (0..1000, 0 never ejects; default 5),
 * eject_classes (a class list as failure_classes: a subset of not_sent,
 * unknown, server_error, http_408, http_425, http_429; default all six),
 * eject_base and eject_max (1ms..1d, eject_base <= eject_max; defaults 30s
 * and 300s), eject_max_percent (0..100; default 50), and the ramp of an
 * instance back from ejection: instance_ramp (0 = none, the default, or
 * 1ms..1d), instance_ramp_min_percent (1..100; default 10) and
 * instance_ramp_aggression (> 0; default 1.0). An endpoint takes
 * its own `instances` (instead of its base_url) or `resolve_instances:
 * true` (with its base_url); the client's balance and ejection settings
 * apply to them. A value out of range is reported at its line as every
 * key's; a bad item of a list at the item ("instances[1]"):
 *
 *   http_client:
 *     instances:
 *       payments:
 *         instances: ["http://10.0.0.1:8080", "http://10.0.0.2:8080",
 *                     "http://10.0.0.3:8080"]
 *         balance: p2c
 *         eject_consecutive: 5
 *         eject_base: 30s
 *         endpoints:
 *           create_payment: {method: POST, path: /payments, idempotency_key: send}
 *           ledger: {path: /ledger, instances: ["http://10.0.1.1:9000",
 *                                                "http://10.0.1.2:9000"]}
 *
 * With resil_registry_events_attach, each client's instance events
 * (ejected, returned, added, removed) are lines of the sink
 * (resil_event_instance_listener); resil_registry_http_client_balance()
 * reads a client's settings back, resil_http_client_instance_stats() its
 * instances.
 *
 * Rate limiters on Redis (Since 0.2, when libresil-config is built with
 * libresil-redis; redis.h): `redis: redis://[[USER]:PASSWORD@]HOST[:PORT][/DB]`
 * makes the instance resil_redis_ratelimiter_new's (the same
 * resil_ratelimiter handle: chains, the engine and the metrics take it as
 * they take a local one), with limit_for_period, refresh_period and timeout
 * as above and the keys failure (open | closed | local; default local),
 * burst, expected_instances, redis_timeout (default 20ms) and key_prefix;
 * `shared: NAME` is then the segment of the local policy's limiter. Those
 * keys without `redis` are an error naming the key. The limiter does not
 * connect at load (a Redis down then is its failure policy's); a URI error
 * is reported at the `redis` key with the password shown as [REDACTED]:
 *
 *   ratelimiter:
 *     instances:
 *       payments: {limit_for_period: 100, refresh_period: 1s, timeout: 0s,
 *                  redis: "redis://127.0.0.1:6379/0", failure: closed}
 *
 * Operation stores (section store, with libresil-store): uri
 * ("sqlite:/var/lib/app/ops.db" or "postgresql://..."), busy_timeout,
 * pool_size, effects_in_store (true or false; see store.h: only for effects
 * that write nothing outside the store's transaction). A store is opened
 * (and its file created) by the load, unless the load's options say
 * RESIL_REGISTRY_NO_OPEN, and kept open across reloads while its settings
 * do not change.
 *
 * Errors: nothing is created from a file with an error. The first error is
 * reported with the file, line and column of the YAML node at fault, the
 * key path (e.g. circuitbreaker.instances.payments.failure_rate_threshold)
 * and a message; range errors come from the policies' own validation (the
 * registry builds the C config and calls the policy's _new), with the
 * allowed range and the value given (durations in human units; has_range,
 * min, max and got as in resil_error). An unknown key is an error with a
 * "did you mean" suggestion when one is close. Instance names hold no
 * control characters (bytes below 0x20, DEL). Messages quote keys and
 * values escaped: control bytes, DEL and bytes >= 0x80 as "\xNN" (as the
 * HTTP log does); a "\0" in a quoted scalar (a NUL byte) is an error.
 *
 * Limits (Since 0.2): a file must be a regular file (a FIFO, a device, a
 * directory or a socket is refused at once, RESIL_EIO "cannot read: not a
 * regular file (a FIFO)"; a FIFO is opened without waiting for a writer)
 * of at most RESIL_REGISTRY_MAX_FILE_BYTES (else RESIL_EIO). A document
 * (file or string) nests at most RESIL_REGISTRY_MAX_DEPTH collections, has
 * at most RESIL_REGISTRY_MAX_KEYS keys in one mapping (items in one
 * sequence) and at most RESIL_REGISTRY_MAX_NODES nodes; beyond them it is
 * refused with RESIL_EINVAL at the line and column of the first node over
 * the limit ("more than 65536 keys in one mapping"), before the document
 * is built. Parsing and checking take O(n log n) time in the size of the
 * document (duplicate keys and references are found by sorting).
 *
 * Lifetimes and thread-safety (exact):
 *  - Every function may be called from any thread at once, except
 *    resil_registry_free(), which needs exclusive access to the registry
 *    (leases may still be held, see below).
 *  - Reloads are serialised by the registry (a second reload waits for the
 *    first). Lookups, leases and iteration run concurrently with a reload:
 *    each sees the whole old set or the whole new set, never a mix.
 *  - A lease (resil_registry_acquire) keeps one instance alive, with the
 *    instances a chain uses, until resil_registry_release(), even when a
 *    reload replaced or removed it or the registry was freed: a call in
 *    flight finishes on the instance it started on. Take one per call (or
 *    per batch of calls) in programs that reload while other threads call.
 *  - The typed lookups (resil_registry_breaker(), ...) return a borrowed
 *    handle without a lease: valid until resil_registry_free(), or until a
 *    reload that replaced or removed that instance returns. Use them in
 *    programs that never reload, or that reload only from the thread that
 *    uses the handles.
 *  - The handles' own functions keep their thread-safety (breaker.h, ...).
 *    The registry owns every instance: never call their _free functions.
 *  - A reload keeps the very same object for an instance whose resolved
 *    settings (and, for a chain, whose layers) did not change, so its state
 *    (an OPEN breaker, a rate limiter's used permits, a client's pool, an
 *    open store) carries over; a changed instance is a new object for
 *    lookups after the reload returns; an added one appears, a removed one
 *    disappears. A chain is kept only when its own settings and every one
 *    of its layers were kept. A reload with an error changes nothing and
 *    reports the error as a load does.
 *  - Reloads from an empty document: a reload from a document with no
 *    sections at all (an empty file, only comments, `{}` or `~`) is
 *    refused with RESIL_EINVAL ("the document has no sections: ...") while
 *    the registry has instances, and changes nothing: that is what a
 *    truncated or half-written file looks like. To remove every instance,
 *    reload a file that names a section with no instances (`retry: {}`).
 *    A load from such a document gives an empty registry. A file cut at a
 *    line boundary can still be valid YAML that names fewer instances; no
 *    parser can tell it from an edit: replace files atomically (write a
 *    temporary file in the same directory, then rename(2) it over the old
 *    one), so that a reload reads the old file or the new one, whole.
 *  - Instances that come back: an instance that a reload removed is kept
 *    aside until the next successful reload; when that reload names it
 *    again (same kind, name and settings, and for a chain the same layer
 *    objects), it gets the very same object back, its state with it (an
 *    OPEN breaker stays OPEN, a rate limiter's used permits, a bulkhead's
 *    calls in flight), counted in `added` and `restored`. So a reload from
 *    a file cut at a line boundary, followed by the whole file, loses no
 *    state. Stores, HTTP clients and thread pools, and whatever uses them,
 *    are not kept aside: a removal closes them. An instance removed and not
 *    named by the next reload is dropped by that reload.
 *  - An instance is freed by whoever drops its last reference (a reload, a
 *    release or resil_registry_free), on that thread: a time limiter's
 *    free waits for its abandoned tasks (timelimit.h).
 *  - An instance keeps what it names (a chain its layers, a retry its
 *    budget, ...) alive for as long as it lives.
 *  - YAML anchors and aliases work; merge keys (<<) do not (use
 *    base_config). */
#ifndef RESIL_REGISTRY_H
#define RESIL_REGISTRY_H

#include <stddef.h>
#include <stdint.h>

#include "status.h"
#include "version.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The limits of a registry document (see "Limits" above). Since 0.2. */
#define RESIL_REGISTRY_MAX_FILE_BYTES (16ul * 1024 * 1024) /* 16 MiB */
#define RESIL_REGISTRY_MAX_DEPTH 64      /* nested mappings and sequences */
#define RESIL_REGISTRY_MAX_KEYS 65536    /* keys of one mapping, items of one sequence */
#define RESIL_REGISTRY_MAX_NODES 262144  /* scalars, mappings and sequences */

typedef struct resil_registry resil_registry;
typedef struct resil_registry_lease resil_registry_lease;
typedef struct resil_breaker resil_breaker;
typedef struct resil_retry resil_retry;
typedef struct resil_ratelimiter resil_ratelimiter;
typedef struct resil_bulkhead resil_bulkhead;
typedef struct resil_timelimiter resil_timelimiter;
typedef struct resil_hedge resil_hedge;
typedef struct resil_chain resil_chain;
typedef struct resil_http_client resil_http_client;
typedef struct resil_store resil_store;
typedef struct resil_retry_budget resil_retry_budget;
typedef struct resil_threadpool resil_threadpool;
typedef struct resil_shared resil_shared;

/* The kinds of instances; values are appended only. */
typedef enum resil_registry_kind {
  RESIL_REG_BREAKER = 0,     /* section "circuitbreaker", resil_breaker *   */
  RESIL_REG_RETRY = 1,       /* "retry", resil_retry *                      */
  RESIL_REG_RATELIMITER = 2, /* "ratelimiter", resil_ratelimiter *          */
  RESIL_REG_BULKHEAD = 3,    /* "bulkhead", resil_bulkhead *                */
  RESIL_REG_TIMELIMITER = 4, /* "timelimiter", resil_timelimiter *          */
  RESIL_REG_HEDGE = 5,       /* "hedge", resil_hedge *                      */
  RESIL_REG_CHAIN = 6,       /* "chain", resil_chain *                      */
  /* Built only when libresil-config was built with libresil-http (resp.
   * libresil-store); otherwise the section is an error in a file. */
  RESIL_REG_HTTP_CLIENT = 7, /* "http_client", resil_http_client *          */
  RESIL_REG_STORE = 8,       /* "store", resil_store *                      */
  RESIL_REG_RETRY_BUDGET = 9,/* "retry_budget", resil_retry_budget *        */
  RESIL_REG_THREADPOOL = 10, /* "threadpool", resil_threadpool *            */
  RESIL_REG_SHARED = 11,     /* "shared", resil_shared * (Since 0.2)         */
  RESIL_REG_KIND_COUNT_      /* not a kind                                  */
} resil_registry_kind;

/* The section name of a kind ("circuitbreaker", ...); NULL for an unknown
 * value. Since 0.2. */
RESIL_API const char *resil_registry_kind_name(resil_registry_kind kind);

/* Where and why a load or reload failed (a sized struct, version.h). */
typedef struct resil_registry_error {
  size_t struct_size;
  resil_status status;   /* RESIL_OK when there was no error               */
  char file[256];        /* the path given, or the name given to _string   */
  uint32_t line;         /* 1-based; 0 when the error has no place (I/O)   */
  uint32_t column;       /* 1-based; 0 likewise                            */
  char key_path[256];    /* "circuitbreaker.instances.payments.open_wait"  */
  char message[256];     /* "must be at least 1 ms, got 200 ns"            */
  /* For a range error: as in resil_error (durations in ns). */
  int has_range;
  int64_t min;
  int64_t max;
  int64_t got;
} resil_registry_error;

/* Empties *err and sets struct_size. NULL is a no-op. Use the macro.
 * Since 0.2. */
RESIL_API void resil_registry_error_init_sized(resil_registry_error *err,
                                               size_t struct_size);
#define resil_registry_error_init(err)                                         \
  resil_registry_error_init_sized((err), sizeof(resil_registry_error))

/* Writes "FILE:LINE:COL: key.path: message" (the parts that are empty
 * left out) into buf, like snprintf: returns the length needed. Since 0.2. */
RESIL_API size_t resil_registry_error_format(const resil_registry_error *err,
                                             char *buf, size_t size);

/* Loads the YAML file at path and creates every instance it names.
 * RESIL_OK (*out set), RESIL_EINVAL (a NULL argument, or an error in the
 * file: *err says where), RESIL_EIO (the file cannot be read, or a store
 * cannot be opened: *err points at its uri), RESIL_ENOMEM, or another
 * status a constructor returned (*err says which instance).
 * On an error nothing is created and *out is untouched. err may be NULL;
 * when given it must have been passed through resil_registry_error_init()
 * (a struct_size below the 0.2 layout gets nothing written). Since 0.2. */
RESIL_API resil_status resil_registry_load_file(const char *path,
                                                resil_registry **out,
                                                resil_registry_error *err);
/* The same from len bytes of YAML at text; `name` is the file name used in
 * errors (NULL gives "<string>"). Since 0.2. */
RESIL_API resil_status resil_registry_load_string(const char *text, size_t len,
                                                  const char *name,
                                                  resil_registry **out,
                                                  resil_registry_error *err);

/* Options of a load (a sized struct, version.h). Since 0.2. */
typedef struct resil_registry_load_options {
  size_t struct_size;
  /* 0 or RESIL_REGISTRY_NO_OPEN. Default 0. */
  uint32_t flags;
} resil_registry_load_options;

/* Check without side effects (`resil config check`, `resil describe
 * --config`): every instance is built and validated as by a load, except
 * stores, which are checked with resil_store_check() (the uri's form and
 * the settings) and not opened: no database file is created, no server
 * contacted. Such a store is an instance without a handle:
 * resil_registry_store() and resil_registry_get() return NULL for it,
 * resil_registry_count() and resil_registry_foreach() (with a NULL handle)
 * include it, collectors leave it out. The registry's reloads keep the
 * flag. (HTTP clients never connect when they are built, and under this
 * flag look no name up either: a client or endpoint with
 * resolve_instances is built as its base_url alone, no resolver thread,
 * so its addresses are not among resil_http_client_instance_count()'s;
 * every setting is still checked. Thread pools do start their threads.)
 * Since 0.2. */
#define RESIL_REGISTRY_NO_OPEN 0x1u

/* Writes the defaults into *opts (flags 0) and sets struct_size. NULL is a
 * no-op. Use the macro. Since 0.2. */
RESIL_API void resil_registry_load_options_init_sized(resil_registry_load_options *opts,
                                                      size_t struct_size);
#define resil_registry_load_options_init(opts)                                 \
  resil_registry_load_options_init_sized((opts), sizeof(resil_registry_load_options))

/* resil_registry_load_file and _load_string with options; opts NULL is the
 * defaults (the plain functions). Also RESIL_EINVAL for opts not passed
 * through resil_registry_load_options_init() or with unknown flags (*err
 * says so). Since 0.2. */
RESIL_API resil_status resil_registry_load_file_ex(const char *path,
                                                   const resil_registry_load_options *opts,
                                                   resil_registry **out,
                                                   resil_registry_error *err);
RESIL_API resil_status resil_registry_load_string_ex(const char *text, size_t len,
                                                     const char *name,
                                                     const resil_registry_load_options *opts,
                                                     resil_registry **out,
                                                     resil_registry_error *err);

/* Drops the registry's references: every instance no lease holds is freed
 * now, the others when their last lease is released. NULL is a no-op.
 * Needs exclusive access to the registry (no other thread may use it,
 * leases excepted). Since 0.2. */
RESIL_API void resil_registry_free(resil_registry *reg);

/* Reloads from the file at path (see the top of this file). RESIL_OK, or
 * the statuses of resil_registry_load_file with nothing changed. A NULL
 * registry gives RESIL_EMISUSE. Since 0.2. */
RESIL_API resil_status resil_registry_reload(resil_registry *reg,
                                             const char *path,
                                             resil_registry_error *err);
RESIL_API resil_status resil_registry_reload_string(resil_registry *reg,
                                                    const char *text, size_t len,
                                                    const char *name,
                                                    resil_registry_error *err);

/* What the last successful load or reload did (a sized struct): for an
 * event log ("reloaded: 12 kept, 2 replaced, 1 added, 0 removed"). */
typedef struct resil_registry_reload_stats {
  size_t struct_size;
  uint64_t generation; /* resil_registry_generation() after it           */
  size_t kept;         /* instances that kept their object and state      */
  size_t replaced;     /* instances of the same kind and name made anew   */
  size_t added;        /* instances that were not in the previous set     */
  size_t removed;      /* instances of the previous set no longer named   */
  size_t restored;     /* of `added`: instances the reload before removed,
                          back with their object and state (see the top)  */
} resil_registry_reload_stats;

/* Writes the stats of the last successful load or reload into *out, up to
 * the caller's struct_size (use the macro). RESIL_EMISUSE (NULL registry),
 * RESIL_EINVAL (NULL out). Since 0.2. */
RESIL_API resil_status resil_registry_last_reload_sized(resil_registry *reg,
                                                        resil_registry_reload_stats *out,
                                                        size_t struct_size);
#define resil_registry_last_reload(reg, out)                                   \
  resil_registry_last_reload_sized((reg), (out), sizeof(resil_registry_reload_stats))

/* Successful loads and reloads so far (1 after the load). 0 for NULL. */
RESIL_API uint64_t resil_registry_generation(resil_registry *reg);

/* Borrowed handles by name (see "Lifetimes" above); NULL when there is no
 * such instance, or for a NULL registry or name. Since 0.2. */
RESIL_API resil_breaker *resil_registry_breaker(resil_registry *reg, const char *name);
RESIL_API resil_retry *resil_registry_retry(resil_registry *reg, const char *name);
RESIL_API resil_ratelimiter *resil_registry_ratelimiter(resil_registry *reg,
                                                        const char *name);
RESIL_API resil_bulkhead *resil_registry_bulkhead(resil_registry *reg, const char *name);
RESIL_API resil_timelimiter *resil_registry_timelimiter(resil_registry *reg,
                                                        const char *name);
RESIL_API resil_hedge *resil_registry_hedge(resil_registry *reg, const char *name);
RESIL_API resil_chain *resil_registry_chain(resil_registry *reg, const char *name);
RESIL_API resil_http_client *resil_registry_http_client(resil_registry *reg,
                                                        const char *name);
RESIL_API resil_store *resil_registry_store(resil_registry *reg, const char *name);
RESIL_API resil_retry_budget *resil_registry_retry_budget(resil_registry *reg,
                                                          const char *name);
RESIL_API resil_threadpool *resil_registry_threadpool(resil_registry *reg, const char *name);
/* The shared segment `name` of section `shared` (shared.h); NULL when
 * absent or not opened (RESIL_REGISTRY_NO_OPEN). Since 0.2. */
RESIL_API resil_shared *resil_registry_shared(resil_registry *reg, const char *name);
/* The total_timeout of chain `name` in nanoseconds (0 = none), as the file
 * gave it (resil_chain has no getter for it); -1 when there is no such
 * chain. For describing a chain (`resil describe --config`). Since 0.2. */
RESIL_API int64_t resil_registry_chain_total_timeout_ns(resil_registry *reg,
                                                        const char *name);
/* What bounds one attempt of http_client `name`, as the file resolved it
 * (a sized struct): for the worst case of a call through a chain
 * (`resil describe --config`). One attempt may wait lease_timeout_ns for a
 * connection, then send up to max_hops requests (1 + max_redirects when
 * follow_redirects, else 1), each of which may take connect_timeout_ns +
 * response_timeout_ns. Since 0.2. */
typedef struct resil_registry_http_timeouts {
  size_t struct_size;
  int64_t lease_timeout_ns;
  int64_t connect_timeout_ns;
  int64_t response_timeout_ns;
  uint32_t max_hops;
} resil_registry_http_timeouts;
/* Writes them into *out up to struct_size (use the macro). RESIL_OK;
 * RESIL_EMISUSE (NULL registry); RESIL_EINVAL (NULL name or out, or no
 * such http_client). Since 0.2. */
RESIL_API resil_status resil_registry_http_client_timeouts_sized(
    resil_registry *reg, const char *name, resil_registry_http_timeouts *out,
    size_t struct_size);
#define resil_registry_http_client_timeouts(reg, name, out)                    \
  resil_registry_http_client_timeouts_sized((reg), (name), (out),              \
                                            sizeof(resil_registry_http_timeouts))
/* How http_client `name` chooses among its instances, ejects them and
 * ramps them back, as the file resolved it (a sized struct; http.h, "Many
 * instances"): for `resil describe --config`. The values are the client config's (its
 * defaults where the file says nothing), read even when the client has one
 * instance (then nothing is chosen or ejected). Since 0.2. */
typedef struct resil_registry_http_balance {
  size_t struct_size;
  int balance;                 /* a resil_http_balance                    */
  int resolve_instances;       /* 0 or 1: the client's base_url resolved  */
  int64_t resolve_interval_ns;
  uint32_t eject_consecutive;  /* 0: never ejects                         */
  uint32_t eject_classes;      /* RESIL_CLASS_BIT() mask                   */
  int64_t eject_base_ns;
  int64_t eject_max_ns;
  uint32_t eject_max_percent;
  uint32_t listed_instances;   /* base URLs the file lists: the client's
                                  `instances` and its endpoints' together */
  /* The ramp of an instance back from ejection (instance_ramp: 0 none). */
  int64_t instance_ramp_ns;
  uint32_t instance_ramp_min_percent;
  double instance_ramp_aggression;
} resil_registry_http_balance;
/* Writes them into *out up to struct_size (use the macro). RESIL_OK;
 * RESIL_EMISUSE (NULL registry); RESIL_EINVAL (NULL name or out, or no
 * such http_client). Since 0.2. */
RESIL_API resil_status resil_registry_http_client_balance_sized(
    resil_registry *reg, const char *name, resil_registry_http_balance *out,
    size_t struct_size);
#define resil_registry_http_client_balance(reg, name, out)                     \
  resil_registry_http_client_balance_sized((reg), (name), (out),               \
                                           sizeof(resil_registry_http_balance))
/* The recovery settings of a circuitbreaker, retry or hedge instance, as
 * the file resolved them (a sized struct; see "Recovery in the seed's
 * order" above): for `resil describe --config`. Since 0.2. */
typedef struct resil_registry_recovery {
  size_t struct_size;
  /* circuitbreaker: its ramp (breaker.h; ramp_duration_ns 0: none);
   * 0 for a retry or a hedge. */
  int64_t ramp_duration_ns;
  uint32_t ramp_min_percent;
  double ramp_aggression;
  /* retry, hedge: retry_during_recovery or hedge_during_recovery (1:
   * retries or hedges during recovery as before; 0: last); 0 for a
   * breaker. */
  int during_recovery;
  /* retry, hedge: the circuitbreaker instance its recovery_breaker names,
   * "" when none (in a chain the layer watches the breaker layer inside it
   * instead). */
  char recovery_breaker[256];
} resil_registry_recovery;
/* Writes them into *out up to struct_size (use the macro). RESIL_OK;
 * RESIL_EMISUSE (NULL registry); RESIL_EINVAL (NULL name or out, a kind
 * other than RESIL_REG_BREAKER, RESIL_REG_RETRY, RESIL_REG_HEDGE, or no
 * such instance). Since 0.2. */
RESIL_API resil_status resil_registry_recovery_sized(resil_registry *reg,
                                                    resil_registry_kind kind, const char *name,
                                                    resil_registry_recovery *out,
                                                    size_t struct_size);
#define resil_registry_recovery(reg, kind, name, out)                          \
  resil_registry_recovery_sized((reg), (kind), (name), (out), sizeof(resil_registry_recovery))
/* Any kind: the handle, to be cast to the kind's type. */
RESIL_API void *resil_registry_get(resil_registry *reg, resil_registry_kind kind,
                                   const char *name);

/* Leases: the handle of instance `name` of `kind` with a reference held
 * (*lease set), or NULL (*lease NULL) when there is none. Release every
 * lease exactly once; resil_registry_release(NULL) is a no-op. Since 0.2. */
RESIL_API void *resil_registry_acquire(resil_registry *reg, resil_registry_kind kind,
                                       const char *name, resil_registry_lease **lease);
RESIL_API void resil_registry_release(resil_registry_lease *lease);

/* Number of instances of a kind (RESIL_REG_KIND_COUNT_: of every kind).
 * 0 for NULL. Since 0.2. */
RESIL_API size_t resil_registry_count(resil_registry *reg, resil_registry_kind kind);

/* Calls fn once per instance of the current set, by kind (enum order) then
 * name (strcmp order), until fn returns nonzero. The set cannot change
 * during the walk (a reload waits for it to finish); `name` and `handle`
 * are valid during the call only (take a lease to keep one). fn must not
 * reload or free this registry. RESIL_OK, RESIL_EMISUSE (NULL registry),
 * RESIL_EINVAL (NULL fn). Since 0.2. */
typedef int (*resil_registry_visit_fn)(void *user, resil_registry_kind kind,
                                       const char *name, void *handle);
RESIL_API resil_status resil_registry_foreach(resil_registry *reg,
                                              resil_registry_visit_fn fn, void *user);

/* ---- metrics and events (Since 0.2) ----------------------------------- */

/* Exposes every instance of the registry in collector m (metrics.h), each
 * under its instance name: breakers, retries, rate limiters, bulkheads,
 * time limiters, hedges and chains through the resil_metrics_add_* calls,
 * HTTP clients and stores through their libraries' sources (when
 * libresil-config was built with them), a rate limiter on Redis with its
 * Redis figures too (resil_redis_ratelimiter_metrics_add); retry budgets
 * and thread pools have
 * no figures. The collector then follows every reload: a kept instance
 * keeps its series (its counters go on), a replaced one shows the new
 * object's figures, an added one appears, a removed one disappears. The
 * registry removes an object from the collector before it drops its
 * reference to it, so a render running during a reload never reads a freed
 * object; such a render may lack a replaced instance (the old object has
 * left, the new one not yet come). A render after the reload returned shows
 * exactly the new set (except an instance whose adding ran out of memory
 * during that reload: it is missing until the collector is added anew).
 * Several collectors (up to 8) may follow one
 * registry. m must outlive its membership: call
 * resil_registry_metrics_remove(), or free the registry, before freeing m.
 * Do not add or remove the registry's objects in m by hand
 * (resil_metrics_remove would take them out from under the registry).
 * RESIL_OK; RESIL_EMISUSE (NULL registry); RESIL_EINVAL (NULL m, m already
 * follows this registry, or m already has an instance of the same kind and
 * name: nothing is added then); RESIL_ESTATE (8 collectors already);
 * RESIL_ENOMEM. Since 0.2. */
typedef struct resil_metrics resil_metrics;
RESIL_API resil_status resil_registry_metrics_add(resil_registry *reg, resil_metrics *m);
/* Removes the registry's instances from m and stops following reloads.
 * RESIL_OK, RESIL_EMISUSE (NULL registry), RESIL_EINVAL (m does not follow
 * it). Since 0.2. */
RESIL_API resil_status resil_registry_metrics_remove(resil_registry *reg, resil_metrics *m);

/* Attaches an event sink (events.h, libresil-http) to the registry, NULL
 * detaches it (one sink at a time; attaching another replaces it):
 *  - every reload writes one line, instance "registry", kind "reload":
 *    a successful one with ok true, file, changed, kept, replaced, added,
 *    removed and generation (resil_event_reload_counts); a failed one (the
 *    file unreadable, an error in it) with ok false, file and error, the
 *    message resil_registry_error_format() gives;
 *  - every configured breaker gets resil_event_breaker_listener with the
 *    sink (its transitions, rejections, resets reach the log under its
 *    instance name), and so does every breaker a reload adds or puts in
 *    place of another. A breaker that a reload removed or replaced loses
 *    the listener in that reload (calls still finishing on it under a lease
 *    are not logged).
 *  - likewise every configured hedge gets resil_event_hedge_listener with
 *    the sink (resil_hedge_listener_add: its "hedge" lines under its
 *    instance name), added, replaced and removed across reloads as the
 *    breakers' (Since 0.2).
 *  - every HTTP client the registry builds (those of a reload too) has a
 *    registry listener as its on_instance that forwards each instance
 *    event to the sink attached now (resil_event_instance_listener:
 *    "instance_ejected", "instance_returned", "instance_added",
 *    "instance_removed", "instance_ramp_ended" lines with the client's
 *    name), or drops it when
 *    none is, as for attempts below (Since 0.2).
 *  - every retry and HTTP client the registry builds (those of a reload
 *    too) has a registry listener as its on_attempt (set when it is built:
 *    a config field), which forwards each attempt to the sink attached
 *    now (resil_event_attempt_listener: "retry" and "call_done" lines
 *    under the retry's, or the client's, name), or drops it when none is;
 *    detaching waits for such a forward running on another thread, so the
 *    sink may be freed once this returns. Attempts of calls still
 *    finishing on a replaced retry under a lease are logged too (Since
 *    0.2).
 * Calls through a registry chain on the engine or the blocking client,
 * under one lease: registry_call.h (resil_registry_engine_call,
 * resil_registry_http_call).
 * The sink must outlive the attachment: detach it (or free the registry)
 * before resil_event_sink_free(). RESIL_OK; RESIL_EMISUSE (NULL registry);
 * RESIL_ESTATE (libresil-config was built without libresil-http and sink
 * is not NULL). Since 0.2. */
typedef struct resil_event_sink resil_event_sink;
RESIL_API resil_status resil_registry_events_attach(resil_registry *reg,
                                                    resil_event_sink *sink);

/* Parses a duration with its unit as the file format does ("250ms",
 * "1.5s", "0"): RESIL_OK with *ns set, or RESIL_EINVAL (why in msg, may be
 * NULL). Since 0.2. */
RESIL_API resil_status resil_parse_duration(const char *text, int64_t *ns,
                                            char *msg, size_t msg_size);
/* Parses a size with its unit ("64MiB", "512", "10KB"): as above. */
RESIL_API resil_status resil_parse_size(const char *text, uint64_t *bytes,
                                        char *msg, size_t msg_size);

#ifdef __cplusplus
}
#endif
#endif
