/* A chain's layers on the async engine (engine.h resil_engine_call_chain)
 * and the registry driving the engine and the blocking client
 * (registry_call.h): the chain's order honoured on the engine exactly as
 * resil_chain_run honours it on the blocking path, chains the engine cannot
 * run refused by name, calls on a registry chain holding one lease while
 * another thread reloads, and the attempt events of the retries and
 * clients the registry builds. Real fixture on 127.0.0.1, the built-in
 * loop. */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"

#if defined(RESIL_HAVE_CONFIG) && defined(RESIL_HAVE_LOOP)
#include "fixture/fixture.h"
#include "resil/breaker.h"
#include "resil/engine.h"
#include "resil/loop.h"
#include "resil/events.h"
#include "resil/registry.h"
#include "resil/registry_call.h"

typedef struct env {
  resil_fixture *fx;
  resil_registry *reg;
  resil_loop *loop;
  resil_loop_adapter *ad;
  resil_engine *e;
  resil_registry_lease *client_lease;
} env;

/* The registry text: %s is the fixture's URL. */
static const char *YAML =
    "circuitbreaker:\n"
    "  instances:\n"
    "    b: {minimum_calls: 1000, window_size: 1000}\n"
    "    b2: {minimum_calls: 1000, window_size: 1000}\n"
    "    b3: {initial_state: half_open, half_open_permitted_calls: 1}\n"
    "    bopen: {initial_state: forced_open}\n"
    "retry:\n"
    "  instances:\n"
    "    r: {max_attempts: 3, wait: 1ms, backoff: fixed, respect_retry_after: false}\n"
    "ratelimiter:\n"
    "  instances:\n"
    "    rl: {limit_for_period: 1000, refresh_period: 1s, timeout: 0}\n"
    "    rl0: {limit_for_period: 1, refresh_period: 1h, timeout: 0}\n"
    "bulkhead:\n"
    "  instances:\n"
    "    bh: {max_concurrent: 10}\n"
    "timelimiter:\n"
    "  instances:\n"
    "    tl: {timeout: 2s}\n"
    "hedge:\n"
    "  instances:\n"
    "    hg: {delay: 50ms, max_hedges: 1, executor: pool}\n"
    "threadpool:\n"
    "  instances:\n"
    "    pool: {threads: 4}\n"
    "http_client:\n"
    "  instances:\n"
    "    fx:\n"
    "      base_url: %s\n"
    "      endpoints:\n"
    "        fail: {path: /status/503}\n"
    "        ok: {path: /items/1}\n"
    "        slow: {path: /slow, query: ms=400}\n"
    "chain:\n"
    "  instances:\n"
    "    in: {total_timeout: 10s, layers: [{retry: r}, {circuitbreaker: b}]}\n"
    "    out: {total_timeout: 10s, layers: [{circuitbreaker: b}, {retry: r}]}\n"
    "    full: {total_timeout: 10s, layers: [{retry: r}, {circuitbreaker: b}, {ratelimiter: rl},\n"
    "           {timelimiter: tl}, {bulkhead: bh}]}\n"
    "    rlfirst: {layers: [{ratelimiter: rl0}, {circuitbreaker: b2}]}\n"
    "    brfirst: {layers: [{circuitbreaker: b3}, {ratelimiter: rl0}]}\n"
    "    rl_out: {layers: [{ratelimiter: rl}, {retry: r}, {circuitbreaker: b}]}\n"
    "    rl0_out: {layers: [{circuitbreaker: b2}, {ratelimiter: rl0}, {retry: r}]}\n"
    "    bh_out: {layers: [{bulkhead: bh}, {retry: r}, {circuitbreaker: b}]}\n"
    "    hedged: {layers: [{retry: r}, {hedge: hg}, {circuitbreaker: b}]}\n"
    "    kbr: {layers: [{retry: r}, {circuitbreaker: bopen}, {ratelimiter: rl0}]}\n"
    "    krl: {layers: [{retry: r}, {ratelimiter: rl0}, {circuitbreaker: bopen}]}\n";

static void env_start(env *v, const char *yaml_fmt) {
  memset(v, 0, sizeof *v);
  char eb[256];
  if (resil_fixture_start(NULL, &v->fx, eb, sizeof eb) != 0) fail_msg("fixture: %s", eb);
  size_t n = strlen(yaml_fmt) + 256;
  char *text = malloc(n);
  assert_non_null(text);
  snprintf(text, n, yaml_fmt, resil_fixture_url(v->fx));
  resil_registry_error re;
  resil_registry_error_init(&re);
  resil_status st = resil_registry_load_string(text, strlen(text), "t.yaml", &v->reg, &re);
  if (st != RESIL_OK) {
    char m[600];
    resil_registry_error_format(&re, m, sizeof m);
    fail_msg("load: %s", m);
  }
  free(text);
  assert_status(RESIL_OK, resil_loop_new(NULL, &v->loop));
  assert_status(RESIL_OK, resil_loop_adapter_new(v->loop, &v->ad));
  resil_engine_config ec;
  resil_engine_config_init(&ec);
  ec.adapter = v->ad;
  ec.client = resil_registry_acquire(v->reg, RESIL_REG_HTTP_CLIENT, "fx", &v->client_lease);
  assert_non_null(ec.client);
  assert_status(RESIL_OK, resil_engine_new(&ec, &v->e, NULL));
}

static void env_stop(env *v) {
  resil_engine_free(v->e);
  resil_loop_adapter_free(v->ad);
  resil_loop_free(v->loop);
  resil_registry_release(v->client_lease);
  resil_registry_free(v->reg);
  resil_fixture_stop(v->fx);
}

typedef struct waiter {
  env *v;
  int left;
  resil_outcome last;
  int count;
} waiter;

static void done_count(void *user, resil_engine_handle *h, resil_outcome o,
                       resil_http_response *r) {
  (void)h;
  waiter *w = user;
  resil_http_response_free(r);
  w->last = o;
  w->count++;
  if (--w->left == 0) resil_loop_stop(w->v->loop);
}

static uint64_t breaker_calls(resil_breaker *b) {
  resil_breaker_metrics m;
  memset(&m, 0, sizeof m);
  assert_status(RESIL_OK, resil_breaker_get_metrics(b, &m));
  return m.total_calls;
}

/* n calls of endpoint on chain `name` on the engine, one after another;
 * returns the last outcome. */
static resil_outcome engine_calls(env *v, const char *name, const char *ep, int n) {
  resil_chain *ch = resil_registry_chain(v->reg, name);
  assert_non_null(ch);
  waiter w = {.v = v, .left = 1};
  for (int i = 0; i < n; i++) {
    w.left = 1;
    resil_error err;
    resil_status st = resil_engine_call_chain(v->e, ch, ep, NULL, NULL, done_count, &w, NULL, &err);
    if (st != RESIL_OK) fail_msg("call_chain: %s", err.msg);
    assert_status(RESIL_OK, resil_loop_run(v->loop));
  }
  return w.last;
}

static resil_outcome blocking_calls(env *v, const char *name, const char *ep, int n) {
  resil_chain *ch = resil_registry_chain(v->reg, name);
  resil_http_client *c = resil_registry_http_client(v->reg, "fx");
  resil_outcome o = resil_outcome_make(RESIL_NOT_SENT, RESIL_REASON_LOCAL_ERROR);
  for (int i = 0; i < n; i++) {
    resil_http_request *req = NULL;
    assert_status(RESIL_OK, resil_http_request_new(c, ep, NULL, &req, NULL));
    resil_ctx ctx;
    resil_ctx_init(&ctx);
    ctx.flags = resil_http_request_call_flags(req);
    o = resil_chain_run(ch, &ctx, resil_http_request_attempt, req);
    resil_http_request_free(req);
  }
  return o;
}

/* The chain's layer counters (and the protected call's, as layer n). */
typedef struct layer_snap {
  size_t n;
  resil_layer_stats l[RESIL_CHAIN_MAX_LAYERS + 1];
} layer_snap;

static void snap_layers(resil_chain *ch, layer_snap *s) {
  s->n = resil_chain_layers(ch);
  for (size_t i = 0; i < s->n; i++) assert_status(RESIL_OK, resil_chain_layer_stats(ch, i, &s->l[i]));
  assert_status(RESIL_OK, resil_chain_call_stats(ch, &s->l[s->n]));
}

/* The counters moved by the same amounts from a to b as from b to c. */
static void assert_same_deltas(const char *name, const layer_snap *a, const layer_snap *b,
                               const layer_snap *c) {
  for (size_t i = 0; i <= a->n; i++) {
    const resil_layer_stats *x = &a->l[i], *y = &b->l[i], *z = &c->l[i];
#define SAME(f)                                                                            \
  if (y->f - x->f != z->f - y->f)                                                          \
    fail_msg("%s layer %zu " #f ": engine %llu, blocking %llu", name, i,                  \
             (unsigned long long)(y->f - x->f), (unsigned long long)(z->f - y->f));
    SAME(calls_in) SAME(attempts_out) SAME(rejections) SAME(successes) SAME(retries)
    for (int k = 0; k < 5; k++) SAME(by_kind[k])
#undef SAME
  }
}

/* Retry(Breaker) records every attempt in the breaker, Breaker(Retry) one
 * record per logical call: on the engine exactly as on the blocking path. */
static void engine_honours_chain_order_like_blocking_path(void **state) {
  (void)state;
  env v;
  env_start(&v, YAML);
  resil_breaker *b = resil_registry_breaker(v.reg, "b");
  struct {
    const char *chain;
    uint64_t want;
  } cases[] = {{"in", 3 * 4}, {"out", 4}, {"full", 3 * 4}, {"rl_out", 3 * 4}};
  for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
    resil_chain *ch = resil_registry_chain(v.reg, cases[k].chain);
    layer_snap s0, s1, s2;
    snap_layers(ch, &s0);
    uint64_t b0 = breaker_calls(b);
    resil_outcome oe = engine_calls(&v, cases[k].chain, "fail", 4);
    uint64_t b1 = breaker_calls(b);
    snap_layers(ch, &s1);
    resil_outcome ob = blocking_calls(&v, cases[k].chain, "fail", 4);
    uint64_t b2 = breaker_calls(b);
    snap_layers(ch, &s2);
    assert_same_deltas(cases[k].chain, &s0, &s1, &s2);
    assert_int_equal(s1.l[0].calls_in - s0.l[0].calls_in, 4);
    print_message("%s: engine %llu breaker records, blocking %llu\n", cases[k].chain,
                  (unsigned long long)(b1 - b0), (unsigned long long)(b2 - b1));
    assert_int_equal(b1 - b0, cases[k].want);
    assert_int_equal(b2 - b1, cases[k].want);
    assert_int_equal(oe.kind, ob.kind);
    assert_int_equal(oe.http_status, 503);
    assert_int_equal(oe.attempts, 3);
    assert_int_equal(ob.attempts, 3);
  }
  env_stop(&v);
}

/* RateLimiter(Breaker(call)) vs Breaker(RateLimiter(call)) with a limiter
 * out of permits: the first rejects before its breaker is asked; the
 * second takes a breaker permit first and, when the limiter rejects,
 * releases it unrecorded: a HALF_OPEN breaker with one trial permit still
 * has it for the next call (kept, it would refuse: BREAKER_OPEN). */
static void later_layer_rejection_hands_back_earlier_permit(void **state) {
  (void)state;
  env v;
  env_start(&v, YAML);
  resil_breaker *b2 = resil_registry_breaker(v.reg, "b2");
  resil_breaker *b3 = resil_registry_breaker(v.reg, "b3");
  resil_outcome o = engine_calls(&v, "rlfirst", "ok", 1); /* spends rl0's one permit */
  assert_int_equal(o.kind, RESIL_ANSWERED);
  uint64_t c0 = breaker_calls(b2);
  o = engine_calls(&v, "rlfirst", "ok", 1);
  assert_int_equal(o.kind, RESIL_REJECTED);
  assert_int_equal(o.reason, RESIL_REASON_RATE_LIMITED);
  assert_int_equal(breaker_calls(b2), c0);
  for (int i = 0; i < 3; i++) {
    o = engine_calls(&v, "brfirst", "ok", 1);
    assert_int_equal(o.kind, RESIL_REJECTED);
    assert_int_equal(o.reason, RESIL_REASON_RATE_LIMITED);
  }
  /* The same refusals on the blocking path move the layer counters alike. */
  const char *names[] = {"rlfirst", "brfirst"};
  for (int k = 0; k < 2; k++) {
    resil_chain *ch = resil_registry_chain(v.reg, names[k]);
    layer_snap s0, s1, s2;
    snap_layers(ch, &s0);
    (void)engine_calls(&v, names[k], "ok", 2);
    snap_layers(ch, &s1);
    (void)blocking_calls(&v, names[k], "ok", 2);
    snap_layers(ch, &s2);
    assert_same_deltas(names[k], &s0, &s1, &s2);
    assert_int_equal(s1.l[0].rejections - s0.l[0].rejections, k == 0 ? 2 : 0);
    assert_int_equal(s1.l[1].rejections - s0.l[1].rejections, k == 1 ? 2 : 0);
  }
  resil_breaker_metrics m;
  memset(&m, 0, sizeof m);
  assert_status(RESIL_OK, resil_breaker_get_metrics(b3, &m));
  assert_int_equal(m.state, RESIL_BREAKER_HALF_OPEN);
  assert_int_equal(m.total_calls, 0);
  assert_int_equal(m.total_ignored, 0); /* released, not recorded */
  assert_int_equal(m.total_not_permitted, 0);
  resil_engine_stats es;
  assert_status(RESIL_OK, resil_engine_get_stats(v.e, &es));
  assert_int_equal(es.rejected_ratelimiter, 8);
  assert_int_equal(es.rejected_breaker, 0);
  env_stop(&v);
}

/* Breaker(RateLimiter(Retry)) with the limiter's one permit spent by the
 * first call: later calls are refused by the limiter once per logical
 * call, before any attempt, the breaker's permit given back; the layer
 * counters move alike on both paths. */
static void outer_rate_limiter_takes_one_permit_per_call(void **state) {
  (void)state;
  env v;
  env_start(&v, YAML);
  resil_chain *ch = resil_registry_chain(v.reg, "rl0_out");
  resil_outcome o = engine_calls(&v, "rl0_out", "fail", 1);
  assert_int_equal(o.attempts, 3); /* three attempts, one permit */
  assert_int_equal(o.http_status, 503);
  resil_breaker *b2 = resil_registry_breaker(v.reg, "b2");
  uint64_t c0 = breaker_calls(b2);
  assert_int_equal(c0, 1);
  layer_snap s0, s1, s2;
  snap_layers(ch, &s0);
  o = engine_calls(&v, "rl0_out", "fail", 2);
  assert_int_equal(o.kind, RESIL_REJECTED);
  assert_int_equal(o.reason, RESIL_REASON_RATE_LIMITED);
  assert_int_equal(o.attempts, 0);
  snap_layers(ch, &s1);
  o = blocking_calls(&v, "rl0_out", "fail", 2);
  assert_int_equal(o.kind, RESIL_REJECTED);
  assert_int_equal(o.reason, RESIL_REASON_RATE_LIMITED);
  snap_layers(ch, &s2);
  assert_same_deltas("rl0_out", &s0, &s1, &s2);
  assert_int_equal(s1.l[1].rejections - s0.l[1].rejections, 2);
  assert_int_equal(s1.l[2].calls_in - s0.l[2].calls_in, 0);
  assert_int_equal(breaker_calls(b2), c0); /* the permits went back unrecorded */
  env_stop(&v);
}

static void keyed_done(void *user, resil_engine_keyed *k, resil_outcome o,
                       resil_http_response *r) {
  (void)k;
  waiter *w = user;
  resil_http_response_free(r);
  w->last = o;
  w->count++;
  if (--w->left == 0) resil_loop_stop(w->v->loop);
}

static resil_outcome keyed_call(env *v, const char *chain, const char *ep) {
  waiter w = {.v = v, .left = 1};
  resil_error err;
  if (resil_registry_engine_call_keyed(v->reg, v->e, chain, ep, NULL, NULL, keyed_done, &w, NULL,
                                       NULL, &err) != RESIL_OK)
    fail_msg("registry_engine_call_keyed: %s", err.msg);
  assert_status(RESIL_OK, resil_loop_run(v->loop));
  assert_int_equal(w.count, 1);
  return w.last;
}

/* The keyed flow through a registry chain: the chain's retry drives the
 * writes, each write passes the chain's layers in the chain's order (a
 * forced-open breaker before a limiter out of permits refuses with
 * BREAKER_OPEN; the other way round RATE_LIMITED), one lease per call. */
static void keyed_calls_follow_the_chain(void **state) {
  (void)state;
  env v;
  env_start(&v, YAML);
  resil_breaker *b = resil_registry_breaker(v.reg, "b");
  uint64_t b0 = breaker_calls(b);
  resil_outcome o = keyed_call(&v, "in", "fail");
  assert_int_equal(o.http_status, 503);
  assert_int_equal(breaker_calls(b) - b0, 3); /* three writes, each through the breaker */
  o = engine_calls(&v, "rlfirst", "ok", 1); /* spends rl0's one permit */
  assert_int_equal(o.kind, RESIL_ANSWERED);
  o = keyed_call(&v, "kbr", "ok");
  assert_int_equal(o.kind, RESIL_REJECTED);
  assert_int_equal(o.reason, RESIL_REASON_BREAKER_OPEN);
  o = keyed_call(&v, "krl", "ok");
  assert_int_equal(o.kind, RESIL_REJECTED);
  assert_int_equal(o.reason, RESIL_REASON_RATE_LIMITED);
  o = engine_calls(&v, "kbr", "ok", 1);
  assert_int_equal(o.reason, RESIL_REASON_BREAKER_OPEN);
  o = engine_calls(&v, "krl", "ok", 1);
  assert_int_equal(o.reason, RESIL_REASON_RATE_LIMITED);
  resil_error err;
  waiter w = {.v = &v, .left = 1};
  assert_status(RESIL_EINVAL, resil_registry_engine_call_keyed(v.reg, v.e, "out", "ok", NULL, NULL,
                                                               keyed_done, &w, NULL, NULL, &err));
  assert_non_null(strstr(err.msg, "layer 0 (Breaker 'b') is outside the retry"));
  env_stop(&v);
}

/* Retry(Hedge(Breaker)) on a slow answer: one hedge per call, counted by
 * the hedge layer on both paths (the blocking one hedges on the hedge's
 * thread pool, the engine through its split form). */
static void hedge_layer_counts_engine_hedges(void **state) {
  (void)state;
  env v;
  env_start(&v, YAML);
  resil_chain *ch = resil_registry_chain(v.reg, "hedged");
  layer_snap s0, s1, s2;
  snap_layers(ch, &s0);
  resil_outcome o = engine_calls(&v, "hedged", "slow", 2);
  assert_int_equal(o.kind, RESIL_ANSWERED);
  snap_layers(ch, &s1);
  o = blocking_calls(&v, "hedged", "slow", 2);
  assert_int_equal(o.kind, RESIL_ANSWERED);
  snap_layers(ch, &s2);
  assert_int_equal(s1.l[1].hedges - s0.l[1].hedges, 2);
  assert_int_equal(s2.l[1].hedges - s1.l[1].hedges, 2);
  assert_int_equal(s1.l[1].calls_in - s0.l[1].calls_in, 2);
  assert_int_equal(s2.l[1].calls_in - s1.l[1].calls_in, 2);
  assert_int_equal(s1.l[0].calls_in - s0.l[0].calls_in, 2);
  env_stop(&v);
}

static void refused_chains_name_the_layer(void **state) {
  (void)state;
  env v;
  env_start(&v, YAML);
  resil_error err;
  assert_status(RESIL_EINVAL,
                resil_engine_chain_check(resil_registry_chain(v.reg, "bh_out"), &err));
  assert_non_null(strstr(err.msg, "layer 0 (Bulkhead 'bh') is outside the retry"));
  waiter w = {.v = &v, .left = 1};
  resil_engine_handle *h = (resil_engine_handle *)&w;
  assert_status(RESIL_EINVAL, resil_engine_call_chain(v.e, resil_registry_chain(v.reg, "bh_out"),
                                                      "ok", NULL, NULL, done_count, &w, &h, &err));
  assert_null(h);
  assert_non_null(strstr(err.msg, "outside the retry"));
  assert_status(RESIL_OK, resil_engine_chain_check(resil_registry_chain(v.reg, "full"), &err));
  assert_status(RESIL_OK, resil_engine_chain_check(resil_registry_chain(v.reg, "out"), &err));
  assert_status(RESIL_OK, resil_engine_chain_check(resil_registry_chain(v.reg, "rl_out"), &err));
  assert_status(RESIL_EINVAL, resil_engine_chain_check(NULL, &err));
  /* A second retry, a custom layer, a thread pool: by hand. */
  resil_chain_config cc;
  resil_chain_config_init(&cc);
  resil_chain *ch;
  assert_status(RESIL_OK, resil_chain_new(&cc, &ch, NULL));
  resil_retry *r = resil_registry_retry(v.reg, "r");
  assert_status(RESIL_OK, resil_chain_add_retry(ch, r));
  assert_status(RESIL_OK, resil_chain_add_retry(ch, r));
  assert_status(RESIL_EINVAL, resil_engine_chain_check(ch, &err));
  assert_non_null(strstr(err.msg, "layer 1 (Retry 'r') is a second retry"));
  resil_chain_free(ch);
  assert_status(RESIL_OK, resil_chain_new(&cc, &ch, NULL));
  resil_layer l = {.struct_size = sizeof l,
                   .kind = RESIL_LAYER_BREAKER,
                   .label = "Mine",
                   .name = "x",
                   .policy = r,
                   .run = (resil_layer_run_fn)resil_retry_run,
                   .max_attempts = 1};
  assert_status(RESIL_OK, resil_chain_add_layer(ch, &l));
  assert_status(RESIL_EINVAL, resil_engine_chain_check(ch, &err));
  assert_non_null(strstr(err.msg, "layer 0 (Mine 'x') is a custom layer"));
  assert_null(resil_chain_layer_policy(ch, 0));
  resil_chain_free(ch);
  env_stop(&v);
}

/* ---- the registry drives the calls (registry_call.h) ---------------------- */

/* A retry that alternates between generations (max_attempts 2 and 3). */
static const char *GEN_FMT =
    "circuitbreaker:\n"
    "  instances:\n"
    "    b: {minimum_calls: 10000, window_size: 10000}\n"
    "retry:\n"
    "  instances:\n"
    "    r: {max_attempts: %d, wait: %dms, backoff: fixed, respect_retry_after: false}\n"
    "http_client:\n"
    "  instances:\n"
    "    fx:\n"
    "      base_url: %s\n"
    "      max_connections: 64\n"
    "      endpoints:\n"
    "        fail: {path: /status/503, idempotency_key: send}\n"
    "        ok: {path: /items/1}\n"
    "chain:\n"
    "  instances:\n"
    "    c: {total_timeout: 20s, layers: [{retry: r}, {circuitbreaker: b}]}\n"
    "    solo: {layers: [{circuitbreaker: b}]}\n";

static char *gen_text(const env *v, int gen) {
  char *t = malloc(2048);
  assert_non_null(t);
  snprintf(t, 2048, GEN_FMT, gen % 2 ? 2 : 3, gen % 2 ? 1 : 2, resil_fixture_url(v->fx));
  return t;
}

/* env_start with GEN_FMT generation 1. */
static void env_gen_start(env *v) {
  char fmt[2048];
  /* GEN_FMT's max_attempts and wait, the URL left for env_start. */
  snprintf(fmt, sizeof fmt, "%s", GEN_FMT);
  char *p = strstr(fmt, "%d, wait: %dms");
  memcpy(p, "2, wait: 1ms", 12);
  memmove(p + 12, p + 14, strlen(p + 14) + 1);
  env_start(v, fmt);
}

typedef struct reloader {
  env *v;
  atomic_int *done; /* calls completed, read at each reload */
  int reloads;
  int done_at_last;
} reloader;

static void *reload_main(void *u) {
  reloader *rl = u;
  for (int g = 2; g <= 21; g++) {
    /* Spread over the run: reload k once 40k calls have completed. */
    while (atomic_load(rl->done) < 40 * (g - 1)) sched_yield();
    char *t = gen_text(rl->v, g);
    resil_registry_error re;
    resil_registry_error_init(&re);
    assert_status(RESIL_OK, resil_registry_reload_string(rl->v->reg, t, strlen(t), "t.yaml", &re));
    free(t);
    rl->reloads++;
    rl->done_at_last = atomic_load(rl->done);
  }
  return NULL;
}

typedef struct many {
  env *v;
  int submitted, bad, total, window;
  atomic_int done;
} many;

static void many_submit(many *m);

static void many_done(void *user, resil_engine_handle *h, resil_outcome o,
                      resil_http_response *r) {
  many *m = user;
  (void)h;
  resil_http_response_free(r);
  atomic_fetch_add(&m->done, 1);
  if (o.kind != RESIL_ANSWERED || o.http_status != 503 || (o.attempts != 2 && o.attempts != 3)) {
    if (!m->bad) {
      char b[128];
      resil_outcome_format(&o, b, sizeof b);
      print_message("first bad outcome: %s, %u attempts\n", b, (unsigned)o.attempts);
    }
    m->bad++;
  }
  if (m->submitted < m->total) many_submit(m);
  if (atomic_load(&m->done) == m->total) resil_loop_stop(m->v->loop);
}

static void many_submit(many *m) {
  resil_error err;
  resil_status st = resil_registry_engine_call(m->v->reg, m->v->e, "c", "fail", NULL, NULL,
                                               many_done, m, NULL, &err);
  if (st != RESIL_OK) fail_msg("registry_engine_call: %s", err.msg);
  m->submitted++;
}

/* 1000 calls on the engine through a registry chain while another thread
 * reloads the file 20 times with a changed retry: each call ends once,
 * every one after 2 or 3 attempts (its retry's), and the old instances are
 * freed only when their last call gives its lease back (ASan and TSan: no
 * use after free, no leak, no race). */
static void engine_calls_survive_reloads_mt(void **state) {
  (void)state;
  env v;
  env_gen_start(&v);
  many m = {.v = &v, .total = 1000, .window = 50};
  atomic_init(&m.done, 0);
  for (int i = 0; i < m.window; i++) many_submit(&m);
  reloader rl = {.v = &v, .done = &m.done};
  pthread_t th;
  assert_int_equal(0, pthread_create(&th, NULL, reload_main, &rl));
  assert_status(RESIL_OK, resil_loop_run(v.loop));
  pthread_join(th, NULL);
  assert_int_equal(atomic_load(&m.done), 1000);
  assert_int_equal(m.bad, 0);
  assert_int_equal(rl.reloads, 20);
  print_message("calls completed when the 20th reload returned: %d\n", rl.done_at_last);
  assert_true(rl.done_at_last < 1000); /* every reload ran with calls in flight */
  assert_int_equal(resil_engine_active(v.e), 0);
  resil_engine_stats es;
  assert_status(RESIL_OK, resil_engine_get_stats(v.e, &es));
  assert_int_equal(es.calls_completed, 1000);
  env_stop(&v);
}

typedef struct lines {
  pthread_mutex_t mu;
  int retry_r, done_r, done_fx, other;
} lines;

static void on_line(void *user, const char *line) {
  lines *l = user;
  pthread_mutex_lock(&l->mu);
  int r = strstr(line, "\"instance\":\"r\"") != NULL;
  int fx = strstr(line, "\"instance\":\"fx\"") != NULL;
  if (r && strstr(line, "\"kind\":\"retry\"")) l->retry_r++;
  else if (r && strstr(line, "\"kind\":\"call_done\"")) l->done_r++;
  else if (fx && strstr(line, "\"kind\":\"call_done\"")) l->done_fx++;
  else l->other++;
  pthread_mutex_unlock(&l->mu);
}

static void one_call(env *v, const char *chain, const char *ep) {
  waiter w = {.v = v, .left = 1};
  resil_error err;
  if (resil_registry_engine_call(v->reg, v->e, chain, ep, NULL, NULL, done_count, &w, NULL,
                                 &err) != RESIL_OK)
    fail_msg("registry_engine_call: %s", err.msg);
  assert_status(RESIL_OK, resil_loop_run(v->loop));
}

/* resil_registry_events_attach reaches the attempt listeners of the retries
 * and clients the registry built, and those a reload puts in place;
 * detaching stops them. */
static void attempt_events_reach_the_sink(void **state) {
  (void)state;
  env v;
  env_gen_start(&v);
  lines l = {.mu = PTHREAD_MUTEX_INITIALIZER};
  resil_event_sink_config sc;
  resil_event_sink_config_init(&sc);
  sc.fn = on_line;
  sc.user = &l;
  resil_event_sink *sink;
  assert_status(RESIL_OK, resil_event_sink_new(&sc, &sink, NULL));
  one_call(&v, "c", "fail"); /* before attaching: nothing */
  assert_int_equal(l.retry_r + l.done_r + l.done_fx, 0);
  assert_status(RESIL_OK, resil_registry_events_attach(v.reg, sink));
  one_call(&v, "c", "fail"); /* generation 1: 2 attempts */
  assert_int_equal(l.retry_r, 1);
  assert_int_equal(l.done_r, 1);
  one_call(&v, "solo", "ok"); /* no retry: the client reports it */
  assert_int_equal(l.done_fx, 1);
  /* Blocking, under one lease of the chain and of the client. */
  resil_outcome o;
  resil_http_response *resp = NULL;
  resil_error err;
  assert_status(RESIL_OK, resil_registry_http_call(v.reg, "c", "fx", "fail", NULL, NULL, &o,
                                                   &resp, &err));
  assert_int_equal(o.attempts, 2);
  assert_int_equal(resil_http_response_status(resp), 503);
  resil_http_response_free(resp);
  assert_int_equal(l.retry_r, 2);
  assert_int_equal(l.done_r, 2);
  /* A reload replaces the retry (3 attempts): the new one is wired too. */
  char *t = gen_text(&v, 2);
  assert_status(RESIL_OK, resil_registry_reload_string(v.reg, t, strlen(t), "t.yaml", NULL));
  free(t);
  one_call(&v, "c", "fail");
  assert_int_equal(l.retry_r, 4);
  assert_int_equal(l.done_r, 3);
  assert_status(RESIL_OK, resil_registry_events_attach(v.reg, NULL));
  one_call(&v, "c", "fail");
  assert_int_equal(l.retry_r, 4);
  assert_int_equal(l.done_r, 3);
  /* Errors: no such chain or client, nothing sent, no lease kept. */
  assert_status(RESIL_EINVAL, resil_registry_http_call(v.reg, "nope", "fx", "fail", NULL, NULL,
                                                       &o, NULL, &err));
  assert_non_null(strstr(err.msg, "no chain 'nope'"));
  assert_status(RESIL_EINVAL, resil_registry_http_call(v.reg, "c", "nope", "fail", NULL, NULL,
                                                       &o, NULL, &err));
  assert_non_null(strstr(err.msg, "no http_client 'nope'"));
  waiter w = {.v = &v, .left = 1};
  assert_status(RESIL_EINVAL, resil_registry_engine_call(v.reg, v.e, "nope", "fail", NULL, NULL,
                                                         done_count, &w, NULL, &err));
  assert_status(RESIL_EINVAL, resil_registry_engine_call(v.reg, v.e, "c", "nope", NULL, NULL,
                                                         done_count, &w, NULL, &err));
  env_stop(&v);
  resil_event_sink_free(sink);
  pthread_mutex_destroy(&l.mu);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(engine_honours_chain_order_like_blocking_path),
      cmocka_unit_test(later_layer_rejection_hands_back_earlier_permit),
      cmocka_unit_test(outer_rate_limiter_takes_one_permit_per_call),
      cmocka_unit_test(hedge_layer_counts_engine_hedges),
      cmocka_unit_test(refused_chains_name_the_layer),
      cmocka_unit_test(keyed_calls_follow_the_chain),
      cmocka_unit_test(engine_calls_survive_reloads_mt),
      cmocka_unit_test(attempt_events_reach_the_sink),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
#else
int main(void) { return 77; }
#endif
