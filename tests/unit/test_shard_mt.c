/* Per-thread counter shards under threads: totals are exact with as many
 * threads as slots, with more threads than slots (the shared fallback),
 * with threads created and exiting in waves (dead owners, reused thread
 * pointers), and a reader running beside the writers never sees a figure
 * go backwards or pass the final total. */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <string.h>

#include "core/shard.h"
#include "test_util.h"

#define K 4

typedef struct job {
  resil__shards *sh;
  pthread_barrier_t *start; /* NULL: start at once */
  long adds;
  unsigned index; /* the thread's number, added to counter 2 */
} job;

/* Counter 0 gets 1 per add, 1 gets 3, 2 gets the thread's number, 3 gets 1
 * every other add. */
static void *writer(void *p) {
  job *j = p;
  if (j->start) pthread_barrier_wait(j->start);
  for (long i = 0; i < j->adds; i++) {
    resil__shards_add(j->sh, 0, 1);
    resil__shards_add(j->sh, 1, 3);
    resil__shards_add(j->sh, 2, j->index);
    if (i & 1) resil__shards_add(j->sh, 3, 1);
  }
  return NULL;
}

typedef struct expect {
  uint64_t c[K];
} expect;

static void expect_add(expect *e, const job *j) {
  e->c[0] += (uint64_t)j->adds;
  e->c[1] += 3 * (uint64_t)j->adds;
  e->c[2] += (uint64_t)j->index * (uint64_t)j->adds;
  e->c[3] += (uint64_t)j->adds / 2;
}

static void assert_totals(const resil__shards *sh, const expect *e) {
  for (unsigned i = 0; i < K; i++)
    assert_int_equal(resil__shards_sum(sh, i), e->c[i]);
}

/* `threads` writers of `adds` each, started together, joined. */
static void run_wave(resil__shards *sh, unsigned threads, long adds,
                     unsigned first_index, expect *e) {
  pthread_t tid[64];
  job jobs[64];
  pthread_barrier_t start;
  assert_true(threads <= 64);
  pthread_barrier_init(&start, NULL, threads);
  for (unsigned t = 0; t < threads; t++) {
    jobs[t] = (job){sh, &start, adds, first_index + t};
    assert_int_equal(pthread_create(&tid[t], NULL, writer, &jobs[t]), 0);
  }
  for (unsigned t = 0; t < threads; t++) {
    assert_int_equal(pthread_join(tid[t], NULL), 0);
    expect_add(e, &jobs[t]);
  }
  pthread_barrier_destroy(&start);
}

static void shards_eight_threads_sum_exactly(void **state) {
  (void)state;
  resil__shards sh;
  assert_status(RESIL_OK, resil__shards_init(&sh, NULL, K, 16));
  expect e;
  memset(&e, 0, sizeof e);
  run_wave(&sh, 8, 100000, 1, &e);
  assert_totals(&sh, &e);
  resil__shards_free(&sh);
}

static void shards_more_threads_than_slots_sum_exactly(void **state) {
  (void)state;
  resil__shards sh;
  /* 2 slots, 8 threads: at least 6 of them add through the shared atomic
   * at the same time as the slots' owners store theirs. */
  assert_status(RESIL_OK, resil__shards_init(&sh, NULL, K, 2));
  expect e;
  memset(&e, 0, sizeof e);
  run_wave(&sh, 8, 50000, 1, &e);
  assert_totals(&sh, &e);
  uint64_t shared = atomic_load(&sh.slot[sh.nslots].c[0]);
  assert_true(shared >= 6 * 50000);
  resil__shards_free(&sh);
}

static void shards_threads_in_waves_sum_exactly(void **state) {
  (void)state;
  resil__shards sh;
  /* 4 slots; waves of 6 threads that exit before the next wave starts:
   * slots stay owned by dead threads, later threads with a reused thread
   * pointer continue in them, the others fall back. */
  assert_status(RESIL_OK, resil__shards_init(&sh, NULL, K, 4));
  expect e;
  memset(&e, 0, sizeof e);
  for (unsigned w = 0; w < 12; w++) {
    run_wave(&sh, 6, 5000, 1 + 6 * w, &e);
    assert_totals(&sh, &e);
  }
  unsigned owned = 0;
  for (unsigned s = 0; s < sh.nslots; s++)
    owned += atomic_load(&sh.slot[s].owner) != 0;
  assert_true(owned >= 1);
  resil__shards_free(&sh);
}

typedef struct reader_job {
  resil__shards *sh;
  _Atomic int stop;
  uint64_t final_max; /* upper bound: the final total of counter 0 */
  _Atomic long reads;
  int backwards;
  int over;
} reader_job;

static void *reader(void *p) {
  reader_job *r = p;
  uint64_t last = 0;
  while (!atomic_load(&r->stop)) {
    uint64_t v = resil__shards_sum(r->sh, 0);
    if (v < last) r->backwards++;
    if (v > r->final_max) r->over++;
    last = v;
    r->reads++;
  }
  return NULL;
}

static void shards_reader_beside_writers_never_goes_backwards(void **state) {
  (void)state;
  resil__shards sh;
  assert_status(RESIL_OK, resil__shards_init(&sh, NULL, K, 4));
  reader_job r;
  memset(&r, 0, sizeof r);
  r.sh = &sh;
  r.final_max = 6 * 30000;
  pthread_t rt;
  assert_int_equal(pthread_create(&rt, NULL, reader, &r), 0);
  /* The writers start once the reader runs (a loaded machine may not
   * schedule it before they finish otherwise). */
  while (atomic_load(&r.reads) == 0) sched_yield();
  expect e;
  memset(&e, 0, sizeof e);
  run_wave(&sh, 6, 30000, 1, &e);
  atomic_store(&r.stop, 1);
  assert_int_equal(pthread_join(rt, NULL), 0);
  assert_true(r.reads > 0);
  assert_int_equal(r.backwards, 0);
  assert_int_equal(r.over, 0);
  assert_totals(&sh, &e);
  resil__shards_free(&sh);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(shards_eight_threads_sum_exactly),
      cmocka_unit_test(shards_more_threads_than_slots_sum_exactly),
      cmocka_unit_test(shards_threads_in_waves_sum_exactly),
      cmocka_unit_test(shards_reader_beside_writers_never_goes_backwards),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
