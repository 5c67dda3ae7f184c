/* libresil-http internal, layer 5 (see src/http/README.md): what
 * message.c offers: the caller's args, idempotency keys, building a
 * logical request once (resil_http_request_new(), public), the attempt
 * listener, and the answer of a call that could not start. Shared by the
 * blocking call (request.c, recover.c) and the engine. Uses client_int.h.
 * Not installed. */
#ifndef RESIL_HTTP_MESSAGE_H
#define RESIL_HTTP_MESSAGE_H

#include "client_int.h"

/* The caller's args (NULL: none) as a full-size copy in *dst; RESIL_EINVAL
 * for args not passed through resil_http_args_init(). */
resil_status resil__http_args_in(resil_http_args *dst, const resil_http_args *src,
                                 resil_error *err);

/* 1 when key is a valid idempotency key: 1..255 visible ASCII characters. */
int resil__http_key_ok(const char *key);

/* Calls the client's attempt listener, when it has one. */
void resil__http_report(const resil_http_client *c, uint32_t attempt, const resil_outcome *o,
                        int64_t duration_ns, int64_t wait_before_ns, int64_t next_wait_ns,
                        resil_stop stop, const char *key);

/* NOT_SENT(LOCAL_ERROR) for a call that could not start, with (when out is
 * not NULL) a response whose error is why. */
resil_outcome resil__http_not_built(const resil_http_client *c, const char *why,
                                    resil_http_response **out);

/* Drops one reference to req (the last frees it and its client's). */
void resil__http_request_unref(resil_http_request *req);
/* The client-wide index of the instance req's latest attempt chose, -1
 * none or req NULL (instances.c). */
int resil__http_request_instance(const resil_http_request *req);
/* A status query q about a call whose attempt went to instance idx (-1:
 * none) prefers another instance of the same upstream: idx counts as
 * tried by q. */
void resil__http_request_avoid(resil_http_request *q, int idx);

#endif
