/* The operation-store cases: keyed operations per second through
 * libresil-store against the raw ceiling of the same database, measured in
 * the same run, interleaved, one thread.
 *
 *   store_sqlite_keyed_ops  SQLite, a fresh file, WAL, synchronous=FULL;
 *   store_pg_keyed_ops      PostgreSQL (a throwaway server that
 *                           scripts/bench.sh starts with scripts/pg-start.sh
 *                           and passes as --pg-uri), synchronous_commit as
 *                           the server has it (on by default).
 *
 * Two sides per case:
 *
 *   raw       the ceiling: one single-row INSERT transaction per operation
 *             through a prepared statement, INSERT INTO t (k, v) VALUES
 *             (?, ?) with a fresh key and a 16-byte value. SQLite: BEGIN,
 *             INSERT, COMMIT (three prepared statements, the same pragmas as
 *             the store's connections: WAL, synchronous=FULL); PostgreSQL:
 *             the INSERT alone in autocommit (a transaction by itself) on
 *             one connection, PQexecPrepared.
 *   libresil  per operation a fresh key, resil_store_execute (must answer
 *             NEW: resil_store_begin then resil_store_complete, one
 *             transaction for both with effects_in_store) with a trivial
 *             effect: one
 *             INSERT of the same shape into the store database's own table
 *             t, through resil_store_txn_exec, inside the completion's
 *             transaction (so both sides do the same business write and
 *             libresil adds the bookkeeping; --store-effect direct runs it
 *             through the effect's own prepared statement on the
 *             transaction's connection instead, --store-effect none leaves
 *             the INSERT out),
 *             then the response 201, Content-Type application/json and a
 *             small JSON body. The request is POST /payments with a 14-byte
 *             body; one resil_op_record is reused for both calls, as a
 *             server would. The store has its default configuration (a pool
 *             of 4 connections, of which one thread uses one).
 *
 * Each side has its own database: SQLite, two files in one new mkdtemp
 * directory, so on the same file system, whose type (as `df -T` reports
 * it) is printed and recorded: on tmpfs fsync costs nothing and the figures
 * would not be durable-disk figures; PostgreSQL, two new schemas in the
 * server's database, dropped at the end (the file system of its data
 * directory is reported the same way). The SQLite directory is made in the
 * one holding resil_bench (under the build directory, on the disk that
 * holds the build) unless --store-dir names another.
 *
 * Rounds: after a warm-up of each side, each round runs one batch per side,
 * raw first in even rounds and libresil first in odd ones; a batch runs
 * operations one after another until it has lasted the batch time. Per side
 * the figure is the median of the rounds' ops/s. The ratio is the median of
 * the per-round ratios (libresil / raw), as in the HTTP cases: the two
 * batches of a round see about the same disk, whereas a shared disk that
 * slows down for a while can put the two sides' medians in different
 * regimes; the ratio of the two medians is recorded too. Thread CPU time
 * per operation is recorded per side (user + system: the part that is not
 * waiting for the disk). At the defaults (--runs 7, --min-run-ms 200): 32
 * rounds of 250 ms batches, about 17 s per backend.
 *
 * Commits per operation are counted, not assumed. SQLite: a WAL hook on
 * every connection involved counts the write transactions it commits (the
 * hook replaces SQLite's automatic checkpoint hook, so it runs the same
 * passive checkpoint at the same WAL size itself), and the WAL frames they
 * appended. PostgreSQL: the transaction ids assigned during each side's
 * batches (txid_current_snapshot's xmax, read between batches on a separate
 * connection), which counts the write transactions of every session: a
 * background write (autovacuum's analyze) may add a few.
 *
 * Each case runs in two modes, as two cases, each against its own raw side
 * in the same run and each with the same target:
 *   default (store_sqlite_keyed_ops, store_pg_keyed_ops): execute is begin
 *     then complete, two commits per operation, each flushed (begin: the
 *     PENDING row, durable before the effect runs; complete: the effect and
 *     the terminal state together); on PostgreSQL 2 round trips per
 *     operation against raw's 1 (recorded as round_trips_per_op_by_design):
 *     begin's INSERT ... ON CONFLICT DO NOTHING in its own BEGIN ...
 *     COMMIT (flushed) sent together with BEGIN and the row lock; the
 *     effect's INSERT (queued by resil_store_txn_exec), the terminal state
 *     and COMMIT, pipelined (3 with --store-effect direct: the effect's
 *     INSERT is a round trip of its own);
 *   effects_in_store (store_sqlite_keyed_ops_effects_in_store,
 *     store_pg_keyed_ops_effects_in_store): one transaction and one flushed
 *     commit per operation (the PENDING row, the effect's row and the
 *     terminal state, see store.h); on PostgreSQL 2 round trips: BEGIN and
 *     the INSERT, pipelined; the effect's queued INSERT, the terminal state
 *     and COMMIT, pipelined (3 with --store-effect direct).
 * Every statement is prepared once per connection. Their JSON says which
 * mode (store_mode, store_mode_means).
 *
 * Validity: every operation must succeed (begin NEW, completion COMMITTED
 * with the effect run exactly once and status 201); at the end the rows are
 * counted on both sides (SQLite: from a new connection to each file after
 * the sides closed theirs) and must equal the operations performed,
 * warm-up included, with every stored operation COMMITTED. */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bench.h"

#define CASE_SQLITE "store_sqlite_keyed_ops"
#define CASE_PG "store_pg_keyed_ops"
/* The same cases with resil_store_config.effects_in_store = 1 (each
 * operation one transaction with one flushed commit; the effect here writes
 * only in the store's transaction, as that mode requires), each against its
 * own raw side in the same run. */
#define CASE_SQLITE_EIS "store_sqlite_keyed_ops_effects_in_store"
#define CASE_PG_EIS "store_pg_keyed_ops_effects_in_store"

static const char measures_sqlite[] =
    "keyed operations per second, one thread: resil_store_execute (NEW: begin + "
    "complete) with a trivial effect (one INSERT into the store "
    "database's table t inside the completion's transaction, unless "
    "--store-effect none; response 201 with a small JSON body) on SQLite (fresh file, WAL, synchronous=FULL) "
    "vs the raw ceiling: BEGIN; INSERT INTO t(k, v) VALUES(?, ?); COMMIT "
    "through prepared statements with the same pragmas, in another file of "
    "the same directory; interleaved batches, ratio = libresil / raw";
static const char measures_pg[] =
    "the same keyed operations on PostgreSQL (throwaway local server, "
    "synchronous_commit as configured, on by default) vs the raw ceiling: "
    "autocommit single-row INSERT INTO t(k, v) VALUES($1, $2) through a "
    "prepared statement on one connection; each side in its own new schema; "
    "interleaved batches, ratio = libresil / raw";

/* Which store mode a case measures. */
typedef struct store_mode {
  const char *name;     /* the case */
  const char *measures; /* its description */
  int effects_in_store; /* resil_store_config.effects_in_store */
} store_mode;

static const char mode_default[] =
    "default: begin's commit (PENDING) and the completion's commit each flushed";
static const char mode_eis[] =
    "effects_in_store: resil_store_execute makes each operation one transaction (PENDING row, "
    "effect, terminal state) with one flushed commit";

static const store_mode modes_sqlite[2] = {{CASE_SQLITE, measures_sqlite, 0},
                                           {CASE_SQLITE_EIS, measures_sqlite, 1}};
static const store_mode modes_pg[2] = {{CASE_PG, measures_pg, 0},
                                       {CASE_PG_EIS, measures_pg, 1}};

static json_t *case_stub(const char *name, const char *measures,
                         const char *backend) {
  json_t *o = json_object();
  json_object_set_new(o, "name", json_string(name));
  json_object_set_new(o, "kind", json_string("store"));
  json_object_set_new(o, "backend", json_string(backend));
  json_object_set_new(o, "measures", json_string(measures));
  json_object_set_new(o, "target_ratio", json_real(BENCH_STORE_MIN_RATIO));
  int eis = strstr(name, "_effects_in_store") != NULL;
  json_object_set_new(o, "store_mode", json_string(eis ? "effects_in_store" : "default"));
  json_object_set_new(o, "store_mode_means", json_string(eis ? mode_eis : mode_default));
  return o;
}


/* Appends a case marked skipped with the reason, and says so. */
static void skipped_case(json_t *entries, const char *name, const char *measures,
                         const char *backend, const char *why) {
  json_t *o = case_stub(name, measures, backend);
  json_object_set_new(o, "skipped", json_string(why));
  json_array_append_new(entries, o);
  printf("  %-26s SKIPPED: %s\n", name, why);
  fflush(stdout);
}

#ifndef RESIL_BENCH_STORE

/* Built without libresil-store: the cases are recorded as skipped, with the
 * reason, so the report says they were not evaluated. */
int bench_run_store_cases(const bench_opts *opts, const char *json_path) {
  static const char why[] =
      "not built: libresil-store is missing (configure with -DRESIL_WITH_STORE=ON; "
      "needs sqlite3, libpq and libcrypto)";
  json_t *entries = json_array();
  for (int m = 0; m < 2; m++) {
    if (bench_selected(opts, modes_sqlite[m].name))
      skipped_case(entries, modes_sqlite[m].name, measures_sqlite, "sqlite", why);
    if (bench_selected(opts, modes_pg[m].name))
      skipped_case(entries, modes_pg[m].name, measures_pg, "postgresql", why);
  }
  if (!json_array_size(entries)) {
    json_decref(entries);
    return 0;
  }
  return bench_append_cases(json_path, entries, NULL, NULL);
}

#else

#include <libpq-fe.h>
#include <sqlite3.h>
#include <sys/stat.h>
#ifdef __linux__
#include <sys/vfs.h>
#endif

#include "resil/store.h"

#define MAX_ROUNDS 40
#define VALUE_LEN 16

static const unsigned char value16[VALUE_LEN] = "0123456789abcdef";
static const char request_body[] = "{\"amount\":100}";
static const char response_headers[] = "Content-Type: application/json\r\n";

/* libpq's messages end with a newline and may span lines: one line, for
 * the table. */
static void oneline(char *s) {
  for (char *p = s; *p; p++)
    if (*p == '\n' || *p == '\t') *p = ' ';
  size_t n = strlen(s);
  while (n && s[n - 1] == ' ') s[--n] = '\0';
}

/* What the libresil side's effect does, for the JSON. */
static json_t *effect_json(const bench_opts *opts) {
  switch (opts->store_effect_insert) {
  case BENCH_EFFECT_EXEC:
    return json_string("one INSERT INTO t (k, v) through resil_store_txn_exec, inside the "
                       "completion's transaction (PostgreSQL: sent with the terminal state "
                       "and COMMIT); response 201 with a small JSON body");
  case BENCH_EFFECT_DIRECT:
    return json_string("one INSERT INTO t (k, v) through the effect's own prepared statement "
                       "on the completion's connection, inside its transaction "
                       "(--store-effect direct: its own round trip on PostgreSQL); response "
                       "201 with a small JSON body");
  default:
    return json_string("no SQL (--store-effect none); response 201 with a small JSON body");
  }
}

/* ---- the plan ------------------------------------------------------------- */

typedef struct plan {
  int rounds;
  int64_t batch_ns;
  int64_t warm_ns;
} plan;

/* 4 * runs + 4 rounds (32 at the default 7 runs, 16 with --quick's 3) of
 * batches 1.25 times --min-run-ms (250 ms at the default 200 ms, at least
 * 100 ms), bounded so that both backends together stay under about 40 s.
 * Short batches and many rounds because the machine (and its disk) may be
 * shared: a burst of other I/O lands in a few rounds, which the median over
 * rounds sheds, and both sides of a round see about the same disk. */
static plan make_plan(const bench_opts *opts) {
  plan p;
  p.rounds = 4 * opts->runs + 4;
  if (p.rounds < 4) p.rounds = 4;
  if (p.rounds > MAX_ROUNDS) p.rounds = MAX_ROUNDS;
  p.batch_ns = opts->min_run_ns * 5 / 4;
  if (p.batch_ns < INT64_C(100000000)) p.batch_ns = INT64_C(100000000);
  if ((int64_t)p.rounds * p.batch_ns > INT64_C(8000000000))
    p.batch_ns = INT64_C(8000000000) / p.rounds;
  p.warm_ns = p.batch_ns < INT64_C(300000000) ? p.batch_ns : INT64_C(300000000);
  return p;
}

/* ---- the two sides, measured in rounds ---------------------------------- */

/* One operation: 1 when it succeeded; otherwise the side's state says why. */
typedef int (*op_fn)(void *state);
/* A cumulative count of committed write transactions (see the top). */
typedef uint64_t (*commits_fn)(void *ctx);

enum { SIDE_RAW = 0, SIDE_OURS = 1, NSIDES = 2 };
static const char *const side_key[NSIDES] = {"raw", "libresil"};

typedef struct side {
  op_fn op;
  void *state;
  const char *(*why)(void *state); /* why the last operation failed */
  uint64_t ops_total;              /* warm-up included: the rows expected */
  uint64_t ops_measured;
  uint64_t commits_measured;
  int64_t cpu_ns_measured; /* thread CPU time of the measured batches */
  double ops_per_s[MAX_ROUNDS];
} side;

typedef struct figures {
  int rounds;
  double ratio_per_round[MAX_ROUNDS];
  double ops_per_s[NSIDES];      /* median over rounds */
  double ratio;                  /* median of the per-round ratios */
  double ratio_of_medians;
  double commits_per_op[NSIDES]; /* NAN when not counted */
  double cpu_us_per_op[NSIDES];
} figures;

/* Runs operations until `ns` have passed; returns the ops/s, or -1 with
 * the failure in why. */
static double batch(side *sd, int64_t ns, uint64_t *done, char *why, size_t whylen) {
  int64_t t0 = bench_now_ns(), t = t0;
  uint64_t n = 0;
  while (t - t0 < ns) {
    if (!sd->op(sd->state)) {
      snprintf(why, whylen, "%s", sd->why(sd->state));
      sd->ops_total += n;
      return -1.0;
    }
    n++;
    t = bench_now_ns();
  }
  sd->ops_total += n;
  *done = n;
  return (double)n * 1e9 / (double)(t - t0);
}

/* Warm-up, then the rounds. commits (may be NULL) is read around every
 * batch, outside the timed part. Returns 0, or -1 with why. */
static int run_rounds(const plan *p, side *sides, commits_fn commits, void *cctx,
                      figures *f, char *why, size_t whylen) {
  memset(f, 0, sizeof *f);
  uint64_t done = 0;
  for (int i = 0; i < NSIDES; i++)
    if (batch(&sides[i], p->warm_ns, &done, why, whylen) < 0) return -1;
  for (int r = 0; r < p->rounds; r++) {
    for (int k = 0; k < NSIDES; k++) {
      int i = r % 2 ? NSIDES - 1 - k : k;
      uint64_t c0 = commits ? commits(cctx) : 0;
      int64_t cpu0 = bench_thread_cpu_ns();
      double ops = batch(&sides[i], p->batch_ns, &done, why, whylen);
      if (ops < 0) return -1;
      sides[i].cpu_ns_measured += bench_thread_cpu_ns() - cpu0;
      uint64_t c1 = commits ? commits(cctx) : 0;
      sides[i].ops_per_s[r] = ops;
      sides[i].ops_measured += done;
      sides[i].commits_measured += c1 - c0;
    }
    f->ratio_per_round[r] = sides[SIDE_OURS].ops_per_s[r] / sides[SIDE_RAW].ops_per_s[r];
    f->rounds = r + 1;
  }
  for (int i = 0; i < NSIDES; i++) {
    f->ops_per_s[i] = bench_median(sides[i].ops_per_s, f->rounds);
    f->commits_per_op[i] = commits && sides[i].ops_measured
                               ? (double)sides[i].commits_measured /
                                     (double)sides[i].ops_measured
                               : NAN;
    f->cpu_us_per_op[i] = sides[i].ops_measured ? (double)sides[i].cpu_ns_measured / 1e3 /
                                                      (double)sides[i].ops_measured
                                                : NAN;
  }
  f->ratio = bench_median(f->ratio_per_round, f->rounds);
  f->ratio_of_medians = f->ops_per_s[SIDE_OURS] / f->ops_per_s[SIDE_RAW];
  return 0;
}

/* Records the counts found in the files after a run under "verified" and,
 * when no failure is recorded yet, says in why where they differ from the
 * operations performed: every raw operation a row of t, every keyed
 * operation one COMMITTED row with status 201 (and, unless its effect is
 * none, one row of t). */
static void verify_rows(json_t *o, const side *sides, const bench_opts *opts,
                        int64_t raw_rows, int64_t ours_rows, int64_t ours_ops,
                        int64_t ours_done, char *why, size_t whylen) {
  json_t *v = json_object();
  json_object_set_new(v, "raw_rows", json_integer(raw_rows));
  json_object_set_new(v, "libresil_effect_rows", json_integer(ours_rows));
  json_object_set_new(v, "libresil_operations", json_integer(ours_ops));
  json_object_set_new(v, "libresil_operations_committed", json_integer(ours_done));
  json_object_set_new(o, "verified", v);
  int64_t want_raw = (int64_t)sides[SIDE_RAW].ops_total;
  int64_t want_ours = (int64_t)sides[SIDE_OURS].ops_total;
  int64_t want_effect = opts->store_effect_insert ? want_ours : 0;
  if (!why[0] && (raw_rows != want_raw || ours_rows != want_effect ||
                  ours_ops != want_ours || ours_done != want_ours))
    snprintf(why, whylen,
             "rows found after the run differ from the operations performed: raw %lld "
             "of %lld, libresil effect rows %lld of %lld, operations %lld, committed "
             "%lld of %lld",
             (long long)raw_rows, (long long)want_raw, (long long)ours_rows,
             (long long)want_effect, (long long)ours_ops, (long long)ours_done,
             (long long)want_ours);
}

static void figures_to_json(const figures *f, const side *sides, json_t *o) {
  json_object_set_new(o, "rounds", json_integer(f->rounds));
  json_object_set_new(o, "ops_per_s_libresil", json_real(f->ops_per_s[SIDE_OURS]));
  json_object_set_new(o, "ops_per_s_raw", json_real(f->ops_per_s[SIDE_RAW]));
  json_object_set_new(o, "ratio", json_real(f->ratio));
  json_object_set_new(o, "ratio_of_medians", json_real(f->ratio_of_medians));
  json_t *rr = json_array();
  for (int r = 0; r < f->rounds; r++) json_array_append_new(rr, json_real(f->ratio_per_round[r]));
  json_object_set_new(o, "runs_ratio", rr);
  for (int i = 0; i < NSIDES; i++) {
    char key[64];
    json_t *a = json_array();
    for (int r = 0; r < f->rounds; r++) json_array_append_new(a, json_real(sides[i].ops_per_s[r]));
    snprintf(key, sizeof key, "runs_ops_per_s_%s", side_key[i]);
    json_object_set_new(o, key, a);
    snprintf(key, sizeof key, "cpu_us_per_op_%s", side_key[i]);
    json_object_set_new(o, key, json_real(f->cpu_us_per_op[i]));
    snprintf(key, sizeof key, "commits_per_op_%s", side_key[i]);
    json_object_set_new(o, key, isnan(f->commits_per_op[i]) ? json_null()
                                                            : json_real(f->commits_per_op[i]));
    snprintf(key, sizeof key, "ops_measured_%s", side_key[i]);
    json_object_set_new(o, key, json_integer((json_int_t)sides[i].ops_measured));
    snprintf(key, sizeof key, "ops_total_%s", side_key[i]);
    json_object_set_new(o, key, json_integer((json_int_t)sides[i].ops_total));
  }
}

static void print_figures(const char *name, const figures *f, const char *where) {
  printf("  %-26s ops/s raw %8.0f  libresil %8.0f  ratio %.3f (target >= %.2f: %s; "
         "ratio of the medians %.3f)  commits/op raw %.2f libresil %.2f  CPU/op raw %.0f "
         "libresil %.0f us  [%d rounds; %s]\n",
         name, f->ops_per_s[SIDE_RAW], f->ops_per_s[SIDE_OURS], f->ratio,
         BENCH_STORE_MIN_RATIO, f->ratio >= BENCH_STORE_MIN_RATIO ? "met" : "NOT met",
         f->ratio_of_medians, f->commits_per_op[SIDE_RAW], f->commits_per_op[SIDE_OURS],
         f->cpu_us_per_op[SIDE_RAW], f->cpu_us_per_op[SIDE_OURS], f->rounds, where);
  fflush(stdout);
}

/* ---- file systems --------------------------------------------------------- */

/* The file system type of path as `df -T` reports it ("ext4", "tmpfs"),
 * or the statfs magic number when df cannot say. */
static void fs_type(const char *path, char *out, size_t n) {
  snprintf(out, n, "unknown");
  if (!strchr(path, '\'')) {
    char cmd[PATH_MAX + 64];
    snprintf(cmd, sizeof cmd, "df -PT -- '%s' 2>/dev/null", path);
    FILE *p = popen(cmd, "r");
    if (p) {
      char line[PATH_MAX + 256], dev[PATH_MAX + 1], type[64];
      int got = 0;
      if (fgets(line, sizeof line, p) && fgets(line, sizeof line, p) &&
          sscanf(line, "%4096s %63s", dev, type) == 2) {
        snprintf(out, n, "%s", type);
        got = 1;
      }
      pclose(p);
      if (got) return;
    }
  }
#ifdef __linux__
  struct statfs sf;
  if (statfs(path, &sf) == 0)
    snprintf(out, n, "statfs magic 0x%llx", (unsigned long long)sf.f_type);
#endif
}

static int fs_is_memory(const char *type) {
  return !strcmp(type, "tmpfs") || !strcmp(type, "ramfs") ||
         !strcmp(type, "statfs magic 0x1021994") || !strcmp(type, "statfs magic 0x858458f6");
}

/* The directory holding this executable (under the build directory), or
 * "." when it cannot be found. */
static void exe_dir(char *out, size_t n) {
  char buf[PATH_MAX];
  ssize_t len = readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (len <= 0) {
    snprintf(out, n, ".");
    return;
  }
  buf[len] = '\0';
  char *slash = strrchr(buf, '/');
  if (slash && slash != buf) *slash = '\0';
  snprintf(out, n, "%s", buf);
}

/* ---- keys and the libresil side, shared by both backends ------------------ */

/* libresil's side: the store, and the effect's state. */
typedef struct ours_state {
  resil_store *store;
  resil_op_record rec;
  uint64_t next;
  char key[64];
  char body[96];
  int body_len;
  int effect_runs;
  int insert; /* BENCH_EFFECT_*: how the effect inserts its row, if it does */
  char why[512];
  /* SQLite: per connection seen in an effect, its prepared INSERT. */
  struct sq_eff {
    sqlite3 *db;
    sqlite3_stmt *ins;
  } sq[RESIL_STORE_POOL_MAX];
  int nsq;
  /* PostgreSQL: the connections the INSERT was prepared on. */
  PGconn *pg[RESIL_STORE_POOL_MAX];
  int npg;
  /* Set by the SQLite backend: installs the commit counter on a connection
   * first seen in an effect. */
  int (*on_new_sqlite_conn)(void *ctx, sqlite3 *db, char *why, size_t whylen);
  void *on_new_ctx;
} ours_state;

static const char *ours_why(void *state) {
  return ((ours_state *)state)->why;
}

static resil_status effect_sqlite(ours_state *s, sqlite3 *db) {
  struct sq_eff *e = NULL;
  for (int i = 0; i < s->nsq; i++)
    if (s->sq[i].db == db) e = &s->sq[i];
  if (!e) {
    if (s->nsq == RESIL_STORE_POOL_MAX) {
      snprintf(s->why, sizeof s->why, "effect: more connections than the pool holds");
      return RESIL_EIO;
    }
    if (s->on_new_sqlite_conn &&
        s->on_new_sqlite_conn(s->on_new_ctx, db, s->why, sizeof s->why) != 0)
      return RESIL_EIO;
    e = &s->sq[s->nsq];
    if (s->insert == BENCH_EFFECT_DIRECT &&
        sqlite3_prepare_v3(db, "INSERT INTO t (k, v) VALUES (?1, ?2)", -1,
                           SQLITE_PREPARE_PERSISTENT, &e->ins, NULL) != SQLITE_OK) {
      snprintf(s->why, sizeof s->why, "effect: prepare: %s", sqlite3_errmsg(db));
      return RESIL_EIO;
    }
    e->db = db;
    s->nsq++;
  }
  if (s->insert != BENCH_EFFECT_DIRECT) return RESIL_OK; /* registered only */
  sqlite3_bind_text(e->ins, 1, s->key, -1, SQLITE_STATIC);
  sqlite3_bind_blob(e->ins, 2, value16, VALUE_LEN, SQLITE_STATIC);
  int rc = sqlite3_step(e->ins);
  sqlite3_reset(e->ins);
  if (rc != SQLITE_DONE) {
    snprintf(s->why, sizeof s->why, "effect: insert: %s", sqlite3_errmsg(db));
    return RESIL_EIO;
  }
  return RESIL_OK;
}

static resil_status effect_pg(ours_state *s, PGconn *pc) {
  if (s->insert != BENCH_EFFECT_DIRECT) return RESIL_OK;
  int prepared = 0;
  for (int i = 0; i < s->npg; i++) prepared |= s->pg[i] == pc;
  if (!prepared) {
    if (s->npg == RESIL_STORE_POOL_MAX) {
      snprintf(s->why, sizeof s->why, "effect: more connections than the pool holds");
      return RESIL_EIO;
    }
    PGresult *r = PQprepare(pc, "bench_effect_insert",
                            "INSERT INTO t (k, v) VALUES ($1, $2)", 2, NULL);
    int ok = r && PQresultStatus(r) == PGRES_COMMAND_OK;
    PQclear(r);
    if (!ok) {
      snprintf(s->why, sizeof s->why, "effect: prepare: %s", PQerrorMessage(pc));
      return RESIL_EIO;
    }
    s->pg[s->npg++] = pc;
  }
  const char *vals[2] = {s->key, (const char *)value16};
  int lens[2] = {0, VALUE_LEN};
  int fmts[2] = {0, 1};
  PGresult *r = PQexecPrepared(pc, "bench_effect_insert", 2, vals, lens, fmts, 0);
  int ok = r && PQresultStatus(r) == PGRES_COMMAND_OK;
  PQclear(r);
  if (!ok) {
    snprintf(s->why, sizeof s->why, "effect: insert: %s", PQerrorMessage(pc));
    return RESIL_EIO;
  }
  return RESIL_OK;
}

/* The business row through resil_store_txn_exec (the same text on both
 * backends but for the parameter markers). */
static resil_status effect_exec(ours_state *s, resil_store_txn *tx, int pg) {
  const char *vals[2] = {s->key, (const char *)value16};
  size_t lens[2] = {0, VALUE_LEN};
  int bin[2] = {0, 1};
  resil_status st = resil_store_txn_exec(
      tx, pg ? "INSERT INTO t (k, v) VALUES ($1, $2)" : "INSERT INTO t (k, v) VALUES (?1, ?2)",
      2, vals, lens, bin);
  if (st) snprintf(s->why, sizeof s->why, "effect: resil_store_txn_exec: %s", resil_status_name(st));
  return st;
}

/* The trivial effect: the business row, then the response 201. */
static resil_status bench_effect(void *user, resil_store_txn *tx,
                                 const resil_op_record *pending, resil_op_response *out) {
  ours_state *s = user;
  s->effect_runs++;
  if (strcmp(pending->key, s->key) != 0) {
    snprintf(s->why, sizeof s->why, "effect called for '%s', expected '%s'", pending->key,
             s->key);
    return RESIL_EIO;
  }
  sqlite3 *db = resil_store_txn_sqlite(tx);
  PGconn *pc = resil_store_txn_pg(tx);
  resil_status st = db ? effect_sqlite(s, db) : pc ? effect_pg(s, pc) : RESIL_EIO;
  if (!st && s->insert == BENCH_EFFECT_EXEC) st = effect_exec(s, tx, pc != NULL);
  if (!db && !pc) snprintf(s->why, sizeof s->why, "effect: the transaction has no connection");
  if (st) return st;
  s->body_len = snprintf(s->body, sizeof s->body, "{\"id\":\"%s\"}", s->key);
  out->status = 201;
  out->headers = response_headers;
  out->headers_len = sizeof response_headers - 1;
  out->body = s->body;
  out->body_len = (size_t)s->body_len;
  return RESIL_OK;
}

/* One keyed operation: execute (NEW, COMMITTED, effect run once). */
static int ours_op(void *state) {
  ours_state *s = state;
  snprintf(s->key, sizeof s->key, "op-%llu", (unsigned long long)s->next++);
  resil_op_request req = {.struct_size = sizeof(resil_op_request), .method = "POST", .path = "/payments", .body = request_body,
                          .body_len = sizeof request_body - 1};
  resil_op_begin_result br = 0;
  int runs0 = s->effect_runs;
  s->why[0] = '\0';
  resil_status st = resil_store_execute(s->store, s->key, &req, bench_effect, s, &br, &s->rec);
  if (st != RESIL_OK) {
    if (!s->why[0])
      snprintf(s->why, sizeof s->why, "resil_store_execute: %s: %s", resil_status_name(st),
               resil_store_errmsg(s->store));
    return 0;
  }
  if (br != RESIL_OP_NEW) {
    snprintf(s->why, sizeof s->why, "resil_store_execute answered %s for the fresh key '%s'",
             resil_op_begin_result_name(br), s->key);
    return 0;
  }
  if (s->effect_runs != runs0 + 1 || s->rec.state != RESIL_OP_COMMITTED ||
      s->rec.status != 201) {
    snprintf(s->why, sizeof s->why,
             "resil_store_execute of '%s': effect ran %d times, state %s, status %d",
             s->key, s->effect_runs - runs0, resil_op_state_name(s->rec.state),
             s->rec.status);
    return 0;
  }
  return 1;
}

static void ours_close(ours_state *s) {
  for (int i = 0; i < s->nsq; i++) sqlite3_finalize(s->sq[i].ins);
  s->nsq = 0;
  resil_store_close(s->store);
  s->store = NULL;
  resil_op_record_clear(&s->rec);
}

/* ---- SQLite ----------------------------------------------------------------- */

/* Counts a connection's commits and the WAL frames they appended, and
 * checkpoints as SQLite's default WAL hook does (passive, once the WAL
 * holds autocheckpoint frames), which installing a hook turns off. */
typedef struct wal_counter {
  uint64_t commits;
  uint64_t frames;
  int last_frames;
  int autocheckpoint;
} wal_counter;

static int wal_hook(void *ctx, sqlite3 *db, const char *zdb, int nframes) {
  wal_counter *w = ctx;
  w->commits++;
  /* nframes is the WAL's size after this commit; it starts again from 0
   * once a checkpoint has let the WAL be reset. */
  w->frames += (uint64_t)(nframes >= w->last_frames ? nframes - w->last_frames : nframes);
  w->last_frames = nframes;
  if (w->autocheckpoint > 0 && nframes >= w->autocheckpoint)
    (void)sqlite3_wal_checkpoint(db, zdb);
  return SQLITE_OK;
}

/* Reads one text or integer pragma into out. */
static int pragma_text(sqlite3 *db, const char *sql, char *out, size_t n) {
  sqlite3_stmt *q = NULL;
  int rc = sqlite3_prepare_v2(db, sql, -1, &q, NULL);
  if (rc == SQLITE_OK) rc = sqlite3_step(q);
  if (rc == SQLITE_ROW) {
    const unsigned char *t = sqlite3_column_text(q, 0);
    snprintf(out, n, "%s", t ? (const char *)t : "");
  }
  sqlite3_finalize(q);
  return rc == SQLITE_ROW ? 0 : -1;
}

/* Installs the counter on db, after checking the pragmas both sides must
 * have: journal_mode wal and synchronous FULL (2). */
static int wal_counter_install(wal_counter *w, sqlite3 *db, char *why, size_t whylen) {
  char mode[32] = "", sync[32] = "", ckpt[32] = "";
  if (pragma_text(db, "PRAGMA journal_mode", mode, sizeof mode) ||
      pragma_text(db, "PRAGMA synchronous", sync, sizeof sync) ||
      pragma_text(db, "PRAGMA wal_autocheckpoint", ckpt, sizeof ckpt)) {
    snprintf(why, whylen, "cannot read the pragmas: %s", sqlite3_errmsg(db));
    return -1;
  }
  if (sqlite3_stricmp(mode, "wal") != 0 || strcmp(sync, "2") != 0) {
    snprintf(why, whylen, "a connection has journal_mode=%s synchronous=%s, not wal and 2 "
             "(FULL)", mode, sync);
    return -1;
  }
  w->autocheckpoint = atoi(ckpt);
  sqlite3_wal_hook(db, wal_hook, w);
  return 0;
}

typedef struct sq_raw {
  sqlite3 *db;
  sqlite3_stmt *begin, *ins, *commit, *rollback;
  uint64_t next;
  char why[512];
  wal_counter wal;
} sq_raw;

static const char *sq_raw_why(void *state) {
  return ((sq_raw *)state)->why;
}

static int sq_step(sq_raw *r, sqlite3_stmt *q, const char *what) {
  int rc = sqlite3_step(q);
  sqlite3_reset(q);
  if (rc == SQLITE_DONE) return 1;
  snprintf(r->why, sizeof r->why, "raw %s: %s", what, sqlite3_errmsg(r->db));
  return 0;
}

static int sq_raw_op(void *state) {
  sq_raw *r = state;
  char key[64];
  snprintf(key, sizeof key, "op-%llu", (unsigned long long)r->next++);
  if (!sq_step(r, r->begin, "BEGIN")) return 0;
  sqlite3_bind_text(r->ins, 1, key, -1, SQLITE_STATIC);
  sqlite3_bind_blob(r->ins, 2, value16, VALUE_LEN, SQLITE_STATIC);
  if (!sq_step(r, r->ins, "INSERT") || !sq_step(r, r->commit, "COMMIT")) {
    if (!sqlite3_get_autocommit(r->db)) {
      sqlite3_step(r->rollback);
      sqlite3_reset(r->rollback);
    }
    return 0;
  }
  return 1;
}

static int open_db(const char *path, sqlite3 **db, char *why, size_t whylen) {
  /* The flags of the store's connections. */
  int rc = sqlite3_open_v2(path, db,
                           SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX,
                           NULL);
  if (rc != SQLITE_OK) {
    snprintf(why, whylen, "cannot open %s: %s", path,
             *db ? sqlite3_errmsg(*db) : sqlite3_errstr(rc));
    return -1;
  }
  return 0;
}

static int exec_sql(sqlite3 *db, const char *sql, char *why, size_t whylen) {
  char *msg = NULL;
  if (sqlite3_exec(db, sql, NULL, NULL, &msg) == SQLITE_OK) return 0;
  snprintf(why, whylen, "%s: %s", sql, msg ? msg : sqlite3_errmsg(db));
  sqlite3_free(msg);
  return -1;
}

static const char sq_table[] =
    "CREATE TABLE t (k TEXT PRIMARY KEY NOT NULL, v BLOB NOT NULL)";

static int sq_raw_open(sq_raw *r, const char *path, char *why, size_t whylen) {
  if (open_db(path, &r->db, why, whylen)) return -1;
  if (exec_sql(r->db, "PRAGMA journal_mode = WAL", why, whylen) ||
      exec_sql(r->db, "PRAGMA synchronous = FULL", why, whylen) ||
      exec_sql(r->db, sq_table, why, whylen))
    return -1;
  struct {
    sqlite3_stmt **q;
    const char *sql;
  } st[4] = {{&r->begin, "BEGIN"},
             {&r->ins, "INSERT INTO t (k, v) VALUES (?1, ?2)"},
             {&r->commit, "COMMIT"},
             {&r->rollback, "ROLLBACK"}};
  for (int i = 0; i < 4; i++) {
    if (sqlite3_prepare_v3(r->db, st[i].sql, -1, SQLITE_PREPARE_PERSISTENT, st[i].q,
                           NULL) != SQLITE_OK) {
      snprintf(why, whylen, "prepare %s: %s", st[i].sql, sqlite3_errmsg(r->db));
      return -1;
    }
  }
  return wal_counter_install(&r->wal, r->db, why, whylen);
}

static void sq_raw_close(sq_raw *r) {
  sqlite3_finalize(r->begin);
  sqlite3_finalize(r->ins);
  sqlite3_finalize(r->commit);
  sqlite3_finalize(r->rollback);
  sqlite3_close(r->db);
  memset(r, 0, sizeof *r);
}

/* libresil's connections: one counter for all of them (one thread uses one
 * connection at a time, so the hooks never run at once). */
typedef struct sq_ours_count {
  wal_counter wal;
  int connections;
} sq_ours_count;

static int sq_on_new_conn(void *ctx, sqlite3 *db, char *why, size_t whylen) {
  sq_ours_count *c = ctx;
  c->connections++;
  return wal_counter_install(&c->wal, db, why, whylen);
}

typedef struct sq_commit_ctx {
  sq_raw *raw;
  sq_ours_count *ours;
} sq_commit_ctx;

/* Both sides' commits: each batch runs only one side, so the sum's delta
 * around a batch is that side's. */
static uint64_t sq_commits(void *ctx) {
  sq_commit_ctx *c = ctx;
  return c->raw->wal.commits + c->ours->wal.commits;
}

/* count(*) of sql (one integer column) on a new connection to path. */
static int64_t sq_count(const char *path, const char *sql, char *why, size_t whylen) {
  sqlite3 *db = NULL;
  int64_t n = -1;
  if (sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL) == SQLITE_OK) {
    sqlite3_stmt *q = NULL;
    if (sqlite3_prepare_v2(db, sql, -1, &q, NULL) == SQLITE_OK &&
        sqlite3_step(q) == SQLITE_ROW)
      n = sqlite3_column_int64(q, 0);
    if (n < 0) snprintf(why, whylen, "verify %s: %s", path, sqlite3_errmsg(db));
    sqlite3_finalize(q);
  } else {
    snprintf(why, whylen, "verify: cannot open %s", path);
  }
  sqlite3_close(db);
  return n;
}

static void remove_db_files(const char *dir, const char *name) {
  static const char *const suffix[] = {"", "-wal", "-shm", "-journal"};
  char path[PATH_MAX];
  for (size_t i = 0; i < sizeof suffix / sizeof suffix[0]; i++) {
    snprintf(path, sizeof path, "%s/%s%s", dir, name, suffix[i]);
    (void)unlink(path);
  }
}

/* The store's configuration for a mode. */
static resil_store_config mode_config(const store_mode *m) {
  resil_store_config cfg;
  resil_store_config_init(&cfg);
  cfg.effects_in_store = m->effects_in_store;
  return cfg;
}

static void run_sqlite(const bench_opts *opts, const plan *p, const store_mode *m,
                       json_t *entries) {
  json_t *o = case_stub(m->name, m->measures, "sqlite");
  json_object_set_new(o, "effect", effect_json(opts));
  char why[640] = "";
  char base[PATH_MAX], dir[PATH_MAX] = "", raw_path[PATH_MAX], ours_path[PATH_MAX];
  char fstype[128] = "unknown";
  if (opts->store_dir)
    snprintf(base, sizeof base, "%s", opts->store_dir);
  else
    exe_dir(base, sizeof base);
  int have_dir = 0;
  if (snprintf(dir, sizeof dir, "%s/resil-store-bench.XXXXXX", base) >= (int)sizeof dir)
    snprintf(why, sizeof why, "the directory name is too long: %.300s", base);
  else if (!(have_dir = mkdtemp(dir) != NULL))
    snprintf(why, sizeof why, "mkdtemp in %.300s: %s", base, strerror(errno));
  sq_raw raw;
  memset(&raw, 0, sizeof raw);
  ours_state *ours = calloc(1, sizeof *ours);
  sq_ours_count oc;
  memset(&oc, 0, sizeof oc);
  figures f;
  memset(&f, 0, sizeof f);
  side sides[NSIDES];
  memset(sides, 0, sizeof sides);
  if (!why[0] && !ours) snprintf(why, sizeof why, "out of memory");
  if (!why[0]) {
    fs_type(dir, fstype, sizeof fstype);
    json_object_set_new(o, "directory", json_string(dir));
    json_object_set_new(o, "filesystem", json_string(fstype));
    json_object_set_new(o, "sqlite_version", json_string(sqlite3_libversion()));
    json_object_set_new(o, "pragmas",
                        json_string(m->effects_in_store
                                        ? "journal_mode=WAL, synchronous=FULL (both sides, "
                                          "checked on every connection in its completion or "
                                          "raw transaction); libresil's begin commits under "
                                          "synchronous=NORMAL (effects_in_store)"
                                        : "journal_mode=WAL, synchronous=FULL (both sides, "
                                          "checked on every connection)"));
    printf("  SQLite %s: fresh files in %s (file system: %s)\n", sqlite3_libversion(), dir,
           fstype);
    if (fs_is_memory(fstype))
      printf("  WARNING: %s is in memory: fsync costs nothing there, so these are not "
             "durable-disk figures\n", dir);
    fflush(stdout);
    snprintf(raw_path, sizeof raw_path, "%s/raw.db", dir);
    snprintf(ours_path, sizeof ours_path, "%s/store.db", dir);
    sq_raw_open(&raw, raw_path, why, sizeof why);
  }
  if (!why[0]) {
    /* The effect's table, created before the store opens the file (which
     * adds its own schema). */
    sqlite3 *db = NULL;
    if (open_db(ours_path, &db, why, sizeof why) == 0 &&
        exec_sql(db, "PRAGMA journal_mode = WAL", why, sizeof why) == 0)
      (void)exec_sql(db, sq_table, why, sizeof why);
    sqlite3_close(db);
  }
  if (!why[0]) {
    char uri[PATH_MAX + 16];
    snprintf(uri, sizeof uri, "sqlite:%s", ours_path);
    resil_error err;
    resil_store_config cfg = mode_config(m);
    resil_status st = resil_store_open(uri, &cfg, &ours->store, &err);
    if (st != RESIL_OK)
      snprintf(why, sizeof why, "resil_store_open: %s: %s", resil_status_name(st), err.msg);
    resil_op_record_init(&ours->rec);
    ours->insert = opts->store_effect_insert;
    ours->on_new_sqlite_conn = sq_on_new_conn;
    ours->on_new_ctx = &oc;
  }
  if (!why[0]) {
    sides[SIDE_RAW] = (side){.op = sq_raw_op, .state = &raw, .why = sq_raw_why};
    sides[SIDE_OURS] = (side){.op = ours_op, .state = ours, .why = ours_why};
    sq_commit_ctx cc = {&raw, &oc};
    run_rounds(p, sides, sq_commits, &cc, &f, why, sizeof why);
    json_object_set_new(o, "libresil_connections_used", json_integer(oc.connections));
    /* WAL frames per operation over the whole run (warm-up included). */
    if (sides[SIDE_RAW].ops_total && sides[SIDE_OURS].ops_total) {
      json_object_set_new(o, "wal_frames_per_op_raw",
                          json_real((double)raw.wal.frames / (double)sides[SIDE_RAW].ops_total));
      json_object_set_new(o, "wal_frames_per_op_libresil",
                          json_real((double)oc.wal.frames /
                                    (double)sides[SIDE_OURS].ops_total));
    }
  }
  /* Close both sides, then count what is durable in each file. */
  if (ours && ours->store) ours_close(ours);
  if (raw.db) sq_raw_close(&raw);
  if (!why[0]) {
    int64_t raw_rows = sq_count(raw_path, "SELECT count(*) FROM t", why, sizeof why);
    int64_t ours_rows = sq_count(ours_path, "SELECT count(*) FROM t", why, sizeof why);
    int64_t ours_ops = sq_count(ours_path, "SELECT count(*) FROM resil_operations", why,
                                sizeof why);
    int64_t ours_done = sq_count(ours_path,
                                 "SELECT count(*) FROM resil_operations WHERE state = 2 "
                                 "AND status = 201", why, sizeof why);
    verify_rows(o, sides, opts, raw_rows, ours_rows, ours_ops, ours_done, why, sizeof why);
  }
  if (f.rounds) figures_to_json(&f, sides, o);
  json_object_set_new(o, "commits_per_op_libresil_by_design",
                      json_integer(m->effects_in_store ? 1 : 2));
  json_object_set_new(o, "flushed_commits_per_op_libresil_by_design",
                      json_integer(m->effects_in_store ? 1 : 2));
  json_object_set_new(o, "batch_ms", json_real((double)p->batch_ns / 1e6));
  if (why[0]) {
    oneline(why);
    json_object_set_new(o, "error", json_string(why));
    printf("  %-26s INVALID: %s\n", m->name, why);
    fflush(stdout);
  } else {
    char where[200];
    snprintf(where, sizeof where, "%s, %lld + %lld rows verified", fstype,
             (long long)sides[SIDE_RAW].ops_total, (long long)sides[SIDE_OURS].ops_total);
    print_figures(m->name, &f, where);
  }
  json_array_append_new(entries, o);
  if (have_dir) {
    remove_db_files(dir, "raw.db");
    remove_db_files(dir, "store.db");
    (void)rmdir(dir);
  }
  free(ours);
}

/* ---- PostgreSQL ------------------------------------------------------------- */

/* uri with search_path set to schema (libpq's options parameter). */
static void uri_with_schema(const char *uri, const char *schema, char *out, size_t n) {
  snprintf(out, n, "%s%coptions=-csearch_path%%3D%s", uri, strchr(uri, '?') ? '&' : '?',
           schema);
}

/* Runs sql on c; 0, or -1 with why. */
static int pg_exec(PGconn *c, const char *sql, char *why, size_t whylen) {
  PGresult *r = PQexec(c, sql);
  ExecStatusType s = r ? PQresultStatus(r) : PGRES_FATAL_ERROR;
  int ok = s == PGRES_COMMAND_OK || s == PGRES_TUPLES_OK;
  if (!ok) snprintf(why, whylen, "%s: %s", sql, PQerrorMessage(c));
  PQclear(r);
  return ok ? 0 : -1;
}

/* The first column of the first row of sql as text into out; 0 or -1. */
static int pg_value(PGconn *c, const char *sql, char *out, size_t n) {
  PGresult *r = PQexec(c, sql);
  int ok = r && PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) == 1;
  if (ok) snprintf(out, n, "%s", PQgetvalue(r, 0, 0));
  PQclear(r);
  return ok ? 0 : -1;
}

typedef struct pg_raw {
  PGconn *c;
  uint64_t next;
  char why[512];
} pg_raw;

static const char *pg_raw_why(void *state) {
  return ((pg_raw *)state)->why;
}

static int pg_raw_op(void *state) {
  pg_raw *r = state;
  char key[64];
  snprintf(key, sizeof key, "op-%llu", (unsigned long long)r->next++);
  const char *vals[2] = {key, (const char *)value16};
  int lens[2] = {0, VALUE_LEN};
  int fmts[2] = {0, 1};
  PGresult *res = PQexecPrepared(r->c, "bench_raw_insert", 2, vals, lens, fmts, 0);
  int ok = res && PQresultStatus(res) == PGRES_COMMAND_OK &&
           strcmp(PQcmdTuples(res), "1") == 0;
  if (!ok) snprintf(r->why, sizeof r->why, "raw INSERT: %s", PQerrorMessage(r->c));
  PQclear(res);
  return ok;
}

typedef struct pg_monitor {
  PGconn *c;
  int failed;
} pg_monitor;

/* The next transaction id to be assigned: write transactions of every
 * session, counted between batches. */
static uint64_t pg_next_xid(void *ctx) {
  pg_monitor *m = ctx;
  char v[32] = "";
  if (pg_value(m->c, "SELECT txid_snapshot_xmax(txid_current_snapshot())", v, sizeof v)) {
    m->failed = 1;
    return 0;
  }
  return strtoull(v, NULL, 10);
}

static int64_t pg_count(PGconn *c, const char *sql, char *why, size_t whylen) {
  char v[32] = "";
  if (pg_value(c, sql, v, sizeof v)) {
    if (!why[0]) snprintf(why, whylen, "verify: %s: %s", sql, PQerrorMessage(c));
    return -1;
  }
  return strtoll(v, NULL, 10);
}

static void quiet_notices(void *arg, const char *message) {
  (void)arg;
  (void)message;
}

static PGconn *pg_connect(const char *uri, char *why, size_t whylen) {
  PGconn *c = PQconnectdb(uri);
  if (!c || PQstatus(c) != CONNECTION_OK) {
    snprintf(why, whylen, "cannot connect to %s: %s", uri,
             c ? PQerrorMessage(c) : "out of memory");
    PQfinish(c);
    return NULL;
  }
  /* DROP SCHEMA ... CASCADE lists what it drops. */
  PQsetNoticeProcessor(c, quiet_notices, NULL);
  return c;
}

static void run_pg(const bench_opts *opts, const plan *p, const store_mode *m,
                   json_t *entries) {
  if (!opts->pg_uri) {
    skipped_case(entries, m->name, m->measures, "postgresql",
                 opts->pg_skipped ? opts->pg_skipped
                                  : "no server: pass --pg-uri URI (scripts/bench.sh starts "
                                    "a throwaway one with scripts/pg-start.sh)");
    return;
  }
  json_t *o = case_stub(m->name, m->measures, "postgresql");
  json_object_set_new(o, "effect", effect_json(opts));
  char why[640] = "";
  char schema_raw[64], schema_ours[64], sql[256];
  snprintf(schema_raw, sizeof schema_raw, "resil_bench_%ld_raw", (long)getpid());
  snprintf(schema_ours, sizeof schema_ours, "resil_bench_%ld_ours", (long)getpid());
  pg_monitor mon = {0};
  pg_raw raw;
  memset(&raw, 0, sizeof raw);
  ours_state *ours = calloc(1, sizeof *ours);
  int have_schemas = 0;
  figures f;
  memset(&f, 0, sizeof f);
  side sides[NSIDES];
  memset(sides, 0, sizeof sides);
  char fstype[128] = "unknown";
  if (!ours) snprintf(why, sizeof why, "out of memory");
  if (!why[0]) mon.c = pg_connect(opts->pg_uri, why, sizeof why);
  if (!why[0]) {
    char version[64] = "?", sync[32] = "?", fsync_on[32] = "?", method[32] = "?",
         datadir[PATH_MAX] = "";
    pg_value(mon.c, "SHOW server_version", version, sizeof version);
    pg_value(mon.c, "SHOW synchronous_commit", sync, sizeof sync);
    pg_value(mon.c, "SHOW fsync", fsync_on, sizeof fsync_on);
    pg_value(mon.c, "SHOW wal_sync_method", method, sizeof method);
    /* Superusers (pg-start.sh's "resil") may read it; the server is local. */
    if (pg_value(mon.c, "SHOW data_directory", datadir, sizeof datadir) == 0 && datadir[0])
      fs_type(datadir, fstype, sizeof fstype);
    json_object_set_new(o, "server_version", json_string(version));
    json_object_set_new(o, "synchronous_commit", json_string(sync));
    json_object_set_new(o, "fsync", json_string(fsync_on));
    json_object_set_new(o, "wal_sync_method", json_string(method));
    json_object_set_new(o, "data_directory", json_string(datadir));
    json_object_set_new(o, "filesystem", json_string(fstype));
    printf("  PostgreSQL %s: data directory %s (file system: %s), synchronous_commit=%s, "
           "fsync=%s, wal_sync_method=%s\n", version, datadir[0] ? datadir : "?", fstype,
           sync, fsync_on, method);
    if (fs_is_memory(fstype))
      printf("  WARNING: the data directory is in memory: fsync costs nothing there, so "
             "these are not durable-disk figures\n");
    fflush(stdout);
    snprintf(sql, sizeof sql, "CREATE SCHEMA %s; CREATE SCHEMA %s", schema_raw, schema_ours);
    if (pg_exec(mon.c, sql, why, sizeof why) == 0) have_schemas = 1;
  }
  char uri[2048];
  if (!why[0]) {
    uri_with_schema(opts->pg_uri, schema_raw, uri, sizeof uri);
    raw.c = pg_connect(uri, why, sizeof why);
  }
  if (!why[0] &&
      pg_exec(raw.c, "CREATE TABLE t (k TEXT COLLATE \"C\" PRIMARY KEY, v BYTEA NOT NULL)",
              why, sizeof why) == 0) {
    PGresult *r = PQprepare(raw.c, "bench_raw_insert", "INSERT INTO t (k, v) VALUES ($1, $2)",
                            2, NULL);
    if (!r || PQresultStatus(r) != PGRES_COMMAND_OK)
      snprintf(why, sizeof why, "prepare the raw INSERT: %s", PQerrorMessage(raw.c));
    PQclear(r);
  }
  if (!why[0]) {
    snprintf(sql, sizeof sql,
             "CREATE TABLE %s.t (k TEXT COLLATE \"C\" PRIMARY KEY, v BYTEA NOT NULL)",
             schema_ours);
    pg_exec(mon.c, sql, why, sizeof why);
  }
  if (!why[0]) {
    uri_with_schema(opts->pg_uri, schema_ours, uri, sizeof uri);
    resil_error err;
    resil_store_config cfg = mode_config(m);
    resil_status st = resil_store_open(uri, &cfg, &ours->store, &err);
    if (st != RESIL_OK)
      snprintf(why, sizeof why, "resil_store_open: %s: %s", resil_status_name(st), err.msg);
    resil_op_record_init(&ours->rec);
    ours->insert = opts->store_effect_insert;
  }
  if (!why[0]) {
    sides[SIDE_RAW] = (side){.op = pg_raw_op, .state = &raw, .why = pg_raw_why};
    sides[SIDE_OURS] = (side){.op = ours_op, .state = ours, .why = ours_why};
    run_rounds(p, sides, pg_next_xid, &mon, &f, why, sizeof why);
    if (mon.failed) {
      f.commits_per_op[SIDE_RAW] = f.commits_per_op[SIDE_OURS] = NAN;
      json_object_set_new(o, "commits_not_counted",
                          json_string("txid_current_snapshot() failed"));
    }
  }
  if (ours && ours->store) ours_close(ours);
  if (raw.c) PQfinish(raw.c);
  if (!why[0]) {
    snprintf(sql, sizeof sql, "SELECT count(*) FROM %s.t", schema_raw);
    int64_t raw_rows = pg_count(mon.c, sql, why, sizeof why);
    snprintf(sql, sizeof sql, "SELECT count(*) FROM %s.t", schema_ours);
    int64_t ours_rows = pg_count(mon.c, sql, why, sizeof why);
    snprintf(sql, sizeof sql, "SELECT count(*) FROM %s.resil_operations", schema_ours);
    int64_t ours_ops = pg_count(mon.c, sql, why, sizeof why);
    snprintf(sql, sizeof sql,
             "SELECT count(*) FROM %s.resil_operations WHERE state = 2 AND status = 201",
             schema_ours);
    int64_t ours_done = pg_count(mon.c, sql, why, sizeof why);
    verify_rows(o, sides, opts, raw_rows, ours_rows, ours_ops, ours_done, why, sizeof why);
  }
  if (have_schemas) {
    char ignored[256];
    snprintf(sql, sizeof sql, "DROP SCHEMA %s CASCADE; DROP SCHEMA %s CASCADE", schema_raw,
             schema_ours);
    (void)pg_exec(mon.c, sql, ignored, sizeof ignored);
  }
  if (mon.c) PQfinish(mon.c);
  if (f.rounds) figures_to_json(&f, sides, o);
  json_object_set_new(o, "commits_per_op_libresil_by_design",
                      json_integer(m->effects_in_store ? 1 : 2));
  json_object_set_new(o, "flushed_commits_per_op_libresil_by_design",
                      json_integer(m->effects_in_store ? 1 : 2));
  json_object_set_new(o, "batch_ms", json_real((double)p->batch_ns / 1e6));
  json_object_set_new(o, "commits_counted_as",
                      json_string("transaction ids assigned during each side's batches "
                                  "(all sessions)"));
  json_t *rt = json_object();
  json_object_set_new(rt, "raw", json_integer(1));
  json_object_set_new(rt, "libresil",
                      json_integer(2 + (opts->store_effect_insert == BENCH_EFFECT_DIRECT)));
  json_object_set_new(o, "round_trips_per_op_by_design", rt);
  if (why[0]) {
    oneline(why);
    json_object_set_new(o, "error", json_string(why));
    printf("  %-26s INVALID: %s\n", m->name, why);
    fflush(stdout);
  } else {
    char where[200];
    snprintf(where, sizeof where, "%s, %lld + %lld rows verified", fstype,
             (long long)sides[SIDE_RAW].ops_total, (long long)sides[SIDE_OURS].ops_total);
    print_figures(m->name, &f, where);
  }
  json_array_append_new(entries, o);
  free(ours);
}

int bench_run_store_cases(const bench_opts *opts, const char *json_path) {
  int want_sq[2], want_pg[2], any = 0;
  for (int m = 0; m < 2; m++) {
    want_sq[m] = bench_selected(opts, modes_sqlite[m].name);
    want_pg[m] = bench_selected(opts, modes_pg[m].name);
    any |= want_sq[m] | want_pg[m];
  }
  if (!any) return 0;
  plan p = make_plan(opts);
  char method[900];
  snprintf(method, sizeof method,
           "store cases: one thread; each side warms up for %lld ms, then %d rounds of one "
           "%lld ms batch per side (raw first in even rounds, libresil first in odd ones); "
           "ops/s per side = median over rounds, ratio = median of the per-round "
           "libresil/raw ratios (ratio_of_medians also recorded); "
           "raw = one single-row INSERT transaction per operation through a prepared "
           "statement; libresil = resil_store_execute (NEW: begin + complete, one "
           "transaction with effects_in_store) whose effect %s; every operation uses a fresh key; rows counted after the run on "
           "both sides",
           (long long)(p.warm_ns / 1000000), p.rounds, (long long)(p.batch_ns / 1000000),
           opts->store_effect_insert == BENCH_EFFECT_EXEC
               ? "inserts the same row inside the completion's transaction through "
                 "resil_store_txn_exec"
           : opts->store_effect_insert == BENCH_EFFECT_DIRECT
               ? "inserts the same row inside the completion's transaction through its own "
                 "prepared statement (--store-effect direct)"
               : "runs no SQL (--store-effect none)");
  printf("  store: %d rounds of %lld ms batches per side and backend\n", p.rounds,
         (long long)(p.batch_ns / 1000000));
  fflush(stdout);
  json_t *entries = json_array();
  for (int m = 0; m < 2; m++)
    if (want_sq[m]) run_sqlite(opts, &p, &modes_sqlite[m], entries);
  for (int m = 0; m < 2; m++)
    if (want_pg[m]) run_pg(opts, &p, &modes_pg[m], entries);
  return bench_append_cases(json_path, entries, "store_method", method);
}

#endif
