/* resil upstream: an idempotent payment service in its own OS process, for
 * crash experiments (DESIGN §7 I8). It serves through resil_idem_mhd on a
 * durable operation store:
 *
 *   POST /payments         Idempotency-Key required; body {"amount":N} with
 *                          N in 1..1000000. The effect, one row INSERTed into
 *                          payments(id, op_key, route, amount) of the store's
 *                          database (then --work-ms of work), commits in the
 *                          transaction that writes the terminal state.
 *                          201 {"key","payment_id",
 *                          "amount"} with Location; another body is a stored
 *                          business refusal (FAILED, 400, no effect).
 *   GET /operations/{key}  the operation's state (resil_idem_mhd).
 *   POST /__recover        re-drives PENDING operations: {"recovered":n}.
 *   GET /metrics           the Prometheus exposition (resil_metrics_mhd) of
 *                          the helper ("upstream") and the store
 *                          ("upstream_store"), and with --config FILE of
 *                          every instance of the registry loaded from FILE;
 *                          SIGHUP reloads FILE (config_serve.h).
 *
 * --crash-at makes the process kill itself with SIGKILL at one point of the
 * n-th new operation (--crash-nth): after PENDING is durable and before the
 * effect's transaction ("pending"); inside the transaction after the effect
 * was written and before the terminal state ("in-txn"); after the effect
 * and the terminal state committed and before the response ("effect"). A
 * restarted process on the same database recovers the operation: exactly
 * one effect, whatever the point. */
#include <stdio.h>

#include "cli.h"
#include "cmds.h"
#include "config_serve.h"

#if defined(RESIL_HAVE_FIXTURE) && defined(RESIL_HAVE_MHD)

#include <arpa/inet.h>
#include <errno.h>
#include <jansson.h>
#include <libpq-fe.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "resil/idem_mhd.h"
#include "resil/metrics_mhd.h"
#include "resil/resil.h"
#include "resil/store.h"

#define PROG "resil upstream"

typedef enum crash_point {
  CRASH_NONE,
  CRASH_PENDING, /* PENDING durable, effect not started */
  CRASH_IN_TXN,  /* effect written, transaction not committed */
  CRASH_EFFECT   /* effect and terminal state committed, no response yet */
} crash_point;

static const char *const crash_names[] = {"none", "pending", "in-txn",
                                          "effect"};

typedef struct upstream {
  resil_idem_mhd *idem;
  resil_metrics *metrics;
  /* MHD_CONNECTION_OPTION_TIMEOUT until a request's headers are complete,
   * and after (header_to <= idle_to; idem_mhd.h). */
  unsigned header_to, idle_to;
  crash_point crash_at;
  long crash_nth;
  atomic_long reached; /* new operations that reached crash_at */
  int verbose;
  long work_ms; /* --work-ms: the effect's time after its row is written */
} upstream;

/* Written from a hook that may run on any thread; the process dies right
 * after, so nothing else reads it. */
static upstream *the_upstream;

static void usage(FILE *out) {
  fprintf(out,
          "usage: " PROG " --store URI [--port N] [--bind ADDR]\n"
          "                      [--crash-at none|pending|in-txn|effect]\n"
          "                      [--crash-nth N] [--recover] [--verbose]\n"
          "                      [--timeout-s N] [--max-connections N]\n"
          "                      [--unsafe-commit-effect-early] [--config FILE]\n"
          "                      [--events FILE] [--work-ms N]\n"
          "Serves an idempotent POST /payments (Idempotency-Key required,\n"
          "body {\"amount\":N}), GET /operations/{key} and POST /__recover on\n"
          "the operation store URI (sqlite:/path/file.db or postgresql://...)\n"
          "until SIGINT or SIGTERM. Prints \"upstream listening on\n"
          "http://ADDR:PORT\" once it accepts connections. GET /metrics\n"
          "serves the Prometheus exposition of the helper and the store.\n"
          "  --store URI      operation store (created when missing)\n"
          "  --port N         TCP port, 0..65535; 0 (default) picks a free one\n"
          "  --bind ADDR      IPv4 loopback address; default 127.0.0.1\n"
          "  --crash-at P     SIGKILL this process at point P of a new\n"
          "                   operation: pending (PENDING durable, before the\n"
          "                   effect), in-txn (effect written, terminal state\n"
          "                   not committed), effect (both committed, before\n"
          "                   the response); default none\n"
          "  --crash-nth N    crash at the N-th new operation reaching P,\n"
          "                   1..1000000; default 1\n"
          "  --recover        re-drive every PENDING operation before serving\n"
          "                   and print \"recovered N\"; damaged rows are\n"
          "                   skipped and named on stderr\n"
          "  --timeout-s N    close a connection idle for N s, 1..3600;\n"
          "                   default 30 (a new connection that has not\n"
          "                   sent its request's headers: 10 s, or N if\n"
          "                   shorter)\n"
          "  --max-connections N  serve at most N connections at once (one\n"
          "                   thread each), 1..4096; default 1024\n"
          "  --config FILE    load a registry (resil config check FILE) and\n"
          "                   serve its instances' figures on GET /metrics;\n"
          "                   SIGHUP reloads FILE (a file with an error is\n"
          "                   reported on stderr and changes nothing)\n"
          "  --events FILE    with --config: append the event log (JSON lines:\n"
          "                   reloads, the configured breakers' transitions);\n"
          "                   SIGHUP reopens FILE (logrotate)\n"
          "  --work-ms N      each payment's effect works N ms more after its row\n"
          "                   is written, inside its transaction (a payment\n"
          "                   processor's latency), 0..10000; default 0\n"
          "  --verbose        say on stderr where the process kills itself\n"
          "  --unsafe-commit-effect-early\n"
          "                   TEST ONLY: commit the effect before the terminal\n"
          "                   state (the bug a crash test must catch)\n"
          "Exit status: 0 after a stop signal, 1 when the store or the server\n"
          "cannot start, 2 on bad arguments; killed by SIGKILL at a crash\n"
          "point.\n");
}

/* ---- crash points --------------------------------------------------------
 */

static void maybe_crash(crash_point at, const char *key) {
  upstream *u = the_upstream;
  if (!u || u->crash_at != at)
    return;
  if (atomic_fetch_add(&u->reached, 1) + 1 != u->crash_nth)
    return;
  if (u->verbose)
    fprintf(stderr, PROG ": SIGKILL at %s (key %s)\n", crash_names[at], key);
  fflush(stdout);
  kill(getpid(), SIGKILL);
  _exit(137); /* not reached: SIGKILL cannot be caught */
}

static void on_pending(void *user, const resil_idem_call *call) {
  (void)user;
  maybe_crash(CRASH_PENDING, call->key);
}

static resil_status fault_before_terminal(void *user, const char *key) {
  (void)user;
  maybe_crash(CRASH_IN_TXN, key);
  return RESIL_OK;
}

static resil_idem_action on_committed(void *user, const resil_idem_call *call,
                                      const resil_op_record *rec) {
  (void)user;
  (void)rec;
  maybe_crash(CRASH_EFFECT, call->key);
  return RESIL_IDEM_SEND;
}

/* The helper's failure lines: store errors with the store's message. */
static void log_line(void *user, const char *line) {
  (void)user;
  fprintf(stderr, PROG ": %s\n", line);
}

/* ---- the payment ---------------------------------------------------------
 */

static const char pay_headers_fmt[] =
    "Content-Type: application/json\r\nLocation: /payments/%lld\r\n";
static const char refusal_headers[] = "Content-Type: application/json\r\n";
static const char refusal_body[] =
    "{\"error\":\"body must be {\\\"amount\\\": 1..1000000}\"}";

/* The amount of a stored request body, or 0 when it is not one. */
static long long amount_of(const resil_op_record *pending) {
  json_error_t e;
  json_t *j = json_loadb(pending->request_body ? pending->request_body : "",
                         pending->request_body_len, 0, &e);
  json_t *a = json_object_get(j, "amount");
  long long v = json_is_integer(a) ? (long long)json_integer_value(a) : 0;
  json_decref(j);
  return v >= 1 && v <= 1000000 ? v : 0;
}

static resil_status insert_sqlite(sqlite3 *db, const char *key,
                                  long long amount, long long *id) {
  sqlite3_stmt *st = NULL;
  int ok = sqlite3_prepare_v2(db,
                              "INSERT INTO payments(op_key, route, amount) "
                              "VALUES (?1, 'payments', ?2)",
                              -1, &st, NULL) == SQLITE_OK;
  if (ok) {
    sqlite3_bind_text(st, 1, key, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 2, amount);
    ok = sqlite3_step(st) == SQLITE_DONE;
  }
  sqlite3_finalize(st);
  if (ok)
    *id = (long long)sqlite3_last_insert_rowid(db);
  return ok ? RESIL_OK : RESIL_EIO;
}

static resil_status insert_pg(PGconn *pg, const char *key, long long amount,
                              long long *id) {
  char a[32];
  snprintf(a, sizeof a, "%lld", amount);
  const char *args[2] = {key, a};
  PGresult *r = PQexecParams(pg,
                             "INSERT INTO payments(op_key, route, amount) "
                             "VALUES ($1, 'payments', $2) RETURNING id",
                             2, NULL, args, NULL, NULL, 0);
  int ok = PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) == 1;
  if (ok)
    *id = atoll(PQgetvalue(r, 0, 0));
  PQclear(r);
  return ok ? RESIL_OK : RESIL_EIO;
}

static resil_status pay(void *user, resil_idem_call *call,
                        resil_op_response *out) {
  long long amount = amount_of(call->pending);
  if (amount == 0) {
    /* A business refusal: stored FAILED and replayed, no effect. */
    out->status = 400;
    out->failed = 1;
    out->headers = refusal_headers;
    out->headers_len = sizeof refusal_headers - 1;
    out->body = refusal_body;
    out->body_len = sizeof refusal_body - 1;
    return RESIL_OK;
  }
  long long id = 0;
  sqlite3 *db = resil_store_txn_sqlite(call->tx);
  resil_status st =
      db ? insert_sqlite(db, call->key, amount, &id)
         : insert_pg((PGconn *)resil_store_txn_pg(call->tx), call->key, amount,
                     &id);
  if (st != RESIL_OK)
    return st;
  const upstream *u = user;
  if (u->work_ms > 0) {
    struct timespec ts = {u->work_ms / 1000, (u->work_ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
  }
  json_t *j = json_pack("{s:s,s:I,s:I}", "key", call->key, "payment_id",
                        (json_int_t)id, "amount", (json_int_t)amount);
  char *text = j ? json_dumps(j, JSON_COMPACT) : NULL;
  json_decref(j);
  size_t hcap = sizeof pay_headers_fmt + 24;
  char *body = text ? resil_idem_call_alloc(call, strlen(text) + 1) : NULL;
  char *hdrs = resil_idem_call_alloc(call, hcap);
  if (!body || !hdrs) {
    free(text);
    return RESIL_ENOMEM;
  }
  memcpy(body, text, strlen(text) + 1);
  free(text);
  int hn = snprintf(hdrs, hcap, pay_headers_fmt, id);
  out->status = 201;
  out->headers = hdrs;
  out->headers_len = (size_t)hn;
  out->body = body;
  out->body_len = strlen(body);
  return RESIL_OK;
}

/* ---- the payments table -------------------------------------------------
 */

static void quiet_notice(void *arg, const char *message) {
  (void)arg;
  (void)message;
}

/* Serialises the CREATE TABLE of `resil upstream` processes starting at
 * once on one PostgreSQL database (a fleet): two concurrent CREATE TABLE IF
 * NOT EXISTS of one table can both find it missing, and the second then
 * fails on the catalog's unique index ("duplicate key value violates unique
 * constraint pg_type_typname_nsp_index"). A key of its own, not the
 * store's migration lock. */
#define PAYMENTS_TABLE_LOCK "8243160126213387637"

/* No UNIQUE constraint on op_key: a duplicate effect must be visible as a
 * second row, not be turned into an error that hides it. */
static int create_table(const char *uri, const char *backend) {
  if (strcmp(backend, "sqlite") == 0) {
    sqlite3 *db = NULL;
    char *msg = NULL;
    int ok = sqlite3_open_v2(uri + strlen("sqlite:"), &db,
                             SQLITE_OPEN_READWRITE, NULL) == SQLITE_OK;
    if (ok) {
      sqlite3_busy_timeout(db, 5000);
      ok = sqlite3_exec(db,
                        "CREATE TABLE IF NOT EXISTS payments ("
                        " id INTEGER PRIMARY KEY, op_key TEXT NOT NULL,"
                        " route TEXT NOT NULL, amount INTEGER NOT NULL);"
                        "CREATE INDEX IF NOT EXISTS payments_op_key"
                        " ON payments(op_key);",
                        NULL, NULL, &msg) == SQLITE_OK;
    }
    if (!ok)
      fprintf(stderr, PROG ": cannot create the payments table: %s\n",
              msg ? msg : db ? sqlite3_errmsg(db) : "out of memory");
    sqlite3_free(msg);
    sqlite3_close(db);
    return ok ? 0 : -1;
  }
  PGconn *pg = PQconnectdb(uri);
  int ok = pg && PQstatus(pg) == CONNECTION_OK;
  if (ok) {
    /* "relation already exists, skipping" is not worth a line on stderr. */
    PQsetNoticeProcessor(pg, quiet_notice, NULL);
    /* One transaction (several statements in one PQexec): the lock, held
     * until it commits, then the table, looked up again under it. */
    PGresult *r = PQexec(pg, "BEGIN;"
                             "SELECT pg_advisory_xact_lock(" PAYMENTS_TABLE_LOCK ");"
                             "CREATE TABLE IF NOT EXISTS payments ("
                             " id BIGSERIAL PRIMARY KEY, op_key TEXT NOT NULL,"
                             " route TEXT NOT NULL, amount INTEGER NOT NULL);"
                             "CREATE INDEX IF NOT EXISTS payments_op_key"
                             " ON payments(op_key);"
                             "COMMIT;");
    ok = PQresultStatus(r) == PGRES_COMMAND_OK;
    PQclear(r);
  }
  /* libpq's message is quoted only once connected: a connection error
   * may quote the URI or its password (resil_store_open's, which connected
   * with the same URI a moment ago, are redacted). */
  if (!ok && pg && PQstatus(pg) == CONNECTION_OK)
    fprintf(stderr, PROG ": cannot create the payments table: %s", PQerrorMessage(pg));
  else if (!ok)
    fprintf(stderr, PROG ": cannot create the payments table: %s\n",
            pg ? "cannot connect to the store a second time" : "out of memory");
  PQfinish(pg);
  return ok ? 0 : -1;
}

/* ---- HTTP ---------------------------------------------------------------
 */

/* con_cls of a request for a path this server does not have, and of a
 * request for /metrics. */
static unsigned not_found_marker, metrics_marker;

static int served_by_helper(const char *url) {
  return strcmp(url, "/payments") == 0 ||
         strncmp(url, "/operations/", 12) == 0 ||
         strcmp(url, "/__recover") == 0;
}

/* A new connection has header_to to send its first request's headers
 * (a held half-request is closed then), the idle timeout after. */
static void on_connection(void *cls, struct MHD_Connection *conn,
                          void **socket_context,
                          enum MHD_ConnectionNotificationCode toe) {
  upstream *u = cls;
  (void)socket_context;
  if (toe == MHD_CONNECTION_NOTIFY_STARTED && u->header_to < u->idle_to)
    MHD_set_connection_option(conn, MHD_CONNECTION_OPTION_TIMEOUT,
                              u->header_to);
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn,
                                  const char *url, const char *method,
                                  const char *version, const char *upload,
                                  size_t *upload_size, void **con_cls) {
  upstream *u = cls;
  if (!*con_cls && u->header_to < u->idle_to) /* headers complete */
    MHD_set_connection_option(conn, MHD_CONNECTION_OPTION_TIMEOUT, u->idle_to);
  if (strcmp(url, RESIL_METRICS_MHD_PATH) == 0 &&
      (!*con_cls || *con_cls == &metrics_marker)) {
    if (!*con_cls) {
      *con_cls = &metrics_marker;
      return MHD_YES;
    }
    if (*upload_size) {
      *upload_size = 0; /* read and dropped */
      return MHD_YES;
    }
    return resil_metrics_mhd_serve(u->metrics, conn, method);
  }
  if (*con_cls != &not_found_marker && served_by_helper(url))
    return resil_idem_mhd_access(u->idem, conn, url, method, version, upload,
                                 upload_size, con_cls);
  if (!*con_cls) {
    *con_cls = &not_found_marker;
    return MHD_YES;
  }
  if (*upload_size) {
    *upload_size = 0; /* read and dropped */
    return MHD_YES;
  }
  static const char body[] = "{\"error\":\"no such route\"}";
  struct MHD_Response *r = MHD_create_response_from_buffer(
      sizeof body - 1, (void *)body, MHD_RESPMEM_PERSISTENT);
  if (!r)
    return MHD_NO;
  MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "application/json");
  enum MHD_Result rc = MHD_queue_response(conn, MHD_HTTP_NOT_FOUND, r);
  MHD_destroy_response(r);
  return rc;
}

static void on_completed(void *cls, struct MHD_Connection *conn,
                         void **con_cls, enum MHD_RequestTerminationCode toe) {
  upstream *u = cls;
  if (*con_cls == &not_found_marker || *con_cls == &metrics_marker) {
    *con_cls = NULL;
    return;
  }
  resil_idem_mhd_completed(u->idem, conn, con_cls, toe);
}

/* ---- arguments ---------------------------------------------------------- */

static int parse_long(const char *s, long min, long max, long *out) {
  if (!s || *s < '0' || *s > '9')
    return -1;
  errno = 0;
  char *end = NULL;
  long v = strtol(s, &end, 10);
  if (errno || *end || v < min || v > max)
    return -1;
  *out = v;
  return 0;
}

typedef struct options {
  const char *store;
  long port;
  const char *bind;
  crash_point crash_at;
  long crash_nth;
  int recover;
  int verbose;
  int unsafe;
  long timeout_s;
  long max_conns;
  const char *config;
  const char *events;
  long work_ms;
} options;

/* Options that take a value, in the order of the switch below. */
static const char *const value_options[] = {
    "--store",     "--port", "--bind", "--crash-at", "--crash-nth",
    "--timeout-s", "--max-connections", "--config", "--events", "--work-ms"};
#define N_VALUE_OPTIONS (sizeof value_options / sizeof value_options[0])

/* 0 or 2: exit with it (help printed, or bad arguments); -1: go on. */
static int parse_args(int argc, char **argv, options *o) {
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = NULL;
    if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
      usage(stdout);
      return 0;
    }
    if (strcmp(a, "--recover") == 0) {
      o->recover = 1;
      continue;
    }
    if (strcmp(a, "--verbose") == 0) {
      o->verbose = 1;
      continue;
    }
    if (strcmp(a, "--unsafe-commit-effect-early") == 0) {
      o->unsafe = 1;
      continue;
    }
    int which = -1, missing = 0;
    for (int k = 0; k < (int)N_VALUE_OPTIONS && which < 0; k++) {
      v = resil_cli_option_value(argc, argv, &i, value_options[k], &missing);
      if (v || missing)
        which = k;
    }
    if (which < 0) {
      fprintf(stderr, PROG ": unknown argument '%s' (see --help)\n", a);
      return 2;
    }
    if (missing) {
      fprintf(stderr, PROG ": %s: needs a value\n", value_options[which]);
      return 2;
    }
    switch (which) {
    case 0:
      o->store = v;
      break;
    case 1:
      if (parse_long(v, 0, 65535, &o->port) != 0) {
        fprintf(stderr, PROG ": --port: must be 0..65535, got '%s'\n", v);
        return 2;
      }
      break;
    case 2: {
      struct in_addr ad;
      if (strcmp(v, "localhost") != 0 &&
          (inet_pton(AF_INET, v, &ad) != 1 ||
           (ntohl(ad.s_addr) >> 24) != 127)) {
        fprintf(stderr,
                PROG ": --bind: must be an IPv4 loopback address "
                     "(127.0.0.0/8) or localhost, got '%s'\n",
                v);
        return 2;
      }
      o->bind = strcmp(v, "localhost") == 0 ? "127.0.0.1" : v;
      break;
    }
    case 3: {
      int found = 0;
      for (int k = 0; k < 4; k++)
        if (strcmp(v, crash_names[k]) == 0) {
          o->crash_at = (crash_point)k;
          found = 1;
        }
      if (!found) {
        fprintf(stderr,
                PROG ": --crash-at: must be none, pending, in-txn or effect, "
                     "got '%s'\n",
                v);
        return 2;
      }
      break;
    }
    case 5:
      if (parse_long(v, 1, 3600, &o->timeout_s) != 0) {
        fprintf(stderr, PROG ": --timeout-s: must be 1..3600, got '%s'\n", v);
        return 2;
      }
      break;
    case 6:
      if (parse_long(v, 1, 4096, &o->max_conns) != 0) {
        fprintf(stderr, PROG ": --max-connections: must be 1..4096, got '%s'\n",
                v);
        return 2;
      }
      break;
    case 7:
      o->config = v;
      break;
    case 8:
      o->events = v;
      break;
    case 9:
      if (parse_long(v, 0, 10000, &o->work_ms) != 0) {
        fprintf(stderr, PROG ": --work-ms: must be 0..10000, got '%s'\n", v);
        return 2;
      }
      break;
    default:
      if (parse_long(v, 1, 1000000, &o->crash_nth) != 0) {
        fprintf(stderr, PROG ": --crash-nth: must be 1..1000000, got '%s'\n",
                v);
        return 2;
      }
      break;
    }
  }
  if (!o->store) {
    fprintf(stderr, PROG ": --store: required (see --help)\n");
    return 2;
  }
  if (o->events && !o->config) {
    fprintf(stderr, PROG ": --events: needs --config\n");
    return 2;
  }
  return -1;
}

int resil_cmd_upstream(int argc, char **argv) {
  options o = {.port = 0,
               .bind = "127.0.0.1",
               .crash_nth = 1,
               .timeout_s = RESIL_IDEM_MHD_CONNECTION_TIMEOUT_S,
               .max_conns = RESIL_IDEM_MHD_CONNECTION_LIMIT};
  int prc = parse_args(argc, argv, &o);
  if (prc >= 0)
    return prc;

  /* Stop signals (and SIGHUP with --config) go to sigwait() below only;
   * the server's threads inherit the mask. */
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  if (o.config)
    sigaddset(&stop_signals, SIGHUP);
  if (pthread_sigmask(SIG_BLOCK, &stop_signals, NULL) != 0) {
    fprintf(stderr, PROG ": cannot block SIGINT/SIGTERM\n");
    return 1;
  }
  resil_registry *reg = NULL;
  resil_cli_reloader *reloader = NULL; /* SIGHUP's reloads */

  upstream u = {.crash_at = o.crash_at, .crash_nth = o.crash_nth,
                .verbose = o.verbose, .work_ms = o.work_ms,
                .idle_to = (unsigned)o.timeout_s,
                .header_to = (unsigned)o.timeout_s};
  if (u.header_to > RESIL_IDEM_MHD_HEADER_TIMEOUT_S)
    u.header_to = RESIL_IDEM_MHD_HEADER_TIMEOUT_S;
  the_upstream = &u;
  resil_store_config sc;
  resil_store_config_init(&sc);
  sc.pool_size = 8;
  sc.fault_before_terminal = fault_before_terminal;
  sc.unsafe_commit_effect_early = o.unsafe;
  resil_store *store = NULL;
  resil_error err;
  resil_error_clear(&err);
  if (resil_store_open(o.store, &sc, &store, &err) != RESIL_OK) {
    fprintf(stderr, PROG ": --store: %s\n", err.msg);
    return 1;
  }
  int rc = 1;
  struct MHD_Daemon *d = NULL;
  if (create_table(o.store, resil_store_backend(store)) != 0)
    goto out;
  resil_idem_mhd_config ic;
  resil_idem_mhd_config_init(&ic);
  ic.name = "upstream";
  ic.store = store;
  ic.handler = pay;
  ic.user = &u;
  ic.recover_path = "/__recover";
  ic.on_pending = on_pending;
  ic.on_committed = on_committed;
  ic.log = log_line;
  if (resil_idem_mhd_new(&ic, &u.idem, &err) != RESIL_OK) {
    fprintf(stderr, PROG ": %s\n", err.msg);
    goto out;
  }
  if (resil_metrics_new(NULL, &u.metrics) != RESIL_OK ||
      resil_idem_mhd_metrics_add(u.metrics, NULL, u.idem) != RESIL_OK ||
      resil_store_metrics_add(u.metrics, "upstream_store", store) != RESIL_OK) {
    fprintf(stderr, PROG ": cannot set up the metrics\n");
    goto out;
  }
  if (o.config && resil_cli_config_open(PROG, o.config, u.metrics, &reg) != 0)
    goto out;
  if (o.events && resil_cli_config_events(PROG, reg, o.events) != 0)
    goto out;
  if (reg && resil_cli_reloader_start(PROG, reg, o.config, &reloader) != 0)
    goto out;
  if (o.recover) {
    resil_store_recovery rep;
    resil_status st = resil_idem_mhd_recover_report(u.idem, 0, 100000, &rep);
    /* Every selected operation handled, some effects failed: those stay
     * PENDING for the next recovery (POST /__recover); serve the rest. A
     * store failure stops recovery before the end of its batch. */
    int all_handled =
        rep.selected == rep.recovered + rep.failed + rep.damaged;
    if (st != RESIL_OK && rep.failed > 0 && all_handled) {
      fprintf(stderr, PROG ": recovery: %u operation(s) failed and stay PENDING\n",
              (unsigned)rep.failed);
    } else if (st != RESIL_OK) {
      fprintf(stderr, PROG ": recovery: %s\n", resil_store_errmsg(store));
      goto out;
    }
    if (rep.damaged)
      fprintf(stderr,
              PROG ": recovery: skipped %u damaged PENDING row(s): %s\n",
              (unsigned)rep.damaged, rep.damaged_keys);
    printf("recovered %u\n", (unsigned)rep.recovered);
  }

  struct sockaddr_in sa;
  memset(&sa, 0, sizeof sa);
  sa.sin_family = AF_INET;
  sa.sin_port = htons((uint16_t)o.port);
  inet_pton(AF_INET, o.bind, &sa.sin_addr);
  d = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD |
                           MHD_USE_THREAD_PER_CONNECTION | MHD_USE_AUTO |
                           MHD_USE_ITC,
                       (uint16_t)o.port, NULL, NULL, on_request, &u,
                       MHD_OPTION_SOCK_ADDR, (const struct sockaddr *)&sa,
                       MHD_OPTION_NOTIFY_COMPLETED, on_completed, &u,
                       MHD_OPTION_NOTIFY_CONNECTION, on_connection, &u,
                       MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)(128 * 1024),
                       /* The recommended options of idem_mhd.h. */
                       MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)o.timeout_s,
                       MHD_OPTION_CONNECTION_LIMIT, (unsigned)o.max_conns,
                       MHD_OPTION_UNESCAPE_CALLBACK, resil_idem_mhd_unescape,
                       NULL, MHD_OPTION_END);
  if (!d) {
    fprintf(stderr, PROG ": cannot listen on %s:%ld\n", o.bind, o.port);
    goto out;
  }
  const union MHD_DaemonInfo *di =
      MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT);
  printf("upstream listening on http://%s:%u\n", o.bind,
         di ? (unsigned)di->port : (unsigned)o.port);
  fflush(stdout);
  for (;;) {
    int sig = 0;
    if (sigwait(&stop_signals, &sig) != 0)
      continue;
    if (sig != SIGHUP)
      break;
    (void)resil_cli_config_events_reopen(PROG); /* logrotate */
    resil_cli_reloader_kick(reloader); /* parsed on its thread */
  }
  rc = 0;
out:
  if (d)
    MHD_stop_daemon(d);
  /* A stop signal is never held up by a reload: one still running after
   * 250 ms is abandoned, and the process exits without freeing what it
   * uses (the store's writes are durable; a crash is as safe). */
  if (resil_cli_reloader_stop(reloader, 250) != 0) {
    fprintf(stderr, PROG ": stopped during a reload of %s: reload abandoned\n",
            o.config);
    /* _exit: no exit handler or library destructor may run while the
     * reload's thread is still inside a library (libpq, GSSAPI: ThreadSanitizer
     * saw their destructors race with it). */
    fflush(stdout);
    fflush(stderr);
    _exit(rc);
  }
  resil_cli_config_close(reg); /* before the collector it is in */
  the_upstream = NULL;
  resil_metrics_free(u.metrics);
  resil_idem_mhd_free(u.idem);
  resil_store_close(store);
  return rc;
}

#else

int resil_cmd_upstream(int argc, char **argv) {
  (void)argc;
  (void)argv;
  fprintf(stderr, "resil upstream: this resil was built without the operation "
                  "store or the fixture (libresil-store, libresil-mhd)\n");
  return 2;
}

#endif
