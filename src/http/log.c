/* Redaction of secrets before anything reaches the log sink, and escaping of
 * what came from the network. Every level goes through these functions;
 * nothing else formats header values, URLs or bodies for the log, and every
 * line transfer.c builds leaves through resil__http_log_emit(). Matching is
 * case-insensitive and errs on the side of hiding too much ("monkey" hides a
 * value because it contains "key"). The rules are listed once, for users,
 * in the resil_http_log_fn comment of http.h. */
#include <stdio.h>
#include <string.h>

#include "core/redact.h"
#include "log_int.h"

#define REDACTED RESIL__REDACTED

/* 1 when s[0..len) ends with the lower-case suffix, ignoring case. */
static int iends(const char *s, size_t len, const char *suffix) {
  size_t n = strlen(suffix);
  return n <= len && resil__ieq(s + len - n, n, suffix);
}

int resil__http_secret_header(const char *name, size_t len) {
  static const char *const part[] = {"auth",    "token",      "secret",    "passw",
                                     "pwd",     "jwt",        "session",   "credential",
                                     "signature", "cookie",   "apikey",    "api-key",
                                     "api_key"};
  for (size_t i = 0; i < sizeof part / sizeof part[0]; i++)
    if (resil__icontains(name, len, part[i])) return 1;
  /* "*-key": X-Access-Key, Ocp-Apim-Subscription-Key, ... but not the
   * idempotency key, which must stay visible to correlate attempts. */
  if (resil__ieq(name, len, "key") || iends(name, len, "-key") || iends(name, len, "_key"))
    return !iends(name, len, "idempotency-key");
  return 0;
}

int resil__http_put(void *to, const char *s, size_t n) {
  http_put_to *h = to;
  return resil__http_buf_append(h->a, h->b, s, n);
}

static int redact_pairs(const resil_allocator *a, http_buf *out, const char *s, size_t len) {
  http_put_to h = {a, out};
  return resil__redact_pairs(resil__http_put, &h, s, len, "&;");
}

int resil__http_redact_url(const resil_allocator *a, http_buf *out, const char *url) {
  http_put_to h = {a, out};
  return resil__redact_url(resil__http_put, &h, url, strlen(url));
}

int resil__http_log_header(const resil_allocator *a, http_buf *out, const char *name,
                           size_t nl, const char *value, size_t vl) {
  if (resil__http_buf_puts(a, out, "  ") != 0 ||
      resil__http_buf_append(a, out, name, nl) != 0 ||
      resil__http_buf_puts(a, out, ": ") != 0)
    return -1;
  if (resil__http_secret_header(name, nl)) return resil__http_buf_puts(a, out, REDACTED);
  /* Any other value: the userinfo of every URL in it and the value of every
   * secret-looking name=value pair in it (query, fragment, parameters).
   * This covers the URL-valued headers of both directions (Location,
   * Content-Location, Link, Refresh, Referer, ...) without a list that
   * could miss one. */
  http_put_to h = {a, out};
  return resil__redact_text(resil__http_put, &h, value, vl);
}

/* Rewrites b->p[from..len) in place escaped (resil__escape_inplace: every
 * control byte, DEL and byte >= 0x80 as "\xNN"). Without memory for that,
 * those bytes become '?': a raw one never passes. */
static void escape_tail(const resil_allocator *a, http_buf *b, size_t from) {
  size_t k = resil__escape_count(b->p + from, b->len - from);
  if (k == 0) return;
  if (resil__http_buf_reserve(a, b, 3 * k) != 0) {
    for (size_t i = from; i < b->len; i++)
      if (resil__escape_needed((unsigned char)b->p[i])) b->p[i] = '?';
    return;
  }
  resil__escape_inplace(b->p + from, b->len - from, k);
  b->len += 3 * k;
}

void resil__http_log_emit(const resil_allocator *a, resil_http_log_fn fn, void *user,
                          resil_http_log_level lv, http_buf *line) {
  if (!line->p) return;
  escape_tail(a, line, 0);
  fn(user, lv, line->p);
  line->len = 0;
  line->p[0] = '\0';
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
    if (is_key && kend - i >= 2 && resil__secret_name(s + i + 1, kend - i - 2, 1)) {
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
