/* `resil upstream` as a fleet (issue 22): several processes (RESIL_BIN) on
 * one PostgreSQL operation store (RESIL_TEST_PG_URI, a fresh schema per
 * test through search_path), each on its own port. They start at once on a
 * fresh database (the payments table is created by one of them, the others
 * wait for it), and a key gets one effect whichever instance takes it,
 * replays it, or recovers it after another instance died with it PENDING;
 * an instance started with --recover while the others serve re-drives
 * nothing twice. Skipped (77) without RESIL_BIN or RESIL_TEST_PG_URI. */
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "test_util.h"

#ifdef RESIL_HAVE_STORE

#include <jansson.h>
#include <libpq-fe.h>

#include "resil/http.h"

extern char **environ;

static const char *resil_bin(void) {
  const char *b = getenv("RESIL_BIN");
  return b && *b && access(b, X_OK) == 0 ? b : NULL;
}

static const char *pg_base(void) {
  const char *u = getenv("RESIL_TEST_PG_URI");
  return u && *u ? u : NULL;
}

/* ---- the database: a schema of its own -------------------------------------- */

typedef struct db {
  char schema[64];
  char uri[512]; /* RESIL_TEST_PG_URI with search_path = schema */
  PGconn *pg;    /* the test's own connection, search_path = schema */
} db;

static void exec_ok(PGconn *pg, const char *sql) {
  PGresult *r = PQexec(pg, sql);
  ExecStatusType st = PQresultStatus(r);
  if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK)
    fail_msg("%s: %s", sql, PQerrorMessage(pg));
  PQclear(r);
}

static void db_open(db *d, const char *tag, int round) {
  memset(d, 0, sizeof *d);
  const char *base = pg_base();
  snprintf(d->schema, sizeof d->schema, "fleet_%s_%ld_%d", tag, (long)getpid(), round);
  snprintf(d->uri, sizeof d->uri, "%s%coptions=-csearch_path%%3D%s", base,
           strchr(base, '?') ? '&' : '?', d->schema);
  PGconn *admin = PQconnectdb(base);
  if (PQstatus(admin) != CONNECTION_OK) fail_msg("PostgreSQL: %s", PQerrorMessage(admin));
  char sql[256];
  snprintf(sql, sizeof sql, "DROP SCHEMA IF EXISTS %s CASCADE", d->schema);
  PQclear(PQexec(admin, "SET client_min_messages = warning"));
  exec_ok(admin, sql);
  snprintf(sql, sizeof sql, "CREATE SCHEMA %s", d->schema);
  exec_ok(admin, sql);
  PQfinish(admin);
}

static void db_connect(db *d) {
  d->pg = PQconnectdb(d->uri);
  if (PQstatus(d->pg) != CONNECTION_OK) fail_msg("PostgreSQL: %s", PQerrorMessage(d->pg));
}

static void db_close(db *d) {
  if (d->pg) PQfinish(d->pg);
  PGconn *admin = PQconnectdb(pg_base());
  char sql[256];
  snprintf(sql, sizeof sql, "DROP SCHEMA IF EXISTS %s CASCADE", d->schema);
  PQclear(PQexec(admin, "SET client_min_messages = warning"));
  exec_ok(admin, sql);
  PQfinish(admin);
}

static long query_long(db *d, const char *sql, const char *arg) {
  const char *args[1] = {arg};
  PGresult *r = PQexecParams(d->pg, sql, arg ? 1 : 0, NULL, arg ? args : NULL, NULL, NULL, 0);
  long n = -1;
  if (PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) == 1)
    n = atol(PQgetvalue(r, 0, 0));
  else
    fail_msg("%s: %s", sql, PQerrorMessage(d->pg));
  PQclear(r);
  return n;
}

static long effects(db *d, const char *key) {
  return query_long(d, "SELECT count(*) FROM payments WHERE op_key = $1", key);
}

static long duplicate_keys(db *d) {
  return query_long(d,
                    "SELECT count(*) FROM (SELECT op_key FROM payments"
                    " GROUP BY op_key HAVING count(*) > 1) AS dup",
                    NULL);
}

/* ---- the processes ---------------------------------------------------------- */

typedef struct child {
  pid_t pid;
  int out;  /* its stdout */
  int err;  /* its stderr, a temporary file */
  char base[64];
  long recovered; /* "recovered N" (--recover), -1 when not printed */
} child;

static int read_line(int fd, char *buf, size_t n, int ms) {
  size_t len = 0;
  while (len + 1 < n) {
    struct pollfd p = {.fd = fd, .events = POLLIN};
    if (poll(&p, 1, ms) <= 0) return -1;
    char c;
    if (read(fd, &c, 1) != 1) return -1;
    if (c == '\n') break;
    buf[len++] = c;
  }
  buf[len] = '\0';
  return 0;
}

/* Spawns `resil upstream --store URI` with the extra arguments
 * (NULL-terminated); child_ready reads its first lines. */
static void child_spawn(child *c, const char *uri, const char *const *extra) {
  memset(c, 0, sizeof *c);
  c->recovered = -1;
  int fds[2];
  assert_int_equal(pipe(fds), 0);
  fcntl(fds[0], F_SETFD, FD_CLOEXEC);
  fcntl(fds[1], F_SETFD, FD_CLOEXEC);
  char ep[] = "/tmp/resil-fleet-XXXXXX";
  c->err = mkstemp(ep);
  assert_true(c->err >= 0);
  unlink(ep);
  const char *argv[16] = {resil_bin(), "upstream", "--store", uri};
  size_t a = 4;
  for (; extra && *extra && a < 15; extra++) argv[a++] = *extra;
  argv[a] = NULL;
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, fds[1], STDOUT_FILENO);
  posix_spawn_file_actions_adddup2(&fa, c->err, STDERR_FILENO);
  int rc = posix_spawn(&c->pid, argv[0], &fa, NULL, (char *const *)argv, environ);
  posix_spawn_file_actions_destroy(&fa);
  close(fds[1]);
  assert_int_equal(rc, 0);
  c->out = fds[0];
}

/* What the child wrote on stderr (a static buffer). */
static const char *child_stderr(const child *c) {
  static char buf[2048];
  ssize_t n = pread(c->err, buf, sizeof buf - 1, 0);
  buf[n > 0 ? n : 0] = '\0';
  return buf;
}

/* 0 once it prints "upstream listening on ...", -1 when it ends first. */
static int child_ready(child *c) {
  char line[160];
  for (;;) {
    if (read_line(c->out, line, sizeof line, 30000) != 0) return -1;
    long n = 0;
    unsigned port = 0;
    if (sscanf(line, "recovered %ld", &n) == 1) {
      c->recovered = n;
      continue;
    }
    if (sscanf(line, "upstream listening on http://127.0.0.1:%u", &port) == 1) {
      snprintf(c->base, sizeof c->base, "http://127.0.0.1:%u", port);
      return 0;
    }
    return -1;
  }
}

/* Stops it (SIGTERM, then SIGKILL after 10 s); its exit: the signal that
 * ended it, 0, or 256 + status. */
static int child_stop(child *c) {
  int status = 0, r = -1;
  if (c->pid > 0) {
    kill(c->pid, SIGTERM);
    for (int waited = 0;; waited++) {
      pid_t w = waitpid(c->pid, &status, WNOHANG);
      if (w == c->pid) {
        r = WIFSIGNALED(status) ? WTERMSIG(status)
            : WEXITSTATUS(status) == 0 ? 0
                                       : 256 + WEXITSTATUS(status);
        break;
      }
      if (w < 0 || waited >= 10000) {
        kill(c->pid, SIGKILL);
        waitpid(c->pid, &status, 0);
        break;
      }
      test_sleep_ms(1);
    }
  }
  c->pid = -1;
  if (c->out >= 0) close(c->out);
  if (c->err >= 0) close(c->err);
  c->out = c->err = -1;
  return r;
}

/* ---- HTTP --------------------------------------------------------------------- */

static const resil_http_endpoint endpoints[] = {
    {.struct_size = sizeof(resil_http_endpoint), .name = "pay", .method = RESIL_HTTP_POST,
     .path = "/payments", .idempotency_key = RESIL_HTTP_KEY_SEND,
     .content_type = "application/json", .response_codec = RESIL_HTTP_CODEC_JSON},
    {.struct_size = sizeof(resil_http_endpoint), .name = "op", .path = "/operations/{key}",
     .response_codec = RESIL_HTTP_CODEC_JSON},
    {.struct_size = sizeof(resil_http_endpoint), .name = "recover", .method = RESIL_HTTP_POST,
     .path = "/__recover", .response_codec = RESIL_HTTP_CODEC_JSON},
};

static resil_http_client *client_for(const child *c) {
  resil_http_client_config cfg;
  resil_http_client_config_init(&cfg);
  cfg.base_url = c->base;
  cfg.endpoints = endpoints;
  cfg.endpoint_count = sizeof endpoints / sizeof endpoints[0];
  cfg.response_timeout_ns = MS(20000);
  resil_http_client *h = NULL;
  resil_error err;
  if (resil_http_client_new(&cfg, &h, &err) != RESIL_OK) fail_msg("client: %s", err.msg);
  return h;
}

/* POST /payments {"amount":7} with key: the HTTP status, and the payment id
 * of a 201 in *id (else -1). */
static int pay(resil_http_client *h, const char *key, long *id) {
  resil_http_args args;
  resil_http_args_init(&args);
  args.idempotency_key = key;
  args.body = "{\"amount\":7}";
  args.body_len = strlen(args.body);
  resil_http_response *r = NULL;
  resil_outcome o = resil_http_call(h, "pay", &args, NULL, NULL, &r);
  json_t *p = json_object_get(resil_http_response_json(r), "payment_id");
  *id = o.http_status == 201 && json_is_integer(p) ? (long)json_integer_value(p) : -1;
  resil_http_response_free(r);
  return o.http_status;
}

static const char *op_state(resil_http_client *h, const char *key, char *buf, size_t n) {
  resil_http_param p[] = {{"key", key}};
  resil_http_args args;
  resil_http_args_init(&args);
  args.params = p;
  args.param_count = 1;
  resil_http_response *r = NULL;
  (void)resil_http_call(h, "op", &args, NULL, NULL, &r);
  const char *s = json_string_value(json_object_get(resil_http_response_json(r), "state"));
  snprintf(buf, n, "%s", s ? s : "NONE");
  resil_http_response_free(r);
  return buf;
}

static long http_recover(resil_http_client *h) {
  resil_http_response *r = NULL;
  resil_outcome o = resil_http_call(h, "recover", NULL, NULL, NULL, &r);
  json_t *n = json_object_get(resil_http_response_json(r), "recovered");
  long v = o.http_status == 200 && json_is_integer(n) ? (long)json_integer_value(n) : -1;
  resil_http_response_free(r);
  return v;
}

static int skip_unless_ready(void) {
  if (!resil_bin() || !pg_base()) {
    print_message("skipped: needs RESIL_BIN and RESIL_TEST_PG_URI\n");
    return 1;
  }
  return 0;
}

/* ---- the cases -------------------------------------------------------------------- */

enum { FLEET = 4, ROUNDS = 5 };

/* Four processes started at once on a database that has no table yet, five
 * times: every one listens. Before the payments table was created under an
 * advisory lock, 18 of 40 such starts failed with "cannot create the
 * payments table: duplicate key value violates unique constraint
 * pg_type_typname_nsp_index" (two CREATE TABLE IF NOT EXISTS at once). */
static void upstreams_started_at_once_on_a_fresh_database_all_listen(void **state) {
  (void)state;
  if (skip_unless_ready()) skip();
  for (int round = 0; round < ROUNDS; round++) {
    db d;
    db_open(&d, "start", round);
    child c[FLEET];
    for (int i = 0; i < FLEET; i++) child_spawn(&c[i], d.uri, NULL);
    int bad = -1;
    for (int i = 0; i < FLEET; i++)
      if (child_ready(&c[i]) != 0 && bad < 0) bad = i;
    char why[2100] = "";
    if (bad >= 0) snprintf(why, sizeof why, "%s", child_stderr(&c[bad]));
    for (int i = 0; i < FLEET; i++) assert_int_equal(child_stop(&c[i]), 0);
    db_close(&d);
    if (bad >= 0) fail_msg("round %d: instance %d did not start: %s", round, bad, why);
  }
}

/* Three instances on one store, each key paid through two of them: one
 * effect per key, the same payment id from both. Instance A dies (SIGKILL)
 * with a key PENDING; B sees it PENDING, C recovers it, B replays it; an
 * instance started with --recover while the others serve finds nothing
 * left to re-drive. No key has two effects. */
static void a_fleet_on_one_store_gives_each_key_one_effect(void **state) {
  (void)state;
  if (skip_unless_ready()) skip();
  db d;
  db_open(&d, "keys", 0);
  child a, b, c;
  child_spawn(&a, d.uri, (const char *const[]){"--crash-at", "pending", NULL});
  child_spawn(&b, d.uri, NULL);
  child_spawn(&c, d.uri, NULL);
  child *all[] = {&a, &b, &c};
  for (int i = 0; i < 3; i++)
    if (child_ready(all[i])) fail_msg("instance %d did not start: %s", i, child_stderr(all[i]));
  db_connect(&d);
  resil_http_client *ha = client_for(&a), *hb = client_for(&b), *hc = client_for(&c);

  char key[32];
  for (int k = 0; k < 20; k++) {
    snprintf(key, sizeof key, "fleet-%d", k);
    long id1 = -1, id2 = -1;
    assert_int_equal(pay(k % 2 ? hb : hc, key, &id1), 201);
    assert_int_equal(pay(k % 2 ? hc : hb, key, &id2), 201); /* the other one: a replay */
    assert_true(id1 > 0);
    assert_int_equal(id1, id2);
    assert_int_equal(effects(&d, key), 1);
  }

  /* A dies at the new key's PENDING point: no answer, no effect yet. */
  long id = -1;
  assert_true(pay(ha, "fleet-crash", &id) <= 0);
  resil_http_client_free(ha);
  assert_int_equal(child_stop(&a), SIGKILL);
  char st[32];
  assert_string_equal(op_state(hb, "fleet-crash", st, sizeof st), "PENDING");
  assert_int_equal(effects(&d, "fleet-crash"), 0);
  assert_int_equal(http_recover(hc), 1);
  assert_string_equal(op_state(hb, "fleet-crash", st, sizeof st), "COMMITTED");
  long id_b = -1;
  assert_int_equal(pay(hb, "fleet-crash", &id_b), 201);
  assert_true(id_b > 0);
  assert_int_equal(effects(&d, "fleet-crash"), 1);

  /* A fourth instance's startup recovery while B and C serve. */
  child e;
  child_spawn(&e, d.uri, (const char *const[]){"--recover", NULL});
  if (child_ready(&e)) fail_msg("--recover instance: %s", child_stderr(&e));
  assert_int_equal(e.recovered, 0);
  resil_http_client *he = client_for(&e);
  long id_e = -1;
  assert_int_equal(pay(he, "fleet-3", &id_e), 201); /* paid through C before */
  assert_int_equal(effects(&d, "fleet-3"), 1);
  resil_http_client_free(he);

  assert_int_equal(duplicate_keys(&d), 0);
  assert_int_equal(query_long(&d, "SELECT count(*) FROM payments", NULL), 21);
  resil_http_client_free(hb);
  resil_http_client_free(hc);
  assert_int_equal(child_stop(&e), 0);
  assert_int_equal(child_stop(&b), 0);
  assert_int_equal(child_stop(&c), 0);
  db_close(&d);
}

int main(void) {
  if (skip_unless_ready()) return 77;
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(upstreams_started_at_once_on_a_fresh_database_all_listen),
      cmocka_unit_test(a_fleet_on_one_store_gives_each_key_one_effect),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

#else

int main(void) { return 77; }

#endif
