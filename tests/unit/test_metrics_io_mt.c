/* Metrics of the other libraries' instances, on real sockets and a real
 * SQLite file: the operation store's counters and PENDING count
 * (resil_store_get_stats, resil_store_count_pending, resil_store_metrics_add),
 * an HTTP client's attempts on the fixture, the idempotency helper through
 * the fixture's GET /metrics, and the libmicrohttpd handler's answers. */
#include <arpa/inet.h>
#include <curl/curl.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "resil/idem_mhd.h"
#include "resil/metrics_mhd.h"
#include "resil/store.h"
#include "test_engine_common.h"
#include "test_http_common.h"
#include "metrics_common.h"
#include "test_store_common.h"

static char *render(resil_metrics *m) {
  char *t = NULL;
  assert_status(RESIL_OK, resil_metrics_render_alloc(m, &t, NULL));
  return t;
}

static void has(const char *text, const char *line) {
  if (!strstr(text, line)) fail_msg("missing line \"%s\" in:\n%s", line, text);
}

static resil_status ok_effect(void *user, resil_store_txn *tx, const resil_op_record *p,
                              resil_op_response *out) {
  (void)user, (void)tx, (void)p;
  out->status = 201;
  return RESIL_OK;
}

/* On SQLite, and on PostgreSQL (its own schema) when RESIL_TEST_PG_URI is
 * set. */
static void store_case(ts_backend bk) {
  ts_env env;
  ts_env_setup(&env, bk, "metrics");
  resil_store *s = NULL;
  assert_status(RESIL_OK, resil_store_open(env.uri, NULL, &s, NULL));
  resil_op_request req;
  resil_op_request_init(&req);
  req.method = "POST";
  req.path = "/payments";
  req.body = "{}";
  req.body_len = 2;
  resil_op_begin_result r;
  resil_op_record rec;
  resil_op_record_init(&rec);
  assert_status(RESIL_OK, resil_store_begin(s, "k1", &req, &r, &rec));
  assert_int_equal(RESIL_OP_NEW, r);
  assert_status(RESIL_OK, resil_store_complete(s, "k1", ok_effect, NULL, &rec));
  assert_status(RESIL_OK, resil_store_begin(s, "k1", &req, &r, &rec));
  assert_int_equal(RESIL_OP_REPLAY, r);
  resil_op_request other = req;
  other.body = "{\"x\":1}";
  other.body_len = 7;
  assert_status(RESIL_OK, resil_store_begin(s, "k1", &other, &r, &rec));
  assert_int_equal(RESIL_OP_CONFLICT, r);
  assert_status(RESIL_OK, resil_store_begin(s, "k2", &req, &r, &rec));
  assert_status(RESIL_OK, resil_store_begin(s, "k2", &req, &r, &rec));
  assert_int_equal(RESIL_OP_IN_PROGRESS, r);
  uint64_t pending = 99;
  assert_status(RESIL_OK, resil_store_count_pending(s, &pending));
  assert_int_equal(1, pending);

  resil_metrics *m = NULL;
  assert_status(RESIL_OK, resil_metrics_new(NULL, &m));
  assert_status(RESIL_OK, resil_store_metrics_add(m, NULL, s));
  char *t = render(m);
  has(t, "resil_store_operations_total{name=\"store\",result=\"new\"} 2\n");
  has(t, "resil_store_operations_total{name=\"store\",result=\"replay\"} 1\n");
  has(t, "resil_store_operations_total{name=\"store\",result=\"conflict\"} 1\n");
  has(t, "resil_store_operations_total{name=\"store\",result=\"in_progress\"} 1\n");
  has(t, "resil_store_operations_total{name=\"store\",result=\"committed\"} 1\n");
  has(t, "resil_store_pending_operations{name=\"store\"} 1\n");
  has(t, "resil_store_recovery_runs_total{name=\"store\"} 0\n");
  resil_metrics_text_free(m, t);

  resil_store_recovery rep;
  assert_status(RESIL_OK, resil_store_recover_report(s, 0, 10, ok_effect, NULL, &rep));
  assert_int_equal(1, rep.recovered);
  resil_store_stats st;
  assert_status(RESIL_OK, resil_store_get_stats(s, &st));
  assert_int_equal(1, st.recovery_runs);
  assert_int_equal(1, st.recovered);
  assert_int_equal(2, st.committed);
  assert_int_equal(0, st.effect_failed);
  t = render(m);
  has(t, "resil_store_pending_operations{name=\"store\"} 0\n");
  has(t, "resil_store_recovery_runs_total{name=\"store\"} 1\n");
  has(t, "resil_store_recovered_operations_total{name=\"store\",result=\"recovered\"} 1\n");
  resil_metrics_text_free(m, t);
  assert_status(RESIL_EMISUSE, resil_store_get_stats(NULL, &st));
  assert_status(RESIL_EINVAL, resil_store_get_stats(s, NULL));
  assert_status(RESIL_EMISUSE, resil_store_count_pending(NULL, &pending));
  assert_status(RESIL_EINVAL, resil_store_metrics_add(m, "x", NULL));

  resil_metrics_free(m);
  resil_op_record_clear(&rec);
  resil_store_close(s);
  ts_env_teardown(&env);
}

static void store_counts_operations_pending_and_recovery(void **state) {
  (void)state;
  store_case(TS_SQLITE);
  if (ts_pg_base())
    store_case(TS_PG);
  else
    fprintf(stderr, "note: RESIL_TEST_PG_URI not set: the PostgreSQL half is not run\n");
}

static const resil_http_endpoint eps[] = {
    {.struct_size = sizeof(resil_http_endpoint), .name = "hello", .path = "/items/1"},
};

static void http_client_attempts_by_outcome(void **state) {
  fx_state *st = *state;
  resil_http_client *c = client_on(st->f, eps, 1, NULL, NULL);
  resil_outcome o = resil_http_call(c, "hello", NULL, NULL, NULL, NULL);
  assert_int_equal(200, o.http_status);
  resil_metrics *m = NULL;
  assert_status(RESIL_OK, resil_metrics_new(NULL, &m));
  assert_status(RESIL_OK, resil_http_client_metrics_add(m, "api", c));
  char *t = render(m);
  has(t, "# TYPE resil_http_client_attempts_total counter\n");
  has(t, "resil_http_client_attempts_total{name=\"api\",outcome=\"answered\"} 1\n");
  has(t, "resil_http_client_attempts_total{name=\"api\",outcome=\"not_sent\"} 0\n");
  has(t, "resil_http_client_requests_total{name=\"api\"} 1\n");
  has(t, "resil_http_client_resends_total{name=\"api\",kind=\"prevented\"} 0\n");
  has(t, "resil_http_client_pool_in_use{name=\"api\"} 0\n");
  resil_metrics_text_free(m, t);
  assert_status(RESIL_OK, resil_metrics_remove(m, c));
  resil_metrics_free(m);
  resil_http_client_free(c);
}

typedef struct got {
  char body[65536];
  size_t len;
  char ctype[128];
  char allow[64];
} got;

static size_t on_body(char *p, size_t sz, size_t n, void *u) {
  got *g = u;
  size_t k = sz * n;
  if (g->len + k < sizeof g->body) {
    memcpy(g->body + g->len, p, k);
    g->len += k;
    g->body[g->len] = '\0';
  }
  return sz * n;
}

static size_t on_header(char *p, size_t sz, size_t n, void *u) {
  got *g = u;
  size_t k = sz * n;
  if (k > 14 && strncasecmp(p, "Content-Type: ", 14) == 0)
    snprintf(g->ctype, sizeof g->ctype, "%.*s", (int)(k - 16), p + 14);
  if (k > 7 && strncasecmp(p, "Allow: ", 7) == 0)
    snprintf(g->allow, sizeof g->allow, "%.*s", (int)(k - 9), p + 7);
  return sz * n;
}

static long req(const char *method, const char *url, got *g) {
  memset(g, 0, sizeof *g);
  CURL *c = curl_easy_init();
  curl_easy_setopt(c, CURLOPT_URL, url);
  curl_easy_setopt(c, CURLOPT_NOPROXY, "*");
  curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
  curl_easy_setopt(c, CURLOPT_WRITEDATA, g);
  curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
  curl_easy_setopt(c, CURLOPT_HEADERDATA, g);
  if (strcmp(method, "HEAD") == 0)
    curl_easy_setopt(c, CURLOPT_NOBODY, 1L);
  else if (strcmp(method, "GET") != 0)
    curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
  long status = 0;
  if (curl_easy_perform(c) == CURLE_OK) curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
  curl_easy_cleanup(c);
  return status;
}

static void mhd_handler_serves_the_exposition(void **state) {
  (void)state;
  resil_breaker_config bc;
  resil_breaker_config_init(&bc);
  bc.name = "db";
  resil_breaker *br = NULL;
  assert_status(RESIL_OK, resil_breaker_new(&bc, &br, NULL));
  resil_metrics *m = NULL;
  assert_status(RESIL_OK, resil_metrics_new(NULL, &m));
  assert_status(RESIL_OK, resil_metrics_add_breaker(m, NULL, br));
  struct sockaddr_in sa = {.sin_family = AF_INET};
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  struct MHD_Daemon *d = MHD_start_daemon(
      MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION, 0, NULL, NULL,
      resil_metrics_mhd_access, m, MHD_OPTION_SOCK_ADDR, (const struct sockaddr *)&sa,
      MHD_OPTION_END);
  assert_non_null(d);
  const union MHD_DaemonInfo *di = MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT);
  char base[64], url[96];
  snprintf(base, sizeof base, "http://127.0.0.1:%u", (unsigned)di->port);
  got g;
  snprintf(url, sizeof url, "%s/metrics", base);
  assert_int_equal(200, req("GET", url, &g));
  assert_string_equal(RESIL_METRICS_CONTENT_TYPE, g.ctype);
  char *t = render(m);
  assert_string_equal(t, g.body);
  resil_metrics_text_free(m, t);
  assert_int_equal(200, req("HEAD", url, &g));
  assert_int_equal(0, g.len);
  assert_int_equal(405, req("POST", url, &g));
  assert_string_equal("GET, HEAD", g.allow);
  snprintf(url, sizeof url, "%s/other", base);
  assert_int_equal(404, req("GET", url, &g));
  MHD_stop_daemon(d);
  resil_metrics_free(m);
  resil_breaker_free(br);
}

static const resil_http_endpoint idem_eps[] = {
    {.struct_size = sizeof(resil_http_endpoint), .name = "idem", .method = RESIL_HTTP_POST,
     .path = "/idem/{name}", .idempotency_key = RESIL_HTTP_KEY_SEND},
};

/* The fixture's GET /metrics: its idempotency helper and store, once open. */
static void fixture_serves_its_store_metrics(void **state) {
  fx_state *st = *state;
  resil_http_client *c = client_on(st->f, idem_eps, 1, NULL, NULL);
  resil_http_param p = {"name", "a"};
  resil_http_args args;
  resil_http_args_init(&args);
  args.params = &p;
  args.param_count = 1;
  args.body = "{}";
  args.body_len = 2;
  resil_outcome o = resil_http_call(c, "idem", &args, NULL, NULL, NULL);
  assert_int_equal(201, o.http_status);
  char url[96];
  snprintf(url, sizeof url, "%s/metrics", resil_fixture_url(st->f));
  got g;
  assert_int_equal(200, req("GET", url, &g));
  has(g.body, "resil_idem_requests_total{name=\"fixture\",result=\"executed\"} 1\n");
  has(g.body, "resil_store_operations_total{name=\"fixture_store\",result=\"committed\"} 1\n");
  resil_http_client_free(c);
}

static resil_status no_handler(void *user, resil_idem_call *call, resil_op_response *out) {
  (void)user, (void)call, (void)out;
  return RESIL_EIO;
}

/* promtool on one instance of every kind: the core kinds, an HTTP client,
 * an engine, a store and an idempotency helper. */
static void promtool_accepts_every_kind(void **state) {
  fx_state *st = *state;
  mx_set s;
  mx_make(&s);
  resil_http_client *c = client_on(st->f, eps, 1, NULL, NULL);
  resil_http_call(c, "hello", NULL, NULL, NULL, NULL);
  ts_env env;
  ts_env_setup(&env, TS_SQLITE, "promtool");
  resil_store *store = NULL;
  assert_status(RESIL_OK, resil_store_open(env.uri, NULL, &store, NULL));
  resil_idem_mhd_config ic;
  resil_idem_mhd_config_init(&ic);
  ic.store = store;
  ic.handler = no_handler;
  resil_idem_mhd *h = NULL;
  assert_status(RESIL_OK, resil_idem_mhd_new(&ic, &h, NULL));
  assert_status(RESIL_OK, resil_http_client_metrics_add(s.m, NULL, c));
  assert_status(RESIL_OK, resil_store_metrics_add(s.m, NULL, store));
  assert_status(RESIL_OK, resil_idem_mhd_metrics_add(s.m, NULL, h));
  te_env *te = te_open(st->f, eps, 1, NULL, NULL);
  assert_status(RESIL_OK, resil_engine_metrics_add(s.m, "engine", te->e));
  char *t = render(s.m);
  has(t, "# TYPE resil_http_client_attempts_total counter\n");
  has(t, "# TYPE resil_store_pending_operations gauge\n");
  has(t, "# TYPE resil_idem_requests_total counter\n");
  has(t, "# TYPE resil_circuitbreaker_state gauge\n");
  has(t, "# TYPE resil_engine_rejected_total counter\n");
  resil_metrics_text_free(s.m, t);
  mx_promtool_check(s.m);
  assert_status(RESIL_OK, resil_metrics_remove(s.m, te->e));
  te_close(te);
  mx_free(&s);
  resil_idem_mhd_free(h);
  resil_store_close(store);
  ts_env_teardown(&env);
  resil_http_client_free(c);
}

int main(void) {
  curl_global_init(CURL_GLOBAL_DEFAULT);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(store_counts_operations_pending_and_recovery),
      cmocka_unit_test_setup_teardown(http_client_attempts_by_outcome, fx_setup, fx_teardown),
      cmocka_unit_test(mhd_handler_serves_the_exposition),
      cmocka_unit_test_setup_teardown(fixture_serves_its_store_metrics, fx_setup, fx_teardown),
      cmocka_unit_test_setup_teardown(promtool_accepts_every_kind, fx_setup, fx_teardown),
  };
  int rc = cmocka_run_group_tests(tests, NULL, NULL);
  curl_global_cleanup();
  return rc;
}
