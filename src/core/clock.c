/* The system clock and the manual clock. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdatomic.h>
#include <time.h>

#include "internal.h"

static int64_t ts_ns(const struct timespec *ts) {
  return (int64_t)ts->tv_sec * RESIL_NS_PER_S + (int64_t)ts->tv_nsec;
}

static int64_t sys_now_ns(void *self) {
  (void)self;
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts_ns(&ts);
}

#if RESIL__HAVE_SYS_COARSE
static int64_t sys_coarse_ns(void *self) {
  (void)self;
  return resil__sys_coarse_ns();
}
#define RESIL_COARSE_FN sys_coarse_ns
/* Linux's coarse clock advances once per scheduler tick: at most 10 ms at
 * HZ=100, 4 ms at the common HZ=250. Policies assume the worst case. */
#define RESIL_COARSE_RES (10 * RESIL_NS_PER_MS)
#else
#define RESIL_COARSE_FN NULL
#define RESIL_COARSE_RES 0
#endif

static int64_t sys_wall_ms(void *self) {
  (void)self;
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int sys_sleep_ns(void *self, int64_t ns, resil_cancel *cancel) {
  (void)self;
  if (ns <= 0) return resil_cancel_is_set(cancel);
  if (cancel) return resil_cancel_wait_ns(cancel, ns);
  struct timespec now, until;
  clock_gettime(CLOCK_MONOTONIC, &now);
  int64_t t = ts_ns(&now) + ns;
  until.tv_sec = (time_t)(t / RESIL_NS_PER_S);
  until.tv_nsec = (long)(t % RESIL_NS_PER_S);
  while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &until, NULL) == EINTR) {
  }
  return 0;
}

static const resil_clock system_clock = {
    .now_ns = sys_now_ns,
    .coarse_ns = RESIL_COARSE_FN,
    .wall_ms = sys_wall_ms,
    .sleep_ns = sys_sleep_ns,
    .self = NULL,
    .coarse_resolution_ns = RESIL_COARSE_RES,
};

const resil_clock *resil_clock_system(void) { return &system_clock; }

int64_t resil_clock_now_ns(const resil_clock *c) {
  c = resil__clock(c);
  return c->now_ns(c->self);
}

int64_t resil_clock_wall_ms(const resil_clock *c) {
  c = resil__clock(c);
  return c->wall_ms ? c->wall_ms(c->self) : sys_wall_ms(NULL);
}

int resil_clock_sleep_ns(const resil_clock *c, int64_t ns,
                         resil_cancel *cancel) {
  c = resil__clock(c);
  return c->sleep_ns ? c->sleep_ns(c->self, ns, cancel)
                     : sys_sleep_ns(NULL, ns, cancel);
}

/* ---- manual clock ---------------------------------------------------- */

struct resil_manual_clock {
  resil_clock clock;
  _Atomic int64_t now_ns;
  _Atomic int64_t wall_base_ms; /* wall time at now_ns == start_ns */
  _Atomic int64_t slept_ns;
  int64_t start_ns;
};

static int64_t man_now(void *self) {
  resil_manual_clock *mc = self;
  return atomic_load_explicit(&mc->now_ns, memory_order_acquire);
}

static int64_t man_wall(void *self) {
  resil_manual_clock *mc = self;
  int64_t now = atomic_load_explicit(&mc->now_ns, memory_order_acquire);
  return atomic_load_explicit(&mc->wall_base_ms, memory_order_relaxed) +
         (now - mc->start_ns) / RESIL_NS_PER_MS;
}

static int man_sleep(void *self, int64_t ns, resil_cancel *cancel) {
  resil_manual_clock *mc = self;
  if (resil_cancel_is_set(cancel)) return 1;
  if (ns > 0) {
    atomic_fetch_add_explicit(&mc->slept_ns, ns, memory_order_relaxed);
    atomic_fetch_add_explicit(&mc->now_ns, ns, memory_order_acq_rel);
  }
  return 0;
}

resil_status resil_manual_clock_new(int64_t start_ns, int64_t start_wall_ms,
                                    resil_manual_clock **out) {
  if (!out || start_ns < 0) return RESIL_EINVAL;
  resil_manual_clock *mc = resil__calloc(NULL, sizeof *mc);
  if (!mc) return RESIL_ENOMEM;
  mc->clock.now_ns = man_now;
  mc->clock.coarse_ns = NULL;
  mc->clock.wall_ms = man_wall;
  mc->clock.sleep_ns = man_sleep;
  mc->clock.self = mc;
  mc->clock.coarse_resolution_ns = 0;
  mc->start_ns = start_ns;
  atomic_init(&mc->now_ns, start_ns);
  atomic_init(&mc->wall_base_ms, start_wall_ms);
  atomic_init(&mc->slept_ns, 0);
  *out = mc;
  return RESIL_OK;
}

void resil_manual_clock_free(resil_manual_clock *mc) { resil__free(NULL, mc); }

const resil_clock *resil_manual_clock_get(resil_manual_clock *mc) {
  return &mc->clock;
}

void resil_manual_clock_advance_ns(resil_manual_clock *mc, int64_t ns) {
  if (ns > 0) atomic_fetch_add_explicit(&mc->now_ns, ns, memory_order_acq_rel);
}

int64_t resil_manual_clock_now_ns(const resil_manual_clock *mc) {
  return atomic_load_explicit(&((resil_manual_clock *)mc)->now_ns,
                              memory_order_acquire);
}

int64_t resil_manual_clock_slept_ns(const resil_manual_clock *mc) {
  return atomic_load_explicit(&((resil_manual_clock *)mc)->slept_ns,
                              memory_order_relaxed);
}
