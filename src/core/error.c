#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "internal.h"

resil_status resil__err(resil_error *err, resil_status st, const char *field,
                        const char *fmt, ...) {
  if (!err) return st;
  memset(err, 0, sizeof *err);
  err->status = st;
  if (field) snprintf(err->field, sizeof err->field, "%s", field);
  char text[sizeof err->msg];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(text, sizeof text, fmt, ap);
  va_end(ap);
  if (field)
    snprintf(err->msg, sizeof err->msg, "%.40s: %.140s", field, text);
  else
    snprintf(err->msg, sizeof err->msg, "%s", text);
  return st;
}

resil_status resil__err_range(resil_error *err, const char *field, int64_t min,
                              int64_t max, int64_t got, const char *what) {
  if (!err) return RESIL_EINVAL;
  if (what)
    resil__err(err, RESIL_EINVAL, field, "must be %s, got %" PRId64, what, got);
  else
    resil__err(err, RESIL_EINVAL, field,
               "must be %" PRId64 "..%" PRId64 ", got %" PRId64, min, max, got);
  err->has_range = 1;
  err->min = min;
  err->max = max;
  err->got = got;
  return RESIL_EINVAL;
}

/* ---- sized structs ---------------------------------------------------------- */

resil_status resil__sized_in(void *dst, size_t full_size, const void *src,
                             size_t min_size, const char *type,
                             const char *init_fn, resil_error *err) {
  size_t n = resil__sized_size(src);
  if (n < min_size || n > full_size + RESIL__SIZED_SLACK)
    return resil__err(err, RESIL_EINVAL, "struct_size",
                      "%s not initialised (struct_size %zu): call %s()", type,
                      n, init_fn);
  if (n > full_size) {
    const unsigned char *tail = (const unsigned char *)src + full_size;
    for (size_t i = 0; i < n - full_size; i++)
      if (tail[i] != 0)
        return resil__err(err, RESIL_EINVAL, "struct_size",
                          "%s has fields this library (%zu bytes) does not know "
                          "set (caller's %zu bytes): link a newer libresil",
                          type, full_size, n);
  }
  memcpy(dst, src, n < full_size ? n : full_size);
  memcpy(dst, &full_size, sizeof full_size);
  return RESIL_OK;
}

void resil__sized_out(void *dst, size_t caller_size, const void *src,
                      size_t full_size) {
  if (!dst || caller_size < sizeof(size_t)) return;
  size_t n = caller_size < full_size ? caller_size : full_size;
  memcpy(dst, src, n);
  if (caller_size > full_size && caller_size <= full_size + RESIL__SIZED_SLACK)
    memset((unsigned char *)dst + full_size, 0, caller_size - full_size);
  memcpy(dst, &n, sizeof n);
}

/* ---- durations ------------------------------------------------------------- */

char *resil__fmt_ns(char *buf, size_t n, int64_t ns) {
  /* Exact always: d, h and min only for whole values; s, ms and us with as
   * many decimals as needed (9, 6, 3 at most), trailing zeros dropped. */
  static const struct {
    uint64_t per;
    int digits; /* -1: whole values only */
    const char *name;
  } units[] = {{UINT64_C(86400000000000), -1, "d"}, {UINT64_C(3600000000000), -1, "h"},
               {UINT64_C(60000000000), -1, "min"},  {UINT64_C(1000000000), 9, "s"},
               {UINT64_C(1000000), 6, "ms"},        {UINT64_C(1000), 3, "us"}};
  if (!buf || n == 0) return buf;
  if (ns == INT64_MAX) {
    snprintf(buf, n, "forever");
    return buf;
  }
  uint64_t mag = ns < 0 ? (uint64_t)0 - (uint64_t)ns : (uint64_t)ns;
  const char *sign = ns < 0 ? "-" : "";
  for (size_t i = 0; i < sizeof units / sizeof units[0]; i++) {
    uint64_t per = units[i].per;
    if (mag < per) continue;
    uint64_t whole = mag / per, rest = mag % per;
    if (rest == 0) {
      snprintf(buf, n, "%s%" PRIu64 " %s", sign, whole, units[i].name);
      return buf;
    }
    if (units[i].digits < 0) continue;
    char dec[32]; /* rest < per: at most 9 digits; the mask tells the compiler */
    snprintf(dec, sizeof dec, "%0*" PRIu64, units[i].digits & 15, rest);
    size_t len = strlen(dec);
    while (len > 0 && dec[len - 1] == '0') dec[--len] = '\0';
    snprintf(buf, n, "%s%" PRIu64 ".%s %s", sign, whole, dec, units[i].name);
    return buf;
  }
  snprintf(buf, n, "%s%" PRIu64 " ns", sign, mag);
  return buf;
}

resil_status resil__err_range_ns(resil_error *err, const char *field,
                                 int64_t min, int64_t max, int64_t got,
                                 const char *what) {
  if (!err) return RESIL_EINVAL;
  char a[32], b[32], g[32];
  resil__fmt_ns(g, sizeof g, got);
  if (what)
    resil__err(err, RESIL_EINVAL, field, "must be %s, got %s", what, g);
  else
    resil__err(err, RESIL_EINVAL, field, "must be %s..%s, got %s",
               resil__fmt_ns(a, sizeof a, min), resil__fmt_ns(b, sizeof b, max), g);
  err->has_range = 1;
  err->min = min;
  err->max = max;
  err->got = got;
  return RESIL_EINVAL;
}
