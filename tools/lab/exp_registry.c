/* Lab experiment O1 (issue 19, item 2): the registry drives the engine.
 * A chain from a YAML file (written to a temp dir: a retry, a breaker, an
 * HTTP client on the in-process fixture, the chain Retry(Breaker(call)))
 * drives 1,000 logical calls on the engine (built-in loop, 50 in flight)
 * through resil_registry_engine_call, while the file is rewritten and
 * reloaded 20 times (on the loop thread, between completions) with a
 * changed retry: odd generations max_attempts 2, wait 1 ms; even ones 3
 * and 3 ms. The endpoint always answers 503, so a call's retry makes all
 * its attempts.
 *
 * Measured, per call (its own idempotency key "o1-N"): the attempt events
 * the registry's sink received for that key (resil_registry_events_attach:
 * "retry" and "call_done" lines, parsed back), and the waits the retry
 * events carry; compared with the generation current when the call was
 * submitted (resil_registry_generation, read on the loop thread, where
 * the reloads run too). A call "mixes generations" when its attempts or
 * its waits are not those of that generation's retry. Every call must
 * complete exactly once.
 *
 * The wrong variant does what users did before: no lease, the instances
 * looked up by name per attempt: each attempt is its own resil_engine_call
 * with the breaker found by name, and whether to make another is asked of
 * the retry found by name at that moment (resil_retry_max_attempts), so a
 * call that spans a reload is governed by two generations:
 * no_mixed_generations fails. Built with the built-in loop, the fixture
 * and libresil-config. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "lab_families.h"
#include "lab_result.h"

#if defined(RESIL_HAVE_FIXTURE) && defined(RESIL_HAVE_LOOP) && defined(RESIL_HAVE_CONFIG)

#include <pthread.h>

#include "fixture/fixture.h"
#include "resil/engine.h"
#include "resil/events.h"
#include "resil/loop.h"
#include "resil/registry.h"
#include "resil/registry_call.h"
#include "resil/retry.h"

enum { O1_CALLS = 1000, O1_WINDOW = 50, O1_RELOADS = 20 };

/* The file, generation g: %d max_attempts, %d wait (ms), %s the fixture. */
static const char *O1_YAML =
    "# O1: written by `resil lab`, rewritten for each reload.\n"
    "circuitbreaker:\n"
    "  instances:\n"
    "    b: {window_size: 10000, minimum_calls: 10000}\n"
    "retry:\n"
    "  instances:\n"
    "    r: {max_attempts: %d, backoff: fixed, wait: %dms, respect_retry_after: false}\n"
    "http_client:\n"
    "  instances:\n"
    "    fx:\n"
    "      base_url: %s\n"
    "      max_connections: 64\n"
    "      endpoints:\n"
    "        fail: {path: /status/503, idempotency_key: send}\n"
    "chain:\n"
    "  instances:\n"
    "    o1:\n"
    "      total_timeout: 30s\n"
    "      layers: [{retry: r}, {circuitbreaker: b}]\n";

static int gen_attempts(uint64_t g) { return g % 2 ? 2 : 3; }
static int gen_wait_ms(uint64_t g) { return g % 2 ? 1 : 3; }

typedef struct o1_call {
  uint64_t gen;      /* registry generation at submit */
  int ended;         /* done calls (must be 1) */
  int events;        /* attempt events received with its key */
  int bad_wait;      /* retry events whose wait is not gen's */
  int attempts_done; /* wrong variant: attempts made */
  char key[16];
} o1_call;

typedef struct o1 {
  int wrong;
  resil_fixture *fx;
  char dir[64], path[96];
  resil_registry *reg;
  resil_registry_lease *client_lease;
  resil_loop *loop;
  resil_loop_adapter *ad;
  resil_engine *e;
  resil_event_sink *sink;
  pthread_mutex_t mu; /* calls[].events/bad_wait, stray (the sink's thread) */
  o1_call calls[O1_CALLS];
  int submitted, completed, reloads, reload_errors, submit_errors;
  long stray_events;
  long long attempts; /* the calls' own count (outcome.attempts) */
  char outcome[96];   /* the last call's */
  char err[200];
} o1;

static int write_gen(o1 *x, uint64_t g) {
  FILE *f = fopen(x->path, "w");
  if (!f) return -1;
  fprintf(f, O1_YAML, gen_attempts(g), gen_wait_ms(g), resil_fixture_url(x->fx));
  return fclose(f);
}

/* The sink's lines (any thread that made an attempt: the loop here). */
static void on_line(void *user, const char *line) {
  o1 *x = user;
  json_t *o = json_loads(line, 0, NULL);
  if (!o) return;
  const char *kind = json_string_value(json_object_get(o, "kind"));
  const char *key = json_string_value(json_object_get(o, "idempotency_key"));
  if (kind && (strcmp(kind, "retry") == 0 || strcmp(kind, "call_done") == 0)) {
    int i = -1;
    if (key && sscanf(key, "o1-%d", &i) == 1 && i >= 0 && i < O1_CALLS) {
      pthread_mutex_lock(&x->mu);
      o1_call *c = &x->calls[i];
      c->events++;
      json_t *w = json_object_get(o, "wait_ms");
      if (strcmp(kind, "retry") == 0 && json_is_number(w) &&
          json_number_value(w) != (double)gen_wait_ms(c->gen))
        c->bad_wait++;
      pthread_mutex_unlock(&x->mu);
    } else {
      pthread_mutex_lock(&x->mu);
      x->stray_events++;
      pthread_mutex_unlock(&x->mu);
    }
  }
  json_decref(o);
}

static void o1_submit(o1 *x);

/* A logical call ended: the next is submitted; every 50 completions (from
 * the 25th) the file is rewritten and reloaded, calls in flight. */
static void o1_end(o1 *x, int i) {
  if (x->calls[i].ended++) return;
  x->completed++;
  if (x->completed % 50 == 25 && x->reloads + x->reload_errors < O1_RELOADS) {
    uint64_t g = resil_registry_generation(x->reg) + 1;
    resil_registry_error re;
    resil_registry_error_init(&re);
    if (write_gen(x, g) != 0 || resil_registry_reload(x->reg, x->path, &re) != RESIL_OK)
      x->reload_errors++;
    else
      x->reloads++;
  }
  if (x->submitted < O1_CALLS) o1_submit(x);
  if (x->completed == O1_CALLS) resil_loop_stop(x->loop);
}

typedef struct o1_ref {
  o1 *x;
  int i;
} o1_ref;

static void o1_done(void *user, resil_engine_handle *h, resil_outcome o, resil_http_response *r) {
  (void)h;
  o1_ref *ref = user;
  resil_http_response_free(r);
  o1 *x = ref->x;
  x->attempts += o.attempts;
  resil_outcome_format(&o, x->outcome, sizeof x->outcome);
  int i = ref->i;
  free(ref);
  o1_end(x, i);
}

/* The wrong variant's attempt: its own engine call, the breaker found by
 * name, no lease. */
static int wrong_attempt(o1 *x, int i);

static void wrong_done(void *user, resil_engine_handle *h, resil_outcome o,
                       resil_http_response *r) {
  (void)h;
  o1_ref *ref = user;
  resil_http_response_free(r);
  o1 *x = ref->x;
  int i = ref->i;
  free(ref);
  o1_call *c = &x->calls[i];
  c->attempts_done++;
  x->attempts++;
  resil_outcome_format(&o, x->outcome, sizeof x->outcome);
  /* Another attempt? Asked of the retry named "r" now. */
  resil_retry *rt = resil_registry_retry(x->reg, "r");
  if (o.kind == RESIL_ANSWERED && o.http_status == 503 && rt &&
      c->attempts_done < (int)resil_retry_max_attempts(rt) && wrong_attempt(x, i) == 0)
    return;
  o1_end(x, i);
}

static int wrong_attempt(o1 *x, int i) {
  o1_ref *ref = malloc(sizeof *ref);
  if (!ref) return -1;
  ref->x = x;
  ref->i = i;
  resil_http_args args;
  resil_http_args_init(&args);
  args.idempotency_key = x->calls[i].key;
  resil_engine_policies pol;
  resil_engine_policies_init(&pol);
  pol.breaker = resil_registry_breaker(x->reg, "b");
  if (resil_engine_call(x->e, "fail", &args, &pol, NULL, wrong_done, ref, NULL, NULL) !=
      RESIL_OK) {
    free(ref);
    return -1;
  }
  return 0;
}

static void o1_submit(o1 *x) {
  int i = x->submitted++;
  o1_call *c = &x->calls[i];
  snprintf(c->key, sizeof c->key, "o1-%d", i);
  pthread_mutex_lock(&x->mu);
  c->gen = resil_registry_generation(x->reg);
  pthread_mutex_unlock(&x->mu);
  int rc;
  if (x->wrong) {
    rc = wrong_attempt(x, i);
  } else {
    o1_ref *ref = malloc(sizeof *ref);
    resil_http_args args;
    resil_http_args_init(&args);
    args.idempotency_key = c->key;
    resil_error err;
    rc = -1;
    if (ref) {
      ref->x = x;
      ref->i = i;
      if (resil_registry_engine_call(x->reg, x->e, "o1", "fail", &args, NULL, o1_done, ref, NULL,
                                     &err) == RESIL_OK)
        rc = 0;
      else {
        snprintf(x->err, sizeof x->err, "%s", err.msg);
        free(ref);
      }
    }
  }
  if (rc != 0) {
    /* Not submitted: counted, and the run goes on without it. */
    x->submit_errors++;
    c->ended = 1;
    x->completed++;
    if (x->completed == O1_CALLS) resil_loop_stop(x->loop);
  }
}

static int o1_run(lab_result *r, int wrong) {
  o1 *x = calloc(1, sizeof *x);
  if (!lab_check(r, x != NULL, "out of memory")) return 0;
  x->wrong = wrong;
  pthread_mutex_init(&x->mu, NULL);
  char eb[256];
  const char *tmp = getenv("TMPDIR");
  snprintf(x->dir, sizeof x->dir, "%s/resil-o1-XXXXXX",
           tmp && *tmp && strlen(tmp) < 32 ? tmp : "/tmp");
  if (!lab_check(r, resil_fixture_start(NULL, &x->fx, eb, sizeof eb) == 0, "fixture: %s", eb))
    goto out;
  if (!lab_check(r, mkdtemp(x->dir) != NULL, "mkdtemp: %s", strerror(errno))) goto out;
  snprintf(x->path, sizeof x->path, "%s/o1.yaml", x->dir);
  if (!lab_check(r, write_gen(x, 1) == 0, "write %s: %s", x->path, strerror(errno))) goto out;
  resil_registry_error re;
  resil_registry_error_init(&re);
  if (!lab_check(r, resil_registry_load_file(x->path, &x->reg, &re) == RESIL_OK, "load: %s",
                 re.message))
    goto out;
  resil_event_sink_config sc;
  resil_event_sink_config_init(&sc);
  sc.fn = on_line;
  sc.user = x;
  if (!lab_check(r, resil_event_sink_new(&sc, &x->sink, NULL) == RESIL_OK, "event sink"))
    goto out;
  resil_registry_events_attach(x->reg, x->sink);
  if (!lab_check(r, resil_loop_new(NULL, &x->loop) == RESIL_OK &&
                        resil_loop_adapter_new(x->loop, &x->ad) == RESIL_OK,
                 "built-in loop"))
    goto out;
  resil_engine_config ec;
  resil_engine_config_init(&ec);
  ec.adapter = x->ad;
  /* The engine's client is fixed: one lease on it for the engine's life
   * (the reloads keep it, its settings never change). */
  ec.client = resil_registry_acquire(x->reg, RESIL_REG_HTTP_CLIENT, "fx", &x->client_lease);
  resil_error err;
  if (!lab_check(r, resil_engine_new(&ec, &x->e, &err) == RESIL_OK, "engine: %s", err.msg))
    goto out;
  for (int i = 0; i < O1_WINDOW; i++) o1_submit(x);
  if (!lab_check(r, resil_loop_run(x->loop) == RESIL_OK, "loop")) goto out;

  int mixed = 0, ended_twice = 0, events = 0, bad_wait = 0;
  for (int i = 0; i < O1_CALLS; i++) {
    o1_call *c = &x->calls[i];
    if (c->ended > 1) ended_twice++;
    events += c->events;
    bad_wait += c->bad_wait;
    if (c->events != gen_attempts(c->gen) || c->bad_wait) mixed++;
  }
  lab_obs_str(r, "path", wrong ? "per-attempt lookups by name, no lease"
                               : "resil_registry_engine_call (one lease per call)");
  lab_obs_int(r, "calls", x->submitted);
  lab_obs_int(r, "attempts", x->attempts);
  lab_obs_str(r, "outcome", x->outcome);
  lab_obs_int(r, "completed", x->completed - x->submit_errors);
  lab_obs_int(r, "ended_twice", ended_twice);
  lab_obs_int(r, "submit_errors", x->submit_errors);
  lab_obs_int(r, "reloads", x->reloads);
  lab_obs_int(r, "reload_errors", x->reload_errors);
  lab_obs_int(r, "generation", (long long)resil_registry_generation(x->reg));
  lab_obs_int(r, "mixed_generation_calls", mixed);
  lab_obs_int(r, "calls_with_a_wrong_wait", bad_wait);
  lab_obs_int(r, "attempt_events", events);
  lab_obs_int(r, "stray_events", x->stray_events);
  lab_summary(r,
              "%d calls on the engine, %d completed, %d reloads with calls in flight: "
              "%d mixed generations, %d attempt events",
              x->submitted, x->completed - x->submit_errors, x->reloads, mixed, events);
  lab_expect(r, "every_call_completes_once",
             x->submitted == O1_CALLS && x->completed - x->submit_errors == O1_CALLS &&
                 ended_twice == 0,
             "%d of %d calls completed (%d twice, %d not submitted: %s)",
             x->completed - x->submit_errors, O1_CALLS, ended_twice, x->submit_errors, x->err);
  lab_expect(r, "reloads_done", x->reloads == O1_RELOADS && x->reload_errors == 0,
             "%d reloads, %d failed", x->reloads, x->reload_errors);
  lab_expect(r, "no_mixed_generations", mixed == 0,
             "%d calls whose attempts or waits are not their generation's retry's", mixed);
  lab_expect(r, "attempt_events_seen", events > 0, "no attempt event reached the sink");
out:
  if (x->e) resil_engine_free(x->e);
  if (x->ad) resil_loop_adapter_free(x->ad);
  if (x->loop) resil_loop_free(x->loop);
  resil_registry_release(x->client_lease);
  if (x->reg) resil_registry_free(x->reg);
  if (x->sink) resil_event_sink_free(x->sink);
  if (x->fx) resil_fixture_stop(x->fx);
  if (x->path[0]) unlink(x->path);
  if (x->path[0]) rmdir(x->dir);
  pthread_mutex_destroy(&x->mu);
  free(x);
  return r->pass;
}

static int o1_right(lab_result *r) { return o1_run(r, 0); }
static int o1_wrong(lab_result *r) { return o1_run(r, 1); }

const lab_experiment lab_registry_experiments[] = {
    {"O1", "a registry chain drives 1,000 engine calls across 20 reloads, none mixes generations",
     o1_right, o1_wrong, "instances looked up by name per attempt, without a lease",
     "no_mixed_generations", 0},
    {NULL, NULL, NULL, NULL, NULL, NULL, 0}};

#else /* the built-in loop, the fixture or libresil-config is not built */

const lab_experiment lab_registry_experiments[] = {{NULL, NULL, NULL, NULL, NULL, NULL, 0}};

#endif
