/* A `resil` command as a child process of a test (RESIL_BIN): a temp dir,
 * the child started by the test and killed by its PID, its stdout and
 * stderr in files that the test reads line by line; every wait bounded.
 * Header-only (static functions), for one test file at a time: the test
 * defines CHILD_DIR_PREFIX ("/tmp/resil-serve") before including it. */
#ifndef RESIL_TEST_CHILD_COMMON_H
#define RESIL_TEST_CHILD_COMMON_H

#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "test_util.h"

static char dir[64];
static pid_t child = -1;

static int setup(void **state) {
  (void)state;
  snprintf(dir, sizeof dir, "%s-XXXXXX", CHILD_DIR_PREFIX);
  assert_non_null(mkdtemp(dir));
  return 0;
}

static void kill_child(void) {
  if (child <= 0) return;
  kill(child, SIGKILL);
  waitpid(child, NULL, 0);
  child = -1;
}

static int teardown(void **state) {
  (void)state;
  kill_child();
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  assert_int_equal(0, system(cmd));
  return 0;
}

/* Writes text to path through a rename: a reader sees the whole file. */
static void write_text(const char *path, const char *text) {
  char tmp[256];
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  FILE *f = fopen(tmp, "w");
  assert_non_null(f);
  assert_true(fputs(text, f) >= 0);
  assert_int_equal(0, fclose(f));
  assert_int_equal(0, rename(tmp, path));
}

/* RESIL_BIN, or the test is skipped (a failure under CI=true). */
static const char *resil_bin(void) {
  const char *bin = getenv("RESIL_BIN");
  if (!bin) {
    if (getenv("CI") && strcmp(getenv("CI"), "true") == 0) fail_msg("RESIL_BIN is not set");
    skip();
  }
  return bin;
}

/* Counts the lines of path holding needle; the first one into first. */
static int count_lines(const char *path, const char *needle, char *first, size_t n) {
  FILE *f = fopen(path, "r");
  char line[1024];
  int k = 0;
  while (f && fgets(line, sizeof line, f))
    if (strstr(line, needle)) {
      if (k == 0 && first) snprintf(first, n, "%s", line);
      k++;
    }
  if (f) fclose(f);
  return k;
}

static void print_file(const char *path) {
  FILE *f = fopen(path, "r");
  char line[512];
  while (f && fgets(line, sizeof line, f)) fprintf(stderr, "  | %s", line);
  if (f) fclose(f);
}

/* Waits (up to 60 s on a loaded machine) until path has `want` lines with
 * needle; fails at once when the child has exited. */
static void wait_lines(const char *path, const char *needle, int want) {
  for (int i = 0; i < 6000; i++) {
    if (count_lines(path, needle, NULL, 0) >= want) return;
    if (child > 0 && waitpid(child, NULL, WNOHANG) == child) {
      child = -1;
      break;
    }
    test_sleep_ms(10);
  }
  print_file(path);
  fail_msg("no %d line(s) '%s' in %s", want, needle, path);
}

/* Starts `resil ARGV...` (NULL-terminated, argv[0] the command) with its
 * stdout and stderr in dir/NAME.out and .err; returns the port it says it
 * listens on. */
static unsigned start_child(const char *name, const char *const *argv) {
  const char *bin = resil_bin();
  char out[128], err[128];
  snprintf(out, sizeof out, "%s/%s.out", dir, name);
  snprintf(err, sizeof err, "%s/%s.err", dir, name);
  child = fork();
  assert_true(child >= 0);
  if (child == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    int o = open(out, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    int e = open(err, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    dup2(o, 1);
    dup2(e, 2);
    char *args[16];
    size_t n = 0;
    args[n++] = (char *)bin;
    for (; argv[n - 1] && n < 15; n++) args[n] = (char *)argv[n - 1];
    args[n] = NULL;
    execv(bin, args);
    _exit(127);
  }
  wait_lines(out, "listening on http://", 1);
  char line[1024];
  count_lines(out, "listening on http://", line, sizeof line);
  unsigned port = 0;
  const char *p = strstr(line, "http://127.0.0.1:");
  assert_non_null(p);
  assert_int_equal(1, sscanf(p, "http://127.0.0.1:%u", &port));
  return port;
}

#endif
