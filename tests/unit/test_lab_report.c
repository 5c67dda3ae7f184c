/* The lab's HTML report (tools/lab/lab_report.c) on small hand-made
 * evidence documents: every text escaped (a summary holding <script> stays
 * text), a picture per recorded series with one drawn element per data
 * point, and a missing or malformed series giving no picture at all rather
 * than a broken one. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "lab_report.h"

/* The page for one experiment {id, experiment, title, pass, summary,
 * observed} (observed parsed from JSON text; NULL: none). */
static char *page_for(const char *id, const char *summary, const char *observed_json) {
  json_error_t err;
  json_t *obs = observed_json ? json_loads(observed_json, 0, &err) : NULL;
  if (observed_json && !obs) fail_msg("bad test JSON: %s", err.text);
  char exp[16];
  snprintf(exp, sizeof exp, "%s", id);
  char *slash = strchr(exp, '/');
  if (slash) *slash = 0;
  json_t *x = json_pack("{s:s, s:s, s:s, s:b, s:s}", "id", id, "experiment", exp, "title",
                        "a title", "pass", 1, "summary", summary);
  if (obs) json_object_set_new(x, "observed", obs);
  json_t *doc = json_pack("{s:s, s:[o], s:i, s:i}", "tool", "resil lab", "experiments", x,
                          "passed", 1, "failed", 0);
  char *buf = NULL;
  size_t len = 0;
  FILE *m = open_memstream(&buf, &len);
  assert_non_null(m);
  assert_int_equal(0, lab_report_write(doc, m));
  fclose(m);
  json_decref(doc);
  return buf;
}

static size_t count(const char *hay, const char *needle) {
  size_t n = 0;
  for (const char *p = hay; (p = strstr(p, needle)) != NULL; p += strlen(needle)) n++;
  return n;
}

static void summary_with_script_stays_text(void **state) {
  (void)state;
  char *html = page_for("P6", "<script>alert('x')</script> & \"q\"", NULL);
  assert_null(strstr(html, "<script"));
  assert_non_null(strstr(html, "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt; &amp; &quot;q&quot;"));
  free(html);
}

static void ids_titles_and_labels_are_escaped(void **state) {
  (void)state;
  char *html = page_for("H6\"><b>x", "s",
                        "{\"bars\":[{\"label\":\"<img src=x>\",\"attempts\":3,\"effects\":1}]}");
  assert_null(strstr(html, "<b>x"));
  assert_null(strstr(html, "<img"));
  assert_non_null(strstr(html, "id=\"exp-H6&quot;&gt;&lt;b&gt;x\""));
  assert_non_null(strstr(html, "&lt;img src=x&gt;"));
  free(html);
}

/* The page needs nothing from outside: no script, no external resource. */
static void page_is_self_contained(void **state) {
  (void)state;
  char *html = page_for("P6", "s",
                        "{\"timeline\":[{\"t_ms\":0,\"state\":\"CLOSED\"},"
                        "{\"t_ms\":10,\"state\":\"OPEN\"}],\"timeline_end_ms\":20}");
  assert_null(strstr(html, "<script"));
  assert_null(strstr(html, " src="));
  assert_null(strstr(html, "<link"));
  assert_null(strstr(html, "url("));
  /* The only URL is the SVG namespace name. */
  assert_int_equal(count(html, "http"), count(html, "xmlns=\"http://www.w3.org/2000/svg\""));
  free(html);
}

static void breaker_timeline_draws_every_transition(void **state) {
  (void)state;
  char *html = page_for("P6", "s",
                        "{\"timeline\":[{\"t_ms\":0,\"state\":\"CLOSED\"},"
                        "{\"t_ms\":0,\"state\":\"OPEN\"},{\"t_ms\":200,\"state\":\"HALF_OPEN\"},"
                        "{\"t_ms\":200,\"state\":\"CLOSED\"}],"
                        "\"rejected_ms\":[50],\"timeline_end_ms\":250}");
  assert_int_equal(1, count(html, "<svg"));
  assert_int_equal(1, count(html, "</svg>"));
  assert_int_equal(1, count(html, "data-kind=\"breaker-timeline\"><svg"));
  assert_int_equal(4, count(html, "<circle class=\"tr"));
  assert_int_equal(1, count(html, "<path class=\"rej\""));
  assert_non_null(strstr(html, "data-t-ms=\"200\" data-state=\"HALF_OPEN\""));
  free(html);
}

/* R1, R3: the ramp on the timeline, its span on the CLOSED lane and the
 * admitted share per bucket below; a malformed share series leaves the
 * timeline without the ramp. */
static void breaker_timeline_draws_the_ramp(void **state) {
  (void)state;
  static const char tl[] = "\"timeline\":[{\"t_ms\":0,\"state\":\"CLOSED\"},"
                           "{\"t_ms\":10,\"state\":\"OPEN\"},{\"t_ms\":310,"
                           "\"state\":\"HALF_OPEN\"},{\"t_ms\":311,\"state\":\"CLOSED\"}],"
                           "\"ramps\":[{\"from_ms\":311,\"to_ms\":711}],\"timeline_end_ms\":800";
  char doc[1024];
  snprintf(doc, sizeof doc,
           "{%s,\"ramp_share\":[{\"t_ms\":311,\"width_ms\":200,\"share\":0.1,"
           "\"decisions\":900},{\"t_ms\":511,\"width_ms\":200,\"share\":0.6,"
           "\"decisions\":300}]}",
           tl);
  char *html = page_for("R1", "s", doc);
  assert_int_equal(1, count(html, "<svg"));
  assert_int_equal(1, count(html, "data-kind=\"ramp-share\""));
  assert_int_equal(1, count(html, "<rect class=\"ramp\""));
  assert_int_equal(2, count(html, "<rect class=\"share\""));
  assert_non_null(strstr(html, "data-share=\"0.6000\" data-decisions=\"300\""));
  assert_non_null(strstr(html, "10 % first, 60 % last"));
  free(html);
  snprintf(doc, sizeof doc,
           "{%s,\"ramp_share\":[{\"t_ms\":311,\"width_ms\":200,\"share\":1.5}]}", tl);
  html = page_for("R1", "s", doc);
  assert_int_equal(1, count(html, "data-kind=\"breaker-timeline\"><svg"));
  assert_int_equal(0, count(html, "ramp-share"));
  assert_int_equal(0, count(html, "<rect class=\"ramp\""));
  free(html);
}

static void each_series_gives_its_picture(void **state) {
  (void)state;
  static const struct {
    const char *id, *observed, *kind, *element;
    size_t elements;
  } cases[] = {
      {"H5", "{\"attempts\":1,\"effects\":1}", "attempts-effects", "data-att=", 1},
      {"A6",
       "{\"bars\":[{\"label\":\"a\",\"attempts\":2,\"effects\":1},"
       "{\"label\":\"b\",\"attempts\":3,\"effects\":1}]}",
       "attempts-effects", "data-eff=", 2},
      {"P13",
       "{\"budget_layers\":[{\"layer\":\"chain\",\"budget_ms\":700,\"used_ms\":400},"
       "{\"layer\":\"tl\",\"budget_ms\":400,\"used_ms\":401}]}",
       "deadline-budget", "data-used-ms=", 2},
      {"A3", "{\"slow_call_ms\":[200,201,null],\"deadline_ms\":200}", "deadline-calls",
       "data-used-ms=", 2},
      {"P11",
       "{\"tasks\":[{\"caller_start_ms\":0,\"caller_end_ms\":25,\"task_start_ms\":0,"
       "\"task_effect_ms\":300,\"task_end_ms\":300}]}",
       "timelimiter-tasks", "<circle class=\"effect\"", 1},
      {"P14",
       "{\"layers_2x3x2\":[{\"layer\":1,\"max_attempts\":2,\"computed_attempts\":2,"
       "\"measured_attempts\":2},{\"layer\":2,\"max_attempts\":3,\"computed_attempts\":6,"
       "\"measured_attempts\":6}]}",
       "amplification", "data-meas=", 2},
      {"A1",
       "{\"in_flight_series\":[{\"t_ms\":0,\"in_flight\":0,\"done\":0},"
       "{\"t_ms\":5,\"in_flight\":10,\"done\":0},{\"t_ms\":9,\"in_flight\":0,\"done\":10}]}",
       "series", "data-points=\"3\"", 2},
      {"A5",
       "{\"concurrency_series\":[{\"t_ms\":0,\"concurrent\":10,\"waiting\":90},"
       "{\"t_ms\":50,\"concurrent\":10,\"waiting\":80}]}",
       "series", "data-field=\"waiting\"", 1},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char *html = page_for(cases[i].id, "s", cases[i].observed);
    char kind[64];
    snprintf(kind, sizeof kind, "<figure class=\"pic\" data-kind=\"%s\">", cases[i].kind);
    if (count(html, kind) != 1 || count(html, cases[i].element) != cases[i].elements ||
        count(html, "<svg") != count(html, "</svg>"))
      fail_msg("%s: %zu figures of kind %s, %zu x %s (expected %zu)", cases[i].id,
               count(html, kind), cases[i].kind, count(html, cases[i].element),
               cases[i].element, cases[i].elements);
    free(html);
  }
}

/* No series, or a series with one bad element: no <svg>, no <figure>. */
static void missing_or_malformed_series_gives_no_picture(void **state) {
  (void)state;
  static const struct {
    const char *id, *observed;
  } cases[] = {
      {"P6", NULL},
      {"P6", "{}"},
      {"P6", "{\"timeline\":[]}"},
      {"P6", "{\"timeline\":[{\"t_ms\":0,\"state\":\"CLOSED\"},{\"state\":\"OPEN\"}]}"},
      {"P7", "{\"timeline\":[{\"t_ms\":0,\"state\":3}]}"},
      {"P8", "{\"timeline\":{\"t_ms\":0}}"},
      {"H5", "{\"attempts\":1}"},
      {"H5", "{\"attempts\":\"1\",\"effects\":1}"},
      {"P1", "{\"attempts\":3,\"effects\":1}"}, /* not an attempts-vs-effects experiment */
      {"H6", "{\"bars\":[{\"label\":\"a\",\"attempts\":1}]}"},
      {"P13", "{\"budget_layers\":[{\"layer\":\"chain\",\"budget_ms\":700}]}"},
      {"A3", "{\"slow_call_ms\":[200,201]}"},
      {"A3", "{\"slow_call_ms\":[200,\"x\"],\"deadline_ms\":200}"},
      {"A3", "{\"slow_call_ms\":[null],\"deadline_ms\":200}"},
      {"P10", "{\"tasks\":[{\"caller_start_ms\":0,\"caller_end_ms\":25}]}"},
      {"P14", "{\"layers_2x3x2\":[{\"layer\":1,\"computed_attempts\":2}]}"},
      {"A1", "{\"in_flight_series\":[{\"t_ms\":0,\"in_flight\":0,\"done\":0}]}"},
      {"A5", "{\"concurrency_series\":[{\"t_ms\":0,\"concurrent\":1,\"waiting\":0},"
             "{\"t_ms\":1,\"concurrent\":1}]}"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char *html = page_for(cases[i].id, "a summary", cases[i].observed);
    if (strstr(html, "<svg") || strstr(html, "<figure"))
      fail_msg("case %zu (%s %s) drew a picture", i, cases[i].id,
               cases[i].observed ? cases[i].observed : "(none)");
    /* The experiment itself is still reported. */
    assert_non_null(strstr(html, "<p class=\"summary\">a summary</p>"));
    assert_non_null(strstr(html, "</section>"));
    free(html);
  }
}

static void a_document_without_experiments_is_refused(void **state) {
  (void)state;
  json_t *doc = json_pack("{s:s}", "tool", "resil lab");
  FILE *m = fopen("/dev/null", "w");
  assert_non_null(m);
  assert_int_equal(-1, lab_report_write(doc, m));
  fclose(m);
  json_decref(doc);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(summary_with_script_stays_text),
      cmocka_unit_test(ids_titles_and_labels_are_escaped),
      cmocka_unit_test(page_is_self_contained),
      cmocka_unit_test(breaker_timeline_draws_every_transition),
      cmocka_unit_test(breaker_timeline_draws_the_ramp),
      cmocka_unit_test(each_series_gives_its_picture),
      cmocka_unit_test(missing_or_malformed_series_gives_no_picture),
      cmocka_unit_test(a_document_without_experiments_is_refused),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
