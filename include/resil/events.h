/* resil_event_sink: an event log, one JSON object per line. Since 0.2.
 *
 * Part of libresil-http (pkg-config resil-http: it writes JSON with jansson
 * and redacts URLs with the HTTP client's redaction rules); the umbrella
 * header resil.h does not include it.
 *
 * Every line is one JSON object with, in this order:
 *   "time"      wall time, RFC 3339 UTC with milliseconds
 *               ("2026-12-01T11:38:23.123Z"), from the sink's clock
 *   "time_ms"   the same, milliseconds since the Unix epoch
 *   "instance"  the instance's name
 *   "kind"      what happened (below)
 * then the kind's details. Kinds and their details:
 *   breaker_transition   from, to (lower case, as in resil_circuitbreaker_
 *                        state), cause, seq
 *   breaker_rejected     state, seq: a call not permitted
 *   breaker_reset, breaker_thresholds_exceeded   state, seq
 *   breaker_ramp         event (started, ended), cause, share, seq: the
 *                        ramp after recovery (breaker.h "Ramp", Since 0.2;
 *                        RAMP_STARTED and RAMP_ENDED). cause: started, that
 *                        of the HALF_OPEN -> CLOSED before it
 *                        (BELOW_THRESHOLDS, HALF_OPEN_MAX_WAIT); ended,
 *                        RAMP_COMPLETED or the transition's that cut it
 *                        short (FAILURE_RATE, MANUAL, RESET, ...). share:
 *                        the share admitted at the event's instant, the
 *                        event's ramp_share, however late the line is
 *                        written (started: the ramp's first share; ended:
 *                        1 when completed, else the share it had reached)
 *   retry                attempt, outcome, reason, http_status, duration_ms,
 *                        wait_ms (the wait before the next attempt),
 *                        idempotency_key: an attempt after which another
 *                        follows
 *   call_done            attempt, outcome, reason, http_status,
 *                        duration_ms, stop, idempotency_key: the last
 *                        attempt of a logical call (stop "RECOVERING":
 *                        a retry was due but the watched breaker was
 *                        HALF_OPEN or ramping, retry.h recovery_breaker;
 *                        outcome and reason are the last attempt's)
 *   resend_prevented     attempt, idempotency_key: libcurl's hidden re-send
 *                        of a request on a new connection was refused
 *                        (outcome flag RESIL_OF_RESEND_PREVENTED)
 *   recovered            attempt, http_status, idempotency_key: a keyed call
 *                        answered with a stored result (RESIL_OF_RECOVERED)
 *   store_recovery       selected, recovered, failed, damaged
 *   shared_fallback      segment; shared_instance (absent when the segment
 *                        itself could not be used), reason: state kept per
 *                        process instead of in a shared segment (shared.h;
 *                        "instance" is the segment's name; the registry
 *                        writes it, resil_event_shared_fallback)
 *   reload               ok, file, changed, kept, error; a successful
 *                        registry reload also replaced, added, removed and
 *                        generation (the registry emits them through
 *                        resil_event_reload_counts and, for a failed
 *                        reload, resil_event_reload: registry.h's
 *                        resil_registry_events_attach)
 *   hedge                event (sent, won, cancelled_loser, rejected,
 *                        passed_unsafe: resil_hedge_event_kind), hedge (0
 *                        the primary, k hedge k), elapsed_ms (since the
 *                        primary started), delay_ms (sent: the delay used),
 *                        outcome, reason, http_status (won, rejected; a
 *                        hedge not sent because the watched breaker was
 *                        recovering, hedge.h recovery_breaker: rejected,
 *                        outcome REJECTED, reason RECOVERING)
 *   instance_ejected, instance_returned, instance_added, instance_removed,
 *   instance_ramp_ended
 *                        upstream, url (the instance's base URL), address (a
 *                        resolved name's), index, ejections (and for
 *                        instance_ejected duration_ms, consecutive): an
 *                        instance of an upstream with several (http.h,
 *                        "Many instances"), resil_event_instance_listener.
 *                        instance_ramp_ended (Since 0.2;
 *                        RESIL_HTTP_INSTANCE_RAMP_ENDED): the ramp that
 *                        began at instance_returned (instance_ramp_ns) ran
 *                        its whole duration; share 1, duration_ms the
 *                        ramp's duration, late_ms how long after the
 *                        ramp's end the line was written (a choice
 *                        notices the end: the ramp ended at time minus
 *                        late_ms). A ramp cut short by an ejection has
 *                        no such line (instance_ejected ends it)
 *   application kinds: whatever resil_event_emit is given.
 * Never a secret: no header, no body; a URL given to resil_event_emit_url
 * is redacted as resil_http_log_fn documents (userinfo, secret-looking
 * query values, the fragment); idempotency keys are not secrets (logged as
 * the HTTP log does). Text is valid UTF-8 JSON (invalid bytes replaced by
 * U+FFFD) and never holds a raw newline: control characters, DEL, the C1
 * controls U+0080..U+009F (NEL U+0085 among them), U+2028 and U+2029 are
 * written as \uXXXX escapes.
 *
 * Adapters attach the sink to the existing listeners in one line each:
 *   resil_breaker_listener_add(br, resil_event_breaker_listener, sink);
 *   resil_hedge_listener_add(h, resil_event_hedge_listener, sink);
 *     (or hedge_cfg.on_event = resil_event_hedge_listener and
 *      hedge_cfg.on_event_user = sink at creation)
 *   retry_cfg.on_attempt = resil_event_attempt_listener;
 *   retry_cfg.on_attempt_user = sink;     (also resil_http_client_config)
 *
 * Thread-safety: every function may be called from any thread at once
 * (lines are written whole, under the sink's mutex), except
 * resil_event_sink_free(), which needs exclusive access: detach the sink
 * from every listener first.
 *
 * Create/free pair: resil_event_sink_new / resil_event_sink_free. */
#ifndef RESIL_EVENTS_H
#define RESIL_EVENTS_H

#include <stddef.h>
#include <stdint.h>

#include "alloc.h"
#include "breaker.h"
#include "call.h"
#include "clock.h"
#include "hedge.h"
#include "status.h"
#include "version.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct resil_event_sink resil_event_sink;

/* Receives one line: a NUL-terminated JSON object without the newline.
 * Runs on the thread that caused the event, under the sink's mutex (lines
 * never interleave): it must not call the sink. */
typedef void (*resil_event_line_fn)(void *user, const char *line);

typedef struct resil_event_sink_config {
  size_t struct_size; /* set by resil_event_sink_config_init() */
  /* Where lines go: a file descriptor (each line and its '\n' in one
   * write, short writes retried), or, when fd is -1 (default), fn. Not
   * owned. To reopen its file (logrotate), open the file again and dup2()
   * the new descriptor onto fd, from any thread: a line goes wholly to the
   * old file or the new one (as `resil upstream --events` does on
   * SIGHUP). */
  int fd;
  resil_event_line_fn fn;
  void *user;
  /* Wall time of the "time" fields; NULL = resil_clock_system(). */
  const resil_clock *clock;
  const resil_allocator *alloc; /* NULL = malloc/free */
} resil_event_sink_config;

/* Writes the defaults (fd -1, no fn) and struct_size. NULL is a no-op. A
 * macro passing sizeof. Since 0.2. */
RESIL_API void resil_event_sink_config_init_sized(resil_event_sink_config *cfg,
                                                  size_t struct_size);
#define resil_event_sink_config_init(cfg)                                      \
  resil_event_sink_config_init_sized((cfg), sizeof(resil_event_sink_config))

/* Returns RESIL_OK (*out set), RESIL_EINVAL (cfg or out NULL, a config not
 * passed through resil_event_sink_config_init(), neither an fd >= 0 nor a
 * fn), RESIL_ENOMEM, RESIL_ESYS (mutex). Since 0.2. */
RESIL_API resil_status resil_event_sink_new(const resil_event_sink_config *cfg,
                                            resil_event_sink **out, resil_error *err);
/* NULL is a no-op. Since 0.2. */
RESIL_API void resil_event_sink_free(resil_event_sink *s);

/* Lines written, and lines lost (out of memory, or a failed write).
 * 0 for NULL. Since 0.2. */
RESIL_API uint64_t resil_event_sink_lines(const resil_event_sink *s);
RESIL_API uint64_t resil_event_sink_dropped(const resil_event_sink *s);

/* Writes one event: instance and kind (NULL gives ""), then the members of
 * details_json, a JSON object's text (NULL for none; its keys time,
 * time_ms, instance and kind are ignored). Returns RESIL_OK, RESIL_EMISUSE
 * (NULL sink), RESIL_EINVAL (details_json is not a JSON object),
 * RESIL_ENOMEM, RESIL_EIO (the write failed). Since 0.2. */
RESIL_API resil_status resil_event_emit(resil_event_sink *s, const char *instance,
                                        const char *kind, const char *details_json);
/* As resil_event_emit, plus a member "url" holding url redacted. Since 0.2. */
RESIL_API resil_status resil_event_emit_url(resil_event_sink *s, const char *instance,
                                            const char *kind, const char *url,
                                            const char *details_json);

/* A resil_breaker_listener_fn: user is the sink. Since 0.2. */
RESIL_API void resil_event_breaker_listener(void *user, resil_breaker *br,
                                            const resil_breaker_event *ev);
/* A resil_hedge_event_fn (resil_hedge_config.on_event or
 * resil_hedge_listener_add): user is the sink;
 * instance is the hedge's name. Writes one "hedge" line per event, on the
 * thread the hedge calls it on (hedge.h). Since 0.2. */
RESIL_API void resil_event_hedge_listener(void *user, const resil_hedge_event *ev);
/* A resil_attempt_listener_fn (retry and HTTP client on_attempt): user is
 * the sink; instance is info->source. Writes retry or call_done, and
 * before it resend_prevented or recovered when the outcome's flags say so.
 * Since 0.2. */
RESIL_API void resil_event_attempt_listener(void *user, const resil_attempt_info *info);

/* A resil_http_instance_listener_fn (resil_http_client_config.on_instance):
 * user is the sink; the line's "instance" is ev->client, then upstream
 * and url (ev->upstream and ev->instance, redacted as URLs), address
 * (a resolved name's), index, ejections, and for instance_ejected
 * duration_ms and consecutive, for instance_ramp_ended share, duration_ms
 * and late_ms; kinds instance_ejected, instance_returned, instance_added,
 * instance_removed, instance_ramp_ended (RESIL_HTTP_INSTANCE_RAMP_ENDED);
 * an unknown kind is written as instance_event. Since 0.2. */
struct resil_http_instance_event;
RESIL_API void resil_event_instance_listener(void *user,
                                             const struct resil_http_instance_event *ev);

/* A registry reload (the registry calls it; so may an application): ok 1
 * or 0, file the configuration file (may be NULL), changed and kept the
 * instances replaced and kept, error the message of a failed reload (NULL
 * when ok; the userinfo of any URL in it and the values of secret-looking
 * name=value pairs are redacted as in the HTTP log). Statuses as
 * resil_event_emit. Since 0.2. */
RESIL_API resil_status resil_event_reload(resil_event_sink *s, const char *registry,
                                          int ok, const char *file, size_t changed,
                                          size_t kept, const char *error);

/* A successful registry reload with what it did (resil_registry_reload_
 * stats): ok true, file (may be NULL), changed (replaced + added +
 * removed), kept, replaced, added, removed, generation. Statuses as
 * resil_event_emit. Since 0.2. */
RESIL_API resil_status resil_event_reload_counts(resil_event_sink *s, const char *registry,
                                                 const char *file, uint64_t generation,
                                                 size_t kept, size_t replaced, size_t added,
                                                 size_t removed);

/* A shared segment's fallback to per-process state (a
 * resil_shared_fallback_fn's arguments): instance is the segment's name,
 * shared_instance the policy instance that fell back (omitted when NULL:
 * the segment itself), reason the sentence why (paths in it are written
 * as they are). Statuses as resil_event_emit. Since 0.2. */
RESIL_API resil_status resil_event_shared_fallback(resil_event_sink *s, const char *segment,
                                                   const char *instance, const char *reason);

/* A store recovery run (resil_store_recover_report's report). Statuses as
 * resil_event_emit. Since 0.2. */
typedef struct resil_store_recovery resil_store_recovery;
RESIL_API resil_status resil_event_store_recovery(resil_event_sink *s, const char *store,
                                                  const resil_store_recovery *r);

#ifdef __cplusplus
}
#endif
#endif
