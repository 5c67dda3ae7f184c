/* Responses: the result of one attempt, owned by a pool slot while the
 * attempt runs, then by the request, then by whoever took it. */
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "response_int.h"

static const char empty_body[1] = "";

resil_http_response *resil__http_response_new(const resil_allocator *a) {
  resil_http_response *r = resil__alloc(a, sizeof *r);
  if (!r) return NULL;
  memset(r, 0, offsetof(resil_http_response, decode_error));
  r->decode_error[0] = '\0';
  r->error[0] = '\0';
  r->key[0] = '\0';
  resil__http_buf_on(&r->body, r->body_space, sizeof r->body_space);
  r->magic = RESIL_MAGIC_HTTP_RESPONSE;
  r->alloc = a;
  r->outcome = resil_outcome_make(RESIL_NOT_SENT, RESIL_REASON_LOCAL_ERROR);
  return r;
}

void resil__http_response_reset(resil_http_response *r) {
  r->outcome = resil_outcome_make(RESIL_NOT_SENT, RESIL_REASON_LOCAL_ERROR);
  r->status = 0;
  r->empty = 0;
  r->has_decode_error = 0;
  r->has_error = 0;
  r->body.len = 0;
  if (r->body.p) r->body.p[0] = '\0';
  r->hdr.len = 0;
  if (r->hdr.p) r->hdr.p[0] = '\0';
  if (r->json) json_decref(r->json);
  r->json = NULL;
  memset(&r->info, 0, sizeof r->info);
  r->decode_error[0] = '\0';
  r->error[0] = '\0';
  r->recovered = 0;
  r->has_key = 0;
  r->instance = 0;
  r->key[0] = '\0';
}

void resil__http_response_set_key(resil_http_response *r, const char *key) {
  r->has_key = key != NULL;
  if (key) snprintf(r->key, sizeof r->key, "%s", key);
  else r->key[0] = '\0';
}

const char *resil_http_response_idempotency_key(const resil_http_response *r) {
  return r && r->magic == RESIL_MAGIC_HTTP_RESPONSE && r->has_key ? r->key : NULL;
}

/* ' ', '\t', '\r', '\n': what a header value is trimmed of at its end. */
static int trail_ws(unsigned char c) {
  return c <= ' ' && ((UINT64_C(1) << c) & ((UINT64_C(1) << ' ') | (UINT64_C(1) << '\t') |
                                            (UINT64_C(1) << '\r') | (UINT64_C(1) << '\n')));
}

long resil__http_response_add_line(resil_http_response *r, const char *buf, size_t n) {
  const char *colon = memchr(buf, ':', n);
  if (!colon || colon == buf) return 0;
  size_t nlen = (size_t)(colon - buf);
  while (nlen > 0 && (buf[nlen - 1] == ' ' || buf[nlen - 1] == '\t')) nlen--;
  const char *v = colon + 1, *e = buf + n;
  while (v < e && (*v == ' ' || *v == '\t')) v++;
  while (e > v && trail_ws((unsigned char)e[-1])) e--;
  size_t vlen = (size_t)(e - v);
  /* The first header reserves room for a typical header block at once
   * (one allocation, not 64 -> 128 -> 256 bytes and two copies). */
  size_t need = nlen + vlen + 2;
  if (!r->hdr.cap && need < 511) need = 511;
  if (resil__http_buf_reserve(r->alloc, &r->hdr, need) != 0) return -1;
  size_t at = r->hdr.len;
  char *w = r->hdr.p + at;
  memcpy(w, buf, nlen);
  w[nlen] = '\0';
  memcpy(w + nlen + 1, v, vlen);
  w[nlen + 1 + vlen] = '\0';
  r->hdr.len = at + nlen + vlen + 2;
  /* The buffer stays NUL-terminated one past the last pair. */
  r->hdr.p[r->hdr.len] = '\0';
  return (long)at + 1;
}

static int valid(const resil_http_response *r) {
  return r && r->magic == RESIL_MAGIC_HTTP_RESPONSE;
}

resil_outcome resil_http_response_outcome(const resil_http_response *r) {
  if (!valid(r)) return resil_outcome_make(RESIL_NOT_SENT, RESIL_REASON_LOCAL_ERROR);
  return r->outcome;
}

int resil_http_response_status(const resil_http_response *r) {
  return valid(r) ? r->status : 0;
}

const void *resil_http_response_body(const resil_http_response *r, size_t *len) {
  if (!valid(r)) {
    if (len) *len = 0;
    return NULL;
  }
  if (len) *len = r->body.len;
  return r->body.p ? r->body.p : empty_body;
}

json_t *resil_http_response_json(const resil_http_response *r) {
  return valid(r) ? r->json : NULL;
}

int resil_http_response_is_empty(const resil_http_response *r) {
  return valid(r) ? r->empty : 0;
}

const char *resil_http_response_decode_error(const resil_http_response *r) {
  return valid(r) && r->has_decode_error ? r->decode_error : NULL;
}

const char *resil_http_response_error(const resil_http_response *r) {
  return valid(r) && r->has_error ? r->error : NULL;
}

int resil_http_response_instance(const resil_http_response *r) {
  return valid(r) ? r->instance - 1 : -1;
}

const char *resil_http_response_header(const resil_http_response *r,
                                       const char *name) {
  if (!valid(r) || !name || !r->hdr.p) return NULL;
  size_t nl = strlen(name);
  const char *p = r->hdr.p, *end = r->hdr.p + r->hdr.len;
  while (p < end) {
    size_t kl = strlen(p);
    const char *v = p + kl + 1;
    if (kl == nl) {
      size_t i = 0;
      for (; i < nl; i++) {
        int a = (unsigned char)p[i], b = (unsigned char)name[i];
        if (a >= 'A' && a <= 'Z') a += 32;
        if (b >= 'A' && b <= 'Z') b += 32;
        if (a != b) break;
      }
      if (i == nl) return v;
    }
    p = v + strlen(v) + 1;
  }
  return NULL;
}

resil_status resil_http_response_info_sized(const resil_http_response *r,
                                            resil_http_info *out, size_t n) {
  if (!valid(r) || !out) return RESIL_EINVAL;
  resil_http_info full = r->info;
  full.struct_size = sizeof full;
  resil__sized_out(out, n, &full, sizeof full);
  return RESIL_OK;
}

void resil_http_response_free(resil_http_response *r) {
  if (!valid(r)) return;
  const resil_allocator *a = r->alloc;
  if (r->json) json_decref(r->json);
  resil__http_buf_free(a, &r->body);
  resil__http_buf_free(a, &r->hdr);
  r->magic = RESIL_MAGIC_DEAD;
  resil__free(a, r);
}
