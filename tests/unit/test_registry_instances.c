/* The registry's keys for many instances of an upstream (registry.h "Many
 * instances", http.h, DESIGN §8.4): every value of a bad form is an error
 * at its key, line and column. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"

#ifdef RESIL_HAVE_CONFIG
#include "resil/registry.h"
#include "resil/resil.h"

/* ---- errors ---------------------------------------------------------------------- */

typedef struct bad_case {
  const char *lines; /* lines 4.. of the client (before its endpoints) */
  const char *key;   /* the key path after "http_client.instances.api." */
  uint32_t line, column;
  const char *says;  /* a part of the message */
  int has_range;
  int64_t min, max, got;
} bad_case;

#define E(l, k, ln, col, says) {l, k, ln, col, says, 0, 0, 0, 0}
#define LIST "      instances: [\"http://127.0.0.1:9001\", \"http://127.0.0.1:9002\"]\n"

static void every_bad_value_names_its_key_range_and_line(void **state) {
  (void)state;
  static const bad_case cases[] = {
      /* the registry's own checks: the value's form */
      E(LIST "      balance: p3c\n", "balance", 5, 16, "unknown value 'p3c' (did you mean 'p2c'?)"),
      E(LIST "      balance: least_loaded\n", "balance", 5, 16,
       "expected one of: p2c, round_robin"),
      E(LIST "      eject_consecutive: -1\n", "eject_consecutive", 5, 26,
       "expected a whole number 0..4294967295"),
      E(LIST "      eject_classes: [server_error, bogus]\n", "eject_classes", 5, 37,
       "unknown outcome class 'bogus'"),
      E(LIST "      eject_classes: server_error\n", "eject_classes", 5, 22,
       "expected a list of outcome classes"),
      E(LIST "      eject_base: 10q\n", "eject_base", 5, 19, "10q"),
      E(LIST "      eject_max_percent: half\n", "eject_max_percent", 5, 26,
       "expected a whole number 0..4294967295 (percent)"),
      E(LIST "      resolve_instances: maybe\n", "resolve_instances", 5, 26,
       "expected true or false, got 'maybe'"),
      E(LIST "      resolve_interval: soon\n", "resolve_interval", 5, 25, "soon"),
      E("      instances: http://127.0.0.1:9001\n", "instances", 4, 18,
       "expected a list of base URLs"),
      E("      instances: [\"http://127.0.0.1:9001\", [1]]\n", "instances", 4, 44,
       "item 1: expected a base URL, got a sequence"),
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    const bad_case *k = &cases[i];
    char yaml[1024];
    snprintf(yaml, sizeof yaml,
             "http_client:\n"
             "  instances:\n"
             "    api:\n"
             "%s"
             "      endpoints:\n"
             "        get: {path: /x}\n",
             k->lines);
    resil_registry *reg = NULL;
    resil_registry_error err;
    resil_registry_error_init(&err);
    resil_status st = resil_registry_load_string(yaml, strlen(yaml), "h.yaml", &reg, &err);
    char msg[1024], path[128];
    resil_registry_error_format(&err, msg, sizeof msg);
    snprintf(path, sizeof path, "http_client.instances.api.%s", k->key);
    if (st != RESIL_EINVAL || reg || strcmp(err.key_path, path) != 0 || err.line != k->line ||
        err.column != k->column || !strstr(msg, k->says) || err.has_range != k->has_range ||
        (k->has_range && (err.min != k->min || err.max != k->max || err.got != k->got)))
      fail_msg("case %zu: status %d, want %s at %u:%u saying '%s'%s\n  got: %s (range %d "
               "%lld..%lld got %lld)",
               i, (int)st, path, (unsigned)k->line, (unsigned)k->column, k->says,
               k->has_range ? " with its range" : "", msg, err.has_range, (long long)err.min,
               (long long)err.max, (long long)err.got);
    if (strstr(k->key, "instances") && strcmp(k->says, "base_url") == 0 && !strstr(msg, "instances"))
      fail_msg("case %zu: both keys must be named: %s", i, msg);
    resil_registry_free(reg);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(every_bad_value_names_its_key_range_and_line),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}

#else

int main(void) { return 77; }

#endif
