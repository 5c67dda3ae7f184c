/* The registry's keys for many instances of an upstream (registry.h "Many
 * instances", http.h, DESIGN §8.4): a client's `instances` and an
 * endpoint's own, balance and the ejection keys load into the client (its
 * instances and their stats, the settings read back), a reload keeps a
 * client whose instances did not change and replaces one whose list did,
 * every bad value is an error at its key, line and column with the range,
 * and the client's instance events reach the attached sink. No server:
 * the ejection case calls two loopback ports nothing listens on. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "test_util.h"

#ifdef RESIL_HAVE_CONFIG
#include <jansson.h>

#include "resil/events.h"
#include "resil/http.h"
#include "resil/registry.h"
#include "resil/resil.h"

static resil_registry *load_ok(const char *yaml) {
  resil_registry *reg = NULL;
  resil_registry_error err;
  resil_registry_error_init(&err);
  if (resil_registry_load_string(yaml, strlen(yaml), "i.yaml", &reg, &err) != RESIL_OK) {
    char msg[1024];
    resil_registry_error_format(&err, msg, sizeof msg);
    fail_msg("%s", msg);
  }
  return reg;
}

static const char *PAY = "http_client:\n"
                         "  instances:\n"
                         "    pay:\n"
                         "      instances: [\"http://127.0.0.1:9001\", \"http://127.0.0.1:9002\",\n"
                         "                  \"http://127.0.0.1:9003\"]\n"
                         "      balance: round_robin\n"
                         "      eject_consecutive: 3\n"
                         "      eject_classes: [not_sent, server_error]\n"
                         "      eject_base: 2s\n"
                         "      eject_max: 20s\n"
                         "      eject_max_percent: 34%\n"
                         "      instance_ramp: 2s\n"
                         "      instance_ramp_min_percent: 20\n"
                         "      instance_ramp_aggression: 1.5\n"
                         "      endpoints:\n"
                         "        create: {method: POST, path: /payments, idempotency_key: send}\n"
                         "        ledger:\n"
                         "          path: /ledger\n"
                         "          instances: [\"http://127.0.0.1:9101\", \"http://127.0.0.1:9102\"]\n";

/* A client of three instances and an endpoint of its own two: five
 * instances, the client's first, the settings as written. */
static void a_client_and_an_endpoint_with_instances_load(void **state) {
  (void)state;
  resil_registry *reg = load_ok(PAY);
  resil_http_client *c = resil_registry_http_client(reg, "pay");
  assert_non_null(c);
  resil_registry_http_balance b;
  assert_status(RESIL_OK, resil_registry_http_client_balance(reg, "pay", &b));
  assert_int_equal(b.struct_size, sizeof b);
  assert_int_equal(b.balance, RESIL_HTTP_BALANCE_ROUND_ROBIN);
  assert_int_equal(b.eject_consecutive, 3);
  assert_int_equal(b.eject_classes,
                   RESIL_CLASS_BIT(RESIL_CLASS_NOT_SENT) | RESIL_CLASS_BIT(RESIL_CLASS_SERVER_ERROR));
  assert_int_equal(b.eject_base_ns, RESIL_MS(2000));
  assert_int_equal(b.eject_max_ns, RESIL_MS(20000));
  assert_int_equal(b.eject_max_percent, 34);
  assert_int_equal(b.resolve_instances, 0);
  assert_int_equal(b.listed_instances, 5);
  assert_status(RESIL_EINVAL, resil_registry_http_client_balance(reg, "nope", &b));
  assert_status(RESIL_EMISUSE, resil_registry_http_client_balance(NULL, "pay", &b));

  assert_int_equal(resil_http_client_instance_count(c), 5);
  static const char *const want[] = {"http://127.0.0.1:9001", "http://127.0.0.1:9002",
                                     "http://127.0.0.1:9003", "http://127.0.0.1:9101",
                                     "http://127.0.0.1:9102"};
  for (size_t i = 0; i < 5; i++) {
    resil_http_instance_stats st;
    assert_status(RESIL_OK, resil_http_client_instance_stats(c, i, &st));
    assert_string_equal(st.instance, want[i]);
    assert_int_equal(st.upstream_index, i < 3 ? 0 : 1);
    if (i >= 3) assert_string_equal(st.upstream, "ledger");
    assert_int_equal(st.state, RESIL_HTTP_INSTANCE_HEALTHY);
    assert_int_equal(st.chosen, 0);
  }
  resil_registry_free(reg);
}

/* The defaults when the file names instances and nothing else. */
static void the_defaults_are_the_clients(void **state) {
  (void)state;
  resil_registry *reg = load_ok("http_client:\n"
                                "  instances:\n"
                                "    two:\n"
                                "      instances: [\"http://127.0.0.1:9001\", "
                                "\"http://127.0.0.1:9002\"]\n"
                                "      endpoints: {get: {path: /x}}\n");
  resil_http_client_config d;
  resil_http_client_config_init(&d);
  resil_registry_http_balance b;
  assert_status(RESIL_OK, resil_registry_http_client_balance(reg, "two", &b));
  assert_int_equal(b.balance, d.balance);
  assert_int_equal(b.eject_consecutive, d.eject_consecutive);
  assert_int_equal(b.eject_classes, d.eject_classes);
  assert_int_equal(b.eject_base_ns, d.eject_base_ns);
  assert_int_equal(b.eject_max_ns, d.eject_max_ns);
  assert_int_equal(b.eject_max_percent, d.eject_max_percent);
  assert_int_equal(b.resolve_interval_ns, d.resolve_interval_ns);
  assert_int_equal(b.instance_ramp_ns, d.instance_ramp_ns);
  assert_int_equal(b.instance_ramp_min_percent, d.instance_ramp_min_percent);
  assert_true(b.instance_ramp_aggression == d.instance_ramp_aggression);
  assert_int_equal(b.listed_instances, 2);
  assert_int_equal(resil_http_client_instance_count(resil_registry_http_client(reg, "two")), 2);
  resil_registry_free(reg);
}

/* registry.h: a client takes `instances` "instead of base_url": an
 * instance's own list replaces a base_url it inherits (a default or base
 * config), and its own base_url replaces an inherited list; both in one
 * mapping stay an error. */
static void an_instances_upstream_replaces_an_inherited_one(void **state) {
  (void)state;
  resil_registry *reg = load_ok("http_client:\n"
                                "  configs:\n"
                                "    default: {base_url: \"http://127.0.0.1:9000\"}\n"
                                "    fleet: {instances: [\"http://127.0.0.1:9001\", "
                                "\"http://127.0.0.1:9002\"]}\n"
                                "  instances:\n"
                                "    one: {endpoints: {get: {path: /x}}}\n"
                                "    two:\n"
                                "      instances: [\"http://127.0.0.1:9001\", "
                                "\"http://127.0.0.1:9002\"]\n"
                                "      endpoints: {get: {path: /x}}\n"
                                "    three: {base_config: fleet, base_url: \"http://127.0.0.1:9003\",\n"
                                "            endpoints: {get: {path: /x}}}\n");
  assert_int_equal(resil_http_client_instance_count(resil_registry_http_client(reg, "one")), 0);
  assert_int_equal(resil_http_client_instance_count(resil_registry_http_client(reg, "two")), 2);
  assert_int_equal(resil_http_client_instance_count(resil_registry_http_client(reg, "three")), 0);
  resil_registry_free(reg);
  const char *both = "http_client:\n"
                     "  instances:\n"
                     "    two:\n"
                     "      base_url: \"http://127.0.0.1:9000\"\n"
                     "      instances: [\"http://127.0.0.1:9001\"]\n"
                     "      endpoints: {get: {path: /x}}\n";
  resil_registry_error err;
  resil_registry_error_init(&err);
  reg = NULL;
  assert_status(RESIL_EINVAL, resil_registry_load_string(both, strlen(both), "i.yaml", &reg, &err));
  assert_string_equal(err.key_path, "http_client.instances.two.instances");
}

/* A reload of the same file keeps the client (its pool, its instances'
 * figures); another list of instances, or an item changed, replaces it. */
static void a_reload_keeps_the_same_instances_and_replaces_others(void **state) {
  (void)state;
  static const char *fmt = "http_client:\n"
                           "  instances:\n"
                           "    two:\n"
                           "      instances: [%s]\n"
                           "      endpoints: {get: {path: /x}}\n";
  char a[256], b[256], c[256];
  snprintf(a, sizeof a, fmt, "\"http://127.0.0.1:9001\", \"http://127.0.0.1:9002\"");
  snprintf(b, sizeof b, fmt, "\"http://127.0.0.1:9002\", \"http://127.0.0.1:9001\"");
  snprintf(c, sizeof c, fmt, "\"http://127.0.0.1:9001\", \"http://127.0.0.1:9002\", "
                             "\"http://127.0.0.1:9003\"");
  resil_registry *reg = load_ok(a);
  resil_http_client *h = resil_registry_http_client(reg, "two");
  resil_registry_reload_stats rs;
  assert_status(RESIL_OK, resil_registry_reload_string(reg, a, strlen(a), "a.yaml", NULL));
  assert_status(RESIL_OK, resil_registry_last_reload(reg, &rs));
  assert_int_equal(rs.kept, 1);
  assert_ptr_equal(resil_registry_http_client(reg, "two"), h);
  assert_status(RESIL_OK, resil_registry_reload_string(reg, b, strlen(b), "b.yaml", NULL));
  assert_status(RESIL_OK, resil_registry_last_reload(reg, &rs));
  assert_int_equal(rs.replaced, 1);
  h = resil_registry_http_client(reg, "two");
  assert_status(RESIL_OK, resil_registry_reload_string(reg, c, strlen(c), "c.yaml", NULL));
  assert_status(RESIL_OK, resil_registry_last_reload(reg, &rs));
  assert_int_equal(rs.replaced, 1);
  assert_ptr_not_equal(resil_registry_http_client(reg, "two"), h);
  resil_registry_free(reg);
}

/* `resil describe --config`: after the chains, a client with several
 * instances is listed with its balance, its ejection settings and each
 * instance (a URL's userinfo redacted, the upstream it belongs to); a
 * client of one base URL is not. */
static void describe_lists_a_clients_instances_and_settings(void **state) {
  (void)state;
  const char *bin = getenv("RESIL_BIN");
  if (!bin || !*bin) skip();
  char dir[] = "/tmp/resil-reginst-XXXXXX";
  assert_non_null(mkdtemp(dir));
  char file[128], out[128], cmd[512];
  snprintf(file, sizeof file, "%s/d.yaml", dir);
  snprintf(out, sizeof out, "%s/out", dir);
  FILE *f = fopen(file, "w");
  assert_non_null(f);
  fputs("retry:\n"
        "  instances:\n"
        "    r: {max_attempts: 2}\n"
        "chain:\n"
        "  instances:\n"
        "    c: {total_timeout: 2s, layers: [{retry: r}]}\n",
        f);
  /* PAY with a password in its first instance's URL */
  char pay[2048];
  snprintf(pay, sizeof pay, "%s", PAY);
  char *p = strstr(pay, "http://127.0.0.1:9001");
  assert_non_null(p);
  fwrite(pay, 1, (size_t)(p - pay), f);
  fprintf(f, "http://u:s3cret@%s", p + strlen("http://"));
  fputs("    one:\n"
        "      base_url: http://127.0.0.1:9\n"
        "      endpoints: {get: {path: /x}}\n"
        "    none:\n"
        "      instances: [\"http://127.0.0.1:9201\", \"http://127.0.0.1:9202\"]\n"
        "      eject_classes: []\n"
        "      endpoints: {get: {path: /x}}\n",
        f);
  assert_int_equal(fclose(f), 0);
  snprintf(cmd, sizeof cmd, "'%s' describe --config '%s' >'%s' 2>&1", bin, file, out);
  int st = system(cmd);
  char text[8192];
  f = fopen(out, "r");
  assert_non_null(f);
  size_t n = fread(text, 1, sizeof text - 1, f);
  text[n] = '\0';
  fclose(f);
  unlink(file);
  unlink(out);
  rmdir(dir);
  if (st != 0) fail_msg("exit %d:\n%s", st, text);
  static const char *const want[] = {
      "chain c (",
      "\nhttp_client pay: 5 instances, balance round_robin\n",
      "  ejection: after 3 consecutive failures (server_error, not_sent), for 2.000 s x its "
      "ejections so far (at most 20.000 s, + 0..10 % jitter); at most 34 % of the instances "
      "out, never the last\n",
      "  back from ejection: ramps from 20 % of the choices to all over 2.000 s (aggression "
      "1.5: faster at first)\n",
      "  instance 0: http://[REDACTED]@127.0.0.1:9001 (the client's)\n",
      "  instance 2: http://127.0.0.1:9003 (the client's)\n",
      "  instance 3: http://127.0.0.1:9101 (endpoint ledger)\n",
      "  instance 4: http://127.0.0.1:9102 (endpoint ledger)\n",
      /* no class counts: nothing ejects (it said "failures ()") */
      "\nhttp_client none: 2 instances, balance p2c\n"
      "  ejection: never (eject_classes empty)\n",
  };
  for (size_t i = 0; i < sizeof want / sizeof *want; i++)
    if (!strstr(text, want[i])) fail_msg("'%s' not in:\n%s", want[i], text);
  assert_null(strstr(text, "s3cret"));
  assert_null(strstr(text, "\nhttp_client one:"));
}

/* ---- errors ---------------------------------------------------------------------- */

typedef struct bad_case {
  const char *lines; /* lines 4.. of the client (before its endpoints) */
  const char *key;   /* the key path after "http_client.instances.api." */
  uint32_t line, column;
  const char *says;  /* a part of the message */
  int has_range;
  int64_t min, max, got;
} bad_case;

#define E(l, k, ln, col, says) {l, k, ln, col, says, 0, 0, 0, 0}
#define R(l, k, ln, col, says, mn, mx, g) {l, k, ln, col, says, 1, mn, mx, g}
#define ONE "      base_url: http://127.0.0.1:9\n"
#define LIST "      instances: [\"http://127.0.0.1:9001\", \"http://127.0.0.1:9002\"]\n"

static void every_bad_value_names_its_key_range_and_line(void **state) {
  (void)state;
  static const bad_case cases[] = {
      /* the registry's own checks: the value's form */
      E(LIST "      balance: p3c\n", "balance", 5, 16, "unknown value 'p3c' (did you mean 'p2c'?)"),
      E(LIST "      balance: least_loaded\n", "balance", 5, 16,
       "expected one of: p2c, round_robin"),
      E(LIST "      eject_consecutive: -1\n", "eject_consecutive", 5, 26,
       "expected a whole number 0..4294967295"),
      E(LIST "      eject_classes: [server_error, bogus]\n", "eject_classes", 5, 37,
       "unknown outcome class 'bogus'"),
      E(LIST "      eject_classes: server_error\n", "eject_classes", 5, 22,
       "expected a list of outcome classes"),
      E(LIST "      eject_base: 10q\n", "eject_base", 5, 19, "10q"),
      E(LIST "      eject_max_percent: half\n", "eject_max_percent", 5, 26,
       "expected a whole number 0..4294967295 (percent)"),
      E(LIST "      resolve_instances: maybe\n", "resolve_instances", 5, 26,
       "expected true or false, got 'maybe'"),
      E(LIST "      resolve_interval: soon\n", "resolve_interval", 5, 25, "soon"),
      E("      instances: http://127.0.0.1:9001\n", "instances", 4, 18,
       "expected a list of base URLs"),
      E("      instances: [\"http://127.0.0.1:9001\", [1]]\n", "instances", 4, 44,
       "item 1: expected a base URL, got a sequence"),
      /* the client's checks, reported at the key (or the list's item) */
      R(LIST "      eject_consecutive: 1001\n", "eject_consecutive", 5, 26, "1000", 0, 1000,
       1001),
      R(LIST "      eject_max_percent: 101\n", "eject_max_percent", 5, 26, "100", 0, 100, 101),
      R(LIST "      eject_base: 0s\n", "eject_base", 5, 19, "eject_base", RESIL_MS(1),
       RESIL_MS(86400000), 0),
      R(LIST "      eject_max: 2d\n", "eject_max", 5, 18, "must be eject_base..1 day", RESIL_MS(30000),
       RESIL_MS(86400000), RESIL_MS(172800000)),
      R(LIST "      eject_base: 20s\n      eject_max: 10s\n", "eject_max", 6, 18,
        "must be eject_base..1 day, got 10 s", RESIL_MS(20000), RESIL_MS(86400000),
        RESIL_MS(10000)),
      R(ONE "      resolve_instances: true\n      resolve_interval: 500ms\n", "resolve_interval",
       6, 25, "resolve_interval", RESIL_MS(1000), RESIL_MS(86400000), RESIL_MS(500)),
      E(LIST "      eject_classes: [success]\n", "eject_classes", 5, 22, "eject_classes"),
      E("      instances: [\"http://127.0.0.1:9001\", \"ftp://127.0.0.1:9002\"]\n",
       "instances[1]", 4, 44, "instances"),
      /* the C API's "(NULL-terminated)" is no help in a file */
      E("      instances: []\n", "instances", 4, 18, "must list 1..64 base URLs, got 0"),
      /* the instance ramp (DESIGN 2.9): its keys reach the client's checks */
      R(LIST "      instance_ramp: 500us\n", "instance_ramp", 5, 22, "instance_ramp", 0,
        INT64_MAX, RESIL_MS(1) / 2),
      R(LIST "      instance_ramp_min_percent: 0\n", "instance_ramp_min_percent", 5, 34, "100", 1,
        100, 0),
      E(LIST "      instance_ramp_aggression: 0\n", "instance_ramp_aggression", 5, 33,
        "must be finite and greater than 0"),
      /* both: named together */
      E(ONE LIST, "instances", 5, 18, "base_url"),
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    const bad_case *k = &cases[i];
    char yaml[1024];
    snprintf(yaml, sizeof yaml,
             "http_client:\n"
             "  instances:\n"
             "    api:\n"
             "%s"
             "      endpoints:\n"
             "        get: {path: /x}\n",
             k->lines);
    resil_registry *reg = NULL;
    resil_registry_error err;
    resil_registry_error_init(&err);
    resil_status st = resil_registry_load_string(yaml, strlen(yaml), "h.yaml", &reg, &err);
    char msg[1024], path[128];
    resil_registry_error_format(&err, msg, sizeof msg);
    snprintf(path, sizeof path, "http_client.instances.api.%s", k->key);
    if (st != RESIL_EINVAL || reg || strcmp(err.key_path, path) != 0 || err.line != k->line ||
        err.column != k->column || !strstr(msg, k->says) || err.has_range != k->has_range ||
        (k->has_range && (err.min != k->min || err.max != k->max || err.got != k->got)))
      fail_msg("case %zu: status %d, want %s at %u:%u saying '%s'%s\n  got: %s (range %d "
               "%lld..%lld got %lld)",
               i, (int)st, path, (unsigned)k->line, (unsigned)k->column, k->says,
               k->has_range ? " with its range" : "", msg, err.has_range, (long long)err.min,
               (long long)err.max, (long long)err.got);
    if (strstr(k->key, "instances") && strcmp(k->says, "base_url") == 0 && !strstr(msg, "instances"))
      fail_msg("case %zu: both keys must be named: %s", i, msg);
    resil_registry_free(reg);
  }
}

/* An endpoint's own instances: a bad item, both base_url and instances, and
 * resolve_instances without a base_url, each at the endpoint's key. */
static void an_endpoints_bad_instances_are_reported_at_the_endpoint(void **state) {
  (void)state;
  static const struct {
    const char *ep, *key, *says;
    uint32_t column;
  } cases[] = {
      {"        get: {path: /x, instances: [\"http://127.0.0.1:1\", \"nope\"]}\n",
       "instances[1]", "instances", 59},
      {"        get: {path: /x, instances: http://127.0.0.1:1}\n", "instances",
       "expected a list of base URLs", 36},
      {"        get: {path: /x, base_url: \"http://127.0.0.1:2\", instances: "
       "[\"http://127.0.0.1:1\"]}\n",
       "instances", "base_url", 68},
      {"        get: {path: /x, resolve_instances: true}\n", "resolve_instances", "base_url", 44},
      {"        get: {path: /x, resolve_instances: yes}\n", "resolve_instances",
       "expected true or false", 44},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char yaml[1024];
    snprintf(yaml, sizeof yaml,
             "http_client:\n"
             "  instances:\n"
             "    api:\n"
             "      base_url: http://127.0.0.1:9\n"
             "      endpoints:\n"
             "%s",
             cases[i].ep);
    resil_registry *reg = NULL;
    resil_registry_error err;
    resil_registry_error_init(&err);
    resil_status st = resil_registry_load_string(yaml, strlen(yaml), "e.yaml", &reg, &err);
    char msg[1024], path[160];
    resil_registry_error_format(&err, msg, sizeof msg);
    snprintf(path, sizeof path, "http_client.instances.api.endpoints.get.%s", cases[i].key);
    if (st != RESIL_EINVAL || reg || strcmp(err.key_path, path) != 0 || err.line != 6 ||
        err.column != cases[i].column || !strstr(msg, cases[i].says))
      fail_msg("case %zu: want %s at 6:%u saying '%s'\n  got: %s", i, path,
               (unsigned)cases[i].column, cases[i].says, msg);
    resil_registry_free(reg);
  }
}

/* ---- events ---------------------------------------------------------------------- */

typedef struct lines {
  pthread_mutex_t mu;
  char *v[64];
  int n;
} lines;

static void on_line(void *user, const char *line) {
  lines *l = user;
  pthread_mutex_lock(&l->mu);
  if (l->n < 64) l->v[l->n++] = strdup(line);
  pthread_mutex_unlock(&l->mu);
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

/* Two instances that refuse connections, ejected after one failure, at
 * most 50 % out: the first failure ejects one, and the sink attached to the
 * registry has its instance_ejected line under the client's name. */
static void a_clients_ejection_reaches_the_registrys_sink(void **state) {
  (void)state;
  char yaml[512];
  snprintf(yaml, sizeof yaml,
           "http_client:\n"
           "  instances:\n"
           "    refused:\n"
           "      instances: [\"http://127.0.0.1:%u\", \"http://127.0.0.1:%u\"]\n"
           "      eject_consecutive: 1\n"
           "      connect_timeout: 1s\n"
           "      endpoints: {get: {path: /x}}\n",
           closed_port(), closed_port());
  resil_registry *reg = load_ok(yaml);
  lines l;
  memset(&l, 0, sizeof l);
  pthread_mutex_init(&l.mu, NULL);
  resil_event_sink_config sc;
  resil_event_sink_config_init(&sc);
  sc.fn = on_line;
  sc.user = &l;
  resil_event_sink *sink = NULL;
  assert_status(RESIL_OK, resil_event_sink_new(&sc, &sink, NULL));
  assert_status(RESIL_OK, resil_registry_events_attach(reg, sink));
  resil_http_client *c = resil_registry_http_client(reg, "refused");
  resil_http_response *r = NULL;
  resil_outcome o = resil_http_call(c, "get", NULL, NULL, NULL, &r);
  assert_int_equal(o.kind, RESIL_NOT_SENT);
  int inst = resil_http_response_instance(r);
  assert_true(inst == 0 || inst == 1);
  resil_http_response_free(r);
  resil_http_instance_stats st;
  assert_status(RESIL_OK, resil_http_client_instance_stats(c, (size_t)inst, &st));
  assert_int_equal(st.state, RESIL_HTTP_INSTANCE_OUT);
  assert_int_equal(st.ejections, 1);
  int found = 0;
  pthread_mutex_lock(&l.mu);
  for (int i = 0; i < l.n; i++) {
    json_error_t je;
    json_t *j = json_loads(l.v[i], 0, &je);
    assert_non_null(j);
    const char *kind = json_string_value(json_object_get(j, "kind"));
    if (kind && strcmp(kind, "instance_ejected") == 0) {
      found++;
      assert_string_equal(json_string_value(json_object_get(j, "instance")), "refused");
      assert_int_equal(json_integer_value(json_object_get(j, "index")), inst);
      assert_int_equal(json_integer_value(json_object_get(j, "ejections")), 1);
    }
    json_decref(j);
  }
  pthread_mutex_unlock(&l.mu);
  assert_int_equal(found, 1);
  /* detached: the sink may be freed */
  assert_status(RESIL_OK, resil_registry_events_attach(reg, NULL));
  resil_event_sink_free(sink);
  for (int i = 0; i < l.n; i++) free(l.v[i]);
  pthread_mutex_destroy(&l.mu);
  resil_registry_free(reg);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(a_client_and_an_endpoint_with_instances_load),
      cmocka_unit_test(the_defaults_are_the_clients),
      cmocka_unit_test(an_instances_upstream_replaces_an_inherited_one),
      cmocka_unit_test(a_reload_keeps_the_same_instances_and_replaces_others),
      cmocka_unit_test(describe_lists_a_clients_instances_and_settings),
      cmocka_unit_test(every_bad_value_names_its_key_range_and_line),
      cmocka_unit_test(an_endpoints_bad_instances_are_reported_at_the_endpoint),
      cmocka_unit_test(a_clients_ejection_reaches_the_registrys_sink),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

#else

int main(void) { return 77; }

#endif
