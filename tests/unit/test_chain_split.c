/* A chain enters a run of library breaker, rate limiter and bulkhead layers
 * in one pass (chain.c, split_pass) instead of nesting their run forms
 * through a trampoline per layer, and makes a library retry's first attempt
 * itself when the retry's fast path applies. This randomized differential test runs
 * the same script through two chains of the same shape, each on its own
 * manual clock and policies: one built with resil_chain_add_breaker /
 * _ratelimiter / _bulkhead (split), the other with the same policies added
 * as custom layers of the same kind whose run calls the public run form
 * (nested, the generic path), including the retry. After every call the outcomes, the calls
 * made, every layer's statistics and the policies' metrics must be equal.
 * Layer orders, a retry on top, a custom pass-through layer splitting the
 * run, outcomes of every kind, time between calls, slow calls, a bulkhead
 * held from outside and a ctx with a deadline are drawn per seed, and (from
 * a second stream) a fourth split layer, a chain total timeout and a
 * fallback; the test checks that the scripts reached every refusal and
 * every such chain. RESIL_TEST_SEEDS=N runs more seeds. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "resil/breaker.h"
#include "resil/bulkhead.h"
#include "resil/chain.h"
#include "resil/ratelimit.h"
#include "resil/retry.h"
#include "test_util.h"

enum { L_BREAKER, L_RATELIMITER, L_BULKHEAD, L_PASS, L_RETRY, L_BULKHEAD2 };

typedef struct side {
  resil_manual_clock *mc;
  const resil_clock *clock;
  resil_breaker *br;
  resil_ratelimiter *rl;
  resil_bulkhead *bh;
  resil_bulkhead *bh2; /* a second bulkhead, below the others (L_BULKHEAD2) */
  resil_retry *rt;
  resil_chain *ch;
  /* The next calls' script: outcome kinds per attempt, duration. */
  int fail_mode[4];
  int attempt;
  int64_t takes_ns;
  int calls;
} side;

static resil_outcome pass_run(void *p, const resil_ctx *ctx, resil_call_fn fn,
                              void *arg) {
  (void)p;
  return fn(arg, ctx);
}
static resil_outcome nested_breaker(void *p, const resil_ctx *ctx,
                                    resil_call_fn fn, void *arg) {
  return resil_breaker_run(p, ctx, fn, arg);
}
static resil_outcome nested_ratelimiter(void *p, const resil_ctx *ctx,
                                        resil_call_fn fn, void *arg) {
  return resil_ratelimiter_run(p, ctx, fn, arg);
}
static resil_outcome nested_bulkhead(void *p, const resil_ctx *ctx,
                                     resil_call_fn fn, void *arg) {
  return resil_bulkhead_run(p, ctx, fn, arg);
}

static resil_outcome nested_retry(void *p, const resil_ctx *ctx,
                                  resil_call_fn fn, void *arg) {
  return resil_retry_run(p, ctx, fn, arg);
}

static resil_outcome the_call(void *arg, const resil_ctx *ctx) {
  (void)ctx;
  side *s = arg;
  s->calls++;
  resil_manual_clock_advance_ns(s->mc, s->takes_ns);
  int m = s->fail_mode[s->attempt < 3 ? s->attempt : 3];
  s->attempt++;
  switch (m) {
  case 0:
    return resil_outcome_ok();
  case 1:
    return resil_outcome_http(503);
  case 2:
    return resil_outcome_http(404);
  case 3:
    return resil_outcome_make(RESIL_UNKNOWN, RESIL_REASON_TIMEOUT);
  case 4:
    return resil_outcome_make(RESIL_NOT_SENT, RESIL_REASON_CONNECT_REFUSED);
  case 6: /* HTTP successes: the policies' common success, as a plain one */
    return resil_outcome_http(200);
  case 7:
    return resil_outcome_http(204);
  default:
    return resil_outcome_http(302);
  }
}

static void add_layer(side *s, int kind, int split) {
  resil_layer l = {.struct_size = sizeof l, .max_attempts = 1};
  switch (kind) {
  case L_BREAKER:
    if (split) {
      assert_int_equal(resil_chain_add_breaker(s->ch, s->br), RESIL_OK);
      return;
    }
    l.kind = RESIL_LAYER_BREAKER, l.policy = s->br, l.run = nested_breaker;
    l.name = resil_breaker_name(s->br);
    break;
  case L_RATELIMITER:
    if (split) {
      assert_int_equal(resil_chain_add_ratelimiter(s->ch, s->rl), RESIL_OK);
      return;
    }
    l.kind = RESIL_LAYER_RATELIMITER, l.policy = s->rl, l.run = nested_ratelimiter;
    l.name = resil_ratelimiter_name(s->rl);
    break;
  case L_BULKHEAD:
    if (split) {
      assert_int_equal(resil_chain_add_bulkhead(s->ch, s->bh), RESIL_OK);
      return;
    }
    l.kind = RESIL_LAYER_BULKHEAD, l.policy = s->bh, l.run = nested_bulkhead;
    l.name = resil_bulkhead_name(s->bh);
    break;
  case L_BULKHEAD2:
    if (split) {
      assert_int_equal(resil_chain_add_bulkhead(s->ch, s->bh2), RESIL_OK);
      return;
    }
    l.kind = RESIL_LAYER_BULKHEAD, l.policy = s->bh2, l.run = nested_bulkhead;
    l.name = resil_bulkhead_name(s->bh2);
    break;
  case L_RETRY:
    if (split) {
      assert_int_equal(resil_chain_add_retry(s->ch, s->rt), RESIL_OK);
      return;
    }
    l.kind = RESIL_LAYER_RETRY, l.policy = s->rt, l.run = nested_retry;
    l.name = resil_retry_name(s->rt);
    l.max_attempts = resil_retry_max_attempts(s->rt);
    break;
  default:
    l.kind = RESIL_LAYER_CUSTOM, l.policy = s, l.run = pass_run, l.name = "pass";
    break;
  }
  assert_int_equal(resil_chain_add_layer(s->ch, &l), RESIL_OK);
}

/* A fallback that answers UNAVAILABLE: its flag shows in the outcome. */
static resil_fallback_kind fallback_unavailable(void *fb_arg, void *call_arg,
                                                const resil_outcome *o) {
  (void)fb_arg, (void)call_arg, (void)o;
  return RESIL_FALLBACK_UNAVAILABLE;
}

/* total_timeout_ns (0: none) and fallback: the chain's; both send
 * resil_chain_run's NULL-ctx calls through its general path. */
static void side_new(side *s, const int *order, size_t n, int split,
                     int coarse_rl, int64_t total_timeout_ns, int fallback) {
  memset(s, 0, sizeof *s);
  assert_int_equal(resil_manual_clock_new(0, 1700000000000, &s->mc), RESIL_OK);
  s->clock = resil_manual_clock_get(s->mc);
  resil_error err;
  resil_breaker_config bc;
  resil_breaker_config_init(&bc);
  bc.name = "b";
  bc.window_type = RESIL_BREAKER_WINDOW_COUNT;
  bc.window_size = 4;
  bc.minimum_calls = 3;
  bc.failure_rate_threshold_pct = 50;
  bc.slow_call_rate_threshold_pct = 50;
  bc.slow_call_duration_ns = RESIL_MS(300);
  bc.open_wait_ns = RESIL_MS(700);
  bc.half_open_permitted_calls = 2;
  bc.clock = s->clock;
  assert_int_equal(resil_breaker_new(&bc, &s->br, &err), RESIL_OK);
  resil_ratelimiter_config rc;
  resil_ratelimiter_config_init(&rc);
  rc.name = "rl";
  rc.limit_for_period = 3;
  /* 2 s: a limiter the breaker's coarse reading may serve (coarse at
   * >= 100 x the 10 ms resolution); 250 ms: precise. */
  rc.refresh_period_ns = coarse_rl ? RESIL_S(2) : RESIL_MS(250);
  rc.timeout_ns = 0;
  rc.clock = s->clock;
  assert_int_equal(resil_ratelimiter_new(&rc, &s->rl, &err), RESIL_OK);
  resil_bulkhead_config hc;
  resil_bulkhead_config_init(&hc);
  hc.name = "bh";
  hc.max_concurrent = 1;
  hc.clock = s->clock;
  assert_int_equal(resil_bulkhead_new(&hc, &s->bh, &err), RESIL_OK);
  hc.name = "bh2";
  hc.max_concurrent = 2;
  assert_int_equal(resil_bulkhead_new(&hc, &s->bh2, &err), RESIL_OK);
  resil_retry_config tc;
  resil_retry_config_init(&tc);
  tc.name = "rt";
  tc.max_attempts = 3;
  tc.wait_ns = RESIL_MS(40);
  tc.retry_on_rejected = 1;
  tc.clock = s->clock;
  /* Retries last (DESIGN §2.9): the split chain's retry watches the
   * breaker layer inside it; the nested one is told to watch the same. */
  tc.recovery_breaker = s->br;
  assert_int_equal(resil_retry_new(&tc, &s->rt, &err), RESIL_OK);
  resil_chain_config cc;
  resil_chain_config_init(&cc);
  cc.clock = s->clock;
  cc.total_timeout_ns = total_timeout_ns;
  if (fallback) cc.fallback = fallback_unavailable;
  assert_int_equal(resil_chain_new(&cc, &s->ch, &err), RESIL_OK);
  for (size_t i = 0; i < n; i++) add_layer(s, order[i], split);
}

static void side_free(side *s) {
  resil_chain_free(s->ch);
  resil_retry_free(s->rt);
  resil_bulkhead_free(s->bh);
  resil_bulkhead_free(s->bh2);
  resil_ratelimiter_free(s->rl);
  resil_breaker_free(s->br);
  resil_manual_clock_free(s->mc);
}

static void assert_same(const side *a, const side *b, resil_outcome oa,
                        resil_outcome ob, const char *where) {
  if (oa.kind != ob.kind || oa.reason != ob.reason ||
      oa.http_status != ob.http_status || oa.flags != ob.flags ||
      oa.stop != ob.stop || oa.attempts != ob.attempts ||
      oa.retry_after_ms != ob.retry_after_ms)
    fail_msg("%s: outcome %d/%d/%d stop %d attempts %u vs %d/%d/%d stop %d "
             "attempts %u",
             where, oa.kind, oa.reason, oa.http_status, oa.stop, oa.attempts,
             ob.kind, ob.reason, ob.http_status, ob.stop, ob.attempts);
  if (a->calls != b->calls) fail_msg("%s: calls %d vs %d", where, a->calls, b->calls);
  size_t n = resil_chain_layers(a->ch);
  assert_int_equal(n, resil_chain_layers(b->ch));
  for (size_t i = 0; i <= n; i++) {
    resil_layer_stats x, y;
    /* i == n: the call itself. */
    int rx = i < n ? resil_chain_layer_stats(a->ch, i, &x)
                   : resil_chain_call_stats(a->ch, &x);
    int ry = i < n ? resil_chain_layer_stats(b->ch, i, &y)
                   : resil_chain_call_stats(b->ch, &y);
    assert_int_equal(rx, RESIL_OK);
    assert_int_equal(ry, RESIL_OK);
    if (memcmp(&x, &y, sizeof x) != 0)
      fail_msg("%s: layer %zu stats differ: in %llu/%llu out %llu/%llu rej "
               "%llu/%llu ok %llu/%llu rejected-kind %llu/%llu",
               where, i, (unsigned long long)x.calls_in,
               (unsigned long long)y.calls_in, (unsigned long long)x.attempts_out,
               (unsigned long long)y.attempts_out, (unsigned long long)x.rejections,
               (unsigned long long)y.rejections, (unsigned long long)x.successes,
               (unsigned long long)y.successes,
               (unsigned long long)x.by_kind[RESIL_REJECTED],
               (unsigned long long)y.by_kind[RESIL_REJECTED]);
  }
  resil_breaker_metrics ma, mb;
  assert_int_equal(resil_breaker_get_metrics(a->br, &ma), RESIL_OK);
  assert_int_equal(resil_breaker_get_metrics(b->br, &mb), RESIL_OK);
  if (memcmp(&ma, &mb, sizeof ma) != 0)
    fail_msg("%s: breaker metrics differ: state %d/%d total %llu/%llu not "
             "permitted %llu/%llu slow %llu/%llu",
             where, ma.state, mb.state, (unsigned long long)ma.total_calls,
             (unsigned long long)mb.total_calls,
             (unsigned long long)ma.total_not_permitted,
             (unsigned long long)mb.total_not_permitted,
             (unsigned long long)ma.total_slow, (unsigned long long)mb.total_slow);
  resil_ratelimiter_metrics ra, rb;
  assert_int_equal(resil_ratelimiter_get_metrics(a->rl, &ra), RESIL_OK);
  assert_int_equal(resil_ratelimiter_get_metrics(b->rl, &rb), RESIL_OK);
  if (memcmp(&ra, &rb, sizeof ra) != 0)
    fail_msg("%s: limiter metrics differ: permitted %llu/%llu refused %llu/%llu",
             where, (unsigned long long)ra.permitted, (unsigned long long)rb.permitted,
             (unsigned long long)ra.refused, (unsigned long long)rb.refused);
  resil_bulkhead_metrics ha, hb;
  assert_int_equal(resil_bulkhead_get_metrics(a->bh, &ha), RESIL_OK);
  assert_int_equal(resil_bulkhead_get_metrics(b->bh, &hb), RESIL_OK);
  if (memcmp(&ha, &hb, sizeof ha) != 0)
    fail_msg("%s: bulkhead metrics differ: permitted %llu/%llu rejected %llu/%llu",
             where, (unsigned long long)ha.permitted, (unsigned long long)hb.permitted,
             (unsigned long long)ha.rejected, (unsigned long long)hb.rejected);
  assert_int_equal(resil_bulkhead_get_metrics(a->bh2, &ha), RESIL_OK);
  assert_int_equal(resil_bulkhead_get_metrics(b->bh2, &hb), RESIL_OK);
  if (memcmp(&ha, &hb, sizeof ha) != 0)
    fail_msg("%s: bulkhead 2 metrics differ: permitted %llu/%llu", where,
             (unsigned long long)ha.permitted, (unsigned long long)hb.permitted);
  resil_retry_stats ta, tb;
  assert_int_equal(resil_retry_get_stats(a->rt, &ta), RESIL_OK);
  assert_int_equal(resil_retry_get_stats(b->rt, &tb), RESIL_OK);
  if (memcmp(&ta, &tb, sizeof ta) != 0)
    fail_msg("%s: retry stats differ: calls %llu/%llu attempts %llu/%llu", where,
             (unsigned long long)ta.calls, (unsigned long long)tb.calls,
             (unsigned long long)ta.attempts, (unsigned long long)tb.attempts);
}

static uint64_t rng_next(uint64_t *s) {
  *s ^= *s << 13;
  *s ^= *s >> 7;
  *s ^= *s << 17;
  return *s;
}

typedef struct coverage {
  uint64_t breaker_refused, limiter_refused, bulkhead_refused, clean, retried;
  uint64_t generic, total, fallback; /* seeds */
} coverage;

static void run_seed(uint64_t seed, coverage *cov) {
  uint64_t r = seed * 0x9E3779B97F4A7C15ull + 1;
  int order[6];
  size_t n = 0;
  if (rng_next(&r) % 3 != 0) order[n++] = L_RETRY;
  int pol[3] = {L_BREAKER, L_RATELIMITER, L_BULKHEAD};
  for (int i = 2; i > 0; i--) {
    int j = (int)(rng_next(&r) % (uint64_t)(i + 1));
    int t = pol[i];
    pol[i] = pol[j];
    pol[j] = t;
  }
  size_t pass_at = (size_t)(rng_next(&r) % 5); /* 3 or 4: none */
  for (size_t i = 0; i < 3; i++) {
    if (pass_at == i) order[n++] = L_PASS;
    order[n++] = pol[i];
  }
  int coarse_rl = (int)(rng_next(&r) & 1);
  /* Drawn from their own stream, so that the scripts above stay those of
   * earlier versions of this test: a fourth split layer at the bottom (a
   * pass too long for the written-out shapes, and a repeated kind), a
   * total timeout, a fallback. */
  uint64_t r2 = seed * 0xD1B54A32D192ED03ull + 7;
  if (rng_next(&r2) % 4 == 0) order[n++] = L_BULKHEAD2;
  int64_t total = rng_next(&r2) % 5 == 0 ? RESIL_S(10) : 0;
  int fallback = rng_next(&r2) % 5 == 0;
  cov->generic += n > 0 && order[n - 1] == L_BULKHEAD2;
  cov->total += total > 0;
  cov->fallback += fallback;
  side a, b;
  side_new(&a, order, n, 1, coarse_rl, total, fallback);
  side_new(&b, order, n, 0, coarse_rl, total, fallback);
  char where[96];
  for (int step = 0; step < 120; step++) {
    int64_t before = (int64_t)(rng_next(&r) % 6);
    static const int64_t gaps_ms[] = {0, 0, 1, 90, 260, 800};
    resil_manual_clock_advance_ns(a.mc, RESIL_MS(gaps_ms[before]));
    resil_manual_clock_advance_ns(b.mc, RESIL_MS(gaps_ms[before]));
    a.takes_ns = b.takes_ns = rng_next(&r) % 4 == 0 ? RESIL_MS(350) : RESIL_MS(1);
    for (int k = 0; k < 4; k++) {
      uint64_t d = rng_next(&r) % 12;
      a.fail_mode[k] = b.fail_mode[k] = d < 5 ? 0 : (int)(d - 4);
    }
    a.attempt = b.attempt = 0;
    int hold = rng_next(&r) % 6 == 0;
    if (hold) {
      assert_int_equal(resil_bulkhead_try_acquire(a.bh, NULL), RESIL_DECISION_GO);
      assert_int_equal(resil_bulkhead_try_acquire(b.bh, NULL), RESIL_DECISION_GO);
    }
    resil_ctx ctx;
    resil_ctx_init(&ctx);
    const resil_ctx *c = NULL;
    assert_int_equal(resil_manual_clock_now_ns(a.mc), resil_manual_clock_now_ns(b.mc));
    if (rng_next(&r) % 4 == 0) {
      ctx.deadline_ns = resil_manual_clock_now_ns(a.mc) + RESIL_MS(500);
      ctx.clock = a.clock;
      c = &ctx;
    }
    resil_breaker_metrics m0;
    resil_breaker_get_metrics(a.br, &m0);
    resil_ratelimiter_metrics r0;
    resil_ratelimiter_get_metrics(a.rl, &r0);
    resil_bulkhead_metrics h0;
    resil_bulkhead_get_metrics(a.bh, &h0);
    uint64_t clean0 = 0;
    resil_layer_stats cs;
    resil_chain_call_stats(a.ch, &cs);
    clean0 = cs.successes;
    resil_outcome oa = resil_chain_run(a.ch, c, the_call, &a);
    if (c) {
      /* The same deadline on b's clock, which showed the same time. */
      ctx.deadline_ns = resil_manual_clock_now_ns(b.mc) + RESIL_MS(500);
      ctx.clock = b.clock;
    }
    resil_outcome ob = resil_chain_run(b.ch, c, the_call, &b);
    if (hold) {
      assert_int_equal(resil_bulkhead_release(a.bh), RESIL_OK);
      assert_int_equal(resil_bulkhead_release(b.bh), RESIL_OK);
    }
    snprintf(where, sizeof where, "seed %llu step %d", (unsigned long long)seed,
             step);
    assert_same(&a, &b, oa, ob, where);
    resil_breaker_metrics m1;
    resil_breaker_get_metrics(a.br, &m1);
    resil_ratelimiter_metrics r1;
    resil_ratelimiter_get_metrics(a.rl, &r1);
    resil_bulkhead_metrics h1;
    resil_bulkhead_get_metrics(a.bh, &h1);
    resil_chain_call_stats(a.ch, &cs);
    cov->breaker_refused += m1.total_not_permitted - m0.total_not_permitted;
    cov->limiter_refused += r1.refused - r0.refused;
    cov->bulkhead_refused += h1.rejected - h0.rejected;
    cov->clean += cs.successes - clean0;
    cov->retried += oa.attempts > 1;
  }
  side_free(&a);
  side_free(&b);
}

static void split_pass_matches_nested_run_forms(void **state) {
  (void)state;
  coverage cov;
  memset(&cov, 0, sizeof cov);
  /* RESIL_TEST_SEEDS=N runs seeds 1..N (more than the default 150). */
  uint64_t seeds = 150;
  const char *env = getenv("RESIL_TEST_SEEDS");
  if (env && strtoull(env, NULL, 10) > seeds) seeds = strtoull(env, NULL, 10);
  for (uint64_t seed = 1; seed <= seeds; seed++) run_seed(seed, &cov);
  /* The scripts reached every refusal, clean passes and retries. */
  assert_true(cov.breaker_refused > 50);
  assert_true(cov.limiter_refused > 50);
  assert_true(cov.bulkhead_refused > 50);
  assert_true(cov.clean > 500);
  assert_true(cov.retried > 50);
  assert_true(cov.generic > 10);
  assert_true(cov.total > 10);
  assert_true(cov.fallback > 10);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(split_pass_matches_nested_run_forms),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
