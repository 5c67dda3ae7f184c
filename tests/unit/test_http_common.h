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

#define assert_outcome(o, k, r)                                                \
  do {                                                                         \
    resil_outcome o_ = (o);                                                    \
    char b_[96];                                                               \
    if (o_.kind != (k) || o_.reason != (r))                                    \
      fail_msg("outcome %s, expected %s/%s", resil_outcome_format(&o_, b_, sizeof b_), \
               resil_outcome_kind_name(k), resil_reason_name(r));              \
  } while (0)

#endif
