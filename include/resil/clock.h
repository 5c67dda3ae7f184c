/* Injectable time. Every policy config has a `const resil_clock *clock`
 * field; NULL means resil_clock_system(). Tests move time with a manual clock
 * instead of sleeping.
 *
 * Thread-safety: the system clock and manual clocks are thread-safe. */
#ifndef RESIL_CLOCK_H
#define RESIL_CLOCK_H

#include <stdint.h>

#include "status.h"
#include "version.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct resil_cancel resil_cancel;

/* Durations in the API are int64_t nanoseconds. These build them from
 * human units: cfg.open_wait_ns = RESIL_S(30); cfg.wait_ns = RESIL_MS(250).
 * The argument may be any integer expression; no overflow check. */
#define RESIL_US(us) ((int64_t)(us) * INT64_C(1000))
#define RESIL_MS(ms) ((int64_t)(ms) * INT64_C(1000000))
#define RESIL_S(s) ((int64_t)(s) * INT64_C(1000000000))
#define RESIL_MIN(m) ((int64_t)(m) * INT64_C(60000000000))
#define RESIL_H(h) ((int64_t)(h) * INT64_C(3600000000000))

typedef struct resil_clock {
  /* Monotonic time in nanoseconds. Required. */
  int64_t (*now_ns)(void *self);
  /* Monotonic time that is cheaper to read but may lag now_ns by up to
   * coarse_resolution_ns. Policies use it only where that error is small
   * against the quantity measured (see breaker slow-call detection).
   * NULL means now_ns. */
  int64_t (*coarse_ns)(void *self);
  /* Wall-clock time, milliseconds since the Unix epoch (HTTP dates in
   * Retry-After). NULL means CLOCK_REALTIME. */
  int64_t (*wall_ms)(void *self);
  /* Sleep ns nanoseconds, or until `cancel` (may be NULL) is signalled.
   * Returns 0 after the full sleep, 1 when woken by cancellation.
   * NULL means a real sleep on CLOCK_MONOTONIC. */
  int (*sleep_ns)(void *self, int64_t ns, resil_cancel *cancel);
  void *self;
  /* How far coarse_ns may lag now_ns; 0 when coarse_ns is exact. */
  int64_t coarse_resolution_ns;
} resil_clock;

/* The process's real clock: CLOCK_MONOTONIC, CLOCK_MONOTONIC_COARSE (when
 * available), CLOCK_REALTIME and a cancellable sleep. Static, immutable,
 * never NULL. Since 0.1. */
RESIL_API const resil_clock *resil_clock_system(void);

/* Convenience readers that accept NULL for the system clock. */
RESIL_API int64_t resil_clock_now_ns(const resil_clock *c);
RESIL_API int64_t resil_clock_wall_ms(const resil_clock *c);
RESIL_API int resil_clock_sleep_ns(const resil_clock *c, int64_t ns,
                                   resil_cancel *cancel);

/* A manual clock: time moves only when told to. Its sleep does not block:
 * it advances the clock by the requested amount (so a retry's backoff in a
 * test takes no real time) and adds it to the total slept.
 *
 *   resil_manual_clock *mc;
 *   resil_manual_clock_new(0, 1700000000000, &mc);
 *   cfg.clock = resil_manual_clock_get(mc);
 *   resil_manual_clock_advance_ns(mc, 2000000000);  // +2 s
 *
 * Create/free pair: resil_manual_clock_new / resil_manual_clock_free. */
typedef struct resil_manual_clock resil_manual_clock;

/* Returns RESIL_OK, RESIL_EINVAL (out NULL, start_ns < 0), RESIL_ENOMEM. */
RESIL_API resil_status resil_manual_clock_new(int64_t start_ns,
                                              int64_t start_wall_ms,
                                              resil_manual_clock **out);
/* NULL is a no-op. Objects using the clock must be freed first. */
RESIL_API void resil_manual_clock_free(resil_manual_clock *mc);
/* The clock interface, valid until resil_manual_clock_free(). */
RESIL_API const resil_clock *resil_manual_clock_get(resil_manual_clock *mc);
/* Moves monotonic and wall time forward by ns (ns >= 0). */
RESIL_API void resil_manual_clock_advance_ns(resil_manual_clock *mc, int64_t ns);
RESIL_API int64_t resil_manual_clock_now_ns(const resil_manual_clock *mc);
/* Sum of all sleeps requested through the clock. */
RESIL_API int64_t resil_manual_clock_slept_ns(const resil_manual_clock *mc);

#ifdef __cplusplus
}
#endif
#endif
