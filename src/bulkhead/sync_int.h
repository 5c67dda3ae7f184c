/* Private helpers for the blocking parts of the bulkhead, thread-pool and
 * time-limiter modules: real-time waits on condition variables bound to
 * CLOCK_MONOTONIC, so a change of the wall clock never stretches or cuts a
 * wait. Not installed. */
#ifndef RESIL_BULKHEAD_SYNC_INT_H
#define RESIL_BULKHEAD_SYNC_INT_H

#include <pthread.h>
#include <stdint.h>
#include <time.h>

#include "core/internal.h"

/* CLOCK_MONOTONIC now, in nanoseconds. */
static inline int64_t resil__mono_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * RESIL_NS_PER_S + (int64_t)ts.tv_nsec;
}

/* An absolute CLOCK_MONOTONIC time for pthread_cond_timedwait. */
static inline struct timespec resil__mono_ts(int64_t at_ns) {
  struct timespec ts;
  ts.tv_sec = (time_t)(at_ns / RESIL_NS_PER_S);
  ts.tv_nsec = (long)(at_ns % RESIL_NS_PER_S);
  return ts;
}

/* Initialises a condition variable that measures timeouts on
 * CLOCK_MONOTONIC. Returns 0 or an error number. */
static inline int resil__cond_init_mono(pthread_cond_t *cv) {
  pthread_condattr_t ca;
  int rc = pthread_condattr_init(&ca);
  if (rc != 0) return rc;
  rc = pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  if (rc == 0) rc = pthread_cond_init(cv, &ca);
  pthread_condattr_destroy(&ca);
  return rc;
}

/* Waits on cv (mu held) until signalled or CLOCK_MONOTONIC reaches
 * until_ns; INT64_MAX waits without limit. Spurious wake-ups are the
 * caller's to handle, as with pthread_cond_wait. */
static inline void resil__cond_wait_until(pthread_cond_t *cv,
                                          pthread_mutex_t *mu,
                                          int64_t until_ns) {
  if (until_ns == INT64_MAX) {
    pthread_cond_wait(cv, mu);
  } else {
    struct timespec ts = resil__mono_ts(until_ns);
    pthread_cond_timedwait(cv, mu, &ts);
  }
}

/* How often a waiter that cannot be woken by a cancellation token polls it. */
#define RESIL_CANCEL_POLL_NS RESIL_NS_PER_MS

#endif
