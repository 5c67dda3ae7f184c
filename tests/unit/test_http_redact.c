/* Secrets and hostile bytes in libresil-http's logs and error messages
 * (DESIGN §3 Logging): secret-looking header names, URL-valued headers in
 * both directions, percent-encoded and short query names, control bytes
 * from the network, and error messages that quote what the caller gave.
 * The end-to-end cases talk to the scripted raw server of
 * test_http_common.h, because they need response headers no fixture route
 * would send (ESC, BEL, 0xFF, a Location carrying a token). */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/redact.h"
#include "http/log_int.h"
#include "test_http_common.h"

/* ---- log capture ------------------------------------------------------- */

typedef struct log_capture {
  char *text; /* every line, each followed by '\n' */
  size_t len;
  int lines;
} log_capture;

static void capture(void *user, resil_http_log_level level, const char *line) {
  (void)level;
  log_capture *lc = user;
  size_t n = strlen(line);
  char *p = realloc(lc->text, lc->len + n + 2);
  assert_non_null(p);
  lc->text = p;
  memcpy(lc->text + lc->len, line, n);
  lc->len += n;
  lc->text[lc->len++] = '\n';
  lc->text[lc->len] = '\0';
  lc->lines++;
}

/* One GET of `path` on the raw server with the log at `level`; extra
 * request headers as name, value pairs (NULL-terminated). Returns the
 * status. */
static int logged_get(raw_server *srv, resil_http_log_level level, log_capture *lc,
                      const char *const *hdrs) {
  char base[64];
  snprintf(base, sizeof base, "http://127.0.0.1:%u", srv->port);
  resil_http_endpoint ep = {.struct_size = sizeof(resil_http_endpoint), .name = "get", .method = RESIL_HTTP_GET, .path = "/x",
                            .response_codec = RESIL_HTTP_CODEC_RAW};
  resil_http_client_config cfg;
  resil_http_client_config_init(&cfg);
  cfg.base_url = base;
  cfg.endpoints = &ep;
  cfg.endpoint_count = 1;
  cfg.log_level = level;
  cfg.log_fn = capture;
  cfg.log_user = lc;
  resil_http_client *c = NULL;
  resil_error err;
  if (resil_http_client_new(&cfg, &c, &err) != RESIL_OK) fail_msg("client: %s", err.msg);
  resil_http_param hs[16];
  size_t n = 0;
  for (; hdrs && hdrs[2 * n] && n < 16; n++) {
    hs[n].name = hdrs[2 * n];
    hs[n].value = hdrs[2 * n + 1];
  }
  resil_http_args args;
  resil_http_args_init(&args);
  args.headers = hs;
  args.header_count = n;
  resil_http_response *r = NULL;
  resil_outcome o = resil_http_call(c, "get", &args, NULL, NULL, &r);
  int st = o.http_status;
  resil_http_response_free(r);
  resil_http_client_free(c);
  return st;
}

#define assert_contains(hay, needle)                                           \
  do {                                                                         \
    if (!strstr((hay), (needle))) fail_msg("'%s' not found in:\n%s", (needle), (hay)); \
  } while (0)
#define assert_lacks(hay, needle)                                              \
  do {                                                                         \
    if (strstr((hay), (needle))) fail_msg("'%s' leaked in:\n%s", (needle), (hay)); \
  } while (0)

/* ---- the rules, without the network -------------------------------------- */

static void secret_looking_header_names_are_redacted(void **state) {
  (void)state;
  const char *secret[] = {"X-Auth-Key", "X-Authorization", "X-Access-Key",
                          "Ocp-Apim-Subscription-Key", "X-Jwt", "X-Passwd", "Authentication",
                          "X-Pwd", "X-Session-Id", "X-Credential", "X-Amz-Signature",
                          "X-Secret", "x-csrf-token", "Key", "client_key", "Cookie",
                          "Proxy-Authorization", "X-Api-Key", "X-Upstream-ApiKey"};
  for (size_t i = 0; i < sizeof secret / sizeof secret[0]; i++)
    if (!resil__http_secret_header(secret[i], strlen(secret[i])))
      fail_msg("%s not secret", secret[i]);
  const char *plain[] = {"Idempotency-Key", "X-Idempotency-Key", "Content-Type", "Accept",
                         "Location", "Link", "X-Trace", "Keyboard-Layout", "Keep-Alive"};
  for (size_t i = 0; i < sizeof plain / sizeof plain[0]; i++)
    if (resil__http_secret_header(plain[i], strlen(plain[i]))) fail_msg("%s secret", plain[i]);
}

static void query_names_are_matched_decoded_and_short_names_whole(void **state) {
  (void)state;
  http_buf b = {0};
  assert_int_equal(
      resil__http_redact_url(NULL, &b,
                             "http://h/p?%74oken=S1&%2574oken=S2&jwt=S3&code=S4&pass=S5"
                             "&client_assertion=S6&otp=S7&pin=S8&to%6Ben=S9&%61uth=S10"
                             "&zipcode=1&shipping=2&page=3"),
      0);
  for (int i = 1; i <= 10; i++) {
    char sn[8];
    snprintf(sn, sizeof sn, "=S%d&", i);
    assert_lacks(b.p, sn);
  }
  assert_contains(b.p, "%74oken=[REDACTED]&%2574oken=[REDACTED]&jwt=[REDACTED]");
  assert_contains(b.p, "&zipcode=1&shipping=2&page=3");
  /* The same names in a form body and as JSON keys, \u-escaped too. */
  b.len = 0;
  const char *form = "user=a&%70in=1234&otp=99";
  assert_int_equal(resil__http_redact_body(NULL, &b, form, strlen(form), 4096), 0);
  assert_string_equal(b.p, "user=a&%70in=[REDACTED]&otp=[REDACTED]");
  b.len = 0;
  const char *j = "{\"\\u0074oken\":\"T1\",\"code\":\"T2\",\"status_code\":7}";
  assert_int_equal(resil__http_redact_body(NULL, &b, j, strlen(j), 4096), 0);
  assert_string_equal(b.p, "{\"\\u0074oken\":\"[REDACTED]\",\"code\":\"[REDACTED]\",\"status_code\":7}");
  resil__http_buf_free(NULL, &b);
}

/* Userinfo without a scheme, and URLs with userinfo inside query values,
 * plain or percent-encoded (once or twice): the event log's and the HTTP
 * log's URL redaction. A bare e-mail address in a value is kept. */
static void schemeless_userinfo_and_urls_in_query_values(void **state) {
  (void)state;
  struct {
    const char *url, *want;
  } cases[] = {
      {"user:pass@host/path", "[REDACTED]@host/path"},
      {"u:p@h:8080/x?page=1", "[REDACTED]@h:8080/x?page=1"},
      {"ghp_tok@github.com/o/r", "[REDACTED]@github.com/o/r"},
      {"https://h/cb?next=https://u:S1@h2/x&page=2", "https://h/cb?next=[REDACTED]&page=2"},
      {"https://h/cb?redirect=http%3A%2F%2Fuser%3AS2%40host&page=2",
       "https://h/cb?redirect=[REDACTED]&page=2"},
      {"https://h/cb?r=http%253A%252F%252Fuser%253AS3%2540host", "https://h/cb?r=[REDACTED]"},
      {"https://h/cb?r=http%25253A%25252F%25252Fu%25253AS6%252540h", "https://h/cb?r=[REDACTED]"},
      {"https://h/cb?to=u:S4@h/x;page=2", "https://h/cb?to=[REDACTED];page=2"},
      {"/cb?next=//u:S5@h/x", "/cb?next=[REDACTED]"},
      {"https://h/p?email=a@b.org&next=/home&u=https://h/x",
       "https://h/p?email=a@b.org&next=/home&u=https://h/x"},
      {"/relative/path?q=1", "/relative/path?q=1"},
      {"host:8080/x", "host:8080/x"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    http_buf b = {0};
    assert_int_equal(resil__http_redact_url(NULL, &b, cases[i].url), 0);
    if (strcmp(b.p, cases[i].want) != 0)
      fail_msg("%s\n  gave %s\n  want %s", cases[i].url, b.p, cases[i].want);
    resil__http_buf_free(NULL, &b);
  }
}

/* Message excerpts (core/redact.h): libpq-style messages lose the secrets
 * of the URI they came from wherever they appear, raw or percent-decoded;
 * prose keeps its words; escapes are never cut in half. */
static void message_excerpts_lose_the_secrets_of_their_uri(void **state) {
  (void)state;
  char b[160];
  const char *m = "invalid percent-encoded token: \"pa%zzss\"";
  resil__redact_excerpt(b, sizeof b, m, strlen(m), RESIL__REDACT_MESSAGE,
                        "postgresql://u:pa%zzss@h/db");
  assert_string_equal(b, "invalid percent-encoded token: \"[REDACTED]\"");
  m = "password authentication failed for user \"u\" (p@ss:x)";
  resil__redact_excerpt(b, sizeof b, m, strlen(m), RESIL__REDACT_MESSAGE,
                        "postgresql://u:p%40ss:x@h/db");
  assert_string_equal(b, "password authentication failed for user \"u\" ([REDACTED])");
  m = "bad value \"tok1\" at postgresql://x:y@h/db?sslpassword=tok1";
  resil__redact_excerpt(b, sizeof b, m, strlen(m), RESIL__REDACT_MESSAGE,
                        "postgresql://h/db?sslpassword=tok1");
  assert_string_equal(b, "bad value \"[REDACTED]\" at postgresql://[REDACTED]@h/db?sslpassword=[REDACTED]");
  m = "host=h password=kv-secret dbname=x";
  resil__redact_excerpt(b, sizeof b, m, strlen(m), RESIL__REDACT_MESSAGE, NULL);
  assert_string_equal(b, "host=h password=[REDACTED] dbname=x");
  /* Cut with "..." and never inside a \xNN escape. */
  m = "abcdef\n\tghij";
  resil__redact_excerpt(b, 12, m, strlen(m), RESIL__REDACT_NONE, NULL);
  assert_string_equal(b, "abcdef...");
  resil__redact_excerpt(b, sizeof b, m, strlen(m), RESIL__REDACT_NONE, NULL);
  assert_string_equal(b, "abcdef\\x0a\\x09ghij");
}

static void header_values_have_urls_redacted(void **state) {
  (void)state;
  struct {
    const char *name, *value, *want;
  } cases[] = {
      {"Location", "https://u:pw@h/cb?access_token=S&x=1#id_token=F",
       "  Location: https://[REDACTED]@h/cb?access_token=[REDACTED]&x=1#id_token=[REDACTED]"},
      {"Content-Location", "/r?%74oken=S", "  Content-Location: /r?%74oken=[REDACTED]"},
      {"Link", "<https://h/n?api_key=S&page=2>; rel=\"next\", <https://h/p?code=S>; rel=\"prev\"",
       "  Link: <https://h/n?api_key=[REDACTED]&page=2>; rel=\"next\", "
       "<https://h/p?code=[REDACTED]>; rel=\"prev\""},
      {"Refresh", "0; url=/p?token=S", "  Refresh: 0; url=/p?token=[REDACTED]"},
      {"Referer", "http://a:b@h/", "  Referer: http://[REDACTED]@h/"},
      {"X-Upstream", "<ftp://u:p;w,x@d@h>; a=1", "  X-Upstream: <ftp://[REDACTED]@h>; a=1"},
      {"X-Auth-Key", "S", "  X-Auth-Key: [REDACTED]"},
      {"Content-Type", "text/plain; charset=utf-8", "  Content-Type: text/plain; charset=utf-8"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    http_buf b = {0};
    assert_int_equal(resil__http_log_header(NULL, &b, cases[i].name, strlen(cases[i].name),
                                            cases[i].value, strlen(cases[i].value)),
                     0);
    assert_string_equal(b.p, cases[i].want);
    resil__http_buf_free(NULL, &b);
  }
}

/* ---- end to end: what the log sink receives -------------------------------- */

static const char k_redirect_response[] =
    "HTTP/1.1 200 OK\r\n"
    "Location: https://user:S-USERINFO@h/cb?access_token=S-ACCESS&x=1\r\n"
    "Content-Location: /r?token=S-CLOC\r\n"
    "Link: <https://h/n?api_key=S-LINK>; rel=\"next\"\r\n"
    "Refresh: 0; url=/p?token=S-REFRESH\r\n"
    "X-Auth-Key: S-XAUTHKEY\r\n"
    "X-Authorization: S-XAUTHZ\r\n"
    "X-Access-Key: S-XACCESS\r\n"
    "Ocp-Apim-Subscription-Key: S-OCP\r\n"
    "X-Jwt: S-JWT\r\n"
    "X-Passwd: S-PASSWD\r\n"
    "Authentication: S-AUTHN\r\n"
    "X-Visible: shown\r\n"
    "Content-Length: 2\r\n"
    "Connection: close\r\n"
    "\r\n"
    "ok";

static void url_valued_and_secret_headers_are_redacted_both_ways(void **state) {
  (void)state;
  raw_server srv;
  raw_start(&srv, (const char *const[]){k_redirect_response}, 1);
  log_capture lc = {0};
  int st = logged_get(&srv, RESIL_HTTP_LOG_HEADERS, &lc,
                      (const char *const[]){"Referer", "http://h/?token=S-REFERER&a=1",
                                            "X-Callback", "https://cb/x?sig=S-CALLBACK",
                                            "X-Access-Key", "S-REQKEY", "X-Jwt", "S-REQJWT",
                                            NULL});
  assert_int_equal(st, 200);
  /* They reached the server, so a leak would have been possible (read
   * after the server thread is joined)... */
  raw_stop(&srv);
  assert_contains(srv.req[0], "S-REFERER");
  assert_contains(srv.req[0], "S-REQKEY");
  /* ...and none reached the log. */
  const char *secrets[] = {"S-USERINFO", "S-ACCESS", "S-CLOC",    "S-LINK",    "S-REFRESH",
                           "S-XAUTHKEY", "S-XAUTHZ", "S-XACCESS", "S-OCP",     "S-JWT",
                           "S-PASSWD",   "S-AUTHN",  "S-REFERER", "S-CALLBACK", "S-REQKEY",
                           "S-REQJWT"};
  for (size_t i = 0; i < sizeof secrets / sizeof secrets[0]; i++) assert_lacks(lc.text, secrets[i]);
  assert_contains(lc.text, "Location: https://[REDACTED]@h/cb?access_token=[REDACTED]&x=1");
  assert_contains(lc.text, "Referer: http://h/?token=[REDACTED]&a=1");
  assert_contains(lc.text, "Ocp-Apim-Subscription-Key: [REDACTED]");
  assert_contains(lc.text, "X-Visible: shown");
  free(lc.text);
}

static const char k_hostile_response[] =
    "HTTP/1.1 200 OK\r\n"
    "X-Evil: a\x1b[2J\x1b]0;pwned\x07z\xff\r\n"
    "Content-Type: text/plain\r\n"
    "Content-Length: 9\r\n"
    "Connection: close\r\n"
    "\r\n"
    "b\x1b[31m\x07\xfe!";

/* 1 when s holds a control byte (other than the '\n' ending each captured
 * line), DEL or a byte >= 0x80. */
static int has_raw_byte(const char *s) {
  for (; *s; s++) {
    unsigned char c = (unsigned char)*s;
    if ((c < 0x20 && c != '\n') || c >= 0x7f) return 1;
  }
  return 0;
}

static void control_bytes_from_the_network_are_escaped_in_every_line(void **state) {
  (void)state;
  raw_server srv;
  raw_start(&srv, (const char *const[]){k_hostile_response}, 1);
  log_capture lc = {0};
  assert_int_equal(logged_get(&srv, RESIL_HTTP_LOG_FULL, &lc, NULL), 200);
  assert_true(lc.lines >= 4);
  if (has_raw_byte(lc.text)) fail_msg("raw byte in the log:\n%s", lc.text);
  assert_contains(lc.text, "X-Evil: a\\x1b[2J\\x1b]0;pwned\\x07z\\xff");
  /* The body line: its control bytes are shown as '.' (request.c) or
   * escaped; its byte >= 0x80 is escaped. */
  assert_contains(lc.text, "\\xfe!");
  free(lc.text);
  raw_stop(&srv);
}

static const char k_bad_redirect[] =
    "HTTP/1.1 302 Found\r\n"
    "Location: ftp://user:S-FTPPW@127.0.0.1/x?token=S-FTPQ\r\n"
    "Content-Length: 0\r\n"
    "Connection: close\r\n"
    "\r\n";

/* A redirect libcurl refuses: neither the error nor the log quotes the
 * Location's credentials. */
static void refused_redirect_errors_quote_no_secret(void **state) {
  (void)state;
  raw_server srv;
  raw_start(&srv, (const char *const[]){k_bad_redirect}, 1);
  char base[64];
  snprintf(base, sizeof base, "http://127.0.0.1:%u", srv.port);
  resil_http_endpoint ep = {.struct_size = sizeof(resil_http_endpoint), .name = "get", .method = RESIL_HTTP_GET, .path = "/x",
                            .response_codec = RESIL_HTTP_CODEC_RAW};
  log_capture lc = {0};
  resil_http_client_config cfg;
  resil_http_client_config_init(&cfg);
  cfg.base_url = base;
  cfg.endpoints = &ep;
  cfg.endpoint_count = 1;
  cfg.log_level = RESIL_HTTP_LOG_HEADERS;
  cfg.log_fn = capture;
  cfg.log_user = &lc;
  cfg.follow_redirects = 1;
  resil_http_client *c = NULL;
  resil_error err;
  if (resil_http_client_new(&cfg, &c, &err) != RESIL_OK) fail_msg("client: %s", err.msg);
  resil_http_response *r = NULL;
  (void)resil_http_call(c, "get", NULL, NULL, NULL, &r);
  const char *e = r ? resil_http_response_error(r) : NULL;
  if (e) {
    assert_lacks(e, "S-FTPPW");
    assert_lacks(e, "S-FTPQ");
  }
  assert_lacks(lc.text, "S-FTPPW");
  assert_lacks(lc.text, "S-FTPQ");
  resil_http_response_free(r);
  resil_http_client_free(c);
  free(lc.text);
  raw_stop(&srv);
}

/* ---- error messages ---------------------------------------------------------- */

static resil_status new_client(const resil_http_endpoint *ep, resil_error *err) {
  resil_http_client_config cfg;
  resil_http_client_config_init(&cfg);
  cfg.base_url = "http://127.0.0.1:9";
  cfg.endpoints = ep;
  cfg.endpoint_count = 1;
  resil_http_client *c = NULL;
  resil_status st = resil_http_client_new(&cfg, &c, err);
  resil_http_client_free(c);
  return st;
}

static void template_errors_quote_no_secret(void **state) {
  (void)state;
  resil_error err;
  /* A long query (over the template limit) with a token early in it. */
  size_t qlen = HTTP_TPL_MAX_LEN + 100;
  char *q = malloc(qlen + 1);
  assert_non_null(q);
  memcpy(q, "access_token=S-LONGQUERY&", 25);
  memset(q + 25, 'a', qlen - 25);
  q[qlen] = '\0';
  resil_http_endpoint ep = {.struct_size = sizeof(resil_http_endpoint), .name = "e", .method = RESIL_HTTP_GET, .path = "/p", .query = q};
  assert_status(RESIL_EINVAL, new_client(&ep, &err));
  assert_lacks(err.msg, "S-LONGQUERY");
  /* A bad character after a secret in a query template. */
  ep.query = "token=S-BADQUERY&x=a b";
  assert_status(RESIL_EINVAL, new_client(&ep, &err));
  assert_lacks(err.msg, "S-BADQUERY");
  assert_contains(err.msg, "token=[REDACTED]");
  /* A header without its colon, and a header value with a control byte. */
  ep.query = NULL;
  const char *h1[] = {"Authorization Bearer S-NOCOLON", NULL};
  ep.headers = h1;
  assert_status(RESIL_EINVAL, new_client(&ep, &err));
  assert_lacks(err.msg, "S-NOCOLON");
  const char *h2[] = {"X-Api-Key: S-CTRL\x01", NULL};
  ep.headers = h2;
  assert_status(RESIL_EINVAL, new_client(&ep, &err));
  assert_lacks(err.msg, "S-CTRL");
  free(q);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(secret_looking_header_names_are_redacted),
      cmocka_unit_test(query_names_are_matched_decoded_and_short_names_whole),
      cmocka_unit_test(header_values_have_urls_redacted),
      cmocka_unit_test(schemeless_userinfo_and_urls_in_query_values),
      cmocka_unit_test(message_excerpts_lose_the_secrets_of_their_uri),
      cmocka_unit_test(url_valued_and_secret_headers_are_redacted_both_ways),
      cmocka_unit_test(control_bytes_from_the_network_are_escaped_in_every_line),
      cmocka_unit_test(template_errors_quote_no_secret),
      cmocka_unit_test(refused_redirect_errors_quote_no_secret),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
