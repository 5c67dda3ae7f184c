/* The operation store's backend-independent half: validation, fingerprints,
 * the connection pool, the begin decision, the completion protocol, recovery
 * and error reporting. The backends (store_sqlite.c, store_pg.c) provide the
 * transactions and the SQL. */
#include <errno.h>
#include <openssl/evp.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "core/redact.h"
#include "store/store_int.h"

/* ---- per-thread error text ---------------------------------------------
 * A store is shared by many threads, so "the last error" is kept per thread:
 * one thread's failure never replaces the message another is about to read.
 * The store's id (not its address, which malloc may reuse) says which store
 * the text belongs to. */
typedef struct store_tls_err {
  uint64_t id;
  const char *op;
  resil_error err;
  char msg[512];
  int damaged; /* the failure was a stored row that is not an operation */
} store_tls_err;

static _Thread_local store_tls_err t_err;
static atomic_uint_fast64_t next_store_id = 1;

/* Starts a public call on s: forgets the previous call's error. */
static void enter(const resil_store *s, const char *op) {
  if (t_err.id == s->id) t_err.id = 0;
  t_err.op = op;
  t_err.damaged = 0;
}

/* Sizes of the 0.1 layouts (DESIGN §11): the smallest struct_size taken. */
#define REQUEST_MIN_SIZE (offsetof(resil_op_request, body_len) + sizeof(size_t))
#define RECORD_MIN_SIZE                                                        \
  (offsetof(resil_op_record, alloc) + sizeof(const resil_allocator *))
#define CONFIG_MIN_SIZE (offsetof(resil_store_config, fault_user) + sizeof(void *))

resil_status resil__store_fail(resil_store *s, resil_status st,
                               const char *field, const char *fmt, ...) {
  char text[400];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(text, sizeof text, fmt, ap);
  va_end(ap);
  t_err.id = s->id;
  t_err.damaged = 0;
  memset(&t_err.err, 0, sizeof t_err.err);
  t_err.err.status = st;
  const char *op = t_err.op ? t_err.op : "store";
  if (field) {
    snprintf(t_err.err.field, sizeof t_err.err.field, "%s", field);
    snprintf(t_err.msg, sizeof t_err.msg, "%s: %s: %s", op, field, text);
  } else {
    snprintf(t_err.msg, sizeof t_err.msg, "%s: %s", op, text);
  }
  size_t n = strlen(t_err.msg);
  if (n >= sizeof t_err.err.msg) n = sizeof t_err.err.msg - 1;
  memcpy(t_err.err.msg, t_err.msg, n);
  t_err.err.msg[n] = '\0';
  return st;
}

const char *resil_store_errmsg(const resil_store *s) {
  if (!s || s->magic != RESIL_MAGIC_STORE || t_err.id != s->id) return "";
  return t_err.msg;
}

void resil_store_last_error(const resil_store *s, resil_error *out) {
  if (!out) return;
  if (!s || s->magic != RESIL_MAGIC_STORE || t_err.id != s->id) {
    resil_error_clear(out);
    return;
  }
  *out = t_err.err;
}

/* ---- names and records ------------------------------------------------- */

const char *resil_op_state_name(resil_op_state st) {
  switch (st) {
  case RESIL_OP_PENDING: return "PENDING";
  case RESIL_OP_COMMITTED: return "COMMITTED";
  case RESIL_OP_FAILED: return "FAILED";
  case RESIL_OP_UNKNOWN: break;
  }
  return "UNKNOWN";
}

const char *resil_op_begin_result_name(resil_op_begin_result r) {
  switch (r) {
  case RESIL_OP_NEW: return "NEW";
  case RESIL_OP_REPLAY: return "REPLAY";
  case RESIL_OP_IN_PROGRESS: return "IN_PROGRESS";
  case RESIL_OP_CONFLICT: return "CONFLICT";
  }
  return "?";
}

void resil_op_record_init_sized(resil_op_record *r, size_t struct_size) {
  if (!r || struct_size < sizeof(size_t)) return;
  resil_op_record full;
  memset(&full, 0, sizeof full);
  full.struct_size = sizeof full;
  resil__sized_out(r, struct_size, &full, sizeof full);
}

void resil_op_request_init_sized(resil_op_request *req, size_t struct_size) {
  if (!req || struct_size < sizeof(size_t)) return;
  resil_op_request full;
  memset(&full, 0, sizeof full);
  full.struct_size = sizeof full;
  resil__sized_out(req, struct_size, &full, sizeof full);
}

/* A full-size local record: what every internal record is. */
static void rec_local(resil_op_record *r) {
  memset(r, 0, sizeof *r);
  r->struct_size = sizeof *r;
}

static void free_response(resil_op_record *r) {
  resil__free(r->alloc, r->headers);
  resil__free(r->alloc, r->body);
  r->headers = NULL;
  r->body = NULL;
  r->headers_len = 0;
  r->body_len = 0;
  r->status = 0;
}

void resil_op_record_clear(resil_op_record *r) {
  if (!r) return;
  size_t n = r->struct_size;
  /* A record never initialised (or of an unknown size) holds nothing this
   * library could free safely. */
  if (n < RECORD_MIN_SIZE || n > sizeof *r + RESIL__SIZED_SLACK) return;
  free_response(r);
  resil__free(r->alloc, r->path);
  resil__free(r->alloc, r->request_body);
  memset(r, 0, n < sizeof *r ? n : sizeof *r);
  r->struct_size = n;
}

/* Whether the caller's record can be written (NULL is fine: not asked). */
static resil_status check_rec(resil_store *s, const resil_op_record *r) {
  size_t n = resil__sized_size(r);
  if (r && (n < RECORD_MIN_SIZE || n > sizeof *r + RESIL__SIZED_SLACK))
    return resil__store_fail(s, RESIL_EINVAL, "rec",
                             "resil_op_record not initialised (struct_size %zu): "
                             "call resil_op_record_init()", n);
  return RESIL_OK;
}

/* Moves the full local *from into the caller's *to (releasing what *to
 * held; only struct_size bytes of it are written), leaving *from empty. */
static void rec_move(resil_op_record *to, resil_op_record *from) {
  if (to) {
    size_t n = to->struct_size;
    resil_op_record_clear(to);
    resil__sized_out(to, n, from, sizeof *from);
  } else {
    resil_op_record_clear(from);
  }
  rec_local(from);
}

/* A NUL-terminated copy of p[0..n): text can be printed as is. */
static void *dup_bytes(const resil_allocator *a, const void *p, size_t n) {
  char *d = resil__alloc(a, n + 1);
  if (!d) return NULL;
  if (n) memcpy(d, p, n);
  d[n] = '\0';
  return d;
}

resil_status resil__rec_set(resil_store *s, resil_op_record *rec,
                            const resil__row *row) {
  if (row->key_len < 1 || row->key_len > RESIL_STORE_KEY_MAX ||
      row->method_len < 1 || row->method_len > RESIL_OP_METHOD_MAX ||
      row->fingerprint_len != 32 || row->state < RESIL_OP_PENDING ||
      row->state > RESIL_OP_FAILED ||
      (row->state == RESIL_OP_PENDING) == (row->has_response != 0) ||
      (row->has_response && (row->status < 200 || row->status > 599)) ||
      row->attempts < 0) {
    resil__store_fail(s, RESIL_EIO, NULL,
                      "the stored row '%.*s' is not a valid operation (key length "
                      "%zu, state %d, status %d, fingerprint %zu bytes): damaged "
                      "or foreign table",
                      (int)(row->key_len < 64 ? row->key_len : 64),
                      row->key ? row->key : "", row->key_len, row->state,
                      row->has_response ? row->status : 0, row->fingerprint_len);
    t_err.damaged = 1;
    return RESIL_EIO;
  }
  resil_op_record t;
  rec_local(&t);
  t.alloc = s->alloc;
  memcpy(t.key, row->key, row->key_len);
  t.state = (resil_op_state)row->state;
  memcpy(t.fingerprint, row->fingerprint, 32);
  memcpy(t.method, row->method, row->method_len);
  t.path = dup_bytes(s->alloc, row->path, row->path_len);
  t.request_body = dup_bytes(s->alloc, row->request_body, row->request_body_len);
  t.request_body_len = row->request_body_len;
  int ok = t.path && t.request_body;
  if (ok && row->has_response) {
    t.status = row->status;
    t.headers = dup_bytes(s->alloc, row->headers, row->headers_len);
    t.headers_len = row->headers_len;
    t.body = dup_bytes(s->alloc, row->body, row->body_len);
    t.body_len = row->body_len;
    ok = t.headers && t.body;
  }
  t.created_ms = row->created_ms;
  t.updated_ms = row->updated_ms;
  t.attempts = row->attempts > UINT32_MAX ? UINT32_MAX : (uint32_t)row->attempts;
  if (!ok) {
    resil_op_record_clear(&t);
    return resil__store_fail(s, RESIL_ENOMEM, NULL, "out of memory copying a record");
  }
  /* rec is always one of the store's full-size local records. */
  resil_op_record_clear(rec);
  *rec = t;
  return RESIL_OK;
}

resil_status resil__keylist_add(resil_store *s, resil__keylist *kl,
                                const char *key, size_t len) {
  if (kl->count == kl->cap) {
    uint32_t cap = kl->cap ? kl->cap * 2 : 16;
    char **k = resil__alloc(s->alloc, cap * sizeof *k);
    if (!k) return resil__store_fail(s, RESIL_ENOMEM, NULL, "out of memory listing keys");
    if (kl->count) memcpy(k, kl->keys, kl->count * sizeof *k);
    resil__free(s->alloc, kl->keys);
    kl->keys = k;
    kl->cap = cap;
  }
  char *d = dup_bytes(s->alloc, key, len);
  if (!d) return resil__store_fail(s, RESIL_ENOMEM, NULL, "out of memory listing keys");
  kl->keys[kl->count++] = d;
  return RESIL_OK;
}

static void keylist_free(resil_store *s, resil__keylist *kl) {
  for (uint32_t i = 0; i < kl->count; i++) resil__free(s->alloc, kl->keys[i]);
  resil__free(s->alloc, kl->keys);
  memset(kl, 0, sizeof *kl);
}

/* ---- validation ----------------------------------------------------------- */

static resil_status check_key(resil_store *s, const char *key) {
  if (!key) return resil__store_fail(s, RESIL_EINVAL, "key", "must not be NULL");
  size_t n = 0;
  for (; key[n]; n++) {
    unsigned char c = (unsigned char)key[n];
    if (n >= RESIL_STORE_KEY_MAX)
      return resil__store_fail(s, RESIL_EINVAL, "key",
                               "must be 1..%d visible ASCII characters, got more",
                               RESIL_STORE_KEY_MAX);
    if (c < 0x21 || c > 0x7e)
      return resil__store_fail(s, RESIL_EINVAL, "key",
                               "must be visible ASCII (0x21..0x7e), got byte "
                               "0x%02x at offset %zu", c, n);
  }
  if (n == 0)
    return resil__store_fail(s, RESIL_EINVAL, "key",
                             "must be 1..%d visible ASCII characters, got none",
                             RESIL_STORE_KEY_MAX);
  return RESIL_OK;
}

/* Copies the caller's request into *req (full size) and checks it. */
static resil_status check_request(resil_store *s, const resil_op_request *ureq,
                                  resil_op_request *req, size_t *method_len,
                                  size_t *path_len) {
  if (!ureq) return resil__store_fail(s, RESIL_EINVAL, "req", "must not be NULL");
  resil_op_request_init(req);
  resil_error e;
  resil_status st = resil__sized_in(req, sizeof *req, ureq, REQUEST_MIN_SIZE,
                                    "resil_op_request", "resil_op_request_init", &e);
  if (st) return resil__store_fail(s, st, "req", "%s", e.msg);
  if (!req->method)
    return resil__store_fail(s, RESIL_EINVAL, "method", "must not be NULL");
  size_t n = 0;
  for (; req->method[n]; n++) {
    unsigned char c = (unsigned char)req->method[n];
    if (n >= RESIL_OP_METHOD_MAX || c < 0x21 || c > 0x7e)
      return resil__store_fail(s, RESIL_EINVAL, "method",
                               "must be 1..%d visible ASCII characters",
                               RESIL_OP_METHOD_MAX);
  }
  if (n == 0)
    return resil__store_fail(s, RESIL_EINVAL, "method",
                             "must be 1..%d visible ASCII characters, got none",
                             RESIL_OP_METHOD_MAX);
  *method_len = n;
  if (!req->path) return resil__store_fail(s, RESIL_EINVAL, "path", "must not be NULL");
  /* PostgreSQL refuses anything but well-formed UTF-8 in a text column,
   * and both backends must accept the same requests. */
  *path_len = strlen(req->path);
  if (!resil__utf8_valid(req->path, *path_len))
    return resil__store_fail(s, RESIL_EINVAL, "path", "must be valid UTF-8");
  if (!req->body && req->body_len)
    return resil__store_fail(s, RESIL_EINVAL, "body",
                             "is NULL with body_len %zu", req->body_len);
  return RESIL_OK;
}

static resil_status check_response(resil_store *s, const resil_op_response *r) {
  /* A 1xx is not a final response: replayed, it would leave the client
   * waiting for one that never comes. */
  if (r->status < 200 || r->status > 599)
    return resil__store_fail(s, RESIL_EINVAL, "status",
                             "the effect's response status must be a final status "
                             "200..599, got %d", r->status);
  if (!r->headers && r->headers_len)
    return resil__store_fail(s, RESIL_EINVAL, "headers",
                             "the effect's response headers are NULL with length %zu",
                             r->headers_len);
  if (!r->body && r->body_len)
    return resil__store_fail(s, RESIL_EINVAL, "body",
                             "the effect's response body is NULL with length %zu",
                             r->body_len);
  if (r->failed != 0 && r->failed != 1)
    return resil__store_fail(s, RESIL_EINVAL, "failed",
                             "the effect's response failed flag must be 0 or 1, got %d",
                             r->failed);
  return RESIL_OK;
}

/* ---- fingerprint -------------------------------------------------------- */

static int digest_part(EVP_MD_CTX *c, const void *p, size_t n) {
  unsigned char len[8];
  for (int i = 0; i < 8; i++) len[i] = (unsigned char)((uint64_t)n >> (56 - 8 * i));
  if (!EVP_DigestUpdate(c, len, sizeof len)) return 0;
  return n == 0 || EVP_DigestUpdate(c, p, n);
}

/* SHA-256, looked up once: with OpenSSL 3, EVP_sha256() makes every
 * EVP_DigestInit_ex fetch the implementation again (a locked lookup in the
 * provider store, as much CPU as the hash of a small request); a method
 * fetched explicitly is used as is. Held for the life of the process. */
static const EVP_MD *sha256_md;
static pthread_once_t sha256_once = PTHREAD_ONCE_INIT;

static void sha256_fetch(void) {
#if OPENSSL_VERSION_NUMBER >= 0x30000000L
  sha256_md = EVP_MD_fetch(NULL, "SHA256", NULL);
#endif
  if (!sha256_md) sha256_md = EVP_sha256();
}

static resil_status fingerprint(const resil_op_request *req, size_t method_len,
                                size_t path_len, unsigned char out[32]) {
  pthread_once(&sha256_once, sha256_fetch);
  EVP_MD_CTX *c = EVP_MD_CTX_new();
  if (!c) return RESIL_ENOMEM;
  unsigned int n = 0;
  int ok = EVP_DigestInit_ex(c, sha256_md, NULL) &&
           digest_part(c, req->method, method_len) &&
           digest_part(c, req->path, path_len) &&
           digest_part(c, req->body, req->body_len) &&
           EVP_DigestFinal_ex(c, out, &n) && n == 32;
  EVP_MD_CTX_free(c);
  return ok ? RESIL_OK : RESIL_EIO;
}

resil_status resil_op_fingerprint(const resil_op_request *ureq, unsigned char out[32]) {
  resil_op_request req;
  resil_op_request_init(&req);
  if (!ureq || !out ||
      resil__sized_in(&req, sizeof req, ureq, REQUEST_MIN_SIZE, "resil_op_request",
                      "resil_op_request_init", NULL) != RESIL_OK ||
      !req.method || !req.path || (!req.body && req.body_len))
    return RESIL_EINVAL;
  return fingerprint(&req, strlen(req.method), strlen(req.path), out);
}

/* ---- config, open, close -------------------------------------------------- */

static void config_defaults(resil_store_config *cfg) {
  memset(cfg, 0, sizeof *cfg);
  cfg->struct_size = sizeof *cfg;
  cfg->busy_timeout_ns = 5 * RESIL_NS_PER_S;
  cfg->pool_size = 4;
}

void resil_store_config_init_sized(resil_store_config *cfg, size_t struct_size) {
  if (!cfg) return;
  resil_store_config full;
  config_defaults(&full);
  resil__sized_out(cfg, struct_size, &full, sizeof full);
}

static inline int valid(const resil_store *s) {
  return s && s->magic == RESIL_MAGIC_STORE;
}

static void free_store(resil_store *s, int sync_ready) {
  for (uint32_t i = 0; i < s->nconns; i++) s->be->disconnect(s, s->conns[i]);
  if (sync_ready) {
    pthread_cond_destroy(&s->cv);
    pthread_mutex_destroy(&s->mu);
  }
  resil__free(s->alloc, s->conns);
  resil__free(s->alloc, s->idle);
  resil__free(s->alloc, s->target);
  s->magic = RESIL_MAGIC_DEAD;
  resil__free(s->alloc, s);
}

static int sync_init(resil_store *s) {
  pthread_condattr_t ca;
  if (pthread_condattr_init(&ca)) return 0;
  int ok = pthread_condattr_setclock(&ca, CLOCK_MONOTONIC) == 0 &&
           pthread_cond_init(&s->cv, &ca) == 0;
  pthread_condattr_destroy(&ca);
  if (!ok) return 0;
  if (pthread_mutex_init(&s->mu, NULL)) {
    pthread_cond_destroy(&s->cv);
    return 0;
  }
  return 1;
}

/* resil_store_open, or with check_only (out NULL) resil_store_check: the
 * same validation, then nothing opened. */
static resil_status open_store(const char *uri, const resil_store_config *ucfg,
                               resil_store **out, int check_only, resil_error *err) {
  if (!out && !check_only) return resil__err(err, RESIL_EINVAL, "out", "must not be NULL");
  if (out) *out = NULL;
  resil_store_config full;
  config_defaults(&full);
  resil_status st;
  if (ucfg && (st = resil__sized_in(&full, sizeof full, ucfg, CONFIG_MIN_SIZE,
                                    "resil_store_config", "resil_store_config_init",
                                    err)))
    return st;
  const resil_store_config *cfg = &full;
  if ((st = resil__check_ns(err, "busy_timeout_ns", cfg->busy_timeout_ns, 0,
                            RESIL_STORE_BUSY_TIMEOUT_MAX_NS)) ||
      (st = resil__check_range(err, "pool_size", cfg->pool_size, 1,
                               RESIL_STORE_POOL_MAX)) ||
      (st = resil__check_range(err, "unsafe_commit_effect_early",
                               cfg->unsafe_commit_effect_early, 0, 1)) ||
      (st = resil__check_range(err, "effects_in_store", cfg->effects_in_store, 0, 1)))
    return st;
  if (!uri) return resil__err(err, RESIL_EINVAL, "uri", "must not be NULL");
  const resil__store_backend *be;
  const char *target;
  /* The URI as a message may quote it: its userinfo and secret-looking
   * parameters redacted (a password never appears), escaped, cut. */
  char shown[64];
  resil__redact_excerpt(shown, sizeof shown, uri, strlen(uri), RESIL__REDACT_URL, NULL);
  if (strncmp(uri, "sqlite:", 7) == 0) {
    be = &resil__store_sqlite;
    target = uri + 7;
    if (!*target || strcmp(target, ":memory:") == 0)
      return resil__err(err, RESIL_EINVAL, "uri",
                        "sqlite: needs a file path (an in-memory database "
                        "would not be shared by the pool), got '%s'", shown);
    /* A query or fragment would silently become part of the file name. */
    size_t q = strcspn(target, "?#");
    if (target[q])
      return resil__err(err, RESIL_EINVAL, "uri",
                        "sqlite: takes a plain file path without a query or "
                        "fragment, got '%s' ('%c' at offset %zu; SQLite URI "
                        "parameters such as ?mode=ro are not supported)",
                        shown, target[q], q + 7);
  } else if (strncmp(uri, "postgresql://", 13) == 0 ||
             strncmp(uri, "postgres://", 11) == 0) {
    be = &resil__store_pg;
    target = uri;
  } else {
    return resil__err(err, RESIL_EINVAL, "uri",
                      "must start with 'sqlite:' or 'postgresql://', got '%s'", shown);
  }

  if (check_only) return RESIL_OK;
  resil_store *s = resil__calloc(cfg->alloc, sizeof *s);
  if (!s) return resil__err(err, RESIL_ENOMEM, NULL, "out of memory");
  s->alloc = cfg->alloc;
  s->be = be;
  s->id = atomic_fetch_add(&next_store_id, 1);
  s->busy_timeout_ms = cfg->busy_timeout_ns / RESIL_NS_PER_MS;
  s->pool_size = cfg->pool_size;
  s->clock = resil__clock(cfg->clock);
  s->unsafe_commit_effect_early = cfg->unsafe_commit_effect_early;
  s->effects_in_store = cfg->effects_in_store;
  s->fault_before_terminal = cfg->fault_before_terminal;
  s->fault_user = cfg->fault_user;
  int ok;
  s->target = resil__strdup(s->alloc, target, &ok);
  s->conns = resil__calloc(s->alloc, cfg->pool_size * sizeof *s->conns);
  s->idle = resil__calloc(s->alloc, cfg->pool_size * sizeof *s->idle);
  if (!s->target || !s->conns || !s->idle) {
    free_store(s, 0);
    return resil__err(err, RESIL_ENOMEM, NULL, "out of memory");
  }
  if (!sync_init(s)) {
    free_store(s, 0);
    return resil__err(err, RESIL_ESYS, NULL, "cannot create the pool's mutex");
  }
  enter(s, "open");
  for (uint32_t i = 0; i < cfg->pool_size; i++) {
    void *c = NULL;
    st = be->connect(s, &c, i == 0);
    if (st) {
      if (err) *err = t_err.err;
      t_err.id = 0;
      free_store(s, 1);
      return st;
    }
    s->conns[s->nconns++] = c;
    s->idle[s->nidle++] = c;
  }
  s->magic = RESIL_MAGIC_STORE;
  *out = s;
  return RESIL_OK;
}

resil_status resil_store_open(const char *uri, const resil_store_config *cfg,
                              resil_store **out, resil_error *err) {
  return open_store(uri, cfg, out, 0, err);
}

resil_status resil_store_check(const char *uri, const resil_store_config *cfg,
                               resil_error *err) {
  return open_store(uri, cfg, NULL, 1, err);
}

void resil_store_close(resil_store *s) {
  if (!valid(s)) return;
  if (t_err.id == s->id) t_err.id = 0;
  free_store(s, 1);
}

const char *resil_store_backend(const resil_store *s) {
  return valid(s) ? s->be->name : NULL;
}

struct sqlite3 *resil_store_txn_sqlite(resil_store_txn *tx) {
  return tx ? tx->sqlite : NULL;
}

struct pg_conn *resil_store_txn_pg(resil_store_txn *tx) {
  if (!tx || !tx->pg) return NULL;
  /* What the effect runs directly must come after what it queued. */
  const resil__store_backend *be = tx->store->be;
  resil_status st = be->txn_settle ? be->txn_settle(tx->store, tx->conn) : RESIL_OK;
  if (st && !tx->sql_failed) tx->sql_failed = st;
  return tx->pg;
}

const char *resil__sql_skip_blank(const char *p, int nested) {
  for (;;) {
    while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r' || *p == '\f' || *p == '\v') p++;
    if (p[0] == '-' && p[1] == '-') {
      while (*p && *p != '\n') p++;
    } else if (p[0] == '/' && p[1] == '*') {
      int depth = 0;
      do {
        if (p[0] == '/' && p[1] == '*') depth += nested || !depth, p += 2;
        else if (p[0] == '*' && p[1] == '/') depth--, p += 2;
        else p++;
      } while (*p && depth > 0);
    } else {
      return p;
    }
  }
}

static const char *skip_blank(const char *p) {
  return resil__sql_skip_blank(p, 1);
}

/* 1 when the word at *p (case-insensitive, then not a letter, digit or _)
 * is w; *p then moves past it. */
static int word_is(const char **p, const char *w) {
  size_t n = strlen(w);
  if (strncasecmp(*p, w, n) != 0) return 0;
  char c = (*p)[n];
  if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_')
    return 0;
  *p += n;
  return 1;
}

/* Why resil_store_txn_exec cannot run sql, or NULL. A statement that ends
 * the effect's transaction: COMMIT, END, ABORT, ROLLBACK (but ROLLBACK
 * [WORK | TRANSACTION] TO a savepoint), PREPARE TRANSACTION (nested forms,
 * DO or CALL, cannot: inside a transaction block the database refuses
 * them); on PostgreSQL it would be queued, and the terminal state and
 * COMMIT behind it would run outside the effect's transaction. COPY: its
 * data exchange (PostgreSQL's FROM STDIN / TO STDOUT) would leave the
 * pipeline waiting forever. */
static const char *refused_statement(const char *sql) {
  static const char ends[] = "ends the transaction, which the store commits with the "
                             "terminal state";
  const char *p = skip_blank(sql);
  if (word_is(&p, "COMMIT") || word_is(&p, "END") || word_is(&p, "ABORT")) return ends;
  if (word_is(&p, "ROLLBACK")) {
    p = skip_blank(p);
    if (word_is(&p, "WORK") || word_is(&p, "TRANSACTION")) p = skip_blank(p);
    return word_is(&p, "TO") ? NULL : ends;
  }
  if (word_is(&p, "PREPARE")) {
    p = skip_blank(p);
    return word_is(&p, "TRANSACTION") ? ends : NULL;
  }
  if (word_is(&p, "COPY")) return "COPY is not supported (its data exchange cannot run here)";
  return NULL;
}

resil_status resil_store_txn_exec(resil_store_txn *tx, const char *sql, int nparams,
                                  const char *const *values, const size_t *lengths,
                                  const int *binary) {
  if (!tx || !tx->store) return RESIL_EMISUSE;
  resil_store *s = tx->store;
  resil_status st = RESIL_OK;
  int lens[RESIL_STORE_EXEC_PARAMS_MAX], fmts[RESIL_STORE_EXEC_PARAMS_MAX];
  resil__exec_args a = {.no = ++tx->nexec, .sql = sql, .n = nparams, .values = values};
  const char *why = NULL;
  if (!sql || !*sql)
    st = resil__store_fail(s, RESIL_EINVAL, "sql", "sql: must be a statement, got %s",
                           sql ? "\"\"" : "NULL");
  else if ((why = refused_statement(sql)))
    st = resil__store_fail(s, RESIL_EINVAL, "sql", "sql: %s", why);
  else if (nparams < 0 || nparams > RESIL_STORE_EXEC_PARAMS_MAX)
    st = resil__store_fail(s, RESIL_EINVAL, "nparams", "nparams: must be 0..%d, got %d",
                           RESIL_STORE_EXEC_PARAMS_MAX, nparams);
  else if (nparams > 0 && !values)
    st = resil__store_fail(s, RESIL_EINVAL, "values",
                           "values: NULL with nparams %d (need one value per parameter)",
                           nparams);
  for (int i = 0; st == RESIL_OK && binary && i < nparams; i++) {
    fmts[i] = binary[i] ? 1 : 0;
    lens[i] = 0;
    if (!binary[i] || !values[i]) continue;
    if (!lengths)
      st = resil__store_fail(s, RESIL_EINVAL, "lengths",
                             "lengths: NULL, but parameter %d is binary", i + 1);
    else if (lengths[i] > (size_t)INT32_MAX)
      st = resil__store_fail(s, RESIL_EINVAL, "lengths",
                             "lengths[%d]: must be at most %d bytes, got %zu", i,
                             INT32_MAX, lengths[i]);
    else
      lens[i] = (int)lengths[i];
  }
  if (st == RESIL_OK) {
    if (binary) {
      a.lengths = lens;
      a.formats = fmts;
    }
    st = s->be->txn_exec(s, tx->conn, &a);
  }
  if (st && !tx->sql_failed) tx->sql_failed = st;
  return st;
}

/* ---- the pool --------------------------------------------------------------- */

static resil_status pool_get(resil_store *s, void **conn) {
  pthread_mutex_lock(&s->mu);
  if (s->nidle == 0) {
    struct timespec dl;
    clock_gettime(CLOCK_MONOTONIC, &dl);
    int64_t ns = dl.tv_nsec + (s->busy_timeout_ms % 1000) * RESIL_NS_PER_MS;
    dl.tv_sec += (time_t)(s->busy_timeout_ms / 1000 + ns / RESIL_NS_PER_S);
    dl.tv_nsec = (long)(ns % RESIL_NS_PER_S);
    while (s->nidle == 0) {
      int rc = pthread_cond_timedwait(&s->cv, &s->mu, &dl);
      if (rc == ETIMEDOUT && s->nidle == 0) {
        pthread_mutex_unlock(&s->mu);
        return resil__store_fail(s, RESIL_ETIMEDOUT, NULL,
                                 "no free connection in the pool (%u) within "
                                 "busy_timeout (%lld ms)",
                                 s->pool_size, (long long)s->busy_timeout_ms);
      }
    }
  }
  *conn = s->idle[--s->nidle];
  pthread_mutex_unlock(&s->mu);
  return RESIL_OK;
}

static void pool_put(resil_store *s, void *conn) {
  pthread_mutex_lock(&s->mu);
  s->idle[s->nidle++] = conn;
  pthread_cond_signal(&s->cv);
  pthread_mutex_unlock(&s->mu);
}

/* Takes a connection and makes it usable (reconnecting a lost one). */
static resil_status acquire(resil_store *s, void **conn) {
  resil_status st = pool_get(s, conn);
  if (st) return st;
  st = s->be->ready(s, *conn);
  if (st) pool_put(s, *conn);
  return st;
}

/* Whether a call that failed with *st on conn may run its whole transaction
 * once more: only for RESIL_EIO on a connection the backend reports lost
 * (a PostgreSQL restart), once per call, after reconnecting. Re-running is
 * safe because every transaction is keyed by the operation key and reads
 * the row again under its lock (see store.h). A failed reconnect replaces
 * *st (and the message) with its own failure. */
static int again(resil_store *s, void *conn, resil_status *st, int *retried) {
  if (*st != RESIL_EIO || *retried || !s->be->lost || !s->be->lost(conn)) return 0;
  *retried = 1;
  resil_status r = s->be->ready(s, conn);
  if (r) {
    *st = r;
    return 0;
  }
  return 1;
}

static int64_t wall_ms(const resil_store *s) {
  return resil_clock_wall_ms(s->clock);
}

/* now - age, rounding the age up to whole milliseconds so that "older than"
 * never admits a row younger than asked. */
static int64_t cutoff_ms(const resil_store *s, int64_t older_than_ns) {
  int64_t age_ms = older_than_ns / RESIL_NS_PER_MS + (older_than_ns % RESIL_NS_PER_MS != 0);
  return resil__sat_add(wall_ms(s), -age_ms);
}

/* ---- begin ------------------------------------------------------------------ */

/* What begin and execute check and compute before touching the database:
 * the key, the request (copied into *req, full size), rec, the fingerprint
 * and the time, into *in (which points at *req). */
static resil_status begin_input(resil_store *s, const char *key,
                                const resil_op_request *ureq,
                                const resil_op_begin_result *result,
                                const resil_op_record *rec, resil_op_request *req,
                                resil__op_input *in) {
  resil_status st;
  memset(in, 0, sizeof *in);
  if ((st = check_key(s, key)) ||
      (st = check_request(s, ureq, req, &in->method_len, &in->path_len)) ||
      (st = check_rec(s, rec)))
    return st;
  if (!result) return resil__store_fail(s, RESIL_EINVAL, "result", "must not be NULL");
  in->key = key;
  in->req = req;
  if ((st = fingerprint(req, in->method_len, in->path_len, in->fingerprint)))
    return resil__store_fail(s, st, NULL, "cannot compute the SHA-256 fingerprint");
  in->now_ms = wall_ms(s);
  return RESIL_OK;
}

/* The record of the PENDING operation that in makes (what a new key's row
 * holds once inserted). */
static resil_status pending_record(resil_store *s, const resil__op_input *in,
                                   resil_op_record *out) {
  resil__row row = {
      .key = in->key, .key_len = strlen(in->key), .state = RESIL_OP_PENDING,
      .fingerprint = in->fingerprint, .fingerprint_len = 32,
      .method = in->req->method, .method_len = in->method_len,
      .path = in->req->path, .path_len = in->path_len,
      .request_body = in->req->body, .request_body_len = in->req->body_len,
      .created_ms = in->now_ms, .updated_ms = in->now_ms, .attempts = 1};
  return resil__rec_set(s, out, &row);
}

resil_status resil_store_begin(resil_store *s, const char *key,
                               const resil_op_request *ureq,
                               resil_op_begin_result *result,
                               resil_op_record *rec) {
  if (!valid(s)) return RESIL_EMISUSE;
  enter(s, "begin");
  resil_status st;
  resil__op_input in;
  resil_op_request req_full;
  if ((st = begin_input(s, key, ureq, result, rec, &req_full, &in))) return st;

  /* The record a NEW answer returns is built before the insert commits, so
   * that running out of memory can never hide a PENDING operation the caller
   * would not know it owns. */
  resil_op_record fresh, cur;
  rec_local(&fresh);
  rec_local(&cur);
  if (rec && (st = pending_record(s, &in, &fresh))) return st;

  void *conn = NULL;
  if ((st = acquire(s, &conn))) {
    resil_op_record_clear(&fresh);
    return st;
  }
  int inserted = 0, counted = 0, retried = 0;
  do {
    inserted = counted = 0;
    resil_op_record_clear(&cur);
    st = s->be->begin(s, conn, &in, &inserted, &counted, &cur);
  } while (st && again(s, conn, &st, &retried));
  pool_put(s, conn);
  if (st) {
    resil_op_record_clear(&fresh);
    resil_op_record_clear(&cur);
    return st;
  }
  if (inserted) {
    *result = RESIL_OP_NEW;
    atomic_fetch_add_explicit(&s->n_begin[RESIL_OP_NEW], 1, memory_order_relaxed);
    resil_op_record_clear(&cur);
    rec_move(rec, &fresh);
    return RESIL_OK;
  }
  resil_op_record_clear(&fresh);
  if (memcmp(cur.fingerprint, in.fingerprint, 32) != 0) {
    /* Another request's result is not this caller's business. */
    *result = RESIL_OP_CONFLICT;
    free_response(&cur);
    resil__free(cur.alloc, cur.request_body);
    cur.request_body = NULL;
    cur.request_body_len = 0;
  } else if (cur.state == RESIL_OP_PENDING) {
    *result = RESIL_OP_IN_PROGRESS;
  } else {
    *result = RESIL_OP_REPLAY;
  }
  atomic_fetch_add_explicit(&s->n_begin[*result], 1, memory_order_relaxed);
  rec_move(rec, &cur);
  return RESIL_OK;
}

/* ---- complete ------------------------------------------------------------- */

/* Stores a copy of the effect's response in r, the record to return after
 * the commit: prepared before anything commits, so that no allocation can
 * fail once the terminal state is durable. */
static resil_status set_response(resil_store *s, resil_op_record *r,
                                 const resil_op_response *out, int64_t now_ms) {
  char *h = dup_bytes(s->alloc, out->headers, out->headers_len);
  void *b = dup_bytes(s->alloc, out->body, out->body_len);
  if (!h || !b) {
    resil__free(s->alloc, h);
    resil__free(s->alloc, b);
    return resil__store_fail(s, RESIL_ENOMEM, NULL, "out of memory copying the response");
  }
  free_response(r);
  r->state = out->failed ? RESIL_OP_FAILED : RESIL_OP_COMMITTED;
  r->status = out->status;
  r->headers = h;
  r->headers_len = out->headers_len;
  r->body = b;
  r->body_len = out->body_len;
  r->updated_ms = now_ms;
  return RESIL_OK;
}

typedef struct completion {
  int found;         /* the key exists */
  int committed;     /* this call wrote the terminal state */
  int effect_failed; /* the effect, its response or the fault hook failed */
} completion;

/* The second half of a completion, on a transaction holding the row of the
 * PENDING operation cur (locked): runs the effect, checks its response,
 * writes the terminal state and commits; on success moves cur (now
 * terminal) into rec. Shared by complete, recovery and execute. On failure
 * everything is rolled back and cur cleared. */
static resil_status effect_commit(resil_store *s, void *conn, const char *key,
                                  resil_op_effect_fn effect, void *user,
                                  resil_op_record *cur, resil_op_record *rec,
                                  completion *c) {
  const resil__store_backend *be = s->be;
  resil_status st;
  resil_store_txn tx = {0};
  be->txn_fill(conn, &tx);
  tx.store = s;
  tx.conn = conn;
  resil_op_response out;
  memset(&out, 0, sizeof out);
  out.struct_size = sizeof out;
  st = effect(user, &tx, cur, &out);
  if (st) {
    c->effect_failed = 1;
    /* A failed statement's own message says more than its status. */
    if (!tx.sql_failed)
      resil__store_fail(s, st, NULL, "the effect for '%s' returned %s; rolled back",
                        key, resil_status_name(st));
    goto fail;
  }
  if (tx.sql_failed) {
    /* The effect went on after a failed statement (or one that rolled its
     * transaction back): what it wrote is not what it meant to write. The
     * message is the statement's. */
    c->effect_failed = 1;
    st = tx.sql_failed;
    goto fail;
  }
  int open = be->txn_open(s, conn);
  if (open <= 0) {
    /* Whatever the effect wrote is not bound to the terminal state any
     * more: fail, and let recovery try again later. */
    c->effect_failed = 1;
    st = open == 0
             ? resil__store_fail(s, RESIL_EMISUSE, NULL,
                                 "the transaction for '%s' was no longer open after the "
                                 "effect (the effect ended it, or an error in its SQL "
                                 "rolled it back)", key)
             : resil__store_fail(s, RESIL_EIO, NULL,
                                 "an error in the effect's SQL aborted the transaction "
                                 "for '%s'", key);
    goto fail;
  }
  if ((st = check_response(s, &out))) {
    c->effect_failed = 1;
    goto fail;
  }
  int64_t now = wall_ms(s);
  if ((st = set_response(s, cur, &out, now))) goto fail;
  if (s->unsafe_commit_effect_early && (st = be->txn_commit(s, conn))) goto fail;
  if (s->fault_before_terminal) {
    st = s->fault_before_terminal(s->fault_user, key);
    if (st) {
      c->effect_failed = 1;
      resil__store_fail(s, st, NULL,
                        "fault injected before the terminal state of '%s' (%s)",
                        key, resil_status_name(st));
      goto fail;
    }
  }
  if (s->unsafe_commit_effect_early && (st = be->txn_begin(s, conn))) goto fail;
  if (be->write_terminal_commit) {
    if ((st = be->write_terminal_commit(s, conn, key, &out, now))) goto fail;
  } else {
    if ((st = be->write_terminal(s, conn, key, &out, now))) goto fail;
    if ((st = be->txn_commit(s, conn))) goto fail;
  }
  c->committed = 1;
  atomic_fetch_add_explicit(out.failed ? &s->n_failed : &s->n_committed, 1,
                            memory_order_relaxed);
  rec_move(rec, cur);
  return RESIL_OK;
fail:
  /* Statements the effect queued run with the commit (or the early commit,
   * or the terminal write): one of them may be what failed. */
  if (be->effect_sql_failed && be->effect_sql_failed(conn)) c->effect_failed = 1;
  be->txn_rollback(s, conn);
  resil_op_record_clear(cur);
  if (c->effect_failed)
    atomic_fetch_add_explicit(&s->n_effect_failed, 1, memory_order_relaxed);
  return st;
}

/* The completion protocol on one connection: lock the row; if it is still
 * PENDING, run the effect and write the terminal state in the same
 * transaction; commit. With unsafe_commit_effect_early the effect's
 * transaction is committed first, on purpose (I7's negative control). */
static resil_status complete_on(resil_store *s, void *conn, const char *key,
                                resil_op_effect_fn effect, void *user,
                                resil_op_record *rec, completion *c) {
  const resil__store_backend *be = s->be;
  memset(c, 0, sizeof *c);
  resil_op_record cur;
  rec_local(&cur);
  resil_status st;
  if (be->txn_begin_lock) {
    if ((st = be->txn_begin_lock(s, conn, key, &cur, &c->found))) goto fail;
  } else {
    if ((st = be->txn_begin(s, conn))) return st;
    if ((st = be->lock_row(s, conn, key, &cur, &c->found))) goto fail;
  }
  if (!c->found || cur.state != RESIL_OP_PENDING) {
    /* Nothing to do: completed by someone else meanwhile (or unknown). The
     * transaction wrote nothing. */
    be->txn_rollback(s, conn);
    if (c->found) rec_move(rec, &cur);
    return RESIL_OK;
  }
  return effect_commit(s, conn, key, effect, user, &cur, rec, c);
fail:
  be->txn_rollback(s, conn);
  resil_op_record_clear(&cur);
  return st;
}

/* resil_store_complete on a held connection: the completion protocol,
 * run once more after a lost connection (again; *retried counts for the
 * whole call); RESIL_ESTATE for a key that does not exist. */
static resil_status complete_conn(resil_store *s, void *conn, const char *key,
                                  resil_op_effect_fn effect, void *user,
                                  resil_op_record *rec, int *retried) {
  completion c;
  resil_status st;
  do
    st = complete_on(s, conn, key, effect, user, rec, &c);
  while (st && again(s, conn, &st, retried));
  if (st == RESIL_OK && !c.found) {
    if (rec) {
      resil_op_record_clear(rec);
      snprintf(rec->key, sizeof rec->key, "%s", key);
    }
    return resil__store_fail(s, RESIL_ESTATE, "key", "no operation '%s' to complete", key);
  }
  return st;
}

resil_status resil_store_complete(resil_store *s, const char *key,
                                  resil_op_effect_fn effect, void *user,
                                  resil_op_record *rec) {
  if (!valid(s)) return RESIL_EMISUSE;
  enter(s, "complete");
  resil_status st;
  if ((st = check_key(s, key)) || (st = check_rec(s, rec))) return st;
  if (!effect) return resil__store_fail(s, RESIL_EINVAL, "effect", "must not be NULL");
  void *conn = NULL;
  if ((st = acquire(s, &conn))) return st;
  int retried = 0;
  st = complete_conn(s, conn, key, effect, user, rec, &retried);
  pool_put(s, conn);
  return st;
}

/* ---- execute -------------------------------------------------------------- */

/* effects_in_store's one transaction (store.h, resil_store_execute): inserts
 * the PENDING row inside a write transaction that stays open (*inserted = 1)
 * and completes it on that transaction; *inserted = 0 (nothing written,
 * rolled back) when the key exists. */
static resil_status execute_on(resil_store *s, void *conn, const resil__op_input *in,
                               resil_op_effect_fn effect, void *user,
                               resil_op_record *rec, int *inserted, completion *c) {
  const resil__store_backend *be = s->be;
  memset(c, 0, sizeof *c);
  *inserted = 0;
  resil_op_record cur;
  rec_local(&cur);
  /* Built before anything is written: running out of memory later cannot
   * leave a row behind. */
  resil_status st = pending_record(s, in, &cur);
  if (st) return st;
  if ((st = be->insert_locked(s, conn, in, inserted)) || !*inserted) {
    be->txn_rollback(s, conn);
    resil_op_record_clear(&cur);
    *inserted = 0;
    return st;
  }
  c->found = 1;
  return effect_commit(s, conn, in->key, effect, user, &cur, rec, c);
}

/* The default mode's execute where the backend fuses begin's insert with
 * the completion's lock (insert_then_lock): begin's commit (the PENDING
 * row, durable before the effect runs) and the completion's transaction,
 * with the same steps, checks and answers as begin then complete, in one
 * round trip fewer. *done = 0 (nothing written by this call) when the key
 * already existed: the caller answers it as begin does. */
static resil_status execute_durable(resil_store *s, const char *key,
                                    const resil_op_request *ureq, resil_op_effect_fn effect,
                                    void *user, resil_op_begin_result *result,
                                    resil_op_record *rec, int *done) {
  const resil__store_backend *be = s->be;
  resil__op_input in;
  resil_op_request req_full;
  resil_status st = begin_input(s, key, ureq, result, rec, &req_full, &in);
  if (st) return st;
  /* As in begin: the record a NEW answer leaves is built before anything
   * commits; here the effect also gets it when the row is held. */
  resil_op_record fresh, cur;
  rec_local(&fresh);
  rec_local(&cur);
  if ((st = pending_record(s, &in, &fresh))) return st;
  void *conn = NULL;
  if ((st = acquire(s, &conn))) {
    resil_op_record_clear(&fresh);
    return st;
  }
  int inserted = 0, found = 0, retried = 0;
  do {
    inserted = found = 0;
    resil_op_record_clear(&cur);
    st = be->insert_then_lock(s, conn, &in, &inserted, &cur, &found);
  } while (st && !inserted && again(s, conn, &st, &retried));
  if (!inserted) {
    be->txn_rollback(s, conn);
    pool_put(s, conn);
    resil_op_record_clear(&fresh);
    resil_op_record_clear(&cur);
    return st;
  }
  /* PENDING is durable and this call owns it: from here on, what begin
   * then complete would answer. */
  *done = 1;
  *result = RESIL_OP_NEW;
  atomic_fetch_add_explicit(&s->n_begin[RESIL_OP_NEW], 1, memory_order_relaxed);
  rec_move(rec, &fresh);
  resil_op_record_clear(&fresh);
  completion c;
  memset(&c, 0, sizeof c);
  if (!st && found && cur.state == RESIL_OP_PENDING) {
    c.found = 1;
    st = effect_commit(s, conn, key, effect, user, &cur, rec, &c);
    if (!st || !again(s, conn, &st, &retried)) {
      pool_put(s, conn);
      return st;
    }
  } else {
    /* Not held (recovery took it meanwhile, or the lock failed): the
     * completion protocol proper, which waits for the lock. */
    be->txn_rollback(s, conn);
    resil_op_record_clear(&cur);
  }
  st = complete_conn(s, conn, key, effect, user, rec, &retried);
  pool_put(s, conn);
  return st;
}

resil_status resil_store_execute(resil_store *s, const char *key,
                                 const resil_op_request *ureq,
                                 resil_op_effect_fn effect, void *user,
                                 resil_op_begin_result *result,
                                 resil_op_record *rec) {
  if (!valid(s)) return RESIL_EMISUSE;
  enter(s, "execute");
  resil_status st;
  if (!effect) return resil__store_fail(s, RESIL_EINVAL, "effect", "must not be NULL");
  if (s->effects_in_store && s->be->insert_locked) {
    resil__op_input in;
    resil_op_request req_full;
    if ((st = begin_input(s, key, ureq, result, rec, &req_full, &in))) return st;
    void *conn = NULL;
    if ((st = acquire(s, &conn))) return st;
    completion c;
    int inserted = 0, retried = 0;
    do
      st = execute_on(s, conn, &in, effect, user, rec, &inserted, &c);
    while (st && again(s, conn, &st, &retried));
    pool_put(s, conn);
    if (inserted) {
      /* The caller's operation, committed with its effect or not at all:
       * after a failure nothing is stored (rec says UNKNOWN). */
      *result = RESIL_OP_NEW;
      atomic_fetch_add_explicit(&s->n_begin[RESIL_OP_NEW], 1, memory_order_relaxed);
      if (st && rec) {
        resil_op_record_clear(rec);
        snprintf(rec->key, sizeof rec->key, "%s", key);
      }
      return st;
    }
    if (st) return st;
    /* The key exists: answered as begin answers it. */
  } else if (!s->effects_in_store && s->be->insert_then_lock) {
    int done = 0;
    if ((st = execute_durable(s, key, ureq, effect, user, result, rec, &done)) || done)
      return st;
    /* The key exists: answered as begin answers it. */
  }
  if ((st = resil_store_begin(s, key, ureq, result, rec)) || *result != RESIL_OP_NEW)
    return st;
  return resil_store_complete(s, key, effect, user, rec);
}

/* ---- status -------------------------------------------------------------- */

resil_status resil_store_status(resil_store *s, const char *key, resil_op_record *rec) {
  if (!valid(s)) return RESIL_EMISUSE;
  enter(s, "status");
  resil_status st;
  if ((st = check_key(s, key))) return st;
  if (!rec) return resil__store_fail(s, RESIL_EINVAL, "rec", "must not be NULL");
  if ((st = check_rec(s, rec))) return st;
  void *conn = NULL;
  if ((st = acquire(s, &conn))) return st;
  resil_op_record cur;
  rec_local(&cur);
  int found = 0, retried = 0;
  do
    st = s->be->read_row(s, conn, key, &cur, &found);
  while (st && again(s, conn, &st, &retried));
  pool_put(s, conn);
  if (st) {
    resil_op_record_clear(&cur);
    return st;
  }
  if (!found) {
    resil_op_record_clear(rec);
    snprintf(rec->key, sizeof rec->key, "%s", key);
    return RESIL_OK;
  }
  rec_move(rec, &cur);
  return RESIL_OK;
}

/* ---- recovery and retention ----------------------------------------------- */

static resil_status recover_into(resil_store *s, int64_t older_than_ns,
                                 uint32_t max_ops, resil_op_effect_fn effect,
                                 void *user, resil_store_recovery *rep);

/* Appends key to the report's list of damaged keys, escaped and bounded. */
static void add_damaged_key(resil_store_recovery *r, const char *key) {
  char *out = r->damaged_keys;
  size_t cap = sizeof r->damaged_keys, len = strlen(out);
  if (len >= 3 && strcmp(out + len - 3, "...") == 0) return;
  char one[64 * 4 + 2];
  size_t n = 0;
  if (len) one[n++] = ',';
  for (size_t i = 0; key[i] && i < 64; i++) {
    unsigned char c = (unsigned char)key[i];
    if (c >= 0x21 && c <= 0x7e && c != ',') {
      one[n++] = (char)c;
    } else {
      snprintf(one + n, 5, "\\x%02x", c);
      n += 4;
    }
  }
  one[n] = '\0';
  if (len + n + 4 <= cap) {
    memcpy(out + len, one, n + 1);
  } else if (len + 4 <= cap) {
    memcpy(out + len, "...", 4);
  }
}

resil_status resil_store_recover(resil_store *s, int64_t older_than_ns,
                                 uint32_t max_ops, resil_op_effect_fn effect,
                                 void *user, uint32_t *recovered) {
  resil_store_recovery r;
  resil_status st =
      resil_store_recover_report(s, older_than_ns, max_ops, effect, user, &r);
  if (recovered) *recovered = r.recovered;
  return st;
}

resil_status resil_store_recover_report_sized(resil_store *s, int64_t older_than_ns,
                                              uint32_t max_ops,
                                              resil_op_effect_fn effect, void *user,
                                              resil_store_recovery *report,
                                              size_t report_size) {
  resil_store_recovery rep;
  memset(&rep, 0, sizeof rep);
  rep.struct_size = sizeof rep;
  resil__sized_out(report, report_size, &rep, sizeof rep);
  if (!valid(s)) return RESIL_EMISUSE;
  enter(s, "recover");
  resil_status st = recover_into(s, older_than_ns, max_ops, effect, user, &rep);
  resil__sized_out(report, report_size, &rep, sizeof rep);
  return st;
}

static resil_status recover_into(resil_store *s, int64_t older_than_ns,
                                 uint32_t max_ops, resil_op_effect_fn effect,
                                 void *user, resil_store_recovery *rep) {
  if (older_than_ns < 0)
    return resil__store_fail(s, RESIL_EINVAL, "older_than_ns",
                             "must be >= 0, got %lld", (long long)older_than_ns);
  if (!effect) return resil__store_fail(s, RESIL_EINVAL, "effect", "must not be NULL");
  atomic_fetch_add_explicit(&s->n_recovery_runs, 1, memory_order_relaxed);
  if (max_ops == 0) return RESIL_OK;
  void *conn = NULL;
  resil_status st;
  if ((st = acquire(s, &conn))) return st;
  resil__keylist kl = {0};
  int retried = 0;
  do {
    keylist_free(s, &kl);
    st = s->be->list_pending(s, conn, cutoff_ms(s, older_than_ns), max_ops, &kl);
  } while (st && again(s, conn, &st, &retried));
  resil_status first_effect_failure = RESIL_OK;
  char effect_msg[sizeof t_err.msg];
  resil_error effect_err;
  rep->selected = kl.count;
  for (uint32_t i = 0; st == RESIL_OK && i < kl.count; i++) {
    completion c;
    resil_status one;
    retried = 0;
    do {
      t_err.damaged = 0;
      one = complete_on(s, conn, kl.keys[i], effect, user, NULL, &c);
    } while (one && again(s, conn, &one, &retried));
    if (one == RESIL_OK) {
      rep->recovered += (uint32_t)c.committed;
      continue;
    }
    if (t_err.damaged) {
      /* Not an operation this library can re-drive: report it, leave it as
       * it is for a human, and go on with the others. */
      rep->damaged++;
      add_damaged_key(rep, kl.keys[i]);
    } else if (!c.effect_failed) {
      st = one; /* the store failed: stop here */
      break;
    } else {
      rep->failed++;
      if (first_effect_failure == RESIL_OK) {
        first_effect_failure = one;
        memcpy(effect_msg, t_err.msg, sizeof effect_msg);
        effect_err = t_err.err;
      }
    }
    /* Back off: the next call tries the other operations first. */
    retried = 0;
    do
      st = s->be->touch(s, conn, kl.keys[i], wall_ms(s));
    while (st && again(s, conn, &st, &retried));
  }
  pool_put(s, conn);
  keylist_free(s, &kl);
  atomic_fetch_add_explicit(&s->n_recovered, rep->recovered, memory_order_relaxed);
  atomic_fetch_add_explicit(&s->n_recovery_failed, rep->failed, memory_order_relaxed);
  atomic_fetch_add_explicit(&s->n_damaged, rep->damaged, memory_order_relaxed);
  if (st) return st;
  if (first_effect_failure) {
    t_err.id = s->id;
    memcpy(t_err.msg, effect_msg, sizeof t_err.msg);
    t_err.err = effect_err;
    return first_effect_failure;
  }
  if (t_err.id == s->id) t_err.id = 0;
  return RESIL_OK;
}

resil_status resil_store_sweep(resil_store *s, int64_t older_than_ns,
                               uint32_t max_rows, uint32_t *deleted) {
  if (!valid(s)) return RESIL_EMISUSE;
  enter(s, "sweep");
  if (deleted) *deleted = 0;
  if (older_than_ns < 0)
    return resil__store_fail(s, RESIL_EINVAL, "older_than_ns",
                             "must be >= 0, got %lld", (long long)older_than_ns);
  if (max_rows == 0) return RESIL_OK;
  void *conn = NULL;
  resil_status st;
  if ((st = acquire(s, &conn))) return st;
  uint32_t n = 0;
  int retried = 0;
  do
    st = s->be->sweep(s, conn, cutoff_ms(s, older_than_ns), max_rows, &n);
  while (st && again(s, conn, &st, &retried));
  pool_put(s, conn);
  if (deleted) *deleted = n;
  return st;
}

/* ---- figures ------------------------------------------------------------ */

resil_status resil_store_get_stats_sized(const resil_store *s, resil_store_stats *dst,
                                         size_t n) {
  if (!valid(s)) return RESIL_EMISUSE;
  if (!dst) return RESIL_EINVAL;
  resil_store *m = (resil_store *)s; /* atomics need non-const */
  resil_store_stats full;
  memset(&full, 0, sizeof full);
  full.struct_size = sizeof full;
#define LOAD(x) atomic_load_explicit(&m->x, memory_order_relaxed)
  full.begun_new = LOAD(n_begin[RESIL_OP_NEW]);
  full.begun_replay = LOAD(n_begin[RESIL_OP_REPLAY]);
  full.begun_in_progress = LOAD(n_begin[RESIL_OP_IN_PROGRESS]);
  full.begun_conflict = LOAD(n_begin[RESIL_OP_CONFLICT]);
  full.committed = LOAD(n_committed);
  full.failed = LOAD(n_failed);
  full.effect_failed = LOAD(n_effect_failed);
  full.recovery_runs = LOAD(n_recovery_runs);
  full.recovered = LOAD(n_recovered);
  full.recovery_failed = LOAD(n_recovery_failed);
  full.damaged = LOAD(n_damaged);
#undef LOAD
  resil__sized_out(dst, n, &full, sizeof full);
  return RESIL_OK;
}

resil_status resil_store_count_pending(resil_store *s, uint64_t *out) {
  if (!valid(s)) return RESIL_EMISUSE;
  enter(s, "count_pending");
  if (!out) return resil__store_fail(s, RESIL_EINVAL, "out", "must not be NULL");
  void *conn = NULL;
  resil_status st;
  if ((st = acquire(s, &conn))) return st;
  int retried = 0;
  do
    st = s->be->count_pending(s, conn, out);
  while (st && again(s, conn, &st, &retried));
  pool_put(s, conn);
  return st;
}
