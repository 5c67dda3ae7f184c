/* The registry observed from outside (registry.h "metrics and events"): a
 * collector that follows reloads (kept series go on, replaced ones restart
 * on the new object, removed ones disappear), renders running while
 * another thread reloads (run again under ThreadSanitizer and ASan: no
 * render reads a freed instance), `promtool check metrics` on the
 * exposition of every example file, and the event log's reload and breaker
 * lines. */
#define _GNU_SOURCE
#include <dirent.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"

#ifdef RESIL_HAVE_CONFIG
#include <jansson.h>

#include "metrics_common.h"
#include "resil/events.h"
#include "resil/registry.h"
#include "resil/store.h"

static const char *A = "circuitbreaker:\n"
                       "  instances:\n"
                       "    stable: {open_wait: 60s}\n"
                       "    flip: {failure_rate_threshold: 40}\n"
                       "    gone: {}\n"
                       "retry:\n"
                       "  instances:\n"
                       "    stable: {max_attempts: 2}\n"
                       "chain:\n"
                       "  instances:\n"
                       "    flip: {layers: [{circuitbreaker: flip}]}\n"
                       "    stable: {layers: [{retry: stable}, {circuitbreaker: stable}]}\n";
static const char *B = "circuitbreaker:\n"
                       "  instances:\n"
                       "    stable: {open_wait: 60s}\n"
                       "    flip: {failure_rate_threshold: 60}\n"
                       "    fresh: {}\n"
                       "retry:\n"
                       "  instances:\n"
                       "    stable: {max_attempts: 2}\n"
                       "chain:\n"
                       "  instances:\n"
                       "    flip: {layers: [{circuitbreaker: flip}]}\n"
                       "    stable: {layers: [{retry: stable}, {circuitbreaker: stable}]}\n";

static void fail_calls(resil_breaker *br, int n) {
  for (int i = 0; i < n; i++) {
    resil_breaker_permit pm;
    assert_int_equal(RESIL_DECISION_GO, resil_breaker_try_acquire(br, &pm));
    resil_outcome o = resil_outcome_make(RESIL_NOT_SENT, RESIL_REASON_CONNECT_REFUSED);
    assert_status(RESIL_OK, resil_breaker_record(br, &pm, &o, 1000));
  }
}

/* noinline: inlined at -O2, GCC 12's -Wdangling-pointer takes a pointer
 * into the returned text for one to the local `text` itself (whose address
 * the render call got) and fails a Release build of the tests. */
__attribute__((noinline)) static char *render(resil_metrics *m) {
  char *text = NULL;
  assert_status(RESIL_OK, resil_metrics_render_alloc(m, &text, NULL));
  return text;
}

static int has(const char *text, const char *needle) { return strstr(text, needle) != NULL; }

static resil_registry *load(const char *yaml) {
  resil_registry *reg = NULL;
  resil_registry_error err;
  resil_registry_error_init(&err);
  resil_status st = resil_registry_load_string(yaml, strlen(yaml), "a.yaml", &reg, &err);
  if (st != RESIL_OK) fail_msg("%s", err.message);
  return reg;
}

static void metrics_follow_reloads(void **state) {
  (void)state;
  resil_registry *reg = load(A);
  resil_metrics *m = NULL;
  assert_status(RESIL_OK, resil_metrics_new(NULL, &m));
  assert_status(RESIL_OK, resil_registry_metrics_add(reg, m));
  assert_status(RESIL_EINVAL, resil_registry_metrics_add(reg, m));
  assert_status(RESIL_EMISUSE, resil_registry_metrics_add(NULL, m));
  /* 3 breakers, 1 retry, 2 chains */
  assert_int_equal(6, resil_metrics_count(m));
  fail_calls(resil_registry_breaker(reg, "stable"), 3);
  fail_calls(resil_registry_breaker(reg, "flip"), 2);
  char *t = render(m);
  assert_true(has(t, "resil_circuitbreaker_calls_total{name=\"stable\",kind=\"failed\"} 3\n"));
  assert_true(has(t, "resil_circuitbreaker_calls_total{name=\"flip\",kind=\"failed\"} 2\n"));
  assert_true(has(t, "{name=\"gone\""));
  assert_false(has(t, "{name=\"fresh\""));
  assert_true(has(t, "resil_retry_calls_total{name=\"stable\""));
  assert_true(has(t, "resil_chain_layer_calls_total{name=\"stable\""));
  resil_metrics_text_free(m, t);

  resil_breaker *old_flip = resil_registry_breaker(reg, "flip");
  assert_status(RESIL_OK, resil_registry_reload_string(reg, B, strlen(B), "b.yaml", NULL));
  assert_ptr_not_equal(old_flip, resil_registry_breaker(reg, "flip"));
  assert_int_equal(6, resil_metrics_count(m));
  t = render(m);
  /* kept: its counter goes on; replaced: the new object's figures */
  assert_true(has(t, "resil_circuitbreaker_calls_total{name=\"stable\",kind=\"failed\"} 3\n"));
  assert_true(has(t, "resil_circuitbreaker_calls_total{name=\"flip\",kind=\"failed\"} 0\n"));
  assert_false(has(t, "{name=\"gone\""));
  assert_true(has(t, "resil_circuitbreaker_calls_total{name=\"fresh\",kind=\"failed\"} 0\n"));
  /* every family once */
  const char *p = strstr(t, "# TYPE resil_circuitbreaker_calls_total counter");
  assert_non_null(p);
  assert_null(strstr(p + 1, "# TYPE resil_circuitbreaker_calls_total counter"));
  resil_metrics_text_free(m, t);

  /* a failed reload changes nothing */
  assert_status(RESIL_EINVAL, resil_registry_reload_string(reg, "circuitbreaker: [", 17,
                                                           "c.yaml", NULL));
  assert_int_equal(6, resil_metrics_count(m));

  assert_status(RESIL_OK, resil_registry_metrics_remove(reg, m));
  assert_status(RESIL_EINVAL, resil_registry_metrics_remove(reg, m));
  assert_int_equal(0, resil_metrics_count(m));
  /* after removal, reloads no longer touch m */
  assert_status(RESIL_OK, resil_registry_reload_string(reg, A, strlen(A), "a.yaml", NULL));
  assert_int_equal(0, resil_metrics_count(m));
  /* freeing the registry takes its instances out of a following collector */
  assert_status(RESIL_OK, resil_registry_metrics_add(reg, m));
  assert_int_equal(6, resil_metrics_count(m));
  resil_registry_free(reg);
  assert_int_equal(0, resil_metrics_count(m));
  resil_metrics_free(m);
}

static void a_name_clash_adds_nothing(void **state) {
  (void)state;
  resil_registry *reg = load(A);
  resil_metrics *m = NULL;
  assert_status(RESIL_OK, resil_metrics_new(NULL, &m));
  resil_breaker_config cfg;
  resil_breaker_config_init(&cfg);
  resil_breaker *own = NULL;
  assert_status(RESIL_OK, resil_breaker_new(&cfg, &own, NULL));
  assert_status(RESIL_OK, resil_metrics_add_breaker(m, "stable", own));
  assert_status(RESIL_EINVAL, resil_registry_metrics_add(reg, m));
  assert_int_equal(1, resil_metrics_count(m));
  resil_registry_free(reg);
  assert_int_equal(1, resil_metrics_count(m));
  resil_metrics_free(m);
  resil_breaker_free(own);
}

/* ---- renders during reloads -------------------------------------------- */

enum { RENDERERS = 2, RELOADS = 300 };

typedef struct rshared {
  resil_metrics *m;
  atomic_int stop;
  atomic_int bad;
  atomic_long renders;
} rshared;

static void *renderer(void *arg) {
  rshared *s = arg;
  while (!atomic_load(&s->stop)) {
    char *t = NULL;
    if (resil_metrics_render_alloc(s->m, &t, NULL) != RESIL_OK) {
      atomic_store(&s->bad, 1);
      continue;
    }
    /* a kept instance never leaves the exposition */
    if (!strstr(t, "resil_circuitbreaker_state{name=\"stable\",state=\"closed\"} 1"))
      atomic_store(&s->bad, 2);
    resil_metrics_text_free(s->m, t);
    atomic_fetch_add(&s->renders, 1);
  }
  return NULL;
}

static void renders_during_reloads(void **state) {
  (void)state;
  resil_registry *reg = load(A);
  rshared s;
  memset(&s, 0, sizeof s);
  assert_status(RESIL_OK, resil_metrics_new(NULL, &s.m));
  assert_status(RESIL_OK, resil_registry_metrics_add(reg, s.m));
  pthread_t th[RENDERERS];
  for (int i = 0; i < RENDERERS; i++)
    assert_int_equal(0, pthread_create(&th[i], NULL, renderer, &s));
  for (int i = 0; i < RELOADS; i++) {
    const char *y = i % 2 ? A : B;
    assert_status(RESIL_OK, resil_registry_reload_string(reg, y, strlen(y), "x.yaml", NULL));
    /* the replaced breaker has counts on the old object only */
    fail_calls(resil_registry_breaker(reg, "flip"), 1);
  }
  atomic_store(&s.stop, 1);
  for (int i = 0; i < RENDERERS; i++) pthread_join(th[i], NULL);
  assert_int_equal(0, atomic_load(&s.bad));
  assert_true(atomic_load(&s.renders) > 0);
  char *t = render(s.m);
  assert_true(has(t, "resil_circuitbreaker_calls_total{name=\"flip\",kind=\"failed\"} 1\n"));
  assert_true(has(t, "{name=\"gone\"")); /* the last reload was A */
  resil_metrics_text_free(s.m, t);
  resil_registry_free(reg);
  resil_metrics_free(s.m);
}

/* ---- promtool on every example ------------------------------------------ */

static void promtool_accepts_every_example(void **state) {
  (void)state;
  DIR *d = opendir(RESIL_SOURCE_DIR "/examples/config");
  assert_non_null(d);
  resil_registry *regs[16];
  size_t n = 0;
  resil_metrics *m = NULL;
  assert_status(RESIL_OK, resil_metrics_new(NULL, &m));
  struct dirent *de;
  while ((de = readdir(d)) != NULL && n < 16) {
    size_t l = strlen(de->d_name);
    if (l < 5 || strcmp(de->d_name + l - 5, ".yaml") != 0) continue;
    char path[512];
    snprintf(path, sizeof path, "%s/examples/config/%s", RESIL_SOURCE_DIR, de->d_name);
    resil_registry_error err;
    resil_registry_error_init(&err);
    resil_status st = resil_registry_load_file(path, &regs[n], &err);
    if (st != RESIL_OK) fail_msg("%s: %s", path, err.message);
    /* one collector per file: two files may name the same instance */
    resil_metrics *one = NULL;
    assert_status(RESIL_OK, resil_metrics_new(NULL, &one));
    assert_status(RESIL_OK, resil_registry_metrics_add(regs[n], one));
    assert_true(resil_metrics_count(one) > 0);
    mx_promtool_check(one);
    resil_registry_free(regs[n]);
    resil_metrics_free(one);
    n++;
  }
  closedir(d);
  resil_metrics_free(m);
  assert_true(n >= 2);
}

/* ---- the event log ------------------------------------------------------ */

typedef struct lines {
  pthread_mutex_t mu;
  char *v[64];
  int n;
} lines;

static void on_line(void *user, const char *line) {
  lines *l = user;
  pthread_mutex_lock(&l->mu);
  if (l->n < 64) l->v[l->n++] = strdup(line);
  pthread_mutex_unlock(&l->mu);
}

static json_t *line_json(lines *l, int i) {
  assert_true(i < l->n);
  json_error_t je;
  json_t *j = json_loads(l->v[i], 0, &je);
  if (!j) fail_msg("not JSON: %s", l->v[i]);
  assert_non_null(json_object_get(j, "time"));
  return j;
}

static const char *jget(json_t *j, const char *k) { return json_string_value(json_object_get(j, k)); }
static long long jint(json_t *j, const char *k) { return json_integer_value(json_object_get(j, k)); }

static void reload_and_breaker_events(void **state) {
  (void)state;
  lines l;
  memset(&l, 0, sizeof l);
  pthread_mutex_init(&l.mu, NULL);
  resil_event_sink_config sc;
  resil_event_sink_config_init(&sc);
  sc.fn = on_line;
  sc.user = &l;
  resil_event_sink *sink = NULL;
  assert_status(RESIL_OK, resil_event_sink_new(&sc, &sink, NULL));
  resil_registry *reg = load(A);
  assert_status(RESIL_OK, resil_registry_events_attach(reg, sink));
  assert_status(RESIL_EMISUSE, resil_registry_events_attach(NULL, sink));

  /* a configured breaker's transition reaches the log under its name */
  assert_status(RESIL_OK, resil_breaker_transition(resil_registry_breaker(reg, "stable"),
                                                   RESIL_BREAKER_OPEN));
  assert_int_equal(1, l.n);
  json_t *j = line_json(&l, 0);
  assert_string_equal("stable", jget(j, "instance"));
  assert_string_equal("breaker_transition", jget(j, "kind"));
  assert_string_equal("open", jget(j, "to"));
  json_decref(j);

  resil_breaker *old_flip = resil_registry_breaker(reg, "flip");
  resil_registry_lease *lease = NULL;
  assert_ptr_equal(old_flip, resil_registry_acquire(reg, RESIL_REG_BREAKER, "flip", &lease));
  assert_status(RESIL_OK, resil_registry_reload_string(reg, B, strlen(B), "b.yaml", NULL));
  assert_int_equal(2, l.n);
  j = line_json(&l, 1);
  assert_string_equal("registry", jget(j, "instance"));
  assert_string_equal("reload", jget(j, "kind"));
  assert_true(json_is_true(json_object_get(j, "ok")));
  assert_string_equal("b.yaml", jget(j, "file"));
  /* kept: breaker stable, retry stable, chain stable; replaced: breaker
   * flip and chain flip; added: fresh; removed: gone */
  assert_int_equal(3, jint(j, "kept"));
  assert_int_equal(2, jint(j, "replaced"));
  assert_int_equal(1, jint(j, "added"));
  assert_int_equal(1, jint(j, "removed"));
  assert_int_equal(4, jint(j, "changed"));
  assert_int_equal(2, jint(j, "generation"));
  json_decref(j);

  /* the replaced breaker (still leased) lost the listener; its successor
   * and the added one have it */
  assert_status(RESIL_OK, resil_breaker_transition(old_flip, RESIL_BREAKER_OPEN));
  assert_int_equal(2, l.n);
  resil_registry_release(lease);
  assert_status(RESIL_OK, resil_breaker_transition(resil_registry_breaker(reg, "flip"),
                                                   RESIL_BREAKER_OPEN));
  assert_status(RESIL_OK, resil_breaker_transition(resil_registry_breaker(reg, "fresh"),
                                                   RESIL_BREAKER_OPEN));
  assert_int_equal(4, l.n);
  j = line_json(&l, 2);
  assert_string_equal("flip", jget(j, "instance"));
  json_decref(j);
  j = line_json(&l, 3);
  assert_string_equal("fresh", jget(j, "instance"));
  json_decref(j);

  /* a failed reload: one error line with file:line:col, nothing changed */
  const char *bad = "circuitbreaker:\n  instances:\n    stable: {open_wiat: 60s}\n";
  assert_status(RESIL_EINVAL, resil_registry_reload_string(reg, bad, strlen(bad), "bad.yaml",
                                                           NULL));
  assert_int_equal(5, l.n);
  j = line_json(&l, 4);
  assert_string_equal("reload", jget(j, "kind"));
  assert_true(json_is_false(json_object_get(j, "ok")));
  assert_non_null(strstr(jget(j, "error"), "bad.yaml:3:"));
  assert_non_null(strstr(jget(j, "error"), "open_wait")); /* did you mean */
  json_decref(j);
  assert_int_equal(2, resil_registry_generation(reg));
  /* an unreadable file too */
  assert_status(RESIL_EIO, resil_registry_reload(reg, "/nonexistent/x.yaml", NULL));
  assert_int_equal(6, l.n);
  j = line_json(&l, 5);
  assert_true(json_is_false(json_object_get(j, "ok")));
  assert_non_null(strstr(jget(j, "error"), "/nonexistent/x.yaml"));
  json_decref(j);

  /* detached: nothing more reaches the sink, which may then be freed */
  assert_status(RESIL_OK, resil_registry_events_attach(reg, NULL));
  assert_status(RESIL_OK, resil_breaker_reset(resil_registry_breaker(reg, "stable")));
  assert_status(RESIL_OK, resil_registry_reload_string(reg, A, strlen(A), "a.yaml", NULL));
  assert_int_equal(6, l.n);
  resil_event_sink_free(sink);
  resil_registry_free(reg);
  for (int i = 0; i < l.n; i++) free(l.v[i]);
  pthread_mutex_destroy(&l.mu);
}

/* One passed-through call of h (an unkeyed ctx): one PASSED_UNSAFE event. */
static void unsafe_call(resil_hedge *h) {
  assert_non_null(h);
  resil_ctx ctx;
  resil_ctx_init(&ctx);
  resil_hedge_call hc;
  assert_int_equal(RESIL_DECISION_DENY, resil_hedge_begin(h, &ctx, &hc, NULL));
}

/* Configured hedges get the sink's hedge listener (added after creation,
 * resil_hedge_listener_add) and follow reloads as breakers do. */
static void reload_and_hedge_events(void **state) {
  (void)state;
  static const char *HA = "hedge:\n"
                          "  instances:\n"
                          "    keep: {delay: 10ms}\n"
                          "    flip: {delay: 10ms}\n";
  static const char *HB = "hedge:\n"
                          "  instances:\n"
                          "    keep: {delay: 10ms}\n"
                          "    flip: {delay: 20ms}\n"
                          "    fresh: {}\n";
  lines l;
  memset(&l, 0, sizeof l);
  pthread_mutex_init(&l.mu, NULL);
  resil_event_sink_config sc;
  resil_event_sink_config_init(&sc);
  sc.fn = on_line;
  sc.user = &l;
  resil_event_sink *sink = NULL;
  assert_status(RESIL_OK, resil_event_sink_new(&sc, &sink, NULL));
  resil_registry *reg = load(HA);
  assert_status(RESIL_OK, resil_registry_events_attach(reg, sink));
  unsafe_call(resil_registry_hedge(reg, "keep"));
  assert_int_equal(1, l.n);
  json_t *j = line_json(&l, 0);
  assert_string_equal("keep", jget(j, "instance"));
  assert_string_equal("hedge", jget(j, "kind"));
  assert_string_equal("passed_unsafe", jget(j, "event"));
  json_decref(j);

  resil_hedge *old_flip = resil_registry_hedge(reg, "flip");
  resil_registry_lease *lease = NULL;
  assert_ptr_equal(old_flip, resil_registry_acquire(reg, RESIL_REG_HEDGE, "flip", &lease));
  assert_status(RESIL_OK, resil_registry_reload_string(reg, HB, strlen(HB), "hb.yaml", NULL));
  assert_int_equal(2, l.n); /* the reload line */
  /* the replaced hedge (still leased) lost the listener */
  unsafe_call(old_flip);
  assert_int_equal(2, l.n);
  resil_registry_release(lease);
  unsafe_call(resil_registry_hedge(reg, "flip"));
  unsafe_call(resil_registry_hedge(reg, "fresh"));
  unsafe_call(resil_registry_hedge(reg, "keep")); /* kept: still once */
  assert_int_equal(5, l.n);
  const char *want[] = {"flip", "fresh", "keep"};
  for (int i = 0; i < 3; i++) {
    j = line_json(&l, 2 + i);
    assert_string_equal(want[i], jget(j, "instance"));
    assert_string_equal("hedge", jget(j, "kind"));
    json_decref(j);
  }
  /* detached: nothing more, and the sink may be freed */
  assert_status(RESIL_OK, resil_registry_events_attach(reg, NULL));
  unsafe_call(resil_registry_hedge(reg, "keep"));
  assert_int_equal(5, l.n);
  resil_event_sink_free(sink);
  resil_registry_free(reg);
  for (int i = 0; i < l.n; i++) free(l.v[i]);
  pthread_mutex_destroy(&l.mu);
}

/* ---- store passwords ------------------------------------------------------ */

/* A store URI's password never reaches a message: the store's own errors,
 * libpq's quoted in them (a URI it cannot parse, an invalid percent-escape
 * of the password alone, a refused connection), the registry's load and
 * reload errors, the event log's reload line, and `resil config check`,
 * `resil upstream --store` and `resil fixture --store`. No server needed:
 * every URI fails before or at the connection (127.0.0.1:1). */
static const char *const secret_uris[] = {
    "postgresql://u:S3cr3t@[::1/db",
    "postgresql://u:S3cr%zzt@127.0.0.1:1/db",
    "postgresql://u:S3cr3t@127.0.0.1:1/db?connect_timeout=2",
    "postgresql://127.0.0.1:1/db?user=u&password=S3cr3t&connect_timeout=2",
    "postgresq://u:S3cr3t@h/db",
    "sqlite:/nonexistent-dir/ops.db?password=S3cr3t",
};
#define N_SECRET_URIS (sizeof secret_uris / sizeof secret_uris[0])

static void no_secret(const char *where, const char *text) {
  if (strstr(text, "S3cr")) fail_msg("%s shows the password: %s", where, text);
}

static void store_yaml(char *buf, size_t n, const char *uri) {
  snprintf(buf, n, "store:\n  instances:\n    ops: {uri: \"%s\"}\n", uri);
}

static void store_passwords_never_in_errors_or_events(void **state) {
  (void)state;
  lines l;
  memset(&l, 0, sizeof l);
  pthread_mutex_init(&l.mu, NULL);
  resil_event_sink_config sc;
  resil_event_sink_config_init(&sc);
  sc.fn = on_line;
  sc.user = &l;
  resil_event_sink *sink = NULL;
  assert_status(RESIL_OK, resil_event_sink_new(&sc, &sink, NULL));
  resil_registry *reg = load(A);
  assert_status(RESIL_OK, resil_registry_events_attach(reg, sink));
  for (size_t i = 0; i < N_SECRET_URIS; i++) {
    const char *uri = secret_uris[i];
    resil_store *st = NULL;
    resil_error e;
    assert_int_not_equal(RESIL_OK, resil_store_open(uri, NULL, &st, &e));
    print_message("%s\n  -> %s\n", uri, e.msg);
    no_secret("resil_store_open", e.msg);
    char yaml[256], msg[1024];
    store_yaml(yaml, sizeof yaml, uri);
    resil_registry *r2 = NULL;
    resil_registry_error err;
    resil_registry_error_init(&err);
    assert_int_not_equal(RESIL_OK, resil_registry_load_string(yaml, strlen(yaml), "s.yaml", &r2, &err));
    resil_registry_error_format(&err, msg, sizeof msg);
    no_secret("resil_registry_load_string", msg);
    assert_string_equal(err.key_path, "store.instances.ops.uri");
    int before = l.n;
    assert_int_not_equal(RESIL_OK, resil_registry_reload_string(reg, yaml, strlen(yaml), "s.yaml", &err));
    resil_registry_error_format(&err, msg, sizeof msg);
    no_secret("resil_registry_reload_string", msg);
    assert_int_equal(before + 1, l.n);
    json_t *j = line_json(&l, l.n - 1);
    assert_string_equal("reload", jget(j, "kind"));
    assert_non_null(jget(j, "error"));
    json_decref(j);
    no_secret("the reload event", l.v[l.n - 1]);
  }
  /* Whatever an application passes as the error. */
  assert_status(RESIL_OK, resil_event_reload(sink, "registry", 0, "s.yaml", 0, 0,
                                             "store.instances.ops.uri: cannot connect to "
                                             "postgresql://u:S3cr3t@db/x?password=S3cr3t2"));
  no_secret("resil_event_reload", l.v[l.n - 1]);
  resil_registry_free(reg);
  resil_event_sink_free(sink);
  for (int i = 0; i < l.n; i++) free(l.v[i]);
  pthread_mutex_destroy(&l.mu);

  /* The CLI: every message it prints on the way out. */
  const char *bin = getenv("RESIL_BIN");
  if (!bin) {
    print_message("RESIL_BIN not set: the CLI cases are skipped\n");
    return;
  }
  char dir[] = "/tmp/resil-redact-XXXXXX";
  assert_non_null(mkdtemp(dir));
  char file[64];
  snprintf(file, sizeof file, "%s/s.yaml", dir);
  for (size_t i = 0; i < N_SECRET_URIS; i++) {
    char yaml[256];
    store_yaml(yaml, sizeof yaml, secret_uris[i]);
    FILE *f = fopen(file, "w");
    assert_non_null(f);
    fputs(yaml, f);
    fclose(f);
    /* `config check` without --open opens no store: it may pass (a uri
     * of the right form) or fail, and never shows the secret; with --open
     * it connects and must fail. */
    char cmd[4][512];
    snprintf(cmd[0], sizeof cmd[0], "timeout 30 '%s' config check --open '%s' 2>&1", bin, file);
    snprintf(cmd[1], sizeof cmd[1], "timeout 30 '%s' upstream --port 0 --store '%s' 2>&1", bin,
             secret_uris[i]);
    snprintf(cmd[2], sizeof cmd[2], "timeout 30 '%s' fixture --port 0 --store '%s' 2>&1", bin,
             secret_uris[i]);
    snprintf(cmd[3], sizeof cmd[3], "timeout 30 '%s' config check '%s' 2>&1", bin, file);
    for (int k = 0; k < 4; k++) {
      FILE *p = popen(cmd[k], "r");
      assert_non_null(p);
      char out[8192];
      size_t n = fread(out, 1, sizeof out - 1, p);
      out[n] = '\0';
      int rc = pclose(p);
      if (rc == 0 && k < 3) fail_msg("%s succeeded: %s", cmd[k], out);
      no_secret(cmd[k], out);
    }
  }
  unlink(file);
  rmdir(dir);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(metrics_follow_reloads),
      cmocka_unit_test(a_name_clash_adds_nothing),
      cmocka_unit_test(renders_during_reloads),
      cmocka_unit_test(promtool_accepts_every_example),
      cmocka_unit_test(reload_and_breaker_events),
      cmocka_unit_test(reload_and_hedge_events),
      cmocka_unit_test(store_passwords_never_in_errors_or_events),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
#else
int main(void) { return 77; }
#endif
