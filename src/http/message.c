/* Logical requests, built once: the caller's args, the URL from the
 * endpoint's templates, the headers, the body (gzip when configured) and
 * the idempotency key; the attempt listener; the answer of a call that
 * could not start. Shared by the blocking call (request.c, recover.c) and
 * the engine (src/engine). Layer 4 (src/http/README.md). */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <zlib.h>

#include "message.h"

#include "base.h"
#include "response_int.h"
#include "template.h"

#define ieq resil__http_ieq

/* The 0.1 layout of resil_http_args ends with idempotency_key. */
#define ARGS_MIN_SIZE (offsetof(resil_http_args, idempotency_key) + sizeof(const char *))

/* The defaults: everything empty. */
static const resil_http_args args_defaults = {.struct_size = sizeof(resil_http_args)};

void resil_http_args_init_sized(resil_http_args *args, size_t n) {
  if (!args) return;
  resil__sized_out(args, n, &args_defaults, sizeof args_defaults);
}

int resil__http_key_ok(const char *key) {
  size_t kl = key ? strlen(key) : 0;
  int ok = kl >= 1 && kl <= RESIL_HTTP_MAX_KEY;
  for (size_t i = 0; ok && i < kl; i++) {
    unsigned char ch = (unsigned char)key[i];
    if (ch <= 0x20 || ch >= 0x7f) ok = 0;
  }
  return ok;
}

resil_status resil__http_args_in(resil_http_args *dst, const resil_http_args *src,
                                 resil_error *err) {
  *dst = args_defaults;
  if (!src) return RESIL_OK;
  return resil__sized_in(dst, sizeof *dst, src, ARGS_MIN_SIZE, "resil_http_args",
                         "resil_http_args_init", err);
}

void resil__http_report(const resil_http_client *c, uint32_t attempt, const resil_outcome *o,
                        int64_t duration_ns, int64_t wait_before_ns, int64_t next_wait_ns,
                        resil_stop stop, const char *key) {
  if (!c->on_attempt) return;
  resil_attempt_info ai;
  memset(&ai, 0, sizeof ai);
  ai.struct_size = sizeof ai;
  ai.source = c->name;
  ai.attempt = attempt;
  ai.outcome = *o;
  ai.duration_ns = duration_ns;
  ai.wait_before_ns = wait_before_ns;
  ai.next_wait_ns = next_wait_ns;
  ai.stop = stop;
  ai.idempotency_key = key;
  c->on_attempt(c->on_attempt_user, &ai);
}

/* ---- building a request ----------------------------------------------------- */

typedef struct hdr_builder {
  const resil_allocator *a;
  http_buf store;
  uint32_t *offs;
  uint32_t *nlen;
  uint32_t n;
  uint32_t cap;
} hdr_builder;

static int hb_has(const hdr_builder *b, const char *name, size_t nl) {
  for (uint32_t i = 0; i < b->n; i++)
    if (ieq(b->store.p + b->offs[i], b->nlen[i], name, nl)) return 1;
  return 0;
}

static int hb_add(hdr_builder *b, const char *name, size_t nl, const char *v, size_t vl) {
  if (b->n == b->cap) {
    uint32_t cap = b->cap ? b->cap * 2 : 16;
    uint32_t *o = resil__alloc(b->a, cap * sizeof *o);
    uint32_t *l = resil__alloc(b->a, cap * sizeof *l);
    if (!o || !l) {
      if (o) resil__free(b->a, o);
      if (l) resil__free(b->a, l);
      return -1;
    }
    if (b->n) {
      memcpy(o, b->offs, b->n * sizeof *o);
      memcpy(l, b->nlen, b->n * sizeof *l);
    }
    if (b->offs) resil__free(b->a, b->offs);
    if (b->nlen) resil__free(b->a, b->nlen);
    b->offs = o;
    b->nlen = l;
    b->cap = cap;
  }
  size_t off = b->store.len;
  /* An empty value is sent as "Name;" so that libcurl sends it at all
   * ("Name:" alone removes a header libcurl would add). */
  if (resil__http_buf_append(b->a, &b->store, name, nl) != 0) return -1;
  if (vl == 0) {
    if (resil__http_buf_append(b->a, &b->store, ";", 2) != 0) return -1;
  } else if (resil__http_buf_append(b->a, &b->store, ": ", 2) != 0 ||
             resil__http_buf_append(b->a, &b->store, v, vl) != 0 ||
             resil__http_buf_append(b->a, &b->store, "", 1) != 0) {
    return -1;
  }
  b->offs[b->n] = (uint32_t)off;
  b->nlen[b->n] = (uint32_t)nl;
  b->n++;
  return 0;
}

/* Adds a raw "Name:" line that removes a header libcurl would add. */
static int hb_remove(hdr_builder *b, const char *name) {
  size_t nl = strlen(name);
  if (hb_add(b, name, nl, "x", 1) != 0) return -1;
  /* Rewrite "Name: x" into "Name:" in place. */
  char *p = b->store.p + b->offs[b->n - 1];
  p[nl + 1] = '\0';
  b->store.len = b->offs[b->n - 1] + nl + 2;
  b->store.p[b->store.len] = '\0';
  return 0;
}

static int gzip_body(const resil_allocator *a, const unsigned char *in, size_t n,
                     unsigned char **out, size_t *outlen) {
  z_stream z;
  memset(&z, 0, sizeof z);
  if (deflateInit2(&z, Z_DEFAULT_COMPRESSION, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK)
    return -1;
  uLong bound = deflateBound(&z, (uLong)n) + 32;
  unsigned char *buf = resil__alloc(a, bound);
  if (!buf) {
    deflateEnd(&z);
    return -1;
  }
  z.next_in = (Bytef *)(uintptr_t)in;
  z.avail_in = (uInt)n;
  z.next_out = buf;
  z.avail_out = (uInt)bound;
  int rc = deflate(&z, Z_FINISH);
  size_t produced = (size_t)z.total_out;
  deflateEnd(&z);
  if (rc != Z_STREAM_END) {
    resil__free(a, buf);
    return -1;
  }
  *out = buf;
  *outlen = produced;
  return 0;
}

static void request_destroy(resil_http_request *req) {
  resil_http_client *c = req->client;
  const resil_allocator *a = c->t.alloc;
  if (req->pub) resil_http_response_free(req->pub);
  /* req->url lives in req's own allocation. */
  resil__free(a, req->hdr_store);
  resil__free(a, req->hdr_offs);
  resil__free(a, req->hdr_nlen);
  if (req->body) resil__free(a, req->body);
  resil__free(a, req->key);
  pthread_mutex_destroy(&req->mu);
  req->magic = RESIL_MAGIC_DEAD;
  resil__free(a, req);
  resil__http_client_unref(c);
}

void resil__http_request_unref(resil_http_request *req) {
  if (atomic_fetch_sub_explicit(&req->refs, 1, memory_order_acq_rel) == 1)
    request_destroy(req);
}

static int client_usable(const resil_http_client *c) {
  return c && c->magic == RESIL_MAGIC_HTTP_CLIENT &&
         !atomic_load_explicit(&((resil_http_client *)c)->user_freed, memory_order_relaxed);
}

resil_status resil_http_request_new(resil_http_client *c, const char *endpoint,
                                    const resil_http_args *args,
                                    resil_http_request **out, resil_error *err) {
  if (!out || !endpoint)
    return resil__err(err, RESIL_EINVAL, NULL, "endpoint and out must not be NULL");
  if (!client_usable(c))
    return resil__err(err, RESIL_EMISUSE, NULL, "client must not be NULL");
  const http_endpoint *ep = resil__http_find_endpoint(c, endpoint);
  if (!ep)
    return resil__err(err, RESIL_EINVAL, "endpoint", "unknown endpoint '%.60s'", endpoint);
  /* Only the full local copy is read from here on. */
  resil_http_args largs;
  resil_status ast = resil__http_args_in(&largs, args, err);
  if (ast != RESIL_OK) return ast;
  args = &largs;
  const resil_allocator *a = c->t.alloc;
  resil_status st = RESIL_OK;
  /* The URL is built on the stack and copied into the request's own
   * allocation: no allocation of its own (unless it is longer). */
  char url_space[512];
  http_buf url;
  resil__http_buf_on(&url, url_space, sizeof url_space);
  hdr_builder hb = {.a = a};
  unsigned char *body = NULL;
  size_t body_len = 0;
  char *key = NULL;
  char *json_text = NULL;
  resil_http_request *req = NULL;
  const http_tpl_part *miss = NULL;

  /* URL: base, path, query template, extra query parameters. */
  int rc = 0;
  if (ep->fixed_url) {
    if (resil__http_buf_append(a, &url, ep->fixed_url, ep->fixed_url_len) != 0) goto oom;
  } else {
    if (resil__http_buf_append(a, &url, ep->base, ep->base_len) != 0) goto oom;
    rc = resil__http_tpl_expand(a, &ep->path, args->params, args->param_count, 1, &url, &miss);
  }
  if (rc == -2) goto oom;
  if (rc == -1) {
    st = resil__err(err, RESIL_EINVAL, "params", "endpoint '%s': no value for path placeholder {%.*s}",
                    ep->name, (int)miss->len, ep->path.src + miss->off);
    goto fail;
  }
  int have_q = 0;
  if (ep->query.src && ep->query.nparts) {
    if (resil__http_buf_append(a, &url, "?", 1) != 0) goto oom;
    rc = resil__http_tpl_expand(a, &ep->query, args->params, args->param_count, 1, &url, &miss);
    if (rc == -2) goto oom;
    if (rc == -1) {
      st = resil__err(err, RESIL_EINVAL, "params", "endpoint '%s': no value for query placeholder {%.*s}",
                      ep->name, (int)miss->len, ep->query.src + miss->off);
      goto fail;
    }
    have_q = 1;
  }
  for (size_t i = 0; i < args->query_count; i++) {
    const resil_http_param *q = &args->query[i];
    if (!q->name || !q->name[0]) {
      st = resil__err(err, RESIL_EINVAL, "query", "query[%zu] has no name", i);
      goto fail;
    }
    if (resil__http_buf_append(a, &url, have_q ? "&" : "?", 1) != 0) goto oom;
    have_q = 1;
    if (resil__http_pct_encode(a, &url, q->name, strlen(q->name)) != 0) goto oom;
    if (q->value) {
      if (resil__http_buf_append(a, &url, "=", 1) != 0 ||
          resil__http_pct_encode(a, &url, q->value, strlen(q->value)) != 0)
        goto oom;
    }
  }

  /* Body. */
  int has_body = ep->method == RESIL_HTTP_POST || ep->method == RESIL_HTTP_PUT ||
                 ep->method == RESIL_HTTP_PATCH;
  const void *src_body = args->body;
  size_t src_len = args->body_len;
  if (args->json) {
    if (ep->req_codec != RESIL_HTTP_CODEC_JSON) {
      st = resil__err(err, RESIL_EINVAL, "json", "endpoint '%s' does not take a JSON body", ep->name);
      goto fail;
    }
    json_text = json_dumps(args->json, JSON_COMPACT | JSON_ENCODE_ANY);
    if (!json_text) goto oom;
    src_body = json_text;
    src_len = strlen(json_text);
  }
  if (!src_body && src_len) {
    st = resil__err(err, RESIL_EINVAL, "body", "is NULL with body_len %zu", src_len);
    goto fail;
  }
  if (src_len || args->json) has_body = 1;
  if (has_body && ep->method == RESIL_HTTP_HEAD) {
    st = resil__err(err, RESIL_EINVAL, "body", "endpoint '%s': a HEAD request has no body", ep->name);
    goto fail;
  }
  int gzipped = 0;
  if (has_body) {
    /* The media type decision was made for the endpoint's content type; a
     * caller who sets another one gets no compression. */
    int gz_type = ep->gzip_type;
    for (size_t i = 0; i < args->header_count; i++)
      if (args->headers[i].name && ieq(args->headers[i].name, strlen(args->headers[i].name),
                                       "content-type", 12))
        gz_type = 0;
    if (c->request_gzip && gz_type && src_len > c->gzip_min_bytes) {
      if (gzip_body(a, src_body, src_len, &body, &body_len) != 0) goto oom;
      gzipped = 1;
    } else if (src_len) {
      body = resil__alloc(a, src_len);
      if (!body) goto oom;
      memcpy(body, src_body, src_len);
      body_len = src_len;
    }
  }

  /* Idempotency key. */
  if (args->idempotency_key) {
    size_t kl = strlen(args->idempotency_key);
    if (!resil__http_key_ok(args->idempotency_key)) {
      st = resil__err(err, RESIL_EINVAL, "idempotency_key",
                      "must be 1..255 visible ASCII characters");
      goto fail;
    }
    key = resil__alloc(a, kl + 1);
    if (!key) goto oom;
    memcpy(key, args->idempotency_key, kl + 1);
  } else if (ep->key_mode == RESIL_HTTP_KEY_SEND) {
    key = resil__alloc(a, 33);
    if (!key) goto oom;
    if (resil__random_hex(key, 16) != 0) {
      st = resil__err(err, RESIL_EIO, NULL, "getrandom failed");
      goto fail;
    }
  }

  /* Headers: the endpoint's, the caller's, then the ones libresil owns. */
  for (uint32_t i = 0; i < ep->nheaders; i++) {
    const http_header_tpl *h = &ep->headers[i];
    char v_space[256];
    http_buf v;
    resil__http_buf_on(&v, v_space, sizeof v_space);
    rc = resil__http_tpl_expand(a, &h->value, args->params, args->param_count, 0, &v, &miss);
    if (rc == 0 && !v.p) rc = resil__http_buf_append(a, &v, "", 0) == 0 ? 0 : -2;
    if (rc == -2) {
      resil__http_buf_free(a, &v);
      goto oom;
    }
    if (rc == -1) {
      resil__http_buf_free(a, &v);
      st = resil__err(err, RESIL_EINVAL, "params",
                      "endpoint '%s': no value for header placeholder {%.*s}", ep->name,
                      (int)miss->len, h->value.src + miss->off);
      goto fail;
    }
    if (!resil__http_value_ok(v.p, v.len) || resil__http_reserved_header(h->name, h->name_len) ||
        ieq(h->name, h->name_len, c->t.idem_header, c->t.idem_header_len)) {
      resil__http_buf_free(a, &v);
      st = resil__err(err, RESIL_EINVAL, "params",
                      "endpoint '%s': header %s: reserved name, or CR/LF in its value",
                      ep->name, h->name);
      goto fail;
    }
    rc = hb_add(&hb, h->name, h->name_len, v.p, v.len);
    resil__http_buf_free(a, &v);
    if (rc != 0) goto oom;
  }
  for (size_t i = 0; i < args->header_count; i++) {
    const resil_http_param *h = &args->headers[i];
    size_t nl = h->name ? strlen(h->name) : 0;
    int ok = nl > 0 && h->value;
    for (size_t k = 0; ok && k < nl; k++) ok = resil__http_tchar((unsigned char)h->name[k]);
    if (ok) ok = resil__http_value_ok(h->value, strlen(h->value)) && !resil__http_reserved_header(h->name, nl) &&
                 !ieq(h->name, nl, c->t.idem_header, c->t.idem_header_len);
    if (!ok) {
      st = resil__err(err, RESIL_EINVAL, "headers",
                      "headers[%zu]: needs a token name that libresil does not own and a "
                      "value without CR/LF (the idempotency key goes in idempotency_key)",
                      i);
      goto fail;
    }
    if (hb_add(&hb, h->name, nl, h->value, strlen(h->value)) != 0) goto oom;
  }
  if (has_body && !hb_has(&hb, "Content-Type", 12)) {
    const char *ct = ep->content_type ? ep->content_type
                     : body_len ? "application/octet-stream" : NULL;
    if (ct ? hb_add(&hb, "Content-Type", 12, ct, strlen(ct)) != 0
           : hb_remove(&hb, "Content-Type") != 0)
      goto oom;
  }
  if (ep->resp_codec == RESIL_HTTP_CODEC_JSON && !hb_has(&hb, "Accept", 6) &&
      hb_add(&hb, "Accept", 6, "application/json", 16) != 0)
    goto oom;
  if (gzipped && hb_add(&hb, "Content-Encoding", 16, "gzip", 4) != 0) goto oom;
  if (key && hb_add(&hb, c->t.idem_header, c->t.idem_header_len, key, strlen(key)) != 0) goto oom;
  /* Never "Expect: 100-continue": libcurl adds it to large bodies, and a 417
   * answer makes it send the request again. */
  if (has_body && hb_remove(&hb, "Expect") != 0) goto oom;

  req = resil__calloc(a, sizeof *req + url.len + 1);
  if (!req) goto oom;
  req->url = (char *)(req + 1);
  memcpy(req->url, url.p, url.len + 1);
  resil__http_buf_free(a, &url);
  if (pthread_mutex_init(&req->mu, NULL) != 0) {
    resil__free(a, req);
    req = NULL;
    st = resil__err(err, RESIL_ESYS, NULL, "pthread_mutex_init failed");
    goto fail;
  }
  req->magic = RESIL_MAGIC_HTTP_REQUEST;
  atomic_init(&req->refs, 1);
  req->client = c;
  req->ep = ep;
  req->hdr_store = hb.store.p;
  req->hdr_offs = hb.offs;
  req->hdr_nlen = hb.nlen;
  req->nhdrs = hb.n;
  req->body = body;
  req->body_len = body_len;
  req->has_body = has_body;
  req->key = key;
  req->flags = (ep->idempotent ? RESIL_CALL_IDEMPOTENT : 0u) | (key ? RESIL_CALL_STABLE_KEY : 0u);
  if (json_text) free(json_text);
  resil__http_client_ref(c);
  atomic_fetch_add_explicit(&c->st_requests, 1, memory_order_relaxed);
  *out = req;
  if (err) resil_error_clear(err);
  return RESIL_OK;
oom:
  st = resil__err(err, RESIL_ENOMEM, NULL, "out of memory");
fail:
  if (json_text) free(json_text);
  resil__http_buf_free(a, &url);
  resil__http_buf_free(a, &hb.store);
  if (hb.offs) resil__free(a, hb.offs);
  if (hb.nlen) resil__free(a, hb.nlen);
  if (body) resil__free(a, body);
  if (key) resil__free(a, key);
  return st;
}

uint32_t resil_http_request_call_flags(const resil_http_request *req) {
  if (!req || req->magic != RESIL_MAGIC_HTTP_REQUEST) return 0;
  return req->flags;
}

const char *resil_http_request_idempotency_key(const resil_http_request *req) {
  if (!req || req->magic != RESIL_MAGIC_HTTP_REQUEST) return NULL;
  return req->key;
}

void resil_http_request_free(resil_http_request *req) {
  if (!req || req->magic != RESIL_MAGIC_HTTP_REQUEST) return;
  resil__http_request_unref(req);
}

/* ---- convenience ---------------------------------------------------------------------- */

resil_outcome resil__http_not_built(const resil_http_client *c, const char *why,
                                    resil_http_response **out) {
  resil_outcome o = resil_outcome_make(RESIL_NOT_SENT, RESIL_REASON_LOCAL_ERROR);
  if (out) {
    const resil_allocator *a = c && c->magic == RESIL_MAGIC_HTTP_CLIENT ? c->t.alloc : NULL;
    resil_http_response *r = resil__http_response_new(a);
    if (r) {
      r->outcome = o;
      snprintf(r->error, sizeof r->error, "%s", why);
      r->has_error = 1;
    }
    *out = r;
  }
  return o;
}
