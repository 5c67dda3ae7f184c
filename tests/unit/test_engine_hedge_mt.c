/* Hedging on the async engine and the engine's per-layer counters
 * (engine.h: resil_engine_policies.hedge, resil_engine_stats), against the
 * real fixture on 127.0.0.1:
 *   - a hedge takes a rate-limiter permit only if one is there at once,
 *     and is not sent (a REJECTED hedge) without one;
 *   - a hedge has the attempt timeout and the client's response timeout
 *     of its own, counted from its own start; one that times out is a
 *     loser that does not end the attempt while another transfer runs;
 *   - with the hedge's defaults a keyed POST hedged into the primary's
 *     PENDING key (409) is won by the primary's 201, one effect;
 *   - every counter of resil_engine_stats moves, hedges apart from
 *     retries.
 *   - the hedge's listener, driven by the engine, hears SENT, WON and the
 *     losing primary (CANCELLED_LOSER).
 * The fixture's server threads make these concurrency tests (_mt). Runs
 * on the test adapter and, when built, on the built-in loop. */
#include <stddef.h>

#include "test_engine_common.h"

#include "resil/breaker.h"
#include "resil/bulkhead.h"
#include "resil/hedge.h"
#include "resil/ratelimit.h"

static const resil_http_endpoint eps[] = {
    {.struct_size = sizeof(resil_http_endpoint), .name = "flaky", .path = "/flaky/{id}",
     .query = "fail={n}"},
    {.struct_size = sizeof(resil_http_endpoint), .name = "slow", .path = "/slow", .query = "ms={ms}"},
    {.struct_size = sizeof(resil_http_endpoint), .name = "slow_first", .path = "/flaky/{id}",
     .query = "fail=1&status=200&delay_ms={ms}"},
    {.struct_size = sizeof(resil_http_endpoint), .name = "idem", .method = RESIL_HTTP_POST,
     .path = "/idem/{name}", .query = "pending_ms={ms}", .idempotency_key = RESIL_HTTP_KEY_SEND},
    {.struct_size = sizeof(resil_http_endpoint), .name = "post_slow", .method = RESIL_HTTP_POST,
     .path = "/slow", .query = "ms={ms}"},
};
#define NEPS (sizeof eps / sizeof eps[0])

/* The hedge delay where the primary must reach the fixture first (the
 * /flaky endpoint sleeps on the first request it sees for an id, answers
 * the next at once): a new connection on a loaded machine under
 * ThreadSanitizer can take longer than 20 ms to arrive, and then the hedge
 * is the slow one. */
#define PRIMARY_FIRST_NS RESIL_MS(200)

static resil_hedge *hedge_of(int64_t delay_ns, uint32_t max_hedges) {
  resil_hedge_config hc;
  resil_hedge_config_init(&hc);
  hc.delay_ns = delay_ns;
  hc.max_hedges = max_hedges;
  resil_hedge *h = NULL;
  resil_error err;
  if (resil_hedge_new(&hc, &h, &err) != RESIL_OK) fail_msg("hedge: %s", err.msg);
  return h;
}

static resil_engine_stats stats_of(const resil_engine *e) {
  resil_engine_stats st;
  memset(&st, 0, sizeof st);
  assert_int_equal(resil_engine_get_stats(e, &st), RESIL_OK);
  assert_int_equal(st.struct_size, sizeof st);
  return st;
}

/* Runs one call to completion (slot i of d). */
static void run_one(test_loop *l, resil_engine *e, done_rec *d, size_t i, const char *ep,
                    const char *const *kv, const resil_engine_policies *pol) {
  size_t before = atomic_load(&d->done);
  assert_int_equal(submit(e, d, i, ep, kv, pol, NULL, NULL), RESIL_OK);
  assert_true(tl_run_until(l, &d->done, before + 1, 30000));
  assert_int_equal(d->count[i], 1);
}

/* ---- (a) the rate limiter ------------------------------------------------ */

static void hedge_takes_a_ratelimiter_permit_or_is_not_sent(void **state) {
  fx_state *s = *state;
  te_env *t = te_open(s->f, eps, NEPS, NULL, NULL);
  /* Three permits, on a clock that never moves: no refill. */
  resil_manual_clock *mc = NULL;
  assert_int_equal(resil_manual_clock_new(0, 0, &mc), RESIL_OK);
  resil_ratelimiter_config rlc;
  resil_ratelimiter_config_init(&rlc);
  rlc.limit_for_period = 3;
  rlc.refresh_period_ns = RESIL_S(1);
  rlc.timeout_ns = RESIL_S(5);
  rlc.clock = resil_manual_clock_get(mc);
  resil_ratelimiter *rl = NULL;
  assert_int_equal(resil_ratelimiter_new(&rlc, &rl, NULL), RESIL_OK);
  resil_hedge *h = hedge_of(PRIMARY_FIRST_NS, 1);
  resil_engine_policies pol;
  resil_engine_policies_init(&pol);
  pol.ratelimiter = rl;
  pol.hedge = h;
  resil_engine *e = t->e;
  static done_rec d;
  rec_init(&d);
  /* The primary sleeps 5 s; the hedge takes a permit and wins. */
  run_one(&t->l, e, &d, 0, "slow_first", KV("id", "a", "ms", "5000"), &pol);
  assert_int_equal(d.o[0].http_status, 200);
  assert_int_equal(resil_ratelimiter_available(rl), 1);
  /* The primary takes the last permit; the hedge finds none and is not
   * sent: the primary's answer after 1 s is the call's. */
  run_one(&t->l, e, &d, 1, "slow_first", KV("id", "b", "ms", "1000"), &pol);
  assert_int_equal(d.o[1].http_status, 200);
  assert_int_equal(resil_ratelimiter_available(rl), 0);
  assert_int_equal(resil_fixture_attempts(s->f, "flaky"), 3);
  resil_hedge_metrics m;
  assert_int_equal(resil_hedge_get_metrics(h, &m), RESIL_OK);
  assert_int_equal(m.hedges_sent, 2);
  assert_int_equal(m.hedges_won, 1);
  resil_engine_stats st = stats_of(e);
  assert_int_equal(st.transfers, 3);
  assert_int_equal(st.hedges_sent, 2);
  assert_int_equal(st.hedges_rejected, 1);
  assert_int_equal(st.rejected_ratelimiter, 1);
  assert_int_equal(st.hedge_wins, 1);
  assert_int_equal(resil_engine_in_flight(e), 0);
  te_close(t);
  resil_hedge_free(h);
  resil_ratelimiter_free(rl);
  resil_manual_clock_free(mc);
}

/* The same for the breaker (HALF_OPEN with one probe: the primary's) and
 * the bulkhead (one slot, the primary's; a hedge never queues): the hedge
 * is not sent, counted per layer and as a rejected hedge; the primary's
 * answer is the call's. */
static void hedge_without_a_breaker_permit_or_bulkhead_slot_is_not_sent(void **state) {
  fx_state *s = *state;
  resil_http_client *c = client_on(s->f, eps, NEPS, NULL, NULL);
  resil_breaker_config bc;
  resil_breaker_config_init(&bc);
  bc.half_open_permitted_calls = 1;
  resil_breaker *br = NULL;
  assert_int_equal(resil_breaker_new(&bc, &br, NULL), RESIL_OK);
  assert_int_equal(resil_breaker_transition(br, RESIL_BREAKER_OPEN), RESIL_OK);
  assert_int_equal(resil_breaker_transition(br, RESIL_BREAKER_HALF_OPEN), RESIL_OK);
  resil_bulkhead_config hc;
  resil_bulkhead_config_init(&hc);
  hc.max_concurrent = 1;
  hc.max_wait_ns = RESIL_S(1);
  resil_bulkhead *bh = NULL;
  assert_int_equal(resil_bulkhead_new(&hc, &bh, NULL), RESIL_OK);
  resil_engine_policies pol;
  resil_engine_policies_init(&pol);
  pol.breaker = br;
  test_loop l;
  tl_init(&l);
  resil_engine *e = engine_on(&l, c);
  /* Hedges last (DESIGN §2.9, the default): the breaker is HALF_OPEN, so
   * the engine's hedge is not even tried: counted as suppressed by the
   * hedge, no breaker refusal. The primary's success closes the breaker. */
  resil_hedge *h_last = hedge_of(RESIL_MS(20), 1);
  pol.hedge = h_last;
  static done_rec d0;
  rec_init(&d0);
  run_one(&l, e, &d0, 0, "slow_first", KV("id", "br0", "ms", "300"), &pol);
  assert_int_equal(d0.o[0].http_status, 200);
  resil_engine_stats st0 = stats_of(e);
  assert_int_equal(st0.hedges_sent, 0);
  assert_int_equal(st0.rejected_breaker, 0);
  assert_int_equal(st0.transfers, 1);
  resil_hedge_metrics hm;
  assert_int_equal(resil_hedge_get_metrics(h_last, &hm), RESIL_OK);
  assert_int_equal(hm.suppressed_recovering, 1);
  assert_int_equal(hm.hedges_sent, 0);
  assert_int_equal(resil_breaker_state(br), RESIL_BREAKER_CLOSED);
  assert_int_equal(resil_breaker_transition(br, RESIL_BREAKER_OPEN), RESIL_OK);
  assert_int_equal(resil_breaker_transition(br, RESIL_BREAKER_HALF_OPEN), RESIL_OK);
  /* As before with hedge_during_recovery: the hedge goes for a breaker
   * permit, which the HALF_OPEN breaker has no more of. */
  resil_hedge_config hcfg;
  resil_hedge_config_init(&hcfg);
  hcfg.delay_ns = RESIL_MS(20);
  hcfg.max_hedges = 1;
  hcfg.hedge_during_recovery = 1;
  resil_hedge *h = NULL;
  assert_int_equal(resil_hedge_new(&hcfg, &h, NULL), RESIL_OK);
  pol.hedge = h;
  static done_rec d;
  rec_init(&d);
  run_one(&l, e, &d, 0, "slow_first", KV("id", "br", "ms", "300"), &pol);
  assert_int_equal(d.o[0].http_status, 200);
  resil_engine_stats st = stats_of(e);
  assert_int_equal(st.hedges_sent, 1);
  assert_int_equal(st.hedges_rejected, 1);
  assert_int_equal(st.rejected_breaker, 1);
  assert_int_equal(st.transfers, 2);
  pol.breaker = NULL;
  pol.bulkhead = bh;
  run_one(&l, e, &d, 1, "slow_first", KV("id", "bh", "ms", "300"), &pol);
  assert_int_equal(d.o[1].http_status, 200);
  st = stats_of(e);
  assert_int_equal(st.hedges_sent, 2);
  assert_int_equal(st.hedges_rejected, 2);
  assert_int_equal(st.rejected_bulkhead_full, 1);
  assert_int_equal(st.rejected_bulkhead_wait, 0);
  assert_int_equal(st.transfers, 3);
  assert_int_equal(st.hedge_wins, 0);
  assert_int_equal(resil_fixture_attempts(s->f, "flaky"), 3);
  assert_int_equal(resil_bulkhead_available(bh), 1);
  resil_engine_free(e);
  tl_close(&l);
  resil_hedge_free(h);
  resil_hedge_free(h_last);
  resil_breaker_free(br);
  resil_bulkhead_free(bh);
  resil_http_client_free(c);
}

/* ---- (b) a hedge's own timers ----------------------------------------------- */

static void response_timeout_of(resil_http_client_config *cfg, void *u) {
  int64_t ns = *(const int64_t *)u;
  if (ns) cfg->response_timeout_ns = ns;
}

/* Every transfer hangs 5 s; hedge k goes k x 100 ms after the primary.
 * The primary times out first: that does not end the attempt (a hedge is
 * in flight); each hedge, with timers of its own counted from its own
 * start, times out in turn, and only the last ends the attempt,
 * UNKNOWN(TIMEOUT). Without timers of their own the hedges would run
 * until their 5 s answers. */
static void hedge_timeout_case(fx_state *s, int64_t attempt_timeout_ns,
                               int64_t response_timeout_ns, uint32_t hedges) {
  resil_http_client *c = client_on(s->f, eps, NEPS, response_timeout_of, &response_timeout_ns);
  resil_hedge *h = hedge_of(RESIL_MS(100), hedges);
  resil_engine_policies pol;
  resil_engine_policies_init(&pol);
  pol.hedge = h;
  pol.attempt_timeout_ns = attempt_timeout_ns;
  test_loop l;
  tl_init(&l);
  resil_engine *e = engine_on(&l, c);
  static done_rec d;
  rec_init(&d);
  int64_t t0 = mono_ms();
  run_one(&l, e, &d, 0, "slow", KV("ms", "5000"), &pol);
  int64_t took = d.at_ms[0] - t0;
  assert_int_equal(d.o[0].kind, RESIL_UNKNOWN);
  assert_int_equal(d.o[0].reason, RESIL_REASON_TIMEOUT);
  /* Not at the primary's timeout (400 ms): at the last hedge's. */
  assert_true(took >= 400 + 100 * (int64_t)hedges - 10);
  assert_true(took < 4000);
  assert_int_equal(resil_fixture_attempts(s->f, "slow"), 1 + (long)hedges);
  /* Every transfer reaches the client's counters as UNKNOWN. */
  resil_http_stats hs;
  assert_int_equal(resil_http_client_get_stats(c, &hs), RESIL_OK);
  assert_int_equal(hs.outcomes[RESIL_UNKNOWN], 1 + hedges);
  resil_hedge_metrics m;
  assert_int_equal(resil_hedge_get_metrics(h, &m), RESIL_OK);
  assert_int_equal(m.hedges_sent, hedges);
  assert_int_equal(m.hedges_won, 0);
  assert_int_equal(m.cancelled_losers, 0);
  resil_engine_stats st = stats_of(e);
  assert_int_equal(st.transfers, 1 + hedges);
  assert_int_equal(st.completed_unknown, 1);
  assert_int_equal(st.cancelled_losers, 0);
  assert_int_equal(st.retries, 0);
  assert_int_equal(resil_engine_in_flight(e), 0);
  resil_engine_free(e);
  tl_close(&l);
  resil_hedge_free(h);
  resil_http_client_free(c);
}

static void hedge_has_its_own_attempt_timeout(void **state) {
  hedge_timeout_case(*state, RESIL_MS(400), 0, 1);
}

static void hedge_has_the_client_response_timeout(void **state) {
  hedge_timeout_case(*state, 0, RESIL_MS(400), 1);
}

/* Two hedges: the first one's timeout is a loser's end too (the second is
 * in flight); the second's ends the attempt. */
static void timed_out_hedge_does_not_end_the_attempt(void **state) {
  hedge_timeout_case(*state, RESIL_MS(400), 0, 2);
}

/* ---- (c) keyed hedges with the defaults --------------------------------------- */

static void keyed_post_hedged_into_a_pending_key_is_won_by_the_primary(void **state) {
  fx_state *s = *state;
  te_env *t = te_open(s->f, eps, NEPS, NULL, NULL);
  /* The hedge's defaults, only the schedule set: all three at once. */
  resil_hedge *h = hedge_of(0, 2);
  resil_engine_policies pol;
  resil_engine_policies_init(&pol);
  pol.hedge = h;
  resil_engine *e = t->e;
  static done_rec d;
  rec_init(&d);
  /* The first to arrive holds the key PENDING 300 ms; the others get
   * 409, which must not win. */
  run_one(&t->l, e, &d, 0, "idem", KV("name", "k1", "ms", "300"), &pol);
  assert_int_equal(d.o[0].http_status, 201);
  assert_int_equal(d.status[0], 201);
  assert_int_equal(resil_fixture_attempts(s->f, "idem"), 3);
  assert_int_equal(resil_fixture_effects(s->f, "idem"), 1);
  resil_hedge_metrics m;
  assert_int_equal(resil_hedge_get_metrics(h, &m), RESIL_OK);
  assert_int_equal(m.hedges_sent, 2);
  /* Whichever transfer reached the server first held the key and won (on
   * the wire the three race); the two 409s kept waiting, none was
   * cancelled. */
  assert_int_equal(m.cancelled_losers, 0);
  resil_engine_stats st = stats_of(e);
  assert_int_equal(st.transfers, 3);
  assert_int_equal(st.hedge_wins, m.hedges_won);
  assert_int_equal(st.cancelled_losers, 0);
  assert_int_equal(resil_engine_in_flight(e), 0);
  te_close(t);
  resil_hedge_free(h);
}

/* ---- (d) per-layer counters ------------------------------------------------------ */

static void engine_stats_count_every_layer_and_hedges_apart_from_retries(void **state) {
  fx_state *s = *state;
  te_env *t = te_open(s->f, eps, NEPS, NULL, NULL);
  resil_engine *e = t->e;
  static done_rec d;
  rec_init(&d);
  resil_engine_stats st = stats_of(e);
  assert_int_equal(st.calls_submitted, 0);
  assert_int_equal(st.transfers, 0);

  /* Retries: 503, 503, 200: three transfers, two retries. */
  resil_retry_config rc;
  resil_retry_config_init(&rc);
  rc.max_attempts = 3;
  rc.wait_ns = RESIL_MS(10);
  resil_retry *retry = NULL;
  assert_int_equal(resil_retry_new(&rc, &retry, NULL), RESIL_OK);
  resil_engine_policies pr;
  resil_engine_policies_init(&pr);
  pr.retry = retry;
  run_one(&t->l, e, &d, 0, "flaky", KV("id", "r", "n", "2"), &pr);
  assert_int_equal(d.o[0].http_status, 200);
  st = stats_of(e);
  assert_int_equal(st.transfers, 3);
  assert_int_equal(st.retries, 2);
  assert_int_equal(st.hedges_sent, 0);

  /* A hedge that wins under the same retry: two transfers, no retry. */
  resil_hedge *h = hedge_of(PRIMARY_FIRST_NS, 1);
  resil_engine_policies ph = pr;
  ph.hedge = h;
  run_one(&t->l, e, &d, 1, "slow_first", KV("id", "h", "ms", "5000"), &ph);
  assert_int_equal(d.o[1].http_status, 200);
  st = stats_of(e);
  assert_int_equal(st.transfers, 5);
  assert_int_equal(st.retries, 2); /* hedges are not retries */
  assert_int_equal(st.hedges_sent, 1);
  assert_int_equal(st.hedge_wins, 1);
  assert_int_equal(st.cancelled_losers, 1);
  assert_int_equal(st.unhedged, 0);

  /* An unkeyed POST passes the hedge unhedged. */
  run_one(&t->l, e, &d, 2, "post_slow", KV("ms", "10"), &ph);
  st = stats_of(e);
  assert_int_equal(st.unhedged, 1);
  assert_int_equal(st.hedges_sent, 1);

  /* The rate limiter: one permit, no wait, a clock that never moves. */
  resil_manual_clock *mc = NULL;
  assert_int_equal(resil_manual_clock_new(0, 0, &mc), RESIL_OK);
  resil_ratelimiter_config rlc;
  resil_ratelimiter_config_init(&rlc);
  rlc.limit_for_period = 1;
  rlc.timeout_ns = 0;
  rlc.clock = resil_manual_clock_get(mc);
  resil_ratelimiter *rl = NULL;
  assert_int_equal(resil_ratelimiter_new(&rlc, &rl, NULL), RESIL_OK);
  resil_engine_policies prl;
  resil_engine_policies_init(&prl);
  prl.ratelimiter = rl;
  run_one(&t->l, e, &d, 3, "slow", KV("ms", "1"), &prl);
  run_one(&t->l, e, &d, 4, "slow", KV("ms", "1"), &prl);
  assert_int_equal(d.o[4].kind, RESIL_REJECTED);
  assert_int_equal(d.o[4].reason, RESIL_REASON_RATE_LIMITED);
  st = stats_of(e);
  assert_int_equal(st.rejected_ratelimiter, 1);
  assert_int_equal(st.completed_rejected, 1);

  /* The breaker, forced open. */
  resil_breaker_config bc;
  resil_breaker_config_init(&bc);
  resil_breaker *br = NULL;
  assert_int_equal(resil_breaker_new(&bc, &br, NULL), RESIL_OK);
  assert_int_equal(resil_breaker_transition(br, RESIL_BREAKER_FORCED_OPEN), RESIL_OK);
  resil_engine_policies pb;
  resil_engine_policies_init(&pb);
  pb.breaker = br;
  run_one(&t->l, e, &d, 5, "slow", KV("ms", "1"), &pb);
  assert_int_equal(d.o[5].reason, RESIL_REASON_BREAKER_OPEN);
  st = stats_of(e);
  assert_int_equal(st.rejected_breaker, 1);

  /* The bulkhead: one slot, no wait; then one slot, a 50 ms wait. */
  resil_bulkhead_config hc;
  resil_bulkhead_config_init(&hc);
  hc.max_concurrent = 1;
  hc.max_wait_ns = 0;
  resil_bulkhead *bh0 = NULL, *bhw = NULL;
  assert_int_equal(resil_bulkhead_new(&hc, &bh0, NULL), RESIL_OK);
  hc.max_wait_ns = RESIL_MS(50);
  assert_int_equal(resil_bulkhead_new(&hc, &bhw, NULL), RESIL_OK);
  resil_engine_policies pbh;
  resil_engine_policies_init(&pbh);
  pbh.bulkhead = bh0;
  size_t before = atomic_load(&d.done);
  assert_int_equal(submit(e, &d, 6, "slow", KV("ms", "300"), &pbh, NULL, NULL), RESIL_OK);
  assert_int_equal(submit(e, &d, 7, "slow", KV("ms", "300"), &pbh, NULL, NULL), RESIL_OK);
  assert_true(tl_run_until(&t->l, &d.done, before + 2, 30000));
  assert_int_equal(d.o[7].reason, RESIL_REASON_BULKHEAD_FULL);
  pbh.bulkhead = bhw;
  before = atomic_load(&d.done);
  assert_int_equal(submit(e, &d, 8, "slow", KV("ms", "600"), &pbh, NULL, NULL), RESIL_OK);
  assert_int_equal(submit(e, &d, 9, "slow", KV("ms", "600"), &pbh, NULL, NULL), RESIL_OK);
  assert_true(tl_run_until(&t->l, &d.done, before + 2, 30000));
  assert_int_equal(d.o[9].reason, RESIL_REASON_BULKHEAD_FULL);
  st = stats_of(e);
  assert_int_equal(st.rejected_bulkhead_full, 1);
  assert_int_equal(st.rejected_bulkhead_wait, 1);

  /* Completions by kind: NOT_SENT (cancelled before it started) and
   * UNKNOWN (the attempt timeout). */
  resil_engine_handle *hd = NULL;
  before = atomic_load(&d.done);
  assert_int_equal(submit(e, &d, 10, "slow", KV("ms", "1"), NULL, NULL, &hd), RESIL_OK);
  resil_engine_cancel(hd);
  assert_true(tl_run_until(&t->l, &d.done, before + 1, 30000));
  resil_engine_handle_release(hd);
  assert_int_equal(d.o[10].kind, RESIL_NOT_SENT);
  resil_engine_policies pt;
  resil_engine_policies_init(&pt);
  pt.attempt_timeout_ns = RESIL_MS(100);
  run_one(&t->l, e, &d, 11, "slow", KV("ms", "3000"), &pt);
  assert_int_equal(d.o[11].kind, RESIL_UNKNOWN);

  st = stats_of(e);
  assert_int_equal(st.calls_submitted, 12);
  assert_int_equal(st.calls_completed, 12);
  assert_int_equal(st.completed_not_sent, 1);
  assert_int_equal(st.completed_unknown, 1);
  assert_int_equal(st.completed_rejected, 4); /* limiter, breaker, 2 bulkhead */
  assert_int_equal(st.completed_answered, 6);
  assert_int_equal(st.completed_answered + st.completed_not_sent + st.completed_unknown +
                       st.completed_rejected,
                   st.calls_completed);
  /* 3 (retries) + 2 (hedge) + post + limiter's one + bulkheads' two
   * + the timed-out one. */
  assert_int_equal(st.transfers, 10);
  assert_int_equal(st.retries, 2);
  assert_int_equal(st.hedges_sent, 1);
  assert_int_equal(st.hedges_rejected, 0);
  assert_int_equal(st.rejected_pool_timeout, 0); /* no connection queue yet */

  /* A caller compiled with a shorter struct gets only its part. */
  resil_engine_stats old;
  memset(&old, 0xab, sizeof old);
  assert_int_equal(
      resil_engine_get_stats_sized(e, &old, offsetof(resil_engine_stats, transfers)),
      RESIL_OK);
  assert_int_equal(old.struct_size, offsetof(resil_engine_stats, transfers));
  assert_int_equal(old.calls_submitted, 12);
  assert_int_equal(old.completed_rejected, 4);
  unsigned char ab[sizeof old.transfers];
  memset(ab, 0xab, sizeof ab);
  assert_memory_equal(&old.transfers, ab, sizeof ab);
  /* Misuse. */
  assert_int_equal(resil_engine_get_stats(NULL, &old), RESIL_EMISUSE);
  assert_int_equal(resil_engine_get_stats_sized(e, NULL, sizeof old), RESIL_EINVAL);

  te_close(t);
  resil_hedge_free(h);
  resil_retry_free(retry);
  resil_ratelimiter_free(rl);
  resil_manual_clock_free(mc);
  resil_breaker_free(br);
  resil_bulkhead_free(bh0);
  resil_bulkhead_free(bhw);
}

/* ---- the hedge's event listener on the engine ------------------------------ */

typedef struct hedge_evs {
  size_t n;
  resil_hedge_event ev[8];
} hedge_evs;

static void hedge_ev(void *user, const resil_hedge_event *ev) {
  hedge_evs *r = user; /* the loop thread only */
  if (r->n < 8) r->ev[r->n++] = *ev;
}

/* A hedged GET whose hedge wins: the policy, driven by the engine, tells
 * its listener SENT (hedge 1, the delay used), WON (hedge 1, its 200) and
 * CANCELLED_LOSER for the primary, in that order. */
static void hedged_get_won_by_the_hedge_reports_sent_won_and_the_losing_primary(void **state) {
  fx_state *s = *state;
  resil_http_client *c = client_on(s->f, eps, NEPS, NULL, NULL);
  static hedge_evs r;
  memset(&r, 0, sizeof r);
  resil_hedge_config hc;
  resil_hedge_config_init(&hc);
  hc.name = "engine-hedge";
  hc.delay_ns = PRIMARY_FIRST_NS;
  hc.on_event = hedge_ev;
  hc.on_event_user = &r;
  resil_hedge *h = NULL;
  assert_int_equal(resil_hedge_new(&hc, &h, NULL), RESIL_OK);
  resil_engine_policies pol;
  resil_engine_policies_init(&pol);
  pol.hedge = h;
  test_loop l;
  tl_init(&l);
  resil_engine *e = engine_on(&l, c);
  static done_rec d;
  rec_init(&d);
  /* The primary sleeps 5 s; the hedge answers at once. */
  run_one(&l, e, &d, 0, "slow_first", KV("id", "ev", "ms", "5000"), &pol);
  assert_int_equal(d.o[0].http_status, 200);
  assert_int_equal(r.n, 3);
  assert_int_equal(r.ev[0].kind, RESIL_HEDGE_EVENT_SENT);
  assert_string_equal(r.ev[0].name, "engine-hedge");
  assert_int_equal(r.ev[0].hedge, 1);
  assert_int_equal(r.ev[0].delay_ns, PRIMARY_FIRST_NS);
  assert_int_equal(r.ev[1].kind, RESIL_HEDGE_EVENT_WON);
  assert_int_equal(r.ev[1].hedge, 1);
  assert_int_equal(r.ev[1].has_outcome, 1);
  assert_int_equal(r.ev[1].outcome.http_status, 200);
  assert_int_equal(r.ev[2].kind, RESIL_HEDGE_EVENT_CANCELLED_LOSER);
  assert_int_equal(r.ev[2].hedge, 0);
  resil_hedge_metrics m;
  assert_int_equal(resil_hedge_get_metrics(h, &m), RESIL_OK);
  assert_int_equal(m.hedges_won, 1);
  assert_int_equal(m.cancelled_losers, 1);
  assert_int_equal(resil_engine_in_flight(e), 0);
  resil_engine_free(e);
  tl_close(&l);
  resil_hedge_free(h);
  resil_http_client_free(c);
}

/* ---- hedges last (DESIGN §2.9): the breaker ramping ----------------------------- */

/* The hedge event of kind REJECTED in r, or NULL. */
static const resil_hedge_event *rejected_event(const hedge_evs *r) {
  for (size_t i = 0; i < r->n; i++)
    if (r->ev[i].kind == RESIL_HEDGE_EVENT_REJECTED) return &r->ev[i];
  return NULL;
}

/* A hedged GET (the primary answers after 300 ms, the hedge is due at
 * 20 ms) through a breaker ramping at 50 % (te_breaker_new, its manual
 * clock standing still: the primary's decision is admitted, the next one
 * is not). Hedges last (the default): the hedge is not tried: the policy
 * counts it suppressed and reports it REJECTED(RECOVERING), the breaker
 * sees no decision for it, the engine sends no hedge. With
 * hedge_during_recovery the hedge asks the breaker, whose ramp refuses
 * it: a rejected hedge, REJECTED(RECOVERING) to the policy (not
 * BREAKER_OPEN), counted by the engine as a breaker refusal and by the
 * ramp. Either way only the primary reaches the fixture and its 200 is
 * the call's. */
static void hedge_during_a_ramp_is_refused_recovering(void **state) {
  fx_state *s = *state;
  resil_http_client *c = client_on(s->f, eps, NEPS, NULL, NULL);
  resil_manual_clock *mc = NULL;
  assert_int_equal(resil_manual_clock_new(0, 0, &mc), RESIL_OK);
  test_loop l;
  tl_init(&l);
  resil_engine *e = engine_on(&l, c);
  static done_rec d;
  rec_init(&d);
  for (int during = 0; during <= 1; during++) {
    resil_breaker *br = te_breaker_new(mc, 1, 50);
    te_breaker_recover(br, mc);
    static hedge_evs r;
    memset(&r, 0, sizeof r);
    resil_hedge_config hc;
    resil_hedge_config_init(&hc);
    hc.delay_ns = RESIL_MS(20);
    hc.max_hedges = 1;
    hc.hedge_during_recovery = during;
    hc.on_event = hedge_ev;
    hc.on_event_user = &r;
    resil_hedge *h = NULL;
    assert_int_equal(resil_hedge_new(&hc, &h, NULL), RESIL_OK);
    resil_engine_policies pol;
    resil_engine_policies_init(&pol);
    pol.breaker = br;
    pol.hedge = h;
    resil_engine_stats st0 = stats_of(e);
    run_one(&l, e, &d, (size_t)during, "slow", KV("ms", "300"), &pol);
    assert_int_equal(d.o[during].http_status, 200);
    assert_int_equal(resil_fixture_attempts(s->f, "slow"), during + 1);
    const resil_hedge_event *ev = rejected_event(&r);
    assert_non_null(ev);
    assert_int_equal(ev->hedge, 1);
    assert_int_equal(ev->has_outcome, 1);
    assert_int_equal(ev->outcome.kind, RESIL_REJECTED);
    assert_int_equal(ev->outcome.reason, RESIL_REASON_RECOVERING);
    resil_hedge_metrics hm;
    assert_int_equal(resil_hedge_get_metrics(h, &hm), RESIL_OK);
    resil_engine_stats st = stats_of(e);
    resil_breaker_metrics m;
    assert_int_equal(resil_breaker_get_metrics(br, &m), RESIL_OK);
    assert_int_equal(m.ramping, 1);
    assert_int_equal(st.transfers - st0.transfers, 1);
    assert_int_equal(hm.suppressed_recovering, during ? 0 : 1);
    assert_int_equal(hm.hedges_sent, during ? 1 : 0);
    assert_int_equal(st.hedges_sent - st0.hedges_sent, during ? 1 : 0);
    assert_int_equal(st.hedges_rejected - st0.hedges_rejected, during ? 1 : 0);
    assert_int_equal(st.rejected_breaker - st0.rejected_breaker, during ? 1 : 0);
    assert_int_equal(m.total_ramp_rejected, during ? 1 : 0);
    /* Either way one hedge did not go for the recovery; the ramp's refusal
     * (during) is a rejected_recovering too, the policy's is not. */
    assert_int_equal(st.hedges_refused_recovering - st0.hedges_refused_recovering, 1);
    assert_int_equal(st.rejected_recovering - st0.rejected_recovering, during ? 1 : 0);
    assert_int_equal(st.retries_suppressed_recovering - st0.retries_suppressed_recovering, 0);
    resil_hedge_free(h);
    resil_breaker_free(br);
  }
  resil_engine_free(e);
  tl_close(&l);
  resil_http_client_free(c);
  resil_manual_clock_free(mc);
}

/* ---- (f) no winner: the first UNKNOWN, not a later 409 ----------------------- */

/* A keyed POST whose primary takes the key (held PENDING 2 s by the
 * server) and times out after sending (attempt timeout 1 s: UNKNOWN, the
 * write may commit, and here it does), while its hedge (sent at 400 ms)
 * meets the key PENDING and is answered 409. The loop is not driven from
 * the hedge's SENT event (a listener added after creation) until 1.2 s:
 * then the primary's due timer runs before the hedge's answer is read (the
 * engine runs due timers first), so the 409 ends last. The attempt must end with the primary's
 * UNKNOWN(TIMEOUT), not the 409 (the policy's rule, resil_hedge_record),
 * and deliver no 409 response. (On a run slow enough to read the 409
 * first, the UNKNOWN ends last and the result is the same.) */
static void note_sent(void *user, const resil_hedge_event *ev) {
  if (ev->kind == RESIL_HEDGE_EVENT_SENT) atomic_store((atomic_int *)user, 1);
}

static void keyed_post_no_winner_ends_with_the_primary_unknown_not_the_hedge_409(
    void **state) {
  fx_state *s = *state;
  resil_http_client *c = client_on(s->f, eps, NEPS, NULL, NULL);
  resil_hedge *h = hedge_of(RESIL_MS(400), 1);
  resil_engine_policies pol;
  resil_engine_policies_init(&pol);
  pol.hedge = h;
  pol.attempt_timeout_ns = RESIL_MS(1000);
  test_loop l;
  tl_init(&l);
  resil_engine *e = engine_on(&l, c);
  static done_rec d;
  rec_init(&d);
  atomic_int sent = 0;
  assert_int_equal(resil_hedge_listener_add(h, note_sent, &sent), RESIL_OK);
  int64_t t0 = mono_ms();
  assert_int_equal(submit(e, &d, 0, "idem", KV("name", "nw1", "ms", "2000"), &pol, NULL, NULL),
                   RESIL_OK);
  while (!atomic_load(&sent) && atomic_load(&d.done) == 0 && mono_ms() - t0 < 20000)
    tl_run_once(&l, 5);
  assert_int_equal(atomic_load(&sent), 1);
  int64_t rest = t0 + 1200 - mono_ms();
  if (rest > 0) test_sleep_ms(rest); /* the primary's timer due, the hedge's not */
  assert_true(tl_run_until(&l, &d.done, 1, 30000));
  assert_int_equal(d.count[0], 1);
  assert_int_equal(d.o[0].kind, RESIL_UNKNOWN);
  assert_int_equal(d.o[0].reason, RESIL_REASON_TIMEOUT);
  assert_true(d.status[0] != 409);
  resil_hedge_metrics m;
  assert_int_equal(resil_hedge_get_metrics(h, &m), RESIL_OK);
  assert_int_equal(m.hedges_sent, 1);
  assert_int_equal(m.hedges_won, 0);
  assert_int_equal(m.cancelled_losers, 0);
  resil_engine_stats st = stats_of(e);
  assert_int_equal(st.transfers, 2);
  assert_int_equal(st.completed_unknown, 1);
  assert_int_equal(resil_fixture_attempts(s->f, "idem"), 2);
  assert_int_equal(resil_engine_in_flight(e), 0);
  resil_engine_free(e);
  tl_close(&l);
  resil_hedge_free(h);
  resil_http_client_free(c);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(hedge_takes_a_ratelimiter_permit_or_is_not_sent, fx_setup,
                                      fx_teardown),
      cmocka_unit_test_setup_teardown(hedge_without_a_breaker_permit_or_bulkhead_slot_is_not_sent,
                                      fx_setup, fx_teardown),
      cmocka_unit_test_setup_teardown(hedge_has_its_own_attempt_timeout, fx_setup, fx_teardown),
      cmocka_unit_test_setup_teardown(hedge_has_the_client_response_timeout, fx_setup,
                                      fx_teardown),
      cmocka_unit_test_setup_teardown(timed_out_hedge_does_not_end_the_attempt, fx_setup,
                                      fx_teardown),
      cmocka_unit_test_setup_teardown(keyed_post_hedged_into_a_pending_key_is_won_by_the_primary,
                                      fx_setup, fx_teardown),
      cmocka_unit_test_setup_teardown(
          engine_stats_count_every_layer_and_hedges_apart_from_retries, fx_setup, fx_teardown),
      cmocka_unit_test_setup_teardown(
          hedged_get_won_by_the_hedge_reports_sent_won_and_the_losing_primary, fx_setup,
          fx_teardown),
      cmocka_unit_test_setup_teardown(hedge_during_a_ramp_is_refused_recovering, fx_setup,
                                      fx_teardown),
      cmocka_unit_test_setup_teardown(
          keyed_post_no_winner_ends_with_the_primary_unknown_not_the_hedge_409, fx_setup,
          fx_teardown),
  };
  int failed = cmocka_run_group_tests_name("engine hedging on the test adapter", tests, NULL, NULL);
#ifdef RESIL_HAVE_LOOP
  tl_use_builtin_loop = 1;
  failed += cmocka_run_group_tests_name("engine hedging on resil_loop", tests, NULL, NULL);
  tl_use_builtin_loop = 0;
#endif
  return failed;
}
