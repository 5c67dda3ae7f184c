/* resil_bench: libresil's benchmark command. scripts/bench.sh drives it:
 *
 *   resil_bench run --out FILE [--runs N] [--min-run-ms N] [--thread-run-ms N]
 *                   [--no-pin] [--only CASE[,CASE...]] [--store-dir DIR]
 *                   [--pg-uri URI | --pg-skipped REASON]
 *                   [--store-effect insert|direct|none]
 *                   [--nginx-url URL [--nginx-cpu N] | --nginx-skipped REASON]
 *                   [--nginx-instances URL,URL[,...]]
 *                   [--procs-run-ms N] [--resil-cli PATH] [--cli-pairs N]
 *       measures every case (or the ones named), then the shared-state
 *       cases (N processes on one shared breaker or rate limiter against N
 *       threads on one in-process instance, runs of --procs-run-ms, default
 *       1000; `resil call --state` against plain `resil call`, the resil
 *       executable at PATH, --cli-pairs pairs, default 100, against the
 *       nginx at URL; skipped without PATH or URL), then the HTTP cases (also
 *       against the nginx at URL, and the async engine cases there; or
 *       reported as skipped with REASON), then
 *       the operation-store cases (SQLite in a new directory under DIR, by
 *       default the one holding resil_bench; PostgreSQL on the server at
 *       URI, or reported as skipped with REASON; their effect inserts one
 *       row through resil_store_txn_exec, with --store-effect direct through
 *       its own prepared statement on the connection, with --store-effect
 *       none runs no SQL), then the rate limiter on Redis
 *       (redis_ratelimiter_acquire against a bare hiredis EVALSHA, and
 *       redis_engine_decisions, 1,000 in flight on the engine path against
 *       bare hiredis async, on a redis-server it starts; skipped without
 *       one), then the deadline header's cost (http_deadline_header_cost
 *       against an in-process fixture, and _nginx against the nginx at
 *       URL), then the many-instances cases (a client of the
 *       --nginx-instances URLs, the same nginx on several ports, against a
 *       client of the first one: caller CPU per keep-alive GET, and the
 *       engine's req/s with 1,000 in flight; skipped without them), and
 *       writes the raw figures as JSON;
 *   resil_bench report --c FILE (--peers FILE | --peers-skipped REASON)
 *                      [--r4j FILE | --r4j-skipped REASON] --out FILE
 *       merges them with the Node.js peers and with perf-r4j's JSON (the
 *       Resilience4j comparison, run.sh --out FILE; or the reason it was not
 *       run), checks the targets, prints the tables (each ratio with its
 *       reference and target, each policy case against the physical
 *       references measured in the run) and writes results.json.
 *
 * Not part of ctest: timings depend on the machine and its load. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

static void usage(void) {
  fprintf(stderr,
          "usage: resil_bench run --out FILE [--runs N] [--min-run-ms N] "
          "[--thread-run-ms N] [--no-pin]\n"
          "                       [--only CASE[,CASE...]] [--store-dir DIR]\n"
          "                       [--pg-uri URI | --pg-skipped REASON] "
          "[--store-effect insert|direct|none]\n"
          "                       [--nginx-url URL [--nginx-cpu N] | --nginx-skipped REASON]\n"
          "                       [--nginx-instances URL,URL[,...]]\n"
          "                       [--procs-run-ms N] [--resil-cli PATH] [--cli-pairs N]\n"
          "       resil_bench report --c FILE (--peers FILE | --peers-skipped "
          "REASON)\n"
          "                          [--r4j FILE | --r4j-skipped REASON] --out FILE\n");
}

/* Parses an integer option value in min..max; exits with a message
 * otherwise. */
static long long int_in(const char *opt, const char *v, long long min, long long max) {
  char *end = NULL;
  long long n = v ? strtoll(v, &end, 10) : 0;
  if (!v || !*v || *end || n < min || n > max) {
    fprintf(stderr, "resil_bench: %s: expected an integer %lld..%lld, got '%s'\n",
            opt, min, max, v ? v : "");
    exit(2);
  }
  return n;
}

static long long positive(const char *opt, const char *v, long long max) {
  return int_in(opt, v, 1, max);
}

int main(int argc, char **argv) {
  if (argc < 2) {
    usage();
    return 2;
  }
  const char *cmd = argv[1];
  const char *out = NULL, *c_json = NULL, *peers = NULL, *skipped = NULL;
  const char *r4j = NULL, *r4j_skipped = NULL;
  bench_opts opts = {.runs = 7,
                     .min_run_ns = INT64_C(200000000),
                     .thread_run_ns = INT64_C(300000000),
                     .pin_threads = 1,
                     .nginx_cpu = -1,
                     .procs_run_ns = INT64_C(1000000000),
                     .cli_pairs = 100,
                     .store_effect_insert = BENCH_EFFECT_EXEC};
  for (int i = 2; i < argc; i++) {
    const char *a = argv[i];
    const char *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "--no-pin")) {
      opts.pin_threads = 0;
      continue;
    }
    if (!v) {
      fprintf(stderr, "resil_bench: %s needs a value\n", a);
      return 2;
    }
    i++;
    if (!strcmp(a, "--out"))
      out = v;
    else if (!strcmp(a, "--c"))
      c_json = v;
    else if (!strcmp(a, "--peers"))
      peers = v;
    else if (!strcmp(a, "--peers-skipped"))
      skipped = v;
    else if (!strcmp(a, "--r4j"))
      r4j = v;
    else if (!strcmp(a, "--r4j-skipped"))
      r4j_skipped = v;
    else if (!strcmp(a, "--only"))
      opts.only = v;
    else if (!strcmp(a, "--store-dir"))
      opts.store_dir = v;
    else if (!strcmp(a, "--pg-uri"))
      opts.pg_uri = v;
    else if (!strcmp(a, "--pg-skipped"))
      opts.pg_skipped = v;
    else if (!strcmp(a, "--nginx-url"))
      opts.nginx_url = v;
    else if (!strcmp(a, "--nginx-skipped"))
      opts.nginx_skipped = v;
    else if (!strcmp(a, "--nginx-instances"))
      opts.nginx_instances = v;
    else if (!strcmp(a, "--resil-cli"))
      opts.resil_cli = v;
    else if (!strcmp(a, "--procs-run-ms"))
      opts.procs_run_ns = positive(a, v, 60000) * INT64_C(1000000);
    else if (!strcmp(a, "--cli-pairs"))
      opts.cli_pairs = (int)positive(a, v, 1000);
    else if (!strcmp(a, "--nginx-cpu"))
      opts.nginx_cpu = (int)int_in(a, v, 0, 1023);
    else if (!strcmp(a, "--store-effect")) {
      if (strcmp(v, "insert") != 0 && strcmp(v, "direct") != 0 && strcmp(v, "none") != 0) {
        fprintf(stderr,
                "resil_bench: --store-effect: expected insert, direct or none, got '%s'\n", v);
        return 2;
      }
      opts.store_effect_insert = !strcmp(v, "insert") ? BENCH_EFFECT_EXEC
                                 : !strcmp(v, "direct") ? BENCH_EFFECT_DIRECT
                                                        : BENCH_EFFECT_NONE;
    }
    else if (!strcmp(a, "--runs"))
      opts.runs = (int)positive(a, v, BENCH_MAX_RUNS);
    else if (!strcmp(a, "--min-run-ms"))
      opts.min_run_ns = positive(a, v, 60000) * INT64_C(1000000);
    else if (!strcmp(a, "--thread-run-ms"))
      opts.thread_run_ns = positive(a, v, 60000) * INT64_C(1000000);
    else {
      fprintf(stderr, "resil_bench: unknown option %s\n", a);
      usage();
      return 2;
    }
  }
  if (!strcmp(cmd, "run") && out) {
    int rc = bench_run_cases(&opts, out);
    if (rc == 0) rc = bench_run_shared_cases(&opts, out);
    if (rc == 0) rc = bench_run_http_cases(&opts, out);
    if (rc == 0) rc = bench_run_async_cases(&opts, out);
    if (rc == 0) rc = bench_run_store_cases(&opts, out);
    if (rc == 0) rc = bench_run_redis_cases(&opts, out);
    if (rc == 0) rc = bench_run_deadline_cases(&opts, out);
    return rc != 0 ? rc : bench_run_instances_cases(&opts, out);
  }
  if (!strcmp(cmd, "report") && out && c_json && (peers || skipped))
    return bench_report(c_json, peers, skipped, r4j,
                        r4j || r4j_skipped ? r4j_skipped : "no --r4j FILE given", out);
  usage();
  return 2;
}
