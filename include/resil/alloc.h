/* Per-object allocator hook. Every config struct has a
 * `const resil_allocator *alloc` field; NULL means malloc/free. There is no
 * process-wide hook. The allocator must outlive every object made with it and
 * be thread-safe if those objects are shared across threads. Mostly for
 * tests (allocation-failure sweeps) and arenas. */
#ifndef RESIL_ALLOC_H
#define RESIL_ALLOC_H

#include <stddef.h>

#include "version.h"

typedef struct resil_allocator {
  /* Returns NULL on failure; n > 0. */
  void *(*alloc)(void *self, size_t n);
  /* p is never NULL. */
  void (*free)(void *self, void *p);
  void *self;
} resil_allocator;

#endif
