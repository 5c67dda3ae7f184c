/* An intrusive binary min-heap of timers: many deadlines multiplexed onto
 * one loop timer (the adapter's, loop.h), for the built-in loop and the
 * async engine. Not thread-safe: owned by one loop thread. Timers due at
 * the same instant fire in the order they were armed. */
#ifndef RESIL_CORE_TIMERHEAP_H
#define RESIL_CORE_TIMERHEAP_H

#include <stddef.h>
#include <stdint.h>

#include "resil/alloc.h"

typedef struct resil__timer {
  int64_t at_ns;  /* when it is due, on the owner's clock */
  uint64_t seq;   /* arming order, breaks ties */
  size_t pos;     /* index + 1 in the heap; 0 when not armed */
  void (*cb)(void *arg);
  void *arg;
} resil__timer;

typedef struct resil__timerheap {
  resil__timer **v;
  size_t n, cap;
  uint64_t seq;
  const resil_allocator *alloc;
} resil__timerheap;

/* An empty heap (no allocation until the first arm). */
void resil__timerheap_init(resil__timerheap *h, const resil_allocator *alloc);
/* Frees the heap's array; the timers are the caller's. */
void resil__timerheap_free(resil__timerheap *h);
/* Arms t (cb and arg set by the caller) to be due at at_ns, or moves it
 * there when it is armed already. Returns 0, or -1 when the array could not
 * grow (t is then not armed). */
int resil__timerheap_arm(resil__timerheap *h, resil__timer *t, int64_t at_ns);
/* Disarms t; a no-op when it is not armed. */
void resil__timerheap_disarm(resil__timerheap *h, resil__timer *t);
/* 1 when t is armed. */
static inline int resil__timer_armed(const resil__timer *t) { return t->pos != 0; }
/* The earliest armed timer, or NULL. */
static inline resil__timer *resil__timerheap_first(const resil__timerheap *h) {
  return h->n ? h->v[0] : NULL;
}
/* Disarms and returns the earliest timer due at or before now_ns, or NULL.
 * The caller runs its callback (which may arm or disarm any timer). */
resil__timer *resil__timerheap_pop_due(resil__timerheap *h, int64_t now_ns);

#endif
