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
# The lab (tools/lab, the steps to add a family: tools/lab/lab_families.c)
# has its own table, the same rule (own unit or a lower rank) and these:
#   - every exp_*.c is a family, a unit of its own above the lab's shared
#     files: it never includes another family (nor any .c file), and names
#     no other family's table;
#   - the shared files (lab_result, lab_ops, lab_engine, lab_procs,
#     lab_report, lab_families) never include the runner's lab.h, which sits on top;
#   - a lab file includes only lab headers, public headers (resil/...) and
#     the fixture's fixture/fixture.h and fixture/redis_server.h: never a
#     header of tools/resil (the CLI's cmd_*.c) nor of the library's
#     internals;
#   - every family's table (const lab_experiment lab_X_experiments[]) is
#     declared in lab_families.h and listed in lab_families.c's table;
#   - the CLI (tools/resil) includes of the lab only its runner, lab.h.
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
instances     1 http/instances.h http/instances.c
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

# ---- the lab (tools/lab) and the CLI's use of it (tools/resil) -------------
cd "$root/tools"

# unit rank files (paths below tools/); every lab/exp_*.c is a unit of its
# own at rank 2 (a family), without being listed here.
lab_table='
lab_result   0 lab/lab_result.h lab/lab_result.c
lab_report   0 lab/lab_report.h lab/lab_report.c
lab_ops      1 lab/lab_ops.h lab/lab_ops.c
lab_engine   1 lab/lab_engine.h lab/lab_engine.c
lab_procs    1 lab/lab_procs.h lab/lab_procs.c
lab_families 1 lab/lab_families.h lab/lab_families.c
runner       3 lab/lab.h lab/lab.c
'
family_rank=2

declare -A lab_unit_of lab_rank_of
while read -r unit rank files; do
  [ -n "$unit" ] || continue
  lab_rank_of[$unit]=$rank
  for f in $files; do lab_unit_of[$f]=$unit; done
done <<<"$lab_table"

lab_unit_for() { # path below tools/ -> unit, or empty
  local f=$1
  if [ -n "${lab_unit_of[$f]:-}" ]; then
    echo "${lab_unit_of[$f]}"
  elif [[ $f =~ ^lab/exp_[a-z0-9_]+\.c$ ]]; then
    echo "$f"
  fi
}
lab_rank() { # unit -> rank
  if [[ $1 == lab/exp_* ]]; then echo "$family_rank"; else echo "${lab_rank_of[$1]}"; fi
}

lab_fail=0
lab_checked=0
for f in lab/*.c lab/*.h; do
  u=$(lab_unit_for "$f")
  if [ -z "$u" ]; then
    echo "check-layers: tools/$f is not in the lab's table (a family is one exp_*.c; scripts/check-layers.sh)"
    lab_fail=1
    continue
  fi
  n=0
  while IFS= read -r line; do
    n=$((n + 1))
    [[ $line =~ ^[[:space:]]*#[[:space:]]*include[[:space:]]*\"([^\"]+)\" ]] || continue
    inc=${BASH_REMATCH[1]}
    lab_checked=$((lab_checked + 1))
    if [[ $inc == *.c ]]; then
      echo "check-layers: tools/$f:$n includes $inc: the lab never includes a .c file"
      lab_fail=1
      continue
    fi
    if [[ $inc == */* ]]; then
      if [[ $inc != resil/* && $inc != fixture/fixture.h && $inc != fixture/redis_server.h ]]; then
        echo "check-layers: tools/$f:$n includes $inc: a lab file includes only lab headers, resil/..., fixture/fixture.h and fixture/redis_server.h"
        lab_fail=1
      fi
      continue
    fi
    target=lab/$inc
    if [ ! -e "$target" ]; then
      if [ -e "resil/$inc" ]; then
        echo "check-layers: tools/$f:$n includes $inc: the lab never includes the CLI (tools/resil)"
      else
        echo "check-layers: tools/$f:$n includes $inc, which is not a header of tools/lab"
      fi
      lab_fail=1
      continue
    fi
    v=$(lab_unit_for "$target")
    if [ -z "$v" ]; then
      echo "check-layers: tools/$f:$n includes $inc, which is not in the lab's table"
      lab_fail=1
      continue
    fi
    [ "$v" = "$u" ] && continue
    if [ "$(lab_rank "$v")" -ge "$(lab_rank "$u")" ]; then
      echo "check-layers: tools/$f:$n ($u, rank $(lab_rank "$u")) includes $inc ($v, rank $(lab_rank "$v")): not a lower layer of the lab"
      lab_fail=1
    fi
  done <"$f"
done

# Every family's table is declared in lab_families.h and listed in the
# registration table (lab_families.c); a family names no other's table.
for f in lab/exp_*.c; do
  mapfile -t own < <(sed -n 's/^const lab_experiment \(lab_[a-z0-9_]*_experiments\)\[\].*/\1/p' "$f" | sort -u)
  if [ "${#own[@]}" -ne 1 ]; then
    echo "check-layers: tools/$f defines ${#own[@]} tables (const lab_experiment lab_X_experiments[] at the start of a line): a family has one"
    lab_fail=1
    continue
  fi
  t=${own[0]}
  grep -q "^extern const lab_experiment $t\[\];" lab/lab_families.h ||
    { echo "check-layers: tools/$f: $t is not declared in tools/lab/lab_families.h"; lab_fail=1; }
  grep -Eq "^[[:space:]]+$t,([[:space:]]|$)" lab/lab_families.c ||
    { echo "check-layers: tools/$f: $t is not in the registration table (tools/lab/lab_families.c)"; lab_fail=1; }
  while IFS=: read -r n other; do
    [ "$other" = "$t" ] && continue
    echo "check-layers: tools/$f:$n names $other: a family never uses another family's table"
    lab_fail=1
  done < <(grep -on 'lab_[a-z0-9_]*_experiments' "$f" || true)
done

# The CLI reaches the lab through its runner's header only.
for f in resil/*.c resil/*.h; do
  n=0
  while IFS= read -r line; do
    n=$((n + 1))
    [[ $line =~ ^[[:space:]]*#[[:space:]]*include[[:space:]]*\"([^\"]+)\" ]] || continue
    inc=${BASH_REMATCH[1]}
    base=${inc##*/}
    if [[ $inc == */lab/* || $inc == lab/* || ( $inc != */* && -e lab/$inc ) ]] && [ "$base" != lab.h ]; then
      echo "check-layers: tools/$f:$n includes $inc: the CLI uses the lab through lab.h only"
      lab_fail=1
    elif [[ $inc == *.c ]]; then
      echo "check-layers: tools/$f:$n includes $inc: never a .c file"
      lab_fail=1
    fi
  done <"$f"
done

if [ "$lab_checked" -eq 0 ]; then
  echo "check-layers: no include found under $root/tools/lab"
  exit 1
fi
if [ "$lab_fail" -ne 0 ]; then
  echo "check-layers: FAILED (the lab's layers: scripts/check-layers.sh, tools/lab/lab_families.c)"
  exit 1
fi
echo "check-layers: $lab_checked includes of tools/lab go down the lab's layers, every family is registered"
