/* libresil-http pool under concurrency (run again under ThreadSanitizer):
 * the lease timeout fails NOT_SENT without sending (H9), a shared client
 * serves many threads within its connection limits. */
#include <stdlib.h>

#include "test_http_common.h"

static const resil_http_endpoint eps[] = {
    {.struct_size = sizeof(resil_http_endpoint), .name = "slow", .path = "/slow", .query = "ms={ms}"},
    {.struct_size = sizeof(resil_http_endpoint), .name = "item", .path = "/items/{id}", .response_codec = RESIL_HTTP_CODEC_JSON},
};
#define NEPS (sizeof eps / sizeof eps[0])

static void pool_of_one(resil_http_client_config *cfg, void *u) {
  (void)u;
  cfg->max_connections = 1;
  cfg->max_connections_per_host = 1;
  cfg->lease_timeout_ns = MS(100);
}

typedef struct holder {
  resil_http_client *c;
  resil_outcome o;
} holder;

static void *hold_slow(void *u) {
  holder *h = u;
  h->o = call_p(h->c, "slow", NULL, KV("ms", "600"));
  return NULL;
}

static void h9_pool_of_one_lease_timeout_is_not_sent(void **state) {
  fx_state *s = *state;
  resil_http_client *c = client_on(s->f, eps, NEPS, pool_of_one, NULL);
  holder h = {.c = c};
  pthread_t t;
  pthread_create(&t, NULL, hold_slow, &h);
  /* Wait until the slow call holds the only connection. */
  resil_http_stats st;
  for (int i = 0; i < 200; i++) {
    resil_http_client_get_stats(c, &st);
    if (st.leased == 1 && resil_fixture_attempts(s->f, "slow") == 1) break;
    sleep_ms(5);
  }
  assert_int_equal(st.leased, 1);
  int64_t t0 = mono_ms();
  resil_http_response *r = NULL;
  resil_outcome o = call_p(c, "item", &r, KV("id", "9"));
  int64_t took = mono_ms() - t0;
  assert_outcome(o, RESIL_NOT_SENT, RESIL_REASON_POOL_TIMEOUT);
  assert_true(took >= 95 && took < 400);
  assert_int_equal(resil_fixture_attempts(s->f, "items"), 0);
  resil_http_info info;
  resil_http_response_info(r, &info);
  assert_true(info.lease_wait_ns >= MS(95));
  resil_http_response_free(r);
  pthread_join(t, NULL);
  assert_int_equal(h.o.http_status, 200);
  /* Released: calls succeed again, on the same single connection. */
  for (int i = 0; i < 3; i++) {
    o = call_p(c, "item", NULL, KV("id", "9"));
    assert_int_equal(o.http_status, 200);
  }
  assert_int_equal(resil_fixture_attempts(s->f, "items"), 3);
  assert_int_equal(resil_fixture_connections(s->f), 1);
  resil_http_client_get_stats(c, &st);
  assert_int_equal(st.lease_timeouts, 1);
  assert_int_equal(st.leased, 0);
  assert_int_equal(st.outcomes[RESIL_NOT_SENT], 1);
  resil_http_client_free(c);
}

#define THREADS 8
#define CALLS 40

static void pool_of_four(resil_http_client_config *cfg, void *u) {
  (void)u;
  cfg->max_connections = 4;
  cfg->max_connections_per_host = 4;
  cfg->lease_timeout_ns = MS(10000);
}

typedef struct worker {
  resil_http_client *c;
  int id;
  int ok;
} worker;

static void *work(void *u) {
  worker *w = u;
  for (int i = 0; i < CALLS; i++) {
    char id[16];
    snprintf(id, sizeof id, "%d", w->id * 1000 + i);
    resil_http_response *r = NULL;
    resil_outcome o = call_p(w->c, "item", &r, KV("id", id));
    json_t *j = resil_http_response_json(r);
    if (o.http_status == 200 && j &&
        json_integer_value(json_object_get(j, "id")) == w->id * 1000 + i)
      w->ok++;
    resil_http_response_free(r);
  }
  return NULL;
}

static void shared_client_serves_threads_within_its_connection_limit(void **state) {
  fx_state *s = *state;
  resil_http_client *c = client_on(s->f, eps, NEPS, pool_of_four, NULL);
  pthread_t t[THREADS];
  worker w[THREADS];
  for (int i = 0; i < THREADS; i++) {
    w[i] = (worker){.c = c, .id = i + 1};
    pthread_create(&t[i], NULL, work, &w[i]);
  }
  for (int i = 0; i < THREADS; i++) pthread_join(t[i], NULL);
  for (int i = 0; i < THREADS; i++) assert_int_equal(w[i].ok, CALLS);
  resil_http_stats st;
  resil_http_client_get_stats(c, &st);
  assert_int_equal(st.attempts, THREADS * CALLS);
  assert_int_equal(st.outcomes[RESIL_ANSWERED], THREADS * CALLS);
  assert_int_equal(st.leased, 0);
  assert_true(st.connections_opened <= 4);
  assert_true(resil_fixture_connections(s->f) <= 4);
  assert_int_equal(resil_fixture_attempts(s->f, "items"), THREADS * CALLS);
  resil_http_client_free(c);
}

typedef struct shared_req {
  resil_http_request *req;
  int ok;
} shared_req;

static void *attempt_shared(void *u) {
  shared_req *sr = u;
  for (int i = 0; i < 10; i++) {
    resil_ctx ctx;
    resil_ctx_init(&ctx);
    ctx.attempt = (uint32_t)i + 1;
    resil_outcome o = resil_http_request_attempt(sr->req, &ctx);
    if (o.http_status == 200) __atomic_fetch_add(&sr->ok, 1, __ATOMIC_RELAXED);
  }
  return NULL;
}

static void one_request_attempted_from_many_threads_stays_consistent(void **state) {
  fx_state *s = *state;
  resil_http_client *c = client_on(s->f, eps, NEPS, pool_of_four, NULL);
  shared_req sr = {0};
  resil_http_param ps[] = {{"id", "77"}};
  resil_http_args args;
  resil_http_args_init(&args);
  args.params = ps;
  args.param_count = 1;
  assert_status(RESIL_OK, resil_http_request_new(c, "item", &args, &sr.req, NULL));
  pthread_t t[4];
  for (int i = 0; i < 4; i++) pthread_create(&t[i], NULL, attempt_shared, &sr);
  for (int i = 0; i < 4; i++) pthread_join(t[i], NULL);
  assert_int_equal(sr.ok, 40);
  resil_http_response *r = resil_http_request_take_response(sr.req);
  assert_non_null(r);
  assert_int_equal(json_integer_value(json_object_get(resil_http_response_json(r), "id")), 77);
  resil_http_response_free(r);
  resil_http_request_free(sr.req);
  resil_http_client_free(c);
}

typedef struct two_origins {
  resil_http_endpoint eps[3];
  char other[64];
} two_origins;

static void per_host_one_of_two(resil_http_client_config *cfg, void *u) {
  two_origins *t = u;
  cfg->endpoints = t->eps;
  cfg->endpoint_count = 3;
  cfg->max_connections = 2;
  cfg->max_connections_per_host = 1;
  cfg->lease_timeout_ns = MS(100);
}

static void per_host_limit_applies_to_each_origin(void **state) {
  fx_state *s = *state;
  resil_fixture *f2 = fx_start();
  two_origins t = {.eps = {eps[0], eps[1], {.struct_size = sizeof(resil_http_endpoint), .name = "item_b", .path = "/items/{id}"}}};
  snprintf(t.other, sizeof t.other, "%s/", resil_fixture_url(f2));
  t.eps[2].base_url = t.other;
  resil_http_client *c = client_on(s->f, t.eps, 3, per_host_one_of_two, &t);
  holder h = {.c = c};
  pthread_t th;
  pthread_create(&th, NULL, hold_slow, &h);
  resil_http_stats st;
  for (int i = 0; i < 200; i++) {
    resil_http_client_get_stats(c, &st);
    if (st.leased == 1 && resil_fixture_attempts(s->f, "slow") == 1) break;
    sleep_ms(5);
  }
  /* Origin A is at its limit of 1; origin B still has room. */
  resil_outcome o = call_p(c, "item", NULL, KV("id", "1"));
  assert_outcome(o, RESIL_NOT_SENT, RESIL_REASON_POOL_TIMEOUT);
  o = call_p(c, "item_b", NULL, KV("id", "2"));
  assert_int_equal(o.http_status, 200);
  assert_int_equal(resil_fixture_attempts(f2, "items"), 1);
  assert_int_equal(resil_fixture_attempts(s->f, "items"), 0);
  pthread_join(th, NULL);
  assert_int_equal(h.o.http_status, 200);
  resil_http_client_free(c);
  resil_fixture_stop(f2);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(h9_pool_of_one_lease_timeout_is_not_sent, fx_setup, fx_teardown),
      cmocka_unit_test_setup_teardown(per_host_limit_applies_to_each_origin, fx_setup, fx_teardown),
      cmocka_unit_test_setup_teardown(shared_client_serves_threads_within_its_connection_limit, fx_setup, fx_teardown),
      cmocka_unit_test_setup_teardown(one_request_attempted_from_many_threads_stays_consistent, fx_setup, fx_teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
