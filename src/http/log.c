/* Redaction of secrets before anything reaches the log sink, and escaping of
 * what came from the network. Every level goes through these functions;
 * nothing else formats header values, URLs or bodies for the log, and every
 * line transfer.c builds leaves through resil__http_log_emit(). Matching is
 * case-insensitive and errs on the side of hiding too much ("monkey" hides a
 * value because it contains "key"). The rules are listed once, for users,
 * in the resil_http_log_fn comment of http.h. */
#include <stdio.h>
#include <string.h>

#include "log_int.h"

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

/* 1 when s[0..len) ends with the lower-case suffix, ignoring case. */
static int iends(const char *s, size_t len, const char *suffix) {
  size_t n = strlen(suffix);
  return n <= len && ieq(s + len - n, n, suffix);
}

int resil__http_secret_header(const char *name, size_t len) {
  static const char *const part[] = {"auth",    "token",      "secret",    "passw",
                                     "pwd",     "jwt",        "session",   "credential",
                                     "signature", "cookie",   "apikey",    "api-key",
                                     "api_key"};
  for (size_t i = 0; i < sizeof part / sizeof part[0]; i++)
    if (icontains(name, len, part[i])) return 1;
  /* "*-key": X-Access-Key, Ocp-Apim-Subscription-Key, ... but not the
   * idempotency key, which must stay visible to correlate attempts. */
  if (ieq(name, len, "key") || iends(name, len, "-key") || iends(name, len, "_key"))
    return !iends(name, len, "idempotency-key");
  return 0;
}

/* Matches a parameter name already decoded (see decode_name). */
static int secret_param_decoded(const char *name, size_t len) {
  static const char *const part[] = {"token", "key",        "secret",  "pass",
                                     "pwd",   "sig",        "auth",    "credential",
                                     "session", "cookie",   "jwt",     "assertion"};
  /* Short words that are secrets only as the whole name: an OAuth
   * authorization code, a one-time password, a PIN. */
  static const char *const whole[] = {"code", "otp", "pin"};
  for (size_t i = 0; i < sizeof part / sizeof part[0]; i++)
    if (icontains(name, len, part[i])) return 1;
  for (size_t i = 0; i < sizeof whole / sizeof whole[0]; i++)
    if (ieq(name, len, whole[i])) return 1;
  return 0;
}

static int hexval(int c) {
  if (c >= '0' && c <= '9') return c - '0';
  c = lower(c);
  return (c >= 'a' && c <= 'f') ? c - 'a' + 10 : -1;
}

/* Longest name decoded for matching; a longer one is treated as secret. */
#define NAME_MAX_DECODED 256

/* Decodes %XX and '+' in s[0..len) into out, again and again until nothing
 * changes (a name encoded twice, "%2574oken", is still "token"), and JSON
 * \uXXXX and \-escapes when json. Returns the decoded length, or -1 when
 * it does not fit. */
static long decode_name(const char *s, size_t len, int json, char *out) {
  if (len > NAME_MAX_DECODED) return -1;
  char tmp[NAME_MAX_DECODED];
  memcpy(out, s, len);
  size_t n = len;
  for (int round = 0; round < 4; round++) {
    size_t w = 0;
    int changed = 0;
    for (size_t i = 0; i < n; i++) {
      char c = out[i];
      int h1, h2;
      if (c == '%' && i + 2 < n && (h1 = hexval((unsigned char)out[i + 1])) >= 0 &&
          (h2 = hexval((unsigned char)out[i + 2])) >= 0) {
        tmp[w++] = (char)(h1 * 16 + h2);
        i += 2;
        changed = 1;
      } else if (c == '+' && !json) {
        tmp[w++] = ' ';
        changed = 1;
      } else if (json && c == '\\' && i + 1 < n) {
        char e = out[i + 1];
        if (e == 'u' && i + 5 < n) {
          int v = 0, ok = 1;
          for (size_t k = i + 2; k < i + 6; k++) {
            int h = hexval((unsigned char)out[k]);
            if (h < 0) ok = 0;
            v = v * 16 + (h < 0 ? 0 : h);
          }
          /* Only ASCII matters for the names matched; anything else is
           * kept as a non-matching byte. */
          tmp[w++] = ok && v < 0x80 ? (char)v : '?';
          i += 5;
        } else {
          tmp[w++] = e;
          i += 1;
        }
        changed = 1;
      } else {
        tmp[w++] = c;
      }
    }
    memcpy(out, tmp, w);
    n = w;
    if (!changed) break;
  }
  return (long)n;
}

static int secret_name(const char *name, size_t len, int json) {
  char dec[NAME_MAX_DECODED];
  long n = decode_name(name, len, json, dec);
  return n < 0 || secret_param_decoded(dec, (size_t)n);
}

int resil__http_secret_param(const char *name, size_t len) {
  return secret_name(name, len, 0);
}

/* Appends s[0..len) with the value of every secret-looking name=value pair
 * replaced, pairs being separated by any byte of seps: "a=1&token=[REDACTED]".
 * A bare secret-looking word (no '=') may itself be the secret and goes too. */
static int redact_pairs_sep(const resil_allocator *a, http_buf *out, const char *s,
                            size_t len, const char *seps) {
  size_t i = 0;
  while (i <= len) {
    size_t j = i;
    while (j < len && !strchr(seps, s[j])) j++;
    size_t eq = i;
    while (eq < j && s[eq] != '=') eq++;
    if (eq < j && resil__http_secret_param(s + i, eq - i)) {
      if (resil__http_buf_append(a, out, s + i, eq - i + 1) != 0 ||
          resil__http_buf_puts(a, out, REDACTED) != 0)
        return -1;
    } else if (eq == j && j > i && resil__http_secret_param(s + i, j - i)) {
      if (resil__http_buf_puts(a, out, REDACTED) != 0) return -1;
    } else if (resil__http_buf_append(a, out, s + i, j - i) != 0) {
      return -1;
    }
    if (j < len && resil__http_buf_append(a, out, s + j, 1) != 0) return -1;
    i = j + 1;
  }
  return 0;
}

/* A query string or a form: pairs separated by '&' or ';'. */
static int redact_pairs(const resil_allocator *a, http_buf *out, const char *s,
                        size_t len) {
  return redact_pairs_sep(a, out, s, len, "&;");
}

int resil__http_redact_url(const resil_allocator *a, http_buf *out,
                           const char *url) {
  size_t len = strlen(url);
  const char *q = memchr(url, '?', len);
  size_t head = q ? (size_t)(q - url) : len;
  const char *frag = memchr(url, '#', len);
  if (frag && (size_t)(frag - url) < head) head = (size_t)(frag - url);
  /* Userinfo: between "//" and the last '@' before the path. */
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
  /* The fragment is never sent, and an OAuth implicit grant puts the token
   * there: it is dropped. */
  if (!q || (frag && frag < q)) return 0;
  size_t qend = frag ? (size_t)(frag - url) : len;
  if (resil__http_buf_append(a, out, "?", 1) != 0) return -1;
  size_t qs = (size_t)(q - url) + 1;
  return redact_pairs(a, out, url + qs, qend - qs);
}

/* Bytes that end a name=value pair inside a header value such as Link: <https://h/?a=b>; rel="next" or Refresh: 0; url=... */
#define HDR_SEPS "?#&;,<>\"' \t"

/* Any header value that is not secret as a whole: the userinfo of every URL
 * in it ("scheme://user:pw@host") and the value of every secret-looking
 * name=value pair (query, fragment, parameters) are replaced. This covers
 * the URL-valued headers of both directions (Location, Content-Location,
 * Link, Refresh, Referer, ...) without a list that could miss one. */
static int redact_header_value(const resil_allocator *a, http_buf *out, const char *v,
                               size_t len) {
  http_buf tmp = {0};
  size_t i = 0, from = 0;
  int rc = 0;
  while (rc == 0 && i + 3 <= len) {
    if (memcmp(v + i, "://", 3) != 0) {
      i++;
      continue;
    }
    size_t auth = i + 3, end = auth, at = 0;
    int has_at = 0;
    /* The authority ends only where a URL or the header's syntax must end
     * it: a password may hold ';', ',', '&' or '@'. */
    while (end < len && !strchr("/?#<>\"' \t", v[end])) {
      if (v[end] == '@') {
        at = end;
        has_at = 1;
      }
      end++;
    }
    if (has_at) {
      rc = resil__http_buf_append(a, &tmp, v + from, auth - from);
      if (rc == 0) rc = resil__http_buf_puts(a, &tmp, REDACTED);
      from = at;
    }
    i = end;
  }
  if (rc == 0) rc = resil__http_buf_append(a, &tmp, v + from, len - from);
  if (rc == 0) rc = redact_pairs_sep(a, out, tmp.p, tmp.len, HDR_SEPS);
  resil__http_buf_free(a, &tmp);
  return rc;
}

int resil__http_log_header(const resil_allocator *a, http_buf *out, const char *name,
                           size_t nl, const char *value, size_t vl) {
  if (resil__http_buf_puts(a, out, "  ") != 0 ||
      resil__http_buf_append(a, out, name, nl) != 0 ||
      resil__http_buf_puts(a, out, ": ") != 0)
    return -1;
  if (resil__http_secret_header(name, nl)) return resil__http_buf_puts(a, out, REDACTED);
  return redact_header_value(a, out, value, vl);
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

void resil__http_redact_excerpt(const resil_allocator *a, char *dst, size_t cap,
                                const char *s, size_t len, int pairs) {
  if (cap == 0) return;
  dst[0] = '\0';
  http_buf b = {0};
  int rc = pairs ? redact_pairs(a, &b, s, len) : resil__http_buf_append(a, &b, s, len);
  if (rc != 0 || !b.p)
    snprintf(dst, cap, "%s", REDACTED);
  else
    resil__escape_excerpt(dst, cap, b.p, b.len); /* cut with "...", never in an escape */
  resil__http_buf_free(a, &b);
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
    if (is_key && kend - i >= 2 && secret_name(s + i + 1, kend - i - 2, 1)) {
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
