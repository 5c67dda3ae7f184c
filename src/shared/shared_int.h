/* Internal API of the shared segment for the policies (not installed, not
 * exported from libresil.so).
 *
 * A policy created with a segment asks for the slot of its (kind, name)
 * with its configuration (resil__shared_attach): the slot is found, or
 * created with the policy's initial state. The slot's state is an array of
 * RESIL__SHARED_STATE_WORDS 64-bit words, 64-byte aligned, that the policy
 * reads and changes with atomic operations only (lock-free; each policy
 * says how its words are used). The segment never touches a live slot's
 * state except to reset it (resil_shared_reset, replace), with atomic
 * 64-bit stores.
 *
 * An attached instance holds a reference on the segment handle (the mapping
 * stays until the last reference is dropped: resil__shared_release). */
#ifndef RESIL_SHARED_INT_H
#define RESIL_SHARED_INT_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <unistd.h>

#include "resil/shared.h"

/* Kinds of instance (stored in the slot; never renumbered). */
enum {
  RESIL__SHK_RATELIMITER = 1,
  RESIL__SHK_BULKHEAD = 2,
  RESIL__SHK_BREAKER = 3,
  RESIL__SHK_BUDGET = 4
};

/* Words of state per slot, and how many of them a policy's initial state
 * may set (the rest start at 0). */
#define RESIL__SHARED_STATE_WORDS 448
#define RESIL__SHARED_INIT_WORDS 16
/* Bytes of configuration a slot records. */
#define RESIL__SHARED_CFG_MAX 256

/* One field of a policy's configuration record, for naming the first
 * difference: its name, offset and size in the record. Fields of size 8
 * are shown as signed integers, others as "differs". */
typedef struct resil__shared_field {
  const char *name;
  size_t offset;
  size_t size;
} resil__shared_field;

/* What a policy asks for. cfg: the configuration record, cfg_len <=
 * RESIL__SHARED_CFG_MAX bytes (padding zeroed: it is compared bytewise);
 * fields: its fields, covering every byte that matters. init: the initial
 * state's first init_words words (<= RESIL__SHARED_INIT_WORDS). */
typedef struct resil__shared_req {
  uint32_t kind;
  const char *name;
  const void *cfg;
  size_t cfg_len;
  const resil__shared_field *fields;
  size_t nfields;
  const uint64_t *init;
  size_t init_words;
  /* 0, or 1 + the index of a state word the policy uses as a lock that
   * holds its holder's owner word (resil__shared_owner_self) while it
   * changes several words (the breaker). A reset or replace takes that
   * lock first (taking it over when its holder is dead), writes the new
   * state with it held, then releases it: the state is never rewritten
   * under a holder. Recorded in the slot at creation. */
  uint32_t lock_word;
} resil__shared_req;

/* Finds or creates the slot of (req->kind, req->name). RESIL_OK with
 * *state the slot's state words, and a reference on seg taken (drop it with
 * resil__shared_release). RESIL_EINVAL: the instance exists with another
 * configuration (err->field the first differing field, err->msg says both
 * values) or the name is not 1..64 bytes. RESIL_ESTATE: the segment is
 * full, or in fallback mode. RESIL_ESYS: the lock cannot be taken. */
resil_status resil__shared_attach(resil_shared *seg, const resil__shared_req *req,
                                  uint64_t **state, resil_error *err);

/* Replaces the instance's configuration and state (a registry reload):
 * generation + 1, state back to req's initial state, for every process.
 * Creates it when absent. Results as resil__shared_attach (no mismatch).
 * Handles attached before keep the configuration they cached (limit,
 * period...) and go on working on the reset state: the caller (the
 * registry) re-creates them; nothing tells them yet (the generation is
 * in the slot, for a later check). */
resil_status resil__shared_replace(resil_shared *seg, const resil__shared_req *req,
                                   uint64_t **state, resil_error *err);

/* The state words of an existing instance (kind, name), whatever its
 * config, for introspection (a later "resil state show") and white-box
 * tests: RESIL_OK with *state set and a reference taken (drop it with
 * resil__shared_release); RESIL_ESTATE when there is no such instance or
 * the segment is in fallback mode; RESIL_ESYS when the lock fails. */
resil_status resil__shared_find(resil_shared *seg, uint32_t kind, const char *name,
                                uint64_t **state, resil_error *err);

/* Copies the configuration record of the existing instance (kind, name)
 * into cfg (cfg_len bytes, the policy's record size) without taking a
 * reference or creating anything: RESIL_OK; RESIL_ESTATE when there is no
 * such instance, its record has another size, or the segment is in
 * fallback mode; RESIL_ESYS when the lock fails. For the policies'
 * read-only peeks (resil_ratelimiter_shared_peek and friends). */
resil_status resil__shared_find_cfg(resil_shared *seg, uint32_t kind, const char *name,
                                    void *cfg, size_t cfg_len, resil_error *err);

/* Drops a reference taken by attach or replace. */
void resil__shared_release(resil_shared *seg);

/* 1 when seg is a live segment (mapped), 0 in fallback mode or NULL. */
int resil__shared_live(const resil_shared *seg);

/* A policy could not use the segment (why): counts a fallback and tells
 * the hook when the segment allows falling back, and returns 1; returns 0
 * when the segment is `required` (the policy fails with why). */
int resil__shared_fallback(resil_shared *seg, const char *instance,
                           const resil_error *why);

/* What every shared policy's constructor does with its segment, in one
 * place: checks the handle and the clock (a shared instance counts time on
 * CLOCK_MONOTONIC in every process: only the system clock, NULL, will do),
 * then attaches req's instance. RESIL_OK with *state set (shared; a
 * reference taken), or RESIL_OK with *state NULL: the instance gets
 * per-process state, the fallback counted and told (the segment could not
 * be opened, or is full). An error (err set): seg is not a segment handle,
 * a custom clock, another configuration under the name (always), or any
 * failure when the segment is `required`. `what` names the policy in
 * messages ("limiter"). */
resil_status resil__shared_join(resil_shared *seg, const void *clock, const char *what,
                                const resil__shared_req *req, uint64_t **state,
                                resil_error *err);

/* For tests only: does what creating req's instance does up to the moment
 * the staged image is marked for applying (op = 1), then returns with the
 * table mutex still held and the slot untouched, as a process killed
 * there would leave it: the caller then _exits. RESIL_OK or the errors of
 * attach. */
resil_status resil__shared_test_die_mid_apply(resil_shared *seg,
                                              const resil__shared_req *req,
                                              resil_error *err);

/* Process identity for ownership records in shared state: the caller's
 * pid << 32 | the low 32 bits of its start time in clock ticks since boot
 * (/proc/<pid>/stat field 22), so that a pid reused by a later process is
 * not taken for an earlier owner. Reads /proc: callers cache it per pid
 * (getpid changes after fork). Never 0. */
uint64_t resil__shared_owner_self(void);
/* 1 when the owner recorded in `word` (resil__shared_owner_self of some
 * process) is gone: kill(pid, 0) fails with ESRCH, /proc says zombie or
 * dead, or the start time differs (the pid was reused). 0 while it
 * lives. */
int resil__shared_owner_gone(uint64_t word);

/* resil__shared_owner_self cached in a handle, recomputed after fork. */
typedef struct resil__shared_owner_cache {
  _Atomic int64_t pid; /* the process `word` is for; 0: none yet */
  _Atomic uint64_t word;
} resil__shared_owner_cache;

static inline uint64_t resil__shared_owner(resil__shared_owner_cache *c) {
  int64_t pid = (int64_t)getpid();
  if (__builtin_expect(atomic_load_explicit(&c->pid, memory_order_acquire) == pid, 1))
    return atomic_load_explicit(&c->word, memory_order_relaxed);
  uint64_t w = resil__shared_owner_self();
  atomic_store_explicit(&c->word, w, memory_order_relaxed);
  atomic_store_explicit(&c->pid, pid, memory_order_release);
  return w;
}

/* 1 when the handle is a segment handle. */
int resil__shared_valid(const resil_shared *seg);

#endif
