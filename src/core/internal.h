/* Internal helpers shared by the library's modules. Not installed; nothing
 * here is exported from the shared library (symbols are hidden by default
 * and only RESIL_API functions are visible). */
#ifndef RESIL_CORE_INTERNAL_H
#define RESIL_CORE_INTERNAL_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "resil/alloc.h"
#include "resil/call.h"
#include "resil/clock.h"
#include "resil/outcome.h"
#include "resil/status.h"

#if defined(__GNUC__)
#define RESIL_LIKELY(x) __builtin_expect(!!(x), 1)
#define RESIL_UNLIKELY(x) __builtin_expect(!!(x), 0)
#define RESIL_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define RESIL_LIKELY(x) (x)
#define RESIL_UNLIKELY(x) (x)
#define RESIL_PRINTF(a, b)
#endif

#define RESIL_NS_PER_MS INT64_C(1000000)
#define RESIL_NS_PER_S INT64_C(1000000000)

/* Allocation through an optional per-object allocator. */
void *resil__alloc(const resil_allocator *a, size_t n);
void *resil__calloc(const resil_allocator *a, size_t n);
void resil__free(const resil_allocator *a, void *p);
/* Copies a NUL-terminated string (NULL gives NULL with *ok = 1). */
char *resil__strdup(const resil_allocator *a, const char *s, int *ok);
/* An array indexed by a small number (an fd): p holds *n elements of elem
 * bytes (p NULL, *n 0: none yet). Returns p when index i fits; else a new
 * zero-filled array of 64, 128, ... elements (the first power-of-two multiple
 * of 64 above i) holding p's elements, frees p and sets *n. NULL when out of
 * memory (p and *n unchanged, p still the caller's). */
void *resil__grow_zeroed(const resil_allocator *a, void *p, size_t *n, size_t elem, size_t i);

/* Writes 2 * nbytes lowercase hex digits of kernel randomness and a NUL
 * into out (nbytes <= 64). Returns 0, or -1 when getrandom failed. */
int resil__random_hex(char *out, size_t nbytes);

/* The clock to use: c, or the system clock when c is NULL. */
static inline const resil_clock *resil__clock(const resil_clock *c) {
  return c ? c : resil_clock_system();
}
static inline int64_t resil__now(const resil_clock *c) {
  return c->now_ns(c->self);
}
static inline int64_t resil__coarse_now(const resil_clock *c) {
  return c->coarse_ns ? c->coarse_ns(c->self) : c->now_ns(c->self);
}

/* The system clock's coarse reading (its coarse_ns, clock.c), for a hot
 * path that calls it inline instead of through the clock's pointer (the
 * call and its frame are a third of the ~5 ns reading). */
#ifdef CLOCK_MONOTONIC_COARSE
#define RESIL__HAVE_SYS_COARSE 1
static inline int64_t resil__sys_coarse_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
  return (int64_t)ts.tv_sec * RESIL_NS_PER_S + (int64_t)ts.tv_nsec;
}
#else
#define RESIL__HAVE_SYS_COARSE 0
#endif

/* Fill *err (may be NULL) and return status. */
resil_status resil__err(resil_error *err, resil_status st, const char *field,
                        const char *fmt, ...) RESIL_PRINTF(4, 5);
/* "field: must be min..max, got got" plus the range data; returns EINVAL.
 * `what` may describe a bound that depends on another field, e.g.
 * "1..window_size (20)"; NULL gives the plain numeric range. */
resil_status resil__err_range(resil_error *err, const char *field, int64_t min,
                              int64_t max, int64_t got, const char *what);
/* Checks min <= got <= max, else resil__err_range. */
static inline resil_status resil__check_range(resil_error *err,
                                              const char *field, int64_t got,
                                              int64_t min, int64_t max) {
  if (got < min || got > max)
    return resil__err_range(err, field, min, max, got, NULL);
  return RESIL_OK;
}

/* ---- sized structs (DESIGN §11; see version.h) ---------------------------
 * Every sized struct starts with `size_t struct_size`. */

/* Largest struct_size accepted for a struct of the library's size `full`:
 * anything beyond this is garbage, not a newer layout. */
#define RESIL__SIZED_SLACK 4096u

/* Reads the caller's struct at src into dst (full_size bytes, already
 * holding the defaults): copies min(caller size, full_size) bytes, then sets
 * dst's struct_size to full_size. Refuses (RESIL_EINVAL, field "struct_size",
 * message "... call INIT_FN()") a caller size below min_size or above
 * full_size + RESIL__SIZED_SLACK, and a longer struct whose bytes past
 * full_size are not all zero. type names the struct in messages. */
resil_status resil__sized_in(void *dst, size_t full_size, const void *src,
                             size_t min_size, const char *type,
                             const char *init_fn, resil_error *err);
/* Writes the library's struct src (full_size bytes) into the caller's dst
 * of caller_size bytes: copies min of the two, zeroes the caller's bytes
 * past full_size, and sets dst's struct_size to the bytes written. A
 * caller_size below sizeof(size_t) writes nothing. */
void resil__sized_out(void *dst, size_t caller_size, const void *src,
                      size_t full_size);
/* The struct_size a caller struct claims (0 for NULL). */
static inline size_t resil__sized_size(const void *p) {
  size_t n = 0;
  if (p) __builtin_memcpy(&n, p, sizeof n);
  return n;
}

/* The caller's context as a full-size one: ctx itself when it has the
 * library's size (the fast path), else *local filled from it (defaults for
 * fields it lacks; NULL gives the defaults). Returns NULL for a ctx whose
 * struct_size cannot be trusted (never passed through resil_ctx_init()):
 * the entry point then treats it as a misuse (NOT_SENT(LOCAL_ERROR), or
 * RESIL_EMISUSE). Every public entry point that takes a const resil_ctx *
 * passes it through this before reading a field. */
#define RESIL__CTX_MIN_SIZE (offsetof(resil_ctx, user) + sizeof(void *))
const resil_ctx *resil__ctx_in_slow(resil_ctx *local, const resil_ctx *ctx);
/* The common success, classified without a call: 1 for an outcome that
 * resil_outcome_classify() puts in RESIL_CLASS_SUCCESS whatever else it
 * holds: a plain success (ANSWERED, reason OK) or an HTTP 2xx answer
 * (ANSWERED, reason HTTP, status 200..299). 0 says nothing (classify it).
 * Every policy decides on an outcome's class (and, where configured, a
 * predicate the fast paths rule out), so the policies' fast paths take
 * both alike. The fields, not the outcome: no caller's outcome has its
 * address taken. */
static inline int resil__common_success(resil_outcome_kind kind, resil_reason reason,
                                        int http_status) {
  return kind == RESIL_ANSWERED &&
         (reason == RESIL_REASON_OK ||
          (reason == RESIL_REASON_HTTP && (unsigned)http_status - 200u < 100u));
}

/* *o with stop and attempts set, built field by field: the caller's
 * outcome is read with loads no wider than the stores that wrote it and
 * never stored back and reloaded wider, so no load waits for a failed
 * store-to-load forward (a whole-struct copy of a just-modified outcome costs
 * two such stalls, more than the rest of a retry's fast path). */
static inline resil_outcome resil__outcome_with_stop(const resil_outcome *o,
                                                     resil_stop stop,
                                                     uint32_t attempts) {
  resil_outcome out;
  out.kind = o->kind;
  out.reason = o->reason;
  out.http_status = o->http_status;
  out.retry_after_ms = o->retry_after_ms;
  out.flags = o->flags;
  out.stop = stop;
  out.attempts = attempts;
  return out;
}

/* The defaults resil_ctx_init() gives, written into a full-size ctx (for
 * the hot paths that stand in a default context for a NULL one). */
static inline void resil__ctx_defaults(resil_ctx *ctx) {
  ctx->struct_size = sizeof *ctx;
  ctx->clock = NULL;
  ctx->deadline_ns = RESIL_NO_DEADLINE;
  ctx->cancel = NULL;
  ctx->flags = 0;
  ctx->attempt = 0;
  ctx->user = NULL;
  ctx->idempotency_key = NULL;
}
/* Inline so that the fast path (a full-size ctx) costs one compare on the
 * policies' hot paths. */
static inline const resil_ctx *resil__ctx_in(resil_ctx *local,
                                             const resil_ctx *ctx) {
  if (RESIL_LIKELY(ctx && ctx->struct_size == sizeof *ctx)) return ctx;
  return resil__ctx_in_slow(local, ctx);
}

/* ---- durations in human units -------------------------------------------- */

/* Writes ns as an exact human duration into buf: "0 ns", "200 ns",
 * "1.5 us", "1 ms", "2.25 s", "1 min", "24 h", "2 d" (min, h, d only for
 * whole values; otherwise seconds with decimals), "forever" for INT64_MAX.
 * Returns buf. */
char *resil__fmt_ns(char *buf, size_t n, int64_t ns);
/* "field: must be 1 ms..24 h, got 200 ns" plus the range data (in ns);
 * returns EINVAL. `what` may replace the range text as in resil__err_range. */
resil_status resil__err_range_ns(resil_error *err, const char *field,
                                 int64_t min, int64_t max, int64_t got,
                                 const char *what);
/* Checks min <= got <= max for a duration, else resil__err_range_ns. */
static inline resil_status resil__check_ns(resil_error *err, const char *field,
                                           int64_t got, int64_t min,
                                           int64_t max) {
  if (got < min || got > max)
    return resil__err_range_ns(err, field, min, max, got, NULL);
  return RESIL_OK;
}

/* 1 when the n bytes at s are well-formed UTF-8 (no overlong forms,
 * surrogates or code points past U+10FFFF: what PostgreSQL's text columns
 * and jansson accept), 0 otherwise. A NUL byte is valid UTF-8. */
int resil__utf8_valid(const void *s, size_t n);

/* The one escaping of bytes in log lines and messages (utf8.c): every
 * control byte, DEL and byte >= 0x80 is written "\xNN" (lower-case hex),
 * every other byte as it is, so that no raw control byte (nor a UTF-8 line
 * separator, U+2028, C1...) reaches a terminal or a log. */
static inline int resil__escape_needed(unsigned char c) { return c < 0x20 || c >= 0x7f; }
/* The number of bytes of s[0..n) that need an escape. */
size_t resil__escape_count(const char *s, size_t n);
/* Rewrites buf[0..n) escaped, in place, into buf[0..n + 3k) and ends it
 * with a NUL; k is resil__escape_count(buf, n) and buf holds n + 3k + 1
 * bytes. */
void resil__escape_inplace(char *buf, size_t n, size_t k);
/* Writes s[0..n) escaped into dst[0..cap), NUL-terminated; when it does not
 * fit, as much as fits (never part of an escape) followed by "...".
 * Returns dst. */
char *resil__escape_excerpt(char *dst, size_t cap, const char *s, size_t n);

/* Saturating helpers. */
static inline int64_t resil__sat_add(int64_t a, int64_t b) {
  if (b > 0 && a > INT64_MAX - b) return INT64_MAX;
  if (b < 0 && a < INT64_MIN - b) return INT64_MIN;
  return a + b;
}
static inline int64_t resil__sat_mul(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_mul_overflow(a, b, &r)) return ((a < 0) != (b < 0)) ? INT64_MIN : INT64_MAX;
  return r;
}

/* Handle magic numbers: a cheap internal consistency check at the public
 * entry points (a pointer to some other object gives RESIL_EMISUSE). It is
 * not a detection of freed handles: using a handle after its _free is
 * undefined behaviour, and no documentation or test may claim otherwise. */
#define RESIL_MAGIC_BREAKER 0x42524b52u  /* "BRKR" */
#define RESIL_MAGIC_RETRY 0x52545259u    /* "RTRY" */
#define RESIL_MAGIC_RATELIM 0x524c4d54u  /* "RLMT" */
#define RESIL_MAGIC_RATELIM_BE 0x524c4245u /* "RLBE": a limiter on a backend */
#define RESIL_MAGIC_BULKHEAD 0x424b4844u /* "BKHD" */
#define RESIL_MAGIC_POOL 0x504f4f4cu     /* "POOL" */
#define RESIL_MAGIC_TIMELIM 0x544c4d54u  /* "TLMT" */
#define RESIL_MAGIC_CHAIN 0x4348414eu    /* "CHAN" */
#define RESIL_MAGIC_BUDGET 0x42444754u   /* "BDGT" */
#define RESIL_MAGIC_DEAD 0xdeadbeefu     /* written by _free */

#endif
