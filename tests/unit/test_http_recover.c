/* libresil-http recovery flow (DESIGN §6, issue 4): after a keyed write
 * attempt that may have executed, resil_http_call_keyed() asks the status
 * endpoint first. COMMITTED gives the stored result (I1, I4 shapes), a 404
 * leaves the decision to the retry policy, which re-sends with the same
 * key, and a call without a key asks nothing. PENDING and concurrency are
 * in test_http_recover_mt.c. */
#include <stdlib.h>

#include "fixture/fixture.h"
#include "resil/breaker.h"
#include "resil/bulkhead.h"
#include "resil/chain.h"
#include "resil/ratelimit.h"
#include "test_http_common.h"

static const resil_http_endpoint eps[] = {
    {.struct_size = sizeof(resil_http_endpoint), .name = "op_status", .path = "/operations/{key}", .response_codec = RESIL_HTTP_CODEC_JSON},
    {.struct_size = sizeof(resil_http_endpoint), .name = "idem", .method = RESIL_HTTP_POST, .path = "/idem/{name}", .query = "sleep_ms={ms}",
     .idempotency_key = RESIL_HTTP_KEY_SEND, .response_codec = RESIL_HTTP_CODEC_JSON,
     .status_endpoint = "op_status"},
    {.struct_size = sizeof(resil_http_endpoint), .name = "idem_close", .method = RESIL_HTTP_POST, .path = "/idem-close",
     .idempotency_key = RESIL_HTTP_KEY_SEND, .response_codec = RESIL_HTTP_CODEC_JSON,
     .status_endpoint = "op_status"},
    {.struct_size = sizeof(resil_http_endpoint), .name = "slow_keyed", .method = RESIL_HTTP_POST, .path = "/slow", .query = "ms={ms}",
     .idempotency_key = RESIL_HTTP_KEY_SEND, .status_endpoint = "op_status"},
    {.struct_size = sizeof(resil_http_endpoint), .name = "slow_unkeyed", .method = RESIL_HTTP_POST, .path = "/slow", .query = "ms={ms}",
     .status_endpoint = "op_status"},
    {.struct_size = sizeof(resil_http_endpoint), .name = "flaky_keyed", .method = RESIL_HTTP_POST, .path = "/flaky/{id}", .query = "fail={n}",
     .idempotency_key = RESIL_HTTP_KEY_SEND, .status_endpoint = "op_status"},
    {.struct_size = sizeof(resil_http_endpoint), .name = "idem_plain", .method = RESIL_HTTP_POST, .path = "/idem/{name}",
     .query = "sleep_ms={ms}", .idempotency_key = RESIL_HTTP_KEY_SEND,
     .response_codec = RESIL_HTTP_CODEC_JSON},
    {.struct_size = sizeof(resil_http_endpoint), .name = "echo_status", .path = "/echo", .query = "k={key}",
     .response_codec = RESIL_HTTP_CODEC_JSON},
    {.struct_size = sizeof(resil_http_endpoint), .name = "slow_echo_status", .method = RESIL_HTTP_POST, .path = "/slow", .query = "ms={ms}",
     .idempotency_key = RESIL_HTTP_KEY_SEND, .status_endpoint = "echo_status"},
    /* A misconfigured status path that asks about another key. */
    {.struct_size = sizeof(resil_http_endpoint), .name = "other_key_status", .path = "/operations/x{key}",
     .response_codec = RESIL_HTTP_CODEC_JSON},
    {.struct_size = sizeof(resil_http_endpoint), .name = "slow_other_key", .method = RESIL_HTTP_POST, .path = "/slow", .query = "ms={ms}",
     .idempotency_key = RESIL_HTTP_KEY_SEND, .status_endpoint = "other_key_status"},
};
#define NEPS (sizeof eps / sizeof eps[0])

/* Writes that must end UNKNOWN time out after WRITE_TIMEOUT_MS against a
 * server that answers after SLOW_MS; the margin keeps the status queries
 * (same client timeout) well inside it on a loaded machine. The I1 test
 * keeps the catalogue's 150 ms / 500 ms. */
#define WRITE_TIMEOUT_MS 300
#define SLOW_MS "1200"

/* Records the idempotency key each attempt carried, per endpoint. */
typedef struct key_log {
  int n;
  char ep[16][32];
  char key[16][80];
} key_log;

static resil_status record_key(void *user, const resil_http_attempt_info *info,
                               resil_http_headers *h) {
  (void)h;
  key_log *l = user;
  if (l->n < 16) {
    snprintf(l->ep[l->n], sizeof l->ep[0], "%s", info->endpoint);
    snprintf(l->key[l->n], sizeof l->key[0], "%s",
             info->idempotency_key ? info->idempotency_key : "");
    l->n++;
  }
  return RESIL_OK;
}

typedef struct client_opts {
  int64_t response_timeout_ms;
  key_log *log;
  resil_http_interceptor ic;
  uint32_t classes;
  int set_classes;
} client_opts;

static void apply_opts(resil_http_client_config *cfg, void *u) {
  client_opts *o = u;
  if (o->response_timeout_ms) cfg->response_timeout_ns = MS(o->response_timeout_ms);
  if (o->log) {
    o->ic.fn = record_key;
    o->ic.user = o->log;
    cfg->interceptors = &o->ic;
    cfg->interceptor_count = 1;
  }
  if (o->set_classes) cfg->status_query_classes = o->classes;
}

static resil_http_args args_of(resil_http_param *ps, size_t n, const char *key) {
  resil_http_args a;
  resil_http_args_init(&a);
  a.params = ps;
  a.param_count = n;
  a.idempotency_key = key;
  return a;
}

/* Writes key into the fixture's operation store as PENDING, as a request
 * still in progress would (the fixture's test hook). */
static void op_pending(resil_fixture *f, const char *key) {
  assert_int_equal(resil_fixture_op_pending(f, key, NULL, NULL), 0);
}

/* ---- configuration ------------------------------------------------------------ */

static resil_status new_client(const char *base, const resil_http_endpoint *e, size_t n,
                               resil_http_client_config *cfg_out, resil_error *err) {
  resil_http_client_config cfg;
  if (cfg_out) {
    cfg = *cfg_out;
  } else {
    resil_http_client_config_init(&cfg);
  }
  cfg.base_url = base;
  cfg.endpoints = e;
  cfg.endpoint_count = n;
  resil_http_client *c = NULL;
  resil_status st = resil_http_client_new(&cfg, &c, err);
  resil_http_client_free(c);
  return st;
}

static void client_new_rejects_status_endpoints_that_cannot_answer(void **state) {
  fx_state *s = *state;
  const char *url = resil_fixture_url(s->f);
  resil_error err;
  const resil_http_endpoint unknown[] = {
      {.struct_size = sizeof(resil_http_endpoint), .name = "w", .method = RESIL_HTTP_POST, .path = "/w", .status_endpoint = "nope"}};
  assert_status(RESIL_EINVAL, new_client(url, unknown, 1, NULL, &err));
  assert_string_equal(err.field, "endpoints[0].status_endpoint");
  const resil_http_endpoint self[] = {
      {.struct_size = sizeof(resil_http_endpoint), .name = "w", .path = "/w/{key}", .status_endpoint = "w"}};
  assert_status(RESIL_EINVAL, new_client(url, self, 1, NULL, &err));
  assert_string_equal(err.field, "endpoints[0].status_endpoint");
  const resil_http_endpoint post[] = {
      {.struct_size = sizeof(resil_http_endpoint), .name = "st", .method = RESIL_HTTP_POST, .path = "/operations/{key}"},
      {.struct_size = sizeof(resil_http_endpoint), .name = "w", .method = RESIL_HTTP_POST, .path = "/w", .status_endpoint = "st"}};
  assert_status(RESIL_EINVAL, new_client(url, post, 2, NULL, &err));
  assert_string_equal(err.field, "endpoints[1].status_endpoint");
  assert_non_null(strstr(err.msg, "GET"));
  const resil_http_endpoint nokey[] = {
      {.struct_size = sizeof(resil_http_endpoint), .name = "st", .path = "/operations/{id}"},
      {.struct_size = sizeof(resil_http_endpoint), .name = "w", .method = RESIL_HTTP_POST, .path = "/w", .status_endpoint = "st"}};
  assert_status(RESIL_EINVAL, new_client(url, nokey, 2, NULL, &err));
  assert_string_equal(err.field, "endpoints[1].status_endpoint");
  /* {key} in the query is as good as in the path; a later entry of the
   * table may be named. */
  const resil_http_endpoint inquery[] = {
      {.struct_size = sizeof(resil_http_endpoint), .name = "w", .method = RESIL_HTTP_POST, .path = "/w", .status_endpoint = "st"},
      {.struct_size = sizeof(resil_http_endpoint), .name = "st", .path = "/operations", .query = "key={key}"}};
  assert_status(RESIL_OK, new_client(url, inquery, 2, NULL, &err));

  resil_http_client_config cfg;
  resil_http_client_config_init(&cfg);
  assert_int_equal(cfg.status_poll_ns, MS(100));
  assert_int_equal(cfg.pending_wait_max_ns, MS(10000));
  assert_int_equal(cfg.status_query_classes, RESIL_CLASS_BIT(RESIL_CLASS_UNKNOWN) |
                                                 RESIL_CLASS_BIT(RESIL_CLASS_SERVER_ERROR));
  cfg.status_poll_ns = 0;
  assert_status(RESIL_EINVAL, new_client(url, eps, NEPS, &cfg, &err));
  assert_string_equal(err.field, "status_poll_ns");
  assert_int_equal(err.has_range, 1);
  assert_int_equal(err.min, MS(1));
  assert_int_equal(err.got, 0);
  resil_http_client_config_init(&cfg);
  cfg.pending_wait_max_ns = -1;
  assert_status(RESIL_EINVAL, new_client(url, eps, NEPS, &cfg, &err));
  assert_string_equal(err.field, "pending_wait_max_ns");
  assert_int_equal(err.has_range, 1);
  resil_http_client_config_init(&cfg);
  /* A 4xx says the request was wrong; its key may even belong to another
   * request, so no status answer can stand in for it. */
  cfg.status_query_classes |= RESIL_CLASS_BIT(RESIL_CLASS_CLIENT_ERROR);
  assert_status(RESIL_EINVAL, new_client(url, eps, NEPS, &cfg, &err));
  assert_string_equal(err.field, "status_query_classes");
  /* A bad table sends nothing. */
  assert_int_equal(resil_fixture_connections(s->f), 0);
}

/* ---- COMMITTED ------------------------------------------------------------------ */

/* I1 shape: the server commits, then answers after 500 ms; the client gives
 * up after 150 ms. Plain retry needs a second write to learn the result;
 * the recovery flow asks the status endpoint instead. */
static void i1_committed_write_recovers_from_status_with_one_write(void **state) {
  fx_state *s = *state;
  client_opts opt = {.response_timeout_ms = 150};
  resil_http_client *c = client_on(s->f, eps, NEPS, apply_opts, &opt);
  resil_retry *retry = retry_n(3);
  resil_http_param ps[] = {{"name", "i1"}, {"ms", "500"}};
  resil_http_args args = args_of(ps, 2, NULL);
  resil_http_response *r = NULL;
  resil_http_recovery rep;
  resil_outcome o = resil_http_call_keyed(c, "idem", &args, retry, NULL, NULL, &r, &rep);

  assert_int_equal(o.kind, RESIL_ANSWERED);
  assert_int_equal(o.http_status, 201);
  assert_true(resil_outcome_is_success(&o));
  assert_true(o.flags & RESIL_OF_RECOVERED);
  assert_false(o.flags & RESIL_OF_STATUS_PENDING);
  assert_int_equal(o.stop, RESIL_STOP_SUCCESS);
  assert_int_equal(o.attempts, 1);
  assert_int_equal(rep.write_attempts, 1);
  assert_int_equal(rep.status_queries, 1);
  assert_int_equal(rep.state, RESIL_HTTP_OP_COMMITTED);
  assert_int_equal(rep.last_query.http_status, 200);
  assert_int_equal(resil_fixture_attempts(s->f, "idem"), 1);
  assert_int_equal(resil_fixture_effects(s->f, "idem"), 1);
  assert_int_equal(resil_fixture_attempts(s->f, "operations"), 1);

  /* The stored result, decoded as the write endpoint's response. */
  assert_true(resil_http_response_recovered(r));
  assert_int_equal(resil_http_response_status(r), 201);
  json_t *j = resil_http_response_json(r);
  assert_non_null(j);
  assert_int_equal(json_integer_value(json_object_get(j, "effect")), 1);
  char sent_key[80];
  assert_int_equal(resil_fixture_last_header(s->f, "idem", "idempotency-key", sent_key,
                                             sizeof sent_key), 1);
  assert_string_equal(json_string_value(json_object_get(j, "key")), sent_key);
  resil_http_info info;
  assert_status(RESIL_OK, resil_http_response_info(r, &info));
  assert_int_equal(info.attempt, 1);
  assert_true(resil_http_response_outcome(r).flags & RESIL_OF_RECOVERED);

  resil_http_stats st;
  resil_http_client_get_stats(c, &st);
  assert_int_equal(st.status_queries, 1);
  assert_int_equal(st.status_committed, 1);
  assert_int_equal(st.recovered, 1);
  assert_int_equal(st.status_pending, 0);
  assert_int_equal(st.status_unknown, 0);
  /* One write and one status query went out. */
  assert_int_equal(st.attempts, 2);
  assert_int_equal(st.outcomes[RESIL_UNKNOWN], 1);
  resil_retry_stats rs;
  resil_retry_get_stats(retry, &rs);
  assert_int_equal(rs.calls, 1);
  assert_int_equal(rs.successful_without_retry, 1);
  assert_int_equal(rs.attempts, 1);
  resil_http_response_free(r);

  /* The same call without the recovery flow needs a second write. */
  resil_fixture_reset(s->f);
  o = resil_http_call(c, "idem", &args, retry, NULL, NULL);
  assert_int_equal(o.http_status, 201);
  assert_int_equal(o.attempts, 2);
  assert_false(o.flags & RESIL_OF_RECOVERED);
  assert_int_equal(resil_fixture_effects(s->f, "idem"), 1);
  assert_int_equal(resil_fixture_attempts(s->f, "operations"), 0);
  resil_retry_free(retry);
  resil_http_client_free(c);
}

/* I4 shape: commit, then close before any response byte. No retry is
 * configured: the status query alone turns UNKNOWN into the result. */
static void i4_commit_then_close_recovers_and_a_replay_returns_the_same_body(void **state) {
  fx_state *s = *state;
  resil_http_client *c = client_on(s->f, eps, NEPS, NULL, NULL);
  resil_http_args args = args_of(NULL, 0, "i4-key-1");
  resil_http_response *r = NULL;
  resil_http_recovery rep;
  resil_outcome o = resil_http_call_keyed(c, "idem_close", &args, NULL, NULL, NULL, &r, &rep);
  assert_int_equal(o.kind, RESIL_ANSWERED);
  assert_int_equal(o.http_status, 201);
  assert_true(o.flags & RESIL_OF_RECOVERED);
  assert_int_equal(o.attempts, 0);
  assert_int_equal(rep.write_attempts, 1);
  assert_int_equal(rep.status_queries, 1);
  assert_int_equal(rep.state, RESIL_HTTP_OP_COMMITTED);
  assert_int_equal(resil_fixture_effects(s->f, "idem_close"), 1);
  assert_true(resil_http_response_recovered(r));
  size_t n1 = 0;
  const char *b1 = resil_http_response_body(r, &n1);
  assert_true(n1 > 0);
  char *stored = strndup(b1, n1);
  resil_http_response_free(r);

  /* Replaying the write with the key returns the stored result: the same
   * bytes, no new effect. */
  r = NULL;
  o = resil_http_call(c, "idem_close", &args, NULL, NULL, &r);
  assert_int_equal(o.http_status, 201);
  assert_false(resil_http_response_recovered(r));
  assert_string_equal(resil_http_response_header(r, "idempotent-replayed"), "true");
  size_t n2 = 0;
  const char *b2 = resil_http_response_body(r, &n2);
  assert_int_equal(n2, n1);
  assert_memory_equal(b2, stored, n1);
  assert_int_equal(resil_fixture_effects(s->f, "idem_close"), 1);
  free(stored);
  resil_http_response_free(r);
  resil_http_client_free(c);
}

/* A stored failure is the operation's result too: it is returned, and no
 * write is sent again even though the retry would retry a 500. */
static void committed_failure_is_returned_without_another_write(void **state) {
  fx_state *s = *state;
  client_opts opt = {.response_timeout_ms = WRITE_TIMEOUT_MS};
  resil_http_client *c = client_on(s->f, eps, NEPS, apply_opts, &opt);
  resil_retry *retry = retry_n(3);
  op_pending(s->f, "stored-500");
  assert_int_equal(resil_fixture_op_complete(s->f, "stored-500", 500, "{\"error\":\"declined\"}", 0), 0);
  resil_http_param ps[] = {{"ms", SLOW_MS}};
  resil_http_args args = args_of(ps, 1, "stored-500");
  resil_http_response *r = NULL;
  resil_http_recovery rep;
  resil_outcome o = resil_http_call_keyed(c, "slow_keyed", &args, retry, NULL, NULL, &r, &rep);
  assert_int_equal(o.kind, RESIL_ANSWERED);
  assert_int_equal(o.http_status, 500);
  assert_false(resil_outcome_is_success(&o));
  assert_true(o.flags & RESIL_OF_RECOVERED);
  assert_int_equal(o.stop, RESIL_STOP_NOT_RETRYABLE);
  assert_int_equal(o.attempts, 1);
  assert_int_equal(rep.write_attempts, 1);
  long slow = resil_fixture_attempts(s->f, "slow");
  if (slow != 1) {
    /* Seen once in CI (2 arrivals with one write attempt counted): say
     * what the client put on the wire. */
    resil_http_stats hs;
    resil_http_client_get_stats(c, &hs);
    fail_msg("the upstream saw %ld writes; client: requests_sent %llu, connections_opened "
             "%llu, resends_prevented %llu, resends_counted %llu, status_queries %llu; "
             "upstream connections %ld",
             slow, (unsigned long long)hs.requests_sent,
             (unsigned long long)hs.connections_opened,
             (unsigned long long)hs.resends_prevented, (unsigned long long)hs.resends_counted,
             (unsigned long long)hs.status_queries, resil_fixture_connections(s->f));
  }
  assert_string_equal(resil_http_response_body(r, NULL), "{\"error\":\"declined\"}");
  resil_http_response_free(r);
  resil_retry_free(retry);
  resil_http_client_free(c);
}

/* ---- UNKNOWN -------------------------------------------------------------------- */

/* A 503 may have executed: the status endpoint does not know the key (404),
 * so the retry re-sends the write with the same key, and that answer
 * stands. */
static void status_404_retries_the_write_with_the_same_key(void **state) {
  fx_state *s = *state;
  key_log log = {0};
  client_opts opt = {.log = &log};
  resil_http_client *c = client_on(s->f, eps, NEPS, apply_opts, &opt);
  resil_retry *retry = retry_n(3);
  resil_http_param ps[] = {{"id", "u404"}, {"n", "1"}};
  resil_http_args args = args_of(ps, 2, NULL);
  resil_http_response *r = NULL;
  resil_http_recovery rep;
  resil_outcome o = resil_http_call_keyed(c, "flaky_keyed", &args, retry, NULL, NULL, &r, &rep);
  assert_int_equal(o.kind, RESIL_ANSWERED);
  assert_int_equal(o.http_status, 200);
  assert_false(o.flags & RESIL_OF_RECOVERED);
  assert_false(resil_http_response_recovered(r));
  assert_int_equal(o.attempts, 2);
  assert_int_equal(rep.write_attempts, 2);
  assert_int_equal(rep.status_queries, 1);
  assert_int_equal(rep.unknown_answers, 1);
  assert_int_equal(rep.state, RESIL_HTTP_OP_UNKNOWN);
  assert_int_equal(rep.last_query.http_status, 404);
  assert_int_equal(resil_fixture_attempts(s->f, "flaky"), 2);
  assert_int_equal(resil_fixture_attempts(s->f, "operations"), 1);

  /* write, status, write: both writes carried the key the server saw. */
  assert_int_equal(log.n, 3);
  assert_string_equal(log.ep[0], "flaky_keyed");
  assert_string_equal(log.ep[1], "op_status");
  assert_string_equal(log.ep[2], "flaky_keyed");
  assert_true(strlen(log.key[0]) > 0);
  assert_string_equal(log.key[0], log.key[2]);
  char seen[80];
  assert_int_equal(resil_fixture_last_header(s->f, "flaky", "idempotency-key", seen, sizeof seen), 1);
  assert_string_equal(seen, log.key[0]);
  resil_http_stats st;
  resil_http_client_get_stats(c, &st);
  assert_int_equal(st.status_queries, 1);
  assert_int_equal(st.status_unknown, 1);
  assert_int_equal(st.recovered, 0);
  resil_http_response_free(r);
  resil_retry_free(retry);
  resil_http_client_free(c);
}

/* A write that never committed anything (the slow route keeps no
 * operation table) times out twice: each UNKNOWN asks the status endpoint,
 * each 404 leaves it to the retry, and the call ends UNKNOWN, never a
 * success. */
static void unknown_status_each_time_ends_unknown_after_max_attempts(void **state) {
  fx_state *s = *state;
  key_log log = {0};
  client_opts opt = {.response_timeout_ms = WRITE_TIMEOUT_MS, .log = &log};
  resil_http_client *c = client_on(s->f, eps, NEPS, apply_opts, &opt);
  resil_retry *retry = retry_n(2);
  resil_http_param ps[] = {{"ms", SLOW_MS}};
  resil_http_args args = args_of(ps, 1, "never-committed");
  resil_http_recovery rep;
  resil_outcome o = resil_http_call_keyed(c, "slow_keyed", &args, retry, NULL, NULL, NULL, &rep);
  assert_outcome(o, RESIL_UNKNOWN, RESIL_REASON_TIMEOUT);
  assert_false(o.flags & (RESIL_OF_RECOVERED | RESIL_OF_STATUS_PENDING));
  assert_int_equal(o.stop, RESIL_STOP_MAX_ATTEMPTS);
  assert_int_equal(o.attempts, 2);
  assert_int_equal(rep.write_attempts, 2);
  assert_int_equal(rep.status_queries, 2);
  assert_int_equal(rep.unknown_answers, 2);
  assert_int_equal(log.n, 4);
  assert_string_equal(log.key[0], "never-committed");
  assert_string_equal(log.key[2], "never-committed");
  char seen[80];
  assert_int_equal(resil_fixture_last_header(s->f, "slow", "idempotency-key", seen, sizeof seen), 1);
  assert_string_equal(seen, "never-committed");
  assert_int_equal(resil_fixture_attempts(s->f, "operations"), 2);

  /* Without a retry the 404 ends the call: still UNKNOWN. */
  resil_fixture_reset(s->f);
  resil_http_response *r = NULL;
  o = resil_http_call_keyed(c, "slow_keyed", &args, NULL, NULL, NULL, &r, &rep);
  assert_outcome(o, RESIL_UNKNOWN, RESIL_REASON_TIMEOUT);
  assert_int_equal(o.stop, RESIL_STOP_NONE);
  assert_int_equal(rep.write_attempts, 1);
  assert_int_equal(rep.status_queries, 1);
  assert_int_equal(resil_http_response_status(r), 0);
  assert_false(resil_http_response_recovered(r));
  resil_http_response_free(r);
  resil_retry_free(retry);
  resil_http_client_free(c);
}

/* A 200 that is not the status contract (here the echo route) is no
 * answer at all: never taken for COMMITTED. */
static void status_answer_outside_the_contract_counts_as_unknown(void **state) {
  fx_state *s = *state;
  client_opts opt = {.response_timeout_ms = WRITE_TIMEOUT_MS};
  resil_http_client *c = client_on(s->f, eps, NEPS, apply_opts, &opt);
  resil_http_param ps[] = {{"ms", SLOW_MS}};
  resil_http_args args = args_of(ps, 1, "odd-status");
  resil_http_recovery rep;
  resil_outcome o = resil_http_call_keyed(c, "slow_echo_status", &args, NULL, NULL, NULL, NULL, &rep);
  assert_outcome(o, RESIL_UNKNOWN, RESIL_REASON_TIMEOUT);
  assert_false(resil_outcome_is_success(&o));
  assert_int_equal(rep.status_queries, 1);
  assert_int_equal(rep.failed_queries, 1);
  assert_int_equal(rep.unknown_answers, 0);
  assert_int_equal(rep.state, RESIL_HTTP_OP_UNKNOWN);
  assert_int_equal(rep.last_query.http_status, 200);
  /* The query carried the key in its query string. */
  assert_int_equal(resil_fixture_attempts(s->f, "echo"), 1);
  resil_http_client_free(c);
}

/* A COMMITTED answer about another key says nothing about this call. */
static void committed_answer_about_another_key_is_not_taken(void **state) {
  fx_state *s = *state;
  client_opts opt = {.response_timeout_ms = WRITE_TIMEOUT_MS};
  resil_http_client *c = client_on(s->f, eps, NEPS, apply_opts, &opt);
  op_pending(s->f, "xmine");
  assert_int_equal(resil_fixture_op_complete(s->f, "xmine", 201, "{\"theirs\":1}", 0), 0);
  resil_http_param ps[] = {{"ms", SLOW_MS}};
  resil_http_args args = args_of(ps, 1, "mine");
  resil_http_response *r = NULL;
  resil_http_recovery rep;
  resil_outcome o = resil_http_call_keyed(c, "slow_other_key", &args, NULL, NULL, NULL, &r, &rep);
  assert_outcome(o, RESIL_UNKNOWN, RESIL_REASON_TIMEOUT);
  assert_false(o.flags & RESIL_OF_RECOVERED);
  assert_false(resil_http_response_recovered(r));
  assert_int_equal(rep.failed_queries, 1);
  assert_int_equal(rep.state, RESIL_HTTP_OP_UNKNOWN);
  assert_int_equal(resil_fixture_attempts(s->f, "operations"), 1);
  resil_http_response_free(r);
  resil_http_client_free(c);
}

/* ---- nothing to ask ----------------------------------------------------------------- */

static void call_without_a_key_makes_no_status_query(void **state) {
  fx_state *s = *state;
  client_opts opt = {.response_timeout_ms = WRITE_TIMEOUT_MS};
  resil_http_client *c = client_on(s->f, eps, NEPS, apply_opts, &opt);
  resil_retry *retry = retry_n(3);
  resil_http_param ps[] = {{"ms", SLOW_MS}};
  resil_http_args args = args_of(ps, 1, NULL);
  resil_http_recovery rep;
  resil_outcome o = resil_http_call_keyed(c, "slow_unkeyed", &args, retry, NULL, NULL, NULL, &rep);
  assert_outcome(o, RESIL_UNKNOWN, RESIL_REASON_TIMEOUT);
  /* No key: not retried either (the safety rule), and nothing to ask. */
  assert_int_equal(o.stop, RESIL_STOP_UNSAFE);
  assert_int_equal(rep.write_attempts, 1);
  assert_int_equal(rep.status_queries, 0);
  assert_int_equal(rep.state, RESIL_HTTP_OP_NONE);
  assert_int_equal(rep.last_query.kind, 0);
  assert_int_equal(resil_fixture_attempts(s->f, "operations"), 0);
  resil_http_stats st;
  resil_http_client_get_stats(c, &st);
  assert_int_equal(st.status_queries, 0);
  resil_retry_free(retry);
  resil_http_client_free(c);
}

/* A keyed endpoint without a status endpoint, or a client with the
 * queries switched off, behaves as resil_http_call(). */
static void no_status_endpoint_or_no_query_classes_behaves_as_plain_call(void **state) {
  fx_state *s = *state;
  client_opts opt = {.response_timeout_ms = WRITE_TIMEOUT_MS};
  resil_http_client *c = client_on(s->f, eps, NEPS, apply_opts, &opt);
  resil_retry *retry = retry_n(3);
  resil_http_param ps[] = {{"name", "plain"}, {"ms", SLOW_MS}};
  resil_http_args args = args_of(ps, 2, NULL);
  resil_http_response *r = NULL;
  resil_http_recovery rep;
  resil_outcome o = resil_http_call_keyed(c, "idem_plain", &args, retry, NULL, NULL, &r, &rep);
  assert_int_equal(o.http_status, 201);
  assert_int_equal(o.attempts, 2);
  assert_false(o.flags & RESIL_OF_RECOVERED);
  assert_int_equal(rep.status_queries, 0);
  assert_string_equal(resil_http_response_header(r, "idempotent-replayed"), "true");
  assert_int_equal(resil_fixture_effects(s->f, "idem"), 1);
  assert_int_equal(resil_fixture_attempts(s->f, "operations"), 0);
  resil_http_response_free(r);
  resil_http_client_free(c);

  resil_fixture_reset(s->f);
  client_opts off = {.response_timeout_ms = WRITE_TIMEOUT_MS, .set_classes = 1, .classes = 0};
  c = client_on(s->f, eps, NEPS, apply_opts, &off);
  ps[0].value = "off";
  o = resil_http_call_keyed(c, "idem", &args, retry, NULL, NULL, NULL, &rep);
  assert_int_equal(o.http_status, 201);
  assert_int_equal(o.attempts, 2);
  assert_int_equal(rep.status_queries, 0);
  assert_int_equal(resil_fixture_attempts(s->f, "operations"), 0);
  resil_retry_free(retry);
  resil_http_client_free(c);
}

/* ---- logging, bad input, allocation failures --------------------------------------- */

typedef struct log_sink {
  int recovered_lines;
  int key_logged;
  const char *key;
} log_sink;

static void sink(void *user, resil_http_log_level level, const char *line) {
  log_sink *l = user;
  (void)level;
  if (strstr(line, "recovered_from=op_status") && strstr(line, "status=201")) l->recovered_lines++;
  if (l->key && strstr(line, l->key)) l->key_logged++;
}

static void set_metadata_log(resil_http_client_config *cfg, void *u) {
  cfg->log_level = RESIL_HTTP_LOG_METADATA;
  cfg->log_fn = sink;
  cfg->log_user = u;
}

static void recovered_answer_is_logged_as_such(void **state) {
  fx_state *s = *state;
  log_sink l = {.key = "log-key-77"};
  resil_http_client *c = client_on(s->f, eps, NEPS, set_metadata_log, &l);
  resil_http_args args = args_of(NULL, 0, "log-key-77");
  resil_outcome o = resil_http_call_keyed(c, "idem_close", &args, NULL, NULL, NULL, NULL, NULL);
  assert_true(o.flags & RESIL_OF_RECOVERED);
  assert_int_equal(l.recovered_lines, 1);
  /* Metadata only: no URL, so not the key in the status path either. */
  assert_int_equal(l.key_logged, 0);
  resil_http_client_free(c);
}

static void unbuildable_request_and_bad_retry_send_nothing(void **state) {
  fx_state *s = *state;
  resil_http_client *c = client_on(s->f, eps, NEPS, NULL, NULL);
  resil_http_response *r = NULL;
  resil_http_recovery rep;
  rep.write_attempts = 99;
  resil_outcome o = resil_http_call_keyed(c, "no_such_endpoint", NULL, NULL, NULL, NULL, &r, &rep);
  assert_outcome(o, RESIL_NOT_SENT, RESIL_REASON_LOCAL_ERROR);
  assert_non_null(resil_http_response_error(r));
  assert_int_equal(rep.write_attempts, 0);
  resil_http_response_free(r);
  /* Something that is not a retry: refused before anything is sent. */
  static uint64_t not_a_retry[64];
  resil_retry *retry = (resil_retry *)(void *)not_a_retry;
  resil_http_args args = args_of(NULL, 0, "bad-retry");
  o = resil_http_call_keyed(c, "idem_close", &args, retry, NULL, NULL, NULL, &rep);
  assert_outcome(o, RESIL_NOT_SENT, RESIL_REASON_LOCAL_ERROR);
  assert_int_equal(rep.write_attempts, 0);
  /* No time left: the retry refuses the first write. */
  resil_retry *real = retry_n(2);
  resil_ctx ctx;
  resil_ctx_init(&ctx);
  resil_ctx_set_timeout_ns(&ctx, 0);
  o = resil_http_call_keyed(c, "idem_close", &args, real, NULL, &ctx, NULL, &rep);
  assert_outcome(o, RESIL_REJECTED, RESIL_REASON_DEADLINE);
  assert_int_equal(o.attempts, 0);
  assert_int_equal(rep.write_attempts, 0);
  assert_int_equal(rep.status_queries, 0);
  resil_retry_free(real);
  assert_int_equal(resil_fixture_connections(s->f), 0);
  resil_http_client_free(c);
}

/* Every allocation of a recovering call fails in turn: each run ends
 * without a leak, and a success is reported only with the stored result
 * in hand (never from an answer that could not be read). */
static void allocation_failures_never_turn_into_a_success(void **state) {
  fx_state *s = *state;
  test_alloc ta;
  test_alloc_init(&ta, 0);
  resil_http_client_config cfg;
  resil_http_client_config_init(&cfg);
  cfg.base_url = resil_fixture_url(s->f);
  cfg.endpoints = eps;
  cfg.endpoint_count = NEPS;
  cfg.alloc = &ta.a;
  resil_http_client *c = NULL;
  assert_status(RESIL_OK, resil_http_client_new(&cfg, &c, NULL));
  /* Warm up the pool slots, then count one recovering call. */
  resil_http_args args = args_of(NULL, 0, "alloc-warm");
  resil_http_response *r = NULL;
  resil_outcome o = resil_http_call_keyed(c, "idem_close", &args, NULL, NULL, NULL, &r, NULL);
  assert_true(o.flags & RESIL_OF_RECOVERED);
  resil_http_response_free(r);
  long before = ta.count;
  args.idempotency_key = "alloc-count";
  o = resil_http_call_keyed(c, "idem_close", &args, NULL, NULL, NULL, &r, NULL);
  assert_true(o.flags & RESIL_OF_RECOVERED);
  resil_http_response_free(r);
  long n = ta.count - before;
  assert_true(n > 3);
  for (long k = 1; k <= n + 1; k++) {
    char key[32];
    snprintf(key, sizeof key, "alloc-%ld", k);
    args.idempotency_key = key;
    ta.fail_at = ta.count + k;
    r = NULL;
    resil_http_recovery rep;
    o = resil_http_call_keyed(c, "idem_close", &args, NULL, NULL, NULL, &r, &rep);
    ta.fail_at = 0;
    if (resil_outcome_is_success(&o)) {
      assert_true(o.flags & RESIL_OF_RECOVERED);
      assert_int_equal(rep.state, RESIL_HTTP_OP_COMMITTED);
      assert_non_null(r);
      assert_non_null(strstr((const char *)resil_http_response_body(r, NULL), key));
    } else {
      assert_true(o.kind == RESIL_NOT_SENT || o.kind == RESIL_UNKNOWN);
      assert_false(o.flags & RESIL_OF_RECOVERED);
    }
    resil_http_response_free(r);
  }
  resil_http_client_free(c);
  assert_int_equal(ta.live, 0);
}

/* ---- keyed calls through a chain (issue 7) ------------------------------------- */

typedef struct policies {
  resil_breaker *br;
  resil_ratelimiter *rl;
  resil_bulkhead *bh;
  resil_chain *ch;
} policies;

static void policies_new(policies *p, int64_t permits) {
  resil_breaker_config bc;
  resil_breaker_config_init(&bc);
  assert_status(RESIL_OK, resil_breaker_new(&bc, &p->br, NULL));
  resil_ratelimiter_config rc;
  resil_ratelimiter_config_init(&rc);
  rc.limit_for_period = permits;
  rc.refresh_period_ns = RESIL_S(60);
  rc.timeout_ns = 0;
  assert_status(RESIL_OK, resil_ratelimiter_new(&rc, &p->rl, NULL));
  resil_bulkhead_config bhc;
  resil_bulkhead_config_init(&bhc);
  bhc.max_concurrent = 2;
  assert_status(RESIL_OK, resil_bulkhead_new(&bhc, &p->bh, NULL));
  resil_chain_config cc;
  resil_chain_config_init(&cc);
  assert_status(RESIL_OK, resil_chain_new(&cc, &p->ch, NULL));
  assert_status(RESIL_OK, resil_chain_add_breaker(p->ch, p->br));
  assert_status(RESIL_OK, resil_chain_add_ratelimiter(p->ch, p->rl));
  assert_status(RESIL_OK, resil_chain_add_bulkhead(p->ch, p->bh));
}

static void policies_free(policies *p) {
  resil_chain_free(p->ch);
  resil_bulkhead_free(p->bh);
  resil_ratelimiter_free(p->rl);
  resil_breaker_free(p->br);
}

/* A custom innermost layer that records the context each request carries. */
typedef struct ctx_seen {
  int n;
  char keys[8][64];
  uint32_t flags[8];
} ctx_seen;

static resil_outcome record_ctx(void *policy, const resil_ctx *ctx, resil_call_fn fn, void *arg) {
  ctx_seen *cs = policy;
  if (cs->n < 8) {
    snprintf(cs->keys[cs->n], sizeof cs->keys[0], "%s",
             ctx->idempotency_key ? ctx->idempotency_key : "");
    cs->flags[cs->n] = ctx->flags;
    cs->n++;
  }
  return fn(arg, ctx);
}

static void keyed_call_runs_every_physical_request_through_the_chain(void **state) {
  fx_state *s = *state;
  client_opts opt = {.response_timeout_ms = WRITE_TIMEOUT_MS};
  resil_http_client *c = client_on(s->f, eps, NEPS, apply_opts, &opt);
  policies p;
  policies_new(&p, 100);
  resil_retry *retry = retry_n(2);
  resil_http_param ps[] = {{"ms", SLOW_MS}};
  resil_http_args args = args_of(ps, 1, NULL);
  resil_http_recovery rep;
  resil_outcome o = resil_http_call_keyed(c, "slow_keyed", &args, retry, p.ch, NULL, NULL, &rep);
  /* Two writes, each followed by a status query (404: UNKNOWN). */
  assert_int_equal(o.kind, RESIL_UNKNOWN);
  assert_int_equal(o.stop, RESIL_STOP_MAX_ATTEMPTS);
  assert_int_equal(rep.write_attempts, 2);
  assert_int_equal(rep.status_queries, 2);
  assert_int_equal(rep.unknown_answers, 2);
  assert_int_equal(resil_fixture_attempts(s->f, "slow"), 2);
  assert_int_equal(resil_fixture_attempts(s->f, "operations"), 2);
  /* Breaker, rate limiter and bulkhead each saw all four requests. */
  assert_int_equal(resil_chain_layers(p.ch), 3);
  for (size_t i = 0; i < 3; i++) {
    resil_layer_stats ls;
    assert_status(RESIL_OK, resil_chain_layer_stats(p.ch, i, &ls));
    assert_int_equal(ls.calls_in, 4);
    assert_int_equal(ls.attempts_out, 4);
    assert_int_equal(ls.rejections, 0);
    assert_int_equal(ls.by_kind[RESIL_UNKNOWN], 2);
    assert_int_equal(ls.by_kind[RESIL_ANSWERED], 2);
  }
  resil_layer_stats cs;
  resil_chain_call_stats(p.ch, &cs);
  assert_int_equal(cs.calls_in, 4);
  policies_free(&p);

  /* Inner layers see the call's key (ctx->idempotency_key) on every
   * request; a status query is an idempotent read, the write is keyed. */
  resil_fixture_reset(s->f);
  ctx_seen seen = {0};
  resil_chain_config ccfg;
  resil_chain_config_init(&ccfg);
  resil_chain *rch = NULL;
  assert_status(RESIL_OK, resil_chain_new(&ccfg, &rch, NULL));
  resil_layer lay = {.struct_size = sizeof(resil_layer), .kind = RESIL_LAYER_CUSTOM, .label = "Record", .name = "record",
                     .policy = &seen, .run = record_ctx, .max_attempts = 1};
  assert_status(RESIL_OK, resil_chain_add_layer(rch, &lay));
  resil_http_args kargs = args_of(ps, 1, "k-chain-ctx");
  /* An older caller's report (without the key): written up to its size. */
  resil_http_recovery small;
  memset(&small, 0xab, sizeof small);
  o = resil_http_call_keyed_sized(c, "slow_keyed", &kargs, NULL, rch, NULL, NULL, &small,
                                  offsetof(resil_http_recovery, idempotency_key));
  assert_int_equal(o.kind, RESIL_UNKNOWN);
  assert_int_equal(small.struct_size, offsetof(resil_http_recovery, idempotency_key));
  assert_int_equal(small.status_queries, 1);
  assert_int_equal((unsigned char)small.idempotency_key[0], 0xab);
  assert_int_equal(seen.n, 2);
  assert_string_equal(seen.keys[0], "k-chain-ctx");
  assert_string_equal(seen.keys[1], "k-chain-ctx");
  assert_true(seen.flags[0] & RESIL_CALL_STABLE_KEY);
  assert_int_equal(seen.flags[1], RESIL_CALL_IDEMPOTENT);
  resil_chain_free(rch);

  /* A layer may refuse a status query: one permit, taken by the write. */
  resil_fixture_reset(s->f);
  policies_new(&p, 1);
  o = resil_http_call_keyed(c, "slow_keyed", &args, NULL, p.ch, NULL, NULL, &rep);
  assert_int_equal(o.kind, RESIL_UNKNOWN);
  assert_int_equal(rep.write_attempts, 1);
  assert_int_equal(rep.status_queries, 1);
  assert_int_equal(rep.failed_queries, 1);
  assert_int_equal(rep.last_query.kind, RESIL_REJECTED);
  assert_int_equal(rep.state, RESIL_HTTP_OP_UNKNOWN);
  assert_int_equal(resil_fixture_attempts(s->f, "operations"), 0);
  resil_layer_stats ls;
  assert_status(RESIL_OK, resil_chain_layer_stats(p.ch, 1, &ls));
  assert_int_equal(ls.calls_in, 2);
  assert_int_equal(ls.rejections, 1);
  policies_free(&p);

  /* A chain with a retry layer would re-send before asking: refused. */
  resil_fixture_reset(s->f);
  resil_chain_config cc;
  resil_chain_config_init(&cc);
  resil_chain *ch = NULL;
  assert_status(RESIL_OK, resil_chain_new(&cc, &ch, NULL));
  assert_status(RESIL_OK, resil_chain_add_retry(ch, retry));
  resil_http_response *r = NULL;
  o = resil_http_call_keyed(c, "slow_keyed", &args, NULL, ch, NULL, &r, &rep);
  assert_outcome(o, RESIL_NOT_SENT, RESIL_REASON_LOCAL_ERROR);
  assert_non_null(strstr(resil_http_response_error(r), "retry layer"));
  assert_int_equal(rep.write_attempts, 0);
  assert_int_equal(resil_fixture_connections(s->f), 0);
  resil_http_response_free(r);
  resil_chain_free(ch);
  resil_retry_free(retry);
  resil_http_client_free(c);
}

/* ---- the key comes back, and can be asked about later (issue 7) ---------------- */

static void generated_key_is_returned_and_its_status_can_be_asked_later(void **state) {
  fx_state *s = *state;
  resil_http_client *c = client_on(s->f, eps, NEPS, NULL, NULL);
  resil_http_param ps[] = {{"name", "later"}, {"ms", "0"}};
  resil_http_args args = args_of(ps, 2, NULL);
  resil_http_response *r = NULL;
  resil_http_recovery rep;
  resil_outcome o = resil_http_call_keyed(c, "idem", &args, NULL, NULL, NULL, &r, &rep);
  assert_int_equal(o.http_status, 201);
  char sent[80];
  assert_int_equal(resil_fixture_last_header(s->f, "idem", "idempotency-key", sent, sizeof sent), 1);
  assert_int_equal(strlen(sent), 32);
  assert_string_equal(rep.idempotency_key, sent);
  assert_string_equal(resil_http_response_idempotency_key(r), sent);
  resil_http_response_free(r);

  /* Later: what became of it? The stored result, no new write. */
  resil_http_op_state st = RESIL_HTTP_OP_NONE;
  o = resil_http_operation_status(c, "idem", sent, NULL, NULL, NULL, &st, &r);
  assert_int_equal(st, RESIL_HTTP_OP_COMMITTED);
  assert_int_equal(o.kind, RESIL_ANSWERED);
  assert_int_equal(o.http_status, 201);
  assert_true(o.flags & RESIL_OF_RECOVERED);
  assert_true(resil_http_response_recovered(r));
  assert_string_equal(resil_http_response_idempotency_key(r), sent);
  json_t *j = resil_http_response_json(r);
  assert_int_equal(json_integer_value(json_object_get(j, "effect")), 1);
  resil_http_response_free(r);
  assert_int_equal(resil_fixture_attempts(s->f, "idem"), 1);
  assert_int_equal(resil_fixture_attempts(s->f, "operations"), 1);

  /* A key the server never saw: UNKNOWN, the 404 itself as the response. */
  o = resil_http_operation_status(c, "idem", "never-sent-1", NULL, NULL, NULL, &st, &r);
  assert_int_equal(st, RESIL_HTTP_OP_UNKNOWN);
  assert_int_equal(o.http_status, 404);
  assert_false(resil_http_response_recovered(r));
  resil_http_response_free(r);
  /* One still in progress. */
  op_pending(s->f, "k-pending-later");
  o = resil_http_operation_status(c, "idem", "k-pending-later", NULL, NULL, NULL, &st, NULL);
  assert_int_equal(st, RESIL_HTTP_OP_PENDING);
  assert_int_equal(o.http_status, 200);
  assert_int_equal(resil_fixture_attempts(s->f, "operations"), 3);

  /* Misuse sends nothing. */
  o = resil_http_operation_status(c, "idem_plain", sent, NULL, NULL, NULL, &st, &r);
  assert_outcome(o, RESIL_NOT_SENT, RESIL_REASON_LOCAL_ERROR);
  assert_int_equal(st, RESIL_HTTP_OP_NONE);
  assert_non_null(strstr(resil_http_response_error(r), "status_endpoint"));
  resil_http_response_free(r);
  o = resil_http_operation_status(c, "idem", "", NULL, NULL, NULL, &st, NULL);
  assert_outcome(o, RESIL_NOT_SENT, RESIL_REASON_LOCAL_ERROR);
  o = resil_http_operation_status(c, "idem", sent, NULL, NULL, NULL, NULL, NULL);
  assert_outcome(o, RESIL_NOT_SENT, RESIL_REASON_LOCAL_ERROR);
  assert_int_equal(resil_fixture_attempts(s->f, "operations"), 3);
  resil_http_client_free(c);
}

/* A status query for key ".." goes to /operations/%2E%2E, not to "/". */
static void status_query_for_a_dot_key_reaches_the_status_route(void **state) {
  fx_state *s = *state;
  client_opts opt = {.response_timeout_ms = WRITE_TIMEOUT_MS};
  resil_http_client *c = client_on(s->f, eps, NEPS, apply_opts, &opt);
  resil_http_param ps[] = {{"ms", SLOW_MS}};
  resil_http_args args = args_of(ps, 1, "..");
  resil_http_recovery rep;
  resil_outcome o = resil_http_call_keyed(c, "slow_keyed", &args, NULL, NULL, NULL, NULL, &rep);
  assert_int_equal(o.kind, RESIL_UNKNOWN);
  assert_int_equal(rep.status_queries, 1);
  assert_int_equal(rep.unknown_answers, 1);
  assert_int_equal(resil_fixture_attempts(s->f, "operations"), 1);
  resil_http_op_state st;
  resil_http_response *r = NULL;
  o = resil_http_operation_status(c, "slow_keyed", "..", NULL, NULL, NULL, &st, &r);
  assert_int_equal(o.http_status, 404);
  assert_int_equal(st, RESIL_HTTP_OP_UNKNOWN);
  /* The status route answered about key "..". */
  assert_string_equal(json_string_value(json_object_get(resil_http_response_json(r), "key")), "..");
  resil_http_response_free(r);
  assert_int_equal(resil_fixture_attempts(s->f, "operations"), 2);
  resil_http_client_free(c);
}

/* ---- stored bodies that are not text (issue 7) ---------------------------------- */

static const resil_http_endpoint raw_eps[] = {
    RESIL_HTTP_ENDPOINT(.name = "st", .path = "/operations/{key}",
                        .response_codec = RESIL_HTTP_CODEC_JSON),
    RESIL_HTTP_ENDPOINT(.name = "w", .method = RESIL_HTTP_POST, .path = "/w",
                        .idempotency_key = RESIL_HTTP_KEY_SEND, .status_endpoint = "st"),
};

/* The write's connection closes unanswered (UNKNOWN); the status endpoint
 * answers `status_json`. Returns the call's outcome, *r its response. */
static resil_outcome recover_from(const char *status_json, resil_http_response **r,
                                  resil_http_recovery *rep) {
  char reply[512];
  snprintf(reply, sizeof reply,
           "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %zu\r\n"
           "Connection: close\r\n\r\n%s",
           strlen(status_json), status_json);
  const char *replies[] = {NULL, reply};
  raw_server rs;
  raw_start(&rs, replies, 2);
  resil_http_client_config cfg;
  resil_http_client_config_init(&cfg);
  cfg.endpoints = raw_eps;
  cfg.endpoint_count = 2;
  raw_use(&cfg, &rs);
  resil_http_client *c = NULL;
  assert_status(RESIL_OK, resil_http_client_new(&cfg, &c, NULL));
  resil_http_args args = args_of(NULL, 0, "k-bin");
  resil_outcome o = resil_http_call_keyed(c, "w", &args, NULL, NULL, NULL, r, rep);
  resil_http_client_free(c);
  raw_stop(&rs);
  char line[128];
  raw_request_line(&rs, 1, line, sizeof line);
  assert_string_equal(line, "GET /operations/k-bin HTTP/1.1");
  return o;
}

static void recovery_reads_body_base64_and_bodies_with_nul(void **state) {
  (void)state;
  resil_http_response *r = NULL;
  resil_http_recovery rep;
  /* What resil_idem_mhd sends for a stored body that is not UTF-8. */
  resil_outcome o = recover_from(
      "{\"key\":\"k-bin\",\"state\":\"COMMITTED\",\"status\":201,\"body_base64\":\"AAH/ZQ==\"}", &r,
      &rep);
  assert_int_equal(o.http_status, 201);
  assert_true(o.flags & RESIL_OF_RECOVERED);
  size_t n = 0;
  const unsigned char *b = resil_http_response_body(r, &n);
  assert_int_equal(n, 4);
  assert_memory_equal(b, "\x00\x01\xff\x65", 4);
  resil_http_response_free(r);
  /* A JSON string with a NUL byte in it. */
  o = recover_from("{\"state\":\"COMMITTED\",\"status\":200,\"body\":\"a\\u0000b\"}", &r, &rep);
  assert_int_equal(o.http_status, 200);
  assert_true(resil_http_response_recovered(r));
  b = resil_http_response_body(r, &n);
  assert_int_equal(n, 3);
  assert_memory_equal(b, "a\0b", 3);
  resil_http_response_free(r);
  /* base64 that is not base64 is no usable answer: never a success. */
  o = recover_from("{\"state\":\"COMMITTED\",\"status\":200,\"body_base64\":\"!!!\"}", &r, &rep);
  assert_int_equal(o.kind, RESIL_UNKNOWN);
  assert_int_equal(rep.failed_queries, 1);
  assert_false(resil_http_response_recovered(r));
  resil_http_response_free(r);
}

/* ---- the attempt listener in keyed calls (issue 7) ------------------------------- */

typedef struct attempt_log {
  int n;
  resil_attempt_info a[16];
  char keys[16][64];
} attempt_log;

static void log_attempt(void *u, const resil_attempt_info *ai) {
  attempt_log *l = u;
  if (l->n >= 16) return;
  l->a[l->n] = *ai;
  snprintf(l->keys[l->n], sizeof l->keys[0], "%s", ai->idempotency_key ? ai->idempotency_key : "");
  l->n++;
}

static void listen_and_poll(resil_http_client_config *cfg, void *u) {
  cfg->on_attempt = log_attempt;
  cfg->on_attempt_user = u;
  cfg->response_timeout_ns = MS(WRITE_TIMEOUT_MS);
  cfg->status_poll_ns = MS(40);
  cfg->pending_wait_max_ns = MS(100);
}

static void keyed_call_reports_each_request_once_with_its_waits(void **state) {
  fx_state *s = *state;
  attempt_log l = {0};
  resil_http_client *c = client_on(s->f, eps, NEPS, listen_and_poll, &l);
  resil_http_param ps[] = {{"ms", SLOW_MS}};
  /* No retry: the client decides the write and the queries, and reports
   * them all: the write, then PENDING polls until the wait ends. */
  op_pending(s->f, "k-listen-1");
  resil_http_args args = args_of(ps, 1, "k-listen-1");
  resil_http_recovery rep;
  resil_outcome o = resil_http_call_keyed(c, "slow_keyed", &args, NULL, NULL, NULL, NULL, &rep);
  assert_true(o.flags & RESIL_OF_STATUS_PENDING);
  assert_true(rep.status_queries >= 2);
  assert_int_equal(l.n, 1 + (int)rep.status_queries);
  assert_int_equal(l.a[0].attempt, 1);
  assert_int_equal(l.a[0].outcome.kind, RESIL_UNKNOWN);
  assert_int_equal(l.a[0].next_wait_ns, 0);
  assert_true(l.a[0].duration_ns >= MS(WRITE_TIMEOUT_MS) / 2);
  for (int i = 0; i < l.n; i++) assert_string_equal(l.keys[i], "k-listen-1");
  for (int i = 1; i < l.n; i++) {
    assert_int_equal(l.a[i].attempt, (uint32_t)i);
    assert_int_equal(l.a[i].outcome.http_status, 200);
    /* The poll slept before a query is the wait the previous one announced. */
    assert_int_equal(l.a[i].wait_before_ns, i == 1 ? 0 : l.a[i - 1].next_wait_ns);
    if (i > 1) assert_true(l.a[i].wait_before_ns >= MS(40));
  }
  assert_int_equal(l.a[l.n - 1].next_wait_ns, -1);

  /* With a retry, the writes are the retry's to report: the client reports
   * the status queries only, the last with the retry's stop. */
  l.n = 0;
  resil_retry *retry = retry_n(2);
  args = args_of(ps, 1, "k-listen-2");
  o = resil_http_call_keyed(c, "slow_keyed", &args, retry, NULL, NULL, NULL, &rep);
  assert_int_equal(o.stop, RESIL_STOP_MAX_ATTEMPTS);
  assert_int_equal(rep.write_attempts, 2);
  assert_int_equal(rep.status_queries, 2);
  assert_int_equal(l.n, 2);
  assert_int_equal(l.a[0].outcome.http_status, 404);
  assert_int_equal(l.a[0].next_wait_ns, 0);
  assert_int_equal(l.a[0].stop, RESIL_STOP_NONE);
  assert_int_equal(l.a[1].next_wait_ns, -1);
  assert_int_equal(l.a[1].stop, RESIL_STOP_MAX_ATTEMPTS);
  assert_string_equal(l.keys[1], "k-listen-2");
  resil_retry_free(retry);
  resil_http_client_free(c);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(client_new_rejects_status_endpoints_that_cannot_answer,
                                      fx_setup, fx_teardown),
      cmocka_unit_test_setup_teardown(i1_committed_write_recovers_from_status_with_one_write,
                                      fx_setup, fx_teardown),
      cmocka_unit_test_setup_teardown(
          i4_commit_then_close_recovers_and_a_replay_returns_the_same_body, fx_setup, fx_teardown),
      cmocka_unit_test_setup_teardown(committed_failure_is_returned_without_another_write,
                                      fx_setup, fx_teardown),
      cmocka_unit_test_setup_teardown(status_404_retries_the_write_with_the_same_key, fx_setup,
                                      fx_teardown),
      cmocka_unit_test_setup_teardown(unknown_status_each_time_ends_unknown_after_max_attempts,
                                      fx_setup, fx_teardown),
      cmocka_unit_test_setup_teardown(status_answer_outside_the_contract_counts_as_unknown,
                                      fx_setup, fx_teardown),
      cmocka_unit_test_setup_teardown(committed_answer_about_another_key_is_not_taken, fx_setup,
                                      fx_teardown),
      cmocka_unit_test_setup_teardown(call_without_a_key_makes_no_status_query, fx_setup,
                                      fx_teardown),
      cmocka_unit_test_setup_teardown(no_status_endpoint_or_no_query_classes_behaves_as_plain_call,
                                      fx_setup, fx_teardown),
      cmocka_unit_test_setup_teardown(recovered_answer_is_logged_as_such, fx_setup, fx_teardown),
      cmocka_unit_test_setup_teardown(unbuildable_request_and_bad_retry_send_nothing, fx_setup,
                                      fx_teardown),
      cmocka_unit_test_setup_teardown(allocation_failures_never_turn_into_a_success, fx_setup,
                                      fx_teardown),
      cmocka_unit_test_setup_teardown(keyed_call_runs_every_physical_request_through_the_chain,
                                      fx_setup, fx_teardown),
      cmocka_unit_test_setup_teardown(generated_key_is_returned_and_its_status_can_be_asked_later,
                                      fx_setup, fx_teardown),
      cmocka_unit_test_setup_teardown(status_query_for_a_dot_key_reaches_the_status_route,
                                      fx_setup, fx_teardown),
      cmocka_unit_test(recovery_reads_body_base64_and_bodies_with_nul),
      cmocka_unit_test_setup_teardown(keyed_call_reports_each_request_once_with_its_waits,
                                      fx_setup, fx_teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
