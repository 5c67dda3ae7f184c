/* The HTTP cases: keep-alive GETs of a 2-byte body from a loopback server,
 * bare libcurl against libresil's client behind the full chain
 * Retry(Breaker(RateLimiter(Bulkhead(HTTP)))), measured in the same run,
 * interleaved, so that whatever the machine is doing meanwhile weighs on
 * every side alike.
 *
 *   http_keepalive_get          one caller, sequential requests;
 *   http_keepalive_get_8callers 8 callers at once on 2 CPUs.
 *
 * The server is the fixture (src/fixture), started in this process:
 * libmicrohttpd with one thread per connection, route GET /ka, which answers
 * 200 "ok" (text/plain). Why in-process rather than a `resil fixture`
 * process started by the script: on a 2-core machine the server's threads
 * need the same CPU time wherever they live, and a switch between threads
 * of one process is cheaper and steadier than one between processes (no
 * address-space switch), so the server adds less noise; it is also the same
 * server for every side by construction, needs no port hand-over, and
 * cannot be left running if the benchmark dies.
 *
 * Three sides, each with its own keep-alive connection(s):
 *
 *   libcurl        bare libcurl as its users write it: one easy handle per
 *                  caller, reused for every request, curl_easy_perform, the
 *                  body appended to a buffer by a write callback, the
 *                  status read with curl_easy_getinfo. The targets are
 *                  measured against this side.
 *   libcurl_multi  the same easy handle options, driven the way libresil
 *                  drives its handles (src/http/request.c run_transfer):
 *                  the handle added to its own multi handle, then
 *                  curl_multi_perform and curl_multi_poll until done. In
 *                  libcurl 7.88 curl_easy_perform polls once more per
 *                  request than this loop (an extra poll() of the wakeup
 *                  socket before the first curl_multi_perform), so this
 *                  side isolates what libresil itself adds; reported next
 *                  to the target, not as one.
 *   libresil       a resil_http_client (pool of 1 for the sequential case,
 *                  8 for the concurrent one) with endpoint "ka" (GET /ka,
 *                  RAW codec), and per logical call: resil_http_request_new,
 *                  resil_chain_run of resil_http_request_attempt through
 *                  Retry(Breaker(RateLimiter(Bulkhead))) with ctx.flags from
 *                  the request, resil_http_request_take_response, the status
 *                  and the body checked, then both freed.
 *
 * The bare handles get the options libresil's client sets that matter on
 * the wire or to the connection (src/http/slot.c): HTTP/1.1, HTTP/0.9
 * refused, no proxy whatever the environment, .netrc ignored, no
 * redirects, Accept-Encoding with every encoding libcurl decodes, the same
 * User-Agent, TCP_NODELAY, one cached connection, signals off, and the
 * client's default timeouts (connect 10 s, and 60 s for the whole
 * transfer, where libresil watches its 60 s response timeout itself). A
 * GET sends no body, so no Expect header on any side. The bare handles set
 * the User-Agent and Accept-Encoding through CURLOPT_USERAGENT and
 * CURLOPT_ACCEPT_ENCODING as their users do, which libcurl formats anew
 * for every request; libresil's client sends the same lines, in the same
 * order, from a header list it formats once (src/http/transfer.c). Before
 * measuring, every side sends GET /echo once and the request headers the
 * server saw are compared: the case is invalid if they differ.
 *
 * libresil's policies are configured as in the chain4_run case (cases.c):
 * default retry, a breaker with a count window of 100 and slow-call
 * detection at 1 s, a rate limiter of 2^31-1 permits per second (it never
 * refuses), a bulkhead of 25 slots. Every call must succeed on its first
 * attempt: a failed request on any side, a retried attempt, a breaker that
 * left CLOSED, or a keep-alive connection opened during the measured
 * batches makes the case invalid.
 *
 * Rounds: each round runs one batch per side, in one of the 6 orders of
 * the three sides (round r uses order r mod 6, so every side goes first,
 * second and last equally often). A sequential batch is a fixed number of
 * requests, calibrated during the warm-up to last about 25 ms on the
 * slowest side at its median pace; a concurrent batch lasts 100 ms.
 * Batches are short and rounds many (sequential: 8 * --runs rounded up to
 * a multiple of 6, at most 120; concurrent: 4 * --runs, at most 60)
 * because the machine is shared: a burst of other work lands in a few
 * rounds, which the median over rounds sheds, instead of in one side's
 * long batch. Latency is the time of one logical call, read with
 * clock_gettime(CLOCK_MONOTONIC) between consecutive calls (so the loop's
 * own few nanoseconds are in it, on every side); req/s is a batch's
 * requests over its duration; caller CPU is CLOCK_THREAD_CPUTIME_ID of the
 * calling thread(s) over the batch, per request (user and system time, so
 * the system calls are in it and the wait for the server is not). Per
 * round: req/s of each side, libresil's ratio to each bare side, p50 and
 * p99 of each batch, and libresil's p50 minus each bare side's; reported:
 * the median of each over the rounds. At the defaults (--runs 7: 60 and 30
 * rounds) this part of the run lasts about 15 s on an idle machine and
 * 30 s on a busy one.
 *
 * Concurrent variant: libresil's calls block the calling thread (there is
 * no asynchronous API), so "8 concurrent callers on 2 threads" is measured
 * as 8 caller threads sharing 2 CPUs: caller i is pinned to the (i mod 2)-th
 * CPU the process may use (unless --no-pin), the server's threads are not
 * pinned. Bare sides: each caller has its own easy handle (and multi
 * handle); libresil: the callers share one client (max_connections 8) and
 * one chain. req/s is the requests all callers completed over the time
 * from the start signal to the last caller's last completion; latencies
 * are pooled over callers. */
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench.h"

#define CASE_SEQ "http_keepalive_get"
#define CASE_CONC "http_keepalive_get_8callers"
#define CASE_SEQ_NGINX "http_keepalive_get_nginx"
#define CASE_CONC_NGINX "http_keepalive_get_8callers_nginx"

static const char measures_seq[] =
    "sequential keep-alive GET /ka (200, 2-byte body \"ok\") from an "
    "in-process loopback fixture (libmicrohttpd, thread per connection): "
    "bare libcurl (one reused easy handle, curl_easy_perform, same wire "
    "options) vs libresil's client (pool 1) with a request per call through "
    "Retry(Breaker(RateLimiter(Bulkhead(HTTP)))), interleaved batches; also "
    "bare libcurl driven through a multi handle like libresil's; unless "
    "--no-pin, on 2 or more CPUs the caller runs on the first CPU and the "
    "fixture's threads on the second, for every side";
static const char measures_conc[] =
    "the same GET with 8 caller threads on 2 CPUs: bare libcurl (an easy "
    "handle per caller) vs libresil (one shared client with 8 pooled "
    "connections and one shared chain), interleaved batches, plus bare "
    "libcurl through a multi handle per caller; req/s is the total of all "
    "callers";

static const char measures_seq_nginx[] =
    "the sequential keep-alive GET /ka against nginx on 127.0.0.1 "
    "(scripts/nginx-start.sh: Debian nginx-light, 1 worker, a process of "
    "its own, return 200 \"ok\"): the same three sides, interleaved batches; "
    "keep-alive checked client-side (bare handles' CURLINFO_NUM_CONNECTS, "
    "the client's connections_opened), nginx counting no connections; with "
    "--nginx-cpu N (scripts/bench.sh: nginx's worker pinned to the last CPU) "
    "the caller runs on another CPU, for every side (caller_cpu, server_cpu)";
static const char measures_conc_nginx[] =
    "the same GET with 8 caller threads on 2 CPUs against nginx on 127.0.0.1 "
    "(1 worker, another process sharing the 2 CPUs): bare libcurl vs "
    "libresil (one shared client, 8 pooled connections, one shared chain), "
    "interleaved batches, plus bare libcurl through a multi handle per "
    "caller; connections counted client-side";

/* The four HTTP cases: [0] sequential, [1] concurrent, [2] and [3] the
 * same against nginx. */
static const char *const case_names[4] = {CASE_SEQ, CASE_CONC, CASE_SEQ_NGINX, CASE_CONC_NGINX};
static const char *const case_measures[4] = {measures_seq, measures_conc, measures_seq_nginx,
                                             measures_conc_nginx};

static json_t *case_stub(const char *name, const char *measures) {
  json_t *o = json_object();
  json_object_set_new(o, "name", json_string(name));
  json_object_set_new(o, "kind", json_string("http"));
  json_object_set_new(o, "measures", json_string(measures));
  return o;
}

/* Appends the selected cases first..last (indices of case_names) with
 * `key` (skipped or error) set to why. */
static void all_cases_with(const bench_opts *opts, json_t *entries, int first, int last,
                           const char *key, const char *why) {
  const char *const *names = case_names;
  for (int i = first; i <= last; i++) {
    if (!bench_selected(opts, names[i])) continue;
    json_t *o = case_stub(names[i], case_measures[i]);
    json_object_set_new(o, key, json_string(why));
    json_array_append_new(entries, o);
    printf("  %-26s %s: %s\n", names[i], !strcmp(key, "skipped") ? "SKIPPED" : "INVALID",
           why);
  }
  fflush(stdout);
}

static int any_selected(const bench_opts *opts) {
  for (int i = 0; i < 4; i++)
    if (bench_selected(opts, case_names[i])) return 1;
  return 0;
}

#ifndef RESIL_BENCH_HTTP

/* Built without libresil-http or the fixture: the cases are recorded as
 * skipped, with the reason, so the report says they were not evaluated. */
int bench_run_http_cases(const bench_opts *opts, const char *json_path) {
  if (!any_selected(opts)) return 0;
  json_t *entries = json_array();
  all_cases_with(opts, entries, 0, 3, "skipped",
                 "not built: libresil-http or the fixture is missing "
                 "(configure with -DRESIL_WITH_HTTP=ON)");
  return bench_append_cases(json_path, entries, NULL, NULL);
}

#else

#include <curl/curl.h>
#include <microhttpd.h>

#include "fixture/fixture.h"
#include "http_bench.h"
#include "resil/breaker.h"
#include "resil/bulkhead.h"
#include "resil/chain.h"
#include "resil/http.h"
#include "resil/ratelimit.h"
#include "resil/retry.h"

/* Where a pair of cases runs: the in-process fixture (fx set) or nginx. */
typedef struct http_target {
  const char *name[2];
  const char *measures[2];
  resil_fixture *fx; /* NULL: nginx, connections counted client-side */
  const char *base_url;
} http_target;

#define CALLERS 8
#define CALLER_CPUS 2
/* Latencies kept per caller and batch; more requests are still counted. */
#define LAT_CAP (1u << 17)
#define BODY_CAP 4096

enum { SIDE_EASY = 0, SIDE_MULTI = 1, SIDE_RESIL = 2, NSIDES = 3 };
static const char *const side_key[NSIDES] = {"libcurl", "libcurl_multi", "libresil"};

/* The 6 orders of the three sides. */
static const int orders[6][NSIDES] = {{0, 1, 2}, {2, 1, 0}, {1, 2, 0},
                                      {0, 2, 1}, {2, 0, 1}, {1, 0, 2}};

/* ---- bare libcurl ------------------------------------------------------- */

typedef struct body_buf {
  size_t len;
  int overflow;
  char data[BODY_CAP];
} body_buf;

static size_t on_write(char *p, size_t size, size_t n, void *ud) {
  body_buf *b = ud;
  size_t k = size * n;
  if (k > BODY_CAP - 1 - b->len) {
    b->overflow = 1;
    return 0;
  }
  memcpy(b->data + b->len, p, k);
  b->len += k;
  b->data[b->len] = '\0';
  return k;
}

typedef struct bare_conn {
  CURL *e;
  CURLM *m; /* NULL: driven by curl_easy_perform */
  long connects; /* connections the handle opened (CURLINFO_NUM_CONNECTS) */
  body_buf body;
} bare_conn;

static void bare_close(bare_conn *b) {
  /* The multi handle owns the cached connection: close it first. */
  if (b->m) curl_multi_cleanup(b->m);
  if (b->e) curl_easy_cleanup(b->e);
  b->m = NULL;
  b->e = NULL;
}

CURLcode bench_bare_setopts(CURL *e, const char *url, curl_write_callback wr, void *wd,
                            long maxconnects) {
  resil_http_client_config dflt;
  resil_http_client_config_init(&dflt);
  CURLcode rc = CURLE_OK;
#define SET(opt, val)                                                          \
  do {                                                                         \
    if (rc == CURLE_OK) rc = curl_easy_setopt(e, opt, val);                    \
  } while (0)
  SET(CURLOPT_URL, url);
  SET(CURLOPT_HTTPGET, 1L);
  SET(CURLOPT_NOSIGNAL, 1L);
  SET(CURLOPT_PROTOCOLS_STR, "http,https");
  SET(CURLOPT_HTTP_VERSION, (long)CURL_HTTP_VERSION_1_1);
  SET(CURLOPT_HTTP09_ALLOWED, 0L);
  SET(CURLOPT_NETRC, (long)CURL_NETRC_IGNORED);
  SET(CURLOPT_PROXY, "");
  SET(CURLOPT_FOLLOWLOCATION, 0L);
  SET(CURLOPT_ACCEPT_ENCODING, "");
  SET(CURLOPT_USERAGENT, BENCH_USER_AGENT);
  if (maxconnects > 0) SET(CURLOPT_MAXCONNECTS, maxconnects);
  SET(CURLOPT_TCP_NODELAY, 1L);
  SET(CURLOPT_CONNECTTIMEOUT_MS, (long)(dflt.connect_timeout_ns / 1000000));
  SET(CURLOPT_TIMEOUT_MS, (long)(dflt.response_timeout_ns / 1000000));
  SET(CURLOPT_WRITEFUNCTION, wr);
  SET(CURLOPT_WRITEDATA, wd);
#undef SET
  return rc;
}

/* A bare handle with bench_bare_setopts() and one cached connection. */
static int bare_open(bare_conn *b, const char *url, int use_multi) {
  b->body.len = 0;
  b->body.overflow = 0;
  b->m = NULL;
  b->connects = 0;
  b->e = curl_easy_init();
  if (!b->e) return -1;
  CURLcode rc = bench_bare_setopts(b->e, url, on_write, &b->body, 1L);
  if (rc == CURLE_OK && use_multi) {
    b->m = curl_multi_init();
    if (!b->m || curl_multi_setopt(b->m, CURLMOPT_MAXCONNECTS, 1L) != CURLM_OK)
      rc = CURLE_OUT_OF_MEMORY;
  }
  if (rc != CURLE_OK) {
    bare_close(b);
    return -1;
  }
  return 0;
}

/* One transfer with the handle's current URL; the HTTP status, or 0 when
 * the transfer failed. */
static long bare_perform(bare_conn *b) {
  b->body.len = 0;
  CURLcode rc = CURLE_FAILED_INIT;
  if (!b->m) {
    rc = curl_easy_perform(b->e);
  } else if (curl_multi_add_handle(b->m, b->e) == CURLM_OK) {
    /* The loop of libresil's run_transfer, without its deadline and
     * cancellation checks. */
    for (;;) {
      int running = 0;
      if (curl_multi_perform(b->m, &running) != CURLM_OK || !running) break;
      if (curl_multi_poll(b->m, NULL, 0, 1000, NULL) != CURLM_OK) break;
    }
    int left = 0;
    CURLMsg *msg;
    while ((msg = curl_multi_info_read(b->m, &left)) != NULL)
      if (msg->msg == CURLMSG_DONE) rc = msg->data.result;
    curl_multi_remove_handle(b->m, b->e);
  }
  long nc = 0;
  if (curl_easy_getinfo(b->e, CURLINFO_NUM_CONNECTS, &nc) == CURLE_OK) b->connects += nc;
  if (rc != CURLE_OK) return 0;
  long code = 0;
  curl_easy_getinfo(b->e, CURLINFO_RESPONSE_CODE, &code);
  return code;
}

/* One GET /ka; 1 when it answered 200 "ok". */
static int bare_get(void *p) {
  bare_conn *b = p;
  return bare_perform(b) == 200 && b->body.len == 2 && memcmp(b->body.data, "ok", 2) == 0;
}

/* ---- libresil --------------------------------------------------------------- */

static const resil_http_endpoint endpoints[] = {
    {.struct_size = sizeof(resil_http_endpoint), .name = "ka", .method = RESIL_HTTP_GET, .path = "/ka"},
    {.struct_size = sizeof(resil_http_endpoint), .name = "echo", .method = RESIL_HTTP_GET, .path = "/echo"},
};

typedef struct resil_side {
  bench_policies p; /* client, retry, breaker, bulkhead */
  resil_ratelimiter *rl;
  resil_chain *chain;
  pthread_mutex_t mu;      /* guards first_failure                          */
  char first_failure[400]; /* how the first failed call ended               */
} resil_side;

static void note_failure(resil_side *s, const char *what) {
  pthread_mutex_lock(&s->mu);
  if (!s->first_failure[0])
    snprintf(s->first_failure, sizeof s->first_failure, "%s", what);
  pthread_mutex_unlock(&s->mu);
}

/* One logical call on `endpoint` through the chain. Returns the response
 * of a call that succeeded (the caller frees it), NULL otherwise. */
static resil_http_response *resil_call(resil_side *s, const char *endpoint) {
  resil_http_request *req = NULL;
  resil_error err;
  if (resil_http_request_new(s->p.client, endpoint, NULL, &req, &err) != RESIL_OK) {
    note_failure(s, err.msg);
    return NULL;
  }
  resil_ctx ctx;
  resil_ctx_init(&ctx);
  ctx.flags = resil_http_request_call_flags(req);
  resil_outcome o = resil_chain_run(s->chain, &ctx, resil_http_request_attempt, req);
  resil_http_response *resp = resil_http_request_take_response(req);
  if (!resil_outcome_is_success(&o) || !resp) {
    char ob[96], line[400];
    resil_outcome_format(&o, ob, sizeof ob);
    const char *e = resp ? resil_http_response_error(resp) : NULL;
    snprintf(line, sizeof line, "%s%s%s", ob, e ? ": " : "", e ? e : "");
    note_failure(s, line);
    resil_http_response_free(resp);
    resp = NULL;
  }
  resil_http_request_free(req);
  return resp;
}

/* One GET /ka; 1 when it answered 200 "ok". */
static int resil_get(void *p) {
  resil_side *s = p;
  resil_http_response *resp = resil_call(s, "ka");
  int ok = resp && resil_http_response_status(resp) == 200;
  if (ok) {
    size_t len = 0;
    const char *body = resil_http_response_body(resp, &len);
    ok = len == 2 && memcmp(body, "ok", 2) == 0;
    if (!ok) note_failure(s, "unexpected body");
  }
  resil_http_response_free(resp);
  return ok;
}

static void resil_side_free(resil_side *s) {
  resil_chain_free(s->chain);
  resil_ratelimiter_free(s->rl);
  bench_policies_close(&s->p);
  pthread_mutex_destroy(&s->mu);
}

/* The client and the chain, each policy configured as in cases.c's
 * chain4_run (retry, breaker and bulkhead by bench_policies_open, shared
 * with the async cases). Returns 0, or -1 with the reason in why. */
static int resil_side_open(resil_side *s, const char *base_url, uint32_t pool,
                           char *why, size_t whylen) {
  memset(s, 0, sizeof *s);
  pthread_mutex_init(&s->mu, NULL);
  resil_error err;
  resil_status st;
  bench_policies_config pc = {.base_url = base_url,
                              .endpoints = endpoints,
                              .endpoint_count = sizeof endpoints / sizeof endpoints[0],
                              .max_connections = pool,
                              .lease_timeout_ns = -1,
                              .slow_call_ns = INT64_C(1000000000),
                              .bulkhead_max = 0};
  if (bench_policies_open(&s->p, &pc, why, whylen) != 0) {
    pthread_mutex_destroy(&s->mu);
    return -1;
  }

  resil_ratelimiter_config lc;
  resil_ratelimiter_config_init(&lc);
  lc.name = "bench";
  lc.limit_for_period = 2147483647;
  lc.refresh_period_ns = INT64_C(1000000000);
  lc.timeout_ns = 0;
  const char *what = "resil_ratelimiter_new";
  if ((st = resil_ratelimiter_new(&lc, &s->rl, &err)) != RESIL_OK) goto fail;

  resil_chain_config cc;
  resil_chain_config_init(&cc);
  cc.name = "bench";
  what = "resil_chain_new";
  if ((st = resil_chain_new(&cc, &s->chain, &err)) != RESIL_OK) goto fail;
  if ((st = resil_chain_add_retry(s->chain, s->p.rt)) != RESIL_OK ||
      (st = resil_chain_add_breaker(s->chain, s->p.br)) != RESIL_OK ||
      (st = resil_chain_add_ratelimiter(s->chain, s->rl)) != RESIL_OK ||
      (st = resil_chain_add_bulkhead(s->chain, s->p.bh)) != RESIL_OK) {
    snprintf(why, whylen, "resil_chain_add_*: %s", resil_status_name(st));
    resil_side_free(s);
    return -1;
  }
  return 0;
fail:
  snprintf(why, whylen, "%s: %s (%s)", what, resil_status_name(st), err.msg);
  resil_side_free(s);
  return -1;
}

/* ---- same request on the wire ------------------------------------------- */

static json_t *headers_of_echo(const char *body, size_t len) {
  json_t *doc = json_loadb(body, len, 0, NULL);
  json_t *h = json_incref(json_object_get(doc, "headers"));
  json_decref(doc);
  return h;
}

/* The request headers the fixture saw for GET /echo, as a JSON object, or
 * NULL. The handle's URL is set back to ka_url. */
static json_t *echo_headers_bare(bare_conn *b, const char *base_url, const char *ka_url) {
  char url[256];
  snprintf(url, sizeof url, "%s/echo", base_url);
  json_t *h = NULL;
  if (curl_easy_setopt(b->e, CURLOPT_URL, url) == CURLE_OK && bare_perform(b) == 200 &&
      !b->body.overflow)
    h = headers_of_echo(b->body.data, b->body.len);
  curl_easy_setopt(b->e, CURLOPT_URL, ka_url);
  return h;
}

static json_t *echo_headers_resil(resil_side *s) {
  resil_http_response *resp = resil_call(s, "echo");
  json_t *h = NULL;
  if (resp) {
    size_t len = 0;
    const char *body = resil_http_response_body(resp, &len);
    h = headers_of_echo(body, len);
  }
  resil_http_response_free(resp);
  return h;
}

/* 0 when every side sent the same request headers as libresil; otherwise
 * -1 and why. */
static int compare_headers(json_t *const *h, char *why, size_t whylen) {
  for (int i = 0; i < NSIDES; i++) {
    if (!h[i]) {
      snprintf(why, whylen, "GET /echo failed on the %s side", side_key[i]);
      return -1;
    }
  }
  for (int i = 0; i < NSIDES; i++) {
    if (i == SIDE_RESIL || json_equal(h[i], h[SIDE_RESIL])) continue;
    char *a = json_dumps(h[i], JSON_SORT_KEYS | JSON_COMPACT);
    char *b = json_dumps(h[SIDE_RESIL], JSON_SORT_KEYS | JSON_COMPACT);
    snprintf(why, whylen, "request headers differ: %s %s, libresil %s", side_key[i],
             a ? a : "?", b ? b : "?");
    free(a);
    free(b);
    return -1;
  }
  return 0;
}

/* ---- figures ------------------------------------------------------------------ */

typedef int (*get_fn)(void *state);

static const get_fn side_get[NSIDES] = {bare_get, bare_get, resil_get};

typedef struct batch_stats {
  double req_per_s;
  double cpu_us;        /* CPU time of the calling thread(s) per request */
  double p50_us;
  double p99_us;
  uint64_t requests;
  uint64_t failures;
  long new_connections; /* accepted by the server during the batch */
} batch_stats;

/* Rounds at most; more, shorter rounds let the median over rounds shed
 * the ones another process disturbed. */
#define MAX_ROUNDS 120

typedef struct side_figures {
  double rps[MAX_ROUNDS];
  double cpu[MAX_ROUNDS];
  double p50[MAX_ROUNDS];
  double p99[MAX_ROUNDS];
  uint64_t requests;
  uint64_t failures;
  long new_connections;
} side_figures;

typedef struct case_figures {
  int rounds;
  side_figures side[NSIDES];
  /* libresil against bare side i (SIDE_EASY, SIDE_MULTI), per round. */
  double ratio[2][MAX_ROUNDS];
  double added[2][MAX_ROUNDS];
  /* libresil's caller CPU per request over bare side i's, per round
   * (issue 10's target: <= 1.05 against SIDE_EASY). */
  double cpu_ratio[2][MAX_ROUNDS];
} case_figures;

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* bench_median() keeps at most BENCH_MAX_RUNS values; rounds are more. */
static double median(const double *v, int n) {
  double tmp[MAX_ROUNDS];
  if (n <= 0) return NAN;
  if (n > MAX_ROUNDS) n = MAX_ROUNDS;
  memcpy(tmp, v, (size_t)n * sizeof *tmp);
  qsort(tmp, (size_t)n, sizeof *tmp, cmp_double);
  return n % 2 ? tmp[n / 2] : (tmp[n / 2 - 1] + tmp[n / 2]) / 2.0;
}

/* CPU time of the calling thread: user and system, so the system calls a
 * side makes are counted, the time it waits for the server is not. */
static int cmp_i64(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return (x > y) - (x < y);
}

/* Nearest-rank percentile of sorted v, in microseconds. */
static double pct_us(const int64_t *v, size_t n, double p) {
  if (n == 0) return NAN;
  size_t k = (size_t)ceil(p * (double)n);
  if (k < 1) k = 1;
  if (k > n) k = n;
  return (double)v[k - 1] / 1e3;
}

static void percentiles(int64_t *lat, size_t n, batch_stats *st) {
  qsort(lat, n, sizeof *lat, cmp_i64);
  st->p50_us = pct_us(lat, n, 0.50);
  st->p99_us = pct_us(lat, n, 0.99);
}

/* Files round r's batches. */
static void record_round(case_figures *cf, int r, const batch_stats *st) {
  for (int i = 0; i < NSIDES; i++) {
    side_figures *sf = &cf->side[i];
    sf->rps[r] = st[i].req_per_s;
    sf->cpu[r] = st[i].cpu_us;
    sf->p50[r] = st[i].p50_us;
    sf->p99[r] = st[i].p99_us;
    sf->requests += st[i].requests;
    sf->failures += st[i].failures;
    sf->new_connections += st[i].new_connections;
  }
  for (int i = 0; i < 2; i++) {
    cf->ratio[i][r] = st[SIDE_RESIL].req_per_s / st[i].req_per_s;
    cf->added[i][r] = st[SIDE_RESIL].p50_us - st[i].p50_us;
    cf->cpu_ratio[i][r] = st[SIDE_RESIL].cpu_us / st[i].cpu_us;
  }
}

static json_t *real_array(const double *v, int n) {
  json_t *a = json_array();
  for (int i = 0; i < n; i++) json_array_append_new(a, json_real(v[i]));
  return a;
}

static void set_key(json_t *o, const char *prefix, int side, json_t *v) {
  char key[64];
  snprintf(key, sizeof key, "%s_%s", prefix, side_key[side]);
  json_object_set_new(o, key, v);
}

/* Writes the medians and the per-round figures into o. "ratio" and
 * "p50_added_us" compare libresil with bare libcurl (curl_easy_perform);
 * the "_vs_libcurl_multi" ones with the multi-handle loop. */
static void figures_to_json(const case_figures *cf, json_t *o) {
  int n = cf->rounds;
  json_t *per = json_object();
  for (int i = 0; i < NSIDES; i++) {
    const side_figures *sf = &cf->side[i];
    set_key(o, "req_per_s", i, json_real(median(sf->rps, n)));
    set_key(o, "p50_us", i, json_real(median(sf->p50, n)));
    set_key(o, "p99_us", i, json_real(median(sf->p99, n)));
    set_key(o, "caller_cpu_us_per_req", i, json_real(median(sf->cpu, n)));
    set_key(o, "requests", i, json_integer((json_int_t)sf->requests));
    set_key(o, "new_connections", i, json_integer(sf->new_connections));
    set_key(per, "req_per_s", i, real_array(sf->rps, n));
    set_key(per, "p50_us", i, real_array(sf->p50, n));
    set_key(per, "p99_us", i, real_array(sf->p99, n));
    set_key(per, "caller_cpu_us_per_req", i, real_array(sf->cpu, n));
  }
  json_object_set_new(o, "ratio", json_real(median(cf->ratio[SIDE_EASY], n)));
  json_object_set_new(o, "p50_added_us", json_real(median(cf->added[SIDE_EASY], n)));
  json_object_set_new(o, "cpu_ratio", json_real(median(cf->cpu_ratio[SIDE_EASY], n)));
  json_object_set_new(o, "cpu_ratio_vs_libcurl_multi",
                      json_real(median(cf->cpu_ratio[SIDE_MULTI], n)));
  json_object_set_new(per, "cpu_ratio", real_array(cf->cpu_ratio[SIDE_EASY], n));
  json_object_set_new(o, "ratio_vs_libcurl_multi",
                      json_real(median(cf->ratio[SIDE_MULTI], n)));
  json_object_set_new(o, "p50_added_us_vs_libcurl_multi",
                      json_real(median(cf->added[SIDE_MULTI], n)));
  json_object_set_new(per, "ratio", real_array(cf->ratio[SIDE_EASY], n));
  json_object_set_new(per, "p50_added_us", real_array(cf->added[SIDE_EASY], n));
  json_object_set_new(per, "ratio_vs_libcurl_multi", real_array(cf->ratio[SIDE_MULTI], n));
  json_object_set_new(per, "p50_added_us_vs_libcurl_multi",
                      real_array(cf->added[SIDE_MULTI], n));
  json_object_set_new(o, "rounds", json_integer(n));
  json_object_set_new(o, "per_round", per);
}

static void print_figures(const char *name, const case_figures *cf) {
  int n = cf->rounds;
  double ratio = median(cf->ratio[SIDE_EASY], n);
  double added = median(cf->added[SIDE_EASY], n);
  double lo = cf->ratio[SIDE_EASY][0], hi = lo;
  for (int i = 1; i < n; i++) {
    if (cf->ratio[SIDE_EASY][i] < lo) lo = cf->ratio[SIDE_EASY][i];
    if (cf->ratio[SIDE_EASY][i] > hi) hi = cf->ratio[SIDE_EASY][i];
  }
  printf("  %s: median of %d rounds\n", name, n);
  for (int i = 0; i < NSIDES; i++)
    printf("    %-14s %8.0f req/s  p50 %7.1f us  p99 %7.1f us  caller CPU %6.2f us/req\n",
           side_key[i], median(cf->side[i].rps, n), median(cf->side[i].p50, n),
           median(cf->side[i].p99, n), median(cf->side[i].cpu, n));
  printf("    libresil / libcurl       ratio %.3f (rounds %.3f..%.3f), p50 added %+.2f us"
         "  [%s]\n",
         ratio, lo, hi, added,
         ratio >= BENCH_HTTP_MIN_RATIO && added <= BENCH_HTTP_MAX_ADDED_US ? "targets met"
                                                                           : "targets missed");
  printf("    libresil / libcurl_multi ratio %.3f, p50 added %+.2f us (what libresil adds "
         "over the same driving loop)\n",
         median(cf->ratio[SIDE_MULTI], n), median(cf->added[SIDE_MULTI], n));
  printf("    caller CPU per request, libresil / libcurl %.3f (median of the rounds' ratios; "
         "target <= 1.05), / libcurl_multi %.3f\n",
         median(cf->cpu_ratio[SIDE_EASY], n), median(cf->cpu_ratio[SIDE_MULTI], n));
  fflush(stdout);
}

/* Sets why when the measured batches show a failure, a hidden retry, a
 * breaker that opened or a connection that was not kept alive. */
static void check_validity(const case_figures *cf, resil_side *ours, uint64_t attempts,
                           char *why, size_t whylen) {
  const side_figures *s = cf->side;
  if (s[SIDE_EASY].failures || s[SIDE_MULTI].failures || s[SIDE_RESIL].failures) {
    snprintf(why, whylen, "requests failed: libcurl %llu, libcurl_multi %llu, libresil %llu%s%s",
             (unsigned long long)s[SIDE_EASY].failures,
             (unsigned long long)s[SIDE_MULTI].failures,
             (unsigned long long)s[SIDE_RESIL].failures,
             ours->first_failure[0] ? "; libresil's first: " : "", ours->first_failure);
  } else if (attempts != s[SIDE_RESIL].requests) {
    snprintf(why, whylen, "%llu attempts for %llu libresil calls: a retry hid failures",
             (unsigned long long)attempts, (unsigned long long)s[SIDE_RESIL].requests);
  } else if (resil_breaker_state(ours->p.br) != RESIL_BREAKER_CLOSED) {
    snprintf(why, whylen, "breaker left CLOSED");
  } else if (s[SIDE_EASY].new_connections || s[SIDE_MULTI].new_connections ||
             s[SIDE_RESIL].new_connections) {
    snprintf(why, whylen,
             "keep-alive broken: new connections during the measured batches: libcurl "
             "%ld, libcurl_multi %ld, libresil %ld",
             s[SIDE_EASY].new_connections, s[SIDE_MULTI].new_connections,
             s[SIDE_RESIL].new_connections);
  }
}

/* Round counts: multiples of 6 (every order of the sides equally often),
 * growing with --runs. */
static int seq_rounds(const bench_opts *opts) {
  int r = (8 * opts->runs + 5) / 6 * 6;
  return r > MAX_ROUNDS ? MAX_ROUNDS : r;
}

static int conc_rounds(const bench_opts *opts) {
  int r = (4 * opts->runs + 5) / 6 * 6;
  return r > 60 ? 60 : r;
}

/* A sequential batch: as many requests as the slowest side makes in about
 * this long during the warm-up. */
#define SEQ_BATCH_NS INT64_C(25000000)
/* A concurrent batch lasts this long. */
#define CONC_BATCH_NS INT64_C(100000000)

/* The three sides' echo headers compared; 0 or -1 with why. */
static int same_on_the_wire(bare_conn *easy, bare_conn *multi, resil_side *ours,
                            const char *base_url, const char *ka_url, char *why,
                            size_t whylen) {
  json_t *h[NSIDES];
  h[SIDE_EASY] = echo_headers_bare(easy, base_url, ka_url);
  h[SIDE_MULTI] = echo_headers_bare(multi, base_url, ka_url);
  h[SIDE_RESIL] = echo_headers_resil(ours);
  int rc = compare_headers(h, why, whylen);
  for (int i = 0; i < NSIDES; i++) json_decref(h[i]);
  return rc;
}

/* Connections opened so far by side `side` (states: its n states): the
 * fixture's count of accepted connections when there is a fixture, else
 * counted client-side (nginx has no such counter to ask): the bare handles'
 * CURLINFO_NUM_CONNECTS after each transfer, libresil's client's
 * connections_opened (resil_http_stats). */
static long connections_of(resil_fixture *fx, int side, void *const *states, int n) {
  if (fx) return resil_fixture_connections(fx);
  long c = 0;
  if (side == SIDE_RESIL) {
    resil_http_stats hs;
    const resil_side *s = states[0];
    if (resil_http_client_get_stats(s->p.client, &hs) == RESIL_OK) c = (long)hs.connections_opened;
    return c;
  }
  for (int i = 0; i < n; i++) c += ((const bare_conn *)states[i])->connects;
  return c;
}

/* ---- sequential --------------------------------------------------------------- */

static void seq_batch(resil_fixture *fx, int side, void *state, uint64_t n, int64_t *lat,
                      batch_stats *st) {
  memset(st, 0, sizeof *st);
  get_fn get = side_get[side];
  long c0 = connections_of(fx, side, &state, 1);
  int64_t cpu0 = bench_thread_cpu_ns();
  uint64_t failed = 0;
  int64_t t = bench_now_ns();
  int64_t t_start = t;
  for (uint64_t i = 0; i < n; i++) {
    failed += !get(state);
    int64_t t1 = bench_now_ns();
    lat[i] = t1 - t;
    t = t1;
  }
  st->req_per_s = (double)n * 1e9 / (double)(t - t_start);
  st->cpu_us = (double)(bench_thread_cpu_ns() - cpu0) / 1e3 / (double)n;
  st->requests = n;
  st->failures = failed;
  st->new_connections = connections_of(fx, side, &state, 1) - c0;
  percentiles(lat, (size_t)n, st);
}

/* Runs requests for at least `ns` (and 100 requests); returns the median
 * time per request, which a burst of other work on the machine does not
 * inflate as it would the mean. lat has room for LAT_CAP values. */
static double seq_warm(get_fn get, void *state, int64_t ns, int64_t *lat,
                       uint64_t *failed) {
  int64_t t0 = bench_now_ns(), t = t0;
  size_t n = 0;
  while ((t - t0 < ns || n < 100) && n < LAT_CAP) {
    *failed += !get(state);
    int64_t t1 = bench_now_ns();
    lat[n++] = t1 - t;
    t = t1;
  }
  qsort(lat, n, sizeof *lat, cmp_i64);
  return (double)lat[n / 2];
}

/* client_cpu, server_cpu: where the caller and the fixture's threads are
 * pinned, for the record (-1: not pinned; nginx: the server's is -1). */
static void run_seq(const bench_opts *opts, const http_target *tg, json_t *entries,
                    int client_cpu, int server_cpu) {
  resil_fixture *fx = tg->fx;
  const char *base_url = tg->base_url;
  json_t *o = case_stub(tg->name[0], tg->measures[0]);
  char why[600] = "";
  char ka_url[256];
  snprintf(ka_url, sizeof ka_url, "%s/ka", base_url);
  bare_conn easy, multi;
  resil_side ours;
  int have_easy = bare_open(&easy, ka_url, 0) == 0;
  int have_multi = bare_open(&multi, ka_url, 1) == 0;
  int have_ours = 0;
  int64_t *lat = NULL;
  case_figures cf;
  memset(&cf, 0, sizeof cf);
  if (!have_easy || !have_multi)
    snprintf(why, sizeof why, "curl_easy_init, curl_multi_init or curl_easy_setopt failed");
  else
    have_ours = resil_side_open(&ours, base_url, 1, why, sizeof why) == 0;
  if (!why[0]) same_on_the_wire(&easy, &multi, &ours, base_url, ka_url, why, sizeof why);
  void *state[NSIDES] = {&easy, &multi, &ours};
  if (!why[0] && !(lat = malloc(LAT_CAP * sizeof *lat)))
    snprintf(why, sizeof why, "out of memory");
  if (!why[0]) {
    /* Warm-up: connections open, caches warm; the slowest side's median
     * pace sets the batch size. */
    uint64_t wf = 0;
    double per = 0.0;
    for (int pass = 0; pass < 2; pass++) {
      for (int i = 0; i < NSIDES; i++) {
        double t = seq_warm(side_get[i], state[i], INT64_C(100000000) / (pass + 1), lat, &wf);
        if (pass == 1 && t > per) per = t;
      }
    }
    uint64_t n = (uint64_t)((double)SEQ_BATCH_NS / per) + 1;
    if (n < 100) n = 100;
    if (n > LAT_CAP) n = LAT_CAP;
    json_object_set_new(o, "requests_per_batch", json_integer((json_int_t)n));
    if (wf) {
      snprintf(why, sizeof why, "warm-up: %llu requests failed (libresil's first: %s)",
               (unsigned long long)wf, ours.first_failure);
    } else {
      resil_layer_stats before, after;
      resil_chain_call_stats(ours.chain, &before);
      cf.rounds = seq_rounds(opts);
      for (int r = 0; r < cf.rounds; r++) {
        batch_stats st[NSIDES];
        for (int k = 0; k < NSIDES; k++) {
          int i = orders[r % 6][k];
          seq_batch(fx, i, state[i], n, lat, &st[i]);
        }
        record_round(&cf, r, st);
      }
      resil_chain_call_stats(ours.chain, &after);
      check_validity(&cf, &ours, after.calls_in - before.calls_in, why, sizeof why);
    }
  }
  json_object_set_new(o, "callers", json_integer(1));
  json_object_set_new(o, "caller_cpu", client_cpu >= 0 ? json_integer(client_cpu) : json_null());
  json_object_set_new(o, "server_cpu", server_cpu >= 0 ? json_integer(server_cpu) : json_null());
  if (cf.rounds) figures_to_json(&cf, o);
  if (why[0]) {
    json_object_set_new(o, "error", json_string(why));
    printf("  %-26s INVALID: %s\n", tg->name[0], why);
    fflush(stdout);
  } else {
    print_figures(tg->name[0], &cf);
  }
  json_array_append_new(entries, o);
  free(lat);
  if (have_ours) resil_side_free(&ours);
  if (have_multi) bare_close(&multi);
  if (have_easy) bare_close(&easy);
}

/* ---- concurrent --------------------------------------------------------------- */

typedef struct conc_gate {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int go;
  atomic_int stop;
} conc_gate;

typedef struct conc_caller {
  pthread_t tid;
  conc_gate *gate;
  get_fn get;
  void *state;
  int cpu; /* -1: not pinned */
  int64_t *lat;
  size_t nlat;
  uint64_t ops;
  uint64_t failures;
  int64_t t_end;
  int64_t cpu_ns; /* CPU time the caller used for its requests */
} conc_caller;

/* The i-th CPU this process may run on, or -1. */
static int allowed_cpu(int i) {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) != 0) return -1;
  for (int c = 0; c < CPU_SETSIZE; c++) {
    if (!CPU_ISSET(c, &set)) continue;
    if (i-- == 0) return c;
  }
  return -1;
}

static void *conc_main(void *p) {
  conc_caller *w = p;
  if (w->cpu >= 0 && bench_pin_self(w->cpu) != 0) w->cpu = -1;
  pthread_mutex_lock(&w->gate->mu);
  while (!w->gate->go) pthread_cond_wait(&w->gate->cv, &w->gate->mu);
  pthread_mutex_unlock(&w->gate->mu);
  w->cpu_ns = bench_thread_cpu_ns();
  int64_t t = bench_now_ns();
  while (!atomic_load_explicit(&w->gate->stop, memory_order_relaxed)) {
    w->failures += !w->get(w->state);
    int64_t t1 = bench_now_ns();
    if (w->nlat < LAT_CAP) w->lat[w->nlat++] = t1 - t;
    t = t1;
    w->ops++;
  }
  w->t_end = t;
  w->cpu_ns = bench_thread_cpu_ns() - w->cpu_ns;
  return NULL;
}

/* One batch: CALLERS threads call get(states[i]) until `ns` have passed.
 * pooled has room for CALLERS * LAT_CAP latencies. Returns 0, or -1 when a
 * thread could not be created. */
static int conc_batch(const bench_opts *opts, resil_fixture *fx, int side,
                      void *const *states, int64_t ns, conc_caller *callers,
                      int64_t *pooled, batch_stats *st) {
  memset(st, 0, sizeof *st);
  get_fn get = side_get[side];
  conc_gate gate;
  pthread_mutex_init(&gate.mu, NULL);
  pthread_cond_init(&gate.cv, NULL);
  gate.go = 0;
  atomic_init(&gate.stop, 0);
  long c0 = connections_of(fx, side, states, CALLERS);
  int started = 0;
  for (int i = 0; i < CALLERS; i++) {
    conc_caller *w = &callers[i];
    w->gate = &gate;
    w->get = get;
    w->state = states[i];
    w->cpu = opts->pin_threads ? allowed_cpu(i % CALLER_CPUS) : -1;
    w->nlat = 0;
    w->ops = 0;
    w->failures = 0;
    w->t_end = 0;
    if (pthread_create(&w->tid, NULL, conc_main, w) != 0) break;
    started++;
  }
  if (started < CALLERS) atomic_store(&gate.stop, 1);
  /* Read before the start signal: the callers' first requests are inside
   * the measured time. */
  int64_t t_go = bench_now_ns();
  pthread_mutex_lock(&gate.mu);
  gate.go = 1;
  pthread_cond_broadcast(&gate.cv);
  pthread_mutex_unlock(&gate.mu);
  if (started == CALLERS) {
    struct timespec ts = {.tv_sec = (time_t)(ns / 1000000000),
                          .tv_nsec = (long)(ns % 1000000000)};
    while (nanosleep(&ts, &ts) != 0) {
    }
    atomic_store(&gate.stop, 1);
  }
  int64_t t_end = t_go, cpu_ns = 0;
  size_t np = 0;
  for (int i = 0; i < started; i++) {
    conc_caller *w = &callers[i];
    pthread_join(w->tid, NULL);
    if (w->t_end > t_end) t_end = w->t_end;
    st->requests += w->ops;
    st->failures += w->failures;
    cpu_ns += w->cpu_ns;
    memcpy(pooled + np, w->lat, w->nlat * sizeof *pooled);
    np += w->nlat;
  }
  pthread_cond_destroy(&gate.cv);
  pthread_mutex_destroy(&gate.mu);
  if (started < CALLERS) return -1;
  st->req_per_s = (double)st->requests * 1e9 / (double)(t_end - t_go);
  st->cpu_us = st->requests ? (double)cpu_ns / 1e3 / (double)st->requests : NAN;
  st->new_connections = connections_of(fx, side, states, CALLERS) - c0;
  percentiles(pooled, np, st);
  return 0;
}

static void run_conc(const bench_opts *opts, const http_target *tg, json_t *entries) {
  resil_fixture *fx = tg->fx;
  const char *base_url = tg->base_url;
  json_t *o = case_stub(tg->name[1], tg->measures[1]);
  char why[600] = "";
  char ka_url[256];
  snprintf(ka_url, sizeof ka_url, "%s/ka", base_url);
  /* bare[0..CALLERS-1] curl_easy_perform, bare[CALLERS..] multi loop. */
  bare_conn *bare = calloc(2 * CALLERS, sizeof *bare);
  conc_caller *callers = calloc(CALLERS, sizeof *callers);
  int64_t *pooled = malloc((size_t)CALLERS * LAT_CAP * sizeof *pooled);
  int nbare = 0, have_ours = 0;
  resil_side ours;
  case_figures cf;
  memset(&cf, 0, sizeof cf);
  void *states[NSIDES][CALLERS];
  if (!bare || !callers || !pooled) {
    snprintf(why, sizeof why, "out of memory");
  } else {
    for (int i = 0; i < CALLERS; i++) {
      callers[i].lat = malloc(LAT_CAP * sizeof *callers[i].lat);
      if (!callers[i].lat) snprintf(why, sizeof why, "out of memory");
    }
    for (; !why[0] && nbare < 2 * CALLERS; nbare++) {
      if (bare_open(&bare[nbare], ka_url, nbare >= CALLERS) != 0) {
        snprintf(why, sizeof why, "curl_easy_init, curl_multi_init or curl_easy_setopt failed");
        break;
      }
    }
    if (!why[0]) have_ours = resil_side_open(&ours, base_url, CALLERS, why, sizeof why) == 0;
    for (int i = 0; i < CALLERS; i++) {
      states[SIDE_EASY][i] = &bare[i];
      states[SIDE_MULTI][i] = &bare[CALLERS + i];
      states[SIDE_RESIL][i] = &ours;
    }
  }
  if (!why[0])
    same_on_the_wire(&bare[0], &bare[CALLERS], &ours, base_url, ka_url, why, sizeof why);
  if (!why[0]) {
    int64_t batch_ns = CONC_BATCH_NS;
    json_object_set_new(o, "batch_ms", json_real((double)batch_ns / 1e6));
    batch_stats st[NSIDES];
    memset(st, 0, sizeof st);
    /* Warm-up: every caller opens its connection (libresil: every pool
     * slot), outside the measured batches. */
    uint64_t wf = 0;
    for (int i = 0; i < NSIDES && !why[0]; i++) {
      if (conc_batch(opts, fx, i, states[i], INT64_C(150000000), callers, pooled,
                     &st[i]) != 0)
        snprintf(why, sizeof why, "pthread_create failed");
      wf += st[i].failures;
    }
    if (!why[0] && wf)
      snprintf(why, sizeof why, "warm-up: %llu requests failed (libresil's first: %s)",
               (unsigned long long)wf, ours.first_failure);
    resil_layer_stats before, after;
    resil_chain_call_stats(ours.chain, &before);
    cf.rounds = why[0] ? 0 : conc_rounds(opts);
    for (int r = 0; r < cf.rounds; r++) {
      int rc = 0;
      for (int k = 0; k < NSIDES && rc == 0; k++) {
        int i = orders[r % 6][k];
        rc = conc_batch(opts, fx, i, states[i], batch_ns, callers, pooled, &st[i]);
      }
      if (rc != 0) {
        snprintf(why, sizeof why, "pthread_create failed");
        cf.rounds = r;
        break;
      }
      record_round(&cf, r, st);
    }
    resil_chain_call_stats(ours.chain, &after);
    resil_http_stats hs;
    if (resil_http_client_get_stats(ours.p.client, &hs) == RESIL_OK)
      json_object_set_new(o, "libresil_connections_opened",
                          json_integer((json_int_t)hs.connections_opened));
    if (!why[0]) check_validity(&cf, &ours, after.calls_in - before.calls_in, why, sizeof why);
  }
  json_object_set_new(o, "callers", json_integer(CALLERS));
  json_object_set_new(o, "caller_cpus", json_integer(CALLER_CPUS));
  json_object_set_new(o, "pinned", json_boolean(opts->pin_threads));
  if (cf.rounds) figures_to_json(&cf, o);
  if (why[0]) {
    json_object_set_new(o, "error", json_string(why));
    printf("  %-26s INVALID: %s\n", tg->name[1], why);
    fflush(stdout);
  } else {
    print_figures(tg->name[1], &cf);
  }
  json_array_append_new(entries, o);
  if (have_ours) resil_side_free(&ours);
  for (int i = 0; i < nbare; i++) bare_close(&bare[i]);
  if (callers)
    for (int i = 0; i < CALLERS; i++) free(callers[i].lat);
  free(callers);
  free(bare);
  free(pooled);
}

/* Starts a fixture and runs the sequential (which 0) or concurrent (1)
 * case against it. client_cpu >= 0: the caller is pinned there once the
 * fixture has started (its threads keep the affinity they started with:
 * server_cpu, for the record). */
static void run_fixture_case(const bench_opts *opts, json_t *entries, int which,
                             int client_cpu, int server_cpu) {
  resil_fixture_config fc;
  resil_fixture_config_init(&fc);
  resil_fixture *fx = NULL;
  char ferr[256] = "";
  if (resil_fixture_start(&fc, &fx, ferr, sizeof ferr) != 0) {
    char why[320];
    snprintf(why, sizeof why, "resil_fixture_start: %s", ferr);
    all_cases_with(opts, entries, which, which, "error", why);
    return;
  }
  if (client_cpu >= 0 && bench_pin_self(client_cpu) != 0) client_cpu = server_cpu = -1;
  http_target tg = {{CASE_SEQ, CASE_CONC}, {measures_seq, measures_conc}, fx,
                    resil_fixture_url(fx)};
  printf("  HTTP: fixture %s (in-process, libmicrohttpd %s), libcurl %s", tg.base_url,
         MHD_get_version(), curl_version_info(CURLVERSION_NOW)->version);
  if (client_cpu >= 0)
    printf("; caller on CPU %d, the fixture's threads on CPU %d", client_cpu, server_cpu);
  printf("\n");
  fflush(stdout);
  if (which == 0)
    run_seq(opts, &tg, entries, client_cpu, server_cpu);
  else
    run_conc(opts, &tg, entries);
  resil_fixture_stop(fx);
}

int bench_run_http_cases(const bench_opts *opts, const char *json_path) {
  if (!any_selected(opts)) return 0;
  json_t *entries = json_array();
  char method[1600];
  snprintf(method, sizeof method,
           "HTTP cases: in-process fixture (libmicrohttpd %s, thread per connection) on "
           "127.0.0.1, and the same cases (_nginx) against nginx on 127.0.0.1 started by "
           "scripts/bench.sh (scripts/nginx-start.sh), GET /ka -> 200 \"ok\"; libcurl %s; "
           "each round runs one batch per "
           "side (libcurl = curl_easy_perform, libcurl_multi = the same handle driven "
           "through a multi handle like libresil's, libresil = client + "
           "Retry(Breaker(RateLimiter(Bulkhead)))), the 6 orders of the sides in turn; "
           "sequential: %d rounds of ~%lld ms batches (a fixed request count); "
           "concurrent: %d rounds of %lld ms batches with %d callers on %d CPUs (%s); "
           "figures are medians over rounds, ratio = median of per-round "
           "libresil/libcurl req/s, p50 added = median of per-round p50 differences; "
           "latency = clock_gettime(CLOCK_MONOTONIC) between consecutive calls; "
           "new connections: the fixture's accept count, client-side counts for nginx",
           MHD_get_version(), curl_version_info(CURLVERSION_NOW)->version,
           seq_rounds(opts), (long long)(SEQ_BATCH_NS / 1000000), conc_rounds(opts),
           (long long)(CONC_BATCH_NS / 1000000), CALLERS, CALLER_CPUS,
           opts->pin_threads ? "callers pinned" : "not pinned");
  if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
    all_cases_with(opts, entries, 0, 3, "error", "curl_global_init failed");
    return bench_append_cases(json_path, entries, "http_method", method);
  }
  /* The sequential case: with --pin (the default) and two CPUs, the
   * fixture's server threads run on the second CPU and the caller on the
   * first, the same for every side (its threads take the affinity of the
   * thread that starts it). Left to the scheduler, whether the caller and
   * the server thread shared a CPU decided a round more than the client
   * did (per-round ratios from 0.25 to 6.6 in one run). The concurrent case
   * gets a fixture of its own, on every CPU, as before. */
  if (bench_selected(opts, CASE_SEQ)) {
    cpu_set_t saved;
    int pin = opts->pin_threads && allowed_cpu(1) >= 0 &&
              pthread_getaffinity_np(pthread_self(), sizeof saved, &saved) == 0;
    int client_cpu = pin ? allowed_cpu(0) : -1, server_cpu = pin ? allowed_cpu(1) : -1;
    if (pin && bench_pin_self(server_cpu) != 0) pin = 0;
    run_fixture_case(opts, entries, 0, pin ? client_cpu : -1, pin ? server_cpu : -1);
    if (pin) pthread_setaffinity_np(pthread_self(), sizeof saved, &saved);
  }
  if (bench_selected(opts, CASE_CONC)) run_fixture_case(opts, entries, 1, -1, -1);
  if (bench_selected(opts, CASE_SEQ_NGINX) || bench_selected(opts, CASE_CONC_NGINX)) {
    if (!opts->nginx_url) {
      all_cases_with(opts, entries, 2, 3, "skipped",
                     opts->nginx_skipped ? opts->nginx_skipped
                                         : "no nginx (--nginx-url; scripts/bench.sh starts one)");
    } else {
      http_target tg = {{CASE_SEQ_NGINX, CASE_CONC_NGINX},
                        {measures_seq_nginx, measures_conc_nginx},
                        NULL,
                        opts->nginx_url};
      printf("  HTTP: nginx %s (another process), libcurl %s\n", tg.base_url,
             curl_version_info(CURLVERSION_NOW)->version);
      fflush(stdout);
      if (bench_selected(opts, CASE_SEQ_NGINX)) {
        /* As the fixture's sequential case: with --pin and nginx's worker
         * on a CPU of its own (--nginx-cpu, scripts/bench.sh), the caller
         * runs on another CPU, the same for every side. */
        int client_cpu = -1;
        cpu_set_t saved;
        if (opts->pin_threads && opts->nginx_cpu >= 0 &&
            pthread_getaffinity_np(pthread_self(), sizeof saved, &saved) == 0) {
          for (int i = 0; client_cpu < 0 && allowed_cpu(i) >= 0; i++)
            if (allowed_cpu(i) != opts->nginx_cpu) client_cpu = allowed_cpu(i);
          if (client_cpu >= 0 && bench_pin_self(client_cpu) != 0) client_cpu = -1;
        }
        if (client_cpu >= 0)
          printf("  (sequential case: caller on CPU %d, nginx's worker on CPU %d)\n", client_cpu,
                 opts->nginx_cpu);
        run_seq(opts, &tg, entries, client_cpu, client_cpu >= 0 ? opts->nginx_cpu : -1);
        if (client_cpu >= 0) pthread_setaffinity_np(pthread_self(), sizeof saved, &saved);
      }
      if (bench_selected(opts, CASE_CONC_NGINX)) run_conc(opts, &tg, entries);
    }
  }
  curl_global_cleanup();
  return bench_append_cases(json_path, entries, "http_method", method);
}

#endif
