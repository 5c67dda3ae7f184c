/* Rate limiter: Resilience4j AtomicRateLimiter semantics, one 64-bit state
 * word.
 *
 * State packing. `state` holds the cycle the permits belong to and the
 * permits left in it:
 *
 *   bits 63..32  cycle tag: the low 32 bits of the cycle number
 *   bits 31..0   permits, two's-complement int32 (negative = owed by
 *                coming cycles to callers that reserved ahead)
 *
 * The constructor bounds the debt (limit × (timeout / period + 1) fits in
 * 31 bits), so permits never overflow: a reservation is granted only when
 * the k-th coming cycle covers it and k <= timeout / period + 1.
 *
 * Cycle wraparound. With a 500 ns period a 32-bit cycle number
 * wraps every 36 minutes, so the tag alone cannot say how many cycles passed
 * while the limiter was idle. `epoch` holds the full 64-bit number of the
 * newest cycle any thread is moving the state to: a thread that advances the
 * state raises `epoch` (atomic max) BEFORE its compare-and-swap, so a reader
 * that loads `state` and then `epoch` never sees an epoch below the state's
 * cycle. It takes as the state's cycle the largest number not above `epoch`
 * that carries the tag. That is exact unless the epoch is 2^32 or more
 * cycles ahead, which happens only in the instant after an idle gap of 2^32
 * cycles, between the advancing thread's raise and its swap. A reader in
 * that instant takes the state for newer than it is and refills less than
 * it could: permits may be under-issued for a moment, never over-issued.
 *
 * The hot path (a permit is free in the state's cycle, take_now) is one
 * clock read (coarse for periods of 1 s and more on Linux, see rl_now), two
 * atomic loads, one compare-and-swap and a bump of the calling thread's
 * counter shard (core/shard.h: no atomic read-modify-write), and no
 * division. A refusal writes nothing to the state. A chain whose
 * breaker layer sits directly above the limiter on the same clock passes
 * the breaker's reading to resil__ratelimiter_enter (ratelimit_int.h)
 * instead, when it is as fresh as the limiter needs.
 *
 * A limiter on a backend (resil_ratelimiter_new_backed, Since 0.2) carries
 * another magic, RESIL_MAGIC_RATELIM_BE, and no permits in its own state.
 * Every inline fast path above checks for RESIL_MAGIC_RATELIM (or finds no
 * permit), so such a limiter always lands in the out-of-line paths, which
 * hand the decision to the backend (reserve_other): the local limiter's
 * hot path pays nothing for backends. resil__ratelimiter_clock() is NULL
 * for it, so a chain runs it through resil_ratelimiter_run (its layer's
 * run) rather than the split path, which reads the local state. */
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "core/internal.h"
#include "core/shard.h"
#include "ratelimit/ratelimit_int.h"
#include "resil/ratelimit.h"
#include "shared/shared_int.h"

#define RL_LIMIT_MAX INT64_C(2147483647)

/* The state, the read-only parameters and the counters are all touched by
 * every call, so they are kept together rather than on separate cache lines
 * (and the allocator gives no alignment beyond malloc's anyway). */
/* The state every call changes: in the handle (`own`), or in a slot of a
 * shared segment (words 0, 1, 2: see resil_ratelimiter_new), where other
 * processes change it with the same compare-and-swaps. start_ns is written
 * once, when the slot is created, and only read after. */
typedef struct rl_state {
  _Atomic uint64_t state;
  _Atomic int64_t epoch;
  int64_t start_ns; /* clock time at which cycle 0 began */
} rl_state;

_Static_assert(sizeof(rl_state) == 3 * sizeof(uint64_t) &&
                   sizeof(_Atomic uint64_t) == sizeof(uint64_t),
               "rl_state is three 64-bit words of a shared slot");

struct resil_ratelimiter {
  rl_state *st; /* &own, or the shared slot's words */
  unsigned magic;
  int64_t limit;
  int64_t period_ns;
  int64_t timeout_ns;
  int64_t start_ns; /* st->start_ns, read once */
  int64_t max_cycle; /* INT64_MAX / period_ns (see cycle_of) */
  const resil_clock *clock;
  int coarse; /* cycles are read on the clock's coarse reading (see rl_now) */
  /* The reading rl_now takes: the clock's coarse_ns when `coarse`, else its
   * now_ns, and the clock's self. */
  int64_t (*cycle_ns)(void *self);
  void *clock_self;
  const resil_allocator *alloc;
  char *name;
  /* Granted at once, reserved ahead, refused (C_* below): per-thread
   * shards, bumped on every acquire. Not ordered with the state or with
   * each other (nor were they as separate atomics). */
  resil__shards counts;
  _Atomic uint64_t n_cancelled;
  _Atomic uint64_t n_waiting; /* callers sleeping in acquire_wait now */
  resil_shared *shared; /* the segment st points into (a reference), or NULL */
  rl_state own;
  resil_ratelimiter_backend be; /* magic RESIL_MAGIC_RATELIM_BE only */
};

/* A live limiter, local or on a backend. */
static inline int rl_valid(const resil_ratelimiter *rl) {
  return rl && (rl->magic == RESIL_MAGIC_RATELIM || rl->magic == RESIL_MAGIC_RATELIM_BE);
}

/* resil_ratelimiter.counts */
enum { C_PERMITTED, C_RESERVED, C_REFUSED, C_COUNT };

static inline uint64_t pack(int64_t cycle, int64_t permits) {
  return ((uint64_t)(uint32_t)cycle << 32) | (uint64_t)(uint32_t)(int32_t)permits;
}

static inline int32_t unpack_permits(uint64_t s) {
  return (int32_t)(uint32_t)(s & 0xffffffffu);
}

/* The full cycle number of a state word, given the epoch loaded after it:
 * the largest number not above the epoch whose low 32 bits are the tag. */
static inline int64_t unpack_cycle(uint64_t s, int64_t epoch) {
  uint32_t tag = (uint32_t)(s >> 32);
  return epoch - (int64_t)(uint32_t)((uint32_t)epoch - tag);
}

static inline void raise_epoch(resil_ratelimiter *rl, int64_t cycle) {
  int64_t e = atomic_load_explicit(&rl->st->epoch, memory_order_relaxed);
  while (e < cycle &&
         !atomic_compare_exchange_weak_explicit(&rl->st->epoch, &e, cycle,
                                                memory_order_seq_cst,
                                                memory_order_relaxed)) {
  }
}

/* Permits after refilling `elapsed` cycles: each adds the limit, and a cycle
 * never starts with more than the limit. Saturates instead of overflowing
 * after long idle gaps. */
static inline int64_t refill(int64_t permits, int64_t elapsed, int64_t limit) {
  if (elapsed <= 0) return permits;
  int64_t missing = limit - permits; /* >= 0 */
  if (elapsed >= (missing + limit - 1) / limit) return limit;
  return permits + elapsed * limit;
}

/* Nanoseconds from `rel` (time since start) until `n` permits are covered,
 * given `p` permits left in cycle `c` (p < n). The next cycle starts at
 * (c + 1) × period; every further cycle adds `limit`. Saturates. */
static int64_t wait_for(const resil_ratelimiter *rl, int64_t rel, int64_t c,
                        int64_t p, int64_t n) {
  int64_t next_start = resil__sat_mul(resil__sat_add(c, 1), rl->period_ns);
  int64_t to_next = next_start - rel;
  int64_t need_after_next = n - (p + rl->limit); /* may be <= 0 */
  if (need_after_next <= 0) return to_next;
  int64_t more_cycles = (need_after_next + rl->limit - 1) / rl->limit;
  return resil__sat_add(to_next, resil__sat_mul(more_cycles, rl->period_ns));
}

/* The time cycles are counted on. When the period is at least 100 times
 * the coarse clock's resolution, the coarse reading (a few ns instead of
 * ~30 ns) is used: it lags real time by at most one resolution, so a new
 * cycle's permits are handed out at most 1 % of a period late and never
 * early, and a computed wait is never shorter than the real one. The
 * deadline is always read on the precise clock (remaining_ns). */
static inline int64_t rl_now(const resil_ratelimiter *rl) {
  return rl->cycle_ns(rl->clock_self);
}

/* The cycle `rel` (time since start) falls in: rel / period. `hint` is a
 * cycle the caller expects it to be (the state's): checking it costs a
 * multiplication, the division it saves costs tens of cycles, and nearly
 * every call falls in the state's cycle. The hint only saves work: the
 * result is rel / period whatever it is. */
static inline int64_t cycle_of(const resil_ratelimiter *rl, int64_t rel,
                               int64_t hint) {
  /* max_cycle = INT64_MAX / period: hint * period cannot overflow. */
  if (RESIL_LIKELY(hint >= 0 && hint <= rl->max_cycle)) {
    int64_t off = rel - hint * rl->period_ns;
    if (off >= 0 && off < rl->period_ns) return hint;
  }
  return rel / rl->period_ns;
}

static inline int64_t rel_now(const resil_ratelimiter *rl, int64_t now) {
  int64_t rel = now - rl->start_ns;
  return rel > 0 ? rel : 0; /* a clock that moved back stays in cycle 0 */
}

/* The 0.1 layout ends with `alloc`. */
#define RL_CONFIG_MIN_SIZE                                                     \
  (offsetof(resil_ratelimiter_config, alloc) + sizeof(const resil_allocator *))

static void config_defaults(resil_ratelimiter_config *cfg) {
  memset(cfg, 0, sizeof *cfg);
  cfg->struct_size = sizeof *cfg;
  cfg->name = "ratelimiter";
  cfg->limit_for_period = 50;
  cfg->refresh_period_ns = RESIL_NS_PER_S;
  cfg->timeout_ns = 5 * RESIL_NS_PER_S;
  cfg->clock = NULL;
  cfg->alloc = NULL;
  cfg->shared = NULL;
}

void resil_ratelimiter_config_init_sized(resil_ratelimiter_config *cfg,
                                         size_t n) {
  if (!cfg) return;
  resil_ratelimiter_config full;
  config_defaults(&full);
  resil__sized_out(cfg, n, &full, sizeof full);
}

static resil_status validate(const resil_ratelimiter_config *cfg,
                             resil_error *err) {
  resil_status st;
  if ((st = resil__check_range(err, "limit_for_period", cfg->limit_for_period,
                               1, RL_LIMIT_MAX)))
    return st;
  if ((st = resil__check_ns(err, "refresh_period_ns", cfg->refresh_period_ns,
                            1, INT64_MAX)))
    return st;
  if ((st = resil__check_ns(err, "timeout_ns", cfg->timeout_ns, 0, INT64_MAX)))
    return st;
  /* The largest timeout whose debt fits: (timeout / period + 1) × limit <=
   * 2^31 - 1, i.e. timeout / period <= (2^31 - 1) / limit - 1. */
  int64_t max_cycles = RL_LIMIT_MAX / cfg->limit_for_period - 1;
  int64_t max_timeout = resil__sat_add(
      resil__sat_mul(max_cycles, cfg->refresh_period_ns),
      cfg->refresh_period_ns - 1);
  if (cfg->timeout_ns > max_timeout) {
    char what[128], hi[32];
    snprintf(what, sizeof what,
             "0 ns..%s (limit_for_period x (timeout_ns / refresh_period_ns + 1) "
             "<= 2^31-1)",
             resil__fmt_ns(hi, sizeof hi, max_timeout));
    return resil__err_range_ns(err, "timeout_ns", 0, max_timeout,
                               cfg->timeout_ns, what);
  }
  return RESIL_OK;
}

/* ---- shared state (DESIGN §8.1) -------------------------------------------
 *
 * With cfg.shared the state words (rl_state) live in the segment's slot
 * of (ratelimiter, name), created with a full first cycle starting now;
 * every process runs the same code on them. What must agree across
 * processes is recorded in the slot and compared on attach. */
typedef struct rl_shared_rec {
  int64_t limit_for_period;
  int64_t refresh_period_ns;
} rl_shared_rec;

static const resil__shared_field rl_shared_fields[] = {
    {"limit_for_period", offsetof(rl_shared_rec, limit_for_period), sizeof(int64_t)},
    {"refresh_period_ns", offsetof(rl_shared_rec, refresh_period_ns), sizeof(int64_t)},
};

/* Points rl->st into the segment, or leaves it on rl->own after a counted
 * fallback; an error when the segment is required or the config differs. */
static resil_status use_shared(resil_ratelimiter *rl,
                               const resil_ratelimiter_config *cfg,
                               resil_error *err) {
  resil_shared *seg = cfg->shared;
  rl_shared_rec rec;
  memset(&rec, 0, sizeof rec);
  rec.limit_for_period = rl->limit;
  rec.refresh_period_ns = rl->period_ns;
  const uint64_t init[3] = {pack(0, rl->limit), 0, (uint64_t)rl->own.start_ns};
  resil__shared_req q;
  memset(&q, 0, sizeof q);
  q.kind = RESIL__SHK_RATELIMITER;
  q.name = rl->name;
  q.cfg = &rec;
  q.cfg_len = sizeof rec;
  q.fields = rl_shared_fields;
  q.nfields = sizeof rl_shared_fields / sizeof rl_shared_fields[0];
  q.init = init;
  q.init_words = 3;
  uint64_t *words = NULL;
  resil_status st = resil__shared_join(seg, cfg->clock, "limiter", &q, &words, err);
  if (st == RESIL_OK && words) {
    rl->st = (rl_state *)(void *)words;
    rl->shared = seg;
  }
  return st;
}

/* resil_ratelimiter_new, and _new_backed when be is not NULL (be checked
 * by the caller; its free is the caller's on failure). */
static resil_status create(const resil_ratelimiter_config *ucfg,
                           const resil_ratelimiter_backend *be,
                           resil_ratelimiter **out, resil_error *err) {
  if (!ucfg) return resil__err(err, RESIL_EINVAL, "cfg", "must not be NULL");
  if (!out) return resil__err(err, RESIL_EINVAL, "out", "must not be NULL");
  resil_ratelimiter_config full;
  const resil_ratelimiter_config *cfg = &full;
  config_defaults(&full);
  resil_status st = resil__sized_in(&full, sizeof full, ucfg, RL_CONFIG_MIN_SIZE,
                                    "resil_ratelimiter_config",
                                    "resil_ratelimiter_config_init", err);
  if (st != RESIL_OK) return st;
  st = validate(cfg, err);
  if (st != RESIL_OK) return st;
  if (be && cfg->shared)
    return resil__err(err, RESIL_EINVAL, "shared",
                      "must be NULL for a limiter on a backend (the backend keeps the state)");
  resil_ratelimiter *rl = resil__alloc(cfg->alloc, sizeof *rl);
  if (!rl) return resil__err(err, RESIL_ENOMEM, NULL, "out of memory");
  memset(rl, 0, sizeof *rl);
  int ok;
  rl->name = resil__strdup(cfg->alloc, cfg->name ? cfg->name : "ratelimiter", &ok);
  if (!ok) {
    resil__free(cfg->alloc, rl);
    return resil__err(err, RESIL_ENOMEM, NULL, "out of memory");
  }
  if (resil__shards_init(&rl->counts, cfg->alloc, C_COUNT,
                         RESIL__SHARDS_DEFAULT_SLOTS) != RESIL_OK) {
    resil__free(cfg->alloc, rl->name);
    resil__free(cfg->alloc, rl);
    return resil__err(err, RESIL_ENOMEM, NULL, "out of memory");
  }
  rl->limit = cfg->limit_for_period;
  rl->period_ns = cfg->refresh_period_ns;
  rl->timeout_ns = cfg->timeout_ns;
  rl->max_cycle = INT64_MAX / rl->period_ns;
  rl->clock = resil__clock(cfg->clock);
  rl->alloc = cfg->alloc;
  rl->coarse = rl->clock->coarse_ns != NULL && rl->clock->coarse_resolution_ns > 0 &&
               rl->period_ns / 100 >= rl->clock->coarse_resolution_ns;
  rl->cycle_ns = rl->coarse ? rl->clock->coarse_ns : rl->clock->now_ns;
  rl->clock_self = rl->clock->self;
  rl->own.start_ns = rl_now(rl);
  /* A backed limiter's own state has no permits: nothing takes one. */
  atomic_init(&rl->own.state, pack(0, be ? 0 : rl->limit));
  atomic_init(&rl->own.epoch, 0);
  rl->st = &rl->own;
  if (cfg->shared && (st = use_shared(rl, cfg, err)) != RESIL_OK) {
    resil__shards_free(&rl->counts);
    resil__free(cfg->alloc, rl->name);
    resil__free(cfg->alloc, rl);
    return st;
  }
  rl->start_ns = rl->st->start_ns;
  atomic_init(&rl->n_cancelled, 0);
  atomic_init(&rl->n_waiting, 0);
  if (be) rl->be = *be;
  rl->magic = be ? RESIL_MAGIC_RATELIM_BE : RESIL_MAGIC_RATELIM;
  *out = rl;
  return RESIL_OK;
}

resil_status resil_ratelimiter_new(const resil_ratelimiter_config *cfg,
                                   resil_ratelimiter **out, resil_error *err) {
  return create(cfg, NULL, out, err);
}

void resil_ratelimiter_backend_init_sized(resil_ratelimiter_backend *be, size_t n) {
  if (!be) return;
  resil_ratelimiter_backend full;
  memset(&full, 0, sizeof full);
  full.struct_size = sizeof full;
  resil__sized_out(be, n, &full, sizeof full);
}

resil_status resil_ratelimiter_new_backed(const resil_ratelimiter_config *cfg,
                                          const resil_ratelimiter_backend *ube,
                                          resil_ratelimiter **out, resil_error *err) {
  if (!ube) return resil__err(err, RESIL_EINVAL, "backend", "must not be NULL");
  resil_ratelimiter_backend be;
  memset(&be, 0, sizeof be);
  be.struct_size = sizeof be;
  /* A backend of 0.2 before reserve_async was added is accepted. */
  resil_status st = resil__sized_in(&be, sizeof be, ube,
                                    offsetof(resil_ratelimiter_backend, reserve_async),
                                    "resil_ratelimiter_backend",
                                    "resil_ratelimiter_backend_init", err);
  if (st != RESIL_OK) return st;
  if (!be.reserve)
    return resil__err(err, RESIL_EINVAL, "backend.reserve", "must not be NULL");
  if (be.reserve_async && !be.withdraw)
    return resil__err(err, RESIL_EINVAL, "backend.withdraw", "must be set with reserve_async");
  st = create(cfg, &be, out, err);
  if (st != RESIL_OK && be.free) be.free(be.self);
  return st;
}

const resil_ratelimiter_backend *resil_ratelimiter_backend_of(const resil_ratelimiter *rl) {
  return rl && rl->magic == RESIL_MAGIC_RATELIM_BE ? &rl->be : NULL;
}

void resil_ratelimiter_free(resil_ratelimiter *rl) {
  if (!rl_valid(rl)) return;
  if (rl->magic == RESIL_MAGIC_RATELIM_BE && rl->be.free) rl->be.free(rl->be.self);
  rl->magic = RESIL_MAGIC_DEAD;
  const resil_allocator *a = rl->alloc;
  resil__shards_free(&rl->counts);
  if (rl->shared) resil__shared_release(rl->shared);
  resil__free(a, rl->name);
  resil__free(a, rl);
}

/* The ctx's remaining deadline, reusing the limiter's clock read when the
 * ctx measures its deadline on the same clock. */
static inline int64_t remaining_ns(const resil_ratelimiter *rl,
                                   const resil_ctx *ctx, int64_t now,
                                   int precise) {
  if (!ctx || ctx->deadline_ns == RESIL_NO_DEADLINE) return INT64_MAX;
  if (precise && resil__clock(ctx->clock) == rl->clock) {
    int64_t left = ctx->deadline_ns - now;
    return left > 0 ? left : 0;
  }
  return resil_ctx_remaining_ns(ctx);
}

static inline void set_why(resil_reason *why, resil_reason r) {
  if (why) *why = r;
}

/* The caller's arguments checked; *c is the ctx to read (NULL: none). */
static inline int args_ok(const resil_ratelimiter *rl, int permits,
                          const resil_ctx *ctx, resil_ctx *lc,
                          const resil_ctx **c, int64_t *wait_ns,
                          resil_reason *why) {
  *c = NULL;
  if (RESIL_UNLIKELY(!rl || rl->magic != RESIL_MAGIC_RATELIM || permits < 1 ||
                     (ctx && !(*c = resil__ctx_in(lc, ctx))))) {
    if (wait_ns) *wait_ns = 0;
    set_why(why, RESIL_REASON_LOCAL_ERROR);
    return 0;
  }
  return 1;
}

static resil_decision reserve_slow(resil_ratelimiter *rl, int64_t n,
                                   const resil_ctx *c, int64_t now, int precise,
                                   int64_t rel, uint64_t old, int64_t epoch,
                                   int64_t *wait_ns, resil_reason *why);

/* The case nearly every call is: n permits free in the state's own cycle,
 * which `rel` falls in. They are taken with the tag kept (no refill, no
 * epoch to raise) and no wait, so there is no deadline to check: a grant
 * without a wait is never refused. 1 when taken. 0 when the general path
 * must decide, with *old and *epoch loaded for it (a failed swap reloaded
 * them). */
#if defined(__GNUC__)
__attribute__((always_inline))
#endif
static inline int take_now(resil_ratelimiter *rl, int64_t rel, int64_t n,
                           uint64_t *old, int64_t *epoch) {
  *old = atomic_load_explicit(&rl->st->state, memory_order_acquire);
  *epoch = atomic_load_explicit(&rl->st->epoch, memory_order_acquire);
  const int64_t sc = unpack_cycle(*old, *epoch);
  /* As cycle_of's hint check: sc * period cannot overflow. */
  if (RESIL_UNLIKELY(unpack_permits(*old) < n || sc < 0 || sc > rl->max_cycle))
    return 0;
  const int64_t off = rel - sc * rl->period_ns;
  if (RESIL_UNLIKELY(off < 0 || off >= rl->period_ns)) return 0;
  /* permits >= n >= 1: subtracting n leaves the tag bits alone. */
  if (RESIL_LIKELY(atomic_compare_exchange_strong_explicit(
          &rl->st->state, old, *old - (uint64_t)n, memory_order_acq_rel,
          memory_order_acquire)))
    return 1;
  *epoch = atomic_load_explicit(&rl->st->epoch, memory_order_acquire);
  return 0;
}

/* reserve with the arguments checked and `now` read on the limiter's
 * clock: its coarse reading, or the precise one when `precise` is set
 * (which the deadline check may then reuse). */
#if defined(__GNUC__)
__attribute__((always_inline))
#endif
static inline resil_decision reserve_now(resil_ratelimiter *rl, int permits,
                                  const resil_ctx *c, int64_t now, int precise,
                                  int64_t *wait_ns, resil_reason *why) {
  const int64_t rel = rel_now(rl, now);
  const int64_t n = permits;
  uint64_t old;
  int64_t epoch;
  if (RESIL_LIKELY(take_now(rl, rel, n, &old, &epoch))) {
    if (wait_ns) *wait_ns = 0;
    set_why(why, RESIL_REASON_OK);
    resil__shards_add(&rl->counts, C_PERMITTED, 1);
    return RESIL_DECISION_GO;
  }
  return reserve_slow(rl, n, c, now, precise, rel, old, epoch, wait_ns, why);
}

/* reserve_now when take_now could not take the permits: old and epoch as
 * it loaded them. */
__attribute__((noinline)) static resil_decision
reserve_slow(resil_ratelimiter *rl, int64_t n, const resil_ctx *c, int64_t now,
             int precise, int64_t rel, uint64_t old, int64_t epoch,
             int64_t *wait_ns, resil_reason *why) {
  int64_t limit_ns = rl->timeout_ns;
  int64_t left = remaining_ns(rl, c, now, precise);
  if (left < limit_ns) limit_ns = left;
  const int64_t cur = cycle_of(rl, rel, unpack_cycle(old, epoch));
  for (;;) {
    int64_t sc = unpack_cycle(old, epoch);
    /* Another thread with a later clock read may have moved the state past
     * our cycle: then its cycle stands and nothing is refilled. */
    int64_t cy = cur > sc ? cur : sc;
    int64_t p = refill(unpack_permits(old), cy - sc, rl->limit);
    int64_t wait = p >= n ? 0 : wait_for(rl, rel, cy, p, n);
    if (wait > limit_ns) {
      resil__shards_add(&rl->counts, C_REFUSED, 1);
      if (wait_ns) *wait_ns = wait;
      /* Within the timeout, refused only because the deadline is shorter. */
      set_why(why, wait <= rl->timeout_ns ? RESIL_REASON_DEADLINE
                                          : RESIL_REASON_RATE_LIMITED);
      return RESIL_DECISION_DENY;
    }
    if (cy > sc) raise_epoch(rl, cy);
    if (atomic_compare_exchange_weak_explicit(&rl->st->state, &old, pack(cy, p - n),
                                              memory_order_acq_rel,
                                              memory_order_acquire)) {
      if (wait_ns) *wait_ns = wait;
      set_why(why, RESIL_REASON_OK);
      if (wait == 0) {
        resil__shards_add(&rl->counts, C_PERMITTED, 1);
        return RESIL_DECISION_GO;
      }
      resil__shards_add(&rl->counts, C_RESERVED, 1);
      return RESIL_DECISION_WAIT;
    }
    /* The failed swap loaded the new state; the epoch that interprets it
     * must be read after it. */
    epoch = atomic_load_explicit(&rl->st->epoch, memory_order_acquire);
  }
}

/* The bound on a backed limiter's reservation: min of timeout_ns and c's
 * remaining deadline. */
static int64_t be_bound(const resil_ratelimiter *rl, const resil_ctx *c) {
  int64_t limit_ns = rl->timeout_ns;
  if (c && c->deadline_ns != RESIL_NO_DEADLINE) {
    int64_t left = resil_ctx_remaining_ns(c);
    if (left < limit_ns) limit_ns = left;
  }
  return limit_ns;
}

/* What a backend answered (d, w, r; limit_ns the bound it was given), as
 * the limiter reports it: the reason of a refusal and the counters are the
 * limiter's (ratelimit.h, backends). The blocking and the asynchronous
 * paths both end here. */
static resil_decision be_finish(resil_ratelimiter *rl, resil_decision d, int64_t w,
                                resil_reason r, int64_t limit_ns, int64_t *wait_ns,
                                resil_reason *why) {
  if (d == RESIL_DECISION_WAIT && w <= 0) d = RESIL_DECISION_GO;
  if (d == RESIL_DECISION_GO || d == RESIL_DECISION_WAIT) {
    if (d == RESIL_DECISION_GO) w = 0;
    resil__shards_add(&rl->counts, d == RESIL_DECISION_GO ? C_PERMITTED : C_RESERVED, 1);
    if (wait_ns) *wait_ns = w;
    set_why(why, RESIL_REASON_OK);
    return d;
  }
  if (r == RESIL_REASON_OK || r == RESIL_REASON_NONE) r = RESIL_REASON_LOCAL_ERROR;
  /* Within the timeout, refused only because the deadline is shorter. */
  if (r == RESIL_REASON_RATE_LIMITED && w > limit_ns && w <= rl->timeout_ns)
    r = RESIL_REASON_DEADLINE;
  if (r != RESIL_REASON_RATE_LIMITED && r != RESIL_REASON_DEADLINE) w = 0;
  resil__shards_add(&rl->counts, C_REFUSED, 1);
  if (wait_ns) *wait_ns = w;
  set_why(why, r);
  return RESIL_DECISION_DENY;
}

/* reserve_impl when args_ok refused: a misuse (args_ok said so), or a
 * limiter on a backend, which decides. */
__attribute__((noinline)) static resil_decision
reserve_other(resil_ratelimiter *rl, int permits, const resil_ctx *ctx,
              int64_t *wait_ns, resil_reason *why) {
  resil_ctx lc;
  const resil_ctx *c = NULL;
  if (!rl || rl->magic != RESIL_MAGIC_RATELIM_BE || permits < 1 ||
      (ctx && !(c = resil__ctx_in(&lc, ctx))))
    return RESIL_DECISION_DENY; /* args_ok wrote *wait_ns and *why */
  int64_t limit_ns = be_bound(rl, c);
  int64_t w = 0;
  resil_reason r = RESIL_REASON_LOCAL_ERROR;
  resil_decision d = rl->be.reserve(rl->be.self, permits, c, limit_ns, &w, &r);
  return be_finish(rl, d, w, r, limit_ns, wait_ns, why);
}

/* ---- asynchronous decisions (ratelimit.h) ------------------------------------ */

int resil_ratelimiter_is_async(const resil_ratelimiter *rl) {
  return rl && rl->magic == RESIL_MAGIC_RATELIM_BE && rl->be.reserve_async;
}

void resil_ratelimiter_async_init_sized(resil_ratelimiter_async *q, size_t n) {
  if (!q) return;
  resil_ratelimiter_async full;
  memset(&full, 0, sizeof full);
  full.struct_size = sizeof full;
  resil__sized_out(q, n, &full, sizeof full);
}

static void async_answer(resil_ratelimiter_request *req, resil_decision d, int64_t w,
                         resil_reason r) {
  resil_ratelimiter_async *q =
      (resil_ratelimiter_async *)(void *)((char *)req - offsetof(resil_ratelimiter_async, req));
  q->pending = 0;
  int64_t wait = 0;
  resil_reason why = RESIL_REASON_OK;
  d = be_finish(q->rl, d, w, r, q->limit_ns, &wait, &why);
  q->done(q, d, wait, why);
}

int resil_ratelimiter_reserve_async(resil_ratelimiter *rl, const resil_ratelimiter_loop *loop,
                                    resil_ratelimiter_async *q, int permits, const resil_ctx *ctx,
                                    resil_decision *d, int64_t *wait_ns, resil_reason *why) {
  resil_ctx lc;
  const resil_ctx *c = NULL;
  if (!resil_ratelimiter_is_async(rl) || !q || q->struct_size < sizeof *q || !q->done ||
      !loop || permits < 1 ||
      (ctx && !(c = resil__ctx_in(&lc, ctx))) || (ctx && c != ctx)) {
    *d = resil_ratelimiter_reserve(rl, permits, ctx, wait_ns, why);
    return 0;
  }
  q->rl = rl;
  q->pending = 0;
  q->limit_ns = be_bound(rl, ctx);
  memset(&q->req, 0, sizeof q->req);
  q->req.struct_size = sizeof q->req;
  q->req.permits = permits;
  q->req.ctx = ctx;
  q->req.max_wait_ns = q->limit_ns;
  q->req.answer = async_answer;
  int64_t w = 0;
  resil_reason r = RESIL_REASON_LOCAL_ERROR;
  resil_decision bd = RESIL_DECISION_DENY;
  if (rl->be.reserve_async(rl->be.self, loop, &q->req, &bd, &w, &r) == 1) {
    q->pending = 1;
    return 1;
  }
  *d = be_finish(rl, bd, w, r, q->limit_ns, wait_ns, why);
  return 0;
}

void resil_ratelimiter_withdraw_async(resil_ratelimiter_async *q) {
  if (!q || !q->pending) return;
  q->pending = 0;
  q->rl->be.withdraw(q->rl->be.self, &q->req);
}

/* resil_ratelimiter_reserve; now: a reading as resil__ratelimiter_reserve_at
 * takes one, or NULL (the limiter reads its clock). */
#if defined(__GNUC__)
__attribute__((always_inline))
#endif
static inline resil_decision reserve_impl(resil_ratelimiter *rl, int permits,
                                          const resil_ctx *ctx,
                                          const int64_t *now, int64_t *wait_ns,
                                          resil_reason *why) {
  resil_ctx lc;
  const resil_ctx *c;
  if (!args_ok(rl, permits, ctx, &lc, &c, wait_ns, why))
    return reserve_other(rl, permits, ctx, wait_ns, why);
  if (now) return reserve_now(rl, permits, c, *now, 1, wait_ns, why);
  return reserve_now(rl, permits, c, rl_now(rl), !rl->coarse, wait_ns, why);
}

resil_decision resil_ratelimiter_reserve(resil_ratelimiter *rl, int permits,
                                         const resil_ctx *ctx, int64_t *wait_ns,
                                         resil_reason *why) {
  return reserve_impl(rl, permits, ctx, NULL, wait_ns, why);
}

resil_decision resil__ratelimiter_reserve_at(resil_ratelimiter *rl, int permits,
                                             const resil_ctx *ctx, int64_t now,
                                             int64_t *wait_ns,
                                             resil_reason *why) {
  return reserve_impl(rl, permits, ctx, &now, wait_ns, why);
}

/* Gives back n reserved permits whose wait was cancelled. Adding them to the
 * current cycle is exact while their cycle has not begun (the debt they
 * created is cancelled); once it has, the cap at the limit keeps the cycle
 * from granting more than limit_for_period. */
static void give_back(resil_ratelimiter *rl, int64_t n) {
  if (rl->magic == RESIL_MAGIC_RATELIM_BE) {
    if (rl->be.give_back) rl->be.give_back(rl->be.self, (int)n);
    return;
  }
  const int64_t cur = rel_now(rl, rl_now(rl)) / rl->period_ns;
  uint64_t old = atomic_load_explicit(&rl->st->state, memory_order_acquire);
  int64_t epoch = atomic_load_explicit(&rl->st->epoch, memory_order_acquire);
  for (;;) {
    int64_t sc = unpack_cycle(old, epoch);
    int64_t c = cur > sc ? cur : sc;
    int64_t p = refill(unpack_permits(old), c - sc, rl->limit) + n;
    if (p > rl->limit) p = rl->limit;
    if (c > sc) raise_epoch(rl, c);
    if (atomic_compare_exchange_weak_explicit(&rl->st->state, &old, pack(c, p),
                                              memory_order_acq_rel,
                                              memory_order_acquire))
      return;
    epoch = atomic_load_explicit(&rl->st->epoch, memory_order_acquire);
  }
}

/* Waits `wait` ns for permits reserve() granted from a coming cycle. */
__attribute__((noinline)) static resil_decision
wait_reserved(resil_ratelimiter *rl, int permits, const resil_ctx *ctx,
              int64_t wait, resil_reason *why) {
  /* reserve() accepted ctx: it is either NULL or readable through
   * resil__ctx_in, whose cancel field exists in every accepted size. */
  resil_ctx lc;
  const resil_ctx *c = ctx ? resil__ctx_in(&lc, ctx) : NULL;
  atomic_fetch_add_explicit(&rl->n_waiting, 1, memory_order_relaxed);
  int cancelled = resil_clock_sleep_ns(rl->clock, wait, c ? c->cancel : NULL);
  atomic_fetch_sub_explicit(&rl->n_waiting, 1, memory_order_relaxed);
  if (cancelled) {
    give_back(rl, permits);
    atomic_fetch_add_explicit(&rl->n_cancelled, 1, memory_order_relaxed);
    set_why(why, RESIL_REASON_CANCELLED);
    return RESIL_DECISION_DENY;
  }
  return RESIL_DECISION_GO;
}

/* Reserve, then wait for reserved permits (any arguments). */
__attribute__((noinline)) static resil_decision
acquire_general(resil_ratelimiter *rl, int permits, const resil_ctx *ctx,
                const int64_t *now, resil_reason *why) {
  int64_t wait;
  resil_decision d = reserve_impl(rl, permits, ctx, now, &wait, why);
  if (RESIL_LIKELY(d != RESIL_DECISION_WAIT)) return d;
  return wait_reserved(rl, permits, ctx, wait, why);
}

/* acquire_wait after take_now missed, with what it and reserve_now read. */
__attribute__((noinline)) static resil_decision
acquire_missed(resil_ratelimiter *rl, int permits, const resil_ctx *ctx,
               int64_t now, int precise, int64_t rel, uint64_t old,
               int64_t epoch, resil_reason *why) {
  int64_t wait;
  resil_decision d = reserve_slow(rl, permits, ctx, now, precise, rel, old,
                                  epoch, &wait, why);
  if (RESIL_LIKELY(d != RESIL_DECISION_WAIT)) return d;
  return wait_reserved(rl, permits, ctx, wait, why);
}

/* take_now, and a grant counted. */
#if defined(__GNUC__)
__attribute__((always_inline))
#endif
static inline int take_counted(resil_ratelimiter *rl, int64_t rel, int64_t n,
                               uint64_t *old, int64_t *epoch) {
  if (RESIL_UNLIKELY(!take_now(rl, rel, n, old, epoch))) return 0;
  resil__shards_add(&rl->counts, C_PERMITTED, 1);
  return 1;
}

/* acquire_wait for a valid rl, permits >= 1 and a full-size ctx or none:
 * take_now inline, whose grant needs no wait, so neither the ctx's
 * deadline nor its token matters to it. */
#if defined(__GNUC__)
__attribute__((always_inline))
#endif
static inline resil_decision acquire_valid(resil_ratelimiter *rl, int permits,
                                           const resil_ctx *ctx,
                                           const int64_t *now,
                                           resil_reason *why) {
  const int64_t t = now ? *now : rl_now(rl);
  const int64_t rel = rel_now(rl, t);
  uint64_t old;
  int64_t epoch;
  if (RESIL_LIKELY(take_counted(rl, rel, permits, &old, &epoch))) {
    set_why(why, RESIL_REASON_OK);
    return RESIL_DECISION_GO;
  }
  return acquire_missed(rl, permits, ctx, t, now ? 1 : !rl->coarse, rel, old,
                        epoch, why);
}

/* Reserve, then wait for reserved permits. With valid arguments and a
 * full-size ctx (or none), take_now is tried inline: its grant needs no
 * wait, so neither the ctx's deadline nor its token matters to it. */
#if defined(__GNUC__)
__attribute__((always_inline))
#endif
static inline resil_decision acquire_wait(resil_ratelimiter *rl, int permits,
                                          const resil_ctx *ctx,
                                          const int64_t *now,
                                          resil_reason *why) {
  if (RESIL_LIKELY(rl && rl->magic == RESIL_MAGIC_RATELIM && permits >= 1 &&
                   (!ctx || ctx->struct_size == sizeof *ctx)))
    return acquire_valid(rl, permits, ctx, now, why);
  return acquire_general(rl, permits, ctx, now, why);
}

resil_decision resil_ratelimiter_acquire(resil_ratelimiter *rl, int permits,
                                         const resil_ctx *ctx,
                                         resil_reason *why) {
  return acquire_wait(rl, permits, ctx, NULL, why);
}

resil_decision resil__ratelimiter_acquire_at(resil_ratelimiter *rl, int permits,
                                             const resil_ctx *ctx, int64_t now,
                                             resil_reason *why) {
  return acquire_wait(rl, permits, ctx, &now, why);
}

const resil_clock *resil__ratelimiter_clock(const resil_ratelimiter *rl) {
  return rl && rl->magic == RESIL_MAGIC_RATELIM ? rl->clock : NULL;
}

static resil_outcome refused(resil_reason why);

/* The run form's permit: 1 to make the call, or 0 with *refusal the
 * outcome the run form ends with. */
#if defined(__GNUC__)
__attribute__((always_inline))
#endif
static inline int enter_run(resil_ratelimiter *rl, const resil_ctx *c,
                            const int64_t *now, resil_outcome *refusal) {
  resil_reason why;
  if (RESIL_LIKELY(acquire_wait(rl, 1, c, now, &why) == RESIL_DECISION_GO))
    return 1;
  *refusal = refused(why);
  return 0;
}

/* enter_run out of line: resil__ratelimiter_enter after take_now missed
 * (which changed nothing), from the start (a reading of its own when
 * `now` is NULL: a later one, as good). */
#if defined(__GNUC__)
__attribute__((noinline))
#endif
static int enter_again(resil_ratelimiter *rl, const resil_ctx *c,
                       const int64_t *now, resil_outcome *refusal) {
  return enter_run(rl, c, now, refusal);
}

/* resil_ratelimiter_run; now: a reading as resil__ratelimiter_acquire_at
 * takes one, or NULL (the limiter reads its clock). */
#if defined(__GNUC__)
__attribute__((always_inline))
#endif
static inline resil_outcome run_impl(resil_ratelimiter *rl, const resil_ctx *ctx,
                                     resil_call_fn fn, void *arg,
                                     const int64_t *now) {
  resil_ctx lc;
  const resil_ctx *c = resil__ctx_in(&lc, ctx);
  if (!fn || !rl_valid(rl) || !c)
    return resil_outcome_make(RESIL_NOT_SENT, RESIL_REASON_LOCAL_ERROR);
  if (!ctx) lc.clock = rl->clock; /* c == &lc: the defaults */
  resil_outcome o;
  if (enter_run(rl, c, now, &o)) return fn(arg, c);
  return o;
}

/* resil__ratelimiter_enter without a reading: its own, then the same. */
#if defined(__GNUC__)
__attribute__((noinline))
#endif
static int enter_read(resil_ratelimiter *rl, const resil_ctx *ctx,
                      resil_outcome *refusal) {
  uint64_t old;
  int64_t epoch;
  if (RESIL_LIKELY(take_counted(rl, rel_now(rl, rl_now(rl)), 1, &old, &epoch)))
    return 1;
  return enter_again(rl, ctx, NULL, refusal);
}

int resil__ratelimiter_enter(resil_ratelimiter *rl, const resil_ctx *ctx,
                             const int64_t *now, resil_outcome *refusal) {
  /* acquire_valid's grant inline; anything else through enter_run, and a
   * call without a reading through enter_read (tail calls: with a reading
   * there are no registers to save here). */
  if (!now) return enter_read(rl, ctx, refusal);
  uint64_t old;
  int64_t epoch;
  if (RESIL_LIKELY(take_counted(rl, rel_now(rl, *now), 1, &old, &epoch)))
    return 1;
  return enter_again(rl, ctx, now, refusal);
}

resil_outcome resil_ratelimiter_run(resil_ratelimiter *rl, const resil_ctx *ctx,
                                    resil_call_fn fn, void *arg) {
  return run_impl(rl, ctx, fn, arg, NULL);
}

int resil__ratelimiter_coarse(const resil_ratelimiter *rl) {
  return rl && rl->magic == RESIL_MAGIC_RATELIM && rl->coarse;
}

static resil_outcome refused(resil_reason why) {
  switch (why) {
  case RESIL_REASON_DEADLINE:
  case RESIL_REASON_RATE_LIMITED:
  case RESIL_REASON_RATE_LIMITER_UNAVAILABLE:
    return resil_outcome_make(RESIL_REJECTED, why);
  case RESIL_REASON_CANCELLED:
    return resil_outcome_make(RESIL_NOT_SENT, RESIL_REASON_CANCELLED);
  default:
    return resil_outcome_make(RESIL_NOT_SENT, RESIL_REASON_LOCAL_ERROR);
  }
}

/* Permits available now and the wait for one more, from one clock
 * reading. */
static int64_t read_now(const resil_ratelimiter *rl, int64_t *nanos_to_wait) {
  resil_ratelimiter *m = (resil_ratelimiter *)rl; /* atomics need non-const */
  if (rl->magic == RESIL_MAGIC_RATELIM_BE) {
    int64_t a = 0, w = 0;
    if (!rl->be.peek || rl->be.peek(rl->be.self, &a, &w) != 0) a = w = 0;
    if (nanos_to_wait) *nanos_to_wait = w;
    return a;
  }
  const int64_t rel = rel_now(rl, rl_now(rl));
  const int64_t cur = rel / rl->period_ns;
  uint64_t s = atomic_load_explicit(&m->st->state, memory_order_acquire);
  int64_t epoch = atomic_load_explicit(&m->st->epoch, memory_order_acquire);
  int64_t sc = unpack_cycle(s, epoch);
  int64_t c = cur > sc ? cur : sc;
  int64_t p = refill(unpack_permits(s), c - sc, rl->limit);
  if (nanos_to_wait) *nanos_to_wait = p >= 1 ? 0 : wait_for(rl, rel, c, p, 1);
  return p;
}

int64_t resil_ratelimiter_available(const resil_ratelimiter *rl) {
  if (!rl_valid(rl)) return 0;
  return read_now(rl, NULL);
}

int64_t resil_ratelimiter_nanos_to_wait(const resil_ratelimiter *rl) {
  if (!rl_valid(rl)) return 0;
  int64_t w;
  read_now(rl, &w);
  return w;
}

resil_status resil_ratelimiter_shared_peek(resil_shared *seg, const char *name,
                                           int64_t *available, int64_t *limit,
                                           resil_error *err) {
  if (!seg || !name)
    return resil__err(err, RESIL_EINVAL, seg ? "name" : "seg", "must not be NULL");
  rl_shared_rec rec;
  resil_status st = resil__shared_find_cfg(seg, RESIL__SHK_RATELIMITER, name, &rec,
                                           sizeof rec, err);
  if (st != RESIL_OK) return st;
  /* A limiter attached to the existing slot (never creates one: slots are
   * never freed, and a replacement in between is a mismatch error). */
  resil_ratelimiter_config c;
  resil_ratelimiter_config_init(&c);
  c.name = name;
  c.limit_for_period = rec.limit_for_period;
  c.refresh_period_ns = rec.refresh_period_ns;
  c.shared = seg;
  resil_ratelimiter *rl;
  if ((st = resil_ratelimiter_new(&c, &rl, err)) != RESIL_OK) return st;
  if (!rl->shared) { /* fell back (cannot happen on a live segment) */
    resil_ratelimiter_free(rl);
    return resil__err(err, RESIL_ESTATE, "shared", "the segment is in fallback mode");
  }
  if (available) *available = resil_ratelimiter_available(rl);
  if (limit) *limit = rec.limit_for_period;
  resil_ratelimiter_free(rl);
  return RESIL_OK;
}

resil_status resil_ratelimiter_get_metrics_sized(const resil_ratelimiter *rl,
                                                 resil_ratelimiter_metrics *dst,
                                                 size_t n) {
  if (!rl_valid(rl)) return RESIL_EMISUSE;
  if (!dst) return RESIL_EINVAL;
  resil_ratelimiter *m = (resil_ratelimiter *)rl;
  resil_ratelimiter_metrics full, *out = &full;
  memset(out, 0, sizeof *out);
  out->struct_size = sizeof *out;
  out->permitted = resil__shards_sum(&m->counts, C_PERMITTED);
  out->reserved = resil__shards_sum(&m->counts, C_RESERVED);
  out->refused = resil__shards_sum(&m->counts, C_REFUSED);
  out->cancelled = atomic_load_explicit(&m->n_cancelled, memory_order_relaxed);
  out->available = read_now(rl, &out->nanos_to_wait);
  out->waiting = atomic_load_explicit(&m->n_waiting, memory_order_relaxed);
  resil__sized_out(dst, n, &full, sizeof full);
  return RESIL_OK;
}

const char *resil_ratelimiter_name(const resil_ratelimiter *rl) {
  if (!rl_valid(rl)) return NULL;
  return rl->name;
}
