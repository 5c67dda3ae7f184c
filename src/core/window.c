/* Sliding windows: count ring as bit maps, time window as one-second
 * buckets. See window.h for the invariants. */
#include <stdio.h>
#include <string.h>

#include "internal.h"
#include "window.h"

resil_status resil__window_validate(resil__window_kind kind, uint32_t size,
                                    uint32_t min_calls, const char *size_field,
                                    const char *min_field, resil_error *err) {
  resil_status st;
  if (kind == RESIL__WINDOW_COUNT) {
    st = resil__check_range(err, size_field, size, 1, RESIL__WINDOW_COUNT_MAX);
    if (st != RESIL_OK)
      return st;
    if (min_calls < 1 || min_calls > size) {
      char what[64];
      snprintf(what, sizeof what, "1..%s (%u)", size_field, (unsigned)size);
      return resil__err_range(err, min_field, 1, size, min_calls, what);
    }
    return RESIL_OK;
  }
  st = resil__check_range(err, size_field, size, 1, RESIL__WINDOW_TIME_MAX);
  if (st != RESIL_OK)
    return st;
  return resil__check_range(err, min_field, min_calls, 1, UINT32_MAX);
}

resil_status resil__window_validate_threshold(uint32_t threshold_pct,
                                              const char *field,
                                              resil_error *err) {
  return resil__check_range(err, field, threshold_pct, 1, 100);
}

size_t resil__window_store_bytes(resil__window_kind kind, uint32_t size) {
  if (kind == RESIL__WINDOW_COUNT)
    return (size_t)resil__window_words(size) * sizeof(uint64_t);
  return (size_t)size * sizeof(resil__bucket);
}

void resil__window_init(resil__window *w, resil__window_kind kind,
                        uint32_t size, uint32_t min_calls, void *store) {
  w->kind = (uint32_t)kind;
  w->size = size;
  w->min_calls = min_calls;
  w->store = store;
  /* Whatever w held before is not this window's: clear the storage. */
  w->calls = 1;
  resil__window_clear(w);
}

void resil__window_clear(resil__window *w) {
  /* No result since the last clear: every slot or bucket is still zero
   * (totals are their sums, counts never negative). */
  int empty = w->calls == 0;
  w->calls = 0;
  w->failures = 0;
  w->slow = 0;
  w->slow_failures = 0;
  w->head = 0;
  /* No second yet: the first record moves the window without clearing. */
  w->last_sec = INT64_MIN;
  if (!empty)
    memset(w->store, 0,
         resil__window_store_bytes((resil__window_kind)w->kind, w->size));
}

/* Floor division, so that a clock reading before its epoch still maps to
 * whole seconds consistently. */
static int64_t second_of(int64_t ns) {
  int64_t s = ns / RESIL_NS_PER_S;
  if (ns % RESIL_NS_PER_S < 0)
    s--;
  return s;
}

static uint32_t bucket_index(const resil__window *w, int64_t sec) {
  int64_t r = sec % (int64_t)w->size;
  if (r < 0)
    r += w->size;
  return (uint32_t)r;
}

void resil__window_advance(resil__window *w, int64_t now_ns) {
  int64_t sec = second_of(now_ns);
  if (sec <= w->last_sec)
    return;
  if (w->calls == 0) {
    /* Every bucket is zero (the totals are their sums and counts are never
     * negative), so nothing needs clearing: just move. This keeps the
     * first record after a long idle period O(1). */
    w->last_sec = sec;
    return;
  }
  resil__bucket *b = w->store;
  uint64_t idle = (uint64_t)(sec - w->last_sec);
  if (idle >= w->size) {
    /* The whole window has fallen out: one pass, whatever the gap. */
    memset(b, 0, (size_t)w->size * sizeof *b);
    w->calls = 0;
    w->failures = 0;
    w->slow = 0;
    w->slow_failures = 0;
  } else {
    /* Seconds last_sec+1 .. sec enter the window; the buckets they reuse
     * hold seconds that are now too old, so subtract them before reuse. */
    for (int64_t s = w->last_sec + 1; s <= sec; s++) {
      resil__bucket *old = &b[bucket_index(w, s)];
      w->calls -= old->calls;
      w->failures -= old->failures;
      w->slow -= old->slow;
      w->slow_failures -= old->slow_failures;
      old->calls = 0;
      old->failures = 0;
      old->slow = 0;
      old->slow_failures = 0;
    }
  }
  w->last_sec = sec;
}

void resil__window_record_time(resil__window *w, int64_t now_ns, int failed,
                               int slow) {
  resil__window_advance(w, now_ns);
  resil__bucket *cur =
      &((resil__bucket *)w->store)[bucket_index(w, w->last_sec)];
  cur->calls++;
  w->calls++;
  if (failed) {
    cur->failures++;
    w->failures++;
  }
  if (slow) {
    cur->slow++;
    w->slow++;
    if (failed) {
      cur->slow_failures++;
      w->slow_failures++;
    }
  }
}
