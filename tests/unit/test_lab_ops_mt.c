/* `resil lab --only P1,P6,H3,I1 --metrics F --events G` (RESIL_BIN, a
 * child process): F is one valid exposition (`promtool check metrics`,
 * skipped without promtool except under CI=true; every family's TYPE line
 * once) holding the P6 breaker's state family and the H and I clients and
 * stores; every line of G is a JSON object with time, instance and kind,
 * and each experiment run has its "experiment" line. */
#define _GNU_SOURCE
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "test_util.h"

static char dir[64];

static int setup(void **state) {
  (void)state;
  snprintf(dir, sizeof dir, "/tmp/resil-labops-XXXXXX");
  assert_non_null(mkdtemp(dir));
  return 0;
}

static int teardown(void **state) {
  (void)state;
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  assert_int_equal(0, system(cmd));
  return 0;
}

static int ci(void) {
  const char *c = getenv("CI");
  return c && strcmp(c, "true") == 0;
}

static char *slurp(const char *path) {
  FILE *f = fopen(path, "rb");
  assert_non_null(f);
  static char buf[1 << 20];
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = 0;
  return buf;
}

static int count(const char *text, const char *needle) {
  int k = 0;
  for (const char *p = text; (p = strstr(p, needle)) != NULL; p += strlen(needle)) k++;
  return k;
}

static void lab_writes_metrics_and_events(void **state) {
  (void)state;
  const char *bin = getenv("RESIL_BIN");
  if (!bin) {
    if (ci()) fail_msg("RESIL_BIN is not set");
    skip();
  }
  char f[128], g[128], cmd[768];
  snprintf(f, sizeof f, "%s/lab.prom", dir);
  snprintf(g, sizeof g, "%s/lab.jsonl", dir);
  snprintf(cmd, sizeof cmd, "'%s' lab --only P1,P6,H3,I1 --metrics '%s' --events '%s' >%s/out 2>&1",
           bin, f, g, dir);
  int rc = system(cmd);
  if (!WIFEXITED(rc) || WEXITSTATUS(rc) != 0) {
    char out[128];
    snprintf(out, sizeof out, "%s/out", dir);
    fprintf(stderr, "%s\n", slurp(out));
    fail_msg("resil lab exited %d", WEXITSTATUS(rc));
  }

  const char *m = slurp(f);
  assert_int_equal(1, count(m, "# TYPE resil_circuitbreaker_state gauge\n"));
  assert_int_equal(1, count(m, "# HELP resil_circuitbreaker_state "));
  assert_non_null(strstr(m, "resil_circuitbreaker_state{name=\"p6_breaker\",state=\"closed\"} 1\n"));
  assert_non_null(strstr(m, "resil_circuitbreaker_state{name=\"p1_breaker\",state=\"open\"} 1\n"));
  assert_non_null(strstr(m, "resil_retry_calls_total{name=\"p1_retry\""));
  assert_non_null(strstr(m, "resil_chain_layer_calls_total{name=\"p1_chain\""));
  assert_non_null(strstr(m, "resil_http_client_attempts_total{name=\"h3_client\""));
  assert_non_null(strstr(m, "{name=\"i1_client\""));
  assert_non_null(strstr(m, "{name=\"i1_store\""));
  /* every TYPE line once */
  for (const char *p = m; (p = strstr(p, "# TYPE ")) != NULL; p++) {
    char line[160];
    size_t n = strcspn(p, "\n");
    snprintf(line, sizeof line, "%.*s\n", (int)(n < 150 ? n : 150), p);
    if (count(m, line) != 1) fail_msg("twice: %s", line);
  }

  if (system("command -v promtool >/dev/null 2>&1") == 0) {
    snprintf(cmd, sizeof cmd, "promtool check metrics < '%s' > %s/promtool.out 2>&1", f, dir);
    int prc = system(cmd);
    char po[128];
    snprintf(po, sizeof po, "%s/promtool.out", dir);
    const char *said = slurp(po);
    if (prc != 0 || said[0]) fail_msg("promtool: %s", said);
  } else if (ci()) {
    fail_msg("promtool not found and CI=true: install Debian's prometheus");
  } else {
    fprintf(stderr, "SKIPPED part: promtool not found\n");
  }

  FILE *ev = fopen(g, "r");
  assert_non_null(ev);
  char line[8192];
  int lines = 0, experiments = 0, transitions = 0, p6_transitions = 0;
  while (fgets(line, sizeof line, ev)) {
    json_error_t je;
    json_t *j = json_loads(line, 0, &je);
    if (!json_is_object(j)) fail_msg("not a JSON object: %s", line);
    assert_true(json_is_string(json_object_get(j, "time")));
    assert_true(json_is_string(json_object_get(j, "instance")));
    const char *kind = json_string_value(json_object_get(j, "kind"));
    assert_non_null(kind);
    if (strcmp(kind, "experiment") == 0) experiments++;
    if (strcmp(kind, "breaker_transition") == 0) transitions++;
    if (strcmp(kind, "breaker_transition") == 0 &&
        strcmp(json_string_value(json_object_get(j, "instance")), "p6_breaker") == 0)
      p6_transitions++;
    json_decref(j);
    lines++;
  }
  fclose(ev);
  assert_true(lines > 0);
  assert_true(experiments >= 4); /* P1, P6, H3, I1 (and the engine runs) */
  assert_true(transitions >= 3); /* P1 opens; P6 opens, probes, closes */
  /* P6: CLOSED->OPEN, OPEN->HALF_OPEN, HALF_OPEN->OPEN, ->HALF_OPEN, ->CLOSED */
  assert_true(p6_transitions >= 4);
}

/* `resil lab --only A6 --events G`: A6's two hedges (created by the
 * experiment, the sink attached after creation by lab_ops_hedge_events)
 * write their "hedge" lines: the slow GET's hedge sent and won, the keyed
 * POST's two hedges sent. */
static void lab_events_have_a6_hedge_lines(void **state) {
  (void)state;
  const char *bin = getenv("RESIL_BIN");
  if (!bin) {
    if (ci()) fail_msg("RESIL_BIN is not set");
    skip();
  }
  char g[128], cmd[512];
  snprintf(g, sizeof g, "%s/a6.jsonl", dir);
  snprintf(cmd, sizeof cmd, "'%s' lab --only A6 --events '%s' >%s/out 2>&1", bin, g, dir);
  int rc = system(cmd);
  if (!WIFEXITED(rc) || WEXITSTATUS(rc) != 0) {
    char out[128];
    snprintf(out, sizeof out, "%s/out", dir);
    fprintf(stderr, "%s\n", slurp(out));
    fail_msg("resil lab exited %d", WEXITSTATUS(rc));
  }
  FILE *ev = fopen(g, "r");
  assert_non_null(ev);
  char line[8192];
  int get_sent = 0, get_won = 0, keyed_sent = 0;
  while (fgets(line, sizeof line, ev)) {
    json_error_t je;
    json_t *j = json_loads(line, 0, &je);
    if (!json_is_object(j)) fail_msg("not a JSON object: %s", line);
    const char *kind = json_string_value(json_object_get(j, "kind"));
    const char *inst = json_string_value(json_object_get(j, "instance"));
    const char *what = json_string_value(json_object_get(j, "event"));
    if (kind && inst && what && strcmp(kind, "hedge") == 0) {
      if (strcmp(inst, "a6_hedge") == 0 && strcmp(what, "sent") == 0) get_sent++;
      if (strcmp(inst, "a6_hedge") == 0 && strcmp(what, "won") == 0) get_won++;
      if (strcmp(inst, "a6_hedge_keyed") == 0 && strcmp(what, "sent") == 0) keyed_sent++;
    }
    json_decref(j);
  }
  fclose(ev);
  assert_true(get_sent >= 1);
  assert_true(get_won >= 1);
  assert_true(keyed_sent >= 2);
}

/* `resil lab --only F4 --events G`: the instance listener the experiment
 * sets forwards to the event log's (lab_ops_client_config sets it first):
 * F4's two ejections (4 instances failing, at most 50 % out) are
 * "instance_ejected" lines of f4_client, and its breaker's opening a
 * "breaker" line. */
static void lab_events_have_f4_instance_lines(void **state) {
  (void)state;
  const char *bin = getenv("RESIL_BIN");
  if (!bin) {
    if (ci()) fail_msg("RESIL_BIN is not set");
    skip();
  }
  char g[128], cmd[512];
  snprintf(g, sizeof g, "%s/f4.jsonl", dir);
  snprintf(cmd, sizeof cmd, "'%s' lab --only F4 --path blocking --events '%s' >%s/out 2>&1",
           bin, g, dir);
  int rc = system(cmd);
  if (!WIFEXITED(rc) || WEXITSTATUS(rc) != 0) {
    char out[128];
    snprintf(out, sizeof out, "%s/out", dir);
    fprintf(stderr, "%s\n", slurp(out));
    fail_msg("resil lab exited %d", WEXITSTATUS(rc));
  }
  FILE *ev = fopen(g, "r");
  assert_non_null(ev);
  char line[8192];
  int ejected = 0;
  while (fgets(line, sizeof line, ev)) {
    json_error_t je;
    json_t *j = json_loads(line, 0, &je);
    if (!json_is_object(j)) fail_msg("not a JSON object: %s", line);
    const char *kind = json_string_value(json_object_get(j, "kind"));
    const char *inst = json_string_value(json_object_get(j, "instance"));
    if (kind && inst && strcmp(kind, "instance_ejected") == 0 &&
        strcmp(inst, "f4_client") == 0) {
      ejected++;
      assert_true(json_is_integer(json_object_get(j, "index")));
      assert_int_equal(json_integer_value(json_object_get(j, "consecutive")), 5);
    }
    json_decref(j);
  }
  fclose(ev);
  assert_int_equal(ejected, 2);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(lab_writes_metrics_and_events, setup, teardown),
      cmocka_unit_test_setup_teardown(lab_events_have_a6_hedge_lines, setup, teardown),
      cmocka_unit_test_setup_teardown(lab_events_have_f4_instance_lines, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
