/* Logical requests and their physical attempts: building the request once,
 * driving one transfer per attempt, classifying what libcurl reports into
 * an outcome, decoding, logging, and publishing the result. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <zlib.h>

#include "http_int.h"

#define ieq resil__http_ieq

/* The 0.1 layout of resil_http_args ends with idempotency_key. */
#define ARGS_MIN_SIZE (offsetof(resil_http_args, idempotency_key) + sizeof(const char *))

void resil_http_args_init_sized(resil_http_args *args, size_t n) {
  if (!args) return;
  resil_http_args full;
  memset(&full, 0, sizeof full);
  full.struct_size = sizeof full;
  resil__sized_out(args, n, &full, sizeof full);
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
  resil_http_args_init(dst);
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

int resil__http_ieq(const char *a, size_t alen, const char *b, size_t blen) {
  if (alen != blen) return 0;
  for (size_t i = 0; i < alen; i++) {
    int x = (unsigned char)a[i], y = (unsigned char)b[i];
    if (x >= 'A' && x <= 'Z') x += 32;
    if (y >= 'A' && y <= 'Z') y += 32;
    if (x != y) return 0;
  }
  return 1;
}

/* Headers libcurl or libresil own: neither tables, callers nor
 * interceptors may set them. */
static int reserved_header(const char *n, size_t len) {
  static const char *const names[] = {"content-length", "transfer-encoding", "host",
                                      "expect", "content-encoding", "connection"};
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
    if (ieq(n, len, names[i], strlen(names[i]))) return 1;
  return 0;
}

static int value_ok(const char *v, size_t n) {
  for (size_t i = 0; i < n; i++) {
    unsigned char ch = (unsigned char)v[i];
    if (ch == '\r' || ch == '\n' || ch == 0) return 0;
  }
  return 1;
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
  const resil_allocator *a = c->alloc;
  if (req->pub) resil_http_response_free(req->pub);
  resil__free(a, req->url);
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

static void request_unref(resil_http_request *req) {
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
  const resil_allocator *a = c->alloc;
  resil_status st = RESIL_OK;
  http_buf url = {0};
  hdr_builder hb = {.a = a};
  unsigned char *body = NULL;
  size_t body_len = 0;
  char *key = NULL;
  char *json_text = NULL;
  resil_http_request *req = NULL;
  const http_tpl_part *miss = NULL;

  /* URL: base, path, query template, extra query parameters. */
  if (resil__http_buf_append(a, &url, ep->base, strlen(ep->base)) != 0) goto oom;
  int rc = resil__http_tpl_expand(a, &ep->path, args->params, args->param_count, 1, &url, &miss);
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
    http_buf v = {0};
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
    if (!value_ok(v.p, v.len) || reserved_header(h->name, h->name_len) ||
        ieq(h->name, h->name_len, c->idem_header, c->idem_header_len)) {
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
    if (ok) ok = value_ok(h->value, strlen(h->value)) && !reserved_header(h->name, nl) &&
                 !ieq(h->name, nl, c->idem_header, c->idem_header_len);
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
  if (key && hb_add(&hb, c->idem_header, c->idem_header_len, key, strlen(key)) != 0) goto oom;
  /* Never "Expect: 100-continue": libcurl adds it to large bodies, and a 417
   * answer makes it send the request again. */
  if (has_body && hb_remove(&hb, "Expect") != 0) goto oom;

  req = resil__calloc(a, sizeof *req);
  if (!req) goto oom;
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
  req->url = url.p;
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
  request_unref(req);
}

resil_http_response *resil_http_request_take_response(resil_http_request *req) {
  if (!req || req->magic != RESIL_MAGIC_HTTP_REQUEST) return NULL;
  pthread_mutex_lock(&req->mu);
  resil_http_response *r = req->taken ? NULL : req->pub;
  req->pub = NULL;
  req->taken = 1;
  pthread_mutex_unlock(&req->mu);
  return r;
}

/* ---- interceptor headers ------------------------------------------------------ */

resil_status resil_http_headers_set(resil_http_headers *h, const char *name,
                                    const char *value) {
  if (!h || !h->slot || !name || !value) return RESIL_EINVAL;
  size_t nl = strlen(name), vl = strlen(value);
  if (nl == 0) return RESIL_EINVAL;
  for (size_t i = 0; i < nl; i++)
    if (!resil__http_tchar((unsigned char)name[i])) return RESIL_EINVAL;
  if (!value_ok(value, vl)) return RESIL_EINVAL;
  const resil_http_client *c = h->client;
  /* The idempotency key is fixed for the logical call: an interceptor may
   * refresh a signature, never the key. */
  if (ieq(name, nl, c->idem_header, c->idem_header_len) || reserved_header(name, nl))
    return RESIL_EMISUSE;
  http_slot *s = h->slot;
  const resil_allocator *a = c->alloc;
  for (uint32_t i = 0; i < s->ic_count; i++) {
    if (s->ic_offs[i] == UINT32_MAX) continue;
    const char *e = s->ic.p + s->ic_offs[i];
    const char *colon = strchr(e, ':');
    if (colon && ieq(e, (size_t)(colon - e), name, nl)) s->ic_offs[i] = UINT32_MAX;
  }
  if (s->ic_count == s->ic_cap) {
    uint32_t cap = s->ic_cap ? s->ic_cap * 2 : 8;
    uint32_t *o = resil__alloc(a, cap * sizeof *o);
    if (!o) return RESIL_ENOMEM;
    if (s->ic_count) memcpy(o, s->ic_offs, s->ic_count * sizeof *o);
    if (s->ic_offs) resil__free(a, s->ic_offs);
    s->ic_offs = o;
    s->ic_cap = cap;
  }
  size_t off = s->ic.len;
  if (resil__http_buf_reserve(a, &s->ic, nl + vl + 3) != 0) return RESIL_ENOMEM;
  resil__http_buf_append(a, &s->ic, name, nl);
  resil__http_buf_append(a, &s->ic, ": ", 2);
  resil__http_buf_append(a, &s->ic, value, vl);
  resil__http_buf_append(a, &s->ic, "", 1);
  s->ic_offs[s->ic_count++] = (uint32_t)off;
  return RESIL_OK;
}

/* ---- one attempt ---------------------------------------------------------------- */


static int run_transfer(http_slot *s, resil_cancel *cancel, int64_t deadline,
                        CURLcode *rc_out) {
  int aborted = ABORT_NONE;
  CURLcode rc = CURLE_OK;
  if (curl_multi_add_handle(s->m, s->e) != CURLM_OK) {
    *rc_out = CURLE_FAILED_INIT;
    return ABORT_LOCAL;
  }
  for (;;) {
    int running = 0;
    if (curl_multi_perform(s->m, &running) != CURLM_OK) {
      aborted = ABORT_LOCAL;
      break;
    }
    if (!running) break;
    int64_t now = resil__http_mono_ns();
    if (cancel && resil_cancel_is_set(cancel)) {
      aborted = ABORT_CANCEL;
      break;
    }
    if (now >= deadline) {
      aborted = ABORT_DEADLINE;
      break;
    }
    if (s->x.prereqs && now >= s->x.resp_deadline) {
      aborted = ABORT_RESPONSE;
      break;
    }
    long to = -1;
    curl_multi_timeout(s->m, &to);
    int64_t wait = to >= 0 ? (int64_t)to * RESIL_NS_PER_MS : RESIL_NS_PER_S;
    if (deadline - now < wait) wait = deadline - now;
    if (s->x.prereqs && s->x.resp_deadline - now < wait) wait = s->x.resp_deadline - now;
    /* A token cannot wake curl_multi_poll: look at it every 10 ms. */
    if (cancel && wait > 10 * RESIL_NS_PER_MS) wait = 10 * RESIL_NS_PER_MS;
    int wms = wait <= 0 ? 0 : (int)((wait + RESIL_NS_PER_MS - 1) / RESIL_NS_PER_MS);
    curl_multi_poll(s->m, NULL, 0, wms, NULL);
  }
  if (!aborted) {
    int left = 0;
    CURLMsg *msg;
    while ((msg = curl_multi_info_read(s->m, &left)) != NULL)
      if (msg->msg == CURLMSG_DONE) rc = msg->data.result;
  }
  /* Removing a transfer that has not finished closes its connection. */
  curl_multi_remove_handle(s->m, s->e);
  *rc_out = rc;
  return aborted;
}


/* An attempt that ended before any transfer (no time, cancelled, no pool
 * slot): publishes a response carrying only the outcome. */
static resil_outcome finish_bare(resil_http_request *req, uint32_t seq, resil_outcome o,
                                 const resil_ctx *ctx, int64_t t0, const char *why) {
  resil_http_client *c = req->client;
  resil__http_count_outcome(c, &o);
  int64_t total = resil__http_mono_ns() - t0;
  pthread_mutex_lock(&req->mu);
  if (!req->taken && req->seq == seq) {
    if (!req->pub) req->pub = resil__http_response_new(c->alloc);
    else resil__http_response_reset(req->pub);
    resil_http_response *r = req->pub;
    if (r) {
      r->outcome = o;
      r->info.attempt = ctx->attempt;
      r->info.lease_wait_ns = o.reason == RESIL_REASON_POOL_TIMEOUT ? total : 0;
      r->info.total_ns = total;
      resil__http_response_set_key(r, req->key);
      if (why) {
        snprintf(r->error, sizeof r->error, "%s", why);
        r->has_error = 1;
      }
    }
  }
  pthread_mutex_unlock(&req->mu);
  resil__http_log_bare(c, req->ep, &o, ctx->attempt, total);
  return o;
}

static resil_outcome run_attempt(resil_http_client *c, resil_http_request *req, http_slot *s,
                                 const resil_ctx *ctx, uint32_t seq, int64_t t0, int64_t t_leased,
                                 int64_t deadline) {
  const http_endpoint *ep = req->ep;
  resil_outcome o;
  const char *why = NULL;
  if (!s->e && resil__http_slot_setup(c, s) != 0) why = "could not create libcurl handles";
  if (!why && !s->res && !(s->res = resil__http_response_new(c->alloc))) why = "out of memory";
  if (why) {
    resil__http_pool_release(c, s, ep->origin);
    return finish_bare(req, seq, resil_outcome_make(RESIL_NOT_SENT, RESIL_REASON_LOCAL_ERROR),
                       ctx, t0, why);
  }
  int64_t left = deadline == INT64_MAX ? INT64_MAX : deadline - resil__http_mono_ns();
  if (resil__http_attempt_begin(c, req, s, ctx->attempt, ctx->flags, left, &o) == 0) {
    CURLcode rc = CURLE_OK;
    int aborted = run_transfer(s, ctx->cancel, deadline, &rc);
    o = resil__http_attempt_end(c, req, s, aborted, rc);
  }
  resil__http_attempt_done(c, req, s, &o, ctx->attempt, t_leased - t0, resil__http_mono_ns() - t0);

  /* Publish this attempt's response unless a later attempt has started or
   * the response was taken: an abandoned attempt never overwrites. */
  resil_http_response *res = s->res;
  pthread_mutex_lock(&req->mu);
  if (!req->taken && req->seq == seq) {
    resil_http_response *old = req->pub;
    req->pub = res;
    s->res = old;
  }
  pthread_mutex_unlock(&req->mu);
  resil__http_pool_release(c, s, ep->origin);
  return o;
}


resil_outcome resil_http_request_attempt(void *arg, const resil_ctx *uctx) {
  resil_http_request *req = arg;
  if (!req || req->magic != RESIL_MAGIC_HTTP_REQUEST)
    return resil_outcome_make(RESIL_NOT_SENT, RESIL_REASON_LOCAL_ERROR);
  resil_ctx lctx;
  const resil_ctx *ctx = resil__ctx_in(&lctx, uctx);
  if (!ctx) return resil_outcome_make(RESIL_NOT_SENT, RESIL_REASON_LOCAL_ERROR);
  resil_http_client *c = req->client;
  int64_t t0 = resil__http_mono_ns();
  atomic_fetch_add_explicit(&req->refs, 1, memory_order_relaxed);
  pthread_mutex_lock(&req->mu);
  uint32_t seq = ++req->seq;
  pthread_mutex_unlock(&req->mu);

  resil_outcome o;
  int64_t budget = resil_ctx_remaining_ns(ctx);
  if (resil_cancel_is_set(ctx->cancel)) {
    o = finish_bare(req, seq, resil_outcome_make(RESIL_NOT_SENT, RESIL_REASON_CANCELLED), ctx, t0,
                    "cancelled before sending");
  } else if (budget <= 0) {
    o = finish_bare(req, seq, resil_outcome_make(RESIL_REJECTED, RESIL_REASON_DEADLINE), ctx, t0,
                    "no time left before the deadline");
  } else {
    int64_t deadline = budget == INT64_MAX ? INT64_MAX : resil__sat_add(t0, budget);
    int64_t lease_to = c->lease_timeout_ns < budget ? c->lease_timeout_ns : budget;
    http_slot *s = NULL;
    http_lease_rc lr = resil__http_pool_lease(c, req->ep->origin, lease_to, ctx->cancel, &s);
    if (lr == HTTP_LEASE_TIMEOUT) {
      atomic_fetch_add_explicit(&c->st_lease_timeouts, 1, memory_order_relaxed);
      o = finish_bare(req, seq, resil_outcome_make(RESIL_NOT_SENT, RESIL_REASON_POOL_TIMEOUT), ctx,
                      t0, "no pool connection free within the lease timeout");
    } else if (lr == HTTP_LEASE_CANCELLED) {
      o = finish_bare(req, seq, resil_outcome_make(RESIL_NOT_SENT, RESIL_REASON_CANCELLED), ctx, t0,
                      "cancelled while waiting for a pool connection");
    } else {
      o = run_attempt(c, req, s, ctx, seq, t0, resil__http_mono_ns(), deadline);
    }
  }
  request_unref(req);
  return o;
}

/* ---- convenience ---------------------------------------------------------------------- */

resil_outcome resil__http_not_built(const resil_http_client *c, const char *why,
                                    resil_http_response **out) {
  resil_outcome o = resil_outcome_make(RESIL_NOT_SENT, RESIL_REASON_LOCAL_ERROR);
  if (out) {
    const resil_allocator *a = c && c->magic == RESIL_MAGIC_HTTP_CLIENT ? c->alloc : NULL;
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

resil_outcome resil_http_call(resil_http_client *c, const char *endpoint,
                              const resil_http_args *args, resil_retry *retry,
                              const resil_ctx *ctx, resil_http_response **out) {
  if (out) *out = NULL;
  resil_ctx lc;
  const resil_ctx *uc = resil__ctx_in(&lc, ctx);
  if (!uc) return resil__http_not_built(c, "ctx: call resil_ctx_init()", out);
  if (uc != &lc) lc = *uc;
  resil_http_request *req = NULL;
  resil_error err;
  resil_status st = resil_http_request_new(c, endpoint, args, &req, &err);
  if (st != RESIL_OK) return resil__http_not_built(c, err.msg, out);
  lc.flags |= req->flags;
  lc.idempotency_key = req->key;
  resil_outcome o;
  if (retry) {
    /* The retry decides the attempts, so its own listener reports them. */
    o = resil_retry_run(retry, &lc, resil_http_request_attempt, req);
  } else {
    int64_t t0 = resil__http_mono_ns();
    o = resil_http_request_attempt(req, &lc);
    resil__http_report(c, 1, &o, resil__http_mono_ns() - t0, 0, -1, RESIL_STOP_NONE, req->key);
  }
  resil_http_response *r = resil_http_request_take_response(req);
  if (out) *out = r;
  else resil_http_response_free(r);
  resil_http_request_free(req);
  return o;
}
