/* The rules of loop.h, checked on every shipped adapter: the built-in loop
 * (resil_loop) and, when libresil-uv is built, libuv (uv.h). Each case runs
 * once per adapter through a small driver ("one iteration, waiting at most
 * this long"), so both are held to the same text.
 *
 * Waits are bounded loops of iterations (seconds, for a loaded machine);
 * time assertions are lower bounds on the adapter's own clock (never
 * early). Every callback checks it runs on the loop thread. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "resil/loop.h"
#include "test_util.h"
#ifdef RESIL_HAVE_UV
#include "resil/uv.h"
#endif

static int64_t mono(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

enum { BUILTIN, LIBUV };

typedef struct drv {
  int kind;
  pthread_t loop_thread;
  resil_loop_adapter *a, *b; /* two adapters on the same loop */
  resil_loop *loop;
#ifdef RESIL_HAVE_UV
  uv_loop_t uv;
  uv_timer_t guard;
#endif
} drv;

static drv *cur; /* the running case's driver, for the callbacks' checks */

#define ON_LOOP_THREAD() assert_true(pthread_equal(pthread_self(), cur->loop_thread))

static int setup_builtin(void **state) {
  drv *d = calloc(1, sizeof *d);
  d->kind = BUILTIN;
  d->loop_thread = pthread_self();
  assert_status(RESIL_OK, resil_loop_new(NULL, &d->loop));
  assert_status(RESIL_OK, resil_loop_adapter_new(d->loop, &d->a));
  assert_status(RESIL_OK, resil_loop_adapter_new(d->loop, &d->b));
  cur = d;
  *state = d;
  return 0;
}

#ifdef RESIL_HAVE_UV
static int setup_uv(void **state) {
  drv *d = calloc(1, sizeof *d);
  d->kind = LIBUV;
  d->loop_thread = pthread_self();
  assert_int_equal(uv_loop_init(&d->uv), 0);
  assert_int_equal(uv_timer_init(&d->uv, &d->guard), 0);
  assert_status(RESIL_OK, resil_uv_adapter_new(&d->uv, NULL, &d->a));
  assert_status(RESIL_OK, resil_uv_adapter_new(&d->uv, NULL, &d->b));
  cur = d;
  *state = d;
  return 0;
}

static void guard_cb(uv_timer_t *t) { (void)t; }
#endif

static int teardown(void **state) {
  drv *d = *state;
  if (d->kind == BUILTIN) {
    resil_loop_adapter_free(d->a);
    resil_loop_adapter_free(d->b);
    resil_loop_free(d->loop);
  }
#ifdef RESIL_HAVE_UV
  if (d->kind == LIBUV) {
    resil_uv_adapter_free(d->a);
    resil_uv_adapter_free(d->b);
    uv_close((uv_handle_t *)&d->guard, NULL);
    /* The adapters' memory goes in their close callbacks (uv.h). */
    uv_run(&d->uv, UV_RUN_DEFAULT);
    assert_int_equal(uv_loop_close(&d->uv), 0);
  }
#endif
  cur = NULL;
  free(d);
  return 0;
}

/* One loop iteration, waiting at most wait_ns (0: not at all). */
static void iterate(drv *d, int64_t wait_ns) {
  if (d->kind == BUILTIN) {
    assert_status(RESIL_OK, resil_loop_run_once(d->loop, wait_ns, NULL));
    return;
  }
#ifdef RESIL_HAVE_UV
  if (wait_ns == 0) {
    uv_run(&d->uv, UV_RUN_NOWAIT);
    return;
  }
  uv_timer_start(&d->guard, guard_cb, (uint64_t)(wait_ns / 1000000) + 1, 0);
  uv_run(&d->uv, UV_RUN_ONCE);
  uv_timer_stop(&d->guard);
#endif
}

/* Iterates until *flag >= want, for at most 10 s. */
static void run_until(drv *d, const int *flag, int want) {
  int64_t end = mono() + MS(10000);
  while (*flag < want && mono() < end) iterate(d, MS(20));
  assert_int_equal(*flag, want);
}

/* Iterates for at least ms milliseconds of real time. */
static void run_for(drv *d, int ms) {
  int64_t end = mono() + MS(ms);
  while (mono() < end) iterate(d, MS(5));
}

static int64_t now_of(resil_loop_adapter *a) {
  return a->now_ns ? a->now_ns(a->self) : mono();
}

static void pair(int sv[2]) {
  assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  for (int i = 0; i < 2; i++) fcntl(sv[i], F_SETFL, fcntl(sv[i], F_GETFL) | O_NONBLOCK);
}

static void unpair(int sv[2]) {
  close(sv[0]);
  close(sv[1]);
}

/* ---- fds ----------------------------------------------------------------- */

typedef struct io_rec {
  int calls;
  int fd;
  unsigned events;
  int in_watch; /* 1 while the test is inside watch() */
} io_rec;

static void io_cb(void *arg, int fd, unsigned ev) {
  io_rec *r = arg;
  ON_LOOP_THREAD();
  assert_false(r->in_watch);
  r->calls++;
  r->fd = fd;
  r->events |= ev;
}

static int watch(resil_loop_adapter *a, int fd, unsigned ev, io_rec *r) {
  if (r) r->in_watch = 1;
  int rc = a->watch(a->self, fd, ev, ev ? io_cb : NULL, r);
  if (r) r->in_watch = 0;
  return rc;
}

static void fd_readiness_for_read_and_write(void **state) {
  drv *d = *state;
  int sv[2];
  pair(sv);
  io_rec w = {0}, rd = {0};
  /* A fresh socket is writable at once. */
  assert_int_equal(watch(d->a, sv[0], RESIL_IO_WRITE, &w), 0);
  assert_int_equal(w.calls, 0); /* never from inside watch() */
  run_until(d, &w.calls, 1);
  assert_int_equal(w.fd, sv[0]);
  assert_true(w.events & RESIL_IO_WRITE);
  assert_false(w.events & RESIL_IO_READ);
  /* Not readable until the peer writes. */
  assert_int_equal(watch(d->a, sv[0], RESIL_IO_READ, &rd), 0);
  run_for(d, 30);
  assert_int_equal(rd.calls, 0);
  assert_int_equal(write(sv[1], "x", 1), 1);
  run_until(d, &rd.calls, 1);
  assert_true(rd.events & RESIL_IO_READ);
  assert_false(rd.events & RESIL_IO_WRITE);
  assert_int_equal(watch(d->a, sv[0], 0, NULL), 0);
  unpair(sv);
}

static void peer_hangup_is_reported(void **state) {
  drv *d = *state;
  int sv[2];
  pair(sv);
  io_rec r = {0};
  assert_int_equal(watch(d->a, sv[0], RESIL_IO_READ, &r), 0);
  close(sv[1]);
  run_until(d, &r.calls, 1);
  /* READ (end of stream) or ERROR; reading tells which: 0 bytes, EOF. */
  assert_true(r.events & (RESIL_IO_READ | RESIL_IO_ERROR));
  char c;
  assert_int_equal(read(sv[0], &c, 1), 0);
  assert_int_equal(watch(d->a, sv[0], 0, NULL), 0);
  close(sv[0]);
}

static void events_zero_stops_watching(void **state) {
  drv *d = *state;
  int sv[2];
  pair(sv);
  io_rec r = {0};
  assert_int_equal(write(sv[1], "x", 1), 1);
  assert_int_equal(watch(d->a, sv[0], RESIL_IO_READ | RESIL_IO_WRITE, &r), 0);
  run_until(d, &r.calls, 1);
  assert_int_equal(watch(d->a, sv[0], 0, NULL), 0);
  int before = r.calls;
  run_for(d, 40);
  assert_int_equal(r.calls, before);
  /* Stopping does not close the fd, and stopping twice is fine. */
  assert_int_equal(fcntl(sv[0], F_GETFD) >= 0, 1);
  assert_int_equal(watch(d->a, sv[0], 0, NULL), 0);
  unpair(sv);
}

static void rewatch_replaces_events_callback_and_arg(void **state) {
  drv *d = *state;
  int sv[2];
  pair(sv);
  io_rec first = {0}, second = {0};
  assert_int_equal(write(sv[1], "x", 1), 1); /* readable and writable */
  assert_int_equal(watch(d->a, sv[0], RESIL_IO_READ, &first), 0);
  assert_int_equal(watch(d->a, sv[0], RESIL_IO_WRITE, &second), 0);
  run_until(d, &second.calls, 1);
  run_for(d, 20);
  assert_int_equal(first.calls, 0);
  /* Only what the new watch asks for is reported. */
  assert_true(second.events & RESIL_IO_WRITE);
  assert_false(second.events & RESIL_IO_READ);
  assert_int_equal(watch(d->a, sv[0], 0, NULL), 0);
  unpair(sv);
}

static void second_adapter_on_a_watched_fd_is_refused(void **state) {
  drv *d = *state;
  int sv[2];
  pair(sv);
  io_rec r = {0}, other = {0};
  assert_int_equal(watch(d->a, sv[0], RESIL_IO_WRITE, &r), 0);
  errno = 0;
  assert_int_equal(watch(d->b, sv[0], RESIL_IO_WRITE, &other), -1);
  assert_int_equal(errno, EEXIST);
  run_until(d, &r.calls, 1);
  assert_int_equal(other.calls, 0);
  /* Once the first stops, the other may watch it. */
  assert_int_equal(watch(d->a, sv[0], 0, NULL), 0);
  if (d->kind == LIBUV) iterate(d, 0); /* let the closed handle go */
  assert_int_equal(watch(d->b, sv[0], RESIL_IO_WRITE, &other), 0);
  run_until(d, &other.calls, 1);
  assert_int_equal(watch(d->b, sv[0], 0, NULL), 0);
  unpair(sv);
}

static void bad_arguments_are_refused(void **state) {
  drv *d = *state;
  errno = 0;
  assert_int_equal(d->a->watch(d->a->self, -1, RESIL_IO_READ, io_cb, NULL), -1);
  assert_int_equal(errno, EBADF);
  int sv[2];
  pair(sv);
  errno = 0;
  assert_int_equal(d->a->watch(d->a->self, sv[0], RESIL_IO_ERROR, io_cb, NULL), -1);
  assert_int_equal(errno, EINVAL);
  errno = 0;
  assert_int_equal(d->a->watch(d->a->self, sv[0], RESIL_IO_READ, NULL, NULL), -1);
  assert_int_equal(errno, EINVAL);
  errno = 0;
  assert_int_equal(d->a->timer(d->a->self, MS(1), NULL, NULL), -1);
  assert_int_equal(errno, EINVAL);
  assert_int_equal(d->a->struct_size, sizeof(resil_loop_adapter));
  unpair(sv);
  /* epoll cannot watch a regular file. */
  char path[] = "/tmp/resil_loop_XXXXXX";
  int f = mkstemp(path);
  assert_true(f >= 0);
  unlink(path);
  errno = 0;
  assert_int_equal(d->a->watch(d->a->self, f, RESIL_IO_READ, io_cb, NULL), -1);
  assert_int_equal(errno, EPERM);
  close(f);
}

typedef struct err_rec {
  int calls;
  unsigned first;
} err_rec;

static void err_cb(void *arg, int fd, unsigned ev) {
  err_rec *r = arg;
  (void)fd;
  ON_LOOP_THREAD();
  if (!r->calls) r->first = ev;
  r->calls++; /* the error is left pending */
}

static void fd_error_is_reported_until_the_watch_stops(void **state) {
  drv *d = *state;
  /* A connect refused on 127.0.0.1: a port just bound and closed. */
  int l = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in sa;
  memset(&sa, 0, sizeof sa);
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  assert_int_equal(bind(l, (struct sockaddr *)&sa, sizeof sa), 0);
  socklen_t len = sizeof sa;
  assert_int_equal(getsockname(l, (struct sockaddr *)&sa, &len), 0);
  close(l);
  int s = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
  int rc = connect(s, (struct sockaddr *)&sa, sizeof sa);
  assert_true(rc == 0 || errno == EINPROGRESS);
  err_rec r = {0, 0};
  assert_int_equal(d->a->watch(d->a->self, s, RESIL_IO_WRITE, err_cb, &r), 0);
  run_until(d, &r.calls, 3);
  assert_true(r.first & RESIL_IO_ERROR);
  int soerr = 0;
  len = sizeof soerr;
  assert_int_equal(getsockopt(s, SOL_SOCKET, SO_ERROR, &soerr, &len), 0);
  assert_int_equal(soerr, ECONNREFUSED);
  assert_int_equal(d->a->watch(d->a->self, s, 0, NULL, NULL), 0);
  int before = r.calls;
  run_for(d, 20);
  assert_int_equal(r.calls, before);
  close(s);
}

/* ---- the timer ----------------------------------------------------------- */

typedef struct tm_rec {
  resil_loop_adapter *a;
  int calls;
  int64_t at; /* now_ns in the callback */
  int in_arm;
} tm_rec;

static void tm_cb(void *arg) {
  tm_rec *r = arg;
  ON_LOOP_THREAD();
  assert_false(r->in_arm);
  r->calls++;
  r->at = now_of(r->a);
}

static int arm(resil_loop_adapter *a, int64_t delay, tm_rec *r) {
  if (r) r->in_arm = 1;
  int rc = a->timer(a->self, delay, tm_cb, r);
  if (r) r->in_arm = 0;
  return rc;
}

static void timer_fires_once_never_early(void **state) {
  drv *d = *state;
  tm_rec r = {d->a, 0, 0, 0};
  int64_t t0 = now_of(d->a);
  assert_int_equal(arm(d->a, MS(15), &r), 0);
  run_until(d, &r.calls, 1);
  assert_true(r.at - t0 >= MS(15));
  run_for(d, 50);
  assert_int_equal(r.calls, 1);
}

static void arming_again_replaces_deadline_and_callback(void **state) {
  drv *d = *state;
  tm_rec old = {d->a, 0, 0, 0}, repl = {d->a, 0, 0, 0};
  assert_int_equal(arm(d->a, MS(30), &old), 0);
  assert_int_equal(arm(d->a, MS(1), &repl), 0);
  run_until(d, &repl.calls, 1);
  run_for(d, 60);
  assert_int_equal(old.calls, 0);
  assert_int_equal(repl.calls, 1);
  /* A later deadline replaces an earlier one too. */
  tm_rec later = {d->a, 0, 0, 0};
  int64_t t0 = now_of(d->a);
  assert_int_equal(arm(d->a, MS(1), &later), 0);
  assert_int_equal(arm(d->a, MS(40), &later), 0);
  run_until(d, &later.calls, 1);
  assert_true(later.at - t0 >= MS(40));
}

static void negative_delay_disarms(void **state) {
  drv *d = *state;
  tm_rec r = {d->a, 0, 0, 0}, z = {d->a, 0, 0, 0};
  assert_int_equal(arm(d->a, MS(1), &r), 0);
  assert_int_equal(arm(d->a, -1, NULL), 0);
  run_for(d, 40);
  assert_int_equal(r.calls, 0);
  /* A delay-0 timer too, and disarming a disarmed timer is fine. */
  assert_int_equal(arm(d->a, 0, &z), 0);
  assert_int_equal(arm(d->a, -1, NULL), 0);
  assert_int_equal(arm(d->a, -1, NULL), 0);
  run_for(d, 20);
  assert_int_equal(z.calls, 0);
  /* The other adapter's timer is its own. */
  tm_rec o = {d->b, 0, 0, 0};
  assert_int_equal(arm(d->b, MS(1), &o), 0);
  assert_int_equal(arm(d->a, -1, NULL), 0);
  run_until(d, &o.calls, 1);
}

typedef struct zero_ctx {
  resil_loop_adapter *a;
  resil_loop_adapter *io; /* the adapter watching sv[0] */
  int io_calls, io_done;
  int zero_calls, rearm;
  int zero_at_io; /* zero_calls when the fd's callback ran */
  int sv[2];
} zero_ctx;

static void zero_cb(void *arg) {
  zero_ctx *z = arg;
  ON_LOOP_THREAD();
  assert_true(z->io_done); /* not before the arming callback returned */
  z->zero_calls++;
  if (z->rearm > 0) {
    z->rearm--;
    int before = z->zero_calls;
    assert_int_equal(z->a->timer(z->a->self, 0, zero_cb, z), 0);
    assert_int_equal(z->zero_calls, before); /* not from inside timer() */
  }
}

static void zero_io_cb(void *arg, int fd, unsigned ev) {
  zero_ctx *z = arg;
  (void)ev;
  ON_LOOP_THREAD();
  z->io_calls++;
  assert_int_equal(z->a->watch(z->a->self, fd, 0, NULL, NULL), 0);
  assert_int_equal(z->a->timer(z->a->self, 0, zero_cb, z), 0);
  assert_int_equal(z->zero_calls, 0);
  z->io_done = 1;
}

static void delay_zero_is_never_reentrant(void **state) {
  drv *d = *state;
  zero_ctx z;
  memset(&z, 0, sizeof z);
  z.a = d->a;
  pair(z.sv);
  assert_int_equal(d->a->watch(d->a->self, z.sv[0], RESIL_IO_WRITE, zero_io_cb, &z), 0);
  int64_t end = mono() + MS(10000);
  while (!z.io_calls && mono() < end) iterate(d, 0);
  assert_int_equal(z.io_calls, 1);
  /* Armed from an fd callback: not in that iteration, in a later one. */
  assert_int_equal(z.zero_calls, 0);
  run_until(d, &z.zero_calls, 1);
  unpair(z.sv);
}

static void starve_io_cb(void *arg, int fd, unsigned ev) {
  zero_ctx *z = arg;
  (void)ev;
  ON_LOOP_THREAD();
  z->zero_at_io = z->zero_calls;
  z->io_calls++;
  assert_int_equal(z->io->watch(z->io->self, fd, 0, NULL, NULL), 0);
}

static void timer_rearming_itself_with_delay_zero_does_not_starve_fds(void **state) {
  drv *d = *state;
  zero_ctx z;
  memset(&z, 0, sizeof z);
  z.a = d->a;
  z.io = d->b;
  z.io_done = 1;
  z.rearm = 1000;
  pair(z.sv);
  assert_int_equal(d->a->timer(d->a->self, 0, zero_cb, &z), 0);
  /* The fd is writable at once; it is served while the timer keeps going. */
  assert_int_equal(d->b->watch(d->b->self, z.sv[0], RESIL_IO_WRITE, starve_io_cb, &z), 0);
  run_until(d, &z.zero_calls, 1001);
  assert_int_equal(z.io_calls, 1);
  assert_true(z.zero_at_io < 1000);
  unpair(z.sv);
}

/* ---- freeing from callbacks ---------------------------------------------- */

typedef struct free_ctx {
  drv *d;
  int sv[2];
  int a_calls, b_calls;
} free_ctx;

static void free_b_calls(void *arg, int fd, unsigned ev) {
  free_ctx *f = arg;
  (void)fd;
  (void)ev;
  f->b_calls++;
}

static void free_b_calls0(void *arg) { free_b_calls(arg, -1, 0); }

static void free_other_cb(void *arg, int fd, unsigned ev) {
  free_ctx *f = arg;
  (void)ev;
  ON_LOOP_THREAD();
  f->a_calls++;
  resil_loop_adapter *a = f->d->a;
  /* Its own watch, and the whole other adapter with its watch, timer and
   * pending wake. */
  assert_int_equal(a->watch(a->self, fd, 0, NULL, NULL), 0);
  if (f->d->kind == BUILTIN) resil_loop_adapter_free(f->d->b);
#ifdef RESIL_HAVE_UV
  else resil_uv_adapter_free(f->d->b);
#endif
  f->d->b = NULL;
}

static void callback_may_free_its_watch_and_another_adapter(void **state) {
  drv *d = *state;
  free_ctx f;
  memset(&f, 0, sizeof f);
  f.d = d;
  pair(f.sv);
  int tv[2];
  pair(tv);
  resil_loop_adapter *b = d->b;
  assert_int_equal(b->watch(b->self, tv[0], RESIL_IO_WRITE, free_b_calls, &f), 0);
  assert_int_equal(b->timer(b->self, MS(1), free_b_calls0, &f), 0);
  assert_int_equal(b->set_wake(b->self, free_b_calls0, &f), 0);
  assert_int_equal(d->a->watch(d->a->self, f.sv[0], RESIL_IO_WRITE, free_other_cb, &f), 0);
  test_sleep_ms(3);
  assert_int_equal(b->wake(b->self), 0);
  run_until(d, &f.a_calls, 1);
  int b_then = f.b_calls;
  run_for(d, 30);
  assert_int_equal(f.a_calls, 1);
  assert_int_equal(f.b_calls, b_then); /* nothing of b after its free */
  unpair(f.sv);
  unpair(tv);
}

/* ---- wake from other threads --------------------------------------------- */

enum { WAKERS = 4, WAKES = 5000, ROUNDS = 300 };

typedef struct wake_ctx {
  resil_loop_adapter *a;
  atomic_int sent;  /* wakes announced (before each wake) */
  int seen;         /* sent as read by the last callback */
  int calls;
  atomic_int round; /* ping-pong: the round the waker asks for */
  atomic_int ack;   /* the round the loop answered */
  atomic_int failed;
  atomic_int done;
} wake_ctx;

static void wake_cb(void *arg) {
  wake_ctx *w = arg;
  ON_LOOP_THREAD();
  w->calls++;
  w->seen = atomic_load(&w->sent);
  atomic_store(&w->ack, atomic_load(&w->round));
}

static void *flood_thread(void *arg) {
  wake_ctx *w = arg;
  for (int i = 0; i < WAKES; i++) {
    atomic_fetch_add(&w->sent, 1);
    if (w->a->wake(w->a->self) != 0) atomic_store(&w->failed, 1);
  }
  return NULL;
}

static void *pingpong_thread(void *arg) {
  wake_ctx *w = arg;
  int64_t end = mono() + MS(60000);
  for (int i = 1; i <= ROUNDS && !atomic_load(&w->failed); i++) {
    atomic_store(&w->round, i);
    if (w->a->wake(w->a->self) != 0) atomic_store(&w->failed, 1);
    /* Each wake must be answered by a callback that ran after it. */
    while (atomic_load(&w->ack) < i) {
      if (mono() > end) {
        atomic_store(&w->failed, 2);
        break;
      }
      sched_yield();
    }
  }
  atomic_store(&w->done, 1);
  return NULL;
}

static void wake_from_other_threads_coalesces_and_is_never_lost(void **state) {
  drv *d = *state;
  wake_ctx w;
  memset(&w, 0, sizeof w);
  w.a = d->a;
  assert_int_equal(d->a->set_wake(d->a->self, wake_cb, &w), 0);
  pthread_t t[WAKERS];
  for (int i = 0; i < WAKERS; i++) assert_int_equal(pthread_create(&t[i], NULL, flood_thread, &w), 0);
  int64_t end = mono() + MS(30000);
  while (w.seen < WAKERS * WAKES && mono() < end) iterate(d, MS(20));
  for (int i = 0; i < WAKERS; i++) pthread_join(t[i], NULL);
  /* The last wake was followed by a callback that saw every one. */
  assert_int_equal(w.seen, WAKERS * WAKES);
  assert_int_equal(atomic_load(&w.failed), 0);
  assert_true(w.calls >= 1);
  assert_true(w.calls <= WAKERS * WAKES);

  pthread_t p;
  assert_int_equal(pthread_create(&p, NULL, pingpong_thread, &w), 0);
  while (!atomic_load(&w.done)) iterate(d, MS(20));
  pthread_join(p, NULL);
  assert_int_equal(atomic_load(&w.failed), 0);
  assert_int_equal(atomic_load(&w.ack), ROUNDS);
}

static void wake_from_the_loop_thread_runs_later(void **state) {
  drv *d = *state;
  wake_ctx w;
  memset(&w, 0, sizeof w);
  w.a = d->a;
  assert_int_equal(d->a->set_wake(d->a->self, wake_cb, &w), 0);
  assert_int_equal(d->a->wake(d->a->self), 0);
  assert_int_equal(d->a->wake(d->a->self), 0);
  assert_int_equal(w.calls, 0); /* not from inside wake() */
  run_until(d, &w.calls, 1);
  run_for(d, 20);
  assert_int_equal(w.calls, 1); /* the two coalesced */
}

/* ---- libuv only ----------------------------------------------------------- */

#ifdef RESIL_HAVE_UV
static void uv_free_completes_in_the_close_callbacks(void **state) {
  (void)state;
  test_alloc ta;
  test_alloc_init(&ta, 0);
  uv_loop_t uv;
  assert_int_equal(uv_loop_init(&uv), 0);
  resil_loop_adapter *a = NULL;
  assert_status(RESIL_OK, resil_uv_adapter_new(&uv, &ta.a, &a));
  int sv[2];
  pair(sv);
  io_rec r = {0};
  tm_rec t = {a, 0, 0, 0};
  cur = &(drv){.loop_thread = pthread_self()};
  assert_int_equal(a->watch(a->self, sv[0], RESIL_IO_READ, io_cb, &r), 0);
  assert_int_equal(a->watch(a->self, sv[1], RESIL_IO_READ, io_cb, &r), 0);
  assert_int_equal(a->watch(a->self, sv[1], 0, NULL, NULL), 0);
  assert_int_equal(a->timer(a->self, MS(1000), tm_cb, &t), 0);
  resil_uv_adapter_free(a);
  assert_true(ta.live > 0);
  assert_int_equal(uv_loop_close(&uv), UV_EBUSY); /* handles still closing */
  assert_int_equal(uv_run(&uv, UV_RUN_DEFAULT), 0);
  assert_int_equal(ta.live, 0);
  assert_int_equal(uv_loop_close(&uv), 0);
  assert_int_equal(r.calls + t.calls, 0);
  unpair(sv);
  cur = NULL;
}

static void uv_allocation_failures_fail_cleanly(void **state) {
  (void)state;
  for (long fail_at = 1; fail_at < 8; fail_at++) {
    test_alloc ta;
    test_alloc_init(&ta, fail_at);
    uv_loop_t uv;
    assert_int_equal(uv_loop_init(&uv), 0);
    resil_loop_adapter *a = NULL;
    resil_status st = resil_uv_adapter_new(&uv, &ta.a, &a);
    int sv[2];
    pair(sv);
    if (st == RESIL_OK) {
      io_rec r = {0};
      errno = 0;
      if (a->watch(a->self, sv[0], RESIL_IO_READ, io_cb, &r) != 0) assert_int_equal(errno, ENOMEM);
      resil_uv_adapter_free(a);
    } else {
      assert_status(RESIL_ENOMEM, st);
      assert_null(a);
    }
    uv_run(&uv, UV_RUN_DEFAULT);
    assert_int_equal(uv_loop_close(&uv), 0);
    assert_int_equal(ta.live, 0);
    unpair(sv);
  }
  resil_uv_adapter_free(NULL);
  resil_loop_adapter *a = (resil_loop_adapter *)1;
  assert_status(RESIL_EINVAL, resil_uv_adapter_new(NULL, NULL, &a));
  assert_null(a);
}
#endif

#define BOTH(f) {"builtin: " #f, f, setup_builtin, teardown, NULL} UV_CASE(f)
#ifdef RESIL_HAVE_UV
#define UV_CASE(f) , {"libuv: " #f, f, setup_uv, teardown, NULL}
#else
#define UV_CASE(f)
#endif

int main(void) {
  const struct CMUnitTest tests[] = {
      BOTH(fd_readiness_for_read_and_write),
      BOTH(peer_hangup_is_reported),
      BOTH(events_zero_stops_watching),
      BOTH(rewatch_replaces_events_callback_and_arg),
      BOTH(second_adapter_on_a_watched_fd_is_refused),
      BOTH(bad_arguments_are_refused),
      BOTH(fd_error_is_reported_until_the_watch_stops),
      BOTH(timer_fires_once_never_early),
      BOTH(arming_again_replaces_deadline_and_callback),
      BOTH(negative_delay_disarms),
      BOTH(delay_zero_is_never_reentrant),
      BOTH(timer_rearming_itself_with_delay_zero_does_not_starve_fds),
      BOTH(callback_may_free_its_watch_and_another_adapter),
      BOTH(wake_from_other_threads_coalesces_and_is_never_lost),
      BOTH(wake_from_the_loop_thread_runs_later),
#ifdef RESIL_HAVE_UV
      cmocka_unit_test(uv_free_completes_in_the_close_callbacks),
      cmocka_unit_test(uv_allocation_failures_fail_cleanly),
#endif
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
