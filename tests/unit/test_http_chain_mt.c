/* libresil-http as the innermost call of a policy chain (DESIGN §7 P13):
 * Retry(Breaker(TimeLimiter(Bulkhead(HTTP)))) with one shared deadline,
 * against the fixture upstream. The time limiter runs attempts on its own
 * threads, so this is also a concurrency test. */
#include <stdlib.h>

#include "resil/breaker.h"
#include "resil/bulkhead.h"
#include "resil/chain.h"
#include "resil/timelimit.h"
#include "test_http_common.h"

static const resil_http_endpoint eps[] = {
    {.struct_size = sizeof(resil_http_endpoint), .name = "item_slow", .path = "/items/{id}", .query = "delay_ms={ms}",
     .response_codec = RESIL_HTTP_CODEC_JSON},
};

typedef struct p13 {
  resil_fixture *f;
  resil_http_client *c;
  resil_retry *retry;
  resil_breaker *breaker;
  resil_timelimiter *tl;
  resil_bulkhead *bh;
  resil_chain *ch;
} p13;

static int setup(void **state) {
  p13 *s = calloc(1, sizeof *s);
  s->f = fx_start();
  s->c = client_on(s->f, eps, 1, NULL, NULL);
  resil_retry_config rc;
  resil_retry_config_init(&rc);
  rc.max_attempts = 3;
  rc.wait_ns = MS(100);
  rc.min_attempt_budget_ns = MS(500);
  assert_status(RESIL_OK, resil_retry_new(&rc, &s->retry, NULL));
  resil_breaker_config bc;
  resil_breaker_config_init(&bc);
  assert_status(RESIL_OK, resil_breaker_new(&bc, &s->breaker, NULL));
  resil_timelimiter_config tc;
  resil_timelimiter_config_init(&tc);
  tc.timeout_ns = MS(400);
  tc.cancel_running = 1;
  assert_status(RESIL_OK, resil_timelimiter_new(&tc, &s->tl, NULL));
  resil_bulkhead_config bhc;
  resil_bulkhead_config_init(&bhc);
  bhc.max_concurrent = 2;
  assert_status(RESIL_OK, resil_bulkhead_new(&bhc, &s->bh, NULL));
  resil_chain_config cc;
  resil_chain_config_init(&cc);
  cc.total_timeout_ns = MS(700);
  assert_status(RESIL_OK, resil_chain_new(&cc, &s->ch, NULL));
  assert_status(RESIL_OK, resil_chain_add_retry(s->ch, s->retry));
  assert_status(RESIL_OK, resil_chain_add_breaker(s->ch, s->breaker));
  assert_status(RESIL_OK, resil_chain_add_timelimiter(s->ch, s->tl));
  assert_status(RESIL_OK, resil_chain_add_bulkhead(s->ch, s->bh));
  *state = s;
  return 0;
}

static int teardown(void **state) {
  p13 *s = *state;
  resil_chain_free(s->ch);
  resil_bulkhead_free(s->bh);
  resil_timelimiter_free(s->tl);
  resil_breaker_free(s->breaker);
  resil_retry_free(s->retry);
  resil_http_client_free(s->c);
  resil_fixture_stop(s->f);
  free(s);
  return 0;
}

static resil_outcome run_item(p13 *s, const char *delay, resil_http_response **out) {
  resil_http_param ps[] = {{"id", "13"}, {"ms", delay}};
  resil_http_args args;
  resil_http_args_init(&args);
  args.params = ps;
  args.param_count = 2;
  resil_http_request *req = NULL;
  assert_status(RESIL_OK, resil_http_request_new(s->c, "item_slow", &args, &req, NULL));
  resil_ctx ctx;
  resil_ctx_init(&ctx);
  ctx.flags = resil_http_request_call_flags(req);
  resil_outcome o = resil_chain_run(s->ch, &ctx, resil_http_request_attempt, req);
  *out = resil_http_request_take_response(req);
  /* The time limiter may still hold an abandoned attempt: the request's
   * memory lives until that attempt ends. */
  resil_http_request_free(req);
  return o;
}

static void p13_one_deadline_through_retry_breaker_timelimiter_bulkhead_http(void **state) {
  p13 *s = *state;
  char desc[256];
  resil_chain_nesting(s->ch, desc, sizeof desc);
  assert_non_null(strstr(desc, "Retry(Breaker(TimeLimiter(Bulkhead("));
  int64_t t0 = mono_ms();
  resil_http_response *r = NULL;
  resil_outcome o = run_item(s, "900", &r);
  int64_t took = mono_ms() - t0;
  /* First attempt sent and timed out by the limiter, the second refused
   * before sending because 700 - 400 - 100 < 500. */
  assert_int_equal(o.kind, RESIL_UNKNOWN);
  assert_int_equal(o.stop, RESIL_STOP_DEADLINE);
  assert_int_equal(o.attempts, 1);
  assert_true(took < 650);
  assert_int_equal(resil_fixture_attempts(s->f, "items"), 1);
  resil_http_response_free(r);
  /* The limiter cancelled the transfer: the HTTP attempt ends promptly and
   * gives back its pool slot and the bulkhead permit. */
  resil_http_stats st;
  for (int i = 0; i < 100; i++) {
    resil_http_client_get_stats(s->c, &st);
    if (st.leased == 0 && resil_bulkhead_available(s->bh) == 2) break;
    sleep_ms(5);
  }
  assert_int_equal(st.leased, 0);
  assert_int_equal(resil_bulkhead_available(s->bh), 2);
  assert_int_equal(st.outcomes[RESIL_UNKNOWN], 1);

  /* The upstream recovers: a new 700 ms budget, one attempt, success. */
  o = run_item(s, "0", &r);
  assert_int_equal(o.http_status, 200);
  assert_int_equal(o.attempts, 1);
  assert_non_null(r);
  assert_int_equal(json_integer_value(json_object_get(resil_http_response_json(r), "id")), 13);
  resil_http_response_free(r);
  assert_int_equal(resil_fixture_attempts(s->f, "items"), 2);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(p13_one_deadline_through_retry_breaker_timelimiter_bulkhead_http,
                                      setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
