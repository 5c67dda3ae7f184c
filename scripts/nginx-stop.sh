#!/usr/bin/env bash
# Stops a server started by scripts/nginx-start.sh and removes its directory.
# Usage: bash scripts/nginx-stop.sh URL|PORT|DIR
#   URL   what nginx-start.sh printed, e.g. http://127.0.0.1:54321
#   PORT  its port
#   DIR   its temporary directory (resil-nginx.XXXXXX)
# Exits 0 when the server is gone (also when it was already gone), 1 when no
# server started by nginx-start.sh matches.
set -euo pipefail

log() { echo "nginx-stop: $*" >&2; }

[ $# -eq 1 ] || { log "usage: nginx-stop.sh URL|PORT|DIR"; exit 2; }
arg=$1

dir=
if [ -d "$arg" ] && [ -f "$arg/port" ]; then
  dir=$arg
else
  port=$arg
  if [[ $arg == http://* ]]; then
    port=${arg#http://}
    port=${port%%/*}
    port=${port##*:}
  fi
  [[ $port =~ ^[0-9]+$ ]] || { log "cannot find a port in '$arg'"; exit 2; }
  for d in "${TMPDIR:-/tmp}"/resil-nginx.*; do
    if [ -f "$d/port" ] && [ "$(cat "$d/port")" = "$port" ]; then
      dir=$d
      break
    fi
  done
fi
if [ -z "$dir" ]; then
  log "no server started by nginx-start.sh matches '$arg'"
  exit 1
fi

pid=$(cat "$dir/nginx.pid" 2>/dev/null || true)
# Only the master this directory's pid file names, and only while it is an
# nginx whose command line names this directory's configuration.
if [[ $pid =~ ^[0-9]+$ ]] && kill -0 "$pid" 2>/dev/null &&
   tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q "$dir/nginx.conf"; then
  # TERM: fast shutdown (QUIT would wait for the idle keep-alive connections).
  kill -TERM "$pid" 2>/dev/null || true
  for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.05; done
  kill -KILL "$pid" 2>/dev/null || true
fi
rm -rf "$dir"
log "stopped and removed $dir"
