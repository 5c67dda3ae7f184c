/* The lab as a report (issue 9, DESIGN §10): one self-contained HTML page
 * (inline CSS and SVG, no network resource, no script) drawn from the
 * lab's evidence document, the JSON `resil lab --json` writes. Per
 * experiment run: its id, title, PASS/FAIL, the observation line and, where
 * the experiment recorded the series for it in `observed`, a picture:
 *   timeline [{t_ms, state}], rejected_ms, timeline_end_ms  breaker states
 *   bars [{label, attempts, effects}] (or attempts, effects) attempts vs effects
 *   budget_layers [{layer, budget_ms, used_ms}]             deadline budget per layer
 *   slow_call_ms [ms], deadline_ms                          calls against a deadline
 *   tasks [{caller_start_ms, caller_end_ms, task_start_ms,
 *           task_effect_ms, task_end_ms}], released_ms      time-limiter tasks
 *   layers_2x3x2, layers_retries_2_3_2 [{layer,
 *           computed_attempts, measured_attempts}]          amplification
 *   in_flight_series [{t_ms, in_flight, done}]              calls in flight
 *   concurrency_series [{t_ms, concurrent, waiting}]        bulkhead slots and queue
 * A series that is missing or malformed gives no picture (never a partial
 * one). Every text from the document is HTML-escaped. */
#ifndef RESIL_TOOL_LAB_REPORT_H
#define RESIL_TOOL_LAB_REPORT_H

#include <jansson.h>
#include <stdio.h>

/* Writes the page for doc to f. Returns 0, or -1 when doc is not an
 * evidence document (no "experiments" array) or writing failed. */
int lab_report_write(const json_t *doc, FILE *f);
/* The same into the file at path (created or truncated). */
int lab_report_write_file(const json_t *doc, const char *path);
/* HTML-escapes s (& < > " ') to f. */
void lab_report_escape(FILE *f, const char *s);

/* `resil lab report --from JSON --html FILE`: the page from a saved
 * evidence document. Returns the exit status. */
int lab_report_main(int argc, char **argv);

#endif
