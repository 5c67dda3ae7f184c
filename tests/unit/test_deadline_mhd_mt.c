/* Deadline propagation, the in direction (DESIGN §8.3, deadline_mhd.h,
 * idem_mhd.h `deadline`): a libmicrohttpd server takes the caller's budget
 * as the request's deadline (the smallest valid header, at most its
 * maximum), refuses below the floor with 504 before any work, counts; with
 * resil_idem_mhd, on a real SQLite store, a refused request leaves no row
 * (no PENDING operation) and the handler gets the deadline in call->ctx.
 * Requests are made with libcurl on 127.0.0.1, headers set by hand. */
#include <curl/curl.h>
#include <microhttpd.h>
#include <sqlite3.h>
#include <stdatomic.h>
#include <unistd.h>

#include "metrics_common.h"
#include "resil/deadline_mhd.h"
#include "resil/idem_mhd.h"
#include "resil/metrics_mhd.h"
#include "resil/store.h"
#include "test_http_common.h"

/* ---- a bare server: the helper in a handler ------------------------------- */

typedef struct bare {
  struct MHD_Daemon *d;
  resil_deadline_mhd *dl;
  char base[64];
  atomic_int handled;
  _Atomic int64_t remaining_ns; /* what the handler saw, -1 no deadline */
} bare;

static enum MHD_Result bare_access(void *cls, struct MHD_Connection *conn, const char *url,
                                   const char *method, const char *version, const char *up,
                                   size_t *up_size, void **con_cls) {
  (void)url, (void)method, (void)version, (void)up;
  bare *b = cls;
  static int first;
  if (!*con_cls) {
    *con_cls = &first;
    resil_ctx ctx;
    resil_ctx_init(&ctx);
    if (resil_deadline_mhd_read(b->dl, conn, &ctx, NULL) == RESIL_DEADLINE_REFUSE)
      return resil_deadline_mhd_refuse(b->dl, conn);
    atomic_store(&b->remaining_ns, ctx.deadline_ns == RESIL_NO_DEADLINE
                                       ? -1
                                       : resil_ctx_remaining_ns(&ctx));
    return MHD_YES;
  }
  if (*up_size) {
    *up_size = 0;
    return MHD_YES;
  }
  atomic_fetch_add(&b->handled, 1);
  struct MHD_Response *r = MHD_create_response_from_buffer(2, (void *)"{}", MHD_RESPMEM_PERSISTENT);
  enum MHD_Result rc = MHD_queue_response(conn, 200, r);
  MHD_destroy_response(r);
  return rc;
}

static struct MHD_Daemon *start_daemon(MHD_AccessHandlerCallback fn, void *cls,
                                       MHD_RequestCompletedCallback done, void *done_cls,
                                       char *base, size_t baselen) {
  struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = 0,
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  struct MHD_Daemon *d = MHD_start_daemon(
      MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION | MHD_USE_AUTO |
          MHD_USE_ITC,
      0, NULL, NULL, fn, cls, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&addr,
      MHD_OPTION_NOTIFY_COMPLETED, done, done_cls, MHD_OPTION_CONNECTION_TIMEOUT, 10u,
      MHD_OPTION_END);
  assert_non_null(d);
  const union MHD_DaemonInfo *di = MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT);
  snprintf(base, baselen, "http://127.0.0.1:%u", (unsigned)di->port);
  return d;
}

static bare *bare_start(int64_t max_ns) {
  bare *b = calloc(1, sizeof *b);
  assert_non_null(b);
  resil_deadline_mhd_config cfg;
  resil_deadline_mhd_config_init(&cfg);
  cfg.max_ns = max_ns;
  resil_error err;
  assert_status(RESIL_OK, resil_deadline_mhd_new(&cfg, &b->dl, &err));
  b->d = start_daemon(bare_access, b, NULL, NULL, b->base, sizeof b->base);
  return b;
}

static void bare_stop(bare *b) {
  MHD_stop_daemon(b->d);
  resil_deadline_mhd_free(b->dl);
  free(b);
}

/* One request with the given extra header lines (NULL-terminated); the
 * status, the body into body (may be NULL). */
static long request(const char *base, const char *path, const char *method, const char *body,
                    const char *const *hdrs, char *out, size_t outlen) {
  CURL *e = curl_easy_init();
  assert_non_null(e);
  char url[256];
  snprintf(url, sizeof url, "%s%s", base, path);
  struct curl_slist *l = NULL;
  for (; hdrs && *hdrs; hdrs++) l = curl_slist_append(l, *hdrs);
  FILE *f = out ? fmemopen(out, outlen, "w") : fopen("/dev/null", "w");
  assert_non_null(f);
  curl_easy_setopt(e, CURLOPT_URL, url);
  curl_easy_setopt(e, CURLOPT_HTTPHEADER, l);
  curl_easy_setopt(e, CURLOPT_WRITEDATA, f);
  curl_easy_setopt(e, CURLOPT_NOPROXY, "*");
  curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, 10000L);
  if (method) curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, method);
  if (body) curl_easy_setopt(e, CURLOPT_POSTFIELDS, body);
  CURLcode rc = curl_easy_perform(e);
  long status = 0;
  curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &status);
  fclose(f);
  curl_slist_free_all(l);
  curl_easy_cleanup(e);
  if (rc != CURLE_OK) fail_msg("curl: %s", curl_easy_strerror(rc));
  return status;
}

static resil_deadline_mhd_stats stats(resil_deadline_mhd *d) {
  resil_deadline_mhd_stats s;
  assert_status(RESIL_OK, resil_deadline_mhd_get_stats(d, &s));
  return s;
}

static void handler_gets_the_callers_budget(void **state) {
  (void)state;
  bare *b = bare_start(2 * RESIL_S(1));
  /* libresil-http's header. */
  assert_int_equal(request(b->base, "/x", NULL, NULL,
                           (const char *const[]){"Request-Timeout: 300m", NULL}, NULL, 0),
                   200);
  int64_t rem = atomic_load(&b->remaining_ns);
  assert_true(rem <= RESIL_MS(300) && rem > RESIL_MS(250));
  /* The smallest valid one of the three. */
  assert_int_equal(request(b->base, "/x", NULL, NULL,
                           (const char *const[]){"Request-Timeout: 300m", "grpc-timeout: 1S",
                                                 "x-envoy-expected-rq-timeout-ms: 200", NULL},
                           NULL, 0),
                   200);
  rem = atomic_load(&b->remaining_ns);
  assert_true(rem <= RESIL_MS(200) && rem > RESIL_MS(150));
  /* Cut to the server's maximum. */
  assert_int_equal(request(b->base, "/x", NULL, NULL,
                           (const char *const[]){"grpc-timeout: 1M", NULL}, NULL, 0),
                   200);
  rem = atomic_load(&b->remaining_ns);
  assert_true(rem <= 2 * RESIL_S(1) && rem > 2 * RESIL_S(1) - RESIL_MS(50));
  /* Invalid: ignored, the maximum applies. */
  assert_int_equal(request(b->base, "/x", NULL, NULL,
                           (const char *const[]){"Request-Timeout: -1m", NULL}, NULL, 0),
                   200);
  rem = atomic_load(&b->remaining_ns);
  assert_true(rem > 2 * RESIL_S(1) - RESIL_MS(50));
  /* None: the maximum. */
  assert_int_equal(request(b->base, "/x", NULL, NULL, NULL, NULL, 0), 200);
  resil_deadline_mhd_stats s = stats(b->dl);
  assert_int_equal(s.requests, 5);
  assert_int_equal(s.given, 3);
  assert_int_equal(s.clamped, 1);
  assert_int_equal(s.none, 2);
  assert_int_equal(s.invalid, 1);
  assert_int_equal(s.refused, 0);
  assert_int_equal(atomic_load(&b->handled), 5);
  bare_stop(b);
  /* No maximum: a request without a value has no deadline. */
  b = bare_start(0);
  assert_int_equal(request(b->base, "/x", NULL, NULL, NULL, NULL, 0), 200);
  assert_int_equal(atomic_load(&b->remaining_ns), -1);
  bare_stop(b);
}

static void below_the_floor_is_refused_before_any_work(void **state) {
  (void)state;
  bare *b = bare_start(0);
  char body[256] = "";
  /* 4 ms < 5 ms: 504 at once, the handler never runs, even with a body
   * on its way. */
  assert_int_equal(request(b->base, "/x", "POST", "{\"a\":1}",
                           (const char *const[]){"Request-Timeout: 4m", NULL}, body,
                           sizeof body),
                   504);
  assert_non_null(strstr(body, "deadline below the floor"));
  assert_int_equal(request(b->base, "/x", NULL, NULL,
                           (const char *const[]){"grpc-timeout: 0n", NULL}, NULL, 0),
                   504);
  /* A large value elsewhere does not rescue it. */
  assert_int_equal(request(b->base, "/x", NULL, NULL,
                           (const char *const[]){"Request-Timeout: 1S",
                                                 "x-envoy-expected-rq-timeout-ms: 2", NULL},
                           NULL, 0),
                   504);
  /* At the floor: served. */
  assert_int_equal(request(b->base, "/x", NULL, NULL,
                           (const char *const[]){"Request-Timeout: 5m", NULL}, NULL, 0),
                   200);
  resil_deadline_mhd_stats s = stats(b->dl);
  assert_int_equal(s.refused, 3);
  assert_int_equal(s.given, 1);
  assert_int_equal(atomic_load(&b->handled), 1);
  bare_stop(b);
}

static void config_is_validated(void **state) {
  (void)state;
  resil_deadline_mhd_config cfg;
  resil_deadline_mhd_config_init(&cfg);
  assert_string_equal(cfg.header, "Request-Timeout");
  assert_true(cfg.floor_ns == RESIL_DEADLINE_FLOOR_NS);
  assert_int_equal(cfg.refuse_status, 504);
  resil_deadline_mhd *d = NULL;
  resil_error err;
  cfg.header = "bad name";
  assert_status(RESIL_EINVAL, resil_deadline_mhd_new(&cfg, &d, &err));
  assert_string_equal(err.field, "header");
  resil_deadline_mhd_config_init(&cfg);
  cfg.max_ns = RESIL_MS(3);
  assert_status(RESIL_EINVAL, resil_deadline_mhd_new(&cfg, &d, &err));
  assert_string_equal(err.field, "floor_ns");
  resil_deadline_mhd_config_init(&cfg);
  cfg.refuse_status = 200;
  assert_status(RESIL_EINVAL, resil_deadline_mhd_new(&cfg, &d, &err));
  assert_string_equal(err.field, "refuse_status");
  assert_int_equal(resil_deadline_mhd_read(NULL, NULL, NULL, NULL), RESIL_DEADLINE_NONE);
  resil_deadline_mhd_stats s;
  assert_status(RESIL_EMISUSE, resil_deadline_mhd_get_stats(NULL, &s));
}

/* ---- resil_idem_mhd on a SQLite store ------------------------------------- */

typedef struct idem_srv {
  char dir[64], db[96], uri[128], base[64];
  resil_store *store;
  resil_deadline_mhd *dl;
  resil_idem_mhd *idem;
  struct MHD_Daemon *d;
  atomic_int effects;
  _Atomic int64_t remaining_ns;
} idem_srv;

static resil_status effect(void *user, resil_idem_call *call, resil_op_response *out) {
  idem_srv *s = user;
  atomic_fetch_add(&s->effects, 1);
  atomic_store(&s->remaining_ns, call->ctx && call->ctx->deadline_ns != RESIL_NO_DEADLINE
                                     ? resil_ctx_remaining_ns(call->ctx)
                                     : -1);
  out->status = 201;
  out->body = "{\"ok\":true}";
  out->body_len = 11;
  return RESIL_OK;
}

static long store_rows(idem_srv *s) {
  sqlite3 *db = NULL;
  assert_int_equal(sqlite3_open_v2(s->db, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
  sqlite3_busy_timeout(db, 5000);
  sqlite3_stmt *st = NULL;
  long n = -1;
  if (sqlite3_prepare_v2(db, "SELECT count(*) FROM resil_operations", -1, &st, NULL) ==
          SQLITE_OK &&
      sqlite3_step(st) == SQLITE_ROW)
    n = (long)sqlite3_column_int64(st, 0);
  sqlite3_finalize(st);
  sqlite3_close(db);
  return n;
}

static void idem_refused_request_leaves_no_pending_row(void **state) {
  (void)state;
  idem_srv *s = calloc(1, sizeof *s);
  assert_non_null(s);
  snprintf(s->dir, sizeof s->dir, "/tmp/resil-dl-XXXXXX");
  assert_non_null(mkdtemp(s->dir));
  snprintf(s->db, sizeof s->db, "%s/ops.db", s->dir);
  snprintf(s->uri, sizeof s->uri, "sqlite:%s", s->db);
  resil_error err;
  assert_status(RESIL_OK, resil_store_open(s->uri, NULL, &s->store, &err));
  resil_deadline_mhd_config dc;
  resil_deadline_mhd_config_init(&dc);
  assert_status(RESIL_OK, resil_deadline_mhd_new(&dc, &s->dl, &err));
  resil_idem_mhd_config ic;
  resil_idem_mhd_config_init(&ic);
  ic.store = s->store;
  ic.handler = effect;
  ic.user = s;
  ic.deadline = s->dl;
  assert_status(RESIL_OK, resil_idem_mhd_new(&ic, &s->idem, &err));
  s->d = start_daemon(resil_idem_mhd_access, s->idem, resil_idem_mhd_completed, s->idem, s->base,
                      sizeof s->base);
  /* Refused: 504, no effect, no row, the key unknown to the store. */
  char body[256] = "";
  assert_int_equal(request(s->base, "/pay", "POST", "{\"amount\":1}",
                           (const char *const[]){"Idempotency-Key: k-refused",
                                                 "Request-Timeout: 2m", NULL},
                           body, sizeof body),
                   504);
  assert_int_equal(atomic_load(&s->effects), 0);
  assert_int_equal(store_rows(s), 0);
  resil_op_record rec;
  resil_op_record_init(&rec);
  assert_status(RESIL_OK, resil_store_status(s->store, "k-refused", &rec));
  assert_int_equal(rec.state, RESIL_OP_UNKNOWN);
  resil_op_record_clear(&rec);
  /* The same key with enough time: runs once, the handler sees the budget. */
  assert_int_equal(request(s->base, "/pay", "POST", "{\"amount\":1}",
                           (const char *const[]){"Idempotency-Key: k-refused",
                                                 "Request-Timeout: 500m", NULL},
                           NULL, 0),
                   201);
  assert_int_equal(atomic_load(&s->effects), 1);
  assert_int_equal(store_rows(s), 1);
  int64_t rem = atomic_load(&s->remaining_ns);
  assert_true(rem > 0 && rem <= RESIL_MS(500));
  /* A replay below the floor is refused too: nothing is looked up. */
  assert_int_equal(request(s->base, "/pay", "POST", "{\"amount\":1}",
                           (const char *const[]){"Idempotency-Key: k-refused",
                                                 "grpc-timeout: 1000u", NULL},
                           NULL, 0),
                   504);
  /* The status route is not an operation: not refused. */
  assert_int_equal(request(s->base, "/operations/k-refused", NULL, NULL,
                           (const char *const[]){"Request-Timeout: 1m", NULL}, NULL, 0),
                   200);
  /* Without a header: no deadline in the handler. */
  assert_int_equal(request(s->base, "/pay", "POST", "{\"amount\":2}",
                           (const char *const[]){"Idempotency-Key: k-2", NULL}, NULL, 0),
                   201);
  assert_int_equal(atomic_load(&s->remaining_ns), -1);
  resil_idem_mhd_stats st;
  assert_status(RESIL_OK, resil_idem_mhd_get_stats(s->idem, &st));
  assert_int_equal(st.deadline_refused, 2);
  assert_int_equal(st.executed, 2);
  assert_int_equal(st.requests, 2);
  resil_deadline_mhd_stats ds = stats(s->dl);
  assert_int_equal(ds.refused, 2);
  assert_int_equal(store_rows(s), 2);
  /* The counters as metrics, checked by promtool. */
  resil_metrics *m = NULL;
  assert_status(RESIL_OK, resil_metrics_new(NULL, &m));
  assert_status(RESIL_OK, resil_deadline_mhd_metrics_add(m, NULL, s->dl));
  assert_status(RESIL_OK, resil_idem_mhd_metrics_add(m, "pay", s->idem));
  char *text = NULL;
  assert_status(RESIL_OK, resil_metrics_render_alloc(m, &text, NULL));
  assert_non_null(strstr(text, "resil_deadline_requests_total{name=\"deadline\",result=\"refused\"} 2\n"));
  assert_non_null(strstr(text, "resil_deadline_requests_total{name=\"deadline\",result=\"given\"} 1\n"));
  assert_non_null(strstr(text, "resil_deadline_requests_total{name=\"deadline\",result=\"none\"} 1\n"));
  assert_non_null(strstr(text, "resil_idem_requests_total{name=\"pay\",result=\"deadline_refused\"} 2\n"));
  resil_metrics_text_free(m, text);
  mx_promtool_check(m);
  resil_metrics_free(m);
  MHD_stop_daemon(s->d);
  resil_idem_mhd_free(s->idem);
  resil_deadline_mhd_free(s->dl);
  resil_store_close(s->store);
  char p[160];
  static const char *const suffix[] = {"", "-wal", "-shm"};
  for (int i = 0; i < 3; i++) {
    snprintf(p, sizeof p, "%s%s", s->db, suffix[i]);
    unlink(p);
  }
  rmdir(s->dir);
  free(s);
}

int main(void) {
  curl_global_init(CURL_GLOBAL_DEFAULT);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(handler_gets_the_callers_budget),
      cmocka_unit_test(below_the_floor_is_refused_before_any_work),
      cmocka_unit_test(config_is_validated),
      cmocka_unit_test(idem_refused_request_leaves_no_pending_row),
  };
  int rc = cmocka_run_group_tests(tests, NULL, NULL);
  curl_global_cleanup();
  return rc;
}
