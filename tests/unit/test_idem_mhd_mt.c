/* resil_idem_mhd: the libmicrohttpd helper for idempotent operations,
 * driven over real sockets with bare libcurl requests against a daemon
 * whose access handler is resil_idem_mhd_access, on a SQLite operation store
 * in a temporary directory. The handler's effect is a row in a table of the
 * same database, counted with a connection of the test's own. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "test_util.h"

#ifdef RESIL_HAVE_STORE

#include <curl/curl.h>
#include <jansson.h>
#include <sqlite3.h>

#include "resil/idem_mhd.h"
#include "resil/store.h"

/* ---- the server under test ------------------------------------------------ */

typedef enum handler_mode {
  H_PAY,      /* insert a row, answer 201 with Location */
  H_FAIL,     /* insert a row, then fail: everything rolls back */
  H_REFUSE,   /* business refusal: FAILED 402, no row */
  H_BINARY,   /* 200 with a body that is not UTF-8 */
  H_BAD,      /* an invalid response (status 42) */
  H_LONG,     /* 200 with a 700-byte header value */
  H_100,      /* insert a row, answer 100 (not a final status) */
  H_PEEK      /* read the key's row from a connection of its own, then pay */
} handler_mode;

typedef struct server {
  char dir[64];
  char db[128];
  char uri[160];
  resil_store *store;
  resil_idem_mhd *idem;
  struct MHD_Daemon *d;
  sqlite3 *sql;
  char base[64];
  /* Shared with the server's threads. */
  atomic_int mode;          /* a handler_mode */
  atomic_int drop;          /* on_committed answers RESIL_IDEM_DROP */
  atomic_int pending_seen;  /* on_pending calls */
  atomic_int handler_runs;  /* handler calls for requests (not recovery) */
  atomic_int peeked;        /* H_PEEK: the row's state seen, -1 for none */
  atomic_int fault;         /* the store's fault_before_terminal fails */
  atomic_int hook_mistakes; /* a hook or handler saw what it must not */
} server;

/* Set by on_pending, cleared by the request's handler on the same thread:
 * the hook ran just before the handler. */
static _Thread_local int tl_pending_told;

static const char pay_headers[] =
    "Content-Type: application/json\r\nLocation: /payments/1\r\n";
static const unsigned char binary_body[] = {0x00, 0xff, 0xfe, 'o', 'k'};

/* The state of key's row in the last committed state of the database,
 * read on a connection of its own; -1 for no row, -2 on error. */
static int committed_state(const char *db, const char *key) {
  sqlite3 *c = NULL;
  sqlite3_stmt *q = NULL;
  int state = -2;
  if (sqlite3_open_v2(db, &c, SQLITE_OPEN_READONLY, NULL) == SQLITE_OK &&
      sqlite3_prepare_v2(c, "SELECT state FROM resil_operations WHERE key = ?1",
                         -1, &q, NULL) == SQLITE_OK) {
    sqlite3_bind_text(q, 1, key, -1, SQLITE_STATIC);
    int rc = sqlite3_step(q);
    state = rc == SQLITE_ROW ? sqlite3_column_int(q, 0)
                             : rc == SQLITE_DONE ? -1 : -2;
  }
  sqlite3_finalize(q);
  sqlite3_close(c);
  return state;
}

static resil_status handler(void *user, resil_idem_call *call,
                            resil_op_response *out) {
  server *s = user;
  sqlite3 *db = resil_store_txn_sqlite(call->tx);
  /* No cmocka assertion off the test's thread: count, check later. */
  if (!db || resil_store_txn_pg(call->tx) || !call->pending) {
    atomic_fetch_add(&s->hook_mistakes, 1);
    return RESIL_EIO;
  }
  if (!call->recovering) {
    atomic_fetch_add(&s->handler_runs, 1);
    if (!tl_pending_told)
      atomic_fetch_add(&s->hook_mistakes, 1);
    tl_pending_told = 0;
  }
  int mode = atomic_load(&s->mode);
  if (mode == H_PEEK)
    atomic_store(&s->peeked, committed_state(s->db, call->key));
  if (mode == H_REFUSE) {
    out->status = 402;
    out->failed = 1;
    out->body = "{\"error\":\"refused\"}";
    out->body_len = strlen(out->body);
    return RESIL_OK;
  }
  if (mode == H_BINARY) {
    out->status = 200;
    out->body = binary_body;
    out->body_len = sizeof binary_body;
    return RESIL_OK;
  }
  if (mode == H_BAD) {
    out->status = 42;
    return RESIL_OK;
  }
  if (mode == H_100) {
    out->status = 100;
    return RESIL_OK;
  }
  if (mode == H_LONG) {
    char *hd = resil_idem_call_alloc(call, 800);
    if (!hd)
      return RESIL_ENOMEM;
    memcpy(hd, "X-Long: ", 8);
    memset(hd + 8, 'v', 700);
    memcpy(hd + 708, "\r\n", 3);
    out->status = 200;
    out->headers = hd;
    out->headers_len = 710;
    return RESIL_OK;
  }
  sqlite3_stmt *st = NULL;
  int ok = sqlite3_prepare_v2(db, "INSERT INTO effects(k) VALUES (?1)", -1, &st,
                              NULL) == SQLITE_OK;
  if (ok) {
    sqlite3_bind_text(st, 1, call->key, -1, SQLITE_TRANSIENT);
    ok = sqlite3_step(st) == SQLITE_DONE;
  }
  sqlite3_finalize(st);
  if (!ok || mode == H_FAIL)
    return RESIL_EIO;
  char *body = resil_idem_call_alloc(call, 300);
  if (!body)
    return RESIL_ENOMEM;
  snprintf(body, 300, "{\"key\":\"%s\",\"recovering\":%d}", call->key,
           call->recovering);
  out->status = 201;
  out->headers = pay_headers;
  out->headers_len = sizeof pay_headers - 1;
  out->body = body;
  out->body_len = strlen(body);
  return RESIL_OK;
}

static void on_pending(void *user, const resil_idem_call *call) {
  server *s = user;
  if (call->tx || call->recovering || !call->pending ||
      call->pending->state != RESIL_OP_PENDING ||
      strcmp(call->pending->method, "POST") != 0 ||
      strcmp(call->pending->key, call->key) != 0 || tl_pending_told)
    atomic_fetch_add(&s->hook_mistakes, 1);
  tl_pending_told = 1;
  atomic_fetch_add(&s->pending_seen, 1);
}

static resil_idem_action on_committed(void *user, const resil_idem_call *call,
                                      const resil_op_record *rec) {
  server *s = user;
  if (call->tx || !call->pending || call->pending->state != RESIL_OP_PENDING ||
      call->pending->status != 0 || strcmp(call->pending->key, call->key) != 0 ||
      (rec->state != RESIL_OP_COMMITTED && rec->state != RESIL_OP_FAILED))
    atomic_fetch_add(&s->hook_mistakes, 1);
  return atomic_load(&s->drop) ? RESIL_IDEM_DROP : RESIL_IDEM_SEND;
}

static int extra(void *user, const resil_op_record *rec, char *buf,
                 size_t len) {
  (void)user;
  return snprintf(buf, len, "\"seen_state\":%d", (int)rec->state);
}

/* The store's fault hook: after a handler succeeded, before the terminal
 * state is written. */
static resil_status fault_hook(void *user, const char *key) {
  (void)key;
  server *s = user;
  return atomic_load(&s->fault) ? RESIL_EIO : RESIL_OK;
}

static void server_cfg(server *s, resil_idem_mhd_config *cfg) {
  resil_idem_mhd_config_init(cfg);
  cfg->store = s->store;
  cfg->handler = handler;
  cfg->user = s;
  cfg->recover_path = "/__recover";
  cfg->on_pending = on_pending;
  cfg->on_committed = on_committed;
  cfg->status_extra = extra;
}

/* The documented MHD options (idem_mhd.h); a test may shorten them. */
static unsigned g_timeout_s = RESIL_IDEM_MHD_CONNECTION_TIMEOUT_S;
static unsigned g_limit = RESIL_IDEM_MHD_CONNECTION_LIMIT;

/* Starts a server on a store with the given effects_in_store; tweak (may
 * be NULL) adjusts the helper's config. */
static server *server_open(void (*tweak)(resil_idem_mhd_config *),
                           int effects_in_store) {
  server *s = calloc(1, sizeof *s);
  assert_non_null(s);
  snprintf(s->dir, sizeof s->dir, "/tmp/resil-idem-XXXXXX");
  assert_non_null(mkdtemp(s->dir));
  snprintf(s->db, sizeof s->db, "%s/ops.db", s->dir);
  snprintf(s->uri, sizeof s->uri, "sqlite:%s", s->db);
  resil_store_config sc;
  resil_store_config_init(&sc);
  sc.effects_in_store = effects_in_store;
  sc.fault_before_terminal = fault_hook;
  sc.fault_user = s;
  assert_status(RESIL_OK, resil_store_open(s->uri, &sc, &s->store, NULL));
  assert_int_equal(sqlite3_open_v2(s->db, &s->sql, SQLITE_OPEN_READWRITE, NULL),
                   SQLITE_OK);
  sqlite3_busy_timeout(s->sql, 10000);
  assert_int_equal(sqlite3_exec(s->sql, "CREATE TABLE effects(k TEXT)", NULL,
                                NULL, NULL),
                   SQLITE_OK);
  resil_idem_mhd_config cfg;
  server_cfg(s, &cfg);
  if (tweak)
    tweak(&cfg);
  resil_error err;
  assert_status(RESIL_OK, resil_idem_mhd_new(&cfg, &s->idem, &err));
  s->d = MHD_start_daemon(
      MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION |
          MHD_USE_AUTO | MHD_USE_ITC,
      0, NULL, NULL, resil_idem_mhd_access, s->idem,
      MHD_OPTION_NOTIFY_COMPLETED, resil_idem_mhd_completed, s->idem,
      MHD_OPTION_CONNECTION_TIMEOUT, g_timeout_s, MHD_OPTION_CONNECTION_LIMIT,
      g_limit, MHD_OPTION_UNESCAPE_CALLBACK, resil_idem_mhd_unescape, NULL,
      MHD_OPTION_END);
  assert_non_null(s->d);
  const union MHD_DaemonInfo *di =
      MHD_get_daemon_info(s->d, MHD_DAEMON_INFO_BIND_PORT);
  snprintf(s->base, sizeof s->base, "http://127.0.0.1:%u", (unsigned)di->port);
  return s;
}

static server *server_start(void (*tweak)(resil_idem_mhd_config *)) {
  return server_open(tweak, 0);
}

static void server_stop(server *s) {
  MHD_stop_daemon(s->d);
  int mistakes = atomic_load(&s->hook_mistakes);
  resil_idem_mhd_free(s->idem);
  resil_store_close(s->store);
  sqlite3_close(s->sql);
  char p[160];
  static const char *const suffix[] = {"", "-wal", "-shm"};
  for (int i = 0; i < 3; i++) {
    snprintf(p, sizeof p, "%s%s", s->db, suffix[i]);
    unlink(p);
  }
  rmdir(s->dir);
  free(s);
  assert_int_equal(mistakes, 0);
}

static long rows(server *s, const char *key) {
  sqlite3_stmt *st = NULL;
  long n = -1;
  assert_int_equal(sqlite3_prepare_v2(s->sql,
                                      "SELECT count(*) FROM effects WHERE k = ?1",
                                      -1, &st, NULL),
                   SQLITE_OK);
  sqlite3_bind_text(st, 1, key, -1, SQLITE_STATIC);
  if (sqlite3_step(st) == SQLITE_ROW)
    n = (long)sqlite3_column_int64(st, 0);
  sqlite3_finalize(st);
  return n;
}

/* ---- bare HTTP ------------------------------------------------------------ */

typedef struct reply {
  CURLcode code;
  long status;
  char *body;
  size_t len;
  char replayed[16], retry_after[16], key[80], location[64], allow[32],
      ctype[64], xlong[800];
} reply;

static size_t on_body(char *data, size_t size, size_t n, void *user) {
  reply *r = user;
  size_t add = size * n;
  char *p = realloc(r->body, r->len + add + 1);
  if (!p)
    return 0;
  memcpy(p + r->len, data, add);
  r->body = p;
  r->len += add;
  r->body[r->len] = '\0';
  return add;
}

static void header(CURL *h, const char *name, char *out, size_t n) {
  struct curl_header *hd = NULL;
  out[0] = '\0';
  if (curl_easy_header(h, name, 0, CURLH_HEADER, -1, &hd) == CURLHE_OK)
    snprintf(out, n, "%s", hd->value);
}

/* One request on a fresh connection. key NULL sends no key header. */
static reply http(server *s, const char *method, const char *path,
                  const char *key, const void *body, size_t len) {
  reply r;
  memset(&r, 0, sizeof r);
  CURL *h = curl_easy_init();
  assert_non_null(h);
  char url[256], kh[320];
  snprintf(url, sizeof url, "%s%s", s->base, path);
  curl_easy_setopt(h, CURLOPT_URL, url);
  curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, 20000L);
  curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, method);
  curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
  curl_easy_setopt(h, CURLOPT_WRITEDATA, &r);
  struct curl_slist *hs = curl_slist_append(NULL, "Expect:");
  if (key) {
    snprintf(kh, sizeof kh, "Idempotency-Key: %s", key);
    hs = curl_slist_append(hs, kh);
  }
  curl_easy_setopt(h, CURLOPT_HTTPHEADER, hs);
  if (body) {
    curl_easy_setopt(h, CURLOPT_POSTFIELDS, body);
    curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE, (long)len);
  }
  r.code = curl_easy_perform(h);
  curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &r.status);
  if (r.code == CURLE_OK) {
    header(h, "Idempotent-Replayed", r.replayed, sizeof r.replayed);
    header(h, "Retry-After", r.retry_after, sizeof r.retry_after);
    header(h, "Idempotency-Key", r.key, sizeof r.key);
    header(h, "Location", r.location, sizeof r.location);
    header(h, "Allow", r.allow, sizeof r.allow);
    header(h, "Content-Type", r.ctype, sizeof r.ctype);
    header(h, "X-Long", r.xlong, sizeof r.xlong);
  }
  curl_slist_free_all(hs);
  curl_easy_cleanup(h);
  if (!r.body)
    r.body = calloc(1, 1);
  return r;
}

static reply post(server *s, const char *key, const char *body) {
  return http(s, "POST", "/payments", key, body, strlen(body));
}

static json_t *json_of(const reply *r) {
  json_t *j = json_loadb(r->body, r->len, 0, NULL);
  if (!j)
    fail_msg("not JSON: %s", r->body);
  return j;
}

static const char *jstr(json_t *j, const char *k) {
  const char *v = json_string_value(json_object_get(j, k));
  if (!v)
    fail_msg("no string %s", k);
  return v;
}

static void stats(server *s, resil_idem_mhd_stats *st) {
  assert_status(RESIL_OK, resil_idem_mhd_get_stats(s->idem, st));
}

/* ---- configuration ---------------------------------------------------------- */

static void config_init_writes_documented_defaults(void **st) {
  (void)st;
  resil_idem_mhd_config c;
  memset(&c, 0x5a, sizeof c);
  resil_idem_mhd_config_init(&c);
  assert_int_equal(c.struct_size, sizeof c);
  assert_string_equal(c.name, "idem");
  assert_null(c.store);
  assert_null(c.handler);
  assert_string_equal(c.key_header, "Idempotency-Key");
  assert_int_equal(c.require_key, 1);
  assert_int_equal(c.retry_after_s, 1);
  assert_int_equal(c.max_body_bytes, 1 << 20);
  assert_string_equal(c.status_prefix, "/operations/");
  assert_null(c.recover_path);
  assert_int_equal(c.recover_older_than_ns, 0);
  assert_int_equal(c.recover_max_ops, 100);
  assert_null(c.on_pending);
  assert_null(c.on_committed);
  assert_null(c.status_extra);
  assert_null(c.alloc);
  assert_null(c.log);
  assert_null(c.log_user);
  resil_idem_mhd_config_init(NULL); /* no-op */
}

/* A caller built against the 0.1 layouts (no log fields, no damaged
 * counter) works: the library reads and writes only what it has. */
static void older_layouts_are_read_and_written_only_as_far_as_they_go(void **st) {
  (void)st;
  server *s = server_start(NULL);
  resil_idem_mhd_config c;
  server_cfg(s, &c);
  memset(&c.log, 0x5a, sizeof c.log); /* garbage past the old layout */
  memset(&c.log_user, 0x5a, sizeof c.log_user);
  c.struct_size = offsetof(resil_idem_mhd_config, log);
  resil_idem_mhd *old = NULL;
  resil_error err;
  assert_status(RESIL_OK, resil_idem_mhd_new(&c, &old, &err));
  resil_idem_mhd_free(old);
  resil_idem_mhd_stats sx;
  memset(&sx, 0x5a, sizeof sx);
  size_t old_size = offsetof(resil_idem_mhd_stats, damaged);
  assert_status(RESIL_OK, resil_idem_mhd_get_stats_sized(s->idem, &sx, old_size));
  assert_int_equal(sx.struct_size, old_size);
  assert_int_equal(sx.requests, 0);
  uint64_t untouched;
  memset(&untouched, 0x5a, sizeof untouched);
  assert_memory_equal(&sx.damaged, &untouched, sizeof untouched);
  /* Never initialised: refused, saying what to call. */
  memset(&c, 0, sizeof c);
  assert_status(RESIL_EINVAL, resil_idem_mhd_new(&c, &old, &err));
  assert_non_null(strstr(err.msg, "call resil_idem_mhd_config_init()"));
  server_stop(s);
}

static resil_status try_new(void (*bad)(resil_idem_mhd_config *),
                            resil_error *err) {
  resil_idem_mhd_config c;
  resil_idem_mhd_config_init(&c);
  c.store = (resil_store *)(uintptr_t)1; /* never used by _new */
  c.handler = handler;
  bad(&c);
  resil_idem_mhd *h = NULL;
  resil_status rc = resil_idem_mhd_new(&c, &h, err);
  assert_null(h);
  return rc;
}

static void bad_size(resil_idem_mhd_config *c) { c->struct_size = 0; }
static void bad_store(resil_idem_mhd_config *c) { c->store = NULL; }
static void bad_handler(resil_idem_mhd_config *c) { c->handler = NULL; }
static void bad_header_empty(resil_idem_mhd_config *c) { c->key_header = ""; }
static void bad_header_space(resil_idem_mhd_config *c) { c->key_header = "Idem Key"; }
static void bad_require(resil_idem_mhd_config *c) { c->require_key = 2; }
static void bad_retry_after(resil_idem_mhd_config *c) { c->retry_after_s = 86401; }
static void bad_body(resil_idem_mhd_config *c) {
  c->max_body_bytes = ((size_t)1 << 30) + 1;
}
static void bad_prefix(resil_idem_mhd_config *c) { c->status_prefix = "ops/"; }
static void bad_recover_path(resil_idem_mhd_config *c) { c->recover_path = "/a b"; }
static void bad_older(resil_idem_mhd_config *c) { c->recover_older_than_ns = -1; }
static void bad_max_ops(resil_idem_mhd_config *c) { c->recover_max_ops = 0; }

static void new_names_each_bad_field(void **st) {
  (void)st;
  static const struct {
    void (*bad)(resil_idem_mhd_config *);
    const char *field;
    int ranged;
  } cases[] = {
      {bad_size, "struct_size", 0},
      {bad_store, "store", 0},
      {bad_handler, "handler", 0},
      {bad_header_empty, "key_header", 0},
      {bad_header_space, "key_header", 0},
      {bad_require, "require_key", 1},
      {bad_retry_after, "retry_after_s", 1},
      {bad_body, "max_body_bytes", 1},
      {bad_prefix, "status_prefix", 0},
      {bad_recover_path, "recover_path", 0},
      {bad_older, "recover_older_than_ns", 1},
      {bad_max_ops, "recover_max_ops", 1},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    resil_error err;
    assert_status(RESIL_EINVAL, try_new(cases[i].bad, &err));
    assert_string_equal(err.field, cases[i].field);
    assert_int_equal(err.has_range, cases[i].ranged);
  }
  resil_idem_mhd *h = NULL;
  assert_status(RESIL_EINVAL, resil_idem_mhd_new(NULL, &h, NULL));
  resil_idem_mhd_config c;
  resil_idem_mhd_config_init(&c);
  assert_status(RESIL_EINVAL, resil_idem_mhd_new(&c, NULL, NULL));
}

static void new_survives_every_allocation_failure(void **st) {
  (void)st;
  resil_idem_mhd_config c;
  resil_idem_mhd_config_init(&c);
  c.store = (resil_store *)(uintptr_t)1;
  c.handler = handler;
  c.recover_path = "/__recover";
  for (long n = 1;; n++) {
    test_alloc ta;
    test_alloc_init(&ta, n);
    c.alloc = &ta.a;
    resil_idem_mhd *h = NULL;
    resil_status rc = resil_idem_mhd_new(&c, &h, NULL);
    if (rc == RESIL_OK) {
      assert_string_equal(resil_idem_mhd_name(h), "idem");
      resil_idem_mhd_free(h);
      assert_int_equal(ta.live, 0);
      assert_true(n > 1);
      break;
    }
    assert_status(RESIL_ENOMEM, rc);
    assert_null(h);
    assert_int_equal(ta.live, 0);
    assert_true(n < 50);
  }
}

static void invalid_handles_are_refused(void **st) {
  (void)st;
  resil_idem_mhd_stats s;
  assert_status(RESIL_EMISUSE, resil_idem_mhd_get_stats(NULL, &s));
  assert_null(resil_idem_mhd_name(NULL));
  assert_status(RESIL_EMISUSE, resil_idem_mhd_recover(NULL, 0, 1, NULL));
  assert_null(resil_idem_call_alloc(NULL, 8));
  resil_idem_mhd_free(NULL);
  server *sv = server_start(NULL);
  assert_status(RESIL_EINVAL, resil_idem_mhd_get_stats(sv->idem, NULL));
  uint32_t n = 7;
  assert_status(RESIL_EINVAL, resil_idem_mhd_recover(sv->idem, -1, 1, &n));
  assert_int_equal(n, 0);
  assert_status(RESIL_EINVAL, resil_idem_mhd_recover(sv->idem, 0, 0, NULL));
  assert_status(RESIL_EINVAL, resil_idem_mhd_recover(sv->idem, 0, 100001, NULL));
  server_stop(sv);
}

/* ---- operations ------------------------------------------------------------- */

static void new_key_runs_once_and_replays_byte_for_byte(void **st) {
  (void)st;
  server *s = server_start(NULL);
  reply a = post(s, "k-1", "{\"amount\":1}");
  assert_int_equal(a.code, CURLE_OK);
  assert_int_equal(a.status, 201);
  assert_string_equal(a.replayed, "");
  assert_string_equal(a.location, "/payments/1");
  assert_string_equal(a.ctype, "application/json");
  assert_string_equal(a.body, "{\"key\":\"k-1\",\"recovering\":0}");
  assert_int_equal(atomic_load(&s->pending_seen), 1);
  reply b = post(s, "k-1", "{\"amount\":1}");
  assert_int_equal(b.status, 201);
  assert_string_equal(b.replayed, "true");
  assert_string_equal(b.location, "/payments/1");
  assert_int_equal(b.len, a.len);
  assert_memory_equal(b.body, a.body, a.len);
  assert_int_equal(rows(s, "k-1"), 1);
  /* Hooks run for new operations only. */
  assert_int_equal(atomic_load(&s->pending_seen), 1);
  resil_idem_mhd_stats sx;
  stats(s, &sx);
  assert_int_equal(sx.requests, 2);
  assert_int_equal(sx.executed, 1);
  assert_int_equal(sx.replayed, 1);
  free(a.body);
  free(b.body);
  server_stop(s);
}

static void other_request_with_the_key_is_a_conflict(void **st) {
  (void)st;
  server *s = server_start(NULL);
  reply a = post(s, "k-2", "{\"amount\":1}");
  reply b = post(s, "k-2", "{\"amount\":2}");
  reply c = http(s, "PUT", "/payments", "k-2", "{\"amount\":1}", 12);
  reply d = http(s, "POST", "/other", "k-2", "{\"amount\":1}", 12);
  assert_int_equal(a.status, 201);
  assert_int_equal(b.status, 422);
  assert_int_equal(c.status, 422);
  assert_int_equal(d.status, 422);
  json_t *j = json_of(&b);
  assert_string_equal(jstr(j, "key"), "k-2");
  json_decref(j);
  assert_int_equal(rows(s, "k-2"), 1);
  resil_idem_mhd_stats sx;
  stats(s, &sx);
  assert_int_equal(sx.conflicts, 3);
  free(a.body);
  free(b.body);
  free(c.body);
  free(d.body);
  server_stop(s);
}

static void missing_or_invalid_key_is_refused_before_the_store(void **st) {
  (void)st;
  server *s = server_start(NULL);
  reply a = post(s, NULL, "{}");
  assert_int_equal(a.status, 400);
  json_t *j = json_of(&a);
  assert_string_equal(jstr(j, "error"), "missing Idempotency-Key");
  json_decref(j);
  reply b = post(s, "has space", "{}");
  assert_int_equal(b.status, 400);
  char longkey[300];
  memset(longkey, 'k', 256);
  longkey[256] = '\0';
  reply c = post(s, longkey, "{}");
  assert_int_equal(c.status, 400);
  assert_int_equal(atomic_load(&s->pending_seen), 0);
  resil_idem_mhd_stats sx;
  stats(s, &sx);
  assert_int_equal(sx.rejected, 3);
  assert_int_equal(sx.executed, 0);
  free(a.body);
  free(b.body);
  free(c.body);
  server_stop(s);
}

static void optional_key(resil_idem_mhd_config *c) { c->require_key = 0; }

static void without_required_key_a_generated_key_is_returned(void **st) {
  (void)st;
  server *s = server_start(optional_key);
  reply a = post(s, NULL, "{\"amount\":1}");
  assert_int_equal(a.status, 201);
  assert_int_equal(strlen(a.key), 36);
  assert_memory_equal(a.key, "srv-", 4);
  assert_int_equal(rows(s, a.key), 1);
  char path[128];
  snprintf(path, sizeof path, "/operations/%s", a.key);
  reply b = http(s, "GET", path, NULL, NULL, 0);
  assert_int_equal(b.status, 200);
  json_t *j = json_of(&b);
  assert_string_equal(jstr(j, "state"), "COMMITTED");
  json_decref(j);
  free(a.body);
  free(b.body);
  server_stop(s);
}

static void status_route_reports_each_state(void **st) {
  (void)st;
  server *s = server_start(NULL);
  reply a = post(s, "k-3", "{\"amount\":1}");
  reply b = http(s, "GET", "/operations/k-3", NULL, NULL, 0);
  assert_int_equal(b.status, 200);
  json_t *j = json_of(&b);
  assert_string_equal(jstr(j, "state"), "COMMITTED");
  assert_int_equal(json_integer_value(json_object_get(j, "status")), 201);
  assert_string_equal(jstr(j, "body"), a.body);
  assert_int_equal(json_integer_value(json_object_get(j, "attempts")), 1);
  assert_int_equal(json_integer_value(json_object_get(j, "seen_state")),
                   RESIL_OP_COMMITTED);
  assert_true(json_integer_value(json_object_get(j, "created_ms")) > 0);
  json_decref(j);
  reply c = http(s, "GET", "/operations/nobody", NULL, NULL, 0);
  assert_int_equal(c.status, 404);
  j = json_of(&c);
  assert_string_equal(jstr(j, "state"), "UNKNOWN");
  json_decref(j);
  reply d = http(s, "POST", "/operations/k-3", NULL, "", 0);
  assert_int_equal(d.status, 405);
  assert_string_equal(d.allow, "GET, HEAD");
  resil_idem_mhd_stats sx;
  stats(s, &sx);
  assert_int_equal(sx.status_queries, 3);
  assert_int_equal(sx.requests, 1);
  free(a.body);
  free(b.body);
  free(c.body);
  free(d.body);
  server_stop(s);
}

static void handler_failure_rolls_back_and_leaves_pending_for_recovery(
    void **st) {
  (void)st;
  server *s = server_start(NULL);
  atomic_store(&s->mode, H_FAIL);
  reply a = post(s, "k-4", "{\"amount\":1}");
  assert_int_equal(a.status, 500);
  assert_string_equal(a.retry_after, "1");
  json_t *j = json_of(&a);
  assert_string_equal(jstr(j, "state"), "PENDING");
  json_decref(j);
  assert_int_equal(rows(s, "k-4"), 0); /* the INSERT was rolled back */
  /* The owner is gone but the key is PENDING: 409 until recovery. */
  reply b = post(s, "k-4", "{\"amount\":1}");
  assert_int_equal(b.status, 409);
  assert_string_equal(b.retry_after, "1");
  atomic_store(&s->mode, H_PAY);
  uint32_t n = 0;
  assert_status(RESIL_OK, resil_idem_mhd_recover(s->idem, 0, 10, &n));
  assert_int_equal(n, 1);
  assert_int_equal(rows(s, "k-4"), 1);
  assert_status(RESIL_OK, resil_idem_mhd_recover(s->idem, 0, 10, &n));
  assert_int_equal(n, 0);
  reply c = post(s, "k-4", "{\"amount\":1}");
  assert_int_equal(c.status, 201);
  assert_string_equal(c.replayed, "true");
  /* The stored answer is the recovery's: the handler knew it recovered. */
  assert_string_equal(c.body, "{\"key\":\"k-4\",\"recovering\":1}");
  resil_idem_mhd_stats sx;
  stats(s, &sx);
  assert_int_equal(sx.handler_failed, 1);
  assert_int_equal(sx.in_progress, 1);
  assert_int_equal(sx.recovered, 1);
  free(a.body);
  free(b.body);
  free(c.body);
  server_stop(s);
}

static void invalid_handler_response_is_never_stored(void **st) {
  (void)st;
  server *s = server_start(NULL);
  atomic_store(&s->mode, H_BAD);
  reply a = post(s, "k-5", "{}");
  assert_int_equal(a.status, 500);
  reply b = http(s, "GET", "/operations/k-5", NULL, NULL, 0);
  json_t *j = json_of(&b);
  assert_string_equal(jstr(j, "state"), "PENDING");
  json_decref(j);
  free(a.body);
  free(b.body);
  server_stop(s);
}

static void business_refusal_is_stored_failed_and_replayed(void **st) {
  (void)st;
  server *s = server_start(NULL);
  atomic_store(&s->mode, H_REFUSE);
  reply a = post(s, "k-6", "{}");
  reply b = post(s, "k-6", "{}");
  assert_int_equal(a.status, 402);
  assert_int_equal(b.status, 402);
  assert_string_equal(b.replayed, "true");
  assert_string_equal(a.body, b.body);
  reply c = http(s, "GET", "/operations/k-6", NULL, NULL, 0);
  json_t *j = json_of(&c);
  assert_string_equal(jstr(j, "state"), "FAILED");
  json_decref(j);
  assert_int_equal(rows(s, "k-6"), 0);
  free(a.body);
  free(b.body);
  free(c.body);
  server_stop(s);
}

static void binary_body_is_replayed_exactly_and_reported_in_base64(void **st) {
  (void)st;
  server *s = server_start(NULL);
  atomic_store(&s->mode, H_BINARY);
  reply a = post(s, "k-7", "{}");
  reply b = post(s, "k-7", "{}");
  assert_int_equal(a.len, sizeof binary_body);
  assert_memory_equal(a.body, binary_body, sizeof binary_body);
  assert_int_equal(b.len, sizeof binary_body);
  assert_memory_equal(b.body, binary_body, sizeof binary_body);
  reply c = http(s, "GET", "/operations/k-7", NULL, NULL, 0);
  json_t *j = json_of(&c);
  assert_null(json_object_get(j, "body"));
  assert_string_equal(jstr(j, "body_base64"), "AP/+b2s=");
  json_decref(j);
  free(a.body);
  free(b.body);
  free(c.body);
  server_stop(s);
}

static void long_stored_header_is_replayed_whole(void **st) {
  (void)st;
  server *s = server_start(NULL);
  atomic_store(&s->mode, H_LONG);
  reply a = post(s, "k-long", "{}");
  reply b = post(s, "k-long", "{}");
  assert_int_equal(a.status, 200);
  assert_int_equal(strlen(a.xlong), 700);
  assert_string_equal(b.replayed, "true");
  assert_string_equal(b.xlong, a.xlong);
  free(a.body);
  free(b.body);
  server_stop(s);
}

static void small_bodies(resil_idem_mhd_config *c) { c->max_body_bytes = 16; }

static void body_over_the_limit_is_refused_after_reading_it(void **st) {
  (void)st;
  server *s = server_start(small_bodies);
  reply a = post(s, "k-8", "{\"amount\":12345}"); /* 16 bytes */
  reply b = post(s, "k-9", "{\"amount\":123456}");
  assert_int_equal(a.status, 201);
  assert_int_equal(b.status, 413);
  assert_int_equal(rows(s, "k-9"), 0);
  free(a.body);
  free(b.body);
  server_stop(s);
}

static void dropped_response_closes_the_connection_after_the_commit(
    void **st) {
  (void)st;
  server *s = server_start(NULL);
  atomic_store(&s->drop, 1);
  reply a = post(s, "k-10", "{}");
  assert_int_equal(a.code, CURLE_GOT_NOTHING);
  assert_int_equal(rows(s, "k-10"), 1);
  atomic_store(&s->drop, 0);
  reply b = post(s, "k-10", "{}");
  assert_int_equal(b.status, 201);
  assert_string_equal(b.replayed, "true");
  resil_idem_mhd_stats sx;
  stats(s, &sx);
  assert_int_equal(sx.dropped, 1);
  free(a.body);
  free(b.body);
  server_stop(s);
}

static void recovery_route_checks_method_and_arguments(void **st) {
  (void)st;
  server *s = server_start(NULL);
  reply a = http(s, "GET", "/__recover", NULL, NULL, 0);
  assert_int_equal(a.status, 405);
  assert_string_equal(a.allow, "POST");
  reply b = http(s, "POST", "/__recover?max=0", NULL, "", 0);
  assert_int_equal(b.status, 400);
  reply c = http(s, "POST", "/__recover?older_than_ms=x", NULL, "", 0);
  assert_int_equal(c.status, 400);
  reply d = http(s, "POST", "/__recover?older_than_ms=0&max=5", NULL, "", 0);
  assert_int_equal(d.status, 200);
  assert_string_equal(d.body, "{\"recovered\":0}");
  free(a.body);
  free(b.body);
  free(c.body);
  free(d.body);
  server_stop(s);
}

/* ---- concurrency ------------------------------------------------------------ */

#define SAME_KEY_THREADS 8

typedef struct racer {
  server *s;
  pthread_barrier_t *go;
  int recovery;
  long status;
  int replayed;
} racer;

static void *race(void *p) {
  racer *r = p;
  pthread_barrier_wait(r->go);
  if (r->recovery) {
    uint32_t n = 0;
    r->status =
        resil_idem_mhd_recover(r->s->idem, 0, 10, &n) == RESIL_OK ? (long)n : -1;
    return NULL;
  }
  reply a = post(r->s, "same-key", "{\"amount\":1}");
  r->status = a.status;
  r->replayed = strcmp(a.replayed, "true") == 0;
  free(a.body);
  return NULL;
}

/* effects_in_store: the key is stored only with its result, so the others
 * wait and replay (never 409) and recovery finds nothing. */
static void same_key_race(int effects_in_store) {
  server *s = server_open(NULL, effects_in_store);
  pthread_barrier_t go;
  pthread_barrier_init(&go, NULL, SAME_KEY_THREADS + 1);
  racer rs[SAME_KEY_THREADS + 1];
  pthread_t th[SAME_KEY_THREADS + 1];
  for (int i = 0; i <= SAME_KEY_THREADS; i++) {
    rs[i] = (racer){.s = s, .go = &go, .recovery = i == SAME_KEY_THREADS};
    assert_int_equal(pthread_create(&th[i], NULL, race, &rs[i]), 0);
  }
  for (int i = 0; i <= SAME_KEY_THREADS; i++)
    pthread_join(th[i], NULL);
  pthread_barrier_destroy(&go);
  int fresh = 0;
  for (int i = 0; i < SAME_KEY_THREADS; i++) {
    assert_true(rs[i].status == 201 ||
                (rs[i].status == 409 && !effects_in_store));
    if (rs[i].status == 201 && !rs[i].replayed)
      fresh++;
  }
  assert_true(rs[SAME_KEY_THREADS].status == 0 ||
              (rs[SAME_KEY_THREADS].status == 1 && !effects_in_store));
  assert_int_equal(fresh + rs[SAME_KEY_THREADS].status, 1);
  assert_int_equal(rows(s, "same-key"), 1);
  assert_int_equal(atomic_load(&s->pending_seen), fresh);
  server_stop(s);
}

static void concurrent_same_key_requests_and_recovery_run_the_handler_once(
    void **st) {
  (void)st;
  same_key_race(0);
}

static void concurrent_same_key_requests_with_effects_in_store_wait_and_replay(
    void **st) {
  (void)st;
  same_key_race(1);
}

/* ---- issue 10: one resil_store_execute per new operation -------------------- */

static resil_op_state stored_state(server *s, const char *key) {
  resil_op_record rec;
  resil_op_record_init(&rec);
  assert_status(RESIL_OK, resil_store_status(s->store, key, &rec));
  resil_op_state st = rec.state;
  resil_op_record_clear(&rec);
  return st;
}

/* Posts a new operation that fails after the store took it: 500 with
 * Retry-After, naming the state the store then holds (want), and no
 * effect. */
static void post_failing(server *s, const char *key, resil_op_state want) {
  reply a = post(s, key, "{\"amount\":1}");
  assert_int_equal(a.status, 500);
  assert_string_equal(a.retry_after, "1");
  json_t *j = json_of(&a);
  assert_string_equal(jstr(j, "key"), key);
  assert_string_equal(jstr(j, "state"), resil_op_state_name(want));
  json_decref(j);
  free(a.body);
  assert_int_equal(rows(s, key), 0);
  assert_int_equal(stored_state(s, key), want);
}

/* What the handler sees of its own key from another connection while it
 * runs: the committed PENDING row, or, with effects_in_store (begin and
 * completion one transaction), no row at all. */
static void peek_while_running(int effects_in_store, int want) {
  server *s = server_open(NULL, effects_in_store);
  atomic_store(&s->mode, H_PEEK);
  atomic_store(&s->peeked, -3);
  reply a = post(s, "k-peek", "{\"amount\":1}");
  assert_int_equal(a.status, 201);
  assert_string_equal(a.replayed, "");
  assert_int_equal(atomic_load(&s->peeked), want);
  assert_int_equal(committed_state(s->db, "k-peek"), RESIL_OP_COMMITTED);
  assert_int_equal(rows(s, "k-peek"), 1);
  free(a.body);
  server_stop(s);
}

static void handler_sees_its_committed_pending_row_by_default(void **st) {
  (void)st;
  peek_while_running(0, RESIL_OP_PENDING);
}

static void handler_with_effects_in_store_runs_in_the_transaction_of_its_pending_row(
    void **st) {
  (void)st;
  peek_while_running(1, -1);
}

/* A failed operation with effects_in_store: nothing stored, the answer
 * does not claim PENDING, nothing for recovery, and a retry with the same
 * key runs the handler anew and commits once. */
static void effects_in_store_failure_stores_nothing_and_a_retry_runs_anew(
    void **st) {
  (void)st;
  server *s = server_open(NULL, 1);
  atomic_store(&s->mode, H_FAIL);
  post_failing(s, "k-eis", RESIL_OP_UNKNOWN);
  reply b = http(s, "GET", "/operations/k-eis", NULL, NULL, 0);
  assert_int_equal(b.status, 404);
  uint32_t n = 7;
  assert_status(RESIL_OK, resil_idem_mhd_recover(s->idem, 0, 10, &n));
  assert_int_equal(n, 0);
  atomic_store(&s->mode, H_PAY);
  reply c = post(s, "k-eis", "{\"amount\":1}");
  assert_int_equal(c.status, 201);
  assert_string_equal(c.replayed, "");
  assert_string_equal(c.body, "{\"key\":\"k-eis\",\"recovering\":0}");
  reply d = post(s, "k-eis", "{\"amount\":1}");
  assert_int_equal(d.status, 201);
  assert_string_equal(d.replayed, "true");
  assert_int_equal(rows(s, "k-eis"), 1);
  assert_int_equal(stored_state(s, "k-eis"), RESIL_OP_COMMITTED);
  assert_int_equal(atomic_load(&s->handler_runs), 2);
  resil_idem_mhd_stats sx;
  stats(s, &sx);
  assert_int_equal(sx.requests, 3);
  assert_int_equal(sx.handler_failed, 1);
  assert_int_equal(sx.executed, 1);
  assert_int_equal(sx.replayed, 1);
  assert_int_equal(sx.in_progress, 0);
  assert_int_equal(sx.store_errors, 0);
  free(b.body);
  free(c.body);
  free(d.body);
  server_stop(s);
}

/* The store fails after the handler succeeded (before the terminal state):
 * a store error, answered with what is stored, in each mode. */
static void store_failure_after_the_handler_answers_what_is_stored(void **st) {
  (void)st;
  for (int eis = 0; eis <= 1; eis++) {
    server *s = server_open(NULL, eis);
    atomic_store(&s->fault, 1);
    post_failing(s, "k-fault", eis ? RESIL_OP_UNKNOWN : RESIL_OP_PENDING);
    atomic_store(&s->fault, 0);
    reply b = post(s, "k-fault", "{\"amount\":1}");
    assert_int_equal(b.status, eis ? 201 : 409);
    assert_int_equal(rows(s, "k-fault"), eis ? 1 : 0);
    resil_idem_mhd_stats sx;
    stats(s, &sx);
    assert_int_equal(sx.store_errors, 1);
    assert_int_equal(sx.handler_failed, 0);
    assert_int_equal(sx.executed, (uint64_t)eis);
    free(b.body);
    server_stop(s);
  }
}

/* on_pending: once per new operation, just before its handler (checked by
 * the hooks), never for a replay, a conflict or recovery. */
static void on_pending_runs_once_per_new_operation_in_both_modes(void **st) {
  (void)st;
  for (int eis = 0; eis <= 1; eis++) {
    server *s = server_open(NULL, eis);
    reply a = post(s, "k-a", "{\"amount\":1}");
    assert_int_equal(a.status, 201);
    assert_int_equal(atomic_load(&s->pending_seen), 1);
    reply b = post(s, "k-a", "{\"amount\":1}");
    assert_string_equal(b.replayed, "true");
    reply c = post(s, "k-a", "{\"amount\":2}");
    assert_int_equal(c.status, 422);
    assert_int_equal(atomic_load(&s->pending_seen), 1);
    atomic_store(&s->mode, H_FAIL);
    reply d = post(s, "k-b", "{\"amount\":1}");
    assert_int_equal(d.status, 500);
    assert_int_equal(atomic_load(&s->pending_seen), 2);
    atomic_store(&s->mode, H_PAY);
    uint32_t n = 0;
    assert_status(RESIL_OK, resil_idem_mhd_recover(s->idem, 0, 10, &n));
    assert_int_equal(n, eis ? 0 : 1);
    assert_int_equal(atomic_load(&s->pending_seen), 2);
    reply e = post(s, "k-b", "{\"amount\":1}");
    assert_int_equal(e.status, 201);
    assert_string_equal(e.replayed, eis ? "" : "true");
    assert_int_equal(atomic_load(&s->pending_seen), eis ? 3 : 2);
    assert_int_equal(atomic_load(&s->handler_runs),
                     atomic_load(&s->pending_seen));
    assert_int_equal(rows(s, "k-b"), 1);
    free(a.body);
    free(b.body);
    free(c.body);
    free(d.body);
    free(e.body);
    server_stop(s);
  }
}

static int global_setup(void **st) {
  (void)st;
  return curl_global_init(CURL_GLOBAL_DEFAULT) == CURLE_OK ? 0 : -1;
}

static int global_teardown(void **st) {
  (void)st;
  curl_global_cleanup();
  return 0;
}


/* ---- issue 7: hostile input and server limits ------------------------------ */

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <time.h>

static int connect_to(const server *s) {
  unsigned port = 0;
  sscanf(s->base, "http://127.0.0.1:%u", &port);
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  assert_true(fd >= 0);
  struct sockaddr_in sa;
  memset(&sa, 0, sizeof sa);
  sa.sin_family = AF_INET;
  sa.sin_port = htons((uint16_t)port);
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof sa), 0);
  return fd;
}

/* Sends text on a fresh connection and returns the answer's status (0 when
 * the connection closed without one); body (may be NULL) gets the rest. */
static int raw_request(const server *s, const char *text, char *body, size_t n) {
  int fd = connect_to(s);
  size_t len = strlen(text);
  assert_int_equal(send(fd, text, len, MSG_NOSIGNAL), (ssize_t)len);
  char buf[8192];
  size_t got = 0;
  for (;;) {
    struct pollfd p = {fd, POLLIN, 0};
    if (poll(&p, 1, 10000) != 1) break;
    ssize_t r = recv(fd, buf + got, sizeof buf - 1 - got, 0);
    if (r <= 0) break;
    got += (size_t)r;
    buf[got] = '\0';
    char *hend = strstr(buf, "\r\n\r\n");
    const char *cl = strstr(buf, "Content-Length: ");
    if (hend && cl && got >= (size_t)(hend + 4 - buf) + (size_t)atol(cl + 16)) break;
    if (got >= sizeof buf - 1) break;
  }
  close(fd);
  buf[got] = '\0';
  int status = 0;
  sscanf(buf, "HTTP/1.1 %d", &status);
  if (body) {
    const char *b = strstr(buf, "\r\n\r\n");
    snprintf(body, n, "%s", b ? b + 4 : "");
  }
  return status;
}

static void two_keys_and_encoded_nul_are_refused(void **st) {
  (void)st;
  server *s = server_start(NULL);
  reply a = post(s, "k", "{\"amount\":1}");
  assert_int_equal(a.status, 201);
  char body[4096];
  /* Two Idempotency-Key headers: neither is "the" key. */
  int code = raw_request(s,
                         "POST /payments HTTP/1.1\r\nHost: t\r\nConnection: close\r\n"
                         "Idempotency-Key: k\r\nidempotency-key: k2\r\n"
                         "Content-Length: 12\r\n\r\n{\"amount\":1}",
                         body, sizeof body);
  assert_int_equal(code, 400);
  assert_non_null(strstr(body, "more than one Idempotency-Key"));
  assert_int_equal(rows(s, "k2"), 0);
  assert_int_equal(rows(s, "k"), 1);
  /* /operations/k%00x must not answer for key "k". */
  code = raw_request(s, "GET /operations/k%00x HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n",
                     body, sizeof body);
  assert_int_equal(code, 400);
  assert_null(strstr(body, "COMMITTED"));
  /* Nor may a path with %00 stand for a shorter one. */
  code = raw_request(s,
                     "POST /payments%00x HTTP/1.1\r\nHost: t\r\nConnection: close\r\n"
                     "Idempotency-Key: k\r\nContent-Length: 12\r\n\r\n{\"amount\":1}",
                     body, sizeof body);
  assert_int_equal(code, 400);
  /* Other escapes still decode as before. */
  code = raw_request(s, "GET /operations/%6B HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n",
                     body, sizeof body);
  assert_int_equal(code, 200);
  assert_non_null(strstr(body, "COMMITTED"));
  resil_idem_mhd_stats sx;
  stats(s, &sx);
  assert_int_equal(sx.struct_size, sizeof sx);
  assert_int_equal(sx.executed, 1);
  free(a.body);
  server_stop(s);
}

static void query_string_is_not_part_of_the_fingerprint(void **st) {
  (void)st;
  server *s = server_start(NULL);
  reply a = http(s, "POST", "/payments?x=1", "q", "{}", 2);
  assert_int_equal(a.status, 201);
  reply b = http(s, "POST", "/payments?x=2", "q", "{}", 2);
  assert_int_equal(b.status, 201);
  assert_string_equal(b.replayed, "true");
  assert_string_equal(a.body, b.body);
  assert_int_equal(rows(s, "q"), 1);
  /* The path is: another path with the key is a conflict. */
  reply c = http(s, "POST", "/payments/2?x=1", "q", "{}", 2);
  assert_int_equal(c.status, 422);
  free(a.body);
  free(b.body);
  free(c.body);
  server_stop(s);
}

typedef struct log_capture {
  pthread_mutex_t mu;
  char text[4096];
} log_capture;

static log_capture g_log = {PTHREAD_MUTEX_INITIALIZER, ""};

static void capture_log(void *user, const char *line) {
  log_capture *l = user;
  pthread_mutex_lock(&l->mu);
  size_t n = strlen(l->text);
  snprintf(l->text + n, sizeof l->text - n, "%s\n", line);
  pthread_mutex_unlock(&l->mu);
}

static void with_log(resil_idem_mhd_config *c) {
  c->log = capture_log;
  c->log_user = &g_log;
}

static void store_failure_answers_503_with_the_stores_message_and_logs_it(void **st) {
  (void)st;
  g_log.text[0] = '\0';
  server *s = server_start(with_log);
  reply a = post(s, "k-1", "{\"amount\":1}");
  assert_int_equal(a.status, 201);
  /* The database file disappears under the running server. */
  assert_int_equal(unlink(s->db), 0);
  reply b = post(s, "k-2", "{\"amount\":1}");
  assert_int_equal(b.status, 503);
  assert_string_equal(b.retry_after, "1");
  json_t *j = json_of(&b);
  const char *e = jstr(j, "error");
  if (!strstr(e, "deleted or replaced") || !strstr(e, s->db))
    fail_msg("503 body without the store's message: %s", e);
  json_decref(j);
  pthread_mutex_lock(&g_log.mu);
  int logged = strstr(g_log.text, "deleted or replaced") != NULL;
  pthread_mutex_unlock(&g_log.mu);
  assert_true(logged);
  /* The replay of k-1 is refused too: the file it came from is gone. */
  reply c = post(s, "k-1", "{\"amount\":1}");
  assert_int_equal(c.status, 503);
  free(a.body);
  free(b.body);
  free(c.body);
  server_stop(s);
}

static void handler_1xx_is_refused_and_damaged_rows_are_reported_by_recovery(void **st) {
  (void)st;
  server *s = server_start(NULL);
  atomic_store(&s->mode, H_100);
  reply a = post(s, "k-100", "{}");
  assert_int_equal(a.status, 500);
  reply b = http(s, "GET", "/operations/k-100", NULL, NULL, 0);
  json_t *j = json_of(&b);
  assert_string_equal(jstr(j, "state"), "PENDING");
  json_decref(j);
  /* A damaged PENDING row is skipped and named; the good one recovered. */
  atomic_store(&s->mode, H_FAIL);
  reply c = post(s, "k-bad", "{}");
  assert_int_equal(c.status, 500);
  assert_int_equal(sqlite3_exec(s->sql,
                                "UPDATE resil_operations SET fingerprint = X'00' "
                                "WHERE key = 'k-bad'",
                                NULL, NULL, NULL),
                   SQLITE_OK);
  atomic_store(&s->mode, H_PAY);
  reply d = http(s, "POST", "/__recover", NULL, NULL, 0);
  assert_int_equal(d.status, 200);
  j = json_of(&d);
  assert_int_equal(json_integer_value(json_object_get(j, "recovered")), 1);
  assert_int_equal(json_integer_value(json_object_get(j, "damaged")), 1);
  assert_string_equal(jstr(j, "damaged_keys"), "k-bad");
  json_decref(j);
  assert_int_equal(rows(s, "k-100"), 1);
  resil_idem_mhd_stats sx;
  stats(s, &sx);
  assert_int_equal(sx.damaged, 1);
  free(a.body);
  free(b.body);
  free(c.body);
  free(d.body);
  server_stop(s);
}

static int64_t mono_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* 64 idle half-requests against a limit of 32 and a 1 s timeout: the ones
 * past the limit are closed at once, the others after the timeout, and the
 * server serves again. */
static void idle_half_requests_are_bounded_and_timed_out(void **st) {
  (void)st;
  g_timeout_s = 1;
  g_limit = 32;
  server *s = server_start(NULL);
  enum { N = 64 };
  int fds[N];
  static const char half[] = "POST /payments HTTP/1.1\r\nHost: t\r\nIdempotency-Key: h\r\n";
  for (int i = 0; i < N; i++) {
    fds[i] = connect_to(s);
    send(fds[i], half, sizeof half - 1, MSG_NOSIGNAL);
  }
  int64_t start = mono_ms();
  int closed = 0, closed_early = 0;
  int done[N] = {0};
  while (closed < N && mono_ms() - start < 8000) {
    struct pollfd p[N];
    for (int i = 0; i < N; i++) p[i] = (struct pollfd){done[i] ? -1 : fds[i], POLLIN, 0};
    if (poll(p, N, 100) < 0) break;
    for (int i = 0; i < N; i++) {
      if (done[i] || !(p[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      char c;
      if (recv(fds[i], &c, 1, MSG_DONTWAIT) <= 0) {
        done[i] = 1;
        closed++;
        if (mono_ms() - start < 700) closed_early++;
      }
    }
  }
  int64_t took = mono_ms() - start;
  for (int i = 0; i < N; i++) close(fds[i]);
  /* The connections past the limit never held a thread. */
  if (closed_early < N - 32) fail_msg("only %d connections closed at once", closed_early);
  /* Every idle one was closed by the timeout. */
  if (closed != N) fail_msg("%d of %d idle connections still open after %lld ms", N - closed, N,
                            (long long)took);
  /* The server frees a closed connection's slot when its thread has ended,
   * a moment after the client sees the close: try for up to 3 s. */
  reply a;
  for (int64_t end = mono_ms() + 3000;;) {
    a = post(s, "after", "{\"amount\":1}");
    if (a.status == 201 || mono_ms() > end) break;
    free(a.body);
    test_sleep_ms(20);
  }
  assert_int_equal(a.status, 201);
  free(a.body);
  server_stop(s);
  g_timeout_s = RESIL_IDEM_MHD_CONNECTION_TIMEOUT_S;
  g_limit = RESIL_IDEM_MHD_CONNECTION_LIMIT;
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(config_init_writes_documented_defaults),
      cmocka_unit_test(new_names_each_bad_field),
      cmocka_unit_test(new_survives_every_allocation_failure),
      cmocka_unit_test(invalid_handles_are_refused),
      cmocka_unit_test(new_key_runs_once_and_replays_byte_for_byte),
      cmocka_unit_test(other_request_with_the_key_is_a_conflict),
      cmocka_unit_test(missing_or_invalid_key_is_refused_before_the_store),
      cmocka_unit_test(without_required_key_a_generated_key_is_returned),
      cmocka_unit_test(status_route_reports_each_state),
      cmocka_unit_test(handler_failure_rolls_back_and_leaves_pending_for_recovery),
      cmocka_unit_test(invalid_handler_response_is_never_stored),
      cmocka_unit_test(business_refusal_is_stored_failed_and_replayed),
      cmocka_unit_test(binary_body_is_replayed_exactly_and_reported_in_base64),
      cmocka_unit_test(long_stored_header_is_replayed_whole),
      cmocka_unit_test(body_over_the_limit_is_refused_after_reading_it),
      cmocka_unit_test(dropped_response_closes_the_connection_after_the_commit),
      cmocka_unit_test(recovery_route_checks_method_and_arguments),
      cmocka_unit_test(concurrent_same_key_requests_and_recovery_run_the_handler_once),
      cmocka_unit_test(concurrent_same_key_requests_with_effects_in_store_wait_and_replay),
      cmocka_unit_test(handler_sees_its_committed_pending_row_by_default),
      cmocka_unit_test(handler_with_effects_in_store_runs_in_the_transaction_of_its_pending_row),
      cmocka_unit_test(effects_in_store_failure_stores_nothing_and_a_retry_runs_anew),
      cmocka_unit_test(store_failure_after_the_handler_answers_what_is_stored),
      cmocka_unit_test(on_pending_runs_once_per_new_operation_in_both_modes),
      cmocka_unit_test(two_keys_and_encoded_nul_are_refused),
      cmocka_unit_test(older_layouts_are_read_and_written_only_as_far_as_they_go),
      cmocka_unit_test(query_string_is_not_part_of_the_fingerprint),
      cmocka_unit_test(store_failure_answers_503_with_the_stores_message_and_logs_it),
      cmocka_unit_test(handler_1xx_is_refused_and_damaged_rows_are_reported_by_recovery),
      cmocka_unit_test(idle_half_requests_are_bounded_and_timed_out),
  };
  return cmocka_run_group_tests(tests, global_setup, global_teardown);
}

#else

int main(void) {
  printf("built without libresil-store: nothing to run\n");
  return 0;
}

#endif
