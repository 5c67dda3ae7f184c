/* Lab experiments F1-F4 (issue 22, "Lab"; DESIGN §8.4): many instances of
 * one upstream. Every instance is an in-process fixture (fixture.h) on
 * 127.0.0.1 with a port of its own; they serve the same URLs, and the bad or
 * slow one is made so for every request by its config (force_status,
 * delay_all_ms). One client names them all (resil_http_client_config.
 * instances) and chooses an instance per attempt.
 *
 * F1: 4 instances, one answers 503 to everything; 1,000 GETs (a 1 ms pause
 *     after each) with a retry of 2 (3 attempts, no wait): a 503 moves to
 *     another instance, so no call fails. After 5 consecutive failures the
 *     bad one is ejected (for 100 ms, then 200 ms: eject_base_ns and
 *     eject_max_ns, plus up to 10 %), and after each ejection time one
 *     attempt probes it (it fails, and it is ejected again). The bad
 *     instance's attempts (its fixture's counter) are read at every one of
 *     its ejections (the instance listener runs on the thread whose attempt
 *     ejected it, after that attempt reached the fixture): before the first
 *     ejection at most 5; in each ejection period (from an ejection to the
 *     next, the last to the end) at most 1, the probe. Wrong variant:
 *     eject_consecutive 0 (no ejection): the bad one keeps its share of
 *     attempts, all in one period after its 5th failure.
 * F2: 4 instances, one refuses connections (the port of a fixture started
 *     and stopped); 200 calls, GET and unkeyed POST /effect/200 in turn,
 *     with a retry of 2 and ejection off (so that calls keep meeting the
 *     refusing one): every NOT_SENT attempt moves to another instance, the
 *     unkeyed POST too (it reached nobody), the caller sees no failure and
 *     the live instances' effects are the POSTs, exactly. Wrong variant: no
 *     retry (the NOT_SENT attempts are the callers' failures).
 * F3 (engine path): 5 instances, one slow (every request sleeps 500 ms),
 *     four fast (5 ms); 4,000 GETs on the async engine (built-in loop), two
 *     submitted every millisecond (a loop timer) and at most 200 in flight,
 *     once with round robin and once with P2C (fewest attempts in flight of
 *     two drawn at random): round robin sends the slow one a fifth of the
 *     calls, 200 of them in flight there, and they hold its p99 at 500 ms;
 *     P2C sends it far fewer (at most a quarter of round robin's share;
 *     0.6-0.8 % in runs) and its p99 is lower. Latency is from the call's
 *     submission to its completion. The calls arrive over 2 s or more
 *     rather than all at once, and a late tick does not catch up: P2C by
 *     in-flight tells the slow one only by its attempts piling up, so calls
 *     submitted together (nothing completed yet) spread evenly over the
 *     instances; and 200 kept in flight all the time (a completion submits
 *     the next) would leave about 40 in flight at every instance, 80 calls
 *     a second at the slow one, several percent of what a loaded 2-core
 *     machine serves. 4,000 rather than 2,000 so that the first calls
 *     (before the slow one's in-flight count grows) weigh well under 1 %.
 *     Wrong variant: round robin in place of P2C.
 * F4: 4 instances, all answer 503; logical calls (a retry of 2) through a
 *     client-level breaker (count window 20, 20 calls at least, 50 %), one
 *     every millisecond, at most 200: ejection takes at most 50 % of the
 *     instances out (2 of 4: the states OUT and PROBING, sampled after each
 *     call and at every ejection), never all, the others' ejections are
 *     refused by the cap (ejections_skipped), and the breaker opens on the
 *     logical calls' failures. Wrong variant: eject_max_percent 100 (3 of 4
 *     out: the last one is never ejected). */
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "lab_engine.h"
#include "lab_families.h"
#include "lab_ops.h"
#include "lab_result.h"

#if defined(RESIL_HAVE_HTTP) && defined(RESIL_HAVE_FIXTURE)

#include "fixture/fixture.h"
#include "resil/breaker.h"
#include "resil/http.h"
#include "resil/resil.h"
#include "resil/retry.h"
#ifdef RESIL_HAVE_LOOP
#include "resil/engine.h"
#include "resil/loop.h"
#endif

#define MS INT64_C(1000000)
enum { MAX_INSTANCES = 5 };

static void sleep_ms(long ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0) {
  }
}

static const resil_http_endpoint inst_endpoints[] = {
    RESIL_HTTP_ENDPOINT(.name = "item", .path = "/items/1"),
    RESIL_HTTP_ENDPOINT(.name = "effect", .method = RESIL_HTTP_POST, .path = "/effect/200"),
};

/* The instances: fixtures (dead ones stopped at once, their port kept),
 * their URLs, and the NULL-terminated list the client is given. */
typedef struct inst_set {
  size_t n;
  resil_fixture *fx[MAX_INSTANCES]; /* NULL for a dead one */
  char url[MAX_INSTANCES][64];
  const char *list[MAX_INSTANCES + 1];
} inst_set;

/* Starts n instances with cfg[i] (NULL: defaults); dead[i] 1 makes
 * instance i a port with nothing listening (a fixture started, then
 * stopped). 0, or -1 with a failed check in r. */
static int set_start(lab_result *r, inst_set *set, size_t n, const resil_fixture_config *cfg,
                     const int *dead) {
  memset(set, 0, sizeof *set);
  set->n = n;
  for (size_t i = 0; i < n; i++) {
    char eb[256] = "";
    if (!lab_check(r, resil_fixture_start(cfg ? &cfg[i] : NULL, &set->fx[i], eb, sizeof eb) == 0,
                   "fixture %zu: %s", i, eb))
      return -1;
    snprintf(set->url[i], sizeof set->url[i], "%s", resil_fixture_url(set->fx[i]));
    set->list[i] = set->url[i];
    if (dead && dead[i]) {
      resil_fixture_stop(set->fx[i]);
      set->fx[i] = NULL;
    }
  }
  set->list[n] = NULL;
  return 0;
}

static void set_stop(inst_set *set) {
  for (size_t i = 0; i < set->n; i++) resil_fixture_stop(set->fx[i]);
  memset(set, 0, sizeof *set);
}

/* The client's instance index of URL url, or -1. */
static int instance_of(const resil_http_client *c, const char *url) {
  size_t n = resil_http_client_instance_count(c);
  for (size_t i = 0; i < n; i++) {
    resil_http_instance_stats st;
    if (resil_http_client_instance_stats(c, i, &st) == RESIL_OK && strcmp(st.instance, url) == 0)
      return (int)i;
  }
  return -1;
}

/* Instances OUT or PROBING now. */
static unsigned instances_out(const resil_http_client *c) {
  unsigned out = 0;
  size_t n = resil_http_client_instance_count(c);
  for (size_t i = 0; i < n; i++) {
    resil_http_instance_stats st;
    if (resil_http_client_instance_stats(c, i, &st) == RESIL_OK &&
        (st.state == RESIL_HTTP_INSTANCE_OUT || st.state == RESIL_HTTP_INSTANCE_PROBING))
      out++;
  }
  return out;
}

static resil_retry *retry_of(lab_result *r, uint32_t attempts) {
  resil_retry_config rc;
  resil_retry_config_init(&rc);
  rc.max_attempts = attempts;
  rc.backoff = RESIL_RETRY_FIXED;
  rc.wait_ns = 0;
  resil_retry *rt = NULL;
  resil_error err;
  if (!lab_check(r, resil_retry_new(&rc, &rt, &err) == RESIL_OK, "retry: %s", err.msg))
    return NULL;
  return rt;
}

/* A client on the instances of set with the lab's endpoints; tweak (may be
 * NULL) sets the experiment's fields, user its argument. */
static resil_http_client *client_on(lab_result *r, inst_set *set,
                                    void (*tweak)(resil_http_client_config *, void *),
                                    void *user) {
  resil_http_client_config cc;
  resil_http_client_config_init(&cc);
  cc.instances = set->list;
  cc.endpoints = inst_endpoints;
  cc.endpoint_count = sizeof inst_endpoints / sizeof inst_endpoints[0];
  /* The event log's listeners first: a tweak that sets an instance
   * listener of its own forwards to the one it replaces. */
  lab_ops_client_config(r, &cc, "client");
  if (tweak) tweak(&cc, user);
  resil_http_client *c = NULL;
  resil_error err;
  if (!lab_check(r, resil_http_client_new(&cc, &c, &err) == RESIL_OK, "client: %s", err.msg))
    return NULL;
  return c;
}

static void client_done(lab_result *r, resil_http_client *c) {
  if (!c) return;
  lab_ops_add_client(r, "client", c);
  lab_capture(r);
  resil_http_client_free(c);
}

/* F1, F2 and F4 run on both paths: on the engine path their calls are
 * submitted to an engine on c (lab_engine.h), driven on this thread. 1 with
 * *le set (NULL on the blocking path), or 0 (a failed check in r). */
static int engine_for(lab_result *r, resil_http_client *c, lab_engine **le) {
  *le = NULL;
#ifdef RESIL_HAVE_LOOP
  if (r->path == LAB_PATH_ENGINE) return (*le = lab_engine_open(r, c)) != NULL;
#else
  (void)c;
#endif
  return r->path != LAB_PATH_ENGINE;
}

/* One logical call of endpoint ep through retry rt, on le when not NULL. */
static resil_outcome inst_call(lab_engine *le, resil_http_client *c, const char *ep,
                               resil_retry *rt, resil_http_response **out) {
#ifdef RESIL_HAVE_LOOP
  if (le) return lab_engine_call(le, ep, NULL, rt, NULL, out);
#else
  (void)le;
#endif
  return resil_http_call(c, ep, NULL, rt, NULL, out);
}

/* On the engine path, the named check that the calls took the engine (a
 * fall back to the blocking path cannot pass), and closes le. */
static void engine_done(lab_result *r, lab_engine *le) {
#ifdef RESIL_HAVE_LOOP
  lab_engine_expect_ran(r, lab_engine_calls(le));
  lab_engine_close(le);
#else
  (void)r;
  (void)le;
#endif
}

/* ---- F1 ------------------------------------------------------------------------ */

enum { F1_INSTANCES = 4, F1_BAD = 2, F1_CALLS = 1000, F1_EJECT = 5, F1_MARKS = 256 };

typedef struct f1_watch {
  pthread_mutex_t mu;
  resil_fixture *bad;
  const char *bad_url;
  long marks[F1_MARKS]; /* the bad one's attempts at each of its ejections */
  size_t nmarks;
  uint64_t ejections_other; /* of another instance (none expected) */
  uint64_t returned;
  /* The listener replaced (the event log's, --events), or NULL. */
  resil_http_instance_listener_fn next;
  void *next_user;
} f1_watch;

static void f1_on_instance(void *user, const resil_http_instance_event *ev) {
  f1_watch *w = user;
  pthread_mutex_lock(&w->mu);
  int bad = ev->instance && strcmp(ev->instance, w->bad_url) == 0;
  if (ev->kind == RESIL_HTTP_INSTANCE_EJECTED) {
    if (!bad)
      w->ejections_other++;
    else if (w->nmarks < F1_MARKS)
      w->marks[w->nmarks++] = resil_fixture_attempts(w->bad, "items");
  } else if (ev->kind == RESIL_HTTP_INSTANCE_RETURNED && bad) {
    w->returned++;
  }
  pthread_mutex_unlock(&w->mu);
  if (w->next) w->next(w->next_user, ev);
}

typedef struct f1_cfg {
  f1_watch *w;
  uint32_t eject_consecutive;
} f1_cfg;

static void f1_tweak(resil_http_client_config *cc, void *u) {
  f1_cfg *fc = u;
  cc->eject_consecutive = fc->eject_consecutive;
  cc->eject_base_ns = 100 * MS;
  cc->eject_max_ns = 200 * MS;
  fc->w->next = cc->on_instance;
  fc->w->next_user = cc->on_instance_user;
  cc->on_instance = f1_on_instance;
  cc->on_instance_user = fc->w;
}

static int f1_run(lab_result *r, uint32_t eject_consecutive) {
  resil_fixture_config fcfg[F1_INSTANCES];
  for (size_t i = 0; i < F1_INSTANCES; i++) resil_fixture_config_init(&fcfg[i]);
  fcfg[F1_BAD].force_status = 503;
  inst_set fl;
  f1_watch w;
  memset(&w, 0, sizeof w);
  pthread_mutex_init(&w.mu, NULL);
  resil_http_client *c = NULL;
  lab_engine *le = NULL;
  resil_retry *rt = NULL;
  if (set_start(r, &fl, F1_INSTANCES, fcfg, NULL) != 0) goto out;
  w.bad = fl.fx[F1_BAD];
  w.bad_url = fl.url[F1_BAD];
  f1_cfg fc = {&w, eject_consecutive};
  if (!(c = client_on(r, &fl, f1_tweak, &fc)) || !(rt = retry_of(r, 3)) ||
      !engine_for(r, c, &le))
    goto out;
  int bad_index = instance_of(c, fl.url[F1_BAD]);
  size_t failed = 0, retried = 0;
  long answered_by[F1_INSTANCES] = {0};
  int64_t t0 = lab_now_ns();
  for (int i = 0; i < F1_CALLS; i++) {
    resil_http_response *resp = NULL;
    resil_outcome o = inst_call(le, c, "item", rt, &resp);
    if (!resil_outcome_is_success(&o)) failed++;
    if (o.attempts > 1) retried++;
    int at = resp ? resil_http_response_instance(resp) : -1;
    if (at >= 0 && at < F1_INSTANCES && resil_outcome_is_success(&o)) answered_by[at]++;
    resil_http_response_free(resp);
    sleep_ms(1);
  }
  double elapsed_ms = (double)(lab_now_ns() - t0) / 1e6;
  long bad_total = resil_fixture_attempts(fl.fx[F1_BAD], "items");
  pthread_mutex_lock(&w.mu);
  size_t nmarks = w.nmarks;
  long marks[F1_MARKS];
  memcpy(marks, w.marks, sizeof marks);
  uint64_t others = w.ejections_other, returned = w.returned;
  pthread_mutex_unlock(&w.mu);
  /* The bad one's attempts before its first ejection, then in each
   * ejection period: from one ejection (its attempts then, the one that
   * ejected it included) to the next, the last to the end of the run.
   * Without any ejection (the wrong variant), the run after its
   * F1_EJECT-th failure, where it should have been ejected, is one period. */
  long before, after_max = 0, periods = 0;
  json_t *per_period = json_array();
  if (nmarks == 0) {
    before = bad_total < F1_EJECT ? bad_total : F1_EJECT;
    after_max = bad_total - before;
    periods = 1;
    json_array_append_new(per_period, json_integer(after_max));
  } else {
    before = marks[0];
    for (size_t k = 0; k < nmarks; k++) {
      long in = (k + 1 < nmarks ? marks[k + 1] : bad_total) - marks[k];
      json_array_append_new(per_period, json_integer(in));
      if (in > after_max) after_max = in;
      periods++;
    }
  }
  resil_http_instance_stats bs;
  memset(&bs, 0, sizeof bs);
  if (bad_index >= 0) resil_http_client_instance_stats(c, (size_t)bad_index, &bs);
  long healthy_answers = 0;
  json_t *answers = json_array();
  for (size_t i = 0; i < F1_INSTANCES; i++) {
    int idx = instance_of(c, fl.url[i]);
    long a = idx >= 0 && idx < F1_INSTANCES ? answered_by[idx] : 0;
    json_array_append_new(answers, json_integer(a));
    if (i != F1_BAD) healthy_answers += a;
  }
  lab_obs_int(r, "instances", (long long)resil_http_client_instance_count(c));
  lab_obs_int(r, "calls", F1_CALLS);
  lab_obs_int(r, "failed_calls", (long long)failed);
  lab_obs_int(r, "retried_calls", (long long)retried);
  lab_obs_int(r, "eject_consecutive", eject_consecutive);
  lab_obs_int(r, "ejections", (long long)bs.ejections);
  lab_obs_int(r, "ejections_of_healthy", (long long)others);
  lab_obs_int(r, "returned", (long long)returned);
  lab_obs_int(r, "calls_to_bad", bad_total);
  lab_obs_int(r, "calls_to_bad_before_ejection", before);
  lab_obs_int(r, "calls_to_bad_after_ejection", after_max);
  lab_obs_int(r, "ejection_periods", periods);
  lab_obs_json(r, "calls_to_bad_per_period", per_period);
  lab_obs_json(r, "answered_by_instance", answers);
  lab_obs_real(r, "elapsed_ms", elapsed_ms);
  lab_summary(r, "4 instances, one 503: %d GETs, %zu failed, %zu retried; the bad one got %ld "
                 "attempts: %ld before its first ejection, at most %ld per ejection period "
                 "(%ld periods, %" PRIu64 " ejections) in %.0f ms",
              F1_CALLS, failed, retried, bad_total, before, after_max, periods, bs.ejections,
              elapsed_ms);
  lab_expect(r, "instances", resil_http_client_instance_count(c) == F1_INSTANCES && bad_index >= 0,
             "%zu instances, the bad one at %d", resil_http_client_instance_count(c), bad_index);
  lab_expect(r, "failed_calls", failed == 0 && healthy_answers == F1_CALLS,
             "%zu calls failed, the healthy instances answered %ld of %d", failed,
             healthy_answers, F1_CALLS);
  lab_expect(r, "ejections", bs.ejections >= 1 && others == 0,
             "the bad instance was ejected %" PRIu64 " times, healthy ones %" PRIu64,
             bs.ejections, others);
  lab_expect(r, "calls_to_bad_before_ejection", before >= 1 && before <= F1_EJECT,
             "%ld attempts reached the bad instance before its first ejection", before);
  lab_expect(r, "calls_to_bad_after_ejection", after_max <= 1,
             "%ld attempts reached the bad instance in one ejection period", after_max);
  lab_expect(r, "probed_after_ejection_time", nmarks >= 2,
             "the bad instance was probed (and ejected again) %zu times",
             nmarks ? nmarks - 1 : 0);
out:
  engine_done(r, le);
  resil_retry_free(rt);
  client_done(r, c);
  set_stop(&fl);
  pthread_mutex_destroy(&w.mu);
  return r->pass;
}

static int f1_right(lab_result *r) { return f1_run(r, F1_EJECT); }
static int f1_wrong(lab_result *r) { return f1_run(r, 0); }

/* ---- F2 ------------------------------------------------------------------------ */

enum { F2_INSTANCES = 4, F2_DEAD = 1, F2_CALLS = 200 };

static void f2_tweak(resil_http_client_config *cc, void *u) {
  (void)u;
  cc->eject_consecutive = 0;
}

static int f2_run(lab_result *r, uint32_t attempts) {
  int dead[F2_INSTANCES] = {0};
  dead[F2_DEAD] = 1;
  inst_set fl;
  resil_http_client *c = NULL;
  resil_retry *rt = NULL;
  lab_engine *le = NULL;
  if (set_start(r, &fl, F2_INSTANCES, NULL, dead) != 0) goto out;
  if (!(c = client_on(r, &fl, f2_tweak, NULL)) || !(rt = retry_of(r, attempts)) ||
      !engine_for(r, c, &le))
    goto out;
  int dead_index = instance_of(c, fl.url[F2_DEAD]);
  size_t failures = 0, posts = 0, posts_moved = 0, moved = 0, calls_moved = 0;
  for (int i = 0; i < F2_CALLS; i++) {
    int post = i % 2;
    resil_http_response *resp = NULL;
    resil_outcome o = inst_call(le, c, post ? "effect" : "item", rt, &resp);
    resil_http_response_free(resp);
    if (post) posts++;
    if (!resil_outcome_is_success(&o)) {
      failures++;
      continue;
    }
    /* The only failures are the refusing instance's NOT_SENT attempts:
     * every attempt before the one that answered was one. */
    if (o.attempts > 1) {
      moved += o.attempts - 1;
      calls_moved++;
      if (post) posts_moved++;
    }
  }
  long effects = 0;
  for (size_t i = 0; i < F2_INSTANCES; i++)
    if (fl.fx[i]) effects += resil_fixture_effects(fl.fx[i], "effect");
  resil_http_instance_stats ds;
  memset(&ds, 0, sizeof ds);
  if (dead_index >= 0) resil_http_client_instance_stats(c, (size_t)dead_index, &ds);
  uint64_t dead_not_sent = ds.outcomes[RESIL_NOT_SENT];
  lab_obs_int(r, "instances", (long long)resil_http_client_instance_count(c));
  lab_obs_int(r, "calls", F2_CALLS);
  lab_obs_int(r, "attempts_per_call", attempts);
  lab_obs_int(r, "caller_failures", (long long)failures);
  lab_obs_int(r, "not_sent_at_refusing", (long long)dead_not_sent);
  lab_obs_int(r, "moved_not_sent", (long long)moved);
  lab_obs_int(r, "calls_moved", (long long)calls_moved);
  lab_obs_int(r, "posts", (long long)posts);
  lab_obs_int(r, "posts_moved", (long long)posts_moved);
  lab_obs_int(r, "post_effects", effects);
  lab_summary(r, "4 instances, one refusing connections: %d calls (%zu unkeyed POSTs), %zu "
                 "failed; %" PRIu64 " NOT_SENT attempts at the refusing one, %zu moved to "
                 "another (%zu POSTs moved); effects %ld for %zu POSTs",
              F2_CALLS, posts, failures, dead_not_sent, moved, posts_moved, effects, posts);
  lab_expect(r, "caller_failures", failures == 0, "%zu calls failed", failures);
  lab_expect(r, "moved_not_sent", moved > 0 && moved == dead_not_sent && posts_moved > 0,
             "%zu attempts moved after NOT_SENT, %" PRIu64 " NOT_SENT at the refusing "
             "instance, %zu POSTs moved",
             moved, dead_not_sent, posts_moved);
  lab_expect(r, "post_effects", effects == (long)posts,
             "%ld effects on the live instances for %zu POSTs", effects, posts);
out:
  engine_done(r, le);
  resil_retry_free(rt);
  client_done(r, c);
  set_stop(&fl);
  return r->pass;
}

static int f2_right(lab_result *r) { return f2_run(r, 3); }
static int f2_wrong(lab_result *r) { return f2_run(r, 1); }

/* ---- F4 ------------------------------------------------------------------------ */

enum { F4_INSTANCES = 4, F4_CALLS = 200 };

typedef struct f4_watch {
  const resil_http_client *_Atomic c; /* set once the client exists */
  _Atomic unsigned max_out;
  /* The listener replaced (the event log's, --events), or NULL. */
  resil_http_instance_listener_fn next;
  void *next_user;
} f4_watch;

static void f4_note(f4_watch *w, unsigned out) {
  unsigned m = atomic_load(&w->max_out);
  while (out > m && !atomic_compare_exchange_weak(&w->max_out, &m, out)) {
  }
}

static void f4_on_instance(void *user, const resil_http_instance_event *ev) {
  f4_watch *w = user;
  const resil_http_client *c = atomic_load(&w->c);
  if (ev->kind == RESIL_HTTP_INSTANCE_EJECTED && c) f4_note(w, instances_out(c));
  if (w->next) w->next(w->next_user, ev);
}

typedef struct f4_cfg {
  f4_watch *w;
  uint32_t max_percent;
} f4_cfg;

static void f4_tweak(resil_http_client_config *cc, void *u) {
  f4_cfg *fc = u;
  cc->eject_max_percent = fc->max_percent;
  cc->eject_base_ns = 1000 * MS;
  cc->eject_max_ns = 1000 * MS;
  fc->w->next = cc->on_instance;
  fc->w->next_user = cc->on_instance_user;
  cc->on_instance = f4_on_instance;
  cc->on_instance_user = fc->w;
}

static int f4_run(lab_result *r, uint32_t max_percent) {
  resil_fixture_config fcfg[F4_INSTANCES];
  for (size_t i = 0; i < F4_INSTANCES; i++) {
    resil_fixture_config_init(&fcfg[i]);
    fcfg[i].force_status = 503;
  }
  inst_set fl;
  f4_watch w;
  memset(&w, 0, sizeof w);
  resil_http_client *c = NULL;
  resil_retry *rt = NULL;
  resil_breaker *br = NULL;
  lab_engine *le = NULL;
  if (set_start(r, &fl, F4_INSTANCES, fcfg, NULL) != 0) goto out;
  f4_cfg fc = {&w, max_percent};
  if (!(c = client_on(r, &fl, f4_tweak, &fc)) || !(rt = retry_of(r, 3)) ||
      !engine_for(r, c, &le))
    goto out;
  atomic_store(&w.c, c);
  resil_breaker_config bc;
  resil_breaker_config_init(&bc);
  bc.name = lab_ops_name(r, "breaker", "breaker");
  bc.window_size = 20;
  bc.minimum_calls = 20;
  bc.failure_rate_threshold_pct = 50;
  bc.open_wait_ns = 60 * INT64_C(1000000000);
  resil_error err;
  if (!lab_check(r, resil_breaker_new(&bc, &br, &err) == RESIL_OK, "breaker: %s", err.msg))
    goto out;
  lab_ops_breaker_events(r, br);
  size_t made = 0, rejected = 0, opened_after = 0;
  for (int i = 0; i < F4_CALLS; i++) {
    resil_breaker_permit p;
    if (resil_breaker_try_acquire(br, &p) != RESIL_DECISION_GO) {
      rejected++;
      continue;
    }
    int64_t t0 = lab_now_ns();
    resil_outcome o = inst_call(le, c, "item", rt, NULL);
    resil_breaker_record(br, &p, &o, lab_now_ns() - t0);
    made++;
    f4_note(&w, instances_out(c));
    if (!opened_after && resil_breaker_state(br) == RESIL_BREAKER_OPEN) opened_after = made;
    sleep_ms(1);
  }
  uint64_t ejections = 0, skipped = 0;
  size_t n = resil_http_client_instance_count(c);
  for (size_t i = 0; i < n; i++) {
    resil_http_instance_stats st;
    if (resil_http_client_instance_stats(c, i, &st) != RESIL_OK) continue;
    ejections += st.ejections;
    skipped += st.ejections_skipped;
  }
  long attempts = 0;
  for (size_t i = 0; i < F4_INSTANCES; i++) attempts += resil_fixture_attempts(fl.fx[i], "items");
  unsigned max_out = atomic_load(&w.max_out);
  const char *state = resil_breaker_state_name(resil_breaker_state(br));
  lab_obs_int(r, "instances", (long long)n);
  lab_obs_int(r, "eject_max_percent", max_percent);
  lab_obs_int(r, "max_ejected", max_out);
  lab_obs_int(r, "ejections", (long long)ejections);
  lab_obs_int(r, "ejections_skipped", (long long)skipped);
  lab_obs_int(r, "logical_calls", (long long)made);
  lab_obs_int(r, "attempts", attempts);
  lab_obs_int(r, "rejected_by_breaker", (long long)rejected);
  lab_obs_int(r, "breaker_opened_after_calls", (long long)opened_after);
  lab_obs_str(r, "breaker_state", state);
  lab_summary(r, "4 instances, all 503 (eject_max_percent %u): at most %u out at once, %" PRIu64
                 " ejections, %" PRIu64 " refused by the cap; the breaker is %s after %zu "
                 "logical calls (%ld attempts), %zu rejected",
              max_percent, max_out, ejections, skipped, state, made, attempts, rejected);
  lab_expect(r, "max_ejected", max_out >= 1 && max_out <= F4_INSTANCES / 2,
             "%u instances out at once (at most 2 of 4)", max_out);
  lab_expect(r, "ejections_capped", skipped > 0, "the cap refused %" PRIu64 " ejections",
             skipped);
  lab_expect(r, "breaker_state", strcmp(state, "OPEN") == 0 && opened_after > 0 && rejected > 0,
             "the breaker is %s (opened after %zu logical calls, %zu rejected)", state,
             opened_after, rejected);
out:
  engine_done(r, le);
  if (br) {
    lab_ops_add_breaker(r, "breaker", br);
    lab_capture(r);
  }
  resil_breaker_free(br);
  resil_retry_free(rt);
  client_done(r, c);
  set_stop(&fl);
  return r->pass;
}

static int f4_right(lab_result *r) { return f4_run(r, 50); }
static int f4_wrong(lab_result *r) { return f4_run(r, 100); }

/* ---- F3 (the async engine) ---------------------------------------------------- */

#ifdef RESIL_HAVE_LOOP

enum { F3_INSTANCES = 5, F3_SLOW = 0, F3_CALLS = 4000, F3_PER_MS = 2, F3_CAP = 200 };

typedef struct f3_drive f3_drive;

typedef struct f3_tag {
  f3_drive *d;
  size_t i;
} f3_tag;

struct f3_drive {
  lab_result *r;
  resil_loop *loop;
  resil_loop_adapter *ad;  /* the engine's */
  resil_loop_adapter *tad; /* the arrivals' timer */
  resil_engine *e;
  size_t submitted, done, in_flight, max_in_flight, refused;
  int64_t t0;
  int64_t *t_submit, *latency;
  int *instance;
  resil_outcome *o;
  f3_tag *tags;
};

static void f3_done(void *user, resil_engine_handle *h, resil_outcome o,
                    resil_http_response *resp);

/* A tick of the arrivals, every millisecond: F3_PER_MS more calls, fewer
 * while F3_CAP are in flight (the rest wait for a later tick). A tick that
 * comes late (a loaded machine) does not catch up: a burst of calls
 * submitted together would spread evenly over the instances, the slow one
 * included, before any of them completed. */
static void f3_tick(void *arg) {
  f3_drive *d = arg;
  for (size_t k = 0; k < F3_PER_MS && d->submitted < F3_CALLS && d->in_flight < F3_CAP; k++) {
    size_t i = d->submitted++;
    d->tags[i].d = d;
    d->tags[i].i = i;
    d->t_submit[i] = lab_now_ns();
    resil_error err;
    if (resil_engine_call(d->e, "item", NULL, NULL, NULL, f3_done, &d->tags[i], NULL, &err) !=
        RESIL_OK) {
      d->refused++;
      d->done++;
      continue;
    }
    if (++d->in_flight > d->max_in_flight) d->max_in_flight = d->in_flight;
  }
  if (d->done == F3_CALLS)
    resil_loop_stop(d->loop);
  else if (d->submitted < F3_CALLS)
    d->tad->timer(d->tad->self, MS, f3_tick, d);
}

static void f3_done(void *user, resil_engine_handle *h, resil_outcome o,
                    resil_http_response *resp) {
  (void)h;
  f3_tag *t = user;
  f3_drive *d = t->d;
  d->latency[t->i] = lab_now_ns() - d->t_submit[t->i];
  d->o[t->i] = o;
  d->instance[t->i] = resp ? resil_http_response_instance(resp) : -1;
  resil_http_response_free(resp);
  d->in_flight--;
  if (++d->done == F3_CALLS) resil_loop_stop(d->loop);
}

static int cmp_i64(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return x < y ? -1 : x > y;
}

static void f3_tweak(resil_http_client_config *cc, void *u) {
  cc->balance = *(resil_http_balance *)u;
  cc->max_connections = 1024;
  cc->max_connections_per_host = 256;
  cc->lease_timeout_ns = 10000 * MS;
}

typedef struct f3_figures {
  double share_slow, p50_ms, p99_ms, elapsed_ms;
  size_t slow_calls, failed, max_in_flight;
} f3_figures;

/* One run of F3_CALLS on a fresh client with `balance`. 0, or -1 (a failed
 * check in r). */
static int f3_one(lab_result *r, inst_set *set, resil_http_balance balance,
                  const char *name, f3_figures *fig) {
  memset(fig, 0, sizeof *fig);
  resil_http_client *c = client_on(r, set, f3_tweak, &balance);
  if (!c) return -1;
  f3_drive d;
  memset(&d, 0, sizeof d);
  d.r = r;
  d.t_submit = calloc(F3_CALLS, sizeof *d.t_submit);
  d.latency = calloc(F3_CALLS, sizeof *d.latency);
  d.instance = calloc(F3_CALLS, sizeof *d.instance);
  d.o = calloc(F3_CALLS, sizeof *d.o);
  d.tags = calloc(F3_CALLS, sizeof *d.tags);
  int rc = -1;
  resil_engine_config ec;
  resil_engine_config_init(&ec);
  resil_error err;
  if (!lab_check(r, d.t_submit && d.latency && d.instance && d.o && d.tags, "out of memory") ||
      !lab_check(r, resil_loop_new(NULL, &d.loop) == RESIL_OK, "resil_loop_new failed") ||
      !lab_check(r, resil_loop_adapter_new(d.loop, &d.ad) == RESIL_OK &&
                        resil_loop_adapter_new(d.loop, &d.tad) == RESIL_OK,
                 "resil_loop_adapter_new failed"))
    goto out;
  ec.adapter = d.ad;
  ec.client = c;
  if (!lab_check(r, resil_engine_new(&ec, &d.e, &err) == RESIL_OK, "engine: %s", err.msg))
    goto out;
  int slow = instance_of(c, set->url[F3_SLOW]);
  d.t0 = lab_now_ns();
  f3_tick(&d);
  if (d.done < F3_CALLS) resil_loop_run(d.loop);
  fig->elapsed_ms = (double)(lab_now_ns() - d.t0) / 1e6;
  fig->max_in_flight = d.max_in_flight;
  size_t answered = 0;
  for (size_t i = 0; i < F3_CALLS; i++) {
    if (!resil_outcome_is_success(&d.o[i])) fig->failed++;
    if (d.instance[i] >= 0) answered++;
    if (slow >= 0 && d.instance[i] == slow) fig->slow_calls++;
  }
  fig->failed += d.refused;
  fig->share_slow = answered ? (double)fig->slow_calls / (double)answered : 0;
  qsort(d.latency, F3_CALLS, sizeof *d.latency, cmp_i64);
  /* Nearest rank. */
  fig->p50_ms = (double)d.latency[(F3_CALLS * 50 + 99) / 100 - 1] / 1e6;
  fig->p99_ms = (double)d.latency[(F3_CALLS * 99 + 99) / 100 - 1] / 1e6;
  lab_check(r, slow >= 0, "%s: the slow instance is not among the client's", name);
  rc = 0;
out:
  resil_engine_free(d.e);
  resil_loop_adapter_free(d.tad);
  resil_loop_adapter_free(d.ad);
  resil_loop_free(d.loop);
  free(d.t_submit);
  free(d.latency);
  free(d.instance);
  free(d.o);
  free(d.tags);
  client_done(r, c);
  return rc;
}

static int f3_run(lab_result *r, int wrong) {
  resil_fixture_config fcfg[F3_INSTANCES];
  for (size_t i = 0; i < F3_INSTANCES; i++) {
    resil_fixture_config_init(&fcfg[i]);
    fcfg[i].delay_all_ms = i == F3_SLOW ? 500 : 5;
  }
  inst_set fl;
  f3_figures rr, p2c;
  if (set_start(r, &fl, F3_INSTANCES, fcfg, NULL) != 0) goto out;
  if (f3_one(r, &fl, RESIL_HTTP_BALANCE_ROUND_ROBIN, "round robin", &rr) != 0) goto out;
  if (f3_one(r, &fl, wrong ? RESIL_HTTP_BALANCE_ROUND_ROBIN : RESIL_HTTP_BALANCE_P2C,
             wrong ? "round robin (as P2C)" : "P2C", &p2c) != 0)
    goto out;
  lab_obs_str(r, "path", lab_path_name(LAB_PATH_ENGINE));
  lab_obs_int(r, "instances", F3_INSTANCES);
  lab_obs_int(r, "calls", F3_CALLS);
  lab_obs_int(r, "concurrency", F3_CAP);
  lab_obs_int(r, "submitted_per_ms", F3_PER_MS);
  lab_obs_str(r, "p2c_balance", wrong ? "round_robin" : "p2c");
  lab_obs_real(r, "share_slow_p2c", p2c.share_slow);
  lab_obs_real(r, "share_slow_rr", rr.share_slow);
  lab_obs_real(r, "p99_ms_p2c", p2c.p99_ms);
  lab_obs_real(r, "p99_ms_rr", rr.p99_ms);
  lab_obs_real(r, "p50_ms_p2c", p2c.p50_ms);
  lab_obs_real(r, "p50_ms_rr", rr.p50_ms);
  lab_obs_int(r, "slow_calls_p2c", (long long)p2c.slow_calls);
  lab_obs_int(r, "slow_calls_rr", (long long)rr.slow_calls);
  lab_obs_int(r, "max_in_flight_p2c", (long long)p2c.max_in_flight);
  lab_obs_int(r, "max_in_flight_rr", (long long)rr.max_in_flight);
  lab_obs_int(r, "failed_calls", (long long)(p2c.failed + rr.failed));
  lab_obs_real(r, "elapsed_ms_p2c", p2c.elapsed_ms);
  lab_obs_real(r, "elapsed_ms_rr", rr.elapsed_ms);
  lab_summary(r, "1 slow (500 ms) among 4 fast (5 ms), %d calls on the engine, at most %d in "
                 "flight: the slow one took %.2f %% with %s, %.2f %% with round robin; p99 "
                 "%.1f ms vs %.1f ms",
              F3_CALLS, F3_CAP, p2c.share_slow * 100, wrong ? "round robin as P2C" : "P2C",
              rr.share_slow * 100, p2c.p99_ms, rr.p99_ms);
  lab_expect(r, "calls_answered", p2c.failed == 0 && rr.failed == 0,
             "%zu calls failed with P2C, %zu with round robin", p2c.failed, rr.failed);
  lab_expect(r, "share_slow_p2c", p2c.share_slow <= rr.share_slow / 4,
             "the slow instance took %.2f %% of the calls with P2C, %.2f %% with round robin",
             p2c.share_slow * 100, rr.share_slow * 100);
  lab_expect(r, "p99_ms_p2c", p2c.p99_ms < rr.p99_ms, "p99 %.1f ms with P2C, %.1f ms with round "
             "robin", p2c.p99_ms, rr.p99_ms);
out:
  set_stop(&fl);
  return r->pass;
}

static int f3_right(lab_result *r) { return f3_run(r, 0); }
static int f3_wrong(lab_result *r) { return f3_run(r, 1); }

#define F3_ENTRY                                                                           \
  {"F3",                                                                                   \
   "1 slow instance (500 ms) among 4 fast ones (5 ms), 4,000 calls on the engine, at most " \
   "200 in flight: P2C by in-flight sends it far fewer calls than round robin and p99 drops", \
   f3_right, f3_wrong, "round robin in place of P2C", "share_slow_p2c", LAB_PATHS_BLOCKING},
#else
#define F3_ENTRY
#endif

const lab_experiment lab_instances_experiments[] = {
    {"F1",
     "4 instances, one answers 503: ejected after 5 consecutive failures, one probe per "
     "ejection period, 1,000 GETs with a retry of 2 and none fails",
     f1_right, f1_wrong, "eject_consecutive 0 (no ejection)", "calls_to_bad_after_ejection",
     LAB_PATHS_BOTH},
    {"F2",
     "one instance refuses connections: every NOT_SENT attempt moves to another instance, an "
     "unkeyed POST too, the caller sees no failure and effects equal POSTs",
     f2_right, f2_wrong, "no retry", "caller_failures", LAB_PATHS_BOTH},
    F3_ENTRY
    {"F4",
     "all 4 instances fail: at most 50 % ejected, never all; the client-level breaker opens "
     "on the logical calls",
     f4_right, f4_wrong, "eject_max_percent 100", "max_ejected", LAB_PATHS_BOTH},
    {NULL, NULL, NULL, NULL, NULL, NULL, 0}};

#else

const lab_experiment lab_instances_experiments[] = {{NULL, NULL, NULL, NULL, NULL, NULL, 0}};

#endif
