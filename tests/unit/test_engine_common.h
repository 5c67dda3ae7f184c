/* Helpers of the engine tests (tests/unit/test_engine*.c).
 *
 * TEST ADAPTER: test_loop below is a tiny private poll() loop filling a
 * resil_loop_adapter (loop.h) so that the engine can be tested before the
 * built-in loop exists on this branch. It is NOT the library's loop; it
 * will be replaced by resil_loop (resil_loop_new/resil_loop_adapter_new)
 * once that is merged. It keeps the adapter rules of loop.h: callbacks on
 * the loop thread only, never from inside watch/timer (a timer armed with
 * delay 0 fires on a later iteration), one watch per fd, one timer, wake
 * from any thread, coalescing and never lost.
 *
 * When the built-in loop is part of the library (RESIL_HAVE_LOOP), the
 * suites run again on resil_loop (tl_use_builtin_loop), and when
 * libresil-uv is built (RESIL_HAVE_UV), again on libuv (tl_use_uv). */
#ifndef RESIL_TEST_ENGINE_COMMON_H
#define RESIL_TEST_ENGINE_COMMON_H

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdatomic.h>
#include <unistd.h>

#include "resil/engine.h"
#include "test_http_common.h"
#ifdef RESIL_HAVE_UV
#include "resil/uv.h"
#endif

typedef struct tl_watch {
  int fd;
  unsigned ev;
  resil_io_fn cb;
  void *arg;
} tl_watch;

typedef struct test_loop {
  resil_loop_adapter ad;
  tl_watch w[4096];
  size_t nw;
  int timer_armed;
  int64_t timer_at;
  uint64_t timer_iter; /* iteration it was armed in */
  resil_loop_fn tcb;
  void *targ;
  resil_loop_fn wcb;
  void *warg;
  int pipe_fd[2];
  uint64_t iter;
  pthread_t owner;
  size_t in_adapter; /* > 0 while an adapter function runs */
  size_t reentered;  /* callbacks run from inside an adapter function */
  size_t wrong_thread;
#ifdef RESIL_HAVE_LOOP
  resil_loop *rl;            /* the built-in loop, when used */
  resil_loop_adapter *rad;
#endif
#ifdef RESIL_HAVE_UV
  uv_loop_t uvl;
  uv_timer_t bound; /* bounds one uv_run(UV_RUN_ONCE) */
  resil_loop_adapter *uad;
#endif
  const resil_loop_adapter *adapter; /* what the engine is given */
} test_loop;

/* 1: tl_init() sets up libuv through libresil-uv. */
static int tl_use_uv __attribute__((unused));

/* 1: tl_init() sets up the built-in loop instead of the test adapter. */
static int tl_use_builtin_loop __attribute__((unused));

static inline int64_t tl_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static inline void tl_check_thread(test_loop *l) {
  if (!pthread_equal(pthread_self(), l->owner)) l->wrong_thread++;
}

static inline int tl_watch_fn(void *self, int fd, unsigned events, resil_io_fn cb, void *arg) {
  test_loop *l = self;
  tl_check_thread(l);
  size_t i = 0;
  while (i < l->nw && l->w[i].fd != fd) i++;
  if (events == 0) {
    if (i < l->nw) l->w[i] = l->w[--l->nw];
    return 0;
  }
  if (i == l->nw) {
    if (l->nw == sizeof l->w / sizeof l->w[0]) {
      errno = ENOMEM;
      return -1;
    }
    l->nw++;
  }
  l->w[i] = (tl_watch){fd, events, cb, arg};
  return 0;
}

static inline int tl_timer_fn(void *self, int64_t delay_ns, resil_loop_fn cb, void *arg) {
  test_loop *l = self;
  tl_check_thread(l);
  if (delay_ns < 0) {
    l->timer_armed = 0;
    return 0;
  }
  l->timer_armed = 1;
  l->timer_at = tl_now() + delay_ns;
  l->timer_iter = l->iter;
  l->tcb = cb;
  l->targ = arg;
  return 0;
}

static inline int tl_set_wake_fn(void *self, resil_loop_fn cb, void *arg) {
  test_loop *l = self;
  l->wcb = cb;
  l->warg = arg;
  return 0;
}

static inline int tl_wake_fn(void *self) {
  test_loop *l = self;
  char b = 1;
  ssize_t w = write(l->pipe_fd[1], &b, 1);
  (void)w; /* EAGAIN: a wake is already pending */
  return 0;
}

static inline void tl_init(test_loop *l) {
  memset(l, 0, sizeof *l);
  l->ad.struct_size = sizeof l->ad;
  l->ad.self = l;
  l->ad.watch = tl_watch_fn;
  l->ad.timer = tl_timer_fn;
  l->ad.set_wake = tl_set_wake_fn;
  l->ad.wake = tl_wake_fn;
  l->ad.now_ns = NULL;
  l->owner = pthread_self();
  l->adapter = &l->ad;
#ifdef RESIL_HAVE_LOOP
  if (tl_use_builtin_loop) {
    assert_int_equal(resil_loop_new(NULL, &l->rl), RESIL_OK);
    assert_int_equal(resil_loop_adapter_new(l->rl, &l->rad), RESIL_OK);
    l->adapter = l->rad;
  }
#endif
#ifdef RESIL_HAVE_UV
  if (tl_use_uv) {
    assert_int_equal(uv_loop_init(&l->uvl), 0);
    assert_int_equal(uv_timer_init(&l->uvl, &l->bound), 0);
    assert_int_equal(resil_uv_adapter_new(&l->uvl, NULL, &l->uad), RESIL_OK);
    l->adapter = l->uad;
  }
#endif
  assert_int_equal(pipe(l->pipe_fd), 0);
  fcntl(l->pipe_fd[0], F_SETFL, O_NONBLOCK);
  fcntl(l->pipe_fd[1], F_SETFL, O_NONBLOCK);
}

static inline void tl_close(test_loop *l) {
#ifdef RESIL_HAVE_UV
  if (l->uad) {
    resil_uv_adapter_free(l->uad);
    uv_close((uv_handle_t *)&l->bound, NULL);
    uv_run(&l->uvl, UV_RUN_NOWAIT);
    assert_int_equal(uv_loop_close(&l->uvl), 0);
  }
#endif
#ifdef RESIL_HAVE_LOOP
  resil_loop_adapter_free(l->rad);
  resil_loop_free(l->rl);
#endif
  close(l->pipe_fd[0]);
  close(l->pipe_fd[1]);
}

/* One iteration: waits at most max_ms for something. */
#ifdef RESIL_HAVE_UV
static void tl_bound_cb(uv_timer_t *t) { (void)t; }
#endif

static inline void tl_run_once(test_loop *l, int max_ms) {
#ifdef RESIL_HAVE_UV
  if (l->uad) {
    uv_timer_start(&l->bound, tl_bound_cb, (uint64_t)max_ms, 0);
    uv_run(&l->uvl, UV_RUN_ONCE);
    uv_timer_stop(&l->bound);
    return;
  }
#endif
#ifdef RESIL_HAVE_LOOP
  if (l->rl) {
    resil_loop_run_once(l->rl, (int64_t)max_ms * 1000000, NULL);
    return;
  }
#endif
  static struct pollfd pfd[4097];
  l->iter++;
  size_t n = 0;
  pfd[n++] = (struct pollfd){.fd = l->pipe_fd[0], .events = POLLIN};
  for (size_t i = 0; i < l->nw; i++) {
    short ev = 0;
    if (l->w[i].ev & RESIL_IO_READ) ev |= POLLIN;
    if (l->w[i].ev & RESIL_IO_WRITE) ev |= POLLOUT;
    pfd[n++] = (struct pollfd){.fd = l->w[i].fd, .events = ev};
  }
  int to = max_ms;
  if (l->timer_armed) {
    int64_t d = l->timer_at - tl_now();
    int ms = d <= 0 ? 0 : (int)((d + 999999) / 1000000);
    if (l->timer_iter == l->iter) ms = 0;
    if (ms < to) to = ms;
  }
  int r = poll(pfd, (nfds_t)n, to);
  if (r > 0 && (pfd[0].revents & POLLIN)) {
    char buf[64];
    while (read(l->pipe_fd[0], buf, sizeof buf) > 0) {
    }
    if (l->wcb) l->wcb(l->warg);
  }
  for (size_t k = 1; r > 0 && k < n; k++) {
    if (!pfd[k].revents) continue;
    /* The watch may have changed or gone in an earlier callback. */
    size_t i = 0;
    while (i < l->nw && l->w[i].fd != pfd[k].fd) i++;
    if (i == l->nw) continue;
    unsigned ev = 0;
    if ((pfd[k].revents & POLLIN) && (l->w[i].ev & RESIL_IO_READ)) ev |= RESIL_IO_READ;
    if ((pfd[k].revents & POLLOUT) && (l->w[i].ev & RESIL_IO_WRITE)) ev |= RESIL_IO_WRITE;
    if (pfd[k].revents & (POLLERR | POLLHUP | POLLNVAL)) ev |= RESIL_IO_ERROR;
    if (ev) l->w[i].cb(l->w[i].arg, pfd[k].fd, ev);
  }
  /* Only a timer armed before this iteration fires in it. */
  if (l->timer_armed && l->timer_iter < l->iter && tl_now() >= l->timer_at) {
    l->timer_armed = 0;
    l->tcb(l->targ);
  }
}

/* Runs until *count reaches want or max_ms pass; returns 1 when reached. */
static inline int tl_run_until(test_loop *l, const atomic_size_t *count, size_t want,
                               int64_t max_ms) {
  int64_t end = mono_ms() + max_ms;
  while (atomic_load(count) < want) {
    if (mono_ms() > end) return 0;
    tl_run_once(l, 50);
  }
  return 1;
}

/* An engine for c on the loop l (the engine's own defaults). */
static inline resil_engine *engine_on(test_loop *l, resil_http_client *c) {
  resil_engine_config ec;
  resil_engine_config_init(&ec);
  ec.adapter = l->adapter;
  ec.client = c;
  resil_engine *e = NULL;
  resil_error err;
  if (resil_engine_new(&ec, &e, &err) != RESIL_OK) fail_msg("engine: %s", err.msg);
  return e;
}

/* What most engine tests start with: a client on the fixture (client_on,
 * cfg_fn may adjust its config), a fresh loop (tl_init: the test adapter,
 * resil_loop or libuv) and an engine on both. */
typedef struct te_env {
  test_loop l;
  resil_http_client *c;
  resil_engine *e;
} te_env;

/* Opens the test's env; one at a time (static storage: the test loop is
 * large). Free with te_close, before the policies the calls used. */
static inline te_env *te_open(resil_fixture *f, const resil_http_endpoint *eps, size_t n,
                              void (*cfg_fn)(resil_http_client_config *, void *), void *u) {
  static te_env v;
  v.c = client_on(f, eps, n, cfg_fn, u);
  tl_init(&v.l);
  v.e = engine_on(&v.l, v.c);
  return &v;
}

/* Frees the engine (unless the test already did and set e to NULL: a
 * running call completes once, inside), the loop and the client. */
static inline void te_close(te_env *v) {
  resil_engine_free(v->e);
  v->e = NULL;
  tl_close(&v->l);
  resil_http_client_free(v->c);
  v->c = NULL;
}

/* ---- a breaker recovering (DESIGN §2.9), on a manual clock ---------------------
 * Window 4, at least 2 calls, 50 %, OPEN wait 100 ms, `probes` HALF_OPEN
 * calls, a 1 s linear ramp from ramp_min_percent (0: no ramp), on mc. The
 * helpers below drive it through its split form on the test thread; the
 * clock moves only when they move it, so a ramp stays at its start, where
 * it admits ramp_min_percent of the decisions by error diffusion from one
 * half: with 50 % the first decision, then every second; with 10 % the
 * 6th, then every 10th (breaker.h "Ramp"). */
static inline resil_breaker *te_breaker_new(resil_manual_clock *mc, uint32_t probes,
                                            uint32_t ramp_min_percent) {
  resil_breaker_config bc;
  resil_breaker_config_init(&bc);
  bc.window_size = 4;
  bc.minimum_calls = 2;
  bc.failure_rate_threshold_pct = 50;
  bc.open_wait_ns = RESIL_MS(100);
  bc.half_open_permitted_calls = probes;
  if (ramp_min_percent) {
    bc.ramp_duration_ns = RESIL_S(1);
    bc.ramp_min_percent = ramp_min_percent;
  }
  bc.clock = resil_manual_clock_get(mc);
  resil_breaker *br = NULL;
  resil_error err;
  if (resil_breaker_new(&bc, &br, &err) != RESIL_OK) fail_msg("breaker: %s", err.msg);
  return br;
}

/* Calls admitted by br and recorded with HTTP status `status` until br is
 * OPEN, then its OPEN wait passes on mc: the next call is its probe, and
 * resil_breaker_recovering() says so. */
static inline void te_breaker_open_past_wait(resil_breaker *br, resil_manual_clock *mc) {
  for (int i = 0; i < 8 && resil_breaker_state(br) != RESIL_BREAKER_OPEN; i++) {
    resil_breaker_permit p;
    assert_int_equal(resil_breaker_try_acquire(br, &p), RESIL_DECISION_GO);
    resil_outcome o = resil_outcome_http(503);
    assert_int_equal(resil_breaker_record(br, &p, &o, 0), RESIL_OK);
  }
  assert_int_equal(resil_breaker_state(br), RESIL_BREAKER_OPEN);
  resil_manual_clock_advance_ns(mc, RESIL_MS(100));
  assert_true(resil_breaker_recovering(br));
}

/* te_breaker_open_past_wait, then healthy probes: CLOSED, ramping when
 * te_breaker_new gave it a ramp (at its start: the clock stands still). */
static inline void te_breaker_recover(resil_breaker *br, resil_manual_clock *mc) {
  te_breaker_open_past_wait(br, mc);
  for (int i = 0; i < 8 && resil_breaker_state(br) != RESIL_BREAKER_CLOSED; i++) {
    resil_breaker_permit p;
    assert_int_equal(resil_breaker_try_acquire(br, &p), RESIL_DECISION_GO);
    resil_outcome o = resil_outcome_ok();
    assert_int_equal(resil_breaker_record(br, &p, &o, 0), RESIL_OK);
  }
  assert_int_equal(resil_breaker_state(br), RESIL_BREAKER_CLOSED);
}

/* ---- completion bookkeeping -------------------------------------------------- */

/* The completions of a test's calls, by call number (submit's i). */
#define MAXC 1000
typedef struct done_rec {
  atomic_size_t done;
  int in_submit;           /* set around resil_engine_call */
  size_t inside_submit;    /* completions seen while in_submit */
  size_t wrong_thread;
  pthread_t loop_thread;
  unsigned char count[MAXC];
  resil_outcome o[MAXC];
  int status[MAXC];
  int64_t at_ms[MAXC];
  resil_http_response *keep[MAXC]; /* when keep_responses */
  int keep_responses;
  struct call_tag {
    struct done_rec *rec;
    size_t i;
  } tags[MAXC]; /* the user pointer of call i */
} done_rec;

typedef struct call_tag call_tag;

static inline void on_done(void *user, resil_engine_handle *h, resil_outcome o, resil_http_response *r) {
  (void)h;
  call_tag *t = user;
  done_rec *d = t->rec;
  if (d->in_submit) d->inside_submit++;
  if (!pthread_equal(pthread_self(), d->loop_thread)) d->wrong_thread++;
  d->count[t->i]++;
  d->o[t->i] = o;
  d->status[t->i] = r ? resil_http_response_status(r) : -1;
  d->at_ms[t->i] = mono_ms();
  if (d->keep_responses) d->keep[t->i] = r;
  else resil_http_response_free(r);
  atomic_fetch_add(&d->done, 1);
}

static inline void rec_init(done_rec *d) {
  memset(d, 0, sizeof *d);
  d->loop_thread = pthread_self();
}

/* The test's completion record, emptied (static storage: it is large). */
static inline done_rec *rec_new(void) {
  static done_rec d;
  rec_init(&d);
  return &d;
}

static inline resil_status submit(resil_engine *e, done_rec *d, size_t i, const char *ep,
                           const char *const *kv, const resil_engine_policies *pol,
                           const resil_ctx *ctx, resil_engine_handle **out) {
  resil_http_param ps[4];
  size_t n = 0;
  for (; kv && kv[2 * n] && n < 4; n++) {
    ps[n].name = kv[2 * n];
    ps[n].value = kv[2 * n + 1];
  }
  resil_http_args args;
  resil_http_args_init(&args);
  args.params = ps;
  args.param_count = n;
  d->tags[i] = (call_tag){d, i};
  resil_error err;
  d->in_submit = 1;
  resil_status st = resil_engine_call(e, ep, &args, pol, ctx, on_done, &d->tags[i], out, &err);
  d->in_submit = 0;
  if (st != RESIL_OK) print_message("submit: %s\n", err.msg);
  return st;
}


#endif
