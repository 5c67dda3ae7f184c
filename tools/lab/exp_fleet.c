/* Lab experiment F5 (issue 22, DESIGN §8.4): a fleet. Four `resil upstream`
 * processes (the resil binary: lab_resil_bin) on one PostgreSQL store, a
 * throwaway server the experiment starts itself (lab_pg, lab_procs.h), and
 * one client whose `instances` are the four base URLs. 16 caller threads
 * send 1,000 keyed payments in waves of 16 every 32 ms (about 2 s in all:
 * traffic still flows when the restarted instance is back), each through
 * resil_http_call_keyed (POST /payments with its own Idempotency-Key and
 * body {"amount": n}, n = 1..1000 the payment's number; status endpoint GET
 * /operations/{key}; a retry of 4 attempts). Each payment's effect takes
 * 10 ms inside its transaction (`--work-ms 10`: a payment processor's
 * latency), so that a kill finds operations in the middle. Mid-run, once
 * 250 payments are done, 5 ms into a wave that sent it at least 3
 * attempts (inside the server by then), instance 0 is SIGKILLed (by its
 * PID, never restarted); once 450 are done, the same way, instance 1 is
 * stopped (SIGTERM) and started again on its port with --recover, which
 * re-drives what the killed instance left PENDING (the fleet's recovery: a
 * starting instance recovers its dead peers' operations). A payment whose
 * call did
 * not end 201 asks the status endpoint again (resil_http_operation_status:
 * the pattern http.h documents for a key kept after UNKNOWN) until its
 * operation is COMMITTED, and sends it again with the same key when the
 * store has no record of it. That happens: the killed process's last
 * INSERT of PENDING may still commit in PostgreSQL after the status query
 * another instance answered 404 (a 404 is never "did not happen"), and the
 * retry's write with the same key then gets 409 until the recovery. Every
 * wait is bounded (calls 15 s, the whole run 45 s).
 *
 * Effects are counted from the store, never from the client: the rows of
 * the payments table `resil upstream` writes in the operation's own
 * transaction, read with libpq. A payment is identified by its amount, so
 * effects = rows, duplicates = rows beyond the first per amount, lost =
 * payments with no row; the operations' states come from resil_store
 * (resil_store_status of each key, resil_store_count_pending).
 *
 * Which instance each attempt went to is read from the URL each attempt
 * carries (an interceptor); what a write ended with from the retry's
 * attempt listener. A write that ended UNKNOWN is reported there as
 * UNKNOWN, or, when a status query then read the stored result, as that
 * result with RESIL_OF_RECOVERED (what the keyed flow hands the retry to
 * end the call): both are writes whose answer was lost (a 5xx would be
 * too; `server_errors` counts the unrecovered ones, 0 here). A payment
 * with such a write is resolved when it ends paid after a status query on
 * another instance than that write's: either the query read the stored
 * result (RESIL_OF_RECOVERED) or said the store had no record and the
 * retry sent the write again with the same key.
 *
 * Wrong variant: the same fleet and kills with a client that sends every
 * attempt under a new key and asks no status (what a client that retries
 * UNKNOWN without its key does): the writes that ended UNKNOWN but ran, and
 * those the restarted instance recovered, run twice; no_duplicates fails. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lab_families.h"
#include "lab_ops.h"
#include "lab_procs.h"
#include "lab_result.h"

#if defined(RESIL_HAVE_HTTP) && defined(RESIL_HAVE_STORE) && defined(RESIL_HAVE_FIXTURE) && \
    defined(RESIL_HAVE_MHD)

#include <fcntl.h>
#include <libpq-fe.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "resil/http.h"
#include "resil/resil.h"
#include "resil/store.h"

#define MS INT64_C(1000000)

enum {
  N_INST = 4,
  PAYMENTS = 1000,
  CALLERS = 16,
  WAVE_MS = 32,     /* payments start in waves of CALLERS, one every 32 ms */
  WORK_MS = 10,     /* each payment's effect: `resil upstream --work-ms` */
  KILL_AT = 250,    /* payments done before instance 0 is killed */
  RESTART_AT = 450, /* ... before instance 1 is restarted */
  KILLED = 0,
  RESTARTED = 1,
  MAX_EV = 32 /* attempts recorded per payment */
};

/* ---- the upstream processes --------------------------------------------- */

typedef struct up_proc {
  pid_t pid; /* 0: not running */
  int out;   /* read end of its stdout, -1 */
  int port;
  long recovered; /* --recover's "recovered N", -1 without */
} up_proc;

/* One line of fd within ms; 0, or -1 (timeout, EOF). */
static int read_line(int fd, char *buf, size_t n, int ms) {
  size_t len = 0;
  int64_t until = lab_now_ns() + ms * MS;
  while (len + 1 < n) {
    int left = (int)((until - lab_now_ns()) / MS);
    struct pollfd p = {.fd = fd, .events = POLLIN};
    if (left <= 0 || poll(&p, 1, left) <= 0) return -1;
    char c;
    if (read(fd, &c, 1) != 1) return -1;
    if (c == '\n') break;
    buf[len++] = c;
  }
  buf[len] = '\0';
  return 0;
}

/* The process's end: its signal, 0 for exit status 0, 256 + status for
 * another, -1 when it had to be killed after ms. Reaped. */
static int up_wait(up_proc *p, int ms) {
  int status = 0, res = -1;
  if (p->pid <= 0) return -1;
  for (int64_t until = lab_now_ns() + ms * MS;;) {
    pid_t w = waitpid(p->pid, &status, WNOHANG);
    if (w == p->pid) {
      res = WIFSIGNALED(status) ? WTERMSIG(status)
            : WEXITSTATUS(status) == 0 ? 0
                                       : 256 + WEXITSTATUS(status);
      break;
    }
    if (w < 0 || lab_now_ns() >= until) {
      kill(p->pid, SIGKILL);
      waitpid(p->pid, &status, 0);
      break;
    }
    struct timespec ts = {0, 2 * MS};
    nanosleep(&ts, NULL);
  }
  p->pid = 0;
  if (p->out >= 0) close(p->out);
  p->out = -1;
  return res;
}

/* `resil upstream --store uri --port port --work-ms WORK_MS [--recover]`,
 * killed by the kernel if this thread dies; 0 once it listens (p->port its
 * port), -1 with nothing left running. */
static int up_start_once(up_proc *p, const char *bin, const char *uri, int port, int recover) {
  p->pid = 0;
  p->out = -1;
  p->recovered = -1;
  int fds[2];
  if (pipe(fds) != 0) return -1;
  fcntl(fds[0], F_SETFD, FD_CLOEXEC);
  char port_s[16];
  snprintf(port_s, sizeof port_s, "%d", port);
  char work[16];
  snprintf(work, sizeof work, "%d", WORK_MS);
  char *argv[] = {(char *)bin, "upstream", "--store", (char *)uri, "--port", port_s,
                  "--work-ms", work, recover ? "--recover" : NULL, NULL};
  pid_t parent = getpid();
  pid_t pid = fork();
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent || dup2(fds[1], STDOUT_FILENO) < 0) _exit(126);
    execv(bin, argv);
    _exit(127);
  }
  close(fds[1]);
  if (pid < 0) {
    close(fds[0]);
    return -1;
  }
  p->pid = pid;
  p->out = fds[0];
  char line[160];
  unsigned got = 0;
  if (recover && (read_line(p->out, line, sizeof line, 20000) != 0 ||
                  sscanf(line, "recovered %ld", &p->recovered) != 1)) {
    up_wait(p, 0);
    return -1;
  }
  if (read_line(p->out, line, sizeof line, 20000) != 0 ||
      sscanf(line, "upstream listening on http://127.0.0.1:%u", &got) != 1 || got == 0) {
    up_wait(p, 0);
    return -1;
  }
  p->port = (int)got;
  return 0;
}

/* up_start_once, again for up to 5 s while the port is not free yet (a
 * restart on the same port). */
static int up_start(up_proc *p, const char *bin, const char *uri, int port, int recover) {
  for (int64_t until = lab_now_ns() + 5000 * MS;;) {
    if (up_start_once(p, bin, uri, port, recover) == 0) return 0;
    if (port == 0 || lab_now_ns() >= until) return -1;
    struct timespec ts = {0, 50 * MS};
    nanosleep(&ts, NULL);
  }
}

/* ---- what each payment did ---------------------------------------------- */

typedef struct pay_ev {
  char what;          /* 'W' a write attempt, 'S' a status query */
  unsigned char kind; /* the write's outcome kind, 0 until known */
  /* The write may have run and its answer was lost: it ended UNKNOWN, or
   * the retry's listener got its outcome as the stored result a status
   * query read (ANSWERED with RESIL_OF_RECOVERED: what the keyed flow
   * hands the retry to end the call; only a write whose class is in
   * status_query_classes, UNKNOWN or a 5xx, is followed by a query). */
  unsigned char lost_answer;
  int http_status; /* the write's, as reported */
  int port;        /* the instance it went to */
} pay_ev;

/* Written only by the thread running the payment (its interceptor and
 * listeners run on that thread), read after every caller joined. */
typedef struct pay_rec {
  pay_ev ev[MAX_EV];
  int nev;
  int paid;        /* ended 201, live or stored */
  int recovered;   /* resil_http_call_keyed's outcome carried RESIL_OF_RECOVERED */
  int followed_up; /* paid by a later resil_http_operation_status */
} pay_rec;

typedef struct fleet {
  int wrong;
  resil_http_client *c;
  resil_retry *retry;
  pay_rec *rec;
  atomic_int next, done, calls;
  int64_t start; /* the payments' start (CLOCK_MONOTONIC) */
  int64_t end;   /* the run's bound */
} fleet;

/* The payment number of a key: "f5-N" (one key per payment), "f5w-N-A"
 * (the wrong variant's key per attempt); -1 for another. */
static int key_payment(const char *key) {
  int n = -1;
  if (!key || (sscanf(key, "f5-%d", &n) != 1 && sscanf(key, "f5w-%d-", &n) != 1)) return -1;
  return n >= 0 && n < PAYMENTS ? n : -1;
}

static int url_port(const char *url) {
  const char *h = url ? strstr(url, "://") : NULL;
  const char *c = h ? strchr(h + 3, ':') : NULL;
  return c ? atoi(c + 1) : 0;
}

/* Before every attempt: which instance it goes to. */
static resil_status on_attempt_url(void *user, const resil_http_attempt_info *info,
                                   resil_http_headers *h) {
  (void)h;
  fleet *f = user;
  int status = strcmp(info->endpoint, "op_status") == 0;
  const char *key = info->idempotency_key;
  if (status) {
    const char *k = strstr(info->url, "/operations/");
    key = k ? k + strlen("/operations/") : NULL;
  }
  int n = key_payment(key);
  if (n < 0) return RESIL_OK;
  pay_rec *p = &f->rec[n];
  if (p->nev < MAX_EV)
    p->ev[p->nev++] = (pay_ev){.what = status ? 'S' : 'W', .port = url_port(info->url)};
  return RESIL_OK;
}

/* After a write attempt: its outcome, on the latest write not yet told. */
static void on_write(void *user, const resil_attempt_info *info) {
  fleet *f = user;
  int n = key_payment(info->idempotency_key);
  if (n < 0) return;
  pay_rec *p = &f->rec[n];
  for (int i = p->nev - 1; i >= 0; i--)
    if (p->ev[i].what == 'W' && p->ev[i].kind == 0) {
      p->ev[i].kind = (unsigned char)info->outcome.kind;
      p->ev[i].http_status = info->outcome.http_status;
      p->ev[i].lost_answer = info->outcome.kind == RESIL_UNKNOWN ||
                             (info->outcome.flags & RESIL_OF_RECOVERED) != 0;
      return;
    }
}

/* The client's own attempts: status queries, and the wrong variant's
 * unretried writes. */
static void on_client_attempt(void *user, const resil_attempt_info *info) {
  fleet *f = user;
  if (f->wrong) on_write(user, info);
}

static int paid(const resil_outcome *o) {
  return o->kind == RESIL_ANSWERED && o->http_status == 201;
}

static void sleep_ms(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * MS};
  nanosleep(&ts, NULL);
}

/* One payment with its key: the keyed call (status queries, the retry),
 * then, if it did not end paid, the status endpoint until the operation
 * is COMMITTED, the write again (same key) when the store has no record. */
static void pay_keyed(fleet *f, int n) {
  pay_rec *p = &f->rec[n];
  char key[32], body[48];
  snprintf(key, sizeof key, "f5-%d", n);
  snprintf(body, sizeof body, "{\"amount\":%d}", n + 1);
  resil_http_args args;
  resil_http_args_init(&args);
  args.body = body;
  args.body_len = strlen(body);
  args.idempotency_key = key;
  for (int round = 0; round < 3 && !p->paid && lab_now_ns() < f->end; round++) {
    resil_ctx ctx;
    resil_ctx_init(&ctx);
    resil_ctx_set_timeout_ns(&ctx, 15000 * MS);
    atomic_fetch_add(&f->calls, 1);
    resil_outcome o = resil_http_call_keyed(f->c, "pay", &args, f->retry, NULL, &ctx, NULL, NULL);
    if (paid(&o)) {
      p->paid = 1;
      p->recovered = (o.flags & RESIL_OF_RECOVERED) != 0;
      break;
    }
    /* Ask until it is known, at most 5 s. */
    for (int64_t until = lab_now_ns() + 5000 * MS; lab_now_ns() < until;) {
      resil_ctx q;
      resil_ctx_init(&q);
      resil_ctx_set_timeout_ns(&q, 2000 * MS);
      resil_http_op_state st = RESIL_HTTP_OP_NONE;
      resil_outcome s = resil_http_operation_status(f->c, "pay", key, NULL, NULL, &q, &st, NULL);
      if (st == RESIL_HTTP_OP_COMMITTED) {
        p->paid = paid(&s);
        p->followed_up = p->paid;
        break;
      }
      if (st == RESIL_HTTP_OP_FAILED || (st == RESIL_HTTP_OP_UNKNOWN && s.http_status == 404))
        break; /* not stored: the next round sends it again */
      sleep_ms(20);
    }
  }
}

/* The wrong variant: every attempt a new operation (a new key), no status
 * query; up to 4 attempts after NOT_SENT, UNKNOWN or a 5xx. */
static void pay_fresh_keys(fleet *f, int n) {
  pay_rec *p = &f->rec[n];
  char key[40], body[48];
  snprintf(body, sizeof body, "{\"amount\":%d}", n + 1);
  for (int a = 1; a <= 4 && lab_now_ns() < f->end; a++) {
    snprintf(key, sizeof key, "f5w-%d-%d", n, a);
    resil_http_args args;
    resil_http_args_init(&args);
    args.body = body;
    args.body_len = strlen(body);
    args.idempotency_key = key;
    resil_ctx ctx;
    resil_ctx_init(&ctx);
    resil_ctx_set_timeout_ns(&ctx, 15000 * MS);
    atomic_fetch_add(&f->calls, 1);
    resil_outcome o = resil_http_call(f->c, "pay", &args, NULL, &ctx, NULL);
    if (paid(&o)) {
      p->paid = 1;
      return;
    }
    if (o.kind == RESIL_ANSWERED && o.http_status < 500) return;
    sleep_ms(10);
  }
}

static void *caller(void *arg) {
  fleet *f = arg;
  for (;;) {
    int n = atomic_fetch_add(&f->next, 1);
    if (n >= PAYMENTS || lab_now_ns() >= f->end) break;
    int64_t at = f->start + (int64_t)(n / CALLERS) * WAVE_MS * MS, now = lab_now_ns();
    if (at > now) {
      struct timespec ts = {(time_t)((at - now) / 1000000000), (long)((at - now) % 1000000000)};
      nanosleep(&ts, NULL);
    }
    if (f->wrong)
      pay_fresh_keys(f, n);
    else
      pay_keyed(f, n);
    atomic_fetch_add(&f->done, 1);
  }
  return NULL;
}

/* ---- the store's view ---------------------------------------------------- */

/* One integer from a query, -1 on error. */
static long long pg_int(PGconn *pg, const char *sql) {
  PGresult *res = PQexec(pg, sql);
  long long v = -1;
  if (PQresultStatus(res) == PGRES_TUPLES_OK && PQntuples(res) == 1 && !PQgetisnull(res, 0, 0))
    v = atoll(PQgetvalue(res, 0, 0));
  PQclear(res);
  return v;
}

/* ---- the experiment ------------------------------------------------------ */

static const resil_http_endpoint fleet_endpoints[] = {
    RESIL_HTTP_ENDPOINT(.name = "op_status", .path = "/operations/{key}",
                        .response_codec = RESIL_HTTP_CODEC_JSON),
    RESIL_HTTP_ENDPOINT(.name = "pay", .method = RESIL_HTTP_POST, .path = "/payments",
                        .content_type = "application/json",
                        .response_codec = RESIL_HTTP_CODEC_JSON,
                        .idempotency_key = RESIL_HTTP_KEY_SEND, .status_endpoint = "op_status"),
};

/* Waits (at most ms) until done reaches n, then for a wave that sends
 * instance i at least 3 attempts, and returns 5 ms after that wave's start
 * (at most 2 s of waves): its attempts are then inside the server, most in
 * the middle of the operation (PENDING stored, the effect's 10 ms of work
 * running). The in-flight count seen then. */
static uint32_t wait_for(fleet *f, int n, size_t i, int ms) {
  int64_t until = lab_now_ns() + ms * MS;
  while (atomic_load(&f->done) < n && lab_now_ns() < until) sleep_ms(1);
  resil_http_instance_stats st;
  memset(&st, 0, sizeof st);
  for (until = lab_now_ns() + 2000 * MS; lab_now_ns() < until;) {
    int64_t wave = (lab_now_ns() - f->start) / (WAVE_MS * MS) + 1;
    int64_t at = f->start + wave * WAVE_MS * MS + 5 * MS, now = lab_now_ns();
    struct timespec ts = {0, (long)(at - now)};
    nanosleep(&ts, NULL);
    if (resil_http_client_instance_stats(f->c, i, &st) != RESIL_OK || st.in_flight >= 3) break;
  }
  return st.in_flight;
}

static int f5_run(lab_result *r, int wrong) {
  char bin[512];
  if (!lab_check(r, lab_resil_bin(bin, sizeof bin),
                 "F5 runs `resil upstream` as child processes: set RESIL_BIN to the resil binary"))
    return 0;
  int64_t t0 = lab_now_ns();
  lab_pg pg;
  if (lab_pg_start(r, &pg) != 0) return 0;
  up_proc up[N_INST];
  for (int i = 0; i < N_INST; i++) up[i] = (up_proc){.out = -1, .recovered = -1};
  fleet f = {.wrong = wrong, .end = t0 + 45000 * MS};
  f.rec = calloc(PAYMENTS, sizeof *f.rec);
  pthread_t th[CALLERS];
  int nth = 0, killed = 0, kill_sig = -1, stop_rc = -1, restarted = 0;
  uint32_t in_flight_at_kill = 0, in_flight_at_stop = 0;
  int done_at_kill = 0, done_at_restart = 0;
  uint64_t chosen_before_restart = 0, answered_before_restart = 0;
  int64_t run_ns = 0, restart_ns = 0;
  PGconn *db = NULL;
  resil_store *store = NULL;
  if (!lab_check(r, f.rec != NULL, "out of memory")) goto out;
  /* One after the other: the first makes the schema and the table. */
  char urls[N_INST][48];
  const char *instances[N_INST + 1];
  for (int i = 0; i < N_INST; i++) {
    if (!lab_check(r, up_start(&up[i], bin, pg.uri, 0, 0) == 0,
                   "resil upstream %d did not start on %s", i, pg.uri))
      goto out;
    snprintf(urls[i], sizeof urls[i], "http://127.0.0.1:%d", up[i].port);
    instances[i] = urls[i];
  }
  instances[N_INST] = NULL;

  resil_http_client_config cc;
  resil_http_client_config_init(&cc);
  lab_ops_client_config(r, &cc, "client");
  cc.instances = instances;
  cc.endpoints = fleet_endpoints;
  cc.endpoint_count = sizeof fleet_endpoints / sizeof fleet_endpoints[0];
  cc.max_connections = 2 * CALLERS;
  cc.max_connections_per_host = 2 * CALLERS;
  cc.connect_timeout_ns = 1000 * MS;
  cc.response_timeout_ns = 5000 * MS;
  /* A dead instance is out for 200 to 500 ms at a time, not 30 s: the
   * restarted one is soon back in the choice. */
  cc.eject_base_ns = 200 * MS;
  cc.eject_max_ns = 500 * MS;
  cc.status_poll_ns = 20 * MS;
  cc.pending_wait_max_ns = 5000 * MS;
  resil_http_interceptor ic = {on_attempt_url, &f};
  cc.interceptors = &ic;
  cc.interceptor_count = 1;
  cc.on_attempt = on_client_attempt;
  cc.on_attempt_user = &f;
  resil_error err;
  memset(&err, 0, sizeof err);
  if (!lab_check(r, resil_http_client_new(&cc, &f.c, &err) == RESIL_OK, "client: %s", err.msg))
    goto out;
  lab_ops_add_client(r, "client", f.c);
  resil_retry_config rc;
  resil_retry_config_init(&rc);
  rc.name = "pay_retry";
  rc.max_attempts = 4;
  rc.wait_ns = 10 * MS;
  rc.on_attempt = on_write;
  rc.on_attempt_user = &f;
  if (!lab_check(r, resil_retry_new(&rc, &f.retry, &err) == RESIL_OK, "retry: %s", err.msg))
    goto out;
  lab_ops_add_retry(r, "retry", f.retry);

  int64_t start = f.start = lab_now_ns();
  for (; nth < CALLERS; nth++)
    if (!lab_check(r, pthread_create(&th[nth], NULL, caller, &f) == 0, "pthread_create"))
      break;
  /* Mid-run, with calls in flight to it: SIGKILL instance 0. */
  in_flight_at_kill = wait_for(&f, KILL_AT, KILLED, 20000);
  done_at_kill = atomic_load(&f.done);
  if (kill(up[KILLED].pid, SIGKILL) == 0) {
    kill_sig = up_wait(&up[KILLED], 5000);
    killed = kill_sig == SIGKILL;
  }
  /* Later, with calls in flight to it: stop instance 1 and start it again
   * on its port, recovering what instance 0 left PENDING. */
  in_flight_at_stop = wait_for(&f, RESTART_AT, RESTARTED, 20000);
  done_at_restart = atomic_load(&f.done);
  int64_t stop_t0 = lab_now_ns();
  kill(up[RESTARTED].pid, SIGTERM);
  stop_rc = up_wait(&up[RESTARTED], 10000);
  int port1 = up[RESTARTED].port;
  restarted = up_start(&up[RESTARTED], bin, pg.uri, port1, 1) == 0;
  restart_ns = lab_now_ns() - stop_t0;
  lab_check(r, restarted, "resil upstream 1 did not start again on port %d", port1);
  {
    resil_http_instance_stats st;
    memset(&st, 0, sizeof st);
    resil_http_client_instance_stats(f.c, RESTARTED, &st);
    chosen_before_restart = st.chosen;
    answered_before_restart = st.outcomes[RESIL_ANSWERED];
  }
  for (int i = 0; i < nth; i++) pthread_join(th[i], NULL);
  run_ns = lab_now_ns() - start;

  /* ---- the store's view ---- */
  db = PQconnectdb(pg.uri);
  if (!lab_check(r, db && PQstatus(db) == CONNECTION_OK, "libpq: %s",
                 db ? PQerrorMessage(db) : "out of memory"))
    goto out;
  long long effects = pg_int(db, "SELECT count(*) FROM payments");
  long long distinct = pg_int(db, "SELECT count(DISTINCT amount) FROM payments "
                                  "WHERE amount BETWEEN 1 AND 1000");
  long long duplicates = effects >= 0 && distinct >= 0 ? effects - distinct : -1;
  long long lost = distinct >= 0 ? PAYMENTS - distinct : -1;
  uint64_t pending_left = UINT64_MAX;
  long committed = 0;
  if (lab_check(r, resil_store_open(pg.uri, NULL, &store, &err) == RESIL_OK, "store: %s",
                err.msg)) {
    if (resil_store_count_pending(store, &pending_left) != RESIL_OK) pending_left = UINT64_MAX;
    for (int n = 0; n < PAYMENTS && !wrong; n++) {
      char key[32];
      snprintf(key, sizeof key, "f5-%d", n);
      resil_op_record rec;
      resil_op_record_init(&rec);
      if (resil_store_status(store, key, &rec) == RESIL_OK && rec.state == RESIL_OP_COMMITTED)
        committed++;
      resil_op_record_clear(&rec);
    }
  }

  /* ---- the client's view ---- */
  long paid_n = 0, unknown_calls = 0, unknown_resolved = 0, recovered = 0, followed_up = 0;
  long unknown_writes = 0, status_same = 0, writes = 0, status_queries = 0, server_errors = 0;
  for (int n = 0; n < PAYMENTS; n++) {
    const pay_rec *p = &f.rec[n];
    paid_n += p->paid;
    recovered += p->recovered;
    followed_up += p->followed_up;
    int first_unknown = -1, resolved_elsewhere = 0, last_w = -1;
    for (int i = 0; i < p->nev; i++) {
      const pay_ev *e = &p->ev[i];
      if (e->what == 'W') {
        writes++;
        last_w = i;
        server_errors += e->kind == RESIL_ANSWERED && e->http_status >= 500;
        if (e->lost_answer) {
          unknown_writes++;
          if (first_unknown < 0) first_unknown = i;
        }
        continue;
      }
      status_queries++;
      /* The keyed flow's query right after an UNKNOWN write goes to
       * another instance (http.h); the later ones of pay_keyed's
       * follow-up know nothing of that write. */
      if (last_w >= 0 && last_w == i - 1 && p->ev[last_w].lost_answer &&
          e->port == p->ev[last_w].port)
        status_same++;
      if (first_unknown >= 0 && e->port != p->ev[first_unknown].port) resolved_elsewhere = 1;
    }
    if (first_unknown >= 0) {
      unknown_calls++;
      unknown_resolved += p->paid && resolved_elsewhere;
    }
  }
  json_t *insts = json_array();
  for (size_t i = 0; i < N_INST; i++) {
    resil_http_instance_stats st;
    memset(&st, 0, sizeof st);
    if (resil_http_client_instance_stats(f.c, i, &st) != RESIL_OK) continue;
    json_array_append_new(
        insts, json_pack("{s:i,s:s,s:I,s:I,s:I,s:I,s:I}", "port", up[i].port, "role",
                         i == KILLED ? "killed" : i == RESTARTED ? "restarted" : "up",
                         "attempts", (json_int_t)st.chosen, "answered",
                         (json_int_t)st.outcomes[RESIL_ANSWERED], "unknown",
                         (json_int_t)st.outcomes[RESIL_UNKNOWN], "not_sent",
                         (json_int_t)st.outcomes[RESIL_NOT_SENT], "ejections",
                         (json_int_t)st.ejections));
  }
  resil_http_instance_stats rst;
  memset(&rst, 0, sizeof rst);
  resil_http_client_instance_stats(f.c, RESTARTED, &rst);
  long long after_restart = (long long)(rst.chosen - chosen_before_restart);
  long long answered_after_restart =
      (long long)(rst.outcomes[RESIL_ANSWERED] - answered_before_restart);

  int payments = atomic_load(&f.done);
  lab_obs_int(r, "instances", N_INST);
  lab_obs_int(r, "payments", payments);
  lab_obs_int(r, "calls", atomic_load(&f.calls));
  lab_obs_int(r, "paid", paid_n);
  lab_obs_int(r, "effects", effects);
  lab_obs_int(r, "duplicates", duplicates);
  lab_obs_int(r, "lost", lost);
  lab_obs_int(r, "committed_operations", committed);
  lab_obs_int(r, "pending_left", pending_left == UINT64_MAX ? -1 : (long long)pending_left);
  lab_obs_int(r, "killed", killed);
  lab_obs_int(r, "done_at_kill", done_at_kill);
  lab_obs_int(r, "in_flight_at_kill", in_flight_at_kill);
  lab_obs_int(r, "restarted", restarted);
  lab_obs_int(r, "done_at_restart", done_at_restart);
  lab_obs_int(r, "in_flight_at_stop", in_flight_at_stop);
  lab_obs_int(r, "recovered_at_restart", up[RESTARTED].recovered);
  lab_obs_real(r, "restart_ms", (double)restart_ns / 1e6);
  lab_obs_int(r, "attempts_to_restarted_after", after_restart);
  lab_obs_int(r, "answered_by_restarted_after", answered_after_restart);
  lab_obs_int(r, "write_attempts", writes);
  lab_obs_int(r, "unknown_writes", unknown_writes);
  lab_obs_int(r, "server_errors", server_errors);
  lab_obs_int(r, "unknown_calls", unknown_calls);
  lab_obs_int(r, "unknown_resolved", unknown_resolved);
  lab_obs_int(r, "recovered", recovered);
  lab_obs_int(r, "followed_up", followed_up);
  lab_obs_int(r, "status_queries", status_queries);
  lab_obs_int(r, "status_same_instance", status_same);
  lab_obs_real(r, "run_ms", (double)run_ns / 1e6);
  lab_obs_json(r, "per_instance", insts);
  lab_obs_str(r, "outcome", paid_n == PAYMENTS ? "all paid" : "some unpaid");
  lab_summary(r,
              "%d payments by %d callers over %d `resil upstream` on one PostgreSQL in %.0f ms; "
              "instance 0 SIGKILLed at %d done (%u in flight), instance 1 restarted at %d "
              "(recovered %ld): %lld effects in the store, %lld duplicates, %lld lost; "
              "%ld calls saw UNKNOWN, %ld resolved through another instance's status "
              "(%ld stored results), %ld status queries",
              payments, CALLERS, N_INST, (double)run_ns / 1e6, done_at_kill, in_flight_at_kill,
              done_at_restart, up[RESTARTED].recovered, effects, duplicates, lost,
              unknown_calls, unknown_resolved, recovered, status_queries);

  lab_expect(r, "payments", payments == PAYMENTS, "%d payments made of %d", payments, PAYMENTS);
  lab_expect(r, "killed", killed == 1 && done_at_kill < PAYMENTS,
             "instance 0: %d (signal), killed at %d done", kill_sig, done_at_kill);
  lab_expect(r, "restarted", stop_rc == 0 && restarted && done_at_restart < PAYMENTS,
             "instance 1: stop %d, restarted %d at %d done", stop_rc, restarted,
             done_at_restart);
  lab_expect(r, "restarted_serves", answered_after_restart >= 1,
             "instance 1 answered %lld attempts after its restart (%lld sent to it)",
             answered_after_restart, after_restart);
  lab_expect(r, "exact_effects", effects == PAYMENTS, "%lld effects in the store, expected %d",
             effects, PAYMENTS);
  lab_expect(r, "no_duplicates", duplicates == 0, "%lld payments ran more than once",
             duplicates);
  lab_expect(r, "none_lost", lost == 0, "%lld payments have no effect", lost);
  lab_expect(r, "all_paid", paid_n == PAYMENTS, "%ld of %d payments ended paid", paid_n,
             PAYMENTS);
  lab_expect(r, "unknown_seen", unknown_calls >= 1,
             "no write ended UNKNOWN: the kill did not land on calls in flight");
  lab_expect(r, "every_unknown_resolved", unknown_resolved == unknown_calls,
             "%ld of %ld calls that saw UNKNOWN resolved through another instance's status",
             unknown_resolved, unknown_calls);
  lab_expect(r, "status_elsewhere", status_same == 0,
             "%ld status queries went to the instance whose write had ended UNKNOWN",
             status_same);
  lab_expect(r, "store_settled", pending_left == 0 && (wrong || committed == PAYMENTS),
             "%lld operations PENDING, %ld of %d COMMITTED",
             pending_left == UINT64_MAX ? -1LL : (long long)pending_left, committed, PAYMENTS);
  lab_check(r, run_ns < 60000 * MS, "the run took %.0f ms", (double)run_ns / 1e6);
out:
  if (db) PQfinish(db);
  lab_ops_add_store(r, "store", store);
  lab_capture(r);
  resil_store_close(store);
  resil_retry_free(f.retry);
  resil_http_client_free(f.c);
  for (int i = 0; i < N_INST; i++)
    if (up[i].pid > 0) {
      kill(up[i].pid, SIGTERM);
      up_wait(&up[i], 10000);
    }
  lab_pg_stop(&pg);
  free(f.rec);
  return r->pass;
}

static int f5(lab_result *r) { return f5_run(r, 0); }
static int f5_wrong(lab_result *r) { return f5_run(r, 1); }

const lab_experiment lab_fleet_experiments[] = {
    {"F5", "a fleet: 4 resil upstream on one PostgreSQL, one killed, one restarted", f5,
     f5_wrong, "a client that sends every attempt under a new key", "no_duplicates", 0},
    {NULL, NULL, NULL, NULL, NULL, NULL, 0}};

#else /* no HTTP, store, fixture or libresil-mhd */

const lab_experiment lab_fleet_experiments[] = {{NULL, NULL, NULL, NULL, NULL, NULL, 0}};

#endif
