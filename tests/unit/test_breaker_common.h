/* Helpers shared by the circuit breaker tests: a manual clock, a breaker
 * that must be created, its metrics, DESIGN §7 P6's config. Included by
 * tests/unit/test_breaker*.c only. */
#ifndef RESIL_TEST_BREAKER_COMMON_H
#define RESIL_TEST_BREAKER_COMMON_H

#include "test_util.h"

static inline resil_manual_clock *clock_new(void) {
  resil_manual_clock *mc = NULL;
  assert_status(RESIL_OK, resil_manual_clock_new(0, 0, &mc));
  return mc;
}

static inline resil_breaker *breaker_new(const resil_breaker_config *cfg) {
  resil_breaker *br = NULL;
  resil_error err;
  if (resil_breaker_new(cfg, &br, &err) != RESIL_OK)
    fail_msg("resil_breaker_new: %s", err.msg);
  return br;
}

static inline resil_breaker_metrics metrics_of(resil_breaker *br) {
  resil_breaker_metrics m;
  assert_status(RESIL_OK, resil_breaker_get_metrics(br, &m));
  return m;
}

/* DESIGN §7 P6: window 4 / min 2 / 50 % / OPEN wait 150 ms / 1 probe. */
static inline void p6_config(resil_breaker_config *cfg, resil_manual_clock *mc) {
  resil_breaker_config_init(cfg);
  cfg->window_size = 4;
  cfg->minimum_calls = 2;
  cfg->failure_rate_threshold_pct = 50;
  cfg->open_wait_ns = MS(150);
  cfg->half_open_permitted_calls = 1;
  cfg->clock = resil_manual_clock_get(mc);
}

#endif
