/* `resil lab`: runs every experiment, prints one line each, writes the
 * evidence JSON, exits non-zero when any experiment failed. */
#include "lab.h"
#include "lab_ops.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>
#include <time.h>

#include "lab_report.h"
#include "resil/resil.h"

#ifdef RESIL_HAVE_HTTP
#include <curl/curl.h>
#endif
#ifdef RESIL_HAVE_FIXTURE
#include <microhttpd.h>
#endif
#ifdef RESIL_HAVE_STORE
#include <libpq-fe.h>
#include <sqlite3.h>
#endif

/* ops: the run's --metrics / --events (lab_ops.h), NULL without them. */
static int run_fn(lab_fn fn, int path, lab_ops *ops, lab_result *r) {
  memset(r, 0, sizeof *r);
  r->pass = 1;
  r->path = path;
  r->ops = ops;
  r->observed = json_object();
  int ok = fn(r);
  if (!ok) r->pass = 0;
  if (!r->pass && r->failure[0] == 0)
    snprintf(r->failure, sizeof r->failure, "experiment reported failure");
  return r->pass;
}

int lab_runs_on(const lab_experiment *e, int path) {
  unsigned paths = e->paths ? e->paths : LAB_PATHS_BLOCKING;
  if (path != LAB_PATH_BLOCKING && path != LAB_PATH_ENGINE) return 0;
#ifndef RESIL_HAVE_LOOP
  if (path == LAB_PATH_ENGINE) return 0;
#endif
  return (paths & (1u << path)) != 0;
}

static int run_on(const lab_experiment *e, int path, lab_ops *ops, lab_result *r) {
  if (!lab_runs_on(e, path)) {
    memset(r, 0, sizeof *r);
    return -1;
  }
  return run_fn(e->run, path, ops, r);
}

int lab_run_on(const lab_experiment *e, int path, lab_result *r) {
  return run_on(e, path, NULL, r);
}

int lab_run_wrong_on(const lab_experiment *e, int path, lab_result *r) {
  if (!e->run_wrong || !lab_runs_on(e, path)) {
    memset(r, 0, sizeof *r);
    return -1;
  }
  return run_fn(e->run_wrong, path, NULL, r);
}

int lab_run_one(const lab_experiment *e, lab_result *r) {
  return lab_run_on(e, LAB_PATH_BLOCKING, r);
}

int lab_run_wrong(const lab_experiment *e, lab_result *r) {
  return lab_run_wrong_on(e, LAB_PATH_BLOCKING, r);
}

const lab_experiment *lab_find(const char *id) {
  for (const lab_experiment *const *t = lab_families; *t; t++)
    for (const lab_experiment *e = *t; e->id; e++)
      if (strcmp(e->id, id) == 0) return e;
  return NULL;
}

static json_t *versions(void) {
  json_t *v = json_object();
  json_object_set_new(v, "libresil", json_string(resil_version()));
  json_object_set_new(v, "jansson", json_string(JANSSON_VERSION));
#ifdef RESIL_HAVE_HTTP
  json_object_set_new(v, "libcurl", json_string(curl_version_info(CURLVERSION_NOW)->version));
#endif
#ifdef RESIL_HAVE_FIXTURE
  json_object_set_new(v, "libmicrohttpd", json_string(MHD_get_version()));
#endif
#ifdef RESIL_HAVE_STORE
  json_object_set_new(v, "sqlite", json_string(sqlite3_libversion()));
  json_object_set_new(v, "libpq", json_integer(PQlibVersion()));
#endif
#ifdef __VERSION__
  json_object_set_new(v, "compiler", json_string(__VERSION__));
#endif
  struct utsname u;
  if (uname(&u) == 0) {
    char os[256];
    snprintf(os, sizeof os, "%s %s %s", u.sysname, u.release, u.machine);
    json_object_set_new(v, "os", json_string(os));
  }
  return v;
}

static int selected(const char *only, const char *id) {
  if (!only) return 1;
  size_t n = strlen(id);
  for (const char *p = only; *p;) {
    const char *comma = strchr(p, ',');
    size_t len = comma ? (size_t)(comma - p) : strlen(p);
    if (len == n && strncmp(p, id, n) == 0) return 1;
    if (!comma) break;
    p = comma + 1;
  }
  return 0;
}

static void usage(FILE *f) {
  fprintf(f,
          "usage: resil lab [--json FILE] [--html FILE] [--only ID[,ID...]] [--path P] [--list]\n"
          "  Runs the failure experiments of DESIGN §7, §8 and §9 (P1-P14, H1-H16,\n"
          "  I1-I8, A1-A8, O1, M1-M6, G1-G4, D1-D4, F1-F5, R1-R3) against real code, a\n"
          "  loopback upstream (F1-F4: several, one per instance of an upstream),\n"
          "  chains of loopback hops, temporary SQLite files, forked worker\n"
          "  processes, the resil tool itself (M5: `resil call --state` in a shell\n"
          "  loop) and a redis-server the G experiments start (Debian's\n"
          "  /usr/bin/redis-server, or $RESIL_REDIS_SERVER; without it they fail;\n"
          "  G1 on the async engine), and a PostgreSQL server F5 starts (Debian's\n"
          "  /usr/lib/postgresql/N/bin, or $RESIL_PG_BINDIR) under 4 `resil upstream`;\n"
          "  the H and I experiments run twice,\n"
          "  on the blocking API and on the async engine (listed as H1/engine, ...).\n"
          "  Prints one line per experiment and exits 1 when any fails.\n"
          "  --json FILE   write the evidence JSON to FILE\n"
          "  --only IDS    run only these experiments (e.g. P1,P6,H3 or H3/engine)\n"
          "  --path P      blocking, engine or both (default both) for the H and I\n"
          "                experiments\n"
          "  --list        list the experiments and exit\n"
          "  --html FILE     write the report, one self-contained HTML page with\n"
          "                  pictures drawn from the measured series\n"
          "  --metrics FILE  write the Prometheus exposition of every instance\n"
          "                  the experiments used (named <id>_<name>: p6_breaker)\n"
          "  --events FILE   write the event log of the run (JSON lines)\n"
          "  resil lab report --from JSON --html FILE: the page from a saved --json\n");
}

int lab_main(int argc, char **argv) {
  const char *json_path = NULL, *only = NULL;
  const char *metrics_path = NULL, *events_path = NULL; /* lab_ops.h */
  int list = 0;
  unsigned path_mask = LAB_PATHS_BOTH;
  /* The HTML report (lab_report.c). */
  const char *html_path = NULL;
  if (argc > 1 && strcmp(argv[1], "report") == 0) return lab_report_main(argc - 1, argv + 1);
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--html") == 0) {
      if (++i >= argc) {
        fprintf(stderr, "resil lab: --html needs a file name\n");
        return 2;
      }
      html_path = argv[i];
      continue;
    }
    if (strcmp(argv[i], "--json") == 0) {
      if (++i >= argc) {
        fprintf(stderr, "resil lab: --json needs a file name\n");
        return 2;
      }
      json_path = argv[i];
    } else if (strcmp(argv[i], "--only") == 0) {
      if (++i >= argc) {
        fprintf(stderr, "resil lab: --only needs experiment ids\n");
        return 2;
      }
      only = argv[i];
    } else if (strcmp(argv[i], "--path") == 0) {
      if (++i >= argc) {
        fprintf(stderr, "resil lab: --path needs blocking, engine or both\n");
        return 2;
      }
      if (strcmp(argv[i], "blocking") == 0)
        path_mask = LAB_PATHS_BLOCKING;
      else if (strcmp(argv[i], "engine") == 0)
        path_mask = LAB_PATHS_ENGINE;
      else if (strcmp(argv[i], "both") == 0)
        path_mask = LAB_PATHS_BOTH;
      else {
        fprintf(stderr, "resil lab: --path: '%s' is not blocking, engine or both\n", argv[i]);
        return 2;
      }
    } else if (strcmp(argv[i], "--metrics") == 0 || strcmp(argv[i], "--events") == 0) {
      if (i + 1 >= argc) {
        fprintf(stderr, "resil lab: %s needs a file name\n", argv[i]);
        return 2;
      }
      *(argv[i][2] == 'm' ? &metrics_path : &events_path) = argv[i + 1];
      i++;
    } else if (strcmp(argv[i], "--list") == 0) {
      list = 1;
    } else if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
      usage(stdout);
      return 0;
    } else {
      fprintf(stderr, "resil lab: unknown argument '%s' (see resil lab --help)\n",
              argv[i]);
      return 2;
    }
  }
  if (only) {
    for (const char *p = only; *p;) {
      const char *comma = strchr(p, ',');
      size_t len = comma ? (size_t)(comma - p) : strlen(p);
      char id[32];
      snprintf(id, sizeof id, "%.*s", (int)(len < 31 ? len : 31), p);
      char *slash = strchr(id, '/');
      if (slash && strcmp(slash + 1, lab_path_name(LAB_PATH_ENGINE)) == 0) *slash = 0;
      if (!lab_find(id)) {
        fprintf(stderr, "resil lab: --only: no experiment '%s' (see resil lab --list)\n", id);
        return 2;
      }
      if (!comma) break;
      p = comma + 1;
    }
  }
  lab_ops *ops = NULL;
  if (!list && (metrics_path || events_path) &&
      !(ops = lab_ops_new(metrics_path, events_path)))
    return 2;
  json_t *doc = json_object();
  json_object_set_new(doc, "tool", json_string("resil lab"));
  json_object_set_new(doc, "versions", versions());
  json_t *arr = json_array();
  int passed = 0, failed = 0;
  struct timespec t0, t1;
  for (const lab_experiment *const *t = lab_families; *t; t++) {
    for (const lab_experiment *e = *t; e->id; e++) {
      for (int path = LAB_PATH_BLOCKING; path <= LAB_PATH_ENGINE; path++) {
        if (!lab_runs_on(e, path)) continue;
        /* --path chooses among the paths of experiments that have two. */
        if ((e->paths & LAB_PATHS_BOTH) == LAB_PATHS_BOTH && !(path_mask & (1u << path)))
          continue;
        char id[32];
        if (path == LAB_PATH_BLOCKING)
          snprintf(id, sizeof id, "%s", e->id);
        else
          snprintf(id, sizeof id, "%s/%s", e->id, lab_path_name(path));
        if (!selected(only, e->id) && !selected(only, id)) continue;
        if (list) {
          printf("%-10s %s\n", id, e->title);
          continue;
        }
        lab_result r;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        lab_ops_begin(ops, id);
        run_on(e, path, ops, &r);
        lab_ops_end(ops, &r);
        clock_gettime(CLOCK_MONOTONIC, &t1);
        double ms = (double)(t1.tv_sec - t0.tv_sec) * 1e3 +
                    (double)(t1.tv_nsec - t0.tv_nsec) / 1e6;
        printf("%-10s %s  %s: %s", id, r.pass ? "PASS" : "FAIL", e->title, r.summary);
        if (!r.pass) printf("  [%s]", r.failure);
        printf("\n");
        fflush(stdout);
        json_t *x = json_object();
        json_object_set_new(x, "id", json_string(id));
        json_object_set_new(x, "experiment", json_string(e->id));
        /* The path run, or the one the experiment says it exercised (an
         * experiment with one run that drives the engine itself, G1,
         * observes "path": "engine"). */
        const char *seen = json_string_value(json_object_get(r.observed, "path"));
        int said = seen && (strcmp(seen, lab_path_name(LAB_PATH_BLOCKING)) == 0 ||
                            strcmp(seen, lab_path_name(LAB_PATH_ENGINE)) == 0);
        json_object_set_new(x, "path", json_string(said ? seen : lab_path_name(path)));
        json_object_set_new(x, "title", json_string(e->title));
        json_object_set_new(x, "pass", json_boolean(r.pass));
        json_object_set_new(x, "summary", json_string(r.summary));
        json_object_set(x, "observed", r.observed);
        json_object_set_new(x, "duration_ms", json_real(ms));
        if (!r.pass) json_object_set_new(x, "failure", json_string(r.failure));
        if (r.failed_checks[0])
          json_object_set_new(x, "failed_checks", json_string(r.failed_checks));
        json_array_append_new(arr, x);
        if (r.pass)
          passed++;
        else
          failed++;
        lab_result_clear(&r);
      }
    }
  }
  json_object_set_new(doc, "experiments", arr);
  json_object_set_new(doc, "passed", json_integer(passed));
  json_object_set_new(doc, "failed", json_integer(failed));
  int rc = 0;
  if (!list) {
    printf("lab: %d passed, %d failed\n", passed, failed);
    if (json_path) {
      if (json_dump_file(doc, json_path, JSON_INDENT(2) | JSON_SORT_KEYS) != 0) {
        fprintf(stderr, "resil lab: cannot write %s\n", json_path);
        rc = 2;
      } else {
        printf("lab: evidence written to %s\n", json_path);
      }
    }
    if (html_path) {
      if (lab_report_write_file(doc, html_path) != 0) {
        fprintf(stderr, "resil lab: cannot write %s\n", html_path);
        rc = 2;
      } else {
        printf("lab: report written to %s\n", html_path);
      }
    }
  }
  json_decref(doc);
  if (lab_ops_finish(ops) != 0 && !rc) rc = 2;
  if (!rc && metrics_path) printf("lab: metrics written to %s\n", metrics_path);
  if (!rc && events_path) printf("lab: events written to %s\n", events_path);
  if (rc) return rc;
  return failed ? 1 : 0;
}
