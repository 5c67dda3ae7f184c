#include <stdlib.h>
#include <time.h>

#include "test_util.h"

static void *ta_alloc(void *self, size_t n) {
  test_alloc *t = self;
  t->count++;
  if (t->fail_at > 0 && t->count >= t->fail_at) return NULL;
  void *p = malloc(n);
  if (p) t->live++;
  return p;
}

static void ta_free(void *self, void *p) {
  test_alloc *t = self;
  t->live--;
  free(p);
}

void test_alloc_init(test_alloc *t, long fail_at) {
  t->a.alloc = ta_alloc;
  t->a.free = ta_free;
  t->a.self = t;
  t->fail_at = fail_at;
  t->count = 0;
  t->live = 0;
}

void test_sleep_ms(long ms) {
  struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0) {
  }
}
