#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

void *resil__alloc(const resil_allocator *a, size_t n) {
  if (n == 0) n = 1;
  return a ? a->alloc(a->self, n) : malloc(n);
}

void *resil__calloc(const resil_allocator *a, size_t n) {
  void *p = resil__alloc(a, n);
  if (p) memset(p, 0, n);
  return p;
}

void resil__free(const resil_allocator *a, void *p) {
  if (!p) return;
  if (a)
    a->free(a->self, p);
  else
    free(p);
}

char *resil__strdup(const resil_allocator *a, const char *s, int *ok) {
  *ok = 1;
  if (!s) return NULL;
  size_t n = strlen(s) + 1;
  char *p = resil__alloc(a, n);
  if (!p) {
    *ok = 0;
    return NULL;
  }
  memcpy(p, s, n);
  return p;
}

void *resil__grow_zeroed(const resil_allocator *a, void *p, size_t *n, size_t elem, size_t i) {
  if (i < *n) return p;
  size_t m = *n ? *n : 64;
  while (m <= i) {
    if (m > SIZE_MAX / 2) return NULL;
    m *= 2;
  }
  if (m > SIZE_MAX / elem) return NULL;
  void *v = resil__calloc(a, m * elem);
  if (!v) return NULL;
  if (*n) memcpy(v, p, *n * elem);
  resil__free(a, p);
  *n = m;
  return v;
}
