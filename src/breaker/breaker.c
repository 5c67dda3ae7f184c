/* Circuit breaker (DESIGN §2.2). The public contract is in
 * include/resil/breaker.h; this file explains how it is kept.
 *
 * Concurrency model:
 *   - `word` packs the state (low 3 bits) and the generation (the rest) in
 *     one atomic. Acquire in CLOSED, DISABLED and METRICS_ONLY is a single
 *     load of it and nothing else, no lock and no clock.
 *   - Everything else (window, totals, HALF_OPEN permits, event ring,
 *     listener list) is guarded by `lock`, a test-and-test-and-set
 *     spinlock: a record holds it for a few dozen instructions, so spinning
 *     beats sleeping (a pthread mutex, which needs a second atomic to
 *     unlock, measured at about half the throughput with one thread and
 *     with two). Waiters back off exponentially and, after a bound, yield
 *     in case the holder was preempted. `word` is written only with the
 *     lock held, so a transition and its window change are one step for
 *     every other locked reader.
 *   - `word` sits 64 bytes before `lock` and the counters it guards (see
 *     br_state), so the stores of the record path never invalidate the
 *     cache line the acquire path reads.
 *   - The state (br_state and the windows' storage) is reached through
 *     br->s: the handle's own block, or a shared segment's slot (DESIGN
 *     §8.1, cfg.shared), where every process runs this same code on it. A
 *     shared lock holds its holder's owner word (pid and start time) so a
 *     waiter can tell a dead holder, take the lock over and repair the
 *     state (repair); listener delivery stays outside the lock.
 *   - Events are collected while the lock is held (into the ring and into a
 *     per-call buffer) and delivered to listeners after it is released, on
 *     the calling thread, from a snapshot of the listener list.
 *   - Clock readings are taken only where needed (never by a CLOSED acquire
 *     or a count-window record that reaches no threshold); a chain enters
 *     a breaker layer through resil__breaker_enter/_leave (breaker_int.h),
 *     and hands the reading enter takes before the call to a rate limiter
 *     right below it. */
#define _GNU_SOURCE /* madvise, MAP_ANONYMOUS, MADV_WIPEONFORK */
#include <math.h>
#include <sched.h>
#include <sys/mman.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "core/internal.h"
#include "core/ramp.h"
#include "core/window.h"
#include "breaker/breaker_int.h"
#include "resil/breaker.h"
#include "shared/shared_int.h"

#if defined(__GNUC__)
#define RESIL_NOINLINE __attribute__((noinline))
#define RESIL_ALWAYS_INLINE inline __attribute__((always_inline))
#else
#define RESIL_NOINLINE
#define RESIL_ALWAYS_INLINE inline
#endif

/* Spinlock tuning, measured with two threads pinned to two cores hammering
 * one breaker. The lock is held for about ten nanoseconds and a pause
 * instruction costs 10-40 ns. Every look at the lock pulls its cache line
 * away from the holder, and every handoff moves the record path's lines
 * between cores, so total throughput is best when the holder keeps the
 * lock for long runs: a waiter first waits LOCK_MIN_DELAY pauses (about a
 * microsecond), doubles that up to LOCK_MAX_DELAY, and after
 * LOCK_LOOKS_BEFORE_YIELD looks (tens of microseconds: the holder was
 * probably preempted) yields the processor. Starting at 4 pauses instead
 * gave less than half the two-thread throughput. The added latency under
 * contention is microseconds, small against any remote call. */
#define LOCK_MIN_DELAY 64u
#define LOCK_MAX_DELAY 256u
#define LOCK_LOOKS_BEFORE_YIELD 16u

#define STATE_BITS 3u
/* resil_breaker.modes */
#define MODE_HALF_TO_CLOSED 1u /* HALF_OPEN maximum wait leads to CLOSED */
#define MODE_RAMP 2u           /* a ramp is configured (br_ramp follows) */
/* States that permit every call without a lock, as a bit set. */
#define ALWAYS_PERMITS                                                         \
  ((1u << RESIL_BREAKER_CLOSED) | (1u << RESIL_BREAKER_DISABLED) |             \
   (1u << RESIL_BREAKER_METRICS_ONLY))
#define STATE_MASK 7u
/* A CLOSED breaker that is ramping (DESIGN §2.9; breaker.h "Ramp"): an
 * internal state, reported as CLOSED everywhere. It is not in
 * ALWAYS_PERMITS, so the acquire fast path sends it to acquire_slow with
 * no instruction added for a breaker that never ramps, where its
 * lock-free decision is made (acquire_other); the inline record path takes
 * a ramping CLOSED's successes as CLOSED's (record_clean). */
#define ST_RAMP ((resil_breaker_state_kind)6)

/* Events one operation can produce after its time-driven catch-up: a reset
 * gives a TRANSITION and a RESET; an acquire, a record or a manual
 * transition at most one. The catch-up stops early to leave them room,
 * delivers what it has and goes on (at most RESIL_BREAKER_MAX_CATCHUP
 * transitions in one call). */
#define EVBUF_CAP 10u
/* A reset may end a ramp too (RAMP_ENDED, TRANSITION, RESET); a catch-up
 * step emits at most two events (HALF_OPEN -> CLOSED and RAMP_STARTED). */
#define EVBUF_RESERVE 3u
#define EVBUF_STEP 2u

#define DEFAULT_NAME "breaker"
#define NAME_MAX_LEN 255u

/* The event ring stores events in 16 bytes; the sequence number is derived
 * from the slot and the total count, so it is not stored. */
typedef struct packed_event {
  int64_t time_ns;
  uint8_t kind;
  uint8_t from;
  uint8_t to;
  uint8_t cause;
  uint32_t share; /* ramp_share in 1.31 fixed point (SHARE_ONE: 1.0) */
} packed_event;
#define SHARE_ONE (UINT32_C(1) << 31)

typedef struct listener {
  resil_breaker_listener_fn fn;
  void *user;
} listener;

/* Events produced under the lock by one operation, and the listeners that
 * will receive them, copied before the lock is released. */
typedef struct evbuf {
  unsigned n;
  unsigned nl;
  unsigned phase;
  unsigned catchup; /* time-driven transitions applied in this call */
  resil_breaker_event ev[EVBUF_CAP];
  listener ls[RESIL_BREAKER_MAX_LISTENERS];
} evbuf;

/* The state the breaker's rules change: in the handle (`own`), or in the
 * slot of a shared segment (DESIGN §8.1), where every process that shares
 * the breaker runs the same code on it. The first line holds `word` and
 * what only transitions write; `lock` starts the second, followed by what
 * every record writes (and, in the handle, by the main window's slots).
 * The first RESIL__SHARED_INIT_WORDS words are everything a new state
 * needs besides zeros (a shared slot is created from them).
 *
 * `win.store` is an address: in a segment each process maps the slot
 * elsewhere, so whoever takes the lock points it at its own mapping
 * (fix_store) before using the window. */
typedef struct br_state {
  _Atomic uint64_t word; /* state | generation << STATE_BITS */
  int64_t since_ns;      /* when the current state began */
  int64_t cur_wait_ns;   /* wait of the current (or last) OPEN */
  /* The configured series' wait for `opens` (cur_wait_ns differs only for
   * an OPEN entered by resil_breaker_open_for). */
  int64_t series_wait_ns;
  uint32_t opens;     /* consecutive OPENs, as Resilience4j counts them */
  uint32_t exceeded;  /* METRICS_ONLY: excursion already reported */
  uint32_t half_left; /* HALF_OPEN permits not handed out */
  uint32_t unused_;
  uint64_t t_ignored;
  uint64_t t_not_permitted;
  /* ---- under the lock, written by every record. 0: free; otherwise the
   * holder: 1 in a handle, the owner word of the holding process
   * (resil__shared_owner_self) in a segment. */
  _Atomic uint64_t lock;
  resil__window win;
  uint64_t t_calls; /* successes = t_calls - t_failures */
  uint64_t t_failures;
  uint64_t t_slow;
  uint64_t t_slow_failures;
  uint64_t t_transitions;
} br_state;

/* The ramp's area (DESIGN §2.9), present only when a ramp is configured
 * (MODE_RAMP), so that a breaker without one is not a byte larger: right
 * after the state, before the windows' storage, in the handle's block and
 * in a shared slot alike (ramp_state). Its first half is state: written
 * under the lock when a ramp starts, read and added to without it by every
 * acquire while ramping (ramp_admit); zero in a new shared slot. Its second
 * half is the configuration, read from the handle's own block (ramp_cfg);
 * in a slot those words are unused (each process has its copy). */
typedef struct br_ramp {
  _Atomic int64_t start;       /* the ramp's first instant */
  _Atomic uint64_t acc;        /* shares summed, 32.32 fixed point */
  _Atomic uint64_t t_rejected; /* calls the ramps refused (monotonic) */
  resil__ramp_curve c;         /* ramp_duration_ns, min share, aggression */
  /* How an acquire reads the time into the ramp: RAMP_PRECISE, or the
   * coarse reading when its resolution is at most 1 % of the ramp (the
   * share it gives is then at most 1 % of the ramp late): RAMP_COARSE
   * through the clock, RAMP_SYS_COARSE the system clock's inline. */
  int64_t read;
} br_ramp;
enum { RAMP_PRECISE = 0, RAMP_COARSE = 1, RAMP_SYS_COARSE = 2 };

_Static_assert(offsetof(br_state, lock) == 64, "word and lock on two lines");
_Static_assert(sizeof(resil__window) == 64 && offsetof(resil__window, store) == 56,
               "the window's address is its last word");
_Static_assert(offsetof(br_state, win) + offsetof(resil__window, store) ==
                   RESIL__SHARED_INIT_WORDS * sizeof(uint64_t),
               "a new state is its first RESIL__SHARED_INIT_WORDS words");
_Static_assert(sizeof(br_state) % 8 == 0, "window slots follow it");

/* The window storage follows the state: in the handle's block (`own` is
 * the handle's last member) and in a shared slot alike. */
#define STORE_OFF sizeof(br_state)
#define SHARED_STORE_BYTES                                                     \
  (RESIL__SHARED_STATE_WORDS * sizeof(uint64_t) - STORE_OFF)
/* What a configured ramp takes of the storage after the state. */
#define RAMP_BYTES sizeof(br_ramp)
_Static_assert(sizeof(br_ramp) % 8 == 0, "window slots follow it");

/* A shared breaker's lock token, in a page the kernel empties in a forked
 * child (MADV_WIPEONFORK): 0 there means "not computed in this process". */
typedef struct br_token {
  _Atomic uint64_t token;
} br_token;

/* What a shared handle needs besides the config: it lives where the
 * handle's own state would (a shared handle does not use it), which keeps
 * an in-process handle small. */
typedef struct br_shx {
  resil_shared *seg; /* the segment s points into (a reference) */
  br_token *tok;     /* NULL: no WIPEONFORK, ocache instead */
  resil__shared_owner_cache ocache;
} br_shx;

struct resil_breaker {
  /* ---- read by every acquire and record; never written. */
  br_state *s; /* &u.own, or the shared slot's state */
  uint32_t magic;
  uint32_t failure_mask;
  /* Classes whose result the inline record path takes: with a count
   * window, recorded (not REJECTED, not ignored) and not failures; 0 with
   * a time window. */
  uint32_t inline_mask;
  uint32_t ignored_mask;
  int64_t slow_ns;
  const resil_clock *clock; /* never NULL */
  /* The reader of the run form's readings: clock->coarse_ns when
   * slow_coarse and the clock has one, else clock->now_ns; NULL for the
   * system clock's coarse reading, which now_run makes inline. */
  int64_t (*run_read)(void *self);
  uint8_t failure_pct;
  uint8_t slow_pct;
  uint8_t window_kind;
  uint8_t auto_half_open;
  uint8_t slow_coarse;   /* run form measures on the coarse clock */
  uint8_t window_coarse; /* time window is placed on the coarse clock */
  uint8_t ms_granular;   /* growing wait truncates to whole ms */
  uint8_t modes;         /* MODE_* */
  uint32_t window_size;
  uint32_t min_calls;
  uint32_t half_permitted;
  uint32_t event_cap;
  int64_t open_wait_ns;
  int64_t open_wait_max_ns; /* INT64_MAX when uncapped */
  int64_t half_max_ns;      /* 0 = no limit */
  double multiplier;
  const resil_allocator *alloc;

  /* ---- this process's events and listeners, under the lock. The block
   * that follows the struct: main window storage, HALF_OPEN window storage
   * (time windows only), event ring, name (see block_layout). */
  uint64_t ev_total; /* events ever emitted (by this handle) */
  listener *ls;
  uint32_t nls;
  uint32_t ls_cap;
  /* In-flight listener deliveries per phase; see listener_remove. */
  atomic_uint deliv[2];
  uint32_t phase;
  uint32_t remove_busy;

  /* Last: the main window's slots follow it in the block, so that the
   * counters a record writes are contiguous with them. */
  union {
    br_state own; /* in-process */
    br_shx shx;   /* shared (s points elsewhere) */
  } u;
};

_Static_assert(sizeof(struct resil_breaker) ==
                   offsetof(struct resil_breaker, u) + sizeof(br_state),
               "the window storage follows the handle's state");
_Static_assert(sizeof(packed_event) == 16, "compact event ring");

/* Depth of listener deliveries on this thread (any breaker): a listener
 * that removes a listener cannot wait for deliveries to finish. */
static _Thread_local unsigned tl_delivering;

/* ---- small helpers ----------------------------------------------------- */

static inline resil_breaker_state_kind word_state(uint64_t w) {
  return (resil_breaker_state_kind)(w & STATE_MASK);
}
/* The state as the API reports it (a ramp is CLOSED). */
static inline resil_breaker_state_kind pub_state(resil_breaker_state_kind st) {
  return st == ST_RAMP ? RESIL_BREAKER_CLOSED : st;
}
static inline uint64_t word_gen(uint64_t w) { return w >> STATE_BITS; }

static inline int valid(const resil_breaker *br) {
  return br && br->magic == RESIL_MAGIC_BREAKER;
}

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ __volatile__("yield");
#endif
}

static size_t align8(size_t n) { return (n + 7u) & ~(size_t)7u; }

/* Bytes of the main window's and the HALF_OPEN window's storage (the same
 * bytes with a count window: only one of the two is live at a time). */
static void window_bytes(resil__window_kind kind, uint32_t size, uint32_t half,
                         size_t *main_bytes, size_t *half_bytes) {
  if (kind == RESIL__WINDOW_COUNT) {
    uint32_t larger = size > half ? size : half;
    *main_bytes = resil__window_store_bytes(RESIL__WINDOW_COUNT, larger);
    *half_bytes = 0;
  } else {
    *main_bytes = resil__window_store_bytes(RESIL__WINDOW_TIME, size);
    *half_bytes = resil__window_store_bytes(RESIL__WINDOW_COUNT, half);
  }
}

/* The windows' storage, after the state (the handle's or the slot's). */
static inline size_t ramp_bytes(const resil_breaker *br) {
  return (br->modes & MODE_RAMP) ? RAMP_BYTES : 0;
}
static inline void *main_store(const resil_breaker *br) {
  return (char *)br->s + STORE_OFF + ramp_bytes(br);
}
/* The ramp's state (MODE_RAMP only): after the state, wherever it is. */
static inline br_ramp *ramp_state(const resil_breaker *br) {
  return (br_ramp *)(void *)((char *)br->s + STORE_OFF);
}
/* The ramp's configuration (MODE_RAMP only): in the handle's own block,
 * right after the struct (the same place as ramp_state in-process). */
static inline const br_ramp *ramp_cfg(const resil_breaker *br) {
  return (const br_ramp *)(const void *)((const char *)br + sizeof(*br));
}
static inline void *half_store(const resil_breaker *br) {
  if (br->window_kind == RESIL__WINDOW_COUNT)
    return main_store(br);
  return (char *)main_store(br) +
         align8(resil__window_store_bytes(RESIL__WINDOW_TIME, br->window_size));
}

/* The block's layout: returns the event ring's offset; *name_off and
 * *total (NULL: not wanted) the name's and the block's size. */
static size_t block_layout(const resil_breaker *br, size_t *name_off,
                           size_t *total) {
  size_t mb, hb;
  window_bytes((resil__window_kind)br->window_kind, br->window_size,
               br->half_permitted, &mb, &hb);
  size_t ring_off = sizeof(resil_breaker) + ramp_bytes(br) + align8(mb) + align8(hb);
  size_t n = ring_off + (size_t)br->event_cap * sizeof(packed_event);
  if (name_off)
    *name_off = n;
  if (total)
    *total = n + strlen((const char *)br + n) + 1;
  return ring_off;
}

/* The lock's token for this handle: 1 in-process; in a segment, the
 * owner word of this process (computed once per process). */
static inline int is_shared(const resil_breaker *br) {
  return br->s != &br->u.own;
}

static RESIL_NOINLINE uint64_t token_slow(resil_breaker *br) {
  br_shx *x = &br->u.shx;
  if (!x->tok)
    return resil__shared_owner(&x->ocache);
  uint64_t t = resil__shared_owner_self();
  atomic_store_explicit(&x->tok->token, t, memory_order_relaxed);
  return t;
}

static RESIL_ALWAYS_INLINE uint64_t lock_token(resil_breaker *br) {
  if (RESIL_LIKELY(!is_shared(br)))
    return 1;
  br_token *tok = br->u.shx.tok;
  uint64_t t = tok ? atomic_load_explicit(&tok->token, memory_order_relaxed) : 0;
  return RESIL_LIKELY(t) ? t : token_slow(br);
}

static void repair(resil_breaker *br);

/* A shared state's window address, for this process (lock held). A time
 * window is the main one; a count window is the main one when the main
 * window counts (both share the storage), else the HALF_OPEN one. */
static inline void fix_store(resil_breaker *br) {
  resil__window *w = &br->s->win;
  w->store = w->kind == RESIL__WINDOW_TIME ? main_store(br) : half_store(br);
}

static inline void locked(resil_breaker *br) {
  if (RESIL_UNLIKELY(is_shared(br)))
    fix_store(br);
}

/* Waits of a shared lock between two looks at whether its holder still
 * lives (a SIGKILLed holder never releases it). */
#define LOCK_YIELDS_BEFORE_OWNER_CHECK 4u

/* Contended path: exponential backoff between looks, then yields (see the
 * tuning constants above). In a segment a waiter that has yielded a few
 * times looks at the holder: when that process is gone, the first waiter
 * to swap its token for the dead one's owns the lock and repairs the state
 * (the dead holder may have stopped anywhere in a change). */
static RESIL_NOINLINE void lock_slow(resil_breaker *br) {
  uint64_t tok = lock_token(br);
  _Atomic uint64_t *l = &br->s->lock;
  unsigned delay = LOCK_MIN_DELAY;
  unsigned looks = 0, yields = 0;
  for (;;) {
    for (unsigned i = 0; i < delay; i++)
      cpu_relax();
    uint64_t cur = atomic_load_explicit(l, memory_order_relaxed);
    if (!cur && atomic_compare_exchange_strong_explicit(
                    l, &cur, tok, memory_order_acquire, memory_order_relaxed)) {
      locked(br);
      return;
    }
    if (delay < LOCK_MAX_DELAY)
      delay <<= 1;
    if (++looks >= LOCK_LOOKS_BEFORE_YIELD) {
      looks = 0;
      sched_yield();
      if (is_shared(br) && ++yields % LOCK_YIELDS_BEFORE_OWNER_CHECK == 0) {
        cur = atomic_load_explicit(l, memory_order_relaxed);
        if (cur > 1 && cur != tok && resil__shared_owner_gone(cur) &&
            atomic_compare_exchange_strong_explicit(l, &cur, tok,
                                                    memory_order_acquire,
                                                    memory_order_relaxed)) {
          fix_store(br);
          repair(br);
          return;
        }
      }
    }
  }
}

/* One attempt: 1 when taken. In-process the lock only holds 0 or 1, so an
 * exchange (which measured a little cheaper than a compare-and-swap) does;
 * a shared lock must not overwrite its holder's token. */
static RESIL_ALWAYS_INLINE int try_lock_shared(resil_breaker *br) {
  uint64_t z = 0;
  if (atomic_compare_exchange_strong_explicit(&br->s->lock, &z, lock_token(br),
                                              memory_order_acquire,
                                              memory_order_relaxed)) {
    fix_store(br);
    return 1;
  }
  return 0;
}

static RESIL_ALWAYS_INLINE int try_lock_br(resil_breaker *br) {
  br_state *s = br->s;
  if (RESIL_LIKELY(s == &br->u.own))
    return !atomic_exchange_explicit(&s->lock, 1u, memory_order_acquire);
  return try_lock_shared(br);
}

static RESIL_ALWAYS_INLINE void lock_br(resil_breaker *br) {
  if (RESIL_LIKELY(try_lock_br(br)))
    return;
  lock_slow(br);
}

static inline void unlock_br(resil_breaker *br) {
  atomic_store_explicit(&br->s->lock, 0u, memory_order_release);
}

static inline uint64_t load_word(const resil_breaker *br) {
  return atomic_load_explicit(&br->s->word, memory_order_acquire);
}

static inline int64_t now_precise(const resil_breaker *br) {
  return resil__now(br->clock);
}

static inline int64_t now_window(const resil_breaker *br) {
  return br->window_coarse ? resil__coarse_now(br->clock)
                           : resil__now(br->clock);
}

/* Where the system clock has a coarse reading, the run form reads it
 * inline (resil__sys_coarse_ns): through the clock's function pointer, the
 * call and its frame cost a third of the reading (~1.5 of ~5 ns), twice
 * per call. */
static inline int64_t now_run(const resil_breaker *br) {
#if RESIL__HAVE_SYS_COARSE
  if (RESIL_LIKELY(!br->run_read)) return resil__sys_coarse_ns();
#endif
  return br->run_read(br->clock->self);
}

/* How a record knows when its call ended: `t` is RESIL__NO_NOW (no reading
 * yet: the record reads what it needs) or a precise reading (resil__now,
 * the split forms), or, with `run` set, the run form's end-of-call reading
 * (now_run's kind). The reading to place the result in a time window with
 * (now_window's kind), and the precise one that dates a transition, each
 * RESIL__NO_NOW when `t` is not of that kind. */
static inline int64_t window_reading(const resil_breaker *br, int64_t t,
                                     int run) {
  return !run || br->slow_coarse == br->window_coarse ? t : RESIL__NO_NOW;
}
static inline int64_t precise_reading(const resil_breaker *br, int64_t t,
                                      int run) {
  return run && br->slow_coarse ? RESIL__NO_NOW : t;
}

static inline packed_event *ring(resil_breaker *br) {
  return (packed_event *)(void *)((char *)br + block_layout(br, NULL, NULL));
}
static inline const char *name_of(const resil_breaker *br) {
  size_t ring_off = block_layout(br, NULL, NULL);
  return (const char *)br + ring_off + (size_t)br->event_cap * sizeof(packed_event);
}

static inline uint32_t half_min(const resil_breaker *br) {
  return br->min_calls < br->half_permitted ? br->min_calls
                                            : br->half_permitted;
}

/* 1 when a result of class cls counts (not REJECTED: local protection
 * refused the call; not an ignored class). */
static inline int recorded(const resil_breaker *br, resil_outcome_class cls) {
  return (int)((((uint32_t)RESIL_BREAKER_CLASSIFIABLE & ~br->ignored_mask) >>
                (unsigned)cls) &
               1u);
}

/* The common outcome, classified inline (resil__common_success). */
static inline int plain_success(const resil_outcome *o) {
  return resil__common_success(o->kind, o->reason, o->http_status);
}

/* A state whose next change is driven by time, not by a call. */
static inline int time_driven(const resil_breaker *br,
                              resil_breaker_state_kind st) {
  return (st == RESIL_BREAKER_HALF_OPEN && br->half_max_ns > 0) ||
         (st == RESIL_BREAKER_OPEN && br->auto_half_open) || st == ST_RAMP;
}

/* ---- the ramp (DESIGN §2.9; the curve and the admission: core/ramp.h) ---- */

/* The one admission decision of a ramp, for every form (try_acquire, run,
 * chain, engine) and every process of a shared breaker: 1 admitted, 0
 * refused (counted in t_ramp_rejected), -1 the ramp's time is up at `now`
 * (the caller ends it under the lock). Without the lock: the decisions are
 * ordered by one atomic add of share(t) to the accumulator, and a call is
 * admitted when the add carries into the integer part. Over any run of
 * consecutive decisions the admitted calls are the sum of their shares
 * within one (error diffusion), whatever the threads or processes. */
static RESIL_ALWAYS_INLINE int ramp_admit(resil_breaker *br, int64_t now) {
  br_ramp *rs = ramp_state(br);
  const br_ramp *c = ramp_cfg(br);
  int64_t el = now - atomic_load_explicit(&rs->start, memory_order_relaxed);
  if (el >= c->c.ns)
    return -1;
  if (resil__ramp_take(&rs->acc, resil__ramp_inc(&c->c, el)))
    return 1;
  atomic_fetch_add_explicit(&rs->t_rejected, 1u, memory_order_relaxed);
  return 0;
}

/* The reading an acquire decides a ramp with (br_ramp.read). */
static inline int64_t now_ramp(const resil_breaker *br, const br_ramp *c) {
#if RESIL__HAVE_SYS_COARSE
  if (RESIL_LIKELY(c->read == RAMP_SYS_COARSE))
    return resil__sys_coarse_ns();
#endif
  return c->read == RAMP_PRECISE ? now_precise(br) : resil__coarse_now(br->clock);
}

/* The share at `now` of a breaker whose word is w, as a double. */
static double ramp_share_at(resil_breaker *br, uint64_t w, int64_t now) {
  if (word_state(w) != ST_RAMP)
    return 1.0;
  int64_t el =
      now - atomic_load_explicit(&ramp_state(br)->start, memory_order_relaxed);
  return (double)resil__ramp_inc(&ramp_cfg(br)->c, el) / (double)RESIL__RAMP_ONE;
}

static resil_breaker_cause cause_of(resil__verdict v) {
  switch (v) {
  case RESIL__VERDICT_FAILURE:
    return RESIL_BREAKER_CAUSE_FAILURE_RATE;
  case RESIL__VERDICT_SLOW:
    return RESIL_BREAKER_CAUSE_SLOW_CALL_RATE;
  case RESIL__VERDICT_BOTH:
    return RESIL_BREAKER_CAUSE_BOTH_RATES;
  default:
    return RESIL_BREAKER_CAUSE_NONE;
  }
}

/* The wait of the next consecutive OPEN. Resilience4j's exponential
 * IntervalFunction multiplies the previous interval and truncates to whole
 * milliseconds at every step, then caps; capping each step gives the same
 * numbers because the sequence never decreases. */
static int64_t next_wait(const resil_breaker *br, int64_t w) {
  int64_t cap = br->open_wait_max_ns;
  if (br->multiplier <= 1.0)
    return w;
  if (w >= cap)
    return cap;
  double x = (double)w * br->multiplier;
  if (x >= (double)cap)
    return cap; /* also keeps the cast below defined */
  int64_t n = (int64_t)x;
  if (br->ms_granular)
    n -= n % RESIL_NS_PER_MS;
  if (n < w)
    n = w;
  return n > cap ? cap : n;
}

/* ---- events ---------------------------------------------------------------
 */

/* An event's ramp_share (breaker.h) in 1.31 fixed point: for a ramp event
 * the ramp's share at its instant t, on the curve from the ramp's start
 * (the lock is held: RAMP_STARTED comes after restart_as set the start to
 * t, share(0); a RAMP_ENDED before any new start, share(t - start), 1.0
 * when its time is up); 1.0 for every other event. */
static uint32_t event_share(resil_breaker *br, resil_breaker_event_kind kind,
                            int64_t t) {
  if ((kind != RESIL_BREAKER_EVENT_RAMP_STARTED &&
       kind != RESIL_BREAKER_EVENT_RAMP_ENDED) ||
      !(br->modes & MODE_RAMP))
    return SHARE_ONE;
  int64_t el =
      t - atomic_load_explicit(&ramp_state(br)->start, memory_order_relaxed);
  return (uint32_t)(resil__ramp_inc(&ramp_cfg(br)->c, el) >> 1);
}

static void emit(resil_breaker *br, evbuf *eb, resil_breaker_event_kind kind,
                 resil_breaker_state_kind from, resil_breaker_state_kind to,
                 resil_breaker_cause cause, int64_t t) {
  uint64_t seq = ++br->ev_total;
  uint32_t share = event_share(br, kind, t);
  if (br->event_cap) {
    packed_event *pe = &ring(br)[(seq - 1) % br->event_cap];
    pe->time_ns = t;
    pe->kind = (uint8_t)kind;
    pe->from = (uint8_t)from;
    pe->to = (uint8_t)to;
    pe->cause = (uint8_t)cause;
    pe->share = share;
  }
  /* The catch-up in settle() leaves EVBUF_RESERVE slots for the operation,
   * so this never drops an event; the check only guards the array. */
  if (eb->n < EVBUF_CAP) {
    resil_breaker_event *e = &eb->ev[eb->n++];
    e->struct_size = sizeof *e;
    e->seq = seq;
    e->time_ns = t;
    e->kind = kind;
    e->from = from;
    e->to = to;
    e->cause = cause;
    e->ramp_share = (double)share / (double)SHARE_ONE;
  }
}

static void deliver(resil_breaker *br, evbuf *eb) {
  tl_delivering++;
  for (unsigned i = 0; i < eb->n; i++)
    for (unsigned j = 0; j < eb->nl; j++)
      eb->ls[j].fn(eb->ls[j].user, br, &eb->ev[i]);
  tl_delivering--;
  atomic_fetch_sub_explicit(&br->deliv[eb->phase], 1u, memory_order_release);
}

/* Releases the lock, then delivers the operation's events (if any) to a
 * snapshot of the listeners taken while the lock was still held. */
static inline void unlock_deliver(resil_breaker *br, evbuf *eb) {
  if (RESIL_LIKELY(eb->n == 0)) {
    unlock_br(br);
    return;
  }
  eb->nl = br->nls;
  if (eb->nl) {
    memcpy(eb->ls, br->ls, eb->nl * sizeof *eb->ls);
    eb->phase = br->phase;
    atomic_fetch_add_explicit(&br->deliv[eb->phase], 1u, memory_order_relaxed);
  }
  unlock_br(br);
  if (eb->nl)
    deliver(br, eb);
}

/* ---- transitions (lock held) ------------------------------------------- */

/* Starts an empty window. Restarting the same window (same storage,
 * kind and size) that holds no result costs nothing: an idle catch-up
 * enters HALF_OPEN thousands of times. */
static void window_to(resil_breaker *br, resil__window_kind kind,
                      uint32_t size, uint32_t min_calls, void *store) {
  resil__window *w = &br->s->win;
  if (w->store == store && w->kind == (uint32_t)kind && w->size == size) {
    w->min_calls = min_calls;
    resil__window_clear(w);
  } else {
    resil__window_init(w, kind, size, min_calls, store);
  }
}

static void window_main(resil_breaker *br) {
  window_to(br, (resil__window_kind)br->window_kind, br->window_size,
            br->min_calls, main_store(br));
}

static void window_half(resil_breaker *br) {
  window_to(br, RESIL__WINDOW_COUNT, br->half_permitted, half_min(br),
            half_store(br));
}

static void count_open(resil_breaker *br) {
  if (br->s->opens < UINT32_MAX)
    br->s->opens++;
  br->s->series_wait_ns =
      br->s->opens == 1 ? br->open_wait_ns : next_wait(br, br->s->series_wait_ns);
  br->s->cur_wait_ns = br->s->series_wait_ns;
}

/* Enters `to` as of instant `at` in a new generation: the per-state setup
 * shared by transitions and reset, without the event. With `ramp` (to is
 * CLOSED) the CLOSED ramps: it keeps the consecutive OPENs and the waits it
 * came with (an OPEN during the ramp is the series' next), and its word
 * holds ST_RAMP. */
static void restart_as(resil_breaker *br, resil_breaker_state_kind to,
                       int64_t at, int ramp) {
  uint64_t w = atomic_load_explicit(&br->s->word, memory_order_relaxed);
  uint32_t opens = br->s->opens;
  int64_t cur = br->s->cur_wait_ns, series = br->s->series_wait_ns;
  switch (to) {
  case RESIL_BREAKER_OPEN:
    /* OPEN keeps the window it came from: it shows why it opened. */
    count_open(br);
    break;
  case RESIL_BREAKER_FORCED_OPEN:
    /* Resilience4j counts a forced OPEN as a consecutive OPEN too. */
    count_open(br);
    window_main(br);
    break;
  case RESIL_BREAKER_HALF_OPEN:
    /* The consecutive OPEN count is kept: a failed probe grows the wait. */
    br->s->half_left = br->half_permitted;
    window_half(br);
    break;
  case RESIL_BREAKER_CLOSED:
  case RESIL_BREAKER_DISABLED:
  case RESIL_BREAKER_METRICS_ONLY:
    br->s->opens = 0;
    br->s->cur_wait_ns = 0;
    br->s->series_wait_ns = 0;
    window_main(br);
    break;
  }
  br->s->exceeded = 0;
  br->s->since_ns = at;
  resil_breaker_state_kind wst = to;
  if (ramp) {
    br->s->opens = opens;
    br->s->cur_wait_ns = cur;
    br->s->series_wait_ns = series;
    /* Half a call in hand: the admitted count is the rounded sum. */
    br_ramp *rs = ramp_state(br);
    atomic_store_explicit(&rs->acc, RESIL__RAMP_ONE / 2u, memory_order_relaxed);
    atomic_store_explicit(&rs->start, at, memory_order_relaxed);
    wst = ST_RAMP;
  }
  atomic_store_explicit(&br->s->word,
                        ((word_gen(w) + 1) << STATE_BITS) | (uint64_t)wst,
                        memory_order_release);
}

static void restart(resil_breaker *br, resil_breaker_state_kind to,
                    int64_t at) {
  restart_as(br, to, at, 0);
}

/* A state change out of a ramp ends it first: RAMP_ENDED with the cause
 * of the change, at its instant. Returns the state as reported. */
static resil_breaker_state_kind leave_ramp(resil_breaker *br, evbuf *eb,
                                           resil_breaker_state_kind from,
                                           resil_breaker_cause cause,
                                           int64_t at) {
  if (from != ST_RAMP)
    return from;
  emit(br, eb, RESIL_BREAKER_EVENT_RAMP_ENDED, RESIL_BREAKER_CLOSED,
       RESIL_BREAKER_CLOSED, cause, at);
  return RESIL_BREAKER_CLOSED;
}

/* A transition with its events; `ramp`: to is an automatic CLOSED after
 * HALF_OPEN, which ramps when a ramp is configured. */
static void enter_as(resil_breaker *br, evbuf *eb, resil_breaker_state_kind to,
                     int64_t at, resil_breaker_cause cause, int ramp) {
  resil_breaker_state_kind from = leave_ramp(
      br, eb,
      word_state(atomic_load_explicit(&br->s->word, memory_order_relaxed)),
      cause, at);
  ramp = ramp && (br->modes & MODE_RAMP);
  restart_as(br, to, at, ramp);
  br->s->t_transitions++;
  emit(br, eb, RESIL_BREAKER_EVENT_TRANSITION, from, to, cause, at);
  if (ramp)
    emit(br, eb, RESIL_BREAKER_EVENT_RAMP_STARTED, RESIL_BREAKER_CLOSED,
         RESIL_BREAKER_CLOSED, cause, at);
}

static void enter(resil_breaker *br, evbuf *eb, resil_breaker_state_kind to,
                  int64_t at, resil_breaker_cause cause) {
  enter_as(br, eb, to, at, cause, 0);
}

/* The ramp's time is up at `at`: full traffic, in the same generation
 * (permits of the ramp stay valid), and the consecutive OPENs restart as
 * on entering CLOSED. Not a transition. */
static void end_ramp(resil_breaker *br, evbuf *eb, int64_t at) {
  uint64_t w = atomic_load_explicit(&br->s->word, memory_order_relaxed);
  br->s->opens = 0;
  br->s->cur_wait_ns = 0;
  br->s->series_wait_ns = 0;
  atomic_store_explicit(&br->s->word,
                        (w & ~(uint64_t)STATE_MASK) | RESIL_BREAKER_CLOSED,
                        memory_order_release);
  emit(br, eb, RESIL_BREAKER_EVENT_RAMP_ENDED, RESIL_BREAKER_CLOSED,
       RESIL_BREAKER_CLOSED, RESIL_BREAKER_CAUSE_RAMP_COMPLETED, at);
}

/* Applies the time-driven changes due at `now`, each at its scheduled
 * instant, at most RESIL_BREAKER_MAX_CATCHUP in one call (eb->catchup
 * counts them across deliveries). Returns 1 when it stopped with a change
 * still due because the event buffer is nearly full: the caller delivers
 * and comes back. */
static int settle(resil_breaker *br, int64_t now, evbuf *eb) {
  while (eb->catchup < RESIL_BREAKER_MAX_CATCHUP) {
    resil_breaker_state_kind st =
        word_state(atomic_load_explicit(&br->s->word, memory_order_relaxed));
    int64_t at;
    resil_breaker_state_kind to;
    resil_breaker_cause cause;
    if (eb->n + EVBUF_STEP + EVBUF_RESERVE > EVBUF_CAP &&
        time_driven(br, st))
      return 1; /* perhaps a change due: deliver first, then come back */
    if (st == ST_RAMP) {
      int64_t start =
          atomic_load_explicit(&ramp_state(br)->start, memory_order_relaxed);
      int64_t d = ramp_cfg(br)->c.ns;
      if (now - start < d)
        return 0;
      end_ramp(br, eb, start + d);
      eb->catchup++;
      continue;
    }
    if (st == RESIL_BREAKER_HALF_OPEN && br->half_max_ns > 0 &&
        now - br->s->since_ns >= br->half_max_ns) {
      at = br->s->since_ns + br->half_max_ns; /* <= now: no overflow */
      to = (br->modes & MODE_HALF_TO_CLOSED) ? RESIL_BREAKER_CLOSED
                                              : RESIL_BREAKER_OPEN;
      cause = RESIL_BREAKER_CAUSE_HALF_OPEN_MAX_WAIT;
    } else if (st == RESIL_BREAKER_OPEN && br->auto_half_open &&
               now - br->s->since_ns >= br->s->cur_wait_ns) {
      at = br->s->since_ns + br->s->cur_wait_ns;
      to = RESIL_BREAKER_HALF_OPEN;
      cause = RESIL_BREAKER_CAUSE_OPEN_WAIT_ELAPSED;
    } else {
      return 0;
    }
    enter_as(br, eb, to, at, cause, to == RESIL_BREAKER_CLOSED);
    eb->catchup++;
  }
  return 0;
}

static inline void eb_init(evbuf *eb) {
  eb->n = 0;
  eb->catchup = 0;
}

/* Takes the lock with every due time-driven change applied; `now` is the
 * precise clock, read by the caller. */
static void lock_settled(resil_breaker *br, int64_t now, evbuf *eb) {
  eb_init(eb);
  for (;;) {
    eb->n = 0;
    lock_br(br);
    if (!settle(br, now, eb))
      return;
    unlock_deliver(br, eb);
  }
}

/* ---- config ---------------------------------------------------------------
 */

/* The 0.1 layout ends with `alloc`: a caller built against it lacks the
 * fields marked "Since 0.2" and gets their defaults. */
#define CONFIG_MIN_SIZE                                                        \
  (offsetof(resil_breaker_config, alloc) + sizeof(const resil_allocator *))
/* The 0.1 event ends with `cause`. */
#define EVENT_MIN_SIZE                                                         \
  (offsetof(resil_breaker_event, cause) + sizeof(resil_breaker_cause))

static void config_defaults(resil_breaker_config *cfg) {
  memset(cfg, 0, sizeof *cfg);
  cfg->struct_size = sizeof *cfg;
  cfg->name = NULL;
  cfg->window_type = RESIL_BREAKER_WINDOW_COUNT;
  cfg->window_size = 100;
  cfg->minimum_calls = 100;
  cfg->failure_rate_threshold_pct = 50;
  cfg->slow_call_rate_threshold_pct = 100;
  cfg->slow_call_duration_ns = 60 * RESIL_NS_PER_S;
  cfg->open_wait_ns = 60 * RESIL_NS_PER_S;
  cfg->open_wait_multiplier = 1.0;
  cfg->open_wait_max_ns = 0;
  cfg->half_open_permitted_calls = 10;
  cfg->half_open_max_wait_ns = 60 * RESIL_NS_PER_S;
  cfg->automatic_half_open = 0;
  cfg->failure_classes = RESIL_BREAKER_DEFAULT_FAILURE_CLASSES;
  cfg->event_capacity = 8;
  cfg->clock = NULL;
  cfg->alloc = NULL;
  cfg->ignored_classes = 0;
  cfg->initial_state = RESIL_BREAKER_CLOSED;
  cfg->half_open_max_wait_to_closed = 0;
  cfg->shared = NULL;
  cfg->ramp_duration_ns = 0;
  cfg->ramp_min_percent = 10;
  cfg->ramp_aggression = 1.0;
}

void resil_breaker_config_init_sized(resil_breaker_config *cfg,
                                     size_t struct_size) {
  if (!cfg)
    return;
  resil_breaker_config full;
  config_defaults(&full);
  resil__sized_out(cfg, struct_size, &full, sizeof full);
}

/* A duration with a lower bound only: "must be at least 1 ms, got 200 ns". */
static resil_status check_min_ns(resil_error *err, const char *field,
                                 int64_t got, int64_t min) {
  if (got >= min)
    return RESIL_OK;
  char what[48], m[32];
  snprintf(what, sizeof what, "at least %s", resil__fmt_ns(m, sizeof m, min));
  return resil__err_range_ns(err, field, min, INT64_MAX, got, what);
}

static resil_status check_classes(resil_error *err, const char *field,
                                  uint32_t mask) {
  if (!(mask & ~(uint32_t)RESIL_BREAKER_CLASSIFIABLE))
    return RESIL_OK;
  resil__err(err, RESIL_EINVAL, field,
             "must be a mask of RESIL_CLASS_BIT(SUCCESS..REDIRECT) without "
             "REJECTED (0..0x%x), got 0x%x",
             (unsigned)RESIL_BREAKER_CLASSIFIABLE, (unsigned)mask);
  if (err) {
    err->has_range = 1;
    err->min = 0;
    err->max = RESIL_BREAKER_CLASSIFIABLE;
    err->got = mask;
  }
  return RESIL_EINVAL;
}

static resil_status validate(const resil_breaker_config *cfg,
                             resil_error *err) {
  resil_status st;
  char what[96], b[32];
  if ((st = resil__check_range(err, "window_type", (int64_t)cfg->window_type,
                               RESIL_BREAKER_WINDOW_COUNT,
                               RESIL_BREAKER_WINDOW_TIME)))
    return st;
  if ((st = resil__window_validate(cfg->window_type == RESIL_BREAKER_WINDOW_TIME
                                       ? RESIL__WINDOW_TIME
                                       : RESIL__WINDOW_COUNT,
                                   cfg->window_size, cfg->minimum_calls,
                                   "window_size", "minimum_calls", err)))
    return st;
  if ((st = resil__window_validate_threshold(
           cfg->failure_rate_threshold_pct, "failure_rate_threshold_pct", err)))
    return st;
  if ((st = resil__window_validate_threshold(cfg->slow_call_rate_threshold_pct,
                                             "slow_call_rate_threshold_pct",
                                             err)))
    return st;
  if ((st = check_min_ns(err, "slow_call_duration_ns",
                         cfg->slow_call_duration_ns, 1)))
    return st;
  if ((st = check_min_ns(err, "open_wait_ns", cfg->open_wait_ns,
                         RESIL_NS_PER_MS)))
    return st;
  double m = cfg->open_wait_multiplier;
  if (!(m >= 1.0 && m <= 100.0)) { /* also rejects NaN */
    resil__err(err, RESIL_EINVAL, "open_wait_multiplier",
               "must be 1.0..100.0, got %g", m);
    if (err) {
      err->has_range = 1;
      err->min = 1;
      err->max = 100;
      err->got = m != m      ? 0
                 : m > 1e18  ? INT64_MAX
                 : m < -1e18 ? INT64_MIN
                             : (int64_t)m;
    }
    return RESIL_EINVAL;
  }
  if (cfg->open_wait_max_ns != 0 && cfg->open_wait_max_ns < cfg->open_wait_ns) {
    snprintf(what, sizeof what, "0 or at least open_wait_ns (%s)",
             resil__fmt_ns(b, sizeof b, cfg->open_wait_ns));
    return resil__err_range_ns(err, "open_wait_max_ns", cfg->open_wait_ns,
                               INT64_MAX, cfg->open_wait_max_ns, what);
  }
  if ((st = resil__check_range(err, "half_open_permitted_calls",
                               cfg->half_open_permitted_calls, 1,
                               RESIL__WINDOW_COUNT_MAX)))
    return st;
  if (cfg->half_open_max_wait_ns < 0)
    return resil__err_range_ns(err, "half_open_max_wait_ns", 0, INT64_MAX,
                               cfg->half_open_max_wait_ns,
                               "0 (no limit) or at least 1 ns");
  if ((st = resil__check_range(err, "automatic_half_open",
                               cfg->automatic_half_open, 0, 1)))
    return st;
  if ((st = check_classes(err, "failure_classes", cfg->failure_classes)))
    return st;
  if ((st = check_classes(err, "ignored_classes", cfg->ignored_classes)))
    return st;
  if (cfg->failure_classes & cfg->ignored_classes) {
    resil__err(err, RESIL_EINVAL, "ignored_classes",
               "must be disjoint from failure_classes (0x%x): both hold 0x%x",
               (unsigned)cfg->failure_classes,
               (unsigned)(cfg->failure_classes & cfg->ignored_classes));
    return RESIL_EINVAL;
  }
  if ((st = resil__check_range(err, "event_capacity", cfg->event_capacity, 0,
                               RESIL_BREAKER_MAX_EVENTS)))
    return st;
  if ((st = resil__check_range(err, "initial_state",
                               (int64_t)cfg->initial_state,
                               RESIL_BREAKER_CLOSED,
                               RESIL_BREAKER_METRICS_ONLY)))
    return st;
  if ((st = resil__check_range(err, "half_open_max_wait_to_closed",
                               cfg->half_open_max_wait_to_closed, 0, 1)))
    return st;
  if (cfg->name &&
      (st = resil__check_range(err, "name", (int64_t)strlen(cfg->name), 0,
                               NAME_MAX_LEN)))
    return st;
  if ((st = resil__ramp_check(err, "ramp_duration_ns", cfg->ramp_duration_ns,
                               "ramp_min_percent", cfg->ramp_min_percent,
                               "ramp_aggression", cfg->ramp_aggression)))
    return st;
  if (cfg->clock && !cfg->clock->now_ns)
    return resil__err(err, RESIL_EINVAL, "clock", "now_ns must not be NULL");
  if (cfg->alloc && (!cfg->alloc->alloc || !cfg->alloc->free))
    return resil__err(err, RESIL_EINVAL, "alloc",
                      "alloc and free must not be NULL");
  return RESIL_OK;
}


/* ---- shared state (DESIGN §8.1) -------------------------------------------
 *
 * With cfg.shared the br_state and the window storage live in the slot of
 * (breaker, name): the state at the slot's first word, the storage at
 * STORE_OFF (main window, then the HALF_OPEN window for a time
 * window). Every process runs the code above on them, under `lock`, whose
 * holder is a process's owner word: a waiter that finds the holder dead
 * takes the lock over and repairs the state (repair). What must agree
 * across processes is recorded in the slot and compared on attach. */

#define TOKEN_PAGE 4096u

typedef struct br_shared_rec {
  int64_t window_type;
  int64_t window_size;
  int64_t minimum_calls;
  int64_t failure_rate_threshold_pct;
  int64_t slow_call_rate_threshold_pct;
  int64_t slow_call_duration_ns;
  int64_t open_wait_ns;
  /* A double: 16 bytes so that a difference is reported as such, not as
   * an integer. */
  unsigned char open_wait_multiplier[16];
  int64_t open_wait_max_ns;
  int64_t half_open_permitted_calls;
  int64_t half_open_max_wait_ns;
  int64_t automatic_half_open;
  int64_t failure_classes;
  int64_t ignored_classes;
  int64_t initial_state;
  int64_t half_open_max_wait_to_closed;
  int64_t ramp_duration_ns;
  int64_t ramp_min_percent;
  unsigned char ramp_aggression[16]; /* a double, as open_wait_multiplier */
} br_shared_rec;

#define BR_FIELD(f) {#f, offsetof(br_shared_rec, f), sizeof(((br_shared_rec *)0)->f)}
static const resil__shared_field br_shared_fields[] = {
    BR_FIELD(window_type),
    BR_FIELD(window_size),
    BR_FIELD(minimum_calls),
    BR_FIELD(failure_rate_threshold_pct),
    BR_FIELD(slow_call_rate_threshold_pct),
    BR_FIELD(slow_call_duration_ns),
    BR_FIELD(open_wait_ns),
    BR_FIELD(open_wait_multiplier),
    BR_FIELD(open_wait_max_ns),
    BR_FIELD(half_open_permitted_calls),
    BR_FIELD(half_open_max_wait_ns),
    BR_FIELD(automatic_half_open),
    BR_FIELD(failure_classes),
    BR_FIELD(ignored_classes),
    BR_FIELD(initial_state),
    BR_FIELD(half_open_max_wait_to_closed),
    BR_FIELD(ramp_duration_ns),
    BR_FIELD(ramp_min_percent),
    BR_FIELD(ramp_aggression),
};
#undef BR_FIELD
_Static_assert(sizeof(br_shared_rec) <= RESIL__SHARED_CFG_MAX, "record fits a slot");

/* What a shared config must be, before anything is allocated: windows
 * that fit a slot (the handle and the clock: resil__shared_join). */
static resil_status shared_check(const resil_breaker_config *cfg,
                                 size_t main_bytes, size_t half_bytes,
                                 size_t ramp, resil_error *err) {
  const size_t avail = SHARED_STORE_BYTES - ramp; /* a ramp's area first */
  if (align8(main_bytes) + half_bytes <= avail)
    return RESIL_OK;
  if (cfg->window_type == RESIL_BREAKER_WINDOW_COUNT) {
    uint32_t max = (uint32_t)(avail / sizeof(uint64_t) * 32u);
    const char *f = cfg->window_size >= cfg->half_open_permitted_calls
                        ? "window_size"
                        : "half_open_permitted_calls";
    return resil__err(err, RESIL_EINVAL, f,
                      "a shared breaker's count window holds at most %u results "
                      "(one segment slot); window_size is %u, "
                      "half_open_permitted_calls %u",
                      (unsigned)max, (unsigned)cfg->window_size,
                      (unsigned)cfg->half_open_permitted_calls);
  }
  size_t hb = half_bytes;
  uint32_t max = hb >= avail
                     ? 0
                     : (uint32_t)((avail - hb) / sizeof(resil__bucket));
  return resil__err(err, RESIL_EINVAL, "window_size",
                    "a shared breaker's time window holds at most %u seconds "
                    "(one segment slot, with half_open_permitted_calls %u), got %u",
                    (unsigned)max, (unsigned)cfg->half_open_permitted_calls,
                    (unsigned)cfg->window_size);
}

/* Points br->s into the segment (the slot created from br->own's state if
 * new), or leaves it on br->own after a counted fallback; an error when the
 * segment is required or the config differs. */
static resil_status use_shared(resil_breaker *br, const resil_breaker_config *cfg,
                               resil_error *err) {
  resil_shared *seg = cfg->shared;
  br_shared_rec rec;
  memset(&rec, 0, sizeof rec);
  rec.window_type = (int64_t)cfg->window_type;
  rec.window_size = cfg->window_size;
  rec.minimum_calls = cfg->minimum_calls;
  rec.failure_rate_threshold_pct = cfg->failure_rate_threshold_pct;
  rec.slow_call_rate_threshold_pct = cfg->slow_call_rate_threshold_pct;
  rec.slow_call_duration_ns = cfg->slow_call_duration_ns;
  rec.open_wait_ns = cfg->open_wait_ns;
  memcpy(rec.open_wait_multiplier, &cfg->open_wait_multiplier, sizeof(double));
  rec.open_wait_max_ns = cfg->open_wait_max_ns;
  rec.half_open_permitted_calls = cfg->half_open_permitted_calls;
  rec.half_open_max_wait_ns = cfg->half_open_max_wait_ns;
  rec.automatic_half_open = cfg->automatic_half_open;
  rec.failure_classes = cfg->failure_classes;
  rec.ignored_classes = cfg->ignored_classes;
  rec.initial_state = (int64_t)cfg->initial_state;
  rec.half_open_max_wait_to_closed = cfg->half_open_max_wait_to_closed;
  rec.ramp_duration_ns = cfg->ramp_duration_ns;
  rec.ramp_min_percent = cfg->ramp_min_percent;
  memcpy(rec.ramp_aggression, &cfg->ramp_aggression, sizeof(double));
  uint64_t init[RESIL__SHARED_INIT_WORDS];
  memcpy(init, &br->u.own, sizeof init); /* lock 0, window empty, no address */
  resil__shared_req q;
  memset(&q, 0, sizeof q);
  q.kind = RESIL__SHK_BREAKER;
  q.name = name_of(br);
  q.cfg = &rec;
  q.cfg_len = sizeof rec;
  q.fields = br_shared_fields;
  q.nfields = sizeof br_shared_fields / sizeof br_shared_fields[0];
  q.init = init;
  q.init_words = RESIL__SHARED_INIT_WORDS;
  /* A reset or replace takes the lock before rewriting the state. */
  q.lock_word = (uint32_t)(offsetof(br_state, lock) / sizeof(uint64_t)) + 1u;
  uint64_t *words = NULL;
  resil_status st = resil__shared_join(seg, cfg->clock, "breaker", &q, &words, err);
  if (st == RESIL_OK && words) {
    void *page = mmap(NULL, TOKEN_PAGE, PROT_READ | PROT_WRITE,
                      MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
#ifdef MADV_WIPEONFORK
    if (page != MAP_FAILED && madvise(page, TOKEN_PAGE, MADV_WIPEONFORK) != 0) {
      munmap(page, TOKEN_PAGE); /* older kernel: getpid on each lock */
      page = MAP_FAILED;
    }
#else
    if (page != MAP_FAILED)
      munmap(page, TOKEN_PAGE);
    page = MAP_FAILED;
#endif
    /* From here on u.own is not the state: it holds u.shx. */
    br->s = (br_state *)(void *)words;
    memset(&br->u, 0, sizeof br->u);
    br->u.shx.tok = page == MAP_FAILED ? NULL : page;
    br->u.shx.seg = seg;
  }
  return st;
}

/* ---- repair and consistency (a lock taken over from a dead process) ------ */

/* The window the state `st` may hold: 1 main, 2 HALF_OPEN, 3 either (OPEN
 * keeps the window it came from). */
static unsigned windows_allowed(resil_breaker_state_kind st) {
  if (st == RESIL_BREAKER_HALF_OPEN)
    return 2;
  if (st == RESIL_BREAKER_OPEN)
    return 3;
  return 1;
}

static int is_window(const resil_breaker *br, const resil__window *w, int half) {
  if (half)
    return w->kind == RESIL__WINDOW_COUNT && w->size == br->half_permitted &&
           w->min_calls == half_min(br);
  return w->kind == br->window_kind && w->size == br->window_size &&
         w->min_calls == br->min_calls;
}

/* The totals of a window's contents (its calls: at least the results its
 * slots show, at most its size for a count window). */
static void window_contents(const resil__window *w, resil__window *t) {
  *t = *w;
  t->failures = t->slow = t->slow_failures = 0;
  if (w->kind == RESIL__WINDOW_COUNT) {
    const uint64_t *p = w->store;
    uint64_t marked = 0;
    for (uint32_t i = 0; i < w->size; i++) {
      uint64_t v = (p[i >> 5] >> ((i & 31u) * 2u)) & 3u;
      t->failures += v & 1u;
      t->slow += v >> 1;
      t->slow_failures += v == 3u;
      marked += v != 0;
    }
    if (t->calls < marked)
      t->calls = marked;
    if (t->calls > w->size)
      t->calls = w->size;
    if (t->head >= w->size)
      t->head = 0;
  } else {
    const resil__bucket *b = w->store;
    t->calls = 0;
    for (uint32_t i = 0; i < w->size; i++) {
      t->calls += b[i].calls;
      t->failures += b[i].failures;
      t->slow += b[i].slow;
      t->slow_failures += b[i].slow_failures;
    }
  }
}

/* Makes the state consistent again (lock held, store fixed): the window is
 * one the state may hold (else an empty main window), its totals are its
 * contents, HALF_OPEN permits are within the permitted count. */
static void repair(resil_breaker *br) {
  br_state *s = br->s;
  resil_breaker_state_kind st =
      word_state(atomic_load_explicit(&s->word, memory_order_relaxed));
  unsigned ok = windows_allowed(st);
  resil__window *w = &s->win;
  int main_ok = (ok & 1u) && is_window(br, w, 0);
  int half_ok = (ok & 2u) && is_window(br, w, 1);
  if (!main_ok && !half_ok) {
    if (st == RESIL_BREAKER_HALF_OPEN)
      resil__window_init(w, RESIL__WINDOW_COUNT, br->half_permitted, half_min(br),
                         half_store(br));
    else
      resil__window_init(w, (resil__window_kind)br->window_kind, br->window_size,
                         br->min_calls, main_store(br));
    fix_store(br);
  } else {
    resil__window t;
    window_contents(w, &t);
    *w = t;
  }
  if (s->half_left > br->half_permitted)
    s->half_left = br->half_permitted;
}

int resil__breaker_check(resil_breaker *br, char *why, size_t n) {
  if (!valid(br)) {
    snprintf(why, n, "not a breaker");
    return -1;
  }
  lock_br(br);
  br_state *s = br->s;
  resil_breaker_state_kind st =
      word_state(atomic_load_explicit(&s->word, memory_order_relaxed));
  unsigned ok = windows_allowed(st);
  const resil__window *w = &s->win;
  int rc = 0;
  if (!(((ok & 1u) && is_window(br, w, 0)) || ((ok & 2u) && is_window(br, w, 1)))) {
    snprintf(why, n, "state %s holds a window of kind %u size %u minimum %u",
             resil_breaker_state_name(pub_state(st)), w->kind, w->size, w->min_calls);
    rc = -1;
  } else {
    resil__window t;
    window_contents(w, &t);
    if (t.calls != w->calls || t.failures != w->failures || t.slow != w->slow ||
        t.slow_failures != w->slow_failures || t.head != w->head) {
      snprintf(why, n,
               "window totals calls %llu failures %llu slow %llu head %u; "
               "contents %llu %llu %llu head %u",
               (unsigned long long)w->calls, (unsigned long long)w->failures,
               (unsigned long long)w->slow, w->head, (unsigned long long)t.calls,
               (unsigned long long)t.failures, (unsigned long long)t.slow, t.head);
      rc = -1;
    } else if (s->half_left > br->half_permitted) {
      snprintf(why, n, "%u HALF_OPEN permits left of %u", s->half_left,
               br->half_permitted);
      rc = -1;
    } else if (s->t_failures > s->t_calls || s->t_slow > s->t_calls) {
      snprintf(why, n, "totals: %llu failures, %llu slow of %llu calls",
               (unsigned long long)s->t_failures, (unsigned long long)s->t_slow,
               (unsigned long long)s->t_calls);
      rc = -1;
    }
  }
  unlock_br(br);
  return rc;
}

void resil__breaker_test_die_locked(resil_breaker *br) {
  lock_br(br);
  /* As a record stopped between its slot and its totals. */
  br->s->win.failures += 3;
  br->s->win.calls = br->s->win.size + 7u;
  if (br->s->half_left < UINT32_MAX)
    br->s->half_left = br->half_permitted + 5u;
}

resil_status resil_breaker_new(const resil_breaker_config *ucfg,
                               resil_breaker **out, resil_error *err) {
  if (!ucfg)
    return resil__err(err, RESIL_EINVAL, "cfg", "must not be NULL");
  if (!out)
    return resil__err(err, RESIL_EINVAL, "out", "must not be NULL");
  resil_breaker_config full;
  const resil_breaker_config *cfg = &full;
  config_defaults(&full);
  resil_status st =
      resil__sized_in(&full, sizeof full, ucfg, CONFIG_MIN_SIZE,
                      "resil_breaker_config", "resil_breaker_config_init", err);
  if (st != RESIL_OK)
    return st;
  st = validate(cfg, err);
  if (st != RESIL_OK)
    return st;

  resil__window_kind kind = cfg->window_type == RESIL_BREAKER_WINDOW_TIME
                                ? RESIL__WINDOW_TIME
                                : RESIL__WINDOW_COUNT;
  uint32_t half = cfg->half_open_permitted_calls;
  /* One block: struct, the ramp's area (when configured), main window
   * storage, HALF_OPEN window storage (the same bytes when the main window
   * is a count window: only one of the two is live at a time), event ring,
   * name. */
  size_t main_bytes, half_bytes;
  window_bytes(kind, cfg->window_size, half, &main_bytes, &half_bytes);
  const char *name = cfg->name ? cfg->name : DEFAULT_NAME;
  size_t name_len = strlen(name);
  size_t rb = cfg->ramp_duration_ns > 0 ? RAMP_BYTES : 0;
  size_t off = sizeof(resil_breaker) + rb;
  size_t ring_off = off + align8(main_bytes) + align8(half_bytes);
  size_t name_off =
      ring_off + (size_t)cfg->event_capacity * sizeof(packed_event);
  size_t total = name_off + name_len + 1;
  if (cfg->shared &&
      (st = shared_check(cfg, main_bytes, half_bytes, rb, err)))
    return st;

  resil_breaker *br = resil__calloc(cfg->alloc, total);
  if (!br)
    return resil__err(err, RESIL_ENOMEM, NULL, "out of memory");

  const resil_clock *clock = resil__clock(cfg->clock);
  br->magic = RESIL_MAGIC_BREAKER;
  br->failure_mask = cfg->failure_classes;
  br->ignored_mask = cfg->ignored_classes;
  br->inline_mask =
      kind == RESIL__WINDOW_COUNT
          ? (uint32_t)RESIL_BREAKER_CLASSIFIABLE & ~cfg->ignored_classes &
                ~cfg->failure_classes
          : 0;
  br->modes = (uint8_t)((cfg->half_open_max_wait_to_closed ? MODE_HALF_TO_CLOSED : 0u) |
                        (cfg->ramp_duration_ns > 0 ? MODE_RAMP : 0u));
  br->slow_ns = cfg->slow_call_duration_ns;
  br->clock = clock;
  br->failure_pct = (uint8_t)cfg->failure_rate_threshold_pct;
  br->slow_pct = (uint8_t)cfg->slow_call_rate_threshold_pct;
  br->window_kind = (uint8_t)kind;
  br->auto_half_open = (uint8_t)cfg->automatic_half_open;
  /* Coarse readings are used where their lag is at most 1 % of what they
   * measure: slow-call durations, and one-second buckets (10 ms). */
  br->slow_coarse = (uint8_t)(clock->coarse_resolution_ns <=
                              cfg->slow_call_duration_ns / 100);
  br->run_read = br->slow_coarse && clock->coarse_ns ? clock->coarse_ns
                                                     : clock->now_ns;
  if (RESIL__HAVE_SYS_COARSE && clock == resil_clock_system() &&
      br->run_read == clock->coarse_ns)
    br->run_read = NULL;
  br->window_coarse =
      (uint8_t)(clock->coarse_resolution_ns <= 10 * RESIL_NS_PER_MS);
  br->ms_granular = (uint8_t)(cfg->open_wait_ns % RESIL_NS_PER_MS == 0);
  br->window_size = cfg->window_size;
  br->min_calls = cfg->minimum_calls;
  br->half_permitted = half;
  br->event_cap = cfg->event_capacity;
  br->open_wait_ns = cfg->open_wait_ns;
  br->open_wait_max_ns =
      cfg->open_wait_max_ns ? cfg->open_wait_max_ns : INT64_MAX;
  br->half_max_ns = cfg->half_open_max_wait_ns;
  br->multiplier = cfg->open_wait_multiplier;
  br->alloc = cfg->alloc;
  br->s = &br->u.own;
  if (rb) {
    br_ramp *rc = (br_ramp *)(void *)((char *)br + sizeof(*br));
    resil__ramp_curve_init(&rc->c, cfg->ramp_duration_ns, cfg->ramp_min_percent,
                           cfg->ramp_aggression);
    rc->read = clock->coarse_ns && clock->coarse_resolution_ns <=
                                       cfg->ramp_duration_ns / 100
                   ? RAMP_COARSE
                   : RAMP_PRECISE;
    if (RESIL__HAVE_SYS_COARSE && rc->read == RAMP_COARSE &&
        clock == resil_clock_system())
      rc->read = RAMP_SYS_COARSE;
  }
  memcpy((char *)br + name_off, name, name_len + 1);

  atomic_init(&br->s->lock, 0u);
  atomic_init(&br->deliv[0], 0u);
  atomic_init(&br->deliv[1], 0u);
  /* Generation 0, then the initial state is entered as generation 1,
   * without an event. */
  atomic_init(&br->s->word, (uint64_t)RESIL_BREAKER_CLOSED);
  window_main(br);
  restart(br, cfg->initial_state, resil__now(clock));
  if (cfg->initial_state == RESIL_BREAKER_HALF_OPEN) {
    /* As Resilience4j's HalfOpenState(1): the breaker starts as if it had
     * opened once, so a failed probe makes the second consecutive OPEN and
     * waits the series' second wait. */
    br->s->opens = 1;
    br->s->series_wait_ns = br->open_wait_ns;
  }
  if (cfg->shared && (st = use_shared(br, cfg, err)) != RESIL_OK) {
    resil__free(cfg->alloc, br);
    return st;
  }
  *out = br;
  return RESIL_OK;
}

void resil_breaker_free(resil_breaker *br) {
  if (!valid(br))
    return;
  const resil_allocator *a = br->alloc;
  resil__free(a, br->ls);
  br->magic = RESIL_MAGIC_DEAD;
  if (is_shared(br)) {
    if (br->u.shx.tok)
      munmap(br->u.shx.tok, TOKEN_PAGE);
    resil__shared_release(br->u.shx.seg);
  }
  resil__free(a, br);
}

const char *resil_breaker_name(const resil_breaker *br) {
  return valid(br) ? name_of(br) : NULL;
}

size_t resil_breaker_memory_bytes(const resil_breaker *br) {
  if (!valid(br))
    return 0;
  resil_breaker *m = (resil_breaker *)br;
  lock_br(m);
  size_t total;
  block_layout(m, NULL, &total);
  size_t n = total + (size_t)m->ls_cap * sizeof(listener);
  unlock_br(m);
  return n;
}

/* ---- names ----------------------------------------------------------------
 */

const char *resil_breaker_state_name(resil_breaker_state_kind st) {
  switch (st) {
  case RESIL_BREAKER_CLOSED:
    return "CLOSED";
  case RESIL_BREAKER_OPEN:
    return "OPEN";
  case RESIL_BREAKER_HALF_OPEN:
    return "HALF_OPEN";
  case RESIL_BREAKER_DISABLED:
    return "DISABLED";
  case RESIL_BREAKER_FORCED_OPEN:
    return "FORCED_OPEN";
  case RESIL_BREAKER_METRICS_ONLY:
    return "METRICS_ONLY";
  }
  return "?";
}

const char *resil_breaker_event_kind_name(resil_breaker_event_kind k) {
  switch (k) {
  case RESIL_BREAKER_EVENT_TRANSITION:
    return "TRANSITION";
  case RESIL_BREAKER_EVENT_NOT_PERMITTED:
    return "NOT_PERMITTED";
  case RESIL_BREAKER_EVENT_RESET:
    return "RESET";
  case RESIL_BREAKER_EVENT_THRESHOLDS_EXCEEDED:
    return "THRESHOLDS_EXCEEDED";
  case RESIL_BREAKER_EVENT_RAMP_STARTED:
    return "RAMP_STARTED";
  case RESIL_BREAKER_EVENT_RAMP_ENDED:
    return "RAMP_ENDED";
  }
  return "?";
}

const char *resil_breaker_cause_name(resil_breaker_cause c) {
  switch (c) {
  case RESIL_BREAKER_CAUSE_NONE:
    return "NONE";
  case RESIL_BREAKER_CAUSE_MANUAL:
    return "MANUAL";
  case RESIL_BREAKER_CAUSE_RESET:
    return "RESET";
  case RESIL_BREAKER_CAUSE_FAILURE_RATE:
    return "FAILURE_RATE";
  case RESIL_BREAKER_CAUSE_SLOW_CALL_RATE:
    return "SLOW_CALL_RATE";
  case RESIL_BREAKER_CAUSE_BOTH_RATES:
    return "BOTH_RATES";
  case RESIL_BREAKER_CAUSE_BELOW_THRESHOLDS:
    return "BELOW_THRESHOLDS";
  case RESIL_BREAKER_CAUSE_OPEN_WAIT_ELAPSED:
    return "OPEN_WAIT_ELAPSED";
  case RESIL_BREAKER_CAUSE_HALF_OPEN_MAX_WAIT:
    return "HALF_OPEN_MAX_WAIT";
  case RESIL_BREAKER_CAUSE_RAMP_COMPLETED:
    return "RAMP_COMPLETED";
  }
  return "?";
}

/* ---- acquire / record / release ------------------------------------------ */

/* What acquire decided: ACQ_GO (= RESIL_DECISION_GO), or refused by the
 * state (OPEN...) or by a ramp. */
enum { ACQ_DENY = 0, ACQ_GO = 1, ACQ_RAMP = 2 };

/* OPEN, HALF_OPEN, FORCED_OPEN, a ramp whose time is up, or a state that
 * changed under us: under the lock. */
static RESIL_NOINLINE int
acquire_locked(resil_breaker *br, resil_breaker_permit *permit, int64_t now) {
  if (now == RESIL__NO_NOW)
    now = now_precise(br);
  evbuf eb;
  lock_settled(br, now, &eb);
  uint64_t w = atomic_load_explicit(&br->s->word, memory_order_relaxed);
  resil_breaker_state_kind st = word_state(w);
  int ok = 1;
  if (st == RESIL_BREAKER_OPEN) {
    ok = 0;
    /* Without the timer the first acquire after the wait moves it, at this
     * moment. With it the catch-up does (at the wait's end): an OPEN still
     * there after settling lags behind the clock (catch-up bound). */
    if (!br->auto_half_open && now - br->s->since_ns >= br->s->cur_wait_ns) {
      enter(br, &eb, RESIL_BREAKER_HALF_OPEN, now,
            RESIL_BREAKER_CAUSE_OPEN_WAIT_ELAPSED);
      w = atomic_load_explicit(&br->s->word, memory_order_relaxed);
      st = RESIL_BREAKER_HALF_OPEN;
      ok = 1;
    }
  }
  if (st == RESIL_BREAKER_HALF_OPEN) {
    if (br->s->half_left > 0)
      br->s->half_left--;
    else
      ok = 0;
  } else if (st == RESIL_BREAKER_FORCED_OPEN) {
    ok = 0;
  } else if (st == ST_RAMP && ramp_admit(br, now) == 0) {
    /* A ramp that began since the look above (settled: its time is not
     * up): the same decision. */
    unlock_deliver(br, &eb);
    return ACQ_RAMP;
  }
  if (ok) {
    permit->generation = word_gen(w);
    permit->state = pub_state(st);
  } else {
    br->s->t_not_permitted++;
    emit(br, &eb, RESIL_BREAKER_EVENT_NOT_PERMITTED, st, st,
         RESIL_BREAKER_CAUSE_NONE, now);
  }
  unlock_deliver(br, &eb);
  return ok ? ACQ_GO : ACQ_DENY;
}

/* Any state but one that always permits: a ramping breaker decides
 * without the lock (its end is settled by acquire_locked, on a precise
 * reading); everything else goes to acquire_locked. Inline in its two out
 * of line callers, so that a ramping acquire makes one call and sets up no
 * frame for the locked path's event buffer. */
static RESIL_ALWAYS_INLINE int
acquire_other(resil_breaker *br, resil_breaker_permit *permit, int64_t now) {
  uint64_t w = load_word(br);
  if (word_state(w) == ST_RAMP) {
    int a = ramp_admit(br, now != RESIL__NO_NOW ? now : now_ramp(br, ramp_cfg(br)));
    if (a == 0)
      return ACQ_RAMP;
    if (a > 0) {
      permit->generation = word_gen(w);
      permit->state = RESIL_BREAKER_CLOSED;
      return ACQ_GO;
    }
  }
  return acquire_locked(br, permit, now);
}

/* acquire_other out of line (the run forms' acquire). */
static RESIL_NOINLINE int
acquire_slow(resil_breaker *br, resil_breaker_permit *permit, int64_t now) {
  return acquire_other(br, permit, now);
}

/* acquire's common case: a state that always permits (one atomic load,
 * no time). 0: acquire_slow decides (nothing was changed). */
static RESIL_ALWAYS_INLINE int acquire_fast(resil_breaker *br,
                                            resil_breaker_permit *permit) {
  uint64_t w = load_word(br);
  resil_breaker_state_kind st = word_state(w);
  if (RESIL_LIKELY((ALWAYS_PERMITS >> st) & 1u)) {
    permit->generation = word_gen(w);
    permit->state = st;
    return 1;
  }
  return 0;
}

static RESIL_ALWAYS_INLINE int
acquire(resil_breaker *br, resil_breaker_permit *permit, int64_t now) {
  if (RESIL_LIKELY(acquire_fast(br, permit))) return ACQ_GO;
  return acquire_slow(br, permit, now);
}

/* acquire_other as a decision: out of line, so that try_acquire's common
 * case stays the load, the test and a tail call it was before the ramp. */
static RESIL_NOINLINE resil_decision
acquire_slow_decision(resil_breaker *br, resil_breaker_permit *permit,
                      int64_t now) {
  return acquire_other(br, permit, now) == ACQ_GO ? RESIL_DECISION_GO
                                                  : RESIL_DECISION_DENY;
}

resil_decision resil_breaker_try_acquire(resil_breaker *br,
                                         resil_breaker_permit *permit) {
  if (RESIL_UNLIKELY(!valid(br) || !permit))
    return RESIL_DECISION_DENY;
  if (RESIL_LIKELY(acquire_fast(br, permit)))
    return RESIL_DECISION_GO;
  return acquire_slow_decision(br, permit, RESIL__NO_NOW);
}

resil_decision resil_breaker_try_acquire_why(resil_breaker *br,
                                             resil_breaker_permit *permit,
                                             resil_reason *why) {
  int a = RESIL_UNLIKELY(!valid(br) || !permit)
              ? ACQ_DENY
              : acquire(br, permit, RESIL__NO_NOW);
  if (why)
    *why = a == ACQ_GO     ? RESIL_REASON_NONE
           : a == ACQ_RAMP ? RESIL_REASON_RECOVERING
                           : RESIL_REASON_BREAKER_OPEN;
  return a == ACQ_GO ? RESIL_DECISION_GO : RESIL_DECISION_DENY;
}

resil_decision resil__breaker_acquire_at(resil_breaker *br,
                                         resil_breaker_permit *permit,
                                         int64_t now) {
  if (RESIL_UNLIKELY(!valid(br) || !permit))
    return RESIL_DECISION_DENY;
  if (RESIL_LIKELY(acquire_fast(br, permit)))
    return RESIL_DECISION_GO;
  return acquire_slow_decision(br, permit, now);
}

double resil_breaker_ramp_share(resil_breaker *br) {
  if (!valid(br))
    return 0.0;
  uint64_t w = load_word(br);
  if (RESIL_LIKELY(word_state(w) != ST_RAMP))
    return 1.0;
  return ramp_share_at(br, w, now_precise(br));
}

int resil_breaker_recovering(resil_breaker *br) {
  if (!valid(br))
    return 0;
  uint64_t w = load_word(br);
  resil_breaker_state_kind st = word_state(w);
  if (st == RESIL_BREAKER_OPEN && !br->auto_half_open) {
    /* OPEN past its wait: the next call would be the probe (the first
     * acquire moves it to HALF_OPEN). Read under the lock. */
    int64_t now = now_precise(br);
    evbuf eb;
    lock_settled(br, now, &eb);
    int due = word_state(atomic_load_explicit(&br->s->word, memory_order_relaxed)) ==
                  RESIL_BREAKER_OPEN &&
              now - br->s->since_ns >= br->s->cur_wait_ns;
    unlock_deliver(br, &eb);
    return due;
  }
  if (RESIL_LIKELY(st != ST_RAMP))
    return st == RESIL_BREAKER_HALF_OPEN;
  /* Ramping until its time is up (whatever its share). */
  return now_precise(br) -
             atomic_load_explicit(&ramp_state(br)->start, memory_order_relaxed) <
         ramp_cfg(br)->c.ns;
}

/* CLOSED, count window, a recorded class, a permit of the current
 * generation, lock held: a failure or a slow call, or a success into a
 * window that holds some. Records it, opens when it reached a threshold,
 * releases the lock.
 *
 * In CLOSED the window's verdict is never FAILURE, SLOW or BOTH after a
 * record (such a result opens the breaker, and every entry into CLOSED
 * starts an empty window). A plain success adds no hit and no fewer calls,
 * so it cannot reach a threshold, except when it is the result that brings
 * the window to its minimum number of calls. */
static RESIL_NOINLINE resil_status record_closed(resil_breaker *br,
                                                 unsigned failed, int slow,
                                                 int64_t t, int run) {
  resil__window *w = &br->s->win;
  br->s->t_calls++;
  br->s->t_failures += failed;
  if (slow) {
    br->s->t_slow++;
    br->s->t_slow_failures += failed;
  }
  uint64_t before = w->calls;
  resil__window_record_count(w, (int)failed, slow);
  if (w->calls < w->min_calls ||
      (!failed && !slow && before >= w->min_calls)) {
    unlock_br(br);
    return RESIL_OK;
  }
  resil__verdict v = resil__window_verdict(w, br->failure_pct, br->slow_pct);
  if (v <= RESIL__VERDICT_BELOW) {
    unlock_br(br);
    return RESIL_OK;
  }
  evbuf eb;
  eb_init(&eb);
  int64_t now = precise_reading(br, t, run);
  if (now == RESIL__NO_NOW)
    now = now_precise(br);
  enter(br, &eb, RESIL_BREAKER_OPEN, now, cause_of(v));
  unlock_deliver(br, &eb);
  return RESIL_OK;
}

/* Hands back a HALF_OPEN permit of the current generation (lock held). */
static inline void hand_back(resil_breaker *br, resil_breaker_state_kind st) {
  if (st == RESIL_BREAKER_HALF_OPEN && br->s->half_left < br->half_permitted)
    br->s->half_left++;
}

/* Applies the overdue time-driven changes of a state driven by time, with
 * the lock held on entry and on return (it may deliver in between). */
static void settle_locked(resil_breaker *br, evbuf *eb, int64_t *now,
                          int *have_now) {
  resil_breaker_state_kind st =
      word_state(atomic_load_explicit(&br->s->word, memory_order_relaxed));
  /* A ramp's end changes neither how a result counts nor a permit handed
   * back: records and releases leave it to the next acquire, state or
   * metrics (no clock read for it here). */
  if (RESIL_LIKELY(!time_driven(br, st) || st == ST_RAMP))
    return;
  if (!*have_now) {
    *now = now_precise(br);
    *have_now = 1;
  }
  while (settle(br, *now, eb)) {
    unlock_deliver(br, eb);
    eb->n = 0;
    lock_br(br);
  }
}

/* Records one classified result; the lock is held on entry and released
 * on return. `wnow` is a reading of the window clock or RESIL__NO_NOW (the
 * run form reuses its end-of-call reading); `pnow` a precise reading or
 * RESIL__NO_NOW. */
static RESIL_NOINLINE resil_status
record_locked(resil_breaker *br, const resil_breaker_permit *permit,
              resil_outcome_class cls, int slow, int64_t wnow, int64_t pnow) {
  int failed = (int)((br->failure_mask >> (unsigned)cls) & 1u);
  int64_t now = pnow;
  int have_now = pnow != RESIL__NO_NOW;
  evbuf eb;
  eb_init(&eb);
  /* HALF_OPEN past its maximum wait must not take this result. */
  settle_locked(br, &eb, &now, &have_now);
  uint64_t w = atomic_load_explicit(&br->s->word, memory_order_relaxed);
  resil_breaker_state_kind st = word_state(w);
  if (word_gen(w) != permit->generation) {
    /* Issued in an earlier state period: it changes nothing at all. */
    unlock_deliver(br, &eb);
    return RESIL_OK;
  }
  if (st != RESIL_BREAKER_CLOSED && st != RESIL_BREAKER_HALF_OPEN &&
      st != RESIL_BREAKER_METRICS_ONLY && st != ST_RAMP) {
    /* DISABLED records nothing; OPEN and FORCED_OPEN issue no permits. */
    unlock_deliver(br, &eb);
    return RESIL_OK;
  }
  if (!recorded(br, cls)) {
    /* REJECTED (local protection refused the call) counts nowhere; an
     * ignored class counts as ignored only. Neither votes. */
    if ((br->ignored_mask >> (unsigned)cls) & 1u)
      br->s->t_ignored++;
    hand_back(br, st);
    unlock_deliver(br, &eb);
    return RESIL_OK;
  }
  br->s->t_calls++;
  br->s->t_failures += (uint64_t)failed;
  br->s->t_slow += (uint64_t)slow;
  br->s->t_slow_failures += (uint64_t)(slow & failed);
  if (br->s->win.kind == RESIL__WINDOW_COUNT) {
    resil__window_record_count(&br->s->win, failed, slow);
  } else {
    if (wnow == RESIL__NO_NOW)
      wnow = now_window(br);
    resil__window_record_time(&br->s->win, wnow, failed, slow);
  }
  resil__verdict v =
      resil__window_verdict(&br->s->win, br->failure_pct, br->slow_pct);
  if (v >= RESIL__VERDICT_FAILURE) {
    if (!have_now)
      now = now_precise(br);
    if (st != RESIL_BREAKER_METRICS_ONLY) {
      enter(br, &eb, RESIL_BREAKER_OPEN, now, cause_of(v));
    } else if (!br->s->exceeded) {
      /* Reported once per excursion above a threshold. */
      br->s->exceeded = 1;
      emit(br, &eb, RESIL_BREAKER_EVENT_THRESHOLDS_EXCEEDED, st, st,
           cause_of(v), now);
    }
  } else if (v == RESIL__VERDICT_BELOW) {
    if (st == RESIL_BREAKER_HALF_OPEN) {
      if (!have_now)
        now = now_precise(br);
      enter_as(br, &eb, RESIL_BREAKER_CLOSED, now,
               RESIL_BREAKER_CAUSE_BELOW_THRESHOLDS, 1);
    } else {
      br->s->exceeded = 0;
    }
  }
  unlock_deliver(br, &eb);
  return RESIL_OK;
}

/* The inline path below with the lock held, when it cannot finish. */
static RESIL_NOINLINE resil_status
record_held(resil_breaker *br, const resil_breaker_permit *permit,
            resil_outcome_class cls, int slow, int64_t t, int run) {
  /* A ramping CLOSED with a count window records as a CLOSED does. */
  if (br->window_kind == RESIL__WINDOW_COUNT && recorded(br, cls) &&
      atomic_load_explicit(&br->s->word, memory_order_relaxed) ==
          ((permit->generation << STATE_BITS) | (uint64_t)ST_RAMP))
    return record_closed(br, (br->failure_mask >> (unsigned)cls) & 1u, slow,
                         t, run);
  return record_locked(br, permit, cls, slow, window_reading(br, t, run),
                       precise_reading(br, t, run));
}

/* The inline path's one attempt at the lock failed: wait for it. */
static RESIL_NOINLINE resil_status
record_contended(resil_breaker *br, const resil_breaker_permit *permit,
                 resil_outcome_class cls, int slow, int64_t t, int run) {
  lock_slow(br);
  return record_held(br, permit, cls, slow, t, run);
}

/* A record the inline path below does not take: a failure or a slow call
 * in a count window (recorded here, in CLOSED, as the inline path would),
 * a time window (it needs the time of the result, read before taking the
 * lock: a result read slightly late lands in the newest bucket), or a
 * class that is not recorded. */
static RESIL_NOINLINE resil_status
record_slow(resil_breaker *br, const resil_breaker_permit *permit,
            resil_outcome_class cls, int slow, int64_t t, int run) {
  if (br->window_kind == RESIL__WINDOW_COUNT && recorded(br, cls)) {
    uint64_t expect =
        (permit->generation << STATE_BITS) | RESIL_BREAKER_CLOSED;
    lock_br(br);
    if (atomic_load_explicit(&br->s->word, memory_order_relaxed) != expect)
      return record_held(br, permit, cls, slow, t, run);
    return record_closed(br, (br->failure_mask >> (unsigned)cls) & 1u, slow,
                         t, run);
  }
  int64_t wnow = window_reading(br, t, run);
  if (br->window_kind != RESIL__WINDOW_COUNT && wnow == RESIL__NO_NOW)
    wnow = now_window(br);
  lock_br(br);
  return record_locked(br, permit, cls, slow, wnow,
                       precise_reading(br, t, run));
}

/* The inline path's end, the lock held: a permit of the current
 * generation in CLOSED and a clean window only count; anything else goes
 * on out of line. */
static RESIL_ALWAYS_INLINE resil_status
record_clean(resil_breaker *br, br_state *s, const resil_breaker_permit *permit,
             resil_outcome_class cls, int slow, int64_t t, int run) {
  uint64_t expect = (permit->generation << STATE_BITS) | RESIL_BREAKER_CLOSED;
  uint64_t w = atomic_load_explicit(&s->word, memory_order_relaxed);
  /* A ramping CLOSED counts its results as a CLOSED does (record_held):
   * the second test is only made when the first fails. */
  if (RESIL_UNLIKELY(w != expect) && w != (expect | (uint64_t)ST_RAMP))
    return record_held(br, permit, cls, slow, t, run);
  if (RESIL_LIKELY(resil__window_clean(&s->win))) {
    s->t_calls++;
    resil__window_record_count(&s->win, 0, 0);
    atomic_store_explicit(&s->lock, 0u, memory_order_release);
    return RESIL_OK;
  }
  return record_closed(br, 0, 0, t, run);
}

/* The inline path on a shared state (the lock takes a token and fixes the
 * window's address): out of line, so that the in-process path saves no
 * registers. */
static RESIL_NOINLINE resil_status
record_shared(resil_breaker *br, const resil_breaker_permit *permit,
              resil_outcome_class cls, int slow, int64_t t, int run) {
  lock_br(br);
  return record_clean(br, br->s, permit, cls, slow, t, run);
}

/* The common case inline: CLOSED with a count window, a recorded class
 * that is not a failure, not slow, a permit of the current generation, an
 * uncontended lock, and a clean window (no failure, no slow call in it: a
 * success into it reaches no threshold): one lock, a counter and the
 * window's count. Every other case leaves through a tail call, so this
 * path saves no registers. */
static RESIL_ALWAYS_INLINE resil_status
record(resil_breaker *br, const resil_breaker_permit *permit,
       resil_outcome_class cls, int slow, int64_t t, int run) {
  if (RESIL_UNLIKELY(slow || !((br->inline_mask >> (unsigned)cls) & 1u)))
    return record_slow(br, permit, cls, slow, t, run);
  /* s in a local: br->s would be loaded again after the lock's
   * acquire, which no load can be moved above. */
  br_state *s = br->s;
  if (RESIL_UNLIKELY(s != &br->u.own))
    return record_shared(br, permit, cls, slow, t, run);
  if (RESIL_UNLIKELY(
          atomic_exchange_explicit(&s->lock, 1u, memory_order_acquire)))
    return record_contended(br, permit, cls, slow, t, run);
  return record_clean(br, s, permit, cls, slow, t, run);
}

/* Any other outcome: classified out of line, so that the inline path makes
 * no call it must come back from. */
static RESIL_NOINLINE resil_status
record_other(resil_breaker *br, const resil_breaker_permit *permit,
             const resil_outcome *o, int slow, int64_t t, int run) {
  return record(br, permit, resil_outcome_classify(o), slow, t, run);
}

static RESIL_ALWAYS_INLINE resil_status
record_outcome(resil_breaker *br, const resil_breaker_permit *permit,
               const resil_outcome *o, int slow, int64_t t, int run) {
  if (RESIL_LIKELY(plain_success(o)))
    return record(br, permit, RESIL_CLASS_SUCCESS, slow, t, run);
  return record_other(br, permit, o, slow, t, run);
}

resil_status resil_breaker_record(resil_breaker *br,
                                  const resil_breaker_permit *permit,
                                  const resil_outcome *o, int64_t duration_ns) {
  if (RESIL_UNLIKELY(!valid(br)))
    return RESIL_EMISUSE;
  if (RESIL_UNLIKELY(!permit || !o || duration_ns < 0))
    return RESIL_EINVAL;
  return record_outcome(br, permit, o, duration_ns >= br->slow_ns,
                        RESIL__NO_NOW, 0);
}

resil_status resil__breaker_record_at(resil_breaker *br,
                                      const resil_breaker_permit *permit,
                                      const resil_outcome *o,
                                      int64_t duration_ns, int64_t now) {
  if (RESIL_UNLIKELY(!valid(br)))
    return RESIL_EMISUSE;
  if (RESIL_UNLIKELY(!permit || !o || duration_ns < 0))
    return RESIL_EINVAL;
  return record_outcome(br, permit, o, duration_ns >= br->slow_ns, now, 0);
}

const resil_clock *resil__breaker_clock(const resil_breaker *br) {
  return valid(br) ? br->clock : NULL;
}

int resil__breaker_coarse_durations(const resil_breaker *br) {
  return valid(br) && br->slow_coarse;
}

resil_status resil_breaker_release(resil_breaker *br,
                                   const resil_breaker_permit *permit) {
  if (!valid(br))
    return RESIL_EMISUSE;
  if (!permit)
    return RESIL_EINVAL;
  evbuf eb;
  eb_init(&eb);
  int64_t now;
  int have_now = 0;
  lock_br(br);
  /* A HALF_OPEN past its maximum wait must not get the permit back. */
  settle_locked(br, &eb, &now, &have_now);
  uint64_t w = atomic_load_explicit(&br->s->word, memory_order_relaxed);
  if (word_gen(w) == permit->generation)
    hand_back(br, word_state(w));
  unlock_deliver(br, &eb);
  return RESIL_OK;
}

/* The run form's record of a result of class cls: t0 and t1 read as
 * now_run reads them, t1 when the call ended (it also places the result in
 * a time window read on the same kind of reading, and dates a transition
 * when it is precise). */
static RESIL_ALWAYS_INLINE void record_run_class(
    resil_breaker *br, const resil_breaker_permit *permit,
    resil_outcome_class cls, int64_t t0, int64_t t1) {
  record(br, permit, cls, t1 - t0 >= br->slow_ns, t1, 1);
}

/* The same for an outcome (the chain's leave). */
static RESIL_ALWAYS_INLINE void record_run(resil_breaker *br,
                                           const resil_breaker_permit *permit,
                                           const resil_outcome *o, int64_t t0,
                                           int64_t t1) {
  record_outcome(br, permit, o, t1 - t0 >= br->slow_ns, t1, 1);
}

/* The run form's first half: 1 with *permit and *t0 (the reading right
 * before the call) set, or 0 with *refusal the outcome the run form ends
 * with. */
static RESIL_ALWAYS_INLINE int enter_run(resil_breaker *br,
                                         resil_breaker_permit *permit,
                                         int64_t *t0, resil_outcome *refusal) {
  int a = acquire(br, permit, RESIL__NO_NOW);
  if (RESIL_UNLIKELY(a != ACQ_GO)) {
    *refusal = resil_outcome_make(RESIL_REJECTED, a == ACQ_RAMP
                                                      ? RESIL_REASON_RECOVERING
                                                      : RESIL_REASON_BREAKER_OPEN);
    return 0;
  }
  *t0 = now_run(br);
  return 1;
}

/* enter_run out of line, for resil__breaker_enter when acquire_fast did
 * not permit (which changed nothing): from the start. */
static RESIL_NOINLINE int enter_again(resil_breaker *br,
                                      resil_breaker_permit *permit,
                                      int64_t *t0, resil_outcome *refusal) {
  return enter_run(br, permit, t0, refusal);
}

int resil__breaker_enter(resil_breaker *br, resil_breaker_permit *permit,
                         int64_t *t0, resil_outcome *refusal) {
  /* enter_run with its common case inline and the rest a tail call: no
   * refusal outcome built in this frame. */
  if (RESIL_LIKELY(acquire_fast(br, permit))) {
    *t0 = now_run(br);
    return 1;
  }
  return enter_again(br, permit, t0, refusal);
}

void resil__breaker_leave(resil_breaker *br, const resil_breaker_permit *permit,
                          const resil_outcome *o, int64_t t0) {
  record_run(br, permit, o, t0, now_run(br));
}

void resil__breaker_leave_ok(resil_breaker *br,
                             const resil_breaker_permit *permit, int64_t t0) {
  record_run_class(br, permit, RESIL_CLASS_SUCCESS, t0, now_run(br));
}

/* resil_breaker_run; t0_out (NULL: none) receives the reading taken right
 * before the call, before the call is made. fn writes its outcome into o,
 * which is copied once, into the return value; a plain success is
 * classified on o's fields. */
static RESIL_ALWAYS_INLINE resil_outcome run_impl(resil_breaker *br,
                                                  const resil_ctx *ctx,
                                                  resil_call_fn fn, void *arg,
                                                  int64_t *t0_out) {
  if (RESIL_UNLIKELY(!valid(br) || !fn))
    return resil_outcome_make(RESIL_NOT_SENT, RESIL_REASON_LOCAL_ERROR);
  /* NULL gives the defaults (resil_ctx_init's, resil__ctx_defaults) with
   * the breaker's clock, built inline: a few stores instead of two calls. */
  resil_ctx local;
  const resil_ctx *c;
  if (ctx) {
    c = resil__ctx_in(&local, ctx);
  } else {
    resil__ctx_defaults(&local);
    local.clock = br->clock;
    c = &local;
  }
  if (RESIL_UNLIKELY(!c))
    return resil_outcome_make(RESIL_NOT_SENT, RESIL_REASON_LOCAL_ERROR);
  resil_breaker_permit permit;
  int64_t t0;
  resil_outcome refusal;
  if (!enter_run(br, &permit, &t0, &refusal))
    return refusal;
  if (t0_out)
    *t0_out = t0;
  resil_outcome o = fn(arg, c);
  /* resil__breaker_leave(br, &permit, &o, t0), with plain_success() on
   * o's fields */
  if (RESIL_LIKELY(resil__common_success(o.kind, o.reason, o.http_status)))
    record_run_class(br, &permit, RESIL_CLASS_SUCCESS, t0, now_run(br));
  else
    record_run(br, &permit, &o, t0, now_run(br));
  return o;
}

resil_outcome resil_breaker_run(resil_breaker *br, const resil_ctx *ctx,
                                resil_call_fn fn, void *arg) {
  return run_impl(br, ctx, fn, arg, NULL);
}

resil_outcome resil__breaker_run_at(resil_breaker *br, const resil_ctx *ctx,
                                    resil_call_fn fn, void *arg,
                                    int64_t *t0_out) {
  return run_impl(br, ctx, fn, arg, t0_out);
}

/* ---- state, transitions, reset ------------------------------------------- */

resil_breaker_state_kind resil_breaker_state(resil_breaker *br) {
  if (!valid(br))
    return RESIL_BREAKER_FORCED_OPEN;
  resil_breaker_state_kind st = word_state(load_word(br));
  if (!time_driven(br, st))
    return st;
  evbuf eb;
  lock_settled(br, now_precise(br), &eb);
  st = word_state(atomic_load_explicit(&br->s->word, memory_order_relaxed));
  unlock_deliver(br, &eb);
  return pub_state(st);
}

/* Resilience4j's StateTransition table has every pair but these. */
static int refused(resil_breaker_state_kind from, resil_breaker_state_kind to) {
  return (from == RESIL_BREAKER_CLOSED && to == RESIL_BREAKER_HALF_OPEN) ||
         (from == RESIL_BREAKER_METRICS_ONLY &&
          (to == RESIL_BREAKER_OPEN || to == RESIL_BREAKER_HALF_OPEN));
}

/* A manual transition (also X->X: a restart in a new generation without
 * an event, not counted as a transition). wait_ns > 0: OPEN for that wait
 * instead of the series' (resil_breaker_open_for), which leaves the count
 * of consecutive OPENs, and so the series' next wait, as it was, from any
 * state (Resilience4j's transitionToOpenStateFor: new OpenState(attempts())
 * where transitionToOpenState makes attempts() + 1). */
static void enter_manual(resil_breaker *br, evbuf *eb,
                         resil_breaker_state_kind from,
                         resil_breaker_state_kind to, int64_t now,
                         int64_t wait_ns) {
  uint32_t opens = br->s->opens;
  int64_t series = br->s->series_wait_ns;
  if (pub_state(from) == to) {
    /* A ramping CLOSED restarted by hand gets full traffic. */
    leave_ramp(br, eb, from, RESIL_BREAKER_CAUSE_MANUAL, now);
    restart(br, to, now);
  } else {
    enter(br, eb, to, now, RESIL_BREAKER_CAUSE_MANUAL);
  }
  if (wait_ns > 0) {
    br->s->opens = opens;
    br->s->series_wait_ns = series;
    br->s->cur_wait_ns = wait_ns;
  }
}

static resil_status manual(resil_breaker *br, resil_breaker_state_kind to,
                           int64_t wait_ns) {
  int64_t now = now_precise(br);
  evbuf eb;
  lock_settled(br, now, &eb);
  resil_breaker_state_kind from =
      word_state(atomic_load_explicit(&br->s->word, memory_order_relaxed));
  resil_status st = RESIL_OK;
  if (refused(pub_state(from), to))
    st = RESIL_ESTATE;
  else
    enter_manual(br, &eb, from, to, now, wait_ns);
  unlock_deliver(br, &eb);
  return st;
}

resil_status resil_breaker_transition(resil_breaker *br,
                                      resil_breaker_state_kind to) {
  if (!valid(br))
    return RESIL_EMISUSE;
  if ((int)to < (int)RESIL_BREAKER_CLOSED ||
      (int)to > (int)RESIL_BREAKER_METRICS_ONLY)
    return RESIL_EINVAL;
  return manual(br, to, 0);
}

resil_status resil_breaker_open_for(resil_breaker *br, int64_t wait_ns) {
  if (!valid(br))
    return RESIL_EMISUSE;
  if (wait_ns < 1)
    return RESIL_EINVAL;
  return manual(br, RESIL_BREAKER_OPEN, wait_ns);
}

resil_status resil_breaker_reset(resil_breaker *br) {
  if (!valid(br))
    return RESIL_EMISUSE;
  int64_t now = now_precise(br);
  evbuf eb;
  lock_settled(br, now, &eb);
  resil_breaker_state_kind from =
      word_state(atomic_load_explicit(&br->s->word, memory_order_relaxed));
  if (pub_state(from) != RESIL_BREAKER_CLOSED) {
    enter(br, &eb, RESIL_BREAKER_CLOSED, now, RESIL_BREAKER_CAUSE_RESET);
  } else {
    from = leave_ramp(br, &eb, from, RESIL_BREAKER_CAUSE_RESET, now);
    restart(br, RESIL_BREAKER_CLOSED, now); /* new generation, no event */
  }
  emit(br, &eb, RESIL_BREAKER_EVENT_RESET, from, RESIL_BREAKER_CLOSED,
       RESIL_BREAKER_CAUSE_RESET, now);
  unlock_deliver(br, &eb);
  return RESIL_OK;
}

/* ---- metrics and events ---------------------------------------------------
 */

resil_status resil_breaker_get_metrics_sized(resil_breaker *br,
                                             resil_breaker_metrics *uout,
                                             size_t struct_size) {
  if (!valid(br))
    return RESIL_EMISUSE;
  if (!uout || struct_size < sizeof(size_t))
    return RESIL_EINVAL;
  resil_breaker_metrics full;
  resil_breaker_metrics *out = &full;
  int64_t now = now_precise(br);
  int64_t wnow = br->window_coarse ? resil__coarse_now(br->clock) : now;
  evbuf eb;
  lock_settled(br, now, &eb);
  uint64_t w = atomic_load_explicit(&br->s->word, memory_order_relaxed);
  if (br->s->win.kind == RESIL__WINDOW_TIME)
    resil__window_advance(&br->s->win, wnow);
  memset(out, 0, sizeof *out);
  out->struct_size = sizeof *out;
  out->state = pub_state(word_state(w));
  out->generation = word_gen(w);
  out->ramping = word_state(w) == ST_RAMP;
  out->ramp_share = ramp_share_at(br, w, now);
  out->ramp_since_ns =
      out->ramping
          ? atomic_load_explicit(&ramp_state(br)->start, memory_order_relaxed)
          : 0;
  out->total_ramp_rejected =
      (br->modes & MODE_RAMP)
          ? atomic_load_explicit(&ramp_state(br)->t_rejected, memory_order_relaxed)
          : 0;
  out->state_since_ns = br->s->since_ns;
  out->consecutive_opens = br->s->opens;
  out->open_wait_ns = br->s->cur_wait_ns;
  out->half_open_permits_available =
      out->state == RESIL_BREAKER_HALF_OPEN ? br->s->half_left : 0;
  const resil__window *win = &br->s->win;
  out->buffered_calls = win->calls;
  out->failed_calls = win->failures;
  out->slow_calls = win->slow;
  out->successful_calls = win->calls - win->failures;
  out->slow_failed_calls = win->slow_failures;
  out->slow_successful_calls = win->slow - win->slow_failures;
  out->minimum_calls = win->min_calls;
  if (win->calls > 0 && win->calls >= win->min_calls) {
    out->rates = RESIL_BREAKER_RATES_AVAILABLE;
    out->failure_rate_pct = (double)win->failures * 100.0 / (double)win->calls;
    out->slow_call_rate_pct = (double)win->slow * 100.0 / (double)win->calls;
  } else {
    out->rates = RESIL_BREAKER_RATES_NOT_ENOUGH_DATA;
  }
  out->total_calls = br->s->t_calls;
  out->total_successes = br->s->t_calls - br->s->t_failures;
  out->total_failures = br->s->t_failures;
  out->total_slow = br->s->t_slow;
  out->total_ignored = br->s->t_ignored;
  out->total_not_permitted = br->s->t_not_permitted;
  out->total_transitions = br->s->t_transitions;
  out->total_slow_failed = br->s->t_slow_failures;
  out->total_slow_successful = br->s->t_slow - br->s->t_slow_failures;
  unlock_deliver(br, &eb);
  resil__sized_out(uout, struct_size, &full, sizeof full);
  return RESIL_OK;
}

resil_status resil_breaker_shared_peek_sized(resil_shared *seg, const char *name,
                                             resil_breaker_metrics *out,
                                             size_t struct_size, resil_error *err) {
  if (!seg || !name || !out)
    return resil__err(err, RESIL_EINVAL, !seg ? "seg" : !name ? "name" : "out",
                      "must not be NULL");
  if (struct_size < sizeof(size_t))
    return resil__err(err, RESIL_EINVAL, "out", "struct_size too small");
  br_shared_rec rec;
  resil_status st = resil__shared_find_cfg(seg, RESIL__SHK_BREAKER, name, &rec,
                                           sizeof rec, err);
  if (st != RESIL_OK)
    return st;
  /* A breaker attached to the existing slot, with the recorded config
   * (never creates one: slots are never freed, and a replacement in
   * between is a mismatch error). */
  resil_breaker_config c;
  resil_breaker_config_init(&c);
  c.name = name;
  c.window_type = (resil_breaker_window_type)rec.window_type;
  c.window_size = (uint32_t)rec.window_size;
  c.minimum_calls = (uint32_t)rec.minimum_calls;
  c.failure_rate_threshold_pct = (uint32_t)rec.failure_rate_threshold_pct;
  c.slow_call_rate_threshold_pct = (uint32_t)rec.slow_call_rate_threshold_pct;
  c.slow_call_duration_ns = rec.slow_call_duration_ns;
  c.open_wait_ns = rec.open_wait_ns;
  memcpy(&c.open_wait_multiplier, rec.open_wait_multiplier, sizeof(double));
  c.open_wait_max_ns = rec.open_wait_max_ns;
  c.half_open_permitted_calls = (uint32_t)rec.half_open_permitted_calls;
  c.half_open_max_wait_ns = rec.half_open_max_wait_ns;
  c.automatic_half_open = (int)rec.automatic_half_open;
  c.failure_classes = (uint32_t)rec.failure_classes;
  c.ignored_classes = (uint32_t)rec.ignored_classes;
  c.initial_state = (resil_breaker_state_kind)rec.initial_state;
  c.half_open_max_wait_to_closed = (int)rec.half_open_max_wait_to_closed;
  c.ramp_duration_ns = rec.ramp_duration_ns;
  c.ramp_min_percent = (uint32_t)rec.ramp_min_percent;
  memcpy(&c.ramp_aggression, rec.ramp_aggression, sizeof(double));
  c.event_capacity = 0;
  c.shared = seg;
  resil_breaker *br;
  if ((st = resil_breaker_new(&c, &br, err)) != RESIL_OK)
    return st;
  if (!is_shared(br)) { /* fell back (cannot happen on a live segment) */
    resil_breaker_free(br);
    return resil__err(err, RESIL_ESTATE, "shared", "the segment is in fallback mode");
  }
  st = resil_breaker_get_metrics_sized(br, out, struct_size);
  resil_breaker_free(br);
  return st;
}

size_t resil_breaker_events_sized(resil_breaker *br, resil_breaker_event *out,
                                  size_t max, size_t elem_size) {
  if (!valid(br) || !out || elem_size < EVENT_MIN_SIZE ||
      elem_size > sizeof(resil_breaker_event) + RESIL__SIZED_SLACK)
    return 0;
  lock_br(br);
  uint64_t held = br->ev_total < br->event_cap ? br->ev_total : br->event_cap;
  size_t n = held < max ? (size_t)held : max;
  uint64_t first = br->ev_total - n + 1; /* seq of the oldest copied */
  for (size_t i = 0; i < n; i++) {
    uint64_t seq = first + i;
    const packed_event *pe = &ring(br)[(seq - 1) % br->event_cap];
    resil_breaker_event e;
    memset(&e, 0, sizeof e);
    e.struct_size = sizeof e;
    e.seq = seq;
    e.time_ns = pe->time_ns;
    e.kind = (resil_breaker_event_kind)pe->kind;
    e.from = (resil_breaker_state_kind)pe->from;
    e.to = (resil_breaker_state_kind)pe->to;
    e.cause = (resil_breaker_cause)pe->cause;
    e.ramp_share = (double)pe->share / (double)SHARE_ONE;
    resil__sized_out((char *)out + i * elem_size, elem_size, &e, sizeof e);
  }
  unlock_br(br);
  return n;
}

/* ---- listeners ------------------------------------------------------------
 */

resil_status resil_breaker_listener_add(resil_breaker *br,
                                        resil_breaker_listener_fn fn,
                                        void *user) {
  if (!valid(br))
    return RESIL_EMISUSE;
  if (!fn)
    return RESIL_EINVAL;
  listener *fresh = NULL;
  uint32_t fresh_cap = 0;
  for (;;) {
    lock_br(br);
    if (br->nls >= RESIL_BREAKER_MAX_LISTENERS) {
      unlock_br(br);
      resil__free(br->alloc, fresh);
      return RESIL_ESTATE;
    }
    listener *old = NULL;
    if (br->nls == br->ls_cap && fresh && fresh_cap > br->ls_cap) {
      if (br->nls)
        memcpy(fresh, br->ls, br->nls * sizeof *fresh);
      old = br->ls;
      br->ls = fresh;
      br->ls_cap = fresh_cap;
      fresh = NULL;
    }
    if (br->nls < br->ls_cap) {
      br->ls[br->nls].fn = fn;
      br->ls[br->nls].user = user;
      br->nls++;
      unlock_br(br);
      /* Deliveries copy the list under the lock, so nobody still reads the
       * old array. */
      resil__free(br->alloc, old);
      resil__free(br->alloc, fresh);
      return RESIL_OK;
    }
    /* Grow outside the lock: the allocator is the caller's code. */
    uint32_t want = br->ls_cap ? br->ls_cap * 2 : 2;
    if (want > RESIL_BREAKER_MAX_LISTENERS)
      want = RESIL_BREAKER_MAX_LISTENERS;
    unlock_br(br);
    resil__free(br->alloc, fresh);
    fresh = resil__alloc(br->alloc, want * sizeof *fresh);
    if (!fresh)
      return RESIL_ENOMEM;
    fresh_cap = want;
  }
}

/* Removal must guarantee that the listener is not running when it returns.
 * Each delivery counts itself in deliv[phase] for the phase current when it
 * copied the list. A remover flips the phase, so later deliveries (which
 * cannot see the removed listener) count in the other slot, then waits for
 * the old slot to drain: the wait ends even under a steady stream of
 * events. Removers are serialized by remove_busy so the phases never mix. */
resil_status resil_breaker_listener_remove(resil_breaker *br,
                                           resil_breaker_listener_fn fn,
                                           void *user) {
  if (!valid(br))
    return RESIL_EMISUSE;
  lock_br(br);
  while (br->remove_busy && tl_delivering == 0) {
    unlock_br(br);
    sched_yield();
    lock_br(br);
  }
  uint32_t i = 0;
  while (i < br->nls && !(br->ls[i].fn == fn && br->ls[i].user == user))
    i++;
  if (i == br->nls) {
    unlock_br(br);
    return RESIL_EINVAL;
  }
  memmove(&br->ls[i], &br->ls[i + 1], (br->nls - i - 1) * sizeof *br->ls);
  br->nls--;
  if (tl_delivering > 0) {
    /* Inside a listener: waiting could wait for this very delivery. */
    unlock_br(br);
    return RESIL_OK;
  }
  br->remove_busy = 1;
  uint32_t old = br->phase;
  br->phase ^= 1u;
  unlock_br(br);
  while (atomic_load_explicit(&br->deliv[old], memory_order_acquire) != 0)
    sched_yield();
  lock_br(br);
  br->remove_busy = 0;
  unlock_br(br);
  return RESIL_OK;
}
