/* resil relay: one hop of a chain of services on 127.0.0.1, for building
 * deadline-propagation chains from the command line (DESIGN §8.3, issue 21):
 *
 *   resil fixture                                  # the last hop
 *   resil relay --to http://127.0.0.1:F/slow?ms=20 --work 30   # hop 2
 *   resil relay --to http://127.0.0.1:R2/ --work 30            # hop 1
 *   resil call --deadline 300 http://127.0.0.1:R1/             # the client
 *
 * Every request takes its deadline from the caller's budget
 * (Request-Timeout, grpc-timeout, x-envoy-expected-rq-timeout-ms), is
 * refused with 504 below the floor, works --work MS (never past its
 * deadline), and is forwarded to --to with what is left (the same method
 * and body, the Idempotency-Key kept). The hop itself is the fixture
 * library's relay (src/fixture/relay.h); one line per request on stderr
 * with -v. */
#include <stdio.h>

#include "cli.h"
#include "cmds.h"

#if defined(RESIL_HAVE_FIXTURE) && defined(RESIL_HAVE_STORE)

#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fixture/fixture.h"
#include "resil/deadline.h"

#define PROG "resil relay"

static void usage(FILE *out) {
  fprintf(out,
          "usage: resil relay [--to URL] [--port N] [--work MS] [--floor MS] [--max MS]\n"
          "                   [--timeout MS] [--retry N] [--backoff MS]\n"
          "                   [--clock-offset MS] [--no-propagation] [--store URI] [-v]\n"
          "One hop of a chain on 127.0.0.1, until SIGINT or SIGTERM; prints\n"
          "\"relay listening on http://127.0.0.1:PORT\" once it accepts connections.\n"
          "Each request: its deadline is the caller's budget (Request-Timeout,\n"
          "grpc-timeout or x-envoy-expected-rq-timeout-ms: the smallest valid one,\n"
          "at most --max); below --floor it is answered 504 at once; then --work\n"
          "MS of work, cut at the deadline (504); then it is forwarded to --to with\n"
          "the time left (Request-Timeout), and the answer relayed (504 when the\n"
          "time ran out, 502 for another failure).\n"
          "  --to URL           http://HOST:PORT/PATH[?QUERY] every request goes to\n"
          "                     (its own path is not used); none: the last hop,\n"
          "                     answering 200 {\"hop\":\"relay\"}\n"
          "  --port N           0..65535; 0 (default) picks a free one\n"
          "  --work MS          work per request, default 0\n"
          "  --floor MS         refuse a budget below it, default 5\n"
          "  --max MS           the hop's own maximum (also for a request without\n"
          "                     a budget), default none\n"
          "  --timeout MS       response timeout per forwarded attempt, default 60000\n"
          "  --retry N          at most N forwarded attempts (1..100), default 1\n"
          "  --backoff MS       wait between attempts, default 0\n"
          "  --clock-offset MS  run the hop's clock MS ahead (negative: behind);\n"
          "                     budgets are relative, so nothing changes\n"
          "  --no-propagation   do not send the budget on (to see what breaks)\n"
          "  --store URI        sqlite:PATH: serve through resil_idem_mhd on that\n"
          "                     operation store (a refused request stores nothing)\n"
          "  -v                 one line per request on stderr when it ends\n");
}

static int parse_ms(const char *opt, const char *v, long long lo, long long hi, int64_t *out) {
  errno = 0;
  char *end = NULL;
  long long x = v && *v ? strtoll(v, &end, 10) : 0;
  if (!v || !*v || errno || *end || x < lo || x > hi) {
    fprintf(stderr, PROG ": %s: expected an integer %lld..%lld\n", opt, lo, hi);
    return -1;
  }
  *out = (int64_t)x;
  return 0;
}

int resil_cmd_relay(int argc, char **argv) {
  resil_relay_config cfg;
  resil_relay_config_init(&cfg);
  cfg.name = "relay";
  int verbose = 0;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v;
    int missing = 0;
    int64_t x = 0;
#define OPT(name) ((v = resil_cli_option_value(argc, argv, &i, name, &missing)) || missing)
    if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
      usage(stdout);
      return 0;
    } else if (strcmp(a, "-v") == 0) {
      verbose = 1;
    } else if (strcmp(a, "--no-propagation") == 0) {
      cfg.propagate = 0;
    } else if (OPT("--to")) {
      if (missing || strncmp(v, "http://", 7) != 0) {
        fprintf(stderr, PROG ": --to: expected http://HOST:PORT/PATH\n");
        return 2;
      }
      cfg.to = v;
    } else if (OPT("--store")) {
      if (missing || strncmp(v, "sqlite:", 7) != 0) {
        fprintf(stderr, PROG ": --store: expected sqlite:PATH\n");
        return 2;
      }
      cfg.store_uri = v;
    } else if (OPT("--port")) {
      if (parse_ms("--port", missing ? NULL : v, 0, 65535, &x)) return 2;
      cfg.port = (uint16_t)x;
    } else if (OPT("--work")) {
      if (parse_ms("--work", missing ? NULL : v, 0, 3600000, &x)) return 2;
      cfg.work_ns = x * 1000000;
    } else if (OPT("--floor")) {
      if (parse_ms("--floor", missing ? NULL : v, 0, 86400000, &x)) return 2;
      cfg.floor_ns = x * 1000000;
    } else if (OPT("--max")) {
      if (parse_ms("--max", missing ? NULL : v, 1, 86400000, &x)) return 2;
      cfg.max_ns = x * 1000000;
    } else if (OPT("--timeout")) {
      if (parse_ms("--timeout", missing ? NULL : v, 1, 86400000, &x)) return 2;
      cfg.response_timeout_ns = x * 1000000;
    } else if (OPT("--retry")) {
      if (parse_ms("--retry", missing ? NULL : v, 1, 100, &x)) return 2;
      cfg.attempts = (uint32_t)x;
    } else if (OPT("--backoff")) {
      if (parse_ms("--backoff", missing ? NULL : v, 0, 3600000, &x)) return 2;
      cfg.backoff_ns = x * 1000000;
    } else if (OPT("--clock-offset")) {
      if (parse_ms("--clock-offset", missing ? NULL : v, -86400000, 86400000, &x)) return 2;
      cfg.clock_offset_ns = x * 1000000;
    } else {
      fprintf(stderr, PROG ": unknown argument '%s' (see --help)\n", a);
      return 2;
    }
#undef OPT
  }
  if (cfg.max_ns && cfg.floor_ns > cfg.max_ns) {
    fprintf(stderr, PROG ": --floor is above --max\n");
    return 2;
  }
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGINT);
  sigaddset(&stop, SIGTERM);
  if (pthread_sigmask(SIG_BLOCK, &stop, NULL) != 0) {
    fprintf(stderr, PROG ": cannot block SIGINT/SIGTERM\n");
    return 1;
  }
  resil_relay *r = NULL;
  char err[256] = "";
  if (resil_relay_start(&cfg, &r, err, sizeof err) != 0) {
    fprintf(stderr, PROG ": %s\n", err);
    return 1;
  }
  printf("relay listening on %s\n", resil_relay_url(r));
  fflush(stdout);
  size_t reported = 0;
  for (;;) {
    /* -v: report requests that ended, every 100 ms, until a stop signal. */
    struct timespec to = {0, 100000000};
    int sig = sigtimedwait(&stop, NULL, &to);
    if (sig == SIGINT || sig == SIGTERM) break;
    if (!verbose) continue;
    resil_relay_seen s;
    while (resil_relay_seen_get(r, reported, &s) == 0 && s.status != 0) {
      if (s.budget_ns >= 0)
        fprintf(stderr, "request %zu: budget %.3f ms, %s, answered %d\n", reported + 1,
                (double)s.budget_ns / 1e6, s.refused ? "refused" : "served", s.status);
      else
        fprintf(stderr, "request %zu: no budget, answered %d\n", reported + 1, s.status);
      reported++;
    }
  }
  resil_relay_stop(r);
  return 0;
}

#else

int resil_cmd_relay(int argc, char **argv) {
  (void)argc;
  (void)argv;
  fprintf(stderr, "resil relay: this resil was built without the fixture and libresil-mhd\n");
  return 2;
}

#endif
