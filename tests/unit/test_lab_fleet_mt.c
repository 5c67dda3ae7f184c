/* Lab experiment F5 (tools/lab/exp_fleet.c): a fleet of 4 `resil upstream`
 * processes (RESIL_BIN: the built tool) on one PostgreSQL server the
 * experiment starts itself (initdb and postgres in a temp dir), 1,000 keyed
 * payments from one client with the 4 instances, one instance SIGKILLed
 * mid-run and another restarted. It must pass with exactly 1,000 effects
 * counted in the store, and its wrong variant (a new key per attempt, no
 * status query) must fail through no_duplicates. And `resil upstream
 * --work-ms`, the payment processor's latency F5 gives its upstreams. */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "resil/http.h"
#include "test_lab_common.h"
#include "test_util.h"

#define CHILD_DIR_PREFIX "/tmp/resil-fleet"
#include "test_child_common.h"

static void f5_a_fleet_on_one_store_loses_and_repeats_no_payment(void **s) {
  (void)s;
  const lab_experiment *e = find("F5");
  lab_result r;
  lab_run_one(e, &r);
  print_message("F5: %s\n", r.summary);
  if (!r.pass) fail_msg("F5 failed: %s [%s]", r.failure, r.failed_checks);
  json_t *o = r.observed;
  assert_int_equal(obs_int(o, "instances"), 4);
  assert_int_equal(obs_int(o, "payments"), 1000);
  assert_int_equal(obs_int(o, "paid"), 1000);
  assert_int_equal(obs_int(o, "effects"), 1000);
  assert_int_equal(obs_int(o, "duplicates"), 0);
  assert_int_equal(obs_int(o, "lost"), 0);
  assert_int_equal(obs_int(o, "killed"), 1);
  assert_int_equal(obs_int(o, "restarted"), 1);
  assert_int_equal(obs_int(o, "committed_operations"), 1000);
  assert_int_equal(obs_int(o, "pending_left"), 0);
  /* The kill landed on calls in flight, and every one of them was
   * resolved through another instance's status query. */
  assert_true(obs_int(o, "unknown_calls") >= 1);
  assert_int_equal(obs_int(o, "unknown_resolved"), obs_int(o, "unknown_calls"));
  assert_int_equal(obs_int(o, "status_same_instance"), 0);
  assert_true(obs_int(o, "status_queries") >= obs_int(o, "unknown_calls"));
  lab_result_clear(&r);

  wrong_fails(e, &r);
  assert_true(obs_int(r.observed, "duplicates") > 0);
  assert_int_equal(obs_int(r.observed, "status_queries"), 0);
  lab_result_clear(&r);
}

static int64_t mono_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* POST /payments with key and {"amount":1}; the status answered, the
 * call's time in *ms. */
static int pay_once(resil_http_client *c, const char *key, int64_t *ms) {
  static const char body[] = "{\"amount\":1}";
  resil_http_args args;
  resil_http_args_init(&args);
  args.body = body;
  args.body_len = sizeof body - 1;
  args.idempotency_key = key;
  int64_t t0 = mono_ms();
  resil_outcome o = resil_http_call(c, "pay", &args, NULL, NULL, NULL);
  *ms = mono_ms() - t0;
  return o.http_status;
}

/* `resil upstream --work-ms 300`: a new payment takes at least 300 ms (the
 * work runs inside its transaction), its replay none of it; a value out
 * of 0..10000 is refused with exit status 2. */
static void upstream_work_ms_is_each_new_payments_time(void **s) {
  (void)s;
  (void)write_text; /* test_child_common.h's, not needed here */
  char store[128];
  snprintf(store, sizeof store, "sqlite:%s/u.db", dir);
  const char *argv[] = {"upstream", "--store", store, "--work-ms", "300", NULL};
  unsigned port = start_child("up", argv);
  char base[64];
  snprintf(base, sizeof base, "http://127.0.0.1:%u", port);
  static const resil_http_endpoint eps[] = {
      RESIL_HTTP_ENDPOINT(.name = "pay", .method = RESIL_HTTP_POST, .path = "/payments",
                          .content_type = "application/json",
                          .idempotency_key = RESIL_HTTP_KEY_SEND)};
  resil_http_client_config cc;
  resil_http_client_config_init(&cc);
  cc.base_url = base;
  cc.endpoints = eps;
  cc.endpoint_count = 1;
  resil_http_client *c = NULL;
  assert_int_equal(RESIL_OK, resil_http_client_new(&cc, &c, NULL));
  int64_t first = 0, replay = 0;
  assert_int_equal(201, pay_once(c, "work-1", &first));
  assert_int_equal(201, pay_once(c, "work-1", &replay));
  print_message("--work-ms 300: a new payment %lld ms, its replay %lld ms\n", (long long)first,
                (long long)replay);
  assert_true(first >= 300);
  assert_true(replay < 300);
  resil_http_client_free(c);
  kill_child();

  char cmd[512];
  snprintf(cmd, sizeof cmd, "'%s' upstream --store %s --work-ms 10001 2>/dev/null", resil_bin(),
           store);
  int rc = system(cmd);
  assert_true(WIFEXITED(rc));
  assert_int_equal(2, WEXITSTATUS(rc));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(upstream_work_ms_is_each_new_payments_time, setup, teardown),
      cmocka_unit_test(f5_a_fleet_on_one_store_loses_and_repeats_no_payment),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
