#!/usr/bin/env bash
# ctest example_engine_registry: runs examples/engine_registry.c against
# `resil fixture` on 127.0.0.1 and checks what it prints and what its
# /metrics serves. Usage: engine_registry.sh RESIL_BIN EXAMPLE_BIN CONFIG
set -euo pipefail
resil=$1 example=$2 config=$3
dir=$(mktemp -d)
fx_pid=
cleanup() {
  [ -n "$fx_pid" ] && kill "$fx_pid" 2>/dev/null && wait "$fx_pid" 2>/dev/null
  rm -rf "$dir"
}
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; echo "--- example output:" >&2; cat "$dir/out" >&2 || true; exit 1; }

# The fixture on a free port; its first line names it.
"$resil" fixture --port 0 >"$dir/fixture" 2>&1 &
fx_pid=$!
for _ in $(seq 100); do grep -q '^fixture listening on ' "$dir/fixture" && break; sleep 0.1; done
url=$(sed -n 's/^fixture listening on //p' "$dir/fixture")
[ -n "$url" ] || fail "the fixture did not start: $(cat "$dir/fixture")"

# The example's file, pointed at this fixture.
sed "s|base_url: http://127.0.0.1:8080|base_url: $url|" "$config" >"$dir/config.yaml"
grep -q "base_url: $url" "$dir/config.yaml" || fail "no base_url to replace in $config"

# Run it, serving /metrics for 3 s after the calls; scrape it meanwhile.
"$example" "$dir/config.yaml" 3 >"$dir/out" 2>&1 &
ex_pid=$!
for _ in $(seq 100); do grep -q '^engine: ' "$dir/out" && break; sleep 0.1; done
port=$(sed -n 's|^metrics: http://127.0.0.1:\([0-9]*\)/metrics$|\1|p' "$dir/out")
[ -n "$port" ] || fail "no metrics line"
exec 3<>"/dev/tcp/127.0.0.1/$port"
printf 'GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n' >&3
cat <&3 >"$dir/metrics"
exec 3<&-
wait "$ex_pid" || fail "the example exited $?"

check() { grep -qE "$1" "$dir/$2" || fail "$2 lacks /$1/"; }
check '^get_item +7 +ANSWERED\(200\) after 1 attempt\(s\)$' out
check '^flaky +ex-[0-9]+-[0-9]+ +ANSWERED\(200\) after 3 attempt\(s\)$' out
check '^status +404 +ANSWERED\(404\) after 1 attempt\(s\)$' out
check '^engine: 3 calls completed, 5 transfers, 2 retries$' out
check '^HTTP/1.[01] 200' metrics
check '^resil_circuitbreaker_state\{name="upstream",state="closed"\} 1' metrics
check '^resil_retry_calls_total\{name="upstream",kind="successful_with_retry"\} 1' metrics
check '^resil_engine_calls_total\{name="engine",outcome="answered"\} 3' metrics
check '^resil_engine_retries_total\{name="engine"\} 2' metrics
echo "example_engine_registry: ok"
