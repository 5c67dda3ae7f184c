/* Retry-After field values (RFC 9110 §10.2.3, §5.6.7): delay-seconds or an
 * HTTP-date in any of its three forms. A pure parser over a byte range: it
 * never reads past len and needs no NUL. */
#include <string.h>

#include "retry_int.h"

/* RFC 9111 §1.2.2: a delta-seconds value too large to represent is taken as
 * 2^31 seconds. Retry-After uses the same delta-seconds rule. */
#define DELTA_SECONDS_MAX INT64_C(2147483648)
#define MS_PER_DAY INT64_C(86400000)

typedef struct cursor {
  const char *p;
  const char *end;
} cursor;

static const char *const day_short[7] = {"Mon", "Tue", "Wed", "Thu",
                                         "Fri", "Sat", "Sun"};
static const char *const day_long[7] = {"Monday",   "Tuesday", "Wednesday",
                                        "Thursday", "Friday",  "Saturday",
                                        "Sunday"};
static const char *const month_name[12] = {"Jan", "Feb", "Mar", "Apr",
                                           "May", "Jun", "Jul", "Aug",
                                           "Sep", "Oct", "Nov", "Dec"};

static int is_digit(char ch) { return ch >= '0' && ch <= '9'; }

/* Consumes the literal s when the input starts with it (case-sensitive, as
 * the HTTP-date grammar is). */
static int lit(cursor *c, const char *s) {
  size_t n = strlen(s);
  if ((size_t)(c->end - c->p) < n || memcmp(c->p, s, n) != 0) return 0;
  c->p += n;
  return 1;
}

/* Exactly n digits. */
static int digits(cursor *c, int n, int *out) {
  if (c->end - c->p < n) return 0;
  int v = 0;
  for (int i = 0; i < n; i++) {
    if (!is_digit(c->p[i])) return 0;
    v = v * 10 + (c->p[i] - '0');
  }
  c->p += n;
  *out = v;
  return 1;
}

/* Index of the name the input starts with, consumed; -1 when none. */
static int name(cursor *c, const char *const *names, int count) {
  for (int i = 0; i < count; i++)
    if (lit(c, names[i])) return i;
  return -1;
}

static int time_of_day(cursor *c, int *h, int *mi, int *s) {
  /* second may be 60: the grammar allows a leap second. */
  return digits(c, 2, h) && lit(c, ":") && digits(c, 2, mi) && lit(c, ":") &&
         digits(c, 2, s) && *h <= 23 && *mi <= 59 && *s <= 60;
}

static int is_leap(int64_t y) {
  return (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
}

static int days_in_month(int64_t y, int m /* 1..12 */) {
  static const int dim[12] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
  return m == 2 && is_leap(y) ? 29 : dim[m - 1];
}

/* Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's
 * days_from_civil). */
static int64_t days_from_civil(int64_t y, int m, int d) {
  y -= m <= 2;
  int64_t era = (y >= 0 ? y : y - 399) / 400;
  int64_t yoe = y - era * 400;
  int64_t doy = (153 * (m > 2 ? m - 3 : m + 9) + 2) / 5 + d - 1;
  int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  return era * 146097 + doe - 719468;
}

/* The Gregorian year containing day z since 1970-01-01 (civil_from_days). */
static int64_t year_of_days(int64_t z) {
  z += 719468;
  int64_t era = (z >= 0 ? z : z - 146096) / 146097;
  int64_t doe = z - era * 146097;
  int64_t yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
  int64_t doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
  int64_t mp = (5 * doy + 2) / 153;
  return yoe + era * 400 + (mp >= 10); /* January, February: next year */
}

static int64_t floor_div(int64_t a, int64_t b) {
  int64_t q = a / b;
  return (a % b != 0 && (a < 0) != (b < 0)) ? q - 1 : q;
}

/* IMF-fixdate, rfc850-date or asctime-date; the wall time in ms of the
 * date, or 0 for invalid input (through *ok). */
static int64_t http_date_ms(cursor *c, int64_t now_wall_ms, int *ok) {
  int day = 0, mon, h = 0, mi = 0, s = 0, y4 = 0;
  int64_t year;
  *ok = 0;
  if (name(c, day_long, 7) >= 0) {
    /* rfc850-date: "Sunday, 06-Nov-94 08:49:37 GMT". */
    int y2;
    if (!lit(c, ", ") || !digits(c, 2, &day) || !lit(c, "-")) return 0;
    if ((mon = name(c, month_name, 12)) < 0) return 0;
    if (!lit(c, "-") || !digits(c, 2, &y2) || !lit(c, " ") ||
        !time_of_day(c, &h, &mi, &s) || !lit(c, " GMT"))
      return 0;
    /* RFC 9110 §5.6.7: a two-digit year more than 50 years in the future
     * is the most recent past year with the same last two digits. */
    int64_t now_year = year_of_days(floor_div(now_wall_ms, MS_PER_DAY));
    year = now_year - ((now_year % 100) + 100) % 100 + y2;
    if (year > now_year + 50) year -= 100;
  } else if (name(c, day_short, 7) >= 0) {
    if (lit(c, ", ")) {
      /* IMF-fixdate: "Sun, 06 Nov 1994 08:49:37 GMT". */
      if (!digits(c, 2, &day) || !lit(c, " ")) return 0;
      if ((mon = name(c, month_name, 12)) < 0) return 0;
      if (!lit(c, " ") || !digits(c, 4, &y4) || !lit(c, " ") ||
          !time_of_day(c, &h, &mi, &s) || !lit(c, " GMT"))
        return 0;
    } else {
      /* asctime-date: "Sun Nov  6 08:49:37 1994"; the day is 2DIGIT or
       * SP DIGIT. */
      if (!lit(c, " ")) return 0;
      if ((mon = name(c, month_name, 12)) < 0) return 0;
      if (!lit(c, " ")) return 0;
      if (lit(c, " ")) {
        if (!digits(c, 1, &day)) return 0;
      } else if (!digits(c, 2, &day)) {
        return 0;
      }
      if (!lit(c, " ") || !time_of_day(c, &h, &mi, &s) || !lit(c, " ") ||
          !digits(c, 4, &y4))
        return 0;
    }
    year = y4;
  } else {
    return 0;
  }
  if (c->p != c->end) return 0;
  if (day < 1 || day > days_in_month(year, mon + 1)) return 0;
  *ok = 1;
  int64_t days = days_from_civil(year, mon + 1, day);
  return ((days * 24 + h) * 60 + mi) * INT64_C(60000) + (int64_t)s * 1000;
}

resil_status resil_retry_after_parse(const char *value, size_t len,
                                     int64_t now_wall_ms, int64_t *delay_ms) {
  if (!value || !delay_ms) return RESIL_EINVAL;
  const char *p = value, *end = value + len;
  /* Optional whitespace around a field value is not part of it. */
  while (p < end && (*p == ' ' || *p == '\t')) p++;
  while (end > p && (end[-1] == ' ' || end[-1] == '\t')) end--;
  if (p == end) return RESIL_EINVAL;

  if (is_digit(*p)) {
    int64_t secs = 0;
    for (const char *q = p; q < end; q++) {
      if (!is_digit(*q)) return RESIL_EINVAL;
      /* Saturate instead of overflowing: any number of digits is fine. */
      if (secs <= DELTA_SECONDS_MAX) secs = secs * 10 + (*q - '0');
    }
    if (secs > DELTA_SECONDS_MAX) secs = DELTA_SECONDS_MAX;
    *delay_ms = secs * 1000;
    return RESIL_OK;
  }

  cursor c = {p, end};
  int ok;
  int64_t at_ms = http_date_ms(&c, now_wall_ms, &ok);
  if (!ok) return RESIL_EINVAL;
  /* A date in the past means "now". */
  int64_t d;
  if (__builtin_sub_overflow(at_ms, now_wall_ms, &d)) d = INT64_MAX;
  *delay_ms = d > 0 ? d : 0;
  return RESIL_OK;
}
