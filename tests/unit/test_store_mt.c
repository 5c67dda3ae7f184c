/* The operation store under concurrency (DESIGN §7 I6): many threads, stores
 * and processes on one key still run exactly one effect, on every available
 * backend (SQLite always; PostgreSQL when RESIL_TEST_PG_URI is set). Effects
 * are counted as committed rows in the side table `effects`. */
#include <pthread.h>
#include <signal.h>
#include <sys/wait.h>

#include "test_store_common.h"

#define THREADS 12

typedef struct mt_fx {
  ts_backend bk;
  int skip;
  ts_env env;
} mt_fx;

static const ts_backend on_sqlite = TS_SQLITE;
static const ts_backend on_pg = TS_PG;
/* resil_store_config.effects_in_store of every store the cases open: each
 * group runs in both modes (main). */
static int mt_effects_in_store;

static int mt_setup(void **state) {
  ts_backend bk = *(const ts_backend *)*state;
  mt_fx *f = calloc(1, sizeof *f);
  assert_non_null(f);
  f->bk = bk;
  *state = f;
  if (!ts_available(bk))
    f->skip = 1;
  else
    ts_env_setup(&f->env, bk, "mt");
  return 0;
}

static int mt_teardown(void **state) {
  mt_fx *f = *state;
  if (!f->skip) ts_env_teardown(&f->env);
  free(f);
  return 0;
}

static mt_fx *get(void **state) {
  mt_fx *f = *state;
  if (f->skip) skip();
  return f;
}

static resil_store *open_store(mt_fx *f, uint32_t pool) {
  resil_store_config cfg;
  resil_store_config_init(&cfg);
  cfg.effects_in_store = mt_effects_in_store;
  cfg.pool_size = pool;
  cfg.busy_timeout_ns = 30 * NS_PER_S;
  resil_store *s = NULL;
  resil_error err;
  resil_status st = resil_store_open(f->env.uri, &cfg, &s, &err);
  if (st) fail_msg("open: %s: %s", resil_status_name(st), err.msg);
  return s;
}

/* A start line: every thread waits until all are ready, then all go. */
typedef struct gate {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int waiting, total, open;
} gate;

static void gate_init(gate *g, int total) {
  pthread_mutex_init(&g->mu, NULL);
  pthread_cond_init(&g->cv, NULL);
  g->waiting = 0;
  g->total = total;
  g->open = 0;
}

static void gate_pass(gate *g) {
  pthread_mutex_lock(&g->mu);
  if (++g->waiting == g->total) {
    g->open = 1;
    pthread_cond_broadcast(&g->cv);
  }
  while (!g->open) pthread_cond_wait(&g->cv, &g->mu);
  pthread_mutex_unlock(&g->mu);
}

static void gate_destroy(gate *g) {
  pthread_cond_destroy(&g->cv);
  pthread_mutex_destroy(&g->mu);
}

/* ---- I6: 12 POSTs with one key plus a recovery --------------------------------- */

typedef struct i6_round {
  resil_store *stores[2];
  const char *key;
  gate start;
  ts_effect effect;
  atomic_int news, replays, in_progress, conflicts, errors;
} i6_round;

typedef struct i6_worker {
  i6_round *round;
  int index;
} i6_worker;

/* What a server does with one keyed POST: begin; NEW → complete, or (every
 * fourth worker, from the second) both in one resil_store_execute. Every
 * third worker also calls complete when it did not get NEW (a buggy or
 * racing caller): the store must still run only one effect. */
static void *i6_post(void *arg) {
  i6_worker *w = arg;
  i6_round *r = w->round;
  resil_store *s = r->stores[w->index % 2];
  resil_op_request req = ts_req("POST", "/payments", "{\"amount\":10}");
  resil_op_record rec;
  resil_op_record_init(&rec);
  resil_op_begin_result res = 0;
  gate_pass(&r->start);
  int execute = w->index % 4 == 1;
  resil_status st = execute ? resil_store_execute(s, r->key, &req, ts_effect_fn, &r->effect,
                                                  &res, &rec)
                            : resil_store_begin(s, r->key, &req, &res, &rec);
  if (st == RESIL_OK && execute) {
    switch (res) {
    case RESIL_OP_NEW: atomic_fetch_add(&r->news, 1); break;
    case RESIL_OP_REPLAY: atomic_fetch_add(&r->replays, 1); break;
    case RESIL_OP_IN_PROGRESS: atomic_fetch_add(&r->in_progress, 1); break;
    case RESIL_OP_CONFLICT: atomic_fetch_add(&r->conflicts, 1); break;
    }
    if (res == RESIL_OP_NEW && rec.state != RESIL_OP_COMMITTED) st = RESIL_ESTATE;
  } else if (st == RESIL_OK) {
    switch (res) {
    case RESIL_OP_NEW: atomic_fetch_add(&r->news, 1); break;
    case RESIL_OP_REPLAY: atomic_fetch_add(&r->replays, 1); break;
    case RESIL_OP_IN_PROGRESS: atomic_fetch_add(&r->in_progress, 1); break;
    case RESIL_OP_CONFLICT: atomic_fetch_add(&r->conflicts, 1); break;
    }
    if (res == RESIL_OP_NEW || w->index % 3 == 0)
      st = resil_store_complete(s, r->key, ts_effect_fn, &r->effect, &rec);
    if (st == RESIL_OK && (res == RESIL_OP_NEW || w->index % 3 == 0) &&
        rec.state != RESIL_OP_COMMITTED)
      st = RESIL_ESTATE;
  }
  if (st) atomic_fetch_add(&r->errors, 1);
  resil_op_record_clear(&rec);
  return NULL;
}

static void *i6_recover(void *arg) {
  i6_worker *w = arg;
  i6_round *r = w->round;
  gate_pass(&r->start);
  uint32_t n = 0;
  if (resil_store_recover(r->stores[1], 0, 100, ts_effect_fn, &r->effect, &n))
    atomic_fetch_add(&r->errors, 1);
  return NULL;
}

static void i6_twelve_posts_one_key_plus_recovery_run_one_effect(void **state) {
  mt_fx *f = get(state);
  resil_store *a = open_store(f, 4), *b = open_store(f, 4);
  for (int round = 0; round < 8; round++) {
    char key[32];
    snprintf(key, sizeof key, "i6-%d", round);
    i6_round r = {.stores = {a, b}, .key = key};
    gate_init(&r.start, THREADS + 1);
    pthread_t t[THREADS + 1];
    i6_worker w[THREADS + 1];
    for (int i = 0; i <= THREADS; i++) {
      w[i].round = &r;
      w[i].index = i;
      assert_int_equal(pthread_create(&t[i], NULL, i == THREADS ? i6_recover : i6_post, &w[i]), 0);
    }
    for (int i = 0; i <= THREADS; i++) pthread_join(t[i], NULL);
    gate_destroy(&r.start);
    assert_int_equal(atomic_load(&r.errors), 0);
    assert_int_equal(atomic_load(&r.news), 1);
    assert_int_equal(atomic_load(&r.conflicts), 0);
    assert_int_equal(atomic_load(&r.news) + atomic_load(&r.replays) + atomic_load(&r.in_progress),
                     THREADS);
    /* Exactly one effect committed, and the effect ran once: no other
     * invocation even started and was rolled back. */
    assert_int_equal(ts_effects(&f->env, key), 1);
    assert_int_equal(atomic_load(&r.effect.calls), 1);
    resil_op_record rec;
    resil_op_record_init(&rec);
    assert_status(RESIL_OK, resil_store_status(a, key, &rec));
    assert_int_equal(rec.state, RESIL_OP_COMMITTED);
    assert_true(rec.attempts >= 1 && rec.attempts <= THREADS);
    resil_op_record_clear(&rec);
  }
  resil_store_close(a);
  resil_store_close(b);
}

/* ---- several processes on one SQLite file ------------------------------------ */

/* A child process: its own store on the file; waits for the parent's go,
 * then posts the key (and recovers); exits 0 when nothing failed. */
static void child_post(const char *uri, int go_fd, const char *key) {
  resil_store_config cfg;
  resil_store_config_init(&cfg);
  cfg.effects_in_store = mt_effects_in_store;
  cfg.busy_timeout_ns = 30 * NS_PER_S;
  cfg.pool_size = 2;
  resil_store *s = NULL;
  resil_error err;
  if (resil_store_open(uri, &cfg, &s, &err)) {
    fprintf(stderr, "child: open: %s\n", err.msg);
    _exit(10);
  }
  char c;
  if (read(go_fd, &c, 1) != 1) _exit(11);
  resil_op_request req = ts_req("POST", "/payments", "{\"amount\":10}");
  resil_op_begin_result r = 0;
  ts_effect e = {0};
  int rc = 0;
  if (resil_store_begin(s, key, &req, &r, NULL)) rc = 12;
  if (!rc && resil_store_complete(s, key, ts_effect_fn, &e, NULL)) rc = 13;
  uint32_t n = 0;
  if (!rc && resil_store_recover(s, 0, 10, ts_effect_fn, &e, &n)) rc = 14;
  resil_store_close(s);
  _exit(rc);
}

static void sqlite_several_processes_on_one_file_run_one_effect(void **state) {
  mt_fx *f = get(state);
  if (f->bk != TS_SQLITE) skip();
  enum { CHILDREN = 6 };
  for (int round = 0; round < 3; round++) {
    char key[32];
    snprintf(key, sizeof key, "proc-%d", round);
    int go[2];
    assert_int_equal(pipe(go), 0);
    pid_t pids[CHILDREN];
    for (int i = 0; i < CHILDREN; i++) {
      pids[i] = fork();
      assert_true(pids[i] >= 0);
      if (pids[i] == 0) {
        close(go[1]);
        child_post(f->env.uri, go[0], key);
      }
    }
    close(go[0]);
    char gos[CHILDREN];
    memset(gos, 'g', sizeof gos);
    assert_int_equal(write(go[1], gos, sizeof gos), CHILDREN);
    close(go[1]);
    for (int i = 0; i < CHILDREN; i++) {
      int status = 0;
      assert_int_equal(waitpid(pids[i], &status, 0), pids[i]);
      assert_true(WIFEXITED(status));
      assert_int_equal(WEXITSTATUS(status), 0);
    }
    assert_int_equal(ts_effects(&f->env, key), 1);
  }
}

/* ---- I8: a process killed between PENDING and COMMITTED -------------------------- */

static resil_status kill_self(void *user, const char *key) {
  (void)user;
  (void)key;
  raise(SIGKILL);
  return RESIL_EIO;
}

static void i8_killed_between_pending_and_commit_then_recovered_once(void **state) {
  mt_fx *f = get(state);
  resil_op_request req = ts_req("POST", "/payments", "{\"amount\":10}");
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    /* The server: stores PENDING, runs the effect, and dies (SIGKILL)
     * before the terminal state is written. */
    resil_store_config cfg;
    resil_store_config_init(&cfg);
    cfg.effects_in_store = mt_effects_in_store;
    cfg.fault_before_terminal = kill_self;
    resil_store *s = NULL;
    resil_op_begin_result r = 0;
    ts_effect e = {0};
    if (resil_store_open(f->env.uri, &cfg, &s, NULL) ||
        resil_store_begin(s, "i8", &req, &r, NULL) || r != RESIL_OP_NEW)
      _exit(20);
    resil_store_complete(s, "i8", ts_effect_fn, &e, NULL);
    _exit(21); /* not reached */
  }
  int status = 0;
  assert_int_equal(waitpid(pid, &status, 0), pid);
  assert_true(WIFSIGNALED(status));
  assert_int_equal(WTERMSIG(status), SIGKILL);

  /* The restarted server. */
  resil_store *s = open_store(f, 2);
  resil_op_record rec;
  resil_op_record_init(&rec);
  assert_status(RESIL_OK, resil_store_status(s, "i8", &rec));
  assert_int_equal(rec.state, RESIL_OP_PENDING);
  assert_int_equal(ts_effects(&f->env, "i8"), 0);
  resil_op_begin_result r = 0;
  assert_status(RESIL_OK, resil_store_begin(s, "i8", &req, &r, NULL));
  assert_int_equal(r, RESIL_OP_IN_PROGRESS);
  resil_op_request other = ts_req("POST", "/payments", "{\"amount\":11}");
  assert_status(RESIL_OK, resil_store_begin(s, "i8", &other, &r, NULL));
  assert_int_equal(r, RESIL_OP_CONFLICT);
  ts_effect e = {0};
  uint32_t n = 0;
  assert_status(RESIL_OK, resil_store_recover(s, 0, 10, ts_effect_fn, &e, &n));
  assert_int_equal(n, 1);
  assert_status(RESIL_OK, resil_store_recover(s, 0, 10, ts_effect_fn, &e, &n));
  assert_int_equal(n, 0);
  assert_int_equal(ts_effects(&f->env, "i8"), 1);
  assert_status(RESIL_OK, resil_store_begin(s, "i8", &req, &r, &rec));
  assert_int_equal(r, RESIL_OP_REPLAY);
  assert_int_equal(rec.state, RESIL_OP_COMMITTED);
  resil_op_record_clear(&rec);
  resil_store_close(s);
}

/* ---- opening and migrating at once ------------------------------------------- */

typedef struct opener {
  mt_fx *f;
  gate *start;
  resil_status st;
  char msg[200];
} opener;

static void *open_at_once(void *arg) {
  opener *o = arg;
  resil_store_config cfg;
  resil_store_config_init(&cfg);
  cfg.effects_in_store = mt_effects_in_store;
  cfg.pool_size = 2;
  cfg.busy_timeout_ns = 30 * NS_PER_S;
  resil_store *s = NULL;
  gate_pass(o->start);
  resil_error err;
  o->st = resil_store_open(o->f->env.uri, &cfg, &s, &err);
  if (o->st) snprintf(o->msg, sizeof o->msg, "open: %s", err.msg);
  if (o->st == RESIL_OK) {
    resil_op_request req = ts_req("GET", "/", NULL);
    resil_op_begin_result r = 0;
    char key[32];
    snprintf(key, sizeof key, "open-%p", (void *)o);
    o->st = resil_store_begin(s, key, &req, &r, NULL);
    if (o->st == RESIL_OK && r != RESIL_OP_NEW) o->st = RESIL_ESTATE;
  }
  resil_store_close(s);
  return NULL;
}

static void stores_opened_at_once_migrate_one_schema(void **state) {
  mt_fx *f = get(state);
  enum { N = 8 };
  gate g;
  gate_init(&g, N);
  pthread_t t[N];
  opener o[N];
  for (int i = 0; i < N; i++) {
    o[i] = (opener){.f = f, .start = &g};
    assert_int_equal(pthread_create(&t[i], NULL, open_at_once, &o[i]), 0);
  }
  for (int i = 0; i < N; i++) pthread_join(t[i], NULL);
  gate_destroy(&g);
  for (int i = 0; i < N; i++)
    if (o[i].st) fail_msg("%s %s", resil_status_name(o[i].st), o[i].msg);
  assert_int_equal(ts_query_long(&f->env, "SELECT count(*) FROM resil_schema"), 1);
  assert_int_equal(ts_query_long(&f->env, "SELECT count(*) FROM resil_operations"), N);
}

/* ---- many keys in parallel --------------------------------------------------- */

typedef struct many {
  resil_store *s;
  int index;
  gate *start;
  ts_effect *effect;
  atomic_int *errors;
} many;

enum { MANY_THREADS = 8, MANY_KEYS = 25 };

static void *many_keys(void *arg) {
  many *m = arg;
  resil_op_request req = ts_req("POST", "/items", "x");
  gate_pass(m->start);
  for (int k = 0; k < MANY_KEYS; k++) {
    char key[32];
    snprintf(key, sizeof key, "many-%d-%d", m->index, k);
    resil_op_begin_result r = 0;
    resil_status st = resil_store_begin(m->s, key, &req, &r, NULL);
    if (!st && r != RESIL_OP_NEW) st = RESIL_ESTATE;
    if (!st) st = resil_store_complete(m->s, key, ts_effect_fn, m->effect, NULL);
    if (!st && k % 5 == 0) {
      /* A retry of the same request replays. */
      st = resil_store_begin(m->s, key, &req, &r, NULL);
      if (!st && r != RESIL_OP_REPLAY) st = RESIL_ESTATE;
    }
    if (st) atomic_fetch_add(m->errors, 1);
  }
  return NULL;
}

static void many_keys_in_parallel_each_commit_once(void **state) {
  mt_fx *f = get(state);
  resil_store *s = open_store(f, 4);
  gate g;
  gate_init(&g, MANY_THREADS);
  ts_effect e = {0};
  atomic_int errors = 0;
  pthread_t t[MANY_THREADS];
  many m[MANY_THREADS];
  for (int i = 0; i < MANY_THREADS; i++) {
    m[i] = (many){.s = s, .index = i, .start = &g, .effect = &e, .errors = &errors};
    assert_int_equal(pthread_create(&t[i], NULL, many_keys, &m[i]), 0);
  }
  for (int i = 0; i < MANY_THREADS; i++) pthread_join(t[i], NULL);
  gate_destroy(&g);
  assert_int_equal(atomic_load(&errors), 0);
  assert_int_equal(atomic_load(&e.calls), MANY_THREADS * MANY_KEYS);
  assert_int_equal(ts_all_effects(&f->env), MANY_THREADS * MANY_KEYS);
  assert_int_equal(ts_query_long(&f->env,
                                 "SELECT count(*) FROM resil_operations WHERE state = 2"),
                   MANY_THREADS * MANY_KEYS);
  resil_store_close(s);
}

/* ---- recovery racing itself -------------------------------------------------- */

typedef struct recoverer {
  resil_store *s;
  gate *start;
  ts_effect *effect;
  atomic_uint *recovered;
  atomic_int *errors;
} recoverer;

static void *recover_all(void *arg) {
  recoverer *r = arg;
  gate_pass(r->start);
  for (int i = 0; i < 10; i++) {
    uint32_t n = 0;
    if (resil_store_recover(r->s, 0, 7, ts_effect_fn, r->effect, &n))
      atomic_fetch_add(r->errors, 1);
    atomic_fetch_add(r->recovered, n);
  }
  return NULL;
}

static void concurrent_recoverers_run_each_pending_effect_once(void **state) {
  mt_fx *f = get(state);
  resil_store *a = open_store(f, 2), *b = open_store(f, 2);
  resil_op_request req = ts_req("POST", "/p", "1");
  enum { PENDING = 40, RECOVERERS = 4 };
  for (int i = 0; i < PENDING; i++) {
    char key[32];
    snprintf(key, sizeof key, "rec-%d", i);
    resil_op_begin_result r = 0;
    assert_status(RESIL_OK, resil_store_begin(a, key, &req, &r, NULL));
  }
  gate g;
  gate_init(&g, RECOVERERS);
  ts_effect e = {0};
  atomic_uint recovered = 0;
  atomic_int errors = 0;
  pthread_t t[RECOVERERS];
  recoverer r[RECOVERERS];
  for (int i = 0; i < RECOVERERS; i++) {
    r[i] = (recoverer){.s = i % 2 ? a : b, .start = &g, .effect = &e,
                       .recovered = &recovered, .errors = &errors};
    assert_int_equal(pthread_create(&t[i], NULL, recover_all, &r[i]), 0);
  }
  for (int i = 0; i < RECOVERERS; i++) pthread_join(t[i], NULL);
  gate_destroy(&g);
  assert_int_equal(atomic_load(&errors), 0);
  assert_int_equal(atomic_load(&recovered), PENDING);
  assert_int_equal(atomic_load(&e.calls), PENDING);
  assert_int_equal(ts_all_effects(&f->env), PENDING);
  resil_store_close(a);
  resil_store_close(b);
}

#define MT_TESTS(bk)                                                                   \
  cmocka_unit_test_prestate_setup_teardown(i6_twelve_posts_one_key_plus_recovery_run_one_effect, mt_setup, mt_teardown, (void *)&bk), \
  cmocka_unit_test_prestate_setup_teardown(stores_opened_at_once_migrate_one_schema, mt_setup, mt_teardown, (void *)&bk), \
  cmocka_unit_test_prestate_setup_teardown(many_keys_in_parallel_each_commit_once, mt_setup, mt_teardown, (void *)&bk), \
  cmocka_unit_test_prestate_setup_teardown(concurrent_recoverers_run_each_pending_effect_once, mt_setup, mt_teardown, (void *)&bk)

int main(int argc, char **argv) {
  ts_run run;
  if (ts_run_parse(argc, argv, &run) != 0) return 2;
  /* fork() first, while the process has one thread. */
  const struct CMUnitTest sqlite_processes[] = {
      cmocka_unit_test_prestate_setup_teardown(sqlite_several_processes_on_one_file_run_one_effect,
                                               mt_setup, mt_teardown, (void *)&on_sqlite),
      cmocka_unit_test_prestate_setup_teardown(i8_killed_between_pending_and_commit_then_recovered_once,
                                               mt_setup, mt_teardown, (void *)&on_sqlite),
  };
  const struct CMUnitTest pg_processes[] = {
      cmocka_unit_test_prestate_setup_teardown(i8_killed_between_pending_and_commit_then_recovered_once,
                                               mt_setup, mt_teardown, (void *)&on_pg),
  };
  const struct CMUnitTest sqlite_tests[] = {MT_TESTS(on_sqlite)};
  const struct CMUnitTest pg_tests[] = {MT_TESTS(on_pg)};
  int failed = 0;
  int pg_gate = run.pg ? ts_pg_gate(&run) : 0;
  if (pg_gate) return pg_gate;
  static const char *const mode_name[2] = {"", "_effects_in_store"};
  char name[96];
  for (int m = 0; m < 2; m++) {
    mt_effects_in_store = m;
    snprintf(name, sizeof name, "store_mt_processes%s", mode_name[m]);
    if (run.sqlite) failed += cmocka_run_group_tests_name(name, sqlite_processes, NULL, NULL);
    snprintf(name, sizeof name, "store_mt_processes_postgresql%s", mode_name[m]);
    if (run.pg) failed += cmocka_run_group_tests_name(name, pg_processes, NULL, NULL);
  }
  for (int m = 0; m < 2; m++) {
    mt_effects_in_store = m;
    snprintf(name, sizeof name, "store_mt_sqlite%s", mode_name[m]);
    if (run.sqlite) failed += cmocka_run_group_tests_name(name, sqlite_tests, NULL, NULL);
    snprintf(name, sizeof name, "store_mt_postgresql%s", mode_name[m]);
    if (run.pg) failed += cmocka_run_group_tests_name(name, pg_tests, NULL, NULL);
  }
  return failed;
}
