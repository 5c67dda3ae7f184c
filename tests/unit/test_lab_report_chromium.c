/* The lab report rendered by a real browser: `resil lab --only ... --html F`
 * on the experiments that draw pictures, then headless Chromium (Debian
 * chromium) takes a screenshot of F (a PNG, not empty), logs the page's
 * console (no message: the page has no script, so any console line is an
 * error such as a resource it could not load), and dumps the DOM it built,
 * in which every one of those experiments holds an <svg> with at least one
 * drawn element (rect, path, polyline, circle) carrying data attributes.
 * A page with a console error is checked too, so that the console check
 * is known to see errors. Skipped when chromium is not installed, except
 * under CI=true, where that is a failure. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

/* The experiments of issue 9's list, all that the lab's report draws, and
 * R1 (issue 23: the breaker's ramp on the P6-style timeline). */
static const char *const required[] = {"P6", "P7", "P8", "P10", "P11", "P13", "P14", "H5", "H6",
                                       "I1", "I2", "I8", "A1", "A3", "A5", "A6", "R1"};
#define NREQ (sizeof required / sizeof required[0])

static char dir[64];

static void need_chromium(void) {
  if (system("command -v chromium >/dev/null 2>&1") == 0) return;
  const char *ci = getenv("CI");
  if (ci && strcmp(ci, "true") == 0)
    fail_msg("chromium not found and CI=true: install Debian's chromium (scripts/deps.sh)");
  fprintf(stderr, "SKIPPED: chromium not found (Debian package chromium)\n");
  skip();
}

static char *slurp(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *buf = malloc((size_t)(n > 0 ? n : 0) + 1);
  size_t got = buf ? fread(buf, 1, (size_t)(n > 0 ? n : 0), f) : 0;
  fclose(f);
  if (!buf) return NULL;
  buf[got] = 0;
  if (len) *len = got;
  return buf;
}

/* Runs chromium headless on file://page with args; stdout to out, stderr
 * (its log, with the page's console) to log. Returns the exit status. */
static int chromium(const char *page, const char *args, const char *out, const char *log) {
  char cmd[2048];
  snprintf(cmd, sizeof cmd,
           "timeout 90 chromium --headless=new --no-sandbox --disable-gpu --no-first-run "
           "--user-data-dir=%s/profile --enable-logging=stderr --v=0 %s 'file://%s' "
           ">'%s' 2>'%s'",
           dir, args, page, out, log);
  return system(cmd);
}

/* Lines of the log that are the page's console output. */
static size_t console_lines(const char *log, char *first, size_t first_size) {
  size_t n = 0;
  first[0] = 0;
  for (const char *p = log; (p = strstr(p, ":CONSOLE")) != NULL; p++) {
    if (n++ == 0) {
      const char *eol = strchr(p, '\n');
      snprintf(first, first_size, "%.*s", (int)(eol ? eol - p : (long)strlen(p)), p);
    }
  }
  return n;
}

/* The section of experiment run id in the DOM (from its opening tag to its
 * end), copied into a new string; NULL when absent. */
static char *section(const char *dom, const char *id) {
  char open[64];
  snprintf(open, sizeof open, "id=\"exp-%s\"", id);
  const char *s = strstr(dom, open);
  if (!s) return NULL;
  const char *e = strstr(s, "</section>");
  if (!e) return NULL;
  return strndup(s, (size_t)(e - s));
}

/* 1 when sec holds an <svg> with a drawn element carrying a data-
 * attribute inside it. */
static int drawn_svg(const char *sec) {
  const char *svg = strstr(sec, "<svg");
  if (!svg) return 0;
  const char *end = strstr(svg, "</svg>");
  if (!end) return 0;
  static const char *const tags[] = {"<rect", "<path", "<polyline", "<circle"};
  for (size_t t = 0; t < 4; t++)
    for (const char *p = svg; (p = strstr(p, tags[t])) != NULL && p < end; p++) {
      const char *close = strchr(p, '>');
      const char *data = strstr(p, " data-");
      if (close && data && data < close) return 1;
    }
  return 0;
}

static void report_renders_in_chromium(void **state) {
  (void)state;
  need_chromium();
#ifndef RESIL_TOOL_PATH
  skip();
#else
  char html[128], json[128], png[128], dom[128], log[128], cmd[1024];
  snprintf(html, sizeof html, "%s/report.html", dir);
  snprintf(json, sizeof json, "%s/evidence.json", dir);
  snprintf(png, sizeof png, "%s/report.png", dir);
  snprintf(dom, sizeof dom, "%s/dom.html", dir);
  snprintf(log, sizeof log, "%s/chromium.log", dir);
  char only[256] = "";
  for (size_t i = 0; i < NREQ; i++) {
    strcat(only, required[i]);
    if (i + 1 < NREQ) strcat(only, ",");
  }
  snprintf(cmd, sizeof cmd, "'%s' lab --only %s --json '%s' --html '%s' >'%s/lab.out' 2>&1",
           RESIL_TOOL_PATH, only, json, html, dir);
  int rc = system(cmd);
  /* A failed experiment (exit 1) still has its section and series; only a
   * usage or write error (2) stops here. */
  if (!(WIFEXITED(rc) && (WEXITSTATUS(rc) == 0 || WEXITSTATUS(rc) == 1))) {
    char lab_out[128];
    snprintf(lab_out, sizeof lab_out, "%s/lab.out", dir);
    char *o = slurp(lab_out, NULL);
    fprintf(stderr, "%s\n", o ? o : "(no output)");
    free(o);
    fail_msg("resil lab --html failed (status %d)", rc);
  }
  struct stat st;
  assert_int_equal(0, stat(html, &st));
  assert_true(st.st_size > 0);

  /* The screenshot. */
  char args[256];
  snprintf(args, sizeof args, "--screenshot=%s --window-size=1200,4000", png);
  char out[128];
  snprintf(out, sizeof out, "%s/shot.out", dir);
  rc = chromium(html, args, out, log);
  assert_int_equal(0, rc);
  size_t plen = 0;
  char *pdata = slurp(png, &plen);
  assert_non_null(pdata);
  static const unsigned char sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  assert_true(plen > 1000);
  assert_memory_equal(pdata, sig, 8);
  free(pdata);
  char *l = slurp(log, NULL);
  assert_non_null(l);
  char first[512];
  size_t nc = console_lines(l, first, sizeof first);
  free(l);
  if (nc) fail_msg("%zu console line(s) while rendering the report, first: %s", nc, first);

  /* The DOM chromium built. */
  rc = chromium(html, "--dump-dom", dom, log);
  assert_int_equal(0, rc);
  l = slurp(log, NULL);
  assert_non_null(l);
  nc = console_lines(l, first, sizeof first);
  free(l);
  if (nc) fail_msg("%zu console line(s) while loading the report, first: %s", nc, first);
  char *d = slurp(dom, NULL);
  assert_non_null(d);
  size_t checked = 0;
  for (size_t i = 0; i < NREQ; i++) {
    /* The blocking run, and the engine run where there is one. */
    for (int path = 0; path < 2; path++) {
      char id[32];
      snprintf(id, sizeof id, "%s%s", required[i], path ? "/engine" : "");
      char *sec = section(d, id);
      if (!sec) {
        if (path == 0) fail_msg("no section for %s in the rendered DOM", id);
        continue;
      }
      if (!drawn_svg(sec)) fail_msg("%s: no <svg> with a drawn, data-carrying element", id);
      /* R1's timeline carries the ramp: its span on the CLOSED lane and
       * the admitted share per bucket, one bar each. */
      if (strcmp(id, "R1") == 0 &&
          (!strstr(sec, "data-kind=\"ramp-share\"") || !strstr(sec, "class=\"ramp\"") ||
           !strstr(sec, "class=\"share\"")))
        fail_msg("R1: the timeline does not draw the ramp and its admitted share");
      free(sec);
      checked++;
    }
  }
  fprintf(stderr, "checked %zu experiment runs' pictures in chromium's DOM; screenshot %s\n",
          checked, png);
  free(d);
#endif
}

/* The console check sees a console error when there is one. */
static void console_check_sees_an_error(void **state) {
  (void)state;
  need_chromium();
  char page[128], out[128], log[128];
  snprintf(page, sizeof page, "%s/broken.html", dir);
  snprintf(out, sizeof out, "%s/broken.out", dir);
  snprintf(log, sizeof log, "%s/broken.log", dir);
  FILE *f = fopen(page, "w");
  assert_non_null(f);
  fputs("<!DOCTYPE html><html><body><script>console.error('broken');</script></body></html>\n",
        f);
  fclose(f);
  assert_int_equal(0, chromium(page, "--dump-dom", out, log));
  char *l = slurp(log, NULL);
  assert_non_null(l);
  char first[512];
  assert_true(console_lines(l, first, sizeof first) >= 1);
  assert_non_null(strstr(first, "broken"));
  free(l);
}

static int setup(void **state) {
  (void)state;
  snprintf(dir, sizeof dir, "/tmp/resil_report_XXXXXX");
  return mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **state) {
  (void)state;
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  return system(cmd) == 0 ? 0 : -1;
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(console_check_sees_an_error),
      cmocka_unit_test(report_renders_in_chromium),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
