/* libresil-http parsers: templates, percent-encoding, redaction, without
 * the network; the fuzz corpus replayed as a regression test; and one
 * end-to-end check on the fixture that a path parameter stays inside its
 * segment. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/redact.h"
#include "http/log_int.h"
#include "http/template.h"
#include "test_http_common.h"

/* The fuzz target itself, so that its checks run on the corpus here. */
#include "../../fuzz/fuzz_path_template.c"

static int parse(const char *s, http_tpl_kind k, uint32_t *n, size_t *off, const char **why) {
  return resil__http_tpl_parse(s, strlen(s), k, NULL, 0, n, off, why);
}

static void templates_accept_placeholders_and_pchars(void **state) {
  (void)state;
  uint32_t n = 0;
  size_t off = 0;
  const char *why = NULL;
  assert_int_equal(parse("/items/{id}", HTTP_TPL_PATH, &n, &off, &why), 0);
  assert_int_equal(n, 2);
  assert_int_equal(parse("/a/{b}.json/{c_d-e.f}/x:y@z;p=1/%2F", HTTP_TPL_PATH, &n, &off, &why), 0);
  assert_int_equal(n, 5);
  assert_int_equal(parse("q={q}&limit=10&next=/a?b", HTTP_TPL_QUERY, &n, &off, &why), 0);
  assert_int_equal(parse("Bearer {token} ; x=\"y\"", HTTP_TPL_HEADER, &n, &off, &why), 0);
  http_tpl_part parts[4];
  const char *src = "/items/{id}/x";
  assert_int_equal(resil__http_tpl_parse(src, strlen(src), HTTP_TPL_PATH, parts, 4, &n, &off, &why), 0);
  assert_int_equal(n, 3);
  assert_int_equal(parts[1].is_var, 1);
  assert_int_equal(parts[1].off, 8);
  assert_int_equal(parts[1].len, 2);
}

static void templates_refuse_with_offset_and_reason(void **state) {
  (void)state;
  struct {
    const char *s;
    http_tpl_kind k;
    size_t off;
    const char *why;
  } bad[] = {
      {"items", HTTP_TPL_PATH, 0, "must start with '/'"},
      {"/items/{id", HTTP_TPL_PATH, 7, "unclosed '{'"},
      {"/a/{}", HTTP_TPL_PATH, 3, "empty placeholder name"},
      {"/a/{b{c}}", HTTP_TPL_PATH, 5, "nested '{'"},
      {"/a/{b c}", HTTP_TPL_PATH, 5, "invalid character"},
      {"/a}b", HTTP_TPL_PATH, 2, "'}' without"},
      {"/a b", HTTP_TPL_PATH, 2, "space"},
      {"/a?b=1", HTTP_TPL_PATH, 2, "'?' is not allowed"},
      {"/a#f", HTTP_TPL_PATH, 2, "'#'"},
      {"/a/%zz", HTTP_TPL_PATH, 3, "%XX"},
      {"/a/%4", HTTP_TPL_PATH, 3, "%XX"},
      {"/\xc3\xa9", HTTP_TPL_PATH, 1, "not allowed in a URL"},
      {"?a=1", HTTP_TPL_QUERY, 0, "must not start with '?'"},
      {"a\r\nb", HTTP_TPL_HEADER, 1, "control"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    uint32_t n = 0;
    size_t off = 99;
    const char *why = NULL;
    if (parse(bad[i].s, bad[i].k, &n, &off, &why) != -1) fail_msg("accepted %s", bad[i].s);
    if (off != bad[i].off) fail_msg("%s: offset %zu, expected %zu", bad[i].s, off, bad[i].off);
    if (!strstr(why, bad[i].why)) fail_msg("%s: reason \"%s\"", bad[i].s, why);
  }
}

static void expansion_percent_encodes_values_and_reports_missing(void **state) {
  (void)state;
  http_tpl t = {"/f/{name}/{n}", NULL, 0};
  http_tpl_part parts[4];
  size_t off;
  const char *why;
  resil__http_tpl_parse(t.src, strlen(t.src), HTTP_TPL_PATH, parts, 4, &t.nparts, &off, &why);
  t.parts = parts;
  resil_http_param ps[] = {{"name", "a b/c?d%e~_.-\xc3\xa9"}, {"n", "7"}};
  http_buf out = {0};
  const http_tpl_part *miss = NULL;
  assert_int_equal(resil__http_tpl_expand(NULL, &t, ps, 2, 1, &out, &miss), 0);
  assert_string_equal(out.p, "/f/a%20b%2Fc%3Fd%25e~_.-%C3%A9/7");
  out.len = 0;
  assert_int_equal(resil__http_tpl_expand(NULL, &t, ps, 1, 1, &out, &miss), -1);
  assert_int_equal(miss->len, 1);
  resil__http_buf_free(NULL, &out);
}

static void dot_segments_in_path_values_are_percent_encoded(void **state) {
  (void)state;
  http_tpl t = {"/users/{key}/orders", NULL, 0};
  http_tpl_part parts[4];
  size_t off;
  const char *why;
  resil__http_tpl_parse(t.src, strlen(t.src), HTTP_TPL_PATH, parts, 4, &t.nparts, &off, &why);
  t.parts = parts;
  struct {
    const char *v, *want;
  } cases[] = {
      {"..", "/users/%2E%2E/orders"},  {".", "/users/%2E/orders"},
      {"...", "/users/.../orders"}, {"a..b", "/users/a..b/orders"},
      {"..a", "/users/..a/orders"},     {"../x", "/users/..%2Fx/orders"},
      {"%2E%2E", "/users/%252E%252E/orders"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    resil_http_param ps[] = {{"key", cases[i].v}};
    http_buf out = {0};
    assert_int_equal(resil__http_tpl_expand(NULL, &t, ps, 1, 1, &out, NULL), 0);
    assert_string_equal(out.p, cases[i].want);
    resil__http_buf_free(NULL, &out);
  }
  /* Two dot values side by side cannot make a ".." segment either. */
  http_tpl t2 = {"/{a}{b}/x", NULL, 0};
  resil__http_tpl_parse(t2.src, strlen(t2.src), HTTP_TPL_PATH, parts, 4, &t2.nparts, &off, &why);
  t2.parts = parts;
  resil_http_param ab[] = {{"a", "."}, {"b", "."}};
  http_buf out = {0};
  assert_int_equal(resil__http_tpl_expand(NULL, &t2, ab, 2, 1, &out, NULL), 0);
  assert_string_equal(out.p, "/%2E%2E/x");
  resil__http_buf_free(NULL, &out);
}

/* On the wire: "/{dir}/echo" with ".." or "." must not reach /echo. */
static void a_dot_path_value_cannot_reach_another_route(void **state) {
  (void)state;
  resil_fixture *f = fx_start();
  resil_http_endpoint ep = {.struct_size = sizeof(resil_http_endpoint), .name = "e", .method = RESIL_HTTP_GET, .path = "/{dir}/echo",
                            .response_codec = RESIL_HTTP_CODEC_RAW};
  resil_http_client *c = client_on(f, &ep, 1, NULL, NULL);
  const char *vals[] = {"..", "."};
  for (size_t i = 0; i < 2; i++) {
    resil_http_response *r = NULL;
    resil_outcome o = call_p(c, "e", &r, KV("dir", vals[i]));
    if (o.http_status == 200) fail_msg("'%s' reached /echo", vals[i]);
    assert_int_equal(o.http_status, 404);
    resil_http_response_free(r);
  }
  assert_int_equal(resil_fixture_effects(f, "echo"), 0);
  resil_http_client_free(c);
  resil_fixture_stop(f);
}

static void secret_names_are_recognised_case_insensitively(void **state) {
  (void)state;
  const char *hs[] = {"Authorization", "PROXY-AUTHORIZATION", "cookie", "Set-Cookie", "X-API-KEY",
                      "Api-Key", "X-Upstream-ApiKey", "X-Auth-Token", "Client-Secret"};
  for (size_t i = 0; i < sizeof hs / sizeof hs[0]; i++)
    if (!resil__http_secret_header(hs[i], strlen(hs[i]))) fail_msg("%s not secret", hs[i]);
  const char *plain[] = {"Content-Type", "Accept", "X-Trace", "Idempotency-Key"};
  for (size_t i = 0; i < sizeof plain / sizeof plain[0]; i++)
    if (resil__http_secret_header(plain[i], strlen(plain[i]))) fail_msg("%s secret", plain[i]);
  const char *qs[] = {"token", "access_TOKEN", "api_key", "Secret", "password", "sig", "X-Amz-Signature"};
  for (size_t i = 0; i < sizeof qs / sizeof qs[0]; i++)
    if (!resil__secret_name(qs[i], strlen(qs[i]), 0)) fail_msg("%s not secret", qs[i]);
  assert_false(resil__secret_name("page", 4, 0));
}

static void urls_and_bodies_are_redacted(void **state) {
  (void)state;
  http_buf b = {0};
  assert_int_equal(resil__http_redact_url(NULL, &b,
                                          "https://user:pw@h:1/p?page=2&Token=abc&x&apikey=k#frag"),
                   0);
  assert_string_equal(b.p, "https://[REDACTED]@h:1/p?page=2&Token=[REDACTED]&x&apikey=[REDACTED]");
  b.len = 0;
  const char *j = "{\"user\":\"a\",\"Password\":\"p1\",\"nested\":{\"api_key\":[1,{\"a\":\"b\"}]},"
                  "\"q\":\"a=1&token=t2\",\"n\":3}";
  assert_int_equal(resil__http_redact_body(NULL, &b, j, strlen(j), 4096), 0);
  assert_string_equal(b.p, "{\"user\":\"a\",\"Password\":\"[REDACTED]\",\"nested\":{\"api_key\":"
                           "\"[REDACTED]\"},\"q\":\"a=1&token=[REDACTED]\",\"n\":3}");
  b.len = 0;
  const char *form = "user=a&secret=s3&x=1";
  assert_int_equal(resil__http_redact_body(NULL, &b, form, strlen(form), 4096), 0);
  assert_string_equal(b.p, "user=a&secret=[REDACTED]&x=1");
  b.len = 0;
  /* A body cut in the middle of a secret value still hides its start. */
  const char *cut = "{\"token\":\"abcdefgh\"}";
  assert_int_equal(resil__http_redact_body(NULL, &b, cut, strlen(cut), 12), 0);
  assert_null(strstr(b.p, "abc"));
  resil__http_buf_free(NULL, &b);
}

static void fuzz_corpus_replays_cleanly(void **state) {
  (void)state;
  char dir[512];
  snprintf(dir, sizeof dir, "%s", __FILE__);
  char *slash = strrchr(dir, '/');
  assert_non_null(slash);
  snprintf(slash, sizeof dir - (size_t)(slash - dir), "/../../fuzz/corpus/path_template");
  DIR *d = opendir(dir);
  assert_non_null(d);
  int files = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    if (e->d_name[0] == '.') continue;
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    FILE *f = fopen(path, "rb");
    if (!f) continue;
    uint8_t buf[16384];
    size_t n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    LLVMFuzzerTestOneInput(buf, n);
    files++;
  }
  closedir(d);
  assert_true(files >= 10);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(templates_accept_placeholders_and_pchars),
      cmocka_unit_test(templates_refuse_with_offset_and_reason),
      cmocka_unit_test(expansion_percent_encodes_values_and_reports_missing),
      cmocka_unit_test(dot_segments_in_path_values_are_percent_encoded),
      cmocka_unit_test(a_dot_path_value_cannot_reach_another_route),
      cmocka_unit_test(secret_names_are_recognised_case_insensitively),
      cmocka_unit_test(urls_and_bodies_are_redacted),
      cmocka_unit_test(fuzz_corpus_replays_cleanly),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
