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
