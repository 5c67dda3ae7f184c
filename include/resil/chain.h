/* resil_chain: policies composed in an explicit order (DESIGN §2.8).
 *
 * A chain is an ordered list of layers, outermost first. Running it runs
 * layer 0, which calls layer 1 once per attempt it makes, and so on down to
 * the protected call. The order is the caller's decision and the chain makes
 * it visible: resil_chain_describe() prints the nesting, e.g.
 *
 *   Retry(Breaker(RateLimiter(TimeLimiter(Bulkhead(call)))))
 *
 * (the recommended default order), what unit each layer observes (a breaker
 * inside a retry counts every attempt; outside it counts logical calls), and
 * warnings about real traps. Every layer counts what it sees: calls in,
 * attempts out, rejections it made itself, and outcomes by kind, so the
 * difference between logical calls, physical attempts and effects is always
 * visible.
 *
 * A hedge layer (resil_chain_add_hedge, hedge.h; since 0.2) is described and
 * counted like the others, and the amplification calculator includes it.
 * resil_chain_run hedges only when the hedge has an executor (a thread pool
 * in its config): the primary and the hedges then run the layers inside it
 * on the pool's workers, and the layer returns after every one of them has
 * returned (the losers are cancelled through their ctx->cancel). Without an
 * executor the hedge layer passes every call through unhedged, one attempt
 * (counted in the layer's `unhedged` and in the hedge's passed_blocking).
 * resil_chain_describe says which for each hedge layer. The async engine
 * drives the hedge's split form instead.
 *
 * Layers borrow their policies: a policy may be shared by several chains and
 * must outlive every chain that uses it.
 *
 *   resil_chain_config cc;
 *   resil_chain_config_init(&cc);
 *   cc.total_timeout_ns = RESIL_MS(700);     // one deadline per logical call
 *   resil_chain *ch;
 *   if (resil_chain_new(&cc, &ch, &err) != RESIL_OK) ...
 *   resil_chain_add_retry(ch, retry);        // outermost
 *   resil_chain_add_breaker(ch, breaker);
 *   resil_chain_add_bulkhead(ch, bulkhead);  // innermost
 *   resil_outcome o = resil_chain_run(ch, &ctx, my_call, my_arg);
 *
 * Thread-safety: building a chain (resil_chain_add_*) is not thread-safe and
 * must finish before the first run. After that every function may be called
 * from any thread at once, except resil_chain_free(), which needs exclusive
 * access. */
#ifndef RESIL_CHAIN_H
#define RESIL_CHAIN_H

#include <stddef.h>
#include <stdint.h>

#include "alloc.h"
#include "call.h"
#include "clock.h"
#include "outcome.h"
#include "status.h"
#include "version.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct resil_chain resil_chain;

typedef enum resil_layer_kind {
  RESIL_LAYER_CUSTOM = 0,
  RESIL_LAYER_RETRY,
  RESIL_LAYER_BREAKER,
  RESIL_LAYER_RATELIMITER,
  RESIL_LAYER_TIMELIMITER,
  RESIL_LAYER_BULKHEAD,
  RESIL_LAYER_THREADPOOL,
  RESIL_LAYER_HEDGE /* since 0.2 */
} resil_layer_kind;

/* A layer's run function: the policy's run form (same contract as
 * resil_breaker_run and friends). It calls its protected call one attempt
 * at a time (never from several threads at once), except a HEDGE layer
 * with hedges_blocking set, which may call it from several threads at once
 * and must return only after every such call has returned. */
typedef resil_outcome (*resil_layer_run_fn)(void *policy, const resil_ctx *ctx,
                                            resil_call_fn fn, void *arg);

/* What a fallback says to give the caller instead of the failure. It can
 * never turn a failure into a success: the chain's outcome keeps its kind
 * and reason, and only a flag records the fallback's answer. */
typedef enum resil_fallback_kind {
  RESIL_FALLBACK_NONE = 0,    /* no fallback: the failure stands           */
  RESIL_FALLBACK_CACHED,      /* a cached value was served (reads only)    */
  RESIL_FALLBACK_PENDING,     /* "accepted, result not known yet"          */
  RESIL_FALLBACK_UNAVAILABLE  /* "temporarily unavailable"                 */
} resil_fallback_kind;

/* Outcome flags added by the chain's fallback (see outcome.h RESIL_OF_*). */
#define RESIL_OF_FALLBACK_CACHED 0x100u
#define RESIL_OF_FALLBACK_PENDING 0x200u
#define RESIL_OF_FALLBACK_UNAVAILABLE 0x400u

/* Called once per logical call that did not succeed, with the final
 * outcome; it tells rejection (kind REJECTED, local protection) from failure
 * by the outcome's kind and reason. `call_arg` is the arg given to
 * resil_chain_run. A CACHED answer for an operation that is not idempotent
 * (no RESIL_CALL_IDEMPOTENT in the ctx flags) is refused by the chain and
 * becomes PENDING when the write may have executed, UNAVAILABLE otherwise:
 * a cached value never stands in for a failed write. */
typedef resil_fallback_kind (*resil_fallback_fn)(void *fallback_arg,
                                                 void *call_arg,
                                                 const resil_outcome *final);

typedef struct resil_chain_config {
  size_t struct_size;           /* sized struct (version.h); set by
                                   resil_chain_config_init()              */
  const char *name;             /* copied; default "chain"                */
  /* Deadline given to each logical call whose ctx has none: now + this.
   * 0 (default) = none. Range 0..INT64_MAX. */
  int64_t total_timeout_ns;
  resil_fallback_fn fallback;   /* optional                               */
  void *fallback_arg;
  const resil_clock *clock;     /* NULL = system; used for the deadline   */
  const resil_allocator *alloc; /* NULL = malloc                          */
} resil_chain_config;

#define RESIL_CHAIN_MAX_LAYERS 16

/* A layer description for resil_chain_add_layer (custom policies). Set
 * struct_size to sizeof(resil_layer) (version.h), e.g. with a designated
 * initializer: resil_layer l = {.struct_size = sizeof l, ...}. */
typedef struct resil_layer {
  size_t struct_size;
  resil_layer_kind kind;
  const char *label;           /* "Breaker", used in the nesting; copied  */
  const char *name;            /* the policy instance's name; copied      */
  void *policy;                /* borrowed                                 */
  resil_layer_run_fn run;
  /* For RETRY layers: worst-case attempts per run and worst-case total wait
   * per run (for the amplification calculator); 1 and 0 otherwise. */
  uint32_t max_attempts;
  int64_t worst_wait_ns;
  /* For TIMELIMITER layers: the per-attempt timeout; 0 otherwise. */
  int64_t attempt_timeout_ns;
  /* Optional, for a layer that may stop waiting for its call while the call
   * still runs on another thread (a time limiter): the run form with an
   * arg_done(arg) callback the policy calls exactly once when it no longer
   * uses arg (see resil_timelimiter_run_owned). With it, the chain keeps
   * the frames below the layer alive exactly as long as needed. A layer of
   * kind TIMELIMITER without it is treated as "may abandon": its call's
   * frame is freed when the call ends, or at once when the layer returns
   * REJECTED without starting it. */
  resil_outcome (*run_owned)(void *policy, const resil_ctx *ctx,
                             resil_call_fn fn, void *arg,
                             void (*arg_done)(void *arg));
  /* Since 0.2. For HEDGE layers: extra attempts one run may send
   * (max_hedges, >= 1) and the longest delay before each
   * (resil_hedge_worst_delay_ns), for describe and the amplification
   * calculator; 0 otherwise. */
  uint32_t max_hedges;
  int64_t hedge_delay_ns;
  /* Since 0.2, for HEDGE layers: 1 when `run` hedges (a resil_hedge with an
   * executor: parallel calls of the protected call, see above), 0 when it
   * passes calls through unhedged. */
  int hedges_blocking;
} resil_layer;

/* Per-layer counters, monotonic for the chain's life. A call is counted
 * when it returns from the layer; a call still in flight, such as an
 * attempt a time limiter abandoned, is counted when it ends. A clean call
 * (every layer one attempt, every outcome a plain success) is counted once
 * for the whole chain in per-thread parts and added to every layer's
 * successes when read, so a snapshot's figures are each exact but not taken
 * at one instant. */
typedef struct resil_layer_stats {
  size_t struct_size;     /* sized struct: the bytes the library wrote    */
  uint64_t calls_in;      /* calls this layer returned from               */
  uint64_t attempts_out;  /* calls it made to the next layer (or the call)
                             that returned                                */
  uint64_t rejections;    /* calls it refused itself (REJECTED, inner not
                             called in that run)                          */
  uint64_t successes;     /* outcomes it returned of class SUCCESS        */
  uint64_t by_kind[5];    /* outcomes it returned, index resil_outcome_kind */
  /* Since 0.2: hedges apart from retries. */
  uint64_t retries;       /* RETRY layers: attempts beyond the first of
                             each call (attempts_out - calls_in once every
                             call has returned); 0 for other layers        */
  uint64_t hedges;        /* HEDGE layers: hedge attempts sent, by
                             resil_chain_run (attempts beyond the first)
                             or counted by resil_chain_count_hedges; 0 for
                             other layers                                 */
  uint64_t unhedged;      /* HEDGE layers: calls resil_chain_run passed
                             through with one attempt                    */
} resil_layer_stats;

/* Defaults as documented on each field, and struct_size. A macro passing
 * sizeof(resil_chain_config). NULL is a no-op. Since 0.1. */
RESIL_API void resil_chain_config_init_sized(resil_chain_config *cfg,
                                             size_t struct_size);
#define resil_chain_config_init(cfg)                                           \
  resil_chain_config_init_sized((cfg), sizeof(resil_chain_config))
/* RESIL_OK, RESIL_EINVAL (cfg/out NULL, a config never passed through
 * resil_chain_config_init() -- "call resil_chain_config_init()" -- or a
 * negative timeout), RESIL_ENOMEM. Since 0.1. */
RESIL_API resil_status resil_chain_new(const resil_chain_config *cfg,
                                       resil_chain **out, resil_error *err);
/* NULL is a no-op. The policies are not freed (they are borrowed). */
RESIL_API void resil_chain_free(resil_chain *ch);

/* Appends a layer inside the ones added before. RESIL_EMISUSE (NULL chain),
 * RESIL_EINVAL (NULL layer, policy or run function, a struct_size that is not
 * a resil_layer's), RESIL_ESTATE (more than RESIL_CHAIN_MAX_LAYERS),
 * RESIL_ENOMEM. Since 0.1. */
RESIL_API resil_status resil_chain_add_layer(resil_chain *ch,
                                             const resil_layer *layer);

/* Typed adders for the library's policies: each borrows the policy (it must
 * outlive the chain) and appends it inside the layers added before. Same
 * statuses as resil_chain_add_layer. Since 0.1. */
typedef struct resil_retry resil_retry;
typedef struct resil_breaker resil_breaker;
typedef struct resil_ratelimiter resil_ratelimiter;
typedef struct resil_timelimiter resil_timelimiter;
typedef struct resil_bulkhead resil_bulkhead;
typedef struct resil_threadpool resil_threadpool;
RESIL_API resil_status resil_chain_add_retry(resil_chain *ch, resil_retry *p);
RESIL_API resil_status resil_chain_add_breaker(resil_chain *ch, resil_breaker *p);
RESIL_API resil_status resil_chain_add_ratelimiter(resil_chain *ch,
                                                   resil_ratelimiter *p);
RESIL_API resil_status resil_chain_add_timelimiter(resil_chain *ch,
                                                   resil_timelimiter *p);
RESIL_API resil_status resil_chain_add_bulkhead(resil_chain *ch, resil_bulkhead *p);
RESIL_API resil_status resil_chain_add_threadpool(resil_chain *ch,
                                                  resil_threadpool *p);
/* A hedge layer (hedge.h): described with its unit, hedges, delay and worst
 * case, counted in the amplification; resil_chain_run hedges on the
 * hedge's executor, or passes calls through unhedged without one (see the
 * top of this file). Same statuses as resil_chain_add_layer. Since 0.2. */
typedef struct resil_hedge resil_hedge;
RESIL_API resil_status resil_chain_add_hedge(resil_chain *ch, resil_hedge *p);

/* For a driver that runs the chain's hedge layer through the hedge's split
 * form (the async engine): adds n hedge attempts sent to layer i's
 * `hedges` counter. One atomic add. RESIL_EMISUSE (NULL chain),
 * RESIL_EINVAL (i out of range, or layer i is not of kind HEDGE).
 * Since 0.2. */
RESIL_API resil_status resil_chain_count_hedges(resil_chain *ch, size_t i,
                                                uint64_t n);

/* For a driver that runs the chain's layers itself (the async engine's
 * resil_engine_call_chain): counts one call returning from layer i with
 * outcome *o into the counters resil_chain_layer_stats reads, as
 * resil_chain_run counts it; i == resil_chain_layers(ch) counts one call of
 * the protected call itself (a physical attempt, resil_chain_call_stats).
 * rejected: the layer refused the call itself (nothing inside it called);
 * retries: a RETRY layer's attempts beyond the first of that call (0 for
 * other layers). A few atomic adds. RESIL_EMISUSE (NULL chain),
 * RESIL_EINVAL (o NULL, i out of range, retries on a layer that is not a
 * RETRY). Since 0.2. */
RESIL_API resil_status resil_chain_count_layer(resil_chain *ch, size_t i,
                                               const resil_outcome *o, int rejected,
                                               uint64_t retries);

/* Runs one logical call through all layers. ctx may be NULL. When the chain
 * has a total timeout and ctx has no deadline, the deadline is set here, once
 * for the whole logical call. When the final outcome is not a success and a
 * fallback is configured, the fallback decides the RESIL_OF_FALLBACK_* flag.
 * A NULL chain, a NULL fn or a ctx never passed through resil_ctx_init()
 * give NOT_SENT(LOCAL_ERROR). Since 0.1. */
RESIL_API resil_outcome resil_chain_run(resil_chain *ch, const resil_ctx *ctx,
                                        resil_call_fn fn, void *arg);

/* Number of layers; 0 for a NULL chain. Since 0.1. */
RESIL_API size_t resil_chain_layers(const resil_chain *ch);
/* Counters of layer i (0 = outermost), written up to the caller's struct
 * size (a macro passing sizeof(resil_layer_stats)). RESIL_EMISUSE (NULL
 * chain), RESIL_EINVAL (out NULL, i out of range). Since 0.1. */
RESIL_API resil_status resil_chain_layer_stats_sized(const resil_chain *ch,
                                                     size_t i,
                                                     resil_layer_stats *out,
                                                     size_t struct_size);
#define resil_chain_layer_stats(ch, i, out)                                    \
  resil_chain_layer_stats_sized((ch), (i), (out), sizeof(resil_layer_stats))
/* Counters of the protected call itself (entered = physical attempts that
 * reached it), written like resil_chain_layer_stats. RESIL_EMISUSE (NULL
 * chain), RESIL_EINVAL (out NULL). Since 0.1 (a status since 0.2). */
RESIL_API resil_status resil_chain_call_stats_sized(const resil_chain *ch,
                                                    resil_layer_stats *out,
                                                    size_t struct_size);
#define resil_chain_call_stats(ch, out)                                        \
  resil_chain_call_stats_sized((ch), (out), sizeof(resil_layer_stats))
/* Layer i's label ("Retry", or the custom layer's), and the name of its
 * policy instance ("" when it has none), owned by the chain; NULL for a
 * NULL chain or i out of range. Since 0.2. */
RESIL_API const char *resil_chain_layer_label(const resil_chain *ch, size_t i);
RESIL_API const char *resil_chain_layer_name(const resil_chain *ch, size_t i);
/* Layer i's resil_layer_kind; -1 for a NULL chain or i out of range.
 * Since 0.2. */
RESIL_API int resil_chain_layer_kind(const resil_chain *ch, size_t i);

/* Layer i's policy object when the layer was added by a typed adder
 * (resil_chain_add_retry, ..._breaker, ..._ratelimiter, ..._timelimiter,
 * ..._bulkhead, ..._threadpool, ..._hedge): a resil_retry *, ... by
 * resil_chain_layer_kind(). NULL for a layer added with
 * resil_chain_add_layer() (a custom layer, even one of a library kind: its
 * policy is opaque), a NULL chain or i out of range. For drivers that run
 * a chain's layers themselves (the async engine's resil_engine_call_chain).
 * Since 0.2. */
RESIL_API void *resil_chain_layer_policy(const resil_chain *ch, size_t i);
/* The chain's total_timeout_ns (0: none); -1 for a NULL chain. Since 0.2. */
RESIL_API int64_t resil_chain_total_timeout_ns(const resil_chain *ch);

/* Writes the nesting, e.g. "Retry(Breaker(Bulkhead(call)))", into buf.
 * Returns the length it needed (like snprintf); 0 (and buf "") for a NULL
 * chain. */
RESIL_API size_t resil_chain_nesting(const resil_chain *ch, char *buf,
                                     size_t size);
/* Writes a multi-line description: the nesting, one line per layer with its
 * name and the unit it observes (a hedge layer also with its hedges, delay
 * and worst case: 1 + max_hedges attempts per call), one "note: ..." line
 * per fact worth knowing that is not a trap (a retry outside a breaker:
 * the breaker counts every attempt, the recommended order; a hedge layer:
 * which calls it hedges, and whether resil_chain_run hedges on its executor
 * or passes calls through unhedged; since 0.2, retries and hedges last,
 * DESIGN §2.9: the breaker a library retry or hedge layer watches -- the
 * breaker layer nearest inside it, else its recovery_breaker -- or that it
 * retries or hedges during recovery too), and one "warning: ..." line per real trap (a retry without a
 * deadline; an attempt timeout longer than the total deadline; nested
 * retries, or a retry and a hedge, multiplying attempts). Returns the
 * length it needed; 0 (and buf "") for a NULL chain. */
RESIL_API size_t resil_chain_describe(const resil_chain *ch, char *buf,
                                      size_t size);
/* Number of warnings resil_chain_describe would print (notes not counted);
 * 0 for a NULL chain. */
RESIL_API unsigned resil_chain_warnings(const resil_chain *ch);

/* ---- static amplification (DESIGN §2.8, P14) ------------------------- */

/* One retry (or, since 0.2, hedge) layer for resil_amplification_compute.
 * Sized (version.h): every element of the array carries
 * sizeof(resil_amp_layer), and the library steps through the array by that
 * size. */
typedef struct resil_amp_layer {
  size_t struct_size;
  uint32_t max_attempts;  /* attempts one run of this layer may make one
                             after another (>= 1; 1 for a hedge layer)    */
  int64_t wait_per_run_ns;/* worst-case total backoff of one run           */
  /* Since 0.2, for a hedge layer: extra attempts one run may send in
   * parallel (max_hedges), and the longest delay before each; 0 for a
   * retry layer. */
  uint32_t hedges;
  int64_t hedge_delay_ns;
} resil_amp_layer;

typedef struct resil_amplification {
  size_t struct_size; /* sized struct: the bytes the library wrote        */
  uint64_t attempts;  /* worst-case physical attempts per logical call    */
  int64_t wait_ns;    /* worst-case total backoff per logical call        */
  int64_t time_ns;    /* serial_attempts * attempt_timeout_ns + wait_ns
                         + hedge_delay_ns                                 */
  /* Since 0.2. */
  uint64_t serial_attempts; /* attempts one after another (hedges run in
                               parallel, so they add none): `attempts`
                               without the hedge factors                  */
  int64_t hedge_delay_ns;   /* worst-case time hedges add: each run of a
                               hedge layer sends its last hedge after
                               hedges x delay, which then runs up to the
                               attempt timeout                            */
} resil_amplification;

/* Worst case of nested retry layers (outermost first): attempts multiply
 * (2 x 3 x 2 = 12), layer i's waits happen once per run of it, and it runs
 * once per attempt of every layer outside it. A hedge layer multiplies the
 * attempts of the layers inside it by 1 + hedges (the primary and every
 * hedge run them), but its attempts run in parallel: the worst-case time
 * is unchanged except for the hedge delay, hedges x hedge_delay_ns per
 * serial run of the hedge layer (its last hedge starts that late and may
 * run a full attempt). Saturates instead of overflowing. *out is written up to the caller's struct size (a macro
 * passing sizeof(resil_amplification)). RESIL_EINVAL for layers or out
 * NULL, n == 0, elements whose struct_size differ or is not a
 * resil_amp_layer's, a layer with max_attempts 0 or a negative wait or
 * timeout, a hedge layer (hedges > 0) with max_attempts other than 1 or
 * hedges above RESIL_HEDGE_MAX_HEDGES. Since 0.1 (hedges since 0.2). */
RESIL_API resil_status resil_amplification_compute_sized(
    const resil_amp_layer *layers, size_t n, int64_t attempt_timeout_ns,
    resil_amplification *out, size_t struct_size);
#define resil_amplification_compute(layers, n, timeout, out)                   \
  resil_amplification_compute_sized((layers), (n), (timeout), (out),           \
                                    sizeof(resil_amplification))
/* The same for the chain's own retry and hedge layers, with the attempt
 * timeout of its innermost time limiter (0 when it has none). RESIL_EMISUSE (NULL
 * chain), RESIL_EINVAL (out NULL). Since 0.1. */
RESIL_API resil_status resil_chain_amplification_sized(const resil_chain *ch,
                                                       resil_amplification *out,
                                                       size_t struct_size);
#define resil_chain_amplification(ch, out)                                     \
  resil_chain_amplification_sized((ch), (out), sizeof(resil_amplification))

#ifdef __cplusplus
}
#endif
#endif
