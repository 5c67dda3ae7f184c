/* The breaker's ramp after recovery (DESIGN §2.9; breaker.h "Ramp"). Time
 * comes from the manual clock; nothing sleeps. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "breaker/breaker_int.h"
#include "core/internal.h"
#include "test_breaker_common.h"

/* P6's config (window 4 / min 2 / 50 % / 1 probe) with an OPEN wait of
 * 100 ms and a 1 s linear ramp from 10 %. */
static void ramp_config(resil_breaker_config *cfg, resil_manual_clock *mc) {
  p6_config(cfg, mc);
  cfg->open_wait_ns = MS(100);
  cfg->event_capacity = 64;
  cfg->ramp_duration_ns = MS(1000);
}

static void record(resil_breaker *br, const resil_breaker_permit *p,
                   resil_outcome o) {
  assert_status(RESIL_OK, resil_breaker_record(br, p, &o, 0));
}

/* Two calls admitted and recorded as failures (503): with ramp_config's
 * window, they open a CLOSED breaker. */
static void two_failures(resil_breaker *br) {
  resil_breaker_permit p;
  for (int i = 0; i < 2; i++) {
    assert_int_equal(resil_breaker_try_acquire(br, &p), RESIL_DECISION_GO);
    record(br, &p, resil_outcome_http(503));
  }
}

/* Two failures open it; the wait passes; one healthy probe closes it. */
static void open_then_recover(resil_breaker *br, resil_manual_clock *mc) {
  resil_breaker_permit p;
  two_failures(br);
  assert_int_equal(resil_breaker_state(br), RESIL_BREAKER_OPEN);
  resil_breaker_metrics m = metrics_of(br);
  resil_manual_clock_advance_ns(mc, m.open_wait_ns);
  assert_int_equal(resil_breaker_try_acquire(br, &p), RESIL_DECISION_GO);
  record(br, &p, resil_outcome_ok());
  assert_int_equal(resil_breaker_state(br), RESIL_BREAKER_CLOSED);
}

/* A breaker of cfg on mc that has opened and recovered (open_then_recover):
 * ramping, when cfg configures a ramp. */
static resil_breaker *recovered_breaker(const resil_breaker_config *cfg,
                                        resil_manual_clock *mc) {
  resil_breaker *br = breaker_new(cfg);
  open_then_recover(br, mc);
  return br;
}

/* n decisions through try_acquire_why; admitted ones record a success. */
static int admitted_of(resil_breaker *br, int n) {
  int got = 0;
  for (int i = 0; i < n; i++) {
    resil_breaker_permit p;
    resil_reason why = RESIL_REASON_COUNT_;
    if (resil_breaker_try_acquire_why(br, &p, &why) == RESIL_DECISION_GO) {
      assert_int_equal(why, RESIL_REASON_NONE);
      record(br, &p, resil_outcome_ok());
      got++;
    } else {
      assert_int_equal(why, RESIL_REASON_RECOVERING);
    }
  }
  return got;
}

static size_t events_of(resil_breaker *br, resil_breaker_event *ev, size_t max) {
  return resil_breaker_events(br, ev, max);
}

/* Without ramp_duration_ns the breaker jumps to full traffic, as before. */
static void ramp_off_by_default_gives_full_traffic_at_once(void **state) {
  (void)state;
  resil_manual_clock *mc = clock_new();
  resil_breaker_config cfg;
  ramp_config(&cfg, mc);
  resil_breaker_config probe;
  resil_breaker_config_init(&probe);
  assert_true(probe.ramp_duration_ns == 0);
  assert_int_equal(probe.ramp_min_percent, 10);
  assert_true(probe.ramp_aggression == 1.0);
  cfg.ramp_duration_ns = 0;
  resil_breaker *br = recovered_breaker(&cfg, mc);
  assert_int_equal(admitted_of(br, 100), 100);
  resil_breaker_metrics m = metrics_of(br);
  assert_int_equal(m.ramping, 0);
  assert_true(m.ramp_share == 1.0);
  assert_true(resil_breaker_ramp_share(br) == 1.0);
  assert_int_equal(m.total_ramp_rejected, 0);
  resil_breaker_event ev[64];
  size_t n = events_of(br, ev, 64);
  for (size_t i = 0; i < n; i++)
    assert_true(ev[i].kind != RESIL_BREAKER_EVENT_RAMP_STARTED &&
                ev[i].kind != RESIL_BREAKER_EVENT_RAMP_ENDED);
  resil_breaker_free(br);
  resil_manual_clock_free(mc);
}

/* A linear ramp from 10 %: each run of 100 decisions admits 100 x share(t)
 * within one call; the state says CLOSED throughout; refusals count in
 * total_ramp_rejected only; the ramp ends at its instant with RAMP_ENDED. */
static void linear_ramp_admits_the_curve_and_ends_on_time(void **state) {
  (void)state;
  resil_manual_clock *mc = clock_new();
  resil_breaker_config cfg;
  ramp_config(&cfg, mc);
  resil_breaker *br = recovered_breaker(&cfg, mc);
  int64_t start = resil_manual_clock_get(mc)->now_ns(resil_manual_clock_get(mc)->self);
  resil_breaker_metrics m0 = metrics_of(br);
  assert_int_equal(m0.state, RESIL_BREAKER_CLOSED);
  assert_int_equal(m0.ramping, 1);
  assert_true(m0.ramp_since_ns == start);
  uint64_t rejected = 0;
  for (int step = 0; step < 10; step++) {
    double share = step == 0 ? 0.10 : step / 10.0;
    assert_true(fabs(resil_breaker_ramp_share(br) - share) < 1e-6);
    int got = admitted_of(br, 100);
    if (abs(got - (int)lround(share * 100)) > 1)
      fail_msg("at %d %%: %d of 100 admitted, share %.2f", step * 10, got, share);
    rejected += (uint64_t)(100 - got);
    resil_breaker_metrics m = metrics_of(br);
    assert_int_equal(m.state, RESIL_BREAKER_CLOSED);
    assert_int_equal(m.ramping, 1);
    assert_int_equal(m.total_ramp_rejected, rejected);
    assert_int_equal(m.total_not_permitted, 0);
    /* Refused calls never reach the window: only the admitted ones. */
    assert_int_equal(m.failed_calls, 0);
    resil_manual_clock_advance_ns(mc, MS(100));
  }
  /* t = D: the ramp is over. */
  assert_int_equal(admitted_of(br, 100), 100);
  resil_breaker_metrics m = metrics_of(br);
  assert_int_equal(m.ramping, 0);
  assert_true(m.ramp_share == 1.0);
  assert_int_equal(m.ramp_since_ns, 0);
  assert_int_equal(m.consecutive_opens, 0);
  assert_int_equal(m.total_ramp_rejected, rejected);
  resil_breaker_event ev[64];
  size_t n = events_of(br, ev, 64);
  /* ... TRANSITION OPEN->HALF_OPEN, TRANSITION HALF_OPEN->CLOSED,
   * RAMP_STARTED, RAMP_ENDED. */
  assert_true(n >= 4);
  assert_int_equal(ev[n - 3].kind, RESIL_BREAKER_EVENT_TRANSITION);
  assert_int_equal(ev[n - 3].from, RESIL_BREAKER_HALF_OPEN);
  assert_int_equal(ev[n - 3].to, RESIL_BREAKER_CLOSED);
  assert_int_equal(ev[n - 2].kind, RESIL_BREAKER_EVENT_RAMP_STARTED);
  assert_int_equal(ev[n - 2].cause, RESIL_BREAKER_CAUSE_BELOW_THRESHOLDS);
  assert_true(ev[n - 2].time_ns == start);
  assert_int_equal(ev[n - 1].kind, RESIL_BREAKER_EVENT_RAMP_ENDED);
  assert_int_equal(ev[n - 1].cause, RESIL_BREAKER_CAUSE_RAMP_COMPLETED);
  assert_true(ev[n - 1].time_ns == start + MS(1000));
  assert_int_equal(ev[n - 1].from, RESIL_BREAKER_CLOSED);
  assert_int_equal(ev[n - 1].to, RESIL_BREAKER_CLOSED);
  resil_breaker_free(br);
  resil_manual_clock_free(mc);
}

/* share(t) = max(min, (t/D)^(1/aggression)), Envoy's slow start curve. */
static void aggression_shapes_the_curve_as_envoy_slow_start(void **state) {
  (void)state;
  const double aggr[] = {2.0, 0.5, 1.0};
  for (size_t a = 0; a < 3; a++) {
    resil_manual_clock *mc = clock_new();
    resil_breaker_config cfg;
    ramp_config(&cfg, mc);
    cfg.ramp_aggression = aggr[a];
    cfg.ramp_min_percent = 5;
    resil_breaker *br = recovered_breaker(&cfg, mc);
    for (int pct = 0; pct < 100; pct += 5) {
      double want = pow(pct / 100.0, 1.0 / aggr[a]);
      if (want < 0.05)
        want = 0.05;
      double got = resil_breaker_ramp_share(br);
      if (fabs(got - want) > 1e-6)
        fail_msg("aggression %g at %d %%: share %f, want %f", aggr[a], pct, got,
                 want);
      resil_breaker_metrics m = metrics_of(br);
      assert_true(fabs(m.ramp_share - want) < 1e-6);
      resil_manual_clock_advance_ns(mc, MS(50));
    }
    /* 2.0 at 25 %: half the calls (sqrt), over 200 decisions. */
    resil_breaker_free(br);
    resil_manual_clock_free(mc);
  }
  resil_manual_clock *mc = clock_new();
  resil_breaker_config cfg;
  ramp_config(&cfg, mc);
  cfg.ramp_aggression = 2.0;
  resil_breaker *br = recovered_breaker(&cfg, mc);
  resil_manual_clock_advance_ns(mc, MS(250));
  int got = admitted_of(br, 200);
  assert_true(got >= 99 && got <= 101);
  resil_breaker_free(br);
  resil_manual_clock_free(mc);
}

/* A success recorded during the ramp is counted in the window and the
 * totals as in CLOSED (it takes CLOSED's inline record path), and the
 * failures after it are judged on the same window: two of the last four
 * open the breaker, which ends the ramp. */
static void ramp_records_count_as_closed(void **state) {
  (void)state;
  resil_manual_clock *mc = clock_new();
  resil_breaker_config cfg;
  ramp_config(&cfg, mc);
  cfg.ramp_min_percent = 100;
  resil_breaker *br = recovered_breaker(&cfg, mc);
  resil_breaker_metrics m0 = metrics_of(br);
  assert_int_equal(m0.ramping, 1);
  assert_int_equal(m0.buffered_calls, 0);
  assert_int_equal(admitted_of(br, 3), 3);
  resil_breaker_metrics m = metrics_of(br);
  assert_int_equal(m.ramping, 1);
  assert_int_equal(m.buffered_calls, 3);
  assert_int_equal(m.successful_calls, 3);
  assert_int_equal(m.total_calls, m0.total_calls + 3);
  resil_breaker_permit p;
  assert_int_equal(resil_breaker_try_acquire(br, &p), RESIL_DECISION_GO);
  record(br, &p, resil_outcome_http(503));
  m = metrics_of(br);
  assert_int_equal(m.state, RESIL_BREAKER_CLOSED);
  assert_int_equal(m.ramping, 1);
  assert_int_equal(m.buffered_calls, 4);
  assert_int_equal(m.failed_calls, 1);
  assert_int_equal(resil_breaker_try_acquire(br, &p), RESIL_DECISION_GO);
  record(br, &p, resil_outcome_http(503));
  m = metrics_of(br);
  assert_int_equal(m.state, RESIL_BREAKER_OPEN);
  assert_int_equal(m.ramping, 0);
  resil_breaker_free(br);
  resil_manual_clock_free(mc);
}

static resil_outcome count_call(void *arg, const resil_ctx *ctx) {
  (void)ctx;
  (*(int *)arg)++;
  return resil_outcome_ok();
}

/* The run form and a chain's breaker layer refuse with REJECTED(RECOVERING)
 * without calling, exactly where try_acquire would (one decision). */
static void run_form_and_chain_refuse_with_recovering(void **state) {
  (void)state;
  resil_manual_clock *mc = clock_new();
  resil_breaker_config cfg;
  ramp_config(&cfg, mc);
  cfg.ramp_min_percent = 25;
  resil_breaker *br = recovered_breaker(&cfg, mc);
  int calls = 0, rejected = 0;
  for (int i = 0; i < 100; i++) {
    resil_outcome o = resil_breaker_run(br, NULL, count_call, &calls);
    if (o.kind == RESIL_REJECTED) {
      assert_int_equal(o.reason, RESIL_REASON_RECOVERING);
      rejected++;
    } else {
      assert_int_equal(o.kind, RESIL_ANSWERED);
    }
  }
  assert_int_equal(calls, 25);
  assert_int_equal(rejected, 75);
  resil_chain_config cc;
  resil_chain_config_init(&cc);
  cc.clock = resil_manual_clock_get(mc);
  resil_chain *ch = NULL;
  resil_error err;
  assert_status(RESIL_OK, resil_chain_new(&cc, &ch, &err));
  assert_status(RESIL_OK, resil_chain_add_breaker(ch, br));
  calls = rejected = 0;
  for (int i = 0; i < 100; i++) {
    resil_outcome o = resil_chain_run(ch, NULL, count_call, &calls);
    if (o.kind == RESIL_REJECTED) {
      assert_int_equal(o.reason, RESIL_REASON_RECOVERING);
      rejected++;
    }
  }
  assert_int_equal(calls, 25);
  assert_int_equal(rejected, 75);
  resil_breaker_metrics m = metrics_of(br);
  assert_int_equal(m.total_ramp_rejected, 150);
  assert_int_equal(m.total_not_permitted, 0);
  assert_int_equal(m.total_failures, 2); /* the two that opened it */
  resil_chain_free(ch);
  resil_breaker_free(br);
  resil_manual_clock_free(mc);
}

/* Issue 23 R3: failures during the ramp open the breaker with the series'
 * next, longer wait (the ramping CLOSED kept the count), RAMP_ENDED with
 * the opening's cause; the next healthy probe starts the ramp over. After
 * a ramp that completed, the count starts again. */
static void failure_during_ramp_reopens_with_next_wait_and_ramps_again(void **state) {
  (void)state;
  resil_manual_clock *mc = clock_new();
  resil_breaker_config cfg;
  ramp_config(&cfg, mc);
  cfg.open_wait_multiplier = 2.0;
  cfg.ramp_min_percent = 100; /* every call admitted: the window decides */
  resil_breaker *br = recovered_breaker(&cfg, mc);
  resil_breaker_metrics m = metrics_of(br);
  assert_int_equal(m.ramping, 1);
  assert_int_equal(m.consecutive_opens, 1);
  resil_manual_clock_advance_ns(mc, MS(300));
  two_failures(br);
  m = metrics_of(br);
  assert_int_equal(m.state, RESIL_BREAKER_OPEN);
  assert_int_equal(m.consecutive_opens, 2);
  assert_true(m.open_wait_ns == MS(200));
  assert_int_equal(m.ramping, 0);
  resil_breaker_event ev[64];
  size_t n = events_of(br, ev, 64);
  assert_int_equal(ev[n - 2].kind, RESIL_BREAKER_EVENT_RAMP_ENDED);
  assert_int_equal(ev[n - 2].cause, RESIL_BREAKER_CAUSE_FAILURE_RATE);
  assert_int_equal(ev[n - 1].kind, RESIL_BREAKER_EVENT_TRANSITION);
  assert_int_equal(ev[n - 1].from, RESIL_BREAKER_CLOSED);
  assert_int_equal(ev[n - 1].to, RESIL_BREAKER_OPEN);
  /* The longer wait, then the probe: the ramp starts over. */
  resil_breaker_permit p;
  resil_manual_clock_advance_ns(mc, MS(199));
  assert_int_equal(resil_breaker_try_acquire(br, &p), RESIL_DECISION_DENY);
  resil_manual_clock_advance_ns(mc, MS(1));
  assert_int_equal(resil_breaker_try_acquire(br, &p), RESIL_DECISION_GO);
  record(br, &p, resil_outcome_ok());
  m = metrics_of(br);
  assert_int_equal(m.ramping, 1);
  assert_int_equal(m.consecutive_opens, 2);
  n = events_of(br, ev, 64);
  assert_int_equal(ev[n - 1].kind, RESIL_BREAKER_EVENT_RAMP_STARTED);
  /* This ramp completes: the count restarts, the next OPEN waits 100 ms. */
  resil_manual_clock_advance_ns(mc, MS(1000));
  two_failures(br);
  m = metrics_of(br);
  assert_int_equal(m.state, RESIL_BREAKER_OPEN);
  assert_int_equal(m.consecutive_opens, 1);
  assert_true(m.open_wait_ns == MS(100));
  resil_breaker_free(br);
  resil_manual_clock_free(mc);
}

/* A permit handed out during the ramp still counts after the ramp ended:
 * the end is not a new generation. */
static void permits_of_the_ramp_count_after_it_ends(void **state) {
  (void)state;
  resil_manual_clock *mc = clock_new();
  resil_breaker_config cfg;
  ramp_config(&cfg, mc);
  cfg.ramp_min_percent = 100;
  resil_breaker *br = recovered_breaker(&cfg, mc);
  resil_breaker_permit p1, p2;
  assert_int_equal(resil_breaker_try_acquire(br, &p1), RESIL_DECISION_GO);
  assert_int_equal(resil_breaker_try_acquire(br, &p2), RESIL_DECISION_GO);
  uint64_t gen = metrics_of(br).generation;
  resil_manual_clock_advance_ns(mc, MS(2000));
  assert_int_equal(resil_breaker_state(br), RESIL_BREAKER_CLOSED);
  assert_int_equal(metrics_of(br).generation, gen);
  record(br, &p1, resil_outcome_http(503));
  record(br, &p2, resil_outcome_http(503));
  assert_int_equal(resil_breaker_state(br), RESIL_BREAKER_OPEN);
  resil_breaker_free(br);
  resil_manual_clock_free(mc);
}

/* A manual CLOSED (X->X) and a reset give full traffic at once, ending the
 * ramp with RAMP_ENDED (MANUAL, RESET). A manual HALF_OPEN->CLOSED does
 * not ramp; the HALF_OPEN maximum wait leading to CLOSED does. */
static void manual_close_and_reset_end_the_ramp(void **state) {
  (void)state;
  resil_manual_clock *mc = clock_new();
  resil_breaker_config cfg;
  ramp_config(&cfg, mc);
  resil_breaker *br = recovered_breaker(&cfg, mc);
  assert_status(RESIL_OK, resil_breaker_transition(br, RESIL_BREAKER_CLOSED));
  resil_breaker_event ev[64];
  size_t n = events_of(br, ev, 64);
  assert_int_equal(ev[n - 1].kind, RESIL_BREAKER_EVENT_RAMP_ENDED);
  assert_int_equal(ev[n - 1].cause, RESIL_BREAKER_CAUSE_MANUAL);
  assert_int_equal(admitted_of(br, 50), 50);
  assert_int_equal(metrics_of(br).ramping, 0);

  resil_breaker_free(br);
  br = recovered_breaker(&cfg, mc);
  assert_status(RESIL_OK, resil_breaker_reset(br));
  n = events_of(br, ev, 64);
  assert_int_equal(ev[n - 2].kind, RESIL_BREAKER_EVENT_RAMP_ENDED);
  assert_int_equal(ev[n - 2].cause, RESIL_BREAKER_CAUSE_RESET);
  assert_int_equal(ev[n - 1].kind, RESIL_BREAKER_EVENT_RESET);
  assert_int_equal(ev[n - 1].from, RESIL_BREAKER_CLOSED);
  assert_int_equal(admitted_of(br, 50), 50);

  /* Manual HALF_OPEN -> CLOSED: no ramp. */
  assert_status(RESIL_OK, resil_breaker_transition(br, RESIL_BREAKER_OPEN));
  assert_status(RESIL_OK, resil_breaker_transition(br, RESIL_BREAKER_HALF_OPEN));
  assert_status(RESIL_OK, resil_breaker_transition(br, RESIL_BREAKER_CLOSED));
  assert_int_equal(metrics_of(br).ramping, 0);
  resil_breaker_free(br);

  /* The HALF_OPEN maximum wait to CLOSED ramps, dated at its instant. */
  cfg.half_open_max_wait_ns = MS(50);
  cfg.half_open_max_wait_to_closed = 1;
  br = breaker_new(&cfg);
  assert_status(RESIL_OK, resil_breaker_transition(br, RESIL_BREAKER_OPEN));
  resil_manual_clock_advance_ns(mc, MS(100));
  resil_breaker_permit p;
  assert_int_equal(resil_breaker_try_acquire(br, &p), RESIL_DECISION_GO);
  resil_manual_clock_advance_ns(mc, MS(60));
  resil_breaker_metrics m = metrics_of(br);
  assert_int_equal(m.state, RESIL_BREAKER_CLOSED);
  assert_int_equal(m.ramping, 1);
  n = events_of(br, ev, 64);
  assert_int_equal(ev[n - 1].kind, RESIL_BREAKER_EVENT_RAMP_STARTED);
  assert_int_equal(ev[n - 1].cause, RESIL_BREAKER_CAUSE_HALF_OPEN_MAX_WAIT);
  assert_true(ev[n - 1].time_ns == m.ramp_since_ns);
  assert_true(m.state_since_ns == m.ramp_since_ns);
  resil_breaker_free(br);
  resil_manual_clock_free(mc);
}

static void ramp_config_is_validated(void **state) {
  (void)state;
  resil_breaker_config cfg;
  resil_breaker *br = NULL;
  resil_error err;
  resil_breaker_config_init(&cfg);
  cfg.ramp_duration_ns = MS(1) - 1;
  assert_status(RESIL_EINVAL, resil_breaker_new(&cfg, &br, &err));
  assert_string_equal(err.field, "ramp_duration_ns");
  cfg.ramp_duration_ns = -1;
  assert_status(RESIL_EINVAL, resil_breaker_new(&cfg, &br, &err));
  cfg.ramp_duration_ns = MS(1);
  const uint32_t bad_pct[] = {0, 101};
  for (size_t i = 0; i < 2; i++) {
    cfg.ramp_min_percent = bad_pct[i];
    assert_status(RESIL_EINVAL, resil_breaker_new(&cfg, &br, &err));
    assert_string_equal(err.field, "ramp_min_percent");
  }
  cfg.ramp_min_percent = 1;
  const double bad_aggr[] = {0.0, -1.0, NAN, INFINITY};
  for (size_t i = 0; i < 4; i++) {
    cfg.ramp_aggression = bad_aggr[i];
    assert_status(RESIL_EINVAL, resil_breaker_new(&cfg, &br, &err));
    assert_string_equal(err.field, "ramp_aggression");
  }
  cfg.ramp_aggression = 0.25;
  assert_status(RESIL_OK, resil_breaker_new(&cfg, &br, &err));
  resil_breaker_free(br);
  assert_true(resil_breaker_ramp_share(NULL) == 0.0);
  resil_reason why = RESIL_REASON_OK;
  resil_breaker_permit p;
  assert_int_equal(resil_breaker_try_acquire_why(NULL, &p, &why), RESIL_DECISION_DENY);
  assert_int_equal(why, RESIL_REASON_BREAKER_OPEN);
}

static void names_of_the_ramp(void **state) {
  (void)state;
  assert_string_equal(resil_reason_name(RESIL_REASON_RECOVERING), "RECOVERING");
  assert_string_equal(resil_reason_text(RESIL_REASON_RECOVERING), "recovering");
  assert_string_equal(resil_stop_name(RESIL_STOP_RECOVERING), "RECOVERING");
  assert_string_equal(resil_breaker_event_kind_name(RESIL_BREAKER_EVENT_RAMP_STARTED),
                      "RAMP_STARTED");
  assert_string_equal(resil_breaker_event_kind_name(RESIL_BREAKER_EVENT_RAMP_ENDED),
                      "RAMP_ENDED");
  assert_string_equal(resil_breaker_cause_name(RESIL_BREAKER_CAUSE_RAMP_COMPLETED),
                      "RAMP_COMPLETED");
  resil_outcome o = resil_outcome_make(RESIL_REJECTED, RESIL_REASON_RECOVERING);
  assert_int_equal(resil_outcome_classify(&o), RESIL_CLASS_REJECTED);
}

/* A ramp costs memory only when configured. */
static void ramp_area_only_when_configured(void **state) {
  (void)state;
  resil_breaker_config cfg;
  resil_breaker_config_init(&cfg);
  resil_breaker *a = breaker_new(&cfg);
  cfg.ramp_duration_ns = MS(10);
  resil_breaker *b = breaker_new(&cfg);
  assert_true(resil_breaker_memory_bytes(b) > resil_breaker_memory_bytes(a));
  assert_true(resil_breaker_memory_bytes(a) < 512);
  char why[200];
  assert_int_equal(resil__breaker_check(b, why, sizeof why), 0);
  resil_breaker_free(a);
  resil_breaker_free(b);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(ramp_off_by_default_gives_full_traffic_at_once),
      cmocka_unit_test(linear_ramp_admits_the_curve_and_ends_on_time),
      cmocka_unit_test(aggression_shapes_the_curve_as_envoy_slow_start),
      cmocka_unit_test(ramp_records_count_as_closed),
      cmocka_unit_test(run_form_and_chain_refuse_with_recovering),
      cmocka_unit_test(failure_during_ramp_reopens_with_next_wait_and_ramps_again),
      cmocka_unit_test(permits_of_the_ramp_count_after_it_ends),
      cmocka_unit_test(manual_close_and_reset_end_the_ramp),
      cmocka_unit_test(ramp_config_is_validated),
      cmocka_unit_test(names_of_the_ramp),
      cmocka_unit_test(ramp_area_only_when_configured),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
