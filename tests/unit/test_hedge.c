/* The hedge policy's split form on the manual clock: safety by
 * construction, the hedge schedule and its bounds, winners and losers, the
 * retry budget, the percentile delay with its floor, cap and minimum
 * samples, and the blocking pass-through. */
#include <stddef.h>
#include <string.h>

#include "test_util.h"

static resil_manual_clock *mc;
static resil_outcome ok200, e503;

static int setup(void **state) {
  (void)state;
  ok200 = resil_outcome_http(200);
  e503 = resil_outcome_http(503);
  return resil_manual_clock_new(0, 0, &mc) == RESIL_OK ? 0 : -1;
}
static int teardown(void **state) {
  (void)state;
  resil_manual_clock_free(mc);
  return 0;
}

static resil_hedge *make(const resil_hedge_config *cfg) {
  resil_hedge *h = NULL;
  resil_error err;
  resil_status st = resil_hedge_new(cfg, &h, &err);
  if (st != RESIL_OK) fail_msg("resil_hedge_new: %s", err.msg);
  return h;
}

static resil_hedge_config base(void) {
  resil_hedge_config cfg;
  resil_hedge_config_init(&cfg);
  cfg.clock = resil_manual_clock_get(mc);
  return cfg;
}

static resil_hedge_metrics metrics(const resil_hedge *h) {
  resil_hedge_metrics m;
  assert_status(RESIL_OK, resil_hedge_get_metrics(h, &m));
  return m;
}

static resil_ctx ctx_with(uint32_t flags) {
  resil_ctx c;
  resil_ctx_init(&c);
  c.flags = flags;
  return c;
}


static void hedge_defaults_and_validation_name_the_field(void **state) {
  (void)state;
  resil_hedge_config cfg = base();
  assert_int_equal(cfg.struct_size, sizeof cfg);
  assert_string_equal(cfg.name, "hedge");
  assert_int_equal(cfg.delay_ns, MS(100));
  assert_int_equal(cfg.delay_percentile_permille, 0);
  assert_int_equal(cfg.min_delay_ns, MS(1));
  assert_int_equal(cfg.max_delay_ns, MS(10000));
  assert_int_equal(cfg.min_samples, 100);
  assert_int_equal(cfg.window_size, 1000);
  assert_int_equal(cfg.max_hedges, 1);
  assert_int_equal(cfg.unacceptable_classes, RESIL_HEDGE_DEFAULT_UNACCEPTABLE);
  assert_null(cfg.budget);
  resil_hedge *h = make(&cfg);
  assert_string_equal(resil_hedge_name(h), "hedge");
  assert_int_equal(resil_hedge_delay_ns(h), MS(100));
  assert_int_equal(resil_hedge_worst_delay_ns(h), MS(100));
  assert_int_equal(resil_hedge_max_hedges(h), 1);
  resil_hedge_free(h);
  resil_hedge_free(NULL);

  resil_error err;
  resil_hedge *out = NULL;
  cfg = base();
  cfg.delay_ns = -1;
  assert_status(RESIL_EINVAL, resil_hedge_new(&cfg, &out, &err));
  assert_string_equal(err.field, "delay_ns");
  assert_true(err.has_range);
  cfg = base();
  cfg.delay_percentile_permille = 1000;
  assert_status(RESIL_EINVAL, resil_hedge_new(&cfg, &out, &err));
  assert_string_equal(err.field, "delay_percentile_permille");
  assert_int_equal(err.max, 999);
  cfg = base();
  cfg.min_delay_ns = MS(50);
  cfg.max_delay_ns = MS(10);
  assert_status(RESIL_EINVAL, resil_hedge_new(&cfg, &out, &err));
  assert_string_equal(err.field, "max_delay_ns");
  cfg = base();
  cfg.window_size = 10;
  cfg.min_samples = 11;
  assert_status(RESIL_EINVAL, resil_hedge_new(&cfg, &out, &err));
  assert_string_equal(err.field, "min_samples");
  assert_int_equal(err.max, 10);
  cfg = base();
  cfg.window_size = RESIL_HEDGE_MAX_WINDOW + 1;
  assert_status(RESIL_EINVAL, resil_hedge_new(&cfg, &out, &err));
  assert_string_equal(err.field, "window_size");
  cfg = base();
  cfg.max_hedges = 0;
  assert_status(RESIL_EINVAL, resil_hedge_new(&cfg, &out, &err));
  assert_string_equal(err.field, "max_hedges");
  cfg.max_hedges = RESIL_HEDGE_MAX_HEDGES + 1;
  assert_status(RESIL_EINVAL, resil_hedge_new(&cfg, &out, &err));
  assert_string_equal(err.field, "max_hedges");
  cfg = base();
  cfg.unacceptable_classes |= RESIL_CLASS_BIT(RESIL_CLASS_SUCCESS);
  assert_status(RESIL_EINVAL, resil_hedge_new(&cfg, &out, &err));
  assert_string_equal(err.field, "unacceptable_classes");
  /* A config never passed through _init. */
  resil_hedge_config raw;
  memset(&raw, 0, sizeof raw);
  assert_status(RESIL_EINVAL, resil_hedge_new(&raw, &out, &err));
  assert_non_null(strstr(err.msg, "call resil_hedge_config_init()"));
  assert_null(out);
}

/* An unkeyed, non-idempotent call is never hedged: passed through with its
 * one attempt, counted. */
static void hedge_unkeyed_write_is_passed_through_and_counted(void **state) {
  (void)state;
  resil_hedge_config cfg = base();
  cfg.max_hedges = 3;
  resil_hedge *h = make(&cfg);
  resil_ctx post = ctx_with(0);
  resil_hedge_call hc;
  int64_t delay = 12345;
  assert_int_equal(resil_hedge_begin(h, &post, &hc, &delay), RESIL_DECISION_DENY);
  assert_int_equal(delay, 12345); /* untouched */
  assert_int_equal(hc.attempts, 1);
  assert_false(hc.state & RESIL_HEDGE_CALL_SAFE);
  /* Even a timer the caller armed anyway sends nothing. */
  resil_manual_clock_advance_ns(mc, MS(500));
  assert_int_equal(resil_hedge_on_timer(h, &hc, &delay), RESIL_DECISION_DENY);
  assert_int_equal(delay, -1);
  assert_int_equal(hc.attempts, 1);
  assert_int_equal(resil_hedge_record(h, &hc, 1, MS(500), &e503), RESIL_HEDGE_LAST);
  /* NULL ctx: flags 0, the same. */
  assert_int_equal(resil_hedge_begin(h, NULL, &hc, &delay), RESIL_DECISION_DENY);
  resil_hedge_metrics m = metrics(h);
  assert_int_equal(m.calls, 2);
  assert_int_equal(m.passed_unsafe, 2);
  assert_int_equal(m.hedges_sent, 0);
  assert_int_equal(m.hedged_calls, 0);
  /* Idempotent or keyed calls are hedged. */
  resil_ctx get = ctx_with(RESIL_CALL_IDEMPOTENT);
  resil_ctx keyed = ctx_with(RESIL_CALL_STABLE_KEY);
  assert_int_equal(resil_hedge_begin(h, &get, &hc, &delay), RESIL_DECISION_WAIT);
  assert_int_equal(delay, MS(100));
  assert_int_equal(resil_hedge_begin(h, &keyed, &hc, &delay), RESIL_DECISION_WAIT);
  assert_int_equal(metrics(h).passed_unsafe, 2);
  resil_hedge_free(h);
}

static void hedge_slow_primary_is_won_by_the_hedge_and_loser_counted(void **state) {
  (void)state;
  resil_hedge_config cfg = base();
  resil_hedge *h = make(&cfg);
  resil_ctx get = ctx_with(RESIL_CALL_IDEMPOTENT);
  resil_hedge_call hc;
  int64_t delay;
  assert_int_equal(resil_hedge_begin(h, &get, &hc, &delay), RESIL_DECISION_WAIT);
  resil_manual_clock_advance_ns(mc, delay);
  assert_int_equal(resil_hedge_on_timer(h, &hc, &delay), RESIL_DECISION_GO);
  assert_int_equal(hc.attempts, 2);
  assert_int_equal(hc.in_flight, 2);
  assert_int_equal(delay, -1); /* max_hedges 1: no further timer */
  assert_int_equal(resil_hedge_on_timer(h, &hc, &delay), RESIL_DECISION_DENY);
  resil_manual_clock_advance_ns(mc, MS(20));
  assert_int_equal(resil_hedge_record(h, &hc, 2, MS(20), &ok200), RESIL_HEDGE_WINNER);
  assert_int_equal(hc.winner, 2);
  assert_true(hc.state & RESIL_HEDGE_CALL_OVER);
  /* The cancelled primary's late record changes nothing. */
  assert_int_equal(resil_hedge_record(h, &hc, 1, MS(900), &ok200), RESIL_HEDGE_IGNORED);
  resil_hedge_metrics m = metrics(h);
  assert_int_equal(m.calls, 1);
  assert_int_equal(m.hedged_calls, 1);
  assert_int_equal(m.hedges_sent, 1);
  assert_int_equal(m.hedges_won, 1);
  assert_int_equal(m.cancelled_losers, 1);
  /* A fast primary: no hedge, nothing cancelled. */
  assert_int_equal(resil_hedge_begin(h, &get, &hc, &delay), RESIL_DECISION_WAIT);
  assert_int_equal(resil_hedge_record(h, &hc, 1, MS(5), &ok200), RESIL_HEDGE_WINNER);
  assert_int_equal(resil_hedge_on_timer(h, &hc, &delay), RESIL_DECISION_DENY);
  m = metrics(h);
  assert_int_equal(m.calls, 2);
  assert_int_equal(m.hedges_sent, 1);
  assert_int_equal(m.cancelled_losers, 1);
  resil_hedge_free(h);
}

static void hedge_sends_at_most_max_hedges_and_waits_for_an_acceptable_answer(
    void **state) {
  (void)state;
  resil_hedge_config cfg = base();
  cfg.max_hedges = 3;
  cfg.delay_ns = MS(10);
  resil_hedge *h = make(&cfg);
  resil_ctx get = ctx_with(RESIL_CALL_IDEMPOTENT);
  resil_hedge_call hc;
  int64_t delay;
  assert_int_equal(resil_hedge_begin(h, &get, &hc, &delay), RESIL_DECISION_WAIT);
  for (int k = 1; k <= 3; k++) {
    assert_int_equal(resil_hedge_on_timer(h, &hc, &delay), RESIL_DECISION_GO);
    assert_int_equal(hc.attempts, (uint32_t)k + 1);
    assert_int_equal(delay, k < 3 ? MS(10) : -1);
  }
  assert_int_equal(resil_hedge_on_timer(h, &hc, &delay), RESIL_DECISION_DENY);
  assert_int_equal(hc.in_flight, 4);
  /* Unacceptable answers keep the call waiting for the others. */
  assert_int_equal(resil_hedge_record(h, &hc, 3, MS(1), &e503), RESIL_HEDGE_KEEP_WAITING);
  /* The same attempt recorded twice: the second is misuse, ignored. */
  assert_int_equal(resil_hedge_record(h, &hc, 3, MS(1), &e503), RESIL_HEDGE_IGNORED);
  assert_int_equal(hc.in_flight, 3);
  resil_outcome timeout = resil_outcome_make(RESIL_UNKNOWN, RESIL_REASON_TIMEOUT);
  assert_int_equal(resil_hedge_record(h, &hc, 1, MS(30), &timeout),
                   RESIL_HEDGE_KEEP_WAITING);
  /* A 404 is an answer: it wins by default. */
  resil_outcome nf = resil_outcome_http(404);
  assert_int_equal(resil_hedge_record(h, &hc, 4, MS(1), &nf), RESIL_HEDGE_WINNER);
  resil_hedge_metrics m = metrics(h);
  assert_int_equal(m.hedges_sent, 3);
  assert_int_equal(m.hedges_won, 1);
  assert_int_equal(m.cancelled_losers, 1); /* attempt 2 */
  /* Every attempt unacceptable: the last one ends the call. */
  assert_int_equal(resil_hedge_begin(h, &get, &hc, &delay), RESIL_DECISION_WAIT);
  assert_int_equal(resil_hedge_on_timer(h, &hc, &delay), RESIL_DECISION_GO);
  assert_int_equal(resil_hedge_record(h, &hc, 1, MS(1), &e503), RESIL_HEDGE_KEEP_WAITING);
  assert_int_equal(resil_hedge_record(h, &hc, 2, MS(1), &e503), RESIL_HEDGE_LAST);
  assert_int_equal(hc.winner, 0);
  /* Nothing in flight any more: no hedge follows. */
  assert_int_equal(resil_hedge_on_timer(h, &hc, &delay), RESIL_DECISION_DENY);
  /* A primary failing before the delay ends the call: no hedge after it. */
  assert_int_equal(resil_hedge_begin(h, &get, &hc, &delay), RESIL_DECISION_WAIT);
  assert_int_equal(resil_hedge_record(h, &hc, 1, MS(1), &e503), RESIL_HEDGE_LAST);
  assert_int_equal(resil_hedge_on_timer(h, &hc, &delay), RESIL_DECISION_DENY);
  m = metrics(h);
  assert_int_equal(m.hedges_sent, 4);
  assert_int_equal(m.hedged_calls, 2);
  /* Records of attempts never started are misuse. */
  assert_int_equal(resil_hedge_begin(h, &get, &hc, &delay), RESIL_DECISION_WAIT);
  assert_int_equal(resil_hedge_record(h, &hc, 2, MS(1), &ok200), RESIL_HEDGE_IGNORED);
  assert_int_equal(resil_hedge_record(h, &hc, 0, MS(1), &ok200), RESIL_HEDGE_IGNORED);
  assert_int_equal(hc.in_flight, 1);
  resil_hedge_free(h);
}

/* A keyed call (the same idempotency key on every hedge) is won only by a
 * 2xx or a 3xx: a 4xx may be the server's answer about the key (409 while
 * the primary holds it PENDING), and must not cancel the transfer doing the
 * work. An unkeyed call keeps the old rule (a 404 to a GET is an answer).
 * One rule, resil_hedge_acceptable, which resil_hedge_record applies. */
static void hedge_keyed_call_is_won_only_by_a_2xx_or_3xx(void **state) {
  (void)state;
  resil_hedge_config cfg = base();
  assert_int_equal(cfg.keyed_unacceptable_classes, RESIL_HEDGE_DEFAULT_KEYED_UNACCEPTABLE);
  cfg.delay_ns = 0;
  cfg.max_hedges = 2;
  resil_hedge *h = make(&cfg);
  resil_ctx keyed = ctx_with(RESIL_CALL_STABLE_KEY);
  resil_ctx get = ctx_with(RESIL_CALL_IDEMPOTENT);
  resil_ctx put = ctx_with(RESIL_CALL_IDEMPOTENT | RESIL_CALL_STABLE_KEY);
  resil_hedge_call hk, hg, hp;
  int64_t delay;
  assert_int_equal(resil_hedge_begin(h, &keyed, &hk, &delay), RESIL_DECISION_WAIT);
  assert_true(hk.state & RESIL_HEDGE_CALL_KEYED);
  assert_int_equal(resil_hedge_begin(h, &get, &hg, &delay), RESIL_DECISION_WAIT);
  assert_false(hg.state & RESIL_HEDGE_CALL_KEYED);
  assert_int_equal(resil_hedge_begin(h, &put, &hp, &delay), RESIL_DECISION_WAIT);
  assert_true(hp.state & RESIL_HEDGE_CALL_KEYED);
  static const int win_keyed[] = {200, 201, 204, 301, 303};
  static const int lose_keyed[] = {400, 404, 409, 422, 408, 425, 429, 500, 503};
  for (size_t i = 0; i < sizeof win_keyed / sizeof win_keyed[0]; i++) {
    resil_outcome o = resil_outcome_http(win_keyed[i]);
    assert_true(resil_hedge_acceptable(h, &hk, &o));
    assert_true(resil_hedge_acceptable(h, &hg, &o));
  }
  for (size_t i = 0; i < sizeof lose_keyed / sizeof lose_keyed[0]; i++) {
    resil_outcome o = resil_outcome_http(lose_keyed[i]);
    assert_false(resil_hedge_acceptable(h, &hk, &o));
    assert_false(resil_hedge_acceptable(h, &hp, &o));
  }
  resil_outcome c409 = resil_outcome_http(409), c404 = resil_outcome_http(404),
                c201 = resil_outcome_http(201), c400 = resil_outcome_http(400);
  /* Unkeyed: a 4xx other than 408/425/429 still wins. */
  assert_true(resil_hedge_acceptable(h, &hg, &c404));
  assert_true(resil_hedge_acceptable(h, &hg, &c409));
  resil_outcome unk = resil_outcome_make(RESIL_UNKNOWN, RESIL_REASON_TIMEOUT);
  assert_false(resil_hedge_acceptable(h, &hk, &unk));
  assert_false(resil_hedge_acceptable(NULL, &hk, &c201));
  assert_false(resil_hedge_acceptable(h, NULL, &c201));
  assert_false(resil_hedge_acceptable(h, &hk, NULL));

  /* The race: two hedges meet the primary's key PENDING (409) and keep
   * waiting; the primary's 201 wins. */
  assert_int_equal(resil_hedge_on_timer(h, &hk, &delay), RESIL_DECISION_GO);
  assert_int_equal(resil_hedge_on_timer(h, &hk, &delay), RESIL_DECISION_GO);
  assert_int_equal(resil_hedge_record(h, &hk, 2, MS(1), &c409), RESIL_HEDGE_KEEP_WAITING);
  assert_int_equal(resil_hedge_record(h, &hk, 3, MS(1), &c409), RESIL_HEDGE_KEEP_WAITING);
  assert_int_equal(resil_hedge_record(h, &hk, 1, MS(300), &c201), RESIL_HEDGE_WINNER);
  assert_int_equal(hk.winner, 1);
  /* The same race unkeyed: the 409 wins (the old rule, unchanged). */
  assert_int_equal(resil_hedge_on_timer(h, &hg, &delay), RESIL_DECISION_GO);
  assert_int_equal(resil_hedge_record(h, &hg, 2, MS(1), &c409), RESIL_HEDGE_WINNER);
  /* A definitive 4xx to every transfer of a keyed call ends it (LAST). */
  assert_int_equal(resil_hedge_on_timer(h, &hp, &delay), RESIL_DECISION_GO);
  assert_int_equal(resil_hedge_record(h, &hp, 2, MS(1), &c400), RESIL_HEDGE_KEEP_WAITING);
  assert_int_equal(resil_hedge_record(h, &hp, 1, MS(2), &c400), RESIL_HEDGE_LAST);
  resil_hedge_metrics m = metrics(h);
  assert_int_equal(m.hedges_won, 1); /* the unkeyed 409 only */
  resil_hedge_free(h);

  /* The field is validated, and its own: unacceptable_classes does not
   * apply to keyed calls. */
  resil_error err;
  resil_hedge *out = NULL;
  cfg = base();
  cfg.keyed_unacceptable_classes |= RESIL_CLASS_BIT(RESIL_CLASS_SUCCESS);
  assert_status(RESIL_EINVAL, resil_hedge_new(&cfg, &out, &err));
  assert_string_equal(err.field, "keyed_unacceptable_classes");
  cfg = base();
  cfg.keyed_unacceptable_classes = RESIL_CLASS_BIT(RESIL_CLASS_UNKNOWN);
  cfg.unacceptable_classes = RESIL_HEDGE_DEFAULT_KEYED_UNACCEPTABLE;
  h = make(&cfg);
  assert_int_equal(resil_hedge_begin(h, &keyed, &hk, &delay), RESIL_DECISION_WAIT);
  assert_true(resil_hedge_acceptable(h, &hk, &c409));
  assert_int_equal(resil_hedge_begin(h, &get, &hg, &delay), RESIL_DECISION_WAIT);
  assert_false(resil_hedge_acceptable(h, &hg, &c404));
  resil_hedge_free(h);
  /* A caller compiled before the field existed gets the keyed default. */
  cfg = base();
  cfg.keyed_unacceptable_classes = 0;
  cfg.struct_size = offsetof(resil_hedge_config, keyed_unacceptable_classes);
  h = make(&cfg);
  assert_int_equal(resil_hedge_begin(h, &keyed, &hk, &delay), RESIL_DECISION_WAIT);
  assert_false(resil_hedge_acceptable(h, &hk, &c409));
  resil_hedge_free(h);
}

static void hedge_spends_the_retry_budget_and_stops_when_refused(void **state) {
  (void)state;
  resil_retry_budget_config bc;
  resil_retry_budget_config_init(&bc);
  bc.percent_can_retry_pct = 100; /* one retry per logical call */
  bc.min_retries_per_s = 0;
  bc.clock = resil_manual_clock_get(mc);
  resil_retry_budget *b = NULL;
  assert_status(RESIL_OK, resil_retry_budget_new(&bc, &b, NULL));
  resil_hedge_config cfg = base();
  cfg.max_hedges = 2;
  cfg.budget = b;
  cfg.deposit_calls = 1;
  resil_hedge *h = make(&cfg);
  assert_true(resil_hedge_has_budget(h));
  resil_ctx get = ctx_with(RESIL_CALL_IDEMPOTENT);
  resil_hedge_call hc;
  int64_t delay;
  /* One deposit: the first hedge goes, the second is refused. */
  assert_int_equal(resil_hedge_begin(h, &get, &hc, &delay), RESIL_DECISION_WAIT);
  assert_int_equal(resil_hedge_on_timer(h, &hc, &delay), RESIL_DECISION_GO);
  assert_true(delay >= 0);
  assert_int_equal(resil_hedge_on_timer(h, &hc, &delay), RESIL_DECISION_DENY);
  assert_true(hc.state & RESIL_HEDGE_CALL_NO_MORE);
  assert_int_equal(resil_hedge_on_timer(h, &hc, &delay), RESIL_DECISION_DENY);
  resil_hedge_metrics m = metrics(h);
  assert_int_equal(m.hedges_sent, 1);
  assert_int_equal(m.refused_by_budget, 1); /* once per call */
  assert_int_equal(resil_retry_budget_balance(b), 0);
  resil_hedge_free(h);

  /* Without deposits (no retry funds it) only the reserve is there: none. */
  cfg.deposit_calls = 0;
  h = make(&cfg);
  assert_int_equal(resil_hedge_begin(h, &get, &hc, &delay), RESIL_DECISION_WAIT);
  assert_int_equal(resil_hedge_on_timer(h, &hc, &delay), RESIL_DECISION_DENY);
  assert_int_equal(metrics(h).refused_by_budget, 1);
  assert_int_equal(metrics(h).hedges_sent, 0);
  /* A retry's deposit funds the hedge (one budget, shared). */
  assert_status(RESIL_OK, resil_retry_budget_deposit(b));
  assert_int_equal(resil_hedge_begin(h, &get, &hc, &delay), RESIL_DECISION_WAIT);
  assert_int_equal(resil_hedge_on_timer(h, &hc, &delay), RESIL_DECISION_GO);
  resil_hedge_free(h);
  resil_retry_budget_free(b);
}

/* Feeds n primary latencies (ANSWERED) through begin/record. */
static void feed(resil_hedge *h, const int64_t *lat, size_t n) {
  resil_ctx get = ctx_with(RESIL_CALL_IDEMPOTENT);
  for (size_t i = 0; i < n; i++) {
    resil_hedge_call hc;
    resil_hedge_begin(h, &get, &hc, NULL);
    assert_int_equal(resil_hedge_record(h, &hc, 1, lat[i], &ok200), RESIL_HEDGE_WINNER);
  }
}

static void hedge_percentile_delay_needs_min_samples_and_keeps_floor_and_cap(
    void **state) {
  (void)state;
  resil_hedge_config cfg = base();
  cfg.delay_percentile_permille = 500; /* p50 */
  cfg.window_size = 10;
  cfg.min_samples = 5;
  cfg.delay_ns = MS(100);
  cfg.min_delay_ns = MS(2);
  cfg.max_delay_ns = MS(400);
  resil_hedge *h = make(&cfg);
  assert_int_equal(resil_hedge_worst_delay_ns(h), MS(400));
  int64_t four[] = {MS(40), MS(10), MS(30), MS(20)};
  feed(h, four, 4);
  /* Below min_samples: the fixed delay. */
  assert_int_equal(resil_hedge_delay_ns(h), MS(100));
  assert_int_equal(metrics(h).samples, 4);
  int64_t fifth[] = {MS(50)};
  feed(h, fifth, 1);
  /* 10 20 30 40 50: nearest rank ceil(0.5 * 5) = 3 -> 30 ms. */
  assert_int_equal(resil_hedge_delay_ns(h), MS(30));
  resil_ctx get = ctx_with(RESIL_CALL_IDEMPOTENT);
  resil_hedge_call hc;
  int64_t delay;
  assert_int_equal(resil_hedge_begin(h, &get, &hc, &delay), RESIL_DECISION_WAIT);
  assert_int_equal(delay, MS(30));
  /* Only ANSWERED primaries are learnt: a refused connection is not the
   * server's latency. */
  resil_outcome refused = resil_outcome_make(RESIL_NOT_SENT, RESIL_REASON_CONNECT_REFUSED);
  assert_int_equal(resil_hedge_record(h, &hc, 1, MS(1), &refused), RESIL_HEDGE_LAST);
  assert_int_equal(metrics(h).samples, 5);
  /* The window keeps the last 10: ten samples of 1000 ms push the others
   * out, and the cap holds. */
  int64_t slow[10];
  for (int i = 0; i < 10; i++) slow[i] = MS(1000);
  feed(h, slow, 10);
  assert_int_equal(metrics(h).samples, 10);
  assert_int_equal(resil_hedge_delay_ns(h), MS(400));
  /* Ten fast ones: the floor holds. */
  int64_t fast[10];
  for (int i = 0; i < 10; i++) fast[i] = 1000; /* 1 us */
  feed(h, fast, 10);
  assert_int_equal(resil_hedge_delay_ns(h), MS(2));
  /* Half slow again: p50 of 5 x 1 us + 5 x 300 ms is 1 us -> floor; one
   * more slow makes the 300 ms the median. */
  int64_t mid[6] = {MS(300), MS(300), MS(300), MS(300), MS(300), MS(300)};
  feed(h, mid, 5);
  assert_int_equal(resil_hedge_delay_ns(h), MS(2));
  feed(h, mid, 1);
  assert_int_equal(resil_hedge_delay_ns(h), MS(300));
  resil_hedge_free(h);
}

/* When a hedge wins, the primary it cut short is learnt at its age (a lower
 * bound), so the percentile does not sink. */
static void hedge_learns_the_cut_short_primary_at_its_age(void **state) {
  (void)state;
  resil_hedge_config cfg = base();
  cfg.delay_percentile_permille = 990;
  cfg.window_size = 1;
  cfg.min_samples = 1;
  cfg.min_delay_ns = 0;
  resil_hedge *h = make(&cfg);
  resil_ctx get = ctx_with(RESIL_CALL_IDEMPOTENT);
  resil_hedge_call hc;
  int64_t delay;
  assert_int_equal(resil_hedge_begin(h, &get, &hc, &delay), RESIL_DECISION_WAIT);
  resil_manual_clock_advance_ns(mc, MS(100));
  assert_int_equal(resil_hedge_on_timer(h, &hc, &delay), RESIL_DECISION_GO);
  resil_manual_clock_advance_ns(mc, MS(150));
  /* The hedge answered in 150 ms; the primary has been out for 250 ms. */
  assert_int_equal(resil_hedge_record(h, &hc, 2, MS(150), &ok200), RESIL_HEDGE_WINNER);
  assert_int_equal(metrics(h).samples, 1);
  assert_int_equal(resil_hedge_delay_ns(h), MS(250));
  resil_hedge_free(h);
}

static resil_outcome count_call(void *arg, const resil_ctx *ctx) {
  (void)ctx;
  (*(int *)arg)++;
  return resil_outcome_ok();
}

/* The blocking run form hedges nothing: one attempt, counted apart. */
static void hedge_run_form_passes_through_with_one_attempt(void **state) {
  (void)state;
  resil_hedge_config cfg = base();
  resil_hedge *h = make(&cfg);
  int n = 0;
  resil_ctx get = ctx_with(RESIL_CALL_IDEMPOTENT);
  resil_outcome o = resil_hedge_run(h, &get, count_call, &n);
  assert_true(resil_outcome_is_success(&o));
  assert_int_equal(n, 1);
  resil_hedge_metrics m = metrics(h);
  assert_int_equal(m.calls, 1);
  assert_int_equal(m.passed_blocking, 1);
  assert_int_equal(m.hedges_sent, 0);
  o = resil_hedge_run(h, &get, NULL, &n);
  assert_int_equal(o.kind, RESIL_NOT_SENT);
  assert_int_equal(o.reason, RESIL_REASON_LOCAL_ERROR);
  o = resil_hedge_run(NULL, &get, count_call, &n);
  assert_int_equal(o.reason, RESIL_REASON_LOCAL_ERROR);
  assert_int_equal(n, 1);
  resil_hedge_free(h);
}

static void hedge_misuse_fails_closed_and_counts_nothing(void **state) {
  (void)state;
  resil_hedge_config cfg = base();
  resil_hedge *h = make(&cfg);
  resil_ctx get = ctx_with(RESIL_CALL_IDEMPOTENT);
  resil_hedge_call hc;
  int64_t d;
  assert_int_equal(resil_hedge_begin(NULL, &get, &hc, &d), RESIL_DECISION_DENY);
  assert_int_equal(resil_hedge_begin(h, &get, NULL, &d), RESIL_DECISION_DENY);
  resil_ctx bad;
  memset(&bad, 0, sizeof bad);
  assert_int_equal(resil_hedge_begin(h, &bad, &hc, &d), RESIL_DECISION_DENY);
  assert_int_equal(resil_hedge_on_timer(NULL, &hc, &d), RESIL_DECISION_DENY);
  assert_int_equal(resil_hedge_on_timer(h, NULL, &d), RESIL_DECISION_DENY);
  assert_int_equal(resil_hedge_record(NULL, &hc, 1, 0, &ok200), RESIL_HEDGE_IGNORED);
  assert_int_equal(resil_hedge_record(h, &hc, 1, 0, NULL), RESIL_HEDGE_IGNORED);
  resil_hedge_call junk;
  memset(&junk, 0, sizeof junk); /* never through begin */
  assert_int_equal(resil_hedge_on_timer(h, &junk, &d), RESIL_DECISION_DENY);
  resil_hedge_metrics m = metrics(h);
  assert_int_equal(m.calls + m.hedges_sent + m.passed_unsafe, 0);
  assert_status(RESIL_EMISUSE, resil_hedge_get_metrics(NULL, &m));
  assert_status(RESIL_EINVAL, resil_hedge_get_metrics(h, NULL));
  assert_int_equal(resil_hedge_delay_ns(NULL), 0);
  assert_int_equal(resil_hedge_max_hedges(NULL), 0);
  assert_null(resil_hedge_name(NULL));
  resil_hedge_free(h);
}

static void hedge_allocation_failures_leak_nothing(void **state) {
  (void)state;
  resil_hedge_config cfg = base();
  cfg.name = "search";
  cfg.delay_percentile_permille = 950;
  long n = 1;
  for (;; n++) {
    test_alloc ta;
    test_alloc_init(&ta, n);
    cfg.alloc = &ta.a;
    resil_hedge *h = NULL;
    resil_status st = resil_hedge_new(&cfg, &h, NULL);
    if (st == RESIL_OK) {
      assert_string_equal(resil_hedge_name(h), "search");
      resil_hedge_free(h);
      assert_int_equal(ta.live, 0);
      break;
    }
    assert_status(RESIL_ENOMEM, st);
    assert_null(h);
    assert_int_equal(ta.live, 0);
  }
  assert_true(n > 3);
}

/* ---- the event listener (Since 0.2) ------------------------------------- */

typedef struct ev_log {
  size_t n;
  resil_hedge_event ev[16];
} ev_log;

static void on_ev(void *user, const resil_hedge_event *ev) {
  ev_log *l = user;
  assert_int_equal(ev->struct_size, sizeof(resil_hedge_event));
  if (l->n < 16) l->ev[l->n++] = *ev;
}

/* Every kind comes from the split form itself, with its hedge number, the
 * delay used, the time since the primary and the outcome. */
static void hedge_split_form_tells_its_listener_every_event(void **state) {
  (void)state;
  resil_retry_budget_config bc;
  resil_retry_budget_config_init(&bc);
  bc.percent_can_retry_pct = 100; /* one hedge per call */
  bc.min_retries_per_s = 0;
  bc.clock = resil_manual_clock_get(mc);
  resil_retry_budget *b = NULL;
  assert_status(RESIL_OK, resil_retry_budget_new(&bc, &b, NULL));
  ev_log l;
  memset(&l, 0, sizeof l);
  resil_hedge_config cfg = base();
  cfg.name = "h1";
  cfg.delay_ns = MS(30);
  cfg.max_hedges = 3;
  cfg.budget = b;
  cfg.deposit_calls = 1;
  cfg.on_event = on_ev;
  cfg.on_event_user = &l;
  resil_hedge *h = make(&cfg);
  resil_ctx post = ctx_with(0), get = ctx_with(RESIL_CALL_IDEMPOTENT);
  resil_hedge_call hc;
  int64_t delay;
  /* A GET: hedge 1 after 30 ms, hedge 2 refused by the budget, hedge 1
   * wins, the primary loses. */
  l.n = 0;
  assert_int_equal(resil_hedge_begin(h, &get, &hc, &delay), RESIL_DECISION_WAIT);
  assert_int_equal(hc.delay_ns, MS(30));
  resil_manual_clock_advance_ns(mc, MS(30));
  assert_int_equal(resil_hedge_on_timer(h, &hc, &delay), RESIL_DECISION_GO);
  resil_manual_clock_advance_ns(mc, MS(30));
  assert_int_equal(resil_hedge_on_timer(h, &hc, &delay), RESIL_DECISION_DENY);
  resil_manual_clock_advance_ns(mc, MS(5));
  resil_outcome ok201 = resil_outcome_http(201);
  assert_int_equal(resil_hedge_record(h, &hc, 2, MS(35), &ok201), RESIL_HEDGE_WINNER);
  assert_int_equal(l.n, 4);
  assert_int_equal(l.ev[0].kind, RESIL_HEDGE_EVENT_SENT);
  assert_int_equal(l.ev[0].hedge, 1);
  assert_int_equal(l.ev[0].delay_ns, MS(30));
  assert_int_equal(l.ev[0].elapsed_ns, MS(30));
  assert_int_equal(l.ev[0].has_outcome, 0);
  assert_int_equal(l.ev[1].kind, RESIL_HEDGE_EVENT_REJECTED);
  assert_int_equal(l.ev[1].hedge, 2);
  assert_int_equal(l.ev[1].elapsed_ns, MS(60));
  assert_int_equal(l.ev[1].has_outcome, 1);
  assert_int_equal(l.ev[1].outcome.kind, RESIL_REJECTED);
  assert_int_equal(l.ev[1].outcome.reason, RESIL_REASON_RETRY_BUDGET);
  assert_int_equal(l.ev[2].kind, RESIL_HEDGE_EVENT_WON);
  assert_int_equal(l.ev[2].hedge, 1);
  assert_int_equal(l.ev[2].has_outcome, 1);
  assert_int_equal(l.ev[2].outcome.http_status, 201);
  assert_int_equal(l.ev[2].elapsed_ns, MS(65));
  assert_int_equal(l.ev[3].kind, RESIL_HEDGE_EVENT_CANCELLED_LOSER);
  assert_int_equal(l.ev[3].hedge, 0);
  assert_int_equal(l.ev[3].has_outcome, 0);
  /* The late loser's record is IGNORED: nothing more. */
  assert_int_equal(resil_hedge_record(h, &hc, 1, MS(70), &ok200), RESIL_HEDGE_IGNORED);
  assert_int_equal(l.n, 4);

  /* An unkeyed write: passed through (its deposit funds the next hedge). */
  l.n = 0;
  assert_int_equal(resil_hedge_begin(h, &post, &hc, &delay), RESIL_DECISION_DENY);
  assert_int_equal(l.n, 1);
  assert_int_equal(l.ev[0].kind, RESIL_HEDGE_EVENT_PASSED_UNSAFE);
  assert_string_equal(l.ev[0].name, "h1");
  assert_int_equal(l.ev[0].has_outcome, 0);
  assert_int_equal(resil_hedge_record(h, &hc, 1, MS(1), &ok200), RESIL_HEDGE_WINNER);
  assert_int_equal(l.n, 1); /* an unhedged call's win says nothing */

  /* A hedge the caller's other policies refused (recorded REJECTED), then
   * the primary wins: WON for hedge 0, no loser. */
  l.n = 0;
  assert_int_equal(resil_hedge_begin(h, &get, &hc, &delay), RESIL_DECISION_WAIT);
  assert_int_equal(resil_hedge_on_timer(h, &hc, &delay), RESIL_DECISION_GO);
  resil_outcome open = resil_outcome_make(RESIL_REJECTED, RESIL_REASON_BREAKER_OPEN);
  assert_int_equal(resil_hedge_record(h, &hc, 2, 0, &open), RESIL_HEDGE_KEEP_WAITING);
  assert_int_equal(resil_hedge_record(h, &hc, 1, MS(40), &ok200), RESIL_HEDGE_WINNER);
  assert_int_equal(l.n, 3);
  assert_int_equal(l.ev[0].kind, RESIL_HEDGE_EVENT_SENT);
  assert_int_equal(l.ev[1].kind, RESIL_HEDGE_EVENT_REJECTED);
  assert_int_equal(l.ev[1].hedge, 1);
  assert_int_equal(l.ev[1].outcome.reason, RESIL_REASON_BREAKER_OPEN);
  assert_int_equal(l.ev[2].kind, RESIL_HEDGE_EVENT_WON);
  assert_int_equal(l.ev[2].hedge, 0);
  assert_int_equal(l.ev[2].outcome.http_status, 200);
  resil_hedge_metrics m = metrics(h);
  assert_int_equal(m.passed_unsafe, 1);
  assert_int_equal(m.hedges_sent, 2);
  assert_int_equal(m.hedges_won, 1);
  assert_int_equal(m.cancelled_losers, 1);
  assert_int_equal(m.refused_by_budget, 1);
  resil_hedge_free(h);
  resil_retry_budget_free(b);
}

/* Listeners added after creation (resil_hedge_listener_add): called after
 * the config's, once per registration, gone once removed; misuse codes. */
static void hedge_listeners_added_after_creation_get_every_event(void **state) {
  (void)state;
  ev_log cfgl, l1, l2;
  memset(&cfgl, 0, sizeof cfgl);
  memset(&l1, 0, sizeof l1);
  memset(&l2, 0, sizeof l2);
  resil_hedge_config cfg = base();
  cfg.on_event = on_ev;
  cfg.on_event_user = &cfgl;
  resil_hedge *h = make(&cfg);
  resil_ctx post = ctx_with(0);
  resil_hedge_call hc;
  assert_status(RESIL_EMISUSE, resil_hedge_listener_add(NULL, on_ev, &l1));
  assert_status(RESIL_EINVAL, resil_hedge_listener_add(h, NULL, &l1));
  assert_status(RESIL_EMISUSE, resil_hedge_listener_remove(NULL, on_ev, &l1));
  assert_status(RESIL_EINVAL, resil_hedge_listener_remove(h, on_ev, &l1));
  assert_status(RESIL_OK, resil_hedge_listener_add(h, on_ev, &l1));
  assert_status(RESIL_OK, resil_hedge_listener_add(h, on_ev, &l2));
  assert_status(RESIL_OK, resil_hedge_listener_add(h, on_ev, &l2));
  assert_int_equal(resil_hedge_begin(h, &post, &hc, NULL), RESIL_DECISION_DENY);
  assert_int_equal(cfgl.n, 1);
  assert_int_equal(l1.n, 1);
  assert_int_equal(l2.n, 2); /* twice registered, twice called */
  assert_int_equal(l1.ev[0].kind, RESIL_HEDGE_EVENT_PASSED_UNSAFE);
  assert_status(RESIL_OK, resil_hedge_listener_remove(h, on_ev, &l2));
  assert_status(RESIL_OK, resil_hedge_listener_remove(h, on_ev, &l1));
  assert_int_equal(resil_hedge_begin(h, &post, &hc, NULL), RESIL_DECISION_DENY);
  assert_int_equal(cfgl.n, 2);
  assert_int_equal(l1.n, 1);
  assert_int_equal(l2.n, 3);
  assert_status(RESIL_OK, resil_hedge_listener_remove(h, on_ev, &l2));
  for (int i = 0; i < RESIL_HEDGE_MAX_LISTENERS; i++)
    assert_status(RESIL_OK, resil_hedge_listener_add(h, on_ev, &l1));
  assert_status(RESIL_ESTATE, resil_hedge_listener_add(h, on_ev, &l1));
  resil_hedge_free(h);
}

/* A keyed call no attempt won: a maybe-executed end without an answer
 * (UNKNOWN) is the call's result whatever came later (a 409 "key PENDING"
 * from a hedge must not hide that the primary's write may have committed);
 * the first one when several; the last answer only when none was. */
static void hedge_no_winner_ends_with_the_first_unknown_not_a_later_4xx(void **state) {
  (void)state;
  resil_hedge_config cfg = base();
  cfg.delay_ns = MS(10);
  cfg.max_hedges = 2;
  resil_hedge *h = make(&cfg);
  resil_ctx keyed = ctx_with(RESIL_CALL_STABLE_KEY);
  resil_outcome timeout = resil_outcome_make(RESIL_UNKNOWN, RESIL_REASON_TIMEOUT);
  resil_outcome reset = resil_outcome_make(RESIL_UNKNOWN, RESIL_REASON_CONNECTION_RESET);
  resil_outcome c409 = resil_outcome_http(409);
  resil_outcome refused = resil_outcome_make(RESIL_NOT_SENT, RESIL_REASON_CONNECT_REFUSED);
  resil_hedge_call hc;
  int64_t delay;

  /* the primary times out after sending, then the hedge meets the key
   * PENDING: the call ends UNKNOWN(TIMEOUT) of attempt 1 */
  assert_int_equal(resil_hedge_begin(h, &keyed, &hc, &delay), RESIL_DECISION_WAIT);
  assert_int_equal(resil_hedge_on_timer(h, &hc, &delay), RESIL_DECISION_GO);
  assert_int_equal(resil_hedge_record(h, &hc, 1, MS(50), &timeout), RESIL_HEDGE_KEEP_WAITING);
  assert_int_equal(hc.result_attempt, 1); /* kept while the call runs */
  assert_int_equal(resil_hedge_record(h, &hc, 2, MS(5), &c409), RESIL_HEDGE_LAST);
  assert_int_equal(hc.result_attempt, 1);
  assert_int_equal(hc.result.kind, RESIL_UNKNOWN);
  assert_int_equal(hc.result.reason, RESIL_REASON_TIMEOUT);

  /* two hedges: hedge 1 reset, the primary 409, hedge 2 timeout: the
   * first UNKNOWN (attempt 2) */
  assert_int_equal(resil_hedge_begin(h, &keyed, &hc, &delay), RESIL_DECISION_WAIT);
  assert_int_equal(resil_hedge_on_timer(h, &hc, &delay), RESIL_DECISION_GO);
  assert_int_equal(resil_hedge_on_timer(h, &hc, &delay), RESIL_DECISION_GO);
  assert_int_equal(resil_hedge_record(h, &hc, 2, MS(5), &reset), RESIL_HEDGE_KEEP_WAITING);
  assert_int_equal(resil_hedge_record(h, &hc, 1, MS(5), &c409), RESIL_HEDGE_KEEP_WAITING);
  assert_int_equal(resil_hedge_record(h, &hc, 3, MS(5), &timeout), RESIL_HEDGE_LAST);
  assert_int_equal(hc.result_attempt, 2);
  assert_int_equal(hc.result.reason, RESIL_REASON_CONNECTION_RESET);

  /* nothing maybe-executed without an answer (a 503 is an answer, a
   * refused connection sent nothing): the last outcome, as before */
  assert_int_equal(resil_hedge_begin(h, &keyed, &hc, &delay), RESIL_DECISION_WAIT);
  assert_int_equal(resil_hedge_on_timer(h, &hc, &delay), RESIL_DECISION_GO);
  assert_int_equal(resil_hedge_on_timer(h, &hc, &delay), RESIL_DECISION_GO);
  assert_int_equal(resil_hedge_record(h, &hc, 1, MS(5), &e503), RESIL_HEDGE_KEEP_WAITING);
  assert_int_equal(resil_hedge_record(h, &hc, 2, MS(5), &refused), RESIL_HEDGE_KEEP_WAITING);
  assert_int_equal(hc.result_attempt, 0);
  assert_int_equal(resil_hedge_record(h, &hc, 3, MS(5), &c409), RESIL_HEDGE_LAST);
  assert_int_equal(hc.result_attempt, 3);
  assert_int_equal(hc.result.http_status, 409);

  /* a winner after an UNKNOWN: the winner is the result */
  assert_int_equal(resil_hedge_begin(h, &keyed, &hc, &delay), RESIL_DECISION_WAIT);
  assert_int_equal(resil_hedge_on_timer(h, &hc, &delay), RESIL_DECISION_GO);
  assert_int_equal(resil_hedge_record(h, &hc, 1, MS(5), &timeout), RESIL_HEDGE_KEEP_WAITING);
  assert_int_equal(resil_hedge_record(h, &hc, 2, MS(5), &ok200), RESIL_HEDGE_WINNER);
  assert_int_equal(hc.result_attempt, 2);
  assert_int_equal(hc.result.http_status, 200);
  resil_hedge_free(h);
}

int main(void) {
#define T(f) cmocka_unit_test_setup_teardown(f, setup, teardown)
  const struct CMUnitTest tests[] = {
      T(hedge_defaults_and_validation_name_the_field),
      T(hedge_unkeyed_write_is_passed_through_and_counted),
      T(hedge_slow_primary_is_won_by_the_hedge_and_loser_counted),
      T(hedge_sends_at_most_max_hedges_and_waits_for_an_acceptable_answer),
      T(hedge_keyed_call_is_won_only_by_a_2xx_or_3xx),
      T(hedge_spends_the_retry_budget_and_stops_when_refused),
      T(hedge_percentile_delay_needs_min_samples_and_keeps_floor_and_cap),
      T(hedge_learns_the_cut_short_primary_at_its_age),
      T(hedge_run_form_passes_through_with_one_attempt),
      T(hedge_misuse_fails_closed_and_counts_nothing),
      T(hedge_allocation_failures_leak_nothing),
      T(hedge_split_form_tells_its_listener_every_event),
      T(hedge_listeners_added_after_creation_get_every_event),
      T(hedge_no_winner_ends_with_the_first_unknown_not_a_later_4xx),
  };
#undef T
  return cmocka_run_group_tests(tests, NULL, NULL);
}
