/* Lab experiments R (issue 23, "Recovery in the seed's order", DESIGN
 * §2.9): a breaker in front of the real fixture (src/fixture/fixture.h)
 * whose upstream fails (force_status 503, switched at run time by
 * resil_fixture_set_force_status) and recovers; the breaker ramps traffic
 * back after HALF_OPEN -> CLOSED, and retries come back last. Each runs on
 * both paths: on the blocking path the callers are threads calling flat
 * out; on the engine path (R1/engine, ...) one thread drives an async
 * engine on the client (lab_engine.h) that keeps as many calls in flight
 * as there are callers, a completion submitting the next call at once (see
 * "the engine path" below). The figures and checks are the same, plus
 * ran_on_engine.
 *
 * R1: 100 % failures open the breaker (count window 20, minimum 10, 50 %,
 *     OPEN wait 300 ms, 5 probes); the upstream recovers; the probes pass;
 *     a 2 s linear ramp from 10 % follows while 10 callers call flat out
 *     (a caller refused by the ramp asks again at once; one refused by an
 *     OPEN or a HALF_OPEN without a probe left waits 1 ms, which changes
 *     no share). The admitted share of the decisions made in each 200 ms
 *     bucket from the ramp's start (RAMP_STARTED's instant; the wrong
 *     variant and the control, without a ramp: HALF_OPEN -> CLOSED's)
 *     grows from <= 25 % to >= 95 % in the bucket after the ramp, and
 *     never falls: each bucket's share is at least the previous one's,
 *     exactly, no tolerance (the share is a non-decreasing function of
 *     time, a bucket's share is a weighted mean of the shares within it,
 *     and error diffusion admits the sum of the shares within one call:
 *     with thousands of decisions a bucket, buckets 200 ms apart on a
 *     slope of 10 % per 200 ms cannot cross). A control run without a ramp
 *     admits >= 95 % in its first 200 ms (wrong_first_bucket_share). Wrong
 *     variant: the main run without a ramp (first_bucket_share fails).
 * R2: Retry(Breaker(call)) in a chain (max 2 attempts, 5 ms apart), 4
 *     callers; 1 logical call in 16 (pseudo-random) goes to /flaky/{id}?fail=1 (its first
 *     attempt answers 503, a second one 200), the others to /items/1. During
 *     HALF_OPEN and the 1 s ramp no retry reaches the upstream (a retry
 *     counts as during recovery when resil_breaker_recovering() says so as
 *     it is sent), the suppressed ones are counted (the retry's
 *     suppressed_recovering); after the ramp retries are sent again. On
 *     the engine the same retry and breaker are the calls' policies
 *     (resil_engine_policies.retry and .breaker, no chain): the engine's
 *     retry watches the breaker itself. Wrong variant:
 *     retry_during_recovery = 1.
 * R3: R1's breaker with open_wait_multiplier 2; 400 ms into the ramp the
 *     upstream fails again: the breaker opens (the ramp ends, cause
 *     FAILURE_RATE) with the series' next wait (600 ms > 300 ms), the
 *     upstream recovers, and after the next probes the ramp starts over
 *     (its first 100 ms admit <= 25 %). Wrong variant: multiplier 1 (the
 *     wait does not grow: wait_longer fails).
 *
 * The HTML report draws R1's and R3's states over time (observed.timeline,
 * as P6) with the ramps (observed.ramps) and the admitted share per bucket
 * (observed.ramp_share). */
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "lab_engine.h"
#include "lab_families.h"
#include "lab_ops.h"
#include "lab_result.h"

#if defined(RESIL_HAVE_HTTP) && defined(RESIL_HAVE_FIXTURE)

#include <pthread.h>

#include "fixture/fixture.h"
#include "resil/breaker.h"
#include "resil/chain.h"
#include "resil/http.h"
#include "resil/resil.h"
#include "resil/retry.h"
#ifdef RESIL_HAVE_LOOP
#include "resil/engine.h"
#include "resil/loop.h"
#endif

#define MS INT64_C(1000000)
enum { MAX_CALLERS = 10, NBINS = 12000 /* 1 ms bins: 12 s */, MAX_EVENTS = 64 };

static void sleep_ms(int64_t ms) {
  struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

/* ---- the rig: a fixture, a client, a breaker, its events ------------------ */

typedef struct ev_rec {
  int64_t t_ns;
  resil_breaker_event_kind kind;
  resil_breaker_state_kind to;
  resil_breaker_cause cause;
  int64_t open_wait_ns; /* TRANSITION to OPEN: the wait of that OPEN */
} ev_rec;

struct rig;

/* A caller's decisions in 1 ms bins from the rig's start: those a CLOSED
 * breaker (ramping or not) made, and how many of them it admitted. */
typedef struct caller {
  struct rig *rig;
  pthread_t th;
  int started;
  uint32_t dec[NBINS], adm[NBINS];
  /* The engine path's driver (engine_caller): the calls its engine
   * accepted, and why it could not run (empty when it could). */
  size_t engine_calls;
  char err[320];
} caller;

typedef struct rig {
  resil_fixture *fx;
  resil_http_client *cl;
  resil_breaker *br;
  resil_chain *ch; /* R2 */
  resil_retry *rt; /* R2 */
  int64_t t0;
  atomic_int stop;
  pthread_mutex_t mu;
  ev_rec ev[MAX_EVENTS];
  size_t nev;
  atomic_int opens, closes, ramps_started, ramps_ended;
  /* R2 */
  atomic_uint_fast64_t seq;
  atomic_long retries_during, retries_after, retries_before;
  caller *callers[MAX_CALLERS];
  int ncallers;
  int in_flight;       /* the engine path: the calls kept in flight */
  size_t engine_calls; /* ... the engine accepted (callers stopped) */
  lab_result *r;       /* --metrics and --events (lab_ops.h) */
} rig;

static void on_event(void *user, resil_breaker *br, const resil_breaker_event *ev) {
  rig *g = user;
  if (ev->kind == RESIL_BREAKER_EVENT_NOT_PERMITTED) return;
  ev_rec e = {ev->time_ns, ev->kind, ev->to, ev->cause, 0};
  if (ev->kind == RESIL_BREAKER_EVENT_TRANSITION && ev->to == RESIL_BREAKER_OPEN) {
    resil_breaker_metrics m;
    if (resil_breaker_get_metrics(br, &m) == RESIL_OK) e.open_wait_ns = m.open_wait_ns;
  }
  pthread_mutex_lock(&g->mu);
  if (g->nev < MAX_EVENTS) g->ev[g->nev++] = e;
  pthread_mutex_unlock(&g->mu);
  if (ev->kind == RESIL_BREAKER_EVENT_TRANSITION && ev->to == RESIL_BREAKER_OPEN)
    atomic_fetch_add(&g->opens, 1);
  else if (ev->kind == RESIL_BREAKER_EVENT_TRANSITION && ev->to == RESIL_BREAKER_CLOSED)
    atomic_fetch_add(&g->closes, 1);
  else if (ev->kind == RESIL_BREAKER_EVENT_RAMP_STARTED)
    atomic_fetch_add(&g->ramps_started, 1);
  else if (ev->kind == RESIL_BREAKER_EVENT_RAMP_ENDED)
    atomic_fetch_add(&g->ramps_ended, 1);
}

/* The n-th (1-based) recorded event of kind (and, for a TRANSITION, to
 * state `to`; -1 any); NULL when none. */
static const ev_rec *nth_event(rig *g, int n, resil_breaker_event_kind kind, int to) {
  for (size_t i = 0; i < g->nev; i++)
    if (g->ev[i].kind == kind && (to < 0 || (int)g->ev[i].to == to) && --n == 0)
      return &g->ev[i];
  return NULL;
}

static const resil_http_endpoint eps[] = {
    RESIL_HTTP_ENDPOINT(.name = "item", .path = "/items/1"),
    RESIL_HTTP_ENDPOINT(.name = "flaky", .path = "/flaky/{id}")};

/* `tag` names the rig's instances for --metrics and --events (lab_ops.h):
 * "<id>_<tag>breaker", "<id>_<tag>client". */
static int rig_start(lab_result *r, rig *g, const resil_breaker_config *bc, const char *tag) {
  memset(g, 0, sizeof *g);
  g->r = r;
  pthread_mutex_init(&g->mu, NULL);
  resil_fixture_config fc;
  resil_fixture_config_init(&fc);
  fc.force_status = 503; /* the upstream is down when the experiment starts */
  fc.max_ids = 1000000;
  char err[256] = "";
  if (!lab_check(r, resil_fixture_start(&fc, &g->fx, err, sizeof err) == 0, "fixture: %s", err))
    return -1;
  resil_http_client_config cc;
  resil_http_client_config_init(&cc);
  cc.name = "upstream";
  cc.base_url = resil_fixture_url(g->fx);
  cc.endpoints = eps;
  cc.endpoint_count = sizeof eps / sizeof eps[0];
  cc.max_connections = 32;
  cc.max_connections_per_host = 32;
  resil_error e;
  if (!lab_check(r, resil_http_client_new(&cc, &g->cl, &e) == RESIL_OK, "client: %s", e.msg))
    return -1;
  if (!lab_check(r, resil_breaker_new(bc, &g->br, &e) == RESIL_OK, "breaker: %s", e.msg))
    return -1;
  resil_breaker_listener_add(g->br, on_event, g);
  char name[64];
  snprintf(name, sizeof name, "%sclient", tag);
  lab_ops_add_client(r, name, g->cl);
  snprintf(name, sizeof name, "%sbreaker", tag);
  lab_ops_add_breaker(r, name, g->br);
  lab_ops_breaker_events(r, g->br);
  g->t0 = lab_now_ns();
  return 0;
}

static void rig_stop_callers(rig *g) {
  atomic_store(&g->stop, 1);
  for (int i = 0; i < g->ncallers; i++)
    if (g->callers[i]->started) {
      pthread_join(g->callers[i]->th, NULL);
      g->callers[i]->started = 0;
      g->engine_calls += g->callers[i]->engine_calls;
    }
}

static void rig_free(rig *g) {
  rig_stop_callers(g);
  for (int i = 0; i < g->ncallers; i++)
    lab_check(g->r, g->callers[i]->err[0] == 0, "engine path: %s", g->callers[i]->err);
  lab_capture(g->r);
  for (int i = 0; i < g->ncallers; i++) free(g->callers[i]);
  g->ncallers = 0;
  resil_chain_free(g->ch);
  resil_retry_free(g->rt);
  if (g->br) resil_breaker_listener_remove(g->br, on_event, g);
  resil_breaker_free(g->br);
  resil_http_client_free(g->cl);
  resil_fixture_stop(g->fx);
  pthread_mutex_destroy(&g->mu);
}

static int start_callers(lab_result *r, rig *g, int n, void *(*fn)(void *)) {
  for (int i = 0; i < n; i++) {
    caller *c = calloc(1, sizeof *c);
    if (!lab_check(r, c != NULL, "out of memory")) return -1;
    c->rig = g;
    g->callers[g->ncallers++] = c;
    if (!lab_check(r, pthread_create(&c->th, NULL, fn, c) == 0, "pthread_create failed"))
      return -1;
    c->started = 1;
  }
  return 0;
}

/* Waits until *counter >= n (polling every ms), at most timeout_ms. */
static int wait_for(atomic_int *counter, int n, int64_t timeout_ms) {
  int64_t end = lab_now_ns() + timeout_ms * MS;
  while (atomic_load(counter) < n) {
    if (lab_now_ns() > end) return 0;
    sleep_ms(1);
  }
  return 1;
}

/* Sleeps until the rig's clock reads at_ns (CLOCK_MONOTONIC, as the
 * breaker's events). */
static void sleep_until(int64_t at_ns) {
  int64_t now = lab_now_ns();
  if (at_ns > now) sleep_ms((at_ns - now + MS - 1) / MS);
}

/* ---- R2's logical calls ------------------------------------------------- */

/* One logical call: GET /items/1, or (1 in 16) /flaky/{id}?fail=1, whose
 * first attempt answers 503 and a second one 200. */
typedef struct r2_arg {
  rig *g;
  int flaky;
  char id[32];
} r2_arg;

/* splitmix64's finaliser: which calls go to /flaky is a fixed pseudo-random
 * choice of 1 in 16, independent of the ramp's admission (every 8th call,
 * say, would alias with a share of 1/8: the ramp's error diffusion admits
 * exactly every 8th decision, all of them flaky, and the breaker reopens). */
static uint64_t mix64(uint64_t x) {
  x += UINT64_C(0x9e3779b97f4a7c15);
  x = (x ^ (x >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
  x = (x ^ (x >> 27)) * UINT64_C(0x94d049bb133111eb);
  return x ^ (x >> 31);
}

/* The run's next logical call (any caller's), and its ctx. */
static void r2_next(rig *g, r2_arg *a, resil_ctx *ctx) {
  uint64_t n = atomic_fetch_add(&g->seq, 1);
  a->g = g;
  a->flaky = mix64(n) % 16 == 0;
  snprintf(a->id, sizeof a->id, "r2-%llu", (unsigned long long)n);
  resil_ctx_init(ctx);
  ctx->flags = RESIL_CALL_IDEMPOTENT;
}

/* a's endpoint; *use is its args (filled in args and p), NULL for
 * /items/1. */
static const char *r2_request(const r2_arg *a, resil_http_args *args, resil_http_param p[2],
                              const resil_http_args **use) {
  *use = NULL;
  if (!a->flaky) return "item";
  p[0] = (resil_http_param){"id", a->id};
  p[1] = (resil_http_param){"fail", "1"};
  resil_http_args_init(args);
  args->params = &p[0];
  args->param_count = 1;
  args->query = &p[1];
  args->query_count = 1;
  *use = args;
  return "flaky";
}

/* A retry that reached the upstream: during recovery when the breaker says
 * so now, else after the ramp once one started, else before the OPEN. */
static void r2_count_retry(rig *g) {
  if (resil_breaker_recovering(g->br))
    atomic_fetch_add(&g->retries_during, 1);
  else if (atomic_load(&g->ramps_started) > 0)
    atomic_fetch_add(&g->retries_after, 1);
  else
    atomic_fetch_add(&g->retries_before, 1);
}

/* A refusal of an OPEN breaker (or a HALF_OPEN one without a probe left):
 * the caller pauses 1 ms before its next call. */
static int open_refusal(const resil_outcome *o) {
  return o->kind == RESIL_REJECTED && o->reason == RESIL_REASON_BREAKER_OPEN;
}

/* The protected call of the blocking path: one HTTP attempt. A retry
 * (attempt > 1) that reaches it is counted as it is sent. */
static resil_outcome r2_call(void *arg, const resil_ctx *ctx) {
  r2_arg *a = arg;
  if (ctx && ctx->attempt > 1) r2_count_retry(a->g);
  resil_http_args args;
  resil_http_param p[2];
  const resil_http_args *use;
  const char *ep = r2_request(a, &args, p, &use);
  return resil_http_call(a->g->cl, ep, use, NULL, ctx, NULL);
}

static void *r2_caller(void *arg) {
  caller *c = arg;
  rig *g = c->rig;
  while (!atomic_load_explicit(&g->stop, memory_order_relaxed)) {
    r2_arg a;
    resil_ctx ctx;
    r2_next(g, &a, &ctx);
    resil_outcome o = resil_chain_run(g->ch, &ctx, r2_call, &a);
    if (open_refusal(&o)) sleep_ms(1);
  }
  return NULL;
}

/* ---- the engine path ----------------------------------------------------
 * One thread (engine_caller, the loop's) opens an engine on the rig's
 * client (lab_engine_open: a built-in loop), keeps g->in_flight calls in
 * flight through the breaker (resil_engine_policies.breaker) and, for R2,
 * the retry (.retry: the engine's retry watches that breaker itself), and
 * drives the loop until the rig stops. A completion submits the next call
 * at once, as a blocking caller asks again; one refused by an OPEN breaker
 * 1 ms later, as a blocking caller sleeps. R1 and R3 bin each decision
 * (the breaker's, as the attempt starts) at the instant its call was
 * submitted: the engine starts a call on its next loop iteration. A call
 * that completes other than REJECTED was admitted (a HALF_OPEN probe too,
 * which only comes before the buckets: they start at the ramp's start),
 * one REJECTED(RECOVERING) refused by the ramp. R2 counts the retries
 * sent at the end of each attempt (r2_on_attempt, the retry's attempt
 * listener). */
#ifdef RESIL_HAVE_LOOP

typedef struct eng_drive eng_drive;

/* One of the calls kept in flight. */
typedef struct eng_call {
  eng_drive *dr;
  int busy;          /* submitted, not yet complete */
  int64_t t_sub;     /* when it was submitted */
  int64_t resume_at; /* not busy: when the next one is due */
} eng_call;

struct eng_drive {
  caller *c;
  rig *g;
  lab_engine *le;
  resil_engine_policies pol;
  eng_call calls[MAX_CALLERS];
};

static void eng_done(void *user, resil_engine_handle *h, resil_outcome o,
                     resil_http_response *resp);

/* Submits k's next call: R2's next logical call, or R1's and R3's GET. */
static void eng_submit(eng_call *k) {
  eng_drive *dr = k->dr;
  rig *g = dr->g;
  const char *ep = "item";
  const resil_http_args *use = NULL;
  resil_http_args args;
  resil_http_param p[2];
  r2_arg a;
  resil_ctx ctx;
  if (g->rt) {
    r2_next(g, &a, &ctx);
    ep = r2_request(&a, &args, p, &use);
  }
  k->t_sub = lab_now_ns();
  resil_error err;
  if (lab_engine_submit(dr->le, ep, use, &dr->pol, g->rt ? &ctx : NULL, eng_done, k, &err) ==
      RESIL_OK) {
    k->busy = 1;
    return;
  }
  if (!dr->c->err[0]) snprintf(dr->c->err, sizeof dr->c->err, "submission refused: %s", err.msg);
  k->resume_at = k->t_sub + MS;
}

static void eng_done(void *user, resil_engine_handle *h, resil_outcome o,
                     resil_http_response *resp) {
  (void)h;
  eng_call *k = user;
  eng_drive *dr = k->dr;
  rig *g = dr->g;
  resil_http_response_free(resp);
  k->busy = 0;
  /* The calls the engine's free ends (CANCELLED) after the rig stopped. */
  if (atomic_load_explicit(&g->stop, memory_order_relaxed)) return;
  int open = open_refusal(&o);
  int64_t bin = (k->t_sub - g->t0) / MS;
  if (!g->rt && !open && bin >= 0 && bin < NBINS) {
    dr->c->dec[bin]++;
    if (o.kind != RESIL_REJECTED) dr->c->adm[bin]++;
  }
  if (open)
    k->resume_at = lab_now_ns() + MS;
  else
    eng_submit(k);
}

static void *engine_caller(void *arg) {
  caller *c = arg;
  rig *g = c->rig;
  eng_drive dr;
  memset(&dr, 0, sizeof dr);
  dr.c = c;
  dr.g = g;
  /* lab_engine_open's checks go to a result of this thread's; rig_free
   * reports them. */
  lab_result er;
  memset(&er, 0, sizeof er);
  er.pass = 1;
  if (!(dr.le = lab_engine_open(&er, g->cl))) {
    snprintf(c->err, sizeof c->err, "%s", er.failure);
    return NULL;
  }
  resil_engine_policies_init(&dr.pol);
  dr.pol.breaker = g->br;
  dr.pol.retry = g->rt;
  int n = g->in_flight < MAX_CALLERS ? g->in_flight : MAX_CALLERS;
  for (int i = 0; i < n; i++) {
    dr.calls[i].dr = &dr;
    eng_submit(&dr.calls[i]);
  }
  resil_loop *loop = lab_engine_loop(dr.le);
  while (!atomic_load_explicit(&g->stop, memory_order_relaxed)) {
    resil_loop_run_once(loop, MS, NULL);
    int64_t now = lab_now_ns();
    for (int i = 0; i < n; i++)
      if (!dr.calls[i].busy && dr.calls[i].resume_at <= now) eng_submit(&dr.calls[i]);
  }
  c->engine_calls = lab_engine_calls(dr.le);
  lab_engine_close(dr.le);
  return NULL;
}

/* R2's retries sent on the engine: the retry's attempt listener, at the
 * end of each attempt. An attempt after the first that was sent (neither
 * REJECTED nor NOT_SENT) is counted as r2_call counts one as it is sent:
 * that was a transfer's time before (about a ms), too short for the
 * breaker to begin recovering (300 ms of OPEN come first); a retry sent in
 * a ramp's last ms would count as after it (the wrong variant sends them
 * throughout the ramp). */
static void r2_on_attempt(void *user, const resil_attempt_info *info) {
  if (info->attempt > 1 && info->outcome.kind != RESIL_REJECTED &&
      info->outcome.kind != RESIL_NOT_SENT)
    r2_count_retry(user);
}
#endif

/* The run's callers: n threads running fn on the blocking path; on the
 * engine path one thread (engine_caller) keeping n calls in flight. */
static int start_path_callers(lab_result *r, rig *g, int n, void *(*fn)(void *)) {
#ifdef RESIL_HAVE_LOOP
  if (r->path == LAB_PATH_ENGINE) {
    g->in_flight = n;
    return start_callers(r, g, 1, engine_caller);
  }
#endif
  return start_callers(r, g, n, fn);
}

/* ---- R1, R3: callers on the split form ----------------------------------- */

static void *split_caller(void *arg) {
  caller *c = arg;
  rig *g = c->rig;
  while (!atomic_load_explicit(&g->stop, memory_order_relaxed)) {
    int64_t t = lab_now_ns();
    int64_t bin = (t - g->t0) / MS;
    resil_breaker_permit p;
    resil_reason why = RESIL_REASON_NONE;
    resil_decision d = resil_breaker_try_acquire_why(g->br, &p, &why);
    if (d == RESIL_DECISION_GO) {
      if (p.state == RESIL_BREAKER_CLOSED && bin >= 0 && bin < NBINS) {
        c->dec[bin]++;
        c->adm[bin]++;
      }
      resil_outcome o = resil_http_call(g->cl, "item", NULL, NULL, NULL, NULL);
      resil_breaker_record(g->br, &p, &o, lab_now_ns() - t);
    } else if (why == RESIL_REASON_RECOVERING) {
      if (bin >= 0 && bin < NBINS) c->dec[bin]++;
    } else {
      sleep_ms(1); /* OPEN, or HALF_OPEN without a probe left */
    }
  }
  return NULL;
}

/* Shares of buckets of width_ms from bin `from` (count buckets): share[k]
 * = admitted / decisions (-1 when no decision), decisions in dec[k]. */
static void buckets(rig *g, int64_t from, int count, int64_t width_ms, double *share,
                    uint64_t *dec) {
  for (int k = 0; k < count; k++) {
    uint64_t d = 0, a = 0;
    for (int64_t b = from + k * width_ms; b < from + (k + 1) * width_ms; b++) {
      if (b < 0 || b >= NBINS) continue;
      for (int i = 0; i < g->ncallers; i++) {
        d += g->callers[i]->dec[b];
        a += g->callers[i]->adm[b];
      }
    }
    share[k] = d ? (double)a / (double)d : -1.0;
    dec[k] = d;
  }
}

static double rel_ms(const rig *g, int64_t t_ns) { return (double)(t_ns - g->t0) / 1e6; }

/* observed.timeline ([{t_ms, state}] from CLOSED at 0, each transition at
 * its instant, as P6's), observed.ramps ([{from_ms, to_ms}]: each ramp from
 * RAMP_STARTED to RAMP_ENDED, or to the end of the run) and
 * observed.timeline_end_ms. */
static void obs_timeline(lab_result *r, rig *g, int64_t end_ns) {
  json_t *tl = json_array(), *ramps = json_array();
  json_array_append_new(tl, json_pack("{s:f,s:s}", "t_ms", 0.0, "state", "CLOSED"));
  double ramp_from = -1;
  for (size_t i = 0; i < g->nev; i++) {
    const ev_rec *e = &g->ev[i];
    double t = rel_ms(g, e->t_ns);
    if (e->kind == RESIL_BREAKER_EVENT_TRANSITION)
      json_array_append_new(
          tl, json_pack("{s:f,s:s}", "t_ms", t, "state", resil_breaker_state_name(e->to)));
    else if (e->kind == RESIL_BREAKER_EVENT_RAMP_STARTED)
      ramp_from = t;
    else if (e->kind == RESIL_BREAKER_EVENT_RAMP_ENDED && ramp_from >= 0) {
      json_array_append_new(ramps, json_pack("{s:f,s:f}", "from_ms", ramp_from, "to_ms", t));
      ramp_from = -1;
    }
  }
  if (ramp_from >= 0)
    json_array_append_new(ramps,
                          json_pack("{s:f,s:f}", "from_ms", ramp_from, "to_ms", rel_ms(g, end_ns)));
  lab_obs_json(r, "timeline", tl);
  lab_obs_json(r, "ramps", ramps);
  lab_obs_real(r, "timeline_end_ms", rel_ms(g, end_ns));
}

/* Appends buckets to observed.ramp_share: [{t_ms, width_ms, share,
 * decisions}] (buckets without a decision are left out). */
static void ramp_share_append(json_t *arr, int64_t from_bin, int count, int64_t width_ms,
                              const double *share, const uint64_t *dec) {
  for (int k = 0; k < count; k++)
    if (dec[k] > 0)
      json_array_append_new(arr, json_pack("{s:I,s:I,s:f,s:I}", "t_ms",
                                           (json_int_t)(from_bin + k * width_ms), "width_ms",
                                           (json_int_t)width_ms, "share", share[k], "decisions",
                                           (json_int_t)dec[k]));
}

static void breaker_base(resil_breaker_config *bc, const char *name) {
  resil_breaker_config_init(bc);
  bc->name = name;
  bc->window_size = 20;
  bc->minimum_calls = 10;
  bc->failure_rate_threshold_pct = 50;
  bc->open_wait_ns = 300 * MS;
  bc->half_open_permitted_calls = 5;
  bc->half_open_max_wait_ns = 5000 * MS;
  bc->event_capacity = 64;
}

enum { R1_CALLERS = 10, R1_BUCKET_MS = 200, R1_BUCKETS = 11 /* the 2 s ramp, then one */ };

/* One R1 run: 503 until OPEN, then healthy; buckets of R1_BUCKET_MS from
 * the ramp's start (or HALF_OPEN -> CLOSED without a ramp), nb of them.
 * Returns 0, or -1 after a failed check. */
static int r1_once(lab_result *r, int64_t ramp_ns, int nb, double *share, uint64_t *dec,
                   int with_obs, int64_t *start_bin) {
  resil_breaker_config bc;
  breaker_base(&bc, "r1");
  bc.ramp_duration_ns = ramp_ns;
  rig g;
  int rc = -1;
  if (rig_start(r, &g, &bc, with_obs ? "" : "control_") != 0 ||
      start_path_callers(r, &g, R1_CALLERS, split_caller) != 0)
    goto out;
  if (!lab_expect(r, "breaker_opens", wait_for(&g.opens, 1, 5000),
                  "the breaker did not open under 100 %% failures within 5 s"))
    goto out;
  resil_fixture_set_force_status(g.fx, 0); /* the upstream recovers */
  if (!lab_expect(r, "probes_pass", wait_for(&g.closes, 1, 5000),
                  "the breaker did not close within 5 s of the upstream's recovery"))
    goto out;
  pthread_mutex_lock(&g.mu);
  const ev_rec *st = ramp_ns ? nth_event(&g, 1, RESIL_BREAKER_EVENT_RAMP_STARTED, -1)
                             : nth_event(&g, 1, RESIL_BREAKER_EVENT_TRANSITION,
                                         RESIL_BREAKER_CLOSED);
  int64_t start_ns = st ? st->t_ns : 0;
  pthread_mutex_unlock(&g.mu);
  if (!lab_expect(r, "ramp_starts", st != NULL, "no RAMP_STARTED event after HALF_OPEN -> CLOSED"))
    goto out;
  int64_t end_ns = start_ns + (int64_t)nb * R1_BUCKET_MS * MS;
  sleep_until(end_ns + 5 * MS);
  rig_stop_callers(&g);
  *start_bin = (start_ns - g.t0) / MS;
  buckets(&g, *start_bin, nb, R1_BUCKET_MS, share, dec);
  if (with_obs) {
    obs_timeline(r, &g, end_ns);
    json_t *arr = json_array();
    ramp_share_append(arr, *start_bin, nb, R1_BUCKET_MS, share, dec);
    lab_obs_json(r, "ramp_share", arr);
    resil_breaker_metrics m;
    resil_breaker_get_metrics(g.br, &m);
    lab_obs_int(r, "ramp_rejected", (long long)m.total_ramp_rejected);
    lab_engine_expect_ran(r, g.engine_calls);
  }
  rc = 0;
out:
  rig_free(&g);
  return rc;
}

static int r1_run(lab_result *r, int wrong) {
  double share[R1_BUCKETS], cshare[2];
  uint64_t dec[R1_BUCKETS], cdec[2];
  int64_t start_bin = 0, cstart = 0;
  if (r1_once(r, wrong ? 0 : 2000 * MS, R1_BUCKETS, share, dec, 1, &start_bin) != 0)
    return r->pass;
  /* The control: the same, without a ramp, two buckets. */
  if (r1_once(r, 0, 2, cshare, cdec, 0, &cstart) != 0) return r->pass;
  int filled = 1, monotone = 1;
  double min_step = 1.0;
  json_t *shares = json_array(), *decs = json_array();
  for (int k = 0; k < R1_BUCKETS; k++) {
    json_array_append_new(shares, json_real(share[k]));
    json_array_append_new(decs, json_integer((json_int_t)dec[k]));
    if (dec[k] == 0) filled = 0;
    if (k > 0) {
      double step = share[k] - share[k - 1];
      if (step < min_step) min_step = step;
      if (step < 0) monotone = 0;
    }
  }
  double first = share[0], last = share[R1_BUCKETS - 1], wfirst = cshare[0];
  lab_obs_str(r, "ramp", wrong ? "none" : "2 s, from 10 %, linear");
  lab_obs_int(r, "callers", R1_CALLERS);
  lab_obs_int(r, "bucket_ms", R1_BUCKET_MS);
  lab_obs_json(r, "bucket_shares", shares);
  lab_obs_json(r, "bucket_decisions", decs);
  lab_obs_real(r, "first_bucket_share", first);
  lab_obs_real(r, "last_bucket_share", last);
  lab_obs_bool(r, "monotone", monotone);
  lab_obs_real(r, "min_step", min_step);
  lab_obs_str(r, "monotone_rule", "each bucket >= the previous one, exactly (no tolerance)");
  lab_obs_real(r, "wrong_first_bucket_share", wfirst);
  lab_summary(r, "%d %s after the probes passed: admitted %.3f in the first 200 ms, "
                 "%.3f in 2.0-2.2 s (%d buckets, %s, smallest step %+.3f); without a ramp %.3f "
                 "in the first 200 ms",
              R1_CALLERS,
              r->path == LAB_PATH_ENGINE ? "calls in flight on the engine" : "callers flat out",
              first, last, R1_BUCKETS, monotone ? "never falling" : "FALLING", min_step, wfirst);
  lab_expect(r, "buckets_filled", filled, "a 200 ms bucket saw no decision");
  lab_expect(r, "first_bucket_share", first >= 0 && first <= 0.25,
             "the first 200 ms admitted %.3f of the calls (at most 0.25 expected)", first);
  lab_expect(r, "last_bucket_share", last >= 0.95,
             "the 200 ms after the ramp admitted %.3f (at least 0.95 expected)", last);
  lab_expect(r, "monotone", monotone, "the admitted share fell from a bucket to the next (%+.3f)",
             min_step);
  lab_expect(r, "wrong_first_bucket_share", wfirst >= 0.95,
             "without a ramp the first 200 ms admitted %.3f (at least 0.95 expected)", wfirst);
  return r->pass;
}

static int r1_right(lab_result *r) { return r1_run(r, 0); }
static int r1_wrong(lab_result *r) { return r1_run(r, 1); }

/* ---- R3 ------------------------------------------------------------------ */

enum { R3_BUCKET_MS = 100, R3_INTO_RAMP_MS = 400 };

static int r3_run(lab_result *r, int wrong) {
  resil_breaker_config bc;
  breaker_base(&bc, "r3");
  bc.ramp_duration_ns = 2000 * MS;
  bc.open_wait_multiplier = wrong ? 1.0 : 2.0;
  rig g;
  if (rig_start(r, &g, &bc, "") != 0 ||
      start_path_callers(r, &g, R1_CALLERS, split_caller) != 0)
    goto out;
  if (!lab_expect(r, "breaker_opens", wait_for(&g.opens, 1, 5000),
                  "the breaker did not open under 100 %% failures within 5 s"))
    goto out;
  resil_fixture_set_force_status(g.fx, 0);
  if (!lab_expect(r, "ramp_starts", wait_for(&g.ramps_started, 1, 5000),
                  "no ramp within 5 s of the upstream's recovery"))
    goto out;
  pthread_mutex_lock(&g.mu);
  int64_t ramp1 = nth_event(&g, 1, RESIL_BREAKER_EVENT_RAMP_STARTED, -1)->t_ns;
  pthread_mutex_unlock(&g.mu);
  sleep_until(ramp1 + R3_INTO_RAMP_MS * MS);
  resil_fixture_set_force_status(g.fx, 503); /* fails again during the ramp */
  int reopened_in_time = wait_for(&g.opens, 2, 3000);
  resil_fixture_set_force_status(g.fx, 0);
  int restarted = reopened_in_time && wait_for(&g.ramps_started, 2, 5000);
  int64_t end_ns = lab_now_ns();
  if (restarted) {
    pthread_mutex_lock(&g.mu);
    int64_t ramp2 = nth_event(&g, 2, RESIL_BREAKER_EVENT_RAMP_STARTED, -1)->t_ns;
    pthread_mutex_unlock(&g.mu);
    end_ns = ramp2 + R3_INTO_RAMP_MS * MS;
    sleep_until(end_ns + 5 * MS);
  }
  rig_stop_callers(&g);
  pthread_mutex_lock(&g.mu);
  const ev_rec *open1 = nth_event(&g, 1, RESIL_BREAKER_EVENT_TRANSITION, RESIL_BREAKER_OPEN);
  const ev_rec *open2 = nth_event(&g, 2, RESIL_BREAKER_EVENT_TRANSITION, RESIL_BREAKER_OPEN);
  const ev_rec *ended1 = nth_event(&g, 1, RESIL_BREAKER_EVENT_RAMP_ENDED, -1);
  const ev_rec *half2 = nth_event(&g, 2, RESIL_BREAKER_EVENT_TRANSITION, RESIL_BREAKER_HALF_OPEN);
  const ev_rec *r1s = nth_event(&g, 1, RESIL_BREAKER_EVENT_RAMP_STARTED, -1);
  const ev_rec *r2s = nth_event(&g, 2, RESIL_BREAKER_EVENT_RAMP_STARTED, -1);
  int reopened = open2 && ended1 && ended1->cause == RESIL_BREAKER_CAUSE_FAILURE_RATE &&
                 open2->cause == RESIL_BREAKER_CAUSE_FAILURE_RATE && r1s &&
                 open2->t_ns > r1s->t_ns && open2->t_ns - r1s->t_ns < 2000 * MS;
  double first_wait = open1 ? (double)open1->open_wait_ns / 1e6 : -1;
  double wait = open2 ? (double)open2->open_wait_ns / 1e6 : -1;
  double waited = open2 && half2 ? (double)(half2->t_ns - open2->t_ns) / 1e6 : -1;
  int64_t b1 = r1s ? (r1s->t_ns - g.t0) / MS : 0, b2 = r2s ? (r2s->t_ns - g.t0) / MS : 0;
  int64_t ramp1_end = open2 ? (open2->t_ns - g.t0) / MS : b1;
  pthread_mutex_unlock(&g.mu);
  int n1 = (int)((ramp1_end - b1) / R3_BUCKET_MS), n2 = R3_INTO_RAMP_MS / R3_BUCKET_MS;
  if (n1 < 0) n1 = 0;
  if (n1 > 20) n1 = 20;
  double s1[20], s2[R3_INTO_RAMP_MS / R3_BUCKET_MS];
  uint64_t d1[20], d2[R3_INTO_RAMP_MS / R3_BUCKET_MS];
  buckets(&g, b1, n1, R3_BUCKET_MS, s1, d1);
  json_t *arr = json_array();
  ramp_share_append(arr, b1, n1, R3_BUCKET_MS, s1, d1);
  double second_first = -1;
  if (r2s) {
    buckets(&g, b2, n2, R3_BUCKET_MS, s2, d2);
    ramp_share_append(arr, b2, n2, R3_BUCKET_MS, s2, d2);
    second_first = s2[0];
  }
  obs_timeline(r, &g, end_ns);
  lab_obs_json(r, "ramp_share", arr);
  lab_obs_real(r, "open_wait_multiplier", bc.open_wait_multiplier);
  lab_obs_bool(r, "reopened", reopened);
  lab_obs_real(r, "first_wait_ms", first_wait);
  lab_obs_real(r, "wait_ms", wait);
  lab_obs_real(r, "waited_ms", waited);
  lab_obs_bool(r, "ramp_restarted", r2s != NULL);
  lab_obs_real(r, "second_ramp_first_bucket_share", second_first);
  lab_summary(r, "the upstream fails 400 ms into the ramp: %s (ramp ended %s), OPEN wait %.0f ms "
                 "after %.0f ms (HALF_OPEN %.1f ms later), ramp %s, admitting %.3f in its first "
                 "100 ms",
              reopened ? "reopened" : "NOT reopened",
              ended1 ? resil_breaker_cause_name(ended1->cause) : "never", wait, first_wait, waited,
              r2s ? "started over" : "NOT restarted", second_first);
  lab_expect(r, "reopened", reopened,
             "the breaker did not open during the ramp on the failure rate (second OPEN %s, "
             "ramp ended %s)",
             open2 ? "seen" : "missing",
             ended1 ? resil_breaker_cause_name(ended1->cause) : "never");
  lab_expect(r, "wait_longer", open2 && open1 && wait > first_wait,
             "the OPEN after the ramp waits %.0f ms, not longer than the first %.0f ms", wait,
             first_wait);
  lab_expect(r, "ramp_restarts", r2s && second_first >= 0 && second_first <= 0.25,
             "after the next probes the ramp %s (first 100 ms admitted %.3f, at most 0.25 "
             "expected)",
             r2s ? "started" : "did not start", second_first);
  lab_engine_expect_ran(r, g.engine_calls);
out:
  rig_free(&g);
  return r->pass;
}

static int r3_right(lab_result *r) { return r3_run(r, 0); }
static int r3_wrong(lab_result *r) { return r3_run(r, 1); }

/* ---- R2: Retry(Breaker(call)) --------------------------------------------- */

enum { R2_CALLERS = 4 };

static int r2_run(lab_result *r, int wrong) {
  resil_breaker_config bc;
  breaker_base(&bc, "r2");
  bc.ramp_duration_ns = 1000 * MS;
  rig g;
  resil_error e;
  if (rig_start(r, &g, &bc, "") != 0) goto out;
  resil_retry_config rc;
  resil_retry_config_init(&rc);
  rc.name = "r2";
  rc.max_attempts = 2;
  rc.wait_ns = 5 * MS;
  rc.retry_during_recovery = wrong;
  int engine = r->path == LAB_PATH_ENGINE;
#ifdef RESIL_HAVE_LOOP
  if (engine) {
    rc.on_attempt = r2_on_attempt;
    rc.on_attempt_user = &g;
  }
#endif
  if (!lab_check(r, resil_retry_new(&rc, &g.rt, &e) == RESIL_OK, "retry: %s", e.msg)) goto out;
  lab_ops_add_retry(r, "retry", g.rt);
  /* The blocking path's chain; on the engine the retry and the breaker are
   * the calls' policies (engine_caller). */
  if (!engine) {
    resil_chain_config chc;
    resil_chain_config_init(&chc);
    chc.name = "r2";
    if (!lab_check(r, resil_chain_new(&chc, &g.ch, &e) == RESIL_OK, "chain: %s", e.msg) ||
        !lab_check(r,
                   resil_chain_add_retry(g.ch, g.rt) == RESIL_OK &&
                       resil_chain_add_breaker(g.ch, g.br) == RESIL_OK,
                   "chain layers refused"))
      goto out;
    lab_ops_add_chain(r, "chain", g.ch);
  }
  if (start_path_callers(r, &g, R2_CALLERS, r2_caller) != 0) goto out;
  if (!lab_expect(r, "breaker_opens", wait_for(&g.opens, 1, 5000),
                  "the breaker did not open under 100 %% failures within 5 s"))
    goto out;
  resil_fixture_set_force_status(g.fx, 0);
  if (!lab_expect(r, "ramp_starts", wait_for(&g.ramps_started, 1, 5000),
                  "no ramp within 5 s of the upstream's recovery"))
    goto out;
  /* The ramp ends (completed, or cut short by an OPEN that a burst of
   * failed probes would cause: then the next one), then 500 ms of calls. */
  int64_t limit = lab_now_ns() + 8000 * MS;
  int completed = 0;
  while (!completed && lab_now_ns() < limit) {
    sleep_ms(5);
    pthread_mutex_lock(&g.mu);
    for (size_t i = 0; i < g.nev; i++)
      if (g.ev[i].kind == RESIL_BREAKER_EVENT_RAMP_ENDED &&
          g.ev[i].cause == RESIL_BREAKER_CAUSE_RAMP_COMPLETED)
        completed = 1;
    pthread_mutex_unlock(&g.mu);
  }
  if (completed) sleep_ms(500);
  rig_stop_callers(&g);
  obs_timeline(r, &g, lab_now_ns());
  resil_retry_stats st;
  resil_retry_get_stats(g.rt, &st);
  long during = atomic_load(&g.retries_during), after = atomic_load(&g.retries_after),
       before = atomic_load(&g.retries_before);
  char nest[96];
  if (g.ch)
    resil_chain_nesting(g.ch, nest, sizeof nest);
  else
    snprintf(nest, sizeof nest, "Retry(Breaker(call)) as the engine's policies");
  lab_obs_str(r, "chain", nest);
  lab_obs_int(r, "retry_during_recovery", wrong);
  lab_obs_int(r, "retries_before_recovery", before);
  lab_obs_int(r, "retries_during_recovery", during);
  lab_obs_int(r, "suppressed_retries", (long long)st.suppressed_recovering);
  lab_obs_int(r, "retries_after_ramp", after);
  lab_obs_int(r, "logical_calls", (long long)st.calls);
  lab_obs_int(r, "attempts", (long long)st.attempts);
  lab_obs_bool(r, "ramp_completed", completed);
  lab_summary(r, "%s, 1 call in 16 with a first attempt 503: %ld retries sent during HALF_OPEN and "
                 "the 1 s ramp, %llu suppressed, %ld sent after the ramp (%ld before the OPEN)",
              nest, during, (unsigned long long)st.suppressed_recovering, after, before);
  lab_expect(r, "ramp_completed", completed, "the ramp did not complete within 8 s");
  lab_expect(r, "no_retry_during_recovery", during == 0,
             "%ld retries reached the upstream while the breaker was HALF_OPEN or ramping",
             during);
  lab_expect(r, "suppressed_retries", st.suppressed_recovering > 0,
             "no retry was suppressed during recovery");
  lab_expect(r, "retries_after_ramp", after > 0, "no retry was sent after the ramp");
  lab_engine_expect_ran(r, g.engine_calls);
out:
  rig_free(&g);
  return r->pass;
}

static int r2_right(lab_result *r) { return r2_run(r, 0); }
static int r2_wrong(lab_result *r) { return r2_run(r, 1); }

const lab_experiment lab_recovery_experiments[] = {
    {"R1",
     "breaker opens under 100 % failures, the upstream recovers, the probes pass: a 2 s ramp "
     "with 10 callers flat out admits <= 25 % in the first 200 ms, >= 95 % after, never falling",
     r1_right, r1_wrong, "no ramp (full traffic right after HALF_OPEN)", "first_bucket_share",
     LAB_PATHS_BOTH},
    {"R2",
     "Retry(Breaker(HTTP)): no retry sent during HALF_OPEN and the ramp, the suppressed ones "
     "counted; retries resume after the ramp",
     r2_right, r2_wrong, "retry_during_recovery = 1", "no_retry_during_recovery",
     LAB_PATHS_BOTH},
    {"R3",
     "the upstream fails again during the ramp: the breaker opens with the next, longer wait "
     "and the ramp starts over after the next probes",
     r3_right, r3_wrong, "open_wait_multiplier 1 (the wait does not grow)", "wait_longer",
     LAB_PATHS_BOTH},
    {NULL, NULL, NULL, NULL, NULL, NULL, 0}};

#else

const lab_experiment lab_recovery_experiments[] = {{NULL, NULL, NULL, NULL, NULL, NULL, 0}};

#endif
