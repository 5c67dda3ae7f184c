/* Redaction of secrets (redact.h): URLs, name=value pairs, free text, and
 * excerpts for messages. Moved here from libresil-http's log.c so that the
 * store's messages and the fixture use the same rules as the HTTP log and
 * the event log. The rules are listed once, for users, in the
 * resil_http_log_fn comment of http.h. */
#include "redact.h"
#include "internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int lower(int c) { return (c >= 'A' && c <= 'Z') ? c + 32 : c; }

int resil__ieq(const char *a, size_t alen, const char *b) {
  size_t blen = strlen(b);
  if (alen != blen) return 0;
  for (size_t i = 0; i < alen; i++)
    if (lower((unsigned char)a[i]) != b[i]) return 0;
  return 1;
}

int resil__icontains(const char *s, size_t len, const char *needle) {
  size_t n = strlen(needle);
  if (n > len) return 0;
  for (size_t i = 0; i + n <= len; i++) {
    size_t k = 0;
    while (k < n && lower((unsigned char)s[i + k]) == needle[k]) k++;
    if (k == n) return 1;
  }
  return 0;
}

static int hexval(int c) {
  if (c >= '0' && c <= '9') return c - '0';
  c = lower(c);
  return (c >= 'a' && c <= 'f') ? c - 'a' + 10 : -1;
}

/* Matches a parameter name already decoded (see decode). */
static int secret_param_decoded(const char *name, size_t len) {
  static const char *const part[] = {"token", "key",        "secret",  "pass",
                                     "pwd",   "sig",        "auth",    "credential",
                                     "session", "cookie",   "jwt",     "assertion"};
  /* Short words that are secrets only as the whole name: an OAuth
   * authorization code, a one-time password, a PIN. */
  static const char *const whole[] = {"code", "otp", "pin"};
  for (size_t i = 0; i < sizeof part / sizeof part[0]; i++)
    if (resil__icontains(name, len, part[i])) return 1;
  for (size_t i = 0; i < sizeof whole / sizeof whole[0]; i++)
    if (resil__ieq(name, len, whole[i])) return 1;
  return 0;
}

/* Longest name decoded for matching; a longer one is treated as secret. */
#define NAME_MAX_DECODED 256
/* Longest value decoded to look for userinfo in it. */
#define VALUE_MAX_DECODED 1024

/* Decodes %XX and '+' in s[0..len) into out (cap bytes; tmp the same size),
 * again and again until nothing changes (a name encoded twice,
 * "%2574oken", is still "token"), and JSON \uXXXX and \-escapes when json.
 * Returns the decoded length, or -1 when it does not fit. */
static long decode(const char *s, size_t len, int json, char *out, char *tmp, size_t cap) {
  if (len > cap) return -1;
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

int resil__secret_name(const char *name, size_t len, int json) {
  char dec[NAME_MAX_DECODED], tmp[NAME_MAX_DECODED];
  long n = decode(name, len, json, dec, tmp, sizeof dec);
  return n < 0 || secret_param_decoded(dec, (size_t)n);
}

/* The authority of url[0..head): after "scheme://" or a leading "//", else
 * (no scheme) from the start; it ends at the first '/' (head excludes the
 * query and fragment). Returns 1 when it holds userinfo, with *auth its
 * start and *at its last '@'. */
static int userinfo_at(const char *u, size_t head, size_t *auth, size_t *at) {
  size_t i = 0, a = 0;
  if (head > 0 && ((u[0] | 32) >= 'a' && (u[0] | 32) <= 'z')) {
    i = 1;
    while (i < head && (((u[i] | 32) >= 'a' && (u[i] | 32) <= 'z') ||
                        (u[i] >= '0' && u[i] <= '9') || u[i] == '+' || u[i] == '-' ||
                        u[i] == '.'))
      i++;
  }
  if (i > 0 && i + 3 <= head && memcmp(u + i, "://", 3) == 0)
    a = i + 3;
  else if (head >= 2 && u[0] == '/' && u[1] == '/')
    a = 2;
  int found = 0;
  for (size_t k = a; k < head && u[k] != '/'; k++)
    if (u[k] == '@') {
      *at = k;
      found = 1;
    }
  *auth = a;
  return found;
}

/* 1 when the decoded value d[0..n) holds a URL with userinfo: after any
 * "://", after a leading "//", or at its start without a scheme when a ':'
 * comes before the '@' ("user:pw@host"; a bare "a@b.org" is kept). */
static int has_userinfo(const char *d, size_t n) {
  for (size_t i = 0; i + 3 <= n; i++) {
    if (memcmp(d + i, "://", 3) != 0) continue;
    for (size_t e = i + 3; e < n && d[e] != '/' && d[e] != '?' && d[e] != '#'; e++)
      if (d[e] == '@') return 1;
  }
  /* "//user@host/..." (no scheme) needs no ':'. */
  size_t st = n >= 2 && d[0] == '/' && d[1] == '/' ? 2 : 0;
  int colon = st == 2;
  for (size_t e = st; e < n && d[e] != '/' && d[e] != '?' && d[e] != '#'; e++) {
    if (d[e] == ':') colon = 1;
    if (d[e] == '@') return colon;
  }
  return 0;
}

/* has_userinfo of v[0..n) percent-decoded; a value too long to decode
 * holding '@' or '%' counts as one. */
static int value_has_userinfo(const char *v, size_t n) {
  if (!memchr(v, '@', n) && !memchr(v, '%', n)) return 0;
  char dec[VALUE_MAX_DECODED], tmp[VALUE_MAX_DECODED];
  long k = decode(v, n, 0, dec, tmp, sizeof dec);
  return k < 0 || has_userinfo(dec, (size_t)k);
}

static int puts_(resil__put_fn put, void *out, const char *s) {
  return put(out, s, strlen(s));
}

/* resil__redact_pairs; bare: a bare secret-looking word goes too. */
static int redact_pairs(resil__put_fn put, void *out, const char *s, size_t len,
                        const char *seps, int bare) {
  size_t i = 0;
  while (i <= len) {
    size_t j = i;
    while (j < len && !strchr(seps, s[j])) j++;
    size_t eq = i;
    while (eq < j && s[eq] != '=') eq++;
    if (eq < j && (resil__secret_name(s + i, eq - i, 0) ||
                   value_has_userinfo(s + eq + 1, j - eq - 1))) {
      if (put(out, s + i, eq - i + 1) != 0 || puts_(put, out, RESIL__REDACTED) != 0) return -1;
    } else if (bare && eq == j && j > i && resil__secret_name(s + i, j - i, 0)) {
      if (puts_(put, out, RESIL__REDACTED) != 0) return -1;
    } else if (put(out, s + i, j - i) != 0) {
      return -1;
    }
    if (j < len && put(out, s + j, 1) != 0) return -1;
    i = j + 1;
  }
  return 0;
}

int resil__redact_pairs(resil__put_fn put, void *out, const char *s, size_t len,
                        const char *seps) {
  return redact_pairs(put, out, s, len, seps, 1);
}

int resil__redact_url(resil__put_fn put, void *out, const char *url, size_t len) {
  const char *q = memchr(url, '?', len);
  size_t head = q ? (size_t)(q - url) : len;
  const char *frag = memchr(url, '#', len);
  if (frag && (size_t)(frag - url) < head) head = (size_t)(frag - url);
  size_t auth = 0, at = 0, copied = 0;
  if (userinfo_at(url, head, &auth, &at)) {
    if (put(out, url, auth) != 0 || puts_(put, out, RESIL__REDACTED) != 0) return -1;
    copied = at;
  }
  if (put(out, url + copied, head - copied) != 0) return -1;
  /* The fragment is never sent, and an OAuth implicit grant puts the token
   * there: it is dropped. */
  if (!q || (frag && frag < q)) return 0;
  size_t qend = frag ? (size_t)(frag - url) : len;
  if (put(out, "?", 1) != 0) return -1;
  size_t qs = (size_t)(q - url) + 1;
  return resil__redact_pairs(put, out, url + qs, qend - qs, "&;");
}

/* ---- a growable scratch buffer ------------------------------------------ */

typedef struct sbuf {
  char *p;
  size_t len, cap;
} sbuf;

static int sbuf_put(void *o, const char *s, size_t n) {
  sbuf *b = o;
  if (b->len + n + 1 > b->cap) {
    size_t cap = b->cap ? b->cap : 256;
    while (b->len + n + 1 > cap) cap *= 2;
    char *p = realloc(b->p, cap);
    if (!p) return -1;
    b->p = p;
    b->cap = cap;
  }
  memcpy(b->p + b->len, s, n);
  b->len += n;
  b->p[b->len] = '\0';
  return 0;
}

/* Bytes that end a name=value pair inside free text such as Link: <https://h/?a=b>; rel="next" or Refresh: 0; url=... */
#define TEXT_SEPS "?#&;,<>\"' \t"

static int redact_text(resil__put_fn put, void *out, const char *v, size_t len, int bare) {
  sbuf tmp = {0};
  size_t i = 0, from = 0;
  int rc = 0;
  while (rc == 0 && i + 3 <= len) {
    if (memcmp(v + i, "://", 3) != 0) {
      i++;
      continue;
    }
    size_t auth = i + 3, end = auth, at = 0;
    int has_at = 0;
    /* The authority ends only where a URL or the text's syntax must end
     * it: a password may hold ';', ',', '&' or '@'. */
    while (end < len && !strchr("/?#<>\"' \t", v[end])) {
      if (v[end] == '@') {
        at = end;
        has_at = 1;
      }
      end++;
    }
    if (has_at) {
      rc = sbuf_put(&tmp, v + from, auth - from);
      if (rc == 0) rc = sbuf_put(&tmp, RESIL__REDACTED, strlen(RESIL__REDACTED));
      from = at;
    }
    i = end;
  }
  if (rc == 0) rc = sbuf_put(&tmp, v + from, len - from);
  if (rc == 0) rc = redact_pairs(put, out, tmp.p ? tmp.p : "", tmp.len, TEXT_SEPS, bare);
  free(tmp.p);
  return rc;
}

int resil__redact_text(resil__put_fn put, void *out, const char *v, size_t len) {
  return redact_text(put, out, v, len, 1);
}

int resil__redact_message(resil__put_fn put, void *out, const char *v, size_t len) {
  return redact_text(put, out, v, len, 0);
}

/* ---- excerpts for messages ---------------------------------------------- */

#define MAX_SECRETS 16

typedef struct secrets {
  const char *s[MAX_SECRETS];
  size_t n[MAX_SECRETS];
  size_t count;
  char store[4][NAME_MAX_DECODED]; /* decoded forms */
  size_t nstore;
} secrets;

static void add_secret(secrets *z, const char *s, size_t n) {
  if (n == 0 || z->count == MAX_SECRETS) return;
  z->s[z->count] = s;
  z->n[z->count++] = n;
  /* Its percent-decoded form too, when it differs. */
  if (!memchr(s, '%', n) || z->nstore == 4 || z->count == MAX_SECRETS) return;
  char tmp[NAME_MAX_DECODED];
  char *d = z->store[z->nstore];
  long k = decode(s, n, 0, d, tmp, NAME_MAX_DECODED);
  if (k <= 0) return;
  z->nstore++;
  z->s[z->count] = d;
  z->n[z->count++] = (size_t)k;
}

/* Secret-looking name=value pairs of s[0..len) separated by seps. */
static void pair_secrets(secrets *z, const char *s, size_t len, const char *seps) {
  size_t i = 0;
  while (i < len) {
    size_t j = i;
    while (j < len && !strchr(seps, s[j])) j++;
    size_t eq = i;
    while (eq < j && s[eq] != '=') eq++;
    if (eq < j && resil__secret_name(s + i, eq - i, 0)) add_secret(z, s + eq + 1, j - eq - 1);
    i = j + 1;
  }
}

/* The secrets of a URI (userinfo, its password, secret-looking query
 * values) or of a key=value conninfo string (secret-looking values). */
static void collect_secrets(secrets *z, const char *u) {
  size_t len = strlen(u);
  if (!strstr(u, "://")) {
    pair_secrets(z, u, len, " \t\n");
    return;
  }
  const char *q = memchr(u, '?', len);
  size_t head = q ? (size_t)(q - u) : len;
  size_t auth = 0, at = 0;
  if (userinfo_at(u, head, &auth, &at)) {
    add_secret(z, u + auth, at - auth);
    const char *colon = memchr(u + auth, ':', at - auth);
    if (colon) add_secret(z, colon + 1, (size_t)(u + at - colon - 1));
  }
  if (q) pair_secrets(z, q + 1, len - head - 1, "&;#");
}

/* Puts s[0..len) with every occurrence of a secret of z replaced, the
 * longest first where several start at one place. */
static int scrub(const secrets *z, sbuf *out, const char *s, size_t len) {
  size_t i = 0, from = 0;
  while (i < len) {
    size_t best = 0;
    for (size_t k = 0; k < z->count; k++)
      if (z->n[k] > best && z->n[k] <= len - i && memcmp(s + i, z->s[k], z->n[k]) == 0)
        best = z->n[k];
    if (best == 0) {
      i++;
      continue;
    }
    if (sbuf_put(out, s + from, i - from) != 0 ||
        sbuf_put(out, RESIL__REDACTED, strlen(RESIL__REDACTED)) != 0)
      return -1;
    i += best;
    from = i;
  }
  return sbuf_put(out, s + from, len - from);
}

void resil__redact_excerpt(char *dst, size_t cap, const char *s, size_t len,
                           resil__redact_mode mode, const char *secrets_of) {
  if (cap == 0) return;
  dst[0] = '\0';
  sbuf a = {0}, b = {0};
  int rc = mode == RESIL__REDACT_PAIRS  ? resil__redact_pairs(sbuf_put, &a, s, len, "&;")
           : mode == RESIL__REDACT_URL  ? resil__redact_url(sbuf_put, &a, s, len)
           : mode == RESIL__REDACT_TEXT ? resil__redact_text(sbuf_put, &a, s, len)
           : mode == RESIL__REDACT_MESSAGE ? resil__redact_message(sbuf_put, &a, s, len)
                                           : sbuf_put(&a, s, len);
  if (rc == 0 && !a.p) rc = sbuf_put(&a, "", 0);
  sbuf *t = &a;
  if (rc == 0 && secrets_of) {
    secrets z;
    memset(&z, 0, sizeof z);
    collect_secrets(&z, secrets_of);
    if (z.count) {
      rc = scrub(&z, &b, a.p, a.len);
      if (rc == 0 && !b.p) rc = sbuf_put(&b, "", 0);
      t = &b;
    }
  }
  if (rc != 0) {
    snprintf(dst, cap, "%s", RESIL__REDACTED);
  } else {
    /* Escaped as a log line is; cut with "...", never inside an escape. */
    resil__escape_excerpt(dst, cap, t->p, t->len);
  }
  free(a.p);
  free(b.p);
}
