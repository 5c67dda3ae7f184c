/* The lab's HTML report (lab_report.h): one page, inline CSS and SVG, every
 * picture drawn from a series an experiment measured and recorded in its
 * `observed` object. Each picture is drawn into memory first and written
 * only when its series was complete, so a missing or malformed series
 * leaves the experiment without a picture rather than with a broken one. */
#include "lab_report.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void lab_report_escape(FILE *f, const char *s) {
  for (; s && *s; s++) {
    switch (*s) {
      case '&': fputs("&amp;", f); break;
      case '<': fputs("&lt;", f); break;
      case '>': fputs("&gt;", f); break;
      case '"': fputs("&quot;", f); break;
      case '\'': fputs("&#39;", f); break;
      default: fputc(*s, f);
    }
  }
}

/* ---- reading the series ------------------------------------------------ */

static int num(const json_t *o, const char *key, double *out) {
  const json_t *v = json_object_get(o, key);
  if (!json_is_number(v)) return 0;
  double d = json_number_value(v);
  if (!isfinite(d)) return 0;
  *out = d;
  return 1;
}

static const char *str(const json_t *o, const char *key) {
  return json_string_value(json_object_get(o, key));
}

/* ---- drawing ----------------------------------------------------------- */

enum { W = 720, LEFT = 70, RIGHT = 40 };
#define PW ((double)(W - LEFT - RIGHT))

static void svg_open(FILE *f, int h, const char *kind, const char *label) {
  fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"chart\" data-kind=\"%s\" "
             "width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" role=\"img\" aria-label=\"",
          kind, W, h, W, h);
  lab_report_escape(f, label);
  fputs("\"><title>", f);
  lab_report_escape(f, label);
  fputs("</title>", f);
}

static void figure_open(FILE *f, const char *kind) {
  fprintf(f, "<figure class=\"pic\" data-kind=\"%s\">", kind);
}

static void figure_close(FILE *f, const char *caption) {
  fputs("</svg><figcaption>", f);
  lab_report_escape(f, caption);
  fputs("</figcaption></figure>\n", f);
}

/* A horizontal axis from 0 to span (ms) at y, with five ticks. */
static void x_axis(FILE *f, double y, double span, const char *unit) {
  fprintf(f, "<line class=\"axis\" x1=\"%d\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\"/>", LEFT, y,
          LEFT + PW, y);
  for (int i = 0; i <= 4; i++) {
    double x = LEFT + PW * i / 4.0;
    fprintf(f, "<line class=\"tick\" x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\"/>", x, y, x,
            y + 4);
    fprintf(f, "<text class=\"lbl\" x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%.0f %s</text>",
            x, y + 16, span * i / 4.0, unit);
  }
}

/* A legend entry at x; returns the x of the next one. */
static double legend(FILE *f, double x, double y, const char *cls, const char *text) {
  fprintf(f, "<rect class=\"%s\" x=\"%.1f\" y=\"%.1f\" width=\"10\" height=\"10\"/>", cls, x,
          y - 9);
  fprintf(f, "<text class=\"lbl\" x=\"%.1f\" y=\"%.1f\">", x + 14, y);
  lab_report_escape(f, text);
  fputs("</text>", f);
  return x + 14 + 6.5 * (double)strlen(text) + 24;
}

/* Breaker states over time, from timeline [{t_ms, state}] (the state when
 * recording began, then each transition at its instant), rejections at
 * rejected_ms, recording ended at timeline_end_ms. */
static int state_level(const char *s) {
  if (strcmp(s, "OPEN") == 0 || strcmp(s, "FORCED_OPEN") == 0) return 0;
  if (strcmp(s, "HALF_OPEN") == 0) return 1;
  return 2;
}

/* The ramp after HALF_OPEN -> CLOSED (DESIGN §2.9) when the experiment
 * recorded it (R1, R3): observed.ramps [{from_ms, to_ms}], shaded on the
 * CLOSED lane, and observed.ramp_share [{t_ms, width_ms, share,
 * decisions}], the share of the decisions made in each bucket that the
 * breaker admitted, drawn in a band below the lanes (0..100 %). 1 when
 * ramp_share is there and well formed (every entry, share 0..1), and
 * *end the last bucket's end; 0 otherwise (the timeline is then drawn
 * without the ramp). */
static int ramp_series(const json_t *o, double *end) {
  const json_t *rs = json_object_get(o, "ramp_share");
  size_t n = json_array_size(rs);
  if (!json_is_array(rs) || n == 0) return 0;
  for (size_t i = 0; i < n; i++) {
    const json_t *b = json_array_get(rs, i);
    double t, w, sh;
    if (!num(b, "t_ms", &t) || !num(b, "width_ms", &w) || !num(b, "share", &sh) || t < 0 ||
        w <= 0 || sh < 0 || sh > 1)
      return 0;
    if (t + w > *end) *end = t + w;
  }
  return 1;
}

static void draw_ramp_lane(FILE *f, const json_t *o, double span, double y) {
  const json_t *ramps = json_object_get(o, "ramps");
  size_t n = json_array_size(ramps);
  for (size_t i = 0; i < n; i++) {
    const json_t *r = json_array_get(ramps, i);
    double a, b;
    if (!num(r, "from_ms", &a) || !num(r, "to_ms", &b) || a < 0 || b < a) continue;
    fprintf(f, "<rect class=\"ramp\" x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"18\" "
               "data-from-ms=\"%g\" data-to-ms=\"%g\"><title>ramp from %g ms to %g ms</title>"
               "</rect>",
            LEFT + PW * a / span, y - 9, PW * (b - a) / span, a, b, a, b);
  }
}

/* The band of admitted shares, from y top (100 %) to bottom (0 %). */
static void draw_ramp_share(FILE *f, const json_t *o, double span, double top, double bottom,
                            char *caption, size_t cap, size_t *used) {
  const json_t *rs = json_object_get(o, "ramp_share");
  size_t n = json_array_size(rs);
  double h = bottom - top;
  fputs("<g class=\"ramp-share\" data-kind=\"ramp-share\">", f);
  fprintf(f, "<text class=\"lbl\" x=\"%d\" y=\"%.1f\" text-anchor=\"end\">admitted</text>",
          LEFT - 6, (top + bottom) / 2 + 4);
  fprintf(f, "<text class=\"val\" x=\"%d\" y=\"%.1f\" text-anchor=\"end\">100 %%</text>",
          LEFT - 6, top + 4);
  fprintf(f, "<line class=\"axis\" x1=\"%d\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\"/>", LEFT,
          bottom, LEFT + PW, bottom);
  fprintf(f, "<line class=\"full\" x1=\"%d\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\"/>", LEFT,
          top, LEFT + PW, top);
  double first = -1, last = -1, w0 = 0;
  for (size_t i = 0; i < n; i++) {
    const json_t *b = json_array_get(rs, i);
    double t = 0, w = 0, sh = 0, d = 0;
    num(b, "t_ms", &t);
    num(b, "width_ms", &w);
    num(b, "share", &sh);
    num(b, "decisions", &d);
    if (first < 0) {
      first = sh;
      w0 = w;
    }
    last = sh;
    fprintf(f, "<rect class=\"share\" x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" "
               "data-t-ms=\"%g\" data-width-ms=\"%g\" data-share=\"%.4f\" "
               "data-decisions=\"%.0f\"><title>%g-%g ms: %.1f %% of %.0f decisions admitted"
               "</title></rect>",
            LEFT + PW * t / span, bottom - h * sh, PW * w / span, h * sh, t, w, sh, d, t, t + w,
            sh * 100, d);
  }
  fputs("</g>", f);
  int k = snprintf(caption + *used, cap - *used,
                   "; below, the share of calls admitted per %g ms bucket: %.0f %% first, "
                   "%.0f %% last",
                   w0, first * 100, last * 100);
  if (k > 0 && (size_t)k < cap - *used) *used += (size_t)k;
}

static int draw_timeline(FILE *f, const json_t *o) {
  const json_t *tl = json_object_get(o, "timeline");
  size_t n = json_array_size(tl);
  if (!json_is_array(tl) || n == 0) return 0;
  double end = 0, t;
  for (size_t i = 0; i < n; i++) {
    const json_t *e = json_array_get(tl, i);
    if (!num(e, "t_ms", &t) || !str(e, "state") || t < 0) return 0;
    if (t > end) end = t;
  }
  if (num(o, "timeline_end_ms", &t) && t > end) end = t;
  int ramp = ramp_series(o, &end);
  double span = end > 0 ? end * 1.1 : 1.0;
  const double ys[3] = {30, 65, 100};
  figure_open(f, "breaker-timeline");
  svg_open(f, ramp ? 240 : 150, "breaker-timeline",
           ramp ? "breaker state over time, with the ramp's admitted share"
                : "breaker state over time");
  if (ramp) draw_ramp_lane(f, o, span, ys[2]);
  const char *names[3] = {"OPEN", "HALF_OPEN", "CLOSED"};
  for (int i = 0; i < 3; i++)
    fprintf(f, "<text class=\"lbl\" x=\"%d\" y=\"%.1f\" text-anchor=\"end\">%s</text>", LEFT - 6,
            ys[i] + 4, names[i]);
  char caption[1024];
  size_t used = 0;
  caption[0] = 0;
  /* Segments: each state from its instant to the next one's (the last to
   * the end of the axis). */
  fputs("<polyline class=\"step\" points=\"", f);
  for (size_t i = 0; i < n; i++) {
    const json_t *e = json_array_get(tl, i);
    num(e, "t_ms", &t);
    double x = LEFT + PW * t / span;
    int lv = state_level(str(e, "state"));
    if (i > 0) {
      int plv = state_level(str(json_array_get(tl, i - 1), "state"));
      fprintf(f, "%.1f,%.1f ", x, ys[plv]);
    }
    fprintf(f, "%.1f,%.1f ", x, ys[lv]);
  }
  fprintf(f, "%.1f,%.1f\"/>", LEFT + PW,
          ys[state_level(str(json_array_get(tl, n - 1), "state"))]);
  for (size_t i = 0; i < n; i++) {
    const json_t *e = json_array_get(tl, i);
    const char *s = str(e, "state");
    num(e, "t_ms", &t);
    double next = span;
    if (i + 1 < n) num(json_array_get(tl, i + 1), "t_ms", &next);
    double x0 = LEFT + PW * t / span, x1 = LEFT + PW * next / span;
    int lv = state_level(s);
    fprintf(f, "<rect class=\"seg s%d\" x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"10\" "
               "data-state=\"",
            lv, x0, ys[lv] - 5, x1 > x0 ? x1 - x0 : 0);
    lab_report_escape(f, s);
    fprintf(f, "\" data-t-ms=\"%g\"/>", t);
    fprintf(f, "<circle class=\"tr s%d\" cx=\"%.1f\" cy=\"%.1f\" r=\"4\" data-t-ms=\"%g\" "
               "data-state=\"",
            lv, x0, ys[lv], t);
    lab_report_escape(f, s);
    fprintf(f, "\"><title>%g ms: ", t);
    lab_report_escape(f, s);
    fputs("</title></circle>", f);
    int k = snprintf(caption + used, sizeof caption - used, "%s%s at %g ms", i ? " \xe2\x86\x92 " : "",
                     s, t);
    if (k > 0 && (size_t)k < sizeof caption - used) used += (size_t)k;
  }
  const json_t *rej = json_object_get(o, "rejected_ms");
  size_t nr = json_array_size(rej);
  for (size_t i = 0; i < nr; i++) {
    const json_t *v = json_array_get(rej, i);
    if (!json_is_number(v)) continue;
    double x = LEFT + PW * json_number_value(v) / span;
    fprintf(f, "<path class=\"rej\" d=\"M%.1f,8 L%.1f,16 M%.1f,8 L%.1f,16\" data-t-ms=\"%g\">"
               "<title>call rejected at %g ms</title></path>",
            x - 4, x + 4, x + 4, x - 4, json_number_value(v), json_number_value(v));
  }
  if (ramp) draw_ramp_share(f, o, span, 125, 195, caption, sizeof caption, &used);
  x_axis(f, ramp ? 210 : 120, span, "ms");
  if (nr > 0 && used < sizeof caption - 40)
    snprintf(caption + used, sizeof caption - used, "; %zu call(s) rejected (x)", nr);
  figure_close(f, caption);
  return 1;
}

/* Grouped bars: rows of {label, a, b} with two classes. */
typedef struct bar_row {
  char label[64];
  double a, b;
} bar_row;

static void draw_bar_groups(FILE *f, const bar_row *rows, size_t n, const char *cls_a,
                            const char *name_a, const char *cls_b, const char *name_b) {
  double max = 1;
  for (size_t i = 0; i < n; i++) {
    if (rows[i].a > max) max = rows[i].a;
    if (rows[i].b > max) max = rows[i].b;
  }
  const double top = 30, base = 150, h = base - top;
  double gw = PW / (double)n, bw = gw / 3.5;
  fprintf(f, "<line class=\"axis\" x1=\"%d\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\"/>", LEFT, base,
          LEFT + PW, base);
  fprintf(f, "<text class=\"lbl\" x=\"%d\" y=\"%.1f\" text-anchor=\"end\">%g</text>", LEFT - 6,
          top + 4, max);
  fprintf(f, "<text class=\"lbl\" x=\"%d\" y=\"%.1f\" text-anchor=\"end\">0</text>", LEFT - 6,
          base + 4);
  for (size_t i = 0; i < n; i++) {
    double gx = LEFT + gw * (double)i + gw / 2;
    double vals[2] = {rows[i].a, rows[i].b};
    const char *cls[2] = {cls_a, cls_b}, *nm[2] = {name_a, name_b};
    for (int k = 0; k < 2; k++) {
      double bh = h * vals[k] / max, x = gx - bw * (k == 0 ? 1.05 : -0.05);
      fprintf(f, "<rect class=\"%s\" x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" "
                 "data-%s=\"%g\"><title>",
              cls[k], x, base - bh, bw, bh, cls[k], vals[k]);
      lab_report_escape(f, rows[i].label);
      fprintf(f, ": %g %s</title></rect>", vals[k], nm[k]);
      fprintf(f, "<text class=\"val\" x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%g</text>",
              x + bw / 2, base - bh - 4, vals[k]);
    }
    fprintf(f, "<text class=\"lbl\" x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">", gx,
            base + 16);
    lab_report_escape(f, rows[i].label);
    fputs("</text>", f);
  }
  legend(f, legend(f, LEFT, 16, cls_a, name_a), 16, cls_b, name_b);
}

/* Attempts vs effects: bars [{label, attempts, effects}], or the run's
 * attempts and effects. */
static int draw_attempts_effects(FILE *f, const json_t *o) {
  bar_row rows[8];
  size_t n = 0;
  const json_t *bars = json_object_get(o, "bars");
  if (json_is_array(bars)) {
    n = json_array_size(bars);
    if (n == 0 || n > 8) return 0;
    for (size_t i = 0; i < n; i++) {
      const json_t *e = json_array_get(bars, i);
      const char *l = str(e, "label");
      if (!l || !num(e, "attempts", &rows[i].a) || !num(e, "effects", &rows[i].b)) return 0;
      snprintf(rows[i].label, sizeof rows[i].label, "%s", l);
    }
  } else {
    if (!num(o, "attempts", &rows[0].a) || !num(o, "effects", &rows[0].b)) return 0;
    snprintf(rows[0].label, sizeof rows[0].label, "this run");
    n = 1;
  }
  figure_open(f, "attempts-effects");
  svg_open(f, 175, "attempts-effects", "attempts sent vs effects made");
  draw_bar_groups(f, rows, n, "att", "attempts", "eff", "effects");
  char cap[512];
  size_t used = 0;
  cap[0] = 0;
  for (size_t i = 0; i < n; i++) {
    int k = snprintf(cap + used, sizeof cap - used, "%s%s: %g attempt(s), %g effect(s)",
                     i ? "; " : "", rows[i].label, rows[i].a, rows[i].b);
    if (k > 0 && (size_t)k < sizeof cap - used) used += (size_t)k;
  }
  figure_close(f, cap);
  return 1;
}

/* Deadline budget per layer: budget_layers [{layer, budget_ms, used_ms}]. */
static int draw_budget(FILE *f, const json_t *o) {
  const json_t *ls = json_object_get(o, "budget_layers");
  size_t n = json_array_size(ls);
  if (!json_is_array(ls) || n == 0 || n > 16) return 0;
  double max = 0, b, u;
  for (size_t i = 0; i < n; i++) {
    const json_t *e = json_array_get(ls, i);
    if (!str(e, "layer") || !num(e, "budget_ms", &b) || !num(e, "used_ms", &u) || b < 0 || u < 0)
      return 0;
    if (b > max) max = b;
    if (u > max) max = u;
  }
  double span = max > 0 ? max * 1.05 : 1.0;
  const int left = 250;
  const double pw = W - left - 110; /* room on the right for the figures */
  int h = 30 + (int)n * 30 + 30;
  figure_open(f, "deadline-budget");
  svg_open(f, h, "deadline-budget", "deadline budget each layer used");
  legend(f, legend(f, left, 16, "budget", "budget"), 16, "used", "used (measured)");
  for (size_t i = 0; i < n; i++) {
    const json_t *e = json_array_get(ls, i);
    num(e, "budget_ms", &b);
    num(e, "used_ms", &u);
    double y = 30 + 30.0 * (double)i;
    fprintf(f, "<text class=\"lbl\" x=\"%d\" y=\"%.1f\" text-anchor=\"end\">", left - 6, y + 14);
    lab_report_escape(f, str(e, "layer"));
    fputs("</text>", f);
    fprintf(f, "<rect class=\"budget\" x=\"%d\" y=\"%.1f\" width=\"%.1f\" height=\"18\" "
               "data-budget-ms=\"%g\"/>",
            left, y, pw * b / span, b);
    fprintf(f, "<rect class=\"used%s\" x=\"%d\" y=\"%.1f\" width=\"%.1f\" height=\"10\" "
               "data-used-ms=\"%g\"><title>used %.1f ms of %.1f ms</title></rect>",
            u > b ? " over" : "", left, y + 4, pw * u / span, u, u, b);
    fprintf(f, "<text class=\"val\" x=\"%.1f\" y=\"%.1f\">%.1f / %.0f ms</text>",
            left + pw * (u > b ? u : b) / span + 6, y + 14, u, b);
  }
  /* The axis of this picture starts at its own left edge. */
  double ay = 30 + 30.0 * (double)n + 4;
  fprintf(f, "<line class=\"axis\" x1=\"%d\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\"/>", left, ay,
          left + pw, ay);
  for (int i = 0; i <= 4; i++)
    fprintf(f, "<text class=\"lbl\" x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%.0f ms</text>",
            left + pw * i / 4.0, ay + 16, span * i / 4.0);
  figure_close(f, "per layer: its budget (outline) and the time the call used of it (filled), "
                  "measured");
  return 1;
}

/* Calls against a deadline: slow_call_ms [ms or null] (submit to
 * completion), deadline_ms > 0. */
static int draw_deadline_calls(FILE *f, const json_t *o) {
  const json_t *a = json_object_get(o, "slow_call_ms");
  double dl = 0;
  size_t n = json_array_size(a), valid = 0;
  if (!json_is_array(a) || n == 0 || !num(o, "deadline_ms", &dl) || dl <= 0) return 0;
  double max = dl, mn = INFINITY;
  for (size_t i = 0; i < n; i++) {
    const json_t *v = json_array_get(a, i);
    if (json_is_null(v)) continue;
    if (!json_is_number(v)) return 0;
    double d = json_number_value(v);
    valid++;
    if (d > max) max = d;
    if (d < mn) mn = d;
  }
  if (valid == 0) return 0;
  double span = max * 1.15;
  const double top = 20, base = 150, h = base - top;
  figure_open(f, "deadline-calls");
  svg_open(f, 175, "deadline-calls", "time each call used against its deadline");
  double bw = PW / (double)n;
  for (size_t i = 0; i < n; i++) {
    const json_t *v = json_array_get(a, i);
    if (!json_is_number(v)) continue;
    /* Up to the deadline in one colour, past it in another. */
    double d = json_number_value(v), in = d < dl ? d : dl;
    double bh = h * in / span, x = LEFT + bw * (double)i;
    fprintf(f, "<rect class=\"used\" x=\"%.1f\" y=\"%.1f\" width=\"%.2f\" height=\"%.1f\" "
               "data-used-ms=\"%g\"><title>call %zu: %g ms</title></rect>",
            x, base - bh, bw * 0.8, bh, d, i + 1, d);
    if (d > dl)
      fprintf(f, "<rect class=\"used over\" x=\"%.1f\" y=\"%.1f\" width=\"%.2f\" "
                 "height=\"%.1f\" data-late-ms=\"%g\"/>",
              x, base - h * d / span, bw * 0.8, h * (d - dl) / span, d - dl);
  }
  double dy = base - h * dl / span;
  fprintf(f, "<line class=\"deadline\" x1=\"%d\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" "
             "data-deadline-ms=\"%g\"/>",
          LEFT, dy, LEFT + PW, dy, dl);
  fprintf(f, "<text class=\"lbl\" x=\"%d\" y=\"%.1f\" text-anchor=\"end\">%g ms</text>", LEFT - 6,
          dy + 4, dl);
  fprintf(f, "<line class=\"axis\" x1=\"%d\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\"/>", LEFT, base,
          LEFT + PW, base);
  char cap[256];
  snprintf(cap, sizeof cap,
           "%zu calls, each bar the time from submitting to its completion (measured), %.0f to "
           "%.0f ms; the line is the %g ms deadline, red the part past it",
           valid, mn, max, dl);
  figure_close(f, cap);
  return 1;
}

/* Time-limiter tasks: tasks [{caller_start_ms, caller_end_ms,
 * task_start_ms, task_effect_ms, task_end_ms (null: not finished)}],
 * released_ms when the test let the tasks go. */
static int draw_tasks(FILE *f, const json_t *o) {
  const json_t *ts = json_object_get(o, "tasks");
  size_t n = json_array_size(ts);
  if (!json_is_array(ts) || n == 0 || n > 8) return 0;
  double max = 0, v;
  static const char *const keys[] = {"caller_start_ms", "caller_end_ms", "task_start_ms",
                                     "task_effect_ms"};
  for (size_t i = 0; i < n; i++) {
    const json_t *e = json_array_get(ts, i);
    for (size_t k = 0; k < 4; k++) {
      if (!num(e, keys[k], &v)) return 0;
      if (v > max) max = v;
    }
    if (num(e, "task_end_ms", &v) && v > max) max = v;
    else if (!json_is_null(json_object_get(e, "task_end_ms")) && !num(e, "task_end_ms", &v))
      return 0;
  }
  double rel = -1;
  if (num(o, "released_ms", &rel) && rel > max) max = rel;
  double span = max > 0 ? max * 1.05 : 1.0;
  int h = 30 + (int)n * 50 + 30;
  figure_open(f, "timelimiter-tasks");
  svg_open(f, h, "timelimiter-tasks", "caller waits vs task ends");
  legend(f, legend(f, legend(f, LEFT, 16, "wait", "caller waits"), 16, "task", "task runs"), 16,
         "effect", "task's effect");
  for (size_t i = 0; i < n; i++) {
    const json_t *e = json_array_get(ts, i);
    double cs = 0, ce = 0, s = 0, ef = 0, te = 0;
    num(e, "caller_start_ms", &cs);
    num(e, "caller_end_ms", &ce);
    num(e, "task_start_ms", &s);
    num(e, "task_effect_ms", &ef);
    int finished = num(e, "task_end_ms", &te);
    if (!finished) te = span;
    double y = 30 + 50.0 * (double)i;
    fprintf(f, "<text class=\"lbl\" x=\"%d\" y=\"%.1f\" text-anchor=\"end\">caller %zu</text>",
            LEFT - 6, y + 11, i + 1);
    fprintf(f, "<text class=\"lbl\" x=\"%d\" y=\"%.1f\" text-anchor=\"end\">task %zu</text>",
            LEFT - 6, y + 31, i + 1);
    fprintf(f, "<rect class=\"wait\" x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"14\" "
               "data-start-ms=\"%g\" data-end-ms=\"%g\"><title>caller waited %.1f..%.1f ms"
               "</title></rect>",
            LEFT + PW * cs / span, y, PW * (ce - cs > 0 ? ce - cs : 0) / span, cs, ce, cs, ce);
    fprintf(f, "<rect class=\"task%s\" x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"14\" "
               "data-start-ms=\"%g\" data-end-ms=\"%g\"><title>task ran %.1f..%.1f ms%s</title>"
               "</rect>",
            finished ? "" : " unfinished", LEFT + PW * s / span, y + 20,
            PW * (te - s > 0 ? te - s : 0) / span, s, te, s, te, finished ? "" : " (running)");
    fprintf(f, "<circle class=\"effect\" cx=\"%.1f\" cy=\"%.1f\" r=\"4\" data-t-ms=\"%g\">"
               "<title>effect at %.1f ms</title></circle>",
            LEFT + PW * ef / span, y + 27, ef, ef);
    fprintf(f, "<line class=\"stop\" x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\"/>",
            LEFT + PW * ce / span, y - 2, LEFT + PW * ce / span, y + 36);
  }
  if (rel >= 0)
    fprintf(f, "<line class=\"deadline\" x1=\"%.1f\" y1=\"24\" x2=\"%.1f\" y2=\"%.1f\" "
               "data-t-ms=\"%g\"><title>tasks released at %.1f ms</title></line>",
            LEFT + PW * rel / span, LEFT + PW * rel / span, 30 + 50.0 * (double)n - 10, rel, rel);
  x_axis(f, 30 + 50.0 * (double)n, span, "ms");
  char cap[512];
  size_t used = 0;
  cap[0] = 0;
  for (size_t i = 0; i < n; i++) {
    const json_t *e = json_array_get(ts, i);
    double ce = 0, te = 0;
    num(e, "caller_end_ms", &ce);
    int fin = num(e, "task_end_ms", &te);
    int k = fin ? snprintf(cap + used, sizeof cap - used,
                           "%scaller %zu stopped waiting at %.1f ms, its task ended at %.1f ms",
                           i ? "; " : "", i + 1, ce, te)
                : snprintf(cap + used, sizeof cap - used,
                           "%scaller %zu stopped waiting at %.1f ms, its task had not ended",
                           i ? "; " : "", i + 1, ce);
    if (k > 0 && (size_t)k < sizeof cap - used) used += (size_t)k;
  }
  figure_close(f, cap);
  return 1;
}

/* Amplification: layers [{layer, max_attempts, computed_attempts,
 * measured_attempts}] under key. */
static int draw_amplification(FILE *f, const json_t *o, const char *key) {
  const json_t *ls = json_object_get(o, key);
  size_t n = json_array_size(ls);
  if (!json_is_array(ls) || n == 0 || n > 8) return 0;
  bar_row rows[8];
  char per[64] = "";
  size_t used = 0;
  for (size_t i = 0; i < n; i++) {
    const json_t *e = json_array_get(ls, i);
    double layer = 0, ma = 0;
    if (!num(e, "layer", &layer) || !num(e, "computed_attempts", &rows[i].a) ||
        !num(e, "measured_attempts", &rows[i].b))
      return 0;
    if (num(e, "max_attempts", &ma)) {
      int k = snprintf(per + used, sizeof per - used, "%s%g", i ? "x" : "", ma);
      if (k > 0 && (size_t)k < sizeof per - used) used += (size_t)k;
    }
    snprintf(rows[i].label, sizeof rows[i].label, "down to layer %g", layer);
  }
  figure_open(f, "amplification");
  char title[160];
  snprintf(title, sizeof title, "attempts computed vs measured, layers of %s attempts", per);
  svg_open(f, 175, "amplification", title);
  draw_bar_groups(f, rows, n, "comp", "computed (calculator)", "meas", "measured");
  char cap[256];
  snprintf(cap, sizeof cap,
           "layers of %s attempts (outermost first): worst-case attempts the calculator gives "
           "down to each layer, and the attempts that layer made; innermost %g computed, %g "
           "measured",
           per, rows[n - 1].a, rows[n - 1].b);
  figure_close(f, cap);
  return 1;
}

/* A series over time: key [{t_ms, fields...}], one polyline per field. */
static int draw_series(FILE *f, const json_t *o, const char *key, const char *const fields[2],
                       const char *const names[2], const char *title) {
  const json_t *a = json_object_get(o, key);
  size_t n = json_array_size(a);
  if (!json_is_array(a) || n < 2) return 0;
  double tmax = 0, ymax = 1, v;
  double peak[2] = {0, 0};
  for (size_t i = 0; i < n; i++) {
    const json_t *e = json_array_get(a, i);
    if (!num(e, "t_ms", &v) || v < 0) return 0;
    if (v > tmax) tmax = v;
    for (int k = 0; k < 2; k++) {
      if (!num(e, fields[k], &v)) return 0;
      if (v > ymax) ymax = v;
      if (v > peak[k]) peak[k] = v;
    }
  }
  double span = tmax > 0 ? tmax * 1.02 : 1.0;
  const double top = 30, base = 150, h = base - top;
  figure_open(f, "series");
  svg_open(f, 180, "series", title);
  legend(f, legend(f, LEFT, 16, "l0", names[0]), 16, "l1", names[1]);
  fprintf(f, "<text class=\"lbl\" x=\"%d\" y=\"%.1f\" text-anchor=\"end\">%g</text>", LEFT - 6,
          top + 4, ymax);
  fprintf(f, "<text class=\"lbl\" x=\"%d\" y=\"%.1f\" text-anchor=\"end\">0</text>", LEFT - 6,
          base + 4);
  for (int k = 0; k < 2; k++) {
    fprintf(f, "<polyline class=\"line l%d\" data-field=\"%s\" data-points=\"%zu\" "
               "data-peak=\"%g\" points=\"",
            k, fields[k], n, peak[k]);
    for (size_t i = 0; i < n; i++) {
      const json_t *e = json_array_get(a, i);
      double t = 0, y = 0;
      num(e, "t_ms", &t);
      num(e, fields[k], &y);
      fprintf(f, "%.1f,%.1f ", LEFT + PW * t / span, base - h * y / ymax);
    }
    fputs("\"/>", f);
  }
  x_axis(f, base, span, "ms");
  char cap[256];
  snprintf(cap, sizeof cap, "%zu samples over %.0f ms: %s peaked at %g, %s at %g", n, tmax,
           names[0], peak[0], names[1], peak[1]);
  figure_close(f, cap);
  return 1;
}

typedef int (*drawer)(FILE *f, const json_t *o);

static int draw_amp_a(FILE *f, const json_t *o) {
  return draw_amplification(f, o, "layers_2x3x2");
}
static int draw_amp_b(FILE *f, const json_t *o) {
  return draw_amplification(f, o, "layers_retries_2_3_2");
}
static int draw_in_flight(FILE *f, const json_t *o) {
  static const char *const fl[2] = {"in_flight", "done"};
  static const char *const nm[2] = {"calls in flight", "calls completed"};
  return draw_series(f, o, "in_flight_series", fl, nm, "calls in flight over time");
}
static int draw_concurrency(FILE *f, const json_t *o) {
  static const char *const fl[2] = {"concurrent", "waiting"};
  static const char *const nm[2] = {"concurrent (slots held)", "waiting (queued)"};
  return draw_series(f, o, "concurrency_series", fl, nm,
                     "bulkhead: concurrent calls and waiters over time");
}

/* Runs d into memory and writes its output only when it drew a picture. */
static void figure(FILE *out, drawer d, const json_t *o) {
  char *buf = NULL;
  size_t len = 0;
  FILE *m = open_memstream(&buf, &len);
  if (!m) return;
  int ok = d(m, o);
  fclose(m);
  if (ok && buf) fwrite(buf, 1, len, out);
  free(buf);
}

/* Attempts vs effects without a "bars" series only for these (others
 * record attempts and effects too, but the picture says nothing there). */
static int attempts_effects_experiment(const char *id) {
  static const char *const ids[] = {"H5", "H6", "I1", "I2", "I8", "A6"};
  for (size_t i = 0; i < sizeof ids / sizeof ids[0]; i++)
    if (id && strcmp(id, ids[i]) == 0) return 1;
  return 0;
}

static void pictures(FILE *f, const char *id, const json_t *o) {
  if (!json_is_object(o)) return;
  figure(f, draw_timeline, o);
  if (json_object_get(o, "bars") || attempts_effects_experiment(id))
    figure(f, draw_attempts_effects, o);
  figure(f, draw_budget, o);
  figure(f, draw_deadline_calls, o);
  figure(f, draw_tasks, o);
  figure(f, draw_amp_a, o);
  figure(f, draw_amp_b, o);
  figure(f, draw_in_flight, o);
  figure(f, draw_concurrency, o);
}

static const char css[] =
    "body{font-family:system-ui,-apple-system,'Segoe UI',sans-serif;margin:2em;color:#222;"
    "max-width:1100px}"
    "h1{font-size:1.6em}h2{font-size:1.1em;margin:0 0 .3em}"
    "section.exp{border:1px solid #ccc;border-left:6px solid #2a7;padding:.6em 1em;"
    "margin:1em 0;border-radius:4px}"
    "section.exp.fail{border-left-color:#c33}"
    ".verdict{font-weight:bold;padding:0 .4em;border-radius:3px;color:#fff;background:#2a7}"
    ".fail .verdict{background:#c33}"
    ".id{font-family:monospace;margin-right:.5em}"
    ".summary{font-family:monospace;font-size:.9em;white-space:pre-wrap;margin:.3em 0}"
    ".failure{color:#c33;font-family:monospace}"
    "table.versions td{padding:0 1em 0 0;font-family:monospace;font-size:.85em}"
    "figure{margin:.5em 0}figcaption{font-size:.85em;color:#555}"
    "svg.chart{background:#fafafa;border:1px solid #eee}"
    "svg .lbl{font-size:11px;fill:#444}svg .val{font-size:10px;fill:#222}"
    "svg .axis,svg .tick{stroke:#888;stroke-width:1}"
    "svg .step{fill:none;stroke:#333;stroke-width:1.5}"
    "svg .s0{fill:#d44}svg .s1{fill:#e9a020}svg .s2{fill:#3a8}"
    "svg rect.seg{opacity:.35}"
    "svg rect.ramp{fill:#3a8;opacity:.2}svg rect.share{fill:#3a8;opacity:.6}"
    "svg .full{stroke:#bbb;stroke-width:1;stroke-dasharray:3 3}"
    "svg .rej{stroke:#c00;stroke-width:2}"
    "svg .att{fill:#4a7bd0}svg .eff{fill:#e8892b}"
    "svg .comp{fill:#9aa6b8}svg .meas{fill:#4a7bd0}"
    "svg .budget{fill:#fff;stroke:#555;stroke-dasharray:4 2}"
    "svg .used{fill:#4a7bd0}svg .used.over{fill:#d44}"
    "svg .deadline{stroke:#c00;stroke-width:1.5;stroke-dasharray:6 3}"
    "svg .wait{fill:#9aa6b8}svg .task{fill:#4a7bd0}svg .task.unfinished{fill:#d44}"
    "svg .effect{fill:#e8892b;stroke:#222}svg .stop{stroke:#222;stroke-width:1}"
    "svg .line{fill:none;stroke-width:2}svg polyline.l0{stroke:#4a7bd0}"
    "svg polyline.l1{stroke:#e8892b}svg rect.l0{fill:#4a7bd0}svg rect.l1{fill:#e8892b}";

int lab_report_write(const json_t *doc, FILE *f) {
  const json_t *exps = json_object_get(doc, "experiments");
  if (!json_is_array(exps)) return -1;
  fputs("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        "<meta name=\"viewport\" content=\"width=device-width\">"
        "<title>resil lab report</title><style>",
        f);
  fputs(css, f);
  fputs("</style></head><body>\n<h1>resil lab report</h1>\n", f);
  double passed = 0, failed = 0;
  num(doc, "passed", &passed);
  num(doc, "failed", &failed);
  fprintf(f, "<p class=\"totals\">%.0f passed, %.0f failed</p>\n", passed, failed);
  const json_t *ver = json_object_get(doc, "versions");
  if (json_is_object(ver)) {
    fputs("<table class=\"versions\">", f);
    const char *k;
    const json_t *v;
    json_object_foreach((json_t *)ver, k, v) {
      fputs("<tr><td>", f);
      lab_report_escape(f, k);
      fputs("</td><td>", f);
      if (json_is_string(v))
        lab_report_escape(f, json_string_value(v));
      else if (json_is_number(v))
        fprintf(f, "%g", json_number_value(v));
      fputs("</td></tr>", f);
    }
    fputs("</table>\n", f);
  }
  size_t i;
  const json_t *x;
  json_array_foreach(exps, i, x) {
    const char *id = str(x, "id"), *exp = str(x, "experiment");
    int pass = json_is_true(json_object_get(x, "pass"));
    fprintf(f, "<section class=\"exp %s\" id=\"exp-", pass ? "pass" : "fail");
    lab_report_escape(f, id ? id : "");
    fputs("\" data-id=\"", f);
    lab_report_escape(f, id ? id : "");
    fputs("\"><h2><span class=\"id\">", f);
    lab_report_escape(f, id ? id : "?");
    fputs("</span>", f);
    lab_report_escape(f, str(x, "title"));
    fprintf(f, " <span class=\"verdict\">%s</span></h2>\n<p class=\"summary\">",
            pass ? "PASS" : "FAIL");
    lab_report_escape(f, str(x, "summary"));
    fputs("</p>\n", f);
    if (!pass && str(x, "failure")) {
      fputs("<p class=\"failure\">", f);
      lab_report_escape(f, str(x, "failure"));
      fputs("</p>\n", f);
    }
    pictures(f, exp ? exp : id, json_object_get(x, "observed"));
    fputs("</section>\n", f);
  }
  fputs("</body></html>\n", f);
  return ferror(f) ? -1 : 0;
}

int lab_report_write_file(const json_t *doc, const char *path) {
  FILE *f = fopen(path, "w");
  if (!f) return -1;
  int rc = lab_report_write(doc, f);
  if (fclose(f) != 0) rc = -1;
  return rc;
}

int lab_report_main(int argc, char **argv) {
  const char *from = NULL, *html = NULL;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--from") == 0 && i + 1 < argc)
      from = argv[++i];
    else if (strcmp(argv[i], "--html") == 0 && i + 1 < argc)
      html = argv[++i];
    else if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
      printf("usage: resil lab report --from JSON --html FILE\n"
             "  Writes the HTML report of a saved evidence document (resil lab --json).\n");
      return 0;
    } else {
      fprintf(stderr, "resil lab report: unknown argument '%s' (see resil lab report --help)\n",
              argv[i]);
      return 2;
    }
  }
  if (!from || !html) {
    fprintf(stderr, "resil lab report: needs --from JSON and --html FILE\n");
    return 2;
  }
  json_error_t err;
  json_t *doc = json_load_file(from, 0, &err);
  if (!doc) {
    fprintf(stderr, "resil lab report: %s:%d:%d: %s\n", from, err.line, err.column, err.text);
    return 2;
  }
  int rc = lab_report_write_file(doc, html);
  json_decref(doc);
  if (rc != 0) {
    fprintf(stderr, "resil lab report: cannot write %s (or %s is not a lab evidence document)\n",
            html, from);
    return 2;
  }
  printf("lab: report written to %s\n", html);
  return 0;
}
