/* The breaker's ramp under concurrency (DESIGN §2.9; breaker.h "Ramp"):
 * 8 threads deciding at once on one breaker while a manual clock steps
 * through the ramp, and the processes of a shared segment ramping as one. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#define SHARED_TEST_PREFIX "brr"
#include "test_shared_common.h"

#include "breaker/breaker_int.h"
#include "test_breaker_common.h"

enum { THREADS = 8, WINDOW = 100, STEPS = 40 };

typedef struct hammer {
  resil_breaker *br;
  _Atomic int batch;    /* the batch being decided; -1: stop */
  _Atomic int tickets;  /* decisions left in the batch */
  _Atomic int done;     /* decisions made in the batch */
  _Atomic int admitted; /* of them, admitted */
} hammer;

static void *hammer_thread(void *arg) {
  hammer *h = arg;
  int seen = 0;
  for (;;) {
    int b = atomic_load(&h->batch);
    if (b < 0)
      return NULL;
    if (b == seen) {
      sched_yield();
      continue;
    }
    while (atomic_fetch_sub(&h->tickets, 1) > 0) {
      resil_breaker_permit p;
      resil_reason why;
      if (resil_breaker_try_acquire_why(h->br, &p, &why) == RESIL_DECISION_GO) {
        resil_outcome o = resil_outcome_ok();
        assert_status(RESIL_OK, resil_breaker_record(h->br, &p, &o, 0));
        atomic_fetch_add(&h->admitted, 1);
      } else if (why != RESIL_REASON_RECOVERING) {
        fail_msg("refused for %s", resil_reason_name(why));
      }
      atomic_fetch_add(&h->done, 1);
    }
    seen = b;
  }
}

/* 8 threads make each window of 100 consecutive decisions together while
 * the clock stands still; between windows the clock steps 1/40 of the
 * ramp. Every window admits 100 x share(t) within 5 (the rule; the error
 * diffusion gives one), and the share never falls. */
static void eight_threads_admit_the_curve_per_100_decisions(void **state) {
  (void)state;
  resil_manual_clock *mc = clock_new();
  resil_breaker_config cfg;
  resil_breaker_config_init(&cfg);
  cfg.window_size = 100;
  cfg.minimum_calls = 10;
  cfg.open_wait_ns = MS(10);
  cfg.half_open_permitted_calls = 1;
  cfg.clock = resil_manual_clock_get(mc);
  cfg.ramp_duration_ns = MS(2000);
  cfg.ramp_aggression = 1.5;
  cfg.initial_state = RESIL_BREAKER_HALF_OPEN;
  resil_breaker *br = breaker_new(&cfg);
  resil_breaker_permit p;
  assert_int_equal(resil_breaker_try_acquire(br, &p), RESIL_DECISION_GO);
  resil_outcome ok = resil_outcome_ok();
  assert_status(RESIL_OK, resil_breaker_record(br, &p, &ok, 0));

  hammer h;
  h.br = br;
  atomic_init(&h.batch, 0);
  atomic_init(&h.tickets, 0);
  atomic_init(&h.done, 0);
  atomic_init(&h.admitted, 0);
  pthread_t th[THREADS];
  for (int i = 0; i < THREADS; i++)
    assert_int_equal(pthread_create(&th[i], NULL, hammer_thread, &h), 0);
  int worst = 0, prev = -1;
  uint64_t refused = 0;
  for (int step = 0; step <= STEPS; step++) {
    double share = resil_breaker_ramp_share(br);
    atomic_store(&h.done, 0);
    atomic_store(&h.admitted, 0);
    atomic_store(&h.tickets, WINDOW);
    atomic_store(&h.batch, step + 1);
    while (atomic_load(&h.done) < WINDOW)
      sched_yield();
    int got = atomic_load(&h.admitted);
    refused += (uint64_t)(WINDOW - got);
    int off = abs(got - (int)(share * WINDOW + 0.5));
    if (off > worst)
      worst = off;
    if (off > 5)
      fail_msg("step %d: %d of %d admitted, share %.3f", step, got, WINDOW, share);
    if (got + 1 < prev)
      fail_msg("step %d: %d admitted after %d", step, got, prev);
    prev = got;
    resil_manual_clock_advance_ns(mc, cfg.ramp_duration_ns / STEPS);
  }
  atomic_store(&h.batch, -1);
  for (int i = 0; i < THREADS; i++)
    pthread_join(th[i], NULL);
  print_message("worst window off the curve by %d of %d\n", worst, WINDOW);
  assert_true(worst <= 1);
  resil_breaker_metrics m = metrics_of(br);
  assert_int_equal(m.ramping, 0); /* the last step is at D */
  assert_int_equal(m.total_ramp_rejected, refused);
  assert_int_equal(m.total_failures, 0);
  char why[200];
  assert_int_equal(resil__breaker_check(br, why, sizeof why), 0);
  resil_breaker_free(br);
  resil_manual_clock_free(mc);
}

/* The breaker "ramped" in seg, HALF_OPEN, with a ramp of 60 s from 10 %. */
static void shared_config(resil_breaker_config *cfg, resil_shared *seg) {
  resil_breaker_config_init(cfg);
  cfg->name = "ramped";
  cfg->window_size = 100;
  cfg->minimum_calls = 10;
  cfg->open_wait_ns = MS(1);
  cfg->half_open_permitted_calls = 1;
  cfg->initial_state = RESIL_BREAKER_HALF_OPEN;
  cfg->ramp_duration_ns = MS(60000); /* the share stays 10 % for 6 s */
  cfg->shared = seg;
}

static resil_breaker *shared_breaker(resil_shared *seg) {
  resil_breaker_config cfg;
  shared_config(&cfg, seg);
  return breaker_new(&cfg);
}

static int decide(resil_breaker *br, int n) {
  (void)mono;
  int got = 0;
  for (int i = 0; i < n; i++) {
    resil_breaker_permit p;
    if (resil_breaker_try_acquire(br, &p) == RESIL_DECISION_GO) {
      resil_outcome o = resil_outcome_ok();
      resil_breaker_record(br, &p, &o, 0);
      got++;
    }
  }
  return got;
}

/* The ramp lives in the slot: a ramp started through one handle is seen
 * by another and by a child process, and their decisions form one
 * sequence (1000 of them at 10 % admit 100 within one). A different ramp
 * config under the name is refused naming the field. */
static void shared_breaker_processes_ramp_together(void **state) {
  (void)state;
  resil_shared_config sc;
  char name[RESIL_SHARED_NAME_MAX + 1];
  seg_config(&sc, name, sizeof name, "ramp");
  resil_shared *seg = seg_open(&sc);
  resil_breaker *a = shared_breaker(seg);
  resil_breaker *b = shared_breaker(seg);
  resil_breaker_permit p;
  assert_int_equal(resil_breaker_try_acquire(a, &p), RESIL_DECISION_GO);
  resil_outcome ok = resil_outcome_ok();
  assert_status(RESIL_OK, resil_breaker_record(a, &p, &ok, 0));
  resil_breaker_metrics m = metrics_of(b);
  assert_int_equal(m.state, RESIL_BREAKER_CLOSED);
  assert_int_equal(m.ramping, 1);
  assert_true(m.ramp_share > 0.099 && m.ramp_share < 0.11);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    resil_breaker *c = shared_breaker(seg);
    int got = decide(c, 300);
    resil_breaker_free(c);
    _exit(got);
  }
  int status = 0;
  assert_int_equal(waitpid(pid, &status, 0), pid);
  assert_true(WIFEXITED(status));
  int got = WEXITSTATUS(status);
  for (int i = 0; i < 350; i++)
    got += decide(a, 1) + decide(b, 1);
  if (got < 99 || got > 101)
    fail_msg("1000 decisions at 10 %% admitted %d", got);
  resil_breaker_metrics ma = metrics_of(a), mb = metrics_of(b);
  assert_int_equal(ma.total_ramp_rejected, (uint64_t)(1000 - got));
  assert_int_equal(mb.total_ramp_rejected, ma.total_ramp_rejected);
  resil_breaker_metrics peek;
  resil_error err;
  assert_status(RESIL_OK, resil_breaker_shared_peek(seg, "ramped", &peek, &err));
  assert_int_equal(peek.ramping, 1);
  assert_int_equal(peek.total_ramp_rejected, ma.total_ramp_rejected);
  /* Another ramp under the name: refused, naming the field. */
  resil_breaker_config cfg;
  shared_config(&cfg, seg);
  cfg.ramp_min_percent = 20;
  resil_breaker *d = NULL;
  assert_status(RESIL_EINVAL, resil_breaker_new(&cfg, &d, &err));
  assert_string_equal(err.field, "ramp_min_percent");
  char why[200];
  assert_int_equal(resil__breaker_check(a, why, sizeof why), 0);
  resil_breaker_free(a);
  resil_breaker_free(b);
  seg_done(seg, &sc);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(eight_threads_admit_the_curve_per_100_decisions),
      cmocka_unit_test(shared_breaker_processes_ramp_together),
  };
  return cmocka_run_group_tests(tests, NULL, seg_unlink_all);
}
