/* resil_shared: state shared by the processes of one host (DESIGN §8.1).
 *
 * A shared segment is opened by name. Breakers, rate limiters, bulkheads
 * and retry budgets created with `cfg.shared` set to a segment keep their
 * state in it, under their instance name: every process that opens the
 * same segment and creates the same kind of instance under the same name
 * shares one state, with the single-process semantics of DESIGN §2.
 *
 *   resil_shared_config sc;
 *   resil_shared_config_init(&sc);
 *   sc.name = "myapp";                        // one segment per application
 *   resil_shared *seg;
 *   resil_error err;
 *   if (resil_shared_open(&sc, &seg, &err) != RESIL_OK) ...   // required only
 *   resil_ratelimiter_config rc;
 *   resil_ratelimiter_config_init(&rc);
 *   rc.name = "upstream";
 *   rc.shared = seg;                          // the state lives in the segment
 *   resil_ratelimiter_new(&rc, &rl, &err);
 *   ...
 *   resil_ratelimiter_free(rl);
 *   resil_shared_close(seg);
 *
 * Where it lives. With `dir` NULL the segment is a POSIX shared-memory
 * object (shm_open, /dev/shm on Linux) named
 * "/resil-<euid>-v<layout>-<name>"; otherwise it is the file
 * "<dir>/resil-<euid>-v<layout>-<name>". The effective user id and the
 * layout version (RESIL_SHARED_LAYOUT) in the name keep users and
 * incompatible builds apart. The object is opened with O_NOFOLLOW and
 * O_CLOEXEC and refused unless it is a regular file owned by the effective
 * user, with exactly `mode` as its permission bits and a valid header.
 *
 * What it records. A header with a magic number, the layout version, the
 * size, the capacity, the boot id (/proc/sys/kernel/random/boot_id) and
 * the time namespace (the inode of /proc/self/ns/time, 0 where the kernel
 * has none). A segment left by an earlier boot is reinitialised (every
 * instance back to its initial state), because CLOCK_MONOTONIC, on which
 * shared state keeps its times, restarts at boot. A segment created in
 * another time namespace is refused: CLOCK_MONOTONIC differs between them.
 * Creation is race-free: whoever opens the object first initialises it
 * under an flock(2) on it, which the kernel drops if that process dies; a
 * segment whose creator died while initialising it is initialised by the
 * next process that opens it.
 *
 * Instances. Circuit breakers (breaker.h), rate limiters (ratelimit.h),
 * semaphore bulkheads (bulkhead.h) and retry budgets (retry.h) take a
 * `shared` config field. The segment holds `capacity` instance
 * slots, fixed at creation. An instance is created in the first free slot, or found by
 * its kind and name. Opening an existing instance with a different
 * configuration fails, naming the first field that differs; no free slot
 * is the error "segment ... is full (capacity N)". Either error, like a
 * segment that cannot be opened, is a fallback unless `required` (below).
 *
 * Surviving SIGKILL. A process killed at any instruction never wedges
 * another and never breaks an invariant. The slot table is changed under a
 * robust process-shared mutex (PTHREAD_MUTEX_ROBUST): every change is first
 * written to a staging copy and then applied, so the next process to take
 * the mutex after a death (EOWNERDEAD) re-applies the interrupted change
 * before it marks the mutex consistent. The policies' own state is changed
 * with lock-free 64-bit compare-and-swap only (each policy's header says
 * how), never under a lock, except the breaker's: its multi-word changes
 * (window, totals, transitions) are made under a lock in its slot that
 * records its holder process, and a waiter that finds the holder dead
 * takes the lock over and repairs the state first (breaker.h); a reset or
 * replace takes that lock too before rewriting the slot.
 *
 * Fallback. When the segment cannot be used (permissions, another user's
 * object, no /dev/shm, no space, a bad header, another time namespace) or
 * an instance cannot be created in it (full, another configuration), and
 * `required` is 0, the policy is created with per-process state instead:
 * resil_shared_open still returns RESIL_OK with a segment in fallback mode
 * (resil_shared_is_fallback), and every fallback is counted
 * (resil_shared_fallbacks) and reported once to `on_fallback`. With
 * `required` 1 the same condition is an error naming the reason.
 *
 * Thread-safety: every function may be called on one segment from any
 * thread at once, except resil_shared_close(). After fork() the child may
 * use the segment and the policies it inherited (the mapping stays shared;
 * a bulkhead's permits are the child's own, recorded under its pid), as
 * long as no other thread of the parent was inside a resil_shared call or
 * a shared bulkhead's queue at the fork (the usual rule for locks and
 * fork()).
 *
 * Linux only (shm_open, /proc, robust mutexes).
 *
 * Create/free pair: resil_shared_open / resil_shared_close. Since 0.2. */
#ifndef RESIL_SHARED_H
#define RESIL_SHARED_H

#include <stddef.h>
#include <stdint.h>

#include "status.h"
#include "version.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct resil_shared resil_shared;

/* The segment layout version, part of the object's name: a library with
 * another layout never maps the object (2 since 0.2's breaker ramp). */
#define RESIL_SHARED_LAYOUT 2
/* Longest segment and instance name, in bytes. */
#define RESIL_SHARED_NAME_MAX 64
/* Most instance slots a segment may hold. */
#define RESIL_SHARED_CAPACITY_MAX 65536

/* Called once per fallback: instance is NULL when the segment itself could
 * not be opened, else the instance that got per-process state; why says
 * what failed (its msg is a sentence naming the object and the reason). On
 * the thread that called resil_shared_open or the policy's constructor. */
typedef void (*resil_shared_fallback_fn)(void *user, const char *instance,
                                         const resil_error *why);

typedef struct resil_shared_config {
  /* Sized struct (version.h); set by resil_shared_config_init(). */
  size_t struct_size;
  /* Segment name, 1..RESIL_SHARED_NAME_MAX characters of [A-Za-z0-9_.-],
   * not "." or "..". No default: must be set. */
  const char *name;
  /* NULL = POSIX shared memory (shm_open). Otherwise an existing directory
   * the segment is a file in (e.g. one on a tmpfs). Default NULL. */
  const char *dir;
  /* Instance slots, 1..RESIL_SHARED_CAPACITY_MAX, used when the segment is
   * created; an existing segment keeps the capacity it was created with
   * (resil_shared_capacity). Each slot takes 4 KiB. Default 64. */
  uint32_t capacity;
  /* Permission bits of the object: 0600, or 0640 / 0660 to let the group
   * in (opt-in). The object is created with them (whatever the umask) and
   * an existing one must have exactly them. Default 0600. */
  uint32_t mode;
  /* 0: a segment or instance that cannot be used falls back to
   * per-process state (counted, reported). 1: it is an error. Default 0. */
  int required;
  /* Told about each fallback; NULL = nobody. Default NULL. */
  resil_shared_fallback_fn on_fallback;
  void *user;
  /* Since 0.2. 0: creating an instance that exists in the segment with
   * another configuration is RESIL_EINVAL naming the first differing
   * field. 1: it replaces the instance for every process instead (its
   * generation + 1, its state back to the new configuration's initial
   * state); an instance whose configuration is the same is attached as
   * with 0, so that many processes applying one change replace it once.
   * Handles created before the replacement keep the settings they cached
   * and go on using the reset state until they are re-created. The
   * registry (registry.h) opens its segments with 1: a file's changed
   * settings are the new truth. Default 0. */
  int replace_differing;
  /* Since 0.2. 1: an absent segment is not created (with `required` 1
   * that is RESIL_ESTATE "no segment PATH"; else a fallback), for tools
   * that only look (`resil state show`). Default 0. */
  int existing_only;
} resil_shared_config;

/* Writes the documented defaults and struct_size. A macro passing
 * sizeof(resil_shared_config). NULL is a no-op. Since 0.2. */
RESIL_API void resil_shared_config_init_sized(resil_shared_config *cfg,
                                              size_t struct_size);
#define resil_shared_config_init(cfg)                                          \
  resil_shared_config_init_sized((cfg), sizeof(resil_shared_config))

/* Opens the segment, creating and initialising it if needed (see above).
 * Returns RESIL_OK (*out set; in fallback mode when the segment could not
 * be used and cfg->required is 0); RESIL_EINVAL for cfg or out NULL, a
 * config never passed through resil_shared_config_init() or a field out of
 * range (err names the field); RESIL_ENOMEM; and, when cfg->required is 1,
 * RESIL_ESTATE for an object that cannot be used (err->field "segment",
 * err->msg e.g. "segment /resil-1000-v2-app belongs to uid 0, not 1000"),
 * or RESIL_ESYS for a failed system call (err->msg names the call and
 * strerror). err may be NULL. Since 0.2. */
RESIL_API resil_status resil_shared_open(const resil_shared_config *cfg,
                                         resil_shared **out, resil_error *err);

/* Checks cfg as resil_shared_open does (RESIL_OK or RESIL_EINVAL naming
 * the field) without opening or creating anything (the registry's
 * RESIL_REGISTRY_NO_OPEN). Since 0.2. */
RESIL_API resil_status resil_shared_config_check(const resil_shared_config *cfg,
                                                 resil_error *err);

/* Drops the caller's reference: the mapping goes when the last instance
 * created in it has been freed too. The object itself stays (other
 * processes, and later ones, use it); resil_shared_unlink removes it. NULL
 * is a no-op. Needs exclusive access to the handle. Since 0.2. */
RESIL_API void resil_shared_close(resil_shared *seg);

/* Removes the segment's object name (shm_unlink or unlink): processes
 * that have it mapped keep using it, the next open creates a new one.
 * RESIL_OK, RESIL_EINVAL (cfg NULL or name invalid), RESIL_ESYS (the call
 * failed, ENOENT included: err says which). Since 0.2. */
RESIL_API resil_status resil_shared_unlink(const resil_shared_config *cfg,
                                           resil_error *err);

/* 1 when the segment could not be used and instances created with it get
 * per-process state; 0 otherwise or for NULL. Since 0.2. */
RESIL_API int resil_shared_is_fallback(const resil_shared *seg);

/* Fallbacks made through this handle: 1 for the segment itself, 1 for each
 * instance that got per-process state. 0 for NULL. Since 0.2. */
RESIL_API uint64_t resil_shared_fallbacks(const resil_shared *seg);

/* The object's name: "/resil-<uid>-v<layout>-<name>" (POSIX shm) or the
 * file's path. Owned by the handle; NULL for NULL. Since 0.2. */
RESIL_API const char *resil_shared_path(const resil_shared *seg);

/* Instance slots of the segment (0 in fallback mode or for NULL). Since
 * 0.2. */
RESIL_API uint32_t resil_shared_capacity(const resil_shared *seg);

/* Called for each instance in the segment: kind is "ratelimiter",
 * "bulkhead", "retry_budget", ...; generation counts the replacements of
 * its config (1 at creation). Return nonzero to stop. Since 0.2. */
typedef int (*resil_shared_foreach_fn)(void *user, const char *kind,
                                       const char *name, uint64_t generation);

/* Adds the segment's figures to a collector (metrics.h) under name (NULL:
 * the segment's name):
 *   resil_shared_slots_used{name}        gauge    instances in the segment
 *   resil_shared_slots_capacity{name}    gauge    its capacity (0 in
 *                                                 fallback mode)
 *   resil_shared_fallback_mode{name}     gauge    1 when in fallback mode
 *   resil_shared_fallback_total{name}    counter  resil_shared_fallbacks
 * Statuses as resil_metrics_add_source; the segment must outlive its
 * membership (resil_metrics_remove(m, seg) first). Since 0.2. */
struct resil_metrics;
RESIL_API resil_status resil_shared_metrics_add(struct resil_metrics *m, const char *name,
                                                resil_shared *seg);

/* The segment's name as given in its config (NULL for NULL). Since 0.2. */
RESIL_API const char *resil_shared_name(const resil_shared *seg);

/* Calls fn for each instance, in slot order, under the segment's lock (fn
 * must not call other resil_shared or instance-creation functions).
 * Returns the number of instances visited; 0 in fallback mode; -1 for a
 * NULL seg or fn, or when the lock cannot be taken. Since 0.2. */
RESIL_API int resil_shared_foreach(resil_shared *seg, resil_shared_foreach_fn fn,
                                   void *user);

/* Puts every instance named `instance` (any kind) back to its initial
 * state, for every process: a rate limiter gets a full cycle, a bulkhead
 * all its permits (a holder's later release of a permit taken before the
 * reset is then a misuse, RESIL_EMISUSE). RESIL_OK; RESIL_EINVAL (NULL
 * argument); RESIL_ESTATE (no such instance, or fallback mode);
 * RESIL_ESYS (the lock cannot be taken). Since 0.2. */
RESIL_API resil_status resil_shared_reset(resil_shared *seg,
                                          const char *instance,
                                          resil_error *err);

#ifdef __cplusplus
}
#endif
#endif
