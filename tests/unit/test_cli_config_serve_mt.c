/* `resil upstream --config FILE` and `resil fixture --config FILE` (child
 * processes of RESIL_BIN): /metrics shows the registry's instances,
 * SIGHUP reloads FILE (the next scrape shows the change), and a broken
 * FILE + SIGHUP changes nothing while the process keeps serving; --events
 * FILE gets a reload line for each (ok true with the counts, ok false with
 * the error). The test
 * waits for the process's own "reloaded" / "reload failed" line on stderr
 * (event order, no sleeps as synchronisation). */
#define _GNU_SOURCE
#include <curl/curl.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "test_util.h"

#ifdef RESIL_HAVE_CONFIG
#define CHILD_DIR_PREFIX "/tmp/resil-cfgserve"
#include "test_child_common.h"

typedef struct buf {
  char data[262144];
  size_t len;
} buf;

static size_t on_data(char *p, size_t sz, size_t n, void *user) {
  buf *b = user;
  size_t k = sz * n;
  if (b->len + k >= sizeof b->data) k = sizeof b->data - 1 - b->len;
  memcpy(b->data + b->len, p, k);
  b->len += k;
  b->data[b->len] = '\0';
  return sz * n;
}

static long scrape(const char *base, buf *b) {
  char url[128];
  snprintf(url, sizeof url, "%s/metrics", base);
  CURL *c = curl_easy_init();
  b->len = 0;
  b->data[0] = '\0';
  curl_easy_setopt(c, CURLOPT_URL, url);
  curl_easy_setopt(c, CURLOPT_NOPROXY, "*");
  curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, 10000L);
  curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_data);
  curl_easy_setopt(c, CURLOPT_WRITEDATA, b);
  long status = 0;
  if (curl_easy_perform(c) == CURLE_OK) curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
  curl_easy_cleanup(c);
  return status;
}

static const char *V1 = "circuitbreaker:\n"
                        "  instances:\n"
                        "    alpha: {failure_rate_threshold: 40}\n"
                        "ratelimiter:\n"
                        "  instances:\n"
                        "    gamma: {limit_for_period: 7}\n";
static const char *V2 = "circuitbreaker:\n"
                        "  instances:\n"
                        "    alpha: {failure_rate_threshold: 40}\n"
                        "    beta: {initial_state: forced_open}\n"
                        "ratelimiter:\n"
                        "  instances:\n"
                        "    gamma: {limit_for_period: 9}\n";
static const char *BROKEN = "circuitbreaker:\n"
                            "  instances:\n"
                            "    alpha: {failure_rate_treshold: 40}\n";

static void serve_reload_and_refuse(const char *cmd) {
  char cfg[128], err[128], uri[128], ev[128];
  snprintf(cfg, sizeof cfg, "%s/app.yaml", dir);
  snprintf(err, sizeof err, "%s/%s.err", dir, cmd);
  snprintf(uri, sizeof uri, "sqlite:%s/%s.db", dir, cmd);
  snprintf(ev, sizeof ev, "%s/%s.jsonl", dir, cmd);
  write_text(cfg, V1);
  const char *argv[] = {cmd, "--store", uri, "--config", cfg, "--events", ev, NULL};
  unsigned port = start_child(cmd, argv);
  char line[1024];
  char base[96];
  snprintf(base, sizeof base, "http://127.0.0.1:%u", port);

  static buf b;
  assert_int_equal(200, scrape(base, &b));
  assert_non_null(strstr(b.data, "resil_circuitbreaker_state{name=\"alpha\",state=\"closed\"} 1"));
  assert_null(strstr(b.data, "{name=\"beta\""));
  assert_non_null(strstr(b.data, "resil_ratelimiter_available_permissions{name=\"gamma\"} 7"));

  write_text(cfg, V2);
  assert_int_equal(0, kill(child, SIGHUP));
  wait_lines(err, "reloaded", 1);
  assert_int_equal(1, count_lines(err, "1 kept, 1 replaced, 1 added, 0 removed", NULL, 0));
  /* the event log (--events): the reload's line, written before the stderr line */
  assert_int_equal(1, count_lines(ev, "\"kind\":\"reload\",\"ok\":true", line, sizeof line));
  assert_non_null(strstr(line, "\"kept\":1,\"replaced\":1,\"added\":1,\"removed\":0"));
  assert_int_equal(200, scrape(base, &b));
  assert_non_null(strstr(b.data, "resil_circuitbreaker_state{name=\"alpha\",state=\"closed\"} 1"));
  assert_non_null(
      strstr(b.data, "resil_circuitbreaker_state{name=\"beta\",state=\"forced_open\"} 1"));
  assert_non_null(strstr(b.data, "resil_ratelimiter_available_permissions{name=\"gamma\"} 9"));

  write_text(cfg, BROKEN);
  assert_int_equal(0, kill(child, SIGHUP));
  wait_lines(err, "reload failed", 1);
  char why[1024];
  assert_int_equal(1, count_lines(err, "reload failed", why, sizeof why));
  assert_non_null(strstr(why, "app.yaml:3:"));
  assert_non_null(strstr(why, "failure_rate_threshold")); /* did you mean */
  assert_int_equal(1, count_lines(ev, "\"kind\":\"reload\",\"ok\":false", line, sizeof line));
  assert_non_null(strstr(line, "app.yaml:3:"));
  assert_int_equal(200, scrape(base, &b));
  assert_non_null(
      strstr(b.data, "resil_circuitbreaker_state{name=\"beta\",state=\"forced_open\"} 1"));
  assert_non_null(strstr(b.data, "resil_ratelimiter_available_permissions{name=\"gamma\"} 9"));

  /* still serving, and SIGTERM still stops it cleanly */
  assert_int_equal(0, kill(child, SIGTERM));
  int status = 0;
  assert_int_equal(child, waitpid(child, &status, 0));
  child = -1;
  assert_true(WIFEXITED(status));
  assert_int_equal(0, WEXITSTATUS(status));
}

static void upstream_config_reloads_on_sighup(void **state) {
  (void)state;
  serve_reload_and_refuse("upstream");
}

static void fixture_config_reloads_on_sighup(void **state) {
  (void)state;
  serve_reload_and_refuse("fixture");
}

static void a_broken_config_stops_the_start(void **state) {
  (void)state;
  const char *bin = getenv("RESIL_BIN");
  if (!bin) skip();
  char cfg[128], cmd[512];
  snprintf(cfg, sizeof cfg, "%s/bad.yaml", dir);
  write_text(cfg, BROKEN);
  snprintf(cmd, sizeof cmd, "'%s' fixture --config '%s' 2>%s/bad.err", bin, cfg, dir);
  int rc = system(cmd);
  assert_true(WIFEXITED(rc));
  assert_int_equal(1, WEXITSTATUS(rc));
  char err[128];
  snprintf(err, sizeof err, "%s/bad.err", dir);
  assert_int_equal(1, count_lines(err, "bad.yaml:3:", NULL, 0));
}

int main(void) {
  curl_global_init(CURL_GLOBAL_DEFAULT);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(upstream_config_reloads_on_sighup, setup, teardown),
      cmocka_unit_test_setup_teardown(fixture_config_reloads_on_sighup, setup, teardown),
      cmocka_unit_test_setup_teardown(a_broken_config_stops_the_start, setup, teardown),
  };
  int rc = cmocka_run_group_tests(tests, NULL, NULL);
  curl_global_cleanup();
  return rc;
}
#else
int main(void) { return 77; }
#endif
