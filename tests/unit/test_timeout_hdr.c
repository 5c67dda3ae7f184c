/* The relative timeouts of deadline propagation (src/core/timeout_hdr.c,
 * DESIGN §8.3): gRPC's grammar written and read, Envoy's milliseconds read,
 * with hostile input: empty, 9 digits, signs, inner spaces, bad and doubled
 * units, NUL bytes, overflow. */
#include <stdlib.h>
#include <string.h>

#include "core/timeout_hdr.h"
#include "resil/deadline.h"
#include "test_util.h"

#define NS_MS INT64_C(1000000)
#define NS_S INT64_C(1000000000)

static void expect_format(int64_t ns, const char *want) {
  char buf[RESIL__TIMEOUT_BUF];
  memset(buf, 'x', sizeof buf);
  size_t n = resil__timeout_format(ns, buf);
  if (n != strlen(want) || strcmp(buf, want) != 0)
    fail_msg("%lld ns: \"%s\" (%zu), expected \"%s\"", (long long)ns, buf, n, want);
}

static void expect_ns(const char *s, int64_t want) {
  int64_t got = -12345;
  if (resil__timeout_parse(s, strlen(s), &got) != 0) fail_msg("\"%s\": refused", s);
  if (got != want) fail_msg("\"%s\": %lld ns, expected %lld", s, (long long)got, (long long)want);
}

static void expect_invalid_n(const char *s, size_t len) {
  int64_t got = 777;
  if (resil__timeout_parse(s, len, &got) == 0)
    fail_msg("\"%.*s\": accepted as %lld ns", (int)len, s, (long long)got);
  if (got != 777) fail_msg("\"%.*s\": output changed on error", (int)len, s);
}

static void expect_invalid(const char *s) { expect_invalid_n(s, strlen(s)); }

static void expect_ms(const char *s, int64_t want) {
  int64_t got = -12345;
  if (resil__timeout_ms_parse(s, strlen(s), &got) != 0) fail_msg("\"%s\": refused", s);
  if (got != want) fail_msg("\"%s\": %lld ns, expected %lld", s, (long long)got, (long long)want);
}

static void expect_ms_invalid(const char *s) {
  int64_t got = 777;
  if (resil__timeout_ms_parse(s, strlen(s), &got) == 0)
    fail_msg("\"%s\": accepted as %lld ns", s, (long long)got);
  if (got != 777) fail_msg("\"%s\": output changed on error", s);
}

static void format_picks_finest_unit_and_rounds_down(void **state) {
  (void)state;
  expect_format(0, "0n");
  expect_format(-5, "0n");
  expect_format(INT64_MIN, "0n");
  expect_format(1, "1n");
  expect_format(99999999, "99999999n");
  /* 10^8 ns needs 9 digits in n: microseconds. */
  expect_format(100000000, "100000u");
  /* Rounded down, never up: 100000999 ns is 100000.999 us. */
  expect_format(100000999, "100000u");
  expect_format(300 * NS_MS + 123456, "300123u");
  expect_format(99999999999, "99999999u");
  expect_format(100000000000, "100000m");
  expect_format(100000000999999, "100000S");
  expect_format(99999999 * NS_MS + 999999, "99999999m");
  expect_format(99999999 * NS_S, "99999999S");
  expect_format(100000000 * NS_S, "1666666M");
  expect_format(INT64_MAX, "2562047H");
}

static void format_never_gives_more_than_it_was_given(void **state) {
  (void)state;
  /* Every value, parsed back, is <= the input, and close to it: within one
   * unit, and a unit is at most 10^-5 of a value written in it (a coarser
   * unit is taken only at 10^8 of the finer one, so at 10^5 of itself). */
  int64_t v = 1;
  for (int i = 0; i < 4000; i++) {
    char buf[RESIL__TIMEOUT_BUF];
    size_t n = resil__timeout_format(v, buf);
    assert_true(n >= 2 && n <= 9);
    int64_t back = -1;
    assert_int_equal(resil__timeout_parse(buf, n, &back), 0);
    if (back > v) fail_msg("%lld ns became \"%s\" = %lld ns", (long long)v, buf, (long long)back);
    if (v - back > v / 100000)
      fail_msg("%lld ns became \"%s\" = %lld ns: too coarse", (long long)v, buf, (long long)back);
    /* A spread of magnitudes: grow by ~1.01 plus an odd step. */
    if (v > INT64_MAX / 102 * 100) break;
    v = v + v / 100 + 7;
  }
}

static void parse_accepts_the_grammar(void **state) {
  (void)state;
  expect_ns("0n", 0);
  expect_ns("1n", 1);
  expect_ns("1u", 1000);
  expect_ns("1m", NS_MS);
  expect_ns("1S", NS_S);
  expect_ns("1M", 60 * NS_S);
  expect_ns("1H", 3600 * NS_S);
  expect_ns("99999999n", 99999999);
  expect_ns("00000001S", NS_S);
  expect_ns("300m", 300 * NS_MS);
  /* Optional whitespace around a field value is not part of it. */
  expect_ns(" 300m", 300 * NS_MS);
  expect_ns("300m\t ", 300 * NS_MS);
  /* Too large for int64 nanoseconds: saturated, never wrapped. */
  expect_ns("99999999H", INT64_MAX);
  expect_ns("2562048H", INT64_MAX);
  expect_ns("2562047H", INT64_C(2562047) * 3600 * NS_S);
  expect_ns("99999999M", INT64_C(99999999) * 60 * NS_S);
  expect_ns("99999999S", 99999999 * NS_S);
}

static void parse_refuses_everything_else(void **state) {
  (void)state;
  expect_invalid("");
  expect_invalid(" ");
  expect_invalid(" \t ");
  expect_invalid("m");
  expect_invalid("300");
  expect_invalid("123456789n"); /* 9 digits */
  expect_invalid("000000001n"); /* 9 digits, even as leading zeros */
  expect_invalid("99999999999999999999999H");
  expect_invalid("+300m");
  expect_invalid("-300m");
  expect_invalid("300 m");
  expect_invalid("3 00m");
  expect_invalid("300mm");
  expect_invalid("300ms");
  expect_invalid("300s"); /* seconds are 'S'; 's' is no unit */
  expect_invalid("300h");
  expect_invalid("300x");
  expect_invalid("300m,200m");
  expect_invalid("0x10m");
  expect_invalid("1e3m");
  expect_invalid("3.5S");
  expect_invalid("\xd9\xa3m"); /* an Arabic-Indic digit */
  expect_invalid("300m\r\n");
  expect_invalid("\v300m");
  /* NUL bytes are bytes: "300m\0" is five bytes, not "300m". */
  expect_invalid_n("300m\0", 5);
  expect_invalid_n("3\0000m", 5);
  /* len is respected: only "30" is looked at. */
  expect_invalid_n("300m", 2);
  int64_t ns = 5;
  assert_int_equal(resil__timeout_parse(NULL, 3, &ns), -1);
  assert_int_equal(resil__timeout_parse("1m", 2, NULL), -1);
  assert_int_equal(ns, 5);
}

static void envoy_milliseconds(void **state) {
  (void)state;
  expect_ms("0", 0);
  expect_ms("300", 300 * NS_MS);
  expect_ms(" 15000 ", 15000 * NS_MS);
  expect_ms("000000000000000001", NS_MS); /* 18 digits */
  expect_ms("999999999999999999", INT64_MAX);
  expect_ms("9223372036854", 9223372036854 * NS_MS);
  expect_ms("9223372036855", INT64_MAX);
  expect_ms_invalid("");
  expect_ms_invalid(" ");
  expect_ms_invalid("1000000000000000000"); /* 19 digits */
  expect_ms_invalid("-1");
  expect_ms_invalid("+1");
  expect_ms_invalid("1 0");
  expect_ms_invalid("10ms");
  expect_ms_invalid("10m");
  expect_ms_invalid("1.5");
  expect_ms_invalid("1,2");
  int64_t ns = 5;
  assert_int_equal(resil__timeout_ms_parse("12", 1, &ns), 0);
  assert_int_equal(ns, NS_MS);
}

/* resil_deadline_from_headers: the server's rule. */
typedef struct verdict {
  resil_deadline_verdict v;
  int64_t budget;
  unsigned from, invalid;
} verdict;

static verdict from_headers(const char *own, const char *grpc, const char *envoy, int64_t max,
                            int64_t floor) {
  verdict r = {0, -1, 99, 99};
  r.v = resil_deadline_from_headers(own, grpc, envoy, max, floor, &r.budget, &r.from, &r.invalid);
  return r;
}

#define FLOOR RESIL_DEADLINE_FLOOR_NS

static void server_takes_the_smallest_valid_value(void **state) {
  (void)state;
  verdict r = from_headers(NULL, NULL, NULL, 0, FLOOR);
  assert_int_equal(r.v, RESIL_DEADLINE_NONE);
  assert_true(r.budget == INT64_MAX);
  assert_int_equal(r.from, 0);
  assert_int_equal(r.invalid, 0);
  /* No header: the server's maximum. */
  r = from_headers(NULL, NULL, NULL, 2 * NS_S, FLOOR);
  assert_int_equal(r.v, RESIL_DEADLINE_NONE);
  assert_true(r.budget == 2 * NS_S);
  r = from_headers("300m", NULL, NULL, 0, FLOOR);
  assert_int_equal(r.v, RESIL_DEADLINE_GIVEN);
  assert_true(r.budget == 300 * NS_MS);
  assert_int_equal(r.from, RESIL_DEADLINE_FROM_HEADER);
  /* The smallest wins, whichever header carries it. */
  r = from_headers("300m", "200000u", "250", 0, FLOOR);
  assert_true(r.budget == 200 * NS_MS);
  assert_int_equal(r.from, RESIL_DEADLINE_FROM_GRPC);
  r = from_headers("300m", "1S", "150", 0, FLOOR);
  assert_true(r.budget == 150 * NS_MS);
  assert_int_equal(r.from, RESIL_DEADLINE_FROM_ENVOY);
  /* Clamped to the server's maximum. */
  r = from_headers("10S", NULL, NULL, 2 * NS_S, FLOOR);
  assert_int_equal(r.v, RESIL_DEADLINE_GIVEN);
  assert_true(r.budget == 2 * NS_S);
  r = from_headers("99999999H", NULL, NULL, 0, FLOOR);
  assert_true(r.budget == INT64_MAX);
}

static void server_refuses_below_the_floor(void **state) {
  (void)state;
  verdict r = from_headers("4999999n", NULL, NULL, 0, FLOOR);
  assert_int_equal(r.v, RESIL_DEADLINE_REFUSE);
  assert_true(r.budget == 4999999);
  r = from_headers("5m", NULL, NULL, 0, FLOOR);
  assert_int_equal(r.v, RESIL_DEADLINE_GIVEN);
  r = from_headers("0n", NULL, NULL, 0, FLOOR);
  assert_int_equal(r.v, RESIL_DEADLINE_REFUSE);
  assert_true(r.budget == 0);
  /* A large value elsewhere does not rescue a small one. */
  r = from_headers("1S", "3m", NULL, 0, FLOOR);
  assert_int_equal(r.v, RESIL_DEADLINE_REFUSE);
  assert_int_equal(r.from, RESIL_DEADLINE_FROM_GRPC);
  /* Floor 0: nothing is refused; a negative floor is 0. */
  r = from_headers("0n", NULL, NULL, 0, 0);
  assert_int_equal(r.v, RESIL_DEADLINE_GIVEN);
  r = from_headers("1m", NULL, NULL, 0, -5);
  assert_int_equal(r.v, RESIL_DEADLINE_GIVEN);
}

static void server_ignores_invalid_values_and_says_so(void **state) {
  (void)state;
  /* Invalid only: as if absent, the server's maximum applies. */
  verdict r = from_headers("-1m", "soon", "1.5", 3 * NS_S, FLOOR);
  assert_int_equal(r.v, RESIL_DEADLINE_NONE);
  assert_true(r.budget == 3 * NS_S);
  assert_int_equal(r.invalid, RESIL_DEADLINE_FROM_HEADER | RESIL_DEADLINE_FROM_GRPC |
                                  RESIL_DEADLINE_FROM_ENVOY);
  /* An invalid value beside a valid one: the valid one counts. */
  r = from_headers("123456789m", "250m", NULL, 0, FLOOR);
  assert_int_equal(r.v, RESIL_DEADLINE_GIVEN);
  assert_true(r.budget == 250 * NS_MS);
  assert_int_equal(r.invalid, RESIL_DEADLINE_FROM_HEADER);
  /* An invalid tiny value refuses nothing. */
  r = from_headers("1 m", NULL, NULL, 0, FLOOR);
  assert_int_equal(r.v, RESIL_DEADLINE_NONE);
  /* Envoy's 0 is "no timeout": absent, not invalid. */
  r = from_headers(NULL, NULL, "0", 0, FLOOR);
  assert_int_equal(r.v, RESIL_DEADLINE_NONE);
  assert_int_equal(r.invalid, 0);
  /* Envoy's value is milliseconds, never the gRPC grammar. */
  r = from_headers(NULL, NULL, "300m", 0, FLOOR);
  assert_int_equal(r.invalid, RESIL_DEADLINE_FROM_ENVOY);
  assert_int_equal(resil_deadline_from_headers("1m", NULL, NULL, 0, FLOOR, NULL, NULL, NULL),
                   RESIL_DEADLINE_NONE);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(format_picks_finest_unit_and_rounds_down),
      cmocka_unit_test(format_never_gives_more_than_it_was_given),
      cmocka_unit_test(parse_accepts_the_grammar),
      cmocka_unit_test(parse_refuses_everything_else),
      cmocka_unit_test(envoy_milliseconds),
      cmocka_unit_test(server_takes_the_smallest_valid_value),
      cmocka_unit_test(server_refuses_below_the_floor),
      cmocka_unit_test(server_ignores_invalid_values_and_says_so),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
