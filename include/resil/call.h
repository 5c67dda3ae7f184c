/* The logical-call context and the cooperative cancellation token.
 *
 * A resil_ctx travels down a chain of policies with each attempt: the one
 * absolute deadline of the logical call (DESIGN §2.7), the cancellation token
 * the innermost call should watch, and what the caller says about the
 * operation's safety (idempotent? stable idempotency key?), which decides
 * what may be retried (DESIGN §2.3).
 *
 * Thread-safety: a resil_ctx is a plain value owned by the caller. A
 * resil_cancel may be signalled, polled, waited on and subscribed to from
 * any thread at once; resil_cancel_free needs exclusive access. */
#ifndef RESIL_CALL_H
#define RESIL_CALL_H

#include <stddef.h>
#include <stdint.h>

#include "clock.h"
#include "outcome.h"
#include "status.h"
#include "version.h"

#ifdef __cplusplus
extern "C" {
#endif

#define RESIL_NO_DEADLINE INT64_MAX

/* The operation is safe to execute more than once (GET, PUT of a full
 * resource, a pure function). */
#define RESIL_CALL_IDEMPOTENT 0x1u
/* The operation carries an idempotency key that stays the same for every
 * attempt of this logical call, and the server deduplicates by it. */
#define RESIL_CALL_STABLE_KEY 0x2u

typedef struct resil_ctx {
  /* Size of the struct the caller was compiled with; set by
   * resil_ctx_init() (version.h, "Sized structs"). */
  size_t struct_size;
  /* Clock the deadline is measured on; NULL = system clock. It should be the
   * same clock the policies of the chain use. */
  const resil_clock *clock;
  /* Absolute deadline on clock->now_ns, or RESIL_NO_DEADLINE. */
  int64_t deadline_ns;
  /* Token the call should watch; NULL = none. Not owned. */
  resil_cancel *cancel;
  /* RESIL_CALL_* */
  uint32_t flags;
  /* 1-based number of this attempt within the logical call, set by the
   * innermost retry layer; 0 when no retry layer ran. */
  uint32_t attempt;
  /* Free for the caller; passed through unchanged. */
  void *user;
  /* The logical call's idempotency key when it carries one (NUL-terminated,
   * not owned; the HTTP layer sets it), NULL otherwise. Reported to attempt
   * listeners; policies never change it. */
  const char *idempotency_key;
} resil_ctx;

/* The answer of every split form's decision (DESIGN §2, §11): breaker,
 * rate-limiter and bulkhead acquires, retry begin/next. Non-zero means "go
 * ahead", so `if (resil_X_try_acquire(...))` reads right everywhere. */
typedef enum resil_decision {
  /* Do not make the call or attempt; nothing is held. Also the answer to a
   * NULL handle or a NULL required argument: fail closed, nothing counted
   * (where a result exists, it says NOT_SENT(LOCAL_ERROR)). */
  RESIL_DECISION_DENY = 0,
  /* Make it now; what was acquired is the caller's until it records or
   * releases it. */
  RESIL_DECISION_GO = 1,
  /* Make it after the wait the function returned (*wait_ns > 0); what was
   * acquired is already the caller's. Two answers of 0.2 use WAIT for a
   * wait whose end the library announces instead: resil_bulkhead_enqueue
   * (queued; the slot is not yet the caller's, see bulkhead.h) and
   * resil_hedge_begin (a hedge may follow after *delay_ns, see hedge.h). */
  RESIL_DECISION_WAIT = 2
} resil_decision;

/* The call protected by policies: one physical attempt. It returns what
 * happened; it must not block past ctx->deadline_ns more than it can help,
 * and should stop early when ctx->cancel is signalled. */
typedef resil_outcome (*resil_call_fn)(void *arg, const resil_ctx *ctx);

/* One physical attempt, as an attempt listener sees it (the retry's
 * config `on_attempt`, the HTTP client's `on_attempt`). Filled by the
 * library; struct_size is the size it filled (version.h). Every attempt is
 * reported once, after its outcome and the decision that followed are
 * known, the last one included (next_wait_ns -1). */
typedef struct resil_attempt_info {
  size_t struct_size;
  /* Name of the instance that made the attempt (the retry's, or the HTTP
   * client's when no retry drives it). */
  const char *source;
  /* 1-based number of the physical attempt within the logical call. */
  uint32_t attempt;
  /* What this attempt ended with (before any folding of the final
   * outcome). */
  resil_outcome outcome;
  /* How long the attempt took. */
  int64_t duration_ns;
  /* The wait slept before this attempt (backoff or Retry-After); 0 for the
   * first. */
  int64_t wait_before_ns;
  /* The wait before the next attempt, or -1 when this is the last one. */
  int64_t next_wait_ns;
  /* Why the logical call stops after this attempt (RESIL_STOP_NONE when
   * another attempt follows). */
  resil_stop stop;
  /* The logical call's idempotency key, or NULL when it carries none. */
  const char *idempotency_key;
} resil_attempt_info;

/* Called once per physical attempt, on the thread that made it, with no
 * library lock held. */
typedef void (*resil_attempt_listener_fn)(void *user,
                                          const resil_attempt_info *info);

/* No deadline, no token, flags 0, system clock, no key; struct_size set
 * (a macro passing sizeof(resil_ctx)). */
RESIL_API void resil_ctx_init_sized(resil_ctx *ctx, size_t struct_size);
#define resil_ctx_init(ctx) resil_ctx_init_sized((ctx), sizeof(resil_ctx))
/* Sets the deadline to now + timeout_ns on ctx->clock (a negative
 * timeout_ns counts as 0). NULL or an uninitialised ctx is left alone. */
RESIL_API void resil_ctx_set_timeout_ns(resil_ctx *ctx, int64_t timeout_ns);
/* Nanoseconds left before the deadline, never negative; INT64_MAX when the
 * context has no deadline (NULL: the defaults, so INT64_MAX); 0 for a ctx
 * never passed through resil_ctx_init() (fail closed: no time). */
RESIL_API int64_t resil_ctx_remaining_ns(const resil_ctx *ctx);
/* min(attempt_timeout_ns, remaining). attempt_timeout_ns <= 0 means "none".
 * Returns INT64_MAX when neither limits. */
RESIL_API int64_t resil_ctx_attempt_timeout_ns(const resil_ctx *ctx,
                                               int64_t attempt_timeout_ns);

/* Cooperative cancellation token. Create/free pair: resil_cancel_new /
 * resil_cancel_free. resil_cancel_free needs exclusive access (no signal,
 * wait or subscription call running), and freeing a token with a
 * subscription not yet given back by resil_cancel_unsubscribe() (even one
 * whose fn ran) is a misuse: undefined behaviour. */
RESIL_API resil_status resil_cancel_new(resil_cancel **out);
RESIL_API void resil_cancel_free(resil_cancel *c);
/* Idempotent; wakes every sleeper waiting on the token, then, the first
 * time only, calls the fn of every subscription on this thread, one after
 * the other, with no token lock held (each fn may call any token
 * function but resil_cancel_free, its own unsubscribe included). A later or concurrent signal
 * returns at once, possibly before the first one's fns ran. Never
 * allocates. */
RESIL_API void resil_cancel_signal(resil_cancel *c);
/* 1 once signalled. NULL gives 0. Cheap (one atomic load). */
RESIL_API int resil_cancel_is_set(const resil_cancel *c);
/* Blocks up to timeout_ns (real time). Returns 1 when signalled, 0 on
 * timeout. */
RESIL_API int resil_cancel_wait_ns(resil_cancel *c, int64_t timeout_ns);

/* ---- listeners (Since 0.2) -------------------------------------------------
 * A subscription asks the token to call fn(user) when it is signalled:
 * exactly once per subscription, on the thread that calls
 * resil_cancel_signal(), with no token lock held. So fn should be short and
 * must not block on whatever that thread may hold (typically: set a flag,
 * wake a loop). Subscribing and unsubscribing are thread-safe, from any
 * thread, concurrently with a signal. */
typedef struct resil_cancel_sub resil_cancel_sub;
typedef void (*resil_cancel_fn)(void *user);

/* Subscribes fn(user) to c. RESIL_OK: *out holds the subscription, which
 * the caller gives back with resil_cancel_unsubscribe() (also after fn
 * ran). RESIL_ESTATE: c is already signalled; fn is not called (now or
 * later) and *out is NULL (the caller acts on the signal itself).
 * RESIL_EINVAL (NULL c, fn or out), RESIL_ENOMEM: *out NULL. It allocates
 * the subscription (the signal does not). Since 0.2. */
RESIL_API resil_status resil_cancel_subscribe(resil_cancel *c, resil_cancel_fn fn, void *user,
                                              resil_cancel_sub **out);
/* Ends the subscription and frees it. Returns 1 when fn was not called and
 * now never will be, 0 when it was called (or, from inside fn, is being
 * called). From another
 * thread than the signalling one, it returns only after a running fn
 * returned, so the caller may then free what fn uses; so it must not be
 * called holding a lock fn takes. From inside fn (on the signalling
 * thread) it returns at once, without waiting for itself. NULL: 0.
 * Since 0.2. */
RESIL_API int resil_cancel_unsubscribe(resil_cancel_sub *sub);

#ifdef __cplusplus
}
#endif
#endif
