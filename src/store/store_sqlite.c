/* The embedded backend: one SQLite file in WAL mode with synchronous=FULL,
 * one connection per pool slot (opened SQLITE_OPEN_NOMUTEX: the pool hands
 * each connection to one thread at a time). With effects_in_store, begin
 * switches its connection to synchronous=NORMAL for its own commit and the
 * connection's next sq_ready switches it back (store.h).
 *
 * Every write runs in a BEGIN IMMEDIATE transaction, which takes the
 * database's single write lock at its start: the completion's "row lock" is
 * that lock, so the effect, the terminal state and everything else written
 * in the transaction commit together or not at all. Readers (status, and
 * begin on a key being completed) read the last committed state in WAL mode
 * without waiting for the writer. A lock held longer than busy_timeout gives
 * SQLITE_BUSY, reported as RESIL_ETIMEDOUT.
 *
 * Connections are opened through the VFS of store_sqlite_vfs.c: the
 * default VFS, writing each WAL frame (header and page) in one write
 * instead of two; the file, its locks and its durability are the default
 * VFS's, so other connections and processes share the file as usual. */
#include <errno.h>
#include <sqlite3.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "store/store_int.h"

enum {
  Q_BEGIN,
  Q_COMMIT,
  Q_ROLLBACK,
  Q_SELECT,
  Q_INSERT,
  Q_BUMP,
  Q_TERMINAL,
  Q_LIST,
  Q_TOUCH,
  Q_SWEEP,
  Q_PENDING,
  Q_COUNT
};

#define COLUMNS                                                                \
  "key, state, fingerprint, method, path, request_body, status, headers, "    \
  "body, created_ms, updated_ms, attempts"

static const char *const sql[Q_COUNT] = {
    [Q_BEGIN] = "BEGIN IMMEDIATE",
    [Q_COMMIT] = "COMMIT",
    [Q_ROLLBACK] = "ROLLBACK",
    [Q_SELECT] = "SELECT " COLUMNS " FROM resil_operations WHERE key = ?1",
    [Q_INSERT] = "INSERT INTO resil_operations (" COLUMNS ") "
                 "VALUES (?1, 1, ?2, ?3, ?4, ?5, NULL, NULL, NULL, ?6, ?6, 1) "
                 "ON CONFLICT (key) DO NOTHING",
    [Q_BUMP] = "UPDATE resil_operations SET attempts = attempts + 1 WHERE key = ?1",
    [Q_TERMINAL] = "UPDATE resil_operations SET state = ?2, status = ?3, "
                   "headers = ?4, body = ?5, updated_ms = ?6 "
                   "WHERE key = ?1 AND state = 1",
    [Q_LIST] = "SELECT key FROM resil_operations WHERE state = 1 AND "
               "updated_ms <= ?1 ORDER BY updated_ms, key LIMIT ?2",
    [Q_TOUCH] = "UPDATE resil_operations SET updated_ms = ?2 "
                "WHERE key = ?1 AND state = 1",
    [Q_SWEEP] = "DELETE FROM resil_operations WHERE key IN (SELECT key FROM "
                "resil_operations WHERE state IN (2, 3) AND updated_ms <= ?1 "
                "ORDER BY updated_ms LIMIT ?2)",
    [Q_PENDING] = "SELECT count(*) FROM resil_operations WHERE state = 1",
};

/* The schema. A new version appends a migration step to migrate().
 *
 * Version 2 (version 1 with another CHECK on state): SQLite codes
 * "x IN (1, 2, 3)" (a list of more than two constants) by building a
 * temporary index of the list every time the statement runs, so version 1's
 * CHECK (state IN (1, 2, 3)) cost every INSERT and terminal UPDATE a
 * temporary b-tree (about a third of the CPU of a keyed operation); the
 * same constraint written with = and OR is three comparisons. */
#define SCHEMA_VERSION 2
#define OPERATIONS_TABLE(name)                                                 \
  "CREATE TABLE " name " ("                                                    \
  " key TEXT PRIMARY KEY NOT NULL,"                                            \
  " state INTEGER NOT NULL CHECK (state = 1 OR state = 2 OR state = 3),"      \
  " fingerprint BLOB NOT NULL,"                                                \
  " method TEXT NOT NULL,"                                                     \
  " path TEXT NOT NULL,"                                                       \
  " request_body BLOB NOT NULL,"                                               \
  " status INTEGER,"                                                           \
  " headers BLOB,"                                                             \
  " body BLOB,"                                                                \
  " created_ms INTEGER NOT NULL,"                                              \
  " updated_ms INTEGER NOT NULL,"                                              \
  " attempts INTEGER NOT NULL);"
#define STATE_AGE_INDEX                                                        \
  "CREATE INDEX resil_operations_state_age ON resil_operations (state, updated_ms);"
static const char schema_v2[] =
    OPERATIONS_TABLE("resil_operations") STATE_AGE_INDEX
    "INSERT INTO resil_schema (version) VALUES (2);";
/* 1 -> 2: the table rebuilt with the new CHECK (SQLite cannot alter a
 * constraint), every row copied as is, inside migrate()'s transaction. */
static const char migrate_v1_v2[] =
    OPERATIONS_TABLE("resil_operations_v2")
    "INSERT INTO resil_operations_v2 (" COLUMNS ") SELECT " COLUMNS
    " FROM resil_operations;"
    "DROP TABLE resil_operations;"
    "ALTER TABLE resil_operations_v2 RENAME TO resil_operations;"
    STATE_AGE_INDEX
    "UPDATE resil_schema SET version = 2;";

typedef struct sq_conn {
  sqlite3 *db;
  sqlite3_stmt *st[Q_COUNT];
  /* resil_store_txn_exec's statements, kept by text (sqlite3_sql). */
  sqlite3_stmt *est[RESIL_STORE_EXEC_CACHE];
  int normal; /* synchronous=NORMAL is in effect (effects_in_store: a begin
                 set it; sq_ready sets FULL again) */
} sq_conn;

/* Maps an SQLite result code to a status and records the message. */
static resil_status sq_fail(resil_store *s, sq_conn *c, int rc, const char *what) {
  const char *text = c && c->db ? sqlite3_errmsg(c->db) : sqlite3_errstr(rc);
  switch (rc & 0xff) {
  case SQLITE_BUSY:
  case SQLITE_LOCKED:
    return resil__store_fail(s, RESIL_ETIMEDOUT, NULL,
                             "%s: database locked beyond busy_timeout (%lld ms): %s",
                             what, (long long)s->busy_timeout_ms, text);
  case SQLITE_NOMEM:
    return resil__store_fail(s, RESIL_ENOMEM, NULL, "%s: %s", what, text);
  default:
    return resil__store_fail(s, RESIL_EIO, NULL, "%s: %s (SQLite code %d)", what,
                             text, rc);
  }
}

/* The open file must still be the one the path names: a file deleted (or
 * replaced by another one) while open would take writes nobody reads again,
 * and a restarted server would run the same keys once more. */
static resil_status sq_check_file(resil_store *s, sq_conn *c) {
  int moved = 0;
  int rc = sqlite3_file_control(c->db, "main", SQLITE_FCNTL_HAS_MOVED, &moved);
  if (rc == SQLITE_OK && !moved) return RESIL_OK;
  if (rc != SQLITE_OK) {
    /* A VFS without the file control: compare the path's inode ourselves
     * would need the open file's; the best left is whether the path is
     * still there. */
    struct stat sb;
    if (stat(s->target, &sb) == 0) return RESIL_OK;
  }
  return resil__store_fail(s, RESIL_EIO, NULL,
                           "the database file '%s' was deleted or replaced while "
                           "open: refusing to report success (what is written now "
                           "would be lost); reopen the store",
                           s->target);
}

static resil_status stmt(resil_store *s, sq_conn *c, int q, sqlite3_stmt **out) {
  if (!c->st[q]) {
    int rc = sqlite3_prepare_v3(c->db, sql[q], -1, SQLITE_PREPARE_PERSISTENT,
                                &c->st[q], NULL);
    if (rc != SQLITE_OK) {
      c->st[q] = NULL;
      return sq_fail(s, c, rc, "prepare");
    }
  }
  *out = c->st[q];
  return RESIL_OK;
}

static void stmt_done(sqlite3_stmt *q) {
  sqlite3_reset(q);
  sqlite3_clear_bindings(q);
}

/* Runs a statement that returns no rows (bindings already made). */
static resil_status run(resil_store *s, sq_conn *c, sqlite3_stmt *q, const char *what) {
  int rc = sqlite3_step(q);
  resil_status st = rc == SQLITE_DONE ? RESIL_OK : sq_fail(s, c, rc, what);
  stmt_done(q);
  return st;
}

static resil_status run_q(resil_store *s, sq_conn *c, int q, const char *what) {
  sqlite3_stmt *p = NULL;
  resil_status st = stmt(s, c, q, &p);
  return st ? st : run(s, c, p, what);
}

/* An empty blob must not be bound as a NULL pointer (that stores NULL). */
static int bind_blob(sqlite3_stmt *q, int i, const void *p, size_t n) {
  static const char empty[1];
  return sqlite3_bind_blob64(q, i, n ? p : empty, n, SQLITE_STATIC);
}

static resil_status sq_rollback_to_idle(resil_store *s, sq_conn *c) {
  if (sqlite3_get_autocommit(c->db)) return RESIL_OK;
  return run_q(s, c, Q_ROLLBACK, "rollback");
}

static void sq_txn_rollback(resil_store *s, void *conn) {
  sq_conn *c = conn;
  /* A failed ROLLBACK leaves nothing committed either; the next ready()
   * tries again. */
  (void)sq_rollback_to_idle(s, c);
}

/* Reads the row of key (inside or outside a transaction). */
static resil_status sq_read_row(resil_store *s, void *conn, const char *key,
                                resil_op_record *rec, int *found) {
  sq_conn *c = conn;
  sqlite3_stmt *q = NULL;
  resil_status st = stmt(s, c, Q_SELECT, &q);
  if (st) return st;
  *found = 0;
  sqlite3_bind_text(q, 1, key, -1, SQLITE_STATIC);
  int rc = sqlite3_step(q);
  if (rc == SQLITE_DONE) {
    stmt_done(q);
    return RESIL_OK;
  }
  if (rc != SQLITE_ROW) {
    st = sq_fail(s, c, rc, "read");
    stmt_done(q);
    return st;
  }
  resil__row r;
  memset(&r, 0, sizeof r);
  r.key = (const char *)sqlite3_column_text(q, 0);
  r.key_len = (size_t)sqlite3_column_bytes(q, 0);
  r.state = sqlite3_column_int(q, 1);
  r.fingerprint = sqlite3_column_blob(q, 2);
  r.fingerprint_len = (size_t)sqlite3_column_bytes(q, 2);
  r.method = (const char *)sqlite3_column_text(q, 3);
  r.method_len = (size_t)sqlite3_column_bytes(q, 3);
  r.path = (const char *)sqlite3_column_text(q, 4);
  r.path_len = (size_t)sqlite3_column_bytes(q, 4);
  r.request_body = sqlite3_column_blob(q, 5);
  r.request_body_len = (size_t)sqlite3_column_bytes(q, 5);
  r.has_response = sqlite3_column_type(q, 6) != SQLITE_NULL;
  r.status = sqlite3_column_int(q, 6);
  r.headers = sqlite3_column_blob(q, 7);
  r.headers_len = (size_t)sqlite3_column_bytes(q, 7);
  r.body = sqlite3_column_blob(q, 8);
  r.body_len = (size_t)sqlite3_column_bytes(q, 8);
  r.created_ms = sqlite3_column_int64(q, 9);
  r.updated_ms = sqlite3_column_int64(q, 10);
  r.attempts = sqlite3_column_int64(q, 11);
  /* A NULL pointer with a length, or a missing text, is SQLite running out
   * of memory while converting. */
  if (!r.key || !r.method || !r.path || (!r.fingerprint && r.fingerprint_len) ||
      (!r.request_body && r.request_body_len) || (!r.headers && r.headers_len) ||
      (!r.body && r.body_len)) {
    st = resil__store_fail(s, RESIL_ENOMEM, NULL, "read: out of memory");
  } else {
    st = resil__rec_set(s, rec, &r);
  }
  stmt_done(q);
  if (st == RESIL_OK) *found = 1;
  return st;
}

/* The read of an answer given without a commit: the file is checked first
 * (see sq_ready). */
static resil_status sq_read_answer(resil_store *s, void *conn, const char *key,
                                   resil_op_record *rec, int *found) {
  resil_status st = sq_check_file(s, conn);
  return st ? st : sq_read_row(s, conn, key, rec, found);
}

/* The completion's row read, under the write lock: a PENDING row goes on to
 * the effect and a commit (which checks the file); any other answer is
 * given without a commit, so the file is checked here. */
static resil_status sq_lock_row(resil_store *s, void *conn, const char *key,
                                resil_op_record *rec, int *found) {
  resil_status st = sq_read_row(s, conn, key, rec, found);
  if (!st && (!*found || rec->state != RESIL_OP_PENDING)) st = sq_check_file(s, conn);
  return st;
}

/* ---- connections and the schema ------------------------------------------- */

static resil_status exec(resil_store *s, sq_conn *c, const char *text, const char *what) {
  int rc = sqlite3_exec(c->db, text, NULL, NULL, NULL);
  return rc == SQLITE_OK ? RESIL_OK : sq_fail(s, c, rc, what);
}

/* The schema version as stored, 0 when there is no schema yet: a plain read,
 * which in WAL mode waits for no writer. */
static resil_status schema_version(resil_store *s, sq_conn *c, sqlite3_int64 *version) {
  sqlite3_stmt *q = NULL;
  *version = 0;
  int rc = sqlite3_prepare_v2(c->db,
                              "SELECT count(*) FROM sqlite_master WHERE type = 'table' "
                              "AND name = 'resil_schema'", -1, &q, NULL);
  if (rc == SQLITE_OK) rc = sqlite3_step(q);
  int exists = rc == SQLITE_ROW && sqlite3_column_int(q, 0) > 0;
  sqlite3_finalize(q);
  if (rc != SQLITE_ROW) return sq_fail(s, c, rc, "read the schema version");
  if (!exists) return RESIL_OK;
  q = NULL;
  rc = sqlite3_prepare_v2(c->db, "SELECT max(version) FROM resil_schema", -1, &q, NULL);
  if (rc == SQLITE_OK) rc = sqlite3_step(q);
  if (rc == SQLITE_ROW) *version = sqlite3_column_int64(q, 0);
  sqlite3_finalize(q);
  return rc == SQLITE_ROW ? RESIL_OK : sq_fail(s, c, rc, "read the schema version");
}

static resil_status newer_schema(resil_store *s, sqlite3_int64 version) {
  return resil__store_fail(s, RESIL_EIO, NULL,
                           "the schema version %lld is newer than this library's (%d)",
                           (long long)version, SCHEMA_VERSION);
}

/* Creates or upgrades the schema. The common case, a current schema, takes
 * no lock, so that opening a store never waits for a running writer. */
static resil_status migrate(resil_store *s, sq_conn *c) {
  sqlite3_int64 version = 0;
  resil_status st = schema_version(s, c, &version);
  if (st) return st;
  if (version == SCHEMA_VERSION) return RESIL_OK;
  if (version > SCHEMA_VERSION) return newer_schema(s, version);
  st = run_q(s, c, Q_BEGIN, "migrate: BEGIN IMMEDIATE");
  if (st) return st;
  /* Under the lock, look again: another connection may have migrated. */
  st = exec(s, c, "CREATE TABLE IF NOT EXISTS resil_schema (version INTEGER NOT NULL)",
            "migrate");
  if (!st) st = schema_version(s, c, &version);
  if (!st && version == 0) st = exec(s, c, schema_v2, "migrate: create the schema");
  if (!st && version == 1)
    st = exec(s, c, migrate_v1_v2, "migrate: schema version 1 to 2");
  if (!st && version > SCHEMA_VERSION) st = newer_schema(s, version);
  if (!st) st = run_q(s, c, Q_COMMIT, "migrate: COMMIT");
  if (st) (void)sq_rollback_to_idle(s, c);
  return st;
}

static int64_t mono_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* One attempt at journal_mode=WAL: SQLITE_ROW and *is_wal, or the error. */
static int try_wal(sq_conn *c, int *is_wal) {
  sqlite3_stmt *q = NULL;
  int rc = sqlite3_prepare_v2(c->db, "PRAGMA journal_mode = WAL", -1, &q, NULL);
  if (rc == SQLITE_OK) rc = sqlite3_step(q);
  if (rc == SQLITE_ROW) {
    /* The answer is the mode in effect: WAL can be refused (e.g. on a file
     * system without shared memory). */
    const char *mode = (const char *)sqlite3_column_text(q, 0);
    *is_wal = mode && sqlite3_stricmp(mode, "wal") == 0;
  }
  sqlite3_finalize(q);
  return rc;
}

/* Switching a file to WAL takes an exclusive lock. When several connections
 * switch a new file at once, SQLite answers SQLITE_BUSY at once instead of
 * calling the busy handler (waiting could deadlock their lock upgrades), so
 * the switch is retried here until busy_timeout has passed. */
static resil_status set_wal(resil_store *s, sq_conn *c) {
  int64_t deadline = mono_ms() + s->busy_timeout_ms;
  long pause_ms = 1;
  int is_wal = 0, rc;
  while ((rc = try_wal(c, &is_wal)) != SQLITE_ROW && (rc & 0xff) == SQLITE_BUSY &&
         mono_ms() < deadline) {
    struct timespec ts = {.tv_sec = 0, .tv_nsec = pause_ms * 1000000L};
    nanosleep(&ts, NULL);
    if (pause_ms < 16) pause_ms *= 2;
  }
  if (rc != SQLITE_ROW) return sq_fail(s, c, rc, "cannot set journal_mode=WAL");
  if (!is_wal)
    return resil__store_fail(s, RESIL_EIO, NULL, "the database refused journal_mode=WAL");
  return RESIL_OK;
}

static void sq_disconnect(resil_store *s, void *conn) {
  sq_conn *c = conn;
  if (!c) return;
  for (int i = 0; i < Q_COUNT; i++) sqlite3_finalize(c->st[i]);
  for (int i = 0; i < RESIL_STORE_EXEC_CACHE; i++) sqlite3_finalize(c->est[i]);
  /* close_v2: statements an effect left unfinalised do not keep the file
   * open for long; they are released when finalised. */
  sqlite3_close_v2(c->db);
  resil__free(s->alloc, c);
}

/* Why the file could not be opened, in the system's words: the missing
 * directory, a permission, ... (SQLite itself only says "unable to open"). */
static resil_status open_failure(resil_store *s, sq_conn *c, int rc) {
  int e = c->db ? sqlite3_system_errno(c->db) : 0;
  char dir[512];
  snprintf(dir, sizeof dir, "%s", s->target);
  char *slash = strrchr(dir, '/');
  if (slash == dir) slash[1] = '\0';
  else if (slash) *slash = '\0';
  else snprintf(dir, sizeof dir, ".");
  struct stat sb;
  const char *why;
  char buf[600];
  if (stat(dir, &sb) != 0 && errno == ENOENT) {
    snprintf(buf, sizeof buf, "no such directory '%s'", dir);
    why = buf;
  } else if (e == EACCES || e == EPERM ||
             (access(dir, W_OK | X_OK) != 0 && (errno == EACCES || errno == EPERM))) {
    snprintf(buf, sizeof buf, "permission denied (%s)", strerror(e ? e : EACCES));
    why = buf;
  } else if (e) {
    why = strerror(e);
  } else {
    why = c->db ? sqlite3_errmsg(c->db) : sqlite3_errstr(rc);
  }
  return resil__store_fail(s, (rc & 0xff) == SQLITE_NOMEM ? RESIL_ENOMEM : RESIL_EIO,
                           NULL, "cannot open the database file '%s': %s (SQLite code %d)",
                           s->target, why, rc);
}

static resil_status sq_connect(resil_store *s, void **out, int first) {
  sq_conn *c = resil__calloc(s->alloc, sizeof *c);
  if (!c) return resil__store_fail(s, RESIL_ENOMEM, NULL, "out of memory");
  int flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX;
#ifdef SQLITE_OPEN_EXRESCODE
  flags |= SQLITE_OPEN_EXRESCODE;
#endif
  int rc = sqlite3_open_v2(s->target, &c->db, flags, resil__sqlite_vfs());
  resil_status st = RESIL_OK;
  if (rc != SQLITE_OK) {
    st = open_failure(s, c, rc);
    goto fail;
  }
  if (sqlite3_db_readonly(c->db, "main") == 1) {
    st = resil__store_fail(s, RESIL_EIO, NULL,
                           "cannot open the database file '%s' for writing: "
                           "permission denied (opened read-only)", s->target);
    goto fail;
  }
  sqlite3_extended_result_codes(c->db, 1);
  sqlite3_busy_timeout(c->db, (int)s->busy_timeout_ms);
  if ((st = set_wal(s, c))) goto fail;
  if ((st = exec(s, c, "PRAGMA synchronous = FULL", "cannot set synchronous=FULL")))
    goto fail;
  if (first && (st = migrate(s, c))) goto fail;
  *out = c;
  return RESIL_OK;
fail:
  sq_disconnect(s, c);
  return st;
}

/* The file check (sq_check_file, a stat of the path) is not made here but
 * where an answer is given: before every commit (sq_txn_commit), before
 * every answer read without a commit (status, begin's answer from the last
 * committed state, a completion that finds nothing PENDING), and at the
 * start of the calls that write or list outside a transaction (touch,
 * sweep, list_pending, count_pending). A call that commits thus checks the
 * file once, right before its commit, instead of also when it starts. */
static resil_status sq_ready(resil_store *s, void *conn) {
  sq_conn *c = conn;
  resil_status st = sq_rollback_to_idle(s, c);
  if (st || !c->normal) return st;
  /* effects_in_store: the begin that ran last on this connection committed
   * under synchronous=NORMAL; every other call commits under FULL. (The
   * pragma takes effect when it is compiled, so it is run with exec, not
   * kept as a prepared statement; it is refused inside a transaction,
   * hence after the rollback above.) */
  if ((st = exec(s, c, "PRAGMA synchronous = FULL", "cannot set synchronous=FULL")))
    return st;
  c->normal = 0;
  return RESIL_OK;
}

/* effects_in_store: begin's commit is not flushed on its own (store.h):
 * synchronous=NORMAL until the connection's next sq_ready. In WAL mode a
 * later FULL commit (the completion's) syncs the WAL file, every frame
 * written before it included, whichever connection wrote them. */
static resil_status sq_begin_sync(resil_store *s, sq_conn *c) {
  if (!s->effects_in_store || c->normal) return RESIL_OK;
  resil_status st = exec(s, c, "PRAGMA synchronous = NORMAL", "cannot set synchronous=NORMAL");
  if (!st) c->normal = 1;
  return st;
}

/* ---- operations ------------------------------------------------------------ */

static resil_status sq_txn_begin(resil_store *s, void *conn) {
  return run_q(s, conn, Q_BEGIN, "BEGIN IMMEDIATE");
}

/* Every commit (begin's insert or attempt count, a terminal state) first
 * checks the file: no success is reported for a deleted file. */
static resil_status sq_txn_commit(resil_store *s, void *conn) {
  resil_status st = sq_check_file(s, conn);
  return st ? st : run_q(s, conn, Q_COMMIT, "COMMIT");
}

static int sq_txn_open(resil_store *s, void *conn) {
  (void)s;
  return !sqlite3_get_autocommit(((sq_conn *)conn)->db);
}

static void sq_txn_fill(void *conn, resil_store_txn *tx) {
  tx->sqlite = ((sq_conn *)conn)->db;
}

/* 1 when p holds nothing but blanks, semicolons and comments (as SQLite
 * reads them): what may follow one statement. */
static int only_blank(const char *p) {
  if (!p) return 1;
  for (;;) {
    p = resil__sql_skip_blank(p, 0);
    if (*p != ';') return *p == '\0';
    p++;
  }
}

/* 1 when q was compiled from sql (SQLite keeps the text without what
 * follows the statement). */
static int same_text(sqlite3_stmt *q, const char *text) {
  const char *t = sqlite3_sql(q);
  size_t n = strlen(t);
  return strncmp(t, text, n) == 0 && only_blank(text + n);
}

/* The compiled form of a->sql: a cached one (*cached = 1), or a new one,
 * kept when the cache has room. */
static resil_status exec_stmt(resil_store *s, sq_conn *c, const char *what,
                              const resil__exec_args *a, sqlite3_stmt **out, int *cached) {
  int free_slot = -1;
  for (int i = 0; i < RESIL_STORE_EXEC_CACHE; i++) {
    if (!c->est[i]) {
      if (free_slot < 0) free_slot = i;
    } else if (same_text(c->est[i], a->sql)) {
      *out = c->est[i];
      *cached = 1;
      break;
    }
  }
  sqlite3_stmt *q = *cached ? *out : NULL;
  if (!q) {
    const char *tail = NULL;
    int rc = sqlite3_prepare_v3(c->db, a->sql, -1,
                                free_slot >= 0 ? SQLITE_PREPARE_PERSISTENT : 0, &q, &tail);
    if (rc != SQLITE_OK) {
      if ((rc & 0xff) == SQLITE_NOMEM) return sq_fail(s, c, rc, what);
      return resil__store_fail(s, RESIL_EINVAL, "sql", "%s: does not compile: %s", what,
                               sqlite3_errmsg(c->db));
    }
    const char *why = !q ? "is empty" : !only_blank(tail) ? "holds more than one statement"
                                                           : NULL;
    if (why) {
      sqlite3_finalize(q);
      return resil__store_fail(s, RESIL_EINVAL, "sql", "%s: %s", what, why);
    }
  }
  if (sqlite3_bind_parameter_count(q) != a->n) {
    resil_status st = resil__store_fail(s, RESIL_EINVAL, "nparams",
                                        "%s: has %d parameters, nparams is %d", what,
                                        sqlite3_bind_parameter_count(q), a->n);
    if (!*cached) sqlite3_finalize(q);
    return st;
  }
  if (!*cached && free_slot >= 0) {
    c->est[free_slot] = q;
    *cached = 1;
  }
  *out = q;
  return RESIL_OK;
}

/* resil_store_txn_exec: the statement runs now, in the open transaction. */
static resil_status sq_txn_exec(resil_store *s, void *conn, const resil__exec_args *a) {
  sq_conn *c = conn;
  char what[48];
  snprintf(what, sizeof what, "effect statement %d", a->no);
  /* An earlier statement's error (SQLITE_FULL, OR ROLLBACK, RAISE(ROLLBACK))
   * may have rolled the transaction back: this one would then commit on
   * its own. */
  if (sqlite3_get_autocommit(c->db))
    return resil__store_fail(s, RESIL_EIO, NULL,
                             "%s: the transaction is not open (or was rolled back by an "
                             "earlier error)", what);
  sqlite3_stmt *q = NULL;
  int cached = 0;
  resil_status st = exec_stmt(s, c, what, a, &q, &cached);
  if (st) return st;
  int rc = SQLITE_OK;
  for (int i = 0; i < a->n && rc == SQLITE_OK; i++) {
    const char *v = a->values[i];
    if (!v)
      rc = sqlite3_bind_null(q, i + 1);
    else if (a->formats && a->formats[i])
      rc = sqlite3_bind_blob(q, i + 1, v, a->lengths[i], SQLITE_STATIC);
    else
      rc = sqlite3_bind_text(q, i + 1, v, -1, SQLITE_STATIC);
  }
  if (rc == SQLITE_OK) {
    while ((rc = sqlite3_step(q)) == SQLITE_ROW) {
    }
  }
  st = rc == SQLITE_DONE ? RESIL_OK : sq_fail(s, c, rc, what);
  sqlite3_reset(q);
  sqlite3_clear_bindings(q);
  if (!cached) sqlite3_finalize(q);
  return st;
}

/* How long lock_unless_known waits for the lock before it looks at the
 * committed state again. */
#define LOOK_AGAIN_MS 10

/* BEGIN IMMEDIATE for a begin or an execute. The write lock is tried
 * without waiting first: if a writer holds it (maybe a completion running
 * an effect) and key exists in the last committed state, rec gets that
 * state and *answered = 1, with no transaction open: a begin on an
 * existing key never waits for an effect. Otherwise (a new key needs the
 * lock) it waits for the lock up to busy_timeout, looking at the committed
 * state again every LOOK_AGAIN_MS: the key may be committed meanwhile by a
 * writer that then keeps the lock for its effect (a begin and its
 * completion), and that is then the answer. */
static resil_status lock_unless_known(resil_store *s, sq_conn *c, const char *key,
                                      resil_op_record *rec, int *answered) {
  sqlite3_stmt *q = NULL;
  resil_status st = stmt(s, c, Q_BEGIN, &q);
  if (st) return st;
  int64_t deadline = mono_ms() + s->busy_timeout_ms;
  int wait_ms = 0;
  int rc;
  for (;;) {
    sqlite3_busy_timeout(c->db, wait_ms);
    rc = sqlite3_step(q);
    stmt_done(q);
    if ((rc & 0xff) != SQLITE_BUSY) break;
    int found = 0;
    if ((st = sq_read_answer(s, c, key, rec, &found))) break;
    if (found) {
      *answered = 1;
      break;
    }
    int64_t left = deadline - mono_ms();
    if (left <= 0) break;
    wait_ms = (int)(left < LOOK_AGAIN_MS ? left : LOOK_AGAIN_MS);
  }
  sqlite3_busy_timeout(c->db, (int)s->busy_timeout_ms);
  if (st || *answered) return st;
  return rc == SQLITE_DONE ? RESIL_OK : sq_fail(s, c, rc, "BEGIN IMMEDIATE");
}

/* In a write transaction: INSERT ... ON CONFLICT DO NOTHING of in->key as
 * PENDING; *inserted says whether this call made the row. */
static resil_status insert_pending(resil_store *s, sq_conn *c, const resil__op_input *in,
                                   int *inserted) {
  sqlite3_stmt *q = NULL;
  resil_status st = stmt(s, c, Q_INSERT, &q);
  if (st) return st;
  sqlite3_bind_text(q, 1, in->key, -1, SQLITE_STATIC);
  sqlite3_bind_blob(q, 2, in->fingerprint, 32, SQLITE_STATIC);
  sqlite3_bind_text(q, 3, in->req->method, (int)in->method_len, SQLITE_STATIC);
  sqlite3_bind_text64(q, 4, in->req->path, in->path_len, SQLITE_STATIC, SQLITE_UTF8);
  bind_blob(q, 5, in->req->body, in->req->body_len);
  sqlite3_bind_int64(q, 6, in->now_ms);
  if ((st = run(s, c, q, "insert"))) return st;
  *inserted = sqlite3_changes(c->db) == 1;
  return RESIL_OK;
}

/* resil_store_execute's one transaction: the write lock as a begin takes
 * it (an existing key is not waited for: *inserted = 0, nothing open), then
 * the insert; the transaction stays open for the effect and the terminal
 * state, committed under synchronous=FULL (sq_ready put the connection back
 * at FULL when a begin had left it at NORMAL). */
static resil_status sq_insert_locked(resil_store *s, void *conn, const resil__op_input *in,
                                     int *inserted) {
  resil_op_record known;
  resil_op_record_init(&known);
  int answered = 0;
  resil_status st = lock_unless_known(s, conn, in->key, &known, &answered);
  resil_op_record_clear(&known);
  if (st || answered) return st;
  return insert_pending(s, conn, in, inserted);
}

static resil_status sq_begin(resil_store *s, void *conn, const resil__op_input *in,
                             int *inserted, int *counted, resil_op_record *rec) {
  sq_conn *c = conn;
  sqlite3_stmt *q = NULL;
  resil_status st = sq_begin_sync(s, c);
  int answered = 0;
  if (!st) st = lock_unless_known(s, c, in->key, rec, &answered);
  if (st) return st;
  if (answered) {
    *counted = 0;
    return RESIL_OK;
  }

  /* Under the lock: insert unless the key exists (one statement for a new
   * key, the common case); an existing row is read and its attempt
   * counted. */
  if ((st = insert_pending(s, c, in, inserted))) goto fail;
  if (!*inserted) {
    int found = 0;
    if ((st = sq_read_row(s, c, in->key, rec, &found))) goto fail;
    if (!found) {
      st = resil__store_fail(s, RESIL_EIO, NULL,
                             "insert: '%s' neither inserted nor found", in->key);
      goto fail;
    }
    if ((st = stmt(s, c, Q_BUMP, &q))) goto fail;
    sqlite3_bind_text(q, 1, in->key, -1, SQLITE_STATIC);
    if ((st = run(s, c, q, "count the attempt"))) goto fail;
    if (rec->attempts < UINT32_MAX) rec->attempts++;
    *counted = 1;
  }
  if ((st = sq_txn_commit(s, c))) goto fail;
  return RESIL_OK;
fail:
  sq_txn_rollback(s, c);
  return st;
}

static resil_status sq_write_terminal(resil_store *s, void *conn, const char *key,
                                      const resil_op_response *resp, int64_t now_ms) {
  sq_conn *c = conn;
  sqlite3_stmt *q = NULL;
  resil_status st = stmt(s, c, Q_TERMINAL, &q);
  if (st) return st;
  sqlite3_bind_text(q, 1, key, -1, SQLITE_STATIC);
  sqlite3_bind_int(q, 2, resp->failed ? RESIL_OP_FAILED : RESIL_OP_COMMITTED);
  sqlite3_bind_int(q, 3, resp->status);
  bind_blob(q, 4, resp->headers, resp->headers_len);
  bind_blob(q, 5, resp->body, resp->body_len);
  sqlite3_bind_int64(q, 6, now_ms);
  if ((st = run(s, c, q, "write the terminal state"))) return st;
  if (sqlite3_changes(c->db) != 1)
    return resil__store_fail(s, RESIL_EIO, NULL,
                             "write the terminal state: '%s' is no longer PENDING", key);
  return RESIL_OK;
}

static resil_status sq_list_pending(resil_store *s, void *conn, int64_t cutoff,
                                    uint32_t max, resil__keylist *out) {
  sq_conn *c = conn;
  sqlite3_stmt *q = NULL;
  resil_status st = sq_check_file(s, c);
  if (!st) st = stmt(s, c, Q_LIST, &q);
  if (st) return st;
  sqlite3_bind_int64(q, 1, cutoff);
  sqlite3_bind_int64(q, 2, max);
  int rc;
  while ((rc = sqlite3_step(q)) == SQLITE_ROW) {
    const char *k = (const char *)sqlite3_column_text(q, 0);
    if (!k) {
      rc = SQLITE_NOMEM;
      break;
    }
    if ((st = resil__keylist_add(s, out, k, (size_t)sqlite3_column_bytes(q, 0)))) {
      stmt_done(q);
      return st;
    }
  }
  if (rc != SQLITE_DONE) st = sq_fail(s, c, rc, "list pending operations");
  stmt_done(q);
  return st;
}

static resil_status sq_count_pending(resil_store *s, void *conn, uint64_t *n) {
  sq_conn *c = conn;
  sqlite3_stmt *q = NULL;
  resil_status st = sq_check_file(s, c);
  if (!st) st = stmt(s, c, Q_PENDING, &q);
  if (st) return st;
  int rc = sqlite3_step(q);
  if (rc == SQLITE_ROW)
    *n = (uint64_t)sqlite3_column_int64(q, 0);
  else
    st = sq_fail(s, c, rc, "count pending operations");
  stmt_done(q);
  return st;
}

static resil_status sq_touch(resil_store *s, void *conn, const char *key, int64_t now_ms) {
  sq_conn *c = conn;
  sqlite3_stmt *q = NULL;
  resil_status st = sq_check_file(s, c);
  if (!st) st = stmt(s, c, Q_TOUCH, &q);
  if (st) return st;
  sqlite3_bind_text(q, 1, key, -1, SQLITE_STATIC);
  sqlite3_bind_int64(q, 2, now_ms);
  return run(s, c, q, "postpone a failed recovery");
}

static resil_status sq_sweep(resil_store *s, void *conn, int64_t cutoff,
                             uint32_t max, uint32_t *deleted) {
  sq_conn *c = conn;
  sqlite3_stmt *q = NULL;
  resil_status st = sq_check_file(s, c);
  if (!st) st = stmt(s, c, Q_SWEEP, &q);
  if (st) return st;
  sqlite3_bind_int64(q, 1, cutoff);
  sqlite3_bind_int64(q, 2, max);
  if ((st = run(s, c, q, "delete expired operations"))) return st;
  *deleted = (uint32_t)sqlite3_changes(c->db);
  return RESIL_OK;
}

const resil__store_backend resil__store_sqlite = {
    .name = "sqlite",
    .connect = sq_connect,
    .disconnect = sq_disconnect,
    .ready = sq_ready,
    .begin = sq_begin,
    .insert_locked = sq_insert_locked,
    .txn_begin = sq_txn_begin,
    .lock_row = sq_lock_row,
    .write_terminal = sq_write_terminal,
    .txn_commit = sq_txn_commit,
    .txn_rollback = sq_txn_rollback,
    .txn_open = sq_txn_open,
    .txn_fill = sq_txn_fill,
    .txn_exec = sq_txn_exec,
    .read_row = sq_read_answer,
    .list_pending = sq_list_pending,
    .count_pending = sq_count_pending,
    .touch = sq_touch,
    .sweep = sq_sweep,
};
