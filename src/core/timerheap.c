/* Binary min-heap of timers (timerheap.h). */
#include "core/timerheap.h"

#include "core/internal.h"

static int before(const resil__timer *a, const resil__timer *b) {
  return a->at_ns < b->at_ns || (a->at_ns == b->at_ns && a->seq < b->seq);
}

static void place(resil__timerheap *h, size_t i, resil__timer *t) {
  h->v[i] = t;
  t->pos = i + 1;
}

static void sift_up(resil__timerheap *h, size_t i) {
  resil__timer *t = h->v[i];
  while (i > 0) {
    size_t parent = (i - 1) / 2;
    if (!before(t, h->v[parent])) break;
    place(h, i, h->v[parent]);
    i = parent;
  }
  place(h, i, t);
}

static void sift_down(resil__timerheap *h, size_t i) {
  resil__timer *t = h->v[i];
  for (;;) {
    size_t l = 2 * i + 1, r = l + 1, m = i;
    const resil__timer *mt = t;
    if (l < h->n && before(h->v[l], mt)) m = l, mt = h->v[l];
    if (r < h->n && before(h->v[r], mt)) m = r;
    if (m == i) break;
    place(h, i, h->v[m]);
    i = m;
  }
  place(h, i, t);
}

void resil__timerheap_init(resil__timerheap *h, const resil_allocator *alloc) {
  h->v = NULL;
  h->n = h->cap = 0;
  h->seq = 0;
  h->alloc = alloc;
}

void resil__timerheap_free(resil__timerheap *h) {
  for (size_t i = 0; i < h->n; i++) h->v[i]->pos = 0;
  resil__free(h->alloc, h->v);
  h->v = NULL;
  h->n = h->cap = 0;
}

int resil__timerheap_arm(resil__timerheap *h, resil__timer *t, int64_t at_ns) {
  if (t->pos) { /* move: re-sift from where it is */
    t->at_ns = at_ns;
    t->seq = ++h->seq;
    size_t i = t->pos - 1;
    sift_up(h, i);
    sift_down(h, t->pos - 1);
    return 0;
  }
  if (h->n == h->cap) {
    size_t cap = h->cap ? h->cap * 2 : 16;
    resil__timer **v = resil__alloc(h->alloc, cap * sizeof *v);
    if (!v) return -1;
    for (size_t i = 0; i < h->n; i++) v[i] = h->v[i];
    resil__free(h->alloc, h->v);
    h->v = v;
    h->cap = cap;
  }
  t->at_ns = at_ns;
  t->seq = ++h->seq;
  place(h, h->n++, t);
  sift_up(h, h->n - 1);
  return 0;
}

void resil__timerheap_disarm(resil__timerheap *h, resil__timer *t) {
  if (!t->pos) return;
  size_t i = t->pos - 1;
  t->pos = 0;
  resil__timer *last = h->v[--h->n];
  if (i == h->n) return;
  place(h, i, last);
  sift_up(h, i);
  sift_down(h, last->pos - 1);
}

resil__timer *resil__timerheap_pop_due(resil__timerheap *h, int64_t now_ns) {
  resil__timer *t = resil__timerheap_first(h);
  if (!t || t->at_ns > now_ns) return NULL;
  resil__timerheap_disarm(h, t);
  return t;
}
