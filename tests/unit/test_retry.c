/* Retry policy: attempts, intervals, Retry-After, safety rules, deadline,
 * budget, folding of the final outcome, split form, stats, validation. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "retry/retry_int.h"
#include "test_util.h"

/* ---- helpers ------------------------------------------------------------ */

#define MAX_CALLS 64

/* A scripted call: returns seq[i] on its i-th call (the last one again once
 * the script runs out), records what each attempt saw, and may spend time on
 * the manual clock. */
typedef struct script {
  resil_outcome seq[16];
  int n;
  int calls;
  uint32_t attempt_seen[MAX_CALLS];
  int64_t at_ns[MAX_CALLS];
  uint32_t flags_seen;
  void *user_seen;
  int64_t deadline_seen;
  resil_manual_clock *mc;
  int64_t spend_ns; /* manual time each attempt takes */
} script;

static resil_outcome script_fn(void *arg, const resil_ctx *ctx) {
  script *s = arg;
  int i = s->calls++;
  if (i < MAX_CALLS) {
    s->attempt_seen[i] = ctx->attempt;
    s->at_ns[i] = s->mc ? resil_manual_clock_now_ns(s->mc) : 0;
  }
  s->flags_seen = ctx->flags;
  s->user_seen = ctx->user;
  s->deadline_seen = ctx->deadline_ns;
  if (s->mc && s->spend_ns) resil_manual_clock_advance_ns(s->mc, s->spend_ns);
  return s->seq[i < s->n ? i : s->n - 1];
}

static void script_init(script *s, resil_manual_clock *mc) {
  memset(s, 0, sizeof *s);
  s->mc = mc;
}

static void script_push(script *s, resil_outcome o) { s->seq[s->n++] = o; }

static resil_outcome not_sent(void) {
  return resil_outcome_make(RESIL_NOT_SENT, RESIL_REASON_CONNECT_REFUSED);
}
static resil_outcome unknown(void) {
  return resil_outcome_make(RESIL_UNKNOWN, RESIL_REASON_TIMEOUT);
}
static resil_outcome http_ra(int status, int64_t retry_after_ms) {
  resil_outcome o = resil_outcome_http(status);
  o.retry_after_ms = retry_after_ms;
  return o;
}

typedef struct env {
  resil_manual_clock *mc;
  resil_retry_config cfg;
  resil_ctx ctx;
} env;

static void env_init(env *e) {
  assert_status(RESIL_OK, resil_manual_clock_new(0, 1700000000000, &e->mc));
  resil_retry_config_init(&e->cfg);
  e->cfg.clock = resil_manual_clock_get(e->mc);
  resil_ctx_init(&e->ctx);
  e->ctx.clock = resil_manual_clock_get(e->mc);
}

static resil_retry *env_retry(env *e) {
  resil_retry *r = NULL;
  resil_error err;
  resil_status st = resil_retry_new(&e->cfg, &r, &err);
  if (st != RESIL_OK) fail_msg("resil_retry_new: %s", err.msg);
  return r;
}

static void env_free(env *e) { resil_manual_clock_free(e->mc); }

/* Runs the split form against a script and records the delays returned. */
static int split_delays(resil_retry *r, const resil_ctx *ctx, script *s,
                        int64_t *delays, int max) {
  resil_retry_state *st = NULL;
  assert_status(RESIL_OK, resil_retry_state_new(NULL, &st));
  int n = 0;
  resil_decision d = resil_retry_begin(r, ctx, st);
  while (d != RESIL_DECISION_DENY) {
    resil_outcome o = script_fn(s, resil_retry_state_ctx(st));
    int64_t delay = -1;
    d = resil_retry_next(r, st, &o, &delay);
    if (d != RESIL_DECISION_DENY) {
      /* WAIT exactly when there is a wait. */
      assert_int_equal(d, delay > 0 ? RESIL_DECISION_WAIT : RESIL_DECISION_GO);
      if (n < max) delays[n++] = delay;
    }
  }
  resil_retry_state_free(st);
  return n;
}

/* A random source returning a fixed list of values, cycling. */
typedef struct fixed_random {
  uint64_t v[8];
  int n;
  int i;
} fixed_random;

static uint64_t fixed_random_next(void *self) {
  fixed_random *f = self;
  uint64_t x = f->v[f->i % f->n];
  f->i++;
  return x;
}

/* ---- attempts ------------------------------------------------------------ */

static void config_init_writes_documented_defaults(void **state) {
  (void)state;
  resil_retry_config c;
  memset(&c, 0xab, sizeof c);
  resil_retry_config_init(&c);
  assert_int_equal(c.struct_size, sizeof c);
  assert_null(c.name);
  assert_int_equal(c.max_attempts, 3);
  assert_int_equal(c.backoff, RESIL_RETRY_FIXED);
  assert_int_equal(c.wait_ns, MS(500));
  assert_int_equal(c.initial_wait_ns, MS(500));
  assert_true(c.multiplier == 1.5);
  assert_int_equal(c.max_wait_ns, MS(30000));
  assert_int_equal(c.respect_retry_after, 1);
  assert_int_equal(c.max_retry_after_ns, 0);
  assert_int_equal(c.retry_classes, RESIL_RETRY_DEFAULT_CLASSES);
  assert_int_equal(c.retry_on_rejected, 0);
  assert_int_equal(c.unsafe_retry_non_idempotent, 0);
  assert_int_equal(c.min_attempt_budget_ns, 0);
  assert_null(c.budget);
  assert_null(c.random);
  assert_null(c.predicate);
  assert_null(c.on_attempt);
  assert_null(c.on_attempt_user);
  assert_null(c.clock);
  assert_null(c.alloc);
  resil_retry_config_init(NULL);
}

static void max_attempts_counts_the_first_attempt(void **state) {
  (void)state;
  env e;
  env_init(&e);
  e.cfg.wait_ns = 0;
  resil_retry *r = env_retry(&e);
  assert_int_equal(resil_retry_max_attempts(r), 3);
  script s;
  script_init(&s, e.mc);
  script_push(&s, not_sent());
  resil_outcome o = resil_retry_run(r, &e.ctx, script_fn, &s);
  assert_int_equal(s.calls, 3);
  assert_int_equal(o.kind, RESIL_NOT_SENT);
  assert_int_equal(o.reason, RESIL_REASON_CONNECT_REFUSED);
  assert_int_equal(o.stop, RESIL_STOP_MAX_ATTEMPTS);
  assert_int_equal(o.attempts, 3);
  assert_int_equal(s.attempt_seen[0], 1);
  assert_int_equal(s.attempt_seen[1], 2);
  assert_int_equal(s.attempt_seen[2], 3);
  resil_retry_free(r);

  e.cfg.max_attempts = 1;
  r = env_retry(&e);
  script_init(&s, e.mc);
  script_push(&s, not_sent());
  o = resil_retry_run(r, &e.ctx, script_fn, &s);
  assert_int_equal(s.calls, 1);
  assert_int_equal(o.stop, RESIL_STOP_MAX_ATTEMPTS);
  assert_int_equal(o.attempts, 1);
  resil_retry_free(r);
  env_free(&e);
}

/* P9: exponential 20 ms x 2, fails twice then ok: waits of 20 and 40 ms on
 * the manual clock; a non-retryable error makes exactly one attempt. */
static void exponential_20ms_x2_waits_20_then_40_ms(void **state) {
  (void)state;
  env e;
  env_init(&e);
  e.cfg.backoff = RESIL_RETRY_EXPONENTIAL;
  e.cfg.initial_wait_ns = MS(20);
  e.cfg.multiplier = 2.0;
  resil_retry *r = env_retry(&e);
  e.ctx.flags = RESIL_CALL_IDEMPOTENT;
  script s;
  script_init(&s, e.mc);
  script_push(&s, resil_outcome_failure());
  script_push(&s, resil_outcome_failure());
  script_push(&s, resil_outcome_ok());
  resil_outcome o = resil_retry_run(r, &e.ctx, script_fn, &s);
  assert_int_equal(s.calls, 3);
  assert_true(resil_outcome_is_success(&o));
  assert_int_equal(o.stop, RESIL_STOP_SUCCESS);
  assert_int_equal(o.attempts, 3);
  assert_int_equal(s.at_ns[1] - s.at_ns[0], MS(20));
  assert_int_equal(s.at_ns[2] - s.at_ns[1], MS(40));
  assert_int_equal(resil_manual_clock_slept_ns(e.mc), MS(60));

  script_init(&s, e.mc);
  script_push(&s, resil_outcome_http(400));
  o = resil_retry_run(r, &e.ctx, script_fn, &s);
  assert_int_equal(s.calls, 1);
  assert_int_equal(o.stop, RESIL_STOP_NOT_RETRYABLE);
  assert_int_equal(o.http_status, 400);
  assert_int_equal(resil_manual_clock_slept_ns(e.mc), MS(60));
  resil_retry_free(r);
  env_free(&e);
}

static void fixed_wait_is_the_same_between_every_attempt(void **state) {
  (void)state;
  env e;
  env_init(&e);
  e.cfg.max_attempts = 4;
  e.cfg.wait_ns = MS(7);
  resil_retry *r = env_retry(&e);
  script s;
  script_init(&s, e.mc);
  script_push(&s, not_sent());
  int64_t d[8];
  assert_int_equal(split_delays(r, &e.ctx, &s, d, 8), 3);
  assert_int_equal(d[0], MS(7));
  assert_int_equal(d[1], MS(7));
  assert_int_equal(d[2], MS(7));
  assert_int_equal(s.calls, 4);
  resil_retry_free(r);
  env_free(&e);
}

static void exponential_truncates_each_step_to_whole_ms_and_caps(void **state) {
  (void)state;
  env e;
  env_init(&e);
  e.cfg.max_attempts = 7;
  e.cfg.backoff = RESIL_RETRY_EXPONENTIAL;
  e.cfg.initial_wait_ns = MS(10);
  e.cfg.multiplier = 1.55;
  e.cfg.max_wait_ns = MS(50);
  resil_retry *r = env_retry(&e);
  script s;
  script_init(&s, e.mc);
  script_push(&s, not_sent());
  int64_t d[8];
  /* 10, 15.5 -> 15, 23.25 -> 23, 35.65 -> 35, 54.25 -> 54 capped to 50. */
  assert_int_equal(split_delays(r, &e.ctx, &s, d, 8), 6);
  assert_int_equal(d[0], MS(10));
  assert_int_equal(d[1], MS(15));
  assert_int_equal(d[2], MS(23));
  assert_int_equal(d[3], MS(35));
  assert_int_equal(d[4], MS(50));
  assert_int_equal(d[5], MS(50));
  resil_retry_free(r);
  env_free(&e);
}

static void full_jitter_spans_zero_to_base(void **state) {
  (void)state;
  env e;
  env_init(&e);
  fixed_random fr = {{0, UINT64_MAX, UINT64_C(1) << 63}, 3, 0};
  e.cfg.max_attempts = 4;
  e.cfg.backoff = RESIL_RETRY_EXPONENTIAL_FULL_JITTER;
  e.cfg.initial_wait_ns = MS(100);
  e.cfg.multiplier = 2.0;
  e.cfg.random = fixed_random_next;
  e.cfg.random_self = &fr;
  resil_retry *r = env_retry(&e);
  script s;
  script_init(&s, e.mc);
  script_push(&s, not_sent());
  int64_t d[8];
  assert_int_equal(split_delays(r, &e.ctx, &s, d, 8), 3);
  assert_int_equal(d[0], 0);         /* lowest draw: 0            */
  assert_int_equal(d[1], MS(200));   /* highest draw: b(2) itself */
  assert_int_equal(d[2], MS(200));   /* middle draw: b(3) / 2     */
  resil_retry_free(r);
  env_free(&e);
}

static void equal_jitter_spans_half_base_to_base(void **state) {
  (void)state;
  env e;
  env_init(&e);
  fixed_random fr = {{0, UINT64_MAX}, 2, 0};
  e.cfg.max_attempts = 3;
  e.cfg.backoff = RESIL_RETRY_EXPONENTIAL_EQUAL_JITTER;
  e.cfg.initial_wait_ns = MS(100);
  e.cfg.multiplier = 2.0;
  e.cfg.random = fixed_random_next;
  e.cfg.random_self = &fr;
  resil_retry *r = env_retry(&e);
  script s;
  script_init(&s, e.mc);
  script_push(&s, not_sent());
  int64_t d[8];
  assert_int_equal(split_delays(r, &e.ctx, &s, d, 8), 2);
  assert_int_equal(d[0], MS(50));  /* b(1) / 2 */
  assert_int_equal(d[1], MS(200)); /* b(2)     */
  resil_retry_free(r);
  env_free(&e);
}

static void decorrelated_jitter_stays_within_initial_and_three_times_previous(
    void **state) {
  (void)state;
  env e;
  env_init(&e);
  fixed_random hi = {{UINT64_MAX}, 1, 0};
  e.cfg.max_attempts = 5;
  e.cfg.backoff = RESIL_RETRY_DECORRELATED_JITTER;
  e.cfg.initial_wait_ns = MS(10);
  e.cfg.max_wait_ns = MS(100);
  e.cfg.random = fixed_random_next;
  e.cfg.random_self = &hi;
  resil_retry *r = env_retry(&e);
  script s;
  script_init(&s, e.mc);
  script_push(&s, not_sent());
  int64_t d[8];
  assert_int_equal(split_delays(r, &e.ctx, &s, d, 8), 4);
  assert_int_equal(d[0], MS(30));
  assert_int_equal(d[1], MS(90));
  assert_int_equal(d[2], MS(100)); /* 270 capped */
  assert_int_equal(d[3], MS(100));
  resil_retry_free(r);

  fixed_random lo = {{0}, 1, 0};
  e.cfg.random_self = &lo;
  r = env_retry(&e);
  script_init(&s, e.mc);
  script_push(&s, not_sent());
  assert_int_equal(split_delays(r, &e.ctx, &s, d, 8), 4);
  for (int i = 0; i < 4; i++) assert_int_equal(d[i], MS(10));
  resil_retry_free(r);
  env_free(&e);
}

static void default_random_jitter_stays_within_bounds_and_varies(void **state) {
  (void)state;
  env e;
  env_init(&e);
  e.cfg.max_attempts = 6;
  e.cfg.initial_wait_ns = MS(10);
  e.cfg.multiplier = 2.0;
  e.cfg.max_wait_ns = MS(200);
  resil_retry_backoff kinds[] = {RESIL_RETRY_EXPONENTIAL_FULL_JITTER,
                                 RESIL_RETRY_EXPONENTIAL_EQUAL_JITTER,
                                 RESIL_RETRY_DECORRELATED_JITTER};
  for (size_t k = 0; k < 3; k++) {
    e.cfg.backoff = kinds[k];
    resil_retry *r = env_retry(&e);
    int64_t first = -1;
    int varied = 0;
    for (int call = 0; call < 200; call++) {
      script s;
      script_init(&s, e.mc);
      script_push(&s, not_sent());
      int64_t d[8];
      assert_int_equal(split_delays(r, &e.ctx, &s, d, 8), 5);
      int64_t b = MS(10), prev = MS(10);
      for (int i = 0; i < 5; i++) {
        int64_t lo = 0, hi = b;
        if (kinds[k] == RESIL_RETRY_EXPONENTIAL_EQUAL_JITTER) lo = b / 2;
        if (kinds[k] == RESIL_RETRY_DECORRELATED_JITTER) {
          lo = MS(10);
          hi = prev * 3 < MS(200) ? prev * 3 : MS(200);
          prev = d[i];
        }
        if (d[i] < lo || d[i] > hi)
          fail_msg("kind %d wait %d = %lld outside [%lld, %lld]", (int)kinds[k],
                   i, (long long)d[i], (long long)lo, (long long)hi);
        b = b * 2 < MS(200) ? b * 2 : MS(200);
      }
      if (first < 0)
        first = d[0];
      else if (d[0] != first)
        varied = 1;
    }
    assert_true(varied);
    resil_retry_free(r);
  }
  env_free(&e);
}

/* ---- Retry-After ----------------------------------------------------------- */

static void retry_after_replaces_computed_wait_even_when_shorter(void **state) {
  (void)state;
  env e;
  env_init(&e);
  e.cfg.max_attempts = 3;
  e.cfg.wait_ns = MS(500);
  resil_retry *r = env_retry(&e);
  e.ctx.flags = RESIL_CALL_IDEMPOTENT;
  script s;
  script_init(&s, e.mc);
  script_push(&s, http_ra(503, 100));
  script_push(&s, http_ra(429, 2000));
  script_push(&s, resil_outcome_ok());
  resil_outcome o = resil_retry_run(r, &e.ctx, script_fn, &s);
  assert_true(resil_outcome_is_success(&o));
  assert_int_equal(s.at_ns[1] - s.at_ns[0], MS(100));  /* shorter than 500 */
  assert_int_equal(s.at_ns[2] - s.at_ns[1], MS(2000)); /* longer than 500  */
  resil_retry_free(r);
  env_free(&e);
}

/* DESIGN §2.3: Retry-After 0, an HTTP-date in the past (the parser gives 0
 * for it) and an unusable value give no reason to retry sooner than planned:
 * the computed backoff applies. Against nginx, a 429 with a past date made
 * 3 attempts in 0.4 ms. */
static void retry_after_zero_or_past_date_falls_back_to_backoff(void **state) {
  (void)state;
  env e;
  env_init(&e);
  e.cfg.wait_ns = MS(500);
  resil_retry *r = env_retry(&e);
  e.ctx.flags = RESIL_CALL_IDEMPOTENT;
  /* Retry-After: 0 */
  script s;
  script_init(&s, e.mc);
  script_push(&s, http_ra(429, 0));
  resil_outcome o = resil_retry_run(r, &e.ctx, script_fn, &s);
  assert_int_equal(s.calls, 3);
  assert_int_equal(o.stop, RESIL_STOP_MAX_ATTEMPTS);
  assert_int_equal(s.at_ns[1] - s.at_ns[0], MS(500));
  assert_int_equal(s.at_ns[2] - s.at_ns[1], MS(500));
  assert_int_equal(resil_manual_clock_slept_ns(e.mc), MS(1000));
  /* A date in the past, parsed against the clock's wall time. */
  int64_t ms = -1;
  const char *past = "Sun, 06 Nov 1994 08:49:37 GMT";
  assert_status(RESIL_OK, resil_retry_after_parse(past, strlen(past),
                                                  resil_clock_wall_ms(e.cfg.clock), &ms));
  assert_int_equal(ms, 0);
  script_init(&s, e.mc);
  script_push(&s, http_ra(429, ms));
  int64_t d[4];
  assert_int_equal(split_delays(r, &e.ctx, &s, d, 4), 2);
  assert_int_equal(d[0], MS(500));
  assert_int_equal(d[1], MS(500));
  /* An unusable value: the parser refuses it, the outcome carries -1. */
  const char *junk = "soon";
  assert_status(RESIL_EINVAL, resil_retry_after_parse(junk, strlen(junk), 0, &ms));
  script_init(&s, e.mc);
  script_push(&s, http_ra(503, -1));
  assert_int_equal(split_delays(r, &e.ctx, &s, d, 4), 2);
  assert_int_equal(d[0], MS(500));
  /* The smallest positive hint still replaces the backoff. */
  script_init(&s, e.mc);
  script_push(&s, http_ra(503, 1));
  assert_int_equal(split_delays(r, &e.ctx, &s, d, 4), 2);
  assert_int_equal(d[0], MS(1));
  resil_retry_free(r);
  env_free(&e);
}

/* A Retry-After capped by the remaining deadline uses it up: nothing would
 * be left for the attempt, so the call ends at once without sleeping
 * (DESIGN §2.3, "at least 1 ms"); the computed wait it replaced is not slept
 * either. */
static void retry_after_that_uses_up_the_deadline_ends_at_once(void **state) {
  (void)state;
  env e;
  env_init(&e);
  e.cfg.wait_ns = MS(100);
  resil_retry *r = env_retry(&e);
  e.ctx.flags = RESIL_CALL_IDEMPOTENT;
  /* 503 with Retry-After 2 s, 900.5 ms left: capped to 900.5 ms, 0 left. */
  resil_ctx_set_timeout_ns(&e.ctx, MS(900) + RESIL_US(500));
  script s;
  script_init(&s, e.mc);
  script_push(&s, http_ra(503, 2000));
  resil_outcome o = resil_retry_run(r, &e.ctx, script_fn, &s);
  assert_int_equal(s.calls, 1);
  assert_int_equal(o.stop, RESIL_STOP_DEADLINE);
  assert_int_equal(o.kind, RESIL_ANSWERED); /* the answer says more: kept */
  assert_int_equal(o.http_status, 503);
  assert_int_equal(resil_manual_clock_slept_ns(e.mc), 0);

  /* Retry-After 200 ms (longer than the 100 ms backoff) leaves 0.5 ms: the
   * call ends at once; neither the hint nor the shorter backoff is slept. */
  resil_ctx_set_timeout_ns(&e.ctx, MS(200) + RESIL_US(500));
  script_init(&s, e.mc);
  script_push(&s, http_ra(429, 200));
  script_push(&s, resil_outcome_ok());
  o = resil_retry_run(r, &e.ctx, script_fn, &s);
  assert_int_equal(s.calls, 1);
  assert_int_equal(o.stop, RESIL_STOP_DEADLINE);
  assert_int_equal(o.http_status, 429);
  assert_int_equal(resil_manual_clock_slept_ns(e.mc), 0);

  /* A wait that leaves less than 1 ms: NOT_SENT history, so REJECTED,
   * reason DEADLINE. Neither the 100 ms backoff nor anything else is
   * slept. */
  resil_ctx_set_timeout_ns(&e.ctx, MS(100) + RESIL_US(500));
  script_init(&s, e.mc);
  script_push(&s, not_sent());
  o = resil_retry_run(r, &e.ctx, script_fn, &s);
  assert_int_equal(s.calls, 1);
  assert_int_equal(o.kind, RESIL_REJECTED);
  assert_int_equal(o.reason, RESIL_REASON_DEADLINE);
  assert_int_equal(o.stop, RESIL_STOP_DEADLINE);
  assert_int_equal(resil_manual_clock_slept_ns(e.mc), 0);

  /* With 1 ms left after the wait, the attempt is made. */
  resil_ctx_set_timeout_ns(&e.ctx, MS(101));
  script_init(&s, e.mc);
  script_push(&s, not_sent());
  script_push(&s, resil_outcome_ok());
  o = resil_retry_run(r, &e.ctx, script_fn, &s);
  assert_int_equal(s.calls, 2);
  assert_int_equal(o.stop, RESIL_STOP_SUCCESS);
  assert_int_equal(resil_manual_clock_slept_ns(e.mc), MS(100));

  /* The first attempt too needs 1 ms of deadline. */
  resil_ctx_set_timeout_ns(&e.ctx, RESIL_US(999));
  script_init(&s, e.mc);
  script_push(&s, resil_outcome_ok());
  o = resil_retry_run(r, &e.ctx, script_fn, &s);
  assert_int_equal(s.calls, 0);
  assert_int_equal(o.kind, RESIL_REJECTED);
  assert_int_equal(o.reason, RESIL_REASON_DEADLINE);
  resil_retry_free(r);
  env_free(&e);
}

/* H3's shape: 20 ms exponential with a 50 ms cap, Retry-After: 1 s. */
static void retry_after_is_capped_by_max_wait_or_max_retry_after(void **state) {
  (void)state;
  env e;
  env_init(&e);
  e.cfg.backoff = RESIL_RETRY_EXPONENTIAL;
  e.cfg.initial_wait_ns = MS(20);
  e.cfg.max_wait_ns = MS(50);
  resil_retry *r = env_retry(&e);
  e.ctx.flags = RESIL_CALL_IDEMPOTENT;
  script s;
  script_init(&s, e.mc);
  script_push(&s, http_ra(502, 1000));
  int64_t d[4];
  assert_int_equal(split_delays(r, &e.ctx, &s, d, 4), 2);
  assert_int_equal(d[0], MS(50));
  assert_int_equal(d[1], MS(50));
  assert_int_equal(s.calls, 3);
  resil_retry_free(r);

  e.cfg.max_retry_after_ns = MS(300);
  r = env_retry(&e);
  script_init(&s, e.mc);
  script_push(&s, http_ra(502, 1000));
  assert_int_equal(split_delays(r, &e.ctx, &s, d, 4), 2);
  assert_int_equal(d[0], MS(300));
  resil_retry_free(r);
  env_free(&e);
}

static void retry_after_beyond_deadline_stops_without_sleeping(void **state) {
  (void)state;
  env e;
  env_init(&e);
  e.cfg.wait_ns = MS(10);
  resil_retry *r = env_retry(&e);
  e.ctx.flags = RESIL_CALL_IDEMPOTENT;
  resil_ctx_set_timeout_ns(&e.ctx, MS(500));
  script s;
  script_init(&s, e.mc);
  script_push(&s, http_ra(503, 2000));
  resil_outcome o = resil_retry_run(r, &e.ctx, script_fn, &s);
  assert_int_equal(s.calls, 1);
  assert_int_equal(o.kind, RESIL_ANSWERED);
  assert_int_equal(o.http_status, 503);
  assert_int_equal(o.stop, RESIL_STOP_DEADLINE);
  assert_int_equal(resil_manual_clock_slept_ns(e.mc), 0);
  /* A Retry-After that fits is honoured. */
  script_init(&s, e.mc);
  script_push(&s, http_ra(503, 300));
  script_push(&s, resil_outcome_ok());
  o = resil_retry_run(r, &e.ctx, script_fn, &s);
  assert_int_equal(s.calls, 2);
  assert_int_equal(resil_manual_clock_slept_ns(e.mc), MS(300));
  resil_retry_free(r);
  env_free(&e);
}

static void unusable_retry_after_falls_back_to_computed_wait(void **state) {
  (void)state;
  env e;
  env_init(&e);
  e.cfg.wait_ns = MS(70);
  resil_retry *r = env_retry(&e);
  e.ctx.flags = RESIL_CALL_IDEMPOTENT;
  int64_t bad[] = {-1, -5, INT64_MIN, 0};
  for (size_t i = 0; i < 4; i++) {
    script s;
    script_init(&s, e.mc);
    script_push(&s, http_ra(503, bad[i]));
    int64_t d[4];
    assert_int_equal(split_delays(r, &e.ctx, &s, d, 4), 2);
    assert_int_equal(d[0], MS(70));
  }
  resil_retry_free(r);
  /* Not respected at all when switched off. */
  e.cfg.respect_retry_after = 0;
  r = env_retry(&e);
  script s;
  script_init(&s, e.mc);
  script_push(&s, http_ra(503, 5));
  int64_t d[4];
  assert_int_equal(split_delays(r, &e.ctx, &s, d, 4), 2);
  assert_int_equal(d[0], MS(70));
  resil_retry_free(r);
  env_free(&e);
}

/* ---- what is retried -------------------------------------------------------- */

static void unknown_is_not_retried_without_idempotent_or_stable_key(
    void **state) {
  (void)state;
  env e;
  env_init(&e);
  resil_retry *r = env_retry(&e);
  script s;
  script_init(&s, e.mc);
  script_push(&s, unknown());
  resil_outcome o = resil_retry_run(r, &e.ctx, script_fn, &s);
  assert_int_equal(s.calls, 1);
  assert_int_equal(o.kind, RESIL_UNKNOWN);
  assert_int_equal(o.stop, RESIL_STOP_UNSAFE);
  assert_int_equal(o.attempts, 1);
  resil_retry_free(r);
  env_free(&e);
}

static void unknown_is_retried_for_idempotent_or_keyed_operation(void **state) {
  (void)state;
  env e;
  env_init(&e);
  e.cfg.wait_ns = 0;
  resil_retry *r = env_retry(&e);
  uint32_t flags[] = {RESIL_CALL_IDEMPOTENT, RESIL_CALL_STABLE_KEY};
  for (size_t i = 0; i < 2; i++) {
    e.ctx.flags = flags[i];
    script s;
    script_init(&s, e.mc);
    script_push(&s, unknown());
    resil_outcome o = resil_retry_run(r, &e.ctx, script_fn, &s);
    assert_int_equal(s.calls, 3);
    assert_int_equal(o.stop, RESIL_STOP_MAX_ATTEMPTS);
    assert_int_equal(s.flags_seen, flags[i]);
  }
  resil_retry_free(r);
  env_free(&e);
}

static void throttled_and_5xx_follow_the_same_safety_rule(void **state) {
  (void)state;
  env e;
  env_init(&e);
  e.cfg.wait_ns = 0;
  resil_retry *r = env_retry(&e);
  int codes[] = {408, 425, 429, 500, 502, 503};
  for (size_t i = 0; i < 6; i++) {
    e.ctx.flags = 0;
    script s;
    script_init(&s, e.mc);
    script_push(&s, resil_outcome_http(codes[i]));
    script_push(&s, resil_outcome_ok());
    resil_outcome o = resil_retry_run(r, &e.ctx, script_fn, &s);
    assert_int_equal(s.calls, 1);
    assert_int_equal(o.stop, RESIL_STOP_UNSAFE);
    assert_int_equal(o.http_status, codes[i]);

    e.ctx.flags = RESIL_CALL_IDEMPOTENT;
    script_init(&s, e.mc);
    script_push(&s, resil_outcome_http(codes[i]));
    script_push(&s, resil_outcome_ok());
    o = resil_retry_run(r, &e.ctx, script_fn, &s);
    assert_int_equal(s.calls, 2);
    assert_int_equal(o.stop, RESIL_STOP_SUCCESS);
  }
  resil_retry_free(r);
  env_free(&e);
}

static void unsafe_opt_in_retries_non_idempotent_operation(void **state) {
  (void)state;
  env e;
  env_init(&e);
  e.cfg.wait_ns = 0;
  e.cfg.unsafe_retry_non_idempotent = 1;
  resil_retry *r = env_retry(&e);
  script s;
  script_init(&s, e.mc);
  script_push(&s, unknown());
  resil_outcome o = resil_retry_run(r, &e.ctx, script_fn, &s);
  assert_int_equal(s.calls, 3); /* three effects, as the lab shows */
  assert_int_equal(o.stop, RESIL_STOP_MAX_ATTEMPTS);
  resil_retry_free(r);
  env_free(&e);
}

static void client_error_is_never_retried(void **state) {
  (void)state;
  env e;
  env_init(&e);
  e.cfg.wait_ns = 0;
  e.cfg.unsafe_retry_non_idempotent = 1;
  resil_retry *r = env_retry(&e);
  e.ctx.flags = RESIL_CALL_IDEMPOTENT | RESIL_CALL_STABLE_KEY;
  int codes[] = {400, 401, 403, 404, 409, 422};
  for (size_t i = 0; i < 6; i++) {
    script s;
    script_init(&s, e.mc);
    script_push(&s, resil_outcome_http(codes[i]));
    resil_outcome o = resil_retry_run(r, &e.ctx, script_fn, &s);
    assert_int_equal(s.calls, 1);
    assert_int_equal(o.stop, RESIL_STOP_NOT_RETRYABLE);
  }
  script s;
  script_init(&s, e.mc);
  script_push(&s, resil_outcome_make(RESIL_ANSWERED, RESIL_REASON_BUSINESS));
  resil_outcome o = resil_retry_run(r, &e.ctx, script_fn, &s);
  assert_int_equal(s.calls, 1);
  assert_int_equal(o.stop, RESIL_STOP_NOT_RETRYABLE);
  resil_retry_free(r);
  env_free(&e);
}

static void rejected_is_not_retried_unless_opted_in(void **state) {
  (void)state;
  env e;
  env_init(&e);
  e.cfg.wait_ns = 0;
  resil_retry *r = env_retry(&e);
  script s;
  script_init(&s, e.mc);
  script_push(&s, resil_outcome_make(RESIL_REJECTED, RESIL_REASON_BREAKER_OPEN));
  resil_outcome o = resil_retry_run(r, &e.ctx, script_fn, &s);
  assert_int_equal(s.calls, 1);
  assert_int_equal(o.kind, RESIL_REJECTED);
  assert_int_equal(o.reason, RESIL_REASON_BREAKER_OPEN);
  assert_int_equal(o.stop, RESIL_STOP_NOT_RETRYABLE);
  resil_retry_free(r);

  e.cfg.retry_on_rejected = 1;
  r = env_retry(&e);
  script_init(&s, e.mc);
  script_push(&s, resil_outcome_make(RESIL_REJECTED, RESIL_REASON_BULKHEAD_FULL));
  o = resil_retry_run(r, &e.ctx, script_fn, &s);
  assert_int_equal(s.calls, 3); /* a rejection never executed: no flag needed */
  assert_int_equal(o.kind, RESIL_REJECTED);
  assert_int_equal(o.stop, RESIL_STOP_MAX_ATTEMPTS);
  resil_retry_free(r);
  env_free(&e);
}

static void retry_classes_mask_narrows_what_is_retried(void **state) {
  (void)state;
  env e;
  env_init(&e);
  e.cfg.wait_ns = 0;
  e.cfg.retry_classes = RESIL_CLASSES_THROTTLED;
  resil_retry *r = env_retry(&e);
  e.ctx.flags = RESIL_CALL_IDEMPOTENT;
  script s;
  script_init(&s, e.mc);
  script_push(&s, not_sent());
  resil_outcome o = resil_retry_run(r, &e.ctx, script_fn, &s);
  assert_int_equal(s.calls, 1);
  assert_int_equal(o.stop, RESIL_STOP_NOT_RETRYABLE);
  script_init(&s, e.mc);
  script_push(&s, resil_outcome_http(429));
  script_push(&s, resil_outcome_ok());
  o = resil_retry_run(r, &e.ctx, script_fn, &s);
  assert_int_equal(s.calls, 2);
  resil_retry_free(r);
  env_free(&e);
}

static resil_retry_verdict verdict_by_status(void *user,
                                             const resil_outcome *o) {
  int *asked = user;
  (*asked)++;
  if (o->http_status == 503) return RESIL_RETRY_VERDICT_STOP;
  if (o->http_status == 409) return RESIL_RETRY_VERDICT_RETRY;
  if (o->kind == RESIL_UNKNOWN) return RESIL_RETRY_VERDICT_RETRY;
  return RESIL_RETRY_VERDICT_DEFAULT;
}

static void predicate_overrides_class_but_not_safety(void **state) {
  (void)state;
  env e;
  env_init(&e);
  int asked = 0;
  e.cfg.wait_ns = 0;
  e.cfg.predicate = verdict_by_status;
  e.cfg.user = &asked;
  resil_retry *r = env_retry(&e);
  e.ctx.flags = RESIL_CALL_IDEMPOTENT;
  script s;
  script_init(&s, e.mc);
  script_push(&s, resil_outcome_http(503));
  resil_outcome o = resil_retry_run(r, &e.ctx, script_fn, &s);
  assert_int_equal(s.calls, 1);
  assert_int_equal(o.stop, RESIL_STOP_NOT_RETRYABLE);

  script_init(&s, e.mc);
  script_push(&s, resil_outcome_http(409));
  script_push(&s, resil_outcome_ok());
  o = resil_retry_run(r, &e.ctx, script_fn, &s);
  assert_int_equal(s.calls, 2);
  assert_int_equal(o.stop, RESIL_STOP_SUCCESS);

  /* RETRY cannot make an unkeyed, non-idempotent UNKNOWN safe. */
  e.ctx.flags = 0;
  script_init(&s, e.mc);
  script_push(&s, unknown());
  o = resil_retry_run(r, &e.ctx, script_fn, &s);
  assert_int_equal(s.calls, 1);
  assert_int_equal(o.stop, RESIL_STOP_UNSAFE);
  assert_int_equal(asked, 4);
  resil_retry_free(r);
  env_free(&e);
}

/* ---- deadline and cancellation ------------------------------------------------- */

static void deadline_refuses_next_attempt_without_sleeping(void **state) {
  (void)state;
  env e;
  env_init(&e);
  e.cfg.wait_ns = MS(50);
  resil_retry *r = env_retry(&e);
  resil_ctx_set_timeout_ns(&e.ctx, MS(100));
  script s;
  script_init(&s, e.mc);
  s.spend_ns = MS(90);
  script_push(&s, not_sent());
  resil_outcome o = resil_retry_run(r, &e.ctx, script_fn, &s);
  assert_int_equal(s.calls, 1);
  /* NOT_SENT-only history: REJECTED, reason deadline (DESIGN §2.3). */
  assert_int_equal(o.kind, RESIL_REJECTED);
  assert_int_equal(o.reason, RESIL_REASON_DEADLINE);
  assert_int_equal(o.stop, RESIL_STOP_DEADLINE);
  assert_int_equal(o.attempts, 1);
  assert_false(o.flags & RESIL_OF_PRIOR_MAYBE_EXECUTED);
  assert_int_equal(resil_manual_clock_slept_ns(e.mc), 0);
  resil_retry_stats st;
  assert_status(RESIL_OK, resil_retry_get_stats(r, &st));
  assert_int_equal(st.refused_by_deadline, 1);
  assert_int_equal(st.stops[RESIL_STOP_DEADLINE], 1);
  resil_retry_free(r);
  env_free(&e);
}

/* P13's retry layer: total 700 ms, the attempt times out after 400 ms, wait
 * 100 ms, minimum attempt budget 500 ms: the second attempt is refused
 * before it is sent; a fresh 700 ms budget then makes one attempt. */
static void min_attempt_budget_refuses_attempt_that_cannot_fit(void **state) {
  (void)state;
  env e;
  env_init(&e);
  e.cfg.wait_ns = MS(100);
  e.cfg.min_attempt_budget_ns = MS(500);
  resil_retry *r = env_retry(&e);
  e.ctx.flags = RESIL_CALL_IDEMPOTENT;
  resil_ctx_set_timeout_ns(&e.ctx, MS(700));
  script s;
  script_init(&s, e.mc);
  s.spend_ns = MS(400);
  script_push(&s, unknown());
  resil_outcome o = resil_retry_run(r, &e.ctx, script_fn, &s);
  assert_int_equal(s.calls, 1);
  assert_int_equal(o.kind, RESIL_UNKNOWN); /* it may have run: kept */
  assert_int_equal(o.reason, RESIL_REASON_TIMEOUT);
  assert_int_equal(o.stop, RESIL_STOP_DEADLINE);
  assert_int_equal(resil_manual_clock_slept_ns(e.mc), 0);

  resil_ctx_set_timeout_ns(&e.ctx, MS(700));
  script_init(&s, e.mc);
  script_push(&s, resil_outcome_ok());
  o = resil_retry_run(r, &e.ctx, script_fn, &s);
  assert_int_equal(s.calls, 1);
  assert_int_equal(o.stop, RESIL_STOP_SUCCESS);
  assert_int_equal(s.deadline_seen, e.ctx.deadline_ns);
  resil_retry_free(r);
  env_free(&e);
}

static void deadline_too_short_refuses_first_attempt(void **state) {
  (void)state;
  env e;
  env_init(&e);
  e.cfg.min_attempt_budget_ns = MS(500);
  resil_retry *r = env_retry(&e);
  resil_ctx_set_timeout_ns(&e.ctx, MS(300));
  script s;
  script_init(&s, e.mc);
  script_push(&s, resil_outcome_ok());
  resil_outcome o = resil_retry_run(r, &e.ctx, script_fn, &s);
  assert_int_equal(s.calls, 0);
  assert_int_equal(o.kind, RESIL_REJECTED);
  assert_int_equal(o.reason, RESIL_REASON_DEADLINE);
  assert_int_equal(o.stop, RESIL_STOP_DEADLINE);
  assert_int_equal(o.attempts, 0);
  resil_retry_free(r);
  /* Without a minimum, an expired deadline still refuses. */
  e.cfg.min_attempt_budget_ns = 0;
  r = env_retry(&e);
  resil_ctx_set_timeout_ns(&e.ctx, 0);
  o = resil_retry_run(r, &e.ctx, script_fn, &s);
  assert_int_equal(s.calls, 0);
  assert_int_equal(o.stop, RESIL_STOP_DEADLINE);
  resil_retry_free(r);
  env_free(&e);
}

static void wait_never_sleeps_past_the_deadline(void **state) {
  (void)state;
  env e;
  env_init(&e);
  e.cfg.max_attempts = 10;
  e.cfg.wait_ns = MS(50);
  resil_retry *r = env_retry(&e);
  resil_ctx_set_timeout_ns(&e.ctx, MS(120));
  script s;
  script_init(&s, e.mc);
  script_push(&s, not_sent());
  resil_outcome o = resil_retry_run(r, &e.ctx, script_fn, &s);
  /* Attempts at 0, 50 and 100 ms; after the third, 20 ms remain, which a
   * 50 ms wait would overrun. */
  assert_int_equal(s.calls, 3);
  assert_int_equal(o.stop, RESIL_STOP_DEADLINE);
  assert_int_equal(resil_manual_clock_slept_ns(e.mc), MS(100));
  assert_true(resil_manual_clock_now_ns(e.mc) <= e.ctx.deadline_ns);
  resil_retry_free(r);
  env_free(&e);
}

/* Signals the token when a wait is announced (the report of an attempt
 * that another will follow). */
static void signal_on_wait(void *user, const resil_attempt_info *info) {
  if (info->next_wait_ns >= 0) resil_cancel_signal(user);
}

static void cancellation_stops_before_the_next_attempt(void **state) {
  (void)state;
  env e;
  env_init(&e);
  resil_cancel *c = NULL;
  assert_status(RESIL_OK, resil_cancel_new(&c));
  e.cfg.on_attempt = signal_on_wait; /* fires just before the wait */
  e.cfg.on_attempt_user = c;
  resil_retry *r = env_retry(&e);
  e.ctx.cancel = c;
  script s;
  script_init(&s, e.mc);
  script_push(&s, not_sent());
  resil_outcome o = resil_retry_run(r, &e.ctx, script_fn, &s);
  assert_int_equal(s.calls, 1);
  assert_int_equal(o.stop, RESIL_STOP_CANCELLED);
  assert_int_equal(o.kind, RESIL_NOT_SENT);
  /* Already cancelled: not even the first attempt. */
  o = resil_retry_run(r, &e.ctx, script_fn, &s);
  assert_int_equal(s.calls, 1);
  assert_int_equal(o.stop, RESIL_STOP_CANCELLED);
  assert_int_equal(o.kind, RESIL_NOT_SENT);
  assert_int_equal(o.reason, RESIL_REASON_CANCELLED);
  assert_int_equal(o.attempts, 0);
  resil_retry_free(r);
  resil_cancel_free(c);
  env_free(&e);
}

/* ---- folding of the final outcome ------------------------------------------------ */

static void not_sent_after_unknown_reports_prior_maybe_executed(void **state) {
  (void)state;
  env e;
  env_init(&e);
  e.cfg.wait_ns = 0;
  resil_retry *r = env_retry(&e);
  e.ctx.flags = RESIL_CALL_IDEMPOTENT;
  script s;
  script_init(&s, e.mc);
  script_push(&s, unknown());
  script_push(&s, not_sent());
  resil_outcome o = resil_retry_run(r, &e.ctx, script_fn, &s);
  assert_int_equal(s.calls, 3);
  assert_int_equal(o.kind, RESIL_UNKNOWN);
  assert_true(o.flags & RESIL_OF_PRIOR_MAYBE_EXECUTED);
  assert_int_equal(o.reason, RESIL_REASON_CONNECT_REFUSED);
  assert_int_equal(o.stop, RESIL_STOP_MAX_ATTEMPTS);
  assert_true(resil_outcome_maybe_executed(&o));

  /* A 503 may have executed too; a REJECTED last attempt folds the same. */
  e.cfg.retry_on_rejected = 1;
  resil_retry *r2 = env_retry(&e);
  script_init(&s, e.mc);
  script_push(&s, resil_outcome_http(503));
  script_push(&s, resil_outcome_make(RESIL_REJECTED, RESIL_REASON_BREAKER_OPEN));
  o = resil_retry_run(r2, &e.ctx, script_fn, &s);
  assert_int_equal(o.kind, RESIL_UNKNOWN);
  assert_int_equal(o.reason, RESIL_REASON_BREAKER_OPEN);
  assert_true(o.flags & RESIL_OF_PRIOR_MAYBE_EXECUTED);

  /* NOT_SENT throughout: nothing to fold. */
  script_init(&s, e.mc);
  script_push(&s, not_sent());
  o = resil_retry_run(r, &e.ctx, script_fn, &s);
  assert_int_equal(o.kind, RESIL_NOT_SENT);
  assert_false(o.flags & RESIL_OF_PRIOR_MAYBE_EXECUTED);
  resil_retry_free(r2);
  resil_retry_free(r);
  env_free(&e);
}

static void deadline_refusal_after_unknown_reports_prior_maybe_executed(
    void **state) {
  (void)state;
  env e;
  env_init(&e);
  e.cfg.max_attempts = 5;
  e.cfg.wait_ns = MS(50);
  resil_retry *r = env_retry(&e);
  e.ctx.flags = RESIL_CALL_STABLE_KEY;
  resil_ctx_set_timeout_ns(&e.ctx, MS(150));
  script s;
  script_init(&s, e.mc);
  s.spend_ns = MS(40);
  script_push(&s, unknown());
  script_push(&s, not_sent());
  resil_outcome o = resil_retry_run(r, &e.ctx, script_fn, &s);
  /* 0-40 UNKNOWN, wait to 90, 90-130 NOT_SENT, 20 ms left < 50 ms wait. */
  assert_int_equal(s.calls, 2);
  assert_int_equal(o.kind, RESIL_UNKNOWN);
  assert_int_equal(o.reason, RESIL_REASON_DEADLINE);
  assert_true(o.flags & RESIL_OF_PRIOR_MAYBE_EXECUTED);
  assert_int_equal(o.stop, RESIL_STOP_DEADLINE);
  assert_int_equal(o.attempts, 2);
  resil_retry_free(r);
  env_free(&e);
}

/* ---- context, split form, listener, stats ------------------------------------------- */

static void each_attempt_gets_the_callers_ctx_with_its_number(void **state) {
  (void)state;
  env e;
  env_init(&e);
  e.cfg.wait_ns = 0;
  resil_retry *r = env_retry(&e);
  int marker;
  e.ctx.user = &marker;
  e.ctx.flags = RESIL_CALL_IDEMPOTENT;
  resil_ctx_set_timeout_ns(&e.ctx, MS(1000));
  script s;
  script_init(&s, e.mc);
  script_push(&s, not_sent());
  script_push(&s, unknown());
  script_push(&s, resil_outcome_ok());
  resil_outcome o = resil_retry_run(r, &e.ctx, script_fn, &s);
  assert_int_equal(o.stop, RESIL_STOP_SUCCESS);
  assert_ptr_equal(s.user_seen, &marker);
  assert_int_equal(s.flags_seen, RESIL_CALL_IDEMPOTENT);
  assert_int_equal(s.deadline_seen, e.ctx.deadline_ns);
  assert_int_equal(s.attempt_seen[0], 1);
  assert_int_equal(s.attempt_seen[2], 3);
  assert_int_equal(e.ctx.attempt, 0); /* the caller's ctx is not changed */
  /* A NULL ctx means no deadline, flags 0, the retry's clock. */
  script_init(&s, e.mc);
  script_push(&s, not_sent());
  o = resil_retry_run(r, NULL, script_fn, &s);
  assert_int_equal(s.calls, 3);
  assert_int_equal(s.deadline_seen, RESIL_NO_DEADLINE);
  resil_retry_free(r);
  env_free(&e);
}

static void split_form_returns_delays_without_blocking(void **state) {
  (void)state;
  env e;
  env_init(&e);
  e.cfg.wait_ns = MS(250);
  resil_retry *r = env_retry(&e);
  resil_retry_state *st = NULL;
  assert_status(RESIL_OK, resil_retry_state_new(NULL, &st));
  assert_int_equal(resil_retry_begin(r, &e.ctx, st), RESIL_DECISION_GO);
  assert_int_equal(resil_retry_state_ctx(st)->attempt, 1);
  resil_outcome o = not_sent();
  int64_t delay = -1;
  assert_int_equal(resil_retry_next(r, st, &o, &delay), RESIL_DECISION_WAIT);
  assert_int_equal(delay, MS(250));
  assert_int_equal(resil_retry_state_ctx(st)->attempt, 2);
  o = resil_outcome_ok();
  assert_int_equal(resil_retry_next(r, st, &o, &delay), RESIL_DECISION_DENY);
  assert_int_equal(delay, 0);
  resil_outcome f = resil_retry_result(st);
  assert_int_equal(f.stop, RESIL_STOP_SUCCESS);
  assert_int_equal(f.attempts, 2);
  /* Stopped stays stopped. */
  o = not_sent();
  assert_int_equal(resil_retry_next(r, st, &o, NULL), RESIL_DECISION_DENY);
  assert_int_equal(resil_retry_result(st).stop, RESIL_STOP_SUCCESS);
  assert_int_equal(resil_manual_clock_slept_ns(e.mc), 0);
  assert_int_equal(resil_manual_clock_now_ns(e.mc), 0);
  /* The state is reused for the next logical call; a zero wait is GO. */
  resil_retry_free(r);
  e.cfg.wait_ns = 0;
  r = env_retry(&e);
  assert_int_equal(resil_retry_begin(r, &e.ctx, st), RESIL_DECISION_GO);
  o = not_sent();
  delay = -1;
  assert_int_equal(resil_retry_next(r, st, &o, &delay), RESIL_DECISION_GO);
  assert_int_equal(delay, 0);
  resil_retry_state_free(st);
  resil_retry_state_free(NULL);
  assert_null(resil_retry_state_ctx(NULL));
  resil_retry_free(r);
  env_free(&e);
}

#define SEEN_MAX 8
typedef struct seen_attempts {
  resil_attempt_info info[SEEN_MAX];
  char source[SEEN_MAX][16];
  int n;
} seen_attempts;

static void record_attempt(void *user, const resil_attempt_info *info) {
  seen_attempts *s = user;
  if (s->n >= SEEN_MAX) return;
  s->info[s->n] = *info;
  snprintf(s->source[s->n], sizeof s->source[0], "%s", info->source);
  s->n++;
}

/* The attempt listener sees every physical attempt, the last one too:
 * number, outcome, duration (measured on the clock), the wait before it,
 * the next wait (-1 for the last), the stop, the key and the source. */
static void listener_sees_every_attempt_the_last_included(void **state) {
  (void)state;
  env e;
  env_init(&e);
  seen_attempts seen;
  memset(&seen, 0, sizeof seen);
  e.cfg.name = "items";
  e.cfg.backoff = RESIL_RETRY_EXPONENTIAL;
  e.cfg.initial_wait_ns = MS(20);
  e.cfg.multiplier = 2.0;
  e.cfg.on_attempt = record_attempt;
  e.cfg.on_attempt_user = &seen;
  resil_retry *r = env_retry(&e);
  e.ctx.flags = RESIL_CALL_IDEMPOTENT;
  e.ctx.idempotency_key = "key-42";
  script s;
  script_init(&s, e.mc);
  s.spend_ns = MS(7);
  script_push(&s, resil_outcome_http(502));
  script_push(&s, resil_outcome_http(503));
  script_push(&s, resil_outcome_http(504));
  resil_outcome o = resil_retry_run(r, &e.ctx, script_fn, &s);
  assert_int_equal(o.stop, RESIL_STOP_MAX_ATTEMPTS);
  assert_int_equal(seen.n, 3);
  const int statuses[3] = {502, 503, 504};
  const int64_t before[3] = {0, MS(20), MS(40)};
  const int64_t next[3] = {MS(20), MS(40), -1};
  const resil_stop stops[3] = {RESIL_STOP_NONE, RESIL_STOP_NONE,
                               RESIL_STOP_MAX_ATTEMPTS};
  for (int i = 0; i < 3; i++) {
    const resil_attempt_info *a = &seen.info[i];
    assert_int_equal(a->struct_size, sizeof *a);
    assert_string_equal(seen.source[i], "items");
    assert_int_equal(a->attempt, (uint32_t)i + 1);
    assert_int_equal(a->outcome.http_status, statuses[i]);
    assert_int_equal(a->duration_ns, MS(7));
    assert_int_equal(a->wait_before_ns, before[i]);
    assert_int_equal(a->next_wait_ns, next[i]);
    assert_int_equal(a->stop, stops[i]);
    assert_string_equal(a->idempotency_key, "key-42");
  }

  /* A success on the first attempt is reported too (the run form's fast
   * path is not taken with a listener). */
  memset(&seen, 0, sizeof seen);
  resil_ctx plain;
  resil_ctx_init(&plain);
  plain.clock = e.ctx.clock;
  script_init(&s, e.mc);
  script_push(&s, resil_outcome_ok());
  o = resil_retry_run(r, &plain, script_fn, &s);
  assert_int_equal(seen.n, 1);
  assert_int_equal(seen.info[0].stop, RESIL_STOP_SUCCESS);
  assert_int_equal(seen.info[0].next_wait_ns, -1);
  assert_null(seen.info[0].idempotency_key);

  /* The refusal of the next attempt is the last attempt's stop. */
  memset(&seen, 0, sizeof seen);
  resil_ctx_set_timeout_ns(&e.ctx, MS(10));
  script_init(&s, e.mc);
  script_push(&s, not_sent());
  o = resil_retry_run(r, &e.ctx, script_fn, &s);
  assert_int_equal(o.reason, RESIL_REASON_DEADLINE);
  assert_int_equal(seen.n, 1);
  assert_int_equal(seen.info[0].outcome.kind, RESIL_NOT_SENT); /* as it ended */
  assert_int_equal(seen.info[0].stop, RESIL_STOP_DEADLINE);
  assert_int_equal(seen.info[0].next_wait_ns, -1);
  resil_retry_free(r);
  env_free(&e);
}

/* The split form reports too: with the duration the caller passes, or,
 * with -1, the time from the decision (plus the wait it asked for) to the
 * next call, on the context's clock. */
static void split_form_reports_attempts_with_given_or_measured_duration(
    void **state) {
  (void)state;
  env e;
  env_init(&e);
  seen_attempts seen;
  memset(&seen, 0, sizeof seen);
  e.cfg.wait_ns = MS(30);
  e.cfg.on_attempt = record_attempt;
  e.cfg.on_attempt_user = &seen;
  resil_retry *r = env_retry(&e);
  resil_retry_state *st = NULL;
  assert_status(RESIL_OK, resil_retry_state_new(NULL, &st));
  assert_int_equal(resil_retry_begin(r, &e.ctx, st), RESIL_DECISION_GO);
  resil_manual_clock_advance_ns(e.mc, MS(5));
  resil_outcome o = not_sent();
  int64_t wait = 0;
  assert_int_equal(resil_retry_next(r, st, &o, &wait), RESIL_DECISION_WAIT);
  assert_int_equal(seen.n, 1);
  assert_int_equal(seen.info[0].duration_ns, MS(5)); /* measured */
  assert_int_equal(seen.info[0].next_wait_ns, MS(30));
  assert_string_equal(seen.source[0], "retry");
  /* The caller waits 30 ms, then the attempt takes 8 ms. */
  resil_manual_clock_advance_ns(e.mc, MS(30) + MS(8));
  assert_int_equal(resil_retry_next(r, st, &o, &wait), RESIL_DECISION_WAIT);
  assert_int_equal(seen.info[1].duration_ns, MS(8));
  assert_int_equal(seen.info[1].wait_before_ns, MS(30));
  /* A duration the caller measured is reported as given. */
  o = resil_outcome_ok();
  assert_int_equal(resil_retry_next_timed(r, st, &o, MS(123), &wait),
                   RESIL_DECISION_DENY);
  assert_int_equal(seen.n, 3);
  assert_int_equal(seen.info[2].duration_ns, MS(123));
  assert_int_equal(seen.info[2].attempt, 3);
  assert_int_equal(seen.info[2].next_wait_ns, -1);
  assert_int_equal(seen.info[2].stop, RESIL_STOP_SUCCESS);
  /* After the stop nothing more is reported. */
  assert_int_equal(resil_retry_next(r, st, &o, &wait), RESIL_DECISION_DENY);
  assert_int_equal(seen.n, 3);
  resil_retry_state_free(st);
  resil_retry_free(r);
  env_free(&e);
}

static void stats_count_calls_attempts_and_stops(void **state) {
  (void)state;
  env e;
  env_init(&e);
  e.cfg.wait_ns = 0;
  resil_retry *r = env_retry(&e);
  e.ctx.flags = RESIL_CALL_IDEMPOTENT;
  script s;
  /* ok first time, twice */
  for (int i = 0; i < 2; i++) {
    script_init(&s, e.mc);
    script_push(&s, resil_outcome_ok());
    resil_retry_run(r, &e.ctx, script_fn, &s);
  }
  /* ok after one retry */
  script_init(&s, e.mc);
  script_push(&s, not_sent());
  script_push(&s, resil_outcome_ok());
  resil_retry_run(r, &e.ctx, script_fn, &s);
  /* failed without retry (4xx) */
  script_init(&s, e.mc);
  script_push(&s, resil_outcome_http(404));
  resil_retry_run(r, &e.ctx, script_fn, &s);
  /* failed with retry (3 attempts) */
  script_init(&s, e.mc);
  script_push(&s, resil_outcome_http(503));
  resil_retry_run(r, &e.ctx, script_fn, &s);
  /* refused before the first attempt */
  resil_ctx late = e.ctx;
  resil_ctx_set_timeout_ns(&late, 0);
  resil_retry_run(r, &late, script_fn, &s);

  resil_retry_stats st;
  assert_status(RESIL_OK, resil_retry_get_stats(r, &st));
  assert_int_equal(st.calls, 6);
  assert_int_equal(st.attempts, 2 + 2 + 1 + 3 + 0);
  assert_int_equal(st.successful_without_retry, 2);
  assert_int_equal(st.successful_with_retry, 1);
  assert_int_equal(st.failed_without_retry, 2);
  assert_int_equal(st.failed_with_retry, 1);
  assert_int_equal(st.stops[RESIL_STOP_SUCCESS], 3);
  assert_int_equal(st.stops[RESIL_STOP_NOT_RETRYABLE], 1);
  assert_int_equal(st.stops[RESIL_STOP_MAX_ATTEMPTS], 1);
  assert_int_equal(st.stops[RESIL_STOP_DEADLINE], 1);
  assert_int_equal(st.stops[RESIL_STOP_NONE], 0);
  assert_int_equal(st.refused_by_deadline, 1);
  assert_int_equal(st.refused_by_budget, 0);
  assert_status(RESIL_EINVAL, resil_retry_get_stats(r, NULL));
  resil_retry_free(r);
  env_free(&e);
}

typedef struct counting_clock {
  resil_clock c;
  resil_manual_clock *mc;
  int reads;
} counting_clock;

static int64_t counting_now(void *self) {
  counting_clock *cc = self;
  cc->reads++;
  return resil_manual_clock_now_ns(cc->mc);
}

static void success_without_deadline_reads_no_clock(void **state) {
  (void)state;
  env e;
  env_init(&e);
  counting_clock cc;
  memset(&cc, 0, sizeof cc);
  cc.c.now_ns = counting_now;
  cc.c.self = &cc; /* the other hooks stay NULL: system defaults */
  cc.mc = e.mc;
  e.cfg.clock = &cc.c;
  resil_retry *r = env_retry(&e);
  script s;
  script_init(&s, e.mc);
  script_push(&s, resil_outcome_ok());
  cc.reads = 0;
  resil_outcome o = resil_retry_run(r, NULL, script_fn, &s);
  assert_int_equal(o.stop, RESIL_STOP_SUCCESS);
  assert_int_equal(o.attempts, 1);
  e.ctx.clock = &cc.c;
  o = resil_retry_run(r, &e.ctx, script_fn, &s);
  assert_int_equal(o.attempts, 1);
  assert_int_equal(cc.reads, 0);
  /* A deadline costs one read, before the first attempt. */
  e.ctx.deadline_ns = MS(1000);
  o = resil_retry_run(r, &e.ctx, script_fn, &s);
  assert_int_equal(o.stop, RESIL_STOP_SUCCESS);
  assert_int_equal(cc.reads, 1);
  resil_retry_free(r);
  env_free(&e);
}

/* ---- budget ---------------------------------------------------------------- */

static resil_retry_budget *make_budget(resil_retry_budget_config *bc) {
  resil_retry_budget *b = NULL;
  resil_error err;
  if (resil_retry_budget_new(bc, &b, &err) != RESIL_OK)
    fail_msg("resil_retry_budget_new: %s", err.msg);
  return b;
}

static void budget_limits_retries_to_percent_of_calls(void **state) {
  (void)state;
  env e;
  env_init(&e);
  resil_retry_budget_config bc;
  resil_retry_budget_config_init(&bc);
  bc.percent_can_retry_pct = 20;
  bc.min_retries_per_s = 0;
  bc.clock = resil_manual_clock_get(e.mc);
  resil_retry_budget *b = make_budget(&bc);
  e.cfg.wait_ns = 0;
  e.cfg.budget = b;
  resil_retry *r = env_retry(&e);
  int physical = 0, refused = 0;
  for (int i = 0; i < 100; i++) {
    script s;
    script_init(&s, e.mc);
    script_push(&s, not_sent());
    resil_outcome o = resil_retry_run(r, &e.ctx, script_fn, &s);
    physical += s.calls;
    if (o.stop == RESIL_STOP_BUDGET) {
      refused++;
      assert_int_equal(o.kind, RESIL_REJECTED);
      assert_int_equal(o.reason, RESIL_REASON_RETRY_BUDGET);
    }
  }
  /* 100 calls at 20 %: at most 20 retries during the outage. */
  assert_int_equal(physical - 100, 20);
  resil_retry_stats st;
  assert_status(RESIL_OK, resil_retry_get_stats(r, &st));
  assert_int_equal(st.refused_by_budget, (uint64_t)refused);
  assert_int_equal(st.attempts, (uint64_t)physical);
  assert_int_equal(resil_retry_budget_balance(b), 0);
  resil_retry_free(r);
  resil_retry_budget_free(b);
  env_free(&e);
}

static void budget_reserve_allows_min_retries_and_refills_after_ttl(
    void **state) {
  (void)state;
  env e;
  env_init(&e);
  resil_retry_budget_config bc;
  resil_retry_budget_config_init(&bc);
  bc.percent_can_retry_pct = 0;
  bc.min_retries_per_s = 1;
  bc.ttl_ns = MS(10000);
  bc.clock = resil_manual_clock_get(e.mc);
  resil_retry_budget *b = make_budget(&bc);
  assert_int_equal(resil_retry_budget_balance(b), 10);
  for (int i = 0; i < 10; i++) assert_true(resil_retry_budget_try_withdraw(b));
  assert_false(resil_retry_budget_try_withdraw(b));
  assert_int_equal(resil_retry_budget_balance(b), 0);
  /* Deposits at 0 % add nothing. */
  assert_status(RESIL_OK, resil_retry_budget_deposit(b));
  assert_false(resil_retry_budget_try_withdraw(b));
  /* The withdrawals expire with the window. */
  resil_manual_clock_advance_ns(e.mc, MS(11000));
  assert_int_equal(resil_retry_budget_balance(b), 10);
  assert_true(resil_retry_budget_try_withdraw(b));
  resil_retry_budget_free(b);
  env_free(&e);
}

static void budget_deposits_expire_after_ttl(void **state) {
  (void)state;
  env e;
  env_init(&e);
  resil_retry_budget_config bc;
  resil_retry_budget_config_init(&bc);
  bc.percent_can_retry_pct = 100;
  bc.min_retries_per_s = 0;
  bc.ttl_ns = MS(1000);
  bc.clock = resil_manual_clock_get(e.mc);
  resil_retry_budget *b = make_budget(&bc);
  for (int i = 0; i < 5; i++) assert_status(RESIL_OK, resil_retry_budget_deposit(b));
  assert_int_equal(resil_retry_budget_balance(b), 5);
  resil_manual_clock_advance_ns(e.mc, MS(500));
  assert_int_equal(resil_retry_budget_balance(b), 5);
  resil_manual_clock_advance_ns(e.mc, MS(600));
  assert_int_equal(resil_retry_budget_balance(b), 0);
  assert_false(resil_retry_budget_try_withdraw(b));
  /* A jump of hours loops over 10 slices at most and still works. */
  resil_manual_clock_advance_ns(e.mc, MS(3600000));
  assert_status(RESIL_OK, resil_retry_budget_deposit(b));
  assert_true(resil_retry_budget_try_withdraw(b));
  assert_false(resil_retry_budget_try_withdraw(b));
  resil_retry_budget_free(b);
  env_free(&e);
}

static void grpc_budget_allows_retries_only_above_half(void **state) {
  (void)state;
  resil_retry_budget_config bc;
  resil_retry_budget_config_init(&bc);
  bc.mode = RESIL_BUDGET_GRPC;
  bc.max_tokens = 10;
  bc.token_ratio_milli = 100;
  resil_retry_budget *b = make_budget(&bc);
  assert_int_equal(resil_retry_budget_balance(b), 10);
  assert_true(resil_retry_budget_try_withdraw(b)); /* takes nothing */
  assert_int_equal(resil_retry_budget_balance(b), 10);
  for (int i = 0; i < 4; i++)
    assert_status(RESIL_OK, resil_retry_budget_record_failure(b));
  assert_true(resil_retry_budget_try_withdraw(b)); /* 6 > 5 */
  assert_status(RESIL_OK, resil_retry_budget_record_failure(b));
  assert_false(resil_retry_budget_try_withdraw(b)); /* 5 is not > 5 */
  for (int i = 0; i < 20; i++) resil_retry_budget_record_failure(b);
  assert_int_equal(resil_retry_budget_balance(b), 0); /* floored */
  for (int i = 0; i < 51; i++) resil_retry_budget_deposit(b);
  assert_int_equal(resil_retry_budget_balance(b), 5); /* 5.1 */
  assert_true(resil_retry_budget_try_withdraw(b));
  for (int i = 0; i < 1000; i++) resil_retry_budget_deposit(b);
  assert_int_equal(resil_retry_budget_balance(b), 10); /* capped */
  resil_retry_budget_free(b);
}

static void grpc_budget_in_a_retry_counts_failed_attempts(void **state) {
  (void)state;
  env e;
  env_init(&e);
  resil_retry_budget_config bc;
  resil_retry_budget_config_init(&bc);
  bc.mode = RESIL_BUDGET_GRPC;
  bc.max_tokens = 4;
  resil_retry_budget *b = make_budget(&bc);
  e.cfg.wait_ns = 0;
  e.cfg.max_attempts = 5;
  e.cfg.budget = b;
  resil_retry *r = env_retry(&e);
  script s;
  script_init(&s, e.mc);
  script_push(&s, not_sent());
  resil_outcome o = resil_retry_run(r, &e.ctx, script_fn, &s);
  /* 4 -> 3 (retry: 3 > 2) -> 2 (refused: 2 is not > 2). */
  assert_int_equal(s.calls, 2);
  assert_int_equal(o.stop, RESIL_STOP_BUDGET);
  assert_int_equal(o.kind, RESIL_REJECTED);
  assert_int_equal(o.reason, RESIL_REASON_RETRY_BUDGET);
  assert_int_equal(resil_retry_budget_balance(b), 2);
  resil_retry_free(r);
  resil_retry_budget_free(b);
  env_free(&e);
}

static void budget_refusal_after_unknown_reports_prior_maybe_executed(
    void **state) {
  (void)state;
  env e;
  env_init(&e);
  resil_retry_budget_config bc;
  resil_retry_budget_config_init(&bc);
  bc.percent_can_retry_pct = 0;
  bc.min_retries_per_s = 1;
  bc.ttl_ns = MS(1000); /* a reserve of exactly one retry */
  bc.clock = resil_manual_clock_get(e.mc);
  resil_retry_budget *b = make_budget(&bc);
  e.cfg.wait_ns = 0;
  e.cfg.budget = b;
  resil_retry *r = env_retry(&e);
  e.ctx.flags = RESIL_CALL_IDEMPOTENT;
  script s;
  script_init(&s, e.mc);
  script_push(&s, unknown());
  script_push(&s, not_sent());
  resil_outcome o = resil_retry_run(r, &e.ctx, script_fn, &s);
  assert_int_equal(s.calls, 2);
  assert_int_equal(o.stop, RESIL_STOP_BUDGET);
  assert_int_equal(o.kind, RESIL_UNKNOWN);
  assert_int_equal(o.reason, RESIL_REASON_RETRY_BUDGET);
  assert_true(o.flags & RESIL_OF_PRIOR_MAYBE_EXECUTED);
  resil_retry_free(r);
  resil_retry_budget_free(b);
  env_free(&e);
}

/* ---- static amplification ---------------------------------------------------- */

static void worst_case_helpers_give_attempts_and_waits(void **state) {
  (void)state;
  resil_retry_config c;
  resil_retry_config_init(&c);
  /* P14: nested layers of 2, 3 and 2 attempts multiply to 12. */
  uint32_t layers[] = {2, 3, 2};
  uint64_t worst = 1;
  for (size_t i = 0; i < 3; i++) {
    c.max_attempts = layers[i];
    resil_retry *r = NULL;
    assert_status(RESIL_OK, resil_retry_new(&c, &r, NULL));
    worst *= resil_retry_max_attempts(r);
    resil_retry_free(r);
  }
  assert_int_equal(worst, 12);

  c.max_attempts = 3;
  c.respect_retry_after = 0;
  assert_int_equal(resil_retry_worst_wait_ns(&c), MS(1000)); /* 2 x 500 ms */
  c.respect_retry_after = 1; /* each wait may be a Retry-After up to 30 s */
  assert_int_equal(resil_retry_worst_wait_ns(&c), MS(60000));
  c.max_retry_after_ns = MS(200); /* below the fixed wait: no change */
  assert_int_equal(resil_retry_worst_wait_ns(&c), MS(1000));

  c.max_attempts = 4;
  c.backoff = RESIL_RETRY_EXPONENTIAL;
  c.initial_wait_ns = MS(20);
  c.multiplier = 2.0;
  c.max_wait_ns = MS(50);
  c.max_retry_after_ns = 0;
  assert_int_equal(resil_retry_worst_wait_ns(&c), MS(20 + 40 + 50) + MS(40));
  c.respect_retry_after = 0;
  assert_int_equal(resil_retry_worst_wait_ns(&c), MS(20 + 40 + 50));
  c.backoff = RESIL_RETRY_EXPONENTIAL_FULL_JITTER;
  assert_int_equal(resil_retry_worst_wait_ns(&c), MS(20 + 40 + 50));
  c.backoff = RESIL_RETRY_DECORRELATED_JITTER;
  c.initial_wait_ns = MS(10);
  c.max_wait_ns = MS(100);
  assert_int_equal(resil_retry_worst_wait_ns(&c), MS(30 + 90 + 100));
  /* The handle gives the same figure as its config (the chain uses it). */
  c.respect_retry_after = 1;
  c.max_retry_after_ns = MS(70);
  resil_retry *h = NULL;
  assert_status(RESIL_OK, resil_retry_new(&c, &h, NULL));
  assert_int_equal(resil__retry_worst_wait_of(h), resil_retry_worst_wait_ns(&c));
  assert_int_equal(resil__retry_worst_wait_of(h), MS(70 + 90 + 100));
  resil_retry_free(h);
  assert_int_equal(resil__retry_worst_wait_of(NULL), -1);
  c.max_attempts = 1;
  assert_int_equal(resil_retry_worst_wait_ns(&c), 0);
  c.max_attempts = 0;
  assert_int_equal(resil_retry_worst_wait_ns(&c), -1);
  assert_int_equal(resil_retry_worst_wait_ns(NULL), -1);
}

/* ---- validation, allocation, misuse ----------------------------------------------- */

typedef struct bad_field {
  const char *field;
  void (*apply)(resil_retry_config *c);
  int has_range;
  int64_t min, max, got;
} bad_field;

static void bad_attempts_low(resil_retry_config *c) { c->max_attempts = 0; }
static void bad_attempts_high(resil_retry_config *c) { c->max_attempts = 1001; }
static void bad_backoff(resil_retry_config *c) { c->backoff = (resil_retry_backoff)7; }
static void bad_wait(resil_retry_config *c) { c->wait_ns = -1; }
static void bad_initial(resil_retry_config *c) { c->initial_wait_ns = MS(1) - 1; }
static void bad_max_wait(resil_retry_config *c) {
  c->initial_wait_ns = MS(100);
  c->max_wait_ns = MS(50);
}
static void bad_respect(resil_retry_config *c) { c->respect_retry_after = 2; }
static void bad_ra_cap(resil_retry_config *c) { c->max_retry_after_ns = -1; }
static void bad_rejected(resil_retry_config *c) { c->retry_on_rejected = -1; }
static void bad_unsafe(resil_retry_config *c) { c->unsafe_retry_non_idempotent = 3; }
static void bad_min_budget(resil_retry_config *c) {
  c->min_attempt_budget_ns = RESIL_RETRY_MAX_DURATION_NS + 1;
}

static void validation_reports_field_range_and_value(void **state) {
  (void)state;
  const int64_t day = RESIL_RETRY_MAX_DURATION_NS;
  bad_field cases[] = {
      {"max_attempts", bad_attempts_low, 1, 1, 1000, 0},
      {"max_attempts", bad_attempts_high, 1, 1, 1000, 1001},
      {"backoff", bad_backoff, 1, 0, 4, 7},
      {"wait_ns", bad_wait, 1, 0, day, -1},
      {"initial_wait_ns", bad_initial, 1, MS(1), day, MS(1) - 1},
      {"max_wait_ns", bad_max_wait, 1, MS(100), day, MS(50)},
      {"respect_retry_after", bad_respect, 1, 0, 1, 2},
      {"max_retry_after_ns", bad_ra_cap, 1, 0, day, -1},
      {"retry_on_rejected", bad_rejected, 1, 0, 1, -1},
      {"unsafe_retry_non_idempotent", bad_unsafe, 1, 0, 1, 3},
      {"min_attempt_budget_ns", bad_min_budget, 1, 0, day, day + 1},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    resil_retry_config c;
    resil_retry_config_init(&c);
    cases[i].apply(&c);
    resil_retry *r = (resil_retry *)&c; /* must stay untouched */
    resil_error err;
    assert_status(RESIL_EINVAL, resil_retry_new(&c, &r, &err));
    assert_ptr_equal(r, (resil_retry *)&c);
    assert_int_equal(err.status, RESIL_EINVAL);
    assert_string_equal(err.field, cases[i].field);
    assert_int_equal(err.has_range, cases[i].has_range);
    assert_int_equal(err.min, cases[i].min);
    assert_int_equal(err.max, cases[i].max);
    assert_int_equal(err.got, cases[i].got);
  }
  resil_retry_config c;
  resil_error err;
  resil_retry *r = NULL;
  resil_retry_config_init(&c);
  c.max_attempts = 0;
  assert_status(RESIL_EINVAL, resil_retry_new(&c, &r, &err));
  assert_string_equal(err.msg, "max_attempts: must be 1..1000, got 0");
  /* Durations speak human units. */
  resil_retry_config_init(&c);
  c.initial_wait_ns = 200;
  assert_status(RESIL_EINVAL, resil_retry_new(&c, &r, &err));
  assert_string_equal(err.msg, "initial_wait_ns: must be 1 ms..1 d, got 200 ns");
  assert_int_equal(err.min, MS(1)); /* the range data stays in ns */
  resil_retry_config_init(&c);
  c.initial_wait_ns = MS(100);
  c.max_wait_ns = MS(50);
  assert_status(RESIL_EINVAL, resil_retry_new(&c, &r, &err));
  assert_string_equal(err.msg,
                      "max_wait_ns: must be initial_wait_ns (100 ms)..1 d, got 50 ms");
  /* A config never passed through _init is refused, naming the fix; so is
   * a budget config. */
  memset(&c, 0, sizeof c);
  c.max_attempts = 3;
  assert_status(RESIL_EINVAL, resil_retry_new(&c, &r, &err));
  assert_null(r);
  assert_string_equal(err.field, "struct_size");
  assert_non_null(strstr(err.msg, "call resil_retry_config_init()"));
  c.struct_size = (size_t)0x5a5a5a5a5a5aULL; /* garbage */
  assert_status(RESIL_EINVAL, resil_retry_new(&c, &r, &err));
  assert_non_null(strstr(err.msg, "call resil_retry_config_init()"));
  assert_int_equal(resil_retry_worst_wait_ns(&c), -1);
  resil_retry_budget_config raw_b;
  memset(&raw_b, 0, sizeof raw_b);
  resil_retry_budget *rb = NULL;
  assert_status(RESIL_EINVAL, resil_retry_budget_new(&raw_b, &rb, &err));
  assert_non_null(strstr(err.msg, "call resil_retry_budget_config_init()"));

  double bad_mult[] = {0.99, 100.5, NAN};
  for (size_t i = 0; i < 3; i++) {
    resil_retry_config_init(&c);
    c.multiplier = bad_mult[i];
    assert_status(RESIL_EINVAL, resil_retry_new(&c, &r, &err));
    assert_string_equal(err.field, "multiplier");
  }
  resil_retry_config_init(&c);
  c.retry_classes |= RESIL_CLASS_BIT(RESIL_CLASS_CLIENT_ERROR);
  assert_status(RESIL_EINVAL, resil_retry_new(&c, &r, &err));
  assert_string_equal(err.field, "retry_classes");
  resil_retry_config_init(&c);
  c.retry_classes = RESIL_CLASS_BIT(RESIL_CLASS_REJECTED);
  assert_status(RESIL_EINVAL, resil_retry_new(&c, &r, &err));
  assert_string_equal(err.field, "retry_classes");
  resil_retry_config_init(&c);
  int not_a_budget[16] = {0};
  c.budget = (resil_retry_budget *)not_a_budget;
  assert_status(RESIL_EINVAL, resil_retry_new(&c, &r, &err));
  assert_string_equal(err.field, "budget");
  resil_retry_config_init(&c);
  resil_clock no_now = {0};
  c.clock = &no_now;
  assert_status(RESIL_EINVAL, resil_retry_new(&c, &r, &err));
  assert_string_equal(err.field, "clock");
  assert_status(RESIL_EINVAL, resil_retry_new(NULL, &r, &err));
  assert_status(RESIL_EINVAL, resil_retry_new(&c, NULL, NULL));
  assert_null(r);

  /* The budget validates too. */
  resil_retry_budget_config bc;
  resil_retry_budget *b = NULL;
  resil_retry_budget_config_init(&bc);
  assert_int_equal(bc.struct_size, sizeof bc);
  assert_int_equal(bc.mode, RESIL_BUDGET_FINAGLE);
  assert_int_equal(bc.ttl_ns, MS(10000));
  assert_int_equal(bc.min_retries_per_s, 10);
  assert_int_equal(bc.percent_can_retry_pct, 20);
  assert_int_equal(bc.max_tokens, 10);
  assert_int_equal(bc.token_ratio_milli, 100);
  bc.ttl_ns = MS(999);
  assert_status(RESIL_EINVAL, resil_retry_budget_new(&bc, &b, &err));
  assert_string_equal(err.field, "ttl_ns");
  assert_int_equal(err.min, MS(1000));
  assert_int_equal(err.max, MS(3600000));
  assert_int_equal(err.got, MS(999));
  assert_string_equal(err.msg, "ttl_ns: must be 1 s..1 h, got 999 ms");
  resil_retry_budget_config_init(&bc);
  bc.percent_can_retry_pct = 1001;
  assert_status(RESIL_EINVAL, resil_retry_budget_new(&bc, &b, &err));
  assert_string_equal(err.field, "percent_can_retry_pct");
  resil_retry_budget_config_init(&bc);
  bc.max_tokens = 2;
  bc.token_ratio_milli = 2001;
  assert_status(RESIL_EINVAL, resil_retry_budget_new(&bc, &b, &err));
  assert_string_equal(err.field, "token_ratio_milli");
  assert_int_equal(err.max, 2000);
  assert_int_equal(err.got, 2001);
  resil_retry_budget_config_init(&bc);
  bc.mode = (resil_retry_budget_mode)2;
  assert_status(RESIL_EINVAL, resil_retry_budget_new(&bc, &b, &err));
  assert_string_equal(err.field, "mode");
  assert_null(b);
}

static int user_freed;
static void count_user_free(void *user) {
  (void)user;
  user_freed++;
}

static void allocation_failure_sweep_leaks_nothing(void **state) {
  (void)state;
  int succeeded = 0;
  for (long fail = 1; fail < 10 && !succeeded; fail++) {
    test_alloc ta;
    test_alloc_init(&ta, fail);
    resil_retry_config c;
    resil_retry_config_init(&c);
    c.name = "orders";
    c.alloc = &ta.a;
    resil_retry *r = NULL;
    resil_status st = resil_retry_new(&c, &r, NULL);
    if (st == RESIL_OK) {
      succeeded = 1;
      assert_string_equal(resil_retry_name(r), "orders");
      resil_retry_free(r);
    } else {
      assert_status(RESIL_ENOMEM, st);
      assert_null(r);
    }
    assert_int_equal(ta.live, 0);
  }
  assert_true(succeeded);

  succeeded = 0;
  for (long fail = 1; fail < 10 && !succeeded; fail++) {
    test_alloc ta;
    test_alloc_init(&ta, fail);
    resil_retry_budget_config c;
    resil_retry_budget_config_init(&c);
    c.name = "edge";
    c.alloc = &ta.a;
    resil_retry_budget *b = NULL;
    resil_status st = resil_retry_budget_new(&c, &b, NULL);
    if (st == RESIL_OK) {
      succeeded = 1;
      assert_string_equal(resil_retry_budget_name(b), "edge");
      resil_retry_budget_free(b);
    } else {
      assert_status(RESIL_ENOMEM, st);
      assert_null(b);
    }
    assert_int_equal(ta.live, 0);
  }
  assert_true(succeeded);
}

static void names_defaults_and_user_free(void **state) {
  (void)state;
  resil_retry_config c;
  resil_retry_config_init(&c);
  user_freed = 0;
  c.user_free = count_user_free;
  resil_retry *r = NULL;
  assert_status(RESIL_OK, resil_retry_new(&c, &r, NULL));
  assert_string_equal(resil_retry_name(r), "retry");
  resil_retry_free(r);
  assert_int_equal(user_freed, 1);
  resil_retry_free(NULL);
  resil_retry_budget_free(NULL);
  resil_retry_budget_config bc;
  resil_retry_budget_config_init(&bc);
  resil_retry_budget *b = NULL;
  assert_status(RESIL_OK, resil_retry_budget_new(&bc, &b, NULL));
  assert_string_equal(resil_retry_budget_name(b), "retry-budget");
  resil_retry_budget_free(b);
}

static void invalid_handles_are_reported_as_misuse(void **state) {
  (void)state;
  script s;
  script_init(&s, NULL);
  script_push(&s, resil_outcome_ok());
  resil_outcome o = resil_retry_run(NULL, NULL, script_fn, &s);
  assert_int_equal(s.calls, 0);
  assert_int_equal(o.kind, RESIL_NOT_SENT);
  assert_int_equal(o.reason, RESIL_REASON_LOCAL_ERROR);
  assert_null(resil_retry_name(NULL));
  assert_int_equal(resil_retry_max_attempts(NULL), 0);
  resil_retry_stats st;
  assert_status(RESIL_EMISUSE, resil_retry_get_stats(NULL, &st));

  resil_retry_state *rs = NULL;
  assert_status(RESIL_EINVAL, resil_retry_state_new(NULL, NULL));
  resil_allocator half = {0};
  resil_retry_state *no_state = NULL;
  assert_status(RESIL_EINVAL, resil_retry_state_new(&half, &no_state));
  assert_null(no_state);
  assert_status(RESIL_OK, resil_retry_state_new(NULL, &rs));
  assert_int_equal(resil_retry_begin(NULL, NULL, rs), RESIL_DECISION_DENY);
  assert_int_equal(resil_retry_result(rs).reason, RESIL_REASON_LOCAL_ERROR);
  assert_int_equal(resil_retry_begin(NULL, NULL, NULL), RESIL_DECISION_DENY);
  assert_int_equal(resil_retry_result(NULL).kind, RESIL_NOT_SENT);

  resil_retry_config c;
  resil_retry_config_init(&c);
  resil_retry *r1 = NULL, *r2 = NULL;
  assert_status(RESIL_OK, resil_retry_new(&c, &r1, NULL));
  assert_status(RESIL_OK, resil_retry_new(&c, &r2, NULL));
  o = resil_retry_run(r1, NULL, NULL, NULL);
  assert_int_equal(o.reason, RESIL_REASON_LOCAL_ERROR);
  /* A ctx never passed through resil_ctx_init(): fn is not called. */
  resil_ctx raw;
  memset(&raw, 0, sizeof raw);
  script_init(&s, NULL);
  script_push(&s, resil_outcome_ok());
  o = resil_retry_run(r1, &raw, script_fn, &s);
  assert_int_equal(s.calls, 0);
  assert_int_equal(o.reason, RESIL_REASON_LOCAL_ERROR);
  assert_int_equal(resil_retry_begin(r1, &raw, rs), RESIL_DECISION_DENY);
  assert_int_equal(resil_retry_result(rs).reason, RESIL_REASON_LOCAL_ERROR);
  resil_retry_stats none;
  assert_status(RESIL_OK, resil_retry_get_stats(r1, &none));
  assert_int_equal(none.calls, 0); /* misuse counts nothing */

  assert_int_equal(resil_retry_begin(r1, NULL, rs), RESIL_DECISION_GO);
  resil_outcome fail = not_sent();
  int64_t delay = 123;
  assert_int_equal(resil_retry_next(r2, rs, &fail, &delay), RESIL_DECISION_DENY);
  assert_int_equal(delay, 0);
  assert_int_equal(resil_retry_next(r1, rs, NULL, &delay), RESIL_DECISION_DENY);
  assert_int_equal(resil_retry_next(r1, NULL, &fail, &delay), RESIL_DECISION_DENY);
  /* None of the misuses recorded anything: the call is still open. */
  assert_int_equal(resil_retry_next(r1, rs, &fail, &delay), RESIL_DECISION_WAIT);
  resil_retry_state_free(rs);
  resil_retry_free(r1);
  resil_retry_free(r2);

  assert_status(RESIL_EMISUSE, resil_retry_budget_deposit(NULL));
  assert_status(RESIL_EMISUSE, resil_retry_budget_record_failure(NULL));
  assert_false(resil_retry_budget_try_withdraw(NULL));
  assert_int_equal(resil_retry_budget_balance(NULL), 0);
  assert_null(resil_retry_budget_name(NULL));
}


/* Records the clock each attempt's ctx names. */
typedef struct clock_seen {
  script s;
  const resil_clock *clock[MAX_CALLS];
} clock_seen;

static resil_outcome clock_seen_fn(void *arg, const resil_ctx *ctx) {
  clock_seen *c = arg;
  if (c->s.calls < MAX_CALLS) c->clock[c->s.calls] = ctx->clock;
  return script_fn(&c->s, ctx);
}

/* Without a ctx, the run form's first attempt gets the retry's constant
 * ctx: attempt 1 on the retry's clock, the defaults otherwise; the attempts
 * after it count on, and the next logical call starts at 1 again (the
 * constant ctx is never written). */
static void run_without_ctx_numbers_attempts_on_the_retrys_clock(void **state) {
  (void)state;
  env e;
  env_init(&e);
  resil_retry *r = env_retry(&e);
  const resil_clock *mclk = resil_manual_clock_get(e.mc);
  for (int k = 0; k < 2; k++) {
    clock_seen c;
    memset(&c, 0, sizeof c);
    script_init(&c.s, e.mc);
    script_push(&c.s, not_sent());
    script_push(&c.s, resil_outcome_ok());
    resil_outcome o = resil_retry_run(r, NULL, clock_seen_fn, &c);
    assert_true(resil_outcome_is_success(&o));
    assert_int_equal(o.stop, RESIL_STOP_SUCCESS);
    assert_int_equal(o.attempts, 2);
    assert_int_equal(c.s.calls, 2);
    assert_int_equal(c.s.attempt_seen[0], 1);
    assert_int_equal(c.s.attempt_seen[1], 2);
    assert_ptr_equal(c.clock[0], mclk);
    assert_ptr_equal(c.clock[1], mclk);
    assert_int_equal(c.s.deadline_seen, RESIL_NO_DEADLINE);
    assert_int_equal(c.s.flags_seen, 0);
    assert_null(c.s.user_seen);
  }
  /* A plain success: one attempt, attempt 1, reported as such. */
  clock_seen c;
  memset(&c, 0, sizeof c);
  script_init(&c.s, e.mc);
  script_push(&c.s, resil_outcome_ok());
  resil_outcome o = resil_retry_run(r, NULL, clock_seen_fn, &c);
  assert_int_equal(o.stop, RESIL_STOP_SUCCESS);
  assert_int_equal(o.attempts, 1);
  assert_int_equal(o.retry_after_ms, -1);
  assert_int_equal(c.s.attempt_seen[0], 1);
  assert_ptr_equal(c.clock[0], mclk);
  resil_retry_stats rs;
  assert_status(RESIL_OK, resil_retry_get_stats(r, &rs));
  assert_int_equal(rs.calls, 3);
  assert_int_equal(rs.attempts, 5);
  assert_int_equal(rs.successful_without_retry, 1);
  assert_int_equal(rs.successful_with_retry, 2);
  resil_retry_free(r);
  env_free(&e);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(config_init_writes_documented_defaults),
      cmocka_unit_test(max_attempts_counts_the_first_attempt),
      cmocka_unit_test(run_without_ctx_numbers_attempts_on_the_retrys_clock),
      cmocka_unit_test(exponential_20ms_x2_waits_20_then_40_ms),
      cmocka_unit_test(fixed_wait_is_the_same_between_every_attempt),
      cmocka_unit_test(exponential_truncates_each_step_to_whole_ms_and_caps),
      cmocka_unit_test(full_jitter_spans_zero_to_base),
      cmocka_unit_test(equal_jitter_spans_half_base_to_base),
      cmocka_unit_test(
          decorrelated_jitter_stays_within_initial_and_three_times_previous),
      cmocka_unit_test(default_random_jitter_stays_within_bounds_and_varies),
      cmocka_unit_test(retry_after_replaces_computed_wait_even_when_shorter),
      cmocka_unit_test(retry_after_is_capped_by_max_wait_or_max_retry_after),
      cmocka_unit_test(retry_after_beyond_deadline_stops_without_sleeping),
      cmocka_unit_test(unusable_retry_after_falls_back_to_computed_wait),
      cmocka_unit_test(retry_after_zero_or_past_date_falls_back_to_backoff),
      cmocka_unit_test(retry_after_that_uses_up_the_deadline_ends_at_once),
      cmocka_unit_test(unknown_is_not_retried_without_idempotent_or_stable_key),
      cmocka_unit_test(unknown_is_retried_for_idempotent_or_keyed_operation),
      cmocka_unit_test(throttled_and_5xx_follow_the_same_safety_rule),
      cmocka_unit_test(unsafe_opt_in_retries_non_idempotent_operation),
      cmocka_unit_test(client_error_is_never_retried),
      cmocka_unit_test(rejected_is_not_retried_unless_opted_in),
      cmocka_unit_test(retry_classes_mask_narrows_what_is_retried),
      cmocka_unit_test(predicate_overrides_class_but_not_safety),
      cmocka_unit_test(deadline_refuses_next_attempt_without_sleeping),
      cmocka_unit_test(min_attempt_budget_refuses_attempt_that_cannot_fit),
      cmocka_unit_test(deadline_too_short_refuses_first_attempt),
      cmocka_unit_test(wait_never_sleeps_past_the_deadline),
      cmocka_unit_test(cancellation_stops_before_the_next_attempt),
      cmocka_unit_test(not_sent_after_unknown_reports_prior_maybe_executed),
      cmocka_unit_test(
          deadline_refusal_after_unknown_reports_prior_maybe_executed),
      cmocka_unit_test(each_attempt_gets_the_callers_ctx_with_its_number),
      cmocka_unit_test(split_form_returns_delays_without_blocking),
      cmocka_unit_test(listener_sees_every_attempt_the_last_included),
      cmocka_unit_test(split_form_reports_attempts_with_given_or_measured_duration),
      cmocka_unit_test(stats_count_calls_attempts_and_stops),
      cmocka_unit_test(success_without_deadline_reads_no_clock),
      cmocka_unit_test(budget_limits_retries_to_percent_of_calls),
      cmocka_unit_test(budget_reserve_allows_min_retries_and_refills_after_ttl),
      cmocka_unit_test(budget_deposits_expire_after_ttl),
      cmocka_unit_test(grpc_budget_allows_retries_only_above_half),
      cmocka_unit_test(grpc_budget_in_a_retry_counts_failed_attempts),
      cmocka_unit_test(budget_refusal_after_unknown_reports_prior_maybe_executed),
      cmocka_unit_test(worst_case_helpers_give_attempts_and_waits),
      cmocka_unit_test(validation_reports_field_range_and_value),
      cmocka_unit_test(allocation_failure_sweep_leaks_nothing),
      cmocka_unit_test(names_defaults_and_user_free),
      cmocka_unit_test(invalid_handles_are_reported_as_misuse),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
