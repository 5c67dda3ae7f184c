/* resil_breaker: a circuit breaker shared by all calls to one downstream
 * (DESIGN §2.2): Resilience4j's state machine, then better.
 *
 * Thread-safety: any function may be called on the same breaker from any
 * thread at once, except resil_breaker_free(), which needs exclusive access.
 * Listeners run on the thread that caused the event, with no library lock
 * held. The clock and allocator given in the config must be thread-safe if
 * the breaker is shared; the clock is read while the breaker's internal lock
 * is held, so its functions must not call back into the breaker.
 *
 * Create/free pair: resil_breaker_new / resil_breaker_free.
 *
 * States:
 *   CLOSED        every call is permitted; results fill the window; when the
 *                 window holds at least `minimum_calls` results and the
 *                 failure rate or the slow-call rate reaches its threshold,
 *                 the breaker opens.
 *   OPEN          calls are rejected. Once `open_wait` has fully elapsed
 *                 (elapsed >= wait), the first acquire moves it to HALF_OPEN
 *                 at that moment; with `automatic_half_open` the move happens
 *                 at the scheduled instant instead (see "Time" below).
 *   HALF_OPEN     at most `half_open_permitted_calls` probes are let in, even
 *                 under concurrency. A separate count window of that size
 *                 decides after min(minimum_calls, permitted) results: a rate
 *                 at or over its threshold -> OPEN, both below -> CLOSED.
 *                 After `half_open_max_wait_ns` without a decision it goes
 *                 back to OPEN (default 60 s; 0 = no limit), or to CLOSED
 *                 with `half_open_max_wait_to_closed`.
 *   DISABLED      every call is permitted and nothing is recorded.
 *   FORCED_OPEN   every call is rejected until a manual transition.
 *   METRICS_ONLY  every call is permitted, results are recorded, thresholds
 *                 are evaluated (a THRESHOLDS_EXCEEDED event once per
 *                 excursion) but the state never changes by itself.
 *
 * Creating one:
 *     resil_breaker_config cfg;
 *     resil_breaker_config_init(&cfg);   // Resilience4j's defaults
 *     cfg.name = "payments";
 *     cfg.window_size = 20;
 *     cfg.minimum_calls = 10;
 *     resil_breaker *br = NULL;
 *     resil_error err;
 *     if (resil_breaker_new(&cfg, &br, &err) != RESIL_OK)
 *       fprintf(stderr, "%s\n", err.msg);
 *     ...
 *     resil_breaker_free(br);
 *
 * Two forms of use:
 *
 *   Run form (the breaker measures the duration):
 *     resil_outcome o = resil_breaker_run(br, ctx, my_call, my_arg);
 *     // o.kind == RESIL_REJECTED, o.reason == RESIL_REASON_BREAKER_OPEN
 *     // when the call was not permitted; my_call was not called then.
 *
 *   Split form (event loops; never blocks, no I/O):
 *     resil_breaker_permit p;
 *     if (resil_breaker_try_acquire(br, &p) == RESIL_DECISION_GO) {
 *       int64_t t0 = now();
 *       resil_outcome o = send_and_wait(...);
 *       resil_breaker_record(br, &p, &o, now() - t0);
 *     }
 *   Every permitted acquire must be followed by exactly one
 *   resil_breaker_record() or resil_breaker_release() with its permit.
 *
 * Failures, successes and ignored results: the outcome's class
 * (resil_outcome_classify) is looked up in `failure_classes`, then in
 * `ignored_classes`; any other class is a success. Each of NOT_SENT,
 * UNKNOWN, SUCCESS (2xx), REDIRECT (3xx), CLIENT_ERROR (4xx), HTTP_408,
 * HTTP_425, HTTP_429 and SERVER_ERROR (5xx) can be put in either mask or in
 * neither. By default NOT_SENT, UNKNOWN, SERVER_ERROR and the three of
 * RESIL_CLASSES_THROTTLED (408/425/429) count as failures, nothing is ignored, and SUCCESS, REDIRECT
 * and CLIENT_ERROR (4xx: the downstream is healthy, the request was wrong)
 * are recorded as successes. An ignored result (Resilience4j's
 * ignoreExceptions) is neither: it is counted only in total_ignored, never
 * in the window, and hands back its HALF_OPEN permit. A REJECTED outcome
 * (local protection, e.g. an inner bulkhead) is never counted anywhere and
 * hands back its HALF_OPEN permit. A call whose duration is >=
 * `slow_call_duration_ns` is also slow, whether it failed or not: a 200 that
 * took too long is not health.
 *
 * Generations: every transition (automatic, manual or a reset) starts a new
 * generation, and so does a manual transition to the state the breaker is
 * already in (X->X): it restarts that state as if entered anew -- a fresh
 * window for CLOSED, HALF_OPEN (with all its permits), METRICS_ONLY,
 * DISABLED and FORCED_OPEN; OPEN->OPEN and FORCED_OPEN->FORCED_OPEN count
 * one more consecutive OPEN, and OPEN->OPEN restarts the wait with the grown
 * wait -- but emits no event and is not counted in total_transitions. A
 * permit remembers the generation it was issued in; a result or a release
 * with a permit of an older generation changes nothing at all (no window,
 * no total, not even total_ignored, no HALF_OPEN permit), so a slow call
 * started while CLOSED cannot vote in the HALF_OPEN that followed.
 *
 * Two families of figures (resil_breaker_get_metrics):
 *   window  buffered, failed, slow (split into slow failed and slow
 *           successful) and successful calls, failure and slow rates of the
 *           current state period. Restarted on entering CLOSED, HALF_OPEN,
 *           DISABLED, METRICS_ONLY and FORCED_OPEN (also X->X); OPEN keeps
 *           the window it came from (so it shows why it opened). Below the
 *           minimum number of calls the rates are marked
 *           RESIL_BREAKER_RATES_NOT_ENOUGH_DATA, never a magic -1.
 *   totals  monotonic for the breaker's life (fit for Prometheus counters):
 *           calls (= successes + failures recorded), successes, failures,
 *           slow (split by result), ignored (results of an ignored class),
 *           not permitted, transitions (= the TRANSITION events emitted).
 *           A released permit, a REJECTED outcome and a result of an older
 *           generation count nowhere; DISABLED records nothing.
 * Rates are reported as percentages with decimals; decisions use the exact
 * integer comparison failures * 100 >= calls * threshold_pct.
 *
 * Time: time-driven changes happen once the wait has fully elapsed
 * (elapsed >= wait). The HALF_OPEN maximum wait and, with
 * `automatic_half_open`, the OPEN -> HALF_OPEN move take effect at their
 * scheduled instant: the library starts no thread; the next call on the
 * breaker that looks at the state (acquire in OPEN or HALF_OPEN, record,
 * release, state, metrics, transition, reset) applies the overdue changes
 * as of their instants (each event's time_ns is its scheduled instant and
 * the next wait counts from it), and delivers their events to listeners
 * then. Every one of them is a transition with its event, also each cycle
 * OPEN -> HALF_OPEN -> OPEN an idle breaker with the automatic timer went
 * through while nobody called.
 * Catch-up bound: one call applies at most RESIL_BREAKER_MAX_CATCHUP
 * overdue time-driven transitions (so a jump of days over 1 ms cycles never
 * loops millions of times in one call). When more were due, the call works
 * on the state reached by the last one applied -- a state the breaker was
 * in at that instant, not at the clock's now -- and the following calls go
 * on from there, RESIL_BREAKER_MAX_CATCHUP at a time, until caught up. While
 * it lags (only the automatic timer can make it lag), an acquire in OPEN is
 * refused even if the clock says the wait is over (the catch-up, not the
 * acquire, ends it), and a manual transition or
 * a reset starts from the state reached: the transitions still due after it
 * are dropped, because the schedule they belonged to is gone. Transitions
 * always come in the order of their instants; a NOT_PERMITTED event of a
 * lagging breaker carries the clock's now, so later catch-up transitions
 * may have earlier instants than it. With the
 * default waits (60 s + 60 s) and the automatic timer, it lags only after
 * 68 idle hours.
 *
 * Clock reads: an acquire in CLOSED, DISABLED or METRICS_ONLY is one atomic
 * load and reads no clock; OPEN and HALF_OPEN read it. A record reads the
 * clock only with a time window (the coarse clock when its resolution is at
 * most 10 ms), in HALF_OPEN, in OPEN with the automatic timer, or to
 * time-stamp a transition it causes; a release only in HALF_OPEN or in
 * OPEN with the automatic timer.
 * resil_breaker_run() measures the call with the clock's coarse reading
 * when slow_call_duration_ns >= 100 * coarse_resolution_ns (an error of at
 * most 1 %; the default 60 s qualifies on Linux) and with the precise clock
 * otherwise.
 *
 * NULL handles: every function given a NULL breaker fails closed and
 * counts nothing: try_acquire says DENY, run returns NOT_SENT(LOCAL_ERROR)
 * without calling, status functions return RESIL_EMISUSE (RESIL_EINVAL for
 * another NULL argument), state says FORCED_OPEN, name says NULL, counts
 * and sizes are 0.
 *
 * Ramp (Since 0.2, DESIGN §2.9; opt-in with ramp_duration_ns > 0): after an
 * automatic HALF_OPEN -> CLOSED (healthy probes, or the HALF_OPEN maximum
 * wait with half_open_max_wait_to_closed) the breaker admits a growing
 * share of calls for ramp_duration_ns D: at t ns into the ramp,
 *     share(t) = max(ramp_min_percent / 100, (t / D)^(1 / ramp_aggression))
 * (Envoy's slow start curve), then every call again. The state is CLOSED
 * throughout (resil_breaker_state, metrics, events); `ramping` and
 * `ramp_share` in the metrics and resil_breaker_ramp_share() show the ramp.
 * A manual transition to CLOSED and a reset give full traffic at once.
 *   Admission is exact, not random, and the same for the split, run, chain
 *   and engine forms and across the processes of a shared breaker (its ramp
 *   lives in the slot): every decision adds share(t) to one accumulator (an
 *   atomic add, 32.32 fixed point) and the call is admitted when the
 *   integer part grows (error diffusion), so any run of consecutive
 *   decisions admits the sum of their shares, within one call.
 *   A call not admitted is refused (DENY; the run form and the chain return
 *   REJECTED(RECOVERING)); it is counted in total_ramp_rejected only: no
 *   NOT_PERMITTED event, not in total_not_permitted, never in the window.
 *   Admitted calls are recorded in the window as in any CLOSED: a failure
 *   rate reached during the ramp opens the breaker, which ends the ramp
 *   (RAMP_ENDED with the opening's cause). Consecutive OPENs: a ramping
 *   CLOSED keeps the count (and the series' wait) it came with, and only the
 *   ramp's completion restarts it, so an OPEN during the ramp waits the
 *   series' next wait (longer with open_wait_multiplier > 1) and its
 *   HALF_OPEN, if healthy, starts the ramp over.
 *   The ramp's end is time-driven (see "Time"): the first call that looks
 *   at the state after the instant ends it, dated at that instant, within
 *   the same generation (permits issued during the ramp stay valid).
 *   Cost: with the ramp off, nothing (the acquire fast path is unchanged:
 *   a ramping CLOSED is an internal state that leaves it for the slow
 *   path). While ramping, an acquire reads the clock (its coarse reading
 *   when the clock's coarse resolution is at most 1 % of the ramp: the
 *   system clock's for a ramp of 400 ms or more; the share is then up to
 *   1 % of the ramp late) and makes one atomic add (and a pow() when
 *   aggression is not 1), without the lock; a record takes the lock as in
 *   CLOSED (a count window's success on CLOSED's inline path, any other
 *   result as a CLOSED counts it). Measured on one thread
 *   (breaker_ramp_acquire_record, README "Benchmarks"): about 2.2 times a
 *   plain CLOSED acquire + record while admitting every call, the cost of
 *   the clock read and the atomic add (3.1 times with aggression 2: the
 *   pow()).
 *   Retries last: while the breaker is HALF_OPEN or ramping
 *   (resil_breaker_recovering), a retry or hedge that watches it (retry.h
 *   recovery_breaker, a chain's retry or hedge layer above it, the engine)
 *   makes no further attempt.
 *
 * Memory: one block holds the state, the windows, the event ring and the
 * name; a breaker with a 100-call count window and the default 8-event ring
 * occupies under 512 bytes (resil_breaker_memory_bytes); a configured ramp
 * adds 64 bytes. The listener array
 * is allocated only when a listener is added. */
#ifndef RESIL_BREAKER_H
#define RESIL_BREAKER_H

#include <stddef.h>
#include <stdint.h>

#include "shared.h"
#include "alloc.h"
#include "call.h"
#include "clock.h"
#include "outcome.h"
#include "status.h"
#include "version.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct resil_breaker resil_breaker;

/* The state of a breaker. (The type is named _kind because
 * resil_breaker_state() is the function that returns it.) */
typedef enum resil_breaker_state_kind {
  RESIL_BREAKER_CLOSED = 0,
  RESIL_BREAKER_OPEN = 1,
  RESIL_BREAKER_HALF_OPEN = 2,
  RESIL_BREAKER_DISABLED = 3,
  RESIL_BREAKER_FORCED_OPEN = 4,
  RESIL_BREAKER_METRICS_ONLY = 5
} resil_breaker_state_kind;

typedef enum resil_breaker_window_type {
  RESIL_BREAKER_WINDOW_COUNT = 0, /* the last window_size results */
  RESIL_BREAKER_WINDOW_TIME = 1   /* the results of the last window_size s */
} resil_breaker_window_type;

/* Default failure classes: NOT_SENT | UNKNOWN | SERVER_ERROR |
 * RESIL_CLASSES_THROTTLED (HTTP_408 | HTTP_425 | HTTP_429). */
#define RESIL_BREAKER_DEFAULT_FAILURE_CLASSES                                  \
  (RESIL_CLASS_BIT(RESIL_CLASS_NOT_SENT) |                                     \
   RESIL_CLASS_BIT(RESIL_CLASS_UNKNOWN) |                                      \
   RESIL_CLASS_BIT(RESIL_CLASS_SERVER_ERROR) |                                 \
   RESIL_CLASSES_THROTTLED)

/* The classes failure_classes and ignored_classes may hold: every class
 * but REJECTED. Since 0.2. */
#define RESIL_BREAKER_CLASSIFIABLE                                             \
  (RESIL_CLASSES_ALL & ~RESIL_CLASS_BIT(RESIL_CLASS_REJECTED))

/* Most listeners one breaker holds at once. */
#define RESIL_BREAKER_MAX_LISTENERS 16u
/* Largest event ring. */
#define RESIL_BREAKER_MAX_EVENTS 1024u
/* Most overdue time-driven transitions one call applies (see "Catch-up
 * bound" above). Since 0.2. */
#define RESIL_BREAKER_MAX_CATCHUP 4096u

/* Configuration (a sized struct, see version.h). Fill with
 * resil_breaker_config_init(), then change fields. The constructor
 * validates every field and copies what it keeps (the name included); it
 * never clamps silently. Defaults are Resilience4j's. */
typedef struct resil_breaker_config {
  /* sizeof(resil_breaker_config) as the caller was compiled; set by
   * resil_breaker_config_init(). */
  size_t struct_size;
  /* Instance name, copied; at most 255 bytes. NULL gives "breaker".
   * Default NULL. */
  const char *name;
  /* COUNT or TIME. Default COUNT. */
  resil_breaker_window_type window_type;
  /* Results kept (COUNT, 1..1000000) or seconds covered (TIME, 1..86400).
   * Default 100. */
  uint32_t window_size;
  /* Results the window must hold before a rate is decided. COUNT:
   * 1..window_size; TIME: 1..UINT32_MAX (may exceed the seconds).
   * Default 100. */
  uint32_t minimum_calls;
  /* Percent, 1..100. Opens at or above. Default 50. */
  uint32_t failure_rate_threshold_pct;
  /* Percent, 1..100. Opens at or above. Default 100. */
  uint32_t slow_call_rate_threshold_pct;
  /* A call taking at least this long is slow. At least 1 ns.
   * Default 60 s. */
  int64_t slow_call_duration_ns;
  /* Wait in OPEN before probing, for the first consecutive OPEN.
   * At least 1 ms (Resilience4j's minimum). Default 60 s. */
  int64_t open_wait_ns;
  /* Growth of the OPEN wait per consecutive OPEN, counted as Resilience4j
   * counts them (CLOSED->OPEN is the 1st; a failed HALF_OPEN makes the 2nd,
   * ...; OPEN->OPEN one more; entering CLOSED, DISABLED or METRICS_ONLY
   * restarts the count; FORCED_OPEN counts as one; resil_breaker_open_for()
   * leaves it as it was; an initial HALF_OPEN starts at 1). The n-th wait is the
   * (n-1)-th times the multiplier, truncated to whole milliseconds when
   * open_wait_ns is a whole number of milliseconds (as Resilience4j's
   * exponential IntervalFunction does) and to whole nanoseconds otherwise,
   * capped at open_wait_max_ns. A wait given to resil_breaker_open_for()
   * replaces the n-th wait of that one OPEN only. 1.0..100.0; 1.0 = fixed
   * wait. Default 1.0. */
  double open_wait_multiplier;
  /* Cap of the growing wait; 0 = no cap (the wait saturates at INT64_MAX).
   * 0 or at least open_wait_ns. Default 0. */
  int64_t open_wait_max_ns;
  /* Probes let in per HALF_OPEN period, also the size of the HALF_OPEN
   * window. 1..1000000. Default 10. */
  uint32_t half_open_permitted_calls;
  /* Longest time in HALF_OPEN without a decision before going back to
   * OPEN (or to CLOSED, see half_open_max_wait_to_closed). 0 = no limit,
   * else at least 1 ns. Default 60 s (Resilience4j waits forever by
   * default: a probe whose result never comes would hold the breaker
   * half-open for good). */
  int64_t half_open_max_wait_ns;
  /* 1 = OPEN -> HALF_OPEN happens at the instant the wait ends, without an
   * acquire (applied by the next call on the breaker; no thread is
   * started). 0 = the first acquire after the wait moves it. 0..1.
   * Default 0. */
  int automatic_half_open;
  /* Bit mask of RESIL_CLASS_BIT(resil_outcome_class): the classes counted
   * as failures. A subset of RESIL_BREAKER_CLASSIFIABLE.
   * Default RESIL_BREAKER_DEFAULT_FAILURE_CLASSES. */
  uint32_t failure_classes;
  /* Recent events kept in the ring, 0..RESIL_BREAKER_MAX_EVENTS. Default 8. */
  uint32_t event_capacity;
  /* NULL = system clock. Must outlive the breaker. */
  const resil_clock *clock;
  /* NULL = malloc/free. Must outlive the breaker. */
  const resil_allocator *alloc;
  /* ---- Since 0.2 (a caller built without these gets their defaults). */
  /* Bit mask of the classes recorded as neither success nor failure
   * (counted in total_ignored only; a HALF_OPEN permit is handed back). A
   * subset of RESIL_BREAKER_CLASSIFIABLE disjoint from failure_classes.
   * Default 0. */
  uint32_t ignored_classes;
  /* State of the new breaker (generation 1, no event; OPEN and FORCED_OPEN
   * count as the first consecutive OPEN, OPEN waits open_wait_ns from the
   * creation; HALF_OPEN starts with a count of 1, as Resilience4j's
   * HalfOpenState(1), so a failed probe makes the 2nd consecutive OPEN and
   * waits the series' 2nd wait). Any state. Default CLOSED. */
  resil_breaker_state_kind initial_state;
  /* Where the HALF_OPEN maximum wait leads (Resilience4j's
   * transitionToStateAfterWaitDuration): 0 = OPEN, 1 = CLOSED. Default 0. */
  int half_open_max_wait_to_closed;
  /* Since 0.2: a segment (shared.h) to keep the state in, shared with every
   * process that creates a breaker of the same name in the same segment;
   * NULL = per-process state. Default NULL.
   *
   * Shared: the state word (state and generation), the window and its
   * totals, the HALF_OPEN permits, the OPEN wait series, the state's start
   * and the monotonic totals (metrics) live in the segment's slot for the
   * name; the rules of DESIGN §2.2 hold across processes: the window counts
   * every process's results, HALF_OPEN lets in half_open_permitted_calls
   * probes in all, a permit of an earlier generation (from any process) is
   * ignored everywhere, and each transition is made once, by the process
   * whose call caused it (or that first saw its time come). That process
   * records the event in its own ring and delivers it to its own
   * listeners; the other processes see the new state but no event:
   * listeners and the event ring are per process.
   *
   * Per process: name lookup aside, event_capacity, the ring, listeners and
   * alloc. The slot records every other field but clock (window_type,
   * window_size, minimum_calls, the thresholds, slow_call_duration_ns, the
   * waits and multiplier, half_open_permitted_calls, automatic_half_open,
   * the classes, initial_state, half_open_max_wait_to_closed, the ramp's
   * three fields): a breaker of
   * that name with another value is RESIL_EINVAL naming the first differing
   * field. The clock must be the system one (NULL; another is RESIL_EINVAL,
   * field "clock"): times are CLOCK_MONOTONIC readings compared across
   * processes. The window must fit one segment slot: a count window of at
   * most 13632 results (the larger of window_size and
   * half_open_permitted_calls), a time window of 212 seconds (less
   * with a large half_open_permitted_calls); with a ramp configured, whose
   * state takes 64 bytes of the slot, 13376 results and 208 seconds. A
   * larger one is RESIL_EINVAL naming the field and the maximum. The
   * ramp's state (its start, accumulator and refusals) is in the slot: all
   * the processes ramp together, one admission decision sequence.
   *
   * Acquire in CLOSED stays one atomic load; everything else happens under
   * a lock in the slot whose holder is recorded (process id and start
   * time): a process killed while holding it is detected by the next
   * waiter (within about a millisecond of waiting), which takes the lock
   * over and repairs the state before using it (the window's totals are
   * recomputed from its contents, a window the state cannot hold is
   * emptied, HALF_OPEN permits are capped), so no process is wedged and no
   * invariant stays broken. A process killed while holding a HALF_OPEN
   * permit never returns it: the period ends by half_open_max_wait_ns, as
   * for a call whose result never comes. resil_shared_reset (and a
   * replace) puts the breaker back to its initial state for every process:
   * it takes the breaker's lock first (waiting for a holder, taking it
   * over from a dead one), so it never rewrites the state under a record.
   * The state restarts in generation 1, so a permit of the very first
   * generation still held then counts in the new state.
   *
   * When the segment is in fallback mode or full, the breaker gets
   * per-process state (a fallback counted on the segment) unless the
   * segment is required: then creation fails with the reason
   * (RESIL_ESTATE). The segment handle must stay open until the breaker is
   * freed (the breaker holds a reference to its mapping). After fork() the
   * child may use the breakers it inherited. */
  resil_shared *shared;
  /* ---- Since 0.2: the ramp after recovery (DESIGN §2.9; see "Ramp"
   * above). A shared breaker records the three fields in its slot (another
   * value is RESIL_EINVAL naming the field). */
  /* How long the ramp after an automatic HALF_OPEN -> CLOSED lasts.
   * 0 = no ramp (full traffic at once, as Resilience4j). 0 or at least
   * 1 ms. Default 0. */
  int64_t ramp_duration_ns;
  /* The share admitted at the ramp's start, in percent. 1..100. Default
   * 10 (Envoy's slow start min_weight_percent). */
  uint32_t ramp_min_percent;
  /* The curve's exponent: share(t) = max(min, (t / D)^(1 / aggression));
   * 1.0 = linear, above 1 faster at first, below 1 slower (Envoy's slow
   * start aggression). Finite and > 0. Default 1.0. */
  double ramp_aggression;
} resil_breaker_config;

/* A permit handed out by resil_breaker_try_acquire(). A plain value the
 * caller keeps until it records or releases it. */
typedef struct resil_breaker_permit {
  uint64_t generation;            /* state generation it was issued in */
  resil_breaker_state_kind state; /* state that issued it */
} resil_breaker_permit;

typedef enum resil_breaker_event_kind {
  RESIL_BREAKER_EVENT_TRANSITION = 1,    /* from -> to */
  RESIL_BREAKER_EVENT_NOT_PERMITTED = 2, /* a call was rejected in `from` */
  RESIL_BREAKER_EVENT_RESET = 3,         /* resil_breaker_reset() */
  RESIL_BREAKER_EVENT_THRESHOLDS_EXCEEDED = 4, /* METRICS_ONLY only */
  /* Since 0.2 (see "Ramp"): a ramp began, with the automatic HALF_OPEN ->
   * CLOSED TRANSITION just before it (same instant and cause; from and to
   * CLOSED). */
  RESIL_BREAKER_EVENT_RAMP_STARTED = 5,
  /* Since 0.2: the ramp ended: completed (cause RAMP_COMPLETED, at the
   * instant ramp_duration_ns after its start), or cut short by a
   * transition (OPEN, a manual one, a reset: that transition's cause,
   * delivered just before its TRANSITION event). From and to CLOSED. Every
   * RAMP_STARTED is followed by one RAMP_ENDED. */
  RESIL_BREAKER_EVENT_RAMP_ENDED = 6
} resil_breaker_event_kind;

/* Why an event happened. */
typedef enum resil_breaker_cause {
  RESIL_BREAKER_CAUSE_NONE = 0,   /* NOT_PERMITTED events */
  RESIL_BREAKER_CAUSE_MANUAL = 1, /* resil_breaker_transition(), _open_for() */
  RESIL_BREAKER_CAUSE_RESET = 2,  /* resil_breaker_reset() */
  RESIL_BREAKER_CAUSE_FAILURE_RATE = 3,     /* failure rate reached */
  RESIL_BREAKER_CAUSE_SLOW_CALL_RATE = 4,   /* slow-call rate reached */
  RESIL_BREAKER_CAUSE_BOTH_RATES = 5,       /* both reached */
  RESIL_BREAKER_CAUSE_BELOW_THRESHOLDS = 6, /* HALF_OPEN probes healthy */
  RESIL_BREAKER_CAUSE_OPEN_WAIT_ELAPSED = 7,
  RESIL_BREAKER_CAUSE_HALF_OPEN_MAX_WAIT = 8,
  RESIL_BREAKER_CAUSE_RAMP_COMPLETED = 9 /* Since 0.2: the ramp's time is up */
} resil_breaker_cause;

/* An event (a sized struct: the library sets struct_size to the bytes it
 * filled, for listeners and for resil_breaker_events()). */
typedef struct resil_breaker_event {
  size_t struct_size;
  uint64_t seq;    /* 1 for the breaker's first event */
  int64_t time_ns; /* on the breaker's clock: the instant it happened */
  resil_breaker_event_kind kind;
  resil_breaker_state_kind from; /* state before (the state, if no change) */
  resil_breaker_state_kind to;   /* state after */
  resil_breaker_cause cause;
  /* Since 0.2 (see "Ramp"): for RAMP_STARTED and RAMP_ENDED, the share of
   * calls the ramp admitted at the event's instant, 0..1, as fixed under
   * the breaker's lock (a listener that runs later still gets the
   * instant's share): RAMP_STARTED the ramp's first share
   * (ramp_min_percent / 100); RAMP_ENDED 1.0 when completed, else the
   * share the ramp had reached when the transition cut it short. 1.0 for
   * every other event. Exact to 2^-31 (the event ring keeps it so). */
  double ramp_share;
} resil_breaker_event;

/* Whether the window's rates can be decided yet. */
typedef enum resil_breaker_rates {
  RESIL_BREAKER_RATES_NOT_ENOUGH_DATA = 0, /* buffered < minimum calls */
  RESIL_BREAKER_RATES_AVAILABLE = 1
} resil_breaker_rates;

/* Figures of a breaker (a sized struct, see version.h): filled up to the
 * caller's struct_size by resil_breaker_get_metrics(). */
typedef struct resil_breaker_metrics {
  size_t struct_size;
  resil_breaker_state_kind state;
  uint64_t generation;
  int64_t state_since_ns;     /* when the current state began */
  uint32_t consecutive_opens; /* Resilience4j's "attempts" */
  int64_t open_wait_ns;       /* wait of the current/last OPEN; 0 if none */
  uint32_t half_open_permits_available; /* HALF_OPEN only; else 0 */
  /* Window family (current state period). */
  uint64_t buffered_calls;
  uint64_t failed_calls;
  uint64_t slow_calls;       /* failed or not */
  uint64_t successful_calls; /* buffered - failed */
  uint64_t minimum_calls;    /* of the current window */
  resil_breaker_rates rates; /* NOT_ENOUGH_DATA: the rates below are 0 */
  double failure_rate_pct;   /* 0..100 */
  double slow_call_rate_pct; /* 0..100 */
  /* Totals family (monotonic). */
  uint64_t total_calls; /* = total_successes + total_failures */
  uint64_t total_successes;
  uint64_t total_failures;
  uint64_t total_slow;
  uint64_t total_ignored; /* results of an ignored class */
  uint64_t total_not_permitted;
  uint64_t total_transitions; /* = TRANSITION events emitted */
  /* ---- Since 0.2. */
  uint64_t slow_failed_calls;     /* window: slow and failed */
  uint64_t slow_successful_calls; /* window: slow - slow failed */
  uint64_t total_slow_failed;     /* totals: slow and failed */
  uint64_t total_slow_successful; /* totals: total_slow - slow failed */
  /* ---- Since 0.2: the ramp (see "Ramp"). */
  int ramping;           /* 1 while a ramp runs (state CLOSED), else 0 */
  double ramp_share;     /* share admitted now, 0..1; 1.0 when not ramping */
  int64_t ramp_since_ns; /* when the running ramp began; 0 when none */
  /* Totals: calls a ramp refused (REJECTED, reason RECOVERING). Not in
   * total_not_permitted, never in the window. */
  uint64_t total_ramp_rejected;
} resil_breaker_metrics;

/* Called once for each event, on the thread that caused it, with no library
 * lock held. It may call any function on the breaker except
 * resil_breaker_free(); events those calls cause are delivered from inside
 * them. One thread's events reach the listeners in seq order; events caused
 * by different threads may reach them out of order, and `seq` gives the
 * true order. */
typedef void (*resil_breaker_listener_fn)(void *user, resil_breaker *br,
                                          const resil_breaker_event *ev);

/* Writes the documented defaults (Resilience4j's, plus a 60 s HALF_OPEN
 * maximum wait) into the first struct_size bytes of cfg, and struct_size.
 * NULL is a no-op. Use the macro. Since 0.2 (0.1 had a function). */
RESIL_API void resil_breaker_config_init_sized(resil_breaker_config *cfg,
                                               size_t struct_size);
#define resil_breaker_config_init(cfg)                                         \
  resil_breaker_config_init_sized((cfg), sizeof(resil_breaker_config))

/* Validates cfg and creates a breaker in cfg->initial_state, generation 1.
 * Reads only cfg->struct_size bytes of cfg (defaults for the rest).
 * Returns RESIL_OK (*out set), RESIL_EINVAL (cfg or out NULL; cfg never
 * passed through resil_breaker_config_init(); or a field out of range: err
 * names the field, its range and the value received, durations in human
 * units; *out untouched) or RESIL_ENOMEM. err may be NULL. One allocation
 * (breaker, windows, event ring and name together). Since 0.1. */
RESIL_API resil_status resil_breaker_new(const resil_breaker_config *cfg,
                                         resil_breaker **out, resil_error *err);

/* Frees the breaker. NULL is a no-op. Needs exclusive access: no other
 * thread may use the breaker during or after the call. Since 0.1. */
RESIL_API void resil_breaker_free(resil_breaker *br);

/* The name given in the config ("breaker" when none), owned by the breaker.
 * NULL for a NULL handle. Since 0.1. */
RESIL_API const char *resil_breaker_name(const resil_breaker *br);

/* "CLOSED", "OPEN", "HALF_OPEN", "DISABLED", "FORCED_OPEN", "METRICS_ONLY";
 * static text, "?" for an unknown value. Since 0.1. */
RESIL_API const char *resil_breaker_state_name(resil_breaker_state_kind st);
/* "TRANSITION", "NOT_PERMITTED", "RESET", "THRESHOLDS_EXCEEDED",
 * "RAMP_STARTED", "RAMP_ENDED"; "?" for an unknown value. Since 0.1. */
RESIL_API const char *resil_breaker_event_kind_name(resil_breaker_event_kind k);
/* "NONE", "MANUAL", "RESET", "FAILURE_RATE", "SLOW_CALL_RATE",
 * "BOTH_RATES", "BELOW_THRESHOLDS", "OPEN_WAIT_ELAPSED",
 * "HALF_OPEN_MAX_WAIT", "RAMP_COMPLETED"; "?" for an unknown value.
 * Since 0.1. */
RESIL_API const char *resil_breaker_cause_name(resil_breaker_cause c);

/* Asks for permission to make one call. Returns RESIL_DECISION_GO and fills
 * *permit when permitted; RESIL_DECISION_DENY when not (the call must not
 * be made): the rejection is counted in total_not_permitted and emits a
 * NOT_PERMITTED event (a ramp's refusal, Since 0.2: total_ramp_rejected
 * only, no event; resil_breaker_try_acquire_why tells them apart). In OPEN whose wait has elapsed (without the
 * automatic timer) it moves to HALF_OPEN and takes a probe permit. A NULL
 * handle or a NULL permit gives DENY and counts nothing. Never WAIT. Never
 * blocks on I/O. Since 0.1 (returns resil_decision since 0.2). */
RESIL_API resil_decision resil_breaker_try_acquire(resil_breaker *br,
                                                   resil_breaker_permit *permit);

/* resil_breaker_try_acquire that also says why a call was refused, for
 * the split form's REJECTED outcome: on DENY, *why (when not NULL) is
 * RESIL_REASON_RECOVERING when a ramp did not admit the call (counted in
 * total_ramp_rejected, no event), else RESIL_REASON_BREAKER_OPEN (OPEN,
 * FORCED_OPEN, HALF_OPEN without a probe left, a NULL handle or permit);
 * on GO it is RESIL_REASON_NONE. Since 0.2. */
RESIL_API resil_decision resil_breaker_try_acquire_why(resil_breaker *br,
                                                       resil_breaker_permit *permit,
                                                       resil_reason *why);

/* The share of calls a ramp admits now, 0..1 (see "Ramp"): 1.0 when the
 * breaker is not ramping (or its ramp's time is up), 0.0 for a NULL handle.
 * Lock-free: one atomic load, and a clock read while ramping. Applies no
 * overdue change. Since 0.2. */
RESIL_API double resil_breaker_ramp_share(resil_breaker *br);

/* 1 when the breaker is HALF_OPEN, ramping (its ramp's time not up), or
 * OPEN past its wait without the automatic transition (its next call would
 * be the probe): the "retries last" rule (DESIGN §2.9; retry.h
 * recovery_breaker, hedge.h) lets no retry or hedge through it then. 0
 * otherwise and for a NULL handle. One atomic load, a clock read while
 * ramping, and in OPEN the breaker's lock; applies no overdue change (a
 * HALF_OPEN past its maximum wait still says 1 until a call settles it).
 * Since 0.2. */
RESIL_API int resil_breaker_recovering(resil_breaker *br);

/* Records the result of a permitted call: outcome *o, which took
 * duration_ns. A permit from an older generation changes nothing; an
 * ignored class counts in total_ignored only; a REJECTED outcome counts
 * nowhere; both hand back a HALF_OPEN permit. May change the state (and
 * deliver events). Returns RESIL_OK (also when the result changed
 * nothing), RESIL_EINVAL (permit or o NULL, or duration_ns < 0: nothing is
 * recorded and the permit is still outstanding) or RESIL_EMISUSE (NULL
 * handle). Since 0.1. */
RESIL_API resil_status resil_breaker_record(resil_breaker *br,
                                            const resil_breaker_permit *permit,
                                            const resil_outcome *o,
                                            int64_t duration_ns);

/* Gives a permit back without a result (the call was not made after all).
 * Counts nowhere; a HALF_OPEN permit of the current generation becomes
 * available again; an older generation's changes nothing. Returns
 * RESIL_OK, RESIL_EINVAL (permit NULL) or RESIL_EMISUSE. Since 0.1. */
RESIL_API resil_status
resil_breaker_release(resil_breaker *br, const resil_breaker_permit *permit);

/* Run form: acquires, calls fn(arg, ctx) when permitted, measures its
 * duration (see "Clock reads") and records the outcome, which it returns.
 * When not permitted returns REJECTED(BREAKER_OPEN), or REJECTED(RECOVERING)
 * when a ramp did not admit it, without calling fn.
 * ctx NULL means a default context (no deadline, no token, the breaker's
 * clock); otherwise fn gets ctx itself, or a full-size copy when ctx was
 * built against an older header. A NULL handle, a NULL fn or a ctx never
 * passed through resil_ctx_init() is a misuse: it returns
 * NOT_SENT(LOCAL_ERROR) without calling fn and counts nothing. Since 0.1. */
RESIL_API resil_outcome resil_breaker_run(resil_breaker *br,
                                          const resil_ctx *ctx,
                                          resil_call_fn fn, void *arg);

/* The current state, after applying overdue time-driven changes (HALF_OPEN
 * maximum wait; with automatic_half_open, the end of the OPEN wait; at most
 * RESIL_BREAKER_MAX_CATCHUP of them). Reads the clock only in OPEN
 * (automatic) and HALF_OPEN. A NULL handle gives RESIL_BREAKER_FORCED_OPEN
 * (fail closed). Since 0.1. */
RESIL_API resil_breaker_state_kind resil_breaker_state(resil_breaker *br);

/* Manual transition, following Resilience4j's table: every pair is allowed
 * except CLOSED->HALF_OPEN, METRICS_ONLY->OPEN and METRICS_ONLY->HALF_OPEN.
 * Overdue time-driven changes are applied first. A transition to the
 * current state restarts it in a new generation without an event (see
 * "Generations"). Returns RESIL_OK, RESIL_ESTATE (refused pair; nothing
 * changes), RESIL_EINVAL (unknown state) or RESIL_EMISUSE. Since 0.1. */
RESIL_API resil_status resil_breaker_transition(resil_breaker *br,
                                                resil_breaker_state_kind to);

/* Manual transition to OPEN for an explicit wait (Resilience4j's
 * transitionToOpenStateFor): as resil_breaker_transition(br, OPEN) --
 * refused from METRICS_ONLY, no event from OPEN -- but this OPEN waits
 * wait_ns (at least 1 ns) instead of the configured or grown wait, and the
 * count of consecutive OPENs stays as it was, from any state (Resilience4j
 * keeps its attempts; a transition to OPEN adds one): a later consecutive
 * OPEN is the next of the configured series, not a growth of wait_ns.
 * Returns RESIL_OK, RESIL_ESTATE, RESIL_EINVAL (wait_ns < 1) or
 * RESIL_EMISUSE. Since 0.2. */
RESIL_API resil_status resil_breaker_open_for(resil_breaker *br,
                                              int64_t wait_ns);

/* Back to CLOSED with an empty window and no consecutive OPENs, in a new
 * generation (outstanding permits become stale). Emits a TRANSITION event
 * (cause RESET) when the state was not CLOSED, then a RESET event. Totals
 * are kept: they are monotonic. Returns RESIL_OK or RESIL_EMISUSE.
 * Since 0.1. */
RESIL_API resil_status resil_breaker_reset(resil_breaker *br);

/* Fills *out up to out's struct_size (given by the macro) with both
 * families of figures, after applying overdue time-driven changes and
 * moving a time window to now. Returns RESIL_OK, RESIL_EINVAL (out NULL,
 * or struct_size smaller than a size_t) or RESIL_EMISUSE. Use the macro.
 * Since 0.2 (0.1 had a function). */
RESIL_API resil_status resil_breaker_get_metrics_sized(
    resil_breaker *br, resil_breaker_metrics *out, size_t struct_size);
#define resil_breaker_get_metrics(br, out)                                     \
  resil_breaker_get_metrics_sized((br), (out), sizeof(resil_breaker_metrics))

/* Reads the shared breaker `name` of seg (shared.h) without creating it:
 * fills *out (up to its struct_size, given by the macro) as
 * resil_breaker_get_metrics would for a breaker attached to it: state,
 * generation, the window (buffered and failed calls, rates), consecutive
 * opens, the OPEN wait, HALF_OPEN permits left and the totals of every
 * process. Like any attached breaker it first applies overdue time-driven
 * changes (HALF_OPEN maximum wait; with automatic_half_open, the end of
 * the OPEN wait), which every process would make; it records no call and
 * takes no permit. RESIL_OK; RESIL_EINVAL (seg, name or out NULL, or
 * struct_size smaller than a size_t); RESIL_ESTATE (no such breaker in the
 * segment, or the segment is in fallback mode); RESIL_ENOMEM; RESIL_ESYS
 * (the segment's lock). For tools (`resil state show`). Thread-safe. Use
 * the macro. Since 0.2. */
RESIL_API resil_status resil_breaker_shared_peek_sized(resil_shared *seg, const char *name,
                                                       resil_breaker_metrics *out,
                                                       size_t struct_size, resil_error *err);
#define resil_breaker_shared_peek(seg, name, out, err)                         \
  resil_breaker_shared_peek_sized((seg), (name), (out), sizeof(resil_breaker_metrics), (err))

/* Copies the most recent events, at most max and at most event_capacity,
 * oldest first, into out, an array of max elements of elem_size bytes
 * each (given by the macro). Returns the number copied (0 for a NULL
 * handle, a NULL out, or an elem_size smaller than the 0.1 event). Use
 * the macro. Since 0.2 (0.1 had a function). */
RESIL_API size_t resil_breaker_events_sized(resil_breaker *br,
                                            resil_breaker_event *out,
                                            size_t max, size_t elem_size);
#define resil_breaker_events(br, out, max)                                     \
  resil_breaker_events_sized((br), (out), (max), sizeof(resil_breaker_event))

/* Adds a listener called for every later event. The same fn/user pair may
 * be added more than once (it is then called once per registration).
 * Returns RESIL_OK, RESIL_EINVAL (fn NULL), RESIL_ESTATE (already
 * RESIL_BREAKER_MAX_LISTENERS listeners), RESIL_ENOMEM or RESIL_EMISUSE.
 * Since 0.1. */
RESIL_API resil_status resil_breaker_listener_add(resil_breaker *br,
                                                  resil_breaker_listener_fn fn,
                                                  void *user);

/* Removes one registration of fn/user. When it returns, the listener is not
 * running and will not be called again, so `user` may be freed -- except
 * when called from inside a listener, where it cannot wait for other
 * threads' deliveries already under way. Returns RESIL_OK, RESIL_EINVAL
 * (not registered) or RESIL_EMISUSE. Since 0.1. */
RESIL_API resil_status resil_breaker_listener_remove(
    resil_breaker *br, resil_breaker_listener_fn fn, void *user);

/* Bytes the breaker occupies: its one block (state, windows, event ring,
 * name) plus the listener array when listeners were added. Bytes requested
 * from the allocator; its own overhead is not included. 0 for a NULL
 * handle. Since 0.1. */
RESIL_API size_t resil_breaker_memory_bytes(const resil_breaker *br);

#ifdef __cplusplus
}
#endif
#endif
