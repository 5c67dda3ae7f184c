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

int resil__http_request_instance(const resil_http_request *req) {
  if (!req) return -1;
  unsigned b = atomic_load_explicit(&req->last_bit, memory_order_relaxed);
  if (!b || !req->ep->group) return -1;
  return (int)req->ep->group->inst[b - 1]->index;
}

void resil__http_request_avoid(resil_http_request *q, int idx) {
  const resil_http_client *c = q->client;
  if (idx < 0 || !q->ep->group ||
      (unsigned)idx >= atomic_load_explicit(&((resil_http_client *)c)->nall, memory_order_acquire))
    return;
  const http_inst *i = c->all[idx];
  if (i->g == q->ep->group)
    atomic_store_explicit(&q->tried, UINT64_C(1) << i->bit, memory_order_relaxed);
}

static int client_usable(const resil_http_client *c) {
  return c && c->magic == RESIL_MAGIC_HTTP_CLIENT &&
         !atomic_load_explicit(&((resil_http_client *)c)->user_freed, memory_order_relaxed);
}

/* What resil_http_request_new() builds before the request itself exists;
 * freed by parts_free() when the build fails. */
typedef struct req_parts {
  const resil_allocator *a;
  http_buf url;
  hdr_builder hb;
  unsigned char *body;
  size_t body_len;
  char *key;
  char *json_text;
  int has_body;
  int gzipped;
} req_parts;

/* The URL of an endpoint whose path has placeholders: base, then the
 * expanded path template. */
static RESIL_HTTP_OUTLINE resil_status build_path(const http_endpoint *ep,
                                                  const resil_http_args *args, req_parts *p,
                                                  resil_error *err) {
  const http_tpl_part *miss = NULL;
  if (resil__http_buf_append(p->a, &p->url, ep->base, ep->base_len) != 0) return RESIL_ENOMEM;
  int rc = resil__http_tpl_expand(p->a, &ep->path, args->params, args->param_count, 1, &p->url,
                                  &miss);
  if (rc == -2) return RESIL_ENOMEM;
  if (rc == -1)
    return resil__err(err, RESIL_EINVAL, "params",
                      "endpoint '%s': no value for path placeholder {%.*s}", ep->name,
                      (int)miss->len, ep->path.src + miss->off);
  return RESIL_OK;
}

/* The query: the endpoint's template, then the caller's extra parameters. */
static RESIL_HTTP_OUTLINE resil_status build_query(const http_endpoint *ep,
                                                   const resil_http_args *args, req_parts *p,
                                                   resil_error *err) {
  const resil_allocator *a = p->a;
  int have_q = 0;
  if (ep->query.src && ep->query.nparts) {
    const http_tpl_part *miss = NULL;
    if (resil__http_buf_append(a, &p->url, "?", 1) != 0) return RESIL_ENOMEM;
    int rc = resil__http_tpl_expand(a, &ep->query, args->params, args->param_count, 1, &p->url,
                                    &miss);
    if (rc == -2) return RESIL_ENOMEM;
    if (rc == -1)
      return resil__err(err, RESIL_EINVAL, "params",
                        "endpoint '%s': no value for query placeholder {%.*s}", ep->name,
                        (int)miss->len, ep->query.src + miss->off);
    have_q = 1;
  }
  for (size_t i = 0; i < args->query_count; i++) {
    const resil_http_param *q = &args->query[i];
    if (!q->name || !q->name[0])
      return resil__err(err, RESIL_EINVAL, "query", "query[%zu] has no name", i);
    if (resil__http_buf_append(a, &p->url, have_q ? "&" : "?", 1) != 0) return RESIL_ENOMEM;
    have_q = 1;
    if (resil__http_pct_encode(a, &p->url, q->name, strlen(q->name)) != 0) return RESIL_ENOMEM;
    if (q->value) {
      if (resil__http_buf_append(a, &p->url, "=", 1) != 0 ||
          resil__http_pct_encode(a, &p->url, q->value, strlen(q->value)) != 0)
        return RESIL_ENOMEM;
    }
  }
  return RESIL_OK;
}

/* The body (gzip when configured), for a method that has one or args that
 * give one; sets p->has_body. */
static RESIL_HTTP_OUTLINE resil_status build_body(const resil_http_client *c,
                                                  const http_endpoint *ep,
                                                  const resil_http_args *args, req_parts *p,
                                                  resil_error *err) {
  const resil_allocator *a = p->a;
  int has_body = ep->method == RESIL_HTTP_POST || ep->method == RESIL_HTTP_PUT ||
                 ep->method == RESIL_HTTP_PATCH;
  const void *src_body = args->body;
  size_t src_len = args->body_len;
  if (args->json) {
    if (ep->req_codec != RESIL_HTTP_CODEC_JSON)
      return resil__err(err, RESIL_EINVAL, "json", "endpoint '%s' does not take a JSON body",
                        ep->name);
    p->json_text = json_dumps(args->json, JSON_COMPACT | JSON_ENCODE_ANY);
    if (!p->json_text) return RESIL_ENOMEM;
    src_body = p->json_text;
    src_len = strlen(p->json_text);
  }
  if (!src_body && src_len)
    return resil__err(err, RESIL_EINVAL, "body", "is NULL with body_len %zu", src_len);
  if (src_len || args->json) has_body = 1;
  if (has_body && ep->method == RESIL_HTTP_HEAD)
    return resil__err(err, RESIL_EINVAL, "body", "endpoint '%s': a HEAD request has no body",
                      ep->name);
  p->has_body = has_body;
  if (!has_body) return RESIL_OK;
  /* The media type decision was made for the endpoint's content type; a
   * caller who sets another one gets no compression. */
  int gz_type = ep->gzip_type;
  for (size_t i = 0; i < args->header_count; i++)
    if (args->headers[i].name &&
        ieq(args->headers[i].name, strlen(args->headers[i].name), "content-type", 12))
      gz_type = 0;
  if (c->request_gzip && gz_type && src_len > c->gzip_min_bytes) {
    if (gzip_body(a, src_body, src_len, &p->body, &p->body_len) != 0) return RESIL_ENOMEM;
    p->gzipped = 1;
  } else if (src_len) {
    p->body = resil__alloc(a, src_len);
    if (!p->body) return RESIL_ENOMEM;
    memcpy(p->body, src_body, src_len);
    p->body_len = src_len;
  }
  return RESIL_OK;
}

/* The idempotency key: the caller's, or a new one for an endpoint that
 * sends one. */
static RESIL_HTTP_OUTLINE resil_status build_key(const http_endpoint *ep,
                                                 const resil_http_args *args, req_parts *p,
                                                 resil_error *err) {
  if (args->idempotency_key) {
    size_t kl = strlen(args->idempotency_key);
    if (!resil__http_key_ok(args->idempotency_key))
      return resil__err(err, RESIL_EINVAL, "idempotency_key",
                        "must be 1..255 visible ASCII characters");
    p->key = resil__alloc(p->a, kl + 1);
    if (!p->key) return RESIL_ENOMEM;
    memcpy(p->key, args->idempotency_key, kl + 1);
  } else if (ep->key_mode == RESIL_HTTP_KEY_SEND) {
    p->key = resil__alloc(p->a, 33);
    if (!p->key) return RESIL_ENOMEM;
    if (resil__random_hex(p->key, 16) != 0)
      return resil__err(err, RESIL_EIO, NULL, "getrandom failed");
  }
  return RESIL_OK;
}

/* The headers: the endpoint's, the caller's, then the ones libresil owns. */
static RESIL_HTTP_OUTLINE resil_status build_headers(const resil_http_client *c,
                                                     const http_endpoint *ep,
                                                     const resil_http_args *args, req_parts *p,
                                                     resil_error *err) {
  const resil_allocator *a = p->a;
  hdr_builder *hb = &p->hb;
  for (uint32_t i = 0; i < ep->nheaders; i++) {
    const http_header_tpl *h = &ep->headers[i];
    const http_tpl_part *miss = NULL;
    char v_space[256];
    http_buf v;
    resil__http_buf_on(&v, v_space, sizeof v_space);
    int rc = resil__http_tpl_expand(a, &h->value, args->params, args->param_count, 0, &v, &miss);
    if (rc == 0 && !v.p) rc = resil__http_buf_append(a, &v, "", 0) == 0 ? 0 : -2;
    if (rc == -2) {
      resil__http_buf_free(a, &v);
      return RESIL_ENOMEM;
    }
    if (rc == -1) {
      resil__http_buf_free(a, &v);
      return resil__err(err, RESIL_EINVAL, "params",
                        "endpoint '%s': no value for header placeholder {%.*s}", ep->name,
                        (int)miss->len, h->value.src + miss->off);
    }
    if (!resil__http_value_ok(v.p, v.len) || resil__http_reserved_header(h->name, h->name_len) ||
        ieq(h->name, h->name_len, c->t.idem_header, c->t.idem_header_len)) {
      resil__http_buf_free(a, &v);
      return resil__err(err, RESIL_EINVAL, "params",
                        "endpoint '%s': header %s: reserved name, or CR/LF in its value",
                        ep->name, h->name);
    }
    rc = hb_add(hb, h->name, h->name_len, v.p, v.len);
    resil__http_buf_free(a, &v);
    if (rc != 0) return RESIL_ENOMEM;
  }
  for (size_t i = 0; i < args->header_count; i++) {
    const resil_http_param *h = &args->headers[i];
    size_t nl = h->name ? strlen(h->name) : 0;
    int ok = nl > 0 && h->value;
    for (size_t k = 0; ok && k < nl; k++) ok = resil__http_tchar((unsigned char)h->name[k]);
    if (ok) ok = resil__http_value_ok(h->value, strlen(h->value)) && !resil__http_reserved_header(h->name, nl) &&
                 !ieq(h->name, nl, c->t.idem_header, c->t.idem_header_len);
    if (!ok)
      return resil__err(err, RESIL_EINVAL, "headers",
                        "headers[%zu]: needs a token name that libresil does not own and a "
                        "value without CR/LF (the idempotency key goes in idempotency_key)",
                        i);
    if (hb_add(hb, h->name, nl, h->value, strlen(h->value)) != 0) return RESIL_ENOMEM;
  }
  if (p->has_body && !hb_has(hb, "Content-Type", 12)) {
    const char *ct = ep->content_type ? ep->content_type
                     : p->body_len ? "application/octet-stream" : NULL;
    if (ct ? hb_add(hb, "Content-Type", 12, ct, strlen(ct)) != 0
           : hb_remove(hb, "Content-Type") != 0)
      return RESIL_ENOMEM;
  }
  if (ep->resp_codec == RESIL_HTTP_CODEC_JSON && !hb_has(hb, "Accept", 6) &&
      hb_add(hb, "Accept", 6, "application/json", 16) != 0)
    return RESIL_ENOMEM;
  if (p->gzipped && hb_add(hb, "Content-Encoding", 16, "gzip", 4) != 0) return RESIL_ENOMEM;
  if (p->key && hb_add(hb, c->t.idem_header, c->t.idem_header_len, p->key, strlen(p->key)) != 0)
    return RESIL_ENOMEM;
  /* Never "Expect: 100-continue": libcurl adds it to large bodies, and a 417
   * answer makes it send the request again. */
  if (p->has_body && hb_remove(hb, "Expect") != 0) return RESIL_ENOMEM;
  return RESIL_OK;
}

/* A build that failed: frees what it made; st RESIL_ENOMEM sets err. */
static RESIL_HTTP_COLD resil_status parts_fail(req_parts *p, resil_status st, resil_error *err) {
  const resil_allocator *a = p->a;
  if (st == RESIL_ENOMEM) st = resil__err(err, RESIL_ENOMEM, NULL, "out of memory");
  if (p->json_text) free(p->json_text);
  resil__http_buf_free(a, &p->url);
  resil__http_buf_free(a, &p->hb.store);
  if (p->hb.offs) resil__free(a, p->hb.offs);
  if (p->hb.nlen) resil__free(a, p->hb.nlen);
  if (p->body) resil__free(a, p->body);
  if (p->key) resil__free(a, p->key);
  return st;
}

static RESIL_HTTP_COLD resil_status request_new_misuse(const resil_http_client *c,
                                                       const char *endpoint,
                                                       resil_http_request **out,
                                                       resil_error *err) {
  if (!out || !endpoint)
    return resil__err(err, RESIL_EINVAL, NULL, "endpoint and out must not be NULL");
  if (!client_usable(c)) return resil__err(err, RESIL_EMISUSE, NULL, "client must not be NULL");
  return resil__err(err, RESIL_EINVAL, "endpoint", "unknown endpoint '%.60s'", endpoint);
}

resil_status resil_http_request_new(resil_http_client *c, const char *endpoint,
                                    const resil_http_args *args,
                                    resil_http_request **out, resil_error *err) {
  const http_endpoint *ep = NULL;
  if (RESIL_UNLIKELY(!out || !endpoint || !client_usable(c) ||
                     !(ep = resil__http_find_endpoint(c, endpoint))))
    return request_new_misuse(c, endpoint, out, err);
  /* Only the full local copy is read from here on. */
  resil_http_args largs;
  resil_status st = resil__http_args_in(&largs, args, err);
  if (RESIL_UNLIKELY(st != RESIL_OK)) return st;
  args = &largs;
  const resil_allocator *a = c->t.alloc;
  /* The URL is built on the stack and copied into the request's own
   * allocation: no allocation of its own (unless it is longer). Each part
   * an endpoint or call may lack is built out of line (build_*). */
  char url_space[512];
  req_parts p = {.a = a, .hb = {.a = a}};
  resil__http_buf_on(&p.url, url_space, sizeof url_space);

  /* URL: base, path, query template, extra query parameters. */
  if (ep->fixed_url) {
    if (RESIL_UNLIKELY(resil__http_buf_append(a, &p.url, ep->fixed_url, ep->fixed_url_len) != 0))
      return parts_fail(&p, RESIL_ENOMEM, err);
  } else if ((st = build_path(ep, args, &p, err)) != RESIL_OK) {
    return parts_fail(&p, st, err);
  }
  if (((ep->query.src && ep->query.nparts) || args->query_count) &&
      (st = build_query(ep, args, &p, err)) != RESIL_OK)
    return parts_fail(&p, st, err);
  if ((ep->method == RESIL_HTTP_POST || ep->method == RESIL_HTTP_PUT ||
       ep->method == RESIL_HTTP_PATCH || args->json || args->body || args->body_len) &&
      (st = build_body(c, ep, args, &p, err)) != RESIL_OK)
    return parts_fail(&p, st, err);
  if ((args->idempotency_key || ep->key_mode == RESIL_HTTP_KEY_SEND) &&
      (st = build_key(ep, args, &p, err)) != RESIL_OK)
    return parts_fail(&p, st, err);
  if ((ep->nheaders || args->header_count || p.has_body || p.key ||
       ep->resp_codec == RESIL_HTTP_CODEC_JSON) &&
      (st = build_headers(c, ep, args, &p, err)) != RESIL_OK)
    return parts_fail(&p, st, err);

  resil_http_request *req = resil__calloc(a, sizeof *req + p.url.len + 1);
  if (RESIL_UNLIKELY(!req)) return parts_fail(&p, RESIL_ENOMEM, err);
  req->url = (char *)(req + 1);
  memcpy(req->url, p.url.p, p.url.len + 1);
  resil__http_buf_free(a, &p.url);
  /* A mutex with the default attributes, as pthread_mutex_init(&mu, NULL)
   * makes it (POSIX: PTHREAD_MUTEX_INITIALIZER is equivalent, without the
   * error checks, which a default mutex cannot fail), without the call. */
  req->mu = (pthread_mutex_t)PTHREAD_MUTEX_INITIALIZER;
  req->magic = RESIL_MAGIC_HTTP_REQUEST;
  atomic_init(&req->refs, 1);
  atomic_init(&req->tried, 0);
  atomic_init(&req->last_bit, 0);
  req->client = c;
  req->ep = ep;
  req->hdr_store = p.hb.store.p;
  req->hdr_offs = p.hb.offs;
  req->hdr_nlen = p.hb.nlen;
  req->nhdrs = p.hb.n;
  req->body = p.body;
  req->body_len = p.body_len;
  req->has_body = p.has_body;
  req->key = p.key;
  req->flags = (ep->idempotent ? RESIL_CALL_IDEMPOTENT : 0u) | (p.key ? RESIL_CALL_STABLE_KEY : 0u);
  if (p.json_text) free(p.json_text);
  resil__http_client_ref(c);
  atomic_fetch_add_explicit(&c->st_requests, 1, memory_order_relaxed);
  *out = req;
  if (err) resil_error_clear(err);
  return RESIL_OK;
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
