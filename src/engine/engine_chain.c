/* resil_engine_call_chain (engine.h): a chain's layers on the engine, in
 * the chain's order. The chain is read into an engine plan (the call's
 * policies, the order of its per-attempt steps, a breaker per logical
 * call, the call's deadline), then submitted through resil_engine_call;
 * a chain the engine cannot run as written is refused, never reordered. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "core/internal.h"
#include "engine/engine_int.h"
#include "resil/chain.h"
#include "resil/engine.h"
#include "resil/timelimit.h"

typedef struct eng_plan {
  resil_engine_policies pol;
  resil__engine_plan order;  /* steps, outer breaker, layer indices */
  int64_t call_timeout_ns;   /* time limiter outside the retry; 0 none */
  int64_t total_timeout_ns;  /* the chain's */
} eng_plan;

static resil_status refuse(resil_error *err, const resil_chain *ch, size_t i, const char *why) {
  const char *name = resil_chain_layer_name(ch, i);
  return resil__err(err, RESIL_EINVAL, "chain", "layer %zu (%s '%s') %s", i,
                    resil_chain_layer_label(ch, i), name ? name : "", why);
}

static int has_step(const eng_plan *p, unsigned char k) {
  for (size_t j = 0; j < p->order.nsteps; j++)
    if (p->order.steps[j] == k) return 1;
  return 0;
}

static void add_outer(eng_plan *p, unsigned char k, size_t layer) {
  p->order.outer_layer[p->order.nouter] = (unsigned char)layer;
  p->order.outer[p->order.nouter++] = k;
}

static void add_step(eng_plan *p, unsigned char k, size_t layer) {
  p->order.step_layer[p->order.nsteps] = (unsigned char)layer;
  p->order.steps[p->order.nsteps++] = k;
}

static resil_status plan_chain(resil_chain *ch, eng_plan *p, resil_error *err) {
  memset(p, 0, sizeof *p);
  resil_engine_policies_init(&p->pol);
  p->order.chain = ch;
  p->order.retry_layer = -1;
  p->order.hedge_layer = -1;
  if (!ch || resil_chain_total_timeout_ns(ch) < 0)
    return resil__err(err, RESIL_EINVAL, "chain", "must not be NULL");
  p->total_timeout_ns = resil_chain_total_timeout_ns(ch);
  size_t n = resil_chain_layers(ch);
  p->order.nlayers = (int)n;
  size_t r = n; /* the retry layer's index (n: none) */
  for (size_t i = 0; i < n; i++) {
    if (resil_chain_layer_kind(ch, i) != RESIL_LAYER_RETRY) continue;
    if (r != n) return refuse(err, ch, i, "is a second retry: the engine runs one retry per call");
    r = i;
    p->order.retry_layer = (int)i;
  }
  int tl_seen = 0;
  for (size_t i = 0; i < n; i++) {
    int kind = resil_chain_layer_kind(ch, i);
    void *pol = resil_chain_layer_policy(ch, i);
    if (!pol)
      return refuse(err, ch, i,
                    "is a custom layer: the engine runs only the library's policies");
    int outside = r != n && i < r;
    switch (kind) {
    case RESIL_LAYER_RETRY:
      p->pol.retry = pol;
      break;
    case RESIL_LAYER_THREADPOOL:
      return refuse(err, ch, i, "is a thread pool: the engine's transfers run on its loop");
    case RESIL_LAYER_BREAKER:
      if (outside) {
        if (p->order.cbr) return refuse(err, ch, i, "is a second breaker outside the retry");
        p->order.cbr = pol;
        add_outer(p, ENG_STEP_BR, i);
        break;
      }
      if (has_step(p, ENG_STEP_BR))
        return refuse(err, ch, i, "is a second breaker inside the retry");
      p->pol.breaker = pol;
      add_step(p, ENG_STEP_BR, i);
      break;
    case RESIL_LAYER_RATELIMITER:
      if (outside) {
        if (p->order.crl)
          return refuse(err, ch, i, "is a second rate limiter outside the retry");
        p->order.crl = pol;
        add_outer(p, ENG_STEP_RL, i);
        break;
      }
      if (has_step(p, ENG_STEP_RL))
        return refuse(err, ch, i, "is a second rate limiter inside the retry");
      p->pol.ratelimiter = pol;
      add_step(p, ENG_STEP_RL, i);
      break;
    case RESIL_LAYER_BULKHEAD:
      if (outside)
        return refuse(err, ch, i,
                      "is outside the retry: the engine holds a bulkhead slot per attempt "
                      "only");
      if (has_step(p, ENG_STEP_BH))
        return refuse(err, ch, i, "is a second bulkhead inside the retry");
      p->pol.bulkhead = pol;
      add_step(p, ENG_STEP_BH, i);
      break;
    case RESIL_LAYER_TIMELIMITER: {
      int64_t to = resil_timelimiter_timeout_ns(pol);
      if (outside) {
        if (p->call_timeout_ns == 0 || (to > 0 && to < p->call_timeout_ns))
          p->call_timeout_ns = to;
        break;
      }
      if (tl_seen) return refuse(err, ch, i, "is a second time limiter inside the retry");
      tl_seen = 1;
      p->pol.attempt_timeout_ns = to;
      break;
    }
    case RESIL_LAYER_HEDGE:
      if (outside)
        return refuse(err, ch, i,
                      "is outside the retry: the engine hedges each attempt of the retry");
      if (p->pol.hedge) return refuse(err, ch, i, "is a second hedge");
      if (p->order.nsteps || tl_seen)
        return refuse(err, ch, i,
                      "is inside a per-attempt layer: each of the engine's hedge transfers "
                      "takes its own permits and attempt timeout (put the hedge outside them)");
      p->pol.hedge = pol;
      p->order.hedge_layer = (int)i;
      break;
    default:
      return refuse(err, ch, i, "is of a kind the engine does not run");
    }
  }
  return RESIL_OK;
}

resil_status resil_engine_chain_check(const resil_chain *ch, resil_error *err) {
  eng_plan p;
  /* Only read (the plan's chain pointer is not used for counting here). */
  resil_status st = plan_chain((resil_chain *)(uintptr_t)ch, &p, err);
  if (st == RESIL_OK && err) resil_error_clear(err);
  return st;
}

/* The call's ctx: the chain's total timeout when the ctx has none (as
 * resil_chain_run), and a time limiter outside the retry bounds the whole
 * call. NULL for an uninitialised ctx. */
static const resil_ctx *chain_ctx(const eng_plan *p, resil_ctx *lc, const resil_ctx *ctx) {
  const resil_ctx *cx = resil__ctx_in(lc, ctx);
  if (!cx) return NULL;
  if (cx != lc) *lc = *cx;
  if (p->total_timeout_ns > 0 && lc->deadline_ns == RESIL_NO_DEADLINE)
    resil_ctx_set_timeout_ns(lc, p->total_timeout_ns);
  if (p->call_timeout_ns > 0 && resil_ctx_remaining_ns(lc) > p->call_timeout_ns)
    resil_ctx_set_timeout_ns(lc, p->call_timeout_ns);
  return lc;
}

resil_status resil_engine_call_chain(resil_engine *e, resil_chain *ch,
                                     const char *endpoint, const resil_http_args *args,
                                     const resil_ctx *ctx, resil_engine_done_fn done,
                                     void *user, resil_engine_handle **out,
                                     resil_error *err) {
  if (out) *out = NULL;
  eng_plan p;
  resil_status st = plan_chain(ch, &p, err);
  if (st != RESIL_OK) return st;
  resil_ctx lc;
  if (!chain_ctx(&p, &lc, ctx)) return resil__err(err, RESIL_EINVAL, "ctx", "call resil_ctx_init()");
  resil_engine_handle *h = NULL;
  st = resil_engine_call(e, endpoint, args, &p.pol, &lc, done, user, &h, err);
  if (st != RESIL_OK) return st;
  /* Not started yet (the start is on a later loop iteration). */
  resil__engine_set_plan(h, &p.order);
  if (out) *out = h;
  else resil_engine_handle_release(h);
  return RESIL_OK;
}

resil_status resil_engine_call_chain_keyed_sized(resil_engine *e, resil_chain *ch,
                                                 const char *endpoint,
                                                 const resil_http_args *args,
                                                 const resil_ctx *ctx,
                                                 resil_engine_keyed_done_fn done, void *user,
                                                 resil_http_recovery *report,
                                                 size_t report_size, resil_engine_keyed **out,
                                                 resil_error *err) {
  if (out) *out = NULL;
  eng_plan p;
  resil_status st = plan_chain(ch, &p, err);
  if (st != RESIL_OK) return st;
  if (p.order.nouter)
    return refuse(err, ch, p.order.outer_layer[0],
                  "is outside the retry: the keyed flow runs its layers per physical request");
  resil_ctx lc;
  if (!chain_ctx(&p, &lc, ctx)) return resil__err(err, RESIL_EINVAL, "ctx", "call resil_ctx_init()");
  resil_engine_keyed *k = NULL;
  st = resil_engine_call_keyed_sized(e, endpoint, args, &p.pol, &lc, done, user, report,
                                     report_size, &k, err);
  if (st != RESIL_OK) return st;
  p.order.chain = NULL; /* requests and queries are not the chain's attempts */
  resil__engine_keyed_set_plan(k, &p.order);
  if (out) *out = k;
  else resil_engine_keyed_release(k);
  return RESIL_OK;
}
