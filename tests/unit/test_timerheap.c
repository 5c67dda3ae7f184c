/* The timer heap (src/core/timerheap.c) against a plain array: random arms,
 * re-arms, disarms and pops; the heap must pop exactly what the array says
 * is earliest (ties in arming order). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/timerheap.h"
#include "test_util.h"

#define NT 64

static uint64_t rnd(uint64_t *s) {
  *s += UINT64_C(0x9E3779B97F4A7C15);
  uint64_t z = *s;
  z = (z ^ (z >> 30)) * UINT64_C(0xBF58476D1CE4E5B9);
  z = (z ^ (z >> 27)) * UINT64_C(0x94D049BB133111EB);
  return z ^ (z >> 31);
}

typedef struct ref {
  int armed;
  int64_t at;
  uint64_t seq;
} ref;

static int ref_first(const ref *r) {
  int best = -1;
  for (int i = 0; i < NT; i++)
    if (r[i].armed && (best < 0 || r[i].at < r[best].at ||
                       (r[i].at == r[best].at && r[i].seq < r[best].seq)))
      best = i;
  return best;
}

static void heap_matches_a_reference_under_random_operations(void **state) {
  (void)state;
  for (uint64_t seed = 1; seed <= 200; seed++) {
    uint64_t s = seed;
    resil__timerheap h;
    resil__timerheap_init(&h, NULL);
    resil__timer t[NT];
    ref r[NT];
    memset(t, 0, sizeof t);
    memset(r, 0, sizeof r);
    uint64_t seq = 0;
    int64_t now = 0;
    for (int op = 0; op < 2000; op++) {
      int i = (int)(rnd(&s) % NT);
      switch (rnd(&s) % 4) {
      case 0:
      case 1: { /* arm or move; few distinct instants make ties common */
        int64_t at = now + (int64_t)(rnd(&s) % 8);
        assert_int_equal(resil__timerheap_arm(&h, &t[i], at), 0);
        r[i].armed = 1;
        r[i].at = at;
        r[i].seq = ++seq;
        break;
      }
      case 2:
        resil__timerheap_disarm(&h, &t[i]);
        r[i].armed = 0;
        break;
      default: { /* advance and pop everything due */
        now += (int64_t)(rnd(&s) % 4);
        for (;;) {
          resil__timer *p = resil__timerheap_pop_due(&h, now);
          int want = ref_first(r);
          if (want >= 0 && r[want].at > now) want = -1;
          if (!p) {
            if (want >= 0) fail_msg("seed %llu op %d: heap popped nothing, want %d",
                                    (unsigned long long)seed, op, want);
            break;
          }
          if (p != &t[want])
            fail_msg("seed %llu op %d: popped %d, want %d", (unsigned long long)seed, op,
                     (int)(p - t), want);
          assert_false(resil__timer_armed(p));
          r[want].armed = 0;
        }
      }
      }
      int f = ref_first(r);
      resil__timer *first = resil__timerheap_first(&h);
      if (f < 0) assert_null(first);
      else assert_ptr_equal(first, &t[f]);
      for (int k = 0; k < NT; k++) assert_int_equal(resil__timer_armed(&t[k]), r[k].armed);
    }
    resil__timerheap_free(&h);
    for (int k = 0; k < NT; k++) assert_false(resil__timer_armed(&t[k]));
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(heap_matches_a_reference_under_random_operations),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
