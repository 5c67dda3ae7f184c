#!/usr/bin/env bash
# libresil benchmarks, in one command:
#   1. builds resil_bench in build/bench (Release, -O2);
#   2. runs the C cases (each case: several runs, median), then the HTTP
#      cases: keep-alive GETs against an in-process loopback fixture, bare
#      libcurl vs libresil's client behind a full chain, alternating in the
#      same run (about 15 s at the defaults, more on a busy machine; needs
#      libresil-http, libcurl and libmicrohttpd, hence -DRESIL_WITH_HTTP=ON);
#   3. installs the Node.js peers pinned in bench/node_peers/package.json
#      (opossum, cockatiel) into build/bench/node_peers and measures them in
#      the same run;
#   4. prints the table (ns per call, ops/s, target, met?, ratios against
#      the peers) and writes bench/results.json.
# When node or npm is missing or the install fails, the peers are reported
# as skipped (with the reason, also in results.json) and the C results still
# stand: the script exits 0. Missed targets are reported, not fatal.
#
# Usage: bash scripts/bench.sh [--quick]
#   --quick  3 runs of 50 ms per case, fewer HTTP rounds (a smoke test;
#            figures are noisier)
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

echo "== libresil cases"
"$bin" run --out "$build/c.json" --runs "$runs" --min-run-ms "$min_run_ms" \
  --thread-run-ms "$thread_run_ms"

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
