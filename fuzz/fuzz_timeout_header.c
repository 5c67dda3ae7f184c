/* libFuzzer target for the relative timeouts of deadline propagation
 * (src/core/timeout_hdr.c) and the server's rule on them
 * (resil_deadline_from_headers, include/resil/deadline.h).
 *
 * The input is a header value. Checked properties: neither parser reads
 * outside [data, data + size) (an exact-size heap copy; the sanitizers see
 * to it) nor depends on the bytes after it; a failure leaves the output
 * untouched; a parsed gRPC value is >= 0 and, written back by the
 * formatter, parses again to no more than itself and to within 10^-5 of
 * it (the formatter rounds down); the formatter's output is 2..9 bytes of
 * the grammar. The input split in three at its first two NUL bytes feeds
 * resil_deadline_from_headers: the budget is never above the maximum, a
 * REFUSE is below the floor, and NONE gives the maximum.
 *
 * Build (not wired into CMake), from the repository root:
 *   clang -g -O1 -fsanitize=fuzzer,address,undefined \
 *     -D_POSIX_C_SOURCE=200809L -Iinclude -Isrc fuzz/fuzz_timeout_header.c \
 *     src/core/[a-z]*.c -lpthread -o fuzz_timeout_header
 *   ./fuzz_timeout_header fuzz/corpus/timeout_header
 * (copy the corpus first if new inputs should not be written into it). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/timeout_hdr.h"
#include "resil/deadline.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_grpc(const char *v, size_t n) {
  int64_t ns = -7;
  int rc = resil__timeout_parse(v, n, &ns);
  if (rc != 0) {
    if (rc != -1 || ns != -7) abort();
    return;
  }
  if (ns < 0) abort();
  char buf[RESIL__TIMEOUT_BUF];
  size_t len = resil__timeout_format(ns, buf);
  if (len < 2 || len > 9 || strlen(buf) != len) abort();
  int64_t back = -1;
  if (resil__timeout_parse(buf, len, &back) != 0 || back > ns) abort();
  if (ns - back > ns / 100000) abort();
}

static void check_ms(const char *v, size_t n) {
  int64_t ns = -7;
  int rc = resil__timeout_ms_parse(v, n, &ns);
  if (rc != 0 && (rc != -1 || ns != -7)) abort();
  if (rc == 0 && (ns < 0 || (ns != INT64_MAX && ns % 1000000 != 0))) abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *copy = malloc(size ? size : 1);
  char *longer = malloc(size + 3);
  if (!copy || !longer) {
    free(copy);
    free(longer);
    return 0;
  }
  memcpy(copy, data, size);
  check_grpc(copy, size);
  check_ms(copy, size);
  /* Bytes after len change nothing. */
  memcpy(longer, data, size);
  memcpy(longer + size, "9m ", 3);
  int64_t a = -7, b = -7;
  if (resil__timeout_parse(copy, size, &a) != resil__timeout_parse(longer, size, &b) || a != b)
    abort();
  a = b = -7;
  if (resil__timeout_ms_parse(copy, size, &a) != resil__timeout_ms_parse(longer, size, &b) ||
      a != b)
    abort();
  /* The rule on three NUL-terminated values taken from the input. */
  char *z = malloc(size + 3);
  if (z) {
    memcpy(z, data, size);
    z[size] = z[size + 1] = z[size + 2] = '\0';
    const char *v1 = z;
    const char *v2 = v1 + strlen(v1) + 1;
    const char *v3 = v2 < z + size + 1 ? v2 + strlen(v2) + 1 : NULL;
    if (v3 && v3 > z + size) v3 = NULL;
    int64_t max = size > 0 ? (int64_t)(data[0] % 4) * 1000000000 : 0;
    int64_t floor = size > 1 ? (int64_t)(data[1] % 8) * 1000000 : 5000000;
    if (max && floor > max) floor = max;
    int64_t budget = -1;
    unsigned from = 99, invalid = 99;
    resil_deadline_verdict v = resil_deadline_from_headers(v1, v2, v3, max, floor, &budget, &from,
                                                           &invalid);
    if (budget < 0 || (max && budget > max) || invalid > 7) abort();
    if (v == RESIL_DEADLINE_NONE && (from != 0 || budget != (max ? max : INT64_MAX))) abort();
    if (v == RESIL_DEADLINE_REFUSE && budget >= floor) abort();
    if (v == RESIL_DEADLINE_GIVEN && (budget < floor || from == 0)) abort();
    if (from & invalid) abort();
    free(z);
  }
  free(copy);
  free(longer);
  return 0;
}
