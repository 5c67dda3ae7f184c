/* The libresil cases. Each body performs the operation `iters` times and
 * returns how many succeeded; the harness rejects a case in which any did
 * not, so a breaker that opened or a limiter that refused cannot pass for a
 * fast one. Results are folded into bench_sink() so no call can be removed
 * as dead code, and the protected call is a real function, reached through
 * the pointer the policy is given, that counts its invocations (checked
 * against the iteration count). */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "bench.h"
#include "resil/breaker.h"
#include "resil/bulkhead.h"
#include "resil/chain.h"
#include "resil/ratelimit.h"
#include "resil/retry.h"
#include "resil/shared.h"

/* ---- the protected call ---------------------------------------------- */

typedef struct call_counter {
  uint64_t calls;
} call_counter;

/* The success the no-op answers: a constant, as R4jBench's Noop.get()
 * returns a constant reference (building it with memset and field stores
 * cost the callee two failed store-to-load forwards, ~10 ns, per call). */
static const resil_outcome noop_ok = {.kind = RESIL_ANSWERED,
                                      .reason = RESIL_REASON_OK,
                                      .http_status = 0,
                                      .retry_after_ms = -1,
                                      .flags = 0,
                                      .stop = RESIL_STOP_NONE,
                                      .attempts = 0};

/* A no-op that answers success. noinline and the asm barrier keep it a
 * real function with a side effect the compiler must perform. */
__attribute__((noinline)) static resil_outcome noop_call(void *arg,
                                                         const resil_ctx *ctx) {
  (void)ctx;
  call_counter *c = arg;
  c->calls++;
  __asm__ volatile("" : : "r"(c) : "memory");
  return noop_ok;
}

/* Every run-form case passes the function through this volatile pointer, so
 * the call site cannot be specialised to noop_call. */
static resil_call_fn volatile noop_fn = noop_call;

/* Duration the split-form cases report: the caller measures its own call;
 * the benchmark supplies a fixed, fast one and reads no clock itself. */
#define SPLIT_DURATION_NS INT64_C(1000)

/* Returns ok when the call really ran once per iteration, 0 otherwise. */
static uint64_t check_calls(const call_counter *c, uint64_t before,
                            uint64_t iters, uint64_t ok) {
  return c->calls - before == iters ? ok : 0;
}

/* ---- breaker ------------------------------------------------------------ */

/* A breaker as a service would configure it: Resilience4j's defaults (count
 * window of 100 results, minimum 100 calls, 50 % failures, OPEN wait 60 s),
 * with slow-call detection at 1 s (slow-call rate threshold 100 %); its
 * state in seg, or in the process (NULL). */
resil_status bench_make_breaker(resil_shared *seg, resil_breaker **out,
                                resil_error *err) {
  resil_breaker_config cfg;
  resil_breaker_config_init(&cfg);
  cfg.name = "bench";
  cfg.window_type = RESIL_BREAKER_WINDOW_COUNT;
  cfg.window_size = 100;
  cfg.minimum_calls = 100;
  cfg.slow_call_duration_ns = INT64_C(1000000000);
  cfg.shared = seg;
  return resil_breaker_new(&cfg, out, err);
}

static resil_status make_breaker(resil_breaker **out, resil_error *err) {
  return bench_make_breaker(NULL, out, err);
}

typedef struct breaker_state {
  resil_breaker *br;
  call_counter counter;
} breaker_state;

static uint64_t body_breaker_acquire_record(void *p, uint64_t iters) {
  breaker_state *s = p;
  resil_outcome ok_outcome;
  memset(&ok_outcome, 0, sizeof ok_outcome);
  ok_outcome.kind = RESIL_ANSWERED;
  ok_outcome.reason = RESIL_REASON_OK;
  ok_outcome.retry_after_ms = -1;
  uint64_t ok = 0;
  for (uint64_t i = 0; i < iters; i++) {
    resil_breaker_permit permit;
    if (resil_breaker_try_acquire(s->br, &permit)) {
      /* The outcome is recorded every iteration, as the split form
       * requires after a permitted acquire. */
      ok += resil_breaker_record(s->br, &permit, &ok_outcome,
                                 SPLIT_DURATION_NS) == RESIL_OK;
    }
  }
  bench_sink(ok);
  return ok;
}

static uint64_t body_breaker_run(void *p, uint64_t iters) {
  breaker_state *s = p;
  resil_call_fn fn = noop_fn;
  uint64_t before = s->counter.calls, ok = 0;
  for (uint64_t i = 0; i < iters; i++) {
    resil_outcome o = resil_breaker_run(s->br, NULL, fn, &s->counter);
    ok += o.kind == RESIL_ANSWERED && o.reason == RESIL_REASON_OK;
  }
  bench_sink(ok);
  return check_calls(&s->counter, before, iters, ok);
}

/* Split form until told to stop; the stop flag is read once every 256
 * operations so the check costs nothing measurable. p is the breaker. */
uint64_t bench_thread_breaker_split(void *p, const atomic_int *stop,
                                    uint64_t *ops) {
  resil_breaker *br = p;
  resil_outcome ok_outcome;
  memset(&ok_outcome, 0, sizeof ok_outcome);
  ok_outcome.kind = RESIL_ANSWERED;
  ok_outcome.reason = RESIL_REASON_OK;
  ok_outcome.retry_after_ms = -1;
  uint64_t done = 0, failed = 0;
  do {
    for (int k = 0; k < 256; k++) {
      resil_breaker_permit permit;
      if (resil_breaker_try_acquire(br, &permit)) {
        if (resil_breaker_record(br, &permit, &ok_outcome,
                                 SPLIT_DURATION_NS) != RESIL_OK)
          failed++;
      } else {
        failed++;
      }
    }
    done += 256;
  } while (!atomic_load_explicit(stop, memory_order_relaxed));
  bench_sink(done);
  *ops = done;
  return failed;
}

/* ---- retry, rate limiter, bulkhead --------------------------------------- */

typedef struct retry_state {
  resil_retry *r;
  call_counter counter;
} retry_state;

static uint64_t body_retry_run(void *p, uint64_t iters) {
  retry_state *s = p;
  resil_call_fn fn = noop_fn;
  uint64_t before = s->counter.calls, ok = 0;
  for (uint64_t i = 0; i < iters; i++) {
    resil_outcome o = resil_retry_run(s->r, NULL, fn, &s->counter);
    ok += o.kind == RESIL_ANSWERED && o.reason == RESIL_REASON_OK;
  }
  bench_sink(ok);
  return check_calls(&s->counter, before, iters, ok);
}

static uint64_t body_ratelimiter_acquire(void *p, uint64_t iters) {
  resil_ratelimiter *rl = p;
  uint64_t ok = 0;
  for (uint64_t i = 0; i < iters; i++)
    ok += resil_ratelimiter_acquire(rl, 1, NULL, NULL) == RESIL_DECISION_GO;
  bench_sink(ok);
  return ok;
}

/* Acquires of one permit until told to stop (the stop flag read every
 * 256); p is the limiter. */
uint64_t bench_thread_ratelimiter_acquire(void *p, const atomic_int *stop,
                                          uint64_t *ops) {
  resil_ratelimiter *rl = p;
  uint64_t done = 0, failed = 0;
  do {
    for (int k = 0; k < 256; k++)
      failed += resil_ratelimiter_acquire(rl, 1, NULL, NULL) != RESIL_DECISION_GO;
    done += 256;
  } while (!atomic_load_explicit(stop, memory_order_relaxed));
  bench_sink(done);
  *ops = done;
  return failed;
}

static uint64_t body_bulkhead_acquire_release(void *p, uint64_t iters) {
  resil_bulkhead *bh = p;
  uint64_t ok = 0;
  for (uint64_t i = 0; i < iters; i++) {
    if (resil_bulkhead_try_acquire(bh, NULL))
      ok += resil_bulkhead_release(bh) == RESIL_OK;
  }
  bench_sink(ok);
  return ok;
}

/* ---- chain --------------------------------------------------------------- */

typedef struct chain_state {
  resil_chain *ch;
  call_counter counter;
} chain_state;

static uint64_t body_chain_run(void *p, uint64_t iters) {
  chain_state *s = p;
  resil_call_fn fn = noop_fn;
  uint64_t before = s->counter.calls, ok = 0;
  for (uint64_t i = 0; i < iters; i++) {
    resil_outcome o = resil_chain_run(s->ch, NULL, fn, &s->counter);
    ok += o.kind == RESIL_ANSWERED && o.reason == RESIL_REASON_OK;
  }
  bench_sink(ok);
  return check_calls(&s->counter, before, iters, ok);
}

/* ---- policy construction -------------------------------------------------- */

/* Retry as configured by default (3 attempts, 500 ms fixed wait); with a
 * call that succeeds it makes one attempt. */
static resil_status make_retry(resil_retry **out, resil_error *err) {
  resil_retry_config cfg;
  resil_retry_config_init(&cfg);
  cfg.name = "bench";
  return resil_retry_new(&cfg, out, err);
}

/* A limit far above what one process can consume (2^31 - 1 permits per
 * second), so every acquire takes the permitted path: the case measures the
 * limiter's cost, not its waiting. Fail fast. */
resil_status bench_make_ratelimiter(resil_shared *seg, resil_ratelimiter **out,
                                   resil_error *err) {
  resil_ratelimiter_config cfg;
  resil_ratelimiter_config_init(&cfg);
  cfg.name = "bench";
  cfg.limit_for_period = 2147483647;
  cfg.refresh_period_ns = INT64_C(1000000000);
  cfg.timeout_ns = 0;
  cfg.shared = seg;
  return resil_ratelimiter_new(&cfg, out, err);
}

/* Defaults: 25 slots, no wait. */
static resil_status make_bulkhead(resil_bulkhead **out, resil_error *err) {
  resil_bulkhead_config cfg;
  resil_bulkhead_config_init(&cfg);
  cfg.name = "bench";
  return resil_bulkhead_new(&cfg, out, err);
}

/* ---- driver -------------------------------------------------------------- */

static void report_line(const bench_result *r) {
  if (r->error[0]) {
    printf("  %-26s INVALID: %s\n", r->name, r->error);
  } else if (r->has_ops) {
    printf("  %-26s %8.2f ns/call per thread  %7.2f M ops/s total  (%d thread%s, "
           "median of %d runs)\n",
           r->name, r->ns_per_call, r->ops_per_s / 1e6, r->threads,
           r->threads == 1 ? "" : "s", r->nruns);
  } else {
    double lo = r->runs[0], hi = r->runs[0];
    for (int i = 1; i < r->nruns; i++) {
      if (r->runs[i] < lo) lo = r->runs[i];
      if (r->runs[i] > hi) hi = r->runs[i];
    }
    printf("  %-26s %8.2f ns/call  (median of %d runs, %.2f..%.2f, %llu calls each)\n",
           r->name, r->ns_per_call, r->nruns, lo, hi,
           (unsigned long long)r->iters_per_run);
  }
  fflush(stdout);
}

static void setup_error(bench_result *r, const char *what, resil_status st,
                        const resil_error *err) {
  snprintf(r->error, sizeof r->error, "%s: %s (%s)", what,
           resil_status_name(st), err->msg);
}

static void finish(bench_result *r, json_t *cases) {
  report_line(r);
  bench_result_to_json(r, cases);
}

/* The two single-thread breaker cases: same breaker, different loop body. */
static void breaker_case(const bench_opts *o, json_t *cases, const char *name,
                         const char *measures, bench_body_fn body) {
  bench_result r;
  memset(&r, 0, sizeof r);
  r.name = name;
  r.measures = measures;
  breaker_state s;
  memset(&s, 0, sizeof s);
  resil_error err;
  resil_status st = make_breaker(&s.br, &err);
  if (st != RESIL_OK)
    setup_error(&r, "resil_breaker_new", st, &err);
  else
    bench_measure(o, body, &s, &r);
  if (!r.error[0] && resil_breaker_state(s.br) != RESIL_BREAKER_CLOSED)
    snprintf(r.error, sizeof r.error, "breaker left CLOSED");
  resil_breaker_free(s.br);
  finish(&r, cases);
}

static void case_breaker_acquire_record(const bench_opts *o, json_t *cases) {
  breaker_case(o, cases, "breaker_acquire_record",
               "resil_breaker_try_acquire + resil_breaker_record(success, 1 us "
               "supplied by the caller) on one thread; CLOSED, count window "
               "100, slow-call detection at 1 s",
               body_breaker_acquire_record);
}

/* The same breaker with its state in a shared segment (POSIX shm, a name
 * of this process's own, removed afterwards): the cost of the indirection,
 * of the lock's owner token and of the shared cache lines, uncontended. */
static void case_shared_breaker_acquire_record(const bench_opts *o,
                                               json_t *cases) {
  bench_result r;
  memset(&r, 0, sizeof r);
  r.name = "shared_breaker_acquire_record";
  r.measures = "resil_breaker_try_acquire + resil_breaker_record as "
               "breaker_acquire_record, the state in a resil_shared segment "
               "(POSIX shm), one process";
  char name[64];
  snprintf(name, sizeof name, "bench-br-%ld", (long)getpid());
  resil_shared_config sc;
  resil_shared_config_init(&sc);
  sc.name = name;
  sc.required = 1;
  resil_shared *seg = NULL;
  breaker_state s;
  memset(&s, 0, sizeof s);
  resil_error err;
  resil_status st = resil_shared_open(&sc, &seg, &err);
  if (st != RESIL_OK) {
    setup_error(&r, "resil_shared_open", st, &err);
    finish(&r, cases);
    return;
  }
  st = bench_make_breaker(seg, &s.br, &err);
  if (st != RESIL_OK)
    setup_error(&r, "resil_breaker_new", st, &err);
  else
    bench_measure(o, body_breaker_acquire_record, &s, &r);
  if (!r.error[0] && resil_breaker_state(s.br) != RESIL_BREAKER_CLOSED)
    snprintf(r.error, sizeof r.error, "breaker left CLOSED");
  resil_breaker_free(s.br);
  resil_shared_close(seg);
  resil_shared_unlink(&sc, NULL);
  finish(&r, cases);
}

/* ---- the breaker's ramp against the plain breaker (issue 23) -------------
 *
 * Each case is priced against breaker_acquire_record in the same run: both
 * breakers are warmed up and calibrated, then opts->runs rounds alternate
 * them (the reference first in even rounds, second in odd ones, so that a
 * drift of the machine falls on both); the ratio is the median of the
 * per-round ratios. Kind "ramp"; report.c checks the targets. */

/* A breaker as bench_make_breaker's with a ramp of one day configured
 * (min_pct, aggression), which never ends during the run; ramping: started
 * (OPEN then HALF_OPEN by hand, one healthy probe closes it: an automatic
 * HALF_OPEN -> CLOSED ramps), else CLOSED and not ramping. */
static resil_status make_ramp_breaker(int ramping, uint32_t min_pct,
                                      double aggression, resil_breaker **out,
                                      resil_error *err) {
  resil_breaker_config cfg;
  resil_breaker_config_init(&cfg);
  cfg.name = "bench-ramp";
  cfg.window_type = RESIL_BREAKER_WINDOW_COUNT;
  cfg.window_size = 100;
  cfg.minimum_calls = 100;
  cfg.slow_call_duration_ns = INT64_C(1000000000);
  cfg.half_open_permitted_calls = 1;
  cfg.ramp_duration_ns = INT64_C(86400) * INT64_C(1000000000);
  cfg.ramp_min_percent = min_pct;
  cfg.ramp_aggression = aggression;
  resil_status st = resil_breaker_new(&cfg, out, err);
  if (st != RESIL_OK || !ramping) return st;
  resil_breaker_permit p;
  resil_outcome ok = {.kind = RESIL_ANSWERED, .reason = RESIL_REASON_OK,
                      .retry_after_ms = -1};
  resil_breaker_metrics m;
  if (resil_breaker_transition(*out, RESIL_BREAKER_OPEN) != RESIL_OK ||
      resil_breaker_transition(*out, RESIL_BREAKER_HALF_OPEN) != RESIL_OK ||
      resil_breaker_try_acquire(*out, &p) != RESIL_DECISION_GO ||
      resil_breaker_record(*out, &p, &ok, SPLIT_DURATION_NS) != RESIL_OK ||
      resil_breaker_get_metrics(*out, &m) != RESIL_OK || !m.ramping) {
    snprintf(err->msg, sizeof err->msg, "the breaker did not start its ramp");
    resil_breaker_free(*out);
    *out = NULL;
    return RESIL_EINVAL;
  }
  return RESIL_OK;
}

typedef struct ramp_bench_state {
  resil_breaker *br;
  uint64_t admitted, refused;
} ramp_bench_state;

/* try_acquire + record(success) of the admitted ones: every decision
 * counts as done (a refusal is the ramp's answer); the admitted and refused
 * are tallied for the check of the share. */
static uint64_t body_ramp_decide(void *p, uint64_t iters) {
  ramp_bench_state *s = p;
  resil_outcome ok_outcome;
  memset(&ok_outcome, 0, sizeof ok_outcome);
  ok_outcome.kind = RESIL_ANSWERED;
  ok_outcome.reason = RESIL_REASON_OK;
  ok_outcome.retry_after_ms = -1;
  uint64_t done = 0, in = 0;
  for (uint64_t i = 0; i < iters; i++) {
    resil_breaker_permit permit;
    if (resil_breaker_try_acquire(s->br, &permit)) {
      in++;
      done += resil_breaker_record(s->br, &permit, &ok_outcome,
                                   SPLIT_DURATION_NS) == RESIL_OK;
    } else {
      done++;
    }
  }
  s->admitted += in;
  s->refused += iters - in;
  bench_sink(done);
  return done;
}

typedef struct ramp_case {
  const char *name;
  const char *measures;
  int ramping;
  uint32_t min_pct;
  double aggression;
  double target_max; /* ns per call at most this times the reference's */
} ramp_case;

static void run_ramp_case(const bench_opts *o, json_t *cases, const ramp_case *rc) {
  json_t *j = json_object();
  json_object_set_new(j, "name", json_string(rc->name));
  json_object_set_new(j, "kind", json_string("ramp"));
  json_object_set_new(j, "measures", json_string(rc->measures));
  json_object_set_new(j, "reference", json_string("breaker_acquire_record"));
  json_object_set_new(j, "target_max_ratio", json_real(rc->target_max));
  char error[256] = "";
  resil_error err;
  breaker_state ref;
  memset(&ref, 0, sizeof ref);
  ramp_bench_state rs;
  memset(&rs, 0, sizeof rs);
  resil_status st = make_breaker(&ref.br, &err);
  if (st != RESIL_OK)
    snprintf(error, sizeof error, "resil_breaker_new: %s (%s)", resil_status_name(st), err.msg);
  else if ((st = make_ramp_breaker(rc->ramping, rc->min_pct, rc->aggression, &rs.br, &err)) !=
           RESIL_OK)
    snprintf(error, sizeof error, "the ramp's breaker: %s (%s)", resil_status_name(st), err.msg);
  double load0 = bench_loadavg1();
  bench_result rr, rt;
  memset(&rr, 0, sizeof rr);
  memset(&rt, 0, sizeof rt);
  bench_opts one = *o;
  one.runs = 1;
  if (!error[0]) {
    bench_measure(&one, body_breaker_acquire_record, &ref, &rr);
    bench_measure(&one, body_ramp_decide, &rs, &rt);
    if (rr.error[0] || rt.error[0])
      snprintf(error, sizeof error, "%s", rr.error[0] ? rr.error : rt.error);
  }
  double ns_ref[BENCH_MAX_RUNS], ns_case[BENCH_MAX_RUNS], ratio[BENCH_MAX_RUNS];
  int n = 0;
  for (int r = 0; !error[0] && r < o->runs && r < BENCH_MAX_RUNS; r++) {
    for (int k = 0; k < 2 && !error[0]; k++) {
      int is_ref = (k == 0) == (r % 2 == 0);
      uint64_t iters = is_ref ? rr.iters_per_run : rt.iters_per_run;
      int64_t t0 = bench_now_ns();
      uint64_t ok = is_ref ? body_breaker_acquire_record(&ref, iters)
                           : body_ramp_decide(&rs, iters);
      int64_t t1 = bench_now_ns();
      if (ok != iters)
        snprintf(error, sizeof error, "round %d: %llu of %llu operations did not succeed",
                 r + 1, (unsigned long long)(iters - ok), (unsigned long long)iters);
      (is_ref ? ns_ref : ns_case)[n] = (double)(t1 - t0) / (double)iters;
    }
    if (!error[0]) {
      ratio[n] = ns_case[n] / ns_ref[n];
      n++;
    }
  }
  if (!error[0]) {
    resil_breaker_metrics m;
    double share = (double)rs.admitted / (double)(rs.admitted + rs.refused);
    double want = rc->ramping ? rc->min_pct / 100.0 : 1.0;
    if (resil_breaker_state(ref.br) != RESIL_BREAKER_CLOSED)
      snprintf(error, sizeof error, "the reference left CLOSED");
    else if (resil_breaker_get_metrics(rs.br, &m) != RESIL_OK || m.ramping != rc->ramping ||
             m.state != RESIL_BREAKER_CLOSED)
      snprintf(error, sizeof error, "the ramp's breaker %s", rc->ramping ? "stopped ramping"
                                                                          : "is not plain CLOSED");
    else if (share < want - 0.01 || share > want + 0.01)
      snprintf(error, sizeof error, "admitted share %.4f, expected %.2f", share, want);
    json_object_set_new(j, "admitted_share", json_real(share));
  }
  if (error[0]) {
    json_object_set_new(j, "error", json_string(error));
    printf("  %-34s INVALID: %s\n", rc->name, error);
  } else {
    double mr = bench_median(ratio, n), lo = ratio[0], hi = ratio[0];
    for (int i = 1; i < n; i++) {
      if (ratio[i] < lo) lo = ratio[i];
      if (ratio[i] > hi) hi = ratio[i];
    }
    json_t *a = json_array(), *b = json_array(), *c = json_array();
    for (int i = 0; i < n; i++) {
      json_array_append_new(a, json_real(ns_case[i]));
      json_array_append_new(b, json_real(ns_ref[i]));
      json_array_append_new(c, json_real(ratio[i]));
    }
    json_object_set_new(j, "ns_per_call", json_real(bench_median(ns_case, n)));
    json_object_set_new(j, "ns_per_call_ref", json_real(bench_median(ns_ref, n)));
    json_object_set_new(j, "ratio", json_real(mr));
    json_object_set_new(j, "ratio_min", json_real(lo));
    json_object_set_new(j, "ratio_max", json_real(hi));
    json_object_set_new(j, "runs", a);
    json_object_set_new(j, "runs_ref", b);
    json_object_set_new(j, "runs_ratio", c);
    json_object_set_new(j, "rounds", json_integer(n));
    json_object_set_new(j, "iterations_per_run", json_integer((json_int_t)rt.iters_per_run));
    printf("  %-34s %8.2f ns vs breaker_acquire_record %.2f ns: x%.3f (x%.3f..x%.3f, %d "
           "rounds)\n",
           rc->name, bench_median(ns_case, n), bench_median(ns_ref, n), mr, lo, hi, n);
  }
  json_object_set_new(j, "loadavg_start", json_real(load0));
  json_object_set_new(j, "loadavg_end", json_real(bench_loadavg1()));
  fflush(stdout);
  json_array_append_new(cases, j);
  resil_breaker_free(ref.br);
  resil_breaker_free(rs.br);
}

static const ramp_case ramp_cases[] = {
    {"breaker_ramp_acquire_record",
     "breaker_acquire_record on a breaker in its ramp (1 day, linear, min share 100 %: "
     "every call admitted)",
     1, 100, 1.0, BENCH_RAMP_MAX_RATIO},
    {"breaker_ramp10_acquire_record",
     "breaker_acquire_record on a breaker in its ramp (1 day, linear, min share 10 %: one "
     "call in 10 admitted and recorded, the others refused)",
     1, 10, 1.0, BENCH_RAMP_MAX_RATIO},
    {"breaker_ramp_pow_acquire_record",
     "breaker_acquire_record on a breaker in its ramp (1 day, aggression 2, min share "
     "100 %: every call admitted)",
     1, 100, 2.0, BENCH_RAMP_MAX_RATIO},
    {"breaker_ramp_off_acquire_record",
     "breaker_acquire_record on a CLOSED breaker with a ramp configured, not ramping",
     0, 10, 1.0, BENCH_RAMP_OFF_MAX_RATIO},
};

static void case_breaker_run(const bench_opts *o, json_t *cases) {
  breaker_case(o, cases, "breaker_run",
               "resil_breaker_run of a no-op call (through a function "
               "pointer) on one thread; CLOSED, count window 100, slow-call "
               "detection at 1 s (the breaker times every call)",
               body_breaker_run);
}

static void case_retry_run(const bench_opts *o, json_t *cases) {
  bench_result r;
  memset(&r, 0, sizeof r);
  r.name = "retry_run";
  r.measures = "resil_retry_run of a no-op call that succeeds (one attempt); "
               "default retry config (3 attempts, 500 ms fixed wait)";
  retry_state s;
  memset(&s, 0, sizeof s);
  resil_error err;
  resil_status st = make_retry(&s.r, &err);
  if (st != RESIL_OK)
    setup_error(&r, "resil_retry_new", st, &err);
  else
    bench_measure(o, body_retry_run, &s, &r);
  resil_retry_free(s.r);
  finish(&r, cases);
}

static void case_ratelimiter_acquire(const bench_opts *o, json_t *cases) {
  bench_result r;
  memset(&r, 0, sizeof r);
  r.name = "ratelimiter_acquire";
  r.measures = "resil_ratelimiter_acquire(1 permit, no ctx) that is granted "
               "at once; limit 2^31-1 per 1 s cycle, timeout 0";
  resil_ratelimiter *rl = NULL;
  resil_error err;
  resil_status st = bench_make_ratelimiter(NULL, &rl, &err);
  if (st != RESIL_OK)
    setup_error(&r, "resil_ratelimiter_new", st, &err);
  else
    bench_measure(o, body_ratelimiter_acquire, rl, &r);
  resil_ratelimiter_free(rl);
  finish(&r, cases);
}

/* The same limiter with its state in a shared segment (POSIX shm, a
 * name of this process's own, removed afterwards): the cost of the
 * indirection and of the shared cache line, uncontended. */
static void case_shared_ratelimiter_acquire(const bench_opts *o, json_t *cases) {
  bench_result r;
  memset(&r, 0, sizeof r);
  r.name = "shared_ratelimiter_acquire";
  r.measures = "resil_ratelimiter_acquire as ratelimiter_acquire, the state in a "
               "resil_shared segment (POSIX shm), one process";
  char name[64];
  snprintf(name, sizeof name, "bench-%ld", (long)getpid());
  resil_shared_config sc;
  resil_shared_config_init(&sc);
  sc.name = name;
  sc.required = 1;
  resil_shared *seg = NULL;
  resil_ratelimiter *rl = NULL;
  resil_error err;
  resil_status st = resil_shared_open(&sc, &seg, &err);
  if (st != RESIL_OK) {
    setup_error(&r, "resil_shared_open", st, &err);
    finish(&r, cases);
    return;
  }
  st = bench_make_ratelimiter(seg, &rl, &err);
  if (st != RESIL_OK)
    setup_error(&r, "resil_ratelimiter_new", st, &err);
  else
    bench_measure(o, body_ratelimiter_acquire, rl, &r);
  resil_ratelimiter_free(rl);
  resil_shared_close(seg);
  resil_shared_unlink(&sc, NULL);
  finish(&r, cases);
}

static void case_bulkhead_acquire_release(const bench_opts *o, json_t *cases) {
  bench_result r;
  memset(&r, 0, sizeof r);
  r.name = "bulkhead_acquire_release";
  r.measures = "resil_bulkhead_try_acquire + resil_bulkhead_release on one "
               "thread; 25 slots, no wait";
  resil_bulkhead *bh = NULL;
  resil_error err;
  resil_status st = make_bulkhead(&bh, &err);
  if (st != RESIL_OK)
    setup_error(&r, "resil_bulkhead_new", st, &err);
  else
    bench_measure(o, body_bulkhead_acquire_release, bh, &r);
  resil_bulkhead_free(bh);
  finish(&r, cases);
}

static void case_chain4_run(const bench_opts *o, json_t *cases) {
  bench_result r;
  memset(&r, 0, sizeof r);
  r.name = "chain4_run";
  r.measures = "resil_chain_run of Retry(Breaker(RateLimiter(Bulkhead(no-op)))) "
               "on one thread, each policy configured as in its own case, no "
               "failures, no chain deadline";
  chain_state s;
  memset(&s, 0, sizeof s);
  resil_retry *rt = NULL;
  resil_breaker *br = NULL;
  resil_ratelimiter *rl = NULL;
  resil_bulkhead *bh = NULL;
  resil_error err;
  resil_status st;
  if ((st = make_retry(&rt, &err)) != RESIL_OK) {
    setup_error(&r, "resil_retry_new", st, &err);
  } else if ((st = make_breaker(&br, &err)) != RESIL_OK) {
    setup_error(&r, "resil_breaker_new", st, &err);
  } else if ((st = bench_make_ratelimiter(NULL, &rl, &err)) != RESIL_OK) {
    setup_error(&r, "resil_ratelimiter_new", st, &err);
  } else if ((st = make_bulkhead(&bh, &err)) != RESIL_OK) {
    setup_error(&r, "resil_bulkhead_new", st, &err);
  } else {
    resil_chain_config cc;
    resil_chain_config_init(&cc);
    cc.name = "bench";
    st = resil_chain_new(&cc, &s.ch, &err);
    if (st != RESIL_OK) {
      setup_error(&r, "resil_chain_new", st, &err);
    } else if ((st = resil_chain_add_retry(s.ch, rt)) != RESIL_OK ||
               (st = resil_chain_add_breaker(s.ch, br)) != RESIL_OK ||
               (st = resil_chain_add_ratelimiter(s.ch, rl)) != RESIL_OK ||
               (st = resil_chain_add_bulkhead(s.ch, bh)) != RESIL_OK) {
      snprintf(r.error, sizeof r.error, "resil_chain_add_*: %s",
               resil_status_name(st));
    } else {
      char nesting[128];
      resil_chain_nesting(s.ch, nesting, sizeof nesting);
      printf("  (chain4_run nesting: %s)\n", nesting);
      bench_measure(o, body_chain_run, &s, &r);
    }
  }
  resil_chain_free(s.ch);
  resil_bulkhead_free(bh);
  resil_ratelimiter_free(rl);
  resil_breaker_free(br);
  resil_retry_free(rt);
  finish(&r, cases);
}

static void case_breaker_threads(const bench_opts *o, json_t *cases,
                                 int nthreads) {
  bench_result r;
  memset(&r, 0, sizeof r);
  r.name = nthreads == 1 ? "breaker_1thread" : "breaker_2threads";
  r.measures = nthreads == 1
                   ? "try_acquire + record(success) in a loop on one thread "
                     "for a fixed time; CLOSED, count window 100"
                   : "try_acquire + record(success) in a loop on two threads "
                     "sharing one breaker, for a fixed time; CLOSED, count "
                     "window 100; ops/s is the total of both threads";
  breaker_state s;
  memset(&s, 0, sizeof s);
  resil_error err;
  resil_status st = make_breaker(&s.br, &err);
  if (st != RESIL_OK)
    setup_error(&r, "resil_breaker_new", st, &err);
  else
    bench_measure_threads(o, nthreads, bench_thread_breaker_split, s.br, &r);
  if (!r.error[0] && resil_breaker_state(s.br) != RESIL_BREAKER_CLOSED)
    snprintf(r.error, sizeof r.error, "breaker left CLOSED");
  resil_breaker_free(s.br);
  finish(&r, cases);
}

/* Bytes of a breaker with a 100-call count window, as configured in the
 * cases; -1 when it cannot be created. */
static long long breaker_bytes_100(void) {
  resil_breaker *br = NULL;
  resil_error err;
  if (make_breaker(&br, &err) != RESIL_OK) return -1;
  size_t n = resil_breaker_memory_bytes(br);
  resil_breaker_free(br);
  return (long long)n;
}

int bench_run_cases(const bench_opts *opts, const char *json_path) {
  json_t *root = json_object();
  printf("libresil %s benchmarks: %d runs per case, single-thread runs >= %lld "
         "ms, thread runs %lld ms; median reported\n",
         resil_version(), opts->runs, (long long)(opts->min_run_ns / 1000000),
         (long long)(opts->thread_run_ns / 1000000));
  fflush(stdout);
  json_t *machine = bench_machine_json(opts);
  printf("  machine: %s, %lld CPUs; clock_gettime(CLOCK_MONOTONIC) %.1f ns\n",
         json_string_value(json_object_get(machine, "cpu_model")),
         (long long)json_integer_value(json_object_get(machine, "nproc")),
         json_real_value(json_object_get(machine, "clock_gettime_monotonic_ns")));
  json_object_set_new(root, "machine", machine);

  json_t *cases = json_array();
  if (bench_selected(opts, "breaker_acquire_record"))
    case_breaker_acquire_record(opts, cases);
  if (bench_selected(opts, "shared_breaker_acquire_record"))
    case_shared_breaker_acquire_record(opts, cases);
  for (size_t k = 0; k < sizeof ramp_cases / sizeof ramp_cases[0]; k++)
    if (bench_selected(opts, ramp_cases[k].name))
      run_ramp_case(opts, cases, &ramp_cases[k]);
  if (bench_selected(opts, "breaker_run")) case_breaker_run(opts, cases);
  if (bench_selected(opts, "retry_run")) case_retry_run(opts, cases);
  if (bench_selected(opts, "ratelimiter_acquire"))
    case_ratelimiter_acquire(opts, cases);
  if (bench_selected(opts, "shared_ratelimiter_acquire"))
    case_shared_ratelimiter_acquire(opts, cases);
  if (bench_selected(opts, "bulkhead_acquire_release"))
    case_bulkhead_acquire_release(opts, cases);
  if (bench_selected(opts, "chain4_run")) case_chain4_run(opts, cases);
  if (bench_selected(opts, "breaker_2threads"))
    case_breaker_threads(opts, cases, 2);
  if (bench_selected(opts, "breaker_1thread"))
    case_breaker_threads(opts, cases, 1);
  json_object_set_new(root, "cases", cases);

  long long bytes = breaker_bytes_100();
  printf("  breaker with a 100-call count window: %lld bytes\n", bytes);
  json_object_set_new(root, "breaker_bytes_100_window",
                      bytes < 0 ? json_null() : json_integer(bytes));

  char method[512];
  snprintf(method, sizeof method,
           "single-thread cases: warm-up >= 100 ms, calibration, then %d runs "
           "of a fixed iteration count lasting >= %lld ms each; thread cases: "
           "%d runs of %lld ms after a warm-up run, threads %s; figure = "
           "median; timer clock_gettime(CLOCK_MONOTONIC) around each run",
           opts->runs, (long long)(opts->min_run_ns / 1000000), opts->runs,
           (long long)(opts->thread_run_ns / 1000000),
           opts->pin_threads ? "pinned to distinct CPUs" : "not pinned");
  json_object_set_new(root, "method", json_string(method));
  json_object_set_new(root, "library_version", json_string(resil_version()));

  int rc = json_dump_file(root, json_path, JSON_INDENT(2) | JSON_REAL_PRECISION(6));
  json_decref(root);
  if (rc != 0) {
    fprintf(stderr, "resil_bench: cannot write %s\n", json_path);
    return 1;
  }
  return 0;
}
