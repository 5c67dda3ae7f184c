/* Lab experiments A1-A6 and A8 (issue 8, DESIGN §9): the async engine on
 * the built-in loop (resil_loop), or for A8 on libuv through libresil-uv
 * (when built), one loop thread, against the in-process fixture. Each has a deliberately wrong variant whose named check fails.
 * Built when the built-in loop is part of the library (RESIL_HAVE_LOOP). */
#include <malloc.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "lab_result.h"
#include "lab_families.h"
#include "lab_ops.h"

#if defined(RESIL_HAVE_FIXTURE) && defined(RESIL_HAVE_LOOP)

#include "fixture/fixture.h"
#include "resil/breaker.h"
#include "resil/bulkhead.h"
#include "resil/engine.h"
#include "resil/hedge.h"
#include "resil/loop.h"
#include "resil/retry.h"
#ifdef RESIL_HAVE_UV
#include "resil/uv.h"
#endif

#define MS(n) ((int64_t)(n) * 1000000)

static const resil_http_endpoint async_endpoints[] = {
    {.struct_size = sizeof(resil_http_endpoint), .name = "item", .path = "/items/{id}",
     .response_codec = RESIL_HTTP_CODEC_JSON},
    {.struct_size = sizeof(resil_http_endpoint), .name = "flaky", .path = "/flaky/{id}",
     .query = "fail=2&status=503"},
    {.struct_size = sizeof(resil_http_endpoint), .name = "slow", .path = "/slow",
     .query = "ms={ms}"},
    /* A6: the first attempt for an id sleeps, the next answers at once. */
    {.struct_size = sizeof(resil_http_endpoint), .name = "slow_first", .path = "/flaky/{id}",
     .query = "fail=1&status=200&delay_ms=3000"},
    {.struct_size = sizeof(resil_http_endpoint), .name = "idem", .method = RESIL_HTTP_POST,
     .path = "/idem/{name}", .query = "pending_ms=300", .idempotency_key = RESIL_HTTP_KEY_SEND},
    {.struct_size = sizeof(resil_http_endpoint), .name = "post_slow", .method = RESIL_HTTP_POST,
     .path = "/slow", .query = "ms=200"},
};

static int64_t now_ms(void) { return lab_now_ns() / 1000000; }

/* One engine on one built-in loop, and what its completions saw. */
typedef struct async_lab {
  lab_result *r; /* --metrics / --events (lab_ops.h) */
  resil_fixture *fx;
  resil_http_client *c;
  resil_loop *loop;
  resil_loop_adapter *ad;
  resil_engine *e;
#ifdef RESIL_HAVE_UV
  int on_uv;      /* the libuv loop through libresil-uv instead */
  uv_loop_t uvl;
  uv_timer_t bound; /* bounds one uv_run(UV_RUN_ONCE) */
#endif
  size_t n;           /* calls */
  size_t done;        /* completions */
  size_t twice;       /* calls completed more than once */
  pthread_t loop_thread;
  size_t other_threads;
  unsigned char *count;
  resil_outcome *o;
  int64_t *t_submit, *t_done; /* ms */
  char (*ids)[16];
  /* Series for the HTML report (async_sampling): after each loop pass, at
   * most every ASYNC_SAMPLE_MS and at most ASYNC_SAMPLES times, sample()
   * adds its fields to a row {t_ms} appended to samples; NULL: none. */
  json_t *samples;
  void (*sample)(struct async_lab *a, json_t *row);
  void *sample_user;
  int64_t sample_t0_us, sample_last_us;
} async_lab;

enum { ASYNC_SAMPLE_MS = 5, ASYNC_SAMPLES = 400 };

static int64_t now_us(void) { return lab_now_ns() / 1000; }

/* Takes one sample now when due (or always with force: the first, the
 * one after submitting and the last, so at most ASYNC_SAMPLES + 3). */
static void async_sample_now(async_lab *a, int force) {
  if (!a->samples || (!force && json_array_size(a->samples) >= ASYNC_SAMPLES)) return;
  int64_t t = now_us();
  if (!force && t - a->sample_last_us < ASYNC_SAMPLE_MS * 1000) return;
  a->sample_last_us = t;
  json_t *row = json_pack("{s:f}", "t_ms", (double)(t - a->sample_t0_us) / 1e3);
  a->sample(a, row);
  json_array_append_new(a->samples, row);
}

/* Starts sampling with fn (time 0 now); the first sample is taken at once. */
static void async_sampling(async_lab *a, void (*fn)(async_lab *a, json_t *row), void *user) {
  a->samples = json_array();
  a->sample = fn;
  a->sample_user = user;
  a->sample_t0_us = now_us();
  async_sample_now(a, 1);
}

/* Ends sampling: one last sample, then the series goes to observed[key]. */
static void async_sampling_end(lab_result *r, async_lab *a, const char *key) {
  if (!a->samples) return;
  a->sample_last_us = 0;
  async_sample_now(a, 1);
  lab_obs_json(r, key, a->samples);
  a->samples = NULL;
}

typedef struct async_tag {
  async_lab *a;
  size_t i;
} async_tag;

static void on_done(void *user, resil_engine_handle *h, resil_outcome o, resil_http_response *r) {
  (void)h;
  async_tag *t = user;
  async_lab *a = t->a;
  if (!pthread_equal(pthread_self(), a->loop_thread)) a->other_threads++;
  if (a->count[t->i]++) a->twice++;
  a->o[t->i] = o;
  a->t_done[t->i] = now_ms();
  a->done++;
  resil_http_response_free(r);
}

static int async_open_on(lab_result *r, async_lab *a, size_t n, uint32_t conns, int uv) {
  memset(a, 0, sizeof *a);
  a->n = n;
  a->loop_thread = pthread_self();
  a->count = calloc(n, 1);
  a->o = calloc(n, sizeof *a->o);
  a->t_submit = calloc(n, sizeof *a->t_submit);
  a->t_done = calloc(n, sizeof *a->t_done);
  a->ids = calloc(n, sizeof *a->ids);
  if (!lab_check(r, a->count && a->o && a->t_submit && a->t_done && a->ids, "out of memory"))
    return 0;
  resil_fixture_config fc;
  resil_fixture_config_init(&fc);
  /* Twice the client's connections: a transfer the engine removes (a
   * deadline) closes its connection at once, while the server's thread for
   * it may still be sleeping in the handler and counting against the
   * limit. */
  fc.connection_limit = 2 * conns + 16;
  char eb[256];
  if (!lab_check(r, resil_fixture_start(&fc, &a->fx, eb, sizeof eb) == 0, "fixture: %s", eb))
    return 0;
  resil_http_client_config cfg;
  resil_http_client_config_init(&cfg);
  cfg.base_url = resil_fixture_url(a->fx);
  cfg.endpoints = async_endpoints;
  cfg.endpoint_count = sizeof async_endpoints / sizeof async_endpoints[0];
  cfg.max_connections = conns;
  cfg.max_connections_per_host = conns;
  /* Thousands of calls at once on a few connections: each waits its turn
   * in the engine's queue (up to the whole run under a sanitizer), which
   * the default 1 s lease timeout would end NOT_SENT(POOL_TIMEOUT). */
  cfg.lease_timeout_ns = RESIL_S(60);
  lab_ops_client_config(r, &cfg, "client"); /* its name, the event log */
  a->r = r;
  resil_error err;
  if (!lab_check(r, resil_http_client_new(&cfg, &a->c, &err) == RESIL_OK, "client: %s", err.msg))
    return 0;
#ifdef RESIL_HAVE_UV
  if (uv) {
    if (!lab_check(r, uv_loop_init(&a->uvl) == 0, "uv_loop_init failed")) return 0;
    a->on_uv = 1;
    uv_timer_init(&a->uvl, &a->bound);
    if (!lab_check(r, resil_uv_adapter_new(&a->uvl, NULL, &a->ad) == RESIL_OK,
                   "libuv adapter could not be created"))
      return 0;
  } else
#else
  (void)uv;
#endif
  if (!lab_check(r, resil_loop_new(NULL, &a->loop) == RESIL_OK &&
                        resil_loop_adapter_new(a->loop, &a->ad) == RESIL_OK,
                 "built-in loop could not be created"))
    return 0;
  resil_engine_config ec;
  resil_engine_config_init(&ec);
  ec.adapter = a->ad;
  ec.client = a->c;
  return lab_check(r, resil_engine_new(&ec, &a->e, &err) == RESIL_OK, "engine: %s", err.msg);
}

static int async_open(lab_result *r, async_lab *a, size_t n, uint32_t conns) {
  return async_open_on(r, a, n, conns, 0);
}

static void async_close(async_lab *a) {
  json_decref(a->samples);
  a->samples = NULL;
  if (a->r) { /* --metrics: the engine's client before it goes */
    lab_ops_add_client(a->r, "client", a->c);
    lab_capture(a->r);
  }
  resil_engine_free(a->e);
#ifdef RESIL_HAVE_UV
  if (a->on_uv) {
    resil_uv_adapter_free(a->ad);
    uv_close((uv_handle_t *)&a->bound, NULL);
    /* The adapter's handles close on the next pass. */
    uv_run(&a->uvl, UV_RUN_NOWAIT);
    uv_loop_close(&a->uvl);
    a->ad = NULL;
  }
#endif
  resil_loop_adapter_free(a->ad);
  resil_loop_free(a->loop);
  resil_http_client_free(a->c);
  resil_fixture_stop(a->fx);
  free(a->count);
  free(a->o);
  free(a->t_submit);
  free(a->t_done);
  free(a->ids);
}

static int submit(lab_result *r, async_lab *a, size_t i, async_tag *tags, const char *ep,
                  const char *pname, const char *pval, const resil_engine_policies *pol,
                  const resil_ctx *ctx) {
  resil_http_param p = {pname, pval};
  resil_http_args args;
  resil_http_args_init(&args);
  args.params = pname ? &p : NULL;
  args.param_count = pname ? 1 : 0;
  tags[i] = (async_tag){a, i};
  a->t_submit[i] = now_ms();
  resil_error err;
  return lab_check(r, resil_engine_call(a->e, ep, &args, pol, ctx, on_done, &tags[i], NULL, &err) ==
                          RESIL_OK,
                   "submit: %s", err.msg);
}

#ifdef RESIL_HAVE_UV
static void bound_cb(uv_timer_t *t) { (void)t; }
#endif

/* One pass of the loop, waiting at most 10 ms. On libuv a timer bounds the
 * pass: the adapter's wake handle and idle pooled connections keep the loop
 * alive, so a pass whose last completion ran before its poll would
 * otherwise block there for good. */
static void run_once(async_lab *a) {
#ifdef RESIL_HAVE_UV
  if (a->on_uv) {
    uv_timer_start(&a->bound, bound_cb, 10, 0);
    uv_run(&a->uvl, UV_RUN_ONCE);
    uv_timer_stop(&a->bound);
    async_sample_now(a, 0);
    return;
  }
#endif
  resil_loop_run_once(a->loop, MS(10), NULL);
  async_sample_now(a, 0);
}

/* Runs the loop until every call completed or max_ms passed. */
static void run_loop(async_lab *a, int64_t max_ms) {
  int64_t end = now_ms() + max_ms;
  while (a->done < a->n && now_ms() < end) run_once(a);
}

/* ---- A1 ---------------------------------------------------------------- */
/* The report's series: calls in flight (resil_engine_in_flight) and
 * completed over time. */
static void a1_sample(async_lab *a, json_t *row) {
  json_object_set_new(row, "in_flight", json_integer((json_int_t)resil_engine_in_flight(a->e)));
  json_object_set_new(row, "done", json_integer((json_int_t)a->done));
}

/* 10,000 logical GETs in flight at once on one thread through
 * Retry(Breaker(Bulkhead(HTTP))). The wrong variant's bulkhead has 1,000
 * slots and no queue: 9,000 calls are refused. */
static int a1_run(lab_result *r, uint32_t bulkhead, int uv) {
  enum { N = 10000 };
  async_lab a;
  memset(&a, 0, sizeof a);
  async_tag *tags = calloc(N, sizeof *tags);
  resil_retry *rt = NULL;
  resil_breaker *br = NULL;
  resil_bulkhead *bh = NULL;
  if (!lab_check(r, tags != NULL, "out of memory") || !async_open_on(r, &a, N, 64, uv)) goto out;
  resil_retry_config rc;
  resil_retry_config_init(&rc);
  rc.wait_ns = MS(50);
  resil_breaker_config bc;
  resil_breaker_config_init(&bc);
  resil_bulkhead_config hc;
  resil_bulkhead_config_init(&hc);
  hc.max_concurrent = bulkhead;
  hc.max_wait_ns = 0;
  if (!lab_check(r, resil_retry_new(&rc, &rt, NULL) == RESIL_OK &&
                        resil_breaker_new(&bc, &br, NULL) == RESIL_OK &&
                        resil_bulkhead_new(&hc, &bh, NULL) == RESIL_OK,
                 "policies could not be created"))
    goto out;
  resil_engine_policies pol;
  resil_engine_policies_init(&pol);
  pol.retry = rt;
  pol.breaker = br;
  pol.bulkhead = bh;
  struct mallinfo2 m0 = mallinfo2();
  int64_t t0 = now_ms();
  async_sampling(&a, a1_sample, NULL);
  for (size_t i = 0; i < N; i++) {
    snprintf(a.ids[i], sizeof a.ids[i], "%zu", i);
    if (!submit(r, &a, i, tags, "item", "id", a.ids[i], &pol, NULL)) goto out;
  }
  async_sample_now(&a, 1);
  /* Every logical call is in flight (submitted, not completed). */
  size_t peak = resil_engine_active(a.e);
  /* Heap in use once every call's attempt has started: a transfer in
   * libcurl or queued in the engine for one of the 64 connections (glibc's
   * count; 0 under a sanitizer's allocator). */
  while (resil_engine_in_flight(a.e) + resil_engine_queued(a.e) < N && a.done == 0 &&
         now_ms() - t0 < 60000)
    run_once(&a);
  struct mallinfo2 m1 = mallinfo2();
  long long per_call =
      m1.uordblks > m0.uordblks ? (long long)((m1.uordblks - m0.uordblks) / N) : 0;
  run_loop(&a, 120000);
  int64_t elapsed = now_ms() - t0;
  size_t answered = 0;
  for (size_t i = 0; i < N; i++)
    if (a.count[i] && a.o[i].http_status == 200) answered++;
  size_t peak_transfers = resil_engine_peak_in_flight(a.e);
  async_sampling_end(r, &a, "in_flight_series");
  lab_obs_int(r, "calls", N);
  lab_obs_int(r, "answered", (long long)answered);
  lab_obs_int(r, "completed", (long long)a.done);
  lab_obs_int(r, "loop_threads", a.other_threads ? 2 : 1);
  lab_obs_int(r, "peak_in_flight", (long long)peak);
  lab_obs_int(r, "peak_transfers", (long long)peak_transfers);
  lab_obs_int(r, "upstream_saw", resil_fixture_attempts(a.fx, "items"));
  lab_obs_int(r, "elapsed_ms", elapsed);
  lab_obs_int(r, "heap_bytes_per_call_in_flight", per_call);
  lab_obs_str(r, "loop", uv ? "libuv (libresil-uv)" : "resil_loop");
  lab_summary(r, "%d GETs submitted at once through Retry(Breaker(Bulkhead(%u, no queue)(HTTP))) on one %s thread, 64 connections: %zu answered 200, peak %zu in flight (%zu transfers), %lld ms, %lld heap bytes per call in flight",
              N, bulkhead, uv ? "libuv loop" : "resil_loop", answered, peak, peak_transfers,
              (long long)elapsed,
              per_call);
  lab_expect(r, "all_answered", answered == N, "%zu of %d answered", answered, N);
  lab_expect(r, "exactly_once", a.done == N && a.twice == 0, "%zu completions, %zu twice", a.done,
             a.twice);
  lab_expect(r, "one_loop_thread", a.other_threads == 0, "%zu completions on another thread",
             a.other_threads);
  lab_expect(r, "all_in_flight", peak == N, "peak in flight %zu, expected %d", peak, N);
  lab_check(r, peak_transfers <= 64, "%zu transfers at once on 64 connections", peak_transfers);
out:
  async_close(&a);
  free(tags);
  resil_retry_free(rt);
  resil_breaker_free(br);
  resil_bulkhead_free(bh);
  return r->pass;
}

static int a1(lab_result *r) { return a1_run(r, 10000, 0); }
static int a1_wrong(lab_result *r) { return a1_run(r, 1000, 0); }
#ifdef RESIL_HAVE_UV
/* A8: A1 again on a libuv loop through libresil-uv. */
static int a8(lab_result *r) { return a1_run(r, 10000, 1); }
static int a8_wrong(lab_result *r) { return a1_run(r, 1000, 1); }
#endif

/* ---- A2 ---------------------------------------------------------------- */
/* 200 calls, each answered 503, 503, 200, with a 50 ms backoff: the waits
 * are timers, so all 200 finish in well under the 20 s the waits add up
 * to. The wrong variant has no retry. */
static int a2_run(lab_result *r, int with_retry) {
  enum { N = 200 };
  async_lab a;
  memset(&a, 0, sizeof a);
  static async_tag tags[N];
  resil_retry *rt = NULL;
  if (!async_open(r, &a, N, 64)) goto out;
  resil_retry_config rc;
  resil_retry_config_init(&rc);
  rc.max_attempts = 3;
  rc.wait_ns = MS(50);
  if (!lab_check(r, resil_retry_new(&rc, &rt, NULL) == RESIL_OK, "retry could not be created"))
    goto out;
  resil_engine_policies pol;
  resil_engine_policies_init(&pol);
  pol.retry = with_retry ? rt : NULL;
  int64_t t0 = now_ms();
  for (size_t i = 0; i < N; i++) {
    snprintf(a.ids[i], sizeof a.ids[i], "a2-%zu", i);
    if (!submit(r, &a, i, tags, "flaky", "id", a.ids[i], &pol, NULL)) goto out;
  }
  run_loop(&a, 60000);
  int64_t elapsed = now_ms() - t0;
  size_t ok = 0;
  for (size_t i = 0; i < N; i++)
    if (a.count[i] && a.o[i].http_status == 200) ok++;
  long attempts = resil_fixture_attempts(a.fx, "flaky");
  lab_obs_int(r, "calls", N);
  lab_obs_int(r, "attempts", attempts);
  lab_obs_int(r, "succeeded", (long long)ok);
  lab_obs_int(r, "loop_threads", a.other_threads ? 2 : 1);
  lab_obs_int(r, "elapsed_ms", elapsed);
  lab_obs_int(r, "sum_of_waits_ms", (long long)N * 2 * 50);
  lab_summary(r, "%d calls answered 503, 503, 200 with a 50 ms backoff%s: %zu succeeded, %ld attempts, %lld ms (the waits add up to %d ms)",
              N, with_retry ? "" : " (no retry)", ok, attempts, (long long)elapsed, N * 2 * 50);
  lab_expect(r, "all_succeed", ok == N, "%zu of %d succeeded", ok, N);
  lab_expect(r, "three_attempts_each", attempts == 3 * N, "%ld attempts, expected %d", attempts,
             3 * N);
  lab_expect(r, "waits_overlap", elapsed < 400, "%lld ms, expected < 400", (long long)elapsed);
  lab_expect(r, "exactly_once", a.done == N && a.twice == 0, "%zu completions", a.done);
out:
  async_close(&a);
  resil_retry_free(rt);
  return r->pass;
}

static int a2(lab_result *r) { return a2_run(r, 1); }
static int a2_wrong(lab_result *r) { return a2_run(r, 0); }

/* ---- A3 ---------------------------------------------------------------- */
/* 100 calls to a slow route (2 s) with a 200 ms deadline among 1,000 fast
 * calls: the deadline removes the 100 transfers at once (UNKNOWN, they
 * were sent), the 1,000 succeed. The wrong variant gives the slow calls no
 * deadline. */
static int cmp_i64(const void *x, const void *y) {
  int64_t a = *(const int64_t *)x, b = *(const int64_t *)y;
  return a < b ? -1 : a > b;
}

static int a3_run(lab_result *r, int with_deadline) {
  enum { SLOW = 100, FAST = 1000, N = SLOW + FAST };
  async_lab a;
  memset(&a, 0, sizeof a);
  async_tag *tags = calloc(N, sizeof *tags);
  if (!lab_check(r, tags != NULL, "out of memory") || !async_open(r, &a, N, 200)) goto out;
  resil_ctx ctx;
  resil_ctx_init(&ctx);
  int64_t t0 = now_ms();
  for (size_t i = 0; i < N; i++) {
    if (i < SLOW) {
      resil_ctx_init(&ctx);
      if (with_deadline) resil_ctx_set_timeout_ns(&ctx, MS(200));
      if (!submit(r, &a, i, tags, "slow", "ms", "2000", NULL, &ctx)) goto out;
    } else {
      snprintf(a.ids[i], sizeof a.ids[i], "%zu", i);
      if (!submit(r, &a, i, tags, "item", "id", a.ids[i], NULL, NULL)) goto out;
    }
  }
  run_loop(&a, 60000);
  int64_t elapsed = now_ms() - t0;
  size_t dl = 0, fast_ok = 0;
  int64_t late[SLOW];
  for (size_t i = 0; i < SLOW; i++) {
    if (a.count[i] && a.o[i].kind == RESIL_UNKNOWN && a.o[i].reason == RESIL_REASON_TIMEOUT) dl++;
    late[i] = a.count[i] ? a.t_done[i] - a.t_submit[i] - 200 : INT64_MAX / 2;
  }
  char first_bad[96] = "none";
  for (size_t i = SLOW; i < N; i++) {
    if (a.count[i] && a.o[i].http_status == 200) fast_ok++;
    else if (strcmp(first_bad, "none") == 0)
      resil_outcome_format(&a.o[i], first_bad, sizeof first_bad);
  }
  /* The report's series: how much of its budget each slow call used
   * (submit to completion, ms) against the deadline. */
  json_t *used = json_array();
  for (size_t i = 0; i < SLOW; i++)
    json_array_append_new(used, a.count[i] ? json_integer(a.t_done[i] - a.t_submit[i])
                                           : json_null());
  lab_obs_json(r, "slow_call_ms", used);
  lab_obs_int(r, "deadline_ms", with_deadline ? 200 : 0);
  qsort(late, SLOW, sizeof late[0], cmp_i64);
  int64_t p99 = late[(SLOW * 99 + 99) / 100 - 1];
  int64_t early = late[0];
  lab_obs_int(r, "deadline_outcomes", (long long)dl);
  lab_obs_int(r, "fast_ok", (long long)fast_ok);
  lab_obs_str(r, "fast_first_failure", first_bad);
  lab_obs_int(r, "deadline_p99_late_ms", p99);
  lab_obs_int(r, "deadline_earliest_late_ms", early);
  lab_obs_int(r, "loop_threads", a.other_threads ? 2 : 1);
  lab_obs_int(r, "elapsed_ms", elapsed);
  lab_summary(r, "%d calls to a 2 s route %s among %d fast calls: %zu ended UNKNOWN(timeout), p99 %lld ms past the deadline, %zu fast calls succeeded, %lld ms",
              SLOW, with_deadline ? "with a 200 ms deadline" : "without a deadline", FAST, dl,
              (long long)p99, fast_ok, (long long)elapsed);
  lab_expect(r, "deadline_unknown", dl == SLOW, "%zu of %d ended UNKNOWN at the deadline", dl,
             SLOW);
  lab_expect(r, "fast_ok", fast_ok == FAST, "%zu of %d fast calls succeeded (first failure %s)",
             fast_ok, FAST, first_bad);
  lab_expect(r, "at_the_deadline", p99 < 20 && early >= 0,
             "p99 %lld ms past the deadline (earliest %lld), expected 0..20", (long long)p99,
             (long long)early);
out:
  async_close(&a);
  free(tags);
  return r->pass;
}

static int a3(lab_result *r) { return a3_run(r, 1); }
static int a3_wrong(lab_result *r) { return a3_run(r, 0); }

/* ---- A4 ---------------------------------------------------------------- */
/* Cancellation from another thread: call 0 is in flight on a 5 s route
 * (the fixture has counted its effect), call 1 waits for the bulkhead's
 * one slot. A second thread cancels both; the completions come on the
 * next loop iteration. The wrong variant does not cancel and leaves the
 * calls to a 300 ms deadline instead. */
typedef struct a4_canceller {
  async_lab *a;
  resil_engine_handle *h[2];
  int cancel; /* 0: the wrong variant, nothing cancelled */
  int64_t t_cancel_ns[2];
} a4_canceller;

static int64_t now_ns(void) { return lab_now_ns(); }

static void *a4_cancel_main(void *u) {
  a4_canceller *k = u;
  /* The first call has reached the route (its effect is counted). */
  int64_t end = now_ms() + 10000;
  while (resil_fixture_attempts(k->a->fx, "slow") < 1 && now_ms() < end) {
    struct timespec ts = {0, 1000000};
    nanosleep(&ts, NULL);
  }
  /* The waiting call first: cancelled the other way round, the loop
   * thread could end call 0 before call 1's cancel arrives and hand call 1
   * the freed slot, which it would rightly send (seen under TSan). */
  for (int i = 1; i >= 0; i--) {
    k->t_cancel_ns[i] = now_ns();
    if (k->cancel) resil_engine_cancel(k->h[i]);
  }
  return NULL;
}

static int64_t a4_done_ns[2];
static void a4_on_done(void *user, resil_engine_handle *h, resil_outcome o,
                       resil_http_response *res) {
  async_tag *t = user;
  a4_done_ns[t->i] = now_ns();
  on_done(user, h, o, res);
}

static int a4_run(lab_result *r, int cancel) {
  enum { N = 2 };
  async_lab a;
  memset(&a, 0, sizeof a);
  static async_tag tags[N];
  resil_bulkhead *bh = NULL;
  a4_canceller k;
  memset(&k, 0, sizeof k);
  if (!async_open(r, &a, N, 8)) goto out;
  resil_bulkhead_config hc;
  resil_bulkhead_config_init(&hc);
  hc.max_concurrent = 1;
  hc.max_wait_ns = MS(10000);
  if (!lab_check(r, resil_bulkhead_new(&hc, &bh, NULL) == RESIL_OK, "bulkhead could not be created"))
    goto out;
  resil_engine_policies pol;
  resil_engine_policies_init(&pol);
  pol.bulkhead = bh;
  resil_ctx ctx;
  resil_ctx_init(&ctx);
  if (!cancel) resil_ctx_set_timeout_ns(&ctx, MS(300));
  resil_http_param p = {"ms", "5000"};
  resil_http_args args;
  resil_http_args_init(&args);
  args.params = &p;
  args.param_count = 1;
  k.a = &a;
  k.cancel = cancel;
  for (size_t i = 0; i < N; i++) {
    tags[i] = (async_tag){&a, i};
    resil_error err;
    if (!lab_check(r, resil_engine_call(a.e, "slow", &args, &pol, &ctx, a4_on_done, &tags[i],
                                        &k.h[i], &err) == RESIL_OK,
                   "submit: %s", err.msg))
      goto out;
  }
  pthread_t th;
  if (!lab_check(r, pthread_create(&th, NULL, a4_cancel_main, &k) == 0, "thread")) goto out;
  run_loop(&a, 20000);
  pthread_join(th, NULL);
  double lat[2];
  for (int i = 0; i < 2; i++)
    lat[i] = a.count[i] ? (double)(a4_done_ns[i] - k.t_cancel_ns[i]) / 1e6 : 1e9;
  double worst = lat[0] > lat[1] ? lat[0] : lat[1];
  resil_bulkhead_metrics m;
  resil_bulkhead_get_metrics(bh, &m);
  char sent[64], waiting[64];
  resil_outcome_format(&a.o[0], sent, sizeof sent);
  resil_outcome_format(&a.o[1], waiting, sizeof waiting);
  long effects = resil_fixture_effects(a.fx, "slow");
  lab_obs_int(r, "cancel_latency_ms", (long long)(worst + 0.999));
  lab_obs_int(r, "cancel_latency_us_sent", (long long)(lat[0] * 1000));
  lab_obs_int(r, "cancel_latency_us_waiting", (long long)(lat[1] * 1000));
  lab_obs_str(r, "outcome_sent", resil_outcome_kind_name(a.o[0].kind));
  lab_obs_str(r, "outcome_sent_full", sent);
  lab_obs_str(r, "outcome_waiting", resil_outcome_kind_name(a.o[1].kind));
  lab_obs_str(r, "outcome_waiting_full", waiting);
  lab_obs_int(r, "effects", effects);
  lab_obs_int(r, "upstream_attempts", resil_fixture_attempts(a.fx, "slow"));
  lab_obs_int(r, "bulkhead_withdrawn", (long long)m.withdrawn);
  lab_obs_int(r, "loop_threads", a.other_threads ? 2 : 1);
  lab_summary(r, "%s a call in flight on a 5 s route and a call queued for the bulkhead's one slot: completed %.2f ms and %.2f ms after the cancel, %s and %s, %ld effect(s) at the fixture",
              cancel ? "another thread cancels" : "nobody cancels (a 300 ms deadline)", lat[0],
              lat[1], sent, waiting, effects);
  int cancelled_sent = a.o[0].kind == RESIL_UNKNOWN && a.o[0].reason == RESIL_REASON_CANCELLED;
  int cancelled_waiting = (a.o[1].kind == RESIL_NOT_SENT || a.o[1].kind == RESIL_REJECTED) &&
                          a.o[1].reason == RESIL_REASON_CANCELLED;
  lab_expect(r, "cancel_latency", worst < 5, "%.2f ms from the cancel to the completion, expected < 5",
             worst);
  lab_expect(r, "outcome_sent", cancelled_sent, "the call in flight ended %s, expected UNKNOWN(cancelled)",
             sent);
  lab_expect(r, "outcome_waiting", cancelled_waiting,
             "the waiting call ended %s, expected NOT_SENT or REJECTED (cancelled)", waiting);
  lab_expect(r, "effects", effects == 1, "%ld effects at the fixture, expected 1", effects);
  lab_expect(r, "exactly_once", a.done == N && a.twice == 0, "%zu completions", a.done);
out:
  async_close(&a);
  for (int i = 0; i < 2; i++) resil_engine_handle_release(k.h[i]);
  resil_bulkhead_free(bh);
  return r->pass;
}

static int a4(lab_result *r) { return a4_run(r, 1); }
static int a4_wrong(lab_result *r) { return a4_run(r, 0); }

/* ---- A5 ---------------------------------------------------------------- */
/* The report's series: slots held (concurrent calls) and waiters queued
 * over time, from the bulkhead's metrics. */
static void a5_sample(async_lab *a, json_t *row) {
  resil_bulkhead_metrics m;
  memset(&m, 0, sizeof m);
  resil_bulkhead_get_metrics((const resil_bulkhead *)a->sample_user, &m);
  json_object_set_new(row, "concurrent", json_integer(m.in_flight));
  json_object_set_new(row, "waiting", json_integer(m.waiting));
  json_object_set_new(row, "done", json_integer((json_int_t)a->done));
}

/* A bulkhead of 10 with a 1 s max wait, 100 calls at once to a 50 ms route:
 * 90 queue (FIFO, no thread blocked), ten at a time reach the route, all
 * succeed. The wrong variant waits 0 ms: 90 are rejected at once. */
static int a5_run(lab_result *r, int64_t max_wait_ms) {
  enum { N = 100, SLOTS = 10 };
  async_lab a;
  memset(&a, 0, sizeof a);
  static async_tag tags[N];
  resil_bulkhead *bh = NULL;
  if (!async_open(r, &a, N, 64)) goto out;
  resil_bulkhead_config hc;
  resil_bulkhead_config_init(&hc);
  hc.max_concurrent = SLOTS;
  hc.max_wait_ns = MS(max_wait_ms);
  if (!lab_check(r, resil_bulkhead_new(&hc, &bh, NULL) == RESIL_OK, "bulkhead could not be created"))
    goto out;
  resil_engine_policies pol;
  resil_engine_policies_init(&pol);
  pol.bulkhead = bh;
  int64_t t0 = now_ms();
  async_sampling(&a, a5_sample, bh);
  for (size_t i = 0; i < N; i++)
    if (!submit(r, &a, i, tags, "slow", "ms", "50", &pol, NULL)) goto out;
  async_sample_now(&a, 1);
  run_loop(&a, 60000);
  int64_t elapsed = now_ms() - t0;
  async_sampling_end(r, &a, "concurrency_series");
  size_t ok = 0, rejected = 0;
  for (size_t i = 0; i < N; i++) {
    if (a.count[i] && a.o[i].http_status == 200) ok++;
    else if (a.count[i] && a.o[i].kind == RESIL_REJECTED) rejected++;
  }
  resil_bulkhead_metrics m;
  resil_bulkhead_get_metrics(bh, &m);
  size_t peak_engine = resil_engine_peak_in_flight(a.e);
  lab_obs_int(r, "calls", N);
  lab_obs_int(r, "succeeded", (long long)ok);
  lab_obs_int(r, "rejected", (long long)rejected);
  lab_obs_int(r, "peak_concurrent", (long long)m.peak_in_flight);
  lab_obs_int(r, "peak_in_flight_transfers", (long long)peak_engine);
  lab_obs_int(r, "peak_waiting", (long long)m.peak_waiting);
  lab_obs_int(r, "handed_over", (long long)m.handed_over);
  lab_obs_int(r, "effects", resil_fixture_effects(a.fx, "slow"));
  lab_obs_int(r, "loop_threads", a.other_threads ? 2 : 1);
  lab_obs_int(r, "elapsed_ms", elapsed);
  lab_summary(r, "%d calls at once to a 50 ms route through a bulkhead of %d with a %lld ms max wait on one loop thread: %zu succeeded, %zu rejected, peak %u concurrent (%zu transfers), %u waited at most, %lld ms",
              N, SLOTS, (long long)max_wait_ms, ok, rejected, m.peak_in_flight, peak_engine,
              m.peak_waiting, (long long)elapsed);
  lab_expect(r, "all_succeed", ok == N, "%zu of %d succeeded (%zu rejected)", ok, N, rejected);
  lab_expect(r, "peak_concurrent", m.peak_in_flight == SLOTS && peak_engine <= SLOTS,
             "peak %u slots, %zu transfers, expected %d", m.peak_in_flight, peak_engine, SLOTS);
  lab_expect(r, "one_loop_thread", a.other_threads == 0, "%zu completions on another thread",
             a.other_threads);
  lab_expect(r, "exactly_once", a.done == N && a.twice == 0, "%zu completions", a.done);
out:
  async_close(&a);
  resil_bulkhead_free(bh);
  return r->pass;
}

static int a5(lab_result *r) { return a5_run(r, 1000); }
static int a5_wrong(lab_result *r) { return a5_run(r, 0); }

/* ---- A6 ---------------------------------------------------------------- */
/* Hedging on the engine, three calls in turn on one loop:
 *   a GET whose first attempt takes 3 s, hedged after 100 ms: the hedge
 *     wins, the primary is removed at once (attempts 2, cancelled 1);
 *   a keyed POST to the idempotent route hedged twice at once (delay 0,
 *     max_hedges 2): the primary holds the key PENDING 300 ms, the hedges
 *     meet it so (409, which by the hedge's default rule for keyed calls
 *     does not win: they keep waiting), the primary's 201 wins; the
 *     server's store makes one effect;
 *   an unkeyed POST: never hedged (passed through, one attempt).
 * The wrong variant gives the calls no hedge: the slow GET waits its 3 s. */
static int a6_run(lab_result *r, int with_hedge) {
  enum { N = 3 };
  async_lab a;
  memset(&a, 0, sizeof a);
  static async_tag tags[N];
  resil_hedge *h = NULL, *hk = NULL;
  if (!async_open(r, &a, N, 16)) goto out;
  resil_hedge_config hc;
  resil_hedge_config_init(&hc);
  hc.name = lab_ops_name(r, "hedge", "hedge"); /* the event log's instance */
  hc.delay_ns = MS(100);
  hc.max_hedges = 1;
  int okh = resil_hedge_new(&hc, &h, NULL) == RESIL_OK;
  resil_hedge_config_init(&hc);
  hc.name = lab_ops_name(r, "hedge_keyed", "hedge_keyed");
  hc.delay_ns = 0;
  hc.max_hedges = 2;
  okh = okh && resil_hedge_new(&hc, &hk, NULL) == RESIL_OK;
  if (!lab_check(r, okh, "hedges could not be created")) goto out;
  lab_ops_hedge_events(r, h); /* --events (lab_ops.h) */
  lab_ops_hedge_events(r, hk);
  resil_engine_policies pol, polk;
  resil_engine_policies_init(&pol);
  resil_engine_policies_init(&polk);
  pol.hedge = with_hedge ? h : NULL;
  polk.hedge = with_hedge ? hk : NULL;
  int64_t t0 = now_ms();
  if (!submit(r, &a, 0, tags, "slow_first", "id", "a6", &pol, NULL)) goto out;
  while (a.done < 1 && now_ms() - t0 < 20000) run_once(&a);
  int64_t get_ms = now_ms() - t0;
  if (!submit(r, &a, 1, tags, "idem", "name", "a6-keyed", &polk, NULL)) goto out;
  while (a.done < 2 && now_ms() - t0 < 40000) run_once(&a);
  if (!submit(r, &a, 2, tags, "post_slow", NULL, NULL, &pol, NULL)) goto out;
  run_loop(&a, 20000);
  resil_hedge_metrics m, mk;
  resil_hedge_get_metrics(h, &m);
  resil_hedge_get_metrics(hk, &mk);
  long attempts = resil_fixture_attempts(a.fx, "flaky");
  long keyed_attempts = resil_fixture_attempts(a.fx, "idem");
  long effects = resil_fixture_effects(a.fx, "idem");
  long unkeyed = resil_fixture_attempts(a.fx, "slow");
  lab_obs_int(r, "attempts", attempts);
  lab_obs_int(r, "cancelled", (long long)m.cancelled_losers);
  lab_obs_int(r, "hedges_won", (long long)m.hedges_won);
  lab_obs_int(r, "get_status", a.o[0].http_status);
  lab_obs_int(r, "get_ms", get_ms);
  lab_obs_int(r, "keyed_attempts", keyed_attempts);
  lab_obs_int(r, "keyed_hedges_sent", (long long)mk.hedges_sent);
  lab_obs_int(r, "keyed_status", a.o[1].http_status);
  lab_obs_int(r, "effects", effects);
  lab_obs_int(r, "unkeyed_attempts", unkeyed);
  lab_obs_int(r, "unkeyed_status", a.o[2].http_status);
  /* The report's bars: attempts the fixture saw and effects it made, per
   * call. */
  lab_obs_json(r, "bars",
               json_pack("[{s:s, s:i, s:i}, {s:s, s:i, s:i}, {s:s, s:i, s:i}]", "label",
                         "slow GET", "attempts", (int)attempts, "effects",
                         (int)resil_fixture_effects(a.fx, "flaky"), "label", "keyed POST",
                         "attempts", (int)keyed_attempts, "effects", (int)effects, "label",
                         "unkeyed POST", "attempts", (int)unkeyed, "effects",
                         (int)resil_fixture_effects(a.fx, "slow")));
  lab_obs_int(r, "passed_unsafe", (long long)m.passed_unsafe);
  lab_obs_int(r, "in_flight_after", (long long)resil_engine_in_flight(a.e));
  lab_obs_int(r, "loop_threads", a.other_threads ? 2 : 1);
  /* The engine's per-layer counts: hedges apart from retries. */
  resil_engine_stats es;
  memset(&es, 0, sizeof es);
  resil_engine_get_stats(a.e, &es);
  lab_obs_int(r, "engine_transfers", (long long)es.transfers);
  lab_obs_int(r, "engine_retries", (long long)es.retries);
  lab_obs_int(r, "engine_hedges_sent", (long long)es.hedges_sent);
  lab_obs_int(r, "engine_hedge_wins", (long long)es.hedge_wins);
  lab_obs_int(r, "engine_cancelled_losers", (long long)es.cancelled_losers);
  lab_obs_int(r, "engine_unhedged", (long long)es.unhedged);
  lab_summary(r, "%s: slow GET answered %d in %lld ms after %ld attempts (%llu hedge won, %llu cancelled); keyed POST hedged %llu times: %ld attempts, %d, %ld effect; unkeyed POST: %ld attempt (%llu passed unhedged)",
              with_hedge ? "hedged" : "not hedged", a.o[0].http_status, (long long)get_ms,
              attempts, (unsigned long long)m.hedges_won,
              (unsigned long long)m.cancelled_losers, (unsigned long long)mk.hedges_sent,
              keyed_attempts, a.o[1].http_status, effects, unkeyed,
              (unsigned long long)m.passed_unsafe);
  lab_expect(r, "hedge_wins", a.o[0].http_status == 200 && attempts == 2 &&
                                  m.hedges_won == 1 && m.cancelled_losers == 1 && get_ms < 2000,
             "GET %d after %ld attempts in %lld ms, %llu won by a hedge, %llu cancelled; expected 200, 2, < 2000, 1, 1",
             a.o[0].http_status, attempts, (long long)get_ms, (unsigned long long)m.hedges_won,
             (unsigned long long)m.cancelled_losers);
  lab_expect(r, "one_effect", effects == 1 && a.o[1].http_status == 201 && mk.hedges_sent == 2,
             "keyed POST %d, %ld effects, %llu hedges; expected 201, 1, 2", a.o[1].http_status,
             effects, (unsigned long long)mk.hedges_sent);
  lab_expect(r, "unkeyed_never_hedged", unkeyed == 1 && a.o[2].http_status == 200,
             "unkeyed POST: %ld attempts, %d", unkeyed, a.o[2].http_status);
  long transfers = attempts + keyed_attempts + unkeyed;
  lab_expect(r, "hedges_apart_from_retries",
             es.retries == 0 && es.hedges_sent == m.hedges_sent + mk.hedges_sent &&
                 (long)es.transfers == transfers && es.hedge_wins == m.hedges_won + mk.hedges_won,
             "engine counted %llu transfers, %llu retries, %llu hedges (%llu won); expected %ld, "
             "0, %llu (%llu)",
             (unsigned long long)es.transfers, (unsigned long long)es.retries,
             (unsigned long long)es.hedges_sent, (unsigned long long)es.hedge_wins, transfers,
             (unsigned long long)(m.hedges_sent + mk.hedges_sent),
             (unsigned long long)(m.hedges_won + mk.hedges_won));
  lab_expect(r, "losers_removed", resil_engine_in_flight(a.e) == 0, "%zu transfers left",
             resil_engine_in_flight(a.e));
  lab_expect(r, "exactly_once", a.done == N && a.twice == 0, "%zu completions", a.done);
out:
  async_close(&a);
  resil_hedge_free(h);
  resil_hedge_free(hk);
  return r->pass;
}

static int a6(lab_result *r) { return a6_run(r, 1); }
static int a6_wrong(lab_result *r) { return a6_run(r, 0); }

const lab_experiment lab_async_experiments[] = {
    {"A1", "10,000 GETs in flight on one thread through Retry(Breaker(Bulkhead(HTTP)))", a1,
     a1_wrong, "a bulkhead of 1,000 without a queue", "all_answered", 0},
    {"A2", "200 calls answered 503, 503, 200 with a 50 ms backoff, timers not threads", a2,
     a2_wrong, "no retry", "all_succeed", 0},
    {"A3", "100 slow calls with a 200 ms deadline among 1,000 fast ones", a3, a3_wrong,
     "no deadline on the slow calls", "deadline_unknown", 0},
    {"A4", "cancellation from another thread of a call in flight and of a call waiting for a bulkhead slot",
     a4, a4_wrong, "no cancel, a 300 ms deadline instead", "cancel_latency", 0},
    {"A5", "a bulkhead of 10 with a 1 s max wait, 100 calls at once to a 50 ms route", a5,
     a5_wrong, "a max wait of 0 ms", "all_succeed", 0},
    {"A6", "hedging: a slow GET won by the hedge, a keyed POST hedged twice, an unkeyed POST",
     a6, a6_wrong, "no hedge", "hedge_wins", 0},
#ifdef RESIL_HAVE_UV
    {"A8", "A1 on a libuv loop through libresil-uv", a8, a8_wrong,
     "a bulkhead of 1,000 without a queue", "all_answered", 0},
#endif
    {NULL, NULL, NULL, NULL, NULL, NULL, 0}};

#else /* the built-in loop or the fixture is not built */

const lab_experiment lab_async_experiments[] = {{NULL, NULL, NULL, NULL, NULL, NULL, 0}};

#endif
