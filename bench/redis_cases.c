/* The rate limiter on Redis (libresil-redis, issue 21's "Benchmark"):
 * redis_ratelimiter_acquire, one blocking decision of
 * resil_ratelimiter_acquire on a limiter whose permits live in Redis (one
 * EVALSHA round trip on one of its connections, fail fast), against its
 * reference: a bare hiredis client (blocking redisCommandArgv) sending
 * EVALSHA of the same GCRA script with the same arguments on another key
 * of the same rate, same run. The rounds alternate the two sides (the
 * order swapped every round), each side doing the same number of
 * decisions per round (calibrated on the limiter to about half of
 * --min-run-ms); the case reports each side's median ns per decision over
 * the rounds, the ratio of rates (bare ns / ours: >= 0.9 is the target,
 * BENCH_REDIS_MIN_RATIO), the median of per-round ratios, the caller's CPU
 * per decision on both sides (CLOCK_THREAD_CPUTIME_ID), and the load
 * average at its start and end.
 *
 * The redis-server is the bench's own: Debian's /usr/bin/redis-server (or
 * the first on PATH), on 127.0.0.1, a free port, a temporary directory,
 * --save "" --appendonly no; killed by PID (and by the kernel when the
 * bench dies: PR_SET_PDEATHSIG). Without libresil-redis or redis-server
 * the case is reported as skipped, with the reason. Every decision on both
 * sides must be granted (a limit and a burst of 10^6 per second): a refusal or an
 * error makes the case invalid. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bench.h"

#define CASE_NAME "redis_ratelimiter_acquire"
#define MAX_ROUNDS 31

static const char measures[] =
    "one blocking decision of resil_ratelimiter_acquire on libresil-redis's limiter (GCRA, "
    "one EVALSHA round trip to a redis-server on 127.0.0.1, fail fast) vs a bare hiredis "
    "EVALSHA of the same script with the same arguments, alternating rounds, same run";

static json_t *case_stub(void) {
  json_t *o = json_object();
  json_object_set_new(o, "name", json_string(CASE_NAME));
  json_object_set_new(o, "kind", json_string("redis"));
  json_object_set_new(o, "measures", json_string(measures));
  return o;
}

static int append_with(const char *json_path, const char *key, const char *why) {
  json_t *o = case_stub();
  json_object_set_new(o, key, json_string(why));
  printf("  %-26s %s: %s\n", CASE_NAME, !strcmp(key, "skipped") ? "SKIPPED" : "INVALID", why);
  fflush(stdout);
  json_t *entries = json_array();
  json_array_append_new(entries, o);
  return bench_append_cases(json_path, entries, NULL, NULL);
}

#ifndef RESIL_BENCH_REDIS

int bench_run_redis_cases(const bench_opts *opts, const char *json_path) {
  if (!bench_selected(opts, CASE_NAME)) return 0;
  printf("\n== rate limiter on Redis\n");
  return append_with(json_path, "skipped",
                     "libresil-redis is not built (hiredis not found: scripts/deps.sh)");
}

#else

#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>

#include <hiredis/hiredis.h>

#include "redis/redis_int.h" /* the script, for the bare side (as the tests) */
#include "resil/redis.h"

static int64_t thread_cpu_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static double loadavg1(void) {
  double l[3];
  return getloadavg(l, 3) >= 1 ? l[0] : NAN;
}

/* ---- the bench's redis-server ------------------------------------------- */

typedef struct srv {
  pid_t pid;
  int port;
  char dir[96];
  char log[160];
} srv;

static int find_server(char *out, size_t n) {
  if (access("/usr/bin/redis-server", X_OK) == 0) {
    snprintf(out, n, "/usr/bin/redis-server");
    return 1;
  }
  const char *path = getenv("PATH");
  while (path && *path) {
    const char *colon = strchr(path, ':');
    size_t len = colon ? (size_t)(colon - path) : strlen(path);
    if (len > 0 && len < n - 16) {
      snprintf(out, n, "%.*s/redis-server", (int)len, path);
      if (access(out, X_OK) == 0) return 1;
    }
    if (!colon) break;
    path = colon + 1;
  }
  return 0;
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

static redisContext *client(int port) {
  struct timeval tv = {1, 0};
  redisContext *c = redisConnectWithTimeout("127.0.0.1", port, tv);
  if (!c || c->err) {
    if (c) redisFree(c);
    return NULL;
  }
  redisSetTimeout(c, tv);
  return c;
}

static void srv_stop(srv *s) {
  if (s->pid > 0) {
    kill(s->pid, SIGKILL);
    waitpid(s->pid, NULL, 0);
    s->pid = 0;
  }
  if (s->dir[0]) {
    unlink(s->log);
    rmdir(s->dir);
    s->dir[0] = '\0';
  }
}

/* Starts it and waits for its PING (5 s at most): 0, or -1 with why. */
static int srv_start(srv *s, char *why, size_t n) {
  char bin[256];
  memset(s, 0, sizeof *s);
  if (!find_server(bin, sizeof bin)) {
    snprintf(why, n, "redis-server is not installed (scripts/deps.sh installs it)");
    return -1;
  }
  const char *tmp = getenv("TMPDIR");
  snprintf(s->dir, sizeof s->dir, "%s/resil-bench-redis-XXXXXX",
           tmp && *tmp && strlen(tmp) < 48 ? tmp : "/tmp");
  if (!mkdtemp(s->dir)) {
    snprintf(why, n, "mkdtemp: %s", strerror(errno));
    s->dir[0] = '\0';
    return -1;
  }
  snprintf(s->log, sizeof s->log, "%s/redis.log", s->dir);
  s->port = free_port();
  char port[16];
  snprintf(port, sizeof port, "%d", s->port);
  const char *argv[] = {bin,         "--port",    port,      "--bind",     "127.0.0.1",
                        "--save",    "",          "--appendonly", "no",    "--dir",
                        s->dir,      "--daemonize", "no",    "--loglevel", "warning",
                        "--logfile", s->log,      NULL};
  pid_t parent = getpid();
  s->pid = fork();
  if (s->pid < 0) {
    snprintf(why, n, "fork: %s", strerror(errno));
    s->pid = 0;
    srv_stop(s);
    return -1;
  }
  if (s->pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(126);
    execv(bin, (char *const *)argv);
    _exit(127);
  }
  int64_t until = bench_now_ns() + INT64_C(5000000000);
  while (bench_now_ns() < until) {
    redisContext *c = client(s->port);
    if (c) {
      redisReply *r = redisCommand(c, "PING");
      int up = r && r->type == REDIS_REPLY_STATUS;
      if (r) freeReplyObject(r);
      redisFree(c);
      if (up) return 0;
    }
    struct timespec ts = {0, 10 * 1000 * 1000};
    nanosleep(&ts, NULL);
  }
  snprintf(why, n, "redis-server on port %d did not answer PING within 5 s (log %s)", s->port,
           s->log);
  srv_stop(s);
  return -1;
}

/* ---- the two sides ------------------------------------------------------- */

#define LIMIT "1000000" /* per second, and the burst: far above a loopback round trip's rate */
#define PERIOD_NS INT64_C(1000000000)
#define PERIOD_US "1000000"
#define BURST "1000000"

typedef struct bare {
  redisContext *c;
  char sha[48];
} bare;

/* n decisions of the limiter: 0, or -1 with why. */
static int ours_run(resil_ratelimiter *rl, uint64_t n, char *why, size_t wn) {
  for (uint64_t i = 0; i < n; i++) {
    resil_reason rs = RESIL_REASON_OK;
    if (resil_ratelimiter_acquire(rl, 1, NULL, &rs) != RESIL_DECISION_GO) {
      snprintf(why, wn, "the limiter refused a decision: %s", resil_reason_name(rs));
      return -1;
    }
  }
  return 0;
}

/* n decisions of the bare client: EVALSHA sha 1 key permits limit period
 * burst max_wait, as the limiter sends them. */
static int bare_run(bare *b, uint64_t n, char *why, size_t wn) {
  const char *argv[9] = {"EVALSHA", b->sha, "1", "resil:rl:bench_bare", "1", LIMIT,
                         PERIOD_US, BURST,  "0"};
  size_t lens[9];
  for (int i = 0; i < 9; i++) lens[i] = strlen(argv[i]);
  for (uint64_t i = 0; i < n; i++) {
    redisReply *r = redisCommandArgv(b->c, 9, argv, lens);
    int ok = r && r->type == REDIS_REPLY_ARRAY && r->elements >= 2 &&
             r->element[0]->type == REDIS_REPLY_INTEGER && r->element[0]->integer == 1;
    if (!ok) {
      snprintf(why, wn, "the bare EVALSHA failed: %s",
               !r ? b->c->errstr : r->type == REDIS_REPLY_ERROR ? r->str : "unexpected reply");
      if (r) freeReplyObject(r);
      return -1;
    }
    freeReplyObject(r);
  }
  return 0;
}

static double median_of(double *v, int n) { return bench_median(v, n); }

int bench_run_redis_cases(const bench_opts *opts, const char *json_path) {
  if (!bench_selected(opts, CASE_NAME)) return 0;
  printf("\n== rate limiter on Redis (its own redis-server on 127.0.0.1)\n");
  fflush(stdout);
  char why[512] = "";
  srv s;
  if (srv_start(&s, why, sizeof why) != 0) return append_with(json_path, "skipped", why);
  double load0 = loadavg1();
  resil_ratelimiter *rl = NULL;
  bare b = {NULL, ""};
  json_t *o = case_stub();
  char uri[64];
  snprintf(uri, sizeof uri, "redis://127.0.0.1:%d/0", s.port);
  resil_redis_ratelimiter_config cfg;
  resil_redis_ratelimiter_config_init(&cfg);
  cfg.uri = uri;
  cfg.name = "bench";
  cfg.limit_for_period = 1000000;
  cfg.refresh_period_ns = PERIOD_NS;
  cfg.burst = 1000000;
  cfg.timeout_ns = 0;               /* fail fast: one round trip */
  cfg.redis_timeout_ns = PERIOD_NS; /* a loaded machine's round trip is not a failure */
  cfg.failure = RESIL_REDIS_FAILURE_CLOSED;
  cfg.connections = 1;
  resil_error err;
  memset(&err, 0, sizeof err);
  if (resil_redis_ratelimiter_new(&cfg, &rl, &err) != RESIL_OK)
    snprintf(why, sizeof why, "resil_redis_ratelimiter_new: %s", err.msg);
  if (!why[0] && !(b.c = client(s.port)))
    snprintf(why, sizeof why, "hiredis could not connect to port %d", s.port);
  if (!why[0]) {
    redisReply *r = redisCommand(b.c, "SCRIPT LOAD %s", resil__redis_gcra_script);
    if (r && r->type == REDIS_REPLY_STRING)
      snprintf(b.sha, sizeof b.sha, "%s", r->str);
    else
      snprintf(why, sizeof why, "SCRIPT LOAD failed");
    if (r) freeReplyObject(r);
  }
  /* Warm-up (connections made, script loaded on both) and calibration: a
   * round's decisions per side take about half of --min-run-ms. */
  uint64_t per_round = 0;
  if (!why[0] && ours_run(rl, 200, why, sizeof why) == 0 &&
      bare_run(&b, 200, why, sizeof why) == 0) {
    int64_t t0 = bench_now_ns();
    if (ours_run(rl, 500, why, sizeof why) == 0) {
      double ns = (double)(bench_now_ns() - t0) / 500.0;
      double want = (double)opts->min_run_ns / 2.0 / ns;
      per_round = want < 200.0 ? 200 : (uint64_t)want;
    }
  }
  int rounds = 2 * opts->runs + 1;
  if (rounds > MAX_ROUNDS) rounds = MAX_ROUNDS;
  double ours_ns[MAX_ROUNDS], bare_ns[MAX_ROUNDS], ours_cpu[MAX_ROUNDS], bare_cpu[MAX_ROUNDS],
      ratio[MAX_ROUNDS];
  int done = 0;
  for (int k = 0; k < rounds && !why[0]; k++) {
    for (int j = 0; j < 2 && !why[0]; j++) {
      int side = (k + j) % 2; /* 0 ours, 1 bare; the order swapped every round */
      int64_t c0 = thread_cpu_ns(), t0 = bench_now_ns();
      int rc = side == 0 ? ours_run(rl, per_round, why, sizeof why)
                         : bare_run(&b, per_round, why, sizeof why);
      int64_t t1 = bench_now_ns(), c1 = thread_cpu_ns();
      if (rc != 0) break;
      double ns = (double)(t1 - t0) / (double)per_round;
      double cpu = (double)(c1 - c0) / (double)per_round;
      if (side == 0) {
        ours_ns[k] = ns;
        ours_cpu[k] = cpu;
      } else {
        bare_ns[k] = ns;
        bare_cpu[k] = cpu;
      }
    }
    if (why[0]) break;
    ratio[k] = bare_ns[k] / ours_ns[k];
    done = k + 1;
  }
  resil_redis_ratelimiter_metrics m;
  memset(&m, 0, sizeof m);
  if (rl) (void)resil_redis_ratelimiter_get_metrics(rl, &m);
  double load1 = loadavg1();
  json_object_set_new(o, "loadavg_start", json_real(load0));
  json_object_set_new(o, "loadavg_end", json_real(load1));
  json_object_set_new(o, "rounds", json_integer(done));
  json_object_set_new(o, "decisions_per_round", json_integer((json_int_t)per_round));
  json_object_set_new(o, "redis_errors", json_integer((json_int_t)m.redis_errors));
  json_object_set_new(o, "connects", json_integer((json_int_t)m.connects));
  if (!why[0] && m.redis_errors)
    snprintf(why, sizeof why, "%llu Redis errors on the limiter's side",
             (unsigned long long)m.redis_errors);
  if (done > 0) {
    double mo = median_of(ours_ns, done), mb = median_of(bare_ns, done);
    double co = median_of(ours_cpu, done), cb = median_of(bare_cpu, done);
    json_object_set_new(o, "ns_per_decision_libresil", json_real(mo));
    json_object_set_new(o, "ns_per_decision_bare", json_real(mb));
    json_object_set_new(o, "cpu_ns_per_decision_libresil", json_real(co));
    json_object_set_new(o, "cpu_ns_per_decision_bare", json_real(cb));
    json_object_set_new(o, "ratio", json_real(mb / mo));
    json_object_set_new(o, "ratio_median_of_rounds", json_real(median_of(ratio, done)));
    json_object_set_new(o, "cpu_ratio", json_real(co / cb));
    json_t *a = json_array(), *bb = json_array();
    for (int k = 0; k < done; k++) {
      json_array_append_new(a, json_real(ours_ns[k]));
      json_array_append_new(bb, json_real(bare_ns[k]));
    }
    json_object_set_new(o, "rounds_ns_libresil", a);
    json_object_set_new(o, "rounds_ns_bare", bb);
    printf("  %-26s libresil %.2f us/decision, bare hiredis EVALSHA %.2f us: rate ratio %.3f "
           "(median of rounds %.3f); CPU %.2f / %.2f us; %d rounds of %llu, load %.2f..%.2f\n",
           CASE_NAME, mo / 1e3, mb / 1e3, mb / mo, median_of(ratio, done), co / 1e3, cb / 1e3,
           done, (unsigned long long)per_round, load0, load1);
  }
  if (why[0]) {
    json_object_set_new(o, "error", json_string(why));
    printf("  %-26s INVALID: %s\n", CASE_NAME, why);
  }
  fflush(stdout);
  if (b.c) redisFree(b.c);
  if (rl) resil_ratelimiter_free(rl);
  srv_stop(&s);
  json_t *entries = json_array();
  json_array_append_new(entries, o);
  return bench_append_cases(json_path, entries, "redis_method",
                            "alternating rounds (the order swapped every round), the same "
                            "number of decisions per side and round, calibrated to about "
                            "half of --min-run-ms per side; medians over the rounds; one "
                            "connection each to the bench's own redis-server on 127.0.0.1");
}

#endif
