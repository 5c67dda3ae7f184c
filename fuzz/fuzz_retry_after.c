/* libFuzzer target for resil_retry_after_parse (include/resil/retry.h).
 *
 * The input is the raw field value; the first 8 bytes, when present, are
 * also mixed into the "now" the parser compares dates with, so both the
 * text and the clock are explored. Checked properties: the parser never
 * reads outside the buffer (the sanitizers see to that), success always
 * gives a delay >= 0, failure leaves the output untouched, and the result
 * does not depend on bytes after `len`.
 *
 * Build (not wired into CMake), from the repository root, with every
 * src/core .c file added after retry_after.c:
 *   clang -g -O1 -fsanitize=fuzzer,address,undefined \
 *     -D_POSIX_C_SOURCE=200809L -Iinclude -Isrc fuzz/fuzz_retry_after.c \
 *     src/retry/retry_after.c src/core/[a-z]*.c -lpthread -o fuzz_retry_after
 *   ./fuzz_retry_after fuzz/corpus/retry_after
 * (copy the corpus first if new inputs should not be written into it). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "resil/retry.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  /* 2024-01-01 00:00:00 GMT, shifted by up to about +-1000 years. */
  int64_t now = INT64_C(1704067200000);
  if (size >= 8) {
    /* Assembled on uint64_t: shifting a byte >= 0x80 into the sign bit of
     * an int64_t is undefined behaviour (the harness must have none of its
     * own). Mapped onto -R..R, R = 1000 years in milliseconds. */
    const uint64_t range = UINT64_C(31556952000000);
    uint64_t bits = 0;
    for (int i = 0; i < 8; i++) bits = (bits << 8) | data[i];
    now += (int64_t)(bits % (2 * range + 1)) - (int64_t)range;
  }
  /* An exact-size heap copy: any over-read is caught. */
  char *copy = malloc(size ? size : 1);
  if (!copy) return 0;
  memcpy(copy, data, size);
  int64_t delay = -7;
  resil_status st = resil_retry_after_parse(copy, size, now, &delay);
  if (st == RESIL_OK && delay < 0) abort();
  if (st != RESIL_OK && (st != RESIL_EINVAL || delay != -7)) abort();
  /* The same bytes followed by more must parse identically with len. */
  char *longer = malloc(size + 4);
  if (longer) {
    memcpy(longer, data, size);
    memcpy(longer + size, "9 GM", 4);
    int64_t d2 = -7;
    resil_status st2 = resil_retry_after_parse(longer, size, now, &d2);
    if (st2 != st || d2 != delay) abort();
    free(longer);
  }
  free(copy);
  return 0;
}
