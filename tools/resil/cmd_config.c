/* resil config check [--open] FILE...: loads each registry file
 * (registry.h) as a service would, without opening its stores (no file
 * created, no server contacted: RESIL_REGISTRY_NO_OPEN) unless --open, and
 * prints one summary line per good file on stdout, or the error as
 * FILE:LINE:COL: key.path: message on stderr. Exit 0 when every file is
 * good, 2 otherwise (and on bad usage). */
#include <stdio.h>
#include <string.h>

#include "cmds.h"

#ifdef RESIL_HAVE_CONFIG
#include "resil/registry.h"

static void usage(FILE *f) {
  fprintf(f,
          "usage: resil config check [--open] FILE...\n"
          "  Loads each YAML registry file (circuitbreaker, retry, ratelimiter,\n"
          "  bulkhead, timelimiter, hedge and chain sections; see registry.h) and\n"
          "  builds every instance with the library's own validation.\n"
          "  Stores are checked (their uri's form, their settings) but not opened:\n"
          "  no database file is created, no server contacted.\n"
          "  --open  open the stores too, as a service would (creates a SQLite\n"
          "          file, connects to PostgreSQL)\n"
          "  Good file: 'FILE: OK: N instances (...)' on stdout.\n"
          "  Bad file: 'FILE:LINE:COL: key.path: message' on stderr.\n"
          "Exit status: 0 when every file is good, 2 otherwise or on bad usage.\n");
}

static int check_one(const char *file, int open) {
  resil_registry *reg = NULL;
  resil_registry_error err;
  resil_registry_error_init(&err);
  resil_registry_load_options opts;
  resil_registry_load_options_init(&opts);
  opts.flags = open ? 0 : RESIL_REGISTRY_NO_OPEN;
  if (resil_registry_load_file_ex(file, &opts, &reg, &err) != RESIL_OK) {
    char line[1024];
    resil_registry_error_format(&err, line, sizeof line);
    fprintf(stderr, "%s\n", line);
    return 2;
  }
  size_t total = resil_registry_count(reg, RESIL_REG_KIND_COUNT_);
  char parts[512] = "";
  size_t k = 0;
  for (int i = 0; i < RESIL_REG_KIND_COUNT_; i++) {
    size_t n = resil_registry_count(reg, (resil_registry_kind)i);
    if (n && k < sizeof parts)
      k += (size_t)snprintf(parts + k, sizeof parts - k, "%s%zu %s", k ? ", " : "", n,
                            resil_registry_kind_name((resil_registry_kind)i));
  }
  printf("%s: OK: %zu instance%s%s%s%s\n", file, total, total == 1 ? "" : "s",
         k ? " (" : "", parts, k ? ")" : "");
  resil_registry_free(reg);
  return 0;
}

int resil_cmd_config(int argc, char **argv) {
  if (argc >= 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
    usage(stdout);
    return 0;
  }
  if (argc < 3 || strcmp(argv[1], "check") != 0) {
    usage(stderr);
    return 2;
  }
  int first = 2, open = 0;
  if (strcmp(argv[2], "--open") == 0) {
    open = 1;
    first = 3;
  }
  if (first >= argc) {
    usage(stderr);
    return 2;
  }
  int rc = 0;
  for (int i = first; i < argc; i++)
    if (check_one(argv[i], open)) rc = 2;
  return rc;
}

#else

int resil_cmd_config(int argc, char **argv) {
  (void)argc;
  (void)argv;
  fprintf(stderr, "resil config: this resil was built without libresil-config "
                  "(libyaml not found)\n");
  return 2;
}

#endif
