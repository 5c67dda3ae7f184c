/* Retries and hedges last (DESIGN §2.9): a retry or hedge whose breaker is
 * HALF_OPEN or ramping makes no further attempt (RESIL_STOP_RECOVERING,
 * counted), in the run form, the split form, a chain (the breaker layer
 * inside the retry) and the hedge's timer; without a breaker nothing
 * changes. Time comes from the manual clock. */
#include <string.h>

#include "test_util.h"

typedef struct env {
  resil_manual_clock *mc;
  resil_breaker *br;
} env;

/* A breaker HALF_OPEN with 10 probes whose decision needs 10 results (a
 * few failures do not decide; nor do they open the CLOSED, which needs 20),
 * optionally with a 1 s ramp. */
static void env_new(env *e, int64_t ramp_ns) {
  assert_status(RESIL_OK, resil_manual_clock_new(0, 0, &e->mc));
  resil_breaker_config bc;
  resil_breaker_config_init(&bc);
  bc.window_size = 20;
  bc.minimum_calls = 20;
  bc.half_open_permitted_calls = 10;
  bc.open_wait_ns = MS(100);
  bc.clock = resil_manual_clock_get(e->mc);
  bc.ramp_duration_ns = ramp_ns;
  bc.ramp_min_percent = 100; /* the ramp admits all: only "retries last" shows */
  resil_error err;
  assert_status(RESIL_OK, resil_breaker_new(&bc, &e->br, &err));
  assert_status(RESIL_OK, resil_breaker_transition(e->br, RESIL_BREAKER_OPEN));
  assert_status(RESIL_OK, resil_breaker_transition(e->br, RESIL_BREAKER_HALF_OPEN));
}

static void env_free(env *e) {
  resil_breaker_free(e->br);
  resil_manual_clock_free(e->mc);
}

static resil_retry *retry_new(env *e, resil_breaker *watch, int during) {
  resil_retry_config rc;
  resil_retry_config_init(&rc);
  rc.max_attempts = 3;
  rc.wait_ns = MS(10);
  rc.clock = resil_manual_clock_get(e->mc);
  rc.recovery_breaker = watch;
  rc.retry_during_recovery = during;
  resil_retry *r = NULL;
  resil_error err;
  if (resil_retry_new(&rc, &r, &err) != RESIL_OK)
    fail_msg("retry: %s", err.msg);
  return r;
}

typedef struct counter {
  int calls;
  int status;
} counter;

static resil_outcome answer(void *arg, const resil_ctx *ctx) {
  (void)ctx;
  counter *c = arg;
  c->calls++;
  return resil_outcome_http(c->status);
}

/* The retry's call goes through the breaker (run form). */
typedef struct via {
  resil_breaker *br;
  counter c;
} via;

static resil_outcome through_breaker(void *arg, const resil_ctx *ctx) {
  via *v = arg;
  return resil_breaker_run(v->br, ctx, answer, &v->c);
}

static resil_ctx idem_ctx(void) {
  resil_ctx ctx;
  resil_ctx_init(&ctx);
  ctx.flags = RESIL_CALL_IDEMPOTENT;
  return ctx;
}

static resil_retry_stats stats_of(resil_retry *r) {
  resil_retry_stats s;
  assert_status(RESIL_OK, resil_retry_get_stats(r, &s));
  return s;
}

/* Run form, retry alone with recovery_breaker: HALF_OPEN stops after the
 * first attempt with RECOVERING; without a watched breaker, or with
 * retry_during_recovery, it retries as before. */
static void run_form_stops_recovering_while_half_open(void **state) {
  (void)state;
  env e;
  env_new(&e, 0);
  resil_ctx ctx = idem_ctx();
  via v = {.br = e.br, .c = {0, 503}};
  resil_retry *r = retry_new(&e, e.br, 0);
  resil_outcome o = resil_retry_run(r, &ctx, through_breaker, &v);
  assert_int_equal(o.stop, RESIL_STOP_RECOVERING);
  assert_int_equal(o.attempts, 1);
  assert_int_equal(o.http_status, 503);
  assert_int_equal(v.c.calls, 1);
  resil_retry_stats s = stats_of(r);
  assert_int_equal(s.suppressed_recovering, 1);
  assert_int_equal(s.failed_without_retry, 1);
  for (int i = 0; i < RESIL_RETRY_STOP_SLOTS; i++)
    if (i != RESIL_STOP_SUCCESS)
      assert_int_equal(s.stops[i], 0);
  /* The plain run form (no ctx) takes the same decision. */
  v.c.calls = 0;
  o = resil_retry_run(r, NULL, through_breaker, &v);
  assert_int_equal(o.kind, RESIL_ANSWERED);
  assert_int_equal(v.c.calls, 1); /* NOT idempotent: UNSAFE decides first */
  assert_int_equal(o.stop, RESIL_STOP_UNSAFE);
  resil_retry_free(r);

  /* As before: no breaker watched, or retry_during_recovery. */
  const int during[] = {0, 1};
  for (int k = 0; k < 2; k++) {
    env_free(&e);
    env_new(&e, 0);
    v.br = e.br;
    v.c.calls = 0;
    r = retry_new(&e, k ? e.br : NULL, during[k]);
    o = resil_retry_run(r, &ctx, through_breaker, &v);
    assert_int_equal(o.stop, RESIL_STOP_MAX_ATTEMPTS);
    assert_int_equal(v.c.calls, 3);
    assert_int_equal(stats_of(r).suppressed_recovering, 0);
    resil_retry_free(r);
  }
  env_free(&e);
}

/* Issue 23 R2 in miniature: during the ramp no retry is sent and the
 * suppressed ones are counted; after the ramp retries resume. */
static void ramp_suppresses_retries_until_it_ends(void **state) {
  (void)state;
  env e;
  env_new(&e, MS(1000));
  /* Ten healthy probes close it into the ramp. */
  counter ok = {0, 200};
  for (int i = 0; i < 10; i++)
    resil_breaker_run(e.br, NULL, answer, &ok);
  resil_breaker_metrics m;
  assert_status(RESIL_OK, resil_breaker_get_metrics(e.br, &m));
  assert_int_equal(m.ramping, 1);
  assert_int_equal(resil_breaker_recovering(e.br), 1);
  resil_retry *r = retry_new(&e, e.br, 0);
  resil_ctx ctx = idem_ctx();
  via v = {.br = e.br, .c = {0, 503}};
  for (int i = 0; i < 3; i++) {
    resil_outcome o = resil_retry_run(r, &ctx, through_breaker, &v);
    assert_int_equal(o.stop, RESIL_STOP_RECOVERING);
    resil_manual_clock_advance_ns(e.mc, MS(300));
  }
  assert_int_equal(v.c.calls, 3);
  assert_int_equal(stats_of(r).suppressed_recovering, 3);
  /* 900 ms: still ramping; 1000 ms: over. */
  resil_manual_clock_advance_ns(e.mc, MS(100));
  assert_int_equal(resil_breaker_recovering(e.br), 0);
  v.c.calls = 0;
  resil_outcome o = resil_retry_run(r, &ctx, through_breaker, &v);
  assert_int_equal(o.stop, RESIL_STOP_MAX_ATTEMPTS);
  assert_int_equal(v.c.calls, 3);
  assert_int_equal(stats_of(r).suppressed_recovering, 3);
  resil_retry_free(r);
  env_free(&e);
}

/* Split form: next() says DENY with stop RECOVERING; the state may watch
 * another breaker than the config's (resil_retry_state_watch). */
static void split_form_and_state_watch(void **state) {
  (void)state;
  env e;
  env_new(&e, 0);
  resil_retry *r = retry_new(&e, NULL, 0);
  resil_retry_state *st = NULL;
  assert_status(RESIL_OK, resil_retry_state_new(NULL, &st));
  resil_ctx ctx = idem_ctx();
  assert_status(RESIL_EINVAL, resil_retry_state_watch(st, e.br)); /* not begun */
  assert_int_equal(resil_retry_begin(r, &ctx, st), RESIL_DECISION_GO);
  assert_status(RESIL_OK, resil_retry_state_watch(st, e.br));
  resil_outcome bad = resil_outcome_http(503);
  int64_t wait = -1;
  assert_int_equal(resil_retry_next(r, st, &bad, &wait), RESIL_DECISION_DENY);
  assert_int_equal(resil_retry_result(st).stop, RESIL_STOP_RECOVERING);
  /* Without the watch: the retry waits and retries. */
  assert_int_equal(resil_retry_begin(r, &ctx, st), RESIL_DECISION_GO);
  assert_int_equal(resil_retry_next(r, st, &bad, &wait), RESIL_DECISION_WAIT);
  assert_true(wait == MS(10));
  resil_retry_state_free(st);
  resil_retry_free(r);
  env_free(&e);
}

/* A chain: the retry layer watches the library breaker layer inside it,
 * on the fast path and on the general one (a deadline); a retry above no
 * breaker layer, or with retry_during_recovery, retries as before. */
static void chain_retry_watches_the_breaker_inside_it(void **state) {
  (void)state;
  for (int shape = 0; shape < 4; shape++) {
    env e;
    env_new(&e, 0);
    resil_retry *r = retry_new(&e, NULL, shape == 2);
    resil_chain_config cc;
    resil_chain_config_init(&cc);
    cc.clock = resil_manual_clock_get(e.mc);
    resil_chain *ch = NULL;
    resil_error err;
    assert_status(RESIL_OK, resil_chain_new(&cc, &ch, &err));
    assert_status(RESIL_OK, resil_chain_add_retry(ch, r));
    if (shape != 3)
      assert_status(RESIL_OK, resil_chain_add_breaker(ch, e.br));
    for (int dl = 0; dl < 2; dl++) {
      resil_ctx ctx = idem_ctx();
      if (dl)
        resil_ctx_set_timeout_ns(&ctx, MS(10000));
      counter c = {0, 503};
      resil_outcome o = resil_chain_run(ch, &ctx, answer, &c);
      if (shape <= 1) {
        if (o.stop != RESIL_STOP_RECOVERING)
          fail_msg("shape %d deadline %d: stop %s", shape, dl, resil_stop_name(o.stop));
        assert_int_equal(c.calls, 1);
      } else {
        assert_int_equal(o.stop, RESIL_STOP_MAX_ATTEMPTS);
        assert_int_equal(c.calls, 3);
      }
    }
    assert_int_equal(stats_of(r).suppressed_recovering, shape <= 1 ? 2 : 0);
    resil_chain_free(ch);
    resil_retry_free(r);
    env_free(&e);
  }
}

typedef struct hedge_seen {
  int rejected;
  resil_reason reason;
} hedge_seen;

static void on_hedge_event(void *user, const resil_hedge_event *ev) {
  hedge_seen *s = user;
  if (ev->kind == RESIL_HEDGE_EVENT_REJECTED) {
    s->rejected++;
    s->reason = ev->outcome.reason;
  }
}

/* The hedge's timer sends no hedge while its breaker recovers (counted,
 * a REJECTED(RECOVERING) event), and sends one once it is closed; the
 * per-call watch replaces the config's; hedge_during_recovery restores
 * the old behaviour. */
static void hedge_sends_none_while_the_breaker_recovers(void **state) {
  (void)state;
  env e;
  env_new(&e, 0);
  hedge_seen seen = {0, RESIL_REASON_NONE};
  resil_hedge_config hc;
  resil_hedge_config_init(&hc);
  hc.delay_ns = MS(5);
  hc.max_hedges = 2;
  hc.clock = resil_manual_clock_get(e.mc);
  hc.recovery_breaker = e.br;
  hc.on_event = on_hedge_event;
  hc.on_event_user = &seen;
  resil_hedge *h = NULL;
  resil_error err;
  assert_status(RESIL_OK, resil_hedge_new(&hc, &h, &err));
  resil_ctx ctx = idem_ctx();
  resil_hedge_call call;
  int64_t delay = 0;
  assert_int_equal(resil_hedge_begin(h, &ctx, &call, &delay), RESIL_DECISION_WAIT);
  assert_int_equal(resil_hedge_on_timer(h, &call, &delay), RESIL_DECISION_DENY);
  assert_int_equal(call.attempts, 1);
  /* The call's state says why (how the engine tells this DENY apart). */
  assert_int_equal(call.state & (RESIL_HEDGE_CALL_NO_MORE | RESIL_HEDGE_CALL_RECOVERING),
                   RESIL_HEDGE_CALL_NO_MORE | RESIL_HEDGE_CALL_RECOVERING);
  resil_hedge_metrics hm;
  assert_status(RESIL_OK, resil_hedge_get_metrics(h, &hm));
  assert_int_equal(hm.suppressed_recovering, 1);
  assert_int_equal(hm.hedges_sent, 0);
  assert_int_equal(seen.rejected, 1);
  assert_int_equal(seen.reason, RESIL_REASON_RECOVERING);
  /* A per-call watch on nothing recovering: the hedge goes. */
  resil_breaker_config bc;
  resil_breaker_config_init(&bc);
  resil_breaker *closed = NULL;
  assert_status(RESIL_OK, resil_breaker_new(&bc, &closed, &err));
  assert_int_equal(resil_hedge_begin(h, &ctx, &call, &delay), RESIL_DECISION_WAIT);
  assert_int_equal(call.state & RESIL_HEDGE_CALL_RECOVERING, 0); /* a new call */
  assert_int_equal(resil_hedge_on_timer_watch(h, &call, &delay, closed), RESIL_DECISION_GO);
  assert_int_equal(call.attempts, 2);
  /* Closed: hedges go again. */
  assert_status(RESIL_OK, resil_breaker_transition(e.br, RESIL_BREAKER_CLOSED));
  assert_int_equal(resil_hedge_begin(h, &ctx, &call, &delay), RESIL_DECISION_WAIT);
  assert_int_equal(resil_hedge_on_timer(h, &call, &delay), RESIL_DECISION_GO);
  resil_hedge_free(h);
  /* hedge_during_recovery: as before. */
  assert_status(RESIL_OK, resil_breaker_transition(e.br, RESIL_BREAKER_OPEN));
  assert_status(RESIL_OK, resil_breaker_transition(e.br, RESIL_BREAKER_HALF_OPEN));
  hc.hedge_during_recovery = 1;
  assert_status(RESIL_OK, resil_hedge_new(&hc, &h, &err));
  assert_int_equal(resil_hedge_begin(h, &ctx, &call, &delay), RESIL_DECISION_WAIT);
  assert_int_equal(resil_hedge_on_timer_watch(h, &call, &delay, e.br), RESIL_DECISION_GO);
  resil_hedge_free(h);
  resil_breaker_free(closed);
  env_free(&e);
}

static resil_outcome slow_ok(void *arg, const resil_ctx *ctx) {
  (void)ctx;
  counter *c = arg;
  __atomic_fetch_add(&c->calls, 1, __ATOMIC_RELAXED);
  test_sleep_ms(60);
  return resil_outcome_ok();
}

/* A chain Hedge(Breaker): the hedge layer (blocking form, on a thread
 * pool; its timer runs on real time by design) watches the breaker layer
 * inside it: HALF_OPEN, the 5 ms hedge of a 60 ms call is not sent; once
 * the breaker is closed it is. */
static void chain_hedge_watches_the_breaker_inside_it(void **state) {
  (void)state;
  env e;
  env_new(&e, 0);
  resil_threadpool_config tc;
  resil_threadpool_config_init(&tc);
  tc.threads = 4;
  tc.queue_capacity = 8;
  resil_threadpool *tp = NULL;
  resil_error err;
  assert_status(RESIL_OK, resil_threadpool_new(&tc, &tp, &err));
  resil_hedge_config hc;
  resil_hedge_config_init(&hc);
  hc.delay_ns = MS(5);
  hc.max_hedges = 1;
  hc.executor = tp;
  resil_hedge *h = NULL;
  assert_status(RESIL_OK, resil_hedge_new(&hc, &h, &err));
  resil_chain_config cc;
  resil_chain_config_init(&cc);
  resil_chain *ch = NULL;
  assert_status(RESIL_OK, resil_chain_new(&cc, &ch, &err));
  assert_status(RESIL_OK, resil_chain_add_hedge(ch, h));
  assert_status(RESIL_OK, resil_chain_add_breaker(ch, e.br));
  resil_ctx ctx = idem_ctx();
  counter c = {0, 200};
  resil_outcome o = resil_chain_run(ch, &ctx, slow_ok, &c);
  assert_int_equal(o.kind, RESIL_ANSWERED);
  assert_int_equal(__atomic_load_n(&c.calls, __ATOMIC_RELAXED), 1);
  resil_hedge_metrics hm;
  assert_status(RESIL_OK, resil_hedge_get_metrics(h, &hm));
  assert_int_equal(hm.suppressed_recovering, 1);
  assert_int_equal(hm.hedges_sent, 0);
  assert_status(RESIL_OK, resil_breaker_transition(e.br, RESIL_BREAKER_CLOSED));
  o = resil_chain_run(ch, &ctx, slow_ok, &c);
  assert_int_equal(o.kind, RESIL_ANSWERED);
  assert_status(RESIL_OK, resil_hedge_get_metrics(h, &hm));
  assert_int_equal(hm.hedges_sent, 1);
  resil_chain_free(ch);
  resil_hedge_free(h);
  resil_threadpool_free(tp);
  assert_int_equal(c.calls, 3);
  env_free(&e);
}

static void config_is_validated(void **state) {
  (void)state;
  env e;
  env_new(&e, 0);
  static uint64_t junk[128];
  resil_retry_config rc;
  resil_retry_config_init(&rc);
  assert_true(rc.recovery_breaker == NULL);
  assert_int_equal(rc.retry_during_recovery, 0);
  resil_retry *r = NULL;
  resil_error err;
  rc.recovery_breaker = (resil_breaker *)(void *)junk;
  assert_status(RESIL_EINVAL, resil_retry_new(&rc, &r, &err));
  assert_string_equal(err.field, "recovery_breaker");
  rc.recovery_breaker = e.br;
  rc.retry_during_recovery = 2;
  assert_status(RESIL_EINVAL, resil_retry_new(&rc, &r, &err));
  assert_string_equal(err.field, "retry_during_recovery");
  resil_hedge_config hc;
  resil_hedge_config_init(&hc);
  resil_hedge *h = NULL;
  hc.recovery_breaker = (resil_breaker *)(void *)junk;
  assert_status(RESIL_EINVAL, resil_hedge_new(&hc, &h, &err));
  assert_string_equal(err.field, "recovery_breaker");
  hc.recovery_breaker = NULL;
  hc.hedge_during_recovery = -1;
  assert_status(RESIL_EINVAL, resil_hedge_new(&hc, &h, &err));
  assert_string_equal(err.field, "hedge_during_recovery");
  assert_int_equal(resil_breaker_recovering(NULL), 0);
  assert_int_equal(resil_breaker_recovering(e.br), 1);
  env_free(&e);
}

/* A retry planned while the breaker is OPEN whose wait outlasts the OPEN
 * wait: after its wait the breaker's next call would be the probe, so the
 * retry stops RECOVERING instead of being that probe (run form, and the
 * split form's resil_retry_proceed). */
static void a_retry_whose_wait_outlasts_open_is_not_the_probe(void **state) {
  (void)state;
  resil_manual_clock *mc = NULL;
  assert_status(RESIL_OK, resil_manual_clock_new(0, 0, &mc));
  resil_breaker_config bc;
  resil_breaker_config_init(&bc);
  bc.window_size = 1;
  bc.minimum_calls = 1;
  bc.open_wait_ns = MS(100);
  bc.clock = resil_manual_clock_get(mc);
  resil_breaker *br = NULL;
  assert_status(RESIL_OK, resil_breaker_new(&bc, &br, NULL));
  resil_retry_config rc;
  resil_retry_config_init(&rc);
  rc.max_attempts = 3;
  rc.wait_ns = MS(200);
  rc.clock = resil_manual_clock_get(mc);
  rc.recovery_breaker = br;
  resil_retry *r = NULL;
  assert_status(RESIL_OK, resil_retry_new(&rc, &r, NULL));
  via v = {br, {0, 503}};
  resil_ctx ctx = idem_ctx();
  resil_outcome o = resil_retry_run(r, &ctx, through_breaker, &v);
  assert_int_equal(v.c.calls, 1);
  assert_int_equal(o.stop, RESIL_STOP_RECOVERING);
  assert_int_equal(resil_breaker_state(br), RESIL_BREAKER_OPEN);
  resil_retry_stats rs;
  assert_status(RESIL_OK, resil_retry_get_stats(r, &rs));
  assert_int_equal(rs.suppressed_recovering, 1);

  /* The split form: WAIT planned while OPEN, the wait passes, proceed says
   * DENY. */
  resil_manual_clock_advance_ns(mc, MS(1000));
  resil_breaker_reset(br);
  resil_retry_state *st = NULL;
  assert_status(RESIL_OK, resil_retry_state_new(NULL, &st));
  assert_int_equal(resil_retry_begin(r, &ctx, st), RESIL_DECISION_GO);
  resil_outcome first = through_breaker(&v, resil_retry_state_ctx(st));
  int64_t wait = 0;
  assert_int_equal(resil_retry_next_timed(r, st, &first, 0, &wait), RESIL_DECISION_WAIT);
  assert_int_equal(wait, MS(200));
  assert_int_equal(resil_retry_proceed(r, st), RESIL_DECISION_GO); /* OPEN, wait not over */
  resil_manual_clock_advance_ns(mc, wait);
  assert_int_equal(resil_retry_proceed(r, st), RESIL_DECISION_DENY);
  assert_int_equal(resil_retry_result(st).stop, RESIL_STOP_RECOVERING);
  assert_int_equal(v.c.calls, 2);
  resil_retry_state_free(st);
  resil_retry_free(r);
  resil_breaker_free(br);
  resil_manual_clock_free(mc);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(a_retry_whose_wait_outlasts_open_is_not_the_probe),
      cmocka_unit_test(run_form_stops_recovering_while_half_open),
      cmocka_unit_test(ramp_suppresses_retries_until_it_ends),
      cmocka_unit_test(split_form_and_state_watch),
      cmocka_unit_test(chain_retry_watches_the_breaker_inside_it),
      cmocka_unit_test(hedge_sends_none_while_the_breaker_recovers),
      cmocka_unit_test(chain_hedge_watches_the_breaker_inside_it),
      cmocka_unit_test(config_is_validated),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
