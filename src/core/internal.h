/* Internal helpers shared by the library's modules. Not installed; nothing
 * here is exported from the shared library (symbols are hidden by default
 * and only RESIL_API functions are visible). */
#ifndef RESIL_CORE_INTERNAL_H
#define RESIL_CORE_INTERNAL_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

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

/* Handle magic numbers: checked by the public entry points so that a freed
 * or foreign handle gives RESIL_EMISUSE rather than silent corruption where
 * the memory is still readable. */
#define RESIL_MAGIC_BREAKER 0x42524b52u  /* "BRKR" */
#define RESIL_MAGIC_RETRY 0x52545259u    /* "RTRY" */
#define RESIL_MAGIC_RATELIM 0x524c4d54u  /* "RLMT" */
#define RESIL_MAGIC_BULKHEAD 0x424b4844u /* "BKHD" */
#define RESIL_MAGIC_POOL 0x504f4f4cu     /* "POOL" */
#define RESIL_MAGIC_TIMELIM 0x544c4d54u  /* "TLMT" */
#define RESIL_MAGIC_CHAIN 0x4348414eu    /* "CHAN" */
#define RESIL_MAGIC_BUDGET 0x42444754u   /* "BDGT" */
#define RESIL_MAGIC_DEAD 0xdeadbeefu     /* written by _free */

#endif
