#!/usr/bin/env bash
# Checks the file layers of libresil-http and the engine (src/http/README.md):
# every #include "..." of a src/http or src/engine file that names a header
# of src/http or src/engine must name its own unit's header or one of a unit
# of a LOWER rank in the table below. An include of the same or a higher
# rank (an upward include, the start of a file-level cycle) fails, and so
# does a file or header of src/http missing from the table. Two more rules:
# src/http never includes src/engine (the engine sits above the HTTP
# layers), and src/engine includes nothing of the blocking call or the
# blocking recovery flow (request.c, recover.c). Since every include goes
# strictly down, there is no cycle between files.
#
# src/engine is one unit: its files (engine.c, keyed.c and what the engine
# grows next) may include each other's headers.
#
# Usage: scripts/check-layers.sh [SOURCE_DIR]   (run by ctest as check_layers)
set -euo pipefail
root=${1:-$(cd "$(dirname "$0")/.." && pwd)}
cd "$root/src"

# unit rank files (paths below src/)
table='
base          0 http/base.h http/base.c
template      0 http/template.h http/template.c
log           1 http/log_int.h http/log.c
response      1 http/response_int.h http/response.c
events        2 http/events.c
transfer      2 http/transfer.h http/transfer.c
slot          3 http/slot.h http/slot.c
client        4 http/client_int.h http/client.c
message       5 http/message.h http/message.c
recover_rules 6 http/recover_rules.h http/recover_rules.c
request       7 http/request.c
engine        7
recover       8 http/recover.c
metrics_http  9 http/metrics_http.c
'

declare -A unit_of rank_of
while read -r unit rank files; do
  [ -n "$unit" ] || continue
  rank_of[$unit]=$rank
  for f in $files; do unit_of[$f]=$unit; done
done <<<"$table"

unit_for() { # path below src/ -> unit, or empty
  local f=$1
  if [ -n "${unit_of[$f]:-}" ]; then
    echo "${unit_of[$f]}"
  elif [[ $f == engine/* ]]; then
    echo engine
  fi
}

fail=0
checked=0
shopt -s nullglob
for f in http/*.c http/*.h engine/*.c engine/*.h; do
  u=$(unit_for "$f")
  if [ -z "$u" ]; then
    echo "check-layers: $f is not in the layer table (scripts/check-layers.sh, src/http/README.md)"
    fail=1
    continue
  fi
  dir=${f%/*}
  n=0
  while IFS= read -r line; do
    n=$((n + 1))
    [[ $line =~ ^[[:space:]]*#[[:space:]]*include[[:space:]]*\"([^\"]+)\" ]] || continue
    inc=${BASH_REMATCH[1]}
    case $inc in
      http/* | engine/*) target=$inc ;;
      */*) continue ;; # core/, resil/, ...: below every layer here
      *) target=$dir/$inc ;;
    esac
    [[ $target == http/* || $target == engine/* ]] || continue
    checked=$((checked + 1))
    v=$(unit_for "$target")
    if [ -z "$v" ]; then
      echo "check-layers: $f:$n includes $inc, which is not in the layer table"
      fail=1
      continue
    fi
    [ "$v" = "$u" ] && continue
    if [[ $f == http/* && $target == engine/* ]]; then
      echo "check-layers: $f:$n includes $inc: src/http never includes the engine"
      fail=1
    elif [[ $u == engine && ($v == request || $v == recover) ]]; then
      echo "check-layers: $f:$n includes $inc: the engine uses nothing of the blocking call or recovery flow"
      fail=1
    elif [ "${rank_of[$v]}" -ge "${rank_of[$u]}" ]; then
      echo "check-layers: $f:$n ($u, rank ${rank_of[$u]}) includes $inc ($v, rank ${rank_of[$v]}): not a lower layer"
      fail=1
    fi
  done <"$f"
done

if [ "$checked" -eq 0 ]; then
  echo "check-layers: no include of src/http or src/engine found under $root/src"
  exit 1
fi
if [ "$fail" -ne 0 ]; then
  echo "check-layers: FAILED (the layers: src/http/README.md)"
  exit 1
fi
echo "check-layers: $checked includes of src/http and src/engine go down the layers"
