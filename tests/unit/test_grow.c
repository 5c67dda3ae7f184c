/* resil__grow_zeroed (src/core/alloc.c): the fd-indexed arrays of the
 * built-in loop (src/loop) and of libresil-uv (src/uv) grow through it. */
#include <stdlib.h>
#include <string.h>

#include "core/internal.h"
#include "test_util.h"

typedef struct counting {
  size_t allocs;
  size_t frees;
  size_t fail_after; /* allocations that succeed; SIZE_MAX: all */
} counting;

static void *c_alloc(void *self, size_t n) {
  counting *c = self;
  if (c->allocs >= c->fail_after) return NULL;
  c->allocs++;
  return malloc(n);
}

static void c_free(void *self, void *p) {
  counting *c = self;
  c->frees++;
  free(p);
}

static void grows_by_doubling_from_64_zero_filled_keeping_elements(void **state) {
  (void)state;
  counting cnt = {0, 0, (size_t)-1};
  resil_allocator a = {c_alloc, c_free, &cnt};
  int **v = NULL;
  size_t n = 0;
  v = resil__grow_zeroed(&a, v, &n, sizeof *v, 3);
  assert_non_null(v);
  assert_int_equal(n, 64);
  for (size_t i = 0; i < n; i++) assert_null(v[i]);
  static int x, y;
  v[3] = &x;
  v[63] = &y;
  /* Fits: the same array, nothing allocated. */
  assert_ptr_equal(resil__grow_zeroed(&a, v, &n, sizeof *v, 63), v);
  assert_int_equal(cnt.allocs, 1);
  v = resil__grow_zeroed(&a, v, &n, sizeof *v, 300);
  assert_non_null(v);
  assert_int_equal(n, 512);
  assert_int_equal(cnt.allocs, 2);
  assert_int_equal(cnt.frees, 1); /* the old array */
  assert_ptr_equal(v[3], &x);
  assert_ptr_equal(v[63], &y);
  for (size_t i = 64; i < n; i++) assert_null(v[i]);
  resil__free(&a, v);
}

static void out_of_memory_leaves_the_array_unchanged(void **state) {
  (void)state;
  counting cnt = {0, 0, 1};
  resil_allocator a = {c_alloc, c_free, &cnt};
  size_t n = 0;
  char *v = resil__grow_zeroed(&a, NULL, &n, 1, 10);
  assert_non_null(v);
  v[5] = 'x';
  assert_null(resil__grow_zeroed(&a, v, &n, 1, 64));
  assert_int_equal(n, 64);
  assert_int_equal(cnt.frees, 0);
  assert_int_equal(v[5], 'x');
  /* An index no array of that element size can hold. */
  cnt.fail_after = (size_t)-1;
  assert_null(resil__grow_zeroed(&a, v, &n, 8, (size_t)-1 / 4));
  assert_int_equal(n, 64);
  resil__free(&a, v);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(grows_by_doubling_from_64_zero_filled_keeping_elements),
      cmocka_unit_test(out_of_memory_leaves_the_array_unchanged),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
