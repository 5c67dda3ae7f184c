/* Hedged attempts: the policy's split form and its latency tracker
 * (DESIGN §9; hedge.h).
 *
 * The tracker (percentile mode only) is a ring of the last window_size
 * latencies plus the same values kept sorted, under a mutex: a new sample
 * replaces the oldest one in both (two binary searches and two memmoves of
 * at most window_size int64s), and the nearest-rank percentile is then one
 * index into the sorted array. The clamped delay is stored in an atomic
 * after every change, so resil_hedge_begin and on_timer read it without a
 * lock. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "core/internal.h"
#include "resil/hedge.h"
#include "resil/bulkhead.h"
#include "resil/retry.h"
#include "breaker/breaker_int.h"
#include "hedge/hedge_int.h"

#define MAGIC_HEDGE 0x48444745u /* "HDGE" */
#define MAX_DELAY_NS (24 * 3600 * RESIL_NS_PER_S)

struct resil_hedge {
  unsigned magic;
  char *name;
  int64_t delay_ns;
  uint32_t permille;
  int64_t min_delay_ns, max_delay_ns;
  uint32_t min_samples;
  uint32_t window;
  uint32_t max_hedges;
  uint32_t unacceptable, keyed_unacceptable;
  resil_retry_budget *budget;
  resil_threadpool *executor;
  int deposit_calls;
  const resil_clock *clock;
  const resil_allocator *alloc;
  resil_hedge_event_fn on_event;
  void *on_event_user;
  struct resil_breaker *watch; /* recovery_breaker; NULL: none */
  int during;                  /* hedge_during_recovery */

  /* Listeners added after creation (resil_hedge_listener_add): the array
   * under lmu; nls read without it as a fast "none" check; `active` counts
   * deliveries under way (under lmu), and remove waits on lcv for 0. */
  pthread_mutex_t lmu;
  pthread_cond_t lcv;
  struct {
    resil_hedge_event_fn fn;
    void *user;
  } ls[RESIL_HEDGE_MAX_LISTENERS];
  _Atomic uint32_t nls;
  uint32_t active;

  _Atomic int64_t cur_delay_ns;
  _Atomic uint64_t calls, hedged_calls, hedges_sent, hedges_won,
      cancelled_losers, refused_by_budget, passed_unsafe, passed_blocking,
      suppressed_recovering;
  _Atomic uint32_t samples;

  /* Percentile mode: under mu. */
  pthread_mutex_t mu;
  int64_t *ring;   /* window entries, oldest at ring[head] once full */
  int64_t *sorted; /* the same values, ascending */
  uint32_t n, head;
};

/* The 0.2 layout (the first) ends with `alloc`. */
#define HEDGE_CONFIG_MIN_SIZE                                                  \
  (offsetof(resil_hedge_config, alloc) + sizeof(const resil_allocator *))
#define HEDGE_CALL_MIN_SIZE (offsetof(resil_hedge_call, started_ns) + sizeof(int64_t))

static int valid(const resil_hedge *h) { return h && h->magic == MAGIC_HEDGE; }

int resil__hedge_recovery(const resil_hedge *h, resil_breaker **watch) {
  if (watch) *watch = valid(h) ? h->watch : NULL;
  return valid(h) ? h->during : 0;
}

static void config_defaults(resil_hedge_config *cfg) {
  memset(cfg, 0, sizeof *cfg);
  cfg->struct_size = sizeof *cfg;
  cfg->name = "hedge";
  cfg->delay_ns = 100 * RESIL_NS_PER_MS;
  cfg->delay_percentile_permille = 0;
  cfg->min_delay_ns = RESIL_NS_PER_MS;
  cfg->max_delay_ns = 10 * RESIL_NS_PER_S;
  cfg->min_samples = 100;
  cfg->window_size = 1000;
  cfg->max_hedges = 1;
  cfg->unacceptable_classes = RESIL_HEDGE_DEFAULT_UNACCEPTABLE;
  cfg->keyed_unacceptable_classes = RESIL_HEDGE_DEFAULT_KEYED_UNACCEPTABLE;
}

void resil_hedge_config_init_sized(resil_hedge_config *cfg, size_t n) {
  if (!cfg) return;
  resil_hedge_config full;
  config_defaults(&full);
  resil__sized_out(cfg, n, &full, sizeof full);
}

static resil_status check_classes(resil_error *err, const char *field, uint32_t m) {
  if ((m & ~RESIL_CLASSES_ALL) || (m & RESIL_CLASS_BIT(RESIL_CLASS_SUCCESS)))
    return resil__err(err, RESIL_EINVAL, field,
                      "%s: must be a RESIL_CLASS_BIT mask without RESIL_CLASS_SUCCESS, got 0x%x",
                      field, (unsigned)m);
  return RESIL_OK;
}

static resil_status validate(const resil_hedge_config *c, resil_error *err) {
  resil_status st;
  if ((st = resil__check_ns(err, "delay_ns", c->delay_ns, 0, MAX_DELAY_NS))) return st;
  if ((st = resil__check_range(err, "delay_percentile_permille",
                               c->delay_percentile_permille, 0, 999)))
    return st;
  if ((st = resil__check_ns(err, "min_delay_ns", c->min_delay_ns, 0, MAX_DELAY_NS)))
    return st;
  if (c->max_delay_ns < c->min_delay_ns || c->max_delay_ns > MAX_DELAY_NS)
    return resil__err_range_ns(err, "max_delay_ns", c->min_delay_ns, MAX_DELAY_NS,
                               c->max_delay_ns, "min_delay_ns..24 h");
  if ((st = resil__check_range(err, "window_size", c->window_size, 1,
                               RESIL_HEDGE_MAX_WINDOW)))
    return st;
  if (c->min_samples < 1 || c->min_samples > c->window_size) {
    char what[48];
    snprintf(what, sizeof what, "1..window_size (%u)", (unsigned)c->window_size);
    return resil__err_range(err, "min_samples", 1, c->window_size, c->min_samples, what);
  }
  if ((st = resil__check_range(err, "max_hedges", c->max_hedges, 1,
                               RESIL_HEDGE_MAX_HEDGES)))
    return st;
  if ((st = check_classes(err, "unacceptable_classes", c->unacceptable_classes))) return st;
  if ((st = check_classes(err, "keyed_unacceptable_classes", c->keyed_unacceptable_classes)))
    return st;
  if (c->deposit_calls != 0 && c->deposit_calls != 1)
    return resil__err_range(err, "deposit_calls", 0, 1, c->deposit_calls, NULL);
  if (c->recovery_breaker && !resil__breaker_clock(c->recovery_breaker))
    return resil__err(err, RESIL_EINVAL, "recovery_breaker", "is not a live breaker");
  if (c->hedge_during_recovery != 0 && c->hedge_during_recovery != 1)
    return resil__err_range(err, "hedge_during_recovery", 0, 1,
                            c->hedge_during_recovery, NULL);
  return RESIL_OK;
}

resil_status resil_hedge_new(const resil_hedge_config *ucfg, resil_hedge **out,
                             resil_error *err) {
  if (!ucfg) return resil__err(err, RESIL_EINVAL, "cfg", "must not be NULL");
  if (!out) return resil__err(err, RESIL_EINVAL, "out", "must not be NULL");
  resil_hedge_config cfg;
  config_defaults(&cfg);
  resil_status st = resil__sized_in(&cfg, sizeof cfg, ucfg, HEDGE_CONFIG_MIN_SIZE,
                                    "resil_hedge_config", "resil_hedge_config_init",
                                    err);
  if (st != RESIL_OK) return st;
  if ((st = validate(&cfg, err))) return st;
  resil_hedge *h = resil__calloc(cfg.alloc, sizeof *h);
  if (!h) return resil__err(err, RESIL_ENOMEM, NULL, "out of memory");
  int ok;
  h->name = resil__strdup(cfg.alloc, cfg.name ? cfg.name : "hedge", &ok);
  if (!ok) goto nomem;
  if (cfg.delay_percentile_permille) {
    h->ring = resil__alloc(cfg.alloc, cfg.window_size * sizeof(int64_t));
    h->sorted = resil__alloc(cfg.alloc, cfg.window_size * sizeof(int64_t));
    if (!h->ring || !h->sorted) goto nomem;
  }
  int mu_ok = pthread_mutex_init(&h->mu, NULL) == 0;
  int lmu_ok = pthread_mutex_init(&h->lmu, NULL) == 0;
  int lcv_ok = pthread_cond_init(&h->lcv, NULL) == 0;
  if (!mu_ok || !lmu_ok || !lcv_ok) {
    if (mu_ok) pthread_mutex_destroy(&h->mu);
    if (lmu_ok) pthread_mutex_destroy(&h->lmu);
    if (lcv_ok) pthread_cond_destroy(&h->lcv);
    resil__free(cfg.alloc, h->ring);
    resil__free(cfg.alloc, h->sorted);
    resil__free(cfg.alloc, h->name);
    resil__free(cfg.alloc, h);
    return resil__err(err, RESIL_ESYS, NULL, "cannot create a mutex");
  }
  h->delay_ns = cfg.delay_ns;
  h->permille = cfg.delay_percentile_permille;
  h->min_delay_ns = cfg.min_delay_ns;
  h->max_delay_ns = cfg.max_delay_ns;
  h->min_samples = cfg.min_samples;
  h->window = cfg.window_size;
  h->max_hedges = cfg.max_hedges;
  h->unacceptable = cfg.unacceptable_classes;
  h->keyed_unacceptable = cfg.keyed_unacceptable_classes;
  h->budget = cfg.budget;
  h->executor = cfg.executor;
  h->deposit_calls = cfg.deposit_calls;
  h->clock = resil__clock(cfg.clock);
  h->alloc = cfg.alloc;
  h->on_event = cfg.on_event;
  h->on_event_user = cfg.on_event_user;
  h->during = cfg.hedge_during_recovery;
  h->watch = h->during ? NULL : cfg.recovery_breaker;
  atomic_init(&h->cur_delay_ns, cfg.delay_ns);
  h->magic = MAGIC_HEDGE;
  *out = h;
  return RESIL_OK;
nomem:
  resil__free(cfg.alloc, h->ring);
  resil__free(cfg.alloc, h->sorted);
  resil__free(cfg.alloc, h->name);
  resil__free(cfg.alloc, h);
  return resil__err(err, RESIL_ENOMEM, NULL, "out of memory");
}

void resil_hedge_free(resil_hedge *h) {
  if (!valid(h)) return;
  h->magic = RESIL_MAGIC_DEAD;
  pthread_mutex_destroy(&h->mu);
  pthread_mutex_destroy(&h->lmu);
  pthread_cond_destroy(&h->lcv);
  const resil_allocator *a = h->alloc;
  resil__free(a, h->ring);
  resil__free(a, h->sorted);
  resil__free(a, h->name);
  resil__free(a, h);
}

/* ---- the latency tracker ---------------------------------------------- */

/* First index in sorted[0..n) whose value is >= v. */
static uint32_t lower_bound(const int64_t *s, uint32_t n, int64_t v) {
  uint32_t lo = 0, hi = n;
  while (lo < hi) {
    uint32_t mid = lo + (hi - lo) / 2;
    if (s[mid] < v)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo;
}

static void learn(resil_hedge *h, int64_t ns) {
  if (!h->permille) return;
  if (ns < 0) ns = 0;
  pthread_mutex_lock(&h->mu);
  if (h->n == h->window) {
    /* Evict the oldest from both arrays. */
    int64_t old = h->ring[h->head];
    uint32_t i = lower_bound(h->sorted, h->n, old);
    memmove(&h->sorted[i], &h->sorted[i + 1], (h->n - i - 1) * sizeof(int64_t));
    h->n--;
    h->ring[h->head] = ns;
    h->head = (h->head + 1) % h->window;
  } else {
    h->ring[(h->head + h->n) % h->window] = ns;
  }
  uint32_t j = lower_bound(h->sorted, h->n, ns);
  memmove(&h->sorted[j + 1], &h->sorted[j], (h->n - j) * sizeof(int64_t));
  h->sorted[j] = ns;
  h->n++;
  int64_t d = h->delay_ns;
  if (h->n >= h->min_samples) {
    /* Nearest rank: the smallest value with at least p of the samples at
     * or below it, rank = ceil(p * n / 1000). */
    uint64_t rank = ((uint64_t)h->permille * h->n + 999) / 1000;
    if (rank < 1) rank = 1;
    d = h->sorted[rank - 1];
    if (d < h->min_delay_ns) d = h->min_delay_ns;
    if (d > h->max_delay_ns) d = h->max_delay_ns;
  }
  atomic_store_explicit(&h->samples, h->n, memory_order_relaxed);
  atomic_store_explicit(&h->cur_delay_ns, d, memory_order_relaxed);
  pthread_mutex_unlock(&h->mu);
}

/* ---- the split form --------------------------------------------------- */

static inline void bump(_Atomic uint64_t *c) {
  atomic_fetch_add_explicit(c, 1, memory_order_relaxed);
}

/* Tells the listener (hedge.h, resil_hedge_config.on_event): the one place
 * the policy's events come from, whoever drives it. o may be NULL. */
/* Depth of listener deliveries on this thread (any hedge): a listener that
 * removes a listener cannot wait for deliveries to finish. */
static _Thread_local unsigned delivering;

static int has_listeners(const resil_hedge *h) {
  return h->on_event ||
         atomic_load_explicit(&((resil_hedge *)h)->nls, memory_order_acquire) != 0;
}

static void event(const resil_hedge *ch, const resil_hedge_call *full,
                  resil_hedge_event_kind kind, uint32_t attempt, int64_t delay_ns,
                  const resil_outcome *o) {
  resil_hedge *h = (resil_hedge *)ch; /* the listener list's lock */
  if (!has_listeners(h)) return;
  resil_hedge_event ev;
  memset(&ev, 0, sizeof ev);
  ev.struct_size = sizeof ev;
  ev.kind = kind;
  ev.name = h->name;
  ev.hedge = attempt > 0 ? attempt - 1 : 0;
  ev.delay_ns = delay_ns;
  ev.elapsed_ns = kind == RESIL_HEDGE_EVENT_PASSED_UNSAFE
                      ? 0
                      : resil__now(h->clock) - full->started_ns;
  if (o) {
    ev.has_outcome = 1;
    ev.outcome = *o;
  }
  if (h->on_event) h->on_event(h->on_event_user, &ev);
  if (atomic_load_explicit(&h->nls, memory_order_acquire) == 0) return;
  /* A snapshot of the added listeners, called with no lock held. */
  struct {
    resil_hedge_event_fn fn;
    void *user;
  } snap[RESIL_HEDGE_MAX_LISTENERS];
  pthread_mutex_lock(&h->lmu);
  uint32_t n = atomic_load_explicit(&h->nls, memory_order_relaxed);
  for (uint32_t i = 0; i < n; i++) {
    snap[i].fn = h->ls[i].fn;
    snap[i].user = h->ls[i].user;
  }
  h->active++;
  pthread_mutex_unlock(&h->lmu);
  delivering++;
  for (uint32_t i = 0; i < n; i++) snap[i].fn(snap[i].user, &ev);
  delivering--;
  pthread_mutex_lock(&h->lmu);
  if (--h->active == 0) pthread_cond_broadcast(&h->lcv);
  pthread_mutex_unlock(&h->lmu);
}

resil_status resil_hedge_listener_add(resil_hedge *h, resil_hedge_event_fn fn, void *user) {
  if (!valid(h)) return RESIL_EMISUSE;
  if (!fn) return RESIL_EINVAL;
  resil_status st = RESIL_OK;
  pthread_mutex_lock(&h->lmu);
  uint32_t n = atomic_load_explicit(&h->nls, memory_order_relaxed);
  if (n == RESIL_HEDGE_MAX_LISTENERS) {
    st = RESIL_ESTATE;
  } else {
    h->ls[n].fn = fn;
    h->ls[n].user = user;
    atomic_store_explicit(&h->nls, n + 1, memory_order_release);
  }
  pthread_mutex_unlock(&h->lmu);
  return st;
}

resil_status resil_hedge_listener_remove(resil_hedge *h, resil_hedge_event_fn fn, void *user) {
  if (!valid(h)) return RESIL_EMISUSE;
  resil_status st = RESIL_EINVAL;
  pthread_mutex_lock(&h->lmu);
  uint32_t n = atomic_load_explicit(&h->nls, memory_order_relaxed);
  for (uint32_t i = n; i-- > 0;) {
    if (h->ls[i].fn != fn || h->ls[i].user != user) continue;
    for (uint32_t k = i; k + 1 < n; k++) h->ls[k] = h->ls[k + 1];
    atomic_store_explicit(&h->nls, n - 1, memory_order_release);
    st = RESIL_OK;
    break;
  }
  /* Deliveries that took their snapshot before the removal may still call
   * it: wait for every delivery under way (not from inside a listener,
   * which would wait for itself). */
  if (st == RESIL_OK && !delivering)
    while (h->active > 0) pthread_cond_wait(&h->lcv, &h->lmu);
  pthread_mutex_unlock(&h->lmu);
  return st;
}

/* The caller's call state as a full struct (zeros for fields it lacks), and
 * back. A call whose struct_size is not trusted is refused. */
static int call_in(resil_hedge_call *full, const resil_hedge_call *call) {
  memset(full, 0, sizeof *full);
  if (call->struct_size == sizeof *full) {
    *full = *call;
    return 1;
  }
  return resil__sized_in(full, sizeof *full, call, HEDGE_CALL_MIN_SIZE,
                         "resil_hedge_call", "resil_hedge_begin", NULL) == RESIL_OK;
}

static void call_out(resil_hedge_call *call, const resil_hedge_call *full) {
  size_t n = call->struct_size;
  resil__sized_out(call, n, full, sizeof *full);
}

resil_decision resil_hedge_begin_sized(resil_hedge *h, const resil_ctx *ctx,
                                       resil_hedge_call *call, size_t call_size,
                                       int64_t *delay_ns) {
  resil_ctx lc;
  const resil_ctx *c = resil__ctx_in(&lc, ctx);
  if (!valid(h) || !call || !c || call_size < HEDGE_CALL_MIN_SIZE)
    return RESIL_DECISION_DENY;
  resil_hedge_call full;
  memset(&full, 0, sizeof full);
  full.struct_size = sizeof full;
  full.attempts = 1;
  full.in_flight = 1;
  full.state = RESIL_HEDGE_CALL_PRIMARY;
  full.started_ns = resil__now(h->clock);
  full.delay_ns = -1;
  bump(&h->calls);
  if (h->budget && h->deposit_calls) resil_retry_budget_deposit(h->budget);
  resil_decision d = RESIL_DECISION_DENY;
  if (c->flags & (RESIL_CALL_IDEMPOTENT | RESIL_CALL_STABLE_KEY)) {
    full.state |= RESIL_HEDGE_CALL_SAFE;
    if (c->flags & RESIL_CALL_STABLE_KEY) full.state |= RESIL_HEDGE_CALL_KEYED;
    full.delay_ns = atomic_load_explicit(&h->cur_delay_ns, memory_order_relaxed);
    if (delay_ns) *delay_ns = full.delay_ns;
    d = RESIL_DECISION_WAIT;
  } else {
    full.state |= RESIL_HEDGE_CALL_NO_MORE;
    bump(&h->passed_unsafe);
  }
  resil__sized_out(call, call_size, &full, sizeof full);
  if (d == RESIL_DECISION_DENY)
    event(h, &full, RESIL_HEDGE_EVENT_PASSED_UNSAFE, 1, -1, NULL);
  return d;
}

static resil_decision on_timer(resil_hedge *h, resil_hedge_call *call,
                               int64_t *next_delay_ns, struct resil_breaker *watch);

resil_decision resil_hedge_on_timer(resil_hedge *h, resil_hedge_call *call,
                                    int64_t *next_delay_ns) {
  return on_timer(h, call, next_delay_ns, valid(h) ? h->watch : NULL);
}

resil_decision resil_hedge_on_timer_watch(resil_hedge *h, resil_hedge_call *call,
                                          int64_t *next_delay_ns, resil_breaker *watch) {
  if (!valid(h) || h->during) watch = NULL;
  return on_timer(h, call, next_delay_ns, watch);
}

/* The one decision whether to send a hedge (every form). */
static resil_decision on_timer(resil_hedge *h, resil_hedge_call *call,
                               int64_t *next_delay_ns, struct resil_breaker *watch) {
  if (next_delay_ns) *next_delay_ns = -1;
  resil_hedge_call full;
  if (!valid(h) || !call || !call_in(&full, call)) return RESIL_DECISION_DENY;
  if (!(full.state & RESIL_HEDGE_CALL_SAFE) ||
      (full.state & (RESIL_HEDGE_CALL_OVER | RESIL_HEDGE_CALL_NO_MORE)) ||
      full.in_flight == 0 || full.attempts - 1 >= h->max_hedges) {
    full.state |= RESIL_HEDGE_CALL_NO_MORE;
    call_out(call, &full);
    return RESIL_DECISION_DENY;
  }
  if (watch && resil_breaker_recovering(watch)) {
    /* Hedges last (DESIGN §2.9): none while the breaker recovers. */
    bump(&h->suppressed_recovering);
    full.state |= RESIL_HEDGE_CALL_NO_MORE | RESIL_HEDGE_CALL_RECOVERING;
    full.delay_ns = -1;
    call_out(call, &full);
    resil_outcome ro = resil_outcome_make(RESIL_REJECTED, RESIL_REASON_RECOVERING);
    event(h, &full, RESIL_HEDGE_EVENT_REJECTED, full.attempts + 1, -1, &ro);
    return RESIL_DECISION_DENY;
  }
  if (h->budget && !resil_retry_budget_try_withdraw(h->budget)) {
    bump(&h->refused_by_budget);
    full.state |= RESIL_HEDGE_CALL_NO_MORE;
    full.delay_ns = -1;
    call_out(call, &full);
    resil_outcome ro = resil_outcome_make(RESIL_REJECTED, RESIL_REASON_RETRY_BUDGET);
    event(h, &full, RESIL_HEDGE_EVENT_REJECTED, full.attempts + 1, -1, &ro);
    return RESIL_DECISION_DENY;
  }
  int64_t used = full.delay_ns;
  full.attempts++;
  full.in_flight++;
  bump(&h->hedges_sent);
  if (full.attempts == 2) bump(&h->hedged_calls);
  if (full.attempts - 1 < h->max_hedges) {
    full.delay_ns = atomic_load_explicit(&h->cur_delay_ns, memory_order_relaxed);
    if (next_delay_ns) *next_delay_ns = full.delay_ns;
  } else {
    full.state |= RESIL_HEDGE_CALL_NO_MORE;
    full.delay_ns = -1;
  }
  call_out(call, &full);
  event(h, &full, RESIL_HEDGE_EVENT_SENT, full.attempts, used, NULL);
  return RESIL_DECISION_GO;
}

/* The acceptance rule (hedge.h, resil_hedge_acceptable). */
static int acceptable(const resil_hedge *h, uint32_t state, const resil_outcome *o) {
  uint32_t unacceptable = (state & RESIL_HEDGE_CALL_KEYED) ? h->keyed_unacceptable
                                                           : h->unacceptable;
  return !(unacceptable & RESIL_CLASS_BIT((unsigned)resil_outcome_classify(o)));
}

int resil_hedge_acceptable(const resil_hedge *h, const resil_hedge_call *call,
                           const resil_outcome *o) {
  resil_hedge_call full;
  if (!valid(h) || !call || !o || !call_in(&full, call)) return 0;
  return acceptable(h, full.state, o);
}

resil_hedge_verdict resil_hedge_record(resil_hedge *h, resil_hedge_call *call,
                                       uint32_t attempt, int64_t duration_ns,
                                       const resil_outcome *o) {
  resil_hedge_call full;
  if (!valid(h) || !call || !o || !call_in(&full, call)) return RESIL_HEDGE_IGNORED;
  if ((full.state & RESIL_HEDGE_CALL_OVER) || attempt == 0 ||
      attempt > full.attempts || full.in_flight == 0 ||
      (full.ended_mask & (1u << (attempt - 1))))
    return RESIL_HEDGE_IGNORED;
  full.ended_mask |= 1u << (attempt - 1);
  full.in_flight--;
  if (attempt == 1 && (full.state & RESIL_HEDGE_CALL_PRIMARY)) {
    full.state &= ~RESIL_HEDGE_CALL_PRIMARY;
    if (o->kind == RESIL_ANSWERED) learn(h, duration_ns);
  }
  resil_hedge_verdict v = RESIL_HEDGE_KEEP_WAITING;
  int ok = acceptable(h, full.state, o);
  /* The first maybe-executed end without an answer is kept: a call with no
   * winner ends with it (hedge.h, resil_hedge_record). */
  if (!ok && full.result_attempt == 0 && o->kind != RESIL_ANSWERED &&
      resil_outcome_maybe_executed(o)) {
    full.result_attempt = attempt;
    full.result = *o;
  }
  if (ok) {
    v = RESIL_HEDGE_WINNER;
    full.winner = attempt;
    full.result_attempt = attempt;
    full.result = *o;
    if (attempt > 1) {
      bump(&h->hedges_won);
      if (full.state & RESIL_HEDGE_CALL_PRIMARY) {
        /* The primary is cut short: learn its age as a lower bound. */
        learn(h, resil__now(h->clock) - full.started_ns);
        full.state &= ~RESIL_HEDGE_CALL_PRIMARY;
      }
    }
    atomic_fetch_add_explicit(&h->cancelled_losers, full.in_flight,
                              memory_order_relaxed);
  } else if (full.in_flight == 0) {
    v = RESIL_HEDGE_LAST;
    if (full.result_attempt == 0) {
      full.result_attempt = attempt;
      full.result = *o;
    }
  }
  if (v != RESIL_HEDGE_KEEP_WAITING)
    full.state |= RESIL_HEDGE_CALL_OVER | RESIL_HEDGE_CALL_NO_MORE;
  call_out(call, &full);
  if (has_listeners(h)) {
    if (attempt > 1 && o->kind == RESIL_REJECTED)
      event(h, &full, RESIL_HEDGE_EVENT_REJECTED, attempt, -1, o);
    if (v == RESIL_HEDGE_WINNER && full.attempts > 1) {
      event(h, &full, RESIL_HEDGE_EVENT_WON, attempt, -1, o);
      for (uint32_t n = 1; n <= full.attempts; n++)
        if (!(full.ended_mask & (1u << (n - 1))))
          event(h, &full, RESIL_HEDGE_EVENT_CANCELLED_LOSER, n, -1, NULL);
    }
  }
  return v;
}

resil_outcome resil_hedge_run(resil_hedge *h, const resil_ctx *ctx,
                              resil_call_fn fn, void *arg) {
  return resil__hedge_run_watch(h, ctx, fn, arg, NULL);
}

resil_outcome resil__hedge_run_watch(resil_hedge *h, const resil_ctx *ctx,
                                     resil_call_fn fn, void *arg,
                                     resil_breaker *watch) {
  resil_ctx lc;
  const resil_ctx *c = resil__ctx_in(&lc, ctx);
  if (!valid(h) || !fn || !c)
    return resil_outcome_make(RESIL_NOT_SENT, RESIL_REASON_LOCAL_ERROR);
  if (h->executor)
    return resil__hedge_run_on_watch(h, c, h->executor, fn, arg, watch);
  bump(&h->calls);
  bump(&h->passed_blocking);
  return fn(arg, c);
}

/* ---- inspection ------------------------------------------------------- */

int64_t resil_hedge_delay_ns(const resil_hedge *h) {
  if (!valid(h)) return 0;
  return atomic_load_explicit(&((resil_hedge *)h)->cur_delay_ns, memory_order_relaxed);
}

int64_t resil_hedge_worst_delay_ns(const resil_hedge *h) {
  if (!valid(h)) return 0;
  if (!h->permille) return h->delay_ns;
  return h->delay_ns > h->max_delay_ns ? h->delay_ns : h->max_delay_ns;
}

uint32_t resil_hedge_max_hedges(const resil_hedge *h) {
  return valid(h) ? h->max_hedges : 0;
}

uint32_t resil_hedge_percentile_permille(const resil_hedge *h) {
  return valid(h) ? h->permille : 0;
}

int resil_hedge_has_executor(const resil_hedge *h) {
  return valid(h) && h->executor != NULL;
}

int resil_hedge_has_budget(const resil_hedge *h) {
  return valid(h) && h->budget != NULL;
}

const char *resil_hedge_name(const resil_hedge *h) {
  return valid(h) ? h->name : NULL;
}

resil_status resil_hedge_get_metrics_sized(const resil_hedge *ch,
                                           resil_hedge_metrics *dst, size_t n) {
  if (!valid(ch)) return RESIL_EMISUSE;
  if (!dst) return RESIL_EINVAL;
  resil_hedge *h = (resil_hedge *)ch; /* atomics need non-const */
  resil_hedge_metrics m;
  memset(&m, 0, sizeof m);
  m.struct_size = sizeof m;
  m.calls = atomic_load_explicit(&h->calls, memory_order_relaxed);
  m.hedged_calls = atomic_load_explicit(&h->hedged_calls, memory_order_relaxed);
  m.hedges_sent = atomic_load_explicit(&h->hedges_sent, memory_order_relaxed);
  m.hedges_won = atomic_load_explicit(&h->hedges_won, memory_order_relaxed);
  m.cancelled_losers = atomic_load_explicit(&h->cancelled_losers, memory_order_relaxed);
  m.refused_by_budget = atomic_load_explicit(&h->refused_by_budget, memory_order_relaxed);
  m.passed_unsafe = atomic_load_explicit(&h->passed_unsafe, memory_order_relaxed);
  m.passed_blocking = atomic_load_explicit(&h->passed_blocking, memory_order_relaxed);
  m.samples = atomic_load_explicit(&h->samples, memory_order_relaxed);
  m.delay_ns = atomic_load_explicit(&h->cur_delay_ns, memory_order_relaxed);
  m.suppressed_recovering =
      atomic_load_explicit(&h->suppressed_recovering, memory_order_relaxed);
  resil__sized_out(dst, n, &m, sizeof m);
  return RESIL_OK;
}
