#!/usr/bin/env bash
# Starts a throwaway nginx for the benchmarks (an HTTP upstream outside the
# client's process) and prints its base URL on standard output (everything
# else goes to standard error):
#
#   url=$(bash scripts/nginx-start.sh)     # http://127.0.0.1:PORT
#   curl "$url/ka"                         # 200 "ok"
#   bash scripts/nginx-stop.sh "$url"
#
# With RESIL_NGINX_PORTS=N (1..16, default 1) the same server listens on N
# free ports, one server block each with the same locations (N instances of
# one upstream, for the many-instances benchmark), and prints N base URLs,
# one a line, the first being the one nginx-stop.sh takes:
#
#   urls=$(RESIL_NGINX_PORTS=4 bash scripts/nginx-start.sh)
#   bash scripts/nginx-stop.sh "$(head -n 1 <<<"$urls")"
#
# Installs Debian's nginx-light when no nginx binary is found (apt-get, as
# root; it does nothing when nginx is already there; not as root it fails
# and says so). The Debian service the package starts is left alone: this
# server has its own configuration, pid file, logs and temporary paths in a
# new temporary directory (resil-nginx.XXXXXX under TMPDIR or /tmp) and
# listens only on 127.0.0.1, on a free port. Locations:
#   /ka     200, body "ok" (text/plain): the keep-alive benchmark route;
#   /echo   200, JSON {"headers": {...}} of the request headers a client
#           sets (a fixed list: nginx-light has no module that lists every
#           header, so this is `return 200` with $http_* variables; a header
#           not sent is "");
#   other   404.
# Settings, and why:
#   worker_processes 1   the machine the benchmarks run on has 2 cores and
#                        the client is one thread; one event-driven worker
#                        serves tens of thousands of keep-alive requests per
#                        second on one core and leaves the other core to the
#                        client, where a second worker would compete with it
#                        (override: RESIL_NGINX_WORKERS);
#   worker_connections 16384, worker_rlimit_nofile 40000: room for every
#                        connection a benchmark opens (they open at most a
#                        few hundred);
#   keepalive_requests 100000000, keepalive_timeout 300s: a connection is
#                        never closed by the server during a run, so the
#                        clients' connection counts measure them only;
#   access_log off, error_log warn: no disk I/O per request;
#   worker_cpu_affinity, only when RESIL_NGINX_CPU names a CPU (a number,
#                        with 1 worker): the worker runs on that CPU alone,
#                        so a client pinned to another one never shares a
#                        CPU with it (scripts/bench.sh does that for its
#                        sequential case).
#
# Environment: RESIL_NGINX overrides the nginx binary; RESIL_NGINX_WORKERS
# the number of workers; RESIL_NGINX_CPU the worker's CPU (default: not
# pinned); RESIL_NGINX_PORTS the number of ports (server blocks); TMPDIR
# chooses where the directory goes.
set -euo pipefail

log() { echo "nginx-start: $*" >&2; }

nginx=${RESIL_NGINX:-}
if [ -z "$nginx" ]; then
  nginx=$(command -v nginx || true)
  [ -n "$nginx" ] || [ ! -x /usr/sbin/nginx ] || nginx=/usr/sbin/nginx
fi
if [ -z "$nginx" ]; then
  if [ "$(id -u)" -ne 0 ]; then
    log "no nginx binary, and not root: cannot install nginx-light (apt-get install nginx-light)"
    exit 1
  fi
  log "installing nginx-light (apt-get)"
  export DEBIAN_FRONTEND=noninteractive
  if ! apt-get install -y --no-install-recommends nginx-light >&2; then
    apt-get update >&2 || true
    apt-get install -y --no-install-recommends nginx-light >&2 || {
      log "apt-get install nginx-light failed"; exit 1; }
  fi
  nginx=/usr/sbin/nginx
fi
[ -x "$nginx" ] || { log "$nginx is not executable"; exit 1; }

workers=${RESIL_NGINX_WORKERS:-1}
[[ $workers =~ ^[1-9][0-9]*$ ]] || { log "RESIL_NGINX_WORKERS must be a positive integer"; exit 2; }
nports=${RESIL_NGINX_PORTS:-1}
[[ $nports =~ ^[1-9][0-9]*$ ]] && [ "$nports" -le 16 ] ||
  { log "RESIL_NGINX_PORTS must be an integer 1..16, got '$nports'"; exit 2; }
cpu=${RESIL_NGINX_CPU:-}
affinity_line=""
if [ -n "$cpu" ]; then
  [[ $cpu =~ ^[0-9]+$ ]] && [ "$cpu" -lt 1024 ] ||
    { log "RESIL_NGINX_CPU must be a CPU number (0..1023), got '$cpu'"; exit 2; }
  [ "$workers" -eq 1 ] || { log "RESIL_NGINX_CPU needs RESIL_NGINX_WORKERS=1, got $workers"; exit 2; }
  # nginx's mask: one binary digit per CPU, CPU 0 rightmost.
  affinity_line="worker_cpu_affinity 1$(printf '%*s' "$cpu" '' | tr ' ' 0);"
fi

dir=$(mktemp -d "${TMPDIR:-/tmp}/resil-nginx.XXXXXX")
cleanup_on_error() {
  if [ -f "$dir/nginx.pid" ]; then
    pid=$(cat "$dir/nginx.pid" 2>/dev/null || true)
    [[ $pid =~ ^[0-9]+$ ]] && kill -TERM "$pid" 2>/dev/null || true
  fi
  rm -rf "$dir"
}
trap cleanup_on_error ERR INT TERM
chmod 0755 "$dir"
mkdir -p "$dir/tmp"

# As root the master stays root and the worker drops to an unprivileged
# user (nginx's "user" directive); otherwise everything runs as the caller.
user_line=""
if [ "$(id -u)" -eq 0 ]; then
  for u in www-data nobody; do
    if id -u "$u" >/dev/null 2>&1; then
      user_line="user $u $(id -gn "$u");"
      chown "$u" "$dir/tmp"
      break
    fi
  done
fi

# One server block per port in "$@", all alike.
server_blocks() {
  local p
  for p in "$@"; do
    cat <<SERVER
  server {
    listen 127.0.0.1:$p backlog=4096;
    location = /ka {
      default_type text/plain;
      return 200 "ok";
    }
    location = /echo {
      default_type application/json;
      return 200 '{"headers":{"method":"\$request_method","protocol":"\$server_protocol","host":"\$http_host","user-agent":"\$http_user_agent","accept":"\$http_accept","accept-encoding":"\$http_accept_encoding","connection":"\$http_connection","expect":"\$http_expect","content-length":"\$http_content_length","content-type":"\$http_content_type","transfer-encoding":"\$http_transfer_encoding","te":"\$http_te","idempotency-key":"\$http_idempotency_key","authorization":"\$http_authorization","proxy-connection":"\$http_proxy_connection"}}';
    }
    location / {
      return 404;
    }
  }
SERVER
  done
}

write_conf() {
  local servers
  servers=$(server_blocks "$@")
  cat >"$dir/nginx.conf" <<CONF
# Written by scripts/nginx-start.sh; removed by scripts/nginx-stop.sh.
$user_line
daemon on;
worker_processes $workers;
$affinity_line
worker_rlimit_nofile 40000;
pid $dir/nginx.pid;
error_log $dir/error.log warn;
events {
  worker_connections 16384;
}
http {
  access_log off;
  server_tokens off;
  keepalive_requests 100000000;
  keepalive_timeout 300s;
  client_body_temp_path $dir/tmp/body;
  proxy_temp_path $dir/tmp/proxy;
  fastcgi_temp_path $dir/tmp/fastcgi;
  uwsgi_temp_path $dir/tmp/uwsgi;
  scgi_temp_path $dir/tmp/scgi;
$servers
}
CONF
}

# A port nobody listens on now; if another process takes it before nginx
# binds it, the start fails and the next candidate is tried.
port_free() {
  ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}
# nports distinct free ports; 0 when one of them was not free.
pick_ports() {
  ports=()
  local p i
  for ((i = 0; i < nports; i++)); do
    p=$(( 20000 + RANDOM % 40000 ))
    [[ " ${ports[*]} " != *" $p "* ]] && port_free "$p" || return 1
    ports+=("$p")
  done
}
# 0 when nginx listens on every one of them.
all_bound() {
  local p
  for p in "${ports[@]}"; do ! port_free "$p" || return 1; done
}
started=0
for _ in $(seq 1 20); do
  pick_ports || continue
  port=${ports[0]}
  write_conf "${ports[@]}"
  if "$nginx" -p "$dir" -c "$dir/nginx.conf" -e "$dir/error.log" >"$dir/start.log" 2>&1; then
    # The master writes its pid file once the listening sockets are bound.
    for _ in $(seq 1 100); do
      [ -s "$dir/nginx.pid" ] && all_bound && { started=1; break; }
      sleep 0.05
    done
    [ "$started" -eq 1 ] && break
    [ -s "$dir/nginx.pid" ] && kill -TERM "$(cat "$dir/nginx.pid")" 2>/dev/null || true
  fi
done
if [ "$started" -ne 1 ]; then
  log "nginx did not start; its output and log:"
  cat "$dir/start.log" "$dir/error.log" >&2 2>/dev/null || true
  false
fi
# nginx-stop.sh finds the server by its first port.
echo "$port" >"$dir/port"
printf '%s\n' "${ports[@]}" >"$dir/ports"

trap - ERR INT TERM
log "nginx $("$nginx" -v 2>&1 | sed 's/^nginx version: //') running in $dir (port${ports[1]:+s} ${ports[*]}, $workers worker(s)${cpu:+ on CPU $cpu}, pid $(cat "$dir/nginx.pid"))"
for p in "${ports[@]}"; do echo "http://127.0.0.1:$p"; done
