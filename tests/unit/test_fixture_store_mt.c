/* The fixture's idempotent routes on a durable operation store
 * (resil_fixture_config.store_uri): answers, effect counters read from the
 * payments table, the injected failure between effect and terminal state,
 * recovery, reopening the same file; and the recovery route on the private
 * store.
 * Driven with bare libcurl requests. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "test_util.h"

#ifdef RESIL_HAVE_STORE

#include <curl/curl.h>
#include <dirent.h>
#include <jansson.h>

#include "fixture/fixture.h"
#include "resil/store.h"

typedef struct reply {
  CURLcode code;
  long status;
  char *body;
  size_t len;
  char replayed[16], retry_after[16];
} reply;

static size_t on_body(char *data, size_t size, size_t n, void *user) {
  reply *r = user;
  size_t add = size * n;
  char *p = realloc(r->body, r->len + add + 1);
  if (!p)
    return 0;
  memcpy(p + r->len, data, add);
  r->body = p;
  r->len += add;
  p[r->len] = '\0';
  return add;
}

static void header(CURL *h, const char *name, char *out, size_t n) {
  struct curl_header *hd = NULL;
  out[0] = '\0';
  if (curl_easy_header(h, name, 0, CURLH_HEADER, -1, &hd) == CURLHE_OK)
    snprintf(out, n, "%s", hd->value);
}

static reply http(resil_fixture *f, const char *method, const char *path,
                  const char *key, const char *body) {
  reply r;
  memset(&r, 0, sizeof r);
  CURL *h = curl_easy_init();
  assert_non_null(h);
  char url[256], kh[128];
  snprintf(url, sizeof url, "%s%s", resil_fixture_url(f), path);
  curl_easy_setopt(h, CURLOPT_URL, url);
  curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, 20000L);
  curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, method);
  curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
  curl_easy_setopt(h, CURLOPT_WRITEDATA, &r);
  struct curl_slist *hs = curl_slist_append(NULL, "Expect:");
  if (key) {
    snprintf(kh, sizeof kh, "Idempotency-Key: %s", key);
    hs = curl_slist_append(hs, kh);
  }
  curl_easy_setopt(h, CURLOPT_HTTPHEADER, hs);
  if (body) {
    curl_easy_setopt(h, CURLOPT_POSTFIELDS, body);
    curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE, (long)strlen(body));
  }
  r.code = curl_easy_perform(h);
  curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &r.status);
  if (r.code == CURLE_OK) {
    header(h, "Idempotent-Replayed", r.replayed, sizeof r.replayed);
    header(h, "Retry-After", r.retry_after, sizeof r.retry_after);
  }
  curl_slist_free_all(hs);
  curl_easy_cleanup(h);
  if (!r.body)
    r.body = calloc(1, 1);
  return r;
}

/* state and effects of GET /operations/{key} */
static void op(resil_fixture *f, const char *key, char *state, size_t n,
               long *effects) {
  char path[128];
  snprintf(path, sizeof path, "/operations/%s", key);
  reply r = http(f, "GET", path, NULL, NULL);
  json_t *j = json_loadb(r.body, r.len, 0, NULL);
  const char *s = json_string_value(json_object_get(j, "state"));
  snprintf(state, n, "%s", s ? s : "NONE");
  json_t *e = json_object_get(j, "effects");
  *effects = json_is_integer(e) ? (long)json_integer_value(e) : -1;
  json_decref(j);
  free(r.body);
}

static long stats_effects(resil_fixture *f, const char *route) {
  reply r = http(f, "GET", "/__stats", NULL, NULL);
  json_t *j = json_loadb(r.body, r.len, 0, NULL);
  json_t *e = json_object_get(
      json_object_get(json_object_get(j, "routes"), route), "effects");
  long n = json_is_integer(e) ? (long)json_integer_value(e) : -1;
  json_decref(j);
  free(r.body);
  return n;
}

typedef struct tmp {
  char dir[64];
  char uri[160];
} tmp;

static void tmp_make(tmp *t) {
  snprintf(t->dir, sizeof t->dir, "/tmp/resil-fxstore-XXXXXX");
  assert_non_null(mkdtemp(t->dir));
  snprintf(t->uri, sizeof t->uri, "sqlite:%s/ops.db", t->dir);
}

static void tmp_remove(tmp *t) {
  static const char *const suffix[] = {"", "-wal", "-shm"};
  char p[160];
  for (int i = 0; i < 3; i++) {
    snprintf(p, sizeof p, "%s/ops.db%s", t->dir, suffix[i]);
    unlink(p);
  }
  rmdir(t->dir);
}

static resil_fixture *start(const char *uri) {
  resil_fixture_config c;
  resil_fixture_config_init(&c);
  assert_null(c.store_uri);
  assert_int_equal(c.store_unsafe_commit_effect_early, 0);
  c.store_uri = uri;
  resil_fixture *f = NULL;
  char err[256];
  if (resil_fixture_start(&c, &f, err, sizeof err) != 0)
    fail_msg("fixture: %s", err);
  return f;
}

/* A fixture on its private store, made in dir. */
static resil_fixture *start_private(const char *dir) {
  resil_fixture_config c;
  resil_fixture_config_init(&c);
  assert_null(c.store_dir);
  c.store_dir = dir;
  resil_fixture *f = NULL;
  char err[256];
  if (resil_fixture_start(&c, &f, err, sizeof err) != 0)
    fail_msg("fixture: %s", err);
  return f;
}

static void a_store_that_cannot_be_opened_fails_the_start(void **s) {
  (void)s;
  resil_fixture_config c;
  resil_fixture_config_init(&c);
  c.store_uri = "sqlite:/nonexistent-dir-for-resil/ops.db";
  resil_fixture *f = NULL;
  char err[256] = "";
  assert_int_equal(resil_fixture_start(&c, &f, err, sizeof err), -1);
  assert_null(f);
  assert_memory_equal(err, "store: ", 7);
  c.store_uri = "mysql://nope";
  assert_int_equal(resil_fixture_start(&c, &f, err, sizeof err), -1);
  assert_null(f);
}

static void recovery_route_on_an_empty_private_store_answers_zero(void **s) {
  (void)s;
  resil_fixture *f = start(NULL);
  reply a = http(f, "POST", "/__recover", NULL, "");
  assert_int_equal(a.status, 200);
  assert_string_equal(a.body, "{\"recovered\":0}");
  reply b = http(f, "GET", "/__recover", NULL, NULL);
  assert_int_equal(b.status, 405);
  assert_int_equal(resil_fixture_attempts(f, "recover"), 2);
  free(a.body);
  free(b.body);
  resil_fixture_stop(f);
}

static void store_routes_replay_and_count_effects_from_the_table(void **s) {
  (void)s;
  tmp t;
  tmp_make(&t);
  resil_fixture *f = start(t.uri);
  reply a = http(f, "POST", "/idem/pay", "k1", "{\"amount\":1}");
  assert_int_equal(a.status, 201);
  /* The same bytes the private store answers. */
  assert_string_equal(a.body, "{\"key\":\"k1\",\"effect\":1}");
  reply b = http(f, "POST", "/idem/pay", "k1", "{\"amount\":1}");
  assert_int_equal(b.status, 201);
  assert_string_equal(b.replayed, "true");
  assert_string_equal(b.body, a.body);
  reply c = http(f, "POST", "/idem/pay", "k1", "{\"amount\":2}");
  assert_int_equal(c.status, 422);
  reply d = http(f, "POST", "/idem/pay", NULL, "{}");
  assert_int_equal(d.status, 400);
  assert_int_equal(resil_fixture_effects(f, "idem"), 1);
  assert_int_equal(stats_effects(f, "idem"), 1);
  assert_int_equal(resil_fixture_attempts(f, "idem"), 4);
  char st[16];
  long eff = 0;
  op(f, "k1", st, sizeof st, &eff);
  assert_string_equal(st, "COMMITTED");
  assert_int_equal(eff, 1);
  /* A reset restarts the counters; the table keeps the evidence. */
  resil_fixture_reset(f);
  assert_int_equal(resil_fixture_effects(f, "idem"), 0);
  op(f, "k1", st, sizeof st, &eff);
  assert_int_equal(eff, 1);
  reply e = http(f, "POST", "/idem/pay", "k2", "{\"amount\":1}");
  assert_int_equal(e.status, 201);
  assert_int_equal(resil_fixture_effects(f, "idem"), 1);
  /* idem-close: committed, then the connection closes without an answer. */
  reply g = http(f, "POST", "/idem-close", "k3", "{}");
  assert_int_equal(g.code, CURLE_GOT_NOTHING);
  assert_int_equal(resil_fixture_effects(f, "idem_close"), 1);
  op(f, "k3", st, sizeof st, &eff);
  assert_string_equal(st, "COMMITTED");
  assert_int_equal(eff, 1);
  reply *all[] = {&a, &b, &c, &d, &e, &g};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
    free(all[i]->body);
  resil_fixture_stop(f);

  /* Reopened: the operations and every effect in the file are still
   * there, and the counters start from the table. */
  f = start(t.uri);
  op(f, "k1", st, sizeof st, &eff);
  assert_string_equal(st, "COMMITTED");
  assert_int_equal(resil_fixture_effects(f, "idem"), 2);
  assert_int_equal(resil_fixture_effects(f, "idem_close"), 1);
  resil_fixture_stop(f);
  tmp_remove(&t);
}

static void failure_before_terminal_state_leaves_pending_until_recovery(
    void **s) {
  (void)s;
  tmp t;
  tmp_make(&t);
  resil_fixture *f = start(t.uri);
  reply a = http(f, "POST", "/idem/pay?fail_before_terminal=1", "k9", "{}");
  assert_int_equal(a.status, 500);
  assert_string_equal(a.retry_after, "1");
  char st[16];
  long eff = 0;
  op(f, "k9", st, sizeof st, &eff);
  assert_string_equal(st, "PENDING");
  assert_int_equal(eff, 0);
  assert_int_equal(resil_fixture_effects(f, "idem"), 0);
  /* The query is not part of the fingerprint: the same request again. */
  reply b = http(f, "POST", "/idem/pay", "k9", "{}");
  assert_int_equal(b.status, 409);
  assert_string_equal(b.retry_after, "1");
  reply c = http(f, "POST", "/__recover", NULL, "");
  assert_string_equal(c.body, "{\"recovered\":1}");
  op(f, "k9", st, sizeof st, &eff);
  assert_string_equal(st, "COMMITTED");
  assert_int_equal(eff, 1);
  reply d = http(f, "POST", "/__recover", NULL, "");
  assert_string_equal(d.body, "{\"recovered\":0}");
  reply e = http(f, "POST", "/idem/pay", "k9", "{}");
  assert_int_equal(e.status, 201);
  assert_string_equal(e.replayed, "true");
  assert_int_equal(resil_fixture_effects(f, "idem"), 1);
  reply *all[] = {&a, &b, &c, &d, &e};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
    free(all[i]->body);
  resil_fixture_stop(f);
  tmp_remove(&t);
}

/* Entries of dir other than . and .. */
static int dir_entries(const char *dir) {
  DIR *d = opendir(dir);
  assert_non_null(d);
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL)
    if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0)
      n++;
  closedir(d);
  return n;
}

/* The default fixture has no operation table of its own: what /idem
 * commits is in libresil-store, in the private SQLite file whose URI the
 * fixture reports, readable with resil_store_status through the fixture's
 * store and through another store opened on the same file. The file is
 * created at the first idempotent request, not at start, and removed with
 * its directory on stop. */
static void idem_routes_persist_through_the_private_store(void **s) {
  (void)s;
  tmp t;
  tmp_make(&t);
  resil_fixture *f = start_private(t.dir);
  reply a = http(f, "GET", "/items/1", NULL, NULL);
  assert_int_equal(a.status, 200);
  assert_int_equal(dir_entries(t.dir), 0); /* nothing created yet */

  reply b = http(f, "POST", "/idem/pay", "kp1", "{\"amount\":3}");
  assert_int_equal(b.status, 201);
  assert_int_equal(dir_entries(t.dir), 1);
  const char *uri = resil_fixture_store_uri(f);
  assert_non_null(uri);
  char prefix[128];
  snprintf(prefix, sizeof prefix, "sqlite:%s/resil-fixture-", t.dir);
  assert_memory_equal(uri, prefix, strlen(prefix));

  resil_op_record rec;
  resil_op_record_init(&rec);
  assert_status(RESIL_OK, resil_store_status(resil_fixture_store(f), "kp1", &rec));
  assert_int_equal(rec.state, RESIL_OP_COMMITTED);
  assert_int_equal(rec.status, 201);
  assert_string_equal(rec.method, "POST");
  assert_string_equal(rec.path, "/idem/pay");
  assert_int_equal(rec.body_len, b.len);
  assert_memory_equal(rec.body, b.body, b.len);

  /* Another store on the same file sees the same operation. */
  resil_store *other = NULL;
  assert_status(RESIL_OK, resil_store_open(uri, NULL, &other, NULL));
  assert_status(RESIL_OK, resil_store_status(other, "kp1", &rec));
  assert_int_equal(rec.state, RESIL_OP_COMMITTED);
  assert_status(RESIL_OK, resil_store_status(other, "never-sent", &rec));
  assert_int_equal(rec.state, RESIL_OP_UNKNOWN);
  resil_store_close(other);
  resil_op_record_clear(&rec);

  /* A key seeded PENDING in the store is what the routes answer. */
  assert_int_equal(resil_fixture_op_pending(f, "kp2", "/idem/pay", "{}"), 0);
  reply c = http(f, "POST", "/idem/pay", "kp2", "{}");
  assert_int_equal(c.status, 409);
  assert_int_equal(resil_fixture_effects(f, "idem"), 1);

  free(a.body);
  free(b.body);
  free(c.body);
  resil_fixture_stop(f);
  assert_int_equal(dir_entries(t.dir), 0); /* the private store is gone */
  tmp_remove(&t);
}

/* A private store that cannot be created (store_dir names no directory):
 * the idempotent routes answer 503 with Retry-After and store nothing; the
 * other routes are unaffected. */
static void a_private_store_that_cannot_be_created_answers_503(void **s) {
  (void)s;
  resil_fixture *f = start_private("/nonexistent-dir-for-resil");
  reply a = http(f, "POST", "/idem/pay", "kx", "{}");
  assert_int_equal(a.status, 503);
  assert_string_equal(a.retry_after, "1");
  assert_non_null(strstr(a.body, "cannot create a temporary directory"));
  reply b = http(f, "GET", "/operations/kx", NULL, NULL);
  assert_int_equal(b.status, 503);
  reply c = http(f, "GET", "/items/2", NULL, NULL);
  assert_int_equal(c.status, 200);
  assert_null(resil_fixture_store(f));
  assert_null(resil_fixture_store_uri(f));
  assert_int_equal(resil_fixture_op_pending(f, "kx", NULL, NULL), -1);
  assert_int_equal(resil_fixture_effects(f, "idem"), 0);
  assert_int_equal(resil_fixture_attempts(f, "idem"), 1);
  free(a.body);
  free(b.body);
  free(c.body);
  resil_fixture_stop(f);
}

static int setup(void **s) {
  (void)s;
  return curl_global_init(CURL_GLOBAL_DEFAULT) == CURLE_OK ? 0 : -1;
}

static int teardown(void **s) {
  (void)s;
  curl_global_cleanup();
  return 0;
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(a_store_that_cannot_be_opened_fails_the_start),
      cmocka_unit_test(recovery_route_on_an_empty_private_store_answers_zero),
      cmocka_unit_test(store_routes_replay_and_count_effects_from_the_table),
      cmocka_unit_test(failure_before_terminal_state_leaves_pending_until_recovery),
      cmocka_unit_test(idem_routes_persist_through_the_private_store),
      cmocka_unit_test(a_private_store_that_cannot_be_created_answers_503),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}

#else

int main(void) {
  printf("built without libresil-store: nothing to run\n");
  return 0;
}

#endif
