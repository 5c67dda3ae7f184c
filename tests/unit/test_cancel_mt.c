/* The cancellation token's listeners (call.h, resil_cancel_subscribe):
 * exactly once, on the signalling thread, subscribe after the signal,
 * unsubscribe before, racing and from inside the listener, and
 * resil_cancel_wait_ns still waking. Real threads; the race cases are the
 * ones ThreadSanitizer and AddressSanitizer check. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "test_util.h"

static int64_t mono_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* What a listener saw. */
typedef struct seen {
  atomic_int calls;
  pthread_t thread;
  resil_cancel *tok;
  resil_cancel_sub *self; /* for the listener that unsubscribes itself */
  int self_unsub;         /* what that unsubscribe returned */
  resil_status sub_inside; /* a subscribe from inside the listener */
  int set_inside;          /* resil_cancel_is_set from inside */
} seen;

static void on_cancel(void *user) {
  seen *s = user;
  s->thread = pthread_self();
  atomic_fetch_add(&s->calls, 1);
}

typedef struct signaller {
  resil_cancel *tok;
  pthread_t thread;
  int64_t delay_ms;
} signaller;

static void *signal_main(void *u) {
  signaller *g = u;
  g->thread = pthread_self();
  if (g->delay_ms) usleep((useconds_t)(g->delay_ms * 1000));
  resil_cancel_signal(g->tok);
  return NULL;
}

static void listeners_run_exactly_once_on_the_signalling_thread(void **state) {
  (void)state;
  resil_cancel *tok = NULL;
  assert_status(RESIL_OK, resil_cancel_new(&tok));
  seen s[3];
  resil_cancel_sub *sub[3];
  memset(s, 0, sizeof s);
  for (int i = 0; i < 3; i++)
    assert_status(RESIL_OK, resil_cancel_subscribe(tok, on_cancel, &s[i], &sub[i]));
  for (int i = 0; i < 3; i++) assert_int_equal(atomic_load(&s[i].calls), 0);
  signaller g = {.tok = tok};
  pthread_t th;
  assert_int_equal(pthread_create(&th, NULL, signal_main, &g), 0);
  pthread_join(th, NULL);
  resil_cancel_signal(tok); /* again, from this thread: nothing more */
  for (int i = 0; i < 3; i++) {
    assert_int_equal(atomic_load(&s[i].calls), 1);
    assert_true(pthread_equal(s[i].thread, g.thread));
    assert_int_equal(resil_cancel_unsubscribe(sub[i]), 0); /* it ran */
  }
  assert_int_equal(resil_cancel_is_set(tok), 1);
  resil_cancel_free(tok);
}

static void subscribe_after_the_signal_says_so_and_never_calls(void **state) {
  (void)state;
  resil_cancel *tok = NULL;
  assert_status(RESIL_OK, resil_cancel_new(&tok));
  resil_cancel_signal(tok);
  seen s;
  memset(&s, 0, sizeof s);
  resil_cancel_sub *sub = (resil_cancel_sub *)&s; /* overwritten with NULL */
  assert_status(RESIL_ESTATE, resil_cancel_subscribe(tok, on_cancel, &s, &sub));
  assert_null(sub);
  resil_cancel_signal(tok);
  assert_int_equal(atomic_load(&s.calls), 0);
  /* Bad arguments. */
  assert_status(RESIL_EINVAL, resil_cancel_subscribe(NULL, on_cancel, &s, &sub));
  assert_status(RESIL_EINVAL, resil_cancel_subscribe(tok, NULL, &s, &sub));
  assert_status(RESIL_EINVAL, resil_cancel_subscribe(tok, on_cancel, &s, NULL));
  assert_int_equal(resil_cancel_unsubscribe(NULL), 0);
  resil_cancel_free(tok);
}

static void unsubscribe_before_the_signal_means_never_called(void **state) {
  (void)state;
  resil_cancel *tok = NULL;
  assert_status(RESIL_OK, resil_cancel_new(&tok));
  seen a, b;
  memset(&a, 0, sizeof a);
  memset(&b, 0, sizeof b);
  resil_cancel_sub *sa = NULL, *sb = NULL;
  assert_status(RESIL_OK, resil_cancel_subscribe(tok, on_cancel, &a, &sa));
  assert_status(RESIL_OK, resil_cancel_subscribe(tok, on_cancel, &b, &sb));
  assert_int_equal(resil_cancel_unsubscribe(sa), 1);
  resil_cancel_signal(tok);
  assert_int_equal(atomic_load(&a.calls), 0);
  assert_int_equal(atomic_load(&b.calls), 1);
  assert_int_equal(resil_cancel_unsubscribe(sb), 0);
  resil_cancel_free(tok);
}

/* A listener whose state the subscriber frees right after unsubscribing:
 * the listener writes to it after a pause, so an unsubscribe that returned
 * while it ran would let it write to freed memory (ASan), or race with the
 * subscriber's read (TSan). */
typedef struct heap_state {
  atomic_int calls;
  int written; /* plain: the subscriber reads it after unsubscribing */
} heap_state;

static void slow_listener(void *user) {
  heap_state *h = user;
  atomic_fetch_add(&h->calls, 1);
  usleep(200);
  h->written = 1;
}

static void unsubscribe_racing_the_signal_waits_for_a_running_listener(void **state) {
  (void)state;
  enum { ROUNDS = 300 };
  int ran = 0, removed = 0;
  for (int r = 0; r < ROUNDS; r++) {
    resil_cancel *tok = NULL;
    assert_status(RESIL_OK, resil_cancel_new(&tok));
    heap_state *h = calloc(1, sizeof *h);
    assert_non_null(h);
    resil_cancel_sub *sub = NULL;
    assert_status(RESIL_OK, resil_cancel_subscribe(tok, slow_listener, h, &sub));
    signaller g = {.tok = tok};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, signal_main, &g), 0);
    /* Spread the unsubscribe over before, during and after the listener. */
    if (r % 3) usleep((useconds_t)(r % 7) * 40);
    int rm = resil_cancel_unsubscribe(sub);
    int calls = atomic_load(&h->calls);
    if (rm) {
      assert_int_equal(calls, 0); /* and never will be */
      removed++;
    } else {
      assert_int_equal(calls, 1);
      assert_int_equal(h->written, 1); /* the listener had finished */
      ran++;
    }
    free(h);
    pthread_join(th, NULL);
    resil_cancel_free(tok);
  }
  assert_int_equal(ran + removed, ROUNDS);
  print_message("racing unsubscribe: %d after the listener ran, %d before the signal\n", ran,
                removed);
}

/* From inside the listener: its own unsubscribe returns at once, the token
 * functions work, and it may free its own state. */
static void self_unsubscribing_listener(void *user) {
  seen *s = user;
  s->thread = pthread_self();
  s->set_inside = resil_cancel_is_set(s->tok);
  resil_cancel_sub *other = NULL;
  s->sub_inside = resil_cancel_subscribe(s->tok, on_cancel, s, &other);
  resil_cancel_signal(s->tok); /* returns: already signalled */
  s->self_unsub = resil_cancel_unsubscribe(s->self);
  atomic_fetch_add(&s->calls, 1);
}

static void unsubscribe_from_inside_the_listener_does_not_deadlock(void **state) {
  (void)state;
  resil_cancel *tok = NULL;
  assert_status(RESIL_OK, resil_cancel_new(&tok));
  seen s, after;
  memset(&s, 0, sizeof s);
  memset(&after, 0, sizeof after);
  s.tok = tok;
  s.self_unsub = -1;
  /* `after` is subscribed first, so it runs after the self-unsubscribing
   * one (the list is last-in first-called: no order is promised, but both
   * must run). */
  resil_cancel_sub *sa = NULL;
  assert_status(RESIL_OK, resil_cancel_subscribe(tok, on_cancel, &after, &sa));
  assert_status(RESIL_OK, resil_cancel_subscribe(tok, self_unsubscribing_listener, &s, &s.self));
  signaller g = {.tok = tok};
  pthread_t th;
  assert_int_equal(pthread_create(&th, NULL, signal_main, &g), 0);
  pthread_join(th, NULL);
  assert_int_equal(atomic_load(&s.calls), 1);
  assert_int_equal(s.self_unsub, 0);
  assert_int_equal(s.set_inside, 1);
  assert_status(RESIL_ESTATE, s.sub_inside);
  assert_int_equal(atomic_load(&after.calls), 1);
  assert_int_equal(resil_cancel_unsubscribe(sa), 0);
  resil_cancel_free(tok);
}

typedef struct waiter {
  resil_cancel *tok;
  int got;
  int64_t woke_ms;
} waiter;

static void *wait_main(void *u) {
  waiter *w = u;
  w->got = resil_cancel_wait_ns(w->tok, MS(20000));
  w->woke_ms = mono_ms();
  return NULL;
}

static void wait_ns_still_wakes_with_listeners(void **state) {
  (void)state;
  resil_cancel *tok = NULL;
  assert_status(RESIL_OK, resil_cancel_new(&tok));
  seen s;
  memset(&s, 0, sizeof s);
  resil_cancel_sub *sub = NULL;
  assert_status(RESIL_OK, resil_cancel_subscribe(tok, on_cancel, &s, &sub));
  waiter w = {.tok = tok};
  pthread_t wt, st;
  assert_int_equal(pthread_create(&wt, NULL, wait_main, &w), 0);
  signaller g = {.tok = tok, .delay_ms = 50};
  int64_t t0 = mono_ms();
  assert_int_equal(pthread_create(&st, NULL, signal_main, &g), 0);
  pthread_join(st, NULL);
  pthread_join(wt, NULL);
  assert_int_equal(w.got, 1);
  assert_true(w.woke_ms - t0 < 10000); /* long before the 20 s timeout */
  assert_int_equal(atomic_load(&s.calls), 1);
  /* A wait after the signal returns 1 at once; a timeout still times out
   * on a token never signalled. */
  assert_int_equal(resil_cancel_wait_ns(tok, MS(20000)), 1);
  assert_int_equal(resil_cancel_unsubscribe(sub), 0);
  resil_cancel_free(tok);
  assert_status(RESIL_OK, resil_cancel_new(&tok));
  assert_int_equal(resil_cancel_wait_ns(tok, MS(5)), 0);
  resil_cancel_free(tok);
}

/* Many subscribers on many threads while another thread signals: each
 * listener runs at most once, exactly once unless its unsubscribe came
 * first. */
typedef struct churn {
  resil_cancel *tok;
  atomic_int calls[64];
  int removed[64];
} churn;

typedef struct churn_arg {
  churn *c;
  int base;
} churn_arg;

static void churn_listener(void *user) { atomic_fetch_add((atomic_int *)user, 1); }

static void *churn_main(void *u) {
  churn_arg *a = u;
  resil_cancel_sub *subs[16];
  for (int i = 0; i < 16; i++) {
    resil_status st =
        resil_cancel_subscribe(a->c->tok, churn_listener, &a->c->calls[a->base + i], &subs[i]);
    if (st == RESIL_ESTATE) {
      subs[i] = NULL;
      a->c->removed[a->base + i] = 2; /* never subscribed */
    }
  }
  for (int i = 0; i < 16; i += 2)
    if (subs[i]) a->c->removed[a->base + i] = resil_cancel_unsubscribe(subs[i]);
  for (int i = 1; i < 16; i += 2)
    if (subs[i]) a->c->removed[a->base + i] = resil_cancel_unsubscribe(subs[i]);
  return NULL;
}

static void concurrent_subscribers_and_signal_each_listener_at_most_once(void **state) {
  (void)state;
  for (int round = 0; round < 50; round++) {
    churn c;
    memset(&c, 0, sizeof c);
    assert_status(RESIL_OK, resil_cancel_new(&c.tok));
    churn_arg args[4];
    pthread_t th[4], sg;
    for (int t = 0; t < 4; t++) {
      args[t] = (churn_arg){&c, 16 * t};
      assert_int_equal(pthread_create(&th[t], NULL, churn_main, &args[t]), 0);
    }
    signaller g = {.tok = c.tok};
    assert_int_equal(pthread_create(&sg, NULL, signal_main, &g), 0);
    for (int t = 0; t < 4; t++) pthread_join(th[t], NULL);
    pthread_join(sg, NULL);
    for (int i = 0; i < 64; i++) {
      int n = atomic_load(&c.calls[i]);
      if (c.removed[i] == 0) assert_int_equal(n, 1);
      else assert_int_equal(n, 0);
    }
    resil_cancel_free(c.tok);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(listeners_run_exactly_once_on_the_signalling_thread),
      cmocka_unit_test(subscribe_after_the_signal_says_so_and_never_calls),
      cmocka_unit_test(unsubscribe_before_the_signal_means_never_called),
      cmocka_unit_test(unsubscribe_racing_the_signal_waits_for_a_running_listener),
      cmocka_unit_test(unsubscribe_from_inside_the_listener_does_not_deadlock),
      cmocka_unit_test(wait_ns_still_wakes_with_listeners),
      cmocka_unit_test(concurrent_subscribers_and_signal_each_listener_at_most_once),
  };
  return cmocka_run_group_tests_name("cancel token listeners", tests, NULL, NULL);
}
