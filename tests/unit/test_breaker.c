/* Circuit breaker (DESIGN §2.2, §7 P6-P8). Time comes from the manual
 * clock; nothing sleeps. */
#include <math.h>
#include <pthread.h>
#include <string.h>

#include "breaker/breaker_int.h"
#include "core/internal.h"
#include "test_breaker_common.h"

/* ---- helpers ------------------------------------------------------------ */

/* Acquire (must be permitted) and record. */
static void record_ok(resil_breaker *br, resil_outcome o, int64_t dur) {
  resil_breaker_permit p;
  assert_int_equal(resil_breaker_try_acquire(br, &p), 1);
  assert_status(RESIL_OK, resil_breaker_record(br, &p, &o, dur));
}

static resil_outcome fail_o(void) { return resil_outcome_http(503); }
static resil_outcome ok_o(void) { return resil_outcome_ok(); }

/* A business call for the run form: counts its runs, takes `take_ns` of
 * manual-clock time and returns `out`. */
typedef struct call_arg {
  resil_manual_clock *mc;
  int64_t take_ns;
  resil_outcome out;
  int runs;
  const resil_ctx *seen_ctx;
  int64_t seen_deadline;
  const resil_clock *seen_clock;
  resil_ctx seen_copy; /* *ctx as the call saw it */
} call_arg;

static resil_outcome business_call(void *arg, const resil_ctx *ctx) {
  call_arg *a = arg;
  a->runs++;
  a->seen_ctx = ctx;
  a->seen_deadline = ctx ? ctx->deadline_ns : -1;
  a->seen_clock = ctx ? ctx->clock : NULL;
  if (ctx)
    a->seen_copy = *ctx;
  if (a->take_ns > 0)
    resil_manual_clock_advance_ns(a->mc, a->take_ns);
  return a->out;
}

static resil_outcome run_call(resil_breaker *br, call_arg *a, resil_outcome o,
                              int64_t take_ns) {
  a->out = o;
  a->take_ns = take_ns;
  return resil_breaker_run(br, NULL, business_call, a);
}

static int is_rejected_open(resil_outcome o) {
  return o.kind == RESIL_REJECTED && o.reason == RESIL_REASON_BREAKER_OPEN;
}

/* ---- defaults and validation -------------------------------------------- */

static void config_init_writes_resilience4j_defaults(void **state) {
  (void)state;
  resil_breaker_config cfg;
  memset(&cfg, 0xab, sizeof cfg);
  resil_breaker_config_init(&cfg);
  assert_int_equal(cfg.struct_size, sizeof cfg);
  assert_null(cfg.name);
  assert_int_equal(cfg.window_type, RESIL_BREAKER_WINDOW_COUNT);
  assert_int_equal(cfg.window_size, 100);
  assert_int_equal(cfg.minimum_calls, 100);
  assert_int_equal(cfg.failure_rate_threshold_pct, 50);
  assert_int_equal(cfg.slow_call_rate_threshold_pct, 100);
  assert_int_equal(cfg.slow_call_duration_ns, 60 * RESIL_NS_PER_S);
  assert_int_equal(cfg.open_wait_ns, 60 * RESIL_NS_PER_S);
  assert_true(cfg.open_wait_multiplier == 1.0);
  assert_int_equal(cfg.open_wait_max_ns, 0);
  assert_int_equal(cfg.half_open_permitted_calls, 10);
  assert_int_equal(cfg.half_open_max_wait_ns, 60 * RESIL_NS_PER_S);
  assert_int_equal(cfg.automatic_half_open, 0);
  assert_int_equal(cfg.failure_classes,
                   RESIL_CLASS_BIT(RESIL_CLASS_NOT_SENT) |
                       RESIL_CLASS_BIT(RESIL_CLASS_UNKNOWN) |
                       RESIL_CLASS_BIT(RESIL_CLASS_SERVER_ERROR) |
                       RESIL_CLASSES_THROTTLED);
  assert_int_equal(cfg.event_capacity, 8);
  assert_null(cfg.clock);
  assert_null(cfg.alloc);
  resil_breaker_config_init(NULL); /* no-op */

  resil_breaker *br = breaker_new(&cfg);
  assert_string_equal(resil_breaker_name(br), "breaker");
  assert_int_equal(resil_breaker_state(br), RESIL_BREAKER_CLOSED);
  resil_breaker_metrics m = metrics_of(br);
  assert_int_equal(m.generation, 1);
  assert_int_equal(m.minimum_calls, 100);
  resil_breaker_free(br);
}

typedef struct bad_case {
  const char *field;
  int has_range;
  int64_t min, max, got;
} bad_case;

static void expect_rejected(const resil_breaker_config *cfg, bad_case want) {
  resil_breaker *br = (resil_breaker *)0x1;
  resil_error e;
  resil_status st = resil_breaker_new(cfg, &br, &e);
  if (st != RESIL_EINVAL)
    fail_msg("%s: status %s, expected RESIL_EINVAL", want.field,
             resil_status_name(st));
  assert_ptr_equal(br, (resil_breaker *)0x1); /* *out untouched */
  assert_int_equal(e.status, RESIL_EINVAL);
  assert_string_equal(e.field, want.field);
  assert_int_equal(e.has_range, want.has_range);
  if (want.has_range) {
    assert_int_equal(e.min, want.min);
    assert_int_equal(e.max, want.max);
    assert_int_equal(e.got, want.got);
  }
  assert_true(strncmp(e.msg, want.field, strlen(want.field)) == 0);
}

static int64_t never_now(void *self) {
  (void)self;
  return 0;
}

static void new_rejects_every_invalid_field_with_range_and_value(void **state) {
  (void)state;
  resil_breaker_config cfg;
#define BAD(stmt, ...)                                                         \
  do {                                                                         \
    resil_breaker_config_init(&cfg);                                           \
    stmt;                                                                      \
    expect_rejected(&cfg, (bad_case){__VA_ARGS__});                            \
  } while (0)
  BAD(cfg.window_type = (resil_breaker_window_type)2, "window_type", 1, 0, 1,
      2);
  BAD(cfg.window_size = 0, "window_size", 1, 1, 1000000, 0);
  BAD(cfg.window_size = 1000001, "window_size", 1, 1, 1000000, 1000001);
  BAD((cfg.window_type = RESIL_BREAKER_WINDOW_TIME, cfg.window_size = 86401),
      "window_size", 1, 1, 86400, 86401);
  BAD(cfg.minimum_calls = 0, "minimum_calls", 1, 1, 100, 0);
  BAD(cfg.minimum_calls = 101, "minimum_calls", 1, 1, 100, 101);
  BAD((cfg.window_type = RESIL_BREAKER_WINDOW_TIME, cfg.minimum_calls = 0),
      "minimum_calls", 1, 1, UINT32_MAX, 0);
  BAD(cfg.failure_rate_threshold_pct = 0, "failure_rate_threshold_pct", 1, 1,
      100, 0);
  BAD(cfg.failure_rate_threshold_pct = 101, "failure_rate_threshold_pct", 1, 1,
      100, 101);
  BAD(cfg.slow_call_rate_threshold_pct = 0, "slow_call_rate_threshold_pct", 1,
      1, 100, 0);
  BAD(cfg.slow_call_rate_threshold_pct = 101, "slow_call_rate_threshold_pct", 1,
      1, 100, 101);
  BAD(cfg.slow_call_duration_ns = 0, "slow_call_duration_ns", 1, 1, INT64_MAX,
      0);
  BAD(cfg.open_wait_ns = MS(1) - 1, "open_wait_ns", 1, MS(1), INT64_MAX,
      MS(1) - 1);
  BAD(cfg.open_wait_multiplier = 0.5, "open_wait_multiplier", 1, 1, 100, 0);
  BAD(cfg.open_wait_multiplier = 100.5, "open_wait_multiplier", 1, 1, 100, 100);
  BAD(cfg.open_wait_multiplier = NAN, "open_wait_multiplier", 1, 1, 100, 0);
  BAD((cfg.open_wait_ns = MS(150), cfg.open_wait_max_ns = MS(100)),
      "open_wait_max_ns", 1, MS(150), INT64_MAX, MS(100));
  BAD(cfg.open_wait_max_ns = -1, "open_wait_max_ns", 1, 60 * RESIL_NS_PER_S,
      INT64_MAX, -1);
  BAD(cfg.half_open_permitted_calls = 0, "half_open_permitted_calls", 1, 1,
      1000000, 0);
  BAD(cfg.half_open_max_wait_ns = -1, "half_open_max_wait_ns", 1, 0, INT64_MAX,
      -1);
  BAD(cfg.automatic_half_open = 2, "automatic_half_open", 1, 0, 1, 2);
  BAD(cfg.failure_classes = RESIL_CLASS_BIT(RESIL_CLASS_REJECTED),
      "failure_classes", 1, 0, 0x3bf, 0x40);
  BAD(cfg.failure_classes = 0x400, "failure_classes", 1, 0, 0x3bf, 0x400);
  BAD(cfg.event_capacity = 1025, "event_capacity", 1, 0, 1024, 1025);
  BAD(cfg.ignored_classes = RESIL_CLASS_BIT(RESIL_CLASS_REJECTED),
      "ignored_classes", 1, 0, 0x3bf, 0x40);
  BAD(cfg.ignored_classes = RESIL_CLASS_BIT(RESIL_CLASS_UNKNOWN),
      "ignored_classes", 0, 0, 0, 0); /* also a failure class */
  BAD(cfg.initial_state = (resil_breaker_state_kind)6, "initial_state", 1, 0,
      5, 6);
  BAD(cfg.half_open_max_wait_to_closed = 2, "half_open_max_wait_to_closed", 1,
      0, 1, 2);
  char long_name[300];
  memset(long_name, 'n', sizeof long_name - 1);
  long_name[256] = '\0';
  BAD(cfg.name = long_name, "name", 1, 0, 255, 256);
  resil_clock bad_clock;
  memset(&bad_clock, 0, sizeof bad_clock);
  BAD(cfg.clock = &bad_clock, "clock", 0, 0, 0, 0);
  resil_allocator bad_alloc = {NULL, NULL, NULL};
  BAD(cfg.alloc = &bad_alloc, "alloc", 0, 0, 0, 0);
#undef BAD

  /* The message names the bound that depends on another field. */
  resil_breaker_config_init(&cfg);
  cfg.window_size = 20;
  resil_breaker *br = NULL;
  resil_error e;
  assert_status(RESIL_EINVAL, resil_breaker_new(&cfg, &br, &e));
  assert_string_equal(e.msg,
                      "minimum_calls: must be 1..window_size (20), got 100");
  /* NULL arguments, and a NULL err is accepted. */
  assert_status(RESIL_EINVAL, resil_breaker_new(NULL, &br, &e));
  assert_string_equal(e.field, "cfg");
  assert_status(RESIL_EINVAL, resil_breaker_new(&cfg, NULL, &e));
  assert_string_equal(e.field, "out");
  assert_status(RESIL_EINVAL, resil_breaker_new(&cfg, &br, NULL));
  assert_null(br);

  /* Edges that are valid. */
  resil_breaker_config_init(&cfg);
  cfg.window_type = RESIL_BREAKER_WINDOW_TIME;
  cfg.window_size = 1;
  cfg.minimum_calls = 500; /* a time window's minimum may exceed its seconds */
  cfg.open_wait_ns = MS(1);
  cfg.open_wait_multiplier = 100.0;
  cfg.open_wait_max_ns = MS(1);
  cfg.half_open_max_wait_ns = 0;
  cfg.event_capacity = 0;
  cfg.failure_classes = 0x3f;
  resil_clock ok_clock;
  memset(&ok_clock, 0, sizeof ok_clock);
  ok_clock.now_ns = never_now;
  cfg.clock = &ok_clock;
  br = breaker_new(&cfg);
  resil_breaker_free(br);
}

/* ---- DESIGN §7 P6, P7, P8 ----------------------------------------------- */

static void p6_count_window_opens_probes_reopens_and_closes(void **state) {
  (void)state;
  resil_manual_clock *mc = clock_new();
  resil_breaker_config cfg;
  p6_config(&cfg, mc);
  resil_breaker *br = breaker_new(&cfg);
  call_arg a = {.mc = mc};

  /* fail -> still CLOSED: fewer than minimum calls. */
  resil_outcome o = run_call(br, &a, fail_o(), 0);
  assert_int_equal(o.http_status, 503);
  assert_int_equal(resil_breaker_state(br), RESIL_BREAKER_CLOSED);
  /* fail -> OPEN with 2 failures, rate 100. */
  run_call(br, &a, fail_o(), 0);
  assert_int_equal(resil_breaker_state(br), RESIL_BREAKER_OPEN);
  resil_breaker_metrics m = metrics_of(br);
  assert_int_equal(m.failed_calls, 2);
  assert_int_equal(m.rates, RESIL_BREAKER_RATES_AVAILABLE);
  assert_true(m.failure_rate_pct == 100.0);
  /* Next call rejected, business code not run. */
  int runs = a.runs;
  o = run_call(br, &a, ok_o(), 0);
  assert_true(is_rejected_open(o));
  assert_int_equal(a.runs, runs);
  m = metrics_of(br);
  assert_int_equal(m.total_not_permitted, 1);
  /* After 200 ms the probe fails -> OPEN again. */
  resil_manual_clock_advance_ns(mc, MS(200));
  o = run_call(br, &a, fail_o(), 0);
  assert_int_equal(o.http_status, 503);
  assert_int_equal(a.runs, runs + 1);
  assert_int_equal(resil_breaker_state(br), RESIL_BREAKER_OPEN);
  /* After 200 ms more the probe succeeds -> CLOSED. */
  resil_manual_clock_advance_ns(mc, MS(200));
  o = run_call(br, &a, ok_o(), 0);
  assert_true(resil_outcome_is_success(&o));
  assert_int_equal(resil_breaker_state(br), RESIL_BREAKER_CLOSED);
  m = metrics_of(br);
  assert_int_equal(m.total_calls, 4);
  assert_int_equal(m.total_failures, 3);
  assert_int_equal(m.total_successes, 1);
  assert_int_equal(m.total_not_permitted, 1);
  /* CLOSED->OPEN, OPEN->HALF_OPEN, HALF_OPEN->OPEN, OPEN->HALF_OPEN,
   * HALF_OPEN->CLOSED. */
  assert_int_equal(m.total_transitions, 5);
  assert_int_equal(m.buffered_calls, 0); /* CLOSED restarted its window */
  resil_breaker_free(br);
  resil_manual_clock_free(mc);
}

static void p7_half_open_admits_exactly_the_permitted_probe(void **state) {
  (void)state;
  resil_manual_clock *mc = clock_new();
  resil_breaker_config cfg;
  p6_config(&cfg, mc);
  resil_breaker *br = breaker_new(&cfg);
  record_ok(br, fail_o(), 0);
  record_ok(br, fail_o(), 0);
  assert_int_equal(resil_breaker_state(br), RESIL_BREAKER_OPEN);
  resil_manual_clock_advance_ns(mc, MS(150));

  resil_breaker_permit p1, p2;
  assert_int_equal(resil_breaker_try_acquire(br, &p1), 1);
  assert_int_equal(p1.state, RESIL_BREAKER_HALF_OPEN);
  assert_int_equal(resil_breaker_try_acquire(br, &p2), 0);
  resil_outcome ok = ok_o();
  assert_status(RESIL_OK, resil_breaker_record(br, &p1, &ok, MS(1)));
  assert_int_equal(resil_breaker_state(br), RESIL_BREAKER_CLOSED);

  /* Another cycle: a failed probe reopens. */
  record_ok(br, fail_o(), 0);
  record_ok(br, fail_o(), 0);
  assert_int_equal(resil_breaker_state(br), RESIL_BREAKER_OPEN);
  resil_manual_clock_advance_ns(mc, MS(150));
  assert_int_equal(resil_breaker_try_acquire(br, &p1), 1);
  assert_int_equal(resil_breaker_try_acquire(br, &p2), 0);
  resil_outcome f = fail_o();
  assert_status(RESIL_OK, resil_breaker_record(br, &p1, &f, MS(1)));
  assert_int_equal(resil_breaker_state(br), RESIL_BREAKER_OPEN);
  resil_breaker_metrics m = metrics_of(br);
  assert_int_equal(m.total_not_permitted, 2);
  assert_int_equal(m.consecutive_opens, 2);
  resil_breaker_free(br);
  resil_manual_clock_free(mc);
}

static void
p8_time_window_opens_on_slow_calls_with_failure_rate_zero(void **state) {
  (void)state;
  resil_manual_clock *mc = clock_new();
  resil_breaker_config cfg;
  resil_breaker_config_init(&cfg);
  cfg.window_type = RESIL_BREAKER_WINDOW_TIME;
  cfg.window_size = 1;
  cfg.minimum_calls = 2;
  cfg.slow_call_duration_ns = MS(40);
  cfg.slow_call_rate_threshold_pct = 50;
  cfg.clock = resil_manual_clock_get(mc);
  resil_breaker *br = breaker_new(&cfg);
  call_arg a = {.mc = mc};

  run_call(br, &a, fail_o(), 0);
  assert_int_equal(resil_breaker_state(br), RESIL_BREAKER_CLOSED);
  resil_manual_clock_advance_ns(mc, MS(2000));
  run_call(br, &a, ok_o(), 0); /* fast success */
  resil_breaker_metrics m = metrics_of(br);
  assert_int_equal(m.failed_calls, 0); /* the old second fell out */
  assert_int_equal(m.buffered_calls, 1);
  assert_int_equal(resil_breaker_state(br), RESIL_BREAKER_CLOSED);
  run_call(br, &a, ok_o(), MS(80)); /* slow success */
  assert_int_equal(resil_breaker_state(br), RESIL_BREAKER_OPEN);
  m = metrics_of(br);
  assert_int_equal(m.rates, RESIL_BREAKER_RATES_AVAILABLE);
  assert_true(m.slow_call_rate_pct == 50.0);
  assert_true(m.failure_rate_pct == 0.0);
  assert_int_equal(m.slow_calls, 1);
  assert_int_equal(m.total_slow, 1);
  resil_breaker_event ev[8];
  size_t n = resil_breaker_events(br, ev, 8);
  assert_int_equal(n, 1);
  assert_int_equal(ev[0].cause, RESIL_BREAKER_CAUSE_SLOW_CALL_RATE);
  resil_breaker_free(br);
  resil_manual_clock_free(mc);
}

/* ---- HALF_OPEN ---------------------------------------------------------- */

static void half_open_decides_after_min_of_minimum_and_permitted(void **state) {
  (void)state;
  resil_manual_clock *mc = clock_new();
  resil_breaker_config cfg;
  p6_config(&cfg, mc);
  cfg.half_open_permitted_calls = 4; /* min(2, 4) = 2 results decide */
  resil_breaker *br = breaker_new(&cfg);
  record_ok(br, fail_o(), 0);
  record_ok(br, fail_o(), 0);
  resil_manual_clock_advance_ns(mc, MS(150));
  record_ok(br, ok_o(), 0);
  assert_int_equal(resil_breaker_state(br), RESIL_BREAKER_HALF_OPEN);
  resil_breaker_metrics m = metrics_of(br);
  assert_int_equal(m.minimum_calls, 2);
  assert_int_equal(m.half_open_permits_available, 3);
  record_ok(br, ok_o(), 0);
  assert_int_equal(resil_breaker_state(br), RESIL_BREAKER_CLOSED);

  /* 1 failure of 2 probes reaches 50 %: back to OPEN. */
  record_ok(br, fail_o(), 0);
  record_ok(br, fail_o(), 0);
  resil_manual_clock_advance_ns(mc, MS(150));
  record_ok(br, ok_o(), 0);
  record_ok(br, fail_o(), 0);
  assert_int_equal(resil_breaker_state(br), RESIL_BREAKER_OPEN);
  resil_breaker_free(br);

  /* Minimum 100 but only 2 permitted: 2 results decide. */
  resil_breaker_config_init(&cfg);
  cfg.half_open_permitted_calls = 2;
  cfg.clock = resil_manual_clock_get(mc);
  br = breaker_new(&cfg);
  assert_status(RESIL_OK, resil_breaker_transition(br, RESIL_BREAKER_OPEN));
  assert_status(RESIL_OK,
                resil_breaker_transition(br, RESIL_BREAKER_HALF_OPEN));
  record_ok(br, ok_o(), 0);
  assert_int_equal(resil_breaker_state(br), RESIL_BREAKER_HALF_OPEN);
  record_ok(br, ok_o(), 0);
  assert_int_equal(resil_breaker_state(br), RESIL_BREAKER_CLOSED);
  resil_breaker_free(br);
  resil_manual_clock_free(mc);
}

static void result_of_an_older_generation_changes_nothing(void **state) {
  (void)state;
  resil_manual_clock *mc = clock_new();
  resil_breaker_config cfg;
  p6_config(&cfg, mc);
  resil_breaker *br = breaker_new(&cfg);
  /* A slow call starts while CLOSED... */
  resil_breaker_permit old;
  assert_int_equal(resil_breaker_try_acquire(br, &old), 1);
  assert_int_equal(old.generation, 1);
  record_ok(br, fail_o(), 0);
  record_ok(br, fail_o(), 0);
  resil_manual_clock_advance_ns(mc, MS(150));
  resil_breaker_permit probe;
  assert_int_equal(resil_breaker_try_acquire(br, &probe), 1);
  assert_int_equal(probe.generation, 3);
  /* ...and ends during HALF_OPEN: its success must not close it, and it
   * changes nothing at all, not even total_ignored (DESIGN §2.2). */
  resil_breaker_metrics before = metrics_of(br);
  resil_outcome ok = ok_o();
  assert_status(RESIL_OK, resil_breaker_record(br, &old, &ok, 0));
  resil_outcome rej = resil_outcome_make(RESIL_REJECTED, RESIL_REASON_BULKHEAD_FULL);
  assert_status(RESIL_OK, resil_breaker_record(br, &old, &rej, 0));
  assert_int_equal(resil_breaker_state(br), RESIL_BREAKER_HALF_OPEN);
  resil_breaker_metrics m = metrics_of(br);
  assert_memory_equal(&m, &before, sizeof m);
  assert_int_equal(m.total_ignored, 0);
  assert_int_equal(m.buffered_calls, 0);
  assert_int_equal(m.total_calls, 2);
  assert_int_equal(m.generation, 3);
  assert_int_equal(m.half_open_permits_available, 0);
  /* A release of the stale permit does not free a probe either. */
  assert_status(RESIL_OK, resil_breaker_release(br, &old));
  m = metrics_of(br);
  assert_memory_equal(&m, &before, sizeof m);
  resil_breaker_permit again;
  assert_int_equal(resil_breaker_try_acquire(br, &again), 0);
  /* The current probe decides. */
  assert_status(RESIL_OK, resil_breaker_record(br, &probe, &ok, 0));
  assert_int_equal(resil_breaker_state(br), RESIL_BREAKER_CLOSED);
  resil_breaker_free(br);
  resil_manual_clock_free(mc);
}

static void half_open_max_wait_returns_to_open_at_its_instant(void **state) {
  (void)state;
  resil_manual_clock *mc = clock_new();
  resil_breaker_config cfg;
  p6_config(&cfg, mc);
  cfg.half_open_max_wait_ns = MS(1000);
  resil_breaker *br = breaker_new(&cfg);
  record_ok(br, fail_o(), 0);
  record_ok(br, fail_o(), 0);
  resil_manual_clock_advance_ns(mc, MS(150));
  int64_t t_half = resil_manual_clock_now_ns(mc);
  resil_breaker_permit probe; /* its result never comes in time */
  assert_int_equal(resil_breaker_try_acquire(br, &probe), 1);
  resil_manual_clock_advance_ns(mc, MS(1000) - 1);
  assert_int_equal(resil_breaker_state(br), RESIL_BREAKER_HALF_OPEN);
  resil_manual_clock_advance_ns(mc, MS(100) + 1); /* 100 ms overdue */
  assert_int_equal(resil_breaker_state(br), RESIL_BREAKER_OPEN);
  resil_breaker_metrics m = metrics_of(br);
  assert_int_equal(m.state_since_ns, t_half + MS(1000)); /* scheduled */
  assert_int_equal(m.consecutive_opens, 2);
  resil_breaker_event ev[8];
  size_t n = resil_breaker_events(br, ev, 8);
  assert_int_equal(ev[n - 1].kind, RESIL_BREAKER_EVENT_TRANSITION);
  assert_int_equal(ev[n - 1].from, RESIL_BREAKER_HALF_OPEN);
  assert_int_equal(ev[n - 1].to, RESIL_BREAKER_OPEN);
  assert_int_equal(ev[n - 1].cause, RESIL_BREAKER_CAUSE_HALF_OPEN_MAX_WAIT);
  assert_int_equal(ev[n - 1].time_ns, t_half + MS(1000));
  /* The late result is from an older generation. */
  resil_outcome ok = ok_o();
  assert_status(RESIL_OK, resil_breaker_record(br, &probe, &ok, 0));
  assert_int_equal(resil_breaker_state(br), RESIL_BREAKER_OPEN);
  assert_int_equal(metrics_of(br).total_ignored, 0); /* counts nowhere */
  assert_int_equal(metrics_of(br).total_calls, 2);
  /* The next OPEN wait counts from the scheduled instant: 150 ms after
   * t_half + 1000 ms, of which 100 ms are gone. */
  resil_manual_clock_advance_ns(mc, MS(50) - 1);
  resil_breaker_permit p;
  assert_int_equal(resil_breaker_try_acquire(br, &p), 0);
  resil_manual_clock_advance_ns(mc, 1);
  assert_int_equal(resil_breaker_try_acquire(br, &p), 1);
  resil_breaker_free(br);
  resil_manual_clock_free(mc);
}

static void half_open_max_wait_is_applied_on_record_and_acquire(void **state) {
  (void)state;
  resil_manual_clock *mc = clock_new();
  resil_breaker_config cfg;
  p6_config(&cfg, mc);
  cfg.half_open_max_wait_ns = MS(1000);
  cfg.open_wait_ns = MS(5000);
  resil_breaker *br = breaker_new(&cfg);
  record_ok(br, fail_o(), 0);
  record_ok(br, fail_o(), 0);
  resil_manual_clock_advance_ns(mc, MS(5000));
  resil_breaker_permit probe, p;
  assert_int_equal(resil_breaker_try_acquire(br, &probe), 1);
  resil_manual_clock_advance_ns(mc, MS(1000));
  /* No state query in between: the record itself finds HALF_OPEN over. */
  resil_outcome ok = ok_o();
  assert_status(RESIL_OK, resil_breaker_record(br, &probe, &ok, 0));
  assert_int_equal(resil_breaker_state(br), RESIL_BREAKER_OPEN);
  /* And an acquire in an overdue HALF_OPEN is refused by the OPEN it is. */
  resil_manual_clock_advance_ns(mc, MS(5000));
  assert_int_equal(resil_breaker_try_acquire(br, &probe), 1);
  resil_manual_clock_advance_ns(mc, MS(1000));
  assert_int_equal(resil_breaker_try_acquire(br, &p), 0);
  resil_breaker_metrics m = metrics_of(br);
  assert_int_equal(m.state, RESIL_BREAKER_OPEN);
  assert_int_equal(m.total_not_permitted, 1);
  resil_breaker_free(br);
  resil_manual_clock_free(mc);
}

static void half_open_max_wait_zero_means_no_limit(void **state) {
  (void)state;
  resil_manual_clock *mc = clock_new();
  resil_breaker_config cfg;
  p6_config(&cfg, mc);
  cfg.half_open_max_wait_ns = 0;
  resil_breaker *br = breaker_new(&cfg);
  assert_status(RESIL_OK, resil_breaker_transition(br, RESIL_BREAKER_OPEN));
  assert_status(RESIL_OK,
                resil_breaker_transition(br, RESIL_BREAKER_HALF_OPEN));
  resil_manual_clock_advance_ns(mc, 1000 * 3600 * RESIL_NS_PER_S);
  assert_int_equal(resil_breaker_state(br), RESIL_BREAKER_HALF_OPEN);
  record_ok(br, ok_o(), 0);
  assert_int_equal(resil_breaker_state(br), RESIL_BREAKER_CLOSED);
  resil_breaker_free(br);
  resil_manual_clock_free(mc);
}

/* ---- OPEN -> HALF_OPEN -------------------------------------------------- */

static void open_wait_ends_when_fully_elapsed(void **state) {
  (void)state;
  resil_manual_clock *mc = clock_new();
  resil_breaker_config cfg;
  p6_config(&cfg, mc);
  resil_breaker *br = breaker_new(&cfg);
  record_ok(br, fail_o(), 0);
  record_ok(br, fail_o(), 0);
  resil_breaker_permit p;
  resil_manual_clock_advance_ns(mc, MS(150) - 1);
  assert_int_equal(resil_breaker_try_acquire(br, &p), 0);
  resil_manual_clock_advance_ns(mc, 1); /* elapsed == wait */
  assert_int_equal(resil_breaker_try_acquire(br, &p), 1);
  resil_breaker_free(br);
  resil_manual_clock_free(mc);
}

static void without_automatic_timer_open_waits_for_an_acquire(void **state) {
  (void)state;
  resil_manual_clock *mc = clock_new();
  resil_breaker_config cfg;
  p6_config(&cfg, mc);
  resil_breaker *br = breaker_new(&cfg);
  record_ok(br, fail_o(), 0);
  record_ok(br, fail_o(), 0);
  resil_manual_clock_advance_ns(mc, MS(10000));
  /* Long past the wait, a state query does not move it. */
  assert_int_equal(resil_breaker_state(br), RESIL_BREAKER_OPEN);
  assert_int_equal(metrics_of(br).state, RESIL_BREAKER_OPEN);
  resil_breaker_permit p;
  assert_int_equal(resil_breaker_try_acquire(br, &p), 1);
  resil_breaker_metrics m = metrics_of(br);
  assert_int_equal(m.state, RESIL_BREAKER_HALF_OPEN);
  assert_int_equal(m.state_since_ns, MS(10000)); /* the acquire's moment */
  resil_breaker_free(br);
  resil_manual_clock_free(mc);
}

static void
automatic_transition_takes_effect_at_its_scheduled_instant(void **state) {
  (void)state;
  resil_manual_clock *mc = clock_new();
  resil_breaker_config cfg;
  p6_config(&cfg, mc);
  cfg.automatic_half_open = 1;
  cfg.half_open_max_wait_ns = MS(1000);
  resil_breaker *br = breaker_new(&cfg);
  resil_manual_clock_advance_ns(mc, MS(7));
  record_ok(br, fail_o(), 0);
  record_ok(br, fail_o(), 0);
  int64_t t_open = MS(7);
  resil_manual_clock_advance_ns(mc, MS(150) - 1);
  assert_int_equal(resil_breaker_state(br), RESIL_BREAKER_OPEN);
  /* Query 500 ms after the wait ended: HALF_OPEN since the wait's end. */
  resil_manual_clock_advance_ns(mc, MS(500) + 1);
  assert_int_equal(resil_breaker_state(br), RESIL_BREAKER_HALF_OPEN);
  resil_breaker_metrics m = metrics_of(br);
  assert_int_equal(m.state_since_ns, t_open + MS(150));
  resil_breaker_event ev[8];
  size_t n = resil_breaker_events(br, ev, 8);
  assert_int_equal(ev[n - 1].to, RESIL_BREAKER_HALF_OPEN);
  assert_int_equal(ev[n - 1].cause, RESIL_BREAKER_CAUSE_OPEN_WAIT_ELAPSED);
  assert_int_equal(ev[n - 1].time_ns, t_open + MS(150));
  /* The HALF_OPEN maximum wait counts from that instant, not the query:
   * OPEN again at t_open + 1150 ms, HALF_OPEN again at + 1300 ms. */
  resil_manual_clock_advance_ns(mc, MS(1150) - MS(650) - 1);
  assert_int_equal(resil_breaker_state(br), RESIL_BREAKER_HALF_OPEN);
  resil_manual_clock_advance_ns(mc, 1 + MS(50));
  m = metrics_of(br);
  assert_int_equal(m.state, RESIL_BREAKER_OPEN);
  assert_int_equal(m.state_since_ns, t_open + MS(1150));
  resil_manual_clock_advance_ns(mc, MS(100));
  m = metrics_of(br);
  assert_int_equal(m.state, RESIL_BREAKER_HALF_OPEN);
  assert_int_equal(m.state_since_ns, t_open + MS(1300));
  assert_int_equal(m.total_transitions, 4);
  resil_breaker_free(br);
  resil_manual_clock_free(mc);
}

/* Records every event a listener gets, checking seq order. */
typedef struct ev_log {
  size_t n, transitions;
  uint64_t last_seq;
  int in_order;
  int64_t last_time;
  int times_ordered;
  resil_breaker_event last;
  /* Idle cycle check: OPEN->HALF_OPEN at since + wait, HALF_OPEN->OPEN at
   * since + half, alternating (0 = not checked). */
  int64_t cycle_wait, cycle_half, cycle_at;
  int cycle_ok;
} ev_log;

static void logging_listener(void *user, resil_breaker *br,
                             const resil_breaker_event *ev) {
  (void)br;
  ev_log *l = user;
  if (ev->seq != l->last_seq + 1)
    l->in_order = 0;
  if (ev->struct_size != sizeof *ev)
    l->in_order = 0;
  l->last_seq = ev->seq;
  l->n++;
  if (ev->kind == RESIL_BREAKER_EVENT_TRANSITION) {
    /* Transitions come in the order of their instants. */
    if (ev->time_ns < l->last_time)
      l->times_ordered = 0;
    l->last_time = ev->time_ns;
    l->transitions++;
    if (l->cycle_wait) {
      int64_t step =
          ev->to == RESIL_BREAKER_HALF_OPEN ? l->cycle_wait : l->cycle_half;
      if (ev->time_ns != l->cycle_at + step)
        l->cycle_ok = 0;
      l->cycle_at = ev->time_ns;
    }
  }
  l->last = *ev;
}

static void ev_log_init(ev_log *l) {
  memset(l, 0, sizeof *l);
  l->in_order = 1;
  l->times_ordered = 1;
  l->cycle_ok = 1;
  l->last_time = INT64_MIN;
}

static void idle_automatic_cycles_are_all_delivered_at_their_instants(
    void **state) {
  (void)state;
  resil_manual_clock *mc = clock_new();
  resil_breaker_config cfg;
  p6_config(&cfg, mc);
  cfg.automatic_half_open = 1;
  cfg.open_wait_ns = RESIL_NS_PER_S;
  cfg.half_open_max_wait_ns = 500 * RESIL_NS_PER_S / 1000;
  resil_breaker *br = breaker_new(&cfg);
  ev_log l;
  ev_log_init(&l);
  assert_status(RESIL_OK, resil_breaker_listener_add(br, logging_listener, &l));
  assert_status(RESIL_OK, resil_breaker_transition(br, RESIL_BREAKER_OPEN));
  l.cycle_wait = cfg.open_wait_ns;
  l.cycle_half = cfg.half_open_max_wait_ns;
  l.cycle_at = 0;
  /* Two idle hours of 1.5 s cycles (4800 of them, 9601 transitions):
   * more than one call may apply, so the calls that follow go on, and
   * every transition reaches the listener with its scheduled instant. */
  resil_manual_clock_advance_ns(mc, 7200 * RESIL_NS_PER_S + MS(1200));
  int calls = 0;
  resil_breaker_metrics m;
  do {
    m = metrics_of(br);
    calls++;
    assert_true(m.total_transitions - 1 <=
                (uint64_t)calls * RESIL_BREAKER_MAX_CATCHUP);
  } while (m.state_since_ns < 7201 * RESIL_NS_PER_S && calls < 10);
  assert_int_equal(calls, (9601 + RESIL_BREAKER_MAX_CATCHUP - 1) /
                              RESIL_BREAKER_MAX_CATCHUP);
  assert_int_equal(m.state, RESIL_BREAKER_HALF_OPEN);
  assert_int_equal(m.state_since_ns, 7201 * RESIL_NS_PER_S);
  assert_int_equal(m.total_transitions, 1 + 9601);
  assert_int_equal(m.consecutive_opens, 1 + 4800);
  assert_int_equal(l.transitions, m.total_transitions);
  assert_int_equal(l.n, m.total_transitions);
  assert_true(l.in_order && l.times_ordered && l.cycle_ok);
  /* Caught up: the next query applies nothing. */
  assert_int_equal(metrics_of(br).total_transitions, m.total_transitions);
  resil_breaker_free(br);

  /* Ten years of idle 2 ms cycles (1.6e11 of them): one call applies at
   * most RESIL_BREAKER_MAX_CATCHUP of them, quickly, and delivers each. */
  cfg.open_wait_ns = MS(1);
  cfg.half_open_max_wait_ns = MS(1);
  resil_manual_clock_free(mc);
  mc = clock_new();
  cfg.clock = resil_manual_clock_get(mc);
  br = breaker_new(&cfg);
  ev_log_init(&l);
  assert_status(RESIL_OK, resil_breaker_listener_add(br, logging_listener, &l));
  assert_status(RESIL_OK, resil_breaker_transition(br, RESIL_BREAKER_OPEN));
  resil_manual_clock_advance_ns(mc, INT64_C(157680000000) * MS(2));
  int64_t t0 = resil_clock_now_ns(NULL);
  assert_int_equal(resil_breaker_state(br), RESIL_BREAKER_OPEN);
  assert_true(resil_clock_now_ns(NULL) - t0 < 2 * RESIL_NS_PER_S);
  m = metrics_of(br); /* a second call: as many again */
  assert_int_equal(m.total_transitions, 1 + 2 * RESIL_BREAKER_MAX_CATCHUP);
  assert_int_equal(l.transitions, m.total_transitions);
  assert_int_equal(m.state_since_ns, 2 * (int64_t)RESIL_BREAKER_MAX_CATCHUP *
                                         MS(1));
  assert_int_equal(m.consecutive_opens, 1 + RESIL_BREAKER_MAX_CATCHUP);
  /* It lags: an acquire applies its share and is refused in the OPEN it
   * reached, though the clock says that OPEN's wait is long over. */
  resil_breaker_permit p;
  assert_int_equal(resil_breaker_try_acquire(br, &p), RESIL_DECISION_DENY);
  m = metrics_of(br);
  assert_int_equal(m.total_transitions, 1 + 4 * RESIL_BREAKER_MAX_CATCHUP);
  assert_int_equal(m.total_not_permitted, 1);
  assert_int_equal(l.transitions, m.total_transitions);
  /* A manual transition starts from the state reached, at now; the rest
   * of the old schedule is gone. */
  assert_status(RESIL_OK, resil_breaker_transition(br, RESIL_BREAKER_CLOSED));
  m = metrics_of(br);
  assert_int_equal(m.state, RESIL_BREAKER_CLOSED);
  assert_int_equal(m.state_since_ns, resil_manual_clock_now_ns(mc));
  assert_int_equal(l.transitions, m.total_transitions);
  assert_int_equal(l.last.to, RESIL_BREAKER_CLOSED);
  assert_true(l.in_order && l.times_ordered);
  resil_breaker_free(br);
  resil_manual_clock_free(mc);
}

/* Acquire after the current OPEN wait, then fail the probe: reopens. */
static void fail_probe_after_wait(resil_breaker *br, resil_manual_clock *mc,
                                  int64_t wait) {
  resil_breaker_permit p;
  resil_manual_clock_advance_ns(mc, wait - 1);
  assert_int_equal(resil_breaker_try_acquire(br, &p), 0);
  resil_manual_clock_advance_ns(mc, 1);
  assert_int_equal(resil_breaker_try_acquire(br, &p), 1);
  resil_outcome f = fail_o();
  assert_status(RESIL_OK, resil_breaker_record(br, &p, &f, 0));
  assert_int_equal(resil_breaker_state(br), RESIL_BREAKER_OPEN);
}

static void open_wait_grows_per_consecutive_open(void **state) {
  (void)state;
  resil_manual_clock *mc = clock_new();
  resil_breaker_config cfg;
  p6_config(&cfg, mc);
  cfg.open_wait_ns = MS(100);
  cfg.open_wait_multiplier = 2.0;
  cfg.open_wait_max_ns = MS(350);
  resil_breaker *br = breaker_new(&cfg);
  record_ok(br, fail_o(), 0);
  record_ok(br, fail_o(), 0);
  resil_breaker_metrics m = metrics_of(br);
  assert_int_equal(m.consecutive_opens, 1);
  assert_int_equal(m.open_wait_ns, MS(100));
  fail_probe_after_wait(br, mc, MS(100));
  m = metrics_of(br);
  assert_int_equal(m.consecutive_opens, 2);
  assert_int_equal(m.open_wait_ns, MS(200));
  fail_probe_after_wait(br, mc, MS(200));
  assert_int_equal(metrics_of(br).open_wait_ns, MS(350)); /* capped */
  fail_probe_after_wait(br, mc, MS(350));
  assert_int_equal(metrics_of(br).open_wait_ns, MS(350));
  /* A successful probe closes and restarts the count. */
  resil_manual_clock_advance_ns(mc, MS(350));
  record_ok(br, ok_o(), 0);
  m = metrics_of(br);
  assert_int_equal(m.state, RESIL_BREAKER_CLOSED);
  assert_int_equal(m.consecutive_opens, 0);
  record_ok(br, fail_o(), 0);
  record_ok(br, fail_o(), 0);
  m = metrics_of(br);
  assert_int_equal(m.consecutive_opens, 1);
  assert_int_equal(m.open_wait_ns, MS(100));
  resil_breaker_free(br);
  resil_manual_clock_free(mc);
}

static void
growing_wait_truncates_each_step_to_whole_milliseconds(void **state) {
  (void)state;
  /* Resilience4j: 150 -> 225 -> 337 (not 337.5) -> 505 (not 505.5). */
  resil_manual_clock *mc = clock_new();
  resil_breaker_config cfg;
  p6_config(&cfg, mc);
  cfg.open_wait_multiplier = 1.5;
  resil_breaker *br = breaker_new(&cfg);
  record_ok(br, fail_o(), 0);
  record_ok(br, fail_o(), 0);
  int64_t want[] = {MS(150), MS(225), MS(337), MS(505)};
  for (int i = 0; i < 4; i++) {
    assert_int_equal(metrics_of(br).open_wait_ns, want[i]);
    fail_probe_after_wait(br, mc, want[i]);
  }
  resil_breaker_free(br);
  resil_manual_clock_free(mc);
}

static void forced_open_counts_as_a_consecutive_open(void **state) {
  (void)state;
  /* Resilience4j: FORCED_OPEN is attempts + 1, and OPEN after it another. */
  resil_manual_clock *mc = clock_new();
  resil_breaker_config cfg;
  p6_config(&cfg, mc);
  cfg.open_wait_ns = MS(100);
  cfg.open_wait_multiplier = 2.0;
  resil_breaker *br = breaker_new(&cfg);
  assert_status(RESIL_OK,
                resil_breaker_transition(br, RESIL_BREAKER_FORCED_OPEN));
  assert_int_equal(metrics_of(br).consecutive_opens, 1);
  assert_status(RESIL_OK, resil_breaker_transition(br, RESIL_BREAKER_OPEN));
  resil_breaker_metrics m = metrics_of(br);
  assert_int_equal(m.consecutive_opens, 2);
  assert_int_equal(m.open_wait_ns, MS(200));
  /* HALF_OPEN keeps the count; DISABLED restarts it. */
  assert_status(RESIL_OK,
                resil_breaker_transition(br, RESIL_BREAKER_HALF_OPEN));
  assert_int_equal(metrics_of(br).consecutive_opens, 2);
  assert_status(RESIL_OK, resil_breaker_transition(br, RESIL_BREAKER_DISABLED));
  assert_int_equal(metrics_of(br).consecutive_opens, 0);
  assert_status(RESIL_OK, resil_breaker_transition(br, RESIL_BREAKER_OPEN));
  assert_int_equal(metrics_of(br).open_wait_ns, MS(100));
  resil_breaker_free(br);
  resil_manual_clock_free(mc);
}

typedef struct counter {
  int count;
  uint64_t last_seq;
  int in_order;
} counter;

static void counting_listener(void *user, resil_breaker *br,
                              const resil_breaker_event *ev) {
  (void)br;
  counter *c = user;
  c->count++;
  if (ev->seq != c->last_seq + 1)
    c->in_order = 0;
  c->last_seq = ev->seq;
}

static void listeners_receive_every_event_of_a_long_catch_up(void **state) {
  (void)state;
  /* A growing wait cannot be skipped in bulk: one state query after an
   * idle second applies about 20 overdue transitions, more than one
   * delivery batch holds. Every one must reach the listener, in order. */
  resil_manual_clock *mc = clock_new();
  resil_breaker_config cfg;
  p6_config(&cfg, mc);
  cfg.automatic_half_open = 1;
  cfg.open_wait_ns = MS(1);
  cfg.open_wait_multiplier = 2.0;
  cfg.half_open_max_wait_ns = MS(1);
  resil_breaker *br = breaker_new(&cfg);
  counter c = {0, 0, 1};
  assert_status(RESIL_OK,
                resil_breaker_listener_add(br, counting_listener, &c));
  assert_status(RESIL_OK, resil_breaker_transition(br, RESIL_BREAKER_OPEN));
  resil_manual_clock_advance_ns(mc, RESIL_NS_PER_S);
  resil_breaker_state(br);
  resil_breaker_metrics m = metrics_of(br);
  assert_true(m.total_transitions > 16);
  assert_int_equal((uint64_t)c.count, m.total_transitions);
  assert_int_equal(c.last_seq, m.total_transitions);
  assert_true(c.in_order);
  resil_breaker_free(br);
  resil_manual_clock_free(mc);
}

/* ---- manual transitions, reset ------------------------------------------ */

static const resil_breaker_state_kind all_states[] = {
    RESIL_BREAKER_CLOSED,      RESIL_BREAKER_OPEN,
    RESIL_BREAKER_HALF_OPEN,   RESIL_BREAKER_DISABLED,
    RESIL_BREAKER_FORCED_OPEN, RESIL_BREAKER_METRICS_ONLY};

static void put_in(resil_breaker *br, resil_breaker_state_kind st) {
  if (st == RESIL_BREAKER_HALF_OPEN)
    assert_status(RESIL_OK, resil_breaker_transition(br, RESIL_BREAKER_OPEN));
  if (st != RESIL_BREAKER_CLOSED)
    assert_status(RESIL_OK, resil_breaker_transition(br, st));
  assert_int_equal(resil_breaker_state(br), st);
}

static void manual_transitions_follow_resilience4j_table(void **state) {
  (void)state;
  resil_manual_clock *mc = clock_new();
  resil_breaker_config cfg;
  p6_config(&cfg, mc);
  for (size_t i = 0; i < 6; i++) {
    for (size_t j = 0; j < 6; j++) {
      resil_breaker_state_kind from = all_states[i], to = all_states[j];
      resil_breaker *br = breaker_new(&cfg);
      put_in(br, from);
      resil_breaker_metrics before = metrics_of(br);
      resil_breaker_event ev[8];
      size_t n_before = resil_breaker_events(br, ev, 8);
      resil_status st = resil_breaker_transition(br, to);
      resil_breaker_metrics after = metrics_of(br);
      size_t n_after = resil_breaker_events(br, ev, 8);
      int refused =
          (from == RESIL_BREAKER_CLOSED && to == RESIL_BREAKER_HALF_OPEN) ||
          (from == RESIL_BREAKER_METRICS_ONLY &&
           (to == RESIL_BREAKER_OPEN || to == RESIL_BREAKER_HALF_OPEN));
      if (refused) {
        if (st != RESIL_ESTATE)
          fail_msg("%s -> %s: %s, expected RESIL_ESTATE",
                   resil_breaker_state_name(from), resil_breaker_state_name(to),
                   resil_status_name(st));
        assert_int_equal(after.state, from);
        assert_int_equal(after.generation, before.generation);
        assert_int_equal(n_after, n_before);
      } else if (from == to) {
        /* A restart in a new generation, without an event and not
         * counted as a transition (the total equals the events). */
        assert_status(RESIL_OK, st);
        assert_int_equal(after.state, to);
        assert_int_equal(after.generation, before.generation + 1);
        assert_int_equal(n_after, n_before);
        assert_int_equal(after.total_transitions, before.total_transitions);
      } else {
        if (st != RESIL_OK)
          fail_msg("%s -> %s: %s", resil_breaker_state_name(from),
                   resil_breaker_state_name(to), resil_status_name(st));
        assert_int_equal(after.state, to);
        assert_int_equal(after.generation, before.generation + 1);
        assert_int_equal(n_after, n_before + 1);
        assert_int_equal(ev[n_after - 1].kind, RESIL_BREAKER_EVENT_TRANSITION);
        assert_int_equal(ev[n_after - 1].from, from);
        assert_int_equal(ev[n_after - 1].to, to);
        assert_int_equal(ev[n_after - 1].cause, RESIL_BREAKER_CAUSE_MANUAL);
      }
      resil_breaker_free(br);
    }
  }
  resil_breaker *br = breaker_new(&cfg);
  assert_status(RESIL_EINVAL,
                resil_breaker_transition(br, (resil_breaker_state_kind)6));
  assert_status(RESIL_EINVAL,
                resil_breaker_transition(br, (resil_breaker_state_kind)-1));
  assert_status(RESIL_EMISUSE,
                resil_breaker_transition(NULL, RESIL_BREAKER_OPEN));
  resil_breaker_free(br);
  resil_manual_clock_free(mc);
}

static void manual_open_keeps_the_window_others_restart_it(void **state) {
  (void)state;
  resil_manual_clock *mc = clock_new();
  resil_breaker_config cfg;
  p6_config(&cfg, mc);
  cfg.minimum_calls = 4;
  resil_breaker *br = breaker_new(&cfg);
  record_ok(br, fail_o(), 0);
  record_ok(br, ok_o(), 0);
  assert_status(RESIL_OK, resil_breaker_transition(br, RESIL_BREAKER_OPEN));
  assert_int_equal(metrics_of(br).buffered_calls, 2);
  assert_status(RESIL_OK,
                resil_breaker_transition(br, RESIL_BREAKER_FORCED_OPEN));
  assert_int_equal(metrics_of(br).buffered_calls, 0);
  assert_status(RESIL_OK,
                resil_breaker_transition(br, RESIL_BREAKER_METRICS_ONLY));
  record_ok(br, ok_o(), 0);
  assert_int_equal(metrics_of(br).buffered_calls, 1);
  assert_status(RESIL_OK, resil_breaker_transition(br, RESIL_BREAKER_CLOSED));
  assert_int_equal(metrics_of(br).buffered_calls, 0);
  assert_int_equal(metrics_of(br).total_calls, 3); /* totals are kept */
  resil_breaker_free(br);
  resil_manual_clock_free(mc);
}

static void reset_closes_in_a_new_generation_and_keeps_totals(void **state) {
  (void)state;
  resil_manual_clock *mc = clock_new();
  resil_breaker_config cfg;
  p6_config(&cfg, mc);
  resil_breaker *br = breaker_new(&cfg);
  resil_breaker_permit old;
  assert_int_equal(resil_breaker_try_acquire(br, &old), 1);
  record_ok(br, fail_o(), 0);
  record_ok(br, fail_o(), 0);
  resil_breaker_metrics before = metrics_of(br);
  assert_int_equal(before.state, RESIL_BREAKER_OPEN);
  assert_status(RESIL_OK, resil_breaker_reset(br));
  resil_breaker_metrics m = metrics_of(br);
  assert_int_equal(m.state, RESIL_BREAKER_CLOSED);
  assert_int_equal(m.generation, before.generation + 1);
  assert_int_equal(m.buffered_calls, 0);
  assert_int_equal(m.consecutive_opens, 0);
  assert_int_equal(m.total_failures, 2);
  assert_int_equal(m.total_transitions, 2);
  resil_breaker_event ev[8];
  size_t n = resil_breaker_events(br, ev, 8);
  assert_int_equal(n, 3);
  assert_int_equal(ev[1].kind, RESIL_BREAKER_EVENT_TRANSITION);
  assert_int_equal(ev[1].from, RESIL_BREAKER_OPEN);
  assert_int_equal(ev[1].to, RESIL_BREAKER_CLOSED);
  assert_int_equal(ev[1].cause, RESIL_BREAKER_CAUSE_RESET);
  assert_int_equal(ev[2].kind, RESIL_BREAKER_EVENT_RESET);

  /* Reset from CLOSED: a new generation, a RESET event, no transition. */
  assert_int_equal(resil_breaker_try_acquire(br, &old), 1);
  assert_status(RESIL_OK, resil_breaker_reset(br));
  m = metrics_of(br);
  assert_int_equal(m.generation, before.generation + 2);
  assert_int_equal(m.total_transitions, 2);
  n = resil_breaker_events(br, ev, 8);
  assert_int_equal(n, 4);
  assert_int_equal(ev[3].kind, RESIL_BREAKER_EVENT_RESET);
  assert_int_equal(ev[3].from, RESIL_BREAKER_CLOSED);
  resil_outcome f = fail_o();
  assert_status(RESIL_OK, resil_breaker_record(br, &old, &f, 0));
  m = metrics_of(br);
  assert_int_equal(m.total_ignored, 0); /* a stale result counts nowhere */
  assert_int_equal(m.total_failures, 2);
  assert_int_equal(m.buffered_calls, 0);
  assert_status(RESIL_EMISUSE, resil_breaker_reset(NULL));
  resil_breaker_free(br);
  resil_manual_clock_free(mc);
}

/* ---- special states ----------------------------------------------------- */

static void disabled_permits_everything_and_records_nothing(void **state) {
  (void)state;
  resil_manual_clock *mc = clock_new();
  resil_breaker_config cfg;
  p6_config(&cfg, mc);
  resil_breaker *br = breaker_new(&cfg);
  assert_status(RESIL_OK, resil_breaker_transition(br, RESIL_BREAKER_DISABLED));
  call_arg a = {.mc = mc};
  for (int i = 0; i < 10; i++) {
    record_ok(br, fail_o(), MS(100000));
    run_call(br, &a, fail_o(), 0);
  }
  assert_int_equal(a.runs, 10);
  resil_breaker_metrics m = metrics_of(br);
  assert_int_equal(m.state, RESIL_BREAKER_DISABLED);
  assert_int_equal(m.buffered_calls, 0);
  assert_int_equal(m.total_calls, 0);
  assert_int_equal(m.total_failures, 0);
  assert_int_equal(m.total_slow, 0);
  assert_int_equal(m.total_not_permitted, 0);
  resil_breaker_free(br);
  resil_manual_clock_free(mc);
}

static void forced_open_rejects_everything_until_told(void **state) {
  (void)state;
  resil_manual_clock *mc = clock_new();
  resil_breaker_config cfg;
  p6_config(&cfg, mc);
  resil_breaker *br = breaker_new(&cfg);
  assert_status(RESIL_OK,
                resil_breaker_transition(br, RESIL_BREAKER_FORCED_OPEN));
  call_arg a = {.mc = mc};
  for (int i = 0; i < 3; i++) {
    assert_true(is_rejected_open(run_call(br, &a, ok_o(), 0)));
    resil_manual_clock_advance_ns(mc, 3600 * RESIL_NS_PER_S);
  }
  assert_int_equal(a.runs, 0);
  resil_breaker_metrics m = metrics_of(br);
  assert_int_equal(m.state, RESIL_BREAKER_FORCED_OPEN);
  assert_int_equal(m.total_not_permitted, 3);
  resil_breaker_event ev[8];
  size_t n = resil_breaker_events(br, ev, 8);
  assert_int_equal(ev[n - 1].kind, RESIL_BREAKER_EVENT_NOT_PERMITTED);
  assert_int_equal(ev[n - 1].from, RESIL_BREAKER_FORCED_OPEN);
  assert_status(RESIL_OK, resil_breaker_transition(br, RESIL_BREAKER_CLOSED));
  resil_outcome o = run_call(br, &a, ok_o(), 0);
  assert_true(resil_outcome_is_success(&o));
  assert_int_equal(a.runs, 1);
  resil_breaker_free(br);
  resil_manual_clock_free(mc);
}

static void metrics_only_records_and_reports_each_excursion_once(void **state) {
  (void)state;
  resil_manual_clock *mc = clock_new();
  resil_breaker_config cfg;
  p6_config(&cfg, mc);
  resil_breaker *br = breaker_new(&cfg);
  assert_status(RESIL_OK,
                resil_breaker_transition(br, RESIL_BREAKER_METRICS_ONLY));
  for (int i = 0; i < 5; i++)
    record_ok(br, fail_o(), 0);
  resil_breaker_metrics m = metrics_of(br);
  assert_int_equal(m.state, RESIL_BREAKER_METRICS_ONLY);
  assert_int_equal(m.buffered_calls, 4);
  assert_true(m.failure_rate_pct == 100.0);
  assert_int_equal(m.total_failures, 5);
  resil_breaker_event ev[8];
  size_t n = resil_breaker_events(br, ev, 8);
  assert_int_equal(n, 2); /* the transition, one THRESHOLDS_EXCEEDED */
  assert_int_equal(ev[1].kind, RESIL_BREAKER_EVENT_THRESHOLDS_EXCEEDED);
  assert_int_equal(ev[1].cause, RESIL_BREAKER_CAUSE_FAILURE_RATE);
  /* Below again, then above again: a second report. */
  for (int i = 0; i < 4; i++)
    record_ok(br, ok_o(), 0);
  record_ok(br, fail_o(), 0);
  record_ok(br, fail_o(), 0);
  n = resil_breaker_events(br, ev, 8);
  assert_int_equal(n, 3);
  assert_int_equal(ev[2].kind, RESIL_BREAKER_EVENT_THRESHOLDS_EXCEEDED);
  assert_int_equal(resil_breaker_state(br), RESIL_BREAKER_METRICS_ONLY);
  resil_breaker_free(br);
  resil_manual_clock_free(mc);
}

/* ---- classification ----------------------------------------------------- */

static void client_error_is_recorded_as_success(void **state) {
  (void)state;
  resil_manual_clock *mc = clock_new();
  resil_breaker_config cfg;
  p6_config(&cfg, mc);
  resil_breaker *br = breaker_new(&cfg);
  for (int i = 0; i < 6; i++)
    record_ok(br, resil_outcome_http(404), 0);
  record_ok(br, resil_outcome_make(RESIL_ANSWERED, RESIL_REASON_BUSINESS), 0);
  resil_breaker_metrics m = metrics_of(br);
  assert_int_equal(m.state, RESIL_BREAKER_CLOSED);
  assert_int_equal(m.total_successes, 7);
  assert_int_equal(m.total_failures, 0);
  assert_int_equal(m.successful_calls, 4);
  resil_breaker_free(br);

  /* Default failures: 5xx, 408/425/429, NOT_SENT, UNKNOWN. */
  resil_outcome fails[] = {
      resil_outcome_http(500),
      resil_outcome_http(429),
      resil_outcome_http(408),
      resil_outcome_make(RESIL_NOT_SENT, RESIL_REASON_CONNECT_REFUSED),
      resil_outcome_make(RESIL_UNKNOWN, RESIL_REASON_TIMEOUT),
      resil_outcome_failure()};
  for (size_t i = 0; i < sizeof fails / sizeof fails[0]; i++) {
    br = breaker_new(&cfg);
    record_ok(br, fails[i], 0);
    assert_int_equal(metrics_of(br).total_failures, 1);
    resil_breaker_free(br);
  }
  resil_manual_clock_free(mc);
}

static void failure_classes_are_configurable(void **state) {
  (void)state;
  resil_manual_clock *mc = clock_new();
  resil_breaker_config cfg;
  p6_config(&cfg, mc);
  cfg.failure_classes = RESIL_CLASS_BIT(RESIL_CLASS_CLIENT_ERROR);
  resil_breaker *br = breaker_new(&cfg);
  record_ok(br, resil_outcome_http(503), 0); /* now a success */
  record_ok(br, resil_outcome_http(422), 0); /* now a failure */
  resil_breaker_metrics m = metrics_of(br);
  assert_int_equal(m.total_failures, 1);
  assert_int_equal(m.total_successes, 1);
  assert_int_equal(m.state, RESIL_BREAKER_OPEN); /* 1 of 2 >= 50 % */
  resil_breaker_free(br);
  resil_manual_clock_free(mc);
}

static void
rejected_outcome_counts_nowhere_and_hands_back_the_probe(void **state) {
  (void)state;
  resil_manual_clock *mc = clock_new();
  resil_breaker_config cfg;
  p6_config(&cfg, mc);
  resil_breaker *br = breaker_new(&cfg);
  resil_outcome rej =
      resil_outcome_make(RESIL_REJECTED, RESIL_REASON_BULKHEAD_FULL);
  for (int i = 0; i < 5; i++)
    record_ok(br, rej, MS(100000));
  resil_breaker_metrics m = metrics_of(br);
  assert_int_equal(m.buffered_calls, 0);
  assert_int_equal(m.total_calls, 0);
  assert_int_equal(m.total_ignored, 0);
  assert_int_equal(m.total_slow, 0);

  record_ok(br, fail_o(), 0);
  record_ok(br, fail_o(), 0);
  resil_manual_clock_advance_ns(mc, MS(150));
  resil_breaker_permit p, q;
  assert_int_equal(resil_breaker_try_acquire(br, &p), 1);
  assert_int_equal(resil_breaker_try_acquire(br, &q), 0);
  /* An inner layer refused the probe: the slot comes back. */
  assert_status(RESIL_OK, resil_breaker_record(br, &p, &rej, 0));
  assert_int_equal(resil_breaker_state(br), RESIL_BREAKER_HALF_OPEN);
  assert_int_equal(metrics_of(br).half_open_permits_available, 1);
  assert_int_equal(resil_breaker_try_acquire(br, &p), 1);
  /* The run form does the same when the call returns REJECTED. */
  call_arg a = {.mc = mc};
  assert_status(RESIL_OK, resil_breaker_release(br, &p));
  resil_outcome o = run_call(br, &a, rej, 0);
  assert_int_equal(o.kind, RESIL_REJECTED);
  assert_int_equal(o.reason, RESIL_REASON_BULKHEAD_FULL);
  assert_int_equal(metrics_of(br).half_open_permits_available, 1);
  resil_breaker_free(br);
  resil_manual_clock_free(mc);
}

static void release_hands_back_a_probe_and_counts_nowhere(void **state) {
  (void)state;
  resil_manual_clock *mc = clock_new();
  resil_breaker_config cfg;
  p6_config(&cfg, mc);
  resil_breaker *br = breaker_new(&cfg);
  resil_breaker_permit p;
  assert_int_equal(resil_breaker_try_acquire(br, &p), 1);
  assert_status(RESIL_OK, resil_breaker_release(br, &p)); /* CLOSED: no-op */
  assert_status(RESIL_OK, resil_breaker_transition(br, RESIL_BREAKER_OPEN));
  assert_status(RESIL_OK,
                resil_breaker_transition(br, RESIL_BREAKER_HALF_OPEN));
  for (int i = 0; i < 5; i++) {
    assert_int_equal(resil_breaker_try_acquire(br, &p), 1);
    assert_status(RESIL_OK, resil_breaker_release(br, &p));
  }
  resil_breaker_metrics m = metrics_of(br);
  assert_int_equal(m.total_calls, 0);
  assert_int_equal(m.total_ignored, 0);
  assert_int_equal(m.total_not_permitted, 0);
  assert_int_equal(m.half_open_permits_available, 1);
  /* Releasing twice never creates a second probe. */
  assert_int_equal(resil_breaker_try_acquire(br, &p), 1);
  assert_status(RESIL_OK, resil_breaker_release(br, &p));
  assert_status(RESIL_OK, resil_breaker_release(br, &p));
  assert_int_equal(metrics_of(br).half_open_permits_available, 1);
  assert_status(RESIL_EINVAL, resil_breaker_release(br, NULL));
  assert_status(RESIL_EMISUSE, resil_breaker_release(NULL, &p));
  resil_breaker_free(br);
  resil_manual_clock_free(mc);
}

static void slow_success_is_counted_as_slow(void **state) {
  (void)state;
  resil_manual_clock *mc = clock_new();
  resil_breaker_config cfg;
  p6_config(&cfg, mc);
  cfg.slow_call_duration_ns = MS(100);
  cfg.slow_call_rate_threshold_pct = 100;
  resil_breaker *br = breaker_new(&cfg);
  record_ok(br, ok_o(), MS(100) - 1); /* not slow */
  record_ok(br, ok_o(), MS(100));     /* slow: at the threshold */
  resil_breaker_metrics m = metrics_of(br);
  assert_int_equal(m.slow_calls, 1);
  assert_int_equal(m.total_slow, 1);
  assert_int_equal(m.total_successes, 2);
  assert_true(m.slow_call_rate_pct == 50.0);
  assert_int_equal(m.state, RESIL_BREAKER_CLOSED);
  record_ok(br, fail_o(), MS(500)); /* a slow failure is both */
  m = metrics_of(br);
  assert_int_equal(m.slow_calls, 2);
  assert_int_equal(m.failed_calls, 1);
  record_ok(br, ok_o(), MS(500)); /* window of 4: 3 slow, 1 failure */
  assert_int_equal(resil_breaker_state(br), RESIL_BREAKER_CLOSED);
  record_ok(br, ok_o(), MS(500)); /* 4 slow of 4: 100 % reached */
  assert_int_equal(resil_breaker_state(br), RESIL_BREAKER_OPEN);
  resil_breaker_event ev[8];
  size_t n = resil_breaker_events(br, ev, 8);
  assert_int_equal(ev[n - 1].cause, RESIL_BREAKER_CAUSE_SLOW_CALL_RATE);
  resil_breaker_free(br);
  resil_manual_clock_free(mc);
}

static void rates_report_not_enough_data_explicitly(void **state) {
  (void)state;
  resil_manual_clock *mc = clock_new();
  resil_breaker_config cfg;
  p6_config(&cfg, mc);
  cfg.minimum_calls = 3;
  resil_breaker *br = breaker_new(&cfg);
  resil_breaker_metrics m = metrics_of(br);
  assert_int_equal(m.rates, RESIL_BREAKER_RATES_NOT_ENOUGH_DATA);
  assert_true(m.failure_rate_pct == 0.0 && m.slow_call_rate_pct == 0.0);
  record_ok(br, fail_o(), 0);
  record_ok(br, ok_o(), 0);
  m = metrics_of(br);
  assert_int_equal(m.rates, RESIL_BREAKER_RATES_NOT_ENOUGH_DATA);
  assert_int_equal(m.buffered_calls, 2);
  assert_int_equal(m.failed_calls, 1);
  assert_true(m.failure_rate_pct == 0.0);
  record_ok(br, ok_o(), 0);
  m = metrics_of(br);
  assert_int_equal(m.rates, RESIL_BREAKER_RATES_AVAILABLE);
  assert_true(fabs(m.failure_rate_pct - 100.0 / 3.0) < 1e-9);
  assert_int_equal(m.state, RESIL_BREAKER_CLOSED);
  resil_breaker_free(br);
  resil_manual_clock_free(mc);
}

static void time_window_minimum_may_exceed_its_seconds(void **state) {
  (void)state;
  resil_manual_clock *mc = clock_new();
  resil_breaker_config cfg;
  resil_breaker_config_init(&cfg);
  cfg.window_type = RESIL_BREAKER_WINDOW_TIME;
  cfg.window_size = 1;
  cfg.minimum_calls = 5;
  cfg.clock = resil_manual_clock_get(mc);
  resil_breaker *br = breaker_new(&cfg);
  for (int i = 0; i < 4; i++)
    record_ok(br, fail_o(), 0);
  assert_int_equal(resil_breaker_state(br), RESIL_BREAKER_CLOSED);
  record_ok(br, fail_o(), 0);
  assert_int_equal(resil_breaker_state(br), RESIL_BREAKER_OPEN);
  resil_breaker_free(br);
  resil_manual_clock_free(mc);
}

/* ---- events and listeners ----------------------------------------------- */

static void event_ring_keeps_the_most_recent_oldest_first(void **state) {
  (void)state;
  resil_manual_clock *mc = clock_new();
  resil_breaker_config cfg;
  p6_config(&cfg, mc);
  cfg.event_capacity = 3;
  resil_breaker *br = breaker_new(&cfg);
  resil_breaker_state_kind seq[] = {
      RESIL_BREAKER_OPEN, RESIL_BREAKER_CLOSED, RESIL_BREAKER_DISABLED,
      RESIL_BREAKER_FORCED_OPEN, RESIL_BREAKER_METRICS_ONLY};
  for (int i = 0; i < 5; i++) {
    resil_manual_clock_advance_ns(mc, MS(1));
    assert_status(RESIL_OK, resil_breaker_transition(br, seq[i]));
  }
  resil_breaker_event ev[8];
  size_t n = resil_breaker_events(br, ev, 8);
  assert_int_equal(n, 3);
  for (size_t i = 0; i < 3; i++) {
    assert_int_equal(ev[i].seq, 3 + i);
    assert_int_equal(ev[i].to, seq[2 + i]);
    assert_int_equal(ev[i].time_ns, MS(3 + (int64_t)i));
  }
  n = resil_breaker_events(br, ev, 2); /* the latest two */
  assert_int_equal(n, 2);
  assert_int_equal(ev[0].seq, 4);
  assert_int_equal(ev[1].seq, 5);
  assert_int_equal(resil_breaker_events(br, ev, 0), 0);
  assert_int_equal(resil_breaker_events(br, NULL, 8), 0);
  assert_int_equal(resil_breaker_events(NULL, ev, 8), 0);
  resil_breaker_free(br);

  cfg.event_capacity = 0;
  br = breaker_new(&cfg);
  assert_status(RESIL_OK, resil_breaker_transition(br, RESIL_BREAKER_OPEN));
  assert_int_equal(resil_breaker_events(br, ev, 8), 0);
  resil_breaker_free(br);
  resil_manual_clock_free(mc);
}

typedef struct seen {
  int count;
  resil_breaker_event ev[16];
  pthread_t thread[16];
  resil_breaker_state_kind state_inside[16];
  int remove_self;
} seen;

static void listener(void *user, resil_breaker *br,
                     const resil_breaker_event *ev) {
  seen *s = user;
  if (s->count < 16) {
    s->ev[s->count] = *ev;
    s->thread[s->count] = pthread_self();
    /* Would deadlock if a library lock were held. */
    s->state_inside[s->count] = resil_breaker_state(br);
    resil_breaker_metrics m;
    assert_status(RESIL_OK, resil_breaker_get_metrics(br, &m));
  }
  s->count++;
  if (s->remove_self)
    assert_status(RESIL_OK, resil_breaker_listener_remove(br, listener, s));
}

static void listeners_run_on_the_calling_thread_without_the_lock(void **state) {
  (void)state;
  resil_manual_clock *mc = clock_new();
  resil_breaker_config cfg;
  p6_config(&cfg, mc);
  resil_breaker *br = breaker_new(&cfg);
  seen s1, s2;
  memset(&s1, 0, sizeof s1);
  memset(&s2, 0, sizeof s2);
  assert_status(RESIL_OK, resil_breaker_listener_add(br, listener, &s1));
  assert_status(RESIL_OK, resil_breaker_listener_add(br, listener, &s2));
  record_ok(br, fail_o(), 0);
  record_ok(br, fail_o(), 0);
  resil_breaker_permit p;
  assert_int_equal(resil_breaker_try_acquire(br, &p), 0);
  assert_int_equal(s1.count, 2);
  assert_int_equal(s2.count, 2);
  assert_int_equal(s1.ev[0].kind, RESIL_BREAKER_EVENT_TRANSITION);
  assert_int_equal(s1.ev[0].to, RESIL_BREAKER_OPEN);
  assert_int_equal(s1.ev[0].cause, RESIL_BREAKER_CAUSE_FAILURE_RATE);
  assert_int_equal(s1.state_inside[0], RESIL_BREAKER_OPEN);
  assert_int_equal(s1.ev[1].kind, RESIL_BREAKER_EVENT_NOT_PERMITTED);
  assert_int_equal(s1.ev[1].seq, 2);
  assert_true(pthread_equal(s1.thread[0], pthread_self()));
  assert_true(pthread_equal(s1.thread[1], pthread_self()));

  /* Removed: no longer called. */
  assert_status(RESIL_OK, resil_breaker_listener_remove(br, listener, &s2));
  assert_status(RESIL_EINVAL, resil_breaker_listener_remove(br, listener, &s2));
  assert_int_equal(resil_breaker_try_acquire(br, &p), 0);
  assert_int_equal(s1.count, 3);
  assert_int_equal(s2.count, 2);

  /* A listener may remove itself from inside its call. */
  s1.remove_self = 1;
  assert_int_equal(resil_breaker_try_acquire(br, &p), 0);
  assert_int_equal(s1.count, 4);
  assert_int_equal(resil_breaker_try_acquire(br, &p), 0);
  assert_int_equal(s1.count, 4);

  assert_status(RESIL_EINVAL, resil_breaker_listener_add(br, NULL, NULL));
  assert_status(RESIL_EMISUSE, resil_breaker_listener_add(NULL, listener, &s1));
  assert_status(RESIL_EMISUSE,
                resil_breaker_listener_remove(NULL, listener, &s1));
  resil_breaker_free(br);
  resil_manual_clock_free(mc);
}

static void listener_count_is_bounded(void **state) {
  (void)state;
  resil_breaker_config cfg;
  resil_breaker_config_init(&cfg);
  resil_breaker *br = breaker_new(&cfg);
  seen s[RESIL_BREAKER_MAX_LISTENERS + 1];
  memset(s, 0, sizeof s);
  for (unsigned i = 0; i < RESIL_BREAKER_MAX_LISTENERS; i++)
    assert_status(RESIL_OK, resil_breaker_listener_add(br, listener, &s[i]));
  assert_status(RESIL_ESTATE,
                resil_breaker_listener_add(br, listener,
                                           &s[RESIL_BREAKER_MAX_LISTENERS]));
  assert_status(RESIL_OK, resil_breaker_transition(br, RESIL_BREAKER_OPEN));
  for (unsigned i = 0; i < RESIL_BREAKER_MAX_LISTENERS; i++)
    assert_int_equal(s[i].count, 1);
  /* Remove from the middle; the order of the rest is kept. */
  assert_status(RESIL_OK, resil_breaker_listener_remove(br, listener, &s[3]));
  assert_status(RESIL_OK, resil_breaker_transition(br, RESIL_BREAKER_CLOSED));
  assert_int_equal(s[3].count, 1);
  assert_int_equal(s[4].count, 2);
  resil_breaker_free(br); /* frees the listener array too (ASan checks) */
}

/* ---- run form ----------------------------------------------------------- */

static void run_form_passes_the_context_and_a_default_one(void **state) {
  (void)state;
  resil_manual_clock *mc = clock_new();
  resil_breaker_config cfg;
  p6_config(&cfg, mc);
  resil_breaker *br = breaker_new(&cfg);
  call_arg a = {.mc = mc, .out = resil_outcome_ok()};
  resil_ctx ctx;
  resil_ctx_init(&ctx);
  ctx.deadline_ns = MS(700);
  resil_breaker_run(br, &ctx, business_call, &a);
  assert_ptr_equal(a.seen_ctx, &ctx);
  assert_int_equal(a.seen_deadline, MS(700));
  resil_breaker_run(br, NULL, business_call, &a);
  assert_non_null(a.seen_ctx);
  assert_int_equal(a.seen_deadline, RESIL_NO_DEADLINE);
  assert_ptr_equal(a.seen_clock, resil_manual_clock_get(mc));
  /* The default one is resil_ctx_init's with the breaker's clock. */
  resil_ctx def;
  resil_ctx_init(&def);
  assert_int_equal(a.seen_copy.struct_size, def.struct_size);
  assert_int_equal(a.seen_copy.deadline_ns, def.deadline_ns);
  assert_ptr_equal(a.seen_copy.cancel, def.cancel);
  assert_int_equal(a.seen_copy.flags, def.flags);
  assert_int_equal(a.seen_copy.attempt, def.attempt);
  assert_ptr_equal(a.seen_copy.user, def.user);
  assert_ptr_equal(a.seen_copy.idempotency_key, def.idempotency_key);
  /* Misuse is not a call. */
  resil_outcome o = resil_breaker_run(br, NULL, NULL, &a);
  assert_int_equal(o.kind, RESIL_NOT_SENT);
  assert_int_equal(o.reason, RESIL_REASON_LOCAL_ERROR);
  o = resil_breaker_run(NULL, NULL, business_call, &a);
  assert_int_equal(o.kind, RESIL_NOT_SENT);
  assert_int_equal(a.runs, 2);
  assert_int_equal(metrics_of(br).total_calls, 2);
  resil_breaker_free(br);
  resil_manual_clock_free(mc);
}

static void run_form_measures_the_call_for_slow_detection(void **state) {
  (void)state;
  resil_manual_clock *mc = clock_new();
  resil_breaker_config cfg;
  p6_config(&cfg, mc);
  cfg.slow_call_duration_ns = MS(40);
  resil_breaker *br = breaker_new(&cfg);
  call_arg a = {.mc = mc};
  run_call(br, &a, ok_o(), MS(39));
  assert_int_equal(metrics_of(br).slow_calls, 0);
  run_call(br, &a, ok_o(), MS(40));
  assert_int_equal(metrics_of(br).slow_calls, 1);
  resil_breaker_free(br);
  resil_manual_clock_free(mc);
}

static void invalid_arguments_are_reported_not_crashed_on(void **state) {
  (void)state;
  resil_breaker_config cfg;
  resil_breaker_config_init(&cfg);
  resil_breaker *br = breaker_new(&cfg);
  resil_breaker_permit p;
  resil_outcome o = ok_o();
  assert_int_equal(resil_breaker_try_acquire(NULL, &p), 0);
  assert_int_equal(resil_breaker_try_acquire(br, NULL), 0);
  assert_int_equal(resil_breaker_try_acquire(br, &p), 1);
  assert_status(RESIL_EMISUSE, resil_breaker_record(NULL, &p, &o, 0));
  assert_status(RESIL_EINVAL, resil_breaker_record(br, NULL, &o, 0));
  assert_status(RESIL_EINVAL, resil_breaker_record(br, &p, NULL, 0));
  assert_status(RESIL_EINVAL, resil_breaker_record(br, &p, &o, -1));
  assert_int_equal(metrics_of(br).total_calls, 0);
  assert_status(RESIL_OK, resil_breaker_record(br, &p, &o, 0));
  assert_status(RESIL_EMISUSE, resil_breaker_get_metrics(NULL, NULL));
  resil_breaker_metrics m;
  assert_status(RESIL_EINVAL, resil_breaker_get_metrics(br, NULL));
  assert_status(RESIL_EMISUSE, resil_breaker_get_metrics(NULL, &m));
  assert_int_equal(resil_breaker_state(NULL), RESIL_BREAKER_FORCED_OPEN);
  assert_null(resil_breaker_name(NULL));
  assert_int_equal(resil_breaker_memory_bytes(NULL), 0);
  resil_breaker_free(NULL);
  resil_breaker_free(br);
}

static void names_are_static_text(void **state) {
  (void)state;
  const char *want[] = {"CLOSED",   "OPEN",        "HALF_OPEN",
                        "DISABLED", "FORCED_OPEN", "METRICS_ONLY"};
  for (int i = 0; i < 6; i++)
    assert_string_equal(resil_breaker_state_name(all_states[i]), want[i]);
  assert_string_equal(resil_breaker_state_name((resil_breaker_state_kind)9),
                      "?");
  assert_string_equal(
      resil_breaker_event_kind_name(RESIL_BREAKER_EVENT_NOT_PERMITTED),
      "NOT_PERMITTED");
  assert_string_equal(
      resil_breaker_event_kind_name(RESIL_BREAKER_EVENT_THRESHOLDS_EXCEEDED),
      "THRESHOLDS_EXCEEDED");
  assert_string_equal(
      resil_breaker_event_kind_name((resil_breaker_event_kind)0), "?");
  assert_string_equal(
      resil_breaker_cause_name(RESIL_BREAKER_CAUSE_HALF_OPEN_MAX_WAIT),
      "HALF_OPEN_MAX_WAIT");
  assert_string_equal(resil_breaker_cause_name((resil_breaker_cause)99), "?");

  resil_breaker_config cfg;
  resil_breaker_config_init(&cfg);
  char name[32] = "orders";
  cfg.name = name;
  resil_breaker *br = breaker_new(&cfg);
  name[0] = 'X'; /* the breaker keeps its own copy */
  assert_string_equal(resil_breaker_name(br), "orders");
  resil_breaker_free(br);
}

/* ---- memory ------------------------------------------------------------- */

static void breaker_with_100_call_window_fits_in_512_bytes(void **state) {
  (void)state;
  resil_breaker_config cfg;
  resil_breaker_config_init(&cfg);
  cfg.name = "payments-service";
  test_alloc ta;
  test_alloc_init(&ta, 0);
  cfg.alloc = &ta.a;
  resil_breaker *br = breaker_new(&cfg);
  size_t bytes = resil_breaker_memory_bytes(br);
  if (bytes > 512)
    fail_msg("breaker occupies %zu bytes", bytes);
  assert_int_equal(ta.live, 1); /* one block: no hidden allocations */
  /* Listeners cost memory only once added. */
  seen s;
  memset(&s, 0, sizeof s);
  assert_status(RESIL_OK, resil_breaker_listener_add(br, listener, &s));
  assert_true(resil_breaker_memory_bytes(br) > bytes);
  assert_int_equal(ta.live, 2);
  resil_breaker_free(br);
  assert_int_equal(ta.live, 0);
}

static void allocation_failures_are_reported_and_leak_nothing(void **state) {
  (void)state;
  resil_manual_clock *mc = clock_new();
  resil_breaker_config cfg;
  p6_config(&cfg, mc);
  cfg.name = "sweep";
  int succeeded = 0;
  for (long fail_at = 1; fail_at <= 10 && !succeeded; fail_at++) {
    test_alloc ta;
    test_alloc_init(&ta, fail_at);
    cfg.alloc = &ta.a;
    resil_breaker *br = NULL;
    resil_error e;
    resil_status st = resil_breaker_new(&cfg, &br, &e);
    if (st == RESIL_OK) {
      succeeded = 1;
      /* Growing the listener array can fail too: reported, nothing
       * changes, and the breaker keeps working. */
      seen s;
      memset(&s, 0, sizeof s);
      assert_status(RESIL_ENOMEM, resil_breaker_listener_add(br, listener, &s));
      assert_status(RESIL_OK, resil_breaker_transition(br, RESIL_BREAKER_OPEN));
      assert_int_equal(s.count, 0);
      resil_breaker_free(br);
    } else {
      assert_status(RESIL_ENOMEM, st);
      assert_int_equal(e.status, RESIL_ENOMEM);
      assert_null(br);
    }
    assert_int_equal(ta.live, 0);
  }
  assert_true(succeeded);
  resil_manual_clock_free(mc);
}

/* ---- issue 7: DESIGN §2.2 to the letter ---------------------------------- */

static void manual_transition_to_the_same_state_restarts_it(void **state) {
  (void)state;
  resil_manual_clock *mc = clock_new();
  resil_breaker_config cfg;
  p6_config(&cfg, mc);
  cfg.window_size = 10;
  cfg.minimum_calls = 5;
  cfg.half_open_permitted_calls = 3;
  cfg.open_wait_ns = MS(100);
  cfg.open_wait_multiplier = 2.0;
  resil_breaker *br = breaker_new(&cfg);
  ev_log l;
  ev_log_init(&l);
  assert_status(RESIL_OK, resil_breaker_listener_add(br, logging_listener, &l));

  /* CLOSED -> CLOSED: new generation, fresh window, totals kept, no event;
   * a permit of before is stale. */
  resil_breaker_permit old;
  assert_int_equal(resil_breaker_try_acquire(br, &old), RESIL_DECISION_GO);
  record_ok(br, fail_o(), 0);
  record_ok(br, fail_o(), 0);
  resil_manual_clock_advance_ns(mc, MS(5));
  resil_breaker_metrics b = metrics_of(br);
  assert_status(RESIL_OK, resil_breaker_transition(br, RESIL_BREAKER_CLOSED));
  resil_breaker_metrics m = metrics_of(br);
  assert_int_equal(m.state, RESIL_BREAKER_CLOSED);
  assert_int_equal(m.generation, b.generation + 1);
  assert_int_equal(m.buffered_calls, 0);
  assert_int_equal(m.state_since_ns, MS(5));
  assert_int_equal(m.total_failures, 2);
  assert_int_equal(m.total_transitions, 0);
  assert_int_equal(l.n, 0);
  resil_outcome f = fail_o();
  assert_status(RESIL_OK, resil_breaker_record(br, &old, &f, 0));
  assert_int_equal(metrics_of(br).total_failures, 2);
  assert_int_equal(metrics_of(br).buffered_calls, 0);

  /* METRICS_ONLY -> METRICS_ONLY: fresh window. */
  assert_status(RESIL_OK,
                resil_breaker_transition(br, RESIL_BREAKER_METRICS_ONLY));
  record_ok(br, fail_o(), 0);
  b = metrics_of(br);
  assert_int_equal(b.buffered_calls, 1);
  assert_status(RESIL_OK,
                resil_breaker_transition(br, RESIL_BREAKER_METRICS_ONLY));
  m = metrics_of(br);
  assert_int_equal(m.generation, b.generation + 1);
  assert_int_equal(m.buffered_calls, 0);
  assert_int_equal(m.total_transitions, 1);
  assert_int_equal(l.transitions, 1);

  /* OPEN -> OPEN: one more consecutive OPEN, the wait restarts now with
   * the grown wait, the window it came from is kept. */
  assert_status(RESIL_OK, resil_breaker_transition(br, RESIL_BREAKER_CLOSED));
  record_ok(br, fail_o(), 0);
  assert_status(RESIL_OK, resil_breaker_transition(br, RESIL_BREAKER_OPEN));
  b = metrics_of(br);
  assert_int_equal(b.consecutive_opens, 1);
  assert_int_equal(b.open_wait_ns, MS(100));
  resil_manual_clock_advance_ns(mc, MS(60));
  int64_t t_again = resil_manual_clock_now_ns(mc);
  size_t events = l.n;
  assert_status(RESIL_OK, resil_breaker_transition(br, RESIL_BREAKER_OPEN));
  m = metrics_of(br);
  assert_int_equal(m.state, RESIL_BREAKER_OPEN);
  assert_int_equal(m.generation, b.generation + 1);
  assert_int_equal(m.consecutive_opens, 2);
  assert_int_equal(m.open_wait_ns, MS(200));
  assert_int_equal(m.state_since_ns, t_again);
  assert_int_equal(m.buffered_calls, 1);
  assert_int_equal(m.total_transitions, b.total_transitions);
  assert_int_equal(l.n, events);
  resil_breaker_permit p;
  resil_manual_clock_advance_ns(mc, MS(200) - 1);
  assert_int_equal(resil_breaker_try_acquire(br, &p), RESIL_DECISION_DENY);
  resil_manual_clock_advance_ns(mc, 1);
  assert_int_equal(resil_breaker_try_acquire(br, &p), RESIL_DECISION_GO);

  /* HALF_OPEN -> HALF_OPEN: every permit again, fresh window, the maximum
   * wait counts from now; the probe of before is stale. */
  record_ok(br, ok_o(), 0);
  b = metrics_of(br);
  assert_int_equal(b.state, RESIL_BREAKER_HALF_OPEN);
  assert_int_equal(b.buffered_calls, 1);
  assert_int_equal(b.half_open_permits_available, 1);
  resil_manual_clock_advance_ns(mc, MS(7));
  assert_status(RESIL_OK,
                resil_breaker_transition(br, RESIL_BREAKER_HALF_OPEN));
  m = metrics_of(br);
  assert_int_equal(m.generation, b.generation + 1);
  assert_int_equal(m.buffered_calls, 0);
  assert_int_equal(m.half_open_permits_available, 3);
  assert_int_equal(m.state_since_ns, resil_manual_clock_now_ns(mc));
  assert_int_equal(m.consecutive_opens, 2); /* kept */
  assert_status(RESIL_OK, resil_breaker_record(br, &p, &f, 0));
  assert_int_equal(metrics_of(br).total_failures, b.total_failures);

  /* FORCED_OPEN -> FORCED_OPEN counts one more consecutive OPEN. */
  assert_status(RESIL_OK,
                resil_breaker_transition(br, RESIL_BREAKER_FORCED_OPEN));
  b = metrics_of(br);
  assert_status(RESIL_OK,
                resil_breaker_transition(br, RESIL_BREAKER_FORCED_OPEN));
  m = metrics_of(br);
  assert_int_equal(m.generation, b.generation + 1);
  assert_int_equal(m.consecutive_opens, b.consecutive_opens + 1);
  /* DISABLED -> DISABLED: a new generation too. */
  assert_status(RESIL_OK,
                resil_breaker_transition(br, RESIL_BREAKER_DISABLED));
  b = metrics_of(br);
  assert_status(RESIL_OK,
                resil_breaker_transition(br, RESIL_BREAKER_DISABLED));
  m = metrics_of(br);
  assert_int_equal(m.generation, b.generation + 1);
  /* The total of transitions is the number of TRANSITION events. */
  assert_int_equal(m.total_transitions, l.transitions);
  assert_true(l.in_order);
  resil_breaker_free(br);
  resil_manual_clock_free(mc);
}

/* One outcome of each classifiable class. */
static resil_outcome outcome_of_class(resil_outcome_class c) {
  switch (c) {
  case RESIL_CLASS_NOT_SENT:
    return resil_outcome_make(RESIL_NOT_SENT, RESIL_REASON_CONNECT_REFUSED);
  case RESIL_CLASS_UNKNOWN:
    return resil_outcome_make(RESIL_UNKNOWN, RESIL_REASON_TIMEOUT);
  case RESIL_CLASS_SUCCESS:
    return resil_outcome_http(200);
  case RESIL_CLASS_REDIRECT:
    return resil_outcome_http(302);
  case RESIL_CLASS_CLIENT_ERROR:
    return resil_outcome_http(404);
  case RESIL_CLASS_HTTP_408:
    return resil_outcome_http(408);
  case RESIL_CLASS_HTTP_425:
    return resil_outcome_http(425);
  case RESIL_CLASS_HTTP_429:
    return resil_outcome_http(429);
  case RESIL_CLASS_SERVER_ERROR:
    return resil_outcome_http(500);
  default:
    return resil_outcome_make(RESIL_REJECTED, RESIL_REASON_BULKHEAD_FULL);
  }
}

static const resil_outcome_class classifiable[] = {
    RESIL_CLASS_NOT_SENT,     RESIL_CLASS_UNKNOWN,     RESIL_CLASS_SUCCESS,
    RESIL_CLASS_REDIRECT,     RESIL_CLASS_CLIENT_ERROR, RESIL_CLASS_HTTP_408,
    RESIL_CLASS_HTTP_425,     RESIL_CLASS_HTTP_429,     RESIL_CLASS_SERVER_ERROR};

static void every_class_can_be_failure_success_or_ignored(void **state) {
  (void)state;
  resil_manual_clock *mc = clock_new();
  for (size_t i = 0; i < 9; i++) {
    resil_outcome_class c = classifiable[i];
    resil_outcome o = outcome_of_class(c);
    assert_int_equal(resil_outcome_classify(&o), c);
    for (int role = 0; role < 3; role++) { /* failure, success, ignored */
      resil_breaker_config cfg;
      p6_config(&cfg, mc);
      cfg.window_size = 10;
      cfg.minimum_calls = 10;
      cfg.failure_classes = role == 0 ? RESIL_CLASS_BIT(c) : 0;
      cfg.ignored_classes = role == 2 ? RESIL_CLASS_BIT(c) : 0;
      resil_breaker *br = breaker_new(&cfg);
      record_ok(br, o, MS(100000)); /* slow too */
      resil_breaker_metrics m = metrics_of(br);
      assert_int_equal(m.total_failures, role == 0);
      assert_int_equal(m.total_successes, role == 1);
      assert_int_equal(m.total_ignored, role == 2);
      assert_int_equal(m.total_calls, role != 2);
      assert_int_equal(m.buffered_calls, role != 2);
      assert_int_equal(m.failed_calls, role == 0);
      assert_int_equal(m.total_slow, role != 2);
      resil_breaker_free(br);
    }
  }
  resil_manual_clock_free(mc);
}

static void ignored_results_hand_back_the_probe_and_never_vote(void **state) {
  (void)state;
  resil_manual_clock *mc = clock_new();
  resil_breaker_config cfg;
  p6_config(&cfg, mc);
  cfg.ignored_classes = RESIL_CLASS_BIT(RESIL_CLASS_HTTP_429);
  cfg.failure_classes = RESIL_BREAKER_DEFAULT_FAILURE_CLASSES &
                        ~RESIL_CLASS_BIT(RESIL_CLASS_HTTP_429);
  resil_breaker *br = breaker_new(&cfg);
  for (int i = 0; i < 10; i++)
    record_ok(br, resil_outcome_http(429), 0);
  resil_breaker_metrics m = metrics_of(br);
  assert_int_equal(m.state, RESIL_BREAKER_CLOSED);
  assert_int_equal(m.total_ignored, 10);
  assert_int_equal(m.total_calls, 0);
  assert_int_equal(m.buffered_calls, 0);
  /* 408 and 425 still fail: each is classified apart from 429. */
  record_ok(br, resil_outcome_http(408), 0);
  record_ok(br, resil_outcome_http(425), 0);
  assert_int_equal(resil_breaker_state(br), RESIL_BREAKER_OPEN);
  resil_manual_clock_advance_ns(mc, MS(150));
  resil_breaker_permit p;
  assert_int_equal(resil_breaker_try_acquire(br, &p), RESIL_DECISION_GO);
  assert_int_equal(metrics_of(br).half_open_permits_available, 0);
  resil_outcome o = resil_outcome_http(429);
  assert_status(RESIL_OK, resil_breaker_record(br, &p, &o, 0));
  m = metrics_of(br);
  assert_int_equal(m.state, RESIL_BREAKER_HALF_OPEN);
  assert_int_equal(m.half_open_permits_available, 1);
  assert_int_equal(m.total_ignored, 11);
  assert_int_equal(m.buffered_calls, 0);
  /* DISABLED records nothing, not even an ignored result. */
  assert_status(RESIL_OK, resil_breaker_transition(br, RESIL_BREAKER_DISABLED));
  record_ok(br, o, 0);
  assert_int_equal(metrics_of(br).total_ignored, 11);
  resil_breaker_free(br);

  /* The two masks must be disjoint, and REJECTED is in neither. */
  p6_config(&cfg, mc);
  cfg.ignored_classes = RESIL_CLASS_BIT(RESIL_CLASS_SERVER_ERROR);
  resil_breaker *none = NULL;
  resil_error e;
  assert_status(RESIL_EINVAL, resil_breaker_new(&cfg, &none, &e));
  assert_null(none);
  assert_string_equal(e.field, "ignored_classes");
  assert_non_null(strstr(e.msg, "disjoint from failure_classes"));
  cfg.ignored_classes = RESIL_CLASS_BIT(RESIL_CLASS_REJECTED);
  assert_status(RESIL_EINVAL, resil_breaker_new(&cfg, &none, &e));
  assert_string_equal(e.field, "ignored_classes");
  resil_manual_clock_free(mc);
}

static void initial_state_is_generation_one_without_an_event(void **state) {
  (void)state;
  resil_manual_clock *mc = clock_new();
  resil_manual_clock_advance_ns(mc, MS(3));
  resil_breaker_config cfg;
  p6_config(&cfg, mc);
  for (size_t i = 0; i < 6; i++) {
    cfg.initial_state = all_states[i];
    int64_t t_new = resil_manual_clock_now_ns(mc);
    resil_breaker *br = breaker_new(&cfg);
    resil_breaker_metrics m = metrics_of(br);
    assert_int_equal(m.state, all_states[i]);
    assert_int_equal(m.generation, 1);
    assert_int_equal(m.total_transitions, 0);
    assert_int_equal(m.state_since_ns, t_new);
    resil_breaker_event ev[2];
    assert_int_equal(resil_breaker_events(br, ev, 2), 0);
    int denied = all_states[i] == RESIL_BREAKER_OPEN ||
                 all_states[i] == RESIL_BREAKER_FORCED_OPEN;
    /* DESIGN §2.2: an initial HALF_OPEN counts 1 (HalfOpenState(1)). */
    assert_int_equal(m.consecutive_opens,
                     denied || all_states[i] == RESIL_BREAKER_HALF_OPEN);
    resil_breaker_permit p;
    resil_decision d = resil_breaker_try_acquire(br, &p);
    assert_int_equal(d, denied ? RESIL_DECISION_DENY : RESIL_DECISION_GO);
    if (all_states[i] == RESIL_BREAKER_HALF_OPEN) {
      assert_int_equal(metrics_of(br).half_open_permits_available, 0);
      resil_outcome ok = ok_o();
      assert_status(RESIL_OK, resil_breaker_record(br, &p, &ok, 0));
      assert_int_equal(resil_breaker_state(br), RESIL_BREAKER_CLOSED);
    }
    if (all_states[i] == RESIL_BREAKER_OPEN) {
      resil_manual_clock_advance_ns(mc, MS(150));
      assert_int_equal(resil_breaker_try_acquire(br, &p), RESIL_DECISION_GO);
    }
    resil_breaker_free(br);
  }
  cfg.initial_state = (resil_breaker_state_kind)6;
  resil_breaker *br = NULL;
  resil_error e;
  assert_status(RESIL_EINVAL, resil_breaker_new(&cfg, &br, &e));
  assert_string_equal(e.field, "initial_state");
  resil_manual_clock_free(mc);
}

/* DESIGN §2.2: an initial HALF_OPEN starts with a count of 1, so its
 * failed probe makes the 2nd consecutive OPEN and waits the 2nd wait. */
static void initial_half_open_fails_into_the_second_wait(void **state) {
  (void)state;
  resil_manual_clock *mc = clock_new();
  resil_breaker_config cfg;
  p6_config(&cfg, mc);
  cfg.open_wait_ns = MS(100);
  cfg.open_wait_multiplier = 3.0;
  cfg.initial_state = RESIL_BREAKER_HALF_OPEN;
  resil_breaker *br = breaker_new(&cfg);
  assert_int_equal(metrics_of(br).consecutive_opens, 1);
  resil_breaker_permit p;
  assert_int_equal(resil_breaker_try_acquire(br, &p), RESIL_DECISION_GO);
  resil_outcome f = fail_o();
  assert_status(RESIL_OK, resil_breaker_record(br, &p, &f, 0));
  resil_breaker_metrics m = metrics_of(br);
  assert_int_equal(m.state, RESIL_BREAKER_OPEN);
  assert_int_equal(m.consecutive_opens, 2);
  assert_int_equal(m.open_wait_ns, MS(300));
  resil_manual_clock_advance_ns(mc, MS(300) - 1);
  assert_int_equal(resil_breaker_try_acquire(br, &p), RESIL_DECISION_DENY);
  resil_manual_clock_advance_ns(mc, 1);
  assert_int_equal(resil_breaker_try_acquire(br, &p), RESIL_DECISION_GO);
  resil_breaker_free(br);
  resil_manual_clock_free(mc);
}

static void open_for_waits_the_given_duration(void **state) {
  (void)state;
  resil_manual_clock *mc = clock_new();
  resil_breaker_config cfg;
  p6_config(&cfg, mc);
  cfg.open_wait_ns = MS(100);
  cfg.open_wait_multiplier = 2.0;
  resil_breaker *br = breaker_new(&cfg);
  assert_status(RESIL_OK, resil_breaker_open_for(br, MS(5000)));
  resil_breaker_metrics m = metrics_of(br);
  assert_int_equal(m.state, RESIL_BREAKER_OPEN);
  assert_int_equal(m.open_wait_ns, MS(5000));
  /* DESIGN §2.2: open_for leaves the count as it was (0 from CLOSED). */
  assert_int_equal(m.consecutive_opens, 0);
  resil_breaker_event ev[4];
  size_t n = resil_breaker_events(br, ev, 4);
  assert_int_equal(n, 1);
  assert_int_equal(ev[0].cause, RESIL_BREAKER_CAUSE_MANUAL);
  resil_breaker_permit p;
  resil_manual_clock_advance_ns(mc, MS(5000) - 1);
  assert_int_equal(resil_breaker_try_acquire(br, &p), RESIL_DECISION_DENY);
  resil_manual_clock_advance_ns(mc, 1);
  assert_int_equal(resil_breaker_try_acquire(br, &p), RESIL_DECISION_GO);
  /* A failed probe: the 1st consecutive OPEN (open_for did not count)
   * waits the series' 1st wait, 100 ms, not a growth of the explicit 5 s. */
  resil_outcome f = fail_o();
  assert_status(RESIL_OK, resil_breaker_record(br, &p, &f, 0));
  m = metrics_of(br);
  assert_int_equal(m.consecutive_opens, 1);
  assert_int_equal(m.open_wait_ns, MS(100));
  /* Another failed probe: the 2nd, 100 ms * 2. */
  resil_manual_clock_advance_ns(mc, MS(100));
  assert_int_equal(resil_breaker_try_acquire(br, &p), RESIL_DECISION_GO);
  assert_status(RESIL_OK, resil_breaker_record(br, &p, &f, 0));
  m = metrics_of(br);
  assert_int_equal(m.consecutive_opens, 2);
  assert_int_equal(m.open_wait_ns, MS(200));
  /* From OPEN: OPEN -> OPEN for the given wait, no event, the count
   * kept at 2; the next consecutive OPEN is the 3rd (400 ms). */
  uint64_t gen = m.generation;
  size_t nev = resil_breaker_events(br, ev, 4);
  assert_status(RESIL_OK, resil_breaker_open_for(br, MS(30)));
  m = metrics_of(br);
  assert_int_equal(m.generation, gen + 1);
  assert_int_equal(m.open_wait_ns, MS(30));
  assert_int_equal(m.consecutive_opens, 2);
  assert_int_equal(resil_breaker_events(br, ev, 4), nev); /* no new one */
  resil_manual_clock_advance_ns(mc, MS(30));
  assert_int_equal(resil_breaker_try_acquire(br, &p), RESIL_DECISION_GO);
  assert_status(RESIL_OK, resil_breaker_record(br, &p, &f, 0));
  m = metrics_of(br);
  assert_int_equal(m.consecutive_opens, 3);
  assert_int_equal(m.open_wait_ns, MS(400));
  /* From HALF_OPEN the count is kept as well. */
  resil_manual_clock_advance_ns(mc, MS(400));
  assert_int_equal(resil_breaker_try_acquire(br, &p), RESIL_DECISION_GO);
  assert_int_equal(resil_breaker_state(br), RESIL_BREAKER_HALF_OPEN);
  resil_breaker_release(br, &p);
  assert_status(RESIL_OK, resil_breaker_open_for(br, MS(30)));
  assert_int_equal(metrics_of(br).consecutive_opens, 3);
  /* Refused from METRICS_ONLY, as a transition to OPEN is. */
  assert_status(RESIL_OK,
                resil_breaker_transition(br, RESIL_BREAKER_METRICS_ONLY));
  assert_status(RESIL_ESTATE, resil_breaker_open_for(br, MS(30)));
  assert_status(RESIL_EINVAL, resil_breaker_open_for(br, 0));
  assert_status(RESIL_EMISUSE, resil_breaker_open_for(NULL, MS(30)));
  assert_int_equal(resil_breaker_state(br), RESIL_BREAKER_METRICS_ONLY);
  resil_breaker_free(br);
  resil_manual_clock_free(mc);
}

static void half_open_max_wait_may_lead_to_closed(void **state) {
  (void)state;
  resil_manual_clock *mc = clock_new();
  resil_breaker_config cfg;
  p6_config(&cfg, mc);
  cfg.half_open_max_wait_ns = MS(1000);
  cfg.half_open_max_wait_to_closed = 1;
  resil_breaker *br = breaker_new(&cfg);
  record_ok(br, fail_o(), 0);
  record_ok(br, fail_o(), 0);
  resil_manual_clock_advance_ns(mc, MS(150));
  resil_breaker_permit probe;
  assert_int_equal(resil_breaker_try_acquire(br, &probe), RESIL_DECISION_GO);
  int64_t t_half = resil_manual_clock_now_ns(mc);
  resil_manual_clock_advance_ns(mc, MS(1000) - 1);
  assert_int_equal(resil_breaker_state(br), RESIL_BREAKER_HALF_OPEN);
  resil_manual_clock_advance_ns(mc, 1 + MS(20));
  resil_breaker_metrics m = metrics_of(br);
  assert_int_equal(m.state, RESIL_BREAKER_CLOSED);
  assert_int_equal(m.state_since_ns, t_half + MS(1000));
  assert_int_equal(m.consecutive_opens, 0);
  assert_int_equal(m.buffered_calls, 0);
  resil_breaker_event ev[8];
  size_t n = resil_breaker_events(br, ev, 8);
  assert_int_equal(ev[n - 1].from, RESIL_BREAKER_HALF_OPEN);
  assert_int_equal(ev[n - 1].to, RESIL_BREAKER_CLOSED);
  assert_int_equal(ev[n - 1].cause, RESIL_BREAKER_CAUSE_HALF_OPEN_MAX_WAIT);
  assert_int_equal(ev[n - 1].time_ns, t_half + MS(1000));
  resil_breaker_free(br);
  cfg.half_open_max_wait_to_closed = 2;
  resil_error e;
  br = NULL;
  assert_status(RESIL_EINVAL, resil_breaker_new(&cfg, &br, &e));
  assert_string_equal(e.field, "half_open_max_wait_to_closed");
  resil_manual_clock_free(mc);
}

static void slow_calls_are_split_by_result(void **state) {
  (void)state;
  resil_manual_clock *mc = clock_new();
  for (int timed = 0; timed < 2; timed++) {
    resil_breaker_config cfg;
    p6_config(&cfg, mc);
    cfg.window_type = timed ? RESIL_BREAKER_WINDOW_TIME : RESIL_BREAKER_WINDOW_COUNT;
    cfg.window_size = 3;
    cfg.minimum_calls = 3;
    cfg.failure_rate_threshold_pct = 100;
    cfg.slow_call_duration_ns = MS(10);
    resil_breaker *br = breaker_new(&cfg);
    record_ok(br, fail_o(), MS(10));    /* slow failed */
    record_ok(br, ok_o(), MS(10));      /* slow successful */
    record_ok(br, ok_o(), MS(10) - 1);  /* neither */
    resil_breaker_metrics m = metrics_of(br);
    assert_int_equal(m.slow_calls, 2);
    assert_int_equal(m.slow_failed_calls, 1);
    assert_int_equal(m.slow_successful_calls, 1);
    assert_int_equal(m.total_slow_failed, 1);
    assert_int_equal(m.total_slow_successful, 1);
    if (!timed) {
      /* The slow failure leaves the count window: the split follows. */
      record_ok(br, ok_o(), MS(20));
      m = metrics_of(br);
      assert_int_equal(m.slow_failed_calls, 0);
      assert_int_equal(m.slow_successful_calls, 2);
    } else {
      resil_manual_clock_advance_ns(mc, 3 * RESIL_NS_PER_S);
      record_ok(br, fail_o(), MS(20));
      m = metrics_of(br);
      assert_int_equal(m.buffered_calls, 1);
      assert_int_equal(m.slow_failed_calls, 1);
      assert_int_equal(m.slow_successful_calls, 0);
    }
    assert_int_equal(m.total_slow_failed + m.total_slow_successful,
                     m.total_slow);
    assert_int_equal(m.total_slow_failed, timed ? 2 : 1);
    resil_breaker_free(br);
  }
  resil_manual_clock_free(mc);
}

/* ---- issue 7: sized structs, decisions, human units ---------------------- */

#define OLD_CONFIG_SIZE                                                        \
  (offsetof(resil_breaker_config, alloc) + sizeof(const resil_allocator *))

static void config_is_read_only_up_to_its_struct_size(void **state) {
  (void)state;
  resil_manual_clock *mc = clock_new();
  /* A caller built against the 0.1 field set: init writes only its bytes,
   * new reads only them (the fields it lacks get their defaults). */
  unsigned char raw[sizeof(resil_breaker_config) + 16];
  memset(raw, 0x5a, sizeof raw);
  resil_breaker_config *old = (resil_breaker_config *)(void *)raw;
  resil_breaker_config_init_sized(old, OLD_CONFIG_SIZE);
  assert_int_equal(old->struct_size, OLD_CONFIG_SIZE);
  for (size_t i = OLD_CONFIG_SIZE; i < sizeof raw; i++)
    assert_int_equal(raw[i], 0x5a); /* untouched */
  old->clock = resil_manual_clock_get(mc);
  /* What lies past its size would be invalid if it were read. */
  resil_breaker *br = breaker_new(old);
  resil_breaker_metrics m = metrics_of(br);
  assert_int_equal(m.state, RESIL_BREAKER_CLOSED); /* default initial_state */
  record_ok(br, resil_outcome_http(429), 0); /* a failure: nothing ignored */
  assert_int_equal(metrics_of(br).total_failures, 1);
  assert_int_equal(metrics_of(br).total_ignored, 0);
  resil_breaker_free(br);

  /* Never passed through init. */
  resil_breaker_config cfg;
  memset(&cfg, 0, sizeof cfg);
  resil_error e;
  br = NULL;
  assert_status(RESIL_EINVAL, resil_breaker_new(&cfg, &br, &e));
  assert_null(br);
  assert_string_equal(e.field, "struct_size");
  assert_non_null(strstr(e.msg, "call resil_breaker_config_init()"));
  /* A newer caller's longer struct: zero tail accepted, else refused. */
  memset(raw, 0, sizeof raw);
  resil_breaker_config_init_sized(old, sizeof raw);
  assert_int_equal(old->struct_size, sizeof(resil_breaker_config)); /* written */
  old->struct_size = sizeof raw; /* as a newer header's init would say */
  br = breaker_new(old);
  resil_breaker_free(br);
  raw[sizeof raw - 1] = 1;
  assert_status(RESIL_EINVAL, resil_breaker_new(old, &br, &e));
  assert_string_equal(e.field, "struct_size");
  resil_manual_clock_free(mc);
}

static void metrics_and_events_are_written_only_up_to_their_size(void **state) {
  (void)state;
  resil_manual_clock *mc = clock_new();
  resil_breaker_config cfg;
  p6_config(&cfg, mc);
  resil_breaker *br = breaker_new(&cfg);
  record_ok(br, fail_o(), 0);
  record_ok(br, fail_o(), 0);
  /* A 0.1-sized metrics struct ends with total_transitions. */
  size_t old = offsetof(resil_breaker_metrics, total_transitions) +
               sizeof(uint64_t);
  unsigned char raw[sizeof(resil_breaker_metrics) + 8];
  memset(raw, 0x5a, sizeof raw);
  assert_status(RESIL_OK, resil_breaker_get_metrics_sized(
                              br, (resil_breaker_metrics *)(void *)raw, old));
  resil_breaker_metrics m;
  memcpy(&m, raw, old);
  assert_int_equal(m.struct_size, old);
  assert_int_equal(m.total_failures, 2);
  assert_int_equal(m.state, RESIL_BREAKER_OPEN);
  for (size_t i = old; i < sizeof raw; i++)
    assert_int_equal(raw[i], 0x5a);
  assert_status(RESIL_EINVAL, resil_breaker_get_metrics_sized(
                                  br, (resil_breaker_metrics *)(void *)raw, 2));
  m = metrics_of(br);
  assert_int_equal(m.struct_size, sizeof m);

  /* Events: an array of the caller's element size. */
  size_t esz = offsetof(resil_breaker_event, cause) + sizeof(int);
  unsigned char evs[3 * sizeof(resil_breaker_event)];
  memset(evs, 0x5a, sizeof evs);
  assert_int_equal(resil_breaker_events_sized(
                       br, (resil_breaker_event *)(void *)evs, 3, esz),
                   1);
  resil_breaker_event e;
  memcpy(&e, evs, esz);
  assert_int_equal(e.struct_size, esz);
  assert_int_equal(e.seq, 1);
  assert_int_equal(e.to, RESIL_BREAKER_OPEN);
  assert_int_equal(evs[esz], 0x5a);
  assert_int_equal(resil_breaker_events_sized(
                       br, (resil_breaker_event *)(void *)evs, 3, 8),
                   0);
  resil_breaker_event full[2];
  assert_int_equal(resil_breaker_events(br, full, 2), 1);
  assert_int_equal(full[0].struct_size, sizeof full[0]);
  resil_breaker_free(br);
  resil_manual_clock_free(mc);
}

static void duration_errors_speak_human_units(void **state) {
  (void)state;
  resil_breaker_config cfg;
  resil_breaker *br = NULL;
  resil_error e;
  resil_breaker_config_init(&cfg);
  cfg.open_wait_ns = 200;
  assert_status(RESIL_EINVAL, resil_breaker_new(&cfg, &br, &e));
  assert_string_equal(e.msg, "open_wait_ns: must be at least 1 ms, got 200 ns");
  assert_int_equal(e.min, MS(1));
  assert_int_equal(e.got, 200);
  resil_breaker_config_init(&cfg);
  cfg.open_wait_ns = RESIL_NS_PER_S * 90;
  cfg.open_wait_max_ns = RESIL_NS_PER_S * 30;
  assert_status(RESIL_EINVAL, resil_breaker_new(&cfg, &br, &e));
  assert_string_equal(
      e.msg, "open_wait_max_ns: must be 0 or at least open_wait_ns (90 s), "
             "got 30 s");
  resil_breaker_config_init(&cfg);
  cfg.slow_call_duration_ns = 0;
  assert_status(RESIL_EINVAL, resil_breaker_new(&cfg, &br, &e));
  assert_string_equal(e.msg,
                      "slow_call_duration_ns: must be at least 1 ns, got 0 ns");
  resil_breaker_config_init(&cfg);
  cfg.half_open_max_wait_ns = -MS(2);
  assert_status(RESIL_EINVAL, resil_breaker_new(&cfg, &br, &e));
  assert_string_equal(e.msg, "half_open_max_wait_ns: must be 0 (no limit) or "
                             "at least 1 ns, got -2 ms");
  assert_null(br);
}

static void run_form_refuses_an_uninitialised_context(void **state) {
  (void)state;
  resil_manual_clock *mc = clock_new();
  resil_breaker_config cfg;
  p6_config(&cfg, mc);
  resil_breaker *br = breaker_new(&cfg);
  call_arg a = {.mc = mc};
  a.out = ok_o();
  resil_ctx junk;
  memset(&junk, 0, sizeof junk);
  resil_outcome o = resil_breaker_run(br, &junk, business_call, &a);
  assert_int_equal(o.kind, RESIL_NOT_SENT);
  assert_int_equal(o.reason, RESIL_REASON_LOCAL_ERROR);
  assert_int_equal(a.runs, 0);
  assert_int_equal(metrics_of(br).total_calls, 0);
  resil_ctx ctx;
  resil_ctx_init(&ctx);
  o = resil_breaker_run(br, &ctx, business_call, &a);
  assert_int_equal(o.kind, RESIL_ANSWERED);
  assert_int_equal(a.runs, 1);
  assert_ptr_equal(a.seen_ctx, &ctx);
  resil_breaker_free(br);
  resil_manual_clock_free(mc);
}

/* The internal _at entry points (the chain's) date transitions with the
 * reading they are given; the manual clock stays at 0 throughout, so a
 * breaker that read its own clock would stay OPEN. */
static void at_entry_points_use_the_given_reading(void **state) {
  (void)state;
  resil_manual_clock *mc = clock_new();
  resil_breaker_config cfg;
  p6_config(&cfg, mc);
  resil_breaker *br = breaker_new(&cfg);
  assert_ptr_equal(resil__breaker_clock(br), resil_manual_clock_get(mc));
  /* A manual clock has resolution 0: its (only) reading serves. */
  assert_int_equal(resil__breaker_coarse_durations(br), 1);
  resil_outcome f = fail_o();
  resil_breaker_permit p;
  for (int i = 0; i < 2; i++) {
    assert_int_equal(resil__breaker_acquire_at(br, &p, RESIL__NO_NOW),
                     RESIL_DECISION_GO);
    assert_status(RESIL_OK,
                  resil__breaker_record_at(br, &p, &f, 0, MS(1000) + i));
  }
  assert_int_equal(resil_breaker_state(br), RESIL_BREAKER_OPEN);
  assert_int_equal(metrics_of(br).state_since_ns, MS(1000) + 1);
  assert_int_equal(resil__breaker_acquire_at(br, &p, MS(1100)),
                   RESIL_DECISION_DENY);
  assert_int_equal(resil__breaker_acquire_at(br, &p, MS(1150) + 1),
                   RESIL_DECISION_GO);
  assert_int_equal(resil_breaker_state(br), RESIL_BREAKER_HALF_OPEN);
  resil_outcome ok = ok_o();
  assert_status(RESIL_OK, resil__breaker_record_at(br, &p, &ok, 0, MS(1200)));
  resil_breaker_metrics m = metrics_of(br);
  assert_int_equal(m.state, RESIL_BREAKER_CLOSED);
  assert_int_equal(m.state_since_ns, MS(1200));
  assert_int_equal(m.total_not_permitted, 1);
  /* Misuse as in the public forms. */
  assert_int_equal(resil__breaker_acquire_at(NULL, &p, 0), RESIL_DECISION_DENY);
  assert_int_equal(resil__breaker_acquire_at(br, NULL, 0), RESIL_DECISION_DENY);
  assert_int_equal(resil__breaker_record_at(NULL, &p, &ok, 0, 0), RESIL_EMISUSE);
  assert_int_equal(resil__breaker_record_at(br, &p, &ok, -1, 0), RESIL_EINVAL);
  assert_null(resil__breaker_clock(NULL));
  resil_breaker_free(br);
  resil_manual_clock_free(mc);
}

/* In CLOSED a success is checked against the thresholds only when it can
 * have reached one: when it is the result that brings the window to its
 * minimum number of calls (the failures before it already reach the
 * rate), through both the split and the run form; a success into a window
 * at its minimum, or a run of successes after failures left it, never
 * opens. */
static void success_that_completes_the_minimum_opens_on_the_rate(void **state) {
  (void)state;
  resil_manual_clock *mc = clock_new();
  for (int run_form = 0; run_form < 2; run_form++) {
    resil_breaker_config cfg;
    resil_breaker_config_init(&cfg);
    cfg.window_size = 6;
    cfg.minimum_calls = 4;
    cfg.failure_rate_threshold_pct = 50;
    cfg.clock = resil_manual_clock_get(mc);
    resil_breaker *br = breaker_new(&cfg);
    call_arg a;
    memset(&a, 0, sizeof a);
    a.mc = mc;
    /* F F S: 3 of the 4 calls needed. */
    record_ok(br, fail_o(), 0);
    record_ok(br, fail_o(), 0);
    record_ok(br, ok_o(), 0);
    assert_int_equal(resil_breaker_state(br), RESIL_BREAKER_CLOSED);
    /* The fourth, a success, makes 2 of 4 = 50 %: OPEN. */
    if (run_form)
      assert_int_equal(run_call(br, &a, ok_o(), 0).kind, RESIL_ANSWERED);
    else
      record_ok(br, ok_o(), 0);
    assert_int_equal(resil_breaker_state(br), RESIL_BREAKER_OPEN);
    resil_breaker_metrics m = metrics_of(br);
    assert_int_equal(m.buffered_calls, 4);
    assert_int_equal(m.failed_calls, 2);
    resil_breaker_free(br);

    /* F S S S: 25 % at the minimum; more successes, then failures below
     * the rate until they reach it. */
    br = breaker_new(&cfg);
    record_ok(br, fail_o(), 0);
    for (int i = 0; i < 9; i++) {
      if (run_form)
        assert_int_equal(run_call(br, &a, ok_o(), 0).kind, RESIL_ANSWERED);
      else
        record_ok(br, ok_o(), 0);
      assert_int_equal(resil_breaker_state(br), RESIL_BREAKER_CLOSED);
    }
    m = metrics_of(br);
    assert_int_equal(m.buffered_calls, 6);
    assert_int_equal(m.failed_calls, 0); /* the failure left the window */
    record_ok(br, fail_o(), 0);
    record_ok(br, fail_o(), 0); /* 2 of 6 */
    assert_int_equal(resil_breaker_state(br), RESIL_BREAKER_CLOSED);
    record_ok(br, fail_o(), 0); /* 3 of 6 = 50 % */
    assert_int_equal(resil_breaker_state(br), RESIL_BREAKER_OPEN);
    resil_breaker_free(br);
  }
  resil_manual_clock_free(mc);
}

/* On the system clock (cfg.clock NULL) with slow calls of a second, the
 * run form measures on the coarse clock, read inline: the reading it takes
 * before the call is the system clock's coarse time (between two coarse
 * readings around the call; a precise reading runs ahead of them). */
static void run_form_on_the_system_clock_measures_on_its_coarse_reading(
    void **state) {
  (void)state;
  const resil_clock *sys = resil_clock_system();
  if (!sys->coarse_ns)
    skip();
  resil_breaker_config cfg;
  resil_breaker_config_init(&cfg);
  cfg.slow_call_duration_ns = RESIL_S(1);
  resil_breaker *br = breaker_new(&cfg);
  assert_ptr_equal(resil__breaker_clock(br), sys);
  assert_int_equal(resil__breaker_coarse_durations(br), 1);
  call_arg a;
  memset(&a, 0, sizeof a);
  a.out = resil_outcome_ok();
  for (int i = 0; i < 50; i++) {
    int64_t before = sys->coarse_ns(sys->self), t0 = 0;
    resil_outcome o = resil__breaker_run_at(br, NULL, business_call, &a, &t0);
    int64_t after = sys->coarse_ns(sys->self);
    assert_int_equal(o.kind, RESIL_ANSWERED);
    if (t0 < before || t0 > after)
      fail_msg("reading %lld outside the coarse readings %lld..%lld",
               (long long)t0, (long long)before, (long long)after);
    assert_ptr_equal(a.seen_clock, sys);
  }
  resil_breaker_metrics m = metrics_of(br);
  assert_int_equal(m.total_calls, 50);
  assert_int_equal(m.total_slow, 0);
  resil_breaker_free(br);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(config_init_writes_resilience4j_defaults),
      cmocka_unit_test(new_rejects_every_invalid_field_with_range_and_value),
      cmocka_unit_test(p6_count_window_opens_probes_reopens_and_closes),
      cmocka_unit_test(p7_half_open_admits_exactly_the_permitted_probe),
      cmocka_unit_test(
          p8_time_window_opens_on_slow_calls_with_failure_rate_zero),
      cmocka_unit_test(half_open_decides_after_min_of_minimum_and_permitted),
      cmocka_unit_test(result_of_an_older_generation_changes_nothing),
      cmocka_unit_test(half_open_max_wait_returns_to_open_at_its_instant),
      cmocka_unit_test(half_open_max_wait_is_applied_on_record_and_acquire),
      cmocka_unit_test(half_open_max_wait_zero_means_no_limit),
      cmocka_unit_test(open_wait_ends_when_fully_elapsed),
      cmocka_unit_test(without_automatic_timer_open_waits_for_an_acquire),
      cmocka_unit_test(
          automatic_transition_takes_effect_at_its_scheduled_instant),
      cmocka_unit_test(
          idle_automatic_cycles_are_all_delivered_at_their_instants),
      cmocka_unit_test(open_wait_grows_per_consecutive_open),
      cmocka_unit_test(growing_wait_truncates_each_step_to_whole_milliseconds),
      cmocka_unit_test(forced_open_counts_as_a_consecutive_open),
      cmocka_unit_test(listeners_receive_every_event_of_a_long_catch_up),
      cmocka_unit_test(manual_transitions_follow_resilience4j_table),
      cmocka_unit_test(manual_open_keeps_the_window_others_restart_it),
      cmocka_unit_test(reset_closes_in_a_new_generation_and_keeps_totals),
      cmocka_unit_test(disabled_permits_everything_and_records_nothing),
      cmocka_unit_test(forced_open_rejects_everything_until_told),
      cmocka_unit_test(metrics_only_records_and_reports_each_excursion_once),
      cmocka_unit_test(client_error_is_recorded_as_success),
      cmocka_unit_test(failure_classes_are_configurable),
      cmocka_unit_test(
          rejected_outcome_counts_nowhere_and_hands_back_the_probe),
      cmocka_unit_test(release_hands_back_a_probe_and_counts_nowhere),
      cmocka_unit_test(slow_success_is_counted_as_slow),
      cmocka_unit_test(rates_report_not_enough_data_explicitly),
      cmocka_unit_test(time_window_minimum_may_exceed_its_seconds),
      cmocka_unit_test(event_ring_keeps_the_most_recent_oldest_first),
      cmocka_unit_test(listeners_run_on_the_calling_thread_without_the_lock),
      cmocka_unit_test(listener_count_is_bounded),
      cmocka_unit_test(run_form_passes_the_context_and_a_default_one),
      cmocka_unit_test(at_entry_points_use_the_given_reading),
      cmocka_unit_test(run_form_measures_the_call_for_slow_detection),
      cmocka_unit_test(invalid_arguments_are_reported_not_crashed_on),
      cmocka_unit_test(names_are_static_text),
      cmocka_unit_test(breaker_with_100_call_window_fits_in_512_bytes),
      cmocka_unit_test(allocation_failures_are_reported_and_leak_nothing),
      cmocka_unit_test(manual_transition_to_the_same_state_restarts_it),
      cmocka_unit_test(every_class_can_be_failure_success_or_ignored),
      cmocka_unit_test(ignored_results_hand_back_the_probe_and_never_vote),
      cmocka_unit_test(initial_state_is_generation_one_without_an_event),
      cmocka_unit_test(open_for_waits_the_given_duration),
      cmocka_unit_test(initial_half_open_fails_into_the_second_wait),
      cmocka_unit_test(half_open_max_wait_may_lead_to_closed),
      cmocka_unit_test(slow_calls_are_split_by_result),
      cmocka_unit_test(config_is_read_only_up_to_its_struct_size),
      cmocka_unit_test(metrics_and_events_are_written_only_up_to_their_size),
      cmocka_unit_test(duration_errors_speak_human_units),
      cmocka_unit_test(success_that_completes_the_minimum_opens_on_the_rate),
      cmocka_unit_test(
          run_form_on_the_system_clock_measures_on_its_coarse_reading),
      cmocka_unit_test(run_form_refuses_an_uninitialised_context),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
