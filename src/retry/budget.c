/* Retry budget: Finagle's RetryBudget (a leaky token bucket over a TTL
 * window) and gRPC's retry throttling. See include/resil/retry.h. */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "retry_int.h"
#include "shared/shared_int.h"

/* Balances are kept in thousandths of a token so that percentages and
 * gRPC's three-decimal token_ratio are exact integers. */
#define MILLI INT64_C(1000)
/* Finagle divides its TTL into 10 slices too: a deposit lives between 9 and
 * 10 slices' time, which is precise enough for a budget. */
#define BUDGET_SLICES 10
/* Epoch of a slice that never held anything: below any real epoch. */
#define EPOCH_NONE INT64_MIN

/* What deposits, withdrawals and the gRPC count change: in the handle
 * (`own`), or in the words of a shared segment's slot (DESIGN §8.1), where
 * every process runs the same code on it. The epochs and the token count
 * come first: they are the slot's initial state (RESIL__SHARED_INIT_WORDS
 * words at most); the amounts start at 0. */
typedef struct budget_state {
  /* Which slice of time (now / slice_ns) each amount belongs to. Changed
   * only under the lock, after the amount was reset. */
  _Atomic int64_t epoch[BUDGET_SLICES];
  _Atomic int64_t tokens_milli; /* gRPC token count */
  /* The shared budget's lock (below): 0, or its holder's
   * resil__shared_owner_self word. Unused by a per-process budget. */
  _Atomic uint64_t lock;
  /* Deposits minus withdrawals in each slice, in thousandths. */
  _Atomic int64_t milli[BUDGET_SLICES];
} budget_state;

#define BUDGET_INIT_WORDS (BUDGET_SLICES + 1)
_Static_assert(sizeof(budget_state) == (2 * BUDGET_SLICES + 2) * sizeof(int64_t),
               "budget_state is words of a shared slot");
_Static_assert(BUDGET_INIT_WORDS <= RESIL__SHARED_INIT_WORDS,
               "the initial words fit a slot's initial state");

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
  /* Serialises withdrawals and slice resets; deposits do not take it. A
   * shared budget uses st->lock instead (budget_lock). */
  pthread_mutex_t mu;
  budget_state *st; /* &own, or the shared slot's words */
  resil_shared *shared; /* the segment st points into (a reference) */
  resil__shared_owner_cache me;
  /* Keeps the read-mostly fields above off the cache lines every deposit
   * writes. */
  char pad_[64];
  budget_state own;
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
  cfg->shared = NULL;
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

/* ---- shared budgets (DESIGN §8.1) ---------------------------------------- */

typedef struct budget_shared_rec {
  int64_t mode;
  int64_t ttl_ns;
  int64_t min_retries_per_s;
  int64_t percent_can_retry_pct;
  int64_t max_tokens;
  int64_t token_ratio_milli;
} budget_shared_rec;

#define BUDGET_FIELD(f) {#f, offsetof(budget_shared_rec, f), sizeof(int64_t)}
static const resil__shared_field budget_shared_fields[] = {
    BUDGET_FIELD(mode),          BUDGET_FIELD(ttl_ns),
    BUDGET_FIELD(min_retries_per_s), BUDGET_FIELD(percent_can_retry_pct),
    BUDGET_FIELD(max_tokens),    BUDGET_FIELD(token_ratio_milli),
};

/* Points b->st into the segment, or leaves it on b->own after a counted
 * fallback; an error when the segment is required or the config differs. */
static resil_status use_shared(resil_retry_budget *b,
                               const resil_retry_budget_config *cfg,
                               resil_error *err) {
  resil_shared *seg = cfg->shared;
  budget_shared_rec rec;
  memset(&rec, 0, sizeof rec);
  rec.mode = cfg->mode;
  rec.ttl_ns = cfg->ttl_ns;
  rec.min_retries_per_s = cfg->min_retries_per_s;
  rec.percent_can_retry_pct = cfg->percent_can_retry_pct;
  rec.max_tokens = cfg->max_tokens;
  rec.token_ratio_milli = cfg->token_ratio_milli;
  uint64_t init[BUDGET_INIT_WORDS];
  for (int i = 0; i < BUDGET_SLICES; i++) init[i] = (uint64_t)EPOCH_NONE;
  init[BUDGET_SLICES] = (uint64_t)b->max_milli;
  resil__shared_req q;
  memset(&q, 0, sizeof q);
  q.kind = RESIL__SHK_BUDGET;
  q.name = b->name ? b->name : "retry-budget"; /* b is not valid yet */
  q.cfg = &rec;
  q.cfg_len = sizeof rec;
  q.fields = budget_shared_fields;
  q.nfields = sizeof budget_shared_fields / sizeof budget_shared_fields[0];
  q.init = init;
  q.init_words = BUDGET_INIT_WORDS;
  uint64_t *words = NULL;
  resil_status st = resil__shared_join(seg, cfg->clock, "budget", &q, &words, err);
  if (st == RESIL_OK && words) {
    b->st = (budget_state *)(void *)words;
    b->shared = seg;
    atomic_init(&b->me.pid, 0);
    atomic_init(&b->me.word, 0);
  }
  return st;
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
    atomic_init(&b->own.epoch[i], EPOCH_NONE);
    atomic_init(&b->own.milli[i], 0);
  }
  atomic_init(&b->own.tokens_milli, b->max_milli);
  atomic_init(&b->own.lock, 0);
  b->st = &b->own;
  if (cfg->shared && (st = use_shared(b, cfg, err)) != RESIL_OK) {
    pthread_mutex_destroy(&b->mu);
    resil__free(cfg->alloc, b->name);
    resil__free(cfg->alloc, b);
    return st;
  }
  b->magic = RESIL_MAGIC_BUDGET;
  *out = b;
  resil_error_clear(err);
  return RESIL_OK;
}

void resil_retry_budget_free(resil_retry_budget *b) {
  if (!b || b->magic != RESIL_MAGIC_BUDGET) return;
  b->magic = RESIL_MAGIC_DEAD;
  pthread_mutex_destroy(&b->mu);
  if (b->shared) resil__shared_release(b->shared);
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

/* The lock withdrawals and slice resets take. A per-process budget's is
 * its mutex. A shared budget's is st->lock, taken by a compare-and-swap
 * from 0 to the caller's process word: its holder runs a few atomic
 * operations, so a waiter spins (yielding), and after a while checks that
 * the holder lives; a dead holder's lock is taken over. That is safe
 * without repair because every step under the lock leaves a valid state:
 * a slice reset is "amount = 0, then epoch = e" (a holder killed between
 * leaves an empty slice of an old epoch, which the next claim resets
 * again), a withdrawal is one subtraction. */
static void budget_lock(resil_retry_budget *b) {
  if (!b->shared) {
    pthread_mutex_lock(&b->mu);
    return;
  }
  const uint64_t me = resil__shared_owner(&b->me);
  for (unsigned spins = 1;; spins++) {
    uint64_t v = 0;
    if (atomic_compare_exchange_weak_explicit(&b->st->lock, &v, me,
                                              memory_order_acquire,
                                              memory_order_relaxed))
      return;
    if (spins % 1024 == 0 && v != 0 && (v >> 32) != (me >> 32) &&
        resil__shared_owner_gone(v) &&
        atomic_compare_exchange_strong_explicit(&b->st->lock, &v, me,
                                                memory_order_acquire,
                                                memory_order_relaxed))
      return; /* taken over from a dead holder */
    if (spins % 16 == 0) sched_yield();
  }
}

static void budget_unlock(resil_retry_budget *b) {
  if (!b->shared)
    pthread_mutex_unlock(&b->mu);
  else
    atomic_store_explicit(&b->st->lock, 0, memory_order_release);
}

/* Reuses slice i for epoch e once its own epoch has left the window.
 * Caller holds the lock. The amount is cleared before the new epoch is
 * published (release), so a lock-free depositor that sees the new epoch
 * adds to the cleared amount. */
static void slice_claim_locked(budget_state *st, int i, int64_t e) {
  if (atomic_load_explicit(&st->epoch[i], memory_order_relaxed) < e) {
    atomic_store_explicit(&st->milli[i], 0, memory_order_relaxed);
    atomic_store_explicit(&st->epoch[i], e, memory_order_release);
  }
}

static void window_add(resil_retry_budget *b, int64_t amount) {
  int64_t e = epoch_now(b);
  int i = (int)(e % BUDGET_SLICES);
  budget_state *st = b->st;
  /* A slice already at a later epoch belongs to a thread whose clock read
   * came later; the amount then counts in that slice, slightly longer than
   * the TTL, which errs by at most one slice. */
  if (RESIL_LIKELY(atomic_load_explicit(&st->epoch[i], memory_order_acquire) >= e)) {
    atomic_fetch_add_explicit(&st->milli[i], amount, memory_order_relaxed);
    return;
  }
  budget_lock(b);
  slice_claim_locked(st, i, e);
  atomic_fetch_add_explicit(&st->milli[i], amount, memory_order_relaxed);
  budget_unlock(b);
}

/* Reserve plus every slice still inside the window ending at epoch e. */
static int64_t window_sum(const resil_retry_budget *b, int64_t e) {
  budget_state *st = b->st;
  int64_t total = b->reserve_milli;
  for (int i = 0; i < BUDGET_SLICES; i++) {
    int64_t ep = atomic_load_explicit(&st->epoch[i], memory_order_acquire);
    if (ep > e - BUDGET_SLICES)
      total += atomic_load_explicit(&st->milli[i], memory_order_relaxed);
  }
  return total;
}

/* Withdrawals serialise on the lock: while it is held, slices are neither
 * reset nor debited by anyone else, and lock-free deposits only raise the
 * sum, so the check below can never let two withdrawals share one token. */
static int window_try_withdraw(resil_retry_budget *b) {
  int granted = 0;
  budget_lock(b);
  int64_t e = epoch_now(b);
  int i = (int)(e % BUDGET_SLICES);
  slice_claim_locked(b->st, i, e);
  if (window_sum(b, e) >= MILLI) {
    atomic_fetch_sub_explicit(&b->st->milli[i], MILLI, memory_order_relaxed);
    granted = 1;
  }
  budget_unlock(b);
  return granted;
}

/* ---- gRPC token count -------------------------------------------------- */

static void tokens_add(resil_retry_budget *b, int64_t delta) {
  int64_t cur = atomic_load_explicit(&b->st->tokens_milli, memory_order_relaxed);
  for (;;) {
    int64_t next = cur + delta;
    if (next > b->max_milli) next = b->max_milli;
    if (next < 0) next = 0;
    /* The common case of a healthy downstream: already full, no write. */
    if (next == cur) return;
    if (atomic_compare_exchange_weak_explicit(&b->st->tokens_milli, &cur, next,
                                              memory_order_relaxed,
                                              memory_order_relaxed))
      return;
  }
}

static int tokens_allow(const resil_retry_budget *b) {
  /* "count > max_tokens / 2", exact in thousandths. */
  return atomic_load_explicit(&b->st->tokens_milli, memory_order_relaxed) * 2 >
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

resil_status resil_retry_budget_shared_peek(resil_shared *seg, const char *name,
                                           int64_t *tokens, resil_error *err) {
  if (!seg || !name)
    return resil__err(err, RESIL_EINVAL, seg ? "name" : "seg", "must not be NULL");
  budget_shared_rec rec;
  resil_status st = resil__shared_find_cfg(seg, RESIL__SHK_BUDGET, name, &rec, sizeof rec, err);
  if (st != RESIL_OK) return st;
  resil_retry_budget_config c;
  resil_retry_budget_config_init(&c);
  c.name = name;
  c.mode = (resil_retry_budget_mode)rec.mode;
  c.ttl_ns = rec.ttl_ns;
  c.min_retries_per_s = (uint32_t)rec.min_retries_per_s;
  c.percent_can_retry_pct = (uint32_t)rec.percent_can_retry_pct;
  c.max_tokens = (uint32_t)rec.max_tokens;
  c.token_ratio_milli = (uint32_t)rec.token_ratio_milli;
  c.shared = seg;
  resil_retry_budget *b;
  if ((st = resil_retry_budget_new(&c, &b, err)) != RESIL_OK) return st;
  if (!b->shared) {
    resil_retry_budget_free(b);
    return resil__err(err, RESIL_ESTATE, "shared", "the segment is in fallback mode");
  }
  if (tokens) *tokens = resil_retry_budget_balance(b);
  resil_retry_budget_free(b);
  return RESIL_OK;
}

int64_t resil_retry_budget_balance(const resil_retry_budget *b) {
  if (!resil__budget_valid(b)) return 0;
  int64_t milli;
  if (b->mode == RESIL_BUDGET_GRPC)
    milli = atomic_load_explicit(&b->st->tokens_milli, memory_order_relaxed);
  else
    milli = window_sum(b, epoch_now(b));
  return milli > 0 ? milli / MILLI : 0;
}
