/* The registry driving calls (registry_call.h): one lease on a chain (and
 * on a client) for a whole logical call, on the engine or the blocking
 * client; and the attempt listeners' indirection of
 * resil_registry_events_attach (registry_int.h). */
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "config/registry_int.h"
#include "core/internal.h"
#include "resil/registry.h"
#ifdef RESIL_CONFIG_HTTP
#include "resil/chain.h"
#include "resil/engine.h"
#include "resil/events.h"
#include "resil/http.h"
#include "resil/registry_call.h"
#endif

/* ---- the attempt listeners' box --------------------------------------------
 * `active` counts listener calls running; detaching stores NULL, then waits
 * until none runs (both seq_cst: a call either reads the NULL or is seen
 * running), so the sink detached may be freed when set() returns. */
struct resil__reg_events {
  atomic_size_t refs;
  atomic_size_t active;
  _Atomic(struct resil_event_sink *) sink;
};

resil__reg_events *resil__reg_events_new(void) {
  resil__reg_events *b = calloc(1, sizeof *b);
  if (!b) return NULL;
  atomic_init(&b->refs, 1);
  atomic_init(&b->active, 0);
  atomic_init(&b->sink, NULL);
  return b;
}

void resil__reg_events_ref(resil__reg_events *b) {
  atomic_fetch_add_explicit(&b->refs, 1, memory_order_relaxed);
}

void resil__reg_events_unref(resil__reg_events *b) {
  if (b && atomic_fetch_sub_explicit(&b->refs, 1, memory_order_acq_rel) == 1) free(b);
}

void resil__reg_events_set(resil__reg_events *b, struct resil_event_sink *sink) {
  if (!b) return;
  atomic_store(&b->sink, sink);
  while (atomic_load(&b->active)) sched_yield();
}

void resil__reg_events_on_attempt(void *user, const resil_attempt_info *info) {
#ifdef RESIL_CONFIG_HTTP
  resil__reg_events *b = user;
  atomic_fetch_add(&b->active, 1);
  struct resil_event_sink *s = atomic_load(&b->sink);
  if (s) resil_event_attempt_listener(s, info);
  atomic_fetch_sub_explicit(&b->active, 1, memory_order_release);
#else
  (void)user, (void)info;
#endif
}

void resil__reg_events_on_instance(void *user, const struct resil_http_instance_event *ev) {
#ifdef RESIL_CONFIG_HTTP
  resil__reg_events *b = user;
  atomic_fetch_add(&b->active, 1);
  struct resil_event_sink *s = atomic_load(&b->sink);
  if (s) resil_event_instance_listener(s, ev);
  atomic_fetch_sub_explicit(&b->active, 1, memory_order_release);
#else
  (void)user, (void)ev;
#endif
}

int resil__reg_events_fallback(resil__reg_events *b, const char *segment, const char *instance,
                               const char *reason) {
#ifdef RESIL_CONFIG_HTTP
  atomic_fetch_add(&b->active, 1);
  struct resil_event_sink *s = atomic_load(&b->sink);
  if (s) (void)resil_event_shared_fallback(s, segment, instance, reason);
  atomic_fetch_sub_explicit(&b->active, 1, memory_order_release);
  return s != NULL;
#else
  (void)b, (void)segment, (void)instance, (void)reason;
  return 1; /* no sink can ever be attached: nothing to keep */
#endif
}

#ifdef RESIL_CONFIG_HTTP

/* ---- on the engine ------------------------------------------------------------ */

typedef struct reg_call {
  resil_registry_lease *lease;
  resil_engine_done_fn done;
  void *user;
} reg_call;

/* The lease is given back after the caller's done returned: nothing of the
 * call uses the chain's policies any more. */
static void reg_done(void *u, resil_engine_handle *h, resil_outcome o, resil_http_response *r) {
  reg_call *rc = u;
  rc->done(rc->user, h, o, r);
  resil_registry_release(rc->lease);
  free(rc);
}

resil_status resil_registry_engine_call(resil_registry *reg, resil_engine *e,
                                        const char *chain, const char *endpoint,
                                        const resil_http_args *args, const resil_ctx *ctx,
                                        resil_engine_done_fn done, void *user,
                                        resil_engine_handle **out, resil_error *err) {
  if (out) *out = NULL;
  if (!reg) return resil__err(err, RESIL_EMISUSE, NULL, "registry must not be NULL");
  if (!chain) return resil__err(err, RESIL_EINVAL, "chain", "must not be NULL");
  if (!done) return resil__err(err, RESIL_EINVAL, "done", "must not be NULL");
  reg_call *rc = malloc(sizeof *rc);
  if (!rc) return resil__err(err, RESIL_ENOMEM, NULL, "out of memory");
  resil_chain *ch = resil_registry_acquire(reg, RESIL_REG_CHAIN, chain, &rc->lease);
  if (!ch) {
    free(rc);
    return resil__err(err, RESIL_EINVAL, "chain", "no chain '%s' in the registry", chain);
  }
  rc->done = done;
  rc->user = user;
  resil_status st =
      resil_engine_call_chain(e, ch, endpoint, args, ctx, reg_done, rc, out, err);
  if (st != RESIL_OK) {
    resil_registry_release(rc->lease);
    free(rc);
  }
  return st;
}

typedef struct reg_keyed {
  resil_registry_lease *lease;
  resil_engine_keyed_done_fn done;
  void *user;
} reg_keyed;

static void reg_keyed_done(void *u, resil_engine_keyed *k, resil_outcome o,
                           resil_http_response *r) {
  reg_keyed *rc = u;
  rc->done(rc->user, k, o, r);
  resil_registry_release(rc->lease);
  free(rc);
}

resil_status resil_registry_engine_call_keyed_sized(
    resil_registry *reg, resil_engine *e, const char *chain, const char *endpoint,
    const resil_http_args *args, const resil_ctx *ctx, resil_engine_keyed_done_fn done,
    void *user, resil_http_recovery *report, size_t report_size, resil_engine_keyed **out,
    resil_error *err) {
  if (out) *out = NULL;
  if (!reg) return resil__err(err, RESIL_EMISUSE, NULL, "registry must not be NULL");
  if (!chain) return resil__err(err, RESIL_EINVAL, "chain", "must not be NULL");
  if (!done) return resil__err(err, RESIL_EINVAL, "done", "must not be NULL");
  reg_keyed *rc = malloc(sizeof *rc);
  if (!rc) return resil__err(err, RESIL_ENOMEM, NULL, "out of memory");
  resil_chain *ch = resil_registry_acquire(reg, RESIL_REG_CHAIN, chain, &rc->lease);
  if (!ch) {
    free(rc);
    return resil__err(err, RESIL_EINVAL, "chain", "no chain '%s' in the registry", chain);
  }
  rc->done = done;
  rc->user = user;
  resil_status st = resil_engine_call_chain_keyed_sized(e, ch, endpoint, args, ctx,
                                                        reg_keyed_done, rc, report,
                                                        report_size, out, err);
  if (st != RESIL_OK) {
    resil_registry_release(rc->lease);
    free(rc);
  }
  return st;
}

/* ---- blocking ------------------------------------------------------------------ */

resil_status resil_registry_http_call(resil_registry *reg, const char *chain,
                                      const char *client, const char *endpoint,
                                      const resil_http_args *args, const resil_ctx *ctx,
                                      resil_outcome *outcome, resil_http_response **response,
                                      resil_error *err) {
  if (response) *response = NULL;
  if (!reg) return resil__err(err, RESIL_EMISUSE, NULL, "registry must not be NULL");
  if (!chain || !client || !outcome)
    return resil__err(err, RESIL_EINVAL, !chain ? "chain" : !client ? "client" : "outcome",
                      "must not be NULL");
  resil_ctx lc;
  const resil_ctx *cx = resil__ctx_in(&lc, ctx);
  if (!cx) return resil__err(err, RESIL_EINVAL, "ctx", "call resil_ctx_init()");
  if (cx != &lc) lc = *cx;
  resil_registry_lease *cl = NULL, *hl = NULL;
  resil_chain *ch = resil_registry_acquire(reg, RESIL_REG_CHAIN, chain, &cl);
  if (!ch) return resil__err(err, RESIL_EINVAL, "chain", "no chain '%s' in the registry", chain);
  resil_http_client *c = resil_registry_acquire(reg, RESIL_REG_HTTP_CLIENT, client, &hl);
  if (!c) {
    resil_registry_release(cl);
    return resil__err(err, RESIL_EINVAL, "client", "no http_client '%s' in the registry",
                      client);
  }
  resil_http_request *req = NULL;
  resil_status st = resil_http_request_new(c, endpoint, args, &req, err);
  if (st == RESIL_OK) {
    lc.flags |= resil_http_request_call_flags(req);
    *outcome = resil_chain_run(ch, &lc, resil_http_request_attempt, req);
    if (response) *response = resil_http_request_take_response(req);
    resil_http_request_free(req);
    if (err) resil_error_clear(err);
  }
  resil_registry_release(hl);
  resil_registry_release(cl);
  return st;
}

#endif
