/* The instances of an upstream (instances.h, DESIGN §8.4): choosing one
 * for an attempt, outlier ejection, and a resolved name's addresses.
 *
 * What an attempt reads without a lock: the published count n, each
 * instance's state, probe flag and attempts in flight, and, only while an
 * instance is out (g->out > 0), the clock. State changes (ejected, probing,
 * back, gone) are made under g->mu; a success with nothing to undo (no
 * failure in a row, no multiplier) takes no lock, so a healthy upstream's
 * attempts share only the instance's in-flight counter and the group's
 * draw counter. */
#define _GNU_SOURCE
#include "instances.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

int resil__http_group_init(http_group *g) {
  atomic_init(&g->n, 0);
  atomic_init(&g->out, 0);
  atomic_init(&g->live, 0);
  /* A random start: two clients (two processes) do not make the same first
   * choice nor draw the same jitter. */
  uint64_t seed = 0;
  if (getrandom(&seed, sizeof seed, GRND_NONBLOCK) != (ssize_t)sizeof seed)
    seed = (uint64_t)resil__http_mono_ns() ^ ((uint64_t)getpid() << 32);
  atomic_init(&g->seq, seed);
  atomic_init(&g->resolutions, 0);
  atomic_init(&g->resolve_failures, 0);
  atomic_init(&g->first_done, 0);
  pthread_condattr_t ca;
  if (pthread_condattr_init(&ca) != 0) return -1;
  int ok = pthread_condattr_setclock(&ca, CLOCK_MONOTONIC) == 0 &&
           pthread_cond_init(&g->first_cv, &ca) == 0;
  pthread_condattr_destroy(&ca);
  if (!ok) return -1;
  if (pthread_mutex_init(&g->mu, NULL) != 0) {
    pthread_cond_destroy(&g->first_cv);
    return -1;
  }
  return 0;
}

void resil__http_group_free(const resil_allocator *a, http_group *g) {
  unsigned n = atomic_load(&g->n);
  for (unsigned k = 0; k < n; k++) {
    http_inst *i = g->inst[k];
    if (!i) continue;
    resil__free(a, i->base);
    resil__free(a, i->label);
    if (i->connect_to) curl_slist_free_all(i->connect_to);
    resil__free(a, i);
  }
  resil__free(a, g->name);
  resil__free(a, g->host);
  resil__free(a, g->port);
  resil__free(a, g->ct_host);
  resil__free(a, g->base);
  pthread_cond_destroy(&g->first_cv);
  pthread_mutex_destroy(&g->mu);
}

static char *dup_str(const resil_allocator *a, const char *s, size_t n) {
  char *d = resil__alloc(a, n + 1);
  if (d) {
    memcpy(d, s, n);
    d[n] = '\0';
  }
  return d;
}

http_inst *resil__http_group_add(const resil_allocator *a, http_group *g, const char *base,
                                 size_t base_len, const char *label, const char *connect_to,
                                 uint32_t origin) {
  unsigned n = atomic_load_explicit(&g->n, memory_order_relaxed);
  if (n >= HTTP_MAX_INSTANCES) return NULL;
  http_inst *i = resil__calloc(a, sizeof *i);
  if (!i) return NULL;
  i->base = dup_str(a, base, base_len);
  i->base_len = base_len;
  i->label = dup_str(a, label, strlen(label));
  if (connect_to) i->connect_to = curl_slist_append(NULL, connect_to);
  if (!i->base || !i->label || (connect_to && !i->connect_to)) {
    resil__free(a, i->base);
    resil__free(a, i->label);
    if (i->connect_to) curl_slist_free_all(i->connect_to);
    resil__free(a, i);
    return NULL;
  }
  i->origin = origin;
  i->index = atomic_load_explicit(g->nall, memory_order_relaxed);
  i->bit = n;
  i->g = g;
  atomic_init(&i->state, RESIL_HTTP_INSTANCE_HEALTHY);
  atomic_init(&i->probe_busy, 0);
  atomic_init(&i->in_flight, 0);
  atomic_init(&i->consecutive, 0);
  atomic_init(&i->mult, 0);
  atomic_init(&i->out_until, 0);
  atomic_init(&i->healthy_since, 0);
  atomic_init(&i->ramp_start, 0);
  atomic_init(&i->ramp_acc, RESIL__RAMP_ONE / 2u);
  atomic_init(&i->ejections, 0);
  atomic_init(&i->skipped, 0);
  atomic_init(&i->chosen, 0);
  for (int k = 0; k < 5; k++) atomic_init(&i->outcomes[k], 0);
  g->inst[n] = i;
  g->all[i->index] = i;
  atomic_fetch_add_explicit(&g->live, 1, memory_order_relaxed);
  /* Published: a reader of a new count sees the instance. */
  atomic_store_explicit(&g->n, n + 1, memory_order_release);
  atomic_store_explicit(g->nall, i->index + 1, memory_order_release);
  return i;
}

/* ---- events ------------------------------------------------------------------- */

/* Tells g's listener (no lock held) that `kind` happened to i at `when`
 * (monotonic ns). */
static void tell(const http_inst *i, resil_http_instance_event_kind kind, int64_t dur,
                 uint32_t consecutive, int64_t when) {
  const http_group *g = i->g;
  if (!g->listener) return;
  resil_http_instance_event ev;
  memset(&ev, 0, sizeof ev);
  ev.struct_size = sizeof ev;
  ev.kind = kind;
  ev.client = g->client_name;
  ev.upstream = g->name;
  /* A resolved name's instance: the name's base URL and the address. */
  const char *at = g->resolve ? strrchr(i->label, '@') : NULL;
  if (at) {
    ev.instance = g->base;
    ev.address = at + 1;
  } else {
    ev.instance = i->label;
  }
  ev.index = i->index;
  ev.ejections = atomic_load_explicit(&i->ejections, memory_order_relaxed);
  ev.duration_ns = dur;
  ev.consecutive = consecutive;
  ev.time_ns = when;
  g->listener(g->listener_user, &ev);
}

/* ---- choice ------------------------------------------------------------------- */

/* splitmix64: a draw from the group's counter (no shared generator
 * state beyond the counter every draw advances anyway). */
static uint64_t draw(http_group *g) {
  uint64_t z = atomic_fetch_add_explicit(&g->seq, UINT64_C(0x9E3779B97F4A7C15),
                                         memory_order_relaxed);
  z += UINT64_C(0x9E3779B97F4A7C15);
  z = (z ^ (z >> 30)) * UINT64_C(0xBF58476D1CE4E5B9);
  z = (z ^ (z >> 27)) * UINT64_C(0x94D049BB133111EB);
  return z ^ (z >> 31);
}

/* Instances out whose time is up become PROBING (their next attempt
 * probes them). Runs only while some instance is out. */
static void wake_returns(http_group *g, unsigned n) {
  int64_t now = resil__http_mono_ns();
  for (unsigned k = 0; k < n; k++) {
    http_inst *i = g->inst[k];
    if (atomic_load_explicit(&i->state, memory_order_acquire) != RESIL_HTTP_INSTANCE_OUT ||
        atomic_load_explicit(&i->out_until, memory_order_relaxed) > now)
      continue;
    pthread_mutex_lock(&g->mu);
    if (atomic_load_explicit(&i->state, memory_order_relaxed) == RESIL_HTTP_INSTANCE_OUT) {
      atomic_store_explicit(&i->probe_busy, 0, memory_order_relaxed);
      atomic_store_explicit(&i->state, RESIL_HTTP_INSTANCE_PROBING, memory_order_release);
    }
    pthread_mutex_unlock(&g->mu);
  }
}

/* A ramping instance's part in this choice (core/ramp.h): 1 when it takes
 * part, 0 not. Once the time is up its ramp ends (ramp_start 0): the one
 * thread whose compare-and-swap ends it gets the ramp's end in *ended (to
 * tell RAMP_ENDED once the choice is made); an ejection that ended it
 * first (eject) leaves the swap failing. */
static int ramp_part(http_inst *i, int64_t *ended) {
  int64_t start = atomic_load_explicit(&i->ramp_start, memory_order_relaxed);
  if (!start) return 1;
  const resil__ramp_curve *c = &i->g->ramp;
  int64_t el = resil__http_mono_ns() - start;
  if (el >= c->ns) {
    if (atomic_compare_exchange_strong(&i->ramp_start, &start, 0))
      *ended = resil__sat_add(start, c->ns);
    return 1;
  }
  return resil__ramp_take(&i->ramp_acc, resil__ramp_inc(c, el));
}

double resil__http_inst_share(const http_inst *i) {
  int64_t start = atomic_load_explicit(&i->ramp_start, memory_order_relaxed);
  if (!start) return 1.0;
  return (double)resil__ramp_inc(&i->g->ramp, resil__http_mono_ns() - start) /
         (double)RESIL__RAMP_ONE;
}

/* May an attempt go to i now? A PROBING instance takes one attempt at a
 * time (claimed when chosen); a ramping one its share of the choices
 * (*ended as ramp_part says). */
static int usable(http_inst *i, int64_t *ended) {
  int st = atomic_load_explicit(&i->state, memory_order_acquire);
  if (st == RESIL_HTTP_INSTANCE_HEALTHY) return ramp_part(i, ended);
  return st == RESIL_HTTP_INSTANCE_PROBING &&
         !atomic_load_explicit(&i->probe_busy, memory_order_relaxed);
}

/* usable() without the ramp's decision: when the ramps declined every
 * live instance, one of them still takes the call (never an ejected one). */
static int live_now(http_inst *i) {
  int st = atomic_load_explicit(&i->state, memory_order_acquire);
  return st == RESIL_HTTP_INSTANCE_HEALTHY ||
         (st == RESIL_HTTP_INSTANCE_PROBING &&
          !atomic_load_explicit(&i->probe_busy, memory_order_relaxed));
}

/* Claims i for this attempt: 1 done (*probe set), 0 when another attempt
 * claimed its probe first. */
static int claim(http_inst *i, int *probe) {
  *probe = 0;
  if (atomic_load_explicit(&i->state, memory_order_acquire) != RESIL_HTTP_INSTANCE_PROBING)
    return 1;
  int z = 0;
  if (!atomic_compare_exchange_strong(&i->probe_busy, &z, 1)) return 0;
  *probe = 1;
  return 1;
}

/* P2C: two distinct candidates drawn at random, the one with fewer
 * attempts in flight (ties: the first drawn). */
static http_inst *choose_p2c(http_group *g, const uint32_t *cand, unsigned k) {
  if (k == 1) return g->inst[cand[0]];
  uint64_t r = draw(g);
  unsigned a = (unsigned)(r % k);
  unsigned b = (unsigned)((r >> 32) % (k - 1));
  if (b >= a) b++;
  http_inst *x = g->inst[cand[a]], *y = g->inst[cand[b]];
  return atomic_load_explicit(&y->in_flight, memory_order_relaxed) <
                 atomic_load_explicit(&x->in_flight, memory_order_relaxed)
             ? y
             : x;
}

http_inst *resil__http_inst_pick(http_group *g, atomic_uint_fast64_t *tried, int *probe) {
  *probe = 0;
  unsigned n = atomic_load_explicit(&g->n, memory_order_acquire);
  if (n == 0) return NULL;
  if (atomic_load_explicit(&g->out, memory_order_relaxed)) wake_returns(g, n);
  uint64_t t = atomic_load_explicit(tried, memory_order_relaxed);
  uint32_t cand[HTTP_MAX_INSTANCES];
  /* Ramps this choice ended (bits) and their ends: told at the end. */
  uint64_t ended = 0;
  int64_t ends[HTTP_MAX_INSTANCES];
  http_inst *i = NULL;
  /* Round robin walks the instances in turn from the group's counter; P2C
   * draws two among the candidates. Pass 0: usable and not tried by this
   * call; pass 1: usable; pass 2: live, whatever the ramps decided (they
   * share the choices among live instances; when they decline every one,
   * an ejected instance must not get the call); pass 3 (never with the cap
   * working, but a probe claimed by another attempt or addresses gone can
   * leave nothing): whatever is not gone, then anything. */
  for (int pass = 0; pass < 5 && !i; pass++) {
    unsigned k = 0;
    for (unsigned b = 0; b < n; b++) {
      http_inst *c = g->inst[b];
      int st = atomic_load_explicit(&c->state, memory_order_acquire);
      if (pass == 0 && (t >> b) & 1u) continue;
      int64_t end = 0;
      int ok = pass <= 1   ? usable(c, &end)
               : pass == 2 ? live_now(c)
               : pass == 3 ? st != RESIL_HTTP_INSTANCE_GONE
                           : 1;
      if (end) {
        ended |= UINT64_C(1) << b;
        ends[b] = end;
      }
      if (ok) cand[k++] = b;
    }
    if (!k) continue;
    if (g->balance == RESIL_HTTP_BALANCE_ROUND_ROBIN) {
      /* The next in turn among all instances, skipping non-candidates:
       * the walk's start advances by one per attempt. */
      unsigned start = (unsigned)(atomic_fetch_add_explicit(&g->seq, 1, memory_order_relaxed) % n);
      for (unsigned s = 0; s < n && !i; s++) {
        unsigned b = (start + s) % n;
        for (unsigned q = 0; q < k; q++)
          if (cand[q] == b) {
            http_inst *c = g->inst[b];
            if (pass > 2 || claim(c, probe)) i = c;
            break;
          }
      }
    } else {
      for (int tries = 0; tries < 3 && !i; tries++) {
        http_inst *c = choose_p2c(g, cand, k);
        if (pass > 2 || claim(c, probe)) i = c;
      }
    }
  }
  if (!i) i = g->inst[0];
  atomic_fetch_or_explicit(tried, UINT64_C(1) << i->bit, memory_order_relaxed);
  atomic_fetch_add_explicit(&i->in_flight, 1, memory_order_relaxed);
  atomic_fetch_add_explicit(&i->chosen, 1, memory_order_relaxed);
  /* No lock is held here (wake_returns released g->mu). */
  for (unsigned b = 0; ended; b++, ended >>= 1)
    if (ended & 1u) tell(g->inst[b], RESIL_HTTP_INSTANCE_RAMP_ENDED, g->ramp.ns, 0, ends[b]);
  return i;
}

/* ---- ejection ----------------------------------------------------------------- */

/* 1: o counts as a failure of the instance, 0: a success, -1: neither
 * (the attempt says nothing about the instance). */
static int judge(const http_group *g, const resil_outcome *o) {
  switch (o->kind) {
  case RESIL_REJECTED: return -1;
  case RESIL_NOT_SENT:
    if (o->reason != RESIL_REASON_DNS && o->reason != RESIL_REASON_CONNECT_REFUSED &&
        o->reason != RESIL_REASON_CONNECT_TIMEOUT)
      return -1;
    break;
  case RESIL_UNKNOWN:
    if (o->reason == RESIL_REASON_CANCELLED) return -1;
    break;
  default: break;
  }
  resil_outcome_class c = resil_outcome_classify(o);
  return (g->eject_classes & RESIL_CLASS_BIT(c)) ? 1 : 0;
}

/* Instances that may be out at once: the share, rounded down, and never
 * all of the live ones. */
static unsigned cap_out(const http_group *g) {
  unsigned live = atomic_load_explicit(&g->live, memory_order_relaxed);
  unsigned cap = (unsigned)(((uint64_t)live * g->eject_max_percent) / 100u);
  if (live == 0) return 0;
  if (cap > live - 1) cap = live - 1;
  return cap;
}

static int64_t out_time(const http_group *g, http_inst *i) {
  uint64_t m = atomic_load_explicit(&i->mult, memory_order_relaxed);
  int64_t d = g->eject_max_ns;
  if (m <= (uint64_t)(g->eject_max_ns / g->eject_base_ns))
    d = g->eject_base_ns * (int64_t)m;
  if (d > g->eject_max_ns) d = g->eject_max_ns;
  /* + 0..10 %: clients that ejected an instance together do not all
   * return to it at the same moment. */
  uint64_t r = draw((http_group *)g);
  int64_t j = d / 10 > 0 ? (int64_t)(r % (uint64_t)(d / 10 + 1)) : 0;
  return d + j;
}

/* Takes i out (under g->mu; i counted in g->out by the caller when it was
 * not yet). Returns the duration. A ramp in progress ends: cut short, it
 * is not told ended (EJECTED says it); when its time was up already and
 * no choice noticed it yet, *ramp_end is set to its end (RAMP_ENDED to
 * tell first), else left alone. */
static int64_t eject(http_group *g, http_inst *i, int64_t now, int64_t *ramp_end) {
  atomic_fetch_add_explicit(&i->ejections, 1, memory_order_relaxed);
  atomic_fetch_add_explicit(&i->mult, 1, memory_order_relaxed);
  int64_t d = out_time(g, i);
  atomic_store_explicit(&i->out_until, resil__sat_add(now, d), memory_order_relaxed);
  atomic_store_explicit(&i->consecutive, 0, memory_order_relaxed);
  atomic_store_explicit(&i->probe_busy, 0, memory_order_relaxed);
  /* One swap decides with ramp_part's: whichever ends the ramp first.
   * Judged on the clock after the swap (a choice that ended it before
   * read a clock at or past the end: the same rule). */
  int64_t start = atomic_exchange_explicit(&i->ramp_start, 0, memory_order_relaxed);
  if (start && resil__http_mono_ns() - start >= g->ramp.ns)
    *ramp_end = resil__sat_add(start, g->ramp.ns);
  atomic_store_explicit(&i->state, RESIL_HTTP_INSTANCE_OUT, memory_order_release);
  return d;
}

void resil__http_inst_done(http_inst *i, int probe, const resil_outcome *o) {
  http_group *g = i->g;
  atomic_fetch_sub_explicit(&i->in_flight, 1, memory_order_relaxed);
  unsigned kind = (unsigned)o->kind;
  if (kind < 5) atomic_fetch_add_explicit(&i->outcomes[kind], 1, memory_order_relaxed);
  int v = judge(g, o);
  if (!probe) {
    /* Said nothing about the instance, or ejection is off. */
    if (v < 0 || g->eject_consecutive == 0) return;
    if (v == 0) {
      /* The common case takes no lock. */
      if (atomic_load_explicit(&i->consecutive, memory_order_relaxed))
        atomic_store_explicit(&i->consecutive, 0, memory_order_relaxed);
      if (!atomic_load_explicit(&i->mult, memory_order_relaxed)) return;
      /* A multiplier to lower: only once a base time of health passed. */
      if (resil__http_mono_ns() -
              atomic_load_explicit(&i->healthy_since, memory_order_relaxed) <
          g->eject_base_ns)
        return;
    }
  }
  int64_t now = resil__http_mono_ns();
  int told = 0;
  int64_t dur = 0, ramp_end = 0;
  uint32_t cons = 0;
  pthread_mutex_lock(&g->mu);
  int st = atomic_load_explicit(&i->state, memory_order_relaxed);
  if (probe && st == RESIL_HTTP_INSTANCE_PROBING) {
    if (v < 0) {
      /* Said nothing: the next attempt probes. */
      atomic_store_explicit(&i->probe_busy, 0, memory_order_relaxed);
    } else if (v == 0) {
      atomic_store_explicit(&i->consecutive, 0, memory_order_relaxed);
      atomic_store_explicit(&i->probe_busy, 0, memory_order_relaxed);
      atomic_store_explicit(&i->state, RESIL_HTTP_INSTANCE_HEALTHY, memory_order_release);
      atomic_fetch_sub_explicit(&g->out, 1, memory_order_relaxed);
      atomic_store_explicit(&i->healthy_since, now, memory_order_relaxed);
      if (g->ramp.ns) {
        atomic_store_explicit(&i->ramp_acc, RESIL__RAMP_ONE / 2u, memory_order_relaxed);
        atomic_store_explicit(&i->ramp_start, now > 0 ? now : 1, memory_order_relaxed);
      }
      told = RESIL_HTTP_INSTANCE_RETURNED;
    } else {
      /* Failed again: out again, for longer (it is still counted out). */
      cons = 1;
      dur = eject(g, i, now, &ramp_end);
      told = RESIL_HTTP_INSTANCE_EJECTED;
    }
  } else if (st == RESIL_HTTP_INSTANCE_HEALTHY && v == 0) {
    /* The multiplier decreases by one per eject_base_ns of health. */
    unsigned m = atomic_load_explicit(&i->mult, memory_order_relaxed);
    if (m && now - atomic_load_explicit(&i->healthy_since, memory_order_relaxed) >=
                 g->eject_base_ns) {
      atomic_store_explicit(&i->mult, m - 1, memory_order_relaxed);
      atomic_store_explicit(&i->healthy_since, now, memory_order_relaxed);
    }
  } else if (st == RESIL_HTTP_INSTANCE_HEALTHY && v > 0 && g->eject_consecutive) {
    unsigned c = atomic_fetch_add_explicit(&i->consecutive, 1, memory_order_relaxed) + 1;
    if (c >= g->eject_consecutive) {
      if (atomic_load_explicit(&g->out, memory_order_relaxed) < cap_out(g)) {
        atomic_fetch_add_explicit(&g->out, 1, memory_order_relaxed);
        cons = c;
        dur = eject(g, i, now, &ramp_end);
        told = RESIL_HTTP_INSTANCE_EJECTED;
      } else {
        atomic_fetch_add_explicit(&i->skipped, 1, memory_order_relaxed);
      }
    }
  }
  /* A late result of an attempt chosen before the instance went out (or
   * while another attempt probes it) changes nothing. */
  pthread_mutex_unlock(&g->mu);
  if (ramp_end) tell(i, RESIL_HTTP_INSTANCE_RAMP_ENDED, g->ramp.ns, 0, ramp_end);
  if (told) tell(i, (resil_http_instance_event_kind)told, dur, cons, now);
}

/* ---- a resolved name ------------------------------------------------------------ */

/* The first lookup ended (under g->mu): the calls waiting for it go on. */
static void first_ended(http_group *g) {
  if (atomic_load_explicit(&g->first_done, memory_order_relaxed)) return;
  atomic_store_explicit(&g->first_done, 1, memory_order_release);
  pthread_cond_broadcast(&g->first_cv);
}

int resil__http_group_wait_first(http_group *g, int64_t until_ns) {
  if (resil__http_group_ready(g)) return 1;
  struct timespec ts;
  ts.tv_sec = (time_t)(until_ns / RESIL_NS_PER_S);
  ts.tv_nsec = (long)(until_ns % RESIL_NS_PER_S);
  pthread_mutex_lock(&g->mu);
  while (!atomic_load_explicit(&g->first_done, memory_order_relaxed))
    if (pthread_cond_timedwait(&g->first_cv, &g->mu, &ts) == ETIMEDOUT) break;
  pthread_mutex_unlock(&g->mu);
  return resil__http_group_ready(g);
}

int resil__http_group_resolve(const resil_allocator *a, http_group *g) {
  struct addrinfo hints, *res = NULL;
  memset(&hints, 0, sizeof hints);
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  int rc = getaddrinfo(g->host, g->port, &hints, &res);
  if (rc != 0 || !res) {
    if (res) freeaddrinfo(res);
    atomic_fetch_add_explicit(&g->resolve_failures, 1, memory_order_relaxed);
    pthread_mutex_lock(&g->mu);
    first_ended(g);
    pthread_mutex_unlock(&g->mu);
    return -1;
  }
  /* The addresses of this answer, in its order, without repeats. */
  char addrs[HTTP_MAX_INSTANCES][INET6_ADDRSTRLEN + 2];
  unsigned na = 0;
  for (struct addrinfo *p = res; p && na < HTTP_MAX_INSTANCES; p = p->ai_next) {
    char txt[INET6_ADDRSTRLEN];
    const void *src = NULL;
    if (p->ai_family == AF_INET) src = &((struct sockaddr_in *)(void *)p->ai_addr)->sin_addr;
    else if (p->ai_family == AF_INET6)
      src = &((struct sockaddr_in6 *)(void *)p->ai_addr)->sin6_addr;
    if (!src || !inet_ntop(p->ai_family, src, txt, sizeof txt)) continue;
    char a6[INET6_ADDRSTRLEN + 2];
    if (p->ai_family == AF_INET6) snprintf(a6, sizeof a6, "[%s]", txt);
    else snprintf(a6, sizeof a6, "%s", txt);
    int dup = 0;
    for (unsigned q = 0; q < na; q++)
      if (strcmp(addrs[q], a6) == 0) dup = 1;
    if (!dup) snprintf(addrs[na++], sizeof addrs[0], "%s", a6);
  }
  freeaddrinfo(res);
  atomic_fetch_add_explicit(&g->resolutions, 1, memory_order_relaxed);
  http_inst *added[HTTP_MAX_INSTANCES], *gone[HTTP_MAX_INSTANCES], *back[HTTP_MAX_INSTANCES];
  unsigned nadd = 0, ngone = 0, nback = 0;
  pthread_mutex_lock(&g->mu);
  unsigned n = atomic_load_explicit(&g->n, memory_order_relaxed);
  /* Known instances: gone when absent from the answer, back when present
   * again. The label ends in "@address". */
  for (unsigned k = 0; k < n; k++) {
    http_inst *i = g->inst[k];
    const char *at = strrchr(i->label, '@');
    int present = 0;
    for (unsigned q = 0; at && q < na; q++)
      if (strcmp(at + 1, addrs[q]) == 0) present = 1;
    int st = atomic_load_explicit(&i->state, memory_order_relaxed);
    if (!present && st != RESIL_HTTP_INSTANCE_GONE) {
      if (st == RESIL_HTTP_INSTANCE_OUT || st == RESIL_HTTP_INSTANCE_PROBING)
        atomic_fetch_sub_explicit(&g->out, 1, memory_order_relaxed);
      atomic_store_explicit(&i->state, RESIL_HTTP_INSTANCE_GONE, memory_order_release);
      atomic_fetch_sub_explicit(&g->live, 1, memory_order_relaxed);
      gone[ngone++] = i;
    } else if (present && st == RESIL_HTTP_INSTANCE_GONE) {
      atomic_store_explicit(&i->consecutive, 0, memory_order_relaxed);
      atomic_store_explicit(&i->state, RESIL_HTTP_INSTANCE_HEALTHY, memory_order_release);
      atomic_fetch_add_explicit(&g->live, 1, memory_order_relaxed);
      back[nback++] = i;
    }
  }
  for (unsigned q = 0; q < na; q++) {
    int known = 0;
    for (unsigned k = 0; k < n && !known; k++) {
      const char *at = strrchr(g->inst[k]->label, '@');
      known = at && strcmp(at + 1, addrs[q]) == 0;
    }
    if (known) continue;
    unsigned bit = atomic_load_explicit(&g->n, memory_order_relaxed);
    if (bit >= HTTP_MAX_INSTANCES) break;
    char label[600], ct[400];
    int l1 = snprintf(label, sizeof label, "%.*s@%.*s", (int)g->base_len, g->base,
                      (int)sizeof addrs[0], addrs[q]);
    int l2 = snprintf(ct, sizeof ct, "%s:%s:%.*s:%s", g->ct_host, g->port,
                      (int)sizeof addrs[0], addrs[q], g->port);
    if (l1 < 0 || (size_t)l1 >= sizeof label || l2 < 0 || (size_t)l2 >= sizeof ct) continue;
    http_inst *i = resil__http_group_add(a, g, g->base, g->base_len, label, ct, g->origin0 + bit);
    if (i) added[nadd++] = i;
  }
  int64_t at = g->resolved_at = resil__http_mono_ns();
  first_ended(g);
  pthread_mutex_unlock(&g->mu);
  for (unsigned q = 0; q < nadd; q++) tell(added[q], RESIL_HTTP_INSTANCE_ADDED, 0, 0, at);
  for (unsigned q = 0; q < nback; q++) tell(back[q], RESIL_HTTP_INSTANCE_ADDED, 0, 0, at);
  for (unsigned q = 0; q < ngone; q++) tell(gone[q], RESIL_HTTP_INSTANCE_REMOVED, 0, 0, at);
  return 0;
}
