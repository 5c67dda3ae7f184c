/* The cost of many instances of an upstream (issue 22's "Benchmark",
 * DESIGN §8.4): what choosing an instance per attempt adds, against nginx
 * on 127.0.0.1 listening on several ports, one server block each with the
 * same locations (scripts/nginx-start.sh with RESIL_NGINX_PORTS=4, started
 * by scripts/bench.sh; its URLs given as --nginx-instances). In each case
 * clients configured alike but for their upstream:
 *
 *   one   base_url = the first instance (the client of one instance);
 *   many  instances = all of them (default balance, P2C by fewest in
 *         flight; default ejection settings, which never trigger here);
 * and a third side, reported and not a target, that isolates one part of
 * the cost (below).
 *
 *   http_instances_choice_nginx    caller CPU per keep-alive GET /ka
 *       through resil_http_call (no retry, no ctx, no policy chain: the
 *       cheapest call, so the choice weighs the most), "many" against
 *       "one" (target: <= BENCH_INSTANCES_MAX_CPU_RATIO). Every client
 *       has a pool of as many slots as there are instances, so "many"
 *       can keep one keep-alive connection to each instance (the lease
 *       prefers a slot whose connection goes to the chosen origin). The
 *       third side, "many_same": as many instances, all the first URL:
 *       the same choice per attempt, but one origin, so one connection
 *       serves them all and the handle's URL never changes. "one" and
 *       "many_same" may open no connection during the measured rounds
 *       (they would not be keep-alive references); the connections "many"
 *       opens are counted and reported per request: they are the choice's
 *       doing, and their cost is in its CPU. A round gives each side the
 *       same number of requests, calibrated during the warm-up to about
 *       25 ms per side, in groups of one block of BLOCK requests per side,
 *       the groups taking the sides in the 6 orders in turn, as
 *       deadline_cases.c alternates its two and for the same reason: other
 *       work on a shared machine comes and goes within tens of
 *       milliseconds. Caller CPU is CLOCK_THREAD_CPUTIME_ID over each
 *       block, wall CLOCK_MONOTONIC; summed per side and round. Reported:
 *       each side's median over the rounds, the median of per-round CPU
 *       ratios many / one (the target) and many_same / one, the ratio of
 *       the medians, the wall ratio, each instance's share of the "many"
 *       side's attempts in the rounds (resil_http_client_instance_stats
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
 *       >= BENCH_INSTANCES_MIN_RATIO). The same 64 connections on every
 *       side: "one" may use them all for its instance
 *       (max_connections_per_host 64), "many" gives each instance its
 *       share, 64 / n (16 for 4); the third side, "many_shared", is "many"
 *       with a per-instance limit of 64 like "one"'s, where the instances
 *       compete for the 64 and the engine's connection cache closes one
 *       instance's idle connection to open another's (its connections per
 *       request are reported). A batch: 1,000 calls submitted at once, one
 *       more at each completion until 3,000 were submitted; it ends when
 *       all have completed. Rounds run the three sides' batches in the 6
 *       orders in turn, after a warm-up batch per side (which opens the
 *       connections). Reported: medians over rounds of each side's req/s
 *       and loop-thread CPU per request, the median of per-round req/s
 *       ratios many / one (the target) and many_shared / one, each
 *       instance's share of the answers (resil_http_response_instance),
 *       connections opened during the rounds, the load average.
 *
 * Every call must end 200 "ok" on its one attempt (a retry would hide a
 * failure), every instance must have answered some of the several-instance
 * sides' calls, and the breakers must stay CLOSED; otherwise the case is
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
    "RESIL_NGINX_PORTS, 1 worker), GET /ka -> 200 \"ok\"; clients alike but for their "
    "upstream: instances = every port (P2C) vs base_url = the first; blocking: "
    "resil_http_call without retry or ctx, a pool of one slot per instance on every side, "
    "rounds of ~25 ms per side in groups of one block of 25 requests per side taking the "
    "sides in the 6 orders in turn, caller CPU = CLOCK_THREAD_CPUTIME_ID per block summed "
    "per side and round, ratio = median of per-round CPU ratios; reference (not a target): "
    "as many instances, all the first URL; engine: 1,000 in flight with {retry, breaker, "
    "bulkhead}, 64 connections at most on every side, 64 / n per instance on the several-"
    "instance side; reference (not a target): 64 per instance; batches of 3,000 in the 6 "
    "orders of the sides in turn, ratio = median of per-round req/s ratios";

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

/* The blocking case's sides: the client of one instance, the client of the
 * n instances (the target), and a client of n instances that are all the
 * first URL (reported, not a target): the same choice per attempt, but one
 * origin, so one connection serves every instance and the URL set on the
 * handle never changes; what the choice costs without changing
 * connections. */
enum { CPU_ONE = 0, CPU_MANY = 1, CPU_SAME = 2, CPU_SIDES = 3 };
static const char *const cpu_key[CPU_SIDES] = {"one", "many", "many_same"};
/* The 6 orders of three sides: a round's groups of one block per side
 * take them in turn, so whatever else the machine does lands on every
 * side alike. */
static const int orders[6][3] = {{0, 1, 2}, {1, 0, 2}, {2, 0, 1},
                                 {0, 2, 1}, {1, 2, 0}, {2, 1, 0}};

static const resil_http_endpoint endpoints[] = {
    RESIL_HTTP_ENDPOINT(.name = "ka", .method = RESIL_HTTP_GET, .path = "/ka"),
};

/* n GETs of /ka on c; 0, or -1 with why. cpu and wall: ns per request. */
static int block(resil_http_client *c, int side, uint64_t n, double *cpu, double *wall,
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
      snprintf(why, wn, "%s: GET /ka: %s%s%s", cpu_key[side], ob, e ? ": " : "", e ? e : "");
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

static resil_http_client *new_client(int side, const char *base_url,
                                     const char *const *instances, uint32_t pool, char *why,
                                     size_t wn) {
  resil_http_client_config hc;
  resil_http_client_config_init(&hc);
  hc.name = cpu_key[side];
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
  const char *same[MAX_INSTANCES + 1];
  for (int i = 0; i < n; i++) same[i] = urls[0];
  same[n] = NULL;
  resil_http_client *cl[CPU_SIDES] = {NULL, NULL, NULL};
  cl[CPU_ONE] = new_client(CPU_ONE, urls[0], NULL, (uint32_t)n, why, sizeof why);
  if (!why[0]) cl[CPU_MANY] = new_client(CPU_MANY, NULL, urls, (uint32_t)n, why, sizeof why);
  if (!why[0]) cl[CPU_SAME] = new_client(CPU_SAME, NULL, same, (uint32_t)n, why, sizeof why);
  /* Warm-up (the connections open) and calibration: a side's share of a
   * round lasts about BATCH_NS at the slowest side's pace. */
  uint64_t per_round = 0;
  double cpu, wall, slowest = 0;
  for (int i = 0; i < CPU_SIDES && !why[0]; i++)
    if (block(cl[i], i, 300, &cpu, &wall, why, sizeof why) == 0 &&
        block(cl[i], i, 500, &cpu, &wall, why, sizeof why) == 0 && wall > slowest)
      slowest = wall;
  if (!why[0]) {
    double want = (double)BATCH_NS / slowest;
    per_round = want < 200.0 ? 200 : (uint64_t)want;
  }
  per_round = (per_round + BLOCK - 1) / BLOCK * BLOCK;
  int rounds = 8 * opts->runs;
  if (rounds > MAX_ROUNDS) rounds = MAX_ROUNDS;
  if (rounds < 2) rounds = 2;
  /* Per side and round: CPU and wall ns per request; per round the CPU
   * ratios many / one and many_same / one. */
  double *mem = calloc((2 * CPU_SIDES + 2) * (size_t)MAX_ROUNDS, sizeof(double));
  double *rc[CPU_SIDES], *rw[CPU_SIDES], *ratio = NULL, *ratio_same = NULL;
  if (!mem) snprintf(why, sizeof why, "out of memory");
  for (int i = 0; mem && i < CPU_SIDES; i++) {
    rc[i] = mem + (size_t)i * MAX_ROUNDS;
    rw[i] = mem + (size_t)(CPU_SIDES + i) * MAX_ROUNDS;
  }
  if (mem) {
    ratio = mem + (size_t)(2 * CPU_SIDES) * MAX_ROUNDS;
    ratio_same = ratio + MAX_ROUNDS;
  }
  uint64_t conns0[CPU_SIDES] = {0, 0, 0}, chosen0[MAX_INSTANCES], chosen1[MAX_INSTANCES];
  if (!why[0]) chosen(cl[CPU_MANY], n, chosen0, why, sizeof why);
  for (int i = 0; i < CPU_SIDES && !why[0]; i++) conns0[i] = connections(cl[i]);
  int done = 0;
  for (int k = 0; k < rounds && !why[0]; k++) {
    double sum[CPU_SIDES][2] = {{0, 0}, {0, 0}, {0, 0}}; /* [side][cpu, wall] */
    for (uint64_t g = 0; g < per_round / BLOCK && !why[0]; g++) {
      const int *order = orders[((uint64_t)k + g) % 6];
      for (int j = 0; j < CPU_SIDES && !why[0]; j++) {
        int i = order[j];
        double bc, bw;
        if (block(cl[i], i, BLOCK, &bc, &bw, why, sizeof why) != 0) break;
        sum[i][0] += bc;
        sum[i][1] += bw;
      }
    }
    if (why[0]) break;
    double groups = (double)(per_round / BLOCK);
    for (int i = 0; i < CPU_SIDES; i++) {
      rc[i][k] = sum[i][0] / groups;
      rw[i][k] = sum[i][1] / groups;
    }
    ratio[k] = rc[CPU_MANY][k] / rc[CPU_ONE][k];
    ratio_same[k] = rc[CPU_SAME][k] / rc[CPU_ONE][k];
    done = k + 1;
  }
  /* "one" and "many_same" must keep their one keep-alive connection; the
   * connections "many" opens are the choice's doing and in its cost. */
  uint64_t opened[CPU_SIDES] = {0, 0, 0};
  for (int i = 0; i < CPU_SIDES; i++) opened[i] = cl[i] ? connections(cl[i]) - conns0[i] : 0;
  for (int i = 0; i < CPU_SIDES && !why[0]; i++)
    if (i != CPU_MANY && opened[i])
      snprintf(why, sizeof why, "%s: %llu connection(s) opened during the measured rounds",
               cpu_key[i], (unsigned long long)opened[i]);
  int all_used = 0;
  json_t *share = NULL;
  if (!why[0] && chosen(cl[CPU_MANY], n, chosen1, why, sizeof why) == 0) {
    for (int i = 0; i < n; i++) chosen1[i] -= chosen0[i];
    share = shares(chosen1, n, &all_used);
    if (!all_used)
      snprintf(why, sizeof why, "an instance was never chosen during the measured rounds");
  }
  double load1 = bench_loadavg1();
  double requests = (double)done * (double)per_round;
  json_t *o = case_stub(CASE_CPU);
  json_object_set_new(o, "instances", json_integer(n));
  json_object_set_new(o, "loadavg_start", json_real(load0));
  json_object_set_new(o, "loadavg_end", json_real(load1));
  json_object_set_new(o, "rounds", json_integer(done));
  json_object_set_new(o, "requests_per_round", json_integer((json_int_t)per_round));
  json_object_set_new(o, "caller_cpu", json_integer(client_cpu));
  json_object_set_new(o, "server_cpu", json_integer(client_cpu >= 0 ? opts->nginx_cpu : -1));
  json_object_set_new(o, "pool", json_integer(n));
  if (share) json_object_set_new(o, "instance_shares", share);
  json_object_set_new(o, "connections_opened_many", json_integer((json_int_t)opened[CPU_MANY]));
  json_object_set_new(o, "connections_per_request_many",
                      json_real(done ? (double)opened[CPU_MANY] / requests : 0.0));
  if (done > 0 && !why[0]) {
    double mc[CPU_SIDES], mw[CPU_SIDES];
    char key[64];
    for (int i = 0; i < CPU_SIDES; i++) {
      mc[i] = bench_median(rc[i], done);
      mw[i] = bench_median(rw[i], done);
      snprintf(key, sizeof key, "cpu_ns_per_request_%s", cpu_key[i]);
      json_object_set_new(o, key, json_real(mc[i]));
      snprintf(key, sizeof key, "ns_per_request_%s", cpu_key[i]);
      json_object_set_new(o, key, json_real(mw[i]));
      snprintf(key, sizeof key, "rounds_cpu_ns_%s", cpu_key[i]);
      json_object_set_new(o, key, real_array(rc[i], done));
    }
    double r = bench_median(ratio, done), rs = bench_median(ratio_same, done);
    json_object_set_new(o, "ratio", json_real(r));
    json_object_set_new(o, "cpu_ratio_of_medians", json_real(mc[CPU_MANY] / mc[CPU_ONE]));
    json_object_set_new(o, "wall_ratio", json_real(mw[CPU_MANY] / mw[CPU_ONE]));
    json_object_set_new(o, "ratio_same", json_real(rs));
    printf("  %-32s caller CPU %.2f us/request over %d instances, %.2f over one: ratio %.4f "
           "(of medians %.4f); wall %.2f / %.2f us; %d rounds of %llu, load %.2f..%.2f; ",
           CASE_CPU, mc[CPU_MANY] / 1e3, n, mc[CPU_ONE] / 1e3, r, mc[CPU_MANY] / mc[CPU_ONE],
           mw[CPU_MANY] / 1e3, mw[CPU_ONE] / 1e3, done, (unsigned long long)per_round, load0,
           load1);
    print_shares(chosen1, n);
    printf("; connections opened: %llu (%.3f per request)\n",
           (unsigned long long)opened[CPU_MANY], (double)opened[CPU_MANY] / requests);
    printf("  %-32s %d instances that are all the first URL (one origin, one connection): "
           "caller CPU %.2f us/request, ratio %.4f (not a target)\n",
           "", n, mc[CPU_SAME] / 1e3, rs);
  }
  if (why[0]) {
    json_object_set_new(o, "error", json_string(why));
    printf("  %-32s INVALID: %s\n", CASE_CPU, why);
  }
  fflush(stdout);
  free(mem);
  for (int i = 0; i < CPU_SIDES; i++) resil_http_client_free(cl[i]);
  json_array_append_new(entries, o);
}

/* ---- async_instances_1000_inflight ----------------------------------------- */

#define ASYNC_INFLIGHT 1000
#define ASYNC_CONNS 64
#define ASYNC_BATCH_FACTOR 3
#define ASYNC_MAX_ROUNDS 31

/* The engine case's sides: the client of one instance (64 connections to
 * it), the client of n instances with ASYNC_CONNS / n connections per
 * instance (the target), and the same client with a per-instance limit of
 * ASYNC_CONNS, as the one-instance client has (reported, not a target). */
enum { SIDE_ONE = 0, SIDE_MANY = 1, SIDE_SHARED = 2, NSIDES = 3 };
static const char *const side_key[NSIDES] = {"one", "many", "many_shared"};
/* Rounds take the three sides in the 6 orders in turn (orders, above). */

typedef struct abatch {
  resil_loop *loop;
  size_t inflight, total, started, completed, failures;
  char first_failure[300];
} abatch;

typedef struct eng_side {
  int side;                     /* SIDE_*                                */
  int n;                        /* instances of its client               */
  uint32_t per_host;            /* its max_connections_per_host          */
  resil_loop_adapter *ad;
  bench_policies p;             /* client, retry, breaker, bulkhead     */
  resil_engine *eng;
  resil_engine_policies pol;
  abatch *b;
  int broken;
  int count;                    /* 1: count the answering instances     */
  uint64_t answered[MAX_INSTANCES];
  uint64_t other_instance;      /* answers from no instance in range    */
  uint64_t conns0;              /* connections opened before the rounds */
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
  if (ok && s->count) {
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

static int eng_open(eng_side *s, resil_loop *loop, const char *const *urls, int n, int side,
                    char *why, size_t wn) {
  memset(s, 0, sizeof *s);
  s->side = side;
  s->n = side == SIDE_ONE ? 1 : n;
  s->per_host = side == SIDE_MANY ? ASYNC_CONNS / (uint32_t)n : ASYNC_CONNS;
  resil_error err;
  memset(&err, 0, sizeof err);
  resil_status st;
  const char *what = "resil_loop_adapter_new";
  if ((st = resil_loop_adapter_new(loop, &s->ad)) != RESIL_OK) goto fail;
  /* As async_cases.c's libresil side: slow calls and the lease timeout at
   * 60 s (a call waits its turn for a connection in the engine's queue,
   * which is not the upstream's slowness), a bulkhead as large as the
   * in-flight count. */
  bench_policies_config pc = {.base_url = urls[0],
                              .instances = side == SIDE_ONE ? NULL : urls,
                              .endpoints = endpoints,
                              .endpoint_count = sizeof endpoints / sizeof endpoints[0],
                              .max_connections = ASYNC_CONNS,
                              .max_connections_per_host = s->per_host,
                              .lease_timeout_ns = INT64_C(60000000000),
                              .slow_call_ns = INT64_C(60000000000),
                              .bulkhead_max = ASYNC_INFLIGHT};
  if (bench_policies_open(&s->p, &pc, why, wn) != 0) {
    eng_close(s);
    return -1;
  }
  what = "resil_engine_new";
  if ((st = bench_policies_engine(&s->p, s->ad, &s->eng, &s->pol, &err)) != RESIL_OK) goto fail;
  return 0;
fail:
  snprintf(why, wn, "%s (%s): %s (%s)", what, side_key[side], resil_status_name(st), err.msg);
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
             side_key[s->side], b->completed, b->total, resil_status_name(st),
             s->submit_error);
    return -1;
  }
  if (b->failures) {
    snprintf(why, wn, "%s: %zu of %zu requests failed (first: %s)", side_key[s->side],
             b->failures, b->total, b->first_failure);
    return -1;
  }
  *rps = (double)b->completed * 1e9 / (double)(t1 - t0);
  *cpu = (double)(c1 - c0) / (double)b->completed;
  return 0;
}

static void set_side(json_t *o, const char *key, int side, json_t *v) {
  char k[96];
  snprintf(k, sizeof k, "%s_%s", key, side_key[side]);
  json_object_set_new(o, k, v);
}

static void run_async_case(const bench_opts *opts, const char *const *urls, int n,
                           json_t *entries) {
  char why[600] = "";
  double load0 = bench_loadavg1();
  resil_loop *loop = NULL;
  eng_side *side = calloc(NSIDES, sizeof *side);
  abatch *b = malloc(sizeof *b);
  int opened[NSIDES] = {0, 0, 0};
  if (!side || !b) snprintf(why, sizeof why, "out of memory");
  if (!why[0] && resil_loop_new(NULL, &loop) != RESIL_OK)
    snprintf(why, sizeof why, "resil_loop_new failed");
  for (int i = 0; i < NSIDES && !why[0]; i++)
    opened[i] = eng_open(&side[i], loop, urls, n, i, why, sizeof why) == 0;
  int rounds = opts->runs < ASYNC_MAX_ROUNDS ? opts->runs : ASYNC_MAX_ROUNDS;
  if (rounds < 2) rounds = 2;
  double rps[NSIDES][ASYNC_MAX_ROUNDS], cpu[NSIDES][ASYNC_MAX_ROUNDS], ratio[ASYNC_MAX_ROUNDS],
      ratio_shared[ASYNC_MAX_ROUNDS];
  double r1, c1;
  /* Warm-up: a batch per side opens the connections. */
  for (int i = 0; i < NSIDES && !why[0]; i++) {
    eng_batch(&side[i], loop, b, &r1, &c1, why, sizeof why);
    side[i].conns0 = connections(side[i].p.client);
    side[i].count = i != SIDE_ONE;
  }
  int done = 0;
  for (int r = 0; r < rounds && !why[0]; r++) {
    for (int k = 0; k < NSIDES && !why[0]; k++) {
      int i = orders[r % 6][k];
      eng_batch(&side[i], loop, b, &rps[i][r], &cpu[i][r], why, sizeof why);
    }
    if (why[0]) break;
    ratio[r] = rps[SIDE_MANY][r] / rps[SIDE_ONE][r];
    ratio_shared[r] = rps[SIDE_SHARED][r] / rps[SIDE_ONE][r];
    done = r + 1;
  }
  long conns[NSIDES] = {-1, -1, -1};
  for (int i = 0; i < NSIDES; i++)
    if (opened[i]) conns[i] = (long)(connections(side[i].p.client) - side[i].conns0);
  for (int i = 0; i < NSIDES && !why[0]; i++)
    if (resil_breaker_state(side[i].p.br) != RESIL_BREAKER_CLOSED)
      snprintf(why, sizeof why, "%s: breaker left CLOSED", side_key[i]);
  json_t *share[NSIDES] = {NULL, NULL, NULL};
  for (int i = SIDE_MANY; i < NSIDES && !why[0]; i++) {
    int all_used = 0;
    share[i] = shares(side[i].answered, n, &all_used);
    if (side[i].other_instance)
      snprintf(why, sizeof why, "%s: %llu answers from no instance in 0..%d", side_key[i],
               (unsigned long long)side[i].other_instance, n - 1);
    else if (!all_used)
      snprintf(why, sizeof why, "%s: an instance answered none of the measured calls",
               side_key[i]);
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
  double requests = (double)done * ASYNC_BATCH_FACTOR * ASYNC_INFLIGHT;
  double med_rps[NSIDES] = {NAN, NAN, NAN}, med_cpu[NSIDES] = {NAN, NAN, NAN};
  for (int i = 0; i < NSIDES; i++) {
    if (opened[i])
      set_side(o, "max_connections_per_host", i, json_integer((json_int_t)side[i].per_host));
    if (conns[i] >= 0) {
      set_side(o, "connections_opened", i, json_integer(conns[i]));
      set_side(o, "connections_per_request", i,
               json_real(done ? (double)conns[i] / requests : 0.0));
    }
    if (share[i]) set_side(o, "instance_shares", i, share[i]);
    if (!done) continue;
    med_rps[i] = bench_median(rps[i], done);
    med_cpu[i] = bench_median(cpu[i], done);
    set_side(o, "req_per_s", i, json_real(med_rps[i]));
    set_side(o, "cpu_us_per_req", i, json_real(med_cpu[i] / 1e3));
    set_side(o, "rounds_req_per_s", i, real_array(rps[i], done));
  }
  if (share[SIDE_MANY])
    json_object_set(o, "instance_shares", share[SIDE_MANY]);
  if (done > 0 && !why[0]) {
    double r = bench_median(ratio, done), rs = bench_median(ratio_shared, done);
    json_object_set_new(o, "ratio", json_real(r));
    json_object_set_new(o, "ratio_of_medians", json_real(med_rps[SIDE_MANY] / med_rps[SIDE_ONE]));
    json_object_set_new(o, "cpu_ratio", json_real(med_cpu[SIDE_MANY] / med_cpu[SIDE_ONE]));
    json_object_set_new(o, "ratio_shared", json_real(rs));
    json_object_set_new(o, "cpu_ratio_shared",
                        json_real(med_cpu[SIDE_SHARED] / med_cpu[SIDE_ONE]));
    printf("  %-32s req/s %.0f over %d instances (%u connections each at most), %.0f over "
           "one: ratio %.3f (of medians %.3f); loop CPU %.2f / %.2f us per request; "
           "connections opened in the rounds %ld / %ld; %d rounds, load %.2f..%.2f; ",
           CASE_ASYNC, med_rps[SIDE_MANY], n, side[SIDE_MANY].per_host, med_rps[SIDE_ONE], r,
           med_rps[SIDE_MANY] / med_rps[SIDE_ONE], med_cpu[SIDE_MANY] / 1e3,
           med_cpu[SIDE_ONE] / 1e3, conns[SIDE_MANY], conns[SIDE_ONE], done, load0, load1);
    print_shares(side[SIDE_MANY].answered, n);
    printf("\n  %-32s the same client with %u connections per instance (as many as the "
           "client's): %.0f req/s, ratio %.3f, loop CPU %.2f us per request, %ld connections "
           "opened in the rounds (%.3f per request) (not a target)\n",
           "", side[SIDE_SHARED].per_host, med_rps[SIDE_SHARED], rs,
           med_cpu[SIDE_SHARED] / 1e3, conns[SIDE_SHARED], (double)conns[SIDE_SHARED] / requests);
  }
  if (why[0]) {
    json_object_set_new(o, "error", json_string(why));
    printf("  %-32s INVALID: %s\n", CASE_ASYNC, why);
  }
  fflush(stdout);
  json_array_append_new(entries, o);
  for (int i = 0; i < NSIDES; i++)
    if (opened[i]) eng_close(&side[i]);
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
