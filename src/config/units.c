/* Durations and sizes with units: the one parser of the file format's
 * quantities (registry.h). Exact: "1.5s" is 1500000000 ns, a value finer
 * than the unit's resolution (1 ns, 1 byte) or beyond 64 bits is refused,
 * never rounded or wrapped. */
#include <ctype.h>
#include <stdio.h>
#include <string.h>

#include "core/internal.h"
#include "resil/registry.h"

typedef struct unit {
  const char *name;
  uint64_t factor;
} unit;

static const unit DURATION_UNITS[] = {
    {"ns", 1},
    {"us", 1000},
    {"\xc2\xb5s", 1000}, /* µs */
    {"ms", 1000000},
    {"s", UINT64_C(1000000000)},
    {"m", UINT64_C(60000000000)},
    {"min", UINT64_C(60000000000)},
    {"h", UINT64_C(3600000000000)},
    {"d", UINT64_C(86400000000000)},
};

static const unit SIZE_UNITS[] = {
    {"B", 1},
    {"KB", 1000},
    {"KiB", 1024},
    {"MB", 1000000},
    {"MiB", UINT64_C(1) << 20},
    {"GB", UINT64_C(1000000000)},
    {"GiB", UINT64_C(1) << 30},
    {"TB", UINT64_C(1000000000000)},
    {"TiB", UINT64_C(1) << 40},
};

static resil_status fail(char *msg, size_t n, const char *fmt, const char *text,
                         const char *units) {
  if (msg && n) snprintf(msg, n, fmt, text, units);
  return RESIL_EINVAL;
}

/* [-]DIGITS[.DIGITS]UNIT: the magnitude as value * factor, exactly. */
static resil_status parse_quantity(const char *text, const unit *units,
                                   size_t nunits, int allow_bare,
                                   int allow_negative, const char *expect,
                                   uint64_t *mag, int *negative, char *msg,
                                   size_t n) {
  const char *p = text;
  *negative = 0;
  if (!text) return fail(msg, n, "expected %s%s", "", expect);
  while (*p == ' ') p++;
  if (*p == '-' || *p == '+') {
    if (*p == '-') {
      if (!allow_negative)
        return fail(msg, n, "must not be negative, got '%s'%s", text, "");
      *negative = 1;
    }
    p++;
  }
  if (!isdigit((unsigned char)*p))
    return fail(msg, n, "expected %s, got '%s'", expect, text);
  uint64_t ip = 0;
  for (; isdigit((unsigned char)*p); p++) {
    if (ip > (UINT64_MAX - 9) / 10)
      return fail(msg, n, "'%s' is too large%s", text, "");
    ip = ip * 10 + (uint64_t)(*p - '0');
  }
  uint64_t frac = 0, scale = 1;
  if (*p == '.') {
    p++;
    if (!isdigit((unsigned char)*p))
      return fail(msg, n, "expected %s, got '%s'", expect, text);
    for (; isdigit((unsigned char)*p); p++) {
      if (scale > UINT64_C(100000000000000000))
        return fail(msg, n, "'%s' has too many decimals%s", text, "");
      frac = frac * 10 + (uint64_t)(*p - '0');
      scale *= 10;
    }
  }
  while (*p == ' ') p++;
  if (*p == 0) {
    if (ip == 0 && frac == 0) { /* a bare 0 needs no unit */
      *mag = 0;
      return RESIL_OK;
    }
    if (!allow_bare || scale != 1)
      return fail(msg, n, "'%s' needs a unit (%s)", text, expect);
    *mag = ip;
    return RESIL_OK;
  }
  const unit *u = NULL;
  for (size_t i = 0; i < nunits; i++)
    if (strcmp(p, units[i].name) == 0) u = &units[i];
  if (!u) return fail(msg, n, "'%s': unknown unit (%s)", text, expect);
  uint64_t whole;
  if (__builtin_mul_overflow(ip, u->factor, &whole))
    return fail(msg, n, "'%s' is too large%s", text, "");
  /* frac / scale of the unit must be a whole number of base units. */
  unsigned __int128 f = (unsigned __int128)frac * u->factor;
  if (f % scale != 0)
    return fail(msg, n, "'%s' is finer than the smallest unit%s", text, "");
  uint64_t fpart = (uint64_t)(f / scale);
  if (__builtin_add_overflow(whole, fpart, mag))
    return fail(msg, n, "'%s' is too large%s", text, "");
  return RESIL_OK;
}

resil_status resil_parse_duration(const char *text, int64_t *ns, char *msg,
                                  size_t msg_size) {
  if (!ns) return RESIL_EINVAL;
  uint64_t mag;
  int neg;
  resil_status st = parse_quantity(
      text, DURATION_UNITS, sizeof DURATION_UNITS / sizeof *DURATION_UNITS, 0,
      1, "a duration such as 30s, 250ms, 1.5s, 100us, 2m, 1h", &mag, &neg, msg,
      msg_size);
  if (st) return st;
  if (mag > (uint64_t)INT64_MAX)
    return fail(msg, msg_size, "'%s' is too large (at most 106751 d)%s", text, "");
  *ns = neg ? -(int64_t)mag : (int64_t)mag;
  return RESIL_OK;
}

resil_status resil_parse_size(const char *text, uint64_t *bytes, char *msg,
                              size_t msg_size) {
  if (!bytes) return RESIL_EINVAL;
  int neg;
  return parse_quantity(text, SIZE_UNITS, sizeof SIZE_UNITS / sizeof *SIZE_UNITS,
                        1, 0, "a size such as 512, 64KiB, 64MiB, 1GB", bytes,
                        &neg, msg, msg_size);
}
