/* The registry's rate limiters on Redis (registry.h, libresil-config with
 * libresil-redis): `redis: URI` makes the instance a Redis limiter, which a
 * chain of the same file runs; failure, burst and the other keys reach it;
 * a URI error is reported at the `redis` key with the password redacted;
 * the Redis keys without `redis` are an error naming the key. */
#include <stdio.h>
#include <string.h>

#include "resil/metrics.h"
#include "resil/registry.h"
#include "test_redis_common.h"

static resil_outcome ok_call(void *arg, const resil_ctx *ctx) {
  (void)ctx;
  ++*(int *)arg;
  return resil_outcome_make(RESIL_ANSWERED, RESIL_REASON_OK);
}

static void a_redis_limiter_from_yaml_in_a_chain(void **state) {
  (void)state;
  static redis_srv s; /* static: the teardown may stop it after a failure */
  redis_start(&s);
  char yaml[1024];
  snprintf(yaml, sizeof yaml,
           "ratelimiter:\n"
           "  instances:\n"
           "    global: {limit_for_period: 3, refresh_period: 10s, timeout: 0s, burst: 2,\n"
           "             redis: \"%s\", failure: closed, key_prefix: \"t:\",\n"
           "             redis_timeout: 50ms, expected_instances: 3}\n"
           "circuitbreaker:\n"
           "  instances:\n"
           "    up: {}\n"
           "chain:\n"
           "  instances:\n"
           "    up:\n"
           "      layers:\n"
           "        - circuitbreaker: up\n"
           "        - ratelimiter: global\n",
           s.uri);
  resil_registry *reg = NULL;
  resil_registry_error err;
  resil_registry_error_init(&err);
  if (resil_registry_load_string(yaml, strlen(yaml), "redis.yaml", &reg, &err) != RESIL_OK)
    fail_msg("%s: %s", err.key_path, err.message);
  resil_ratelimiter *rl = resil_registry_ratelimiter(reg, "global");
  assert_non_null(resil_redis_ratelimiter_breaker(rl));
  assert_null(resil_redis_ratelimiter_local(rl)); /* failure: closed */
  resil_chain *ch = resil_registry_chain(reg, "up");
  int calls = 0;
  for (int i = 0; i < 2; i++) /* burst 2 */
    assert_int_equal(resil_chain_run(ch, NULL, ok_call, &calls).kind, RESIL_ANSWERED);
  resil_outcome o = resil_chain_run(ch, NULL, ok_call, &calls);
  assert_int_equal(o.kind, RESIL_REJECTED);
  assert_int_equal(o.reason, RESIL_REASON_RATE_LIMITED);
  assert_int_equal(calls, 2);
  assert_int_equal(redis_metrics(rl).redis_decisions, 3);
  /* The registry's collector shows the Redis figures beside the limiter's
   * own (whose available permits come from the script's peek). */
  resil_metrics *m;
  assert_status(RESIL_OK, resil_metrics_new(NULL, &m));
  assert_status(RESIL_OK, resil_registry_metrics_add(reg, m));
  char *text = NULL;
  assert_status(RESIL_OK, resil_metrics_render_alloc(m, &text, NULL));
  const char *want[] = {
      "resil_redis_ratelimiter_decisions_total{name=\"global\",by=\"redis\"} 3\n",
      "resil_redis_ratelimiter_failures_total{name=\"global\",cause=\"error\"} 0\n",
      "resil_redis_ratelimiter_connects_total{name=\"global\"} 1\n",
      "resil_redis_ratelimiter_decision_seconds{name=\"global\",stat=\"max\"} ",
      "resil_ratelimiter_available_permissions{name=\"global\"} 0\n",
  };
  for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
    if (!strstr(text, want[i])) fail_msg("missing %s in:\n%s", want[i], text);
  resil_metrics_text_free(m, text);
  assert_status(RESIL_OK, resil_registry_metrics_remove(reg, m));
  resil_metrics_free(m);
  redisContext *c = redis_client(&s);
  assert_non_null(c);
  redisReply *r = redisCommand(c, "EXISTS t:global"); /* key_prefix + name */
  assert_int_equal(r->integer, 1);
  freeReplyObject(r);
  redisFree(c);
  /* Redis gone: the file's `closed` refuses with the reason. */
  redis_stop(&s);
  o = resil_chain_run(ch, NULL, ok_call, &calls);
  assert_int_equal(o.kind, RESIL_REJECTED);
  assert_int_equal(o.reason, RESIL_REASON_RATE_LIMITER_UNAVAILABLE);
  assert_int_equal(redis_metrics(rl).fallback_closed, 1);
  resil_registry_free(reg);
}

/* A reload that changes a Redis limiter's rate: the new limiter takes the
 * key over at its first decision (Redis decides it, no error), instead of
 * being refused until the key, holding the old rate, expires (up to the
 * burst's emission intervals: 20 s here); a limiter still on the old rate
 * (another process that has not reloaded) is then refused with the reason
 * and its failure policy decides. An unchanged limiter is kept. */
static void a_reload_that_changes_the_rate_takes_the_key_over(void **state) {
  (void)state;
  static redis_srv s;
  redis_start(&s);
  char yaml[512];
  const char *fmt = "ratelimiter:\n"
                    "  instances:\n"
                    "    global: {limit_for_period: %d, refresh_period: 10s, timeout: 0s,\n"
                    "             redis: \"%s\", failure: closed, key_prefix: \"r:\"}\n"
                    "    same: {limit_for_period: 7, refresh_period: 10s, timeout: 0s,\n"
                    "           redis: \"%s\", failure: closed, key_prefix: \"r:\"}\n";
  snprintf(yaml, sizeof yaml, fmt, 2, s.uri, s.uri);
  resil_registry *reg = NULL;
  resil_registry_error err;
  resil_registry_error_init(&err);
  if (resil_registry_load_string(yaml, strlen(yaml), "r.yaml", &reg, &err) != RESIL_OK)
    fail_msg("%s: %s", err.key_path, err.message);
  resil_ratelimiter *before = resil_registry_ratelimiter(reg, "global");
  resil_ratelimiter *same = resil_registry_ratelimiter(reg, "same");
  resil_reason why;
  int64_t w;
  assert_int_equal(resil_ratelimiter_reserve(before, 1, NULL, &w, &why), RESIL_DECISION_GO);
  assert_int_equal(resil_ratelimiter_reserve(same, 1, NULL, &w, &why), RESIL_DECISION_GO);

  snprintf(yaml, sizeof yaml, fmt, 5, s.uri, s.uri);
  if (resil_registry_reload_string(reg, yaml, strlen(yaml), "r.yaml", &err) != RESIL_OK)
    fail_msg("%s: %s", err.key_path, err.message);
  resil_registry_reload_stats rs;
  assert_status(RESIL_OK, resil_registry_last_reload(reg, &rs));
  assert_int_equal(rs.replaced, 1);
  assert_ptr_equal(resil_registry_ratelimiter(reg, "same"), same);
  resil_ratelimiter *after = resil_registry_ratelimiter(reg, "global");
  assert_ptr_not_equal(after, before);
  /* Redis decides under the new rate at once: 5 fresh permits. */
  for (int i = 0; i < 5; i++)
    assert_int_equal(resil_ratelimiter_reserve(after, 1, NULL, &w, &why), RESIL_DECISION_GO);
  assert_int_equal(resil_ratelimiter_reserve(after, 1, NULL, &w, &why), RESIL_DECISION_DENY);
  assert_int_equal(why, RESIL_REASON_RATE_LIMITED);
  resil_redis_ratelimiter_metrics m = redis_metrics(after);
  assert_int_equal(m.redis_decisions, 6);
  assert_int_equal(m.redis_errors, 0);
  /* Another process still on the old rate (made outside a registry: no
   * take-over) is refused now; its policy (closed) rejects. */
  resil_ratelimiter *old = NULL;
  resil_redis_ratelimiter_config oc;
  resil_redis_ratelimiter_config_init(&oc);
  oc.uri = s.uri;
  oc.name = "global";
  oc.key_prefix = "r:";
  oc.limit_for_period = 2;
  oc.refresh_period_ns = RESIL_S(10);
  oc.timeout_ns = 0;
  oc.failure = RESIL_REDIS_FAILURE_CLOSED;
  oc.redis_timeout_ns = RESIL_S(1);
  assert_status(RESIL_OK, resil_redis_ratelimiter_new(&oc, &old, NULL));
  assert_int_equal(resil_ratelimiter_reserve(old, 1, NULL, &w, &why), RESIL_DECISION_DENY);
  assert_int_equal(why, RESIL_REASON_RATE_LIMITER_UNAVAILABLE);
  assert_int_equal(redis_metrics(old).redis_errors, 1);
  /* ... and does not take the key back: the new rate goes on. */
  assert_int_equal(resil_ratelimiter_reserve(after, 1, NULL, &w, &why), RESIL_DECISION_DENY);
  assert_int_equal(why, RESIL_REASON_RATE_LIMITED);
  assert_int_equal(redis_metrics(after).redis_errors, 0);
  resil_ratelimiter_free(old);
  resil_registry_free(reg);
  redis_stop(&s);
}

static void load_error(const char *yaml, resil_registry_error *err) {
  resil_registry *reg = NULL;
  resil_registry_error_init(err);
  assert_int_not_equal(resil_registry_load_string(yaml, strlen(yaml), "bad.yaml", &reg, err),
                       RESIL_OK);
  assert_null(reg);
}

static void redis_keys_errors(void **state) {
  (void)state;
  resil_registry_error err;
  load_error("ratelimiter:\n"
             "  instances:\n"
             "    g: {redis: \"redis://:hunter2@127.0.0.1:99999/0\"}\n",
             &err);
  assert_string_equal(err.key_path, "ratelimiter.instances.g.redis");
  assert_null(strstr(err.message, "hunter2"));
  assert_non_null(strstr(err.message, "[REDACTED]"));
  assert_int_equal(err.line, 3);

  load_error("ratelimiter:\n"
             "  instances:\n"
             "    g: {redis: \"redis://127.0.0.1:6379/0\", failure: sometimes}\n",
             &err);
  assert_string_equal(err.key_path, "ratelimiter.instances.g.failure");

  load_error("ratelimiter:\n"
             "  instances:\n"
             "    g: {limit_for_period: 5, failure: open}\n",
             &err);
  assert_string_equal(err.key_path, "ratelimiter.instances.g.failure");
  assert_non_null(strstr(err.message, "redis"));

  load_error("ratelimiter:\n"
             "  instances:\n"
             "    g: {redis: \"redis://127.0.0.1:6379/0\", redis_timeout: 0s}\n",
             &err);
  assert_string_equal(err.key_path, "ratelimiter.instances.g.redis_timeout");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_teardown(a_redis_limiter_from_yaml_in_a_chain, redis_teardown),
      cmocka_unit_test_teardown(a_reload_that_changes_the_rate_takes_the_key_over,
                                redis_teardown),
      cmocka_unit_test(redis_keys_errors),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
