/* The registry under concurrency (run again under ThreadSanitizer): reader
 * threads look instances up, take leases and use the leased breakers while
 * one thread reloads between two files many times. Every lookup sees a
 * whole set (the old one or the new one), a leased instance stays usable
 * after the reload that replaced it, and an unchanged instance keeps its
 * object and state across every reload. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"

#ifdef RESIL_HAVE_CONFIG
#include <sys/wait.h>
#include <unistd.h>

#include "resil/registry.h"
#include "resil/resil.h"
#include "test_http_common.h"

/* "stable" never changes; "flip" alternates its threshold, so every reload
 * replaces it (and the chain using it). */
static const char *A = "circuitbreaker:\n"
                       "  instances:\n"
                       "    stable: {open_wait: 60s}\n"
                       "    flip: {failure_rate_threshold: 40}\n"
                       "chain:\n"
                       "  instances:\n"
                       "    flip: {layers: [{circuitbreaker: flip}]}\n"
                       "    stable: {layers: [{circuitbreaker: stable}]}\n";
static const char *B = "circuitbreaker:\n"
                       "  instances:\n"
                       "    stable: {open_wait: 60s}\n"
                       "    flip: {failure_rate_threshold: 60}\n"
                       "chain:\n"
                       "  instances:\n"
                       "    flip: {layers: [{circuitbreaker: flip}]}\n"
                       "    stable: {layers: [{circuitbreaker: stable}]}\n";

enum { READERS = 4, RELOADS = 500 };

typedef struct shared {
  resil_registry *reg;
  resil_breaker *stable;
  atomic_int stop;
  atomic_long uses;
  atomic_int bad;
} shared;

static int visit(void *user, resil_registry_kind kind, const char *name, void *h) {
  int *n = user;
  if (!name || !h) return 1;
  (void)kind;
  (*n)++;
  return 0;
}

static void *reader(void *arg) {
  shared *s = arg;
  while (!atomic_load(&s->stop)) {
    resil_registry_lease *lease = NULL;
    resil_breaker *br = resil_registry_acquire(s->reg, RESIL_REG_BREAKER, "flip", &lease);
    if (!br || !lease) atomic_store(&s->bad, 1);
    /* use it: a call on the leased instance, whatever a reload does */
    resil_breaker_permit pm;
    if (resil_breaker_try_acquire(br, &pm) == RESIL_DECISION_GO) {
      resil_outcome o = resil_outcome_make(RESIL_ANSWERED, RESIL_REASON_OK);
      (void)resil_breaker_record(br, &pm, &o, 1000);
    }
    resil_registry_lease *cl = NULL;
    resil_chain *ch = resil_registry_acquire(s->reg, RESIL_REG_CHAIN, "flip", &cl);
    if (!ch || resil_chain_layers(ch) != 1) atomic_store(&s->bad, 1);
    resil_registry_release(cl);
    resil_registry_release(lease);
    if (resil_registry_breaker(s->reg, "stable") != s->stable) atomic_store(&s->bad, 1);
    int n = 0;
    (void)resil_registry_foreach(s->reg, visit, &n);
    if (n != 4) atomic_store(&s->bad, 1);
    atomic_fetch_add(&s->uses, 1);
  }
  return NULL;
}

static void lookups_and_leases_during_reloads(void **state) {
  (void)state;
  shared s;
  memset(&s, 0, sizeof s);
  assert_int_equal(resil_registry_load_string(A, strlen(A), "a.yaml", &s.reg, NULL), RESIL_OK);
  s.stable = resil_registry_breaker(s.reg, "stable");
  assert_int_equal(resil_breaker_transition(s.stable, RESIL_BREAKER_OPEN), RESIL_OK);
  pthread_t t[READERS];
  for (int i = 0; i < READERS; i++) assert_int_equal(pthread_create(&t[i], NULL, reader, &s), 0);
  resil_breaker *prev = resil_registry_breaker(s.reg, "flip");
  int replaced = 0;
  for (int i = 0; i < RELOADS; i++) {
    const char *y = (i % 2) ? A : B;
    resil_registry_error err;
    resil_registry_error_init(&err);
    assert_int_equal(resil_registry_reload_string(s.reg, y, strlen(y), "x.yaml", &err), RESIL_OK);
    resil_breaker *now = resil_registry_breaker(s.reg, "flip");
    replaced += now != prev;
    prev = now;
    /* a reload with an error in between changes nothing */
    if (i % 10 == 0) {
      const char *broken = "circuitbreaker:\n  instances:\n    stable: {open_wait: 1}\n";
      assert_int_equal(resil_registry_reload_string(s.reg, broken, strlen(broken), "b.yaml", &err),
                       RESIL_EINVAL);
      assert_ptr_equal(resil_registry_breaker(s.reg, "flip"), now);
    }
  }
  atomic_store(&s.stop, 1);
  for (int i = 0; i < READERS; i++) assert_int_equal(pthread_join(t[i], NULL), 0);
  assert_int_equal(atomic_load(&s.bad), 0);
  assert_true(atomic_load(&s.uses) > 0);
  assert_int_equal(replaced, RELOADS);
  assert_ptr_equal(resil_registry_breaker(s.reg, "stable"), s.stable);
  assert_int_equal(resil_breaker_state(s.stable), RESIL_BREAKER_OPEN);
  assert_int_equal(resil_registry_generation(s.reg), 1 + RELOADS);
  resil_registry_free(s.reg);
}

/* `resil call --config FILE --chain NAME URL` against the fixture upstream
 * (its server threads serve the child process): the chain's retry makes the
 * attempts the file says, the breaker inside it sees each. */
static int run_tool(const char *dir, const char *args, char *out, size_t on, char *errb,
                    size_t en) {
  char cmd[2048];
  snprintf(cmd, sizeof cmd, "%s %s >%s/out 2>%s/err", getenv("RESIL_BIN"), args, dir, dir);
  int st = system(cmd);
  assert_true(WIFEXITED(st));
  char p[256];
  snprintf(p, sizeof p, "%s/out", dir);
  FILE *f = fopen(p, "r");
  assert_non_null(f);
  out[fread(out, 1, on - 1, f)] = 0;
  fclose(f);
  snprintf(p, sizeof p, "%s/err", dir);
  f = fopen(p, "r");
  assert_non_null(f);
  errb[fread(errb, 1, en - 1, f)] = 0;
  fclose(f);
  return WEXITSTATUS(st);
}

static void cli_call_runs_through_a_configured_chain(void **state) {
  (void)state;
  if (!getenv("RESIL_BIN")) skip();
  char dir[] = "/tmp/resil-registry-mt-XXXXXX";
  assert_non_null(mkdtemp(dir));
  char path[128];
  snprintf(path, sizeof path, "%s/api.yaml", dir);
  FILE *f = fopen(path, "w");
  assert_non_null(f);
  fputs("retry:\n"
        "  instances:\n"
        "    api: {max_attempts: 3, wait: 10ms}\n"
        "circuitbreaker:\n"
        "  instances:\n"
        "    api: {}\n"
        "chain:\n"
        "  instances:\n"
        "    api:\n"
        "      total_timeout: 10s\n"
        "      layers: [{retry: api}, {circuitbreaker: api}]\n",
        f);
  assert_int_equal(fclose(f), 0);
  resil_fixture *fx = fx_start();
  char args[1024], out[8192], err[8192];
  snprintf(args, sizeof args, "call -v --config %s --chain api %s/status/503", path,
           resil_fixture_url(fx));
  assert_int_equal(run_tool(dir, args, out, sizeof out, err, sizeof err), 6);
  assert_int_equal(resil_fixture_attempts(fx, "status"), 3);
  assert_string_equal(out, "{\"status\":503}");
  assert_non_null(strstr(err, "chain api: Retry(Breaker(call))\n"));
  assert_non_null(strstr(err, "layer 1: calls 1, attempts out 3, rejections 0\n"));
  assert_non_null(strstr(err, "layer 2: calls 3, attempts out 3, rejections 0\n"));
  snprintf(args, sizeof args, "call --config %s --chain api %s/status/200", path,
           resil_fixture_url(fx));
  assert_int_equal(run_tool(dir, args, out, sizeof out, err, sizeof err), 0);
  assert_int_equal(resil_fixture_attempts(fx, "status"), 4);
  /* usage errors: no such chain, --retry with --chain, --chain alone */
  snprintf(args, sizeof args, "call --config %s --chain nope %s/status/200", path,
           resil_fixture_url(fx));
  assert_int_equal(run_tool(dir, args, out, sizeof out, err, sizeof err), 2);
  assert_non_null(strstr(err, "no chain 'nope'"));
  snprintf(args, sizeof args, "call --config %s --chain api --retry 2 %s/status/200", path,
           resil_fixture_url(fx));
  assert_int_equal(run_tool(dir, args, out, sizeof out, err, sizeof err), 2);
  snprintf(args, sizeof args, "call --chain api %s/status/200", resil_fixture_url(fx));
  assert_int_equal(run_tool(dir, args, out, sizeof out, err, sizeof err), 2);
  assert_int_equal(resil_fixture_attempts(fx, "status"), 4);
  resil_fixture_stop(fx);
  snprintf(args, sizeof args, "rm -rf '%s'", dir);
  assert_int_equal(system(args), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(lookups_and_leases_during_reloads),
      cmocka_unit_test(cli_call_runs_through_a_configured_chain),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
#else
int main(void) {
  puts("libresil-config not built (no libyaml): skipped");
  return 77;
}
#endif
