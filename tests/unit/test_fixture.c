/* The fault-injecting fixture upstream: every route driven with real HTTP
 * requests (bare libcurl, raw sockets where the exact bytes on the wire
 * matter), its counters, captures, reset and a fast stop. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include <curl/curl.h>
#include <jansson.h>
#include <zlib.h>

#include "fixture/fixture.h"
#include "fixture/fixture_int.h"
#include "test_util.h"

/* ---- helpers ------------------------------------------------------------ */

typedef struct buf {
  char *p;
  size_t len;
} buf;

static size_t buf_write(char *data, size_t size, size_t n, void *user) {
  buf *b = user;
  size_t add = size * n;
  char *p = realloc(b->p, b->len + add + 1);
  if (!p)
    return 0;
  memcpy(p + b->len, data, add);
  b->p = p;
  b->len += add;
  b->p[b->len] = '\0';
  return add;
}

typedef struct reply {
  CURLcode code;
  long status;
  long local_port;
  buf body;
  char retry_after[128];
  char location[128];
  char content_type[128];
  char replayed[16];
} reply;

static void reply_free(reply *r) { free(r->body.p); }

static int64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void nap_ms(long ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

static void copy_header(CURL *h, const char *name, char *out, size_t outlen) {
  struct curl_header *hd = NULL;
  out[0] = '\0';
  if (curl_easy_header(h, name, 0, CURLH_HEADER, -1, &hd) == CURLHE_OK)
    snprintf(out, outlen, "%s", hd->value);
}

static CURL *easy_new(void) {
  CURL *h = curl_easy_init();
  assert_non_null(h);
  curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, 10000L);
  return h;
}

/* One request on handle h. body may be NULL (no body). */
static void perform(CURL *h, const char *method, const char *url,
                    const char *body, size_t body_len,
                    struct curl_slist *headers, reply *r) {
  memset(r, 0, sizeof *r);
  /* A private copy of the caller's headers plus "Expect:", which stops
   * libcurl from waiting for "100 Continue" before sending a body. */
  struct curl_slist *hl = NULL;
  for (struct curl_slist *p = headers; p; p = p->next)
    hl = curl_slist_append(hl, p->data);
  hl = curl_slist_append(hl, "Expect:");
  curl_easy_setopt(h, CURLOPT_URL, url);
  curl_easy_setopt(h, CURLOPT_HTTPHEADER, hl);
  curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, buf_write);
  curl_easy_setopt(h, CURLOPT_WRITEDATA, &r->body);
  if (body) {
    curl_easy_setopt(h, CURLOPT_POSTFIELDS, body);
    curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE, (long)body_len);
  } else if (strcmp(method, "GET") == 0) {
    curl_easy_setopt(h, CURLOPT_HTTPGET, 1L);
  } else {
    curl_easy_setopt(h, CURLOPT_POSTFIELDS, NULL);
    curl_easy_setopt(h, CURLOPT_NOBODY, 0L);
  }
  /* GET and POST follow from the options above; a custom method would also
   * be used for every redirect hop. */
  int plain = strcmp(method, "GET") == 0 || strcmp(method, "POST") == 0;
  curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, plain ? NULL : method);
  r->code = curl_easy_perform(h);
  curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &r->status);
  curl_easy_getinfo(h, CURLINFO_LOCAL_PORT, &r->local_port);
  if (r->code == CURLE_OK) {
    copy_header(h, "Retry-After", r->retry_after, sizeof r->retry_after);
    copy_header(h, "Location", r->location, sizeof r->location);
    copy_header(h, "Content-Type", r->content_type, sizeof r->content_type);
    copy_header(h, "Idempotent-Replayed", r->replayed, sizeof r->replayed);
  }
  curl_easy_setopt(h, CURLOPT_HTTPHEADER, NULL);
  curl_slist_free_all(hl);
  curl_easy_setopt(h, CURLOPT_POSTFIELDS, NULL);
}

/* One request on a fresh handle. */
static void request(resil_fixture *f, const char *method, const char *path,
                    const char *body, struct curl_slist *headers, reply *r) {
  char url[512];
  snprintf(url, sizeof url, "%s%s", resil_fixture_url(f), path);
  CURL *h = easy_new();
  perform(h, method, url, body, body ? strlen(body) : 0, headers, r);
  curl_easy_cleanup(h);
}

static json_t *parse(const reply *r) {
  json_error_t e;
  json_t *j = json_loadb(r->body.p ? r->body.p : "", r->body.len, 0, &e);
  if (!j)
    fail_msg("body is not JSON: %s (%s)", r->body.p, e.text);
  return j;
}

static long long jint(json_t *o, const char *key) {
  json_t *v = json_object_get(o, key);
  if (!json_is_integer(v))
    fail_msg("%s is not an integer", key);
  return (long long)json_integer_value(v);
}

static const char *jstr(json_t *o, const char *key) {
  json_t *v = json_object_get(o, key);
  if (!json_is_string(v))
    fail_msg("%s is not a string", key);
  return json_string_value(v);
}

/* Polls until route's effects reach n (a real server: no injected clock). */
static void wait_effects(resil_fixture *f, const char *route, long n) {
  int64_t end = now_ms() + 5000;
  while (resil_fixture_effects(f, route) < n) {
    if (now_ms() > end)
      fail_msg("%s effects stayed below %ld", route, n);
    nap_ms(2);
  }
}

static int raw_connect(resil_fixture *f) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  assert_true(fd >= 0);
  struct sockaddr_in sa;
  memset(&sa, 0, sizeof sa);
  sa.sin_family = AF_INET;
  sa.sin_port = htons(resil_fixture_port(f));
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  struct timeval tv = {5, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof sa), 0);
  return fd;
}

static void raw_send(int fd, const char *s) {
  size_t n = strlen(s);
  assert_int_equal(send(fd, s, n, MSG_NOSIGNAL), (ssize_t)n);
}

/* Reads until EOF; returns the byte count (-1 on timeout or error). */
static ssize_t raw_read_to_eof(int fd, char *out, size_t outlen) {
  size_t got = 0;
  for (;;) {
    ssize_t n = recv(fd, out + got, outlen - 1 - got, 0);
    if (n == 0)
      break;
    if (n < 0)
      return -1;
    got += (size_t)n;
    if (got == outlen - 1)
      break;
  }
  out[got] = '\0';
  return (ssize_t)got;
}

/* Reads one response whose body is exactly body_len bytes long. */
static void raw_read_response(int fd, char *out, size_t outlen,
                              size_t body_len) {
  size_t got = 0;
  for (;;) {
    out[got] = '\0';
    char *end = strstr(out, "\r\n\r\n");
    if (end && (size_t)(out + got - (end + 4)) >= body_len)
      return;
    ssize_t n = recv(fd, out + got, outlen - 1 - got, 0);
    if (n <= 0)
      fail_msg("connection ended inside a response: %s", out);
    got += (size_t)n;
  }
}

static char *gzip(const char *data, size_t n, size_t *out_len) {
  z_stream zs;
  memset(&zs, 0, sizeof zs);
  assert_int_equal(deflateInit2(&zs, Z_BEST_SPEED, Z_DEFLATED, 16 + MAX_WBITS,
                                8, Z_DEFAULT_STRATEGY),
                   Z_OK);
  size_t cap = deflateBound(&zs, (uLong)n);
  char *out = malloc(cap);
  assert_non_null(out);
  zs.next_in = (Bytef *)(uintptr_t)data;
  zs.avail_in = (uInt)n;
  zs.next_out = (Bytef *)out;
  zs.avail_out = (uInt)cap;
  assert_int_equal(deflate(&zs, Z_FINISH), Z_STREAM_END);
  *out_len = zs.total_out;
  deflateEnd(&zs);
  return out;
}

static int setup(void **state) {
  resil_fixture_config cfg;
  resil_fixture_config_init(&cfg);
  resil_fixture *f = NULL;
  char err[256];
  if (resil_fixture_start(&cfg, &f, err, sizeof err) != 0) {
    fprintf(stderr, "fixture: %s\n", err);
    return -1;
  }
  *state = f;
  return 0;
}

static int teardown(void **state) {
  resil_fixture_stop(*state);
  return 0;
}

/* ---- lifecycle ------------------------------------------------------------
 */

static void config_defaults_are_loopback_random_port_quiet(void **state) {
  (void)state;
  resil_fixture_config cfg;
  memset(&cfg, 0xff, sizeof cfg);
  resil_fixture_config_init(&cfg);
  assert_int_equal(cfg.port, 0);
  assert_string_equal(cfg.bind_addr, "127.0.0.1");
  assert_int_equal(cfg.quiet, 1);
}

static void start_picks_a_port_and_reports_the_url(void **state) {
  resil_fixture *f = *state;
  assert_true(resil_fixture_port(f) > 0);
  char want[64];
  snprintf(want, sizeof want, "http://127.0.0.1:%u",
           (unsigned)resil_fixture_port(f));
  assert_string_equal(resil_fixture_url(f), want);
}

static void start_refuses_non_loopback_and_busy_port(void **state) {
  resil_fixture *f = *state;
  resil_fixture_config cfg;
  resil_fixture_config_init(&cfg);
  resil_fixture *g = (resil_fixture *)(uintptr_t)1;
  char err[256];
  const char *bad[] = {"0.0.0.0", "10.1.2.3", "::1", "example.com", ""};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    cfg.bind_addr = bad[i];
    err[0] = '\0';
    assert_int_equal(resil_fixture_start(&cfg, &g, err, sizeof err), -1);
    assert_ptr_equal(g, (resil_fixture *)(uintptr_t)1);
    assert_non_null(strstr(err, "bind_addr"));
  }
  cfg.bind_addr = "127.0.0.1";
  cfg.port = resil_fixture_port(f);
  assert_int_equal(resil_fixture_start(&cfg, &g, err, sizeof err), -1);
  assert_non_null(strstr(err, "cannot listen"));
  cfg.port = 0;
  cfg.bind_addr = "localhost";
  assert_int_equal(resil_fixture_start(&cfg, &g, NULL, 0), 0);
  assert_string_not_equal(resil_fixture_url(g), resil_fixture_url(f));
  resil_fixture_stop(g);
  resil_fixture_stop(NULL);
}

typedef struct slow_call {
  resil_fixture *f;
  const char *path;
  reply r;
} slow_call;

static void *slow_thread(void *arg) {
  slow_call *c = arg;
  request(c->f, "POST", c->path, "", NULL, &c->r);
  return NULL;
}

static void stop_is_fast_while_a_slow_request_sleeps(void **state) {
  (void)state;
  resil_fixture *f = NULL;
  assert_int_equal(resil_fixture_start(NULL, &f, NULL, 0), 0);
  slow_call c = {f, "/slow?ms=5000", {0}};
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, slow_thread, &c), 0);
  wait_effects(f, "slow", 1);
  int64_t t0 = now_ms();
  resil_fixture_stop(f);
  int64_t took = now_ms() - t0;
  pthread_join(t, NULL);
  if (took > 1000)
    fail_msg("stop took %lld ms", (long long)took);
  /* The interrupted request was dropped, not answered. */
  assert_int_not_equal(c.r.code, CURLE_OK);
  reply_free(&c.r);
}

/* ---- routes ----------------------------------------------------------------
 */

static void items_answers_json_and_captures_headers(void **state) {
  resil_fixture *f = *state;
  reply r;
  struct curl_slist *hl = curl_slist_append(NULL, "X-Token: t0ken");
  hl = curl_slist_append(hl, "X-Multi: a");
  hl = curl_slist_append(hl, "X-Multi: b");
  request(f, "GET", "/items/42", NULL, hl, &r);
  curl_slist_free_all(hl);
  assert_int_equal(r.code, CURLE_OK);
  assert_int_equal(r.status, 200);
  assert_string_equal(r.content_type, "application/json");
  json_t *j = parse(&r);
  assert_int_equal(jint(j, "id"), 42);
  assert_string_equal(jstr(j, "name"), "item-42");
  json_decref(j);
  reply_free(&r);
  assert_int_equal(resil_fixture_attempts(f, "items"), 1);
  assert_int_equal(resil_fixture_effects(f, "items"), 0);

  char v[64];
  assert_int_equal(
      resil_fixture_last_header(f, "items", "x-token", v, sizeof v), 1);
  assert_string_equal(v, "t0ken");
  assert_int_equal(resil_fixture_last_header(f, "items", "X-TOKEN", v, 3), 1);
  assert_string_equal(v, "t0");
  assert_int_equal(
      resil_fixture_last_header(f, "items", "x-multi", v, sizeof v), 1);
  assert_string_equal(v, "a, b");
  assert_int_equal(
      resil_fixture_last_header(f, "items", "x-absent", v, sizeof v), 0);
  assert_string_equal(v, "");
  assert_int_equal(
      resil_fixture_last_header(f, "status", "x-token", v, sizeof v), 0);
  assert_int_equal(resil_fixture_last_header(f, "nope", "x-token", v, sizeof v),
                   0);

  request(f, "GET", "/items/abc", NULL, NULL, &r);
  assert_int_equal(r.status, 404);
  reply_free(&r);
  request(f, "POST", "/items/1", "{}", NULL, &r);
  assert_int_equal(r.status, 405);
  reply_free(&r);
  request(f, "GET", "/items/1?delay_ms=x", NULL, NULL, &r);
  assert_int_equal(r.status, 400);
  reply_free(&r);
  assert_int_equal(resil_fixture_attempts(f, "items"), 4);
}

static void items_delay_sleeps_before_answering(void **state) {
  resil_fixture *f = *state;
  reply r;
  int64_t t0 = now_ms();
  request(f, "GET", "/items/7?delay_ms=120", NULL, NULL, &r);
  int64_t took = now_ms() - t0;
  assert_int_equal(r.status, 200);
  if (took < 120)
    fail_msg("answered after %lld ms", (long long)took);
  reply_free(&r);
}

static void status_route_answers_code_and_retry_after(void **state) {
  resil_fixture *f = *state;
  reply r;
  request(f, "GET", "/status/503?retry_after=1", NULL, NULL, &r);
  assert_int_equal(r.status, 503);
  assert_string_equal(r.retry_after, "1");
  json_t *j = parse(&r);
  assert_int_equal(jint(j, "status"), 503);
  json_decref(j);
  reply_free(&r);

  request(f, "POST",
          "/status/429?retry_after=Wed,%2021%20Oct%202015%2007:28:00%20GMT",
          "x", NULL, &r);
  assert_int_equal(r.status, 429);
  assert_string_equal(r.retry_after, "Wed, 21 Oct 2015 07:28:00 GMT");
  reply_free(&r);

  request(f, "GET", "/status/400", NULL, NULL, &r);
  assert_int_equal(r.status, 400);
  assert_string_equal(r.retry_after, "");
  reply_free(&r);

  request(f, "GET", "/status/204", NULL, NULL, &r);
  assert_int_equal(r.status, 204);
  assert_int_equal(r.body.len, 0);
  reply_free(&r);

  request(f, "GET", "/status/99", NULL, NULL, &r);
  assert_int_equal(r.status, 400);
  reply_free(&r);
  request(f, "GET", "/status/503?retry_after=a%0d%0aX-Evil:%201", NULL, NULL,
          &r);
  assert_int_equal(r.status, 400);
  reply_free(&r);
  assert_int_equal(resil_fixture_attempts(f, "status"), 6);
  assert_int_equal(resil_fixture_effects(f, "status"), 0);
}

static void slow_counts_the_effect_before_sleeping(void **state) {
  resil_fixture *f = *state;
  char url[256];
  snprintf(url, sizeof url, "%s/slow?ms=400", resil_fixture_url(f));
  CURL *h = easy_new();
  curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, 100L);
  reply r;
  perform(h, "POST", url, "{}", 2, NULL, &r);
  curl_easy_cleanup(h);
  assert_int_equal(r.code, CURLE_OPERATION_TIMEDOUT);
  reply_free(&r);
  /* The client gave up, yet the effect already happened. */
  assert_int_equal(resil_fixture_effects(f, "slow"), 1);
  assert_int_equal(resil_fixture_attempts(f, "slow"), 1);

  request(f, "GET", "/slow?ms=5", NULL, NULL, &r);
  assert_int_equal(r.status, 200);
  assert_string_equal(r.body.p, "{\"ok\":true}");
  reply_free(&r);
  assert_int_equal(resil_fixture_effects(f, "slow"), 2);
  request(f, "GET", "/slow?ms=-1", NULL, NULL, &r);
  assert_int_equal(r.status, 400);
  reply_free(&r);
  assert_int_equal(resil_fixture_effects(f, "slow"), 2);
}

static void slow_request_does_not_block_others(void **state) {
  resil_fixture *f = *state;
  slow_call c = {f, "/slow?ms=1500", {0}};
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, slow_thread, &c), 0);
  wait_effects(f, "slow", 1);
  reply r;
  int64_t t0 = now_ms();
  request(f, "GET", "/items/1", NULL, NULL, &r);
  int64_t took = now_ms() - t0;
  assert_int_equal(r.status, 200);
  reply_free(&r);
  if (took > 500)
    fail_msg("blocked for %lld ms", (long long)took);
  pthread_join(t, NULL);
  assert_int_equal(c.r.status, 200);
  reply_free(&c.r);
}

static void effect_route_counts_then_answers(void **state) {
  resil_fixture *f = *state;
  reply r;
  request(f, "POST", "/effect/500", "{}", NULL, &r);
  assert_int_equal(r.status, 500);
  reply_free(&r);
  request(f, "PUT", "/effect/201", "{}", NULL, &r);
  assert_int_equal(r.status, 201);
  reply_free(&r);
  request(f, "POST", "/effect/1000", "{}", NULL, &r);
  assert_int_equal(r.status, 400);
  reply_free(&r);
  assert_int_equal(resil_fixture_effects(f, "effect"), 2);
  assert_int_equal(resil_fixture_attempts(f, "effect"), 3);
}

static void commit_close_counts_and_sends_no_byte(void **state) {
  resil_fixture *f = *state;
  int fd = raw_connect(f);
  raw_send(fd, "POST /commit-close HTTP/1.1\r\nHost: fixture\r\n"
               "Content-Length: 5\r\n\r\nhello");
  char got[256];
  assert_int_equal(raw_read_to_eof(fd, got, sizeof got), 0);
  close(fd);
  assert_int_equal(resil_fixture_effects(f, "commit_close"), 1);
  char body[16];
  assert_int_equal(
      resil_fixture_last_body(f, "commit_close", body, sizeof body), 5);
  assert_string_equal(body, "hello");

  reply r;
  request(f, "POST", "/commit-close", "{}", NULL, &r);
  assert_int_equal(r.code, CURLE_GOT_NOTHING);
  reply_free(&r);
  assert_int_equal(resil_fixture_effects(f, "commit_close"), 2);
  assert_int_equal(resil_fixture_attempts(f, "commit_close"), 2);
}

static void flaky_fails_n_times_per_id_then_succeeds(void **state) {
  resil_fixture *f = *state;
  reply r;
  const char *p = "/flaky/a?fail=2&status=502&retry_after=1";
  for (int i = 1; i <= 2; i++) {
    request(f, "GET", p, NULL, NULL, &r);
    assert_int_equal(r.status, 502);
    assert_string_equal(r.retry_after, "1");
    json_t *j = parse(&r);
    assert_int_equal(jint(j, "attempt"), i);
    json_decref(j);
    reply_free(&r);
  }
  assert_int_equal(resil_fixture_effects(f, "flaky"), 0);
  request(f, "GET", p, NULL, NULL, &r);
  assert_int_equal(r.status, 200);
  assert_string_equal(r.retry_after, "");
  json_t *j = parse(&r);
  assert_string_equal(jstr(j, "id"), "a");
  assert_int_equal(jint(j, "attempt"), 3);
  json_decref(j);
  reply_free(&r);
  assert_int_equal(resil_fixture_effects(f, "flaky"), 1);

  /* Another id has its own count; the defaults are fail=1, status 503. */
  request(f, "GET", "/flaky/b", NULL, NULL, &r);
  assert_int_equal(r.status, 503);
  assert_string_equal(r.retry_after, "");
  reply_free(&r);
  request(f, "GET", "/flaky/b", NULL, NULL, &r);
  assert_int_equal(r.status, 200);
  reply_free(&r);
  assert_int_equal(resil_fixture_effects(f, "flaky"), 2);
  assert_int_equal(resil_fixture_attempts(f, "flaky"), 5);
}

static void seq_answers_scripted_codes_and_repeats_the_last(void **state) {
  resil_fixture *f = *state;
  reply r;
  long want[] = {429, 200, 200};
  for (int i = 0; i < 3; i++) {
    request(f, "POST", "/seq/x?codes=429,200&retry_after=2", "{}", NULL, &r);
    assert_int_equal(r.status, want[i]);
    assert_string_equal(r.retry_after, i == 0 ? "2" : "");
    json_t *j = parse(&r);
    assert_int_equal(jint(j, "attempt"), i + 1);
    assert_int_equal(jint(j, "status"), want[i]);
    json_decref(j);
    reply_free(&r);
  }
  assert_int_equal(resil_fixture_effects(f, "seq"), 2);
  request(f, "POST", "/seq/y?codes=500", "{}", NULL, &r);
  assert_int_equal(r.status, 500);
  reply_free(&r);
  const char *bad[] = {"/seq/z",
                       "/seq/z?codes=",
                       "/seq/z?codes=200,",
                       "/seq/z?codes=200,,500",
                       "/seq/z?codes=abc",
                       "/seq/z?codes=700"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    request(f, "POST", bad[i], "{}", NULL, &r);
    assert_int_equal(r.status, 400);
    reply_free(&r);
  }
  assert_int_equal(resil_fixture_effects(f, "seq"), 2);
  /* Rejected scripts did not advance id z. */
  request(f, "POST", "/seq/z?codes=201", "{}", NULL, &r);
  json_t *j = parse(&r);
  assert_int_equal(jint(j, "attempt"), 1);
  json_decref(j);
  reply_free(&r);
}

static void redirect_hops_down_to_zero(void **state) {
  resil_fixture *f = *state;
  reply r;
  request(f, "GET", "/redirect/2", NULL, NULL, &r);
  assert_int_equal(r.status, 302);
  assert_string_equal(r.location, "/redirect/1");
  reply_free(&r);

  char url[256];
  snprintf(url, sizeof url, "%s/redirect/3", resil_fixture_url(f));
  CURL *h = easy_new();
  curl_easy_setopt(h, CURLOPT_FOLLOWLOCATION, 1L);
  perform(h, "GET", url, NULL, 0, NULL, &r);
  long redirects = 0;
  curl_easy_getinfo(h, CURLINFO_REDIRECT_COUNT, &redirects);
  curl_easy_cleanup(h);
  assert_int_equal(r.status, 200);
  assert_string_equal(r.body.p, "{\"hops_done\":true}");
  assert_int_equal(redirects, 3);
  reply_free(&r);
  assert_int_equal(resil_fixture_attempts(f, "redirect"), 1 + 4);
}

static void echo_reports_request_and_gunzips_body(void **state) {
  resil_fixture *f = *state;
  /* 2049 bytes of JSON, as in experiment H14. */
  char plain[2050];
  memset(plain, 'a', sizeof plain);
  plain[0] = '"';
  plain[2048] = '"';
  plain[2049] = '\0';
  size_t zlen = 0;
  char *z = gzip(plain, 2049, &zlen);
  char url[256];
  snprintf(url, sizeof url, "%s/echo?a=1&b=x%%20y", resil_fixture_url(f));
  struct curl_slist *hl = curl_slist_append(NULL, "Content-Encoding: gzip");
  hl = curl_slist_append(hl, "Content-Type: application/json");
  hl = curl_slist_append(hl, "Authorization: Bearer s3cret");
  CURL *h = easy_new();
  reply r;
  perform(h, "POST", url, z, zlen, hl, &r);
  curl_easy_cleanup(h);
  curl_slist_free_all(hl);
  assert_int_equal(r.status, 200);
  json_t *j = parse(&r);
  assert_string_equal(jstr(j, "method"), "POST");
  assert_string_equal(jstr(j, "path"), "/echo");
  assert_string_equal(jstr(j, "query"), "a=1&b=x%20y");
  assert_string_equal(jstr(j, "content_encoding"), "gzip");
  assert_string_equal(jstr(j, "content_type"), "application/json");
  assert_int_equal(jint(j, "body_len"), 2049);
  assert_int_equal(jint(j, "raw_len"), (long long)zlen);
  json_t *hd = json_object_get(j, "headers");
  assert_string_equal(jstr(hd, "authorization"), "Bearer s3cret");
  assert_string_equal(jstr(hd, "content-encoding"), "gzip");
  json_decref(j);
  reply_free(&r);
  char *body = malloc(4096);
  assert_non_null(body);
  assert_int_equal(resil_fixture_last_body(f, "echo", body, 4096), 2049);
  assert_memory_equal(body, plain, 2050);
  /* A short buffer gets a prefix; the full length is still reported. */
  assert_int_equal(resil_fixture_last_body(f, "echo", body, 4), 2049);
  assert_memory_equal(body, "\"aaa", 4);
  free(body);
  assert_int_equal(resil_fixture_effects(f, "echo"), 1);

  /* A plain body and no content headers. */
  request(f, "PATCH", "/echo", "hi", NULL, &r);
  j = parse(&r);
  assert_string_equal(jstr(j, "method"), "PATCH");
  assert_string_equal(jstr(j, "query"), "");
  assert_true(json_is_null(json_object_get(j, "content_encoding")));
  assert_int_equal(jint(j, "body_len"), 2);
  assert_int_equal(jint(j, "raw_len"), 2);
  json_decref(j);
  reply_free(&r);

  /* Broken gzip and a truncated stream: 400, not counted. */
  hl = curl_slist_append(NULL, "Content-Encoding: gzip");
  request(f, "POST", "/echo", "not gzip", hl, &r);
  assert_int_equal(r.status, 400);
  reply_free(&r);
  h = easy_new();
  perform(h, "POST", url, z, zlen / 2, hl, &r);
  curl_easy_cleanup(h);
  assert_int_equal(r.status, 400);
  reply_free(&r);
  curl_slist_free_all(hl);
  hl = curl_slist_append(NULL, "Content-Encoding: br");
  request(f, "POST", "/echo", "x", hl, &r);
  assert_int_equal(r.status, 415);
  reply_free(&r);
  curl_slist_free_all(hl);
  free(z);
  assert_int_equal(resil_fixture_attempts(f, "echo"), 2);
  assert_int_equal(resil_fixture_effects(f, "echo"), 2);
}

static void oversized_body_answers_413_uncounted(void **state) {
  resil_fixture *f = *state;
  size_t n = RESIL_FX_MAX_BODY + 1;
  char *big = malloc(n);
  assert_non_null(big);
  memset(big, 'x', n);
  char url[256];
  snprintf(url, sizeof url, "%s/echo", resil_fixture_url(f));
  CURL *h = easy_new();
  reply r;
  perform(h, "POST", url, big, n, NULL, &r);
  assert_int_equal(r.status, 413);
  reply_free(&r);
  /* Exactly the limit is accepted, on the same connection. */
  perform(h, "POST", url, big, n - 1, NULL, &r);
  assert_int_equal(r.status, 200);
  reply_free(&r);
  curl_easy_cleanup(h);
  free(big);
  assert_int_equal(resil_fixture_attempts(f, "echo"), 1);
  assert_int_equal(resil_fixture_connections(f), 1);
}

static void empty_and_badjson_routes(void **state) {
  resil_fixture *f = *state;
  reply r;
  request(f, "GET", "/empty", NULL, NULL, &r);
  assert_int_equal(r.code, CURLE_OK);
  assert_int_equal(r.status, 204);
  assert_int_equal(r.body.len, 0);
  reply_free(&r);
  request(f, "GET", "/badjson", NULL, NULL, &r);
  assert_int_equal(r.status, 200);
  assert_string_equal(r.content_type, "application/json");
  assert_string_equal(r.body.p, "{not json");
  reply_free(&r);
  assert_int_equal(resil_fixture_attempts(f, "empty"), 1);
  assert_int_equal(resil_fixture_attempts(f, "badjson"), 1);
}

static void idem_needs_a_key(void **state) {
  resil_fixture *f = *state;
  reply r;
  request(f, "POST", "/idem/pay", "{}", NULL, &r);
  assert_int_equal(r.status, 400);
  json_t *j = parse(&r);
  assert_string_equal(jstr(j, "error"), "missing Idempotency-Key");
  json_decref(j);
  reply_free(&r);
  struct curl_slist *hl = curl_slist_append(NULL, "Idempotency-Key: k");
  request(f, "GET", "/idem/pay", NULL, hl, &r);
  curl_slist_free_all(hl);
  assert_int_equal(r.status, 405);
  reply_free(&r);
  assert_int_equal(resil_fixture_effects(f, "idem"), 0);
  assert_int_equal(resil_fixture_attempts(f, "idem"), 2);
}

static void idem_commits_once_and_replays_byte_for_byte(void **state) {
  resil_fixture *f = *state;
  struct curl_slist *hl = curl_slist_append(NULL, "Idempotency-Key: k1");
  reply r1, r2;
  request(f, "POST", "/idem/pay", "{\"amount\":5}", hl, &r1);
  assert_int_equal(r1.status, 201);
  assert_string_equal(r1.replayed, "");
  assert_string_equal(r1.body.p, "{\"key\":\"k1\",\"effect\":1}");
  request(f, "POST", "/idem/pay", "{\"amount\":5}", hl, &r2);
  assert_int_equal(r2.status, 201);
  assert_string_equal(r2.replayed, "true");
  assert_int_equal(r2.body.len, r1.body.len);
  assert_memory_equal(r2.body.p, r1.body.p, r1.body.len);
  reply_free(&r1);
  reply_free(&r2);
  assert_int_equal(resil_fixture_effects(f, "idem"), 1);

  /* Same key, another body or path: a conflict, not a replay. */
  request(f, "POST", "/idem/pay", "{\"amount\":6}", hl, &r1);
  assert_int_equal(r1.status, 422);
  reply_free(&r1);
  request(f, "POST", "/idem/refund", "{\"amount\":5}", hl, &r1);
  assert_int_equal(r1.status, 422);
  reply_free(&r1);
  curl_slist_free_all(hl);
  assert_int_equal(resil_fixture_effects(f, "idem"), 1);
  assert_int_equal(resil_fixture_attempts(f, "idem"), 4);

  request(f, "GET", "/operations/k1", NULL, NULL, &r1);
  assert_int_equal(r1.status, 200);
  json_t *j = parse(&r1);
  assert_string_equal(jstr(j, "key"), "k1");
  assert_string_equal(jstr(j, "state"), "COMMITTED");
  assert_int_equal(jint(j, "status"), 201);
  assert_string_equal(jstr(j, "body"), "{\"key\":\"k1\",\"effect\":1}");
  assert_int_equal(jint(j, "effects"), 1);
  json_decref(j);
  reply_free(&r1);
  request(f, "GET", "/operations/nope", NULL, NULL, &r1);
  assert_int_equal(r1.status, 404);
  j = parse(&r1);
  assert_string_equal(jstr(j, "state"), "UNKNOWN");
  assert_string_equal(jstr(j, "key"), "nope");
  json_decref(j);
  reply_free(&r1);
  request(f, "POST", "/operations/k1", "", NULL, &r1);
  assert_int_equal(r1.status, 405);
  reply_free(&r1);
  assert_int_equal(resil_fixture_attempts(f, "operations"), 3);
}

static void
idem_lost_response_is_replayed_without_a_second_effect(void **state) {
  resil_fixture *f = *state;
  char url[256];
  snprintf(url, sizeof url, "%s/idem/pay?sleep_ms=500", resil_fixture_url(f));
  struct curl_slist *hl = curl_slist_append(NULL, "Idempotency-Key: k2");
  CURL *h = easy_new();
  curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, 150L);
  reply r;
  perform(h, "POST", url, "{}", 2, hl, &r);
  assert_int_equal(r.code, CURLE_OPERATION_TIMEDOUT);
  reply_free(&r);
  /* The replay does not sleep: it answers from the table at once. */
  int64_t t0 = now_ms();
  perform(h, "POST", url, "{}", 2, hl, &r);
  int64_t took = now_ms() - t0;
  curl_easy_cleanup(h);
  curl_slist_free_all(hl);
  assert_int_equal(r.code, CURLE_OK);
  assert_int_equal(r.status, 201);
  assert_string_equal(r.replayed, "true");
  reply_free(&r);
  if (took >= 150)
    fail_msg("replay took %lld ms", (long long)took);
  assert_int_equal(resil_fixture_attempts(f, "idem"), 2);
  assert_int_equal(resil_fixture_effects(f, "idem"), 1);
}

static void idem_pending_key_answers_409(void **state) {
  resil_fixture *f = *state;
  /* A key left PENDING, as by a crash between the effect and the commit. */
  assert_int_equal(resil_fixture_op_pending(f, "kp", "/idem/pay", "{}"), 0);
  struct curl_slist *hl = curl_slist_append(NULL, "Idempotency-Key: kp");
  reply r;
  request(f, "POST", "/idem/pay", "{}", hl, &r);
  curl_slist_free_all(hl);
  assert_int_equal(r.status, 409);
  assert_string_equal(r.retry_after, "1");
  reply_free(&r);
  request(f, "GET", "/operations/kp", NULL, NULL, &r);
  assert_int_equal(r.status, 200);
  json_t *j = parse(&r);
  assert_string_equal(jstr(j, "state"), "PENDING");
  assert_int_equal(jint(j, "effects"), 0);
  json_decref(j);
  reply_free(&r);
  assert_int_equal(resil_fixture_effects(f, "idem"), 0);
}

static void idem_close_commits_then_drops_the_connection(void **state) {
  resil_fixture *f = *state;
  int fd = raw_connect(f);
  raw_send(fd, "POST /idem-close HTTP/1.1\r\nHost: fixture\r\n"
               "Idempotency-Key: c1\r\nContent-Length: 2\r\n\r\n{}");
  char got[256];
  assert_int_equal(raw_read_to_eof(fd, got, sizeof got), 0);
  close(fd);
  assert_int_equal(resil_fixture_effects(f, "idem_close"), 1);

  reply r;
  request(f, "GET", "/operations/c1", NULL, NULL, &r);
  json_t *j = parse(&r);
  assert_string_equal(jstr(j, "state"), "COMMITTED");
  assert_string_equal(jstr(j, "body"), "{\"key\":\"c1\",\"effect\":1}");
  json_decref(j);
  reply_free(&r);

  struct curl_slist *hl = curl_slist_append(NULL, "Idempotency-Key: c1");
  request(f, "POST", "/idem-close", "{}", hl, &r);
  curl_slist_free_all(hl);
  assert_int_equal(r.status, 201);
  assert_string_equal(r.replayed, "true");
  assert_string_equal(r.body.p, "{\"key\":\"c1\",\"effect\":1}");
  reply_free(&r);
  assert_int_equal(resil_fixture_effects(f, "idem_close"), 1);
  assert_int_equal(resil_fixture_attempts(f, "idem_close"), 2);
}

typedef struct idem_race {
  resil_fixture *f;
  long status;
} idem_race;

static void *idem_race_thread(void *arg) {
  idem_race *c = arg;
  struct curl_slist *hl = curl_slist_append(NULL, "Idempotency-Key: race");
  reply r;
  request(c->f, "POST", "/idem/pay", "{\"n\":1}", hl, &r);
  curl_slist_free_all(hl);
  c->status = r.status;
  reply_free(&r);
  return NULL;
}

static void
idem_concurrent_requests_with_one_key_cause_one_effect(void **state) {
  resil_fixture *f = *state;
  enum { N = 12 };
  idem_race c[N];
  pthread_t t[N];
  for (int i = 0; i < N; i++) {
    c[i].f = f;
    c[i].status = 0;
    assert_int_equal(pthread_create(&t[i], NULL, idem_race_thread, &c[i]), 0);
  }
  for (int i = 0; i < N; i++)
    pthread_join(t[i], NULL);
  for (int i = 0; i < N; i++)
    if (c[i].status != 201 && c[i].status != 409)
      fail_msg("request %d answered %ld", i, c[i].status);
  assert_int_equal(resil_fixture_effects(f, "idem"), 1);
  assert_int_equal(resil_fixture_attempts(f, "idem"), N);
}

static void ka_get_keeps_alive_and_reused_post_is_dropped(void **state) {
  resil_fixture *f = *state;
  int fd = raw_connect(f);
  raw_send(fd, "GET /ka HTTP/1.1\r\nHost: fixture\r\n\r\n");
  char got[2048];
  raw_read_response(fd, got, sizeof got, 2);
  assert_non_null(strstr(got, "HTTP/1.1 200"));
  assert_string_equal(strstr(got, "\r\n\r\n") + 4, "ok");
  /* The second request on this connection: read, acted on, dropped. */
  raw_send(fd, "POST /ka HTTP/1.1\r\nHost: fixture\r\n"
               "Content-Length: 7\r\n\r\npayload");
  assert_int_equal(raw_read_to_eof(fd, got, sizeof got), 0);
  close(fd);
  assert_int_equal(resil_fixture_effects(f, "ka"), 1);
  char body[16];
  assert_int_equal(resil_fixture_last_body(f, "ka", body, sizeof body), 7);
  assert_string_equal(body, "payload");

  /* The same POST first on a fresh connection is answered. */
  fd = raw_connect(f);
  raw_send(fd, "POST /ka HTTP/1.1\r\nHost: fixture\r\n"
               "Content-Length: 7\r\nConnection: close\r\n\r\npayload");
  assert_true(raw_read_to_eof(fd, got, sizeof got) > 0);
  close(fd);
  assert_non_null(strstr(got, "HTTP/1.1 200"));
  assert_non_null(strstr(got, "{\"ok\":true}"));
  assert_int_equal(resil_fixture_effects(f, "ka"), 2);
  assert_int_equal(resil_fixture_attempts(f, "ka"), 3);
  assert_int_equal(resil_fixture_connections(f), 2);
}

/* What experiment H16 guards against, shown with bare libcurl: a POST on a
 * reused connection that the server reads, acts on and drops. If the
 * transport answers 200 it must have re-sent the POST on a new connection,
 * and the fixture then counts two effects for one logical call. */
static void ka_shows_a_silent_resend_as_a_second_effect(void **state) {
  resil_fixture *f = *state;
  char url[256];
  snprintf(url, sizeof url, "%s/ka", resil_fixture_url(f));
  CURL *h = easy_new();
  reply r;
  perform(h, "GET", url, NULL, 0, NULL, &r);
  assert_int_equal(r.status, 200);
  assert_string_equal(r.body.p, "ok");
  reply_free(&r);
  perform(h, "POST", url, "payload", 7, NULL, &r);
  curl_easy_cleanup(h);
  if (r.code == CURLE_OK) {
    assert_int_equal(r.status, 200);
    assert_int_equal(resil_fixture_effects(f, "ka"), 2);
    assert_int_equal(resil_fixture_connections(f), 2);
  } else {
    assert_int_equal(resil_fixture_effects(f, "ka"), 1);
  }
  reply_free(&r);
}

static void connection_reuse_shows_in_peer_port_and_count(void **state) {
  resil_fixture *f = *state;
  char url[256];
  snprintf(url, sizeof url, "%s/items/1", resil_fixture_url(f));
  assert_int_equal(resil_fixture_last_peer_port(f, "items"), 0);
  CURL *h = easy_new();
  reply r;
  perform(h, "GET", url, NULL, 0, NULL, &r);
  long port1 = r.local_port;
  reply_free(&r);
  assert_int_equal(resil_fixture_last_peer_port(f, "items"), (unsigned)port1);
  perform(h, "GET", url, NULL, 0, NULL, &r);
  assert_int_equal(r.local_port, port1);
  reply_free(&r);
  assert_int_equal(resil_fixture_last_peer_port(f, "items"), (unsigned)port1);
  assert_int_equal(resil_fixture_connections(f), 1);
  curl_easy_cleanup(h);

  h = easy_new();
  perform(h, "GET", url, NULL, 0, NULL, &r);
  curl_easy_cleanup(h);
  assert_int_not_equal(r.local_port, port1);
  assert_int_equal(resil_fixture_last_peer_port(f, "items"),
                   (unsigned)r.local_port);
  reply_free(&r);
  assert_int_equal(resil_fixture_connections(f), 2);
  assert_int_equal(resil_fixture_last_peer_port(f, "nope"), 0);
}

static void stats_reports_counters_without_counting_itself(void **state) {
  resil_fixture *f = *state;
  reply r;
  request(f, "POST", "/effect/200", "{}", NULL, &r);
  reply_free(&r);
  request(f, "GET", "/items/3", NULL, NULL, &r);
  reply_free(&r);
  request(f, "GET", "/__stats", NULL, NULL, &r);
  assert_int_equal(r.status, 200);
  json_t *j = parse(&r);
  assert_int_equal(jint(j, "connections"), 3);
  json_t *routes = json_object_get(j, "routes");
  assert_int_equal(json_object_size(routes), RESIL_FX_ROUTE_COUNT_);
  assert_int_equal(jint(json_object_get(routes, "effect"), "attempts"), 1);
  assert_int_equal(jint(json_object_get(routes, "effect"), "effects"), 1);
  assert_int_equal(jint(json_object_get(routes, "items"), "attempts"), 1);
  assert_int_equal(jint(json_object_get(routes, "commit_close"), "effects"), 0);
  json_decref(j);
  reply_free(&r);
  long total = 0;
  const char *names[] = {"items",        "status",     "slow",    "effect",
                         "commit_close", "flaky",      "seq",     "redirect",
                         "echo",         "empty",      "badjson", "idem",
                         "idem_close",   "operations", "ka"};
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
    total += resil_fixture_attempts(f, names[i]);
  assert_int_equal(total, 2);
  request(f, "POST", "/__stats", "", NULL, &r);
  assert_int_equal(r.status, 405);
  reply_free(&r);
}

static void unknown_paths_and_route_keys(void **state) {
  resil_fixture *f = *state;
  reply r;
  const char *paths[] = {"/",          "/nope",   "/items", "/items/",
                         "/items/1/x", "/slow/1", "/ka/"};
  for (size_t i = 0; i < sizeof paths / sizeof paths[0]; i++) {
    request(f, "GET", paths[i], NULL, NULL, &r);
    assert_int_equal(r.status, 404);
    reply_free(&r);
  }
  assert_int_equal(resil_fixture_attempts(f, "items"), 0);
  assert_int_equal(resil_fixture_attempts(f, "slow"), 0);
  assert_int_equal(resil_fixture_attempts(f, "nope"), -1);
  assert_int_equal(resil_fixture_effects(f, "nope"), -1);
  assert_int_equal(resil_fixture_attempts(f, NULL), -1);
  assert_int_equal(resil_fixture_last_body(f, "nope", NULL, 0), -1);
  assert_int_equal(resil_fixture_last_body(f, "items", NULL, 0), -1);
}

static void reset_forgets_counters_captures_and_scripts(void **state) {
  resil_fixture *f = *state;
  reply r;
  struct curl_slist *hl = curl_slist_append(NULL, "Idempotency-Key: kr");
  request(f, "POST", "/idem/pay", "{}", hl, &r);
  reply_free(&r);
  request(f, "GET", "/flaky/r", NULL, NULL, &r);
  assert_int_equal(r.status, 503);
  reply_free(&r);
  request(f, "GET", "/seq/r?codes=429,200", NULL, NULL, &r);
  assert_int_equal(r.status, 429);
  reply_free(&r);
  assert_int_equal(resil_fixture_effects(f, "idem"), 1);

  resil_fixture_reset(f);
  assert_int_equal(resil_fixture_attempts(f, "idem"), 0);
  assert_int_equal(resil_fixture_effects(f, "idem"), 0);
  assert_int_equal(resil_fixture_attempts(f, "flaky"), 0);
  assert_int_equal(resil_fixture_connections(f), 0);
  char v[32];
  assert_int_equal(
      resil_fixture_last_header(f, "idem", "idempotency-key", v, sizeof v), 0);
  assert_int_equal(resil_fixture_last_peer_port(f, "idem"), 0);
  assert_int_equal(resil_fixture_last_body(f, "idem", v, sizeof v), -1);

  /* Scripts start over and the private store is empty. */
  request(f, "GET", "/flaky/r", NULL, NULL, &r);
  assert_int_equal(r.status, 503);
  reply_free(&r);
  request(f, "GET", "/seq/r?codes=429,200", NULL, NULL, &r);
  assert_int_equal(r.status, 429);
  reply_free(&r);
  request(f, "GET", "/operations/kr", NULL, NULL, &r);
  assert_int_equal(r.status, 404);
  reply_free(&r);
  request(f, "POST", "/idem/pay", "{}", hl, &r);
  assert_int_equal(r.status, 201);
  assert_string_equal(r.replayed, "");
  reply_free(&r);
  curl_slist_free_all(hl);
  assert_int_equal(resil_fixture_effects(f, "idem"), 1);
  assert_int_equal(resil_fixture_connections(f), 4);
}

#define FX_TEST(fn) cmocka_unit_test_setup_teardown(fn, setup, teardown)


/* ---- issue 7: hostile input and bounds ------------------------------------ */

#include <poll.h>

/* Starts a fixture with cfg tweaked by the caller. */
static resil_fixture *start_with(const resil_fixture_config *cfg) {
  resil_fixture *f = NULL;
  char err[256];
  if (resil_fixture_start(cfg, &f, err, sizeof err) != 0)
    fail_msg("fixture: %s", err);
  return f;
}

/* Sends text on a fresh connection; the answer's status, body into out. */
static int raw_status(resil_fixture *f, const char *text, char *out, size_t n) {
  int fd = raw_connect(f);
  raw_send(fd, text);
  ssize_t got = raw_read_to_eof(fd, out, n);
  close(fd);
  int status = 0;
  if (got > 0)
    sscanf(out, "HTTP/1.1 %d", &status);
  return status;
}

static void echo_escapes_header_values_that_are_not_utf8(void **state) {
  resil_fixture *f = *state;
  char out[8192];
  int st = raw_status(f,
                      "GET /echo HTTP/1.1\r\nHost: t\r\nConnection: close\r\n"
                      "X-Bin: a\xff\xfe" "b\r\nX-Ok: caf\xc3\xa9\r\n\r\n",
                      out, sizeof out);
  assert_int_equal(st, 200);
  char *body = strstr(out, "\r\n\r\n");
  assert_non_null(body);
  json_t *j = json_loads(body + 4, 0, NULL);
  assert_non_null(j);
  json_t *h = json_object_get(j, "headers");
  assert_string_equal(jstr(h, "x-bin"), "a\\xff\\xfeb");
  assert_string_equal(jstr(h, "x-ok"), "caf\xc3\xa9");
  json_decref(j);
}

static void per_id_state_is_bounded(void **state) {
  (void)state;
  resil_fixture_config cfg;
  resil_fixture_config_init(&cfg);
  assert_int_equal(cfg.max_ids, RESIL_FX_DEFAULT_MAX_IDS);
  cfg.max_ids = 3;
  resil_fixture *f = start_with(&cfg);
  reply r;
  const char *ids[] = {"/flaky/a?fail=0", "/flaky/b?fail=0", "/seq/c?codes=200"};
  for (int i = 0; i < 3; i++) {
    request(f, "GET", ids[i], NULL, NULL, &r);
    assert_int_equal(r.status, 200);
    reply_free(&r);
  }
  /* Known ids go on counting; a new one is refused, not stored. */
  request(f, "GET", "/flaky/a?fail=0", NULL, NULL, &r);
  assert_int_equal(r.status, 200);
  json_t *j = parse(&r);
  assert_int_equal(jint(j, "attempt"), 2);
  json_decref(j);
  reply_free(&r);
  request(f, "GET", "/flaky/d?fail=0", NULL, NULL, &r);
  assert_int_equal(r.status, 503);
  assert_non_null(strstr(r.body.p, "per-id state is full"));
  reply_free(&r);
  /* Operations live in the store, on disk: max_ids does not bound them. */
  struct curl_slist *hs = NULL;
  char kh[64];
  for (int i = 0; i < 4; i++) {
    snprintf(kh, sizeof kh, "Idempotency-Key: k%d", i);
    hs = curl_slist_append(NULL, kh);
    request(f, "POST", "/idem/x", "{}", hs, &r);
    assert_int_equal(r.status, 201);
    curl_slist_free_all(hs);
    reply_free(&r);
  }
  assert_int_equal(resil_fixture_effects(f, "idem"), 4);
  resil_fixture_reset(f);
  request(f, "GET", "/flaky/d?fail=0", NULL, NULL, &r);
  assert_int_equal(r.status, 200);
  reply_free(&r);
  resil_fixture_stop(f);
}

static void encoded_nul_and_two_keys_are_refused(void **state) {
  resil_fixture *f = *state;
  char out[4096];
  struct curl_slist *hs = curl_slist_append(NULL, "Idempotency-Key: k");
  reply r;
  request(f, "POST", "/idem/x", "{}", hs, &r);
  assert_int_equal(r.status, 201);
  reply_free(&r);
  curl_slist_free_all(hs);
  assert_int_equal(raw_status(f,
                              "GET /operations/k%00x HTTP/1.1\r\nHost: t\r\n"
                              "Connection: close\r\n\r\n",
                              out, sizeof out),
                   400);
  assert_null(strstr(out, "COMMITTED"));
  assert_int_equal(raw_status(f,
                              "POST /idem/x HTTP/1.1\r\nHost: t\r\nConnection: close\r\n"
                              "Idempotency-Key: a\r\nIdempotency-Key: b\r\n"
                              "Content-Length: 2\r\n\r\n{}",
                              out, sizeof out),
                   400);
  assert_non_null(strstr(out, "more than one Idempotency-Key"));
  assert_int_equal(resil_fixture_effects(f, "idem"), 1);
  /* %00 in the query is only data. */
  assert_int_equal(raw_status(f,
                              "GET /items/1?x=%00 HTTP/1.1\r\nHost: t\r\n"
                              "Connection: close\r\n\r\n",
                              out, sizeof out),
                   200);
}

/* 64 idle half-requests against connection_limit 32 and a 1 s timeout. */
static void idle_half_requests_are_bounded_and_timed_out(void **state) {
  (void)state;
  resil_fixture_config cfg;
  resil_fixture_config_init(&cfg);
  assert_int_equal(cfg.connection_timeout_s, RESIL_FX_DEFAULT_CONNECTION_TIMEOUT_S);
  assert_true(cfg.connection_timeout_s <= 30);
  assert_int_equal(cfg.connection_limit, RESIL_FX_DEFAULT_CONNECTION_LIMIT);
  cfg.connection_timeout_s = 1;
  cfg.connection_limit = 32;
  resil_fixture *f = start_with(&cfg);
  enum { N = 64 };
  int fds[N], done[N];
  for (int i = 0; i < N; i++) {
    fds[i] = raw_connect(f);
    done[i] = 0;
    raw_send(fds[i], "GET /items/1 HTTP/1.1\r\nHost: t\r\n");
  }
  int64_t start = now_ms();
  int closed = 0, early = 0;
  while (closed < N && now_ms() - start < 8000) {
    struct pollfd p[N];
    for (int i = 0; i < N; i++)
      p[i] = (struct pollfd){done[i] ? -1 : fds[i], POLLIN, 0};
    if (poll(p, N, 100) < 0)
      break;
    for (int i = 0; i < N; i++) {
      if (done[i] || !(p[i].revents & (POLLIN | POLLHUP | POLLERR)))
        continue;
      char c;
      if (recv(fds[i], &c, 1, MSG_DONTWAIT) <= 0) {
        done[i] = 1;
        closed++;
        if (now_ms() - start < 700)
          early++;
      }
    }
  }
  for (int i = 0; i < N; i++)
    close(fds[i]);
  if (early < N - 32)
    fail_msg("only %d connections past the limit were closed at once", early);
  if (closed != N)
    fail_msg("%d idle connections still open", N - closed);
  /* A closed connection's slot is free once its thread has ended, a moment
   * after the client sees the close: try for up to 3 s. */
  reply r;
  for (int64_t end = now_ms() + 3000;;) {
    request(f, "GET", "/items/7", NULL, NULL, &r);
    if (r.status == 200 || now_ms() > end)
      break;
    reply_free(&r);
    nap_ms(20);
  }
  assert_int_equal(r.status, 200);
  reply_free(&r);
  /* Bad bounds are refused. */
  resil_fixture *g = NULL;
  char err[256];
  cfg.connection_timeout_s = 0;
  assert_int_equal(resil_fixture_start(&cfg, &g, err, sizeof err), -1);
  assert_non_null(strstr(err, "connection_timeout_s"));
  resil_fixture_stop(f);
}

/* Waits up to limit_ms for fd to be closed by the server (EOF or an
 * error); returns the time it took, or -1 when still open. */
static int64_t closed_within(int fd, int64_t limit_ms) {
  int64_t t0 = now_ms();
  for (;;) {
    int64_t left = t0 + limit_ms - now_ms();
    if (left <= 0)
      return -1;
    struct pollfd p = {fd, POLLIN, 0};
    if (poll(&p, 1, (int)left) <= 0)
      continue;
    char b[512];
    ssize_t r = recv(fd, b, sizeof b, MSG_DONTWAIT);
    if (r <= 0)
      return now_ms() - t0;
  }
}

/* header_timeout_s closes a connection that has not sent its headers,
 * while one that sent a whole request keeps the idle timeout. */
static void header_timeout_closes_held_half_requests_only(void **state) {
  (void)state;
  resil_fixture_config cfg;
  resil_fixture_config_init(&cfg);
  assert_int_equal(cfg.header_timeout_s, RESIL_FX_DEFAULT_HEADER_TIMEOUT_S);
  assert_int_equal(cfg.connection_limit, 1024);
  cfg.header_timeout_s = 1;
  cfg.connection_timeout_s = 30;
  resil_fixture *f = start_with(&cfg);
  int held = raw_connect(f), served = raw_connect(f);
  raw_send(held, "GET /items/1 HTTP/1.1\r\nHost: t\r\n");
  raw_send(served, "GET /items/1 HTTP/1.1\r\nHost: t\r\n\r\n");
  char b[512];
  struct pollfd p = {served, POLLIN, 0};
  assert_int_equal(poll(&p, 1, 5000), 1);
  assert_true(recv(served, b, sizeof b, 0) > 0); /* the answer, kept alive */
  int64_t t = closed_within(held, 5000);
  print_message("held half-request closed after %lld ms\n", (long long)t);
  assert_true(t >= 0);
  /* The served connection outlives the header timeout. */
  assert_int_equal(closed_within(served, 1500), -1);
  close(held);
  close(served);
  resil_fixture *g = NULL;
  char err[256];
  cfg.header_timeout_s = 0;
  assert_int_equal(resil_fixture_start(&cfg, &g, err, sizeof err), -1);
  assert_non_null(strstr(err, "header_timeout_s"));
  resil_fixture_stop(f);
}

/* ---- issue 22: one bad or slow instance among fixtures with the same URLs */

/* force_status answers every counted request with that status, counted as
 * an attempt, no effect; uncounted paths answer as usual. */
static void force_status_answers_every_route_and_counts_no_effect(void **state) {
  (void)state;
  resil_fixture_config cfg;
  resil_fixture_config_init(&cfg);
  assert_int_equal(cfg.force_status, 0);
  assert_int_equal(cfg.delay_all_ms, 0);
  cfg.force_status = 503;
  resil_fixture *f = start_with(&cfg);
  reply r;
  request(f, "GET", "/items/1", NULL, NULL, &r);
  assert_int_equal(r.status, 503);
  json_t *j = parse(&r);
  assert_int_equal(jint(j, "status"), 503);
  assert_true(json_is_true(json_object_get(j, "forced")));
  json_decref(j);
  reply_free(&r);
  request(f, "POST", "/effect/200", "{}", NULL, &r);
  assert_int_equal(r.status, 503);
  reply_free(&r);
  request(f, "GET", "/nowhere", NULL, NULL, &r);
  assert_int_equal(r.status, 404);
  reply_free(&r);
  request(f, "GET", "/__stats", NULL, NULL, &r);
  assert_int_equal(r.status, 200);
  reply_free(&r);
  assert_int_equal(resil_fixture_attempts(f, "items"), 1);
  assert_int_equal(resil_fixture_attempts(f, "effect"), 1);
  assert_int_equal(resil_fixture_effects(f, "effect"), 0);
  resil_fixture_stop(f);
  /* Out of range: refused at start. */
  cfg.force_status = 99;
  char err[256] = "";
  f = NULL;
  assert_int_equal(resil_fixture_start(&cfg, &f, err, sizeof err), -1);
  assert_null(f);
  assert_non_null(strstr(err, "force_status"));
}

/* resil_fixture_set_force_status switches the forced status while the
 * fixture serves: on, off again (the route runs), out of range refused. */
static void force_status_changes_at_run_time(void **state) {
  (void)state;
  resil_fixture *f = start_with(NULL);
  reply r;
  request(f, "GET", "/items/1", NULL, NULL, &r);
  assert_int_equal(r.status, 200);
  reply_free(&r);
  assert_int_equal(resil_fixture_set_force_status(f, 503), 0);
  request(f, "GET", "/items/1", NULL, NULL, &r);
  assert_int_equal(r.status, 503);
  json_t *j = parse(&r);
  assert_true(json_is_true(json_object_get(j, "forced")));
  json_decref(j);
  reply_free(&r);
  assert_int_equal(resil_fixture_set_force_status(f, 99), -1);
  assert_int_equal(resil_fixture_set_force_status(f, 600), -1);
  assert_int_equal(resil_fixture_set_force_status(NULL, 0), -1);
  request(f, "GET", "/items/1", NULL, NULL, &r);
  assert_int_equal(r.status, 503); /* unchanged by the refused calls */
  reply_free(&r);
  assert_int_equal(resil_fixture_set_force_status(f, 0), 0);
  request(f, "GET", "/items/1", NULL, NULL, &r);
  assert_int_equal(r.status, 200);
  reply_free(&r);
  assert_int_equal(resil_fixture_attempts(f, "items"), 4);
  resil_fixture_stop(f);
}

/* delay_all_ms delays every counted request, the route's own delay on top;
 * a stop interrupts it (the request is dropped, not answered). */
static void delay_all_delays_every_route(void **state) {
  (void)state;
  resil_fixture_config cfg;
  resil_fixture_config_init(&cfg);
  cfg.delay_all_ms = 100;
  resil_fixture *f = start_with(&cfg);
  reply r;
  int64_t t0 = now_ms();
  request(f, "GET", "/items/1", NULL, NULL, &r);
  int64_t took = now_ms() - t0;
  assert_int_equal(r.status, 200);
  reply_free(&r);
  if (took < 100) fail_msg("items answered after %lld ms", (long long)took);
  t0 = now_ms();
  request(f, "POST", "/slow?ms=50", "{}", NULL, &r);
  took = now_ms() - t0;
  assert_int_equal(r.status, 200);
  reply_free(&r);
  if (took < 150) fail_msg("slow answered after %lld ms", (long long)took);
  assert_int_equal(resil_fixture_effects(f, "slow"), 1);
  resil_fixture_stop(f);
  /* A stop interrupts the sleep: the request is dropped, not answered. */
  cfg.delay_all_ms = 5000;
  f = start_with(&cfg);
  slow_call sc = {f, "/effect/200", {0}};
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, slow_thread, &sc), 0);
  int64_t end = now_ms() + 5000;
  while (resil_fixture_attempts(f, "effect") < 1 && now_ms() < end) nap_ms(5);
  assert_int_equal(resil_fixture_attempts(f, "effect"), 1);
  t0 = now_ms();
  resil_fixture_stop(f);
  took = now_ms() - t0;
  pthread_join(t, NULL);
  if (took > 1000) fail_msg("stop took %lld ms", (long long)took);
  assert_int_not_equal(sc.r.code, CURLE_OK);
  reply_free(&sc.r);
  cfg.delay_all_ms = 600001;
  char err[256] = "";
  f = NULL;
  assert_int_equal(resil_fixture_start(&cfg, &f, err, sizeof err), -1);
  assert_non_null(strstr(err, "delay_all_ms"));
}

int main(void) {
  if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK)
    return 1;
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(config_defaults_are_loopback_random_port_quiet),
      FX_TEST(start_picks_a_port_and_reports_the_url),
      FX_TEST(start_refuses_non_loopback_and_busy_port),
      cmocka_unit_test(stop_is_fast_while_a_slow_request_sleeps),
      FX_TEST(items_answers_json_and_captures_headers),
      FX_TEST(items_delay_sleeps_before_answering),
      FX_TEST(status_route_answers_code_and_retry_after),
      FX_TEST(slow_counts_the_effect_before_sleeping),
      FX_TEST(slow_request_does_not_block_others),
      FX_TEST(effect_route_counts_then_answers),
      FX_TEST(commit_close_counts_and_sends_no_byte),
      FX_TEST(flaky_fails_n_times_per_id_then_succeeds),
      FX_TEST(seq_answers_scripted_codes_and_repeats_the_last),
      FX_TEST(redirect_hops_down_to_zero),
      FX_TEST(echo_reports_request_and_gunzips_body),
      FX_TEST(oversized_body_answers_413_uncounted),
      FX_TEST(empty_and_badjson_routes),
      FX_TEST(idem_needs_a_key),
      FX_TEST(idem_commits_once_and_replays_byte_for_byte),
      FX_TEST(idem_lost_response_is_replayed_without_a_second_effect),
      FX_TEST(idem_pending_key_answers_409),
      FX_TEST(idem_close_commits_then_drops_the_connection),
      FX_TEST(idem_concurrent_requests_with_one_key_cause_one_effect),
      FX_TEST(ka_get_keeps_alive_and_reused_post_is_dropped),
      FX_TEST(ka_shows_a_silent_resend_as_a_second_effect),
      FX_TEST(connection_reuse_shows_in_peer_port_and_count),
      FX_TEST(stats_reports_counters_without_counting_itself),
      FX_TEST(unknown_paths_and_route_keys),
      FX_TEST(reset_forgets_counters_captures_and_scripts),
      FX_TEST(echo_escapes_header_values_that_are_not_utf8),
      cmocka_unit_test(per_id_state_is_bounded),
      FX_TEST(encoded_nul_and_two_keys_are_refused),
      cmocka_unit_test(idle_half_requests_are_bounded_and_timed_out),
      cmocka_unit_test(header_timeout_closes_held_half_requests_only),
      cmocka_unit_test(force_status_answers_every_route_and_counts_no_effect),
      cmocka_unit_test(force_status_changes_at_run_time),
      cmocka_unit_test(delay_all_delays_every_route),
  };
  int rc = cmocka_run_group_tests(tests, NULL, NULL);
  curl_global_cleanup();
  return rc;
}
