/* Sliding windows of call results (DESIGN §2.1). Internal: not installed.
 *
 * A window keeps running totals of the results inside it (calls, failures,
 * slow calls), so reading them is O(1) and never walks the window.
 *
 *   Count window: a ring of the last `size` results, stored as bit maps
 *   (a failure bit and a slow bit per slot, 32 slots per 64-bit word).
 *   `head` is the next slot to overwrite. When the ring is full, a record
 *   first subtracts the evicted slot's contribution from the totals, then
 *   adds the new result, then advances `head` (a success into a window
 *   holding no failure and no slow result only counts: see
 *   resil__window_record_count). Record and read are O(1); init is
 *   O(size).
 *
 *   Time window: `size` one-second buckets aligned to whole seconds of the
 *   clock (bucket of second s = floor(now_ns / 1e9)). Before a bucket is
 *   reused for a newer second, its contribution is subtracted from the
 *   totals. Moving the window forward over d idle seconds costs
 *   O(min(d, size)), so a jump of hours never loops hours. A result whose
 *   time is older than the newest bucket (threads read the clock before
 *   they serialize) is added to the newest bucket.
 *
 * Decisions use exact integer arithmetic widened to 64 bits:
 *   rate reached  <=>  hits * 100 >= calls * threshold_pct
 * which has no floating-point equality problem at the boundaries (1 failure
 * of 3 calls reaches 33 % and does not reach 34 %).
 *
 * Thread-safety: none. The owner serializes every call on one window. */
#ifndef RESIL_CORE_WINDOW_H
#define RESIL_CORE_WINDOW_H

#include <stddef.h>
#include <stdint.h>

#include "resil/status.h"

typedef enum resil__window_kind {
  RESIL__WINDOW_COUNT = 0,
  RESIL__WINDOW_TIME = 1
} resil__window_kind;

/* Largest sizes accepted by resil__window_validate: a million slots is
 * 250 KiB of bit maps; a day of one-second buckets is 1 MiB. */
#define RESIL__WINDOW_COUNT_MAX 1000000u
#define RESIL__WINDOW_TIME_MAX 86400u

/* One second of a time window. 32-bit counts allow 4e9 results per second. */
typedef struct resil__bucket {
  uint32_t calls;
  uint32_t failures;
  uint32_t slow;
  uint32_t slow_failures; /* of which failed */
} resil__bucket;

typedef struct resil__window {
  uint64_t calls;     /* results in the window */
  uint64_t failures;  /* of which failures */
  uint64_t slow;      /* of which slow (failed or not) */
  uint64_t slow_failures; /* of which slow and failed */
  uint32_t kind;      /* resil__window_kind */
  uint32_t size;      /* slots (count) or seconds (time) */
  uint32_t min_calls; /* results needed before a rate is decided */
  uint32_t head;      /* count: next slot to overwrite */
  int64_t last_sec;   /* time: second of the newest bucket */
  void *store;        /* count: uint64_t[words]; time: resil__bucket[size] */
} resil__window;

/* What the window says about the thresholds. */
typedef enum resil__verdict {
  RESIL__VERDICT_NOT_ENOUGH_DATA = 0, /* fewer than min_calls results */
  RESIL__VERDICT_BELOW = 1,           /* both rates below their thresholds */
  RESIL__VERDICT_FAILURE = 2,         /* failure rate reached, slow not */
  RESIL__VERDICT_SLOW = 3,            /* slow rate reached, failure not */
  RESIL__VERDICT_BOTH = 4             /* both reached */
} resil__verdict;

/* Checks size and min_calls, reporting the given field names through err:
 * size in 1..RESIL__WINDOW_COUNT_MAX (count) or 1..RESIL__WINDOW_TIME_MAX
 * (time); min_calls in 1..size for a count window and 1..UINT32_MAX for a
 * time window (its minimum may exceed its length in seconds). Returns
 * RESIL_OK or RESIL_EINVAL. */
resil_status resil__window_validate(resil__window_kind kind, uint32_t size,
                                    uint32_t min_calls, const char *size_field,
                                    const char *min_field, resil_error *err);
/* Checks threshold_pct in 1..100. Returns RESIL_OK or RESIL_EINVAL. */
resil_status resil__window_validate_threshold(uint32_t threshold_pct,
                                              const char *field,
                                              resil_error *err);

/* Bytes of storage a window of this kind and size needs (suitably aligned
 * for uint64_t when the caller places it). */
size_t resil__window_store_bytes(resil__window_kind kind, uint32_t size);

/* Makes an empty window over caller-provided storage of at least
 * resil__window_store_bytes(kind, size) bytes. O(size). */
void resil__window_init(resil__window *w, resil__window_kind kind,
                        uint32_t size, uint32_t min_calls, void *store);
/* Empties the window, keeping its kind, size and storage. O(size), and
 * O(1) when it holds no result (its storage is then all zero already). */
void resil__window_clear(resil__window *w);

/* 64-bit words of a count window's slots (2 bits per slot). */
static inline uint32_t resil__window_words(uint32_t size) {
  return (size + 31u) / 32u;
}

/* 1 when the window holds no failure and no slow result (every slot of a
 * count window is then zero). */
static inline int resil__window_clean(const resil__window *w) {
  return (w->failures | w->slow) == 0;
}

/* Adds one result to a count window. O(1). Inline: it is on the breaker's
 * record path.
 *
 * Slot i holds 2 bits at bit 2*(i % 32) of word i / 32: bit 0 = failed,
 * bit 1 = slow, so one load and one store update both. Slots not yet
 * filled are zero (init clears them), which lets the eviction below run
 * unconditionally: before the ring is full it subtracts nothing.
 *
 * A clean window (no failure and no slow result in it: every slot is zero)
 * that takes a plain success only counts it: the slot it would overwrite
 * and the one it writes are both zero, and a ring of zeros is the same ring
 * whatever slot `head` names, so `head` stays. The eviction order is kept:
 * the next non-zero result is written at `head` and leaves the ring `size`
 * records later, as every result does. */
static inline void resil__window_record_count(resil__window *w, int failed,
                                              int slow) {
  if (!failed && !slow && resil__window_clean(w)) {
    if (w->calls < w->size)
      w->calls++;
    return;
  }
  uint32_t i = w->head;
  uint64_t *p = (uint64_t *)w->store + (i >> 5);
  unsigned shift = (i & 31u) * 2u;
  uint64_t v = *p;
  uint64_t old = (v >> shift) & 3u;
  uint64_t nv = (uint64_t)(failed != 0) | ((uint64_t)(slow != 0) << 1);
  if (old != nv) {
    /* First take the evicted result out of the totals, then add the new
     * one (unsigned arithmetic: the totals never go below zero in
     * between). When they are equal nothing changes but `head`. */
    w->failures = w->failures - (old & 1u) + (nv & 1u);
    w->slow = w->slow - (old >> 1) + (nv >> 1);
    w->slow_failures = w->slow_failures - (old == 3u) + (nv == 3u);
    *p = v ^ ((old ^ nv) << shift);
  }
  if (w->calls < w->size)
    w->calls++;
  w->head = (i + 1 == w->size) ? 0 : i + 1;
}

/* Moves a time window to the second of now_ns, subtracting every bucket
 * that falls out of it. O(min(idle seconds, size)). */
void resil__window_advance(resil__window *w, int64_t now_ns);
/* Adds one result to a time window at now_ns (advancing it first). */
void resil__window_record_time(resil__window *w, int64_t now_ns, int failed,
                               int slow);

/* Adds one result to either kind; now_ns is used by time windows only. */
static inline void resil__window_record(resil__window *w, int64_t now_ns,
                                        int failed, int slow) {
  if (w->kind == RESIL__WINDOW_COUNT)
    resil__window_record_count(w, failed, slow);
  else
    resil__window_record_time(w, now_ns, failed, slow);
}

/* 1 when hits / calls >= threshold_pct / 100, exactly, in 64-bit integers.
 * Exact while calls * 100 fits in 64 bits (calls < 1.8e17). calls == 0
 * never reaches a threshold. */
static inline int resil__rate_reached(uint64_t hits, uint64_t calls,
                                      uint32_t threshold_pct) {
  return calls > 0 && hits * 100u >= calls * (uint64_t)threshold_pct;
}

/* The verdict of the window's current totals against two thresholds. */
static inline resil__verdict resil__window_verdict(const resil__window *w,
                                                   uint32_t failure_pct,
                                                   uint32_t slow_pct) {
  if (w->calls < w->min_calls || w->calls == 0)
    return RESIL__VERDICT_NOT_ENOUGH_DATA;
  int f = resil__rate_reached(w->failures, w->calls, failure_pct);
  int s = resil__rate_reached(w->slow, w->calls, slow_pct);
  if (f && s)
    return RESIL__VERDICT_BOTH;
  if (f)
    return RESIL__VERDICT_FAILURE;
  if (s)
    return RESIL__VERDICT_SLOW;
  return RESIL__VERDICT_BELOW;
}

#endif
