#!/usr/bin/env bash
# libresil benchmarks, in one command:
#   1. builds resil_bench in build/bench (Release, -O2);
#   2. runs the C cases (each case: several runs, median), then the HTTP
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
#   4. installs the Node.js peers pinned in bench/node_peers/package.json
#      (opossum, cockatiel) into build/bench/node_peers and measures them in
#      the same run;
#   5. prints the table (ns per call, ops/s, target, met?, ratios against
#      the peers and the raw ceilings) and writes bench/results.json.
# When nginx cannot start, its cases are reported as skipped with the reason.
# When node or npm is missing or the install fails, the peers are reported
# as skipped (with the reason, also in results.json) and the C results still
# stand; likewise when PostgreSQL cannot start, its store case is reported as
# skipped with the reason: the script exits 0. Missed targets are reported,
# not fatal.
#
# Usage: bash scripts/bench.sh [--quick]
#   --quick  3 runs of 50 ms per case, fewer HTTP and store rounds (a smoke
#            test; figures are noisier)
set -euo pipefail
cd "$(dirname "$0")/.."

runs=7 min_run_ms=200 thread_run_ms=300
case "${1:-}" in
  "") ;;
  --quick) runs=3 min_run_ms=50 thread_run_ms=100 ;;
  *) echo "usage: bash scripts/bench.sh [--quick]" >&2; exit 2 ;;
esac

bash scripts/deps.sh

build=build/bench
# A failed run must not leave the previous run's figures looking current.
rm -f bench/results.json
echo "== building resil_bench (Release, -O2) in $build"
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_FLAGS_RELEASE="-O2 -DNDEBUG" \
  -DRESIL_BUILD_BENCH=ON -DRESIL_BUILD_TESTS=OFF -DRESIL_BUILD_TOOL=OFF \
  -DRESIL_WITH_HTTP=ON >/dev/null
cmake --build "$build" -j"$(nproc)" --target resil_bench >/dev/null
bin="$build/bench/resil_bench"

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

echo "== nginx for the HTTP and async cases (scripts/nginx-start.sh)"
: >"$build/nginx-start.log"
if url=$(bash scripts/nginx-start.sh 2>>"$build/nginx-start.log"); then
  nginx_url=$url
  echo "nginx at $nginx_url ($(grep -m1 'running in' "$build/nginx-start.log" | sed 's/^nginx-start: //'))"
  nginx_args=(--nginx-url "$nginx_url")
else
  nginx_reason="scripts/nginx-start.sh failed: $(grep -m1 'nginx-start:' "$build/nginx-start.log" || tail -n 1 "$build/nginx-start.log") (full log: $build/nginx-start.log)"
  echo "nginx cases SKIPPED: $nginx_reason"
  nginx_args=(--nginx-skipped "$nginx_reason")
fi

echo "== libresil cases (load average: $(cut -d' ' -f1-3 /proc/loadavg))"
"$bin" run --out "$build/c.json" --runs "$runs" --min-run-ms "$min_run_ms" \
  --thread-run-ms "$thread_run_ms" --store-dir "$PWD/$build" "${pg_args[@]}" "${nginx_args[@]}"
stop_pg
stop_nginx
echo "load average after the cases: $(cut -d' ' -f1-3 /proc/loadavg)"

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
  "$bin" report --c "$build/c.json" --peers "$peers_dir/peers.json" --out bench/results.json
else
  echo "Node.js peers SKIPPED: $reason"
  "$bin" report --c "$build/c.json" --peers-skipped "$reason" --out bench/results.json
fi
