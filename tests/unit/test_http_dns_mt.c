/* A resolved name (http.h resolve_instances) behind a real system resolver
 * whose nameserver does not answer, or answers late: creating the client
 * never waits for DNS, a call made before the first lookup ended waits for
 * it within its own time, on the blocking path and on the engine, and
 * `resil config check` / `resil describe --config` look no name up.
 *
 * Each case runs in a child process (this program again, with
 * RESIL_TEST_DNS_CASE set) inside network and mount namespaces of its own
 * (unshare; a user namespace too when not root): /etc/resolv.conf is a
 * temp file whose nameserver is 127.0.0.1 port 53 of the child's own
 * loopback, a UDP socket the child opened. glibc's getaddrinfo reads only
 * /etc/resolv.conf and its resolver calls no interposable function
 * (glibc >= 2.34: libresolv_wrapper cannot redirect it, resolv_wrapper(1)
 * says so), hence the mount namespace. Nothing leaves the child's network
 * namespace. Where namespaces are refused the cases are skipped (77). */
#define _GNU_SOURCE
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdatomic.h>
#include <stdint.h>
#include <errno.h>
#include <fcntl.h>
#include <net/if.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "test_engine_common.h"
#include "test_http_common.h"

#define NAME "svc.resil.test"
#define QNAME "\x03svc\x05resil\x04test"

static const resil_http_endpoint eps[] = {
    RESIL_HTTP_ENDPOINT(.name = "echo", .path = "/echo", .method = RESIL_HTTP_GET)};

/* ---- the child's namespaces and nameserver -------------------------------------- */

/* The failed check, for the parent (stderr is the test's output). */
#define CHECK(cond, code, ...)                                                 \
  do {                                                                         \
    if (!(cond)) {                                                             \
      fprintf(stderr, "dns child: check %d failed: ", code);                  \
      fprintf(stderr, __VA_ARGS__);                                            \
      fprintf(stderr, "\n");                                                   \
      return code;                                                             \
    }                                                                          \
  } while (0)

static int write_file(const char *path, const char *text) {
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return -1;
  size_t n = strlen(text);
  int ok = write(fd, text, n) == (ssize_t)n;
  return close(fd) == 0 && ok ? 0 : -1;
}

/* Network and mount namespaces of the child's own (with a user namespace
 * mapping the caller to root when it is not root): 0, or -1 (refused). */
static int enter_namespaces(void) {
  if (unshare(CLONE_NEWNS | CLONE_NEWNET) == 0) return 0;
  uid_t uid = getuid();
  gid_t gid = getgid();
  if (unshare(CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWNET) != 0) return -1;
  char m[64];
  if (write_file("/proc/self/setgroups", "deny") != 0) return -1;
  snprintf(m, sizeof m, "0 %u 1", (unsigned)uid);
  if (write_file("/proc/self/uid_map", m) != 0) return -1;
  snprintf(m, sizeof m, "0 %u 1", (unsigned)gid);
  return write_file("/proc/self/gid_map", m);
}

/* The new network namespace's loopback, down until set up. */
static int loopback_up(void) {
  int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (s < 0) return -1;
  struct ifreq ifr;
  memset(&ifr, 0, sizeof ifr);
  snprintf(ifr.ifr_name, sizeof ifr.ifr_name, "lo");
  int rc = ioctl(s, SIOCGIFFLAGS, &ifr);
  if (rc == 0) {
    ifr.ifr_flags = (short)(ifr.ifr_flags | IFF_UP | IFF_RUNNING);
    rc = ioctl(s, SIOCSIFFLAGS, &ifr);
  }
  close(s);
  return rc;
}

/* /etc/resolv.conf (and the hosts line of /etc/nsswitch.conf) replaced
 * in this mount namespace by files of dir: the nameserver 127.0.0.1,
 * a 2 s timeout, one attempt (glibc's defaults, 5 s x 2, would only make
 * the old code's wait longer). */
static int point_resolver(const char *dir) {
  if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0) return -1;
  char rc[256], ns[256];
  snprintf(rc, sizeof rc, "%s/resolv.conf", dir);
  snprintf(ns, sizeof ns, "%s/nsswitch.conf", dir);
  if (write_file(rc, "nameserver 127.0.0.1\noptions timeout:2 attempts:1\n") != 0 ||
      write_file(ns, "hosts: files dns\n") != 0)
    return -1;
  if (mount(rc, "/etc/resolv.conf", NULL, MS_BIND, NULL) != 0) return -1;
  if (access("/etc/nsswitch.conf", F_OK) == 0 &&
      mount(ns, "/etc/nsswitch.conf", NULL, MS_BIND, NULL) != 0)
    return -1;
  return 0;
}

/* The nameserver's socket: UDP 127.0.0.1:53. */
static int nameserver_open(void) {
  int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (s < 0) return -1;
  struct sockaddr_in a;
  memset(&a, 0, sizeof a);
  a.sin_family = AF_INET;
  a.sin_port = htons(53);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (bind(s, (struct sockaddr *)&a, sizeof a) != 0) {
    close(s);
    return -1;
  }
  return s;
}

/* A query for NAME on ns within ms: its length (0: none). The sender's
 * address in *from when given. */
static ssize_t query_in(int ns, int ms, unsigned char *buf, size_t cap, struct sockaddr_in *from) {
  struct pollfd p = {.fd = ns, .events = POLLIN};
  int64_t end = mono_ms() + ms;
  for (;;) {
    int64_t left = end - mono_ms();
    if (poll(&p, 1, left > 0 ? (int)left : 0) <= 0) return 0;
    socklen_t fl = sizeof *from;
    struct sockaddr_in tmp;
    ssize_t n = recvfrom(ns, buf, cap, MSG_DONTWAIT, (struct sockaddr *)(from ? from : &tmp),
                         &fl);
    if (n > 12 && memmem(buf, (size_t)n, QNAME, sizeof QNAME - 1)) return n;
    if (left <= 0) return 0;
  }
}

/* The answer to query q (n bytes): 127.0.0.1 for an A question, no record
 * for any other (AAAA), NOERROR. */
static size_t answer_of(const unsigned char *q, size_t n, unsigned char *a) {
  size_t p = 12;
  while (p < n && q[p]) p += (size_t)q[p] + 1;
  p += 5; /* the root label, type and class */
  if (p > n) return 0;
  int is_a = q[p - 4] == 0 && q[p - 3] == 1;
  memcpy(a, q, p);
  a[2] = 0x81; /* QR, RD */
  a[3] = 0x80; /* RA, NOERROR */
  a[4] = 0, a[5] = 1;
  a[6] = 0, a[7] = is_a ? 1 : 0;
  memset(a + 8, 0, 4);
  if (!is_a) return p;
  static const unsigned char rr[] = {0xc0, 0x0c, 0, 1, 0, 1, 0, 0, 0, 60, 0, 4, 127, 0, 0, 1};
  memcpy(a + p, rr, sizeof rr);
  return p + sizeof rr;
}

/* A nameserver that answers every query 200 ms after it came (the queries
 * that came meanwhile at once with it), until stop. */
typedef struct late_ns {
  int fd;
  atomic_int stop;
  atomic_int answered;
  pthread_t th;
} late_ns;

static void *late_main(void *arg) {
  late_ns *l = arg;
  unsigned char q[512], a[600];
  struct sockaddr_in from;
  while (!atomic_load(&l->stop)) {
    ssize_t n = query_in(l->fd, 50, q, sizeof q, &from);
    if (n <= 0) continue;
    sleep_ms(200);
    for (;;) {
      size_t m = answer_of(q, (size_t)n, a);
      if (m) (void)sendto(l->fd, a, m, 0, (struct sockaddr *)&from, sizeof from);
      atomic_fetch_add(&l->answered, 1);
      if ((n = query_in(l->fd, 0, q, sizeof q, &from)) <= 0) break;
    }
  }
  return NULL;
}

static resil_http_client *client_named(uint16_t port, resil_error *err) {
  char base[64];
  snprintf(base, sizeof base, "http://" NAME ":%u", (unsigned)port);
  resil_http_client_config cfg;
  resil_http_client_config_init(&cfg);
  cfg.base_url = base;
  cfg.resolve_instances = 1;
  cfg.resolve_interval_ns = INT64_C(1000000000);
  cfg.connect_timeout_ns = 400 * INT64_C(1000000);
  cfg.endpoints = eps;
  cfg.endpoint_count = 1;
  resil_http_client *c = NULL;
  return resil_http_client_new(&cfg, &c, err) == RESIL_OK ? c : NULL;
}

static resil_ctx ctx_ms(int64_t ms) {
  resil_ctx ctx;
  resil_ctx_init(&ctx);
  if (ms > 0) resil_ctx_set_timeout_ns(&ctx, ms * INT64_C(1000000));
  return ctx;
}

static int is_dns(resil_outcome o) {
  return o.kind == RESIL_NOT_SENT && o.reason == RESIL_REASON_DNS;
}

/* Signals a token 100 ms after it starts (a thread of its own). */
static void *cancel_later(void *arg) {
  sleep_ms(100);
  resil_cancel_signal(arg);
  return NULL;
}

/* One engine call on c, deadline ms (0 none), its ctx's cancel token
 * signalled after 100 ms when cancel is given: its outcome and duration. */
static resil_outcome engine_call(resil_http_client *c, int64_t ms, resil_cancel *cancel,
                                 int *status, int64_t *took) {
  static test_loop l;
  tl_init(&l);
  resil_engine *e = engine_on(&l, c);
  done_rec *d = rec_new();
  resil_ctx ctx = ctx_ms(ms);
  ctx.cancel = cancel;
  pthread_t th;
  if (cancel && pthread_create(&th, NULL, cancel_later, cancel) != 0) cancel = NULL;
  int64_t t = mono_ms();
  resil_outcome o = resil_outcome_make(RESIL_NOT_SENT, RESIL_REASON_LOCAL_ERROR);
  *status = -1;
  if (submit(e, d, 0, "echo", NULL, NULL, &ctx, NULL) == RESIL_OK &&
      tl_run_until(&l, &d->done, 1, 10000)) {
    o = d->o[0];
    *status = d->status[0];
    *took = d->at_ms[0] - t;
  }
  if (cancel) pthread_join(th, NULL);
  resil_engine_free(e);
  tl_close(&l);
  return o;
}

/* ---- the cases (in the child) ------------------------------------------------------ */

/* The nameserver never answers. */
static int case_silent(int ns) {
  resil_fixture *f = fx_start();
  uint16_t port = resil_fixture_port(f);
  resil_error err;
  int64_t t = mono_ms();
  resil_http_client *c = client_named(port, &err);
  int64_t took = mono_ms() - t;
  CHECK(c, 1, "client: %s", err.msg);
  fprintf(stderr, "dns child: resil_http_client_new took %lld ms\n", (long long)took);
  CHECK(took < 200, 2, "resil_http_client_new took %lld ms (it must not wait for DNS)",
        (long long)took);
  /* The resolver thread asks the nameserver: the setup works. */
  unsigned char q[512];
  CHECK(query_in(ns, 1000, q, sizeof q, NULL) > 0, 3, "no query reached the nameserver");
  /* A call before any answer: NOT_SENT(DNS) at its deadline. */
  resil_ctx ctx = ctx_ms(300);
  resil_http_response *r = NULL;
  t = mono_ms();
  resil_outcome o = resil_http_call(c, "echo", NULL, NULL, &ctx, &r);
  took = mono_ms() - t;
  fprintf(stderr, "dns child: blocking call, deadline 300 ms: %s(%s) after %lld ms: %s\n",
          resil_outcome_kind_name(o.kind), resil_reason_name(o.reason), (long long)took,
          r ? resil_http_response_error(r) : "");
  CHECK(is_dns(o), 4, "the call ended %s(%s), not NOT_SENT(DNS)",
        resil_outcome_kind_name(o.kind), resil_reason_name(o.reason));
  CHECK(took >= 280 && took < 1000, 5, "the call took %lld ms, not its 300 ms deadline",
        (long long)took);
  CHECK(r && strstr(resil_http_response_error(r), "first lookup"), 6, "no reason given");
  resil_http_response_free(r);
  /* Without a deadline: the connect timeout (400 ms) bounds the wait. */
  t = mono_ms();
  o = resil_http_call(c, "echo", NULL, NULL, NULL, NULL);
  took = mono_ms() - t;
  fprintf(stderr, "dns child: blocking call, no deadline: %s(%s) after %lld ms\n",
          resil_outcome_kind_name(o.kind), resil_reason_name(o.reason), (long long)took);
  CHECK(is_dns(o) && took >= 380 && took < 1100, 7, "no deadline: %s after %lld ms",
        resil_outcome_kind_name(o.kind), (long long)took);
  /* The engine: the call waits in the engine, the loop goes on. */
  int status = 0;
  took = -1;
  o = engine_call(c, 300, NULL, &status, &took);
  fprintf(stderr, "dns child: engine call, deadline 300 ms: %s(%s) after %lld ms\n",
          resil_outcome_kind_name(o.kind), resil_reason_name(o.reason), (long long)took);
  CHECK(is_dns(o), 8, "engine: %s(%s), not NOT_SENT(DNS)", resil_outcome_kind_name(o.kind),
        resil_reason_name(o.reason));
  CHECK(took >= 280 && took < 1000, 9, "engine: %lld ms, not its 300 ms deadline",
        (long long)took);
  /* A cancel ends the wait at once, on both paths. */
  resil_cancel *tok = NULL;
  CHECK(resil_cancel_new(&tok) == RESIL_OK, 13, "token");
  pthread_t th;
  CHECK(pthread_create(&th, NULL, cancel_later, tok) == 0, 14, "thread");
  ctx = ctx_ms(3000);
  ctx.cancel = tok;
  t = mono_ms();
  o = resil_http_call(c, "echo", NULL, NULL, &ctx, NULL);
  took = mono_ms() - t;
  pthread_join(th, NULL);
  resil_cancel_free(tok);
  fprintf(stderr, "dns child: blocking call cancelled after 100 ms: %s(%s) after %lld ms\n",
          resil_outcome_kind_name(o.kind), resil_reason_name(o.reason), (long long)took);
  CHECK(o.kind == RESIL_NOT_SENT && o.reason == RESIL_REASON_CANCELLED && took >= 90 &&
            took < 400,
        15, "cancelled: %s(%s) after %lld ms", resil_outcome_kind_name(o.kind),
        resil_reason_name(o.reason), (long long)took);
  CHECK(resil_cancel_new(&tok) == RESIL_OK, 16, "token");
  o = engine_call(c, 3000, tok, &status, &took);
  resil_cancel_free(tok);
  fprintf(stderr, "dns child: engine call cancelled after 100 ms: %s(%s) after %lld ms\n",
          resil_outcome_kind_name(o.kind), resil_reason_name(o.reason), (long long)took);
  CHECK(o.kind == RESIL_NOT_SENT && o.reason == RESIL_REASON_CANCELLED && took >= 90 &&
            took < 400,
        17, "engine cancelled: %s(%s) after %lld ms", resil_outcome_kind_name(o.kind),
        resil_reason_name(o.reason), (long long)took);
  CHECK(resil_http_client_instance_count(c) == 0, 10, "an instance without an answer");
  t = mono_ms();
  resil_http_client_free(c);
  fprintf(stderr, "dns child: resil_http_client_free took %lld ms (a lookup in progress)\n",
          (long long)(mono_ms() - t));
  resil_fixture_stop(f);
  return 0;
}

/* The nameserver answers 200 ms late: a call made at once waits for the
 * first lookup and reaches the address, blocking and on the engine. */
static int case_late(int ns) {
  late_ns l = {.fd = ns};
  atomic_init(&l.stop, 0);
  atomic_init(&l.answered, 0);
  if (pthread_create(&l.th, NULL, late_main, &l) != 0) return 20;
  resil_fixture *f = fx_start();
  uint16_t port = resil_fixture_port(f);
  resil_error err;
  int rc = 0;
  for (int engine = 0; engine < 2 && !rc; engine++) {
    int64_t t = mono_ms();
    resil_http_client *c = client_named(port, &err);
    int64_t made = mono_ms() - t;
    if (!c) {
      fprintf(stderr, "dns child: client: %s\n", err.msg);
      rc = 21;
      break;
    }
    resil_outcome o;
    int status = -1;
    int64_t took = -1;
    if (engine) {
      o = engine_call(c, 3000, NULL, &status, &took);
      took += made;
    } else {
      resil_ctx ctx = ctx_ms(3000);
      resil_http_response *r = NULL;
      o = resil_http_call(c, "echo", NULL, NULL, &ctx, &r);
      took = mono_ms() - t;
      status = r ? resil_http_response_status(r) : -1;
      resil_http_response_free(r);
    }
    fprintf(stderr, "dns child: %s call made at once: %s %d after %lld ms (creation %lld ms)\n",
            engine ? "engine" : "blocking", resil_outcome_kind_name(o.kind), status,
            (long long)took, (long long)made);
    if (made >= 200) rc = 22;
    else if (!resil_outcome_is_success(&o) || status != 200) rc = 23;
    else if (took < 150 || took > 2000) rc = 24; /* it waited for the answer */
    else if (resil_http_client_instance_count(c) != 1) rc = 25;
    if (rc) fprintf(stderr, "dns child: check %d failed\n", rc);
    resil_http_client_free(c);
  }
  if (!rc && resil_fixture_attempts(f, "echo") != 2) rc = 26;
  atomic_store(&l.stop, 1);
  pthread_join(l.th, NULL);
  resil_fixture_stop(f);
  return rc;
}

/* Runs argv (the tool), output to out; its exit status, and its duration
 * in *took. */
static int run_tool(char *const argv[], const char *out, int64_t *took) {
  int64_t t = mono_ms();
  pid_t pid = fork();
  if (pid < 0) return -1;
  if (pid == 0) {
    int fd = open(out, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) {
      dup2(fd, 1);
      dup2(fd, 2);
    }
    execv(argv[0], argv);
    _exit(127);
  }
  int st = 0;
  waitpid(pid, &st, 0);
  *took = mono_ms() - t;
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
}

/* `resil config check` and `resil describe --config` on a file with a
 * resolved name: quick, and not one query. */
static int case_config(int ns, const char *dir) {
  const char *bin = getenv("RESIL_BIN");
  if (!bin || !*bin) return 77;
  char file[256], out[256];
  snprintf(file, sizeof file, "%s/c.yaml", dir);
  snprintf(out, sizeof out, "%s/out", dir);
  CHECK(write_file(file, "http_client:\n"
                         "  instances:\n"
                         "    api:\n"
                         "      base_url: http://" NAME ":8080\n"
                         "      resolve_instances: true\n"
                         "      endpoints:\n"
                         "        get: {path: /x}\n"
                         "        own: {path: /y, base_url: \"http://" NAME
                         ":8081\", resolve_instances: true}\n") == 0,
        30, "cannot write %s", file);
  unsigned char q[512];
  int64_t took = 0;
  char *check[] = {(char *)bin, "config", "check", file, NULL};
  int st = run_tool(check, out, &took);
  fprintf(stderr, "dns child: resil config check: exit %d after %lld ms\n", st, (long long)took);
  CHECK(st == 0, 31, "resil config check exited %d", st);
  CHECK(took < 1000, 32, "resil config check took %lld ms", (long long)took);
  CHECK(query_in(ns, 0, q, sizeof q, NULL) == 0, 33, "resil config check looked the name up");
  char *desc[] = {(char *)bin, "describe", "--config", file, NULL};
  st = run_tool(desc, out, &took);
  fprintf(stderr, "dns child: resil describe --config: exit %d after %lld ms\n", st,
          (long long)took);
  CHECK(st == 0, 34, "resil describe exited %d", st);
  CHECK(took < 1000, 35, "resil describe took %lld ms", (long long)took);
  CHECK(query_in(ns, 0, q, sizeof q, NULL) == 0, 36, "resil describe looked the name up");
  char text[4096] = "";
  FILE *fp = fopen(out, "r");
  CHECK(fp, 37, "no output");
  size_t n = fread(text, 1, sizeof text - 1, fp);
  text[n] = '\0';
  fclose(fp);
  CHECK(strstr(text, "http_client api: base_url's name resolved at run time (not looked up "
                     "here), balance p2c\n"),
        38, "describe said:\n%s", text);
  /* The control: a client of this process does ask the same nameserver. */
  resil_error err;
  resil_http_client *c = client_named(8080, &err);
  CHECK(c, 39, "client: %s", err.msg);
  CHECK(query_in(ns, 1000, q, sizeof q, NULL) > 0, 40, "no query from a client (setup)");
  resil_http_client_free(c);
  return 0;
}

static int dns_case(const char *name) {
  char dir[] = "/tmp/resil-dns-XXXXXX";
  if (!mkdtemp(dir)) return 50;
  if (enter_namespaces() != 0 || loopback_up() != 0 || point_resolver(dir) != 0) {
    fprintf(stderr, "dns child: network/mount namespaces refused (%s): skipped\n",
            strerror(errno));
    return 77;
  }
  int ns = nameserver_open();
  if (ns < 0) {
    fprintf(stderr, "dns child: cannot bind 127.0.0.1:53 (%s)\n", strerror(errno));
    return 51;
  }
  int rc = strcmp(name, "silent") == 0 ? case_silent(ns)
           : strcmp(name, "late") == 0 ? case_late(ns)
                                       : case_config(ns, dir);
  close(ns);
  char p[300];
  snprintf(p, sizeof p, "%s/resolv.conf", dir);
  unlink(p);
  snprintf(p, sizeof p, "%s/nsswitch.conf", dir);
  unlink(p);
  snprintf(p, sizeof p, "%s/c.yaml", dir);
  unlink(p);
  snprintf(p, sizeof p, "%s/out", dir);
  unlink(p);
  rmdir(dir);
  return rc;
}

/* ---- the parent ------------------------------------------------------------------- */

static const char *self_path;

static void run_case(const char *name) {
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    setenv("RESIL_TEST_DNS_CASE", name, 1);
    execl(self_path, self_path, (char *)NULL);
    _exit(127);
  }
  int st = 0;
  int64_t end = mono_ms() + 60000;
  pid_t w = 0;
  while ((w = waitpid(pid, &st, WNOHANG)) == 0 && mono_ms() < end) sleep_ms(20);
  if (w == 0) {
    kill(pid, SIGKILL);
    waitpid(pid, &st, 0);
    fail_msg("the %s case did not finish within 60 s", name);
  }
  assert_true(WIFEXITED(st));
  if (WEXITSTATUS(st) == 77) skip();
  assert_int_equal(WEXITSTATUS(st), 0);
}

static void creating_a_client_never_waits_for_a_silent_nameserver(void **state) {
  (void)state;
  run_case("silent");
}

static void a_call_made_at_once_waits_for_the_first_lookup(void **state) {
  (void)state;
  run_case("late");
}

static void config_check_and_describe_look_no_name_up(void **state) {
  (void)state;
  run_case("config");
}

int main(int argc, char **argv) {
  (void)argc;
  self_path = argv[0];
  const char *name = getenv("RESIL_TEST_DNS_CASE");
  if (name) return dns_case(name);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(creating_a_client_never_waits_for_a_silent_nameserver),
      cmocka_unit_test(a_call_made_at_once_waits_for_the_first_lookup),
      cmocka_unit_test(config_check_and_describe_look_no_name_up),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
