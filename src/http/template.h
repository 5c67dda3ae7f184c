/* libresil-http internal, layer 0 (see src/http/README.md): what
 * template.c offers: the growable byte buffer the module builds strings in,
 * path, query and header-value templates with {name} placeholders, and
 * percent encoding. Includes no other header of src/http. Not installed. */
#ifndef RESIL_HTTP_TEMPLATE_H
#define RESIL_HTTP_TEMPLATE_H

#include <stddef.h>
#include <stdint.h>

#include "core/internal.h"
#include "resil/http.h"

/* ---- growable byte buffer (always NUL-terminated when p != NULL) ------ */

typedef struct http_buf {
  char *p;
  size_t len;
  size_t cap;
  int borrowed; /* p is the caller's storage (resil__http_buf_on): never freed */
} http_buf;

/* Starts b empty on the caller's storage (cap bytes, cap >= 1, e.g. on the
 * stack): no allocation until more is needed, when the contents move to
 * the heap and b owns them from then on (borrowed cleared). */
static inline void resil__http_buf_on(http_buf *b, char *storage, size_t cap) {
  b->p = storage;
  b->p[0] = '\0';
  b->len = 0;
  b->cap = cap;
  b->borrowed = 1;
}

/* Makes room for `extra` more bytes plus a NUL. Returns 0, or -1 when out of
 * memory (the buffer is unchanged). */
int resil__http_buf_grow(const resil_allocator *a, http_buf *b, size_t extra);
static inline int resil__http_buf_reserve(const resil_allocator *a, http_buf *b,
                                          size_t extra) {
  return b->len + extra + 1 <= b->cap ? 0 : resil__http_buf_grow(a, b, extra);
}
int resil__http_buf_append(const resil_allocator *a, http_buf *b,
                           const void *s, size_t n);
static inline int resil__http_buf_puts(const resil_allocator *a, http_buf *b,
                                       const char *s) {
  size_t n = 0;
  while (s[n]) n++;
  return resil__http_buf_append(a, b, s, n);
}
void resil__http_buf_free(const resil_allocator *a, http_buf *b);

/* ---- templates (template.c) -------------------------------------------- */

typedef enum http_tpl_kind {
  HTTP_TPL_PATH = 0,   /* must start with '/'; pchars and '/'            */
  HTTP_TPL_QUERY = 1,  /* pchars, '/' and '?'                            */
  HTTP_TPL_HEADER = 2  /* header value: visible ASCII, SP, HTAB          */
} http_tpl_kind;

/* A literal run or a {placeholder}: off/len index the template source
 * (for a placeholder, its name without the braces). */
typedef struct http_tpl_part {
  uint32_t off;
  uint32_t len;
  uint32_t is_var;
} http_tpl_part;

typedef struct http_tpl {
  const char *src; /* NULL: no template */
  http_tpl_part *parts;
  uint32_t nparts;
} http_tpl;

/* Longest template accepted, and longest placeholder name. */
#define HTTP_TPL_MAX_LEN 8192u
#define HTTP_TPL_MAX_NAME 64u

/* Parses s[0..len) of the given kind. With parts == NULL only counts; else
 * writes at most cap parts. Returns 0 with *nparts set, or -1 with *err_off
 * (byte offset of the problem) and *why (static text) set. */
int resil__http_tpl_parse(const char *s, size_t len, http_tpl_kind kind,
                          http_tpl_part *parts, uint32_t cap, uint32_t *nparts,
                          size_t *err_off, const char **why);

/* Appends the expansion of t to out: literal parts verbatim, each
 * placeholder's value from params (percent-encoded when `encode`).
 * Returns 0, -1 when a placeholder has no value (*missing is its part), -2
 * when out of memory. */
int resil__http_tpl_expand(const resil_allocator *a, const http_tpl *t,
                           const resil_http_param *params, size_t nparams,
                           int encode, http_buf *out,
                           const http_tpl_part **missing);

/* Appends s[0..n) percent-encoding every byte but A-Za-z0-9-._~. */
int resil__http_pct_encode(const resil_allocator *a, http_buf *out,
                           const char *s, size_t n);

/* 1 for an RFC 9110 tchar (header names). */
int resil__http_tchar(int c);
/* 1 for a byte a header value set in a configuration may hold: visible
 * ASCII, space and horizontal tab (no control byte, DEL or non-ASCII). The
 * rule of endpoint header templates (HTTP_TPL_HEADER literals) and of the
 * client's user_agent. */
int resil__http_value_char(int c);

#endif
