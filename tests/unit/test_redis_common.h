/* What the Redis tests share: a redis-server of their own (Debian's, on
 * 127.0.0.1, a free port, in a temp dir, no persistence), started and
 * killed by PID (and by the kernel when the test dies: PR_SET_PDEATHSIG),
 * a PING to wait for it, and a bare hiredis client for the
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

#include "test_util.h"

#include "resil/redis.h"

typedef struct redis_srv {
  pid_t pid;
  int port;
  char dir[64];
  char uri[128];
  int stopped; /* SIGSTOPped */
} redis_srv;

/* Every server this process started and has not stopped: the teardown
 * (redis_teardown) kills them when an assertion ended a test early. */
enum { REDIS_SRV_MAX = 8 };
static redis_srv *redis_live[REDIS_SRV_MAX];

static int64_t mono_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static int free_port(void) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a;
  memset(&a, 0, sizeof a);
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t l = sizeof a;
  int port = -1;
  if (fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof a) == 0 &&
      getsockname(fd, (struct sockaddr *)&a, &l) == 0)
    port = ntohs(a.sin_port);
  if (fd >= 0) close(fd);
  return port;
}

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

/* 1 when redis-server is on PATH; otherwise skips the test (fails in CI). */
static int redis_available(void) {
  if (system("command -v redis-server >/dev/null 2>&1") == 0) return 1;
  const char *ci = getenv("CI");
  if (ci && strcmp(ci, "true") == 0)
    fail_msg("redis-server is not installed, and CI=true: scripts/deps.sh installs it");
  print_message("redis-server is not installed: skipping (CI fails instead)\n");
  skip();
  return 0;
}

/* Starts redis-server (extra: more arguments, NULL-terminated list or NULL)
 * and waits for its PING, at most 5 s. */
static void redis_start_on(redis_srv *s, const char *const *extra, int want_port) {
  memset(s, 0, sizeof *s);
  redis_available();
  snprintf(s->dir, sizeof s->dir, "/tmp/resil-redis-XXXXXX");
  assert_non_null(mkdtemp(s->dir));
  s->port = want_port > 0 ? want_port : free_port();
  assert_true(s->port > 0);
  char port[16];
  snprintf(port, sizeof port, "%d", s->port);
  const char *argv[32] = {"redis-server", "--port", port, "--bind", "127.0.0.1",
                          "--save", "", "--appendonly", "no", "--dir", s->dir,
                          "--daemonize", "no", "--loglevel", "warning"};
  int n = 15;
  for (int i = 0; extra && extra[i] && n < 31; i++) argv[n++] = extra[i];
  argv[n] = NULL;
  s->pid = fork();
  assert_true(s->pid >= 0);
  for (int i = 0; s->pid > 0 && i < REDIS_SRV_MAX; i++)
    if (!redis_live[i]) {
      redis_live[i] = s;
      break;
    }
  if (s->pid == 0) {
    /* Killed with the test, whatever ends it (a ctest timeout included):
     * no server outlives its test. */
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    char log[96];
    snprintf(log, sizeof log, "%s/redis.log", s->dir);
    if (!freopen(log, "w", stdout) || !freopen(log, "a", stderr)) _exit(126);
    execvp("redis-server", (char *const *)argv);
    _exit(127);
  }
  snprintf(s->uri, sizeof s->uri, "redis://127.0.0.1:%d/0", s->port);
  int64_t until = mono_ns() + 5 * INT64_C(1000000000);
  while (mono_ns() < until) {
    redisContext *c = redis_client(s);
    if (c) {
      redisReply *r = redisCommand(c, "PING");
      /* With --requirepass a PING is refused (NOAUTH): up all the same. */
      int up = r != NULL;
      if (r) freeReplyObject(r);
      redisFree(c);
      if (up) return;
    }
    struct timespec ts = {0, 10 * 1000 * 1000};
    nanosleep(&ts, NULL);
  }
  fail_msg("redis-server on port %d did not answer PING within 5 s (log in %s)", s->port, s->dir);
}

static void redis_start_with(redis_srv *s, const char *const *extra) {
  redis_start_on(s, extra, 0);
}

static inline void redis_start_port(redis_srv *s, int port) { redis_start_on(s, NULL, port); }

static inline void redis_start(redis_srv *s) { redis_start_with(s, NULL); }

static void redis_stop(redis_srv *s);

/* Kills the server and starts a new one on the same port (an empty one:
 * no data, no scripts), as a restart or a failover does. */
static inline void redis_restart(redis_srv *s) {
  int port = s->port;
  redis_stop(s);
  redis_start_port(s, port);
}

static inline void redis_freeze(redis_srv *s) {
  assert_int_equal(kill(s->pid, SIGSTOP), 0);
  s->stopped = 1;
}

static inline void redis_thaw(redis_srv *s) {
  assert_int_equal(kill(s->pid, SIGCONT), 0);
  s->stopped = 0;
}

/* Kills the server this test started (by its PID) and removes its dir. */
static void redis_stop(redis_srv *s) {
  for (int i = 0; i < REDIS_SRV_MAX; i++)
    if (redis_live[i] == s) redis_live[i] = NULL;
  if (s->pid > 0) {
    kill(s->pid, SIGKILL);
    waitpid(s->pid, NULL, 0);
    s->pid = 0;
  }
  if (s->dir[0]) {
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", s->dir);
    if (system(cmd) != 0) print_message("could not remove %s\n", s->dir);
    s->dir[0] = '\0';
  }
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
