/* A client in one page: policies, a chain and an HTTP client from a YAML
 * file (libresil-config), three calls on the async engine (libresil-http)
 * on the built-in loop (libresil), and every instance's figures on
 * GET /metrics (libresil-mhd), served on 127.0.0.1 only.
 *
 *   resil fixture --port 8080 &        # the upstream the file names
 *   cc engine_registry.c -o engine_registry \
 *      $(pkg-config --cflags --libs resil-config resil-mhd)
 *   ./engine_registry examples/config/engine-registry.yaml 30
 *   curl http://127.0.0.1:PORT/metrics  # PORT as printed; served for 30 s
 *
 * Built by the tests (ctest example_engine_registry runs it against
 * `resil fixture`) and by scripts/install-check.sh against the installed
 * package. */
#define _POSIX_C_SOURCE 200809L
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include <microhttpd.h>
#include <resil/engine.h>
#include <resil/metrics_mhd.h>
#include <resil/registry.h>
#include <resil/registry_call.h>
#include <resil/resil.h>

typedef struct {
  const char *endpoint, *param, *value;
} call_spec;

typedef struct {
  resil_loop *loop;
  size_t pending;
} run_state;

typedef struct {
  run_state *run;
  const call_spec *spec;
} call_state;

/* On the loop thread, once per call. */
static void done(void *user, resil_engine_handle *h, resil_outcome o, resil_http_response *r) {
  (void)h;
  call_state *c = user;
  char text[128];
  printf("%-8s %-5s %s after %u attempt(s)\n", c->spec->endpoint, c->spec->value,
         resil_outcome_format(&o, text, sizeof text), o.attempts);
  resil_http_response_free(r);
  if (--c->run->pending == 0)
    resil_loop_stop(c->run->loop);
}

int main(int argc, char **argv) {
  if (argc < 2 || argc > 3) {
    fprintf(stderr, "usage: %s CONFIG.yaml [SERVE_SECONDS]\n", argv[0]);
    return 2;
  }
  unsigned serve_s = argc == 3 ? (unsigned)strtoul(argv[2], NULL, 10) : 0;

  resil_registry *reg = NULL;
  resil_registry_error rerr;
  resil_registry_error_init(&rerr);
  if (resil_registry_load_file(argv[1], &reg, &rerr) != RESIL_OK) {
    char line[1024];
    resil_registry_error_format(&rerr, line, sizeof line); /* FILE:LINE:COL: key: message */
    fprintf(stderr, "%s\n", line);
    return 1;
  }
  /* The engine's client, leased for the engine's life: a reload that
   * replaced it would leave this engine on the old one, alive. */
  resil_registry_lease *client_lease = NULL;
  resil_http_client *client =
      resil_registry_acquire(reg, RESIL_REG_HTTP_CLIENT, "upstream", &client_lease);
  if (!client || !resil_registry_chain(reg, "upstream")) {
    fprintf(stderr, "%s: needs http_client and chain instances named 'upstream'\n", argv[1]);
    resil_registry_release(client_lease);
    resil_registry_free(reg);
    return 1;
  }

  /* /metrics: every instance of the file, on 127.0.0.1 and a free port. */
  resil_metrics *m = NULL;
  struct MHD_Daemon *d = NULL;
  struct sockaddr_in addr = {0};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (resil_metrics_new(NULL, &m) == RESIL_OK && resil_registry_metrics_add(reg, m) == RESIL_OK)
    d = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD, 0, NULL, NULL, resil_metrics_mhd_access,
                         m, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&addr, MHD_OPTION_END);
  const union MHD_DaemonInfo *info = d ? MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT) : NULL;
  if (!info) {
    fprintf(stderr, "cannot serve /metrics\n");
    return 1;
  }
  printf("metrics: http://127.0.0.1:%u/metrics\n", (unsigned)info->port);

  /* The engine on the built-in loop. */
  resil_loop *loop = NULL;
  resil_loop_adapter *ad = NULL;
  resil_engine *e = NULL;
  resil_error err;
  if (resil_loop_new(NULL, &loop) != RESIL_OK || resil_loop_adapter_new(loop, &ad) != RESIL_OK) {
    fprintf(stderr, "loop setup failed\n");
    return 1;
  }
  resil_engine_config ec;
  resil_engine_config_init(&ec);
  ec.adapter = ad;
  ec.client = client;
  if (resil_engine_new(&ec, &e, &err) != RESIL_OK) {
    fprintf(stderr, "engine: %s\n", err.msg);
    return 1;
  }
  /* Its counters on /metrics too (resil_engine_calls_total, ...). */
  if (resil_engine_metrics_add(m, "engine", e) != RESIL_OK) {
    fprintf(stderr, "engine metrics failed\n");
    return 1;
  }

  /* Three calls, all in flight at once, each through chain "upstream" in
   * its order, under one lease of its policies (a reload meanwhile never
   * mixes old and new instances within a call); one deadline each, the
   * chain's total_timeout. A fresh flaky id per run: it fails twice, then
   * 200. */
  char flaky_id[32];
  snprintf(flaky_id, sizeof flaky_id, "ex-%ld-%ld", (long)getpid(), (long)time(NULL));
  const call_spec specs[] = {
      {"get_item", "id", "7"}, {"flaky", "id", flaky_id}, {"status", "code", "404"}};
  enum { NCALLS = sizeof specs / sizeof specs[0] };
  run_state run = {loop, 0};
  call_state calls[NCALLS];
  for (size_t i = 0; i < NCALLS; i++) {
    resil_http_param p = {specs[i].param, specs[i].value};
    resil_http_args args;
    resil_http_args_init(&args);
    args.params = &p;
    args.param_count = 1;
    calls[i] = (call_state){&run, &specs[i]};
    if (resil_registry_engine_call(reg, e, "upstream", specs[i].endpoint, &args, NULL, done,
                                   &calls[i], NULL, &err) == RESIL_OK)
      run.pending++;
    else
      fprintf(stderr, "%s: %s\n", specs[i].endpoint, err.msg);
  }
  if (run.pending > 0)
    resil_loop_run(loop); /* until the last done() stops it */

  resil_engine_stats st;
  resil_engine_get_stats(e, &st);
  printf("engine: %llu calls completed, %llu transfers, %llu retries\n",
         (unsigned long long)st.calls_completed, (unsigned long long)st.transfers,
         (unsigned long long)st.retries);
  fflush(stdout);
  if (serve_s > 0)
    sleep(serve_s); /* curl the /metrics URL above meanwhile */

  resil_metrics_remove(m, e); /* before the engine goes */
  resil_engine_free(e);
  resil_loop_adapter_free(ad);
  resil_loop_free(loop);
  MHD_stop_daemon(d);
  resil_registry_release(client_lease);
  resil_registry_free(reg); /* leaves the collector */
  resil_metrics_free(m);
  return st.calls_completed == NCALLS ? 0 : 1;
}
