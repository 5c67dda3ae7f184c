#!/usr/bin/env bash
# Starts a throwaway PostgreSQL server for the store tests and prints its URI
# on standard output (everything else goes to standard error):
#
#   uri=$(bash scripts/pg-start.sh)        # postgresql://resil@127.0.0.1:PORT/resil
#   RESIL_TEST_PG_URI=$uri ctest ...
#   bash scripts/pg-stop.sh "$uri"
#
# Installs nothing: it needs Debian's server binaries (package postgresql-15,
# /usr/lib/postgresql/15/bin). The cluster lives in a new temporary directory,
# listens only on 127.0.0.1 on a free port (and on a Unix socket inside that
# directory), trusts local connections, and has one database, "resil", owned
# by the superuser "resil". PostgreSQL refuses to run as root, so when run as
# root the server runs as the system user "postgres" (created by the Debian
# package), or, where that user does not exist, as a system user
# "resil-pg" created here.
#
# Environment: RESIL_PG_BINDIR overrides the directory of initdb and pg_ctl;
# TMPDIR chooses where the temporary directory goes.
set -euo pipefail

log() { echo "pg-start: $*" >&2; }

bindir=${RESIL_PG_BINDIR:-}
if [ -z "$bindir" ]; then
  for v in 15 $(ls /usr/lib/postgresql 2>/dev/null | sort -rn); do
    if [ -x "/usr/lib/postgresql/$v/bin/initdb" ]; then
      bindir=/usr/lib/postgresql/$v/bin
      break
    fi
  done
fi
if [ -z "$bindir" ] || [ ! -x "$bindir/initdb" ] || [ ! -x "$bindir/pg_ctl" ]; then
  log "no PostgreSQL server binaries (install the Debian package postgresql-15)"
  exit 1
fi

# Who runs the server, and how to run a command as that user.
as_user=()
if [ "$(id -u)" -eq 0 ]; then
  runas=postgres
  if ! id -u "$runas" >/dev/null 2>&1; then
    runas=resil-pg
    if ! id -u "$runas" >/dev/null 2>&1; then
      useradd --system --no-create-home --shell /usr/sbin/nologin "$runas"
    fi
  fi
  as_user=(runuser -u "$runas" --)
else
  runas=$(id -un)
fi

dir=$(mktemp -d "${TMPDIR:-/tmp}/resil-pg.XXXXXX")
cleanup_on_error() {
  if [ -f "$dir/data/postmaster.pid" ]; then
    "${as_user[@]}" "$bindir/pg_ctl" -D "$dir/data" -m immediate stop >/dev/null 2>&1 || true
  fi
  rm -rf "$dir"
}
trap cleanup_on_error ERR INT TERM
chmod 0700 "$dir"
[ ${#as_user[@]} -eq 0 ] || chown "$runas" "$dir"

"${as_user[@]}" "$bindir/initdb" -D "$dir/data" -U resil --auth=trust \
  --encoding=UTF8 --locale=C >"$dir/initdb.log" 2>&1 || {
  log "initdb failed:"; cat "$dir/initdb.log" >&2; false; }

# A port nobody listens on now; if another process takes it before the server
# binds it, the start fails and the next candidate is tried.
port_free() {
  ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}
started=0
for _ in $(seq 1 20); do
  port=$(( 20000 + RANDOM % 40000 ))
  port_free "$port" || continue
  if "${as_user[@]}" "$bindir/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 \
       -o "-c listen_addresses=127.0.0.1 -p $port -k $dir -c max_connections=200" \
       start >/dev/null 2>&1; then
    started=1
    break
  fi
  "${as_user[@]}" "$bindir/pg_ctl" -D "$dir/data" -m immediate stop >/dev/null 2>&1 || true
done
if [ "$started" -ne 1 ]; then
  log "the server did not start; its log:"
  cat "$dir/server.log" >&2 || true
  false
fi
echo "$port" >"$dir/port"

"${as_user[@]}" "$bindir/psql" -X -q -h "$dir" -p "$port" -U resil -d postgres \
  -c "CREATE DATABASE resil" >/dev/null

trap - ERR INT TERM
log "PostgreSQL running as $runas in $dir (port $port)"
echo "postgresql://resil@127.0.0.1:$port/resil"
