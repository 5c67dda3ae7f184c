/* resil describe: builds a chain from command-line settings with the real
 * policies and prints what resil_chain_describe says about it: nesting,
 * the unit each layer observes, notes, the real traps (warnings), and the
 * static amplification (worst-case attempts and time, the latter never
 * beyond the deadline; hedges multiply attempts and add their delay). Out-of-range numbers are refused (exit 2), never
 * wrapped or clamped. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmds.h"
#include "resil/chain.h"
#include "resil/resil.h"
#ifdef RESIL_HAVE_CONFIG
#include "resil/registry.h"
#endif
#if defined(RESIL_HAVE_CONFIG) && defined(RESIL_HAVE_HTTP)
#include <ctype.h>

#include "cli.h"
#include "core/redact.h"
#include "resil/http.h"
#endif

#define MS(x) ((int64_t)(x) * INT64_C(1000000))

static void usage(FILE *f) {
  fprintf(f,
          "usage: resil describe [--order LAYERS] [--retries N[,N...]] [--retry-wait MS]\n"
          "                      [--timeout MS] [--deadline MS] [--hedges N] [--hedge-delay MS]\n"
          "       resil describe --config FILE [--chain NAME] [--client NAME]\n"
          "  --config FILE    describe the chains of a registry file (registry.h), every\n"
          "                   one, or only NAME with --chain; the other options do not\n"
          "                   apply (the file says it all). A chain does not name its\n"
          "                   HTTP client: for each http_client of the file (or only\n"
          "                   --client NAME) one more worst-case line counts each\n"
          "                   attempt as the client bounds it (lease + connect +\n"
          "                   response timeouts, per redirect hop), or as the chain's\n"
          "                   time limiter does when that is shorter. A client with\n"
          "                   several instances (or a resolved name) is listed\n"
          "                   after the chains: its instances (URLs redacted),\n"
          "                   the balance and the ejection settings. Each chain's\n"
          "                   breakers show their ramp after recovery; without\n"
          "                   --chain, every breaker's ramp and every retry's and\n"
          "                   hedge's recovery behaviour follow (retries last)\n"
          "  --order LAYERS   outermost first, comma-separated from: retry, breaker,\n"
          "                   ratelimiter, timelimiter, bulkhead, hedge\n"
          "                   (default retry,breaker,ratelimiter,timelimiter,bulkhead)\n"
          "  --retries N,...  max attempts of each retry layer, outermost first, 1..1000\n"
          "                   (one number per 'retry' in --order; default 3)\n"
          "  --retry-wait MS  fixed wait between attempts (default 500)\n"
          "  --timeout MS     time limiter timeout per attempt (default 1000)\n"
          "  --deadline MS    total deadline per logical call (default: none)\n"
          "  --hedges N       extra attempts of each hedge layer, 1..16 (default 1)\n"
          "  --hedge-delay MS fixed delay before each hedge (default 100)\n"
          "Notes describe the order; warnings are real traps (no deadline, an attempt\n"
          "timeout longer than the deadline, nested retries, retries and hedges).\n"
          "A hedge layer's worst case: 1 + N attempts per call in parallel, the time\n"
          "of one attempt plus N x the delay (the hedge built here has no thread\n"
          "pool: a blocking resil_chain_run would pass calls through it unhedged).\n"
          "Exit status: 0, or 1 when the chain has warnings, 2 on bad arguments.\n");
}

static int parse_ms(const char *arg, const char *v, int64_t *out) {
  char *end;
  errno = 0;
  long long x = strtoll(v, &end, 10);
  if (errno || *v == 0 || *end != 0 || x < 0 || x > 86400000LL) {
    fprintf(stderr, "resil describe: %s: expected milliseconds 0..86400000, got '%s'\n",
            arg, v);
    return -1;
  }
  *out = MS(x);
  return 0;
}

/* The next number of --retries at *pp: 1..RESIL_RETRY_MAX_ATTEMPTS, else a
 * message naming the argument and -1. Advances *pp past it and its comma. */
static int next_attempts(const char **pp, const char *all, uint32_t *out) {
  const char *p = *pp;
  char *end;
  errno = 0;
  long long x = strtoll(p, &end, 10);
  if (end == p || (*end != ',' && *end != 0)) {
    fprintf(stderr, "resil describe: --retries: expected numbers like 2,3,2, got '%s'\n", all);
    return -1;
  }
  if (errno == ERANGE || x < 1 || x > (long long)RESIL_RETRY_MAX_ATTEMPTS) {
    fprintf(stderr,
            "resil describe: --retries: %.*s is out of range: max attempts must be 1..%u\n",
            (int)(end - p), p, (unsigned)RESIL_RETRY_MAX_ATTEMPTS);
    return -1;
  }
  *out = (uint32_t)x;
  *pp = *end ? end + 1 : end;
  return 0;
}

/* a + b, a * b for non-negative times, saturating at INT64_MAX. */
static int64_t sat_add(int64_t a, int64_t b) { return a > INT64_MAX - b ? INT64_MAX : a + b; }
static int64_t sat_mul(int64_t a, int64_t b) {
  return a != 0 && b > INT64_MAX / a ? INT64_MAX : a * b;
}

/* The line "worst case per logical call[ with WHAT]: ...": a's attempts and
 * backoff, each serial attempt taking attempt_ns (why, in `note`, may be
 * ""), the time cut at deadline_ns (0: none). */
static void print_worst(const resil_amplification *a, const char *with, int64_t attempt_ns,
                        const char *note, int64_t deadline_ns) {
  int64_t time_ns = sat_add(sat_add(sat_mul((int64_t)a->serial_attempts, attempt_ns), a->wait_ns),
                            a->hedge_delay_ns);
  long long per_attempt_ms = (long long)(attempt_ns / 1000000);
  /* With hedges, attempts run in parallel: the time counts the serial
   * ones, plus the hedge delay. */
  char attempts[96], hedge_part[64] = "";
  if (a->serial_attempts != a->attempts)
    snprintf(attempts, sizeof attempts,
             "%llu physical attempts (%llu one after another, hedges in parallel)",
             (unsigned long long)a->attempts, (unsigned long long)a->serial_attempts);
  else
    snprintf(attempts, sizeof attempts, "%llu physical attempts",
             (unsigned long long)a->attempts);
  if (a->hedge_delay_ns > 0)
    snprintf(hedge_part, sizeof hedge_part, " + %lld ms hedge delay",
             (long long)(a->hedge_delay_ns / 1000000));
  /* The deadline ends the logical call: worst time = min(computed,
   * deadline). */
  if (deadline_ns > 0 && time_ns > deadline_ns)
    printf("worst case per logical call%s: %s, %.3f s: the deadline "
           "(computed %.3f s = %llu x %lld ms per attempt%s + %lld ms backoff%s, cut at "
           "the %lld ms deadline)\n",
           with, attempts, (double)deadline_ns / 1e9, (double)time_ns / 1e9,
           (unsigned long long)a->serial_attempts, per_attempt_ms, note,
           (long long)(a->wait_ns / 1000000), hedge_part, (long long)(deadline_ns / 1000000));
  else
    printf("worst case per logical call%s: %s, %.3f s "
           "(%llu x %lld ms per attempt%s + %lld ms backoff%s%s)\n",
           with, attempts, (double)time_ns / 1e9, (unsigned long long)a->serial_attempts,
           per_attempt_ms, note, (long long)(a->wait_ns / 1000000), hedge_part,
           deadline_ns > 0 ? ", within the deadline" : "");
}

/* An HTTP client a chain's calls may go through (describe --config). */
typedef struct client_bound {
  const char *name;
  int64_t lease_ns, connect_ns, response_ns;
  uint32_t hops;
} client_bound;

/* Prints what resil_chain_describe says about ch and its static
 * amplification, the worst time cut at deadline_ns (0: none); then, for
 * each of the nclients clients, the worst case of the chain's calls
 * through it: an attempt lasts what the client allows (lease + hops x
 * (connect + response)), or the chain's time limiter when that is shorter.
 * Returns 1 when the chain has warnings, 2 when it cannot be described,
 * else 0. */
static int print_chain(const resil_chain *ch, int64_t deadline_ns, const client_bound *clients,
                       size_t nclients) {
  size_t need = resil_chain_describe(ch, NULL, 0);
  char *out = malloc(need + 1);
  if (!out) {
    fprintf(stderr, "resil describe: out of memory\n");
    return 2;
  }
  resil_chain_describe(ch, out, need + 1);
  fputs(out, stdout);
  free(out);
  resil_amplification a;
  if (resil_chain_amplification(ch, &a) != RESIL_OK) {
    fprintf(stderr, "resil describe: the chain's amplification cannot be computed\n");
    return 2;
  }
  /* the attempt timeout of the chain's time limiter (0: none) */
  int64_t tl_ns = a.serial_attempts && a.time_ns < INT64_MAX
                      ? (a.time_ns - a.wait_ns - a.hedge_delay_ns) / (int64_t)a.serial_attempts
                      : 0;
  print_worst(&a, "", tl_ns, "", deadline_ns);
  for (size_t i = 0; i < nclients; i++) {
    const client_bound *c = &clients[i];
    int64_t client_ns =
        sat_add(c->lease_ns, sat_mul((int64_t)c->hops, sat_add(c->connect_ns, c->response_ns)));
    char with[200], note[320];
    snprintf(with, sizeof with, " through http_client %s", c->name);
    char bound[200], hops[32] = "";
    if (c->hops > 1) snprintf(hops, sizeof hops, "%u hops x (", (unsigned)c->hops);
    snprintf(bound, sizeof bound, "%lld ms lease + %s%lld ms connect + %lld ms response%s",
             (long long)(c->lease_ns / 1000000), hops, (long long)(c->connect_ns / 1000000),
             (long long)(c->response_ns / 1000000), c->hops > 1 ? ")" : "");
    int64_t attempt_ns = client_ns;
    if (tl_ns > 0 && tl_ns <= client_ns) {
      attempt_ns = tl_ns;
      snprintf(note, sizeof note, " (the time limiter's, shorter than the client's %s)", bound);
    } else {
      snprintf(note, sizeof note, " (the client's %s%s)", bound,
               tl_ns > 0 ? "; the time limiter's is longer" : "; no time limiter");
    }
    print_worst(&a, with, attempt_ns, note, deadline_ns);
  }
  return resil_chain_warnings(ch) ? 1 : 0;
}

#ifdef RESIL_HAVE_CONFIG
/* Names of one kind in a registry, in its order (strcmp), copied. */
typedef struct name_list {
  char **v;
  size_t n, cap;
  int oom;
} name_list;

typedef struct collected {
  name_list chains, clients, breakers, retries, hedges;
} collected;

static void name_add(name_list *l, const char *name) {
  if (l->oom) return;
  if (l->n == l->cap) {
    size_t nc = l->cap ? 2 * l->cap : 16;
    char **nv = realloc(l->v, nc * sizeof *nv);
    if (!nv) {
      l->oom = 1;
      return;
    }
    l->v = nv;
    l->cap = nc;
  }
  char *d = strdup(name);
  if (!d) {
    l->oom = 1;
    return;
  }
  l->v[l->n++] = d;
}

static void names_free(name_list *l) {
  for (size_t i = 0; i < l->n; i++) free(l->v[i]);
  free(l->v);
}

static int collect(void *user, resil_registry_kind kind, const char *name, void *h) {
  (void)h;
  collected *c = user;
  if (kind == RESIL_REG_CHAIN) name_add(&c->chains, name);
  if (kind == RESIL_REG_HTTP_CLIENT) name_add(&c->clients, name);
  if (kind == RESIL_REG_BREAKER) name_add(&c->breakers, name);
  if (kind == RESIL_REG_RETRY) name_add(&c->retries, name);
  if (kind == RESIL_REG_HEDGE) name_add(&c->hedges, name);
  return 0;
}

/* A ramp's curve by its aggression (core/ramp.h: a breaker's and an
 * instance's alike). */
static const char *curve_name(double aggression) {
  return aggression == 1.0  ? "linear"
         : aggression > 1.0 ? "faster at first"
                            : "slower at first";
}

/* A breaker's ramp after recovery (breaker.h "Ramp", DESIGN §2.9), as the
 * file resolved it: "no ramp ..." or "ramp over D from M % of calls ...". */
static void ramp_text(char *buf, size_t n, const resil_registry_recovery *r) {
  if (r->ramp_duration_ns == 0) {
    snprintf(buf, n, "no ramp: full traffic once closed (ramp_duration 0)");
    return;
  }
  const char *curve = curve_name(r->ramp_aggression);
  snprintf(buf, n,
           "ramp after recovery: from %u %% of calls to all over %.3f s (aggression %g: %s); "
           "a call not admitted is REJECTED (recovering)",
           (unsigned)r->ramp_min_percent, (double)r->ramp_duration_ns / 1e9, r->ramp_aggression,
           curve);
}

/* The ramp of each breaker layer of chain ch (registry instances). */
static void print_chain_ramps(resil_registry *reg, const resil_chain *ch) {
  for (size_t i = 0; i < resil_chain_layers(ch); i++) {
    resil_registry_recovery r;
    const char *name = resil_chain_layer_name(ch, i);
    if (resil_chain_layer_kind(ch, i) != RESIL_LAYER_BREAKER || !name ||
        resil_registry_recovery(reg, RESIL_REG_BREAKER, name, &r) != RESIL_OK)
      continue;
    char t[256];
    ramp_text(t, sizeof t, &r);
    printf("  breaker \"%s\": %s\n", name, t);
  }
}

/* Every breaker's ramp, every retry's and hedge's recovery behaviour
 * (retries and hedges last, DESIGN §2.9). */
static void print_recovery(resil_registry *reg, const collected *all) {
  if (!all->breakers.n && !all->retries.n && !all->hedges.n) return;
  printf("\nrecovery (ramp after closing, retries and hedges last):\n");
  resil_registry_recovery r;
  for (size_t i = 0; i < all->breakers.n; i++) {
    if (resil_registry_recovery(reg, RESIL_REG_BREAKER, all->breakers.v[i], &r) != RESIL_OK)
      continue;
    char t[256];
    ramp_text(t, sizeof t, &r);
    printf("  circuitbreaker %s: %s\n", all->breakers.v[i], t);
  }
  for (int k = 0; k < 2; k++) {
    const name_list *l = k == 0 ? &all->retries : &all->hedges;
    const char *kind = k == 0 ? "retry" : "hedge";
    for (size_t i = 0; i < l->n; i++) {
      if (resil_registry_recovery(reg, k == 0 ? RESIL_REG_RETRY : RESIL_REG_HEDGE, l->v[i],
                                  &r) != RESIL_OK)
        continue;
      if (r.during_recovery)
        printf("  %s %s: %s during recovery too (%s_during_recovery: true)\n", kind, l->v[i],
               k == 0 ? "retries" : "hedges", kind);
      else if (r.recovery_breaker[0])
        printf("  %s %s: %s last: %s while circuitbreaker %s is HALF_OPEN or ramping "
               "(in a chain, the breaker layer inside it instead)\n",
               kind, l->v[i], k == 0 ? "retries" : "hedges", k == 0 ? "no retry" : "no hedge",
               r.recovery_breaker);
      else
        printf("  %s %s: %s last in a chain: %s while the breaker layer inside it is "
               "HALF_OPEN or ramping (alone it watches no breaker: no recovery_breaker)\n",
               kind, l->v[i], k == 0 ? "retries" : "hedges", k == 0 ? "no retry" : "no hedge");
    }
  }
}

#ifdef RESIL_HAVE_HTTP
/* A client with several instances, or a resolved name (registry.h, "Many
 * instances"): its balance and ejection settings, then one line per
 * instance (its URL redacted) with the upstream it belongs to; a resolved
 * name is said to be resolved at run time (describe looks no name up).
 * Nothing for a client of one base URL. */
static void print_instances(resil_registry *reg, const char *name) {
  resil_registry_http_balance b;
  resil_http_client *c = resil_registry_http_client(reg, name);
  if (!c || resil_registry_http_client_balance(reg, name, &b) != RESIL_OK) return;
  size_t n = resil_http_client_instance_count(c);
  if (!b.listed_instances && !b.resolve_instances && n <= 1) return;
  char classes[160] = "";
  size_t k = 0;
  for (int i = 0; i < RESIL_CLASS_COUNT_ && k < sizeof classes; i++) {
    if (!(b.eject_classes & RESIL_CLASS_BIT(i))) continue;
    k += (size_t)snprintf(classes + k, sizeof classes - k, "%s%s", k ? ", " : "",
                          resil_outcome_class_name((resil_outcome_class)i));
  }
  for (char *q = classes; *q; q++) *q = (char)tolower((unsigned char)*q);
  const char *bal = b.balance == RESIL_HTTP_BALANCE_ROUND_ROBIN ? "round_robin" : "p2c";
  /* Loaded with RESIL_REGISTRY_NO_OPEN: a resolved name is not looked up
   * here (its addresses are not among the instances listed below). */
  if (b.resolve_instances)
    printf("\nhttp_client %s: base_url's name resolved at run time (not looked up here), "
           "balance %s\n  resolved again every %.3f s\n",
           name, bal, (double)b.resolve_interval_ns / 1e9);
  else
    printf("\nhttp_client %s: %zu instance%s, balance %s\n", name, n, n == 1 ? "" : "s", bal);
  if (b.eject_consecutive == 0)
    printf("  ejection: never (eject_consecutive 0)\n");
  else if (b.eject_classes == 0)
    printf("  ejection: never (eject_classes empty)\n");
  else
    printf("  ejection: after %u consecutive failures (%s), for %.3f s x its ejections so far "
           "(at most %.3f s, + 0..10 %% jitter); at most %u %% of the instances out, never "
           "the last\n",
           (unsigned)b.eject_consecutive, classes, (double)b.eject_base_ns / 1e9,
           (double)b.eject_max_ns / 1e9, (unsigned)b.eject_max_percent);
  if (b.instance_ramp_ns == 0)
    printf("  back from ejection: no ramp, every choice at once (instance_ramp 0)\n");
  else
    printf("  back from ejection: ramps from %u %% of the choices to all over %.3f s "
           "(aggression %g: %s)\n",
           (unsigned)b.instance_ramp_min_percent, (double)b.instance_ramp_ns / 1e9,
           b.instance_ramp_aggression, curve_name(b.instance_ramp_aggression));
  for (size_t i = 0; i < n; i++) {
    resil_http_instance_stats st;
    if (resil_http_client_instance_stats(c, i, &st) != RESIL_OK) continue;
    char inst[400], up[300];
    /* A base URL may carry userinfo: never printed. An endpoint's resolved
     * name is not told apart here: its "URL@address" is redacted whole. */
    resil_cli_instance_text(inst, sizeof inst, st.instance,
                            st.upstream_index == 0 && b.resolve_instances);
    if (st.upstream_index == 0)
      snprintf(up, sizeof up, "the client's");
    else
      resil__redact_excerpt(up, sizeof up, st.upstream, strlen(st.upstream), RESIL__REDACT_NONE,
                            NULL);
    printf("  instance %zu: %s (%s%s)\n", i, inst, st.upstream_index ? "endpoint " : "", up);
  }
}
#endif

static void list_names(const char *what, const name_list *l) {
  fprintf(stderr, " (%s:", what);
  for (size_t i = 0; i < l->n; i++) fprintf(stderr, " %s", l->v[i]);
  fprintf(stderr, "%s)\n", l->n ? "" : " none");
}

/* resil describe --config FILE [--chain NAME] [--client NAME]: every chain
 * of the file (or NAME), each as print_chain describes it, its
 * total_timeout as the deadline, with the worst case through every
 * http_client of the file (or only NAME). No fixed limit: every chain,
 * whole names; a chain that cannot be described is an error (exit 2). */
static int describe_config(const char *file, const char *only, const char *client) {
  resil_registry *reg = NULL;
  resil_registry_error err;
  resil_registry_error_init(&err);
  resil_registry_load_options opts;
  resil_registry_load_options_init(&opts);
  opts.flags = RESIL_REGISTRY_NO_OPEN; /* describing creates no file, contacts no server */
  if (resil_registry_load_file_ex(file, &opts, &reg, &err) != RESIL_OK) {
    char line[1024];
    resil_registry_error_format(&err, line, sizeof line);
    fprintf(stderr, "%s\n", line);
    return 2;
  }
  collected all;
  memset(&all, 0, sizeof all);
  (void)resil_registry_foreach(reg, collect, &all);
  int rc = 0;
  client_bound *cb = NULL;
  size_t ncb = 0;
  if (all.chains.oom || all.clients.oom) {
    fprintf(stderr, "resil describe: out of memory\n");
    rc = 2;
    goto done;
  }
  if (only && !resil_registry_chain(reg, only)) {
    fprintf(stderr, "resil describe: --chain: no chain '%s' in %s", only, file);
    list_names("chains", &all.chains);
    rc = 2;
    goto done;
  }
  if (client && resil_registry_http_client(reg, client) == NULL) {
    fprintf(stderr, "resil describe: --client: no http_client '%s' in %s", client, file);
    list_names("http clients", &all.clients);
    rc = 2;
    goto done;
  }
  cb = calloc(all.clients.n ? all.clients.n : 1, sizeof *cb);
  if (!cb) {
    fprintf(stderr, "resil describe: out of memory\n");
    rc = 2;
    goto done;
  }
  for (size_t i = 0; i < all.clients.n; i++) {
    if (client && strcmp(client, all.clients.v[i]) != 0) continue;
    resil_registry_http_timeouts t;
    if (resil_registry_http_client_timeouts(reg, all.clients.v[i], &t) != RESIL_OK) {
      fprintf(stderr, "resil describe: http_client '%s': no timeouts\n", all.clients.v[i]);
      rc = 2;
      goto done;
    }
    cb[ncb++] = (client_bound){all.clients.v[i], t.lease_timeout_ns, t.connect_timeout_ns,
                               t.response_timeout_ns, t.max_hops};
  }
  if (all.chains.n == 0) printf("%s: no chains\n", file);
  size_t shown = 0;
  for (size_t i = 0; i < all.chains.n; i++) {
    const char *name = all.chains.v[i];
    if (only && strcmp(only, name) != 0) continue;
    resil_chain *ch = resil_registry_chain(reg, name);
    if (!ch) {
      fprintf(stderr, "resil describe: chain '%s' of %s cannot be found\n", name, file);
      rc = 2;
      break;
    }
    if (shown++) printf("\n");
    printf("chain %s (%s):\n", name, file);
    int r = print_chain(ch, resil_registry_chain_total_timeout_ns(reg, name), cb, ncb);
    print_chain_ramps(reg, ch);
    if (r > rc) rc = r;
  }
  if (rc < 2 && !only && !all.breakers.oom && !all.retries.oom && !all.hedges.oom)
    print_recovery(reg, &all);
#ifdef RESIL_HAVE_HTTP
  for (size_t i = 0; rc < 2 && !only && i < ncb; i++) print_instances(reg, cb[i].name);
#endif
done:
  free(cb);
  names_free(&all.chains);
  names_free(&all.clients);
  names_free(&all.breakers);
  names_free(&all.retries);
  names_free(&all.hedges);
  resil_registry_free(reg);
  return rc;
}
#endif

int resil_cmd_describe(int argc, char **argv) {
  const char *order = "retry,breaker,ratelimiter,timelimiter,bulkhead";
  const char *retries = NULL;
  int64_t wait_ns = MS(500), timeout_ns = MS(1000), deadline_ns = 0;
  int64_t hedge_delay_ns = MS(100);
  uint32_t hedges = 1;
  const char *config = NULL, *chain_name = NULL, *client_name = NULL;
  int others = 0;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
      usage(stdout);
      return 0;
    }
    if (i + 1 >= argc) {
      fprintf(stderr, "resil describe: unknown argument or missing value: '%s'\n", a);
      return 2;
    }
    const char *v = argv[++i];
    if (strcmp(a, "--config") == 0) {
      config = v;
      continue;
    }
    if (strcmp(a, "--chain") == 0) {
      chain_name = v;
      continue;
    }
    if (strcmp(a, "--client") == 0) {
      client_name = v;
      continue;
    }
    others++;
    if (strcmp(a, "--order") == 0) {
      order = v;
    } else if (strcmp(a, "--retries") == 0) {
      retries = v;
    } else if (strcmp(a, "--retry-wait") == 0) {
      if (parse_ms(a, v, &wait_ns)) return 2;
    } else if (strcmp(a, "--timeout") == 0) {
      if (parse_ms(a, v, &timeout_ns)) return 2;
      if (timeout_ns == 0) {
        fprintf(stderr, "resil describe: --timeout: must be at least 1 ms\n");
        return 2;
      }
    } else if (strcmp(a, "--deadline") == 0) {
      if (parse_ms(a, v, &deadline_ns)) return 2;
    } else if (strcmp(a, "--hedge-delay") == 0) {
      if (parse_ms(a, v, &hedge_delay_ns)) return 2;
    } else if (strcmp(a, "--hedges") == 0) {
      char *end;
      errno = 0;
      long long x = strtoll(v, &end, 10);
      if (errno || *v == 0 || *end != 0 || x < 1 || x > (long long)RESIL_HEDGE_MAX_HEDGES) {
        fprintf(stderr, "resil describe: --hedges: expected a number 1..%u, got '%s'\n",
                (unsigned)RESIL_HEDGE_MAX_HEDGES, v);
        return 2;
      }
      hedges = (uint32_t)x;
    } else {
      fprintf(stderr, "resil describe: unknown argument '%s'\n", a);
      return 2;
    }
  }

  if ((chain_name || client_name) && !config) {
    fprintf(stderr, "resil describe: %s needs --config FILE\n",
            chain_name ? "--chain" : "--client");
    return 2;
  }
  if (config) {
    if (others) {
      fprintf(stderr, "resil describe: --config: the file gives the chains; "
                      "--order and the other options do not apply\n");
      return 2;
    }
#ifdef RESIL_HAVE_CONFIG
    return describe_config(config, chain_name, client_name);
#else
    fprintf(stderr, "resil describe: --config: this resil was built without "
                    "libresil-config (libyaml)\n");
    return 2;
#endif
  }

  resil_chain_config cc;
  resil_chain_config_init(&cc);
  cc.total_timeout_ns = deadline_ns;
  resil_chain *ch = NULL;
  resil_error err;
  if (resil_chain_new(&cc, &ch, &err) != RESIL_OK) {
    fprintf(stderr, "resil describe: %s\n", err.msg);
    return 2;
  }
  enum { MAXP = RESIL_CHAIN_MAX_LAYERS };
  resil_retry *rts[MAXP] = {0};
  resil_breaker *brs[MAXP] = {0};
  resil_ratelimiter *rls[MAXP] = {0};
  resil_timelimiter *tls[MAXP] = {0};
  resil_bulkhead *bhs[MAXP] = {0};
  resil_hedge *hgs[MAXP] = {0};
  size_t n = 0;
  int rc = 0;
  const char *rp = retries;
  char buf[256];
  snprintf(buf, sizeof buf, "%s", order);
  for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok && rc == 0;
       tok = strtok_r(NULL, ",", &save), n++) {
    if (n >= MAXP) {
      fprintf(stderr, "resil describe: --order: at most %d layers\n", MAXP);
      rc = 2;
      break;
    }
    resil_status st = RESIL_OK;
    if (strcmp(tok, "retry") == 0) {
      resil_retry_config c;
      resil_retry_config_init(&c);
      c.wait_ns = wait_ns;
      c.respect_retry_after = 0;
      if (rp && *rp && next_attempts(&rp, retries, &c.max_attempts)) {
        rc = 2;
        break;
      }
      st = resil_retry_new(&c, &rts[n], &err);
      if (st == RESIL_OK) st = resil_chain_add_retry(ch, rts[n]);
    } else if (strcmp(tok, "breaker") == 0) {
      resil_breaker_config c;
      resil_breaker_config_init(&c);
      st = resil_breaker_new(&c, &brs[n], &err);
      if (st == RESIL_OK) st = resil_chain_add_breaker(ch, brs[n]);
    } else if (strcmp(tok, "ratelimiter") == 0) {
      resil_ratelimiter_config c;
      resil_ratelimiter_config_init(&c);
      st = resil_ratelimiter_new(&c, &rls[n], &err);
      if (st == RESIL_OK) st = resil_chain_add_ratelimiter(ch, rls[n]);
    } else if (strcmp(tok, "timelimiter") == 0) {
      resil_timelimiter_config c;
      resil_timelimiter_config_init(&c);
      c.timeout_ns = timeout_ns;
      st = resil_timelimiter_new(&c, &tls[n], &err);
      if (st == RESIL_OK) st = resil_chain_add_timelimiter(ch, tls[n]);
    } else if (strcmp(tok, "bulkhead") == 0) {
      resil_bulkhead_config c;
      resil_bulkhead_config_init(&c);
      st = resil_bulkhead_new(&c, &bhs[n], &err);
      if (st == RESIL_OK) st = resil_chain_add_bulkhead(ch, bhs[n]);
    } else if (strcmp(tok, "hedge") == 0) {
      resil_hedge_config c;
      resil_hedge_config_init(&c);
      c.max_hedges = hedges;
      c.delay_ns = hedge_delay_ns;
      st = resil_hedge_new(&c, &hgs[n], &err);
      if (st == RESIL_OK) st = resil_chain_add_hedge(ch, hgs[n]);
    } else {
      fprintf(stderr, "resil describe: --order: unknown layer '%s' (retry, breaker, ratelimiter, timelimiter, bulkhead, hedge)\n",
              tok);
      rc = 2;
      break;
    }
    if (st != RESIL_OK) {
      fprintf(stderr, "resil describe: %s: %s\n", tok,
              err.status != RESIL_OK ? err.msg : resil_strerror(st));
      rc = 2;
    }
  }
  if (rc == 0 && rp && *rp) {
    fprintf(stderr, "resil describe: --retries: more numbers than 'retry' layers in --order: '%s'\n",
            retries);
    rc = 2;
  }
  if (rc == 0) rc = print_chain(ch, deadline_ns, NULL, 0);
  resil_chain_free(ch);
  for (size_t i = 0; i < MAXP; i++) {
    resil_retry_free(rts[i]);
    resil_breaker_free(brs[i]);
    resil_ratelimiter_free(rls[i]);
    resil_timelimiter_free(tls[i]);
    resil_bulkhead_free(bhs[i]);
    resil_hedge_free(hgs[i]);
  }
  return rc;
}
