/* --config FILE for the serving commands (resil fixture, resil upstream):
 * the registry loaded from FILE, its instances in the command's /metrics
 * collector, and a reload on SIGHUP. The commands wait for their signals
 * with sigwait() on the main thread (no signal handler runs); a SIGHUP
 * reopens --events FILE there and hands the reload to a reload thread
 * (resil_cli_reloader), so that a long parse never delays SIGTERM. The
 * reload runs on that normal thread while the server's threads render
 * /metrics (the registry keeps that safe: registry.h). */
#ifndef RESIL_TOOL_CONFIG_SERVE_H
#define RESIL_TOOL_CONFIG_SERVE_H

#include <signal.h>

#include "resil/metrics.h"

typedef struct resil_registry resil_registry;

/* Loads path and adds its instances to m. On an error prints
 * "PROG: FILE:LINE:COL: key: message" on stderr and returns -1 (*out
 * untouched); 0 with *out set otherwise. In a build without
 * libresil-config it says so and returns -1. */
int resil_cli_config_open(const char *prog, const char *path, resil_metrics *m,
                          resil_registry **out);

/* Reloads path into reg and says what happened on stderr:
 * "PROG: reloaded FILE: K kept, R replaced, A added, D removed" or
 * "PROG: reload failed, configuration unchanged: FILE:LINE:COL: ...".
 * Returns 0 or -1. */
int resil_cli_config_reload(const char *prog, resil_registry *reg, const char *path);

/* --events FILE: opens FILE for appending and attaches an event sink on
 * it to reg (resil_registry_events_attach: reload lines, the configured
 * breakers' transitions). 0, or -1 with a message on stderr. */
int resil_cli_config_events(const char *prog, resil_registry *reg, const char *path);

/* --events FILE again (logrotate: after `mv FILE FILE.1; kill -HUP PID`
 * new lines go to a new FILE): opens FILE and dup2()s it onto the
 * descriptor the sink writes to, so that writers on any thread see either
 * the old file or the new one, never a closed descriptor. Signal thread
 * only. 0 (also without --events), or -1 with a message on stderr (the
 * old file stays in use). */
int resil_cli_config_events_reopen(const char *prog);

/* Frees reg (NULL: nothing), taking its instances out of the collector,
 * then the event sink, if any. */
void resil_cli_config_close(resil_registry *reg);

/* The reload thread: resil_cli_config_reload(prog, reg, path) each time it
 * is kicked (kicks during a reload coalesce into one more reload). */
typedef struct resil_cli_reloader resil_cli_reloader;

/* Starts it (signals must already be blocked: the thread inherits the
 * mask). 0, or -1 with a message on stderr. */
int resil_cli_reloader_start(const char *prog, resil_registry *reg, const char *path,
                             resil_cli_reloader **out);
/* From the signal thread: asks for a reload; returns at once. */
void resil_cli_reloader_kick(resil_cli_reloader *r);
/* Stops the thread: a reload not begun is dropped; one running is waited
 * for at most wait_ms. 0: the thread ended and r is freed (NULL: 0).
 * -1: a reload is still running; r, its registry and everything the
 * registry uses (collector, event sink) must be left as they are: the
 * caller ends the process with _exit() without freeing them (the reload is
 * abandoned: the process ends before it applies anything more; no exit
 * handler or library destructor runs under the reload's thread). */
int resil_cli_reloader_stop(resil_cli_reloader *r, int wait_ms);

#endif
