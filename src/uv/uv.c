/* The libuv loop adapter (uv.h).
 *
 * Memory: a watch's uv_poll_t, and the adapter's timer, idle and async
 * handles, are closed with uv_close(); a handle's memory may be freed only
 * in its close callback. `closing` counts the handles whose close callback
 * has not run; the adapter itself is freed when it has been freed by the
 * caller and that count is 0. A watch is taken out of the fd table at once
 * when it stops, so a new watch of the same fd may start while the old
 * handle is still closing (libuv drops the old registration in
 * uv_poll_stop(), which uv_close() calls). */
#include "resil/uv.h"

#include <errno.h>

#include "core/internal.h"

typedef struct uv_adapter uv_adapter;

typedef struct uv_watch {
  uv_poll_t poll; /* first: the handle's address is the watch's */
  int fd;
  unsigned events;
  resil_io_fn cb;
  void *arg;
  uv_adapter *a;
} uv_watch;

struct uv_adapter {
  resil_loop_adapter pub; /* first: a resil_loop_adapter * is a uv_adapter * */
  uv_loop_t *loop;
  const resil_allocator *alloc;
  uv_timer_t timer;
  uv_idle_t idle; /* the timer when armed with delay 0 */
  uv_async_t async;
  resil_loop_fn timer_cb;
  void *timer_arg;
  resil_loop_fn wake_cb;
  void *wake_arg;
  uv_watch **fds; /* indexed by fd */
  size_t nfds;
  size_t closing; /* handles whose close callback has not run yet */
  int freed;
};

static int uvw_watch(void *self, int fd, unsigned events, resil_io_fn cb, void *arg);

static int fail(int uverr) {
  errno = -uverr; /* libuv's error codes are negated errno values on Unix */
  return -1;
}

static void release_if_done(uv_adapter *a) {
  if (!a->freed || a->closing) return;
  const resil_allocator *alloc = a->alloc;
  resil__free(alloc, a->fds);
  resil__free(alloc, a);
}

static void on_handle_closed(uv_handle_t *h) {
  uv_adapter *a = h->data;
  a->closing--;
  release_if_done(a);
}

static void on_watch_closed(uv_handle_t *h) {
  uv_watch *w = (uv_watch *)h;
  uv_adapter *a = w->a;
  resil__free(a->alloc, w);
  a->closing--;
  release_if_done(a);
}

static void watch_close(uv_adapter *a, uv_watch *w) {
  a->fds[w->fd] = NULL;
  a->closing++;
  uv_close((uv_handle_t *)&w->poll, on_watch_closed);
}

static int uv_bits(unsigned events) {
  int e = 0;
  if (events & RESIL_IO_READ) e |= UV_READABLE;
  if (events & RESIL_IO_WRITE) e |= UV_WRITABLE;
  return e;
}

static void on_poll(uv_poll_t *h, int status, int uvev) {
  uv_watch *w = (uv_watch *)h;
  uv_adapter *a = w->a;
  unsigned ev = 0;
  if (status < 0) {
    ev = RESIL_IO_ERROR; /* libuv has stopped the handle */
  } else {
    if (uvev & UV_READABLE) ev |= RESIL_IO_READ;
    if (uvev & UV_WRITABLE) ev |= RESIL_IO_WRITE;
    ev &= w->events;
    if (uvev & UV_DISCONNECT) ev |= RESIL_IO_ERROR;
  }
  if (ev) w->cb(w->arg, w->fd, ev);
  /* Still this watch (not stopped, replaced or freed in the callback) and
   * stopped by libuv after an error: go on watching, as loop.h says. w is
   * valid here: a closing handle's memory is freed only later, in its
   * close callback. */
  if (!a->freed && (size_t)w->fd < a->nfds && a->fds[w->fd] == w &&
      !uv_is_active((uv_handle_t *)&w->poll))
    uv_poll_start(&w->poll, uv_bits(w->events), on_poll);
}

static int uvw_watch(void *self, int fd, unsigned events, resil_io_fn cb, void *arg) {
  uv_adapter *a = self;
  if (fd < 0) {
    errno = EBADF;
    return -1;
  }
  if ((events & ~(RESIL_IO_READ | RESIL_IO_WRITE)) || (events && !cb)) {
    errno = EINVAL;
    return -1;
  }
  uv_watch *w = (size_t)fd < a->nfds ? a->fds[fd] : NULL;
  if (events == 0) {
    if (w) watch_close(a, w);
    return 0;
  }
  if (w) { /* replace; start again even for the same events (see on_poll) */
    int r = uv_poll_start(&w->poll, uv_bits(events), on_poll);
    if (r < 0) return fail(r);
    w->events = events;
    w->cb = cb;
    w->arg = arg;
    return 0;
  }
  uv_watch **v = resil__grow_zeroed(a->alloc, a->fds, &a->nfds, sizeof *v, (size_t)fd);
  if (!v) return fail(UV_ENOMEM);
  a->fds = v;
  w = resil__calloc(a->alloc, sizeof *w);
  if (!w) return fail(UV_ENOMEM);
  int r = uv_poll_init(a->loop, &w->poll, fd);
  if (r < 0) { /* not initialised: no close needed */
    resil__free(a->alloc, w);
    return fail(r);
  }
  w->fd = fd;
  w->events = events;
  w->cb = cb;
  w->arg = arg;
  w->a = a;
  a->fds[fd] = w;
  r = uv_poll_start(&w->poll, uv_bits(events), on_poll);
  if (r < 0) {
    watch_close(a, w);
    return fail(r);
  }
  return 0;
}

static void on_timer(uv_timer_t *h) {
  uv_adapter *a = h->data;
  a->timer_cb(a->timer_arg);
}

static void on_idle(uv_idle_t *h) {
  uv_adapter *a = h->data;
  uv_idle_stop(&a->idle); /* one shot, like the timer */
  a->timer_cb(a->timer_arg);
}

static int uvw_timer(void *self, int64_t delay_ns, resil_loop_fn cb, void *arg) {
  uv_adapter *a = self;
  if (delay_ns < 0) {
    uv_timer_stop(&a->timer);
    uv_idle_stop(&a->idle);
    return 0;
  }
  if (!cb) {
    errno = EINVAL;
    return -1;
  }
  a->timer_cb = cb;
  a->timer_arg = arg;
  if (delay_ns == 0) {
    uv_timer_stop(&a->timer);
    int r = uv_idle_start(&a->idle, on_idle);
    return r < 0 ? fail(r) : 0;
  }
  uv_idle_stop(&a->idle);
  uint64_t ms = (uint64_t)(delay_ns / RESIL_NS_PER_MS) + (delay_ns % RESIL_NS_PER_MS != 0);
  int r = uv_timer_start(&a->timer, on_timer, ms, 0);
  return r < 0 ? fail(r) : 0;
}

static void on_async(uv_async_t *h) {
  uv_adapter *a = h->data;
  if (a->wake_cb) a->wake_cb(a->wake_arg);
}

static int uvw_set_wake(void *self, resil_loop_fn cb, void *arg) {
  uv_adapter *a = self;
  a->wake_cb = cb;
  a->wake_arg = arg;
  return 0;
}

static int uvw_wake(void *self) {
  uv_adapter *a = self;
  int r = uv_async_send(&a->async);
  return r < 0 ? fail(r) : 0;
}

static int64_t uvw_now(void *self) {
  uv_adapter *a = self;
  return (int64_t)uv_now(a->loop) * RESIL_NS_PER_MS;
}

resil_status resil_uv_adapter_new(uv_loop_t *loop, const resil_allocator *alloc,
                                  resil_loop_adapter **out) {
  if (!out) return RESIL_EINVAL;
  *out = NULL;
  if (!loop) return RESIL_EINVAL;
  uv_adapter *a = resil__calloc(alloc, sizeof *a);
  if (!a) return RESIL_ENOMEM;
  a->pub.struct_size = sizeof a->pub;
  a->pub.self = a;
  a->pub.watch = uvw_watch;
  a->pub.timer = uvw_timer;
  a->pub.set_wake = uvw_set_wake;
  a->pub.wake = uvw_wake;
  a->pub.now_ns = uvw_now;
  a->loop = loop;
  a->alloc = alloc;
  /* The async handle first: it is the one whose init can fail, and a
   * handle whose init failed needs no close. */
  if (uv_async_init(loop, &a->async, on_async) != 0) {
    resil__free(alloc, a);
    return RESIL_ESYS;
  }
  uv_timer_init(loop, &a->timer);
  uv_idle_init(loop, &a->idle);
  a->async.data = a->timer.data = a->idle.data = a;
  *out = &a->pub;
  return RESIL_OK;
}

void resil_uv_adapter_free(resil_loop_adapter *pub) {
  /* Only adapters made by resil_uv_adapter_new() have this watch. */
  if (!pub || pub->watch != uvw_watch) return;
  uv_adapter *a = (uv_adapter *)pub;
  a->freed = 1;
  for (size_t fd = 0; fd < a->nfds; fd++)
    if (a->fds[fd]) watch_close(a, a->fds[fd]);
  a->closing += 3;
  uv_close((uv_handle_t *)&a->timer, on_handle_closed);
  uv_close((uv_handle_t *)&a->idle, on_handle_closed);
  uv_close((uv_handle_t *)&a->async, on_handle_closed);
}
