/* What registry.c and registry_call.c share (not installed). */
#ifndef RESIL_REGISTRY_INT_H
#define RESIL_REGISTRY_INT_H

#include "resil/call.h"

struct resil_event_sink;
struct resil_http_instance_event;

/* The registry's attempt-event indirection (resil_registry_events_attach):
 * every retry and HTTP client the registry builds gets
 * resil__reg_events_on_attempt as its on_attempt listener (and every HTTP
 * client resil__reg_events_on_instance as its on_instance) with the
 * registry's box as user, and holds a reference on the box for as long as
 * it lives (it may outlive the registry under a lease). The listener
 * forwards to the sink attached now (read atomically), or drops the event
 * when none is. Built with libresil-http only (RESIL_CONFIG_HTTP). */
typedef struct resil__reg_events resil__reg_events;

/* A box with one reference and no sink; NULL out of memory. */
resil__reg_events *resil__reg_events_new(void);
void resil__reg_events_ref(resil__reg_events *b);
/* NULL is a no-op. */
void resil__reg_events_unref(resil__reg_events *b);
/* Attaches sink (NULL detaches). Returns once no listener call still uses
 * the sink attached before: the caller may then free that sink. */
void resil__reg_events_set(resil__reg_events *b, struct resil_event_sink *sink);
void resil__reg_events_on_attempt(void *user, const resil_attempt_info *info);
/* The HTTP clients' on_instance (the same box as user): forwards each
 * instance event to the sink attached now (resil_event_instance_listener),
 * or drops it when none is. */
void resil__reg_events_on_instance(void *user, const struct resil_http_instance_event *ev);
/* Writes a shared_fallback line (resil_event_shared_fallback) to the sink
 * attached now: 1 when one was attached (the line written or dropped by
 * the sink), 0 when none is (the caller keeps the line for later). */
int resil__reg_events_fallback(resil__reg_events *b, const char *segment, const char *instance,
                               const char *reason);

#endif
