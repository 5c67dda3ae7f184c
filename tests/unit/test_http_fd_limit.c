/* A local descriptor limit is not the upstream's failure (outcome.h,
 * LOCAL_RESOURCES): with RLIMIT_NOFILE used up, socket() fails with EMFILE
 * and a call to a live 127.0.0.1 listener ends REJECTED(LOCAL_RESOURCES),
 * not NOT_SENT(CONNECT_REFUSED); a breaker in front of it (minimum_calls 1:
 * one counted failure would open it) stays CLOSED with no failure, and the
 * outcome is safe to repeat. Blocking (resil_http_call) and engine
 * (resil_engine_call) paths, which share transfer.c's classification.
 *
 * Each case runs in a forked child: the limit is lowered and the
 * descriptors are used up there only, never in the test runner. */
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>

#include "test_engine_common.h"

static const resil_http_endpoint ep = {.struct_size = sizeof(resil_http_endpoint),
                                       .name = "get",
                                       .method = RESIL_HTTP_GET,
                                       .path = "/x",
                                       .response_codec = RESIL_HTTP_CODEC_RAW};

/* A listening socket on 127.0.0.1 (never accepted from: a connect to it
 * would succeed, so a failure can only be local). */
static int listen_local(unsigned *port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  assert_true(fd >= 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
  assert_int_equal(listen(fd, 16), 0);
  socklen_t al = sizeof a;
  assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &al), 0);
  *port = ntohs(a.sin_port);
  return fd;
}

/* Lowers the soft RLIMIT_NOFILE to 256 and takes every free descriptor:
 * the next socket() fails with EMFILE. Returns 0, or -1. */
static int use_up_descriptors(void) {
  int fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
  struct rlimit rl;
  if (fd < 0 || getrlimit(RLIMIT_NOFILE, &rl) != 0) return -1;
  if (rl.rlim_cur > 256) rl.rlim_cur = 256;
  if (setrlimit(RLIMIT_NOFILE, &rl) != 0) return -1;
  while (dup(fd) >= 0) {
  }
  return errno == EMFILE ? 0 : -1;
}

static resil_http_client *client_for(unsigned port) {
  char base[64];
  snprintf(base, sizeof base, "http://127.0.0.1:%u", port);
  resil_http_client_config cfg;
  resil_http_client_config_init(&cfg);
  cfg.base_url = base;
  cfg.endpoints = &ep;
  cfg.endpoint_count = 1;
  resil_http_client *c = NULL;
  resil_error err;
  if (resil_http_client_new(&cfg, &c, &err) != RESIL_OK) return NULL;
  return c;
}

static resil_breaker *breaker_of_one(void) {
  resil_breaker_config bc;
  resil_breaker_config_init(&bc);
  bc.window_size = 1;
  bc.minimum_calls = 1;
  resil_breaker *br = NULL;
  return resil_breaker_new(&bc, &br, NULL) == RESIL_OK ? br : NULL;
}

/* The child's verdict: 0 when the outcome and the breaker are as they must
 * be; otherwise a line on stderr and a code naming the first difference. */
static int verdict(resil_breaker *br, resil_outcome o, const char *error) {
  char ob[96];
  resil_outcome_format(&o, ob, sizeof ob);
  resil_breaker_metrics m;
  resil_breaker_get_metrics(br, &m);
  fprintf(stderr, "child: %s (%s); breaker %s, %llu failures\n", ob, error ? error : "-",
          resil_breaker_state_name(resil_breaker_state(br)),
          (unsigned long long)m.total_failures);
  if (o.kind != RESIL_REJECTED || o.reason != RESIL_REASON_LOCAL_RESOURCES) return 10;
  if (resil_outcome_maybe_executed(&o)) return 11;
  if (resil_breaker_state(br) != RESIL_BREAKER_CLOSED) return 12;
  if (m.total_failures != 0 || m.total_calls != 0) return 13;
  if (!error || !strstr(error, "EMFILE")) return 14;
  return 0;
}

static int child_blocking(unsigned port) {
  resil_http_client *c = client_for(port);
  resil_breaker *br = breaker_of_one();
  if (!c || !br) return 2;
  if (use_up_descriptors() != 0) return 3;
  resil_breaker_permit p;
  if (resil_breaker_try_acquire(br, &p) != RESIL_DECISION_GO) return 4;
  resil_http_response *r = NULL;
  resil_outcome o = resil_http_call(c, "get", NULL, NULL, NULL, &r);
  resil_breaker_record(br, &p, &o, 1000);
  return verdict(br, o, r ? resil_http_response_error(r) : NULL);
}

static int child_engine(unsigned port) {
  resil_http_client *c = client_for(port);
  resil_breaker *br = breaker_of_one();
  if (!c || !br) return 2;
  static test_loop l;
  tl_init(&l);
  resil_engine *e = engine_on(&l, c);
  static done_rec d;
  d.loop_thread = pthread_self();
  d.keep_responses = 1;
  resil_engine_policies pol;
  resil_engine_policies_init(&pol);
  pol.breaker = br;
  if (use_up_descriptors() != 0) return 3;
  if (submit(e, &d, 0, "get", NULL, &pol, NULL, NULL) != RESIL_OK) return 4;
  if (!tl_run_until(&l, &d.done, 1, 5000)) return 5;
  return verdict(br, d.o[0], d.keep[0] ? resil_http_response_error(d.keep[0]) : NULL);
}

static void run_in_child(int (*fn)(unsigned)) {
  unsigned port = 0;
  int lfd = listen_local(&port);
  fflush(NULL);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) _exit(fn(port));
  int status = 0;
  assert_int_equal(waitpid(pid, &status, 0), pid);
  close(lfd);
  if (!WIFEXITED(status)) fail_msg("child ended by signal %d", WTERMSIG(status));
  if (WEXITSTATUS(status) != 0) fail_msg("child: check %d failed", WEXITSTATUS(status));
}

static void emfile_is_local_on_the_blocking_path(void **state) {
  (void)state;
  run_in_child(child_blocking);
}

static void emfile_is_local_on_the_engine(void **state) {
  (void)state;
  run_in_child(child_engine);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(emfile_is_local_on_the_blocking_path),
      cmocka_unit_test(emfile_is_local_on_the_engine),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
