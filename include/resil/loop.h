/* Event-loop adapters (DESIGN §9): the little libresil needs from the
 * application's loop to run calls without blocking a thread.
 *
 * A resil_loop_adapter is a table of four functions over somebody's loop:
 * watch an fd for read/write, stop watching, arm one timer, and wake the
 * loop from another thread. The async engine (and anything else in libresil
 * that waits) is driven only through it. Adapters ship for:
 *   - the built-in epoll + timerfd + eventfd loop below (resil_loop), for
 *     programs without a loop of their own (Linux);
 *   - libuv, in its own library libresil-uv (uv.h, resil-uv.pc).
 * Any other loop (libevent, an nginx-style worker, a hand-written poll())
 * can be adapted by filling the table.
 *
 * Rules every adapter keeps (and every user of one may rely on):
 *   - watch, timer and set_wake are called on the loop thread only; wake may
 *     be called from any thread, at any time between set_wake and the
 *     adapter's end.
 *   - Callbacks run on the loop thread, never from inside the adapter
 *     function that registered them (no re-entrancy: a timer armed with
 *     delay 0 fires on a later loop iteration; on libuv, armed from a uv
 *     timer callback, in the same uv_run pass after that callback has
 *     returned, see uv.h).
 *   - A callback may call any adapter function of the loop: watch, stop or
 *     replace any watch (its own included), arm or disarm any timer, free
 *     another adapter or its own. Nothing of a stopped watch or a freed
 *     adapter runs afterwards, not even an event already collected in the
 *     same iteration.
 *   - One watch per fd: a new watch of the same fd replaces events, cb and
 *     arg; events 0 stops watching (the fd is not closed). Stop watching an
 *     fd before closing it. An fd watched by another adapter of the same
 *     loop is refused (EEXIST).
 *   - A watch goes on reporting readiness while the fd stays ready (level
 *     triggered), RESIL_IO_ERROR included, until it is changed or stopped.
 *   - One timer per adapter, one-shot (it fires once per arming, never
 *     before its delay on now_ns): arming replaces the previous deadline
 *     and callback; a negative delay disarms it.
 *   - wake coalesces: several wakes before the loop runs the wake callback
 *     may run it once. A wake is never lost: every wake is followed by a
 *     run of the wake callback that starts after it.
 * Functions return 0, or -1 with errno set: EBADF (fd < 0), EINVAL (events
 * other than RESIL_IO_READ | RESIL_IO_WRITE, or a NULL cb to watch or arm),
 * EEXIST (see above), ENOMEM, or what the loop's system call gave (EPERM:
 * a regular file cannot be watched).
 *
 * Thread-safety: see the rules above; a resil_loop is driven by one thread
 * (the one calling resil_loop_run); resil_loop_stop and every adapter's
 * wake are thread-safe. */
#ifndef RESIL_LOOP_H
#define RESIL_LOOP_H

#include <stddef.h>
#include <stdint.h>

#include "alloc.h"
#include "status.h"
#include "version.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Events of a watch. */
#define RESIL_IO_READ 0x1u
#define RESIL_IO_WRITE 0x2u
/* Reported to a watch callback (never asked for): the fd has an error or a
 * hang-up; the callback should read or write to learn which. */
#define RESIL_IO_ERROR 0x4u

/* fd is ready for `events` (RESIL_IO_* bits; may include RESIL_IO_ERROR). */
typedef void (*resil_io_fn)(void *arg, int fd, unsigned events);
/* The adapter's timer fired, or a wake arrived. */
typedef void (*resil_loop_fn)(void *arg);

typedef struct resil_loop_adapter {
  /* sizeof(resil_loop_adapter) of the code that filled it (version.h). */
  size_t struct_size;
  /* The adapter's own state, passed to every function below. */
  void *self;
  /* Starts watching fd for `events` (RESIL_IO_READ | RESIL_IO_WRITE), changes
   * what is watched, or with events 0 stops watching it. */
  int (*watch)(void *self, int fd, unsigned events, resil_io_fn cb, void *arg);
  /* Arms the one timer: cb(arg) after delay_ns (0: on the next iteration);
   * replaces an armed timer; delay_ns < 0 disarms it. */
  int (*timer)(void *self, int64_t delay_ns, resil_loop_fn cb, void *arg);
  /* Sets what a wake runs on the loop thread (once, before any wake). */
  int (*set_wake)(void *self, resil_loop_fn cb, void *arg);
  /* From any thread: makes the loop run the wake callback soon. */
  int (*wake)(void *self);
  /* The loop's monotonic time in nanoseconds (what timers are measured
   * on); NULL means CLOCK_MONOTONIC. */
  int64_t (*now_ns)(void *self);
} resil_loop_adapter;

/* ---- the built-in loop: epoll + timerfd + eventfd (Linux) --------------- */

typedef struct resil_loop resil_loop;

/* Creates a loop. alloc NULL = malloc/free. Returns RESIL_OK, RESIL_EINVAL
 * (out NULL), RESIL_ENOMEM or RESIL_ESYS (epoll/timerfd/eventfd failed;
 * errno kept). Since 0.2. */
RESIL_API resil_status resil_loop_new(const resil_allocator *alloc,
                                      resil_loop **out);
/* Frees the loop, and with it any adapter of it not freed yet (whose
 * pointer is then invalid: free them first when something else holds
 * them). NULL is a no-op. Loop thread, outside the loop's callbacks.
 * Since 0.2. */
RESIL_API void resil_loop_free(resil_loop *loop);

/* A new adapter on the loop, with its own timer and wake callback; a loop
 * serves any number of them (one per engine, plus the application's own).
 * All its timers share the loop's one timerfd; now_ns is CLOCK_MONOTONIC.
 * Loop thread only. Returns RESIL_OK, RESIL_EINVAL (loop or out NULL),
 * RESIL_ENOMEM. *out is valid until resil_loop_adapter_free(). Since 0.2. */
RESIL_API resil_status resil_loop_adapter_new(resil_loop *loop,
                                              resil_loop_adapter **out);
/* Stops every watch and the timer of the adapter and frees it; a pending
 * wake of it is dropped. May be called from a callback of the loop. Loop
 * thread only. NULL, and an adapter not made by resil_loop_adapter_new(),
 * are ignored. Since 0.2. */
RESIL_API void resil_loop_adapter_free(resil_loop_adapter *a);

/* Runs the loop on the calling thread until resil_loop_stop() (returns
 * RESIL_OK) or a system failure (RESIL_ESYS); it does not return when
 * nothing is watched or armed. RESIL_EINVAL for NULL, RESIL_EMISUSE when
 * called from inside one of the loop's callbacks. Since 0.2. */
RESIL_API resil_status resil_loop_run(resil_loop *loop);
/* One iteration: waits at most timeout_ns (0: does not wait; < 0: waits
 * until something happens) and runs what became ready: the callbacks of
 * ready fds, then wakes, then due timers (earliest deadline first; the same
 * deadline in arming order). A timer armed during the iteration waits for
 * the next one. *ran (may be NULL) gets the number of callbacks run (0
 * when the wait ended with nothing to run, e.g. at the timeout or on a
 * signal). Returns RESIL_OK; RESIL_EINVAL (loop NULL); RESIL_EMISUSE
 * (called from inside one of the loop's callbacks); RESIL_ESYS (epoll or
 * the timerfd failed). Since 0.2. */
RESIL_API resil_status resil_loop_run_once(resil_loop *loop,
                                           int64_t timeout_ns, size_t *ran);
/* From any thread: makes resil_loop_run() return after the callbacks of
 * the current iteration. A stop while no resil_loop_run() is in progress
 * makes the next one return before it waits; it is used up by that return.
 * NULL is a no-op. Since 0.2. */
RESIL_API void resil_loop_stop(resil_loop *loop);

#ifdef __cplusplus
}
#endif
#endif
