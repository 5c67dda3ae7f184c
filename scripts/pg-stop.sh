#!/usr/bin/env bash
# Stops a server started by scripts/pg-start.sh and removes its directory.
# Usage: bash scripts/pg-stop.sh [--restart] URI|PORT|DIR
#   --restart  restart it instead (pg_ctl restart -m fast: same data
#              directory, port and options; every client connection is
#              closed), and keep the directory
#   URI   what pg-start.sh printed, e.g. postgresql://resil@127.0.0.1:54321/resil
#   PORT  its port
#   DIR   its temporary directory (resil-pg.XXXXXX)
# Exits 0 when the server is gone (also when it was already gone), 1 when no
# server started by pg-start.sh matches.
set -euo pipefail

log() { echo "pg-stop: $*" >&2; }

restart=0
if [ "${1:-}" = --restart ]; then restart=1; shift; fi
[ $# -eq 1 ] || { log "usage: pg-stop.sh [--restart] URI|PORT|DIR"; exit 2; }
arg=$1

dir=
if [ -d "$arg" ] && [ -f "$arg/port" ]; then
  dir=$arg
else
  port=$arg
  if [[ $arg == postgres*://* ]]; then
    port=${arg#*://}
    port=${port#*@}
    port=${port%%/*}
    port=${port##*:}
  fi
  [[ $port =~ ^[0-9]+$ ]] || { log "cannot find a port in '$arg'"; exit 2; }
  for d in "${TMPDIR:-/tmp}"/resil-pg.*; do
    if [ -f "$d/port" ] && [ "$(cat "$d/port")" = "$port" ]; then
      dir=$d
      break
    fi
  done
fi
if [ -z "$dir" ]; then
  log "no server started by pg-start.sh matches '$arg'"
  exit 1
fi

bindir=${RESIL_PG_BINDIR:-}
if [ -z "$bindir" ]; then
  for v in 15 $(ls /usr/lib/postgresql 2>/dev/null | sort -rn); do
    if [ -x "/usr/lib/postgresql/$v/bin/pg_ctl" ]; then
      bindir=/usr/lib/postgresql/$v/bin
      break
    fi
  done
fi

if [ "$restart" -eq 1 ]; then
  owner=$(stat -c %U "$dir/data")
  as_user=()
  [ "$(id -u)" -ne 0 ] || [ "$owner" = root ] || as_user=(runuser -u "$owner" --)
  # restart reuses the options of the last start (postmaster.opts).
  "${as_user[@]}" "$bindir/pg_ctl" -D "$dir/data" -l "$dir/server.log" -m fast -w -t 60 \
    restart >/dev/null 2>&1 || { log "pg_ctl restart failed; its log:"; tail -n 20 "$dir/server.log" >&2; exit 1; }
  log "restarted the server in $dir"
  exit 0
fi

if [ -f "$dir/data/postmaster.pid" ]; then
  owner=$(stat -c %U "$dir/data")
  as_user=()
  [ "$(id -u)" -ne 0 ] || [ "$owner" = root ] || as_user=(runuser -u "$owner" --)
  if [ -n "$bindir" ] && "${as_user[@]}" "$bindir/pg_ctl" -D "$dir/data" -m fast -w -t 30 stop >/dev/null 2>&1; then
    :
  else
    # pg_ctl could not stop it: kill the postmaster (its first pid line).
    pid=$(head -n 1 "$dir/data/postmaster.pid" 2>/dev/null || true)
    if [[ $pid =~ ^[0-9]+$ ]] && kill -0 "$pid" 2>/dev/null; then
      kill -QUIT "$pid" 2>/dev/null || true
      for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
      kill -KILL "$pid" 2>/dev/null || true
    fi
  fi
fi
rm -rf "$dir"
log "stopped and removed $dir"
