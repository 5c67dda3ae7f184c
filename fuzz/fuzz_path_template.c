/* libFuzzer target for libresil-http's template parser and expander.
 *
 * Input: the first byte selects the template kind (byte % 3: path, query,
 * header value), the rest is the template. Checks, beyond "no crash, no
 * out-of-bounds read": an accepted template is covered exactly by its
 * parts, placeholders have valid names, and its expansion with values
 * that need encoding contains no brace and, for URL kinds, no raw space,
 * '#' or non-ASCII byte; a path expanded with "." and ".." values has as
 * many dot segments as with plain values (a value never makes one); a
 * refused one reports an offset inside the input.
 *
 * Build (clang):
 *   clang -g -O1 -fsanitize=fuzzer,address,undefined -Iinclude -Isrc \
 *     fuzz/fuzz_path_template.c src/http/template.c src/core/alloc.c \
 *     -o fuzz_path_template
 *   ./fuzz_path_template fuzz/corpus/path_template
 * tests/unit/test_http_template.c replays the corpus as a regression test. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "http/template.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(x)                                                               \
  do {                                                                         \
    if (!(x)) __builtin_trap();                                                \
  } while (0)

static int name_ok(const char *s, size_t n) {
  if (n == 0 || n > HTTP_TPL_MAX_NAME) return 0;
  for (size_t i = 0; i < n; i++) {
    unsigned char c = (unsigned char)s[i];
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
          c == '_' || c == '.' || c == '-'))
      return 0;
  }
  return 1;
}

/* Segments of path p[0..n) that are "." or "..". */
static size_t dot_segments(const char *p, size_t n) {
  size_t count = 0, i = 0;
  while (i < n) {
    size_t j = i + 1;
    while (j < n && p[j] != '/') j++;
    size_t seg = j - i - 1;
    if ((seg == 1 || seg == 2) && strspn(p + i + 1, ".") >= seg) count++;
    i = j;
  }
  return count;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size == 0) return 0;
  http_tpl_kind kind = (http_tpl_kind)(data[0] % 3);
  const char *s = (const char *)data + 1;
  size_t len = size - 1;
  uint32_t n = 0;
  size_t off = 0;
  const char *why = NULL;
  if (resil__http_tpl_parse(s, len, kind, NULL, 0, &n, &off, &why) != 0) {
    CHECK(why != NULL);
    CHECK(off <= len || off == HTTP_TPL_MAX_LEN);
    return 0;
  }
  http_tpl t = {s, NULL, 0};
  if (n) {
    t.parts = calloc(n, sizeof *t.parts);
    CHECK(t.parts != NULL);
  }
  uint32_t n2 = 0;
  CHECK(resil__http_tpl_parse(s, len, kind, t.parts, n, &n2, &off, &why) == 0);
  CHECK(n2 == n);
  t.nparts = n;
  /* The parts tile the input in order: literals verbatim, placeholders
   * with their braces. */
  size_t pos = 0;
  resil_http_param params[64];
  size_t np = 0;
  for (uint32_t i = 0; i < n; i++) {
    const http_tpl_part *p = &t.parts[i];
    if (p->is_var) {
      CHECK(p->off == pos + 1 && s[pos] == '{' && s[p->off + p->len] == '}');
      CHECK(name_ok(s + p->off, p->len));
      pos = p->off + p->len + 1;
      if (np < 64) {
        char *nm = malloc(p->len + 1);
        CHECK(nm != NULL);
        memcpy(nm, s + p->off, p->len);
        nm[p->len] = '\0';
        params[np].name = nm;
        params[np].value = "v /#{}\xc3\xa9%";
        np++;
      }
    } else {
      CHECK(p->off == pos && p->len > 0);
      CHECK(i == 0 || t.parts[i - 1].is_var);
      pos = p->off + p->len;
    }
  }
  CHECK(pos == len);
  if (kind == HTTP_TPL_PATH) CHECK(len > 0 && s[0] == '/');
  http_buf out = {0};
  const http_tpl_part *miss = NULL;
  int rc = resil__http_tpl_expand(NULL, &t, params, np, kind != HTTP_TPL_HEADER, &out, &miss);
  CHECK(rc == 0 || (rc == -1 && np == 64));
  if (rc == 0 && kind != HTTP_TPL_HEADER) {
    for (size_t i = 0; i < out.len; i++) {
      unsigned char c = (unsigned char)out.p[i];
      CHECK(c != '{' && c != '}' && c != ' ' && c != '#' && c > 0x20 && c < 0x7f);
    }
  }
  resil__http_buf_free(NULL, &out);
  if (rc == 0 && kind == HTTP_TPL_PATH) {
    http_buf dots = {0}, plain = {0};
    for (size_t i = 0; i < np; i++) params[i].value = i % 2 ? "." : "..";
    CHECK(resil__http_tpl_expand(NULL, &t, params, np, 1, &dots, &miss) == 0);
    for (size_t i = 0; i < np; i++) params[i].value = "x";
    CHECK(resil__http_tpl_expand(NULL, &t, params, np, 1, &plain, &miss) == 0);
    CHECK(dot_segments(dots.p, dots.len) == dot_segments(plain.p, plain.len));
    resil__http_buf_free(NULL, &dots);
    resil__http_buf_free(NULL, &plain);
  }
  for (size_t i = 0; i < np; i++) free((void *)params[i].name);
  free(t.parts);
  return 0;
}
