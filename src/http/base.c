/* Layer 0 of libresil-http (base.h): the clock, method names and the ASCII
 * header rules shared by every layer above. */
#include "base.h"

#include <string.h>
#include <time.h>

int64_t resil__http_mono_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * RESIL_NS_PER_S + ts.tv_nsec;
}

const char *resil__http_method_name(resil_http_method m) {
  switch (m) {
  case RESIL_HTTP_GET: return "GET";
  case RESIL_HTTP_HEAD: return "HEAD";
  case RESIL_HTTP_POST: return "POST";
  case RESIL_HTTP_PUT: return "PUT";
  case RESIL_HTTP_PATCH: return "PATCH";
  case RESIL_HTTP_DELETE: return "DELETE";
  case RESIL_HTTP_OPTIONS: return "OPTIONS";
  }
  return "GET";
}

int resil__http_ieq(const char *a, size_t alen, const char *b, size_t blen) {
  if (alen != blen) return 0;
  for (size_t i = 0; i < alen; i++) {
    int x = (unsigned char)a[i], y = (unsigned char)b[i];
    if (x >= 'A' && x <= 'Z') x += 32;
    if (y >= 'A' && y <= 'Z') y += 32;
    if (x != y) return 0;
  }
  return 1;
}

int resil__http_reserved_header(const char *n, size_t len) {
  static const char *const names[] = {"content-length", "transfer-encoding", "host",
                                      "expect", "content-encoding", "connection"};
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
    if (resil__http_ieq(n, len, names[i], strlen(names[i]))) return 1;
  return 0;
}

int resil__http_value_ok(const char *v, size_t n) {
  for (size_t i = 0; i < n; i++) {
    unsigned char ch = (unsigned char)v[i];
    if (ch == '\r' || ch == '\n' || ch == 0) return 0;
  }
  return 1;
}
