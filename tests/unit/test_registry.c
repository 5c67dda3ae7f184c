/* The registry (registry.h): real YAML files in a temp dir and the files
 * in examples/config/ and tests/data/config/. Every broken file in
 * tests/data/config/ says on its first line "# expect: LINE:COL: key.path:
 * message", the exact error resil_registry_load_file must give (and
 * `resil config check` must print). Reload: unchanged instances are the
 * same objects (an OPEN breaker stays OPEN), changed ones are new, a lease
 * keeps the old one usable, an error changes nothing. */
#define _GNU_SOURCE
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "test_util.h"

#ifdef RESIL_HAVE_CONFIG
#include "resil/http.h"
#include "resil/registry.h"
#include "resil/resil.h"
#include "resil/store.h"
#include "resil/events.h"
#include "resil/shared.h"

static char tmpdir[64];

static int setup(void **state) {
  (void)state;
  snprintf(tmpdir, sizeof tmpdir, "/tmp/resil-registry-XXXXXX");
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

/* Writes text to tmpdir/name; returns the path (static buffer per call). */
static const char *write_file(const char *name, const char *text) {
  static char paths[4][256];
  static int k;
  char *p = paths[k++ % 4];
  snprintf(p, 256, "%s/%s", tmpdir, name);
  FILE *f = fopen(p, "w");
  assert_non_null(f);
  assert_int_equal(fputs(text, f) >= 0, 1);
  assert_int_equal(fclose(f), 0);
  return p;
}

static const char *expected_line(const char *path, char *buf, size_t n) {
  FILE *f = fopen(path, "r");
  assert_non_null(f);
  char line[512];
  assert_non_null(fgets(line, sizeof line, f));
  fclose(f);
  line[strcspn(line, "\n")] = 0;
  assert_true(strncmp(line, "# expect: ", 10) == 0);
  snprintf(buf, n, "%s:%s", path, line + 10);
  return buf;
}

/* ---- units ---------------------------------------------------------------------- */

static void durations_and_sizes_parse_exactly(void **state) {
  (void)state;
  int64_t ns;
  char msg[160];
  assert_int_equal(resil_parse_duration("30s", &ns, msg, sizeof msg), RESIL_OK);
  assert_int_equal(ns, RESIL_S(30));
  assert_int_equal(resil_parse_duration("250ms", &ns, msg, sizeof msg), RESIL_OK);
  assert_int_equal(ns, RESIL_MS(250));
  assert_int_equal(resil_parse_duration("1.5s", &ns, msg, sizeof msg), RESIL_OK);
  assert_int_equal(ns, RESIL_MS(1500));
  assert_int_equal(resil_parse_duration("2m", &ns, msg, sizeof msg), RESIL_OK);
  assert_int_equal(ns, RESIL_MIN(2));
  assert_int_equal(resil_parse_duration("1h", &ns, msg, sizeof msg), RESIL_OK);
  assert_int_equal(ns, RESIL_H(1));
  assert_int_equal(resil_parse_duration("100us", &ns, msg, sizeof msg), RESIL_OK);
  assert_int_equal(ns, RESIL_US(100));
  assert_int_equal(resil_parse_duration("0", &ns, msg, sizeof msg), RESIL_OK);
  assert_int_equal(ns, 0);
  assert_int_equal(resil_parse_duration("-5ms", &ns, msg, sizeof msg), RESIL_OK);
  assert_int_equal(ns, -RESIL_MS(5));
  assert_int_equal(resil_parse_duration("30", &ns, msg, sizeof msg), RESIL_EINVAL);
  assert_non_null(strstr(msg, "needs a unit"));
  assert_int_equal(resil_parse_duration("30 parsecs", &ns, msg, sizeof msg), RESIL_EINVAL);
  assert_non_null(strstr(msg, "unknown unit"));
  assert_int_equal(resil_parse_duration("1.5ns", &ns, msg, sizeof msg), RESIL_EINVAL);
  assert_non_null(strstr(msg, "finer"));
  assert_int_equal(resil_parse_duration("200000d", &ns, msg, sizeof msg), RESIL_EINVAL);
  assert_non_null(strstr(msg, "too large"));
  assert_int_equal(resil_parse_duration("abc", &ns, msg, sizeof msg), RESIL_EINVAL);
  uint64_t b;
  assert_int_equal(resil_parse_size("64MiB", &b, msg, sizeof msg), RESIL_OK);
  assert_int_equal(b, UINT64_C(64) << 20);
  assert_int_equal(resil_parse_size("10KB", &b, msg, sizeof msg), RESIL_OK);
  assert_int_equal(b, 10000);
  assert_int_equal(resil_parse_size("512", &b, msg, sizeof msg), RESIL_OK);
  assert_int_equal(b, 512);
  assert_int_equal(resil_parse_size("1.5KiB", &b, msg, sizeof msg), RESIL_OK);
  assert_int_equal(b, 1536);
  assert_int_equal(resil_parse_size("-1B", &b, msg, sizeof msg), RESIL_EINVAL);
  assert_int_equal(resil_parse_size("1.5B", &b, msg, sizeof msg), RESIL_EINVAL);
}

/* ---- examples ------------------------------------------------------------------- */

static void payments_example_loads_with_inheritance(void **state) {
  (void)state;
  resil_registry *reg = NULL;
  resil_registry_error err;
  resil_registry_error_init(&err);
  assert_int_equal(resil_registry_load_file(RESIL_SOURCE_DIR "/examples/config/payments-client.yaml",
                                            &reg, &err),
                   RESIL_OK);
  assert_int_equal(err.status, RESIL_OK);
  assert_int_equal(resil_registry_count(reg, RESIL_REG_KIND_COUNT_), 7);
  assert_non_null(resil_registry_http_client(reg, "payments"));
  resil_breaker *br = resil_registry_breaker(reg, "payments");
  assert_non_null(br);
  assert_string_equal(resil_breaker_name(br), "payments");
  resil_breaker_metrics m;
  assert_int_equal(resil_breaker_get_metrics(br, &m), RESIL_OK);
  /* window_size 20 and minimum_calls 10 from slow_backend (over default's
   * 100/20), failure_rate_threshold 25 from the instance. */
  assert_int_equal(m.minimum_calls, 10);
  assert_null(resil_registry_breaker(reg, "nope"));
  assert_null(resil_registry_retry(reg, "nope"));
  resil_chain *ch = resil_registry_chain(reg, "payments");
  assert_non_null(ch);
  char nest[256];
  resil_chain_nesting(ch, nest, sizeof nest);
  assert_string_equal(nest, "Retry(Breaker(RateLimiter(TimeLimiter(Bulkhead(call)))))");
  /* recovery in steps: the breaker's ramp, the retry's retries last */
  resil_registry_recovery rec;
  assert_int_equal(resil_registry_recovery(reg, RESIL_REG_BREAKER, "payments", &rec), RESIL_OK);
  assert_int_equal(rec.ramp_duration_ns, RESIL_S(20));
  assert_int_equal(rec.ramp_min_percent, 10);
  assert_true(rec.ramp_aggression == 1.0);
  assert_int_equal(resil_registry_recovery(reg, RESIL_REG_RETRY, "payments", &rec), RESIL_OK);
  assert_int_equal(rec.during_recovery, 0);
  assert_string_equal(rec.recovery_breaker, "");
  resil_registry_free(reg);
}

/* The example of an upstream of several instances (DESIGN 8.4): three
 * client instances and an endpoint's two, the balance and ejection settings
 * as written, the breaker's ramp. */
static void instances_example_loads_with_balance_and_ejection(void **state) {
  (void)state;
  resil_registry *reg = NULL;
  resil_registry_error err;
  resil_registry_error_init(&err);
  resil_status st = resil_registry_load_file(
      RESIL_SOURCE_DIR "/examples/config/upstream-instances.yaml", &reg, &err);
  char line[1024];
  resil_registry_error_format(&err, line, sizeof line);
  if (st != RESIL_OK) fail_msg("%s", line);
  assert_non_null(resil_registry_http_client(reg, "catalog"));
  resil_registry_http_balance b;
  assert_int_equal(resil_registry_http_client_balance(reg, "catalog", &b), RESIL_OK);
  assert_int_equal(b.balance, RESIL_HTTP_BALANCE_P2C);
  assert_int_equal(b.resolve_instances, 0);
  assert_int_equal(b.listed_instances, 5);
  assert_int_equal(b.eject_consecutive, 5);
  assert_int_equal(b.eject_classes, RESIL_CLASS_BIT(RESIL_CLASS_NOT_SENT) |
                                        RESIL_CLASS_BIT(RESIL_CLASS_UNKNOWN) |
                                        RESIL_CLASS_BIT(RESIL_CLASS_SERVER_ERROR) |
                                        RESIL_CLASS_BIT(RESIL_CLASS_HTTP_429));
  assert_int_equal(b.eject_base_ns, RESIL_S(30));
  assert_int_equal(b.eject_max_ns, RESIL_S(300));
  assert_int_equal(b.eject_max_percent, 50);
  resil_registry_recovery rec;
  assert_int_equal(resil_registry_recovery(reg, RESIL_REG_BREAKER, "catalog", &rec), RESIL_OK);
  assert_int_equal(rec.ramp_duration_ns, RESIL_S(30));
  assert_int_equal(rec.ramp_min_percent, 10);
  char nest[256];
  resil_chain_nesting(resil_registry_chain(reg, "catalog"), nest, sizeof nest);
  assert_string_equal(nest, "Retry(Breaker(call))");
  resil_registry_free(reg);
}

static int count_visit(void *user, resil_registry_kind kind, const char *name, void *handle) {
  size_t *n = user;
  assert_non_null(name);
  assert_non_null(handle);
  assert_true((unsigned)kind < RESIL_REG_KIND_COUNT_);
  n[kind]++;
  n[RESIL_REG_KIND_COUNT_]++;
  return 0;
}

static void every_example_loads(void **state) {
  (void)state;
  DIR *d = opendir(RESIL_SOURCE_DIR "/examples/config");
  assert_non_null(d);
  int files = 0;
  struct dirent *de;
  while ((de = readdir(d)) != NULL) {
    size_t l = strlen(de->d_name);
    if (l < 5 || strcmp(de->d_name + l - 5, ".yaml") != 0) continue;
    char path[512];
    snprintf(path, sizeof path, "%s/examples/config/%s", RESIL_SOURCE_DIR, de->d_name);
    resil_registry *reg = NULL;
    resil_registry_error err;
    resil_registry_error_init(&err);
    resil_status st = resil_registry_load_file(path, &reg, &err);
    char line[1024];
    resil_registry_error_format(&err, line, sizeof line);
    if (st != RESIL_OK) fail_msg("%s", line);
    size_t n[RESIL_REG_KIND_COUNT_ + 1] = {0};
    assert_int_equal(resil_registry_foreach(reg, count_visit, n), RESIL_OK);
    assert_true(n[RESIL_REG_KIND_COUNT_] > 0);
    assert_int_equal(n[RESIL_REG_KIND_COUNT_], resil_registry_count(reg, RESIL_REG_KIND_COUNT_));
    assert_true(n[RESIL_REG_CHAIN] > 0);
    assert_int_equal(n[RESIL_REG_CHAIN], resil_registry_count(reg, RESIL_REG_CHAIN));
    resil_registry_free(reg);
    files++;
  }
  closedir(d);
  assert_true(files >= 2);
}

static void service_example_has_every_upstream(void **state) {
  (void)state;
  resil_registry *reg = NULL;
  assert_int_equal(resil_registry_load_file(
                       RESIL_SOURCE_DIR "/examples/config/service-upstreams.yaml", &reg, NULL),
                   RESIL_OK);
  const char *ups[] = {"inventory", "search", "payments"};
  for (size_t i = 0; i < 3; i++) {
    assert_non_null(resil_registry_chain(reg, ups[i]));
    assert_non_null(resil_registry_breaker(reg, ups[i]));
    assert_non_null(resil_registry_retry(reg, ups[i]));
  }
  assert_non_null(resil_registry_hedge(reg, "inventory"));
  assert_non_null(resil_registry_timelimiter(reg, "search"));
  assert_non_null(resil_registry_ratelimiter(reg, "payments"));
  assert_non_null(resil_registry_bulkhead(reg, "payments"));
  /* max_queued from the instance, max_concurrent 4 */
  resil_bulkhead *bh = resil_registry_bulkhead(reg, "search");
  resil_bulkhead_metrics bm;
  assert_int_equal(resil_bulkhead_get_metrics(bh, &bm), RESIL_OK);
  assert_int_equal(bm.max_concurrent, 4);
  char nest[256];
  resil_chain_nesting(resil_registry_chain(reg, "inventory"), nest, sizeof nest);
  assert_string_equal(nest, "Retry(Breaker(Hedge(call)))");
  resil_registry_free(reg);
}

/* ---- errors --------------------------------------------------------------------- */

static void every_broken_file_gives_its_exact_error(void **state) {
  (void)state;
  DIR *d = opendir(RESIL_SOURCE_DIR "/tests/data/config");
  assert_non_null(d);
  int files = 0, bad = 0;
  struct dirent *de;
  while ((de = readdir(d)) != NULL) {
    size_t l = strlen(de->d_name);
    if (l < 5 || strcmp(de->d_name + l - 5, ".yaml") != 0) continue;
    char path[512], want[1024], got[1024];
    snprintf(path, sizeof path, "%s/tests/data/config/%s", RESIL_SOURCE_DIR, de->d_name);
    expected_line(path, want, sizeof want);
    resil_registry *reg = (resil_registry *)0x1;
    resil_registry_error err;
    resil_registry_error_init(&err);
    resil_status st = resil_registry_load_file(path, &reg, &err);
    assert_int_equal(st, RESIL_EINVAL);
    assert_ptr_equal(reg, (resil_registry *)0x1); /* untouched: nothing created */
    assert_int_equal(err.status, RESIL_EINVAL);
    resil_registry_error_format(&err, got, sizeof got);
    if (strcmp(want, got) != 0) {
      print_error("%s\n  want: %s\n  got:  %s\n", de->d_name, want, got);
      bad++;
    }
    files++;
  }
  closedir(d);
  assert_int_equal(bad, 0);
  assert_true(files >= 10);
}

static void range_error_carries_the_policys_range_data(void **state) {
  (void)state;
  resil_registry *reg = NULL;
  resil_registry_error err;
  resil_registry_error_init(&err);
  assert_int_equal(resil_registry_load_file(RESIL_SOURCE_DIR "/tests/data/config/range.yaml",
                                            &reg, &err),
                   RESIL_EINVAL);
  assert_int_equal(err.line, 5);
  assert_int_equal(err.column, 31);
  assert_string_equal(err.key_path, "circuitbreaker.instances.payments.failure_rate_threshold");
  assert_int_equal(err.has_range, 1);
  assert_int_equal(err.min, 1);
  assert_int_equal(err.max, 100);
  assert_int_equal(err.got, 150);
  /* durations: in ns, the message in human units */
  resil_registry_error_init(&err);
  assert_int_equal(resil_registry_load_file(
                       RESIL_SOURCE_DIR "/tests/data/config/duration_range.yaml", &reg, &err),
                   RESIL_EINVAL);
  assert_int_equal(err.has_range, 1);
  assert_int_equal(err.min, RESIL_MS(1));
  assert_int_equal(err.got, 200);
}

static void an_error_after_valid_instances_creates_nothing(void **state) {
  (void)state;
  /* Under ASan a leak of the instances built before the error fails the
   * test; here the breaker, retry and the chain's first layers are valid and
   * the last instance is not. */
  const char *p = write_file("late.yaml",
                             "circuitbreaker:\n"
                             "  instances:\n"
                             "    a: {}\n"
                             "    b: {}\n"
                             "retry:\n"
                             "  instances:\n"
                             "    a: {max_attempts: 2}\n"
                             "chain:\n"
                             "  instances:\n"
                             "    a:\n"
                             "      layers: [{retry: a}, {circuitbreaker: a}]\n"
                             "    b:\n"
                             "      total_timeout: -1s\n"
                             "      layers: [{circuitbreaker: b}]\n");
  resil_registry *reg = NULL;
  resil_registry_error err;
  resil_registry_error_init(&err);
  assert_int_equal(resil_registry_load_file(p, &reg, &err), RESIL_EINVAL);
  assert_null(reg);
  assert_int_equal(err.line, 13);
  assert_int_equal(err.column, 22);
  assert_string_equal(err.key_path, "chain.instances.b.total_timeout");
}

static void io_error_names_the_file(void **state) {
  (void)state;
  resil_registry *reg = NULL;
  resil_registry_error err;
  resil_registry_error_init(&err);
  assert_int_equal(resil_registry_load_file("/nonexistent/x.yaml", &reg, &err), RESIL_EIO);
  assert_int_equal(err.line, 0);
  char line[512];
  resil_registry_error_format(&err, line, sizeof line);
  assert_string_equal(line, "/nonexistent/x.yaml: cannot read: No such file or directory");
  assert_int_equal(resil_registry_load_file(NULL, &reg, &err), RESIL_EINVAL);
  assert_int_equal(resil_registry_reload(NULL, "x", &err), RESIL_EMISUSE);
}

static void an_empty_file_is_an_empty_registry(void **state) {
  (void)state;
  resil_registry *reg = NULL;
  assert_int_equal(resil_registry_load_string("", 0, "empty", &reg, NULL), RESIL_OK);
  assert_int_equal(resil_registry_count(reg, RESIL_REG_KIND_COUNT_), 0);
  resil_registry_free(reg);
}

/* ---- reload --------------------------------------------------------------------- */

static const char *V1 = "circuitbreaker:\n"
                        "  instances:\n"
                        "    payments: {open_wait: 60s}\n"
                        "    search: {failure_rate_threshold: 50}\n"
                        "    gone: {}\n"
                        "retry:\n"
                        "  instances:\n"
                        "    payments: {max_attempts: 3}\n"
                        "chain:\n"
                        "  instances:\n"
                        "    payments: {layers: [{retry: payments}, {circuitbreaker: payments}]}\n"
                        "    search: {layers: [{circuitbreaker: search}]}\n";
/* payments unchanged (settings written differently: same values), search's
 * threshold changed, gone removed, added new. */
static const char *V2 = "circuitbreaker:\n"
                        "  configs:\n"
                        "    default: {open_wait: 1m}\n"
                        "  instances:\n"
                        "    payments: {}\n"
                        "    search: {failure_rate_threshold: 30}\n"
                        "    added: {}\n"
                        "retry:\n"
                        "  instances:\n"
                        "    payments: {max_attempts: 3}\n"
                        "chain:\n"
                        "  instances:\n"
                        "    payments: {layers: [{retry: payments}, {circuitbreaker: payments}]}\n"
                        "    search: {layers: [{circuitbreaker: search}]}\n";

static void reload_keeps_unchanged_state_and_replaces_changed(void **state) {
  (void)state;
  const char *p = write_file("svc.yaml", V1);
  resil_registry *reg = NULL;
  assert_int_equal(resil_registry_load_file(p, &reg, NULL), RESIL_OK);
  resil_breaker *pay = resil_registry_breaker(reg, "payments");
  resil_breaker *search = resil_registry_breaker(reg, "search");
  resil_chain *pay_ch = resil_registry_chain(reg, "payments");
  resil_chain *search_ch = resil_registry_chain(reg, "search");
  assert_int_equal(resil_breaker_transition(pay, RESIL_BREAKER_OPEN), RESIL_OK);
  assert_int_equal(resil_breaker_transition(search, RESIL_BREAKER_OPEN), RESIL_OK);
  /* A call in flight on the old search breaker holds a lease. */
  resil_registry_lease *lease = NULL;
  resil_breaker *old_search = resil_registry_acquire(reg, RESIL_REG_BREAKER, "search", &lease);
  assert_ptr_equal(old_search, search);
  assert_non_null(lease);
  assert_int_equal(resil_registry_generation(reg), 1);

  p = write_file("svc.yaml", V2);
  resil_registry_error err;
  resil_registry_error_init(&err);
  assert_int_equal(resil_registry_reload(reg, p, &err), RESIL_OK);
  assert_int_equal(resil_registry_generation(reg), 2);
  /* unchanged: the same object, still OPEN */
  assert_ptr_equal(resil_registry_breaker(reg, "payments"), pay);
  assert_int_equal(resil_breaker_state(pay), RESIL_BREAKER_OPEN);
  assert_ptr_equal(resil_registry_chain(reg, "payments"), pay_ch);
  /* changed: a new CLOSED breaker, and the chain using it is new too */
  resil_breaker *search2 = resil_registry_breaker(reg, "search");
  assert_non_null(search2);
  assert_ptr_not_equal(search2, search);
  assert_int_equal(resil_breaker_state(search2), RESIL_BREAKER_CLOSED);
  assert_ptr_not_equal(resil_registry_chain(reg, "search"), search_ch);
  assert_null(resil_registry_breaker(reg, "gone"));
  assert_non_null(resil_registry_breaker(reg, "added"));
  /* kept: breaker, retry and chain payments; replaced: breaker and chain
   * search; added: breaker added; removed: breaker gone */
  resil_registry_reload_stats rs;
  assert_int_equal(resil_registry_last_reload(reg, &rs), RESIL_OK);
  assert_int_equal(rs.struct_size, sizeof rs);
  assert_int_equal(rs.generation, 2);
  assert_int_equal(rs.kept, 3);
  assert_int_equal(rs.replaced, 2);
  assert_int_equal(rs.added, 1);
  assert_int_equal(rs.removed, 1);
  /* the call in flight finishes on the old instance */
  assert_int_equal(resil_breaker_state(old_search), RESIL_BREAKER_OPEN);
  resil_breaker_permit pm;
  assert_int_equal(resil_breaker_try_acquire(old_search, &pm), RESIL_DECISION_DENY);
  resil_registry_release(lease);
  resil_registry_free(reg);
}

static void reload_with_an_error_changes_nothing(void **state) {
  (void)state;
  const char *p = write_file("svc.yaml", V1);
  resil_registry *reg = NULL;
  assert_int_equal(resil_registry_load_file(p, &reg, NULL), RESIL_OK);
  resil_breaker *pay = resil_registry_breaker(reg, "payments");
  resil_breaker *search = resil_registry_breaker(reg, "search");
  assert_int_equal(resil_breaker_transition(pay, RESIL_BREAKER_OPEN), RESIL_OK);
  /* search changed validly, payments invalidly: nothing may change */
  p = write_file("svc.yaml", "circuitbreaker:\n"
                             "  instances:\n"
                             "    payments: {open_wait: 0}\n"
                             "    search: {failure_rate_threshold: 30}\n");
  resil_registry_error err;
  resil_registry_error_init(&err);
  assert_int_equal(resil_registry_reload(reg, p, &err), RESIL_EINVAL);
  char line[1024], want[1024];
  resil_registry_error_format(&err, line, sizeof line);
  snprintf(want, sizeof want,
           "%s:3:27: circuitbreaker.instances.payments.open_wait: must be at least 1 ms, got 0 ns",
           p);
  assert_string_equal(line, want);
  assert_int_equal(resil_registry_generation(reg), 1);
  resil_registry_reload_stats rs;
  assert_int_equal(resil_registry_last_reload(reg, &rs), RESIL_OK);
  assert_int_equal(rs.generation, 1);
  assert_int_equal(rs.added, 6); /* the load: every instance added */
  assert_int_equal(rs.kept + rs.replaced + rs.removed, 0);
  assert_ptr_equal(resil_registry_breaker(reg, "payments"), pay);
  assert_ptr_equal(resil_registry_breaker(reg, "search"), search);
  assert_non_null(resil_registry_breaker(reg, "gone"));
  assert_non_null(resil_registry_chain(reg, "payments"));
  assert_int_equal(resil_breaker_state(pay), RESIL_BREAKER_OPEN);
  /* a missing file too */
  assert_int_equal(resil_registry_reload(reg, "/nonexistent.yaml", &err), RESIL_EIO);
  assert_ptr_equal(resil_registry_breaker(reg, "payments"), pay);
  resil_registry_free(reg);
}

static void a_lease_outlives_the_registry(void **state) {
  (void)state;
  resil_registry *reg = NULL;
  assert_int_equal(resil_registry_load_string(V1, strlen(V1), "v1", &reg, NULL), RESIL_OK);
  resil_registry_lease *lease = NULL;
  resil_registry_lease *none = (resil_registry_lease *)0x1;
  assert_null(resil_registry_acquire(reg, RESIL_REG_CHAIN, "nope", &none));
  assert_null(none);
  resil_chain *ch = resil_registry_acquire(reg, RESIL_REG_CHAIN, "payments", &lease);
  assert_non_null(ch);
  assert_non_null(lease);
  resil_registry_free(reg);
  /* the chain and its layers are still alive */
  assert_int_equal(resil_chain_layers(ch), 2);
  char nest[128];
  resil_chain_nesting(ch, nest, sizeof nest);
  assert_string_equal(nest, "Retry(Breaker(call))");
  resil_registry_release(lease);
  resil_registry_release(NULL);
}

static void references_are_resolved_and_kept_with_what_they_name(void **state) {
  (void)state;
  const char *tmpl = "retry_budget:\n"
                     "  instances:\n"
                     "    reads: {percent_can_retry: %d}\n"
                     "threadpool:\n"
                     "  instances:\n"
                     "    pool: {threads: 2}\n"
                     "retry:\n"
                     "  configs:\n"
                     "    default: {budget: reads}\n"
                     "  instances:\n"
                     "    r: {max_attempts: 2}\n"
                     "hedge:\n"
                     "  instances:\n"
                     "    h: {delay: 5ms, executor: pool}\n"
                     "chain:\n"
                     "  instances:\n"
                     "    c: {layers: [{retry: r}, {hedge: h}]}\n";
  char yaml[1024];
  snprintf(yaml, sizeof yaml, tmpl, 20);
  resil_registry *reg = NULL;
  resil_registry_error err;
  resil_registry_error_init(&err);
  assert_int_equal(resil_registry_load_string(yaml, strlen(yaml), "refs", &reg, &err), RESIL_OK);
  resil_retry_budget *b = resil_registry_retry_budget(reg, "reads");
  resil_retry *r = resil_registry_retry(reg, "r");
  resil_hedge *h = resil_registry_hedge(reg, "h");
  resil_chain *c = resil_registry_chain(reg, "c");
  assert_non_null(b);
  assert_non_null(resil_registry_threadpool(reg, "pool"));
  /* the hedge has its executor: describe says it hedges on its pool */
  char d[4096];
  resil_chain_describe(c, d, sizeof d);
  assert_non_null(strstr(d, "hedges on its thread pool"));
  /* the budget changes: the retry naming it (through configs.default) and
   * the chain using the retry are replaced; the hedge is kept */
  snprintf(yaml, sizeof yaml, tmpl, 30);
  assert_int_equal(resil_registry_reload_string(reg, yaml, strlen(yaml), "refs", &err), RESIL_OK);
  assert_ptr_not_equal(resil_registry_retry_budget(reg, "reads"), b);
  assert_ptr_not_equal(resil_registry_retry(reg, "r"), r);
  assert_ptr_equal(resil_registry_hedge(reg, "h"), h);
  assert_ptr_not_equal(resil_registry_chain(reg, "c"), c);
  resil_registry_reload_stats rs;
  assert_int_equal(resil_registry_last_reload(reg, &rs), RESIL_OK);
  assert_int_equal(rs.kept, 2);
  assert_int_equal(rs.replaced, 3);
  /* the same text again: everything kept */
  assert_int_equal(resil_registry_reload_string(reg, yaml, strlen(yaml), "refs", &err), RESIL_OK);
  assert_int_equal(resil_registry_last_reload(reg, &rs), RESIL_OK);
  assert_int_equal(rs.kept, 5);
  /* an inherited reference that names nothing: the error is at the config */
  const char *bad = "retry:\n"
                    "  configs:\n"
                    "    default: {budget: nope}\n"
                    "  instances:\n"
                    "    r: {}\n";
  assert_int_equal(resil_registry_reload_string(reg, bad, strlen(bad), "bad.yaml", &err),
                   RESIL_EINVAL);
  char line[512];
  resil_registry_error_format(&err, line, sizeof line);
  assert_string_equal(line, "bad.yaml:3:23: retry.configs.default.budget: no retry_budget instance "
                            "'nope' in this file");
  resil_registry_free(reg);
}

/* Recovery in the seed's order (DESIGN §2.9): a breaker's ramp keys, a
 * retry's and a hedge's recovery_breaker (named before its section) and
 * *_during_recovery; the retry watching the breaker stops with RECOVERING
 * while it is HALF_OPEN, the one with retry_during_recovery retries; the
 * breaker ramps after its probes; a reload changing the ramp replaces the
 * breaker and what names it, and keeps the rest. */
static resil_outcome fails_503(void *arg, const resil_ctx *ctx) {
  (void)ctx;
  (*(int *)arg)++;
  return resil_outcome_http(503);
}

static void recovery_settings_load_watch_and_reload(void **state) {
  (void)state;
  const char *tmpl = "retry:\n"
                     "  instances:\n"
                     "    payments: {max_attempts: 3, wait: 0s, recovery_breaker: payments}\n"
                     "    reports: {max_attempts: 3, wait: 0s, retry_during_recovery: true}\n"
                     "hedge:\n"
                     "  instances:\n"
                     "    reads: {delay: 5ms, recovery_breaker: payments}\n"
                     "    bulk: {delay: 5ms, hedge_during_recovery: true}\n"
                     "circuitbreaker:\n"
                     "  configs:\n"
                     "    default: {ramp_aggression: 2}\n"
                     "  instances:\n"
                     "    payments: {ramp_duration: 30s, ramp_min_percent: %d}\n"
                     "    plain: {}\n";
  char yaml[1024];
  snprintf(yaml, sizeof yaml, tmpl, 20);
  resil_registry *reg = NULL;
  resil_registry_error err;
  resil_registry_error_init(&err);
  if (resil_registry_load_string(yaml, strlen(yaml), "rec", &reg, &err) != RESIL_OK) {
    char line[512];
    resil_registry_error_format(&err, line, sizeof line);
    fail_msg("%s", line);
  }
  resil_registry_recovery rr;
  assert_int_equal(resil_registry_recovery(reg, RESIL_REG_BREAKER, "payments", &rr), RESIL_OK);
  assert_int_equal(rr.ramp_duration_ns, RESIL_S(30));
  assert_int_equal(rr.ramp_min_percent, 20);
  assert_true(rr.ramp_aggression == 2.0);
  assert_int_equal(resil_registry_recovery(reg, RESIL_REG_BREAKER, "plain", &rr), RESIL_OK);
  assert_int_equal(rr.ramp_duration_ns, 0);
  assert_int_equal(rr.ramp_min_percent, 10);
  assert_int_equal(resil_registry_recovery(reg, RESIL_REG_RETRY, "payments", &rr), RESIL_OK);
  assert_string_equal(rr.recovery_breaker, "payments");
  assert_int_equal(rr.during_recovery, 0);
  assert_int_equal(resil_registry_recovery(reg, RESIL_REG_RETRY, "reports", &rr), RESIL_OK);
  assert_string_equal(rr.recovery_breaker, "");
  assert_int_equal(rr.during_recovery, 1);
  assert_int_equal(resil_registry_recovery(reg, RESIL_REG_HEDGE, "reads", &rr), RESIL_OK);
  assert_string_equal(rr.recovery_breaker, "payments");
  assert_int_equal(resil_registry_recovery(reg, RESIL_REG_HEDGE, "bulk", &rr), RESIL_OK);
  assert_int_equal(rr.during_recovery, 1);
  assert_int_equal(resil_registry_recovery(reg, RESIL_REG_CHAIN, "payments", &rr), RESIL_EINVAL);
  assert_int_equal(resil_registry_recovery(reg, RESIL_REG_RETRY, "nope", &rr), RESIL_EINVAL);
  assert_int_equal(resil_registry_recovery(NULL, RESIL_REG_RETRY, "payments", &rr), RESIL_EMISUSE);

  /* HALF_OPEN: the watching retry makes one attempt, the other three */
  resil_breaker *br = resil_registry_breaker(reg, "payments");
  assert_status(RESIL_OK, resil_breaker_transition(br, RESIL_BREAKER_OPEN));
  assert_status(RESIL_OK, resil_breaker_transition(br, RESIL_BREAKER_HALF_OPEN));
  resil_ctx ctx;
  resil_ctx_init(&ctx);
  ctx.flags = RESIL_CALL_IDEMPOTENT;
  int calls = 0;
  resil_outcome o = resil_retry_run(resil_registry_retry(reg, "payments"), &ctx, fails_503, &calls);
  assert_int_equal(o.stop, RESIL_STOP_RECOVERING);
  assert_int_equal(calls, 1);
  calls = 0;
  o = resil_retry_run(resil_registry_retry(reg, "reports"), &ctx, fails_503, &calls);
  assert_int_equal(o.stop, RESIL_STOP_MAX_ATTEMPTS);
  assert_int_equal(calls, 3);
  /* healthy probes close it into a ramp (30 s: still ramping) */
  for (int i = 0; i < 10; i++) {
    resil_breaker_permit p;
    assert_int_equal(resil_breaker_try_acquire(br, &p), RESIL_DECISION_GO);
    resil_outcome ok = resil_outcome_ok();
    assert_status(RESIL_OK, resil_breaker_record(br, &p, &ok, 0));
  }
  resil_breaker_metrics m;
  assert_status(RESIL_OK, resil_breaker_get_metrics(br, &m));
  assert_int_equal(m.state, RESIL_BREAKER_CLOSED);
  assert_int_equal(m.ramping, 1);
  assert_true(m.ramp_share > 0.199 && m.ramp_share < 0.5); /* 20 % at first */

  /* the ramp changes: the breaker, the retry and the hedge naming it are
   * replaced; "reports", "bulk" and "plain" are kept */
  resil_retry *rt = resil_registry_retry(reg, "payments");
  resil_hedge *hg = resil_registry_hedge(reg, "reads");
  snprintf(yaml, sizeof yaml, tmpl, 30);
  assert_int_equal(resil_registry_reload_string(reg, yaml, strlen(yaml), "rec", &err), RESIL_OK);
  resil_registry_reload_stats rs;
  assert_int_equal(resil_registry_last_reload(reg, &rs), RESIL_OK);
  assert_int_equal(rs.replaced, 3);
  assert_int_equal(rs.kept, 3);
  assert_ptr_not_equal(resil_registry_breaker(reg, "payments"), br);
  assert_ptr_not_equal(resil_registry_retry(reg, "payments"), rt);
  assert_ptr_not_equal(resil_registry_hedge(reg, "reads"), hg);
  assert_int_equal(resil_breaker_state(resil_registry_breaker(reg, "payments")),
                   RESIL_BREAKER_CLOSED);
  assert_int_equal(resil_registry_recovery(reg, RESIL_REG_BREAKER, "payments", &rr), RESIL_OK);
  assert_int_equal(rr.ramp_min_percent, 30);
  /* the same text: everything kept */
  assert_int_equal(resil_registry_reload_string(reg, yaml, strlen(yaml), "rec", &err), RESIL_OK);
  assert_int_equal(resil_registry_last_reload(reg, &rs), RESIL_OK);
  assert_int_equal(rs.kept, 6);
  resil_registry_free(reg);
}

/* ---- HTTP clients and stores ------------------------------------------------ */

static void http_client_and_store_load_and_reload(void **state) {
  (void)state;
  char yaml[2048];
  const char *tmpl = "store:\n"
                     "  instances:\n"
                     "    ops: {uri: \"sqlite:%s/ops.db\", pool_size: %d}\n"
                     "http_client:\n"
                     "  instances:\n"
                     "    api:\n"
                     "      base_url: http://127.0.0.1:9\n"
                     "      max_response_bytes: 1MiB\n"
                     "      endpoints:\n"
                     "        get: {path: \"/items/{id}\", response_codec: json}\n"
                     "        put: {method: PUT, path: \"/items/{id}\"%s}\n";
  snprintf(yaml, sizeof yaml, tmpl, tmpdir, 2, "");
  const char *p = write_file("io.yaml", yaml);
  resil_registry *reg = NULL;
  resil_registry_error err;
  resil_registry_error_init(&err);
  assert_int_equal(resil_registry_load_file(p, &reg, &err), RESIL_OK);
  resil_store *st = resil_registry_store(reg, "ops");
  resil_http_client *cl = resil_registry_http_client(reg, "api");
  assert_non_null(st);
  assert_non_null(cl);
  assert_string_equal(resil_store_backend(st), "sqlite");
  assert_string_equal(resil_http_client_name(cl), "api");
  /* the same file: both kept */
  assert_int_equal(resil_registry_reload(reg, p, &err), RESIL_OK);
  assert_ptr_equal(resil_registry_store(reg, "ops"), st);
  assert_ptr_equal(resil_registry_http_client(reg, "api"), cl);
  /* an endpoint changed: a new client; the store kept */
  snprintf(yaml, sizeof yaml, tmpl, tmpdir, 2, ", idempotency_key: send");
  p = write_file("io.yaml", yaml);
  assert_int_equal(resil_registry_reload(reg, p, &err), RESIL_OK);
  assert_ptr_equal(resil_registry_store(reg, "ops"), st);
  assert_ptr_not_equal(resil_registry_http_client(reg, "api"), cl);
  /* the pool size changed: a new store */
  snprintf(yaml, sizeof yaml, tmpl, tmpdir, 3, ", idempotency_key: send");
  p = write_file("io.yaml", yaml);
  assert_int_equal(resil_registry_reload(reg, p, &err), RESIL_OK);
  assert_ptr_not_equal(resil_registry_store(reg, "ops"), st);
  /* effects_in_store is a setting of the store too: turned on, a new store */
  st = resil_registry_store(reg, "ops");
  const char *tmpl_eis = "store:\n"
                         "  instances:\n"
                         "    ops: {uri: \"sqlite:%s/ops.db\", pool_size: 3, effects_in_store: true}\n";
  snprintf(yaml, sizeof yaml, tmpl_eis, tmpdir);
  p = write_file("io.yaml", yaml);
  assert_int_equal(resil_registry_reload(reg, p, &err), RESIL_OK);
  assert_ptr_not_equal(resil_registry_store(reg, "ops"), st);
  st = resil_registry_store(reg, "ops");
  assert_int_equal(resil_registry_reload(reg, p, &err), RESIL_OK);
  assert_ptr_equal(resil_registry_store(reg, "ops"), st);
  resil_registry_free(reg);
}

/* user_agent and idempotency_header are refused as the client refuses
 * them, the error at the setting's line and column. */
static void http_header_settings_are_validated(void **state) {
  (void)state;
  static const struct {
    const char *line, *key;
    uint32_t column;
  } cases[] = {
      {"      user_agent: \"app/1\\r\\nX-Injected: 1\"\n", "user_agent", 19},
      {"      user_agent: \"app\\x7f\"\n", "user_agent", 19},
      {"      idempotency_header: Host\n", "idempotency_header", 27},
      {"      idempotency_header: Transfer-Encoding\n", "idempotency_header", 27},
      {"      deadline_header: Host\n", "deadline_header", 24},
      {"      deadline_header: \"Request Timeout\"\n", "deadline_header", 24},
      {"      deadline_propagation: 2\n", "deadline_propagation", 29},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char yaml[512];
    snprintf(yaml, sizeof yaml,
             "http_client:\n"
             "  instances:\n"
             "    api:\n"
             "      base_url: http://127.0.0.1:9\n"
             "%s"
             "      endpoints:\n"
             "        get: {path: /x}\n",
             cases[i].line);
    resil_registry *reg = NULL;
    resil_registry_error err;
    resil_registry_error_init(&err);
    assert_int_equal(resil_registry_load_string(yaml, strlen(yaml), "h.yaml", &reg, &err),
                     RESIL_EINVAL);
    assert_null(reg);
    char path[128];
    snprintf(path, sizeof path, "http_client.instances.api.%s", cases[i].key);
    assert_string_equal(err.key_path, path);
    assert_int_equal(err.line, 5);
    assert_int_equal(err.column, cases[i].column);
    char msg[1024];
    resil_registry_error_format(&err, msg, sizeof msg);
    char where[64];
    snprintf(where, sizeof where, "h.yaml:5:%u: ", (unsigned)cases[i].column);
    if (strncmp(msg, where, strlen(where)) != 0) fail_msg("%s", msg);
  }
}

/* The deadline settings (Since 0.2) load: another header, off, and off
 * for one endpoint. */
static void http_deadline_settings_load(void **state) {
  (void)state;
  const char *yaml = "http_client:\n"
                     "  instances:\n"
                     "    api:\n"
                     "      base_url: http://127.0.0.1:9\n"
                     "      deadline_header: grpc-timeout\n"
                     "      endpoints:\n"
                     "        get: {path: /x}\n"
                     "        quiet: {path: /y, no_deadline_header: true}\n"
                     "    off:\n"
                     "      base_url: http://127.0.0.1:9\n"
                     "      deadline_propagation: false\n"
                     "      deadline_header: \"not read when off\"\n"
                     "      endpoints:\n"
                     "        get: {path: /x}\n";
  resil_registry *reg = NULL;
  resil_registry_error err;
  resil_registry_error_init(&err);
  if (resil_registry_load_string(yaml, strlen(yaml), "d.yaml", &reg, &err) != RESIL_OK) {
    char msg[1024];
    resil_registry_error_format(&err, msg, sizeof msg);
    fail_msg("%s", msg);
  }
  assert_non_null(resil_registry_http_client(reg, "api"));
  assert_non_null(resil_registry_http_client(reg, "off"));
  resil_registry_free(reg);
}

static void store_errors_point_at_the_uri(void **state) {
  (void)state;
  const char *p = write_file("st.yaml", "store:\n"
                                        "  instances:\n"
                                        "    ops: {uri: \"sqlite:/nonexistent-dir/x/ops.db\"}\n");
  resil_registry *reg = NULL;
  resil_registry_error err;
  resil_registry_error_init(&err);
  assert_int_equal(resil_registry_load_file(p, &reg, &err), RESIL_EIO);
  assert_null(reg);
  assert_int_equal(err.line, 3);
  assert_int_equal(err.column, 16);
  assert_string_equal(err.key_path, "store.instances.ops.uri");
  p = write_file("st.yaml", "store:\n"
                            "  instances:\n"
                            "    ops: {uri: \"sqlite:/tmp/x.db\", busy_timeout: 2h}\n");
  assert_int_equal(resil_registry_load_file(p, &reg, &err), RESIL_EINVAL);
  assert_string_equal(err.key_path, "store.instances.ops.busy_timeout");
  assert_int_equal(err.column, 50);
  assert_non_null(strstr(err.message, "got 2 h"));
  p = write_file("st.yaml", "store:\n"
                            "  instances:\n"
                            "    ops: {uri: \"sqlite:/tmp/x.db\", effects_in_store: maybe}\n");
  assert_int_equal(resil_registry_load_file(p, &reg, &err), RESIL_EINVAL);
  assert_null(reg);
  assert_int_equal(err.line, 3);
  assert_string_equal(err.key_path, "store.instances.ops.effects_in_store");
  assert_non_null(strstr(err.message, "expected true or false, got 'maybe'"));
}

/* ---- CLI ------------------------------------------------------------------------ */

/* Runs the tool with args, stdout and stderr to files; returns the exit
 * status and fills out/err. */
static int run_tool(const char *args, char *out, size_t on, char *errb, size_t en) {
  const char *bin = getenv("RESIL_BIN");
  char cmd[2048];
  snprintf(cmd, sizeof cmd, "%s %s >%s/out 2>%s/err", bin, args, tmpdir, tmpdir);
  int st = system(cmd);
  assert_true(WIFEXITED(st));
  char p[256];
  snprintf(p, sizeof p, "%s/out", tmpdir);
  FILE *f = fopen(p, "r");
  assert_non_null(f);
  size_t n = fread(out, 1, on - 1, f);
  out[n] = 0;
  fclose(f);
  snprintf(p, sizeof p, "%s/err", tmpdir);
  f = fopen(p, "r");
  assert_non_null(f);
  n = fread(errb, 1, en - 1, f);
  errb[n] = 0;
  fclose(f);
  return WEXITSTATUS(st);
}

static void cli_config_check_exit_codes_and_lines(void **state) {
  (void)state;
  if (!getenv("RESIL_BIN")) skip();
  char out[8192], err[8192], args[1024];
  snprintf(args, sizeof args, "config check %s/examples/config/payments-client.yaml",
           RESIL_SOURCE_DIR);
  assert_int_equal(run_tool(args, out, sizeof out, err, sizeof err), 0);
  assert_non_null(strstr(out, "payments-client.yaml: OK: 7 instances"));
  /* every file in examples/config/ at once: one OK line each */
  snprintf(args, sizeof args, "config check %s/examples/config/*.yaml", RESIL_SOURCE_DIR);
  assert_int_equal(run_tool(args, out, sizeof out, err, sizeof err), 0);
  assert_string_equal(err, "");
  assert_non_null(strstr(out, "service-upstreams.yaml: OK: 16 instances"));
  assert_non_null(strstr(out, "upstream-instances.yaml: OK: 4 instances (1 circuitbreaker, 1 retry, "
                              "1 chain, 1 http_client)"));
  /* a good and a bad file: both reported, exit 2 */
  snprintf(args, sizeof args,
           "config check %s/examples/config/payments-client.yaml %s/tests/data/config/range.yaml",
           RESIL_SOURCE_DIR, RESIL_SOURCE_DIR);
  assert_int_equal(run_tool(args, out, sizeof out, err, sizeof err), 2);
  assert_non_null(strstr(out, "payments-client.yaml: OK"));
  assert_non_null(strstr(err, "range.yaml:5:31: "));
  const char *names[] = {"range.yaml", "unknown_key.yaml", "syntax.yaml", "unknown_layer.yaml"};
  for (size_t i = 0; i < 4; i++) {
    char path[512], want[1024];
    snprintf(path, sizeof path, "%s/tests/data/config/%s", RESIL_SOURCE_DIR, names[i]);
    expected_line(path, want, sizeof want);
    snprintf(args, sizeof args, "config check %s", path);
    assert_int_equal(run_tool(args, out, sizeof out, err, sizeof err), 2);
    err[strcspn(err, "\n")] = 0;
    assert_string_equal(err, want);
  }
  assert_int_equal(run_tool("config check /nonexistent.yaml", out, sizeof out, err, sizeof err), 2);
  assert_int_equal(run_tool("config frobnicate", out, sizeof out, err, sizeof err), 2);
}

static void cli_describe_config_prints_every_chain(void **state) {
  (void)state;
  if (!getenv("RESIL_BIN")) skip();
  char out[16384], err[8192], args[1024];
  snprintf(args, sizeof args, "describe --config %s/examples/config/payments-client.yaml --chain payments",
           RESIL_SOURCE_DIR);
  assert_int_equal(run_tool(args, out, sizeof out, err, sizeof err), 0);
  assert_non_null(strstr(out, "Retry(Breaker(RateLimiter(TimeLimiter(Bulkhead(call)))))\n"));
  assert_non_null(strstr(out, "800 ms per attempt"));
  assert_non_null(strstr(out, "deadline: 3000 ms per logical call"));
  assert_non_null(strstr(out, "worst case per logical call: 3 physical attempts, 3.000 s: the deadline "
                              "(computed 6.400 s = 3 x 800 ms per attempt + 4000 ms backoff"));
  assert_non_null(strstr(out, "  breaker \"payments\": ramp after recovery: from 10 % of calls to all "
                              "over 20.000 s (aggression 1: linear)"));
  /* the example of several instances: the balance, the ejection, each one */
  snprintf(args, sizeof args, "describe --config %s/examples/config/upstream-instances.yaml",
           RESIL_SOURCE_DIR);
  assert_int_equal(run_tool(args, out, sizeof out, err, sizeof err), 0);
  assert_non_null(strstr(out, "http_client catalog: 5 instances, balance p2c\n"));
  assert_non_null(strstr(out, "  ejection: after 5 consecutive failures (server_error, http_429, "
                              "not_sent, unknown), for 30.000 s x its ejections so far (at most "
                              "300.000 s"));
  assert_non_null(strstr(out, "  instance 4: http://127.0.0.1:9082 (endpoint get_price)\n"));
  assert_non_null(strstr(out, "  circuitbreaker catalog: ramp after recovery: from 10 % of calls "
                              "to all over 30.000 s"));
  /* every chain; the inventory chain's retry x hedge is a warning: exit 1 */
  snprintf(args, sizeof args, "describe --config %s/examples/config/service-upstreams.yaml",
           RESIL_SOURCE_DIR);
  assert_int_equal(run_tool(args, out, sizeof out, err, sizeof err), 1);
  assert_non_null(strstr(out, "chain inventory ("));
  assert_non_null(strstr(out, "chain payments ("));
  assert_non_null(strstr(out, "chain search ("));
  assert_non_null(strstr(out, "warning: retries and hedges multiply: up to 6 physical attempts"));
  snprintf(args, sizeof args, "describe --config %s/examples/config/payments-client.yaml --chain nope",
           RESIL_SOURCE_DIR);
  assert_int_equal(run_tool(args, out, sizeof out, err, sizeof err), 2);
  assert_non_null(strstr(err, "no chain 'nope'"));
  snprintf(args, sizeof args, "describe --config %s/tests/data/config/unknown_key.yaml",
           RESIL_SOURCE_DIR);
  assert_int_equal(run_tool(args, out, sizeof out, err, sizeof err), 2);
  assert_non_null(strstr(err, "did you mean 'failure_rate_threshold'"));
  snprintf(args, sizeof args, "describe --config %s/examples/config/payments-client.yaml --order retry",
           RESIL_SOURCE_DIR);
  assert_int_equal(run_tool(args, out, sizeof out, err, sizeof err), 2);
}

/* `resil describe --config` shows each chain's breakers' ramp and, without
 * --chain, every breaker's ramp and every retry's and hedge's recovery
 * behaviour (DESIGN §2.9). */
static void cli_describe_config_shows_recovery(void **state) {
  (void)state;
  if (!getenv("RESIL_BIN")) skip();
  const char *p = write_file("rec.yaml",
                             "circuitbreaker:\n"
                             "  instances:\n"
                             "    payments: {ramp_duration: 30s, ramp_min_percent: 20, "
                             "ramp_aggression: 2}\n"
                             "    plain: {}\n"
                             "retry:\n"
                             "  instances:\n"
                             "    payments: {max_attempts: 3, recovery_breaker: payments}\n"
                             "    reports: {max_attempts: 3, retry_during_recovery: true}\n"
                             "    inchain: {max_attempts: 2}\n"
                             "hedge:\n"
                             "  instances:\n"
                             "    reads: {delay: 5ms, recovery_breaker: payments}\n"
                             "chain:\n"
                             "  instances:\n"
                             "    checkout:\n"
                             "      total_timeout: 2s\n"
                             "      layers: [{retry: inchain}, {circuitbreaker: payments}]\n");
  char out[16384], err[8192], args[1024];
  snprintf(args, sizeof args, "describe --config %s", p);
  assert_int_equal(run_tool(args, out, sizeof out, err, sizeof err), 0);
  assert_non_null(strstr(out, "note: retry \"inchain\" retries last: while breaker \"payments\""));
  assert_non_null(strstr(out, "  breaker \"payments\": ramp after recovery: from 20 % of calls "
                              "to all over 30.000 s (aggression 2: faster at first)"));
  assert_non_null(strstr(out, "  circuitbreaker plain: no ramp: full traffic once closed"));
  assert_non_null(strstr(out, "  retry payments: retries last: no retry while circuitbreaker "
                              "payments is HALF_OPEN or ramping"));
  assert_non_null(strstr(out, "  retry reports: retries during recovery too "
                              "(retry_during_recovery: true)"));
  assert_non_null(strstr(out, "  retry inchain: retries last in a chain: no retry while the "
                              "breaker layer inside it"));
  assert_non_null(strstr(out, "  hedge reads: hedges last: no hedge while circuitbreaker "
                              "payments is HALF_OPEN or ramping"));
  /* --chain: the chain and its breakers' ramp, not the whole list */
  snprintf(args, sizeof args, "describe --config %s --chain checkout", p);
  assert_int_equal(run_tool(args, out, sizeof out, err, sizeof err), 0);
  assert_non_null(strstr(out, "  breaker \"payments\": ramp after recovery: from 20 %"));
  assert_null(strstr(out, "circuitbreaker plain"));
}

/* ---- shared segments (section `shared`, DESIGN §8.1) ---------------------- */

static size_t dir_entries(const char *dir) {
  DIR *d = opendir(dir);
  assert_non_null(d);
  size_t n = 0;
  struct dirent *de;
  while ((de = readdir(d)) != NULL)
    if (strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0) n++;
  closedir(d);
  return n;
}

static void shared_text(char *buf, size_t n, const char *dir, int limit, const char *required) {
  snprintf(buf, n,
           "shared:\n"
           "  instances:\n"
           "    app: {dir: %s, capacity: 16, mode: 0600, required: %s}\n"
           "ratelimiter:\n"
           "  instances:\n"
           "    api: {limit_for_period: %d, refresh_period: 1h, shared: app}\n"
           "    own: {limit_for_period: 2, refresh_period: 1h}\n"
           "bulkhead:\n"
           "  instances:\n"
           "    pool: {max_concurrent: 3, shared: app}\n"
           "retry_budget:\n"
           "  instances:\n"
           "    b: {mode: grpc, max_tokens: 10, shared: app}\n",
           dir, required, limit);
}

static int gen_of(void *user, const char *kind, const char *name, uint64_t gen) {
  if (strcmp(kind, "ratelimiter") == 0 && strcmp(name, "api") == 0) *(uint64_t *)user = gen;
  return 0;
}

static char *render(resil_registry *reg) {
  resil_metrics *m;
  assert_int_equal(resil_metrics_new(NULL, &m), RESIL_OK);
  assert_int_equal(resil_registry_metrics_add(reg, m), RESIL_OK);
  char *t, *out;
  assert_int_equal(resil_metrics_render_alloc(m, &t, NULL), RESIL_OK);
  out = strdup(t);
  resil_metrics_text_free(m, t);
  assert_int_equal(resil_registry_metrics_remove(reg, m), RESIL_OK);
  resil_metrics_free(m);
  return out;
}

/* Two registries (as two processes would) on one segment share the
 * limiter's permits and export the same values; a reload keeps what did
 * not change and replaces, in the segment, what did (generation 2, state
 * reset); a changed segment re-creates what names it; NO_OPEN opens
 * nothing. */
static void shared_segments_are_shared_kept_and_replaced_by_reloads(void **state) {
  (void)state;
  char dir[128], text[1024];
  snprintf(dir, sizeof dir, "%s/seg", tmpdir);
  assert_int_equal(mkdir(dir, 0700), 0);
  shared_text(text, sizeof text, dir, 2, "true");
  const char *p = write_file("shared.yaml", text);

  resil_registry_load_options o;
  resil_registry_load_options_init(&o);
  o.flags = RESIL_REGISTRY_NO_OPEN;
  resil_registry *chk;
  assert_int_equal(resil_registry_load_file_ex(p, &o, &chk, NULL), RESIL_OK);
  assert_null(resil_registry_shared(chk, "app"));
  assert_non_null(resil_registry_ratelimiter(chk, "api"));
  resil_registry_free(chk);
  assert_int_equal(dir_entries(dir), 0); /* nothing opened or created */

  resil_registry *r1, *r2;
  assert_int_equal(resil_registry_load_file(p, &r1, NULL), RESIL_OK);
  assert_int_equal(resil_registry_load_file(p, &r2, NULL), RESIL_OK);
  resil_shared *seg = resil_registry_shared(r1, "app");
  assert_non_null(seg);
  assert_int_equal(resil_shared_is_fallback(seg), 0);
  assert_int_equal(resil_shared_capacity(seg), 16);
  assert_int_equal(dir_entries(dir), 1);
  resil_ratelimiter *a1 = resil_registry_ratelimiter(r1, "api");
  resil_ratelimiter *a2 = resil_registry_ratelimiter(r2, "api");
  assert_int_equal(resil_ratelimiter_acquire(a1, 1, NULL, NULL), RESIL_DECISION_GO);
  assert_int_equal(resil_ratelimiter_available(a2), 1);
  assert_int_equal(resil_ratelimiter_available(resil_registry_ratelimiter(r2, "own")), 2);
  /* each process exports the shared values, and the segment's figures */
  char *t = render(r2);
  assert_non_null(strstr(t, "resil_ratelimiter_available_permissions{name=\"api\"} 1\n"));
  assert_non_null(strstr(t, "resil_ratelimiter_available_permissions{name=\"own\"} 2\n"));
  assert_non_null(strstr(t, "resil_shared_slots_used{name=\"app\"} 3\n"));
  assert_non_null(strstr(t, "resil_shared_slots_capacity{name=\"app\"} 16\n"));
  assert_non_null(strstr(t, "resil_shared_fallback_total{name=\"app\"} 0\n"));
  free(t);

  /* the same file: everything kept, the limiter's state too */
  assert_int_equal(resil_registry_reload(r1, p, NULL), RESIL_OK);
  assert_ptr_equal(resil_registry_shared(r1, "app"), seg);
  assert_ptr_equal(resil_registry_ratelimiter(r1, "api"), a1);
  assert_int_equal(resil_ratelimiter_available(a1), 1);
  uint64_t gen = 0;
  assert_int_equal(resil_shared_foreach(seg, gen_of, &gen), 3);
  assert_int_equal(gen, 1);

  /* the limiter changed: replaced in the segment for every process */
  shared_text(text, sizeof text, dir, 5, "true");
  p = write_file("shared.yaml", text);
  resil_registry_reload_stats rs;
  assert_int_equal(resil_registry_reload(r1, p, NULL), RESIL_OK);
  assert_int_equal(resil_registry_last_reload(r1, &rs), RESIL_OK);
  assert_int_equal(rs.replaced, 1);
  assert_ptr_equal(resil_registry_shared(r1, "app"), seg);
  resil_ratelimiter *b1 = resil_registry_ratelimiter(r1, "api");
  assert_ptr_not_equal(b1, a1);
  assert_int_equal(resil_ratelimiter_available(b1), 5);
  assert_int_equal(resil_shared_foreach(seg, gen_of, &gen), 3);
  assert_int_equal(gen, 2);
  /* the other process, reloading the same file, attaches: no generation 3 */
  assert_int_equal(resil_registry_reload(r2, p, NULL), RESIL_OK);
  assert_int_equal(resil_ratelimiter_available(resil_registry_ratelimiter(r2, "api")), 5);
  assert_int_equal(resil_shared_foreach(seg, gen_of, &gen), 3);
  assert_int_equal(gen, 2);

  /* the segment's settings changed: it and what names it are new */
  resil_bulkhead *pool = resil_registry_bulkhead(r1, "pool");
  shared_text(text, sizeof text, dir, 5, "false");
  p = write_file("shared.yaml", text);
  assert_int_equal(resil_registry_reload(r1, p, NULL), RESIL_OK);
  assert_ptr_not_equal(resil_registry_shared(r1, "app"), seg);
  assert_ptr_not_equal(resil_registry_bulkhead(r1, "pool"), pool);
  assert_ptr_not_equal(resil_registry_ratelimiter(r1, "api"), b1);
  assert_non_null(resil_registry_retry_budget(r1, "b"));

  resil_shared_config sc;
  resil_shared_config_init(&sc);
  sc.name = "app";
  sc.dir = dir;
  resil_registry_free(r1);
  resil_registry_free(r2);
  assert_int_equal(resil_shared_unlink(&sc, NULL), RESIL_OK);
}

static void breaker_text(char *buf, size_t n, const char *dir, int minimum) {
  snprintf(buf, n,
           "shared:\n"
           "  instances:\n"
           "    app: {dir: %s, capacity: 8, required: true}\n"
           "circuitbreaker:\n"
           "  instances:\n"
           "    up: {window_size: 4, minimum_calls: %d, failure_rate_threshold: 50,\n"
           "         open_wait: 1h, shared: app}\n",
           dir, minimum);
}

static void fail_through(resil_breaker *br, int n) {
  resil_outcome o = resil_outcome_http(503);
  for (int i = 0; i < n; i++) {
    resil_breaker_permit pm;
    assert_int_equal(resil_breaker_try_acquire(br, &pm), RESIL_DECISION_GO);
    assert_int_equal(resil_breaker_record(br, &pm, &o, 1000), RESIL_OK);
  }
}

/* A breaker with `shared: app`: two registries (two processes) on one
 * segment share its window, so failures recorded through one open it in
 * the other; reloading the same file keeps it (and its state); a reload
 * that changes its config replaces it in the segment (CLOSED again, for
 * the other registry too). */
static void a_shared_breaker_is_shared_and_replaced_by_reloads(void **state) {
  (void)state;
  char dir[128], text[1024];
  snprintf(dir, sizeof dir, "%s/segbr", tmpdir);
  assert_int_equal(mkdir(dir, 0700), 0);
  breaker_text(text, sizeof text, dir, 2);
  const char *p = write_file("shared-breaker.yaml", text);
  resil_registry *r1, *r2;
  assert_int_equal(resil_registry_load_file(p, &r1, NULL), RESIL_OK);
  assert_int_equal(resil_registry_load_file(p, &r2, NULL), RESIL_OK);
  resil_breaker *b1 = resil_registry_breaker(r1, "up");
  resil_breaker *b2 = resil_registry_breaker(r2, "up");
  assert_non_null(b1);
  assert_ptr_not_equal(b1, b2);
  fail_through(b1, 1);
  assert_int_equal(resil_breaker_state(b2), RESIL_BREAKER_CLOSED);
  fail_through(b2, 1); /* the window holds both: 2 of 2 failed */
  assert_int_equal(resil_breaker_state(b1), RESIL_BREAKER_OPEN);
  assert_int_equal(resil_breaker_state(b2), RESIL_BREAKER_OPEN);
  resil_breaker_permit pm;
  assert_int_equal(resil_breaker_try_acquire(b1, &pm), RESIL_DECISION_DENY);
  /* the read-only peek sees the same (and creates nothing) */
  resil_shared *seg = resil_registry_shared(r1, "app");
  resil_breaker_metrics m;
  assert_int_equal(resil_breaker_shared_peek(seg, "up", &m, NULL), RESIL_OK);
  assert_int_equal(m.state, RESIL_BREAKER_OPEN);
  assert_int_equal(m.buffered_calls, 2);
  assert_int_equal(m.failed_calls, 2);
  assert_int_equal(m.consecutive_opens, 1);
  assert_int_equal(m.total_not_permitted, 1);
  assert_int_equal(resil_breaker_shared_peek(seg, "nope", &m, NULL), RESIL_ESTATE);
  uint64_t g = 0;
  assert_int_equal(resil_shared_foreach(seg, gen_of, &g), 1);

  /* the same file: kept, still OPEN */
  assert_int_equal(resil_registry_reload(r1, p, NULL), RESIL_OK);
  assert_ptr_equal(resil_registry_breaker(r1, "up"), b1);
  assert_int_equal(resil_breaker_state(b1), RESIL_BREAKER_OPEN);

  /* its config changed: replaced in the segment for every process */
  breaker_text(text, sizeof text, dir, 3);
  p = write_file("shared-breaker.yaml", text);
  resil_registry_reload_stats rs;
  assert_int_equal(resil_registry_reload(r1, p, NULL), RESIL_OK);
  assert_int_equal(resil_registry_last_reload(r1, &rs), RESIL_OK);
  assert_int_equal(rs.replaced, 1);
  resil_breaker *c1 = resil_registry_breaker(r1, "up");
  assert_ptr_not_equal(c1, b1);
  assert_int_equal(resil_breaker_state(c1), RESIL_BREAKER_CLOSED);
  assert_int_equal(resil_breaker_state(b2), RESIL_BREAKER_CLOSED); /* reset there too */
  assert_int_equal(resil_registry_reload(r2, p, NULL), RESIL_OK);
  resil_breaker *c2 = resil_registry_breaker(r2, "up");
  fail_through(c2, 2);
  assert_int_equal(resil_breaker_state(c1), RESIL_BREAKER_CLOSED); /* minimum 3 now */
  fail_through(c1, 1);
  assert_int_equal(resil_breaker_state(c2), RESIL_BREAKER_OPEN);

  resil_shared_config sc;
  resil_shared_config_init(&sc);
  sc.name = "app";
  sc.dir = dir;
  resil_registry_free(r1);
  resil_registry_free(r2);
  assert_int_equal(resil_shared_unlink(&sc, NULL), RESIL_OK);
}

static void collect_line(void *user, const char *line) {
  char *buf = user;
  size_t l = strlen(buf);
  snprintf(buf + l, 4096 - l, "%s\n", line);
}

/* A required segment that cannot be opened is an error at its name; one
 * that is not falls back: counted, and its event lines (kept until a sink
 * is attached) say which segment and instance. */
static void a_shared_segment_falls_back_with_events_or_fails_when_required(void **state) {
  (void)state;
  const char *req =
      "shared:\n"
      "  instances:\n"
      "    app: {dir: /nonexistent/resil-test, required: true}\n"
      "ratelimiter:\n"
      "  instances:\n"
      "    api: {limit_for_period: 2, refresh_period: 1h, shared: app}\n";
  const char *p = write_file("req.yaml", req);
  resil_registry *reg = NULL;
  resil_registry_error err;
  resil_registry_error_init(&err);
  assert_int_not_equal(resil_registry_load_file(p, &reg, &err), RESIL_OK);
  assert_null(reg);
  assert_int_equal(err.line, 3);
  assert_int_equal(err.column, 5);
  assert_string_equal(err.key_path, "shared.instances.app");
  assert_non_null(strstr(err.message, "/nonexistent/resil-test"));

  const char *soft =
      "shared:\n"
      "  instances:\n"
      "    app: {dir: /nonexistent/resil-test}\n"
      "ratelimiter:\n"
      "  instances:\n"
      "    api: {limit_for_period: 2, refresh_period: 1h, shared: app}\n";
  p = write_file("soft.yaml", soft);
  assert_int_equal(resil_registry_load_file(p, &reg, NULL), RESIL_OK);
  resil_shared *seg = resil_registry_shared(reg, "app");
  assert_int_equal(resil_shared_is_fallback(seg), 1);
  assert_int_equal(resil_shared_fallbacks(seg), 2); /* the segment, then api */
  resil_ratelimiter *rl = resil_registry_ratelimiter(reg, "api");
  assert_int_equal(resil_ratelimiter_available(rl), 2); /* per process */
  char *t = render(reg);
  assert_non_null(strstr(t, "resil_shared_fallback_total{name=\"app\"} 2\n"));
  assert_non_null(strstr(t, "resil_shared_fallback_mode{name=\"app\"} 1\n"));
  free(t);
  char lines[4096] = "";
  resil_event_sink_config ec;
  resil_event_sink_config_init(&ec);
  ec.fn = collect_line;
  ec.user = lines;
  resil_event_sink *sink;
  assert_int_equal(resil_event_sink_new(&ec, &sink, NULL), RESIL_OK);
  assert_int_equal(resil_registry_events_attach(reg, sink), RESIL_OK);
  const char *l1 = strstr(lines, "\"kind\":\"shared_fallback\"");
  assert_non_null(l1);
  assert_non_null(strstr(lines, "\"shared_instance\":\"api\""));
  assert_non_null(strstr(l1 + 1, "\"kind\":\"shared_fallback\"")); /* two lines */
  assert_non_null(strstr(lines, "/nonexistent/resil-test"));
  assert_int_equal(resil_event_sink_lines(sink), 2);
  /* attached again: nothing written twice */
  assert_int_equal(resil_registry_events_attach(reg, NULL), RESIL_OK);
  assert_int_equal(resil_registry_events_attach(reg, sink), RESIL_OK);
  assert_int_equal(resil_event_sink_lines(sink), 2);
  assert_int_equal(resil_registry_events_attach(reg, NULL), RESIL_OK);
  resil_event_sink_free(sink);
  resil_registry_free(reg);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(durations_and_sizes_parse_exactly),
      cmocka_unit_test(payments_example_loads_with_inheritance),
      cmocka_unit_test(instances_example_loads_with_balance_and_ejection),
      cmocka_unit_test(every_example_loads),
      cmocka_unit_test(service_example_has_every_upstream),
      cmocka_unit_test(every_broken_file_gives_its_exact_error),
      cmocka_unit_test(range_error_carries_the_policys_range_data),
      cmocka_unit_test(an_error_after_valid_instances_creates_nothing),
      cmocka_unit_test(io_error_names_the_file),
      cmocka_unit_test(an_empty_file_is_an_empty_registry),
      cmocka_unit_test(reload_keeps_unchanged_state_and_replaces_changed),
      cmocka_unit_test(reload_with_an_error_changes_nothing),
      cmocka_unit_test(a_lease_outlives_the_registry),
      cmocka_unit_test(references_are_resolved_and_kept_with_what_they_name),
      cmocka_unit_test(recovery_settings_load_watch_and_reload),
      cmocka_unit_test(http_client_and_store_load_and_reload),
      cmocka_unit_test(http_header_settings_are_validated),
      cmocka_unit_test(http_deadline_settings_load),
      cmocka_unit_test(store_errors_point_at_the_uri),
      cmocka_unit_test(cli_config_check_exit_codes_and_lines),
      cmocka_unit_test(cli_describe_config_prints_every_chain),
      cmocka_unit_test(cli_describe_config_shows_recovery),
      cmocka_unit_test(shared_segments_are_shared_kept_and_replaced_by_reloads),
      cmocka_unit_test(a_shared_breaker_is_shared_and_replaced_by_reloads),
      cmocka_unit_test(a_shared_segment_falls_back_with_events_or_fails_when_required),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
#else
int main(void) {
  puts("libresil-config not built (no libyaml): skipped");
  return 77;
}
#endif
