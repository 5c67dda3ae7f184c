/* resil_idem_mhd: idempotent operations served over libmicrohttpd on top of
 * the operation store (DESIGN §6). The store orders concurrent requests
 * with one key and binds the effect to the terminal state (execute and
 * recover run the effect in the transaction that writes it); this file
 * only maps the store's answers to HTTP and back. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/internal.h"
#include "resil/idem_mhd.h"

#define IDEM_MAGIC 0x49444d48u     /* "IDMH" */
#define IDEM_REQ_MAGIC 0x49445251u /* "IDRQ": per-request body state */

#define MAX_KEY_LEN 255
#define MAX_HEADER_NAME 63
#define MAX_BODY_LIMIT ((size_t)1 << 30)
#define MAX_RECOVER_OPS 100000u
#define DAY_NS (INT64_C(86400) * RESIL_NS_PER_S)

typedef struct idem_counters {
  atomic_uint_fast64_t requests, executed, replayed, in_progress, conflicts,
      rejected, handler_failed, store_errors, dropped, status_queries,
      recovered, damaged, deadline_refused;
} idem_counters;

struct resil_idem_mhd {
  unsigned magic;
  void (*log)(void *user, const char *line);
  void *log_user;
  char *name;
  char *key_header;
  char *status_prefix;
  size_t status_prefix_len;
  char *recover_path;
  resil_store *store;
  resil_idem_handler_fn handler;
  void *user;
  int require_key;
  uint32_t retry_after_s;
  size_t max_body_bytes;
  int64_t recover_older_than_ns;
  uint32_t recover_max_ops;
  resil_idem_pending_fn on_pending;
  resil_idem_committed_fn on_committed;
  resil_idem_status_fn status_extra;
  resil_deadline_mhd *deadline;
  const resil_allocator *alloc;
  idem_counters n;
};

/* Memory handed out by resil_idem_call_alloc(): kept until
 * resil_store_execute() or resil_store_recover() returns, because the store
 * copies the responses only then. */
typedef struct call_block {
  struct call_block *next;
  max_align_t data[];
} call_block;

struct resil_idem_call_priv {
  resil_idem_mhd *h;
  call_block *blocks;
  int ran;                      /* the handler was called */
  int pending_told;             /* on_pending was called */
  resil_status handler_status;  /* what it returned the last time */
};

/* Per-request state of resil_idem_mhd_access(). */
typedef struct idem_req {
  unsigned magic;
  char *body;
  size_t len, cap;
  int too_large;
  /* The request's context, its deadline read on the first call (when the
   * helper has a deadline helper and the request is an operation). */
  int has_ctx;
  resil_ctx ctx;
} idem_req;

static void bump(atomic_uint_fast64_t *c) {
  atomic_fetch_add_explicit(c, 1, memory_order_relaxed);
}

static int valid(const resil_idem_mhd *h) {
  return h && h->magic == IDEM_MAGIC;
}

/* ---- configuration ------------------------------------------------------ */

/* The 0.1 layout ends with alloc (DESIGN §11). */
#define CONFIG_MIN_SIZE                                                        \
  (offsetof(resil_idem_mhd_config, alloc) + sizeof(const resil_allocator *))

static void config_defaults(resil_idem_mhd_config *cfg) {
  memset(cfg, 0, sizeof *cfg);
  cfg->struct_size = sizeof *cfg;
  cfg->name = "idem";
  cfg->key_header = "Idempotency-Key";
  cfg->require_key = 1;
  cfg->retry_after_s = 1;
  cfg->max_body_bytes = (size_t)1 << 20;
  cfg->status_prefix = "/operations/";
  cfg->recover_path = NULL;
  cfg->recover_older_than_ns = 0;
  cfg->recover_max_ops = 100;
}

void resil_idem_mhd_config_init_sized(resil_idem_mhd_config *cfg,
                                      size_t struct_size) {
  if (!cfg) return;
  resil_idem_mhd_config full;
  config_defaults(&full);
  resil__sized_out(cfg, struct_size, &full, sizeof full);
}

/* RFC 9110 token characters. */
static int is_tchar(unsigned char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
         (c >= '0' && c <= '9') || (c && strchr("!#$%&'*+-.^_`|~", c));
}

static int valid_key(const char *k) {
  size_t n = 0;
  for (; k[n]; n++) {
    unsigned char c = (unsigned char)k[n];
    if (c < 0x21 || c > 0x7e || n >= MAX_KEY_LEN) return 0;
  }
  return n > 0;
}

/* A path for a route: '/' then visible ASCII, 1..255 characters. */
static int valid_path(const char *p) {
  if (p[0] != '/') return 0;
  size_t n = 0;
  for (; p[n]; n++)
    if ((unsigned char)p[n] < 0x21 || (unsigned char)p[n] > 0x7e || n >= 255)
      return 0;
  return 1;
}

static void free_strings(resil_idem_mhd *h) {
  resil__free(h->alloc, h->name);
  resil__free(h->alloc, h->key_header);
  resil__free(h->alloc, h->status_prefix);
  resil__free(h->alloc, h->recover_path);
}

static resil_status check_config(const resil_idem_mhd_config *cfg,
                                 resil_error *err) {
  resil_status st;
  if (!cfg->store)
    return resil__err(err, RESIL_EINVAL, "store", "must not be NULL");
  if (!cfg->handler)
    return resil__err(err, RESIL_EINVAL, "handler", "must not be NULL");
  const char *kh = cfg->key_header;
  if (!kh || !*kh || strlen(kh) > MAX_HEADER_NAME)
    return resil__err(err, RESIL_EINVAL, "key_header",
                      "must be an HTTP token of 1..%d characters",
                      MAX_HEADER_NAME);
  for (const char *p = kh; *p; p++)
    if (!is_tchar((unsigned char)*p))
      return resil__err(err, RESIL_EINVAL, "key_header",
                        "must be an HTTP token, got \"%.63s\"", kh);
  if ((st = resil__check_range(err, "require_key", cfg->require_key, 0, 1)))
    return st;
  if ((st = resil__check_range(err, "retry_after_s", cfg->retry_after_s, 0,
                               86400)))
    return st;
  if ((st = resil__check_range(err, "max_body_bytes",
                               (int64_t)cfg->max_body_bytes, 0,
                               (int64_t)MAX_BODY_LIMIT)))
    return st;
  if (cfg->status_prefix && !valid_path(cfg->status_prefix))
    return resil__err(err, RESIL_EINVAL, "status_prefix",
                      "must start with '/' and be 1..255 visible ASCII "
                      "characters");
  if (cfg->recover_path && !valid_path(cfg->recover_path))
    return resil__err(err, RESIL_EINVAL, "recover_path",
                      "must start with '/' and be 1..255 visible ASCII "
                      "characters");
  if ((st = resil__check_ns(err, "recover_older_than_ns",
                            cfg->recover_older_than_ns, 0, DAY_NS)))
    return st;
  if ((st = resil__check_range(err, "recover_max_ops", cfg->recover_max_ops, 1,
                               MAX_RECOVER_OPS)))
    return st;
  return RESIL_OK;
}

resil_status resil_idem_mhd_new(const resil_idem_mhd_config *ucfg,
                                resil_idem_mhd **out, resil_error *err) {
  if (!ucfg) return resil__err(err, RESIL_EINVAL, "cfg", "must not be NULL");
  if (!out) return resil__err(err, RESIL_EINVAL, "out", "must not be NULL");
  resil_idem_mhd_config full;
  config_defaults(&full);
  resil_status st = resil__sized_in(&full, sizeof full, ucfg, CONFIG_MIN_SIZE,
                                    "resil_idem_mhd_config",
                                    "resil_idem_mhd_config_init", err);
  if (st != RESIL_OK) return st;
  const resil_idem_mhd_config *cfg = &full;
  st = check_config(cfg, err);
  if (st != RESIL_OK) return st;
  resil_idem_mhd *h = resil__calloc(cfg->alloc, sizeof *h);
  if (!h) return resil__err(err, RESIL_ENOMEM, NULL, "out of memory");
  h->alloc = cfg->alloc;
  int ok1, ok2, ok3, ok4;
  h->name = resil__strdup(h->alloc, cfg->name ? cfg->name : "idem", &ok1);
  h->key_header = resil__strdup(h->alloc, cfg->key_header, &ok2);
  h->status_prefix = resil__strdup(h->alloc, cfg->status_prefix, &ok3);
  h->recover_path = resil__strdup(h->alloc, cfg->recover_path, &ok4);
  if (!ok1 || !ok2 || !ok3 || !ok4) {
    free_strings(h);
    resil__free(h->alloc, h);
    return resil__err(err, RESIL_ENOMEM, NULL, "out of memory");
  }
  h->status_prefix_len = h->status_prefix ? strlen(h->status_prefix) : 0;
  h->store = cfg->store;
  h->handler = cfg->handler;
  h->user = cfg->user;
  h->require_key = cfg->require_key;
  h->retry_after_s = cfg->retry_after_s;
  h->max_body_bytes = cfg->max_body_bytes;
  h->recover_older_than_ns = cfg->recover_older_than_ns;
  h->recover_max_ops = cfg->recover_max_ops;
  h->on_pending = cfg->on_pending;
  h->on_committed = cfg->on_committed;
  h->status_extra = cfg->status_extra;
  h->log = cfg->log;
  h->log_user = cfg->log_user;
  h->deadline = cfg->deadline;
  h->magic = IDEM_MAGIC;
  *out = h;
  return RESIL_OK;
}

void resil_idem_mhd_free(resil_idem_mhd *h) {
  if (!valid(h)) return;
  h->magic = RESIL_MAGIC_DEAD;
  free_strings(h);
  resil__free(h->alloc, h);
}

const char *resil_idem_mhd_name(const resil_idem_mhd *h) {
  return valid(h) ? h->name : NULL;
}

resil_status resil_idem_mhd_get_stats_sized(const resil_idem_mhd *h,
                                            resil_idem_mhd_stats *uout,
                                            size_t struct_size) {
  if (!valid(h)) return RESIL_EMISUSE;
  if (!uout || struct_size < sizeof(size_t)) return RESIL_EINVAL;
  resil_idem_mhd_stats full;
  memset(&full, 0, sizeof full);
  full.struct_size = sizeof full;
  resil_idem_mhd_stats *out = &full;
  const idem_counters *n = &h->n;
  out->requests = atomic_load(&n->requests);
  out->executed = atomic_load(&n->executed);
  out->replayed = atomic_load(&n->replayed);
  out->in_progress = atomic_load(&n->in_progress);
  out->conflicts = atomic_load(&n->conflicts);
  out->rejected = atomic_load(&n->rejected);
  out->handler_failed = atomic_load(&n->handler_failed);
  out->store_errors = atomic_load(&n->store_errors);
  out->dropped = atomic_load(&n->dropped);
  out->status_queries = atomic_load(&n->status_queries);
  out->recovered = atomic_load(&n->recovered);
  out->damaged = atomic_load(&n->damaged);
  out->deadline_refused = atomic_load(&n->deadline_refused);
  resil__sized_out(uout, struct_size, &full, sizeof full);
  return RESIL_OK;
}

/* ---- a small JSON writer --------------------------------------------------
 * The store library does not link a JSON library; the helper's answers are
 * a handful of flat objects. */

typedef struct jbuf {
  const resil_allocator *a;
  char *p;
  size_t len, cap;
  int oom;
} jbuf;

static void jb_put(jbuf *b, const void *s, size_t n) {
  if (b->oom) return;
  if (b->len + n + 1 > b->cap) {
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + n + 1) cap *= 2;
    char *p = resil__alloc(b->a, cap);
    if (!p) {
      b->oom = 1;
      return;
    }
    if (b->p) memcpy(p, b->p, b->len);
    resil__free(b->a, b->p);
    b->p = p;
    b->cap = cap;
  }
  memcpy(b->p + b->len, s, n);
  b->len += n;
  b->p[b->len] = '\0';
}

static void jb_raw(jbuf *b, const char *s) { jb_put(b, s, strlen(s)); }

static void jb_fmt(jbuf *b, const char *fmt, ...) RESIL_PRINTF(2, 3);
static void jb_fmt(jbuf *b, const char *fmt, ...) {
  char tmp[160];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
  va_end(ap);
  if (n > 0) jb_put(b, tmp, (size_t)n < sizeof tmp ? (size_t)n : sizeof tmp - 1);
}

/* A JSON string of n bytes that are valid UTF-8 (checked by the caller for
 * bodies; keys and messages are ASCII). */
static void jb_str(jbuf *b, const char *s, size_t n) {
  jb_put(b, "\"", 1);
  size_t run = 0;
  for (size_t i = 0; i < n; i++) {
    unsigned char c = (unsigned char)s[i];
    if (c >= 0x20 && c != '"' && c != '\\') continue;
    jb_put(b, s + run, i - run);
    run = i + 1;
    if (c == '"' || c == '\\') {
      char e[2] = {'\\', (char)c};
      jb_put(b, e, 2);
    } else {
      jb_fmt(b, "\\u%04x", c);
    }
  }
  jb_put(b, s + run, n - run);
  jb_put(b, "\"", 1);
}

static void jb_member(jbuf *b, const char *name, const char *value) {
  if (b->len > 1) jb_raw(b, ",");
  jb_str(b, name, strlen(name));
  jb_raw(b, ":");
  jb_str(b, value, strlen(value));
}


static void jb_base64(jbuf *b, const unsigned char *s, size_t n) {
  static const char tab[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  jb_put(b, "\"", 1);
  for (size_t i = 0; i < n; i += 3) {
    uint32_t v = (uint32_t)s[i] << 16;
    if (i + 1 < n) v |= (uint32_t)s[i + 1] << 8;
    if (i + 2 < n) v |= s[i + 2];
    char q[4] = {tab[(v >> 18) & 63], tab[(v >> 12) & 63],
                 i + 1 < n ? tab[(v >> 6) & 63] : '=',
                 i + 2 < n ? tab[v & 63] : '='};
    jb_put(b, q, 4);
  }
  jb_put(b, "\"", 1);
}

/* ---- responses ----------------------------------------------------------- */

/* Adds the "Name: value" lines of hdrs (hlen bytes, CRLF or LF separated)
 * to r. MHD_NO when out of memory. */
static enum MHD_Result add_stored_headers(const resil_allocator *a,
                                          struct MHD_Response *r,
                                          const char *hdrs, size_t hlen) {
  size_t i = 0;
  while (hdrs && i < hlen) {
    size_t end = i;
    while (end < hlen && hdrs[end] != '\n') end++;
    size_t stop = end;
    if (stop > i && hdrs[stop - 1] == '\r') stop--;
    const char *colon = memchr(hdrs + i, ':', stop - i);
    if (colon && colon > hdrs + i) {
      /* libmicrohttpd wants NUL-terminated name and value. */
      char small[512];
      size_t nl = (size_t)(colon - (hdrs + i));
      const char *v = colon + 1;
      while (v < hdrs + stop && (*v == ' ' || *v == '\t')) v++;
      size_t vl = (size_t)(hdrs + stop - v);
      char *line = nl + vl + 2 <= sizeof small ? small
                                                : resil__alloc(a, nl + vl + 2);
      if (!line) return MHD_NO;
      memcpy(line, hdrs + i, nl);
      line[nl] = '\0';
      memcpy(line + nl + 1, v, vl);
      line[nl + 1 + vl] = '\0';
      MHD_add_response_header(r, line, line + nl + 1);
      if (line != small) resil__free(a, line);
    }
    i = end + 1;
  }
  return MHD_YES;
}

/* Queues status with body (len bytes), the stored header lines hdrs (hlen
 * bytes) and any extra name/value pairs (a NULL-terminated list). MHD_NO
 * when the response could not be built. */
static enum MHD_Result queue(const resil_allocator *a,
                             struct MHD_Connection *conn, unsigned status,
                             const char *hdrs, size_t hlen, const void *body,
                             size_t len, const char *const *extra) {
  struct MHD_Response *r = MHD_create_response_from_buffer(
      len, (void *)(len ? body : ""), MHD_RESPMEM_MUST_COPY);
  if (!r) return MHD_NO;
  if (add_stored_headers(a, r, hdrs, hlen) != MHD_YES) {
    MHD_destroy_response(r);
    return MHD_NO;
  }
  for (; extra && extra[0]; extra += 2)
    MHD_add_response_header(r, extra[0], extra[1]);
  enum MHD_Result rc = MHD_queue_response(conn, status, r);
  MHD_destroy_response(r);
  return rc;
}

static const char json_ct[] = "Content-Type: application/json\r\n";

/* Queues a helper-made JSON answer; retry_after adds Retry-After. */
static enum MHD_Result queue_json(resil_idem_mhd *h, struct MHD_Connection *conn,
                                  unsigned status, jbuf *b, int retry_after,
                                  const char *const *extra) {
  if (b->oom) {
    resil__free(b->a, b->p);
    return MHD_NO;
  }
  char ra[16];
  snprintf(ra, sizeof ra, "%u", h->retry_after_s);
  const char *with_ra[8] = {"Retry-After", ra, NULL};
  const char *const *ex = extra;
  if (retry_after) {
    size_t k = 2;
    for (; extra && extra[0] && k < 6; extra += 2) {
      with_ra[k++] = extra[0];
      with_ra[k++] = extra[1];
    }
    with_ra[k] = NULL;
    ex = with_ra;
  }
  enum MHD_Result rc = queue(h->alloc, conn, status, json_ct,
                             sizeof json_ct - 1, b->p, b->len, ex);
  resil__free(b->a, b->p);
  return rc;
}

static enum MHD_Result answer_error(resil_idem_mhd *h,
                                    struct MHD_Connection *conn,
                                    unsigned status, const char *msg,
                                    const char *key, int retry_after) {
  jbuf b = {.a = h->alloc};
  jb_raw(&b, "{");
  jb_member(&b, "error", msg);
  if (key) jb_member(&b, "key", key);
  jb_raw(&b, "}");
  return queue_json(h, conn, status, &b, retry_after, NULL);
}

/* Hands one line to the configured log (none: nothing). */
static void hlog(const resil_idem_mhd *h, const char *fmt, ...) RESIL_PRINTF(2, 3);
static void hlog(const resil_idem_mhd *h, const char *fmt, ...) {
  if (!h->log) return;
  char line[768];
  int n = snprintf(line, sizeof line, "%s: ", h->name);
  va_list ap;
  va_start(ap, fmt);
  if (n > 0 && (size_t)n < sizeof line)
    vsnprintf(line + n, sizeof line - (size_t)n, fmt, ap);
  va_end(ap);
  h->log(h->log_user, line);
}

/* "what: <status text>: <the store's precise message>" for the store failure
 * the calling thread just saw (resil_store_errmsg is per thread), logged. */
static void store_failure(const resil_idem_mhd *h, const char *what,
                          resil_status st, const char *key, char *buf,
                          size_t n) {
  const char *m = resil_store_errmsg(h->store);
  snprintf(buf, n, "%s: %s%s%s", what, resil_strerror(st), *m ? ": " : "", m);
  hlog(h, "%s%s%s%s", buf, key ? " (key " : "", key ? key : "", key ? ")" : "");
}

/* 500 or 503 for a new operation that failed after the store took it:
 * stored is what the store holds for it now, PENDING (recovery re-drives
 * it) or, with effects_in_store, UNKNOWN (rolled back with its PENDING row:
 * a retry with the same key runs it anew). */
static enum MHD_Result answer_op_failure(resil_idem_mhd *h,
                                         struct MHD_Connection *conn,
                                         resil_status st, const char *key,
                                         resil_op_state stored, int handler) {
  const char *what = handler ? "the operation failed and was rolled back"
                             : "the operation could not be completed";
  char what_all[160];
  if (stored != RESIL_OP_PENDING) {
    snprintf(what_all, sizeof what_all,
             "%s; nothing is stored, a retry with the same key runs it anew",
             what);
    what = what_all;
  }
  jbuf b = {.a = h->alloc};
  char msg[640];
  if (handler) {
    snprintf(msg, sizeof msg, "%s: %s", what, resil_strerror(st));
    hlog(h, "%s (key %s)", msg, key);
  } else {
    store_failure(h, what, st, key, msg, sizeof msg);
  }
  jb_raw(&b, "{");
  jb_member(&b, "key", key);
  jb_member(&b, "state", resil_op_state_name(stored));
  jb_member(&b, "error", msg);
  jb_raw(&b, "}");
  return queue_json(h, conn, st == RESIL_ETIMEDOUT ? 503 : 500, &b, 1, NULL);
}

static enum MHD_Result answer_record(const resil_idem_mhd *h,
                                     struct MHD_Connection *conn,
                                     const resil_op_record *rec,
                                     const char *const *extra) {
  /* The store never holds a 1xx (not a final answer); should one appear,
   * a 500 is still an answer, a replayed 100 Continue is none. */
  unsigned status = rec->status >= 200 && rec->status <= 599
                        ? (unsigned)rec->status
                        : 500;
  return queue(h->alloc, conn, status, rec->headers,
               rec->headers ? rec->headers_len : 0, rec->body,
               rec->body ? rec->body_len : 0, extra);
}

/* ---- the handler inside the store's transaction -------------------------- */

static void free_blocks(resil_idem_call_priv *p) {
  call_block *b = p->blocks;
  p->blocks = NULL;
  while (b) {
    call_block *next = b->next;
    resil__free(p->h->alloc, b);
    b = next;
  }
}

void *resil_idem_call_alloc(resil_idem_call *call, size_t n) {
  if (!call || !call->priv_ || n > SIZE_MAX - sizeof(call_block)) return NULL;
  resil_idem_call_priv *p = call->priv_;
  call_block *b = resil__alloc(p->h->alloc, sizeof *b + (n ? n : 1));
  if (!b) return NULL;
  b->next = p->blocks;
  p->blocks = b;
  return b->data;
}

static resil_status run_handler(void *user, resil_store_txn *tx,
                                const resil_op_record *pending,
                                resil_op_response *out) {
  resil_idem_call *call = user;
  resil_idem_call_priv *p = call->priv_;
  call->tx = tx;
  call->pending = pending;
  call->key = pending->key;
  memset(out, 0, sizeof *out);
  p->ran = 1;
  resil_status st = p->h->handler(p->h->user, call, out);
  call->tx = NULL;
  if (st == RESIL_OK && (out->status < 200 || out->status > 599 ||
                         (out->body_len && !out->body) ||
                         (out->headers_len && !out->headers)))
    st = RESIL_EINVAL; /* a malformed response must not be stored */
  p->handler_status = st;
  return st;
}

/* A request's effect: on_pending once (the store may run the effect again
 * after a lost connection), then the handler. */
static resil_status run_request(void *user, resil_store_txn *tx,
                                const resil_op_record *pending,
                                resil_op_response *out) {
  resil_idem_call *call = user;
  resil_idem_call_priv *p = call->priv_;
  if (p->h->on_pending && !p->pending_told) {
    p->pending_told = 1;
    call->tx = NULL;
    call->pending = pending;
    call->key = pending->key;
    p->h->on_pending(p->h->user, call);
  }
  return run_handler(user, tx, pending, out);
}

/* What on_committed sees as call->pending: the final record fin as it was
 * while PENDING (a new operation's PENDING row was last updated when it was
 * created). Shares fin's buffers. */
static resil_op_record pending_view(const resil_op_record *fin) {
  resil_op_record v = *fin;
  v.state = RESIL_OP_PENDING;
  v.status = 0;
  v.headers = NULL;
  v.headers_len = 0;
  v.body = NULL;
  v.body_len = 0;
  v.updated_ms = v.created_ms;
  return v;
}

/* ---- the operation --------------------------------------------------------
 */

/* How many values of header name the request carries. */
typedef struct header_count {
  const char *name;
  unsigned n;
} header_count;

static enum MHD_Result count_header(void *cls, enum MHD_ValueKind kind,
                                    const char *key, const char *value) {
  (void)kind;
  (void)value;
  header_count *c = cls;
  if (key && strcasecmp(key, c->name) == 0) c->n++;
  return MHD_YES;
}

/* "srv-" and 32 hex digits: a key for a request that came without one. */
static int random_key(char *out, size_t outlen) {
  if (outlen < 4 + 32 + 1) return -1;
  memcpy(out, "srv-", 4);
  return resil__random_hex(out + 4, 16);
}

static enum MHD_Result serve_op(resil_idem_mhd *h, struct MHD_Connection *conn,
                                const char *method, const char *path,
                                const void *body, size_t body_len,
                                void *request_user, const resil_ctx *ctx) {
  bump(&h->n.requests);
  header_count hc = {h->key_header, 0};
  MHD_get_connection_values(conn, MHD_HEADER_KIND, count_header, &hc);
  if (hc.n > 1) {
    /* Which one would be "the" key? Neither: refuse. */
    bump(&h->n.rejected);
    char msg[128];
    snprintf(msg, sizeof msg, "more than one %s header", h->key_header);
    return answer_error(h, conn, 400, msg, NULL, 0);
  }
  const char *key =
      MHD_lookup_connection_value(conn, MHD_HEADER_KIND, h->key_header);
  char generated[64];
  int gen = 0;
  if (!key || !*key) {
    if (h->require_key) {
      bump(&h->n.rejected);
      char msg[96];
      snprintf(msg, sizeof msg, "missing %s", h->key_header);
      return answer_error(h, conn, 400, msg, NULL, 0);
    }
    if (random_key(generated, sizeof generated) != 0) {
      bump(&h->n.store_errors);
      return answer_error(h, conn, 500, "cannot generate a key", NULL, 0);
    }
    key = generated;
    gen = 1;
  } else if (!valid_key(key)) {
    bump(&h->n.rejected);
    char msg[128];
    snprintf(msg, sizeof msg,
             "invalid %s: must be 1..255 visible ASCII characters",
             h->key_header);
    return answer_error(h, conn, 400, msg, NULL, 0);
  }
  const char *key_hdr[] = {h->key_header, key, NULL};
  const char *const *gen_extra = gen ? key_hdr : NULL;

  resil_op_request req;
  resil_op_request_init(&req);
  req.method = method;
  req.path = path;
  req.body = body;
  req.body_len = body_len;
  resil_op_begin_result br = RESIL_OP_NEW;
  resil_op_record rec;
  resil_op_record_init(&rec);
  /* For a new key the store runs run_request (on_pending, then the
   * handler) inside the transaction that writes the terminal state. */
  resil_idem_call_priv priv = {.h = h};
  resil_idem_call call = {.key = key,
                          .conn = conn,
                          .request_user = request_user,
                          .priv_ = &priv,
                          .ctx = ctx};
  resil_status st =
      resil_store_execute(h->store, key, &req, run_request, &call, &br, &rec);
  free_blocks(&priv);
  call.key = key;
  call.pending = NULL;
  enum MHD_Result rc;
  if (st != RESIL_OK && (priv.ran || rec.state != RESIL_OP_UNKNOWN)) {
    /* The operation was this request's: still PENDING, or (effects_in_store)
     * rolled back with its PENDING row. */
    int handler_failed = priv.ran && priv.handler_status != RESIL_OK;
    bump(handler_failed ? &h->n.handler_failed : &h->n.store_errors);
    rc = answer_op_failure(h, conn, handler_failed ? priv.handler_status : st,
                           key, rec.state, handler_failed);
    resil_op_record_clear(&rec);
    return rc;
  }
  if (st != RESIL_OK) {
    /* Nothing stored and the handler never ran. */
    resil_op_record_clear(&rec);
    if (st == RESIL_EINVAL) {
      bump(&h->n.rejected);
      char msg[640];
      snprintf(msg, sizeof msg, "request refused by the store: %s",
               resil_store_errmsg(h->store));
      return answer_error(h, conn, 400, msg, key, 0);
    }
    bump(&h->n.store_errors);
    char msg[640];
    store_failure(h, "operation store", st, key, msg, sizeof msg);
    return answer_error(h, conn, 503, msg, key, 1);
  }
  switch (br) {
  case RESIL_OP_REPLAY: {
    bump(&h->n.replayed);
    const char *extra[] = {"Idempotent-Replayed", "true", NULL};
    rc = answer_record(h, conn, &rec, extra);
    resil_op_record_clear(&rec);
    return rc;
  }
  case RESIL_OP_IN_PROGRESS: {
    bump(&h->n.in_progress);
    resil_op_record_clear(&rec);
    jbuf b = {.a = h->alloc};
    jb_raw(&b, "{");
    jb_member(&b, "key", key);
    jb_member(&b, "state", "PENDING");
    jb_raw(&b, "}");
    return queue_json(h, conn, 409, &b, 1, NULL);
  }
  case RESIL_OP_CONFLICT:
    bump(&h->n.conflicts);
    resil_op_record_clear(&rec);
    return answer_error(h, conn, 422,
                        "Idempotency-Key reused with a different request", key,
                        0);
  case RESIL_OP_NEW:
    break;
  default:
    resil_op_record_clear(&rec);
    bump(&h->n.store_errors);
    return answer_error(h, conn, 500, "unexpected store answer", key, 0);
  }

  /* NEW: rec is the final record. */
  if (priv.ran && priv.handler_status == RESIL_OK) {
    bump(&h->n.executed);
    resil_idem_action act = RESIL_IDEM_SEND;
    resil_op_record pend = pending_view(&rec);
    call.pending = &pend;
    if (h->on_committed) act = h->on_committed(h->user, &call, &rec);
    if (act == RESIL_IDEM_DROP) {
      bump(&h->n.dropped);
      rc = MHD_NO;
    } else {
      rc = answer_record(h, conn, &rec, gen_extra);
    }
  } else {
    /* Completed by someone else (recovery) between the PENDING row's commit
     * and the completion's row lock: the effect did not run here, and the
     * stored answer is this request's answer too. */
    bump(&h->n.replayed);
    const char *extra[] = {"Idempotent-Replayed", "true", NULL};
    rc = answer_record(h, conn, &rec, extra);
  }
  resil_op_record_clear(&rec);
  return rc;
}

/* ---- status and recovery routes ------------------------------------------ */

static enum MHD_Result serve_status(resil_idem_mhd *h,
                                    struct MHD_Connection *conn,
                                    const char *method, const char *key) {
  bump(&h->n.status_queries);
  if (strcmp(method, "GET") != 0 && strcmp(method, "HEAD") != 0) {
    const char *allow[] = {"Allow", "GET, HEAD", NULL};
    jbuf b = {.a = h->alloc};
    jb_raw(&b, "{");
    jb_member(&b, "error", "method not allowed");
    jb_raw(&b, "}");
    return queue_json(h, conn, 405, &b, 0, allow);
  }
  if (!valid_key(key))
    return answer_error(h, conn, 400,
                        "invalid key: must be 1..255 visible ASCII characters",
                        NULL, 0);
  resil_op_record rec;
  resil_op_record_init(&rec);
  resil_status st = resil_store_status(h->store, key, &rec);
  if (st != RESIL_OK) {
    resil_op_record_clear(&rec);
    char msg[640];
    store_failure(h, "operation store", st, key, msg, sizeof msg);
    return answer_error(h, conn, 503, msg, key, 1);
  }
  jbuf b = {.a = h->alloc};
  jb_raw(&b, "{");
  jb_member(&b, "key", key);
  jb_member(&b, "state", resil_op_state_name(rec.state));
  unsigned code = 200;
  if (rec.state == RESIL_OP_UNKNOWN) {
    code = 404;
  } else {
    if (rec.state == RESIL_OP_COMMITTED || rec.state == RESIL_OP_FAILED) {
      jb_fmt(&b, ",\"status\":%d", rec.status);
      const unsigned char *body = rec.body;
      size_t n = body ? rec.body_len : 0;
      if (resil__utf8_valid(body, n)) {
        jb_raw(&b, ",\"body\":");
        jb_str(&b, (const char *)(body ? (const void *)body : ""), n);
      } else {
        jb_raw(&b, ",\"body_base64\":");
        jb_base64(&b, body, n);
      }
    }
    jb_fmt(&b, ",\"created_ms\":%lld,\"updated_ms\":%lld,\"attempts\":%lu",
           (long long)rec.created_ms, (long long)rec.updated_ms,
           (unsigned long)rec.attempts);
  }
  if (h->status_extra) {
    char extra[512];
    int n = h->status_extra(h->user, &rec, extra, sizeof extra);
    if (n > 0 && (size_t)n < sizeof extra) {
      jb_raw(&b, ",");
      jb_put(&b, extra, (size_t)n);
    }
  }
  jb_raw(&b, "}");
  resil_op_record_clear(&rec);
  return queue_json(h, conn, code, &b, 0, NULL);
}

/* A whole decimal query value in 0..max; dflt when absent; -1 when bad. */
static int query_u64(struct MHD_Connection *conn, const char *name,
                     uint64_t max, uint64_t dflt, uint64_t *out) {
  const char *s = MHD_lookup_connection_value(conn, MHD_GET_ARGUMENT_KIND, name);
  if (!s) {
    *out = dflt;
    return 0;
  }
  if (*s < '0' || *s > '9') return -1;
  errno = 0;
  char *end = NULL;
  unsigned long long v = strtoull(s, &end, 10);
  if (errno || *end || v > max) return -1;
  *out = v;
  return 0;
}

static enum MHD_Result serve_recover(resil_idem_mhd *h,
                                     struct MHD_Connection *conn,
                                     const char *method) {
  if (strcmp(method, "POST") != 0) {
    const char *allow[] = {"Allow", "POST", NULL};
    jbuf b = {.a = h->alloc};
    jb_raw(&b, "{");
    jb_member(&b, "error", "method not allowed");
    jb_raw(&b, "}");
    return queue_json(h, conn, 405, &b, 0, allow);
  }
  uint64_t older_ms = 0, max = 0;
  if (query_u64(conn, "older_than_ms", (uint64_t)(DAY_NS / RESIL_NS_PER_MS),
                (uint64_t)(h->recover_older_than_ns / RESIL_NS_PER_MS),
                &older_ms) != 0 ||
      query_u64(conn, "max", MAX_RECOVER_OPS, h->recover_max_ops, &max) != 0 ||
      max == 0)
    return answer_error(h, conn, 400,
                        "older_than_ms must be 0..86400000 and max 1..100000",
                        NULL, 0);
  int64_t older_ns = h->recover_older_than_ns;
  if (MHD_lookup_connection_value(conn, MHD_GET_ARGUMENT_KIND, "older_than_ms"))
    older_ns = (int64_t)older_ms * RESIL_NS_PER_MS;
  resil_store_recovery r;
  resil_status st =
      resil_idem_mhd_recover_report(h, older_ns, (uint32_t)max, &r);
  if (st != RESIL_OK) {
    char msg[640];
    store_failure(h, "recovery", st, NULL, msg, sizeof msg);
    return answer_error(h, conn, st == RESIL_ETIMEDOUT ? 503 : 500, msg, NULL,
                        1);
  }
  jbuf b = {.a = h->alloc};
  jb_fmt(&b, "{\"recovered\":%u", (unsigned)r.recovered);
  if (r.damaged) {
    jb_fmt(&b, ",\"damaged\":%u,\"damaged_keys\":", (unsigned)r.damaged);
    jb_str(&b, r.damaged_keys, strlen(r.damaged_keys));
  }
  jb_raw(&b, "}");
  return queue_json(h, conn, 200, &b, 0, NULL);
}

/* 1 when path is one of the helper's own routes (status, recovery), 0
 * for an operation. */
static int own_route(const resil_idem_mhd *h, const char *path) {
  return (h->status_prefix && strncmp(path, h->status_prefix, h->status_prefix_len) == 0) ||
         (h->recover_path && strcmp(path, h->recover_path) == 0);
}

/* The operation's context from the caller's deadline: 1 when the request
 * may go on (ctx set), 0 when it is refused (answered in *rc, nothing
 * else done). */
static int read_deadline(resil_idem_mhd *h, struct MHD_Connection *conn, resil_ctx *ctx,
                         enum MHD_Result *rc) {
  resil_ctx_init(ctx);
  if (!h->deadline ||
      resil_deadline_mhd_read(h->deadline, conn, ctx, NULL) != RESIL_DEADLINE_REFUSE)
    return 1;
  bump(&h->n.deadline_refused);
  *rc = resil_deadline_mhd_refuse(h->deadline, conn);
  return 0;
}

/* resil_idem_mhd_serve with the request's context when the access handler
 * read it already (ctx), else read here. */
static enum MHD_Result serve_ctx(resil_idem_mhd *h, struct MHD_Connection *conn,
                                 const char *method, const char *path, const void *body,
                                 size_t body_len, void *request_user, const resil_ctx *ctx) {
  if (h->status_prefix &&
      strncmp(path, h->status_prefix, h->status_prefix_len) == 0)
    return serve_status(h, conn, method, path + h->status_prefix_len);
  if (h->recover_path && strcmp(path, h->recover_path) == 0)
    return serve_recover(h, conn, method);
  resil_ctx local;
  if (!ctx) {
    enum MHD_Result rc = MHD_NO;
    if (!read_deadline(h, conn, &local, &rc)) return rc;
    ctx = &local;
  }
  return serve_op(h, conn, method, path, body, body_len, request_user, ctx);
}

enum MHD_Result resil_idem_mhd_serve(resil_idem_mhd *h,
                                     struct MHD_Connection *conn,
                                     const char *method, const char *path,
                                     const void *body, size_t body_len,
                                     void *request_user) {
  if (!valid(h) || !conn || !method || !path || (body_len && !body))
    return MHD_NO;
  return serve_ctx(h, conn, method, path, body, body_len, request_user, NULL);
}

resil_status resil_idem_mhd_recover(resil_idem_mhd *h, int64_t older_than_ns,
                                    uint32_t max_ops, uint32_t *recovered) {
  resil_store_recovery r;
  resil_status st = resil_idem_mhd_recover_report(h, older_than_ns, max_ops, &r);
  if (recovered) *recovered = r.recovered;
  return st;
}

resil_status resil_idem_mhd_recover_report_sized(resil_idem_mhd *h,
                                                 int64_t older_than_ns,
                                                 uint32_t max_ops,
                                                 resil_store_recovery *report,
                                                 size_t struct_size) {
  resil_store_recovery r;
  memset(&r, 0, sizeof r);
  r.struct_size = sizeof r;
  resil__sized_out(report, struct_size, &r, sizeof r);
  if (!valid(h)) return RESIL_EMISUSE;
  if (older_than_ns < 0 || older_than_ns > DAY_NS || max_ops < 1 ||
      max_ops > MAX_RECOVER_OPS)
    return RESIL_EINVAL;
  resil_idem_call_priv priv = {.h = h};
  resil_ctx none;
  resil_ctx_init(&none);
  resil_idem_call call = {.recovering = 1, .priv_ = &priv, .ctx = &none};
  resil_status st = resil_store_recover_report(h->store, older_than_ns, max_ops,
                                               run_handler, &call, &r);
  free_blocks(&priv);
  atomic_fetch_add_explicit(&h->n.recovered, r.recovered, memory_order_relaxed);
  atomic_fetch_add_explicit(&h->n.damaged, r.damaged, memory_order_relaxed);
  if (r.damaged)
    hlog(h, "recovery skipped %u damaged PENDING row(s): %s",
         (unsigned)r.damaged, r.damaged_keys);
  if (st != RESIL_OK) {
    char msg[640];
    store_failure(h, "recovery", st, NULL, msg, sizeof msg);
  }
  resil__sized_out(report, struct_size, &r, sizeof r);
  return st;
}

/* An MHD_OPTION_UNESCAPE_CALLBACK: MHD's own percent-decoding, except that
 * an encoded NUL (%00) becomes the byte 0xFF instead of ending the string.
 * 0xFF is never valid UTF-8 and never a key character, so such a path is
 * refused (400) instead of being cut short into another key's or another
 * path's name. */
size_t resil_idem_mhd_unescape(void *cls, struct MHD_Connection *conn,
                               char *s) {
  (void)cls;
  (void)conn;
  for (char *p = s; (p = strchr(p, '%')) != NULL; p++)
    if (p[1] == '0' && p[2] == '0') {
      p[1] = 'f';
      p[2] = 'f';
    }
  return MHD_http_unescape(s);
}


/* ---- a complete access handler ------------------------------------------- */

static int req_append(resil_idem_mhd *h, idem_req *q, const char *data,
                      size_t n) {
  if (q->too_large || n > h->max_body_bytes - q->len) {
    /* Keep reading and dropping, so that the 413 follows the request on a
     * connection that stays usable. */
    q->too_large = 1;
    return 0;
  }
  if (q->len + n > q->cap) {
    size_t cap = q->cap ? q->cap : 1024;
    while (cap < q->len + n) cap *= 2;
    char *p = resil__alloc(h->alloc, cap);
    if (!p) return -1;
    if (q->body) memcpy(p, q->body, q->len);
    resil__free(h->alloc, q->body);
    q->body = p;
    q->cap = cap;
  }
  memcpy(q->body + q->len, data, n);
  q->len += n;
  return 0;
}

enum MHD_Result resil_idem_mhd_access(void *cls, struct MHD_Connection *conn,
                                      const char *url, const char *method,
                                      const char *version,
                                      const char *upload_data,
                                      size_t *upload_data_size,
                                      void **con_cls) {
  (void)version;
  resil_idem_mhd *h = cls;
  if (!valid(h) || !con_cls) return MHD_NO;
  idem_req *q = *con_cls;
  if (!q) {
    /* First call: headers only. */
    q = resil__calloc(h->alloc, sizeof *q);
    if (!q) return MHD_NO;
    q->magic = IDEM_REQ_MAGIC;
    *con_cls = q;
    /* The caller's budget counts from here, and a refusal comes before
     * the body is read (MHD then closes the connection). */
    if (h->deadline && url && !own_route(h, url)) {
      enum MHD_Result rc = MHD_NO;
      if (!read_deadline(h, conn, &q->ctx, &rc)) return rc;
      q->has_ctx = 1;
    }
    return MHD_YES;
  }
  if (q->magic != IDEM_REQ_MAGIC) return MHD_NO;
  if (*upload_data_size > 0) {
    if (req_append(h, q, upload_data, *upload_data_size) != 0) return MHD_NO;
    *upload_data_size = 0;
    return MHD_YES;
  }
  if (q->too_large) {
    bump(&h->n.rejected);
    return answer_error(h, conn, 413, "request body too large", NULL, 0);
  }
  if (!method || !url || (q->len && !q->body)) return MHD_NO;
  return serve_ctx(h, conn, method, url, q->body, q->len, NULL, q->has_ctx ? &q->ctx : NULL);
}

void resil_idem_mhd_completed(void *cls, struct MHD_Connection *conn,
                              void **con_cls,
                              enum MHD_RequestTerminationCode toe) {
  (void)conn;
  (void)toe;
  resil_idem_mhd *h = cls;
  if (!valid(h) || !con_cls || !*con_cls) return;
  idem_req *q = *con_cls;
  if (q->magic != IDEM_REQ_MAGIC) return;
  q->magic = RESIL_MAGIC_DEAD;
  resil__free(h->alloc, q->body);
  resil__free(h->alloc, q);
  *con_cls = NULL;
}
