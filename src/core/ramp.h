/* The ramp of DESIGN §2.9, the one rule shared by the breaker's ramp after
 * HALF_OPEN -> CLOSED (src/breaker) and an instance back from ejection
 * (src/http/instances.c): the admitted share as a function of the time
 * since the ramp began, share(t) = max(min, (t / D)^(1 / aggression))
 * (Envoy's slow-start curve; 1 = linear), and the admission of a call by
 * error diffusion: each decision adds share(t) to an accumulator (32.32
 * fixed point) and is admitted when the add carries into the integer part,
 * so over any run of consecutive decisions the admitted calls are the sum
 * of their shares within one, deterministic and without a lock. Header
 * only (static inline): compiled into each library that needs it. Not
 * installed. */
#ifndef RESIL_CORE_RAMP_H
#define RESIL_CORE_RAMP_H

#include <math.h>
#include <stdatomic.h>
#include <stdint.h>

#include "core/internal.h"

#define RESIL__RAMP_ONE (UINT64_C(1) << 32)

/* A ramp's curve (its layout is part of the breaker's shared slot). */
typedef struct resil__ramp_curve {
  int64_t ns;       /* the ramp's duration                    */
  uint64_t min_inc; /* the minimum share, 32.32 fixed point   */
  double exp;       /* 1 / aggression                         */
  double inv_ns;    /* 1 / ns                                 */
} resil__ramp_curve;

/* The three settings of a ramp, checked for every config that has one
 * (fields named as given): the duration 0 (no ramp) or at least 1 ms, the
 * minimum share 1..100 %, the aggression finite and > 0. */
static inline resil_status resil__ramp_check(resil_error *err, const char *dur_field,
                                             int64_t duration_ns, const char *min_field,
                                             uint32_t min_percent, const char *ag_field,
                                             double aggression) {
  if (duration_ns != 0 && duration_ns < RESIL_NS_PER_MS)
    return resil__err_range_ns(err, dur_field, 0, INT64_MAX, duration_ns,
                               "0 (no ramp) or at least 1 ms");
  resil_status st = resil__check_range(err, min_field, min_percent, 1, 100);
  if (st != RESIL_OK) return st;
  if (!(aggression > 0.0) || !isfinite(aggression)) /* also rejects NaN */
    return resil__err(err, RESIL_EINVAL, ag_field, "must be finite and greater than 0, got %g",
                      aggression);
  return RESIL_OK;
}

/* duration_ns > 0, min_percent 1..100, aggression > 0 (resil__ramp_check). */
static inline void resil__ramp_curve_init(resil__ramp_curve *c, int64_t duration_ns,
                                          uint32_t min_percent, double aggression) {
  c->ns = duration_ns;
  c->min_inc = ((uint64_t)min_percent << 32) / 100u;
  c->exp = 1.0 / aggression;
  c->inv_ns = 1.0 / (double)duration_ns;
}

/* share(el) as a 32.32 increment in [min_inc, RESIL__RAMP_ONE]. */
static inline uint64_t resil__ramp_inc(const resil__ramp_curve *c, int64_t el) {
  if (el <= 0) return c->min_inc;
  if (el >= c->ns) return RESIL__RAMP_ONE;
  double x = (double)el * c->inv_ns;
  if (c->exp != 1.0) x = pow(x, c->exp);
  double f = x * (double)RESIL__RAMP_ONE;
  uint64_t inc = f >= (double)RESIL__RAMP_ONE ? RESIL__RAMP_ONE : (uint64_t)f;
  return inc < c->min_inc ? c->min_inc : inc;
}

/* One decision of share `inc` on accumulator acc: 1 admitted, 0 not. */
static inline int resil__ramp_take(_Atomic uint64_t *acc, uint64_t inc) {
  uint64_t old = atomic_fetch_add_explicit(acc, inc, memory_order_relaxed);
  return ((old + inc) >> 32) != (old >> 32);
}

#endif
