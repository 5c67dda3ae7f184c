/* libFuzzer target for resil_registry_load_string (include/resil/registry.h,
 * libresil-config).
 *
 * The input is the YAML text. Checked properties: the loader never reads
 * outside the buffer nor leaks (the sanitizers see to that); success gives
 * a registry whose instance count matches its iteration; failure leaves
 * *out untouched, gives EINVAL, EIO or ENOMEM, a non-empty message and a
 * line within the text (or 0); a reload of the same text onto the loaded
 * registry keeps every instance. Inputs naming the store section are
 * skipped: a store would create database files wherever the input says.
 *
 * Build (not wired into CMake), from the repository root, after a normal
 * build in build/dev (for libresil-config.a, libresil-http.a, libresil.a):
 *   clang -g -O1 -fsanitize=fuzzer,address,undefined -D_POSIX_C_SOURCE=200809L \
 *     -Iinclude fuzz/fuzz_registry.c build/dev/libresil-config.a \
 *     build/dev/libresil-http.a build/dev/libresil-store.a build/dev/libresil.a \
 *     $(pkg-config --libs yaml-0.1 libcurl jansson zlib sqlite3 libpq libcrypto) \
 *     -lpthread -lm -o fuzz_registry
 *   ./fuzz_registry fuzz/corpus/registry */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "resil/registry.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int count(void *user, resil_registry_kind kind, const char *name, void *h) {
  (void)kind;
  if (!name || !h) abort();
  (*(size_t *)user)++;
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (memmem(data, size, "store", 5)) return 0;
  resil_registry *reg = (resil_registry *)0x1;
  resil_registry_error err;
  resil_registry_error_init(&err);
  resil_status st = resil_registry_load_string((const char *)data, size, "fuzz", &reg, &err);
  if (st != RESIL_OK) {
    if (reg != (resil_registry *)0x1) abort();
    if (st != RESIL_EINVAL && st != RESIL_EIO && st != RESIL_ENOMEM) abort();
    if (err.status != st || err.message[0] == 0) abort();
    /* An upper bound of YAML's line breaks: LF, CR, NEL (C2 85), LS and
     * PS (E2 80 A8/A9). */
    size_t lines = 1;
    for (size_t i = 0; i < size; i++)
      lines += data[i] == '\n' || data[i] == '\r' || data[i] == 0x85 || data[i] == 0xe2;
    if (err.line > lines + 1) abort();
    return 0;
  }
  size_t n = 0;
  if (resil_registry_foreach(reg, count, &n) != RESIL_OK) abort();
  if (n != resil_registry_count(reg, RESIL_REG_KIND_COUNT_)) abort();
  if (resil_registry_reload_string(reg, (const char *)data, size, "fuzz", &err) != RESIL_OK)
    abort();
  resil_registry_reload_stats rs;
  if (resil_registry_last_reload(reg, &rs) != RESIL_OK || rs.kept != n || rs.replaced ||
      rs.added || rs.removed)
    abort();
  resil_registry_free(reg);
  return 0;
}
