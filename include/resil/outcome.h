/* resil_outcome: what happened to one remote call attempt (DESIGN §1).
 *
 * "The call failed" is several different facts. Every attempt ends in exactly
 * one outcome kind, and every policy decision (retry? count as a breaker
 * failure? fall back?) is taken on the outcome, never on an error type:
 *
 *   NOT_SENT  the request never reached the server (DNS, refused, connect
 *             timeout, pool lease timeout, a local error before sending).
 *   UNKNOWN   the request was sent, or may have been, and no complete answer
 *             came back (response timeout, reset, close). The server MAY
 *             have executed it. This is the caller's knowledge, not a fact
 *             about the server.
 *   ANSWERED  the server answered; `http_status` says how (0 for a call that
 *             is not HTTP; then `reason` is RESIL_REASON_OK or _FAILURE).
 *   REJECTED  local protection refused the call before it was sent (breaker
 *             open, bulkhead full, no rate permit, deadline, retry budget),
 *             or a local resource limit did (LOCAL_RESOURCES, since 0.2: no
 *             socket for EMFILE/ENFILE/ENOBUFS/ENOMEM, no local port for
 *             EADDRNOTAVAIL; the upstream was not contacted), or a rate
 *             limiter whose shared store cannot be reached refused it
 *             (RATE_LIMITER_UNAVAILABLE, since 0.2: failure policy
 *             `closed` of libresil-redis's limiter). Never a
 *             downstream failure: no breaker counts it, whatever its
 *             classes; like every REJECTED it is safe to repeat
 *             (resil_outcome_maybe_executed 0) but retried only with
 *             retry_on_rejected.
 *
 * Thread-safety: plain values and pure functions; all thread-safe. */
#ifndef RESIL_OUTCOME_H
#define RESIL_OUTCOME_H

#include <stdint.h>

#include "version.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum resil_outcome_kind {
  RESIL_NOT_SENT = 1,
  RESIL_UNKNOWN = 2,
  RESIL_ANSWERED = 3,
  RESIL_REJECTED = 4
} resil_outcome_kind;

/* X(name, kind-it-belongs-to, text). Append only. */
#define RESIL_REASON_MAP(X)                                                    \
  X(NONE, 0, "none")                                                           \
  X(OK, RESIL_ANSWERED, "ok")                                                  \
  X(FAILURE, RESIL_ANSWERED, "failure reported by the call")                  \
  X(HTTP, RESIL_ANSWERED, "http status")                                       \
  X(BUSINESS, RESIL_ANSWERED, "business rejection")                            \
  X(DNS, RESIL_NOT_SENT, "name resolution failed")                             \
  X(CONNECT_REFUSED, RESIL_NOT_SENT, "connection refused")                     \
  X(CONNECT_TIMEOUT, RESIL_NOT_SENT, "connect timeout")                        \
  X(POOL_TIMEOUT, RESIL_NOT_SENT, "connection pool lease timeout")             \
  X(LOCAL_ERROR, RESIL_NOT_SENT, "local error before sending")                 \
  X(TIMEOUT, RESIL_UNKNOWN, "timeout after sending")                           \
  X(CONNECTION_CLOSED, RESIL_UNKNOWN, "connection closed before a complete response") \
  X(CONNECTION_RESET, RESIL_UNKNOWN, "connection reset")                       \
  X(CANCELLED, RESIL_UNKNOWN, "cancelled")                                     \
  X(BREAKER_OPEN, RESIL_REJECTED, "circuit breaker open")                      \
  X(BULKHEAD_FULL, RESIL_REJECTED, "bulkhead full")                            \
  X(RATE_LIMITED, RESIL_REJECTED, "no rate limiter permit")                    \
  X(DEADLINE, RESIL_REJECTED, "deadline too short")                            \
  X(RETRY_BUDGET, RESIL_REJECTED, "retry budget spent")                        \
  X(QUEUE_FULL, RESIL_REJECTED, "thread pool queue full")                      \
  X(DECODE, RESIL_ANSWERED, "response could not be decoded")                  \
  X(RESPONSE_TOO_LARGE, RESIL_UNKNOWN, "response body over the size limit")   \
  X(LOCAL_RESOURCES, RESIL_REJECTED, "local resource limit (descriptors, ports)") \
  X(RATE_LIMITER_UNAVAILABLE, RESIL_REJECTED, "rate limiter unavailable") \
  /* Since 0.2: a breaker's ramp after recovery did not admit the call      \
   * (breaker.h, "Ramp"); counted nowhere as a failure. */                  \
  X(RECOVERING, RESIL_REJECTED, "recovering")

typedef enum resil_reason {
#define RESIL__REASON_ENUM(name, kind, text) RESIL_REASON_##name,
  RESIL_REASON_MAP(RESIL__REASON_ENUM)
#undef RESIL__REASON_ENUM
  RESIL_REASON_COUNT_
} resil_reason;

/* The class an outcome falls in, for classification bit masks
 * (RESIL_CLASS_BIT(c)): which classes a breaker counts as failures or
 * ignores, which a retry may retry. 408, 425 and 429 are classes of their
 * own so that each can be classified apart (RESIL_CLASSES_THROTTLED is the
 * three together). Append only. */
typedef enum resil_outcome_class {
  RESIL_CLASS_SUCCESS = 0,      /* ANSWERED 1xx, 2xx, or reason OK         */
  RESIL_CLASS_CLIENT_ERROR = 1, /* ANSWERED 4xx except 408/425/429; BUSINESS */
  RESIL_CLASS_SERVER_ERROR = 2, /* ANSWERED 5xx, or reason FAILURE, DECODE  */
  RESIL_CLASS_HTTP_429 = 3,     /* ANSWERED 429 Too Many Requests          */
  RESIL_CLASS_NOT_SENT = 4,
  RESIL_CLASS_UNKNOWN = 5,
  RESIL_CLASS_REJECTED = 6,
  RESIL_CLASS_HTTP_408 = 7,     /* ANSWERED 408 Request Timeout            */
  RESIL_CLASS_HTTP_425 = 8,     /* ANSWERED 425 Too Early                  */
  RESIL_CLASS_REDIRECT = 9,     /* ANSWERED 3xx                            */
  RESIL_CLASS_COUNT_            /* not a class                             */
} resil_outcome_class;

#define RESIL_CLASS_BIT(c) (1u << (unsigned)(c))
/* 408, 425 and 429: the server asks to come back later. */
#define RESIL_CLASSES_THROTTLED                                                \
  (RESIL_CLASS_BIT(RESIL_CLASS_HTTP_408) | RESIL_CLASS_BIT(RESIL_CLASS_HTTP_425) | \
   RESIL_CLASS_BIT(RESIL_CLASS_HTTP_429))
/* Every class bit. */
#define RESIL_CLASSES_ALL ((1u << (unsigned)RESIL_CLASS_COUNT_) - 1u)

/* Outcome flags. */
/* An earlier attempt of the same logical call may have executed (it ended
 * UNKNOWN, or ANSWERED 5xx/408/425/429). A retry that stops on a NOT_SENT or
 * REJECTED attempt after such an attempt reports kind UNKNOWN with this flag:
 * "nothing was sent this time" must never hide "it may have run before". */
#define RESIL_OF_PRIOR_MAYBE_EXECUTED 0x1u
/* The response timed out on a time limiter (not on the transport). */
#define RESIL_OF_TIME_LIMITER 0x2u

/* Why a logical call stopped making attempts (set by the retry layer). */
typedef enum resil_stop {
  RESIL_STOP_NONE = 0,        /* no retry layer decided                    */
  RESIL_STOP_SUCCESS,         /* the last attempt was not a failure        */
  RESIL_STOP_NOT_RETRYABLE,   /* outcome class not retryable               */
  RESIL_STOP_UNSAFE,          /* retryable class, but the operation is not
                                 idempotent and carries no stable key      */
  RESIL_STOP_MAX_ATTEMPTS,    /* max_attempts reached                      */
  RESIL_STOP_DEADLINE,        /* next attempt would not fit the deadline   */
  RESIL_STOP_BUDGET,          /* retry budget spent                        */
  RESIL_STOP_CANCELLED,       /* the call's cancellation token fired       */
  /* Since 0.2: a retry was due but the breaker inside the retry layer was
   * HALF_OPEN or ramping (DESIGN §2.9, "retries last"; retry.h,
   * retry_during_recovery): the last attempt's outcome is kept. */
  RESIL_STOP_RECOVERING
} resil_stop;

typedef struct resil_outcome {
  resil_outcome_kind kind;
  resil_reason reason;
  int http_status;        /* ANSWERED over HTTP: 100..599; otherwise 0     */
  int64_t retry_after_ms; /* server's Retry-After hint; -1 when none or
                             unusable; 0 for "0" or a past date, which a
                             retry takes as no hint (retry.h)          */
  uint32_t flags;         /* RESIL_OF_*                                    */
  resil_stop stop;        /* set by a retry layer; RESIL_STOP_NONE otherwise */
  uint32_t attempts;      /* physical attempts made for the logical call
                             (set by a retry layer; 0 when none ran)       */
} resil_outcome;

/* Constructors: plain values, retry_after_ms = -1, flags 0. */
RESIL_API resil_outcome resil_outcome_ok(void);
RESIL_API resil_outcome resil_outcome_failure(void);
RESIL_API resil_outcome resil_outcome_http(int http_status);
RESIL_API resil_outcome resil_outcome_make(resil_outcome_kind kind,
                                           resil_reason reason);

/* The class of an outcome (see resil_outcome_class). */
RESIL_API resil_outcome_class resil_outcome_classify(const resil_outcome *o);
/* 1 when the class is SUCCESS or REDIRECT (a 3xx is an answer, not a
 * failure). */
RESIL_API int resil_outcome_is_success(const resil_outcome *o);
/* 1 when the server may have executed the request: UNKNOWN, ANSWERED
 * 5xx/408/425/429/FAILURE, or the PRIOR_MAYBE_EXECUTED flag; 1 also for a
 * success (it did execute). 0 for NOT_SENT and REJECTED without the flag,
 * and for CLIENT_ERROR. */
RESIL_API int resil_outcome_maybe_executed(const resil_outcome *o);

/* Static names: "NOT_SENT", "connection refused", "SERVER_ERROR", ... Never
 * NULL; unknown values give "?". */
RESIL_API const char *resil_outcome_kind_name(resil_outcome_kind k);
RESIL_API const char *resil_reason_name(resil_reason r);  /* "CONNECT_REFUSED" */
RESIL_API const char *resil_reason_text(resil_reason r);  /* "connection refused" */
RESIL_API const char *resil_outcome_class_name(resil_outcome_class c);
RESIL_API const char *resil_stop_name(resil_stop s);       /* "DEADLINE" */

/* Writes "UNKNOWN(timeout after sending)" or "ANSWERED(503)" into buf
 * (always NUL-terminated when size > 0). Returns buf. */
RESIL_API char *resil_outcome_format(const resil_outcome *o, char *buf,
                                     unsigned long size);

#ifdef __cplusplus
}
#endif
#endif
