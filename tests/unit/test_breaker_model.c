/* Circuit breaker against a reference model (DESIGN §2.2; issue 7).
 *
 * The model below is written from DESIGN §2.2 and the contract in
 * include/resil/breaker.h, not from src/breaker/breaker.c: it keeps every
 * result of the current window in a plain array and recomputes the figures
 * from it, walks time-driven changes one by one, and knows nothing of
 * atomics, bit maps, buckets or delivery batches. Random configurations
 * run random operations (every outcome class, durations at the slow
 * threshold -1/+0/+1, manual transitions including X->X and refused ones,
 * resil_breaker_open_for, resets, stale permits recorded and released,
 * releases, time jumps from 0 to two days with and without the automatic
 * timer, count and time windows, calls through resil_breaker_run whose
 * function moves the clock by its duration, clocks whose coarse reading
 * the breaker may use); after each one the breaker's state,
 * generation, window figures, totals, the events its listener received and
 * its event ring must equal the model's.
 *
 * Deterministic: seed RESIL_MODEL_SEED (environment, decimal or 0x...) or
 * the built-in one; a failure prints the seed, the configuration and the
 * step. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"

#define NS_PER_MS INT64_C(1000000)
#define NS_PER_S INT64_C(1000000000)
#define DAY (86400 * NS_PER_S)

#define CONFIGS 300
#define STEPS 200
#define MAX_PERMITS 12
#define MAX_RESULTS 512
#define DEFAULT_SEED UINT64_C(0x5eed2026b4ea7e11)

/* ---- deterministic generator ---------------------------------------------- */

static uint64_t rng_s;
static uint64_t rng(void) { /* splitmix64 */
  uint64_t z = (rng_s += UINT64_C(0x9e3779b97f4a7c15));
  z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
  z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
  return z ^ (z >> 31);
}
static uint32_t below(uint32_t n) { return (uint32_t)(rng() % n); }
static int64_t below64(int64_t n) { return (int64_t)(rng() % (uint64_t)n); }
static int chance(unsigned pct) { return below(100) < pct; }
#define PICK(arr) ((arr)[below((uint32_t)(sizeof(arr) / sizeof((arr)[0])))])

/* What the runs covered: checked at the end, so a generator that stops
 * reaching a case fails the test instead of passing vacuously. */
static struct coverage {
  unsigned long ops, compares, events, transitions, stale_records,
      stale_releases, same_state, refused, ignored, rejected, capped,
      idle_cycles, time_windows, half_to_closed, open_for, slow_edges,
      runs, runs_refused, coarse_clocks;
} cov;

/* ---- the model ------------------------------------------------------------- */

typedef struct mevent {
  uint64_t seq;
  int64_t time_ns;
  int kind, from, to, cause;
} mevent;

typedef struct mresult {
  int64_t sec; /* second of the clock it was recorded in */
  int failed, slow;
} mresult;

typedef struct mpermit {
  uint64_t gen;           /* model's generation at issue */
  resil_breaker_permit p; /* what the breaker handed out */
} mpermit;

typedef struct model {
  resil_breaker_config c;
  int state;
  uint64_t gen;
  int64_t since;
  uint32_t opens;
  int64_t series, wait; /* series' wait for `opens`; wait of this OPEN */
  uint32_t half_left;
  int exceeded;
  /* The window of the current state period. */
  int half_window; /* 1: the HALF_OPEN count window */
  mresult res[MAX_RESULTS];
  size_t nres;
  /* Totals. */
  uint64_t calls, failures, slow, slow_failed, ignored, not_permitted,
      transitions;
  /* Events: every one emitted since the last comparison, and a ring. */
  uint64_t seq;
  mevent *fresh;
  size_t nfresh, fresh_cap;
  mevent ring[RESIL_BREAKER_MAX_EVENTS];
  unsigned catchup; /* time-driven transitions in the current call */
} model;

static void m_emit(model *m, int kind, int from, int to, int cause,
                   int64_t t) {
  mevent e = {++m->seq, t, kind, from, to, cause};
  if (m->nfresh == m->fresh_cap) {
    m->fresh_cap = m->fresh_cap ? 2 * m->fresh_cap : 64;
    m->fresh = realloc(m->fresh, m->fresh_cap * sizeof *m->fresh);
    assert_non_null(m->fresh);
  }
  m->fresh[m->nfresh++] = e;
  if (m->c.event_capacity)
    m->ring[(e.seq - 1) % m->c.event_capacity] = e;
}

/* The n-th consecutive OPEN's wait from the (n-1)-th (header: "the n-th
 * wait is the (n-1)-th times the multiplier, truncated to whole ms when
 * open_wait_ns is whole ms, capped"). */
static int64_t m_grow(const model *m, int64_t prev) {
  int64_t cap = m->c.open_wait_max_ns ? m->c.open_wait_max_ns : INT64_MAX;
  if (m->c.open_wait_multiplier == 1.0)
    return prev;
  double x = (double)prev * m->c.open_wait_multiplier;
  if (x >= (double)cap)
    return cap;
  int64_t n = (int64_t)x;
  if (m->c.open_wait_ns % NS_PER_MS == 0)
    n = n / NS_PER_MS * NS_PER_MS;
  if (n < prev)
    n = prev;
  return n < cap ? n : cap;
}

/* Enters `to` at t in a new generation (no event): DESIGN's per-state
 * rules for a transition and for X->X alike. */
static void m_restart(model *m, int to, int64_t t) {
  switch (to) {
  case RESIL_BREAKER_OPEN:
  case RESIL_BREAKER_FORCED_OPEN:
    m->opens++;
    m->series = m->opens == 1 ? m->c.open_wait_ns : m_grow(m, m->series);
    m->wait = m->series;
    if (to == RESIL_BREAKER_FORCED_OPEN) {
      m->nres = 0;
      m->half_window = 0;
    } /* OPEN keeps the window it came from */
    break;
  case RESIL_BREAKER_HALF_OPEN:
    m->half_left = m->c.half_open_permitted_calls;
    m->nres = 0;
    m->half_window = 1;
    break;
  default: /* CLOSED, DISABLED, METRICS_ONLY */
    m->opens = 0;
    m->series = 0;
    m->wait = 0;
    m->nres = 0;
    m->half_window = 0;
    break;
  }
  m->exceeded = 0;
  m->since = t;
  m->state = to;
  m->gen++;
}

static void m_enter(model *m, int to, int64_t t, int cause) {
  int from = m->state;
  cov.transitions++;
  if (cause == RESIL_BREAKER_CAUSE_HALF_OPEN_MAX_WAIT &&
      to == RESIL_BREAKER_CLOSED)
    cov.half_to_closed++;
  m_restart(m, to, t);
  m->transitions++;
  m_emit(m, RESIL_BREAKER_EVENT_TRANSITION, from, to, cause, t);
}

/* Window figures at instant `now`. */
typedef struct mwin {
  uint64_t calls, failed, slow, slow_failed, min;
} mwin;

static mwin m_window(const model *m, int64_t now) {
  mwin w = {0, 0, 0, 0, 0};
  size_t first = 0;
  int timed = !m->half_window && m->c.window_type == RESIL_BREAKER_WINDOW_TIME;
  uint32_t size = m->half_window ? m->c.half_open_permitted_calls
                                 : m->c.window_size;
  if (!timed && m->nres > size)
    first = m->nres - size;
  int64_t sec = now / NS_PER_S;
  for (size_t i = first; i < m->nres; i++) {
    if (timed && m->res[i].sec <= sec - (int64_t)size)
      continue;
    w.calls++;
    w.failed += (uint64_t)m->res[i].failed;
    w.slow += (uint64_t)m->res[i].slow;
    w.slow_failed += (uint64_t)(m->res[i].slow && m->res[i].failed);
  }
  w.min = m->c.minimum_calls;
  if (m->half_window && m->c.half_open_permitted_calls < w.min)
    w.min = m->c.half_open_permitted_calls;
  return w;
}

enum { V_NONE, V_BELOW, V_FAIL, V_SLOW, V_BOTH };
static int m_verdict(const model *m, int64_t now) {
  mwin w = m_window(m, now);
  if (w.calls == 0 || w.calls < w.min)
    return V_NONE;
  int f = w.failed * 100 >= w.calls * m->c.failure_rate_threshold_pct;
  int s = w.slow * 100 >= w.calls * m->c.slow_call_rate_threshold_pct;
  return f && s ? V_BOTH : f ? V_FAIL : s ? V_SLOW : V_BELOW;
}
static int cause_of(int v) {
  return v == V_BOTH   ? RESIL_BREAKER_CAUSE_BOTH_RATES
         : v == V_FAIL ? RESIL_BREAKER_CAUSE_FAILURE_RATE
                       : RESIL_BREAKER_CAUSE_SLOW_CALL_RATE;
}

/* A call starts: its catch-up budget is fresh. */
static void m_call(model *m) { m->catchup = 0; }

/* Overdue time-driven changes, each at its scheduled instant, at most
 * RESIL_BREAKER_MAX_CATCHUP per call. */
static void m_settle(model *m, int64_t now) {
  while (m->catchup < RESIL_BREAKER_MAX_CATCHUP) {
    if (m->state == RESIL_BREAKER_HALF_OPEN && m->c.half_open_max_wait_ns > 0 &&
        now - m->since >= m->c.half_open_max_wait_ns) {
      m_enter(m,
              m->c.half_open_max_wait_to_closed ? RESIL_BREAKER_CLOSED
                                                : RESIL_BREAKER_OPEN,
              m->since + m->c.half_open_max_wait_ns,
              RESIL_BREAKER_CAUSE_HALF_OPEN_MAX_WAIT);
    } else if (m->state == RESIL_BREAKER_OPEN && m->c.automatic_half_open &&
               now - m->since >= m->wait) {
      m_enter(m, RESIL_BREAKER_HALF_OPEN, m->since + m->wait,
              RESIL_BREAKER_CAUSE_OPEN_WAIT_ELAPSED);
    } else {
      return;
    }
    m->catchup++;
    if (m->state == RESIL_BREAKER_HALF_OPEN && m->c.automatic_half_open)
      cov.idle_cycles++;
    if (m->catchup == RESIL_BREAKER_MAX_CATCHUP)
      cov.capped++;
  }
}

static int m_acquire(model *m, int64_t now, uint64_t *gen) {
  m_call(m);
  m_settle(m, now);
  int ok;
  switch (m->state) {
  case RESIL_BREAKER_OPEN:
    ok = 0;
    if (!m->c.automatic_half_open && now - m->since >= m->wait) {
      m_enter(m, RESIL_BREAKER_HALF_OPEN, now,
              RESIL_BREAKER_CAUSE_OPEN_WAIT_ELAPSED);
      ok = 1;
      m->half_left--;
    }
    break;
  case RESIL_BREAKER_HALF_OPEN:
    ok = m->half_left > 0;
    if (ok)
      m->half_left--;
    break;
  case RESIL_BREAKER_FORCED_OPEN:
    ok = 0;
    break;
  default:
    ok = 1;
  }
  if (!ok) {
    m->not_permitted++;
    m_emit(m, RESIL_BREAKER_EVENT_NOT_PERMITTED, m->state, m->state,
           RESIL_BREAKER_CAUSE_NONE, now);
  }
  *gen = m->gen;
  return ok;
}

static void m_hand_back(model *m) {
  if (m->state == RESIL_BREAKER_HALF_OPEN &&
      m->half_left < m->c.half_open_permitted_calls)
    m->half_left++;
}

static void m_record(model *m, int64_t now, uint64_t gen,
                     resil_outcome_class cls, int64_t duration) {
  m_call(m);
  m_settle(m, now);
  if (gen != m->gen) {
    cov.stale_records++;
    return; /* older generation: nothing at all */
  }
  if (m->state == RESIL_BREAKER_DISABLED || m->state == RESIL_BREAKER_OPEN ||
      m->state == RESIL_BREAKER_FORCED_OPEN)
    return;
  if (cls == RESIL_CLASS_REJECTED) {
    cov.rejected++;
    m_hand_back(m);
    return;
  }
  if (duration == m->c.slow_call_duration_ns ||
      duration + 1 == m->c.slow_call_duration_ns)
    cov.slow_edges++;
  if (m->c.ignored_classes & RESIL_CLASS_BIT(cls)) {
    cov.ignored++;
    m->ignored++;
    m_hand_back(m);
    return;
  }
  int failed = (m->c.failure_classes & RESIL_CLASS_BIT(cls)) != 0;
  int slow = duration >= m->c.slow_call_duration_ns;
  m->calls++;
  m->failures += (uint64_t)failed;
  m->slow += (uint64_t)slow;
  m->slow_failed += (uint64_t)(slow && failed);
  assert_true(m->nres < MAX_RESULTS);
  m->res[m->nres++] = (mresult){now / NS_PER_S, failed, slow};
  int v = m_verdict(m, now);
  if (v >= V_FAIL) {
    if (m->state != RESIL_BREAKER_METRICS_ONLY) {
      m_enter(m, RESIL_BREAKER_OPEN, now, cause_of(v));
    } else if (!m->exceeded) {
      m->exceeded = 1;
      m_emit(m, RESIL_BREAKER_EVENT_THRESHOLDS_EXCEEDED, m->state, m->state,
             cause_of(v), now);
    }
  } else if (v == V_BELOW) {
    if (m->state == RESIL_BREAKER_HALF_OPEN)
      m_enter(m, RESIL_BREAKER_CLOSED, now,
              RESIL_BREAKER_CAUSE_BELOW_THRESHOLDS);
    else
      m->exceeded = 0;
  }
}

static void m_release(model *m, int64_t now, uint64_t gen) {
  m_call(m);
  m_settle(m, now);
  if (gen == m->gen)
    m_hand_back(m);
  else
    cov.stale_releases++;
}

static int refused(int from, int to) {
  return (from == RESIL_BREAKER_CLOSED && to == RESIL_BREAKER_HALF_OPEN) ||
         (from == RESIL_BREAKER_METRICS_ONLY &&
          (to == RESIL_BREAKER_OPEN || to == RESIL_BREAKER_HALF_OPEN));
}

/* wait > 0: resil_breaker_open_for. */
static resil_status m_manual(model *m, int64_t now, int to, int64_t wait) {
  m_call(m);
  m_settle(m, now);
  if (refused(m->state, to)) {
    cov.refused++;
    return RESIL_ESTATE;
  }
  if (wait > 0)
    cov.open_for++;
  uint32_t opens = m->opens;
  int64_t series = m->series;
  if (m->state == to) {
    cov.same_state++;
    m_restart(m, to, now); /* X->X: no event, not a transition */
  } else
    m_enter(m, to, now, RESIL_BREAKER_CAUSE_MANUAL);
  if (wait > 0) {
    /* DESIGN §2.2: open_for leaves the consecutive OPEN count as it is. */
    m->opens = opens;
    m->series = series;
    m->wait = wait;
  }
  return RESIL_OK;
}

static void m_reset(model *m, int64_t now) {
  m_call(m);
  m_settle(m, now);
  int from = m->state;
  if (from != RESIL_BREAKER_CLOSED)
    m_enter(m, RESIL_BREAKER_CLOSED, now, RESIL_BREAKER_CAUSE_RESET);
  else
    m_restart(m, RESIL_BREAKER_CLOSED, now);
  m_emit(m, RESIL_BREAKER_EVENT_RESET, from, RESIL_BREAKER_CLOSED,
         RESIL_BREAKER_CAUSE_RESET, now);
}

static void m_new(model *m, const resil_breaker_config *c, int64_t now) {
  memset(m, 0, sizeof *m);
  m->c = *c;
  m->state = RESIL_BREAKER_CLOSED;
  m->gen = 0;
  m_restart(m, c->initial_state, now); /* generation 1, no event */
  if (c->initial_state == RESIL_BREAKER_HALF_OPEN) {
    m->opens = 1; /* DESIGN §2.2: Resilience4j's HalfOpenState(1) */
    m->series = c->open_wait_ns;
  }
}

/* ---- the breaker under test, with a listener ------------------------------ */

typedef struct elog {
  resil_breaker_event *ev;
  size_t n, cap;
} elog;

static void listener(void *user, resil_breaker *br,
                     const resil_breaker_event *ev) {
  (void)br;
  elog *l = user;
  if (l->n == l->cap) {
    l->cap = l->cap ? 2 * l->cap : 64;
    l->ev = realloc(l->ev, l->cap * sizeof *l->ev);
    assert_non_null(l->ev);
  }
  l->ev[l->n++] = *ev;
}

/* ---- one run ---------------------------------------------------------------- */

typedef struct run {
  uint64_t seed;
  int config;
  int step;
  const char *op;
  char what[320];
} run;

static void describe_config(const resil_breaker_config *c) {
  fprintf(stderr,
          "  config: window %s size %u min %u fail %u%% slow %u%% slow_ns "
          "%" PRId64 " open_wait %" PRId64 " x%g max %" PRId64
          " half permitted %u max_wait %" PRId64 " auto %d to_closed %d "
          "failure 0x%x ignored 0x%x events %u initial %s\n",
          c->window_type == RESIL_BREAKER_WINDOW_TIME ? "TIME" : "COUNT",
          c->window_size, c->minimum_calls, c->failure_rate_threshold_pct,
          c->slow_call_rate_threshold_pct, c->slow_call_duration_ns,
          c->open_wait_ns, c->open_wait_multiplier, c->open_wait_max_ns,
          c->half_open_permitted_calls, c->half_open_max_wait_ns,
          c->automatic_half_open, c->half_open_max_wait_to_closed,
          c->failure_classes, c->ignored_classes, c->event_capacity,
          resil_breaker_state_name(c->initial_state));
}

#define EXPECT(cond, ...)                                                      \
  do {                                                                         \
    if (!(cond)) {                                                             \
      snprintf(r->what, sizeof r->what, __VA_ARGS__);                          \
      return 0;                                                                \
    }                                                                          \
  } while (0)

#define EQ(field, a, b)                                                        \
  EXPECT((int64_t)(a) == (int64_t)(b),                                         \
         "%s: breaker %" PRId64 ", model %" PRId64, field, (int64_t)(a),       \
         (int64_t)(b))

static int same_event(run *r, const resil_breaker_event *e, const mevent *w,
                      const char *where) {
  EXPECT(e->seq == w->seq && e->time_ns == w->time_ns &&
             (int)e->kind == w->kind && (int)e->from == w->from &&
             (int)e->to == w->to && (int)e->cause == w->cause &&
             e->struct_size == sizeof *e,
         "%s event: breaker #%" PRIu64 " %s %s->%s %s at %" PRId64
         ", model #%" PRIu64 " %s %s->%s %s at %" PRId64,
         where, e->seq, resil_breaker_event_kind_name(e->kind),
         resil_breaker_state_name(e->from), resil_breaker_state_name(e->to),
         resil_breaker_cause_name(e->cause), e->time_ns, w->seq,
         resil_breaker_event_kind_name((resil_breaker_event_kind)w->kind),
         resil_breaker_state_name((resil_breaker_state_kind)w->from),
         resil_breaker_state_name((resil_breaker_state_kind)w->to),
         resil_breaker_cause_name((resil_breaker_cause)w->cause), w->time_ns);
  return 1;
}

/* Events delivered since the last comparison must be the model's. */
static int compare_events(run *r, model *m, elog *l) {
  EQ("events delivered", l->n, m->nfresh);
  cov.events += l->n;
  for (size_t i = 0; i < l->n; i++)
    if (!same_event(r, &l->ev[i], &m->fresh[i], "delivered"))
      return 0;
  l->n = 0;
  m->nfresh = 0;
  return 1;
}

static int compare(run *r, model *m, resil_breaker *br, elog *l,
                   int64_t now) {
  resil_breaker_metrics x;
  cov.compares++;
  m_call(m);
  m_settle(m, now); /* get_metrics applies overdue changes too */
  EQ("get_metrics", resil_breaker_get_metrics(br, &x), RESIL_OK);
  if (!compare_events(r, m, l))
    return 0;
  mwin w = m_window(m, now);
  EQ("state", x.state, m->state);
  EQ("generation", x.generation, m->gen);
  EQ("state_since_ns", x.state_since_ns, m->since);
  EQ("consecutive_opens", x.consecutive_opens, m->opens);
  EQ("open_wait_ns", x.open_wait_ns, m->wait);
  EQ("half_open_permits_available", x.half_open_permits_available,
     m->state == RESIL_BREAKER_HALF_OPEN ? m->half_left : 0);
  EQ("buffered_calls", x.buffered_calls, w.calls);
  EQ("failed_calls", x.failed_calls, w.failed);
  EQ("slow_calls", x.slow_calls, w.slow);
  EQ("successful_calls", x.successful_calls, w.calls - w.failed);
  EQ("slow_failed_calls", x.slow_failed_calls, w.slow_failed);
  EQ("slow_successful_calls", x.slow_successful_calls, w.slow - w.slow_failed);
  EQ("minimum_calls", x.minimum_calls, w.min);
  int enough = w.calls > 0 && w.calls >= w.min;
  EQ("rates", x.rates,
     enough ? RESIL_BREAKER_RATES_AVAILABLE
            : RESIL_BREAKER_RATES_NOT_ENOUGH_DATA);
  double fr = enough ? (double)w.failed * 100.0 / (double)w.calls : 0.0;
  double sr = enough ? (double)w.slow * 100.0 / (double)w.calls : 0.0;
  EXPECT(x.failure_rate_pct == fr && x.slow_call_rate_pct == sr,
         "rates: breaker %g/%g, model %g/%g", x.failure_rate_pct,
         x.slow_call_rate_pct, fr, sr);
  EQ("total_calls", x.total_calls, m->calls);
  EQ("total_successes", x.total_successes, m->calls - m->failures);
  EQ("total_failures", x.total_failures, m->failures);
  EQ("total_slow", x.total_slow, m->slow);
  EQ("total_slow_failed", x.total_slow_failed, m->slow_failed);
  EQ("total_slow_successful", x.total_slow_successful,
     m->slow - m->slow_failed);
  EQ("total_ignored", x.total_ignored, m->ignored);
  EQ("total_not_permitted", x.total_not_permitted, m->not_permitted);
  EQ("total_transitions", x.total_transitions, m->transitions);
  /* The ring: the most recent events, oldest first. */
  resil_breaker_event ring[16];
  size_t n = resil_breaker_events(br, ring, 16);
  uint64_t held = m->seq < m->c.event_capacity ? m->seq : m->c.event_capacity;
  if (held > 16)
    held = 16;
  EQ("events in the ring", n, held);
  for (size_t i = 0; i < n; i++) {
    uint64_t seq = m->seq - n + 1 + i;
    if (!same_event(r, &ring[i], &m->ring[(seq - 1) % m->c.event_capacity],
                    "ring"))
      return 0;
  }
  return 1;
}

static resil_outcome outcome_of(resil_outcome_class c) {
  switch (c) {
  case RESIL_CLASS_NOT_SENT:
    return resil_outcome_make(RESIL_NOT_SENT, RESIL_REASON_CONNECT_TIMEOUT);
  case RESIL_CLASS_UNKNOWN:
    return resil_outcome_make(RESIL_UNKNOWN, RESIL_REASON_CONNECTION_RESET);
  case RESIL_CLASS_SUCCESS:
    return chance(50) ? resil_outcome_ok() : resil_outcome_http(204);
  case RESIL_CLASS_REDIRECT:
    return resil_outcome_http(301);
  case RESIL_CLASS_CLIENT_ERROR:
    return resil_outcome_http(409);
  case RESIL_CLASS_HTTP_408:
    return resil_outcome_http(408);
  case RESIL_CLASS_HTTP_425:
    return resil_outcome_http(425);
  case RESIL_CLASS_HTTP_429:
    return resil_outcome_http(429);
  case RESIL_CLASS_SERVER_ERROR:
    return chance(50) ? resil_outcome_http(503) : resil_outcome_failure();
  default:
    return resil_outcome_make(RESIL_REJECTED, RESIL_REASON_RATE_LIMITED);
  }
}

static const resil_outcome_class classifiable[] = {
    RESIL_CLASS_NOT_SENT,     RESIL_CLASS_UNKNOWN,      RESIL_CLASS_SUCCESS,
    RESIL_CLASS_REDIRECT,     RESIL_CLASS_CLIENT_ERROR, RESIL_CLASS_HTTP_408,
    RESIL_CLASS_HTTP_425,     RESIL_CLASS_HTTP_429,     RESIL_CLASS_SERVER_ERROR};

/* A result to record: a class (sometimes REJECTED) and a duration at the
 * slow-call threshold s -1/0/+1, 0, 2 s or anything up to s + 1. */
static void pick_result(int64_t s, resil_outcome_class *cls, int64_t *dur) {
  *cls = chance(8) ? RESIL_CLASS_REJECTED : PICK(classifiable);
  int64_t durations[] = {0, s - 1, s, s + 1, 2 * s, below64(s + 2)};
  *dur = PICK(durations);
  if (*dur < 0)
    *dur = 0;
}

static void random_config(resil_breaker_config *c) {
  static const int64_t slow[] = {1, NS_PER_MS, 50 * NS_PER_MS, NS_PER_S,
                                 60 * NS_PER_S};
  static const int64_t wait[] = {NS_PER_MS,       7 * NS_PER_MS,
                                 100 * NS_PER_MS, NS_PER_S,
                                 60 * NS_PER_S,   NS_PER_MS + 1,
                                 1500 * NS_PER_MS + 3};
  static const double mult[] = {1.0, 1.0, 1.5, 2.0, 3.7, 100.0};
  static const int64_t half_max[] = {0,       1,        NS_PER_MS,
                                     5 * NS_PER_MS, NS_PER_S, 60 * NS_PER_S};
  static const uint32_t pct[] = {1, 20, 50, 51, 99, 100};
  resil_breaker_config_init(c);
  if (chance(30)) {
    c->window_type = RESIL_BREAKER_WINDOW_TIME;
    c->window_size = 1 + below(5);
    c->minimum_calls = 1 + below(8);
  } else {
    c->window_size = 1 + below(12);
    c->minimum_calls = 1 + below(c->window_size);
  }
  c->failure_rate_threshold_pct = chance(50) ? PICK(pct) : 1 + below(100);
  c->slow_call_rate_threshold_pct = chance(50) ? PICK(pct) : 1 + below(100);
  c->slow_call_duration_ns = PICK(slow);
  c->open_wait_ns = PICK(wait);
  c->open_wait_multiplier = PICK(mult);
  switch (below(4)) {
  case 0:
    c->open_wait_max_ns = 0;
    break;
  case 1:
    c->open_wait_max_ns = c->open_wait_ns;
    break;
  case 2:
    c->open_wait_max_ns = c->open_wait_ns * 10 + 7;
    break;
  default:
    c->open_wait_max_ns = 3600 * NS_PER_S;
    if (c->open_wait_max_ns < c->open_wait_ns)
      c->open_wait_max_ns = 0;
  }
  c->half_open_permitted_calls = 1 + below(5);
  c->half_open_max_wait_ns = PICK(half_max);
  c->automatic_half_open = chance(50);
  c->half_open_max_wait_to_closed = chance(25);
  c->failure_classes = 0;
  c->ignored_classes = 0;
  int ignore = chance(60);
  for (size_t i = 0; i < 9; i++) {
    uint32_t bit = RESIL_CLASS_BIT(classifiable[i]);
    unsigned roll = below(100);
    if (roll < 45)
      c->failure_classes |= bit;
    else if (ignore && roll < 65)
      c->ignored_classes |= bit;
  }
  if (chance(20)) {
    c->failure_classes = RESIL_BREAKER_DEFAULT_FAILURE_CLASSES;
    c->ignored_classes = 0;
  }
  c->event_capacity = below(17);
  c->initial_state = chance(60) ? RESIL_BREAKER_CLOSED
                                : (resil_breaker_state_kind)below(6);
}

/* How far to move the clock: 0, 1 ns, the end of the current wait (-1 =
 * the caller lands at it -1/+0/+1 ns), the slow threshold, seconds, and
 * long jumps up to two days. */
static int64_t random_jump(const model *m) {
  int waiting =
      m->state == RESIL_BREAKER_OPEN ||
      (m->state == RESIL_BREAKER_HALF_OPEN && m->c.half_open_max_wait_ns > 0);
  switch (below(12)) {
  case 0:
    return 0;
  case 1:
    return 1;
  case 2:
  case 3:
  case 4:
    return waiting ? -1 : NS_PER_MS;
  case 5:
    return below64(2 * NS_PER_S);
  case 6:
    return below64(120 * NS_PER_S);
  case 7:
    return NS_PER_S;
  case 8:
    return 3600 * NS_PER_S;
  case 9:
    return chance(50) ? 2 * DAY : below64(2 * DAY);
  case 10:
    return m->c.slow_call_duration_ns;
  default:
    return below64(20 * NS_PER_MS);
  }
}

/* The function resil_breaker_run calls: it takes `dur` on the clock and
 * answers `o`. */
typedef struct run_call {
  resil_manual_clock *mc;
  const resil_clock *clock; /* the breaker's, which ctx must carry */
  int64_t dur;
  resil_outcome o;
  int calls;
  int wrong_ctx;
} run_call;

static resil_outcome run_fn(void *arg, const resil_ctx *ctx) {
  run_call *rc = arg;
  rc->calls++;
  if (!ctx || ctx->clock != rc->clock)
    rc->wrong_ctx = 1;
  resil_manual_clock_advance_ns(rc->mc, rc->dur);
  return rc->o;
}

static int run_one(run *r, const resil_breaker_config *cfg) {
  resil_manual_clock *mc = NULL;
  int64_t start = chance(50) ? 0 : below64(100 * NS_PER_S);
  assert_status(RESIL_OK, resil_manual_clock_new(start, 1700000000000, &mc));
  resil_breaker_config c = *cfg;
  c.clock = resil_manual_clock_get(mc);
  /* Half the runs read the same manual time through coarse_ns too, with a
   * stated resolution that decides which readings the breaker takes as
   * coarse (run-form durations, time-window buckets) and which precise:
   * every reading gives the same time, so the figures are the model's
   * whatever it says. */
  static const int64_t coarse_res[] = {0, NS_PER_MS, 20 * NS_PER_MS,
                                       2 * NS_PER_S};
  resil_clock coarse_clock = *resil_manual_clock_get(mc);
  if (chance(50)) {
    coarse_clock.coarse_ns = coarse_clock.now_ns;
    coarse_clock.coarse_resolution_ns = PICK(coarse_res);
    c.clock = &coarse_clock;
    cov.coarse_clocks++;
  }
  resil_breaker *br = NULL;
  resil_error err;
  if (resil_breaker_new(&c, &br, &err) != RESIL_OK) {
    snprintf(r->what, sizeof r->what, "resil_breaker_new: %.200s", err.msg);
    resil_manual_clock_free(mc);
    return 0;
  }
  elog l = {NULL, 0, 0};
  assert_status(RESIL_OK, resil_breaker_listener_add(br, listener, &l));
  model *m = calloc(1, sizeof *m);
  assert_non_null(m);
  m_new(m, &c, start);
  mpermit permits[MAX_PERMITS];
  size_t np = 0;
  int ok = 1;
  int64_t now = start;
  int compare_next = 1;
  if (!compare(r, m, br, &l, now))
    ok = 0;
  for (r->step = 0; ok && r->step < STEPS; r->step++) {
    unsigned op = below(100);
    compare_next = 1;
    cov.ops++;
    if (op < 22 && chance(30)) {
      r->op = "run";
      resil_outcome_class cls;
      int64_t dur;
      pick_result(m->c.slow_call_duration_ns, &cls, &dur);
      run_call rc = {mc, c.clock, dur, outcome_of(cls), 0, 0};
      uint64_t gen;
      int want = m_acquire(m, now, &gen);
      resil_outcome got = resil_breaker_run(br, NULL, run_fn, &rc);
      cov.runs++;
      if (want) {
        now += dur;
        m_record(m, now, gen, cls, dur);
      } else {
        cov.runs_refused++;
      }
      resil_outcome o = want ? rc.o
                             : resil_outcome_make(RESIL_REJECTED,
                                                  RESIL_REASON_BREAKER_OPEN);
      if (rc.calls != want || rc.wrong_ctx || got.kind != o.kind ||
          got.reason != o.reason || got.http_status != o.http_status ||
          got.retry_after_ms != o.retry_after_ms || got.flags != o.flags ||
          got.stop != o.stop || got.attempts != o.attempts) {
        snprintf(r->what, sizeof r->what,
                 "run: fn called %d time(s)%s, outcome %s/%s/%d, model %s "
                 "%s/%s/%d",
                 rc.calls, rc.wrong_ctx ? " with a wrong ctx" : "",
                 resil_outcome_kind_name(got.kind),
                 resil_reason_name(got.reason), got.http_status,
                 want ? "permits" : "refuses", resil_outcome_kind_name(o.kind),
                 resil_reason_name(o.reason), o.http_status);
        ok = 0;
        break;
      }
    } else if (op < 22) {
      r->op = "acquire";
      if (np == MAX_PERMITS)
        continue;
      uint64_t gen;
      int want = m_acquire(m, now, &gen);
      resil_breaker_permit p;
      resil_decision d = resil_breaker_try_acquire(br, &p);
      if ((int)d != (want ? RESIL_DECISION_GO : RESIL_DECISION_DENY)) {
        snprintf(r->what, sizeof r->what, "acquire: breaker %d, model %d",
                 (int)d, want);
        ok = 0;
        break;
      }
      if (want) {
        if (p.generation != gen) {
          snprintf(r->what, sizeof r->what,
                   "permit generation: breaker %" PRIu64 ", model %" PRIu64,
                   p.generation, gen);
          ok = 0;
          break;
        }
        permits[np].gen = gen;
        permits[np].p = p;
        np++;
      }
    } else if (op < 46) {
      r->op = "record";
      if (np == 0)
        continue;
      size_t i = below((uint32_t)np);
      resil_outcome_class cls;
      int64_t dur;
      pick_result(m->c.slow_call_duration_ns, &cls, &dur);
      resil_outcome o = outcome_of(cls);
      m_record(m, now, permits[i].gen, cls, dur);
      if (resil_breaker_record(br, &permits[i].p, &o, dur) != RESIL_OK) {
        snprintf(r->what, sizeof r->what, "record failed");
        ok = 0;
        break;
      }
      permits[i] = permits[--np];
    } else if (op < 52) {
      r->op = "release";
      if (np == 0)
        continue;
      size_t i = below((uint32_t)np);
      m_release(m, now, permits[i].gen);
      if (resil_breaker_release(br, &permits[i].p) != RESIL_OK) {
        snprintf(r->what, sizeof r->what, "release failed");
        ok = 0;
        break;
      }
      permits[i] = permits[--np];
    } else if (op < 62) {
      r->op = "transition";
      /* X->X often, refused pairs too. */
      int to = chance(35) ? m->state : (int)below(6);
      resil_status want = m_manual(m, now, to, 0);
      resil_status got =
          resil_breaker_transition(br, (resil_breaker_state_kind)to);
      if (got != want) {
        snprintf(r->what, sizeof r->what, "transition to %s: breaker %s, model %s",
                 resil_breaker_state_name((resil_breaker_state_kind)to),
                 resil_status_name(got), resil_status_name(want));
        ok = 0;
        break;
      }
    } else if (op < 65) {
      r->op = "open_for";
      static const int64_t waits[] = {1, NS_PER_MS, 3 * NS_PER_S, 2 * DAY};
      int64_t w = chance(50) ? PICK(waits) : 1 + below64(10 * NS_PER_S);
      resil_status want = m_manual(m, now, RESIL_BREAKER_OPEN, w);
      resil_status got = resil_breaker_open_for(br, w);
      if (got != want) {
        snprintf(r->what, sizeof r->what, "open_for: breaker %s, model %s",
                 resil_status_name(got), resil_status_name(want));
        ok = 0;
        break;
      }
    } else if (op < 68) {
      r->op = "reset";
      m_reset(m, now);
      assert_status(RESIL_OK, resil_breaker_reset(br));
    } else if (op < 93) {
      r->op = "advance";
      int64_t d = random_jump(m);
      if (d < 0) {
        /* Land at the end of the current wait, -1, 0 or +1. */
        int64_t due = m->state == RESIL_BREAKER_OPEN ? m->wait
                                                     : m->c.half_open_max_wait_ns;
        int64_t left = due - (now - m->since); /* no overflow: both >= 0 */
        d = left > 2 * DAY ? 2 * DAY : left + (int64_t)below(3) - 1;
        if (d < 0)
          d = 0;
      }
      now += d;
      resil_manual_clock_advance_ns(mc, d);
      /* Let the next operation apply what fell due, not the comparison. */
      compare_next = chance(30);
    } else {
      r->op = "state";
      m_call(m);
      m_settle(m, now);
      resil_breaker_state_kind st = resil_breaker_state(br);
      if ((int)st != m->state) {
        snprintf(r->what, sizeof r->what, "state: breaker %s, model %s",
                 resil_breaker_state_name(st),
                 resil_breaker_state_name((resil_breaker_state_kind)m->state));
        ok = 0;
        break;
      }
    }
    if (!compare_events(r, m, &l)) {
      ok = 0;
      break;
    }
    if (compare_next && !compare(r, m, br, &l, now)) {
      ok = 0;
      break;
    }
  }
  resil_breaker_free(br);
  resil_manual_clock_free(mc);
  free(l.ev);
  free(m->fresh);
  free(m);
  return ok;
}

static uint64_t seed_from_env(void) {
  const char *s = getenv("RESIL_MODEL_SEED");
  if (!s || !*s)
    return DEFAULT_SEED;
  return strtoull(s, NULL, 0);
}

static void breaker_matches_the_reference_model(void **state) {
  (void)state;
  uint64_t seed = seed_from_env();
  for (int i = 0; i < CONFIGS; i++) {
    rng_s = seed ^ ((uint64_t)i * UINT64_C(0x2545f4914f6cdd1d));
    resil_breaker_config cfg;
    random_config(&cfg);
    if (cfg.window_type == RESIL_BREAKER_WINDOW_TIME)
      cov.time_windows++;
    run r;
    memset(&r, 0, sizeof r);
    r.seed = seed;
    r.config = i;
    if (!run_one(&r, &cfg)) {
      fprintf(stderr,
              "breaker differs from the model: RESIL_MODEL_SEED=0x%016" PRIx64
              " configuration %d, step %d (%s): %s\n",
              seed, i, r.step, r.op ? r.op : "new", r.what);
      describe_config(&cfg);
      fail_msg("seed 0x%016" PRIx64 " configuration %d step %d: %s", seed, i,
               r.step, r.what);
    }
  }
  printf("model: seed 0x%016" PRIx64 ", %d configurations (%lu time "
         "windows), %lu operations, %lu comparisons, %lu events, %lu "
         "transitions (%lu idle automatic cycles, %lu calls at the catch-up "
         "bound, %lu HALF_OPEN->CLOSED by the maximum wait), %lu X->X, %lu "
         "refused, %lu open_for, %lu stale records, %lu stale releases, %lu "
         "ignored, %lu rejected, %lu at the slow threshold, %lu runs (%lu "
         "refused), %lu coarse clocks\n",
         seed, CONFIGS, cov.time_windows, cov.ops, cov.compares, cov.events,
         cov.transitions, cov.idle_cycles, cov.capped, cov.half_to_closed,
         cov.same_state, cov.refused, cov.open_for, cov.stale_records,
         cov.stale_releases, cov.ignored, cov.rejected, cov.slow_edges,
         cov.runs, cov.runs_refused, cov.coarse_clocks);
  assert_true(cov.time_windows >= 10);
  assert_true(cov.same_state >= 100 && cov.refused >= 50);
  assert_true(cov.stale_records >= 100 && cov.stale_releases >= 20);
  assert_true(cov.ignored >= 50 && cov.rejected >= 50);
  assert_true(cov.idle_cycles >= 1000 && cov.capped >= 5);
  assert_true(cov.half_to_closed >= 5 && cov.open_for >= 50);
  assert_true(cov.slow_edges >= 200);
  assert_true(cov.runs >= 2000 && cov.runs_refused >= 200);
  assert_true(cov.coarse_clocks >= 100);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(breaker_matches_the_reference_model),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
