/* Per-thread counter shards. Internal: not installed, nothing exported.
 *
 * A counter that every thread bumps on a hot path costs one atomic
 * read-modify-write per bump (~2 ns uncontended here, far more when threads
 * share its cache line). Where the figure need not be ordered with any other
 * state (a statistic read now and then), it can be split into slots that
 * each have one writer: a bump is then a relaxed load and a relaxed store
 * of a slot only the calling thread writes (~0.5 ns), and a read sums the
 * slots.
 *
 * Layout. A resil__shards holds `nslots` (a power of two, 2..256) slots of
 * one 64-byte cache line each, plus one shared slot, allocated together and
 * aligned to 64 bytes. A slot is an owner word and up to
 * RESIL__SHARDS_MAX_K counters (the object's K figures).
 *
 * Ownership. A thread's id is its thread pointer (resil__thread_id), which
 * is unique among live threads and never 0. A thread bumps in the first of
 * its two candidate slots (resil__shards_index) that it owns, or that is
 * free (owner 0) and that it claims with a compare-and-swap. An owner is
 * never changed afterwards, so a slot has at most one live writer: its
 * claimer, or, once the claimer has exited, a later thread that got the
 * same thread pointer (glibc and musl reuse a dead thread's TCB; its
 * creation is ordered after the old thread's exit, so it continues from
 * the old thread's last value). A thread whose two candidates are owned by
 * other ids adds to the shared slot's counters with an atomic fetch-add.
 * Totals are therefore always exact; bumps are fast for up to about
 * `nslots` live threads (fewer when their hashes collide), and a process
 * whose threads come and go with new thread pointers slowly moves to the
 * shared path (never losing a count).
 *
 * Reading. resil__shards_sum adds every slot's counter and the shared one
 * with relaxed loads: a figure read while threads bump it is some value
 * between the counts before and after the read, not ordered with the other
 * figures or with any other state of the object (read K figures, get K
 * independent snapshots). Two reads by one thread never go backwards.
 * Once the bumping threads have been joined (or otherwise synchronized
 * with), the sum is exact.
 *
 * Thread-safety: resil__shards_add and resil__shards_sum may be called from
 * any threads at once; init and free are not (the owner of the object does
 * them before it is shared and after its last use). Not async-signal-safe:
 * a signal handler that bumps a counter its thread was bumping could lose
 * the interrupted bump. After fork() the child's thread has the forking
 * thread's thread pointer and continues in its slots; the other owners do
 * not exist in the child (as if they had exited). No global state:
 * everything lives in the object.
 *
 * Memory: 64 × (nslots + 2) - 1 bytes allocated per resil__shards (1151
 * for RESIL__SHARDS_DEFAULT_SLOTS), whatever K. */
#ifndef RESIL_CORE_SHARD_H
#define RESIL_CORE_SHARD_H

#include <stdatomic.h>
#include <stdint.h>

#include "core/internal.h"
#include "resil/alloc.h"
#include "resil/status.h"

#if !(defined(__GNUC__) && (defined(__x86_64__) || defined(__aarch64__)))
#include <pthread.h>
#endif

/* Counters per slot: an owner word and 7 counters fill one cache line. */
#define RESIL__SHARDS_MAX_K 7
/* Slots an object gets when it has no reason to choose: 16 lines, 1 KB. */
#define RESIL__SHARDS_DEFAULT_SLOTS 16u

typedef struct resil__shard_slot {
  _Atomic uintptr_t owner; /* 0: free; else the thread id of its writer */
  _Atomic uint64_t c[RESIL__SHARDS_MAX_K];
} resil__shard_slot;

_Static_assert(sizeof(resil__shard_slot) == 64,
               "a shard slot is one 64-byte cache line");

typedef struct resil__shards {
  resil__shard_slot *slot; /* nslots slots, then the shared one */
  void *mem;               /* the allocation slot points into */
  const resil_allocator *alloc;
  unsigned shift; /* 64 - log2(nslots) */
  unsigned line_shift; /* shift - 6: the hash's top bits as a byte offset */
  unsigned nslots;
  unsigned k;
} resil__shards;

/* The calling thread's id: its thread pointer (x86-64: the TCB self
 * pointer at %fs:0 of the TLS ABI; aarch64: tpidr_el0), else
 * pthread_self(). Unique among live threads, never 0. */
static inline uintptr_t resil__thread_id(void) {
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 11 &&           \
    (defined(__x86_64__) || defined(__aarch64__))
  return (uintptr_t)__builtin_thread_pointer();
#elif defined(__GNUC__) && defined(__x86_64__)
  uintptr_t p;
  __asm__("mov %%fs:0, %0" : "=r"(p));
  return p;
#elif defined(__GNUC__) && defined(__aarch64__)
  uintptr_t p;
  __asm__("mrs %0, tpidr_el0" : "=r"(p));
  return p;
#else
  return (uintptr_t)pthread_self();
#endif
}

/* Thread id `id`'s candidate slot `which` (0 or 1): the top bits of a
 * multiplicative hash, then the bits below them. */
static inline unsigned resil__shards_index(const resil__shards *sh,
                                           uintptr_t id, unsigned which) {
  uint64_t h = (uint64_t)id * UINT64_C(0x9E3779B97F4A7C15);
  if (which) h <<= 64 - sh->shift; /* the next log2(nslots) bits */
  return (unsigned)(h >> sh->shift);
}

/* Sets up K (1..RESIL__SHARDS_MAX_K) counters at 0 over nslots slots (a
 * power of two, 2..256), allocated with alloc (NULL: malloc). RESIL_EINVAL
 * for a bad k or nslots, RESIL_ENOMEM (sh then needs no free). Costs
 * 64 × (nslots + 2) - 1 bytes at most. */
resil_status resil__shards_init(resil__shards *sh, const resil_allocator *alloc,
                                unsigned k, unsigned nslots);
/* Releases what init allocated; sh may be one init failed on or zeroed. */
void resil__shards_free(resil__shards *sh);
/* The add when the thread's first candidate is not its own (out of line). */
void resil__shards_add_slow(resil__shards *sh, uintptr_t id, unsigned i,
                            uint64_t n);
/* Counter i (< k): the sum of every slot's and the shared one (see
 * "Reading" above). */
uint64_t resil__shards_sum(const resil__shards *sh, unsigned i);

/* Adds n to counter i (< k). Unordered (relaxed); see the header. */
static inline void resil__shards_add(resil__shards *sh, unsigned i,
                                     uint64_t n) {
  uintptr_t id = resil__thread_id();
  /* &sh->slot[resil__shards_index(sh, id, 0)], one shift and mask. */
  uint64_t off = ((uint64_t)id * UINT64_C(0x9E3779B97F4A7C15)) >>
                 sh->line_shift & ~(uint64_t)(sizeof(resil__shard_slot) - 1);
  resil__shard_slot *s = (resil__shard_slot *)((char *)sh->slot + off);
  if (RESIL_LIKELY(atomic_load_explicit(&s->owner, memory_order_relaxed) ==
                   id)) {
    uint64_t v = atomic_load_explicit(&s->c[i], memory_order_relaxed);
    atomic_store_explicit(&s->c[i], v + n, memory_order_relaxed);
    return;
  }
  resil__shards_add_slow(sh, id, i, n);
}

#endif
