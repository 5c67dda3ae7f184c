/* The registry drives the calls (Since 0.2): a logical call through a
 * chain of a resil_registry (registry.h), on the async engine (engine.h)
 * or on the blocking client (http.h), holding one lease for the whole set
 * of policies. Part of libresil-config built with libresil-http.
 *
 * One lease per call: the chain's lease (resil_registry_acquire) keeps the
 * chain and every layer instance it names alive and unchanged for the
 * call, so a reload while calls are in flight is safe without waiting for
 * them: a call submitted before the reload returns finishes on the
 * instances it started with (never a mix of old and new); a call submitted
 * after it uses the new set. The layers run in the chain's order
 * (resil_engine_call_chain on the engine, resil_chain_run on the blocking
 * path).
 *
 * Clients: the engine's client is fixed when the engine is created
 * (resil_engine_config.client; take it with resil_registry_acquire of
 * RESIL_REG_HTTP_CLIENT and hold that lease for the engine's life). A
 * reload that replaces that http_client does not change existing engines:
 * they keep the old client (their lease keeps it alive) until the
 * application creates a new engine on the new one. The blocking
 * resil_registry_http_call names its client per call, and takes a lease
 * on it too.
 *
 * Events: resil_registry_events_attach (registry.h) also reaches the
 * attempt listeners of every retry and HTTP client the registry builds,
 * including those a reload adds or puts in place of others (their
 * on_attempt is a registry listener that forwards to the sink attached at
 * the time: "retry" and "call_done" lines, events.h). */
#ifndef RESIL_REGISTRY_CALL_H
#define RESIL_REGISTRY_CALL_H

#include "engine.h"
#include "http.h"
#include "registry.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Submits a logical call of endpoint on engine e through chain `chain` of
 * reg: takes a lease on the chain, submits with resil_engine_call_chain()
 * (engine.h: the chain's order, its refusals, the chain's total_timeout
 * as the deadline when ctx has none), and releases the lease once the
 * call completed, after done returned (also when resil_engine_free() ends
 * the call). Loop thread only, as resil_engine_call. RESIL_OK: done will
 * be called once (see resil_engine_call; *out as there). RESIL_EMISUSE
 * (NULL reg), RESIL_EINVAL (NULL chain or done, no such chain: "no chain
 * 'x' in the registry", a chain the engine cannot run, and
 * resil_engine_call's reasons), RESIL_ENOMEM: done is never called, no
 * lease is held, err says why. e's client must hold the endpoint.
 * Since 0.2. */
RESIL_API resil_status resil_registry_engine_call(resil_registry *reg, resil_engine *e,
                                                  const char *chain, const char *endpoint,
                                                  const resil_http_args *args,
                                                  const resil_ctx *ctx,
                                                  resil_engine_done_fn done, void *user,
                                                  resil_engine_handle **out,
                                                  resil_error *err);

/* The keyed flow (engine.h resil_engine_call_chain_keyed: writes driven
 * by the chain's retry, status queries, the chain's order per physical
 * request) under one lease of chain `chain`, released after done returned.
 * Statuses and thread as resil_registry_engine_call. Use the macro.
 * Since 0.2. */
RESIL_API resil_status resil_registry_engine_call_keyed_sized(
    resil_registry *reg, resil_engine *e, const char *chain, const char *endpoint,
    const resil_http_args *args, const resil_ctx *ctx, resil_engine_keyed_done_fn done,
    void *user, resil_http_recovery *report, size_t report_size, resil_engine_keyed **out,
    resil_error *err);
#define resil_registry_engine_call_keyed(reg, e, chain, endpoint, args, ctx, done, user, report,  \
                                         out, err)                                              \
  resil_registry_engine_call_keyed_sized((reg), (e), (chain), (endpoint), (args), (ctx), (done), \
                                         (user), (report), sizeof(resil_http_recovery), (out),   \
                                         (err))

/* A blocking logical call of endpoint of http_client `client` through
 * chain `chain`, both of reg, under one lease of each:
 * resil_chain_run(chain, ctx, resil_http_request_attempt, req) with
 * ctx->flags completed by resil_http_request_call_flags() (ctx NULL: the
 * defaults). Any thread. RESIL_OK: *outcome is the call's final outcome
 * and *response (response may be NULL) the last attempt's response or
 * NULL, owned by the caller (resil_http_response_free). RESIL_EMISUSE
 * (NULL reg), RESIL_EINVAL (NULL chain, client or outcome, an
 * uninitialised ctx, no such chain or client, resil_http_request_new's
 * reasons: err says which), RESIL_ENOMEM, RESIL_EIO: nothing sent,
 * *outcome untouched. Since 0.2. */
RESIL_API resil_status resil_registry_http_call(resil_registry *reg, const char *chain,
                                                const char *client, const char *endpoint,
                                                const resil_http_args *args,
                                                const resil_ctx *ctx, resil_outcome *outcome,
                                                resil_http_response **response,
                                                resil_error *err);

#ifdef __cplusplus
}
#endif
#endif
