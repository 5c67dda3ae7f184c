/* The built-in loop (loop.h): one epoll set, one timerfd, one eventfd.
 *
 * Every adapter's timer lives in one timer heap (core/timerheap.h); the
 * timerfd is set to the earliest deadline (or to run_once's timeout, when
 * that is earlier) before the loop waits, so epoll_wait itself never needs
 * a timeout. Wakes and resil_loop_stop() write the eventfd.
 *
 * Iteration safety: an epoll event carries the fd and the generation of the
 * watch it was registered for, not a pointer. The watch is looked up again
 * just before its callback runs, so a callback may unwatch (free) or
 * replace any watch, its own included, and a stale event for a watch that
 * was removed (or removed and added again) in the same iteration is
 * dropped. Timers armed during an iteration carry a heap sequence number
 * above the one taken when the iteration started and wait for the next
 * iteration. The wake scan walks the adapters with a cursor that
 * resil_loop_adapter_free() moves past an adapter it frees. */

#include "resil/loop.h"

#include <errno.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#include "core/internal.h"
#include "core/timerheap.h"

#define LOOP_MAX_EVENTS 256
/* Generation 0 marks the loop's own eventfd and timerfd. */
#define LOOP_GEN_OWN 0u

typedef struct loop_adapter loop_adapter;

typedef struct loop_watch {
  int fd;
  unsigned events;
  uint32_t gen;
  resil_io_fn cb;
  void *arg;
  loop_adapter *owner;
  struct loop_watch *prev, *next; /* the owner's watches */
} loop_watch;

struct loop_adapter {
  resil_loop_adapter pub; /* first: a resil_loop_adapter * is a loop_adapter * */
  resil_loop *loop;
  resil__timer timer; /* cb and arg are the caller's */
  resil_loop_fn wake_cb;
  void *wake_arg;
  atomic_int wake_pending;
  loop_watch *watches;
  loop_adapter *prev, *next; /* the loop's adapters */
};

struct resil_loop {
  const resil_allocator *alloc;
  int epfd, tfd, efd;
  int64_t tfd_at; /* deadline the timerfd is set to; -1: disarmed */
  resil__timerheap heap;
  loop_watch **fds; /* indexed by fd */
  size_t nfds;
  uint32_t gen;
  loop_adapter *adapters;
  loop_adapter *cursor; /* next adapter of the wake scan */
  int depth;            /* 1 while an iteration runs callbacks */
  atomic_int stop;
  struct epoll_event evs[LOOP_MAX_EVENTS];
};

static int64_t mono_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * RESIL_NS_PER_S + ts.tv_nsec;
}

static uint64_t ev_data(uint32_t gen, int fd) {
  return ((uint64_t)gen << 32) | (uint32_t)fd;
}

/* ---- adapter functions ----------------------------------------------------- */

static int lw_watch(void *self, int fd, unsigned events, resil_io_fn cb, void *arg);

static int64_t lw_now(void *self) {
  (void)self;
  return mono_ns();
}

static loop_watch *watch_of(const resil_loop *l, int fd) {
  return (size_t)fd < l->nfds ? l->fds[fd] : NULL;
}

static void watch_remove(resil_loop *l, loop_watch *w) {
  /* ENOENT/EBADF: the fd was closed while watched (the kernel dropped it). */
  epoll_ctl(l->epfd, EPOLL_CTL_DEL, w->fd, NULL);
  l->fds[w->fd] = NULL;
  loop_adapter *a = w->owner;
  if (w->prev) w->prev->next = w->next;
  else a->watches = w->next;
  if (w->next) w->next->prev = w->prev;
  resil__free(l->alloc, w);
}

static uint32_t epoll_bits(unsigned events) {
  uint32_t e = 0;
  if (events & RESIL_IO_READ) e |= EPOLLIN;
  if (events & RESIL_IO_WRITE) e |= EPOLLOUT;
  return e;
}

static int lw_watch(void *self, int fd, unsigned events, resil_io_fn cb, void *arg) {
  loop_adapter *a = self;
  resil_loop *l = a->loop;
  if (fd < 0) {
    errno = EBADF;
    return -1;
  }
  if ((events & ~(RESIL_IO_READ | RESIL_IO_WRITE)) || (events && !cb)) {
    errno = EINVAL;
    return -1;
  }
  if (fd == l->epfd || fd == l->tfd || fd == l->efd) {
    errno = EEXIST; /* the loop's own */
    return -1;
  }
  loop_watch *w = watch_of(l, fd);
  if (w && w->owner != a) {
    errno = EEXIST; /* another adapter of this loop watches it */
    return -1;
  }
  if (events == 0) {
    if (w) watch_remove(l, w);
    return 0;
  }
  struct epoll_event ev;
  memset(&ev, 0, sizeof ev);
  ev.events = epoll_bits(events);
  if (w) { /* replace */
    ev.data.u64 = ev_data(w->gen, fd);
    if (epoll_bits(w->events) != ev.events &&
        epoll_ctl(l->epfd, EPOLL_CTL_MOD, fd, &ev) != 0) {
      /* ENOENT: the fd was closed and its number reused without an
       * unwatch; register the new one. */
      if (errno != ENOENT || epoll_ctl(l->epfd, EPOLL_CTL_ADD, fd, &ev) != 0)
        return -1;
    }
    w->events = events;
    w->cb = cb;
    w->arg = arg;
    return 0;
  }
  loop_watch **v = resil__grow_zeroed(l->alloc, l->fds, &l->nfds, sizeof *v, (size_t)fd);
  if (!v) {
    errno = ENOMEM;
    return -1;
  }
  l->fds = v;
  w = resil__calloc(l->alloc, sizeof *w);
  if (!w) {
    errno = ENOMEM;
    return -1;
  }
  if (++l->gen == LOOP_GEN_OWN) ++l->gen;
  w->gen = l->gen;
  w->fd = fd;
  ev.data.u64 = ev_data(w->gen, fd);
  if (epoll_ctl(l->epfd, EPOLL_CTL_ADD, fd, &ev) != 0) {
    int e = errno;
    /* EEXIST: still registered from an fd closed without an unwatch while a
     * duplicate kept it open; take the registration over. */
    if (e != EEXIST || epoll_ctl(l->epfd, EPOLL_CTL_MOD, fd, &ev) != 0) {
      resil__free(l->alloc, w);
      errno = e;
      return -1;
    }
  }
  w->events = events;
  w->cb = cb;
  w->arg = arg;
  w->owner = a;
  w->next = a->watches;
  if (a->watches) a->watches->prev = w;
  a->watches = w;
  l->fds[fd] = w;
  return 0;
}

static int lw_timer(void *self, int64_t delay_ns, resil_loop_fn cb, void *arg) {
  loop_adapter *a = self;
  resil_loop *l = a->loop;
  if (delay_ns < 0) {
    resil__timerheap_disarm(&l->heap, &a->timer);
    return 0;
  }
  if (!cb) {
    errno = EINVAL;
    return -1;
  }
  a->timer.cb = cb;
  a->timer.arg = arg;
  if (resil__timerheap_arm(&l->heap, &a->timer, resil__sat_add(mono_ns(), delay_ns)) != 0) {
    errno = ENOMEM;
    return -1;
  }
  return 0;
}

static int lw_set_wake(void *self, resil_loop_fn cb, void *arg) {
  loop_adapter *a = self;
  a->wake_cb = cb;
  a->wake_arg = arg;
  return 0;
}

static void poke(resil_loop *l) {
  uint64_t one = 1;
  /* EAGAIN (the counter is at its maximum) still leaves the fd readable. */
  ssize_t r = write(l->efd, &one, sizeof one);
  (void)r;
}

static int lw_wake(void *self) {
  loop_adapter *a = self;
  /* The first wake since the loop last looked writes the eventfd; the loop
   * clears the flag before it runs the callback, so a wake that comes
   * later writes again (never lost). */
  if (!atomic_exchange_explicit(&a->wake_pending, 1, memory_order_acq_rel)) poke(a->loop);
  return 0;
}

/* ---- loop ---------------------------------------------------------------- */

resil_status resil_loop_new(const resil_allocator *alloc, resil_loop **out) {
  if (!out) return RESIL_EINVAL;
  *out = NULL;
  resil_loop *l = resil__calloc(alloc, sizeof *l);
  if (!l) return RESIL_ENOMEM;
  l->alloc = alloc;
  l->tfd_at = -1;
  l->efd = l->tfd = -1;
  atomic_init(&l->stop, 0);
  resil__timerheap_init(&l->heap, alloc);
  l->epfd = epoll_create1(EPOLL_CLOEXEC);
  if (l->epfd < 0) goto fail;
  l->tfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
  if (l->tfd < 0) goto fail;
  l->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (l->efd < 0) goto fail;
  struct epoll_event ev;
  memset(&ev, 0, sizeof ev);
  ev.events = EPOLLIN;
  ev.data.u64 = ev_data(LOOP_GEN_OWN, l->tfd);
  if (epoll_ctl(l->epfd, EPOLL_CTL_ADD, l->tfd, &ev) != 0) goto fail;
  ev.data.u64 = ev_data(LOOP_GEN_OWN, l->efd);
  if (epoll_ctl(l->epfd, EPOLL_CTL_ADD, l->efd, &ev) != 0) goto fail;
  *out = l;
  return RESIL_OK;
fail:;
  int e = errno;
  if (l->efd >= 0) close(l->efd);
  if (l->tfd >= 0) close(l->tfd);
  if (l->epfd >= 0) close(l->epfd);
  resil__free(alloc, l);
  errno = e;
  return RESIL_ESYS;
}

void resil_loop_free(resil_loop *l) {
  if (!l) return;
  while (l->adapters) resil_loop_adapter_free(&l->adapters->pub);
  resil__timerheap_free(&l->heap);
  resil__free(l->alloc, l->fds);
  close(l->efd);
  close(l->tfd);
  close(l->epfd);
  resil__free(l->alloc, l);
}

resil_status resil_loop_adapter_new(resil_loop *l, resil_loop_adapter **out) {
  if (!out) return RESIL_EINVAL;
  *out = NULL;
  if (!l) return RESIL_EINVAL;
  loop_adapter *a = resil__calloc(l->alloc, sizeof *a);
  if (!a) return RESIL_ENOMEM;
  a->pub.struct_size = sizeof a->pub;
  a->pub.self = a;
  a->pub.watch = lw_watch;
  a->pub.timer = lw_timer;
  a->pub.set_wake = lw_set_wake;
  a->pub.wake = lw_wake;
  a->pub.now_ns = lw_now;
  a->loop = l;
  atomic_init(&a->wake_pending, 0);
  a->next = l->adapters;
  if (l->adapters) l->adapters->prev = a;
  l->adapters = a;
  *out = &a->pub;
  return RESIL_OK;
}

void resil_loop_adapter_free(resil_loop_adapter *pub) {
  /* Only adapters made by resil_loop_adapter_new() have this watch. */
  if (!pub || pub->watch != lw_watch) return;
  loop_adapter *a = (loop_adapter *)pub;
  resil_loop *l = a->loop;
  while (a->watches) watch_remove(l, a->watches);
  resil__timerheap_disarm(&l->heap, &a->timer);
  if (l->cursor == a) l->cursor = a->next;
  if (a->prev) a->prev->next = a->next;
  else l->adapters = a->next;
  if (a->next) a->next->prev = a->prev;
  resil__free(l->alloc, a);
}

/* Sets the timerfd to `at` (absolute, CLOCK_MONOTONIC; -1 disarms) unless it
 * is set there already. A deadline in the past fires at once. */
static int tfd_set(resil_loop *l, int64_t at) {
  if (at == l->tfd_at) return 0;
  struct itimerspec its;
  memset(&its, 0, sizeof its);
  if (at >= 0) {
    if (at < 1) at = 1; /* an all-zero it_value would disarm */
    its.it_value.tv_sec = (time_t)(at / RESIL_NS_PER_S);
    its.it_value.tv_nsec = (long)(at % RESIL_NS_PER_S);
  }
  if (timerfd_settime(l->tfd, TFD_TIMER_ABSTIME, &its, NULL) != 0) return -1;
  l->tfd_at = at;
  return 0;
}

static unsigned io_events(uint32_t e, unsigned watched) {
  unsigned ev = 0;
  if (e & (EPOLLIN | EPOLLPRI | EPOLLRDHUP)) ev |= RESIL_IO_READ;
  if (e & EPOLLOUT) ev |= RESIL_IO_WRITE;
  ev &= watched;
  if (e & (EPOLLERR | EPOLLHUP)) ev |= RESIL_IO_ERROR;
  return ev;
}

/* One iteration: wait (timeout_ns as in resil_loop_run_once), then ready
 * fds, then wakes, then due timers. */
static resil_status iterate(resil_loop *l, int64_t timeout_ns, size_t *ran_out) {
  size_t ran = 0;
  const resil__timer *first = resil__timerheap_first(&l->heap);
  int64_t at = first ? first->at_ns : -1;
  if (timeout_ns > 0) {
    int64_t until = resil__sat_add(mono_ns(), timeout_ns);
    if (at < 0 || until < at) at = until;
  }
  if (timeout_ns != 0 && tfd_set(l, at) != 0) return RESIL_ESYS;
  int n = epoll_wait(l->epfd, l->evs, LOOP_MAX_EVENTS, timeout_ns == 0 ? 0 : -1);
  if (n < 0) {
    if (errno != EINTR) return RESIL_ESYS;
    n = 0;
  }
  int64_t now = mono_ns();
  uint64_t seq = l->heap.seq; /* timers armed from here on wait */
  int woken = 0;
  l->depth = 1;
  for (int i = 0; i < n; i++) {
    uint64_t d = l->evs[i].data.u64;
    int fd = (int)(uint32_t)d;
    uint32_t gen = (uint32_t)(d >> 32);
    if (gen == LOOP_GEN_OWN) {
      uint64_t count;
      ssize_t r = read(fd, &count, sizeof count); /* clears it */
      (void)r;
      if (fd == l->efd) woken = 1;
      else l->tfd_at = -1; /* a one-shot timerfd that fired is disarmed */
      continue;
    }
    loop_watch *w = watch_of(l, fd);
    if (!w || w->gen != gen) continue; /* removed during this iteration */
    unsigned ev = io_events(l->evs[i].events, w->events);
    if (!ev) continue;
    w->cb(w->arg, fd, ev);
    ran++;
  }
  if (woken) {
    for (loop_adapter *a = l->adapters; a; a = l->cursor) {
      l->cursor = a->next;
      if (atomic_exchange_explicit(&a->wake_pending, 0, memory_order_acq_rel) && a->wake_cb) {
        a->wake_cb(a->wake_arg);
        ran++;
      }
    }
    l->cursor = NULL;
  }
  for (;;) {
    /* A timer armed (or re-armed) during this iteration has seq > seq and a
     * deadline at or after now: when it is first, every older due timer
     * has run. */
    resil__timer *t = resil__timerheap_first(&l->heap);
    if (!t || t->at_ns > now || t->seq > seq) break;
    resil__timerheap_disarm(&l->heap, t);
    t->cb(t->arg);
    ran++;
  }
  l->depth = 0;
  if (ran_out) *ran_out = ran;
  return RESIL_OK;
}

resil_status resil_loop_run_once(resil_loop *l, int64_t timeout_ns, size_t *ran) {
  if (ran) *ran = 0;
  if (!l) return RESIL_EINVAL;
  if (l->depth) return RESIL_EMISUSE;
  return iterate(l, timeout_ns, ran);
}

resil_status resil_loop_run(resil_loop *l) {
  if (!l) return RESIL_EINVAL;
  if (l->depth) return RESIL_EMISUSE;
  for (;;) {
    if (atomic_exchange_explicit(&l->stop, 0, memory_order_acq_rel)) return RESIL_OK;
    resil_status st = iterate(l, -1, NULL);
    if (st != RESIL_OK) return st;
  }
}

void resil_loop_stop(resil_loop *l) {
  if (!l) return;
  atomic_store_explicit(&l->stop, 1, memory_order_release);
  poke(l);
}
