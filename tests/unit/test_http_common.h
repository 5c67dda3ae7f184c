/* Helpers shared by the libresil-http tests: a fixture upstream per test
 * and a client on it. Included by tests/unit/test_http*.c only. */
#ifndef RESIL_TEST_HTTP_COMMON_H
#define RESIL_TEST_HTTP_COMMON_H

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fixture/fixture.h"
#include "resil/http.h"
#include "resil/retry.h"
#include "test_util.h"

static inline resil_fixture *fx_start(void) {
  resil_fixture *f = NULL;
  char eb[256];
  if (resil_fixture_start(NULL, &f, eb, sizeof eb) != 0) fail_msg("fixture: %s", eb);
  return f;
}

static inline int64_t mono_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static inline void sleep_ms(long ms) {
  struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0) {
  }
}

/* cmocka test state: one fixture per test (fx_setup/fx_teardown). */
typedef struct fx_state {
  resil_fixture *f;
} fx_state;

static inline int fx_setup(void **state) {
  fx_state *s = calloc(1, sizeof *s);
  if (!s) return -1;
  s->f = fx_start();
  *state = s;
  return 0;
}

static inline int fx_teardown(void **state) {
  fx_state *s = *state;
  resil_fixture_stop(s->f);
  free(s);
  return 0;
}

/* A client on the fixture with the given endpoints; cfg_fn may adjust the
 * config first. */
static inline resil_http_client *client_on(resil_fixture *f, const resil_http_endpoint *eps,
                                           size_t n,
                                           void (*cfg_fn)(resil_http_client_config *, void *),
                                           void *u) {
  resil_http_client_config cfg;
  resil_http_client_config_init(&cfg);
  cfg.base_url = resil_fixture_url(f);
  cfg.endpoints = eps;
  cfg.endpoint_count = n;
  if (cfg_fn) cfg_fn(&cfg, u);
  resil_http_client *c = NULL;
  resil_error err;
  resil_status st = resil_http_client_new(&cfg, &c, &err);
  if (st != RESIL_OK) fail_msg("client: %s", err.msg);
  return c;
}

/* One call with params given as name, value pairs (NULL-terminated). */
static inline resil_outcome call_p(resil_http_client *c, const char *ep, resil_http_response **out,
                                   const char *const *kv) {
  resil_http_param ps[8];
  size_t n = 0;
  for (; kv && kv[2 * n] && n < 8; n++) {
    ps[n].name = kv[2 * n];
    ps[n].value = kv[2 * n + 1];
  }
  resil_http_args args;
  resil_http_args_init(&args);
  args.params = ps;
  args.param_count = n;
  return resil_http_call(c, ep, &args, NULL, NULL, out);
}

#define KV(...) ((const char *const[]){__VA_ARGS__, NULL})

/* A retry of at most n attempts without waits. */
static inline resil_retry *retry_n(uint32_t n) {
  resil_retry_config rc;
  resil_retry_config_init(&rc);
  rc.max_attempts = n;
  rc.wait_ns = 0;
  resil_retry *r = NULL;
  assert_status(RESIL_OK, resil_retry_new(&rc, &r, NULL));
  return r;
}

/* ---- a scripted raw HTTP server on 127.0.0.1 ---------------------------------
 * For what the fixture cannot say: a Location to another origin or another
 * protocol, a status answer in a chosen shape, and the request bytes as
 * they reached the socket. Connection i reads one request (headers and a
 * Content-Length body), records it, writes replies[i] (NULL: closes
 * without answering) and closes. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#define RAW_MAX 8
typedef struct raw_server {
  int lfd;
  uint16_t port;
  char url[64];
  pthread_t th;
  const char *replies[RAW_MAX];
  size_t lens[RAW_MAX]; /* 0: strlen(replies[i]) */
  size_t nreplies;
  pthread_mutex_t mu;
  char req[RAW_MAX][4096];
  size_t nreq;
} raw_server;

static inline void *raw_server_main(void *u) {
  raw_server *s = u;
  for (size_t i = 0; i < s->nreplies; i++) {
    int fd = accept(s->lfd, NULL, NULL);
    if (fd < 0) return NULL;
    char buf[4096];
    size_t n = 0;
    for (;;) {
      ssize_t r = read(fd, buf + n, sizeof buf - 1 - n);
      if (r <= 0) break;
      n += (size_t)r;
      buf[n] = '\0';
      char *end = strstr(buf, "\r\n\r\n");
      if (!end) continue;
      char low[4096];
      for (size_t k = 0; k <= n; k++)
        low[k] = (char)((buf[k] >= 'A' && buf[k] <= 'Z') ? buf[k] + 32 : buf[k]);
      const char *cl = strstr(low, "\ncontent-length:");
      size_t hl = (size_t)(end + 4 - buf);
      size_t want = hl + (cl && (size_t)(cl - low) < hl ? strtoul(cl + 16, NULL, 10) : 0);
      if (n >= want || n == sizeof buf - 1) break;
    }
    buf[n] = '\0';
    pthread_mutex_lock(&s->mu);
    memcpy(s->req[s->nreq++], buf, n + 1);
    pthread_mutex_unlock(&s->mu);
    if (s->replies[i]) {
      size_t len = s->lens[i] ? s->lens[i] : strlen(s->replies[i]), off = 0;
      while (off < len) {
        ssize_t w = write(fd, s->replies[i] + off, len - off);
        if (w <= 0) break;
        off += (size_t)w;
      }
    }
    shutdown(fd, SHUT_RDWR);
    close(fd);
  }
  return NULL;
}

/* Starts a server that answers the given replies, one per connection;
 * reply i is lens[i] bytes (lens NULL or lens[i] 0: a C string). */
static inline void raw_start_lens(raw_server *s, const char *const *replies, const size_t *lens,
                                  size_t n) {
  memset(s, 0, sizeof *s);
  assert_true(n <= RAW_MAX);
  for (size_t i = 0; i < n; i++) {
    s->replies[i] = replies[i];
    s->lens[i] = lens ? lens[i] : 0;
  }
  s->nreplies = n;
  pthread_mutex_init(&s->mu, NULL);
  s->lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  assert_true(s->lfd >= 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  assert_int_equal(bind(s->lfd, (struct sockaddr *)&a, sizeof a), 0);
  assert_int_equal(listen(s->lfd, 8), 0);
  socklen_t al = sizeof a;
  getsockname(s->lfd, (struct sockaddr *)&a, &al);
  s->port = ntohs(a.sin_port);
  snprintf(s->url, sizeof s->url, "http://127.0.0.1:%u", (unsigned)s->port);
  pthread_create(&s->th, NULL, raw_server_main, s);
}

static inline void raw_start(raw_server *s, const char *const *replies, size_t n) {
  raw_start_lens(s, replies, NULL, n);
}

/* Stops accepting (a connection never made ends the thread too). The
 * recorded requests stay readable (the mutex is not destroyed: it needs
 * no cleanup). */
static inline void raw_stop(raw_server *s) {
  shutdown(s->lfd, SHUT_RDWR);
  pthread_join(s->th, NULL);
  close(s->lfd);
}

/* The request line of request i ("" when none came). */
static inline void raw_request_line(raw_server *s, size_t i, char *out, size_t n) {
  pthread_mutex_lock(&s->mu);
  const char *r = i < s->nreq ? s->req[i] : "";
  size_t l = strcspn(r, "\r\n");
  snprintf(out, n, "%.*s", (int)l, r);
  pthread_mutex_unlock(&s->mu);
}

static inline void raw_use(resil_http_client_config *cfg, void *u) {
  cfg->base_url = ((raw_server *)u)->url;
  cfg->follow_redirects = 1;
}

#define assert_outcome(o, k, r)                                                \
  do {                                                                         \
    resil_outcome o_ = (o);                                                    \
    char b_[96];                                                               \
    if (o_.kind != (k) || o_.reason != (r))                                    \
      fail_msg("outcome %s, expected %s/%s", resil_outcome_format(&o_, b_, sizeof b_), \
               resil_outcome_kind_name(k), resil_reason_name(r));              \
  } while (0)

#endif
