/* The built-in loop's own API (loop.h): resil_loop_run_once's timeouts and
 * counts, resil_loop_run / resil_loop_stop, several adapters' timers on the
 * one timerfd, strict "delay 0 fires on the next iteration", and freeing
 * adapters and watches from callbacks. The adapter rules shared with
 * libresil-uv are in test_loop_contract_mt.c.
 *
 * Bounds on real time are lower bounds (a wait is never short) plus upper
 * bounds of seconds, which hold on a loaded machine. */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "resil/loop.h"
#include "test_util.h"

static int64_t mono(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

typedef struct fixture {
  resil_loop *loop;
  resil_loop_adapter *a;
} fixture;

static int setup(void **state) {
  fixture *f = calloc(1, sizeof *f);
  assert_status(RESIL_OK, resil_loop_new(NULL, &f->loop));
  assert_status(RESIL_OK, resil_loop_adapter_new(f->loop, &f->a));
  *state = f;
  return 0;
}

static int teardown(void **state) {
  fixture *f = *state;
  resil_loop_adapter_free(f->a);
  resil_loop_free(f->loop);
  free(f);
  return 0;
}

static void count_cb(void *arg) { (*(int *)arg)++; }
static void io_count(void *arg, int fd, unsigned ev) {
  (void)fd;
  (void)ev;
  (*(int *)arg)++;
}

static void null_arguments_are_refused(void **state) {
  (void)state;
  resil_loop *l = (resil_loop *)1;
  assert_status(RESIL_EINVAL, resil_loop_new(NULL, NULL));
  assert_status(RESIL_OK, resil_loop_new(NULL, &l));
  resil_loop_adapter *a = (resil_loop_adapter *)1;
  assert_status(RESIL_EINVAL, resil_loop_adapter_new(NULL, &a));
  assert_null(a);
  assert_status(RESIL_EINVAL, resil_loop_adapter_new(l, NULL));
  assert_status(RESIL_EINVAL, resil_loop_run(NULL));
  size_t ran = 7;
  assert_status(RESIL_EINVAL, resil_loop_run_once(NULL, 0, &ran));
  assert_int_equal(ran, 0);
  resil_loop_stop(NULL);
  resil_loop_adapter_free(NULL);
  resil_loop_free(NULL);
  resil_loop_free(l);
}

static void allocation_failures_fail_cleanly(void **state) {
  (void)state;
  for (long fail_at = 1; fail_at < 20; fail_at++) {
    test_alloc ta;
    test_alloc_init(&ta, fail_at);
    resil_loop *l = NULL;
    resil_status st = resil_loop_new(&ta.a, &l);
    if (st != RESIL_OK) {
      assert_status(RESIL_ENOMEM, st);
      assert_null(l);
      assert_int_equal(ta.live, 0);
      continue;
    }
    resil_loop_adapter *a = NULL;
    st = resil_loop_adapter_new(l, &a);
    int sv[2];
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    if (st == RESIL_OK) {
      int n = 0;
      if (a->watch(a->self, sv[0], RESIL_IO_WRITE, io_count, &n) != 0)
        assert_int_equal(errno, ENOMEM);
      if (a->timer(a->self, MS(1), count_cb, &n) != 0) assert_int_equal(errno, ENOMEM);
      resil_loop_adapter_free(a);
    } else {
      assert_status(RESIL_ENOMEM, st);
      assert_null(a);
    }
    close(sv[0]);
    close(sv[1]);
    resil_loop_free(l);
    assert_int_equal(ta.live, 0);
  }
}

static void run_once_zero_does_not_wait(void **state) {
  fixture *f = *state;
  size_t ran = 9;
  int64_t t0 = mono();
  assert_status(RESIL_OK, resil_loop_run_once(f->loop, 0, &ran));
  assert_int_equal(ran, 0);
  /* Nothing to wait for and a timeout of 0: back long before a second. */
  assert_true(mono() - t0 < MS(1000));
}

static void run_once_waits_its_timeout_when_nothing_happens(void **state) {
  fixture *f = *state;
  size_t ran = 9;
  int64_t t0 = mono();
  assert_status(RESIL_OK, resil_loop_run_once(f->loop, MS(50), &ran));
  int64_t took = mono() - t0;
  assert_int_equal(ran, 0);
  assert_true(took >= MS(50));
  assert_true(took < MS(5000));
  /* A timer due after the timeout does not make the wait longer ... */
  int n = 0;
  assert_int_equal(f->a->timer(f->a->self, MS(10000), count_cb, &n), 0);
  t0 = mono();
  assert_status(RESIL_OK, resil_loop_run_once(f->loop, MS(30), &ran));
  took = mono() - t0;
  assert_true(took >= MS(30));
  assert_true(took < MS(5000));
  assert_int_equal(n, 0);
  /* ... and one due before it ends it early, with its callback counted. */
  t0 = mono();
  assert_int_equal(f->a->timer(f->a->self, MS(20), count_cb, &n), 0);
  assert_status(RESIL_OK, resil_loop_run_once(f->loop, MS(60000), &ran));
  took = mono() - t0;
  assert_int_equal(n, 1);
  assert_int_equal(ran, 1);
  assert_true(took >= MS(20));
  assert_true(took < MS(30000));
}

static void run_once_forever_returns_when_a_timer_fires(void **state) {
  fixture *f = *state;
  int n = 0;
  assert_int_equal(f->a->timer(f->a->self, MS(5), count_cb, &n), 0);
  size_t ran = 0;
  while (n == 0) assert_status(RESIL_OK, resil_loop_run_once(f->loop, -1, &ran));
  assert_int_equal(n, 1);
  assert_int_equal(ran, 1);
}

typedef struct stopper {
  resil_loop *loop;
  int delay_ms;
} stopper;

static void *stop_thread(void *arg) {
  stopper *s = arg;
  if (s->delay_ms) test_sleep_ms(s->delay_ms);
  resil_loop_stop(s->loop);
  return NULL;
}

static void stop_cb(void *arg) { resil_loop_stop(arg); }

static void stop_from_another_thread_ends_run(void **state) {
  fixture *f = *state;
  /* Called while run waits (most likely) or before it starts: either way
   * run returns, and the stop is not kept for a later run. */
  for (int delay = 0; delay <= 20; delay += 20) {
    stopper s = {f->loop, delay};
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, stop_thread, &s), 0);
    assert_status(RESIL_OK, resil_loop_run(f->loop));
    pthread_join(t, NULL);
  }
  /* The stop was consumed: a run now goes on until the next one (here
   * from a timer callback, on the loop thread). */
  int64_t t0 = mono();
  assert_int_equal(f->a->timer(f->a->self, MS(20), stop_cb, f->loop), 0);
  assert_status(RESIL_OK, resil_loop_run(f->loop));
  assert_true(mono() - t0 >= MS(20));
}

typedef struct order {
  int seen[8];
  int n;
} order;

typedef struct tick {
  order *o;
  int id;
} tick;

static void tick_cb(void *arg) {
  tick *t = arg;
  t->o->seen[t->o->n++] = t->id;
}

static void several_adapters_timers_fire_in_deadline_order(void **state) {
  fixture *f = *state;
  enum { N = 4 };
  resil_loop_adapter *ad[N];
  tick ticks[N];
  order o = {{0}, 0};
  const int delay_ms[N] = {40, 10, 30, 20};
  for (int i = 0; i < N; i++) {
    assert_status(RESIL_OK, resil_loop_adapter_new(f->loop, &ad[i]));
    ticks[i].o = &o;
    ticks[i].id = delay_ms[i];
    assert_int_equal(ad[i]->timer(ad[i]->self, MS(delay_ms[i]), tick_cb, &ticks[i]), 0);
  }
  /* Re-arming one moves it: 10 becomes 50, so it fires last. */
  ticks[1].id = 50;
  int64_t t0 = mono();
  assert_int_equal(ad[1]->timer(ad[1]->self, MS(50), tick_cb, &ticks[1]), 0);
  while (o.n < N && mono() - t0 < MS(10000))
    assert_status(RESIL_OK, resil_loop_run_once(f->loop, MS(100), NULL));
  assert_int_equal(o.n, N);
  assert_int_equal(o.seen[0], 20);
  assert_int_equal(o.seen[1], 30);
  assert_int_equal(o.seen[2], 40);
  assert_int_equal(o.seen[3], 50);
  assert_true(mono() - t0 >= MS(50)); /* never early */
  for (int i = 0; i < N; i++) resil_loop_adapter_free(ad[i]);
}

typedef struct zero {
  resil_loop_adapter *a;
  int fired, rearm;
} zero;

static void zero_cb(void *arg) {
  zero *z = arg;
  z->fired++;
  if (z->rearm) {
    z->rearm--;
    assert_int_equal(z->a->timer(z->a->self, 0, zero_cb, z), 0);
  }
}

static void delay_zero_fires_on_the_next_iteration_not_this_one(void **state) {
  fixture *f = *state;
  zero z = {f->a, 0, 3};
  assert_int_equal(f->a->timer(f->a->self, 0, zero_cb, &z), 0);
  assert_int_equal(z.fired, 0); /* not from inside timer() */
  size_t ran = 0;
  for (int i = 1; i <= 4; i++) {
    /* Each iteration runs exactly the one armed before it. */
    assert_status(RESIL_OK, resil_loop_run_once(f->loop, MS(1000), &ran));
    assert_int_equal(ran, 1);
    assert_int_equal(z.fired, i);
  }
  assert_status(RESIL_OK, resil_loop_run_once(f->loop, 0, &ran));
  assert_int_equal(ran, 0);
}

typedef struct killer {
  resil_loop_adapter *victim;
  int *victim_fired;
  int fired;
} killer;

static void kill_cb(void *arg) {
  killer *k = arg;
  k->fired++;
  resil_loop_adapter_free(k->victim);
}

static void adapter_freed_by_a_callback_runs_nothing_more(void **state) {
  fixture *f = *state;
  resil_loop_adapter *victim = NULL;
  assert_status(RESIL_OK, resil_loop_adapter_new(f->loop, &victim));
  int vfired = 0;
  killer k = {victim, &vfired, 0};
  /* Both due in the same iteration; the killer first (earlier deadline). */
  assert_int_equal(f->a->timer(f->a->self, MS(1), kill_cb, &k), 0);
  assert_int_equal(victim->timer(victim->self, MS(2), count_cb, &vfired), 0);
  /* The victim is woken too: its wake must not run after the free. */
  assert_int_equal(victim->set_wake(victim->self, count_cb, &vfired), 0);
  test_sleep_ms(5);
  assert_int_equal(victim->wake(victim->self), 0);
  assert_status(RESIL_OK, resil_loop_run_once(f->loop, MS(1000), NULL));
  assert_int_equal(k.fired, 1);
  assert_status(RESIL_OK, resil_loop_run_once(f->loop, 0, NULL));
  /* The wake ran before the timers (wakes come first); the timer never. */
  assert_int_equal(vfired, 1);
  size_t ran = 9;
  assert_status(RESIL_OK, resil_loop_run_once(f->loop, MS(20), &ran));
  assert_int_equal(ran, 0);
}

typedef struct pair_ctx {
  resil_loop_adapter *a;
  int sv[2], tv[2];
  int runs_a, runs_b;
} pair_ctx;

static void drop_both(void *arg, int fd, unsigned ev) {
  pair_ctx *p = arg;
  (void)fd;
  (void)ev;
  p->runs_a++;
  /* Frees both watches, its own included, while the other fd's event may
   * be waiting in the same batch. */
  assert_int_equal(p->a->watch(p->a->self, p->sv[0], 0, NULL, NULL), 0);
  assert_int_equal(p->a->watch(p->a->self, p->tv[0], 0, NULL, NULL), 0);
}

static void drop_both_b(void *arg, int fd, unsigned ev) {
  pair_ctx *p = arg;
  (void)fd;
  (void)ev;
  p->runs_b++;
  assert_int_equal(p->a->watch(p->a->self, p->sv[0], 0, NULL, NULL), 0);
  assert_int_equal(p->a->watch(p->a->self, p->tv[0], 0, NULL, NULL), 0);
}

static void callback_freeing_watches_stops_the_rest_of_the_batch(void **state) {
  fixture *f = *state;
  pair_ctx p;
  memset(&p, 0, sizeof p);
  p.a = f->a;
  assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, p.sv), 0);
  assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, p.tv), 0);
  assert_int_equal(f->a->watch(f->a->self, p.sv[0], RESIL_IO_WRITE, drop_both, &p), 0);
  assert_int_equal(f->a->watch(f->a->self, p.tv[0], RESIL_IO_WRITE, drop_both_b, &p), 0);
  size_t ran = 0;
  assert_status(RESIL_OK, resil_loop_run_once(f->loop, MS(1000), &ran));
  /* Both were writable; whichever ran first removed the other. */
  assert_int_equal(ran, 1);
  assert_int_equal(p.runs_a + p.runs_b, 1);
  assert_status(RESIL_OK, resil_loop_run_once(f->loop, MS(10), &ran));
  assert_int_equal(ran, 0);
  close(p.sv[0]);
  close(p.sv[1]);
  close(p.tv[0]);
  close(p.tv[1]);
}

typedef struct nested {
  resil_loop *loop;
  resil_status once, run;
  int fired;
} nested;

static void nested_cb(void *arg) {
  nested *n = arg;
  n->fired++;
  n->once = resil_loop_run_once(n->loop, 0, NULL);
  n->run = resil_loop_run(n->loop);
}

static void run_inside_a_callback_is_a_misuse(void **state) {
  fixture *f = *state;
  nested n = {f->loop, RESIL_OK, RESIL_OK, 0};
  assert_int_equal(f->a->timer(f->a->self, 0, nested_cb, &n), 0);
  assert_status(RESIL_OK, resil_loop_run_once(f->loop, MS(1000), NULL));
  assert_int_equal(n.fired, 1);
  assert_status(RESIL_EMISUSE, n.once);
  assert_status(RESIL_EMISUSE, n.run);
}

static void loop_free_frees_adapters_left_over(void **state) {
  (void)state;
  test_alloc ta;
  test_alloc_init(&ta, 0);
  resil_loop *l = NULL;
  assert_status(RESIL_OK, resil_loop_new(&ta.a, &l));
  resil_loop_adapter *a = NULL, *b = NULL;
  assert_status(RESIL_OK, resil_loop_adapter_new(l, &a));
  assert_status(RESIL_OK, resil_loop_adapter_new(l, &b));
  int sv[2], n = 0;
  assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  assert_int_equal(a->watch(a->self, sv[0], RESIL_IO_READ, io_count, &n), 0);
  assert_int_equal(b->timer(b->self, MS(100), count_cb, &n), 0);
  resil_loop_free(l);
  assert_int_equal(ta.live, 0);
  close(sv[0]);
  close(sv[1]);
}

typedef struct reuse_ctx {
  resil_loop_adapter *a;
  int sv[2], tv[2];
  int pv[2]; /* the pipe that takes over a closed fd's number */
  int first_calls, stale_calls;
} reuse_ctx;

static void stale_cb(void *arg, int fd, unsigned ev) {
  reuse_ctx *r = arg;
  (void)fd;
  (void)ev;
  r->stale_calls++; /* the pipe's read end is never readable here */
}

static void reuse_cb(void *arg, int fd, unsigned ev) {
  reuse_ctx *r = arg;
  (void)ev;
  r->first_calls++;
  /* Whichever of the two runs first closes the other, whose event may be
   * in this batch, and a new pipe takes its number. */
  int other = fd == r->sv[0] ? r->tv[0] : r->sv[0];
  assert_int_equal(r->a->watch(r->a->self, other, 0, NULL, NULL), 0);
  assert_int_equal(r->a->watch(r->a->self, fd, 0, NULL, NULL), 0);
  close(other);
  assert_int_equal(pipe(r->pv), 0);
  assert_int_equal(r->pv[0], other); /* the lowest free number */
  assert_int_equal(r->a->watch(r->a->self, r->pv[0], RESIL_IO_READ, stale_cb, r), 0);
}

static void stale_event_of_a_closed_fd_is_not_given_to_its_successor(void **state) {
  fixture *f = *state;
  reuse_ctx r;
  memset(&r, 0, sizeof r);
  r.a = f->a;
  assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, r.sv), 0);
  assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, r.tv), 0);
  assert_int_equal(f->a->watch(f->a->self, r.sv[0], RESIL_IO_WRITE | RESIL_IO_READ, reuse_cb, &r), 0);
  assert_int_equal(f->a->watch(f->a->self, r.tv[0], RESIL_IO_WRITE | RESIL_IO_READ, reuse_cb, &r), 0);
  /* Readable and writable: an event of either, if it reached the pipe's
   * watch, would say READ. */
  assert_int_equal(write(r.sv[1], "x", 1), 1);
  assert_int_equal(write(r.tv[1], "x", 1), 1);
  assert_status(RESIL_OK, resil_loop_run_once(f->loop, MS(1000), NULL));
  assert_status(RESIL_OK, resil_loop_run_once(f->loop, MS(20), NULL));
  assert_int_equal(r.first_calls, 1);
  assert_int_equal(r.stale_calls, 0);
  assert_int_equal(f->a->watch(f->a->self, r.pv[0], 0, NULL, NULL), 0);
  int live = r.pv[0] == r.sv[0] ? r.tv[0] : r.sv[0];
  close(live);
  close(r.sv[1]);
  close(r.tv[1]);
  close(r.pv[0]);
  close(r.pv[1]);
}

typedef struct wake_free {
  resil_loop_adapter *victim;
  int calls, victim_calls;
} wake_free;

static void wake_free_cb(void *arg) {
  wake_free *w = arg;
  w->calls++;
  resil_loop_adapter_free(w->victim);
  w->victim = NULL;
}

static void wake_victim_cb(void *arg) { ((wake_free *)arg)->victim_calls++; }

static void wake_callback_may_free_another_woken_adapter(void **state) {
  fixture *f = *state;
  /* Adapters are scanned newest first: the killer (newest) runs first and
   * frees the victim, which is the next one in the scan. */
  wake_free w = {NULL, 0, 0};
  resil_loop_adapter *victim = NULL, *k = NULL;
  assert_status(RESIL_OK, resil_loop_adapter_new(f->loop, &victim));
  assert_status(RESIL_OK, resil_loop_adapter_new(f->loop, &k));
  w.victim = victim;
  assert_int_equal(victim->set_wake(victim->self, wake_victim_cb, &w), 0);
  assert_int_equal(k->set_wake(k->self, wake_free_cb, &w), 0);
  assert_int_equal(victim->wake(victim->self), 0);
  assert_int_equal(k->wake(k->self), 0);
  size_t ran = 0;
  assert_status(RESIL_OK, resil_loop_run_once(f->loop, MS(1000), &ran));
  assert_int_equal(w.calls, 1);
  assert_int_equal(w.victim_calls, 0);
  assert_int_equal(ran, 1);
  resil_loop_adapter_free(k);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(null_arguments_are_refused),
      cmocka_unit_test(allocation_failures_fail_cleanly),
      cmocka_unit_test_setup_teardown(run_once_zero_does_not_wait, setup, teardown),
      cmocka_unit_test_setup_teardown(run_once_waits_its_timeout_when_nothing_happens, setup, teardown),
      cmocka_unit_test_setup_teardown(run_once_forever_returns_when_a_timer_fires, setup, teardown),
      cmocka_unit_test_setup_teardown(stop_from_another_thread_ends_run, setup, teardown),
      cmocka_unit_test_setup_teardown(several_adapters_timers_fire_in_deadline_order, setup, teardown),
      cmocka_unit_test_setup_teardown(delay_zero_fires_on_the_next_iteration_not_this_one, setup, teardown),
      cmocka_unit_test_setup_teardown(adapter_freed_by_a_callback_runs_nothing_more, setup, teardown),
      cmocka_unit_test_setup_teardown(callback_freeing_watches_stops_the_rest_of_the_batch, setup, teardown),
      cmocka_unit_test_setup_teardown(run_inside_a_callback_is_a_misuse, setup, teardown),
      cmocka_unit_test(loop_free_frees_adapters_left_over),
      cmocka_unit_test_setup_teardown(stale_event_of_a_closed_fd_is_not_given_to_its_successor, setup, teardown),
      cmocka_unit_test_setup_teardown(wake_callback_may_free_another_woken_adapter, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
