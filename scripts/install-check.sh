#!/usr/bin/env bash
# Installs into a scratch prefix and builds programs against the installed
# package the two ways users do, each static and shared:
#   - pkg-config (`pkg-config --cflags --libs resil-X` plus -Wl,-rpath;
#     static: `pkg-config --static --libs` with the libresil*.a archives);
#   - CMake (`find_package(resil)` in a tiny project, -DCMAKE_PREFIX_PATH),
#     linking the imported targets (resil::http, resil::http_static, ...);
# one program per library (resil, resil-http, resil-uv, resil-store,
# resil-mhd, resil-config, resil-redis) and examples/engine_registry.c, and runs them
# all with LD_LIBRARY_PATH unset. Then checks what the libraries export.
set -euo pipefail
cd "$(dirname "$0")/.."
src=$PWD
prefix=$(mktemp -d)
trap 'rm -rf "$prefix"' EXIT
unset LD_LIBRARY_PATH
# The tests and benchmarks are compiled here too (not run, not installed):
# the suite runs at -O2 (RelWithDebInfo), and -O3 warns where -O2 does not
# (GCC 12's -Wdangling-pointer failed a Release build of a test once).
# -Werror (RESIL_WERROR): this is the project's own check.
cmake -S . -B build/install -DCMAKE_BUILD_TYPE=Release -DRESIL_BUILD_TESTS=ON -DRESIL_BUILD_BENCH=ON \
      -DRESIL_WERROR=ON -DCMAKE_INSTALL_PREFIX="$prefix" >/dev/null
cmake --build build/install -j"$(nproc)" >/dev/null
cmake --install build/install >/dev/null
libdir=$(dirname "$(find "$prefix" -name libresil.so | head -1)")
export PKG_CONFIG_PATH="$libdir/pkgconfig"
have() { [ -f "$libdir/pkgconfig/$1.pc" ]; }
fail() { echo "install check: $*" >&2; exit 1; }

# ---- one version -------------------------------------------------------------
version=$(sed -n 's/^project(libresil VERSION \([0-9.]*\) .*/\1/p' CMakeLists.txt)
[ "$("$prefix/bin/resil" --version)" = "resil $version" ] || fail "resil --version is not $version"
for pc in "$libdir"/pkgconfig/resil*.pc; do
  [ "$(pkg-config --modversion "$(basename "$pc" .pc)")" = "$version" ] || fail "$pc: not version $version"
done
grep -q "PACKAGE_VERSION \"$version\"" "$libdir/cmake/resil/resilConfigVersion.cmake" ||
  fail "resilConfigVersion.cmake is not $version"

# ---- the programs ----------------------------------------------------------
mkdir "$prefix/src" "$prefix/pc" "$prefix/db"
cp examples/hello_breaker.c examples/engine_registry.c "$prefix/src/"
# <resil/http.h> exposes json_t: a program using json_* on a response
# compiles and links with resil-http alone (jansson in Requires).
cat >"$prefix/src/http_json.c" <<'C'
#include <resil/http.h>
#include <stdio.h>
int main(void) {
  resil_http_client_config cfg;
  resil_http_client_config_init(&cfg);
  json_t *j = json_pack("{s:i}", "n", 42);
  json_t *r = resil_http_response_json(NULL); /* NULL for no response */
  int ok = j && !r && json_integer_value(json_object_get(j, "n")) == 42 && cfg.struct_size;
  json_decref(j);
  puts(ok ? "http json: ok" : "http json: FAILED");
  return ok ? 0 : 1;
}
C
# <resil/uv.h> exposes uv_loop_t: a program running a libuv loop with the
# adapter compiles and links with resil-uv alone (libuv in Requires), and
# the built-in loop (libresil) comes along. libuv's own <uv.h> needs the
# POSIX types (pthread_rwlock_t), which a strict -std=c11 hides unless
# _POSIX_C_SOURCE is set (resil/uv.h says so).
cat >"$prefix/src/uv_loop.c" <<'C'
#define _POSIX_C_SOURCE 200809L
#include <resil/uv.h>
#include <stdio.h>
static int fired;
/* uv_stop: the adapter's wake handle keeps the loop alive, so a uv_run
 * whose timer already fired at the start of its pass would block in poll. */
static void on_timer(void *arg) { fired++; uv_stop(arg); }
int main(void) {
  uv_loop_t loop;
  resil_loop_adapter *a = NULL;
  if (uv_loop_init(&loop) != 0 || resil_uv_adapter_new(&loop, NULL, &a) != RESIL_OK) return 1;
  a->timer(a->self, 1000000, on_timer, &loop);
  uv_run(&loop, UV_RUN_DEFAULT);
  resil_uv_adapter_free(a);
  uv_run(&loop, UV_RUN_DEFAULT);
  resil_loop *own = NULL;
  int ok = fired == 1 && uv_loop_close(&loop) == 0 && resil_loop_new(NULL, &own) == RESIL_OK;
  resil_loop_free(own);
  puts(ok ? "uv loop: ok" : "uv loop: FAILED");
  return ok ? 0 : 1;
}
C
cat >"$prefix/src/store.c" <<'C'
#include <resil/store.h>
#include <stdio.h>
int main(int argc, char **argv) {
  if (argc != 2) return 2;
  char uri[512];
  snprintf(uri, sizeof uri, "sqlite:%s/store.db", argv[1]);
  resil_store *s = NULL;
  resil_error err;
  int ok = resil_store_open(uri, NULL, &s, &err) == RESIL_OK;
  if (!ok) puts(err.msg);
  resil_store_close(s);
  puts(ok ? "store: ok" : "store: FAILED");
  return ok ? 0 : 1;
}
C
# <resil/idem_mhd.h> exposes libmicrohttpd and libresil-store: a server
# using MHD_*, resil_store_* and resil_idem_mhd_* compiles and links with
# resil-mhd alone.
cat >"$prefix/src/mhd_idem.c" <<'C'
#define _POSIX_C_SOURCE 200809L
#include <arpa/inet.h>
#include <netinet/in.h>
#include <resil/idem_mhd.h>
#include <resil/metrics_mhd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
static resil_status effect(void *user, resil_idem_call *call, resil_op_response *out) {
  (void)user; (void)call;
  out->status = 201;
  return RESIL_OK;
}
int main(int argc, char **argv) {
  if (argc != 2) return 2;
  char uri[512];
  snprintf(uri, sizeof uri, "sqlite:%s/ops.db", argv[1]);
  resil_store *s = NULL;
  resil_error err;
  if (resil_store_open(uri, NULL, &s, &err) != RESIL_OK) { puts(err.msg); return 1; }
  resil_idem_mhd_config cfg;
  resil_idem_mhd_config_init(&cfg);
  cfg.store = s;
  cfg.handler = effect;
  resil_idem_mhd *h = NULL;
  int ok = resil_idem_mhd_new(&cfg, &h, &err) == RESIL_OK && MHD_get_version() != NULL;
  struct sockaddr_in addr = {0}; /* 127.0.0.1, a free port */
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  struct MHD_Daemon *d = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD, 0, NULL, NULL,
                                          resil_idem_mhd_access, h, MHD_OPTION_SOCK_ADDR,
                                          (struct sockaddr *)&addr, MHD_OPTION_NOTIFY_COMPLETED,
                                          resil_idem_mhd_completed, h, MHD_OPTION_END);
  ok = ok && d;
  if (d) MHD_stop_daemon(d);
  /* The /metrics helpers: the collector (libresil), the store's and the
   * helper's sources (libresil-store, libresil-mhd). */
  resil_metrics *m = NULL;
  char *text = NULL;
  ok = ok && resil_metrics_new(NULL, &m) == RESIL_OK &&
       resil_store_metrics_add(m, NULL, s) == RESIL_OK &&
       resil_idem_mhd_metrics_add(m, NULL, h) == RESIL_OK &&
       resil_metrics_render_alloc(m, &text, NULL) == RESIL_OK &&
       strstr(text, "resil_idem_requests_total{") && strstr(text, "resil_store_pending_operations{");
  (void)resil_metrics_mhd_access;
  resil_metrics_text_free(m, text);
  resil_metrics_free(m);
  resil_idem_mhd_free(h);
  resil_store_close(s);
  puts(ok ? "mhd idem: ok" : "mhd idem: FAILED");
  return ok ? 0 : 1;
}
C
# <resil/registry.h> exposes libresil's types: a program loading a registry
# file and using a breaker from it compiles and links with resil-config
# alone.
cat >"$prefix/src/registry.c" <<'C'
#include <resil/registry.h>
#include <resil/resil.h>
#include <stdio.h>
int main(int argc, char **argv) {
  resil_registry *reg = NULL;
  resil_registry_error err;
  resil_registry_error_init(&err);
  if (argc != 2 || resil_registry_load_file(argv[1], &reg, &err) != RESIL_OK) {
    char line[1024];
    resil_registry_error_format(&err, line, sizeof line);
    puts(line);
    return 1;
  }
  resil_breaker *br = resil_registry_breaker(reg, "payments");
  int ok = br && resil_breaker_state(br) == RESIL_BREAKER_CLOSED &&
           resil_registry_chain(reg, "payments") != NULL;
  resil_registry_free(reg);
  puts(ok ? "registry: ok" : "registry: FAILED");
  return ok ? 0 : 1;
}
C
# Three libraries linked the ordinary way: the program's RUNPATH names
# $libdir; the libraries they need in turn (libresil-http.so.0,
# libresil-store.so.0) are found through their own RUNPATH ($ORIGIN).
cat >"$prefix/src/runpath.c" <<'C'
#define _POSIX_C_SOURCE 200809L
#include <resil/idem_mhd.h>
#include <resil/registry.h>
#include <resil/uv.h>
#include <stdio.h>
int main(void) {
  resil_registry *reg = NULL;
  resil_registry_error err;
  resil_registry_error_init(&err);
  resil_loop_adapter *a = NULL;
  resil_idem_mhd *h = NULL;
  resil_error e;
  /* One call into each library: the NULL arguments are refused. */
  int ok = resil_registry_load_string("{}", 2, NULL, &reg, &err) == RESIL_OK &&
           resil_uv_adapter_new(NULL, NULL, &a) == RESIL_EINVAL &&
           resil_idem_mhd_new(NULL, &h, &e) == RESIL_EINVAL;
  resil_registry_free(reg);
  puts(ok ? "runpath: ok" : "runpath: FAILED");
  return ok ? 0 : 1;
}
C

# <resil/redis.h> exposes only libresil's types: a program compiles and
# links with resil-redis alone (hiredis in Requires.private), and a
# limiter on a port nobody listens on refuses by its failure policy
# (closed) without any server.
cat >"$prefix/src/redis_rl.c" <<'C'
#include <resil/redis.h>
#include <stdio.h>
int main(void) {
  resil_redis_ratelimiter_config cfg;
  resil_redis_ratelimiter_config_init(&cfg);
  cfg.uri = "redis://127.0.0.1:1/0";
  cfg.failure = RESIL_REDIS_FAILURE_CLOSED;
  resil_ratelimiter *rl = NULL;
  resil_reason why = RESIL_REASON_OK;
  int ok = resil_redis_ratelimiter_new(&cfg, &rl, NULL) == RESIL_OK &&
           resil_ratelimiter_acquire(rl, 1, NULL, &why) == RESIL_DECISION_DENY &&
           why == RESIL_REASON_RATE_LIMITER_UNAVAILABLE;
  resil_ratelimiter_free(rl);
  puts(ok ? "redis: ok" : "redis: FAILED");
  return ok ? 0 : 1;
}
C

# name, source, pkg-config modules, CMake target stem (resil::STEM, _static)
programs=(
  "hello hello_breaker.c resil resil"
  "http_json http_json.c resil-http http"
  "uv_loop uv_loop.c resil-uv uv"
  "store store.c resil-store store"
  "mhd_idem mhd_idem.c resil-mhd mhd"
  "registry registry.c resil-config config"
  "redis redis_rl.c resil-redis redis"
  "engine_registry engine_registry.c resil-config,resil-mhd config,mhd"
  "runpath runpath.c resil-uv,resil-config,resil-mhd uv,config,mhd"
)
built=()
# pkg-config, shared: the flags pkg-config gives, -Wl,-rpath for $libdir
# (--as-needed: only the libraries the program calls are its own NEEDED,
# the others are found by the libraries' RUNPATH). Static: libresil's
# archives, in the order `pkg-config --static` gives, then every other
# module the .pc files require (Requires and Requires.private: the static
# archives need the private ones too), linked shared as usual (--static
# would ask for libcurl's own private libraries, for a fully static link).
static_flags() { # modules...
  local archives="" others="" m r
  for m in $(pkg-config --static --libs "$@"); do
    case "$m" in
      -lresil*)
        m=${m#-l}
        archives+=" $libdir/lib$m.a"
        for r in $(pkg-config --print-requires --print-requires-private "$m" | awk '{print $1}'); do
          case "$r" in resil*) ;; *) others+=" $r" ;; esac
        done ;;
    esac
  done
  # shellcheck disable=SC2086
  [ -z "$others" ] || archives+=" $(pkg-config --libs $others)"
  echo "$archives -lpthread -lm"
}
for p in "${programs[@]}"; do
  read -r name file mods stems <<<"$p"
  mods=${mods//,/ }
  for m in $mods; do have "$m" || continue 2; done
  # shellcheck disable=SC2046,SC2086
  cc -std=c11 -Wall -Werror -Wl,--as-needed "$prefix/src/$file" -o "$prefix/pc/$name" \
     $(pkg-config --cflags --libs $mods) -Wl,-rpath,"$libdir"
  # shellcheck disable=SC2046,SC2086
  cc -std=c11 -Wall -Werror "$prefix/src/$file" -o "$prefix/pc/${name}_static" \
     $(pkg-config --cflags $mods) \
     $(static_flags $mods)
  if readelf -d "$prefix/pc/${name}_static" | grep -q 'NEEDED.*libresil'; then
    fail "${name}_static needs a libresil shared library"
  fi
  built+=("$name")
done

# find_package(resil): one project, each program linked with the imported
# targets, shared (resil::http, ...) and static (resil::http_static, ...);
# hello also with the long names (resil::resil_shared, resil::resil_static).
mkdir "$prefix/cmake"
{
  echo 'cmake_minimum_required(VERSION 3.18)'
  echo 'project(resil_consumer C)'
  echo 'set(CMAKE_C_STANDARD 11)'
  echo "find_package(resil $version REQUIRED)"
  echo 'add_compile_options(-Wall -Werror)'
  for name in "${built[@]}"; do
    for p in "${programs[@]}"; do
      read -r n file mods stems <<<"$p"
      [ "$n" = "$name" ] || continue
      shared="" static=""
      for s in ${stems//,/ }; do shared+=" resil::$s"; static+=" resil::${s}_static"; done
      echo "add_executable($name $prefix/src/$file)"
      echo "target_link_libraries($name PRIVATE$shared)"
      echo "add_executable(${name}_static $prefix/src/$file)"
      echo "target_link_libraries(${name}_static PRIVATE$static)"
    done
  done
  echo "add_executable(hello_long_names $prefix/src/hello_breaker.c)"
  echo 'target_link_libraries(hello_long_names PRIVATE resil::resil_shared)'
  echo "add_executable(hello_long_names_static $prefix/src/hello_breaker.c)"
  echo 'target_link_libraries(hello_long_names_static PRIVATE resil::resil_static)'
} >"$prefix/cmake/CMakeLists.txt"
cmake -S "$prefix/cmake" -B "$prefix/cmake/build" -DCMAKE_PREFIX_PATH="$prefix" \
      -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$prefix/cmake/build" -j"$(nproc)" >/dev/null
for name in "${built[@]}"; do
  if readelf -d "$prefix/cmake/build/${name}_static" | grep -q 'NEEDED.*libresil'; then
    fail "find_package ${name}_static needs a libresil shared library"
  fi
done

# Run everything, LD_LIBRARY_PATH unset (above).
run() { # program path: runs it with the arguments its source needs
  local exe=$1 name
  name=$(basename "$exe")
  name=${name%_static}
  case "$name" in
    store|mhd_idem) "$exe" "$prefix/db" ;;
    registry) "$exe" examples/config/payments-client.yaml ;;
    engine_registry)
      # Against the installed `resil fixture` (the ctest's own script).
      bash tests/examples/engine_registry.sh "$prefix/bin/resil" "$exe" \
           examples/config/engine-registry.yaml >/dev/null ;;
    *) "$exe" ;;
  esac >"$prefix/run.out" 2>&1 || { cat "$prefix/run.out" >&2; fail "$exe failed"; }
}
for name in "${built[@]}" ; do
  for exe in "$prefix/pc/$name" "$prefix/pc/${name}_static" \
             "$prefix/cmake/build/$name" "$prefix/cmake/build/${name}_static"; do
    run "$exe"
  done
done
run "$prefix/cmake/build/hello_long_names"
run "$prefix/cmake/build/hello_long_names_static"
echo "install check: ${#built[@]} programs, each through pkg-config and find_package, shared and static: ok"

# ---- RUNPATH -------------------------------------------------------------------
for so in "$libdir"/libresil*.so.*.*.*; do
  readelf -d "$so" | grep -q 'RUNPATH.*\[\$ORIGIN\]' || fail "$so has no RUNPATH \$ORIGIN"
done

# ---- exported symbols ------------------------------------------------------------
# Nothing but the public API may be exported: resil_* from libresil,
# resil_http_*, resil_engine_* (the async engine) and resil_event_* (the
# event log) from libresil-http, resil_uv_* from libresil-uv (internal
# resil__* helpers stay hidden).
check_exports() { # library file, allowed prefix (an extended regex)
  local bad
  bad=$(nm -D --defined-only "$1" | awk '$2 ~ /[TDBRW]/ {print $3}' | grep -vE "^($2)" || true)
  if [ -n "$bad" ]; then echo "unexpected exported symbols in $1: $bad" >&2; exit 1; fi
}
lib() { find "$libdir" -maxdepth 1 -name "lib$1.so.*.*.*" | head -1; }
check_exports "$(lib resil)" 'resil_[a-z]'
if have resil-http; then
  check_exports "$(lib resil-http)" 'resil_http_|resil_engine_|resil_event_'
fi
if have resil-mhd; then
  # libresil-mhd exports only resil_idem_*, resil_metrics_mhd_* and
  # resil_deadline_mhd_* (its own API; the store's functions come from
  # libresil-store).
  check_exports "$(lib resil-mhd)" 'resil_idem_|resil_metrics_mhd_|resil_deadline_mhd_'
fi
if have resil-store; then
  check_exports "$(lib resil-store)" 'resil_(store|op)_'
  # libresil-store does not need libmicrohttpd (resil_idem_mhd is in libresil-mhd).
  if pkg-config --print-requires --print-requires-private resil-store | grep -q microhttpd; then
    fail "resil-store.pc requires libmicrohttpd"
  fi
  if nm -D --defined-only "$(lib resil-store)" | grep -q 'resil_idem_'; then
    fail "libresil-store exports resil_idem_* (they belong to libresil-mhd)"
  fi
fi
if have resil-uv; then
  check_exports "$(lib resil-uv)" 'resil_uv_'
fi
if have resil-redis; then
  check_exports "$(lib resil-redis)" 'resil_redis_'
  # libresil does not depend on hiredis; resil-redis.pc keeps it private.
  if readelf -d "$(lib resil)" | grep -q 'NEEDED.*hiredis'; then fail "libresil needs hiredis"; fi
  if pkg-config --print-requires resil-redis | grep -q hiredis; then
    fail "resil-redis.pc requires hiredis publicly (<resil/redis.h> exposes none of it)"
  fi
fi
if have resil-config; then
  # libresil-config exports its own API only (the core helpers compiled in
  # stay hidden).
  check_exports "$(lib resil-config)" 'resil_registry_|resil_parse_'
fi
echo "install check: ok"
