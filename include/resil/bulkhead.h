/* Bulkheads (DESIGN §2.5): limits on how much code runs at once.
 *
 * resil_bulkhead: a semaphore. At most `max_concurrent` calls hold a slot;
 * a call that finds none waits up to `max_wait_ns` (default 0: rejected at
 * once). The slot is returned on every path of the run form (success,
 * failure, timeout, cancellation), and the free slots are observable.
 * Waiters form one FIFO queue of at most `max_queued`: threads blocked in
 * resil_bulkhead_acquire and, for event loops, waiters queued without
 * blocking by resil_bulkhead_enqueue (since 0.2). A release hands its slot
 * straight to the head of the queue; a newcomer never overtakes a waiter.
 *
 * resil_threadpool: own worker threads and a bounded queue. A submitted call
 * runs on a worker; when the queue is full it is rejected; the caller gets a
 * future to wait on.
 *
 * A connection-pool limit is not a bulkhead: it limits connections to a
 * target, not how many calls run.
 *
 * Shared bulkheads (since 0.2, DESIGN §8.1). With cfg.shared the permits
 * live in a segment slot, one 64-bit word per permit holding its owner's
 * pid and process start time (/proc/<pid>/stat field 22): taking one is a
 * compare-and-swap of a free word to the caller's process, releasing one
 * a compare-and-swap back to free, so a process killed at any instruction
 * holds the permit or does not. A permit whose owner is gone (kill(pid, 0)
 * says ESRCH, /proc says zombie, or the start time differs: the pid was
 * reused) is reclaimed by a pass that a caller finding no permit makes, at
 * most once per 10 ms across all processes: a dead process's permits come
 * back at the next acquisition attempt 10 ms or more after its death
 * (well within the 1 s DESIGN asks). Releases are by process: any thread
 * of the process that took a permit may release it. Waiting differs from
 * the per-process bulkhead: there is no FIFO order across processes.
 * A blocked resil_bulkhead_acquire sleeps on a futex word of the slot that
 * every release bumps (FUTEX_WAKE works across processes on shared
 * memory), re-checking at least every 2 ms (for the token and for
 * reclaims). Waiters queued with resil_bulkhead_enqueue are served in
 * FIFO order within the process: a release by this process hands its
 * permit to the head of the queue as before, and one helper thread per
 * shared bulkhead (started at the first enqueue that waits, stopped by
 * resil_bulkhead_free; never one per waiter) sleeps on the same futex word
 * and hands permits freed by other processes to the queue. Every call
 * reads the process id (getpid, to follow fork()); try_acquire and release
 * scan the permit words. The counters (permitted, rejected, handed over,
 * withdrawn, waiting, peaks) are this process's; in_flight and available
 * are the segment's, all processes together.
 *
 *   resil_bulkhead_config cfg;
 *   resil_bulkhead_config_init(&cfg);
 *   cfg.max_concurrent = 2;
 *   resil_bulkhead *bh;
 *   if (resil_bulkhead_new(&cfg, &bh, NULL) != RESIL_OK) ...
 *   resil_outcome o = resil_bulkhead_run(bh, NULL, my_call, my_arg);
 *   resil_bulkhead_free(bh);
 *
 * Thread-safety: every function may be called on the same bulkhead, pool or
 * future from any thread at once, except the _free functions, which need
 * exclusive access (resil_future_free excepted: see there; a waiter is
 * freed by its owner alone, see resil_bulkhead_waiter_free).
 *
 * Create/free pairs: resil_bulkhead_new / resil_bulkhead_free,
 * resil_bulkhead_waiter_new / resil_bulkhead_waiter_free (since 0.2),
 * resil_threadpool_new / resil_threadpool_free, resil_threadpool_submit /
 * resil_future_free. */
#ifndef RESIL_BULKHEAD_H
#define RESIL_BULKHEAD_H

#include <stddef.h>
#include <stdint.h>

#include "alloc.h"
#include "call.h"
#include "clock.h"
#include "outcome.h"
#include "shared.h"
#include "status.h"
#include "version.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- semaphore bulkhead ---------------------------------------------- */

typedef struct resil_bulkhead resil_bulkhead;

#define RESIL_BULKHEAD_MAX_CONCURRENT 1000000

typedef struct resil_bulkhead_config {
  /* Sized struct (version.h); set by resil_bulkhead_config_init(). */
  size_t struct_size;
  /* Instance name, copied. Default "bulkhead". */
  const char *name;
  /* Slots, 1..RESIL_BULKHEAD_MAX_CONCURRENT. Default 25 (Resilience4j). */
  uint32_t max_concurrent;
  /* Longest wait for a slot in resil_bulkhead_acquire and _run,
   * 0..INT64_MAX nanoseconds; 0 = reject at once. Default 0 (Resilience4j).
   * The wait is real time (a condition variable on CLOCK_MONOTONIC): an
   * injected clock cannot shorten it. For resil_bulkhead_enqueue it is the
   * wait the caller is told to time with its own timer (since 0.2). */
  int64_t max_wait_ns;
  /* The clock of the default ctx given to fn when resil_bulkhead_run gets a
   * NULL ctx; NULL = resil_clock_system(). The bulkhead itself reads no
   * clock: its only time is the real-time wait above. */
  const resil_clock *clock;
  /* NULL = malloc/free. Used only by _new and _free (and the waiter
   * functions' _new and _free). */
  const resil_allocator *alloc;
  /* Since 0.2: waiters that may queue for a slot at once, blocked acquires
   * and resil_bulkhead_enqueue waiters together (one FIFO queue),
   * 0..RESIL_BULKHEAD_MAX_QUEUED; 0 = nobody waits (every acquire that finds
   * no slot is rejected at once, whatever max_wait_ns says). A waiter that
   * finds the queue full is rejected at once. Default
   * RESIL_BULKHEAD_MAX_QUEUED (in 0.1 waiting was bounded only by the
   * callers' threads). */
  uint32_t max_queued;
  /* Since 0.2: a segment (shared.h) to keep the permits in, shared with
   * every process that creates a bulkhead of the same name in the same
   * segment: at most max_concurrent calls hold a permit across all of
   * them. NULL = per-process. Default NULL. The slot records
   * max_concurrent (another value is RESIL_EINVAL naming it), which must
   * then be 1..RESIL_BULKHEAD_SHARED_MAX_CONCURRENT; max_wait_ns and
   * max_queued stay per process. A segment in fallback mode or full gives
   * a per-process bulkhead and a counted fallback, unless the segment is
   * required (then RESIL_ESTATE with the reason). The segment handle must
   * stay open until the bulkhead is freed. See "Shared bulkheads" above. */
  resil_shared *shared;
} resil_bulkhead_config;

/* Most permits of a shared bulkhead (one 64-bit word each in its slot). */
#define RESIL_BULKHEAD_SHARED_MAX_CONCURRENT 400

#define RESIL_BULKHEAD_MAX_QUEUED 1000000

/* Counters since creation, and the current gauges. Each value is read
 * atomically; the set is not one snapshot. */
typedef struct resil_bulkhead_metrics {
  /* Sized struct (version.h): the bytes the library wrote. */
  size_t struct_size;
  uint32_t max_concurrent;
  uint32_t in_flight;      /* slots held now                            */
  uint32_t available;      /* max_concurrent - in_flight                */
  uint32_t peak_in_flight; /* highest in_flight seen                    */
  uint32_t waiting;        /* waiters queued now (blocked and enqueued) */
  uint64_t permitted;      /* slots handed out (handovers included)     */
  uint64_t rejected;       /* acquisitions refused: full, queue full,
                              wait expired, cancelled or withdrawn      */
  /* Since 0.2. */
  uint64_t handed_over;    /* slots a release handed to a queued waiter */
  uint64_t withdrawn;      /* waiters that left the queue without a slot
                              (wait expired, cancelled, dequeued)       */
  uint32_t peak_waiting;   /* highest `waiting` seen                    */
  uint32_t max_queued;     /* the configured bound                      */
} resil_bulkhead_metrics;

/* Writes the documented defaults and struct_size. A macro passing
 * sizeof(resil_bulkhead_config). NULL is a no-op. Since 0.1. */
RESIL_API void resil_bulkhead_config_init_sized(resil_bulkhead_config *cfg,
                                                size_t struct_size);
#define resil_bulkhead_config_init(cfg)                                        \
  resil_bulkhead_config_init_sized((cfg), sizeof(resil_bulkhead_config))

/* Validates cfg and creates a bulkhead with every slot free.
 * Returns RESIL_OK; RESIL_EINVAL for cfg or out NULL, a config never passed
 * through resil_bulkhead_config_init() ("call resil_bulkhead_config_init()")
 * or a field out of range (err says which field, its range and the value
 * received, durations in human units); RESIL_ENOMEM;
 * RESIL_ESYS when the mutex or condition variable cannot be created. err may
 * be NULL. *out is written only on success. Since 0.1. */
RESIL_API resil_status resil_bulkhead_new(const resil_bulkhead_config *cfg,
                                          resil_bulkhead **out,
                                          resil_error *err);

/* Frees the bulkhead. NULL is a no-op. Needs exclusive access: no slot may
 * be held, nobody may be waiting, and every waiter of it must be freed.
 * Since 0.1. */
RESIL_API void resil_bulkhead_free(resil_bulkhead *bh);

/* The split form: takes a free slot if there is one, never blocks (one
 * compare-and-swap). Returns RESIL_DECISION_GO when the caller now holds a
 * slot (release it with resil_bulkhead_release), RESIL_DECISION_DENY when
 * none is free (counted as rejected; *why RESIL_REASON_BULKHEAD_FULL) or
 * for a NULL handle (nothing counted; *why RESIL_REASON_LOCAL_ERROR). why
 * may be NULL; *why is RESIL_REASON_OK on GO. While anyone is queued no
 * slot is free (a release hands its slot to the queue): a queued waiter is
 * never overtaken. Since 0.1 (resil_decision since 0.2). */
RESIL_API resil_decision resil_bulkhead_try_acquire(resil_bulkhead *bh,
                                                    resil_reason *why);

/* Takes a slot, waiting when none is free up to min(max_wait_ns, remaining
 * deadline of ctx) of real time. ctx may be NULL (no deadline, no token).
 * The wait ends early when ctx->cancel is signalled; the token is polled
 * every millisecond while waiting. A waiter joins the bulkhead's one FIFO
 * queue (shared with resil_bulkhead_enqueue waiters) and is served in
 * order: a release hands its slot to the head of the queue, and while
 * anyone is queued no newcomer takes a slot (since 0.2; in 0.1 a newcomer
 * could overtake). When the queue holds max_queued waiters the call is
 * rejected at once. The fast path (a slot is free, nobody queued) is one
 * compare-and-swap and takes no lock.
 * Returns RESIL_DECISION_GO (the caller holds a slot) or RESIL_DECISION_DENY
 * with *why RESIL_REASON_BULKHEAD_FULL (no slot within min(max_wait,
 * deadline)), RESIL_REASON_CANCELLED (ctx->cancel during the wait) or
 * RESIL_REASON_LOCAL_ERROR (NULL handle, or a ctx never passed through
 * resil_ctx_init(): nothing counted). why may be NULL; *why is
 * RESIL_REASON_OK on GO. Since 0.1 (resil_decision since 0.2). */
RESIL_API resil_decision resil_bulkhead_acquire(resil_bulkhead *bh,
                                                const resil_ctx *ctx,
                                                resil_reason *why);

/* Returns a slot taken by a successful acquire (or handed over to a
 * waiter). When someone is queued the slot is handed to the head of the
 * queue instead of being freed: a blocked acquire wakes up holding it, an
 * enqueued waiter's callback is called from inside this function, on this
 * thread, after the bulkhead's lock is dropped (see resil_bulkhead_enqueue).
 * The uncontended path is one compare-and-swap and takes no lock.
 * Returns RESIL_OK, or RESIL_EMISUSE (NULL handle, or no slot is held:
 * releasing more than was acquired never raises the free slots above
 * max_concurrent). Since 0.1 (handover since 0.2). */
RESIL_API resil_status resil_bulkhead_release(resil_bulkhead *bh);

/* ---- waiting without blocking (event loops), since 0.2 -----------------
 *
 * An event-loop caller cannot block in resil_bulkhead_acquire. It queues a
 * waiter instead, in the same FIFO queue as the blocked acquires, and arms
 * its own timer for the wait:
 *
 *   resil_bulkhead_waiter *w;                 // one per call, reusable
 *   resil_bulkhead_waiter_new(bh, &w);
 *   int64_t wait_ns;
 *   switch (resil_bulkhead_enqueue(bh, ctx, w, on_slot, call, &wait_ns, &why)) {
 *   case RESIL_DECISION_GO:   start(call); break;      // slot held now
 *   case RESIL_DECISION_WAIT: arm_timer(call, wait_ns); break;
 *   case RESIL_DECISION_DENY: reject(call, why); break; // nothing held
 *   }
 *   // on_slot(call) runs on the releasing thread: forward it to the loop
 *   // (e.g. with the loop adapter's wake), then start the call there.
 *   // On the timer (or on cancellation), on the loop thread:
 *   if (resil_bulkhead_dequeue(bh, w) == RESIL_BH_WITHDRAWN) reject(call);
 *   else { }  // RESIL_BH_HANDED_OVER: on_slot has run or is running; the
 *             // slot is the call's: start it, or release the slot.
 *
 * Exactly one of "withdrawn" and "handed over" happens to each WAIT, decided
 * under the bulkhead's lock; a slot is never lost or given twice. */

typedef struct resil_bulkhead_waiter resil_bulkhead_waiter;

/* Called once when a release hands the slot to a queued waiter: from now on
 * the slot is the waiter's (release it with resil_bulkhead_release). It runs
 * on the thread that called resil_bulkhead_release, inside that call, with
 * no bulkhead lock held. It must not block; it should only forward the news
 * (an event-loop caller wakes its loop and acts there). It may call any
 * bulkhead function, but releasing from inside it hands the slot to the
 * next waiter from inside the same release (recursion, one level per
 * waiter): forward instead. The library does not touch the waiter after
 * calling it, so the waiter may be freed from inside it. */
typedef void (*resil_bulkhead_ready_fn)(void *arg);

/* Creates a waiter for bh (allocated with bh's allocator; bh must outlive
 * it). A waiter serves one wait at a time and may be reused for the next
 * once it was handed a slot or withdrawn. Returns RESIL_OK, RESIL_EMISUSE
 * (NULL handle), RESIL_EINVAL (out NULL), RESIL_ENOMEM. Since 0.2. */
RESIL_API resil_status resil_bulkhead_waiter_new(resil_bulkhead *bh,
                                                 resil_bulkhead_waiter **out);
/* Frees a waiter. It should not be queued: a queued waiter is withdrawn
 * first (counted as withdrawn and rejected; its callback never runs), under
 * the bulkhead's lock, so a concurrent release either hands its slot to the
 * next waiter or has already handed it to this one (the slot is then the
 * caller's, its callback running or run). NULL is a no-op. Since 0.2. */
RESIL_API void resil_bulkhead_waiter_free(resil_bulkhead_waiter *w);

/* Takes a slot if one is free and nobody is queued, else queues w without
 * blocking. ctx may be NULL (no deadline, no token).
 * Returns RESIL_DECISION_GO: the caller holds a slot now; cb is never
 * called. RESIL_DECISION_WAIT: w is queued; cb(arg) will be called once,
 * on the releasing thread (see resil_bulkhead_ready_fn), when a slot is
 * handed to it, unless the caller withdraws it first with
 * resil_bulkhead_dequeue. *wait_ns (when wait_ns is not NULL) is how long
 * it may wait: min(max_wait_ns, remaining deadline of ctx), > 0. The
 * bulkhead keeps no timer: the caller withdraws the waiter when that time
 * has passed. RESIL_DECISION_DENY: nothing held, w not queued, cb never
 * called; *why RESIL_REASON_BULKHEAD_FULL (no slot and max_wait_ns 0, the
 * deadline has passed, or the queue holds max_queued waiters: counted as
 * rejected), RESIL_REASON_CANCELLED (ctx->cancel is set: counted as
 * rejected) or RESIL_REASON_LOCAL_ERROR (NULL handle, w or cb, a w of
 * another bulkhead or already queued, a ctx never passed through
 * resil_ctx_init(): nothing counted). why may be NULL; *why is
 * RESIL_REASON_OK on GO and WAIT. The GO path is the same compare-and-swap
 * as resil_bulkhead_try_acquire; queueing takes the bulkhead's lock.
 * Since 0.2. */
RESIL_API resil_decision resil_bulkhead_enqueue(resil_bulkhead *bh,
                                                const resil_ctx *ctx,
                                                resil_bulkhead_waiter *w,
                                                resil_bulkhead_ready_fn cb,
                                                void *arg, int64_t *wait_ns,
                                                resil_reason *why);

/* What resil_bulkhead_dequeue found. */
typedef enum resil_bh_dequeue_result {
  /* Misuse: NULL handle or waiter, a waiter of another bulkhead, or one
   * that was never queued. Nothing changed. */
  RESIL_BH_NOT_QUEUED = 0,
  /* The waiter was queued and is now removed: its callback will never run
   * and no slot is held (counted as withdrawn and rejected). Also the
   * answer to a second dequeue of a withdrawn waiter. */
  RESIL_BH_WITHDRAWN = 1,
  /* A release handed the slot over first: the caller holds it and must
   * release it (or use it). The callback has run or is running on the
   * releasing thread right now. */
  RESIL_BH_HANDED_OVER = 2
} resil_bh_dequeue_result;

/* Withdraws a queued waiter (its max wait expired, or the call was
 * cancelled). Race-free against a concurrent release: exactly one of
 * RESIL_BH_WITHDRAWN and RESIL_BH_HANDED_OVER is the waiter's fate, and
 * every later dequeue of it gives the same answer until it is queued
 * again. The answer is about the waiter's last enqueue that answered WAIT
 * (an enqueue answering GO or DENY leaves it as it was; a waiter never
 * queued gives RESIL_BH_NOT_QUEUED).
 * Takes the bulkhead's lock. Since 0.2. */
RESIL_API resil_bh_dequeue_result resil_bulkhead_dequeue(
    resil_bulkhead *bh, resil_bulkhead_waiter *w);

/* The configured max_wait_ns, for callers that time their own waits; 0 for
 * a NULL handle. Since 0.2. */
RESIL_API int64_t resil_bulkhead_max_wait_ns(const resil_bulkhead *bh);

/* The run form: resil_bulkhead_acquire, then fn(arg, ctx) with the caller's
 * ctx (a default ctx on the configured clock when NULL), then release,
 * whatever fn returned; fn's outcome is returned. No slot: REJECTED with
 * reason BULKHEAD_FULL, fn not called. Wait cancelled: NOT_SENT with reason
 * CANCELLED, fn not called. NULL handle, NULL fn or a ctx never passed
 * through resil_ctx_init(): NOT_SENT with reason LOCAL_ERROR.
 * When fn is itself time-limited (a resil_timelimiter_run inside), the slot
 * is returned when the limiter stops waiting, not when its task ends; put
 * the bulkhead inside the limiter to bound the tasks themselves. Since 0.1. */
RESIL_API resil_outcome resil_bulkhead_run(resil_bulkhead *bh,
                                           const resil_ctx *ctx,
                                           resil_call_fn fn, void *arg);

/* Free slots now, 0..max_concurrent; 0 for a NULL handle. Since 0.1. */
RESIL_API uint32_t resil_bulkhead_available(const resil_bulkhead *bh);

/* Reads the shared bulkhead `name` of seg (shared.h) without creating it:
 * its permits available now (*available) and max_concurrent (*max), either
 * may be NULL. Statuses as resil_ratelimiter_shared_peek. Since 0.2. */
RESIL_API resil_status resil_bulkhead_shared_peek(resil_shared *seg, const char *name,
                                                  uint32_t *available, uint32_t *max,
                                                  resil_error *err);

/* Fills *out up to the caller's struct size (a macro passing
 * sizeof(resil_bulkhead_metrics)). RESIL_OK, RESIL_EMISUSE (NULL handle),
 * RESIL_EINVAL (out NULL). Since 0.1. */
RESIL_API resil_status resil_bulkhead_get_metrics_sized(
    const resil_bulkhead *bh, resil_bulkhead_metrics *out, size_t struct_size);
#define resil_bulkhead_get_metrics(bh, out)                                    \
  resil_bulkhead_get_metrics_sized((bh), (out), sizeof(resil_bulkhead_metrics))

/* The instance name, owned by the bulkhead until it is freed; NULL for a
 * NULL handle. Since 0.1. */
RESIL_API const char *resil_bulkhead_name(const resil_bulkhead *bh);

/* ---- thread-pool bulkhead -------------------------------------------- */

typedef struct resil_threadpool resil_threadpool;
/* The result of one submitted call. Refcounted: the pool holds it until the
 * call has run, the caller until resil_future_free. */
typedef struct resil_future resil_future;

#define RESIL_THREADPOOL_MAX_THREADS 1024
#define RESIL_THREADPOOL_MAX_QUEUE 1000000

typedef struct resil_threadpool_config {
  /* Sized struct (version.h); set by resil_threadpool_config_init(). */
  size_t struct_size;
  /* Instance name, copied. Default "threadpool". */
  const char *name;
  /* Worker threads, 1..RESIL_THREADPOOL_MAX_THREADS, all started by
   * resil_threadpool_new and kept until resil_threadpool_free (a fixed
   * count: Resilience4j's core/max sizes with keep-alive are not
   * reproduced). Default: the number of online processors (Resilience4j's
   * maxThreadPoolSize default). */
  uint32_t threads;
  /* Calls that may wait for a worker, 0..RESIL_THREADPOOL_MAX_QUEUE. A call
   * is accepted when fewer than queue_capacity + (idle workers) calls are
   * waiting, so 0 means "accepted only when a worker is idle". Default 100
   * (Resilience4j). */
  uint32_t queue_capacity;
  /* NULL = malloc/free. Used by _new, _submit (one future per call) and the
   * _free functions; it must outlive every future of the pool. */
  const resil_allocator *alloc;
} resil_threadpool_config;

/* Counters since creation, and the current gauges, read together under the
 * pool's lock (one snapshot). */
typedef struct resil_threadpool_metrics {
  /* Sized struct (version.h): the bytes the library wrote. */
  size_t struct_size;
  uint32_t threads;
  uint32_t queue_capacity;
  uint32_t queue_depth; /* calls waiting for a worker now              */
  uint32_t active;      /* calls running now                           */
  uint32_t idle;        /* workers waiting for a call now              */
  uint64_t submitted;   /* calls accepted                              */
  uint64_t completed;   /* calls that ran to the end                   */
  uint64_t rejected;    /* calls refused: queue full                   */
} resil_threadpool_metrics;

/* Writes the documented defaults and struct_size. A macro passing
 * sizeof(resil_threadpool_config). NULL is a no-op. Since 0.1. */
RESIL_API void resil_threadpool_config_init_sized(resil_threadpool_config *cfg,
                                                  size_t struct_size);
#define resil_threadpool_config_init(cfg)                                      \
  resil_threadpool_config_init_sized((cfg), sizeof(resil_threadpool_config))

/* Validates cfg, creates the pool and starts its workers.
 * Returns RESIL_OK; RESIL_EINVAL for cfg or out NULL, a config never passed
 * through resil_threadpool_config_init() ("call
 * resil_threadpool_config_init()") or a field out of range (err says which
 * field, its range and the value received); RESIL_ENOMEM;
 * RESIL_ESYS when a thread, mutex or condition variable cannot be created
 * (workers already started are stopped). err may be NULL. *out is written
 * only on success. Since 0.1. */
RESIL_API resil_status resil_threadpool_new(const resil_threadpool_config *cfg,
                                            resil_threadpool **out,
                                            resil_error *err);

/* Stops accepting calls, DRAINS the queue (every accepted call runs, as Java's
 * ExecutorService.shutdown() that Resilience4j's ThreadPoolBulkhead.close()
 * uses), joins the workers and frees the pool. It blocks until the last call
 * ended. Futures stay valid until resil_future_free. NULL is a no-op. Needs
 * exclusive access: no submit may run at the same time. Since 0.1. */
RESIL_API void resil_threadpool_free(resil_threadpool *tp);

/* Queues fn(arg, ctx') to run on a worker, where ctx' is a copy of *ctx (a
 * default ctx when ctx is NULL) made now; the objects it points to
 * (ctx->cancel, ctx->clock, ctx->user) must stay valid until the call ends.
 * On RESIL_OK, *out (when out is not NULL) receives a future the caller
 * owns and must free with resil_future_free; pass out NULL to run the call
 * without a future.
 * Returns RESIL_OK; RESIL_EBUSY when the queue is full (the call is
 * rejected, counted, and will not run; the run form reports it as REJECTED
 * with reason QUEUE_FULL); RESIL_EINVAL (fn NULL, or a ctx never passed
 * through resil_ctx_init()); RESIL_ENOMEM; RESIL_ESYS; RESIL_EMISUSE (NULL
 * handle, or the pool is being freed). Since 0.1. */
RESIL_API resil_status resil_threadpool_submit(resil_threadpool *tp,
                                               const resil_ctx *ctx,
                                               resil_call_fn fn, void *arg,
                                               resil_future **out);

/* The run form: submit, then wait for the call to end (without limit: put a
 * resil_timelimiter around it, or use the pool as a time limiter's executor,
 * to bound the wait). Returns the call's outcome; REJECTED with reason
 * QUEUE_FULL when the queue is full; NOT_SENT with reason LOCAL_ERROR when
 * the call could not be queued (NULL handle, NULL fn, uninitialised ctx,
 * out of memory).
 * Since 0.1. */
RESIL_API resil_outcome resil_threadpool_run(resil_threadpool *tp,
                                             const resil_ctx *ctx,
                                             resil_call_fn fn, void *arg);

/* Fills *out up to the caller's struct size (a macro passing
 * sizeof(resil_threadpool_metrics)). RESIL_OK, RESIL_EMISUSE (NULL handle),
 * RESIL_EINVAL (out NULL). Since 0.1. */
RESIL_API resil_status resil_threadpool_get_metrics_sized(
    const resil_threadpool *tp, resil_threadpool_metrics *out,
    size_t struct_size);
#define resil_threadpool_get_metrics(tp, out)                                  \
  resil_threadpool_get_metrics_sized((tp), (out),                              \
                                     sizeof(resil_threadpool_metrics))

/* The instance name, owned by the pool until it is freed; NULL for a NULL
 * handle. Since 0.1. */
RESIL_API const char *resil_threadpool_name(const resil_threadpool *tp);

/* Waits until the call has ended, up to timeout_ns of real time (0 polls;
 * INT64_MAX waits without limit).
 * Returns RESIL_OK (ended: read resil_future_outcome), RESIL_ETIMEDOUT (not
 * yet), RESIL_EINVAL (timeout_ns < 0) or RESIL_EMISUSE (NULL handle).
 * Since 0.1. */
RESIL_API resil_status resil_future_wait_ns(resil_future *f, int64_t timeout_ns);

/* 1 when the call has ended, 0 otherwise (also for a NULL handle).
 * Since 0.1. */
RESIL_API int resil_future_done(const resil_future *f);

/* The call's outcome once it has ended; before that (or for a NULL
 * handle) UNKNOWN with reason NONE. Since 0.1. */
RESIL_API resil_outcome resil_future_outcome(const resil_future *f);

/* Drops the caller's reference. Safe whether or not the call has ended: a
 * call still queued or running keeps the future alive and it is freed when
 * the call ends. The call is not cancelled (cancel it through the token in
 * its ctx). NULL is a no-op. Must be called once per future, after any
 * wait on it has returned. Since 0.1. */
RESIL_API void resil_future_free(resil_future *f);

#ifdef __cplusplus
}
#endif
#endif
