/* resil_retry: make a logical call again when it failed in a way that may be
 * retried safely (DESIGN §2.3), within the logical call's deadline (§2.7) and
 * a shared retry budget.
 *
 * What is retried is decided on the attempt's outcome (outcome.h) and on the
 * operation's safety (call.h), never on an error type alone:
 *
 *   SUCCESS        stop.
 *   NOT_SENT       retried (nothing reached the server).
 *   UNKNOWN,       retried only when ctx->flags has RESIL_CALL_IDEMPOTENT or
 *   SERVER_ERROR,  RESIL_CALL_STABLE_KEY (or the loudly named opt-in
 *   HTTP_408/425/429 unsafe_retry_non_idempotent is set); otherwise the retry
 *                  stops with RESIL_STOP_UNSAFE. 408, 425 and 429 follow the
 *                  same rule as 5xx.
 *   CLIENT_ERROR   never retried: fix the request.
 *   REJECTED       not retried unless retry_on_rejected is set: retrying an
 *                  open breaker only burns CPU and logs.
 *
 * `max_attempts` counts the first attempt: 3 means at most 3 calls.
 *
 * Two forms, as every policy has:
 *   - resil_retry_run() runs a call with retries, sleeping between attempts
 *     on the clock (a manual clock makes the sleeps take no real time).
 *   - resil_retry_begin() / resil_retry_next() / resil_retry_result() is the
 *     split form for event loops, on a resil_retry_state: it never blocks
 *     and does no I/O; next() says whether to make another attempt and
 *     after how long (resil_decision, call.h).
 *
 * An optional attempt listener (config `on_attempt`, call.h) sees every
 * physical attempt of both forms, the last one included.
 *
 * The final outcome of a logical call is the last attempt's outcome, with
 * `stop` saying why no further attempt was made and `attempts` counting the
 * physical attempts made, with two foldings so that the result never hides
 * what may have happened:
 *   - "Nothing was sent this time" must never hide "it may have run before".
 *     When the final outcome would be NOT_SENT or REJECTED but an earlier
 *     attempt may have executed (resil_outcome_maybe_executed(): UNKNOWN, or
 *     ANSWERED 5xx/408/425/429/FAILURE), its kind becomes RESIL_UNKNOWN and
 *     its flags gain RESIL_OF_PRIOR_MAYBE_EXECUTED; reason and http_status
 *     stay those of the last attempt (or the refusal, below).
 *   - When the deadline or the retry budget refuses the next attempt and the
 *     last attempt was NOT_SENT or REJECTED, the final outcome is
 *     REJECTED(RESIL_REASON_DEADLINE) or REJECTED(RESIL_REASON_RETRY_BUDGET)
 *     (then folded as above). When the last attempt was UNKNOWN or an
 *     answer, that outcome is kept, with stop DEADLINE or BUDGET.
 *
 * Create/free pairs: resil_retry_new / resil_retry_free,
 * resil_retry_state_new / resil_retry_state_free,
 * resil_retry_budget_new / resil_retry_budget_free.
 *
 * Example (exponential backoff 20 ms x 2, at most 3 attempts):
 *
 *   resil_retry_config cfg;
 *   resil_retry_config_init(&cfg);
 *   cfg.name = "items";
 *   cfg.backoff = RESIL_RETRY_EXPONENTIAL;
 *   cfg.initial_wait_ns = RESIL_MS(20);
 *   cfg.multiplier = 2.0;
 *   resil_retry *r = NULL;
 *   resil_error err;
 *   if (resil_retry_new(&cfg, &r, &err) != RESIL_OK) {
 *     fprintf(stderr, "%s\n", err.msg);
 *     return 1;
 *   }
 *   resil_ctx ctx;
 *   resil_ctx_init(&ctx);
 *   ctx.flags = RESIL_CALL_IDEMPOTENT;
 *   resil_ctx_set_timeout_ns(&ctx, RESIL_S(2));
 *   resil_outcome o = resil_retry_run(r, &ctx, get_item, &req);
 *   resil_retry_free(r);
 *
 * Thread-safety: a resil_retry and a resil_retry_budget may be used from any
 * number of threads at once, except their _free functions, which need
 * exclusive access. Counters are per-thread parts and atomics; the only
 * lock is the budget's, taken when a retry withdraws a token (never on a
 * call that succeeds at once). A run whose first attempt succeeds, with no
 * budget, deadline, cancellation token or attempt listener, reads no clock
 * and makes no atomic read-modify-write (it bumps its thread's part).
 * A resil_retry_state serves one logical call at a time and must not be
 * used by two threads at once. Callbacks (random source, predicate, listener) run on
 * the thread driving the logical call, with no library lock held; when the
 * retry is shared across threads they must be thread-safe. */
#ifndef RESIL_RETRY_H
#define RESIL_RETRY_H

#include <stddef.h>
#include <stdint.h>

#include "alloc.h"
#include "call.h"
#include "clock.h"
#include "outcome.h"
#include "shared.h"
#include "status.h"
#include "version.h"

#ifdef __cplusplus
extern "C" {
#endif

/* breaker.h (retries and hedges last, Since 0.2). */
struct resil_breaker;

typedef struct resil_retry resil_retry;
typedef struct resil_retry_budget resil_retry_budget;

/* Longest duration any wait field accepts: one day. */
#define RESIL_RETRY_MAX_DURATION_NS (INT64_C(86400) * INT64_C(1000000000))
/* Largest max_attempts accepted. */
#define RESIL_RETRY_MAX_ATTEMPTS 1000u

/* How the wait between two attempts is computed. "The n-th wait" is the wait
 * after attempt n, before attempt n + 1. */
typedef enum resil_retry_backoff {
  /* Every wait is wait_ns. */
  RESIL_RETRY_FIXED = 0,
  /* b(1) = initial_wait_ns; b(n + 1) = b(n) * multiplier truncated to whole
   * milliseconds (as Resilience4j does); every b(n) is capped at
   * max_wait_ns. The n-th wait is b(n). */
  RESIL_RETRY_EXPONENTIAL = 1,
  /* Full jitter: the n-th wait is uniform in [0, b(n)]. */
  RESIL_RETRY_EXPONENTIAL_FULL_JITTER = 2,
  /* Equal jitter: the n-th wait is b(n)/2 + uniform in [0, b(n)/2], that is
   * uniform in [floor(b(n)/2), b(n)]. */
  RESIL_RETRY_EXPONENTIAL_EQUAL_JITTER = 3,
  /* Decorrelated jitter: w(0) = initial_wait_ns; the n-th wait is
   * w(n) = min(max_wait_ns, uniform in [initial_wait_ns, 3 * w(n - 1)]).
   * The multiplier is not used. */
  RESIL_RETRY_DECORRELATED_JITTER = 4
} resil_retry_backoff;

/* What a retry predicate (resil_retry_config.predicate) returns. */
typedef enum resil_retry_verdict {
  RESIL_RETRY_VERDICT_DEFAULT = 0, /* decide by retry_classes as usual */
  RESIL_RETRY_VERDICT_RETRY = 1,   /* treat the outcome as retryable   */
  RESIL_RETRY_VERDICT_STOP = 2     /* stop with RESIL_STOP_NOT_RETRYABLE */
} resil_retry_verdict;

/* 64 uniformly random bits. Called only for the jittered backoffs. */
typedef uint64_t (*resil_retry_random_fn)(void *random_self);
/* Overrides the class decision for one outcome; called for every attempt's
 * outcome when set. RETRY may also retry a success (Resilience4j's
 * retryOnResult), a 4xx or a REJECTED outcome: the caller asked for it. It
 * cannot override the safety rule: an outcome that may have executed (a
 * success included) is retried only for an idempotent or keyed operation,
 * or with unsafe_retry_non_idempotent. */
typedef resil_retry_verdict (*resil_retry_predicate_fn)(void *user,
                                                       const resil_outcome *o);
/* The classes retried by default: NOT_SENT, UNKNOWN, SERVER_ERROR and
 * RESIL_CLASSES_THROTTLED (all but NOT_SENT subject to the safety rule). */
#define RESIL_RETRY_DEFAULT_CLASSES                                            \
  (RESIL_CLASS_BIT(RESIL_CLASS_NOT_SENT) | RESIL_CLASS_BIT(RESIL_CLASS_UNKNOWN) | \
   RESIL_CLASS_BIT(RESIL_CLASS_SERVER_ERROR) |                                \
   RESIL_CLASSES_THROTTLED)

typedef struct resil_retry_config {
  /* Size of the struct the caller was compiled with; set by
   * resil_retry_config_init() (version.h, "Sized structs"). */
  size_t struct_size;
  /* Instance name for logs and metrics; copied. NULL gives "retry". */
  const char *name;
  /* Attempts per logical call, the first included. 1..1000. Default 3.
   * 1 means "never retry". */
  uint32_t max_attempts;
  /* Default RESIL_RETRY_FIXED. */
  resil_retry_backoff backoff;
  /* RESIL_RETRY_FIXED wait. 0..1 day. Default 500 ms (Resilience4j). */
  int64_t wait_ns;
  /* First wait of the exponential and jittered backoffs. 1 ms..1 day.
   * Default 500 ms. */
  int64_t initial_wait_ns;
  /* Growth per step of the exponential backoffs. 1.0..100.0. Default 1.5
   * (Resilience4j's default multiplier). */
  double multiplier;
  /* Cap of every exponential or jittered wait, and the cap of a Retry-After
   * wait when max_retry_after_ns is 0. initial_wait_ns..1 day. Default 30 s. */
  int64_t max_wait_ns;
  /* 1: a positive Retry-After on the outcome (retry_after_ms > 0) replaces
   * the computed wait, even when shorter (DESIGN §2.3). Retry-After 0, an
   * HTTP-date in the past (both parse to 0) and an unusable value (-1) give
   * no reason to retry sooner than planned: the computed wait applies.
   * 0 or 1. Default 1. */
  int respect_retry_after;
  /* Cap of a Retry-After wait. 0..1 day; 0 means max_wait_ns. Default 0.
   * A Retry-After wait is always also capped by the remaining deadline. */
  int64_t max_retry_after_ns;
  /* Outcome classes that may be retried: RESIL_CLASS_BIT() of NOT_SENT,
   * UNKNOWN, SERVER_ERROR, HTTP_408, HTTP_425, HTTP_429 only (SUCCESS,
   * REDIRECT and CLIENT_ERROR are never retried by class; REJECTED is governed by retry_on_rejected).
   * Default RESIL_RETRY_DEFAULT_CLASSES. */
  uint32_t retry_classes;
  /* 1: retry REJECTED outcomes of inner layers (breaker open, bulkhead full,
   * ...). 0 or 1. Default 0. */
  int retry_on_rejected;
  /* DANGER. 1: retry outcomes that may have executed (UNKNOWN, 5xx, 408,
   * 425, 429) even when the operation is neither idempotent nor keyed. Each
   * retry may then repeat the side effect; the lab sets it to show exactly
   * that. 0 or 1. Default 0. */
  int unsafe_retry_non_idempotent;
  /* A new attempt (the first included) is made only when, after its wait,
   * at least max(this, 1 ms) of the logical call's deadline remains;
   * otherwise the retry stops at once (RESIL_STOP_DEADLINE) without
   * sleeping: a wait that uses up the whole deadline leaves nothing for the
   * attempt. 0..1 day. Default 0 (the 1 ms floor only). Ignored when the
   * context has no deadline. */
  int64_t min_attempt_budget_ns;
  /* Shared retry budget, or NULL for none. Not owned: it must outlive the
   * retry. Default NULL. */
  resil_retry_budget *budget;
  /* Random source of the jittered backoffs, or NULL for a splitmix64
   * generator kept in each resil_retry_state and seeded per logical call
   * (no global state). Default NULL. */
  resil_retry_random_fn random;
  void *random_self;
  /* Optional decision hook; receives `user`. */
  resil_retry_predicate_fn predicate;
  void *user;
  /* Called with `user` by resil_retry_free(); NULL for none. */
  void (*user_free)(void *user);
  /* Clock of the default context (ctx NULL), and the clock the run form
   * sleeps on when the context has none; NULL = system. The deadline is
   * always read on the context's clock (call.h). */
  const resil_clock *clock;
  /* NULL = malloc/free. */
  const resil_allocator *alloc;
  /* Since 0.2: the attempt listener (call.h), called with on_attempt_user
   * once per physical attempt, the last one included, by resil_retry_run
   * and by the split form (see resil_retry_next_timed for the duration).
   * `source` is the retry's name, `idempotency_key` the context's. Used by
   * `resil call -v`. NULL (default) for none; with none, no clock is read
   * to measure attempts. */
  resil_attempt_listener_fn on_attempt;
  void *on_attempt_user;
  /* ---- Since 0.2: retries last (DESIGN §2.9). */
  /* The breaker this retry watches (breaker.h; not owned, it must outlive
   * the retry): while it is HALF_OPEN or ramping (resil_breaker_recovering),
   * a retry that was due is not made: the call stops with
   * RESIL_STOP_RECOVERING and the last attempt's outcome, counted in
   * stats.suppressed_recovering (and in failed_*; the stops[] slots end at
   * CANCELLED). The check is one atomic load of the breaker's state (and a
   * clock read while it ramps), made only when a retry is due, after the
   * class, safety, max_attempts and cancellation rules and before the
   * deadline and the budget (no budget token is taken). For the run and
   * split forms used alone; in a chain (chain.h) the retry layer watches
   * the library breaker layer inside it, when there is one, instead. NULL
   * (default): none, unless a chain gives one. */
  struct resil_breaker *recovery_breaker;
  /* 1 = retry during recovery as before (no breaker is watched, not even a
   * chain's); 0 = retries last. 0..1. Default 0. */
  int retry_during_recovery;
} resil_retry_config;

/* Writes the documented defaults and struct_size. NULL is a no-op. A macro
 * passing sizeof(resil_retry_config) (version.h). Since 0.1. */
RESIL_API void resil_retry_config_init_sized(resil_retry_config *cfg,
                                             size_t struct_size);
#define resil_retry_config_init(cfg)                                           \
  resil_retry_config_init_sized((cfg), sizeof(resil_retry_config))

/* Validates cfg and creates a retry. The config is copied (name included);
 * cfg may be discarded afterwards. Returns RESIL_OK, RESIL_EINVAL (cfg or out
 * NULL, a config never passed through resil_retry_config_init() -- the
 * message then says "call resil_retry_config_init()" -- or a field out of
 * range: err names the field, the range and the value, durations in human
 * units), RESIL_ENOMEM. *out is untouched on failure. Since 0.1. */
RESIL_API resil_status resil_retry_new(const resil_retry_config *cfg,
                                       resil_retry **out, resil_error *err);
/* Frees r and calls user_free(user) when set. NULL is a no-op. Needs
 * exclusive access. Since 0.1. */
RESIL_API void resil_retry_free(resil_retry *r);
/* The instance name; valid until resil_retry_free(). NULL for a NULL
 * handle. Since 0.1. */
RESIL_API const char *resil_retry_name(const resil_retry *r);

/* Runs fn with retries. Each attempt gets a copy of *ctx (ctx NULL: no
 * deadline, no token, flags 0, the retry's clock) with `attempt` set to its
 * 1-based number. Before each attempt, the first included, the deadline and
 * the cancellation token are checked; between attempts the retry sleeps on
 * ctx->clock (else the retry's clock), woken early by ctx->cancel. Returns
 * the final outcome (see the top of this file): `stop` says why it stopped,
 * `attempts` how many physical attempts were made. A refused first attempt
 * returns REJECTED(DEADLINE) (stop DEADLINE) or NOT_SENT(CANCELLED) (stop
 * CANCELLED) with attempts 0 and fn not called. A NULL handle, a NULL fn or
 * a ctx never passed through resil_ctx_init() returns NOT_SENT(LOCAL_ERROR)
 * without calling fn. With on_attempt set, every attempt is reported once,
 * its duration measured on the same clock; when cancellation ends a wait,
 * the attempt before it was already reported (with the wait that was
 * planned) and nothing more is reported. Since 0.1. */
RESIL_API resil_outcome resil_retry_run(resil_retry *r, const resil_ctx *ctx,
                                        resil_call_fn fn, void *arg);

/* ---- split form ------------------------------------------------------- */

/* One logical call's progress. Opaque (nothing private is compiled into
 * callers): create one with resil_retry_state_new() and reuse it for any
 * number of logical calls, one at a time (resil_retry_begin() starts
 * over). Create/free pair: resil_retry_state_new / resil_retry_state_free.
 * Since 0.2. */
typedef struct resil_retry_state resil_retry_state;

/* Allocates a state with alloc (NULL = malloc). RESIL_OK, RESIL_EINVAL (out
 * NULL, or an allocator without both functions), RESIL_ENOMEM. The state is not tied to a retry until
 * resil_retry_begin(). Since 0.2. */
RESIL_API resil_status resil_retry_state_new(const resil_allocator *alloc,
                                             resil_retry_state **out);
/* NULL is a no-op. Since 0.2. */
RESIL_API void resil_retry_state_free(resil_retry_state *st);
/* The context for the next attempt (the caller's copy, with `attempt` set
 * to its number); valid until st is freed. The caller may lower its
 * deadline_ns (to end the logical call as out of time: the next decision
 * then refuses with RESIL_STOP_DEADLINE); every other field belongs to the
 * retry. NULL for a NULL state. Since 0.2. */
RESIL_API resil_ctx *resil_retry_state_ctx(resil_retry_state *st);

/* Starts a logical call: initialises *st from ctx (NULL as for run), credits
 * the budget (one deposit), and checks the deadline and the cancellation
 * token for the first attempt. Returns RESIL_DECISION_GO (make attempt 1
 * now, with resil_retry_state_ctx(st)), or RESIL_DECISION_DENY: refused
 * (resil_retry_result() says why, as for resil_retry_run) or a misuse (r or
 * st NULL, ctx not initialised: the result is then NOT_SENT(LOCAL_ERROR)
 * when st is not NULL, and nothing is counted). Never blocks. Since 0.1. */
RESIL_API resil_decision resil_retry_begin(resil_retry *r, const resil_ctx *ctx,
                                           resil_retry_state *st);
/* Records the outcome of the attempt just made, which took duration_ns, and
 * decides. Returns RESIL_DECISION_GO (make the next attempt now),
 * RESIL_DECISION_WAIT (make it after *wait_ns > 0) or RESIL_DECISION_DENY
 * (no further attempt: resil_retry_result() has the final outcome and its
 * stop says why); *wait_ns is 0 except for WAIT. After DENY, further calls
 * return DENY and change nothing. DENY with nothing recorded for a NULL
 * handle, a NULL st or o, or a state begun on another retry. wait_ns may be
 * NULL. The caller should not start the next attempt if its own
 * cancellation token fires during the wait. Never blocks.
 *
 * duration_ns is what the attempt listener reports; pass the time the
 * caller measured, or -1 to let the retry measure it on the context's
 * clock: the time from the decision that allowed this attempt (begin, or
 * the previous next), plus the wait it asked for, to this call. The retry
 * reads the clock for that only when on_attempt is set. Since 0.2. */
RESIL_API resil_decision resil_retry_next_timed(resil_retry *r,
                                                resil_retry_state *st,
                                                const resil_outcome *o,
                                                int64_t duration_ns,
                                                int64_t *wait_ns);
/* resil_retry_next_timed() with duration_ns -1 (measured by the retry).
 * Since 0.1. */
RESIL_API resil_decision resil_retry_next(resil_retry *r, resil_retry_state *st,
                                          const resil_outcome *o,
                                          int64_t *wait_ns);
/* Retries last (DESIGN §2.9): after resil_retry_begin, the breaker this
 * logical call watches instead of the config's recovery_breaker (NULL:
 * none), for a caller whose attempts go through a breaker of their own
 * (the async engine gives its per-attempt breaker). Ignored with
 * retry_during_recovery. RESIL_OK, or RESIL_EINVAL (st not begun, or br
 * not a live breaker). Since 0.2. */
RESIL_API resil_status resil_retry_state_watch(resil_retry_state *st,
                                               struct resil_breaker *br);
/* Retries last (DESIGN §2.9), after the wait: call it when a WAIT decision's
 * wait is over, before the next attempt. DENY when the call stops now (the
 * breaker it watches began recovering during the wait, HALF_OPEN or ramping,
 * or is OPEN past its wait so that the next call would be its probe: stop
 * RESIL_STOP_RECOVERING, counted in suppressed_recovering; the listener has
 * already seen the last attempt, with the wait that was planned), or after
 * the call stopped; GO otherwise. resil_retry_run does it itself. NULL or a
 * state of another retry: DENY. Since 0.2. */
RESIL_API resil_decision resil_retry_proceed(resil_retry *r, resil_retry_state *st);
/* The final outcome after DENY (see the top of this file); before it, the
 * last recorded outcome with stop NONE. NOT_SENT(LOCAL_ERROR) for NULL.
 * Since 0.1. */
RESIL_API resil_outcome resil_retry_result(const resil_retry_state *st);

/* ---- metrics and static analysis -------------------------------------- */

/* Slots of resil_retry_stats.stops: one per resil_stop value up to
 * RESIL_STOP_CANCELLED (RESIL_STOP_RECOVERING, Since 0.2, is counted in
 * suppressed_recovering: the 0.1 struct keeps its layout). */
#define RESIL_RETRY_STOP_SLOTS 8

typedef struct resil_retry_stats {
  /* Sized struct (version.h): the bytes the library wrote. */
  size_t struct_size;
  /* Logical calls finished (the sum of the four below). */
  uint64_t calls;
  /* Physical attempts made by those calls. */
  uint64_t attempts;
  /* Resilience4j's four: by final success and by whether any retry ran.
   * A call refused before its first attempt counts as failed without
   * retry. */
  uint64_t successful_without_retry;
  uint64_t successful_with_retry;
  uint64_t failed_without_retry;
  uint64_t failed_with_retry;
  /* Finished calls per stop reason, indexed by resil_stop. */
  uint64_t stops[RESIL_RETRY_STOP_SLOTS];
  /* Attempts (first or later) not made because the deadline was too short,
   * or because the retry budget refused. */
  uint64_t refused_by_deadline;
  uint64_t refused_by_budget;
  /* Since 0.2: calls that stopped with RESIL_STOP_RECOVERING: a retry was
   * due while the watched breaker was HALF_OPEN or ramping (one suppressed
   * retry each). */
  uint64_t suppressed_recovering;
} resil_retry_stats;

/* Fills *out, up to the caller's struct size, with monotonic counters (each
 * a value between its values at the start and the end of the call, never
 * below an earlier read's; the set is not one instant). A macro
 * passing sizeof(resil_retry_stats). Returns RESIL_OK, RESIL_EMISUSE (NULL
 * handle), RESIL_EINVAL (out NULL). Since 0.1. */
RESIL_API resil_status resil_retry_get_stats_sized(const resil_retry *r,
                                                   resil_retry_stats *out,
                                                   size_t struct_size);
#define resil_retry_get_stats(r, out)                                          \
  resil_retry_get_stats_sized((r), (out), sizeof(resil_retry_stats))

/* max_attempts of r (0 for a NULL handle): the factor this layer
 * contributes to the worst-case physical attempts of nested retries, which
 * multiply (2 x 3 x 2 = 12, DESIGN §2.8). Since 0.1. */
RESIL_API uint32_t resil_retry_max_attempts(const resil_retry *r);
/* The longest total time a logical call governed by cfg can spend waiting
 * between its attempts: the sum, over its max_attempts - 1 waits, of each
 * wait's upper bound (the exponential cap and, when respect_retry_after is
 * set, the Retry-After cap included). Attempt durations are not included:
 * worst time = attempts x attempt timeout + this. Returns -1 when cfg is
 * NULL or invalid; saturates at INT64_MAX. Since 0.1. */
RESIL_API int64_t resil_retry_worst_wait_ns(const resil_retry_config *cfg);

/* ---- Retry-After ------------------------------------------------------ */

/* Parses an HTTP Retry-After field value (RFC 9110 §10.2.3) of len bytes
 * (no NUL needed) into the delay it asks for, in milliseconds:
 *   - delay-seconds: one or more ASCII digits, nothing else. A value above
 *     2147483648 s is taken as 2147483648 s (RFC 9111 §1.2.2), so no input
 *     overflows.
 *   - HTTP-date: IMF-fixdate ("Sun, 06 Nov 1994 08:49:37 GMT"), or the
 *     obsolete RFC 850 ("Sunday, 06-Nov-94 08:49:37 GMT"; a two-digit year
 *     more than 50 years in the future is taken as the past century's) and
 *     asctime ("Sun Nov  6 08:49:37 1994") forms. Names are case-sensitive
 *     as the grammar says; the weekday is checked for spelling, not against
 *     the date. A date at or before now_wall_ms (milliseconds since the Unix
 *     epoch) gives 0, which a retry takes as no hint (respect_retry_after).
 * Leading and trailing spaces and tabs are ignored; anything else (signs,
 * inner or extra spaces, fractions, other characters, a day that does not
 * exist) is invalid. Returns RESIL_OK with *delay_ms >= 0, or RESIL_EINVAL
 * (invalid value, value or delay_ms NULL; *delay_ms is then untouched).
 * Thread-safe (pure). Since 0.1. */
RESIL_API resil_status resil_retry_after_parse(const char *value, size_t len,
                                               int64_t now_wall_ms,
                                               int64_t *delay_ms);

/* ---- retry budget ----------------------------------------------------- */

/* A retry budget bounds retries to a fraction of the traffic, so that during
 * an outage retries cannot multiply the load (DESIGN §2.3). One budget is
 * shared by many retries (config field `budget`).
 *
 * RESIL_BUDGET_FINAGLE (default; Finagle's RetryBudget): every logical call
 * deposits percent_can_retry_pct / 100 of a token; every retry withdraws one
 * token and is refused when less than one token is available. Deposits and
 * withdrawals expire after ttl_ns (a window of 10 slices), and a reserve of
 * min_retries_per_s * ttl seconds tokens is always added, so a few retries
 * per second are allowed even with little traffic. With 20 % and no
 * reserve, 100 calls allow at most 20 retries.
 *
 * RESIL_BUDGET_GRPC (gRPC retry throttling, gRFC A6): a token count starts
 * at max_tokens; every failed attempt (NOT_SENT, UNKNOWN, SERVER_ERROR,
 * THROTTLED) removes 1 token, every successful attempt adds
 * token_ratio_milli / 1000 of a token (the count stays within
 * 0..max_tokens), and a retry is allowed only while the count is above
 * max_tokens / 2. Nothing expires. */
typedef enum resil_retry_budget_mode {
  RESIL_BUDGET_FINAGLE = 0,
  RESIL_BUDGET_GRPC = 1
} resil_retry_budget_mode;

typedef struct resil_retry_budget_config {
  /* Sized struct (version.h); set by resil_retry_budget_config_init(). */
  size_t struct_size;
  /* Copied. NULL gives "retry-budget". */
  const char *name;
  /* Default RESIL_BUDGET_FINAGLE. */
  resil_retry_budget_mode mode;
  /* Finagle: how long deposits and withdrawals count. 1 s..1 h.
   * Default 10 s. */
  int64_t ttl_ns;
  /* Finagle: retries per second allowed regardless of traffic. 0..1000000.
   * Default 10. */
  uint32_t min_retries_per_s;
  /* Finagle: retries allowed per 100 logical calls. 0..1000. Default 20. */
  uint32_t percent_can_retry_pct;
  /* gRPC: token capacity, also the start value. 1..1000. Default 10. */
  uint32_t max_tokens;
  /* gRPC: tokens per success, in thousandths. 1..max_tokens * 1000.
   * Default 100 (0.1). */
  uint32_t token_ratio_milli;
  /* Clock the Finagle window reads (coarse time); NULL = system. */
  const resil_clock *clock;
  /* NULL = malloc/free. */
  const resil_allocator *alloc;
  /* Since 0.2: a segment (shared.h) to keep the budget in, shared with
   * every process that creates a budget of the same name in the same
   * segment: their calls deposit into, and their retries withdraw from,
   * one balance. NULL = per-process. Default NULL. The slot records mode,
   * ttl_ns, min_retries_per_s, percent_can_retry_pct, max_tokens and
   * token_ratio_milli (another value is RESIL_EINVAL naming the field).
   * The clock must be the system one (NULL): slices are counted on
   * CLOCK_MONOTONIC in every process. Withdrawals then serialise on a lock
   * word in the segment held for a few atomic operations, whose holder's
   * death (SIGKILL) leaves a valid state and the lock to the next caller.
   * A segment in fallback mode or full gives a per-process budget and a
   * counted fallback, unless the segment is required (then RESIL_ESTATE
   * with the reason). The segment handle must stay open until the budget
   * is freed. */
  resil_shared *shared;
} resil_retry_budget_config;

/* Writes the documented defaults and struct_size. NULL is a no-op. A macro
 * passing sizeof(resil_retry_budget_config). Since 0.1. */
RESIL_API void resil_retry_budget_config_init_sized(resil_retry_budget_config *cfg,
                                                    size_t struct_size);
#define resil_retry_budget_config_init(cfg)                                    \
  resil_retry_budget_config_init_sized((cfg), sizeof(resil_retry_budget_config))
/* Validates cfg and creates a budget. Returns RESIL_OK, RESIL_EINVAL (NULL
 * argument, a config never passed through resil_retry_budget_config_init(),
 * or a field out of range, detailed in err), RESIL_ENOMEM,
 * RESIL_ESYS (mutex creation failed). Since 0.1. */
RESIL_API resil_status resil_retry_budget_new(const resil_retry_budget_config *cfg,
                                              resil_retry_budget **out,
                                              resil_error *err);
/* NULL is a no-op. Every retry using b must be freed first. Since 0.1. */
RESIL_API void resil_retry_budget_free(resil_retry_budget *b);
/* The instance name; NULL for a NULL handle. Since 0.1. */
RESIL_API const char *resil_retry_budget_name(const resil_retry_budget *b);
/* Finagle: credits one logical call (resil_retry_begin does this). gRPC:
 * credits one successful attempt. Lock-free: one coarse clock read and one
 * atomic add in the common case. Returns RESIL_OK, or RESIL_EMISUSE for a
 * NULL handle. Since 0.1. */
RESIL_API resil_status resil_retry_budget_deposit(resil_retry_budget *b);
/* gRPC: debits one failed attempt (resil_retry_next does this). Finagle:
 * does nothing. Returns RESIL_OK, or RESIL_EMISUSE for a NULL handle. Since
 * 0.1. */
RESIL_API resil_status resil_retry_budget_record_failure(resil_retry_budget *b);
/* Asks for one retry. Finagle: withdraws one token; returns 1 when granted,
 * 0 when less than one token is available (nothing taken). Concurrent
 * withdrawals never take more than the balance (they serialise on a mutex
 * taken only here, on the retry path). gRPC: takes nothing; returns 1 while
 * the token count is above max_tokens / 2. 0 for a NULL handle. Since
 * 0.1. */
RESIL_API int resil_retry_budget_try_withdraw(resil_retry_budget *b);
/* Whole retries available now: Finagle, the tokens a withdrawal could take
 * (>= 0); gRPC, the token count rounded down. 0 for a NULL handle.
 * Since 0.1. */
RESIL_API int64_t resil_retry_budget_balance(const resil_retry_budget *b);

/* Reads the shared budget `name` of seg (shared.h) without creating it:
 * its balance (*tokens, as resil_retry_budget_balance; may be NULL).
 * Statuses as resil_ratelimiter_shared_peek. Since 0.2. */
RESIL_API resil_status resil_retry_budget_shared_peek(resil_shared *seg, const char *name,
                                                      int64_t *tokens, resil_error *err);

#ifdef __cplusplus
}
#endif
#endif
