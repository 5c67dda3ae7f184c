/* `resil lab --metrics FILE` and `--events FILE`: what the instances the
 * experiments used looked like from outside.
 *
 * Experiments create and free their instances themselves, so the figures
 * are taken while they live: an experiment registers an instance right
 * after creating it (lab_ops_add_*, under a short name such as "breaker")
 * and calls lab_capture(r) before it frees what it registered. The capture
 * renders those instances (each under "<experiment>_<name>", e.g.
 * "p6_breaker" or "h3_engine_client", lower case) into the run's one
 * exposition, merged family by family, so the file has every family once
 * with its HELP and TYPE lines; then it forgets them. An instance
 * registered and never captured is left out (the runner says so on
 * stderr); it must never be freed between its registration and the next
 * capture.
 *
 * Events: lab_ops_sink(r) is the run's event sink (events.h) or NULL;
 * lab_ops_breaker_events(r, br) attaches it to a breaker,
 * lab_ops_hedge_events(r, h) to a hedge (resil_hedge_listener_add), and
 * lab_ops_client_config(r, cfg, name) names an HTTP client config and
 * sets its attempt listener to the sink when it has none. The runner
 * writes one "experiment" line per experiment run (instance its id).
 *
 * Without --metrics and --events every call here is a no-op (r->ops is
 * NULL, as in the tests that run experiments directly). */
#ifndef RESIL_TOOL_LAB_OPS_H
#define RESIL_TOOL_LAB_OPS_H

#include "lab_result.h"
#include "resil/resil.h"

typedef struct lab_ops lab_ops;

/* The runner's side. lab_ops_new: NULL paths are not written; returns NULL
 * (after a message on stderr) when a file cannot be opened. */
lab_ops *lab_ops_new(const char *metrics_path, const char *events_path);
/* Before an experiment run: its id ("P6", "H3/engine"). The runner then
 * runs it with r->ops = ops (lab.c). ops NULL is a no-op. */
void lab_ops_begin(lab_ops *ops, const char *id);
/* After it (r its result): the "experiment" event line, and a warning for
 * instances it registered and did not capture. */
void lab_ops_end(lab_ops *ops, const lab_result *r);
/* Writes the exposition (when asked for) and frees. 0 or -1 (message on
 * stderr). */
int lab_ops_finish(lab_ops *ops);

/* The experiments' side. */
void lab_ops_add_breaker(lab_result *r, const char *name, resil_breaker *br);
void lab_ops_add_retry(lab_result *r, const char *name, const resil_retry *rt);
void lab_ops_add_ratelimiter(lab_result *r, const char *name, const resil_ratelimiter *rl);
void lab_ops_add_bulkhead(lab_result *r, const char *name, const resil_bulkhead *bh);
void lab_ops_add_timelimiter(lab_result *r, const char *name, const resil_timelimiter *tl);
void lab_ops_add_chain(lab_result *r, const char *name, const resil_chain *ch);
#ifdef RESIL_HAVE_HTTP
#include "resil/http.h"
void lab_ops_add_client(lab_result *r, const char *name, const resil_http_client *c);
/* Sets cfg->name to "<experiment>_<name>" when it has none (the buffer
 * lives in r's ops until the next lab_ops_begin), and cfg->on_attempt and
 * cfg->on_instance to the event log's listeners when it has none (an
 * experiment with a listener of its own can call it first and forward to
 * what it set). */
void lab_ops_client_config(lab_result *r, resil_http_client_config *cfg, const char *name);
#endif
#ifdef RESIL_HAVE_STORE
#include "resil/store.h"
void lab_ops_add_store(lab_result *r, const char *name, resil_store *s);
#endif
void lab_ops_breaker_events(lab_result *r, resil_breaker *br);
void lab_ops_hedge_events(lab_result *r, resil_hedge *h);
/* "<experiment>_<name>" for an instance's config name (the event log's
 * "instance"), valid until the next lab_ops_begin; dflt without --metrics
 * and --events. */
const char *lab_ops_name(lab_result *r, const char *name, const char *dflt);
/* Renders what r registered since the last capture into the run's
 * exposition. */
void lab_capture(lab_result *r);

#endif
