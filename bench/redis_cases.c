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
 * error makes the case invalid.
 *
 * redis_engine_decisions, on the same server: the limiter's engine path
 * with 1,000 decisions in flight against bare hiredis async (described
 * where it is defined, below). */
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

/* redis_engine_decisions (below): its description. */
#define CASE_ENGINE "redis_engine_decisions"
#define IN_FLIGHT 1000

static const char engine_measures[] =
    "libresil-redis's engine path: decisions/s with 1,000 in flight on one loop thread, the "
    "limiter's asynchronous decision (resil_ratelimiter_reserve_async, the call the async "
    "engine makes) driven directly on the built-in loop (resil_loop) through a "
    "resil_ratelimiter_loop as the engine lends it, each answer submitting the next (no "
    "HTTP, no engine calls), vs bare hiredis async (redisAsyncCommandArgv, a minimal hiredis "
    "adapter on the same resil_loop) keeping 1,000 EVALSHAs of the same script with the same "
    "arguments in flight on one connection; alternating rounds, same run";

static json_t *engine_stub(void) {
  json_t *o = json_object();
  json_object_set_new(o, "name", json_string(CASE_ENGINE));
  json_object_set_new(o, "kind", json_string("redis"));
  json_object_set_new(o, "measures", json_string(engine_measures));
  json_object_set_new(o, "in_flight", json_integer(IN_FLIGHT));
  return o;
}

static int append_with(const char *json_path, const char *name, const char *key,
                       const char *why) {
  json_t *o = !strcmp(name, CASE_NAME) ? case_stub() : engine_stub();
  json_object_set_new(o, key, json_string(why));
  printf("  %-26s %s: %s\n", name, !strcmp(key, "skipped") ? "SKIPPED" : "INVALID", why);
  fflush(stdout);
  json_t *entries = json_array();
  json_array_append_new(entries, o);
  return bench_append_cases(json_path, entries, NULL, NULL);
}

#ifndef RESIL_BENCH_REDIS

int bench_run_redis_cases(const bench_opts *opts, const char *json_path) {
  static const char why[] = "libresil-redis is not built (hiredis not found: scripts/deps.sh)";
  int acq = bench_selected(opts, CASE_NAME), eng = bench_selected(opts, CASE_ENGINE);
  if (!acq && !eng) return 0;
  printf("\n== rate limiter on Redis\n");
  int rc = acq ? append_with(json_path, CASE_NAME, "skipped", why) : 0;
  return rc == 0 && eng ? append_with(json_path, CASE_ENGINE, "skipped", why) : rc;
}

#else

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>

#include <hiredis/hiredis.h>

#include "fixture/redis_server.h"
#include "redis/redis_int.h" /* the script, for the bare side (as the tests) */
#include "resil/redis.h"

/* ---- the bench's redis-server ------------------------------------------- */

/* The server: src/fixture/redis_server.h (the tests' and the lab's too). */
typedef resil_fx_redis srv;

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

/* Starts it and waits for its PING (5 s at most): 0, or -1 with why. */
static int srv_start(srv *s, char *why, size_t n) {
  memset(s, 0, sizeof *s);
  return resil_fx_redis_start(s, NULL, why, n);
}

static void srv_stop(srv *s) { resil_fx_redis_done(s); }

/* What both cases record of a run: the load before and after, the rounds
 * and their size, the limiter's Redis errors and connects; a run whose
 * limiter met Redis errors gets why (when it has none yet). */
static void put_run(json_t *o, double load0, double load1, int done, uint64_t per_round,
                    const resil_redis_ratelimiter_metrics *m, char *why, size_t n) {
  json_object_set_new(o, "loadavg_start", json_real(load0));
  json_object_set_new(o, "loadavg_end", json_real(load1));
  json_object_set_new(o, "rounds", json_integer(done));
  json_object_set_new(o, "decisions_per_round", json_integer((json_int_t)per_round));
  json_object_set_new(o, "redis_errors", json_integer((json_int_t)m->redis_errors));
  json_object_set_new(o, "connects", json_integer((json_int_t)m->connects));
  if (!why[0] && m->redis_errors)
    snprintf(why, n, "%llu Redis errors on the limiter's side",
             (unsigned long long)m->redis_errors);
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

/* redis_ratelimiter_acquire, on the server s. */
static int run_acquire(const bench_opts *opts, const srv *sp, const char *json_path) {
  const srv s = *sp;
  char why[512] = "";
  double load0 = bench_loadavg1();
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
      int64_t c0 = bench_thread_cpu_ns(), t0 = bench_now_ns();
      int rc = side == 0 ? ours_run(rl, per_round, why, sizeof why)
                         : bare_run(&b, per_round, why, sizeof why);
      int64_t t1 = bench_now_ns(), c1 = bench_thread_cpu_ns();
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
  double load1 = bench_loadavg1();
  put_run(o, load0, load1, done, per_round, &m, why, sizeof why);
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
  json_t *entries = json_array();
  json_array_append_new(entries, o);
  return bench_append_cases(json_path, entries, "redis_method",
                            "alternating rounds (the order swapped every round), the same "
                            "number of decisions per side and round, calibrated to about "
                            "half of --min-run-ms per side; medians over the rounds; one "
                            "connection each to the bench's own redis-server on 127.0.0.1");
}

/* ---- redis_engine_decisions ----------------------------------------------
 *
 * The engine path's throughput: 1,000 decisions in flight on one loop
 * thread, each answer submitting the next, until the round's decisions are
 * all answered; against bare hiredis async keeping 1,000 EVALSHAs of the
 * same script with the same arguments in flight on one connection. Both
 * sides run on one built-in loop (resil_loop, epoll): ours through a
 * resil_ratelimiter_loop filled here as the engine fills its own (the
 * adapter's watch, timers multiplexed on the adapter's one timer, the
 * ends run at teardown), theirs through a minimal hiredis adapter on a
 * second adapter of the same loop (hiredis ships none for resil_loop; it
 * only maps addRead/delRead/addWrite/delWrite to the adapter's watch). The
 * other side's connection is idle during a round (nothing to read, nothing
 * to write), so it costs the loop nothing. Measured per round and side:
 * wall time from the first submission to the last answer (ramp and drain
 * included, the same on both sides), the loop thread's CPU, and the
 * redis-server's CPU (/proc/PID/stat: both sides share its one core, the
 * bottleneck when it is near 1). */

#include <hiredis/async.h>

#include "resil/loop.h"

/* A resil_ratelimiter_loop on the built-in loop. */
#define BL_TIMERS 4
#define BL_ENDS 4

typedef struct bl_timer {
  resil_loop_fn cb;
  void *arg;
  int64_t at; /* INT64_MAX: not armed */
  int used;
} bl_timer;

typedef struct bloop {
  resil_loop_adapter *ad;
  resil_ratelimiter_loop rll;
  bl_timer t[BL_TIMERS];
  resil_loop_fn end_fn[BL_ENDS];
  void *end_arg[BL_ENDS];
  int nends;
  int64_t armed_at; /* the adapter's timer; INT64_MAX: not armed */
} bloop;

static int64_t bl_now(void *self) {
  bloop *b = self;
  return b->ad->now_ns ? b->ad->now_ns(b->ad->self) : bench_now_ns();
}

static void bl_fire(void *arg);

static void bl_rearm(bloop *b) {
  int64_t at = INT64_MAX;
  for (int i = 0; i < BL_TIMERS; i++)
    if (b->t[i].used && b->t[i].at < at) at = b->t[i].at;
  if (at == b->armed_at) return;
  b->armed_at = at;
  int64_t d = at == INT64_MAX ? -1 : at - bl_now(b);
  (void)b->ad->timer(b->ad->self, at == INT64_MAX ? -1 : d < 0 ? 0 : d, bl_fire, b);
}

static void bl_fire(void *arg) {
  bloop *b = arg;
  b->armed_at = INT64_MAX;
  int64_t now = bl_now(b);
  for (int i = 0; i < BL_TIMERS; i++) {
    if (b->t[i].used && b->t[i].at <= now) {
      b->t[i].at = INT64_MAX;
      b->t[i].cb(b->t[i].arg);
    }
  }
  bl_rearm(b);
}

static int bl_watch(void *self, int fd, unsigned events, resil_io_fn cb, void *arg) {
  bloop *b = self;
  return b->ad->watch(b->ad->self, fd, events, cb, arg);
}

static void *bl_timer_new(void *self, resil_loop_fn cb, void *arg) {
  bloop *b = self;
  for (int i = 0; i < BL_TIMERS; i++) {
    if (b->t[i].used) continue;
    b->t[i] = (bl_timer){cb, arg, INT64_MAX, 1};
    return &b->t[i];
  }
  return NULL;
}

static int bl_timer_arm(void *self, void *timer, int64_t at_ns) {
  ((bl_timer *)timer)->at = at_ns;
  bl_rearm(self);
  return 0;
}

static void bl_timer_disarm(void *self, void *timer) {
  ((bl_timer *)timer)->at = INT64_MAX;
  bl_rearm(self);
}

static void bl_timer_free(void *self, void *timer) {
  if (!timer) return;
  ((bl_timer *)timer)->used = 0;
  bl_timer_disarm(self, timer);
}

static int bl_on_end(void *self, resil_loop_fn end, void *arg) {
  bloop *b = self;
  if (b->nends == BL_ENDS) return -1;
  b->end_fn[b->nends] = end;
  b->end_arg[b->nends++] = arg;
  return 0;
}

static void bl_init(bloop *b, resil_loop_adapter *ad) {
  memset(b, 0, sizeof *b);
  b->ad = ad;
  b->armed_at = INT64_MAX;
  b->rll.struct_size = sizeof b->rll;
  b->rll.self = b;
  b->rll.now_ns = bl_now;
  b->rll.watch = bl_watch;
  b->rll.timer_new = bl_timer_new;
  b->rll.timer_arm = bl_timer_arm;
  b->rll.timer_disarm = bl_timer_disarm;
  b->rll.timer_free = bl_timer_free;
  b->rll.on_end = bl_on_end;
}

/* The loop's owner ends: what the backend kept for it goes. */
static void bl_end(bloop *b) {
  for (int i = b->nends - 1; i >= 0; i--) b->end_fn[i](b->end_arg[i]);
  b->nends = 0;
}

/* One side's round: want decisions, IN_FLIGHT at a time. */
typedef struct erun {
  resil_loop *loop;
  uint64_t want, sent, answered;
  int inflight;
  char *why;
  size_t wn;
} erun;

/* ours */
typedef struct eslot {
  resil_ratelimiter_async q;
  struct eours *o;
} eslot;

typedef struct eours {
  erun run;
  resil_ratelimiter *rl;
  bloop *bl;
  eslot slots[IN_FLIGHT];
} eours;

static void ours_submit(eours *o, eslot *s);

static void ours_done(resil_ratelimiter_async *q, resil_decision d, int64_t wait_ns,
                      resil_reason why) {
  eslot *s = q->arg;
  eours *o = s->o;
  (void)wait_ns;
  o->run.inflight--;
  if (d != RESIL_DECISION_GO) {
    if (!o->run.why[0])
      snprintf(o->run.why, o->run.wn, "the limiter refused a decision: %s",
               resil_reason_name(why));
    return;
  }
  o->run.answered++;
  if (!o->run.why[0] && o->run.sent < o->run.want) ours_submit(o, s);
}

static void ours_submit(eours *o, eslot *s) {
  resil_decision d = RESIL_DECISION_DENY;
  int64_t w = 0;
  resil_reason why = RESIL_REASON_OK;
  o->run.sent++;
  if (resil_ratelimiter_reserve_async(o->rl, &o->bl->rll, &s->q, 1, NULL, &d, &w, &why) == 1) {
    o->run.inflight++;
    return;
  }
  if (!o->run.why[0])
    snprintf(o->run.why, o->run.wn, "a decision was answered at once, not by Redis (%s)",
             resil_reason_name(why));
}

/* bare hiredis async on the loop */
typedef struct hev {
  resil_loop_adapter *ad;
  redisAsyncContext *ac;
  int fd;
  unsigned ev;
} hev;

static void h_io(void *arg, int fd, unsigned events) {
  hev *h = arg;
  (void)fd;
  if (h->ac && (events & (RESIL_IO_READ | RESIL_IO_ERROR))) redisAsyncHandleRead(h->ac);
  if (h->ac && (events & RESIL_IO_WRITE)) redisAsyncHandleWrite(h->ac);
}

static void h_set(hev *h, unsigned ev) {
  if (ev == h->ev) return;
  h->ev = ev;
  (void)h->ad->watch(h->ad->self, h->fd, ev, h_io, h);
}

static void h_add_read(void *p) { h_set(p, ((hev *)p)->ev | RESIL_IO_READ); }
static void h_del_read(void *p) { h_set(p, ((hev *)p)->ev & ~RESIL_IO_READ); }
static void h_add_write(void *p) { h_set(p, ((hev *)p)->ev | RESIL_IO_WRITE); }
static void h_del_write(void *p) { h_set(p, ((hev *)p)->ev & ~RESIL_IO_WRITE); }
static void h_cleanup(void *p) {
  hev *h = p;
  h_set(h, 0);
  h->ac = NULL;
}

typedef struct ebare {
  erun run;
  hev h;
  char sha[48];
  const char *argv[9];
  size_t lens[9];
} ebare;

static void bare_submit(ebare *b);

static void bare_cb(redisAsyncContext *c, void *reply, void *priv) {
  ebare *b = priv;
  redisReply *r = reply;
  (void)c;
  b->run.inflight--;
  int ok = r && r->type == REDIS_REPLY_ARRAY && r->elements >= 2 &&
           r->element[0]->type == REDIS_REPLY_INTEGER && r->element[0]->integer == 1;
  if (!ok) {
    if (!b->run.why[0])
      snprintf(b->run.why, b->run.wn, "the bare async EVALSHA failed: %s",
               !r ? "no reply (disconnected)"
                  : r->type == REDIS_REPLY_ERROR ? r->str : "unexpected reply");
    return;
  }
  b->run.answered++;
  if (!b->run.why[0] && b->run.sent < b->run.want) bare_submit(b);
}

static void bare_submit(ebare *b) {
  b->run.sent++;
  if (b->h.ac && redisAsyncCommandArgv(b->h.ac, bare_cb, b, 9, b->argv, b->lens) == REDIS_OK) {
    b->run.inflight++;
    return;
  }
  if (!b->run.why[0]) snprintf(b->run.why, b->run.wn, "redisAsyncCommandArgv failed");
}

/* The server's CPU so far (user + system), ns; -1 when unreadable. */
static int64_t srv_cpu_ns(pid_t pid) {
  char p[64], buf[1024];
  snprintf(p, sizeof p, "/proc/%d/stat", (int)pid);
  FILE *f = fopen(p, "r");
  if (!f) return -1;
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = '\0';
  const char *q = strrchr(buf, ')'); /* comm may hold spaces */
  unsigned long long ut = 0, st = 0;
  if (!q || sscanf(q + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut, &st) != 2)
    return -1;
  long hz = sysconf(_SC_CLK_TCK);
  return hz > 0 ? (int64_t)((ut + st) * (1000000000ULL / (unsigned long long)hz)) : -1;
}

/* Runs one round of want decisions on side 0 (ours) or 1 (bare): 0, or -1
 * with why (in the run). */
static int engine_round(eours *o, ebare *b, int side, uint64_t want) {
  erun *r = side == 0 ? &o->run : &b->run;
  r->want = want;
  r->sent = r->answered = 0;
  r->inflight = 0;
  for (int i = 0; i < IN_FLIGHT && r->sent < want && !r->why[0]; i++) {
    if (side == 0) ours_submit(o, &o->slots[i]);
    else bare_submit(b);
  }
  while (r->inflight > 0) {
    if (resil_loop_run_once(r->loop, -1, NULL) != RESIL_OK) {
      if (!r->why[0]) snprintf(r->why, r->wn, "resil_loop_run_once failed");
      return -1;
    }
  }
  if (!r->why[0] && r->answered != want)
    snprintf(r->why, r->wn, "%llu decisions answered of %llu", (unsigned long long)r->answered,
             (unsigned long long)want);
  return r->why[0] ? -1 : 0;
}

static int run_engine(const bench_opts *opts, const srv *sp, const char *json_path) {
  char why[512] = "";
  double load0 = bench_loadavg1();
  json_t *o = engine_stub();
  eours *ours = calloc(1, sizeof *ours);
  ebare *eb = calloc(1, sizeof *eb);
  resil_loop *loop = NULL;
  resil_loop_adapter *ad_ours = NULL, *ad_bare = NULL;
  bloop bl;
  memset(&bl, 0, sizeof bl);
  resil_ratelimiter *rl = NULL;
  if (!ours || !eb) snprintf(why, sizeof why, "out of memory");
  if (!why[0] && (resil_loop_new(NULL, &loop) != RESIL_OK ||
                  resil_loop_adapter_new(loop, &ad_ours) != RESIL_OK ||
                  resil_loop_adapter_new(loop, &ad_bare) != RESIL_OK))
    snprintf(why, sizeof why, "resil_loop_new or resil_loop_adapter_new failed");
  char uri[64];
  snprintf(uri, sizeof uri, "redis://127.0.0.1:%d/0", sp->port);
  if (!why[0]) {
    bl_init(&bl, ad_ours);
    resil_redis_ratelimiter_config cfg;
    resil_redis_ratelimiter_config_init(&cfg);
    cfg.uri = uri;
    cfg.name = "bench_eng_ours";
    cfg.limit_for_period = 1000000;
    cfg.refresh_period_ns = PERIOD_NS;
    cfg.burst = 1000000;
    cfg.timeout_ns = 0;               /* fail fast: never reserve */
    cfg.redis_timeout_ns = PERIOD_NS; /* a loaded machine's round trip is not a failure */
    cfg.failure = RESIL_REDIS_FAILURE_CLOSED;
    resil_error err;
    memset(&err, 0, sizeof err);
    if (resil_redis_ratelimiter_new(&cfg, &rl, &err) != RESIL_OK)
      snprintf(why, sizeof why, "resil_redis_ratelimiter_new: %s", err.msg);
  }
  if (!why[0]) {
    ours->rl = rl;
    ours->bl = &bl;
    ours->run = (erun){loop, 0, 0, 0, 0, why, sizeof why};
    for (int i = 0; i < IN_FLIGHT; i++) {
      resil_ratelimiter_async_init(&ours->slots[i].q);
      ours->slots[i].q.done = ours_done;
      ours->slots[i].q.arg = &ours->slots[i];
      ours->slots[i].o = ours;
    }
    eb->run = (erun){loop, 0, 0, 0, 0, why, sizeof why};
    /* The script's SHA (a blocking client, as the other case's bare side). */
    redisContext *c = client(sp->port);
    redisReply *r = c ? redisCommand(c, "SCRIPT LOAD %s", resil__redis_gcra_script) : NULL;
    if (r && r->type == REDIS_REPLY_STRING)
      snprintf(eb->sha, sizeof eb->sha, "%s", r->str);
    else
      snprintf(why, sizeof why, "SCRIPT LOAD failed");
    if (r) freeReplyObject(r);
    if (c) redisFree(c);
  }
  if (!why[0]) {
    /* EVALSHA sha 1 key permits limit period burst max_wait, as the
     * limiter sends them (a key of the same length as its). */
    const char *argv[9] = {"EVALSHA", eb->sha, "1", "resil:rl:bench_eng_bare", "1", LIMIT,
                           PERIOD_US, BURST, "0"};
    for (int i = 0; i < 9; i++) {
      eb->argv[i] = argv[i];
      eb->lens[i] = strlen(argv[i]);
    }
    redisAsyncContext *ac = redisAsyncConnect("127.0.0.1", sp->port);
    if (!ac || ac->err) {
      snprintf(why, sizeof why, "redisAsyncConnect: %s", ac ? ac->errstr : "out of memory");
      if (ac) redisAsyncFree(ac);
    } else {
      int one = 1; /* as the limiter's connection */
      (void)setsockopt(ac->c.fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      eb->h = (hev){ad_bare, ac, ac->c.fd, 0};
      ac->ev.data = &eb->h;
      ac->ev.addRead = h_add_read;
      ac->ev.delRead = h_del_read;
      ac->ev.addWrite = h_add_write;
      ac->ev.delWrite = h_del_write;
      ac->ev.cleanup = h_cleanup;
    }
  }
  /* Warm-up (both connections made, the script loaded on the limiter's)
   * and calibration: a round's decisions per side take about --min-run-ms. */
  uint64_t per_round = 0;
  if (!why[0] && engine_round(ours, eb, 0, 4 * IN_FLIGHT) == 0 &&
      engine_round(ours, eb, 1, 4 * IN_FLIGHT) == 0) {
    int64_t t0 = bench_now_ns();
    if (engine_round(ours, eb, 0, 10 * IN_FLIGHT) == 0) {
      double ns = (double)(bench_now_ns() - t0) / (10.0 * IN_FLIGHT);
      double want = (double)opts->min_run_ns / ns;
      per_round = want < 10.0 * IN_FLIGHT ? 10 * IN_FLIGHT : (uint64_t)want;
    }
  }
  resil_redis_ratelimiter_metrics m0;
  memset(&m0, 0, sizeof m0);
  if (rl) (void)resil_redis_ratelimiter_get_metrics(rl, &m0);
  int rounds = 2 * opts->runs + 1;
  if (rounds > MAX_ROUNDS) rounds = MAX_ROUNDS;
  double rate[2][MAX_ROUNDS], cpu[2][MAX_ROUNDS], busy[2][MAX_ROUNDS], ratio[MAX_ROUNDS];
  int done = 0, busy_known = 1;
  for (int k = 0; k < rounds && !why[0]; k++) {
    for (int j = 0; j < 2 && !why[0]; j++) {
      int side = (k + j) % 2; /* 0 ours, 1 eb; the order swapped every round */
      int64_t s0 = srv_cpu_ns(sp->pid), c0 = bench_thread_cpu_ns(), t0 = bench_now_ns();
      int rc = engine_round(ours, eb, side, per_round);
      int64_t t1 = bench_now_ns(), c1 = bench_thread_cpu_ns(), s1 = srv_cpu_ns(sp->pid);
      if (rc != 0) break;
      rate[side][k] = (double)per_round * 1e9 / (double)(t1 - t0);
      cpu[side][k] = (double)(c1 - c0) / (double)per_round;
      busy[side][k] = (double)(s1 - s0) / (double)(t1 - t0);
      if (s0 < 0 || s1 < 0) busy_known = 0;
    }
    if (why[0]) break;
    ratio[k] = rate[0][k] / rate[1][k];
    done = k + 1;
  }
  resil_redis_ratelimiter_metrics m;
  memset(&m, 0, sizeof m);
  if (rl) (void)resil_redis_ratelimiter_get_metrics(rl, &m);
  double load1 = bench_loadavg1();
  json_object_set_new(o, "method",
                      json_string("alternating rounds (the order swapped every round), the "
                                  "same number of decisions per side and round, calibrated "
                                  "to about --min-run-ms per side, 1,000 in flight from the "
                                  "first submission to the last answer; medians over the "
                                  "rounds; one connection each, one loop thread"));
  put_run(o, load0, load1, done, per_round, &m, why, sizeof why);
  if (done > 0) {
    double mo = median_of(rate[0], done), mb = median_of(rate[1], done);
    double co = median_of(cpu[0], done), cb = median_of(cpu[1], done);
    double bo = median_of(busy[0], done), bb = median_of(busy[1], done);
    uint64_t dec = m.redis_decisions - m0.redis_decisions, wr = m.writes - m0.writes;
    double wpk = dec ? (double)wr * 1000.0 / (double)dec : NAN;
    json_object_set_new(o, "decisions_per_s_libresil", json_real(mo));
    json_object_set_new(o, "decisions_per_s_bare", json_real(mb));
    json_object_set_new(o, "ratio", json_real(mo / mb));
    json_object_set_new(o, "ratio_median_of_rounds", json_real(median_of(ratio, done)));
    json_object_set_new(o, "cpu_ns_per_decision_libresil", json_real(co));
    json_object_set_new(o, "cpu_ns_per_decision_bare", json_real(cb));
    json_object_set_new(o, "cpu_ratio", json_real(co / cb));
    json_object_set_new(o, "server_busy_libresil", busy_known ? json_real(bo) : json_null());
    json_object_set_new(o, "server_busy_bare", busy_known ? json_real(bb) : json_null());
    json_object_set_new(o, "writes_per_1000_libresil", isnan(wpk) ? json_null() : json_real(wpk));
    json_t *a = json_array(), *bj = json_array();
    for (int k = 0; k < done; k++) {
      json_array_append_new(a, json_real(rate[0][k]));
      json_array_append_new(bj, json_real(rate[1][k]));
    }
    json_object_set_new(o, "rounds_decisions_per_s_libresil", a);
    json_object_set_new(o, "rounds_decisions_per_s_bare", bj);
    printf("  %-26s libresil %.0f decisions/s, bare hiredis async %.0f: ratio %.3f (median of "
           "rounds %.3f); loop CPU %.2f / %.2f us per decision; redis-server busy %.2f / %.2f; "
           "%.1f writes per 1000; %d rounds of %llu, load %.2f..%.2f\n",
           CASE_ENGINE, mo, mb, mo / mb, median_of(ratio, done), co / 1e3, cb / 1e3, bo, bb, wpk,
           done, (unsigned long long)per_round, load0, load1);
  }
  if (why[0]) {
    json_object_set_new(o, "error", json_string(why));
    printf("  %-26s INVALID: %s\n", CASE_ENGINE, why);
  }
  fflush(stdout);
  if (eb && eb->h.ac) redisAsyncFree(eb->h.ac); /* nothing pending */
  bl_end(&bl);
  if (rl) resil_ratelimiter_free(rl);
  if (ad_bare) resil_loop_adapter_free(ad_bare);
  if (ad_ours) resil_loop_adapter_free(ad_ours);
  if (loop) resil_loop_free(loop);
  free(ours);
  free(eb);
  json_t *entries = json_array();
  json_array_append_new(entries, o);
  return bench_append_cases(json_path, entries, NULL, NULL);
}

int bench_run_redis_cases(const bench_opts *opts, const char *json_path) {
  int acq = bench_selected(opts, CASE_NAME), eng = bench_selected(opts, CASE_ENGINE);
  if (!acq && !eng) return 0;
  printf("\n== rate limiter on Redis (its own redis-server on 127.0.0.1)\n");
  fflush(stdout);
  char why[512] = "";
  srv s;
  if (srv_start(&s, why, sizeof why) != 0) {
    int rc = acq ? append_with(json_path, CASE_NAME, "skipped", why) : 0;
    return rc == 0 && eng ? append_with(json_path, CASE_ENGINE, "skipped", why) : rc;
  }
  int rc = acq ? run_acquire(opts, &s, json_path) : 0;
  if (rc == 0 && eng) rc = run_engine(opts, &s, json_path);
  srv_stop(&s);
  return rc;
}

#endif
