/* ABI proof (DESIGN §11): a program compiled against the 0.1 layout of the
 * public structs keeps working with the current library.
 *
 * This file is compiled against tests/abi/include_0_1/resil/{call,retry,
 * ratelimit}.h, copies of the public headers with the struct fields added
 * "Since 0.2" removed (resil_ctx.idempotency_key,
 * resil_retry_config.on_attempt and on_attempt_user,
 * resil_ratelimiter_metrics.nanos_to_wait), and linked with the current
 * shared library. Every struct the library fills sits in front of guard
 * bytes: a library that wrote past the caller's size would change them,
 * and one that read past it would take the guard bytes as fields (a guard
 * read as on_attempt would be called, and crash).
 *
 * It also checks that a config never passed through its _init (struct_size
 * 0 or garbage) is refused with "call resil_X_config_init()". */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

/* The 0.1 copies first: their include guards keep the current call.h,
 * retry.h and ratelimit.h out. */
#include "resil/call.h"
#include "resil/ratelimit.h"
#include "resil/retry.h"
/* Headers whose structs did not change, for the _init checks. */
#include "resil/bulkhead.h"
#include "resil/chain.h"
#include "resil/timelimit.h"

#define GUARD 0xA5
#define GUARD_LEN 64

static void fill_guard(unsigned char *g) { memset(g, GUARD, GUARD_LEN); }
static void assert_guard(const unsigned char *g) {
  for (size_t i = 0; i < GUARD_LEN; i++) assert_int_equal(g[i], GUARD);
}

/* The copies really are the older, shorter layout. */
static void the_copies_are_the_0_1_layout(void **state) {
  (void)state;
  assert_int_equal(sizeof(resil_ctx), offsetof(resil_ctx, user) + sizeof(void *));
  assert_int_equal(sizeof(resil_retry_config),
                   offsetof(resil_retry_config, alloc) + sizeof(void *));
  assert_int_equal(sizeof(resil_ratelimiter_metrics),
                   offsetof(resil_ratelimiter_metrics, available) + sizeof(int64_t));
}

typedef struct {
  resil_retry_config cfg;
  unsigned char guard[GUARD_LEN];
} old_retry_config;

typedef struct {
  resil_ctx ctx;
  unsigned char guard[GUARD_LEN];
} old_ctx;

static int calls;
static resil_outcome fail_twice(void *arg, const resil_ctx *ctx) {
  (void)arg;
  assert_int_equal(ctx->attempt, (uint32_t)calls + 1);
  return ++calls < 3 ? resil_outcome_make(RESIL_NOT_SENT, RESIL_REASON_CONNECT_REFUSED)
                     : resil_outcome_ok();
}

/* An old retry config and an old ctx: _init writes only the old size, the
 * library applies the defaults for what the caller lacks (no attempt
 * listener) and reads nothing past the caller's struct. */
static void old_retry_config_and_ctx_work(void **state) {
  (void)state;
  resil_manual_clock *mc = NULL;
  assert_int_equal(resil_manual_clock_new(0, 0, &mc), RESIL_OK);
  old_retry_config oc;
  fill_guard(oc.guard);
  resil_retry_config_init(&oc.cfg);
  assert_guard(oc.guard);
  assert_int_equal(oc.cfg.struct_size, sizeof oc.cfg);
  assert_int_equal(oc.cfg.max_attempts, 3);
  assert_int_equal(oc.cfg.wait_ns, RESIL_MS(500));
  oc.cfg.clock = resil_manual_clock_get(mc);
  resil_retry *r = NULL;
  resil_error err;
  assert_int_equal(resil_retry_new(&oc.cfg, &r, &err), RESIL_OK);
  assert_non_null(r);

  old_ctx c;
  fill_guard(c.guard);
  resil_ctx_init(&c.ctx);
  assert_guard(c.guard);
  assert_int_equal(c.ctx.struct_size, sizeof c.ctx);
  c.ctx.clock = resil_manual_clock_get(mc);
  resil_ctx_set_timeout_ns(&c.ctx, RESIL_S(10));
  calls = 0;
  resil_outcome o = resil_retry_run(r, &c.ctx, fail_twice, NULL);
  assert_int_equal(calls, 3);
  assert_int_equal(o.stop, RESIL_STOP_SUCCESS);
  assert_int_equal(o.attempts, 3);
  assert_int_equal(resil_manual_clock_slept_ns(mc), RESIL_MS(1000));
  assert_guard(c.guard);

  /* The split form with the old ctx too. */
  resil_retry_state *st = NULL;
  assert_int_equal(resil_retry_state_new(NULL, &st), RESIL_OK);
  assert_int_equal(resil_retry_begin(r, &c.ctx, st), RESIL_DECISION_GO);
  resil_outcome ns = resil_outcome_make(RESIL_NOT_SENT, RESIL_REASON_CONNECT_REFUSED);
  int64_t wait = 0;
  assert_int_equal(resil_retry_next(r, st, &ns, &wait), RESIL_DECISION_WAIT);
  assert_int_equal(wait, RESIL_MS(500));
  resil_retry_state_free(st);

  /* Stats are the same in both layouts: written whole, guard intact. */
  struct {
    resil_retry_stats s;
    unsigned char guard[GUARD_LEN];
  } rs;
  fill_guard(rs.guard);
  assert_int_equal(resil_retry_get_stats(r, &rs.s), RESIL_OK);
  assert_guard(rs.guard);
  assert_int_equal(rs.s.calls, 1);
  assert_int_equal(rs.s.attempts, 3);
  resil_retry_free(r);
  resil_manual_clock_free(mc);
}

/* An old, shorter metrics struct: the getter writes only its size, says so
 * in struct_size, and leaves the bytes after it alone. */
static void old_ratelimiter_metrics_get_only_the_old_size(void **state) {
  (void)state;
  resil_manual_clock *mc = NULL;
  assert_int_equal(resil_manual_clock_new(0, 0, &mc), RESIL_OK);
  resil_ratelimiter_config cfg;
  resil_ratelimiter_config_init(&cfg);
  cfg.limit_for_period = 2;
  cfg.timeout_ns = 0;
  cfg.clock = resil_manual_clock_get(mc);
  resil_ratelimiter *rl = NULL;
  assert_int_equal(resil_ratelimiter_new(&cfg, &rl, NULL), RESIL_OK);
  /* The default refresh period (1 s) applies to an old caller as well. */
  assert_int_equal(cfg.refresh_period_ns, RESIL_S(1));
  assert_int_equal(resil_ratelimiter_acquire(rl, 1, NULL, NULL), RESIL_DECISION_GO);
  struct {
    resil_ratelimiter_metrics m;
    unsigned char guard[GUARD_LEN];
  } om;
  fill_guard(om.guard);
  om.m.struct_size = sizeof om.m;
  assert_int_equal(resil_ratelimiter_get_metrics(rl, &om.m), RESIL_OK);
  assert_guard(om.guard);
  assert_int_equal(om.m.struct_size, sizeof om.m);
  assert_int_equal(om.m.permitted, 1);
  assert_int_equal(om.m.available, 1);
  /* An old ctx through the split form. */
  old_ctx c;
  fill_guard(c.guard);
  resil_ctx_init(&c.ctx);
  c.ctx.clock = resil_manual_clock_get(mc);
  resil_reason why;
  assert_int_equal(resil_ratelimiter_reserve(rl, 1, &c.ctx, NULL, &why), RESIL_DECISION_GO);
  assert_int_equal(resil_ratelimiter_reserve(rl, 1, &c.ctx, NULL, &why), RESIL_DECISION_DENY);
  assert_int_equal(why, RESIL_REASON_RATE_LIMITED);
  resil_ratelimiter_free(rl);
  resil_manual_clock_free(mc);
}

/* A config never passed through _init: struct_size 0, or garbage. */
static void uninitialised_configs_say_call_init(void **state) {
  (void)state;
  const size_t sizes[] = {0, 3, (size_t)0x5a5a5a5a5a5aULL};
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
    resil_error err;
    union {
      resil_retry_config retry;
      resil_retry_budget_config budget;
      resil_ratelimiter_config rl;
      resil_bulkhead_config bh;
      resil_threadpool_config tp;
      resil_timelimiter_config tl;
      resil_chain_config chain;
      unsigned char bytes[1024];
    } u;
    memset(&u, 0, sizeof u);
    memcpy(&u, &sizes[i], sizeof sizes[i]);
    resil_retry *r = NULL;
    assert_int_equal(resil_retry_new(&u.retry, &r, &err), RESIL_EINVAL);
    assert_null(r);
    assert_non_null(strstr(err.msg, "call resil_retry_config_init()"));
    resil_retry_budget *b = NULL;
    assert_int_equal(resil_retry_budget_new(&u.budget, &b, &err), RESIL_EINVAL);
    assert_non_null(strstr(err.msg, "call resil_retry_budget_config_init()"));
    resil_ratelimiter *rl = NULL;
    assert_int_equal(resil_ratelimiter_new(&u.rl, &rl, &err), RESIL_EINVAL);
    assert_non_null(strstr(err.msg, "call resil_ratelimiter_config_init()"));
    resil_bulkhead *bh = NULL;
    assert_int_equal(resil_bulkhead_new(&u.bh, &bh, &err), RESIL_EINVAL);
    assert_non_null(strstr(err.msg, "call resil_bulkhead_config_init()"));
    resil_threadpool *tp = NULL;
    assert_int_equal(resil_threadpool_new(&u.tp, &tp, &err), RESIL_EINVAL);
    assert_non_null(strstr(err.msg, "call resil_threadpool_config_init()"));
    resil_timelimiter *tl = NULL;
    assert_int_equal(resil_timelimiter_new(&u.tl, &tl, &err), RESIL_EINVAL);
    assert_non_null(strstr(err.msg, "call resil_timelimiter_config_init()"));
    resil_chain *ch = NULL;
    assert_int_equal(resil_chain_new(&u.chain, &ch, &err), RESIL_EINVAL);
    assert_non_null(strstr(err.msg, "call resil_chain_config_init()"));
    /* An uninitialised ctx is a misuse: the call is not made. */
    resil_ctx raw;
    memset(&raw, 0, sizeof raw);
    memcpy(&raw, &sizes[i], sizeof sizes[i]);
    resil_retry_config rc;
    resil_retry_config_init(&rc);
    assert_int_equal(resil_retry_new(&rc, &r, NULL), RESIL_OK);
    calls = 0;
    resil_outcome o = resil_retry_run(r, &raw, fail_twice, NULL);
    assert_int_equal(calls, 0);
    assert_int_equal(o.reason, RESIL_REASON_LOCAL_ERROR);
    resil_retry_free(r);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(the_copies_are_the_0_1_layout),
      cmocka_unit_test(old_retry_config_and_ctx_work),
      cmocka_unit_test(old_ratelimiter_metrics_get_only_the_old_size),
      cmocka_unit_test(uninitialised_configs_say_call_init),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
