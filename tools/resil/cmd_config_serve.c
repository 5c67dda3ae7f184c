/* --config FILE for the serving commands (config_serve.h). */
#include "config_serve.h"

#include <stdio.h>

#ifdef RESIL_HAVE_CONFIG

#include "resil/registry.h"

static void say_error(const char *prog, const char *what, const resil_registry_error *err) {
  char line[1024];
  resil_registry_error_format(err, line, sizeof line);
  fprintf(stderr, "%s: %s%s\n", prog, what, line);
}

int resil_cli_config_open(const char *prog, const char *path, resil_metrics *m,
                          resil_registry **out) {
  resil_registry_error err;
  resil_registry_error_init(&err);
  resil_registry *reg = NULL;
  if (resil_registry_load_file(path, &reg, &err) != RESIL_OK) {
    say_error(prog, "--config: ", &err);
    return -1;
  }
  resil_status st = m ? resil_registry_metrics_add(reg, m) : RESIL_OK;
  if (st != RESIL_OK) {
    fprintf(stderr, "%s: --config: cannot add its instances to /metrics: %s\n", prog,
            resil_strerror(st));
    resil_registry_free(reg);
    return -1;
  }
  *out = reg;
  return 0;
}

int resil_cli_config_reload(const char *prog, resil_registry *reg, const char *path) {
  resil_registry_error err;
  resil_registry_error_init(&err);
  if (resil_registry_reload(reg, path, &err) != RESIL_OK) {
    say_error(prog, "reload failed, configuration unchanged: ", &err);
    return -1;
  }
  resil_registry_reload_stats rs;
  if (resil_registry_last_reload(reg, &rs) == RESIL_OK)
    fprintf(stderr, "%s: reloaded %s: %zu kept, %zu replaced, %zu added, %zu removed\n", prog,
            path, rs.kept, rs.replaced, rs.added, rs.removed);
  return 0;
}

void resil_cli_config_close(resil_registry *reg) { resil_registry_free(reg); }

#else

int resil_cli_config_open(const char *prog, const char *path, resil_metrics *m,
                          resil_registry **out) {
  (void)path, (void)m, (void)out;
  fprintf(stderr, "%s: --config: this resil was built without libresil-config (libyaml)\n",
          prog);
  return -1;
}

int resil_cli_config_reload(const char *prog, resil_registry *reg, const char *path) {
  (void)prog, (void)reg, (void)path;
  return -1;
}

void resil_cli_config_close(resil_registry *reg) { (void)reg; }

#endif
