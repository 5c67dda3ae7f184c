/* The Retry-After parser: delta-seconds, the three HTTP-date forms, past
 * dates, whitespace, overflow and malformed input. */
#include <stdlib.h>
#include <string.h>

#include "test_util.h"

/* 1994-11-06 08:49:00 GMT, 37 s before RFC 9110's example date. */
#define NOW_1994 INT64_C(784111740000)
/* 2024-01-01 00:00:00 GMT. */
#define NOW_2024 INT64_C(1704067200000)

static resil_status parse(const char *s, int64_t now, int64_t *out) {
  return resil_retry_after_parse(s, strlen(s), now, out);
}

static void expect_ms(const char *s, int64_t now, int64_t want) {
  int64_t got = -12345;
  resil_status st = parse(s, now, &got);
  if (st != RESIL_OK)
    fail_msg("\"%s\": status %s, expected RESIL_OK", s, resil_status_name(st));
  if (got != want)
    fail_msg("\"%s\": %lld ms, expected %lld", s, (long long)got,
             (long long)want);
}

static void expect_invalid(const char *s, int64_t now) {
  int64_t got = 777;
  resil_status st = parse(s, now, &got);
  if (st != RESIL_EINVAL)
    fail_msg("\"%s\": status %s (%lld ms), expected RESIL_EINVAL", s,
             resil_status_name(st), (long long)got);
  if (got != 777) fail_msg("\"%s\": output changed on error", s);
}

static void delta_seconds_give_milliseconds(void **state) {
  (void)state;
  expect_ms("0", 0, 0);
  expect_ms("1", 0, 1000);
  expect_ms("120", NOW_2024, 120000);
  expect_ms("007", 0, 7000);
  expect_ms("2147483647", 0, INT64_C(2147483647000));
}

static void delta_seconds_saturate_instead_of_overflowing(void **state) {
  (void)state;
  expect_ms("2147483648", 0, INT64_C(2147483648000));
  expect_ms("2147483649", 0, INT64_C(2147483648000));
  expect_ms("9223372036854775807", 0, INT64_C(2147483648000));
  expect_ms("99999999999999999999999999999999999999999999", 0,
            INT64_C(2147483648000));
  expect_ms("00000000000000000000000000000000000000000003", 0, 3000);
}

static void delta_seconds_reject_signs_fractions_and_inner_spaces(
    void **state) {
  (void)state;
  const char *bad[] = {"-1", "+1", "1.5", "1 0", "1a", "0x10", "1e3",
                       "1,000", "12\r\n", "\r\n12", "\xd9\xa1\xd9\xa2", "1\v"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
    expect_invalid(bad[i], 0);
}

static void surrounding_spaces_and_tabs_are_ignored(void **state) {
  (void)state;
  expect_ms(" 5", 0, 5000);
  expect_ms("5 ", 0, 5000);
  expect_ms("\t 5 \t", 0, 5000);
  expect_ms("  Sun, 06 Nov 1994 08:49:37 GMT\t ", NOW_1994, 37000);
  expect_invalid("", 0);
  expect_invalid(" ", 0);
  expect_invalid("\t\t", 0);
}

static void imf_fixdate_is_parsed(void **state) {
  (void)state;
  expect_ms("Sun, 06 Nov 1994 08:49:37 GMT", NOW_1994, 37000);
  expect_ms("Thu, 29 Feb 2024 12:00:00 GMT", NOW_2024, INT64_C(5140800000));
  /* 23:59:60: the grammar allows a leap second; it is the next second. */
  expect_ms("Thu, 31 Dec 1998 23:59:60 GMT", INT64_C(915148740000), 60000);
  /* The weekday is checked for spelling only. */
  expect_ms("Mon, 06 Nov 1994 08:49:37 GMT", NOW_1994, 37000);
}

static void rfc850_date_is_parsed_with_the_two_digit_year_rule(void **state) {
  (void)state;
  expect_ms("Sunday, 06-Nov-94 08:49:37 GMT", NOW_1994, 37000);
  /* From 2024: 70 is 2070 (46 years ahead), 74 is 2074 (exactly 50 years
   * ahead, still future), 75 and 80 are more than 50 years ahead, so they
   * are 1975 and 1980: past, "now". */
  expect_ms("Wednesday, 01-Jan-70 00:00:00 GMT", NOW_2024,
            INT64_C(3155760000000) - NOW_2024);
  expect_ms("Monday, 01-Jan-74 00:00:00 GMT", NOW_2024,
            INT64_C(3281990400000) - NOW_2024);
  expect_ms("Wednesday, 01-Jan-75 00:00:00 GMT", NOW_2024, 0);
  expect_ms("Tuesday, 01-Jan-80 00:00:00 GMT", NOW_2024, 0);
}

static void asctime_date_is_parsed(void **state) {
  (void)state;
  expect_ms("Sun Nov  6 08:49:37 1994", NOW_1994, 37000);
  expect_ms("Sun Nov 06 08:49:37 1994", NOW_1994, 37000);
  expect_ms("Thu Feb 29 12:00:00 2024", NOW_2024, INT64_C(5140800000));
}

static void past_or_present_date_means_now(void **state) {
  (void)state;
  expect_ms("Sun, 06 Nov 1994 08:49:37 GMT", NOW_2024, 0);
  expect_ms("Sun, 06 Nov 1994 08:49:37 GMT", INT64_C(784111777000), 0);
  expect_ms("Sun, 06 Nov 1994 08:49:37 GMT", INT64_C(784111776999), 1);
  expect_ms("Sunday, 06-Nov-94 08:49:37 GMT", NOW_2024, 0);
  expect_ms("Sun Nov  6 08:49:37 1994", NOW_2024, 0);
  expect_ms("Thu, 01 Jan 1970 00:00:00 GMT", 0, 0);
  /* Extreme clocks do not overflow. */
  expect_ms("Sun, 06 Nov 1994 08:49:37 GMT", INT64_MAX, 0);
  int64_t d = 0;
  assert_status(RESIL_OK, parse("Fri, 31 Dec 9999 23:59:59 GMT", INT64_MIN, &d));
  assert_int_equal(d, INT64_MAX);
}

static void malformed_dates_are_invalid(void **state) {
  (void)state;
  const char *bad[] = {
      "sun, 06 Nov 1994 08:49:37 GMT",   /* names are case-sensitive     */
      "Sun, 06 nov 1994 08:49:37 GMT",
      "Sun, 06 Nov 1994 08:49:37 gmt",
      "Sun, 06 Nov 1994 08:49:37 UTC",
      "Sun, 06 Nov 1994 08:49:37 +0000",
      "Sun, 06 Nov 1994 08:49:37",
      "Sun, 6 Nov 1994 08:49:37 GMT",
      "Sun,  06 Nov 1994 08:49:37 GMT",
      "Sun,06 Nov 1994 08:49:37 GMT",
      "Sun, 06 Nov 94 08:49:37 GMT",
      "Sun, 06 Nov 1994 8:49:37 GMT",
      "Sun, 06 Nov 1994 24:00:00 GMT",
      "Sun, 06 Nov 1994 08:60:00 GMT",
      "Sun, 06 Nov 1994 08:49:61 GMT",
      "Sun, 00 Nov 1994 08:49:37 GMT",
      "Sun, 31 Nov 1994 08:49:37 GMT",
      "Wed, 29 Feb 2023 12:00:00 GMT",
      "Mon, 29 Feb 1900 12:00:00 GMT",
      "Sun, 06 Nov 1994 08:49:37 GMT x",
      "Sun, 06 Nov 1994 08:49:37 GMTGMT",
      "Sux, 06 Nov 1994 08:49:37 GMT",
      "Sun, 06 Nox 1994 08:49:37 GMT",
      "Sunday, 06 Nov 1994 08:49:37 GMT",
      "Sunday, 06-Nov-1994 08:49:37 GMT",
      "Sunday, 06-Nov-94 08:49:37",
      "Sun, 06-Nov-94 08:49:37 GMT",
      "Sun Nov 6 08:49:37 1994",
      "Sun Nov   6 08:49:37 1994",
      "Sun Nov  6 08:49:37 94",
      "Sun Nov  6 08:49:37 1994 GMT",
      "Sun  Nov  6 08:49:37 1994",
      "Sun",
      "Sun,",
      "Sunday",
      "GMT",
      "tomorrow",
      "Sun, 06 Nov 1994 08:49:37 GMT\r\n",
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
    expect_invalid(bad[i], NOW_1994);
}

static void parser_reads_only_len_bytes(void **state) {
  (void)state;
  int64_t d = 0;
  assert_status(RESIL_OK, resil_retry_after_parse("5xyz", 1, 0, &d));
  assert_int_equal(d, 5000);
  /* An embedded NUL is just an invalid byte. */
  assert_status(RESIL_EINVAL, resil_retry_after_parse("12\0", 3, 0, &d));
  const char date[] = "Sun, 06 Nov 1994 08:49:37 GMT and more";
  assert_status(RESIL_OK, resil_retry_after_parse(date, 29, NOW_1994, &d));
  assert_int_equal(d, 37000);
  /* A heap copy without a terminator, so ASan catches any over-read. */
  size_t n = strlen("Sun Nov  6 08:49:37 1994");
  char *p = malloc(n);
  assert_non_null(p);
  memcpy(p, "Sun Nov  6 08:49:37 1994", n);
  for (size_t len = 0; len <= n; len++) {
    resil_status st = resil_retry_after_parse(p, len, NOW_1994, &d);
    assert_int_equal(st, len == n ? RESIL_OK : RESIL_EINVAL);
  }
  free(p);
}

static void null_arguments_are_invalid(void **state) {
  (void)state;
  int64_t d = 777;
  assert_status(RESIL_EINVAL, resil_retry_after_parse(NULL, 0, 0, &d));
  assert_status(RESIL_EINVAL, resil_retry_after_parse(NULL, 5, 0, &d));
  assert_int_equal(d, 777);
  assert_status(RESIL_EINVAL, resil_retry_after_parse("5", 1, 0, NULL));
}

/* A cheap in-tree stand-in for the fuzz target: random and mutated inputs
 * never crash or read out of bounds, and success always means delay >= 0. */
static void random_and_mutated_inputs_are_handled(void **state) {
  (void)state;
  const char *seeds[] = {"120", "Sun, 06 Nov 1994 08:49:37 GMT",
                         "Sunday, 06-Nov-94 08:49:37 GMT",
                         "Sun Nov  6 08:49:37 1994"};
  const char alphabet[] = "0123456789 :,-\tSunMoTeWdhFrSaJbMpyAgONvDcGMT\r";
  uint64_t x = 0x243F6A8885A308D3u;
  for (int iter = 0; iter < 200000; iter++) {
    char buf[48];
    size_t len;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    if (iter % 2) {
      const char *s = seeds[x % 4];
      len = strlen(s);
      memcpy(buf, s, len);
      size_t at = (size_t)(x >> 8) % len;
      buf[at] = alphabet[(x >> 20) % (sizeof alphabet - 1)];
      if ((x >> 30) % 4 == 0) len = (size_t)(x >> 40) % (len + 1);
    } else {
      len = (size_t)(x % sizeof buf);
      uint64_t y = x;
      for (size_t i = 0; i < len; i++) {
        y = y * 6364136223846793005u + 1442695040888963407u;
        buf[i] = alphabet[(y >> 33) % (sizeof alphabet - 1)];
      }
    }
    char *heap = malloc(len ? len : 1);
    assert_non_null(heap);
    memcpy(heap, buf, len);
    int64_t d = -1;
    if (resil_retry_after_parse(heap, len, NOW_2024, &d) == RESIL_OK &&
        d < 0)
      fail_msg("negative delay %lld", (long long)d);
    free(heap);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(delta_seconds_give_milliseconds),
      cmocka_unit_test(delta_seconds_saturate_instead_of_overflowing),
      cmocka_unit_test(delta_seconds_reject_signs_fractions_and_inner_spaces),
      cmocka_unit_test(surrounding_spaces_and_tabs_are_ignored),
      cmocka_unit_test(imf_fixdate_is_parsed),
      cmocka_unit_test(rfc850_date_is_parsed_with_the_two_digit_year_rule),
      cmocka_unit_test(asctime_date_is_parsed),
      cmocka_unit_test(past_or_present_date_means_now),
      cmocka_unit_test(malformed_dates_are_invalid),
      cmocka_unit_test(parser_reads_only_len_bytes),
      cmocka_unit_test(null_arguments_are_invalid),
      cmocka_unit_test(random_and_mutated_inputs_are_handled),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
