/* Retry budget: Finagle's RetryBudget (a leaky token bucket over a TTL
 * window) and gRPC's retry throttling. See include/resil/retry.h. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "retry_int.h"

/* Balances are kept in thousandths of a token so that percentages and
 * gRPC's three-decimal token_ratio are exact integers. */
#define MILLI INT64_C(1000)
/* Finagle divides its TTL into 10 slices too: a deposit lives between 9 and
 * 10 slices' time, which is precise enough for a budget. */
#define BUDGET_SLICES 10
/* Epoch of a slice that never held anything: below any real epoch. */
#define EPOCH_NONE INT64_MIN

typedef struct budget_slice {
  /* Which slice of time (now / slice_ns) the amount belongs to. Changed only
   * under the mutex, after the amount was reset. */
  _Atomic int64_t epoch;
  /* Deposits minus withdrawals in that slice, in thousandths. */
  _Atomic int64_t milli;
} budget_slice;

struct resil_retry_budget {
  uint32_t magic;
  resil_retry_budget_mode mode;
  const resil_clock *clock;
  const resil_allocator *alloc;
  char *name;
  /* Finagle. */
  int64_t slice_ns;
  int64_t deposit_milli;
  int64_t reserve_milli;
  /* gRPC. */
  int64_t max_milli;
  int64_t ratio_milli;
  /* Serialises withdrawals and slice resets; deposits do not take it. */
  pthread_mutex_t mu;
  /* Keeps the read-mostly fields above off the cache lines every deposit
   * writes. */
  char pad_[64];
  budget_slice slices[BUDGET_SLICES];
  _Atomic int64_t tokens_milli; /* gRPC token count */
};

int resil__budget_valid(const resil_retry_budget *b) {
  return b && b->magic == RESIL_MAGIC_BUDGET;
}

/* The 0.1 layout ends with `alloc`. */
#define BUDGET_CONFIG_MIN_SIZE                                                 \
  (offsetof(resil_retry_budget_config, alloc) + sizeof(const resil_allocator *))

static void config_defaults(resil_retry_budget_config *cfg) {
  memset(cfg, 0, sizeof *cfg);
  cfg->struct_size = sizeof *cfg;
  cfg->name = NULL;
  cfg->mode = RESIL_BUDGET_FINAGLE;
  cfg->ttl_ns = 10 * RESIL_NS_PER_S;
  cfg->min_retries_per_s = 10;
  cfg->percent_can_retry_pct = 20;
  cfg->max_tokens = 10;
  cfg->token_ratio_milli = 100;
  cfg->clock = NULL;
  cfg->alloc = NULL;
}

void resil_retry_budget_config_init_sized(resil_retry_budget_config *cfg,
                                          size_t n) {
  if (!cfg) return;
  resil_retry_budget_config full;
  config_defaults(&full);
  resil__sized_out(cfg, n, &full, sizeof full);
}

static resil_status validate(const resil_retry_budget_config *c,
                             resil_error *err) {
  resil_status st;
  if ((st = resil__check_range(err, "mode", (int64_t)c->mode,
                               RESIL_BUDGET_FINAGLE, RESIL_BUDGET_GRPC)) !=
      RESIL_OK)
    return st;
  if ((st = resil__check_ns(err, "ttl_ns", c->ttl_ns, RESIL_NS_PER_S,
                            3600 * RESIL_NS_PER_S)) != RESIL_OK)
    return st;
  if ((st = resil__check_range(err, "min_retries_per_s", c->min_retries_per_s,
                               0, 1000000)) != RESIL_OK)
    return st;
  if ((st = resil__check_range(err, "percent_can_retry_pct",
                               c->percent_can_retry_pct, 0, 1000)) != RESIL_OK)
    return st;
  if ((st = resil__check_range(err, "max_tokens", c->max_tokens, 1, 1000)) !=
      RESIL_OK)
    return st;
  int64_t ratio_max = (int64_t)c->max_tokens * MILLI;
  if (c->token_ratio_milli < 1 || c->token_ratio_milli > ratio_max) {
    char what[64];
    snprintf(what, sizeof what, "1..max_tokens * 1000 (%lld)",
             (long long)ratio_max);
    return resil__err_range(err, "token_ratio_milli", 1, ratio_max,
                            c->token_ratio_milli, what);
  }
  if (c->clock && !c->clock->now_ns)
    return resil__err(err, RESIL_EINVAL, "clock", "has no now_ns function");
  if (c->alloc && (!c->alloc->alloc || !c->alloc->free))
    return resil__err(err, RESIL_EINVAL, "alloc",
                      "needs both alloc and free functions");
  return RESIL_OK;
}

resil_status resil_retry_budget_new(const resil_retry_budget_config *ucfg,
                                    resil_retry_budget **out,
                                    resil_error *err) {
  if (!ucfg || !out)
    return resil__err(err, RESIL_EINVAL, ucfg ? "out" : "cfg",
                      "must not be NULL");
  resil_retry_budget_config full;
  const resil_retry_budget_config *cfg = &full;
  config_defaults(&full);
  resil_status st = resil__sized_in(&full, sizeof full, ucfg,
                                    BUDGET_CONFIG_MIN_SIZE,
                                    "resil_retry_budget_config",
                                    "resil_retry_budget_config_init", err);
  if (st != RESIL_OK) return st;
  st = validate(cfg, err);
  if (st != RESIL_OK) return st;
  resil_retry_budget *b = resil__calloc(cfg->alloc, sizeof *b);
  if (!b) return resil__err(err, RESIL_ENOMEM, NULL, "out of memory");
  int ok;
  b->alloc = cfg->alloc;
  b->name = resil__strdup(cfg->alloc, cfg->name, &ok);
  if (!ok) {
    resil__free(cfg->alloc, b);
    return resil__err(err, RESIL_ENOMEM, NULL, "out of memory");
  }
  if (pthread_mutex_init(&b->mu, NULL) != 0) {
    resil__free(cfg->alloc, b->name);
    resil__free(cfg->alloc, b);
    return resil__err(err, RESIL_ESYS, NULL, "mutex creation failed");
  }
  b->mode = cfg->mode;
  b->clock = resil__clock(cfg->clock);
  b->slice_ns = cfg->ttl_ns / BUDGET_SLICES;
  b->deposit_milli = (int64_t)cfg->percent_can_retry_pct * (MILLI / 100);
  /* min_retries_per_s tokens for every second of the TTL, in thousandths:
   * at most 1e6 * 3600e9 / 1e6, far from overflowing. */
  b->reserve_milli =
      (int64_t)cfg->min_retries_per_s * (cfg->ttl_ns / RESIL_NS_PER_MS);
  b->max_milli = (int64_t)cfg->max_tokens * MILLI;
  b->ratio_milli = cfg->token_ratio_milli;
  for (int i = 0; i < BUDGET_SLICES; i++) {
    atomic_init(&b->slices[i].epoch, EPOCH_NONE);
    atomic_init(&b->slices[i].milli, 0);
  }
  atomic_init(&b->tokens_milli, b->max_milli);
  b->magic = RESIL_MAGIC_BUDGET;
  *out = b;
  resil_error_clear(err);
  return RESIL_OK;
}

void resil_retry_budget_free(resil_retry_budget *b) {
  if (!b || b->magic != RESIL_MAGIC_BUDGET) return;
  b->magic = RESIL_MAGIC_DEAD;
  pthread_mutex_destroy(&b->mu);
  resil__free(b->alloc, b->name);
  resil__free(b->alloc, b);
}

const char *resil_retry_budget_name(const resil_retry_budget *b) {
  if (!resil__budget_valid(b)) return NULL;
  return b->name ? b->name : "retry-budget";
}

/* ---- Finagle window ---------------------------------------------------- */

static int64_t epoch_now(const resil_retry_budget *b) {
  int64_t now = resil__coarse_now(b->clock);
  return (now > 0 ? now : 0) / b->slice_ns;
}

/* Reuses a slice for epoch e once its own epoch has left the window. Caller
 * holds the mutex. The amount is cleared before the new epoch is published
 * (release), so a lock-free depositor that sees the new epoch adds to the
 * cleared amount. */
static void slice_claim_locked(budget_slice *s, int64_t e) {
  if (atomic_load_explicit(&s->epoch, memory_order_relaxed) < e) {
    atomic_store_explicit(&s->milli, 0, memory_order_relaxed);
    atomic_store_explicit(&s->epoch, e, memory_order_release);
  }
}

static void window_add(resil_retry_budget *b, int64_t amount) {
  int64_t e = epoch_now(b);
  budget_slice *s = &b->slices[e % BUDGET_SLICES];
  /* A slice already at a later epoch belongs to a thread whose clock read
   * came later; the amount then counts in that slice, slightly longer than
   * the TTL, which errs by at most one slice. */
  if (RESIL_LIKELY(atomic_load_explicit(&s->epoch, memory_order_acquire) >= e)) {
    atomic_fetch_add_explicit(&s->milli, amount, memory_order_relaxed);
    return;
  }
  pthread_mutex_lock(&b->mu);
  slice_claim_locked(s, e);
  atomic_fetch_add_explicit(&s->milli, amount, memory_order_relaxed);
  pthread_mutex_unlock(&b->mu);
}

/* Reserve plus every slice still inside the window ending at epoch e. */
static int64_t window_sum(const resil_retry_budget *b, int64_t e) {
  resil_retry_budget *m = (resil_retry_budget *)b; /* atomics are not const */
  int64_t total = b->reserve_milli;
  for (int i = 0; i < BUDGET_SLICES; i++) {
    int64_t ep = atomic_load_explicit(&m->slices[i].epoch, memory_order_acquire);
    if (ep > e - BUDGET_SLICES)
      total += atomic_load_explicit(&m->slices[i].milli, memory_order_relaxed);
  }
  return total;
}

/* Withdrawals serialise on the mutex: while it is held, slices are neither
 * reset nor debited by anyone else, and lock-free deposits only raise the
 * sum, so the check below can never let two withdrawals share one token. */
static int window_try_withdraw(resil_retry_budget *b) {
  int granted = 0;
  pthread_mutex_lock(&b->mu);
  int64_t e = epoch_now(b);
  budget_slice *s = &b->slices[e % BUDGET_SLICES];
  slice_claim_locked(s, e);
  if (window_sum(b, e) >= MILLI) {
    atomic_fetch_sub_explicit(&s->milli, MILLI, memory_order_relaxed);
    granted = 1;
  }
  pthread_mutex_unlock(&b->mu);
  return granted;
}

/* ---- gRPC token count -------------------------------------------------- */

static void tokens_add(resil_retry_budget *b, int64_t delta) {
  int64_t cur = atomic_load_explicit(&b->tokens_milli, memory_order_relaxed);
  for (;;) {
    int64_t next = cur + delta;
    if (next > b->max_milli) next = b->max_milli;
    if (next < 0) next = 0;
    /* The common case of a healthy downstream: already full, no write. */
    if (next == cur) return;
    if (atomic_compare_exchange_weak_explicit(&b->tokens_milli, &cur, next,
                                              memory_order_relaxed,
                                              memory_order_relaxed))
      return;
  }
}

static int tokens_allow(const resil_retry_budget *b) {
  resil_retry_budget *m = (resil_retry_budget *)b;
  /* "count > max_tokens / 2", exact in thousandths. */
  return atomic_load_explicit(&m->tokens_milli, memory_order_relaxed) * 2 >
         b->max_milli;
}

/* ---- module interface and public API ------------------------------------ */

void resil__budget_on_call(resil_retry_budget *b) {
  if (b->mode == RESIL_BUDGET_FINAGLE && b->deposit_milli > 0)
    window_add(b, b->deposit_milli);
}

void resil__budget_on_attempt(resil_retry_budget *b, resil_outcome_class c) {
  if (b->mode != RESIL_BUDGET_GRPC) return;
  switch (c) {
  case RESIL_CLASS_SUCCESS:
    tokens_add(b, b->ratio_milli);
    break;
  case RESIL_CLASS_NOT_SENT:
  case RESIL_CLASS_UNKNOWN:
  case RESIL_CLASS_SERVER_ERROR:
  case RESIL_CLASS_HTTP_408:
  case RESIL_CLASS_HTTP_425:
  case RESIL_CLASS_HTTP_429:
    tokens_add(b, -MILLI);
    break;
  default:
    /* A 4xx says nothing about the server's health; a rejection is local. */
    break;
  }
}

int resil__budget_allow_retry(resil_retry_budget *b) {
  if (b->mode == RESIL_BUDGET_GRPC) return tokens_allow(b);
  return window_try_withdraw(b);
}

resil_status resil_retry_budget_deposit(resil_retry_budget *b) {
  if (!resil__budget_valid(b)) return RESIL_EMISUSE;
  if (b->mode == RESIL_BUDGET_GRPC)
    tokens_add(b, b->ratio_milli);
  else if (b->deposit_milli > 0)
    window_add(b, b->deposit_milli);
  return RESIL_OK;
}

resil_status resil_retry_budget_record_failure(resil_retry_budget *b) {
  if (!resil__budget_valid(b)) return RESIL_EMISUSE;
  if (b->mode == RESIL_BUDGET_GRPC) tokens_add(b, -MILLI);
  return RESIL_OK;
}

int resil_retry_budget_try_withdraw(resil_retry_budget *b) {
  if (!resil__budget_valid(b)) return 0;
  return resil__budget_allow_retry(b);
}

int64_t resil_retry_budget_balance(const resil_retry_budget *b) {
  if (!resil__budget_valid(b)) return 0;
  int64_t milli;
  if (b->mode == RESIL_BUDGET_GRPC)
    milli = atomic_load_explicit(&((resil_retry_budget *)b)->tokens_milli,
                                 memory_order_relaxed);
  else
    milli = window_sum(b, epoch_now(b));
  return milli > 0 ? milli / MILLI : 0;
}
