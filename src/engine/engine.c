/* The async engine (include/resil/engine.h): a call state machine over
 * libcurl's multi_socket interface, driven by a resil_loop_adapter. Every
 * attempt is prepared, guarded and classified by src/http/transfer.c, the
 * same code the blocking path runs; this file only decides when attempts
 * start and end.
 *
 * States of a call:
 *   START  submitted; its timer fires on a later loop iteration
 *   WAIT   waiting for a rate-limiter reservation or a retry backoff (timer)
 *   BHWAIT queued for a bulkhead slot (resil_bulkhead_enqueue); `t` is the
 *          max wait; a release hands the slot over on any thread, which
 *          forwards it to the loop (e->granted, the adapter's wake)
 *   CWAIT  queued in the engine for a connection (see "connections"),
 *          bounded by the queue's one timer and `dl`
 *   DNSWAIT waiting for the first lookup of its upstream's name (see
 *          "a resolved name's first lookup"), bounded by `t` and `dl`
 *   FLIGHT one transfer in the multi handle
 *   DONE   completed (done_fn called); kept only while handles remain
 * Every call has four timers on the engine's heap: `t` (start, waits, the
 * bulkhead's max wait), `dl` (the logical deadline), `at` (the primary
 * transfer's attempt timeout, or the client's response timeout once the
 * request is on the wire) and `ht` (the next hedge); each hedge transfer
 * has an `at` of its own (eng_hedge). While hedging, FLIGHT
 * means "some transfer of the attempt is in libcurl": the primary (call->x)
 * and/or hedges (call->hx). A call whose ctx has a cancel token subscribes
 * to it while it runs (call->tsub): a signal cancels it as
 * resil_engine_cancel does. */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <string.h>
#include <time.h>

#include "core/timerheap.h"
#include "engine/engine_int.h"
#include "http/client_int.h"
#include "http/message.h"
#include "http/response_int.h"
#include "http/slot.h"
#include "http/transfer.h"
#include "resil/engine.h"

#define RESIL_MAGIC_ENGINE 0x454e474eu /* "ENGN" */

enum { ST_START = 0, ST_WAIT, ST_FLIGHT, ST_DONE, ST_BHWAIT, ST_CWAIT, ST_DNSWAIT };

/* The per-attempt steps (see "steps"). */
enum { STEP_RL = ENG_STEP_RL, STEP_BR = ENG_STEP_BR, STEP_BH = ENG_STEP_BH };

/* A transfer waiting in the engine's queue for a connection (see
 * "connections" below). */
typedef struct eng_cwait {
  struct eng_cwait *prev, *next;
  uint32_t origin;
  int queued;
  /* Called (loop thread, from conn_dispatch) once the transfer may start:
   * it is off the queue and must start now (or end). */
  void (*go)(struct eng_cwait *w);
  /* When the wait ends without a connection (loop clock; INT64_MAX never),
   * and what then runs (w is off the queue). Entries with an end must
   * come in nondecreasing order of it (a FIFO with one lease timeout). */
  int64_t t0, expires_at;
  void (*expired)(struct eng_cwait *w);
} eng_cwait;

typedef struct eng_xfer {
  http_slot s; /* first: CURLINFO_PRIVATE is &s */
  struct resil_engine_handle *call;
  uint32_t hedge_n; /* 0: the attempt's primary; k >= 2: hedge attempt k */
  struct eng_xfer *next_free;
} eng_xfer;

/* A socket libcurl asked to watch (curl_multi_assign'ed). */
typedef struct eng_sock {
  int fd;
  struct eng_sock *prev, *next;
} eng_sock;

/* One hedge transfer of the current attempt (hedge attempt k is hx[k-2]).
 * `at` is its own attempt timeout, then (once sent) the client's response
 * timeout, as the primary's `at` (see on_hedge_sent). */
typedef struct eng_hedge {
  eng_xfer *x; /* NULL: not in flight */
  int64_t t0;
  int has_bh, has_permit;
  resil_breaker_permit permit;
  struct resil_engine_handle *call;
  uint32_t n;     /* its hedge attempt number (k) */
  int at_kind;    /* ABORT_* the `at` timer ends it with */
  int64_t end_at; /* its attempt timeout (loop clock); INT64_MAX none */
  resil__timer at;
} eng_hedge;

/* Per-layer counters (resil_engine_stats), written on the loop thread only
 * (st_inc: a relaxed load and store, no read-modify-write needed), read
 * from any thread. */
typedef struct eng_stats {
  _Atomic uint64_t submitted, completed, answered, not_sent, unknown, rejected;
  _Atomic uint64_t transfers, retries, hedges_sent, hedges_rejected, hedge_wins, losers,
      unhedged;
  _Atomic uint64_t rej_ratelimiter, rej_breaker, rej_bh_full, rej_bh_wait, rej_pool;
  _Atomic uint64_t rej_recovering, hedges_recovering, retries_recovering;
  /* rej_breaker less rej_recovering, counted on its own so that a reader
   * on another thread never sees it go down (resil__engine_breaker_open). */
  _Atomic uint64_t rej_breaker_open;
} eng_stats;

static inline void st_inc(_Atomic uint64_t *c) {
  atomic_store_explicit(c, atomic_load_explicit(c, memory_order_relaxed) + 1,
                        memory_order_relaxed);
}
#define ST_INC(e, f) st_inc(&(e)->st.f)

struct resil_engine_handle {
  atomic_int refs;
  atomic_int cancel_req;
  atomic_int finished;                   /* done_fn called or running */
  const resil_allocator *alloc;
  struct resil_engine_handle *cancel_next; /* under e->mu */
  struct resil_engine_handle *grant_next;  /* under e->mu */
  resil_bulkhead_waiter *bw;               /* created at the first WAIT */
  int bh_waiting; /* an enqueue answered WAIT and the loop has not yet
                     learnt the waiter's fate (dequeue or the grant) */
  atomic_int grant_in; /* bh_ready has pushed the call on e->granted */
  resil_engine *e;
  struct resil_engine_handle *prev, *next; /* active list */
  resil_http_request *req;
  resil_engine_policies pol;
  resil_retry_state *rst;
  resil_ctx ctx;
  int state;
  int deadline_hit;
  int rl_held;    /* this attempt's rate-limiter permit is reserved */
  /* The per-attempt steps (STEP_*), outermost first, and the one to run
   * next: 0 for a new attempt; a rate-limiter WAIT (rl_held) resumes at
   * its own step, a bulkhead grant at the step after it (see "steps"). */
  unsigned char steps[3];
  unsigned char nsteps, step_i;
  /* A breaker outside the retry (resil_engine_call_chain): one permit per
   * logical call, taken at its start, recorded at finish with the final
   * outcome and the call's duration. */
  resil_breaker *cbr;
  resil_breaker_permit cpermit;
  int has_cpermit;
  int64_t call_t0;
  /* ... and a rate limiter outside the retry: one permit per logical call
   * (a WAIT is `t`, the call staying in ST_START). The outer steps, in the
   * chain's order (STEP_BR, STEP_RL), their layers, the next to run. */
  resil_ratelimiter *crl;
  int crl_held;
  unsigned char outer[2], outer_layer[2], nouter, outer_i;
  int outer_rej_layer; /* the outer layer that refused the call, -1 none */
  /* resil_engine_call_chain: the chain whose layer counters the call feeds
   * (NULL: none), see "chain counters". */
  resil_chain *chain;
  int nlayers, retry_layer, hedge_layer;
  uint32_t att_hedges; /* hedges the policy sent in this attempt */
  unsigned char step_layer[3];
  int rej_layer; /* the layer that refused this attempt, -1 none */
  int has_permit; /* breaker permit held */
  int has_bh;     /* bulkhead slot held */
  int at_kind;    /* ABORT_* the `at` timer ends the transfer with */
  resil_breaker_permit permit;
  resil__timer t, dl, at;
  int64_t deadline_at;    /* loop clock; INT64_MAX none */
  /* The ctx deadline on CLOCK_MONOTONIC, what the deadline header counts
   * down to (transfer.h, budget_end); INT64_MAX none. */
  int64_t deadline_mono;
  int64_t attempt_end_at; /* loop clock; INT64_MAX none */
  int64_t att_t0;
  uint32_t attempts;
  uint32_t tries; /* attempts in the retry's sense begun (stats: retries) */
  resil_outcome last;
  eng_xfer *x;
  /* Hedging of the current attempt (see "hedging" below). */
  resil_hedge_call hc;
  int hedging;    /* resil_hedge_begin answered WAIT for this attempt */
  int hedge_over; /* a verdict ended the attempt: the rest are losers */
  resil__timer ht;
  eng_hedge hx[RESIL_HEDGE_MAX_HEDGES];
  resil_http_response *res;
  resil_engine_done_fn done;
  void *user;
  resil_cancel_sub *tsub; /* the ctx token's subscription, until finish */
  /* resil__engine_defer_report: an unretried call's attempt is reported by
   * the flow above (resil__engine_report), not by after_attempt. */
  int defer_report;
  int report_pending; /* after_attempt left the report to the flow */
  int64_t report_dur;
  /* ST_CWAIT: queued for a connection (the queue's timer bounds it). */
  eng_cwait cw;
  /* ST_DNSWAIT: on e's list of calls waiting for a first lookup, since
   * dns_t0 (loop clock). */
  struct resil_engine_handle *dprev, *dnext;
  int dns_queued;
  int64_t dns_t0;
  /* The instance the primary chose (ep->group, instances.c) until its
   * transfer takes it (x->s.inst), and whether it probes it. */
  http_inst *inst;
  int inst_probe;
  /* A rate-limiter decision asked asynchronously (see "asynchronous
   * decisions"): pending in rq (the call in ST_WAIT, or ST_START for an
   * outer limiter), then its answer kept in rl_ans until the step that
   * asked takes it. */
  resil_ratelimiter_async rq;
  int rl_ans;
  resil_decision ans_d;
  int64_t ans_wait;
  resil_reason ans_why;
};

/* An fd a rate-limiter backend watches through the engine (see
 * "asynchronous decisions"). */
typedef struct eng_bwatch {
  struct eng_bwatch *next;
  resil_engine *e;
  int fd;
  resil_io_fn cb;
  void *arg;
} eng_bwatch;

/* A backend's end (rll.on_end), run by resil_engine_free. */
typedef struct eng_bend {
  struct eng_bend *next;
  resil_loop_fn end;
  void *arg;
} eng_bend;

/* A backend's timer on the engine's heap. */
typedef struct eng_btimer {
  resil__timer t;
  resil_engine *e;
  resil_loop_fn cb;
  void *arg;
} eng_btimer;

struct resil_engine {
  uint32_t magic;
  const resil_allocator *alloc;
  const resil_loop_adapter *ad;
  resil_http_client *client;
  CURLM *multi;
  resil__timerheap heap;
  resil__timer curl_timer;
  int armed;
  int64_t armed_at;
  pthread_mutex_t mu;
  resil_engine_handle *cancel_head; /* under mu */
  resil_engine_handle *granted;     /* under mu: bulkhead slots handed over */
  /* Loop thread: enqueues that answered WAIT whose waiter was neither
   * withdrawn nor its grant drained from `granted` yet (each holds a ref
   * on its call). */
  size_t bh_outstanding;
  resil_engine_handle *calls;       /* not DONE */
  eng_xfer *free_x;
  size_t nfree, max_free;
  eng_sock *socks;
  size_t active, in_flight, peak;
  /* keyed.c's hooks (engine_int.h) */
  resil__engine_ext *exts;      /* attached                */
  resil__engine_ext *post_head; /* posted, under mu        */
  eng_stats st; /* resil_engine_get_stats */
  /* Connections (see "connections"): the client's limit (per origin:
   * resil__http_origin_cap), transfers in libcurl per origin, and the FIFO
   * queue of transfers waiting for one. */
  size_t conn_cap;
  uint32_t *origin_busy, *origin_waiting; /* client's norigins each */
  eng_cwait *cq_head, *cq_tail;
  size_t queued, peak_queued;
  /* One timer for the whole queue: at (or before) the earliest expires_at. */
  resil__timer conn_timer;
  int conn_kick; /* a connection was given back while transfers wait */
  /* Calls waiting for a resolved name's first lookup (ST_DNSWAIT), the
   * client's word that one ended (dns_watch, on the resolver thread: sets
   * dns_kick and wakes the loop). */
  resil_engine_handle *dq_head, *dq_tail;
  http_watch dns_watch;
  atomic_int dns_kick;
  /* Set by resil_engine_free() before it ends the calls: a done_fn it runs
   * that submits again is refused (otherwise free never ends). */
  int freeing;
  /* Asynchronous rate-limiter decisions: the loop lent to backends, their
   * watched fds, and what they asked to run at free (rll.on_end). */
  resil_ratelimiter_loop rll;
  eng_bwatch *bwatches;
  struct eng_bend *bends;
};

static int64_t eng_now(const resil_engine *e) {
  if (e->ad->now_ns) return e->ad->now_ns(e->ad->self);
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * RESIL_NS_PER_S + ts.tv_nsec;
}

/* ---- timers -------------------------------------------------------------- */

static void on_adapter_timer(void *arg);
static void conn_dispatch(resil_engine *e);

/* Puts the earliest heap timer on the adapter's one timer. Called at the
 * end of every entry point. */
static void rearm(resil_engine *e) {
  resil__timer *t = resil__timerheap_first(&e->heap);
  if (!t) {
    if (e->armed) e->ad->timer(e->ad->self, -1, NULL, NULL);
    e->armed = 0;
    return;
  }
  if (e->armed && e->armed_at == t->at_ns) return;
  int64_t d = t->at_ns - eng_now(e);
  if (d < 0) d = 0;
  if (e->ad->timer(e->ad->self, d, on_adapter_timer, e) == 0) {
    e->armed = 1;
    e->armed_at = t->at_ns;
  } else {
    e->armed = 0;
  }
}

static void on_adapter_timer(void *arg) {
  resil_engine *e = arg;
  e->armed = 0;
  int64_t now = eng_now(e);
  resil__timer *t;
  while ((t = resil__timerheap_pop_due(&e->heap, now)) != NULL) t->cb(t->arg);
  if (e->conn_kick) conn_dispatch(e);
  rearm(e);
}

static int arm_at(resil_engine *e, resil__timer *t, int64_t at) {
  return resil__timerheap_arm(&e->heap, t, at);
}

/* The due timers of calls (deadlines, attempt timeouts, waits), run first
 * thing in every I/O callback. A loop runs an iteration's ready fds (up to
 * hundreds with thousands of transfers) before its timers, so without this
 * a due deadline waits behind all of that libcurl work: lab A3 measured
 * 130-200 I/O callbacks, 22-42 ms, run while its deadlines were due (under
 * ThreadSanitizer on a loaded machine). libcurl's own timer is left to the
 * adapter's timer (once per iteration, as before): it is due after nearly
 * every action, and each socket action also runs libcurl's expired
 * timeouts. */
static void run_due_calls(resil_engine *e) {
  const resil__timer *f = resil__timerheap_first(&e->heap);
  if (!f) return;
  int64_t now = eng_now(e);
  if (f->at_ns > now) return;
  resil__timer *t;
  int64_t curl_at = -1;
  while ((t = resil__timerheap_pop_due(&e->heap, now)) != NULL) {
    if (t == &e->curl_timer) curl_at = t->at_ns;
    else t->cb(t->arg);
  }
  if (curl_at >= 0 && !resil__timer_armed(&e->curl_timer)) arm_at(e, &e->curl_timer, curl_at);
}

/* ---- calls ---------------------------------------------------------------- */

static void call_unref(resil_engine_handle *call) {
  if (atomic_fetch_sub_explicit(&call->refs, 1, memory_order_acq_rel) != 1) return;
  resil__free(call->alloc, call);
}

static void token_unsubscribe(resil_engine_handle *call);
static void dns_withdraw(resil_engine_handle *call);

/* Keeps a finished transfer's easy handle for the next attempt, up to
 * twice the connection limit idle; frees the rest. */
static void xfer_put(resil_engine *e, eng_xfer *x) {
  x->call = NULL;
  if (e->nfree >= e->max_free) {
    resil__http_slot_cleanup(e->client, &x->s);
    resil__free(e->alloc, x);
    return;
  }
  x->next_free = e->free_x;
  e->free_x = x;
  e->nfree++;
}

static eng_xfer *xfer_get(resil_engine *e) {
  eng_xfer *x = e->free_x;
  if (x) {
    e->free_x = x->next_free;
    e->nfree--;
    return x;
  }
  x = resil__calloc(e->alloc, sizeof *x);
  if (!x) return NULL;
  if (resil__http_easy_setup(e->client, &x->s, 0) != 0 ||
      !(x->s.res = resil__http_response_new(e->alloc))) {
    resil__http_slot_cleanup(e->client, &x->s);
    resil__free(e->alloc, x);
    return NULL;
  }
  x->s.origin = -1;
  return x;
}

/* ---- connections ------------------------------------------------------------
 *
 * The engine hands libcurl at most the client's max_connections transfers
 * at once, and at most max_connections_per_host to one origin; every other
 * transfer waits, not sent (no attempt_begin yet), in e's FIFO queue of
 * eng_cwait entries. A transfer leaving libcurl (conn_out) only marks the
 * queue for dispatch; conn_dispatch, run at the end of the loop's entry
 * points (on_io, on_adapter_timer, on_wake) and never from inside another
 * call's transition, starts queued transfers in FIFO order while there is
 * room (an entry whose origin is at its limit is passed over for later
 * ones of other origins). A new transfer starts at once only when there is
 * room and nothing of its origin is queued or a dispatch is pending: no
 * newcomer overtakes a waiter. */

static int conn_room(const resil_engine *e, uint32_t origin) {
  return e->in_flight < e->conn_cap &&
         e->origin_busy[origin] < resil__http_origin_cap(e->client, origin);
}

/* May a new transfer to origin start now (without overtaking a waiter)? */
static int conn_admit(const resil_engine *e, uint32_t origin) {
  return !e->conn_kick && !e->origin_waiting[origin] && conn_room(e, origin);
}

/* A transfer enters libcurl, or leaves it. */
static void conn_in(resil_engine *e, uint32_t origin) {
  e->in_flight++;
  e->origin_busy[origin]++;
  if (e->in_flight > e->peak) e->peak = e->in_flight;
}

static void conn_out(resil_engine *e, uint32_t origin) {
  e->in_flight--;
  e->origin_busy[origin]--;
  if (e->queued) e->conn_kick = 1;
}

static void conn_enqueue(resil_engine *e, eng_cwait *w) {
  w->next = NULL;
  w->prev = e->cq_tail;
  if (e->cq_tail) e->cq_tail->next = w;
  else e->cq_head = w;
  e->cq_tail = w;
  w->queued = 1;
  e->queued++;
  if (e->queued > e->peak_queued) e->peak_queued = e->queued;
  e->origin_waiting[w->origin]++;
  /* The timer may stay at an earlier entry's end after that one left the
   * queue: it then fires early, finds nothing due, and moves on. */
  if (w->expires_at != INT64_MAX && !resil__timer_armed(&e->conn_timer))
    arm_at(e, &e->conn_timer, w->expires_at);
}

/* Takes w off the queue (a no-op when it is not queued). */
static void conn_withdraw(resil_engine *e, eng_cwait *w) {
  if (!w->queued) return;
  if (w->prev) w->prev->next = w->next;
  else e->cq_head = w->next;
  if (w->next) w->next->prev = w->prev;
  else e->cq_tail = w->prev;
  w->prev = w->next = NULL;
  w->queued = 0;
  e->queued--;
  e->origin_waiting[w->origin]--;
}

/* Start or queue: 1 when the transfer of w (origin, go and expired set)
 * may start now (the caller starts it at once, conn_in when it enters
 * libcurl); 0 when w is queued (since w->t0): w->go runs when a connection
 * is free, or w->expired once wait_ns (< 0: no bound) has passed, unless
 * w is withdrawn first (conn_withdraw); -1 when there is no room and
 * wait_ns is 0 (or the wait cannot be bounded: out of memory), w not
 * queued. Used by the primary transfer of an attempt (start_transfer);
 * hedge code may use it for its transfers. */
static int conn_start_or_queue(resil_engine *e, eng_cwait *w, int64_t wait_ns) {
  if (conn_admit(e, w->origin)) return 1;
  w->t0 = eng_now(e);
  if (wait_ns == 0) return -1;
  w->expires_at = wait_ns < 0 ? INT64_MAX : resil__sat_add(w->t0, wait_ns);
  conn_enqueue(e, w);
  if (w->expires_at != INT64_MAX && !resil__timer_armed(&e->conn_timer)) {
    conn_withdraw(e, w);
    return -1;
  }
  return 0;
}

/* The queue's timer: ends the waits that are due, in order. */
static void on_conn_timer(void *arg) {
  resil_engine *e = arg;
  int64_t now = eng_now(e);
  eng_cwait *w = e->cq_head;
  while (w) {
    if (w->expires_at == INT64_MAX) {
      w = w->next;
      continue;
    }
    if (w->expires_at > now) {
      arm_at(e, &e->conn_timer, w->expires_at);
      return;
    }
    conn_withdraw(e, w);
    w->expired(w); /* may queue again (at the tail): start from the head */
    w = e->cq_head;
  }
}

static void conn_dispatch(resil_engine *e) {
  eng_cwait *w = e->cq_head;
  while (w && e->in_flight < e->conn_cap) {
    if (e->origin_busy[w->origin] >= resil__http_origin_cap(e->client, w->origin)) {
      w = w->next;
      continue;
    }
    conn_withdraw(e, w);
    w->go(w); /* may change the queue: start again from its head */
    w = e->cq_head;
  }
  e->conn_kick = 0;
}

/* Gives back what an attempt that never started holds (a call ending while
 * queued for, or just handed, a bulkhead slot). */
static void release_holds(resil_engine_handle *call) {
  if (call->has_bh) {
    resil_bulkhead_release(call->pol.bulkhead);
    call->has_bh = 0;
  }
  if (call->has_permit) {
    resil_breaker_release(call->pol.breaker, &call->permit);
    call->has_permit = 0;
  }
}

/* ---- chain counters ------------------------------------------------------------
 * A call of resil_engine_call_chain feeds its chain's layer counters
 * (resil_chain_layer_stats) as resil_chain_run would: each attempt ending
 * is counted by the layers inside the retry down to the one that refused
 * it (counted as its rejection), or by all of them and the protected call
 * when it reached the transfer; the logical call's end by the retry layer
 * (its retries, its own refusal) and the layers outside it. A hedge layer
 * counts the hedges the policy sent in each attempt. */

static void chain_count_attempt(resil_engine_handle *call, const resil_outcome *o) {
  int rej = call->rej_layer;
  call->rej_layer = -1;
  if (call->hedge_layer >= 0 && call->att_hedges)
    (void)resil_chain_count_hedges(call->chain, (size_t)call->hedge_layer, call->att_hedges);
  for (int j = call->retry_layer + 1; j < call->nlayers; j++) {
    if (rej >= 0 && j > rej) break;
    (void)resil_chain_count_layer(call->chain, (size_t)j, o, j == rej, 0);
  }
  if (rej < 0) (void)resil_chain_count_layer(call->chain, (size_t)call->nlayers, o, 0, 0);
}

static void chain_count_call(resil_engine_handle *call, const resil_outcome *o) {
  for (int j = 0; j <= call->retry_layer; j++) {
    int rej = call->outer_rej_layer;
    if (rej >= 0 && j > rej) break;
    int rejected = j == rej;
    uint64_t retries = 0;
    if (j == call->retry_layer) {
      rejected = o->kind == RESIL_REJECTED &&
                 (call->tries == 0 || o->reason == RESIL_REASON_DEADLINE ||
                  o->reason == RESIL_REASON_RETRY_BUDGET);
      retries = call->tries > 1 ? call->tries - 1u : 0;
    }
    (void)resil_chain_count_layer(call->chain, (size_t)j, o, rejected, retries);
  }
}

/* Chooses an instance of req's upstream for an attempt (instances.c): the
 * blocking path's rule, one implementation. NULL when none is known. */
static http_inst *pick_instance(resil_http_request *req, int *probe) {
  http_inst *i = resil__http_inst_pick(req->ep->group, &req->tried, probe);
  if (i) atomic_store_explicit(&req->last_bit, i->bit + 1, memory_order_relaxed);
  return i;
}

/* The primary's chosen instance, never handed to a transfer, hears o (a
 * lease that expired, a call that ended while queued). */
static void inst_drop(resil_engine_handle *call, resil_outcome o) {
  if (!call->inst) return;
  http_inst *i = call->inst;
  call->inst = NULL;
  resil__http_inst_done(i, call->inst_probe, &o);
}

resil_http_request *resil__engine_request(resil_engine_handle *h) { return h->req; }

static void finish(resil_engine_handle *call, resil_outcome o) {
  resil_engine *e = call->e;
  resil_ratelimiter_withdraw_async(&call->rq);
  if (call->chain) chain_count_call(call, &o);
  release_holds(call);
  if (call->bw) {
    resil_bulkhead_waiter_free(call->bw);
    call->bw = NULL;
  }
  conn_withdraw(e, &call->cw);
  dns_withdraw(call);
  inst_drop(call, resil_outcome_make(RESIL_NOT_SENT, RESIL_REASON_CANCELLED));
  call->state = ST_DONE;
  resil__timerheap_disarm(&e->heap, &call->t);
  resil__timerheap_disarm(&e->heap, &call->dl);
  resil__timerheap_disarm(&e->heap, &call->at);
  resil__timerheap_disarm(&e->heap, &call->ht);
  if (call->prev) call->prev->next = call->next;
  else e->calls = call->next;
  if (call->next) call->next->prev = call->prev;
  call->prev = call->next = NULL;
  e->active--;
  token_unsubscribe(call);
  if (call->has_cpermit) {
    int64_t dur = eng_now(e) - call->call_t0;
    resil_breaker_record(call->cbr, &call->cpermit, &o, dur < 0 ? 0 : dur);
    call->has_cpermit = 0;
  }
  resil_http_response *r = call->res;
  call->res = NULL;
  ST_INC(e, completed);
  switch (o.kind) {
  case RESIL_ANSWERED: ST_INC(e, answered); break;
  case RESIL_NOT_SENT: ST_INC(e, not_sent); break;
  case RESIL_UNKNOWN: ST_INC(e, unknown); break;
  case RESIL_REJECTED: ST_INC(e, rejected); break;
  }
  if (o.stop == RESIL_STOP_RECOVERING) ST_INC(e, retries_recovering); /* retries last */
  atomic_store_explicit(&call->finished, 1, memory_order_release);
  call->done(call->user, call, o, r);
  resil_http_request_free(call->req);
  call->req = NULL;
  resil_retry_state_free(call->rst);
  call->rst = NULL;
  call_unref(call);
}

/* Ends the call between attempts (cancelled, out of time). */
static void finish_between(resil_engine_handle *call, resil_reason why, resil_stop stop) {
  resil_outcome o;
  if (call->attempts) {
    o = call->pol.retry ? resil_retry_result(call->rst) : call->last;
  } else {
    o = resil_outcome_make(why == RESIL_REASON_CANCELLED ? RESIL_NOT_SENT : RESIL_REJECTED, why);
    o.attempts = 0;
  }
  o.stop = stop;
  finish(call, o);
}

static const resil_ctx *attempt_ctx(resil_engine_handle *call) {
  return call->rst ? resil_retry_state_ctx(call->rst) : &call->ctx;
}

static void begin_attempt(resil_engine_handle *call);

/* The attempt ended with o after duration_ns: policies record it, the
 * retry decides. */
static void after_attempt(resil_engine_handle *call, const resil_outcome *o, int64_t duration_ns) {
  resil_engine *e = call->e;
  call->step_i = 0;
  if (call->chain) chain_count_attempt(call, o);
  call->att_hedges = 0;
  if (call->has_bh) {
    resil_bulkhead_release(call->pol.bulkhead);
    call->has_bh = 0;
  }
  if (call->has_permit) {
    resil_breaker_record(call->pol.breaker, &call->permit, o, duration_ns < 0 ? 0 : duration_ns);
    call->has_permit = 0;
  }
  call->last = *o;
  if (atomic_load_explicit(&call->cancel_req, memory_order_acquire)) {
    resil_outcome f = *o;
    f.stop = RESIL_STOP_CANCELLED;
    f.attempts = call->attempts;
    finish(call, f);
    return;
  }
  if (!call->pol.retry) {
    if (call->defer_report) {
      call->report_pending = 1;
      call->report_dur = duration_ns;
    } else {
      resil__http_report(e->client, 1, o, duration_ns, 0, -1, RESIL_STOP_NONE, call->req->key);
    }
    finish(call, *o);
    return;
  }
  int64_t wait = 0;
  resil_decision d = resil_retry_next_timed(call->pol.retry, call->rst, o, duration_ns, &wait);
  if (d == RESIL_DECISION_GO) {
    begin_attempt(call);
  } else if (d == RESIL_DECISION_WAIT) {
    call->state = ST_WAIT;
    if (arm_at(e, &call->t, resil__sat_add(eng_now(e), wait)) != 0)
      finish(call, resil_retry_result(call->rst));
  } else {
    finish(call, resil_retry_result(call->rst));
  }
}

static int hedge_primary_ended(resil_engine_handle *call, resil_outcome *o, int64_t dur);
static void hedge_begin(resil_engine_handle *call);

/* A transfer of call ends: removed from the multi handle, classified by
 * the shared transport rules. */
static void transfer_end(resil_engine_handle *call, int aborted, CURLcode rc) {
  resil_engine *e = call->e;
  eng_xfer *x = call->x;
  call->x = NULL;
  curl_multi_remove_handle(e->multi, x->s.e);
  conn_out(e, (uint32_t)x->s.origin);
  resil__timerheap_disarm(&e->heap, &call->at);
  resil_http_client *c = e->client;
  const resil_ctx *actx = attempt_ctx(call);
  resil_outcome o = resil__http_attempt_end(c, call->req, &x->s, aborted, rc);
  int64_t dur = eng_now(e) - call->att_t0;
  resil__http_attempt_done(c, call->req, &x->s, &o, actx->attempt, 0, dur);
  resil_http_response *old = call->res;
  call->res = x->s.res;
  x->s.res = old ? old : resil__http_response_new(e->alloc);
  if (!x->s.res) {
    resil__http_slot_cleanup(c, &x->s);
    resil__free(e->alloc, x);
  } else {
    xfer_put(e, x);
  }
  if (call->hedging && !call->hedge_over && !hedge_primary_ended(call, &o, dur)) return;
  call->state = ST_WAIT;
  after_attempt(call, &o, dur);
}

/* The time a transfer starting now may take: the deadline's rest, or the
 * attempt timeout (policies.attempt_timeout_ns) when shorter, which then
 * also sets *end_at (else INT64_MAX). The primary and every hedge alike. */
static int64_t transfer_left(const resil_engine_handle *call, int64_t now, int64_t *end_at) {
  int64_t left = call->deadline_at == INT64_MAX ? INT64_MAX : call->deadline_at - now;
  int64_t to = call->pol.attempt_timeout_ns;
  *end_at = INT64_MAX;
  if (to > 0 && to < left) {
    left = to;
    *end_at = resil__sat_add(now, to);
  }
  return left;
}

/* A transfer's request is on the wire: its timer `t` now ends it at the
 * client's response timeout (ABORT_RESPONSE) or at its attempt timeout
 * end_at (ABORT_DEADLINE), whichever comes first. */
static void arm_sent(resil_engine *e, const eng_xfer *x, resil__timer *t, int *kind,
                     int64_t end_at) {
  int64_t r = resil__sat_add(eng_now(e), x->s.x.response_timeout_ns);
  if (r < end_at) {
    *kind = ABORT_RESPONSE;
    arm_at(e, t, r);
  } else if (end_at != INT64_MAX) {
    *kind = ABORT_DEADLINE;
    arm_at(e, t, end_at);
  }
}

static void on_sent(void *arg) {
  resil_engine_handle *call = arg;
  if (!call->x) return;
  arm_sent(call->e, call->x, &call->at, &call->at_kind, call->attempt_end_at);
}

/* The transfer of the attempt enters libcurl now (a connection is free). */
static void transfer_start_now(resil_engine_handle *call) {
  resil_engine *e = call->e;
  resil_http_client *c = e->client;
  const resil_ctx *actx = attempt_ctx(call);
  int64_t now = eng_now(e);
  resil_outcome o;
  eng_xfer *x = xfer_get(e);
  if (!x) {
    o = resil_outcome_make(RESIL_NOT_SENT, RESIL_REASON_LOCAL_ERROR);
    inst_drop(call, o);
    resil__http_count_outcome(c, &o);
    resil__http_log_bare(c, call->req->ep, &o, actx->attempt, 0);
    call->attempts++;
    after_attempt(call, &o, 0);
    return;
  }
  /* resil__http_attempt_done gives the instance back. */
  x->s.inst = call->inst;
  x->s.probe = call->inst_probe;
  call->inst = NULL;
  int64_t left = transfer_left(call, now, &call->attempt_end_at);
  call->att_t0 = now;
  call->attempts++;
  if (resil__http_attempt_begin(c, call->req, &x->s, actx->attempt, actx->flags, left,
                                call->deadline_mono, &o) != 0) {
    resil__http_attempt_done(c, call->req, &x->s, &o, actx->attempt, 0, eng_now(e) - now);
    resil_http_response *old = call->res;
    call->res = x->s.res;
    x->s.res = old;
    if (!x->s.res) x->s.res = resil__http_response_new(e->alloc);
    if (x->s.res) xfer_put(e, x);
    else {
      resil__http_slot_cleanup(c, &x->s);
      resil__free(e->alloc, x);
    }
    after_attempt(call, &o, eng_now(e) - now);
    return;
  }
  x->s.x.on_sent = on_sent;
  x->s.x.on_sent_arg = call;
  x->call = call;
  x->hedge_n = 0;
  call->x = x;
  ST_INC(e, transfers);
  /* transfer_end() counts it out again, also when adding failed (then
   * classified as a local failure before sending, ABORT_LOCAL). */
  conn_in(e, (uint32_t)x->s.origin);
  if (curl_multi_add_handle(e->multi, x->s.e) != CURLM_OK) {
    transfer_end(call, ABORT_LOCAL, CURLE_FAILED_INIT);
    return;
  }
  call->state = ST_FLIGHT;
  if (call->attempt_end_at != INT64_MAX) {
    call->at_kind = ABORT_DEADLINE;
    arm_at(e, &call->at, call->attempt_end_at);
  }
  if (call->pol.hedge) hedge_begin(call);
}

/* The attempt's wait for a connection ended without one (the lease
 * timeout, or the deadline it is clipped to): NOT_SENT(POOL_TIMEOUT), as
 * on the blocking path, counted in the client's lease_timeouts; the retry
 * may go on. The call is off the queue and `t` disarmed. */
static void conn_lease_expired(resil_engine_handle *call) {
  resil_engine *e = call->e;
  resil_http_client *c = e->client;
  resil__timerheap_disarm(&e->heap, &call->t);
  int64_t waited = eng_now(e) - call->cw.t0;
  resil_outcome o = resil_outcome_make(RESIL_NOT_SENT, RESIL_REASON_POOL_TIMEOUT);
  inst_drop(call, o);
  atomic_fetch_add_explicit(&c->st_lease_timeouts, 1, memory_order_relaxed);
  ST_INC(e, rej_pool);
  resil__http_count_outcome(c, &o);
  resil__http_log_bare(c, call->req->ep, &o, attempt_ctx(call)->attempt, waited);
  call->attempts++;
  call->state = ST_WAIT;
  after_attempt(call, &o, waited);
}

static void conn_expired_primary(eng_cwait *w) {
  conn_lease_expired(
      (resil_engine_handle *)(void *)((char *)w - offsetof(resil_engine_handle, cw)));
}

static void conn_go_primary(eng_cwait *w) {
  resil_engine_handle *call =
      (resil_engine_handle *)(void *)((char *)w - offsetof(resil_engine_handle, cw));
  resil__timerheap_disarm(&call->e->heap, &call->t);
  call->state = ST_WAIT;
  if (atomic_load_explicit(&call->cancel_req, memory_order_acquire))
    finish_between(call, RESIL_REASON_CANCELLED, RESIL_STOP_CANCELLED);
  else
    transfer_start_now(call);
}

/* ---- a resolved name's first lookup -----------------------------------------
 *
 * The client looks a resolved name up on its resolver thread, the first
 * time as soon as it is created. An attempt whose upstream's first lookup
 * has not ended waits for it (ST_DNSWAIT) on e's list, as long as the
 * blocking path would (request.c): the connect timeout, cut to the
 * attempt's time left (deadline, attempt timeout; transfer_left). The
 * resolver tells the engine through its watcher (dns_landed: dns_kick and
 * the adapter's wake); on_wake then starts every waiting call whose name
 * is ready, in the order they came, through start_transfer again. A wait
 * that runs out (`t`, or the deadline `dl`) ends the attempt NOT_SENT(DNS)
 * as a lookup that failed does; a cancel ends the call as in any wait. The
 * loop never blocks. */

/* Any thread (the resolver's): a first lookup ended. */
static void dns_landed(void *arg) {
  resil_engine *e = arg;
  atomic_store_explicit(&e->dns_kick, 1, memory_order_release);
  e->ad->wake(e->ad->self);
}

static void dns_withdraw(resil_engine_handle *call) {
  if (!call->dns_queued) return;
  resil_engine *e = call->e;
  if (call->dprev) call->dprev->dnext = call->dnext;
  else e->dq_head = call->dnext;
  if (call->dnext) call->dnext->dprev = call->dprev;
  else e->dq_tail = call->dprev;
  call->dprev = call->dnext = NULL;
  call->dns_queued = 0;
}

/* The attempt ends NOT_SENT(DNS) before any transfer: no address known
 * (the first lookup failed or found none), or its wait for the first
 * lookup ran out (waited > 0). */
static void dns_not_sent(resil_engine_handle *call, int64_t waited) {
  resil_engine *e = call->e;
  resil_outcome o = resil_outcome_make(RESIL_NOT_SENT, RESIL_REASON_DNS);
  resil__http_count_outcome(e->client, &o);
  resil__http_log_bare(e->client, call->req->ep, &o, attempt_ctx(call)->attempt, waited);
  call->attempts++;
  call->state = ST_WAIT;
  after_attempt(call, &o, waited);
}

/* `t` or `dl` ended the wait (the call is still on the list). */
static void dns_wait_over(resil_engine_handle *call) {
  resil_engine *e = call->e;
  dns_withdraw(call);
  resil__timerheap_disarm(&e->heap, &call->t);
  dns_not_sent(call, eng_now(e) - call->dns_t0);
}

static void start_transfer(resil_engine_handle *call);

/* Puts call on the list (ST_DNSWAIT) for at most the connect timeout, cut
 * to its time left. */
static void dns_wait(resil_engine_handle *call) {
  resil_engine *e = call->e;
  int64_t now = eng_now(e), end_at;
  int64_t wait = transfer_left(call, now, &end_at);
  if (e->client->t.connect_timeout_ns < wait) wait = e->client->t.connect_timeout_ns;
  if (wait <= 0 || arm_at(e, &call->t, resil__sat_add(now, wait)) != 0) {
    dns_not_sent(call, 0);
    return;
  }
  call->dns_t0 = now;
  call->state = ST_DNSWAIT;
  /* At the tail: the calls start in the order they came. */
  call->dprev = e->dq_tail;
  call->dnext = NULL;
  if (e->dq_tail) e->dq_tail->dnext = call;
  else e->dq_head = call;
  e->dq_tail = call;
  call->dns_queued = 1;
}

/* on_wake after dns_landed: the waiting calls whose name is ready go on,
 * from the list's head (a call that starts may end others: start again
 * from the head each time). */
static void dns_dispatch(resil_engine *e) {
  for (;;) {
    resil_engine_handle *call = e->dq_head;
    while (call && !resil__http_group_ready(call->req->ep->group)) call = call->dnext;
    if (!call) return;
    dns_withdraw(call);
    resil__timerheap_disarm(&e->heap, &call->t);
    call->state = ST_WAIT;
    if (atomic_load_explicit(&call->cancel_req, memory_order_acquire))
      finish_between(call, RESIL_REASON_CANCELLED, RESIL_STOP_CANCELLED);
    else
      start_transfer(call);
  }
}

/* The attempt's transfer (its policies passed): starts now when a
 * connection is free, else queues (ST_CWAIT) for at most the client's
 * lease timeout (the queue's timer; every primary has the same timeout,
 * so their ends come in queue order), clipped to the deadline (`dl`). */
static void start_transfer(resil_engine_handle *call) {
  resil_engine *e = call->e;
  call->cw.origin = call->req->ep->origin;
  if (call->req->ep->group) {
    if (!resil__http_group_ready(call->req->ep->group)) {
      dns_wait(call);
      return;
    }
    call->inst = pick_instance(call->req, &call->inst_probe);
    if (!call->inst) {
      dns_not_sent(call, 0);
      return;
    }
    call->cw.origin = call->inst->origin;
  }
  call->cw.go = conn_go_primary;
  call->cw.expired = conn_expired_primary;
  int r = conn_start_or_queue(e, &call->cw, e->client->lease_timeout_ns);
  if (r == 1) {
    transfer_start_now(call);
    return;
  }
  call->state = ST_CWAIT;
  if (r < 0) conn_lease_expired(call);
}

/* ---- hedging (policies.hedge, hedge.h's split form) ---------------------
 *
 * Each attempt of the call (in the retry's sense) is one hedged call of
 * the hedge policy. Once its primary transfer is in libcurl,
 * resil_hedge_begin decides: WAIT arms `ht`; on it resil_hedge_on_timer
 * may send hedge k (hedge_send), another transfer of the same request
 * (same URL, body and idempotency key) through the same transport rules.
 * A hedge never waits: it takes a rate-limiter permit, a breaker permit
 * and a bulkhead slot only if each is there at once; a hedge that cannot
 * have them is recorded REJECTED and not sent. A hedge sent has its own
 * timer (eng_hedge.at): the attempt timeout from its own start, then,
 * once its request is on the wire, the client's response timeout, as the
 * primary's `at`; ending it so is an end like any other (UNKNOWN(TIMEOUT)
 * once sent). Every end is recorded (resil_hedge_record, whose acceptance
 * rule is the policy's): WINNER or LAST ends the attempt with the
 * policy's result (hc.result, hedge_result: the winner, or for LAST the
 * first UNKNOWN of the attempt's transfers, else the last one) and that
 * transfer's response, and the transfers still in flight are removed
 * from the multi handle at once as losers (UNKNOWN(CANCELLED) to the
 * client's counters and log, their breaker permits released
 * unrecorded; the policy counts them); KEEP_WAITING waits for the others.
 * The deadline and a cancel remove every transfer of the attempt. A call
 * the policy does not hedge (begin DENY: neither idempotent nor keyed;
 * counted in passed_unsafe) runs exactly as without it. */

enum { HEDGE_NORMAL = 0, HEDGE_LOSER, HEDGE_FINAL };

static void hedge_end(resil_engine_handle *call, uint32_t n, int aborted, CURLcode rc, int role);

static void hedge_release(resil_engine_handle *call, eng_hedge *hg, const resil_outcome *o,
                          int64_t dur) {
  if (hg->has_bh) resil_bulkhead_release(call->pol.bulkhead);
  if (hg->has_permit) {
    if (o) resil_breaker_record(call->pol.breaker, &hg->permit, o, dur < 0 ? 0 : dur);
    else resil_breaker_release(call->pol.breaker, &hg->permit);
  }
  hg->has_bh = hg->has_permit = 0;
}

/* Removes the primary transfer as a loser: reported, its holds given back,
 * its response discarded. */
static void primary_drop(resil_engine_handle *call) {
  resil_engine *e = call->e;
  eng_xfer *x = call->x;
  call->x = NULL;
  curl_multi_remove_handle(e->multi, x->s.e);
  conn_out(e, (uint32_t)x->s.origin);
  resil__timerheap_disarm(&e->heap, &call->at);
  resil_outcome o = resil__http_attempt_end(e->client, call->req, &x->s, ABORT_CANCEL, CURLE_OK);
  resil__http_attempt_done(e->client, call->req, &x->s, &o, attempt_ctx(call)->attempt, 0,
                           eng_now(e) - call->att_t0);
  xfer_put(e, x);
  release_holds(call);
}

/* A verdict ended the attempt: the others still in flight lose. */
static void hedge_drop_others(resil_engine_handle *call) {
  resil_engine *e = call->e;
  call->hedge_over = 1;
  resil__timerheap_disarm(&e->heap, &call->ht);
  for (uint32_t k = 0; k < RESIL_HEDGE_MAX_HEDGES; k++) {
    if (!call->hx[k].x) continue;
    ST_INC(e, losers);
    hedge_end(call, k + 2, ABORT_CANCEL, CURLE_OK, HEDGE_LOSER);
  }
  if (call->x) {
    ST_INC(e, losers);
    primary_drop(call);
  }
}

/* The attempt ends with the policy's result (hc.result: the winner, or
 * for LAST resil_hedge_record's rule, e.g. an earlier hedge's UNKNOWN over
 * the primary's 409). The response delivered is that attempt's: when it
 * is not the one ending now (`n`), the ending transfer's answer is a
 * loser, and unless the result is the primary's (its response is in
 * call->res) the attempt has no response: call->res is emptied. Returns
 * whether the ending transfer's response is to be delivered. */
static int hedge_result(resil_engine_handle *call, uint32_t n, resil_outcome *o) {
  *o = call->hc.result;
  if (call->hc.result_attempt == 0 || call->hc.result_attempt == n) return 1;
  if (call->hc.result_attempt != 1 && call->res) {
    resil__http_response_reset(call->res);
    call->res->outcome = *o; /* resil_http_response_outcome: the result's */
  }
  return 0;
}

/* The primary ended with *o while hedging. Returns 1 when the attempt is
 * over (the caller goes on to after_attempt with *o, now the attempt's
 * result: hedge_result), 0 when hedges are still running (the primary's
 * holds are given back now). */
static int hedge_primary_ended(resil_engine_handle *call, resil_outcome *o, int64_t dur) {
  resil_hedge_verdict v = resil_hedge_record(call->pol.hedge, &call->hc, 1, dur, o);
  int other = v == RESIL_HEDGE_LAST && call->hc.result_attempt != 1;
  if (v == RESIL_HEDGE_KEEP_WAITING || other) {
    /* The primary's holds go back with its own outcome. */
    if (call->has_bh) resil_bulkhead_release(call->pol.bulkhead);
    if (call->has_permit)
      resil_breaker_record(call->pol.breaker, &call->permit, o, dur < 0 ? 0 : dur);
    call->has_bh = call->has_permit = 0;
    if (!other) return 0;
  }
  hedge_drop_others(call);
  if (v == RESIL_HEDGE_LAST) (void)hedge_result(call, 1, o);
  return 1;
}

/* Hedge attempt n ended with *o (res: its response, or NULL). */
static void hedge_settle(resil_engine_handle *call, uint32_t n, const resil_outcome *o,
                         int64_t dur, eng_xfer *x, int role) {
  resil_engine *e = call->e;
  resil_outcome res = *o;
  int deliver = 1;
  if (role == HEDGE_NORMAL) {
    resil_hedge_verdict v = resil_hedge_record(call->pol.hedge, &call->hc, n, dur, o);
    if (v == RESIL_HEDGE_WINNER) ST_INC(e, hedge_wins);
    if (v != RESIL_HEDGE_WINNER && v != RESIL_HEDGE_LAST) role = HEDGE_LOSER;
    if (v == RESIL_HEDGE_LAST) deliver = hedge_result(call, n, &res);
  }
  if (role == HEDGE_LOSER) {
    if (x) xfer_put(e, x);
    return;
  }
  /* The attempt ends with its result (this hedge's outcome and response,
   * or an earlier attempt's UNKNOWN: hedge_result). */
  if (x && !deliver) {
    xfer_put(e, x);
  } else if (x) {
    resil_http_response *old = call->res;
    call->res = x->s.res;
    x->s.res = old ? old : resil__http_response_new(e->alloc);
    if (x->s.res) xfer_put(e, x);
    else {
      resil__http_slot_cleanup(e->client, &x->s);
      resil__free(e->alloc, x);
    }
  }
  hedge_drop_others(call);
  call->state = ST_WAIT;
  after_attempt(call, &res, dur);
}

static void hedge_end(resil_engine_handle *call, uint32_t n, int aborted, CURLcode rc, int role) {
  resil_engine *e = call->e;
  eng_hedge *hg = &call->hx[n - 2];
  eng_xfer *x = hg->x;
  hg->x = NULL;
  resil__timerheap_disarm(&e->heap, &hg->at);
  curl_multi_remove_handle(e->multi, x->s.e);
  conn_out(e, (uint32_t)x->s.origin);
  resil_outcome o = resil__http_attempt_end(e->client, call->req, &x->s, aborted, rc);
  int64_t dur = eng_now(e) - hg->t0;
  resil__http_attempt_done(e->client, call->req, &x->s, &o, attempt_ctx(call)->attempt, 0, dur);
  hedge_release(call, hg, role == HEDGE_LOSER ? NULL : &o, dur);
  hedge_settle(call, n, &o, dur, x, role);
}

/* A hedge's request is on the wire (http_xfer.on_sent). */
static void on_hedge_sent(void *arg) {
  eng_hedge *hg = arg;
  if (hg->x) arm_sent(hg->call->e, hg->x, &hg->at, &hg->at_kind, hg->end_at);
}

/* A hedge's own timer: its attempt or response timeout. */
static void on_hedge_attempt_timer(void *arg) {
  eng_hedge *hg = arg;
  if (hg->x) hedge_end(hg->call, hg->n, hg->at_kind, CURLE_OK, HEDGE_NORMAL);
}

/* A breaker refused a permit: why is BREAKER_OPEN, or RECOVERING (its
 * ramp), which rejected_recovering counts too. */
static void breaker_refused(resil_engine *e, resil_reason why) {
  ST_INC(e, rej_breaker);
  if (why == RESIL_REASON_RECOVERING) ST_INC(e, rej_recovering);
  else ST_INC(e, rej_breaker_open);
}

/* A hedge the policies refused at once: recorded REJECTED, not sent. */
static void hedge_rejected(resil_engine_handle *call, uint32_t n, eng_hedge *hg, resil_reason why) {
  resil_outcome o = resil_outcome_make(RESIL_REJECTED, why);
  ST_INC(call->e, hedges_rejected);
  hedge_release(call, hg, NULL, 0);
  hedge_settle(call, n, &o, 0, NULL, HEDGE_NORMAL);
}

/* Sends hedge attempt n of the current attempt: the one way a hedge
 * transfer starts. */
static void hedge_send(resil_engine_handle *call, uint32_t n) {
  resil_engine *e = call->e;
  resil_http_client *c = e->client;
  const resil_ctx *actx = attempt_ctx(call);
  eng_hedge *hg = &call->hx[n - 2];
  hg->call = call;
  hg->n = n;
  hg->at.cb = on_hedge_attempt_timer;
  hg->at.arg = hg;
  int64_t now = eng_now(e);
  resil_outcome o;
  if (call->pol.ratelimiter) {
    /* A permit available now, or none: a ctx whose deadline is now lets
     * the limiter grant no wait (GO), never a reservation (WAIT would mean
     * a permit due within nanoseconds: taken). */
    resil_ctx nowc = *actx;
    nowc.deadline_ns = resil_clock_now_ns(nowc.clock);
    if (resil_ratelimiter_reserve(call->pol.ratelimiter, 1, &nowc, NULL, NULL) ==
        RESIL_DECISION_DENY) {
      ST_INC(e, rej_ratelimiter);
      hedge_rejected(call, n, hg, RESIL_REASON_RATE_LIMITED);
      return;
    }
  }
  if (call->pol.breaker) {
    resil_reason why;
    if (resil_breaker_try_acquire_why(call->pol.breaker, &hg->permit, &why) !=
        RESIL_DECISION_GO) {
      breaker_refused(e, why);
      if (why == RESIL_REASON_RECOVERING) ST_INC(e, hedges_recovering);
      hedge_rejected(call, n, hg, why); /* BREAKER_OPEN or RECOVERING */
      return;
    }
    hg->has_permit = 1;
  }
  if (call->pol.bulkhead) {
    if (resil_bulkhead_try_acquire(call->pol.bulkhead, NULL) != RESIL_DECISION_GO) {
      ST_INC(e, rej_bh_full);
      hedge_rejected(call, n, hg, RESIL_REASON_BULKHEAD_FULL);
      return;
    }
    hg->has_bh = 1;
  }
  /* A hedge goes to an instance other than the running attempts' (they
   * are in the call's tried set). */
  http_inst *hi = NULL;
  int hprobe = 0;
  uint32_t horigin = call->req->ep->origin;
  if (call->req->ep->group) {
    if (!(hi = pick_instance(call->req, &hprobe))) {
      o = resil_outcome_make(RESIL_NOT_SENT, RESIL_REASON_DNS);
      hedge_release(call, hg, NULL, 0);
      hedge_settle(call, n, &o, 0, NULL, HEDGE_NORMAL);
      return;
    }
    horigin = hi->origin;
  }
  if (!conn_admit(e, horigin)) {
    /* No connection free at once (a hedge never waits for one). */
    o = resil_outcome_make(RESIL_NOT_SENT, RESIL_REASON_POOL_TIMEOUT);
    if (hi) resil__http_inst_done(hi, hprobe, &o);
    hedge_release(call, hg, NULL, 0);
    hedge_settle(call, n, &o, 0, NULL, HEDGE_NORMAL);
    return;
  }
  eng_xfer *x = xfer_get(e);
  if (!x) {
    o = resil_outcome_make(RESIL_NOT_SENT, RESIL_REASON_LOCAL_ERROR);
    if (hi) resil__http_inst_done(hi, hprobe, &o);
    hedge_release(call, hg, NULL, 0);
    hedge_settle(call, n, &o, 0, NULL, HEDGE_NORMAL);
    return;
  }
  x->s.inst = hi;
  x->s.probe = hprobe;
  int64_t left = transfer_left(call, now, &hg->end_at);
  call->attempts++;
  if (resil__http_attempt_begin(c, call->req, &x->s, actx->attempt, actx->flags, left,
                                call->deadline_mono, &o) != 0) {
    resil__http_attempt_done(c, call->req, &x->s, &o, actx->attempt, 0, eng_now(e) - now);
    hedge_release(call, hg, &o, 0);
    hedge_settle(call, n, &o, 0, x, HEDGE_NORMAL);
    return;
  }
  x->s.x.on_sent = on_hedge_sent;
  x->s.x.on_sent_arg = hg;
  x->call = call;
  x->hedge_n = n;
  hg->x = x;
  hg->t0 = now;
  ST_INC(e, transfers);
  conn_in(e, horigin);
  if (curl_multi_add_handle(e->multi, x->s.e) != CURLM_OK) {
    hedge_end(call, n, ABORT_LOCAL, CURLE_FAILED_INIT, HEDGE_NORMAL);
    return;
  }
  if (e->in_flight > e->peak) e->peak = e->in_flight;
  if (hg->end_at != INT64_MAX) {
    hg->at_kind = ABORT_DEADLINE;
    arm_at(e, &hg->at, hg->end_at);
  }
}

static void on_hedge_timer(void *arg) {
  resil_engine_handle *call = arg;
  if (call->state != ST_FLIGHT || call->hedge_over) return;
  int64_t next = -1;
  /* Hedges last (DESIGN §2.9): the hedge watches the attempt's breaker. */
  if (resil_hedge_on_timer_watch(call->pol.hedge, &call->hc, &next, call->pol.breaker) !=
      RESIL_DECISION_GO) {
    if (call->hc.state & RESIL_HEDGE_CALL_RECOVERING) ST_INC(call->e, hedges_recovering);
    return;
  }
  uint32_t n = call->hc.attempts;
  ST_INC(call->e, hedges_sent);
  call->att_hedges++;
  if (next >= 0) arm_at(call->e, &call->ht, resil__sat_add(eng_now(call->e), next));
  if (n >= 2 && n <= RESIL_HEDGE_MAX_HEDGES + 1) hedge_send(call, n);
}

/* The primary of an attempt is in libcurl: may it be hedged? */
static void hedge_begin(resil_engine_handle *call) {
  int64_t delay = 0;
  call->hedge_over = 0;
  call->hedging = resil_hedge_begin(call->pol.hedge, attempt_ctx(call), &call->hc, &delay) ==
                  RESIL_DECISION_WAIT;
  if (call->hedging) arm_at(call->e, &call->ht, resil__sat_add(eng_now(call->e), delay));
  else ST_INC(call->e, unhedged);
}

/* The deadline or a cancel ends the attempt in flight: every transfer of
 * it is removed at once; the primary (or, once it has ended, the first
 * hedge still in flight) gives the attempt's outcome. */
static void flight_abort(resil_engine_handle *call, int kind) {
  if (call->x || !call->hedging) {
    if (call->hedging) {
      call->hedge_over = 1;
      resil__timerheap_disarm(&call->e->heap, &call->ht);
      for (uint32_t k = 0; k < RESIL_HEDGE_MAX_HEDGES; k++)
        if (call->hx[k].x) hedge_end(call, k + 2, ABORT_CANCEL, CURLE_OK, HEDGE_LOSER);
    }
    transfer_end(call, kind, CURLE_OK);
    return;
  }
  call->hedge_over = 1;
  resil__timerheap_disarm(&call->e->heap, &call->ht);
  uint32_t rep = 0;
  for (uint32_t k = 0; k < RESIL_HEDGE_MAX_HEDGES; k++) {
    if (!call->hx[k].x) continue;
    if (!rep) rep = k + 2;
    else hedge_end(call, k + 2, ABORT_CANCEL, CURLE_OK, HEDGE_LOSER);
  }
  if (rep) hedge_end(call, rep, kind, CURLE_OK, HEDGE_FINAL);
}

/* ---- bulkhead waiting ------------------------------------------------------
 *
 * An attempt that finds no free slot queues the call's waiter
 * (resil_bulkhead_enqueue) and arms `t` for the max wait. The release that
 * hands a slot over may run on any thread (a blocking caller sharing the
 * bulkhead, or this loop): bh_ready only pushes the call on e->granted
 * under e->mu and wakes the adapter; bh_drain, on the loop thread, starts
 * the attempt. The max wait, the deadline, a cancel and resil_engine_free
 * withdraw the waiter with resil_bulkhead_dequeue: exactly one of WITHDRAWN
 * and HANDED_OVER comes back; on HANDED_OVER the slot is the call's (used
 * or released at once) and its grant, pushed or about to be, is only
 * drained. Each WAIT holds a ref on the call until its fate is known to the
 * loop (withdrawn, or its grant drained), counted in e->bh_outstanding. */

static void run_steps(resil_engine_handle *call, const resil_ctx *actx, int64_t now);

/* A step refused the attempt (nothing sent): the steps before it give back
 * what they took (a breaker permit released, not recorded; a bulkhead slot)
 * and the attempt ends REJECTED(why). */
static void step_reject(resil_engine_handle *call, resil_reason why) {
  if (call->chain && call->step_i > 0) call->rej_layer = call->step_layer[call->step_i - 1];
  release_holds(call);
  resil_outcome o = resil_outcome_make(RESIL_REJECTED, why);
  after_attempt(call, &o, 0);
}

static void bh_ready(void *arg) {
  resil_engine_handle *call = arg;
  resil_engine *e = call->e;
  /* The wake is made under the lock so that resil_engine_free, which takes
   * it before tearing down, never races with this thread. */
  pthread_mutex_lock(&e->mu);
  call->grant_next = e->granted;
  e->granted = call;
  atomic_store_explicit(&call->grant_in, 1, memory_order_release);
  e->ad->wake(e->ad->self);
  pthread_mutex_unlock(&e->mu);
}

/* The call leaves the queue (max wait, deadline, cancel). Returns 1 when a
 * slot was handed over first (now held: has_bh), 0 when withdrawn or when
 * the call was not waiting. */
static int bh_withdraw(resil_engine_handle *call) {
  if (!call->bh_waiting) return 0;
  resil_engine *e = call->e;
  call->bh_waiting = 0;
  resil__timerheap_disarm(&e->heap, &call->t);
  int handed = resil_bulkhead_dequeue(call->pol.bulkhead, call->bw) == RESIL_BH_HANDED_OVER;
  if (handed) {
    /* bh_ready has run or is running on the releasing thread: wait until
     * it has pushed the grant (it only takes e->mu), then take it back, so
     * that no stale grant of this call is left for bh_drain. */
    while (!atomic_load_explicit(&call->grant_in, memory_order_acquire)) sched_yield();
    pthread_mutex_lock(&e->mu);
    resil_engine_handle **pp = &e->granted;
    while (*pp && *pp != call) pp = &(*pp)->grant_next;
    if (*pp) *pp = call->grant_next;
    pthread_mutex_unlock(&e->mu);
    call->has_bh = 1;
  }
  e->bh_outstanding--;
  call_unref(call); /* the WAIT's ref; the caller holds another */
  return handed;
}

/* Drains the grants forwarded by bh_ready (loop thread). */
static void bh_drain(resil_engine *e) {
  pthread_mutex_lock(&e->mu);
  resil_engine_handle *l = e->granted;
  e->granted = NULL;
  pthread_mutex_unlock(&e->mu);
  /* bh_ready pushes at the head: reverse, so grants start in FIFO order. */
  resil_engine_handle *r = NULL;
  while (l) {
    resil_engine_handle *n = l->grant_next;
    l->grant_next = r;
    r = l;
    l = n;
  }
  while (r) {
    resil_engine_handle *call = r;
    r = r->grant_next;
    e->bh_outstanding--;
    /* Always the call's current wait: bh_withdraw takes back a grant that
     * raced with it. */
    call->bh_waiting = 0;
    call->has_bh = 1;
    resil__timerheap_disarm(&e->heap, &call->t);
    if (atomic_load_explicit(&call->cancel_req, memory_order_acquire))
      finish_between(call, RESIL_REASON_CANCELLED, RESIL_STOP_CANCELLED);
    else
      run_steps(call, attempt_ctx(call), eng_now(e));
    call_unref(call);
  }
}

/* The max wait passed (`t` in ST_BHWAIT). */
static void bh_wait_expired(resil_engine_handle *call) {
  if (bh_withdraw(call)) {
    run_steps(call, attempt_ctx(call), eng_now(call->e));
    return;
  }
  call->state = ST_WAIT;
  ST_INC(call->e, rej_bh_wait);
  step_reject(call, RESIL_REASON_BULKHEAD_FULL);
}

/* Takes a slot or queues for one. Returns 1 when the transfer may start
 * now (slot held), 0 when the call waits or the attempt ended. */
static int bh_acquire(resil_engine_handle *call, const resil_ctx *actx, int64_t now) {
  resil_engine *e = call->e;
  if (!call->bw && resil_bulkhead_waiter_new(call->pol.bulkhead, &call->bw) != RESIL_OK) {
    /* No waiter: only a free slot will do. */
    if (resil_bulkhead_try_acquire(call->pol.bulkhead, NULL) == RESIL_DECISION_GO) {
      call->has_bh = 1;
      return 1;
    }
  } else {
    int64_t wait = 0;
    resil_reason why = RESIL_REASON_OK;
    /* The ref the WAIT holds is taken first: bh_ready may run at once on
     * another thread. */
    atomic_fetch_add_explicit(&call->refs, 1, memory_order_relaxed);
    atomic_store_explicit(&call->grant_in, 0, memory_order_relaxed);
    resil_decision d =
        resil_bulkhead_enqueue(call->pol.bulkhead, actx, call->bw, bh_ready, call, &wait, &why);
    if (d == RESIL_DECISION_WAIT) {
      e->bh_outstanding++;
      call->bh_waiting = 1;
      call->state = ST_BHWAIT;
      arm_at(e, &call->t, resil__sat_add(now, wait));
      return 0;
    }
    call_unref(call);
    if (d == RESIL_DECISION_GO) {
      call->has_bh = 1;
      return 1;
    }
    if (why == RESIL_REASON_CANCELLED) {
      release_holds(call);
      finish_between(call, RESIL_REASON_CANCELLED, RESIL_STOP_CANCELLED);
      return 0;
    }
  }
  ST_INC(e, rej_bh_full);
  step_reject(call, RESIL_REASON_BULKHEAD_FULL);
  return 0;
}

/* ---- steps ------------------------------------------------------------------
 *
 * An attempt runs its policies as a small program: call->steps, outermost
 * first (resil_engine_call: rate limiter, breaker, bulkhead;
 * resil_engine_call_chain: the chain's order), then the transfer. Two
 * steps can wait: a rate-limiter reservation (a timer on `t`; the attempt
 * resumes at that step, rl_held set, the permit already its own) and a
 * bulkhead queue (the grant resumes at the step after it). A step that
 * refuses ends the attempt through step_reject: what the steps before it
 * took is given back. */

/* The reason a rate limiter's refusal ends a call with: DEADLINE, or a
 * backed limiter's RATE_LIMITER_UNAVAILABLE, as the limiter said; any
 * other refusal is RATE_LIMITED. */
static resil_reason rl_refusal(resil_reason why) {
  return why == RESIL_REASON_DEADLINE || why == RESIL_REASON_RATE_LIMITER_UNAVAILABLE
             ? why
             : RESIL_REASON_RATE_LIMITED;
}

/* ---- asynchronous decisions ---------------------------------------------------
 *
 * A limiter whose backend decides without blocking (reserve_async,
 * ratelimit.h: libresil-redis's) is asked on the loop: the step that asks
 * leaves the call waiting (ST_WAIT, or ST_START for a limiter outside the
 * retry) with rq pending, and the backend's answer, given on the loop
 * thread from its watch or timer (both run through the engine: on_bio,
 * the heap), is kept in the call and handed to the same step, resumed as
 * a timer `t` would resume it (on_call_timer). finish() withdraws a
 * pending decision (deadline, cancel, free). The backend watches its fds
 * through rll.watch (the adapter's watch, its callback wrapped so that the
 * engine's epilogue runs after it) and arms timers on the engine's heap
 * (rll.timer_*): the adapter keeps its one timer. A backend that keeps
 * something for the loop registers an end (rll.on_end), run when the
 * engine is freed: the engine holds no limiter pointer, so a limiter freed
 * before the engine (its calls done) leaves its backend to that end. */

static void on_rl_answer(resil_ratelimiter_async *q, resil_decision d, int64_t wait, resil_reason why);
static void on_call_timer(void *arg);

/* The limiter's decision for the step: 0 with *d, *wait, *why (the answer
 * kept from an asynchronous decision, or one made now), or 1 when it is
 * pending (on_rl_answer resumes the call). */
static int rl_decide(resil_engine_handle *call, resil_ratelimiter *rl, const resil_ctx *ctx,
                     resil_decision *d, int64_t *wait, resil_reason *why) {
  resil_engine *e = call->e;
  if (call->rl_ans) {
    call->rl_ans = 0;
    *d = call->ans_d;
    *wait = call->ans_wait;
    *why = call->ans_why;
    return 0;
  }
  if (resil_ratelimiter_is_async(rl)) {
    call->rq.done = on_rl_answer;
    call->rq.arg = call;
    return resil_ratelimiter_reserve_async(rl, &e->rll, &call->rq, 1, ctx, d, wait, why);
  }
  *d = resil_ratelimiter_reserve(rl, 1, ctx, wait, why);
  return 0;
}

static void on_rl_answer(resil_ratelimiter_async *q, resil_decision d, int64_t wait, resil_reason why) {
  resil_engine_handle *call = q->arg;
  call->rl_ans = 1;
  call->ans_d = d;
  call->ans_wait = wait;
  call->ans_why = why;
  on_call_timer(call); /* call may be freed from here on */
}

static void on_bio(void *arg, int fd, unsigned events) {
  eng_bwatch *w = arg;
  resil_engine *e = w->e;
  w->cb(w->arg, fd, events); /* may stop the watch (w freed) */
  if (e->conn_kick) conn_dispatch(e);
  rearm(e);
}

static int64_t rll_now(void *self) { return eng_now(self); }

static int rll_watch(void *self, int fd, unsigned events, resil_io_fn cb, void *arg) {
  resil_engine *e = self;
  eng_bwatch **pp = &e->bwatches;
  while (*pp && (*pp)->fd != fd) pp = &(*pp)->next;
  eng_bwatch *w = *pp;
  if (!events) {
    if (!w) return 0;
    *pp = w->next;
    resil__free(e->alloc, w);
    return e->ad->watch(e->ad->self, fd, 0, on_bio, NULL);
  }
  if (!cb) {
    errno = EINVAL;
    return -1;
  }
  int fresh = !w;
  if (fresh) {
    if (!(w = resil__calloc(e->alloc, sizeof *w))) {
      errno = ENOMEM;
      return -1;
    }
    w->e = e;
    w->fd = fd;
  }
  w->cb = cb;
  w->arg = arg;
  if (e->ad->watch(e->ad->self, fd, events, on_bio, w) != 0) {
    if (fresh) resil__free(e->alloc, w);
    return -1;
  }
  if (fresh) {
    w->next = e->bwatches;
    e->bwatches = w;
  }
  return 0;
}

static int rll_on_end(void *self, resil_loop_fn end, void *arg) {
  resil_engine *e = self;
  eng_bend *b = resil__calloc(e->alloc, sizeof *b);
  if (!b) return -1;
  b->end = end;
  b->arg = arg;
  b->next = e->bends;
  e->bends = b;
  return 0;
}

static void on_btimer(void *arg) {
  eng_btimer *b = arg;
  b->cb(b->arg);
}

static void *rll_timer_new(void *self, resil_loop_fn cb, void *arg) {
  resil_engine *e = self;
  eng_btimer *b = resil__calloc(e->alloc, sizeof *b);
  if (!b) return NULL;
  b->e = e;
  b->cb = cb;
  b->arg = arg;
  b->t.cb = on_btimer;
  b->t.arg = b;
  return b;
}

static int rll_timer_arm(void *self, void *timer, int64_t at_ns) {
  eng_btimer *b = timer;
  int r = arm_at(self, &b->t, at_ns);
  rearm(self);
  return r;
}

static void rll_timer_disarm(void *self, void *timer) {
  resil__timerheap_disarm(&((resil_engine *)self)->heap, &((eng_btimer *)timer)->t);
}

static void rll_timer_free(void *self, void *timer) {
  if (!timer) return;
  rll_timer_disarm(self, timer);
  resil__free(((resil_engine *)self)->alloc, timer);
}

static void run_steps(resil_engine_handle *call, const resil_ctx *actx, int64_t now) {
  resil_engine *e = call->e;
  while (call->step_i < call->nsteps) {
    unsigned char i = call->step_i++;
    switch (call->steps[i]) {
    case STEP_RL: {
      if (call->rl_held) {
        call->rl_held = 0;
        break;
      }
      int64_t wait = 0;
      resil_reason why = RESIL_REASON_OK;
      resil_decision d;
      if (rl_decide(call, call->pol.ratelimiter, actx, &d, &wait, &why)) {
        call->step_i = i; /* the answer resumes here */
        call->state = ST_WAIT;
        return;
      }
      if (d == RESIL_DECISION_DENY) {
        ST_INC(e, rej_ratelimiter);
        step_reject(call, rl_refusal(why));
        return;
      }
      if (d == RESIL_DECISION_WAIT) {
        call->rl_held = 1;
        call->step_i = i;
        call->state = ST_WAIT;
        if (arm_at(e, &call->t, resil__sat_add(now, wait)) == 0) return;
        /* No timer: go on at once. */
        call->rl_held = 0;
        call->step_i = (unsigned char)(i + 1);
      }
      break;
    }
    case STEP_BR: {
      resil_reason why;
      if (resil_breaker_try_acquire_why(call->pol.breaker, &call->permit, &why) !=
          RESIL_DECISION_GO) {
        breaker_refused(e, why);
        step_reject(call, why); /* BREAKER_OPEN or RECOVERING (a ramp) */
        return;
      }
      call->has_permit = 1;
      break;
    }
    case STEP_BH:
      if (!bh_acquire(call, actx, now)) return;
      break;
    default:
      break;
    }
  }
  call->step_i = 0;
  start_transfer(call);
}

/* The per-attempt policies, then the transfer. */
static void begin_attempt(resil_engine_handle *call) {
  resil_engine *e = call->e;
  const resil_ctx *actx = attempt_ctx(call);
  if (atomic_load_explicit(&call->cancel_req, memory_order_acquire) ||
      resil_cancel_is_set(actx->cancel)) {
    finish_between(call, RESIL_REASON_CANCELLED, RESIL_STOP_CANCELLED);
    return;
  }
  int64_t now = eng_now(e);
  if (call->deadline_hit || (call->deadline_at != INT64_MAX && now >= call->deadline_at)) {
    finish_between(call, RESIL_REASON_DEADLINE, RESIL_STOP_DEADLINE);
    return;
  }
  if (call->step_i == 0 && !call->rl_held && !call->rl_ans && call->tries++ > 0)
    ST_INC(e, retries);
  run_steps(call, actx, now);
}

/* A layer outside the retry refused the logical call: what the outer
 * layers before it took is given back (a breaker permit released, not
 * recorded), and the call ends REJECTED(why), nothing sent. */
static void outer_reject(resil_engine_handle *call, unsigned char i, resil_reason why) {
  call->outer_rej_layer = call->outer_layer[i];
  if (call->has_cpermit) {
    resil_breaker_release(call->cbr, &call->cpermit);
    call->has_cpermit = 0;
  }
  resil_outcome o = resil_outcome_make(RESIL_REJECTED, why);
  o.attempts = 0;
  finish(call, o);
}

/* The layers outside the retry (resil_engine_call_chain), once per logical
 * call at its start, in the chain's order. Returns 1 when the call goes
 * on, 0 when it waits for a rate-limiter permit (`t`, still ST_START) or
 * ended. */
static int outer_steps(resil_engine_handle *call) {
  resil_engine *e = call->e;
  if (call->outer_i == 0 && !call->crl_held && !call->rl_ans) call->call_t0 = eng_now(e);
  while (call->outer_i < call->nouter) {
    unsigned char i = call->outer_i++;
    if (call->outer[i] == STEP_BR) {
      resil_reason why;
      if (resil_breaker_try_acquire_why(call->cbr, &call->cpermit, &why) !=
          RESIL_DECISION_GO) {
        breaker_refused(e, why);
        outer_reject(call, i, why);
        return 0;
      }
      call->has_cpermit = 1;
      continue;
    }
    if (call->crl_held) {
      call->crl_held = 0;
      continue;
    }
    int64_t wait = 0;
    resil_reason why = RESIL_REASON_OK;
    resil_decision d;
    if (rl_decide(call, call->crl, &call->ctx, &d, &wait, &why)) {
      call->outer_i = i; /* the answer resumes here, still ST_START */
      return 0;
    }
    if (d == RESIL_DECISION_DENY) {
      ST_INC(e, rej_ratelimiter);
      outer_reject(call, i, rl_refusal(why));
      return 0;
    }
    if (d == RESIL_DECISION_WAIT) {
      call->crl_held = 1;
      call->outer_i = i;
      if (arm_at(e, &call->t, resil__sat_add(eng_now(e), wait)) == 0) return 0;
      call->crl_held = 0; /* no timer: go on at once */
      call->outer_i = (unsigned char)(i + 1);
    }
  }
  return 1;
}

/* `t` fired: the deferred start, or the end of a wait. */
static void on_call_timer(void *arg) {
  resil_engine_handle *call = arg;
  if (call->state == ST_BHWAIT) {
    bh_wait_expired(call);
    return;
  }
  if (call->state == ST_DNSWAIT) {
    dns_wait_over(call);
    return;
  }
  if (call->state == ST_START) {
    if (call->nouter && !outer_steps(call)) return;
    call->state = ST_WAIT;
    if (call->pol.retry &&
        resil_retry_begin(call->pol.retry, &call->ctx, call->rst) != RESIL_DECISION_GO) {
      finish(call, resil_retry_result(call->rst));
      return;
    }
    /* Retries last (DESIGN §2.9): the retry watches the attempt's breaker. */
    if (call->pol.retry && call->pol.breaker)
      (void)resil_retry_state_watch(call->rst, call->pol.breaker);
  } else if (call->pol.retry && call->tries > 0 && !call->rl_held && !call->rl_ans &&
             resil_retry_proceed(call->pol.retry, call->rst) != RESIL_DECISION_GO) {
    /* A retry's wait is over and its breaker began recovering meanwhile
     * (not a rate-limiter reservation's wait or answer: the attempt waiting
     * there, the first one too, was already let go). */
    finish(call, resil_retry_result(call->rst));
    return;
  }
  begin_attempt(call);
}

static void on_deadline(void *arg) {
  resil_engine_handle *call = arg;
  call->deadline_hit = 1;
  if (call->rst) {
    /* Tell the retry the logical call is out of time (retry.h allows
     * lowering the state's deadline). */
    resil_ctx *rc = resil_retry_state_ctx(call->rst);
    rc->deadline_ns = resil_clock_now_ns(rc->clock);
  }
  if (call->state == ST_FLIGHT) {
    flight_abort(call, ABORT_DEADLINE);
  } else if (call->state == ST_CWAIT) {
    /* The lease wait is clipped to the deadline (as on the blocking path). */
    conn_withdraw(call->e, &call->cw);
    resil__timerheap_disarm(&call->e->heap, &call->t);
    conn_lease_expired(call);
  } else if (call->state == ST_DNSWAIT) {
    /* So is the wait for the first lookup. */
    dns_wait_over(call);
  } else {
    bh_withdraw(call); /* a slot handed over is released by finish */
    resil__timerheap_disarm(&call->e->heap, &call->t);
    finish_between(call, RESIL_REASON_DEADLINE, RESIL_STOP_DEADLINE);
  }
}

static void on_attempt_timer(void *arg) {
  resil_engine_handle *call = arg;
  /* The primary's own timeout: an end like any other (hedges go on). */
  if (call->state == ST_FLIGHT && call->x) transfer_end(call, call->at_kind, CURLE_OK);
}

static void do_cancel(resil_engine_handle *call) {
  if (call->state == ST_DONE) return;
  if (call->state == ST_FLIGHT) {
    flight_abort(call, ABORT_CANCEL);
    return;
  }
  conn_withdraw(call->e, &call->cw); /* queued for a connection: not sent */
  bh_withdraw(call); /* a slot handed over is released by finish */
  resil__timerheap_disarm(&call->e->heap, &call->t);
  finish_between(call, RESIL_REASON_CANCELLED, RESIL_STOP_CANCELLED);
}

/* ---- the ctx's cancel token --------------------------------------------------
 *
 * A call whose ctx has a token subscribes to it at submit (token_fired
 * runs on the signalling thread): a signal cancels the call exactly as
 * resil_engine_cancel does, on the next loop iteration. finish() gives the
 * subscription back (waiting for a token_fired running on another thread,
 * so the call outlives it); a token already set at submit needs none: the
 * first attempt's check finds it. */

/* Any thread, while call->tsub is live. */
static void token_fired(void *user) { resil_engine_cancel(user); }

static int token_subscribe(resil_engine_handle *call) {
  if (!call->ctx.cancel) return 0;
  resil_status st = resil_cancel_subscribe(call->ctx.cancel, token_fired, call, &call->tsub);
  return st == RESIL_OK || st == RESIL_ESTATE ? 0 : -1;
}

static void token_unsubscribe(resil_engine_handle *call) {
  resil_cancel_unsubscribe(call->tsub);
  call->tsub = NULL;
}

/* ---- libcurl's multi_socket callbacks -------------------------------------- */

static void check_done(resil_engine *e) {
  CURLMsg *msg;
  int left = 0;
  while ((msg = curl_multi_info_read(e->multi, &left)) != NULL) {
    if (msg->msg != CURLMSG_DONE) continue;
    CURLcode rc = msg->data.result;
    char *p = NULL;
    curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, &p);
    eng_xfer *x = (eng_xfer *)(void *)p;
    if (x && x->call && x->hedge_n) hedge_end(x->call, x->hedge_n, ABORT_NONE, rc, HEDGE_NORMAL);
    else if (x && x->call) transfer_end(x->call, ABORT_NONE, rc);
  }
}

static void on_io(void *arg, int fd, unsigned events) {
  resil_engine *e = arg;
  int flags = 0;
  if (events & RESIL_IO_READ) flags |= CURL_CSELECT_IN;
  if (events & RESIL_IO_WRITE) flags |= CURL_CSELECT_OUT;
  if (events & RESIL_IO_ERROR) flags |= CURL_CSELECT_ERR;
  run_due_calls(e); /* due deadlines first */
  int running = 0;
  curl_multi_socket_action(e->multi, (curl_socket_t)fd, flags, &running);
  check_done(e);
  if (e->conn_kick) conn_dispatch(e);
  rearm(e);
}

static void on_curl_timeout(void *arg) {
  resil_engine *e = arg;
  int running = 0;
  curl_multi_socket_action(e->multi, CURL_SOCKET_TIMEOUT, 0, &running);
  check_done(e);
}

static int on_curl_socket(CURL *easy, curl_socket_t fd, int what, void *ud, void *sockp) {
  (void)easy;
  resil_engine *e = ud;
  eng_sock *sk = sockp;
  if (what == CURL_POLL_REMOVE) {
    e->ad->watch(e->ad->self, (int)fd, 0, on_io, e);
    if (sk) {
      if (sk->prev) sk->prev->next = sk->next;
      else e->socks = sk->next;
      if (sk->next) sk->next->prev = sk->prev;
      resil__free(e->alloc, sk);
      curl_multi_assign(e->multi, fd, NULL);
    }
    return 0;
  }
  if (!sk) {
    sk = resil__calloc(e->alloc, sizeof *sk);
    if (!sk) return -1;
    sk->fd = (int)fd;
    sk->next = e->socks;
    if (e->socks) e->socks->prev = sk;
    e->socks = sk;
    curl_multi_assign(e->multi, fd, sk);
  }
  unsigned ev = 0;
  if (what == CURL_POLL_IN || what == CURL_POLL_INOUT) ev |= RESIL_IO_READ;
  if (what == CURL_POLL_OUT || what == CURL_POLL_INOUT) ev |= RESIL_IO_WRITE;
  return e->ad->watch(e->ad->self, (int)fd, ev, on_io, e) == 0 ? 0 : -1;
}

static int on_curl_timer(CURLM *m, long timeout_ms, void *ud) {
  (void)m;
  resil_engine *e = ud;
  if (timeout_ms < 0) {
    resil__timerheap_disarm(&e->heap, &e->curl_timer);
    return 0;
  }
  return arm_at(e, &e->curl_timer, resil__sat_add(eng_now(e), (int64_t)timeout_ms * RESIL_NS_PER_MS));
}

static void on_wake(void *arg) {
  resil_engine *e = arg;
  pthread_mutex_lock(&e->mu);
  resil_engine_handle *l = e->cancel_head;
  e->cancel_head = NULL;
  pthread_mutex_unlock(&e->mu);
  while (l) {
    resil_engine_handle *n = l->cancel_next;
    do_cancel(l);
    call_unref(l);
    l = n;
  }
  /* Posted extensions (engine_int.h), one at a time: each may detach any. */
  for (;;) {
    pthread_mutex_lock(&e->mu);
    resil__engine_ext *x = e->post_head;
    if (x) {
      e->post_head = x->post_next;
      x->posted = 0;
    }
    pthread_mutex_unlock(&e->mu);
    if (!x) break;
    x->on_post(x);
  }
  bh_drain(e);
  if (atomic_exchange_explicit(&e->dns_kick, 0, memory_order_acq_rel)) dns_dispatch(e);
  if (e->conn_kick) conn_dispatch(e);
  rearm(e);
}

/* ---- hooks for flows on top of the engine (engine_int.h) ------------------ */

int64_t resil__engine_now(const resil_engine *e) { return eng_now(e); }

void resil__engine_set_plan(resil_engine_handle *h, const resil__engine_plan *p) {
  h->nsteps = 0;
  for (size_t i = 0; i < p->nsteps && i < sizeof h->steps; i++) {
    h->steps[h->nsteps] = p->steps[i];
    h->step_layer[h->nsteps++] = p->step_layer[i];
  }
  h->cbr = p->cbr;
  h->crl = p->crl;
  h->nouter = 0;
  for (size_t i = 0; i < p->nouter && i < sizeof h->outer; i++) {
    h->outer[h->nouter] = p->outer[i];
    h->outer_layer[h->nouter++] = p->outer_layer[i];
  }
  h->outer_rej_layer = -1;
  h->chain = p->chain;
  h->nlayers = p->nlayers;
  h->retry_layer = p->retry_layer;
  h->hedge_layer = p->hedge_layer;
  h->rej_layer = -1;
}
resil_http_client *resil__engine_client(const resil_engine *e) { return e->client; }
int resil__engine_freeing(const resil_engine *e) { return e->freeing; }

void resil__engine_defer_report(resil_engine_handle *h) {
  if (h) h->defer_report = 1;
}

void resil__engine_report(resil_engine_handle *h, const resil_outcome *o, const char *key) {
  if (!h || !h->report_pending || !h->req) return;
  h->report_pending = 0;
  resil__http_report(h->e->client, 1, o, h->report_dur, 0, -1, RESIL_STOP_NONE,
                     key ? key : h->req->key);
}

int resil__engine_arm(resil_engine *e, resil__timer *t, int64_t at_ns) {
  int r = arm_at(e, t, at_ns);
  rearm(e);
  return r;
}

void resil__engine_disarm(resil_engine *e, resil__timer *t) {
  resil__timerheap_disarm(&e->heap, t);
}

void resil__engine_attach(resil_engine *e, resil__engine_ext *x) {
  x->prev = NULL;
  x->next = e->exts;
  if (e->exts) e->exts->prev = x;
  e->exts = x;
}

void resil__engine_detach(resil_engine *e, resil__engine_ext *x) {
  if (x->prev) x->prev->next = x->next;
  else if (e->exts == x) e->exts = x->next;
  if (x->next) x->next->prev = x->prev;
  x->prev = x->next = NULL;
  pthread_mutex_lock(&e->mu);
  if (x->posted) {
    resil__engine_ext **pp = &e->post_head;
    while (*pp && *pp != x) pp = &(*pp)->post_next;
    if (*pp) *pp = x->post_next;
    x->posted = 0;
  }
  pthread_mutex_unlock(&e->mu);
}

void resil__engine_post(resil_engine *e, resil__engine_ext *x) {
  pthread_mutex_lock(&e->mu);
  int first = !x->posted;
  if (first) {
    x->posted = 1;
    x->post_next = e->post_head;
    e->post_head = x;
  }
  pthread_mutex_unlock(&e->mu);
  if (first) e->ad->wake(e->ad->self);
}

/* ---- public API ------------------------------------------------------------ */

#define CONFIG_MIN_SIZE (offsetof(resil_engine_config, client) + sizeof(resil_http_client *))
#define POLICIES_MIN_SIZE (offsetof(resil_engine_policies, attempt_timeout_ns) + sizeof(int64_t))

void resil_engine_config_init_sized(resil_engine_config *cfg, size_t n) {
  if (!cfg) return;
  resil_engine_config full;
  memset(&full, 0, sizeof full);
  full.struct_size = sizeof full;
  resil__sized_out(cfg, n, &full, sizeof full);
}

void resil_engine_policies_init_sized(resil_engine_policies *p, size_t n) {
  if (!p) return;
  resil_engine_policies full;
  memset(&full, 0, sizeof full);
  full.struct_size = sizeof full;
  resil__sized_out(p, n, &full, sizeof full);
}

resil_status resil_engine_new(const resil_engine_config *ucfg, resil_engine **out,
                              resil_error *err) {
  if (!out) return resil__err(err, RESIL_EINVAL, NULL, "out must not be NULL");
  *out = NULL;
  if (!ucfg) return resil__err(err, RESIL_EINVAL, NULL, "cfg must not be NULL");
  resil_engine_config cfg;
  resil_engine_config_init(&cfg);
  resil_status st = resil__sized_in(&cfg, sizeof cfg, ucfg, CONFIG_MIN_SIZE,
                                    "resil_engine_config", "resil_engine_config_init", err);
  if (st != RESIL_OK) return st;
  const resil_loop_adapter *ad = cfg.adapter;
  if (!ad || !ad->watch || !ad->timer || !ad->set_wake || !ad->wake)
    return resil__err(err, RESIL_EINVAL, "adapter",
                      "must be set, with watch, timer, set_wake and wake");
  resil_http_client *c = cfg.client;
  if (!c || c->magic != RESIL_MAGIC_HTTP_CLIENT)
    return resil__err(err, RESIL_EINVAL, "client", "must be set");
  resil_engine *e = resil__calloc(c->t.alloc, sizeof *e);
  if (!e) return resil__err(err, RESIL_ENOMEM, NULL, "out of memory");
  e->magic = RESIL_MAGIC_ENGINE;
  e->alloc = c->t.alloc;
  e->ad = ad;
  e->rll.struct_size = sizeof e->rll;
  e->rll.self = e;
  e->rll.now_ns = rll_now;
  e->rll.watch = rll_watch;
  e->rll.timer_new = rll_timer_new;
  e->rll.timer_arm = rll_timer_arm;
  e->rll.timer_disarm = rll_timer_disarm;
  e->rll.timer_free = rll_timer_free;
  e->rll.on_end = rll_on_end;
  e->client = c;
  e->max_free = 2 * (size_t)c->nslots < 64 ? 64 : 2 * (size_t)c->nslots;
  e->conn_cap = c->nslots;
  size_t no = c->t.norigins ? c->t.norigins : 1;
  e->origin_busy = resil__calloc(e->alloc, no * sizeof(uint32_t));
  e->origin_waiting = resil__calloc(e->alloc, no * sizeof(uint32_t));
  if (!e->origin_busy || !e->origin_waiting) {
    resil__free(e->alloc, e->origin_busy);
    resil__free(e->alloc, e->origin_waiting);
    resil__free(e->alloc, e);
    return resil__err(err, RESIL_ENOMEM, NULL, "out of memory");
  }
  resil__timerheap_init(&e->heap, e->alloc);
  e->curl_timer.cb = on_curl_timeout;
  e->curl_timer.arg = e;
  e->conn_timer.cb = on_conn_timer;
  e->conn_timer.arg = e;
  if (pthread_mutex_init(&e->mu, NULL) != 0) {
    resil__free(e->alloc, e->origin_busy);
    resil__free(e->alloc, e->origin_waiting);
    resil__free(e->alloc, e);
    return resil__err(err, RESIL_ESYS, NULL, "pthread_mutex_init failed");
  }
  e->multi = curl_multi_init();
  CURLMcode mc = e->multi ? CURLM_OK : CURLM_OUT_OF_MEMORY;
#define MSET(opt, val)                                                         \
  do {                                                                         \
    if (mc == CURLM_OK) mc = curl_multi_setopt(e->multi, opt, val);            \
  } while (0)
  MSET(CURLMOPT_SOCKETFUNCTION, on_curl_socket);
  MSET(CURLMOPT_SOCKETDATA, (void *)e);
  MSET(CURLMOPT_TIMERFUNCTION, on_curl_timer);
  MSET(CURLMOPT_TIMERDATA, (void *)e);
  MSET(CURLMOPT_MAX_TOTAL_CONNECTIONS, (long)c->nslots);
  MSET(CURLMOPT_MAX_HOST_CONNECTIONS, (long)c->per_host);
  MSET(CURLMOPT_MAXCONNECTS, (long)c->nslots);
  /* HTTP/1.1 only: no pipelining or multiplexing. */
  MSET(CURLMOPT_PIPELINING, (long)CURLPIPE_NOTHING);
#undef MSET
  if (mc != CURLM_OK || ad->set_wake(ad->self, on_wake, e) != 0) {
    if (e->multi) curl_multi_cleanup(e->multi);
    pthread_mutex_destroy(&e->mu);
    resil__free(e->alloc, e->origin_busy);
    resil__free(e->alloc, e->origin_waiting);
    resil__free(e->alloc, e);
    return resil__err(err, RESIL_ESYS, NULL, "could not set up libcurl's multi handle or the adapter");
  }
  resil__http_client_ref(c);
  /* Told when a resolved name's first lookup ends (none: no resolver). */
  atomic_init(&e->dns_kick, 0);
  e->dns_watch.fn = dns_landed;
  e->dns_watch.arg = e;
  resil__http_client_watch(c, &e->dns_watch);
  *out = e;
  if (err) resil_error_clear(err);
  return RESIL_OK;
}

void resil_engine_free(resil_engine *e) {
  if (!e || e->magic != RESIL_MAGIC_ENGINE) return;
  e->freeing = 1; /* resil_engine_call(_keyed) from a done_fn: RESIL_ESTATE */
  /* No word of a first lookup reaches the adapter after this. */
  resil__http_client_unwatch(e->client, &e->dns_watch);
  /* Flows on top of the engine (keyed.c) end first. */
  while (e->exts) e->exts->on_free(e->exts);
  while (e->calls) {
    atomic_store_explicit(&e->calls->cancel_req, 1, memory_order_release);
    do_cancel(e->calls);
  }
  pthread_mutex_lock(&e->mu);
  resil_engine_handle *l = e->cancel_head;
  e->cancel_head = NULL;
  pthread_mutex_unlock(&e->mu);
  while (l) {
    resil_engine_handle *n = l->cancel_next;
    call_unref(l);
    l = n;
  }
  /* Every waiter was withdrawn above (bh_withdraw takes back a grant that
   * raced); nothing is left on e->granted. */
  bh_drain(e);
  /* The backends that decided on this loop drop their watches and timers. */
  while (e->bends) {
    eng_bend *b = e->bends;
    e->bends = b->next;
    b->end(b->arg);
    resil__free(e->alloc, b);
  }
  while (e->bwatches) { /* a backend that left a watch */
    eng_bwatch *w = e->bwatches;
    e->bwatches = w->next;
    e->ad->watch(e->ad->self, w->fd, 0, on_bio, NULL);
    resil__free(e->alloc, w);
  }
  curl_multi_cleanup(e->multi);
  while (e->socks) {
    eng_sock *sk = e->socks;
    e->socks = sk->next;
    e->ad->watch(e->ad->self, sk->fd, 0, on_io, e);
    resil__free(e->alloc, sk);
  }
  while (e->free_x) {
    eng_xfer *x = e->free_x;
    e->free_x = x->next_free;
    resil__http_slot_cleanup(e->client, &x->s);
    resil__free(e->alloc, x);
  }
  if (e->armed) e->ad->timer(e->ad->self, -1, NULL, NULL);
  resil__timerheap_free(&e->heap);
  pthread_mutex_destroy(&e->mu);
  resil_http_client *c = e->client;
  resil__free(e->alloc, e->origin_busy);
  resil__free(e->alloc, e->origin_waiting);
  e->magic = RESIL_MAGIC_DEAD;
  resil__free(e->alloc, e);
  resil__http_client_unref(c);
}

resil_status resil_engine_call(resil_engine *e, const char *endpoint,
                               const resil_http_args *args,
                               const resil_engine_policies *policies, const resil_ctx *ctx,
                               resil_engine_done_fn done, void *user, resil_engine_handle **out,
                               resil_error *err) {
  if (out) *out = NULL;
  if (!e || e->magic != RESIL_MAGIC_ENGINE)
    return resil__err(err, RESIL_EINVAL, NULL, "engine must not be NULL");
  if (!done) return resil__err(err, RESIL_EINVAL, "done", "must not be NULL");
  if (e->freeing)
    return resil__err(err, RESIL_ESTATE, NULL, "the engine is being freed (a done_fn run by resil_engine_free)");
  resil_ctx lc;
  const resil_ctx *cx = resil__ctx_in(&lc, ctx);
  if (!cx) return resil__err(err, RESIL_EINVAL, "ctx", "call resil_ctx_init()");
  resil_engine_policies pol;
  resil_engine_policies_init(&pol);
  if (policies) {
    resil_status st = resil__sized_in(&pol, sizeof pol, policies, POLICIES_MIN_SIZE,
                                      "resil_engine_policies", "resil_engine_policies_init", err);
    if (st != RESIL_OK) return st;
  }
  if (pol.attempt_timeout_ns < 0)
    return resil__err(err, RESIL_EINVAL, "attempt_timeout_ns", "must not be negative");
  resil_engine_handle *call = resil__calloc(e->alloc, sizeof *call);
  if (!call) return resil__err(err, RESIL_ENOMEM, NULL, "out of memory");
  resil_status st = resil_http_request_new(e->client, endpoint, args, &call->req, err);
  if (st == RESIL_OK && pol.retry && resil_retry_state_new(e->alloc, &call->rst) != RESIL_OK)
    st = resil__err(err, RESIL_ENOMEM, NULL, "out of memory");
  if (st != RESIL_OK) {
    resil_http_request_free(call->req);
    resil__free(e->alloc, call);
    return st;
  }
  atomic_init(&call->refs, out ? 2 : 1);
  atomic_init(&call->cancel_req, 0);
  atomic_init(&call->finished, 0);
  atomic_init(&call->grant_in, 0);
  call->alloc = e->alloc;
  call->e = e;
  call->pol = pol;
  resil_ratelimiter_async_init(&call->rq);
  if (pol.ratelimiter) call->steps[call->nsteps++] = STEP_RL;
  if (pol.breaker) call->steps[call->nsteps++] = STEP_BR;
  if (pol.bulkhead) call->steps[call->nsteps++] = STEP_BH;
  call->ctx = *cx;
  call->ctx.flags |= resil_http_request_call_flags(call->req);
  call->ctx.idempotency_key = resil_http_request_idempotency_key(call->req);
  call->done = done;
  call->user = user;
  call->state = ST_START;
  call->t.cb = on_call_timer;
  call->t.arg = call;
  call->dl.cb = on_deadline;
  call->dl.arg = call;
  call->at.cb = on_attempt_timer;
  call->at.arg = call;
  call->ht.cb = on_hedge_timer;
  call->ht.arg = call;
  /* The deadline on the loop's clock. When both are the process's
   * CLOCK_MONOTONIC (an adapter without its own now_ns, a ctx on the
   * system clock) it is the ctx's deadline itself. Otherwise it is
   * converted through the time left, read before the loop's now: the
   * thread may be preempted between the two reads, and in this order that
   * makes the deadline late by the gap, never early. */
  int64_t rem = resil_ctx_remaining_ns(cx);
  int64_t now = eng_now(e);
  int sys_ctx = resil__clock(cx->clock) == resil_clock_system();
  /* The header's deadline: the ctx's own on the system clock
   * (CLOCK_MONOTONIC), else converted in the same order as below. */
  if (rem == INT64_MAX)
    call->deadline_mono = INT64_MAX;
  else if (sys_ctx)
    call->deadline_mono = cx->deadline_ns;
  else
    call->deadline_mono = resil__sat_add(e->ad->now_ns ? resil__http_mono_ns() : now, rem);
  if (rem == INT64_MAX)
    call->deadline_at = INT64_MAX;
  else if (!e->ad->now_ns && sys_ctx)
    call->deadline_at = cx->deadline_ns;
  else
    call->deadline_at = resil__sat_add(now, rem);
  /* The start is deferred to a later loop iteration: done_fn is never
   * called from inside this function. */
  if (arm_at(e, &call->t, now) != 0 ||
      (call->deadline_at != INT64_MAX && arm_at(e, &call->dl, call->deadline_at) != 0) ||
      token_subscribe(call) != 0) {
    resil__timerheap_disarm(&e->heap, &call->t);
    resil__timerheap_disarm(&e->heap, &call->dl);
    resil_retry_state_free(call->rst);
    resil_http_request_free(call->req);
    resil__free(e->alloc, call);
    return resil__err(err, RESIL_ENOMEM, NULL, "out of memory");
  }
  call->next = e->calls;
  if (e->calls) e->calls->prev = call;
  e->calls = call;
  e->active++;
  ST_INC(e, submitted);
  rearm(e);
  if (out) *out = call;
  if (err) resil_error_clear(err);
  return RESIL_OK;
}

void resil_engine_cancel(resil_engine_handle *call) {
  if (!call) return;
  /* After completion: a no-op (the engine is not touched). */
  if (atomic_load_explicit(&call->finished, memory_order_acquire)) return;
  if (atomic_exchange_explicit(&call->cancel_req, 1, memory_order_acq_rel)) return;
  resil_engine *e = call->e;
  atomic_fetch_add_explicit(&call->refs, 1, memory_order_relaxed);
  pthread_mutex_lock(&e->mu);
  call->cancel_next = e->cancel_head;
  e->cancel_head = call;
  pthread_mutex_unlock(&e->mu);
  e->ad->wake(e->ad->self);
}

void resil_engine_handle_release(resil_engine_handle *call) {
  if (call) call_unref(call);
}

size_t resil_engine_active(const resil_engine *e) { return e ? e->active : 0; }
size_t resil_engine_in_flight(const resil_engine *e) { return e ? e->in_flight : 0; }
size_t resil_engine_peak_in_flight(const resil_engine *e) { return e ? e->peak : 0; }
size_t resil_engine_queued(const resil_engine *e) { return e ? e->queued : 0; }

resil_status resil_engine_get_stats_sized(const resil_engine *ce, resil_engine_stats *out,
                                          size_t n) {
  if (!ce || ce->magic != RESIL_MAGIC_ENGINE) return RESIL_EMISUSE;
  if (!out) return RESIL_EINVAL;
  resil_engine *e = (resil_engine *)ce; /* atomics need non-const */
  resil_engine_stats st;
  memset(&st, 0, sizeof st);
  st.struct_size = sizeof st;
#define LD(f) atomic_load_explicit(&e->st.f, memory_order_relaxed)
  st.calls_submitted = LD(submitted);
  st.calls_completed = LD(completed);
  st.completed_answered = LD(answered);
  st.completed_not_sent = LD(not_sent);
  st.completed_unknown = LD(unknown);
  st.completed_rejected = LD(rejected);
  st.transfers = LD(transfers);
  st.retries = LD(retries);
  st.hedges_sent = LD(hedges_sent);
  st.hedges_rejected = LD(hedges_rejected);
  st.hedge_wins = LD(hedge_wins);
  st.cancelled_losers = LD(losers);
  st.unhedged = LD(unhedged);
  st.rejected_ratelimiter = LD(rej_ratelimiter);
  st.rejected_breaker = LD(rej_breaker);
  st.rejected_bulkhead_full = LD(rej_bh_full);
  st.rejected_bulkhead_wait = LD(rej_bh_wait);
  st.rejected_pool_timeout = LD(rej_pool);
  st.rejected_recovering = LD(rej_recovering);
  st.hedges_refused_recovering = LD(hedges_recovering);
  st.retries_suppressed_recovering = LD(retries_recovering);
#undef LD
  resil__sized_out(out, n, &st, sizeof st);
  return RESIL_OK;
}

uint64_t resil__engine_breaker_open(const resil_engine *ce) {
  resil_engine *e = (resil_engine *)ce; /* atomics need non-const */
  return atomic_load_explicit(&e->st.rej_breaker_open, memory_order_relaxed);
}
