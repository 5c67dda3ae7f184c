/* resil_event_sink (events.h): JSON lines with jansson; URLs through the
 * HTTP log's redaction (log.c). */
#include <errno.h>
#include <jansson.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/internal.h"
#include "core/redact.h"
#include "http/base.h"
#include "http/log_int.h"
#include "http/template.h"
#include "resil/events.h"
#include "resil/http.h"
#include "resil/store.h"

struct resil_event_sink {
  int fd;
  resil_event_line_fn fn;
  void *user;
  const resil_clock *clock;
  const resil_allocator *alloc;
  pthread_mutex_t mu;
  _Atomic uint64_t lines, dropped;
};

/* The 0.2 layout is the first: every field. */
#define SINK_CONFIG_MIN_SIZE                                                   \
  (offsetof(resil_event_sink_config, alloc) + sizeof(const resil_allocator *))

static void defaults(resil_event_sink_config *c) {
  memset(c, 0, sizeof *c);
  c->struct_size = sizeof *c;
  c->fd = -1;
}

void resil_event_sink_config_init_sized(resil_event_sink_config *cfg, size_t n) {
  if (!cfg) return;
  resil_event_sink_config full;
  defaults(&full);
  resil__sized_out(cfg, n, &full, sizeof full);
}

resil_status resil_event_sink_new(const resil_event_sink_config *ucfg,
                                  resil_event_sink **out, resil_error *err) {
  if (!ucfg || !out) return resil__err(err, RESIL_EINVAL, ucfg ? "out" : "cfg", "must not be NULL");
  resil_event_sink_config cfg;
  defaults(&cfg);
  resil_status st = resil__sized_in(&cfg, sizeof cfg, ucfg, SINK_CONFIG_MIN_SIZE,
                                    "resil_event_sink_config",
                                    "resil_event_sink_config_init", err);
  if (st) return st;
  if (cfg.fd < 0 && !cfg.fn)
    return resil__err(err, RESIL_EINVAL, "fd", "needs a file descriptor >= 0 or a fn");
  resil_event_sink *s = resil__calloc(cfg.alloc, sizeof *s);
  if (!s) return RESIL_ENOMEM;
  if (pthread_mutex_init(&s->mu, NULL) != 0) {
    resil__free(cfg.alloc, s);
    return RESIL_ESYS;
  }
  s->fd = cfg.fd;
  s->fn = cfg.fd < 0 ? cfg.fn : NULL;
  s->user = cfg.user;
  s->clock = resil__clock(cfg.clock);
  s->alloc = cfg.alloc;
  *out = s;
  return RESIL_OK;
}

void resil_event_sink_free(resil_event_sink *s) {
  if (!s) return;
  pthread_mutex_destroy(&s->mu);
  resil__free(s->alloc, s);
}

uint64_t resil_event_sink_lines(const resil_event_sink *s) {
  return s ? atomic_load(&((resil_event_sink *)s)->lines) : 0;
}

uint64_t resil_event_sink_dropped(const resil_event_sink *s) {
  return s ? atomic_load(&((resil_event_sink *)s)->dropped) : 0;
}

/* ---- building a line ---------------------------------------------------- */

/* A JSON string of s: invalid UTF-8 bytes become U+FFFD. */
static json_t *jstr(const char *s) {
  if (!s) s = "";
  size_t n = strlen(s);
  if (resil__utf8_valid(s, n)) return json_stringn(s, n);
  char *t = malloc(3 * n + 1);
  if (!t) return NULL;
  size_t o = 0;
  for (size_t i = 0; i < n;) {
    /* The longest valid sequence from i (1..4 bytes), else one bad byte. */
    size_t k = 4;
    while (k > 1 && (i + k > n || !resil__utf8_valid(s + i, k))) k--;
    if (k == 1 && (unsigned char)s[i] >= 0x80) {
      memcpy(t + o, "\xef\xbf\xbd", 3);
      o += 3;
    } else {
      memcpy(t + o, s + i, k);
      o += k;
    }
    i += k;
  }
  json_t *j = json_stringn(t, o);
  free(t);
  return j;
}

static json_t *head(resil_event_sink *s, const char *instance, const char *kind) {
  json_t *o = json_object();
  if (!o) return NULL;
  int64_t ms = resil_clock_wall_ms(s->clock);
  time_t secs = (time_t)(ms / 1000);
  struct tm tm;
  char ts[40] = "1970-01-01T00:00:00";
  if (gmtime_r(&secs, &tm)) strftime(ts, sizeof ts, "%Y-%m-%dT%H:%M:%S", &tm);
  char full[48];
  snprintf(full, sizeof full, "%s.%03dZ", ts, (int)(ms % 1000));
  json_object_set_new(o, "time", json_string(full));
  json_object_set_new(o, "time_ms", json_integer(ms));
  json_object_set_new(o, "instance", jstr(instance));
  json_object_set_new(o, "kind", jstr(kind));
  return o;
}

/* jansson writes DEL, the C1 controls U+0080..U+009F (NEL, U+0085, among
 * them), U+2028 and U+2029 as raw bytes: valid JSON, but controls for a
 * terminal and line breaks for JavaScript before ES2019 and for log viewers
 * that split on Unicode line terminators. Each is inside a string of the
 * line (keys and values are the only places text goes), where "\uXXXX"
 * means the same character. Returns text itself when nothing needs it, a
 * new malloc'd line otherwise (text freed), NULL when out of memory (text
 * freed). */
static size_t invisible_len(const unsigned char *p) {
  if (p[0] == 0x7f) return 1;
  if (p[0] == 0xc2 && p[1] >= 0x80 && p[1] <= 0x9f) return 2;
  if (p[0] == 0xe2 && p[1] == 0x80 && (p[2] == 0xa8 || p[2] == 0xa9)) return 3;
  return 0;
}

static char *escape_invisible(char *text) {
  size_t n = strlen(text), extra = 0;
  for (size_t i = 0; i < n;) {
    size_t k = invisible_len((const unsigned char *)text + i);
    extra += k ? 6 - k : 0;
    i += k ? k : 1;
  }
  if (extra == 0) return text;
  char *out = malloc(n + extra + 2); /* + the newline write_line puts in */
  if (out) {
    size_t o = 0;
    for (size_t i = 0; i < n;) {
      const unsigned char *p = (const unsigned char *)text + i;
      size_t k = invisible_len(p);
      if (k == 0) {
        out[o++] = text[i++];
        continue;
      }
      unsigned cp = k == 1 ? 0x7fu : k == 2 ? (unsigned)p[1] : 0x2000u | (p[2] == 0xa8 ? 0x28u : 0x29u);
      o += (size_t)snprintf(out + o, 7, "\\u%04x", cp);
      i += k;
    }
    out[o] = '\0';
  }
  free(text);
  return out;
}

static resil_status write_line(resil_event_sink *s, json_t *o) {
  char *text = json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER);
  json_decref(o);
  if (text) text = escape_invisible(text);
  if (!text) {
    atomic_fetch_add(&s->dropped, 1);
    return RESIL_ENOMEM;
  }
  resil_status st = RESIL_OK;
  pthread_mutex_lock(&s->mu);
  if (s->fn) {
    s->fn(s->user, text);
  } else {
    size_t n = strlen(text);
    text[n] = '\n'; /* json_dumps' NUL becomes the newline: one write */
    const char *p = text;
    size_t left = n + 1;
    while (left > 0) {
      ssize_t k = write(s->fd, p, left);
      if (k < 0 && errno == EINTR) continue;
      if (k <= 0) {
        st = RESIL_EIO;
        break;
      }
      p += k;
      left -= (size_t)k;
    }
  }
  pthread_mutex_unlock(&s->mu);
  free(text);
  atomic_fetch_add(st == RESIL_OK ? &s->lines : &s->dropped, 1);
  return st;
}

static resil_status emit(resil_event_sink *s, const char *instance, const char *kind,
                         const char *url, const char *details_json) {
  if (!s) return RESIL_EMISUSE;
  json_t *d = NULL;
  if (details_json) {
    d = json_loads(details_json, JSON_REJECT_DUPLICATES, NULL);
    if (!json_is_object(d)) {
      json_decref(d);
      return RESIL_EINVAL;
    }
  }
  json_t *o = head(s, instance, kind);
  if (!o) {
    json_decref(d);
    atomic_fetch_add(&s->dropped, 1);
    return RESIL_ENOMEM;
  }
  if (url) {
    http_buf b = {0};
    if (resil__http_redact_url(s->alloc, &b, url) == 0 && b.p)
      json_object_set_new(o, "url", jstr(b.p));
    else
      json_object_set_new(o, "url", json_string("[REDACTED]"));
    resil__http_buf_free(s->alloc, &b);
  }
  const char *k;
  json_t *v;
  json_object_foreach(d, k, v) {
    if (strcmp(k, "time") && strcmp(k, "time_ms") && strcmp(k, "instance") &&
        strcmp(k, "kind") && !(url && strcmp(k, "url") == 0))
      json_object_set(o, k, v);
  }
  json_decref(d);
  return write_line(s, o);
}

resil_status resil_event_emit(resil_event_sink *s, const char *instance, const char *kind,
                              const char *details_json) {
  return emit(s, instance, kind, NULL, details_json);
}

resil_status resil_event_emit_url(resil_event_sink *s, const char *instance,
                                  const char *kind, const char *url,
                                  const char *details_json) {
  return emit(s, instance, kind, url ? url : "", details_json);
}

/* ---- adapters ----------------------------------------------------------- */

static const char *state_label(resil_breaker_state_kind st) {
  static const char *const names[] = {"closed", "open", "half_open",
                                      "disabled", "forced_open", "metrics_only"};
  return (unsigned)st < 6 ? names[st] : "unknown";
}

void resil_event_breaker_listener(void *user, resil_breaker *br,
                                  const resil_breaker_event *ev) {
  resil_event_sink *s = user;
  if (!s || !ev) return;
  int ramp = ev->kind == RESIL_BREAKER_EVENT_RAMP_STARTED ||
             ev->kind == RESIL_BREAKER_EVENT_RAMP_ENDED;
  const char *kind = ev->kind == RESIL_BREAKER_EVENT_TRANSITION      ? "breaker_transition"
                     : ev->kind == RESIL_BREAKER_EVENT_NOT_PERMITTED ? "breaker_rejected"
                     : ev->kind == RESIL_BREAKER_EVENT_RESET         ? "breaker_reset"
                     : ev->kind == RESIL_BREAKER_EVENT_THRESHOLDS_EXCEEDED
                         ? "breaker_thresholds_exceeded"
                     : ramp ? "breaker_ramp"
                            : "breaker_event";
  json_t *o = head(s, resil_breaker_name(br), kind);
  if (!o) {
    atomic_fetch_add(&s->dropped, 1);
    return;
  }
  if (ramp) {
    /* The ramp after recovery (breaker.h "Ramp"): its start with the
     * cause of the HALF_OPEN -> CLOSED before it, its end with its own
     * cause (RAMP_COMPLETED, or the transition that cut it short); share
     * is the share at the event's instant, the event's ramp_share (a
     * listener ahead of this one, or a slow sink, may write the line when
     * the share has moved on, or the breaker has opened). An event of the
     * 0.1 layout (a caller's own copy) has none: the share now. */
    int has_share = ev->struct_size >= offsetof(resil_breaker_event, ramp_share) +
                                           sizeof ev->ramp_share;
    json_object_set_new(o, "event", json_string(ev->kind == RESIL_BREAKER_EVENT_RAMP_STARTED
                                                    ? "started"
                                                    : "ended"));
    json_object_set_new(o, "cause", json_string(resil_breaker_cause_name(ev->cause)));
    json_object_set_new(o, "share", json_real(has_share ? ev->ramp_share
                                                        : resil_breaker_ramp_share(br)));
  } else if (ev->kind == RESIL_BREAKER_EVENT_TRANSITION) {
    json_object_set_new(o, "from", json_string(state_label(ev->from)));
    json_object_set_new(o, "to", json_string(state_label(ev->to)));
    json_object_set_new(o, "cause", json_string(resil_breaker_cause_name(ev->cause)));
  } else {
    json_object_set_new(o, "state", json_string(state_label(ev->to)));
  }
  json_object_set_new(o, "seq", json_integer((json_int_t)ev->seq));
  write_line(s, o);
}

void resil_event_hedge_listener(void *user, const resil_hedge_event *ev) {
  resil_event_sink *s = user;
  if (!s || !ev) return;
  static const char *const names[] = {"unknown", "sent", "won", "cancelled_loser",
                                      "rejected", "passed_unsafe"};
  unsigned k = (unsigned)ev->kind < 6 ? (unsigned)ev->kind : 0;
  json_t *o = head(s, ev->name, "hedge");
  if (!o) {
    atomic_fetch_add(&s->dropped, 1);
    return;
  }
  json_object_set_new(o, "event", json_string(names[k]));
  json_object_set_new(o, "hedge", json_integer(ev->hedge));
  json_object_set_new(o, "elapsed_ms", json_real((double)ev->elapsed_ns / 1e6));
  if (ev->kind == RESIL_HEDGE_EVENT_SENT && ev->delay_ns >= 0)
    json_object_set_new(o, "delay_ms", json_real((double)ev->delay_ns / 1e6));
  if (ev->has_outcome) {
    json_object_set_new(o, "outcome", json_string(resil_outcome_kind_name(ev->outcome.kind)));
    json_object_set_new(o, "reason", json_string(resil_reason_name(ev->outcome.reason)));
    if (ev->outcome.http_status)
      json_object_set_new(o, "http_status", json_integer(ev->outcome.http_status));
  }
  write_line(s, o);
}

/* A URL redacted as the HTTP log does (userinfo, secret-looking query
 * values), into o[key]. */
static void set_redacted_url(resil_event_sink *s, json_t *o, const char *key, const char *url) {
  http_buf b = {0};
  if (url && resil__http_redact_url(s->alloc, &b, url) == 0 && b.p)
    json_object_set_new(o, key, jstr(b.p));
  else
    json_object_set_new(o, key, json_string("[REDACTED]"));
  resil__http_buf_free(s->alloc, &b);
}

void resil_event_instance_listener(void *user, const struct resil_http_instance_event *ev) {
  resil_event_sink *s = user;
  if (!s || !ev) return;
  static const char *const names[] = {"instance_event",   "instance_ejected",
                                      "instance_returned", "instance_added",
                                      "instance_removed",  "instance_ramp_ended"};
  unsigned k = (unsigned)ev->kind < 6 ? (unsigned)ev->kind : 0;
  json_t *o = head(s, ev->client, names[k]);
  if (!o) {
    atomic_fetch_add(&s->dropped, 1);
    return;
  }
  set_redacted_url(s, o, "upstream", ev->upstream);
  set_redacted_url(s, o, "url", ev->instance);
  if (ev->address) json_object_set_new(o, "address", jstr(ev->address));
  json_object_set_new(o, "index", json_integer(ev->index));
  json_object_set_new(o, "ejections", json_integer((json_int_t)ev->ejections));
  if (ev->kind == RESIL_HTTP_INSTANCE_EJECTED) {
    json_object_set_new(o, "duration_ms", json_real((double)ev->duration_ns / 1e6));
    json_object_set_new(o, "consecutive", json_integer(ev->consecutive));
  } else if (ev->kind == RESIL_HTTP_INSTANCE_RAMP_ENDED) {
    /* The ramp ran its whole duration: share 1 from its end on. The line
     * is written when a choice noticed the end (there is no timer):
     * late_ms says how long after the end, on the clock of time_ns (an
     * event of a layout without time_ns: none). */
    json_object_set_new(o, "share", json_real(1.0));
    json_object_set_new(o, "duration_ms", json_real((double)ev->duration_ns / 1e6));
    if (ev->struct_size >= offsetof(resil_http_instance_event, time_ns) + sizeof ev->time_ns)
      json_object_set_new(o, "late_ms",
                          json_real((double)(resil__http_mono_ns() - ev->time_ns) / 1e6));
  }
  write_line(s, o);
}

static void outcome_members(json_t *o, const resil_attempt_info *i) {
  json_object_set_new(o, "attempt", json_integer(i->attempt));
  json_object_set_new(o, "outcome", json_string(resil_outcome_kind_name(i->outcome.kind)));
  json_object_set_new(o, "reason", json_string(resil_reason_name(i->outcome.reason)));
  if (i->outcome.http_status)
    json_object_set_new(o, "http_status", json_integer(i->outcome.http_status));
  json_object_set_new(o, "duration_ms", json_real((double)i->duration_ns / 1e6));
}

static void with_key(json_t *o, const resil_attempt_info *i) {
  if (i->idempotency_key) json_object_set_new(o, "idempotency_key", jstr(i->idempotency_key));
}

void resil_event_attempt_listener(void *user, const resil_attempt_info *info) {
  resil_event_sink *s = user;
  if (!s || !info) return;
  if (info->outcome.flags & RESIL_OF_RESEND_PREVENTED) {
    json_t *o = head(s, info->source, "resend_prevented");
    if (o) {
      json_object_set_new(o, "attempt", json_integer(info->attempt));
      with_key(o, info);
      write_line(s, o);
    }
  }
  if (info->outcome.flags & RESIL_OF_RECOVERED) {
    json_t *o = head(s, info->source, "recovered");
    if (o) {
      json_object_set_new(o, "attempt", json_integer(info->attempt));
      if (info->outcome.http_status)
        json_object_set_new(o, "http_status", json_integer(info->outcome.http_status));
      with_key(o, info);
      write_line(s, o);
    }
  }
  int more = info->next_wait_ns >= 0;
  json_t *o = head(s, info->source, more ? "retry" : "call_done");
  if (!o) {
    atomic_fetch_add(&s->dropped, 1);
    return;
  }
  outcome_members(o, info);
  if (more)
    json_object_set_new(o, "wait_ms", json_real((double)info->next_wait_ns / 1e6));
  else
    json_object_set_new(o, "stop", json_string(resil_stop_name(info->stop)));
  with_key(o, info);
  write_line(s, o);
}

resil_status resil_event_reload(resil_event_sink *s, const char *registry, int ok,
                                const char *file, size_t changed, size_t kept,
                                const char *error) {
  if (!s) return RESIL_EMISUSE;
  json_t *o = head(s, registry, "reload");
  if (!o) return RESIL_ENOMEM;
  json_object_set_new(o, "ok", json_boolean(ok));
  if (file) json_object_set_new(o, "file", jstr(file));
  json_object_set_new(o, "changed", json_integer((json_int_t)changed));
  json_object_set_new(o, "kept", json_integer((json_int_t)kept));
  if (!ok && error) {
    /* A reload error may quote a setting (a store URI, a base URL): the
     * userinfo of any URL in it and secret-looking name=value pairs are
     * redacted (resil__redact_message). */
    http_buf b = {0};
    http_put_to h = {s->alloc, &b};
    if (resil__redact_message(resil__http_put, &h, error, strlen(error)) == 0 && b.p)
      json_object_set_new(o, "error", jstr(b.p));
    else
      json_object_set_new(o, "error", json_string(RESIL__REDACTED));
    resil__http_buf_free(s->alloc, &b);
  }
  return write_line(s, o);
}

resil_status resil_event_reload_counts(resil_event_sink *s, const char *registry,
                                       const char *file, uint64_t generation, size_t kept,
                                       size_t replaced, size_t added, size_t removed) {
  if (!s) return RESIL_EMISUSE;
  json_t *o = head(s, registry, "reload");
  if (!o) return RESIL_ENOMEM;
  json_object_set_new(o, "ok", json_true());
  if (file) json_object_set_new(o, "file", jstr(file));
  json_object_set_new(o, "changed", json_integer((json_int_t)(replaced + added + removed)));
  json_object_set_new(o, "kept", json_integer((json_int_t)kept));
  json_object_set_new(o, "replaced", json_integer((json_int_t)replaced));
  json_object_set_new(o, "added", json_integer((json_int_t)added));
  json_object_set_new(o, "removed", json_integer((json_int_t)removed));
  json_object_set_new(o, "generation", json_integer((json_int_t)generation));
  return write_line(s, o);
}

resil_status resil_event_shared_fallback(resil_event_sink *s, const char *segment,
                                        const char *instance, const char *reason) {
  if (!s) return RESIL_EMISUSE;
  json_t *o = head(s, segment, "shared_fallback");
  if (!o) return RESIL_ENOMEM;
  if (segment) json_object_set_new(o, "segment", jstr(segment));
  if (instance) json_object_set_new(o, "shared_instance", jstr(instance));
  json_object_set_new(o, "reason", jstr(reason ? reason : ""));
  return write_line(s, o);
}

resil_status resil_event_store_recovery(resil_event_sink *s, const char *store,
                                        const resil_store_recovery *r) {
  if (!s) return RESIL_EMISUSE;
  if (!r) return RESIL_EINVAL;
  json_t *o = head(s, store, "store_recovery");
  if (!o) return RESIL_ENOMEM;
  json_object_set_new(o, "selected", json_integer(r->selected));
  json_object_set_new(o, "recovered", json_integer(r->recovered));
  json_object_set_new(o, "failed", json_integer(r->failed));
  json_object_set_new(o, "damaged", json_integer(r->damaged));
  return write_line(s, o);
}
