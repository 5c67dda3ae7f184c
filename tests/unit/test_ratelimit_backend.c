/* A rate limiter on a backend (resil_ratelimiter_new_backed, ratelimit.h):
 * the handle and every form of the API (reserve, acquire, run, a chain's
 * layer, metrics) work on a limiter whose permits another store decides,
 * with the limiter's own rules for the wait's bound, a refusal's reason,
 * cancellation and counters. The backend here is a counter in the test
 * (what libresil-redis plugs in is tested by test_redis_ratelimit*). */
#include <stddef.h>
#include <string.h>

#include "test_util.h"

/* A backend with `left` permits; beyond them each permit is `wait` ns
 * away; `unavailable` refuses everything as a dead store would. */
typedef struct fake {
  int64_t left;
  int64_t wait;
  int unavailable;
  int64_t last_max_wait;
  int64_t given_back;
  int reserves;
  int freed;
} fake;

static resil_decision fake_reserve(void *self, int permits, const resil_ctx *ctx,
                                   int64_t max_wait_ns, int64_t *wait_ns,
                                   resil_reason *why) {
  (void)ctx;
  fake *f = self;
  f->reserves++;
  f->last_max_wait = max_wait_ns;
  if (f->unavailable) {
    *wait_ns = 0;
    *why = RESIL_REASON_RATE_LIMITER_UNAVAILABLE;
    return RESIL_DECISION_DENY;
  }
  if (f->left >= permits) {
    f->left -= permits;
    *wait_ns = 0;
    *why = RESIL_REASON_OK;
    return RESIL_DECISION_GO;
  }
  if (f->wait > max_wait_ns) {
    *wait_ns = f->wait;
    *why = RESIL_REASON_RATE_LIMITED;
    return RESIL_DECISION_DENY;
  }
  *wait_ns = f->wait;
  *why = RESIL_REASON_OK;
  return RESIL_DECISION_WAIT;
}

static void fake_give_back(void *self, int permits) { ((fake *)self)->given_back += permits; }

static int fake_peek(void *self, int64_t *available, int64_t *wait) {
  fake *f = self;
  *available = f->left;
  *wait = f->left > 0 ? 0 : f->wait;
  return 0;
}

static void fake_free(void *self) { ((fake *)self)->freed++; }

static resil_ratelimiter_backend backend_of(fake *f) {
  resil_ratelimiter_backend be;
  resil_ratelimiter_backend_init(&be);
  be.self = f;
  be.reserve = fake_reserve;
  be.give_back = fake_give_back;
  be.peek = fake_peek;
  be.free = fake_free;
  return be;
}

typedef struct fixture {
  resil_manual_clock *mc;
  fake f;
  resil_ratelimiter *rl;
} fixture;

static void make(fixture *x, int64_t timeout_ns) {
  memset(x, 0, sizeof *x);
  assert_status(RESIL_OK, resil_manual_clock_new(0, 0, &x->mc));
  resil_ratelimiter_config cfg;
  resil_ratelimiter_config_init(&cfg);
  cfg.name = "global";
  cfg.timeout_ns = timeout_ns;
  cfg.clock = resil_manual_clock_get(x->mc);
  resil_ratelimiter_backend be = backend_of(&x->f);
  assert_status(RESIL_OK, resil_ratelimiter_new_backed(&cfg, &be, &x->rl, NULL));
}

static void destroy(fixture *x) {
  resil_ratelimiter_free(x->rl);
  assert_int_equal(x->f.freed, 1);
  resil_manual_clock_free(x->mc);
}

static void backend_decides_the_limiter_keeps_its_rules(void **state) {
  (void)state;
  fixture x;
  make(&x, MS(100));
  x.f.left = 2;
  x.f.wait = MS(30);
  int64_t w = -1;
  resil_reason why = RESIL_REASON_COUNT_;
  assert_int_equal(resil_ratelimiter_reserve(x.rl, 2, NULL, &w, &why), RESIL_DECISION_GO);
  assert_int_equal(w, 0);
  assert_int_equal(why, RESIL_REASON_OK);
  assert_int_equal(x.f.last_max_wait, MS(100)); /* the timeout, no deadline */
  assert_int_equal(resil_ratelimiter_reserve(x.rl, 1, NULL, &w, &why), RESIL_DECISION_WAIT);
  assert_int_equal(w, MS(30));
  /* A deadline shorter than the wait: the backend refuses, the limiter
   * says why (DEADLINE: the permit would come within the timeout). */
  resil_ctx ctx;
  resil_ctx_init(&ctx);
  ctx.clock = resil_manual_clock_get(x.mc);
  resil_ctx_set_timeout_ns(&ctx, MS(10));
  assert_int_equal(resil_ratelimiter_reserve(x.rl, 1, &ctx, &w, &why), RESIL_DECISION_DENY);
  assert_int_equal(x.f.last_max_wait, MS(10));
  assert_int_equal(why, RESIL_REASON_DEADLINE);
  assert_int_equal(w, MS(30));
  /* Beyond the timeout: RATE_LIMITED. */
  x.f.wait = MS(200);
  assert_int_equal(resil_ratelimiter_reserve(x.rl, 1, NULL, &w, &why), RESIL_DECISION_DENY);
  assert_int_equal(why, RESIL_REASON_RATE_LIMITED);
  /* A misuse never reaches the backend. */
  int before = x.f.reserves;
  assert_int_equal(resil_ratelimiter_reserve(x.rl, 0, NULL, &w, &why), RESIL_DECISION_DENY);
  assert_int_equal(why, RESIL_REASON_LOCAL_ERROR);
  assert_int_equal(x.f.reserves, before);
  resil_ratelimiter_metrics m;
  assert_status(RESIL_OK, resil_ratelimiter_get_metrics(x.rl, &m));
  assert_int_equal(m.permitted, 1);
  assert_int_equal(m.reserved, 1);
  assert_int_equal(m.refused, 2);
  assert_int_equal(m.available, 0); /* the backend's peek */
  assert_int_equal(m.nanos_to_wait, MS(200));
  assert_string_equal(resil_ratelimiter_name(x.rl), "global");
  assert_ptr_equal(resil_ratelimiter_backend_of(x.rl)->self, &x.f);
  destroy(&x);
}

static void acquire_waits_on_the_clock_and_cancel_gives_back(void **state) {
  (void)state;
  fixture x;
  make(&x, MS(100));
  x.f.wait = MS(40);
  resil_reason why;
  assert_int_equal(resil_ratelimiter_acquire(x.rl, 1, NULL, &why), RESIL_DECISION_GO);
  assert_int_equal(resil_clock_now_ns(resil_manual_clock_get(x.mc)), MS(40));
  resil_cancel *c;
  assert_status(RESIL_OK, resil_cancel_new(&c));
  resil_cancel_signal(c);
  resil_ctx ctx;
  resil_ctx_init(&ctx);
  ctx.cancel = c;
  assert_int_equal(resil_ratelimiter_acquire(x.rl, 3, &ctx, &why), RESIL_DECISION_DENY);
  assert_int_equal(why, RESIL_REASON_CANCELLED);
  assert_int_equal(x.f.given_back, 3);
  resil_ratelimiter_metrics m;
  assert_status(RESIL_OK, resil_ratelimiter_get_metrics(x.rl, &m));
  assert_int_equal(m.reserved, 2);
  assert_int_equal(m.cancelled, 1);
  resil_cancel_free(c);
  destroy(&x);
}

static resil_outcome ok_call(void *arg, const resil_ctx *ctx) {
  (void)ctx;
  ++*(int *)arg;
  return resil_outcome_make(RESIL_ANSWERED, RESIL_REASON_OK);
}

/* The run form and a chain (breaker over the limiter) on the same handle;
 * an unavailable backend's refusal is REJECTED(RATE_LIMITER_UNAVAILABLE),
 * which no breaker counts. */
static void run_and_chain_use_the_backend(void **state) {
  (void)state;
  fixture x;
  make(&x, 0);
  x.f.left = 1;
  x.f.wait = MS(1);
  int calls = 0;
  resil_outcome o = resil_ratelimiter_run(x.rl, NULL, ok_call, &calls);
  assert_int_equal(o.kind, RESIL_ANSWERED);
  o = resil_ratelimiter_run(x.rl, NULL, ok_call, &calls);
  assert_int_equal(o.kind, RESIL_REJECTED);
  assert_int_equal(o.reason, RESIL_REASON_RATE_LIMITED);
  assert_int_equal(calls, 1);

  resil_breaker_config bc;
  resil_breaker_config_init(&bc);
  bc.clock = resil_manual_clock_get(x.mc);
  resil_breaker *br;
  assert_status(RESIL_OK, resil_breaker_new(&bc, &br, NULL));
  resil_chain_config cc;
  resil_chain_config_init(&cc);
  cc.clock = resil_manual_clock_get(x.mc);
  resil_chain *ch;
  assert_status(RESIL_OK, resil_chain_new(&cc, &ch, NULL));
  assert_status(RESIL_OK, resil_chain_add_breaker(ch, br));
  assert_status(RESIL_OK, resil_chain_add_ratelimiter(ch, x.rl));
  x.f.left = 5;
  for (int i = 0; i < 5; i++) {
    o = resil_chain_run(ch, NULL, ok_call, &calls);
    assert_int_equal(o.kind, RESIL_ANSWERED);
  }
  o = resil_chain_run(ch, NULL, ok_call, &calls);
  assert_int_equal(o.reason, RESIL_REASON_RATE_LIMITED);
  x.f.unavailable = 1;
  o = resil_chain_run(ch, NULL, ok_call, &calls);
  assert_int_equal(o.kind, RESIL_REJECTED);
  assert_int_equal(o.reason, RESIL_REASON_RATE_LIMITER_UNAVAILABLE);
  assert_string_equal(resil_reason_text(o.reason), "rate limiter unavailable");
  assert_int_equal(calls, 6);
  resil_breaker_metrics bm;
  assert_status(RESIL_OK, resil_breaker_get_metrics(br, &bm));
  assert_int_equal(bm.failed_calls, 0);
  resil_chain_free(ch);
  resil_breaker_free(br);
  destroy(&x);
}

static void new_backed_checks_and_owns_the_backend(void **state) {
  (void)state;
  resil_ratelimiter_config cfg;
  resil_ratelimiter_config_init(&cfg);
  fake f;
  memset(&f, 0, sizeof f);
  resil_ratelimiter_backend be = backend_of(&f);
  resil_ratelimiter *rl = NULL;
  resil_error err;
  assert_status(RESIL_EINVAL, resil_ratelimiter_new_backed(&cfg, NULL, &rl, &err));
  assert_string_equal(err.field, "backend");
  be.reserve = NULL;
  assert_status(RESIL_EINVAL, resil_ratelimiter_new_backed(&cfg, &be, &rl, &err));
  assert_string_equal(err.field, "backend.reserve");
  assert_int_equal(f.freed, 0); /* not accepted: not freed */
  be.reserve = fake_reserve;
  cfg.limit_for_period = 0;
  assert_status(RESIL_EINVAL, resil_ratelimiter_new_backed(&cfg, &be, &rl, &err));
  assert_string_equal(err.field, "limit_for_period");
  assert_int_equal(f.freed, 1); /* accepted, then the config failed */
  cfg.limit_for_period = 10;
  resil_shared_config sc;
  resil_shared_config_init(&sc);
  cfg.shared = (resil_shared *)&sc; /* never dereferenced: refused first */
  assert_status(RESIL_EINVAL, resil_ratelimiter_new_backed(&cfg, &be, &rl, &err));
  assert_string_equal(err.field, "shared");
  assert_int_equal(f.freed, 2);
  assert_null(rl);
  /* A local limiter has no backend. */
  cfg.shared = NULL;
  assert_status(RESIL_OK, resil_ratelimiter_new(&cfg, &rl, NULL));
  assert_null(resil_ratelimiter_backend_of(rl));
  resil_ratelimiter_free(rl);
}

/* ---- asynchronous decisions (reserve_async, Since 0.2) ---------------------- */

/* The fake decides later: reserve_async keeps q (pending) unless `now` is
 * set, and the test gives the answer as the backend's loop would. */
typedef struct afake {
  resil_ratelimiter_request *q;
  int now;
  int withdrawn;
  const resil_ratelimiter_loop *loop;
} afake;

/* The backend's self: the fake (first, so that backend_of serves) and the
 * asynchronous part. */
typedef struct both {
  fake f;
  afake a;
} both;

static int afake_reserve_async(void *self, const resil_ratelimiter_loop *loop,
                               resil_ratelimiter_request *q, resil_decision *d, int64_t *wait_ns,
                               resil_reason *why) {
  afake *af = &((both *)self)->a;
  af->loop = loop;
  if (af->now) {
    *d = RESIL_DECISION_GO;
    *wait_ns = 0;
    *why = RESIL_REASON_OK;
    return 0;
  }
  af->q = q;
  return 1;
}

static void afake_withdraw(void *self, resil_ratelimiter_request *q) {
  afake *af = &((both *)self)->a;
  if (af->q == q) af->q = NULL;
  af->withdrawn++;
}

typedef struct answer {
  int n;
  resil_decision d;
  int64_t wait;
  resil_reason why;
} answer;

static void on_answer(resil_ratelimiter_async *q, resil_decision d, int64_t wait,
                      resil_reason why) {
  answer *an = q->arg;
  an->n++;
  an->d = d;
  an->wait = wait;
  an->why = why;
}

/* The limiter keeps its part on the asynchronous path: the bound it gives
 * the backend, the reason of a refusal (RATE_LIMITED within timeout_ns but
 * beyond the deadline becomes DEADLINE), the counters; an answer at once
 * is returned at once; a withdrawn decision is not answered. An old-size
 * backend (before reserve_async) is accepted and decides on reserve(). */
static void async_decisions_keep_the_limiters_rules(void **state) {
  (void)state;
  both b;
  memset(&b, 0, sizeof b);
  resil_ratelimiter_config cfg;
  resil_ratelimiter_config_init(&cfg);
  cfg.name = "async";
  cfg.timeout_ns = MS(100);
  resil_ratelimiter_backend be = backend_of(&b.f);
  be.reserve_async = afake_reserve_async;
  resil_ratelimiter *rl = NULL;
  resil_error err;
  assert_status(RESIL_EINVAL, resil_ratelimiter_new_backed(&cfg, &be, &rl, &err));
  assert_string_equal(err.field, "backend.withdraw");
  be.withdraw = afake_withdraw;
  assert_status(RESIL_OK, resil_ratelimiter_new_backed(&cfg, &be, &rl, &err));
  assert_int_equal(resil_ratelimiter_is_async(rl), 1);
  resil_ratelimiter_loop loop;
  memset(&loop, 0, sizeof loop);
  loop.struct_size = sizeof loop;

  answer an = {0};
  resil_ratelimiter_async q;
  resil_ratelimiter_async_init(&q);
  q.done = on_answer;
  q.arg = &an;
  resil_ctx ctx;
  resil_ctx_init(&ctx);
  resil_ctx_set_timeout_ns(&ctx, MS(10));
  resil_decision d = RESIL_DECISION_GO;
  int64_t w = -1;
  resil_reason why = RESIL_REASON_NONE;
  assert_int_equal(resil_ratelimiter_reserve_async(rl, &loop, &q, 1, &ctx, &d, &w, &why), 1);
  assert_ptr_equal(b.a.loop, &loop);
  assert_non_null(b.a.q);
  assert_true(b.a.q->max_wait_ns <= MS(10) && b.a.q->max_wait_ns > 0);
  assert_int_equal(an.n, 0);
  /* Refused for 50 ms: within timeout_ns, beyond the deadline. */
  b.a.q->answer(b.a.q, RESIL_DECISION_DENY, MS(50), RESIL_REASON_RATE_LIMITED);
  assert_int_equal(an.n, 1);
  assert_int_equal(an.d, RESIL_DECISION_DENY);
  assert_int_equal(an.why, RESIL_REASON_DEADLINE);
  assert_int_equal(an.wait, MS(50));

  /* A WAIT of 0 is a GO; counted. */
  assert_int_equal(resil_ratelimiter_reserve_async(rl, &loop, &q, 1, NULL, &d, &w, &why), 1);
  b.a.q->answer(b.a.q, RESIL_DECISION_WAIT, 0, RESIL_REASON_OK);
  assert_int_equal(an.n, 2);
  assert_int_equal(an.d, RESIL_DECISION_GO);

  /* Withdrawn: never answered. */
  assert_int_equal(resil_ratelimiter_reserve_async(rl, &loop, &q, 1, NULL, &d, &w, &why), 1);
  resil_ratelimiter_withdraw_async(&q);
  assert_int_equal(b.a.withdrawn, 1);
  assert_null(b.a.q);
  resil_ratelimiter_withdraw_async(&q); /* not pending: a no-op */
  assert_int_equal(b.a.withdrawn, 1);

  /* Answered at once. */
  b.a.now = 1;
  assert_int_equal(resil_ratelimiter_reserve_async(rl, &loop, &q, 1, NULL, &d, &w, &why), 0);
  assert_int_equal(d, RESIL_DECISION_GO);
  assert_int_equal(an.n, 2);
  resil_ratelimiter_metrics m;
  assert_status(RESIL_OK, resil_ratelimiter_get_metrics(rl, &m));
  assert_int_equal(m.permitted, 2);
  assert_int_equal(m.refused, 1);
  resil_ratelimiter_free(rl);

  /* A backend struct of the size before reserve_async. */
  fake f;
  memset(&f, 0, sizeof f);
  f.left = 1;
  resil_ratelimiter_backend old = backend_of(&f);
  old.struct_size = offsetof(resil_ratelimiter_backend, reserve_async);
  assert_status(RESIL_OK, resil_ratelimiter_new_backed(&cfg, &old, &rl, &err));
  assert_int_equal(resil_ratelimiter_is_async(rl), 0);
  assert_int_equal(resil_ratelimiter_reserve_async(rl, &loop, &q, 1, NULL, &d, &w, &why), 0);
  assert_int_equal(d, RESIL_DECISION_GO);
  assert_int_equal(f.reserves, 1);
  resil_ratelimiter_free(rl);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(backend_decides_the_limiter_keeps_its_rules),
      cmocka_unit_test(acquire_waits_on_the_clock_and_cancel_gives_back),
      cmocka_unit_test(run_and_chain_use_the_backend),
      cmocka_unit_test(new_backed_checks_and_owns_the_backend),
      cmocka_unit_test(async_decisions_keep_the_limiters_rules),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
