/* A real Prometheus server (Debian's prometheus, started here on
 * 127.0.0.1, a free port, a temporary directory, scrape_interval 1s)
 * scrapes two /metrics endpoints: `resil upstream` (RESIL_BIN, a child
 * process on a SQLite store, after two payments) and the in-process
 * fixture, whose collector holds a breaker forced OPEN. The test then reads
 * the breaker's state and counters back through Prometheus's HTTP query
 * API (/api/v1/query). Skipped when prometheus is not installed, except
 * under CI=true, where that fails. Every child is stopped on every exit
 * path (teardown, and PR_SET_PDEATHSIG if the test process dies). */
#include <arpa/inet.h>
#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <math.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fixture/fixture.h"
#include "test_util.h"

typedef struct world {
  char dir[64];
  pid_t prom, upstream;
  resil_fixture *fx;
  resil_breaker *br;
  char upstream_base[64];
  unsigned prom_port;
} world;

static world W;

static int ci(void) {
  const char *c = getenv("CI");
  return c && strcmp(c, "true") == 0;
}

static const char *find_prometheus(void) {
  static const char *const paths[] = {"/usr/bin/prometheus", "/usr/local/bin/prometheus"};
  for (size_t i = 0; i < 2; i++)
    if (access(paths[i], X_OK) == 0) return paths[i];
  return NULL;
}

/* Starts argv[0] with stdout and stderr to `log`; the child dies with the
 * test process. */
static pid_t spawn(char *const argv[], const char *log) {
  pid_t pid = fork();
  if (pid != 0) return pid;
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0600);
  if (fd >= 0) {
    dup2(fd, 1);
    dup2(fd, 2);
  }
  execv(argv[0], argv);
  _exit(127);
}

static void stop(pid_t *pid) {
  if (*pid <= 0) return;
  kill(*pid, SIGTERM);
  for (int i = 0; i < 1000; i++) {
    if (waitpid(*pid, NULL, WNOHANG) == *pid) {
      *pid = -1;
      return;
    }
    test_sleep_ms(10);
  }
  kill(*pid, SIGKILL);
  waitpid(*pid, NULL, 0);
  *pid = -1;
}

static void print_file(const char *path) {
  FILE *f = fopen(path, "r");
  char line[512];
  while (f && fgets(line, sizeof line, f)) fprintf(stderr, "  | %s", line);
  if (f) fclose(f);
}

static unsigned free_port(void) {
  int s = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in sa = {.sin_family = AF_INET};
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t n = sizeof sa;
  unsigned port = 0;
  if (s >= 0 && bind(s, (struct sockaddr *)&sa, sizeof sa) == 0 &&
      getsockname(s, (struct sockaddr *)&sa, &n) == 0)
    port = ntohs(sa.sin_port);
  if (s >= 0) close(s);
  return port;
}

typedef struct buf {
  char data[65536];
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

/* A request to 127.0.0.1; returns the HTTP status (0: no answer). */
static long http(const char *url, const char *post, const char *key, buf *out) {
  CURL *c = curl_easy_init();
  struct curl_slist *h = NULL;
  char hk[96];
  out->len = 0;
  out->data[0] = '\0';
  curl_easy_setopt(c, CURLOPT_URL, url);
  curl_easy_setopt(c, CURLOPT_NOPROXY, "*");
  curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, 5000L);
  curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_data);
  curl_easy_setopt(c, CURLOPT_WRITEDATA, out);
  if (post) {
    curl_easy_setopt(c, CURLOPT_POSTFIELDS, post);
    snprintf(hk, sizeof hk, "Idempotency-Key: %s", key);
    h = curl_slist_append(h, hk);
    h = curl_slist_append(h, "Content-Type: application/json");
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
  }
  long status = 0;
  if (curl_easy_perform(c) == CURLE_OK) curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
  curl_slist_free_all(h);
  curl_easy_cleanup(c);
  return status;
}

/* The value of the one series a PromQL query returns, or NAN while
 * Prometheus has none yet. */
static double query(const char *promql) {
  CURL *c = curl_easy_init();
  char *q = curl_easy_escape(c, promql, 0);
  char url[512];
  snprintf(url, sizeof url, "http://127.0.0.1:%u/api/v1/query?query=%s", W.prom_port, q);
  curl_free(q);
  curl_easy_cleanup(c);
  buf b;
  if (http(url, NULL, NULL, &b) != 200) return NAN;
  json_t *root = json_loads(b.data, 0, NULL);
  double v = NAN;
  json_t *res = json_object_get(json_object_get(root, "data"), "result");
  if (json_is_array(res) && json_array_size(res) == 1) {
    json_t *val = json_array_get(json_object_get(json_array_get(res, 0), "value"), 1);
    if (json_is_string(val)) v = strtod(json_string_value(val), NULL);
  }
  json_decref(root);
  return v;
}

/* Polls until the query gives `want` (up to 90 s: a loaded 2-core machine
 * starts Prometheus slowly). */
static double wait_for(const char *promql, double want) {
  double v = NAN;
  for (int i = 0; i < 900; i++) {
    v = query(promql);
    if (v == want) return v;
    test_sleep_ms(100);
  }
  return v;
}

static int teardown(void **state) {
  (void)state;
  stop(&W.prom);
  stop(&W.upstream);
  if (W.fx) resil_fixture_stop(W.fx);
  W.fx = NULL;
  resil_breaker_free(W.br);
  W.br = NULL;
  if (W.dir[0]) {
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", W.dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", W.dir);
  }
  return 0;
}

static void start_upstream(const char *bin) {
  char uri[128], log[96];
  snprintf(uri, sizeof uri, "sqlite:%s/upstream.db", W.dir);
  snprintf(log, sizeof log, "%s/upstream.log", W.dir);
  char *argv[] = {(char *)bin, "upstream", "--store", uri, NULL};
  W.upstream = spawn(argv, log);
  assert_true(W.upstream > 0);
  for (int i = 0; i < 3000 && !W.upstream_base[0]; i++) {
    FILE *f = fopen(log, "r");
    unsigned port;
    char line[256];
    while (f && fgets(line, sizeof line, f))
      if (sscanf(line, "upstream listening on http://127.0.0.1:%u", &port) == 1)
        snprintf(W.upstream_base, sizeof W.upstream_base, "http://127.0.0.1:%u", port);
    if (f) fclose(f);
    if (!W.upstream_base[0]) test_sleep_ms(10);
  }
  if (!W.upstream_base[0]) {
    print_file(log);
    fail_msg("resil upstream did not start");
  }
}

static void start_prometheus(const char *bin) {
  char cfg[96], data[96], log[96], listen[64], cfgopt[128], dataopt[128];
  snprintf(cfg, sizeof cfg, "%s/prometheus.yml", W.dir);
  snprintf(data, sizeof data, "%s/data", W.dir);
  snprintf(log, sizeof log, "%s/prometheus.log", W.dir);
  FILE *f = fopen(cfg, "w");
  assert_non_null(f);
  fprintf(f,
          "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n"
          "scrape_configs:\n"
          "  - job_name: upstream\n    static_configs:\n      - targets: ['%s']\n"
          "  - job_name: fixture\n    static_configs:\n      - targets: ['127.0.0.1:%u']\n",
          W.upstream_base + strlen("http://"), (unsigned)resil_fixture_port(W.fx));
  fclose(f);
  snprintf(cfgopt, sizeof cfgopt, "--config.file=%s", cfg);
  snprintf(dataopt, sizeof dataopt, "--storage.tsdb.path=%s", data);
  /* A port taken between free_port() and Prometheus's bind: try again. */
  for (int tries = 0; tries < 3; tries++) {
    W.prom_port = free_port();
    assert_true(W.prom_port > 0);
    snprintf(listen, sizeof listen, "--web.listen-address=127.0.0.1:%u", W.prom_port);
    char *argv[] = {(char *)bin, cfgopt, dataopt, listen, "--log.level=warn", NULL};
    W.prom = spawn(argv, log);
    assert_true(W.prom > 0);
    char ready[96];
    snprintf(ready, sizeof ready, "http://127.0.0.1:%u/-/ready", W.prom_port);
    for (int i = 0; i < 600; i++) {
      buf b;
      if (http(ready, NULL, NULL, &b) == 200) return;
      if (waitpid(W.prom, NULL, WNOHANG) == W.prom) {
        W.prom = -1;
        break;
      }
      test_sleep_ms(100);
    }
    print_file(log);
    stop(&W.prom);
  }
  fail_msg("prometheus did not become ready");
}

static void prometheus_scrapes_breaker_state_and_counters(void **state) {
  (void)state;
  const char *prom = find_prometheus();
  if (!prom) {
    if (ci()) fail_msg("prometheus not found and CI=true: install it (scripts/deps.sh)");
    fprintf(stderr, "SKIPPED: prometheus not found (Debian package prometheus)\n");
    skip();
  }
  const char *bin = getenv("RESIL_BIN");
  if (!bin || access(bin, X_OK) != 0) {
    if (ci()) fail_msg("RESIL_BIN is not set to the resil binary");
    fprintf(stderr, "SKIPPED: RESIL_BIN is not set\n");
    skip();
  }
  snprintf(W.dir, sizeof W.dir, "/tmp/resil_prom_XXXXXX");
  assert_non_null(mkdtemp(W.dir));

  /* The in-process fixture serves a breaker forced OPEN that refused 3
   * calls after 1 success. */
  resil_fixture_config fc;
  resil_fixture_config_init(&fc);
  fc.quiet = 1;
  char err[256];
  assert_int_equal(0, resil_fixture_start(&fc, &W.fx, err, sizeof err));
  resil_breaker_config bc;
  resil_breaker_config_init(&bc);
  bc.name = "payments";
  assert_status(RESIL_OK, resil_breaker_new(&bc, &W.br, NULL));
  resil_breaker_permit p;
  assert_int_equal(RESIL_DECISION_GO, resil_breaker_try_acquire(W.br, &p));
  resil_outcome ok = resil_outcome_http(200);
  assert_status(RESIL_OK, resil_breaker_record(W.br, &p, &ok, 0));
  assert_status(RESIL_OK, resil_breaker_transition(W.br, RESIL_BREAKER_FORCED_OPEN));
  for (int i = 0; i < 3; i++)
    assert_int_equal(RESIL_DECISION_DENY, resil_breaker_try_acquire(W.br, &p));
  assert_status(RESIL_OK, resil_metrics_add_breaker(resil_fixture_metrics(W.fx), NULL, W.br));

  /* `resil upstream` executes two payments and replays one. */
  start_upstream(bin);
  char url[128];
  snprintf(url, sizeof url, "%s/payments", W.upstream_base);
  buf b;
  assert_int_equal(201, http(url, "{\"amount\":5}", "k-1", &b));
  assert_int_equal(201, http(url, "{\"amount\":7}", "k-2", &b));
  assert_int_equal(201, http(url, "{\"amount\":7}", "k-2", &b)); /* replayed */
  snprintf(url, sizeof url, "%s/metrics", W.upstream_base);
  assert_int_equal(200, http(url, NULL, NULL, &b));

  start_prometheus(prom);
  double v;
  v = wait_for("resil_circuitbreaker_state{job=\"fixture\",name=\"payments\",state=\"forced_open\"}", 1);
  assert_true(v == 1);
  v = query("resil_circuitbreaker_state{job=\"fixture\",name=\"payments\",state=\"closed\"}");
  assert_true(v == 0);
  v = query("resil_circuitbreaker_calls_total{job=\"fixture\",name=\"payments\",kind=\"not_permitted\"}");
  assert_true(v == 3);
  v = wait_for("resil_idem_requests_total{job=\"upstream\",name=\"upstream\",result=\"executed\"}", 2);
  if (v != 2) fail_msg("executed: %g, expected 2", v);
  v = query("resil_idem_requests_total{job=\"upstream\",name=\"upstream\",result=\"replayed\"}");
  assert_true(v == 1);
  v = query("resil_store_operations_total{job=\"upstream\",name=\"upstream_store\",result=\"committed\"}");
  assert_true(v == 2);
  /* Both targets were scraped without errors. */
  assert_true(query("up{job=\"upstream\"}") == 1);
  assert_true(query("up{job=\"fixture\"}") == 1);
  /* A state change reaches Prometheus on a later scrape. */
  assert_status(RESIL_OK, resil_breaker_transition(W.br, RESIL_BREAKER_CLOSED));
  v = wait_for("resil_circuitbreaker_state{job=\"fixture\",name=\"payments\",state=\"closed\"}", 1);
  assert_true(v == 1);
  /* The instance leaves the collector before the teardown frees it. */
  assert_status(RESIL_OK, resil_metrics_remove(resil_fixture_metrics(W.fx), W.br));
}

int main(void) {
  curl_global_init(CURL_GLOBAL_DEFAULT);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_teardown(prometheus_scrapes_breaker_state_and_counters, teardown),
  };
  int rc = cmocka_run_group_tests(tests, NULL, NULL);
  curl_global_cleanup();
  return rc;
}
