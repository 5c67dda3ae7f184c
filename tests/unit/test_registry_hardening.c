/* The registry against hostile or broken files (issue 19, section 4):
 * reloads compare whole values, an empty document does not empty a
 * registry, parsing is bounded, messages carry no raw control bytes,
 * `config check` has no side effects unless asked, `describe --config`
 * describes every chain. Real files in a temp dir; the CLI cases run the
 * built tool. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "test_util.h"

#ifdef RESIL_HAVE_CONFIG
#include "resil/http.h"
#include "resil/registry.h"
#include "resil/resil.h"
#include "resil/store.h"

static char tmpdir[64];

static int setup(void **state) {
  (void)state;
  snprintf(tmpdir, sizeof tmpdir, "/tmp/resil-reghard-XXXXXX");
  assert_non_null(mkdtemp(tmpdir));
  return 0;
}
static int teardown(void **state) {
  (void)state;
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
  assert_int_equal(system(cmd), 0);
  return 0;
}

/* Writes len bytes of text to tmpdir/name; returns the path (static buffer
 * per call). */
static const char *write_bytes(const char *name, const char *text, size_t len) {
  static char paths[4][256];
  static int k;
  char *p = paths[k++ % 4];
  snprintf(p, 256, "%s/%s", tmpdir, name);
  FILE *f = fopen(p, "w");
  assert_non_null(f);
  assert_int_equal(fwrite(text, 1, len, f), len);
  assert_int_equal(fclose(f), 0);
  return p;
}
static const char *write_file(const char *name, const char *text) {
  return write_bytes(name, text, strlen(text));
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* ---- 1. reloads compare whole values ---------------------------------------- */

/* A store whose path changes after its 300th byte is a new store (the old
 * comparison cut values at about 300 bytes: the reload kept the old
 * database open and writes went on to it). */
static void reload_replaces_a_store_whose_long_uri_changed_at_the_end(void **state) {
  (void)state;
  char dir[512];
  snprintf(dir, sizeof dir, "%s/", tmpdir);
  size_t l = strlen(dir);
  /* a directory name of 200 bytes, then a file name of 150: 350+ bytes */
  memset(dir + l, 'd', 200);
  dir[l + 200] = 0;
  assert_int_equal(mkdir(dir, 0700), 0);
  char stem[256];
  memset(stem, 'f', 150);
  stem[150] = 0;
  char yaml[2048];
  snprintf(yaml, sizeof yaml, "store:\n  instances:\n    ops: {uri: \"sqlite:%s/%s_a.db\"}\n", dir,
           stem);
  resil_registry *reg = NULL;
  resil_registry_error err;
  resil_registry_error_init(&err);
  assert_int_equal(resil_registry_load_string(yaml, strlen(yaml), "long", &reg, &err), RESIL_OK);
  resil_store *a = resil_registry_store(reg, "ops");
  assert_non_null(a);
  snprintf(yaml, sizeof yaml, "store:\n  instances:\n    ops: {uri: \"sqlite:%s/%s_b.db\"}\n", dir,
           stem);
  assert_true(strlen(yaml) > 300 + 40);
  assert_int_equal(resil_registry_reload_string(reg, yaml, strlen(yaml), "long", &err), RESIL_OK);
  assert_ptr_not_equal(resil_registry_store(reg, "ops"), a);
  resil_registry_reload_stats rs;
  assert_int_equal(resil_registry_last_reload(reg, &rs), RESIL_OK);
  assert_int_equal(rs.replaced, 1);
  assert_int_equal(rs.kept, 0);
  /* the same text again: kept */
  resil_store *b = resil_registry_store(reg, "ops");
  assert_int_equal(resil_registry_reload_string(reg, yaml, strlen(yaml), "long", &err), RESIL_OK);
  assert_ptr_equal(resil_registry_store(reg, "ops"), b);
  resil_registry_free(reg);
}

/* A long endpoint query, changed at its end, and header lists that the old
 * text form could not tell apart: one header 'A: x";H="B: y' against the
 * two headers 'A: x' and 'B: y'. */
static void reload_compares_endpoints_and_headers_exactly(void **state) {
  (void)state;
  char q1[600], q2[600];
  memset(q1, 'q', 400);
  q1[400] = 0;
  snprintf(q2, sizeof q2, "%s", q1);
  q1[399] = '1';
  q2[399] = '2';
  const char *tmpl = "http_client:\n"
                     "  instances:\n"
                     "    api:\n"
                     "      base_url: http://127.0.0.1:9\n"
                     "      endpoints:\n"
                     "        get: {path: /x, query: \"%s\", headers: %s}\n";
  char yaml[2048];
  snprintf(yaml, sizeof yaml, tmpl, q1, "['A: x']");
  resil_registry *reg = NULL;
  resil_registry_error err;
  resil_registry_error_init(&err);
  assert_int_equal(resil_registry_load_string(yaml, strlen(yaml), "h", &reg, &err), RESIL_OK);
  resil_http_client *c1 = resil_registry_http_client(reg, "api");
  snprintf(yaml, sizeof yaml, tmpl, q2, "['A: x']");
  assert_int_equal(resil_registry_reload_string(reg, yaml, strlen(yaml), "h", &err), RESIL_OK);
  resil_http_client *c2 = resil_registry_http_client(reg, "api");
  assert_ptr_not_equal(c2, c1);
  /* one header whose value looks like the old separator */
  snprintf(yaml, sizeof yaml, tmpl, q2, "['A: x\";H=\"B: y']");
  assert_int_equal(resil_registry_reload_string(reg, yaml, strlen(yaml), "h", &err), RESIL_OK);
  resil_http_client *c3 = resil_registry_http_client(reg, "api");
  assert_ptr_not_equal(c3, c2);
  /* two headers: not the same settings */
  snprintf(yaml, sizeof yaml, tmpl, q2, "['A: x', 'B: y']");
  assert_int_equal(resil_registry_reload_string(reg, yaml, strlen(yaml), "h", &err), RESIL_OK);
  resil_http_client *c4 = resil_registry_http_client(reg, "api");
  assert_ptr_not_equal(c4, c3);
  /* and back: not the same either */
  snprintf(yaml, sizeof yaml, tmpl, q2, "['A: x\";H=\"B: y']");
  assert_int_equal(resil_registry_reload_string(reg, yaml, strlen(yaml), "h", &err), RESIL_OK);
  assert_ptr_not_equal(resil_registry_http_client(reg, "api"), c4);
  resil_registry_reload_stats rs;
  assert_int_equal(resil_registry_last_reload(reg, &rs), RESIL_OK);
  assert_int_equal(rs.replaced, 1);
  /* unchanged: kept */
  resil_http_client *c5 = resil_registry_http_client(reg, "api");
  assert_int_equal(resil_registry_reload_string(reg, yaml, strlen(yaml), "h", &err), RESIL_OK);
  assert_ptr_equal(resil_registry_http_client(reg, "api"), c5);
  resil_registry_free(reg);
}

/* ---- 2. an empty or truncated document does not empty a registry ------------ */

static const char *SVC = "circuitbreaker:\n"
                         "  instances:\n"
                         "    payments: {open_wait: 60s}\n"
                         "retry:\n"
                         "  instances:\n"
                         "    payments: {max_attempts: 3}\n"
                         "chain:\n"
                         "  instances:\n"
                         "    payments: {layers: [{retry: payments}, {circuitbreaker: payments}]}\n";

/* Empty, comments only, {}, ~, a truncated file (a YAML error): each reload
 * is refused, the instances and their state (an OPEN breaker) stay. A file
 * that names a section with no instances does remove them. */
static void reload_refuses_an_empty_document_and_keeps_state(void **state) {
  (void)state;
  const char *p = write_file("svc.yaml", SVC);
  resil_registry *reg = NULL;
  resil_registry_error err;
  resil_registry_error_init(&err);
  assert_int_equal(resil_registry_load_file(p, &reg, &err), RESIL_OK);
  resil_breaker *br = resil_registry_breaker(reg, "payments");
  resil_chain *ch = resil_registry_chain(reg, "payments");
  assert_int_equal(resil_breaker_transition(br, RESIL_BREAKER_OPEN), RESIL_OK);
  const char *empties[] = {"", "# nothing here\n", "{}\n", "~\n", "---\n"};
  for (size_t i = 0; i < sizeof empties / sizeof *empties; i++) {
    p = write_file("svc.yaml", empties[i]);
    assert_int_equal(resil_registry_reload(reg, p, &err), RESIL_EINVAL);
    assert_non_null(strstr(err.message, "the document has no sections"));
    assert_non_null(strstr(err.message, "remove all 3 instances"));
    assert_int_equal(resil_registry_reload_string(reg, empties[i], strlen(empties[i]), "s", &err),
                     RESIL_EINVAL);
  }
  /* a file cut in the middle of a flow mapping: a YAML error */
  p = write_file("svc.yaml", "circuitbreaker:\n  instances:\n    payments: {open_wait: 6");
  assert_int_equal(resil_registry_reload(reg, p, &err), RESIL_EINVAL);
  assert_non_null(strstr(err.message, "YAML: "));
  assert_int_equal(resil_registry_generation(reg), 1);
  assert_int_equal(resil_registry_count(reg, RESIL_REG_KIND_COUNT_), 3);
  assert_ptr_equal(resil_registry_breaker(reg, "payments"), br);
  assert_ptr_equal(resil_registry_chain(reg, "payments"), ch);
  assert_int_equal(resil_breaker_state(br), RESIL_BREAKER_OPEN);
  /* the same file again: everything kept, still OPEN */
  p = write_file("svc.yaml", SVC);
  assert_int_equal(resil_registry_reload(reg, p, &err), RESIL_OK);
  assert_ptr_equal(resil_registry_breaker(reg, "payments"), br);
  assert_int_equal(resil_breaker_state(br), RESIL_BREAKER_OPEN);
  /* meaning it: a section with no instances removes them all */
  p = write_file("svc.yaml", "retry: {}\n");
  assert_int_equal(resil_registry_reload(reg, p, &err), RESIL_OK);
  assert_int_equal(resil_registry_count(reg, RESIL_REG_KIND_COUNT_), 0);
  /* an empty registry may reload an empty document */
  assert_int_equal(resil_registry_reload_string(reg, "", 0, "s", &err), RESIL_OK);
  resil_registry_free(reg);
}

/* A reload from a file cut at a line boundary (valid YAML naming fewer
 * instances) removes them; the next reload, from the whole file, gives them
 * back with their state: the OPEN breaker and the chain using it are the
 * same objects. A store is not kept aside (closed on removal); an instance
 * not named by the very next reload is gone for good. */
static void instances_that_come_back_keep_their_state(void **state) {
  (void)state;
  char db[256], whole[2048];
  snprintf(db, sizeof db, "%s/ops.db", tmpdir);
  snprintf(whole, sizeof whole,
           "%s"
           "store:\n  instances:\n    ops: {uri: \"sqlite:%s\"}\n",
           SVC, db);
  resil_registry *reg = NULL;
  resil_registry_error err;
  resil_registry_error_init(&err);
  assert_int_equal(resil_registry_load_string(whole, strlen(whole), "w", &reg, &err), RESIL_OK);
  resil_breaker *br = resil_registry_breaker(reg, "payments");
  resil_chain *ch = resil_registry_chain(reg, "payments");
  resil_retry *rt = resil_registry_retry(reg, "payments");
  assert_non_null(resil_registry_store(reg, "ops"));
  assert_int_equal(resil_breaker_transition(br, RESIL_BREAKER_OPEN), RESIL_OK);
  /* cut after the retry section: the chain and the store are gone */
  const char *cut = strstr(whole, "chain:");
  assert_non_null(cut);
  assert_int_equal(
      resil_registry_reload_string(reg, whole, (size_t)(cut - whole), "w", &err), RESIL_OK);
  assert_null(resil_registry_chain(reg, "payments"));
  assert_null(resil_registry_store(reg, "ops"));
  /* the whole file again */
  assert_int_equal(resil_registry_reload_string(reg, whole, strlen(whole), "w", &err), RESIL_OK);
  assert_ptr_equal(resil_registry_breaker(reg, "payments"), br);
  assert_ptr_equal(resil_registry_retry(reg, "payments"), rt);
  assert_ptr_equal(resil_registry_chain(reg, "payments"), ch);
  assert_int_equal(resil_breaker_state(br), RESIL_BREAKER_OPEN);
  resil_registry_reload_stats rs;
  assert_int_equal(resil_registry_last_reload(reg, &rs), RESIL_OK);
  assert_int_equal(rs.kept, 2);
  assert_int_equal(rs.added, 2);
  assert_int_equal(rs.restored, 1); /* the chain; the store is new */
  assert_non_null(resil_registry_store(reg, "ops"));
  /* the OPEN breaker itself removed (only the retry named), then back */
  const char *only_rt = "retry:\n  instances:\n    payments: {max_attempts: 3}\n";
  assert_int_equal(resil_registry_reload_string(reg, only_rt, strlen(only_rt), "w", &err), RESIL_OK);
  assert_null(resil_registry_breaker(reg, "payments"));
  ch = resil_registry_chain(reg, "payments");
  assert_null(ch);
  assert_int_equal(resil_registry_reload_string(reg, whole, strlen(whole), "w", &err), RESIL_OK);
  assert_ptr_equal(resil_registry_breaker(reg, "payments"), br);
  assert_int_equal(resil_breaker_state(br), RESIL_BREAKER_OPEN);
  assert_int_equal(resil_registry_last_reload(reg, &rs), RESIL_OK);
  assert_int_equal(rs.restored, 2); /* the breaker and the chain */
  /* cut at the start: everything but the breaker removed ... */
  const char *only_br = "circuitbreaker:\n  instances:\n    payments: {open_wait: 60s}\n";
  assert_int_equal(resil_registry_reload_string(reg, only_br, strlen(only_br), "w", &err), RESIL_OK);
  /* ... and a reload that does not name them: gone */
  assert_int_equal(resil_registry_reload_string(reg, only_br, strlen(only_br), "w", &err), RESIL_OK);
  assert_int_equal(resil_registry_reload_string(reg, whole, strlen(whole), "w", &err), RESIL_OK);
  assert_ptr_equal(resil_registry_breaker(reg, "payments"), br);
  assert_ptr_not_equal(resil_registry_chain(reg, "payments"), NULL);
  assert_int_equal(resil_registry_last_reload(reg, &rs), RESIL_OK);
  assert_int_equal(rs.restored, 0);
  assert_int_equal(rs.added, 3);
  /* changed settings: a new object, not the one removed */
  resil_retry *rt2 = resil_registry_retry(reg, "payments");
  assert_int_equal(resil_registry_reload_string(reg, only_br, strlen(only_br), "w", &err), RESIL_OK);
  const char *changed = "retry:\n  instances:\n    payments: {max_attempts: 4}\n";
  assert_int_equal(resil_registry_reload_string(reg, changed, strlen(changed), "w", &err), RESIL_OK);
  assert_ptr_not_equal(resil_registry_retry(reg, "payments"), rt2);
  assert_non_null(resil_registry_retry(reg, "payments"));
  assert_int_equal(resil_registry_last_reload(reg, &rs), RESIL_OK);
  assert_int_equal(rs.restored, 0);
  resil_registry_free(reg);
}

/* ---- 3. parsing is bounded --------------------------------------------------- */

/* A growing text buffer for generated documents. */
typedef struct gbuf {
  char *p;
  size_t len, cap;
} gbuf;
static void gput(gbuf *b, const char *fmt, ...) {
  for (;;) {
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(b->p ? b->p + b->len : NULL, b->p ? b->cap - b->len : 0, fmt, ap);
    va_end(ap);
    assert_true(k >= 0);
    if (b->p && (size_t)k < b->cap - b->len) {
      b->len += (size_t)k;
      return;
    }
    b->cap = (b->cap + (size_t)k + 1) * 2;
    b->p = realloc(b->p, b->cap);
    assert_non_null(b->p);
  }
}

/* 50,000 keys in one mapping, the last a duplicate of the first: found by
 * sorting, in well under a second (13.5 s before: a quadratic scan). */
static void a_duplicate_among_50k_keys_is_found_fast(void **state) {
  (void)state;
  gbuf b = {0};
  gput(&b, "circuitbreaker:\n  instances:\n    b:\n");
  for (int i = 0; i < 49999; i++) gput(&b, "      k%d: 1\n", i);
  gput(&b, "      k0: 1\n");
  resil_registry *reg = NULL;
  resil_registry_error err;
  resil_registry_error_init(&err);
  double t0 = now_s();
  assert_int_equal(resil_registry_load_string(b.p, b.len, "dup", &reg, &err), RESIL_EINVAL);
  double dt = now_s() - t0;
  printf("# 50k keys, duplicate found in %.3f s\n", dt);
  assert_true(dt < 2.0); /* about 0.1 s; sanitizers and a loaded machine allowed */
  char line[512];
  resil_registry_error_format(&err, line, sizeof line);
  assert_string_equal(line,
                      "dup:50003:7: circuitbreaker.instances.b.k0: duplicate key (first at line 4)");
  /* the first duplicate in file order is the one reported */
  const char *two = "retry:\n  instances:\n    a: {}\n    b: {}\n    b: {}\n    a: {}\n";
  assert_int_equal(resil_registry_load_string(two, strlen(two), "two", &reg, &err), RESIL_EINVAL);
  resil_registry_error_format(&err, line, sizeof line);
  assert_string_equal(line, "two:5:5: retry.instances.b: duplicate key (first at line 4)");
  free(b.p);
}

/* References and base configs are looked up by sorting too: 15,000 chains
 * naming 15,000 retries naming 15,000 configs by base_config (before: 20 s
 * for 20,000 chains and retries, 15 s for 25,000 retries and configs). */
static void many_references_resolve_fast(void **state) {
  (void)state;
  gbuf b = {0};
  enum { N = 15000 }; /* 225,000 nodes: within the limit */
  gput(&b, "retry:\n  configs:\n");
  for (int i = 0; i < N; i++) gput(&b, "    c%d: {max_attempts: 2}\n", i);
  gput(&b, "  instances:\n");
  for (int i = 0; i < N; i++) gput(&b, "    r%d: {base_config: c%d}\n", i, N - 1 - i);
  gput(&b, "chain:\n  instances:\n");
  for (int i = 0; i < N; i++) gput(&b, "    x%d: {layers: [{retry: r%d}]}\n", i, N - 1 - i);
  resil_registry *reg = NULL;
  resil_registry_error err;
  resil_registry_error_init(&err);
  double t0 = now_s();
  assert_int_equal(resil_registry_load_string(b.p, b.len, "refs", &reg, &err), RESIL_OK);
  double dt = now_s() - t0;
  printf("# 15k configs, retries and chains loaded in %.3f s\n", dt);
  assert_true(dt < 5.0); /* about 0.5 s */
  assert_int_equal(resil_registry_count(reg, RESIL_REG_KIND_COUNT_), 2 * N);
  resil_registry_free(reg);
  free(b.p);
}

static void depth_keys_and_nodes_are_limited(void **state) {
  (void)state;
  resil_registry *reg = NULL;
  resil_registry_error err;
  resil_registry_error_init(&err);
  char line[512];
  /* 100,000 nested sequences: refused at the 65th, at once (53 s before) */
  gbuf b = {0};
  gput(&b, "retry: ");
  for (int i = 0; i < 100000; i++) gput(&b, "[");
  for (int i = 0; i < 100000; i++) gput(&b, "]");
  gput(&b, "\n");
  double t0 = now_s();
  assert_int_equal(resil_registry_load_string(b.p, b.len, "deep", &reg, &err), RESIL_EINVAL);
  assert_true(now_s() - t0 < 2.0);
  resil_registry_error_format(&err, line, sizeof line);
  assert_string_equal(line, "deep:1:71: nested deeper than 64 levels");
  /* one key too many in one mapping */
  b.len = 0;
  gput(&b, "retry:\n  instances:\n    r:\n");
  for (int i = 0; i <= RESIL_REGISTRY_MAX_KEYS; i++) gput(&b, "      k%d: 1\n", i);
  assert_int_equal(resil_registry_load_string(b.p, b.len, "wide", &reg, &err), RESIL_EINVAL);
  resil_registry_error_format(&err, line, sizeof line);
  char want[128];
  snprintf(want, sizeof want, "wide:%d:7: more than 65536 keys in one mapping",
           4 + RESIL_REGISTRY_MAX_KEYS);
  assert_string_equal(line, want);
  /* and a sequence too long */
  b.len = 0;
  gput(&b, "retry:\n  instances:\n    r: {retry_classes: [");
  for (int i = 0; i <= RESIL_REGISTRY_MAX_KEYS; i++) gput(&b, "%sunknown", i ? "," : "");
  gput(&b, "]}\n");
  assert_int_equal(resil_registry_load_string(b.p, b.len, "long", &reg, &err), RESIL_EINVAL);
  assert_string_equal(err.message, "more than 65536 items in one sequence");
  /* a long list of classes inherited by many instances: refused at once
   * (walking it once per instance was quadratic within the limits) */
  b.len = 0;
  gput(&b, "retry:\n  configs:\n    default: {retry_classes: [");
  for (int i = 0; i < 60000; i++) gput(&b, "%sunknown", i ? "," : "");
  gput(&b, "]}\n  instances:\n");
  for (int i = 0; i < 60000; i++) gput(&b, "    r%d:\n", i);
  t0 = now_s();
  assert_int_equal(resil_registry_load_string(b.p, b.len, "cls", &reg, &err), RESIL_EINVAL);
  printf("# 60k classes x 60k instances refused in %.3f s\n", now_s() - t0);
  assert_true(now_s() - t0 < 2.0);
  resil_registry_error_format(&err, line, sizeof line);
  assert_non_null(strstr(line, "cls:3:30: retry.configs.default.retry_classes: at most "));
  /* the same with a list of base URLs (an http_client's instances): each
   * instance copied the list (8 bytes an item) and walked it before the
   * client refused it, so 3000 instances of a 65,000-item list took 1.9 GB
   * and 6 s; now refused at the list, at once */
  b.len = 0;
  gput(&b, "http_client:\n  configs:\n    default: {instances: [");
  for (int i = 0; i < 20000; i++) gput(&b, "%s\"http://127.0.0.1:%d\"", i ? "," : "", 1 + i);
  gput(&b, "]}\n  instances:\n");
  for (int i = 0; i < 2000; i++) gput(&b, "    c%d: {endpoints: {e: {path: /x}}}\n", i);
  t0 = now_s();
  assert_int_equal(resil_registry_load_string(b.p, b.len, "urls", &reg, &err), RESIL_EINVAL);
  printf("# 20k base URLs x 2k clients refused in %.3f s\n", now_s() - t0);
  assert_true(now_s() - t0 < 2.0);
  resil_registry_error_format(&err, line, sizeof line);
  assert_string_equal(line, "urls:3:26: http_client.configs.default.instances: at most 256 base "
                            "URLs in a list (an upstream has at most 64 instances), got 20000");
  /* nodes: many mappings, none too wide */
  b.len = 0;
  gput(&b, "retry:\n  instances:\n");
  for (int i = 0; i < 60000; i++) gput(&b, "    r%d: {max_attempts: 2, wait: 1s}\n", i);
  assert_int_equal(resil_registry_load_string(b.p, b.len, "big", &reg, &err), RESIL_EINVAL);
  assert_string_equal(err.message, "more than 262144 nodes in the document");
  assert_true(err.line > 3);
  free(b.p);
}

/* Only regular files of at most 16 MiB: a FIFO is refused at once (the
 * load runs in a child that an alarm kills if it blocks), a device, a
 * directory and a file over the limit too. */
static void only_regular_files_up_to_the_limit_are_read(void **state) {
  (void)state;
  char fifo[256];
  snprintf(fifo, sizeof fifo, "%s/fifo.yaml", tmpdir);
  assert_int_equal(mkfifo(fifo, 0600), 0);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    alarm(5);
    resil_registry *reg = NULL;
    resil_registry_error err;
    resil_registry_error_init(&err);
    resil_status st = resil_registry_load_file(fifo, &reg, &err);
    _exit(st == RESIL_EIO && strstr(err.message, "cannot read: not a regular file (a FIFO)")
              ? 0
              : 1);
  }
  int ws = 0;
  double t0 = now_s();
  assert_int_equal(waitpid(pid, &ws, 0), pid);
  assert_true(now_s() - t0 < 5.0);
  assert_true(WIFEXITED(ws)); /* not killed by the alarm: it did not block */
  assert_int_equal(WEXITSTATUS(ws), 0);
  resil_registry *reg = NULL;
  resil_registry_error err;
  resil_registry_error_init(&err);
  /* a reload from the FIFO is refused the same way, nothing changed */
  const char *ok = "retry:\n  instances:\n    r: {}\n";
  assert_int_equal(resil_registry_load_string(ok, strlen(ok), "ok", &reg, &err), RESIL_OK);
  pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    alarm(5);
    _exit(resil_registry_reload(reg, fifo, &err) == RESIL_EIO ? 0 : 1);
  }
  assert_int_equal(waitpid(pid, &ws, 0), pid);
  assert_true(WIFEXITED(ws));
  assert_int_equal(WEXITSTATUS(ws), 0);
  resil_registry_free(reg);
  reg = NULL;
  assert_int_equal(resil_registry_load_file("/dev/null", &reg, &err), RESIL_EIO);
  assert_string_equal(err.message, "cannot read: not a regular file (a device)");
  assert_int_equal(resil_registry_load_file(tmpdir, &reg, &err), RESIL_EIO);
  assert_string_equal(err.message, "cannot read: not a regular file (a directory)");
  /* over the limit: a sparse file, refused by its size before reading */
  char big[256];
  snprintf(big, sizeof big, "%s/big.yaml", tmpdir);
  int fd = open(big, O_CREAT | O_WRONLY | O_TRUNC, 0600);
  assert_true(fd >= 0);
  assert_int_equal(ftruncate(fd, (off_t)RESIL_REGISTRY_MAX_FILE_BYTES + 1), 0);
  close(fd);
  assert_int_equal(resil_registry_load_file(big, &reg, &err), RESIL_EIO);
  assert_string_equal(err.message,
                      "cannot read: larger than the 16777216-byte limit of a registry file");
  assert_null(reg);
}

/* ---- 4. no raw control bytes in any message ------------------------------- */

/* 1 when line holds no control byte, DEL or byte >= 0x80. */
static int clean(const char *line) {
  for (const unsigned char *p = (const unsigned char *)line; *p; p++)
    if (*p < 0x20 || *p >= 0x7f) return 0;
  return 1;
}

/* Keys, values, instance names (in the key path) and the file name are
 * quoted escaped as the HTTP log escapes them ("\xNN"); "\0" in a quoted
 * scalar is refused. */
static void messages_escape_control_bytes_and_nul_is_refused(void **state) {
  (void)state;
  resil_registry *reg = NULL;
  resil_registry_error err;
  resil_registry_error_init(&err);
  char line[1024];
  struct {
    const char *yaml, *name, *want;
  } cases[] = {
      {"retry:\n  instances:\n    r: {\"a\\e[31mb\": 1}\n", "k",
       "k:3:9: retry.instances.r.a\\x1b[31mb: unknown key 'a\\x1b[31mb' (expected one of: "},
      {"retry:\n  instances:\n    r: {max_attempts: \"\\e]0;pwn\\a\"}\n", "v",
       "v:3:23: retry.instances.r.max_attempts: expected a whole number 0..4294967295, got "
       "'\\x1b]0;pwn\\x07'"},
      {"retry:\n  instances:\n    \"r\\n\\r\": {wait: \"1\\u2028s\"}\n", "a\nb",
       "a\\x0ab:3:5: retry.instances.r\\x0a\\x0d: an instance name must not contain control "
       "characters (byte 0x0a at offset 1)"},
      {"retry:\n  instances:\n    \"r\\0x\": {}\n", "nul",
       "nul:3:5: a NUL byte (\\0) at offset 1 of a scalar: not allowed (a C string would end "
       "there)"},
      {"http_client:\n  instances:\n    c:\n      base_url: http://127.0.0.1:9\n"
       "      endpoints:\n        e: {path: \"/a\\0b\"}\n",
       "nul2", "nul2:6:19: a NUL byte (\\0) at offset 2 of a scalar"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    assert_int_equal(
        resil_registry_load_string(cases[i].yaml, strlen(cases[i].yaml), cases[i].name, &reg, &err),
        RESIL_EINVAL);
    resil_registry_error_format(&err, line, sizeof line);
    printf("# %s\n", line);
    assert_true(clean(line));
    assert_true(clean(err.file) && clean(err.key_path) && clean(err.message));
    assert_true(strncmp(line, cases[i].want, strlen(cases[i].want)) == 0);
  }
  /* an instance name with a control character is refused (it would reach
   * /metrics labels and describe's output raw) */
  const char *esc = "circuitbreaker:\n  instances:\n    \"b\\e[2J\": {}\n";
  assert_int_equal(resil_registry_load_string(esc, strlen(esc), "e", &reg, &err), RESIL_EINVAL);
  resil_registry_error_format(&err, line, sizeof line);
  assert_string_equal(line, "e:3:5: circuitbreaker.instances.b\\x1b[2J: an instance name must not "
                            "contain control characters (byte 0x1b at offset 1)");
  /* U+2028 in a value (a JavaScript line terminator) is escaped too */
  const char *ls = "retry:\n  instances:\n    r: {wait: \"1\\u2028s\"}\n";
  assert_int_equal(resil_registry_load_string(ls, strlen(ls), "u", &reg, &err), RESIL_EINVAL);
  assert_non_null(strstr(err.message, "\\xe2\\x80\\xa8"));
  assert_true(clean(err.message));
  /* a reload with such an error reports it escaped as well */
  const char *ok = "retry:\n  instances:\n    r: {}\n";
  assert_int_equal(resil_registry_load_string(ok, strlen(ok), "ok", &reg, &err), RESIL_OK);
  assert_int_equal(resil_registry_reload_string(reg, cases[0].yaml, strlen(cases[0].yaml), "k",
                                                &err),
                   RESIL_EINVAL);
  assert_true(clean(err.message) && clean(err.key_path));
  resil_registry_free(reg);
}

/* ---- 5. config check has no side effects unless asked ---------------------- */

/* Runs the built tool with args, stdout and stderr to files; returns the
 * exit status and fills out and errb. */
static int run_tool(const char *args, char *out, size_t on, char *errb, size_t en) {
  const char *bin = getenv("RESIL_BIN");
  char cmd[4096];
  snprintf(cmd, sizeof cmd, "%s %s >%s/out 2>%s/err", bin, args, tmpdir, tmpdir);
  int st = system(cmd);
  assert_true(WIFEXITED(st));
  char p[256];
  char *bufs[2] = {out, errb};
  size_t sizes[2] = {on, en};
  const char *names[2] = {"out", "err"};
  for (int i = 0; i < 2; i++) {
    snprintf(p, sizeof p, "%s/%s", tmpdir, names[i]);
    FILE *f = fopen(p, "r");
    assert_non_null(f);
    size_t n = fread(bufs[i], 1, sizes[i] - 1, f);
    bufs[i][n] = 0;
    fclose(f);
  }
  return WEXITSTATUS(st);
}

static int exists(const char *path) {
  struct stat sb;
  return stat(path, &sb) == 0;
}

/* RESIL_REGISTRY_NO_OPEN: a store is checked, not opened (no file); its
 * uri's form is still checked; the other instances are built. */
static void no_open_checks_stores_without_opening_them(void **state) {
  (void)state;
  char db[256], yaml[1024];
  snprintf(db, sizeof db, "%s/new.db", tmpdir);
  snprintf(yaml, sizeof yaml,
           "store:\n  instances:\n    ops: {uri: \"sqlite:%s\", pool_size: 2}\n"
           "retry:\n  instances:\n    r: {}\n",
           db);
  const char *p = write_file("st.yaml", yaml);
  resil_registry_load_options opts;
  resil_registry_load_options_init(&opts);
  assert_int_equal(opts.struct_size, sizeof opts);
  assert_int_equal(opts.flags, 0);
  opts.flags = RESIL_REGISTRY_NO_OPEN;
  resil_registry *reg = NULL;
  resil_registry_error err;
  resil_registry_error_init(&err);
  assert_int_equal(resil_registry_load_file_ex(p, &opts, &reg, &err), RESIL_OK);
  assert_false(exists(db));
  assert_int_equal(resil_registry_count(reg, RESIL_REG_STORE), 1);
  assert_null(resil_registry_store(reg, "ops"));
  assert_non_null(resil_registry_retry(reg, "r"));
  /* reloads keep the flag: a changed store is still not opened */
  snprintf(yaml, sizeof yaml,
           "store:\n  instances:\n    ops: {uri: \"sqlite:%s\", pool_size: 3}\n", db);
  assert_int_equal(resil_registry_reload_string(reg, yaml, strlen(yaml), "st", &err), RESIL_OK);
  assert_false(exists(db));
  resil_registry_free(reg);
  /* the uri's form and the settings are still checked */
  const char *bad[][2] = {
      {"store:\n  instances:\n    ops: {uri: \"mysql://x\"}\n", "must start with 'sqlite:'"},
      {"store:\n  instances:\n    ops: {uri: \"sqlite:/tmp/a.db?mode=ro\"}\n", "without a query"},
      {"store:\n  instances:\n    ops: {uri: \"sqlite:/tmp/a.db\", pool_size: 0}\n", "pool_size"},
  };
  for (size_t i = 0; i < 3; i++) {
    assert_int_equal(
        resil_registry_load_string_ex(bad[i][0], strlen(bad[i][0]), "bad", &opts, &reg, &err),
        RESIL_EINVAL);
    char line[512];
    resil_registry_error_format(&err, line, sizeof line);
    assert_non_null(strstr(line, bad[i][1]));
  }
  /* options not passed through the init macro, unknown flags */
  resil_registry_load_options raw;
  memset(&raw, 0, sizeof raw);
  assert_int_equal(resil_registry_load_file_ex(p, &raw, &reg, &err), RESIL_EINVAL);
  assert_non_null(strstr(err.message, "resil_registry_load_options_init"));
  opts.flags = 0x80;
  assert_int_equal(resil_registry_load_file_ex(p, &opts, &reg, &err), RESIL_EINVAL);
  /* without the flag the store is opened: the file exists */
  assert_int_equal(resil_registry_load_file_ex(p, NULL, &reg, &err), RESIL_OK);
  assert_true(exists(db));
  resil_registry_free(reg);
}

/* `resil config check` creates no file; `--open` does; `describe
 * --config` creates none either. */
static void cli_config_check_opens_stores_only_with_open(void **state) {
  (void)state;
  if (!getenv("RESIL_BIN")) skip();
  char dir[256], db[300], yaml[1024], args[1024], out[8192], errb[8192];
  snprintf(dir, sizeof dir, "%s/x", tmpdir);
  assert_int_equal(mkdir(dir, 0700), 0);
  snprintf(db, sizeof db, "%s/new.db", dir);
  snprintf(yaml, sizeof yaml,
           "store:\n  instances:\n    ops: {uri: \"sqlite:%s\"}\n"
           "retry:\n  instances:\n    r: {}\n"
           "chain:\n  instances:\n    c: {layers: [{retry: r}]}\n",
           db);
  const char *p = write_file("svc.yaml", yaml);
  snprintf(args, sizeof args, "config check %s", p);
  assert_int_equal(run_tool(args, out, sizeof out, errb, sizeof errb), 0);
  assert_non_null(strstr(out, "OK: 3 instances"));
  assert_false(exists(db));
  snprintf(args, sizeof args, "describe --config %s", p);
  assert_int_equal(run_tool(args, out, sizeof out, errb, sizeof errb), 1); /* no deadline */
  assert_non_null(strstr(out, "chain c ("));
  assert_false(exists(db));
  snprintf(args, sizeof args, "config check --open %s", p);
  assert_int_equal(run_tool(args, out, sizeof out, errb, sizeof errb), 0);
  assert_true(exists(db));
  /* --open finds what only opening finds: a directory that is not there */
  snprintf(yaml, sizeof yaml, "store:\n  instances:\n    ops: {uri: \"sqlite:%s/no/such/dir/x.db\"}\n",
           tmpdir);
  p = write_file("svc.yaml", yaml);
  snprintf(args, sizeof args, "config check %s", p);
  assert_int_equal(run_tool(args, out, sizeof out, errb, sizeof errb), 0);
  snprintf(args, sizeof args, "config check --open %s", p);
  assert_int_equal(run_tool(args, out, sizeof out, errb, sizeof errb), 2);
  assert_non_null(strstr(errb, "store.instances.ops.uri"));
  assert_int_equal(run_tool("config check --open", out, sizeof out, errb, sizeof errb), 2);
}

/* ---- 6. describe --config: every chain, whole names, the client's timeouts -- */

/* 100 chains (64 were described, the rest dropped), a 300-byte chain name
 * (cut at 127 bytes, then not found: nothing printed for it), a chain of
 * 16 layers with long names (its description beyond 4 KiB was cut). */
static void cli_describe_config_describes_every_chain_whole(void **state) {
  (void)state;
  if (!getenv("RESIL_BIN")) skip();
  gbuf b = {0};
  char longname[301];
  memset(longname, 'n', 300);
  longname[300] = 0;
  longname[299] = 'Z';
  gput(&b, "retry:\n  instances:\n    r: {max_attempts: 2}\n");
  for (int i = 0; i < 16; i++) gput(&b, "    %.*s%02d: {max_attempts: 1}\n", 250, longname, i);
  gput(&b, "chain:\n  instances:\n");
  for (int i = 0; i < 100; i++) gput(&b, "    c%03d: {total_timeout: 1s, layers: [{retry: r}]}\n", i);
  gput(&b, "    %s: {total_timeout: 1s, layers: [{retry: r}]}\n", longname);
  gput(&b, "    deep: {total_timeout: 1s, layers: [");
  for (int i = 0; i < 16; i++) gput(&b, "%s{retry: %.*s%02d}", i ? ", " : "", 250, longname, i);
  gput(&b, "]}\n");
  const char *p = write_bytes("many.yaml", b.p, b.len);
  free(b.p);
  char args[512];
  snprintf(args, sizeof args, "describe --config %s", p);
  size_t on = 1 << 20;
  char *out = malloc(on), errb[8192];
  assert_non_null(out);
  int rc = run_tool(args, out, on, errb, sizeof errb);
  assert_int_equal(rc, 1); /* the deep chain nests retries: a warning */
  assert_string_equal(errb, "");
  char want[400];
  for (int i = 0; i < 100; i++) {
    snprintf(want, sizeof want, "chain c%03d (", i);
    assert_non_null(strstr(out, want));
  }
  snprintf(want, sizeof want, "chain %s (", longname);
  assert_non_null(strstr(out, want));
  /* the deep chain's description whole: its innermost layer is there, and
   * the worst-case line after it */
  char *deep = strstr(out, "chain deep (");
  assert_non_null(deep);
  snprintf(want, sizeof want, "%.*s15", 250, longname);
  assert_non_null(strstr(deep, want));
  assert_non_null(strstr(deep, "worst case per logical call"));
  /* --chain with the long name */
  snprintf(args, sizeof args, "describe --config %s --chain %s", p, longname);
  assert_int_equal(run_tool(args, out, on, errb, sizeof errb), 0);
  snprintf(want, sizeof want, "chain %s (", longname);
  assert_non_null(strstr(out, want));
  free(out);
}

/* A chain without a time limiter used through an HTTP client: each attempt
 * can last the client's lease + connect + response timeouts; describe
 * counts them (it said 0 ms per attempt). With a shorter time limiter, the
 * limiter's timeout. --client picks one client. */
static void cli_describe_config_counts_the_clients_timeouts(void **state) {
  (void)state;
  if (!getenv("RESIL_BIN")) skip();
  const char *yaml = "retry:\n  instances:\n"
                     "    r: {max_attempts: 3, backoff: fixed, wait: 100ms, respect_retry_after: "
                     "false}\n"
                     "timelimiter:\n  instances:\n    t: {timeout: 700ms}\n"
                     "chain:\n  instances:\n"
                     "    plain: {layers: [{retry: r}]}\n"
                     "    limited: {layers: [{retry: r}, {timelimiter: t}]}\n"
                     "http_client:\n  instances:\n"
                     "    api:\n"
                     "      base_url: http://127.0.0.1:9\n"
                     "      lease_timeout: 100ms\n"
                     "      connect_timeout: 500ms\n"
                     "      response_timeout: 2s\n"
                     "      endpoints: {get: {path: /x}}\n"
                     "    hops:\n"
                     "      base_url: http://127.0.0.1:9\n"
                     "      lease_timeout: 0\n"
                     "      connect_timeout: 1s\n"
                     "      response_timeout: 1s\n"
                     "      follow_redirects: true\n"
                     "      max_redirects: 2\n"
                     "      endpoints: {get: {path: /x}}\n";
  const char *p = write_file("cl.yaml", yaml);
  char args[512], out[16384], errb[4096];
  snprintf(args, sizeof args, "describe --config %s --chain plain", p);
  assert_int_equal(run_tool(args, out, sizeof out, errb, sizeof errb), 1); /* no deadline */
  assert_non_null(strstr(out, "worst case per logical call through http_client api: 3 physical "
                              "attempts, 8.000 s (3 x 2600 ms per attempt (the client's 100 ms "
                              "lease + 500 ms connect + 2000 ms response; no time limiter) + "
                              "200 ms backoff)"));
  /* 3 hops of 1 s connect + 1 s response: 6 s per attempt */
  assert_non_null(strstr(out, "worst case per logical call through http_client hops: 3 physical "
                              "attempts, 18.200 s (3 x 6000 ms per attempt (the client's 0 ms "
                              "lease + 3 hops x (1000 ms connect + 1000 ms response); no time "
                              "limiter)"));
  snprintf(args, sizeof args, "describe --config %s --chain limited --client api", p);
  assert_int_equal(run_tool(args, out, sizeof out, errb, sizeof errb), 1);
  assert_non_null(strstr(out, "through http_client api: 3 physical attempts, 2.300 s (3 x 700 ms "
                              "per attempt (the time limiter's, shorter than the client's"));
  assert_null(strstr(out, "http_client hops"));
  snprintf(args, sizeof args, "describe --config %s --client nope", p);
  assert_int_equal(run_tool(args, out, sizeof out, errb, sizeof errb), 2);
  assert_non_null(strstr(errb, "no http_client 'nope'"));
  assert_non_null(strstr(errb, "(http clients: api hops)"));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(reload_replaces_a_store_whose_long_uri_changed_at_the_end),
      cmocka_unit_test(reload_compares_endpoints_and_headers_exactly),
      cmocka_unit_test(reload_refuses_an_empty_document_and_keeps_state),
      cmocka_unit_test(instances_that_come_back_keep_their_state),
      cmocka_unit_test(a_duplicate_among_50k_keys_is_found_fast),
      cmocka_unit_test(many_references_resolve_fast),
      cmocka_unit_test(depth_keys_and_nodes_are_limited),
      cmocka_unit_test(only_regular_files_up_to_the_limit_are_read),
      cmocka_unit_test(messages_escape_control_bytes_and_nul_is_refused),
      cmocka_unit_test(no_open_checks_stores_without_opening_them),
      cmocka_unit_test(cli_config_check_opens_stores_only_with_open),
      cmocka_unit_test(cli_describe_config_describes_every_chain_whole),
      cmocka_unit_test(cli_describe_config_counts_the_clients_timeouts),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
#else
int main(void) {
  puts("libresil-config not built (no libyaml): skipped");
  return 77;
}
#endif
