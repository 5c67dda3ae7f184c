/* Helpers shared by test_store.c and test_store_mt.c: one environment per
 * backend (a fresh SQLite file in a mkdtemp directory, or a fresh schema in
 * the PostgreSQL database named by RESIL_TEST_PG_URI), a side connection for
 * the tests' own SQL, and an effect that writes a row into a side table
 * `effects` in the store's transaction, so that tests count real committed
 * effects rather than callback invocations. */
#ifndef RESIL_TEST_STORE_COMMON_H
#define RESIL_TEST_STORE_COMMON_H

#include <errno.h>
#include <libpq-fe.h>
#include <sqlite3.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "resil/store.h"
#include "test_util.h"

#define TS_UNUSED __attribute__((unused))
#define NS_PER_S INT64_C(1000000000)

typedef enum ts_backend { TS_SQLITE = 0, TS_PG = 1 } ts_backend;

static const char *const ts_backend_names[] = {"sqlite", "postgresql"};

/* The PostgreSQL server to test against, or NULL: then the PostgreSQL cases
 * are skipped (scripts/pg-start.sh prints a URI to put here). */
TS_UNUSED static const char *ts_pg_base(void) {
  const char *u = getenv("RESIL_TEST_PG_URI");
  return u && *u ? u : NULL;
}

TS_UNUSED static int ts_available(ts_backend bk) {
  return bk == TS_SQLITE || ts_pg_base() != NULL;
}

/* What one run of a store test covers: argv[1] "sqlite" (the backend-
 * independent and SQLite cases), "postgresql" (the PostgreSQL cases), or
 * nothing (everything). ctest runs the two halves as two tests (NAME and
 * NAME_pg), so that the summary shows the PostgreSQL half as skipped. */
typedef struct ts_run {
  int sqlite, pg;
} ts_run;

#define TS_SKIP_RETURN_CODE 77 /* ctest SKIP_RETURN_CODE of the _pg tests */

TS_UNUSED static int ts_run_parse(int argc, char **argv, ts_run *r) {
  r->sqlite = r->pg = 1;
  if (argc < 2) return 0;
  if (strcmp(argv[1], "sqlite") == 0) {
    r->pg = 0;
  } else if (strcmp(argv[1], "postgresql") == 0) {
    r->sqlite = 0;
  } else {
    fprintf(stderr, "usage: %s [sqlite|postgresql]\n", argv[0]);
    return -1;
  }
  return 0;
}

/* Before the PostgreSQL cases: 0 to run them (each skips itself when there
 * is no server), else the exit status of the run. Without a server they
 * are skipped, and said so -- except under CI=true, where a missing server
 * is a failure (scripts/test.sh starts one). */
TS_UNUSED static int ts_pg_gate(const ts_run *r) {
  if (ts_pg_base()) return 0;
  const char *ci = getenv("CI");
  if (ci && strcmp(ci, "true") == 0) {
    printf("FAILED: CI=true but RESIL_TEST_PG_URI is not set: the PostgreSQL "
           "store cases cannot run (scripts/test.sh starts a server)\n");
    fflush(stdout);
    return 1;
  }
  printf("SKIPPED: RESIL_TEST_PG_URI is not set: the PostgreSQL store cases "
         "are skipped (start a server with scripts/pg-start.sh)\n");
  fflush(stdout);
  /* Alone (the _pg ctest entry), the whole run is a skip; within a full run
   * the cases still go through cmocka, which lists each as SKIPPED. */
  return r->sqlite ? 0 : TS_SKIP_RETURN_CODE;
}

typedef struct ts_env {
  ts_backend bk;
  char dir[256];    /* SQLite: the temporary directory */
  char path[320];   /* SQLite: the database file */
  char schema[64];  /* PostgreSQL: this environment's schema and app name */
  char uri[1200];   /* what resil_store_open gets */
  PGconn *admin;    /* PostgreSQL: side connection (search_path = schema) */
} ts_env;

TS_UNUSED static void ts_exec(ts_env *e, const char *sql) {
  if (e->bk == TS_SQLITE) {
    sqlite3 *db = NULL;
    assert_int_equal(sqlite3_open(e->path, &db), SQLITE_OK);
    sqlite3_busy_timeout(db, 10000);
    char *msg = NULL;
    int rc = sqlite3_exec(db, sql, NULL, NULL, &msg);
    if (rc != SQLITE_OK) fail_msg("sqlite side SQL '%s': %s", sql, msg ? msg : "?");
    sqlite3_close(db);
  } else {
    PGresult *r = PQexec(e->admin, sql);
    ExecStatusType st = PQresultStatus(r);
    if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK)
      fail_msg("pg side SQL '%s': %s", sql, PQresultErrorMessage(r));
    PQclear(r);
  }
}

/* The one integer a side query returns. */
TS_UNUSED static long ts_query_long(ts_env *e, const char *sql) {
  long v = -1;
  if (e->bk == TS_SQLITE) {
    sqlite3 *db = NULL;
    sqlite3_stmt *q = NULL;
    assert_int_equal(sqlite3_open(e->path, &db), SQLITE_OK);
    sqlite3_busy_timeout(db, 10000);
    if (sqlite3_prepare_v2(db, sql, -1, &q, NULL) != SQLITE_OK)
      fail_msg("sqlite side query '%s': %s", sql, sqlite3_errmsg(db));
    assert_int_equal(sqlite3_step(q), SQLITE_ROW);
    v = (long)sqlite3_column_int64(q, 0);
    sqlite3_finalize(q);
    sqlite3_close(db);
  } else {
    PGresult *r = PQexec(e->admin, sql);
    if (PQresultStatus(r) != PGRES_TUPLES_OK || PQntuples(r) != 1)
      fail_msg("pg side query '%s': %s", sql, PQresultErrorMessage(r));
    v = strtol(PQgetvalue(r, 0, 0), NULL, 10);
    PQclear(r);
  }
  return v;
}

/* Committed effects of one key. */
TS_UNUSED static long ts_effects(ts_env *e, const char *key) {
  char sql[400];
  snprintf(sql, sizeof sql, "SELECT count(*) FROM effects WHERE key = '%s'", key);
  return ts_query_long(e, sql);
}

TS_UNUSED static long ts_all_effects(ts_env *e) {
  return ts_query_long(e, "SELECT count(*) FROM effects");
}

/* A fresh environment; `tag` goes into names to tell runs apart. */
TS_UNUSED static void ts_env_setup(ts_env *e, ts_backend bk, const char *tag) {
  static atomic_int seq;
  memset(e, 0, sizeof *e);
  e->bk = bk;
  int n = atomic_fetch_add(&seq, 1);
  if (bk == TS_SQLITE) {
    snprintf(e->dir, sizeof e->dir, "%s/resil-store-%s-XXXXXX",
             getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp", tag);
    if (!mkdtemp(e->dir)) fail_msg("mkdtemp: %s", strerror(errno));
    snprintf(e->path, sizeof e->path, "%s/ops.db", e->dir);
    snprintf(e->uri, sizeof e->uri, "sqlite:%s", e->path);
  } else {
    const char *base = ts_pg_base();
    snprintf(e->schema, sizeof e->schema, "rt_%s_%ld_%d", tag, (long)getpid(), n);
    snprintf(e->uri, sizeof e->uri, "%s%coptions=-csearch_path%%3D%s&application_name=%s",
             base, strchr(base, '?') ? '&' : '?', e->schema, e->schema);
    e->admin = PQconnectdb(e->uri);
    if (PQstatus(e->admin) != CONNECTION_OK)
      fail_msg("cannot connect to %s: %s", e->uri, PQerrorMessage(e->admin));
    PGresult *r = PQexec(e->admin, "SET client_min_messages = warning");
    PQclear(r);
    char sql[200];
    snprintf(sql, sizeof sql, "DROP SCHEMA IF EXISTS %s CASCADE", e->schema);
    ts_exec(e, sql);
    snprintf(sql, sizeof sql, "CREATE SCHEMA %s", e->schema);
    ts_exec(e, sql);
  }
  ts_exec(e, "CREATE TABLE effects (key TEXT NOT NULL, n INTEGER NOT NULL)");
}

TS_UNUSED static void ts_env_teardown(ts_env *e) {
  if (e->bk == TS_SQLITE) {
    if (!e->dir[0]) return;
    const char *suffix[] = {"", "-wal", "-shm", "-journal"};
    char p[400];
    for (size_t i = 0; i < sizeof suffix / sizeof *suffix; i++) {
      snprintf(p, sizeof p, "%s%s", e->path, suffix[i]);
      unlink(p);
    }
    rmdir(e->dir);
    e->dir[0] = '\0';
  } else if (e->admin) {
    char sql[200];
    snprintf(sql, sizeof sql, "DROP SCHEMA IF EXISTS %s CASCADE", e->schema);
    PGresult *r = PQexec(e->admin, sql);
    PQclear(r);
    PQfinish(e->admin);
    e->admin = NULL;
  }
}

/* SQL on the effect's own connection and transaction. */
TS_UNUSED static resil_status ts_txn_exec(resil_store_txn *tx, const char *sql,
                                          const char *key) {
  sqlite3 *db = resil_store_txn_sqlite(tx);
  PGconn *pg = resil_store_txn_pg(tx);
  if (db) {
    sqlite3_stmt *q = NULL;
    if (sqlite3_prepare_v2(db, sql, -1, &q, NULL) != SQLITE_OK) return RESIL_EIO;
    if (key && sqlite3_bind_parameter_count(q) >= 1)
      sqlite3_bind_text(q, 1, key, -1, SQLITE_TRANSIENT);
    int rc;
    while ((rc = sqlite3_step(q)) == SQLITE_ROW) {
    }
    sqlite3_finalize(q);
    return rc == SQLITE_DONE ? RESIL_OK : RESIL_EIO;
  }
  if (pg) {
    const char *vals[1] = {key};
    PGresult *r = key ? PQexecParams(pg, sql, 1, NULL, vals, NULL, NULL, 0)
                      : PQexec(pg, sql);
    ExecStatusType st = PQresultStatus(r);
    PQclear(r);
    return st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK ? RESIL_OK : RESIL_EIO;
  }
  return RESIL_EMISUSE;
}

/* What the test effect does. Zero-initialise, then set what differs. */
typedef struct ts_effect {
  atomic_int calls;
  resil_status ret;     /* returned after the insert (RESIL_OK: succeed) */
  const char *fail_key; /* with ret: fail only for this key */
  int status;           /* response status; 0 means 201 */
  const char *headers;
  size_t headers_len;
  const void *body;
  size_t body_len;
  int failed;
  int end_txn;   /* misuse: COMMIT the store's transaction */
  PGconn *kill_first; /* PostgreSQL: the first call has this side connection
                         terminate the effect's own backend, then fails */
  int fill_disk; /* SQLite: forbid the file to grow after the insert */
} ts_effect;

TS_UNUSED static resil_status ts_effect_fn(void *user, resil_store_txn *tx,
                                           const resil_op_record *pending,
                                           resil_op_response *out) {
  ts_effect *e = user;
  int call = atomic_fetch_add(&e->calls, 1);
  if (pending->state != RESIL_OP_PENDING) return RESIL_ESTATE;
  if (e->kill_first && call == 0 && resil_store_txn_pg(tx)) {
    char sql[96];
    snprintf(sql, sizeof sql, "SELECT pg_terminate_backend(%d, 5000)",
             PQbackendPID(resil_store_txn_pg(tx)));
    PGresult *r = PQexec(e->kill_first, sql);
    PQclear(r);
  }
  const char *ins = resil_store_txn_sqlite(tx)
                        ? "INSERT INTO effects (key, n) VALUES (?1, 1)"
                        : "INSERT INTO effects (key, n) VALUES ($1, 1)";
  resil_status st = ts_txn_exec(tx, ins, pending->key);
  if (st) return st;
  if (e->ret && (!e->fail_key || strcmp(e->fail_key, pending->key) == 0)) return e->ret;
  if (e->end_txn) ts_txn_exec(tx, "COMMIT", NULL);
  if (e->fill_disk) {
    sqlite3 *db = resil_store_txn_sqlite(tx);
    sqlite3_stmt *q = NULL;
    sqlite3_prepare_v2(db, "PRAGMA page_count", -1, &q, NULL);
    sqlite3_step(q);
    long pages = (long)sqlite3_column_int64(q, 0);
    sqlite3_finalize(q);
    char sql[64];
    snprintf(sql, sizeof sql, "PRAGMA max_page_count = %ld", pages);
    ts_txn_exec(tx, sql, NULL);
  }
  out->status = e->status ? e->status : 201;
  out->headers = e->headers;
  out->headers_len = e->headers_len;
  out->body = e->body;
  out->body_len = e->body_len;
  out->failed = e->failed;
  return RESIL_OK;
}

TS_UNUSED static resil_op_request ts_req(const char *method, const char *path,
                                         const char *body) {
  resil_op_request r = {.struct_size = sizeof(resil_op_request), .method = method, .path = path, .body = body,
                        .body_len = body ? strlen(body) : 0};
  return r;
}

#endif
