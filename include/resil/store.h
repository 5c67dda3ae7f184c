/* libresil-store: the durable operation store behind idempotency keys
 * (DESIGN §6). A separate library: link libresil-store (pkg-config
 * resil-store) and include <resil/store.h>; the umbrella header resil.h does
 * not include it.
 *
 * One interface, two backends chosen by the URI given to resil_store_open():
 *   "sqlite:PATH"           embedded, the default: one file (created if
 *                           missing), WAL journal, synchronous=FULL (see
 *                           resil_store_config.effects_in_store). Several
 *                           threads, stores and processes may share the file.
 *                           The store refuses to report success once the
 *                           file was deleted or replaced while open (see
 *                           resil_store_open).
 *   "postgresql://..."      libpq (also "postgres://..."), for several
 *                           instances sharing one store.
 * The schema (tables resil_operations and resil_schema) is created or
 * migrated on open.
 *
 * Per key the store keeps one operation with this state machine:
 *
 *     (unknown) --begin--> PENDING --complete--> COMMITTED
 *                                  \-----------> FAILED
 *
 * with the request fingerprint (SHA-256 of method, path and body), the
 * request itself (so recovery can re-drive it), the stored response (status,
 * headers worth replaying, body), wall-clock timestamps and an attempt count.
 *
 *   resil_store_begin     NEW (PENDING stored durably, the caller owns it;
 *                         with effects_in_store, durable once the completion
 *                         commits),
 *                         REPLAY (COMMITTED or FAILED: the stored response),
 *                         IN_PROGRESS (PENDING, owned by another request) or
 *                         CONFLICT (same key, different fingerprint).
 *   resil_store_complete  runs the caller's effect INSIDE the transaction that
 *                         writes the terminal state, under the row lock
 *                         (SQLite: BEGIN IMMEDIATE; PostgreSQL: SELECT ... FOR
 *                         UPDATE). Either both the effect's own SQL writes
 *                         and the terminal state are committed, or neither.
 *   resil_store_execute   begin, then complete when NEW, in one call; with
 *                         effects_in_store, one transaction for both.
 *   resil_store_status    COMMITTED(result) / PENDING / FAILED / UNKNOWN.
 *   resil_store_recover   re-drives old PENDING operations through the same
 *                         lock and transaction, a bounded number per call.
 *   resil_store_sweep     deletes expired terminal operations, bounded.
 *
 * Typical server flow for a keyed POST:
 *
 *   resil_op_record rec;
 *   resil_op_record_init(&rec);
 *   resil_op_request req;
 *   resil_op_request_init(&req);
 *   req.method = "POST";
 *   req.path = "/payments";
 *   req.body = body;
 *   req.body_len = body_len;
 *   resil_op_begin_result r;
 *   if (resil_store_begin(store, key, &req, &r, &rec) != RESIL_OK) ... 503
 *   switch (r) {
 *   case RESIL_OP_NEW:
 *     if (resil_store_complete(store, key, pay, &ctx, &rec) != RESIL_OK) ... 503
 *     ... answer rec.status, rec.headers, rec.body
 *   case RESIL_OP_REPLAY:      ... answer rec.status, rec.headers, rec.body
 *   case RESIL_OP_IN_PROGRESS: ... 409 with Retry-After
 *   case RESIL_OP_CONFLICT:    ... 422
 *   }
 *   resil_op_record_clear(&rec);
 *
 * The same flow in one call (the effect `pay` runs only for a new key; with
 * effects_in_store, begin and completion are then one transaction):
 *
 *   if (resil_store_execute(store, key, &req, pay, &ctx, &r, &rec) != RESIL_OK)
 *     ... 503 (rec.state says what is stored: PENDING or UNKNOWN)
 *   ... then the same switch on r: for NEW, rec is the final record
 *
 * Errors: every function returns a resil_status. RESIL_EIO means the database
 * failed (disk full, I/O error, corrupt file, a damaged row, the SQLite file
 * deleted or replaced while open, the connection lost and not regained, a
 * schema newer than this library); RESIL_ETIMEDOUT means the database (or the row) stayed
 * locked, or no pooled connection became free, for longer than
 * busy_timeout_ns. resil_store_errmsg() and resil_store_last_error() tell
 * more. Nothing is half-written: a failing call rolls its transaction back.
 *
 * Lost PostgreSQL connections (a server restart, an idle connection closed
 * by the server): a call whose pooled connection turns out to be lost
 * reconnects and runs its whole transaction once more on the new
 * connection. That is safe whatever the old connection had done, COMMIT
 * included, because every transaction is keyed by the operation key and
 * re-reads the row under its lock: a completion whose COMMIT reached the
 * server finds the operation terminal and returns it without running the
 * effect again; one whose COMMIT did not finds it PENDING and runs the
 * effect (exactly what recovery would do). A begin whose INSERT committed
 * before the loss finds its own PENDING row and answers IN_PROGRESS (the
 * operation is then completed by recovery). Only one retry per call; a
 * second loss is reported (RESIL_EIO). The SQLite backend has no such
 * retry.
 *
 * Thread-safety: a resil_store may be used from any number of threads at once
 * (an internal pool of connections), except resil_store_close(), which needs
 * exclusive access. Several stores, and several processes, may open the same
 * SQLite file or PostgreSQL database. Effects run on the calling thread, with
 * one pooled connection held and no library mutex held; an effect must not
 * call the same store (it would wait for the row lock it holds itself).
 * resil_op_record values are plain data, not synchronised.
 *
 * Sized structs (DESIGN §11, version.h): resil_store_config,
 * resil_op_request, resil_op_response, resil_op_record and
 * resil_store_recovery start with `size_t struct_size`; initialise them with
 * their _init macro (resil_op_response is initialised by the store before
 * it is handed to an effect).
 *
 * Create/free pairs: resil_store_open / resil_store_close;
 * resil_op_record_init / resil_op_record_clear. */
#ifndef RESIL_STORE_H
#define RESIL_STORE_H

#include <stddef.h>
#include <stdint.h>

#include "alloc.h"
#include "clock.h"
#include "status.h"
#include "version.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct resil_store resil_store;
/* The open transaction of a completion; valid only inside an effect call. */
typedef struct resil_store_txn resil_store_txn;

/* Keys are 1..RESIL_STORE_KEY_MAX visible ASCII characters (0x21..0x7e). */
#define RESIL_STORE_KEY_MAX 255
/* Request methods are 1..RESIL_OP_METHOD_MAX visible ASCII characters. */
#define RESIL_OP_METHOD_MAX 15

typedef enum resil_op_state {
  RESIL_OP_UNKNOWN = 0,   /* no such key (never stored, or swept) */
  RESIL_OP_PENDING = 1,   /* accepted, effect not committed yet */
  RESIL_OP_COMMITTED = 2, /* effect committed, response stored */
  RESIL_OP_FAILED = 3     /* terminal refusal, response stored */
} resil_op_state;

typedef enum resil_op_begin_result {
  RESIL_OP_NEW = 1,         /* key was unknown: PENDING stored (durably;
                               see resil_store_config.effects_in_store), the
                               caller owns it: run resil_store_complete */
  RESIL_OP_REPLAY = 2,      /* COMMITTED or FAILED: rec holds the stored
                               response, replay it byte for byte */
  RESIL_OP_IN_PROGRESS = 3, /* PENDING owned by another request (answer 409
                               and Retry-After) */
  RESIL_OP_CONFLICT = 4     /* same key, different fingerprint (answer 422),
                               never a replay */
} resil_op_begin_result;

/* What the fingerprint is made of, and what recovery re-drives. The
 * fingerprint covers exactly method, path and body: nothing else of an HTTP
 * request (no query string, no header) is part of it. */
typedef struct resil_op_request {
  size_t struct_size; /* set by resil_op_request_init() */
  const char *method; /* "POST": 1..RESIL_OP_METHOD_MAX visible ASCII */
  const char *path;   /* "/payments" (no query); NUL-terminated UTF-8
                         (PostgreSQL text holds nothing else) */
  const void *body;   /* may be NULL when body_len is 0 */
  size_t body_len;
} resil_op_request;

/* What an effect produces and a replay returns. The store zeroes it and
 * sets struct_size (the size the library knows) before the effect runs; an
 * effect fills the fields one by one and leaves struct_size alone. */
typedef struct resil_op_response {
  size_t struct_size;
  int status;          /* a final status, 200..599: a 1xx is never stored
                          (a replayed 100 would leave the client without a
                          final response) */
  const char *headers; /* "Name: value\r\n" lines worth replaying (e.g.
                          Content-Type, Location); may be NULL when
                          headers_len is 0 */
  size_t headers_len;
  const void *body; /* may be NULL when body_len is 0 */
  size_t body_len;
  int failed; /* 1: terminal FAILED (e.g. a business refusal) instead of
                 COMMITTED; still stored and replayed. 0 or 1. */
} resil_op_response;

/* An operation as stored, filled by the store. Initialise once with
 * resil_op_record_init(); a function that fills it first releases what it
 * held, so one record may be reused; release with resil_op_record_clear().
 * Buffers (path, request_body, headers, body) are owned by the record and are
 * NUL-terminated one byte past their length, so text can be printed as is. */
typedef struct resil_op_record {
  size_t struct_size; /* set by resil_op_record_init() */
  char key[256];
  resil_op_state state;
  unsigned char fingerprint[32]; /* SHA-256 of method, path, body, each
                                    preceded by its length (8 bytes, big
                                    endian) */
  char method[16];
  char *path;
  void *request_body;
  size_t request_body_len;
  /* The response: set for COMMITTED and FAILED; for PENDING (and in a
   * CONFLICT answer, which must not disclose another request's result)
   * status is 0 and headers and body are NULL. */
  int status;
  char *headers;
  size_t headers_len;
  void *body;
  size_t body_len;
  int64_t created_ms, updated_ms; /* wall clock, ms since the Unix epoch;
                                     updated_ms: the last state change, or
                                     the last failed recovery attempt */
  uint32_t attempts;              /* begin calls seen for this key (see
                                     resil_store_begin for the one case
                                     where a begin is not counted) */
  /* Set by the store: the allocator the buffers came from. */
  const resil_allocator *alloc;
} resil_op_record;

/* Zeroes *r (state UNKNOWN, no buffers) and sets its struct_size. NULL is a
 * no-op. A record that never went through it is refused by every function
 * taking one (RESIL_EINVAL, "call resil_op_record_init()"). Since 0.2 (a
 * macro passing sizeof). */
RESIL_API void resil_op_record_init_sized(resil_op_record *r, size_t struct_size);
#define resil_op_record_init(r) resil_op_record_init_sized((r), sizeof(resil_op_record))
/* Frees the buffers and re-initialises *r (keeping its struct_size). NULL is
 * a no-op. Since 0.1. */
RESIL_API void resil_op_record_clear(resil_op_record *r);

/* Zeroes *req and sets its struct_size. NULL is a no-op. Since 0.2 (a macro
 * passing sizeof). */
RESIL_API void resil_op_request_init_sized(resil_op_request *req, size_t struct_size);
#define resil_op_request_init(req)                                             \
  resil_op_request_init_sized((req), sizeof(resil_op_request))

/* "PENDING" etc.; "UNKNOWN" for an unknown value. Static text. Since 0.1. */
RESIL_API const char *resil_op_state_name(resil_op_state st);
/* "NEW", "REPLAY", "IN_PROGRESS", "CONFLICT"; "?" otherwise. Since 0.1. */
RESIL_API const char *resil_op_begin_result_name(resil_op_begin_result r);

/* The fingerprint resil_store_begin stores and compares: SHA-256 over the
 * method, the path and the body, each preceded by its length as 8 bytes big
 * endian (so that moving bytes between fields changes it). Returns RESIL_OK,
 * RESIL_EINVAL (req or out NULL, req not initialised, method or path NULL,
 * body NULL with a length), RESIL_ENOMEM or RESIL_EIO (no SHA-256 in libcrypto). Thread-safe.
 * Since 0.1. */
RESIL_API resil_status resil_op_fingerprint(const resil_op_request *req,
                                            unsigned char out[32]);

/* The effect: runs INSIDE the transaction that writes the terminal state,
 * under the row lock (SQLite: BEGIN IMMEDIATE; PostgreSQL: SELECT ... FOR
 * UPDATE), with `pending` the locked record (state PENDING, with the request
 * to re-drive). It may run its own SQL on the same connection and
 * transaction through resil_store_txn_sqlite(tx) or resil_store_txn_pg(tx)
 * (the other one returns NULL); it must not commit or roll back that
 * transaction itself. On PostgreSQL the connection carries the store's
 * prepared statements (named resil_store_*): an effect must not DEALLOCATE
 * them (DEALLOCATE ALL, DISCARD ALL); if it does, that completion fails
 * and rolls back, and the next one prepares them again.
 *
 * Return RESIL_OK with *out filled to commit: *out is zeroed (struct_size
 * set) before the call and copied by the store after it, so the buffers it points to must stay
 * valid until resil_store_complete (or _recover) returns. Any other status
 * rolls everything back: the operation stays PENDING (recoverable) and the
 * effect's own SQL writes are undone. */
typedef resil_status (*resil_op_effect_fn)(void *user, resil_store_txn *tx,
                                           const resil_op_record *pending,
                                           resil_op_response *out);

/* The SQLite connection of the effect's transaction, or NULL on another
 * backend. Since 0.1. */
RESIL_API struct sqlite3 *resil_store_txn_sqlite(resil_store_txn *tx);
/* The libpq connection (PGconn) of the effect's transaction, or NULL on
 * another backend. Statements queued by resil_store_txn_exec are sent and
 * waited for first, so what the effect then runs on the connection sees
 * them (if one of them failed, the transaction is aborted: the effect's
 * next statement fails and the completion fails with that statement's
 * error). Since 0.1. */
RESIL_API struct pg_conn *resil_store_txn_pg(resil_store_txn *tx);

/* Largest nparams of resil_store_txn_exec. */
#define RESIL_STORE_EXEC_PARAMS_MAX 256

/* Since 0.2. Runs one SQL statement of the effect in the completion's
 * transaction, for an effect that does not need the statement's result
 * (rows it returns are discarded): the portable way to write a ledger row,
 * and on PostgreSQL the fast one.
 *
 *   sql      one statement; parameters $1..$n (PostgreSQL) or ?1..?n / ?
 *            (SQLite). Its text is compared, not kept by pointer: reusing
 *            the same text reuses the prepared statement (up to
 *            RESIL_STORE_EXEC_CACHE texts per pooled connection; others are
 *            parsed every time).
 *   nparams  0..RESIL_STORE_EXEC_PARAMS_MAX; values may be NULL when it is 0.
 *   values   values[i] is parameter i+1; NULL is SQL NULL.
 *   lengths  NULL, or the byte length of each binary value (ignored for text).
 *   binary   NULL (every value is NUL-terminated text), or per parameter 1 for
 *            binary (lengths[i] bytes: bytea / BLOB) and 0 for text. Text
 *            values are converted by the database as in libpq's text format
 *            (SQLite binds them as TEXT; its column affinity converts "42" to
 *            an INTEGER column's 42).
 *
 * PostgreSQL: the statement is not sent at once but queued in libpq's
 * pipeline and sent with the terminal state and COMMIT, in their round
 * trip: an effect made only of resil_store_txn_exec calls adds no round
 * trip to its operation while its queue has room (about 60 statements;
 * then the queued ones are sent, one round trip more) (a new key through
 * resil_store_execute then takes
 * 2 in either mode: the PENDING row with BEGIN (and by default the row
 * lock); the effect's statements with the terminal state and COMMIT). Its
 * error is therefore known only at the commit: then nothing commits, and
 * the completion (complete, execute, recovery) fails with RESIL_EIO
 * (RESIL_ETIMEDOUT when it waited for a lock beyond busy_timeout_ns) and a
 * message naming the statement ("effect statement 2: ...", counted from 1
 * in each effect call), exactly as if the effect had returned that error
 * (the operation stays PENDING, or with effects_in_store execute leaves it
 * UNKNOWN). Needs libpq 14 or later to queue; with an older libpq the
 * statement runs at once. SQLite: the statement runs at once.
 *
 * Returns RESIL_OK (run or queued); RESIL_EINVAL (sql NULL or empty, a
 * statement that ends the transaction: COMMIT, END, ABORT, ROLLBACK but
 * ROLLBACK TO a savepoint, PREPARE TRANSACTION; COPY; nparams
 * out of range, values NULL with nparams > 0, a binary value without
 * lengths; SQLite: the statement does not compile or its parameter count is
 * not nparams: the message says which); RESIL_EIO (SQLite: the statement
 * failed: its message; or an earlier one's error rolled the transaction
 * back: then nothing runs; PostgreSQL: the connection failed, or an earlier
 * statement of this effect already failed, found out by resil_store_txn_pg or
 * when a full queue was sent); RESIL_ENOMEM;
 * RESIL_EMISUSE (tx NULL). A failure does not end the effect: the effect
 * should return it (any status but RESIL_OK rolls everything back); if it
 * returns RESIL_OK anyway, the completion fails all the same with the first
 * failed call's status and message: nothing of the effect commits.
 * Only for the effect's own thread during the effect call. */
#define RESIL_STORE_EXEC_CACHE 8
RESIL_API resil_status resil_store_txn_exec(resil_store_txn *tx, const char *sql,
                                            int nparams, const char *const *values,
                                            const size_t *lengths, const int *binary);

/* Longest busy_timeout_ns accepted: one hour (range errors speak in human
 * units, e.g. "busy_timeout_ns: must be 0 ns..1 h, got 2 h"). */
#define RESIL_STORE_BUSY_TIMEOUT_MAX_NS (INT64_C(3600) * INT64_C(1000000000))
/* Largest pool_size accepted. */
#define RESIL_STORE_POOL_MAX 64

/* TEST ONLY fault hook: see resil_store_config.fault_before_terminal. */
typedef resil_status (*resil_store_fault_fn)(void *user, const char *key);

typedef struct resil_store_config {
  /* Set by resil_store_config_init(). */
  size_t struct_size;
  /* How long a call waits for a locked database (SQLite busy_timeout), a
   * locked row (PostgreSQL lock_timeout) or a free pooled connection before
   * it gives up with RESIL_ETIMEDOUT; also the PostgreSQL connect timeout
   * (rounded up to whole seconds, at least 2 s).
   * 0..RESIL_STORE_BUSY_TIMEOUT_MAX_NS nanoseconds, millisecond resolution;
   * 0 = do not wait (PostgreSQL: 1 ms, as its 0 means "wait forever").
   * Default 5 s. */
  int64_t busy_timeout_ns;
  /* Connections kept open, 1..RESIL_STORE_POOL_MAX: the number of calls that
   * run at once; others wait for a free one. Default 4. */
  uint32_t pool_size;
  /* NULL = malloc/free. Also used for the buffers of records filled by the
   * store (resil_op_record.alloc). */
  const resil_allocator *alloc;
  /* NULL = the system clock. Only wall_ms is read: timestamps and the age
   * thresholds of recover and sweep. Waits use real time. */
  const resil_clock *clock;
  /* TEST ONLY, loudly named: commit the effect in its own transaction BEFORE
   * writing the terminal state in a second one. This is the bug class the I7
   * negative control must catch (a failure between the two leaves a PENDING
   * operation whose effect is already committed, and recovery runs it
   * again). Never set it in production. 0 or 1. Default 0. */
  int unsafe_commit_effect_early;
  /* TEST ONLY fault injection: when not NULL, called by every completion
   * after the effect returned RESIL_OK and before the terminal state is
   * written (inside the transaction, or with unsafe_commit_effect_early
   * after the effect's own commit). Any status but RESIL_OK makes the
   * completion fail there: it rolls back and returns that status. A test may
   * also end the process in it (DESIGN §7 I8). Default NULL. */
  resil_store_fault_fn fault_before_terminal;
  void *fault_user;
  /* Since 0.2. The caller's promise that every effect writes ONLY inside
   * the completion's transaction, in the store's own database (through
   * resil_store_txn_sqlite / resil_store_txn_pg): no HTTP call, no other
   * database, no file, nothing the store's rollback cannot undo. 0 or 1.
   * Default 0: begin's commit and the completion's commit are each flushed
   * to stable storage before the call returns.
   *
   * 1: begin's commit is not flushed on its own. SQLite: begin's whole
   * transaction (a new key's PENDING row, or an existing key's attempt
   * count) commits under PRAGMA synchronous=NORMAL, and the connection is
   * back at FULL before any other call uses it. PostgreSQL: a new key's
   * INSERT commits with synchronous_commit off for that transaction only
   * (set_config('synchronous_commit', 'off', true) pipelined with it, the
   * same one round trip; with a libpq older than 14, which cannot
   * pipeline, it is flushed as with 0); an attempt count is flushed as
   * with 0. Everything else (the completion and
   * recovery's terminal state with the effect, recovery's postponing,
   * sweep, the schema) is flushed exactly as with 0, and the completion's
   * flush also flushes every earlier write of the same database log, the
   * PENDING row included. Exactly once still holds: a PENDING row lost in
   * a crash of the machine (power loss, kernel crash; a crash of the
   * process alone loses nothing) cannot have had its effect committed,
   * since the effect commits only with the terminal state, so a retry with
   * the same key finds nothing and runs the effect once. What changes:
   * after a power loss, resil_store_status may answer UNKNOWN instead of
   * PENDING for a key whose begin returned RESIL_OP_NEW and whose
   * completion had not committed (and, on SQLite, an attempt count may be
   * lower than the begin calls made). Never set it when an effect has a side effect
   * outside the store's transaction: that effect could then run twice.
   * With 1, resil_store_execute makes a new key's begin and completion one
   * transaction with one flushed commit (see there). */
  int effects_in_store;
} resil_store_config;

/* Writes the documented defaults. NULL is a no-op. Since 0.2 (a macro
 * passing sizeof). */
RESIL_API void resil_store_config_init_sized(resil_store_config *cfg, size_t struct_size);
#define resil_store_config_init(cfg)                                           \
  resil_store_config_init_sized((cfg), sizeof(resil_store_config))

/* Opens (and creates or migrates) the store at uri:
 *   "sqlite:/path/to/file.db"  any path but ":memory:" and "" (an in-memory
 *                              database would not be shared by the pool);
 *                              no query part: a '?' or '#' is refused
 *                              (RESIL_EINVAL), never taken into the file
 *                              name (SQLite URI parameters such as
 *                              ?mode=ro are not supported);
 *   "postgresql://user@127.0.0.1:5432/db" or "postgres://..." (a libpq URI,
 *                              passed to libpq unchanged: options such as
 *                              ?sslmode=... or ?options=-csearch_path%3Dx
 *                              work).
 * cfg may be NULL (defaults). Opens pool_size connections at once. Every
 * connection sets WAL, synchronous=FULL and the busy timeout (SQLite), or
 * lock_timeout (PostgreSQL); effects_in_store changes only
 * how begin's commit is flushed (see there).
 * SQLite: the store remembers the file it opened. Before every commit
 * (begin's PENDING row or attempt count, a terminal state in complete or
 * recover) and before every answer given without a commit (status, begin's
 * answer from the last committed state, a completion that finds nothing
 * PENDING, recovery's listing, sweep, count_pending), it checks
 * (SQLITE_FCNTL_HAS_MOVED: one stat of the path against the open file)
 * that the path still names that file.
 * A file deleted or replaced while open makes that call fail with
 * RESIL_EIO ("... was deleted or replaced while open ...") and nothing is
 * reported as stored: writes into a deleted file would be lost, and the
 * same keys would run again after a restart. Reopen the store then.
 * Returns RESIL_OK with *out set; RESIL_EINVAL (err->field names "uri",
 * "out" or the config field; a config not passed through
 * resil_store_config_init() says so); RESIL_EIO (cannot open or connect,
 * not a database, read-only, a schema version newer than this library;
 * err->msg says which, with the system's reason for an open failure, e.g.
 * "no such directory" or "permission denied"); RESIL_ETIMEDOUT (locked beyond busy_timeout_ns while
 * migrating); RESIL_ENOMEM; RESIL_ESYS (no mutex or condition variable
 * for the pool). err may be NULL. Thread-safe. Since 0.1.
 * No message of the store (err->msg here, resil_store_errmsg later) shows
 * the URI's password: a quoted URI has its userinfo and secret-looking
 * parameters redacted, and libpq's messages quoted (which may repeat the
 * URI or the password alone) have every secret of the URI replaced by
 * "[REDACTED]" and their control bytes escaped ("\xNN"). Since 0.2. */
RESIL_API resil_status resil_store_open(const char *uri,
                                        const resil_store_config *cfg,
                                        resil_store **out, resil_error *err);
/* Checks uri and cfg as resil_store_open() does before it opens anything
 * (the uri's scheme and form, the config's ranges) and opens nothing: no
 * file is created, no server contacted (so a file that cannot be created,
 * a server that cannot be reached or a bad password is not found). For
 * validating a configuration (`resil config check`). RESIL_OK, or the
 * RESIL_EINVAL of resil_store_open with err set likewise. err may be
 * NULL. Thread-safe. Since 0.2. */
RESIL_API resil_status resil_store_check(const char *uri, const resil_store_config *cfg,
                                         resil_error *err);
/* Closes every connection and frees s. NULL is a no-op. Needs exclusive
 * access: no other call on s may be running. Since 0.1. */
RESIL_API void resil_store_close(resil_store *s);

/* "sqlite" or "postgresql"; NULL for a NULL handle. Since 0.1. */
RESIL_API const char *resil_store_backend(const resil_store *s);

/* Why the calling thread's most recent call on s failed, e.g.
 * "begin: insert: database or disk is full (SQLite code 13)", or "" when that
 * call succeeded. Kept per thread, so one thread never sees another's
 * errors; owned by the library and valid until the calling thread's next
 * call on s. "" for a NULL handle. Thread-safe. Since 0.1. */
RESIL_API const char *resil_store_errmsg(const resil_store *s);
/* The same failure as data: status, field (e.g. "key" for a rejected key,
 * "body" for a body pointer missing; empty when no argument was at fault)
 * and msg (shortened to fit). Fills *out with status RESIL_OK and empty
 * texts when the calling thread's most recent call on s succeeded. out may
 * be NULL. Thread-safe. Since 0.1. */
RESIL_API void resil_store_last_error(const resil_store *s, resil_error *out);

/* Starts (or finds) the operation `key` for the request req, in one
 * transaction:
 *   - unknown key: stores PENDING with the fingerprint and the request,
 *     attempts 1: *result = RESIL_OP_NEW; the caller now owns it and runs
 *     resil_store_complete();
 *   - COMMITTED or FAILED with the same fingerprint: RESIL_OP_REPLAY, rec
 *     holds the stored response (a stored row that is not a valid
 *     operation, e.g. a status below 200, is RESIL_EIO, never replayed);
 *   - PENDING with the same fingerprint: RESIL_OP_IN_PROGRESS;
 *   - a different fingerprint (method, path or body differ):
 *     RESIL_OP_CONFLICT; rec then holds the stored key, state, fingerprint,
 *     method, path and timestamps but no response and no request body.
 * An existing key's attempt count is incremented, except when its row is
 * locked at that moment (a completion or another begin is running on it):
 * then the answer comes from the last committed state without waiting, and
 * that begin is not counted. begin never waits for a running effect.
 * rec may be NULL; otherwise it must be initialised (resil_op_record_init)
 * and receives the operation as stored after this call. req must be
 * initialised (resil_op_request_init).
 * Returns RESIL_OK; RESIL_EINVAL (bad key, request or pointer; see
 * resil_store_last_error for the field); RESIL_EMISUSE (NULL handle);
 * RESIL_EIO; RESIL_ETIMEDOUT; RESIL_ENOMEM. On any error nothing was stored
 * and *result is unspecified. Thread-safe. Since 0.1. */
RESIL_API resil_status resil_store_begin(resil_store *s, const char *key,
                                         const resil_op_request *req,
                                         resil_op_begin_result *result,
                                         resil_op_record *rec);

/* Completes the PENDING operation `key`: in one transaction, locks its row,
 * runs effect(user, tx, pending, &out) and writes the terminal state
 * (COMMITTED, or FAILED when out.failed is 1) with out's response, then
 * commits. If the operation is no longer PENDING (completed by someone else
 * meanwhile) the effect is NOT run, and rec gets the stored record: callers
 * tell the two apart by whether their effect ran.
 * rec may be NULL; otherwise (initialised) it receives the final record.
 * Returns RESIL_OK (committed by this call or already terminal);
 * RESIL_ESTATE (no such key: rec->state is RESIL_OP_UNKNOWN);
 * RESIL_EINVAL (bad key or effect NULL, or the effect's response is
 * invalid: status outside 200..599, a NULL buffer with a length, failed not
 * 0 or 1; then it rolls back); whatever the effect or the fault hook
 * returned when it was not RESIL_OK (rolled back, still PENDING);
 * RESIL_EMISUSE (NULL handle, or the transaction was no longer open
 * after the effect: it ended it, or an error in its SQL made SQLite roll it
 * back); RESIL_EIO (also when an error in the effect's SQL aborted the
 * PostgreSQL transaction); RESIL_ETIMEDOUT; RESIL_ENOMEM. Every failure
 * leaves the operation PENDING with the effect's own writes undone.
 * Thread-safe. Since 0.1. */
RESIL_API resil_status resil_store_complete(resil_store *s, const char *key,
                                            resil_op_effect_fn effect,
                                            void *user, resil_op_record *rec);

/* resil_store_begin and, when it answers RESIL_OP_NEW, resil_store_complete
 * with effect, in one call: *result is begin's answer; for NEW, rec receives
 * the final record (COMMITTED, or FAILED when out.failed is 1) once the
 * effect and the terminal state are committed; for REPLAY, IN_PROGRESS and
 * CONFLICT, rec is what begin gives and the effect is not run. Arguments,
 * validation and the statuses are those of the two calls (effect NULL is
 * RESIL_EINVAL, "effect"). rec may be NULL.
 *
 * With effects_in_store 0 it is exactly the two calls: the PENDING row is
 * flushed before the effect runs, and after a failed effect (or any failure
 * of the completion) the operation stays PENDING, rec says so, and
 * recovery re-drives it. (PostgreSQL: begin's INSERT, committed on its own,
 * is sent together with the completion's BEGIN and row lock, so a new key
 * takes one round trip fewer than the two calls.)
 *
 * With effects_in_store 1 (every effect writes only inside the store's
 * transaction), a new key's whole operation is ONE transaction: the PENDING
 * row is inserted in the transaction that then runs the effect under that
 * row, writes the terminal state and commits, with one flushed commit
 * (SQLite: BEGIN IMMEDIATE ... COMMIT under synchronous=FULL; PostgreSQL:
 * BEGIN and the INSERT in one round trip, the effect's own statements, the
 * terminal state and COMMIT in one). Either the PENDING row, the effect's
 * writes and the terminal state all commit, or none does: after any failure
 * (the effect's status, an invalid response, the database, a crash of the
 * process or the machine) NOTHING is stored for the key, rec->state is
 * RESIL_OP_UNKNOWN, and a retry with the same key runs the effect anew,
 * once: exactly once holds because an effect that did not commit did
 * nothing. What differs from the two calls: while the transaction runs, the
 * key is not visible (resil_store_status answers UNKNOWN, recovery does not
 * see it); another execute or begin with the same key waits for it (up to
 * busy_timeout_ns, then RESIL_ETIMEDOUT) and then answers from what it
 * committed (REPLAY), instead of IN_PROGRESS; a lost PostgreSQL connection
 * whose COMMIT reached the server is re-run as for every call (see the
 * top) and then answers REPLAY with the result this call committed. An
 * existing key is answered as resil_store_begin answers it (and counted the
 * same way), without waiting for a running completion. Thread-safe.
 * Since 0.2. */
RESIL_API resil_status resil_store_execute(resil_store *s, const char *key,
                                           const resil_op_request *req,
                                           resil_op_effect_fn effect, void *user,
                                           resil_op_begin_result *result,
                                           resil_op_record *rec);

/* The operation `key` as stored, read in one consistent snapshot:
 * COMMITTED or FAILED with the result, PENDING, or, when there is no such
 * key, rec->state = RESIL_OP_UNKNOWN with RESIL_OK (UNKNOWN is not "did not
 * happen": the key may have been swept, or belong to another store).
 * rec must be initialised. Returns RESIL_OK; RESIL_EINVAL (bad key, rec
 * NULL or not initialised); RESIL_EIO also for a stored row that is not a
 * valid operation; RESIL_EMISUSE; RESIL_EIO; RESIL_ETIMEDOUT (no free connection);
 * RESIL_ENOMEM. Thread-safe. Since 0.1. */
RESIL_API resil_status resil_store_status(resil_store *s, const char *key,
                                          resil_op_record *rec);

/* Re-drives PENDING operations whose updated_ms is at or before
 * now - older_than_ns, oldest first, at most max_ops per call, each through
 * resil_store_complete()'s lock and transaction (effect called with the
 * pending record, so a concurrent completion never runs a second effect).
 * An operation whose effect (or the fault hook) fails stays PENDING, and its
 * updated_ms is moved to now so that the next call tries the others first
 * and retries it only after older_than_ns again.
 * *recovered (may be NULL) gets the number of operations this call moved to
 * a terminal state. older_than_ns >= 0; max_ops 0 does nothing.
 * A selected row that is not a valid operation (damaged: e.g. a wrong
 * fingerprint length, a stored status outside 200..599) is skipped, counted
 * and named in resil_store_recover_report()'s report, and the others are
 * recovered; it does not make the call fail.
 * Returns RESIL_OK when every selected operation was handled (or skipped as
 * damaged); the first failing effect's status after trying all of them;
 * RESIL_EINVAL
 * (older_than_ns < 0, effect NULL); RESIL_EMISUSE; and at once, with
 * *recovered counting what was done: RESIL_EIO, RESIL_ETIMEDOUT,
 * RESIL_ENOMEM. Thread-safe; several recoverers may run at once (in one
 * process or several). Since 0.1. */
RESIL_API resil_status resil_store_recover(resil_store *s, int64_t older_than_ns,
                                           uint32_t max_ops,
                                           resil_op_effect_fn effect, void *user,
                                           uint32_t *recovered);

/* What one recovery call did. Since 0.2. */
typedef struct resil_store_recovery {
  size_t struct_size;
  uint32_t selected;  /* PENDING rows old enough, looked at (<= max_ops) */
  uint32_t recovered; /* moved to a terminal state by this call */
  uint32_t failed;    /* effect (or fault hook) failed: still PENDING,
                         postponed by older_than_ns */
  uint32_t damaged;   /* rows that are not valid operations: skipped (and
                         postponed like a failure when their state allows) */
  /* The damaged rows' keys, comma separated, bytes outside 0x21..0x7e
   * written as \xNN, each key shortened to 64 characters; "..." ends a
   * list that did not fit. NUL-terminated. */
  char damaged_keys[512];
} resil_store_recovery;

/* resil_store_recover() with a report: *report (may be NULL) is filled up
 * to its struct_size (set by the macro), also on failure (what was done
 * until then). Returns what resil_store_recover() returns. Since 0.2 (a
 * macro passing sizeof). */
RESIL_API resil_status resil_store_recover_report_sized(
    resil_store *s, int64_t older_than_ns, uint32_t max_ops,
    resil_op_effect_fn effect, void *user, resil_store_recovery *report,
    size_t struct_size);
#define resil_store_recover_report(s, older, max, effect, user, report)        \
  resil_store_recover_report_sized((s), (older), (max), (effect), (user),      \
                                   (report), sizeof(resil_store_recovery))

/* Counters of this handle since it was opened (this process only: other
 * processes on the same database count their own). Monotonic. Since 0.2. */
typedef struct resil_store_stats {
  size_t struct_size;         /* bytes the library wrote (version.h)      */
  uint64_t begun_new;         /* resil_store_begin answers, by result
                                 (resil_store_execute's included)          */
  uint64_t begun_replay;
  uint64_t begun_in_progress;
  uint64_t begun_conflict;
  uint64_t committed;         /* terminal states written: COMMITTED ...   */
  uint64_t failed;            /* ... and FAILED (completions and recovery) */
  uint64_t effect_failed;     /* effects (or fault hooks) that failed:
                                 rolled back, left PENDING (an execute's
                                 one transaction: nothing stored)          */
  uint64_t recovery_runs;     /* resil_store_recover(_report) calls that
                                 got past their argument checks           */
  uint64_t recovered;         /* operations recovery moved to a terminal
                                 state                                     */
  uint64_t recovery_failed;   /* operations whose recovery effect failed  */
  uint64_t damaged;           /* damaged rows recovery skipped            */
} resil_store_stats;

/* Snapshot of the counters (each read atomically), written up to the
 * caller's struct size (a macro passing sizeof). RESIL_OK, RESIL_EMISUSE
 * (NULL handle), RESIL_EINVAL (out NULL). Thread-safe. Since 0.2. */
RESIL_API resil_status resil_store_get_stats_sized(const resil_store *s,
                                                   resil_store_stats *out,
                                                   size_t struct_size);
#define resil_store_get_stats(s, out)                                          \
  resil_store_get_stats_sized((s), (out), sizeof(resil_store_stats))

/* Number of PENDING operations in the database now (all processes): one
 * query. RESIL_OK, RESIL_EMISUSE, RESIL_EINVAL (out NULL), RESIL_EIO,
 * RESIL_ETIMEDOUT, RESIL_ENOMEM. Thread-safe. Since 0.2. */
RESIL_API resil_status resil_store_count_pending(resil_store *s, uint64_t *out);

/* Adds the store to a metrics collector (metrics.h) under `name` (NULL:
 * "store"): resil_store_operations_total{name,result} (new, replay,
 * in_progress, conflict: begin answers; committed, failed: terminal states
 * written; effect_failed), resil_store_pending_operations (a query at each
 * render; the sample is left out when it fails), resil_store_recovery_runs_total,
 * resil_store_recovered_operations_total{name,result} (recovered, failed,
 * damaged). Part of libresil-store. Same statuses as
 * resil_metrics_add_source. Since 0.2. */
typedef struct resil_metrics resil_metrics;
RESIL_API resil_status resil_store_metrics_add(resil_metrics *m, const char *name,
                                               resil_store *s);

/* Retention: deletes COMMITTED and FAILED operations whose updated_ms is at
 * or before now - older_than_ns, oldest first, at most max_rows per call
 * (call again while *deleted == max_rows). PENDING operations are never
 * deleted. *deleted may be NULL. older_than_ns >= 0; max_rows 0 does
 * nothing. Returns RESIL_OK; RESIL_EINVAL; RESIL_EMISUSE; RESIL_EIO;
 * RESIL_ETIMEDOUT; RESIL_ENOMEM. Thread-safe. Since 0.1. */
RESIL_API resil_status resil_store_sweep(resil_store *s, int64_t older_than_ns,
                                         uint32_t max_rows, uint32_t *deleted);

#ifdef __cplusplus
}
#endif
#endif
