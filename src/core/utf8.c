/* resil__utf8_valid (internal.h): the one UTF-8 check of the libraries;
 * resil__escape_*: the one escaping of bytes in log lines and messages (the
 * HTTP log, the registry's errors). */
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

size_t resil__escape_count(const char *s, size_t n) {
  size_t k = 0;
  for (size_t i = 0; i < n; i++) k += resil__escape_needed((unsigned char)s[i]);
  return k;
}

static const char HEX[] = "0123456789abcdef";

void resil__escape_inplace(char *buf, size_t n, size_t k) {
  size_t r = n, w = n + 3 * k;
  buf[w] = '\0';
  while (r > 0) {
    unsigned char c = (unsigned char)buf[--r];
    if (resil__escape_needed(c)) {
      buf[--w] = HEX[c & 15];
      buf[--w] = HEX[c >> 4];
      buf[--w] = 'x';
      buf[--w] = '\\';
    } else {
      buf[--w] = (char)c;
    }
  }
}

char *resil__escape_excerpt(char *dst, size_t cap, const char *s, size_t n) {
  if (cap == 0) return dst;
  size_t whole = n + 3 * resil__escape_count(s, n);
  /* all of it, or as much as fits before "..." (never part of an escape) */
  size_t room = whole < cap ? whole : (cap >= 4 ? cap - 4 : 0);
  size_t w = 0;
  for (size_t i = 0; i < n; i++) {
    unsigned char c = (unsigned char)s[i];
    size_t u = resil__escape_needed(c) ? 4 : 1;
    if (w + u > room) break;
    if (u == 4) {
      dst[w++] = '\\';
      dst[w++] = 'x';
      dst[w++] = HEX[c >> 4];
      dst[w++] = HEX[c & 15];
    } else {
      dst[w++] = (char)c;
    }
  }
  if (whole >= cap)
    for (size_t i = 0; i < 3 && w + 1 < cap; i++) dst[w++] = '.';
  dst[w] = '\0';
  return dst;
}
