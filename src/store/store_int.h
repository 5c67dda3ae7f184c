/* Private parts of libresil-store: the store object, its connection pool,
 * and the vtable the two backends (store_sqlite.c, store_pg.c) implement side
 * by side. store.c holds everything that does not depend on the backend:
 * validation, fingerprints, the begin decision, the completion protocol
 * (lock, effect, terminal state, commit), recovery and error reporting. */
#ifndef RESIL_STORE_INT_H
#define RESIL_STORE_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "core/internal.h"
#include "resil/store.h"

#define RESIL_MAGIC_STORE 0x53544f52u /* "STOR" */

/* One stored row as views into backend memory (an SQLite statement's columns
 * or a libpq result), valid only until the backend moves on; resil__rec_set
 * copies it into a record. */
typedef struct resil__row {
  const char *key;
  size_t key_len;
  int state;
  const unsigned char *fingerprint;
  size_t fingerprint_len;
  const char *method;
  size_t method_len;
  const char *path;
  size_t path_len;
  const void *request_body;
  size_t request_body_len;
  int has_response;
  int status;
  const void *headers;
  size_t headers_len;
  const void *body;
  size_t body_len;
  int64_t created_ms, updated_ms, attempts;
} resil__row;

/* What begin inserts for a new key. */
typedef struct resil__op_input {
  const char *key;
  const resil_op_request *req;
  size_t method_len, path_len;
  unsigned char fingerprint[32];
  int64_t now_ms;
} resil__op_input;

/* A growing list of keys (recovery's batch). */
typedef struct resil__keylist {
  char **keys;
  uint32_t count, cap;
} resil__keylist;

struct resil_store_txn {
  struct sqlite3 *sqlite;
  struct pg_conn *pg;
  resil_store *store; /* set by effect_commit around the effect call */
  void *conn;
  /* The status of the first resil_store_txn_exec of this effect that failed
   * (or of a statement it queued, found out by resil_store_txn_pg), 0 for
   * none: its message is the one to report, and the effect's transaction
   * does not commit even if the effect returns RESIL_OK. */
  resil_status sql_failed;
  int nexec; /* resil_store_txn_exec calls of this effect so far */
};

/* resil_store_txn_exec's parameters, checked (store.c) before the backend
 * sees them. */
typedef struct resil__exec_args {
  int no; /* the statement's number in its effect, from 1 (for messages) */
  const char *sql;
  int n;
  const char *const *values;
  const int *lengths; /* NULL when no value is binary */
  const int *formats; /* NULL: all text */
} resil__exec_args;

/* sql past the blanks and comments (-- to the end of the line; slash-star
 * to star-slash, nested as PostgreSQL reads them when `nested`, else as
 * SQLite does) before its next word. */
const char *resil__sql_skip_blank(const char *sql, int nested);

/* The backend interface. Every function reports its failures through
 * resil__store_fail (so the text reaches resil_store_errmsg) and returns the
 * status. `conn` is one pooled connection, used by one thread at a time. */
typedef struct resil__store_backend {
  const char *name;
  /* Opens one connection to s->target; `first` is set for the first
   * connection of the pool, which also creates or migrates the schema. */
  resil_status (*connect)(resil_store *s, void **conn, int first);
  void (*disconnect)(resil_store *s, void *conn);
  /* Called when a connection is taken from the pool: reconnects a
   * connection that was lost and ends a transaction left open. (SQLite
   * checks that its file was not deleted or replaced before every commit
   * and every answer given without one, not here: store_sqlite.c.) */
  resil_status (*ready)(resil_store *s, void *conn);
  /* 1 when conn was lost (a failure on it may be retried once after ready()
   * reconnects it); NULL for a backend without reconnection. */
  int (*lost)(void *conn);
  /* The begin transaction: inserts in->key as PENDING (*inserted = 1), or
   * fills rec with the existing row, its attempt count incremented when
   * *counted is 1 (0: the row was locked and was read without waiting). */
  resil_status (*begin)(resil_store *s, void *conn, const resil__op_input *in,
                        int *inserted, int *counted, resil_op_record *rec);
  /* Optional (NULL: resil_store_execute runs begin, then complete): starts a
   * write transaction and inserts in->key as PENDING in it, leaving it open
   * with the row held (*inserted = 1); *inserted = 0 when the key exists
   * (the transaction then wrote nothing; the caller rolls it back, as after
   * any failure). The PENDING row commits only with the completion's
   * terminal state, in that transaction (effects_in_store's execute). */
  resil_status (*insert_locked)(resil_store *s, void *conn, const resil__op_input *in,
                                int *inserted);
  /* Optional (NULL: resil_store_execute runs begin, then complete): inserts
   * in->key as PENDING in a transaction of its own, committed as begin
   * commits it (flushed by default) before anything else runs, then starts
   * a write transaction and reads the row under lock without waiting for
   * another holder. *inserted: this call made the row (it is committed);
   * *found: the row is held (rec is it). A failure may leave the
   * transaction open (rollback). Used by execute when effects_in_store is 0. */
  resil_status (*insert_then_lock)(resil_store *s, void *conn, const resil__op_input *in,
                                   int *inserted, resil_op_record *rec, int *found);
  /* Completion primitives: start a write transaction, lock and read the
   * row, write the terminal state (exactly one PENDING row must change),
   * commit, roll back (never fails; a no-op outside a transaction), and
   * whether the transaction is still usable after the effect: 1 open, 0 no
   * longer open (the effect ended it, or SQLite rolled it back after an
   * error in the effect's SQL), -1 open but aborted (PostgreSQL, after an
   * error in the effect's SQL). */
  resil_status (*txn_begin)(resil_store *s, void *conn);
  resil_status (*lock_row)(resil_store *s, void *conn, const char *key,
                           resil_op_record *rec, int *found);
  resil_status (*write_terminal)(resil_store *s, void *conn, const char *key,
                                 const resil_op_response *resp, int64_t now_ms);
  resil_status (*txn_commit)(resil_store *s, void *conn);
  void (*txn_rollback)(resil_store *s, void *conn);
  int (*txn_open)(resil_store *s, void *conn);
  /* Also starts the effect's resil_store_txn_exec bookkeeping afresh. */
  void (*txn_fill)(void *conn, resil_store_txn *tx);
  /* resil_store_txn_exec: runs (SQLite) or queues (PostgreSQL, sent with
   * the terminal state and COMMIT by write_terminal_commit) one statement of
   * the effect. Its failures are reported as "effect statement N: ...". */
  resil_status (*txn_exec)(resil_store *s, void *conn, const resil__exec_args *a);
  /* Optional (NULL: nothing is ever queued): sends the queued statements and
   * waits for them; RESIL_OK when they all succeeded. Every other primitive
   * above settles first where it must (txn_open does not: it answers 1 for
   * a transaction with statements queued). */
  resil_status (*txn_settle)(resil_store *s, void *conn);
  /* Optional: 1 when the transaction's last failure was one of the effect's
   * statements (queued ones fail at write_terminal_commit): the completion
   * then counts an effect failure and keeps the statement's message. */
  int (*effect_sql_failed)(void *conn);
  /* Optional (NULL: store.c runs the two steps one after the other): the
   * same two steps fused into one round trip, with the same effects and
   * failures. txn_begin_lock is txn_begin then lock_row (a failure may leave
   * the transaction open, for txn_rollback); write_terminal_commit is
   * write_terminal then txn_commit, and never commits when write_terminal
   * fails. */
  resil_status (*txn_begin_lock)(resil_store *s, void *conn, const char *key,
                                 resil_op_record *rec, int *found);
  resil_status (*write_terminal_commit)(resil_store *s, void *conn, const char *key,
                                        const resil_op_response *resp, int64_t now_ms);
  /* One consistent read of a row. */
  resil_status (*read_row)(resil_store *s, void *conn, const char *key,
                           resil_op_record *rec, int *found);
  /* Keys of PENDING rows with updated_ms <= cutoff_ms, oldest first. */
  resil_status (*list_pending)(resil_store *s, void *conn, int64_t cutoff_ms,
                               uint32_t max, resil__keylist *out);
  /* Sets updated_ms of a PENDING row (recovery's backoff). */
  resil_status (*touch)(resil_store *s, void *conn, const char *key,
                        int64_t now_ms);
  resil_status (*sweep)(resil_store *s, void *conn, int64_t cutoff_ms,
                        uint32_t max, uint32_t *deleted);
  /* Number of PENDING rows (resil_store_count_pending). */
  resil_status (*count_pending)(resil_store *s, void *conn, uint64_t *n);
} resil__store_backend;

extern const resil__store_backend resil__store_sqlite;

/* The name of the SQLite backend's VFS (store_sqlite_vfs.c: the default VFS
 * writing each WAL frame in one write), registered on first use; NULL (the
 * default VFS) when it cannot be. */
const char *resil__sqlite_vfs(void);
extern const resil__store_backend resil__store_pg;

struct resil_store {
  uint32_t magic;
  uint64_t id; /* unique per process: keys the per-thread error text */
  const resil__store_backend *be;
  char *target; /* SQLite path or libpq URI */
  int64_t busy_timeout_ms;
  uint32_t pool_size;
  const resil_allocator *alloc;
  const resil_clock *clock;
  int unsafe_commit_effect_early;
  int effects_in_store; /* resil_store_config.effects_in_store */
  resil_store_fault_fn fault_before_terminal;
  void *fault_user;
  /* The pool: every connection, and a stack of the idle ones. */
  pthread_mutex_t mu;
  pthread_cond_t cv;
  void **conns;
  void **idle;
  uint32_t nconns, nidle;
  /* resil_store_get_stats: monotonic, relaxed atomics. */
  _Atomic uint64_t n_begin[5]; /* by resil_op_begin_result */
  _Atomic uint64_t n_committed, n_failed, n_effect_failed;
  _Atomic uint64_t n_recovery_runs, n_recovered, n_recovery_failed, n_damaged;
};

/* Records the failure of the current call for resil_store_errmsg() and
 * returns st. field may be NULL. */
resil_status resil__store_fail(resil_store *s, resil_status st,
                               const char *field, const char *fmt, ...)
    RESIL_PRINTF(4, 5);

/* Copies row into rec (a full-size record; releasing what it held); the
 * response fields only when row->has_response. Returns RESIL_OK,
 * RESIL_ENOMEM, or RESIL_EIO for a row that cannot be one of ours (a
 * damaged or foreign table, a status outside 200..599), which recovery
 * skips and reports. */
resil_status resil__rec_set(resil_store *s, resil_op_record *rec,
                            const resil__row *row);

/* Appends a copy of key[0..len) to kl. */
resil_status resil__keylist_add(resil_store *s, resil__keylist *kl,
                                const char *key, size_t len);

/* Reads a big-endian integer (libpq binary results). */
static inline int64_t resil__be64(const unsigned char *p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; i++) v = (v << 8) | p[i];
  return (int64_t)v;
}
static inline int32_t resil__be32(const unsigned char *p) {
  return (int32_t)(((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) |
                   ((uint32_t)p[2] << 8) | (uint32_t)p[3]);
}

#endif
