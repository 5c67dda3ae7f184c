/* Redaction of secrets before anything reaches the log sink. Every level
 * goes through these functions; nothing else formats header values, URLs
 * or bodies for the log. Matching is case-insensitive and errs on the side
 * of hiding too much ("monkey" hides a value because it contains "key"). */
#include <string.h>

#include "http_int.h"

#define REDACTED "[REDACTED]"

static int lower(int c) { return (c >= 'A' && c <= 'Z') ? c + 32 : c; }

static int ieq(const char *a, size_t alen, const char *b) {
  size_t blen = strlen(b);
  if (alen != blen) return 0;
  for (size_t i = 0; i < alen; i++)
    if (lower((unsigned char)a[i]) != b[i]) return 0;
  return 1;
}

/* 1 when the lower-case needle occurs in s[0..len) ignoring case. */
static int icontains(const char *s, size_t len, const char *needle) {
  size_t n = strlen(needle);
  if (n > len) return 0;
  for (size_t i = 0; i + n <= len; i++) {
    size_t k = 0;
    while (k < n && lower((unsigned char)s[i + k]) == needle[k]) k++;
    if (k == n) return 1;
  }
  return 0;
}

int resil__http_secret_header(const char *name, size_t len) {
  static const char *const exact[] = {"authorization", "proxy-authorization",
                                      "cookie", "set-cookie", "x-api-key",
                                      "api-key"};
  static const char *const part[] = {"api-key", "apikey", "api_key", "token",
                                     "secret", "password", "signature",
                                     "credential", "session"};
  for (size_t i = 0; i < sizeof exact / sizeof exact[0]; i++)
    if (ieq(name, len, exact[i])) return 1;
  for (size_t i = 0; i < sizeof part / sizeof part[0]; i++)
    if (icontains(name, len, part[i])) return 1;
  return 0;
}

int resil__http_secret_param(const char *name, size_t len) {
  static const char *const part[] = {"token", "key", "secret", "passw", "pwd",
                                     "signature", "sig", "auth", "credential",
                                     "session", "cookie"};
  for (size_t i = 0; i < sizeof part / sizeof part[0]; i++)
    if (icontains(name, len, part[i])) return 1;
  return 0;
}

/* Appends "a=1&token=[REDACTED]" for the pairs in s[0..len). */
static int redact_pairs(const resil_allocator *a, http_buf *out, const char *s,
                        size_t len) {
  size_t i = 0;
  while (i <= len) {
    size_t j = i;
    while (j < len && s[j] != '&' && s[j] != ';') j++;
    size_t eq = i;
    while (eq < j && s[eq] != '=') eq++;
    if (eq < j && resil__http_secret_param(s + i, eq - i)) {
      if (resil__http_buf_append(a, out, s + i, eq - i + 1) != 0 ||
          resil__http_buf_puts(a, out, REDACTED) != 0)
        return -1;
    } else if (eq == j && resil__http_secret_param(s + i, j - i)) {
      /* A bare secret-looking word may itself be the secret. */
      if (resil__http_buf_puts(a, out, REDACTED) != 0) return -1;
    } else if (resil__http_buf_append(a, out, s + i, j - i) != 0) {
      return -1;
    }
    if (j < len && resil__http_buf_append(a, out, s + j, 1) != 0) return -1;
    i = j + 1;
  }
  return 0;
}

int resil__http_redact_url(const resil_allocator *a, http_buf *out,
                           const char *url) {
  size_t len = strlen(url);
  const char *q = memchr(url, '?', len);
  size_t head = q ? (size_t)(q - url) : len;
  const char *frag = memchr(url, '#', len);
  if (frag && (size_t)(frag - url) < head) head = (size_t)(frag - url);
  /* Userinfo: between "//" and the first '@' before the path. */
  const char *ss = strstr(url, "//");
  size_t copied = 0;
  if (ss && (size_t)(ss - url) < head) {
    size_t auth = (size_t)(ss - url) + 2;
    size_t end = auth;
    while (end < head && url[end] != '/') end++;
    const char *at = NULL;
    for (size_t k = auth; k < end; k++)
      if (url[k] == '@') at = url + k;
    if (at) {
      if (resil__http_buf_append(a, out, url, auth) != 0 ||
          resil__http_buf_puts(a, out, REDACTED) != 0)
        return -1;
      copied = (size_t)(at - url);
    }
  }
  if (resil__http_buf_append(a, out, url + copied, head - copied) != 0) return -1;
  if (!q || (frag && frag < q)) return 0;
  size_t qend = frag ? (size_t)(frag - url) : len;
  if (resil__http_buf_append(a, out, "?", 1) != 0) return -1;
  size_t qs = (size_t)(q - url) + 1;
  return redact_pairs(a, out, url + qs, qend - qs);
}

/* Index just past a JSON string starting at s[i] == '"'. */
static size_t skip_string(const char *s, size_t len, size_t i) {
  i++;
  while (i < len && s[i] != '"') {
    if (s[i] == '\\') i++;
    i++;
  }
  return i < len ? i + 1 : len;
}

/* Index just past the JSON value starting at s[i] (after spaces). */
static size_t skip_value(const char *s, size_t len, size_t i) {
  if (i >= len) return len;
  if (s[i] == '"') return skip_string(s, len, i);
  if (s[i] == '{' || s[i] == '[') {
    int depth = 0;
    while (i < len) {
      char c = s[i];
      if (c == '"') {
        i = skip_string(s, len, i);
        continue;
      }
      if (c == '{' || c == '[') depth++;
      if (c == '}' || c == ']') {
        if (--depth == 0) return i + 1;
      }
      i++;
    }
    return len;
  }
  while (i < len && s[i] != ',' && s[i] != '}' && s[i] != ']' && s[i] != ' ' &&
         s[i] != '\n' && s[i] != '\r' && s[i] != '\t')
    i++;
  return i;
}

static int is_ws(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }

/* JSON: the value of a secret-looking key is replaced whole; any other
 * string that holds name=value pairs (an echoed query string, a form) gets
 * its secret-looking pairs redacted. */
static int redact_json(const resil_allocator *a, http_buf *out, const char *s,
                       size_t len) {
  size_t i = 0, copy_from = 0;
  while (i < len) {
    if (s[i] != '"') {
      i++;
      continue;
    }
    size_t kend = skip_string(s, len, i);
    size_t j = kend;
    while (j < len && is_ws(s[j])) j++;
    int is_key = j < len && s[j] == ':';
    if (is_key && resil__http_secret_param(s + i + 1, kend - i - 1)) {
      j++;
      while (j < len && is_ws(s[j])) j++;
      size_t vend = skip_value(s, len, j);
      if (resil__http_buf_append(a, out, s + copy_from, j - copy_from) != 0 ||
          resil__http_buf_puts(a, out, "\"" REDACTED "\"") != 0)
        return -1;
      copy_from = i = vend;
      continue;
    }
    if (!is_key && kend - i >= 2 && memchr(s + i + 1, '=', kend - i - 2)) {
      size_t inner = kend - i - 2 + (kend == len && s[len - 1] != '"' ? 1 : 0);
      if (resil__http_buf_append(a, out, s + copy_from, i + 1 - copy_from) != 0 ||
          redact_pairs(a, out, s + i + 1, inner) != 0)
        return -1;
      copy_from = i + 1 + inner;
    }
    i = kend;
  }
  return resil__http_buf_append(a, out, s + copy_from, len - copy_from);
}

int resil__http_redact_body(const resil_allocator *a, http_buf *out,
                            const char *body, size_t len, size_t max) {
  size_t n = len < max ? len : max;
  size_t i = 0;
  while (i < n && is_ws(body[i])) i++;
  int rc;
  if (i < n && (body[i] == '{' || body[i] == '['))
    rc = redact_json(a, out, body, n);
  else if (memchr(body, '=', n))
    rc = redact_pairs(a, out, body, n);
  else
    rc = resil__http_buf_append(a, out, body, n);
  if (rc != 0) return -1;
  if (n < len) return resil__http_buf_puts(a, out, " ...(truncated)");
  return 0;
}
