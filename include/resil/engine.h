/* The async engine (DESIGN §9): any number of logical HTTP calls in flight
 * on one thread, driven by the application's event loop through a
 * resil_loop_adapter (loop.h), with every rule of the blocking API kept.
 *
 * Built on libcurl's multi_socket interface: the engine's socket and timer
 * callbacks (CURLMOPT_SOCKETFUNCTION, CURLMOPT_TIMERFUNCTION) become the
 * adapter's watches and its one timer, and transfers advance only through
 * curl_multi_socket_action (never curl_multi_perform). The engine's many
 * timers (libcurl's, each call's deadline, attempt timeouts, retry
 * backoffs, Retry-After waits, rate-limiter reservations, deferred starts)
 * share the adapter's one timer.
 *
 * One implementation of the transport rules: every attempt is prepared,
 * guarded and classified by the same code as resil_http_call's (outcome
 * classification from libcurl results, refusal of libcurl's hidden re-send
 * on a reused connection, the endpoint's idempotency key generated once per
 * logical call and sent on every attempt, redacted logging, max response
 * bytes, the client's counters and attempt listener). The policies are the
 * same objects sync callers use: one breaker may serve both.
 *
 * A logical call, per attempt:
 *   ratelimiter  resil_ratelimiter_reserve: a WAIT becomes a timer; a
 *                limiter whose backend decides without blocking (Since
 *                0.2: libresil-redis's, ratelimit.h "backends") is asked
 *                on the loop (resil_ratelimiter_reserve_async) and the
 *                call waits for its answer, no thread blocked; its fds
 *                are watched through the adapter and its timers share the
 *                engine's;
 *   breaker      resil_breaker_try_acquire, then record(outcome, duration);
 *                refused, the attempt ends REJECTED(BREAKER_OPEN), or
 *                REJECTED(RECOVERING) when a ramp did not admit it (Since
 *                0.2; breaker.h "Ramp": not recorded, no failure);
 *   bulkhead     resil_bulkhead_enqueue: no free slot queues the call in the
 *                bulkhead's FIFO queue (shared with blocking callers) for
 *                at most min(max_wait_ns, the deadline), a timer; a release
 *                on any thread hands the slot over, forwarded to the loop
 *                through the adapter's wake, and the attempt starts on the
 *                loop thread. The wait expiring ends the attempt
 *                REJECTED(BULKHEAD_FULL), nothing sent (the retry may go
 *                on); max_wait_ns 0 or a full queue rejects at once;
 *   connection   a transfer waits in the engine's queue while the
 *                client's connection limits are reached, at most the
 *                lease timeout (see "Connections" below);
 *   HTTP         one transfer; the attempt timeout and the client's
 *                response timeout end it as the blocking path does;
 *   hedge        policies.hedge: further transfers of the same attempt
 *                after a delay (see resil_engine_policies.hedge);
 * and around the attempts
 *   retry        resil_retry_begin / resil_retry_next_timed: backoff and
 *                Retry-After become timers; without a retry there is one
 *                attempt. Retries last (Since 0.2, DESIGN §2.9): the retry
 *                watches policies.breaker (resil_retry_state_watch): a
 *                retry due while it is HALF_OPEN or ramping, or whose wait
 *                ends when it is (or is OPEN past its wait:
 *                resil_retry_proceed), is not made: stop RECOVERING,
 *                counted in the retry's suppressed_recovering. A hedge
 *                watches it likewise (resil_hedge_on_timer_watch);
 *   deadline     the ctx's remaining time when the call is submitted,
 *                measured on the adapter's clock: when it passes, a
 *                transfer in flight is removed at once (UNKNOWN(TIMEOUT)
 *                once the request was sent, NOT_SENT(CONNECT_TIMEOUT)
 *                before), a wait ends, and the call completes.
 *
 * Connections: the engine hands libcurl at most the client's
 * max_connections transfers at once, at most max_connections_per_host of
 * them to one origin (its multi handle keeps its own connection cache,
 * with the same limits; the blocking path's pool slots are not used). An
 * attempt whose policies passed and that finds no room waits, not sent, in
 * the engine's FIFO queue (resil_engine_queued); when a transfer ends, the
 * first waiters whose origin has room start, in order (one waiting for a
 * full origin is passed over for later ones to other origins), and a new
 * attempt never overtakes a waiter of its origin. The wait is bounded by
 * the client's lease_timeout_ns clipped to the deadline, a timer: when it
 * passes (or lease_timeout_ns is 0 and there is no room) the attempt ends
 * NOT_SENT(POOL_TIMEOUT), counted in the client's lease_timeouts, as on
 * the blocking path, and the retry may go on; the deadline passing during
 * the wait ends it the same way and the call completes. A cancel withdraws
 * the waiter (nothing sent). The attempt timeout is counted from the
 * transfer's start, not the wait's. A hedge transfer counts against the
 * same limits; it is sent only when there is room at once (it never
 * queues: otherwise the policy records it NOT_SENT(POOL_TIMEOUT)).
 *
 * Completion: done_fn is called exactly once per accepted call, on the
 * loop thread, never from inside resil_engine_call (the call starts on a
 * later loop iteration). It gets the final outcome (as resil_retry_run
 * would give it, or the single attempt's) and the response of the last
 * attempt that made a transfer (NULL when none did), which the callee then
 * owns (resil_http_response_free).
 *
 * Thread-safety: an engine belongs to its loop thread. resil_engine_new,
 * resil_engine_free and resil_engine_call are called on the loop thread
 * only (or before the loop runs, on the thread that will run it);
 * resil_engine_cancel and resil_engine_handle_release may be called from any
 * thread, but a cancel must not run concurrently with resil_engine_free
 * (after it returned, every call is complete and cancel is a no-op).
 * Callbacks run on the loop thread with no engine lock held; a done_fn may
 * submit (refused while resil_engine_free runs it), cancel and release
 * calls, but must not free the engine.
 *
 * Lifetimes: the client and the adapter outlive the engine; free the
 * engine, then its adapter, before the loop runs again (a wake the adapter
 * still holds would otherwise reach the freed engine).
 *
 * Example (the built-in loop; error handling shortened):
 *
 *   static void done(void *user, resil_engine_handle *h, resil_outcome o,
 *                    resil_http_response *r) {
 *     (void)h;
 *     printf("%d\n", o.http_status);
 *     resil_http_response_free(r);
 *     resil_loop_stop(user);
 *   }
 *   ...
 *   resil_loop *loop; resil_loop_adapter *ad; resil_engine *e;
 *   resil_loop_new(NULL, &loop);
 *   resil_loop_adapter_new(loop, &ad);
 *   resil_engine_config ec;
 *   resil_engine_config_init(&ec);
 *   ec.adapter = ad;
 *   ec.client = client;               // a resil_http_client
 *   resil_engine_new(&ec, &e, NULL);
 *   resil_engine_policies pol;
 *   resil_engine_policies_init(&pol);
 *   pol.retry = retry;                // any of the four may stay NULL
 *   resil_engine_call(e, "get_item", &args, &pol, NULL, done, loop, NULL, NULL);
 *   resil_loop_run(loop);
 *   resil_engine_free(e);
 *   resil_loop_adapter_free(ad);
 *   resil_loop_free(loop);
 *
 * Since 0.2. */
#ifndef RESIL_ENGINE_H
#define RESIL_ENGINE_H

#include <stddef.h>
#include <stdint.h>

#include "breaker.h"
#include "bulkhead.h"
#include "call.h"
#include "chain.h"
#include "hedge.h"
#include "http.h"
#include "loop.h"
#include "ratelimit.h"
#include "retry.h"
#include "version.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct resil_engine resil_engine;
typedef struct resil_engine_handle resil_engine_handle;

typedef struct resil_engine_config {
  /* Sized struct (version.h): set by resil_engine_config_init(). */
  size_t struct_size;
  /* The loop the engine runs on. Not copied: it must outlive the engine.
   * Required. */
  const resil_loop_adapter *adapter;
  /* The client whose endpoints, settings, counters and listener the calls
   * use; the engine holds a reference until it is freed. Required. */
  resil_http_client *client;
} resil_engine_config;

/* adapter and client NULL (both must be set). Since 0.2. */
RESIL_API void resil_engine_config_init_sized(resil_engine_config *cfg, size_t struct_size);
#define resil_engine_config_init(cfg) \
  resil_engine_config_init_sized((cfg), sizeof(resil_engine_config))

/* The policies of one logical call, outermost first: retry, then per
 * attempt ratelimiter, breaker, bulkhead, HTTP (with hedge transfers of
 * the attempt when hedge is set). Every field may be NULL/0
 * (not used). Not owned; each object must outlive the calls using it. The
 * struct itself is copied by resil_engine_call(). */
typedef struct resil_engine_policies {
  /* Sized struct (version.h): set by resil_engine_policies_init(). */
  size_t struct_size;
  resil_retry *retry;
  resil_ratelimiter *ratelimiter;
  resil_breaker *breaker;
  resil_bulkhead *bulkhead;
  /* Per-attempt timeout (the time limiter), counted from the attempt's
   * start; 0 none. An attempt it ends is UNKNOWN(TIMEOUT) once sent,
   * NOT_SENT(CONNECT_TIMEOUT) before, and the retry may go on. */
  int64_t attempt_timeout_ns;
  /* Since 0.2: hedging (hedge.h), or NULL. Each attempt (in the retry's
   * sense) is one hedged call of the policy: once its primary transfer is
   * in libcurl, hedge k (up to max_hedges) is another transfer of the same
   * request, with the same idempotency key, sent k delays later while an
   * attempt is still in flight (the policy decides, and withdraws from its
   * retry budget). The first acceptable answer ends the attempt; the other
   * transfers are removed from the multi handle at once, reported to the
   * client's counters and log as UNKNOWN(CANCELLED), and counted by the
   * policy (cancelled_losers). Every transfer is counted and logged by the
   * client; the attempt listener sees the attempt (its outcome is the
   * transfer that ended it), not each hedge transfer. Only idempotent calls (GET, ...) and
   * keyed writes (idempotency_key SEND) are hedged; an unkeyed write passes
   * through unhedged, one transfer per attempt (counted in passed_unsafe).
   * A hedge never waits: it takes a rate-limiter permit, a breaker permit
   * and a bulkhead slot only if each is available at once (no reservation,
   * no queueing); without one it is not sent and is recorded as a REJECTED
   * hedge (RATE_LIMITED, BREAKER_OPEN or BULKHEAD_FULL), which does not end
   * the attempt while another transfer is in flight; likewise it is sent
   * only when a connection is free at once (see "Connections"; else
   * NOT_SENT(POOL_TIMEOUT) to the policy). A hedge sent has the
   * primary's timers, counted from its own start: attempt_timeout_ns, and
   * once its request is on the wire the client's response timeout; a hedge
   * they end is UNKNOWN(TIMEOUT) (NOT_SENT(CONNECT_TIMEOUT) before sending)
   * to the client's counters and log and to the policy, and, like any
   * unacceptable answer, ends the attempt only when no other transfer of
   * it is in flight. The attempt ends at the first acceptable answer
   * (resil_hedge_acceptable: for a keyed call only a 2xx or 3xx by
   * default, never a 409 PENDING), or, when every transfer ended without
   * one, with the policy's result (hedge.h, resil_hedge_record): the first
   * UNKNOWN among them (maybe executed, no answer; then no response is
   * delivered unless it was the primary's), else the last one's outcome
   * and response. The
   * deadline and a cancel remove every transfer. The engine's calls are not
   * chain calls: hedges are counted by the policy (resil_hedge_get_metrics)
   * and by the engine (resil_engine_get_stats), not by
   * resil_chain_count_hedges. */
  resil_hedge *hedge;
} resil_engine_policies;

/* All NULL, no attempt timeout. Since 0.2. */
RESIL_API void resil_engine_policies_init_sized(resil_engine_policies *p, size_t struct_size);
#define resil_engine_policies_init(p) \
  resil_engine_policies_init_sized((p), sizeof(resil_engine_policies))

/* The completion of call: its final outcome, and the last attempt's
 * response (may be NULL), now owned by the callee. */
typedef void (*resil_engine_done_fn)(void *user, resil_engine_handle *call, resil_outcome outcome,
                                     resil_http_response *response);

/* Creates an engine on cfg->adapter (which it calls set_wake on: one
 * engine per adapter). Returns RESIL_OK, RESIL_EINVAL (a NULL or
 * uninitialised cfg, no adapter or client; err says which), RESIL_ENOMEM,
 * RESIL_ESYS (libcurl or the adapter failed). Since 0.2. */
RESIL_API resil_status resil_engine_new(const resil_engine_config *cfg, resil_engine **out,
                                        resil_error *err);

/* Frees the engine, loop thread only (not from a callback). Calls still
 * running are ended first: each done_fn runs from inside this function
 * with NOT_SENT(CANCELLED), or UNKNOWN(CANCELLED) for a transfer already
 * sent. A submission from such a done_fn (resil_engine_call,
 * resil_engine_call_keyed) is refused with RESIL_ESTATE, so free always
 * ends. Handles the caller still holds stay valid until released. NULL is
 * a no-op. Since 0.2. */
RESIL_API void resil_engine_free(resil_engine *e);

/* Submits a logical call of endpoint with args (as resil_http_call; copied
 * at once), policies (NULL: none) and ctx (NULL: defaults; its deadline,
 * flags and clock are read now; its cancel token, which must outlive the
 * call, is read before each attempt, and the call subscribes to it
 * (resil_cancel_subscribe, call.h) until it completes: a signal from any
 * thread cancels the call as resil_engine_cancel does, on the next loop
 * iteration; the engine keeps no timer for it).
 * Loop thread only. On RESIL_OK, done(user, ...) will be called exactly
 * once, on a later loop iteration; when `out` is not NULL it gets a handle
 * the caller holds until resil_engine_handle_release(), valid for
 * resil_engine_cancel() until then (before or after completion).
 * Otherwise (RESIL_EINVAL: NULL engine or done, an unknown endpoint, bad
 * args, an uninitialised ctx or policies; RESIL_ESTATE: called from a
 * done_fn that resil_engine_free() runs; RESIL_ENOMEM) done is never
 * called, *out is NULL and err says why. Since 0.2. */
RESIL_API resil_status resil_engine_call(resil_engine *e, const char *endpoint,
                                         const resil_http_args *args,
                                         const resil_engine_policies *policies,
                                         const resil_ctx *ctx, resil_engine_done_fn done,
                                         void *user, resil_engine_handle **out, resil_error *err);

/* ---- a chain's layers on the engine (Since 0.2) ----------------------------
 * resil_engine_call_chain(): a logical call through the layers of chain ch
 * (chain.h, e.g. a registry's chain), in the chain's order, outermost
 * first, as resil_chain_run runs them on the blocking path:
 *   - the retry layer (at most one) drives the attempts as policies.retry;
 *   - the layers inside the retry (all layers when there is none) run per
 *     attempt, acquired in the chain's order: a breaker (try_acquire, then
 *     record), a rate limiter (reserve: a WAIT is a timer) and a bulkhead
 *     (enqueue: a wait in its queue), at most one of each; e.g.
 *     Retry(Breaker(RateLimiter(TimeLimiter(Bulkhead(call))))) takes the
 *     breaker permit, then the rate-limiter permit, then the slot. A
 *     layer that refuses ends the attempt REJECTED (the retry may go on)
 *     and hands back what the layers outside it took: a breaker permit
 *     is released, not recorded; a slot is given back (a rate-limiter
 *     permit taken is spent, as on the blocking path). A time limiter
 *     inside the retry (at most one) is the attempt timeout
 *     (policies.attempt_timeout_ns), counted from each transfer's start.
 *     A hedge layer inside the retry is policies.hedge: it must be outside
 *     the per-attempt breaker, rate limiter, bulkhead and time limiter
 *     (each hedge transfer takes its own permits and timeout);
 *   - outside the retry, once per logical call when it starts, in the
 *     chain's order: a breaker (at most one) takes a permit (refused: the
 *     call completes REJECTED(BREAKER_OPEN), nothing sent) recorded once
 *     with the final outcome and the call's duration, as resil_breaker_run
 *     around resil_retry_run; a rate limiter (at most one) takes one
 *     permit (a WAIT is a timer; refused: REJECTED(RATE_LIMITED), or
 *     DEADLINE, and a breaker permit taken before it is released, not
 *     recorded); a time limiter bounds the whole call: the call's deadline
 *     becomes the earlier of the ctx's and now + its timeout (the deadline
 *     rules above apply, also to the outcome);
 *   - the chain's total_timeout_ns is the call's deadline when the ctx has
 *     none (as resil_chain_run).
 * Refused at submission (RESIL_EINVAL, err's msg names the layer by index,
 * label and name, and why, e.g. "layer 0 (Bulkhead 'bh') is outside the
 * retry: the engine holds a bulkhead slot per attempt only"): a custom
 * layer (resil_chain_add_layer, even of a library kind), a thread pool, a
 * second retry, a bulkhead or hedge outside the retry, a second breaker,
 * rate limiter, bulkhead, time limiter or hedge at the same level, a
 * hedge inside a per-attempt layer. resil_engine_chain_check()
 * tells the same without submitting (check a chain once, when it is
 * loaded). Never reordered.
 * The layers' policies are the chain's (borrowed): they and the chain must
 * outlive the call (a registry chain: hold a lease until done returns, as
 * resil_registry_engine_call does). The call feeds the chain's per-layer
 * counters (resil_chain_layer_stats, resil_chain_call_stats) as
 * resil_chain_run does: each attempt that ends is counted by the layers
 * inside the retry down to the one that refused it (its rejection), or by
 * all of them and the protected call (once per attempt: its hedge
 * transfers are not counted as calls of the layers below the hedge) when
 * it reached the transfer; the logical call by the retry layer (with its
 * retries) and the layers outside it; a hedge layer counts the hedges
 * sent (`hedges`; not `unhedged`). Not counted: an attempt a cancel or the
 * deadline ends before its transfer (while it waits for a rate-limiter
 * permit or a bulkhead slot). The engine's counters (resil_engine_get_stats) count as for any
 * call. The chain's fallback is not run.
 * Otherwise as resil_engine_call (same thread, completion, statuses). */
RESIL_API resil_status resil_engine_chain_check(const resil_chain *ch, resil_error *err);
RESIL_API resil_status resil_engine_call_chain(resil_engine *e, resil_chain *ch,
                                               const char *endpoint,
                                               const resil_http_args *args,
                                               const resil_ctx *ctx, resil_engine_done_fn done,
                                               void *user, resil_engine_handle **out,
                                               resil_error *err);

/* From any thread: asks the call to end. It takes effect on the next loop
 * iteration (the adapter is woken): a call waiting to start, queued for a
 * bulkhead slot or a connection (withdrawn from the queue, nothing sent)
 * or between
 * attempts completes NOT_SENT(CANCELLED) (or with the last attempt's
 * outcome, stop CANCELLED, when one was made); a transfer in flight is
 * removed at once and completes UNKNOWN(CANCELLED) once sent,
 * NOT_SENT(CANCELLED) before. After completion it is a no-op. NULL is a
 * no-op. Since 0.2. */
RESIL_API void resil_engine_cancel(resil_engine_handle *call);

/* From any thread: gives back the handle resil_engine_call() returned in
 * *out (the call itself goes on). NULL is a no-op. Since 0.2. */
RESIL_API void resil_engine_handle_release(resil_engine_handle *call);

/* Calls submitted and not yet completed (0 for NULL). Loop thread. Since 0.2. */
RESIL_API size_t resil_engine_active(const resil_engine *e);
/* Transfers in libcurl now, and the most there have been at once (never
 * more than the client's max_connections: see "Connections"). Loop
 * thread. 0 for NULL. Since 0.2. */
RESIL_API size_t resil_engine_in_flight(const resil_engine *e);
RESIL_API size_t resil_engine_peak_in_flight(const resil_engine *e);
/* Attempts waiting in the engine's queue for a connection now (not sent).
 * Loop thread. 0 for NULL. Since 0.2. */
RESIL_API size_t resil_engine_queued(const resil_engine *e);

/* Per-layer counters of an engine since it was created (Since 0.2). A
 * logical call is one resil_engine_call() (the keyed flow's writes and
 * status queries are each one); an attempt is one in the retry's sense
 * (the single one without a retry); a transfer is one physical request
 * handed to libcurl (an attempt's primary, or a hedge). Hedges are never
 * counted as retries, nor retries as hedges. Each counter is read
 * atomically; the set is not one snapshot. */
typedef struct resil_engine_stats {
  /* Sized struct (version.h): the bytes the library wrote. */
  size_t struct_size;
  uint64_t calls_submitted;   /* accepted by resil_engine_call()           */
  uint64_t calls_completed;   /* done_fn called                             */
  /* calls_completed by the final outcome's kind. */
  uint64_t completed_answered;
  uint64_t completed_not_sent;
  uint64_t completed_unknown;
  uint64_t completed_rejected;
  uint64_t transfers;         /* physical transfers started: primaries and
                                 hedges                                     */
  uint64_t retries;           /* attempts after the first of a call (the
                                 retry's; hedges excluded)                  */
  uint64_t hedges_sent;       /* hedges the policy sent (resil_hedge_on_timer
                                 GO), hedges_rejected included              */
  uint64_t hedges_rejected;   /* ... of which not sent: no rate-limiter
                                 permit, breaker permit or bulkhead slot at
                                 once (also counted in rejected_* below)    */
  uint64_t hedge_wins;        /* attempts won by a hedge, not the primary   */
  uint64_t cancelled_losers;  /* transfers removed because another transfer
                                 of the attempt won (the primary included)  */
  uint64_t unhedged;          /* attempts with policies.hedge passed through
                                 unhedged (neither idempotent nor keyed)    */
  /* Rejections per layer, attempts and hedges alike (nothing sent). */
  uint64_t rejected_ratelimiter;   /* no permit within the limiter's timeout
                                      or the deadline (RATE_LIMITED or
                                      DEADLINE), or none at once for a hedge */
  uint64_t rejected_breaker;       /* breaker refused a permit: open, or
                                      its ramp (rejected_recovering)       */
  uint64_t rejected_bulkhead_full; /* no slot, and the queue full or
                                      max_wait_ns 0; no free slot at once
                                      for a hedge                          */
  uint64_t rejected_bulkhead_wait; /* queued for a slot, none within the
                                      max wait                             */
  /* Attempts that waited in the engine's connection queue for the
   * client's lease timeout (or their deadline) in vain, NOT_SENT(POOL_TIMEOUT)
   * (see "Connections"). */
  uint64_t rejected_pool_timeout;
  /* ---- Since 0.2: recovery (DESIGN §2.9). A caller compiled without
   * these fields gets none (its struct_size ends before them). */
  /* Of rejected_breaker (still counted there: it is every refusal of a
   * breaker permit, so the rejected_* per layer keep adding up to the
   * rejections): those a breaker's ramp refused, REJECTED(RECOVERING),
   * attempts, hedges and calls refused by a breaker outside the retry
   * (resil_engine_call_chain) alike. The rest of rejected_breaker are
   * BREAKER_OPEN. */
  uint64_t rejected_recovering;
  /* Hedges that were due and not sent because the breaker they go through
   * (policies.breaker, or the chain's per-attempt breaker) was recovering:
   * with hedges last (the hedge's hedge_during_recovery 0, the default)
   * those the hedge policy did not let go because the breaker was
   * HALF_OPEN or ramping (not in hedges_sent; the hedge's
   * suppressed_recovering); with hedge_during_recovery 1, those it let go
   * that the breaker's ramp refused (in hedges_sent, hedges_rejected,
   * rejected_breaker and rejected_recovering). */
  uint64_t hedges_refused_recovering;
  /* Logical calls whose retry stopped RESIL_STOP_RECOVERING: a retry was
   * due and not made because the breaker the attempts go through was
   * HALF_OPEN or ramping (retries last; retry.h retry_during_recovery 0).
   * One per call at most; not in retries; the retry's
   * suppressed_recovering counts the same calls (for that retry). */
  uint64_t retries_suppressed_recovering;
} resil_engine_stats;

/* Fills *out up to the caller's struct size (a macro passing
 * sizeof(resil_engine_stats)). Any thread, not concurrently with
 * resil_engine_free(). RESIL_OK, RESIL_EMISUSE (NULL engine), RESIL_EINVAL
 * (out NULL). Since 0.2. */
RESIL_API resil_status resil_engine_get_stats_sized(const resil_engine *e,
                                                    resil_engine_stats *out,
                                                    size_t struct_size);
#define resil_engine_get_stats(e, out) \
  resil_engine_get_stats_sized((e), (out), sizeof(resil_engine_stats))

/* Adds the engine's counters above to a metrics collector (metrics.h) as
 * a source, under `name` (required: an engine has no name of its own):
 *   resil_engine_calls_submitted_total{name}          calls_submitted
 *   resil_engine_calls_total{name,outcome}            completed_* (answered,
 *                                                     not_sent, unknown,
 *                                                     rejected)
 *   resil_engine_calls_in_flight{name}       gauge    calls_submitted less
 *                                                     calls_completed
 *   resil_engine_transfers_total{name}                transfers
 *   resil_engine_retries_total{name}                  retries
 *   resil_engine_retries_suppressed_recovering_total{name}
 *                                                     retries_suppressed_recovering
 *   resil_engine_hedges_total{name,kind}              sent, rejected (hedges_
 *                         rejected), won (hedge_wins), refused_recovering
 *                         (hedges_refused_recovering), cancelled_loser
 *                         (cancelled_losers; primaries included)
 *   resil_engine_unhedged_attempts_total{name}        unhedged
 *   resil_engine_rejected_total{name,reason}          ratelimiter, breaker_open
 *                         (rejected_breaker less rejected_recovering),
 *                         recovering, bulkhead_full, bulkhead_wait,
 *                         pool_timeout: the reasons are disjoint and add up
 *                         to the rejections.
 * The render reads the counters as resil_engine_get_stats does, on the
 * scraping thread while the loop thread runs the engine (never the
 * loop-thread-only resil_engine_in_flight/_queued). The engine is
 * borrowed: remove it (resil_metrics_remove) before resil_engine_free.
 * Part of libresil-http. Same statuses as resil_metrics_add_source
 * (RESIL_EINVAL for a NULL engine or name). Since 0.2. */
typedef struct resil_metrics resil_metrics;
RESIL_API resil_status resil_engine_metrics_add(resil_metrics *m, const char *name,
                                                const resil_engine *e);


/* ---- keyed calls with the recovery flow (Since 0.2) ----------------------
 * resil_engine_call_keyed(): resil_http_call_keyed() (http.h: read its
 * documentation, every rule there holds) on the engine, as steps of one
 * state machine driven by engine completions and timers:
 *   write    one physical request, a resil_engine_call() of the endpoint
 *            with the call's one idempotency key (generated once at submit
 *            when the endpoint says RESIL_HTTP_KEY_SEND and args gives
 *            none) and the policies' ratelimiter, breaker, bulkhead and
 *            attempt timeout (the retry is not passed down: it drives the
 *            writes from here, through its split form);
 *   query    after a write outcome in the client's status_query_classes
 *            (call with a key, endpoint with a status_endpoint): a GET of
 *            the status endpoint, its own resil_engine_call() with the
 *            same per-request policies, deadline and cancel token;
 *   COMMITTED  the stored result is the answer (ANSWERED(S) with
 *            RESIL_OF_RECOVERED, response recovered); no write is re-sent;
 *   PENDING  a timer (status_poll_ns, or the answer's Retry-After when
 *            longer), never reaching pending_wait_max_ns from the first
 *            PENDING answer or the deadline, then ask again; when the wait
 *            ends, the write's outcome with RESIL_OF_STATUS_PENDING;
 *   UNKNOWN  (404, UNKNOWN, FAILED, no usable answer) the retry decides a
 *            re-send with the same key, its backoff a timer.
 * The decisions are the blocking path's (one implementation, shared);
 * never a success the server did not report. The final outcome is the
 * retry's, as for resil_http_call_keyed().
 *
 * Completion: done is called exactly once, on the loop thread, never from
 * inside resil_engine_call_keyed(), with the final outcome and the
 * recovered response or the last write's (NULL when none was made), owned
 * by the callee. report (may be NULL) is written, up to report_size (the
 * macro passes sizeof(resil_http_recovery)), just before done is called;
 * it must stay valid until then. resil_engine_free() ends running keyed
 * calls as it ends plain ones (done from inside it, stop CANCELLED).
 *
 * The ctx cancel token: each physical request carries it (see
 * resil_engine_call), and the keyed call subscribes to it too until it
 * completes, so a signal from any thread ends a wait (the deferred start, a
 * PENDING poll's timer, a retry backoff) on the next loop iteration, with
 * what the end of that wait gives once the token is set (as the blocking
 * path's cancellable sleep does): no new write is sent, and after PENDING
 * the write's outcome with RESIL_OF_STATUS_PENDING.
 *
 * Weaker than the blocking path: the client's attempt listener sees each
 * physical request as the engine reports an unretried call (attempt 1,
 * next_wait_ns -1), not the recovery numbering. As on the blocking path,
 * a status query carries the call's idempotency key, and the one that read
 * the stored result (COMMITTED) has RESIL_OF_RECOVERED in its outcome's
 * flags (the event log's `recovered`). */

typedef struct resil_engine_keyed resil_engine_keyed;

typedef void (*resil_engine_keyed_done_fn)(void *user, resil_engine_keyed *call,
                                           resil_outcome outcome,
                                           resil_http_response *response);

/* Submits a keyed logical call (args copied at once, ctx's deadline, flags,
 * clock and cancel token read as for resil_engine_call). Loop thread only.
 * On RESIL_OK done will be called once; *out (may be NULL) gets a handle
 * valid until resil_engine_keyed_release(). RESIL_EINVAL (NULL engine or
 * done, an unknown endpoint, bad args, an uninitialised ctx or policies),
 * RESIL_ESTATE (called from a done callback that resil_engine_free()
 * runs), RESIL_ENOMEM: done is never called and err says why. Since 0.2. */
RESIL_API resil_status resil_engine_call_keyed_sized(
    resil_engine *e, const char *endpoint, const resil_http_args *args,
    const resil_engine_policies *policies, const resil_ctx *ctx,
    resil_engine_keyed_done_fn done, void *user, resil_http_recovery *report,
    size_t report_size, resil_engine_keyed **out, resil_error *err);
#define resil_engine_call_keyed(e, endpoint, args, policies, ctx, done, user, report, out, err) \
  resil_engine_call_keyed_sized((e), (endpoint), (args), (policies), (ctx), (done), (user),   \
                                (report), sizeof(resil_http_recovery), (out), (err))

/* resil_engine_call_keyed() through chain ch (see resil_engine_call_chain):
 * the chain's retry drives the writes (policies.retry there), the layers
 * inside it run per physical request (each write and each status query) in
 * the chain's order, the time limiter inside it is each request's attempt
 * timeout, and the chain's total_timeout (when the ctx has no deadline)
 * and a time limiter outside the retry bound the call. Refused besides
 * resil_engine_call_chain's cases: a breaker or rate limiter outside the
 * retry (the keyed flow has no per-call layer). The chain's layer counters
 * are not fed. Otherwise as resil_engine_call_keyed. Since 0.2. */
RESIL_API resil_status resil_engine_call_chain_keyed_sized(
    resil_engine *e, resil_chain *ch, const char *endpoint, const resil_http_args *args,
    const resil_ctx *ctx, resil_engine_keyed_done_fn done, void *user,
    resil_http_recovery *report, size_t report_size, resil_engine_keyed **out,
    resil_error *err);
#define resil_engine_call_chain_keyed(e, ch, endpoint, args, ctx, done, user, report, out, err) \
  resil_engine_call_chain_keyed_sized((e), (ch), (endpoint), (args), (ctx), (done), (user),     \
                                      (report), sizeof(resil_http_recovery), (out), (err))

/* From any thread: ends the call on the next loop iteration. A physical
 * request in flight is cancelled as resil_engine_cancel() does; a wait ends
 * at once. The call completes with the last write's outcome, stop
 * CANCELLED (RESIL_OF_STATUS_PENDING when PENDING was seen), or
 * NOT_SENT(CANCELLED) before any write. After completion a no-op; NULL a
 * no-op. Not concurrently with resil_engine_free(). Since 0.2. */
RESIL_API void resil_engine_keyed_cancel(resil_engine_keyed *call);
/* From any thread: gives back the handle. NULL is a no-op. Since 0.2. */
RESIL_API void resil_engine_keyed_release(resil_engine_keyed *call);

#ifdef __cplusplus
}
#endif
#endif
