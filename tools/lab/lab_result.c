/* The experiments' result and checks (lab_result.h). */
#include "lab_result.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

void lab_result_clear(lab_result *r) {
  if (r->observed) json_decref(r->observed);
  memset(r, 0, sizeof *r);
}

int lab_check(lab_result *r, int cond, const char *fmt, ...) {
  if (!cond && r->failure[0] == 0) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->failure, sizeof r->failure, fmt, ap);
    va_end(ap);
  }
  if (!cond) r->pass = 0;
  return cond;
}

int lab_expect(lab_result *r, const char *check, int cond, const char *fmt, ...) {
  if (cond) return 1;
  if (r->failure[0] == 0) {
    int n = snprintf(r->failure, sizeof r->failure, "%s: ", check);
    if (n > 0 && (size_t)n < sizeof r->failure) {
      va_list ap;
      va_start(ap, fmt);
      vsnprintf(r->failure + n, sizeof r->failure - (size_t)n, fmt, ap);
      va_end(ap);
    }
  }
  if (!lab_check_failed(r, check)) {
    size_t used = strlen(r->failed_checks);
    snprintf(r->failed_checks + used, sizeof r->failed_checks - used, "%s ", check);
  }
  r->pass = 0;
  return 0;
}

int lab_check_failed(const lab_result *r, const char *check) {
  size_t n = strlen(check);
  for (const char *p = r->failed_checks; (p = strstr(p, check)) != NULL; p += n)
    if ((p == r->failed_checks || p[-1] == ' ') && p[n] == ' ') return 1;
  return 0;
}

static json_t *obs(lab_result *r) {
  if (!r->observed) r->observed = json_object();
  return r->observed;
}

void lab_obs_int(lab_result *r, const char *key, long long v) {
  json_object_set_new(obs(r), key, json_integer(v));
}
void lab_obs_str(lab_result *r, const char *key, const char *v) {
  json_object_set_new(obs(r), key, json_string(v ? v : ""));
}
void lab_obs_bool(lab_result *r, const char *key, int v) {
  json_object_set_new(obs(r), key, json_boolean(v));
}
void lab_obs_real(lab_result *r, const char *key, double v) {
  json_object_set_new(obs(r), key, json_real(v));
}
void lab_obs_json(lab_result *r, const char *key, json_t *v) {
  json_object_set_new(obs(r), key, v);
}

void lab_summary(lab_result *r, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(r->summary, sizeof r->summary, fmt, ap);
  va_end(ap);
}

const char *lab_path_name(int path) {
  return path == LAB_PATH_ENGINE ? "engine" : "blocking";
}

int lab_resil_bin(char *out, size_t n) {
  const char *env = getenv("RESIL_BIN");
  if (env && *env) {
    snprintf(out, n, "%s", env);
    return access(out, X_OK) == 0;
  }
  ssize_t len = readlink("/proc/self/exe", out, n - 1);
  if (len <= 0) return 0;
  out[len] = '\0';
  const char *base = strrchr(out, '/');
  return base && strcmp(base + 1, "resil") == 0;
}

int64_t lab_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}
