/* `resil relay` (tools/resil/cmd_relay.c) as a child process of RESIL_BIN
 * between this test's client and an in-process fixture: the budget the
 * client sends comes in, the hop works, and what is left goes on to the
 * fixture (its echo route shows it); a budget below the floor is answered
 * 504 and nothing reaches the fixture. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHILD_DIR_PREFIX "/tmp/resil-relay"
#include "test_child_common.h"
#include "test_http_common.h"

static void relay_forwards_what_is_left(void **state) {
  (void)state;
  resil_bin();
  resil_fixture *f = fx_start();
  char to[160];
  snprintf(to, sizeof to, "%s/echo", resil_fixture_url(f));
  unsigned port = start_child("relay", (const char *const[]){"relay", "--to", to, "--work", "40",
                                                             "--floor", "10", "-v", NULL});
  char base[64];
  snprintf(base, sizeof base, "http://127.0.0.1:%u", port);
  static const char *const rt[] = {"Request-Timeout: {rt}", NULL};
  static const resil_http_endpoint eps[] = {
      RESIL_HTTP_ENDPOINT(.name = "x", .path = "/x", .response_codec = RESIL_HTTP_CODEC_JSON),
      RESIL_HTTP_ENDPOINT(.name = "raw", .path = "/x", .headers = rt)};
  resil_http_client_config cfg;
  resil_http_client_config_init(&cfg);
  cfg.base_url = base;
  cfg.endpoints = eps;
  cfg.endpoint_count = 2;
  resil_http_client *c = NULL;
  resil_error err;
  assert_status(RESIL_OK, resil_http_client_new(&cfg, &c, &err));
  resil_ctx ctx;
  resil_ctx_init(&ctx);
  resil_ctx_set_timeout_ns(&ctx, RESIL_MS(300));
  resil_http_response *resp = NULL;
  resil_outcome o = resil_http_call(c, "x", NULL, NULL, &ctx, &resp);
  assert_true(resil_outcome_is_success(&o));
  /* The fixture got what the relay had left after its 40 ms. */
  json_t *h = json_object_get(resil_http_response_json(resp), "headers");
  json_t *v = json_object_get(h, "request-timeout");
  if (!json_is_string(v)) fail_msg("the fixture saw no request-timeout");
  const char *s = json_string_value(v);
  size_t n = strlen(s);
  assert_true(n >= 2 && s[n - 1] == 'u');
  long us = atol(s);
  print_message("client 300 ms -> relay (40 ms of work) -> fixture: %s\n", s);
  assert_true(us > 0 && us <= 260000);
  resil_http_response_free(resp);
  long before = resil_fixture_attempts(f, "echo");
  /* Below the relay's 10 ms floor: 504, nothing forwarded. */
  resil_http_param p[] = {{"rt", "8m"}};
  resil_http_args args;
  resil_http_args_init(&args);
  args.params = p;
  args.param_count = 1;
  o = resil_http_call(c, "raw", &args, NULL, NULL, &resp);
  assert_int_equal(o.kind, RESIL_ANSWERED);
  assert_int_equal(resil_http_response_status(resp), 504);
  resil_http_response_free(resp);
  assert_int_equal(resil_fixture_attempts(f, "echo"), before);
  /* -v: one line per request. */
  char errpath[128];
  snprintf(errpath, sizeof errpath, "%s/relay.err", dir);
  wait_lines(errpath, "request ", 2);
  assert_int_equal(count_lines(errpath, "refused, answered 504", NULL, 0), 1);
  resil_http_client_free(c);
  kill_child();
  resil_fixture_stop(f);
}

static void relay_refuses_bad_arguments(void **state) {
  (void)state;
  const char *bin = resil_bin();
  char cmd[512];
  snprintf(cmd, sizeof cmd, "'%s' relay --to ftp://x 2>/dev/null", bin);
  assert_int_equal(WEXITSTATUS(system(cmd)), 2);
  snprintf(cmd, sizeof cmd, "'%s' relay --work -1 2>/dev/null", bin);
  assert_int_equal(WEXITSTATUS(system(cmd)), 2);
  snprintf(cmd, sizeof cmd, "'%s' relay --floor 50 --max 10 2>/dev/null", bin);
  assert_int_equal(WEXITSTATUS(system(cmd)), 2);
  snprintf(cmd, sizeof cmd, "'%s' relay --help >/dev/null", bin);
  assert_int_equal(WEXITSTATUS(system(cmd)), 0);
}

int main(void) {
  (void)write_text; /* test_child_common.h's, not needed here */
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(relay_forwards_what_is_left, setup, teardown),
      cmocka_unit_test_setup_teardown(relay_refuses_bad_arguments, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
