/* resil state show|reset: what a shared segment (shared.h, DESIGN §8.1)
 * holds, and putting its instances back to their initial state. `show`
 * opens an existing segment only (existing_only) and reads each instance
 * with the policies' peeks, which never create one. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"
#include "cmds.h"
#include "resil/breaker.h"
#include "resil/bulkhead.h"
#include "resil/ratelimit.h"
#include "resil/retry.h"
#include "resil/shared.h"

#define PROG "resil state"

static void usage(FILE *f) {
  fprintf(f,
          "usage: resil state show NAME [--dir DIR]\n"
          "       resil state reset NAME [INSTANCE] [--dir DIR]\n"
          "The shared segment NAME (resil call --state NAME, or a registry file's\n"
          "`shared:` section) of this user:\n"
          "  show    lists its instances: kind, name, generation (replacements of\n"
          "          its config, 1 at creation) and state; creates nothing\n"
          "  reset   puts INSTANCE (every instance of that name), or every\n"
          "          instance, back to its initial state for every process: a\n"
          "          rate limiter gets a full cycle, a bulkhead all its permits,\n"
          "          a breaker its initial state with an empty window\n"
          "  --dir DIR   the segment is a file in DIR (as `dir:` in a registry\n"
          "              file and --state-dir of resil call); default: POSIX\n"
          "              shared memory (/dev/shm)\n"
          "Exit status: 0 done, 1 the segment or instance does not exist or\n"
          "cannot be used, 2 bad usage.\n");
}

/* err's message without its "field: " prefix. */
static const char *msg_of(const resil_error *err) {
  size_t fl = strlen(err->field);
  const char *m = err->msg;
  if (fl && strncmp(m, err->field, fl) == 0 && m[fl] == ':') m += fl + 1;
  while (*m == ' ') m++;
  return m;
}

typedef struct inst {
  char kind[32];
  char name[RESIL_SHARED_NAME_MAX + 1];
  unsigned long long generation;
} inst;

typedef struct inst_list {
  inst *v;
  size_t n, cap;
  int oom;
} inst_list;

static int collect(void *user, const char *kind, const char *name, uint64_t gen) {
  inst_list *l = user;
  if (l->n == l->cap) {
    size_t nc = l->cap ? l->cap * 2 : 16;
    inst *nv = realloc(l->v, nc * sizeof *nv);
    if (!nv) {
      l->oom = 1;
      return 1;
    }
    l->v = nv;
    l->cap = nc;
  }
  inst *e = &l->v[l->n++];
  snprintf(e->kind, sizeof e->kind, "%s", kind);
  snprintf(e->name, sizeof e->name, "%s", name);
  e->generation = (unsigned long long)gen;
  return 0;
}

/* A breaker's state, window (this state period's), OPEN series and
 * totals: `OPEN for 120 ms (wait 10000 ms), window 5 calls 5 failed
 * (100%, minimum 5), 1 consecutive opens, totals 5 calls 5 failed 3
 * rejected`; a ramping CLOSED adds `, ramping: 35% of calls admitted` and
 * the ramp's refusals `8 refused by a ramp`. */
static void describe_breaker(const resil_breaker_metrics *m, char *buf, size_t n) {
  struct timespec ts;
  long long for_ms = -1;
  if (clock_gettime(CLOCK_MONOTONIC, &ts) == 0) { /* the shared breaker's clock */
    int64_t now = (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
    if (now >= m->state_since_ns) for_ms = (long long)((now - m->state_since_ns) / 1000000);
  }
  char since[32] = "", wait[48] = "", rate[32] = "", probes[48] = "", ramp[96] = "";
  if (for_ms >= 0) snprintf(since, sizeof since, " for %lld ms", for_ms);
  if (m->state == RESIL_BREAKER_OPEN)
    snprintf(wait, sizeof wait, " (wait %lld ms)", (long long)(m->open_wait_ns / 1000000));
  if (m->state == RESIL_BREAKER_HALF_OPEN)
    snprintf(probes, sizeof probes, ", %u probe permits left",
             (unsigned)m->half_open_permits_available);
  /* the ramp after recovery (breaker.h "Ramp"): CLOSED, a share admitted */
  if (m->ramping)
    snprintf(ramp, sizeof ramp, ", ramping: %.0f%% of calls admitted", m->ramp_share * 100.0);
  if (m->rates == RESIL_BREAKER_RATES_AVAILABLE)
    snprintf(rate, sizeof rate, "%.0f%%, ", m->failure_rate_pct);
  char ramp_rejected[48] = "";
  if (m->total_ramp_rejected)
    snprintf(ramp_rejected, sizeof ramp_rejected, " %llu refused by a ramp",
             (unsigned long long)m->total_ramp_rejected);
  snprintf(buf, n,
           "%s%s%s%s%s, window %llu calls %llu failed (%sminimum %llu), %u consecutive opens, "
           "totals %llu calls %llu failed %llu rejected%s",
           resil_breaker_state_name(m->state), since, wait, probes, ramp,
           (unsigned long long)m->buffered_calls, (unsigned long long)m->failed_calls, rate,
           (unsigned long long)m->minimum_calls, (unsigned)m->consecutive_opens,
           (unsigned long long)m->total_calls, (unsigned long long)m->total_failures,
           (unsigned long long)m->total_not_permitted, ramp_rejected);
}

/* The state of one instance, in words. One line per kind: a kind this
 * resil cannot read says so. */
static void describe(resil_shared *seg, const inst *e, char *buf, size_t n) {
  resil_error err;
  resil_status st = RESIL_EINVAL;
  if (strcmp(e->kind, "ratelimiter") == 0) {
    int64_t avail = 0, limit = 0;
    if ((st = resil_ratelimiter_shared_peek(seg, e->name, &avail, &limit, &err)) == RESIL_OK)
      snprintf(buf, n, "%lld of %lld permits available", (long long)avail, (long long)limit);
  } else if (strcmp(e->kind, "bulkhead") == 0) {
    uint32_t avail = 0, max = 0;
    if ((st = resil_bulkhead_shared_peek(seg, e->name, &avail, &max, &err)) == RESIL_OK)
      snprintf(buf, n, "%u of %u permits available", (unsigned)avail, (unsigned)max);
  } else if (strcmp(e->kind, "retry_budget") == 0) {
    int64_t tokens = 0;
    if ((st = resil_retry_budget_shared_peek(seg, e->name, &tokens, &err)) == RESIL_OK)
      snprintf(buf, n, "%lld tokens", (long long)tokens);
  }
  else if (strcmp(e->kind, "breaker") == 0) {
    resil_breaker_metrics m;
    if ((st = resil_breaker_shared_peek(seg, e->name, &m, &err)) == RESIL_OK)
      describe_breaker(&m, buf, n);
  } else {
    snprintf(buf, n, "(this resil cannot read a %s's state)", e->kind);
    return;
  }
  if (st != RESIL_OK) snprintf(buf, n, "(unreadable: %s)", msg_of(&err));
}

static int open_seg(const char *name, const char *dir, resil_shared **seg) {
  resil_shared_config sc;
  resil_shared_config_init(&sc);
  sc.name = name;
  sc.dir = dir;
  sc.required = 1;
  sc.existing_only = 1;
  resil_error err;
  resil_status st = resil_shared_open(&sc, seg, &err);
  if (st == RESIL_OK) return 0;
  if (st == RESIL_EINVAL) {
    fprintf(stderr, PROG ": %s: %s\n", strcmp(err.field, "dir") == 0 ? "--dir" : "NAME",
            msg_of(&err));
    return 2;
  }
  fprintf(stderr, PROG ": %s: %s\n", name, msg_of(&err));
  return 1;
}

int resil_cmd_state(int argc, char **argv) {
  const char *sub = NULL, *name = NULL, *instance = NULL, *dir = NULL;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    int missing = 0;
    const char *v;
    if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
      usage(stdout);
      return 0;
    }
    if ((v = resil_cli_option_value(argc, argv, &i, "--dir", &missing)) != NULL) {
      dir = v;
      continue;
    }
    if (missing) {
      fprintf(stderr, PROG ": --dir: needs a value (see --help)\n");
      return 2;
    }
    if (a[0] == '-' && a[1]) {
      fprintf(stderr, PROG ": unknown option '%s' (see --help)\n", a);
      return 2;
    }
    if (!sub)
      sub = a;
    else if (!name)
      name = a;
    else if (!instance)
      instance = a;
    else {
      fprintf(stderr, PROG ": too many arguments ('%s'; see --help)\n", a);
      return 2;
    }
  }
  if (!sub || (strcmp(sub, "show") != 0 && strcmp(sub, "reset") != 0)) {
    if (sub) fprintf(stderr, PROG ": unknown subcommand '%s' (show or reset)\n", sub);
    usage(stderr);
    return 2;
  }
  if (!name) {
    fprintf(stderr, PROG ": NAME: missing (the segment's name; see --help)\n");
    return 2;
  }
  if (instance && strcmp(sub, "show") == 0) {
    fprintf(stderr, PROG ": show takes no INSTANCE ('%s')\n", instance);
    return 2;
  }
  resil_shared *seg = NULL;
  int rc = open_seg(name, dir, &seg);
  if (rc) return rc;
  inst_list l = {0};
  int visited = resil_shared_foreach(seg, collect, &l);
  if (visited < 0 || l.oom) {
    fprintf(stderr, PROG ": %s: cannot list the segment%s\n", name,
            l.oom ? ": out of memory" : "");
    rc = 1;
  } else if (strcmp(sub, "show") == 0) {
    printf("segment %s: %zu instance%s, capacity %u\n", resil_shared_path(seg), l.n,
           l.n == 1 ? "" : "s", (unsigned)resil_shared_capacity(seg));
    for (size_t i = 0; i < l.n; i++) {
      char what[256];
      describe(seg, &l.v[i], what, sizeof what);
      printf("%-12s %-24s generation %llu: %s\n", l.v[i].kind, l.v[i].name,
             l.v[i].generation, what);
    }
  } else {
    size_t done = 0;
    for (size_t i = 0; i < l.n && rc == 0; i++) {
      if (instance && strcmp(l.v[i].name, instance) != 0) continue;
      int again = 0; /* reset goes by name: once per name */
      for (size_t k = 0; k < i; k++)
        if (strcmp(l.v[k].name, l.v[i].name) == 0) again = 1;
      if (again) continue;
      resil_error err;
      if (resil_shared_reset(seg, l.v[i].name, &err) != RESIL_OK) {
        fprintf(stderr, PROG ": %s: %s\n", name, msg_of(&err));
        rc = 1;
      }
      done++;
    }
    if (rc == 0 && instance && done == 0) {
      fprintf(stderr, PROG ": INSTANCE: no instance '%s' in segment %s\n", instance, name);
      rc = 1;
    } else if (rc == 0) {
      printf("segment %s: reset %s\n", resil_shared_path(seg), instance ? instance : "every instance");
    }
  }
  free(l.v);
  resil_shared_close(seg);
  return rc;
}
