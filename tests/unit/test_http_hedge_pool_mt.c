/* A hedge of the blocking HTTP path (resil_hedge_run_on with
 * resil_http_request_attempt, on a thread pool) whose attempt waits for a
 * connection of the client's pool: once the primary, which held the only
 * connection, has its answer, the waiting hedge is never sent (the real
 * fixture on 127.0.0.1 counts what reaches it). */
#include <stdatomic.h>

#include "resil/bulkhead.h"
#include "resil/hedge.h"
#include "test_http_common.h"

static const resil_http_endpoint eps[] = {
    {.struct_size = sizeof(resil_http_endpoint), .name = "slow", .path = "/slow",
     .query = "ms={ms}"},
};

static void one_connection(resil_http_client_config *cfg, void *u) {
  (void)u;
  cfg->max_connections = 1;
  cfg->max_connections_per_host = 1;
  cfg->lease_timeout_ns = RESIL_S(10);
}

static void waiting_hedge_is_not_sent_once_the_primary_answered(void **state) {
  fx_state *s = *state;
  resil_http_client *c = client_on(s->f, eps, 1, one_connection, NULL);
  resil_threadpool_config pc;
  resil_threadpool_config_init(&pc);
  pc.threads = 2;
  resil_threadpool *tp = NULL;
  assert_int_equal(resil_threadpool_new(&pc, &tp, NULL), RESIL_OK);
  resil_hedge_config hc;
  resil_hedge_config_init(&hc);
  hc.delay_ns = RESIL_MS(10); /* the hedge starts while the primary holds the connection */
  hc.max_hedges = 1;
  resil_hedge *h = NULL;
  assert_int_equal(resil_hedge_new(&hc, &h, NULL), RESIL_OK);
  enum { N = 40 };
  int won = 0, extra = 0;
  for (int i = 0; i < N; i++) {
    long before = resil_fixture_attempts(s->f, "slow");
    resil_http_param p = {"ms", "60"};
    resil_http_args args;
    resil_http_args_init(&args);
    args.params = &p;
    args.param_count = 1;
    resil_http_request *req = NULL;
    assert_int_equal(resil_http_request_new(c, "slow", &args, &req, NULL), RESIL_OK);
    resil_ctx ctx;
    resil_ctx_init(&ctx);
    ctx.flags = resil_http_request_call_flags(req);
    resil_outcome o = resil_hedge_run_on(h, &ctx, tp, resil_http_request_attempt, req);
    resil_http_response_free(resil_http_request_take_response(req));
    resil_http_request_free(req);
    if (o.kind == RESIL_ANSWERED && o.http_status == 200) won++;
    extra += (int)(resil_fixture_attempts(s->f, "slow") - before - 1);
  }
  resil_hedge_metrics m;
  assert_int_equal(resil_hedge_get_metrics(h, &m), RESIL_OK);
  print_message("%d calls: %d answered 200, %d hedges reached the upstream (hedges let go: %llu)\n",
                N, won, extra, (unsigned long long)m.hedges_sent);
  assert_int_equal(won, N);
  /* Every hedge was let go while the primary held the one connection. */
  assert_true(m.hedges_sent >= N / 2);
  assert_int_equal(extra, 0);
  resil_hedge_free(h);
  resil_threadpool_free(tp);
  resil_http_client_free(c);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(waiting_hedge_is_not_sent_once_the_primary_answered,
                                      fx_setup, fx_teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
