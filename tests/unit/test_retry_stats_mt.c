/* Retry statistics under threads: every figure of resil_retry_stats is
 * exact once the threads are joined, with as many threads as the retry's
 * counter shards have slots and with more (the shared fallback), and a
 * reader beside the writers never sees a figure go backwards. */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <string.h>

#include "test_util.h"

#define CALLS 5000

typedef struct worker {
  resil_retry *r;
  pthread_barrier_t *start;
  long calls;
} worker;

/* Call i's attempts, by i % 4: OK at once; NOT_SENT then OK; NOT_SENT
 * three times (max_attempts); an HTTP 400 (not retryable). */
static resil_outcome scripted(void *arg, const resil_ctx *ctx) {
  long i = *(long *)arg;
  switch (i % 4) {
  case 0:
    return resil_outcome_ok();
  case 1:
    return ctx->attempt < 2
               ? resil_outcome_make(RESIL_NOT_SENT, RESIL_REASON_CONNECT_REFUSED)
               : resil_outcome_ok();
  case 2:
    return resil_outcome_make(RESIL_NOT_SENT, RESIL_REASON_CONNECT_REFUSED);
  default:
    return resil_outcome_http(400);
  }
}

static void *work(void *p) {
  worker *w = p;
  pthread_barrier_wait(w->start);
  for (long i = 0; i < w->calls; i++) {
    /* Half the calls with a ctx, half without: both fast paths. */
    resil_ctx ctx;
    resil_ctx_init(&ctx);
    resil_retry_run(w->r, (i / 4) % 2 ? &ctx : NULL, scripted, &i);
  }
  return NULL;
}

static resil_retry *make_retry(void) {
  resil_retry_config c;
  resil_retry_config_init(&c);
  c.max_attempts = 3;
  c.wait_ns = 0;
  resil_retry *r = NULL;
  assert_status(RESIL_OK, resil_retry_new(&c, &r, NULL));
  return r;
}

static void run_threads(resil_retry *r, unsigned threads, long calls) {
  pthread_t tid[32];
  worker w[32];
  pthread_barrier_t start;
  assert_true(threads <= 32);
  pthread_barrier_init(&start, NULL, threads);
  for (unsigned t = 0; t < threads; t++) {
    w[t] = (worker){r, &start, calls};
    assert_int_equal(pthread_create(&tid[t], NULL, work, &w[t]), 0);
  }
  for (unsigned t = 0; t < threads; t++)
    assert_int_equal(pthread_join(tid[t], NULL), 0);
  pthread_barrier_destroy(&start);
}

/* The figures of `calls` scripted calls (a multiple of 4). */
static void assert_stats(resil_retry *r, uint64_t calls) {
  resil_retry_stats s;
  assert_status(RESIL_OK, resil_retry_get_stats(r, &s));
  uint64_t q = calls / 4;
  assert_int_equal(s.calls, calls);
  assert_int_equal(s.successful_without_retry, q);
  assert_int_equal(s.successful_with_retry, q);
  assert_int_equal(s.failed_with_retry, q);
  assert_int_equal(s.failed_without_retry, q);
  assert_int_equal(s.attempts, q * (1 + 2 + 3 + 1));
  assert_int_equal(s.stops[RESIL_STOP_SUCCESS], 2 * q);
  assert_int_equal(s.stops[RESIL_STOP_MAX_ATTEMPTS], q);
  assert_int_equal(s.stops[RESIL_STOP_NOT_RETRYABLE], q);
}

static void retry_stats_are_exact_across_threads(void **state) {
  (void)state;
  resil_retry *r = make_retry();
  run_threads(r, 8, CALLS);
  assert_stats(r, 8 * CALLS);
  resil_retry_free(r);
}

static void retry_stats_are_exact_with_more_threads_than_slots(void **state) {
  (void)state;
  resil_retry *r = make_retry();
  /* 24 at once (more than the 16 slots), then two more waves of new
   * threads: dead owners, reused thread pointers, the shared fallback. */
  run_threads(r, 24, CALLS / 5);
  run_threads(r, 24, CALLS / 5);
  run_threads(r, 20, CALLS / 5);
  assert_stats(r, 68 * (CALLS / 5));
  resil_retry_free(r);
}

typedef struct reader {
  resil_retry *r;
  _Atomic int stop;
  _Atomic long reads;
  int backwards;
} reader;

static void *read_stats(void *p) {
  reader *rd = p;
  uint64_t last_calls = 0, last_ok = 0;
  while (!atomic_load(&rd->stop)) {
    resil_retry_stats s;
    if (resil_retry_get_stats(rd->r, &s) != RESIL_OK) rd->backwards++;
    if (s.calls < last_calls || s.successful_without_retry < last_ok)
      rd->backwards++;
    last_calls = s.calls;
    last_ok = s.successful_without_retry;
    rd->reads++;
  }
  return NULL;
}

static void retry_stats_read_beside_calls_never_go_backwards(void **state) {
  (void)state;
  resil_retry *r = make_retry();
  reader rd;
  memset(&rd, 0, sizeof rd);
  rd.r = r;
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, read_stats, &rd), 0);
  /* The writers start once the reader runs (a loaded machine may not
   * schedule it before they finish otherwise). */
  while (atomic_load(&rd.reads) == 0) sched_yield();
  run_threads(r, 4, CALLS);
  atomic_store(&rd.stop, 1);
  assert_int_equal(pthread_join(t, NULL), 0);
  assert_true(rd.reads > 0);
  assert_int_equal(rd.backwards, 0);
  assert_stats(r, 4 * CALLS);
  resil_retry_free(r);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(retry_stats_are_exact_across_threads),
      cmocka_unit_test(retry_stats_are_exact_with_more_threads_than_slots),
      cmocka_unit_test(retry_stats_read_beside_calls_never_go_backwards),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
