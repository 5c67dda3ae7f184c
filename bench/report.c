/* The report: merges the C cases with the Node.js peers measured in the same
 * run, checks the targets of the benchmark issue, prints the table and
 * writes results.json. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "bench.h"

/* The factor every case must beat the fastest Node peer by. */
#define PEER_FACTOR 10.0
/* Bytes a breaker with a 100-call window may occupy. */
#define BREAKER_BYTES_MAX 512

/* Per-case targets from the issue; kinds of check below. */
typedef enum target_kind { T_NONE, T_NS_MAX, T_THREADS } target_kind;

typedef struct case_target {
  const char *name;
  target_kind kind;
  double limit;     /* T_NS_MAX: ns per call; T_THREADS: total ops/s   */
  const char *text; /* as printed                                       */
} case_target;

static const case_target targets[] = {
    {"breaker_acquire_record", T_NS_MAX, 10.0, "<= 10 ns"},
    {"breaker_run", T_NS_MAX, 40.0, "<= 40 ns"},
    {"retry_run", T_NONE, 0, NULL},
    {"ratelimiter_acquire", T_NONE, 0, NULL},
    {"bulkhead_acquire_release", T_NONE, 0, NULL},
    {"chain4_run", T_NS_MAX, 50.0, "<= 50 ns"},
    {"breaker_2threads", T_THREADS, 20e6, ">= 20 M ops/s and >= 1/2 of 1thread"},
    {"breaker_1thread", T_NONE, 0, NULL},
};

static const case_target *target_for(const char *name) {
  for (size_t i = 0; i < sizeof targets / sizeof targets[0]; i++)
    if (!strcmp(targets[i].name, name)) return &targets[i];
  return NULL;
}

static json_t *find_case(json_t *cases, const char *name) {
  size_t i;
  json_t *c;
  json_array_foreach(cases, i, c) {
    const char *n = json_string_value(json_object_get(c, "name"));
    if (n && !strcmp(n, name)) return c;
  }
  return NULL;
}

static double num(json_t *o, const char *key) {
  json_t *v = json_object_get(o, key);
  return json_is_number(v) ? json_number_value(v) : NAN;
}

static const char *str(json_t *o, const char *key, const char *dflt) {
  const char *s = json_string_value(json_object_get(o, key));
  return s ? s : dflt;
}

static void fmt_ops(char *buf, size_t size, double ops) {
  if (isnan(ops))
    snprintf(buf, size, "-");
  else
    snprintf(buf, size, "%.2f M", ops / 1e6);
}

/* Adds one line to the "targets" summary and returns met. */
static int add_check(json_t *checks, const char *what, double value, int met,
                     int evaluated) {
  json_t *o = json_object();
  json_object_set_new(o, "target", json_string(what));
  json_object_set_new(o, "value", isnan(value) ? json_null() : json_real(value));
  json_object_set_new(o, "met", evaluated ? json_boolean(met) : json_null());
  json_array_append_new(checks, o);
  return met;
}

static int is_http_case(json_t *c) {
  return !strcmp(str(c, "kind", ""), "http");
}

static int is_store_case(json_t *c) {
  return !strcmp(str(c, "kind", ""), "store");
}

static int is_async_case(json_t *c) {
  return !strcmp(str(c, "kind", ""), "async");
}

/* The common verdict of a same-run ratio case: a skipped case is checked as
 * not evaluated, a case with an error as missed, otherwise the ratio is
 * held against min_ratio. Sets o's "met", prints the SKIPPED or INVALID
 * line itself, and returns -1 then; else 1 (met) or 0 (missed), for the
 * caller to print the figures. */
static int ratio_verdict(json_t *cc, json_t *o, json_t *checks, const char *name,
                         const char *what, double min_ratio) {
  const char *skipped = json_string_value(json_object_get(cc, "skipped"));
  const char *err = json_string_value(json_object_get(cc, "error"));
  double ratio = num(cc, "ratio");
  if (skipped) {
    add_check(checks, what, NAN, 0, 0);
    json_object_set_new(o, "met", json_null());
    printf("  %-26s SKIPPED: %s\n", name, skipped);
    return -1;
  }
  if (err) {
    add_check(checks, what, NAN, 0, 1);
    json_object_set_new(o, "met", json_false());
    printf("  %-26s INVALID: %s\n", name, err);
    return -1;
  }
  int met = ratio >= min_ratio;
  add_check(checks, what, ratio, met, 1);
  json_object_set_new(o, "met", json_boolean(met));
  return met;
}

/* The async cases (async_cases.c): libresil's engine against bare libcurl
 * multi_socket on the same loop, same run. Appends each case, with
 * "target" and "met", to ocases. */
static void report_async(json_t *ccases, json_t *ocases, json_t *checks) {
  char target[96], what[200];
  snprintf(target, sizeof target, ">= %.2fx bare multi_socket req/s", BENCH_ASYNC_MIN_RATIO);
  int header = 0;
  size_t i;
  json_t *cc;
  json_array_foreach(ccases, i, cc) {
    if (!is_async_case(cc)) continue;
    if (!header) {
      printf("\nAsync, one loop thread against nginx: bare libcurl multi_socket vs "
             "libresil's engine with {retry, breaker, bulkhead}, same run (target %s; "
             "medians over rounds):\n", target);
      header = 1;
    }
    const char *name = str(cc, "name", "?");
    json_t *o = json_deep_copy(cc);
    json_object_set_new(o, "target", json_string(target));
    double ratio = num(cc, "ratio");
    snprintf(what, sizeof what, "%s libresil engine req/s >= %.2fx bare multi_socket's "
             "(same run)", name, BENCH_ASYNC_MIN_RATIO);
    int met = ratio_verdict(cc, o, checks, name, what, BENCH_ASYNC_MIN_RATIO);
    if (met >= 0) {
      printf("  %-26s req/s multi %8.0f  libresil %8.0f  ratio %.3f %-4s CPU/req %.1f / "
             "%.1f us (x%.2f)  bytes/in-flight %.0f / %.0f (x%.2f)  [%lld in flight, "
             "%lld rounds, load %.2f..%.2f]\n",
             name, num(cc, "req_per_s_libcurl_multi"), num(cc, "req_per_s_libresil"), ratio,
             met ? "yes" : "NO", num(cc, "cpu_us_per_req_libcurl_multi"),
             num(cc, "cpu_us_per_req_libresil"), num(cc, "cpu_ratio"),
             num(cc, "bytes_per_inflight_libcurl_multi"), num(cc, "bytes_per_inflight_libresil"),
             num(cc, "mem_ratio"),
             (long long)json_integer_value(json_object_get(cc, "inflight")),
             (long long)json_integer_value(json_object_get(cc, "rounds")),
             num(cc, "loadavg_start"), num(cc, "loadavg_end"));
      if (json_object_get(cc, "req_per_s_libcurl_multi_window"))
        printf("  %-26s bare multi handing libcurl <= %lld transfers at a time (the rest "
               "queued by the caller): %.0f req/s, CPU/req %.1f us; libresil / it: ratio "
               "%.3f, CPU x%.2f (not a target)\n",
               "", (long long)json_integer_value(json_object_get(cc, "max_connections")),
               num(cc, "req_per_s_libcurl_multi_window"),
               num(cc, "cpu_us_per_req_libcurl_multi_window"), num(cc, "ratio_capped"),
               num(cc, "cpu_ratio_capped"));
    }
    json_array_append_new(ocases, o);
  }
}

/* The HTTP cases (http_cases.c): their own lines and checks, against bare
 * libcurl measured in the same run rather than against the Node peers.
 * Appends each case, with "target" and "met", to ocases. */
static void report_http(json_t *ccases, json_t *ocases, json_t *checks) {
  char target[96], what[200];
  snprintf(target, sizeof target, ">= %.2fx libcurl req/s, p50 added <= %.0f us",
           BENCH_HTTP_MIN_RATIO, BENCH_HTTP_MAX_ADDED_US);
  int header = 0;
  size_t i;
  json_t *cc;
  json_array_foreach(ccases, i, cc) {
    if (!is_http_case(cc)) continue;
    if (!header) {
      printf("\nHTTP, bare libcurl vs libresil's client behind "
             "Retry(Breaker(RateLimiter(Bulkhead(HTTP)))), same run "
             "(target %s):\n", target);
      header = 1;
    }
    const char *name = str(cc, "name", "?");
    json_t *o = json_deep_copy(cc);
    json_object_set_new(o, "target", json_string(target));
    const char *skipped = json_string_value(json_object_get(cc, "skipped"));
    const char *err = json_string_value(json_object_get(cc, "error"));
    double ratio = num(cc, "ratio"), added = num(cc, "p50_added_us");
    snprintf(what, sizeof what, "%s libresil req/s >= %.2fx bare libcurl's (same run)",
             name, BENCH_HTTP_MIN_RATIO);
    if (skipped) {
      add_check(checks, what, NAN, 0, 0);
      json_object_set_new(o, "met", json_null());
      printf("  %-28s SKIPPED: %s\n", name, skipped);
    } else if (err) {
      add_check(checks, what, NAN, 0, 1);
      json_object_set_new(o, "met", json_false());
      printf("  %-28s INVALID: %s\n", name, err);
    } else {
      int ratio_ok = ratio >= BENCH_HTTP_MIN_RATIO;
      int added_ok = added <= BENCH_HTTP_MAX_ADDED_US;
      add_check(checks, what, ratio, ratio_ok, 1);
      snprintf(what, sizeof what, "%s p50 added by libresil <= %.0f us", name,
               BENCH_HTTP_MAX_ADDED_US);
      add_check(checks, what, added, added_ok, 1);
      json_object_set_new(o, "met", json_boolean(ratio_ok && added_ok));
      printf("  %-28s req/s libcurl %9.0f  libresil %9.0f  ratio %.3f %-4s p50 %.1f / "
             "%.1f us (added %+.2f us %s)  p99 %.1f / %.1f us  [%lld callers, %lld "
             "rounds]\n",
             name, num(cc, "req_per_s_libcurl"), num(cc, "req_per_s_libresil"), ratio,
             ratio_ok ? "yes" : "NO", num(cc, "p50_us_libcurl"), num(cc, "p50_us_libresil"),
             added, added_ok ? "yes" : "NO", num(cc, "p99_us_libcurl"),
             num(cc, "p99_us_libresil"),
             (long long)json_integer_value(json_object_get(cc, "callers")),
             (long long)json_integer_value(json_object_get(cc, "rounds")));
      if (json_object_get(cc, "ratio_vs_libcurl_multi"))
        printf("  %-28s vs libcurl driven through a multi handle like libresil "
               "(%.0f req/s): ratio %.3f, p50 added %+.2f us (not a target)\n",
               "", num(cc, "req_per_s_libcurl_multi"), num(cc, "ratio_vs_libcurl_multi"),
               num(cc, "p50_added_us_vs_libcurl_multi"));
    }
    json_array_append_new(ocases, o);
  }
}

/* The operation-store cases (store_cases.c): keyed operations per second
 * against the raw INSERT ceiling measured in the same run. Appends each
 * case, with "target" and "met", to ocases. */
static void report_store(json_t *ccases, json_t *ocases, json_t *checks) {
  char target[96], what[200];
  snprintf(target, sizeof target, ">= %.2f of the raw ceiling's ops/s", BENCH_STORE_MIN_RATIO);
  int header = 0;
  size_t i;
  json_t *cc;
  json_array_foreach(ccases, i, cc) {
    if (!is_store_case(cc)) continue;
    if (!header) {
      printf("\nOperation store, keyed operations (begin + complete, trivial effect) vs "
             "raw single-row INSERT transactions, same run, one thread (target %s; "
             "ratio = median of per-round ratios):\n", target);
      header = 1;
    }
    const char *name = str(cc, "name", "?");
    json_t *o = json_deep_copy(cc);
    json_object_set_new(o, "target", json_string(target));
    double ratio = num(cc, "ratio");
    snprintf(what, sizeof what, "%s libresil keyed ops/s >= %.2fx raw INSERT transactions' "
             "(same run)", name, BENCH_STORE_MIN_RATIO);
    int met = ratio_verdict(cc, o, checks, name, what, BENCH_STORE_MIN_RATIO);
    if (met >= 0) {
      printf("  %-26s ops/s raw %8.0f  libresil %8.0f  ratio %.3f %-4s (ratio of the "
             "medians %.3f)  commits/op raw %.2f libresil %.2f  [%s, %lld rounds]\n",
             name, num(cc, "ops_per_s_raw"), num(cc, "ops_per_s_libresil"), ratio,
             met ? "yes" : "NO", num(cc, "ratio_of_medians"),
             num(cc, "commits_per_op_raw"), num(cc, "commits_per_op_libresil"),
             str(cc, "filesystem", "?"),
             (long long)json_integer_value(json_object_get(cc, "rounds")));
    }
    json_array_append_new(ocases, o);
  }
}

int bench_report(const char *c_json, const char *peers_json,
                 const char *peers_skipped, const char *out_path) {
  json_error_t jerr;
  json_t *c = json_load_file(c_json, 0, &jerr);
  if (!c) {
    fprintf(stderr, "resil_bench report: %s: %s (line %d)\n", c_json, jerr.text,
            jerr.line);
    return 1;
  }
  json_t *peers_doc = NULL;
  char skip_reason[512] = "";
  if (peers_json) {
    peers_doc = json_load_file(peers_json, 0, &jerr);
    if (!peers_doc || !json_is_array(json_object_get(peers_doc, "cases")))
      snprintf(skip_reason, sizeof skip_reason,
               "node bench.js output unreadable: %s", peers_doc ? "no cases" : jerr.text);
  } else {
    snprintf(skip_reason, sizeof skip_reason, "%s",
             peers_skipped ? peers_skipped : "not run");
  }
  if (skip_reason[0] && peers_doc) {
    json_decref(peers_doc);
    peers_doc = NULL;
  }

  json_t *ccases = json_object_get(c, "cases");
  json_t *machine = json_deep_copy(json_object_get(c, "machine"));
  if (!machine) machine = json_object();
  json_t *out = json_object();
  json_t *ocases = json_array();
  json_t *checks = json_array();
  json_t *ratios = json_array();
  json_t *opeers = json_array();

  /* The fastest library peer (the await baseline is a reference, not a
   * peer). */
  json_t *pcases = peers_doc ? json_object_get(peers_doc, "cases") : NULL;
  const char *fastest = NULL;
  double fastest_ns = NAN;
  if (pcases) {
    size_t i;
    json_t *p;
    json_array_foreach(pcases, i, p) {
      json_array_append(opeers, p);
      if (!json_is_true(json_object_get(p, "peer"))) continue;
      double ns = num(p, "ns_per_call");
      if (!isnan(ns) && (isnan(fastest_ns) || ns < fastest_ns)) {
        fastest_ns = ns;
        fastest = str(p, "name", "?");
      }
    }
    json_object_set_new(machine, "node", json_string(str(peers_doc, "node", "?")));
  }

  double ops_1thread = num(find_case(ccases, "breaker_1thread"), "ops_per_s");

  printf("\n== libresil benchmark results\n");
  printf("machine: %s, %lld CPUs, %s; clock_gettime(CLOCK_MONOTONIC) %.1f ns, "
         "coarse %.1f ns, indirect no-op call %.1f ns\n",
         str(machine, "cpu_model", "?"),
         (long long)json_integer_value(json_object_get(machine, "nproc")),
         str(machine, "kernel", "?"), num(machine, "clock_gettime_monotonic_ns"),
         num(machine, "clock_gettime_monotonic_coarse_ns"),
         num(machine, "indirect_noop_call_ns"));
  double load1 = num(machine, "loadavg_1min_at_start");
  if (!isnan(load1))
    printf("load average (1 min) when the C cases started: %.2f%s\n", load1,
           load1 > 0.5 ? " -- other work was running; figures may be inflated" : "");
  printf("\n%-26s %9s %10s  %-36s %-5s  %s\n", "case", "ns/call", "ops/s",
         "target", "met?", "vs fastest peer (>= 10x)");

  int met_n = 0, missed_n = 0, unevaluated_n = 0;
  size_t i;
  json_t *cc;
  json_array_foreach(ccases, i, cc) {
    if (is_http_case(cc) || is_store_case(cc) || is_async_case(cc)) continue;
    const char *name = str(cc, "name", "?");
    const case_target *t = target_for(name);
    json_t *o = json_deep_copy(cc);
    const char *err = json_string_value(json_object_get(cc, "error"));
    double ns = num(cc, "ns_per_call");
    double ops = num(cc, "ops_per_s");
    char opsbuf[32], tbuf[64], what[160];
    fmt_ops(opsbuf, sizeof opsbuf, ops);
    const char *ttext = t && t->text ? t->text : "-";
    const char *mettext = "-";

    if (t && t->kind != T_NONE) {
      int met = 0;
      json_object_set_new(o, "target", json_string(t->text));
      if (err) {
        met = 0;
      } else if (t->kind == T_NS_MAX) {
        met = ns <= t->limit;
        snprintf(what, sizeof what, "%s ns_per_call %s", name, t->text);
        add_check(checks, what, ns, met, 1);
      } else {
        int total_ok = ops >= t->limit;
        int half_ok = !isnan(ops_1thread) && ops >= ops_1thread / 2.0;
        met = total_ok && half_ok;
        snprintf(what, sizeof what, "%s ops_per_s >= 20 M", name);
        add_check(checks, what, ops, total_ok, 1);
        snprintf(what, sizeof what, "%s ops_per_s >= 1/2 of breaker_1thread (%.2f M)",
                 name, ops_1thread / 1e6);
        add_check(checks, what, isnan(ops_1thread) ? NAN : ops / ops_1thread,
                  half_ok, !isnan(ops_1thread));
      }
      if (err) {
        snprintf(what, sizeof what, "%s %s", name, t->text);
        add_check(checks, what, NAN, 0, 1);
      }
      json_object_set_new(o, "met", json_boolean(met));
      mettext = met ? "yes" : "NO";
    }

    /* Every case against the fastest peer. */
    char peerbuf[96] = "not evaluated (peers skipped)";
    snprintf(what, sizeof what, "%s >= %.0fx faster than the fastest Node peer",
             name, PEER_FACTOR);
    if (err) {
      snprintf(peerbuf, sizeof peerbuf, "-");
      add_check(checks, what, NAN, 0, 1);
    } else if (fastest) {
      double factor = fastest_ns / ns;
      int met = factor >= PEER_FACTOR;
      json_t *vs = json_object();
      json_object_set_new(vs, "peer", json_string(fastest));
      json_object_set_new(vs, "peer_ns_per_call", json_real(fastest_ns));
      json_object_set_new(vs, "times_faster", json_real(factor));
      json_object_set_new(vs, "met", json_boolean(met));
      json_object_set_new(o, "vs_fastest_peer", vs);
      add_check(checks, what, factor, met, 1);
      snprintf(peerbuf, sizeof peerbuf, "%.1fx faster  %s", factor, met ? "yes" : "NO");
    } else {
      add_check(checks, what, NAN, 0, 0);
    }

    if (err) {
      printf("%-26s INVALID: %s\n", name, err);
    } else {
      snprintf(tbuf, sizeof tbuf, "%s", ttext);
      printf("%-26s %9.2f %10s  %-36s %-5s  %s\n", name, ns, opsbuf, tbuf,
             mettext, peerbuf);
    }
    json_array_append_new(ocases, o);
  }
  printf("(thread cases: ns/call is the time one thread spends per call; ops/s "
         "is the total of all threads)\n");
  report_http(ccases, ocases, checks);
  report_async(ccases, ocases, checks);
  report_store(ccases, ocases, checks);

  /* Memory. */
  json_t *bytes = json_object_get(c, "breaker_bytes_100_window");
  if (json_is_integer(bytes)) {
    json_int_t b = json_integer_value(bytes);
    int met = b <= BREAKER_BYTES_MAX;
    printf("\nbreaker with a 100-call count window: %lld bytes (target <= %d): %s\n",
           (long long)b, BREAKER_BYTES_MAX, met ? "met" : "MISSED");
    add_check(checks, "breaker with a 100-call window occupies <= 512 bytes",
              (double)b, met, 1);
  } else {
    printf("\nbreaker with a 100-call count window: size unavailable\n");
    add_check(checks, "breaker with a 100-call window occupies <= 512 bytes", NAN,
              0, 1);
  }

  /* Peers and ratios. */
  if (pcases) {
    printf("\nNode.js peers, measured in this run (node %s; %s):\n",
           str(peers_doc, "node", "?"), str(peers_doc, "method", ""));
    json_t *p;
    json_array_foreach(pcases, i, p) {
      printf("  %-38s %9.1f ns/call  %s %s%s\n", str(p, "name", "?"),
             num(p, "ns_per_call"), str(p, "library", "?"), str(p, "version", "?"),
             json_is_true(json_object_get(p, "peer")) ? "" : " (reference, not a peer)");
      printf("  %-38s   measures: %s\n", "", str(p, "measures", ""));
    }
    printf("  fastest peer: %s, %.1f ns/call\n", fastest ? fastest : "none",
           fastest_ns);
    printf("\nours vs theirs (their ns per call / ours):\n");
    json_array_foreach(pcases, i, p) {
      const char *ours = json_string_value(json_object_get(p, "comparable"));
      if (!ours || !json_is_true(json_object_get(p, "peer"))) continue;
      json_t *oc = find_case(ccases, ours);
      double our_ns = num(oc, "ns_per_call");
      double their_ns = num(p, "ns_per_call");
      if (!oc || isnan(our_ns) || isnan(their_ns)) continue;
      double factor = their_ns / our_ns;
      json_t *r = json_object();
      json_object_set_new(r, "ours", json_string(ours));
      json_object_set_new(r, "theirs", json_string(str(p, "name", "?")));
      json_object_set_new(r, "ours_ns_per_call", json_real(our_ns));
      json_object_set_new(r, "theirs_ns_per_call", json_real(their_ns));
      json_object_set_new(r, "times_faster", json_real(factor));
      json_array_append_new(ratios, r);
      printf("  %-22s %8.1f ns  vs  %-38s %8.1f ns  ->  %.1fx faster\n", ours,
             our_ns, str(p, "name", "?"), their_ns, factor);
    }
  } else {
    printf("\nNode.js peers: SKIPPED (%s); the 10x-faster-than-peers target "
           "was not evaluated.\n", skip_reason);
  }

  json_t *p;
  json_array_foreach(checks, i, p) {
    json_t *m = json_object_get(p, "met");
    if (json_is_true(m))
      met_n++;
    else if (json_is_false(m))
      missed_n++;
    else
      unevaluated_n++;
  }
  printf("\ntargets: %d met, %d missed, %d not evaluated\n", met_n, missed_n,
         unevaluated_n);
  json_array_foreach(checks, i, p) {
    if (json_is_false(json_object_get(p, "met")))
      printf("  MISSED: %s (value %.4g)\n", str(p, "target", "?"), num(p, "value"));
  }

  json_object_set_new(out, "cases", ocases);
  json_object_set_new(out, "peers", opeers);
  if (!pcases) {
    json_t *s = json_object();
    json_object_set_new(s, "skipped", json_true());
    json_object_set_new(s, "reason", json_string(skip_reason));
    json_object_set_new(out, "peers_skipped", s);
  } else {
    json_object_set_new(out, "peers_method", json_string(str(peers_doc, "method", "")));
  }
  json_object_set_new(out, "ratios", ratios);
  json_object_set(out, "breaker_bytes_100_window", bytes ? bytes : json_null());
  json_object_set_new(out, "targets", checks);
  json_t *summary = json_object();
  json_object_set_new(summary, "met", json_integer(met_n));
  json_object_set_new(summary, "missed", json_integer(missed_n));
  json_object_set_new(summary, "not_evaluated", json_integer(unevaluated_n));
  json_object_set_new(out, "summary", summary);
  json_object_set_new(out, "machine", machine);
  json_object_set(out, "method", json_object_get(c, "method"));
  if (json_object_get(c, "http_method"))
    json_object_set(out, "http_method", json_object_get(c, "http_method"));
  if (json_object_get(c, "async_method"))
    json_object_set(out, "async_method", json_object_get(c, "async_method"));
  if (json_object_get(c, "store_method"))
    json_object_set(out, "store_method", json_object_get(c, "store_method"));
  json_object_set(out, "library_version", json_object_get(c, "library_version"));

  int rc = json_dump_file(out, out_path, JSON_INDENT(2) | JSON_REAL_PRECISION(10));
  if (rc != 0)
    fprintf(stderr, "resil_bench report: cannot write %s\n", out_path);
  else
    printf("\nwrote %s\n", out_path);
  json_decref(out);
  json_decref(c);
  json_decref(peers_doc);
  return rc != 0;
}
