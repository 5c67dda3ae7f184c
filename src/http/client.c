/* The client: config validation, the compiled endpoint table, the
 * recovery flow's settings, the pool of transfer slots and the counters.
 * Layer 4 (src/http/README.md). */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "base.h"
#include "client_int.h"
#include "core/redact.h"
#include "log_int.h"
#include "slot.h"
#include "template.h"

#define HTTP_MAX_ENDPOINTS 1024u
#define HTTP_MAX_SLOTS 1024u
#define HTTP_MAX_INTERCEPTORS 16u
#define HTTP_DAY_NS (INT64_C(86400) * RESIL_NS_PER_S)
#define HTTP_GIB ((size_t)1 << 30)

/* Sized structs (version.h): the 0.1 layouts end with these fields. */
#define CONFIG_MIN_SIZE                                                        \
  (offsetof(resil_http_client_config, pending_wait_max_ns) + sizeof(int64_t))
#define ENDPOINT_MIN_SIZE                                                      \
  (offsetof(resil_http_endpoint, status_endpoint) + sizeof(const char *))

static void config_defaults(resil_http_client_config *cfg) {
  memset(cfg, 0, sizeof *cfg);
  cfg->struct_size = sizeof *cfg;
  cfg->max_connections = 16;
  cfg->max_connections_per_host = 16;
  cfg->lease_timeout_ns = RESIL_NS_PER_S;
  cfg->connect_timeout_ns = 10 * RESIL_NS_PER_S;
  cfg->response_timeout_ns = 60 * RESIL_NS_PER_S;
  cfg->follow_redirects = 0;
  cfg->max_redirects = 5;
  cfg->request_gzip = 0;
  cfg->gzip_min_bytes = 2048;
  cfg->gzip_media_types = NULL;
  cfg->response_decompression = 1;
  cfg->resend_stale = RESIL_HTTP_RESEND_NEVER;
  cfg->idempotency_header = "Idempotency-Key";
  cfg->max_response_bytes = 64u << 20;
  cfg->log_level = RESIL_HTTP_LOG_NONE;
  cfg->verify_peer = 1;
  cfg->status_query_classes =
      RESIL_CLASS_BIT(RESIL_CLASS_UNKNOWN) | RESIL_CLASS_BIT(RESIL_CLASS_SERVER_ERROR);
  cfg->status_poll_ns = 100 * RESIL_NS_PER_MS;
  cfg->pending_wait_max_ns = 10 * RESIL_NS_PER_S;
  cfg->deadline_propagation = 1;
  cfg->deadline_header = "Request-Timeout";
  cfg->resolve_interval_ns = 30 * RESIL_NS_PER_S;
  cfg->balance = RESIL_HTTP_BALANCE_P2C;
  cfg->eject_consecutive = 5;
  cfg->eject_classes = RESIL_HTTP_EJECT_CLASSES_DEFAULT;
  cfg->eject_base_ns = 30 * RESIL_NS_PER_S;
  cfg->eject_max_ns = 300 * RESIL_NS_PER_S;
  cfg->eject_max_percent = 50;
  cfg->instance_ramp_ns = 0;
  cfg->instance_ramp_min_percent = 10;
  cfg->instance_ramp_aggression = 1.0;
}

void resil_http_client_config_init_sized(resil_http_client_config *cfg, size_t n) {
  if (!cfg) return;
  resil_http_client_config full;
  config_defaults(&full);
  resil__sized_out(cfg, n, &full, sizeof full);
}

/* Entry i of the caller's endpoint table, read with the caller's stride
 * (the first entry's struct_size) into *out (zero defaults for fields the
 * caller's layout lacks). */
static resil_status endpoint_in(const resil_http_client_config *cfg, size_t i,
                                resil_http_endpoint *out, resil_error *err) {
  const unsigned char *base = (const unsigned char *)cfg->endpoints;
  size_t stride = resil__sized_size(base);
  memset(out, 0, sizeof *out);
  char field[48];
  snprintf(field, sizeof field, "endpoints[%zu].struct_size", i);
  if (stride < ENDPOINT_MIN_SIZE || stride > sizeof *out + RESIL__SIZED_SLACK)
    return resil__err(err, RESIL_EINVAL, field,
                      "must be sizeof(resil_http_endpoint): write each entry with "
                      "RESIL_HTTP_ENDPOINT(...) or set .struct_size");
  const unsigned char *e = base + i * stride;
  if (resil__sized_size(e) != stride)
    return resil__err(err, RESIL_EINVAL, field,
                      "is %zu, entry 0 says %zu: every entry of a table must carry the "
                      "same sizeof(resil_http_endpoint) (RESIL_HTTP_ENDPOINT(...))",
                      resil__sized_size(e), stride);
  resil_status st = resil__sized_in(out, sizeof *out, e, ENDPOINT_MIN_SIZE,
                                    "resil_http_endpoint", "RESIL_HTTP_ENDPOINT", err);
  if (st != RESIL_OK && err) snprintf(err->field, sizeof err->field, "%s", field);
  return st;
}

/* ---- small string helpers ------------------------------------------------ */

static char *dup_n(const resil_allocator *a, const char *s, size_t n) {
  char *p = resil__alloc(a, n + 1);
  if (!p) return NULL;
  memcpy(p, s, n);
  p[n] = '\0';
  return p;
}

static int lc(int c) { return (c >= 'A' && c <= 'Z') ? c + 32 : c; }

static int valid_name(const char *s) {
  size_t n = 0;
  for (; s[n]; n++) {
    int c = (unsigned char)s[n];
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
          c == '_' || c == '.' || c == '-'))
      return 0;
  }
  return n >= 1 && n <= 63;
}

/* Validates an absolute http(s) base URL and writes its origin key
 * ("scheme://host:port", lower case) into key. Returns NULL when valid, else
 * the problem. */
static const char *parse_base(const char *url, char *key, size_t keylen) {
  size_t slen;
  const char *scheme;
  if (strncmp(url, "http://", 7) == 0) {
    slen = 7;
    scheme = "http";
  } else if (strncmp(url, "https://", 8) == 0) {
    slen = 8;
    scheme = "https";
  } else {
    return "must start with http:// or https://";
  }
  for (const char *p = url; *p; p++) {
    unsigned char c = (unsigned char)*p;
    if (c <= 0x20 || c >= 0x7f) return "must not contain spaces, control or non-ASCII characters";
    if (c == '?' || c == '#') return "must not contain a query or a fragment";
    if (c == '{' || c == '}') return "must not contain placeholders";
  }
  const char *auth = url + slen;
  const char *end = auth;
  while (*end && *end != '/') end++;
  const char *host = auth;
  for (const char *p = auth; p < end; p++)
    if (*p == '@') host = p + 1;
  if (host == end) return "has no host";
  const char *port = NULL;
  const char *hend = end;
  if (*host == '[') {
    const char *rb = memchr(host, ']', (size_t)(end - host));
    if (!rb) return "has an unclosed '[' in the host";
    hend = rb + 1;
    if (hend < end) {
      if (*hend != ':') return "has characters after the IPv6 host";
      port = hend + 1;
    }
  } else {
    const char *colon = memchr(host, ':', (size_t)(end - host));
    if (colon) {
      hend = colon;
      port = colon + 1;
    }
  }
  if (hend == host) return "has no host";
  long pnum = strcmp(scheme, "https") == 0 ? 443 : 80;
  if (port) {
    if (port == end) return "has an empty port";
    pnum = 0;
    for (const char *p = port; p < end; p++) {
      if (*p < '0' || *p > '9') return "has a port that is not a number";
      pnum = pnum * 10 + (*p - '0');
      if (pnum > 65535) return "has a port above 65535";
    }
    if (pnum == 0) return "has port 0";
  }
  int n = snprintf(key, keylen, "%s://%.*s:%ld", scheme, (int)(hend - host), host, pnum);
  if (n < 0 || (size_t)n >= keylen) return "has a host name that is too long";
  for (char *p = key; *p; p++) *p = (char)lc((unsigned char)*p);
  return NULL;
}

/* A NULL-terminated list of instance base URLs (field names it): 1..64
 * valid entries. */
static resil_status check_instances(const char *const *list, const char *field,
                                    resil_error *err) {
  size_t n = 0;
  while (list[n]) n++;
  if (n < 1 || n > HTTP_MAX_INSTANCES)
    return resil__err(err, RESIL_EINVAL, field,
                      "must list 1..%u base URLs, got %zu",
                      (unsigned)HTTP_MAX_INSTANCES, n);
  for (size_t i = 0; i < n; i++) {
    char key[300];
    const char *why = parse_base(list[i], key, sizeof key);
    if (why) {
      char f[64];
      snprintf(f, sizeof f, "%.40s[%zu]", field, i);
      return resil__err(err, RESIL_EINVAL, f, "%s", why);
    }
  }
  return RESIL_OK;
}

static int media_type_eq(const char *ct, const char *type) {
  /* Compares the media type of ct (before ';', spaces trimmed) with type. */
  while (*ct == ' ' || *ct == '\t') ct++;
  size_t n = 0;
  while (ct[n] && ct[n] != ';') n++;
  while (n > 0 && (ct[n - 1] == ' ' || ct[n - 1] == '\t')) n--;
  size_t tl = strlen(type);
  if (tl != n) return 0;
  for (size_t i = 0; i < n; i++)
    if (lc((unsigned char)ct[i]) != lc((unsigned char)type[i])) return 0;
  return 1;
}

/* ---- endpoint compilation -------------------------------------------------- */

static resil_status tpl_compile(resil_http_client *c, size_t idx,
                                const char *ename, const char *field,
                                const char *src, http_tpl_kind kind,
                                http_tpl *out, resil_error *err) {
  char fname[48];
  snprintf(fname, sizeof fname, "endpoints[%u].%.20s", (unsigned)idx, field);
  size_t len = strlen(src);
  uint32_t n = 0;
  size_t off = 0;
  const char *why = NULL;
  if (resil__http_tpl_parse(src, len, kind, NULL, 0, &n, &off, &why) != 0) {
    /* A header value is never quoted (it may be a credential); a query is
     * quoted with its secret-looking values redacted (log.c). */
    if (kind == HTTP_TPL_HEADER)
      return resil__err(err, RESIL_EINVAL, fname, "endpoint '%s': %s at offset %zu", ename, why,
                        off);
    char q[64];
    resil__redact_excerpt(q, sizeof q, src, len,
                          kind == HTTP_TPL_QUERY ? RESIL__REDACT_PAIRS : RESIL__REDACT_NONE, NULL);
    return resil__err(err, RESIL_EINVAL, fname, "endpoint '%s': %s at offset %zu in \"%s\"",
                      ename, why, off, q);
  }
  out->src = src;
  out->nparts = n;
  out->parts = n ? resil__calloc(c->t.alloc, n * sizeof *out->parts) : NULL;
  if (n && !out->parts) return resil__err(err, RESIL_ENOMEM, NULL, "out of memory");
  resil__http_tpl_parse(src, len, kind, out->parts, n, &n, &off, &why);
  return RESIL_OK;
}

static void endpoint_free(const resil_allocator *a, http_endpoint *e) {
  resil__free(a, e->name);
  resil__free(a, e->content_type);
  resil__free(a, e->path.parts);
  resil__free(a, e->query.parts);
  for (uint32_t i = 0; e->headers && i < e->nheaders; i++) {
    resil__free(a, e->headers[i].name);
    resil__free(a, e->headers[i].value.parts);
  }
  resil__free(a, e->headers);
  resil__free(a, e->base);
  resil__free(a, e->fixed_url);
  resil__free(a, e->tpl_store);
}

static int method_idempotent(resil_http_method m) {
  return m != RESIL_HTTP_POST && m != RESIL_HTTP_PATCH;
}

/* Appends origin `key` (a new index even when the key is known: a
 * resolved name's addresses are origins of their own). */
static resil_status origin_append(resil_http_client *c, const char *key, uint32_t *out,
                                  resil_error *err) {
  const resil_allocator *a = c->t.alloc;
  if (c->t.norigins == c->origins_cap) {
    uint32_t cap = c->origins_cap ? c->origins_cap * 2 : 8;
    char **o = resil__calloc(a, cap * sizeof *o);
    if (!o) return resil__err(err, RESIL_ENOMEM, NULL, "out of memory");
    if (c->t.norigins) memcpy(o, c->t.origins, c->t.norigins * sizeof *o);
    resil__free(a, c->t.origins);
    c->t.origins = o;
    c->origins_cap = cap;
  }
  char *k = dup_n(a, key, strlen(key));
  if (!k) return resil__err(err, RESIL_ENOMEM, NULL, "out of memory");
  c->t.origins[c->t.norigins] = k;
  *out = c->t.norigins++;
  return RESIL_OK;
}

static resil_status origin_index(resil_http_client *c, const char *key,
                                 uint32_t *out, resil_error *err) {
  for (uint32_t i = 0; i < c->t.norigins; i++)
    if (strcmp(c->t.origins[i], key) == 0) {
      *out = i;
      return RESIL_OK;
    }
  return origin_append(c, key, out, err);
}

/* ---- upstreams of several instances (instances.c) ---------------------------- */

/* A base URL without its trailing '/'s: its length. */
static size_t base_trim(const char *b) {
  size_t n = strlen(b);
  while (n > 0 && b[n - 1] == '/') n--;
  return n;
}

/* A new upstream `name` of several instances: the base URLs of `list`
 * (NULL-terminated, checked), or the addresses of resolve_base's host
 * (looked up by the resolver thread, the first time as soon as it
 * starts: never here, so that creating a client never waits for DNS). */
static resil_status group_new(resil_http_client *c, const resil_http_client_config *cfg,
                              const char *name, const char *const *list,
                              const char *resolve_base, http_group **out,
                              resil_error *err) {
  const resil_allocator *a = c->t.alloc;
  size_t n = 0;
  if (list)
    while (list[n]) n++;
  uint32_t need = list ? (uint32_t)n : HTTP_MAX_INSTANCES;
  if (c->all_cap - atomic_load(&c->nall) < need) {
    uint32_t cap = c->all_cap + need + 8;
    http_inst **all = resil__calloc(a, cap * sizeof *all);
    if (!all) return resil__err(err, RESIL_ENOMEM, NULL, "out of memory");
    if (c->all) memcpy(all, c->all, c->all_cap * sizeof *all);
    resil__free(a, c->all);
    c->all = all;
    c->all_cap = cap;
    for (uint32_t k = 0; k < c->ngroups; k++) c->groups[k]->all = all;
  }
  http_group **gs = resil__calloc(a, (c->ngroups + 1) * sizeof *gs);
  http_group *g = resil__calloc(a, sizeof *g);
  if (!gs || !g || resil__http_group_init(g) != 0) {
    resil__free(a, gs);
    resil__free(a, g);
    return resil__err(err, RESIL_ENOMEM, NULL, "out of memory");
  }
  if (c->ngroups) memcpy(gs, c->groups, c->ngroups * sizeof *gs);
  gs[c->ngroups] = g;
  resil__free(a, c->groups);
  c->groups = gs;
  g->gindex = c->ngroups++;
  g->all = c->all;
  g->nall = &c->nall;
  g->balance = (int)cfg->balance;
  g->eject_consecutive = cfg->eject_consecutive;
  g->eject_classes = cfg->eject_classes;
  g->eject_base_ns = cfg->eject_base_ns;
  g->eject_max_ns = cfg->eject_max_ns;
  g->eject_max_percent = cfg->eject_max_percent;
  if (cfg->instance_ramp_ns)
    resil__ramp_curve_init(&g->ramp, cfg->instance_ramp_ns, cfg->instance_ramp_min_percent,
                           cfg->instance_ramp_aggression);
  g->listener = cfg->on_instance;
  g->listener_user = cfg->on_instance_user;
  g->client_name = c->name;
  if (!(g->name = dup_n(a, name, strlen(name))))
    return resil__err(err, RESIL_ENOMEM, NULL, "out of memory");
  *out = g;
  char key[300];
  if (list) {
    for (size_t i = 0; i < n; i++) {
      parse_base(list[i], key, sizeof key);
      uint32_t origin = 0;
      resil_status st = origin_index(c, key, &origin, err);
      if (st != RESIL_OK) return st;
      size_t bl = base_trim(list[i]);
      char label[320];
      snprintf(label, sizeof label, "%.*s", (int)bl, list[i]);
      if (!resil__http_group_add(a, g, list[i], bl, label, NULL, origin))
        return resil__err(err, RESIL_ENOMEM, NULL, "out of memory");
    }
    return RESIL_OK;
  }
  /* A resolved name: host and port from the origin key
   * ("scheme://host:port", the host bracketed when IPv6) and its origins
   * reserved (one per address it may have). */
  parse_base(resolve_base, key, sizeof key);
  const char *h = strstr(key, "://") + 3;
  const char *colon = strrchr(h, ':');
  g->resolve = 1;
  g->base_len = base_trim(resolve_base);
  g->base = dup_n(a, resolve_base, g->base_len);
  g->ct_host = dup_n(a, h, (size_t)(colon - h));
  g->port = dup_n(a, colon + 1, strlen(colon + 1));
  if (h[0] == '[') g->host = dup_n(a, h + 1, (size_t)(colon - h) - 2);
  else g->host = dup_n(a, h, (size_t)(colon - h));
  if (!g->base || !g->ct_host || !g->port || !g->host)
    return resil__err(err, RESIL_ENOMEM, NULL, "out of memory");
  for (uint32_t k = 0; k < HTTP_MAX_INSTANCES; k++) {
    uint32_t o = 0;
    resil_status st = origin_append(c, key, &o, err);
    if (st != RESIL_OK) return st;
    if (k == 0) g->origin0 = o;
  }
  /* No address yet: an attempt waits for the first lookup within its own
   * time (request.c, the engine's DNSWAIT), then ends NOT_SENT(DNS) while
   * no address is known. */
  return RESIL_OK;
}

static resil_status compile_endpoint(resil_http_client *c, size_t idx,
                                     const resil_http_endpoint *src,
                                     const char *const *gzip_types,
                                     const resil_http_client_config *cfg,
                                     http_endpoint *e, resil_error *err) {
  const char *client_base = cfg->base_url ? cfg->base_url : cfg->instances[0];
  char fname[48];
  const resil_allocator *a = c->t.alloc;
#define EFIELD(f) (snprintf(fname, sizeof fname, "endpoints[%u].%.20s", (unsigned)idx, f), fname)
  if (!src->name || !valid_name(src->name))
    return resil__err(err, RESIL_EINVAL, EFIELD("name"),
                      "must be 1..63 characters of A-Z a-z 0-9 _ . -, got \"%.40s\"",
                      src->name ? src->name : "(null)");
  const char *en = src->name;
  for (size_t i = 0; i < idx; i++)
    if (strcmp(c->eps[i].name, en) == 0)
      return resil__err(err, RESIL_EINVAL, EFIELD("name"),
                        "endpoint '%s': name already used by endpoints[%zu]", en, i);
  if ((unsigned)src->method > RESIL_HTTP_OPTIONS)
    return resil__err_range(err, EFIELD("method"), 0, RESIL_HTTP_OPTIONS, (int64_t)src->method, NULL);
  if ((unsigned)src->idempotent > RESIL_HTTP_IDEMPOTENT_NO)
    return resil__err_range(err, EFIELD("idempotent"), 0, 2, (int64_t)src->idempotent, NULL);
  if ((unsigned)src->request_codec > RESIL_HTTP_CODEC_JSON)
    return resil__err_range(err, EFIELD("request_codec"), 0, 1, (int64_t)src->request_codec, NULL);
  if ((unsigned)src->response_codec > RESIL_HTTP_CODEC_JSON)
    return resil__err_range(err, EFIELD("response_codec"), 0, 1, (int64_t)src->response_codec, NULL);
  if ((unsigned)src->idempotency_key > RESIL_HTTP_KEY_SEND)
    return resil__err_range(err, EFIELD("idempotency_key"), 0, 1, (int64_t)src->idempotency_key, NULL);
  if (src->empty_is_error != 0 && src->empty_is_error != 1)
    return resil__err_range(err, EFIELD("empty_is_error"), 0, 1, src->empty_is_error, NULL);
  if (src->no_deadline_header != 0 && src->no_deadline_header != 1)
    return resil__err_range(err, EFIELD("no_deadline_header"), 0, 1, src->no_deadline_header,
                            NULL);
  if (src->resolve_instances != 0 && src->resolve_instances != 1)
    return resil__err_range(err, EFIELD("resolve_instances"), 0, 1, src->resolve_instances,
                            NULL);
  if (src->instances && src->base_url)
    return resil__err(err, RESIL_EINVAL, EFIELD("instances"),
                      "endpoint '%s': give base_url or instances, not both", src->name);
  if (src->resolve_instances && !src->base_url)
    return resil__err(err, RESIL_EINVAL, EFIELD("resolve_instances"),
                      "endpoint '%s': resolves base_url's host: give base_url", src->name);
  if (src->instances) {
    resil_status ist = check_instances(src->instances, EFIELD("instances"), err);
    if (ist != RESIL_OK) return ist;
  }
  if (!src->path)
    return resil__err(err, RESIL_EINVAL, EFIELD("path"), "endpoint '%s': path is required", en);

  e->name = dup_n(a, en, strlen(en));
  if (!e->name) return resil__err(err, RESIL_ENOMEM, NULL, "out of memory");
  e->method = src->method;
  e->idempotent = src->idempotent == RESIL_HTTP_IDEMPOTENT_DEFAULT
                      ? method_idempotent(src->method)
                      : src->idempotent == RESIL_HTTP_IDEMPOTENT_YES;
  e->req_codec = src->request_codec;
  e->resp_codec = src->response_codec;
  e->key_mode = src->idempotency_key;
  e->empty_is_error = src->empty_is_error;
  e->no_deadline = src->no_deadline_header;
  e->decoder = src->decoder;
  e->decoder_user = src->decoder_user;
  e->status_name = src->status_endpoint;

  const char *ct = src->content_type;
  if (!ct) ct = src->request_codec == RESIL_HTTP_CODEC_JSON ? "application/json" : NULL;
  if (ct) {
    for (const char *p = ct; *p; p++)
      if ((unsigned char)*p < 0x20 || (unsigned char)*p == 0x7f)
        return resil__err(err, RESIL_EINVAL, EFIELD("content_type"),
                          "endpoint '%s': control character in the content type", en);
    e->content_type = dup_n(a, ct, strlen(ct));
    if (!e->content_type) return resil__err(err, RESIL_ENOMEM, NULL, "out of memory");
    for (size_t i = 0; gzip_types && gzip_types[i]; i++)
      if (media_type_eq(ct, gzip_types[i])) e->gzip_type = 1;
  }

  /* One block holds the copies of every template source. */
  size_t plen = strlen(src->path) + 1;
  size_t qlen = src->query ? strlen(src->query) + 1 : 0;
  size_t hlen = 0, nh = 0;
  for (size_t i = 0; src->headers && src->headers[i]; i++) {
    hlen += strlen(src->headers[i]) + 1;
    nh++;
  }
  if (nh > 64)
    return resil__err_range(err, EFIELD("headers"), 0, 64, (int64_t)nh, NULL);
  e->tpl_store = resil__alloc(a, plen + qlen + hlen);
  if (!e->tpl_store) return resil__err(err, RESIL_ENOMEM, NULL, "out of memory");
  char *w = e->tpl_store;
  memcpy(w, src->path, plen);
  resil_status st = tpl_compile(c, idx, en, "path", w, HTTP_TPL_PATH, &e->path, err);
  if (st != RESIL_OK) return st;
  w += plen;
  if (src->query) {
    memcpy(w, src->query, qlen);
    st = tpl_compile(c, idx, en, "query", w, HTTP_TPL_QUERY, &e->query, err);
    if (st != RESIL_OK) return st;
    w += qlen;
  }
  if (nh) {
    e->headers = resil__calloc(a, nh * sizeof *e->headers);
    if (!e->headers) return resil__err(err, RESIL_ENOMEM, NULL, "out of memory");
  }
  for (size_t i = 0; i < nh; i++) {
    const char *h = src->headers[i];
    size_t n = strlen(h);
    memcpy(w, h, n + 1);
    size_t k = 0;
    while (k < n && resil__http_tchar((unsigned char)w[k])) k++;
    char hf[24];
    snprintf(hf, sizeof hf, "headers[%zu]", i);
    if (k == 0 || k >= n || w[k] != ':')
      return resil__err(err, RESIL_EINVAL, EFIELD(hf),
                        "endpoint '%s': header must be \"Name: value\" with a token name, got "
                        "\"%.*s...\" (the rest not shown)",
                        en, (int)(k < 40 ? k : 40), h);
    e->headers[i].name = dup_n(a, w, k);
    if (!e->headers[i].name) return resil__err(err, RESIL_ENOMEM, NULL, "out of memory");
    e->headers[i].name_len = k;
    e->nheaders = (uint32_t)(i + 1);
    const char *v = w + k + 1;
    while (*v == ' ' || *v == '\t') v++;
    st = tpl_compile(c, idx, en, hf, (char *)v, HTTP_TPL_HEADER, &e->headers[i].value, err);
    if (st != RESIL_OK) return st;
    w += n + 1;
  }

  const char *base = src->instances ? src->instances[0]
                     : src->base_url ? src->base_url
                                     : client_base;
  char key[300];
  const char *why = parse_base(base, key, sizeof key);
  if (why)
    return resil__err(err, RESIL_EINVAL, EFIELD("base_url"), "endpoint '%s': base_url %s",
                      en, why);
  size_t bl = strlen(base);
  while (bl > 0 && base[bl - 1] == '/') bl--;
  e->base = dup_n(a, base, bl);
  if (!e->base) return resil__err(err, RESIL_ENOMEM, NULL, "out of memory");
  e->base_len = bl;
  int fixed = 1;
  for (uint32_t i = 0; i < e->path.nparts; i++)
    if (e->path.parts[i].is_var) fixed = 0;
  if (fixed) {
    size_t pl = strlen(e->path.src);
    e->fixed_url = resil__alloc(a, bl + pl + 1);
    if (!e->fixed_url) return resil__err(err, RESIL_ENOMEM, NULL, "out of memory");
    memcpy(e->fixed_url, base, bl);
    memcpy(e->fixed_url + bl, e->path.src, pl + 1);
    e->fixed_url_len = bl + pl;
  }
  if (src->instances || src->resolve_instances) {
    resil_status gst = group_new(c, cfg, en, src->instances,
                                 src->resolve_instances ? src->base_url : NULL, &e->group, err);
    if (gst != RESIL_OK) return gst;
  } else if (!src->base_url && c->ngroups && c->groups[0]->gindex == 0 &&
             (cfg->instances || cfg->resolve_instances)) {
    e->group = c->groups[0];
  }
  return origin_index(c, key, &e->origin, err);
#undef EFIELD
}

/* The Accept-Encoding line libcurl writes for CURLOPT_ACCEPT_ENCODING ""
 * (Curl_all_content_encodings in lib/content_encoding.c: the decoders it
 * was built with, in the order deflate, gzip, br, zstd, joined by ", "),
 * from the features it reports. Returns 0 when it decodes nothing.
 * test_http_basic compares the line with the one libcurl writes. */
static int accept_encoding_line(char *out, size_t n) {
  const curl_version_info_data *vi = curl_version_info(CURLVERSION_NOW);
  int f = vi ? vi->features : 0;
  char list[48] = "";
  if (f & CURL_VERSION_LIBZ) strcat(list, ", deflate, gzip");
  if (f & CURL_VERSION_BROTLI) strcat(list, ", br");
  if (f & CURL_VERSION_ZSTD) strcat(list, ", zstd");
  if (!list[0]) return 0;
  snprintf(out, n, "Accept-Encoding: %s", list + 2);
  return 1;
}

/* ---- client lifetime ---------------------------------------------------------- */

/* ---- the resolver thread --------------------------------------------------------- */

static int has_resolved(const resil_http_client *c) {
  for (uint32_t i = 0; i < c->ngroups; i++)
    if (c->groups[i]->resolve) return 1;
  return 0;
}

/* Looks every resolved name up: at once when the thread starts (the
 * first lookup, resolved_at 0), then again when its interval is over
 * (every second while it has no address), until rstop. The end of a
 * name's first lookup is told to the watchers (the engines). */
static void *resolver_main(void *arg) {
  resil_http_client *c = arg;
  pthread_mutex_lock(&c->rmu);
  while (!c->rstop) {
    int64_t now = resil__http_mono_ns(), next = INT64_MAX;
    for (uint32_t i = 0; i < c->ngroups && !c->rstop; i++) {
      http_group *g = c->groups[i];
      if (!g->resolve) continue;
      pthread_mutex_lock(&g->mu);
      int64_t at = g->resolved_at;
      pthread_mutex_unlock(&g->mu);
      int64_t every = atomic_load(&g->live) ? c->resolve_interval_ns : RESIL_NS_PER_S;
      int64_t due = at ? resil__sat_add(at, every) : now;
      if (due <= now) {
        int first = !resil__http_group_ready(g);
        pthread_mutex_unlock(&c->rmu);
        if (resil__http_group_resolve(c->t.alloc, g) != 0) {
          pthread_mutex_lock(&g->mu);
          g->resolved_at = resil__http_mono_ns();
          pthread_mutex_unlock(&g->mu);
        }
        pthread_mutex_lock(&c->rmu);
        for (http_watch *w = first ? c->watchers : NULL; w; w = w->next) w->fn(w->arg);
        now = resil__http_mono_ns();
        due = resil__sat_add(now, atomic_load(&g->live) ? c->resolve_interval_ns : RESIL_NS_PER_S);
      }
      if (due < next) next = due;
    }
    if (c->rstop) break;
    struct timespec ts;
    int64_t until = next == INT64_MAX ? resil__sat_add(now, RESIL_NS_PER_S) : next;
    ts.tv_sec = (time_t)(until / RESIL_NS_PER_S);
    ts.tv_nsec = (long)(until % RESIL_NS_PER_S);
    pthread_cond_timedwait(&c->rcv, &c->rmu, &ts);
  }
  pthread_mutex_unlock(&c->rmu);
  return NULL;
}

static resil_status resolver_start(resil_http_client *c, resil_error *err) {
  if (!has_resolved(c)) return RESIL_OK;
  pthread_condattr_t ca;
  if (pthread_mutex_init(&c->rmu, NULL) != 0)
    return resil__err(err, RESIL_ESYS, NULL, "pthread_mutex_init failed");
  int ok = pthread_condattr_init(&ca) == 0;
  if (ok) {
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    ok = pthread_cond_init(&c->rcv, &ca) == 0;
    pthread_condattr_destroy(&ca);
  }
  if (!ok) {
    pthread_mutex_destroy(&c->rmu);
    return resil__err(err, RESIL_ESYS, NULL, "pthread_cond_init failed");
  }
  if (pthread_create(&c->resolver, NULL, resolver_main, c) != 0) {
    pthread_cond_destroy(&c->rcv);
    pthread_mutex_destroy(&c->rmu);
    return resil__err(err, RESIL_ESYS, NULL, "could not start the resolver thread");
  }
  c->resolver_on = 1;
  return RESIL_OK;
}

void resil__http_client_watch(resil_http_client *c, http_watch *w) {
  if (!c->resolver_on) return;
  pthread_mutex_lock(&c->rmu);
  w->next = c->watchers;
  c->watchers = w;
  pthread_mutex_unlock(&c->rmu);
}

void resil__http_client_unwatch(resil_http_client *c, http_watch *w) {
  if (!c->resolver_on) return;
  pthread_mutex_lock(&c->rmu);
  http_watch **pp = &c->watchers;
  while (*pp && *pp != w) pp = &(*pp)->next;
  if (*pp) *pp = w->next;
  pthread_mutex_unlock(&c->rmu);
}

static void resolver_stop(resil_http_client *c) {
  if (!c->resolver_on) return;
  pthread_mutex_lock(&c->rmu);
  c->rstop = 1;
  pthread_cond_signal(&c->rcv);
  pthread_mutex_unlock(&c->rmu);
  pthread_join(c->resolver, NULL);
  pthread_cond_destroy(&c->rcv);
  pthread_mutex_destroy(&c->rmu);
  c->resolver_on = 0;
}

static void client_destroy(resil_http_client *c) {
  const resil_allocator *a = c->t.alloc;
  resolver_stop(c);
  for (uint32_t i = 0; c->slots && i < c->nslots; i++)
    resil__http_slot_cleanup(c, &c->slots[i]);
  resil__free(a, c->slots);
  resil__free(a, c->free_stack);
  for (size_t i = 0; c->eps && i < c->neps; i++) endpoint_free(a, &c->eps[i]);
  resil__free(a, c->eps);
  for (uint32_t i = 0; c->t.origins && i < c->t.norigins; i++) resil__free(a, c->t.origins[i]);
  resil__free(a, c->t.origins);
  resil__free(a, c->origin_inuse);
  for (uint32_t i = 0; c->groups && i < c->ngroups; i++) {
    resil__http_group_free(a, c->groups[i]);
    resil__free(a, c->groups[i]);
  }
  resil__free(a, c->groups);
  resil__free(a, c->all);
  resil__free(a, c->origin_group);
  resil__free(a, c->t.interceptors);
  resil__free(a, c->name);
  resil__free(a, c->t.idem_header);
  resil__free(a, c->t.dl_header);
  resil__free(a, c->t.proxy);
  resil__free(a, c->t.ca_file);
  resil__free(a, c->t.user_agent);
  resil__free(a, c->t.ua_line);
  resil__free(a, c->t.ae_line);
  pthread_cond_destroy(&c->cv);
  pthread_mutex_destroy(&c->mu);
  int inited = c->curl_inited;
  c->magic = RESIL_MAGIC_DEAD;
  resil__free(a, c);
  if (inited) curl_global_cleanup();
}

void resil__http_client_ref(resil_http_client *c) {
  atomic_fetch_add_explicit(&c->refs, 1, memory_order_relaxed);
}

void resil__http_client_unref(resil_http_client *c) {
  if (atomic_fetch_sub_explicit(&c->refs, 1, memory_order_acq_rel) == 1)
    client_destroy(c);
}

#define RECOVER_DAY_NS (INT64_C(86400) * RESIL_NS_PER_S)
/* The classes that may have executed: the only ones a status query can
 * tell anything about. */
#define RECOVER_QUERY_CLASSES                                                  \
  (RESIL_CLASS_BIT(RESIL_CLASS_UNKNOWN) | RESIL_CLASS_BIT(RESIL_CLASS_SERVER_ERROR) | \
   RESIL_CLASSES_THROTTLED)

/* ---- the recovery flow's settings (DESIGN §6; the flow: recover.c) -------- */

static resil_status recovery_check(const resil_http_client_config *cfg, resil_error *err) {
  resil_status st;
  if (cfg->status_query_classes & ~(uint32_t)RECOVER_QUERY_CLASSES)
    return resil__err(err, RESIL_EINVAL, "status_query_classes",
                      "may hold only the UNKNOWN, SERVER_ERROR and THROTTLED bits "
                      "(0x%x), got 0x%x",
                      (unsigned)RECOVER_QUERY_CLASSES, (unsigned)cfg->status_query_classes);
  if ((st = resil__check_range(err, "status_poll_ns", cfg->status_poll_ns, RESIL_NS_PER_MS,
                               RECOVER_DAY_NS)))
    return st;
  return resil__check_range(err, "pending_wait_max_ns", cfg->pending_wait_max_ns, 0,
                            RECOVER_DAY_NS);
}

/* 1 when template t has a {key} placeholder. */
static int tpl_has_key(const http_tpl *t) {
  for (uint32_t i = 0; t->src && i < t->nparts; i++) {
    const http_tpl_part *p = &t->parts[i];
    if (p->is_var && p->len == 3 && memcmp(t->src + p->off, "key", 3) == 0) return 1;
  }
  return 0;
}

static resil_status recovery_setup(resil_http_client *c, const resil_http_client_config *cfg,
                                   resil_error *err) {
  c->status_query_classes = cfg->status_query_classes;
  c->status_poll_ns = cfg->status_poll_ns;
  c->pending_wait_max_ns = cfg->pending_wait_max_ns;
  atomic_init(&c->st_status_queries, 0);
  atomic_init(&c->st_status_committed, 0);
  atomic_init(&c->st_status_pending, 0);
  atomic_init(&c->st_status_unknown, 0);
  atomic_init(&c->st_recovered, 0);
  for (size_t i = 0; i < c->neps; i++) c->eps[i].status_ep = -1;
  for (size_t i = 0; i < c->neps; i++) {
    const char *sn = c->eps[i].status_name;
    if (!sn) continue;
    char field[48];
    snprintf(field, sizeof field, "endpoints[%zu].status_endpoint", i);
    const char *en = c->eps[i].name;
    size_t j = 0;
    while (j < c->neps && strcmp(c->eps[j].name, sn) != 0) j++;
    if (j == c->neps)
      return resil__err(err, RESIL_EINVAL, field,
                        "endpoint '%s': status endpoint '%.60s' is not in the table", en, sn);
    if (j == i)
      return resil__err(err, RESIL_EINVAL, field,
                        "endpoint '%s': status endpoint must be another endpoint", en);
    const http_endpoint *s = &c->eps[j];
    /* A status query is asked again and again: only a safe method fits. */
    if (s->method != RESIL_HTTP_GET)
      return resil__err(err, RESIL_EINVAL, field,
                        "endpoint '%s': status endpoint '%s' must use GET", en, s->name);
    if (!tpl_has_key(&s->path) && !tpl_has_key(&s->query))
      return resil__err(err, RESIL_EINVAL, field,
                        "endpoint '%s': status endpoint '%s' needs a {key} placeholder in "
                        "its path or query",
                        en, s->name);
    c->eps[i].status_ep = (int32_t)j;
  }
  return RESIL_OK;
}

#define EJECT_CLASSES_ALLOWED                                                  \
  (RESIL_HTTP_EJECT_CLASSES_DEFAULT)

static resil_status check_instance_settings(const resil_http_client_config *cfg,
                                            resil_error *err) {
  resil_status st;
  if ((st = resil__check_range(err, "resolve_instances", cfg->resolve_instances, 0, 1))) return st;
  if ((st = resil__check_ns(err, "resolve_interval_ns", cfg->resolve_interval_ns,
                               RESIL_NS_PER_S, HTTP_DAY_NS)))
    return st;
  if ((st = resil__check_range(err, "balance", (int64_t)cfg->balance, 0,
                               RESIL_HTTP_BALANCE_ROUND_ROBIN)))
    return st;
  if ((st = resil__check_range(err, "eject_consecutive", cfg->eject_consecutive, 0, 1000)))
    return st;
  if (cfg->eject_classes & ~(uint32_t)EJECT_CLASSES_ALLOWED)
    return resil__err(err, RESIL_EINVAL, "eject_classes",
                      "may hold only the NOT_SENT, UNKNOWN, SERVER_ERROR, HTTP_408, HTTP_425 and "
                      "HTTP_429 bits (0x%x), got 0x%x",
                      (unsigned)EJECT_CLASSES_ALLOWED, (unsigned)cfg->eject_classes);
  if ((st = resil__check_ns(err, "eject_base_ns", cfg->eject_base_ns, RESIL_NS_PER_MS,
                               HTTP_DAY_NS)))
    return st;
  if (cfg->eject_max_ns < cfg->eject_base_ns || cfg->eject_max_ns > HTTP_DAY_NS)
    return resil__err_range_ns(err, "eject_max_ns", cfg->eject_base_ns, HTTP_DAY_NS,
                               cfg->eject_max_ns, "eject_base_ns..1 day");
  if ((st = resil__check_range(err, "eject_max_percent", cfg->eject_max_percent, 0, 100)))
    return st;
  if (cfg->instance_ramp_ns > HTTP_DAY_NS)
    return resil__err_range_ns(err, "instance_ramp_ns", 0, HTTP_DAY_NS, cfg->instance_ramp_ns,
                               "0 (no ramp) or 1 ms..1 day");
  return resil__ramp_check(err, "instance_ramp_ns", cfg->instance_ramp_ns,
                           "instance_ramp_min_percent", cfg->instance_ramp_min_percent,
                           "instance_ramp_aggression", cfg->instance_ramp_aggression);
}

static resil_status check_config(const resil_http_client_config *cfg,
                                 resil_error *err) {
  resil_status st;
  if (cfg->base_url && cfg->instances)
    return resil__err(err, RESIL_EINVAL, "instances",
                      "give base_url or instances, not both");
  if (!cfg->base_url && !cfg->instances)
    return resil__err(err, RESIL_EINVAL, "base_url", "is required (or instances)");
  if (cfg->instances && (st = check_instances(cfg->instances, "instances", err))) return st;
  if ((st = check_instance_settings(cfg, err))) return st;
  if (cfg->resolve_instances && !cfg->base_url)
    return resil__err(err, RESIL_EINVAL, "resolve_instances",
                      "resolves base_url's host: give base_url, not instances");
  char key[300];
  const char *why = parse_base(cfg->base_url ? cfg->base_url : cfg->instances[0], key, sizeof key);
  if (why) return resil__err(err, RESIL_EINVAL, "base_url", "%s", why);
  if (!cfg->endpoints && cfg->endpoint_count)
    return resil__err(err, RESIL_EINVAL, "endpoints", "is NULL with endpoint_count %zu",
                      cfg->endpoint_count);
  if ((st = resil__check_range(err, "endpoint_count", (int64_t)cfg->endpoint_count, 1,
                               HTTP_MAX_ENDPOINTS)))
    return st;
  if ((st = resil__check_range(err, "max_connections", cfg->max_connections, 1, HTTP_MAX_SLOTS)))
    return st;
  if (cfg->max_connections_per_host < 1 ||
      cfg->max_connections_per_host > cfg->max_connections) {
    char what[48];
    snprintf(what, sizeof what, "1..max_connections (%u)", cfg->max_connections);
    return resil__err_range(err, "max_connections_per_host", 1, cfg->max_connections,
                            cfg->max_connections_per_host, what);
  }
  if ((st = resil__check_range(err, "lease_timeout_ns", cfg->lease_timeout_ns, 0, HTTP_DAY_NS)))
    return st;
  if ((st = resil__check_range(err, "connect_timeout_ns", cfg->connect_timeout_ns,
                               RESIL_NS_PER_MS, HTTP_DAY_NS)))
    return st;
  if ((st = resil__check_range(err, "response_timeout_ns", cfg->response_timeout_ns,
                               RESIL_NS_PER_MS, HTTP_DAY_NS)))
    return st;
  if ((st = resil__check_range(err, "follow_redirects", cfg->follow_redirects, 0, 1))) return st;
  if ((st = resil__check_range(err, "max_redirects", cfg->max_redirects, 0, 50))) return st;
  if ((st = resil__check_range(err, "request_gzip", cfg->request_gzip, 0, 1))) return st;
  if ((st = resil__check_range(err, "gzip_min_bytes", (int64_t)cfg->gzip_min_bytes, 0,
                               (int64_t)HTTP_GIB)))
    return st;
  if ((st = resil__check_range(err, "response_decompression", cfg->response_decompression, 0, 1)))
    return st;
  if ((st = resil__check_range(err, "resend_stale", (int64_t)cfg->resend_stale, 0, 1))) return st;
  if (!cfg->idempotency_header || !cfg->idempotency_header[0])
    return resil__err(err, RESIL_EINVAL, "idempotency_header", "must be a header name");
  for (const char *p = cfg->idempotency_header; *p; p++)
    if (!resil__http_tchar((unsigned char)*p))
      return resil__err(err, RESIL_EINVAL, "idempotency_header",
                        "must be an HTTP token, got \"%.40s\"", cfg->idempotency_header);
  if (resil__http_reserved_header(cfg->idempotency_header, strlen(cfg->idempotency_header)))
    return resil__err(err, RESIL_EINVAL, "idempotency_header",
                      "\"%.40s\" is a header libcurl or libresil set (Host, Content-Length, "
                      "Transfer-Encoding, Expect, Content-Encoding, Connection)",
                      cfg->idempotency_header);
  if ((st = resil__check_range(err, "deadline_propagation", cfg->deadline_propagation, 0, 1)))
    return st;
  if (cfg->deadline_propagation) {
    const char *dh = cfg->deadline_header;
    size_t dl = dh ? strlen(dh) : 0;
    if (dl == 0 || dl > HTTP_DL_HEADER_MAX)
      return resil__err(err, RESIL_EINVAL, "deadline_header",
                        "must be a header name of 1..%d characters", HTTP_DL_HEADER_MAX);
    for (const char *p = dh; *p; p++)
      if (!resil__http_tchar((unsigned char)*p))
        return resil__err(err, RESIL_EINVAL, "deadline_header",
                          "must be an HTTP token, got \"%.40s\"", dh);
    if (resil__http_reserved_header(dh, dl) ||
        resil__http_ieq(dh, dl, cfg->idempotency_header, strlen(cfg->idempotency_header)))
      return resil__err(err, RESIL_EINVAL, "deadline_header",
                        "\"%.40s\" is the idempotency header or a header libcurl or libresil "
                        "set (Host, Content-Length, Transfer-Encoding, Expect, "
                        "Content-Encoding, Connection)",
                        dh);
  }
  /* Sent as a header line as it is: validated as endpoint header values are. */
  for (const char *p = cfg->user_agent; p && *p; p++)
    if (!resil__http_value_char((unsigned char)*p))
      return resil__err(err, RESIL_EINVAL, "user_agent",
                        "control or non-ASCII character (byte 0x%02x) at offset %zu: a header "
                        "value holds visible ASCII, spaces and tabs only",
                        (unsigned char)*p, (size_t)(p - cfg->user_agent));
  if ((st = resil__check_range(err, "max_response_bytes", (int64_t)cfg->max_response_bytes, 1,
                               (int64_t)HTTP_GIB)))
    return st;
  if ((st = resil__check_range(err, "interceptor_count", (int64_t)cfg->interceptor_count, 0,
                               HTTP_MAX_INTERCEPTORS)))
    return st;
  for (size_t i = 0; i < cfg->interceptor_count; i++)
    if (!cfg->interceptors || !cfg->interceptors[i].fn)
      return resil__err(err, RESIL_EINVAL, "interceptors", "interceptors[%zu].fn is NULL", i);
  if ((st = resil__check_range(err, "log_level", (int64_t)cfg->log_level, 0,
                               RESIL_HTTP_LOG_METADATA)))
    return st;
  if (cfg->log_level != RESIL_HTTP_LOG_NONE && !cfg->log_fn)
    return resil__err(err, RESIL_EINVAL, "log_fn", "is required when log_level is not NONE");
  if ((st = resil__check_range(err, "verify_peer", cfg->verify_peer, 0, 1))) return st;
  return recovery_check(cfg, err);
}

static const char *const default_gzip_types[] = {"application/json", "application/xml",
                                                 "text/xml", NULL};

resil_status resil_http_client_new(const resil_http_client_config *ucfg,
                                   resil_http_client **out, resil_error *err) {
  if (!ucfg || !out)
    return resil__err(err, RESIL_EINVAL, NULL, "cfg and out must not be NULL");
  /* Only the full local copy is read from here on. */
  resil_http_client_config lcfg;
  config_defaults(&lcfg);
  resil_status st = resil__sized_in(&lcfg, sizeof lcfg, ucfg, CONFIG_MIN_SIZE,
                                    "resil_http_client_config",
                                    "resil_http_client_config_init", err);
  if (st != RESIL_OK) return st;
  const resil_http_client_config *cfg = &lcfg;
  st = check_config(cfg, err);
  if (st != RESIL_OK) return st;
  const resil_allocator *a = cfg->alloc;
  resil_http_client *c = resil__calloc(a, sizeof *c);
  if (!c) return resil__err(err, RESIL_ENOMEM, NULL, "out of memory");
  c->t.alloc = a;
  c->t.clock = resil__clock(cfg->clock);
  atomic_init(&c->refs, 1);
  atomic_init(&c->user_freed, 0);
  if (pthread_mutex_init(&c->mu, NULL) != 0) {
    resil__free(a, c);
    return resil__err(err, RESIL_ESYS, NULL, "pthread_mutex_init failed");
  }
  pthread_condattr_t ca;
  int cv_ok = pthread_condattr_init(&ca) == 0;
  if (cv_ok) {
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    cv_ok = pthread_cond_init(&c->cv, &ca) == 0;
    pthread_condattr_destroy(&ca);
  }
  if (!cv_ok) {
    pthread_mutex_destroy(&c->mu);
    resil__free(a, c);
    return resil__err(err, RESIL_ESYS, NULL, "pthread_cond_init failed");
  }
  /* From here on client_destroy() cleans up whatever was made. */
  int ok = 1;
  const char *nm = cfg->name ? cfg->name : "http";
  c->name = dup_n(a, nm, strlen(nm));
  c->t.idem_header = dup_n(a, cfg->idempotency_header, strlen(cfg->idempotency_header));
  c->t.idem_header_len = strlen(cfg->idempotency_header);
  ok = c->name && c->t.idem_header;
  if (ok && cfg->deadline_propagation) {
    c->t.dl_header_len = strlen(cfg->deadline_header);
    ok = (c->t.dl_header = dup_n(a, cfg->deadline_header, c->t.dl_header_len)) != NULL;
  }
  if (ok && cfg->proxy) ok = (c->t.proxy = dup_n(a, cfg->proxy, strlen(cfg->proxy))) != NULL;
  if (ok && cfg->ca_file) ok = (c->t.ca_file = dup_n(a, cfg->ca_file, strlen(cfg->ca_file))) != NULL;
  if (ok) {
    char ua[64];
    const char *u = cfg->user_agent;
    if (!u) {
      snprintf(ua, sizeof ua, "libresil/%s", RESIL_VERSION_STRING);
      u = ua;
    }
    ok = (c->t.user_agent = dup_n(a, u, strlen(u))) != NULL;
    if (ok && !cfg->proxy && u[0]) {
      size_t ul = strlen(u);
      ok = (c->t.ua_line = resil__alloc(a, 12 + ul + 1)) != NULL;
      if (ok) {
        memcpy(c->t.ua_line, "User-Agent: ", 12);
        memcpy(c->t.ua_line + 12, u, ul + 1);
      }
      char ae[64];
      if (ok && cfg->response_decompression && accept_encoding_line(ae, sizeof ae))
        ok = (c->t.ae_line = dup_n(a, ae, strlen(ae))) != NULL;
    }
  }
  if (ok && cfg->interceptor_count) {
    c->t.interceptors = resil__alloc(a, cfg->interceptor_count * sizeof *c->t.interceptors);
    ok = c->t.interceptors != NULL;
    if (ok) {
      memcpy(c->t.interceptors, cfg->interceptors, cfg->interceptor_count * sizeof *c->t.interceptors);
      c->t.ninterceptors = cfg->interceptor_count;
    }
  }
  c->nslots = cfg->max_connections;
  if (ok) ok = (c->slots = resil__calloc(a, c->nslots * sizeof *c->slots)) != NULL;
  if (ok) ok = (c->free_stack = resil__alloc(a, c->nslots * sizeof *c->free_stack)) != NULL;
  size_t ne = cfg->endpoint_count;
  if (ok) ok = (c->eps = resil__calloc(a, ne * sizeof *c->eps)) != NULL;
  c->origins_cap = (uint32_t)ne + 1;
  if (ok) ok = (c->t.origins = resil__calloc(a, (ne + 1) * sizeof *c->t.origins)) != NULL;
  if (!ok) {
    client_destroy(c);
    return resil__err(err, RESIL_ENOMEM, NULL, "out of memory");
  }
  for (uint32_t i = 0; i < c->nslots; i++) {
    c->slots[i].index = i;
    c->slots[i].origin = -1;
    c->slots[i].method_set = -1;
    /* The stack pops from the top: slot 0 first. */
    c->free_stack[i] = c->nslots - 1 - i;
  }
  c->nfree = c->nslots;
  c->per_host = cfg->max_connections_per_host;
  c->lease_timeout_ns = cfg->lease_timeout_ns;
  c->t.connect_timeout_ns = cfg->connect_timeout_ns;
  c->t.response_timeout_ns = cfg->response_timeout_ns;
  c->t.follow_redirects = cfg->follow_redirects;
  c->t.max_redirects = cfg->max_redirects;
  c->request_gzip = cfg->request_gzip;
  c->gzip_min_bytes = cfg->gzip_min_bytes;
  c->t.response_decompression = cfg->response_decompression;
  c->t.resend_stale = cfg->resend_stale;
  c->t.max_response_bytes = cfg->max_response_bytes;
  c->t.decoder = cfg->decoder;
  c->t.decoder_user = cfg->decoder_user;
  c->t.log_level = cfg->log_level;
  c->t.log_fn = cfg->log_fn;
  c->t.log_user = cfg->log_user;
  c->t.verify_peer = cfg->verify_peer;
  c->on_attempt = cfg->on_attempt;
  c->on_attempt_user = cfg->on_attempt_user;

  c->resolve_interval_ns = cfg->resolve_interval_ns;
  atomic_init(&c->nall, 0);
  /* The client's own origin is origin 0 even when no endpoint uses it. */
  char key[300];
  parse_base(cfg->base_url ? cfg->base_url : cfg->instances[0], key, sizeof key);
  uint32_t o0 = 0;
  st = origin_index(c, key, &o0, err);
  if (st == RESIL_OK && (cfg->instances || cfg->resolve_instances)) {
    http_group *g0 = NULL;
    st = group_new(c, cfg, cfg->base_url ? cfg->base_url : cfg->instances[0], cfg->instances,
                   cfg->resolve_instances ? cfg->base_url : NULL, &g0, err);
  }
  const char *const *gz = cfg->gzip_media_types ? cfg->gzip_media_types : default_gzip_types;
  for (size_t i = 0; st == RESIL_OK && i < ne; i++) {
    resil_http_endpoint ep;
    st = endpoint_in(cfg, i, &ep, err);
    if (st == RESIL_OK) st = compile_endpoint(c, i, &ep, gz, cfg, &c->eps[i], err);
    c->neps = i + 1;
  }
  if (st == RESIL_OK) st = recovery_setup(c, cfg, err);
  if (st == RESIL_OK) {
    c->origin_inuse = resil__calloc(a, c->t.norigins * sizeof *c->origin_inuse);
    if (!c->origin_inuse) st = resil__err(err, RESIL_ENOMEM, NULL, "out of memory");
  }
  if (st == RESIL_OK && c->ngroups) {
    /* Which origins are instances of which upstream: a listed instance's
     * own, a resolved name's reserved ones. */
    c->origin_group = resil__calloc(a, c->t.norigins * sizeof *c->origin_group);
    if (!c->origin_group) st = resil__err(err, RESIL_ENOMEM, NULL, "out of memory");
    for (uint32_t k = 0; st == RESIL_OK && k < c->ngroups; k++) {
      http_group *g = c->groups[k];
      if (g->resolve) {
        for (uint32_t o = 0; o < HTTP_MAX_INSTANCES; o++) c->origin_group[g->origin0 + o] = g;
      } else {
        for (unsigned i = 0; i < atomic_load(&g->n); i++)
          c->origin_group[g->inst[i]->origin] = g;
      }
    }
  }
  if (st == RESIL_OK) {
    /* Thread-safe in libcurl >= 7.84 and reference counted by libcurl. */
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK)
      st = resil__err(err, RESIL_ESYS, NULL, "curl_global_init failed");
    else
      c->curl_inited = 1;
  }
  /* Last: the resolver thread's first lookups run while the caller goes
   * on (this function never waits for DNS). */
  if (st == RESIL_OK) st = resolver_start(c, err);
  if (st != RESIL_OK) {
    client_destroy(c);
    return st;
  }
  for (int k = 0; k < 5; k++) atomic_init(&c->t.st_outcomes[k], 0);
  c->magic = RESIL_MAGIC_HTTP_CLIENT;
  *out = c;
  if (err) resil_error_clear(err);
  return RESIL_OK;
}

void resil_http_client_free(resil_http_client *c) {
  if (!c || c->magic != RESIL_MAGIC_HTTP_CLIENT) return;
  if (atomic_exchange(&c->user_freed, 1)) return;
  resil__http_client_unref(c);
}

const char *resil_http_client_name(const resil_http_client *c) {
  if (!c || c->magic != RESIL_MAGIC_HTTP_CLIENT) return NULL;
  return c->name;
}

resil_status resil_http_client_get_stats_sized(const resil_http_client *cc,
                                               resil_http_stats *uout, size_t n) {
  if (!cc) return RESIL_EMISUSE;
  if (!uout) return RESIL_EINVAL;
  if (cc->magic != RESIL_MAGIC_HTTP_CLIENT) return RESIL_EMISUSE;
  resil_http_client *c = (resil_http_client *)cc;
  resil_http_stats full, *out = &full;
  memset(out, 0, sizeof *out);
  out->struct_size = sizeof *out;
  out->requests = atomic_load(&c->st_requests);
  out->attempts = atomic_load(&c->t.st_attempts);
  out->requests_sent = atomic_load(&c->t.st_sent);
  out->hops = atomic_load(&c->t.st_hops);
  out->connections_opened = atomic_load(&c->t.st_conns);
  out->resends_prevented = atomic_load(&c->t.st_prevented);
  out->resends_counted = atomic_load(&c->t.st_counted);
  out->lease_timeouts = atomic_load(&c->st_lease_timeouts);
  out->decode_errors = atomic_load(&c->t.st_decode_errors);
  for (int k = 0; k < 5; k++) out->outcomes[k] = atomic_load(&c->t.st_outcomes[k]);
  out->leased = atomic_load(&c->st_leased);
  out->max_connections = c->nslots;
  out->status_queries = atomic_load(&c->st_status_queries);
  out->status_committed = atomic_load(&c->st_status_committed);
  out->status_pending = atomic_load(&c->st_status_pending);
  out->status_unknown = atomic_load(&c->st_status_unknown);
  out->recovered = atomic_load(&c->st_recovered);
  resil__sized_out(uout, n, &full, sizeof full);
  return RESIL_OK;
}

size_t resil_http_client_instance_count(const resil_http_client *c) {
  if (!c || c->magic != RESIL_MAGIC_HTTP_CLIENT) return 0;
  return atomic_load_explicit(&((resil_http_client *)c)->nall, memory_order_acquire);
}

resil_status resil_http_client_instance_stats_sized(const resil_http_client *cc, size_t idx,
                                                    resil_http_instance_stats *uout,
                                                    size_t n) {
  if (!cc) return RESIL_EMISUSE;
  if (cc->magic != RESIL_MAGIC_HTTP_CLIENT) return RESIL_EMISUSE;
  resil_http_client *c = (resil_http_client *)cc;
  if (!uout || idx >= atomic_load_explicit(&c->nall, memory_order_acquire)) return RESIL_EINVAL;
  const http_inst *i = c->all[idx];
  resil_http_instance_stats full, *out = &full;
  memset(out, 0, sizeof *out);
  out->struct_size = sizeof *out;
  snprintf(out->instance, sizeof out->instance, "%s", i->label);
  snprintf(out->upstream, sizeof out->upstream, "%s", i->g->name);
  out->upstream_index = i->g->gindex;
  int st = atomic_load(&i->state);
  out->state = (resil_http_instance_state)st;
  out->in_flight = atomic_load(&i->in_flight);
  out->consecutive = atomic_load(&i->consecutive);
  out->ejections = atomic_load(&i->ejections);
  out->ejections_skipped = atomic_load(&i->skipped);
  out->chosen = atomic_load(&i->chosen);
  for (int k = 0; k < 5; k++) out->outcomes[k] = atomic_load(&i->outcomes[k]);
  if (st == RESIL_HTTP_INSTANCE_OUT) {
    int64_t left = atomic_load(&i->out_until) - resil__http_mono_ns();
    out->out_remaining_ns = left > 0 ? left : 0;
  }
  out->ramp_share = resil__http_inst_share(i);
  resil__sized_out(uout, n, &full, sizeof full);
  return RESIL_OK;
}

int resil__http_instance_labels(const resil_http_client *cc, size_t idx, char *inst,
                                size_t ni, char *up, size_t nu) {
  resil_http_client *c = (resil_http_client *)cc;
  if (idx >= atomic_load_explicit(&c->nall, memory_order_acquire)) return -1;
  const http_inst *i = c->all[idx];
  const char *at = i->g->resolve ? strrchr(i->label, '@') : NULL;
  size_t bl = at ? (size_t)(at - i->label) : strlen(i->label);
  resil__redact_excerpt(inst, ni, i->label, bl, RESIL__REDACT_URL, NULL);
  if (at) {
    size_t used = strlen(inst);
    snprintf(inst + used, ni - used, "%s", at);
  }
  resil__redact_excerpt(up, nu, i->g->name, strlen(i->g->name), RESIL__REDACT_URL, NULL);
  return 0;
}

const http_endpoint *resil__http_find_endpoint(const resil_http_client *c,
                                               const char *name) {
  for (size_t i = 0; i < c->neps; i++)
    if (strcmp(c->eps[i].name, name) == 0) return &c->eps[i];
  return NULL;
}

/* ---- the pool ----------------------------------------------------------------- */

static void add_ns(struct timespec *ts, int64_t t) {
  ts->tv_sec = (time_t)(t / RESIL_NS_PER_S);
  ts->tv_nsec = (long)(t % RESIL_NS_PER_S);
}

http_lease_rc resil__http_pool_lease(resil_http_client *c, uint32_t origin,
                                     int64_t timeout_ns, resil_cancel *cancel,
                                     http_slot **out, int *waited) {
  int64_t until = 0;
  if (waited) *waited = 0;
  pthread_mutex_lock(&c->mu);
  uint32_t cap = resil__http_origin_cap(c, origin);
  while (c->nfree == 0 || c->origin_inuse[origin] >= cap) {
    if (waited) *waited = 1;
    if (cancel && resil_cancel_is_set(cancel)) {
      pthread_mutex_unlock(&c->mu);
      return HTTP_LEASE_CANCELLED;
    }
    int64_t now = resil__http_mono_ns();
    if (until == 0) until = resil__sat_add(now, timeout_ns);
    if (now >= until) {
      pthread_mutex_unlock(&c->mu);
      return HTTP_LEASE_TIMEOUT;
    }
    /* A cancellation token cannot wake a condition variable, so the wait
     * is sliced to notice it within 10 ms. */
    int64_t wake = until;
    if (cancel && wake - now > 10 * RESIL_NS_PER_MS) wake = now + 10 * RESIL_NS_PER_MS;
    struct timespec ts;
    add_ns(&ts, wake);
    c->waiters++;
    pthread_cond_timedwait(&c->cv, &c->mu, &ts);
    c->waiters--;
  }
  /* Woken with a connection free: the call may have been decided (a
   * hedge's primary answered, its losers cancelled) while this one
   * waited. Nothing is sent then. */
  if (until != 0 && cancel && resil_cancel_is_set(cancel)) {
    pthread_mutex_unlock(&c->mu);
    return HTTP_LEASE_CANCELLED;
  }
  /* Prefer a slot whose idle connection goes to this origin (H8: it is
   * the one to reuse), and among those the one this thread released last:
   * handing a thread back its own connection keeps the easy handle, its
   * buffers and the socket's state on the CPU that used them last (with 8
   * callers on 2 CPUs, letting connections hop between threads cost about
   * 10 us of CPU per request). Then the most recently used one without a
   * connection, and when every free slot holds one to another origin, the
   * least recently used: with several origins (the instances of an
   * upstream, instances.c) taking the most recently used would make one
   * slot reconnect at each change of origin while the others' connections
   * idle. */
  pthread_t self = pthread_self();
  uint32_t pick = 0;
  int found_origin = 0, found_empty = 0;
  for (uint32_t k = c->nfree; k-- > 0;) {
    const http_slot *sl = &c->slots[c->free_stack[k]];
    if (sl->origin != (int32_t)origin) {
      if (!found_origin && !found_empty && sl->origin < 0) {
        pick = k;
        found_empty = 1;
      }
      continue;
    }
    if (sl->has_last_thread && pthread_equal(sl->last_thread, self)) {
      pick = k;
      break;
    }
    if (!found_origin) {
      pick = k;
      found_origin = 1;
    }
  }
  uint32_t idx = c->free_stack[pick];
  memmove(&c->free_stack[pick], &c->free_stack[pick + 1],
          (c->nfree - pick - 1) * sizeof *c->free_stack);
  c->nfree--;
  c->origin_inuse[origin]++;
  atomic_fetch_add_explicit(&c->st_leased, 1, memory_order_relaxed);
  pthread_mutex_unlock(&c->mu);
  *out = &c->slots[idx];
  return HTTP_LEASE_OK;
}

void resil__http_pool_release(resil_http_client *c, http_slot *s,
                              uint32_t origin) {
  pthread_mutex_lock(&c->mu);
  atomic_fetch_sub_explicit(&c->st_leased, 1, memory_order_relaxed);
  s->last_thread = pthread_self();
  s->has_last_thread = 1;
  c->free_stack[c->nfree++] = s->index;
  c->origin_inuse[origin]--;
  /* Waiters may wait for different origins: wake them all. */
  if (c->waiters) pthread_cond_broadcast(&c->cv);
  pthread_mutex_unlock(&c->mu);
}
