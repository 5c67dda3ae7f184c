/* The cost of the deadline header (issue 21's "Benchmark", DESIGN §8.3):
 * what sending the budget left (Request-Timeout, written by libresil-http
 * at each request's send) adds to a keep-alive GET's caller CPU.
 *
 *   http_deadline_header_cost        against the in-process fixture
 *                                    (libmicrohttpd, GET /ka -> 200 "ok");
 *   http_deadline_header_cost_nginx  the same against nginx on 127.0.0.1
 *                                    (scripts/bench.sh starts one).
 *
 * One client (pool of 1, so one keep-alive connection and one easy handle
 * for both sides) with two endpoints on the same GET /ka: "ka", which
 * sends the header, and "ka_nodl", the same endpoint with
 * no_deadline_header. Each call is resil_http_call(client, endpoint, NULL
 * args, no retry, ctx) with the SAME ctx deadline on both sides (60 s from
 * the batch's start, resil_ctx_set_timeout_ns), so the deadline's
 * bookkeeping (the budget's end converted at the call's start, the
 * per-attempt timeouts set from it) is on both sides and the sides differ
 * only in whether the header line is written and sent. No policy chain
 * around the call: its CPU would be on both sides alike and only dilute
 * the ratio.
 *
 * Before measuring, GET /echo through both kinds of endpoint checks on the
 * fixture that the header is sent by one and not by the other (the case is
 * invalid otherwise; nginx has no /echo, the fixture's check stands for
 * it). A round gives each side the same number of requests, calibrated
 * during the warm-up to about 25 ms per side, in blocks of BLOCK requests
 * that alternate the sides (ABBA..., from the other side every other
 * round): on a shared machine other work comes and goes within tens of
 * milliseconds, and with whole-batch rounds it weighed on one side's batch
 * and not the other's (per-round ratios 0.96..1.05 under load 4 for a
 * difference of about 2 %). Caller CPU per request is
 * CLOCK_THREAD_CPUTIME_ID of the calling thread over each block (user +
 * system: the system calls are in it, the wait for the server is not),
 * wall per request is CLOCK_MONOTONIC over each block, both summed per
 * side and round. Reported: each side's median over the rounds, the ratio
 * of the CPU medians, the median of per-round CPU ratios (the target: <=
 * BENCH_DEADLINE_HDR_MAX_CPU_RATIO) and the wall ratio, and the load average at the
 * start and end. Then, as a reference (not a target), the same rounds on
 * bare libcurl (bench_bare_setopts, curl_easy_perform, one handle and
 * connection) with the line "Request-Timeout: 59999999u" (libresil's for a
 * 60 s budget, same length) or none: what libcurl itself charges for one
 * such line. With --pin (the default) and two CPUs the caller runs on
 * one CPU and the server (the fixture's threads, or nginx's worker at
 * --nginx-cpu) on another. Every call must answer 200 "ok" on its one
 * attempt and no connection may be opened during the measured rounds. */
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench.h"

#define CASE_FX "http_deadline_header_cost"
#define CASE_NGX "http_deadline_header_cost_nginx"
#define MAX_ROUNDS 120

static const char measures_fx[] =
    "caller CPU of a keep-alive GET /ka (200 \"ok\") from the in-process fixture through "
    "resil_http_call (no retry, pool 1) with a ctx deadline, the Request-Timeout header sent "
    "vs the same call and deadline on an endpoint with no_deadline_header, alternating rounds, "
    "same client and connection";
static const char measures_ngx[] =
    "the same against nginx on 127.0.0.1 (scripts/nginx-start.sh, 1 worker, another process)";

static json_t *case_stub(const char *name) {
  json_t *o = json_object();
  json_object_set_new(o, "name", json_string(name));
  json_object_set_new(o, "kind", json_string("deadline"));
  json_object_set_new(o, "measures", json_string(strcmp(name, CASE_FX) ? measures_ngx
                                                                       : measures_fx));
  return o;
}

static void case_with(json_t *entries, const char *name, const char *key, const char *why) {
  json_t *o = case_stub(name);
  json_object_set_new(o, key, json_string(why));
  printf("  %-32s %s: %s\n", name, !strcmp(key, "skipped") ? "SKIPPED" : "INVALID", why);
  fflush(stdout);
  json_array_append_new(entries, o);
}

#ifndef RESIL_BENCH_HTTP

int bench_run_deadline_cases(const bench_opts *opts, const char *json_path) {
  if (!bench_selected(opts, CASE_FX) && !bench_selected(opts, CASE_NGX)) return 0;
  printf("\n== deadline header cost\n");
  json_t *entries = json_array();
  const char *why = "not built: libresil-http or the fixture is missing";
  if (bench_selected(opts, CASE_FX)) case_with(entries, CASE_FX, "skipped", why);
  if (bench_selected(opts, CASE_NGX)) case_with(entries, CASE_NGX, "skipped", why);
  return bench_append_cases(json_path, entries, NULL, NULL);
}

#else

#include <curl/curl.h>

#include "fixture/fixture.h"
#include "http_bench.h"
#include "resil/http.h"

static const char method[] =
    "one client (pool 1) with GET /ka on two endpoints, one sending the deadline header, "
    "one with no_deadline_header; resil_http_call without retry, the same ctx deadline "
    "(60 s) on both; rounds of ~25 ms per side, each in blocks of 25 requests alternating "
    "the sides (ABBA..., from the other side every other round); caller CPU = "
    "CLOCK_THREAD_CPUTIME_ID over each block, summed per side and round; medians over "
    "the rounds; ratio = median of per-round CPU ratios; then the same rounds on bare "
    "libcurl with the same line (value of the same length) or none, the reference";

#define BATCH_NS INT64_C(25000000)
#define DEADLINE_NS INT64_C(60000000000)
/* Requests per block: a round alternates the sides block by block. */
#define BLOCK 25

static const resil_http_endpoint endpoints[] = {
    RESIL_HTTP_ENDPOINT(.name = "ka", .method = RESIL_HTTP_GET, .path = "/ka"),
    RESIL_HTTP_ENDPOINT(.name = "ka_nodl", .method = RESIL_HTTP_GET, .path = "/ka",
                        .no_deadline_header = 1),
    RESIL_HTTP_ENDPOINT(.name = "echo", .method = RESIL_HTTP_GET, .path = "/echo"),
    RESIL_HTTP_ENDPOINT(.name = "echo_nodl", .method = RESIL_HTTP_GET, .path = "/echo",
                        .no_deadline_header = 1),
};

/* One call on endpoint with ctx; the response of a 200, else NULL with
 * why. */
static resil_http_response *call(resil_http_client *c, const char *ep, const resil_ctx *ctx,
                                 char *why, size_t wn) {
  resil_http_response *resp = NULL;
  resil_outcome o = resil_http_call(c, ep, NULL, NULL, ctx, &resp);
  if (resil_outcome_is_success(&o) && resp && resil_http_response_status(resp) == 200)
    return resp;
  char ob[96];
  resil_outcome_format(&o, ob, sizeof ob);
  const char *e = resp ? resil_http_response_error(resp) : NULL;
  snprintf(why, wn, "%s: %s%s%s", ep, ob, e ? ": " : "", e ? e : "");
  resil_http_response_free(resp);
  return NULL;
}

/* n GETs of /ka on endpoint ep, with a deadline 60 s away; 0, or -1 with
 * why. cpu and wall: ns per request. */
static int batch(resil_http_client *c, const char *ep, uint64_t n, double *cpu, double *wall,
                 char *why, size_t wn) {
  resil_ctx ctx;
  resil_ctx_init(&ctx);
  resil_ctx_set_timeout_ns(&ctx, DEADLINE_NS);
  int64_t c0 = bench_thread_cpu_ns(), t0 = bench_now_ns();
  for (uint64_t i = 0; i < n; i++) {
    resil_http_response *resp = call(c, ep, &ctx, why, wn);
    if (!resp) return -1;
    size_t len = 0;
    const char *body = resil_http_response_body(resp, &len);
    int ok = len == 2 && memcmp(body, "ok", 2) == 0;
    resil_http_response_free(resp);
    if (!ok) {
      snprintf(why, wn, "%s: unexpected body", ep);
      return -1;
    }
  }
  int64_t t1 = bench_now_ns(), c1 = bench_thread_cpu_ns();
  *cpu = (double)(c1 - c0) / (double)n;
  *wall = (double)(t1 - t0) / (double)n;
  return 0;
}

/* libresil's side of a block: n calls on "ka" (on) or "ka_nodl". */
static int resil_block(void *state, int on, uint64_t n, double *cpu, double *wall, char *why,
                       size_t wn) {
  return batch(state, on ? "ka" : "ka_nodl", n, cpu, wall, why, wn);
}

/* The reference: bare libcurl (bench_bare_setopts, curl_easy_perform on
 * one handle and connection) sending the same line with a value of the
 * same length as libresil's for a 60 s budget, or not (CURLOPT_HTTPHEADER
 * switched between the list and NULL, once per block): what libcurl itself
 * charges for one such line, the floor for any client on it. */
typedef struct bare_side {
  CURL *e;
  struct curl_slist *line;
  int set; /* -1 unknown, 0 NULL set, 1 the list set */
  size_t len; /* body bytes of the last request */
} bare_side;

static size_t bare_write(char *p, size_t size, size_t n, void *ud) {
  bare_side *b = ud;
  (void)p;
  b->len += size * n;
  return size * n;
}

static int bare_block(void *state, int on, uint64_t n, double *cpu, double *wall, char *why,
                      size_t wn) {
  bare_side *b = state;
  if (b->set != on) {
    if (curl_easy_setopt(b->e, CURLOPT_HTTPHEADER, on ? b->line : NULL) != CURLE_OK) {
      snprintf(why, wn, "bare libcurl: CURLOPT_HTTPHEADER refused");
      return -1;
    }
    b->set = on;
  }
  int64_t c0 = bench_thread_cpu_ns(), t0 = bench_now_ns();
  for (uint64_t i = 0; i < n; i++) {
    b->len = 0;
    CURLcode rc = curl_easy_perform(b->e);
    long code = 0;
    if (rc == CURLE_OK) curl_easy_getinfo(b->e, CURLINFO_RESPONSE_CODE, &code);
    if (rc != CURLE_OK || code != 200 || b->len != 2) {
      snprintf(why, wn, "bare libcurl: %s, status %ld, %zu bytes", curl_easy_strerror(rc), code,
               b->len);
      return -1;
    }
  }
  int64_t t1 = bench_now_ns(), c1 = bench_thread_cpu_ns();
  *cpu = (double)(c1 - c0) / (double)n;
  *wall = (double)(t1 - t0) / (double)n;
  return 0;
}

typedef int (*block_fn)(void *state, int on, uint64_t n, double *cpu, double *wall, char *why,
                        size_t wn);

/* Per side (on, off) and round: CPU and wall ns per request, and the
 * round's CPU ratio. */
typedef struct rounds_out {
  double cpu_on[MAX_ROUNDS], cpu_off[MAX_ROUNDS], w_on[MAX_ROUNDS], w_off[MAX_ROUNDS],
      ratio[MAX_ROUNDS];
  int done;
} rounds_out;

/* rounds rounds of per_round requests per side (a multiple of BLOCK). */
static void run_rounds(block_fn fn, void *state, uint64_t per_round, int rounds, rounds_out *r,
                       char *why, size_t wn) {
  r->done = 0;
  for (int k = 0; k < rounds && !why[0]; k++) {
    /* The round's blocks alternate the sides, ABBAABBA... from A in even
     * rounds and B in odd ones: whatever else the machine does meanwhile
     * lands on both sides alike. */
    double sum[2][2] = {{0, 0}, {0, 0}}; /* [on][cpu, wall] */
    for (uint64_t b = 0; b < 2 * (per_round / BLOCK) && !why[0]; b++) {
      int on = (uint64_t)k % 2 == ((b + 1) / 2) % 2;
      double cpu, wall;
      if (fn(state, on, BLOCK, &cpu, &wall, why, wn) != 0) break;
      sum[on][0] += cpu;
      sum[on][1] += wall;
    }
    if (why[0]) break;
    double blocks = (double)(per_round / BLOCK);
    r->cpu_on[k] = sum[1][0] / blocks;
    r->w_on[k] = sum[1][1] / blocks;
    r->cpu_off[k] = sum[0][0] / blocks;
    r->w_off[k] = sum[0][1] / blocks;
    r->ratio[k] = r->cpu_on[k] / r->cpu_off[k];
    r->done = k + 1;
  }
}

/* The header's presence as the fixture saw it on GET /echo: 1, 0, or -1
 * with why. */
static int echo_has_header(resil_http_client *c, const char *ep, char *why, size_t wn) {
  resil_ctx ctx;
  resil_ctx_init(&ctx);
  resil_ctx_set_timeout_ns(&ctx, DEADLINE_NS);
  resil_http_response *resp = call(c, ep, &ctx, why, wn);
  if (!resp) return -1;
  size_t len = 0;
  const char *body = resil_http_response_body(resp, &len);
  json_t *doc = json_loadb(body, len, 0, NULL);
  json_t *h = json_object_get(json_object_get(doc, "headers"), "request-timeout");
  int has = h != NULL;
  json_decref(doc);
  resil_http_response_free(resp);
  if (!doc) {
    snprintf(why, wn, "%s: the fixture's /echo answer is not JSON", ep);
    return -1;
  }
  return has;
}

static uint64_t connections(resil_http_client *c) {
  resil_http_stats st;
  memset(&st, 0, sizeof st);
  resil_http_client_get_stats(c, &st);
  return st.connections_opened;
}

static json_t *real_array(const double *v, int n) {
  json_t *a = json_array();
  for (int i = 0; i < n; i++) json_array_append_new(a, json_real(v[i]));
  return a;
}

/* The case against base_url (fx: the fixture, for the /echo check). */
static void run_case(const bench_opts *opts, const char *name, const char *base_url, int fx,
                     int client_cpu, int server_cpu, json_t *entries) {
  char why[512] = "";
  double load0 = bench_loadavg1();
  resil_http_client *c = NULL;
  resil_http_client_config hc;
  resil_http_client_config_init(&hc);
  hc.name = "bench_deadline";
  hc.base_url = base_url;
  hc.endpoints = endpoints;
  hc.endpoint_count = fx ? 4 : 2;
  hc.max_connections = 1;
  hc.max_connections_per_host = 1;
  hc.user_agent = BENCH_USER_AGENT;
  resil_error err;
  memset(&err, 0, sizeof err);
  if (resil_http_client_new(&hc, &c, &err) != RESIL_OK)
    snprintf(why, sizeof why, "resil_http_client_new: %s", err.msg);
  if (!why[0] && fx) {
    int on = echo_has_header(c, "echo", why, sizeof why);
    int off = on < 0 ? -1 : echo_has_header(c, "echo_nodl", why, sizeof why);
    if (on == 0 || off == 1)
      snprintf(why, sizeof why, "GET /echo: Request-Timeout %s with the deadline header on, "
               "%s with no_deadline_header", on ? "sent" : "not sent", off ? "sent" : "not sent");
  }
  /* Warm-up and calibration: a batch lasts about BATCH_NS on the slower
   * side's pace. */
  uint64_t per_round = 0;
  double cpu, wall, wall_on = 0, wall_off = 0;
  if (!why[0] && batch(c, "ka", 300, &cpu, &wall, why, sizeof why) == 0 &&
      batch(c, "ka_nodl", 300, &cpu, &wall, why, sizeof why) == 0 &&
      batch(c, "ka", 500, &cpu, &wall_on, why, sizeof why) == 0 &&
      batch(c, "ka_nodl", 500, &cpu, &wall_off, why, sizeof why) == 0) {
    double ns = wall_on > wall_off ? wall_on : wall_off;
    double want = (double)BATCH_NS / ns;
    per_round = want < 200.0 ? 200 : (uint64_t)want;
  }
  per_round = (per_round + BLOCK - 1) / BLOCK * BLOCK;
  int rounds = 8 * opts->runs;
  if (rounds > MAX_ROUNDS) rounds = MAX_ROUNDS;
  if (rounds < 2) rounds = 2;
  rounds_out *ro = calloc(1, sizeof *ro), *rb = calloc(1, sizeof *rb);
  if (!ro || !rb) snprintf(why, sizeof why, "out of memory");
  uint64_t conns0 = c ? connections(c) : 0;
  if (!why[0]) run_rounds(resil_block, c, per_round, rounds, ro, why, sizeof why);
  uint64_t opened = c ? connections(c) - conns0 : 0;
  if (!why[0] && opened)
    snprintf(why, sizeof why, "%llu connection(s) opened during the measured rounds",
             (unsigned long long)opened);
  /* Then the same rounds on bare libcurl, the reference. */
  char ka_url[300];
  snprintf(ka_url, sizeof ka_url, "%s/ka", base_url);
  bare_side b = {NULL, NULL, -1, 0};
  char bwhy[300] = "";
  if (!why[0]) {
    b.e = curl_easy_init();
    b.line = curl_slist_append(NULL, "Request-Timeout: 59999999u");
    if (!b.e || !b.line || bench_bare_setopts(b.e, ka_url, bare_write, &b, 1L) != CURLE_OK)
      snprintf(bwhy, sizeof bwhy, "bare libcurl: setup failed");
    double cpu2, wall2;
    if (!bwhy[0] && bare_block(&b, 1, 300, &cpu2, &wall2, bwhy, sizeof bwhy) == 0 &&
        bare_block(&b, 0, 300, &cpu2, &wall2, bwhy, sizeof bwhy) == 0)
      run_rounds(bare_block, &b, per_round, rounds, rb, bwhy, sizeof bwhy);
  }
  if (b.e) curl_easy_cleanup(b.e);
  curl_slist_free_all(b.line);
  double load1 = bench_loadavg1();
  json_t *o = case_stub(name);
  json_object_set_new(o, "loadavg_start", json_real(load0));
  json_object_set_new(o, "loadavg_end", json_real(load1));
  int done = ro ? ro->done : 0;
  json_object_set_new(o, "rounds", json_integer(done));
  json_object_set_new(o, "requests_per_round", json_integer((json_int_t)per_round));
  json_object_set_new(o, "caller_cpu", json_integer(client_cpu));
  json_object_set_new(o, "server_cpu", json_integer(server_cpu));
  if (done > 0) {
    double con = bench_median(ro->cpu_on, done), coff = bench_median(ro->cpu_off, done);
    double won = bench_median(ro->w_on, done), woff = bench_median(ro->w_off, done);
    double r = bench_median(ro->ratio, done);
    json_object_set_new(o, "cpu_ns_per_request_header", json_real(con));
    json_object_set_new(o, "cpu_ns_per_request_no_header", json_real(coff));
    json_object_set_new(o, "ns_per_request_header", json_real(won));
    json_object_set_new(o, "ns_per_request_no_header", json_real(woff));
    json_object_set_new(o, "ratio", json_real(r));
    json_object_set_new(o, "cpu_ratio_of_medians", json_real(con / coff));
    json_object_set_new(o, "wall_ratio", json_real(won / woff));
    json_object_set_new(o, "rounds_cpu_ns_header", real_array(ro->cpu_on, done));
    json_object_set_new(o, "rounds_cpu_ns_no_header", real_array(ro->cpu_off, done));
    printf("  %-32s caller CPU %.2f us/request with the header, %.2f without: ratio %.4f "
           "(of medians %.4f); wall %.2f / %.2f us; %d rounds of %llu, load %.2f..%.2f\n",
           name, con / 1e3, coff / 1e3, r, con / coff, won / 1e3, woff / 1e3, done,
           (unsigned long long)per_round, load0, load1);
  }
  if (rb && rb->done > 0) {
    int n = rb->done;
    double con = bench_median(rb->cpu_on, n), coff = bench_median(rb->cpu_off, n);
    json_object_set_new(o, "bare_cpu_ns_per_request_header", json_real(con));
    json_object_set_new(o, "bare_cpu_ns_per_request_no_header", json_real(coff));
    json_object_set_new(o, "bare_ratio", json_real(bench_median(rb->ratio, n)));
    printf("  %-32s bare libcurl, the same line or none: caller CPU %.2f / %.2f us, ratio "
           "%.4f (the reference, not a target)\n",
           "", con / 1e3, coff / 1e3, bench_median(rb->ratio, n));
  } else if (bwhy[0]) {
    json_object_set_new(o, "bare_error", json_string(bwhy));
    printf("  %-32s bare libcurl reference not measured: %s\n", "", bwhy);
  }
  free(ro);
  free(rb);
  if (why[0]) {
    json_object_set_new(o, "error", json_string(why));
    printf("  %-32s INVALID: %s\n", name, why);
  }
  fflush(stdout);
  resil_http_client_free(c);
  json_array_append_new(entries, o);
}

int bench_run_deadline_cases(const bench_opts *opts, const char *json_path) {
  int sel_fx = bench_selected(opts, CASE_FX), sel_ngx = bench_selected(opts, CASE_NGX);
  if (!sel_fx && !sel_ngx) return 0;
  printf("\n== deadline header cost (caller CPU per keep-alive GET, header vs none)\n");
  fflush(stdout);
  json_t *entries = json_array();
  if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
    if (sel_fx) case_with(entries, CASE_FX, "error", "curl_global_init failed");
    if (sel_ngx) case_with(entries, CASE_NGX, "error", "curl_global_init failed");
    return bench_append_cases(json_path, entries, "deadline_method", method);
  }
  cpu_set_t saved;
  int can_pin = opts->pin_threads && bench_nth_allowed_cpu(1) >= 0 &&
                pthread_getaffinity_np(pthread_self(), sizeof saved, &saved) == 0;
  if (sel_fx) {
    /* The fixture's threads take the affinity of the thread that starts
     * it: started on the second CPU, then the caller moves to the first. */
    int ccpu = can_pin ? bench_nth_allowed_cpu(0) : -1;
    int scpu = can_pin ? bench_nth_allowed_cpu(1) : -1;
    int pinned = can_pin && bench_pin_self(scpu) == 0;
    resil_fixture_config fc;
    resil_fixture_config_init(&fc);
    resil_fixture *fx = NULL;
    char ferr[256] = "";
    if (resil_fixture_start(&fc, &fx, ferr, sizeof ferr) != 0) {
      char why[320];
      snprintf(why, sizeof why, "resil_fixture_start: %s", ferr);
      case_with(entries, CASE_FX, "error", why);
    } else {
      if (pinned && bench_pin_self(ccpu) != 0) pinned = 0;
      run_case(opts, CASE_FX, resil_fixture_url(fx), 1, pinned ? ccpu : -1,
               pinned ? scpu : -1, entries);
      resil_fixture_stop(fx);
    }
    if (can_pin) pthread_setaffinity_np(pthread_self(), sizeof saved, &saved);
  }
  if (sel_ngx) {
    if (!opts->nginx_url) {
      case_with(entries, CASE_NGX, "skipped",
                opts->nginx_skipped ? opts->nginx_skipped
                                    : "no nginx (--nginx-url; scripts/bench.sh starts one)");
    } else {
      int ccpu = -1;
      if (can_pin && opts->nginx_cpu >= 0) {
        for (int i = 0; ccpu < 0 && i < 2; i++)
          if (bench_nth_allowed_cpu(i) != opts->nginx_cpu) ccpu = bench_nth_allowed_cpu(i);
        if (ccpu >= 0 && bench_pin_self(ccpu) != 0) ccpu = -1;
      }
      run_case(opts, CASE_NGX, opts->nginx_url, 0, ccpu, ccpu >= 0 ? opts->nginx_cpu : -1,
               entries);
      if (ccpu >= 0) pthread_setaffinity_np(pthread_self(), sizeof saved, &saved);
    }
  }
  curl_global_cleanup();
  return bench_append_cases(json_path, entries, "deadline_method", method);
}

#endif
