/* Lab experiments G (issue 21, "Lab"; DESIGN §8.2): a rate limiter whose
 * permits live in Redis (libresil-redis, resil/redis.h), on a redis-server
 * the experiment starts itself: Debian's /usr/bin/redis-server (or the
 * first redis-server on PATH; $RESIL_REDIS_SERVER names another), on
 * 127.0.0.1, a free port, in a temporary directory, no persistence
 * (--save "" --appendonly no); killed by PID
 * (SIGKILL, reaped) at the end, and by the kernel if the lab dies first
 * (PR_SET_PDEATHSIG). Without redis-server every G experiment FAILS
 * saying so (deps.sh installs it). Every wait is bounded: the server's
 * start (5 s), the worker threads (fixed run times), every decision (the
 * limiter's Redis timeout).
 *
 * G1 (engine path): 4 forked processes, each forked before it has any
 *     thread and then making its own upstream (the fixture, on 127.0.0.1),
 *     client, built-in loop, async engine and Redis limiter on one key (200
 *     per second, burst 10, fail fast, decisions pipelined on the loop's
 *     one connection); each keeps 50 calls in flight for 3 s (a call
 *     completed is submitted again). The upstreams together see (requests
 *     their handlers received) at most GCRA's bound over a span holding
 *     every grant (burst + span / T: from the first admitted call's
 *     submission to the last one's completion) and at least 95 % of it.
 *     The decision latency (neither the engine nor the limiter's metrics
 *     expose one per decision: only the Redis round trips' mean and max,
 *     reported too) is each decision of the rate-limiter step, timed by a
 *     backend that forwards to the Redis limiter's own (g1_timed): from
 *     the limiter's call of reserve_async to the Redis backend's answer;
 *     beside it, submission to completion of the refused calls. The processes
 *     are killed by PID past run + drain + 5 s. Wrong variant: a limiter
 *     per process (its own key: about 4 x the bound). The blocking path's
 *     G1 (4 processes x 4 threads) is gone: test_redis_ratelimit_mt's
 *     exact_across_threads and exact_across_processes cover it.
 * G2: Redis frozen (SIGSTOP) for 1 s under load: three limiters (failure
 *     policies open, closed, local; 100 per second, 4 expected instances:
 *     the local share is 25 per second), each asked by 4 threads once a
 *     millisecond, before, during and after the freeze. Every decision
 *     during the freeze ends within the Redis timeout (20 ms) + 5 ms
 *     (+ 15 ms under the sanitizers; the longest of the whole run is
 *     recorded too); during the freeze `open` permits every call, `closed`
 *     refuses every call with "rate limiter unavailable", `local` permits
 *     at most the local share per cycle; each breaker on Redis opens, and
 *     then a decision costs what a local one does (median under 1 ms, no
 *     Redis I/O); after SIGCONT and the breaker's wait, Redis decides
 *     again. Wrong variant: a breaker that never opens (every decision of
 *     the freeze waits the whole Redis timeout).
 * G3: Redis restarted mid-run: the server is killed and a new, empty one
 *     (no keys, no scripts) started on the same port, then SCRIPT FLUSH
 *     on it (what a client behind a proxy sees when the server behind it
 *     is replaced: its connection lives, the script is gone). Two threads
 *     decide once a millisecond on a `closed` limiter (whose breaker waits
 *     100 ms; a Redis timeout of 250 ms, so that a loaded machine's delays
 *     are not taken for failures). The connections are made again (the
 *     script loaded with them), NOSCRIPT reloads it once per connection,
 *     and once Redis decides again no decision fails. Wrong variant: a client that loads
 *     its script only when it starts (EVALSHA of a SHA it never loads
 *     again): every decision after the restart fails.
 * G4: the window edge: a naive fixed-window limiter (INCR of a key named
 *     after the client clock's second, EXPIRE when new: what a first
 *     attempt at a global limit does), 10 per second, lets 10 calls
 *     through 50 ms before a second's edge and 10 more 1 ms after it: 20,
 *     twice the limit, in about 55 ms; the GCRA limiter (10 per second,
 *     burst 10) asked the same way lets through at most burst + span / T
 *     (T = 100 ms). Wrong variant: the naive limiter in GCRA's place. */
#define _DEFAULT_SOURCE /* MAP_ANONYMOUS */
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "fixture/redis_server.h"
#include "lab_families.h"
#include "lab_ops.h"
#include "lab_result.h"

#ifdef RESIL_HAVE_REDIS
#include <hiredis/hiredis.h>

#include "resil/breaker.h"
#include "resil/ratelimit.h"
#include "resil/redis.h"
#if defined(RESIL_HAVE_FIXTURE) && defined(RESIL_HAVE_LOOP)
#include "fixture/fixture.h"
#include "resil/engine.h"
#include "resil/http.h"
#include "resil/loop.h"
#endif

#define G_MS INT64_C(1000000)
#define G_REDIS_TIMEOUT (20 * G_MS)
#ifdef RESIL_SANITIZED
#define G_SLACK (15 * G_MS) /* the sanitizers slow every step down */
#else
#define G_SLACK (5 * G_MS)
#endif

static int64_t mono_ns(void) { return lab_now_ns(); }

static int64_t real_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void sleep_ns(int64_t ns) {
  if (ns <= 0) return;
  struct timespec ts = {(time_t)(ns / 1000000000), (long)(ns % 1000000000)};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

static void sleep_until(int64_t mono) { sleep_ns(mono - mono_ns()); }

/* ---- the experiment's own redis-server ---------------------------------- */

/* The server: src/fixture/redis_server.h (the Redis tests' and bench's
 * too): $RESIL_REDIS_SERVER, /usr/bin/redis-server or PATH; 127.0.0.1, a
 * free port (or the one it had: a restart), a temp dir, no persistence,
 * killed by PID and by the kernel if the lab dies. */
typedef resil_fx_redis g_srv;

/* A hiredis client on the server, 1 s timeouts; NULL on failure. */
static redisContext *g_client(const g_srv *s) {
  struct timeval tv = {1, 0};
  redisContext *c = redisConnectWithTimeout("127.0.0.1", s->port, tv);
  if (!c || c->err) {
    if (c) redisFree(c);
    return NULL;
  }
  redisSetTimeout(c, tv);
  return c;
}

/* One command without arguments; 1 when its reply is not an error. */
static int g_do(const g_srv *s, const char *cmd) {
  redisContext *c = g_client(s);
  if (!c) return 0;
  redisReply *rep = redisCommand(c, cmd);
  int ok = rep && rep->type != REDIS_REPLY_ERROR;
  if (rep) freeReplyObject(rep);
  redisFree(c);
  return ok;
}

static void g_kill(g_srv *s) { resil_fx_redis_kill(s); }

static void g_srv_done(g_srv *s) { resil_fx_redis_done(s); }

/* Starts redis-server on s->port (a free one when 0), in s->dir (made
 * when empty), and waits for its PING, at most 5 s. 0, or -1 (r records
 * why; nothing left running). Without a redis-server the check
 * redis_server_found fails, naming what was looked for. */
static int g_start(lab_result *r, g_srv *s) {
  if (!s->bin[0] && !resil_fx_redis_find(s->bin, sizeof s->bin)) {
    lab_expect(r, "redis_server_found", 0,
               "%s is not an executable redis-server: the G experiments need one "
               "(scripts/deps.sh installs Debian's; RESIL_REDIS_SERVER names another)",
               s->bin);
    s->bin[0] = '\0';
    return -1;
  }
  char why[400];
  return lab_check(r, resil_fx_redis_start(s, NULL, why, sizeof why) == 0, "%s", why) ? 0 : -1;
}

/* SIGSTOP or SIGCONT to the server: 0, or -1 (r records why). */
static int g_signal(lab_result *r, const g_srv *s, int sig) {
  return lab_check(r, s->pid > 0 && kill(s->pid, sig) == 0, "kill(%ld, %d): %s", (long)s->pid,
                   sig, strerror(errno))
             ? 0
             : -1;
}

/* A limiter on the server: 0, or -1 (r records why). */
static int g_limiter(lab_result *r, const resil_redis_ratelimiter_config *cfg,
                     resil_ratelimiter **out) {
  resil_error err;
  memset(&err, 0, sizeof err);
  *out = NULL;
  return lab_check(r, resil_redis_ratelimiter_new(cfg, out, &err) == RESIL_OK,
                   "resil_redis_ratelimiter_new(%s): %s", cfg->name, err.msg)
             ? 0
             : -1;
}

static resil_redis_ratelimiter_metrics g_metrics(const resil_ratelimiter *rl) {
  resil_redis_ratelimiter_metrics m;
  memset(&m, 0, sizeof m);
  (void)resil_redis_ratelimiter_get_metrics(rl, &m);
  return m;
}

static int cmp_i64(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return (x > y) - (x < y);
}

/* ---- G1 (engine path): 4 processes, one limiter in Redis ---------------- */

#if defined(RESIL_HAVE_FIXTURE) && defined(RESIL_HAVE_LOOP)
enum { G1_PROCS = 4, G1_INFLIGHT = 50, G1_LIMIT = 200, G1_BURST = 10, G1_SAMPLES = 150000 };
#define G1_RUN (3000 * G_MS)
#define G1_SETUP (500 * G_MS) /* for the processes to start their fixtures */
#define G1_DRAIN (5000 * G_MS) /* for the calls in flight at the end */

static const resil_http_endpoint g1_endpoints[] = {
    {.struct_size = sizeof(resil_http_endpoint), .name = "item", .path = "/items/{id}"},
};

/* What a worker process reports (a MAP_SHARED mapping). */
typedef struct g1_slot {
  int stage;               /* 1 its engine was made, 2 its run ended, 3 done */
  long upstream;           /* requests its fixture (the upstream) received */
  long ok, refused, odd;   /* completions: 200, RATE_LIMITED, anything else */
  long calls;              /* submissions accepted */
  int64_t first, last;     /* the admitted calls' first submit, last completion */
  uint64_t redis_decisions, redis_errors, writes, connects;
  int64_t rtt_total_ns, rtt_max_ns; /* the limiter's Redis round trips */
  int nstep, nsub;
  int64_t step[G1_SAMPLES]; /* the limiter step's decisions (g1_timed) */
  int64_t sub[G1_SAMPLES];  /* submit to completion of the refused calls */
} g1_slot;

/* The decision latency of the engine's rate-limiter step, from its start
 * to its answer: a backend (ratelimit.h) that forwards every decision to
 * the Redis limiter's own backend (resil_ratelimiter_backend_of) and
 * times it, from the limiter's call of reserve_async (the step asked the
 * limiter, which bounded the wait) to the Redis backend's answer (before
 * the limiter counts it and the engine resumes the call). The engine uses
 * a limiter made on it (resil_ratelimiter_new_backed): the same Redis
 * decisions, pipelined on the same connection; one allocation more per
 * decision (the forwarded request). */
typedef struct g1_timed {
  const resil_ratelimiter_backend *in; /* the Redis limiter's; it outlives this */
  g1_slot *slot;
} g1_timed;

typedef struct g1_treq {
  resil_ratelimiter_request q; /* what the Redis backend is given */
  resil_ratelimiter_request *outer;
  g1_timed *t;
  int64_t t0;
} g1_treq;

static void g1_timed_note(g1_timed *t, int64_t t0) {
  if (t->slot->nstep < G1_SAMPLES) t->slot->step[t->slot->nstep++] = mono_ns() - t0;
}

static resil_decision g1_timed_reserve(void *self, int permits, const resil_ctx *ctx,
                                       int64_t max_wait_ns, int64_t *wait_ns, resil_reason *why) {
  g1_timed *t = self;
  return t->in->reserve(t->in->self, permits, ctx, max_wait_ns, wait_ns, why);
}

static int g1_timed_peek(void *self, int64_t *available, int64_t *nanos_to_wait) {
  g1_timed *t = self;
  return t->in->peek ? t->in->peek(t->in->self, available, nanos_to_wait) : -1;
}

static void g1_timed_free(void *self) { free(self); }

static void g1_timed_answer(resil_ratelimiter_request *q, resil_decision d, int64_t wait_ns,
                            resil_reason why) {
  g1_treq *tq = q->user;
  resil_ratelimiter_request *outer = tq->outer;
  g1_timed_note(tq->t, tq->t0);
  outer->backend = NULL;
  free(tq);
  outer->answer(outer, d, wait_ns, why);
}

static int g1_timed_reserve_async(void *self, const resil_ratelimiter_loop *loop,
                                  resil_ratelimiter_request *q, resil_decision *d,
                                  int64_t *wait_ns, resil_reason *why) {
  g1_timed *t = self;
  g1_treq *tq = calloc(1, sizeof *tq);
  if (!tq) { /* no timing: the decision itself */
    *d = g1_timed_reserve(self, q->permits, q->ctx, q->max_wait_ns, wait_ns, why);
    return 0;
  }
  tq->q.struct_size = sizeof tq->q;
  tq->q.permits = q->permits;
  tq->q.ctx = q->ctx;
  tq->q.max_wait_ns = q->max_wait_ns;
  tq->q.answer = g1_timed_answer;
  tq->q.user = tq;
  tq->outer = q;
  tq->t = t;
  tq->t0 = mono_ns();
  if (t->in->reserve_async(t->in->self, loop, &tq->q, d, wait_ns, why) == 0) {
    g1_timed_note(t, tq->t0);
    free(tq);
    return 0;
  }
  q->backend = tq;
  return 1;
}

static void g1_timed_withdraw(void *self, resil_ratelimiter_request *q) {
  g1_timed *t = self;
  g1_treq *tq = q->backend;
  if (!tq) return;
  t->in->withdraw(t->in->self, &tq->q);
  q->backend = NULL;
  free(tq);
}

/* A limiter on rl's backend, timed into slot (g1_timed): 0, or -1. */
static int g1_timed_new(resil_ratelimiter *rl, g1_slot *slot, resil_ratelimiter **out) {
  const resil_ratelimiter_backend *in = resil_ratelimiter_backend_of(rl);
  if (!in || !in->reserve_async || !in->withdraw) return -1;
  g1_timed *t = calloc(1, sizeof *t);
  if (!t) return -1;
  t->in = in;
  t->slot = slot;
  resil_ratelimiter_backend be;
  resil_ratelimiter_backend_init(&be);
  be.self = t;
  be.reserve = g1_timed_reserve;
  be.peek = g1_timed_peek;
  be.free = g1_timed_free;
  be.reserve_async = g1_timed_reserve_async;
  be.withdraw = g1_timed_withdraw;
  resil_ratelimiter_config cfg;
  resil_ratelimiter_config_init(&cfg);
  cfg.name = "g1-timed";
  cfg.limit_for_period = G1_LIMIT;
  cfg.refresh_period_ns = 1000 * G_MS;
  cfg.timeout_ns = 0; /* as the Redis limiter's: fail fast */
  /* On failure the call frees t (be.free). */
  return resil_ratelimiter_new_backed(&cfg, &be, out, NULL) == RESIL_OK ? 0 : -1;
}

typedef struct g1_proc g1_proc;
typedef struct g1_call {
  g1_proc *p;
  int64_t sub; /* monotonic */
} g1_call;

struct g1_proc {
  resil_engine *e;
  resil_engine_policies pol;
  resil_http_param prm;
  resil_http_args args;
  int64_t stop_at;
  long inflight;
  g1_slot *slot;
  g1_call calls[G1_INFLIGHT];
};

static void g1_done(void *user, resil_engine_handle *h, resil_outcome o,
                    resil_http_response *resp);

/* Submits call c again (now); 0, or -1 (it is not in flight any more). */
static int g1_submit(g1_call *c) {
  g1_proc *p = c->p;
  c->sub = mono_ns();
  if (resil_engine_call(p->e, "item", &p->args, &p->pol, NULL, g1_done, c, NULL, NULL) !=
      RESIL_OK) {
    p->slot->odd++;
    p->inflight--;
    return -1;
  }
  p->slot->calls++;
  return 0;
}

static void g1_done(void *user, resil_engine_handle *h, resil_outcome o,
                    resil_http_response *resp) {
  (void)h;
  g1_call *c = user;
  g1_proc *p = c->p;
  g1_slot *s = p->slot;
  int64_t now = mono_ns();
  int status = resp ? resil_http_response_status(resp) : 0;
  resil_http_response_free(resp);
  if (status == 200) {
    s->ok++;
    if (c->sub < s->first) s->first = c->sub;
    if (now > s->last) s->last = now;
  } else if (o.kind == RESIL_REJECTED && o.reason == RESIL_REASON_RATE_LIMITED) {
    s->refused++;
    if (s->nsub < G1_SAMPLES) s->sub[s->nsub++] = now - c->sub;
  } else {
    s->odd++;
  }
  if (now < p->stop_at) {
    (void)g1_submit(c);
  } else {
    p->inflight--;
  }
}

/* A worker process, forked before it has any thread: its own upstream
 * (the fixture, on 127.0.0.1), client, built-in loop, engine and Redis
 * limiter (name: its key); from `start` to `start` + G1_RUN, G1_INFLIGHT
 * calls in flight through the limiter (fail fast), each submitted again
 * when it completes; then the calls in flight complete (G1_DRAIN at most).
 * Exit status 0, or where it failed. */
static int g1_child(const char *uri, const char *name, int64_t start, g1_slot *slot) {
  int rc = 2;
  resil_fixture *fx = NULL;
  resil_http_client *c = NULL;
  resil_loop *loop = NULL;
  resil_loop_adapter *ad = NULL;
  resil_ratelimiter *rl = NULL, *timed = NULL;
  g1_proc *p = calloc(1, sizeof *p);
  if (!p) return rc;
  slot->first = INT64_MAX;
  resil_fixture_config fc;
  resil_fixture_config_init(&fc);
  fc.connection_limit = 2 * G1_INFLIGHT + 16;
  char eb[256];
  if (resil_fixture_start(&fc, &fx, eb, sizeof eb) != 0) goto out;
  rc++;
  resil_http_client_config cc;
  resil_http_client_config_init(&cc);
  cc.base_url = resil_fixture_url(fx);
  cc.endpoints = g1_endpoints;
  cc.endpoint_count = sizeof g1_endpoints / sizeof g1_endpoints[0];
  cc.max_connections = G1_INFLIGHT;
  cc.max_connections_per_host = G1_INFLIGHT;
  cc.lease_timeout_ns = 60000 * G_MS; /* a loaded machine's queue is not a failure */
  if (resil_http_client_new(&cc, &c, NULL) != RESIL_OK) goto out;
  rc++;
  if (resil_loop_new(NULL, &loop) != RESIL_OK || resil_loop_adapter_new(loop, &ad) != RESIL_OK)
    goto out;
  rc++;
  resil_engine_config ec;
  resil_engine_config_init(&ec);
  ec.adapter = ad;
  ec.client = c;
  if (resil_engine_new(&ec, &p->e, NULL) != RESIL_OK) goto out;
  rc++;
  resil_redis_ratelimiter_config cfg;
  resil_redis_ratelimiter_config_init(&cfg);
  cfg.uri = uri;
  cfg.name = name;
  cfg.limit_for_period = G1_LIMIT;
  cfg.burst = G1_BURST;
  cfg.timeout_ns = 0; /* fail fast: GO or DENY, no reservation */
  cfg.redis_timeout_ns = 1000 * G_MS; /* what Redis decides is measured, not its timeout */
  cfg.failure = RESIL_REDIS_FAILURE_CLOSED;
  if (resil_redis_ratelimiter_new(&cfg, &rl, NULL) != RESIL_OK) goto out;
  rc++;
  if (g1_timed_new(rl, slot, &timed) != 0) goto out;
  rc++;
  resil_engine_policies_init(&p->pol);
  p->pol.ratelimiter = timed;
  p->prm.name = "id";
  p->prm.value = "1";
  resil_http_args_init(&p->args);
  p->args.params = &p->prm;
  p->args.param_count = 1;
  p->slot = slot;
  p->stop_at = start + G1_RUN;
  slot->stage = 1;
  sleep_until(start);
  for (int i = 0; i < G1_INFLIGHT; i++) {
    p->calls[i].p = p;
    p->inflight++;
    if (g1_submit(&p->calls[i]) != 0) goto out;
  }
  int64_t end = p->stop_at + G1_DRAIN;
  while (p->inflight > 0 && mono_ns() < end)
    if (resil_loop_run_once(loop, 10 * G_MS, NULL) != RESIL_OK) goto out;
  slot->stage = 2;
  if (p->inflight > 0) goto out;
  rc = 0;
out:
  if (p->e) resil_engine_free(p->e); /* ends what still runs */
  if (ad) resil_loop_adapter_free(ad);
  if (loop) resil_loop_free(loop);
  if (timed) resil_ratelimiter_free(timed); /* before rl: its backend is rl's */
  if (rl) {
    resil_redis_ratelimiter_metrics m = g_metrics(rl);
    slot->redis_decisions = m.redis_decisions;
    slot->redis_errors = m.redis_errors;
    slot->writes = m.writes;
    slot->connects = m.connects;
    slot->rtt_total_ns = m.total_decision_ns;
    slot->rtt_max_ns = m.max_decision_ns;
    resil_ratelimiter_free(rl);
  }
  if (c) resil_http_client_free(c);
  if (fx) {
    slot->upstream = resil_fixture_attempts(fx, "items");
    resil_fixture_stop(fx);
  }
  free(p);
  if (rc == 0) slot->stage = 3;
  return rc;
}

typedef struct g1_pct {
  size_t n;
  int64_t p50, p99, max;
} g1_pct;

/* The percentiles of the processes' step (which 0) or sub (1) samples,
 * sorted in all (room for every sample). */
static void g1_percentiles(const g1_slot *board, int which, int64_t *all, g1_pct *out) {
  size_t k = 0;
  for (int i = 0; i < G1_PROCS; i++) {
    const g1_slot *b = &board[i];
    int n = which ? b->nsub : b->nstep;
    for (int j = 0; j < n; j++) all[k++] = which ? b->sub[j] : b->step[j];
  }
  memset(out, 0, sizeof *out);
  out->n = k;
  if (k == 0) return;
  qsort(all, k, sizeof *all, cmp_i64);
  out->p50 = all[k / 2];
  out->p99 = all[(k * 99) / 100];
  out->max = all[k - 1];
}

static int g1_run(lab_result *r, int wrong) {
  g_srv s;
  memset(&s, 0, sizeof s);
  g1_slot *board = MAP_FAILED;
  const size_t board_size = sizeof(g1_slot) * G1_PROCS;
  pid_t kids[G1_PROCS];
  int started = 0;
  int64_t *all = NULL;
  if (g_start(r, &s) != 0) goto out;
  board = mmap(NULL, board_size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (!lab_check(r, board != MAP_FAILED, "mmap: %s", strerror(errno))) goto out;
  memset(board, 0, board_size);
  int64_t start = mono_ns() + G1_SETUP; /* every process starts its calls then */
  for (int i = 0; i < G1_PROCS; i++) {
    char name[32] = "g1";
    if (wrong) snprintf(name, sizeof name, "g1-%d", i); /* a limiter per process: its own key */
    pid_t parent = getpid();
    kids[i] = fork();
    if (!lab_check(r, kids[i] >= 0, "fork: %s", strerror(errno))) break;
    if (kids[i] == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != parent) _exit(126);
      _exit(g1_child(s.uri, name, start, &board[i]));
    }
    started++;
  }
  /* Every process within its run, the drain and 5 s more; killed (by its
   * PID) past it. */
  int exited_ok = 0, killed = 0, late = 0;
  int64_t deadline = start + G1_RUN + G1_DRAIN + 5000 * G_MS;
  for (int i = 0; i < started; i++) {
    int st = 0;
    for (;;) {
      pid_t w = waitpid(kids[i], &st, WNOHANG);
      if (w == kids[i]) {
        if (WIFEXITED(st) && WEXITSTATUS(st) == 0) exited_ok++;
        break;
      }
      if (w < 0 && errno != EINTR) break;
      if (mono_ns() > deadline) {
        kill(kids[i], SIGKILL);
        waitpid(kids[i], &st, 0);
        killed++;
        break;
      }
      sleep_ns(5 * G_MS);
    }
  }
  for (int i = 0; i < started; i++)
    if (board[i].stage >= 1 && board[i].stage < 3) late++;
  if (!lab_check(r, started == G1_PROCS && exited_ok == G1_PROCS,
                 "%d of %d worker processes exited well (%d killed at the deadline; %d made "
                 "their engine but did not end well; first status: stage %d)",
                 exited_ok, G1_PROCS, killed, late, started ? board[0].stage : 0))
    goto out;
  long upstream = 0, ok = 0, refused = 0, odd = 0, calls = 0;
  unsigned long long decisions = 0, errors = 0, writes = 0, connects = 0;
  int64_t first = INT64_MAX, last = 0, rtt_total = 0, rtt_max = 0;
  int untimed = 0;
  all = calloc((size_t)G1_PROCS * G1_SAMPLES + 1, sizeof *all);
  if (!lab_check(r, all != NULL, "out of memory")) goto out;
  for (int i = 0; i < G1_PROCS; i++) {
    g1_slot *b = &board[i];
    upstream += b->upstream;
    ok += b->ok;
    refused += b->refused;
    odd += b->odd;
    calls += b->calls;
    decisions += b->redis_decisions;
    errors += b->redis_errors;
    writes += b->writes;
    connects += b->connects;
    rtt_total += b->rtt_total_ns;
    if (b->rtt_max_ns > rtt_max) rtt_max = b->rtt_max_ns;
    if (b->ok && b->first < first) first = b->first;
    if (b->last > last) last = b->last;
    uint64_t want = b->redis_decisions < G1_SAMPLES ? b->redis_decisions : G1_SAMPLES;
    if ((uint64_t)b->nstep != want) untimed++;
  }
  g1_pct step, sub;
  g1_percentiles(board, 0, all, &step);
  g1_percentiles(board, 1, all, &sub);
  /* GCRA's bound: burst + span / T over a span that holds every grant:
   * from the first admitted call's submission to the last one's
   * completion (each grant, stamped by Redis's TIME, falls between its
   * call's two). */
  const int64_t t_ns = 1000000000 / G1_LIMIT;
  double span = ok ? (double)(last - first) : 0.0;
  double bound = G1_BURST + span / (double)t_ns;
  double ratio = bound > 0 ? (double)upstream / bound : 0.0;
  double rtt_mean = decisions ? (double)rtt_total / (double)decisions : 0.0;
  lab_obs_str(r, "path", "engine");
  lab_obs_int(r, "processes", G1_PROCS);
  lab_obs_int(r, "in_flight_per_process", G1_INFLIGHT);
  lab_obs_int(r, "limit_per_s", G1_LIMIT);
  lab_obs_int(r, "burst", G1_BURST);
  lab_obs_int(r, "calls", calls);
  lab_obs_int(r, "decisions", (long long)decisions);
  lab_obs_int(r, "redis_writes", (long long)writes);
  lab_obs_int(r, "redis_connects", (long long)connects);
  lab_obs_int(r, "admitted", upstream);
  lab_obs_int(r, "completed_200", ok);
  lab_obs_int(r, "refused_rate_limited", refused);
  lab_obs_real(r, "span_ms", span / 1e6);
  lab_obs_real(r, "bound", bound);
  lab_obs_real(r, "ratio", ratio);
  lab_obs_str(r, "decision_latency_measured",
              "the rate-limiter step's decisions, from the limiter's call of its backend's "
              "reserve_async to the Redis backend's answer (a timing backend forwarding to "
              "the Redis limiter's), every decision");
  lab_obs_int(r, "decision_samples", (long long)step.n);
  lab_obs_int(r, "decision_p50_us", step.p50 / 1000);
  lab_obs_int(r, "decision_p99_us", step.p99 / 1000);
  lab_obs_int(r, "decision_max_us", step.max / 1000);
  lab_obs_int(r, "submit_to_refusal_samples", (long long)sub.n);
  lab_obs_int(r, "submit_to_refusal_p50_us", sub.p50 / 1000);
  lab_obs_int(r, "submit_to_refusal_p99_us", sub.p99 / 1000);
  lab_obs_int(r, "redis_round_trip_mean_us", (long long)(rtt_mean / 1000.0));
  lab_obs_int(r, "redis_round_trip_max_us", rtt_max / 1000);
  lab_obs_int(r, "redis_errors", (long long)errors);
  lab_summary(r,
              "engine path, %d processes x %d calls in flight, %s of %d/s (burst %d): %ld "
              "calls, %llu Redis decisions in %llu writes; the upstream saw %ld calls in "
              "%.0f ms; GCRA bound %.1f, ratio %.3f; decision p50 %lld us, p99 %lld us, max "
              "%lld us (submit to refusal p99 %lld us)",
              G1_PROCS, G1_INFLIGHT, wrong ? "a limiter per process (own keys)" : "one limiter",
              G1_LIMIT, G1_BURST, calls, decisions, writes, upstream, span / 1e6, bound, ratio,
              (long long)(step.p50 / 1000), (long long)(step.p99 / 1000),
              (long long)(step.max / 1000), (long long)(sub.p99 / 1000));
  lab_expect(r, "every_decision_timed", decisions > 0 && untimed == 0,
             "%d processes timed other than their Redis decisions (up to %d each)", untimed,
             G1_SAMPLES);
  lab_expect(r, "no_errors", errors == 0 && odd == 0,
             "%llu Redis errors, %ld completions neither 200 nor rate limited", errors, odd);
  lab_expect(r, "upstream_saw_the_admitted", upstream == ok,
             "the upstream received %ld requests, %ld calls completed 200", upstream, ok);
  lab_expect(r, "pipelined", writes > 0 && writes < decisions,
             "%llu writes for %llu decisions", writes, decisions);
  lab_expect(r, "admitted_within_bound", (double)upstream <= bound + 1.0,
             "the upstream saw %ld calls, over GCRA's bound %.1f (+1)", upstream, bound);
  lab_expect(r, "admitted_near_bound", ratio >= 0.95,
             "the upstream saw %ld calls, %.3f of the bound %.1f (under 0.95)", upstream,
             ratio, bound);
out:
  free(all);
  if (board != MAP_FAILED) munmap(board, board_size);
  g_srv_done(&s);
  return r->pass;
}
#else /* no built-in loop or fixture: no engine path */
static int g1_run(lab_result *r, int wrong) {
  (void)wrong;
  lab_expect(r, "engine_path_built", 0,
             "G1 runs on the async engine's built-in loop against the fixture: this build "
             "has not both");
  return r->pass;
}
#endif

static int g1_right(lab_result *r) { return g1_run(r, 0); }
static int g1_wrong(lab_result *r) { return g1_run(r, 1); }

/* ---- G2: Redis frozen under load ---------------------------------------- */

enum { G2_POLICIES = 3, G2_THREADS = 4, G2_LIMIT = 100, G2_INSTANCES = 4 };
#define G2_SHARE (G2_LIMIT / G2_INSTANCES)
#define G2_BEFORE (300 * G_MS)
#define G2_FREEZE (1000 * G_MS)
#define G2_AFTER (1400 * G_MS) /* the breaker's 1 s wait, then Redis again */
enum { G2_MAX_SAMPLES = 4096 };

typedef struct g2_worker {
  resil_ratelimiter *rl;
  int64_t until;                     /* monotonic */
  int64_t max_ns;                    /* the longest decision of the whole run */
  int64_t max_freeze_ns;             /* ... of those that overlapped the freeze */
  /* During the freeze: */
  long go, deny, deny_unavailable, deny_limited, deny_other;
  /* Decisions of the freeze taken while the breaker was open: their costs. */
  int64_t *open_cost;
  int n_open_cost;
  long after_go; /* permitted after the thaw */
} g2_worker;

typedef struct g2_shared {
  _Atomic int64_t freeze_at, thaw_at;
} g2_shared;

typedef struct g2_arg {
  g2_worker *w;
  g2_shared *sh;
} g2_arg;

static void *g2_thread(void *arg) {
  g2_arg *a = arg;
  g2_worker *w = a->w;
  resil_breaker *br = resil_redis_ratelimiter_breaker(w->rl);
  while (mono_ns() < w->until) {
    int64_t fz = a->sh->freeze_at, th = a->sh->thaw_at;
    int open_before = resil_breaker_state(br) == RESIL_BREAKER_OPEN;
    resil_reason why = RESIL_REASON_OK;
    int64_t t0 = mono_ns();
    resil_decision d = resil_ratelimiter_acquire(w->rl, 1, NULL, &why);
    int64_t t1 = mono_ns();
    if (t1 - t0 > w->max_ns) w->max_ns = t1 - t0;
    if (fz && t1 >= fz && (!th || t0 <= th) && t1 - t0 > w->max_freeze_ns)
      w->max_freeze_ns = t1 - t0;
    /* A decision that started inside the freeze and ended before the thaw. */
    if (fz && t0 >= fz && (!th || t1 < th)) {
      if (d == RESIL_DECISION_GO) {
        w->go++;
      } else {
        w->deny++;
        if (why == RESIL_REASON_RATE_LIMITER_UNAVAILABLE) w->deny_unavailable++;
        else if (why == RESIL_REASON_RATE_LIMITED) w->deny_limited++;
        else w->deny_other++;
      }
      if (open_before && resil_breaker_state(br) == RESIL_BREAKER_OPEN &&
          w->n_open_cost < G2_MAX_SAMPLES)
        w->open_cost[w->n_open_cost++] = t1 - t0;
    } else if (th && t0 >= th && d == RESIL_DECISION_GO) {
      w->after_go++;
    }
    sleep_ns(G_MS);
  }
  return NULL;
}

static const char *const g2_names[G2_POLICIES] = {"open", "closed", "local"};
static const resil_redis_failure g2_pols[G2_POLICIES] = {
    RESIL_REDIS_FAILURE_OPEN, RESIL_REDIS_FAILURE_CLOSED, RESIL_REDIS_FAILURE_LOCAL};

static int g2_run(lab_result *r, int wrong) {
  g_srv s;
  memset(&s, 0, sizeof s);
  resil_ratelimiter *rl[G2_POLICIES] = {NULL, NULL, NULL};
  g2_worker w[G2_POLICIES][G2_THREADS];
  g2_arg args[G2_POLICIES][G2_THREADS];
  pthread_t th[G2_POLICIES][G2_THREADS];
  int started = 0;
  g2_shared sh;
  sh.freeze_at = 0;
  sh.thaw_at = 0;
  memset(w, 0, sizeof w);
  resil_redis_ratelimiter_metrics before[G2_POLICIES], frozen[G2_POLICIES];
  memset(before, 0, sizeof before);
  memset(frozen, 0, sizeof frozen);
  int breaker_open[G2_POLICIES] = {0, 0, 0};
  int64_t freeze_ns = 0;
  if (g_start(r, &s) != 0) goto out;
  resil_breaker_config never; /* the wrong variant's: it never opens */
  resil_breaker_config_init(&never);
  never.window_size = 100000;
  never.minimum_calls = 100000;
  for (int p = 0; p < G2_POLICIES; p++) {
    resil_redis_ratelimiter_config cfg;
    resil_redis_ratelimiter_config_init(&cfg);
    cfg.uri = s.uri;
    cfg.name = g2_names[p];
    cfg.limit_for_period = G2_LIMIT;
    cfg.timeout_ns = 0; /* fail fast: a decision is one round trip */
    cfg.redis_timeout_ns = G_REDIS_TIMEOUT;
    cfg.failure = g2_pols[p];
    cfg.expected_instances = G2_INSTANCES;
    cfg.connections = G2_THREADS;
    if (wrong) cfg.breaker = &never;
    if (g_limiter(r, &cfg, &rl[p]) != 0) goto out;
    char bname[48];
    snprintf(bname, sizeof bname, "%s_redis_breaker", g2_names[p]);
    lab_ops_add_ratelimiter(r, g2_names[p], rl[p]);
    lab_ops_add_breaker(r, bname, resil_redis_ratelimiter_breaker(rl[p]));
  }
  int64_t t_start = mono_ns();
  int64_t until = t_start + G2_BEFORE + G2_FREEZE + G2_AFTER;
  for (int p = 0; p < G2_POLICIES; p++)
    for (int i = 0; i < G2_THREADS; i++) {
      g2_worker *x = &w[p][i];
      x->rl = rl[p];
      x->until = until;
      x->open_cost = calloc(G2_MAX_SAMPLES, sizeof *x->open_cost);
      args[p][i].w = x;
      args[p][i].sh = &sh;
      if (!lab_check(r,
                     x->open_cost &&
                         pthread_create(&th[p][i], NULL, g2_thread, &args[p][i]) == 0,
                     "could not start a worker thread")) {
        free(x->open_cost);
        x->open_cost = NULL;
        goto join;
      }
      started++;
    }
  sleep_until(t_start + G2_BEFORE);
  for (int p = 0; p < G2_POLICIES; p++) before[p] = g_metrics(rl[p]);
  if (g_signal(r, &s, SIGSTOP) != 0) goto join;
  sh.freeze_at = mono_ns();
  sleep_until(sh.freeze_at + G2_FREEZE);
  for (int p = 0; p < G2_POLICIES; p++) {
    breaker_open[p] =
        resil_breaker_state(resil_redis_ratelimiter_breaker(rl[p])) == RESIL_BREAKER_OPEN;
    frozen[p] = g_metrics(rl[p]);
  }
  sh.thaw_at = mono_ns();
  freeze_ns = sh.thaw_at - sh.freeze_at;
  g_signal(r, &s, SIGCONT);
join:
  for (int k = 0; k < started; k++) pthread_join(th[k / G2_THREADS][k % G2_THREADS], NULL);
  if (started < G2_POLICIES * G2_THREADS || !sh.thaw_at) goto free_samples;
  {
    int64_t worst = 0, worst_run = 0;
    json_t *pr = json_object();
    int all_open = 1, cost_ok = 1, results_ok = 1, redis_again = 1;
    long local_go = 0;
    int64_t worst_median_open = 0;
    char per[3][160];
    for (int p = 0; p < G2_POLICIES; p++) {
      long go = 0, deny = 0, unavailable = 0, limited = 0, other = 0, after = 0;
      int n = 0;
      for (int i = 0; i < G2_THREADS; i++) {
        g2_worker *x = &w[p][i];
        if (x->max_freeze_ns > worst) worst = x->max_freeze_ns;
        if (x->max_ns > worst_run) worst_run = x->max_ns;
        go += x->go;
        deny += x->deny;
        unavailable += x->deny_unavailable;
        limited += x->deny_limited;
        other += x->deny_other;
        after += x->after_go;
        n += x->n_open_cost;
      }
      int64_t *all = calloc((size_t)n + 1, sizeof *all);
      int64_t median = -1, p99 = -1;
      if (all) {
        int k = 0;
        for (int i = 0; i < G2_THREADS; i++)
          for (int j = 0; j < w[p][i].n_open_cost; j++) all[k++] = w[p][i].open_cost[j];
        qsort(all, (size_t)n, sizeof *all, cmp_i64);
        if (n > 0) {
          median = all[n / 2];
          p99 = all[(n * 99) / 100];
        }
        free(all);
      }
      resil_redis_ratelimiter_metrics end = g_metrics(rl[p]);
      json_t *o = json_object();
      json_object_set_new(o, "permitted", json_integer(go));
      json_object_set_new(o, "refused", json_integer(deny));
      json_object_set_new(o, "refused_unavailable", json_integer(unavailable));
      json_object_set_new(o, "refused_rate_limited", json_integer(limited));
      json_object_set_new(o, "refused_other", json_integer(other));
      json_object_set_new(
          o, "redis_errors",
          json_integer((json_int_t)(frozen[p].redis_errors - before[p].redis_errors)));
      json_object_set_new(
          o, "breaker_rejected",
          json_integer((json_int_t)(frozen[p].breaker_rejected - before[p].breaker_rejected)));
      json_object_set_new(o, "redis_breaker_opened", json_boolean(breaker_open[p]));
      json_object_set_new(o, "decisions_while_open", json_integer(n));
      json_object_set_new(o, "decision_while_open_median_us", json_real((double)median / 1e3));
      json_object_set_new(o, "decision_while_open_p99_us", json_real((double)p99 / 1e3));
      json_object_set_new(
          o, "redis_decisions_after_thaw",
          json_integer((json_int_t)(end.redis_decisions - frozen[p].redis_decisions)));
      json_object_set_new(o, "permitted_after_thaw", json_integer(after));
      json_object_set_new(pr, g2_names[p], o);
      if (!breaker_open[p]) all_open = 0;
      if (median < 0 || median > G_MS) cost_ok = 0;
      if (median < 0 || worst_median_open < 0) worst_median_open = -1;
      else if (median > worst_median_open) worst_median_open = median;
      if (end.redis_decisions <= frozen[p].redis_decisions) redis_again = 0;
      long decided = go + deny;
      switch (g2_pols[p]) {
      case RESIL_REDIS_FAILURE_OPEN:
        if (decided == 0 || go != decided) results_ok = 0;
        snprintf(per[p], sizeof per[p], "open %ld/%ld permitted", go, decided);
        break;
      case RESIL_REDIS_FAILURE_CLOSED:
        if (decided == 0 || unavailable != decided) results_ok = 0;
        snprintf(per[p], sizeof per[p], "closed %ld/%ld refused (unavailable)", unavailable,
                 decided);
        break;
      default: {
        /* The local limiter's cycles (refresh_period 1 s) touched by the
         * freeze: at most the share in each. */
        long cycles = (long)(freeze_ns / (1000 * G_MS)) + 2;
        local_go = go;
        json_object_set_new(o, "local_share", json_integer(G2_SHARE));
        json_object_set_new(o, "local_bound", json_integer(G2_SHARE * cycles));
        if (go < G2_SHARE || go > G2_SHARE * cycles || limited + go != decided) results_ok = 0;
        snprintf(per[p], sizeof per[p], "local %ld/%ld permitted (share %d/s, bound %ld)", go,
                 decided, G2_SHARE, G2_SHARE * cycles);
        break;
      }
      }
    }
    char open_s[48];
    if (worst_median_open < 0 || !all_open)
      snprintf(open_s, sizeof open_s, "(none: a breaker stayed closed)");
    else
      snprintf(open_s, sizeof open_s, "%.1f us", (double)worst_median_open / 1e3);
    lab_obs_int(r, "threads", G2_POLICIES * G2_THREADS);
    lab_obs_int(r, "freeze_ms", freeze_ns / G_MS);
    lab_obs_int(r, "redis_timeout_ms", G_REDIS_TIMEOUT / G_MS);
    lab_obs_real(r, "decision_max_ms", (double)worst / 1e6);
    lab_obs_int(r, "decision_bound_ms", (G_REDIS_TIMEOUT + G_SLACK) / G_MS);
    /* Before and after the freeze too: Redis's round trips then include
     * the machine's scheduling (12 threads and redis-server on the cores
     * there are); for the record, not checked. */
    lab_obs_real(r, "decision_max_ms_whole_run", (double)worst_run / 1e6);
    lab_obs_json(r, "policy_results", pr);
    lab_obs_bool(r, "redis_breaker_opened", all_open);
    lab_obs_real(r, "decision_while_open_median_us", (double)worst_median_open / 1e3);
    lab_obs_int(r, "local_permitted", local_go);
    lab_obs_bool(r, "redis_decides_after_thaw", redis_again);
    lab_summary(r,
                "%d threads, Redis SIGSTOPped %lld ms: longest decision then %.1f ms (bound %lld); "
                "%s; %s; %s; breakers %s, median decision while open %s; Redis decides "
                "after the thaw: %s",
                G2_POLICIES * G2_THREADS, (long long)(freeze_ns / G_MS), (double)worst / 1e6,
                (long long)((G_REDIS_TIMEOUT + G_SLACK) / G_MS), per[0], per[1], per[2],
                all_open ? "opened" : "not all opened", open_s, redis_again ? "yes" : "no");
    lab_expect(r, "decision_within_redis_timeout", worst <= G_REDIS_TIMEOUT + G_SLACK,
               "a decision during the freeze took %.1f ms, more than the Redis timeout %lld ms "
               "+ %lld ms",
               (double)worst / 1e6, (long long)(G_REDIS_TIMEOUT / G_MS),
               (long long)(G_SLACK / G_MS));
    lab_expect(r, "policy_results", results_ok, "the failure policies decided: %s; %s; %s",
               per[0], per[1], per[2]);
    lab_expect(r, "redis_breaker_opened", all_open,
               "a breaker on Redis was not OPEN at the end of the freeze");
    lab_expect(r, "cost_drops_to_local", cost_ok,
               "the median decision while the breaker was open: %s, not under 1 ms", open_s);
    lab_expect(r, "redis_decides_after_thaw", redis_again,
               "after SIGCONT and the breaker's wait, a limiter's decisions did not reach Redis");
  }
free_samples:
  for (int p = 0; p < G2_POLICIES; p++)
    for (int i = 0; i < G2_THREADS; i++) free(w[p][i].open_cost);
out:
  lab_capture(r);
  for (int p = 0; p < G2_POLICIES; p++)
    if (rl[p]) resil_ratelimiter_free(rl[p]);
  g_srv_done(&s);
  return r->pass;
}

static int g2_right(lab_result *r) { return g2_run(r, 0); }
static int g2_wrong(lab_result *r) { return g2_run(r, 1); }

/* ---- G3: Redis restarted mid-run ---------------------------------------- */

enum { G3_THREADS = 2, G3_MAX_EVENTS = 8192 };
#define G3_BEFORE (300 * G_MS)
#define G3_BETWEEN (400 * G_MS) /* from the new server's start to SCRIPT FLUSH */
#define G3_AFTER (400 * G_MS)

/* One decision: its start and end, and whether Redis decided it. */
typedef struct g3_event {
  int64_t t0, t1;
  int ok;           /* 1 decided (permitted), 0 failed */
  resil_reason why; /* a failure's reason (the limiter's) */
} g3_event;

/* The wrong variant's client: loads a script once when it starts, then
 * EVALSHA only (reconnects after an I/O error, never loads again). Its
 * script is a trivial one ("return 1"): what is measured is the reload,
 * not GCRA. */
typedef struct g3_naive {
  redisContext *c;
  int port;
  char sha[48];
} g3_naive;

static int g3_naive_connect(g3_naive *n) {
  struct timeval tv = {0, 20 * 1000};
  n->c = redisConnectWithTimeout("127.0.0.1", n->port, tv);
  if (!n->c || n->c->err) {
    if (n->c) redisFree(n->c);
    n->c = NULL;
    return -1;
  }
  redisSetTimeout(n->c, tv);
  return 0;
}

static int g3_naive_decide(g3_naive *n) {
  if (!n->c && g3_naive_connect(n) != 0) return 0;
  redisReply *rep = redisCommand(n->c, "EVALSHA %s 0", n->sha);
  if (!rep) {
    redisFree(n->c);
    n->c = NULL;
    return 0;
  }
  int ok = rep->type == REDIS_REPLY_INTEGER;
  freeReplyObject(rep);
  return ok;
}

typedef struct g3_worker {
  resil_ratelimiter *rl; /* right */
  g3_naive naive;        /* wrong */
  int64_t until;
  g3_event *ev;
  int n;
} g3_worker;

static void *g3_thread(void *arg) {
  g3_worker *w = arg;
  while (mono_ns() < w->until && w->n < G3_MAX_EVENTS) {
    g3_event *e = &w->ev[w->n];
    e->t0 = mono_ns();
    e->why = RESIL_REASON_OK;
    if (w->rl) e->ok = resil_ratelimiter_acquire(w->rl, 1, NULL, &e->why) == RESIL_DECISION_GO;
    else e->ok = g3_naive_decide(&w->naive);
    e->t1 = mono_ns();
    w->n++;
    sleep_ns(G_MS);
  }
  return NULL;
}

static int g3_run(lab_result *r, int wrong) {
  g_srv s;
  memset(&s, 0, sizeof s);
  resil_ratelimiter *rl = NULL;
  g3_worker w[G3_THREADS];
  pthread_t th[G3_THREADS];
  int started = 0;
  memset(w, 0, sizeof w);
  if (g_start(r, &s) != 0) goto out;
  resil_breaker_config bc; /* the default breaker, with a wait of 100 ms */
  resil_breaker_config_init(&bc);
  bc.open_wait_ns = 100 * G_MS;
  resil_redis_ratelimiter_config cfg;
  resil_redis_ratelimiter_config_init(&cfg);
  cfg.uri = s.uri;
  cfg.name = "restart";
  cfg.limit_for_period = 1000000; /* never refuses for the rate: a refusal is a failure */
  cfg.timeout_ns = 0;
  /* What is measured is the restart's handling, not the round trip's
   * time: a loaded machine (two cores, the suite running) can hold
   * redis-server off the CPU past 20 ms, which would count as a failure. */
  cfg.redis_timeout_ns = 250 * G_MS;
  cfg.failure = RESIL_REDIS_FAILURE_CLOSED;
  cfg.connections = G3_THREADS;
  cfg.breaker = &bc;
  if (g_limiter(r, &cfg, &rl) != 0) goto out;
  lab_ops_add_ratelimiter(r, "restart", rl);
  int64_t t_start = mono_ns();
  int64_t until = t_start + G3_BEFORE + G3_BETWEEN + G3_AFTER + 500 * G_MS;
  for (int i = 0; i < G3_THREADS; i++) {
    w[i].until = until;
    w[i].ev = calloc(G3_MAX_EVENTS, sizeof *w[i].ev);
    if (!wrong) {
      w[i].rl = rl;
    } else {
      w[i].naive.port = s.port;
      if (g3_naive_connect(&w[i].naive) == 0) {
        redisReply *rep = redisCommand(w[i].naive.c, "SCRIPT LOAD %s", "return 1");
        if (rep && rep->type == REDIS_REPLY_STRING)
          snprintf(w[i].naive.sha, sizeof w[i].naive.sha, "%s", rep->str);
        if (rep) freeReplyObject(rep);
      }
      if (!lab_check(r, w[i].naive.sha[0], "the naive client could not load its script")) {
        if (w[i].naive.c) redisFree(w[i].naive.c);
        free(w[i].ev);
        w[i].ev = NULL;
        goto join;
      }
    }
    if (!lab_check(r, w[i].ev && pthread_create(&th[i], NULL, g3_thread, &w[i]) == 0,
                   "could not start a worker thread")) {
      if (w[i].naive.c) redisFree(w[i].naive.c);
      free(w[i].ev);
      w[i].ev = NULL;
      goto join;
    }
    started++;
  }
  sleep_until(t_start + G3_BEFORE);
  resil_redis_ratelimiter_metrics m0 = g_metrics(rl);
  /* The restart: killed, a new empty server on the same port. */
  int64_t t_kill = mono_ns();
  g_kill(&s);
  int restarted = g_start(r, &s) == 0;
  int64_t t_up = mono_ns();
  resil_redis_ratelimiter_metrics m1 = g_metrics(rl);
  int flushed = 0;
  int64_t t_flush = 0;
  if (restarted) {
    sleep_until(t_up + G3_BETWEEN);
    m1 = g_metrics(rl);
    t_flush = mono_ns();
    flushed = g_do(&s, "SCRIPT FLUSH");
  }
join:
  for (int i = 0; i < started; i++) pthread_join(th[i], NULL);
  for (int i = 0; i < G3_THREADS; i++)
    if (w[i].naive.c) redisFree(w[i].naive.c);
  if (started == G3_THREADS && restarted) {
    lab_check(r, flushed, "SCRIPT FLUSH on the new server failed");
    resil_redis_ratelimiter_metrics m2 = g_metrics(rl);
    /* Recovered: the first decided decision that started after the new
     * server answered PING. "After the restart" begins there (at the new
     * server's PING when Redis never decides again); before it, from the
     * kill, is the restart's gap. */
    int64_t recovered = INT64_MAX;
    long before_ok = 0, before_failed = 0, gap_failed = 0, failed_after = 0, ok_after = 0;
    long after_flush_ok = 0, after_flush_failed = 0;
    char first_failure[200] = "";
    for (int i = 0; i < G3_THREADS; i++)
      for (int j = 0; j < w[i].n; j++)
        if (w[i].ev[j].ok && w[i].ev[j].t0 >= t_up && w[i].ev[j].t1 < recovered)
          recovered = w[i].ev[j].t1;
    for (int i = 0; i < G3_THREADS; i++)
      for (int j = 0; j < w[i].n; j++) {
        g3_event *e = &w[i].ev[j];
        if (e->t1 < t_kill) {
          if (e->ok) before_ok++;
          else before_failed++;
        } else if (e->t0 < (recovered == INT64_MAX ? t_up : recovered)) {
          if (!e->ok) gap_failed++;
        } else {
          if (e->ok) {
            ok_after++;
          } else if (failed_after++ == 0) {
            snprintf(first_failure, sizeof first_failure,
                     "; the first: %.1f ms after the new server was up (SCRIPT FLUSH at "
                     "%.1f ms), took %.1f ms, %s",
                     (double)(e->t0 - t_up) / 1e6, (double)(t_flush - t_up) / 1e6,
                     (double)(e->t1 - e->t0) / 1e6, resil_reason_name(e->why));
          }
          if (e->t0 >= t_flush) {
            if (e->ok) after_flush_ok++;
            else after_flush_failed++;
          }
        }
      }
    long long reconnects = (long long)(m1.connects - m0.connects);
    long long reloads = (long long)(m2.noscript_reloads - m0.noscript_reloads);
    if (wrong) reconnects = reloads = 0; /* the naive client has no metrics */
    char again[64];
    if (recovered == INT64_MAX)
      snprintf(again, sizeof again, "never");
    else
      snprintf(again, sizeof again, "%.1f ms after it is up", (double)(recovered - t_up) / 1e6);
    lab_obs_int(r, "threads", G3_THREADS);
    lab_obs_int(r, "decisions_before", before_ok + before_failed);
    lab_obs_int(r, "failed_before", before_failed);
    lab_obs_int(r, "restart_ms", (t_up - t_kill) / G_MS);
    lab_obs_int(r, "recovered_after_ms",
                recovered == INT64_MAX ? -1 : (long long)((recovered - t_up) / G_MS));
    lab_obs_int(r, "failed_during_restart", gap_failed);
    lab_obs_int(r, "reconnects", reconnects);
    lab_obs_int(r, "noscript_reloads", reloads);
    lab_obs_int(r, "decisions_after_restart", ok_after + failed_after);
    lab_obs_int(r, "decisions_after_flush", after_flush_ok + after_flush_failed);
    lab_obs_int(r, "failed_decisions", failed_after);
    lab_summary(r,
                "%s, %d threads: %ld decided before; restart %lld ms (%ld failed meanwhile, "
                "Redis decides again %s, %lld reconnects); SCRIPT FLUSH: "
                "%lld NOSCRIPT reloads; after the restart %ld decided, %ld failed",
                wrong ? "a client that loads its script only at start" : "resil limiter",
                G3_THREADS, before_ok, (long long)((t_up - t_kill) / G_MS), gap_failed,
                again, reconnects, reloads, ok_after, failed_after);
    lab_expect(r, "decisions_before_restart", before_ok > 0 && before_failed == 0,
               "before the restart %ld decided, %ld failed", before_ok, before_failed);
    lab_expect(r, "no_failed_decisions_after_restart",
               recovered != INT64_MAX && failed_after == 0 && after_flush_ok > 0,
               "after the restart %ld decisions failed (%ld decided, %ld after SCRIPT FLUSH)%s",
               failed_after, ok_after, after_flush_ok, first_failure);
    if (!wrong) {
      lab_expect(r, "reconnected", reconnects >= 1,
                 "no connection was made again after the restart");
      lab_expect(r, "noscript_reloaded", reloads >= 1 && reloads <= G3_THREADS,
                 "%lld NOSCRIPT reloads after SCRIPT FLUSH (1..%d: once per connection)",
                 reloads, G3_THREADS);
    }
  }
  for (int i = 0; i < G3_THREADS; i++) free(w[i].ev);
out:
  lab_capture(r);
  if (rl) resil_ratelimiter_free(rl);
  g_srv_done(&s);
  return r->pass;
}

static int g3_right(lab_result *r) { return g3_run(r, 0); }
static int g3_wrong(lab_result *r) { return g3_run(r, 1); }

/* ---- G4: a window's edge ------------------------------------------------ */

enum { G4_LIMIT = 10, G4_ASKS = 2 * G4_LIMIT };
#define G4_LEAD (50 * G_MS) /* the first batch, before the edge */
#define G4_LAG (1 * G_MS)   /* the second, after it */

/* The naive fixed window: INCR of "lab:fw:<client clock's second>", EXPIRE
 * when it is new; permitted while the count is at most the limit. 1
 * permitted, 0 refused, -1 an error. */
static int g4_naive(redisContext *c, const char *tag) {
  long long sec = (long long)(real_ns() / 1000000000);
  char key[96];
  snprintf(key, sizeof key, "lab:fw:%s:%lld", tag, sec);
  redisReply *rep = redisCommand(c, "INCR %s", key);
  if (!rep || rep->type != REDIS_REPLY_INTEGER) {
    if (rep) freeReplyObject(rep);
    return -1;
  }
  long long n = rep->integer;
  freeReplyObject(rep);
  if (n == 1) {
    rep = redisCommand(c, "EXPIRE %s 2", key);
    if (rep) freeReplyObject(rep);
  }
  return n <= G4_LIMIT;
}

typedef struct g4_batch {
  long admitted;
  int64_t first, last; /* monotonic, of the admitted */
  int errors;
} g4_batch;

/* Asks G4_ASKS times in a row with the naive window (rl NULL) or rl. */
static void g4_ask(redisContext *c, resil_ratelimiter *rl, const char *tag, g4_batch *b) {
  for (int i = 0; i < G4_ASKS; i++) {
    int ok = rl ? resil_ratelimiter_acquire(rl, 1, NULL, NULL) == RESIL_DECISION_GO
                : g4_naive(c, tag);
    if (ok < 0) {
      b->errors++;
      continue;
    }
    if (ok) {
      int64_t t = mono_ns();
      if (!b->admitted) b->first = t;
      b->last = t;
      b->admitted++;
    }
  }
}

/* Waits for the client clock's next second, less lead; then one batch
 * before the edge and one just after it. Returns the admitted of both and
 * their span; 1 when the first batch ended before the edge and the second
 * began after it (on the client clock), 0 when a late wake-up spoilt it. */
static int g4_edge(redisContext *c, resil_ratelimiter *rl, const char *tag, long *admitted,
                   int64_t *span, int *errors) {
  int64_t now = real_ns();
  int64_t edge = (now / 1000000000 + 1) * 1000000000;
  if (edge - now < G4_LEAD + 20 * G_MS) edge += 1000000000; /* too close: the next one */
  int64_t mono_edge = mono_ns() + (edge - now);
  g4_batch a = {0, 0, 0, 0}, b = {0, 0, 0, 0};
  sleep_until(mono_edge - G4_LEAD);
  int64_t a0 = real_ns();
  g4_ask(c, rl, tag, &a);
  int64_t a1 = real_ns();
  sleep_until(mono_edge + G4_LAG);
  int64_t b0 = real_ns();
  g4_ask(c, rl, tag, &b);
  *admitted = a.admitted + b.admitted;
  int64_t first = a.admitted ? a.first : b.first, last = b.admitted ? b.last : a.last;
  *span = *admitted ? last - first : 0;
  *errors = a.errors + b.errors;
  return a0 < edge && a1 < edge && b0 >= edge;
}

/* g4_edge until one straddles the edge as planned, at most 3 seconds. */
static int g4_edges(redisContext *c, resil_ratelimiter *rl, const char *tag, long *admitted,
                    int64_t *span, int *errors) {
  for (int i = 0; i < 3; i++)
    if (g4_edge(c, rl, tag, admitted, span, errors)) return 1;
  return 0;
}

static int g4_run(lab_result *r, int wrong) {
  g_srv s;
  memset(&s, 0, sizeof s);
  resil_ratelimiter *rl = NULL;
  redisContext *c = NULL;
  if (g_start(r, &s) != 0) goto out;
  c = g_client(&s);
  if (!lab_check(r, c != NULL, "could not connect to redis-server on port %d", s.port)) goto out;
  resil_redis_ratelimiter_config cfg;
  resil_redis_ratelimiter_config_init(&cfg);
  cfg.uri = s.uri;
  cfg.name = "edge";
  cfg.limit_for_period = G4_LIMIT;
  cfg.burst = G4_LIMIT;
  cfg.timeout_ns = 0;
  cfg.redis_timeout_ns = 1000 * G_MS; /* what Redis decides is measured here, not its timeout */
  cfg.failure = RESIL_REDIS_FAILURE_CLOSED;
  if (g_limiter(r, &cfg, &rl) != 0) goto out;
  lab_ops_add_ratelimiter(r, "edge", rl);
  long wrong_n = 0, gcra_n = 0;
  int64_t wrong_span = 0, gcra_span = 0;
  int wrong_err = 0, gcra_err = 0;
  int straddled = g4_edges(c, NULL, "naive", &wrong_n, &wrong_span, &wrong_err);
  straddled &= g4_edges(c, wrong ? NULL : rl, wrong ? "naive2" : "gcra", &gcra_n, &gcra_span,
                        &gcra_err);
  resil_redis_ratelimiter_metrics m = g_metrics(rl);
  /* GCRA's bound over the span from the first to the last grant: burst +
   * span / T, T = 1 s / limit; one more when a grant's stamp (taken after
   * its reply) falls after Redis's TIME. */
  const int64_t t_ns = 1000000000 / G4_LIMIT;
  long bound = G4_LIMIT + (long)(gcra_span / t_ns) + 1;
  lab_obs_int(r, "limit", G4_LIMIT);
  lab_obs_int(r, "asked_per_edge", 2 * G4_ASKS);
  lab_obs_int(r, "edge_admitted_wrong", wrong_n);
  lab_obs_real(r, "edge_span_wrong_ms", (double)wrong_span / 1e6);
  lab_obs_int(r, "edge_admitted_gcra", gcra_n);
  lab_obs_real(r, "edge_span_gcra_ms", (double)gcra_span / 1e6);
  lab_obs_int(r, "gcra_bound", bound);
  lab_obs_int(r, "redis_errors", (long long)m.redis_errors + wrong_err + gcra_err);
  lab_summary(r,
              "%d per second, %d asks %lld ms before a second's edge and %d just after: the "
              "naive fixed window (INCR+EXPIRE on the client clock) let %ld through in %.1f "
              "ms; %s let %ld through in %.1f ms (bound %ld)",
              G4_LIMIT, G4_ASKS, (long long)(G4_LEAD / G_MS), G4_ASKS, wrong_n,
              (double)wrong_span / 1e6, wrong ? "the naive window again, in GCRA's place" : "GCRA",
              gcra_n, (double)gcra_span / 1e6, bound);
  lab_expect(r, "batches_straddle_the_edge", straddled,
             "three times in a row a batch did not fall on its side of the edge (late wake-ups)");
  lab_expect(r, "no_errors", m.redis_errors == 0 && wrong_err == 0 && gcra_err == 0,
             "%llu Redis errors, %d naive errors", (unsigned long long)m.redis_errors,
             wrong_err + gcra_err);
  lab_expect(r, "naive_window_doubles", wrong_n == 2 * G4_LIMIT,
             "the naive window let %ld through at the edge, not %d", wrong_n, 2 * G4_LIMIT);
  lab_expect(r, "edge_admitted_within_bound", gcra_n <= bound && gcra_n >= G4_LIMIT,
             "%ld let through at the edge in %.1f ms; GCRA's bound is %ld (and at least the "
             "burst, %d)",
             gcra_n, (double)gcra_span / 1e6, bound, G4_LIMIT);
out:
  lab_capture(r);
  if (c) redisFree(c);
  if (rl) resil_ratelimiter_free(rl);
  g_srv_done(&s);
  return r->pass;
}

static int g4_right(lab_result *r) { return g4_run(r, 0); }
static int g4_wrong(lab_result *r) { return g4_run(r, 1); }

const lab_experiment lab_redis_experiments[] = {
    {"G1",
     "4 processes, each an engine with 50 calls in flight, through one Redis limiter of 200/s "
     "for 3 s: the upstreams see at most the GCRA bound and at least 95 % of it",
     g1_right, g1_wrong, "a limiter per process (its own key)", "admitted_within_bound", 0},
    {"G2",
     "Redis frozen (SIGSTOP) for 1 s under 12 threads: every decision ends within the Redis "
     "timeout (20 ms) + 5 ms; open permits, closed refuses (rate limiter unavailable), local "
     "keeps the local share; the breaker on Redis opens and a decision then costs a local one",
     g2_right, g2_wrong, "a breaker on Redis that never opens", "cost_drops_to_local", 0},
    {"G3",
     "Redis restarted mid-run (a new empty server on the same port, then SCRIPT FLUSH): the "
     "connections are made again, NOSCRIPT reloads the script once, no decision fails once "
     "Redis is back",
     g3_right, g3_wrong, "a client that loads its script only when it starts",
     "no_failed_decisions_after_restart", 0},
    {"G4",
     "a window's edge: a naive fixed window (INCR+EXPIRE on the client clock) lets twice the "
     "limit through around a second's edge; GCRA at most burst + span / T",
     g4_right, g4_wrong, "the naive fixed window in GCRA's place", "edge_admitted_within_bound",
     0},
    {NULL, NULL, NULL, NULL, NULL, NULL, 0}};

#else /* no libresil-redis in this build */
const lab_experiment lab_redis_experiments[] = {{NULL, NULL, NULL, NULL, NULL, NULL, 0}};
#endif
