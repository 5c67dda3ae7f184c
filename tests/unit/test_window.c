/* Sliding windows (DESIGN §2.1): differential tests against a naive
 * recomputation, integer-exact threshold boundaries, validation. */
#include <stdlib.h>
#include <string.h>

#include "core/internal.h"
#include "core/window.h"
#include "test_util.h"

#define SEC INT64_C(1000000000)
#define HOUR (3600 * SEC)

/* A small deterministic generator, so a failure can be replayed. */
static uint64_t rng_state;
static uint64_t rng(void) {
  rng_state ^= rng_state << 13;
  rng_state ^= rng_state >> 7;
  rng_state ^= rng_state << 17;
  return rng_state;
}
static uint32_t rng_below(uint32_t n) { return (uint32_t)(rng() % n); }

typedef struct result {
  int64_t sec;
  int failed;
  int slow;
} result;

static void *store_for(resil__window_kind kind, uint32_t size) {
  void *p = malloc(resil__window_store_bytes(kind, size));
  assert_non_null(p);
  return p;
}

/* ---- count window ------------------------------------------------------- */

static void
count_window_matches_naive_recount_over_random_operations(void **state) {
  (void)state;
  rng_state = 0x9e3779b97f4a7c15u;
  long ops = 0;
  enum { PER_SIZE = 400 };
  result *hist = malloc(sizeof *hist * PER_SIZE);
  assert_non_null(hist);
  for (uint32_t size = 1; size <= 257; size++) {
    void *store = store_for(RESIL__WINDOW_COUNT, size);
    resil__window w;
    resil__window_init(&w, RESIL__WINDOW_COUNT, size, size, store);
    /* A failure probability per size, so some runs are mostly failures,
     * some mostly successes, some mixed. */
    uint32_t pf = rng_below(101), ps = rng_below(101);
    for (int n = 0; n < PER_SIZE; n++) {
      int f = rng_below(100) < pf, s = rng_below(100) < ps;
      hist[n].failed = f;
      hist[n].slow = s;
      resil__window_record_count(&w, f, s);
      ops++;
      /* Naive: the last min(n + 1, size) results, counted from scratch. */
      uint64_t calls = 0, fails = 0, slows = 0;
      for (int k = n; k >= 0 && calls < size; k--) {
        calls++;
        fails += (uint64_t)hist[k].failed;
        slows += (uint64_t)hist[k].slow;
      }
      if (w.calls != calls || w.failures != fails || w.slow != slows)
        fail_msg("size %u op %d: window %llu/%llu/%llu, naive %llu/%llu/%llu",
                 size, n, (unsigned long long)w.calls,
                 (unsigned long long)w.failures, (unsigned long long)w.slow,
                 (unsigned long long)calls, (unsigned long long)fails,
                 (unsigned long long)slows);
    }
    /* Clearing empties it and it refills correctly. */
    resil__window_clear(&w);
    assert_int_equal(w.calls, 0);
    resil__window_record_count(&w, 1, 1);
    assert_int_equal(w.calls, 1);
    assert_int_equal(w.failures, 1);
    assert_int_equal(w.slow, 1);
    free(store);
  }
  free(hist);
  assert_true(ops >= 100000);
}

static void count_window_evicts_oldest_first(void **state) {
  (void)state;
  void *store = store_for(RESIL__WINDOW_COUNT, 2);
  resil__window w;
  resil__window_init(&w, RESIL__WINDOW_COUNT, 2, 1, store);
  resil__window_record_count(&w, 1, 0); /* F */
  resil__window_record_count(&w, 0, 1); /* S(slow) */
  assert_int_equal(w.failures, 1);
  assert_int_equal(w.slow, 1);
  resil__window_record_count(&w, 0, 0); /* evicts F */
  assert_int_equal(w.calls, 2);
  assert_int_equal(w.failures, 0);
  assert_int_equal(w.slow, 1);
  resil__window_record_count(&w, 0, 0); /* evicts the slow one */
  assert_int_equal(w.slow, 0);
  free(store);
}

static void count_window_slots_cross_word_boundaries(void **state) {
  (void)state;
  /* 70 slots span three 64-bit words (32 slots per word). */
  void *store = store_for(RESIL__WINDOW_COUNT, 70);
  resil__window w;
  resil__window_init(&w, RESIL__WINDOW_COUNT, 70, 70, store);
  for (int i = 0; i < 70; i++)
    resil__window_record_count(&w, i >= 30, i & 1);
  assert_int_equal(w.failures, 40);
  assert_int_equal(w.slow, 35);
  for (int i = 0; i < 35; i++)
    resil__window_record_count(&w, 0, 0);
  assert_int_equal(w.failures, 35); /* slots 35..69 remain failures */
  assert_int_equal(w.slow, 18);     /* odd slots 35..69 */
  free(store);
}

/* A success into a clean window (no failure, no slow result) only counts;
 * the next failure still leaves the ring exactly `size` records after it
 * entered, whatever stretch of clean successes came before it, and a
 * success into a window that holds one moves the ring on. */
static void count_window_clean_successes_keep_the_eviction_order(
    void **state) {
  (void)state;
  for (uint32_t size = 1; size <= 70; size++) {
    void *store = store_for(RESIL__WINDOW_COUNT, size);
    resil__window w;
    resil__window_init(&w, RESIL__WINDOW_COUNT, size, 1, store);
    for (uint32_t lead = 0; lead < 2 * size + 3; lead += 1 + size / 4) {
      resil__window_clear(&w);
      for (uint32_t i = 0; i < lead; i++) {
        resil__window_record_count(&w, 0, 0);
        assert_true(resil__window_clean(&w));
      }
      assert_int_equal(w.calls, lead < size ? lead : size);
      resil__window_record_count(&w, 1, 1); /* slow failure */
      assert_false(resil__window_clean(&w));
      for (uint32_t i = 1; i < size; i++) {
        resil__window_record_count(&w, 0, 0);
        if (w.failures != 1 || w.slow != 1 || w.slow_failures != 1)
          fail_msg("size %u lead %u: failure left after %u records", size,
                   lead, i);
      }
      resil__window_record_count(&w, 0, 0); /* the size-th: evicts it */
      assert_int_equal(w.failures, 0);
      assert_int_equal(w.slow, 0);
      assert_int_equal(w.slow_failures, 0);
      assert_int_equal(w.calls, size);
      assert_true(resil__window_clean(&w));
    }
    free(store);
  }
}

/* ---- time window -------------------------------------------------------- */

static int64_t floor_sec(int64_t ns) {
  int64_t s = ns / SEC;
  return (ns % SEC < 0) ? s - 1 : s;
}

static void
time_window_matches_naive_recount_including_hour_jumps(void **state) {
  (void)state;
  rng_state = 0x2545f4914f6cdd1du;
  long ops = 0, hour_jumps = 0;
  enum { PER_SIZE = 400 };
  result *hist = malloc(sizeof *hist * PER_SIZE);
  assert_non_null(hist);
  for (uint32_t size = 1; size <= 257; size++) {
    void *store = store_for(RESIL__WINDOW_TIME, size);
    resil__window w;
    resil__window_init(&w, RESIL__WINDOW_TIME, size, 1, store);
    int64_t now = (int64_t)rng_below(5000) * RESIL_NS_PER_MS;
    int nh = 0;
    int64_t newest = INT64_MIN;
    uint32_t pf = rng_below(101);
    for (int n = 0; n < PER_SIZE; n++) {
      uint32_t r = rng_below(100);
      if (r < 60) {
        int f = rng_below(100) < pf, s = rng_below(4) == 0;
        resil__window_record_time(&w, now, f, s);
        hist[nh].sec = floor_sec(now);
        hist[nh].failed = f;
        hist[nh].slow = s;
        nh++;
        if (floor_sec(now) > newest)
          newest = floor_sec(now);
      } else {
        /* Move time: mostly within a few seconds, sometimes across the
         * whole window, sometimes by hours. */
        int64_t step;
        if (r < 85)
          step = (int64_t)rng_below(1500) * RESIL_NS_PER_MS;
        else if (r < 97)
          step = (int64_t)rng_below(2 * size + 2) * SEC +
                 (int64_t)rng_below(1000) * RESIL_NS_PER_MS;
        else {
          step =
              (int64_t)(1 + rng_below(48)) * HOUR + (int64_t)rng_below(1000000);
          hour_jumps++;
        }
        now += step;
        resil__window_advance(&w, now);
        if (floor_sec(now) > newest)
          newest = floor_sec(now);
      }
      ops++;
      /* Naive: every result of the seconds (newest - size, newest]. */
      uint64_t calls = 0, fails = 0, slows = 0;
      for (int k = 0; k < nh; k++) {
        if (hist[k].sec > newest - (int64_t)size && hist[k].sec <= newest) {
          calls++;
          fails += (uint64_t)hist[k].failed;
          slows += (uint64_t)hist[k].slow;
        }
      }
      if (w.calls != calls || w.failures != fails || w.slow != slows)
        fail_msg("size %u op %d: window %llu/%llu/%llu, naive %llu/%llu/%llu",
                 size, n, (unsigned long long)w.calls,
                 (unsigned long long)w.failures, (unsigned long long)w.slow,
                 (unsigned long long)calls, (unsigned long long)fails,
                 (unsigned long long)slows);
    }
    free(store);
  }
  free(hist);
  assert_true(ops >= 100000);
  assert_true(hour_jumps > 100);
}

static void time_window_idle_gaps_of_hours_are_not_loops(void **state) {
  (void)state;
  /* 1000 jumps of 1000 hours: a loop per idle second would be 3.6e9
   * iterations and time the test out. Each jump must cost at most one
   * pass over the buckets. */
  void *store = store_for(RESIL__WINDOW_TIME, RESIL__WINDOW_TIME_MAX);
  resil__window w;
  resil__window_init(&w, RESIL__WINDOW_TIME, RESIL__WINDOW_TIME_MAX, 1, store);
  int64_t t = 5 * SEC;
  resil__window_record_time(&w, t, 1, 1);
  for (int i = 0; i < 1000; i++) {
    t += 1000 * HOUR;
    resil__window_record_time(&w, t, 1, 0);
    assert_int_equal(w.calls, 1);
    assert_int_equal(w.failures, 1);
    assert_int_equal(w.slow, 0);
  }
  /* A gap shorter than the window keeps what is still inside it. */
  resil__window_record_time(&w, t + HOUR, 0, 1);
  assert_int_equal(w.calls, 2);
  assert_int_equal(w.failures, 1);
  resil__window_advance(&w, t + 86400 * SEC);
  assert_int_equal(w.calls, 1);
  assert_int_equal(w.slow, 1);
  free(store);
}

static void time_window_buckets_align_to_whole_seconds(void **state) {
  (void)state;
  void *store = store_for(RESIL__WINDOW_TIME, 1);
  resil__window w;
  resil__window_init(&w, RESIL__WINDOW_TIME, 1, 1, store);
  resil__window_record_time(&w, 1 * SEC - 1, 1, 0); /* second 0 */
  assert_int_equal(w.failures, 1);
  resil__window_record_time(&w, 1 * SEC, 0, 0); /* second 1: 0 expired */
  assert_int_equal(w.calls, 1);
  assert_int_equal(w.failures, 0);
  resil__window_record_time(&w, 2 * SEC - 1, 0, 1); /* still second 1 */
  assert_int_equal(w.calls, 2);
  assert_int_equal(w.slow, 1);
  free(store);
}

static void time_window_late_result_lands_in_newest_bucket(void **state) {
  (void)state;
  void *store = store_for(RESIL__WINDOW_TIME, 2);
  resil__window w;
  resil__window_init(&w, RESIL__WINDOW_TIME, 2, 1, store);
  resil__window_record_time(&w, 10 * SEC, 0, 0);
  /* Read before another thread moved the window: counted as newest. */
  resil__window_record_time(&w, 3 * SEC, 1, 0);
  assert_int_equal(w.calls, 2);
  assert_int_equal(w.failures, 1);
  resil__window_advance(&w, 11 * SEC);
  assert_int_equal(w.calls, 2);
  resil__window_advance(&w, 12 * SEC); /* second 10 falls out */
  assert_int_equal(w.calls, 0);
  assert_int_equal(w.failures, 0);
  free(store);
}

/* ---- thresholds --------------------------------------------------------- */

static void threshold_is_integer_exact_at_boundaries(void **state) {
  (void)state;
  /* 1 of 3 is 33.33...%: it reaches 33 and does not reach 34. */
  assert_true(resil__rate_reached(1, 3, 33));
  assert_false(resil__rate_reached(1, 3, 34));
  assert_true(resil__rate_reached(2, 3, 66));
  assert_false(resil__rate_reached(2, 3, 67));
  assert_true(resil__rate_reached(1, 2, 50));
  assert_false(resil__rate_reached(1, 2, 51));
  assert_true(resil__rate_reached(1, 100, 1));
  assert_false(resil__rate_reached(0, 100, 1));
  assert_true(resil__rate_reached(100, 100, 100));
  assert_false(resil__rate_reached(99, 100, 100));
  assert_true(resil__rate_reached(7, 7, 100));
  assert_false(resil__rate_reached(0, 0, 1)); /* no calls: never */
  /* Operands beyond 32 bits: a 32-bit product would wrap. */
  uint64_t big = UINT64_C(1) << 33;
  assert_true(resil__rate_reached(big / 2, big, 50));
  assert_false(resil__rate_reached(big / 2 - 1, big, 50));
  assert_true(
      resil__rate_reached(UINT64_C(3000000000), UINT64_C(4000000000), 75));
  assert_false(
      resil__rate_reached(UINT64_C(2999999999), UINT64_C(4000000000), 75));
}

static void verdict_waits_for_minimum_calls(void **state) {
  (void)state;
  void *store = store_for(RESIL__WINDOW_COUNT, 3);
  resil__window w;
  resil__window_init(&w, RESIL__WINDOW_COUNT, 3, 3, store);
  assert_int_equal(resil__window_verdict(&w, 33, 100),
                   RESIL__VERDICT_NOT_ENOUGH_DATA);
  resil__window_record_count(&w, 1, 0);
  resil__window_record_count(&w, 0, 0);
  assert_int_equal(resil__window_verdict(&w, 33, 100),
                   RESIL__VERDICT_NOT_ENOUGH_DATA);
  resil__window_record_count(&w, 0, 1);
  /* 1 failure of 3 calls; 1 slow of 3. */
  assert_int_equal(resil__window_verdict(&w, 33, 100), RESIL__VERDICT_FAILURE);
  assert_int_equal(resil__window_verdict(&w, 34, 100), RESIL__VERDICT_BELOW);
  assert_int_equal(resil__window_verdict(&w, 34, 33), RESIL__VERDICT_SLOW);
  assert_int_equal(resil__window_verdict(&w, 33, 33), RESIL__VERDICT_BOTH);
  free(store);
}

/* ---- validation --------------------------------------------------------- */

static void validation_reports_field_range_and_value(void **state) {
  (void)state;
  resil_error e;
  assert_int_equal(
      resil__window_validate(RESIL__WINDOW_COUNT, 0, 1, "size", "min", &e),
      RESIL_EINVAL);
  assert_string_equal(e.field, "size");
  assert_int_equal(e.has_range, 1);
  assert_int_equal(e.min, 1);
  assert_int_equal(e.max, RESIL__WINDOW_COUNT_MAX);
  assert_int_equal(e.got, 0);

  assert_int_equal(resil__window_validate(RESIL__WINDOW_COUNT, 20, 100,
                                          "window_size", "minimum_calls", &e),
                   RESIL_EINVAL);
  assert_string_equal(e.field, "minimum_calls");
  assert_int_equal(e.min, 1);
  assert_int_equal(e.max, 20);
  assert_int_equal(e.got, 100);
  assert_string_equal(e.msg,
                      "minimum_calls: must be 1..window_size (20), got 100");

  assert_int_equal(resil__window_validate(RESIL__WINDOW_COUNT, 20, 0,
                                          "window_size", "minimum_calls", &e),
                   RESIL_EINVAL);
  assert_int_equal(e.got, 0);
  assert_int_equal(resil__window_validate(RESIL__WINDOW_COUNT, 20, 20,
                                          "window_size", "minimum_calls", &e),
                   RESIL_OK);
  assert_int_equal(
      resil__window_validate(RESIL__WINDOW_COUNT, 1, 1, "s", "m", NULL),
      RESIL_OK);

  /* A time window's minimum may exceed its seconds, but not be 0. */
  assert_int_equal(
      resil__window_validate(RESIL__WINDOW_TIME, 1, 500, "s", "m", &e),
      RESIL_OK);
  assert_int_equal(
      resil__window_validate(RESIL__WINDOW_TIME, 1, 0, "s", "m", &e),
      RESIL_EINVAL);
  assert_string_equal(e.field, "m");
  assert_int_equal(resil__window_validate(RESIL__WINDOW_TIME,
                                          RESIL__WINDOW_TIME_MAX + 1, 1, "s",
                                          "m", &e),
                   RESIL_EINVAL);
  assert_string_equal(e.field, "s");
  assert_int_equal(e.max, RESIL__WINDOW_TIME_MAX);

  assert_int_equal(resil__window_validate_threshold(0, "t", &e), RESIL_EINVAL);
  assert_string_equal(e.field, "t");
  assert_int_equal(e.min, 1);
  assert_int_equal(e.max, 100);
  assert_int_equal(e.got, 0);
  assert_int_equal(resil__window_validate_threshold(101, "t", &e),
                   RESIL_EINVAL);
  assert_int_equal(e.got, 101);
  assert_int_equal(resil__window_validate_threshold(1, "t", &e), RESIL_OK);
  assert_int_equal(resil__window_validate_threshold(100, "t", &e), RESIL_OK);
}

static void storage_is_two_bits_per_count_slot(void **state) {
  (void)state;
  /* 100 slots: 200 bits in four 64-bit words. */
  assert_int_equal(resil__window_store_bytes(RESIL__WINDOW_COUNT, 100), 32);
  assert_int_equal(resil__window_store_bytes(RESIL__WINDOW_COUNT, 1), 8);
  assert_int_equal(resil__window_store_bytes(RESIL__WINDOW_COUNT, 32), 8);
  assert_int_equal(resil__window_store_bytes(RESIL__WINDOW_COUNT, 33), 16);
  assert_int_equal(resil__window_store_bytes(RESIL__WINDOW_TIME, 10),
                   10 * sizeof(resil__bucket));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(
          count_window_matches_naive_recount_over_random_operations),
      cmocka_unit_test(count_window_evicts_oldest_first),
      cmocka_unit_test(count_window_slots_cross_word_boundaries),
      cmocka_unit_test(count_window_clean_successes_keep_the_eviction_order),
      cmocka_unit_test(time_window_matches_naive_recount_including_hour_jumps),
      cmocka_unit_test(time_window_idle_gaps_of_hours_are_not_loops),
      cmocka_unit_test(time_window_buckets_align_to_whole_seconds),
      cmocka_unit_test(time_window_late_result_lands_in_newest_bucket),
      cmocka_unit_test(threshold_is_integer_exact_at_boundaries),
      cmocka_unit_test(verdict_waits_for_minimum_calls),
      cmocka_unit_test(validation_reports_field_range_and_value),
      cmocka_unit_test(storage_is_two_bits_per_count_slot),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
