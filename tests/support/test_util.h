/* Small helpers shared by the tests. */
#ifndef RESIL_TEST_UTIL_H
#define RESIL_TEST_UTIL_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "resil/resil.h"

/* A cmocka-style assertion that prints the two status names. */
#define assert_status(expected, actual)                                        \
  do {                                                                         \
    resil_status a_ = (actual), e_ = (expected);                               \
    if (a_ != e_)                                                              \
      fail_msg("status %s, expected %s", resil_status_name(a_),               \
               resil_status_name(e_));                                         \
  } while (0)

#define MS(x) ((int64_t)(x) * INT64_C(1000000))

/* An allocator that fails the n-th allocation (1-based) and every one after
 * it when n > 0, counting live blocks so tests can prove nothing leaked. */
typedef struct test_alloc {
  resil_allocator a;
  long fail_at;     /* 0 = never fail */
  long count;       /* allocations attempted */
  long live;        /* blocks not yet freed */
} test_alloc;

void test_alloc_init(test_alloc *t, long fail_at);



/* Real sleep, for tests that coordinate real threads (never for policy
 * time, which moves on the manual clock). */
void test_sleep_ms(long ms);
#endif
