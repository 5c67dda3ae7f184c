/* The resil tool as scripts see it: `resil call` (and `resil describe`) run
 * as a child process (posix_spawn) against the fixture upstream started in
 * this process, with stdout, stderr and the exit status checked. The
 * fixture's counters prove how many attempts reached the server and how many
 * effects they caused. The binary comes from $RESIL_BIN (set by ctest); the
 * tests are skipped without it. The fixture serves on its own threads while
 * the child runs, hence _mt. */
/* wait4() for the child's peak resident size, pipe2(). */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "test_http_common.h"
#include "resil/shared.h"

extern char **environ;

typedef struct run_result {
  int status; /* exit status, or 128 + signal */
  char *out;  /* NUL-terminated; out_len counts the bytes before the NUL */
  size_t out_len;
  char *err;
  size_t err_len;
} run_result;

static void run_result_free(run_result *r) {
  free(r->out);
  free(r->err);
  memset(r, 0, sizeof *r);
}

static char *slurp(int fd, size_t *len) {
  off_t end = lseek(fd, 0, SEEK_END);
  assert_true(end >= 0);
  char *buf = malloc((size_t)end + 1);
  assert_non_null(buf);
  size_t got = 0;
  while (got < (size_t)end) {
    ssize_t n = pread(fd, buf + got, (size_t)end - got, (off_t)got);
    assert_true(n > 0);
    got += (size_t)n;
  }
  buf[got] = '\0';
  *len = got;
  return buf;
}

static int temp_fd(void) {
  char path[] = "/tmp/resil-cli-XXXXXX";
  int fd = mkstemp(path);
  assert_true(fd >= 0);
  unlink(path);
  return fd;
}

/* How the child is started beyond its arguments. */
typedef struct run_opts {
  const char *stdin_path; /* NULL: /dev/null (unless stdin_fd >= 0) */
  int stdin_fd;           /* >= 0: this descriptor as stdin          */
  int close_stdin;        /* start the child with descriptor 0 closed */
  int close_stdout;       /* start the child with descriptor 1 closed */
  long maxrss_kib;        /* out: the child's peak resident size      */
} run_opts;

/* Runs $RESIL_BIN with args (NULL-terminated) as opts says, and collects
 * what it wrote and how it ended. */
static void run_resil_opts(run_result *r, run_opts *ro, const char *const *args) {
  const char *bin = getenv("RESIL_BIN");
  if (!bin || !*bin) skip();
  const char *argv[160]; /* 65 --instance and a URL fit */
  size_t n = 0;
  argv[n++] = bin;
  for (; args[n - 1] && n < 159; n++) argv[n] = args[n - 1];
  argv[n] = NULL;
  int out = temp_fd(), err = temp_fd();
  posix_spawn_file_actions_t fa;
  assert_int_equal(posix_spawn_file_actions_init(&fa), 0);
  if (ro->close_stdin)
    assert_int_equal(posix_spawn_file_actions_addclose(&fa, 0), 0);
  else if (ro->stdin_fd >= 0)
    assert_int_equal(posix_spawn_file_actions_adddup2(&fa, ro->stdin_fd, 0), 0);
  else
    assert_int_equal(posix_spawn_file_actions_addopen(
                         &fa, 0, ro->stdin_path ? ro->stdin_path : "/dev/null", O_RDONLY, 0),
                     0);
  if (ro->close_stdout)
    assert_int_equal(posix_spawn_file_actions_addclose(&fa, 1), 0);
  else
    assert_int_equal(posix_spawn_file_actions_adddup2(&fa, out, 1), 0);
  assert_int_equal(posix_spawn_file_actions_adddup2(&fa, err, 2), 0);
  pid_t pid;
  int rc = posix_spawn(&pid, bin, &fa, NULL, (char *const *)argv, environ);
  posix_spawn_file_actions_destroy(&fa);
  assert_int_equal(rc, 0);
  int ws = 0;
  struct rusage ru;
  memset(&ru, 0, sizeof ru);
  while (wait4(pid, &ws, 0, &ru) < 0) {
  }
  ro->maxrss_kib = ru.ru_maxrss;
  r->status = WIFEXITED(ws) ? WEXITSTATUS(ws) : 128 + WTERMSIG(ws);
  r->out = slurp(out, &r->out_len);
  r->err = slurp(err, &r->err_len);
  close(out);
  close(err);
}

static void run_resil(run_result *r, const char *stdin_path, const char *const *args) {
  run_opts ro = {.stdin_path = stdin_path, .stdin_fd = -1};
  run_resil_opts(r, &ro, args);
}

#define RUN(r, ...) run_resil((r), NULL, (const char *const[]){__VA_ARGS__, NULL})

/* Fails with the child's output when the status differs. */
#define assert_exit(r, expected)                                                \
  do {                                                                         \
    if ((r)->status != (expected))                                             \
      fail_msg("exit %d, expected %d\nstdout: %s\nstderr: %s", (r)->status,   \
               (expected), (r)->out, (r)->err);                                \
  } while (0)

#define assert_contains(hay, needle)                                           \
  do {                                                                         \
    if (!strstr((hay), (needle)))                                              \
      fail_msg("'%s' not found in:\n%s", (needle), (hay));                     \
  } while (0)

static size_t count(const char *hay, const char *needle) {
  size_t n = 0;
  for (const char *p = strstr(hay, needle); p; p = strstr(p + 1, needle)) n++;
  return n;
}

typedef struct cli_state {
  resil_fixture *f;
  char url[512];
} cli_state;

static int setup(void **state) {
  cli_state *s = calloc(1, sizeof *s);
  assert_non_null(s);
  s->f = fx_start();
  *state = s;
  return 0;
}

static int teardown(void **state) {
  cli_state *s = *state;
  resil_fixture_stop(s->f);
  free(s);
  return 0;
}

/* The fixture URL with path appended, in the state's buffer. */
static const char *url(cli_state *s, const char *path) {
  snprintf(s->url, sizeof s->url, "%s%s", resil_fixture_url(s->f), path);
  return s->url;
}

/* A loopback port nothing listens on: bound, never listened, closed. */
static unsigned closed_port(void) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  assert_true(fd >= 0);
  struct sockaddr_in a;
  memset(&a, 0, sizeof a);
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
  socklen_t len = sizeof a;
  assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &len), 0);
  close(fd);
  return ntohs(a.sin_port);
}

/* ---- answered calls ---------------------------------------------------- */

static void call_get_prints_the_body_and_exits_0(void **state) {
  cli_state *s = *state;
  run_result r;
  RUN(&r, "call", url(s, "/items/42"));
  assert_exit(&r, 0);
  assert_string_equal(r.out, "{\"id\":42,\"name\":\"item-42\"}");
  assert_int_equal(r.err_len, 0);
  assert_int_equal(resil_fixture_attempts(s->f, "items"), 1);
  run_result_free(&r);
}

static void call_404_prints_the_body_and_exits_5(void **state) {
  cli_state *s = *state;
  run_result r;
  RUN(&r, "call", url(s, "/status/404"));
  assert_exit(&r, 5);
  assert_string_equal(r.out, "{\"status\":404}");
  run_result_free(&r);
}

static void call_503_exits_6_after_one_attempt_by_default(void **state) {
  cli_state *s = *state;
  run_result r;
  RUN(&r, "call", "-v", url(s, "/status/503"));
  assert_exit(&r, 6);
  assert_string_equal(r.out, "{\"status\":503}");
  assert_int_equal(resil_fixture_attempts(s->f, "status"), 1);
  assert_int_equal(count(r.err, "attempt "), 1);
  assert_contains(r.err, "attempt 1: ANSWERED(503) status=503 ");
  assert_contains(r.err, "stop: MAX_ATTEMPTS");
  run_result_free(&r);
}

static void call_retry_3_makes_3_attempts_on_a_get_503(void **state) {
  cli_state *s = *state;
  run_result r;
  RUN(&r, "call", "-v", "--retry", "3", "--backoff", "exp:10,2,50", "--deadline", "5000",
      "--timeout", "2000", url(s, "/status/503"));
  assert_exit(&r, 6);
  assert_int_equal(resil_fixture_attempts(s->f, "status"), 3);
  assert_contains(r.err, "attempt 1: ANSWERED(503) status=503 ");
  assert_contains(r.err, ", next in 10 ms\n");
  assert_contains(r.err, "attempt 2: ANSWERED(503) status=503 ");
  assert_contains(r.err, ", next in 20 ms\n");
  assert_contains(r.err, "attempt 3: ANSWERED(503) status=503 ");
  assert_contains(r.err, "result: ANSWERED(503) after 3 attempts, stop: MAX_ATTEMPTS");
  assert_contains(r.err, "idempotency key: none\n");
  /* A deadline and a shorter attempt timeout: no trap to warn about. */
  assert_null(strstr(r.err, "warning"));
  run_result_free(&r);
}

static void call_waits_what_retry_after_asks(void **state) {
  cli_state *s = *state;
  run_result r;
  int64_t t0 = mono_ms();
  RUN(&r, "call", "-v", "--retry", "2", "--backoff", "exp:10,2,5000", "--deadline", "5000",
      "--timeout", "2000", url(s, "/seq/ra?codes=503,200&retry_after=1"));
  int64_t took = mono_ms() - t0;
  assert_exit(&r, 0);
  assert_contains(r.err, "next in 1000 ms (Retry-After)");
  assert_true(took >= 950);
  assert_int_equal(resil_fixture_attempts(s->f, "seq"), 2);
  run_result_free(&r);
}

/* ---- writes: UNKNOWN and the safety rule ----------------------------------- */

static void call_post_timeout_is_unknown_exit_4_with_one_effect(void **state) {
  cli_state *s = *state;
  run_result r;
  RUN(&r, "call", "-X", "POST", "--timeout", "250", url(s, "/slow?ms=900"));
  assert_exit(&r, 4);
  assert_int_equal(r.out_len, 0);
  assert_int_equal(resil_fixture_effects(s->f, "slow"), 1);
  /* Without -v a call that got no answer still says why, in one line. */
  assert_int_equal(count(r.err, "\n"), 1);
  assert_contains(r.err, "UNKNOWN(timeout after sending)");
  assert_contains(r.err, "MAY HAVE EXECUTED");
  run_result_free(&r);
}

static void call_post_timeout_without_key_is_not_retried(void **state) {
  cli_state *s = *state;
  run_result r;
  RUN(&r, "call", "-v", "-X", "POST", "--retry", "3", "--timeout", "250", "--deadline", "5000",
      url(s, "/slow?ms=900"));
  assert_exit(&r, 4);
  assert_int_equal(resil_fixture_attempts(s->f, "slow"), 1);
  assert_int_equal(resil_fixture_effects(s->f, "slow"), 1);
  assert_contains(r.err, "(not idempotent, at most 3 attempts)");
  assert_contains(r.err, "attempt 1: UNKNOWN(timeout after sending) status=- ");
  assert_contains(r.err, "stop: UNSAFE");
  assert_int_equal(count(r.err, "attempt 2:"), 0);
  run_result_free(&r);
}

static void call_unsafe_retries_repeat_the_effect_and_warn(void **state) {
  cli_state *s = *state;
  run_result r;
  RUN(&r, "call", "-v", "-X", "POST", "--retry", "3", "--unsafe-retries", "--backoff",
      "exp:10,2,50", "--timeout", "250", "--deadline", "5000", url(s, "/slow?ms=900"));
  assert_exit(&r, 4);
  assert_int_equal(resil_fixture_effects(s->f, "slow"), 3);
  assert_contains(r.err, "WARNING: --unsafe-retries");
  assert_contains(r.err, "attempt 3: UNKNOWN(timeout after sending)");
  assert_contains(r.err, "stop: MAX_ATTEMPTS");
  run_result_free(&r);
}

static void call_idempotency_key_auto_makes_a_post_retry_safe(void **state) {
  cli_state *s = *state;
  run_result r;
  RUN(&r, "call", "-v", "-X", "POST", "-d", "{\"amount\":5}", "--retry", "3", "--backoff",
      "exp:50,2,200", "--timeout", "250", "--deadline", "5000", "--idempotency-key", "auto",
      url(s, "/idem/pay?sleep_ms=500"));
  /* Attempt 1 commits, then times out (UNKNOWN); attempt 2 carries the same
   * key and gets the stored answer: one effect for two attempts. */
  assert_exit(&r, 0);
  assert_int_equal(resil_fixture_attempts(s->f, "idem"), 2);
  assert_int_equal(resil_fixture_effects(s->f, "idem"), 1);
  assert_contains(r.out, "\"effect\":1");
  assert_contains(r.err, "attempt 1: UNKNOWN(timeout after sending)");
  assert_contains(r.err, "attempt 2: ANSWERED(201) status=201 ");
  const char *k = strstr(r.err, "idempotency key: ");
  assert_non_null(k);
  k += strlen("idempotency key: ");
  char printed[64] = {0};
  size_t kl = strcspn(k, "\n");
  assert_int_equal(kl, 32);
  memcpy(printed, k, kl);
  char sent[64];
  assert_int_equal(resil_fixture_last_header(s->f, "idem", "Idempotency-Key", sent, sizeof sent),
                   1);
  assert_string_equal(sent, printed);
  run_result_free(&r);
}

static void call_explicit_idempotency_key_is_sent_as_given(void **state) {
  cli_state *s = *state;
  run_result r;
  RUN(&r, "call", "--idempotency-key", "order-17", "-d", "x", url(s, "/idem/o"));
  assert_exit(&r, 0);
  char sent[64];
  assert_int_equal(resil_fixture_last_header(s->f, "idem", "Idempotency-Key", sent, sizeof sent),
                   1);
  assert_string_equal(sent, "order-17");
  run_result_free(&r);
}

/* ---- not sent, deadline ------------------------------------------------------- */

static void call_connection_refused_is_not_sent_exit_3(void **state) {
  (void)state;
  char u[64];
  snprintf(u, sizeof u, "http://127.0.0.1:%u/items/1", closed_port());
  run_result r;
  RUN(&r, "call", "-v", u);
  assert_exit(&r, 3);
  assert_int_equal(r.out_len, 0);
  assert_contains(r.err, "attempt 1: NOT_SENT(connection refused) status=- ");
  assert_contains(r.err, "connection refused");
  run_result_free(&r);
}

static void call_deadline_stops_retries_of_a_slow_get(void **state) {
  cli_state *s = *state;
  run_result r;
  RUN(&r, "call", "-v", "--deadline", "300", "--retry", "5", url(s, "/slow?ms=1000"));
  /* The first attempt times out at the deadline after sending: the outcome
   * stays UNKNOWN (it may have run) and the retry stops on the deadline. */
  assert_exit(&r, 4);
  assert_contains(r.err, "result: UNKNOWN(timeout after sending)");
  assert_contains(r.err, "stop: DEADLINE");
  long attempts = resil_fixture_attempts(s->f, "slow");
  assert_true(attempts >= 1 && attempts < 5);
  /* --retry with a deadline but no --timeout is the trap warned about. */
  assert_contains(r.err, "warning: --retry 5 with --deadline but no --timeout");
  run_result_free(&r);
}

static void call_deadline_refusal_after_not_sent_is_rejected_exit_7(void **state) {
  (void)state;
  char u[64];
  snprintf(u, sizeof u, "http://127.0.0.1:%u/items/1", closed_port());
  run_result r;
  RUN(&r, "call", "-v", "--retry", "5", "--backoff", "fixed:1000", "--deadline", "200",
      "--timeout", "100", u);
  /* Nothing was sent, and the wait would pass the deadline: the retry gives
   * up at once with REJECTED(deadline). */
  assert_exit(&r, 7);
  assert_contains(r.err, "result: REJECTED(deadline too short) after 1 attempt, stop: DEADLINE");
  run_result_free(&r);
}

/* ---- request shape ---------------------------------------------------------- */

static void call_sends_headers_and_the_raw_body_of_a_file(void **state) {
  cli_state *s = *state;
  /* Skip before making the temporary file that run_resil would strand. */
  if (!getenv("RESIL_BIN")) skip();
  char path[] = "/tmp/resil-cli-body-XXXXXX";
  int fd = mkstemp(path);
  assert_true(fd >= 0);
  assert_int_equal(write(fd, "a\0b\n", 4), 4);
  close(fd);
  char data[64];
  snprintf(data, sizeof data, "@%s", path);
  run_result r;
  RUN(&r, "call", "-H", "X-Test:  v ", "-H", "X-Empty:", "-d", data,
      url(s, "/echo?q={x}&a=%41 b"));
  unlink(path);
  assert_exit(&r, 0);
  assert_contains(r.out, "\"method\":\"POST\"");
  assert_contains(r.out, "\"body_len\":4");
  assert_contains(r.out, "\"content_type\":\"application/x-www-form-urlencoded\"");
  assert_contains(r.out, "\"x-test\":\"v\"");
  assert_contains(r.out, "\"x-empty\":\"\"");
  /* Taken literally: '{' and '}' are escaped, never read as placeholders. */
  assert_contains(r.out, "\"query\":\"q=%7Bx%7D&a=%41%20b\"");
  run_result_free(&r);
}

/* The value of "name" in the echo route's JSON headers object, into out. */
static int echo_header(const char *json, const char *name, char *out, size_t len) {
  char pat[80];
  snprintf(pat, sizeof pat, "\"%s\":\"", name);
  const char *p = strstr(json, pat);
  if (!p) return 0;
  p += strlen(pat);
  size_t n = strcspn(p, "\"");
  snprintf(out, len, "%.*s", (int)n, p);
  return 1;
}

static void call_deadline_is_sent_as_the_budget_left(void **state) {
  cli_state *s = *state;
  run_result r;
  char v[64];
  /* --deadline: Request-Timeout, gRPC's grammar, no more than was given. */
  RUN(&r, "call", "--deadline", "300", "-H", "Request-Timeout: 5S", url(s, "/echo"));
  assert_exit(&r, 0);
  assert_true(echo_header(r.out, "request-timeout", v, sizeof v));
  size_t n = strlen(v);
  assert_true(n >= 2 && v[n - 1] == 'u');
  long us = atol(v);
  assert_true(us > 0 && us <= 300000);
  /* The -H of the same name gave way: one value, the library's. */
  assert_null(strstr(r.out, "5S"));
  run_result_free(&r);
  /* Another name. */
  RUN(&r, "call", "--deadline", "300", "--deadline-header", "grpc-timeout", url(s, "/echo"));
  assert_exit(&r, 0);
  assert_true(echo_header(r.out, "grpc-timeout", v, sizeof v));
  assert_false(echo_header(r.out, "request-timeout", v, sizeof v));
  run_result_free(&r);
  /* None, and no deadline: no header; a -H goes as given. */
  RUN(&r, "call", "--deadline", "300", "--deadline-header", "none", url(s, "/echo"));
  assert_exit(&r, 0);
  assert_false(echo_header(r.out, "request-timeout", v, sizeof v));
  run_result_free(&r);
  RUN(&r, "call", "-H", "Request-Timeout: 5S", url(s, "/echo"));
  assert_exit(&r, 0);
  assert_true(echo_header(r.out, "request-timeout", v, sizeof v));
  assert_string_equal(v, "5S");
  run_result_free(&r);
  RUN(&r, "call", "--deadline-header", "Bad Name", url(s, "/echo"));
  assert_exit(&r, 2);
  assert_contains(r.err, "--deadline-header");
  run_result_free(&r);
  RUN(&r, "call", "--deadline-header", "Host", url(s, "/echo"));
  assert_exit(&r, 2);
  run_result_free(&r);
}

static void call_reads_the_body_from_stdin_with_its_content_type(void **state) {
  cli_state *s = *state;
  /* Skip before making the temporary file that run_resil would strand. */
  if (!getenv("RESIL_BIN")) skip();
  char path[] = "/tmp/resil-cli-stdin-XXXXXX";
  int fd = mkstemp(path);
  assert_true(fd >= 0);
  assert_int_equal(write(fd, "{\"a\":1}\n", 8), 8);
  close(fd);
  run_result r;
  run_resil(&r, path,
            (const char *const[]){"call", "-X", "PUT", "-H", "Content-Type: application/json",
                                  "-d", "@-", url(s, "/echo"), NULL});
  unlink(path);
  assert_exit(&r, 0);
  assert_contains(r.out, "\"method\":\"PUT\"");
  assert_contains(r.out, "\"body_len\":8");
  assert_contains(r.out, "\"content_type\":\"application/json\"");
  assert_int_equal(resil_fixture_effects(s->f, "echo"), 1);
  run_result_free(&r);
}

static void call_follows_redirects_only_with_location(void **state) {
  cli_state *s = *state;
  run_result r;
  RUN(&r, "call", url(s, "/redirect/2"));
  assert_exit(&r, 0);
  assert_contains(r.out, "\"location\":\"/redirect/1\"");
  run_result_free(&r);
  RUN(&r, "call", "-L", url(s, "/redirect/2"));
  assert_exit(&r, 0);
  assert_string_equal(r.out, "{\"hops_done\":true}");
  run_result_free(&r);
}

/* ---- warnings, usage -------------------------------------------------------- */

static void call_warns_about_retry_without_deadline_and_long_timeouts(void **state) {
  cli_state *s = *state;
  run_result r;
  RUN(&r, "call", "--retry", "2", url(s, "/items/1"));
  assert_exit(&r, 0);
  assert_int_equal(count(r.err, "\n"), 1);
  assert_contains(r.err, "resil call: warning: --retry 2 without --deadline");
  run_result_free(&r);

  RUN(&r, "call", "--timeout", "500", "--deadline", "200", url(s, "/items/1"));
  assert_exit(&r, 0);
  assert_int_equal(count(r.err, "\n"), 1);
  assert_contains(r.err, "warning: --timeout 500 ms is longer than --deadline 200 ms");
  run_result_free(&r);
}

static void call_bad_arguments_exit_2_with_one_line_naming_the_argument(void **state) {
  cli_state *s = *state;
  char u[256];
  snprintf(u, sizeof u, "%s/items/1", resil_fixture_url(s->f));
  struct {
    const char *args[6];
    const char *names;
  } cases[] = {
      {{"--bogus", u}, "'--bogus'"},
      {{"-H", "nocolon", u}, "-H:"},
      {{"-H", "Host: x", u}, "-H:"},
      {{"-H", "Idempotency-Key: k", u}, "--idempotency-key"},
      {{"--retry", "0", u}, "--retry:"},
      {{"--retry", "x", u}, "--retry:"},
      {{"--backoff", "garbage", u}, "--backoff:"},
      {{"--backoff", "exp:100,2,10", u}, "--backoff:"},
      {{"-X", "FETCH", u}, "-X:"},
      {{"--timeout", "0", u}, "--timeout:"},
      {{"--deadline", "abc", u}, "--deadline:"},
      {{"--idempotency-key", "a b", u}, "--idempotency-key:"},
      {{"-d", "@/nonexistent/body", u}, "-d:"},
      {{"-X", "HEAD", "-d", "x", u}, "-d:"},
      {{"-v"}, "URL:"},
      {{"ftp://example.com/x"}, "URL:"},
      {{"http:///x"}, "URL:"},
      {{u, u}, "URL:"},
      {{u, "--timeout"}, "--timeout:"},
      {{"--max-body", "0", u}, "--max-body:"},
      {{"--max-body", "1073741825", u}, "--max-body:"},
      {{"--rate", "2/1h", u}, "--rate:"},
      {{"--state", "S", u}, "--state:"},
      {{"--state", "S", "--rate", "2", u}, "--rate:"},
      {{"--state", "S", "--rate", "0/1s", u}, "--rate:"},
      {{"--state", "S", "--rate", "2/xs", u}, "--rate:"},
      {{"--state-dir", "/tmp", u}, "--state-dir:"},
      {{"--state", "a/b", "--rate", "1/1s", u}, "--state:"},
      /* several instances */
      {{"--instance", "ftp://127.0.0.1:1", u}, "--instance:"},
      {{u, "--instance"}, "--instance:"},
      {{"--instance", "http://127.0.0.1:1"}, "URL:"},
      {{"--instance", "http://127.0.0.1:1", "items/1"}, "URL:"},
      {{"/items/1"}, "URL:"},
      {{"--balance", "p2c", u}, "--balance:"},
      {{"--instance", "http://127.0.0.1:1", "--balance", "least", u}, "--balance:"},
      {{"--resolve", "--instance", "http://127.0.0.1:1", u}, "--resolve:"},
      {{"--resolve", "--instance", "http://127.0.0.1:1", "/items/1"}, "--resolve:"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    const char *argv[8] = {"call"};
    size_t n = 1;
    for (size_t k = 0; k < 6 && cases[i].args[k]; k++) argv[n++] = cases[i].args[k];
    argv[n] = NULL;
    run_result r;
    run_resil(&r, NULL, argv);
    if (r.status != 2 || r.out_len != 0 || count(r.err, "\n") != 1 ||
        r.err[r.err_len - 1] != '\n' || !strstr(r.err, cases[i].names) ||
        strncmp(r.err, "resil call: ", 12) != 0)
      fail_msg("case %zu: exit %d, stdout '%s', stderr '%s' (expected 2 and one line naming %s)",
               i, r.status, r.out, r.err, cases[i].names);
    run_result_free(&r);
  }
  assert_int_equal(resil_fixture_attempts(s->f, "items"), 0);
}

/* At most 64 instances, the URL's origin among them: 64 --instance and a
 * URL are one too many, and the message says the URL's origin counts (it
 * said "got 65" only); with a path alone, 64 --instance are allowed and 65
 * are not. Nothing is sent. */
static void call_too_many_instances_says_the_urls_own_counts(void **state) {
  cli_state *s = *state;
  static char inst[65][40];
  const char *argv[2 * 65 + 4] = {"call"};
  for (int i = 0; i < 65; i++) snprintf(inst[i], sizeof inst[i], "http://127.0.0.1:%d", i + 2);
  size_t n = 1;
  for (int i = 0; i < 64; i++) {
    argv[n++] = "--instance";
    argv[n++] = inst[i];
  }
  argv[n++] = url(s, "/items/1");
  argv[n] = NULL;
  run_result r;
  run_resil(&r, NULL, argv);
  assert_exit(&r, 2);
  assert_int_equal(r.out_len, 0);
  assert_int_equal(count(r.err, "\n"), 1);
  assert_contains(r.err, "resil call: --instance: at most 64 instances with the URL's own, got 65 "
                         "(64 --instance and the URL's origin)\n");
  run_result_free(&r);
  /* A path alone: the --instance URLs are all the instances. */
  argv[n - 1] = "--instance";
  argv[n++] = inst[64];
  argv[n++] = "/items/1";
  argv[n] = NULL;
  run_resil(&r, NULL, argv);
  assert_exit(&r, 2);
  assert_int_equal(count(r.err, "\n"), 1);
  assert_contains(r.err, "resil call: --instance: at most 64 instances, got 65\n");
  run_result_free(&r);
  assert_int_equal(resil_fixture_attempts(s->f, "items"), 0);
}

/* ---- several instances (issue 22) -------------------------------------- */

/* Two fixtures on 127.0.0.1, one stopped (its port refuses): `resil call
 * --instance LIVE --instance DEAD PATH --retry 2` always answers 0 through
 * the live one; a first attempt that chose the dead one is NOT_SENT and the
 * retry moves (seen within at most 20 runs, wherever round robin starts; an
 * unkeyed POST moves too: it reached nobody). stderr says which instance
 * answered, -v each attempt's. */
static void call_several_instances_retry_moves_past_a_refused_one(void **state) {
  cli_state *s = *state;
  resil_fixture *dead = fx_start();
  char dead_url[128], live_url[128];
  snprintf(dead_url, sizeof dead_url, "%s", resil_fixture_url(dead));
  snprintf(live_url, sizeof live_url, "%s", resil_fixture_url(s->f));
  resil_fixture_stop(dead); /* its port now refuses */
  char want[200];
  snprintf(want, sizeof want, "resil call: answered by instance 1: %s\n", live_url);
  int moved = 0;
  long runs = 0;
  for (; runs < 20 && !moved; runs++) {
    run_result r;
    RUN(&r, "call", "-v", "--retry", "2", "--deadline", "5000", "--timeout", "2000",
        "--backoff", "fixed:0", "--balance", "round_robin", "--instance", dead_url,
        "--instance", live_url, "/items/7");
    assert_exit(&r, 0);
    assert_string_equal(r.out, "{\"id\":7,\"name\":\"item-7\"}");
    assert_contains(r.err, want);
    if (strstr(r.err, "attempt 1: NOT_SENT(connection refused)")) {
      char first[200];
      snprintf(first, sizeof first, " instance 0 (%s), next in 0 ms\n", dead_url);
      assert_contains(r.err, first);
      assert_contains(r.err, "attempt 2: ANSWERED(200) status=200 ");
      moved = 1;
    }
    run_result_free(&r);
  }
  assert_true(moved);
  assert_int_equal(resil_fixture_attempts(s->f, "items"), runs);

  /* A POST without a key: a refused attempt reached nobody, so it moves. */
  moved = 0;
  long posts = 0;
  for (; posts < 20 && !moved; posts++) {
    run_result r;
    RUN(&r, "call", "-v", "--retry", "2", "--deadline", "5000", "--timeout", "2000",
        "--backoff", "fixed:0", "-d", "x", "--balance", "round_robin", "--instance", dead_url,
        "--instance", live_url, "/echo");
    assert_exit(&r, 0);
    if (strstr(r.err, "attempt 1: NOT_SENT(connection refused)")) moved = 1;
    run_result_free(&r);
  }
  assert_true(moved);
  assert_int_equal(resil_fixture_effects(s->f, "echo"), posts); /* one each */

  /* The URL's own origin is the first instance; the last attempt's line
   * names the dead one when every attempt was refused. */
  char u[200], other[64];
  snprintf(u, sizeof u, "%s/items/1", dead_url);
  snprintf(other, sizeof other, "http://127.0.0.1:%u", closed_port());
  run_result r;
  RUN(&r, "call", "--instance", other, u);
  assert_exit(&r, 3);
  assert_contains(r.err, "resil call: the last attempt went to instance ");
  assert_true(strstr(r.err, dead_url) || strstr(r.err, other));
  run_result_free(&r);
}

/* --resolve: every address of the URL's host name is an instance, the URL
 * (its Host) kept; the line names the address that answered. */
static void call_resolve_spreads_over_the_names_addresses(void **state) {
  cli_state *s = *state;
  const char *base = resil_fixture_url(s->f); /* http://127.0.0.1:PORT */
  char u[200];
  snprintf(u, sizeof u, "http://localhost%s/items/4", strrchr(base, ':'));
  run_result r;
  /* localhost may also be ::1, where the fixture does not listen: a retry */
  RUN(&r, "call", "--resolve", "--retry", "2", "--deadline", "5000", "--timeout", "2000", u);
  assert_exit(&r, 0);
  assert_string_equal(r.out, "{\"id\":4,\"name\":\"item-4\"}");
  assert_contains(r.err, "resil call: answered by instance ");
  char want[200];
  snprintf(want, sizeof want, ": http://localhost%s@127.0.0.1\n", strrchr(base, ':'));
  assert_contains(r.err, want);
  run_result_free(&r);
}

/* An instance URL's userinfo is never printed (the URL redacted as the
 * library's log does). */
static void call_instance_lines_redact_the_url(void **state) {
  cli_state *s = *state;
  char live[200];
  const char *base = resil_fixture_url(s->f); /* http://127.0.0.1:PORT */
  snprintf(live, sizeof live, "http://user:s3cret@%s", base + strlen("http://"));
  run_result r;
  RUN(&r, "call", "-v", "--instance", live, "--instance", live, "/items/2");
  assert_exit(&r, 0);
  assert_null(strstr(r.err, "s3cret"));
  assert_contains(r.err, "[REDACTED]@127.0.0.1:");
  assert_contains(r.err, "resil call: answered by instance ");
  run_result_free(&r);
}

/* ---- --state: policies kept across invocations (DESIGN 8.1) ------------ */

static size_t files_in(const char *dir) {
  char cmd[256];
  snprintf(cmd, sizeof cmd, "test $(ls -A '%s' | wc -l) -eq 1", dir);
  return system(cmd) == 0 ? 1 : 0;
}

/* Three sequential `resil call --state S --rate 2/1h`: the third is
 * REJECTED (exit 7) and the upstream saw 2; `resil state show` lists the
 * limiter with no permit left, `reset` gives them back; another --rate
 * replaces it (generation 2); show never creates a segment. */
static void call_state_rate_is_kept_across_invocations(void **state) {
  cli_state *s = *state;
  if (!getenv("RESIL_BIN")) skip();
  char dir[] = "/tmp/resil-cli-state-XXXXXX";
  assert_non_null(mkdtemp(dir));
  char seg[32];
  snprintf(seg, sizeof seg, "t%ld", (long)getpid());
  const char *u = url(s, "/items/7");
  run_result r;
  for (int i = 0; i < 2; i++) {
    RUN(&r, "call", "--state", seg, "--state-dir", dir, "--rate", "2/1h", u);
    assert_exit(&r, 0);
    run_result_free(&r);
  }
  RUN(&r, "call", "--state", seg, "--state-dir", dir, "--rate", "2/1h", u);
  assert_exit(&r, 7);
  assert_contains(r.err, "REJECTED(no rate limiter permit) after 0 attempts");
  run_result_free(&r);
  assert_int_equal(resil_fixture_attempts(s->f, "items"), 2);

  RUN(&r, "state", "show", seg, "--dir", dir);
  assert_exit(&r, 0);
  assert_contains(r.out, "1 instance, capacity 64");
  assert_contains(r.out, "ratelimiter");
  assert_contains(r.out, "rate");
  assert_contains(r.out, "generation 1: 0 of 2 permits available");
  run_result_free(&r);

  RUN(&r, "state", "reset", seg, "rate", "--dir", dir);
  assert_exit(&r, 0);
  run_result_free(&r);
  RUN(&r, "state", "show", seg, "--dir", dir);
  assert_contains(r.out, "generation 1: 2 of 2 permits available");
  run_result_free(&r);
  RUN(&r, "call", "--state", seg, "--state-dir", dir, "--rate", "2/1h", u);
  assert_exit(&r, 0);
  run_result_free(&r);
  assert_int_equal(resil_fixture_attempts(s->f, "items"), 3);

  /* another rate: the command line is the truth, the limiter is replaced */
  RUN(&r, "call", "--state", seg, "--state-dir", dir, "--rate", "5/1h", u);
  assert_exit(&r, 0);
  run_result_free(&r);
  RUN(&r, "state", "show", seg, "--dir", dir);
  assert_contains(r.out, "generation 2: 4 of 5 permits available");
  run_result_free(&r);

  /* errors: no such instance, no such segment (and none is created) */
  RUN(&r, "state", "reset", seg, "nope", "--dir", dir);
  assert_exit(&r, 1);
  assert_contains(r.err, "INSTANCE: no instance 'nope'");
  run_result_free(&r);
  RUN(&r, "state", "show", "absent", "--dir", dir);
  assert_exit(&r, 1);
  assert_contains(r.err, "no segment");
  run_result_free(&r);
  RUN(&r, "state", "show");
  assert_exit(&r, 2);
  assert_contains(r.err, "NAME: missing");
  run_result_free(&r);
  assert_int_equal(files_in(dir), 1);

  char path[256];
  snprintf(path, sizeof path, "%s/resil-%lu-v%d-%s", dir, (unsigned long)geteuid(),
           RESIL_SHARED_LAYOUT, seg);
  assert_int_equal(unlink(path), 0);
  assert_int_equal(rmdir(dir), 0);
}

/* M5: sequential `resil call --state S --breaker window=5,min=5,...`
 * against a failing route: the first 5 invocations are made (exit 6) and
 * open the shared breaker; the next ones are REJECTED (exit 7) and the
 * upstream's counter stops at 5; after the wait exactly one probe goes
 * through (a failing one re-opens it: the next is rejected at once), and
 * a succeeding probe closes it. `resil state show` describes it. The
 * rejections are made only while well inside the wait (measured from
 * before the invocation that opened it), so a slow machine makes fewer,
 * never a wrong one. */
static void call_state_breaker_opens_across_invocations_and_probes_after_the_wait(void **state) {
  cli_state *s = *state;
  if (!getenv("RESIL_BIN")) skip();
  char dir[] = "/tmp/resil-cli-breaker-XXXXXX";
  assert_non_null(mkdtemp(dir));
  char seg[32];
  snprintf(seg, sizeof seg, "b%ld", (long)getpid());
  const int64_t wait_ms = 1000;
  const char *spec = "window=5,min=5,rate=50,wait=1s,probes=1";
  char fail_url[512];
  snprintf(fail_url, sizeof fail_url, "%s", url(s, "/status/503"));
  run_result r;
  int64_t before_open = 0, after_open = 0;
  for (int i = 0; i < 5; i++) {
    before_open = mono_ms();
    RUN(&r, "call", "--state", seg, "--state-dir", dir, "--breaker", spec, fail_url);
    assert_exit(&r, 6);
    run_result_free(&r);
  }
  after_open = mono_ms();
  assert_int_equal(resil_fixture_attempts(s->f, "status"), 5);

  int rejected = 0;
  while (rejected < 20 && mono_ms() - before_open < wait_ms / 2) {
    RUN(&r, "call", "--state", seg, "--state-dir", dir, "--breaker", spec, fail_url);
    assert_exit(&r, 7);
    assert_contains(r.err, "REJECTED(circuit breaker open) after 0 attempts");
    run_result_free(&r);
    rejected++;
  }
  print_message("M5: invocations %d, upstream_calls 5, rejected_invocations %d\n", 5 + rejected,
                rejected);
  assert_true(rejected >= 1);
  assert_int_equal(resil_fixture_attempts(s->f, "status"), 5);
  RUN(&r, "state", "show", seg, "--dir", dir);
  assert_exit(&r, 0);
  assert_contains(r.out, "breaker");
  assert_contains(r.out, "generation 1: OPEN for ");
  assert_contains(r.out, "(wait 1000 ms), window 5 calls 5 failed (100%, minimum 5)");
  assert_contains(r.out, ", 1 consecutive opens");
  run_result_free(&r);

  /* after the wait: one probe (failing: OPEN again, the next rejected) */
  while (mono_ms() - after_open < wait_ms + 50) usleep(10000);
  RUN(&r, "call", "--state", seg, "--state-dir", dir, "--breaker", spec, fail_url);
  assert_exit(&r, 6);
  run_result_free(&r);
  assert_int_equal(resil_fixture_attempts(s->f, "status"), 6);
  int64_t reopened = mono_ms();
  RUN(&r, "call", "--state", seg, "--state-dir", dir, "--breaker", spec, fail_url);
  assert_exit(&r, 7);
  run_result_free(&r);
  assert_int_equal(resil_fixture_attempts(s->f, "status"), 6);
  print_message("M5: probe_after_wait 1\n");

  /* after the next wait a succeeding probe closes it */
  while (mono_ms() - reopened < wait_ms + 50) usleep(10000);
  RUN(&r, "call", "--state", seg, "--state-dir", dir, "--breaker", spec, url(s, "/items/7"));
  assert_exit(&r, 0);
  run_result_free(&r);
  RUN(&r, "state", "show", seg, "--dir", dir);
  assert_contains(r.out, "generation 1: CLOSED");
  assert_contains(r.out, "0 consecutive opens, totals 7 calls 6 failed"); /* a close ends the series */
  run_result_free(&r);

  /* another spec replaces it (generation 2); usage errors name the key */
  RUN(&r, "call", "--state", seg, "--state-dir", dir, "--breaker", "window=3", url(s, "/items/7"));
  assert_exit(&r, 0);
  run_result_free(&r);
  RUN(&r, "state", "show", seg, "--dir", dir);
  assert_contains(r.out, "generation 2: CLOSED");
  run_result_free(&r);
  RUN(&r, "call", "--breaker", "window=3", url(s, "/items/7"));
  assert_exit(&r, 2);
  assert_contains(r.err, "--breaker: needs --state NAME");
  run_result_free(&r);
  RUN(&r, "call", "--state", seg, "--state-dir", dir, "--breaker", "window=3,size=2",
      url(s, "/items/7"));
  assert_exit(&r, 2);
  assert_contains(r.err, "--breaker: unknown key 'size'");
  run_result_free(&r);
  RUN(&r, "call", "--state", seg, "--state-dir", dir, "--breaker", "wait=soon", url(s, "/items/7"));
  assert_exit(&r, 2);
  assert_contains(r.err, "--breaker: wait: expected a duration");
  run_result_free(&r);
  RUN(&r, "call", "--state", seg, "--state-dir", dir, "--breaker", "window=3,min=4",
      url(s, "/items/7"));
  assert_exit(&r, 2);
  assert_contains(r.err, "--breaker: min: must be at most window (3), got 4");
  run_result_free(&r);
  RUN(&r, "call", "--state", seg, "--state-dir", dir, "--breaker", "window=20000",
      url(s, "/items/7"));
  assert_exit(&r, 2);
  assert_contains(r.err, "--breaker: window: a shared breaker's count window holds at most");
  run_result_free(&r);
  RUN(&r, "call", "--state", seg, "--state-dir", dir, url(s, "/items/7"));
  assert_exit(&r, 2);
  assert_contains(r.err, "--state: needs --rate N/PERIOD or --breaker SPEC");
  run_result_free(&r);

  char path[256];
  snprintf(path, sizeof path, "%s/resil-%lu-v%d-%s", dir, (unsigned long)geteuid(),
           RESIL_SHARED_LAYOUT, seg);
  assert_int_equal(unlink(path), 0);
  assert_int_equal(rmdir(dir), 0);
}

/* Runs `resil call` with args until an invocation is admitted by the
 * breaker's ramp (exit other than 7), at most 50 times; a refused one is
 * REJECTED(recovering). Returns the refusals. */
#define RUN_ADMITTED(r, ...)                                                   \
  run_admitted((r), (const char *const[]){__VA_ARGS__, NULL})
static int run_admitted(run_result *r, const char *const *args) {
  for (int refused = 0; refused < 50; refused++) {
    run_resil(r, NULL, args);
    if (r->status != 7) return refused;
    assert_contains(r->err, "REJECTED(recovering) after 0 attempts");
    run_result_free(r);
  }
  fail_msg("50 invocations refused by a 20%% ramp");
  return -1;
}

/* The ramp after recovery and retries last (DESIGN §2.9) across
 * invocations: `--breaker window=2,min=2,rate=100,wait=300ms,ramp=60s,
 * ramp_min=20`. Two failures open it; after the wait the probe, made with
 * --retry 3 against the failing route, is one attempt (retries last: the
 * breaker is HALF_OPEN), and opens it again; the next probe succeeds and
 * the breaker ramps: `resil state show` says 20 % admitted, and of 10
 * invocations about 2 are made (the ramp admits the sum of the shares,
 * 0.5 + 10 x 0.2), the others exit 7 REJECTED(recovering) and reach no
 * server. An admitted --retry 3 call to the failing route during the ramp
 * makes one attempt (stop RECOVERING); with --retry-during-recovery three.
 * A bad ramp value is a usage error naming the key, with the breaker's
 * message (the registry's), and creates no segment. */
static void call_state_breaker_ramps_after_recovery_and_retries_last(void **state) {
  cli_state *s = *state;
  if (!getenv("RESIL_BIN")) skip();
  char dir[] = "/tmp/resil-cli-ramp-XXXXXX";
  assert_non_null(mkdtemp(dir));
  char seg[32];
  snprintf(seg, sizeof seg, "rc%ld", (long)getpid());
  const char *spec = "window=2,min=2,rate=100,wait=300ms,ramp=60s,ramp_min=20";
  char fail_url[512], ok_url[512];
  snprintf(fail_url, sizeof fail_url, "%s", url(s, "/status/503"));
  snprintf(ok_url, sizeof ok_url, "%s", url(s, "/items/7"));
  run_result r;
  for (int i = 0; i < 2; i++) {
    RUN(&r, "call", "--state", seg, "--state-dir", dir, "--breaker", spec, fail_url);
    assert_exit(&r, 6);
    run_result_free(&r);
  }
  int64_t opened = mono_ms();
  assert_int_equal(resil_fixture_attempts(s->f, "status"), 2);

  /* the probe with --retry 3 against the failing route: one attempt */
  while (mono_ms() - opened < 350) usleep(10000);
  RUN(&r, "call", "--state", seg, "--state-dir", dir, "--breaker", spec, "--retry", "3", "-v",
      fail_url);
  assert_exit(&r, 6);
  assert_contains(r.err, "stop: RECOVERING (not retried: the --breaker is recovering");
  run_result_free(&r);
  assert_int_equal(resil_fixture_attempts(s->f, "status"), 3);
  opened = mono_ms();

  /* a succeeding probe closes it into the ramp */
  while (mono_ms() - opened < 350) usleep(10000);
  RUN(&r, "call", "--state", seg, "--state-dir", dir, "--breaker", spec, ok_url);
  assert_exit(&r, 0);
  run_result_free(&r);
  RUN(&r, "state", "show", seg, "--dir", dir);
  assert_exit(&r, 0);
  assert_contains(r.out, ": CLOSED for ");
  assert_contains(r.out, ", ramping: 20% of calls admitted");
  run_result_free(&r);
  int made = 0, refused = 0;
  for (int i = 0; i < 10; i++) {
    RUN(&r, "call", "--state", seg, "--state-dir", dir, "--breaker", spec, ok_url);
    if (r.status == 7) {
      assert_contains(r.err, "REJECTED(recovering) after 0 attempts");
      refused++;
    } else {
      assert_exit(&r, 0);
      made++;
    }
    run_result_free(&r);
  }
  print_message("ramp 20%%: made %d of 10 invocations, refused %d\n", made, refused);
  /* 2 on the curve; 4 only if the 10 took 24 s (share 0.4 by then) */
  assert_true(made >= 1 && made <= 4);
  assert_int_equal(resil_fixture_attempts(s->f, "items"), 1 + made);

  /* retries last during the ramp, then retries during recovery */
  refused = RUN_ADMITTED(&r, "call", "--state", seg, "--state-dir", dir, "--breaker", spec,
                         "--retry", "3", "-v", fail_url);
  assert_exit(&r, 6);
  assert_contains(r.err, "stop: RECOVERING");
  run_result_free(&r);
  assert_int_equal(resil_fixture_attempts(s->f, "status"), 4);
  refused = RUN_ADMITTED(&r, "call", "--state", seg, "--state-dir", dir, "--breaker", spec,
                         "--retry", "3", "--backoff", "fixed:0", "--retry-during-recovery", "-v",
                         fail_url);
  assert_exit(&r, 6);
  assert_contains(r.err, "stop: MAX_ATTEMPTS");
  run_result_free(&r);
  assert_int_equal(resil_fixture_attempts(s->f, "status"), 7);
  /* two failures in the window of 2: open again, the ramp over */
  RUN(&r, "state", "show", seg, "--dir", dir);
  assert_contains(r.out, ": OPEN for ");
  run_result_free(&r);

  /* usage errors: the option and the key, the breaker's message */
  static const char *const bad_specs[][2] = {
      {"ramp=500us", "--breaker: ramp: must be 0 (no ramp) or at least 1 ms, got 500 us"},
      {"ramp=soon", "--breaker: ramp: expected a duration"},
      {"ramp=2s,ramp_min=0", "--breaker: ramp_min: must be 1..100, got 0"},
      {"ramp=2s,ramp_min=101", "--breaker: ramp_min: must be 1..100, got 101"},
      {"ramp=2s,ramp_min=x", "--breaker: ramp_min: expected a whole number (percent)"},
      {"ramp=2s,ramp_aggression=0",
       "--breaker: ramp_aggression: must be finite and greater than 0, got 0"},
      {"ramp_aggression=inf", "--breaker: ramp_aggression: must be finite and greater than 0"},
      {"ramp_aggression=fast", "--breaker: ramp_aggression: expected a number, got 'fast'"},
      {"ramp_max=5", "--breaker: unknown key 'ramp_max'"},
  };
  for (size_t i = 0; i < sizeof bad_specs / sizeof bad_specs[0]; i++) {
    RUN(&r, "call", "--state", "absent", "--state-dir", dir, "--breaker", bad_specs[i][0], ok_url);
    assert_exit(&r, 2);
    assert_contains(r.err, bad_specs[i][1]);
    assert_int_equal(count(r.err, "\n"), 1);
    run_result_free(&r);
  }
  assert_int_equal(files_in(dir), 1); /* no segment "absent" */
  RUN(&r, "call", "--retry", "3", "--retry-during-recovery", ok_url);
  assert_exit(&r, 2);
  assert_contains(r.err, "--retry-during-recovery: needs --breaker SPEC");
  run_result_free(&r);
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  assert_int_equal(system(cmd), 0);
}

static void call_help_exits_0_and_documents_the_exit_codes(void **state) {
  (void)state;
  run_result r;
  RUN(&r, "call", "--help");
  assert_exit(&r, 0);
  assert_contains(r.out, "usage: resil call [OPTIONS] URL");
  assert_contains(r.out, "--retry N");
  assert_contains(r.out, "--retry 3\n                          makes at most 3 calls");
  assert_contains(r.out, "--instance BASE_URL ");
  assert_contains(r.out, "--resolve ");
  assert_contains(r.out, "--balance p2c|round_robin");
  assert_contains(r.out, "Exit status:");
  for (int code = 0; code <= 8; code++) {
    char line[8];
    snprintf(line, sizeof line, "\n  %d  ", code);
    assert_contains(r.out, line);
  }
  assert_int_equal(r.err_len, 0);
  run_result_free(&r);
  RUN(&r, "--help");
  assert_exit(&r, 0);
  assert_contains(r.out, "  call ");
  run_result_free(&r);
}

/* ---- hostile edges ----------------------------------------------------------- */

static void call_with_stdin_or_stdout_closed_exits_1_and_sends_nothing(void **state) {
  cli_state *s = *state;
  run_result r;
  run_opts ro = {.stdin_fd = -1, .close_stdout = 1};
  run_resil_opts(&r, &ro, (const char *const[]){"call", "-d", "x", url(s, "/echo"), NULL});
  assert_exit(&r, 1);
  assert_contains(r.err, "file descriptor 1 (stdout) is closed");
  assert_int_equal(resil_fixture_attempts(s->f, "echo"), 0);
  run_result_free(&r);
  run_opts ro0 = {.stdin_fd = -1, .close_stdin = 1};
  run_resil_opts(&r, &ro0, (const char *const[]){"call", url(s, "/items/1"), NULL});
  assert_exit(&r, 1);
  assert_contains(r.err, "file descriptor 0 (stdin) is closed");
  assert_int_equal(r.out_len, 0);
  assert_int_equal(resil_fixture_attempts(s->f, "items"), 0);
  run_result_free(&r);
}

static void call_location_past_the_redirect_limit_exits_8(void **state) {
  cli_state *s = *state;
  run_result r;
  RUN(&r, "call", "-L", url(s, "/redirect/5"));
  assert_exit(&r, 0);
  assert_string_equal(r.out, "{\"hops_done\":true}");
  run_result_free(&r);
  RUN(&r, "call", "-L", url(s, "/redirect/6"));
  assert_exit(&r, 8);
  assert_contains(r.err, "-L: still a 302 redirect after 5 hops");
  assert_int_equal(count(r.err, "\n"), 1);
  run_result_free(&r);
  /* Without -L a redirect is the answer, as before. */
  RUN(&r, "call", url(s, "/redirect/6"));
  assert_exit(&r, 0);
  run_result_free(&r);
}

static void call_max_body_refuses_a_larger_response_body(void **state) {
  cli_state *s = *state;
  run_result r;
  RUN(&r, "call", url(s, "/items/1"));
  assert_exit(&r, 0);
  size_t full = r.out_len;
  assert_true(full > 10);
  run_result_free(&r);
  char exact[32];
  snprintf(exact, sizeof exact, "%zu", full);
  RUN(&r, "call", "--max-body", exact, url(s, "/items/1"));
  assert_exit(&r, 0);
  assert_int_equal(r.out_len, full);
  run_result_free(&r);
  snprintf(exact, sizeof exact, "%zu", full - 1);
  RUN(&r, "call", "--max-body", exact, url(s, "/items/1"));
  assert_exit(&r, 4);
  assert_int_equal(r.out_len, 0);
  assert_contains(r.err, "larger than");
  assert_contains(r.err, "response body over the size limit");
  run_result_free(&r);
}

/* A sparse file of `size` bytes. */
static void sparse_file(char *path, size_t n, off_t size) {
  snprintf(path, n, "/tmp/resil-cli-big-XXXXXX");
  int fd = mkstemp(path);
  assert_true(fd >= 0);
  assert_int_equal(ftruncate(fd, size), 0);
  close(fd);
}

#define GIB ((off_t)1 << 30)

static void call_data_file_limit_is_exactly_1_gib_checked_before_reading(void **state) {
  (void)state;
  char path[64], arg[80];
  run_result r;
  /* 1 GiB + 1: refused from its size, without reading it (the child never
   * grows near 1 GiB). */
  sparse_file(path, sizeof path, GIB + 1);
  snprintf(arg, sizeof arg, "@%s", path);
  run_opts ro = {.stdin_fd = -1};
  run_resil_opts(&r, &ro, (const char *const[]){"call", "-d", arg, "http://127.0.0.1:9/", NULL});
  assert_exit(&r, 2);
  assert_contains(r.err, "-d: ");
  assert_contains(r.err, "larger than 1 GiB");
  if (ro.maxrss_kib > 256 * 1024) fail_msg("the child grew to %ld KiB: it read the file", ro.maxrss_kib);
  run_result_free(&r);
  /* Exactly 1 GiB: accepted (the error is then about the URL that follows). */
  assert_int_equal(truncate(path, GIB), 0);
  RUN(&r, "call", "-d", arg, "ftp://127.0.0.1/");
  assert_exit(&r, 2);
  assert_contains(r.err, "URL: ");
  assert_null(strstr(r.err, "-d"));
  run_result_free(&r);
  unlink(path);
}

typedef struct feeder {
  int fd;
  size_t total; /* bytes to write, then close; 0: until the reader goes away */
  size_t written;
} feeder;

static void *feed(void *u) {
  feeder *f = u;
  static char buf[1 << 16];
  for (;;) {
    size_t want = sizeof buf;
    if (f->total && f->total - f->written < want) want = f->total - f->written;
    if (f->total && want == 0) break;
    ssize_t n = write(f->fd, buf, want);
    if (n <= 0) break;
    f->written += (size_t)n;
  }
  close(f->fd);
  return NULL;
}

/* `resil call -d @- URL` with stdin a pipe fed `total` bytes (0: endless). */
static void run_with_pipe(run_result *r, feeder *fd, size_t total, const char *u) {
  int p[2];
  /* Close-on-exec: the child must not hold the write end itself, or it
   * would never see the end of its input. */
  assert_int_equal(pipe2(p, O_CLOEXEC), 0);
  signal(SIGPIPE, SIG_IGN);
  fd->fd = p[1];
  fd->total = total;
  fd->written = 0;
  pthread_t th;
  assert_int_equal(pthread_create(&th, NULL, feed, fd), 0);
  run_opts ro = {.stdin_fd = p[0]};
  run_resil_opts(r, &ro, (const char *const[]){"call", "-d", "@-", u, NULL});
  close(p[0]);
  pthread_join(th, NULL);
}

static void call_data_from_a_pipe_is_limited_to_exactly_1_gib(void **state) {
  (void)state;
  run_result r;
  feeder fd;
  /* Endless: it stops reading one byte past the limit (the pipe holds a
   * little more) and refuses. */
  run_with_pipe(&r, &fd, 0, "http://127.0.0.1:9/");
  assert_exit(&r, 2);
  assert_contains(r.err, "-d: 'standard input' is larger than 1 GiB");
  assert_true(fd.written > (size_t)GIB);
  assert_true(fd.written < (size_t)GIB + (16u << 20));
  run_result_free(&r);
  /* Exactly 1 GiB: accepted (the error is then about the URL). */
  run_with_pipe(&r, &fd, (size_t)GIB, "ftp://127.0.0.1/");
  assert_int_equal(fd.written, (size_t)GIB);
  assert_exit(&r, 2);
  assert_contains(r.err, "URL: ");
  assert_null(strstr(r.err, "-d"));
  run_result_free(&r);
}

static void call_error_messages_quote_no_secret(void **state) {
  cli_state *s = *state;
  char longq[9300];
  int n = snprintf(longq, sizeof longq, "%s/items/1?access_token=S-LONGQ&", resil_fixture_url(s->f));
  memset(longq + n, 'a', sizeof longq - (size_t)n - 1);
  longq[sizeof longq - 1] = '\0';
  struct {
    const char *args[6];
  } cases[] = {
      {{"-H", "Authorization Bearer S-NOCOLON", "http://127.0.0.1:9/"}},
      {{"-H", "X Auth: S-BADNAME", "http://127.0.0.1:9/"}},
      {{"-H", "Authorization: S-CRLF\r\nX: y", "http://127.0.0.1:9/"}},
      {{"htp://user:S-USERINFO@127.0.0.1/"}},
      {{"http://user:S-TWICE1@127.0.0.1/", "http://user:S-TWICE2@127.0.0.1/"}},
      {{longq}},
  };
  const char *secrets[] = {"S-NOCOLON", "S-BADNAME", "S-CRLF", "S-USERINFO", "S-TWICE", "S-LONGQ"};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    const char *argv[8] = {"call"};
    size_t k = 1;
    for (size_t j = 0; j < 6 && cases[i].args[j]; j++) argv[k++] = cases[i].args[j];
    argv[k] = NULL;
    run_result r;
    run_resil(&r, NULL, argv);
    if (r.status != 2) fail_msg("case %zu: exit %d, stderr %s", i, r.status, r.err);
    if (strstr(r.err, secrets[i])) fail_msg("case %zu leaked %s: %s", i, secrets[i], r.err);
    run_result_free(&r);
  }
  assert_int_equal(resil_fixture_attempts(s->f, "items"), 0);
}

/* ---- resil describe -------------------------------------------------------- */

static void describe_prints_the_nesting_and_warns_about_traps(void **state) {
  (void)state;
  run_result r;
  RUN(&r, "describe", "--order", "retry,breaker", "--retries", "3");
  assert_exit(&r, 1);
  assert_contains(r.out, "Retry(Breaker(call))\n");
  /* A retry outside the breaker is the recommended order: a note. */
  assert_contains(r.out, "note: retry \"retry\" is outside breaker");
  assert_null(strstr(r.out, "warning: retry \"retry\" is outside"));
  assert_contains(r.out, "warning: retry \"retry\" runs without a total deadline");
  assert_contains(r.out, "3 physical attempts");
  run_result_free(&r);

  RUN(&r, "describe", "--order", "breaker,retry", "--retries", "3", "--deadline", "5000");
  assert_exit(&r, 0);
  assert_contains(r.out, "Breaker(Retry(call))\n");
  assert_null(strstr(r.out, "warning"));
  run_result_free(&r);

  RUN(&r, "describe", "--order", "retry,bogus");
  assert_exit(&r, 2);
  assert_int_equal(count(r.err, "\n"), 1);
  assert_contains(r.err, "--order");
  run_result_free(&r);
}

/* The recommended order with a deadline longer than the attempt timeout
 * has no trap: no warning, exit 0. */
static void describe_recommended_order_prints_no_warning(void **state) {
  (void)state;
  run_result r;
  RUN(&r, "describe", "--deadline", "5000");
  assert_exit(&r, 0);
  assert_contains(r.out, "Retry(Breaker(RateLimiter(TimeLimiter(Bulkhead(call)))))\n");
  assert_contains(r.out, "note: ");
  assert_null(strstr(r.out, "warning"));
  run_result_free(&r);
  /* The real traps still warn: a timeout longer than the deadline, nested
   * retries. */
  RUN(&r, "describe", "--timeout", "3000", "--deadline", "2000");
  assert_exit(&r, 1);
  assert_contains(r.out, "warning: time limiter");
  run_result_free(&r);
  RUN(&r, "describe", "--order", "retry,retry", "--retries", "2,3", "--deadline", "9000");
  assert_exit(&r, 1);
  assert_contains(r.out, "warning: nested retries multiply: up to 6 physical attempts");
  run_result_free(&r);
}

/* Numbers out of range are refused with exit 2 and a message naming the
 * argument, never wrapped (4294967298 became 2) or clamped (-1 became 0). */
static void describe_refuses_out_of_range_numbers(void **state) {
  (void)state;
  static const char *const bad_retries[] = {"4294967298", "-1", "0", "1001",
                                            "99999999999999999999", "3,x"};
  for (size_t i = 0; i < sizeof bad_retries / sizeof bad_retries[0]; i++) {
    run_result r;
    RUN(&r, "describe", "--order", "retry", "--retries", bad_retries[i], "--deadline", "1000");
    assert_exit(&r, 2);
    assert_contains(r.err, "--retries");
    assert_null(strstr(r.out, "physical attempts"));
    run_result_free(&r);
  }
  run_result r;
  RUN(&r, "describe", "--order", "retry", "--retries", "3,4");
  assert_exit(&r, 2);
  assert_contains(r.err, "--retries");
  run_result_free(&r);
  static const char *const ms_args[] = {"--retry-wait", "--timeout", "--deadline"};
  for (size_t i = 0; i < 3; i++) {
    RUN(&r, "describe", ms_args[i], "-1");
    assert_exit(&r, 2);
    assert_contains(r.err, ms_args[i]);
    run_result_free(&r);
    RUN(&r, "describe", ms_args[i], "4294967298");
    assert_exit(&r, 2);
    assert_contains(r.err, ms_args[i]);
    run_result_free(&r);
  }
  /* The largest accepted count works. */
  RUN(&r, "describe", "--order", "retry", "--retries", "1000", "--retry-wait", "0",
      "--deadline", "1000");
  assert_exit(&r, 0);
  assert_contains(r.out, "1000 physical attempts");
  run_result_free(&r);
}

/* The worst case never exceeds the deadline, and says so. */
static void describe_worst_case_respects_the_deadline(void **state) {
  (void)state;
  run_result r;
  /* 3 x 1000 ms + 2 x 500 ms = 4 s computed, 2 s deadline. */
  RUN(&r, "describe", "--order", "retry,timelimiter", "--retries", "3", "--deadline", "2000",
      "--timeout", "1000");
  assert_exit(&r, 0);
  assert_contains(r.out, "3 physical attempts, 2.000 s: the deadline");
  assert_contains(r.out, "computed 4.000 s");
  run_result_free(&r);
  /* Within the deadline, the computed time stands. */
  RUN(&r, "describe", "--order", "retry,timelimiter", "--retries", "2", "--deadline", "9000",
      "--timeout", "1000");
  assert_exit(&r, 0);
  assert_contains(r.out, "2 physical attempts, 2.500 s (2 x 1000 ms per attempt + 500 ms "
                         "backoff, within the deadline)");
  run_result_free(&r);
}

/* A hedge layer: described with its unit and worst case, counted in the
 * amplification (attempts multiply by 1 + hedges, the time adds the hedge
 * delay), and out-of-range hedge counts refused. */
static void describe_includes_hedges_in_the_worst_case(void **state) {
  (void)state;
  run_result r;
  RUN(&r, "describe", "--order", "retry,hedge,timelimiter", "--retries", "3", "--hedges", "2",
      "--hedge-delay", "50", "--deadline", "10000");
  assert_exit(&r, 1);
  assert_contains(r.out, "Retry(Hedge(TimeLimiter(call)))\n");
  assert_contains(r.out, "Hedge \"hedge\": observes attempts of the retry outside it");
  assert_contains(r.out, "up to 2 hedges, each after at most 50 ms; worst case 3 attempts");
  assert_contains(r.out, "note: hedge \"hedge\": resil_chain_run passes calls through it "
                         "unhedged");
  assert_contains(r.out, "warning: retries and hedges multiply: up to 9 physical attempts");
  /* 3 serial x 1000 ms + 2 x 500 ms backoff + 3 runs x 2 x 50 ms. */
  assert_contains(r.out, "worst case per logical call: 9 physical attempts (3 one after "
                         "another, hedges in parallel), 4.300 s (3 x 1000 ms per attempt + "
                         "1000 ms backoff + 300 ms hedge delay, within the deadline)");
  run_result_free(&r);
  /* A hedge alone is no trap. */
  RUN(&r, "describe", "--order", "hedge,timelimiter", "--deadline", "5000");
  assert_exit(&r, 0);
  assert_contains(r.out, "up to 1 hedge, each after at most 100 ms");
  assert_contains(r.out, "2 physical attempts (1 one after another, hedges in parallel), "
                         "1.100 s");
  run_result_free(&r);
  static const char *const bad[] = {"0", "17", "-1", "x", "4294967298"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    RUN(&r, "describe", "--order", "hedge", "--hedges", bad[i]);
    assert_exit(&r, 2);
    assert_contains(r.err, "--hedges");
    run_result_free(&r);
  }
  RUN(&r, "describe", "--order", "hedge", "--hedge-delay", "-5");
  assert_exit(&r, 2);
  assert_contains(r.err, "--hedge-delay");
  run_result_free(&r);
}

/* `resil state show` on a shared breaker ramping after recovery (DESIGN
 * §2.9): CLOSED, the share admitted, the ramp's refusals. The breaker is
 * made here, in the test process, with a 60 s ramp from 10 %: it opens at
 * creation (1 ms wait), one healthy probe closes it into the ramp, and 20
 * calls at about 10 % are mostly refused. */
static void state_show_describes_a_ramping_breaker(void **state) {
  (void)state;
  if (!getenv("RESIL_BIN")) skip();
  char dir[] = "/tmp/resil-cli-ramp-XXXXXX";
  assert_non_null(mkdtemp(dir));
  char seg[32];
  snprintf(seg, sizeof seg, "r%ld", (long)getpid());
  resil_shared_config sc;
  resil_shared_config_init(&sc);
  sc.name = seg;
  sc.dir = dir;
  resil_shared *sh = NULL;
  resil_error err;
  assert_status(RESIL_OK, resil_shared_open(&sc, &sh, &err));
  resil_breaker_config bc;
  resil_breaker_config_init(&bc);
  bc.name = "payments";
  bc.shared = sh;
  bc.initial_state = RESIL_BREAKER_OPEN;
  bc.open_wait_ns = MS(1);
  bc.half_open_permitted_calls = 1;
  bc.ramp_duration_ns = RESIL_S(60);
  resil_breaker *br = NULL;
  assert_status(RESIL_OK, resil_breaker_new(&bc, &br, &err));
  usleep(5000);
  resil_breaker_permit p;
  assert_int_equal(RESIL_DECISION_GO, resil_breaker_try_acquire(br, &p));
  resil_outcome ok = resil_outcome_ok();
  assert_status(RESIL_OK, resil_breaker_record(br, &p, &ok, 0));
  int refused = 0;
  for (int i = 0; i < 20; i++) {
    if (resil_breaker_try_acquire(br, &p) == RESIL_DECISION_GO)
      assert_status(RESIL_OK, resil_breaker_release(br, &p));
    else
      refused++;
  }
  assert_true(refused >= 15);
  run_result r;
  RUN(&r, "state", "show", seg, "--dir", dir);
  assert_exit(&r, 0);
  assert_contains(r.out, ": CLOSED for ");
  assert_contains(r.out, ", ramping: 10% of calls admitted, window 0 calls");
  char want[64];
  snprintf(want, sizeof want, " 0 rejected %d refused by a ramp", refused);
  assert_contains(r.out, want);
  run_result_free(&r);
  resil_breaker_free(br);
  resil_shared_close(sh);
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  assert_int_equal(system(cmd), 0);
}

int main(void) {
#define T(f) cmocka_unit_test_setup_teardown(f, setup, teardown)
  const struct CMUnitTest tests[] = {
      T(call_get_prints_the_body_and_exits_0),
      T(call_404_prints_the_body_and_exits_5),
      T(call_503_exits_6_after_one_attempt_by_default),
      T(call_retry_3_makes_3_attempts_on_a_get_503),
      T(call_waits_what_retry_after_asks),
      T(call_post_timeout_is_unknown_exit_4_with_one_effect),
      T(call_post_timeout_without_key_is_not_retried),
      T(call_unsafe_retries_repeat_the_effect_and_warn),
      T(call_idempotency_key_auto_makes_a_post_retry_safe),
      T(call_explicit_idempotency_key_is_sent_as_given),
      T(call_connection_refused_is_not_sent_exit_3),
      T(call_deadline_stops_retries_of_a_slow_get),
      T(call_deadline_refusal_after_not_sent_is_rejected_exit_7),
      T(call_sends_headers_and_the_raw_body_of_a_file),
      T(call_deadline_is_sent_as_the_budget_left),
      T(call_reads_the_body_from_stdin_with_its_content_type),
      T(call_follows_redirects_only_with_location),
      T(call_warns_about_retry_without_deadline_and_long_timeouts),
      T(call_bad_arguments_exit_2_with_one_line_naming_the_argument),
      T(call_too_many_instances_says_the_urls_own_counts),
      T(call_several_instances_retry_moves_past_a_refused_one),
      T(call_resolve_spreads_over_the_names_addresses),
      T(call_instance_lines_redact_the_url),
      T(call_state_rate_is_kept_across_invocations),
      T(call_state_breaker_opens_across_invocations_and_probes_after_the_wait),
      T(call_state_breaker_ramps_after_recovery_and_retries_last),
      T(state_show_describes_a_ramping_breaker),
      T(call_help_exits_0_and_documents_the_exit_codes),
      T(call_with_stdin_or_stdout_closed_exits_1_and_sends_nothing),
      T(call_location_past_the_redirect_limit_exits_8),
      T(call_max_body_refuses_a_larger_response_body),
      T(call_data_file_limit_is_exactly_1_gib_checked_before_reading),
      T(call_data_from_a_pipe_is_limited_to_exactly_1_gib),
      T(call_error_messages_quote_no_secret),
      T(describe_prints_the_nesting_and_warns_about_traps),
      T(describe_recommended_order_prints_no_warning),
      T(describe_refuses_out_of_range_numbers),
      T(describe_worst_case_respects_the_deadline),
      T(describe_includes_hedges_in_the_worst_case),
  };
#undef T
  return cmocka_run_group_tests(tests, NULL, NULL);
}
