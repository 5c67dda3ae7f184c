/* resil__utf8_valid (internal.h): the one UTF-8 check of the libraries. */
#include "core/internal.h"

int resil__utf8_valid(const void *s, size_t n) {
  const unsigned char *p = s;
  size_t i = 0;
  while (i < n) {
    unsigned c = p[i];
    size_t k;
    uint32_t cp;
    if (c < 0x80) {
      i++;
      continue;
    } else if ((c & 0xe0) == 0xc0) {
      k = 1;
      cp = c & 0x1f;
    } else if ((c & 0xf0) == 0xe0) {
      k = 2;
      cp = c & 0x0f;
    } else if ((c & 0xf8) == 0xf0) {
      k = 3;
      cp = c & 0x07;
    } else {
      return 0;
    }
    if (n - i <= k) return 0; /* truncated sequence */
    for (size_t j = 1; j <= k; j++) {
      if ((p[i + j] & 0xc0) != 0x80) return 0;
      cp = (cp << 6) | (p[i + j] & 0x3fu);
    }
    if ((k == 1 && cp < 0x80) || (k == 2 && cp < 0x800) || (k == 3 && cp < 0x10000) ||
        cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
      return 0;
    i += k + 1;
  }
  return 1;
}
