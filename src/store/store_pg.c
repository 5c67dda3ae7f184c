/* The server backend: PostgreSQL through libpq, for several instances
 * sharing one store. One PGconn per pool slot.
 *
 * begin inserts with INSERT ... ON CONFLICT DO NOTHING (the unique key orders
 * concurrent inserts: exactly one of them inserts). A completion locks the
 * row with SELECT ... FOR UPDATE in the transaction that runs the effect and
 * writes the terminal state, so a second completer (another request, another
 * instance, recovery) waits for the first and then sees the terminal state.
 * lock_timeout (from busy_timeout) bounds every lock wait: SQLSTATE 55P03
 * becomes RESIL_ETIMEDOUT. A lost connection (pg_lost) is re-established by
 * pg_ready; store.c then runs the failed call's transaction once more.
 *
 * Round trips: the statements are prepared once per session (on first use)
 * and run with PQexecPrepared; where libpq pipelines (libpq 14+), BEGIN and
 * the row lock go in one round trip, and so do the terminal state and
 * COMMIT: a new key's operation takes begin's INSERT, BEGIN+lock, the
 * effect's own statements, terminal+COMMIT. With effects_in_store, begin's
 * INSERT is pipelined behind set_config('synchronous_commit', 'off', true)
 * in one implicit transaction, still one round trip (pg_insert_unflushed).
 * resil_store_execute saves one more: with effects_in_store, BEGIN and the
 * INSERT open the one transaction (pg_insert_locked); by default the
 * INSERT goes in its own BEGIN ... COMMIT, pipelined with BEGIN and the row
 * lock behind one Sync (pg_insert_then_lock).
 * The effect's resil_store_txn_exec statements are queued in the pipeline
 * and sent with the terminal state and COMMIT (pg_txn_exec, pg_then_commit):
 * an effect made of them adds no round trip.
 * The statement names are
 * "resil_store_<n>", and "resil_store_e<i>" for the effect's statement texts
 * (pg_slot.esql); an effect that DEALLOCATEs them
 * makes its completion fail (rolled back, still PENDING), and the next call
 * prepares them again.
 *
 * Results are requested in binary format: bytea columns arrive as raw bytes
 * and integers as big-endian words, with no text escaping either way. */
#include <libpq-fe.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/redact.h"
#include "store/store_int.h"

#define COLUMNS                                                                \
  "key, state, fingerprint, method, path, request_body, status, headers, "    \
  "body, created_ms, updated_ms, attempts"

/* Schema version 1. A new version appends a migration step to migrate(). */
#define SCHEMA_VERSION 1
static const char schema_v1[] =
    "CREATE TABLE resil_operations ("
    " key TEXT COLLATE \"C\" PRIMARY KEY,"
    " state INT NOT NULL CHECK (state IN (1, 2, 3)),"
    " fingerprint BYTEA NOT NULL,"
    " method TEXT NOT NULL,"
    " path TEXT NOT NULL,"
    " request_body BYTEA NOT NULL,"
    " status INT,"
    " headers BYTEA,"
    " body BYTEA,"
    " created_ms BIGINT NOT NULL,"
    " updated_ms BIGINT NOT NULL,"
    " attempts BIGINT NOT NULL);"
    "CREATE INDEX resil_operations_state_age ON resil_operations (state, updated_ms);"
    "INSERT INTO resil_schema (version) VALUES (1);";

/* Serialises concurrent migrations of one database ("resil-st"). */
#define MIGRATION_LOCK "8243160126213387636"

#define SELECT_ROW "SELECT " COLUMNS " FROM resil_operations WHERE key = $1"

/* The statements of the hot paths, prepared once per session (on first use:
 * PQprepare, then PQexecPrepared), as "resil_store_<index>". */
enum {
  Q_INSERT,
  Q_READ,
  Q_LOCK,
  Q_LOCK_SKIP,
  Q_BUMP,
  Q_TERMINAL,
  Q_LIST,
  Q_COUNT_PENDING,
  Q_TOUCH,
  Q_SWEEP,
  Q_ASYNC,
  Q_N
};

static const char *const stmt_sql[Q_N] = {
    [Q_INSERT] = "INSERT INTO resil_operations (key, state, fingerprint, method, "
                 "path, request_body, created_ms, updated_ms, attempts) "
                 "VALUES ($1, 1, $2, $3, $4, $5, $6, $6, 1) "
                 "ON CONFLICT (key) DO NOTHING",
    [Q_READ] = SELECT_ROW,
    [Q_LOCK] = SELECT_ROW " FOR UPDATE",
    [Q_LOCK_SKIP] = SELECT_ROW " FOR UPDATE SKIP LOCKED",
    [Q_BUMP] = "UPDATE resil_operations SET attempts = attempts + 1 WHERE key = $1",
    /* The terminal state; a row that is no longer PENDING (nothing updated)
     * is a division by zero, SQLSTATE 22012, which aborts the transaction:
     * a COMMIT pipelined behind it cannot commit the effect alone. */
    [Q_TERMINAL] = "WITH u AS (UPDATE resil_operations SET state = $2, status = $3, "
                   "headers = $4, body = $5, updated_ms = $6 "
                   "WHERE key = $1 AND state = 1 RETURNING 1) "
                   "SELECT 1 / (SELECT count(*)::int FROM u)",
    [Q_LIST] = "SELECT key FROM resil_operations WHERE state = 1 AND "
               "updated_ms <= $1 ORDER BY updated_ms, key LIMIT $2",
    /* Text, not the binary int8 the binary result format would give. */
    [Q_COUNT_PENDING] = "SELECT count(*)::text FROM resil_operations WHERE state = 1",
    [Q_TOUCH] = "UPDATE resil_operations SET updated_ms = $2 WHERE key = $1 AND state = 1",
    /* SKIP LOCKED: a row someone is reading under lock (a begin counting an
     * attempt) is left for the next sweep instead of waiting for it. */
    [Q_SWEEP] = "DELETE FROM resil_operations WHERE key IN (SELECT key FROM "
                "resil_operations WHERE state IN (2, 3) AND updated_ms <= $1 "
                "ORDER BY updated_ms LIMIT $2 FOR UPDATE SKIP LOCKED)",
    /* effects_in_store: the current transaction commits without waiting
     * for its WAL flush (set_config's is_local: this transaction only). */
    [Q_ASYNC] = "SELECT set_config('synchronous_commit', 'off', true)",
};

/* Results the effect's pipeline holds at most before pg_txn_exec settles
 * it (a Prepare and its statement take two). */
#define PG_QUEUE_MAX 64

typedef struct pg_slot {
  PGconn *conn;
  unsigned prepared; /* bit q: stmt_sql[q] is prepared in this session */
  /* resil_store_txn_exec's statement texts, prepared as resil_store_e<i>:
   * bit i of eprepared once the session has it, of epending while its
   * Prepare is queued. A text stays once it prepared (never evicted). */
  char *esql[RESIL_STORE_EXEC_CACHE];
  unsigned eprepared, epending;
  /* The effect's pipeline: qkind[0..nq) says what each queued result is
   * (-1 - i: the Prepare of esql[i]; n > 0: the effect's statement n). */
  int nq;
  int qkind[PG_QUEUE_MAX];
  resil_status qfail; /* the first of them that failed (this transaction) */
  /* A statement of ours was found missing (SQLSTATE 26000: an effect
   * deallocated it): the connection's next pg_ready asks the session which
   * are left (pg_recheck). */
  int recheck;
} pg_slot;

static void quiet_notices(void *arg, const char *message) {
  (void)arg;
  (void)message;
}

/* libpq's message m for ours: without its final newline (ours have none),
 * and redacted: libpq may quote the URI or a part of it (a URI it cannot
 * parse, an invalid percent-encoded token of the password), so the
 * userinfo of any URL in it, secret-looking name=value pairs, and every
 * secret of the store's own URI (its password, raw or decoded, wherever
 * it appears) are replaced; control bytes are escaped. */
static const char *trimmed(const resil_store *s, const char *m, char *buf, size_t n) {
  if (!m || !*m) m = "no message from libpq";
  size_t len = strlen(m);
  while (len && (m[len - 1] == '\n' || m[len - 1] == ' ')) len--;
  resil__redact_excerpt(buf, n, m, len, RESIL__REDACT_MESSAGE, s->target);
  return buf;
}

/* Maps a failed result (or a failure to get one) to a status. */
static resil_status pg_fail(resil_store *s, pg_slot *c, const PGresult *r,
                            const char *what) {
  char buf[300];
  const char *m = r ? PQresultErrorMessage(r) : NULL;
  if (!m || !*m) m = PQerrorMessage(c->conn);
  trimmed(s, m, buf, sizeof buf);
  if (PQstatus(c->conn) != CONNECTION_OK)
    return resil__store_fail(s, RESIL_EIO, NULL, "%s: connection lost: %s", what, buf);
  const char *state = r ? PQresultErrorField(r, PG_DIAG_SQLSTATE) : NULL;
  /* A prepared statement gone (an effect ran DEALLOCATE): this statement
   * fails; the connection's next use finds out which ones to prepare again
   * (all of them after DEALLOCATE ALL, only the missing ones otherwise: to
   * prepare one still there would fail with "already exists"). */
  if (state && strcmp(state, "26000") == 0) c->recheck = 1;
  if (state && (strcmp(state, "55P03") == 0 || strcmp(state, "57014") == 0))
    return resil__store_fail(s, RESIL_ETIMEDOUT, NULL,
                             "%s: row locked beyond busy_timeout (%lld ms): %s", what,
                             (long long)s->busy_timeout_ms, buf);
  return resil__store_fail(s, RESIL_EIO, NULL, "%s: %s (SQLSTATE %s)", what, buf,
                           state ? state : "none");
}

/* The result r of a statement: RESIL_OK and *out = r (or cleared when out
 * is NULL) when its status is `want`, else the failure (pg_fail). */
static resil_status pg_result(resil_store *s, pg_slot *c, PGresult *r, ExecStatusType want,
                              PGresult **out, const char *what) {
  if (!r || PQresultStatus(r) != want) {
    resil_status st = pg_fail(s, c, r, what);
    PQclear(r);
    return st;
  }
  if (out)
    *out = r;
  else
    PQclear(r);
  return RESIL_OK;
}

/* Runs a command; *out (may be NULL) gets the result when it has the
 * expected status, otherwise the failure is reported. */
static resil_status pg_run(resil_store *s, pg_slot *c, const char *sql, int n,
                           const char *const *vals, const int *lens,
                           const int *fmts, ExecStatusType want, PGresult **out,
                           const char *what) {
  PGresult *r = n ? PQexecParams(c->conn, sql, n, NULL, vals, lens, fmts, 1)
                  : PQexecParams(c->conn, sql, 0, NULL, NULL, NULL, NULL, 1);
  return pg_result(s, c, r, want, out, what);
}

/* Prepares stmt_sql[q] in this session unless it already is. */
static resil_status pg_prepare(resil_store *s, pg_slot *c, int q, char *name, size_t n) {
  snprintf(name, n, "resil_store_%d", q);
  if (c->prepared & (1u << q)) return RESIL_OK;
  PGresult *r = PQprepare(c->conn, name, stmt_sql[q], 0, NULL);
  if (!r || PQresultStatus(r) != PGRES_COMMAND_OK) {
    resil_status st = pg_fail(s, c, r, "prepare");
    PQclear(r);
    return st;
  }
  PQclear(r);
  c->prepared |= 1u << q;
  return RESIL_OK;
}

/* pg_run for the prepared statement q. */
static resil_status pg_run_q(resil_store *s, pg_slot *c, int q, int n,
                             const char *const *vals, const int *lens, const int *fmts,
                             ExecStatusType want, PGresult **out, const char *what) {
  char name[32];
  resil_status st = pg_prepare(s, c, q, name, sizeof name);
  if (st) return st;
  return pg_result(s, c, PQexecPrepared(c->conn, name, n, vals, lens, fmts, 1), want, out,
                   what);
}

static resil_status pg_cmd(resil_store *s, pg_slot *c, const char *sql, const char *what) {
  return pg_run(s, c, sql, 0, NULL, NULL, NULL, PGRES_COMMAND_OK, NULL, what);
}

/* Copies result row 0 into rec. */
static resil_status pg_row(resil_store *s, const PGresult *r, resil_op_record *rec) {
  if (PQnfields(r) != 12 || PQgetlength(r, 0, 1) != 4 || PQgetlength(r, 0, 9) != 8 ||
      PQgetlength(r, 0, 10) != 8 || PQgetlength(r, 0, 11) != 8 ||
      (!PQgetisnull(r, 0, 6) && PQgetlength(r, 0, 6) != 4))
    return resil__store_fail(s, RESIL_EIO, NULL,
                             "read: the resil_operations table has unexpected column types");
  resil__row row;
  memset(&row, 0, sizeof row);
  row.key = PQgetvalue(r, 0, 0);
  row.key_len = (size_t)PQgetlength(r, 0, 0);
  row.state = resil__be32((const unsigned char *)PQgetvalue(r, 0, 1));
  row.fingerprint = (const unsigned char *)PQgetvalue(r, 0, 2);
  row.fingerprint_len = (size_t)PQgetlength(r, 0, 2);
  row.method = PQgetvalue(r, 0, 3);
  row.method_len = (size_t)PQgetlength(r, 0, 3);
  row.path = PQgetvalue(r, 0, 4);
  row.path_len = (size_t)PQgetlength(r, 0, 4);
  row.request_body = PQgetvalue(r, 0, 5);
  row.request_body_len = (size_t)PQgetlength(r, 0, 5);
  row.has_response = !PQgetisnull(r, 0, 6);
  if (row.has_response) {
    row.status = resil__be32((const unsigned char *)PQgetvalue(r, 0, 6));
    row.headers = PQgetvalue(r, 0, 7);
    row.headers_len = (size_t)PQgetlength(r, 0, 7);
    row.body = PQgetvalue(r, 0, 8);
    row.body_len = (size_t)PQgetlength(r, 0, 8);
  }
  row.created_ms = resil__be64((const unsigned char *)PQgetvalue(r, 0, 9));
  row.updated_ms = resil__be64((const unsigned char *)PQgetvalue(r, 0, 10));
  row.attempts = resil__be64((const unsigned char *)PQgetvalue(r, 0, 11));
  return resil__rec_set(s, rec, &row);
}

/* Reads the row of key with the given locking clause ("" for a plain
 * read). */
static resil_status pg_select(resil_store *s, pg_slot *c, const char *key, int q,
                              resil_op_record *rec, int *found, const char *what) {
  const char *vals[1] = {key};
  PGresult *r = NULL;
  resil_status st = pg_run_q(s, c, q, 1, vals, NULL, NULL, PGRES_TUPLES_OK, &r, what);
  if (st) return st;
  *found = PQntuples(r) > 0;
  if (*found) st = pg_row(s, r, rec);
  PQclear(r);
  return st;
}

/* ---- connections and the schema ------------------------------------------- */

static resil_status session_setup(resil_store *s, pg_slot *c) {
  c->prepared = 0; /* a new session has none */
  c->eprepared = c->epending = 0;
  c->nq = 0;
  c->recheck = 0;
  PQsetNoticeProcessor(c->conn, quiet_notices, NULL);
  /* PostgreSQL's lock_timeout 0 means "wait forever"; ours means "do not
   * wait", which 1 ms is closest to. */
  char sql[64];
  long long ms = s->busy_timeout_ms > 0 ? (long long)s->busy_timeout_ms : 1;
  snprintf(sql, sizeof sql, "SET lock_timeout = %lld", ms);
  return pg_cmd(s, c, sql, "set lock_timeout");
}

/* The schema version as stored, 0 when there is no schema yet. */
static resil_status schema_version(resil_store *s, pg_slot *c, int32_t *version) {
  PGresult *r = NULL;
  *version = 0;
  resil_status st = pg_run(s, c, "SELECT to_regclass('resil_schema') IS NOT NULL", 0, NULL,
                           NULL, NULL, PGRES_TUPLES_OK, &r, "read the schema version");
  if (st) return st;
  int exists = PQntuples(r) == 1 && PQgetlength(r, 0, 0) == 1 && PQgetvalue(r, 0, 0)[0];
  PQclear(r);
  if (!exists) return RESIL_OK;
  r = NULL;
  st = pg_run(s, c, "SELECT max(version) FROM resil_schema", 0, NULL, NULL, NULL,
              PGRES_TUPLES_OK, &r, "read the schema version");
  if (st) return st;
  if (PQntuples(r) == 1 && !PQgetisnull(r, 0, 0) && PQgetlength(r, 0, 0) == 4)
    *version = resil__be32((const unsigned char *)PQgetvalue(r, 0, 0));
  PQclear(r);
  return RESIL_OK;
}

static resil_status newer_schema(resil_store *s, int32_t version) {
  return resil__store_fail(s, RESIL_EIO, NULL,
                           "the schema version %d is newer than this library's (%d)",
                           (int)version, SCHEMA_VERSION);
}

/* Creates or upgrades the schema. A current schema needs no lock; otherwise
 * an advisory lock serialises the instances that migrate at once, and the
 * version is read again under it. */
static resil_status migrate(resil_store *s, pg_slot *c) {
  int32_t version = 0;
  resil_status st = schema_version(s, c, &version);
  if (st) return st;
  if (version == SCHEMA_VERSION) return RESIL_OK;
  if (version > SCHEMA_VERSION) return newer_schema(s, version);
  if ((st = pg_cmd(s, c, "BEGIN", "migrate: BEGIN"))) return st;
  if (!(st = pg_run(s, c, "SELECT pg_advisory_xact_lock(" MIGRATION_LOCK ")", 0, NULL,
                    NULL, NULL, PGRES_TUPLES_OK, NULL, "migrate: lock")) &&
      !(st = pg_cmd(s, c, "CREATE TABLE IF NOT EXISTS resil_schema (version INT NOT NULL)",
                    "migrate")) &&
      !(st = schema_version(s, c, &version))) {
    if (version == 0) {
      PGresult *x = PQexec(c->conn, schema_v1);
      if (!x || PQresultStatus(x) != PGRES_COMMAND_OK)
        st = pg_fail(s, c, x, "migrate: create the schema");
      PQclear(x);
    } else if (version > SCHEMA_VERSION) {
      st = newer_schema(s, version);
    }
  }
  if (!st) st = pg_cmd(s, c, "COMMIT", "migrate: COMMIT");
  if (st && PQstatus(c->conn) == CONNECTION_OK &&
      PQtransactionStatus(c->conn) != PQTRANS_IDLE)
    PQclear(PQexec(c->conn, "ROLLBACK"));
  return st;
}

static int pg_lost(void *conn) {
  return PQstatus(((pg_slot *)conn)->conn) != CONNECTION_OK;
}

static void pg_disconnect(resil_store *s, void *conn) {
  pg_slot *c = conn;
  if (!c) return;
  PQfinish(c->conn);
  for (int i = 0; i < RESIL_STORE_EXEC_CACHE; i++) resil__free(s->alloc, c->esql[i]);
  resil__free(s->alloc, c);
}

static resil_status pg_connect(resil_store *s, void **out, int first) {
  pg_slot *c = resil__calloc(s->alloc, sizeof *c);
  if (!c) return resil__store_fail(s, RESIL_ENOMEM, NULL, "out of memory");
  /* Entries before dbname (the URI) are defaults the URI may override. */
  char timeout[24];
  long long secs = (s->busy_timeout_ms + 999) / 1000;
  snprintf(timeout, sizeof timeout, "%lld", secs < 2 ? 2 : secs);
  const char *keys[] = {"connect_timeout", "application_name", "client_encoding",
                        "dbname", NULL};
  const char *vals[] = {timeout, "libresil-store", "UTF8", s->target, NULL};
  c->conn = PQconnectdbParams(keys, vals, 1);
  resil_status st;
  if (!c->conn) {
    st = resil__store_fail(s, RESIL_ENOMEM, NULL, "out of memory connecting");
    goto fail;
  }
  if (PQstatus(c->conn) != CONNECTION_OK) {
    char buf[300];
    st = resil__store_fail(s, RESIL_EIO, NULL, "cannot connect: %s",
                           trimmed(s, PQerrorMessage(c->conn), buf, sizeof buf));
    goto fail;
  }
  if ((st = session_setup(s, c))) goto fail;
  if (first && (st = migrate(s, c))) goto fail;
  *out = c;
  return RESIL_OK;
fail:
  pg_disconnect(s, c);
  return st;
}

/* A slot whose connection was lost is re-established here: by the call that
 * saw the loss (before it retries), or on the slot's next use. */
/* After a 26000 (c->recheck), outside any transaction: which of our
 * statements the session still has; the others are prepared again on
 * their next use. */
static resil_status pg_recheck(resil_store *s, pg_slot *c) {
  if (!c->recheck) return RESIL_OK;
  PGresult *r = PQexec(c->conn, "SELECT name FROM pg_prepared_statements "
                                "WHERE name LIKE 'resil\\_store\\_%'");
  if (!r || PQresultStatus(r) != PGRES_TUPLES_OK) {
    resil_status st = pg_fail(s, c, r, "list the prepared statements");
    PQclear(r);
    return st;
  }
  unsigned have = 0, ehave = 0;
  for (int i = 0; i < PQntuples(r); i++) {
    const char *v = PQgetvalue(r, i, 0) + sizeof "resil_store_" - 1;
    int effect = *v == 'e';
    v += effect;
    char *end = NULL;
    long q = strtol(v, &end, 10);
    if (end == v || *end != '\0' || q < 0) continue;
    if (!effect && q < Q_N) have |= 1u << q;
    if (effect && q < RESIL_STORE_EXEC_CACHE && c->esql[q]) ehave |= 1u << q;
  }
  PQclear(r);
  c->prepared = have;
  c->eprepared = ehave;
  c->recheck = 0;
  return RESIL_OK;
}

/* ---- the effect's statements (resil_store_txn_exec) -------------------------- */

#ifdef LIBPQ_HAS_PIPELINING
static int queued(const pg_slot *c) {
  return PQpipelineStatus(c->conn) != PQ_PIPELINE_OFF;
}

/* Records the failure of the effect's statement no (the first one counts)
 * when s is not NULL (else quietly). */
static void statement_failed(resil_store *s, pg_slot *c, const PGresult *r, int no) {
  if (c->qfail) return;
  if (!s) {
    c->qfail = RESIL_EIO;
    return;
  }
  char what[48];
  snprintf(what, sizeof what, "effect statement %d", no);
  c->qfail = pg_fail(s, c, r, what);
}

/* Reads the results of the c->nq queued items, which a Sync already
 * follows: a Prepare that succeeded marks its text prepared; the first
 * statement that failed sets c->qfail (reported when s is not NULL).
 * Returns 0 when the results did not all come (the connection failed). */
static int read_queued(resil_store *s, pg_slot *c) {
  int ok = 1;
  for (int i = 0; i < c->nq && ok; i++) {
    PGresult *r = PQgetResult(c->conn);
    if (!r || PQresultStatus(r) == PGRES_PIPELINE_SYNC) {
      PQclear(r);
      ok = 0;
      break;
    }
    PGresult *extra; /* up to the NULL that ends this item's results */
    while ((extra = PQgetResult(c->conn)) != NULL) {
      int sync = PQresultStatus(extra) == PGRES_PIPELINE_SYNC;
      PQclear(extra);
      if (sync) ok = 0;
      if (sync) break;
    }
    ExecStatusType t = PQresultStatus(r);
    int k = c->qkind[i];
    if (k < 0) {
      unsigned bit = 1u << (-1 - k);
      c->epending &= ~bit;
      if (t == PGRES_COMMAND_OK) {
        c->eprepared |= bit;
      } else if (t != PGRES_PIPELINE_ABORTED) {
        /* The text does not prepare: its statement (the next item) failed;
         * the slot is freed for another text (kept, unprepared, when
         * discarding quietly: it prepares again on its next use). */
        statement_failed(s, c, r, i + 1 < c->nq ? c->qkind[i + 1] : 0);
        if (s) {
          resil__free(s->alloc, c->esql[-1 - k]);
          c->esql[-1 - k] = NULL;
        }
      }
    } else if (t != PGRES_COMMAND_OK && t != PGRES_TUPLES_OK &&
               t != PGRES_PIPELINE_ABORTED) {
      statement_failed(s, c, r, k);
    }
    PQclear(r);
  }
  c->nq = 0;
  c->epending = 0;
  return ok;
}

static int pipeline_finish(resil_store *s, pg_slot *c, int n, PGresult **res);

/* Sends a Sync after the queued statements, reads their results and the
 * Sync's, and leaves pipeline mode. 1 when all came. */
static int settle(resil_store *s, pg_slot *c) {
  return pipeline_finish(s, c, 0, NULL);
}
#endif

/* txn_settle: the queued statements, sent and waited for: RESIL_OK, the
 * failure of the first that failed, or the connection's. */
static resil_status pg_settle(resil_store *s, void *conn) {
  pg_slot *c = conn;
#ifdef LIBPQ_HAS_PIPELINING
  if (queued(c) && !settle(s, c) && !c->qfail)
    return pg_fail(s, c, NULL, "send the effect's statements");
#else
  (void)s;
#endif
  return c->qfail;
}

/* Drops whatever the effect queued (a rollback follows), quietly. */
static void pg_discard(pg_slot *c) {
#ifdef LIBPQ_HAS_PIPELINING
  if (queued(c)) (void)settle(NULL, c);
#endif
  c->nq = 0;
}

#ifdef LIBPQ_HAS_PIPELINING
/* The cache slot of sql's text (added when there is room), or -1. (Without
 * pipelining the statement runs at once, unnamed.) */
static int exec_slot(resil_store *s, pg_slot *c, const char *sql) {
  int free_slot = -1;
  for (int i = 0; i < RESIL_STORE_EXEC_CACHE; i++) {
    if (!c->esql[i]) {
      if (free_slot < 0) free_slot = i;
    } else if (strcmp(c->esql[i], sql) == 0) {
      return i;
    }
  }
  if (free_slot < 0) return -1;
  int ok = 1;
  c->esql[free_slot] = resil__strdup(s->alloc, sql, &ok);
  return c->esql[free_slot] ? free_slot : -1; /* out of memory: unnamed */
}
#endif

/* txn_exec: the statement is queued in the pipeline (libpq 14+), sent with
 * the terminal state and COMMIT; else it runs now. */
static resil_status pg_txn_exec(resil_store *s, void *conn, const resil__exec_args *a) {
  pg_slot *c = conn;
  int no = a->no;
  char what[48];
  snprintf(what, sizeof what, "effect statement %d", no);
  if (c->qfail) return c->qfail; /* the transaction is aborted already */
#ifdef LIBPQ_HAS_PIPELINING
  if (queued(c) && c->nq + 2 > PG_QUEUE_MAX) {
    resil_status st = pg_settle(s, c);
    if (st) return st;
  }
  if (!queued(c)) {
    if (PQtransactionStatus(c->conn) != PQTRANS_INTRANS)
      return c->qfail = resil__store_fail(s, RESIL_EIO, NULL,
                                          "%s: the transaction is not open (or was aborted "
                                          "by an earlier error)", what);
    if (!PQenterPipelineMode(c->conn)) return c->qfail = pg_fail(s, c, NULL, what);
  }
  int slot = exec_slot(s, c, a->sql);
  int ok = 1;
  char name[32];
  if (slot >= 0) {
    unsigned bit = 1u << slot;
    snprintf(name, sizeof name, "resil_store_e%d", slot);
    if (!(c->eprepared & bit) && !(c->epending & bit)) {
      ok = PQsendPrepare(c->conn, name, a->sql, 0, NULL);
      if (ok) {
        c->epending |= bit;
        c->qkind[c->nq++] = -1 - slot;
      }
    }
    if (ok)
      ok = PQsendQueryPrepared(c->conn, name, a->n, a->values, a->lengths, a->formats, 0);
  } else {
    ok = PQsendQueryParams(c->conn, a->sql, a->n, NULL, a->values, a->lengths, a->formats,
                           0);
  }
  if (!ok) return c->qfail = pg_fail(s, c, NULL, what);
  c->qkind[c->nq++] = no;
  return RESIL_OK;
#else
  PGresult *r = PQexecParams(c->conn, a->sql, a->n, NULL, a->values, a->lengths, a->formats, 0);
  ExecStatusType t = r ? PQresultStatus(r) : PGRES_FATAL_ERROR;
  if (t != PGRES_COMMAND_OK && t != PGRES_TUPLES_OK) c->qfail = pg_fail(s, c, r, what);
  PQclear(r);
  return c->qfail;
#endif
}

static int pg_effect_sql_failed(void *conn) {
  return ((pg_slot *)conn)->qfail != RESIL_OK;
}

static resil_status pg_ready(resil_store *s, void *conn) {
  pg_slot *c = conn;
  pg_discard(c); /* left by a failure between the effect and its commit */
  c->qfail = RESIL_OK;
  PGTransactionStatusType ts = PQtransactionStatus(c->conn);
  if (PQstatus(c->conn) == CONNECTION_OK && ts == PQTRANS_IDLE) return pg_recheck(s, c);
  if (PQstatus(c->conn) == CONNECTION_OK && (ts == PQTRANS_INTRANS || ts == PQTRANS_INERROR)) {
    PGresult *r = PQexec(c->conn, "ROLLBACK");
    int ok = r && PQresultStatus(r) == PGRES_COMMAND_OK;
    PQclear(r);
    if (ok) return pg_recheck(s, c);
  }
  PQreset(c->conn);
  if (PQstatus(c->conn) != CONNECTION_OK) {
    char buf[300];
    return resil__store_fail(s, RESIL_EIO, NULL, "reconnect failed: %s",
                             trimmed(s, PQerrorMessage(c->conn), buf, sizeof buf));
  }
  return session_setup(s, c);
}

/* ---- operations ------------------------------------------------------------ */

static resil_status pg_txn_begin(resil_store *s, void *conn) {
  return pg_cmd(s, conn, "BEGIN", "BEGIN");
}

static resil_status commit_result(resil_store *s, pg_slot *c, const PGresult *r) {
  if (!r || PQresultStatus(r) != PGRES_COMMAND_OK) return pg_fail(s, c, r, "COMMIT");
  /* COMMIT of a failed transaction "succeeds" with the tag ROLLBACK. */
  if (strcmp(PQcmdStatus((PGresult *)r), "COMMIT") != 0)
    return resil__store_fail(s, RESIL_EIO, NULL, "COMMIT: the server rolled back (%s)",
                             PQcmdStatus((PGresult *)r));
  return RESIL_OK;
}

static resil_status pg_txn_commit(resil_store *s, void *conn) {
  pg_slot *c = conn;
  resil_status st = pg_settle(s, c);
  if (st) return st;
  if (PQtransactionStatus(c->conn) != PQTRANS_INTRANS)
    return resil__store_fail(s, RESIL_EIO, NULL,
                             "COMMIT: the transaction was aborted by an earlier error");
  PGresult *r = PQexec(c->conn, "COMMIT");
  st = commit_result(s, c, r);
  PQclear(r);
  return st;
}

static void pg_txn_rollback(resil_store *s, void *conn) {
  (void)s;
  pg_slot *c = conn;
  pg_discard(c);
  c->qfail = RESIL_OK; /* the effect's failure ends with its transaction */
  if (PQstatus(c->conn) == CONNECTION_OK && PQtransactionStatus(c->conn) != PQTRANS_IDLE)
    PQclear(PQexec(c->conn, "ROLLBACK"));
}

static int pg_txn_open(resil_store *s, void *conn) {
  (void)s;
#ifdef LIBPQ_HAS_PIPELINING
  /* Statements queued: open as far as anyone knows until the commit. */
  if (queued(conn)) return 1;
#endif
  PGTransactionStatusType ts = PQtransactionStatus(((pg_slot *)conn)->conn);
  return ts == PQTRANS_INTRANS ? 1 : ts == PQTRANS_INERROR ? -1 : 0;
}

static void pg_txn_fill(void *conn, resil_store_txn *tx) {
  pg_slot *c = conn;
  tx->pg = c->conn;
  c->qfail = RESIL_OK;
}

static resil_status pg_lock_row(resil_store *s, void *conn, const char *key,
                                resil_op_record *rec, int *found) {
  return pg_select(s, conn, key, Q_LOCK, rec, found, "lock the row");
}

static resil_status pg_read_row(resil_store *s, void *conn, const char *key,
                                resil_op_record *rec, int *found) {
  return pg_select(s, conn, key, Q_READ, rec, found, "read");
}

/* The parameters of Q_TERMINAL. */
typedef struct terminal_params {
  char state[4], status[12], now[24];
  const char *vals[6];
  int lens[6], fmts[6];
} terminal_params;

static resil_status terminal_params_set(resil_store *s, terminal_params *p, const char *key,
                                        const resil_op_response *resp, int64_t now_ms) {
  if (resp->headers_len > INT32_MAX || resp->body_len > INT32_MAX)
    return resil__store_fail(s, RESIL_EINVAL, "body",
                             "the response is longer than libpq accepts (2 GiB)");
  snprintf(p->state, sizeof p->state, "%d",
           resp->failed ? RESIL_OP_FAILED : RESIL_OP_COMMITTED);
  snprintf(p->status, sizeof p->status, "%d", resp->status);
  snprintf(p->now, sizeof p->now, "%lld", (long long)now_ms);
  static const char empty[1];
  const char *vals[6] = {key, p->state, p->status,
                         resp->headers_len ? resp->headers : empty,
                         resp->body_len ? (const char *)resp->body : empty, p->now};
  int lens[6] = {0, 0, 0, (int)resp->headers_len, (int)resp->body_len, 0};
  int fmts[6] = {0, 0, 0, 1, 1, 0};
  memcpy(p->vals, vals, sizeof vals);
  memcpy(p->lens, lens, sizeof lens);
  memcpy(p->fmts, fmts, sizeof fmts);
  return RESIL_OK;
}

/* A failed Q_TERMINAL: SQLSTATE 22012 is its "no row was PENDING". */
static resil_status terminal_fail(resil_store *s, pg_slot *c, const PGresult *r,
                                  const char *key) {
  const char *state = r ? PQresultErrorField(r, PG_DIAG_SQLSTATE) : NULL;
  if (state && strcmp(state, "22012") == 0)
    return resil__store_fail(s, RESIL_EIO, NULL,
                             "write the terminal state: '%s' is no longer PENDING", key);
  return pg_fail(s, c, r, "write the terminal state");
}

/* ---- two statements in one round trip -------------------------------------- */

#ifdef LIBPQ_HAS_PIPELINING
/* Sends a Sync after the n statements queued in pipeline mode (behind the
 * effect's queued statements, if any: their results are read first, see
 * read_queued), reads their results into res[0..n) (NULL where none came)
 * and leaves pipeline mode. A statement after a failed one is not run: its
 * result is PGRES_PIPELINE_ABORTED. Returns 0 when the pipeline did not
 * complete (the connection failed). */
static int pipeline_segment(pg_slot *c, int n, PGresult **res);

static int pipeline_finish(resil_store *s, pg_slot *c, int n, PGresult **res) {
  if (!PQpipelineSync(c->conn)) {
    PQexitPipelineMode(c->conn);
    return 0;
  }
  int ok = (c->nq == 0 || read_queued(s, c)) && pipeline_segment(c, n, res);
  if (!PQexitPipelineMode(c->conn)) ok = 0;
  return ok;
}

/* Reads the results of the n statements before the next Sync, and that
 * Sync's result: 1 when they all came. */
static int pipeline_segment(pg_slot *c, int n, PGresult **res) {
  int ok = 1;
  for (int i = 0; i < n && ok; i++) {
    res[i] = PQgetResult(c->conn);
    if (!res[i] || PQresultStatus(res[i]) == PGRES_PIPELINE_SYNC) {
      ok = 0;
      break;
    }
    /* Up to the NULL that ends this statement's results. */
    PGresult *extra;
    while ((extra = PQgetResult(c->conn)) != NULL) {
      int sync = PQresultStatus(extra) == PGRES_PIPELINE_SYNC;
      PQclear(extra);
      if (sync) {
        ok = 0;
        break;
      }
    }
  }
  if (ok) {
    PGresult *sync = PQgetResult(c->conn);
    ok = sync && PQresultStatus(sync) == PGRES_PIPELINE_SYNC;
    PQclear(sync);
  }
  return ok;
}
#endif

#ifdef LIBPQ_HAS_PIPELINING
/* BEGIN, then the prepared statement `name`, pipelined in one round trip;
 * their results in res[0..2) (NULL where none came). Returns 1 when the
 * pipeline completed and BEGIN succeeded (the transaction is then open,
 * whatever the statement did); 0 otherwise, res[0] saying why when it came. */
static int begin_then(pg_slot *c, const char *name, int n, const char *const *vals,
                      const int *lens, const int *fmts, PGresult **res) {
  int ok = 0;
  if (PQenterPipelineMode(c->conn)) {
    if (PQsendQueryParams(c->conn, "BEGIN", 0, NULL, NULL, NULL, NULL, 1) &&
        PQsendQueryPrepared(c->conn, name, n, vals, lens, fmts, 1))
      ok = pipeline_finish(NULL, c, 2, res); /* nothing queued before a BEGIN */
    else
      PQexitPipelineMode(c->conn);
  }
  return ok && res[0] && PQresultStatus(res[0]) == PGRES_COMMAND_OK;
}
#endif

/* BEGIN, then the prepared row read q (Q_LOCK or Q_LOCK_SKIP), in one round
 * trip where libpq pipelines. The transaction stays open after it (an
 * explicit BEGIN), also when the read failed (aborted, for the caller's
 * rollback). */
static resil_status pg_begin_select(resil_store *s, pg_slot *c, int q, const char *key,
                                    resil_op_record *rec, int *found, const char *what) {
#ifdef LIBPQ_HAS_PIPELINING
  char name[32];
  resil_status st = pg_prepare(s, c, q, name, sizeof name);
  if (st) return st;
  const char *vals[1] = {key};
  PGresult *res[2] = {NULL, NULL};
  if (!begin_then(c, name, 1, vals, NULL, NULL, res))
    st = pg_fail(s, c, res[0], "BEGIN");
  else if (!res[1] || PQresultStatus(res[1]) != PGRES_TUPLES_OK)
    st = pg_fail(s, c, res[1], what);
  else {
    *found = PQntuples(res[1]) > 0;
    if (*found) st = pg_row(s, res[1], rec);
  }
  PQclear(res[0]);
  PQclear(res[1]);
  return st;
#else
  resil_status st = pg_cmd(s, c, "BEGIN", "BEGIN");
  return st ? st : pg_select(s, c, key, q, rec, found, what);
#endif
}

/* The prepared statement q (Q_BUMP or Q_TERMINAL, want: its result status),
 * then COMMIT, in one round trip where libpq pipelines. When q fails, the
 * COMMIT behind it is not run: the transaction is left aborted for the
 * caller's rollback, so nothing commits without q. */
static resil_status pg_then_commit(resil_store *s, pg_slot *c, int q, int n,
                                   const char *const *vals, const int *lens,
                                   const int *fmts, ExecStatusType want, const char *key,
                                   const char *what) {
#ifdef LIBPQ_HAS_PIPELINING
  /* The effect's queued statements go first, in the same round trip; q is
   * prepared outside the pipeline (once per session), so they are sent on
   * their own the first time. */
  if (queued(c) && !(c->prepared & (1u << q))) {
    resil_status st = pg_settle(s, c);
    if (st) return st;
  }
  int in_pipeline = queued(c);
#else
  int in_pipeline = 0;
#endif
  if (!in_pipeline && PQtransactionStatus(c->conn) != PQTRANS_INTRANS)
    return resil__store_fail(s, RESIL_EIO, NULL,
                             "COMMIT: the transaction was aborted by an earlier error");
  char name[32];
  resil_status st = pg_prepare(s, c, q, name, sizeof name);
  if (st) return st;
#ifdef LIBPQ_HAS_PIPELINING
  PGresult *res[2] = {NULL, NULL};
  int ok = 0;
  if (in_pipeline || PQenterPipelineMode(c->conn)) {
    if (PQsendQueryPrepared(c->conn, name, n, vals, lens, fmts, 1) &&
        PQsendQueryParams(c->conn, "COMMIT", 0, NULL, NULL, NULL, NULL, 1))
      ok = pipeline_finish(s, c, 2, res);
    else
      PQexitPipelineMode(c->conn);
  }
  if (c->qfail)
    st = c->qfail; /* an effect statement failed: nothing after it ran */
  else if (!ok && !res[0])
    st = pg_fail(s, c, NULL, what);
  else if (!res[0] || PQresultStatus(res[0]) != want)
    st = q == Q_TERMINAL ? terminal_fail(s, c, res[0], key) : pg_fail(s, c, res[0], what);
  else
    st = commit_result(s, c, ok ? res[1] : NULL);
  PQclear(res[0]);
  PQclear(res[1]);
  return st;
#else
  PGresult *r = PQexecPrepared(c->conn, name, n, vals, lens, fmts, 1);
  if (!r || PQresultStatus(r) != want)
    st = q == Q_TERMINAL ? terminal_fail(s, c, r, key) : pg_fail(s, c, r, what);
  PQclear(r);
  return st ? st : pg_txn_commit(s, c);
#endif
}

#ifdef LIBPQ_HAS_PIPELINING
/* effects_in_store (store.h): begin's INSERT committed without waiting for
 * its WAL flush, in one round trip: Q_ASYNC and the INSERT pipelined before
 * one Sync, which libpq documents as one implicit transaction (committed
 * at the Sync), so set_config(..., true) covers exactly that commit. The
 * session, and so every completion, keeps the configured setting. Without
 * pipelining the INSERT runs as in the default mode (flushed). */
static resil_status pg_insert_unflushed(resil_store *s, pg_slot *c, const char *const *vals,
                                        const int *lens, const int *fmts, int *inserted) {
  char async_name[32], name[32];
  resil_status st = pg_prepare(s, c, Q_ASYNC, async_name, sizeof async_name);
  if (!st) st = pg_prepare(s, c, Q_INSERT, name, sizeof name);
  if (st) return st;
  PGresult *res[2] = {NULL, NULL};
  int ok = 0;
  if (PQenterPipelineMode(c->conn)) {
    if (PQsendQueryPrepared(c->conn, async_name, 0, NULL, NULL, NULL, 1) &&
        PQsendQueryPrepared(c->conn, name, 6, vals, lens, fmts, 1))
      ok = pipeline_finish(s, c, 2, res);
    else
      PQexitPipelineMode(c->conn);
  }
  if (!ok && !res[0])
    st = pg_fail(s, c, NULL, "insert");
  else if (!res[0] || PQresultStatus(res[0]) != PGRES_TUPLES_OK)
    st = pg_fail(s, c, res[0], "set synchronous_commit");
  else if (!res[1] || PQresultStatus(res[1]) != PGRES_COMMAND_OK)
    st = pg_fail(s, c, res[1], "insert");
  else if (!ok)
    st = pg_fail(s, c, NULL, "insert"); /* no Sync: the commit is not known */
  else
    *inserted = strcmp(PQcmdTuples(res[1]), "1") == 0;
  PQclear(res[0]);
  PQclear(res[1]);
  return st;
}
#endif

/* The parameters of Q_INSERT. */
typedef struct insert_params {
  char now[24];
  const char *vals[6];
  int lens[6], fmts[6];
} insert_params;

static resil_status insert_params_set(resil_store *s, insert_params *p,
                                      const resil__op_input *in) {
  if (in->req->body_len > INT32_MAX)
    return resil__store_fail(s, RESIL_EINVAL, "body", "is longer than libpq accepts (2 GiB)");
  snprintf(p->now, sizeof p->now, "%lld", (long long)in->now_ms);
  static const char empty[1];
  const char *vals[6] = {in->key, (const char *)in->fingerprint, in->req->method,
                         in->req->path,
                         in->req->body_len ? (const char *)in->req->body : empty, p->now};
  int lens[6] = {0, 32, 0, 0, (int)in->req->body_len, 0};
  int fmts[6] = {0, 1, 0, 0, 1, 0};
  memcpy(p->vals, vals, sizeof vals);
  memcpy(p->lens, lens, sizeof lens);
  memcpy(p->fmts, fmts, sizeof fmts);
  return RESIL_OK;
}

/* INSERT ... ON CONFLICT DO NOTHING; *inserted says whether this call made
 * the row. */
static resil_status pg_insert(resil_store *s, pg_slot *c, const resil__op_input *in,
                              int *inserted) {
  insert_params p;
  PGresult *r = NULL;
  resil_status st = insert_params_set(s, &p, in);
  if (st) return st;
#ifdef LIBPQ_HAS_PIPELINING
  if (s->effects_in_store) return pg_insert_unflushed(s, c, p.vals, p.lens, p.fmts, inserted);
#endif
  st = pg_run_q(s, c, Q_INSERT, 6, p.vals, p.lens, p.fmts, PGRES_COMMAND_OK, &r, "insert");
  if (st) return st;
  *inserted = strcmp(PQcmdTuples(r), "1") == 0;
  PQclear(r);
  return RESIL_OK;
}

/* resil_store_execute's one transaction: BEGIN and the INSERT ... ON
 * CONFLICT DO NOTHING, in one round trip where libpq pipelines; the
 * transaction stays open (also after a failure, for the caller's
 * rollback). An INSERT racing another transaction's uncommitted row of the
 * same key (a running execute) waits for it, up to lock_timeout, then finds
 * the key taken (or inserts, if that one rolled back). The COMMIT that ends
 * it (with the terminal state) is flushed as the session is configured. */
static resil_status pg_insert_locked(resil_store *s, void *conn, const resil__op_input *in,
                                     int *inserted) {
  pg_slot *c = conn;
  insert_params p;
  char name[32];
  resil_status st = insert_params_set(s, &p, in);
  if (!st) st = pg_prepare(s, c, Q_INSERT, name, sizeof name);
  if (st) return st;
#ifdef LIBPQ_HAS_PIPELINING
  PGresult *res[2] = {NULL, NULL};
  if (!begin_then(c, name, 6, p.vals, p.lens, p.fmts, res))
    st = pg_fail(s, c, res[0], "BEGIN");
  else if (!res[1] || PQresultStatus(res[1]) != PGRES_COMMAND_OK)
    st = pg_fail(s, c, res[1], "insert");
  else
    *inserted = strcmp(PQcmdTuples(res[1]), "1") == 0;
  PQclear(res[0]);
  PQclear(res[1]);
  return st;
#else
  PGresult *r = NULL;
  if ((st = pg_cmd(s, c, "BEGIN", "BEGIN"))) return st;
  st = pg_run_q(s, c, Q_INSERT, 6, p.vals, p.lens, p.fmts, PGRES_COMMAND_OK, &r, "insert");
  if (st) return st;
  *inserted = strcmp(PQcmdTuples(r), "1") == 0;
  PQclear(r);
  return RESIL_OK;
#endif
}

/* resil_store_execute by default: begin's INSERT ... ON CONFLICT DO NOTHING
 * in a transaction of its own, BEGIN ... COMMIT (flushed, as the session is
 * configured, before the server reads on); then BEGIN and the row read
 * under lock without waiting for another holder (FOR UPDATE SKIP LOCKED):
 * all five statements in one pipeline with one Sync where libpq pipelines,
 * so one message each way. (A Sync after the INSERT's statement would end
 * its implicit transaction as well, but libpq 14/15 flushes at every Sync:
 * two sends, and two replies from the server.) A pipeline's transactions
 * that committed stay committed when a later statement fails: the INSERT
 * is committed exactly when COMMIT answers "COMMIT". The effect runs only
 * after the results came back, so after that commit. The transaction
 * stays open, also after a failure (for the caller's rollback). */
static resil_status pg_insert_then_lock(resil_store *s, void *conn, const resil__op_input *in,
                                        int *inserted, resil_op_record *rec, int *found) {
  pg_slot *c = conn;
  insert_params p;
  resil_status st = insert_params_set(s, &p, in);
  if (st) return st;
#ifdef LIBPQ_HAS_PIPELINING
  char ins[32], lock[32];
  if ((st = pg_prepare(s, c, Q_INSERT, ins, sizeof ins)) ||
      (st = pg_prepare(s, c, Q_LOCK_SKIP, lock, sizeof lock)))
    return st;
  const char *key[1] = {in->key};
  enum { R_BEGIN, R_INSERT, R_COMMIT, R_BEGIN2, R_LOCK, NRES };
  PGresult *res[NRES] = {NULL, NULL, NULL, NULL, NULL};
  int ok = 0;
  if (PQenterPipelineMode(c->conn)) {
    int sent = PQsendQueryParams(c->conn, "BEGIN", 0, NULL, NULL, NULL, NULL, 1) &&
               PQsendQueryPrepared(c->conn, ins, 6, p.vals, p.lens, p.fmts, 1) &&
               PQsendQueryParams(c->conn, "COMMIT", 0, NULL, NULL, NULL, NULL, 1) &&
               PQsendQueryParams(c->conn, "BEGIN", 0, NULL, NULL, NULL, NULL, 1) &&
               PQsendQueryPrepared(c->conn, lock, 1, key, NULL, NULL, 1) &&
               PQpipelineSync(c->conn);
    ok = sent && pipeline_segment(c, NRES, res);
    if (!PQexitPipelineMode(c->conn)) ok = 0;
  }
  /* Committed: COMMIT came back as such (after a failed INSERT it answers
   * ROLLBACK, or is skipped). */
  int committed = ok && res[R_COMMIT] && PQresultStatus(res[R_COMMIT]) == PGRES_COMMAND_OK &&
                  strcmp(PQcmdStatus(res[R_COMMIT]), "COMMIT") == 0;
  if (!ok) {
    st = pg_fail(s, c, NULL, "insert");
  } else if (!res[R_BEGIN] || PQresultStatus(res[R_BEGIN]) != PGRES_COMMAND_OK) {
    st = pg_fail(s, c, res[R_BEGIN], "BEGIN");
  } else if (!res[R_INSERT] || PQresultStatus(res[R_INSERT]) != PGRES_COMMAND_OK) {
    st = pg_fail(s, c, res[R_INSERT], "insert");
  } else if (!committed) {
    st = pg_fail(s, c, res[R_COMMIT], "commit the insert");
  } else {
    *inserted = strcmp(PQcmdTuples(res[R_INSERT]), "1") == 0;
    if (!res[R_BEGIN2] || PQresultStatus(res[R_BEGIN2]) != PGRES_COMMAND_OK) {
      st = pg_fail(s, c, res[R_BEGIN2], "BEGIN");
    } else if (!res[R_LOCK] || PQresultStatus(res[R_LOCK]) != PGRES_TUPLES_OK) {
      st = pg_fail(s, c, res[R_LOCK], "lock the row");
    } else {
      *found = PQntuples(res[R_LOCK]) > 0;
      if (*found) st = pg_row(s, res[R_LOCK], rec);
    }
  }
  for (int i = 0; i < NRES; i++) PQclear(res[i]);
  return st;
#else
  PGresult *r = NULL;
  st = pg_run_q(s, c, Q_INSERT, 6, p.vals, p.lens, p.fmts, PGRES_COMMAND_OK, &r, "insert");
  if (st) return st;
  *inserted = strcmp(PQcmdTuples(r), "1") == 0;
  PQclear(r);
  return pg_begin_select(s, c, Q_LOCK_SKIP, in->key, rec, found, "lock the row");
#endif
}

static resil_status pg_begin(resil_store *s, void *conn, const resil__op_input *in,
                             int *inserted, int *counted, resil_op_record *rec) {
  pg_slot *c = conn;
  /* A key deleted by a sweep between two statements sends us round again;
   * three rounds need a sweep racing every one of them. */
  for (int round = 0; round < 3; round++) {
    resil_status st = pg_insert(s, c, in, inserted);
    if (st || *inserted) return st;
    /* Count the attempt under the row lock, unless someone holds it (a
     * completion running its effect): then answer from the last committed
     * state without waiting. The row is copied before the count commits:
     * running out of memory counts nothing. */
    int found = 0;
    st = pg_begin_select(s, c, Q_LOCK_SKIP, in->key, rec, &found, "lock the row");
    if (!st && found) {
      const char *vals[1] = {in->key};
      st = pg_then_commit(s, c, Q_BUMP, 1, vals, NULL, NULL, PGRES_COMMAND_OK, in->key,
                          "count the attempt");
      if (st) {
        pg_txn_rollback(s, c);
        return st;
      }
      if (rec->attempts < UINT32_MAX) rec->attempts++;
      *counted = 1;
      return RESIL_OK;
    }
    pg_txn_rollback(s, c);
    if (st) return st;
    if ((st = pg_read_row(s, c, in->key, rec, &found))) return st;
    if (found) {
      *counted = 0;
      return RESIL_OK;
    }
  }
  return resil__store_fail(s, RESIL_EIO, NULL,
                           "'%s' was deleted and recreated under us three times", in->key);
}

static resil_status pg_write_terminal(resil_store *s, void *conn, const char *key,
                                      const resil_op_response *resp, int64_t now_ms) {
  pg_slot *c = conn;
  terminal_params p;
  char name[32];
  resil_status st = pg_settle(s, c);
  if (!st) st = terminal_params_set(s, &p, key, resp, now_ms);
  if (!st) st = pg_prepare(s, c, Q_TERMINAL, name, sizeof name);
  if (st) return st;
  PGresult *r = PQexecPrepared(c->conn, name, 6, p.vals, p.lens, p.fmts, 1);
  if (!r || PQresultStatus(r) != PGRES_TUPLES_OK) st = terminal_fail(s, c, r, key);
  PQclear(r);
  return st;
}


static resil_status pg_txn_begin_lock(resil_store *s, void *conn, const char *key,
                                      resil_op_record *rec, int *found) {
  return pg_begin_select(s, conn, Q_LOCK, key, rec, found, "lock the row");
}

static resil_status pg_write_terminal_commit(resil_store *s, void *conn, const char *key,
                                             const resil_op_response *resp,
                                             int64_t now_ms) {
  terminal_params p;
  resil_status st = terminal_params_set(s, &p, key, resp, now_ms);
  return st ? st
            : pg_then_commit(s, conn, Q_TERMINAL, 6, p.vals, p.lens, p.fmts, PGRES_TUPLES_OK,
                             key, "write the terminal state");
}

static resil_status pg_list_pending(resil_store *s, void *conn, int64_t cutoff,
                                    uint32_t max, resil__keylist *out) {
  pg_slot *c = conn;
  char cut[24], lim[16];
  snprintf(cut, sizeof cut, "%lld", (long long)cutoff);
  snprintf(lim, sizeof lim, "%u", max);
  const char *vals[2] = {cut, lim};
  PGresult *r = NULL;
  resil_status st = pg_run_q(s, c, Q_LIST, 2, vals, NULL, NULL, PGRES_TUPLES_OK, &r,
                             "list pending operations");
  if (st) return st;
  int n = PQntuples(r);
  for (int i = 0; i < n && !st; i++)
    st = resil__keylist_add(s, out, PQgetvalue(r, i, 0), (size_t)PQgetlength(r, i, 0));
  PQclear(r);
  return st;
}

static resil_status pg_count_pending(resil_store *s, void *conn, uint64_t *n) {
  PGresult *r = NULL;
  resil_status st = pg_run_q(s, conn, Q_COUNT_PENDING, 0, NULL, NULL, NULL, PGRES_TUPLES_OK,
                             &r, "count pending operations");
  if (st) return st;
  *n = PQntuples(r) == 1 ? strtoull(PQgetvalue(r, 0, 0), NULL, 10) : 0;
  PQclear(r);
  return RESIL_OK;
}

static resil_status pg_touch(resil_store *s, void *conn, const char *key, int64_t now_ms) {
  char now[24];
  snprintf(now, sizeof now, "%lld", (long long)now_ms);
  const char *vals[2] = {key, now};
  return pg_run_q(s, conn, Q_TOUCH, 2, vals, NULL, NULL, PGRES_COMMAND_OK, NULL,
                  "postpone a failed recovery");
}

static resil_status pg_sweep(resil_store *s, void *conn, int64_t cutoff, uint32_t max,
                             uint32_t *deleted) {
  pg_slot *c = conn;
  char cut[24], lim[16];
  snprintf(cut, sizeof cut, "%lld", (long long)cutoff);
  snprintf(lim, sizeof lim, "%u", max);
  const char *vals[2] = {cut, lim};
  PGresult *r = NULL;
  resil_status st = pg_run_q(s, c, Q_SWEEP, 2, vals, NULL, NULL, PGRES_COMMAND_OK, &r,
                             "delete expired operations");
  if (st) return st;
  *deleted = (uint32_t)strtoul(PQcmdTuples(r), NULL, 10);
  PQclear(r);
  return RESIL_OK;
}

const resil__store_backend resil__store_pg = {
    .name = "postgresql",
    .connect = pg_connect,
    .disconnect = pg_disconnect,
    .ready = pg_ready,
    .lost = pg_lost,
    .begin = pg_begin,
    .insert_locked = pg_insert_locked,
    .insert_then_lock = pg_insert_then_lock,
    .txn_begin = pg_txn_begin,
    .lock_row = pg_lock_row,
    .write_terminal = pg_write_terminal,
    .txn_commit = pg_txn_commit,
    .txn_rollback = pg_txn_rollback,
    .txn_open = pg_txn_open,
    .txn_fill = pg_txn_fill,
    .txn_exec = pg_txn_exec,
    .txn_settle = pg_settle,
    .effect_sql_failed = pg_effect_sql_failed,
    .txn_begin_lock = pg_txn_begin_lock,
    .write_terminal_commit = pg_write_terminal_commit,
    .read_row = pg_read_row,
    .list_pending = pg_list_pending,
    .count_pending = pg_count_pending,
    .touch = pg_touch,
    .sweep = pg_sweep,
};
