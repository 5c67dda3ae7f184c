/* resil_hedge: hedged attempts, safe by construction (DESIGN §9). Since 0.2.
 *
 * A hedge sends another attempt of the same call when the first has not
 * answered after a delay, at most max_hedges extra attempts per logical
 * call; the first acceptable answer wins and the others are cancelled and
 * counted. The delay is fixed, or a percentile of recent latencies (e.g.
 * p95 of the last 1000, with a floor, a cap, and the fixed delay until
 * min_samples latencies are known). Hedges may spend a shared retry budget
 * (resil_retry_budget, retry.h): each hedge withdraws like a retry and is
 * not sent when the budget refuses.
 *
 * Safety: a call is hedged only when its ctx->flags carry
 * RESIL_CALL_IDEMPOTENT or RESIL_CALL_STABLE_KEY (the same idempotency key
 * on every attempt, deduplicated by the server). Any other call (an unkeyed
 * write) is passed through unhedged: resil_hedge_begin answers
 * RESIL_DECISION_DENY, the call makes its one attempt as if the hedge were
 * not there, and it is counted in passed_unsafe. It is never refused and
 * never hedged.
 *
 * Where hedging runs: the split form below, driven by an event loop (the
 * async engine), or resil_hedge_run_on, a blocking form that runs every
 * attempt on a thread pool the caller gives and cancels the losers through
 * their ctx->cancel. resil_hedge_run (the run form a blocking resil_chain
 * uses) hedges the same way on the config's `executor` pool; a hedge
 * without one passes every call through resil_hedge_run unhedged, one
 * attempt, counted in passed_blocking, and resil_chain_describe says which
 * of the two each hedge layer does.
 *
 * The split form, per logical call (the caller keeps a resil_hedge_call):
 *
 *   resil_hedge_call hc;
 *   int64_t delay;
 *   start_attempt(1);                                // the primary, always
 *   if (resil_hedge_begin(h, ctx, &hc, &delay) == RESIL_DECISION_WAIT)
 *     arm_timer(delay);
 *   on timer:
 *     if (resil_hedge_on_timer(h, &hc, &delay) == RESIL_DECISION_GO) {
 *       start_attempt(hc.attempts);                  // same key, same request
 *       if (delay >= 0) arm_timer(delay);
 *     }
 *   on attempt n ending with outcome o after d ns:
 *     switch (resil_hedge_record(h, &hc, n, d, &o)) {
 *     case RESIL_HEDGE_WINNER: disarm; cancel the others; deliver o; break;
 *     case RESIL_HEDGE_LAST:   disarm; deliver hc.result; break; // none acceptable
 *     case RESIL_HEDGE_KEEP_WAITING: break;               // others in flight
 *     case RESIL_HEDGE_IGNORED: break;                    // call already over
 *     }
 *
 * Rules the split form keeps in one place:
 *   - which answer wins: resil_hedge_acceptable (a keyed call only with a
 *     2xx or 3xx by default, never a 4xx such as 409 "key PENDING"); the
 *     run forms and the engine all decide through it.
 *   - hedge k (k = 1..max_hedges) may go k delays after the primary, and
 *     only while some attempt of the call is still in flight: an attempt
 *     that ends unacceptable while nothing else is in flight ends the call
 *     (RESIL_HEDGE_LAST; failures are a retry layer's business, not the
 *     hedge's). So at most 1 + max_hedges attempts per call, in flight or
 *     in total.
 *   - what a call no attempt won ends with: resil_hedge_record's rule
 *     (hc.result: the first maybe-executed UNKNOWN, else the last outcome).
 *   - a budget refusal ends hedging for that call (counted once).
 *   - the latency tracker learns the primary attempt's duration when it
 *     ends ANSWERED (any status), and, when a hedge wins while the primary
 *     is still in flight, the primary's age at that instant (a lower bound:
 *     without it the slow primaries that hedging cuts short would vanish
 *     from the sample and the percentile would sink). Hedges' own
 *     durations are not learnt.
 *   - events (Since 0.2): begin, on_timer and record tell the config's
 *     on_event listener, and those added by resil_hedge_listener_add, what
 *     they decided (resil_hedge_event), so the
 *     engine and the run forms report the same events without a word of
 *     their own.
 *
 * Thread-safety: every function may be called on the same hedge from any
 * thread at once, except resil_hedge_free, which needs exclusive access. A
 * resil_hedge_call belongs to its caller: one thread at a time. begin and
 * on_timer take no lock (the cached delay is one atomic load; a budget
 * withdrawal takes the budget's lock); record takes the hedge's lock when
 * it feeds the tracker (percentile mode only). An event for listeners
 * added by resil_hedge_listener_add takes the listener list's lock twice,
 * briefly, never while a listener runs.
 *
 * Create/free pair: resil_hedge_new / resil_hedge_free. */
#ifndef RESIL_HEDGE_H
#define RESIL_HEDGE_H

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

/* breaker.h (retries and hedges last, Since 0.2). */
struct resil_breaker;

typedef struct resil_hedge resil_hedge;
typedef struct resil_retry_budget resil_retry_budget;
typedef struct resil_threadpool resil_threadpool;

#define RESIL_HEDGE_MAX_HEDGES 16
#define RESIL_HEDGE_MAX_WINDOW 4096
/* Listeners resil_hedge_listener_add may add to one hedge. Since 0.2. */
#define RESIL_HEDGE_MAX_LISTENERS 8

/* Outcome classes that do not win by default: NOT_SENT, UNKNOWN, 5xx,
 * 408/425/429 and REJECTED. So a 2xx, a 3xx and a 4xx other than
 * 408/425/429 win an unkeyed call (a 404 to a GET is an answer). */
#define RESIL_HEDGE_DEFAULT_UNACCEPTABLE                                        \
  (RESIL_CLASS_BIT(RESIL_CLASS_NOT_SENT) | RESIL_CLASS_BIT(RESIL_CLASS_UNKNOWN) | \
   RESIL_CLASS_BIT(RESIL_CLASS_SERVER_ERROR) | RESIL_CLASSES_THROTTLED |        \
   RESIL_CLASS_BIT(RESIL_CLASS_REJECTED))

/* Outcome classes that do not win a keyed call by default (Since 0.2): the
 * above and every other 4xx (RESIL_CLASS_CLIENT_ERROR). Only a 2xx or a 3xx
 * wins a keyed call. Why: every hedge of a keyed call carries the same
 * idempotency key, so a 4xx may be the server's answer about the key, not
 * about the request: 409 "an operation with this key is still PENDING" (the
 * primary is running it), 425/429 while it runs. Such an answer winning
 * would cancel the transfer that is doing the work and report a failure
 * for a write that may commit. A definitive 4xx (400, 422 to the request
 * itself) is not lost: every transfer gets it, and when none is acceptable
 * the call ends with the last one's outcome (RESIL_HEDGE_LAST), unless an
 * attempt ended maybe executed without an answer: then with that one
 * (resil_hedge_record). */
#define RESIL_HEDGE_DEFAULT_KEYED_UNACCEPTABLE                                  \
  (RESIL_HEDGE_DEFAULT_UNACCEPTABLE | RESIL_CLASS_BIT(RESIL_CLASS_CLIENT_ERROR))

/* What a hedge policy tells its listener (resil_hedge_config.on_event).
 * Each event but WON of the primary matches one count of
 * resil_hedge_metrics. Since 0.2. */
typedef enum resil_hedge_event_kind {
  /* resil_hedge_on_timer let hedge `hedge` go (hedges_sent); delay_ns is
   * the delay the policy gave before it. */
  RESIL_HEDGE_EVENT_SENT = 1,
  /* Attempt `hedge` (0: the primary) won a call that had sent at least one
   * hedge; outcome is the winner's. hedges_won counts those with hedge >= 1.
   * A call won by its primary before any hedge was sent reports nothing. */
  RESIL_HEDGE_EVENT_WON = 2,
  /* Attempt `hedge` (0: the primary) was still in flight when another won:
   * the caller cancels it (cancelled_losers). One per loser, after WON. */
  RESIL_HEDGE_EVENT_CANCELLED_LOSER = 3,
  /* Hedge `hedge` did not go: the budget refused it in resil_hedge_on_timer
   * (refused_by_budget; outcome REJECTED(RETRY_BUDGET), and `hedge` is the
   * number it would have had), the watched breaker was recovering (Since
   * 0.2: suppressed_recovering; outcome REJECTED(RECOVERING)), or it was recorded with a REJECTED outcome
   * (the caller's other policies or thread pool refused it after the policy
   * let it go; outcome that one). */
  RESIL_HEDGE_EVENT_REJECTED = 4,
  /* resil_hedge_begin passed the call through unhedged: neither
   * RESIL_CALL_IDEMPOTENT nor RESIL_CALL_STABLE_KEY (passed_unsafe). */
  RESIL_HEDGE_EVENT_PASSED_UNSAFE = 5
} resil_hedge_event_kind;

/* One event (a sized struct: the library sets struct_size to the bytes it
 * filled; read no field beyond it). Since 0.2. */
typedef struct resil_hedge_event {
  size_t struct_size;
  resil_hedge_event_kind kind;
  /* The hedge's instance name, owned by the hedge. */
  const char *name;
  /* Which attempt: 0 the primary, k >= 1 hedge k (attempt k + 1). */
  uint32_t hedge;
  /* SENT: the delay used before this hedge (the one resil_hedge_begin or
   * the previous resil_hedge_on_timer handed out); -1 for other kinds. */
  int64_t delay_ns;
  /* Time since the primary started, on the hedge's clock (0 for
   * PASSED_UNSAFE). */
  int64_t elapsed_ns;
  /* 1 when outcome holds one (WON, REJECTED), else 0. */
  int has_outcome;
  resil_outcome outcome;
} resil_hedge_event;

/* The listener type (resil_hedge_config.on_event). Since 0.2. */
typedef void (*resil_hedge_event_fn)(void *user, const resil_hedge_event *ev);

typedef struct resil_hedge_config {
  /* Sized struct (version.h); set by resil_hedge_config_init(). */
  size_t struct_size;
  /* Instance name, copied. Default "hedge". */
  const char *name;
  /* The delay before each hedge in fixed mode, and in percentile mode until
   * min_samples latencies are known. 0..24 h (0 = all attempts at once).
   * Default 100 ms. */
  int64_t delay_ns;
  /* 0 (default) = fixed delay. 1..999 = the delay is this percentile, in
   * thousandths, of the last window_size learnt latencies (nearest rank:
   * 950 = p95, 999 = p99.9), kept within min_delay_ns..max_delay_ns. */
  uint32_t delay_percentile_permille;
  /* Percentile mode: floor and cap of the delay. 0..24 h each, floor <=
   * cap. Defaults 1 ms and 10 s. */
  int64_t min_delay_ns;
  int64_t max_delay_ns;
  /* Percentile mode: latencies needed before the percentile is used,
   * 1..window_size. Default 100. */
  uint32_t min_samples;
  /* Percentile mode: how many recent latencies are kept (a ring of the
   * last N), 1..RESIL_HEDGE_MAX_WINDOW. Default 1000. */
  uint32_t window_size;
  /* Extra attempts per logical call, 1..RESIL_HEDGE_MAX_HEDGES. Default 1. */
  uint32_t max_hedges;
  /* Outcome classes (RESIL_CLASS_BIT mask) that do not win a call that
   * carries no key (ctx flags without RESIL_CALL_STABLE_KEY): the call keeps
   * waiting for the other attempts. Default RESIL_HEDGE_DEFAULT_UNACCEPTABLE;
   * RESIL_CLASS_SUCCESS may not be in it. Keyed calls use
   * keyed_unacceptable_classes instead (resil_hedge_acceptable). */
  uint32_t unacceptable_classes;
  /* Shared retry budget, or NULL (default: hedges bounded by max_hedges
   * only). Not owned; it must outlive the hedge. Each hedge withdraws one
   * retry (resil_retry_budget_try_withdraw). */
  resil_retry_budget *budget;
  /* 1: resil_hedge_begin deposits one logical call into the budget (for a
   * budget no retry layer funds); 0 (default): the hedge only withdraws,
   * and the deposits come from the retries sharing the budget (each
   * resil_retry_begin deposits once per logical call). */
  int deposit_calls;
  /* Clock for the primary's age (resil_hedge_begin/record); NULL = system. */
  const resil_clock *clock;
  /* NULL = malloc/free. Used by _new and _free. */
  const resil_allocator *alloc;
  /* Optional thread pool (not owned; it must outlive the hedge) on which
   * resil_hedge_run, the run form a blocking resil_chain uses, hedges, as
   * resil_hedge_run_on does. NULL (default): resil_hedge_run passes every
   * call through unhedged. */
  resil_threadpool *executor;
  /* Since 0.2: the outcome classes that do not win a keyed call (ctx flags
   * carry RESIL_CALL_STABLE_KEY: a keyed write, or any call sending a
   * stable idempotency key), in place of unacceptable_classes. Default
   * RESIL_HEDGE_DEFAULT_KEYED_UNACCEPTABLE (only 2xx/3xx win);
   * RESIL_CLASS_SUCCESS may not be in it. A caller compiled without this
   * field gets the default. */
  uint32_t keyed_unacceptable_classes;
  /* Since 0.2: event listener, NULL (default) for none; on_event_user is
   * its first argument. Called once per event (resil_hedge_event below) by
   * the split form's functions themselves (resil_hedge_begin, _on_timer,
   * _record), so every driver of the policy reports the same events: the
   * async engine on its loop thread, resil_hedge_run_on and resil_hedge_run
   * on the thread that called them (never on a worker of the pool). It
   * runs with no lock of the hedge held, on the thread that made the
   * decision, before that function returns; it may read the hedge's
   * getters but must not free it. A caller compiled without these fields
   * gets none. */
  resil_hedge_event_fn on_event;
  void *on_event_user;
  /* ---- Since 0.2: hedges last (DESIGN §2.9, as retries). The breaker
   * the hedged attempts go through (breaker.h; not owned, it must outlive
   * the hedge): while it is HALF_OPEN or ramping (resil_breaker_recovering)
   * resil_hedge_on_timer sends no hedge: it answers DENY, the call sends
   * no further hedge, and suppressed_recovering counts it (a REJECTED event
   * with outcome REJECTED(RECOVERING)). The check is one atomic load (and a
   * clock read while ramping), made only when a hedge is due, before the
   * budget (no token taken). In a chain (chain.h) a hedge layer watches
   * the library breaker layer nearest inside it, when there is one,
   * instead; the async engine its per-attempt breaker. NULL (default):
   * none. */
  struct resil_breaker *recovery_breaker;
  /* 1 = hedge during recovery as before (nothing watched, not even the
   * engine's breaker); 0 = hedges last. 0..1. Default 0. */
  int hedge_during_recovery;
} resil_hedge_config;

/* Counters since creation, each read atomically (the set is not one
 * snapshot). */
typedef struct resil_hedge_metrics {
  /* Sized struct (version.h): the bytes the library wrote. */
  size_t struct_size;
  uint64_t calls;             /* logical calls (begin or run)              */
  uint64_t hedged_calls;      /* calls that sent at least one hedge        */
  uint64_t hedges_sent;       /* extra attempts sent                       */
  uint64_t hedges_won;        /* calls won by a hedge, not the primary     */
  uint64_t cancelled_losers;  /* attempts still in flight when another won */
  uint64_t refused_by_budget; /* hedges the budget refused                 */
  uint64_t passed_unsafe;     /* calls passed through: not idempotent, no key */
  uint64_t passed_blocking;   /* calls resil_hedge_run passed through (no
                                 executor)                                 */
  uint32_t samples;           /* latencies in the window now               */
  int64_t delay_ns;           /* the delay a call beginning now would get  */
  /* Since 0.2: hedges not sent because the watched breaker was HALF_OPEN
   * or ramping (recovery_breaker; one per call at most). */
  uint64_t suppressed_recovering;
} resil_hedge_metrics;

/* The caller's state of one logical call, filled by resil_hedge_begin and
 * updated by on_timer and record. Public fields only: read them, never
 * write them. Sized (version.h): resil_hedge_begin is a macro passing
 * sizeof(resil_hedge_call). */
typedef struct resil_hedge_call {
  size_t struct_size;
  /* Attempts started, the primary included: the hedge a GO from
   * resil_hedge_on_timer asks for is attempt number `attempts`. */
  uint32_t attempts;
  /* Attempts started and not yet recorded. */
  uint32_t in_flight;
  /* The 1-based attempt that won, 0 while none has. */
  uint32_t winner;
  /* RESIL_HEDGE_CALL_* bits. */
  uint32_t state;
  /* Bit n-1 set once attempt n was recorded (a second record of the same
   * attempt is IGNORED). */
  uint32_t ended_mask;
  /* When the primary started, on the hedge's clock. */
  int64_t started_ns;
  /* Since 0.2: the delay begin or on_timer last handed out (-1: none), the
   * one a SENT event reports. A caller compiled without it reports 0. */
  int64_t delay_ns;
  /* Since 0.2: once resil_hedge_record returned WINNER or LAST, the outcome
   * the call ends with (deliver this one) and the 1-based attempt it came
   * from: the winner's; for LAST, the first attempt that ended maybe
   * executed without an answer if any did, else the last attempt's (the
   * rule at resil_hedge_record). While the call runs: that first
   * maybe-executed attempt so far (result_attempt 0: none yet). A caller
   * compiled without these fields cannot keep it, and its call ends with
   * the last attempt's outcome. */
  uint32_t result_attempt;
  resil_outcome result;
} resil_hedge_call;

#define RESIL_HEDGE_CALL_SAFE 0x1u    /* may be hedged                       */
#define RESIL_HEDGE_CALL_OVER 0x2u    /* a WINNER or LAST was recorded       */
#define RESIL_HEDGE_CALL_PRIMARY 0x4u /* the primary attempt is in flight    */
#define RESIL_HEDGE_CALL_NO_MORE 0x8u /* no further hedge will be allowed    */
#define RESIL_HEDGE_CALL_KEYED 0x10u  /* the ctx carried RESIL_CALL_STABLE_KEY:
                                         keyed_unacceptable_classes decide */
/* Since 0.2: set (with NO_MORE) when resil_hedge_on_timer sent no hedge
 * because the watched breaker was recovering (suppressed_recovering): how
 * the async engine tells that DENY from the others. */
#define RESIL_HEDGE_CALL_RECOVERING 0x20u

/* What resil_hedge_record says to do with an attempt's outcome. */
typedef enum resil_hedge_verdict {
  /* Nothing to do: the call is already over (a late loser), or misuse
   * (NULL argument, an attempt number never started or already recorded).
   * Nothing changed. */
  RESIL_HEDGE_IGNORED = 0,
  /* Not acceptable, and other attempts are in flight: wait for them (the
   * hedge timer stays armed). */
  RESIL_HEDGE_KEEP_WAITING = 1,
  /* Acceptable: deliver it, disarm the timer and cancel the attempts still
   * in flight (counted as cancelled_losers now; their records, if any, are
   * IGNORED). */
  RESIL_HEDGE_WINNER = 2,
  /* Not acceptable and nothing else in flight: the call ends with
   * call->result (this outcome, or an earlier attempt's maybe-executed one:
   * resil_hedge_record); disarm the timer. */
  RESIL_HEDGE_LAST = 3
} resil_hedge_verdict;

/* Writes the documented defaults and struct_size. NULL is a no-op. A macro
 * passing sizeof(resil_hedge_config). Since 0.2. */
RESIL_API void resil_hedge_config_init_sized(resil_hedge_config *cfg,
                                             size_t struct_size);
#define resil_hedge_config_init(cfg)                                           \
  resil_hedge_config_init_sized((cfg), sizeof(resil_hedge_config))

/* Validates cfg and creates a hedge. Returns RESIL_OK; RESIL_EINVAL for cfg
 * or out NULL, a config never passed through resil_hedge_config_init()
 * ("call resil_hedge_config_init()") or a field out of range (err names the
 * field, its range and the value, durations in human units); RESIL_ENOMEM;
 * RESIL_ESYS (mutex). *out is written only on success. Since 0.2. */
RESIL_API resil_status resil_hedge_new(const resil_hedge_config *cfg,
                                       resil_hedge **out, resil_error *err);
/* NULL is a no-op. Since 0.2. */
RESIL_API void resil_hedge_free(resil_hedge *h);

/* Adds a listener called for every later event, after the config's
 * on_event (if any), on the same thread and under the same rules (no lock
 * of the hedge held while it runs; it must not free the hedge). May be
 * called from any thread while the hedge is in use: a call under way sees
 * the listener from its next event on. The same fn/user pair may be added
 * more than once (then called once per registration). Returns RESIL_OK,
 * RESIL_EINVAL (fn NULL), RESIL_ESTATE (already RESIL_HEDGE_MAX_LISTENERS
 * listeners) or RESIL_EMISUSE (NULL handle). Since 0.2. */
RESIL_API resil_status resil_hedge_listener_add(resil_hedge *h,
                                                resil_hedge_event_fn fn,
                                                void *user);

/* Removes one registration of fn/user. When it returns the listener is not
 * running and will not be called again, so `user` may be freed -- except
 * when called from inside a hedge listener, where it cannot wait for
 * deliveries already under way on other threads. It waits for every
 * delivery under way when it was called (of any listener of this hedge).
 * Returns RESIL_OK, RESIL_EINVAL (not registered) or RESIL_EMISUSE.
 * Since 0.2. */
RESIL_API resil_status resil_hedge_listener_remove(resil_hedge *h,
                                                   resil_hedge_event_fn fn,
                                                   void *user);

/* Begins one logical call; the caller starts the primary attempt whatever
 * the answer. Counts the call. ctx may be NULL (flags 0: not hedged).
 * Returns RESIL_DECISION_WAIT when the call may be hedged: arm a timer for
 * *delay_ns (>= 0) and call resil_hedge_on_timer when it fires.
 * RESIL_DECISION_DENY when it will not be: the ctx flags carry neither
 * RESIL_CALL_IDEMPOTENT nor RESIL_CALL_STABLE_KEY (counted in
 * passed_unsafe), or misuse (NULL handle or call, a ctx never passed
 * through resil_ctx_init(): nothing counted). *call is filled in every
 * case but misuse with a NULL call; delay_ns may be NULL. A macro passing
 * sizeof(resil_hedge_call). Since 0.2. */
RESIL_API resil_decision resil_hedge_begin_sized(resil_hedge *h,
                                                 const resil_ctx *ctx,
                                                 resil_hedge_call *call,
                                                 size_t call_size,
                                                 int64_t *delay_ns);
#define resil_hedge_begin(h, ctx, call, delay_ns)                              \
  resil_hedge_begin_sized((h), (ctx), (call), sizeof(resil_hedge_call),       \
                          (delay_ns))

/* The hedge timer fired. Returns RESIL_DECISION_GO: send one hedge now (it
 * is attempt call->attempts; counted in hedges_sent, one budget
 * withdrawal made); *next_delay_ns (when not NULL) is the delay before the
 * next timer, or -1 when no further hedge may follow.
 * RESIL_DECISION_DENY: send nothing, and no further hedge for this call:
 * the call is over or not hedged, nothing is in flight, max_hedges were
 * sent, or the budget refused (counted once in refused_by_budget); also
 * for misuse (NULL argument). Since 0.2. */
RESIL_API resil_decision resil_hedge_on_timer(resil_hedge *h,
                                              resil_hedge_call *call,
                                              int64_t *next_delay_ns);
/* resil_hedge_on_timer watching `br` (the breaker this call's hedged
 * attempts go through) instead of the config's recovery_breaker, for hedges
 * last (DESIGN §2.9); NULL watches nothing; ignored with
 * hedge_during_recovery. The async engine gives its per-attempt breaker.
 * Since 0.2. */
RESIL_API resil_decision resil_hedge_on_timer_watch(resil_hedge *h,
                                                   resil_hedge_call *call,
                                                   int64_t *next_delay_ns,
                                                   struct resil_breaker *br);

/* Attempt `attempt` (1 = the primary) of the call ended with *o after
 * duration_ns. Returns the verdict (above), updating *call and the
 * counters. Whether *o wins is resil_hedge_acceptable(h, call, o): the one
 * acceptance rule, for the split form (the async engine) and
 * resil_hedge_run_on alike.
 *
 * The outcome a call without a winner ends with (call->result on LAST):
 * when no attempt was acceptable and some attempt ended maybe executed
 * without an answer (resil_outcome_maybe_executed and not ANSWERED: an
 * UNKNOWN such as a timeout after the request was sent), the call ends with
 * the first such outcome, whatever the others answered; the answers (a 4xx
 * such as 409 "key still PENDING", a 5xx) are losers then, their responses
 * not delivered. Only when none did does it end with the last attempt's
 * outcome. Why: a late 409 from a hedge says the key is in use, not that
 * the write failed; delivering it would hide that the primary's write may
 * have committed. The engine and resil_hedge_run_on deliver call->result.
 * Since 0.2. */
RESIL_API resil_hedge_verdict resil_hedge_record(resil_hedge *h,
                                                 resil_hedge_call *call,
                                                 uint32_t attempt,
                                                 int64_t duration_ns,
                                                 const resil_outcome *o);

/* The acceptance rule: 1 when an attempt of call ending with *o wins it,
 * 0 when the call keeps waiting for the others (or, nothing else in
 * flight, ends with it: RESIL_HEDGE_LAST). *o's class
 * (resil_outcome_classify) must not be in keyed_unacceptable_classes when
 * call->state has RESIL_HEDGE_CALL_KEYED (resil_hedge_begin set it: the
 * ctx flags carried RESIL_CALL_STABLE_KEY), in unacceptable_classes
 * otherwise. So with the defaults a keyed call is won only by a 2xx or a
 * 3xx, never by a 4xx (409 PENDING, 425, 429 included), and an unkeyed one
 * also by a 4xx other than 408/425/429. Reads nothing but h's config and
 * call->state; 0 for a NULL argument. Since 0.2. */
RESIL_API int resil_hedge_acceptable(const resil_hedge *h, const resil_hedge_call *call,
                                     const resil_outcome *o);

/* The run form a blocking chain uses. With an executor in the config:
 * resil_hedge_run_on(h, ctx, executor, fn, arg). Without one: counts the
 * call (calls, passed_blocking) and makes ONE attempt, fn(arg, ctx),
 * unhedged, returning its outcome. NULL handle, NULL fn or an
 * uninitialised ctx give NOT_SENT(LOCAL_ERROR) without calling fn.
 * Since 0.2. */
RESIL_API resil_outcome resil_hedge_run(resil_hedge *h, const resil_ctx *ctx,
                                        resil_call_fn fn, void *arg);

/* The blocking form that hedges: runs the split form on the calling
 * thread, every attempt as fn(arg, ctx') on a worker of tp, where ctx' is
 * a copy of *ctx (a default ctx when NULL) whose cancel is the attempt's
 * own token (the caller's ctx->cancel, polled every millisecond, is passed
 * on to every attempt). Hedge k is started k delays after the primary while
 * an attempt is in flight (delays measured in real time, CLOCK_MONOTONIC);
 * the first acceptable outcome is returned (none acceptable: the call's
 * result, resil_hedge_record's rule). The other attempts are
 * cancelled through their tokens at once, and the run returns after every
 * attempt it started has returned (so arg may live on the caller's stack):
 * fn should honour ctx->cancel promptly, or the losers hold the caller
 * (the HTTP layer aborts its transfer on it). Not safe to repeat (no
 * IDEMPOTENT or STABLE_KEY flag): fn runs once, on the calling thread,
 * counted in passed_unsafe. When an attempt cannot be queued on tp (its
 * queue is full) it ends at once as REJECTED(QUEUE_FULL) without running;
 * NOT_SENT(LOCAL_ERROR) for a NULL handle, tp or fn, an uninitialised ctx,
 * or out of resources. The calling thread must not be a worker of tp (it
 * waits for attempts queued on tp: with every worker waiting so, none would
 * run). Since 0.2. */
RESIL_API resil_outcome resil_hedge_run_on(resil_hedge *h, const resil_ctx *ctx,
                                           resil_threadpool *tp, resil_call_fn fn,
                                           void *arg);

/* The delay a call beginning now would get (fixed, or the clamped
 * percentile once min_samples are known); 0 for a NULL handle. Since 0.2. */
RESIL_API int64_t resil_hedge_delay_ns(const resil_hedge *h);
/* The longest delay any hedge of this policy can get: delay_ns in fixed
 * mode, max(delay_ns, max_delay_ns) in percentile mode; 0 for a NULL
 * handle. Since 0.2. */
RESIL_API int64_t resil_hedge_worst_delay_ns(const resil_hedge *h);
/* max_hedges; 0 for a NULL handle. Since 0.2. */
RESIL_API uint32_t resil_hedge_max_hedges(const resil_hedge *h);
/* delay_percentile_permille (0 = fixed); 0 for a NULL handle. Since 0.2. */
RESIL_API uint32_t resil_hedge_percentile_permille(const resil_hedge *h);
/* 1 when an executor is configured (resil_hedge_run hedges); 0 otherwise
 * or for a NULL handle. Since 0.2. */
RESIL_API int resil_hedge_has_executor(const resil_hedge *h);
/* 1 when a budget is configured; 0 otherwise or for a NULL handle.
 * Since 0.2. */
RESIL_API int resil_hedge_has_budget(const resil_hedge *h);
/* The instance name, owned by the hedge; NULL for a NULL handle. Since 0.2. */
RESIL_API const char *resil_hedge_name(const resil_hedge *h);

/* Fills *out up to the caller's struct size (a macro passing
 * sizeof(resil_hedge_metrics)). RESIL_OK, RESIL_EMISUSE (NULL handle),
 * RESIL_EINVAL (out NULL). Since 0.2. */
RESIL_API resil_status resil_hedge_get_metrics_sized(const resil_hedge *h,
                                                     resil_hedge_metrics *out,
                                                     size_t struct_size);
#define resil_hedge_get_metrics(h, out)                                        \
  resil_hedge_get_metrics_sized((h), (out), sizeof(resil_hedge_metrics))

#ifdef __cplusplus
}
#endif
#endif
