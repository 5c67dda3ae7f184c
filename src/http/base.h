/* libresil-http internal, layer 0 (see src/http/README.md): the small
 * shared pieces every other file may use (base.c): the monotonic clock,
 * method names, and the ASCII header rules. Includes no other header of
 * src/http. Not installed. */
#ifndef RESIL_HTTP_BASE_H
#define RESIL_HTTP_BASE_H

#include <stddef.h>
#include <stdint.h>

#include "core/internal.h"
#include "resil/http.h"

/* The core's allocation and error helpers (src/core/alloc.c, error.c) are
 * compiled into this library too: libresil.so keeps its resil__* functions
 * hidden, and this library is a separate shared object. */

/* Code layout of the request path: what every keep-alive request runs is
 * kept dense, so that one request touches few instruction-cache lines
 * (libcurl and the kernel evict them between requests). RESIL_HTTP_COLD
 * for error and logging paths (placed in .text.unlikely, their callers'
 * branches predicted not taken); RESIL_HTTP_OUTLINE for work that only
 * some requests need (an option, a template, a body), kept out of the
 * common path's lines without being marked rare. */
#if defined(__GNUC__)
#define RESIL_HTTP_COLD __attribute__((cold, noinline))
#define RESIL_HTTP_OUTLINE __attribute__((noinline))
#else
#define RESIL_HTTP_COLD
#define RESIL_HTTP_OUTLINE
#endif

int64_t resil__http_mono_ns(void);

/* The method's name ("GET"). */
const char *resil__http_method_name(resil_http_method m);

/* ASCII case-insensitive equality of a[0..alen) and b[0..blen). */
int resil__http_ieq(const char *a, size_t alen, const char *b, size_t blen);

/* 1 for a header libcurl or libresil own: neither tables, callers nor
 * interceptors may set it. */
int resil__http_reserved_header(const char *n, size_t len);

/* 1 when v[0..n) may be a header value (no CR, LF or NUL). */
int resil__http_value_ok(const char *v, size_t n);

#endif
