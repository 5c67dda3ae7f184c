/* Retry policy: decisions, waits, deadline and budget checks, folding of the
 * final outcome, and the run form. See include/resil/retry.h. */
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "core/shard.h"
#include "retry_int.h"
#include "breaker/breaker_int.h"

/* resil_retry_state.bits */
#define ST_STOPPED 0x1u    /* the final outcome is in st->result            */
#define ST_RNG_SEEDED 0x2u /* st->rng holds a seeded generator              */
#define ST_MAYBE_RAN 0x4u  /* some recorded attempt may have executed        */

/* The shortest remaining deadline an attempt is made with (DESIGN §2.3: a
 * wait that uses up the whole deadline leaves nothing for the attempt). */
#define ATTEMPT_FLOOR_NS RESIL_NS_PER_MS

#define SAFE_FLAGS (RESIL_CALL_IDEMPOTENT | RESIL_CALL_STABLE_KEY)
#define ALLOWED_CLASSES RESIL_RETRY_DEFAULT_CLASSES
#define GOLDEN UINT64_C(0x9E3779B97F4A7C15)

struct resil_retry {
  uint32_t magic;
  /* RESIL_MAGIC_RETRY when the run form's fast path applies to every call
   * without a ctx (no budget, listener or predicate), else 0: one test
   * instead of four. */
  uint32_t plain;
  uint32_t max_attempts;
  resil_retry_backoff backoff;
  uint32_t retry_classes;
  int respect_retry_after;
  int retry_on_rejected;
  int unsafe_retry_non_idempotent;
  int64_t wait_ns;
  int64_t initial_wait_ns;
  int64_t max_wait_ns;
  int64_t retry_after_cap_ns; /* max_retry_after_ns, else max_wait_ns */
  int64_t min_attempt_budget_ns;
  int64_t attempt_floor_ns; /* max(min_attempt_budget_ns, ATTEMPT_FLOOR_NS) */
  double multiplier;
  resil_retry_budget *budget;
  resil_retry_random_fn random;
  void *random_self;
  resil_retry_predicate_fn predicate;
  resil_attempt_listener_fn on_attempt;
  void *on_attempt_user;
  void *user;
  void (*user_free)(void *user);
  const resil_clock *clock; /* as configured: may be NULL (system) */
  /* The breaker watched for "retries last" (NULL: none; NULL also with
   * retry_during_recovery, whose flag is `during`). */
  struct resil_breaker *watch;
  uint32_t during;
  const resil_allocator *alloc;
  char *name;
  uint64_t seed_base;
  /* The ctx a first attempt without a caller's ctx is made with: the
   * defaults, the retry's clock, attempt 1 (read-only once made). */
  resil_ctx first_ctx;
  /* The finished calls by kind (C_* below), per thread (core/shard.h):
   * the success fast path bumps one without an atomic read-modify-write.
   * Their figures are not ordered with each other (as before: they were
   * separate atomics). */
  resil__shards calls;
  /* Keeps the read-mostly fields above off the counters' cache lines. */
  char pad_[64];
  _Atomic uint64_t refused_deadline;
  _Atomic uint64_t refused_budget;
  _Atomic uint64_t suppressed; /* calls stopped with RESIL_STOP_RECOVERING */
  _Atomic uint64_t seq; /* per-call generator seeds */
  _Atomic uint64_t stops[RESIL_RETRY_STOP_SLOTS];
};

_Static_assert(RESIL_STOP_CANCELLED + 1 == RESIL_RETRY_STOP_SLOTS,
               "resil_retry_stats.stops needs one slot per resil_stop");

/* One logical call's progress (retry.h: opaque). */
struct resil_retry_state {
  resil_ctx ctx;
  resil_outcome result;
  const resil_retry *owner;
  const resil_allocator *alloc;
  /* The breaker this call watches (the retry's, or its chain's). */
  struct resil_breaker *watch;
  int64_t base_wait_ns;
  int64_t prev_wait_ns;
  /* The wait asked for before the attempt now being made (0 for the
   * first), and, with a listener only, the clock reading at the decision
   * that allowed it. */
  int64_t wait_before_ns;
  int64_t decided_ns;
  uint64_t rng;
  uint32_t attempts;
  uint32_t bits;
};

/* resil_retry.calls counters. */
enum {
  C_OK_FIRST,
  C_OK_RETRIED,
  C_FAILED_FIRST,
  C_FAILED_RETRIED,
  /* Attempts of every finished call except the C_OK_FIRST ones (1 each). */
  C_ATTEMPTS_OTHER,
  C_COUNT
};

static int valid(const resil_retry *r) {
  return r && r->magic == RESIL_MAGIC_RETRY;
}

#define LOAD(x) atomic_load_explicit(&(x), memory_order_relaxed)
#define BUMP(x, n) atomic_fetch_add_explicit(&(x), (n), memory_order_relaxed)

/* ---- configuration ------------------------------------------------------ */

/* The 0.1 layout ends with `alloc`; fields after it are "Since 0.2". */
#define RETRY_CONFIG_MIN_SIZE                                                  \
  (offsetof(resil_retry_config, alloc) + sizeof(const resil_allocator *))

static void config_defaults(resil_retry_config *cfg) {
  memset(cfg, 0, sizeof *cfg);
  cfg->struct_size = sizeof *cfg;
  cfg->name = NULL;
  cfg->max_attempts = 3;
  cfg->backoff = RESIL_RETRY_FIXED;
  cfg->wait_ns = 500 * RESIL_NS_PER_MS;
  cfg->initial_wait_ns = 500 * RESIL_NS_PER_MS;
  cfg->multiplier = 1.5;
  cfg->max_wait_ns = 30 * RESIL_NS_PER_S;
  cfg->respect_retry_after = 1;
  cfg->max_retry_after_ns = 0;
  cfg->retry_classes = RESIL_RETRY_DEFAULT_CLASSES;
  cfg->retry_on_rejected = 0;
  cfg->unsafe_retry_non_idempotent = 0;
  cfg->min_attempt_budget_ns = 0;
  cfg->budget = NULL;
  cfg->random = NULL;
  cfg->random_self = NULL;
  cfg->predicate = NULL;
  cfg->user = NULL;
  cfg->user_free = NULL;
  cfg->clock = NULL;
  cfg->alloc = NULL;
  cfg->on_attempt = NULL;
  cfg->on_attempt_user = NULL;
  cfg->recovery_breaker = NULL;
  cfg->retry_during_recovery = 0;
}

void resil_retry_config_init_sized(resil_retry_config *cfg, size_t n) {
  if (!cfg) return;
  resil_retry_config full;
  config_defaults(&full);
  resil__sized_out(cfg, n, &full, sizeof full);
}

/* The caller's config as a full local one (defaults for what it lacks). */
static resil_status config_in(resil_retry_config *c,
                              const resil_retry_config *ucfg,
                              resil_error *err) {
  config_defaults(c);
  return resil__sized_in(c, sizeof *c, ucfg, RETRY_CONFIG_MIN_SIZE,
                         "resil_retry_config", "resil_retry_config_init", err);
}

#define CHECK(field, lo, hi)                                                   \
  do {                                                                         \
    resil_status st_ =                                                         \
        resil__check_range(err, #field, (int64_t)c->field, (lo), (hi));        \
    if (st_ != RESIL_OK) return st_;                                           \
  } while (0)
#define CHECK_NS(field, lo, hi)                                                \
  do {                                                                         \
    resil_status st_ = resil__check_ns(err, #field, c->field, (lo), (hi));     \
    if (st_ != RESIL_OK) return st_;                                           \
  } while (0)

static resil_status validate(const resil_retry_config *c, resil_error *err) {
  const int64_t day = RESIL_RETRY_MAX_DURATION_NS;
  CHECK(max_attempts, 1, RESIL_RETRY_MAX_ATTEMPTS);
  CHECK(backoff, RESIL_RETRY_FIXED, RESIL_RETRY_DECORRELATED_JITTER);
  CHECK_NS(wait_ns, 0, day);
  CHECK_NS(initial_wait_ns, RESIL_NS_PER_MS, day);
  /* The negated test also rejects NaN. */
  if (!(c->multiplier >= 1.0 && c->multiplier <= 100.0))
    return resil__err(err, RESIL_EINVAL, "multiplier",
                      "must be 1.0..100.0, got %g", c->multiplier);
  if (c->max_wait_ns < c->initial_wait_ns || c->max_wait_ns > day) {
    char what[96], lo[32], hi[32];
    snprintf(what, sizeof what, "initial_wait_ns (%s)..%s",
             resil__fmt_ns(lo, sizeof lo, c->initial_wait_ns),
             resil__fmt_ns(hi, sizeof hi, day));
    return resil__err_range_ns(err, "max_wait_ns", c->initial_wait_ns, day,
                               c->max_wait_ns, what);
  }
  CHECK(respect_retry_after, 0, 1);
  CHECK_NS(max_retry_after_ns, 0, day);
  if (c->retry_classes & ~(uint32_t)ALLOWED_CLASSES)
    return resil__err(err, RESIL_EINVAL, "retry_classes",
                      "may hold only the NOT_SENT, UNKNOWN, SERVER_ERROR, "
                      "HTTP_408, HTTP_425 and HTTP_429 bits (0x%x), got 0x%x",
                      (unsigned)ALLOWED_CLASSES, (unsigned)c->retry_classes);
  CHECK(retry_on_rejected, 0, 1);
  CHECK(unsafe_retry_non_idempotent, 0, 1);
  CHECK_NS(min_attempt_budget_ns, 0, day);
  if (c->budget && !resil__budget_valid(c->budget))
    return resil__err(err, RESIL_EINVAL, "budget",
                      "is not a live retry budget");
  if (c->clock && !c->clock->now_ns)
    return resil__err(err, RESIL_EINVAL, "clock", "has no now_ns function");
  if (c->recovery_breaker && !resil__breaker_clock(c->recovery_breaker))
    return resil__err(err, RESIL_EINVAL, "recovery_breaker",
                      "is not a live breaker");
  CHECK(retry_during_recovery, 0, 1);
  if (c->alloc && (!c->alloc->alloc || !c->alloc->free))
    return resil__err(err, RESIL_EINVAL, "alloc",
                      "needs both alloc and free functions");
  return RESIL_OK;
}

#undef CHECK
#undef CHECK_NS

static uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * UINT64_C(0xBF58476D1CE4E5B9);
  z = (z ^ (z >> 27)) * UINT64_C(0x94D049BB133111EB);
  return z ^ (z >> 31);
}

resil_status resil_retry_new(const resil_retry_config *ucfg, resil_retry **out,
                             resil_error *err) {
  if (!ucfg || !out)
    return resil__err(err, RESIL_EINVAL, ucfg ? "out" : "cfg",
                      "must not be NULL");
  resil_retry_config full;
  const resil_retry_config *cfg = &full;
  resil_status st = config_in(&full, ucfg, err);
  if (st != RESIL_OK) return st;
  st = validate(cfg, err);
  if (st != RESIL_OK) return st;
  resil_retry *r = resil__calloc(cfg->alloc, sizeof *r);
  if (!r) return resil__err(err, RESIL_ENOMEM, NULL, "out of memory");
  int ok;
  r->name = resil__strdup(cfg->alloc, cfg->name, &ok);
  if (!ok) {
    resil__free(cfg->alloc, r);
    return resil__err(err, RESIL_ENOMEM, NULL, "out of memory");
  }
  if (resil__shards_init(&r->calls, cfg->alloc, C_COUNT,
                         RESIL__SHARDS_DEFAULT_SLOTS) != RESIL_OK) {
    resil__free(cfg->alloc, r->name);
    resil__free(cfg->alloc, r);
    return resil__err(err, RESIL_ENOMEM, NULL, "out of memory");
  }
  r->alloc = cfg->alloc;
  r->max_attempts = cfg->max_attempts;
  r->backoff = cfg->backoff;
  r->retry_classes = cfg->retry_classes;
  r->respect_retry_after = cfg->respect_retry_after;
  r->retry_on_rejected = cfg->retry_on_rejected;
  r->unsafe_retry_non_idempotent = cfg->unsafe_retry_non_idempotent;
  r->wait_ns = cfg->wait_ns;
  r->initial_wait_ns = cfg->initial_wait_ns;
  r->max_wait_ns = cfg->max_wait_ns;
  r->retry_after_cap_ns =
      cfg->max_retry_after_ns > 0 ? cfg->max_retry_after_ns : cfg->max_wait_ns;
  r->min_attempt_budget_ns = cfg->min_attempt_budget_ns;
  r->attempt_floor_ns = cfg->min_attempt_budget_ns > ATTEMPT_FLOOR_NS
                            ? cfg->min_attempt_budget_ns
                            : ATTEMPT_FLOOR_NS;
  r->multiplier = cfg->multiplier;
  r->budget = cfg->budget;
  r->random = cfg->random;
  r->random_self = cfg->random_self;
  r->predicate = cfg->predicate;
  r->on_attempt = cfg->on_attempt;
  r->on_attempt_user = cfg->on_attempt_user;
  r->user = cfg->user;
  r->user_free = cfg->user_free;
  r->clock = cfg->clock;
  r->watch = cfg->retry_during_recovery ? NULL : cfg->recovery_breaker;
  r->during = (uint32_t)cfg->retry_during_recovery;
  resil__ctx_defaults(&r->first_ctx);
  r->first_ctx.clock = r->clock;
  r->first_ctx.attempt = 1;
  /* Different processes and instances must not jitter in lockstep: the
   * seed mixes the time of creation with the object's address. */
  const resil_clock *clk = resil__clock(cfg->clock);
  r->seed_base = mix64((uint64_t)resil__now(clk) ^
                       ((uint64_t)resil_clock_wall_ms(clk) << 20) ^
                       (uint64_t)(uintptr_t)r);
  atomic_init(&r->refused_deadline, 0);
  atomic_init(&r->refused_budget, 0);
  atomic_init(&r->suppressed, 0);
  atomic_init(&r->seq, 0);
  for (int i = 0; i < RESIL_RETRY_STOP_SLOTS; i++) atomic_init(&r->stops[i], 0);
  r->magic = RESIL_MAGIC_RETRY;
  r->plain = !r->budget && !r->on_attempt && !r->predicate ? RESIL_MAGIC_RETRY
                                                           : 0;
  *out = r;
  resil_error_clear(err);
  return RESIL_OK;
}

void resil_retry_free(resil_retry *r) {
  if (!r || r->magic != RESIL_MAGIC_RETRY) return;
  r->magic = RESIL_MAGIC_DEAD;
  r->plain = 0;
  if (r->user_free) r->user_free(r->user);
  resil__shards_free(&r->calls);
  resil__free(r->alloc, r->name);
  resil__free(r->alloc, r);
}

const char *resil_retry_name(const resil_retry *r) {
  if (!valid(r)) return NULL;
  return r->name ? r->name : "retry";
}

uint32_t resil_retry_max_attempts(const resil_retry *r) {
  return valid(r) ? r->max_attempts : 0;
}

/* ---- waits -------------------------------------------------------------- */

/* One exponential step: multiply, truncate to whole milliseconds (as
 * Resilience4j does with its long milliseconds), cap. Comparing with the cap
 * in floating point first keeps the conversion back in range. */
static int64_t exp_step(int64_t b, double multiplier, int64_t cap) {
  if (b >= cap) return cap;
  double ms = (double)b / (double)RESIL_NS_PER_MS * multiplier;
  if (ms >= (double)cap / (double)RESIL_NS_PER_MS) return cap;
  int64_t next = (int64_t)ms * RESIL_NS_PER_MS;
  return next < cap ? next : cap;
}

/* High 64 bits of a 64 x 64-bit product, without a 128-bit type. */
static uint64_t mulhi64(uint64_t a, uint64_t b) {
  uint64_t a_lo = (uint32_t)a, a_hi = a >> 32;
  uint64_t b_lo = (uint32_t)b, b_hi = b >> 32;
  uint64_t p0 = a_lo * b_lo, p1 = a_lo * b_hi, p2 = a_hi * b_lo;
  uint64_t p3 = a_hi * b_hi;
  uint64_t mid = (p0 >> 32) + (uint32_t)p1 + (uint32_t)p2;
  return p3 + (p1 >> 32) + (p2 >> 32) + (mid >> 32);
}

static uint64_t next_random(const resil_retry *r, resil_retry_state *st) {
  if (r->random) return r->random(r->random_self);
  if (!(st->bits & ST_RNG_SEEDED)) {
    /* Seeded only when a jittered wait is first needed, so calls that never
     * retry pay nothing; the per-retry sequence number keeps concurrent
     * logical calls apart without any global state. */
    uint64_t n = atomic_fetch_add_explicit(&((resil_retry *)r)->seq, 1,
                                           memory_order_relaxed);
    st->rng = r->seed_base ^ ((n + 1) * GOLDEN);
    st->bits |= ST_RNG_SEEDED;
  }
  st->rng += GOLDEN; /* splitmix64 */
  return mix64(st->rng);
}

/* Uniform in [lo, hi] (hi >= lo >= 0). Multiply-shift maps 0 to lo and
 * UINT64_MAX to hi, which tests with an injected source rely on. */
static int64_t random_between(const resil_retry *r, resil_retry_state *st,
                              int64_t lo, int64_t hi) {
  uint64_t span = (uint64_t)(hi - lo) + 1;
  return lo + (int64_t)mulhi64(next_random(r, st), span);
}

/* The wait after attempt n, before the Retry-After and deadline rules.
 * Advances the state's backoff sequence. */
static int64_t computed_wait(const resil_retry *r, resil_retry_state *st) {
  int64_t b = st->base_wait_ns, w;
  switch (r->backoff) {
  case RESIL_RETRY_FIXED:
    return r->wait_ns;
  case RESIL_RETRY_EXPONENTIAL:
    w = b;
    break;
  case RESIL_RETRY_EXPONENTIAL_FULL_JITTER:
    w = random_between(r, st, 0, b);
    break;
  case RESIL_RETRY_EXPONENTIAL_EQUAL_JITTER:
    w = random_between(r, st, b / 2, b);
    break;
  case RESIL_RETRY_DECORRELATED_JITTER:
  default:
    w = random_between(r, st, r->initial_wait_ns,
                       resil__sat_mul(st->prev_wait_ns, 3));
    if (w > r->max_wait_ns) w = r->max_wait_ns;
    st->prev_wait_ns = w;
    return w;
  }
  st->base_wait_ns = exp_step(b, r->multiplier, r->max_wait_ns);
  return w;
}

/* Sum of the upper bounds of the n - 1 waits of a logical call. */
static int64_t worst_wait(uint32_t max_attempts, resil_retry_backoff backoff,
                          int64_t wait_ns, int64_t initial_wait_ns,
                          double multiplier, int64_t max_wait_ns,
                          int respect_retry_after, int64_t retry_after_cap_ns) {
  int64_t base = initial_wait_ns, prev = initial_wait_ns;
  int64_t total = 0;
  for (uint32_t n = 1; n < max_attempts; n++) {
    int64_t w;
    switch (backoff) {
    case RESIL_RETRY_FIXED:
      w = wait_ns;
      break;
    case RESIL_RETRY_DECORRELATED_JITTER:
      w = resil__sat_mul(prev, 3);
      if (w > max_wait_ns) w = max_wait_ns;
      prev = w;
      break;
    default: /* the exponential family: jitter never exceeds b(n) */
      w = base;
      base = exp_step(base, multiplier, max_wait_ns);
      break;
    }
    if (respect_retry_after && retry_after_cap_ns > w) w = retry_after_cap_ns;
    total = resil__sat_add(total, w);
  }
  return total;
}

int64_t resil_retry_worst_wait_ns(const resil_retry_config *ucfg) {
  resil_retry_config full;
  const resil_retry_config *cfg = &full;
  if (!ucfg || config_in(&full, ucfg, NULL) != RESIL_OK ||
      validate(cfg, NULL) != RESIL_OK)
    return -1;
  return worst_wait(cfg->max_attempts, cfg->backoff, cfg->wait_ns,
                    cfg->initial_wait_ns, cfg->multiplier, cfg->max_wait_ns,
                    cfg->respect_retry_after,
                    cfg->max_retry_after_ns > 0 ? cfg->max_retry_after_ns
                                                : cfg->max_wait_ns);
}

int64_t resil__retry_worst_wait_of(const resil_retry *r) {
  if (!valid(r)) return -1;
  return worst_wait(r->max_attempts, r->backoff, r->wait_ns, r->initial_wait_ns,
                    r->multiplier, r->max_wait_ns, r->respect_retry_after,
                    r->retry_after_cap_ns);
}

/* ---- decisions ----------------------------------------------------------- */

/* The deadline rule (§2.3, §2.7): after waiting, the next attempt must still
 * have max(min_attempt_budget_ns, 1 ms). */
static int fits_deadline(const resil_retry *r, int64_t left_after_wait) {
  return left_after_wait >= r->attempt_floor_ns;
}

static void account(resil_retry *r, const resil_retry_state *st,
                    resil_stop stop) {
  uint32_t n = st->attempts;
  if (stop == RESIL_STOP_SUCCESS) {
    if (RESIL_LIKELY(n <= 1)) {
      resil__shards_add(&r->calls, C_OK_FIRST, 1);
      return;
    }
    resil__shards_add(&r->calls, C_OK_RETRIED, 1);
  } else {
    resil__shards_add(&r->calls, n <= 1 ? C_FAILED_FIRST : C_FAILED_RETRIED, 1);
    if (RESIL_LIKELY(stop < RESIL_RETRY_STOP_SLOTS))
      BUMP(r->stops[stop], 1);
    else
      BUMP(r->suppressed, 1); /* RESIL_STOP_RECOVERING */
  }
  if (n) resil__shards_add(&r->calls, C_ATTEMPTS_OTHER, n);
}

/* Ends the logical call with the last recorded outcome (or the refusal
 * already placed in st->result) and folds it: when nothing was sent this
 * time but an earlier attempt may have executed, the caller must not read
 * "not sent", so the kind becomes UNKNOWN with PRIOR_MAYBE_EXECUTED. A
 * NOT_SENT or REJECTED outcome counts in ST_MAYBE_RAN only through that same
 * flag, so the one bit answers "may an earlier attempt have run?". */
static resil_stop finish(resil_retry *r, resil_retry_state *st,
                         resil_stop stop) {
  resil_outcome *f = &st->result;
  f->stop = stop;
  f->attempts = st->attempts;
  if ((f->kind == RESIL_NOT_SENT || f->kind == RESIL_REJECTED) &&
      (st->bits & ST_MAYBE_RAN)) {
    f->kind = RESIL_UNKNOWN;
    f->flags |= RESIL_OF_PRIOR_MAYBE_EXECUTED;
  }
  st->bits |= ST_STOPPED;
  account(r, st, stop);
  return stop;
}

/* The deadline or the budget refused the next attempt. After a NOT_SENT or
 * REJECTED attempt the refusal is the most exact answer (DESIGN §2.3: the
 * retry gives up, REJECTED, reason deadline); after an attempt that reached
 * the server, that attempt's outcome says more and is kept. */
static resil_stop refuse(resil_retry *r, resil_retry_state *st,
                         resil_stop stop, resil_reason reason) {
  if (stop == RESIL_STOP_DEADLINE)
    BUMP(r->refused_deadline, 1);
  else
    BUMP(r->refused_budget, 1);
  if (st->attempts == 0 || st->result.kind == RESIL_NOT_SENT ||
      st->result.kind == RESIL_REJECTED) {
    uint32_t flags = st->attempts ? st->result.flags : 0;
    st->result = resil_outcome_make(RESIL_REJECTED, reason);
    st->result.flags = flags;
  }
  return finish(r, st, stop);
}

static int64_t deadline_left(const resil_retry_state *st) {
  int64_t now = resil__now(resil__clock(st->ctx.clock));
  return resil__sat_add(st->ctx.deadline_ns, -now);
}

/* The clock attempts are measured and waits slept on: the context's, else
 * the retry's, else the system's. */
static const resil_clock *wait_clock(const resil_retry *r,
                                     const resil_retry_state *st) {
  return resil__clock(st->ctx.clock ? st->ctx.clock : r->clock);
}

static void state_reset(resil_retry_state *st) {
  /* Written field by field: resil_outcome_make lives in another unit and
   * this runs once per logical call of the split form. */
  st->result.kind = RESIL_NOT_SENT;
  st->result.reason = RESIL_REASON_LOCAL_ERROR;
  st->result.http_status = 0;
  st->result.retry_after_ms = -1;
  st->result.flags = 0;
  st->result.stop = RESIL_STOP_NONE;
  st->result.attempts = 0;
  st->attempts = 0;
  st->rng = 0;
  st->wait_before_ns = 0;
  st->decided_ns = 0;
}

resil_status resil_retry_state_new(const resil_allocator *alloc,
                                   resil_retry_state **out) {
  if (!out || (alloc && (!alloc->alloc || !alloc->free))) return RESIL_EINVAL;
  resil_retry_state *st = resil__calloc(alloc, sizeof *st);
  if (!st) return RESIL_ENOMEM;
  st->alloc = alloc;
  resil_ctx_init(&st->ctx);
  state_reset(st);
  st->bits = ST_STOPPED;
  *out = st;
  return RESIL_OK;
}

void resil_retry_state_free(resil_retry_state *st) {
  if (st) resil__free(st->alloc, st);
}

resil_ctx *resil_retry_state_ctx(resil_retry_state *st) {
  return st ? &st->ctx : NULL;
}

/* begin() on a state the caller owns or on the run form's stack state. */
static resil_decision begin(resil_retry *r, const resil_ctx *ctx,
                            resil_retry_state *st) {
  state_reset(st);
  st->owner = NULL;
  st->bits = ST_STOPPED;
  st->base_wait_ns = st->prev_wait_ns = 0;
  if (RESIL_UNLIKELY(!valid(r))) return RESIL_DECISION_DENY;
  resil_ctx lc;
  const resil_ctx *c = resil__ctx_in(&lc, ctx);
  if (RESIL_UNLIKELY(!c)) return RESIL_DECISION_DENY;
  st->ctx = *c;
  if (!ctx) st->ctx.clock = r->clock;
  st->owner = r;
  st->watch = r->watch;
  st->bits = 0;
  st->base_wait_ns = r->initial_wait_ns;
  st->prev_wait_ns = r->initial_wait_ns;
  st->ctx.attempt = 1;
  if (r->budget) resil__budget_on_call(r->budget);
  if (st->ctx.cancel && resil_cancel_is_set(st->ctx.cancel)) {
    st->result.reason = RESIL_REASON_CANCELLED;
    finish(r, st, RESIL_STOP_CANCELLED);
    return RESIL_DECISION_DENY;
  }
  if (st->ctx.deadline_ns != RESIL_NO_DEADLINE &&
      !fits_deadline(r, deadline_left(st))) {
    refuse(r, st, RESIL_STOP_DEADLINE, RESIL_REASON_DEADLINE);
    return RESIL_DECISION_DENY;
  }
  if (r->on_attempt) st->decided_ns = resil__now(wait_clock(r, st));
  return RESIL_DECISION_GO;
}

resil_decision resil_retry_begin(resil_retry *r, const resil_ctx *ctx,
                                 resil_retry_state *st) {
  if (!st) return RESIL_DECISION_DENY;
  return begin(r, ctx, st);
}

/* Records attempt n's outcome o and decides: RESIL_STOP_NONE with *wait the
 * wait before the next attempt, or the reason the logical call stops. */
static resil_stop decide(resil_retry *r, resil_retry_state *st,
                         const resil_outcome *o, int64_t *wait_out) {
  uint32_t n = ++st->attempts;
  st->result = *o;
  /* The common success, classified without a call. */
  resil_outcome_class c = resil__common_success(o->kind, o->reason, o->http_status)
                               ? RESIL_CLASS_SUCCESS
                               : resil_outcome_classify(o);
  if (r->budget) resil__budget_on_attempt(r->budget, c);
  int retry;
  resil_retry_verdict v =
      r->predicate ? r->predicate(r->user, o) : RESIL_RETRY_VERDICT_DEFAULT;
  if (v == RESIL_RETRY_VERDICT_DEFAULT) {
    if (RESIL_LIKELY(c == RESIL_CLASS_SUCCESS))
      return finish(r, st, RESIL_STOP_SUCCESS);
    retry = c == RESIL_CLASS_REJECTED ? r->retry_on_rejected
                                      : (r->retry_classes & RESIL_CLASS_BIT(c)) != 0;
  } else {
    retry = v == RESIL_RETRY_VERDICT_RETRY;
  }
  int maybe_ran = resil_outcome_maybe_executed(o);
  if (maybe_ran) st->bits |= ST_MAYBE_RAN;
  if (!retry)
    return finish(r, st,
                  c == RESIL_CLASS_SUCCESS ? RESIL_STOP_SUCCESS
                                           : RESIL_STOP_NOT_RETRYABLE);
  /* The safety rule: an attempt that may have executed is repeated only for
   * an operation that tolerates it, or on the explicit unsafe opt-in. */
  if (maybe_ran && !(st->ctx.flags & SAFE_FLAGS) &&
      !r->unsafe_retry_non_idempotent)
    return finish(r, st, RESIL_STOP_UNSAFE);
  if (n >= r->max_attempts) return finish(r, st, RESIL_STOP_MAX_ATTEMPTS);
  if (st->ctx.cancel && resil_cancel_is_set(st->ctx.cancel))
    return finish(r, st, RESIL_STOP_CANCELLED);
  /* Retries last (DESIGN §2.9): none while the breaker inside is
   * recovering; nothing taken from the budget. */
  if (st->watch && resil_breaker_recovering(st->watch))
    return finish(r, st, RESIL_STOP_RECOVERING);

  int64_t wait = computed_wait(r, st);
  if (r->respect_retry_after && o->retry_after_ms > 0) {
    /* A positive hint replaces the computed wait, shorter or longer,
     * within the policy's cap. 0 (also a date in the past) and -1 (none,
     * or unusable) leave the computed wait (DESIGN §2.3). */
    int64_t ra = resil__sat_mul(o->retry_after_ms, RESIL_NS_PER_MS);
    wait = ra < r->retry_after_cap_ns ? ra : r->retry_after_cap_ns;
  }
  if (st->ctx.deadline_ns != RESIL_NO_DEADLINE) {
    int64_t left = deadline_left(st);
    /* Never sleep past the deadline; then refuse at once, before any
     * sleep, when the attempt after the wait would not have its floor (a
     * wait that uses up the whole deadline leaves nothing). */
    if (wait > left) wait = left > 0 ? left : 0;
    if (!fits_deadline(r, left - wait))
      return refuse(r, st, RESIL_STOP_DEADLINE, RESIL_REASON_DEADLINE);
  }
  if (r->budget && !resil__budget_allow_retry(r->budget))
    return refuse(r, st, RESIL_STOP_BUDGET, RESIL_REASON_RETRY_BUDGET);
  *wait_out = wait;
  return RESIL_STOP_NONE;
}

static void report(const resil_retry *r, const resil_retry_state *st,
                   const resil_outcome *o, int64_t duration_ns,
                   int64_t next_wait_ns, resil_stop stop) {
  resil_attempt_info info;
  info.struct_size = sizeof info;
  info.source = r->name ? r->name : "retry";
  info.attempt = st->attempts;
  info.outcome = *o;
  info.duration_ns = duration_ns > 0 ? duration_ns : 0;
  info.wait_before_ns = st->wait_before_ns;
  info.next_wait_ns = next_wait_ns;
  info.stop = stop;
  info.idempotency_key = st->ctx.idempotency_key;
  r->on_attempt(r->on_attempt_user, &info);
}

resil_decision resil_retry_next_timed(resil_retry *r, resil_retry_state *st,
                                      const resil_outcome *o,
                                      int64_t duration_ns, int64_t *wait_ns) {
  if (wait_ns) *wait_ns = 0;
  if (RESIL_UNLIKELY(!st || !o || !valid(r) || st->owner != r))
    return RESIL_DECISION_DENY;
  if (st->bits & ST_STOPPED) return RESIL_DECISION_DENY;
  int64_t wait = 0;
  if (RESIL_LIKELY(!r->on_attempt)) {
    if (decide(r, st, o, &wait) != RESIL_STOP_NONE) return RESIL_DECISION_DENY;
  } else {
    const resil_clock *clk = wait_clock(r, st);
    int64_t now = resil__now(clk);
    if (duration_ns < 0)
      duration_ns = now - st->decided_ns - st->wait_before_ns;
    resil_outcome raw = *o;
    resil_stop stop = decide(r, st, &raw, &wait);
    report(r, st, &raw, duration_ns, stop == RESIL_STOP_NONE ? wait : -1, stop);
    if (stop != RESIL_STOP_NONE) return RESIL_DECISION_DENY;
    st->wait_before_ns = wait;
    st->decided_ns = resil__now(clk);
  }
  st->ctx.attempt = st->attempts + 1;
  if (wait_ns) *wait_ns = wait;
  return wait > 0 ? RESIL_DECISION_WAIT : RESIL_DECISION_GO;
}

resil_decision resil_retry_next(resil_retry *r, resil_retry_state *st,
                                const resil_outcome *o, int64_t *wait_ns) {
  return resil_retry_next_timed(r, st, o, -1, wait_ns);
}

resil_outcome resil_retry_result(const resil_retry_state *st) {
  if (!st) return resil_outcome_make(RESIL_NOT_SENT, RESIL_REASON_LOCAL_ERROR);
  return st->result;
}

/* The rest of begin() for the run form's fast path, once the first attempt
 * has failed. */
static void state_init_rest(resil_retry *r, resil_retry_state *st) {
  state_reset(st);
  st->owner = r;
  st->watch = r->watch;
  st->bits = 0;
  st->base_wait_ns = r->initial_wait_ns;
  st->prev_wait_ns = r->initial_wait_ns;
}

/* One attempt of the run form; measured only when a listener wants it. */
static resil_decision run_attempt(resil_retry *r, resil_retry_state *st,
                                  resil_call_fn fn, void *arg, int64_t *delay) {
  if (RESIL_LIKELY(!r->on_attempt)) {
    resil_outcome o = fn(arg, &st->ctx);
    return resil_retry_next_timed(r, st, &o, 0, delay);
  }
  const resil_clock *clk = wait_clock(r, st);
  int64_t t0 = resil__now(clk);
  resil_outcome o = fn(arg, &st->ctx);
  return resil_retry_next_timed(r, st, &o, resil__now(clk) - t0, delay);
}

/* Retries last, after the wait (resil_retry_proceed). */
static resil_decision proceed(resil_retry *r, resil_retry_state *st) {
  if (st->watch && resil_breaker_recovering(st->watch)) {
    finish(r, st, RESIL_STOP_RECOVERING);
    return RESIL_DECISION_DENY;
  }
  return RESIL_DECISION_GO;
}

resil_decision resil_retry_proceed(resil_retry *r, resil_retry_state *st) {
  if (RESIL_UNLIKELY(!st || !valid(r) || st->owner != r)) return RESIL_DECISION_DENY;
  if (st->bits & ST_STOPPED) return RESIL_DECISION_DENY;
  return proceed(r, st);
}

/* The attempts after the first one's decision d, then the final outcome. */
static resil_outcome run_loop(resil_retry *r, resil_retry_state *st,
                              resil_decision d, int64_t delay,
                              resil_call_fn fn, void *arg) {
  while (d != RESIL_DECISION_DENY) {
    if (delay > 0 &&
        resil_clock_sleep_ns(wait_clock(r, st), delay, st->ctx.cancel)) {
      /* Woken by cancellation: the next attempt is not made. */
      finish(r, st, RESIL_STOP_CANCELLED);
      break;
    }
    /* The breaker may have started recovering during the wait. */
    if (delay > 0 && proceed(r, st) == RESIL_DECISION_DENY) break;
    d = run_attempt(r, st, fn, arg, &delay);
  }
  return st->result;
}

/* The call a run form makes, passed by address to the path that repeats
 * it: the fast path then keeps no registers for fn and arg across the
 * first attempt. */
typedef struct call_of {
  resil_call_fn fn;
  void *arg;
  struct resil_breaker *watch; /* the breaker the call watches */
} call_of;

/* The fast path's first attempt did not end the call: the state begin()
 * would have made, then the rest of the call. first: the first attempt's
 * ctx (NULL: r->first_ctx). *io holds the first attempt's outcome and gets
 * the final one. */
__attribute__((noinline)) static void run_rest(resil_retry *r,
                                               const resil_ctx *first,
                                               const call_of *k,
                                               resil_outcome *io) {
  resil_retry_state st;
  int64_t delay = 0;
  st.ctx = first ? *first : r->first_ctx;
  state_init_rest(r, &st);
  st.watch = k->watch;
  resil_decision d = resil_retry_next_timed(r, &st, io, 0, &delay);
  *io = run_loop(r, &st, d, delay, k->fn, k->arg);
}

/* Budget, deadline, token or listener: begin() first. */
__attribute__((noinline)) static resil_outcome
run_full(resil_retry *r, const resil_ctx *ctx, resil_call_fn fn, void *arg,
         struct resil_breaker *watch) {
  resil_retry_state st;
  int64_t delay = 0;
  resil_decision d = begin(r, ctx, &st);
  st.watch = watch;
  if (d != RESIL_DECISION_DENY) d = run_attempt(r, &st, fn, arg, &delay);
  return run_loop(r, &st, d, delay, fn, arg);
}

/* The first attempt of a call the fast path takes (no budget, deadline,
 * token or listener: nothing to check before it), `first` its ctx. A plain
 * success then needs no state: no clock read, no allocation, no lock, no
 * atomic read-modify-write (the count goes to the thread's shard). */
#if defined(__GNUC__)
__attribute__((always_inline))
#endif
static inline void after_first(resil_retry *r, const resil_ctx *first,
                               const call_of *k, resil_outcome *io) {
  if (RESIL_LIKELY(resil__common_success(io->kind, io->reason, io->http_status) &&
                   !r->predicate)) {
    resil__shards_add(&r->calls, C_OK_FIRST, 1);
    *io = resil__outcome_with_stop(io, RESIL_STOP_SUCCESS, 1);
    return;
  }
  run_rest(r, first, k, io);
}

#if defined(__GNUC__)
__attribute__((always_inline))
#endif
static inline resil_outcome run_fast(resil_retry *r, const resil_ctx *first,
                                     resil_call_fn fn, void *arg,
                                     struct resil_breaker *watch) {
  const call_of k = {fn, arg, watch};
  resil_outcome o = fn(arg, first);
  after_first(r, first, &k, &o);
  return o;
}

/* Nothing to check before the first attempt: no budget, listener,
 * deadline or token (c: a full-size ctx, or NULL). */
static inline int takes_fast_path(const resil_retry *r, const resil_ctx *c) {
  return !r->budget && !r->on_attempt &&
         (!c || (c->deadline_ns == RESIL_NO_DEADLINE && !c->cancel));
}

int resil__retry_fast_first(const resil_retry *r, const resil_ctx *ctx,
                            resil_ctx *first) {
  if (RESIL_UNLIKELY(!valid(r) || !ctx || ctx->struct_size != sizeof *ctx ||
                     !takes_fast_path(r, ctx)))
    return 0;
  *first = *ctx;
  first->attempt = 1;
  return 1;
}

void resil__retry_fast_rest(resil_retry *r, const resil_ctx *first,
                            resil_call_fn fn, void *arg, resil_outcome *io,
                            struct resil_breaker *watch) {
  const call_of k = {fn, arg, r->during ? NULL : watch ? watch : r->watch};
  after_first(r, first, &k, io);
}

int resil__retry_recovery(const resil_retry *r, struct resil_breaker **watch) {
  if (watch) *watch = valid(r) ? r->watch : NULL;
  return valid(r) ? (int)r->during : 0;
}

int resil__retry_plain_first(const resil_retry *r) {
  return valid(r) && takes_fast_path(r, NULL) && !r->predicate;
}

void resil__retry_first_ok(resil_retry *r) {
  resil__shards_add(&r->calls, C_OK_FIRST, 1);
}

/* resil_retry_run for every call but the plain one without a ctx. */
__attribute__((noinline)) static resil_outcome
run_general(resil_retry *r, const resil_ctx *ctx, resil_call_fn fn, void *arg,
            struct resil_breaker *watch) {
  if (RESIL_UNLIKELY(!valid(r) || !fn))
    return resil_outcome_make(RESIL_NOT_SENT, RESIL_REASON_LOCAL_ERROR);
  watch = r->during ? NULL : watch ? watch : r->watch;
  resil_ctx lc;
  const resil_ctx *c = ctx ? resil__ctx_in(&lc, ctx) : NULL;
  if (RESIL_UNLIKELY(ctx && !c))
    return resil_outcome_make(RESIL_NOT_SENT, RESIL_REASON_LOCAL_ERROR);
  if (!takes_fast_path(r, c)) return run_full(r, ctx, fn, arg, watch);
  if (!c) return run_fast(r, &r->first_ctx, fn, arg, watch);
  if (c != &lc) lc = *c;
  lc.attempt = 1;
  return run_fast(r, &lc, fn, arg, watch);
}

resil_outcome resil__retry_run_watch(resil_retry *r, const resil_ctx *ctx,
                                     resil_call_fn fn, void *arg,
                                     struct resil_breaker *watch) {
  return run_general(r, ctx, fn, arg, watch);
}

resil_status resil_retry_state_watch(resil_retry_state *st, resil_breaker *watch) {
  if (!st || !st->owner || !valid(st->owner)) return RESIL_EINVAL;
  if (watch && !resil__breaker_clock(watch)) return RESIL_EINVAL;
  if (!st->owner->during) st->watch = watch;
  return RESIL_OK;
}

resil_outcome resil_retry_run(resil_retry *r, const resil_ctx *ctx,
                              resil_call_fn fn, void *arg) {
  /* The plain call: no ctx (the first attempt gets the retry's own constant
   * one), no budget, listener or predicate. */
  if (RESIL_UNLIKELY(!r || r->plain != RESIL_MAGIC_RETRY || ctx || !fn))
    return run_general(r, ctx, fn, arg, NULL);
  const call_of k = {fn, arg, r->watch};
  resil_outcome o = fn(arg, &r->first_ctx);
  if (RESIL_LIKELY(resil__common_success(o.kind, o.reason, o.http_status))) {
    resil__shards_add(&r->calls, C_OK_FIRST, 1);
    return resil__outcome_with_stop(&o, RESIL_STOP_SUCCESS, 1);
  }
  run_rest(r, NULL, &k, &o);
  return o;
}

resil_status resil_retry_get_stats_sized(const resil_retry *r,
                                         resil_retry_stats *dst, size_t n) {
  if (!valid(r)) return RESIL_EMISUSE;
  if (!dst) return RESIL_EINVAL;
  resil_retry *m = (resil_retry *)r; /* atomics are not const */
  resil_retry_stats full, *out = &full;
  memset(out, 0, sizeof *out);
  out->struct_size = sizeof *out;
  out->successful_without_retry = resil__shards_sum(&m->calls, C_OK_FIRST);
  out->successful_with_retry = resil__shards_sum(&m->calls, C_OK_RETRIED);
  out->failed_without_retry = resil__shards_sum(&m->calls, C_FAILED_FIRST);
  out->failed_with_retry = resil__shards_sum(&m->calls, C_FAILED_RETRIED);
  out->calls = out->successful_without_retry + out->successful_with_retry +
               out->failed_without_retry + out->failed_with_retry;
  out->attempts = out->successful_without_retry +
                  resil__shards_sum(&m->calls, C_ATTEMPTS_OTHER);
  for (int i = 0; i < RESIL_RETRY_STOP_SLOTS; i++)
    out->stops[i] = LOAD(m->stops[i]);
  /* Successes are not counted per stop on the fast path; they are exactly
   * the successful calls. */
  out->stops[RESIL_STOP_SUCCESS] =
      out->successful_without_retry + out->successful_with_retry;
  out->refused_by_deadline = LOAD(m->refused_deadline);
  out->refused_by_budget = LOAD(m->refused_budget);
  out->suppressed_recovering = LOAD(m->suppressed);
  resil__sized_out(dst, n, &full, sizeof full);
  return RESIL_OK;
}
