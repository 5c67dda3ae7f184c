#define _GNU_SOURCE /* MAP_ANONYMOUS */
/* The rate limiter with its state in a shared segment (DESIGN §8.1):
 * permits exact across processes (forked children calling flat out), the
 * config recorded in the slot, the clock rule, fallback. */
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "test_util.h"

#include "resil/ratelimit.h"
#include "resil/shared.h"

#define SHARED_TEST_PREFIX "rl"
#include "test_shared_common.h"

static resil_ratelimiter *limiter(resil_shared *seg, const char *name, int64_t limit,
                                  int64_t period_ns) {
  resil_ratelimiter_config c;
  resil_ratelimiter_config_init(&c);
  c.name = name;
  c.limit_for_period = limit;
  c.refresh_period_ns = period_ns;
  c.timeout_ns = 0;
  c.shared = seg;
  resil_ratelimiter *rl = NULL;
  resil_error err;
  if (resil_ratelimiter_new(&c, &rl, &err) != RESIL_OK) fail_msg("%s", err.msg);
  return rl;
}

static void two_handles_on_one_shared_limiter_share_its_permits(void **state) {
  (void)state;
  resil_shared_config sc;
  char name[64];
  seg_config(&sc, name, sizeof name, "two");
  resil_shared *seg = seg_open(&sc);
  resil_ratelimiter *a = limiter(seg, "api", 3, RESIL_H(1));
  resil_ratelimiter *b = limiter(seg, "api", 3, RESIL_H(1));
  resil_ratelimiter *other = limiter(seg, "other", 3, RESIL_H(1));
  resil_reason why;
  assert_int_equal(resil_ratelimiter_acquire(a, 2, NULL, &why), RESIL_DECISION_GO);
  assert_int_equal(resil_ratelimiter_available(b), 1);
  assert_int_equal(resil_ratelimiter_acquire(b, 1, NULL, &why), RESIL_DECISION_GO);
  assert_int_equal(resil_ratelimiter_acquire(a, 1, NULL, &why), RESIL_DECISION_DENY);
  assert_int_equal(why, RESIL_REASON_RATE_LIMITED);
  assert_int_equal(resil_ratelimiter_acquire(b, 1, NULL, &why), RESIL_DECISION_DENY);
  assert_int_equal(resil_ratelimiter_available(other), 3);
  /* Counters stay per handle. */
  resil_ratelimiter_metrics m;
  assert_status(RESIL_OK, resil_ratelimiter_get_metrics(a, &m));
  assert_int_equal(m.permitted, 1);
  assert_int_equal(m.refused, 1);
  assert_int_equal(m.available, 0);
  /* resil_shared_reset: a full cycle again, for every handle. */
  assert_status(RESIL_OK, resil_shared_reset(seg, "api", NULL));
  assert_int_equal(resil_ratelimiter_available(a), 3);
  assert_int_equal(resil_ratelimiter_acquire(b, 3, NULL, &why), RESIL_DECISION_GO);
  assert_int_equal(resil_ratelimiter_available(a), 0);
  /* The segment may be closed first: the limiters keep its mapping. */
  resil_shared_close(seg);
  assert_int_equal(resil_ratelimiter_acquire(a, 1, NULL, &why), RESIL_DECISION_DENY);
  resil_ratelimiter_free(a);
  resil_ratelimiter_free(b);
  resil_ratelimiter_free(other);
  assert_status(RESIL_OK, resil_shared_unlink(&sc, NULL));
}

static void another_config_clock_or_a_full_segment_is_refused_with_the_reason(void **state) {
  (void)state;
  resil_shared_config sc;
  char name[64];
  seg_config(&sc, name, sizeof name, "cfg");
  sc.capacity = 1;
  resil_shared *seg = seg_open(&sc);
  resil_ratelimiter *a = limiter(seg, "api", 3, RESIL_S(1));
  resil_ratelimiter_config c;
  resil_ratelimiter_config_init(&c);
  c.name = "api";
  c.limit_for_period = 4;
  c.refresh_period_ns = RESIL_S(1);
  c.shared = seg;
  resil_ratelimiter *b = NULL;
  resil_error err;
  assert_status(RESIL_EINVAL, resil_ratelimiter_new(&c, &b, &err));
  assert_string_equal(err.field, "limit_for_period");
  assert_non_null(strstr(err.msg, "with limit_for_period 3; this config has 4"));
  c.limit_for_period = 3;
  c.refresh_period_ns = RESIL_S(1) / 2;
  assert_status(RESIL_EINVAL, resil_ratelimiter_new(&c, &b, &err));
  assert_string_equal(err.field, "refresh_period_ns");
  /* timeout_ns is per process. */
  c.refresh_period_ns = RESIL_S(1);
  c.timeout_ns = 7;
  assert_status(RESIL_OK, resil_ratelimiter_new(&c, &b, &err));
  resil_ratelimiter_free(b);
  /* A manual clock cannot count shared cycles. */
  resil_manual_clock *mc = NULL;
  assert_status(RESIL_OK, resil_manual_clock_new(0, 0, &mc));
  c.clock = resil_manual_clock_get(mc);
  assert_status(RESIL_EINVAL, resil_ratelimiter_new(&c, &b, &err));
  assert_string_equal(err.field, "clock");
  c.clock = resil_clock_system();
  assert_status(RESIL_OK, resil_ratelimiter_new(&c, &b, &err));
  resil_ratelimiter_free(b);
  c.clock = NULL;
  /* Full, required: the reason. */
  c.name = "second";
  assert_status(RESIL_ESTATE, resil_ratelimiter_new(&c, &b, &err));
  assert_non_null(strstr(err.msg, "is full (capacity 1): no slot for ratelimiter 'second'"));
  resil_ratelimiter_free(a);
  resil_shared_close(seg);
  resil_manual_clock_free(mc);

  /* Full, not required: per-process state, counted. */
  sc.required = 0;
  assert_status(RESIL_OK, resil_shared_open(&sc, &seg, NULL));
  assert_false(resil_shared_is_fallback(seg));
  c.shared = seg;
  assert_status(RESIL_OK, resil_ratelimiter_new(&c, &b, &err));
  assert_int_equal(resil_shared_fallbacks(seg), 1);
  resil_reason why;
  assert_int_equal(resil_ratelimiter_acquire(b, 3, NULL, &why), RESIL_DECISION_GO);
  assert_int_equal(resil_ratelimiter_acquire(b, 1, NULL, &why), RESIL_DECISION_DENY);
  resil_ratelimiter_free(b);
  seg_done(seg, &sc);
}

static void a_segment_that_cannot_be_opened_gives_per_process_limiters(void **state) {
  (void)state;
  resil_shared_config sc;
  resil_shared_config_init(&sc);
  sc.name = "fb";
  sc.dir = "/nonexistent-resil-dir";
  resil_shared *seg = seg_open(&sc);
  assert_true(resil_shared_is_fallback(seg));
  resil_ratelimiter *a = limiter(seg, "api", 2, RESIL_H(1));
  resil_ratelimiter *b = limiter(seg, "api", 2, RESIL_H(1));
  assert_int_equal(resil_shared_fallbacks(seg), 3); /* the segment, a, b */
  resil_reason why;
  assert_int_equal(resil_ratelimiter_acquire(a, 2, NULL, &why), RESIL_DECISION_GO);
  assert_int_equal(resil_ratelimiter_acquire(b, 2, NULL, &why), RESIL_DECISION_GO);
  resil_ratelimiter_free(a);
  resil_ratelimiter_free(b);
  resil_shared_close(seg);
}

/* ---- exact across processes ------------------------------------------------ */

#define WORKERS 8
#define LIMIT 100
#define PERIOD_NS (100 * 1000000LL)
#define RUN_NS (1500 * 1000000LL)

typedef struct results {
  _Atomic int64_t admitted[WORKERS];
  _Atomic int64_t last_grant_ns[WORKERS];
  /* 1 for each cycle (from t_before) in which some worker was running an
   * acquire: the cycles whose permits were asked for. */
  _Atomic int called[64];
} results;

static void eight_processes_flat_out_get_exactly_the_permits_of_the_cycles(void **state) {
  (void)state;
  resil_shared_config sc;
  char name[64];
  seg_config(&sc, name, sizeof name, "exact");
  resil_shared *seg = seg_open(&sc);
  results *res = mmap(NULL, sizeof *res, PROT_READ | PROT_WRITE,
                      MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  assert_true(res != MAP_FAILED);
  memset(res, 0, sizeof *res);
  int go[2];
  assert_int_equal(pipe(go), 0);
  pid_t pids[WORKERS];
  for (int i = 0; i < WORKERS; i++) {
    pids[i] = fork();
    assert_true(pids[i] >= 0);
    if (pids[i] == 0) {
      close(go[1]);
      int64_t t[2]; /* t_before, t_go */
      if (read(go[0], t, sizeof t) != (ssize_t)sizeof t) _exit(9);
      const int64_t t_before = t[0], t_go = t[1];
      /* Half the workers open the segment themselves, half use the
       * inherited handle; each creates its limiter, which the parent has
       * created in the segment just before "go". */
      resil_shared *s2 = seg;
      if (i % 2 && resil_shared_open(&sc, &s2, NULL) != RESIL_OK) _exit(1);
      resil_ratelimiter *mine = limiter(s2, "flat", LIMIT, PERIOD_NS);
      int64_t n = 0, last = 0, marked = -1;
      for (int64_t now = mono(); now < t_go + RUN_NS; now = mono()) {
        int64_t c = (now - t_before) / PERIOD_NS;
        if (c != marked && c >= 0 && c < 64) {
          atomic_store_explicit(&res->called[c], 1, memory_order_relaxed);
          marked = c;
        }
        if (resil_ratelimiter_acquire(mine, 1, NULL, NULL) == RESIL_DECISION_GO) {
          n++;
          last = mono();
        }
      }
      atomic_store(&res->admitted[i], n);
      atomic_store(&res->last_grant_ns[i], last);
      _exit(0);
    }
  }
  close(go[0]);
  /* Created after the forks: cycle 0 is not spent waiting for them. */
  int64_t t_before = mono();
  resil_ratelimiter *rl = limiter(seg, "flat", LIMIT, PERIOD_NS);
  int64_t t[2] = {t_before, mono()};
  for (int i = 0; i < WORKERS; i++)
    assert_int_equal(write(go[1], t, sizeof t), (ssize_t)sizeof t);
  close(go[1]);
  for (int i = 0; i < WORKERS; i++) {
    int status = 0;
    assert_int_equal(waitpid(pids[i], &status, 0), pids[i]);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
  }
  int64_t admitted = 0, last = 0, cycles_called = 0;
  for (int i = 0; i < WORKERS; i++) {
    admitted += atomic_load(&res->admitted[i]);
    if (atomic_load(&res->last_grant_ns[i]) > last) last = atomic_load(&res->last_grant_ns[i]);
  }
  for (int c = 0; c < 64; c++) cycles_called += atomic_load(&res->called[c]);
  /* Cycles count from the limiter's creation (after t_before): every grant
   * up to `last` is in cycles 0..(last - t_before) / period. */
  int64_t bound = ((last - t_before) / PERIOD_NS + 1) * LIMIT;
  /* The permits of the cycles in which some worker was calling: a cycle
   * in which none ran (cycle 0 before a slow setup under a sanitizer, or
   * every worker descheduled on an overloaded machine) was not asked
   * for. Cycle numbers from t_before, a few microseconds before the
   * creation. */
  int64_t offered = cycles_called * LIMIT;
  print_message("admitted %lld, bound %lld, offered in the %lld cycles called in %lld\n",
                (long long)admitted, (long long)bound, (long long)cycles_called,
                (long long)offered);
  assert_true(admitted <= bound);
  assert_true(admitted * 100 >= (offered < bound ? offered : bound) * 95);
  assert_true(admitted * 100 >= bound * 80); /* a sanity floor */
  resil_ratelimiter_free(rl);
  resil_shared_close(seg);
  munmap(res, sizeof *res);
  assert_status(RESIL_OK, resil_shared_unlink(&sc, NULL));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(two_handles_on_one_shared_limiter_share_its_permits),
      cmocka_unit_test(another_config_clock_or_a_full_segment_is_refused_with_the_reason),
      cmocka_unit_test(a_segment_that_cannot_be_opened_gives_per_process_limiters),
      cmocka_unit_test(eight_processes_flat_out_get_exactly_the_permits_of_the_cycles),
  };
  return cmocka_run_group_tests(tests, NULL, seg_unlink_all);
}
