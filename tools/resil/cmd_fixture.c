/* resil fixture: runs the fault-injecting upstream (DESIGN §4) in the
 * foreground, for trying a client against it by hand or from a script. */
#include <stdio.h>

#include "cli.h"
#include "cmds.h"
#include "config_serve.h"

#ifdef RESIL_HAVE_FIXTURE

#include <arpa/inet.h>
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fixture/fixture.h"

static void usage(FILE *out) {
  fprintf(
      out,
      "usage: resil fixture [--port N] [--bind ADDR] [--store URI] [--verbose]\n"
      "                     [--config FILE [--events FILE]]\n"
      "Runs the fault-injecting HTTP upstream until SIGINT or SIGTERM and\n"
      "prints \"fixture listening on http://ADDR:PORT\" once it accepts\n"
      "connections.\n"
      "  --port N     TCP port, 0..65535; 0 (default) picks a free one\n"
      "  --bind ADDR  IPv4 loopback address (127.0.0.0/8) or localhost;\n"
      "               default 127.0.0.1; other addresses are refused\n"
      "  --store URI  the operation store behind the idempotent routes\n"
      "               (/idem, /idem-close, /operations, POST /__recover):\n"
      "               sqlite:PATH or postgresql://..., kept afterwards;\n"
      "               default: a private SQLite file in a temporary\n"
      "               directory ($TMPDIR, else /dev/shm or /tmp), removed\n"
      "               on exit\n"
      "  --config FILE  load a registry (resil config check FILE) and serve\n"
      "               its instances' figures on GET /metrics; SIGHUP reloads\n"
      "               FILE (a file with an error is reported on stderr and\n"
      "               changes nothing)\n"
      "  --events FILE  with --config: append the event log (JSON lines:\n"
      "               reloads, the configured breakers' transitions);\n"
      "               SIGHUP reopens FILE (logrotate)\n"
      "  --verbose    let libmicrohttpd log its errors on stderr (closing a\n"
      "               connection on purpose is logged as an error too)\n"
      "  --help       print this help\n"
      "Routes (every request to a route counts an attempt; GET /__stats shows\n"
      "them with the effects; other paths answer 404):\n");
  /* The routes' own table (src/fixture/routes.c), so this cannot drift. */
  const char *request, *summary;
  for (size_t i = 0; resil_fixture_route_help(i, &request, &summary); i++)
    fprintf(out, "  %s\n      %s\n", request, summary);
  fprintf(out,
          "A connection idle for %u s is closed (a new one that has not sent its\n"
          "first request's headers: after %u s), and at most %u are served at\n"
          "once; the flaky and seq routes remember at most %u ids.\n",
          RESIL_FX_DEFAULT_CONNECTION_TIMEOUT_S, RESIL_FX_DEFAULT_HEADER_TIMEOUT_S,
          RESIL_FX_DEFAULT_CONNECTION_LIMIT, RESIL_FX_DEFAULT_MAX_IDS);
}

static int parse_port(const char *s, uint16_t *out) {
  if (!s || *s < '0' || *s > '9')
    return -1;
  errno = 0;
  char *end = NULL;
  long v = strtol(s, &end, 10);
  if (errno != 0 || *end != '\0' || v < 0 || v > 65535)
    return -1;
  *out = (uint16_t)v;
  return 0;
}

static int is_loopback(const char *s) {
  struct in_addr a;
  if (strcmp(s, "localhost") == 0)
    return 1;
  return inet_pton(AF_INET, s, &a) == 1 && (ntohl(a.s_addr) >> 24) == 127;
}

int resil_cmd_fixture(int argc, char **argv) {
  resil_fixture_config cfg;
  resil_fixture_config_init(&cfg);
  const char *config = NULL, *events = NULL;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    int missing = 0;
    const char *v;
    if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
      usage(stdout);
      return 0;
    } else if (strcmp(a, "--verbose") == 0) {
      cfg.quiet = 0;
    } else if ((v = resil_cli_option_value(argc, argv, &i, "--port", &missing)) ||
               missing) {
      if (missing) {
        fprintf(stderr, "resil fixture: --port: needs a value\n");
        return 2;
      }
      if (parse_port(v, &cfg.port) != 0) {
        fprintf(stderr, "resil fixture: --port: must be 0..65535, got '%s'\n",
                v);
        return 2;
      }
    } else if ((v = resil_cli_option_value(argc, argv, &i, "--bind", &missing)) ||
               missing) {
      if (missing) {
        fprintf(stderr, "resil fixture: --bind: needs a value\n");
        return 2;
      }
      if (!is_loopback(v)) {
        fprintf(stderr,
                "resil fixture: --bind: must be an IPv4 loopback address "
                "(127.0.0.0/8) or localhost, got '%s'\n",
                v);
        return 2;
      }
      cfg.bind_addr = v;
    } else if ((v = resil_cli_option_value(argc, argv, &i, "--store", &missing)) ||
               missing) {
      if (missing || !*v) {
        fprintf(stderr, "resil fixture: --store: needs a URI (sqlite:PATH or postgresql://...)\n");
        return 2;
      }
      cfg.store_uri = v;
    } else if ((v = resil_cli_option_value(argc, argv, &i, "--config", &missing)) ||
               missing) {
      if (missing || !*v) {
        fprintf(stderr, "resil fixture: --config: needs a file\n");
        return 2;
      }
      config = v;
    } else if ((v = resil_cli_option_value(argc, argv, &i, "--events", &missing)) ||
               missing) {
      if (missing || !*v) {
        fprintf(stderr, "resil fixture: --events: needs a file\n");
        return 2;
      }
      events = v;
    } else {
      fprintf(stderr, "resil fixture: unknown argument '%s' (see --help)\n", a);
      return 2;
    }
  }

  if (events && !config) {
    fprintf(stderr, "resil fixture: --events: needs --config\n");
    return 2;
  }
  /* Block the stop signals before the server's threads exist, so that they
   * inherit the mask and only sigwait() below receives them. */
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  if (config)
    sigaddset(&stop_signals, SIGHUP); /* a reload, on the reload thread */
  if (pthread_sigmask(SIG_BLOCK, &stop_signals, NULL) != 0) {
    fprintf(stderr, "resil fixture: cannot block SIGINT/SIGTERM\n");
    return 1;
  }
  resil_fixture *f = NULL;
  char err[256];
  if (resil_fixture_start(&cfg, &f, err, sizeof err) != 0) {
    fprintf(stderr, "resil fixture: %s\n", err);
    return 1;
  }
  resil_registry *reg = NULL;
  resil_cli_reloader *reloader = NULL; /* SIGHUP's reloads */
  if (config) {
    resil_metrics *m = resil_fixture_metrics(f);
    if (!m) {
      fprintf(stderr, "resil fixture: --config: this fixture has no /metrics "
                      "(built without libresil-mhd)\n");
      resil_fixture_stop(f);
      return 1;
    }
    if (resil_cli_config_open("resil fixture", config, m, &reg) != 0) {
      resil_fixture_stop(f);
      return 1;
    }
    if ((events && resil_cli_config_events("resil fixture", reg, events) != 0) ||
        resil_cli_reloader_start("resil fixture", reg, config, &reloader) != 0) {
      resil_cli_config_close(reg);
      resil_fixture_stop(f);
      return 1;
    }
  }
  printf("fixture listening on %s\n", resil_fixture_url(f));
  fflush(stdout);
  for (;;) {
    int sig = 0;
    if (sigwait(&stop_signals, &sig) != 0)
      continue;
    if (sig != SIGHUP)
      break;
    (void)resil_cli_config_events_reopen("resil fixture"); /* logrotate */
    resil_cli_reloader_kick(reloader); /* parsed on its thread */
  }
  /* A stop signal is never held up by a reload: one still running after
   * 250 ms is abandoned, and the process exits without freeing what it
   * uses. */
  if (resil_cli_reloader_stop(reloader, 250) != 0) {
    fprintf(stderr, "resil fixture: stopped during a reload of %s: reload abandoned\n",
            config);
    /* _exit: no exit handler or library destructor may run while the
     * reload's thread is still inside a library (libpq, GSSAPI: ThreadSanitizer
     * saw their destructors race with it). */
    fflush(stdout);
    fflush(stderr);
    _exit(0);
  }
  resil_cli_config_close(reg); /* before the fixture's collector */
  resil_fixture_stop(f);
  return 0;
}

#else

int resil_cmd_fixture(int argc, char **argv) {
  (void)argc;
  (void)argv;
  fprintf(stderr, "resil fixture: this resil was built without the fixture "
                  "(RESIL_WITH_HTTP=OFF)\n");
  return 2;
}

#endif
