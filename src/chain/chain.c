/* Chains: explicit, ordered composition of policies with per-layer
 * accounting (DESIGN §2.8). */
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "breaker/breaker_int.h"
#include "bulkhead/bulkhead_int.h"
#include "chain/chain_int.h"
#include "core/internal.h"
#include "core/shard.h"
#include "ratelimit/ratelimit_int.h"
#include "hedge/hedge_int.h"
#include "retry/retry_int.h"
#include "resil/bulkhead.h"
#include "resil/chain.h"
#include "resil/hedge.h"

/* One atomic add per layer per call that is not a clean pass (a clean
 * logical call, every layer one attempt and a plain success, is one add to
 * the chain's per-thread clean count instead): the outcome's class, counted
 * when the layer returns. Everything else is derived when read: calls in = the sum
 * over classes, attempts out = the calls in of the layer below, kinds and
 * successes from the classes. (Counting calls in, attempts out, kinds and
 * successes separately cost four atomic adds per layer and tripled the
 * overhead of a four-layer chain.) */
#define CLASS_SLOTS RESIL_CLASS_COUNT_
typedef struct layer_counters {
  _Atomic uint64_t by_class[CLASS_SLOTS];
  _Atomic uint64_t rejections;
  /* Only when they happen: a retry's extra attempts, a hedge layer's
   * hedges (resil_chain_count_hedges) and pass-throughs. */
  _Atomic uint64_t retries;
  _Atomic uint64_t hedges;
  _Atomic uint64_t unhedged;
} layer_counters;

/* A library breaker, rate limiter or semaphore bulkhead (added by
 * resil_chain_add_breaker, _ratelimiter or _bulkhead): a layer that takes a
 * permit before the call and gives it back after, with nothing else to do
 * around the call. A run of such layers is entered in one pass, without a
 * trampoline per layer (split_pass), through the policies' internal enter
 * entry points, which their own run forms are written with. */
enum {
  LAYER_GENERIC = 0,
  LAYER_BREAKER_AT = 1,
  LAYER_RATELIMITER_AT = 2,
  LAYER_BULKHEAD_AT = 3,
  /* A library retry (resil_chain_add_retry): its first attempt enters the
   * layer below directly when the retry's fast path applies
   * (resil__retry_fast_first), later ones through the trampoline. */
  LAYER_RETRY_AT = 4
};

static inline int is_split(int at) {
  return at == LAYER_BREAKER_AT || at == LAYER_RATELIMITER_AT ||
         at == LAYER_BULKHEAD_AT;
}

typedef struct chain_layer {
  resil_layer desc; /* label and name point into owned copies */
  char *label;
  char *name;
  /* LAYER_*_AT: the policy's clock, and whether the layer reads it coarse
   * (resil__breaker_coarse_durations, resil__ratelimiter_coarse). Both are
   * fixed when the policy is created. */
  int at;
  int coarse;
  const resil_clock *clk;
  /* For a LAYER_*_AT layer: the first layer at or below it that is not one
   * (ch->n: none); layers i..split_end-1 are entered in one pass. */
  size_t split_end;
  /* A library retry or hedge: the library breaker layer nearest inside it
   * (NULL: none), which it watches for "retries last" (DESIGN §2.9). */
  resil_breaker *watch;
  layer_counters c;
} chain_layer;

/* What split_pass needs of layer k, packed (built by resil_chain_add_layer):
 * the layer kind, and for a rate limiter right below a breaker on the same
 * clock whether the breaker's reading serves it: hand for a ctx without a
 * deadline (the breaker reads precise, or both read coarse), hand_dl with
 * one (the breaker reads precise: a deadline is checked against the
 * reading). */
enum { HAND = 1, HAND_DL = 2 };
typedef struct split_op {
  int at;
  unsigned char hand, hand_dl;
  unsigned char hands; /* HAND if hand, | HAND_DL if hand_dl */
  /* A library retry: resil__retry_plain_first, fixed when it was made. */
  unsigned char plain_first;
  void *policy;
  layer_counters *c;
} split_op;

/* The shapes resil_chain_run enters in one inline pass (run_plan): a run
 * of split layers at the top (PLAN_SPLIT), or a library retry whose fast
 * path applies to every ctx without deadline or token
 * (resil__retry_plain_first) right above one (PLAN_RETRY). */
enum { PLAN_NONE = 0, PLAN_SPLIT = 1, PLAN_RETRY = 2 };
/* The passes resil_chain_run has written out (plan_body with constant
 * kinds): 1..3 distinct split layers. X(index, n, a, b, c): index (from 1)
 * of the pass of n layers of kinds a, b, c (LAYER_*_AT, 0 past n). */
#define B_ LAYER_BREAKER_AT
#define R_ LAYER_RATELIMITER_AT
#define H_ LAYER_BULKHEAD_AT
#define PLAN_SHAPES(X)                                                         \
  X(1, 1, B_, 0, 0)                                                            \
  X(2, 1, R_, 0, 0)                                                            \
  X(3, 1, H_, 0, 0)                                                            \
  X(4, 2, B_, R_, 0)                                                           \
  X(5, 2, B_, H_, 0)                                                           \
  X(6, 2, R_, B_, 0)                                                           \
  X(7, 2, R_, H_, 0)                                                           \
  X(8, 2, H_, B_, 0)                                                           \
  X(9, 2, H_, R_, 0)                                                           \
  X(10, 3, B_, R_, H_)                                                         \
  X(11, 3, B_, H_, R_)                                                         \
  X(12, 3, R_, B_, H_)                                                         \
  X(13, 3, R_, H_, B_)                                                         \
  X(14, 3, H_, B_, R_)                                                         \
  X(15, 3, H_, R_, B_)
/* More than any index: a plan whose pass is not written out. */
#define SHAPE_GENERIC 16u

typedef resil_outcome plan_fast_fn(resil_chain *ch, resil_call_fn fn,
                                   void *arg);
static plan_fast_fn *plan_fast_for(int plan, unsigned fast);

struct resil_chain {
  uint32_t magic;
  int plan;
  size_t n;
  /* A plan's pass: layers plan_from (0, or 1 below the retry) ..
   * plan_end - 1 (layers[plan_from].split_end). fast: how resil_chain_run
   * takes a call without ctx: 0 through run_general (no plan, or a total
   * timeout or fallback), else the index in PLAN_SHAPES of its pass, or
   * SHAPE_GENERIC (fast_fn: plan_fast_<index>/_r<index>, or run_plan's). */
  size_t plan_from, plan_end;
  unsigned fast;
  /* &ops[plan_from], and the ctx of a NULL one's pass (null_ctx1 below a
   * retry, else null_ctx). */
  const split_op *plan_ops;
  const resil_ctx *plan_ctx;
  /* plan_fast_for(plan, fast) (NULL for fast 0). */
  plan_fast_fn *fast_fn;
  split_op ops[RESIL_CHAIN_MAX_LAYERS];
  chain_layer layers[RESIL_CHAIN_MAX_LAYERS];
  layer_counters call; /* the protected call itself */
  /* Clean passes: logical calls in which every layer made exactly one
   * attempt and every layer and the call returned a SUCCESS outcome. Such a
   * call costs this one atomic add instead of one per layer; the readers
   * add it to every layer's and the call's SUCCESS class (read_counters). */
  resil__shards clean; /* one counter, per-thread parts (core/shard.h) */
  char *name;
  int64_t total_timeout_ns;
  resil_fallback_fn fallback;
  void *fallback_arg;
  const resil_clock *clock;
  const resil_allocator *alloc;
  /* The ctx resil_chain_run gives the top layer for a NULL one when there
   * is no total_timeout_ns (null_ok): the defaults on ch->clock; and
   * null_ctx1, the same with attempt 1 (a retry's first attempt's). */
  int null_ok;
  resil_ctx null_ctx, null_ctx1;
};

/* The 0.1 layout ends with `alloc`. */
#define CHAIN_CONFIG_MIN_SIZE                                                  \
  (offsetof(resil_chain_config, alloc) + sizeof(const resil_allocator *))
/* resil_layer's 0.1 layout ends with `run_owned`. */
#define LAYER_MIN_SIZE (offsetof(resil_layer, run_owned) + sizeof(void (*)(void)))

static void config_defaults(resil_chain_config *cfg) {
  memset(cfg, 0, sizeof *cfg);
  cfg->struct_size = sizeof *cfg;
  cfg->name = "chain";
}

void resil_chain_config_init_sized(resil_chain_config *cfg, size_t n) {
  if (!cfg) return;
  resil_chain_config full;
  config_defaults(&full);
  resil__sized_out(cfg, n, &full, sizeof full);
}

resil_status resil_chain_new(const resil_chain_config *ucfg, resil_chain **out,
                             resil_error *err) {
  if (!ucfg || !out)
    return resil__err(err, RESIL_EINVAL, NULL, "cfg and out must not be NULL");
  *out = NULL;
  resil_chain_config full;
  const resil_chain_config *cfg = &full;
  config_defaults(&full);
  resil_status st = resil__sized_in(&full, sizeof full, ucfg,
                                    CHAIN_CONFIG_MIN_SIZE, "resil_chain_config",
                                    "resil_chain_config_init", err);
  if (st != RESIL_OK) return st;
  st = resil__check_ns(err, "total_timeout_ns", cfg->total_timeout_ns, 0,
                       INT64_MAX);
  if (st != RESIL_OK) return st;
  resil_chain *ch = resil__calloc(cfg->alloc, sizeof *ch);
  if (!ch) return resil__err(err, RESIL_ENOMEM, NULL, "out of memory");
  int ok;
  ch->name = resil__strdup(cfg->alloc, cfg->name ? cfg->name : "chain", &ok);
  if (!ok || resil__shards_init(&ch->clean, cfg->alloc, 1,
                                RESIL__SHARDS_DEFAULT_SLOTS) != RESIL_OK) {
    resil__free(cfg->alloc, ch->name);
    resil__free(cfg->alloc, ch);
    return resil__err(err, RESIL_ENOMEM, NULL, "out of memory");
  }
  ch->magic = RESIL_MAGIC_CHAIN;
  ch->total_timeout_ns = cfg->total_timeout_ns;
  ch->fallback = cfg->fallback;
  ch->fallback_arg = cfg->fallback_arg;
  ch->clock = resil__clock(cfg->clock);
  ch->alloc = cfg->alloc;
  ch->null_ok = ch->total_timeout_ns == 0;
  resil__ctx_defaults(&ch->null_ctx);
  ch->null_ctx.clock = ch->clock;
  ch->null_ctx1 = ch->null_ctx;
  ch->null_ctx1.attempt = 1;
  *out = ch;
  return RESIL_OK;
}

void resil_chain_free(resil_chain *ch) {
  if (!ch || ch->magic != RESIL_MAGIC_CHAIN) return;
  for (size_t i = 0; i < ch->n; i++) {
    resil__free(ch->alloc, ch->layers[i].label);
    resil__free(ch->alloc, ch->layers[i].name);
  }
  resil__free(ch->alloc, ch->name);
  resil__shards_free(&ch->clean);
  ch->magic = RESIL_MAGIC_DEAD;
  resil__free(ch->alloc, ch);
}

static const char *kind_label(resil_layer_kind k) {
  switch (k) {
  case RESIL_LAYER_RETRY:
    return "Retry";
  case RESIL_LAYER_BREAKER:
    return "Breaker";
  case RESIL_LAYER_RATELIMITER:
    return "RateLimiter";
  case RESIL_LAYER_TIMELIMITER:
    return "TimeLimiter";
  case RESIL_LAYER_BULKHEAD:
    return "Bulkhead";
  case RESIL_LAYER_THREADPOOL:
    return "ThreadPool";
  case RESIL_LAYER_HEDGE:
    return "Hedge";
  case RESIL_LAYER_CUSTOM:
    break;
  }
  return "Custom";
}

resil_status resil_chain_add_layer(resil_chain *ch, const resil_layer *ulayer) {
  if (!ch || ch->magic != RESIL_MAGIC_CHAIN) return RESIL_EMISUSE;
  resil_layer full;
  const resil_layer *layer = &full;
  memset(&full, 0, sizeof full);
  if (!ulayer || resil__sized_in(&full, sizeof full, ulayer, LAYER_MIN_SIZE,
                                 "resil_layer", "sizeof(resil_layer) in struct_size: see chain.h",
                                 NULL) != RESIL_OK)
    return RESIL_EINVAL;
  if (!layer->policy || !layer->run) return RESIL_EINVAL;
  if (layer->kind == RESIL_LAYER_RETRY && layer->max_attempts == 0)
    return RESIL_EINVAL;
  if (layer->kind == RESIL_LAYER_HEDGE &&
      (layer->max_hedges == 0 || layer->max_hedges > RESIL_HEDGE_MAX_HEDGES ||
       layer->hedge_delay_ns < 0))
    return RESIL_EINVAL;
  if (ch->n >= RESIL_CHAIN_MAX_LAYERS) return RESIL_ESTATE;
  chain_layer *L = &ch->layers[ch->n];
  memset(L, 0, sizeof *L);
  int ok1, ok2;
  L->label = resil__strdup(ch->alloc,
                           layer->label ? layer->label : kind_label(layer->kind),
                           &ok1);
  L->name = resil__strdup(ch->alloc, layer->name ? layer->name : "", &ok2);
  if (!ok1 || !ok2) {
    resil__free(ch->alloc, L->label);
    resil__free(ch->alloc, L->name);
    L->label = L->name = NULL;
    return RESIL_ENOMEM;
  }
  L->desc = *layer;
  L->desc.label = L->label;
  L->desc.name = L->name;
  if (layer->run == resil__chain_run_breaker) {
    L->at = LAYER_BREAKER_AT;
    L->clk = resil__breaker_clock(layer->policy);
    L->coarse = resil__breaker_coarse_durations(layer->policy);
  } else if (layer->run == resil__chain_run_ratelimiter) {
    L->at = LAYER_RATELIMITER_AT;
    L->clk = resil__ratelimiter_clock(layer->policy);
    L->coarse = resil__ratelimiter_coarse(layer->policy);
  }
  if (!L->clk) L->at = LAYER_GENERIC; /* not a valid policy: its run says so */
  /* An invalid bulkhead: its run says so (the enter entry points take
   * valid handles only). */
  if (layer->run == resil__chain_run_bulkhead &&
      resil__bulkhead_valid(layer->policy))
    L->at = LAYER_BULKHEAD_AT;
  if (layer->run == resil__chain_run_retry) L->at = LAYER_RETRY_AT;
  /* Retries and hedges last: every library retry or hedge layer above
   * without a breaker inside it yet watches this one, the nearest inside. */
  if (L->at == LAYER_BREAKER_AT)
    for (size_t j = 0; j < ch->n; j++) {
      chain_layer *J = &ch->layers[j];
      if (!J->watch && (J->at == LAYER_RETRY_AT ||
                        (J->desc.kind == RESIL_LAYER_HEDGE &&
                         resil__chain_layer_typed(&J->desc))))
        J->watch = layer->policy;
    }
  if (L->desc.max_attempts == 0) L->desc.max_attempts = 1;
  if (L->desc.kind != RESIL_LAYER_HEDGE) {
    L->desc.max_hedges = 0;
    L->desc.hedge_delay_ns = 0;
    L->desc.hedges_blocking = 0;
  } else {
    L->desc.max_attempts = 1; /* a hedge makes its attempts in parallel */
  }
  ch->n++;
  for (size_t k = ch->n; k-- > 0;) {
    chain_layer *K = &ch->layers[k];
    K->split_end = !is_split(K->at) ? k
                   : k + 1 < ch->n        ? ch->layers[k + 1].split_end
                                          : ch->n;
  }
  split_op *op = &ch->ops[ch->n - 1];
  op->at = L->at;
  op->policy = L->desc.policy;
  op->c = &L->c;
  op->hand = op->hand_dl = 0;
  op->plain_first =
      L->at == LAYER_RETRY_AT && resil__retry_plain_first(L->desc.policy);
  if (L->at == LAYER_RATELIMITER_AT && ch->n > 1 &&
      ch->layers[ch->n - 2].at == LAYER_BREAKER_AT &&
      ch->layers[ch->n - 2].clk == L->clk) {
    const chain_layer *B = &ch->layers[ch->n - 2];
    int b_coarse = B->coarse && B->clk->coarse_ns != NULL;
    op->hand = !b_coarse || L->coarse;
    op->hand_dl = !b_coarse;
  }
  op->hands =
      (unsigned char)((op->hand ? HAND : 0) | (op->hand_dl ? HAND_DL : 0));
  ch->plan = is_split(ch->ops[0].at) ? PLAN_SPLIT
             : ch->ops[0].plain_first && ch->n > 1 && is_split(ch->ops[1].at)
                 ? PLAN_RETRY
                 : PLAN_NONE;
  ch->plan_from = ch->plan == PLAN_RETRY ? 1 : 0;
  ch->plan_end = ch->layers[ch->plan_from].split_end;
  ch->plan_ops = &ch->ops[ch->plan_from];
  ch->plan_ctx = ch->plan == PLAN_RETRY ? &ch->null_ctx1 : &ch->null_ctx;
  /* fast: the common call's way (resil_chain_run): 0 for none. */
  ch->fast = 0;
  if (ch->plan != PLAN_NONE && ch->null_ok && !ch->fallback) {
    size_t len = ch->plan_end - ch->plan_from;
    int at[3] = {0, 0, 0};
    for (size_t m = 0; m < len && m < 3; m++)
      at[m] = ch->ops[ch->plan_from + m].at;
    ch->fast = SHAPE_GENERIC;
#define SHAPE_MATCH(x, n, a, b, c)                                             \
  if (len == (n) && at[0] == (a) && at[1] == (b) && at[2] == (c))              \
    ch->fast = (x);
    PLAN_SHAPES(SHAPE_MATCH)
#undef SHAPE_MATCH
  }
  ch->fast_fn = plan_fast_for(ch->plan, ch->fast);
  return RESIL_OK;
}

/* ---- running ----------------------------------------------------------
 *
 * Three ways in. A run of library breaker, rate limiter and bulkhead
 * layers is entered in one pass (split_pass): each takes its permit, the
 * layer below (or the call) is entered once, each gives its permit back. A
 * library retry whose fast path applies makes its first attempt straight
 * into the layer below (enter_retry). Any other layer (and a retry's later
 * attempts) is called with a trampoline as its protected call; the
 * trampoline counts the attempt on layer i and enters layer i + 1 (or the
 * caller's function after the last layer). Frames normally live on the
 * stack. A layer that may run its protected call on another thread and stop
 * waiting for it (time limiter, thread pool) could leave that thread with a
 * pointer into a stack frame that is gone, so below such a layer the frame
 * is heap-allocated and reference-counted: freed by whichever of the
 * caller and the abandoned task finishes last.
 *
 * resil_chain_run enters a chain whose top is such a run, or a library
 * retry right above one whose fast path is fixed at build time (a plan,
 * ch->plan), through plan_body: split_pass and enter_retry as one inline
 * pass whose clean end (every layer one attempt, a plain success) is
 * written out; for a call without ctx, one function per pass shape and
 * plan with the layers' kinds as constants (ch->fast_fn). Everything else in such a call goes through the
 * same statements as split_pass and enter_retry (pass_unclean,
 * retry_unclean). */

/* What a layer's caller (the layer above, or resil_chain_run) shares with
 * it: one pointer argument of enter_layer. */
typedef struct link {
  /* Set by the layer: layers i.. and the call made one attempt each, all
   * returned SUCCESS, and none of them counted it: the caller counts it
   * (ch->clean) or flushes it (flush_clean). */
  int clean;
} link;

typedef struct frame {
  resil_chain *ch;
  size_t i; /* layer whose attempts this frame's trampoline makes */
  resil_call_fn fn;
  void *arg;
  uint32_t inner_calls;
  /* Stack frames: below.clean: the last call below was a clean pass not
   * yet counted. */
  link below;
  /* A hedging HEDGE layer's calls, made from several threads at once. */
  _Atomic uint32_t par_calls;
  /* Heap frames only. */
  _Atomic int refs;
  atomic_int started;
  int heap; /* 0 stack; HEAP_TRAMPOLINE: the trampoline drops a reference
               when the call ends; HEAP_ARG_DONE: the policy's arg_done does */
} frame;

enum { HEAP_TRAMPOLINE = 1, HEAP_ARG_DONE = 2 };

/* The common success, classified without a call (resil__common_success):
 * a pass that returns it is clean. */
#define plain_success(o) resil__common_success((o).kind, (o).reason, (o).http_status)

/* Takes the outcome by value so that no caller's outcome has its address
 * taken: each layer's outcome can then be built in its caller's return
 * slot instead of copied on every return. */
__attribute__((noinline)) static void count_outcome(layer_counters *c,
                                                    resil_outcome o) {
  unsigned k = plain_success(o)
                   ? (unsigned)RESIL_CLASS_SUCCESS
                   : (unsigned)resil_outcome_classify(&o);
  if (k < CLASS_SLOTS)
    atomic_fetch_add_explicit(&c->by_class[k], 1, memory_order_relaxed);
}

/* A clean pass of layers i.. (and the call) that is not part of a clean
 * logical call after all: counted on each of them now. */
static void flush_clean(resil_chain *ch, size_t i) {
  for (size_t k = i; k < ch->n; k++)
    atomic_fetch_add_explicit(&ch->layers[k].c.by_class[RESIL_CLASS_SUCCESS], 1,
                              memory_order_relaxed);
  atomic_fetch_add_explicit(&ch->call.by_class[RESIL_CLASS_SUCCESS], 1,
                            memory_order_relaxed);
}

static resil_outcome enter_layer(resil_chain *ch, size_t i, const resil_ctx *ctx,
                                 resil_call_fn fn, void *arg, link *up);

/* Enters layer i counting everything at once (heap frames, parallel
 * attempts). */
static resil_outcome enter_counted(resil_chain *ch, size_t i,
                                   const resil_ctx *ctx, resil_call_fn fn,
                                   void *arg) {
  link up = {.clean = 0};
  resil_outcome o = enter_layer(ch, i, ctx, fn, arg, &up);
  if (up.clean) flush_clean(ch, i);
  return o;
}

static void frame_release(frame *f) {
  if (atomic_fetch_sub_explicit(&f->refs, 1, memory_order_acq_rel) == 1)
    resil__free(f->ch->alloc, f);
}

static void frame_arg_done(void *p) { frame_release(p); }

/* A stack frame's protected call. */
static resil_outcome trampoline(void *p, const resil_ctx *ctx) {
  frame *f = p;
  f->inner_calls++;
  /* A later attempt: the earlier clean pass was not the logical call's. */
  if (RESIL_UNLIKELY(f->below.clean)) flush_clean(f->ch, f->i + 1);
  return enter_layer(f->ch, f->i + 1, ctx, f->fn, f->arg, &f->below);
}

/* A heap frame's protected call (below a layer that may abandon it). */
static resil_outcome trampoline_heap(void *p, const resil_ctx *ctx) {
  frame *f = p;
  atomic_store_explicit(&f->started, 1, memory_order_release);
  f->inner_calls++;
  resil_outcome o = enter_counted(f->ch, f->i + 1, ctx, f->fn, f->arg);
  if (f->heap == HEAP_TRAMPOLINE) frame_release(f);
  return o;
}

/* For a HEDGE layer that hedges: its attempts enter the layer below from
 * the pool's workers at once, and the layer returns after all of them. */
static resil_outcome trampoline_par(void *p, const resil_ctx *ctx) {
  frame *f = p;
  atomic_fetch_add_explicit(&f->par_calls, 1, memory_order_relaxed);
  return enter_counted(f->ch, f->i + 1, ctx, f->fn, f->arg);
}

static int layer_may_abandon(const resil_layer *d) {
  return d->run_owned || d->kind == RESIL_LAYER_TIMELIMITER;
}

/* Layer i may abandon its call: the frame below it is on the heap. */
__attribute__((noinline)) static resil_outcome
enter_heap(resil_chain *ch, size_t i, const resil_ctx *ctx, resil_call_fn fn,
           void *arg) {
  chain_layer *L = &ch->layers[i];
  resil_outcome o;
  frame *f = resil__alloc(ch->alloc, sizeof *f);
  if (!f) {
    o = resil_outcome_make(RESIL_NOT_SENT, RESIL_REASON_LOCAL_ERROR);
    count_outcome(&L->c, o);
    return o;
  }
  f->ch = ch;
  f->i = i;
  f->fn = fn;
  f->arg = arg;
  f->inner_calls = 0;
  f->below.clean = 0;
  atomic_init(&f->refs, 2);
  atomic_init(&f->started, 0);
  if (L->desc.run_owned) {
    /* The policy calls frame_arg_done once when it is done with f. */
    f->heap = HEAP_ARG_DONE;
    o = L->desc.run_owned(L->desc.policy, ctx, trampoline_heap, f, frame_arg_done);
  } else {
    f->heap = HEAP_TRAMPOLINE;
    o = L->desc.run(L->desc.policy, ctx, trampoline_heap, f);
  }
  int started = atomic_load_explicit(&f->started, memory_order_acquire);
  if (!started && o.kind == RESIL_REJECTED)
    atomic_fetch_add_explicit(&L->c.rejections, 1, memory_order_relaxed);
  if (f->heap == HEAP_TRAMPOLINE && !started && o.kind == RESIL_REJECTED)
    /* Refused before submitting: the trampoline will never run. */
    resil__free(ch->alloc, f);
  else
    frame_release(f);
  count_outcome(&L->c, o);
  return o;
}

/* What an entered layer of a split pass gives back after the call. */
typedef struct held {
  resil_breaker_permit permit;
  int64_t t0;
} held;

/* Layers i..split_end-1 (all LAYER_*_AT) in one pass: each takes its permit
 * (resil__*_enter), the layer below them (or the call) is entered once, and
 * they give their permits back in reverse order (breaker: records the
 * outcome). Exactly what nesting their run forms does, which are written
 * with the same enter entry points: the outcome passes through them
 * unchanged, a refusing layer's outcome is the one its run form returns,
 * and each layer is counted as enter_layer counts it (one attempt below,
 * or a rejection with none). */
__attribute__((noinline)) static resil_outcome
split_pass(resil_chain *ch, size_t i, const resil_ctx *ctx, resil_call_fn fn,
           void *arg, link *up) {
  resil_outcome o;
  held h[RESIL_CHAIN_MAX_LAYERS];
  const split_op *ops = ch->ops;
  size_t j = ch->layers[i].split_end;
  int no_deadline = ctx->deadline_ns == RESIL_NO_DEADLINE;
  size_t k = i;
  for (; k < j; k++) {
    const split_op *op = &ops[k];
    int go;
    if (op->at == LAYER_BREAKER_AT) {
      go = resil__breaker_enter(op->policy, &h[k].permit, &h[k].t0, &o);
    } else if (op->at == LAYER_RATELIMITER_AT) {
      /* The breaker's reading right before it entered this limiter, when
       * it is as good as the limiter's own (split_op). */
      const int64_t *now =
          k > i && (no_deadline ? op->hand : op->hand_dl) ? &h[k - 1].t0 : NULL;
      go = resil__ratelimiter_enter(op->policy, ctx, now, &o);
    } else {
      go = resil__bulkhead_enter(op->policy, ctx, &o);
    }
    if (RESIL_UNLIKELY(!go)) break;
  }
  int clean = 0;
  if (RESIL_LIKELY(k == j)) {
    if (j == ch->n) {
      o = fn(arg, ctx);
      if (RESIL_LIKELY(plain_success(o)))
        clean = 1;
      else
        count_outcome(&ch->call, o);
    } else {
      link below = {.clean = 0};
      o = enter_layer(ch, j, ctx, fn, arg, &below);
      clean = below.clean;
    }
  } else {
    /* Layer k refused: no attempt below it. */
    layer_counters *c = ops[k].c;
    if (o.kind == RESIL_REJECTED)
      atomic_fetch_add_explicit(&c->rejections, 1, memory_order_relaxed);
    count_outcome(c, o);
  }
  /* A clean pass below stays clean through these layers: the outcome is
   * the same plain success. Otherwise each counts the outcome. */
  while (k-- > i) {
    const split_op *op = &ops[k];
    if (op->at == LAYER_BREAKER_AT)
      resil__breaker_leave(op->policy, &h[k].permit, &o, h[k].t0);
    else if (op->at == LAYER_BULKHEAD_AT)
      resil__bulkhead_leave(op->policy);
    if (!clean) count_outcome(op->c, o);
  }
  up->clean = clean;
  return o;
}

/* Layer i (not a split one) returned o after f.inner_calls calls below:
 * the clean pass below stays one (up->clean) when this layer made one call
 * and returned the same plain success, or is counted on the layers below
 * now; then this layer's retries, hedges, rejections and outcome. */
static inline void settle_layer(resil_chain *ch, size_t i, const frame *f,
                                const resil_outcome *o, link *up) {
  chain_layer *L = &ch->layers[i];
  if (f->below.clean) {
    if (RESIL_LIKELY(f->inner_calls == 1 && plain_success(*o) &&
                     L->desc.kind != RESIL_LAYER_HEDGE)) {
      up->clean = 1;
      return;
    }
    flush_clean(ch, i + 1);
  }
  if (RESIL_UNLIKELY(f->inner_calls > 1)) {
    if (L->desc.kind == RESIL_LAYER_RETRY)
      atomic_fetch_add_explicit(&L->c.retries, f->inner_calls - 1u,
                                memory_order_relaxed);
    else if (L->desc.kind == RESIL_LAYER_HEDGE)
      atomic_fetch_add_explicit(&L->c.hedges, f->inner_calls - 1u,
                                memory_order_relaxed);
  }
  if (L->desc.kind == RESIL_LAYER_HEDGE && f->inner_calls == 1)
    atomic_fetch_add_explicit(&L->c.unhedged, 1, memory_order_relaxed);
  if (o->kind == RESIL_REJECTED && f->inner_calls == 0)
    atomic_fetch_add_explicit(&L->c.rejections, 1, memory_order_relaxed);
  else if (o->kind == RESIL_REJECTED && L->desc.kind == RESIL_LAYER_RETRY &&
           (o->reason == RESIL_REASON_DEADLINE ||
            o->reason == RESIL_REASON_RETRY_BUDGET))
    /* A retry that refused its next attempt (deadline, budget). */
    atomic_fetch_add_explicit(&L->c.rejections, 1, memory_order_relaxed);
  count_outcome(&L->c, *o);
}

/* Layer i through its run form, its calls below through a trampoline. */
__attribute__((noinline)) static resil_outcome
enter_generic(resil_chain *ch, size_t i, const resil_ctx *ctx, resil_call_fn fn,
              void *arg, link *up) {
  resil_outcome o;
  chain_layer *L = &ch->layers[i];
  if (RESIL_UNLIKELY(layer_may_abandon(&L->desc))) {
    o = enter_heap(ch, i, ctx, fn, arg);
    return o;
  }
  frame f = {.ch = ch, .i = i, .fn = fn, .arg = arg, .inner_calls = 0,
             .below = {.clean = 0}, .heap = 0};
  if (RESIL_UNLIKELY(L->desc.hedges_blocking)) {
    atomic_init(&f.par_calls, 0);
    if (L->watch) /* a library hedge above a breaker layer */
      o = resil__hedge_run_watch(L->desc.policy, ctx, trampoline_par, &f, L->watch);
    else
      o = L->desc.run(L->desc.policy, ctx, trampoline_par, &f);
    /* Every call has returned, ordered by the policy's own lock. */
    f.inner_calls = atomic_load_explicit(&f.par_calls, memory_order_relaxed);
  } else if (L->at == LAYER_RETRY_AT) {
    o = resil__retry_run_watch(L->desc.policy, ctx, trampoline, &f, L->watch);
  } else {
    o = L->desc.run(L->desc.policy, ctx, trampoline, &f);
  }
  settle_layer(ch, i, &f, &o, up);
  return o;
}

/* A library retry: resil_retry_run's fast path with its first attempt made
 * here (entering the layer below as the trampoline would) and the later
 * ones through the trampoline; otherwise its run form. */
__attribute__((noinline)) static resil_outcome
enter_retry(resil_chain *ch, size_t i, const resil_ctx *ctx, resil_call_fn fn,
            void *arg, link *up) {
  resil_outcome o;
  resil_retry *r = ch->ops[i].policy;
  resil_ctx first;
  if (RESIL_UNLIKELY(!resil__retry_fast_first(r, ctx, &first))) {
    o = enter_generic(ch, i, ctx, fn, arg, up);
    return o;
  }
  frame f = {.ch = ch, .i = i, .fn = fn, .arg = arg, .inner_calls = 1,
             .below = {.clean = 0}, .heap = 0};
  size_t j = i + 1;
  if (j < ch->n && is_split(ch->ops[j].at))
    o = split_pass(ch, j, &first, fn, arg, &f.below);
  else
    o = enter_layer(ch, j, &first, fn, arg, &f.below);
  resil__retry_fast_rest(r, &first, trampoline, &f, &o, ch->layers[i].watch);
  settle_layer(ch, i, &f, &o, up);
  return o;
}

/* Enters layer i (the call for i == n); up->clean is set as link says. */
static resil_outcome enter_layer(resil_chain *ch, size_t i, const resil_ctx *ctx,
                                 resil_call_fn fn, void *arg, link *up) {
  resil_outcome o;
  up->clean = 0;
  if (i == ch->n) {
    o = fn(arg, ctx);
    if (RESIL_LIKELY(plain_success(o)))
      up->clean = 1;
    else
      count_outcome(&ch->call, o);
    return o;
  }
  int at = ch->ops[i].at;
  /* A custom layer above may hand its call a ctx of another size (or
   * none): the run forms read that one. */
  if (is_split(at) && RESIL_LIKELY(ctx && ctx->struct_size == sizeof *ctx))
    o = split_pass(ch, i, ctx, fn, arg, up);
  else if (at == LAYER_RETRY_AT)
    o = enter_retry(ch, i, ctx, fn, arg, up);
  else
    o = enter_generic(ch, i, ctx, fn, arg, up);
  return o;
}

/* ---- the one-pass plan (ch->plan) ---------------------------------------
 *
 * resil_chain_run's common case, inline: the split layers' enters, the call
 * (or the layer below them), and for a clean pass their leaves for a plain
 * success and, with a retry on top, its count of a first-attempt success.
 * Everything else (a refusal, an outcome that is not a plain success, a
 * retry's later attempts) goes through the same statements as split_pass
 * and enter_retry, in the noinline helpers below. */

/* split_pass's tail for a pass that is not clean: layer k refused (k < j;
 * no attempt below it) or layers i..j-1 all entered and o came back from
 * below, not clean; each entered layer leaves with o and counts it. h[0]
 * is layer i's. */
__attribute__((noinline)) static void pass_unclean(resil_chain *ch, size_t i,
                                                   size_t k, size_t j,
                                                   held *h,
                                                   const resil_outcome *o) {
  const split_op *ops = ch->ops;
  if (k < j) {
    layer_counters *c = ops[k].c;
    if (o->kind == RESIL_REJECTED)
      atomic_fetch_add_explicit(&c->rejections, 1, memory_order_relaxed);
    count_outcome(c, *o);
  }
  while (k-- > i) {
    const split_op *op = &ops[k];
    if (op->at == LAYER_BREAKER_AT)
      resil__breaker_leave(op->policy, &h[k - i].permit, o, h[k - i].t0);
    else if (op->at == LAYER_BULKHEAD_AT)
      resil__bulkhead_leave(op->policy);
    count_outcome(op->c, *o);
  }
}

/* enter_retry after a first attempt (first: its ctx) that was not a clean
 * pass: the retry goes on, then settles as enter_retry settles it. */
__attribute__((noinline)) static void
retry_unclean(resil_chain *ch, const resil_ctx *first, resil_call_fn fn,
              void *arg, resil_outcome *io) {
  frame f = {.ch = ch, .i = 0, .fn = fn, .arg = arg, .inner_calls = 1,
             .below = {.clean = 0}, .heap = 0};
  link top = {.clean = 0};
  resil__retry_fast_rest(ch->ops[0].policy, first, trampoline, &f, io,
                         ch->layers[0].watch);
  settle_layer(ch, 0, &f, io, &top);
  if (top.clean) resil__shards_add(&ch->clean, 0, 1);
}

#define CHAIN_INLINE inline __attribute__((always_inline))

/* Layer op's enter in a plan's pass (split_pass's), op->at or, when
 * resil_chain_run knows it, the constant `at`: h is its held, h[-1] the
 * layer above's; sel: which of op's hands applies (in a plan, the layer
 * above a rate limiter with either set is a breaker of the pass). */
static CHAIN_INLINE int enter_op(const split_op *op, int at, held *h,
                                 const resil_ctx *cc, unsigned sel,
                                 resil_outcome *o) {
  if (!at) at = op->at;
  if (at == LAYER_BREAKER_AT)
    return resil__breaker_enter(op->policy, &h->permit, &h->t0, o);
  if (at == LAYER_RATELIMITER_AT)
    return resil__ratelimiter_enter(op->policy, cc,
                                    op->hands & sel ? &h[-1].t0 : NULL, o);
  return resil__bulkhead_enter(op->policy, cc, o);
}

/* Layer op's leave after a clean pass (at as for enter_op):
 * resil__breaker_leave and resil__bulkhead_leave for a plain success (the
 * clean pass is counted once, by the caller). */
static CHAIN_INLINE void leave_op_clean(const split_op *op, int at,
                                        const held *h) {
  if (!at) at = op->at;
  if (at == LAYER_BREAKER_AT)
    resil__breaker_leave_ok(op->policy, &h->permit, h->t0);
  else if (at == LAYER_BULKHEAD_AT)
    resil__bulkhead_leave(op->policy);
}

/* A plan's pass: its length, and for len <= 3 the kinds of its layers
 * when the caller knows them as constants (0: read from the op). */
typedef struct pass_shape {
  size_t len;
  int at[3];
  /* 1 when the caller knows the plan is PLAN_RETRY, 0 when it knows it is
   * PLAN_SPLIT, -1: read ch->plan. */
  int retry;
} pass_shape;

/* The end of a plan's clean pass (the call, or the layer below, returned a
 * plain success): the leaves, the clean pass's count and, with a retry on
 * top, its count of a first-attempt success (resil__retry_first_ok); what
 * resil__retry_fast_rest and settle_layer do for a clean first attempt,
 * with the outcome's stop and attempts set by plan_body. */
static CHAIN_INLINE void plan_clean_end(resil_chain *ch, const split_op *ops,
                                        const held *h, pass_shape sh,
                                        int retry) {
  if (sh.len <= 3) {
    if (sh.len > 2) leave_op_clean(&ops[2], sh.at[2], &h[2]);
    if (sh.len > 1) leave_op_clean(&ops[1], sh.at[1], &h[1]);
    leave_op_clean(&ops[0], sh.at[0], &h[0]);
  } else {
    for (size_t q = sh.len; q-- > 0;) leave_op_clean(&ops[q], 0, &h[q]);
  }
  resil__shards_add(&ch->clean, 0, 1);
  if (retry) resil__retry_first_ok(ch->ops[0].policy);
}

/* plan_body's end for a pass that is not clean: m of its layers entered
 * (h[0..m-1]), o the refusal of layer plan_from + m (m < its length) or
 * the outcome from below, already counted where the call is; the leaves
 * and counts of pass_unclean, then a retry on top goes on. */
__attribute__((noinline)) static resil_outcome
plan_unclean(resil_chain *ch, const resil_ctx *cc, resil_call_fn fn,
             void *arg, size_t m, held *h, resil_outcome o) {
  pass_unclean(ch, ch->plan_from, ch->plan_from + m, ch->plan_end, h, &o);
  if (ch->plan == PLAN_RETRY) retry_unclean(ch, cc, fn, arg, &o);
  return o;
}

/* A plan chain's call, counted, fallback not applied. c: the ctx of the
 * pass's layers (for PLAN_RETRY, the first attempt's, which
 * resil__retry_fast_first gave), or NULL for resil_chain_run's NULL ctx
 * (ch->plan_ctx: null_ctx, or null_ctx1 below a retry, whose fast path
 * then applies): split_pass over the sh.len = plan_end - plan_from layers
 * from plan_from (ch->plan_ops; and enter_retry above them) with the clean
 * pass's end inline; written out step by step for len <= 3, with the
 * layers' kinds when the caller knows them (the plan_fast_* functions): a
 * dispatch per layer in each direction cost ~3 ns of a four-layer chain's
 * ~30. The call writes its outcome into o (whose address is never taken),
 * which is read field by field and returned built field by field in the
 * caller's slot (resil__outcome_with_stop): never copied wide (a wide load
 * right after the call's narrow stores stalls on store forwarding). */
static CHAIN_INLINE resil_outcome plan_body(resil_chain *ch,
                                            const resil_ctx *c,
                                            resil_call_fn fn, void *arg,
                                            pass_shape sh) {
  const int retry = sh.retry >= 0 ? sh.retry : ch->plan == PLAN_RETRY;
  /* A known plan: its pass and ctx at fixed places in ch (no register to
   * keep them in). */
  const resil_ctx *cc = c                ? c
                        : sh.retry == 1  ? &ch->null_ctx1
                        : sh.retry == 0  ? &ch->null_ctx
                                         : ch->plan_ctx;
  held h[RESIL_CHAIN_MAX_LAYERS]; /* h[m]: layer plan_from + m's */
  resil_outcome o;
  resil_outcome r; /* a refusal */
  const unsigned sel =
      !c || cc->deadline_ns == RESIL_NO_DEADLINE ? HAND : HAND_DL;
  const split_op *ops = sh.retry == 1   ? &ch->ops[1]
                        : sh.retry == 0 ? &ch->ops[0]
                                        : ch->plan_ops;
  /* plan_end, a constant for a known plan. */
  const size_t end =
      sh.retry >= 0 ? (size_t)sh.retry + sh.len : ch->plan_end;
  size_t m = 0; /* layers entered */
  if (sh.len <= 3) {
    if (!enter_op(&ops[0], sh.at[0], &h[0], cc, sel, &r)) goto refused;
    m = 1;
    if (sh.len > 1) {
      if (!enter_op(&ops[1], sh.at[1], &h[1], cc, sel, &r)) goto refused;
      m = 2;
    }
    if (sh.len > 2) {
      if (!enter_op(&ops[2], sh.at[2], &h[2], cc, sel, &r)) goto refused;
      m = 3;
    }
  } else {
    do {
      if (RESIL_UNLIKELY(!enter_op(&ops[m], 0, &h[m], cc, sel, &r)))
        goto refused;
    } while (++m < sh.len);
  }
  if (end == ch->n) {
    o = fn(arg, cc);
    if (RESIL_UNLIKELY(!plain_success(o))) {
      count_outcome(&ch->call, o);
      o = plan_unclean(ch, cc, fn, arg, m, h, o);
      return o;
    }
  } else {
    link below = {.clean = 0};
    o = enter_layer(ch, end, cc, fn, arg, &below);
    if (!below.clean) {
      o = plan_unclean(ch, cc, fn, arg, m, h, o);
      return o;
    }
  }
  plan_clean_end(ch, ops, h, sh, retry);
  /* Built field by field in the caller's slot. */
  if (retry) return resil__outcome_with_stop(&o, RESIL_STOP_SUCCESS, 1);
  return resil__outcome_with_stop(&o, o.stop, o.attempts);
refused:
  o = plan_unclean(ch, cc, fn, arg, m, h, r);
  return o;
}

/* plan_body for resil_chain_run's other calls. */
__attribute__((noinline)) static resil_outcome
run_plan(resil_chain *ch, const resil_ctx *c, resil_call_fn fn, void *arg) {
  pass_shape sh = {ch->plan_end - ch->plan_from, {0, 0, 0}, -1};
  return plan_body(ch, c, fn, arg, sh);
}

/* plan_body for a call without ctx, one function per pass of PLAN_SHAPES
 * and plan (ch->fast_fn: plan_fast_<x> for PLAN_SPLIT, plan_fast_r<x> for
 * PLAN_RETRY), and run_plan's for the other plans. */
/* Without scalar replacement of aggregates, GCC reads the call's outcome
 * where it is used (the class test, then the copy into the caller's slot
 * after the leaves) instead of loading every field right after the call
 * and keeping them on the stack across the leaves' calls: 6 instructions
 * of ~340 a call of chain4_run. */
#if defined(__GNUC__) && !defined(__clang__)
#define PLAN_FAST_ATTRS __attribute__((noinline, optimize("no-tree-sra")))
#else
#define PLAN_FAST_ATTRS __attribute__((noinline))
#endif
#define PLAN_FN(x, n, a, b, c)                                                 \
  PLAN_FAST_ATTRS static resil_outcome plan_fast_##x(                          \
      resil_chain *ch, resil_call_fn fn, void *arg) {                          \
    const pass_shape sh = {n, {a, b, c}, 0};                                   \
    return plan_body(ch, NULL, fn, arg, sh);                                   \
  }                                                                            \
  PLAN_FAST_ATTRS static resil_outcome plan_fast_r##x(                         \
      resil_chain *ch, resil_call_fn fn, void *arg) {                          \
    const pass_shape sh = {n, {a, b, c}, 1};                                   \
    return plan_body(ch, NULL, fn, arg, sh);                                   \
  }
PLAN_SHAPES(PLAN_FN)
#undef PLAN_FN
__attribute__((noinline)) static resil_outcome
plan_fast_generic(resil_chain *ch, resil_call_fn fn, void *arg) {
  return run_plan(ch, NULL, fn, arg);
}

/* [plan == PLAN_RETRY][fast] */
static plan_fast_fn *const plan_fast[2][SHAPE_GENERIC + 1] = {
    {
#define PLAN_ENTRY(x, n, a, b, c) [x] = plan_fast_##x,
        PLAN_SHAPES(PLAN_ENTRY)
#undef PLAN_ENTRY
            [SHAPE_GENERIC] = plan_fast_generic},
    {
#define PLAN_ENTRY(x, n, a, b, c) [x] = plan_fast_r##x,
        PLAN_SHAPES(PLAN_ENTRY)
#undef PLAN_ENTRY
            [SHAPE_GENERIC] = plan_fast_generic}};

static plan_fast_fn *plan_fast_for(int plan, unsigned fast) {
  return fast ? plan_fast[plan == PLAN_RETRY][fast] : NULL;
}

static resil_fallback_kind apply_fallback(resil_chain *ch, void *arg,
                                          const resil_ctx *ctx,
                                          resil_outcome *o) {
  resil_fallback_kind fk = ch->fallback(ch->fallback_arg, arg, o);
  if (fk == RESIL_FALLBACK_CACHED && !(ctx->flags & RESIL_CALL_IDEMPOTENT))
    fk = resil_outcome_maybe_executed(o) ? RESIL_FALLBACK_PENDING
                                         : RESIL_FALLBACK_UNAVAILABLE;
  switch (fk) {
  case RESIL_FALLBACK_CACHED:
    o->flags |= RESIL_OF_FALLBACK_CACHED;
    break;
  case RESIL_FALLBACK_PENDING:
    o->flags |= RESIL_OF_FALLBACK_PENDING;
    break;
  case RESIL_FALLBACK_UNAVAILABLE:
    o->flags |= RESIL_OF_FALLBACK_UNAVAILABLE;
    break;
  case RESIL_FALLBACK_NONE:
    break;
  }
  return fk;
}

/* resil_chain_run for every call but the common one. */
__attribute__((noinline)) static resil_outcome
run_general(resil_chain *ch, const resil_ctx *ctx, resil_call_fn fn, void *arg) {
  resil_outcome o; /* the only value returned: built in the return slot */
  if (RESIL_UNLIKELY(!ch || ch->magic != RESIL_MAGIC_CHAIN || !fn)) {
    o = resil_outcome_make(RESIL_NOT_SENT, RESIL_REASON_LOCAL_ERROR);
    return o;
  }
  resil_ctx local;
  if (ctx) {
    resil_ctx lc;
    const resil_ctx *c = resil__ctx_in(&lc, ctx);
    if (RESIL_UNLIKELY(!c)) {
      o = resil_outcome_make(RESIL_NOT_SENT, RESIL_REASON_LOCAL_ERROR);
      return o;
    }
    local = *c;
  } else {
    resil__ctx_defaults(&local);
  }
  if (!local.clock) local.clock = ch->clock;
  if (ch->total_timeout_ns > 0 && local.deadline_ns == RESIL_NO_DEADLINE)
    resil_ctx_set_timeout_ns(&local, ch->total_timeout_ns);
  link top = {.clean = 0};
  /* enter_layer's dispatch, for the full-size local ctx. */
  int at = ch->n ? ch->ops[0].at : LAYER_GENERIC;
  resil_ctx first;
  if (ch->plan == PLAN_SPLIT)
    o = run_plan(ch, &local, fn, arg);
  else if (ch->plan == PLAN_RETRY &&
           resil__retry_fast_first(ch->ops[0].policy, &local, &first))
    o = run_plan(ch, &first, fn, arg);
  else if (at == LAYER_RETRY_AT)
    o = enter_retry(ch, 0, &local, fn, arg, &top);
  else if (is_split(at))
    o = split_pass(ch, 0, &local, fn, arg, &top);
  else
    o = enter_layer(ch, 0, &local, fn, arg, &top);
  if (top.clean) resil__shards_add(&ch->clean, 0, 1);
  if (RESIL_UNLIKELY(ch->fallback) && !plain_success(o)) {
    resil_outcome t = o;
    if (!resil_outcome_is_success(&t)) apply_fallback(ch, arg, &local, &t);
    o = t;
  }
  return o;
}

resil_outcome resil_chain_run(resil_chain *ch, const resil_ctx *ctx,
                              resil_call_fn fn, void *arg) {
  /* The common call: no ctx, a plan chain without total timeout or
   * fallback (ch->fast_fn), its pass written out for its shape; the
   * outcome is built in the caller's slot. */
  if (RESIL_LIKELY(ch && ch->magic == RESIL_MAGIC_CHAIN && fn && !ctx &&
                   ch->fast_fn))
    return ch->fast_fn(ch, fn, arg);
  return run_general(ch, ctx, fn, arg);
}

/* ---- inspection -------------------------------------------------------- */

static int chain_valid(const resil_chain *ch) {
  return ch && ch->magic == RESIL_MAGIC_CHAIN;
}

size_t resil_chain_layers(const resil_chain *ch) {
  return chain_valid(ch) ? ch->n : 0;
}

static void read_counters(const resil_chain *ch, const layer_counters *c,
                          resil_layer_stats *out) {
  layer_counters *m = (layer_counters *)c;
  uint64_t cls[CLASS_SLOTS];
  uint64_t sum = 0;
  for (int k = 0; k < CLASS_SLOTS; k++) {
    cls[k] = atomic_load_explicit(&m->by_class[k], memory_order_relaxed);
    if (k == RESIL_CLASS_SUCCESS)
      cls[k] += resil__shards_sum(&ch->clean, 0);
    sum += cls[k];
  }
  memset(out, 0, sizeof *out);
  out->struct_size = sizeof *out;
  out->calls_in = sum;
  out->rejections = atomic_load_explicit(&m->rejections, memory_order_relaxed);
  out->retries = atomic_load_explicit(&m->retries, memory_order_relaxed);
  out->hedges = atomic_load_explicit(&m->hedges, memory_order_relaxed);
  out->unhedged = atomic_load_explicit(&m->unhedged, memory_order_relaxed);
  out->successes = cls[RESIL_CLASS_SUCCESS];
  out->by_kind[RESIL_NOT_SENT] = cls[RESIL_CLASS_NOT_SENT];
  out->by_kind[RESIL_UNKNOWN] = cls[RESIL_CLASS_UNKNOWN];
  out->by_kind[RESIL_REJECTED] = cls[RESIL_CLASS_REJECTED];
  out->by_kind[RESIL_ANSWERED] = cls[RESIL_CLASS_SUCCESS] + cls[RESIL_CLASS_REDIRECT] +
                                 cls[RESIL_CLASS_CLIENT_ERROR] + cls[RESIL_CLASS_SERVER_ERROR] +
                                 cls[RESIL_CLASS_HTTP_408] + cls[RESIL_CLASS_HTTP_425] +
                                 cls[RESIL_CLASS_HTTP_429];
}

resil_status resil_chain_layer_stats_sized(const resil_chain *ch, size_t i,
                                           resil_layer_stats *dst, size_t n) {
  if (!chain_valid(ch)) return RESIL_EMISUSE;
  if (!dst || i >= ch->n) return RESIL_EINVAL;
  resil_layer_stats out;
  read_counters(ch, &ch->layers[i].c, &out);
  resil_layer_stats below;
  read_counters(ch, i + 1 < ch->n ? &ch->layers[i + 1].c : &ch->call, &below);
  out.attempts_out = below.calls_in;
  resil__sized_out(dst, n, &out, sizeof out);
  return RESIL_OK;
}

resil_status resil_chain_count_hedges(resil_chain *ch, size_t i, uint64_t n) {
  if (!chain_valid(ch)) return RESIL_EMISUSE;
  if (i >= ch->n || ch->layers[i].desc.kind != RESIL_LAYER_HEDGE) return RESIL_EINVAL;
  atomic_fetch_add_explicit(&ch->layers[i].c.hedges, n, memory_order_relaxed);
  return RESIL_OK;
}

resil_status resil_chain_call_stats_sized(const resil_chain *ch,
                                          resil_layer_stats *dst, size_t n) {
  if (!chain_valid(ch)) return RESIL_EMISUSE;
  if (!dst) return RESIL_EINVAL;
  resil_layer_stats out;
  read_counters(ch, &ch->call, &out);
  out.attempts_out = out.calls_in;
  resil__sized_out(dst, n, &out, sizeof out);
  return RESIL_OK;
}

/* Appends to a bounded buffer, tracking the length that would be needed. */
typedef struct sbuf {
  char *p;
  size_t size;
  size_t len;
} sbuf;

static void sb_add(sbuf *b, const char *fmt, ...) RESIL_PRINTF(2, 3);
static void sb_add(sbuf *b, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  size_t room = b->len < b->size ? b->size - b->len : 0;
  int n = vsnprintf(room ? b->p + b->len : NULL, room, fmt, ap);
  va_end(ap);
  if (n > 0) b->len += (size_t)n;
}

size_t resil_chain_nesting(const resil_chain *ch, char *buf, size_t size) {
  sbuf b = {buf, size, 0};
  if (size) buf[0] = 0;
  if (!chain_valid(ch)) return 0;
  for (size_t i = 0; i < ch->n; i++) sb_add(&b, "%s(", ch->layers[i].label);
  sb_add(&b, "call");
  for (size_t i = 0; i < ch->n; i++) sb_add(&b, ")");
  return b.len;
}

/* Index of the first layer of kind k at or after `from`, or ch->n. */
static size_t find_kind(const resil_chain *ch, resil_layer_kind k, size_t from) {
  for (size_t i = from; i < ch->n; i++)
    if (ch->layers[i].desc.kind == k) return i;
  return ch->n;
}

static const char *unit_of(const resil_chain *ch, size_t i) {
  size_t first_retry = find_kind(ch, RESIL_LAYER_RETRY, 0);
  size_t first_hedge = find_kind(ch, RESIL_LAYER_HEDGE, 0);
  resil_layer_kind k = ch->layers[i].desc.kind;
  if (k == RESIL_LAYER_RETRY) {
    if (first_retry < i) return "attempts of the retry outside it (nested: attempts multiply)";
    if (first_hedge < i)
      return "the primary and every hedge of the hedge outside it (each runs the "
             "whole retry: attempts multiply)";
    return "logical calls; makes physical attempts";
  }
  if (k == RESIL_LAYER_HEDGE) {
    if (first_retry < i)
      return "attempts of the retry outside it; sends up to 1 + max_hedges "
             "attempts in parallel for each";
    if (first_hedge < i) return "attempts of the hedge outside it (nested: attempts multiply)";
    return "logical calls; sends up to 1 + max_hedges attempts in parallel";
  }
  if (first_hedge < i && first_retry < i)
    return "physical attempts (every retry attempt and every hedge passes here)";
  if (first_hedge < i) return "physical attempts (the primary and every hedge pass here)";
  if (first_retry < i) return "physical attempts (every retry attempt passes here)";
  return "logical calls (one result per call, whatever happens inside)";
}


/* Facts worth knowing that are not traps: the recommended order has a
 * retry outside the breaker, so they are notes, not warnings. */
static void collect_notes(const resil_chain *ch, sbuf *b) {
  size_t retry = find_kind(ch, RESIL_LAYER_RETRY, 0);
  size_t breaker = find_kind(ch, RESIL_LAYER_BREAKER, 0);
  if (retry < ch->n && breaker < ch->n && retry < breaker)
    sb_add(b,
           "note: retry \"%s\" is outside breaker \"%s\": the breaker counts "
           "every attempt (one failing logical call records up to %u "
           "failures), and an OPEN breaker's REJECTED is not retried by "
           "default\n",
           ch->layers[retry].name, ch->layers[breaker].name,
           ch->layers[retry].desc.max_attempts);
  for (size_t i = find_kind(ch, RESIL_LAYER_HEDGE, 0); i < ch->n;
       i = find_kind(ch, RESIL_LAYER_HEDGE, i + 1)) {
    sb_add(b,
           "note: hedge \"%s\" hedges only calls whose ctx flags carry "
           "RESIL_CALL_IDEMPOTENT or RESIL_CALL_STABLE_KEY; any other call "
           "passes through unhedged (counted)\n",
           ch->layers[i].name);
    if (ch->layers[i].desc.hedges_blocking)
      sb_add(b,
             "note: hedge \"%s\": resil_chain_run hedges on its thread pool "
             "(every attempt inside it runs on a worker; losers are cancelled "
             "and waited for)\n",
             ch->layers[i].name);
    else
      sb_add(b,
             "note: hedge \"%s\": resil_chain_run passes calls through it "
             "unhedged, one attempt (it has no executor); hedging runs on the "
             "async engine\n",
             ch->layers[i].name);
  }
}

/* Retries and hedges last (DESIGN §2.9): the breaker each library retry
 * or hedge layer watches (the breaker layer nearest inside it, else its
 * config's recovery_breaker), or that it retries or hedges during recovery
 * too. */
static void collect_recovery_notes(const resil_chain *ch, sbuf *b) {
  for (size_t i = 0; i < ch->n; i++) {
    const chain_layer *L = &ch->layers[i];
    int is_retry = L->at == LAYER_RETRY_AT;
    int is_hedge = L->desc.kind == RESIL_LAYER_HEDGE && resil__chain_layer_typed(&L->desc);
    if (!is_retry && !is_hedge) continue;
    resil_breaker *own = NULL;
    int during = is_retry ? resil__retry_recovery(L->desc.policy, &own)
                          : resil__hedge_recovery(L->desc.policy, &own);
    resil_breaker *w = L->watch ? L->watch : own;
    if (during && L->watch)
      sb_add(b,
             "note: %s \"%s\" %s during recovery too (%s_during_recovery): breaker "
             "\"%s\" inside it is not watched\n",
             is_retry ? "retry" : "hedge", L->name, is_retry ? "retries" : "hedges",
             is_retry ? "retry" : "hedge", resil_breaker_name(L->watch));
    else if (!during && w && is_retry)
      sb_add(b,
             "note: retry \"%s\" retries last: while breaker \"%s\" is HALF_OPEN or "
             "ramping after recovery it makes no retry (the call stops with RECOVERING, "
             "counted)\n",
             L->name, resil_breaker_name(w));
    else if (!during && w)
      sb_add(b,
             "note: hedge \"%s\" hedges last: while breaker \"%s\" is HALF_OPEN or "
             "ramping after recovery it sends no hedge (counted)\n",
             L->name, resil_breaker_name(w));
  }
}

/* The real traps (chain.h). */
static unsigned collect_warnings(const resil_chain *ch, sbuf *b) {
  unsigned n = 0;
  size_t retry = find_kind(ch, RESIL_LAYER_RETRY, 0);
  if (retry < ch->n && ch->total_timeout_ns == 0) {
    n++;
    if (b)
      sb_add(b,
             "warning: retry \"%s\" runs without a total deadline: attempts and "
             "backoff can outlast what the caller will wait (set "
             "total_timeout_ns or a ctx deadline)\n",
             ch->layers[retry].name);
  }
  size_t tl = find_kind(ch, RESIL_LAYER_TIMELIMITER, 0);
  if (tl < ch->n && ch->total_timeout_ns > 0 &&
      ch->layers[tl].desc.attempt_timeout_ns > ch->total_timeout_ns) {
    n++;
    if (b)
      sb_add(b,
             "warning: time limiter \"%s\" allows %lld ms per attempt, longer "
             "than the total deadline of %lld ms\n",
             ch->layers[tl].name,
             (long long)(ch->layers[tl].desc.attempt_timeout_ns / RESIL_NS_PER_MS),
             (long long)(ch->total_timeout_ns / RESIL_NS_PER_MS));
  }
  size_t hedge = find_kind(ch, RESIL_LAYER_HEDGE, 0);
  if (retry < ch->n && find_kind(ch, RESIL_LAYER_RETRY, retry + 1) < ch->n) {
    n++;
    resil_amplification a;
    if (b && resil_chain_amplification(ch, &a) == RESIL_OK)
      sb_add(b,
             "warning: nested retries multiply: up to %llu physical attempts "
             "per logical call\n",
             (unsigned long long)a.attempts);
  } else if (hedge < ch->n &&
             (retry < ch->n || find_kind(ch, RESIL_LAYER_HEDGE, hedge + 1) < ch->n)) {
    n++;
    resil_amplification a;
    if (b && resil_chain_amplification(ch, &a) == RESIL_OK)
      sb_add(b,
             "warning: %s multiply: up to %llu physical attempts per logical "
             "call\n",
             retry < ch->n ? "retries and hedges" : "nested hedges",
             (unsigned long long)a.attempts);
  }
  return n;
}

unsigned resil_chain_warnings(const resil_chain *ch) {
  return chain_valid(ch) ? collect_warnings(ch, NULL) : 0;
}

size_t resil_chain_describe(const resil_chain *ch, char *buf, size_t size) {
  sbuf b = {buf, size, 0};
  if (size) buf[0] = 0;
  if (!chain_valid(ch)) return 0;
  char nest[512];
  resil_chain_nesting(ch, nest, sizeof nest);
  sb_add(&b, "%s\n", nest);
  for (size_t i = 0; i < ch->n; i++) {
    const chain_layer *L = &ch->layers[i];
    sb_add(&b, "  %zu %s \"%s\": observes %s", i + 1, L->label, L->name,
           unit_of(ch, i));
    if (L->desc.kind == RESIL_LAYER_RETRY)
      sb_add(&b, "; max %u attempts", L->desc.max_attempts);
    if (L->desc.kind == RESIL_LAYER_HEDGE) {
      char d[32], last[32];
      resil__fmt_ns(d, sizeof d, L->desc.hedge_delay_ns);
      resil__fmt_ns(last, sizeof last,
                    resil__sat_mul(L->desc.hedge_delay_ns, (int64_t)L->desc.max_hedges));
      sb_add(&b,
             "; up to %u hedge%s, each after at most %s; worst case %u attempts "
             "per call (all may be in flight at once), the last sent %s after "
             "the first",
             L->desc.max_hedges, L->desc.max_hedges == 1 ? "" : "s", d,
             L->desc.max_hedges + 1u, last);
    }
    if (L->desc.attempt_timeout_ns > 0)
      sb_add(&b, "; %lld ms per attempt",
             (long long)(L->desc.attempt_timeout_ns / RESIL_NS_PER_MS));
    sb_add(&b, "\n");
  }
  if (ch->total_timeout_ns > 0)
    sb_add(&b, "  deadline: %lld ms per logical call\n",
           (long long)(ch->total_timeout_ns / RESIL_NS_PER_MS));
  collect_notes(ch, &b);
  collect_recovery_notes(ch, &b);
  collect_warnings(ch, &b);
  return b.len;
}

/* ---- amplification ---------------------------------------------------- */

static resil_status amplification(const resil_amp_layer *layers, size_t n,
                                  int64_t attempt_timeout_ns,
                                  resil_amplification *out) {
  if (!layers || n == 0 || !out || attempt_timeout_ns < 0) return RESIL_EINVAL;
  /* The caller's elements are struct_size bytes apart (chain.h). */
  size_t stride = layers[0].struct_size;
  const size_t min = offsetof(resil_amp_layer, wait_per_run_ns) + sizeof(int64_t);
  if (stride < min || stride > sizeof(resil_amp_layer) + RESIL__SIZED_SLACK)
    return RESIL_EINVAL;
  int64_t runs = 1;     /* serial runs of layer i per logical call */
  int64_t attempts = 1; /* runs of layer i, parallel hedges included */
  int64_t wait = 0, hedge_delay = 0;
  for (size_t i = 0; i < n; i++) {
    resil_amp_layer l;
    memset(&l, 0, sizeof l);
    const void *src = (const unsigned char *)layers + i * stride;
    if (resil__sized_size(src) != stride ||
        resil__sized_in(&l, sizeof l, src, min, "resil_amp_layer",
                        "sizeof(resil_amp_layer) in struct_size: see chain.h",
                        NULL) != RESIL_OK)
      return RESIL_EINVAL;
    if (l.max_attempts == 0 || l.wait_per_run_ns < 0 || l.hedge_delay_ns < 0)
      return RESIL_EINVAL;
    if (l.hedges > 0 && (l.max_attempts != 1 || l.hedges > RESIL_HEDGE_MAX_HEDGES))
      return RESIL_EINVAL;
    wait = resil__sat_add(wait, resil__sat_mul(runs, l.wait_per_run_ns));
    /* A hedge's last hedge starts hedges x delay into its run; its attempts
     * overlap, so only that offset adds to the serial time. */
    hedge_delay = resil__sat_add(
        hedge_delay, resil__sat_mul(runs, resil__sat_mul((int64_t)l.hedges, l.hedge_delay_ns)));
    runs = resil__sat_mul(runs, (int64_t)l.max_attempts);
    attempts = resil__sat_mul(attempts,
                              resil__sat_mul((int64_t)l.max_attempts, 1 + (int64_t)l.hedges));
  }
  memset(out, 0, sizeof *out);
  out->struct_size = sizeof *out;
  out->attempts = (uint64_t)attempts;
  out->serial_attempts = (uint64_t)runs;
  out->wait_ns = wait;
  out->hedge_delay_ns = hedge_delay;
  out->time_ns = resil__sat_add(
      resil__sat_add(resil__sat_mul(runs, attempt_timeout_ns), wait), hedge_delay);
  return RESIL_OK;
}

resil_status resil_amplification_compute_sized(const resil_amp_layer *layers,
                                               size_t n,
                                               int64_t attempt_timeout_ns,
                                               resil_amplification *dst,
                                               size_t size) {
  if (!dst) return RESIL_EINVAL;
  resil_amplification a;
  resil_status st = amplification(layers, n, attempt_timeout_ns, &a);
  if (st == RESIL_OK) resil__sized_out(dst, size, &a, sizeof a);
  return st;
}

resil_status resil_chain_amplification_sized(const resil_chain *ch,
                                             resil_amplification *dst,
                                             size_t size) {
  if (!chain_valid(ch)) return RESIL_EMISUSE;
  if (!dst) return RESIL_EINVAL;
  resil_amp_layer layers[RESIL_CHAIN_MAX_LAYERS];
  size_t n = 0;
  int64_t timeout = 0;
  for (size_t i = 0; i < ch->n; i++) {
    const resil_layer *d = &ch->layers[i].desc;
    if (d->kind == RESIL_LAYER_RETRY || d->kind == RESIL_LAYER_HEDGE) {
      memset(&layers[n], 0, sizeof layers[n]);
      layers[n].struct_size = sizeof layers[n];
      layers[n].max_attempts = d->kind == RESIL_LAYER_RETRY ? d->max_attempts : 1;
      layers[n].wait_per_run_ns = d->kind == RESIL_LAYER_RETRY ? d->worst_wait_ns : 0;
      layers[n].hedges = d->max_hedges;
      layers[n].hedge_delay_ns = d->hedge_delay_ns;
      n++;
    }
    if (d->attempt_timeout_ns > 0) timeout = d->attempt_timeout_ns;
  }
  if (n == 0) {
    memset(&layers[0], 0, sizeof layers[0]);
    layers[0].struct_size = sizeof layers[0];
    layers[0].max_attempts = 1;
    layers[0].wait_per_run_ns = 0;
    n = 1;
  }
  resil_amplification a;
  resil_status st = amplification(layers, n, timeout, &a);
  if (st == RESIL_OK) resil__sized_out(dst, size, &a, sizeof a);
  return st;
}

const char *resil_chain_layer_label(const resil_chain *ch, size_t i) {
  if (!chain_valid(ch) || i >= ch->n) return NULL;
  return ch->layers[i].label;
}

const char *resil_chain_layer_name(const resil_chain *ch, size_t i) {
  if (!chain_valid(ch) || i >= ch->n) return NULL;
  return ch->layers[i].name;
}

int resil_chain_layer_kind(const resil_chain *ch, size_t i) {
  if (!chain_valid(ch) || i >= ch->n) return -1;
  return (int)ch->layers[i].desc.kind;
}

void *resil_chain_layer_policy(const resil_chain *ch, size_t i) {
  if (!chain_valid(ch) || i >= ch->n) return NULL;
  return resil__chain_layer_typed(&ch->layers[i].desc) ? ch->layers[i].desc.policy : NULL;
}

int64_t resil_chain_total_timeout_ns(const resil_chain *ch) {
  return chain_valid(ch) ? ch->total_timeout_ns : -1;
}

resil_status resil_chain_count_layer(resil_chain *ch, size_t i, const resil_outcome *o,
                                     int rejected, uint64_t retries) {
  if (!chain_valid(ch)) return RESIL_EMISUSE;
  if (!o || i > ch->n || (retries && (i == ch->n || ch->layers[i].desc.kind != RESIL_LAYER_RETRY)))
    return RESIL_EINVAL;
  layer_counters *c = i == ch->n ? &ch->call : &ch->layers[i].c;
  if (rejected) atomic_fetch_add_explicit(&c->rejections, 1, memory_order_relaxed);
  if (retries) atomic_fetch_add_explicit(&c->retries, retries, memory_order_relaxed);
  count_outcome(c, *o);
  return RESIL_OK;
}
