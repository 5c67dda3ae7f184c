/* The async cases: many keep-alive GETs in flight on one thread, libresil's
 * async engine (engine.h) against bare libcurl multi_socket, both on the
 * built-in loop (resil_loop, loop.h), measured in the same run, alternating
 * rounds, against nginx on 127.0.0.1 (scripts/nginx-start.sh, started by
 * scripts/bench.sh: a process of its own, 1 worker).
 *
 *   async_get_1000_inflight     1,000 GET /ka kept in flight;
 *   async_get_10000_inflight    10,000 kept in flight.
 *
 * Two sides, each on its own adapter of one resil_loop, run by the calling
 * thread (the only thread of the client):
 *
 *   libcurl_multi  bare libcurl as a multi_socket user writes it: one multi
 *                  handle, CURLMOPT_SOCKETFUNCTION / CURLMOPT_TIMERFUNCTION
 *                  turned into the adapter's watches and its one timer,
 *                  transfers advanced by curl_multi_socket_action only;
 *                  per batch one easy handle per in-flight slot (created at
 *                  the batch's start, inside the measured time and memory,
 *                  the options of the HTTP cases, bench_bare_setopts),
 *                  re-added for the next request as soon as it completes
 *                  (status and body checked).
 *   libresil       resil_engine_call of endpoint "ka" (GET /ka, RAW codec)
 *                  with policies {retry, breaker, bulkhead} (made by
 *                  bench_policies_open, shared with the HTTP cases):
 *                  default retry, a breaker with a count window of 100 and
 *                  slow-call detection at 60 s (a call's time includes its
 *                  wait for a connection in the engine's queue), a bulkhead
 *                  as large as the in-flight count (it never refuses), a
 *                  client lease timeout of 60 s (the bound of that wait);
 *                  a new call submitted from each completion (outcome,
 *                  status and body checked, the response freed).
 *
 * Same connection limits: the client's max_connections and
 * max_connections_per_host (ASYNC_CONNS), which the engine gives its multi
 * handle as CURLMOPT_MAX_TOTAL_CONNECTIONS / MAX_HOST_CONNECTIONS /
 * MAXCONNECTS and, since it hands libcurl at most ASYNC_CONNS transfers,
 * enforces itself (further calls wait in its own queue, engine.h
 * "Connections"); the bare multi gets the same three, and its further
 * transfers wait inside libcurl (its pending queue). Connections stay open
 * between batches (a warm-up batch per side opens them first).
 *
 * A batch: `inflight` requests started at once, then one more started at
 * each completion until `batch` requests (ASYNC_BATCH_FACTOR * inflight)
 * have been started; it ends when all have completed. Per batch:
 *   req/s        completed requests over the batch's wall time;
 *   CPU/request  CLOCK_THREAD_CPUTIME_ID of the thread over the batch, per
 *                request (the client's whole work: the loop, libcurl, and
 *                for libresil the engine and policies);
 *   memory       heap in use (mallinfo2: uordblks + hblkhd) at its peak
 *                during the batch, sampled after the initial submissions
 *                and at every 64th completion, minus before the batch,
 *                over the in-flight count: bytes per in-flight call,
 *                everything included (easy handles, buffers, the engine's
 *                call state, libcurl's pending queue). Under a sanitizer
 *                (ASan) mallinfo2 does not see the allocations and reads 0.
 *   failures     requests that did not end 200 "ok".
 *   libcurl_multi_window  (reported, not a target) the bare side again,
 *                  but handing libcurl at most ASYNC_CONNS transfers at a
 *                  time, the rest of the in-flight count waiting in the
 *                  caller as a counter: the cost of the same requests
 *                  without libcurl's queue of transfers pending for a
 *                  connection (its memory per call is not reported: the
 *                  waiting requests hold nothing).
 * Rounds run the three sides in the 6 orders in turn. Reported: medians over rounds of
 * each side's req/s, CPU per request and bytes per in-flight call, and of
 * the per-round ratio libresil / libcurl_multi req/s (the target) and
 * libresil / libcurl_multi_window (ratio_capped: both sides then hand
 * libcurl at most ASYNC_CONNS transfers, reported); the load average at
 * the start and end. A case with any failed request is reported with its
 * failure counts and no ratio. Before measuring, one GET /echo on each
 * side: nginx returns the request headers a client sets (a fixed list,
 * see scripts/nginx-start.sh) and the two must be equal. */
#include <malloc.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench.h"

#define CASE_1K "async_get_1000_inflight"
#define CASE_10K "async_get_10000_inflight"

static const char measures_1k[] =
    "1,000 keep-alive GET /ka (200 \"ok\") kept in flight on one thread against nginx "
    "on 127.0.0.1: libresil's async engine with {retry, breaker, bulkhead} vs bare "
    "libcurl multi_socket, both on resil_loop, same connection limits, alternating "
    "rounds";
static const char measures_10k[] =
    "the same with 10,000 GETs kept in flight";

static json_t *case_stub(const char *name, const char *measures) {
  json_t *o = json_object();
  json_object_set_new(o, "name", json_string(name));
  json_object_set_new(o, "kind", json_string("async"));
  json_object_set_new(o, "measures", json_string(measures));
  return o;
}

static void all_cases_with(const bench_opts *opts, json_t *entries, const char *key,
                           const char *why) {
  const char *names[2] = {CASE_1K, CASE_10K};
  const char *measures[2] = {measures_1k, measures_10k};
  for (int i = 0; i < 2; i++) {
    if (!bench_selected(opts, names[i])) continue;
    json_t *o = case_stub(names[i], measures[i]);
    json_object_set_new(o, key, json_string(why));
    json_array_append_new(entries, o);
    printf("  %-26s %s: %s\n", names[i], !strcmp(key, "skipped") ? "SKIPPED" : "INVALID",
           why);
  }
  fflush(stdout);
}

#ifndef RESIL_BENCH_HTTP

int bench_run_async_cases(const bench_opts *opts, const char *json_path) {
  if (!bench_selected(opts, CASE_1K) && !bench_selected(opts, CASE_10K)) return 0;
  json_t *entries = json_array();
  all_cases_with(opts, entries, "skipped",
                 "not built: libresil-http is missing (configure with -DRESIL_WITH_HTTP=ON)");
  return bench_append_cases(json_path, entries, NULL, NULL);
}

#else

#include <curl/curl.h>

#include "http_bench.h"
#include "resil/breaker.h"
#include "resil/bulkhead.h"
#include "resil/engine.h"
#include "resil/http.h"
#include "resil/loop.h"
#include "resil/retry.h"

/* Connections each side may open (both limits). */
#define ASYNC_CONNS 64
/* Requests per batch: this many times the in-flight count. */
#define ASYNC_BATCH_FACTOR 3
#define ASYNC_MAX_ROUNDS 31
/* Heap sampled at every this many completions. */
#define MEM_SAMPLE_EVERY 64
#define BODY_CAP 4096

/* SIDE_WINDOW: the bare multi again, but handing libcurl at most
 * ASYNC_CONNS transfers at a time (the rest wait in the application as a
 * mere count): what the same requests cost without libcurl's queue of
 * transfers pending for a connection. Reported, not a target. */
enum { SIDE_MULTI = 0, SIDE_RESIL = 1, SIDE_WINDOW = 2, NSIDES = 3 };
static const char *const side_key[NSIDES] = {"libcurl_multi", "libresil",
                                             "libcurl_multi_window"};
/* The 6 orders of the three sides. */
static const int orders[6][NSIDES] = {{0, 1, 2}, {1, 0, 2}, {2, 0, 1},
                                      {0, 2, 1}, {1, 2, 0}, {2, 1, 0}};

static size_t heap_in_use(void) {
  struct mallinfo2 mi = mallinfo2();
  return mi.uordblks + mi.hblkhd;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static double median(const double *v, int n) {
  double tmp[ASYNC_MAX_ROUNDS];
  if (n <= 0) return NAN;
  memcpy(tmp, v, (size_t)n * sizeof *tmp);
  qsort(tmp, (size_t)n, sizeof *tmp, cmp_double);
  return n % 2 ? tmp[n / 2] : (tmp[n / 2 - 1] + tmp[n / 2]) / 2.0;
}

/* What one batch does and measures, whichever side runs it. */
typedef struct batch {
  resil_loop *loop;
  size_t inflight;  /* started at once                                   */
  size_t total;     /* requests in the batch                             */
  size_t started;
  size_t completed;
  size_t failures;
  size_t mem_base;
  size_t mem_peak;
  int want_body;    /* 1: keep the last body (the /echo check)           */
  char body[BODY_CAP];
  size_t body_len;
  char first_failure[300];
} batch;

static void note_done(batch *b, int ok, const char *why) {
  b->completed++;
  if (!ok) {
    b->failures++;
    if (!b->first_failure[0]) snprintf(b->first_failure, sizeof b->first_failure, "%s", why);
  }
  if (b->completed % MEM_SAMPLE_EVERY == 0) {
    size_t m = heap_in_use();
    if (m > b->mem_peak) b->mem_peak = m;
  }
  if (b->completed == b->total) resil_loop_stop(b->loop);
}

/* ---- bare libcurl multi_socket on the adapter ---------------------------- */

typedef struct bare_xfer {
  CURL *e;
  struct bare_side *side;
  size_t len;
  int overflow;
  char body[BODY_CAP];
} bare_xfer;

typedef struct bare_side {
  resil_loop_adapter *ad;
  CURLM *m;
  batch *b;
  const char *url;
  bare_xfer *x; /* b->inflight of them during a batch */
  size_t nx;
  int broken;   /* a multi call failed */
} bare_side;

static size_t bare_write(char *p, size_t size, size_t n, void *ud) {
  bare_xfer *x = ud;
  size_t k = size * n;
  if (k > BODY_CAP - 1 - x->len) {
    x->overflow = 1;
    return 0;
  }
  memcpy(x->body + x->len, p, k);
  x->len += k;
  return k;
}

static void bare_check_done(bare_side *s);

static void bare_on_io(void *arg, int fd, unsigned events) {
  bare_side *s = arg;
  int flags = 0, running = 0;
  if (events & RESIL_IO_READ) flags |= CURL_CSELECT_IN;
  if (events & RESIL_IO_WRITE) flags |= CURL_CSELECT_OUT;
  if (events & RESIL_IO_ERROR) flags |= CURL_CSELECT_ERR;
  if (curl_multi_socket_action(s->m, fd, flags, &running) != CURLM_OK) s->broken = 1;
  bare_check_done(s);
}

static void bare_on_timer(void *arg) {
  bare_side *s = arg;
  int running = 0;
  if (curl_multi_socket_action(s->m, CURL_SOCKET_TIMEOUT, 0, &running) != CURLM_OK)
    s->broken = 1;
  bare_check_done(s);
}

static int bare_socket_cb(CURL *e, curl_socket_t fd, int what, void *userp, void *socketp) {
  (void)e;
  (void)socketp;
  bare_side *s = userp;
  unsigned ev = 0;
  if (what == CURL_POLL_IN || what == CURL_POLL_INOUT) ev |= RESIL_IO_READ;
  if (what == CURL_POLL_OUT || what == CURL_POLL_INOUT) ev |= RESIL_IO_WRITE;
  if (s->ad->watch(s->ad->self, fd, ev, bare_on_io, s) != 0 && ev) s->broken = 1;
  return 0;
}

static int bare_timer_cb(CURLM *m, long timeout_ms, void *userp) {
  (void)m;
  bare_side *s = userp;
  int64_t ns = timeout_ms < 0 ? -1 : (int64_t)timeout_ms * 1000000;
  return s->ad->timer(s->ad->self, ns, bare_on_timer, s) == 0 ? 0 : -1;
}

static int bare_start(bare_side *s, bare_xfer *x) {
  x->len = 0;
  x->overflow = 0;
  s->b->started++;
  return curl_multi_add_handle(s->m, x->e) == CURLM_OK ? 0 : -1;
}

static void bare_check_done(bare_side *s) {
  CURLMsg *msg;
  int left = 0;
  batch *b = s->b;
  while ((msg = curl_multi_info_read(s->m, &left)) != NULL) {
    if (msg->msg != CURLMSG_DONE) continue;
    CURL *e = msg->easy_handle;
    CURLcode rc = msg->data.result;
    bare_xfer *x = NULL;
    curl_easy_getinfo(e, CURLINFO_PRIVATE, (char **)&x);
    long code = 0;
    if (rc == CURLE_OK) curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &code);
    curl_multi_remove_handle(s->m, e);
    int ok = rc == CURLE_OK && code == 200;
    char why[200] = "";
    if (rc != CURLE_OK)
      snprintf(why, sizeof why, "libcurl: %s", curl_easy_strerror(rc));
    else if (code != 200)
      snprintf(why, sizeof why, "HTTP %ld", code);
    if (ok && b->want_body) {
      b->body_len = x->len < BODY_CAP ? x->len : BODY_CAP - 1;
      memcpy(b->body, x->body, b->body_len);
      b->body[b->body_len] = '\0';
    } else if (ok && !(x->len == 2 && memcmp(x->body, "ok", 2) == 0)) {
      ok = 0;
      snprintf(why, sizeof why, "unexpected body");
    }
    note_done(b, ok, why);
    if (b->started < b->total && bare_start(s, x) != 0) s->broken = 1;
  }
  if (s->broken) resil_loop_stop(b->loop);
}

static void bare_free_xfers(bare_side *s) {
  for (size_t i = 0; i < s->nx; i++) curl_easy_cleanup(s->x[i].e);
  free(s->x);
  s->x = NULL;
  s->nx = 0;
}

/* Creates the batch's easy handles and starts them. 0 or -1. */
static int bare_begin(bare_side *s, batch *b, const char *url) {
  s->b = b;
  s->broken = 0;
  s->x = calloc(b->inflight, sizeof *s->x);
  if (!s->x) return -1;
  for (size_t i = 0; i < b->inflight; i++) {
    bare_xfer *x = &s->x[i];
    x->side = s;
    if (!(x->e = curl_easy_init())) return -1;
    s->nx++;
    if (bench_bare_setopts(x->e, url, bare_write, x, 0) != CURLE_OK ||
        curl_easy_setopt(x->e, CURLOPT_PRIVATE, (void *)x) != CURLE_OK)
      return -1;
  }
  for (size_t i = 0; i < b->inflight; i++)
    if (bare_start(s, &s->x[i]) != 0) return -1;
  return 0;
}

static int bare_open(bare_side *s, resil_loop *loop) {
  memset(s, 0, sizeof *s);
  if (resil_loop_adapter_new(loop, &s->ad) != RESIL_OK) return -1;
  s->m = curl_multi_init();
  if (!s->m) return -1;
  CURLMcode rc = CURLM_OK;
#define MSET(opt, val)                                                         \
  do {                                                                         \
    if (rc == CURLM_OK) rc = curl_multi_setopt(s->m, opt, val);                \
  } while (0)
  MSET(CURLMOPT_SOCKETFUNCTION, bare_socket_cb);
  MSET(CURLMOPT_SOCKETDATA, (void *)s);
  MSET(CURLMOPT_TIMERFUNCTION, bare_timer_cb);
  MSET(CURLMOPT_TIMERDATA, (void *)s);
  MSET(CURLMOPT_MAX_TOTAL_CONNECTIONS, (long)ASYNC_CONNS);
  MSET(CURLMOPT_MAX_HOST_CONNECTIONS, (long)ASYNC_CONNS);
  MSET(CURLMOPT_MAXCONNECTS, (long)ASYNC_CONNS);
  MSET(CURLMOPT_PIPELINING, (long)CURLPIPE_NOTHING);
#undef MSET
  return rc == CURLM_OK ? 0 : -1;
}

static void bare_close(bare_side *s) {
  bare_free_xfers(s);
  if (s->m) curl_multi_cleanup(s->m);
  resil_loop_adapter_free(s->ad);
  memset(s, 0, sizeof *s);
}

/* ---- libresil's engine ---------------------------------------------------- */

static const resil_http_endpoint endpoints[] = {
    {.struct_size = sizeof(resil_http_endpoint), .name = "ka", .method = RESIL_HTTP_GET, .path = "/ka"},
    {.struct_size = sizeof(resil_http_endpoint), .name = "echo", .method = RESIL_HTTP_GET, .path = "/echo"},
};

typedef struct resil_side {
  resil_loop_adapter *ad;
  bench_policies p; /* client, retry, breaker, bulkhead */
  resil_engine *eng;
  resil_engine_policies pol;
  batch *b;
  const char *endpoint;
  int broken;
  char submit_error[300];
} resil_side;

static int resil_submit(resil_side *s);

static void resil_done(void *user, resil_engine_handle *h, resil_outcome o,
                       resil_http_response *r) {
  (void)h;
  resil_side *s = user;
  batch *b = s->b;
  char why[300] = "";
  int ok = resil_outcome_is_success(&o) && r && resil_http_response_status(r) == 200;
  size_t len = 0;
  const char *body = r ? resil_http_response_body(r, &len) : NULL;
  if (!ok) {
    char ob[96];
    resil_outcome_format(&o, ob, sizeof ob);
    const char *e = r ? resil_http_response_error(r) : NULL;
    snprintf(why, sizeof why, "%s%s%s", ob, e ? ": " : "", e ? e : "");
  } else if (b->want_body) {
    b->body_len = len < BODY_CAP ? len : BODY_CAP - 1;
    memcpy(b->body, body, b->body_len);
    b->body[b->body_len] = '\0';
  } else if (!(len == 2 && memcmp(body, "ok", 2) == 0)) {
    ok = 0;
    snprintf(why, sizeof why, "unexpected body");
  } else if (o.attempts > 1) {
    ok = 0;
    snprintf(why, sizeof why, "%u attempts: a retry hid a failure", (unsigned)o.attempts);
  }
  resil_http_response_free(r);
  note_done(b, ok, why);
  if (b->started < b->total && resil_submit(s) != 0) {
    s->broken = 1;
    resil_loop_stop(b->loop);
  }
}

static int resil_submit(resil_side *s) {
  resil_error err;
  s->b->started++;
  if (resil_engine_call(s->eng, s->endpoint, NULL, &s->pol, NULL, resil_done, s, NULL, &err) !=
      RESIL_OK) {
    snprintf(s->submit_error, sizeof s->submit_error, "resil_engine_call: %s", err.msg);
    return -1;
  }
  return 0;
}

static int resil_begin(resil_side *s, batch *b, const char *endpoint) {
  s->b = b;
  s->broken = 0;
  s->endpoint = endpoint;
  for (size_t i = 0; i < b->inflight; i++)
    if (resil_submit(s) != 0) return -1;
  return 0;
}

static void resil_close(resil_side *s) {
  resil_engine_free(s->eng);
  resil_loop_adapter_free(s->ad);
  bench_policies_close(&s->p);
  memset(s, 0, sizeof *s);
}

static int resil_open(resil_side *s, resil_loop *loop, const char *base_url, size_t inflight,
                      char *why, size_t whylen) {
  memset(s, 0, sizeof *s);
  resil_error err;
  memset(&err, 0, sizeof err);
  resil_status st = RESIL_OK;
  const char *what = "resil_loop_adapter_new";
  if ((st = resil_loop_adapter_new(loop, &s->ad)) != RESIL_OK) goto fail;
  /* Slow calls at 60 s, not the HTTP cases' 1 s, and a lease timeout of
   * 60 s, not the client's default 1 s: with 10,000 in flight on 64
   * connections a call waits its turn in the engine's queue for about
   * in-flight / req/s (0.5 s or more on a busy machine), which is not the
   * upstream's slowness. A bulkhead as large as the in-flight count. */
  bench_policies_config pc = {.base_url = base_url,
                              .endpoints = endpoints,
                              .endpoint_count = sizeof endpoints / sizeof endpoints[0],
                              .max_connections = ASYNC_CONNS,
                              .lease_timeout_ns = INT64_C(60000000000),
                              .slow_call_ns = INT64_C(60000000000),
                              .bulkhead_max = (uint32_t)inflight};
  if (bench_policies_open(&s->p, &pc, why, whylen) != 0) {
    resil_close(s);
    return -1;
  }
  what = "resil_engine_new";
  if ((st = bench_policies_engine(&s->p, s->ad, &s->eng, &s->pol, &err)) != RESIL_OK) goto fail;
  return 0;
fail:
  snprintf(why, whylen, "%s: %s (%s)", what, resil_status_name(st), err.msg);
  resil_close(s);
  return -1;
}

/* ---- batches and rounds ---------------------------------------------------- */

typedef struct batch_figures {
  double req_per_s;
  double cpu_ns;       /* per request */
  double mem_per_call; /* bytes per in-flight call */
  size_t failures;
  size_t completed;
} batch_figures;

/* Runs one batch of side i; 0, or -1 with why. */
static int run_batch(int side, bare_side *bare, resil_side *ours, resil_loop *loop,
                     const char *url, const char *endpoint, size_t inflight, size_t total,
                     int want_body, batch *b, batch_figures *f, char *why, size_t whylen) {
  memset(b, 0, sizeof *b);
  b->loop = loop;
  b->inflight = inflight;
  b->total = total;
  b->want_body = want_body;
  b->mem_base = heap_in_use();
  b->mem_peak = b->mem_base;
  int64_t cpu0 = bench_thread_cpu_ns();
  int64_t t0 = bench_now_ns();
  int is_bare = side != SIDE_RESIL;
  if (side == SIDE_WINDOW && b->inflight > ASYNC_CONNS) b->inflight = ASYNC_CONNS;
  int rc = is_bare ? bare_begin(bare, b, url) : resil_begin(ours, b, endpoint);
  size_t m = heap_in_use();
  if (m > b->mem_peak) b->mem_peak = m;
  resil_status st = RESIL_OK;
  if (rc == 0) st = resil_loop_run(loop);
  int64_t t1 = bench_now_ns();
  int64_t cpu1 = bench_thread_cpu_ns();
  if (is_bare) bare_free_xfers(bare);
  if (rc != 0) {
    snprintf(why, whylen, "%s: could not start the batch%s%s", side_key[side],
             side == SIDE_RESIL ? ": " : "", side == SIDE_RESIL ? ours->submit_error : "");
    return -1;
  }
  if (st != RESIL_OK || (is_bare && bare->broken) ||
      (side == SIDE_RESIL && ours->broken) || b->completed != b->total) {
    snprintf(why, whylen, "%s: the batch did not complete (%zu of %zu; loop %s)%s%s",
             side_key[side], b->completed, b->total, resil_status_name(st),
             side == SIDE_RESIL ? " " : "", side == SIDE_RESIL ? ours->submit_error : "");
    return -1;
  }
  f->completed = b->completed;
  f->failures = b->failures;
  f->req_per_s = (double)b->completed * 1e9 / (double)(t1 - t0);
  f->cpu_ns = (double)(cpu1 - cpu0) / (double)b->completed;
  f->mem_per_call = (double)(b->mem_peak - b->mem_base) / (double)inflight;
  return 0;
}

static json_t *headers_of_echo(const char *body, size_t len) {
  json_t *doc = json_loadb(body, len, 0, NULL);
  json_t *h = json_incref(json_object_get(doc, "headers"));
  json_decref(doc);
  return h;
}

/* One GET /echo per side, the request headers nginx saw compared. */
static int same_on_the_wire(bare_side *bare, resil_side *ours, resil_loop *loop,
                            const char *base_url, char *why, size_t whylen) {
  char url[256];
  snprintf(url, sizeof url, "%s/echo", base_url);
  json_t *h[2] = {NULL, NULL};
  batch *b = malloc(sizeof *b);
  if (!b) {
    snprintf(why, whylen, "out of memory");
    return -1;
  }
  int rc = 0;
  for (int i = 0; i < 2 && rc == 0; i++) {
    batch_figures f;
    rc = run_batch(i, bare, ours, loop, url, "echo", 1, 1, 1, b, &f, why, whylen);
    if (rc == 0 && f.failures) {
      snprintf(why, whylen, "GET /echo failed on the %s side: %s", side_key[i],
               b->first_failure);
      rc = -1;
    }
    if (rc == 0 && !(h[i] = headers_of_echo(b->body, b->body_len))) {
      snprintf(why, whylen, "GET /echo on the %s side: no JSON headers", side_key[i]);
      rc = -1;
    }
  }
  if (rc == 0 && !json_equal(h[0], h[1])) {
    char *a = json_dumps(h[0], JSON_SORT_KEYS | JSON_COMPACT);
    char *c = json_dumps(h[1], JSON_SORT_KEYS | JSON_COMPACT);
    snprintf(why, whylen, "request headers differ: libcurl_multi %s, libresil %s", a ? a : "?",
             c ? c : "?");
    free(a);
    free(c);
    rc = -1;
  }
  json_decref(h[0]);
  json_decref(h[1]);
  free(b);
  return rc;
}

static void set_side(json_t *o, const char *key, int side, json_t *v) {
  char k[96];
  snprintf(k, sizeof k, "%s_%s", key, side_key[side]);
  json_object_set_new(o, k, v);
}

static void run_case(const bench_opts *opts, const char *name, const char *measures,
                     size_t inflight, const char *base_url, json_t *entries) {
  json_t *o = case_stub(name, measures);
  char why[1000] = "";
  char url[256];
  snprintf(url, sizeof url, "%s/ka", base_url);
  double load0 = bench_loadavg1();
  resil_loop *loop = NULL;
  bare_side bare;
  resil_side ours;
  int have_bare = 0, have_ours = 0;
  memset(&bare, 0, sizeof bare);
  memset(&ours, 0, sizeof ours);
  batch *b = malloc(sizeof *b);
  int rounds = opts->runs < ASYNC_MAX_ROUNDS ? opts->runs : ASYNC_MAX_ROUNDS;
  if (rounds < 2) rounds = 2;
  size_t total = ASYNC_BATCH_FACTOR * inflight;
  double rps[NSIDES][ASYNC_MAX_ROUNDS], cpu[NSIDES][ASYNC_MAX_ROUNDS],
      mem[NSIDES][ASYNC_MAX_ROUNDS], ratio[ASYNC_MAX_ROUNDS], ratio_capped[ASYNC_MAX_ROUNDS];
  size_t failures[NSIDES] = {0, 0, 0}, requests[NSIDES] = {0, 0, 0};
  char first_failure[NSIDES][300] = {"", "", ""};
  int done_rounds = 0;
  long conns_opened = -1;
  if (!b) snprintf(why, sizeof why, "out of memory");
  if (!why[0] && resil_loop_new(NULL, &loop) != RESIL_OK)
    snprintf(why, sizeof why, "resil_loop_new failed");
  if (!why[0]) {
    have_bare = 1;
    if (bare_open(&bare, loop) != 0) snprintf(why, sizeof why, "curl_multi_init/setopt failed");
  }
  if (!why[0]) have_ours = resil_open(&ours, loop, base_url, inflight, why, sizeof why) == 0;
  if (!why[0]) same_on_the_wire(&bare, &ours, loop, base_url, why, sizeof why);
  /* Warm-up: one batch per side opens the connections. */
  for (int i = 0; i < NSIDES && !why[0]; i++) {
    batch_figures f;
    if (run_batch(i, &bare, &ours, loop, url, "ka", inflight, total, 0, b, &f, why,
                  sizeof why) == 0 &&
        f.failures)
      snprintf(why, sizeof why, "warm-up: %zu of %zu requests failed on the %s side (first: %s)",
               f.failures, f.completed, side_key[i], b->first_failure);
  }
  for (int r = 0; r < rounds && !why[0]; r++) {
    batch_figures f[NSIDES];
    for (int k = 0; k < NSIDES && !why[0]; k++) {
      int i = orders[r % 6][k];
      if (run_batch(i, &bare, &ours, loop, url, "ka", inflight, total, 0, b, &f[i], why,
                    sizeof why) != 0)
        break;
      failures[i] += f[i].failures;
      requests[i] += f[i].completed;
      if (f[i].failures && !first_failure[i][0])
        snprintf(first_failure[i], sizeof first_failure[i], "%s", b->first_failure);
    }
    if (why[0]) break;
    for (int i = 0; i < NSIDES; i++) {
      rps[i][r] = f[i].req_per_s;
      cpu[i][r] = f[i].cpu_ns;
      mem[i][r] = f[i].mem_per_call;
    }
    ratio[r] = f[SIDE_RESIL].req_per_s / f[SIDE_MULTI].req_per_s;
    ratio_capped[r] = f[SIDE_RESIL].req_per_s / f[SIDE_WINDOW].req_per_s;
    done_rounds = r + 1;
  }
  if (have_ours) {
    resil_http_stats hs;
    if (resil_http_client_get_stats(ours.p.client, &hs) == RESIL_OK)
      conns_opened = (long)hs.connections_opened;
  }
  double load1 = bench_loadavg1();
  json_object_set_new(o, "inflight", json_integer((json_int_t)inflight));
  json_object_set_new(o, "requests_per_batch", json_integer((json_int_t)total));
  json_object_set_new(o, "max_connections", json_integer(ASYNC_CONNS));
  json_object_set_new(o, "rounds", json_integer(done_rounds));
  json_object_set_new(o, "loadavg_start", json_real(load0));
  json_object_set_new(o, "loadavg_end", json_real(load1));
  if (conns_opened >= 0)
    json_object_set_new(o, "libresil_connections_opened", json_integer(conns_opened));
  double med_rps[NSIDES] = {NAN, NAN, NAN}, med_cpu[NSIDES] = {NAN, NAN, NAN},
         med_mem[NSIDES] = {NAN, NAN, NAN};
  for (int i = 0; i < NSIDES; i++) {
    set_side(o, "requests", i, json_integer((json_int_t)requests[i]));
    set_side(o, "failures", i, json_integer((json_int_t)failures[i]));
    if (!done_rounds) continue;
    med_rps[i] = median(rps[i], done_rounds);
    med_cpu[i] = median(cpu[i], done_rounds);
    med_mem[i] = median(mem[i], done_rounds);
    set_side(o, "req_per_s", i, json_real(med_rps[i]));
    set_side(o, "cpu_us_per_req", i, json_real(med_cpu[i] / 1e3));
    if (i != SIDE_WINDOW) set_side(o, "bytes_per_inflight", i, json_real(med_mem[i]));
    json_t *a = json_array();
    for (int r = 0; r < done_rounds; r++) json_array_append_new(a, json_real(rps[i][r]));
    set_side(o, "rounds_req_per_s", i, a);
  }
  if (!why[0] && (failures[0] || failures[1] || failures[2]))
    snprintf(why, sizeof why,
             "requests failed: libcurl_multi %zu of %zu, libresil %zu of %zu, "
             "libcurl_multi_window %zu of %zu%s%.150s%s%.150s%s%.150s",
             failures[0], requests[0], failures[1], requests[1], failures[2], requests[2],
             first_failure[0][0] ? "; libcurl_multi's first: " : "", first_failure[0],
             first_failure[1][0] ? "; libresil's first: " : "", first_failure[1],
             first_failure[2][0] ? "; libcurl_multi_window's first: " : "", first_failure[2]);
  if (!why[0] && resil_breaker_state(ours.p.br) != RESIL_BREAKER_CLOSED)
    snprintf(why, sizeof why, "breaker left CLOSED");
  if (!why[0] && done_rounds) {
    double rat = median(ratio, done_rounds);
    double rat_capped = median(ratio_capped, done_rounds);
    json_object_set_new(o, "ratio", json_real(rat));
    json_object_set_new(o, "ratio_capped", json_real(rat_capped));
    json_object_set_new(o, "cpu_ratio_capped",
                        json_real(med_cpu[SIDE_RESIL] / med_cpu[SIDE_WINDOW]));
    json_object_set_new(o, "cpu_ratio", json_real(med_cpu[SIDE_RESIL] / med_cpu[SIDE_MULTI]));
    json_object_set_new(o, "mem_ratio", json_real(med_mem[SIDE_RESIL] / med_mem[SIDE_MULTI]));
    printf("  %-26s req/s multi %8.0f  libresil %8.0f  ratio %.3f  CPU/req %.1f / %.1f us  "
           "bytes/in-flight %.0f / %.0f  [%zu in flight, %d conns, %d rounds, load %.2f..%.2f]\n",
           name, med_rps[0], med_rps[1], rat, med_cpu[0] / 1e3, med_cpu[1] / 1e3, med_mem[0],
           med_mem[1], inflight, ASYNC_CONNS, done_rounds, load0, load1);
    printf("  %-26s bare multi handing libcurl <= %d transfers at a time (the rest queued "
           "by the caller): %.0f req/s, CPU/req %.1f us; libresil / it: ratio %.3f "
           "(not a target)\n",
           "", ASYNC_CONNS, med_rps[SIDE_WINDOW], med_cpu[SIDE_WINDOW] / 1e3, rat_capped);
  } else {
    json_object_set_new(o, "error", json_string(why));
    printf("  %-26s INVALID: %s\n", name, why);
  }
  fflush(stdout);
  json_array_append_new(entries, o);
  if (have_ours) resil_close(&ours);
  if (have_bare) bare_close(&bare);
  resil_loop_free(loop);
  free(b);
}

int bench_run_async_cases(const bench_opts *opts, const char *json_path) {
  if (!bench_selected(opts, CASE_1K) && !bench_selected(opts, CASE_10K)) return 0;
  json_t *entries = json_array();
  char method[1400];
  snprintf(method, sizeof method,
           "async cases: nginx on 127.0.0.1 (scripts/nginx-start.sh, 1 worker), GET /ka -> "
           "200 \"ok\"; libcurl %s; one resil_loop on the client's one thread, one adapter "
           "for the engine, one for the bare multi; libresil = resil_engine_call with {retry, breaker, bulkhead}, bare = "
           "libcurl multi_socket (SOCKETFUNCTION/TIMERFUNCTION on the adapter, "
           "curl_multi_socket_action); %d connections at most on both sides; a batch = "
           "%dx the in-flight count, new requests started at each completion; rounds "
           "run the sides in the 6 orders in turn (a third side, bare multi handing libcurl "
           "at most that many transfers at a time, is reported, not a target); medians "
           "over rounds; memory = peak heap in "
           "use (mallinfo2) minus before, per in-flight call; CPU = thread CPU time per "
           "request",
           curl_version_info(CURLVERSION_NOW)->version, ASYNC_CONNS, ASYNC_BATCH_FACTOR);
  if (!opts->nginx_url) {
    all_cases_with(opts, entries, "skipped",
                   opts->nginx_skipped ? opts->nginx_skipped
                                       : "no nginx (--nginx-url; scripts/bench.sh starts one)");
    return bench_append_cases(json_path, entries, "async_method", method);
  }
  if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
    all_cases_with(opts, entries, "error", "curl_global_init failed");
    return bench_append_cases(json_path, entries, "async_method", method);
  }
  printf("  async: nginx %s, libcurl %s\n", opts->nginx_url,
         curl_version_info(CURLVERSION_NOW)->version);
  fflush(stdout);
  if (bench_selected(opts, CASE_1K))
    run_case(opts, CASE_1K, measures_1k, 1000, opts->nginx_url, entries);
  if (bench_selected(opts, CASE_10K))
    run_case(opts, CASE_10K, measures_10k, 10000, opts->nginx_url, entries);
  curl_global_cleanup();
  return bench_append_cases(json_path, entries, "async_method", method);
}

#endif
