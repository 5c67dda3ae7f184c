/* What the Redis tests share: a redis-server of their own
 * (src/fixture/redis_server.h: Debian's, on 127.0.0.1, a free port, in a
 * temp dir, no persistence, killed by PID and by the kernel when the test
 * dies), and a bare hiredis client for the
 * commands a test sends itself (SCRIPT FLUSH, SELECT). Header-only.
 *
 * Without redis-server the tests skip with a message, except in CI (CI set
 * to "true"), where they fail: CI installs it (scripts/deps.sh). */
#ifndef RESIL_TEST_REDIS_COMMON_H
#define RESIL_TEST_REDIS_COMMON_H

#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <hiredis/hiredis.h>

#include "fixture/redis_server.h"
#include "test_util.h"

#include "resil/redis.h"

/* The server (src/fixture/redis_server.h), as the tests use it. */
typedef struct redis_srv {
  resil_fx_redis fx;
  int port;       /* fx.port */
  char uri[64];   /* fx.uri */
} redis_srv;

/* Every server this process started and has not stopped: the teardown
 * (redis_teardown) kills them when an assertion ended a test early. */
enum { REDIS_SRV_MAX = 8 };
static redis_srv *redis_live[REDIS_SRV_MAX];

static inline int64_t mono_ns(void) { return resil_fx_redis_now_ns(); }

/* A hiredis client on the test's server, 1 s timeouts; NULL on failure. */
static redisContext *redis_client(const redis_srv *s) {
  struct timeval tv = {1, 0};
  redisContext *c = redisConnectWithTimeout("127.0.0.1", s->port, tv);
  if (!c || c->err) {
    if (c) redisFree(c);
    return NULL;
  }
  redisSetTimeout(c, tv);
  return c;
}

/* Sends one command (printf-style, as redisCommand) and returns 1 when the
 * reply is not an error. */
static inline int redis_do(const redis_srv *s, const char *fmt, const char *arg) {
  redisContext *c = redis_client(s);
  if (!c) return 0;
  redisReply *r = arg ? redisCommand(c, fmt, arg) : redisCommand(c, fmt);
  int ok = r && r->type != REDIS_REPLY_ERROR;
  if (r) freeReplyObject(r);
  redisFree(c);
  return ok;
}

/* 1 when there is a redis-server to run; otherwise skips the test (fails
 * in CI). */
static int redis_available(void) {
  char bin[256];
  if (resil_fx_redis_find(bin, sizeof bin)) return 1;
  const char *ci = getenv("CI");
  if (ci && strcmp(ci, "true") == 0)
    fail_msg("%s, and CI=true: scripts/deps.sh installs redis-server", bin);
  print_message("%s: skipping (CI fails instead)\n", bin);
  skip();
  return 0;
}

static void redis_remember(redis_srv *s) {
  for (int i = 0; i < REDIS_SRV_MAX; i++)
    if (!redis_live[i] || redis_live[i] == s) {
      redis_live[i] = s;
      return;
    }
}

/* Starts the server (extra: more arguments, NULL-terminated, or NULL; the
 * port and dir s already has, when it has them) and waits for its PING. */
static void redis_launch(redis_srv *s, const char *const *extra) {
  redis_available();
  char err[256];
  if (resil_fx_redis_start(&s->fx, extra, err, sizeof err) != 0) fail_msg("%s", err);
  redis_remember(s);
  s->port = s->fx.port;
  snprintf(s->uri, sizeof s->uri, "%s", s->fx.uri);
}

static void redis_start_with(redis_srv *s, const char *const *extra) {
  memset(s, 0, sizeof *s);
  redis_launch(s, extra);
}

static inline void redis_start(redis_srv *s) { redis_start_with(s, NULL); }

/* Kills the server and starts a new one on the same port (an empty one:
 * no data, no scripts), as a restart or a failover does. */
static inline void redis_restart(redis_srv *s) {
  resil_fx_redis_kill(&s->fx);
  redis_launch(s, NULL);
}

static inline void redis_freeze(redis_srv *s) {
  assert_int_equal(resil_fx_redis_signal(&s->fx, SIGSTOP), 0);
}

static inline void redis_thaw(redis_srv *s) {
  assert_int_equal(resil_fx_redis_signal(&s->fx, SIGCONT), 0);
}

/* Kills the server this test started (by its PID) and removes its dir. */
static void redis_stop(redis_srv *s) {
  for (int i = 0; i < REDIS_SRV_MAX; i++)
    if (redis_live[i] == s) redis_live[i] = NULL;
  resil_fx_redis_done(&s->fx);
}

/* cmocka teardown: stops every server a test left running (it failed). */
static inline int redis_teardown(void **state) {
  (void)state;
  for (int i = 0; i < REDIS_SRV_MAX; i++)
    if (redis_live[i]) redis_stop(redis_live[i]);
  return 0;
}

/* A limiter on the test's server: name, limit per period, burst, timeout,
 * failure policy; a Redis timeout of 1 s (these limiters test what Redis
 * decides: a sanitizer build on a loaded machine may take longer than the
 * default 20 ms for a round trip); the rest the defaults. */
static inline resil_ratelimiter *redis_rl(const redis_srv *s, const char *name, int64_t limit,
                                   int64_t period_ns, int64_t burst, int64_t timeout_ns,
                                   resil_redis_failure failure) {
  resil_redis_ratelimiter_config cfg;
  resil_redis_ratelimiter_config_init(&cfg);
  cfg.uri = s->uri;
  cfg.name = name;
  cfg.limit_for_period = limit;
  cfg.refresh_period_ns = period_ns;
  cfg.burst = burst;
  cfg.timeout_ns = timeout_ns;
  cfg.failure = failure;
  cfg.redis_timeout_ns = RESIL_S(1);
  resil_ratelimiter *rl = NULL;
  resil_error err;
  if (resil_redis_ratelimiter_new(&cfg, &rl, &err) != RESIL_OK) fail_msg("%s", err.msg);
  return rl;
}

static inline resil_redis_ratelimiter_metrics redis_metrics(const resil_ratelimiter *rl) {
  resil_redis_ratelimiter_metrics m;
  assert_status(RESIL_OK, resil_redis_ratelimiter_get_metrics(rl, &m));
  return m;
}

#endif
