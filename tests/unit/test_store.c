/* The operation store (DESIGN §6, §7 I3, I5, I7): one suite, run against
 * every available backend: SQLite (a fresh file in a mkdtemp directory per
 * test) always, PostgreSQL when RESIL_TEST_PG_URI is set (a fresh schema per
 * test), else its cases are skipped with a note. */
#define _GNU_SOURCE /* pthread_timedjoin_np */
#include <sys/stat.h>
#include <pthread.h>
#include <time.h>

#include "test_store_common.h"

typedef struct fx {
  ts_backend bk;
  int skip;
  ts_env env;
  resil_manual_clock *mc;
  resil_store_config cfg;
  resil_store *s;
} fx;

/* What a suite runs on: the backend, and effects_in_store (every case runs
 * in both modes: the default, and begin's commit not flushed on its own). */
typedef struct fx_param {
  ts_backend bk;
  int effects_in_store;
} fx_param;

static const fx_param on_sqlite = {TS_SQLITE, 0};
static const fx_param on_pg = {TS_PG, 0};
static const fx_param on_sqlite_eis = {TS_SQLITE, 1};
static const fx_param on_pg_eis = {TS_PG, 1};

static void fx_open(fx *f) {
  resil_error err;
  resil_status st = resil_store_open(f->env.uri, &f->cfg, &f->s, &err);
  if (st) fail_msg("open %s: %s: %s", f->env.uri, resil_status_name(st), err.msg);
}

static void fx_reopen(fx *f) {
  resil_store_close(f->s);
  f->s = NULL;
  fx_open(f);
}

static int fx_setup(void **state) {
  const fx_param *param = *state;
  ts_backend bk = param->bk;
  fx *f = calloc(1, sizeof *f);
  assert_non_null(f);
  f->bk = bk;
  *state = f;
  if (!ts_available(bk)) {
    f->skip = 1;
    return 0;
  }
  ts_env_setup(&f->env, bk, "u");
  assert_int_equal(resil_manual_clock_new(0, INT64_C(1700000000000), &f->mc), RESIL_OK);
  resil_store_config_init(&f->cfg);
  f->cfg.clock = resil_manual_clock_get(f->mc);
  f->cfg.effects_in_store = param->effects_in_store;
  fx_open(f);
  return 0;
}

static int fx_teardown(void **state) {
  fx *f = *state;
  if (!f->skip) {
    resil_store_close(f->s);
    ts_env_teardown(&f->env);
    resil_manual_clock_free(f->mc);
  }
  free(f);
  return 0;
}

static fx *get(void **state) {
  fx *f = *state;
  if (f->skip) skip();
  return f;
}

static int64_t wall(fx *f) { return resil_clock_wall_ms(f->cfg.clock); }

static void advance_s(fx *f, int64_t s) {
  resil_manual_clock_advance_ns(f->mc, s * NS_PER_S);
}

static resil_op_begin_result begin_ok(resil_store *s, const char *key,
                                      const resil_op_request *req, resil_op_record *rec) {
  resil_op_begin_result r = 0;
  resil_status st = resil_store_begin(s, key, req, &r, rec);
  if (st) fail_msg("begin %s: %s: %s", key, resil_status_name(st), resil_store_errmsg(s));
  return r;
}

static void complete_ok(resil_store *s, const char *key, ts_effect *e, resil_op_record *rec) {
  resil_status st = resil_store_complete(s, key, ts_effect_fn, e, rec);
  if (st) fail_msg("complete %s: %s: %s", key, resil_status_name(st), resil_store_errmsg(s));
}

static resil_op_begin_result execute_ok(fx *f, const char *key, const resil_op_request *req,
                                        resil_op_effect_fn effect, void *user,
                                        resil_op_record *rec) {
  resil_op_begin_result r = 0;
  resil_status st = resil_store_execute(f->s, key, req, effect, user, &r, rec);
  if (st) fail_msg("execute %s: %s: %s", key, resil_status_name(st), resil_store_errmsg(f->s));
  return r;
}

static resil_op_state state_of(resil_store *s, const char *key) {
  resil_op_record r;
  resil_op_record_init(&r);
  resil_status st = resil_store_status(s, key, &r);
  if (st) fail_msg("status %s: %s: %s", key, resil_status_name(st), resil_store_errmsg(s));
  resil_op_state v = r.state;
  resil_op_record_clear(&r);
  return v;
}

/* Begin as NEW and complete with e: the usual path. */
static void commit_key(fx *f, const char *key, const resil_op_request *req, ts_effect *e) {
  assert_int_equal(begin_ok(f->s, key, req, NULL), RESIL_OP_NEW);
  complete_ok(f->s, key, e, NULL);
}

static void assert_field(resil_store *s, const char *field) {
  resil_error err;
  resil_store_last_error(s, &err);
  if (strcmp(err.field, field) != 0)
    fail_msg("field '%s', expected '%s' (%s)", err.field, field, err.msg);
}

/* ---- begin ----------------------------------------------------------------- */

static void begin_new_stores_pending_with_request_and_fingerprint(void **state) {
  fx *f = get(state);
  static const char body[] = "{\"amount\":10}";
  resil_op_request req = ts_req("POST", "/payments", body);
  resil_op_record rec;
  resil_op_record_init(&rec);
  assert_int_equal(begin_ok(f->s, "pay-1", &req, &rec), RESIL_OP_NEW);
  assert_string_equal(rec.key, "pay-1");
  assert_int_equal(rec.state, RESIL_OP_PENDING);
  assert_int_equal(rec.attempts, 1);
  assert_string_equal(rec.method, "POST");
  assert_string_equal(rec.path, "/payments");
  assert_int_equal(rec.request_body_len, strlen(body));
  assert_memory_equal(rec.request_body, body, strlen(body));
  assert_int_equal(rec.created_ms, wall(f));
  assert_int_equal(rec.updated_ms, wall(f));
  assert_int_equal(rec.status, 0);
  assert_null(rec.body);
  unsigned char fp[32];
  assert_status(RESIL_OK, resil_op_fingerprint(&req, fp));
  assert_memory_equal(rec.fingerprint, fp, 32);

  /* Durable: another store (and a reopened one) sees the same record. */
  fx_reopen(f);
  assert_status(RESIL_OK, resil_store_status(f->s, "pay-1", &rec));
  assert_int_equal(rec.state, RESIL_OP_PENDING);
  assert_memory_equal(rec.fingerprint, fp, 32);
  assert_memory_equal(rec.request_body, body, strlen(body));
  assert_int_equal(ts_effects(&f->env, "pay-1"), 0);
  resil_op_record_clear(&rec);
}

static void begin_replays_committed_response_byte_for_byte(void **state) {
  fx *f = get(state);
  static const char body[] = "{\"id\":1}\0\xff\r\n\x01tail";
  static const char headers[] = "Content-Type: application/json\r\nLocation: /payments/1\r\n";
  ts_effect e = {.status = 201, .headers = headers, .headers_len = strlen(headers),
                 .body = body, .body_len = sizeof body - 1};
  resil_op_request req = ts_req("POST", "/payments", "{\"amount\":10}");
  resil_op_record rec;
  resil_op_record_init(&rec);
  assert_int_equal(begin_ok(f->s, "pay-2", &req, NULL), RESIL_OP_NEW);
  advance_s(f, 3);
  complete_ok(f->s, "pay-2", &e, &rec);
  assert_int_equal(rec.state, RESIL_OP_COMMITTED);
  assert_int_equal(rec.status, 201);
  assert_int_equal(rec.updated_ms, wall(f));

  for (int round = 0; round < 2; round++) {
    assert_int_equal(begin_ok(f->s, "pay-2", &req, &rec), RESIL_OP_REPLAY);
    assert_int_equal(rec.state, RESIL_OP_COMMITTED);
    assert_int_equal(rec.status, 201);
    assert_int_equal(rec.headers_len, strlen(headers));
    assert_memory_equal(rec.headers, headers, strlen(headers));
    assert_int_equal(rec.body_len, sizeof body - 1);
    assert_memory_equal(rec.body, body, sizeof body - 1);
    assert_int_equal(((const char *)rec.body)[rec.body_len], '\0');
    assert_int_equal(rec.attempts, 2 + round);
    fx_reopen(f); /* and after a restart */
  }
  assert_int_equal(atomic_load(&e.calls), 1);
  assert_int_equal(ts_effects(&f->env, "pay-2"), 1);

  /* An empty response replays as empty, not as missing. */
  ts_effect empty = {.status = 204};
  commit_key(f, "pay-empty", &req, &empty);
  assert_int_equal(begin_ok(f->s, "pay-empty", &req, &rec), RESIL_OP_REPLAY);
  assert_int_equal(rec.status, 204);
  assert_int_equal(rec.body_len, 0);
  assert_int_equal(rec.headers_len, 0);
  assert_non_null(rec.body);
  resil_op_record_clear(&rec);
}

static void begin_replays_failed_terminal_state(void **state) {
  fx *f = get(state);
  static const char refusal[] = "{\"error\":\"insufficient funds\"}";
  ts_effect e = {.status = 402, .body = refusal, .body_len = strlen(refusal), .failed = 1};
  resil_op_request req = ts_req("POST", "/payments", "{\"amount\":1000000}");
  resil_op_record rec;
  resil_op_record_init(&rec);
  assert_int_equal(begin_ok(f->s, "pay-f", &req, NULL), RESIL_OP_NEW);
  complete_ok(f->s, "pay-f", &e, &rec);
  assert_int_equal(rec.state, RESIL_OP_FAILED);
  assert_int_equal(begin_ok(f->s, "pay-f", &req, &rec), RESIL_OP_REPLAY);
  assert_int_equal(rec.state, RESIL_OP_FAILED);
  assert_int_equal(rec.status, 402);
  assert_memory_equal(rec.body, refusal, strlen(refusal));
  assert_int_equal(state_of(f->s, "pay-f"), RESIL_OP_FAILED);
  /* A FAILED operation is terminal: complete does not run the effect again. */
  complete_ok(f->s, "pay-f", &e, &rec);
  assert_int_equal(atomic_load(&e.calls), 1);
  resil_op_record_clear(&rec);
}

static void begin_on_pending_key_is_in_progress(void **state) {
  fx *f = get(state);
  resil_op_request req = ts_req("POST", "/payments", "{}");
  resil_op_record rec;
  resil_op_record_init(&rec);
  assert_int_equal(begin_ok(f->s, "pay-3", &req, &rec), RESIL_OP_NEW);
  advance_s(f, 1);
  assert_int_equal(begin_ok(f->s, "pay-3", &req, &rec), RESIL_OP_IN_PROGRESS);
  assert_int_equal(rec.state, RESIL_OP_PENDING);
  assert_int_equal(rec.attempts, 2);
  assert_int_equal(rec.status, 0);
  /* A begin is not a state change: the age recovery looks at is kept. */
  assert_int_equal(rec.updated_ms, wall(f) - 1000);
  assert_int_equal(begin_ok(f->s, "pay-3", &req, NULL), RESIL_OP_IN_PROGRESS);
  assert_status(RESIL_OK, resil_store_status(f->s, "pay-3", &rec));
  assert_int_equal(rec.attempts, 3);
  assert_int_equal(ts_effects(&f->env, "pay-3"), 0);
  resil_op_record_clear(&rec);
}

static void begin_with_other_method_path_or_body_is_conflict(void **state) {
  fx *f = get(state);
  static const char secret[] = "{\"card\":\"4111\"}";
  ts_effect e = {.body = secret, .body_len = strlen(secret)};
  resil_op_request req = ts_req("POST", "/a", "b");
  resil_op_record rec;
  resil_op_record_init(&rec);
  commit_key(f, "pay-4", &req, &e);
  const resil_op_request others[] = {
      ts_req("PUT", "/a", "b"),  /* method */
      ts_req("POST", "/x", "b"), /* path */
      ts_req("POST", "/a", "c"), /* body */
      ts_req("POST", "/ab", ""), /* the same bytes, split differently */
      ts_req("POST", "/a", NULL),
  };
  for (size_t i = 0; i < sizeof others / sizeof *others; i++) {
    assert_int_equal(begin_ok(f->s, "pay-4", &others[i], &rec), RESIL_OP_CONFLICT);
    /* Never a replay: another request's result and body are not disclosed. */
    assert_int_equal(rec.status, 0);
    assert_null(rec.body);
    assert_null(rec.headers);
    assert_null(rec.request_body);
    assert_int_equal(rec.state, RESIL_OP_COMMITTED);
    assert_string_equal(rec.key, "pay-4");
  }
  assert_int_equal(begin_ok(f->s, "pay-4", &req, &rec), RESIL_OP_REPLAY);
  assert_memory_equal(rec.body, secret, strlen(secret));

  /* A PENDING key with another fingerprint is a conflict too, not "in
   * progress". */
  assert_int_equal(begin_ok(f->s, "pay-5", &req, NULL), RESIL_OP_NEW);
  assert_int_equal(begin_ok(f->s, "pay-5", &others[2], &rec), RESIL_OP_CONFLICT);
  assert_int_equal(rec.state, RESIL_OP_PENDING);
  assert_int_equal(atomic_load(&e.calls), 1);
  resil_op_record_clear(&rec);
}

/* ---- status ---------------------------------------------------------------- */

static void status_reports_each_state_and_unknown_for_missing_key(void **state) {
  fx *f = get(state);
  resil_op_record rec;
  resil_op_record_init(&rec);
  assert_status(RESIL_OK, resil_store_status(f->s, "never-seen", &rec));
  assert_int_equal(rec.state, RESIL_OP_UNKNOWN);
  assert_string_equal(rec.key, "never-seen");
  assert_null(rec.body);

  resil_op_request req = ts_req("POST", "/p", "1");
  assert_int_equal(begin_ok(f->s, "st-pending", &req, NULL), RESIL_OP_NEW);
  assert_int_equal(state_of(f->s, "st-pending"), RESIL_OP_PENDING);

  ts_effect ok = {.status = 200, .body = "done", .body_len = 4};
  commit_key(f, "st-committed", &req, &ok);
  assert_status(RESIL_OK, resil_store_status(f->s, "st-committed", &rec));
  assert_int_equal(rec.state, RESIL_OP_COMMITTED);
  assert_int_equal(rec.status, 200);
  assert_memory_equal(rec.body, "done", 4);

  ts_effect no = {.status = 409, .failed = 1};
  commit_key(f, "st-failed", &req, &no);
  assert_int_equal(state_of(f->s, "st-failed"), RESIL_OP_FAILED);
  /* Status reads do not count as attempts. */
  assert_status(RESIL_OK, resil_store_status(f->s, "st-failed", &rec));
  assert_int_equal(rec.attempts, 1);
  resil_op_record_clear(&rec);
}

/* ---- complete -------------------------------------------------------------- */

static void complete_runs_effect_once_and_second_complete_does_not(void **state) {
  fx *f = get(state);
  ts_effect e = {.status = 201, .body = "first", .body_len = 5};
  resil_op_request req = ts_req("POST", "/p", "1");
  resil_op_record rec;
  resil_op_record_init(&rec);
  assert_int_equal(begin_ok(f->s, "c-1", &req, NULL), RESIL_OP_NEW);
  complete_ok(f->s, "c-1", &e, &rec);
  assert_int_equal(atomic_load(&e.calls), 1);
  assert_int_equal(ts_effects(&f->env, "c-1"), 1);

  ts_effect again = {.status = 500, .body = "second", .body_len = 6};
  complete_ok(f->s, "c-1", &again, &rec);
  assert_int_equal(atomic_load(&again.calls), 0);
  assert_int_equal(ts_effects(&f->env, "c-1"), 1);
  assert_int_equal(rec.state, RESIL_OP_COMMITTED);
  assert_int_equal(rec.status, 201);
  assert_memory_equal(rec.body, "first", 5);
  /* Through a second store on the same database as well. */
  resil_store *other = NULL;
  assert_status(RESIL_OK, resil_store_open(f->env.uri, &f->cfg, &other, NULL));
  assert_status(RESIL_OK, resil_store_complete(other, "c-1", ts_effect_fn, &again, NULL));
  assert_int_equal(atomic_load(&again.calls), 0);
  resil_store_close(other);
  assert_int_equal(ts_effects(&f->env, "c-1"), 1);
  resil_op_record_clear(&rec);
}

static void complete_effect_error_rolls_back_its_own_writes(void **state) {
  fx *f = get(state);
  ts_effect bad = {.ret = RESIL_EIO};
  resil_op_request req = ts_req("POST", "/p", "1");
  resil_op_record rec;
  resil_op_record_init(&rec);
  assert_int_equal(begin_ok(f->s, "c-2", &req, NULL), RESIL_OP_NEW);
  assert_status(RESIL_EIO, resil_store_complete(f->s, "c-2", ts_effect_fn, &bad, &rec));
  assert_int_equal(atomic_load(&bad.calls), 1);
  assert_true(strlen(resil_store_errmsg(f->s)) > 0);
  assert_int_equal(rec.state, RESIL_OP_UNKNOWN); /* rec untouched on failure */
  /* The effect's INSERT ran on the same connection and was rolled back. */
  assert_int_equal(ts_effects(&f->env, "c-2"), 0);
  assert_int_equal(state_of(f->s, "c-2"), RESIL_OP_PENDING);

  ts_effect good = {.status = 200};
  complete_ok(f->s, "c-2", &good, &rec);
  assert_string_equal(resil_store_errmsg(f->s), "");
  assert_int_equal(rec.state, RESIL_OP_COMMITTED);
  assert_int_equal(ts_effects(&f->env, "c-2"), 1);
  resil_op_record_clear(&rec);
}

static void complete_rejects_invalid_effect_response_and_rolls_back(void **state) {
  fx *f = get(state);
  resil_op_request req = ts_req("POST", "/p", "1");
  assert_int_equal(begin_ok(f->s, "c-3", &req, NULL), RESIL_OP_NEW);
  ts_effect low = {.status = 99};
  assert_status(RESIL_EINVAL, resil_store_complete(f->s, "c-3", ts_effect_fn, &low, NULL));
  assert_field(f->s, "status");
  ts_effect high = {.status = 600};
  assert_status(RESIL_EINVAL, resil_store_complete(f->s, "c-3", ts_effect_fn, &high, NULL));
  ts_effect nohdr = {.headers_len = 3};
  assert_status(RESIL_EINVAL, resil_store_complete(f->s, "c-3", ts_effect_fn, &nohdr, NULL));
  assert_field(f->s, "headers");
  ts_effect nobody = {.body_len = 3};
  assert_status(RESIL_EINVAL, resil_store_complete(f->s, "c-3", ts_effect_fn, &nobody, NULL));
  assert_field(f->s, "body");
  ts_effect flag = {.failed = 2};
  assert_status(RESIL_EINVAL, resil_store_complete(f->s, "c-3", ts_effect_fn, &flag, NULL));
  assert_field(f->s, "failed");
  assert_int_equal(ts_effects(&f->env, "c-3"), 0);
  assert_int_equal(state_of(f->s, "c-3"), RESIL_OP_PENDING);
}

static void complete_unknown_key_is_estate_without_effect(void **state) {
  fx *f = get(state);
  ts_effect e = {0};
  resil_op_record rec;
  resil_op_record_init(&rec);
  rec.state = RESIL_OP_COMMITTED;
  assert_status(RESIL_ESTATE, resil_store_complete(f->s, "nobody", ts_effect_fn, &e, &rec));
  assert_int_equal(rec.state, RESIL_OP_UNKNOWN);
  assert_string_equal(rec.key, "nobody");
  assert_field(f->s, "key");
  assert_int_equal(atomic_load(&e.calls), 0);
  assert_int_equal(state_of(f->s, "nobody"), RESIL_OP_UNKNOWN);
}

static void complete_refuses_an_effect_that_ends_the_transaction(void **state) {
  fx *f = get(state);
  resil_op_request req = ts_req("POST", "/p", "1");
  assert_int_equal(begin_ok(f->s, "c-4", &req, NULL), RESIL_OP_NEW);
  ts_effect e = {.end_txn = 1};
  assert_status(RESIL_EMISUSE, resil_store_complete(f->s, "c-4", ts_effect_fn, &e, NULL));
  assert_int_equal(state_of(f->s, "c-4"), RESIL_OP_PENDING);
  /* The connection is usable afterwards. */
  ts_effect good = {0};
  complete_ok(f->s, "c-4", &good, NULL);
  assert_int_equal(state_of(f->s, "c-4"), RESIL_OP_COMMITTED);
}

static resil_status effect_with_failing_sql(void *user, resil_store_txn *tx,
                                            const resil_op_record *pending,
                                            resil_op_response *out) {
  (void)user;
  ts_txn_exec(tx, "INSERT INTO effects (key, n) VALUES ($1, 1)", pending->key);
  /* A broken statement whose error the effect ignores. */
  ts_txn_exec(tx, "INSERT INTO no_such_table VALUES ($1)", pending->key);
  out->status = 200;
  return RESIL_OK;
}

/* Inserts its effect row, then (misuse) takes its own operation out of
 * PENDING in the store's transaction. */
static resil_status effect_that_moves_its_row(void *user, resil_store_txn *tx,
                                              const resil_op_record *pending,
                                              resil_op_response *out) {
  (void)user;
  int sq = resil_store_txn_sqlite(tx) != NULL;
  resil_status st = ts_txn_exec(tx,
                                sq ? "INSERT INTO effects (key, n) VALUES (?1, 1)"
                                   : "INSERT INTO effects (key, n) VALUES ($1, 1)",
                                pending->key);
  if (!st)
    st = ts_txn_exec(tx,
                     sq ? "UPDATE resil_operations SET state = 3 WHERE key = ?1"
                        : "UPDATE resil_operations SET state = 3 WHERE key = $1",
                     pending->key);
  out->status = 200;
  return st;
}

/* The terminal state and the commit travel together (one round trip on
 * PostgreSQL): when the terminal write changes no PENDING row, nothing may
 * commit, neither the effect's row nor the effect's change to the
 * operation. */
static void complete_commits_nothing_when_the_terminal_write_finds_no_pending_row(
    void **state) {
  fx *f = get(state);
  resil_op_request req = ts_req("POST", "/p", "1");
  assert_int_equal(begin_ok(f->s, "c-6", &req, NULL), RESIL_OP_NEW);
  assert_status(RESIL_EIO,
                resil_store_complete(f->s, "c-6", effect_that_moves_its_row, NULL, NULL));
  assert_non_null(strstr(resil_store_errmsg(f->s), "no longer PENDING"));
  assert_int_equal(ts_effects(&f->env, "c-6"), 0);
  assert_int_equal(state_of(f->s, "c-6"), RESIL_OP_PENDING);
  /* The connection is usable afterwards. */
  ts_effect good = {0};
  complete_ok(f->s, "c-6", &good, NULL);
  assert_int_equal(state_of(f->s, "c-6"), RESIL_OP_COMMITTED);
  assert_int_equal(ts_effects(&f->env, "c-6"), 1);
}

/* ---- resil_store_txn_exec: an effect made of its statements ----------------- */

/* The table the txn_exec tests write (created by each test that uses it). */
static void ledger_create(fx *f) {
  ts_exec(&f->env, f->bk == TS_SQLITE
                       ? "CREATE TABLE ledger (k TEXT PRIMARY KEY, t TEXT, b BLOB, z TEXT, "
                         "n INTEGER)"
                       : "CREATE TABLE ledger (k TEXT PRIMARY KEY, t TEXT, b BYTEA, z TEXT, "
                         "n INTEGER)");
}

/* Committed ledger rows of an operation: its key, and key.<suffix>. */
static long ledger_rows(fx *f, const char *key) {
  char sql[400];
  snprintf(sql, sizeof sql, "SELECT count(*) FROM ledger WHERE k = '%s' OR k LIKE '%s.%%'",
           key, key);
  return ts_query_long(&f->env, sql);
}

/* In an xstmt's values: the operation's key followed by the xstmt's suffix. */
static const char xkey_marker = 'k';
#define XKEY (&xkey_marker)

/* One resil_store_txn_exec call. */
typedef struct xstmt {
  const char *sql; /* PostgreSQL spelling; on SQLite every '$' becomes '?' */
  int nparams;     /* at most 8 */
  const char *const *values;
  const size_t *lengths;
  const int *binary;
  const char *suffix; /* appended to the key where values hold XKEY */
} xstmt;

/* An effect that runs stmts[0..n) through resil_store_txn_exec and returns
 * the first failure (or, with keep_going, runs them all and succeeds).
 * Each call gets its text and values in buffers of its own, overwritten
 * right after it returns: the store may keep neither pointer. */
typedef struct exec_effect {
  ts_backend bk;
  const xstmt *stmts;
  int n;
  int keep_going;
  /* peek: after peek_after statements, count the key's ledger rows with
   * the effect's own connection (resil_store_txn_pg / _sqlite) */
  int peek, peek_after;
  /* PostgreSQL: SQL run directly on resil_store_txn_pg(tx) before the
   * statements, and after them */
  const char *direct_before, *direct_after;
  ts_effect *then; /* not NULL: ts_effect_fn(then) ends the effect */
  /* PostgreSQL: the first call has this side connection terminate the
   * effect's backend after the statements were queued (not sent) */
  PGconn *kill_after_queue;
  int killed;
  int status;      /* the response's status; 0 means 201 */
  atomic_int calls;
  resil_status got[8]; /* what each call returned (the last run) */
  long peeked;         /* -1: the peek failed */
} exec_effect;

static void exec_peek(exec_effect *e, resil_store_txn *tx, const char *key) {
  e->peeked = -1;
  if (e->bk == TS_SQLITE) {
    sqlite3 *db = resil_store_txn_sqlite(tx);
    sqlite3_stmt *q = NULL;
    if (sqlite3_prepare_v2(db, "SELECT count(*) FROM ledger WHERE k = ?1", -1, &q, NULL) !=
        SQLITE_OK)
      return;
    sqlite3_bind_text(q, 1, key, -1, SQLITE_TRANSIENT);
    if (sqlite3_step(q) == SQLITE_ROW) e->peeked = (long)sqlite3_column_int64(q, 0);
    sqlite3_finalize(q);
  } else {
    const char *vals[1] = {key};
    PGresult *r = PQexecParams(resil_store_txn_pg(tx),
                               "SELECT count(*)::int FROM ledger WHERE k = $1", 1, NULL, vals,
                               NULL, NULL, 0);
    if (PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) == 1)
      e->peeked = strtol(PQgetvalue(r, 0, 0), NULL, 10);
    PQclear(r);
  }
}

static resil_status exec_run(exec_effect *e, resil_store_txn *tx, const char *key) {
  for (int i = 0; i <= e->n; i++) {
    if (e->peek && e->peek_after == i) exec_peek(e, tx, key);
    if (i == e->n) break;
    const xstmt *x = &e->stmts[i];
    char sql[1024];
    snprintf(sql, sizeof sql, "%s", x->sql);
    if (e->bk == TS_SQLITE)
      for (char *p = sql; *p; p++)
        if (*p == '$') *p = '?';
    char buf[8][96];
    const char *vals[8] = {0};
    assert_true(x->nparams <= 8);
    for (int j = 0; j < x->nparams && x->values; j++) {
      const char *v = x->values[j];
      if (v == XKEY) {
        snprintf(buf[j], sizeof buf[j], "%s%s", key, x->suffix ? x->suffix : "");
      } else if (v) {
        size_t len = x->binary && x->binary[j] ? x->lengths[j] : strlen(v) + 1;
        assert_true(len <= sizeof buf[j]);
        memcpy(buf[j], v, len);
      }
      vals[j] = v ? buf[j] : NULL;
    }
    resil_status st =
        resil_store_txn_exec(tx, sql, x->nparams, x->values ? vals : NULL, x->lengths, x->binary);
    memset(sql, '#', sizeof sql - 1);
    memset(buf, 0x5a, sizeof buf);
    if (i < 8) e->got[i] = st;
    if (st && !e->keep_going) return st;
  }
  return RESIL_OK;
}

static resil_status effect_exec(void *user, resil_store_txn *tx, const resil_op_record *pending,
                                resil_op_response *out) {
  exec_effect *e = user;
  atomic_fetch_add(&e->calls, 1);
  if (e->direct_before) PQclear(PQexec(resil_store_txn_pg(tx), e->direct_before));
  /* Asked before anything is queued: resil_store_txn_pg sends the queue. */
  int pid = e->kill_after_queue && !e->killed ? PQbackendPID(resil_store_txn_pg(tx)) : 0;
  resil_status st = exec_run(e, tx, pending->key);
  if (pid) {
    char sql[96];
    snprintf(sql, sizeof sql, "SELECT pg_terminate_backend(%d, 5000)", pid);
    PQclear(PQexec(e->kill_after_queue, sql));
    e->killed = 1;
  }
  if (st) return st;
  if (e->direct_after) PQclear(PQexec(resil_store_txn_pg(tx), e->direct_after));
  if (e->then) return ts_effect_fn(e->then, tx, pending, out);
  out->status = e->status ? e->status : 201;
  return RESIL_OK;
}

/* Traces the effect's connection into user's FILE (start), or stops; then
 * runs exec's statements, if any (resil_store_txn_exec only). */
typedef struct trace_effect {
  FILE *to; /* NULL: stop tracing */
  exec_effect *exec;
} trace_effect;

static resil_status effect_tracing(void *user, resil_store_txn *tx,
                                   const resil_op_record *pending, resil_op_response *out) {
  trace_effect *te = user;
  PGconn *c = resil_store_txn_pg(tx);
  if (te->to) {
    PQtrace(c, te->to);
    PQsetTraceFlags(c, PQTRACE_SUPPRESS_TIMESTAMPS);
  } else {
    PQuntrace(c);
  }
  out->status = 200;
  return te->exec ? exec_run(te->exec, tx, pending->key) : RESIL_OK;
}

/* A new trace file (path: a mkstemp template). */
static FILE *trace_file(char *path) {
  int fd = mkstemp(path);
  assert_true(fd >= 0);
  FILE *trace = fdopen(fd, "w+");
  assert_non_null(trace);
  return trace;
}

/* Round trips in a libpq trace: runs of frontend messages, with no backend
 * message between them, that make the server answer (a Sync or a Query:
 * several Syncs sent before reading count once); *parses: Parse messages
 * naming resil_operations or the txn_exec tests' ledger. Closes and
 * removes the file. */
static int trace_trips(FILE *trace, const char *path, int *parses) {
  fflush(trace);
  rewind(trace);
  char line[4096];
  int trips = 0, in_run = 0;
  while (fgets(line, sizeof line, trace)) {
    if (line[0] == 'B') in_run = 0;
    if (line[0] != 'F') continue;
    if ((strstr(line, "\tSync") || strstr(line, "\tQuery\t")) && !in_run) {
      trips++;
      in_run = 1;
    }
    if (strstr(line, "\tParse\t") &&
        (strstr(line, "resil_operations") || strstr(line, "ledger")))
      (*parses)++;
  }
  fclose(trace);
  unlink(path);
  return trips;
}

/* Round trips of the PostgreSQL backend, counted in the frontend messages
 * that make the server answer (Sync, Query) on the one pooled connection,
 * traced from inside op-1's effect to inside op-3's: op-1's terminal state
 * with its COMMIT (1), op-2's begin (1), lock (1, BEGIN pipelined with it)
 * and terminal state with COMMIT (1), op-3's begin (1) and lock (1): 6
 * (10 with one statement per round trip). Every statement is prepared by
 * then (rt-0 used them): nothing in the trace parses SQL naming
 * resil_operations. */
/* Runs op-0 (which prepares every statement, one round trip each on first
 * use) and op-1..op-3 on a store with one pooled connection, tracing its
 * connection from inside op-1's effect to inside op-3's; each operation is
 * begin then complete, or one resil_store_execute. The effects: with exec
 * NULL, op-0 is ts_effect_fn and the others only trace; otherwise every
 * effect (op-0's included, which so prepares exec's texts) also runs exec's
 * statements through resil_store_txn_exec. Returns the round trips traced
 * (trace_trips); asserts that nothing parsed SQL naming resil_operations
 * (or the ledger: exec's texts are cached by then). */
static int traced_round_trips(fx *f, int execute, exec_effect *exec) {
  f->cfg.pool_size = 1;
  fx_reopen(f);
  char path[] = "/tmp/resil-pgtrace.XXXXXX";
  FILE *trace = trace_file(path);
  resil_op_request req = ts_req("POST", "/p", "1");
  trace_effect start = {trace, exec}, stop = {NULL, exec}, prepare = {NULL, exec};
  ts_effect plain = {0};
  const char *keys[4] = {"rt-0", "rt-1", "rt-2", "rt-3"};
  for (int i = 0; i < 4; i++) {
    resil_op_effect_fn fn = i == 0 && !exec ? ts_effect_fn : effect_tracing;
    void *user = i == 0   ? exec ? (void *)&prepare : (void *)&plain
                 : i == 3 ? (void *)&stop
                          : (void *)&start;
    if (execute) {
      assert_int_equal(execute_ok(f, keys[i], &req, fn, user, NULL), RESIL_OP_NEW);
    } else {
      assert_int_equal(begin_ok(f->s, keys[i], &req, NULL), RESIL_OP_NEW);
      assert_status(RESIL_OK, resil_store_complete(f->s, keys[i], fn, user, NULL));
    }
  }
  assert_int_equal(state_of(f->s, "rt-2"), RESIL_OP_COMMITTED);
  int parses = 0;
  int trips = trace_trips(trace, path, &parses);
  assert_int_equal(parses, 0);
  return trips;
}

static void pg_operation_takes_begin_plus_two_round_trips_and_no_parse(void **state) {
  fx *f = get(state);
  if (f->bk != TS_PG) skip();
  assert_int_equal(traced_round_trips(f, 0, NULL), 6);
}

/* Runs user's DEALLOCATE (NULL: DEALLOCATE ALL) on the effect's connection. */
static resil_status effect_deallocating(void *user, resil_store_txn *tx,
                                        const resil_op_record *pending,
                                        resil_op_response *out) {
  (void)pending;
  PQclear(PQexec(resil_store_txn_pg(tx), user ? (const char *)user : "DEALLOCATE ALL"));
  out->status = 200;
  return RESIL_OK;
}

/* The store's prepared statements, deallocated by an effect: that
 * completion fails and rolls back (still PENDING); the next calls on the
 * same connection prepare them again and succeed. */
static void pg_statements_deallocated_by_an_effect_are_prepared_again(void **state) {
  fx *f = get(state);
  if (f->bk != TS_PG) skip();
  f->cfg.pool_size = 1;
  fx_reopen(f);
  resil_op_request req = ts_req("POST", "/p", "1");
  ts_effect good = {0};
  assert_int_equal(begin_ok(f->s, "da-0", &req, NULL), RESIL_OP_NEW);
  complete_ok(f->s, "da-0", &good, NULL); /* every statement prepared */
  assert_int_equal(begin_ok(f->s, "da-1", &req, NULL), RESIL_OP_NEW);
  assert_status(RESIL_EIO, resil_store_complete(f->s, "da-1", effect_deallocating, NULL, NULL));
  assert_int_equal(state_of(f->s, "da-1"), RESIL_OP_PENDING);
  complete_ok(f->s, "da-1", &good, NULL);
  assert_int_equal(state_of(f->s, "da-1"), RESIL_OP_COMMITTED);
  assert_int_equal(begin_ok(f->s, "da-2", &req, NULL), RESIL_OP_NEW);
  complete_ok(f->s, "da-2", &good, NULL);
  /* One statement only (the terminal state's, resil_store_5): the others
   * are still there, and preparing them again would fail ("already
   * exists"): only the missing one is. */
  assert_int_equal(begin_ok(f->s, "da-3", &req, NULL), RESIL_OP_NEW);
  assert_status(RESIL_EIO, resil_store_complete(f->s, "da-3", effect_deallocating,
                                                (void *)"DEALLOCATE resil_store_5", NULL));
  assert_int_equal(state_of(f->s, "da-3"), RESIL_OP_PENDING);
  complete_ok(f->s, "da-3", &good, NULL);
  assert_int_equal(state_of(f->s, "da-3"), RESIL_OP_COMMITTED);
  assert_int_equal(begin_ok(f->s, "da-4", &req, NULL), RESIL_OP_NEW);
  complete_ok(f->s, "da-4", &good, NULL);
}

static void pg_complete_fails_when_the_effects_sql_aborted_the_transaction(void **state) {
  fx *f = get(state);
  if (f->bk != TS_PG) skip();
  resil_op_request req = ts_req("POST", "/p", "1");
  assert_int_equal(begin_ok(f->s, "c-5", &req, NULL), RESIL_OP_NEW);
  assert_status(RESIL_EIO, resil_store_complete(f->s, "c-5", effect_with_failing_sql, NULL, NULL));
  assert_int_equal(state_of(f->s, "c-5"), RESIL_OP_PENDING);
  assert_int_equal(ts_effects(&f->env, "c-5"), 0);
}

/* ---- I5 and I7 --------------------------------------------------------------- */

static resil_status fail_before_terminal(void *user, const char *key) {
  atomic_int *n = user;
  (void)key;
  atomic_fetch_add(n, 1);
  return RESIL_EIO;
}

/* The durability invariant I7's negative control checks: a PENDING
 * operation has no committed effect. */
static int pending_has_no_effect(resil_op_state st, long effects) {
  return st != RESIL_OP_PENDING || effects == 0;
}

/* I5's timeline; returns the effects seen after the injected failure. */
static long rollback_between_effect_and_terminal(fx *f, int unsafe, atomic_int *faults) {
  resil_op_request req = ts_req("POST", "/payments", "{\"amount\":10}");
  ts_effect e = {0};
  commit_key(f, "old-committed", &req, &e);

  f->cfg.unsafe_commit_effect_early = unsafe;
  f->cfg.fault_before_terminal = fail_before_terminal;
  f->cfg.fault_user = faults;
  fx_reopen(f);
  assert_int_equal(begin_ok(f->s, "i5", &req, NULL), RESIL_OP_NEW);
  assert_status(RESIL_EIO, resil_store_complete(f->s, "i5", ts_effect_fn, &e, NULL));
  assert_int_equal(atomic_load(faults), 1);
  assert_int_equal(state_of(f->s, "i5"), RESIL_OP_PENDING);
  long effects = ts_effects(&f->env, "i5");

  /* Close everything and reopen the same database, without the fault. */
  f->cfg.fault_before_terminal = NULL;
  fx_reopen(f);
  assert_int_equal(state_of(f->s, "i5"), RESIL_OP_PENDING);
  assert_int_equal(state_of(f->s, "old-committed"), RESIL_OP_COMMITTED);
  assert_int_equal(ts_effects(&f->env, "i5"), effects);
  return effects;
}

static void i5_rollback_between_effect_and_terminal_state_then_recover_once(void **state) {
  fx *f = get(state);
  atomic_int faults = 0;
  long effects = rollback_between_effect_and_terminal(f, 0, &faults);
  assert_int_equal(effects, 0); /* PENDING:0 */
  assert_true(pending_has_no_effect(RESIL_OP_PENDING, effects));

  ts_effect e = {0};
  uint32_t n = 99;
  assert_status(RESIL_OK, resil_store_recover(f->s, 0, 10, ts_effect_fn, &e, &n));
  assert_int_equal(n, 1);
  assert_int_equal(state_of(f->s, "i5"), RESIL_OP_COMMITTED);
  assert_int_equal(ts_effects(&f->env, "i5"), 1); /* COMMITTED:1 */
  assert_status(RESIL_OK, resil_store_recover(f->s, 0, 10, ts_effect_fn, &e, &n));
  assert_int_equal(n, 0);
  assert_int_equal(ts_effects(&f->env, "i5"), 1); /* still 1 */
  assert_int_equal(ts_effects(&f->env, "old-committed"), 1);
}

static void i7_negative_control_catches_effect_committed_early(void **state) {
  fx *f = get(state);
  atomic_int faults = 0;
  long effects = rollback_between_effect_and_terminal(f, 1, &faults);
  /* The same scenario catches the broken implementation: PENDING:1. */
  assert_int_equal(effects, 1);
  assert_false(pending_has_no_effect(RESIL_OP_PENDING, effects));
  /* and recovery then duplicates the effect. */
  ts_effect e = {0};
  uint32_t n = 0;
  f->cfg.unsafe_commit_effect_early = 0;
  fx_reopen(f);
  assert_status(RESIL_OK, resil_store_recover(f->s, 0, 10, ts_effect_fn, &e, &n));
  assert_int_equal(n, 1);
  assert_int_equal(ts_effects(&f->env, "i5"), 2);
}

/* ---- recovery and retention ----------------------------------------------- */

static void recover_takes_only_ops_older_than_threshold(void **state) {
  fx *f = get(state);
  resil_op_request req = ts_req("POST", "/p", "1");
  ts_effect e = {0};
  uint32_t n = 0;
  assert_int_equal(begin_ok(f->s, "r-old", &req, NULL), RESIL_OP_NEW);
  advance_s(f, 10);
  assert_int_equal(begin_ok(f->s, "r-young", &req, NULL), RESIL_OP_NEW);
  advance_s(f, 5);
  /* r-old is 15 s old, r-young 5 s: a 10 s threshold takes r-old only. */
  assert_status(RESIL_OK, resil_store_recover(f->s, 10 * NS_PER_S, 100,
                                              ts_effect_fn, &e, &n));
  assert_int_equal(n, 1);
  assert_int_equal(state_of(f->s, "r-old"), RESIL_OP_COMMITTED);
  assert_int_equal(state_of(f->s, "r-young"), RESIL_OP_PENDING);
  /* 1 ns short of 10 s still does not qualify; exactly 10 s does. */
  advance_s(f, 5);
  assert_status(RESIL_OK, resil_store_recover(f->s, 10 * NS_PER_S + 1, 100,
                                              ts_effect_fn, &e, &n));
  assert_int_equal(n, 0);
  assert_status(RESIL_OK, resil_store_recover(f->s, 10 * NS_PER_S, 100,
                                              ts_effect_fn, &e, &n));
  assert_int_equal(n, 1);
  assert_int_equal(state_of(f->s, "r-young"), RESIL_OP_COMMITTED);
  assert_int_equal(ts_all_effects(&f->env), 2);
  /* max_ops 0 does nothing. */
  assert_status(RESIL_OK, resil_store_recover(f->s, 0, 0, ts_effect_fn, &e, &n));
  assert_int_equal(n, 0);
}

static void recover_is_bounded_by_max_ops_oldest_first(void **state) {
  fx *f = get(state);
  resil_op_request req = ts_req("POST", "/p", "1");
  char key[16];
  for (int i = 0; i < 5; i++) {
    snprintf(key, sizeof key, "b-%d", 4 - i); /* b-4 is the oldest */
    assert_int_equal(begin_ok(f->s, key, &req, NULL), RESIL_OP_NEW);
    advance_s(f, 1);
  }
  ts_effect e = {0};
  uint32_t n = 0;
  assert_status(RESIL_OK, resil_store_recover(f->s, 0, 2, ts_effect_fn, &e, &n));
  assert_int_equal(n, 2);
  assert_int_equal(state_of(f->s, "b-4"), RESIL_OP_COMMITTED);
  assert_int_equal(state_of(f->s, "b-3"), RESIL_OP_COMMITTED);
  assert_int_equal(state_of(f->s, "b-2"), RESIL_OP_PENDING);
  assert_status(RESIL_OK, resil_store_recover(f->s, 0, 2, ts_effect_fn, &e, &n));
  assert_int_equal(n, 2);
  assert_status(RESIL_OK, resil_store_recover(f->s, 0, 2, ts_effect_fn, &e, &n));
  assert_int_equal(n, 1);
  assert_status(RESIL_OK, resil_store_recover(f->s, 0, 2, ts_effect_fn, &e, &n));
  assert_int_equal(n, 0);
  assert_int_equal(atomic_load(&e.calls), 5);
  assert_int_equal(ts_all_effects(&f->env), 5);
}

static void recover_postpones_a_failing_op_behind_the_others(void **state) {
  fx *f = get(state);
  resil_op_request req = ts_req("POST", "/p", "1");
  assert_int_equal(begin_ok(f->s, "poison", &req, NULL), RESIL_OP_NEW);
  advance_s(f, 1);
  assert_int_equal(begin_ok(f->s, "fine-1", &req, NULL), RESIL_OP_NEW);
  advance_s(f, 1);
  assert_int_equal(begin_ok(f->s, "fine-2", &req, NULL), RESIL_OP_NEW);
  advance_s(f, 1);
  ts_effect e = {.ret = RESIL_EIO, .fail_key = "poison"};
  uint32_t n = 9;
  /* The oldest fails: reported, kept PENDING, moved behind the others. */
  assert_status(RESIL_EIO, resil_store_recover(f->s, 0, 1, ts_effect_fn, &e, &n));
  assert_int_equal(n, 0);
  resil_op_record rec;
  resil_op_record_init(&rec);
  assert_status(RESIL_OK, resil_store_status(f->s, "poison", &rec));
  assert_int_equal(rec.state, RESIL_OP_PENDING);
  assert_int_equal(rec.updated_ms, wall(f));
  assert_int_equal(ts_effects(&f->env, "poison"), 0);
  assert_status(RESIL_OK, resil_store_recover(f->s, 0, 1, ts_effect_fn, &e, &n));
  assert_int_equal(n, 1);
  assert_int_equal(state_of(f->s, "fine-1"), RESIL_OP_COMMITTED);
  assert_status(RESIL_OK, resil_store_recover(f->s, 0, 1, ts_effect_fn, &e, &n));
  assert_int_equal(state_of(f->s, "fine-2"), RESIL_OP_COMMITTED);
  /* Within the threshold of its failed attempt the poison is left alone. */
  assert_status(RESIL_OK, resil_store_recover(f->s, 10 * NS_PER_S, 5,
                                              ts_effect_fn, &e, &n));
  assert_int_equal(n, 0);
  /* A batch with a failure still handles the rest and reports the failure. */
  advance_s(f, 1);
  assert_int_equal(begin_ok(f->s, "fine-3", &req, NULL), RESIL_OP_NEW);
  assert_status(RESIL_EIO, resil_store_recover(f->s, 0, 5, ts_effect_fn, &e, &n));
  assert_int_equal(n, 1);
  assert_int_equal(state_of(f->s, "fine-3"), RESIL_OP_COMMITTED);
  assert_int_equal(state_of(f->s, "poison"), RESIL_OP_PENDING);
  resil_op_record_clear(&rec);
}

static void sweep_deletes_expired_terminal_ops_in_bounded_batches(void **state) {
  fx *f = get(state);
  resil_op_request req = ts_req("POST", "/p", "1");
  ts_effect e = {0};
  char key[16];
  for (int i = 0; i < 5; i++) {
    snprintf(key, sizeof key, "old-%d", i);
    commit_key(f, key, &req, &e);
  }
  ts_effect no = {.failed = 1, .status = 400};
  commit_key(f, "old-failed", &req, &no);
  assert_int_equal(begin_ok(f->s, "old-pending", &req, NULL), RESIL_OP_NEW);
  advance_s(f, 3600);
  commit_key(f, "new", &req, &e);

  uint32_t n = 0;
  assert_status(RESIL_OK, resil_store_sweep(f->s, 1800 * NS_PER_S, 0, &n));
  assert_int_equal(n, 0);
  uint32_t total = 0;
  uint32_t batches[4];
  for (int i = 0; i < 4; i++) {
    assert_status(RESIL_OK, resil_store_sweep(f->s, 1800 * NS_PER_S, 2, &n));
    batches[i] = n;
    total += n;
  }
  assert_int_equal(batches[0], 2);
  assert_int_equal(batches[1], 2);
  assert_int_equal(batches[2], 2);
  assert_int_equal(batches[3], 0);
  assert_int_equal(total, 6);
  assert_int_equal(state_of(f->s, "old-0"), RESIL_OP_UNKNOWN);
  assert_int_equal(state_of(f->s, "old-failed"), RESIL_OP_UNKNOWN);
  assert_int_equal(state_of(f->s, "old-pending"), RESIL_OP_PENDING); /* never swept */
  assert_int_equal(state_of(f->s, "new"), RESIL_OP_COMMITTED);
  /* A swept key is new again. */
  assert_int_equal(begin_ok(f->s, "old-0", &req, NULL), RESIL_OP_NEW);
}

/* ---- locks and timeouts ------------------------------------------------------ */

typedef struct blocker {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int inside, release;
  resil_store *s;
  const char *key;
  resil_status result;
  atomic_int calls;
} blocker;

static resil_status blocking_effect(void *user, resil_store_txn *tx,
                                    const resil_op_record *pending, resil_op_response *out) {
  blocker *b = user;
  atomic_fetch_add(&b->calls, 1);
  const char *ins = resil_store_txn_sqlite(tx) ? "INSERT INTO effects (key, n) VALUES (?1, 1)"
                                              : "INSERT INTO effects (key, n) VALUES ($1, 1)";
  if (ts_txn_exec(tx, ins, pending->key)) return RESIL_EIO;
  pthread_mutex_lock(&b->mu);
  b->inside = 1;
  pthread_cond_broadcast(&b->cv);
  while (!b->release) pthread_cond_wait(&b->cv, &b->mu);
  pthread_mutex_unlock(&b->mu);
  out->status = 200;
  return RESIL_OK;
}

static void *blocking_complete(void *arg) {
  blocker *b = arg;
  b->result = resil_store_complete(b->s, b->key, blocking_effect, b, NULL);
  return NULL;
}

static int64_t mono_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void complete_times_out_while_another_holds_the_row(void **state) {
  fx *f = get(state);
  resil_op_request req = ts_req("POST", "/p", "1");
  assert_int_equal(begin_ok(f->s, "locked", &req, NULL), RESIL_OP_NEW);
  blocker b = {.s = f->s, .key = "locked"};
  pthread_mutex_init(&b.mu, NULL);
  pthread_cond_init(&b.cv, NULL);
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, blocking_complete, &b), 0);
  pthread_mutex_lock(&b.mu);
  while (!b.inside) pthread_cond_wait(&b.cv, &b.mu);
  pthread_mutex_unlock(&b.mu);

  /* Another store (another instance) with a 150 ms busy timeout. */
  resil_store_config cfg = f->cfg;
  cfg.busy_timeout_ns = MS(150);
  cfg.pool_size = 1;
  resil_store *other = NULL;
  assert_status(RESIL_OK, resil_store_open(f->env.uri, &cfg, &other, NULL));
  ts_effect e = {0};
  int64_t t0 = mono_ms();
  assert_status(RESIL_ETIMEDOUT, resil_store_complete(other, "locked", ts_effect_fn, &e, NULL));
  int64_t waited = mono_ms() - t0;
  assert_true(waited >= 140);
  assert_true(strlen(resil_store_errmsg(other)) > 0);
  assert_int_equal(atomic_load(&e.calls), 0);
  /* begin on the key being completed answers at once, without waiting. */
  resil_op_begin_result r = 0;
  resil_op_record rec;
  resil_op_record_init(&rec);
  t0 = mono_ms();
  assert_status(RESIL_OK, resil_store_begin(other, "locked", &req, &r, &rec));
  assert_true(mono_ms() - t0 < 140);
  assert_int_equal(r, RESIL_OP_IN_PROGRESS);
  assert_int_equal(rec.attempts, 1); /* read without the lock: not counted */
  /* So does execute, in both modes, without running its effect. */
  r = 0;
  t0 = mono_ms();
  assert_status(RESIL_OK,
                resil_store_execute(other, "locked", &req, ts_effect_fn, &e, &r, &rec));
  assert_true(mono_ms() - t0 < 140);
  assert_int_equal(r, RESIL_OP_IN_PROGRESS);
  assert_int_equal(rec.attempts, 1);
  assert_int_equal(atomic_load(&e.calls), 0);
  /* A new key needs the write lock: SQLite has one per database. */
  resil_status st = resil_store_begin(other, "other-key", &req, &r, NULL);
  if (f->bk == TS_SQLITE) {
    assert_status(RESIL_ETIMEDOUT, st);
  } else {
    assert_status(RESIL_OK, st);
    assert_int_equal(r, RESIL_OP_NEW);
  }

  pthread_mutex_lock(&b.mu);
  b.release = 1;
  pthread_cond_broadcast(&b.cv);
  pthread_mutex_unlock(&b.mu);
  pthread_join(t, NULL);
  assert_status(RESIL_OK, b.result);
  assert_int_equal(atomic_load(&b.calls), 1);
  assert_status(RESIL_OK, resil_store_complete(other, "locked", ts_effect_fn, &e, &rec));
  assert_int_equal(atomic_load(&e.calls), 0);
  assert_int_equal(rec.state, RESIL_OP_COMMITTED);
  assert_int_equal(ts_effects(&f->env, "locked"), 1);
  resil_op_record_clear(&rec);
  resil_store_close(other);
  pthread_cond_destroy(&b.cv);
  pthread_mutex_destroy(&b.mu);
}

static void sqlite_begin_times_out_while_another_connection_holds_the_write_lock(void **state) {
  fx *f = get(state);
  if (f->bk != TS_SQLITE) skip();
  f->cfg.busy_timeout_ns = MS(100);
  fx_reopen(f);
  sqlite3 *db = NULL;
  assert_int_equal(sqlite3_open(f->env.path, &db), SQLITE_OK);
  assert_int_equal(sqlite3_exec(db, "BEGIN IMMEDIATE", NULL, NULL, NULL), SQLITE_OK);
  resil_op_request req = ts_req("POST", "/p", "1");
  resil_op_begin_result r = 0;
  int64_t t0 = mono_ms();
  assert_status(RESIL_ETIMEDOUT, resil_store_begin(f->s, "held", &req, &r, NULL));
  assert_true(mono_ms() - t0 >= 90);
  resil_error err;
  resil_store_last_error(f->s, &err);
  assert_int_equal(err.status, RESIL_ETIMEDOUT);
  uint32_t n = 7;
  assert_status(RESIL_ETIMEDOUT, resil_store_sweep(f->s, 0, 10, &n));
  assert_int_equal(n, 0);
  /* Reads are not blocked by a writer in WAL mode. */
  assert_int_equal(state_of(f->s, "held"), RESIL_OP_UNKNOWN);
  assert_int_equal(sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL), SQLITE_OK);
  sqlite3_close(db);
  assert_int_equal(begin_ok(f->s, "held", &req, NULL), RESIL_OP_NEW);
}

/* ---- store errors ------------------------------------------------------------ */

static void sqlite_disk_full_is_eio_and_nothing_half_written(void **state) {
  fx *f = get(state);
  if (f->bk != TS_SQLITE) skip();
  f->cfg.pool_size = 1; /* the page limit is set on the one connection */
  fx_reopen(f);
  resil_op_request req = ts_req("POST", "/p", "1");
  assert_int_equal(begin_ok(f->s, "full", &req, NULL), RESIL_OP_NEW);
  size_t big = 1 << 20;
  char *blob = malloc(big);
  assert_non_null(blob);
  memset(blob, 'x', big);
  ts_effect e = {.body = blob, .body_len = big, .fill_disk = 1};
  assert_status(RESIL_EIO, resil_store_complete(f->s, "full", ts_effect_fn, &e, NULL));
  resil_error err;
  resil_store_last_error(f->s, &err);
  assert_int_equal(err.status, RESIL_EIO);
  assert_int_equal(atomic_load(&e.calls), 1);
  assert_int_equal(state_of(f->s, "full"), RESIL_OP_PENDING);
  assert_int_equal(ts_effects(&f->env, "full"), 0);
  /* The limit stays on the connection: a big new request fails whole. */
  resil_op_request bigreq = {.struct_size = sizeof bigreq, .method = "POST", .path = "/p", .body = blob, .body_len = big};
  resil_op_begin_result r = 0;
  assert_status(RESIL_EIO, resil_store_begin(f->s, "full-2", &bigreq, &r, NULL));
  assert_int_equal(state_of(f->s, "full-2"), RESIL_OP_UNKNOWN);
  free(blob);
  /* With the space back (a new connection), recovery completes it once. */
  f->cfg.pool_size = 4;
  fx_reopen(f);
  ts_effect small = {0};
  uint32_t n = 0;
  assert_status(RESIL_OK, resil_store_recover(f->s, 0, 10, ts_effect_fn, &small, &n));
  assert_int_equal(n, 1);
  assert_int_equal(ts_effects(&f->env, "full"), 1);
}

static void sqlite_open_reports_unusable_files_as_eio(void **state) {
  fx *f = get(state);
  if (f->bk != TS_SQLITE) skip();
  resil_store *s = NULL;
  resil_error err;
  char uri[700];
  snprintf(uri, sizeof uri, "sqlite:%s/no/such/dir/ops.db", f->env.dir);
  assert_status(RESIL_EIO, resil_store_open(uri, NULL, &s, &err));
  assert_null(s);
  assert_true(strlen(err.msg) > 0);

  char path[600];
  snprintf(path, sizeof path, "%s/garbage.db", f->env.dir);
  FILE *fp = fopen(path, "wb");
  assert_non_null(fp);
  for (int i = 0; i < 4096; i++) fputc("not a database"[i % 14], fp);
  fclose(fp);
  snprintf(uri, sizeof uri, "sqlite:%s", path);
  assert_status(RESIL_EIO, resil_store_open(uri, NULL, &s, &err));
  assert_null(s);
  unlink(path);
}

static void open_refuses_a_schema_newer_than_the_library(void **state) {
  fx *f = get(state);
  resil_store_close(f->s);
  f->s = NULL;
  ts_exec(&f->env, "UPDATE resil_schema SET version = 99");
  resil_store *s = NULL;
  resil_error err;
  assert_status(RESIL_EIO, resil_store_open(f->env.uri, &f->cfg, &s, &err));
  assert_null(s);
  assert_non_null(strstr(err.msg, "99"));
  ts_exec(&f->env, "UPDATE resil_schema SET version = 1");
  fx_open(f);
}

static void pg_lost_connection_is_reconnected_and_retried_once(void **state) {
  fx *f = get(state);
  if (f->bk != TS_PG) skip();
  f->cfg.pool_size = 1;
  fx_reopen(f);
  resil_op_request req = ts_req("POST", "/p", "1");
  assert_int_equal(begin_ok(f->s, "before", &req, NULL), RESIL_OP_NEW);
  char sql[300];
  snprintf(sql, sizeof sql,
           "SELECT count(pg_terminate_backend(pid, 5000)) FROM pg_stat_activity "
           "WHERE application_name = '%s' AND pid <> pg_backend_pid()",
           f->env.schema);
  assert_int_equal(ts_query_long(&f->env, sql), 1);
  /* pg_terminate_backend waited for the server process to end: the next
   * call on the pooled connection finds it gone, reconnects and runs its
   * transaction once more: the request does not fail. */
  assert_int_equal(begin_ok(f->s, "after", &req, NULL), RESIL_OP_NEW);
  assert_int_equal(state_of(f->s, "before"), RESIL_OP_PENDING);
  /* The same for a completion (its effect runs once, committed once), a
   * status query and a recovery. */
  assert_int_equal(ts_query_long(&f->env, sql), 1);
  ts_effect e = {0};
  complete_ok(f->s, "before", &e, NULL);
  assert_int_equal(ts_effects(&f->env, "before"), 1);
  assert_int_equal(ts_query_long(&f->env, sql), 1);
  assert_int_equal(state_of(f->s, "before"), RESIL_OP_COMMITTED);
  assert_int_equal(ts_query_long(&f->env, sql), 1);
  uint32_t n = 0;
  assert_status(RESIL_OK, resil_store_recover(f->s, 0, 10, ts_effect_fn, &e, &n));
  assert_int_equal(n, 1);
  assert_int_equal(ts_effects(&f->env, "after"), 1);
  assert_int_equal(ts_effects(&f->env, "before"), 1);
}

/* The connection dies inside the completion's transaction, after the
 * effect started: nothing was committed, so the store reconnects and runs
 * the whole completion again; the effect is committed exactly once. */
static void pg_connection_lost_inside_the_transaction_commits_once(void **state) {
  fx *f = get(state);
  if (f->bk != TS_PG) skip();
  resil_op_request req = ts_req("POST", "/p", "1");
  assert_int_equal(begin_ok(f->s, "k", &req, NULL), RESIL_OP_NEW);
  ts_effect e = {.kill_first = f->env.admin};
  resil_op_record rec;
  resil_op_record_init(&rec);
  complete_ok(f->s, "k", &e, &rec);
  assert_int_equal(rec.state, RESIL_OP_COMMITTED);
  assert_int_equal(atomic_load(&e.calls), 2);
  assert_int_equal(ts_effects(&f->env, "k"), 1);
  resil_op_record_clear(&rec);
}

/* A real restart of the server (scripts/pg-stop.sh --restart: same data
 * directory and port): every pooled connection is stale, and the next
 * operations still succeed. */
static void pg_restarted_server_is_reconnected_inside_the_store(void **state) {
  fx *f = get(state);
  if (f->bk != TS_PG) skip();
  f->cfg.pool_size = 2;
  fx_reopen(f);
  resil_op_request req = ts_req("POST", "/p", "1");
  ts_effect e = {0};
  commit_key(f, "k1", &req, &e);
  assert_int_equal(begin_ok(f->s, "k2", &req, NULL), RESIL_OP_NEW);
  char cmd[1600];
  snprintf(cmd, sizeof cmd, "bash '%s/scripts/pg-stop.sh' --restart '%s' >/dev/null 2>&1",
           RESIL_SOURCE_DIR, ts_pg_base());
  PQfinish(f->env.admin);
  f->env.admin = NULL;
  if (system(cmd) != 0) fail_msg("could not restart PostgreSQL: %s", cmd);
  f->env.admin = PQconnectdb(f->env.uri);
  assert_int_equal(PQstatus(f->env.admin), CONNECTION_OK);
  /* Both stale connections are used in turn. */
  complete_ok(f->s, "k2", &e, NULL);
  assert_int_equal(state_of(f->s, "k1"), RESIL_OP_COMMITTED);
  assert_int_equal(begin_ok(f->s, "k3", &req, NULL), RESIL_OP_NEW);
  assert_int_equal(begin_ok(f->s, "k1", &req, NULL), RESIL_OP_REPLAY);
  assert_int_equal(ts_effects(&f->env, "k2"), 1);
  assert_int_equal(ts_all_effects(&f->env), 2);
}


/* ---- issue 7: data faults ------------------------------------------------------ */

/* A deleted (or replaced) SQLite file: writes would go into an inode nobody
 * reads again, and a restart would run the same keys once more. */
static void sqlite_deleted_or_replaced_file_is_never_reported_as_success(void **state) {
  fx *f = get(state);
  if (f->bk != TS_SQLITE) skip();
  resil_op_request req = ts_req("POST", "/p", "1");
  ts_effect e = {0};
  commit_key(f, "before", &req, &e);
  assert_int_equal(begin_ok(f->s, "owned", &req, NULL), RESIL_OP_NEW);
  assert_int_equal(unlink(f->env.path), 0);
  resil_op_begin_result r = 0;
  assert_status(RESIL_EIO, resil_store_begin(f->s, "after", &req, &r, NULL));
  assert_non_null(strstr(resil_store_errmsg(f->s), "deleted or replaced"));
  assert_non_null(strstr(resil_store_errmsg(f->s), f->env.path));
  /* Completing a key begun before the deletion commits nothing either. */
  assert_status(RESIL_EIO, resil_store_complete(f->s, "owned", ts_effect_fn, &e, NULL));
  /* Nor does a completion that finds nothing PENDING answer from it. */
  assert_status(RESIL_EIO, resil_store_complete(f->s, "before", ts_effect_fn, &e, NULL));
  assert_non_null(strstr(resil_store_errmsg(f->s), "deleted or replaced"));
  resil_op_record rec;
  resil_op_record_init(&rec);
  assert_status(RESIL_EIO, resil_store_status(f->s, "before", &rec));
  uint32_t n = 0;
  assert_status(RESIL_EIO, resil_store_recover(f->s, 0, 10, ts_effect_fn, &e, &n));
  assert_int_equal(n, 0);
  uint32_t deleted = 7;
  assert_status(RESIL_EIO, resil_store_sweep(f->s, 0, 10, &deleted));
  assert_non_null(strstr(resil_store_errmsg(f->s), "deleted or replaced"));
  uint64_t pending = 0;
  assert_status(RESIL_EIO, resil_store_count_pending(f->s, &pending));
  assert_non_null(strstr(resil_store_errmsg(f->s), "deleted or replaced"));

  /* Replaced: another database renamed over the path. */
  fx_reopen(f);
  ts_exec(&f->env, "CREATE TABLE effects (key TEXT NOT NULL, n INTEGER NOT NULL)");
  commit_key(f, "k2", &req, &e);
  char other[400];
  snprintf(other, sizeof other, "%s/other.db", f->env.dir);
  sqlite3 *db = NULL;
  assert_int_equal(sqlite3_open(other, &db), SQLITE_OK);
  assert_int_equal(sqlite3_exec(db, "CREATE TABLE t (x)", NULL, NULL, NULL), SQLITE_OK);
  sqlite3_close(db);
  assert_int_equal(rename(other, f->env.path), 0);
  assert_status(RESIL_EIO, resil_store_begin(f->s, "k3", &req, &r, NULL));
  assert_non_null(strstr(resil_store_errmsg(f->s), "deleted or replaced"));
  resil_op_record_clear(&rec);
}

/* ---- issue 10: the SQLite schema's cost per operation ----------------------- */

/* Whether the program of sql on the store's file opens a temporary b-tree
 * (OpenEphemeral): SQLite builds one per execution for a CHECK written
 * "x IN (a, b, c)", which the store's INSERT and terminal UPDATE paid on
 * every operation with schema version 1. */
static int sqlite_program_has_ephemeral(fx *f, const char *sql) {
  sqlite3 *db = NULL;
  sqlite3_stmt *q = NULL;
  char explain[600];
  snprintf(explain, sizeof explain, "EXPLAIN %s", sql);
  assert_int_equal(sqlite3_open(f->env.path, &db), SQLITE_OK);
  if (sqlite3_prepare_v2(db, explain, -1, &q, NULL) != SQLITE_OK)
    fail_msg("EXPLAIN %s: %s", sql, sqlite3_errmsg(db));
  int found = 0, steps = 0;
  while (sqlite3_step(q) == SQLITE_ROW) {
    steps++;
    const char *op = (const char *)sqlite3_column_text(q, 1);
    if (op && strcmp(op, "OpenEphemeral") == 0) found = 1;
  }
  sqlite3_finalize(q);
  sqlite3_close(db);
  assert_true(steps > 0);
  return found;
}

static void sqlite_operation_writes_build_no_temporary_btree(void **state) {
  fx *f = get(state);
  if (f->bk != TS_SQLITE) skip();
  /* The statements of store_sqlite.c's begin and completion. */
  assert_false(sqlite_program_has_ephemeral(
      f, "INSERT INTO resil_operations (key, state, fingerprint, method, path, "
         "request_body, status, headers, body, created_ms, updated_ms, attempts) "
         "VALUES (?1, 1, ?2, ?3, ?4, ?5, NULL, NULL, NULL, ?6, ?6, 1) "
         "ON CONFLICT (key) DO NOTHING"));
  assert_false(sqlite_program_has_ephemeral(
      f, "UPDATE resil_operations SET state = ?2, status = ?3, headers = ?4, body = ?5, "
         "updated_ms = ?6 WHERE key = ?1 AND state = 1"));
  assert_int_equal(ts_query_long(&f->env, "SELECT max(version) FROM resil_schema"), 2);
  /* The constraint itself still holds: only 1, 2 and 3 are states. */
  static const char *const bad[] = {"4", "0", "1.5", "NULL"};
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    sqlite3 *db = NULL;
    char sql[400];
    snprintf(sql, sizeof sql,
             "INSERT INTO resil_operations VALUES ('bad-%zu', %s, X'00', 'POST', '/', X'', "
             "NULL, NULL, NULL, 0, 0, 1)", i, bad[i]);
    assert_int_equal(sqlite3_open(f->env.path, &db), SQLITE_OK);
    int rc = sqlite3_exec(db, sql, NULL, NULL, NULL);
    sqlite3_close(db);
    assert_int_equal(rc & 0xff, SQLITE_CONSTRAINT);
  }
}

/* Schema version 1, as 0.1 created it. */
static const char sqlite_schema_v1[] =
    "CREATE TABLE resil_schema (version INTEGER NOT NULL);"
    "CREATE TABLE resil_operations ("
    " key TEXT PRIMARY KEY NOT NULL,"
    " state INTEGER NOT NULL CHECK (state IN (1, 2, 3)),"
    " fingerprint BLOB NOT NULL,"
    " method TEXT NOT NULL,"
    " path TEXT NOT NULL,"
    " request_body BLOB NOT NULL,"
    " status INTEGER,"
    " headers BLOB,"
    " body BLOB,"
    " created_ms INTEGER NOT NULL,"
    " updated_ms INTEGER NOT NULL,"
    " attempts INTEGER NOT NULL);"
    "CREATE INDEX resil_operations_state_age ON resil_operations (state, updated_ms);"
    "INSERT INTO resil_schema (version) VALUES (1);";

/* A file of schema version 1 with a committed and a pending operation:
 * opening it migrates it to version 2 (no temporary b-tree per write), and
 * both operations are there as they were: the committed one replays byte
 * for byte, the pending one completes once. */
static void sqlite_schema_version_1_is_migrated_keeping_every_row(void **state) {
  fx *f = get(state);
  if (f->bk != TS_SQLITE) skip();
  resil_op_request req = ts_req("POST", "/p", "1");
  ts_effect e = {.headers = "X: 1\r\n", .headers_len = 6, .body = "done", .body_len = 4};
  commit_key(f, "old-done", &req, &e);
  assert_int_equal(begin_ok(f->s, "old-pending", &req, NULL), RESIL_OP_NEW);
  resil_store_close(f->s);
  f->s = NULL;
  /* The same rows in a version 1 schema. */
  ts_exec(&f->env,
          "CREATE TABLE saved AS SELECT * FROM resil_operations;"
          "DROP TABLE resil_operations; DROP TABLE resil_schema;");
  ts_exec(&f->env, sqlite_schema_v1);
  ts_exec(&f->env, "INSERT INTO resil_operations SELECT * FROM saved; DROP TABLE saved;");
  assert_true(sqlite_program_has_ephemeral(
      f, "UPDATE resil_operations SET state = ?2 WHERE key = ?1 AND state = 1"));

  fx_open(f);
  assert_int_equal(ts_query_long(&f->env, "SELECT count(*) FROM resil_schema"), 1);
  assert_int_equal(ts_query_long(&f->env, "SELECT max(version) FROM resil_schema"), 2);
  assert_int_equal(ts_query_long(&f->env, "SELECT count(*) FROM resil_operations"), 2);
  assert_false(sqlite_program_has_ephemeral(
      f, "UPDATE resil_operations SET state = ?2 WHERE key = ?1 AND state = 1"));
  assert_int_equal(ts_query_long(&f->env,
                                 "SELECT count(*) FROM sqlite_master WHERE type = 'index' "
                                 "AND name = 'resil_operations_state_age'"), 1);
  resil_op_record rec;
  resil_op_record_init(&rec);
  assert_int_equal(begin_ok(f->s, "old-done", &req, &rec), RESIL_OP_REPLAY);
  assert_int_equal(rec.status, 201);
  assert_int_equal(rec.headers_len, 6);
  assert_memory_equal(rec.headers, "X: 1\r\n", 6);
  assert_int_equal(rec.body_len, 4);
  assert_memory_equal(rec.body, "done", 4);
  assert_int_equal(rec.attempts, 2);
  assert_int_equal(begin_ok(f->s, "old-pending", &req, &rec), RESIL_OP_IN_PROGRESS);
  complete_ok(f->s, "old-pending", &e, &rec);
  assert_int_equal(rec.state, RESIL_OP_COMMITTED);
  assert_int_equal(ts_effects(&f->env, "old-pending"), 1);
  assert_int_equal(ts_effects(&f->env, "old-done"), 1);
  resil_op_record_clear(&rec);
  /* Opening again finds the current version and changes nothing. */
  fx_reopen(f);
  assert_int_equal(ts_query_long(&f->env, "SELECT count(*) FROM resil_operations"), 2);
  assert_int_equal(state_of(f->s, "old-pending"), RESIL_OP_COMMITTED);
}

/* write system calls of this process so far (Linux /proc/self/io), or -1. */
static long proc_write_calls(void) {
  FILE *fp = fopen("/proc/self/io", "r");
  if (!fp) return -1;
  char line[128];
  long n = -1;
  while (fgets(line, sizeof line, fp))
    if (sscanf(line, "syscw: %ld", &n) == 1) break;
  fclose(fp);
  return n;
}

typedef struct frame_count {
  long frames;
  long commits;
  int last;
  int hooked;
} frame_count;

static int count_frames(void *user, sqlite3 *db, const char *name, int nframes) {
  (void)db;
  (void)name;
  frame_count *c = user;
  c->frames += nframes >= c->last ? nframes - c->last : nframes;
  c->commits++;
  c->last = nframes;
  return SQLITE_OK;
}

/* Writes nothing; counts the WAL frames its connection commits from now on
 * (the hook also stops automatic checkpoints, which write the database). */
static resil_status effect_counting_frames(void *user, resil_store_txn *tx,
                                           const resil_op_record *pending,
                                           resil_op_response *out) {
  (void)pending;
  frame_count *c = user;
  if (!c->hooked) {
    sqlite3_wal_hook(resil_store_txn_sqlite(tx), count_frames, c);
    c->hooked = 1;
  }
  out->status = 201;
  return RESIL_OK;
}

/* SQLite writes a WAL frame as its 24-byte header and its page, and a
 * transaction's frames one after another; the store's VFS gathers them and
 * sends a commit's frames in one write: a keyed operation makes one write
 * system call per commit, not one or two per frame. */
/* A store of one connection whose commits c counts from now on (an
 * operation `key` made to install the hook; no automatic checkpoint). */
static void one_counted_connection(fx *f, frame_count *c, const char *key,
                                   const resil_op_request *req) {
  f->cfg.pool_size = 1;
  fx_reopen(f);
  assert_int_equal(begin_ok(f->s, key, req, NULL), RESIL_OP_NEW);
  assert_status(RESIL_OK, resil_store_complete(f->s, key, effect_counting_frames, c, NULL));
  assert_true(c->hooked);
  c->frames = c->commits = 0;
}

static void sqlite_each_commit_takes_one_write(void **state) {
  fx *f = get(state);
  if (f->bk != TS_SQLITE) skip();
  if (proc_write_calls() < 0) skip();
  resil_op_request req = ts_req("POST", "/p", "1");
  frame_count c = {0};
  one_counted_connection(f, &c, "wf-warm", &req);
  enum { N = 20 };
  char keys[N][16];
  for (int i = 0; i < N; i++) snprintf(keys[i], sizeof keys[i], "wf-%d", i);
  int ok = 1;
  long w0 = proc_write_calls();
  for (int i = 0; i < N && ok; i++) {
    resil_op_begin_result r = 0;
    ok = resil_store_begin(f->s, keys[i], &req, &r, NULL) == RESIL_OK && r == RESIL_OP_NEW &&
         resil_store_complete(f->s, keys[i], effect_counting_frames, &c, NULL) == RESIL_OK;
  }
  long w1 = proc_write_calls();
  assert_true(ok);
  assert_true(c.frames >= 2 * N);
  assert_true(c.commits >= N);
  if (w1 - w0 > c.commits + c.commits / 8)
    fail_msg("%ld write calls for %ld commits of %ld WAL frames", w1 - w0, c.commits, c.frames);
  assert_int_equal(state_of(f->s, "wf-19"), RESIL_OP_COMMITTED);
}

static void copy_file(const char *from, const char *to) {
  FILE *in = fopen(from, "rb"), *out = fopen(to, "wb");
  assert_non_null(in);
  assert_non_null(out);
  char buf[65536];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, in)) > 0) assert_int_equal(fwrite(buf, 1, n, out), n);
  assert_int_equal(fclose(in), 0);
  assert_int_equal(fclose(out), 0);
}

/* The frames the VFS gathers reach the WAL file byte for byte and in
 * order: a copy of the database and its WAL taken while the store is open
 * (no checkpoint ran: the WAL hook replaced the automatic one), opened
 * without the wal-index, is rebuilt from the WAL file alone by SQLite's
 * recovery, which keeps frames only up to the first that fails its
 * checksum. Every operation is there, the 1 MB response and the 200 KB
 * request (runs of frames longer than the VFS gathers at once) included. */
static void sqlite_wal_written_through_the_vfs_recovers_every_commit(void **state) {
  fx *f = get(state);
  if (f->bk != TS_SQLITE) skip();
  resil_op_request req = ts_req("POST", "/p", "1");
  frame_count c = {0};
  one_counted_connection(f, &c, "w-0", &req);
  size_t big = 1 << 20;
  unsigned char *blob = malloc(big);
  assert_non_null(blob);
  for (size_t i = 0; i < big; i++) blob[i] = (unsigned char)(i * 7 + i / 4096);
  /* A 200 KB request: begin's own commit is a long run of frames (under
   * synchronous=NORMAL with effects_in_store: no sync after it). */
  size_t bigreq_len = 200 * 1024;
  resil_op_request bigreq = {.struct_size = sizeof bigreq, .method = "POST", .path = "/p",
                             .body = blob + 1, .body_len = bigreq_len};
  enum { N = 30 };
  for (int i = 1; i < N; i++) {
    char key[16];
    snprintf(key, sizeof key, "w-%d", i);
    ts_effect e = {0};
    if (i == N / 2) {
      e.body = blob;
      e.body_len = big;
    }
    assert_int_equal(begin_ok(f->s, key, i == N / 3 ? &bigreq : &req, NULL), RESIL_OP_NEW);
    resil_status cst = resil_store_complete(f->s, key, ts_effect_fn, &e, NULL);
    if (cst) fail_msg("complete %s: %s", key, resil_store_errmsg(f->s));
  }
  assert_true(c.frames > (long)(big / 4096));
  char db[400], wal[400], cdb[400], cwal[400];
  snprintf(db, sizeof db, "%s", f->env.path);
  snprintf(wal, sizeof wal, "%s-wal", f->env.path);
  snprintf(cdb, sizeof cdb, "%s/copy.db", f->env.dir);
  snprintf(cwal, sizeof cwal, "%s/copy.db-wal", f->env.dir);
  struct stat sb;
  assert_int_equal(stat(wal, &sb), 0);
  assert_true(sb.st_size > (off_t)big);
  copy_file(db, cdb);
  copy_file(wal, cwal);
  sqlite3 *h = NULL;
  assert_int_equal(sqlite3_open_v2(cdb, &h, SQLITE_OPEN_READWRITE, NULL), SQLITE_OK);
  sqlite3_stmt *q = NULL;
  assert_int_equal(sqlite3_prepare_v2(h, "PRAGMA integrity_check", -1, &q, NULL), SQLITE_OK);
  assert_int_equal(sqlite3_step(q), SQLITE_ROW);
  assert_string_equal((const char *)sqlite3_column_text(q, 0), "ok");
  sqlite3_finalize(q);
  assert_int_equal(sqlite3_prepare_v2(h,
                                      "SELECT count(*), sum(state = 2) FROM resil_operations "
                                      "WHERE key LIKE 'w-%'",
                                      -1, &q, NULL),
                   SQLITE_OK);
  assert_int_equal(sqlite3_step(q), SQLITE_ROW);
  assert_int_equal(sqlite3_column_int64(q, 0), N);
  assert_int_equal(sqlite3_column_int64(q, 1), N);
  sqlite3_finalize(q);
  char sql[200];
  snprintf(sql, sizeof sql, "SELECT body FROM resil_operations WHERE key = 'w-%d'", N / 2);
  assert_int_equal(sqlite3_prepare_v2(h, sql, -1, &q, NULL), SQLITE_OK);
  assert_int_equal(sqlite3_step(q), SQLITE_ROW);
  assert_int_equal(sqlite3_column_bytes(q, 0), (int)big);
  assert_memory_equal(sqlite3_column_blob(q, 0), blob, big);
  sqlite3_finalize(q);
  snprintf(sql, sizeof sql, "SELECT request_body FROM resil_operations WHERE key = 'w-%d'", N / 3);
  assert_int_equal(sqlite3_prepare_v2(h, sql, -1, &q, NULL), SQLITE_OK);
  assert_int_equal(sqlite3_step(q), SQLITE_ROW);
  assert_int_equal(sqlite3_column_bytes(q, 0), (int)bigreq_len);
  assert_memory_equal(sqlite3_column_blob(q, 0), blob + 1, bigreq_len);
  sqlite3_finalize(q);
  sqlite3_close(h);
  free(blob);
}

static void damage_fingerprint(fx *f, const char *key) {
  char sql[200];
  snprintf(sql, sizeof sql,
           f->bk == TS_SQLITE
               ? "UPDATE resil_operations SET fingerprint = X'0102' WHERE key = '%s'"
               : "UPDATE resil_operations SET fingerprint = '\\x0102'::bytea WHERE key = '%s'",
           key);
  ts_exec(&f->env, sql);
}

static void recovery_skips_and_reports_damaged_pending_rows(void **state) {
  fx *f = get(state);
  resil_op_request req = ts_req("POST", "/p", "1");
  const char *keys[] = {"a", "b", "c", "d"};
  for (int i = 0; i < 4; i++) assert_int_equal(begin_ok(f->s, keys[i], &req, NULL), RESIL_OP_NEW);
  damage_fingerprint(f, "b");
  ts_exec(&f->env, "UPDATE resil_operations SET method = '' WHERE key = 'c'");
  ts_effect e = {0};
  resil_store_recovery rep;
  memset(&rep, 0x5a, sizeof rep);
  assert_status(RESIL_OK, resil_store_recover_report(f->s, 0, 10, ts_effect_fn, &e, &rep));
  assert_int_equal(rep.struct_size, sizeof rep);
  assert_int_equal(rep.selected, 4);
  assert_int_equal(rep.recovered, 2);
  assert_int_equal(rep.damaged, 2);
  assert_int_equal(rep.failed, 0);
  assert_string_equal(rep.damaged_keys, "b,c");
  assert_int_equal(ts_effects(&f->env, "a"), 1);
  assert_int_equal(ts_effects(&f->env, "d"), 1);
  assert_int_equal(ts_effects(&f->env, "b"), 0);
  assert_int_equal(state_of(f->s, "d"), RESIL_OP_COMMITTED);
  /* The old entry point recovers the rest too, and says OK. */
  uint32_t n = 9;
  assert_status(RESIL_OK, resil_store_recover(f->s, 0, 10, ts_effect_fn, &e, &n));
  assert_int_equal(n, 0);
  /* A damaged row is an error where it is read, never a record. */
  resil_op_record rec;
  resil_op_record_init(&rec);
  assert_status(RESIL_EIO, resil_store_status(f->s, "b", &rec));
  assert_non_null(strstr(resil_store_errmsg(f->s), "not a valid operation"));
  resil_op_record_clear(&rec);
}

static void status_below_200_is_never_committed_nor_replayed(void **state) {
  fx *f = get(state);
  resil_op_request req = ts_req("POST", "/p", "1");
  const int bad[] = {100, 101, 199};
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    char key[16];
    snprintf(key, sizeof key, "k%d", bad[i]);
    assert_int_equal(begin_ok(f->s, key, &req, NULL), RESIL_OP_NEW);
    ts_effect e = {.status = bad[i]};
    assert_status(RESIL_EINVAL, resil_store_complete(f->s, key, ts_effect_fn, &e, NULL));
    assert_field(f->s, "status");
    assert_int_equal(state_of(f->s, key), RESIL_OP_PENDING);
    assert_int_equal(ts_effects(&f->env, key), 0);
  }
  ts_effect ok = {.status = 200};
  commit_key(f, "k200", &req, &ok);
  /* A 1xx found in the table (written by something else) is damage: begin
   * refuses to replay it and status refuses to report it. */
  ts_exec(&f->env, "UPDATE resil_operations SET status = 100 WHERE key = 'k200'");
  resil_op_begin_result r = 0;
  resil_op_record rec;
  resil_op_record_init(&rec);
  assert_status(RESIL_EIO, resil_store_begin(f->s, "k200", &req, &r, &rec));
  assert_status(RESIL_EIO, resil_store_status(f->s, "k200", &rec));
  assert_int_equal(rec.status, 0);
  resil_op_record_clear(&rec);
}

static void unsized_request_and_record_are_refused(void **state) {
  fx *f = get(state);
  resil_op_request req = ts_req("POST", "/p", "1");
  resil_op_request raw = req;
  raw.struct_size = 0;
  resil_op_begin_result r = 0;
  assert_status(RESIL_EINVAL, resil_store_begin(f->s, "k", &raw, &r, NULL));
  assert_non_null(strstr(resil_store_errmsg(f->s), "call resil_op_request_init()"));
  unsigned char fp[32];
  assert_status(RESIL_EINVAL, resil_op_fingerprint(&raw, fp));
  resil_op_record rec;
  memset(&rec, 0, sizeof rec);
  assert_status(RESIL_EINVAL, resil_store_begin(f->s, "k", &req, &r, &rec));
  assert_non_null(strstr(resil_store_errmsg(f->s), "call resil_op_record_init()"));
  assert_status(RESIL_EINVAL, resil_store_status(f->s, "k", &rec));
  /* Initialised with the macros, both work. */
  resil_op_request_init(&raw);
  raw.method = "POST";
  raw.path = "/p";
  raw.body = "1";
  raw.body_len = 1;
  resil_op_record_init(&rec);
  assert_int_equal(rec.struct_size, sizeof rec);
  assert_int_equal(begin_ok(f->s, "k", &raw, &rec), RESIL_OP_NEW);
  assert_int_equal(rec.struct_size, sizeof rec);
  resil_op_record_clear(&rec);
  assert_int_equal(rec.struct_size, sizeof rec);
}

static void sqlite_open_failures_say_why(void **state) {
  fx *f = get(state);
  if (f->bk != TS_SQLITE) skip();
  resil_store *s = NULL;
  resil_error err;
  char uri[700];
  snprintf(uri, sizeof uri, "sqlite:%s/no/such/dir/ops.db", f->env.dir);
  assert_status(RESIL_EIO, resil_store_open(uri, NULL, &s, &err));
  if (!strstr(err.msg, "no such directory"))
    fail_msg("no reason in '%s'", err.msg);
  /* A directory where the file should be. */
  snprintf(uri, sizeof uri, "sqlite:%s", f->env.dir);
  assert_status(RESIL_EIO, resil_store_open(uri, NULL, &s, &err));
  assert_non_null(strstr(err.msg, f->env.dir));
  if (geteuid() != 0) {
    /* Permissions mean nothing to root. */
    char dir[400];
    snprintf(dir, sizeof dir, "%s/ro", f->env.dir);
    assert_int_equal(mkdir(dir, 0500), 0);
    snprintf(uri, sizeof uri, "sqlite:%s/ops.db", dir);
    assert_status(RESIL_EIO, resil_store_open(uri, NULL, &s, &err));
    if (!strstr(err.msg, "ermission denied")) fail_msg("no reason in '%s'", err.msg);
    rmdir(dir);
  }
  /* A query part never becomes part of the file name. */
  snprintf(uri, sizeof uri, "sqlite:%s/q.db?mode=ro", f->env.dir);
  assert_status(RESIL_EINVAL, resil_store_open(uri, NULL, &s, &err));
  assert_string_equal(err.field, "uri");
  char stray[500];
  snprintf(stray, sizeof stray, "%s/q.db?mode=ro", f->env.dir);
  assert_int_equal(access(stray, F_OK), -1);
}

/* ---- validation -------------------------------------------------------------- */

static void check_open_field(const char *uri, const resil_store_config *cfg,
                             const char *field) {
  resil_store *s = (resil_store *)1;
  resil_error err;
  assert_status(RESIL_EINVAL, resil_store_open(uri, cfg, &s, &err));
  assert_null(s);
  if (strcmp(err.field, field) != 0) fail_msg("field '%s', expected '%s'", err.field, field);
}

static void open_rejects_bad_uris_and_config_fields(void **state) {
  (void)state;
  check_open_field(NULL, NULL, "uri");
  check_open_field("", NULL, "uri");
  check_open_field("mysql://localhost/x", NULL, "uri");
  check_open_field("sqlite:", NULL, "uri");
  check_open_field("sqlite::memory:", NULL, "uri");
  check_open_field("SQLITE:/tmp/x.db", NULL, "uri");
  /* A query part is refused, never taken into the file name. */
  check_open_field("sqlite:/tmp/x.db?mode=ro", NULL, "uri");
  check_open_field("sqlite:/tmp/x.db#frag", NULL, "uri");
  resil_error err;
  assert_status(RESIL_EINVAL, resil_store_open("sqlite:/tmp/x.db", NULL, NULL, &err));
  assert_string_equal(err.field, "out");

  resil_store_config cfg;
  resil_store_config_init(&cfg);
  assert_int_equal(cfg.struct_size, sizeof cfg);
  assert_int_equal(cfg.busy_timeout_ns, 5 * NS_PER_S);
  assert_int_equal(cfg.pool_size, 4);
  assert_int_equal(cfg.unsafe_commit_effect_early, 0);
  cfg.struct_size = 0;
  check_open_field("sqlite:/tmp/x.db", &cfg, "struct_size");
  {
    resil_store *s0 = NULL;
    resil_error e0;
    assert_status(RESIL_EINVAL, resil_store_open("sqlite:/tmp/x.db", &cfg, &s0, &e0));
    assert_non_null(strstr(e0.msg, "call resil_store_config_init()"));
  }
  resil_store_config_init(&cfg);
  cfg.pool_size = 0;
  check_open_field("sqlite:/tmp/x.db", &cfg, "pool_size");
  cfg.pool_size = RESIL_STORE_POOL_MAX + 1;
  resil_store *s = NULL;
  assert_status(RESIL_EINVAL, resil_store_open("sqlite:/tmp/x.db", &cfg, &s, &err));
  assert_int_equal(err.has_range, 1);
  assert_int_equal(err.min, 1);
  assert_int_equal(err.max, RESIL_STORE_POOL_MAX);
  assert_int_equal(err.got, RESIL_STORE_POOL_MAX + 1);
  resil_store_config_init(&cfg);
  cfg.busy_timeout_ns = -1;
  check_open_field("sqlite:/tmp/x.db", &cfg, "busy_timeout_ns");
  cfg.busy_timeout_ns = RESIL_STORE_BUSY_TIMEOUT_MAX_NS + 1;
  check_open_field("sqlite:/tmp/x.db", &cfg, "busy_timeout_ns");
  /* Durations are refused in human units. */
  cfg.busy_timeout_ns = 2 * RESIL_STORE_BUSY_TIMEOUT_MAX_NS;
  assert_status(RESIL_EINVAL, resil_store_open("sqlite:/tmp/x.db", &cfg, &s, &err));
  if (!strstr(err.msg, "1 h") || !strstr(err.msg, "2 h"))
    fail_msg("busy_timeout_ns message not in human units: %s", err.msg);
  resil_store_config_init(&cfg);
  cfg.unsafe_commit_effect_early = 2;
  check_open_field("sqlite:/tmp/x.db", &cfg, "unsafe_commit_effect_early");
  resil_store_config_init(&cfg);
  assert_int_equal(cfg.effects_in_store, 0);
  cfg.effects_in_store = 2;
  check_open_field("sqlite:/tmp/x.db", &cfg, "effects_in_store");
  /* A caller built against the 0.1 layout (without effects_in_store) gets
   * the default. */
  resil_store_config_init(&cfg);
  cfg.effects_in_store = 7; /* past the caller's struct: never read */
  cfg.struct_size = offsetof(resil_store_config, effects_in_store);
  {
    char dir[] = "/tmp/resil-store-old-XXXXXX";
    assert_non_null(mkdtemp(dir));
    char uri[128];
    snprintf(uri, sizeof uri, "sqlite:%s/o.db", dir);
    resil_store *so = NULL;
    assert_status(RESIL_OK, resil_store_open(uri, &cfg, &so, &err));
    resil_store_close(so);
    char p[128];
    const char *suffix[] = {"", "-wal", "-shm"};
    for (int i = 0; i < 3; i++) {
      snprintf(p, sizeof p, "%s/o.db%s", dir, suffix[i]);
      unlink(p);
    }
    rmdir(dir);
  }

  /* A PostgreSQL URI nobody listens on: a clear EIO, quickly. */
  assert_status(RESIL_EIO, resil_store_open("postgresql://nobody@127.0.0.1:1/x", NULL, &s, &err));
  assert_null(s);
  assert_true(strlen(err.msg) > 0);

  /* NULL and dead handles. */
  resil_store_close(NULL);
  resil_op_begin_result r;
  assert_status(RESIL_EMISUSE, resil_store_begin(NULL, "k", NULL, &r, NULL));
  assert_status(RESIL_EMISUSE, resil_store_complete(NULL, "k", ts_effect_fn, NULL, NULL));
  assert_status(RESIL_EMISUSE, resil_store_status(NULL, "k", NULL));
  assert_status(RESIL_EMISUSE, resil_store_recover(NULL, 0, 1, ts_effect_fn, NULL, NULL));
  assert_status(RESIL_EMISUSE, resil_store_sweep(NULL, 0, 1, NULL));
  assert_string_equal(resil_store_errmsg(NULL), "");
  assert_null(resil_store_backend(NULL));
  assert_string_equal(resil_op_state_name(RESIL_OP_COMMITTED), "COMMITTED");
  assert_string_equal(resil_op_state_name((resil_op_state)42), "UNKNOWN");
  assert_string_equal(resil_op_begin_result_name(RESIL_OP_IN_PROGRESS), "IN_PROGRESS");
}

static void check_begin_field(resil_store *s, const char *key, const resil_op_request *req,
                              const char *field) {
  resil_op_begin_result r;
  assert_status(RESIL_EINVAL, resil_store_begin(s, key, req, &r, NULL));
  resil_error err;
  resil_store_last_error(s, &err);
  assert_int_equal(err.status, RESIL_EINVAL);
  if (strcmp(err.field, field) != 0)
    fail_msg("key '%.20s': field '%s', expected '%s'", key ? key : "(null)", err.field, field);
}

static void calls_reject_bad_keys_and_requests_naming_the_field(void **state) {
  fx *f = get(state);
  assert_string_equal(resil_store_backend(f->s), ts_backend_names[f->bk]);
  resil_op_request req = ts_req("POST", "/p", "1");
  char longkey[RESIL_STORE_KEY_MAX + 2];
  memset(longkey, 'k', sizeof longkey - 1);
  longkey[sizeof longkey - 1] = '\0';
  check_begin_field(f->s, NULL, &req, "key");
  check_begin_field(f->s, "", &req, "key");
  check_begin_field(f->s, longkey, &req, "key");
  check_begin_field(f->s, "a b", &req, "key");
  check_begin_field(f->s, "a\x01", &req, "key");
  check_begin_field(f->s, "caf\xc3\xa9", &req, "key");
  check_begin_field(f->s, "k", NULL, "req");
  resil_op_request bad = req;
  bad.method = NULL;
  check_begin_field(f->s, "k", &bad, "method");
  bad.method = "";
  check_begin_field(f->s, "k", &bad, "method");
  bad.method = "ABCDEFGHIJKLMNOP"; /* 16 */
  check_begin_field(f->s, "k", &bad, "method");
  bad.method = "PO ST";
  check_begin_field(f->s, "k", &bad, "method");
  bad = req;
  bad.path = NULL;
  check_begin_field(f->s, "k", &bad, "path");
  bad.path = "/\xff";
  check_begin_field(f->s, "k", &bad, "path");
  bad.path = "/\xc0\xaf"; /* overlong '/' */
  check_begin_field(f->s, "k", &bad, "path");
  bad = req;
  bad.body = NULL;
  bad.body_len = 3;
  check_begin_field(f->s, "k", &bad, "body");
  assert_status(RESIL_EINVAL, resil_store_begin(f->s, "k", &req, NULL, NULL));
  assert_field(f->s, "result");
  /* Nothing was stored by any of them. */
  assert_int_equal(state_of(f->s, "k"), RESIL_OP_UNKNOWN);

  /* The longest key, the longest method and a non-ASCII path are fine. */
  longkey[RESIL_STORE_KEY_MAX] = '\0';
  resil_op_request ok = ts_req("ABCDEFGHIJKLMNO", "/caf\xc3\xa9/\xe2\x82\xac", "");
  resil_op_record rec;
  resil_op_record_init(&rec);
  assert_int_equal(begin_ok(f->s, longkey, &ok, &rec), RESIL_OP_NEW);
  assert_string_equal(rec.key, longkey);
  assert_int_equal(begin_ok(f->s, longkey, &ok, &rec), RESIL_OP_IN_PROGRESS);
  assert_string_equal(rec.path, "/caf\xc3\xa9/\xe2\x82\xac");
  assert_string_equal(rec.method, "ABCDEFGHIJKLMNO");
  resil_op_record_clear(&rec);

  /* The other calls. */
  assert_status(RESIL_EINVAL, resil_store_complete(f->s, "", ts_effect_fn, NULL, NULL));
  assert_field(f->s, "key");
  assert_status(RESIL_EINVAL, resil_store_complete(f->s, "k", NULL, NULL, NULL));
  assert_field(f->s, "effect");
  assert_status(RESIL_EINVAL, resil_store_status(f->s, "k", NULL));
  assert_field(f->s, "rec");
  assert_status(RESIL_EINVAL, resil_store_status(f->s, "a b", &rec));
  assert_field(f->s, "key");
  assert_status(RESIL_EINVAL, resil_store_recover(f->s, -1, 1, ts_effect_fn, NULL, NULL));
  assert_field(f->s, "older_than_ns");
  assert_status(RESIL_EINVAL, resil_store_recover(f->s, 0, 1, NULL, NULL, NULL));
  assert_field(f->s, "effect");
  assert_status(RESIL_EINVAL, resil_store_sweep(f->s, -1, 1, NULL));
  assert_field(f->s, "older_than_ns");
  /* A successful call forgets the error. */
  assert_int_equal(state_of(f->s, "k"), RESIL_OP_UNKNOWN);
  assert_string_equal(resil_store_errmsg(f->s), "");
  resil_error err;
  resil_store_last_error(f->s, &err);
  assert_int_equal(err.status, RESIL_OK);
}

typedef struct errmsg_probe {
  resil_store *s;
  char seen[64];
} errmsg_probe;

static void *read_errmsg(void *arg) {
  errmsg_probe *p = arg;
  snprintf(p->seen, sizeof p->seen, "%s", resil_store_errmsg(p->s));
  return NULL;
}

static void errmsg_belongs_to_the_calling_thread(void **state) {
  fx *f = get(state);
  resil_op_begin_result r;
  assert_status(RESIL_EINVAL, resil_store_begin(f->s, "", NULL, &r, NULL));
  assert_true(strlen(resil_store_errmsg(f->s)) > 0);
  pthread_t t;
  errmsg_probe probe = {.s = f->s, .seen = "unset"};
  assert_int_equal(pthread_create(&t, NULL, read_errmsg, &probe), 0);
  pthread_join(t, NULL);
  assert_string_equal(probe.seen, "");
  assert_true(strlen(resil_store_errmsg(f->s)) > 0);
}

/* ---- allocation failures ------------------------------------------------------ */

static void open_allocation_failure_sweep(void **state) {
  fx *f = get(state);
  resil_store_close(f->s);
  f->s = NULL;
  int succeeded = 0;
  for (long i = 1; i < 200 && !succeeded; i++) {
    test_alloc ta;
    test_alloc_init(&ta, i);
    resil_store_config cfg = f->cfg;
    cfg.alloc = &ta.a;
    resil_store *s = NULL;
    resil_error err;
    resil_status st = resil_store_open(f->env.uri, &cfg, &s, &err);
    if (st == RESIL_OK) {
      succeeded = 1;
      resil_store_close(s);
    } else {
      if (st != RESIL_ENOMEM) fail_msg("fail at %ld: %s: %s", i, resil_status_name(st), err.msg);
      assert_null(s);
    }
    assert_int_equal(ta.live, 0);
  }
  assert_true(succeeded);
  fx_open(f);
}

static void begin_and_complete_allocation_failure_sweep(void **state) {
  fx *f = get(state);
  test_alloc ta;
  test_alloc_init(&ta, 0);
  f->cfg.alloc = &ta.a;
  fx_reopen(f);
  long base = ta.live;
  resil_op_request req = ts_req("POST", "/p", "body");
  ts_effect e = {.status = 200, .body = "result", .body_len = 6,
                 .headers = "A: b\r\n", .headers_len = 6};
  commit_key(f, "alloc-done", &req, &e);
  assert_int_equal(ta.live, base);

  /* Replays: each either succeeds or fails whole, counting no attempt. */
  uint32_t oks = 0;
  for (long i = 1; i < 50; i++) {
    ta.fail_at = ta.count + i;
    resil_op_record rec;
    resil_op_record_init(&rec);
    resil_op_begin_result r = 0;
    resil_status st = resil_store_begin(f->s, "alloc-done", &req, &r, &rec);
    if (st == RESIL_OK) {
      oks++;
      assert_int_equal(r, RESIL_OP_REPLAY);
      assert_memory_equal(rec.body, "result", 6);
    } else {
      assert_status(RESIL_ENOMEM, st);
    }
    resil_op_record_clear(&rec);
    assert_int_equal(ta.live, base);
  }
  ta.fail_at = 0;
  resil_op_record rec;
  resil_op_record_init(&rec);
  assert_status(RESIL_OK, resil_store_status(f->s, "alloc-done", &rec));
  assert_int_equal(rec.attempts, 1 + oks);
  resil_op_record_clear(&rec);

  /* New keys and completions: ENOMEM leaves either nothing or PENDING. */
  for (long i = 1; i < 30; i++) {
    char key[24];
    snprintf(key, sizeof key, "alloc-%ld", i);
    ta.fail_at = ta.count + i;
    resil_op_begin_result r = 0;
    resil_op_record_init(&rec);
    resil_status st = resil_store_begin(f->s, key, &req, &r, &rec);
    resil_op_record_clear(&rec);
    ta.fail_at = 0;
    if (st) {
      assert_status(RESIL_ENOMEM, st);
      assert_int_equal(state_of(f->s, key), RESIL_OP_UNKNOWN);
      continue;
    }
    ta.fail_at = ta.count + i;
    ts_effect ce = {.status = 200, .body = "x", .body_len = 1};
    resil_op_record_init(&rec);
    st = resil_store_complete(f->s, key, ts_effect_fn, &ce, &rec);
    resil_op_record_clear(&rec);
    ta.fail_at = 0;
    resil_op_state want = st == RESIL_OK ? RESIL_OP_COMMITTED : RESIL_OP_PENDING;
    if (st) assert_status(RESIL_ENOMEM, st);
    assert_int_equal(state_of(f->s, key), want);
    assert_int_equal(ts_effects(&f->env, key), want == RESIL_OP_COMMITTED ? 1 : 0);
    assert_int_equal(ta.live, base);
  }
  resil_store_close(f->s);
  f->s = NULL;
  assert_int_equal(ta.live, 0);
  f->cfg.alloc = NULL;
  fx_open(f);
}

/* ---- effects_in_store: which commits are flushed ------------------------
 * SQLite: every xSync reaching the default VFS is counted (sync_vfs_install,
 * registered as the default VFS before any store opens: the store's own VFS
 * wraps it). PostgreSQL: a trigger on resil_operations records the
 * synchronous_commit in effect in the transaction of every row written. */
static atomic_long wal_syncs, db_syncs;
static sqlite3_io_methods sync_methods[2][4]; /* [is_wal][variant] */
static const sqlite3_io_methods *sync_orig[4];
static int sync_nvariants;
static pthread_mutex_t sync_mu = PTHREAD_MUTEX_INITIALIZER;
static sqlite3_vfs sync_vfs, *sync_base;

static int sync_count(sqlite3_file *f, int flags, int is_wal) {
  atomic_fetch_add(is_wal ? &wal_syncs : &db_syncs, 1);
  for (int i = 0; i < sync_nvariants; i++)
    if (f->pMethods == &sync_methods[is_wal][i]) return sync_orig[i]->xSync(f, flags);
  return SQLITE_IOERR_FSYNC;
}
static int sync_wal(sqlite3_file *f, int flags) { return sync_count(f, flags, 1); }
static int sync_db(sqlite3_file *f, int flags) { return sync_count(f, flags, 0); }

/* Armed: a write of exactly one 4 KB page to a WAL file fails (the store's
 * VFS writes a page alone only when it did not fit behind its header). */
static atomic_int fail_lone_pages;
static atomic_long lone_pages_failed;
static int sync_wal_write(sqlite3_file *f, const void *buf, int n, sqlite3_int64 off) {
  for (int i = 0; i < sync_nvariants; i++) {
    if (f->pMethods != &sync_methods[1][i]) continue;
    if (n == 4096 && atomic_load(&fail_lone_pages)) {
      atomic_fetch_add(&lone_pages_failed, 1);
      return SQLITE_IOERR_WRITE;
    }
    return sync_orig[i]->xWrite(f, buf, n, off);
  }
  return SQLITE_IOERR_WRITE;
}

static int sync_open(sqlite3_vfs *v, const char *name, sqlite3_file *f, int flags,
                     int *out) {
  (void)v;
  int rc = sync_base->xOpen(sync_base, name, f, flags, out);
  if (!f->pMethods) return rc;
  int wal = (flags & SQLITE_OPEN_WAL) != 0;
  pthread_mutex_lock(&sync_mu);
  int i = 0;
  while (i < sync_nvariants && sync_orig[i] != f->pMethods) i++;
  if (i == sync_nvariants && i < 4) {
    sync_orig[i] = f->pMethods;
    for (int w = 0; w < 2; w++) {
      sync_methods[w][i] = *f->pMethods;
      sync_methods[w][i].xSync = w ? sync_wal : sync_db;
      if (w) sync_methods[w][i].xWrite = sync_wal_write;
    }
    sync_nvariants++;
  }
  if (i < sync_nvariants) f->pMethods = &sync_methods[wal][i];
  pthread_mutex_unlock(&sync_mu);
  return rc;
}

/* Before the first store opens (the store's VFS wraps the default one it
 * finds then). */
static void sync_vfs_install(void) {
  sync_base = sqlite3_vfs_find(NULL);
  sync_vfs = *sync_base;
  sync_vfs.zName = "test-sync-count";
  sync_vfs.xOpen = sync_open;
  sync_vfs.pNext = NULL;
  if (sqlite3_vfs_register(&sync_vfs, 1) != SQLITE_OK) abort();
}

static long syncs(void) { return atomic_load(&wal_syncs) + atomic_load(&db_syncs); }

static int wal_frames_hook(void *user, sqlite3 *db, const char *name, int nframes) {
  (void)db;
  (void)name;
  *(int *)user = nframes;
  return SQLITE_OK;
}

/* A fresh database through the store's VFS (WAL, synchronous=NORMAL, a
 * table x), then one INSERT of a pages * 4000-byte blob; returns the
 * INSERT's result, *frames the WAL's frames after it, *wal_size the WAL
 * file's size right after it, *failed the lone page writes that failed. */
static int lone_insert(fx *f, const char *tag, int pages, int armed, int *frames,
                       long long *wal_size, long *failed) {
  char path[400], wal[410];
  snprintf(path, sizeof path, "%s/lone-%s-%d.db", f->env.dir, tag, pages);
  snprintf(wal, sizeof wal, "%s-wal", path);
  sqlite3 *db = NULL;
  assert_int_equal(sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE,
                                   "resil-store"),
                   SQLITE_OK);
  assert_int_equal(sqlite3_exec(db,
                                "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; "
                                "CREATE TABLE x (b BLOB)",
                                NULL, NULL, NULL),
                   SQLITE_OK);
  *frames = 0;
  sqlite3_wal_hook(db, wal_frames_hook, frames); /* also: no automatic checkpoint */
  sqlite3_stmt *q = NULL;
  assert_int_equal(sqlite3_prepare_v2(db, "INSERT INTO x VALUES (zeroblob(?1))", -1, &q, NULL),
                   SQLITE_OK);
  sqlite3_bind_int(q, 1, pages * 4000);
  long before = atomic_load(&lone_pages_failed);
  atomic_store(&fail_lone_pages, armed);
  int rc = sqlite3_step(q);
  atomic_store(&fail_lone_pages, 0);
  *failed = atomic_load(&lone_pages_failed) - before;
  struct stat sb;
  *wal_size = stat(wal, &sb) == 0 ? (long long)sb.st_size : -1;
  sqlite3_finalize(q);
  sqlite3_close(db);
  return rc;
}

/* The store's VFS holds no WAL byte past a commit: under synchronous=NORMAL
 * no sync follows a commit, and the shared-memory calls that publish it go
 * to the database file's handle, so a page still held then would reach
 * the WAL file only at some later call, after other connections were told
 * to read it there. Fresh databases, one INSERT of 10..40 overflow pages
 * each (some end on a commit frame whose page did not fit behind its
 * header in the VFS's buffer): right after each commit the WAL file holds
 * every frame it committed; and with every lone page write failing, each
 * commit either succeeds with no write failed, or fails. */
static void sqlite_vfs_holds_no_wal_byte_past_a_commit(void **state) {
  fx *f = get(state);
  if (f->bk != TS_SQLITE) skip();
  assert_non_null(sqlite3_vfs_find("resil-store")); /* registered by the store's open */
  int hit = 0;
  for (int pages = 10; pages <= 40; pages++) {
    int frames = 0;
    long long size = 0;
    long failed = 0;
    assert_int_equal(lone_insert(f, "a", pages, 0, &frames, &size, &failed), SQLITE_DONE);
    if (frames <= 0 || size < 32 + (long long)frames * (4096 + 24))
      fail_msg("%d pages: %d frames committed, the WAL file holds %lld bytes", pages, frames,
               size);
    int rc = lone_insert(f, "b", pages, 1, &frames, &size, &failed);
    if (failed) {
      hit++;
      if (rc == SQLITE_DONE)
        fail_msg("%d pages: a write of the commit failed, yet the commit succeeded", pages);
    } else if (rc != SQLITE_DONE) {
      fail_msg("%d pages: the commit failed (%d) with no write failed", pages, rc);
    }
  }
  assert_true(hit > 0);
}

/* (A begin in effects_in_store mode may still sync when its commit starts
 * the WAL over or checkpoints; the few operations here do neither.)
 * begin flushes its commit in the default mode only; the completion, the
 * recovery of a PENDING operation, recovery's postponing and sweep flush in
 * both modes (also on the connection whose begin ran at synchronous=NORMAL:
 * pool_size 1). Fails if a completion is ever left unflushed. */
static void sqlite_begin_flushes_only_by_default_completion_always(void **state) {
  fx *f = get(state);
  if (f->bk != TS_SQLITE) skip();
  f->cfg.pool_size = 1;
  fx_reopen(f);
  resil_op_request req = ts_req("POST", "/p", "1");
  ts_effect e = {0};
  assert_int_equal(begin_ok(f->s, "sy-warm", &req, NULL), RESIL_OP_NEW);
  complete_ok(f->s, "sy-warm", &e, NULL);
  long before = syncs();
  assert_int_equal(begin_ok(f->s, "sy-warm2", &req, NULL), RESIL_OP_NEW);
  complete_ok(f->s, "sy-warm2", &e, NULL);
  assert_true(syncs() > before); /* the counting VFS is in the path */
  enum { N = 5 };
  for (int i = 0; i < N; i++) {
    char key[16];
    snprintf(key, sizeof key, "sy-%d", i);
    long s0 = syncs();
    assert_int_equal(begin_ok(f->s, key, &req, NULL), RESIL_OP_NEW);
    long s1 = syncs();
    complete_ok(f->s, key, &e, NULL);
    long s2 = syncs();
    if (f->cfg.effects_in_store)
      assert_int_equal(s1 - s0, 0);
    else
      assert_true(s1 - s0 >= 1);
    if (s2 - s1 < 1) fail_msg("the completion of %s was not flushed", key);
    /* An existing key: begin counts an attempt (flushed by default). */
    s0 = syncs();
    assert_int_equal(begin_ok(f->s, key, &req, NULL), RESIL_OP_REPLAY);
    if (f->cfg.effects_in_store)
      assert_int_equal(syncs() - s0, 0);
    else
      assert_true(syncs() - s0 >= 1);
  }
  /* Recovery right after a begin on the same connection. */
  assert_int_equal(begin_ok(f->s, "sy-rec", &req, NULL), RESIL_OP_NEW);
  long s0 = syncs();
  uint32_t n = 0;
  assert_status(RESIL_OK, resil_store_recover(f->s, 0, 10, ts_effect_fn, &e, &n));
  assert_int_equal(n, 1);
  assert_true(syncs() - s0 >= 1);
  /* Recovery's postponing of a failing effect. */
  assert_int_equal(begin_ok(f->s, "sy-fail", &req, NULL), RESIL_OP_NEW);
  ts_effect bad = {.ret = RESIL_EIO};
  s0 = syncs();
  assert_status(RESIL_EIO, resil_store_recover(f->s, 0, 10, ts_effect_fn, &bad, &n));
  assert_true(syncs() - s0 >= 1);
  /* Sweep right after a begin. */
  assert_int_equal(begin_ok(f->s, "sy-last", &req, NULL), RESIL_OP_NEW);
  s0 = syncs();
  uint32_t deleted = 0;
  assert_status(RESIL_OK, resil_store_sweep(f->s, 0, 100, &deleted));
  assert_true(deleted > 0);
  assert_true(syncs() - s0 >= 1);
  assert_int_equal(state_of(f->s, "sy-last"), RESIL_OP_PENDING);
}

/* PostgreSQL: the synchronous_commit in effect in each transaction that
 * writes a row: off only for a new key's begin in effects_in_store mode,
 * on for everything else (completion, recovery, an attempt count,
 * postponing, sweep) in both modes. */
static void pg_only_begin_commits_without_flush_in_effects_in_store_mode(void **state) {
  fx *f = get(state);
  if (f->bk != TS_PG) skip();
  ts_exec(&f->env, "CREATE TABLE sync_log (seq SERIAL, op TEXT, key TEXT, state INT, "
                   "setting TEXT)");
  ts_exec(&f->env,
          "CREATE FUNCTION log_sync() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
          "IF TG_OP = 'DELETE' THEN INSERT INTO sync_log (op, key, state, setting) "
          "VALUES ('D', OLD.key, OLD.state, current_setting('synchronous_commit')); "
          "RETURN OLD; END IF; "
          "INSERT INTO sync_log (op, key, state, setting) VALUES (left(TG_OP, 1), "
          "NEW.key, NEW.state, current_setting('synchronous_commit')); RETURN NEW; END $$");
  ts_exec(&f->env, "CREATE TRIGGER log_sync AFTER INSERT OR UPDATE OR DELETE ON "
                   "resil_operations FOR EACH ROW EXECUTE FUNCTION log_sync()");
  resil_op_request req = ts_req("POST", "/p", "1");
  ts_effect e = {0};
  for (int i = 0; i < 3; i++) {
    char key[16];
    snprintf(key, sizeof key, "ps-%d", i);
    assert_int_equal(begin_ok(f->s, key, &req, NULL), RESIL_OP_NEW);
    complete_ok(f->s, key, &e, NULL);
    assert_int_equal(begin_ok(f->s, key, &req, NULL), RESIL_OP_REPLAY);
  }
  assert_int_equal(begin_ok(f->s, "ps-rec", &req, NULL), RESIL_OP_NEW);
  uint32_t n = 0;
  assert_status(RESIL_OK, resil_store_recover(f->s, 0, 10, ts_effect_fn, &e, &n));
  assert_int_equal(n, 1);
  assert_int_equal(begin_ok(f->s, "ps-fail", &req, NULL), RESIL_OP_NEW);
  ts_effect bad = {.ret = RESIL_EIO};
  assert_status(RESIL_EIO, resil_store_recover(f->s, 0, 10, ts_effect_fn, &bad, &n));
  uint32_t deleted = 0;
  assert_status(RESIL_OK, resil_store_sweep(f->s, 0, 100, &deleted));
  assert_true(deleted >= 4);
  const char *want_insert = f->cfg.effects_in_store ? "off" : "on";
  char sql[300];
  snprintf(sql, sizeof sql, "SELECT count(*) FROM sync_log WHERE op = 'I' AND setting = '%s'",
           want_insert);
  assert_int_equal(ts_query_long(&f->env, sql), 5);
  assert_int_equal(ts_query_long(&f->env, "SELECT count(*) FROM sync_log WHERE op = 'I'"), 5);
  /* terminal states (4), attempt counts (3), the postponing (1), deletes */
  assert_true(ts_query_long(&f->env, "SELECT count(*) FROM sync_log WHERE op <> 'I'") >=
              8 + 4);
  assert_int_equal(ts_query_long(&f->env, "SELECT count(*) FROM sync_log WHERE op <> 'I' "
                                          "AND setting <> 'on'"),
                   0);
  assert_int_equal(ts_query_long(&f->env, "SELECT count(*) FROM sync_log WHERE op = 'U' "
                                          "AND state IN (2, 3) AND setting = 'on'"),
                   4 + 3);
}

/* ---- execute: begin and complete in one call ------------------------------ */

/* An effect that first looks at its own key from outside the store's
 * transaction (a side connection: what other instances see while it runs),
 * then does what ts_effect_fn does. */
typedef struct peek_effect {
  fx *f;
  ts_effect inner;
  long rows_seen; /* rows of the key visible outside, -1 before the call */
} peek_effect;

static resil_status effect_peeking(void *user, resil_store_txn *tx,
                                   const resil_op_record *pending, resil_op_response *out) {
  peek_effect *p = user;
  char sql[400];
  snprintf(sql, sizeof sql, "SELECT count(*) FROM resil_operations WHERE key = '%s'",
           pending->key);
  p->rows_seen = ts_query_long(&p->f->env, sql);
  return ts_effect_fn(&p->inner, tx, pending, out);
}


/* A new key: the effect runs once and the final record comes back. The
 * PENDING row is visible outside while the effect runs only in the default
 * mode (two transactions); with effects_in_store the whole operation is one
 * transaction. An existing key is answered as begin answers it (counted),
 * without running the effect. */
static void execute_runs_a_new_key_once_and_answers_existing_keys_as_begin(void **state) {
  fx *f = get(state);
  resil_op_request req = ts_req("POST", "/payments", "{\"amount\":1}");
  peek_effect pe = {.f = f, .rows_seen = -1,
                    .inner = {.status = 201, .body = "done", .body_len = 4,
                              .headers = "A: b\r\n", .headers_len = 6}};
  resil_op_record rec;
  resil_op_record_init(&rec);
  assert_int_equal(execute_ok(f, "ex-1", &req, effect_peeking, &pe, &rec), RESIL_OP_NEW);
  assert_int_equal(atomic_load(&pe.inner.calls), 1);
  assert_int_equal(pe.rows_seen, f->cfg.effects_in_store ? 0 : 1);
  assert_string_equal(rec.key, "ex-1");
  assert_int_equal(rec.state, RESIL_OP_COMMITTED);
  assert_int_equal(rec.status, 201);
  assert_int_equal(rec.body_len, 4);
  assert_memory_equal(rec.body, "done", 4);
  assert_int_equal(rec.headers_len, 6);
  assert_int_equal(rec.attempts, 1);
  assert_string_equal(rec.path, "/payments");
  assert_int_equal(ts_effects(&f->env, "ex-1"), 1);
  assert_int_equal(state_of(f->s, "ex-1"), RESIL_OP_COMMITTED);

  /* The same request again: a replay, the effect not run, the attempt counted. */
  assert_int_equal(execute_ok(f, "ex-1", &req, effect_peeking, &pe, &rec), RESIL_OP_REPLAY);
  assert_int_equal(atomic_load(&pe.inner.calls), 1);
  assert_int_equal(rec.state, RESIL_OP_COMMITTED);
  assert_int_equal(rec.status, 201);
  assert_memory_equal(rec.body, "done", 4);
  assert_int_equal(rec.attempts, 2);
  /* Another body under the same key. */
  resil_op_request other = ts_req("POST", "/payments", "{\"amount\":2}");
  assert_int_equal(execute_ok(f, "ex-1", &other, effect_peeking, &pe, &rec),
                   RESIL_OP_CONFLICT);
  assert_int_equal(atomic_load(&pe.inner.calls), 1);
  /* A PENDING key owned by a begin. */
  assert_int_equal(begin_ok(f->s, "ex-p", &req, NULL), RESIL_OP_NEW);
  assert_int_equal(execute_ok(f, "ex-p", &req, effect_peeking, &pe, &rec),
                   RESIL_OP_IN_PROGRESS);
  assert_int_equal(atomic_load(&pe.inner.calls), 1);
  assert_int_equal(rec.state, RESIL_OP_PENDING);
  /* rec may be NULL. */
  assert_int_equal(execute_ok(f, "ex-2", &req, effect_peeking, &pe, NULL), RESIL_OP_NEW);
  assert_int_equal(state_of(f->s, "ex-2"), RESIL_OP_COMMITTED);
  assert_int_equal(ts_effects(&f->env, "ex-2"), 1);
  resil_store_stats stats;
  assert_status(RESIL_OK, resil_store_get_stats(f->s, &stats));
  assert_int_equal(stats.begun_new, 3); /* ex-1, ex-p, ex-2 */
  assert_int_equal(stats.begun_replay, 1);
  assert_int_equal(stats.begun_conflict, 1);
  assert_int_equal(stats.begun_in_progress, 1);
  assert_int_equal(stats.committed, 2);

  /* Bad arguments name the field; nothing is stored. */
  resil_op_begin_result r = 0;
  assert_status(RESIL_EINVAL, resil_store_execute(f->s, "ex-3", &req, NULL, NULL, &r, &rec));
  assert_field(f->s, "effect");
  assert_status(RESIL_EINVAL,
                resil_store_execute(f->s, "ex-3", &req, effect_peeking, &pe, NULL, &rec));
  assert_field(f->s, "result");
  assert_status(RESIL_EINVAL,
                resil_store_execute(f->s, "bad key", &req, effect_peeking, &pe, &r, &rec));
  assert_field(f->s, "key");
  assert_status(RESIL_EMISUSE,
                resil_store_execute(NULL, "ex-3", &req, effect_peeking, &pe, &r, &rec));
  assert_int_equal(state_of(f->s, "ex-3"), RESIL_OP_UNKNOWN);
  assert_int_equal(atomic_load(&pe.inner.calls), 2);
  resil_op_record_clear(&rec);
}

/* A failing completion (the effect's status, an invalid response): by
 * default the operation stays PENDING for recovery, as after begin and a
 * failed complete; with effects_in_store nothing at all is stored, rec says
 * UNKNOWN and the next execute runs the effect afresh. The effect's own
 * writes are undone either way. */
static void execute_failure_leaves_pending_by_default_and_nothing_in_one_transaction(
    void **state) {
  fx *f = get(state);
  int eis = f->cfg.effects_in_store;
  resil_op_request req = ts_req("POST", "/p", "1");
  resil_op_state after_failure = eis ? RESIL_OP_UNKNOWN : RESIL_OP_PENDING;
  ts_effect bad = {.ret = RESIL_EIO};
  ts_effect invalid = {.status = 99};
  const char *keys[2] = {"ef-eio", "ef-99"};
  ts_effect *effects[2] = {&bad, &invalid};
  resil_status want[2] = {RESIL_EIO, RESIL_EINVAL};
  for (int i = 0; i < 2; i++) {
    resil_op_record rec;
    resil_op_record_init(&rec);
    resil_op_begin_result r = 0;
    assert_status(want[i],
                  resil_store_execute(f->s, keys[i], &req, ts_effect_fn, effects[i], &r, &rec));
    assert_int_equal(r, RESIL_OP_NEW);
    assert_int_equal(atomic_load(&effects[i]->calls), 1);
    assert_string_equal(rec.key, keys[i]);
    assert_int_equal(rec.state, after_failure);
    assert_int_equal(state_of(f->s, keys[i]), after_failure);
    assert_int_equal(ts_effects(&f->env, keys[i]), 0);
    ts_effect good = {0};
    if (eis) {
      assert_int_equal(execute_ok(f, keys[i], &req, ts_effect_fn, &good, &rec), RESIL_OP_NEW);
      assert_int_equal(rec.state, RESIL_OP_COMMITTED);
    } else {
      assert_int_equal(execute_ok(f, keys[i], &req, ts_effect_fn, &good, &rec),
                       RESIL_OP_IN_PROGRESS);
      uint32_t n = 0;
      assert_status(RESIL_OK, resil_store_recover(f->s, 0, 10, ts_effect_fn, &good, &n));
      assert_int_equal(n, 1);
    }
    assert_int_equal(atomic_load(&good.calls), 1);
    assert_int_equal(state_of(f->s, keys[i]), RESIL_OP_COMMITTED);
    assert_int_equal(ts_effects(&f->env, keys[i]), 1);
    resil_op_record_clear(&rec);
  }
  resil_store_stats stats;
  assert_status(RESIL_OK, resil_store_get_stats(f->s, &stats));
  assert_int_equal(stats.effect_failed, 2);
}

/* Running out of memory anywhere in an execute leaves the key UNKNOWN (or,
 * by default, PENDING once begin committed), never an effect without its
 * terminal state, and leaks nothing. The effect also writes a ledger row
 * through resil_store_txn_exec first, on one pooled connection. Phase 0:
 * its exec cache empty, a new text every time (the text is copied into the
 * cache while there is room: each call may keep at most that one block,
 * RESIL_STORE_EXEC_CACHE in all). Phase 1: the cache filled by a warm-up,
 * a cached text for even i and a new one (never cached) for odd i: the
 * memory held after each call is exactly what it was before. */
static void execute_allocation_failure_sweep(void **state) {
  fx *f = get(state);
  test_alloc ta;
  test_alloc_init(&ta, 0);
  f->cfg.alloc = &ta.a;
  f->cfg.pool_size = 1;
  ledger_create(f);
  resil_op_request req = ts_req("POST", "/p", "body");
  static const char *const vals[] = {XKEY, "x"};
  static const char cached[] = "INSERT INTO ledger (k, t) VALUES ($1, $2)";
  char text[128];
  xstmt x = {.sql = text, .nparams = 2, .values = vals};
  exec_effect xe = {.bk = f->bk, .stmts = &x, .n = 1};
  for (int phase = 0; phase < 2; phase++) {
    fx_reopen(f); /* a new connection: its exec cache is empty */
    for (int w = 0; phase == 1 && w < RESIL_STORE_EXEC_CACHE; w++) {
      char key[24];
      snprintf(key, sizeof key, "ea-warm-%d", w);
      if (w == 0) snprintf(text, sizeof text, "%s", cached);
      else snprintf(text, sizeof text, "%s /* warm %d */", cached, w);
      xe.then = NULL;
      assert_int_equal(execute_ok(f, key, &req, effect_exec, &xe, NULL), RESIL_OP_NEW);
    }
    long base = ta.live;
    int oks = 0;
    for (long i = 1; i < 40; i++) {
      char key[24];
      snprintf(key, sizeof key, "ea-%d-%ld", phase, i);
      if (phase == 1 && i % 2 == 0) snprintf(text, sizeof text, "%s", cached);
      else snprintf(text, sizeof text, "%s /* %s */", cached, key);
      ts_effect e = {.status = 200, .body = "x", .body_len = 1};
      xe.then = &e;
      resil_op_record rec;
      resil_op_record_init(&rec);
      resil_op_begin_result r = 0;
      long before = ta.live;
      ta.fail_at = ta.count + i;
      resil_status st = resil_store_execute(f->s, key, &req, effect_exec, &xe, &r, &rec);
      ta.fail_at = 0;
      resil_op_state now = state_of(f->s, key);
      if (st == RESIL_OK) {
        oks++;
        assert_int_equal(r, RESIL_OP_NEW);
        assert_int_equal(rec.state, RESIL_OP_COMMITTED);
        assert_int_equal(now, RESIL_OP_COMMITTED);
        assert_int_equal(ts_effects(&f->env, key), 1);
        assert_int_equal(ledger_rows(f, key), 1);
      } else {
        if (st != RESIL_ENOMEM)
          fail_msg("%s at allocation %ld: %s: %s", key, i, resil_status_name(st),
                   resil_store_errmsg(f->s));
        if (f->cfg.effects_in_store) assert_int_equal(now, RESIL_OP_UNKNOWN);
        else assert_true(now == RESIL_OP_UNKNOWN || now == RESIL_OP_PENDING);
        assert_int_equal(ts_effects(&f->env, key), 0);
        assert_int_equal(ledger_rows(f, key), 0);
      }
      resil_op_record_clear(&rec);
      if (phase == 1) {
        assert_int_equal(ta.live, base);
      } else {
        if (ta.live < before || ta.live > before + 1 ||
            ta.live > base + RESIL_STORE_EXEC_CACHE)
          fail_msg("%s: %ld blocks held, %ld before, %ld at the start", key, ta.live, before,
                   base);
      }
    }
    assert_true(oks > 0);
  }
  resil_store_close(f->s);
  f->s = NULL;
  assert_int_equal(ta.live, 0);
  f->cfg.alloc = NULL;
  fx_open(f);
}

/* Two executes of one new key at once. The first is held inside its effect
 * while the second runs. By default the second finds the PENDING row at
 * once: IN_PROGRESS. With effects_in_store the row is not committed yet:
 * the second waits for the first's transaction and then replays what it
 * committed. Either way the effect runs once. (The 100 ms pause only makes
 * the waiting likely; the assertions hold whatever the schedule.) */
typedef struct held_effect {
  ts_effect inner;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int inside, go;
} held_effect;

static resil_status effect_held(void *user, resil_store_txn *tx,
                                const resil_op_record *pending, resil_op_response *out) {
  held_effect *h = user;
  pthread_mutex_lock(&h->mu);
  h->inside = 1;
  pthread_cond_broadcast(&h->cv);
  while (!h->go) pthread_cond_wait(&h->cv, &h->mu);
  pthread_mutex_unlock(&h->mu);
  return ts_effect_fn(&h->inner, tx, pending, out);
}

typedef struct exec_thread {
  fx *f;
  const char *key;
  resil_op_effect_fn effect;
  void *user;
  resil_status st;
  resil_op_begin_result r;
  resil_op_record rec;
} exec_thread;

static void *exec_main(void *arg) {
  exec_thread *t = arg;
  resil_op_request req = ts_req("POST", "/p", "1");
  t->st = resil_store_execute(t->f->s, t->key, &req, t->effect, t->user, &t->r, &t->rec);
  return NULL;
}

/* A begin that finds the write lock taken and its key not stored keeps
 * looking at the committed state while it waits for the lock: when another
 * writer commits the key PENDING and takes the lock again at once (the
 * completion that then runs the effect), the begin answers IN_PROGRESS
 * then, not after the effect (it once waited for the whole effect: a
 * hedged request's 409 came after the winner's 201). Run through execute,
 * which shares begin's locking. */
static void sqlite_begin_waiting_for_the_lock_answers_once_the_key_is_stored(void **state) {
  fx *f = get(state);
  if (f->bk != TS_SQLITE) skip();
  sqlite3 *db = NULL;
  assert_int_equal(sqlite3_open(f->env.path, &db), SQLITE_OK);
  sqlite3_busy_timeout(db, 5000);
  assert_int_equal(sqlite3_exec(db, "BEGIN IMMEDIATE", NULL, NULL, NULL), SQLITE_OK);
  ts_effect never = {0};
  exec_thread x = {.f = f, .key = "race", .effect = ts_effect_fn, .user = &never};
  resil_op_record_init(&x.rec);
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, exec_main, &x), 0);
  /* Time for the call to find the key absent and start waiting (if it is
   * slower, it finds the key stored at once: the test then passes without
   * exercising the wait). */
  struct timespec pause = {0, 100 * 1000000L};
  nanosleep(&pause, NULL);
  resil_op_request req = ts_req("POST", "/p", "1"); /* exec_main's request */
  unsigned char fp[32];
  assert_status(RESIL_OK, resil_op_fingerprint(&req, fp));
  sqlite3_stmt *q = NULL;
  assert_int_equal(
      sqlite3_prepare_v2(db,
                         "INSERT INTO resil_operations (key, state, fingerprint, method, "
                         "path, request_body, created_ms, updated_ms, attempts) VALUES "
                         "('race', 1, ?1, 'POST', '/p', X'31', 1, 1, 1)",
                         -1, &q, NULL),
      SQLITE_OK);
  sqlite3_bind_blob(q, 1, fp, 32, SQLITE_STATIC);
  assert_int_equal(sqlite3_step(q), SQLITE_DONE);
  sqlite3_finalize(q);
  assert_int_equal(sqlite3_exec(db, "COMMIT; BEGIN IMMEDIATE", NULL, NULL, NULL), SQLITE_OK);
  /* The lock is held again, as by a completion running a long effect. */
  struct timespec until;
  clock_gettime(CLOCK_REALTIME, &until);
  until.tv_sec += 3;
  int answered_while_held = pthread_timedjoin_np(t, NULL, &until) == 0;
  assert_int_equal(sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL), SQLITE_OK);
  sqlite3_close(db);
  if (!answered_while_held) pthread_join(t, NULL);
  assert_true(answered_while_held);
  assert_status(RESIL_OK, x.st);
  assert_int_equal(x.r, RESIL_OP_IN_PROGRESS);
  assert_int_equal(atomic_load(&never.calls), 0);
  resil_op_record_clear(&x.rec);
}

static void execute_racing_the_same_key_runs_the_effect_once(void **state) {
  fx *f = get(state);
  held_effect h = {.inner = {.status = 202, .body = "first", .body_len = 5}};
  pthread_mutex_init(&h.mu, NULL);
  pthread_cond_init(&h.cv, NULL);
  ts_effect second_effect = {0};
  exec_thread a = {.f = f, .key = "race", .effect = effect_held, .user = &h};
  exec_thread b = {.f = f, .key = "race", .effect = ts_effect_fn, .user = &second_effect};
  resil_op_record_init(&a.rec);
  resil_op_record_init(&b.rec);
  pthread_t ta_, tb_;
  assert_int_equal(pthread_create(&ta_, NULL, exec_main, &a), 0);
  pthread_mutex_lock(&h.mu);
  while (!h.inside) pthread_cond_wait(&h.cv, &h.mu);
  pthread_mutex_unlock(&h.mu);
  assert_int_equal(pthread_create(&tb_, NULL, exec_main, &b), 0);
  if (!f->cfg.effects_in_store) {
    /* begin never waits for a running effect. */
    assert_int_equal(pthread_join(tb_, NULL), 0);
    assert_status(RESIL_OK, b.st);
    assert_int_equal(b.r, RESIL_OP_IN_PROGRESS);
  } else {
    struct timespec pause = {0, 100 * 1000 * 1000};
    nanosleep(&pause, NULL);
  }
  pthread_mutex_lock(&h.mu);
  h.go = 1;
  pthread_cond_broadcast(&h.cv);
  pthread_mutex_unlock(&h.mu);
  assert_int_equal(pthread_join(ta_, NULL), 0);
  assert_status(RESIL_OK, a.st);
  assert_int_equal(a.r, RESIL_OP_NEW);
  assert_int_equal(a.rec.state, RESIL_OP_COMMITTED);
  if (f->cfg.effects_in_store) {
    assert_int_equal(pthread_join(tb_, NULL), 0);
    if (b.st) fail_msg("second execute: %s", resil_status_name(b.st));
    assert_int_equal(b.r, RESIL_OP_REPLAY);
    assert_int_equal(b.rec.status, 202);
    assert_memory_equal(b.rec.body, "first", 5);
  }
  assert_int_equal(atomic_load(&h.inner.calls), 1);
  assert_int_equal(atomic_load(&second_effect.calls), 0);
  assert_int_equal(ts_effects(&f->env, "race"), 1);
  resil_op_record_clear(&a.rec);
  resil_op_record_clear(&b.rec);
  pthread_cond_destroy(&h.cv);
  pthread_mutex_destroy(&h.mu);
}

/* PostgreSQL round trips of execute, counted as in the test above, from
 * inside rt-1's effect to inside rt-3's: rt-1's terminal state with COMMIT
 * (1), rt-2's first round trip (1) and terminal state with COMMIT (1),
 * rt-3's first round trip (1): 4 in both modes (6 for begin then
 * complete). The first round trip is, with effects_in_store, BEGIN and the
 * INSERT; by default the INSERT and its Sync (its own flushed commit), then
 * BEGIN and the row lock and a second Sync, sent together. */
static void pg_execute_in_one_transaction_takes_two_round_trips(void **state) {
  fx *f = get(state);
  if (f->bk != TS_PG) skip();
  assert_int_equal(traced_round_trips(f, 1, NULL), 4);
}

static resil_status effect_deallocating_lock_skip(void *user, resil_store_txn *tx,
                                                  const resil_op_record *pending,
                                                  resil_op_response *out) {
  ts_effect *e = user;
  /* resil_store_3: the row read FOR UPDATE SKIP LOCKED (store_pg.c's
   * Q_LOCK_SKIP). DEALLOCATE takes effect at once, whatever the
   * transaction does. */
  PQclear(PQexec(resil_store_txn_pg(tx), "DEALLOCATE resil_store_3"));
  return ts_effect_fn(e, tx, pending, out);
}

/* By default, execute sends begin's INSERT together with the completion's
 * row lock. When that lock fails after the INSERT committed (here: its
 * prepared statement was deallocated by the previous operation's effect),
 * the operation is this call's all the same: it completes it through the
 * completion protocol proper, once. */
static void pg_execute_completes_when_the_lock_after_its_insert_fails(void **state) {
  fx *f = get(state);
  if (f->bk != TS_PG || f->cfg.effects_in_store) skip();
  f->cfg.pool_size = 1;
  fx_reopen(f);
  resil_op_request req = ts_req("POST", "/p", "1");
  ts_effect first = {0}, second = {0};
  assert_int_equal(execute_ok(f, "lk-1", &req, effect_deallocating_lock_skip, &first, NULL),
                   RESIL_OP_NEW);
  resil_op_record rec;
  resil_op_record_init(&rec);
  assert_int_equal(execute_ok(f, "lk-2", &req, ts_effect_fn, &second, &rec), RESIL_OP_NEW);
  assert_int_equal(rec.state, RESIL_OP_COMMITTED);
  assert_int_equal(atomic_load(&second.calls), 1);
  assert_int_equal(ts_effects(&f->env, "lk-2"), 1);
  assert_int_equal(state_of(f->s, "lk-2"), RESIL_OP_COMMITTED);
  /* The statement is prepared again for the next call. */
  ts_effect third = {0};
  assert_int_equal(execute_ok(f, "lk-3", &req, ts_effect_fn, &third, NULL), RESIL_OP_NEW);
  assert_int_equal(ts_effects(&f->env, "lk-3"), 1);
  resil_op_record_clear(&rec);
}

/* The connection dies inside an execute's effect: nothing committed, the
 * store reconnects and runs it once more; the effect commits once. */
static void pg_connection_lost_inside_execute_commits_once(void **state) {
  fx *f = get(state);
  if (f->bk != TS_PG) skip();
  resil_op_request req = ts_req("POST", "/p", "1");
  ts_effect e = {.kill_first = f->env.admin};
  resil_op_record rec;
  resil_op_record_init(&rec);
  assert_int_equal(execute_ok(f, "k", &req, ts_effect_fn, &e, &rec), RESIL_OP_NEW);
  assert_int_equal(rec.state, RESIL_OP_COMMITTED);
  assert_int_equal(atomic_load(&e.calls), 2);
  assert_int_equal(ts_effects(&f->env, "k"), 1);
  resil_op_record_clear(&rec);
}

/* The connection dies after the effect queued a statement, before the
 * commit sends it with the terminal state: nothing committed, the store
 * reconnects and runs the effect once more; its row commits once. */
static void pg_connection_lost_with_queued_statements_commits_once(void **state) {
  fx *f = get(state);
  if (f->bk != TS_PG) skip();
  ledger_create(f);
  static const char *const vals[] = {XKEY, "queued"};
  static const xstmt one = {.sql = "INSERT INTO ledger (k, t) VALUES ($1, $2)", .nparams = 2,
                            .values = vals};
  exec_effect e = {.bk = f->bk, .stmts = &one, .n = 1, .kill_after_queue = f->env.admin};
  resil_op_request req = ts_req("POST", "/p", "1");
  resil_op_record rec;
  resil_op_record_init(&rec);
  assert_int_equal(execute_ok(f, "q", &req, effect_exec, &e, &rec), RESIL_OP_NEW);
  assert_int_equal(rec.state, RESIL_OP_COMMITTED);
  assert_int_equal(atomic_load(&e.calls), 2);
  assert_int_equal(ledger_rows(f, "q"), 1);
  /* The same through begin then complete. */
  assert_int_equal(begin_ok(f->s, "q2", &req, NULL), RESIL_OP_NEW);
  e.killed = 0;
  atomic_store(&e.calls, 0);
  assert_status(RESIL_OK, resil_store_complete(f->s, "q2", effect_exec, &e, &rec));
  assert_int_equal(rec.state, RESIL_OP_COMMITTED);
  assert_int_equal(atomic_load(&e.calls), 2);
  assert_int_equal(ledger_rows(f, "q2"), 1);
  resil_op_record_clear(&rec);
}

/* ---- resil_store_txn_exec ---------------------------------------------------- */

/* The values of txn_exec_writes_...'s first statement: the key, a text
 * (its length in lengths is ignored: text), a binary value with a 0 byte,
 * SQL NULL, and a number given as text for an INTEGER column. */
static const char *const w_vals[] = {XKEY, "caf\xc3\xa9 'q' \\", "a\0b\xff", NULL, "42"};
static const size_t w_lens[] = {1, 1, 4, 0, 0};
static const int w_bin[] = {0, 0, 1, 0, 0};

/* An effect made only of resil_store_txn_exec calls writes what it was
 * given, exactly: text, binary with a 0 byte (lengths + binary), NULL, a
 * number as text; the same text twice in one transaction; a statement
 * without parameters (values NULL). The operations use more texts than an
 * exec cache holds (RESIL_STORE_EXEC_CACHE + 3 variants of the first
 * statement, plus two), each many times, on one pooled connection: cached
 * and uncached texts both work. Even operations are one execute, odd ones
 * begin then complete. Checked from a separate connection. */
static void txn_exec_writes_text_binary_and_null_and_reuses_texts(void **state) {
  fx *f = get(state);
  f->cfg.pool_size = 1;
  fx_reopen(f);
  ledger_create(f);
  ts_exec(&f->env, "CREATE TABLE tally (n INTEGER NOT NULL)");
  ts_exec(&f->env, "INSERT INTO tally (n) VALUES (0)");
  static const char *const plain[] = {XKEY, "plain"};
  enum { VARIANTS = RESIL_STORE_EXEC_CACHE + 3, N = 2 * VARIANTS };
  char text[VARIANTS][160];
  for (int v = 0; v < VARIANTS; v++)
    snprintf(text[v], sizeof text[v],
             "INSERT INTO ledger (k, t, b, z, n) VALUES ($1, $2, $3, $4, $5) /* v%d */", v);
  xstmt st[4] = {
      {.nparams = 5, .values = w_vals, .lengths = w_lens, .binary = w_bin},
      {.nparams = 5, .values = w_vals, .lengths = w_lens, .binary = w_bin, .suffix = ".2"},
      {"INSERT INTO ledger (k, t) VALUES ($1, $2)", 2, plain, NULL, NULL, ".3"},
      {"UPDATE tally SET n = n + 1", 0, NULL, NULL, NULL, NULL},
  };
  exec_effect e = {.bk = f->bk, .stmts = st, .n = 4};
  resil_op_request req = ts_req("POST", "/p", "1");
  resil_op_record rec;
  resil_op_record_init(&rec);
  for (int i = 0; i < N; i++) {
    char key[16];
    snprintf(key, sizeof key, "w-%d", i);
    st[0].sql = st[1].sql = text[i % VARIANTS];
    if (i % 2 == 0) {
      assert_int_equal(execute_ok(f, key, &req, effect_exec, &e, &rec), RESIL_OP_NEW);
    } else {
      assert_int_equal(begin_ok(f->s, key, &req, NULL), RESIL_OP_NEW);
      resil_status s = resil_store_complete(f->s, key, effect_exec, &e, &rec);
      if (s) fail_msg("complete %s: %s: %s", key, resil_status_name(s), resil_store_errmsg(f->s));
    }
    assert_int_equal(rec.state, RESIL_OP_COMMITTED);
    for (int j = 0; j < 4; j++) assert_status(RESIL_OK, e.got[j]);
    assert_int_equal(ledger_rows(f, key), 3);
  }
  resil_op_record_clear(&rec);
  assert_int_equal(atomic_load(&e.calls), N);
  char sql[600];
  snprintf(sql, sizeof sql,
           f->bk == TS_SQLITE
               ? "SELECT count(*) FROM ledger WHERE k LIKE 'w-%%' AND t = 'caf\xc3\xa9 ''q'' \\' "
                 "AND typeof(t) = 'text' AND b = X'610062ff' AND typeof(b) = 'blob' "
                 "AND z IS NULL AND n = 42 AND typeof(n) = 'integer'"
               : "SELECT count(*) FROM ledger WHERE k LIKE 'w-%%' AND t = 'caf\xc3\xa9 ''q'' \\' "
                 "AND b = '\\x610062ff'::bytea AND z IS NULL AND n = 42");
  assert_int_equal(ts_query_long(&f->env, sql), 2 * N);
  assert_int_equal(ts_query_long(&f->env, "SELECT count(*) FROM ledger WHERE k LIKE '%.3' AND "
                                          "t = 'plain' AND b IS NULL AND n IS NULL"),
                   N);
  assert_int_equal(ts_query_long(&f->env, "SELECT count(*) FROM ledger"), 3 * N);
  assert_int_equal(ts_query_long(&f->env, "SELECT n FROM tally"), N);
}

/* Whether msg names the effect's statement n ("effect statement 2: ..." or
 * "effect statement 2 of 3: ..."). */
static int names_statement(const char *msg, int n) {
  char want[32];
  int len = snprintf(want, sizeof want, "effect statement %d", n);
  const char *p = strstr(msg, want);
  return p && (p[len] == ':' || p[len] == ' ');
}

/* What a failing effect statement leaves in the error: the database's
 * message and which statement (on PostgreSQL, where it was queued, and
 * on SQLite, where it ran at once). */
static void check_statement_failure(fx *f, const exec_effect *e, const char *db_msg,
                                    resil_status want) {
  const char *msg = resil_store_errmsg(f->s);
  if (!strstr(msg, db_msg)) fail_msg("no '%s' in '%s'", db_msg, msg);
  if (!names_statement(msg, 2)) fail_msg("statement 2 not named: '%s'", msg);
  if (f->bk == TS_PG) {
    for (int j = 0; j < 3; j++) assert_status(RESIL_OK, e->got[j]); /* queued */
  } else {
    assert_status(RESIL_OK, e->got[0]);
    assert_status(want, e->got[1]); /* run at once, and the effect returned it */
  }
}

/* Statements several txn_exec tests share: the operation's first and third
 * ledger rows (the third under key.3), and an INSERT of the row 'dup' that
 * the tests store beforehand (a duplicate key). */
static const char *const first_v[] = {XKEY, "first"};
static const char *const third_v[] = {XKEY, "third"};
static const char *const dup_v[] = {"dup", "second"};
static const xstmt st_first = {"INSERT INTO ledger (k, t) VALUES ($1, $2)", 2, first_v,
                               NULL, NULL, NULL};
static const xstmt st_third = {"INSERT INTO ledger (k, t) VALUES ($1, $2)", 2, third_v,
                               NULL, NULL, ".3"};
static const xstmt st_dup = {"INSERT INTO ledger (k, t) VALUES ($1, $2)", 2, dup_v,
                             NULL, NULL, NULL};

/* One pooled connection (so every operation reuses it), the ledger, and
 * its row 'dup'. */
static void ledger_with_dup(fx *f) {
  f->cfg.pool_size = 1;
  fx_reopen(f);
  ledger_create(f);
  ts_exec(&f->env, "INSERT INTO ledger (k, t) VALUES ('dup', 'before')");
}

/* The second of three statements fails: a unique violation on a row the
 * test inserted, or a syntax error. PostgreSQL learns it at the commit
 * (RESIL_EIO, the statement named); SQLite at the call (the duplicate:
 * RESIL_EIO; the typo does not compile: RESIL_EINVAL), which the effect
 * returns. Either way nothing of the effect commits: begin + complete and
 * default-mode execute leave the key PENDING for recovery (which fails the
 * same way with the same effect, and completes it once with a good one);
 * effects_in_store execute leaves nothing (UNKNOWN), and a retry with the
 * same key commits once. The one pooled connection then serves the next
 * operations. */
static void txn_exec_failure_at_commit_rolls_back_and_names_the_statement(void **state) {
  fx *f = get(state);
  int pg = f->bk == TS_PG, eis = f->cfg.effects_in_store;
  ledger_with_dup(f);
  resil_op_request req = ts_req("POST", "/p", "1");
  static const char *const syn_v[] = {XKEY};
  const xstmt first = st_first, third = st_third;
  const xstmt bad[2] = {
      st_dup,
      {"INSERTT INTO ledger (k) VALUES ($1)", 1, syn_v, NULL, NULL, ".2"},
  };
  const char *const name[2] = {"dup", "syn"};
  const char *const db_msg[2] = {pg ? "duplicate key" : "UNIQUE constraint failed",
                                 "syntax error"};
  const resil_status want[2] = {RESIL_EIO, pg ? RESIL_EIO : RESIL_EINVAL};
  const xstmt good_st[2] = {first, third};
  for (int k = 0; k < 2; k++) {
    const xstmt bad_st[3] = {first, bad[k], third};
    exec_effect be = {.bk = f->bk, .stmts = bad_st, .n = 3};
    exec_effect ge = {.bk = f->bk, .stmts = good_st, .n = 2};
    char key[16];
    /* begin, then complete */
    snprintf(key, sizeof key, "%s-c", name[k]);
    assert_int_equal(begin_ok(f->s, key, &req, NULL), RESIL_OP_NEW);
    assert_status(want[k], resil_store_complete(f->s, key, effect_exec, &be, NULL));
    check_statement_failure(f, &be, db_msg[k], want[k]);
    assert_int_equal(state_of(f->s, key), RESIL_OP_PENDING);
    assert_int_equal(ledger_rows(f, key), 0);
    /* The connection serves the next call at once: a begin of the same key
     * (it counts an attempt, a commit of its own). */
    assert_int_equal(begin_ok(f->s, key, &req, NULL), RESIL_OP_IN_PROGRESS);
    /* recovery */
    resil_store_recovery rep;
    assert_status(want[k], resil_store_recover_report(f->s, 0, 10, effect_exec, &be, &rep));
    check_statement_failure(f, &be, db_msg[k], want[k]);
    assert_int_equal(rep.failed, 1);
    assert_int_equal(rep.recovered, 0);
    assert_int_equal(state_of(f->s, key), RESIL_OP_PENDING);
    assert_int_equal(ledger_rows(f, key), 0);
    uint32_t n = 0;
    assert_status(RESIL_OK, resil_store_recover(f->s, 0, 10, effect_exec, &ge, &n));
    assert_int_equal(n, 1);
    assert_int_equal(state_of(f->s, key), RESIL_OP_COMMITTED);
    assert_int_equal(ledger_rows(f, key), 2);
    /* execute */
    snprintf(key, sizeof key, "%s-x", name[k]);
    resil_op_record rec;
    resil_op_record_init(&rec);
    resil_op_begin_result r = 0;
    assert_status(want[k], resil_store_execute(f->s, key, &req, effect_exec, &be, &r, &rec));
    check_statement_failure(f, &be, db_msg[k], want[k]);
    assert_int_equal(r, RESIL_OP_NEW);
    assert_int_equal(ledger_rows(f, key), 0);
    if (eis) {
      assert_int_equal(rec.state, RESIL_OP_UNKNOWN);
      assert_int_equal(state_of(f->s, key), RESIL_OP_UNKNOWN);
      char sql[200];
      snprintf(sql, sizeof sql, "SELECT count(*) FROM resil_operations WHERE key = '%s'", key);
      assert_int_equal(ts_query_long(&f->env, sql), 0);
      assert_int_equal(execute_ok(f, key, &req, effect_exec, &ge, &rec), RESIL_OP_NEW);
      assert_int_equal(rec.state, RESIL_OP_COMMITTED);
    } else {
      assert_int_equal(rec.state, RESIL_OP_PENDING);
      assert_int_equal(state_of(f->s, key), RESIL_OP_PENDING);
      assert_int_equal(execute_ok(f, key, &req, effect_exec, &ge, &rec), RESIL_OP_IN_PROGRESS);
      assert_status(RESIL_OK, resil_store_recover(f->s, 0, 10, effect_exec, &ge, &n));
      assert_int_equal(n, 1);
    }
    assert_int_equal(atomic_load(&ge.calls), 2);
    assert_int_equal(atomic_load(&be.calls), 3);
    assert_int_equal(state_of(f->s, key), RESIL_OP_COMMITTED);
    assert_int_equal(ledger_rows(f, key), 2);
    resil_op_record_clear(&rec);
  }
  assert_int_equal(ts_query_long(&f->env, "SELECT count(*) FROM ledger WHERE k = 'dup' AND "
                                          "t = 'before'"),
                   1);
  /* The connection is usable for the next operations. */
  exec_effect ge = {.bk = f->bk, .stmts = good_st, .n = 2};
  for (int i = 0; i < 3; i++) {
    char key[16];
    snprintf(key, sizeof key, "after-%d", i);
    assert_int_equal(execute_ok(f, key, &req, effect_exec, &ge, NULL), RESIL_OP_NEW);
    assert_int_equal(state_of(f->s, key), RESIL_OP_COMMITTED);
    assert_int_equal(ledger_rows(f, key), 2);
  }
  resil_store_stats stats;
  assert_status(RESIL_OK, resil_store_get_stats(f->s, &stats));
  assert_int_equal(stats.effect_failed, 6); /* complete, recovery, execute: twice */
}

/* An effect that ignores a failed resil_store_txn_exec and returns RESIL_OK
 * (keep_going): nothing of it commits on either backend, as a failure the
 * effect returned. Three cases, the second statement failing: a duplicate
 * key (SQLite: the call fails at once, the transaction stays open;
 * PostgreSQL: queued, fails at the commit), values NULL with nparams 2
 * (refused by the call on both), and SQLite's INSERT OR ROLLBACK on a
 * duplicate, which rolls the transaction back: the third statement must
 * not then run on its own (autocommit) and commit. Each completion fails,
 * the key stays PENDING and no ledger row of it is committed. */
static void txn_exec_failure_the_effect_ignores_commits_nothing(void **state) {
  fx *f = get(state);
  int pg = f->bk == TS_PG;
  ledger_with_dup(f);
  resil_op_request req = ts_req("POST", "/p", "1");
  const xstmt first = st_first, third = st_third;
  const xstmt bad[3] = {
      st_dup,
      {"INSERT INTO ledger (k, t) VALUES ($1, $2)", 2, NULL, NULL, NULL, NULL},
      {"INSERT OR ROLLBACK INTO ledger (k, t) VALUES ($1, $2)", 2, dup_v, NULL, NULL, NULL},
  };
  for (int k = 0; k < (pg ? 2 : 3); k++) {
    const xstmt st[3] = {first, bad[k], third};
    exec_effect e = {.bk = f->bk, .stmts = st, .n = 3, .keep_going = 1};
    char key[16];
    snprintf(key, sizeof key, "ign-%d", k);
    assert_int_equal(begin_ok(f->s, key, &req, NULL), RESIL_OP_NEW);
    resil_status s = resil_store_complete(f->s, key, effect_exec, &e, NULL);
    if (s == RESIL_OK) fail_msg("case %d: the completion succeeded", k);
    if (!pg && k == 2) assert_status(RESIL_EIO, e.got[2]); /* not run outside the transaction */
    assert_int_equal(atomic_load(&e.calls), 1);
    assert_int_equal(state_of(f->s, key), RESIL_OP_PENDING);
    if (ledger_rows(f, key) != 0) fail_msg("case %d: the effect's rows committed", k);
  }
  assert_int_equal(ts_query_long(&f->env, "SELECT count(*) FROM ledger"), 1);
}

/* A statement that ends the effect's transaction (COMMIT, END, ROLLBACK,
 * ABORT, ROLLBACK AND CHAIN, PREPARE TRANSACTION; any case, blanks and
 * comments before it) is refused (RESIL_EINVAL): on PostgreSQL it would be
 * queued, and the terminal state pipelined behind it would commit on its
 * own, without the effect's rows. The effect ignores the refusal: the
 * completion fails all the same, the key stays PENDING, nothing of it
 * commits. SAVEPOINT and ROLLBACK TO SAVEPOINT stay usable: the rows after
 * the savepoint's rollback commit with the terminal state. */
static void txn_exec_refuses_statements_that_end_the_transaction(void **state) {
  fx *f = get(state);
  f->cfg.pool_size = 1;
  fx_reopen(f);
  ledger_create(f);
  resil_op_request req = ts_req("POST", "/p", "1");
  const xstmt first = st_first, third = st_third;
  static const char *const enders[] = {
      "ROLLBACK",     " commit ;",           "/* a /* nested */ comment */ END",
      "-- c\nAbort", "ROLLBACK AND CHAIN", "PREPARE TRANSACTION 'x'",
  };
  for (int k = 0; k < (int)(sizeof enders / sizeof enders[0]); k++) {
    const xstmt st[3] = {first, {enders[k], 0, NULL, NULL, NULL, NULL}, third};
    exec_effect e = {.bk = f->bk, .stmts = st, .n = 3, .keep_going = 1};
    char key[16];
    snprintf(key, sizeof key, "end-%d", k);
    assert_int_equal(begin_ok(f->s, key, &req, NULL), RESIL_OP_NEW);
    resil_status s = resil_store_complete(f->s, key, effect_exec, &e, NULL);
    if (s == RESIL_OK) fail_msg("'%s': the completion succeeded", enders[k]);
    if (e.got[1] != RESIL_EINVAL)
      fail_msg("'%s': %s, expected RESIL_EINVAL", enders[k], resil_status_name(e.got[1]));
    if (state_of(f->s, key) != RESIL_OP_PENDING)
      fail_msg("'%s': %s", enders[k], resil_op_state_name(state_of(f->s, key)));
    if (ledger_rows(f, key) != 0) fail_msg("'%s': the effect's rows committed", enders[k]);
  }
  const xstmt sp[5] = {{"SAVEPOINT resil_t", 0, NULL, NULL, NULL, NULL},
                       first,
                       {"ROLLBACK TO SAVEPOINT resil_t", 0, NULL, NULL, NULL, NULL},
                       {"rollback transaction to resil_t", 0, NULL, NULL, NULL, NULL},
                       third};
  exec_effect e = {.bk = f->bk, .stmts = sp, .n = 5};
  assert_int_equal(begin_ok(f->s, "sp", &req, NULL), RESIL_OP_NEW);
  assert_status(RESIL_OK, resil_store_complete(f->s, "sp", effect_exec, &e, NULL));
  assert_int_equal(state_of(f->s, "sp"), RESIL_OP_COMMITTED);
  assert_int_equal(ledger_rows(f, "sp"), 1); /* third only */
}

/* A COPY statement (FROM STDIN, TO STDOUT) needs a data exchange the
 * store cannot hold: refused (it hung in the pipeline, waiting for data
 * forever), and the connection serves the next operation. */
static void txn_exec_copy_fails_and_the_connection_stays_usable(void **state) {
  fx *f = get(state);
  if (f->bk != TS_PG) skip();
  f->cfg.pool_size = 1;
  fx_reopen(f);
  ledger_create(f);
  resil_op_request req = ts_req("POST", "/p", "1");
  const xstmt first = st_first;
  static const char *const copies[] = {"COPY ledger (k) FROM STDIN", "COPY ledger TO STDOUT"};
  for (int k = 0; k < 2; k++) {
    const xstmt st[2] = {first, {copies[k], 0, NULL, NULL, NULL, NULL}};
    exec_effect e = {.bk = f->bk, .stmts = st, .n = 2};
    char key[16];
    snprintf(key, sizeof key, "copy-%d", k);
    assert_int_equal(begin_ok(f->s, key, &req, NULL), RESIL_OP_NEW);
    resil_status s = resil_store_complete(f->s, key, effect_exec, &e, NULL);
    if (s == RESIL_OK) fail_msg("'%s': the completion succeeded", copies[k]);
    assert_status(RESIL_EINVAL, e.got[1]);
    assert_int_equal(state_of(f->s, key), RESIL_OP_PENDING);
    assert_int_equal(ledger_rows(f, key), 0);
    exec_effect g = {.bk = f->bk, .stmts = &first, .n = 1};
    snprintf(key, sizeof key, "after-copy-%d", k);
    assert_int_equal(execute_ok(f, key, &req, effect_exec, &g, NULL), RESIL_OP_NEW);
    assert_int_equal(ledger_rows(f, key), 1);
  }
}

/* A statement followed by a semicolon and a comment is one statement (as
 * on PostgreSQL): it runs and commits, twice on one connection (the
 * cached text is recognised again). */
static void txn_exec_statement_with_a_trailing_comment_runs(void **state) {
  fx *f = get(state);
  f->cfg.pool_size = 1;
  fx_reopen(f);
  ledger_create(f);
  resil_op_request req = ts_req("POST", "/p", "1");
  static const char *const v[] = {XKEY};
  const xstmt st[2] = {
      {"INSERT INTO ledger (k, t) VALUES ($1, 'a'); -- the first row\n", 1, v, NULL, NULL, NULL},
      {"INSERT INTO ledger (k, t) VALUES ($1, 'b'); /* the second */ ", 1, v, NULL, NULL, ".2"},
  };
  exec_effect e = {.bk = f->bk, .stmts = st, .n = 2};
  for (int i = 0; i < 2; i++) {
    char key[16];
    snprintf(key, sizeof key, "cmt-%d", i);
    resil_op_record rec;
    resil_op_record_init(&rec);
    resil_op_begin_result r = 0;
    resil_status s = resil_store_execute(f->s, key, &req, effect_exec, &e, &r, &rec);
    if (s) fail_msg("%s: %s", resil_status_name(s), resil_store_errmsg(f->s));
    assert_int_equal(rec.state, RESIL_OP_COMMITTED);
    assert_int_equal(ledger_rows(f, key), 2);
    resil_op_record_clear(&rec);
  }
}

/* Statements queued by resil_store_txn_exec are settled before the effect
 * gets the connection (resil_store_txn_pg / _sqlite): a direct SELECT sees
 * the row; a statement queued after that commits too. PostgreSQL: when the
 * queued statement failed, the effect's next direct statement fails (the
 * transaction is aborted) and the completion fails with RESIL_EIO naming
 * the queued statement, even though the effect returned RESIL_OK. */
static void txn_exec_statements_are_settled_before_the_effect_uses_the_connection(
    void **state) {
  fx *f = get(state);
  ledger_create(f);
  resil_op_request req = ts_req("POST", "/p", "1");
  static const char *const v[] = {XKEY, "queued"};
  const xstmt st[2] = {
      {"INSERT INTO ledger (k, t) VALUES ($1, $2)", 2, v, NULL, NULL, NULL},
      {"INSERT INTO ledger (k, t) VALUES ($1, $2)", 2, v, NULL, NULL, ".2"},
  };
  exec_effect e = {.bk = f->bk, .stmts = st, .n = 2, .peek = 1, .peek_after = 1};
  const char *keys[2] = {"ord-x", "ord-c"};
  for (int i = 0; i < 2; i++) {
    e.peeked = -2;
    if (i == 0) {
      assert_int_equal(execute_ok(f, keys[i], &req, effect_exec, &e, NULL), RESIL_OP_NEW);
    } else {
      assert_int_equal(begin_ok(f->s, keys[i], &req, NULL), RESIL_OP_NEW);
      assert_status(RESIL_OK, resil_store_complete(f->s, keys[i], effect_exec, &e, NULL));
    }
    assert_int_equal(e.peeked, 1);
    assert_int_equal(state_of(f->s, keys[i]), RESIL_OP_COMMITTED);
    assert_int_equal(ledger_rows(f, keys[i]), 2);
  }
  if (f->bk != TS_PG) return;
  static const char *const again_v[] = {"ord-x", "again"};
  const xstmt dup = {"INSERT INTO ledger (k, t) VALUES ($1, $2)", 2, again_v, NULL, NULL, NULL};
  exec_effect d = {.bk = f->bk, .stmts = &dup, .n = 1, .peek = 1, .peek_after = 1};
  const char *bad_keys[2] = {"ord-fc", "ord-fx"};
  for (int i = 0; i < 2; i++) {
    d.peeked = -2;
    resil_status got;
    if (i == 0) {
      assert_int_equal(begin_ok(f->s, bad_keys[i], &req, NULL), RESIL_OP_NEW);
      got = resil_store_complete(f->s, bad_keys[i], effect_exec, &d, NULL);
    } else {
      resil_op_begin_result r = 0;
      got = resil_store_execute(f->s, bad_keys[i], &req, effect_exec, &d, &r, NULL);
      assert_int_equal(r, RESIL_OP_NEW);
    }
    assert_status(RESIL_EIO, got);
    assert_status(RESIL_OK, d.got[0]);
    assert_int_equal(d.peeked, -1); /* the direct SELECT failed */
    const char *msg = resil_store_errmsg(f->s);
    if (!names_statement(msg, 1) || !strstr(msg, "duplicate key"))
      fail_msg("queued statement not named: '%s'", msg);
    assert_int_equal(state_of(f->s, bad_keys[i]), i == 1 && f->cfg.effects_in_store
                                                       ? RESIL_OP_UNKNOWN
                                                       : RESIL_OP_PENDING);
    assert_int_equal(ledger_rows(f, bad_keys[i]), 0);
  }
  assert_int_equal(ts_query_long(&f->env, "SELECT count(*) FROM ledger WHERE t = 'again'"), 0);
}

/* An effect made only of resil_store_txn_exec calls adds no round trip:
 * its statements travel with the terminal state and COMMIT. Counted as in
 * pg_execute_in_one_transaction_takes_two_round_trips (traced_round_trips,
 * each effect running two statements, one with a binary parameter), the
 * window, from inside rt-1's effect to inside rt-3's, holds: rt-1's
 * statements + terminal state + COMMIT (1), rt-2's first round trip (1:
 * BEGIN and the INSERT with effects_in_store; by default the INSERT and its
 * Sync with BEGIN and the row lock) and its statements + terminal state +
 * COMMIT (1), rt-3's first round trip (1): 4 in both modes, 2 per new
 * operation, and no Parse (the texts are cached since rt-0). Begin then
 * complete: 6, as for an effect that runs nothing. */
static void txn_exec_pg_execute_takes_two_round_trips_in_both_modes(void **state) {
  fx *f = get(state);
  if (f->bk != TS_PG) skip();
  ledger_create(f);
  static const char *const v[] = {XKEY, "rt", "\x01\x00\x02", NULL};
  static const size_t l[] = {0, 0, 3, 0};
  static const int b[] = {0, 0, 1, 0};
  const xstmt st[2] = {
      {"INSERT INTO ledger (k, t, b, z) VALUES ($1, $2, $3, $4)", 4, v, l, b, NULL},
      {"UPDATE ledger SET n = 1 WHERE k = $1", 1, v, NULL, NULL, NULL},
  };
  exec_effect e = {.bk = f->bk, .stmts = st, .n = 2};
  static const char rows[] = "SELECT count(*) FROM ledger WHERE k LIKE 'rt-%' AND n = 1 AND "
                             "b = '\\x010002'::bytea AND t = 'rt' AND z IS NULL";
  assert_int_equal(traced_round_trips(f, 1, &e), 4);
  assert_int_equal(ts_query_long(&f->env, rows), 4);
  ts_exec(&f->env, "DELETE FROM ledger");
  ts_exec(&f->env, "DELETE FROM resil_operations");
  assert_int_equal(traced_round_trips(f, 0, &e), 6);
  assert_int_equal(ts_query_long(&f->env, rows), 4);
}

/* More statements in one effect than libpq's pipeline is given at once
 * (each inserts its own row): all commit, with the terminal state. And
 * when the third fails, nothing does, and the completion names it. */
static void txn_exec_many_statements_in_one_effect_commit_together(void **state) {
  fx *f = get(state);
  f->cfg.pool_size = 1;
  fx_reopen(f);
  ledger_create(f);
  enum { N = 150 };
  static char suffix[N][8];
  static const char *const v[] = {XKEY};
  xstmt st[N];
  for (int i = 0; i < N; i++) {
    snprintf(suffix[i], sizeof suffix[i], ".%d", i);
    st[i] = (xstmt){"INSERT INTO ledger (k) VALUES ($1)", 1, v, NULL, NULL, suffix[i]};
  }
  exec_effect e = {.bk = f->bk, .stmts = st, .n = N};
  resil_op_request req = ts_req("POST", "/p", "1");
  resil_op_record rec;
  resil_op_record_init(&rec);
  assert_int_equal(execute_ok(f, "many", &req, effect_exec, &e, &rec), RESIL_OP_NEW);
  assert_int_equal(rec.state, RESIL_OP_COMMITTED);
  assert_int_equal(ledger_rows(f, "many"), N);
  /* The third fails (its row exists): nothing of this effect commits. */
  ts_exec(&f->env, "INSERT INTO ledger (k) VALUES ('many2.2')");
  resil_op_begin_result r = 0;
  assert_status(RESIL_EIO, resil_store_execute(f->s, "many2", &req, effect_exec, &e, &r, &rec));
  assert_int_equal(r, RESIL_OP_NEW);
  if (!names_statement(resil_store_errmsg(f->s), 3))
    fail_msg("statement 3 not named: '%s'", resil_store_errmsg(f->s));
  assert_int_equal(ledger_rows(f, "many2"), 1); /* the test's own row */
  assert_int_equal(state_of(f->s, "many2"),
                   f->cfg.effects_in_store ? RESIL_OP_UNKNOWN : RESIL_OP_PENDING);
  resil_op_record_clear(&rec);
}

/* A completion that fails after the effect queued its statements for
 * another reason (an invalid response; the fault hook before the terminal
 * state) rolls them back, and the connection serves the next call. */
static void txn_exec_queued_statements_roll_back_when_the_completion_fails_otherwise(
    void **state) {
  fx *f = get(state);
  atomic_int faults = 0;
  f->cfg.pool_size = 1;
  fx_reopen(f);
  ledger_create(f);
  static const char *const v[] = {XKEY, "q"};
  const xstmt st = {"INSERT INTO ledger (k, t) VALUES ($1, $2)", 2, v, NULL, NULL, NULL};
  exec_effect invalid = {.bk = f->bk, .stmts = &st, .n = 1, .status = 99};
  exec_effect good = {.bk = f->bk, .stmts = &st, .n = 1};
  resil_op_request req = ts_req("POST", "/p", "1");
  assert_int_equal(begin_ok(f->s, "qi", &req, NULL), RESIL_OP_NEW);
  assert_status(RESIL_EINVAL, resil_store_complete(f->s, "qi", effect_exec, &invalid, NULL));
  assert_field(f->s, "status");
  assert_int_equal(begin_ok(f->s, "qi", &req, NULL), RESIL_OP_IN_PROGRESS);
  assert_int_equal(state_of(f->s, "qi"), RESIL_OP_PENDING);
  assert_int_equal(ledger_rows(f, "qi"), 0);
  f->cfg.fault_before_terminal = fail_before_terminal;
  f->cfg.fault_user = &faults;
  fx_reopen(f);
  assert_status(RESIL_EIO, resil_store_complete(f->s, "qi", effect_exec, &good, NULL));
  assert_int_equal(atomic_load(&faults), 1);
  assert_int_equal(begin_ok(f->s, "qi", &req, NULL), RESIL_OP_IN_PROGRESS);
  assert_int_equal(ledger_rows(f, "qi"), 0);
  f->cfg.fault_before_terminal = NULL;
  fx_reopen(f);
  assert_status(RESIL_OK, resil_store_complete(f->s, "qi", effect_exec, &good, NULL));
  assert_int_equal(state_of(f->s, "qi"), RESIL_OP_COMMITTED);
  assert_int_equal(ledger_rows(f, "qi"), 1);
}

/* Which bad call effect_bad_exec makes after a good statement. */
typedef struct bad_exec {
  ts_backend bk;
  int which;
  resil_status got;
  int called;
} bad_exec;

static resil_status effect_bad_exec(void *user, resil_store_txn *tx,
                                    const resil_op_record *pending, resil_op_response *out) {
  bad_exec *b = user;
  int sq = b->bk == TS_SQLITE;
  const char *vals[3] = {pending->key, "v", "w"};
  /* A good statement first: rolled back with the rest. */
  resil_status st = resil_store_txn_exec(
      tx, sq ? "INSERT INTO ledger (k, t) VALUES (?1, ?2)" : "INSERT INTO ledger (k, t) VALUES ($1, $2)",
      2, vals, NULL, NULL);
  if (st) return st;
  static const int bin1[1] = {1};
  static const char *const many[RESIL_STORE_EXEC_PARAMS_MAX + 1];
  const char *k2 = sq ? "INSERT INTO ledger (k, t) VALUES (?1, ?2)"
                      : "INSERT INTO ledger (k, t) VALUES ($1, $2)";
  char wide[RESIL_STORE_EXEC_PARAMS_MAX * 12 + 16];
  switch (b->which) {
  case 0: st = resil_store_txn_exec(NULL, k2, 2, vals, NULL, NULL); break;
  case 1: st = resil_store_txn_exec(tx, NULL, 0, NULL, NULL, NULL); break;
  case 2: st = resil_store_txn_exec(tx, "", 0, NULL, NULL, NULL); break;
  case 3: st = resil_store_txn_exec(tx, k2, -1, vals, NULL, NULL); break;
  case 4:
    st = resil_store_txn_exec(tx, k2, RESIL_STORE_EXEC_PARAMS_MAX + 1, many, NULL, NULL);
    break;
  case 5: st = resil_store_txn_exec(tx, k2, 2, NULL, NULL, NULL); break;
  case 6: st = resil_store_txn_exec(tx, k2, 2, vals, NULL, bin1); break;
  /* Parameter counts that are not the statement's: its text cached by the
   * good statement above, then a text run for the first time. */
  case 7: st = resil_store_txn_exec(tx, k2, 1, vals, NULL, NULL); break;
  case 8: st = resil_store_txn_exec(tx, k2, 3, vals, NULL, NULL); break;
  case 9:
  case 10:
    snprintf(wide, sizeof wide, "%s /* fresh */", k2);
    st = resil_store_txn_exec(tx, wide, b->which == 9 ? 1 : 3, vals, NULL, NULL);
    break;
  case 11: /* nparams = RESIL_STORE_EXEC_PARAMS_MAX, a row returned (discarded) */
  {
    size_t len = (size_t)snprintf(wide, sizeof wide, "SELECT 1");
    for (int i = 1; i <= RESIL_STORE_EXEC_PARAMS_MAX; i++)
      len += (size_t)snprintf(wide + len, sizeof wide - len, sq ? ", ?%d" : ", $%d::text", i);
    const char *mv[RESIL_STORE_EXEC_PARAMS_MAX];
    for (int i = 0; i < RESIL_STORE_EXEC_PARAMS_MAX; i++) mv[i] = i % 2 ? "x" : NULL;
    st = resil_store_txn_exec(tx, wide, RESIL_STORE_EXEC_PARAMS_MAX, mv, NULL, NULL);
    break;
  }
  default: st = RESIL_EINVAL;
  }
  b->got = st;
  b->called = 1;
  out->status = 201;
  return st;
}

/* Bad arguments: tx NULL is RESIL_EMISUSE; sql NULL or empty, nparams out
 * of range, values NULL with parameters, a binary value without lengths
 * are RESIL_EINVAL; SQLite: nparams not the statement's parameter count is
 * RESIL_EINVAL, saying so, for a text already cached as for a new one
 * (PostgreSQL queues it: the server refuses it at the commit, RESIL_EIO).
 * The effect returns what the call returned: the operation rolls back (the
 * effect's good statement before it too) and is PENDING (execute with
 * effects_in_store: UNKNOWN). nparams RESIL_STORE_EXEC_PARAMS_MAX works,
 * and the rows returned are discarded. Every case runs; the failures are
 * reported together. */
static void txn_exec_rejects_bad_arguments_and_the_operation_rolls_back(void **state) {
  fx *f = get(state);
  int pg = f->bk == TS_PG;
  f->cfg.pool_size = 1;
  fx_reopen(f);
  ledger_create(f);
  assert_status(RESIL_EMISUSE, resil_store_txn_exec(NULL, "SELECT 1", 0, NULL, NULL, NULL));
  resil_op_request req = ts_req("POST", "/p", "1");
  const struct {
    resil_status exec, call;
  } want[11] = {
      {RESIL_EMISUSE, RESIL_EMISUSE},
      {RESIL_EINVAL, RESIL_EINVAL},
      {RESIL_EINVAL, RESIL_EINVAL},
      {RESIL_EINVAL, RESIL_EINVAL},
      {RESIL_EINVAL, RESIL_EINVAL},
      {RESIL_EINVAL, RESIL_EINVAL},
      {RESIL_EINVAL, RESIL_EINVAL},
      {pg ? RESIL_OK : RESIL_EINVAL, pg ? RESIL_EIO : RESIL_EINVAL},
      {pg ? RESIL_OK : RESIL_EINVAL, pg ? RESIL_EIO : RESIL_EINVAL},
      {pg ? RESIL_OK : RESIL_EINVAL, pg ? RESIL_EIO : RESIL_EINVAL},
      {pg ? RESIL_OK : RESIL_EINVAL, pg ? RESIL_EIO : RESIL_EINVAL},
  };
  char fails[4096] = "";
  size_t nf = 0;
#define BAD_CASE(...)                                                                  \
  (nf += (size_t)snprintf(fails + nf, nf < sizeof fails ? sizeof fails - nf : 0, __VA_ARGS__), \
   nf = nf < sizeof fails ? nf : sizeof fails)
  for (int i = 0; i < 11; i++) {
    char key[16];
    snprintf(key, sizeof key, "ba-%d", i);
    bad_exec b = {.bk = f->bk, .which = i};
    int use_execute = i % 2 == 0;
    resil_status st;
    if (use_execute) {
      resil_op_begin_result r = 0;
      st = resil_store_execute(f->s, key, &req, effect_bad_exec, &b, &r, NULL);
      assert_int_equal(r, RESIL_OP_NEW);
    } else {
      assert_int_equal(begin_ok(f->s, key, &req, NULL), RESIL_OP_NEW);
      st = resil_store_complete(f->s, key, effect_bad_exec, &b, NULL);
    }
    assert_true(b.called);
    if (b.got != want[i].exec)
      BAD_CASE("\n  case %d: exec %s, expected %s", i, resil_status_name(b.got),
               resil_status_name(want[i].exec));
    if (st != want[i].call)
      BAD_CASE("\n  case %d: %s, expected %s (%s)", i, resil_status_name(st),
               resil_status_name(want[i].call), resil_store_errmsg(f->s));
    else if (!pg && i >= 7 && !strstr(resil_store_errmsg(f->s), "param"))
      BAD_CASE("\n  case %d: the message does not say the parameter count is wrong: '%s'", i,
               resil_store_errmsg(f->s));
    resil_op_state want_state =
        use_execute && f->cfg.effects_in_store ? RESIL_OP_UNKNOWN : RESIL_OP_PENDING;
    if (state_of(f->s, key) != want_state)
      BAD_CASE("\n  case %d: %s, expected %s", i, resil_op_state_name(state_of(f->s, key)),
               resil_op_state_name(want_state));
    if (ledger_rows(f, key) != 0) BAD_CASE("\n  case %d: the effect's row committed", i);
  }
#undef BAD_CASE
  if (fails[0]) fail_msg("bad arguments:%s", fails);
  bad_exec wide = {.bk = f->bk, .which = 11};
  assert_int_equal(execute_ok(f, "ba-max", &req, effect_bad_exec, &wide, NULL), RESIL_OP_NEW);
  assert_status(RESIL_OK, wide.got);
  assert_int_equal(state_of(f->s, "ba-max"), RESIL_OP_COMMITTED);
  assert_int_equal(ledger_rows(f, "ba-max"), 1);
}

/* PostgreSQL: DEALLOCATE ALL run by the effect after a queued exec of a
 * cached text (resil_store_txn_pg sends the queue first, then the effect
 * deallocates everything), or before it (the cached statement is gone when
 * it is queued): that completion fails and rolls back (still PENDING), and
 * the next operations on the same connection, with the same text, work:
 * cached statements are prepared again. */
static void txn_exec_pg_cached_statements_deallocated_by_an_effect_are_prepared_again(
    void **state) {
  fx *f = get(state);
  if (f->bk != TS_PG) skip();
  f->cfg.pool_size = 1;
  fx_reopen(f);
  ledger_create(f);
  resil_op_request req = ts_req("POST", "/p", "1");
  static const char *const v[] = {XKEY, "d"};
  const xstmt st = {"INSERT INTO ledger (k, t) VALUES ($1, $2)", 2, v, NULL, NULL, NULL};
  exec_effect good = {.bk = f->bk, .stmts = &st, .n = 1};
  assert_int_equal(execute_ok(f, "dx-0", &req, effect_exec, &good, NULL), RESIL_OP_NEW);
  exec_effect after = {.bk = f->bk, .stmts = &st, .n = 1, .direct_after = "DEALLOCATE ALL"};
  exec_effect before = {.bk = f->bk, .stmts = &st, .n = 1, .direct_before = "DEALLOCATE ALL"};
  exec_effect *bad[2] = {&after, &before};
  for (int k = 0; k < 2; k++) {
    char key[16];
    snprintf(key, sizeof key, "dx-%d", k + 1);
    assert_int_equal(begin_ok(f->s, key, &req, NULL), RESIL_OP_NEW);
    assert_status(RESIL_EIO, resil_store_complete(f->s, key, effect_exec, bad[k], NULL));
    assert_status(RESIL_OK, bad[k]->got[0]);
    assert_int_equal(state_of(f->s, key), RESIL_OP_PENDING);
    assert_int_equal(ledger_rows(f, key), 0);
    resil_status s = resil_store_complete(f->s, key, effect_exec, &good, NULL);
    if (s) fail_msg("complete %s after DEALLOCATE ALL: %s: %s", key, resil_status_name(s),
                    resil_store_errmsg(f->s));
    assert_int_equal(state_of(f->s, key), RESIL_OP_COMMITTED);
    assert_int_equal(ledger_rows(f, key), 1);
    for (int j = 0; j < 2; j++) {
      snprintf(key, sizeof key, "dx-%d-%d", k + 1, j);
      assert_int_equal(execute_ok(f, key, &req, effect_exec, &good, NULL), RESIL_OP_NEW);
      assert_int_equal(ledger_rows(f, key), 1);
    }
  }
}

#define STORE_TESTS(bk)                                                                \
  cmocka_unit_test_prestate_setup_teardown(begin_new_stores_pending_with_request_and_fingerprint, fx_setup, fx_teardown, (void *)&bk), \
  cmocka_unit_test_prestate_setup_teardown(begin_replays_committed_response_byte_for_byte, fx_setup, fx_teardown, (void *)&bk), \
  cmocka_unit_test_prestate_setup_teardown(begin_replays_failed_terminal_state, fx_setup, fx_teardown, (void *)&bk), \
  cmocka_unit_test_prestate_setup_teardown(begin_on_pending_key_is_in_progress, fx_setup, fx_teardown, (void *)&bk), \
  cmocka_unit_test_prestate_setup_teardown(begin_with_other_method_path_or_body_is_conflict, fx_setup, fx_teardown, (void *)&bk), \
  cmocka_unit_test_prestate_setup_teardown(status_reports_each_state_and_unknown_for_missing_key, fx_setup, fx_teardown, (void *)&bk), \
  cmocka_unit_test_prestate_setup_teardown(complete_runs_effect_once_and_second_complete_does_not, fx_setup, fx_teardown, (void *)&bk), \
  cmocka_unit_test_prestate_setup_teardown(complete_effect_error_rolls_back_its_own_writes, fx_setup, fx_teardown, (void *)&bk), \
  cmocka_unit_test_prestate_setup_teardown(complete_rejects_invalid_effect_response_and_rolls_back, fx_setup, fx_teardown, (void *)&bk), \
  cmocka_unit_test_prestate_setup_teardown(complete_unknown_key_is_estate_without_effect, fx_setup, fx_teardown, (void *)&bk), \
  cmocka_unit_test_prestate_setup_teardown(complete_refuses_an_effect_that_ends_the_transaction, fx_setup, fx_teardown, (void *)&bk), \
  cmocka_unit_test_prestate_setup_teardown(pg_complete_fails_when_the_effects_sql_aborted_the_transaction, fx_setup, fx_teardown, (void *)&bk), \
  cmocka_unit_test_prestate_setup_teardown(pg_statements_deallocated_by_an_effect_are_prepared_again, fx_setup, fx_teardown, (void *)&bk), \
  cmocka_unit_test_prestate_setup_teardown(pg_operation_takes_begin_plus_two_round_trips_and_no_parse, fx_setup, fx_teardown, (void *)&bk), \
  cmocka_unit_test_prestate_setup_teardown(complete_commits_nothing_when_the_terminal_write_finds_no_pending_row, fx_setup, fx_teardown, (void *)&bk), \
  cmocka_unit_test_prestate_setup_teardown(i5_rollback_between_effect_and_terminal_state_then_recover_once, fx_setup, fx_teardown, (void *)&bk), \
  cmocka_unit_test_prestate_setup_teardown(i7_negative_control_catches_effect_committed_early, fx_setup, fx_teardown, (void *)&bk), \
  cmocka_unit_test_prestate_setup_teardown(recover_takes_only_ops_older_than_threshold, fx_setup, fx_teardown, (void *)&bk), \
  cmocka_unit_test_prestate_setup_teardown(recover_is_bounded_by_max_ops_oldest_first, fx_setup, fx_teardown, (void *)&bk), \
  cmocka_unit_test_prestate_setup_teardown(recover_postpones_a_failing_op_behind_the_others, fx_setup, fx_teardown, (void *)&bk), \
  cmocka_unit_test_prestate_setup_teardown(sweep_deletes_expired_terminal_ops_in_bounded_batches, fx_setup, fx_teardown, (void *)&bk), \
  cmocka_unit_test_prestate_setup_teardown(complete_times_out_while_another_holds_the_row, fx_setup, fx_teardown, (void *)&bk), \
  cmocka_unit_test_prestate_setup_teardown(sqlite_begin_times_out_while_another_connection_holds_the_write_lock, fx_setup, fx_teardown, (void *)&bk), \
  cmocka_unit_test_prestate_setup_teardown(sqlite_begin_waiting_for_the_lock_answers_once_the_key_is_stored, fx_setup, fx_teardown, (void *)&bk), \
  cmocka_unit_test_prestate_setup_teardown(sqlite_disk_full_is_eio_and_nothing_half_written, fx_setup, fx_teardown, (void *)&bk), \
  cmocka_unit_test_prestate_setup_teardown(sqlite_open_reports_unusable_files_as_eio, fx_setup, fx_teardown, (void *)&bk), \
  cmocka_unit_test_prestate_setup_teardown(open_refuses_a_schema_newer_than_the_library, fx_setup, fx_teardown, (void *)&bk), \
  cmocka_unit_test_prestate_setup_teardown(pg_lost_connection_is_reconnected_and_retried_once, fx_setup, fx_teardown, (void *)&bk), \
  cmocka_unit_test_prestate_setup_teardown(calls_reject_bad_keys_and_requests_naming_the_field, fx_setup, fx_teardown, (void *)&bk), \
  cmocka_unit_test_prestate_setup_teardown(errmsg_belongs_to_the_calling_thread, fx_setup, fx_teardown, (void *)&bk), \
  cmocka_unit_test_prestate_setup_teardown(open_allocation_failure_sweep, fx_setup, fx_teardown, (void *)&bk), \
  cmocka_unit_test_prestate_setup_teardown(begin_and_complete_allocation_failure_sweep, fx_setup, fx_teardown, (void *)&bk), \
  cmocka_unit_test_prestate_setup_teardown(sqlite_deleted_or_replaced_file_is_never_reported_as_success, fx_setup, fx_teardown, (void *)&bk), \
  cmocka_unit_test_prestate_setup_teardown(sqlite_operation_writes_build_no_temporary_btree, fx_setup, fx_teardown, (void *)&bk), \
  cmocka_unit_test_prestate_setup_teardown(sqlite_schema_version_1_is_migrated_keeping_every_row, fx_setup, fx_teardown, (void *)&bk), \
  cmocka_unit_test_prestate_setup_teardown(sqlite_each_commit_takes_one_write, fx_setup, fx_teardown, (void *)&bk), \
  cmocka_unit_test_prestate_setup_teardown(sqlite_wal_written_through_the_vfs_recovers_every_commit, fx_setup, fx_teardown, (void *)&bk), \
  cmocka_unit_test_prestate_setup_teardown(sqlite_vfs_holds_no_wal_byte_past_a_commit, fx_setup, fx_teardown, (void *)&bk), \
  cmocka_unit_test_prestate_setup_teardown(recovery_skips_and_reports_damaged_pending_rows, fx_setup, fx_teardown, (void *)&bk), \
  cmocka_unit_test_prestate_setup_teardown(status_below_200_is_never_committed_nor_replayed, fx_setup, fx_teardown, (void *)&bk), \
  cmocka_unit_test_prestate_setup_teardown(unsized_request_and_record_are_refused, fx_setup, fx_teardown, (void *)&bk), \
  cmocka_unit_test_prestate_setup_teardown(sqlite_open_failures_say_why, fx_setup, fx_teardown, (void *)&bk), \
  cmocka_unit_test_prestate_setup_teardown(pg_restarted_server_is_reconnected_inside_the_store, fx_setup, fx_teardown, (void *)&bk), \
  cmocka_unit_test_prestate_setup_teardown(pg_connection_lost_inside_the_transaction_commits_once, fx_setup, fx_teardown, (void *)&bk), \
  cmocka_unit_test_prestate_setup_teardown(sqlite_begin_flushes_only_by_default_completion_always, fx_setup, fx_teardown, (void *)&bk), \
  cmocka_unit_test_prestate_setup_teardown(pg_only_begin_commits_without_flush_in_effects_in_store_mode, fx_setup, fx_teardown, (void *)&bk), \
  cmocka_unit_test_prestate_setup_teardown(execute_runs_a_new_key_once_and_answers_existing_keys_as_begin, fx_setup, fx_teardown, (void *)&bk), \
  cmocka_unit_test_prestate_setup_teardown(execute_failure_leaves_pending_by_default_and_nothing_in_one_transaction, fx_setup, fx_teardown, (void *)&bk), \
  cmocka_unit_test_prestate_setup_teardown(execute_allocation_failure_sweep, fx_setup, fx_teardown, (void *)&bk), \
  cmocka_unit_test_prestate_setup_teardown(execute_racing_the_same_key_runs_the_effect_once, fx_setup, fx_teardown, (void *)&bk), \
  cmocka_unit_test_prestate_setup_teardown(pg_execute_in_one_transaction_takes_two_round_trips, fx_setup, fx_teardown, (void *)&bk), \
  cmocka_unit_test_prestate_setup_teardown(pg_connection_lost_inside_execute_commits_once, fx_setup, fx_teardown, (void *)&bk), \
  cmocka_unit_test_prestate_setup_teardown(pg_connection_lost_with_queued_statements_commits_once, fx_setup, fx_teardown, (void *)&bk), \
  cmocka_unit_test_prestate_setup_teardown(pg_execute_completes_when_the_lock_after_its_insert_fails, fx_setup, fx_teardown, (void *)&bk), \
  cmocka_unit_test_prestate_setup_teardown(txn_exec_writes_text_binary_and_null_and_reuses_texts, fx_setup, fx_teardown, (void *)&bk), \
  cmocka_unit_test_prestate_setup_teardown(txn_exec_failure_at_commit_rolls_back_and_names_the_statement, fx_setup, fx_teardown, (void *)&bk), \
  cmocka_unit_test_prestate_setup_teardown(txn_exec_statements_are_settled_before_the_effect_uses_the_connection, fx_setup, fx_teardown, (void *)&bk), \
  cmocka_unit_test_prestate_setup_teardown(txn_exec_failure_the_effect_ignores_commits_nothing, fx_setup, fx_teardown, (void *)&bk), \
  cmocka_unit_test_prestate_setup_teardown(txn_exec_refuses_statements_that_end_the_transaction, fx_setup, fx_teardown, (void *)&bk), \
  cmocka_unit_test_prestate_setup_teardown(txn_exec_copy_fails_and_the_connection_stays_usable, fx_setup, fx_teardown, (void *)&bk), \
  cmocka_unit_test_prestate_setup_teardown(txn_exec_statement_with_a_trailing_comment_runs, fx_setup, fx_teardown, (void *)&bk), \
  cmocka_unit_test_prestate_setup_teardown(txn_exec_pg_execute_takes_two_round_trips_in_both_modes, fx_setup, fx_teardown, (void *)&bk), \
  cmocka_unit_test_prestate_setup_teardown(txn_exec_rejects_bad_arguments_and_the_operation_rolls_back, fx_setup, fx_teardown, (void *)&bk), \
  cmocka_unit_test_prestate_setup_teardown(txn_exec_pg_cached_statements_deallocated_by_an_effect_are_prepared_again, fx_setup, fx_teardown, (void *)&bk), \
  cmocka_unit_test_prestate_setup_teardown(txn_exec_many_statements_in_one_effect_commit_together, fx_setup, fx_teardown, (void *)&bk), \
  cmocka_unit_test_prestate_setup_teardown(txn_exec_queued_statements_roll_back_when_the_completion_fails_otherwise, fx_setup, fx_teardown, (void *)&bk)

int main(int argc, char **argv) {
  ts_run run;
  if (ts_run_parse(argc, argv, &run) != 0) return 2;
  const struct CMUnitTest common[] = {
      cmocka_unit_test(open_rejects_bad_uris_and_config_fields),
  };
  const struct CMUnitTest sqlite_tests[] = {STORE_TESTS(on_sqlite)};
  const struct CMUnitTest pg_tests[] = {STORE_TESTS(on_pg)};
  const struct CMUnitTest sqlite_eis_tests[] = {STORE_TESTS(on_sqlite_eis)};
  const struct CMUnitTest pg_eis_tests[] = {STORE_TESTS(on_pg_eis)};
  int failed = 0;
  sync_vfs_install();
  if (run.sqlite) {
    failed += cmocka_run_group_tests_name("store", common, NULL, NULL);
    failed += cmocka_run_group_tests_name("store_sqlite", sqlite_tests, NULL, NULL);
    failed += cmocka_run_group_tests_name("store_sqlite_effects_in_store", sqlite_eis_tests,
                                          NULL, NULL);
  }
  if (run.pg) {
    int gate = ts_pg_gate(&run);
    if (gate) return failed ? failed : gate;
    failed += cmocka_run_group_tests_name("store_postgresql", pg_tests, NULL, NULL);
    failed += cmocka_run_group_tests_name("store_postgresql_effects_in_store", pg_eis_tests,
                                          NULL, NULL);
  }
  return failed;
}
