/* libresil-http internal, layer 1 (see src/http/README.md): what
 * response.c offers: the response object every layer above fills or reads.
 * Uses template.h (the byte buffer). Not installed. */
#ifndef RESIL_HTTP_RESPONSE_INT_H
#define RESIL_HTTP_RESPONSE_INT_H

#include <curl/curl.h>

#include "template.h"

#define RESIL_MAGIC_HTTP_RESPONSE 0x48525350u /* "HRSP" */

struct resil_http_response {
  uint32_t magic;
  const resil_allocator *alloc;
  resil_outcome outcome;
  int status;
  int empty;
  int has_decode_error;
  int has_error;
  http_buf body;
  http_buf hdr; /* "name\0value\0" pairs of the final response */
  json_t *json;
  resil_http_info info;
  int recovered; /* the stored result of a status query (recover_rules.c) */
  int has_key;   /* key holds the call's idempotency key              */
  int instance;  /* 1 + the index of the attempt's instance, 0 none    */
  /* From here on only strings, which a fresh response does not zero (only
   * their first byte): resil__http_response_new clears the fields above,
   * up to offsetof(decode_error). The whole struct stays within malloc's
   * per-thread cache sizes (<= 1032 bytes with glibc). */
  char decode_error[192];
  char error[CURL_ERROR_SIZE];
  char key[RESIL_HTTP_MAX_KEY + 1];
  /* body starts borrowed on this (template.h, resil__http_buf_on): a short
   * body needs no allocation of its own; a longer one moves to the heap. */
  char body_space[96];
};

/* A fresh, empty response. NULL when out of memory. */
resil_http_response *resil__http_response_new(const resil_allocator *a);
/* Empties r for reuse, keeping its buffers' capacity. */
void resil__http_response_reset(resil_http_response *r);
/* Appends the header line buf[0..n) as it came ("Name: value\r\n"): the
 * name before the first ':' and the value after it, each trimmed. Returns
 * 1 + the offset in r->hdr.p of the stored name, 0 when the line has no
 * ':' or nothing before it (nothing stored), -1 when out of memory. */
long resil__http_response_add_line(resil_http_response *r, const char *buf, size_t n);

/* Copies key (NULL: none) into r as the call's idempotency key. */
void resil__http_response_set_key(resil_http_response *r, const char *key);

#endif
