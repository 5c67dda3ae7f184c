/* libresil-http internal, layer 1 (see src/http/README.md): what log.c
 * offers: which headers, parameters and fields are secret, redaction of
 * URLs, bodies and header values, and the one exit of every log line.
 * Uses template.h (the byte buffer). Not installed. */
#ifndef RESIL_HTTP_LOG_INT_H
#define RESIL_HTTP_LOG_INT_H

#include "template.h"

/* ---- redaction and logging (log.c) ------------------------------------- */

/* The core's redaction (core/redact.h) appending to an http_buf: pass
 * resil__http_put and a http_put_to. */
typedef struct http_put_to {
  const resil_allocator *a;
  http_buf *b;
} http_put_to;
int resil__http_put(void *to, const char *s, size_t n);

/* 1 when a header's value must never be logged (see resil_http_log_fn). */
int resil__http_secret_header(const char *name, size_t len);
/* Appends url with secret query values and userinfo replaced and the
 * fragment dropped (resil__redact_url, src/core/redact.h, whose rules also
 * cover query parameter names, JSON keys and form fields). */
int resil__http_redact_url(const resil_allocator *a, http_buf *out,
                           const char *url);
/* Appends a body excerpt (at most max bytes of it) with secret JSON values
 * and form fields redacted. */
int resil__http_redact_body(const resil_allocator *a, http_buf *out,
                            const char *body, size_t len, size_t max);
/* Appends "  Name: value" for a log line: the whole value redacted when the
 * name looks secret, else the userinfo of any URL in it and the values of
 * secret-looking name=value pairs in it. Returns 0 or -1. */
int resil__http_log_header(const resil_allocator *a, http_buf *out, const char *name,
                           size_t nl, const char *value, size_t vl);
/* Escapes line (control bytes, DEL and bytes >= 0x80 become "\xNN"),
 * passes it to the client's log_fn (fn, user) at level lv and empties it. Every log
 * line that carries bytes from the network leaves through here. */
void resil__http_log_emit(const resil_allocator *a, resil_http_log_fn fn, void *user,
                          resil_http_log_level lv, http_buf *line);
#endif
