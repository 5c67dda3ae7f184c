/* The lab's engine path (LAB_PATH_ENGINE): the H, I, F and R experiments'
 * calls submitted to the async engine (engine.h) on a built-in loop, driven
 * on the experiment's thread until they complete (lab_engine_run), or kept
 * in flight by a thread of the experiment's that drives the loop itself
 * (lab_engine_loop, lab_engine_submit: R1-R3). One lab_engine per client
 * and experiment, so that the engine's connection cache lives as long as
 * the blocking client's pool would (keep-alive reuse across calls, H8,
 * H16). Built when the built-in loop is (RESIL_HAVE_LOOP). */
#ifndef RESIL_TOOL_LAB_ENGINE_H
#define RESIL_TOOL_LAB_ENGINE_H

#include "lab_result.h"

#ifdef RESIL_HAVE_HTTP
typedef struct lab_engine lab_engine;
#endif

/* On the engine path, the named check that an experiment's calls took the
 * engine (n of them, lab_engine_calls read before its engines closed),
 * observed as engine_calls: a silent fall back to the blocking path cannot
 * pass. Nothing on the blocking path. */
void lab_engine_expect_ran(lab_result *r, size_t n);

#if defined(RESIL_HAVE_HTTP) && defined(RESIL_HAVE_LOOP)
#include "resil/engine.h"
#include "resil/http.h"

/* A loop, its adapter and an engine on client c (which must outlive it).
 * Records a failed check in r and returns NULL when one cannot be made. */
lab_engine *lab_engine_open(lab_result *r, resil_http_client *c);
/* NULL is a no-op. Calls still running complete first (cancelled). */
void lab_engine_close(lab_engine *le);
resil_engine *lab_engine_engine(lab_engine *le);
/* Calls the engine accepted so far (an experiment on the engine path checks
 * that its calls took it). */
size_t lab_engine_calls(const lab_engine *le);

/* The loop le's engine runs on, for an experiment that keeps calls in
 * flight itself (lab_engine_submit from their done_fns) and drives it with
 * resil_loop_run_once on the thread that opened le. */
resil_loop *lab_engine_loop(lab_engine *le);
/* resil_engine_call on le's engine (loop thread), counted in
 * lab_engine_calls when accepted. */
resil_status lab_engine_submit(lab_engine *le, const char *endpoint, const resil_http_args *args,
                               const resil_engine_policies *policies, const resil_ctx *ctx,
                               resil_engine_done_fn done, void *user, resil_error *err);

/* One call of a batch: set the inputs, lab_engine_run fills the outputs. */
typedef struct lab_engine_req {
  /* inputs */
  const char *endpoint;
  const resil_http_args *args;
  /* Policies of the call (NULL none): the retry goes into
   * resil_engine_policies.retry, or drives a keyed call's writes. */
  const resil_engine_policies *policies;
  const resil_ctx *ctx; /* NULL defaults */
  /* 1: resil_engine_call_keyed (the recovery flow), report written to
   * `report` when not NULL. */
  int keyed;
  resil_http_recovery *report;
  /* outputs */
  resil_outcome outcome;
  resil_http_response *response; /* owned by the caller; NULL none */
  int submitted;                 /* resil_engine_call* returned RESIL_OK */
  int done;                      /* the completion ran (exactly once) */
  int64_t done_ns;               /* when it ran (resil_clock_now_ns(NULL)) */
  resil_error err;               /* why the submission failed */
} lab_engine_req;

/* Submits every request (in order, on this thread, which drives the loop)
 * and runs the loop until all of them completed. Returns the number of
 * requests that completed; a request whose submission failed has done 0,
 * submitted 0, err set and outcome NOT_SENT(LOCAL_ERROR), as
 * resil_http_call reports bad arguments.
 * Responses are the caller's to free. */
size_t lab_engine_run(lab_engine *le, lab_engine_req *reqs, size_t n);

/* One call: lab_engine_run of one request. retry may be NULL; out (may be
 * NULL) gets the response (else it is freed). */
resil_outcome lab_engine_call(lab_engine *le, const char *endpoint, const resil_http_args *args,
                              resil_retry *retry, const resil_ctx *ctx,
                              resil_http_response **out);
/* One keyed call (resil_engine_call_keyed), as resil_http_call_keyed. */
resil_outcome lab_engine_call_keyed(lab_engine *le, const char *endpoint,
                                    const resil_http_args *args, resil_retry *retry,
                                    const resil_ctx *ctx, resil_http_recovery *report,
                                    resil_http_response **out);
#endif

#endif
