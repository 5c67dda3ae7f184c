#!/usr/bin/env bash
# libresil benchmarks, in one command:
#   1. builds resil_bench and the resil command in build/bench (Release,
#      -O2);
#   2. runs the C cases (each case: several runs, median), then the
#      shared-state cases: N = 2, 4 and 8 forked processes on one breaker
#      (and on one rate limiter) in a resil_shared segment against N
#      threads on one in-process instance, alternating runs of 1 s (total
#      ops/s, ratio; about 90 s at the defaults; on a machine with fewer
#      CPUs than workers both sides share them), and `resil call --state`
#      against plain `resil call`, whole processes started alternately
#      against nginx (100 pairs; its added start-to-exit time); then the HTTP
#      cases: keep-alive GETs against an in-process loopback fixture, bare
#      libcurl vs libresil's client behind a full chain, alternating in the
#      same run (about 15 s at the defaults, more on a busy machine; needs
#      libresil-http, libcurl and libmicrohttpd, hence -DRESIL_WITH_HTTP=ON);
#      the same cases again against nginx (the *_nginx cases: an upstream
#      in a process of its own, Debian nginx-light on 127.0.0.1, started by
#      scripts/nginx-start.sh, which installs nginx-light when it is
#      missing, and stopped on exit); then the async cases against that
#      nginx: 1,000 and 10,000 GETs in flight on one thread through
#      libresil's engine vs bare libcurl multi_socket on the same loop
#      (req/s, ratio, bytes per in-flight call, CPU per request);
#   3. then the operation-store cases: keyed operations (resil_store_begin
#      + resil_store_complete with a trivial effect) against raw single-row
#      INSERT transactions, interleaved rounds in the same run, on SQLite (a
#      fresh file under build/bench, WAL, synchronous=FULL) and on a
#      throwaway PostgreSQL server that this script starts with
#      scripts/pg-start.sh (its data directory under build/bench/pgtmp, on
#      the same disk as the SQLite files when it can) and stops on exit
#      (about 35 s at the defaults; needs libresil-store);
#      then the rate limiter on Redis: redis_ratelimiter_acquire (one
#      blocking decision of libresil-redis's limiter, one EVALSHA round
#      trip) against a bare hiredis EVALSHA of the same script, alternating
#      rounds in the same run, and redis_engine_decisions (the limiter's
#      engine path, 1,000 decisions in flight on one loop thread) against
#      bare hiredis async keeping 1,000 EVALSHAs in flight, on a
#      redis-server that resil_bench starts (Debian's, 127.0.0.1, a free
#      port, a temp dir, killed by PID; about 10 s at the defaults;
#      skipped, with the reason, without
#      libresil-redis or redis-server, which scripts/deps.sh installs);
#      then the deadline header's cost (http_deadline_header_cost, and
#      _nginx against the same nginx): caller CPU per keep-alive GET
#      through libresil's client with a ctx deadline, the Request-Timeout
#      header sent vs the same call and deadline without it, alternating
#      rounds in the same run (about 5 s at the defaults); then many
#      instances of an upstream against that nginx, which listens on 4
#      ports (4 server blocks, RESIL_NGINX_PORTS=4): a client of the 4
#      (P2C) against a client of the first one, caller CPU per keep-alive
#      GET in alternating blocks (http_instances_choice_nginx) and the
#      engine's req/s with 1,000 in flight in alternating batches
#      (async_instances_1000_inflight; about 15 s at the defaults);
#   4. the Resilience4j comparison: when `java` (17 or later, with javac)
#      is on PATH and the perf-r4j tool is there (directory $PERF_R4J,
#      default ../shared/tools/perf-r4j next to this checkout or next to
#      the main checkout of its git repository), runs
#      `bash $PERF_R4J/run.sh . --out build/bench/r4j.json` (the same C
#      cases alternated with their Resilience4j 2.3.0 counterparts, about
#      2-3 min; with --quick its --quick, about 30 s);
#   5. installs the Node.js peers pinned in bench/node_peers/package.json
#      (opossum, cockatiel) into build/bench/node_peers and measures them in
#      the same run;
#   6. prints the tables and writes bench/results.json (each case with the
#      load average when it ran where it records one): the physical
#      references measured in this run (uncontended atomic fetch_add,
#      exchange and CAS, one CLOCK_MONOTONIC and one CLOCK_MONOTONIC_COARSE
#      read, an indirect call) and each policy case in those units and
#      against its floor (the atomics, clock reads and indirect calls its
#      hot path performs); ns per call, ops/s, target, met?; then every
#      ratio with its reference, target and met?: Resilience4j ns / ours
#      per case, HTTP against bare libcurl (caller CPU per request, p50
#      added, req/s), async against bare multi_socket, the store against
#      raw INSERT transactions, N processes on a shared instance against
#      N threads, `resil call --state` against plain `resil call`, a
#      client of 4 instances against a client of one, the Node peers.
# When nginx cannot start, its cases are reported as skipped with the reason.
# When node or npm is missing or the install fails, the peers are reported
# as skipped (with the reason, also in results.json) and the C results still
# stand; likewise when PostgreSQL cannot start, its store case is reported as
# skipped with the reason; when java or the perf-r4j tool is absent (or its
# run fails) the report prints "R4j: skipped (reason)": the script exits 0.
# Missed targets are reported, not fatal.
#
# Usage: bash scripts/bench.sh [--quick] [--no-r4j]
#   --quick   3 runs of 50 ms per case (100 ms for processes vs threads, 20
#             pairs of resil call), fewer HTTP and store rounds, perf-r4j
#             with --quick (a smoke test; figures are noisier)
#   --no-r4j  skip the Resilience4j comparison (the Java side)
# Environment: PERF_R4J, the perf-r4j tool's directory (holding run.sh).
set -euo pipefail
cd "$(dirname "$0")/.."

runs=7 min_run_ms=200 thread_run_ms=300 procs_run_ms=1000 cli_pairs=100 quick=0 no_r4j=0
for arg in "$@"; do
  case "$arg" in
    --quick) runs=3 min_run_ms=50 thread_run_ms=100 procs_run_ms=100 cli_pairs=20 quick=1 ;;
    --no-r4j) no_r4j=1 ;;
    *) echo "usage: bash scripts/bench.sh [--quick] [--no-r4j]" >&2; exit 2 ;;
  esac
done

bash scripts/deps.sh

build=build/bench
# A failed run must not leave the previous run's figures looking current.
rm -f bench/results.json
echo "== building resil_bench and resil (Release, -O2) in $build"
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_FLAGS_RELEASE="-O2 -DNDEBUG" \
  -DRESIL_BUILD_BENCH=ON -DRESIL_BUILD_TESTS=OFF -DRESIL_BUILD_TOOL=ON \
  -DRESIL_WITH_HTTP=ON >/dev/null
cmake --build "$build" -j"$(nproc)" --target resil_bench resil >/dev/null
bin="$build/bench/resil_bench"
# The `resil call --state` case starts this executable.
resil_cli="$PWD/$build/resil"

# The PostgreSQL server of the store case: started now, stopped as soon as
# the cases have run, and on any exit (a failure, Ctrl-C) by the trap.
pg_uri="" pg_tmp="" pg_reason=""
stop_pg() {
  if [ -n "$pg_uri" ]; then
    TMPDIR="$pg_tmp" bash scripts/pg-stop.sh "$pg_uri" >/dev/null 2>&1 || true
    pg_uri=""
  fi
}
# The nginx of the HTTP and async cases, likewise.
nginx_url=""
stop_nginx() {
  if [ -n "$nginx_url" ]; then
    bash scripts/nginx-stop.sh "$nginx_url" >/dev/null 2>&1 || true
    nginx_url=""
  fi
}
# resil_bench removes its SQLite directory itself, unless it was killed.
on_exit() {
  stop_pg
  stop_nginx
  rm -rf "$build"/resil-store-bench.??????
}
trap on_exit EXIT
trap 'exit 130' INT TERM
echo "== PostgreSQL for the store case (scripts/pg-start.sh)"
mkdir -p "$build/pgtmp"
: >"$build/pg-start.log"
# Under the build directory first (the disk that holds the SQLite files; the
# server, which may run as another user, must be able to reach it), else
# wherever TMPDIR or /tmp is.
for dir in "$PWD/$build/pgtmp" "${TMPDIR:-/tmp}"; do
  if uri=$(TMPDIR="$dir" bash scripts/pg-start.sh 2>>"$build/pg-start.log"); then
    pg_uri=$uri pg_tmp=$dir
    echo "PostgreSQL at $pg_uri (cluster under $dir: $(df -PT "$dir" | awk 'NR==2 {print $2}'))"
    break
  fi
done
if [ -z "$pg_uri" ]; then
  pg_reason="scripts/pg-start.sh failed: $(grep -m1 'pg-start:' "$build/pg-start.log" || tail -n 1 "$build/pg-start.log") (full log: $build/pg-start.log)"
  echo "PostgreSQL store case SKIPPED: $pg_reason"
  pg_args=(--pg-skipped "$pg_reason")
else
  pg_args=(--pg-uri "$pg_uri")
fi

echo "== nginx for the HTTP, async and many-instances cases (scripts/nginx-start.sh)"
# With two CPUs or more, nginx's one worker runs on the last CPU this
# script may use and the sequential nginx case's caller on another one
# (--nginx-cpu): left to the scheduler, whether the two shared a CPU
# decided a round more than the client did.
nginx_cpu=""
cpus=$(grep -m1 '^Cpus_allowed_list:' /proc/self/status | cut -f2)
last=""
IFS=, read -ra ranges <<<"$cpus"
for r in "${ranges[@]}"; do last=${r##*-}; done
if [[ $last =~ ^[0-9]+$ ]] && [ "$(nproc)" -ge 2 ]; then nginx_cpu=$last; fi
: >"$build/nginx-start.log"
# Four ports, one server block each: the many-instances cases' 4 instances
# (--nginx-instances); the other cases use the first.
if urls=$(RESIL_NGINX_CPU=$nginx_cpu RESIL_NGINX_PORTS=4 bash scripts/nginx-start.sh \
            2>>"$build/nginx-start.log"); then
  nginx_url=$(head -n 1 <<<"$urls")
  echo "nginx at $nginx_url ($(grep -m1 'running in' "$build/nginx-start.log" | sed 's/^nginx-start: //'))"
  nginx_args=(--nginx-url "$nginx_url" --nginx-instances "$(paste -sd, <<<"$urls")")
  if [ -n "$nginx_cpu" ]; then nginx_args+=(--nginx-cpu "$nginx_cpu"); fi
else
  nginx_reason="scripts/nginx-start.sh failed: $(grep -m1 'nginx-start:' "$build/nginx-start.log" || tail -n 1 "$build/nginx-start.log") (full log: $build/nginx-start.log)"
  echo "nginx cases SKIPPED: $nginx_reason"
  nginx_args=(--nginx-skipped "$nginx_reason")
fi

echo "== libresil cases (load average: $(cut -d' ' -f1-3 /proc/loadavg))"
"$bin" run --out "$build/c.json" --runs "$runs" --min-run-ms "$min_run_ms" \
  --thread-run-ms "$thread_run_ms" --procs-run-ms "$procs_run_ms" --cli-pairs "$cli_pairs" \
  --resil-cli "$resil_cli" --store-dir "$PWD/$build" "${pg_args[@]}" "${nginx_args[@]}"
stop_pg
stop_nginx
echo "load average after the cases: $(cut -d' ' -f1-3 /proc/loadavg)"

echo "== Resilience4j 2.3.0, same cases (perf-r4j)"
# The tool lives next to the checkout (../shared/tools/perf-r4j); in a git
# worktree, next to the repository's main checkout.
if [ -z "${PERF_R4J:-}" ]; then
  PERF_R4J=../shared/tools/perf-r4j
  if [ ! -f "$PERF_R4J/run.sh" ] &&
     common=$(git rev-parse --path-format=absolute --git-common-dir 2>/dev/null) &&
     [ -f "$(dirname "$common")/../shared/tools/perf-r4j/run.sh" ]; then
    PERF_R4J="$(dirname "$common")/../shared/tools/perf-r4j"
  fi
fi
r4j_json="$build/r4j.json" r4j_log="$build/r4j.log" r4j_reason=""
rm -f "$r4j_json"
java_major=""
if command -v java >/dev/null 2>&1; then
  java_major=$(java -version 2>&1 | sed -nE '1s/.*version "(1\.)?([0-9]+).*/\2/p')
fi
if [ "$no_r4j" = 1 ]; then
  r4j_reason="--no-r4j given"
elif ! command -v java >/dev/null 2>&1; then
  r4j_reason="java is not on PATH (perf-r4j needs OpenJDK 17)"
elif ! [[ "$java_major" =~ ^[0-9]+$ ]] || [ "$java_major" -lt 17 ]; then
  r4j_reason="java on PATH is version '${java_major:-unknown}', perf-r4j needs 17 or later"
elif ! command -v javac >/dev/null 2>&1; then
  r4j_reason="javac is not on PATH (perf-r4j compiles its harness)"
elif [ ! -f "$PERF_R4J/run.sh" ]; then
  r4j_reason="no perf-r4j tool at $PERF_R4J (set PERF_R4J to the directory holding run.sh)"
else
  r4j_args=(--out "$PWD/$r4j_json")
  [ "$quick" = 1 ] && r4j_args+=(--quick)
  to=""
  command -v timeout >/dev/null 2>&1 && to="timeout 1800"
  echo "bash $PERF_R4J/run.sh . ${r4j_args[*]} (log: $r4j_log; load average: $(cut -d' ' -f1-3 /proc/loadavg))"
  set +e
  $to bash "$PERF_R4J/run.sh" . "${r4j_args[@]}" >"$r4j_log" 2>&1
  rc=$?
  set -e
  if [ "$rc" -ne 0 ] || [ ! -s "$r4j_json" ]; then
    r4j_reason="perf-r4j run.sh failed (exit $rc): $(grep -m1 -E '^run.sh:' "$r4j_log" || tail -n 1 "$r4j_log") (full log: $r4j_log)"
  else
    # Its own table; the report prints it again with the targets.
    sed -n '/^libresil .* vs Resilience4j/,$p' "$r4j_log"
  fi
fi
[ -n "$r4j_reason" ] && echo "R4j: skipped ($r4j_reason)"
if [ -z "$r4j_reason" ]; then r4j_report=(--r4j "$r4j_json"); else r4j_report=(--r4j-skipped "$r4j_reason"); fi

echo "== Node.js peers (opossum, cockatiel)"
peers_dir="$build/node_peers"
reason=""
if ! command -v node >/dev/null 2>&1; then
  reason="node is not installed"
elif ! command -v npm >/dev/null 2>&1; then
  reason="npm is not installed"
else
  mkdir -p "$peers_dir"
  cp bench/node_peers/package.json bench/node_peers/bench.js "$peers_dir/"
  to=""
  command -v timeout >/dev/null 2>&1 && to="timeout 300"
  echo "npm install --no-audit --no-fund (in $peers_dir)"
  if ! (cd "$peers_dir" && $to npm install --no-audit --no-fund >npm-install.log 2>&1); then
    first_error=$(grep -m1 -E 'npm (error|ERR!)' "$peers_dir/npm-install.log" || tail -n 1 "$peers_dir/npm-install.log")
    reason="npm install failed: ${first_error} (full log: $peers_dir/npm-install.log)"
  elif ! (cd "$peers_dir" && node bench.js --runs "$runs" --min-run-ms "$min_run_ms" \
            >peers.json 2>node-bench.log); then
    reason="node bench.js failed: $(tail -n 2 "$peers_dir/node-bench.log" | tr '\n' ' ')"
  else
    cat "$peers_dir/node-bench.log"
  fi
fi

if [ -z "$reason" ]; then
  "$bin" report --c "$build/c.json" --peers "$peers_dir/peers.json" "${r4j_report[@]}" \
    --out bench/results.json
else
  echo "Node.js peers SKIPPED: $reason"
  "$bin" report --c "$build/c.json" --peers-skipped "$reason" "${r4j_report[@]}" \
    --out bench/results.json
fi
