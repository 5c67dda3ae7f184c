/* Path, query and header-value templates with {name} placeholders, percent
 * encoding, and the growable buffer the module builds strings in. */
#include <string.h>

#include "template.h"

/* resil__http_buf_reserve's slow path (template.h): b is too small. */
int resil__http_buf_grow(const resil_allocator *a, http_buf *b, size_t extra) {
  if (b->len + extra + 1 <= b->cap) return 0;
  if (extra > SIZE_MAX / 4 - b->len) return -1;
  size_t cap = b->cap ? b->cap : 64;
  while (cap < b->len + extra + 1) cap *= 2;
  char *p = resil__alloc(a, cap);
  if (!p) return -1;
  if (b->p) {
    memcpy(p, b->p, b->len + 1);
    if (!b->borrowed) resil__free(a, b->p);
    b->borrowed = 0;
  } else {
    p[0] = '\0';
  }
  b->p = p;
  b->cap = cap;
  return 0;
}

int resil__http_buf_append(const resil_allocator *a, http_buf *b,
                           const void *s, size_t n) {
  if (resil__http_buf_reserve(a, b, n) != 0) return -1;
  if (n) memcpy(b->p + b->len, s, n);
  b->len += n;
  b->p[b->len] = '\0';
  return 0;
}

void resil__http_buf_free(const resil_allocator *a, http_buf *b) {
  if (b->p && !b->borrowed) resil__free(a, b->p);
  b->p = NULL;
  b->len = b->cap = 0;
  b->borrowed = 0;
}

static int is_alpha(int c) { return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z'); }
static int is_digit(int c) { return c >= '0' && c <= '9'; }
static int is_hex(int c) {
  return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}
static int is_unreserved(int c) {
  return is_alpha(c) || is_digit(c) || c == '-' || c == '.' || c == '_' || c == '~';
}
static int is_sub_delim(int c) {
  return c == '!' || c == '$' || c == '&' || c == '\'' || c == '(' || c == ')' ||
         c == '*' || c == '+' || c == ',' || c == ';' || c == '=';
}

int resil__http_tchar(int c) {
  return is_alpha(c) || is_digit(c) || (c != 0 && strchr("!#$%&'*+-.^_`|~", c));
}

static int name_char(int c) {
  return is_alpha(c) || is_digit(c) || c == '_' || c == '.' || c == '-';
}

int resil__http_value_char(int c) { return c == '\t' || (c >= 0x20 && c < 0x7f); }

/* Literal characters allowed outside placeholders ('%' is checked apart). */
static int literal_ok(http_tpl_kind kind, int c) {
  if (kind == HTTP_TPL_HEADER) return resil__http_value_char(c) && c != '{' && c != '}';
  if (is_unreserved(c) || is_sub_delim(c) || c == ':' || c == '@' || c == '/')
    return 1;
  return kind == HTTP_TPL_QUERY && c == '?';
}

static int fail(size_t *err_off, const char **why, size_t off, const char *w) {
  *err_off = off;
  *why = w;
  return -1;
}

int resil__http_tpl_parse(const char *s, size_t len, http_tpl_kind kind,
                          http_tpl_part *parts, uint32_t cap, uint32_t *nparts,
                          size_t *err_off, const char **why) {
  uint32_t n = 0;
  size_t i = 0, lit_start = 0;
  *nparts = 0;
  if (len > HTTP_TPL_MAX_LEN) return fail(err_off, why, HTTP_TPL_MAX_LEN, "template too long (max 8192 bytes)");
  if (kind == HTTP_TPL_PATH && (len == 0 || s[0] != '/'))
    return fail(err_off, why, 0, "must start with '/'");
  if (kind == HTTP_TPL_QUERY && len > 0 && s[0] == '?')
    return fail(err_off, why, 0, "must not start with '?' (it is added)");
  while (i < len) {
    unsigned char c = (unsigned char)s[i];
    if (c == '{') {
      size_t j = i + 1;
      while (j < len && name_char((unsigned char)s[j])) j++;
      if (j >= len) return fail(err_off, why, i, "unclosed '{'");
      if (s[j] == '{') return fail(err_off, why, j, "nested '{' in a placeholder");
      if (s[j] != '}') return fail(err_off, why, j, "invalid character in a placeholder name (allowed: A-Z a-z 0-9 _ . -)");
      if (j == i + 1) return fail(err_off, why, i, "empty placeholder name");
      if (j - i - 1 > HTTP_TPL_MAX_NAME) return fail(err_off, why, i, "placeholder name too long (max 64)");
      if (i > lit_start) {
        if (parts && n < cap)
          parts[n] = (http_tpl_part){(uint32_t)lit_start, (uint32_t)(i - lit_start), 0};
        n++;
      }
      if (parts && n < cap)
        parts[n] = (http_tpl_part){(uint32_t)(i + 1), (uint32_t)(j - i - 1), 1};
      n++;
      i = j + 1;
      lit_start = i;
      continue;
    }
    if (c == '}') return fail(err_off, why, i, "'}' without a matching '{'");
    if (c == '%' && kind != HTTP_TPL_HEADER) {
      if (i + 2 >= len || !is_hex((unsigned char)s[i + 1]) ||
          !is_hex((unsigned char)s[i + 2]))
        return fail(err_off, why, i, "'%' must start a %XX escape");
      i += 3;
      continue;
    }
    if (!literal_ok(kind, c)) {
      if (c == '#') return fail(err_off, why, i, "'#' (a fragment) is not allowed");
      if (c == '?' && kind == HTTP_TPL_PATH)
        return fail(err_off, why, i, "'?' is not allowed in a path (use the query template)");
      if (c == ' ') return fail(err_off, why, i, "space is not allowed (write %20)");
      return fail(err_off, why, i, kind == HTTP_TPL_HEADER
                                       ? "control or non-ASCII character in a header value"
                                       : "character not allowed in a URL (percent-encode it)");
    }
    i++;
  }
  if (i > lit_start) {
    if (parts && n < cap)
      parts[n] = (http_tpl_part){(uint32_t)lit_start, (uint32_t)(i - lit_start), 0};
    n++;
  }
  *nparts = n;
  return 0;
}

int resil__http_pct_encode(const resil_allocator *a, http_buf *out,
                           const char *s, size_t n) {
  static const char hex[] = "0123456789ABCDEF";
  /* Worst case triples the input; reserve once so the loop cannot fail. */
  if (n > SIZE_MAX / 4) return -2;
  if (resil__http_buf_reserve(a, out, n * 3) != 0) return -2;
  char *w = out->p + out->len;
  /* '.' is unreserved, but a whole value "." or ".." would be a dot
   * segment (RFC 3986 §5.2.4) that libcurl or a server removes:
   * "/users/../orders" is "/orders". Such a value has each '.' written
   * %2E: it stays one segment of its own (in a query too, where %2E means
   * the same as '.'). "..." and "a..b" are ordinary segments. */
  int dots = (n == 1 || n == 2) && s[0] == '.' && s[n - 1] == '.';
  for (size_t i = 0; i < n; i++) {
    unsigned char c = (unsigned char)s[i];
    if (is_unreserved(c) && !dots) {
      *w++ = (char)c;
    } else {
      *w++ = '%';
      *w++ = hex[c >> 4];
      *w++ = hex[c & 15];
    }
  }
  out->len = (size_t)(w - out->p);
  out->p[out->len] = '\0';
  return 0;
}

static const resil_http_param *find_param(const resil_http_param *params,
                                          size_t n, const char *name,
                                          size_t len) {
  for (size_t i = 0; i < n; i++) {
    const char *pn = params[i].name;
    if (pn && strncmp(pn, name, len) == 0 && pn[len] == '\0') return &params[i];
  }
  return NULL;
}

int resil__http_tpl_expand(const resil_allocator *a, const http_tpl *t,
                           const resil_http_param *params, size_t nparams,
                           int encode, http_buf *out,
                           const http_tpl_part **missing) {
  for (uint32_t i = 0; i < t->nparts; i++) {
    const http_tpl_part *p = &t->parts[i];
    const char *s = t->src + p->off;
    if (!p->is_var) {
      if (resil__http_buf_append(a, out, s, p->len) != 0) return -2;
      continue;
    }
    const resil_http_param *v = find_param(params, nparams, s, p->len);
    if (!v || !v->value) {
      if (missing) *missing = p;
      return -1;
    }
    size_t vlen = strlen(v->value);
    int rc = encode ? resil__http_pct_encode(a, out, v->value, vlen)
                    : resil__http_buf_append(a, out, v->value, vlen);
    if (rc != 0) return -2;
  }
  return 0;
}
