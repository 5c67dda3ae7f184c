/* resil_ratelimiter: periodic permits (DESIGN §2.4), the Resilience4j
 * AtomicRateLimiter model.
 *
 * Time is cut into cycles of `refresh_period_ns`, counted from the
 * limiter's creation. Each cycle grants `limit_for_period` permits; unused
 * permits do not carry over (a new cycle starts with at most the limit). A
 * call that finds no permit in the current cycle may reserve one from a
 * coming cycle when it will arrive within `timeout_ns` (and within the
 * call's remaining deadline): the permit is taken now and the caller waits
 * for the cycle it belongs to. When it cannot arrive in time the call is
 * refused AT ONCE and nothing is consumed (Resilience4j first waits out the
 * whole timeout; we do not, because the answer is already known).
 *
 *   resil_ratelimiter_config cfg;
 *   resil_ratelimiter_config_init(&cfg);
 *   cfg.limit_for_period = 2;
 *   cfg.refresh_period_ns = RESIL_H(1);
 *   cfg.timeout_ns = 0;                                     // fail fast
 *   resil_ratelimiter *rl;
 *   resil_error err;
 *   if (resil_ratelimiter_new(&cfg, &rl, &err) != RESIL_OK) ...
 *   if (resil_ratelimiter_acquire(rl, 1, NULL, NULL) == RESIL_DECISION_GO) ...
 *   resil_ratelimiter_free(rl);
 *
 * Permits are per instance; with cfg.shared the instance is shared by the
 * processes of the host (DESIGN §8.1): its state words live in the
 * segment and every process runs the same compare-and-swaps on them, so
 * the permits are exact across processes. The counters of
 * resil_ratelimiter_metrics (permitted, reserved, refused, cancelled,
 * waiting) stay per process; available and nanos_to_wait read the shared
 * state. A process killed at any instruction leaves the state word either
 * before or after its one compare-and-swap: a permit it took is spent, no
 * other is lost. A quota across hosts needs another store (DESIGN §8.2).
 *
 * Lock-free: the whole state (cycle and permits) is one 64-bit word updated
 * with a compare-and-swap; no call takes a lock or allocates. One precise
 * clock read (now_ns) per reservation: cycles may be as short as 1 ns, and
 * the coarse clock may lag by a whole scheduler tick, which would make the
 * limiter see an old cycle.
 *
 * Thread-safety: every function may be called on the same limiter from any
 * thread at once, except resil_ratelimiter_free(), which needs exclusive
 * access.
 *
 * Create/free pair: resil_ratelimiter_new / resil_ratelimiter_free. */
#ifndef RESIL_RATELIMIT_H
#define RESIL_RATELIMIT_H

#include <stddef.h>
#include <stdint.h>

#include "alloc.h"
#include "call.h"
#include "clock.h"
#include "loop.h"
#include "outcome.h"
#include "shared.h"
#include "status.h"
#include "version.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct resil_ratelimiter resil_ratelimiter;

typedef struct resil_ratelimiter_config {
  /* Sized struct (version.h); set by resil_ratelimiter_config_init(). */
  size_t struct_size;
  /* Instance name, copied. Default "ratelimiter". */
  const char *name;
  /* Permits per cycle, 1..2147483647. Default 50 (Resilience4j). */
  int64_t limit_for_period;
  /* Cycle length in nanoseconds, 1 ns..INT64_MAX. Default 1 s (not
   * Resilience4j's builder default of 500 ns, which silently makes the
   * default limiter almost unlimited). */
  int64_t refresh_period_ns;
  /* Longest wait for a permit, 0..INT64_MAX; 0 = fail fast. Default 5 s
   * (Resilience4j). Permits reserved ahead are owed by coming cycles, and
   * the debt is kept in 31 bits, so limit_for_period ×
   * (timeout_ns / refresh_period_ns + 1) must not exceed 2147483647; the
   * constructor reports the largest timeout_ns that fits otherwise. */
  int64_t timeout_ns;
  /* NULL = resil_clock_system(). Reservations read now_ns, or coarse_ns
   * when refresh_period_ns is at least 100 x coarse_resolution_ns (1 s and
   * more on Linux: new permits come at most 1 % of a period late, never
   * early; deadlines are still read on now_ns); acquire sleeps
   * through sleep_ns. */
  const resil_clock *clock;
  /* NULL = malloc/free. Used only by _new and _free. */
  const resil_allocator *alloc;
  /* Since 0.2: a segment (shared.h) to keep the state in, shared with
   * every process that creates a limiter of the same name in the same
   * segment; NULL = per-process state. Default NULL. The slot records
   * limit_for_period and refresh_period_ns: a limiter of that name with
   * another value is RESIL_EINVAL naming the field. timeout_ns stays per
   * process (it bounds this process's waits). The clock must be the
   * system one (NULL): cycles are counted on CLOCK_MONOTONIC from the
   * slot's creation in every process; another clock is RESIL_EINVAL
   * (field "clock"). When the segment is in fallback mode or full, the
   * limiter gets per-process state (a fallback counted on the segment)
   * unless the segment is required: then creation fails with the reason
   * (RESIL_ESTATE). The segment handle must stay open until the limiter
   * is freed (the limiter holds a reference to its mapping). */
  resil_shared *shared;
} resil_ratelimiter_config;

/* Counters since creation. Monotonic; each is a value between its values
 * at the start and the end of the read, never below an earlier read's, but
 * the set is not one snapshot. */
typedef struct resil_ratelimiter_metrics {
  /* Sized struct (version.h): the bytes the library wrote. */
  size_t struct_size;
  uint64_t permitted; /* requests granted without a wait                */
  uint64_t reserved;  /* requests granted from a coming cycle           */
  uint64_t refused;   /* requests refused (nothing consumed)            */
  uint64_t cancelled; /* reserved waits ended by ctx->cancel (given back) */
  int64_t available;  /* permits available now (negative when reserved) */
  /* Since 0.2: resil_ratelimiter_nanos_to_wait() at the same reading. */
  int64_t nanos_to_wait;
  /* Since 0.2: callers sleeping now in resil_ratelimiter_acquire() or
   * _run() for a reserved permit (Resilience4j's waiting threads). Callers
   * of the split form who wait on their own are not seen here. */
  uint64_t waiting;
} resil_ratelimiter_metrics;

/* Writes the documented defaults and struct_size. A macro passing
 * sizeof(resil_ratelimiter_config). NULL is a no-op. Since 0.1. */
RESIL_API void resil_ratelimiter_config_init_sized(resil_ratelimiter_config *cfg,
                                                   size_t struct_size);
#define resil_ratelimiter_config_init(cfg)                                     \
  resil_ratelimiter_config_init_sized((cfg), sizeof(resil_ratelimiter_config))

/* Validates cfg and creates a limiter whose first cycle starts now, with
 * limit_for_period permits.
 * Returns RESIL_OK; RESIL_EINVAL for cfg or out NULL, a config never passed
 * through resil_ratelimiter_config_init() ("call
 * resil_ratelimiter_config_init()"), or a field out of range (err says which
 * field, its range and the value received, durations in human units);
 * RESIL_ENOMEM.
 * err may be NULL. *out is written only on success. Since 0.1. */
RESIL_API resil_status resil_ratelimiter_new(const resil_ratelimiter_config *cfg,
                                             resil_ratelimiter **out,
                                             resil_error *err);

/* Frees the limiter. NULL is a no-op. Needs exclusive access. Since 0.1. */
RESIL_API void resil_ratelimiter_free(resil_ratelimiter *rl);

/* The split form: decides at once and never blocks.
 *
 * Takes `permits` (>= 1) now, or reserves them from a coming cycle when they
 * arrive within min(timeout_ns, remaining deadline of ctx). ctx may be NULL
 * (no deadline). Returns
 *   RESIL_DECISION_GO    the permits are the caller's now (*wait_ns 0);
 *   RESIL_DECISION_WAIT  they are the caller's but belong to a coming cycle:
 *                        wait *wait_ns (> 0) before using them;
 *   RESIL_DECISION_DENY  nothing was consumed; *why says why:
 *                        RESIL_REASON_RATE_LIMITED (they cannot come within
 *                        timeout_ns), RESIL_REASON_DEADLINE (they would come
 *                        within timeout_ns, but not within the deadline), or
 *                        RESIL_REASON_LOCAL_ERROR (NULL handle, permits < 1,
 *                        a ctx never passed through resil_ctx_init(); nothing
 *                        counted). On a refusal *wait_ns is the wait that
 *                        would have been needed (INT64_MAX when it does not
 *                        fit in 64 bits), 0 on a misuse.
 * wait_ns and why may be NULL; *why is RESIL_REASON_OK on GO and WAIT.
 * Reads the limiter's clock once, and ctx's clock once more only when ctx
 * has a deadline on another clock. Since 0.1 (resil_decision since 0.2). */
RESIL_API resil_decision resil_ratelimiter_reserve(resil_ratelimiter *rl,
                                                   int permits,
                                                   const resil_ctx *ctx,
                                                   int64_t *wait_ns,
                                                   resil_reason *why);

/* The blocking form: resil_ratelimiter_reserve, then, when the permits are
 * reserved, sleeps through the limiter clock's sleep_ns until they are due
 * (a manual clock advances instead of sleeping). The sleep ends early when
 * ctx->cancel is signalled; the reserved permits are then given back (never
 * above the limit of the current cycle) and DENY is returned with *why
 * RESIL_REASON_CANCELLED. Returns RESIL_DECISION_GO (after any wait) or
 * RESIL_DECISION_DENY (at once and nothing consumed, *why as for reserve;
 * or cancelled). why may be NULL. Since 0.1 (resil_decision since 0.2). */
RESIL_API resil_decision resil_ratelimiter_acquire(resil_ratelimiter *rl,
                                                   int permits,
                                                   const resil_ctx *ctx,
                                                   resil_reason *why);

/* The run form: acquires one permit, then calls fn(arg, ctx) with the
 * caller's ctx (a default ctx on the limiter's clock when NULL) and returns
 * its outcome. A refusal
 * returns REJECTED with reason RATE_LIMITED, or DEADLINE when the permit
 * would have come within timeout_ns but not within the ctx deadline; fn is
 * not called. A wait cancelled through ctx->cancel returns NOT_SENT with
 * reason CANCELLED (fn was not called, nothing was sent). A NULL handle, a
 * NULL fn or a ctx never passed through resil_ctx_init() returns NOT_SENT
 * with reason LOCAL_ERROR. Since 0.1. */
RESIL_API resil_outcome resil_ratelimiter_run(resil_ratelimiter *rl,
                                              const resil_ctx *ctx,
                                              resil_call_fn fn, void *arg);

/* Permits available now: limit_for_period at the start of an untouched
 * cycle, negative when permits of coming cycles are reserved. Reads the
 * clock; changes nothing. 0 for a NULL handle. Since 0.1. */
RESIL_API int64_t resil_ratelimiter_available(const resil_ratelimiter *rl);

/* Reads the shared limiter `name` of seg (shared.h) without creating it:
 * its permits available now (*available, may be NULL) and its
 * limit_for_period (*limit, may be NULL), as a limiter attached to it
 * would report them. RESIL_OK; RESIL_EINVAL (seg or name NULL);
 * RESIL_ESTATE (no such limiter in the segment, or the segment is in
 * fallback mode); RESIL_ENOMEM; RESIL_ESYS (the segment's lock). For
 * tools (`resil state show`). Thread-safe. Since 0.2. */
RESIL_API resil_status resil_ratelimiter_shared_peek(resil_shared *seg, const char *name,
                                                     int64_t *available, int64_t *limit,
                                                     resil_error *err);

/* ---- backends (Since 0.2) -------------------------------------------------
 *
 * A limiter whose permits are decided outside this process (a store that
 * many hosts share: libresil-redis's resil_redis_ratelimiter_new builds one)
 * keeps this handle and API: resil_ratelimiter_reserve, _acquire, _run,
 * the chain's layer, the engine and the registry use it unchanged. The
 * limiter keeps the parts that do not depend on where the permits live:
 * the arguments' checks, the bound on a reservation's wait (min of
 * timeout_ns and the ctx's remaining deadline), the reason of a refusal
 * (DEADLINE when the wait the backend reports is within timeout_ns,
 * RATE_LIMITED otherwise), the sleep for a reserved permit on the
 * limiter's clock, cancellation, and the counters of
 * resil_ratelimiter_metrics. The backend only decides.
 *
 * A backend's functions may be called from any thread at once (the
 * limiter's own thread-safety is the backend's), except the asynchronous
 * ones below, which are called on the thread of the loop they are given.
 *
 * Asynchronous decisions (Since 0.2). A backend whose decision is I/O may
 * also decide without blocking the caller's event loop: the async engine
 * (engine.h) lends it the loop (resil_ratelimiter_loop: the loop's clock,
 * fd watches and timers multiplexed on the engine's one adapter timer) and
 * a request (resil_ratelimiter_request), and resumes the call when the
 * answer arrives. A backend without reserve_async keeps the behaviour it
 * had: the engine calls reserve() on its loop thread. */

/* What the loop's owner (the async engine) lends a backend. Every function
 * is called on the loop thread only, and only between the backend's first
 * reserve_async on this loop and its loop_end. Filled by the engine. */
typedef struct resil_ratelimiter_loop {
  /* Sized struct (version.h): the size of the code that filled it. */
  size_t struct_size;
  /* Passed to every function below. */
  void *self;
  /* The loop's monotonic clock in nanoseconds (what timers are armed on). */
  int64_t (*now_ns)(void *self);
  /* Watches fd as resil_loop_adapter.watch does (loop.h: level
   * triggered, events 0 stops watching; stop before closing the fd).
   * 0, or -1 with errno set. */
  int (*watch)(void *self, int fd, unsigned events, resil_io_fn cb, void *arg);
  /* Timers multiplexed on the owner's one adapter timer (the adapter has
   * only one): timer_new makes one that runs cb(arg) on the loop thread
   * when due (NULL: out of memory); timer_arm (re)arms it at at_ns on
   * now_ns's clock (0, or -1 out of memory: not armed); timer_disarm;
   * timer_free disarms and frees it. */
  void *(*timer_new)(void *self, resil_loop_fn cb, void *arg);
  int (*timer_arm)(void *self, void *timer, int64_t at_ns);
  void (*timer_disarm)(void *self, void *timer);
  void (*timer_free)(void *self, void *timer);
  /* Registers end(arg), called once on the loop thread when the loop's
   * owner ends (resil_engine_free, after its calls have ended, before its
   * adapter's watches and heap go): the backend stops its watches, frees
   * its timers and what it kept for this loop. A backend registers when it
   * first keeps something for the loop, and may outlive its limiter's
   * handle until then (a limiter freed before the engine). 0, or -1 out of
   * memory (not registered). */
  int (*on_end)(void *self, resil_loop_fn end, void *arg);
} resil_ratelimiter_loop;

/* One decision asked without blocking. Owned by the caller, which must keep
 * it (and ctx) until it is answered or withdrawn. */
typedef struct resil_ratelimiter_request {
  /* Sized struct (version.h): the size of the code that filled it. */
  size_t struct_size;
  /* As reserve()'s arguments. */
  int permits;
  const resil_ctx *ctx;
  int64_t max_wait_ns;
  /* Set by the caller. The answer (as reserve()'s: GO, WAIT with wait_ns,
   * DENY with why), given by the backend once, on the loop thread, never
   * from inside reserve_async, unless the request was withdrawn first. */
  void (*answer)(struct resil_ratelimiter_request *q, resil_decision d, int64_t wait_ns,
                 resil_reason why);
  /* The caller's. */
  void *user;
  /* The backend's, from reserve_async until the answer or the withdrawal. */
  void *backend;
} resil_ratelimiter_request;

typedef struct resil_ratelimiter_backend {
  /* Sized struct (version.h); set by resil_ratelimiter_backend_init(). */
  size_t struct_size;
  /* Passed to every function below. */
  void *self;
  /* Required. Takes `permits` (>= 1) now, or reserves them when they come
   * within max_wait_ns (>= 0: min of timeout_ns and ctx's remaining
   * deadline, read when the call began). ctx is NULL or a full-size ctx;
   * a backend that does I/O bounds it by ctx's deadline. Returns
   *   GO    taken now: *wait_ns 0, *why RESIL_REASON_OK;
   *   WAIT  reserved: *wait_ns (0 < wait <= max_wait_ns) to wait,
   *         *why RESIL_REASON_OK;
   *   DENY  nothing consumed. *why RESIL_REASON_RATE_LIMITED with *wait_ns
   *         the wait that would have been needed (the limiter reports
   *         DEADLINE instead when it is within timeout_ns), or another
   *         reason the limiter passes on as it is (e.g.
   *         RESIL_REASON_RATE_LIMITER_UNAVAILABLE, *wait_ns 0).
   * wait_ns and why are never NULL. */
  resil_decision (*reserve)(void *self, int permits, const resil_ctx *ctx,
                            int64_t max_wait_ns, int64_t *wait_ns,
                            resil_reason *why);
  /* Optional (NULL: permits reserved by a cancelled wait stay spent).
   * Gives back `permits` reserved by reserve() whose wait was cancelled. */
  void (*give_back)(void *self, int permits);
  /* Optional (NULL: resil_ratelimiter_available and _nanos_to_wait report
   * 0). Reads without consuming: the permits available now (negative when
   * reserved ahead) and the wait for one. Returns 0, or -1 when it could
   * not read (both are then reported 0). */
  int (*peek)(void *self, int64_t *available, int64_t *nanos_to_wait);
  /* Optional. Called once by resil_ratelimiter_free() (and by
   * resil_ratelimiter_new_backed() when it fails after taking the
   * backend): frees self. */
  void (*free)(void *self);
  /* Optional, Since 0.2 (NULL: the async engine calls reserve on its loop
   * thread). Starts q's decision on `loop` without blocking: returns 0
   * when it is answered at once (*d, *wait_ns and *why as reserve()'s; q
   * not kept), or 1 when q->answer will give it later, on the loop thread
   * (the backend keeps q until then). Loop thread only. With it, withdraw
   * is required. */
  int (*reserve_async)(void *self, const resil_ratelimiter_loop *loop,
                       resil_ratelimiter_request *q, resil_decision *d, int64_t *wait_ns,
                       resil_reason *why);
  /* Forgets a pending q: its answer is not given (what the decision took,
   * when it reaches the backend's store anyway, stays spent). Loop
   * thread. Since 0.2. */
  void (*withdraw)(void *self, resil_ratelimiter_request *q);
} resil_ratelimiter_backend;

/* Zeroes *be and sets struct_size. A macro passing
 * sizeof(resil_ratelimiter_backend). NULL is a no-op. Since 0.2. */
RESIL_API void resil_ratelimiter_backend_init_sized(resil_ratelimiter_backend *be,
                                                    size_t struct_size);
#define resil_ratelimiter_backend_init(be)                                     \
  resil_ratelimiter_backend_init_sized((be), sizeof(resil_ratelimiter_backend))

/* An asynchronous decision, for the owner of an event loop (the async
 * engine): on a limiter whose backend has reserve_async, the limiter keeps
 * the parts it keeps on the blocking path (the bound on the wait, the
 * reason of a refusal, the counters) and the backend decides on the loop.
 * Owned by the caller (one per decision in progress); set by
 * resil_ratelimiter_async_init(), then the caller sets done and arg; the
 * rest is the limiter's. Since 0.2. */
typedef struct resil_ratelimiter_async {
  /* Sized struct (version.h); set by resil_ratelimiter_async_init(). */
  size_t struct_size;
  /* The answer, as resil_ratelimiter_reserve's (counted), on the loop
   * thread. */
  void (*done)(struct resil_ratelimiter_async *q, resil_decision d, int64_t wait_ns,
               resil_reason why);
  void *arg;
  /* The limiter's. */
  resil_ratelimiter_request req; /* the backend's view */
  resil_ratelimiter *rl;
  int64_t limit_ns;
  int pending;
} resil_ratelimiter_async;

/* Zeroes *q and sets struct_size. A macro passing
 * sizeof(resil_ratelimiter_async). NULL is a no-op. Since 0.2. */
RESIL_API void resil_ratelimiter_async_init_sized(resil_ratelimiter_async *q, size_t struct_size);
#define resil_ratelimiter_async_init(q)                                        \
  resil_ratelimiter_async_init_sized((q), sizeof(resil_ratelimiter_async))

/* 1 when rl decides asynchronously (a backend with reserve_async), else 0.
 * Since 0.2. */
RESIL_API int resil_ratelimiter_is_async(const resil_ratelimiter *rl);

/* Starts a decision for `permits` (>= 1) on `loop` (q->done and q->arg
 * set; ctx NULL or a full-size ctx, both kept by the caller until the
 * answer or the withdrawal). Returns 0 when it is answered at once (*d,
 * *wait_ns, *why as resil_ratelimiter_reserve's; on a limiter that does
 * not decide asynchronously, or a q not passed through _init or of a
 * smaller size, or a ctx of a smaller size than this library's, this is
 * resil_ratelimiter_reserve), or 1 when
 * it is pending: q->done runs later on the loop thread, never from inside
 * this call. Loop thread only. Since 0.2. */
RESIL_API int resil_ratelimiter_reserve_async(resil_ratelimiter *rl,
                                              const resil_ratelimiter_loop *loop,
                                              resil_ratelimiter_async *q, int permits,
                                              const resil_ctx *ctx, resil_decision *d,
                                              int64_t *wait_ns, resil_reason *why);
/* Withdraws q when it is pending (done is not run; what the decision took
 * in the backend's store stays spent); else a no-op. Loop thread. Since
 * 0.2. */
RESIL_API void resil_ratelimiter_withdraw_async(resil_ratelimiter_async *q);

/* Creates a limiter whose permits the backend decides. cfg as for
 * resil_ratelimiter_new (validated the same way; limit_for_period and
 * refresh_period_ns describe the backend's rate, for the metrics and the
 * registry), except that cfg.shared must be NULL (the backend keeps the
 * state: RESIL_EINVAL, field "shared"). cfg.clock is the clock a reserved
 * permit is waited for on. The limiter copies *be; from the call on, it
 * owns be->self: on success resil_ratelimiter_free calls be->free, and on
 * any failure after be was accepted this call does. RESIL_OK;
 * RESIL_EINVAL (cfg, be or out NULL, be without reserve, a field out of
 * range: err names it; be with reserve_async but without withdraw);
 * RESIL_ENOMEM. A backend struct of a size before reserve_async
 * was added is accepted (reserve_async then NULL). Since 0.2. */
RESIL_API resil_status resil_ratelimiter_new_backed(const resil_ratelimiter_config *cfg,
                                                    const resil_ratelimiter_backend *be,
                                                    resil_ratelimiter **out,
                                                    resil_error *err);

/* The backend a limiter was created with (its copy), or NULL for a limiter
 * with local state or a NULL handle. A backend's library uses it to find
 * its own state from the handle (it checks be->reserve is its function).
 * Since 0.2. */
RESIL_API const resil_ratelimiter_backend *
resil_ratelimiter_backend_of(const resil_ratelimiter *rl);

/* Nanoseconds a request for one permit made now would have to wait for it
 * (Resilience4j's getNanosToWait): 0 when a permit is available now, else
 * the time until the cycle that covers it starts (the reservations already
 * made counted), whatever the timeout. Reads the clock; changes nothing.
 * 0 for a NULL handle. Since 0.2. */
RESIL_API int64_t resil_ratelimiter_nanos_to_wait(const resil_ratelimiter *rl);

/* Fills *out up to the caller's struct size (a macro passing
 * sizeof(resil_ratelimiter_metrics)). RESIL_OK, RESIL_EMISUSE (NULL handle),
 * RESIL_EINVAL (out NULL). Since 0.1. */
RESIL_API resil_status resil_ratelimiter_get_metrics_sized(
    const resil_ratelimiter *rl, resil_ratelimiter_metrics *out,
    size_t struct_size);
#define resil_ratelimiter_get_metrics(rl, out)                                 \
  resil_ratelimiter_get_metrics_sized((rl), (out),                             \
                                      sizeof(resil_ratelimiter_metrics))

/* The instance name, owned by the limiter until it is freed; NULL for a
 * NULL handle. Since 0.1. */
RESIL_API const char *resil_ratelimiter_name(const resil_ratelimiter *rl);

#ifdef __cplusplus
}
#endif
#endif
