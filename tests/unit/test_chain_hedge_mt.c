/* A hedge layer with an executor in a blocking chain: resil_chain_run
 * hedges on the pool, the layers inside see every attempt from the
 * workers, the loser is cancelled and waited for, and the counts keep
 * hedges apart (run under ThreadSanitizer: label concurrency). */
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#include "resil/chain.h"
#include "test_util.h"

/* The first attempt hangs until its token fires (up to 10 s); later ones
 * answer 201 at once. */
typedef struct slow_first {
  _Atomic int calls;
  _Atomic int primary_cancelled;
} slow_first;

static resil_outcome slow_then_fast(void *arg, const resil_ctx *ctx) {
  slow_first *s = arg;
  if (atomic_fetch_add(&s->calls, 1) == 0) {
    if (resil_cancel_wait_ns(ctx->cancel, MS(10000))) {
      atomic_store(&s->primary_cancelled, 1);
      return resil_outcome_make(RESIL_NOT_SENT, RESIL_REASON_CANCELLED);
    }
    return resil_outcome_http(200);
  }
  return resil_outcome_http(201);
}

static resil_outcome pass_run(void *policy, const resil_ctx *ctx, resil_call_fn fn,
                              void *arg) {
  (void)policy;
  return fn(arg, ctx);
}

static void chain_hedges_on_the_executor_and_counts_the_hedge(void **state) {
  (void)state;
  resil_threadpool_config pc;
  resil_threadpool_config_init(&pc);
  pc.threads = 3;
  resil_threadpool *tp = NULL;
  assert_status(RESIL_OK, resil_threadpool_new(&pc, &tp, NULL));
  resil_hedge_config hc;
  resil_hedge_config_init(&hc);
  hc.name = "h";
  hc.delay_ns = MS(200); /* the primary's pool task begins first (test_hedge_mt) */
  hc.executor = tp;
  resil_hedge *h = NULL;
  assert_status(RESIL_OK, resil_hedge_new(&hc, &h, NULL));
  assert_true(resil_hedge_has_executor(h));
  resil_chain_config cc;
  resil_chain_config_init(&cc);
  resil_chain *ch = NULL;
  assert_status(RESIL_OK, resil_chain_new(&cc, &ch, NULL));
  assert_status(RESIL_OK, resil_chain_add_hedge(ch, h));
  int dummy = 0;
  resil_layer inner = {.struct_size = sizeof inner, .kind = RESIL_LAYER_CUSTOM,
                       .label = "Inner", .name = "inner", .policy = &dummy, .run = pass_run};
  assert_status(RESIL_OK, resil_chain_add_layer(ch, &inner));
  char buf[2048];
  resil_chain_describe(ch, buf, sizeof buf);
  if (!strstr(buf, "note: hedge \"h\": resil_chain_run hedges on its thread pool"))
    fail_msg("describe:\n%s", buf);

  slow_first s;
  memset(&s, 0, sizeof s);
  resil_ctx ctx;
  resil_ctx_init(&ctx);
  ctx.flags = RESIL_CALL_IDEMPOTENT;
  resil_outcome o = resil_chain_run(ch, &ctx, slow_then_fast, &s);
  assert_int_equal(o.http_status, 201);
  assert_int_equal(atomic_load(&s.calls), 2);
  assert_int_equal(atomic_load(&s.primary_cancelled), 1); /* and it had returned */
  resil_layer_stats hs, is, cs;
  assert_status(RESIL_OK, resil_chain_layer_stats(ch, 0, &hs));
  assert_status(RESIL_OK, resil_chain_layer_stats(ch, 1, &is));
  assert_status(RESIL_OK, resil_chain_call_stats(ch, &cs));
  assert_int_equal(hs.calls_in, 1);
  assert_int_equal(hs.attempts_out, 2);
  assert_int_equal(hs.hedges, 1);
  assert_int_equal(hs.unhedged, 0);
  assert_int_equal(hs.retries, 0);
  assert_int_equal(is.calls_in, 2);
  assert_int_equal(cs.calls_in, 2);
  resil_hedge_metrics m;
  assert_status(RESIL_OK, resil_hedge_get_metrics(h, &m));
  assert_int_equal(m.hedges_won, 1);
  assert_int_equal(m.cancelled_losers, 1);
  assert_int_equal(m.passed_blocking, 0);

  /* An unkeyed write: one attempt, on the calling thread, counted. */
  resil_cancel *pre;
  assert_status(RESIL_OK, resil_cancel_new(&pre));
  resil_cancel_signal(pre);
  resil_ctx post;
  resil_ctx_init(&post);
  post.cancel = pre;
  memset(&s, 0, sizeof s);
  o = resil_chain_run(ch, &post, slow_then_fast, &s);
  assert_int_equal(o.reason, RESIL_REASON_CANCELLED);
  assert_int_equal(atomic_load(&s.calls), 1);
  assert_status(RESIL_OK, resil_chain_layer_stats(ch, 0, &hs));
  assert_int_equal(hs.unhedged, 1);
  assert_int_equal(hs.hedges, 1);
  assert_status(RESIL_OK, resil_hedge_get_metrics(h, &m));
  assert_int_equal(m.passed_unsafe, 1);
  resil_cancel_free(pre);
  resil_chain_free(ch);
  resil_hedge_free(h);
  resil_threadpool_free(tp);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(chain_hedges_on_the_executor_and_counts_the_hedge),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
