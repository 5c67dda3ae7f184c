/* resil_idem_mhd: the server side of idempotent operations (DESIGN §6) for
 * libmicrohttpd servers. A library of its own, libresil-mhd (pkg-config
 * resil-mhd, which brings libresil-store and libmicrohttpd: this header
 * includes both <microhttpd.h> and <resil/store.h>); include
 * <resil/idem_mhd.h>; the umbrella header resil.h does not include it.
 * (Up to 0.1 it was part of libresil-store.)
 *
 * The helper wraps a handler (the operation's effect) so that, on every
 * request it serves:
 *   - the request must carry an idempotency key (header `key_header`,
 *     default "Idempotency-Key"): without one it answers 400 (or, when
 *     require_key is 0, runs the operation under a key it generates and
 *     returns in that header); two or more such headers answer 400 (which
 *     one would be the key?);
 *   - the request fingerprint is method, URL path (without the query
 *     string) and body: the query string is NOT part of it, so the same key
 *     with the same path and body but another query replays the stored
 *     answer (put whatever changes the operation into the path or body);
 *   - a new key goes through resil_store_execute: it is stored PENDING
 *     durably, then the handler runs INSIDE the store transaction that
 *     writes the terminal state: its effect and the COMMITTED (or FAILED)
 *     record are committed together or not at all. With the store's
 *     effects_in_store = 1 the PENDING row is part of that same
 *     transaction: until it commits the key is not stored at all, and if it
 *     fails nothing is (see resil_store_execute);
 *   - a key already COMMITTED or FAILED answers the stored status, headers
 *     and body byte for byte, plus "Idempotent-Replayed: true", and never
 *     runs the handler again;
 *   - a key still PENDING answers 409 with Retry-After (with
 *     effects_in_store a request whose key is being run by another waits
 *     for it, up to the store's busy_timeout_ns, and then replays);
 *   - a key reused with another method, path or body (another request
 *     fingerprint) answers 422, never a replay;
 *   - GET {status_prefix}{key} answers the operation's state (below);
 *   - resil_idem_mhd_recover() (and, when configured, POST {recover_path})
 *     re-drives PENDING operations through the same handler, lock and
 *     transaction.
 *
 * Answers the helper makes itself (all application/json):
 *   400 {"error":"missing Idempotency-Key"} / {"error":"invalid ..."} /
 *       {"error":"more than one Idempotency-Key header"} / a path (or
 *       status key) with an encoded NUL (with resil_idem_mhd_unescape)
 *   405 {"error":"method not allowed"}          (status and recovery routes)
 *   409 {"key":K,"state":"PENDING"}            + Retry-After
 *   413 {"error":"request body too large"}      (resil_idem_mhd_access only)
 *   422 {"error":"Idempotency-Key reused with a different request","key":K}
 *   500 {"key":K,"state":"PENDING","error":...} + Retry-After: the handler
 *       failed or the store could not commit; everything was rolled back and
 *       the operation stays PENDING until recovery re-drives it (503 instead
 *       of 500 when the failure was RESIL_ETIMEDOUT)
 *   500 {"key":K,"state":"UNKNOWN","error":"...; nothing is stored, a retry
 *       with the same key runs it anew: ..."} + Retry-After: the same
 *       failure with the store's effects_in_store = 1: the PENDING row was
 *       rolled back with everything else, so recovery will not re-drive it
 *       and a retry with the same key runs the handler again (503 instead of
 *       500 when the failure was RESIL_ETIMEDOUT)
 *   503 {"error":...} + Retry-After: the store was locked beyond its busy
 *       timeout, or failed before anything was stored and before the
 *       handler ran (e.g. its SQLite file was deleted while open)
 *   Every store failure's "error" ends with the store's own message
 *   (resil_store_errmsg), which also goes to the configured log.
 *   Status route: 200 {"key","state":"COMMITTED"|"FAILED","status","body",
 *       "created_ms","updated_ms","attempts"[,extra]} (body as a JSON string
 *       when it is UTF-8, else "body_base64"), 200 {"key","state":"PENDING",
 *       ...} or 404 {"key","state":"UNKNOWN"}. A 404 means "this store has
 *       no record", never "it did not happen" (DESIGN §1).
 *   Recovery route: 200 {"recovered":n[,"damaged":d,"damaged_keys":"k1,k2"]}
 *       (damaged rows are skipped and reported, see resil_store_recover).
 *
 * The handler must be deterministic with respect to the stored request
 * (method, path, body): recovery calls it again, on another thread and
 * possibly in another process, with only the stored record and no
 * connection. Its writes must go through call->tx so that a rollback takes
 * them back; anything it does outside the database is not covered.
 *
 * Example (a server whose only route is POST /payments):
 *
 *   static resil_status pay(void *user, resil_idem_call *call,
 *                           resil_op_response *out) {
 *     sqlite3 *db = resil_store_txn_sqlite(call->tx);
 *     ... INSERT INTO payments(op_key, amount) VALUES (call->key, 1) ...
 *     out->status = 201;
 *     out->headers = "Content-Type: application/json\r\n";
 *     out->headers_len = strlen(out->headers);
 *     out->body = "{\"paid\":true}";
 *     out->body_len = 13;
 *     return RESIL_OK;
 *   }
 *   resil_idem_mhd_config cfg;
 *   resil_idem_mhd_config_init(&cfg);
 *   cfg.store = store;
 *   cfg.handler = pay;
 *   resil_idem_mhd *idem = NULL;
 *   resil_idem_mhd_new(&cfg, &idem, &err);
 *   struct sockaddr_in addr = {.sin_family = AF_INET,       // 127.0.0.1
 *                              .sin_port = htons(port),     // only
 *                              .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
 *   MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD |
 *                    MHD_USE_THREAD_PER_CONNECTION, 0, NULL, NULL,
 *                    resil_idem_mhd_access, idem,
 *                    MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&addr,
 *                    MHD_OPTION_NOTIFY_COMPLETED, resil_idem_mhd_completed,
 *                    idem,
 *                    MHD_OPTION_CONNECTION_TIMEOUT,
 *                    (unsigned)RESIL_IDEM_MHD_CONNECTION_TIMEOUT_S,
 *                    MHD_OPTION_CONNECTION_LIMIT,
 *                    (unsigned)RESIL_IDEM_MHD_CONNECTION_LIMIT,
 *                    MHD_OPTION_UNESCAPE_CALLBACK, resil_idem_mhd_unescape,
 *                    NULL, MHD_OPTION_END);
 *
 * Recommended libmicrohttpd options (the example above; `resil upstream`
 * and the test fixture use them):
 *   MHD_OPTION_CONNECTION_TIMEOUT  RESIL_IDEM_MHD_CONNECTION_TIMEOUT_S:
 *       MHD's default is no timeout at all, so an idle or half-sent request
 *       holds its connection (and, with a thread per connection, a thread)
 *       forever;
 *   MHD_OPTION_CONNECTION_LIMIT    RESIL_IDEM_MHD_CONNECTION_LIMIT: bounds
 *       the threads; connections past it are closed at once instead of
 *       exhausting the process (with the timeout, idle ones make room).
 *       1024, so that a few hundred held half-requests (slowloris) leave
 *       room for everyone else; a thread per connection waits with poll(),
 *       so this is not bound by FD_SETSIZE, but the process needs that
 *       many descriptors (RLIMIT_NOFILE) and threads;
 *   a header timeout, RESIL_IDEM_MHD_HEADER_TIMEOUT_S: libmicrohttpd 0.9.75
 *       has no option for it, but a connection's own timeout can be
 *       changed: set it short when the connection starts and back to the
 *       idle timeout when its request's headers are complete, so that a
 *       held half-request gives its slot back in seconds, not 30 s:
 *         static void on_conn(void *cls, struct MHD_Connection *c,
 *                             void **sock, enum MHD_ConnectionNotificationCode t) {
 *           if (t == MHD_CONNECTION_NOTIFY_STARTED)
 *             MHD_set_connection_option(c, MHD_CONNECTION_OPTION_TIMEOUT,
 *                 (unsigned)RESIL_IDEM_MHD_HEADER_TIMEOUT_S);
 *         }
 *         ... MHD_OPTION_NOTIFY_CONNECTION, on_conn, NULL, ...
 *       and in the access handler, on its first call for a request
 *       (*con_cls still NULL), before resil_idem_mhd_access:
 *         MHD_set_connection_option(conn, MHD_CONNECTION_OPTION_TIMEOUT,
 *             (unsigned)RESIL_IDEM_MHD_CONNECTION_TIMEOUT_S);
 *       (It is an idle timeout: a client trickling a byte every few seconds
 *       keeps its connection; the connection limit bounds those.)
 *   MHD_OPTION_PER_IP_CONNECTION_LIMIT  for a server reachable by many
 *       clients (behind no proxy), so that one address cannot take every
 *       slot; pointless on loopback, where every client shares 127.0.0.1
 *       (a per-address limit would refuse the attacker's neighbours too);
 *   MHD_OPTION_UNESCAPE_CALLBACK   resil_idem_mhd_unescape: MHD's decoding
 *       turns /operations/k%00x into "k", another key; this one makes such
 *       a path a 400.
 *
 * Create/free pair: resil_idem_mhd_new / resil_idem_mhd_free.
 *
 * Thread-safety: every function may be called on the same helper from any
 * thread at once (libmicrohttpd's thread per connection, any other pool),
 * except resil_idem_mhd_free(), which needs exclusive access: stop the
 * daemon first. Handlers and hooks run on the thread serving the request
 * (or calling recovery), with no helper lock held, possibly on several
 * threads at once. */
#ifndef RESIL_IDEM_MHD_H
#define RESIL_IDEM_MHD_H

#include <stddef.h>
#include <stdint.h>

#include <microhttpd.h>

#include "alloc.h"
#include "call.h"
#include "deadline_mhd.h"
#include "status.h"
#include "store.h"
#include "version.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct resil_idem_mhd resil_idem_mhd;
typedef struct resil_idem_call_priv resil_idem_call_priv;

/* What a handler and the hooks see of one operation. Valid only during the
 * callback it is passed to. */
typedef struct resil_idem_call {
  /* The operation's idempotency key (the client's, or a generated one). */
  const char *key;
  /* The PENDING record (the row the store's transaction holds; with
   * effects_in_store not committed yet): method, path and request body
   * exactly as the first request carried them (what recovery re-drives).
   * In on_committed, that record as it was while PENDING (no response). */
  const resil_op_record *pending;
  /* The store transaction that will also write the terminal state: run the
   * effect's SQL through resil_store_txn_sqlite(tx) or
   * resil_store_txn_pg(tx). NULL in the hooks. */
  resil_store_txn *tx;
  /* The request's connection (query arguments, headers), or NULL when
   * recovery re-drives the operation. */
  struct MHD_Connection *conn;
  /* resil_idem_mhd_serve()'s request_user; NULL otherwise. */
  void *request_user;
  /* 1 when recovery re-drives the operation, 0 for a request. */
  int recovering;
  resil_idem_call_priv *priv_;
  /* Since 0.2. The request's context, for every call the handler makes:
   * its deadline is the caller's budget when the helper has a
   * resil_deadline_mhd (config `deadline`), counted from the moment the
   * request's headers were complete; no deadline otherwise, and during
   * recovery. Never NULL in the handler and the hooks. */
  const resil_ctx *ctx;
} resil_idem_call;

/* The wrapped handler: the operation's effect. Runs inside the transaction
 * that writes the terminal state, under the operation's row lock. Fill *out
 * (a final status 200..599, never a 1xx; headers as "Name: value\r\n" lines, e.g. Content-Type;
 * body; failed = 1 for a terminal business refusal that is stored and
 * replayed like a success) and return RESIL_OK to commit effect and state
 * together. Any other status rolls both back and the request is answered
 * 500: the operation stays PENDING, or, with the store's effects_in_store,
 * nothing is stored for the key (see the answers above). The memory out
 * points to must outlive the handler's return: static data, or
 * resil_idem_call_alloc(). */
typedef resil_status (*resil_idem_handler_fn)(void *user, resil_idem_call *call,
                                              resil_op_response *out);

/* Hook: a request's new operation is about to run its handler: called once
 * per new operation, just before the handler, on the same thread, inside
 * the store's transaction (the row lock, and on SQLite the database's write
 * lock, are held: a hook that sleeps holds them). Never for a replay, nor
 * for recovery. call->tx is NULL; call->pending is the PENDING record.
 * With the store's effects_in_store = 0 (default), PENDING is durable here
 * (a process killed here leaves a PENDING operation for recovery); with
 * effects_in_store = 1 nothing is stored yet: the PENDING row is part of
 * the transaction still open (a process killed here leaves nothing, and a
 * retry with the same key runs the operation). For tests and crash
 * experiments; production servers leave it NULL. */
typedef void (*resil_idem_pending_fn)(void *user, const resil_idem_call *call);

/* What to do with a response after its operation committed. */
typedef enum resil_idem_action {
  RESIL_IDEM_SEND = 0, /* queue the response */
  RESIL_IDEM_DROP = 1  /* close the connection without any response byte */
} resil_idem_action;

/* Hook: this request's handler ran and its effect and terminal state
 * (COMMITTED, or FAILED) have just committed together (rec is the stored
 * record); the response is not queued yet. May sleep. Never called for a
 * replay, nor when recovery completed the operation first. call->tx is
 * NULL. */
typedef resil_idem_action (*resil_idem_committed_fn)(void *user,
                                                     const resil_idem_call *call,
                                                     const resil_op_record *rec);

/* Hook: extra members for the status route's JSON object. Write them into
 * buf as `"name":value` pairs separated by commas, without braces and
 * without a leading comma, and return the length written (0 for none);
 * return -1, or a length >= len, to add nothing. */
typedef int (*resil_idem_status_fn)(void *user, const resil_op_record *rec,
                                    char *buf, size_t len);

/* Recommended MHD_OPTION_CONNECTION_TIMEOUT (seconds),
 * MHD_OPTION_CONNECTION_LIMIT and header timeout (seconds; see the top of
 * this file). Since 0.2. */
#define RESIL_IDEM_MHD_CONNECTION_TIMEOUT_S 30
#define RESIL_IDEM_MHD_CONNECTION_LIMIT 1024
#define RESIL_IDEM_MHD_HEADER_TIMEOUT_S 10

/* Log sink: one line (no newline) per failure worth an operator's eye: a
 * store failure with the store's message, a handler failure, damaged rows
 * skipped by recovery. Called on the serving thread. */
typedef void (*resil_idem_log_fn)(void *user, const char *line);

typedef struct resil_idem_mhd_config {
  /* Set by resil_idem_mhd_config_init(). Fields only appended. */
  size_t struct_size;
  /* Instance name, copied. Default "idem". */
  const char *name;
  /* Required. Not owned: must outlive the helper. */
  resil_store *store;
  /* Required: the wrapped handler, and its user pointer (also passed to
   * every hook). */
  resil_idem_handler_fn handler;
  void *user;
  /* Request header carrying the key; an HTTP token of 1..63 characters.
   * Copied. Default "Idempotency-Key". */
  const char *key_header;
  /* 1 (default): a request without a key is answered 400 and never run.
   * 0: it runs once under a generated key "srv-<32 hex digits>", sent back
   * in key_header so that the client can query its status. */
  int require_key;
  /* Seconds in Retry-After on 409, 500 and 503, 0..86400. Default 1. */
  uint32_t retry_after_s;
  /* Largest request body resil_idem_mhd_access() reads; a larger one is
   * answered 413 after it has been read. 0..1 GiB. Default 1 MiB. */
  size_t max_body_bytes;
  /* Path prefix of the status route ("/operations/" answers
   * GET /operations/{key}); must start with '/'. Copied. NULL: no status
   * route. Default "/operations/". */
  const char *status_prefix;
  /* Exact path of the recovery route (POST, optional query
   * older_than_ms=N and max=N), e.g. "/__recover". Copied. NULL (default):
   * no such route; call resil_idem_mhd_recover() instead. Expose it only
   * where every client may trigger recovery. */
  const char *recover_path;
  /* Recovery route defaults: re-drive PENDING operations last touched at
   * least this long ago (0..1 day; default 0: every PENDING operation; the
   * row lock makes racing a live request safe), at most recover_max_ops of
   * them per call (1..100000; default 100). */
  int64_t recover_older_than_ns;
  uint32_t recover_max_ops;
  /* Optional hooks (NULL for none). */
  resil_idem_pending_fn on_pending;
  resil_idem_committed_fn on_committed;
  resil_idem_status_fn status_extra;
  /* NULL = malloc/free. Used for the helper's own memory. */
  const resil_allocator *alloc;
  /* Since 0.2. Where failures are logged (NULL, the default: nowhere), and
   * its user pointer. */
  resil_idem_log_fn log;
  void *log_user;
  /* Since 0.2. The caller's deadline (deadline_mhd.h), or NULL (default):
   * none read. Not owned: must outlive the helper. For an operation
   * request (not the status or recovery routes) the helper reads it when
   * the request's headers are complete (resil_idem_mhd_access: before the
   * body is read; resil_idem_mhd_serve, which a server calls with the body
   * it read itself: when it is called, so the budget counts from there):
   * below the floor it answers the refusal (504 by default, counted in
   * deadline_refused and in the deadline helper's own counters) at once,
   * before the store is touched, so a refused request never creates a
   * PENDING operation, never runs the handler and never replays a stored
   * answer; otherwise the deadline goes to the handler in call->ctx. */
  resil_deadline_mhd *deadline;
} resil_idem_mhd_config;

/* Writes the documented defaults. NULL is a no-op. Since 0.2 (a macro
 * passing sizeof). */
RESIL_API void resil_idem_mhd_config_init_sized(resil_idem_mhd_config *cfg,
                                                size_t struct_size);
#define resil_idem_mhd_config_init(cfg)                                        \
  resil_idem_mhd_config_init_sized((cfg), sizeof(resil_idem_mhd_config))

/* Validates cfg and creates a helper. Returns RESIL_OK, RESIL_EINVAL (NULL
 * argument, a config not passed through resil_idem_mhd_config_init(), or a
 * field out of range: err names it), RESIL_ENOMEM. *out is
 * untouched on failure. Since 0.1. */
RESIL_API resil_status resil_idem_mhd_new(const resil_idem_mhd_config *cfg,
                                          resil_idem_mhd **out,
                                          resil_error *err);

/* Frees the helper (not the store). The daemon using it must be stopped
 * first. NULL is a no-op. Needs exclusive access. Since 0.1. */
RESIL_API void resil_idem_mhd_free(resil_idem_mhd *h);

/* The helper's name; NULL for a NULL handle. Since 0.1. */
RESIL_API const char *resil_idem_mhd_name(const resil_idem_mhd *h);

/* A complete MHD_AccessHandlerCallback with cls = the helper: reads the
 * request body (up to max_body_bytes) into per-request state kept in
 * *con_cls, then serves the request as resil_idem_mhd_serve() does (status
 * route, recovery route, or the operation). Register
 * resil_idem_mhd_completed() as MHD_OPTION_NOTIFY_COMPLETED to free that
 * state; a server with other routes may call both for the requests it
 * hands to the helper. Since 0.1. */
RESIL_API enum MHD_Result resil_idem_mhd_access(void *cls,
                                                struct MHD_Connection *conn,
                                                const char *url,
                                                const char *method,
                                                const char *version,
                                                const char *upload_data,
                                                size_t *upload_data_size,
                                                void **con_cls);

/* MHD_RequestCompletedCallback with cls = the helper: frees what
 * resil_idem_mhd_access() kept in *con_cls and sets it to NULL. *con_cls
 * must be NULL or the helper's: a server with other routes calls it only
 * for the requests it handed to resil_idem_mhd_access(). Since 0.1. */
RESIL_API void resil_idem_mhd_completed(void *cls, struct MHD_Connection *conn,
                                        void **con_cls,
                                        enum MHD_RequestTerminationCode toe);

/* Serves one fully read request for a server that reads bodies itself (the
 * last call of its access handler): the status route for GET
 * {status_prefix}{key}, the recovery route for {recover_path}, otherwise
 * the idempotent operation described at the top. path is the URL path
 * without query; body may be NULL when body_len is 0. request_user is
 * passed to the handler and hooks in call->request_user. Queues the
 * response on conn and returns what MHD_queue_response() returned, or
 * MHD_NO to close the connection without a response (RESIL_IDEM_DROP, or
 * out of memory). Since 0.1. */
RESIL_API enum MHD_Result resil_idem_mhd_serve(resil_idem_mhd *h,
                                               struct MHD_Connection *conn,
                                               const char *method,
                                               const char *path,
                                               const void *body, size_t body_len,
                                               void *request_user);

/* The recovery entry point: re-drives up to max_ops (1..100000) PENDING
 * operations last touched at least older_than_ns (0..1 day) ago through the
 * handler (call->recovering = 1, call->conn = NULL), each under the same
 * row lock and in the same transaction as a request's completion, so an
 * operation a live request completes at the same time still gets one
 * effect. *recovered (may be NULL) receives the number completed. Returns
 * RESIL_OK, RESIL_EINVAL (argument out of range), RESIL_EMISUSE (invalid
 * handle), or the store's RESIL_EIO / RESIL_ETIMEDOUT / RESIL_ENOMEM.
 * Damaged rows are skipped (see resil_store_recover) and logged. Since
 * 0.1. */
RESIL_API resil_status resil_idem_mhd_recover(resil_idem_mhd *h,
                                              int64_t older_than_ns,
                                              uint32_t max_ops,
                                              uint32_t *recovered);
/* The same with the store's report (recovered, failed, damaged and the
 * damaged keys); *report may be NULL. Since 0.2 (a macro passing sizeof). */
RESIL_API resil_status resil_idem_mhd_recover_report_sized(
    resil_idem_mhd *h, int64_t older_than_ns, uint32_t max_ops,
    resil_store_recovery *report, size_t struct_size);
#define resil_idem_mhd_recover_report(h, older, max, report)                  \
  resil_idem_mhd_recover_report_sized((h), (older), (max), (report),         \
                                      sizeof(resil_store_recovery))

/* MHD_OPTION_UNESCAPE_CALLBACK (cls unused): libmicrohttpd's percent-
 * decoding, except that %00 decodes to the byte 0xFF instead of a NUL that
 * would cut the path short (/operations/k%00x would ask for key "k"). 0xFF
 * is never a key character nor valid UTF-8, so the helper answers 400.
 * Since 0.2. */
RESIL_API size_t resil_idem_mhd_unescape(void *cls, struct MHD_Connection *conn,
                                         char *s);

/* Allocates n bytes that stay valid until the store has copied the
 * handler's response: for a body or headers built by the handler. NULL on
 * allocation failure (return RESIL_ENOMEM then). Only inside the handler.
 * Since 0.1. */
RESIL_API void *resil_idem_call_alloc(resil_idem_call *call, size_t n);

typedef struct resil_idem_mhd_stats {
  size_t struct_size;      /* bytes the library filled                   */
  uint64_t requests;       /* operation requests served (status and
                              recovery routes excluded)                 */
  uint64_t executed;       /* handler runs committed by a request        */
  uint64_t replayed;       /* stored responses replayed                  */
  uint64_t in_progress;    /* 409: the key was PENDING                   */
  uint64_t conflicts;      /* 422: another fingerprint                   */
  uint64_t rejected;       /* 400 and 413: no or invalid key, body size  */
  uint64_t handler_failed; /* handler errors: rolled back, left PENDING
                              (effects_in_store: nothing stored)        */
  uint64_t store_errors;   /* 500 and 503 caused by the store            */
  uint64_t dropped;        /* responses dropped by on_committed          */
  uint64_t status_queries; /* status route requests                      */
  uint64_t recovered;      /* operations completed by recovery           */
  /* Since 0.2: */
  uint64_t damaged;        /* damaged PENDING rows recovery skipped      */
  uint64_t deadline_refused; /* refused: the caller's budget was below
                              the deadline helper's floor (config
                              `deadline`); not in `requests`             */
} resil_idem_mhd_stats;

/* Snapshot of the counters, written up to struct_size. Returns RESIL_OK,
 * RESIL_EMISUSE (NULL handle), RESIL_EINVAL (out NULL). Since 0.2 (a macro
 * passing sizeof). */
RESIL_API resil_status resil_idem_mhd_get_stats_sized(const resil_idem_mhd *h,
                                                      resil_idem_mhd_stats *out,
                                                      size_t struct_size);
#define resil_idem_mhd_get_stats(h, out)                                       \
  resil_idem_mhd_get_stats_sized((h), (out), sizeof(resil_idem_mhd_stats))

#ifdef __cplusplus
}
#endif
#endif
