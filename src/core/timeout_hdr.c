/* gRPC's timeout grammar and Envoy's milliseconds (timeout_hdr.h). */
#include "core/timeout_hdr.h"

#define MAX_DIGITS 8
#define LIMIT INT64_C(100000000) /* 10^8: the first value that needs 9 digits */

/* The units from the finest, with their length in nanoseconds. */
static const struct {
  char unit;
  int64_t ns;
} units[6] = {{'n', 1},
              {'u', INT64_C(1000)},
              {'m', INT64_C(1000000)},
              {'S', INT64_C(1000000000)},
              {'M', INT64_C(60000000000)},
              {'H', INT64_C(3600000000000)}};

size_t resil__timeout_format(int64_t ns, char out[RESIL__TIMEOUT_BUF]) {
  if (ns <= 0) ns = 0;
  size_t u = 0;
  /* INT64_MAX ns is 2562047 H: the last unit always fits. */
  while (u < 5 && ns / units[u].ns >= LIMIT) u++;
  int64_t v = ns / units[u].ns; /* rounds down */
  char digits[MAX_DIGITS];
  size_t n = 0;
  do {
    digits[n++] = (char)('0' + (int)(v % 10));
    v /= 10;
  } while (v > 0 && n < MAX_DIGITS);
  size_t len = 0;
  while (n > 0) out[len++] = digits[--n];
  out[len++] = units[u].unit;
  out[len] = '\0';
  return len;
}

static int ows(char ch) { return ch == ' ' || ch == '\t'; }

/* The value without the whitespace around it; 0 when nothing is left. */
static int trim(const char **p, const char **end) {
  while (*p < *end && ows(**p)) (*p)++;
  while (*end > *p && ows((*end)[-1])) (*end)--;
  return *p < *end;
}

/* Reads 1..max digits at [p, end) into *v; returns the digits read, 0 for
 * none or too many. */
static size_t digits(const char *p, const char *end, size_t max, int64_t *v) {
  size_t n = 0;
  int64_t x = 0;
  while (p + n < end && p[n] >= '0' && p[n] <= '9') {
    if (++n > max) return 0;
    x = x * 10 + (p[n - 1] - '0');
  }
  *v = x;
  return n;
}

static int64_t sat_mul(int64_t v, int64_t unit_ns) {
  return v > INT64_MAX / unit_ns ? INT64_MAX : v * unit_ns;
}

int resil__timeout_parse(const char *value, size_t len, int64_t *ns) {
  if (!value || !ns) return -1;
  const char *p = value, *end = value + len;
  if (!trim(&p, &end)) return -1;
  int64_t v;
  size_t n = digits(p, end, MAX_DIGITS, &v);
  if (n == 0 || end - (p + n) != 1) return -1;
  char unit = p[n];
  for (size_t u = 0; u < 6; u++) {
    if (units[u].unit == unit) {
      *ns = sat_mul(v, units[u].ns);
      return 0;
    }
  }
  return -1;
}

int resil__timeout_ms_parse(const char *value, size_t len, int64_t *ns) {
  if (!value || !ns) return -1;
  const char *p = value, *end = value + len;
  if (!trim(&p, &end)) return -1;
  int64_t v;
  size_t n = digits(p, end, 18, &v);
  if (n == 0 || p + n != end) return -1;
  *ns = sat_mul(v, INT64_C(1000000));
  return 0;
}
