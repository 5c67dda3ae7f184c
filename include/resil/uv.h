/* libresil-uv: a loop adapter (loop.h) over a libuv loop. Its own library
 * and pkg-config package: `pkg-config --cflags --libs resil-uv` (which
 * brings libuv and libresil). Since 0.2.
 *
 * The adapter keeps every rule of loop.h. How it maps onto libuv:
 *   - each watched fd is a uv_poll_t (uv_poll_init() makes the fd
 *     non-blocking). libuv allows one active poll handle per fd and loop:
 *     watching an fd that another adapter or handle on the same uv loop
 *     polls fails with EEXIST. When libuv reports an error on the fd it
 *     stops the poll handle; the adapter reports RESIL_IO_ERROR and starts
 *     it again, so the watch goes on until it is stopped (events 0), as on
 *     the built-in loop.
 *   - the one timer is a uv_timer_t; a delay is rounded up to whole
 *     milliseconds (libuv's resolution; never early). A delay of 0 runs in
 *     the loop's idle phase (a uv_idle_t), after the callback that armed it
 *     has returned: never from inside it, and a timer that keeps re-arming
 *     itself with delay 0 does not starve the fds (one run per uv_run
 *     pass). Armed from a uv timer callback it may run in the same uv_run
 *     pass, after the timers; armed anywhere else, in the next one.
 *   - wake is uv_async_send() on a uv_async_t (thread-safe, coalescing,
 *     never lost).
 *   - now_ns is uv_now() in nanoseconds: the loop's cached time, in whole
 *     milliseconds, updated by libuv once per pass. libuv measures its
 *     timers on it, so a delay computed as deadline - now_ns() ends at the
 *     deadline on that clock, and a timer callback never sees now_ns()
 *     below its arming time plus the delay. For durations inside one
 *     callback use a clock (clock.h), not now_ns.
 * The adapter's handles keep the uv loop alive (uv_run(UV_RUN_DEFAULT)
 * returns only after resil_uv_adapter_free()): a wake may come from another
 * thread at any time.
 *
 * libuv's own <uv.h>, included here, needs the POSIX types: a program
 * compiled in a strict ISO mode (-std=c11) defines _POSIX_C_SOURCE=200809L
 * (or uses -std=gnu11), as for any libuv program.
 *
 * Thread-safety: as loop.h: everything on the loop thread (the one running
 * uv_run on `loop`), except the adapter's wake. */
#ifndef RESIL_UV_H
#define RESIL_UV_H

#include <uv.h>

#include "alloc.h"
#include "loop.h"
#include "status.h"
#include "version.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A new adapter on `loop` (which must outlive it). alloc NULL = malloc/free.
 * Loop thread only. Returns RESIL_OK; RESIL_EINVAL (loop or out NULL);
 * RESIL_ENOMEM; RESIL_ESYS (libuv could not set up the async handle).
 * *out is valid until resil_uv_adapter_free(). Since 0.2. */
RESIL_API resil_status resil_uv_adapter_new(uv_loop_t *loop,
                                            const resil_allocator *alloc,
                                            resil_loop_adapter **out);
/* Stops every watch, the timer and the wake of the adapter: no callback of
 * it runs after this returns, and the adapter must not be used again (nor
 * woken from another thread). Closing uv handles is asynchronous: the
 * adapter's memory is released by their close callbacks, which libuv runs
 * on the loop's next pass, so run the loop (uv_run, any mode) after this
 * before uv_loop_close(), which returns UV_EBUSY until then. May be called
 * from inside one of the adapter's own callbacks. Loop thread only. NULL,
 * and an adapter not made by resil_uv_adapter_new(), are ignored.
 * Since 0.2. */
RESIL_API void resil_uv_adapter_free(resil_loop_adapter *a);

#ifdef __cplusplus
}
#endif
#endif
