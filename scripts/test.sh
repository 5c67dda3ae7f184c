#!/usr/bin/env bash
# Builds and runs the whole test suite: plain, again under
# AddressSanitizer+UndefinedBehaviorSanitizer, the concurrency tests under
# ThreadSanitizer, and an install + pkg-config smoke test.
# Usage: bash scripts/test.sh [plain|asan|tsan|install]...  (default: all)
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh
jobs=$(nproc)
modes=("$@")
[ ${#modes[@]} -gt 0 ] || modes=(plain asan tsan install)

# The operation store's suite runs on SQLite always, and on PostgreSQL
# against a throwaway server on 127.0.0.1 started here (and stopped on exit).
# Under CI a server that cannot start is a failure, not a skip (and the
# store tests' _pg entries fail too when CI=true and no server is set).
# Whatever happens, the last line says whether the PostgreSQL cases ran.
pg_started=0
pg_note="SKIPPED (RESIL_NO_PG=1)"
on_exit() {
  local rc=$?
  if [ "$pg_started" = 1 ]; then
    bash scripts/pg-stop.sh "$RESIL_TEST_PG_URI" >/dev/null 2>&1 || true
  fi
  echo "== summary: PostgreSQL store cases: $pg_note"
  exit $rc
}
trap on_exit EXIT
if [ -n "${RESIL_TEST_PG_URI:-}" ]; then
  pg_note="run against RESIL_TEST_PG_URI"
elif [ "${RESIL_NO_PG:-0}" != 1 ]; then
  if uri=$(bash scripts/pg-start.sh); then
    export RESIL_TEST_PG_URI=$uri
    pg_started=1
    pg_note="run against a throwaway server ($uri)"
    echo "== PostgreSQL for the store tests: $uri"
  elif [ "${CI:-}" = true ]; then
    pg_note="FAILED (CI=true and PostgreSQL could not be started)"
    echo "test.sh: PostgreSQL could not be started" >&2
    exit 1
  else
    pg_note="SKIPPED (PostgreSQL could not be started; ctest lists test_store_pg and test_store_mt_pg as skipped)"
    echo "test.sh: PostgreSQL could not be started; its store tests are skipped" >&2
  fi
fi

run_suite() { # dir, cmake args..., then ctest args after --
  local dir=$1; shift
  local cargs=() targs=()
  while [ $# -gt 0 ] && [ "$1" != "--" ]; do cargs+=("$1"); shift; done
  [ $# -gt 0 ] && shift
  targs=("$@")
  # -Werror: the project's own builds treat warnings as errors (RESIL_WERROR).
  cmake -S . -B "$dir" -DRESIL_BUILD_BENCH=OFF -DRESIL_WERROR=ON "${cargs[@]}" >/dev/null
  cmake --build "$dir" -j"$jobs" >/dev/null
  ctest --test-dir "$dir" --output-on-failure -j2 "${targs[@]}"
}

for m in "${modes[@]}"; do
  case "$m" in
    plain)
      echo "== test suite (plain)"
      # The benchmarks are compiled here (not run) so that they cannot rot.
      run_suite build/test -DCMAKE_BUILD_TYPE=RelWithDebInfo -DRESIL_BUILD_BENCH=ON ;;
    asan)
      echo "== test suite (AddressSanitizer + UndefinedBehaviorSanitizer)"
      ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
        run_suite build/asan -DCMAKE_BUILD_TYPE=Debug -DRESIL_SANITIZE=address,undefined ;;
    tsan)
      echo "== concurrency tests (ThreadSanitizer)"
      TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:suppressions=$PWD/tests/tsan.supp" \
        run_suite build/tsan -DCMAKE_BUILD_TYPE=Debug -DRESIL_SANITIZE=thread -- -L concurrency ;;
    install)
      echo "== install and pkg-config smoke test"
      bash scripts/install-check.sh ;;
    *) echo "test.sh: unknown mode '$m' (plain|asan|tsan|install)" >&2; exit 2 ;;
  esac
done
