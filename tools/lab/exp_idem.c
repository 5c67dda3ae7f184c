/* Lab experiments I1-I8 (DESIGN §7): idempotent operations on a durable
 * operation store. I1-I7 drive the fixture upstream started with a fresh
 * SQLite file in a temporary directory (I6 also PostgreSQL when
 * RESIL_TEST_PG_URI names a database); I8 runs `resil upstream` as a separate OS
 * process that kills itself with SIGKILL inside an operation, restarts it on
 * the same file and recovers. Effects are rows of the payments table, read
 * from the database, never counters in memory.
 *
 * Every experiment runs on both paths (lab_result.path). On the blocking
 * path the client calls are resil_http_call(); on the engine path each of
 * them is submitted to the async engine (lab_engine.c, a built-in loop
 * driven on the experiment's thread): a call carrying an idempotency key
 * through resil_engine_call_keyed() (the engine's recovery flow), any
 * other (the status GETs, POST /__recover) through resil_engine_call().
 * The lab's write endpoints name no status endpoint, as on the blocking
 * path where resil_http_call() asks none: the keyed flow then makes no
 * status query and its retry drives the writes (http.h: "behaves as
 * resil_http_call()"), so both paths measure the same thing; the status
 * queries of I3 (and of every experiment) are explicit GETs of
 * /operations/{key}, a resil_engine_call() of op_status. The keyed flow
 * with status queries is A7's (exp_async_keyed.c). Server-side parts (the
 * stores, the fixture, I8's child processes) are the same on both paths.
 * On the engine path the check ran_on_engine fails unless every client
 * call of the experiment went through the engine. */
#include "lab_result.h"
#include "lab_families.h"
#include "lab_ops.h"
#include "lab_engine.h"

#if defined(RESIL_HAVE_FIXTURE) && defined(RESIL_HAVE_STORE)

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <sqlite3.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "fixture/fixture.h"
#include "resil/http.h"
#include "resil/resil.h"
#include "resil/store.h"

extern char **environ;

#define MS(x) ((int64_t)(x) * INT64_C(1000000))

static const resil_http_endpoint idem_endpoints[] = {
    {.struct_size = sizeof(resil_http_endpoint), .name = "idem_post", .method = RESIL_HTTP_POST, .path = "/idem/{name}",
     .query = "sleep_ms={ms}", .idempotency_key = RESIL_HTTP_KEY_SEND,
     .content_type = "application/json"},
    {.struct_size = sizeof(resil_http_endpoint), .name = "idem_hold", .method = RESIL_HTTP_POST, .path = "/idem/{name}",
     .query = "pending_ms={hold}", .idempotency_key = RESIL_HTTP_KEY_SEND,
     .content_type = "application/json"},
    {.struct_size = sizeof(resil_http_endpoint), .name = "idem_fail", .method = RESIL_HTTP_POST, .path = "/idem/{name}",
     .query = "fail_before_terminal=1", .idempotency_key = RESIL_HTTP_KEY_SEND,
     .content_type = "application/json"},
    {.struct_size = sizeof(resil_http_endpoint), .name = "idem_close", .method = RESIL_HTTP_POST, .path = "/idem-close",
     .idempotency_key = RESIL_HTTP_KEY_SEND,
     .content_type = "application/json"},
    {.struct_size = sizeof(resil_http_endpoint), .name = "op_status", .path = "/operations/{key}",
     .response_codec = RESIL_HTTP_CODEC_JSON},
    {.struct_size = sizeof(resil_http_endpoint), .name = "recover", .method = RESIL_HTTP_POST, .path = "/__recover",
     .response_codec = RESIL_HTTP_CODEC_JSON},
    /* resil upstream (I8) */
    {.struct_size = sizeof(resil_http_endpoint), .name = "pay", .method = RESIL_HTTP_POST, .path = "/payments",
     .idempotency_key = RESIL_HTTP_KEY_SEND,
     .content_type = "application/json"},
};

static const char *fmt(const resil_outcome *o, char *b, size_t n) {
  return resil_outcome_format(o, b, n);
}

/* What an experiment's calls took, for ran_on_engine. */
typedef struct idem_tally {
  size_t calls;        /* client calls the experiment made (call()) */
  size_t engine_calls; /* of them, accepted by an engine (lab_engine_calls) */
} idem_tally;

/* The client side of an experiment: the blocking client and, on the
 * engine path, an engine on it that every call goes to. */
typedef struct idem_cli {
  resil_http_client *c;
  lab_engine *le; /* NULL on the blocking path */
  idem_tally *tally;
  lab_result *r; /* --metrics / --events (lab_ops.h) */
} idem_cli;

static int client_new(lab_result *r, const char *base, int64_t timeout_ns, idem_tally *tally,
                      idem_cli *out) {
  memset(out, 0, sizeof *out);
  out->tally = tally;
  out->r = r;
  resil_http_client_config cfg;
  resil_http_client_config_init(&cfg);
  cfg.base_url = base;
  cfg.endpoints = idem_endpoints;
  cfg.endpoint_count = sizeof idem_endpoints / sizeof idem_endpoints[0];
  cfg.max_connections = 32;
  cfg.max_connections_per_host = 32;
  cfg.response_timeout_ns = timeout_ns;
  lab_ops_client_config(r, &cfg, "client"); /* its name, the event log */
  resil_error err;
  if (!lab_check(r, resil_http_client_new(&cfg, &out->c, &err) == RESIL_OK, "client: %s",
                 err.msg))
    return 0;
#ifdef RESIL_HAVE_LOOP
  if (r->path == LAB_PATH_ENGINE && !(out->le = lab_engine_open(r, out->c))) return 0;
#endif
  return 1;
}

static void client_free(idem_cli *cl) {
  if (cl->r) { /* --metrics: the client's figures before it goes */
    lab_ops_add_client(cl->r, "client", cl->c);
    lab_capture(cl->r);
  }
#ifdef RESIL_HAVE_LOOP
  if (cl->tally) cl->tally->engine_calls += lab_engine_calls(cl->le);
  lab_engine_close(cl->le);
#endif
  resil_http_client_free(cl->c);
  cl->le = NULL;
  cl->c = NULL;
}

/* On the engine path: every client call the experiment made went through
 * an engine, so that a silent fallback to the blocking path cannot pass.
 * Call it after the clients are freed (their engines counted). */
static void expect_engine(lab_result *r, const idem_tally *t) {
  if (r->path != LAB_PATH_ENGINE) return;
  lab_obs_int(r, "engine_calls", (long long)t->engine_calls);
  lab_expect(r, "ran_on_engine", t->calls > 0 && t->engine_calls == t->calls,
             "%zu of the experiment's %zu client calls went through the engine",
             t->engine_calls, t->calls);
}

/* ---- a fixture on a store in a temporary directory ----------------------- */

typedef struct idem_env {
  char dir[64];
  char db[128];
  char uri[256];
  resil_fixture *fx;
  idem_cli cl;
  idem_tally tally;
  char base[64];
} idem_env;

static int env_dir(lab_result *r, idem_env *e) {
  memset(e, 0, sizeof *e);
  const char *tmp = getenv("TMPDIR");
  snprintf(e->dir, sizeof e->dir, "%s/resil-lab-XXXXXX",
           tmp && *tmp && strlen(tmp) < 32 ? tmp : "/tmp");
  if (!lab_check(r, mkdtemp(e->dir) != NULL, "mkdtemp: %s", strerror(errno)))
    return 0;
  snprintf(e->db, sizeof e->db, "%s/ops.db", e->dir);
  snprintf(e->uri, sizeof e->uri, "sqlite:%s", e->db);
  return 1;
}

/* Removes the database files and the directory (the evidence is in the
 * observations). */
static void env_remove(idem_env *e) {
  if (!e->dir[0])
    return;
  static const char *const suffix[] = {"", "-wal", "-shm", "-journal"};
  char p[160];
  for (size_t i = 0; i < sizeof suffix / sizeof suffix[0]; i++) {
    snprintf(p, sizeof p, "%s%s", e->db, suffix[i]);
    unlink(p);
  }
  rmdir(e->dir);
}

/* Starts the fixture on e->uri (a PostgreSQL URI when uri is given). */
static int env_start(lab_result *r, idem_env *e, const char *uri, int unsafe,
                     int64_t timeout_ns) {
  resil_fixture_config fc;
  resil_fixture_config_init(&fc);
  fc.store_uri = uri ? uri : e->uri;
  fc.store_unsafe_commit_effect_early = unsafe;
  char eb[512];
  if (!lab_check(r, resil_fixture_start(&fc, &e->fx, eb, sizeof eb) == 0,
                 "fixture: %s", eb))
    return 0;
  snprintf(e->base, sizeof e->base, "%s", resil_fixture_url(e->fx));
  return client_new(r, e->base, timeout_ns, &e->tally, &e->cl);
}

static void env_stop(idem_env *e) {
#ifdef RESIL_HAVE_STORE
  if (e->cl.r && e->fx) /* --metrics: the fixture's store, captured with the client */
    lab_ops_add_store(e->cl.r, "store", resil_fixture_store(e->fx));
#endif
  client_free(&e->cl);
  resil_fixture_stop(e->fx);
  e->fx = NULL;
}

/* kv (a NULL-terminated name/value list, at most 4 pairs), key and body
 * (JSON text) as resil_http_args in *a, ps its storage. */
static void make_args(resil_http_args *a, resil_http_param ps[4], const char *const *kv,
                      const char *key, const char *body) {
  size_t n = 0;
  for (; kv && kv[2 * n] && n < 4; n++) {
    ps[n].name = kv[2 * n];
    ps[n].value = kv[2 * n + 1];
  }
  resil_http_args_init(a);
  a->params = ps;
  a->param_count = n;
  a->idempotency_key = key;
  if (body) {
    a->body = body;
    a->body_len = strlen(body);
  }
}

/* One client call: kv is a NULL-terminated name/value list, body JSON
 * text. Blocking path: resil_http_call(). Engine path: with a key,
 * resil_engine_call_keyed(); without, resil_engine_call(). */
static resil_outcome call(idem_cli *cl, const char *ep, const char *const *kv, const char *key,
                          const char *body, resil_retry *rt, resil_http_response **out) {
  if (cl->tally) cl->tally->calls++;
  resil_http_param ps[4];
  resil_http_args args;
  make_args(&args, ps, kv, key, body);
#ifdef RESIL_HAVE_LOOP
  if (cl->le && key) return lab_engine_call_keyed(cl->le, ep, &args, rt, NULL, NULL, out);
  if (cl->le) return lab_engine_call(cl->le, ep, &args, rt, NULL, out);
#endif
  return resil_http_call(cl->c, ep, &args, rt, NULL, out);
}

#define KV(...) ((const char *const[]){__VA_ARGS__, NULL})

/* GET /operations/{key}: the state ("UNKNOWN" on 404), the effects the
 * fixture counted from the payments table (-1 when absent) and the HTTP
 * status (0 when none came back). */
typedef struct op_view {
  char state[16];
  long effects;
  int http;
  char body[256];
} op_view;

static op_view op_status(idem_cli *c, const char *key) {
  op_view v = {.effects = -1};
  snprintf(v.state, sizeof v.state, "NONE");
  resil_http_response *resp = NULL;
  resil_outcome o = call(c, "op_status", KV("key", key), NULL, NULL, NULL, &resp);
  v.http = o.http_status;
  json_t *j = resil_http_response_json(resp);
  const char *st = json_string_value(json_object_get(j, "state"));
  if (st)
    snprintf(v.state, sizeof v.state, "%s", st);
  json_t *e = json_object_get(j, "effects");
  if (json_is_integer(e))
    v.effects = (long)json_integer_value(e);
  const char *b = json_string_value(json_object_get(j, "body"));
  if (b)
    snprintf(v.body, sizeof v.body, "%s", b);
  resil_http_response_free(resp);
  return v;
}

/* The number POST /__recover said it recovered, -1 when it failed. */
static long recovered_of(resil_outcome o, const resil_http_response *resp) {
  json_t *n = json_object_get(resil_http_response_json(resp), "recovered");
  return o.http_status == 200 && json_is_integer(n) ? (long)json_integer_value(n) : -1;
}

/* POST /__recover: the number recovered, -1 when it failed. */
static long recover(idem_cli *c) {
  resil_http_response *resp = NULL;
  resil_outcome o = call(c, "recover", NULL, NULL, NULL, NULL, &resp);
  long v = recovered_of(o, resp);
  resil_http_response_free(resp);
  return v;
}

static resil_retry *fixed_retry(uint32_t attempts, int64_t wait_ns) {
  resil_retry_config c;
  resil_retry_config_init(&c);
  c.max_attempts = attempts;
  c.backoff = RESIL_RETRY_FIXED;
  c.wait_ns = wait_ns;
  resil_retry *rt = NULL;
  return resil_retry_new(&c, &rt, NULL) == RESIL_OK ? rt : NULL;
}

static int is_replay(const resil_http_response *resp) {
  const char *h = resil_http_response_header(resp, "Idempotent-Replayed");
  return h && strcmp(h, "true") == 0;
}

typedef struct newkey {
  idem_cli *cl;
  const char *name; /* the {name} of /idem/{name} */
  char keys[3][80];
  int n;
} newkey;

/* The bug under test: a fresh key for every attempt (the endpoint generates
 * one per logical call, and each attempt here is a new logical call), while
 * the retry layer is told the key is stable. On the engine path each
 * attempt is its own resil_engine_call() (no key given: the engine
 * generates one per call, read back from the response), run to completion
 * on the loop; the retry (resil_retry_run) sleeps between them on this
 * thread, with nothing in flight on the loop. */
static resil_outcome attempt_with_new_key(void *arg, const resil_ctx *ctx) {
  newkey *nk = arg;
  resil_http_param ps[4];
  resil_http_args args;
  make_args(&args, ps, KV("name", nk->name, "ms", "500"), NULL, "{\"amount\":1}");
  if (nk->cl->tally) nk->cl->tally->calls++;
#ifdef RESIL_HAVE_LOOP
  if (nk->cl->le) {
    resil_http_response *resp = NULL;
    resil_outcome o = lab_engine_call(nk->cl->le, "idem_post", &args, NULL, ctx, &resp);
    const char *k = resil_http_response_idempotency_key(resp);
    if (nk->n < 3 && k) snprintf(nk->keys[nk->n++], sizeof nk->keys[0], "%s", k);
    resil_http_response_free(resp);
    return o;
  }
#endif
  resil_http_request *req = NULL;
  if (resil_http_request_new(nk->cl->c, "idem_post", &args, &req, NULL) != RESIL_OK)
    return resil_outcome_make(RESIL_NOT_SENT, RESIL_REASON_LOCAL_ERROR);
  if (nk->n < 3)
    snprintf(nk->keys[nk->n++], sizeof nk->keys[0], "%s",
             resil_http_request_idempotency_key(req));
  resil_outcome o = resil_http_request_attempt(req, ctx);
  resil_http_request_free(req);
  return o;
}

/* ---- I1 ------------------------------------------------------------------ */
/* I1's client timeout: well before the server's answer (1 s after its
 * commit), well after its commit. The wrong variant's server answers 500
 * ms after each commit: its attempts give up after 300 ms. */
#define I1_TIMEOUT_MS 600
#define I1_WRONG_TIMEOUT_MS 300
/* I1; the wrong variant makes every attempt a new logical call with a new
 * key (I2's bug) while the retry is told the key is stable. */
static int i1_run(lab_result *r, int new_key_per_attempt) {
  idem_env e;
  resil_retry *rt = fixed_retry(3, MS(30));
  if (!lab_check(r, rt != NULL, "retry setup") || !env_dir(r, &e))
    goto out;
  /* The client gives up after I1_TIMEOUT_MS, the server answers 1 s after
   * its commit: the commit (two flushed SQLite commits) must land inside
   * the first attempt's timeout even on a loaded machine under a sanitizer
   * (150 ms, then 300 ms, were too tight there with other tests' fsyncs
   * queued on the same disk: the retry met the key still PENDING, a 409,
   * and needed a third attempt). */
  const int timeout_ms = new_key_per_attempt ? I1_WRONG_TIMEOUT_MS : I1_TIMEOUT_MS;
  if (!env_start(r, &e, NULL, 0, MS(timeout_ms)))
    goto stop;
  resil_http_response *resp = NULL;
  resil_outcome o;
  if (new_key_per_attempt) {
    newkey nk = {.cl = &e.cl, .name = "i1"};
    resil_ctx ctx;
    resil_ctx_init(&ctx);
    ctx.flags = RESIL_CALL_STABLE_KEY;
    o = resil_retry_run(rt, &ctx, attempt_with_new_key, &nk);
  } else {
    o = call(&e.cl, "idem_post", KV("name", "i1", "ms", "1000"), "i1-stable-key",
             "{\"amount\":1}", rt, &resp);
  }
  int replayed = is_replay(resp);
  resil_http_response_free(resp);
  long seen = resil_fixture_attempts(e.fx, "idem");
  long eff = resil_fixture_effects(e.fx, "idem");
  op_view v = op_status(&e.cl, "i1-stable-key");
  char ob[96];
  lab_obs_str(r, "outcome", fmt(&o, ob, sizeof ob));
  lab_obs_int(r, "attempts", seen);
  lab_obs_int(r, "retry_attempts", o.attempts);
  lab_obs_int(r, "effects", eff);
  lab_obs_str(r, "status", v.state);
  lab_obs_int(r, "status_effects", v.effects);
  lab_obs_bool(r, "second_attempt_replayed", replayed);
  lab_summary(r, "%s, server commits then sleeps %d ms, timeout %d ms, retry 3: %s after %ld attempts, effects %ld (payments table), status %s:%ld, replayed %s",
              new_key_per_attempt ? "new key per attempt" : "stable key",
              new_key_per_attempt ? 500 : 1000, timeout_ms, ob, seen, eff,
              v.state, v.effects, replayed ? "yes" : "no");
  lab_expect(r, "answered_201", o.http_status == 201, "outcome %s", ob);
  lab_expect(r, "two_attempts", seen == 2 && o.attempts == 2,
             "%ld attempts (retry says %u), expected 2", seen, o.attempts);
  lab_expect(r, "one_effect", eff == 1 && v.effects == 1, "effects %ld / %ld, expected 1",
             eff, v.effects);
  lab_expect(r, "committed", strcmp(v.state, "COMMITTED") == 0, "status %s", v.state);
  lab_expect(r, "replayed", replayed, "the second attempt was not a replay");
stop:
  env_stop(&e);
  expect_engine(r, &e.tally);
  env_remove(&e);
out:
  resil_retry_free(rt);
  return r->pass;
}

static int i1(lab_result *r) { return i1_run(r, 0); }
static int i1_wrong(lab_result *r) { return i1_run(r, 1); }

/* ---- I2 ------------------------------------------------------------------ */
/* The wrong variant does it right: one stable key for every attempt. */
static int i2_run(lab_result *r, int stable_key) {
  idem_env e;
  resil_retry *rt = fixed_retry(3, MS(30));
  if (!lab_check(r, rt != NULL, "retry setup") || !env_dir(r, &e))
    goto out;
  if (!env_start(r, &e, NULL, 0, MS(150)))
    goto stop;
  newkey nk = {.cl = &e.cl, .name = "i2"};
  resil_ctx ctx;
  resil_ctx_init(&ctx);
  ctx.flags = RESIL_CALL_STABLE_KEY;
  resil_outcome o = stable_key ? call(&e.cl, "idem_post", KV("name", "i2", "ms", "500"),
                                      "i2-stable-key", "{\"amount\":1}", rt, NULL)
                               : resil_retry_run(rt, &ctx, attempt_with_new_key, &nk);
  long seen = resil_fixture_attempts(e.fx, "idem");
  /* The server commits before it sleeps; on a loaded machine the last
   * commit may still be running when the client gives up. */
  long eff = resil_fixture_effects(e.fx, "idem");
  for (int waited = 0; eff < nk.n && waited < 2000; waited += 10) {
    struct timespec ts = {0, 10 * 1000000L};
    nanosleep(&ts, NULL);
    eff = resil_fixture_effects(e.fx, "idem");
  }
  long per_key = 0;
  for (int i = 0; i < nk.n; i++) {
    op_view v = op_status(&e.cl, nk.keys[i]);
    if (strcmp(v.state, "COMMITTED") == 0 && v.effects == 1)
      per_key++;
  }
  char ob[96];
  lab_obs_str(r, "outcome", fmt(&o, ob, sizeof ob));
  lab_obs_int(r, "attempts", seen);
  lab_obs_int(r, "effects", eff);
  lab_obs_int(r, "distinct_keys", nk.n);
  lab_obs_int(r, "keys_committed", per_key);
  lab_summary(r, "new key per attempt, same timeouts: %s after %ld attempts, effects %ld: %d keys, each COMMITTED once, and the call still failed",
              ob, seen, eff, nk.n);
  lab_check(r, seen == 3 && o.attempts == 3, "%ld attempts, expected 3", seen);
  lab_expect(r, "three_effects", eff == 3 && per_key == 3,
             "effects %ld (%ld keys committed), expected 3", eff,
            per_key);
  lab_check(r, o.kind == RESIL_UNKNOWN, "outcome %s, expected UNKNOWN", ob);
stop:
  env_stop(&e);
  expect_engine(r, &e.tally);
  env_remove(&e);
out:
  resil_retry_free(rt);
  return r->pass;
}

static int i2(lab_result *r) { return i2_run(r, 0); }
static int i2_wrong(lab_result *r) { return i2_run(r, 1); }

/* ---- I3 ------------------------------------------------------------------ */
/* The sweep runs an hour after the operations, as an operator's job would,
 * on a store whose clock reads an hour later: the correct retention is 30
 * minutes, the wrong variant's a day (both in nanoseconds, as
 * resil_store_sweep takes them), so it keeps the committed operation. */
static int i3_run(lab_result *r, int64_t retention_ns) {
  idem_env e;
  if (!env_dir(r, &e))
    return 0;
  resil_store *ops = NULL;
  resil_manual_clock *later = NULL;
  if (!env_start(r, &e, NULL, 0, MS(5000)))
    goto stop;
  resil_outcome o = call(&e.cl, "idem_post", KV("name", "i3", "ms", "0"), "op-status",
                         "{\"amount\":1}", NULL, NULL);
  op_view done = op_status(&e.cl, "op-status");
  op_view missing = op_status(&e.cl, "op-missing");
  long eff = resil_fixture_effects(e.fx, "idem");
  /* Key expiry: a retention sweep (as an operator's job would run it)
   * deletes terminal operations; PENDING ones are kept. Afterwards the
   * committed key is UNKNOWN although its effect is in the table, and the
   * same key runs the effect again. */
  call(&e.cl, "idem_fail", KV("name", "i3"), "op-pending", "{\"amount\":1}", NULL, NULL);
  uint32_t swept = 0;
  resil_store_config sc;
  resil_store_config_init(&sc);
  int sweep_ok =
      resil_manual_clock_new(0, resil_clock_wall_ms(NULL) + RESIL_H(1) / RESIL_MS(1),
                             &later) == RESIL_OK;
  if (sweep_ok) sc.clock = resil_manual_clock_get(later);
  sweep_ok = sweep_ok && resil_store_open(e.uri, &sc, &ops, NULL) == RESIL_OK &&
             resil_store_sweep(ops, retention_ns, 1000, &swept) == RESIL_OK;
  op_view expired = op_status(&e.cl, "op-status");
  op_view kept = op_status(&e.cl, "op-pending");
  long eff_expired = resil_fixture_effects(e.fx, "idem");
  resil_outcome again = call(&e.cl, "idem_post", KV("name", "i3", "ms", "0"), "op-status",
                             "{\"amount\":1}", NULL, NULL);
  long eff_reused = resil_fixture_effects(e.fx, "idem");
  char ob[96];
  lab_obs_str(r, "outcome", fmt(&o, ob, sizeof ob));
  lab_obs_int(r, "attempts", resil_fixture_attempts(e.fx, "idem"));
  lab_obs_int(r, "effects", eff);
  lab_obs_str(r, "committed_key_state", done.state);
  lab_obs_int(r, "committed_key_http", done.http);
  lab_obs_str(r, "unknown_key_state", missing.state);
  lab_obs_int(r, "unknown_key_http", missing.http);
  lab_obs_int(r, "retention_min", retention_ns / RESIL_MIN(1));
  lab_obs_int(r, "swept", swept);
  lab_obs_str(r, "expired_key_state", expired.state);
  lab_obs_int(r, "expired_key_http", expired.http);
  lab_obs_int(r, "effects_after_expiry", eff_expired);
  lab_obs_str(r, "pending_key_after_sweep", kept.state);
  lab_obs_int(r, "reused_expired_key_http", again.http_status);
  lab_obs_int(r, "effects_after_reuse", eff_reused);
  lab_summary(r, "GET /operations/op-status -> %d %s:%ld; GET /operations/op-missing -> %d %s (not \"did not happen\"); after a retention sweep an hour later (retention %lld min: %u deleted, PENDING kept: %s) op-status -> %d %s with %ld effect in the table, and the same key runs again: %d, effects %ld",
              done.http, done.state, done.effects, missing.http, missing.state,
              (long long)(retention_ns / RESIL_MIN(1)), swept, kept.state,
              expired.http, expired.state, eff_expired, again.http_status, eff_reused);
  lab_check(r, o.http_status == 201, "POST: %s", ob);
  lab_check(r, done.http == 200 && strcmp(done.state, "COMMITTED") == 0, "committed key: %d %s",
            done.http, done.state);
  lab_check(r, missing.http == 404 && strcmp(missing.state, "UNKNOWN") == 0,
            "unknown key: %d %s", missing.http, missing.state);
  lab_expect(r, "sweep_deletes_terminal", sweep_ok && swept == 1, "sweep: ok %d, %u deleted",
             sweep_ok, swept);
  lab_check(r, expired.http == 404 && eff_expired == 1,
            "expired key: %d %s with %ld effects", expired.http, expired.state, eff_expired);
  lab_check(r, strcmp(kept.state, "PENDING") == 0, "PENDING key after the sweep: %s",
            kept.state);
  lab_check(r, again.http_status == 201 && eff_reused == 2,
            "reused expired key: %d, effects %ld", again.http_status, eff_reused);
stop:
  lab_ops_add_store(r, "sweep_store", ops); /* --metrics (lab_ops.h) */
  lab_capture(r);
  resil_store_close(ops);
  resil_manual_clock_free(later);
  env_stop(&e);
  expect_engine(r, &e.tally);
  env_remove(&e);
  return r->pass;
}

static int i3(lab_result *r) { return i3_run(r, RESIL_MIN(30)); }
static int i3_wrong(lab_result *r) { return i3_run(r, RESIL_H(24)); }

/* ---- I4 ------------------------------------------------------------------ */
/* The wrong variant replays with another key. */
static int i4_run(lab_result *r, int other_key) {
  idem_env e;
  if (!env_dir(r, &e))
    return 0;
  if (!env_start(r, &e, NULL, 0, MS(5000)))
    goto stop;
  const char *body = "{\"amount\":1}";
  resil_outcome first = call(&e.cl, "idem_close", NULL, "i4-key", body, NULL, NULL);
  op_view v = op_status(&e.cl, "i4-key");
  resil_http_response *resp = NULL;
  resil_outcome replay = call(&e.cl, "idem_close", NULL, other_key ? "i4-other-key" : "i4-key",
                              body, NULL, &resp);
  size_t blen = 0;
  const char *rb = resp ? resil_http_response_body(resp, &blen) : "";
  int same_bytes = blen == strlen(v.body) && memcmp(rb, v.body, blen) == 0;
  int replayed = is_replay(resp);
  resil_http_response_free(resp);
  op_view after = op_status(&e.cl, "i4-key");
  long eff = resil_fixture_effects(e.fx, "idem_close");
  char o1[96], o2[96];
  lab_obs_str(r, "outcome", fmt(&first, o1, sizeof o1));
  lab_obs_int(r, "attempts", resil_fixture_attempts(e.fx, "idem_close"));
  lab_obs_int(r, "effects", eff);
  lab_obs_str(r, "status", v.state);
  lab_obs_int(r, "status_effects", v.effects);
  lab_obs_str(r, "replay_outcome", fmt(&replay, o2, sizeof o2));
  lab_obs_int(r, "replay_effects", after.effects);
  lab_obs_bool(r, "replay_same_bytes", same_bytes);
  lab_summary(r, "commit, then close before response headers: client %s; status %s:%ld; replay with the key -> %s (replayed %s, stored bytes %s) %s:%ld",
              o1, v.state, v.effects, o2, replayed ? "yes" : "no",
              same_bytes ? "identical" : "DIFFERENT", after.state, after.effects);
  lab_check(r, first.kind == RESIL_UNKNOWN, "first call %s, expected UNKNOWN", o1);
  lab_check(r, strcmp(v.state, "COMMITTED") == 0 && v.effects == 1, "status %s:%ld", v.state,
            v.effects);
  lab_check(r, replay.http_status == 201 && replayed && same_bytes, "replay %s", o2);
  lab_expect(r, "replay_same_effect",
             strcmp(after.state, "COMMITTED") == 0 && after.effects == 1 && eff == 1,
             "after replay %s:%ld (route effects %ld)", after.state, after.effects, eff);
stop:
  env_stop(&e);
  expect_engine(r, &e.tally);
  env_remove(&e);
  return r->pass;
}

static int i4(lab_result *r) { return i4_run(r, 0); }
static int i4_wrong(lab_result *r) { return i4_run(r, 1); }

/* ---- I5 and I7: rollback between effect and terminal state ---------------- */
typedef struct rollback_obs {
  resil_outcome first;
  op_view pending, reopened, recovered, again;
  int retry_http; /* the same key retried before recovery */
  long first_attempts; /* requests the first call made, as the server saw them */
  long rec1, rec2;
  int ok;
} rollback_obs;

/* The I5 sequence; unsafe opens the store with the effect committed early
 * (I7's bug). */
static void rollback_run(lab_result *r, idem_env *e, int unsafe,
                         rollback_obs *ob) {
  memset(ob, 0, sizeof *ob);
  const char *body = "{\"amount\":1}";
  if (!env_start(r, e, NULL, unsafe, MS(5000)))
    return;
  ob->first = call(&e->cl, "idem_fail", KV("name", "i5"), "i5-key", body, NULL, NULL);
  ob->first_attempts = resil_fixture_attempts(e->fx, "idem");
  ob->pending = op_status(&e->cl, "i5-key");
  ob->retry_http = call(&e->cl, "idem_post", KV("name", "i5", "ms", "0"), "i5-key",
                        body, NULL, NULL)
                       .http_status;
  /* Close everything: connections, server threads, the store's pool. */
  env_stop(e);
  if (!env_start(r, e, NULL, unsafe, MS(5000)))
    return;
  ob->reopened = op_status(&e->cl, "i5-key");
  ob->rec1 = recover(&e->cl);
  ob->recovered = op_status(&e->cl, "i5-key");
  ob->rec2 = recover(&e->cl);
  ob->again = op_status(&e->cl, "i5-key");
  ob->ok = 1;
}

/* The wrong variant's store commits the effect early (I7's bug). */
static int i5_run(lab_result *r, int unsafe) {
  idem_env e;
  if (!env_dir(r, &e))
    return 0;
  rollback_obs o;
  rollback_run(r, &e, unsafe, &o);
  if (o.ok) {
    char b[96];
    lab_obs_str(r, "outcome", fmt(&o.first, b, sizeof b));
    lab_obs_int(r, "attempts", o.first_attempts);
    lab_obs_int(r, "effects", o.again.effects);
    lab_obs_str(r, "status_after_rollback", o.pending.state);
    lab_obs_int(r, "effects_after_rollback", o.pending.effects);
    lab_obs_int(r, "retry_before_recovery_http", o.retry_http);
    lab_obs_str(r, "status_after_reopen", o.reopened.state);
    lab_obs_int(r, "effects_after_reopen", o.reopened.effects);
    lab_obs_int(r, "recovered_first", o.rec1);
    lab_obs_str(r, "status_after_recover", o.recovered.state);
    lab_obs_int(r, "effects_after_recover", o.recovered.effects);
    lab_obs_int(r, "recovered_second", o.rec2);
    lab_obs_int(r, "effects_after_second_recover", o.again.effects);
    lab_summary(r, "failure between effect and terminal state: %s, status %s:%ld (retry -> %d); reopened file: %s:%ld; recover (%ld) -> %s:%ld; recover again (%ld) -> %s:%ld",
                b, o.pending.state, o.pending.effects, o.retry_http, o.reopened.state,
                o.reopened.effects, o.rec1, o.recovered.state, o.recovered.effects, o.rec2,
                o.again.state, o.again.effects);
    lab_check(r, o.first.http_status == 500 && o.first_attempts == 1,
              "first call %s after %ld attempts, expected 500 after 1", b, o.first_attempts);
    lab_expect(r, "pending_no_effect",
               strcmp(o.pending.state, "PENDING") == 0 && o.pending.effects == 0,
               "after rollback %s:%ld, expected PENDING:0", o.pending.state, o.pending.effects);
    lab_check(r, o.retry_http == 409, "retry before recovery answered %d, expected 409",
              o.retry_http);
    lab_check(r, strcmp(o.reopened.state, "PENDING") == 0 && o.reopened.effects == 0,
              "after reopen %s:%ld", o.reopened.state, o.reopened.effects);
    lab_check(r, o.rec1 == 1 && strcmp(o.recovered.state, "COMMITTED") == 0 &&
                     o.recovered.effects == 1,
              "recover %ld -> %s:%ld", o.rec1, o.recovered.state, o.recovered.effects);
    lab_check(r, o.rec2 == 0 && o.again.effects == 1, "second recover %ld -> %ld effects",
              o.rec2, o.again.effects);
  }
  env_stop(&e);
  expect_engine(r, &e.tally);
  env_remove(&e);
  return r->pass;
}

static int i5(lab_result *r) { return i5_run(r, 0); }
static int i5_wrong(lab_result *r) { return i5_run(r, 1); }

/* The wrong variant runs it on the correct store: nothing to catch. */
static int i7_run(lab_result *r, int unsafe) {
  idem_env e;
  if (!env_dir(r, &e))
    return 0;
  rollback_obs o;
  rollback_run(r, &e, unsafe, &o);
  if (o.ok) {
    char b[96];
    /* The I5 invariant applied to the broken store: it must not hold. */
    int i5_holds = strcmp(o.pending.state, "PENDING") == 0 && o.pending.effects == 0 &&
                   o.again.effects == 1;
    lab_obs_str(r, "outcome", fmt(&o.first, b, sizeof b));
    lab_obs_int(r, "attempts", o.first_attempts);
    lab_obs_int(r, "effects", o.again.effects);
    lab_obs_str(r, "status_after_rollback", o.pending.state);
    lab_obs_int(r, "effects_after_rollback", o.pending.effects);
    lab_obs_int(r, "effects_after_recover", o.again.effects);
    lab_obs_bool(r, "caught", !i5_holds);
    lab_summary(r, "same test, store with unsafe_commit_effect_early: status %s:%ld (I5 expects PENDING:0), after recovery %ld effects: %s",
                o.pending.state, o.pending.effects, o.again.effects,
                i5_holds ? "NOT caught" : "caught");
    lab_check(r, strcmp(o.pending.state, "PENDING") == 0 && o.pending.effects == 1,
              "expected PENDING:1 from the broken store, got %s:%ld", o.pending.state,
              o.pending.effects);
    lab_expect(r, "caught", !i5_holds, "the I5 checks did not catch the early commit");
    lab_check(r, o.first_attempts == 1, "first call made %ld attempts, expected 1",
              o.first_attempts);
  }
  env_stop(&e);
  expect_engine(r, &e.tally);
  env_remove(&e);
  return r->pass;
}

static int i7(lab_result *r) { return i7_run(r, 1); }
static int i7_wrong(lab_result *r) { return i7_run(r, 0); }

/* ---- I6 ------------------------------------------------------------------ */
#define I6_POSTS 12

typedef struct i6_arg {
  /* A copy of the experiment's client without its tally (counted on the
   * engine path only, where no thread of these runs). */
  idem_cli cl;
  pthread_barrier_t *go;
  char key[64];
  int recovery;
  int http;
  int replayed;
  long recovered;
} i6_arg;

static void *i6_thread(void *p) {
  i6_arg *a = p;
  pthread_barrier_wait(a->go);
  if (a->recovery) {
    /* While the first request holds the operation PENDING (100 ms), so
     * that recovery and the owner race for the completion. */
    struct timespec ts = {0, 30 * 1000000L};
    nanosleep(&ts, NULL);
    a->recovered = recover(&a->cl);
    return NULL;
  }
  resil_http_response *resp = NULL;
  resil_outcome o = call(&a->cl, "idem_hold", KV("name", "i6", "hold", "100"), a->key,
                         "{\"amount\":1}", NULL, &resp);
  a->http = o.http_status;
  a->replayed = is_replay(resp);
  resil_http_response_free(resp);
  return NULL;
}

typedef struct i6_obs {
  long effects;       /* of the key, from its status */
  long route_effects; /* every payment the POSTs made */
  long attempts;      /* POSTs and the recovery, as the server saw them */
  char state[16];
  int fresh, replays, in_progress, other;
  long recovered, recovered_after;
  size_t peak_in_flight; /* engine path: transfers in libcurl at once */
} i6_obs;

/* The blocking path: 12 threads POST at once (a barrier), a 13th recovers
 * 30 ms later. */
static int i6_threads(lab_result *r, i6_arg *args) {
  pthread_barrier_t go;
  pthread_barrier_init(&go, NULL, I6_POSTS + 1);
  pthread_t th[I6_POSTS + 1];
  int started = 0;
  for (int i = 0; i <= I6_POSTS; i++) {
    args[i].go = &go;
    if (pthread_create(&th[i], NULL, i6_thread, &args[i]) != 0)
      break;
    started++;
  }
  if (started != I6_POSTS + 1) {
    /* The barrier would never open: run the missing parties here. */
    for (int i = started; i <= I6_POSTS; i++)
      pthread_barrier_wait(&go);
  }
  for (int i = 0; i < started; i++)
    pthread_join(th[i], NULL);
  pthread_barrier_destroy(&go);
  return lab_check(r, started == I6_POSTS + 1, "could not start %d threads", I6_POSTS + 1);
}

#ifdef RESIL_HAVE_LOOP
/* The engine path: the 12 POSTs are one lab_engine_run batch, 12 keyed
 * calls (resil_engine_call_keyed) in flight at once on one loop thread.
 * The recovery is the batch's 13th call, a plain one held back about 30 ms
 * by a rate-limiter reservation (one permit per 30 ms cycle, the first
 * cycle's taken just before the batch): the engine waits for the permit on
 * a loop timer where the blocking path's recovery thread sleeps. */
static int i6_engine(lab_result *r, idem_env *e, i6_arg *args, size_t *peak) {
  resil_ratelimiter_config rc;
  resil_ratelimiter_config_init(&rc);
  rc.limit_for_period = 1;
  rc.refresh_period_ns = MS(30);
  rc.timeout_ns = MS(1000);
  resil_ratelimiter *rl = NULL;
  if (!lab_check(r, resil_ratelimiter_new(&rc, &rl, NULL) == RESIL_OK &&
                        resil_ratelimiter_acquire(rl, 1, NULL, NULL) == RESIL_DECISION_GO,
                 "rate limiter setup")) {
    resil_ratelimiter_free(rl);
    return 0;
  }
  resil_engine_policies pol, held;
  resil_engine_policies_init(&pol);
  resil_engine_policies_init(&held);
  held.ratelimiter = rl;
  lab_engine_req q[I6_POSTS + 1];
  resil_http_param ps[I6_POSTS + 1][4];
  resil_http_args a[I6_POSTS + 1];
  memset(q, 0, sizeof q);
  for (int i = 0; i <= I6_POSTS; i++) {
    int rec = args[i].recovery;
    if (rec)
      make_args(&a[i], ps[i], NULL, NULL, NULL);
    else
      make_args(&a[i], ps[i], KV("name", "i6", "hold", "100"), args[i].key, "{\"amount\":1}");
    q[i].endpoint = rec ? "recover" : "idem_hold";
    q[i].args = &a[i];
    q[i].policies = rec ? &held : &pol;
    q[i].keyed = !rec;
  }
  e->tally.calls += I6_POSTS + 1;
  size_t done = lab_engine_run(e->cl.le, q, I6_POSTS + 1);
  *peak = resil_engine_peak_in_flight(lab_engine_engine(e->cl.le));
  for (int i = 0; i <= I6_POSTS; i++) {
    if (args[i].recovery) {
      args[i].recovered = recovered_of(q[i].outcome, q[i].response);
    } else {
      args[i].http = q[i].outcome.http_status;
      args[i].replayed = is_replay(q[i].response);
    }
    resil_http_response_free(q[i].response);
  }
  resil_ratelimiter_free(rl);
  return lab_check(r, done == I6_POSTS + 1, "engine: %zu of %d calls completed", done,
                   I6_POSTS + 1);
}
#endif

/* distinct_keys is the wrong variant: every POST carries its own key. */
static int i6_backend(lab_result *r, idem_env *e, const char *uri, const char *key,
                      int distinct_keys, i6_obs *ob) {
  memset(ob, 0, sizeof *ob);
  if (!env_start(r, e, uri, 0, MS(10000)))
    return 0;
  /* Count only this run's requests and payments (a PostgreSQL database
   * may hold earlier runs' rows). */
  resil_fixture_reset(e->fx);
  i6_arg args[I6_POSTS + 1];
  for (int i = 0; i <= I6_POSTS; i++) {
    args[i] = (i6_arg){.cl = e->cl, .recovery = i == I6_POSTS};
    args[i].cl.tally = NULL;
    if (distinct_keys)
      snprintf(args[i].key, sizeof args[i].key, "%s-%d", key, i);
    else
      snprintf(args[i].key, sizeof args[i].key, "%s", key);
  }
  int ran = 0;
#ifdef RESIL_HAVE_LOOP
  if (e->cl.le) ran = i6_engine(r, e, args, &ob->peak_in_flight);
  else
#endif
    ran = i6_threads(r, args);
  for (int i = 0; i < I6_POSTS; i++) {
    if (args[i].http == 201 && !args[i].replayed)
      ob->fresh++;
    else if (args[i].http == 201)
      ob->replays++;
    else if (args[i].http == 409)
      ob->in_progress++;
    else
      ob->other++;
  }
  ob->recovered = args[I6_POSTS].recovered;
  ob->attempts = resil_fixture_attempts(e->fx, "idem") + resil_fixture_attempts(e->fx, "recover");
  ob->recovered_after = recover(&e->cl);
  ob->route_effects = resil_fixture_effects(e->fx, "idem");
  op_view v = op_status(&e->cl, key);
  ob->effects = v.effects;
  snprintf(ob->state, sizeof ob->state, "%s", v.state);
  env_stop(e);
  return ran;
}

static int i6_run(lab_result *r, int distinct_keys) {
  idem_env e;
  if (!env_dir(r, &e))
    return 0;
  i6_obs sq, pg;
  int have_sq = i6_backend(r, &e, NULL, "i6-key", distinct_keys, &sq);
  const char *pg_uri = getenv("RESIL_TEST_PG_URI");
  int have_pg = 0;
  char pg_key[64];
  snprintf(pg_key, sizeof pg_key, "i6-%ld-%lld", (long)getpid(),
           (long long)resil_clock_wall_ms(NULL));
  if (pg_uri && *pg_uri)
    have_pg = i6_backend(r, &e, pg_uri, pg_key, distinct_keys, &pg);
  expect_engine(r, &e.tally);
  env_remove(&e);
  if (!have_sq)
    return 0;
  json_t *backends = json_object();
  const i6_obs *all[2] = {&sq, have_pg ? &pg : NULL};
  const char *names[2] = {"sqlite", "postgresql"};
  for (int i = 0; i < 2; i++) {
    if (!all[i])
      continue;
    json_object_set_new(
        backends, names[i],
        json_pack("{s:I,s:I,s:I,s:s,s:i,s:i,s:i,s:i,s:I,s:I}", "effects",
                  (json_int_t)all[i]->effects, "route_effects",
                  (json_int_t)all[i]->route_effects, "attempts",
                  (json_int_t)all[i]->attempts, "state", all[i]->state, "fresh",
                  all[i]->fresh, "replays", all[i]->replays, "in_progress",
                  all[i]->in_progress, "other", all[i]->other, "recovered_concurrently",
                  (json_int_t)all[i]->recovered, "recovered_after",
                  (json_int_t)all[i]->recovered_after));
  }
  lab_obs_json(r, "backends", backends);
  lab_obs_int(r, "attempts", sq.attempts);
  lab_obs_int(r, "effects", sq.route_effects);
  lab_obs_bool(r, "distinct_keys", distinct_keys);
  if (r->path == LAB_PATH_ENGINE) lab_obs_int(r, "peak_in_flight", (long long)sq.peak_in_flight);
  lab_obs_str(r, "outcome", sq.state);
  lab_obs_str(r, "postgresql", have_pg ? "ran" : "not run (set RESIL_TEST_PG_URI)");
  char pgs[160] = "PostgreSQL not run (set RESIL_TEST_PG_URI)";
  if (have_pg)
    snprintf(pgs, sizeof pgs, "PostgreSQL: %ld effect, %s (%d fresh, %d replays, %d x 409, recovery %ld)",
             pg.effects, pg.state, pg.fresh, pg.replays, pg.in_progress, pg.recovered);
  lab_summary(r, "12 concurrent POSTs with %s (held PENDING 100 ms) + 1 recovery at 30 ms: SQLite: %ld requests seen, %ld effect(s), key %s (%d fresh, %d replays, %d x 409, recovery %ld); %s",
              distinct_keys ? "a key each" : "one key", sq.attempts, sq.route_effects, sq.state,
              sq.fresh, sq.replays, sq.in_progress, sq.recovered, pgs);
  for (int i = 0; i < 2; i++) {
    if (!all[i])
      continue;
    lab_expect(r, "all_requests_seen", all[i]->attempts == I6_POSTS + 1,
               "%s: the server saw %ld requests, expected %d", names[i], all[i]->attempts,
               I6_POSTS + 1);
    lab_expect(r, "one_effect",
               all[i]->route_effects == 1 && all[i]->effects == 1 &&
                   strcmp(all[i]->state, "COMMITTED") == 0,
               "%s: %ld effects (%ld for the key), %s", names[i], all[i]->route_effects,
               all[i]->effects, all[i]->state);
    lab_check(r, all[i]->other == 0, "%s: %d answers neither 201 nor 409", names[i],
              all[i]->other);
    lab_expect(r, "one_party_ran_it", all[i]->fresh + (all[i]->recovered == 1) == 1,
               "%s: %d requests ran the effect, recovery %ld", names[i], all[i]->fresh,
               all[i]->recovered);
    /* The engine path's batch: the 12 POSTs in libcurl at once, on the one
     * loop thread that ran the batch. */
    if (r->path == LAB_PATH_ENGINE)
      lab_expect(r, "posts_in_flight_at_once", all[i]->peak_in_flight >= I6_POSTS,
                 "%s: at most %zu transfers in flight at once, expected %d", names[i],
                 all[i]->peak_in_flight, I6_POSTS);
  }
  return r->pass;
}

static int i6(lab_result *r) { return i6_run(r, 0); }
static int i6_wrong(lab_result *r) { return i6_run(r, 1); }

/* ---- I8: a real process crash ------------------------------------------- */

typedef struct upstream_proc {
  pid_t pid;
  int out; /* read end of its stdout */
  char base[64];
} upstream_proc;

/* Reads one line from fd within ms; 0 on success. */
static int read_line(int fd, char *buf, size_t n, int ms) {
  size_t len = 0;
  while (len + 1 < n) {
    struct pollfd p = {.fd = fd, .events = POLLIN};
    int pr = poll(&p, 1, ms);
    if (pr <= 0)
      return -1;
    char c;
    ssize_t k = read(fd, &c, 1);
    if (k <= 0)
      return -1;
    if (c == '\n')
      break;
    buf[len++] = c;
  }
  buf[len] = '\0';
  return 0;
}

/* Starts `resil upstream` on uri with a crash point; 0 when it listens. */
static int proc_start(upstream_proc *p, const char *bin, const char *uri,
                      const char *crash_at, long nth) {
  memset(p, 0, sizeof *p);
  p->pid = -1;
  p->out = -1;
  int fds[2];
  if (pipe(fds) != 0)
    return -1;
  fcntl(fds[0], F_SETFD, FD_CLOEXEC);
  fcntl(fds[1], F_SETFD, FD_CLOEXEC);
  char nth_s[24];
  snprintf(nth_s, sizeof nth_s, "%ld", nth);
  char *argv[] = {(char *)bin,      "upstream",    "--store", (char *)uri,
                  "--crash-at",     (char *)crash_at, "--crash-nth", nth_s,
                  NULL};
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  /* stderr stays ours: the child writes there only when something is
   * wrong. */
  posix_spawn_file_actions_adddup2(&fa, fds[1], STDOUT_FILENO);
  pid_t pid = -1;
  int rc = posix_spawn(&pid, bin, &fa, NULL, argv, environ);
  posix_spawn_file_actions_destroy(&fa);
  close(fds[1]);
  if (rc != 0) {
    close(fds[0]);
    return -1;
  }
  p->pid = pid;
  p->out = fds[0];
  char line[160];
  unsigned port = 0;
  if (read_line(p->out, line, sizeof line, 20000) != 0 ||
      sscanf(line, "upstream listening on http://127.0.0.1:%u", &port) != 1)
    return -1;
  snprintf(p->base, sizeof p->base, "http://127.0.0.1:%u", port);
  return 0;
}

/* Waits for the process to end (up to ms, then kills it); returns the
 * signal that ended it, 0 for exit status 0, 256 + status for another exit
 * status, -1 when it had to be killed. */
static int proc_wait(upstream_proc *p, int ms) {
  int status = 0, sig = -1;
  if (p->pid <= 0)
    return -1;
  for (int waited = 0;; waited += 5) {
    pid_t w = waitpid(p->pid, &status, WNOHANG);
    if (w == p->pid) {
      sig = WIFSIGNALED(status)    ? WTERMSIG(status)
            : WEXITSTATUS(status) == 0 ? 0
                                       : 256 + WEXITSTATUS(status);
      break;
    }
    if (w < 0 || waited >= ms) {
      kill(p->pid, SIGKILL);
      waitpid(p->pid, &status, 0);
      sig = -1;
      break;
    }
    struct timespec ts = {0, 5000000L};
    nanosleep(&ts, NULL);
  }
  p->pid = -1;
  if (p->out >= 0)
    close(p->out);
  p->out = -1;
  return sig;
}

/* Stops a process with SIGTERM; 0 when it exited cleanly. */
static int proc_stop(upstream_proc *p) {
  if (p->pid > 0)
    kill(p->pid, SIGTERM);
  return proc_wait(p, 10000);
}

/* Rows of payments for key (-1 on error) read from the file itself. */
static long db_effects(sqlite3 *db, const char *key) {
  sqlite3_stmt *st = NULL;
  long n = -1;
  if (sqlite3_prepare_v2(db, "SELECT count(*) FROM payments WHERE op_key = ?1", -1, &st,
                         NULL) == SQLITE_OK) {
    sqlite3_bind_text(st, 1, key, -1, SQLITE_STATIC);
    if (sqlite3_step(st) == SQLITE_ROW)
      n = (long)sqlite3_column_int64(st, 0);
  }
  sqlite3_finalize(st);
  return n;
}

/* Keys with more than one payment. */
static long db_duplicates(sqlite3 *db) {
  sqlite3_stmt *st = NULL;
  long n = -1;
  if (sqlite3_prepare_v2(db,
                         "SELECT count(*) FROM (SELECT op_key FROM payments"
                         " GROUP BY op_key HAVING count(*) > 1)",
                         -1, &st, NULL) == SQLITE_OK &&
      sqlite3_step(st) == SQLITE_ROW)
    n = (long)sqlite3_column_int64(st, 0);
  sqlite3_finalize(st);
  return n;
}

/* The operation's state as stored in the file (process dead or alive). */
static resil_op_state store_state(resil_store *s, const char *key) {
  resil_op_record rec;
  resil_op_record_init(&rec);
  resil_op_state st = resil_store_status(s, key, &rec) == RESIL_OK ? rec.state
                                                                   : RESIL_OP_UNKNOWN;
  resil_op_record_clear(&rec);
  return st;
}

typedef struct crash_obs {
  const char *point;
  char outcome[96];
  int signal;
  const char *state_after_kill;
  long effects_after_kill;
  long recovered;
  const char *state_after_recover;
  int replay_http;
  long effects;
  int conflict_http;
  int stop; /* proc_wait of the restarted process after SIGTERM: 0 */
  long long attempts; /* requests the clients made (resil_http_stats) */
} crash_obs;

static long long client_attempts(const idem_cli *c) {
  resil_http_stats st;
  memset(&st, 0, sizeof st);
  resil_http_client_get_stats(c->c, &st);
  return (long long)st.attempts;
}

/* One kill at `point` for key, then restart, recover, replay, conflict. */
static int crash_once(lab_result *r, const char *bin, idem_env *e, resil_store *s,
                      sqlite3 *db, const char *point, const char *key, int recovery,
                      crash_obs *ob) {
  idem_tally *t = &e->tally;
  memset(ob, 0, sizeof *ob);
  ob->point = point;
  upstream_proc p;
  if (!lab_check(r, proc_start(&p, bin, e->uri, point, 1) == 0,
                 "%s: resil upstream did not start", point)) {
    proc_wait(&p, 0);
    return 0;
  }
  idem_cli c;
  if (!client_new(r, p.base, MS(10000), t, &c)) {
    client_free(&c);
    proc_stop(&p);
    return 0;
  }
  resil_outcome o = call(&c, "pay", NULL, key, "{\"amount\":100}", NULL, NULL);
  fmt(&o, ob->outcome, sizeof ob->outcome);
  ob->attempts += client_attempts(&c);
  client_free(&c);
  ob->signal = proc_wait(&p, 10000);
  ob->state_after_kill = resil_op_state_name(store_state(s, key));
  ob->effects_after_kill = db_effects(db, key);

  if (!lab_check(r, proc_start(&p, bin, e->uri, "none", 1) == 0,
                 "%s: restart failed", point)) {
    proc_wait(&p, 0);
    return 0;
  }
  if (!client_new(r, p.base, MS(10000), t, &c)) {
    client_free(&c);
    proc_stop(&p);
    return 0;
  }
  ob->recovered = recovery ? recover(&c) : 0;
  ob->state_after_recover = resil_op_state_name(store_state(s, key));
  resil_http_response *resp = NULL;
  resil_outcome rep = call(&c, "pay", NULL, key, "{\"amount\":100}", NULL, &resp);
  ob->replay_http = rep.http_status;
  resil_http_response_free(resp);
  ob->conflict_http = call(&c, "pay", NULL, key, "{\"amount\":999}", NULL, NULL).http_status;
  ob->effects = db_effects(db, key);
  ob->attempts += client_attempts(&c);
  client_free(&c);
  ob->stop = proc_stop(&p);
  return 1;
}

/* The short random series of the lab (the test suite runs 200+). Returns
 * kills; adds duplicate and lost keys. */
static long crash_series(lab_result *r, const char *bin, idem_env *e, resil_store *s,
                         sqlite3 *db, int iterations, int recovery, long *lost,
                         long *unresolved, long *unclean) {
  static const char *const points[] = {"pending", "in-txn", "effect"};
  uint64_t seed = (uint64_t)resil_clock_now_ns(NULL) ^ (uint64_t)getpid();
  long kills = 0;
  for (int it = 0; it < iterations; it++) {
    seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
    const char *point = points[(seed >> 33) % 3];
    long nth = 1 + (long)((seed >> 40) % 3);
    upstream_proc p;
    if (!lab_check(r, proc_start(&p, bin, e->uri, point, nth) == 0, "series: start failed")) {
      proc_wait(&p, 0);
      break;
    }
    idem_cli c;
    if (!client_new(r, p.base, MS(10000), &e->tally, &c)) {
      client_free(&c);
      proc_stop(&p);
      break;
    }
    char keys[4][48];
    int acked[4] = {0}, sent = 0;
    for (int k = 0; k < 4; k++) {
      snprintf(keys[k], sizeof keys[k], "series-%d-%d", it, k);
      resil_outcome o = call(&c, "pay", NULL, keys[k], "{\"amount\":5}", NULL, NULL);
      sent++;
      if (o.http_status == 201) {
        acked[k] = 1;
      } else {
        break; /* the process is gone */
      }
    }
    client_free(&c);
    if (proc_wait(&p, 10000) == SIGKILL)
      kills++;
    /* Restart, recover, then check every key sent. */
    if (!lab_check(r, proc_start(&p, bin, e->uri, "none", 1) == 0, "series: restart failed")) {
      proc_wait(&p, 0);
      break;
    }
    if (!client_new(r, p.base, MS(10000), &e->tally, &c)) {
      client_free(&c);
      proc_stop(&p);
      break;
    }
    if (recovery)
      recover(&c);
    for (int k = 0; k < sent; k++) {
      /* An acknowledged payment must have survived the kill as it was. */
      if (acked[k] && (store_state(s, keys[k]) != RESIL_OP_COMMITTED ||
                       db_effects(db, keys[k]) != 1))
        (*lost)++;
      /* The client flow after UNKNOWN: retry with the same key. */
      if (!acked[k])
        call(&c, "pay", NULL, keys[k], "{\"amount\":5}", NULL, NULL);
      if (store_state(s, keys[k]) != RESIL_OP_COMMITTED || db_effects(db, keys[k]) != 1)
        (*unresolved)++;
    }
    client_free(&c);
    if (proc_stop(&p) != 0)
      (*unclean)++; /* an error exit or a sanitizer report */
  }
  return kills;
}

/* The wrong variant restarts without recovering. */
static int i8_run(lab_result *r, int recovery) {
  char bin[512];
  if (!lab_check(r, lab_resil_bin(bin, sizeof bin),
                 "I8 runs `resil upstream` as a child process: set RESIL_BIN to the resil binary"))
    return 0;
  idem_env e;
  if (!env_dir(r, &e))
    return 0;
  resil_store *s = NULL;
  sqlite3 *db = NULL;
  crash_obs obs[3];
  int nobs = 0;
  long kills = 0, lost = 0, unresolved = 0, unclean = 0;
  /* The file and its schema exist before the first child starts. */
  upstream_proc p;
  if (!lab_check(r, proc_start(&p, bin, e.uri, "none", 1) == 0, "resil upstream did not start")) {
    proc_wait(&p, 0);
    goto out;
  }
  if (!lab_check(r, proc_stop(&p) == 0, "resil upstream did not stop cleanly"))
    goto out;
  if (!lab_check(r, resil_store_open(e.uri, NULL, &s, NULL) == RESIL_OK, "store open") ||
      !lab_check(r, sqlite3_open_v2(e.db, &db, SQLITE_OPEN_READWRITE, NULL) == SQLITE_OK,
                 "sqlite open"))
    goto out;
  sqlite3_busy_timeout(db, 5000);
  static const char *const points[] = {"pending", "effect", "in-txn"};
  static const char *const keys[] = {"i8-pending", "i8-effect", "i8-in-txn"};
  for (int i = 0; i < 3; i++) {
    if (!crash_once(r, bin, &e, s, db, points[i], keys[i], recovery, &obs[i]))
      goto out;
    nobs++;
    if (obs[i].signal == SIGKILL)
      kills++;
  }
  kills += crash_series(r, bin, &e, s, db, 10, recovery, &lost, &unresolved, &unclean);
  long dups = db_duplicates(db);
  json_t *arr = json_array();
  long total_effects = 0;
  long long total_attempts = 0;
  for (int i = 0; i < nobs; i++) {
    total_effects += obs[i].effects;
    total_attempts += obs[i].attempts;
    json_array_append_new(
        arr, json_pack("{s:s,s:s,s:i,s:s,s:I,s:I,s:s,s:i,s:I,s:i}", "point", obs[i].point,
                       "outcome", obs[i].outcome, "signal", obs[i].signal, "state_after_kill",
                       obs[i].state_after_kill, "effects_after_kill",
                       (json_int_t)obs[i].effects_after_kill, "recovered",
                       (json_int_t)obs[i].recovered, "state_after_recover",
                       obs[i].state_after_recover, "replay_http", obs[i].replay_http,
                       "effects", (json_int_t)obs[i].effects, "conflict_http",
                       obs[i].conflict_http));
  }
  lab_obs_json(r, "kills_at_points", arr);
  lab_obs_int(r, "attempts", total_attempts); /* pay, recover, replay, conflict */
  lab_obs_int(r, "effects", total_effects);
  lab_obs_str(r, "outcome", obs[0].outcome);
  lab_obs_int(r, "kills", kills);
  lab_obs_int(r, "duplicates", dups);
  lab_obs_int(r, "lost", lost);
  lab_obs_int(r, "unresolved", unresolved);
  lab_obs_int(r, "unclean_stops", unclean);
  lab_summary(r, "SIGKILL between PENDING and COMMITTED: client %s, file %s:%ld, restart + recover (%ld) -> %s, effects %ld; after commit before response: %s:%ld, recover %ld, effects %ld; other body -> %d; %ld kills in all, duplicates %ld, lost %ld",
              obs[0].outcome, obs[0].state_after_kill, obs[0].effects_after_kill,
              obs[0].recovered, obs[0].state_after_recover, obs[0].effects,
              obs[1].state_after_kill, obs[1].effects_after_kill, obs[1].recovered,
              obs[1].effects, obs[0].conflict_http, kills, dups, lost);
  for (int i = 0; i < nobs; i++) {
    const crash_obs *o = &obs[i];
    int before_commit = strcmp(o->point, "effect") != 0;
    lab_check(r, o->signal == SIGKILL, "%s: the process was not killed by SIGKILL (%d)",
              o->point, o->signal);
    lab_check(r, strncmp(o->outcome, "UNKNOWN", 7) == 0, "%s: client %s", o->point,
              o->outcome);
    lab_check(r,
              strcmp(o->state_after_kill, before_commit ? "PENDING" : "COMMITTED") == 0 &&
                  o->effects_after_kill == (before_commit ? 0 : 1),
              "%s: after the kill %s:%ld", o->point, o->state_after_kill,
              o->effects_after_kill);
    lab_expect(r, "recovered",
               o->recovered == (before_commit ? 1 : 0) &&
                   strcmp(o->state_after_recover, "COMMITTED") == 0,
               "%s: recovered %ld -> %s", o->point, o->recovered, o->state_after_recover);
    lab_check(r, o->replay_http == 201 && o->effects == 1, "%s: replay %d, effects %ld",
              o->point, o->replay_http, o->effects);
    lab_check(r, o->conflict_http == 422, "%s: other body answered %d", o->point,
              o->conflict_http);
    lab_check(r, o->stop == 0, "%s: the restarted process did not stop cleanly (%d)",
              o->point, o->stop);
  }
  lab_check(r, kills == nobs + 10, "%ld kills, expected %d", kills, nobs + 10);
  lab_check(r, dups == 0 && lost == 0 && unresolved == 0,
            "duplicates %ld, lost %ld, unresolved %ld", dups, lost, unresolved);
  lab_check(r, unclean == 0, "%ld restarted processes did not stop cleanly", unclean);
out:
  if (db)
    sqlite3_close(db);
  lab_ops_add_store(r, "store", s); /* --metrics (lab_ops.h) */
  lab_capture(r);
  resil_store_close(s);
  expect_engine(r, &e.tally);
  env_remove(&e);
  return r->pass;
}

static int i8(lab_result *r) { return i8_run(r, 1); }
static int i8_wrong(lab_result *r) { return i8_run(r, 0); }

const lab_experiment lab_idem_experiments[] = {
    {"I1", "stable key, commit then slow response, retry", i1, i1_wrong,
     "a new key per attempt", "one_effect", LAB_PATHS_BOTH},
    {"I2", "new key per attempt", i2, i2_wrong,
     "one stable key for every attempt", "three_effects", LAB_PATHS_BOTH},
    {"I3", "status query: COMMITTED, UNKNOWN, expired", i3, i3_wrong,
     "a sweep of operations older than a day", "sweep_deletes_terminal", LAB_PATHS_BOTH},
    {"I4", "commit, then close before the response", i4, i4_wrong,
     "the replay with another key", "replay_same_effect", LAB_PATHS_BOTH},
    {"I5", "rollback between effect and state, reopen, recover", i5, i5_wrong,
     "a store that commits the effect early", "pending_no_effect", LAB_PATHS_BOTH},
    {"I6", "12 concurrent same-key POSTs and a recovery", i6, i6_wrong,
     "a key per POST", "one_effect", LAB_PATHS_BOTH},
    {"I7", "negative control: effect committed early", i7, i7_wrong,
     "the correct store", "caught", LAB_PATHS_BOTH},
    {"I8", "SIGKILL inside an operation, restart, recover", i8, i8_wrong,
     "restarts without recovery", "recovered", LAB_PATHS_BOTH},
    {NULL, NULL, NULL, NULL, NULL, NULL, 0}};

#else /* no fixture or no store */

const lab_experiment lab_idem_experiments[] = {{NULL, NULL, NULL, NULL, NULL, NULL, 0}};

#endif
