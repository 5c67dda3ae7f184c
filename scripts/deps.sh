#!/usr/bin/env bash
# Installs the Debian 12 packages libresil builds, tests and runs with.
# Idempotent: does nothing when everything is already installed.
set -euo pipefail
pkgs=(build-essential cmake pkg-config libcmocka-dev libcurl4-openssl-dev
      libmicrohttpd-dev libjansson-dev zlib1g-dev libsqlite3-dev libpq-dev
      libssl-dev postgresql-15 libuv1-dev prometheus libyaml-dev
      chromium fonts-dejavu-core redis-server libhiredis-dev libnss-wrapper)
# prometheus: promtool and the server the metrics tests run
# (test_metrics, test_metrics_prometheus) on their own 127.0.0.1 port.
# chromium (and a font for its text): renders the lab's HTML report headless
# (test_lab_report_chromium).
# redis-server, libhiredis-dev: the Redis rate-limiter backend (DESIGN 8.2);
# the tests and the lab start their own redis-server on 127.0.0.1.
# libnss-wrapper: a real hosts file for one test process (NSS_WRAPPER_HOSTS),
# so that a name with several addresses is resolved by getaddrinfo
# (test_http_instances_mt, resolve_instances).
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
echo "deps: installing ${missing[*]}"
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
# The package starts a system-wide server on :9090 where a service manager
# runs; the tests start their own, so stop and disable that one.
if [[ " ${missing[*]} " == *" prometheus "* ]] && command -v systemctl >/dev/null 2>&1; then
  $SUDO systemctl disable --now prometheus >/dev/null 2>&1 || true
fi
if [[ " ${missing[*]} " == *" redis-server "* ]] && command -v systemctl >/dev/null 2>&1; then
  $SUDO systemctl disable --now redis-server >/dev/null 2>&1 || true
fi
