#!/usr/bin/env bash
# Installs into a scratch prefix and builds a program against the installed
# headers through pkg-config, static and shared; runs both.
set -euo pipefail
cd "$(dirname "$0")/.."
prefix=$(mktemp -d)
trap 'rm -rf "$prefix"' EXIT
# The tests and benchmarks are compiled here too (not run, not installed):
# the suite runs at -O2 (RelWithDebInfo), and -O3 warns where -O2 does not
# (GCC 12's -Wdangling-pointer failed a Release build of a test once).
cmake -S . -B build/install -DCMAKE_BUILD_TYPE=Release -DRESIL_BUILD_TESTS=ON -DRESIL_BUILD_BENCH=ON \
      -DCMAKE_INSTALL_PREFIX="$prefix" >/dev/null
cmake --build build/install -j"$(nproc)" >/dev/null
cmake --install build/install >/dev/null
export PKG_CONFIG_PATH="$prefix/lib/pkgconfig:$prefix/lib/x86_64-linux-gnu/pkgconfig"
cc -std=c11 -Wall -Werror examples/hello_breaker.c -o "$prefix/hello" $(pkg-config --cflags --libs resil)
LD_LIBRARY_PATH="$prefix/lib:$prefix/lib/x86_64-linux-gnu" "$prefix/hello"
cc -std=c11 -Wall -Werror examples/hello_breaker.c -o "$prefix/hello_static" $(pkg-config --cflags resil) \
   "$(find "$prefix" -name libresil.a | head -1)" -lpthread -lm
"$prefix/hello_static"
# Nothing but the public API may be exported: resil_* from libresil,
# resil_http_*, resil_engine_* (the async engine) and resil_event_* (the
# event log) from libresil-http,
# resil_uv_* from libresil-uv (internal resil__* helpers stay hidden).
check_exports() { # library file, allowed prefix (an extended regex)
  local bad
  bad=$(nm -D --defined-only "$1" | awk '$2 ~ /[TDBRW]/ {print $3}' | grep -vE "^($2)" || true)
  if [ -n "$bad" ]; then echo "unexpected exported symbols in $1: $bad" >&2; exit 1; fi
}
check_exports "$(find "$prefix" -name 'libresil.so.*.*' | head -1)" 'resil_[a-z]'
http_so=$(find "$prefix" -name 'libresil-http.so.*.*' | head -1)
if [ -n "$http_so" ]; then
  check_exports "$http_so" 'resil_http_|resil_engine_|resil_event_'
  pkg-config --exists resil-http || { echo "resil-http.pc not installed" >&2; exit 1; }
  # <resil/http.h> exposes json_t: a program using json_* on a response
  # must compile and link with `pkg-config --cflags --libs resil-http` alone
  # (jansson in Requires, not only Requires.private).
  cat >"$prefix/http_json.c" <<'C'
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
  cc -std=c11 -Wall -Werror -Wl,--as-needed "$prefix/http_json.c" -o "$prefix/http_json" \
     $(pkg-config --cflags --libs resil-http)
  LD_LIBRARY_PATH="$prefix/lib:$prefix/lib/x86_64-linux-gnu" "$prefix/http_json"
fi
mhd_so=$(find "$prefix" -name 'libresil-mhd.so.*.*' | head -1)
if [ -n "$mhd_so" ]; then
  # libresil-mhd exports only resil_idem_* and resil_metrics_mhd_* (its own
  # API; the store's functions come from libresil-store).
  check_exports "$mhd_so" 'resil_idem_|resil_metrics_mhd_'
  pkg-config --exists resil-mhd || { echo "resil-mhd.pc not installed" >&2; exit 1; }
  # <resil/idem_mhd.h> exposes libmicrohttpd and libresil-store: a server
  # using MHD_*, resil_store_* and resil_idem_mhd_* must compile and link
  # with `pkg-config --cflags --libs resil-mhd` alone.
  cat >"$prefix/mhd_idem.c" <<'C'
#include <resil/idem_mhd.h>
#include <resil/metrics_mhd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
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
  struct MHD_Daemon *d = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD, 0, NULL, NULL,
                                          resil_idem_mhd_access, h, MHD_OPTION_NOTIFY_COMPLETED,
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
  cc -std=c11 -Wall -Werror -Wl,--as-needed "$prefix/mhd_idem.c" -o "$prefix/mhd_idem" \
     $(pkg-config --cflags --libs resil-mhd)
  mkdir "$prefix/mhd_db"
  LD_LIBRARY_PATH="$prefix/lib:$prefix/lib/x86_64-linux-gnu" "$prefix/mhd_idem" "$prefix/mhd_db"
  # The static archive links with the same flags plus --static.
  cc -std=c11 -Wall -Werror "$prefix/mhd_idem.c" -o "$prefix/mhd_idem_static" \
     $(pkg-config --cflags resil-mhd) "$(find "$prefix" -name libresil-mhd.a | head -1)" \
     "$(find "$prefix" -name libresil-store.a | head -1)" "$(find "$prefix" -name libresil.a | head -1)" \
     $(pkg-config --libs sqlite3 libpq libcrypto libmicrohttpd) -lpthread -lm
  "$prefix/mhd_idem_static" "$prefix/mhd_db"
fi
store_so=$(find "$prefix" -name 'libresil-store.so.*.*' | head -1)
if [ -n "$store_so" ]; then
  check_exports "$store_so" 'resil_(store|op)_'
  pkg-config --exists resil-store || { echo "resil-store.pc not installed" >&2; exit 1; }
  # libresil-store does not need libmicrohttpd (resil_idem_mhd is in libresil-mhd).
  if pkg-config --print-requires --print-requires-private resil-store | grep -q microhttpd; then
    echo "resil-store.pc requires libmicrohttpd" >&2; exit 1
  fi
  if nm -D --defined-only "$store_so" | grep -q 'resil_idem_'; then
    echo "libresil-store exports resil_idem_* (they belong to libresil-mhd)" >&2; exit 1
  fi
fi
uv_so=$(find "$prefix" -name 'libresil-uv.so.*.*' | head -1)
if [ -n "$uv_so" ]; then
  check_exports "$uv_so" 'resil_uv_'
  pkg-config --exists resil-uv || { echo "resil-uv.pc not installed" >&2; exit 1; }
  # <resil/uv.h> exposes uv_loop_t: a program running a libuv loop with the
  # adapter must compile and link with `pkg-config --cflags --libs resil-uv`
  # alone (libuv in Requires), and the built-in loop (libresil) comes along.
  cat >"$prefix/uv_loop.c" <<'C'
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
  a->timer(a->self, RESIL_LOOP_TEST_NS, on_timer, &loop);
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
  # libuv's own <uv.h> needs the POSIX types (pthread_rwlock_t), which a
  # strict -std=c11 hides unless _POSIX_C_SOURCE is set (resil/uv.h says so).
  cc -std=c11 -D_POSIX_C_SOURCE=200809L -Wall -Werror -Wl,--as-needed -DRESIL_LOOP_TEST_NS=1000000 "$prefix/uv_loop.c" -o "$prefix/uv_loop" \
     $(pkg-config --cflags --libs resil-uv)
  LD_LIBRARY_PATH="$prefix/lib:$prefix/lib/x86_64-linux-gnu" "$prefix/uv_loop"
fi
config_so=$(find "$prefix" -name 'libresil-config.so.*.*' | head -1)
if [ -n "$config_so" ]; then
  # libresil-config exports its own API only (the core helpers compiled in
  # stay hidden); <resil/registry.h> exposes libresil's types only, so a
  # program loading a registry file and using a breaker from it compiles and
  # links with `pkg-config --cflags --libs resil-config` alone.
  check_exports "$config_so" 'resil_registry_|resil_parse_'
  pkg-config --exists resil-config || { echo "resil-config.pc not installed" >&2; exit 1; }
  cat >"$prefix/registry.c" <<'C'
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
  cc -std=c11 -Wall -Werror -Wl,--as-needed "$prefix/registry.c" -o "$prefix/registry" \
     $(pkg-config --cflags --libs resil-config)
  LD_LIBRARY_PATH="$prefix/lib:$prefix/lib/x86_64-linux-gnu" "$prefix/registry" \
     examples/config/payments-client.yaml
fi
echo "install check: ok"
