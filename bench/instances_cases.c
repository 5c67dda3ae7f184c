/* The cost of many instances of an upstream (issue 22's "Benchmark",
 * DESIGN §8.4): what choosing an instance per attempt adds, against nginx
 * on 127.0.0.1 listening on several ports, one server block each with the
 * same locations (scripts/nginx-start.sh with RESIL_NGINX_PORTS=4, started
 * by scripts/bench.sh; its URLs given as --nginx-instances). Two clients
 * in each case, configured alike but for their upstream:
 *
 *   one   base_url = the first instance (the client of one instance);
 *   many  instances = all of them (default balance, P2C by fewest in
 *         flight; default ejection settings, which never trigger here).
 *
 *   http_instances_choice_nginx    caller CPU per keep-alive GET /ka
 *       through resil_http_call (no retry, no ctx, no policy chain: the
 *       cheapest call, so the choice weighs the most), "many" against
 *       "one" (target: <= BENCH_INSTANCES_MAX_CPU_RATIO). Both clients
 *       have a pool of as many slots as there are instances, so "many"
 *       keeps one keep-alive connection to each instance (the lease
 *       prefers a slot whose connection goes to the chosen origin) and
 *       "one" the same pool with one connection in use; no connection may
 *       be opened during the measured rounds. A round gives each side the
 *       same number of requests, calibrated during the warm-up to about
 *       25 ms per side, in blocks of BLOCK requests alternating the sides
 *       (ABBA..., from the other side every other round), as
 *       deadline_cases.c does and for the same reason: other work on a
 *       shared machine comes and goes within tens of milliseconds. Caller
 *       CPU is CLOCK_THREAD_CPUTIME_ID over each block, wall CLOCK_MONOTONIC;
 *       summed per side and round. Reported: each side's median over the
 *       rounds, the median of per-round CPU ratios (the target), the ratio
 *       of the medians, the wall ratio, each instance's share of the
 *       "many" side's attempts in the rounds (resil_http_client_instance_stats
 *       .chosen), the load average at the start and end. With --pin (the
 *       default) and two CPUs the caller runs on a CPU other than nginx's
 *       worker (--nginx-cpu).
 *
 *   async_instances_1000_inflight  1,000 GET /ka kept in flight on one
 *       thread through libresil's engine (resil_engine_call with {retry,
 *       breaker, bulkhead}, bench_policies_open as async_cases.c's
 *       libresil side: 64 connections at most, a lease timeout and
 *       slow-call duration of 60 s, a bulkhead of 1,000), one engine per
 *       client on one resil_loop; req/s of "many" against "one" (target:
 *       >= BENCH_INSTANCES_MIN_RATIO). A batch: 1,000 calls submitted at
 *       once, one more at each completion until 3,000 were submitted; it
 *       ends when all have completed. Rounds run the two sides' batches,
 *       in the other order every other round, after a warm-up batch per
 *       side (which opens the connections). Reported: medians over rounds
 *       of each side's req/s and loop-thread CPU per request, the median of
 *       per-round req/s ratios (the target), each instance's share of the
 *       "many" side's answers (resil_http_response_instance), connections
 *       opened, the load average.
 *
 * Every call must end 200 "ok" on its one attempt (a retry would hide a
 * failure), every instance must have answered some of the "many" side's
 * calls, and the breakers must stay CLOSED; otherwise the case is
 * reported INVALID with the reason. */
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

#define CASE_CPU "http_instances_choice_nginx"
#define CASE_ASYNC "async_instances_1000_inflight"
/* Instances at most (--nginx-instances). */
#define MAX_INSTANCES 16

static const char measures_cpu[] =
    "caller CPU of a keep-alive GET /ka (200 \"ok\") through resil_http_call (no retry, no "
    "ctx) on a client of several instances (nginx on several ports, P2C) vs the same call "
    "on a client of the first instance only, blocks alternating the sides, same run";
static const char measures_async[] =
    "1,000 keep-alive GET /ka kept in flight on one thread through libresil's engine with "
    "{retry, breaker, bulkhead}, a client of several instances (nginx on several ports, P2C) "
    "vs a client of the first one only, alternating batches, same run";

static json_t *case_stub(const char *name) {
  json_t *o = json_object();
  json_object_set_new(o, "name", json_string(name));
  json_object_set_new(o, "kind", json_string("instances"));
  json_object_set_new(o, "measures",
                      json_string(strcmp(name, CASE_CPU) ? measures_async : measures_cpu));
  return o;
}

static void case_with(json_t *entries, const char *name, const char *key, const char *why) {
  json_t *o = case_stub(name);
  json_object_set_new(o, key, json_string(why));
  printf("  %-32s %s: %s\n", name, !strcmp(key, "skipped") ? "SKIPPED" : "INVALID", why);
  fflush(stdout);
  json_array_append_new(entries, o);
}

static void both_with(const bench_opts *opts, json_t *entries, const char *key,
                      const char *why) {
  if (bench_selected(opts, CASE_CPU)) case_with(entries, CASE_CPU, key, why);
  if (bench_selected(opts, CASE_ASYNC)) case_with(entries, CASE_ASYNC, key, why);
}

#ifndef RESIL_BENCH_HTTP

int bench_run_instances_cases(const bench_opts *opts, const char *json_path) {
  if (!bench_selected(opts, CASE_CPU) && !bench_selected(opts, CASE_ASYNC)) return 0;
  printf("\n== many instances\n");
  json_t *entries = json_array();
  both_with(opts, entries, "skipped",
            "not built: libresil-http is missing (configure with -DRESIL_WITH_HTTP=ON)");
  return bench_append_cases(json_path, entries, NULL, NULL);
}

#else

#include <curl/curl.h>

#include "http_bench.h"
#include "resil/engine.h"
#include "resil/http.h"
#include "resil/loop.h"

static const char method[] =
    "many instances: nginx on 127.0.0.1 on several ports (scripts/nginx-start.sh, "
    "RESIL_NGINX_PORTS, 1 worker), GET /ka -> 200 \"ok\"; two clients alike but for their "
    "upstream: instances = every port (P2C) vs base_url = the first; blocking: "
    "resil_http_call without retry or ctx, pool of one slot per instance on both, rounds of "
    "~25 ms per side in blocks of 25 requests alternating the sides (ABBA..., from the other "
    "side every other round), caller CPU = CLOCK_THREAD_CPUTIME_ID per block summed per side "
    "and round, ratio = median of per-round CPU ratios; engine: 1,000 in flight with {retry, "
    "breaker, bulkhead}, 64 connections at most, batches of 3,000 alternating the sides "
    "(the order swapped every other round), ratio = median of per-round req/s ratios";

#define name_of(many) ((many) ? "many" : "one")

/* Splits a comma-separated list into urls (NULL-terminated) in buf;
 * returns the count, or -1 with why. */
static int split_urls(const char *list, char *buf, size_t bufsize, const char **urls,
                      char *why, size_t wn) {
  if (strlen(list) >= bufsize) {
    snprintf(why, wn, "--nginx-instances: the list is too long");
    return -1;
  }
  memcpy(buf, list, strlen(list) + 1);
  int n = 0;
  for (char *save = NULL, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
    if (n == MAX_INSTANCES) {
      snprintf(why, wn, "--nginx-instances: more than %d URLs", MAX_INSTANCES);
      return -1;
    }
    urls[n++] = t;
  }
  urls[n] = NULL;
  if (n < 2) {
    snprintf(why, wn, "--nginx-instances: %d URL(s), the cases need at least 2", n);
    return -1;
  }
  return n;
}

static json_t *real_array(const double *v, int n) {
  json_t *a = json_array();
  for (int i = 0; i < n; i++) json_array_append_new(a, json_real(v[i]));
  return a;
}

/* Each instance's share of total, as a JSON array; 0 in *all_used when
 * one had none. */
static json_t *shares(const uint64_t *counts, int n, int *all_used) {
  uint64_t total = 0;
  for (int i = 0; i < n; i++) total += counts[i];
  json_t *a = json_array();
  *all_used = total > 0;
  for (int i = 0; i < n; i++) {
    json_array_append_new(a, json_real(total ? (double)counts[i] / (double)total : 0.0));
    if (!counts[i]) *all_used = 0;
  }
  return a;
}

static void print_shares(const uint64_t *counts, int n) {
  uint64_t total = 0;
  for (int i = 0; i < n; i++) total += counts[i];
  printf("instances' shares");
  for (int i = 0; i < n; i++)
    printf("%s%.3f", i ? " / " : " ", total ? (double)counts[i] / (double)total : 0.0);
}

static uint64_t connections(const resil_http_client *c) {
  resil_http_stats st;
  memset(&st, 0, sizeof st);
  resil_http_client_get_stats(c, &st);
  return st.connections_opened;
}

/* Each instance's `chosen` into out (n of them); 0 or -1 with why. */
static int chosen(const resil_http_client *c, int n, uint64_t *out, char *why, size_t wn) {
  if (resil_http_client_instance_count(c) != (size_t)n) {
    snprintf(why, wn, "the client of %d instances counts %zu", n,
             resil_http_client_instance_count(c));
    return -1;
  }
  for (int i = 0; i < n; i++) {
    resil_http_instance_stats st;
    memset(&st, 0, sizeof st);
    if (resil_http_client_instance_stats(c, (size_t)i, &st) != RESIL_OK) {
      snprintf(why, wn, "resil_http_client_instance_stats(%d) failed", i);
      return -1;
    }
    out[i] = st.chosen;
  }
  return 0;
}

/* ---- http_instances_choice_nginx ----------------------------------------- */

#define BATCH_NS INT64_C(25000000)
#define BLOCK 25
#define MAX_ROUNDS 120

static const resil_http_endpoint endpoints[] = {
    RESIL_HTTP_ENDPOINT(.name = "ka", .method = RESIL_HTTP_GET, .path = "/ka"),
};

/* n GETs of /ka on c; 0, or -1 with why. cpu and wall: ns per request. */
static int block(resil_http_client *c, int many, uint64_t n, double *cpu, double *wall,
                 char *why, size_t wn) {
  int64_t c0 = bench_thread_cpu_ns(), t0 = bench_now_ns();
  for (uint64_t i = 0; i < n; i++) {
    resil_http_response *resp = NULL;
    resil_outcome o = resil_http_call(c, "ka", NULL, NULL, NULL, &resp);
    size_t len = 0;
    const char *body = resp ? resil_http_response_body(resp, &len) : NULL;
    if (!resil_outcome_is_success(&o) || !resp || resil_http_response_status(resp) != 200 ||
        len != 2 || memcmp(body, "ok", 2) != 0) {
      char ob[96];
      resil_outcome_format(&o, ob, sizeof ob);
      const char *e = resp ? resil_http_response_error(resp) : NULL;
      snprintf(why, wn, "%s: GET /ka: %s%s%s", name_of(many), ob, e ? ": " : "", e ? e : "");
      resil_http_response_free(resp);
      return -1;
    }
    resil_http_response_free(resp);
  }
  int64_t t1 = bench_now_ns(), c1 = bench_thread_cpu_ns();
  *cpu = (double)(c1 - c0) / (double)n;
  *wall = (double)(t1 - t0) / (double)n;
  return 0;
}

static resil_http_client *new_client(const char *base_url, const char *const *instances,
                                     uint32_t pool, char *why, size_t wn) {
  resil_http_client_config hc;
  resil_http_client_config_init(&hc);
  hc.name = instances ? "bench_many" : "bench_one";
  if (instances)
    hc.instances = instances;
  else
    hc.base_url = base_url;
  hc.endpoints = endpoints;
  hc.endpoint_count = sizeof endpoints / sizeof endpoints[0];
  hc.max_connections = pool;
  hc.max_connections_per_host = pool;
  hc.user_agent = BENCH_USER_AGENT;
  resil_error err;
  memset(&err, 0, sizeof err);
  resil_http_client *c = NULL;
  if (resil_http_client_new(&hc, &c, &err) != RESIL_OK) {
    snprintf(why, wn, "resil_http_client_new (%s): %s", hc.name, err.msg);
    return NULL;
  }
  return c;
}

static void run_cpu_case(const bench_opts *opts, const char *const *urls, int n, int client_cpu,
                         json_t *entries) {
  char why[512] = "";
  double load0 = bench_loadavg1();
  resil_http_client *cl[2] = {NULL, NULL}; /* [many] */
  cl[0] = new_client(urls[0], NULL, (uint32_t)n, why, sizeof why);
  if (!why[0]) cl[1] = new_client(NULL, urls, (uint32_t)n, why, sizeof why);
  /* Warm-up (every instance's connection opens) and calibration: a side's
   * share of a round lasts about BATCH_NS at the slower side's pace. */
  uint64_t per_round = 0;
  double cpu, wall[2] = {0, 0};
  for (int many = 0; many < 2 && !why[0]; many++)
    if (block(cl[many], many, 300, &cpu, &wall[many], why, sizeof why) == 0)
      block(cl[many], many, 500, &cpu, &wall[many], why, sizeof why);
  if (!why[0]) {
    double want = (double)BATCH_NS / (wall[0] > wall[1] ? wall[0] : wall[1]);
    per_round = want < 200.0 ? 200 : (uint64_t)want;
  }
  per_round = (per_round + BLOCK - 1) / BLOCK * BLOCK;
  int rounds = 8 * opts->runs;
  if (rounds > MAX_ROUNDS) rounds = MAX_ROUNDS;
  if (rounds < 2) rounds = 2;
  double *rc[2], *rw[2], *ratio;
  rc[0] = calloc(5 * (size_t)MAX_ROUNDS, sizeof(double));
  if (!rc[0]) snprintf(why, sizeof why, "out of memory");
  rc[1] = rc[0] ? rc[0] + MAX_ROUNDS : NULL;
  rw[0] = rc[0] ? rc[0] + 2 * MAX_ROUNDS : NULL;
  rw[1] = rc[0] ? rc[0] + 3 * MAX_ROUNDS : NULL;
  ratio = rc[0] ? rc[0] + 4 * MAX_ROUNDS : NULL;
  uint64_t conns0[2] = {0, 0}, chosen0[MAX_INSTANCES], chosen1[MAX_INSTANCES];
  if (!why[0]) chosen(cl[1], n, chosen0, why, sizeof why);
  for (int many = 0; many < 2 && !why[0]; many++) conns0[many] = connections(cl[many]);
  int done = 0;
  for (int k = 0; k < rounds && !why[0]; k++) {
    /* ABBAABBA..., from A in even rounds and B in odd ones. */
    double sum[2][2] = {{0, 0}, {0, 0}}; /* [many][cpu, wall] */
    for (uint64_t b = 0; b < 2 * (per_round / BLOCK) && !why[0]; b++) {
      int many = (uint64_t)k % 2 == ((b + 1) / 2) % 2;
      double bc, bw;
      if (block(cl[many], many, BLOCK, &bc, &bw, why, sizeof why) != 0) break;
      sum[many][0] += bc;
      sum[many][1] += bw;
    }
    if (why[0]) break;
    double blocks = (double)(per_round / BLOCK);
    for (int many = 0; many < 2; many++) {
      rc[many][k] = sum[many][0] / blocks;
      rw[many][k] = sum[many][1] / blocks;
    }
    ratio[k] = rc[1][k] / rc[0][k];
    done = k + 1;
  }
  for (int many = 0; many < 2 && !why[0]; many++) {
    uint64_t opened = connections(cl[many]) - conns0[many];
    if (opened)
      snprintf(why, sizeof why, "%s: %llu connection(s) opened during the measured rounds",
               name_of(many), (unsigned long long)opened);
  }
  int all_used = 0;
  json_t *share = NULL;
  if (!why[0] && chosen(cl[1], n, chosen1, why, sizeof why) == 0) {
    for (int i = 0; i < n; i++) chosen1[i] -= chosen0[i];
    share = shares(chosen1, n, &all_used);
    if (!all_used)
      snprintf(why, sizeof why, "an instance was never chosen during the measured rounds");
  }
  double load1 = bench_loadavg1();
  json_t *o = case_stub(CASE_CPU);
  json_object_set_new(o, "instances", json_integer(n));
  json_object_set_new(o, "loadavg_start", json_real(load0));
  json_object_set_new(o, "loadavg_end", json_real(load1));
  json_object_set_new(o, "rounds", json_integer(done));
  json_object_set_new(o, "requests_per_round", json_integer((json_int_t)per_round));
  json_object_set_new(o, "caller_cpu", json_integer(client_cpu));
  json_object_set_new(o, "server_cpu", json_integer(client_cpu >= 0 ? opts->nginx_cpu : -1));
  if (share) json_object_set_new(o, "instance_shares", share);
  if (done > 0 && !why[0]) {
    double cm = bench_median(rc[1], done), c1 = bench_median(rc[0], done);
    double wm = bench_median(rw[1], done), w1 = bench_median(rw[0], done);
    double r = bench_median(ratio, done);
    json_object_set_new(o, "cpu_ns_per_request_many", json_real(cm));
    json_object_set_new(o, "cpu_ns_per_request_one", json_real(c1));
    json_object_set_new(o, "ns_per_request_many", json_real(wm));
    json_object_set_new(o, "ns_per_request_one", json_real(w1));
    json_object_set_new(o, "ratio", json_real(r));
    json_object_set_new(o, "cpu_ratio_of_medians", json_real(cm / c1));
    json_object_set_new(o, "wall_ratio", json_real(wm / w1));
    json_object_set_new(o, "rounds_cpu_ns_many", real_array(rc[1], done));
    json_object_set_new(o, "rounds_cpu_ns_one", real_array(rc[0], done));
    printf("  %-32s caller CPU %.2f us/request over %d instances, %.2f over one: ratio %.4f "
           "(of medians %.4f); wall %.2f / %.2f us; %d rounds of %llu, load %.2f..%.2f; ",
           CASE_CPU, cm / 1e3, n, c1 / 1e3, r, cm / c1, wm / 1e3, w1 / 1e3, done,
           (unsigned long long)per_round, load0, load1);
    print_shares(chosen1, n);
    printf("\n");
  }
  if (why[0]) {
    json_object_set_new(o, "error", json_string(why));
    printf("  %-32s INVALID: %s\n", CASE_CPU, why);
  }
  fflush(stdout);
  free(rc[0]);
  resil_http_client_free(cl[0]);
  resil_http_client_free(cl[1]);
  json_array_append_new(entries, o);
}

/* ---- async_instances_1000_inflight ----------------------------------------- */

#define ASYNC_INFLIGHT 1000
#define ASYNC_CONNS 64
#define ASYNC_BATCH_FACTOR 3
#define ASYNC_MAX_ROUNDS 31

typedef struct abatch {
  resil_loop *loop;
  size_t inflight, total, started, completed, failures;
  char first_failure[300];
} abatch;

typedef struct eng_side {
  int many;
  int n;                        /* instances of the many side          */
  resil_loop_adapter *ad;
  bench_policies p;             /* client, retry, breaker, bulkhead     */
  resil_engine *eng;
  resil_engine_policies pol;
  abatch *b;
  int broken;
  int count;                    /* 1: count the answering instances     */
  uint64_t answered[MAX_INSTANCES];
  uint64_t other_instance;      /* answers from no instance in range    */
  char submit_error[300];
} eng_side;

static int eng_submit(eng_side *s);

static void eng_done(void *user, resil_engine_handle *h, resil_outcome o,
                     resil_http_response *r) {
  (void)h;
  eng_side *s = user;
  abatch *b = s->b;
  char why[300] = "";
  size_t len = 0;
  const char *body = r ? resil_http_response_body(r, &len) : NULL;
  int ok = resil_outcome_is_success(&o) && r && resil_http_response_status(r) == 200;
  if (!ok) {
    char ob[96];
    resil_outcome_format(&o, ob, sizeof ob);
    const char *e = r ? resil_http_response_error(r) : NULL;
    snprintf(why, sizeof why, "%s%s%s", ob, e ? ": " : "", e ? e : "");
  } else if (!(len == 2 && memcmp(body, "ok", 2) == 0)) {
    ok = 0;
    snprintf(why, sizeof why, "unexpected body");
  } else if (o.attempts > 1) {
    ok = 0;
    snprintf(why, sizeof why, "%u attempts: a retry hid a failure", (unsigned)o.attempts);
  }
  if (ok && s->many && s->count) {
    int i = resil_http_response_instance(r);
    if (i >= 0 && i < s->n)
      s->answered[i]++;
    else
      s->other_instance++;
  }
  resil_http_response_free(r);
  b->completed++;
  if (!ok) {
    b->failures++;
    if (!b->first_failure[0]) snprintf(b->first_failure, sizeof b->first_failure, "%s", why);
  }
  if (b->completed == b->total) resil_loop_stop(b->loop);
  if (b->started < b->total && eng_submit(s) != 0) {
    s->broken = 1;
    resil_loop_stop(b->loop);
  }
}

static int eng_submit(eng_side *s) {
  resil_error err;
  memset(&err, 0, sizeof err);
  s->b->started++;
  if (resil_engine_call(s->eng, "ka", NULL, &s->pol, NULL, eng_done, s, NULL, &err) !=
      RESIL_OK) {
    snprintf(s->submit_error, sizeof s->submit_error, "resil_engine_call: %s", err.msg);
    return -1;
  }
  return 0;
}

static void eng_close(eng_side *s) {
  resil_engine_free(s->eng);
  resil_loop_adapter_free(s->ad);
  bench_policies_close(&s->p);
  s->eng = NULL;
  s->ad = NULL;
}

static int eng_open(eng_side *s, resil_loop *loop, const char *const *urls, int n, int many,
                    char *why, size_t wn) {
  memset(s, 0, sizeof *s);
  s->many = many;
  s->n = n;
  resil_error err;
  memset(&err, 0, sizeof err);
  resil_status st;
  const char *what = "resil_loop_adapter_new";
  if ((st = resil_loop_adapter_new(loop, &s->ad)) != RESIL_OK) goto fail;
  /* As async_cases.c's libresil side: slow calls and the lease timeout at
   * 60 s (a call waits its turn for one of the 64 connections in the
   * engine's queue, which is not the upstream's slowness), a bulkhead as
   * large as the in-flight count. */
  bench_policies_config pc = {.base_url = urls[0],
                              .instances = many ? urls : NULL,
                              .endpoints = endpoints,
                              .endpoint_count = sizeof endpoints / sizeof endpoints[0],
                              .max_connections = ASYNC_CONNS,
                              .lease_timeout_ns = INT64_C(60000000000),
                              .slow_call_ns = INT64_C(60000000000),
                              .bulkhead_max = ASYNC_INFLIGHT};
  if (bench_policies_open(&s->p, &pc, why, wn) != 0) {
    eng_close(s);
    return -1;
  }
  resil_engine_config ec;
  resil_engine_config_init(&ec);
  ec.adapter = s->ad;
  ec.client = s->p.client;
  what = "resil_engine_new";
  if ((st = resil_engine_new(&ec, &s->eng, &err)) != RESIL_OK) goto fail;
  resil_engine_policies_init(&s->pol);
  s->pol.retry = s->p.rt;
  s->pol.breaker = s->p.br;
  s->pol.bulkhead = s->p.bh;
  return 0;
fail:
  snprintf(why, wn, "%s (%s): %s (%s)", what, name_of(many), resil_status_name(st), err.msg);
  eng_close(s);
  return -1;
}

/* One batch of side s; 0, or -1 with why. rps: completed per second; cpu:
 * the loop thread's CPU ns per request. */
static int eng_batch(eng_side *s, resil_loop *loop, abatch *b, double *rps, double *cpu,
                     char *why, size_t wn) {
  memset(b, 0, sizeof *b);
  b->loop = loop;
  b->inflight = ASYNC_INFLIGHT;
  b->total = ASYNC_BATCH_FACTOR * ASYNC_INFLIGHT;
  s->b = b;
  s->broken = 0;
  int64_t c0 = bench_thread_cpu_ns(), t0 = bench_now_ns();
  int rc = 0;
  for (size_t i = 0; i < b->inflight && rc == 0; i++) rc = eng_submit(s);
  resil_status st = rc == 0 ? resil_loop_run(loop) : RESIL_OK;
  int64_t t1 = bench_now_ns(), c1 = bench_thread_cpu_ns();
  if (rc != 0 || st != RESIL_OK || s->broken || b->completed != b->total) {
    snprintf(why, wn, "%s: the batch did not complete (%zu of %zu; loop %s) %s",
             name_of(s->many), b->completed, b->total, resil_status_name(st), s->submit_error);
    return -1;
  }
  if (b->failures) {
    snprintf(why, wn, "%s: %zu of %zu requests failed (first: %s)", name_of(s->many),
             b->failures, b->total, b->first_failure);
    return -1;
  }
  *rps = (double)b->completed * 1e9 / (double)(t1 - t0);
  *cpu = (double)(c1 - c0) / (double)b->completed;
  return 0;
}

static void run_async_case(const bench_opts *opts, const char *const *urls, int n,
                           json_t *entries) {
  char why[600] = "";
  double load0 = bench_loadavg1();
  resil_loop *loop = NULL;
  eng_side *side = calloc(2, sizeof *side); /* [many] */
  abatch *b = malloc(sizeof *b);
  int opened[2] = {0, 0};
  if (!side || !b) snprintf(why, sizeof why, "out of memory");
  if (!why[0] && resil_loop_new(NULL, &loop) != RESIL_OK)
    snprintf(why, sizeof why, "resil_loop_new failed");
  for (int many = 0; many < 2 && !why[0]; many++)
    opened[many] = eng_open(&side[many], loop, urls, n, many, why, sizeof why) == 0;
  int rounds = opts->runs < ASYNC_MAX_ROUNDS ? opts->runs : ASYNC_MAX_ROUNDS;
  if (rounds < 2) rounds = 2;
  double rps[2][ASYNC_MAX_ROUNDS], cpu[2][ASYNC_MAX_ROUNDS], ratio[ASYNC_MAX_ROUNDS];
  double r1, c1;
  /* Warm-up: a batch per side opens the connections. */
  for (int many = 0; many < 2 && !why[0]; many++)
    eng_batch(&side[many], loop, b, &r1, &c1, why, sizeof why);
  if (!why[0]) side[1].count = 1;
  int done = 0;
  for (int r = 0; r < rounds && !why[0]; r++) {
    for (int k = 0; k < 2 && !why[0]; k++) {
      int many = r % 2 ? 1 - k : k;
      eng_batch(&side[many], loop, b, &rps[many][r], &cpu[many][r], why, sizeof why);
    }
    if (why[0]) break;
    ratio[r] = rps[1][r] / rps[0][r];
    done = r + 1;
  }
  long conns[2] = {-1, -1};
  for (int many = 0; many < 2; many++)
    if (opened[many]) conns[many] = (long)connections(side[many].p.client);
  for (int many = 0; many < 2 && !why[0]; many++)
    if (resil_breaker_state(side[many].p.br) != RESIL_BREAKER_CLOSED)
      snprintf(why, sizeof why, "%s: breaker left CLOSED", name_of(many));
  int all_used = 0;
  json_t *share = NULL;
  if (!why[0]) {
    share = shares(side[1].answered, n, &all_used);
    if (side[1].other_instance)
      snprintf(why, sizeof why, "%llu answers from no instance in 0..%d",
               (unsigned long long)side[1].other_instance, n - 1);
    else if (!all_used)
      snprintf(why, sizeof why, "an instance answered none of the measured calls");
  }
  double load1 = bench_loadavg1();
  json_t *o = case_stub(CASE_ASYNC);
  json_object_set_new(o, "instances", json_integer(n));
  json_object_set_new(o, "inflight", json_integer(ASYNC_INFLIGHT));
  json_object_set_new(o, "requests_per_batch",
                      json_integer(ASYNC_BATCH_FACTOR * ASYNC_INFLIGHT));
  json_object_set_new(o, "max_connections", json_integer(ASYNC_CONNS));
  json_object_set_new(o, "rounds", json_integer(done));
  json_object_set_new(o, "loadavg_start", json_real(load0));
  json_object_set_new(o, "loadavg_end", json_real(load1));
  if (conns[0] >= 0) json_object_set_new(o, "connections_opened_one", json_integer(conns[0]));
  if (conns[1] >= 0) json_object_set_new(o, "connections_opened_many", json_integer(conns[1]));
  if (share) json_object_set_new(o, "instance_shares", share);
  if (done > 0 && !why[0]) {
    double rm = bench_median(rps[1], done), ro = bench_median(rps[0], done);
    double cm = bench_median(cpu[1], done), co = bench_median(cpu[0], done);
    double r = bench_median(ratio, done);
    json_object_set_new(o, "req_per_s_many", json_real(rm));
    json_object_set_new(o, "req_per_s_one", json_real(ro));
    json_object_set_new(o, "cpu_us_per_req_many", json_real(cm / 1e3));
    json_object_set_new(o, "cpu_us_per_req_one", json_real(co / 1e3));
    json_object_set_new(o, "ratio", json_real(r));
    json_object_set_new(o, "ratio_of_medians", json_real(rm / ro));
    json_object_set_new(o, "cpu_ratio", json_real(cm / co));
    json_object_set_new(o, "rounds_req_per_s_many", real_array(rps[1], done));
    json_object_set_new(o, "rounds_req_per_s_one", real_array(rps[0], done));
    printf("  %-32s req/s %.0f over %d instances, %.0f over one: ratio %.3f (of medians "
           "%.3f); loop CPU %.2f / %.2f us per request; %ld / %ld connections; %d rounds, "
           "load %.2f..%.2f; ",
           CASE_ASYNC, rm, n, ro, r, rm / ro, cm / 1e3, co / 1e3, conns[1], conns[0], done,
           load0, load1);
    print_shares(side[1].answered, n);
    printf("\n");
  }
  if (why[0]) {
    json_object_set_new(o, "error", json_string(why));
    printf("  %-32s INVALID: %s\n", CASE_ASYNC, why);
  }
  fflush(stdout);
  json_array_append_new(entries, o);
  for (int many = 0; many < 2; many++)
    if (opened[many]) eng_close(&side[many]);
  resil_loop_free(loop);
  free(side);
  free(b);
}

int bench_run_instances_cases(const bench_opts *opts, const char *json_path) {
  int sel_cpu = bench_selected(opts, CASE_CPU), sel_async = bench_selected(opts, CASE_ASYNC);
  if (!sel_cpu && !sel_async) return 0;
  printf("\n== many instances (a client of several nginx ports vs a client of one)\n");
  fflush(stdout);
  json_t *entries = json_array();
  char why[300] = "";
  char buf[4096];
  const char *urls[MAX_INSTANCES + 1];
  int n = 0;
  if (!opts->nginx_instances) {
    both_with(opts, entries, "skipped",
              opts->nginx_skipped
                  ? opts->nginx_skipped
                  : "no nginx instances (--nginx-instances; scripts/bench.sh starts nginx "
                    "on 4 ports)");
    return bench_append_cases(json_path, entries, "instances_method", method);
  }
  if ((n = split_urls(opts->nginx_instances, buf, sizeof buf, urls, why, sizeof why)) < 0) {
    both_with(opts, entries, "error", why);
    return bench_append_cases(json_path, entries, "instances_method", method);
  }
  if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
    both_with(opts, entries, "error", "curl_global_init failed");
    return bench_append_cases(json_path, entries, "instances_method", method);
  }
  if (sel_cpu) {
    /* The caller on a CPU other than nginx's worker, as the deadline
     * case's nginx side does. */
    cpu_set_t saved;
    int ccpu = -1;
    if (opts->pin_threads && opts->nginx_cpu >= 0 && bench_nth_allowed_cpu(1) >= 0 &&
        pthread_getaffinity_np(pthread_self(), sizeof saved, &saved) == 0) {
      for (int i = 0; ccpu < 0 && i < 2; i++)
        if (bench_nth_allowed_cpu(i) != opts->nginx_cpu) ccpu = bench_nth_allowed_cpu(i);
      if (ccpu >= 0 && bench_pin_self(ccpu) != 0) ccpu = -1;
    }
    run_cpu_case(opts, urls, n, ccpu, entries);
    if (ccpu >= 0) pthread_setaffinity_np(pthread_self(), sizeof saved, &saved);
  }
  if (sel_async) run_async_case(opts, urls, n, entries);
  curl_global_cleanup();
  return bench_append_cases(json_path, entries, "instances_method", method);
}

#endif
