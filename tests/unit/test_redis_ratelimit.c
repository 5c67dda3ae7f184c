/* libresil-redis's limiter (include/resil/redis.h) on a redis-server the
 * test starts: the config's errors name their field (a URI's password
 * never shown), GCRA's burst, rate, reservations and refusals, NOSCRIPT
 * after SCRIPT FLUSH reloaded once, AUTH and SELECT from the URI, a key
 * holding another rate refused by the script, and the peek. The threads,
 * the processes and a frozen Redis are test_redis_ratelimit_mt's. */
#include <string.h>

#include "redis/redis_int.h"
#include "resil/metrics.h"
#include "test_redis_common.h"

static void config_errors_name_the_field(void **state) {
  (void)state;
  resil_redis_ratelimiter_config cfg;
  resil_ratelimiter *rl = NULL;
  resil_error err;
  struct {
    const char *uri;
    const char *why;
  } bad[] = {
      {NULL, "must be set"},
      {"http://127.0.0.1:6379", "scheme"},
      {"redis://", "no host"},
      {"redis://127.0.0.1:0/0", "port"},
      {"redis://127.0.0.1:65536", "port"},
      {"redis://127.0.0.1:12x/0", "port"},
      {"redis://127.0.0.1:6379/x", "database"},
      {"redis://127.0.0.1:6379/0?timeout=1", "query"},
      {"redis://[::1:6379/0", "IPv6"},
      {"redis://user@127.0.0.1/0", "userinfo"},
      {"redis://:pa%zzss@127.0.0.1/0", "percent"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    resil_redis_ratelimiter_config_init(&cfg);
    cfg.uri = bad[i].uri;
    assert_status(RESIL_EINVAL, resil_redis_ratelimiter_new(&cfg, &rl, &err));
    assert_string_equal(err.field, "uri");
    if (!strstr(err.msg, bad[i].why)) fail_msg("%s: %s", bad[i].uri ? bad[i].uri : "NULL", err.msg);
  }
  /* The password is never shown, even when the URI is wrong elsewhere. */
  resil_redis_ratelimiter_config_init(&cfg);
  cfg.uri = "redis://alice:s3cr3t-pw@127.0.0.1:99999/0";
  assert_status(RESIL_EINVAL, resil_redis_ratelimiter_new(&cfg, &rl, &err));
  assert_null(strstr(err.msg, "s3cr3t"));
  assert_non_null(strstr(err.msg, "[REDACTED]"));
  assert_non_null(strstr(err.msg, "127.0.0.1:99999"));

  struct {
    const char *field;
    void (*set)(resil_redis_ratelimiter_config *);
  } fields[] = {
      {"limit_for_period", NULL}, {"refresh_period_ns", NULL}, {"burst", NULL},
      {"timeout_ns", NULL},       {"redis_timeout_ns", NULL},  {"failure", NULL},
      {"expected_instances", NULL}, {"connections", NULL},    {"key_prefix", NULL},
  };
  for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++) {
    resil_redis_ratelimiter_config_init(&cfg);
    cfg.uri = "redis://127.0.0.1:6379/0";
    switch (i) {
    case 0: cfg.limit_for_period = 0; break;
    case 1: cfg.refresh_period_ns = 1500; break; /* not whole microseconds */
    case 2: cfg.burst = INT64_C(2147483647); cfg.limit_for_period = 2000000; break;
    case 3: cfg.timeout_ns = -1; break;
    case 4: cfg.redis_timeout_ns = 100; break;
    case 5: cfg.failure = (resil_redis_failure)9; break;
    case 6: cfg.expected_instances = 0; break;
    case 7: cfg.connections = 65; break;
    default: cfg.key_prefix = NULL; break;
    }
    assert_status(RESIL_EINVAL, resil_redis_ratelimiter_new(&cfg, &rl, &err));
    if (strcmp(err.field, fields[i].field) != 0)
      fail_msg("case %zu: field %s, expected %s (%s)", i, err.field, fields[i].field, err.msg);
  }
  assert_null(rl);
  /* Never connects at creation: a limiter on a port nobody listens on is
   * made, and its decisions are the failure policy's. */
  resil_redis_ratelimiter_config_init(&cfg);
  char uri[64];
  snprintf(uri, sizeof uri, "redis://127.0.0.1:%d/0", resil_fx_free_port());
  cfg.uri = uri;
  cfg.failure = RESIL_REDIS_FAILURE_CLOSED;
  assert_status(RESIL_OK, resil_redis_ratelimiter_new(&cfg, &rl, &err));
  resil_reason why;
  int64_t w;
  assert_int_equal(resil_ratelimiter_reserve(rl, 1, NULL, &w, &why), RESIL_DECISION_DENY);
  assert_int_equal(why, RESIL_REASON_RATE_LIMITER_UNAVAILABLE);
  resil_redis_ratelimiter_metrics m = redis_metrics(rl);
  assert_int_equal(m.fallback_closed, 1);
  assert_int_equal(m.redis_errors, 1);
  resil_ratelimiter_free(rl);
}

/* 10 per 100 ms (one permit every 10 ms), burst 5: five at once, then one
 * each 10 ms; a reservation waits what is left, rounded up. */
static void gcra_burst_rate_and_reservations(void **state) {
  (void)state;
  static redis_srv s; /* static: the teardown may stop it after a failure */
  redis_start(&s);
  resil_ratelimiter *rl =
      redis_rl(&s, "gcra", 10, MS(100), 5, 0, RESIL_REDIS_FAILURE_CLOSED);
  resil_reason why;
  int64_t w;
  for (int i = 0; i < 5; i++)
    assert_int_equal(resil_ratelimiter_reserve(rl, 1, NULL, &w, &why), RESIL_DECISION_GO);
  assert_int_equal(resil_ratelimiter_reserve(rl, 1, NULL, &w, &why), RESIL_DECISION_DENY);
  assert_int_equal(why, RESIL_REASON_RATE_LIMITED);
  assert_true(w > 0 && w <= MS(10));
  /* More than the burst can never be granted: refused without asking. */
  assert_int_equal(resil_ratelimiter_reserve(rl, 6, NULL, &w, &why), RESIL_DECISION_DENY);
  assert_int_equal(w, INT64_MAX);
  resil_redis_ratelimiter_metrics m = redis_metrics(rl);
  assert_int_equal(m.redis_decisions, 6);
  assert_int_equal(m.connects, 1);
  resil_ratelimiter_free(rl);

  /* The same key with a timeout: a reservation (WAIT) within it, one a
   * 40 ms deadline cannot cover refused with DEADLINE. */
  rl = redis_rl(&s, "gcra", 10, MS(100), 5, MS(100), RESIL_REDIS_FAILURE_CLOSED);
  assert_int_equal(resil_ratelimiter_reserve(rl, 2, NULL, &w, &why), RESIL_DECISION_WAIT);
  assert_true(w > MS(10) && w <= MS(30));
  resil_ctx ctx;
  resil_ctx_init(&ctx);
  resil_ctx_set_timeout_ns(&ctx, MS(40));
  assert_int_equal(resil_ratelimiter_reserve(rl, 5, &ctx, &w, &why), RESIL_DECISION_DENY);
  assert_int_equal(why, RESIL_REASON_DEADLINE);
  assert_true(w > MS(40) && w <= MS(100));
  /* acquire sleeps for its reservation. */
  int64_t t0 = mono_ns();
  assert_int_equal(resil_ratelimiter_acquire(rl, 1, NULL, &why), RESIL_DECISION_GO);
  assert_true(mono_ns() - t0 >= MS(20));
  /* The peek reads without consuming: negative, permits are owed. */
  int64_t a1 = resil_ratelimiter_available(rl), a2 = resil_ratelimiter_available(rl);
  assert_true(a1 <= 0 && a2 <= 0);
  assert_true(resil_ratelimiter_nanos_to_wait(rl) > 0);
  resil_ratelimiter_metrics lm;
  assert_status(RESIL_OK, resil_ratelimiter_get_metrics(rl, &lm));
  assert_int_equal(lm.reserved, 2);
  assert_int_equal(lm.refused, 1);
  resil_ratelimiter_free(rl);

  /* Another rate on the same key: the script refuses it (an error reply,
   * counted), and the failure policy decides. */
  rl = redis_rl(&s, "gcra", 20, MS(100), 5, 0, RESIL_REDIS_FAILURE_OPEN);
  assert_int_equal(resil_ratelimiter_reserve(rl, 1, NULL, &w, &why), RESIL_DECISION_GO);
  m = redis_metrics(rl);
  assert_int_equal(m.redis_errors, 1);
  assert_int_equal(m.fallback_open, 1);
  assert_int_equal(m.redis_decisions, 0);
  resil_ratelimiter_free(rl);
  redis_stop(&s);
}

/* A reserved wait cancelled (acquire with a signalled token): the permit
 * goes back to Redis, so the next caller waits one emission interval (5 s),
 * not two; as the local limiter gives back. */
static void a_cancelled_wait_gives_its_permit_back(void **state) {
  (void)state;
  static redis_srv s; /* static: the teardown may stop it after a failure */
  redis_start(&s);
  resil_ratelimiter *rl =
      redis_rl(&s, "giveback", 2, RESIL_S(10), 2, RESIL_S(30), RESIL_REDIS_FAILURE_CLOSED);
  resil_reason why;
  int64_t w;
  for (int i = 0; i < 2; i++)
    assert_int_equal(resil_ratelimiter_reserve(rl, 1, NULL, &w, &why), RESIL_DECISION_GO);
  resil_cancel *c;
  assert_status(RESIL_OK, resil_cancel_new(&c));
  resil_cancel_signal(c);
  resil_ctx ctx;
  resil_ctx_init(&ctx);
  ctx.cancel = c;
  assert_int_equal(resil_ratelimiter_acquire(rl, 1, &ctx, &why), RESIL_DECISION_DENY);
  assert_int_equal(why, RESIL_REASON_CANCELLED);
  resil_cancel_free(c);
  assert_int_equal(redis_metrics(rl).given_back, 1);
  resil_metrics *mx;
  assert_status(RESIL_OK, resil_metrics_new(NULL, &mx));
  assert_status(RESIL_OK, resil_redis_ratelimiter_metrics_add(mx, NULL, rl));
  char *text = NULL;
  assert_status(RESIL_OK, resil_metrics_render_alloc(mx, &text, NULL));
  if (!strstr(text, "resil_redis_ratelimiter_given_back_total{name=\"giveback\"} 1\n"))
    fail_msg("no given_back_total 1 in:\n%s", text);
  resil_metrics_text_free(mx, text);
  resil_metrics_free(mx);
  assert_int_equal(resil_ratelimiter_reserve(rl, 1, NULL, &w, &why), RESIL_DECISION_WAIT);
  print_message("after the give-back the next wait is %.3f s (one interval: 5 s)\n",
                (double)w / 1e9);
  assert_true(w > RESIL_S(4) && w <= RESIL_S(5));
  resil_ratelimiter_free(rl);
  redis_stop(&s);
}

static void noscript_after_flush_reloads_once(void **state) {
  (void)state;
  static redis_srv s; /* static: the teardown may stop it after a failure */
  redis_start(&s);
  resil_ratelimiter *rl =
      redis_rl(&s, "flush", 1000, RESIL_S(1), 1000, 0, RESIL_REDIS_FAILURE_CLOSED);
  resil_reason why;
  int64_t w;
  assert_int_equal(resil_ratelimiter_reserve(rl, 1, NULL, &w, &why), RESIL_DECISION_GO);
  assert_true(redis_do(&s, "SCRIPT FLUSH", NULL));
  for (int i = 0; i < 5; i++)
    assert_int_equal(resil_ratelimiter_reserve(rl, 1, NULL, &w, &why), RESIL_DECISION_GO);
  resil_redis_ratelimiter_metrics m = redis_metrics(rl);
  assert_int_equal(m.noscript_reloads, 1);
  assert_int_equal(m.redis_errors, 0);
  assert_int_equal(m.redis_decisions, 6);
  assert_int_equal(m.fallback_closed, 0);
  resil_ratelimiter_free(rl);
  redis_stop(&s);
}

/* Redis restarted (a new, empty server on the same port): the decision
 * after it finds its connection dead, connects again within its bound,
 * loads the script and decides; no decision fails. */
static void restart_reconnects_within_the_decision(void **state) {
  (void)state;
  static redis_srv s;
  redis_start(&s);
  resil_ratelimiter *rl =
      redis_rl(&s, "restart", 1000, RESIL_S(1), 1000, 0, RESIL_REDIS_FAILURE_CLOSED);
  resil_reason why;
  int64_t w;
  for (int i = 0; i < 3; i++)
    assert_int_equal(resil_ratelimiter_reserve(rl, 1, NULL, &w, &why), RESIL_DECISION_GO);
  redis_restart(&s);
  for (int i = 0; i < 3; i++)
    assert_int_equal(resil_ratelimiter_reserve(rl, 1, NULL, &w, &why), RESIL_DECISION_GO);
  resil_redis_ratelimiter_metrics m = redis_metrics(rl);
  assert_int_equal(m.redis_decisions, 6);
  assert_int_equal(m.redis_errors, 0);
  assert_int_equal(m.fallback_closed, 0);
  assert_int_equal(m.connects, 2);
  resil_ratelimiter_free(rl);
  redis_stop(&s);
}

/* A password and a database from the URI: AUTH and SELECT; the key lives
 * in that database. A wrong password: Redis refuses, the policy decides. */
static void auth_and_database_from_the_uri(void **state) {
  (void)state;
  static redis_srv s; /* static: the teardown may stop it after a failure */
  const char *extra[] = {"--requirepass", "pw:with@odd/chars", NULL};
  redis_start_with(&s, extra);
  resil_redis_ratelimiter_config cfg;
  resil_redis_ratelimiter_config_init(&cfg);
  char uri[160];
  snprintf(uri, sizeof uri, "redis://:pw%%3Awith%%40odd%%2Fchars@127.0.0.1:%d/3", s.port);
  cfg.uri = uri;
  cfg.name = "authdb";
  cfg.failure = RESIL_REDIS_FAILURE_CLOSED;
  resil_ratelimiter *rl = NULL;
  resil_error err;
  assert_status(RESIL_OK, resil_redis_ratelimiter_new(&cfg, &rl, &err));
  resil_reason why;
  int64_t w;
  assert_int_equal(resil_ratelimiter_reserve(rl, 1, NULL, &w, &why), RESIL_DECISION_GO);
  assert_int_equal(redis_metrics(rl).redis_decisions, 1);
  resil_ratelimiter_free(rl);
  redisContext *c = redis_client(&s);
  assert_non_null(c);
  redisReply *r = redisCommand(c, "AUTH %s", "pw:with@odd/chars");
  freeReplyObject(r);
  r = redisCommand(c, "SELECT 3");
  freeReplyObject(r);
  r = redisCommand(c, "EXISTS resil:rl:authdb");
  assert_int_equal(r->integer, 1);
  freeReplyObject(r);
  r = redisCommand(c, "PTTL resil:rl:authdb");
  assert_true(r->integer > 0 && r->integer <= 1001); /* the TTL the script set */
  freeReplyObject(r);
  redisFree(c);

  snprintf(uri, sizeof uri, "redis://:wrong@127.0.0.1:%d/3", s.port);
  assert_status(RESIL_OK, resil_redis_ratelimiter_new(&cfg, &rl, &err));
  assert_int_equal(resil_ratelimiter_reserve(rl, 1, NULL, &w, &why), RESIL_DECISION_DENY);
  assert_int_equal(why, RESIL_REASON_RATE_LIMITER_UNAVAILABLE);
  assert_int_equal(redis_metrics(rl).redis_errors, 1);
  resil_ratelimiter_free(rl);
  redis_stop(&s);
}

static resil_outcome ok_call(void *arg, const resil_ctx *ctx) {
  (void)ctx;
  ++*(int *)arg;
  return resil_outcome_make(RESIL_ANSWERED, RESIL_REASON_OK);
}

static int cmp_i64(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return (x > y) - (x < y);
}

/* The handle in a chain (breaker over the limiter) and the run form, as a
 * local limiter is used; and one decision's latency on loopback. */
static void chain_and_run_form_unchanged(void **state) {
  (void)state;
  static redis_srv s;
  redis_start(&s);
  resil_ratelimiter *rl = redis_rl(&s, "chain", 3, RESIL_S(10), 3, 0, RESIL_REDIS_FAILURE_CLOSED);
  resil_breaker_config bc;
  resil_breaker_config_init(&bc);
  resil_breaker *br;
  assert_status(RESIL_OK, resil_breaker_new(&bc, &br, NULL));
  resil_chain_config cc;
  resil_chain_config_init(&cc);
  resil_chain *ch;
  assert_status(RESIL_OK, resil_chain_new(&cc, &ch, NULL));
  assert_status(RESIL_OK, resil_chain_add_breaker(ch, br));
  assert_status(RESIL_OK, resil_chain_add_ratelimiter(ch, rl));
  int calls = 0;
  for (int i = 0; i < 2; i++)
    assert_int_equal(resil_chain_run(ch, NULL, ok_call, &calls).kind, RESIL_ANSWERED);
  assert_int_equal(resil_ratelimiter_run(rl, NULL, ok_call, &calls).kind, RESIL_ANSWERED);
  resil_outcome o = resil_chain_run(ch, NULL, ok_call, &calls);
  assert_int_equal(o.kind, RESIL_REJECTED);
  assert_int_equal(o.reason, RESIL_REASON_RATE_LIMITED);
  assert_int_equal(calls, 3);
  resil_chain_free(ch);
  resil_breaker_free(br);
  resil_ratelimiter_free(rl);

  /* Latency: 2,000 decisions on a key that always grants. */
  enum { N = 2000 };
  static int64_t lat[N];
  rl = redis_rl(&s, "latency", 1000000, RESIL_S(1), 1000000, 0, RESIL_REDIS_FAILURE_CLOSED);
  for (int i = 0; i < N; i++) {
    int64_t t0 = mono_ns();
    assert_int_equal(resil_ratelimiter_reserve(rl, 1, NULL, NULL, NULL), RESIL_DECISION_GO);
    lat[i] = mono_ns() - t0;
  }
  qsort(lat, N, sizeof lat[0], cmp_i64);
  print_message("decision latency on loopback: p50 %lld us, p99 %lld us, max %lld us\n",
                (long long)lat[N / 2] / 1000, (long long)lat[N * 99 / 100] / 1000,
                (long long)lat[N - 1] / 1000);
  assert_int_equal(redis_metrics(rl).redis_decisions, N);

  /* The limiter against a bare hiredis EVALSHA of the same script (on
   * another key of the same rate), in alternating rounds; medians. */
  enum { ROUNDS = 11, PER = 200 };
  int64_t ours[ROUNDS], bare[ROUNDS];
  redisContext *c = redis_client(&s);
  assert_non_null(c);
  redisReply *r = redisCommand(c, "SCRIPT LOAD %s", resil__redis_gcra_script);
  assert_int_equal(r->type, REDIS_REPLY_STRING);
  char sha[48];
  snprintf(sha, sizeof sha, "%s", r->str);
  freeReplyObject(r);
  for (int k = 0; k < ROUNDS; k++) {
    int64_t t0 = mono_ns();
    for (int i = 0; i < PER; i++)
      assert_int_equal(resil_ratelimiter_reserve(rl, 1, NULL, NULL, NULL), RESIL_DECISION_GO);
    ours[k] = mono_ns() - t0;
    t0 = mono_ns();
    for (int i = 0; i < PER; i++) {
      r = redisCommand(c, "EVALSHA %s 1 bare 1 1000000 1000000 1000000 0", sha);
      assert_true(r && r->type == REDIS_REPLY_ARRAY && r->element[0]->integer == 1);
      freeReplyObject(r);
    }
    bare[k] = mono_ns() - t0;
  }
  redisFree(c);
  qsort(ours, ROUNDS, sizeof ours[0], cmp_i64);
  qsort(bare, ROUNDS, sizeof bare[0], cmp_i64);
  double ratio = (double)bare[ROUNDS / 2] / (double)ours[ROUNDS / 2];
  print_message("per decision, medians of %d rounds: limiter %.1f us, bare hiredis EVALSHA "
                "%.1f us: the limiter's rate is %.2fx the bare one's\n",
                ROUNDS, (double)ours[ROUNDS / 2] / PER / 1000.0,
                (double)bare[ROUNDS / 2] / PER / 1000.0, ratio);
  /* A loose floor (the machine is shared): the figure is reported. */
  assert_true(ratio >= 0.5);
  resil_ratelimiter_free(rl);
  redis_stop(&s);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_teardown(config_errors_name_the_field, redis_teardown),
      cmocka_unit_test_teardown(gcra_burst_rate_and_reservations, redis_teardown),
      cmocka_unit_test_teardown(a_cancelled_wait_gives_its_permit_back, redis_teardown),
      cmocka_unit_test_teardown(noscript_after_flush_reloads_once, redis_teardown),
      cmocka_unit_test_teardown(restart_reconnects_within_the_decision, redis_teardown),
      cmocka_unit_test_teardown(auth_and_database_from_the_uri, redis_teardown),
      cmocka_unit_test_teardown(chain_and_run_form_unchanged, redis_teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
