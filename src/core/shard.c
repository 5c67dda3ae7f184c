/* Per-thread counter shards: set-up and the slow paths. See shard.h. */
#include "core/shard.h"

#include <string.h>

#define LINE ((uintptr_t)sizeof(resil__shard_slot))

resil_status resil__shards_init(resil__shards *sh, const resil_allocator *alloc,
                                unsigned k, unsigned nslots) {
  if (!sh) return RESIL_EINVAL;
  memset(sh, 0, sizeof *sh);
  if (k < 1 || k > RESIL__SHARDS_MAX_K || nslots < 2 || nslots > 256 ||
      (nslots & (nslots - 1)))
    return RESIL_EINVAL;
  /* The allocator promises malloc's alignment only: over-allocate by a
   * line less one byte and align inside. */
  void *mem = resil__calloc(alloc, (nslots + 1) * LINE + LINE - 1);
  if (!mem) return RESIL_ENOMEM;
  unsigned bits = 0;
  while ((1u << bits) < nslots) bits++;
  sh->mem = mem;
  sh->slot = (resil__shard_slot *)(((uintptr_t)mem + LINE - 1) & ~(LINE - 1));
  sh->alloc = alloc;
  sh->shift = 64 - bits;
  sh->line_shift = sh->shift - 6; /* 64 == 1 << 6 == sizeof *sh->slot */
  sh->nslots = nslots;
  sh->k = k;
  for (unsigned s = 0; s <= nslots; s++) {
    atomic_init(&sh->slot[s].owner, 0);
    for (unsigned i = 0; i < RESIL__SHARDS_MAX_K; i++)
      atomic_init(&sh->slot[s].c[i], 0);
  }
  return RESIL_OK;
}

void resil__shards_free(resil__shards *sh) {
  if (!sh || !sh->mem) return;
  resil__free(sh->alloc, sh->mem);
  sh->mem = NULL;
  sh->slot = NULL;
}

/* 1 when the calling thread (id) may write slot s: it owns it, or claimed
 * it now. */
static int own(resil__shard_slot *s, uintptr_t id) {
  uintptr_t o = atomic_load_explicit(&s->owner, memory_order_relaxed);
  if (o == id) return 1;
  if (o != 0) return 0;
  /* Only the claim needs an atomic read-modify-write: one thread wins a
   * free slot. A failed swap loaded the owner (which is never our id: only
   * this thread writes it). Relaxed is enough: the counters need no order
   * with the owner, only one writer. */
  return atomic_compare_exchange_strong_explicit(
      &s->owner, &o, id, memory_order_relaxed, memory_order_relaxed);
}

void resil__shards_add_slow(resil__shards *sh, uintptr_t id, unsigned i,
                            uint64_t n) {
  for (unsigned which = 0; which < 2; which++) {
    resil__shard_slot *s = &sh->slot[resil__shards_index(sh, id, which)];
    if (own(s, id)) {
      uint64_t v = atomic_load_explicit(&s->c[i], memory_order_relaxed);
      atomic_store_explicit(&s->c[i], v + n, memory_order_relaxed);
      return;
    }
  }
  atomic_fetch_add_explicit(&sh->slot[sh->nslots].c[i], n,
                            memory_order_relaxed);
}

uint64_t resil__shards_sum(const resil__shards *sh, unsigned i) {
  /* Atomics are not const; the loads write nothing. */
  resil__shard_slot *slot = ((resil__shards *)sh)->slot;
  uint64_t sum = 0;
  for (unsigned s = 0; s <= sh->nslots; s++)
    sum += atomic_load_explicit(&slot[s].c[i], memory_order_relaxed);
  return sum;
}
