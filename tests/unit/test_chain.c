/* Chains with custom layers: nesting, accounting, fallback rules,
 * amplification, and the lifetime of frames below a layer that abandons
 * its call. The library's own policies in chains are tested in
 * test_chain_policies.c and by the lab experiments. */
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <stdlib.h>

#include "resil/chain.h"
#include "test_util.h"

static resil_outcome pass_run(void *policy, const resil_ctx *ctx,
                              resil_call_fn fn, void *arg) {
  (void)policy;
  return fn(arg, ctx);
}

static resil_outcome reject_run(void *policy, const resil_ctx *ctx,
                                resil_call_fn fn, void *arg) {
  (void)policy;
  (void)ctx;
  (void)fn;
  (void)arg;
  return resil_outcome_make(RESIL_REJECTED, RESIL_REASON_BULKHEAD_FULL);
}

/* A minimal retry: up to *(int *)policy attempts until success. */
static resil_outcome again_run(void *policy, const resil_ctx *ctx,
                               resil_call_fn fn, void *arg) {
  int n = *(int *)policy;
  resil_outcome o = resil_outcome_failure();
  for (int i = 0; i < n; i++) {
    o = fn(arg, ctx);
    if (resil_outcome_is_success(&o)) break;
  }
  return o;
}

typedef struct script {
  int calls;
  int fail_first;
  resil_outcome fail_with;
} script;

static resil_outcome scripted(void *arg, const resil_ctx *ctx) {
  (void)ctx;
  script *s = arg;
  s->calls++;
  if (s->calls <= s->fail_first) return s->fail_with;
  return resil_outcome_ok();
}

static resil_chain *make_chain(int64_t total_timeout_ns, resil_fallback_fn fb,
                               void *fb_arg) {
  resil_chain_config cc;
  resil_chain_config_init(&cc);
  cc.total_timeout_ns = total_timeout_ns;
  cc.fallback = fb;
  cc.fallback_arg = fb_arg;
  resil_chain *ch = NULL;
  assert_status(RESIL_OK, resil_chain_new(&cc, &ch, NULL));
  return ch;
}

static void chain_prints_nesting_and_counts_each_layer(void **state) {
  (void)state;
  int three = 3, dummy = 0;
  resil_chain *ch = make_chain(0, NULL, NULL);
  resil_layer l = {.struct_size = sizeof(resil_layer), .kind = RESIL_LAYER_RETRY, .name = "r", .policy = &three,
                   .run = again_run, .max_attempts = 3};
  assert_status(RESIL_OK, resil_chain_add_layer(ch, &l));
  resil_layer b = {.struct_size = sizeof(resil_layer), .kind = RESIL_LAYER_BREAKER, .name = "b", .policy = &dummy,
                   .run = pass_run};
  assert_status(RESIL_OK, resil_chain_add_layer(ch, &b));
  char buf[1024];
  size_t need = resil_chain_nesting(ch, buf, sizeof buf);
  assert_string_equal(buf, "Retry(Breaker(call))");
  assert_int_equal(need, strlen("Retry(Breaker(call))"));
  /* Truncation still reports the needed length. */
  char tiny[6];
  assert_int_equal(resil_chain_nesting(ch, tiny, sizeof tiny), need);
  assert_string_equal(tiny, "Retry");

  script s = {.fail_first = 2, .fail_with = resil_outcome_failure()};
  resil_outcome o = resil_chain_run(ch, NULL, scripted, &s);
  assert_true(resil_outcome_is_success(&o));
  assert_int_equal(s.calls, 3);
  resil_layer_stats st;
  assert_status(RESIL_OK, resil_chain_layer_stats(ch, 0, &st));
  assert_int_equal(st.calls_in, 1);
  assert_int_equal(st.attempts_out, 3);
  assert_int_equal(st.successes, 1);
  assert_int_equal(st.by_kind[RESIL_ANSWERED], 1);
  assert_status(RESIL_OK, resil_chain_layer_stats(ch, 1, &st));
  assert_int_equal(st.calls_in, 3);
  assert_int_equal(st.attempts_out, 3);
  assert_int_equal(st.successes, 1);
  resil_chain_call_stats(ch, &st);
  assert_int_equal(st.calls_in, 3);
  assert_status(RESIL_EINVAL, resil_chain_layer_stats(ch, 2, &st));

  /* The describe text names each unit, notes that the breaker counts
   * attempts (the recommended order: a note, not a warning) and warns about
   * the real trap (no deadline). */
  resil_chain_describe(ch, buf, sizeof buf);
  assert_non_null(strstr(buf, "Retry(Breaker(call))"));
  assert_non_null(strstr(buf, "physical attempts"));
  assert_non_null(strstr(buf, "note: retry \"r\" is outside breaker \"b\""));
  assert_non_null(strstr(buf, "counts every attempt"));
  assert_null(strstr(buf, "warning: retry \"r\" is outside"));
  assert_non_null(strstr(buf, "warning: retry \"r\" runs without a total deadline"));
  assert_int_equal(resil_chain_warnings(ch), 1);
  resil_chain_free(ch);
}

static void chain_counts_rejections_of_the_refusing_layer(void **state) {
  (void)state;
  int dummy = 0;
  resil_chain *ch = make_chain(0, NULL, NULL);
  resil_layer a = {.struct_size = sizeof(resil_layer), .kind = RESIL_LAYER_CUSTOM, .label = "Outer", .name = "a",
                   .policy = &dummy, .run = pass_run};
  resil_layer r = {.struct_size = sizeof(resil_layer), .kind = RESIL_LAYER_BULKHEAD, .name = "full",
                   .policy = &dummy, .run = reject_run};
  assert_status(RESIL_OK, resil_chain_add_layer(ch, &a));
  assert_status(RESIL_OK, resil_chain_add_layer(ch, &r));
  script s = {0};
  resil_outcome o = resil_chain_run(ch, NULL, scripted, &s);
  assert_int_equal(o.kind, RESIL_REJECTED);
  assert_int_equal(s.calls, 0);
  resil_layer_stats st;
  resil_chain_layer_stats(ch, 0, &st);
  assert_int_equal(st.rejections, 0); /* it passed the call on */
  assert_int_equal(st.by_kind[RESIL_REJECTED], 1);
  resil_chain_layer_stats(ch, 1, &st);
  assert_int_equal(st.rejections, 1);
  assert_int_equal(st.attempts_out, 0);
  resil_chain_free(ch);
}

typedef struct fb_seen {
  int calls;
  resil_outcome last;
  resil_fallback_kind answer;
} fb_seen;

static resil_fallback_kind record_fallback(void *fa, void *call_arg,
                                           const resil_outcome *o) {
  (void)call_arg;
  fb_seen *f = fa;
  f->calls++;
  f->last = *o;
  return f->answer;
}

/* The recommended order with a deadline has no trap: a note, no warning. */
static void recommended_order_with_a_deadline_has_no_warning(void **state) {
  (void)state;
  int three = 3, dummy = 0;
  resil_chain *ch = make_chain(MS(2000), NULL, NULL);
  resil_layer l = {.struct_size = sizeof(resil_layer), .kind = RESIL_LAYER_RETRY,
                   .name = "r", .policy = &three, .run = again_run, .max_attempts = 3};
  assert_status(RESIL_OK, resil_chain_add_layer(ch, &l));
  resil_layer b = {.struct_size = sizeof(resil_layer), .kind = RESIL_LAYER_BREAKER,
                   .name = "b", .policy = &dummy, .run = pass_run};
  assert_status(RESIL_OK, resil_chain_add_layer(ch, &b));
  char buf[2048];
  resil_chain_describe(ch, buf, sizeof buf);
  assert_int_equal(resil_chain_warnings(ch), 0);
  assert_non_null(strstr(buf, "note: retry \"r\" is outside breaker \"b\""));
  assert_null(strstr(buf, "warning"));
  resil_chain_free(ch);
  /* A layer whose struct_size is not a resil_layer's is refused. */
  ch = make_chain(0, NULL, NULL);
  resil_layer bad = b;
  bad.struct_size = 0;
  assert_status(RESIL_EINVAL, resil_chain_add_layer(ch, &bad));
  assert_int_equal(resil_chain_layers(ch), 0);
  resil_chain_free(ch);
}

/* Retries and hedges last (DESIGN §2.9): describe names the breaker each
 * library retry and hedge layer watches (the breaker layer inside it, or
 * the config's recovery_breaker), or that it retries during recovery. */
static void describe_names_the_breaker_retries_and_hedges_watch(void **state) {
  (void)state;
  resil_breaker_config bc;
  resil_breaker_config_init(&bc);
  bc.name = "payments";
  resil_breaker *br = NULL;
  assert_status(RESIL_OK, resil_breaker_new(&bc, &br, NULL));
  resil_retry_config rc;
  resil_retry_config_init(&rc);
  rc.name = "r";
  resil_retry *last = NULL, *during = NULL;
  assert_status(RESIL_OK, resil_retry_new(&rc, &last, NULL));
  rc.name = "r2";
  rc.retry_during_recovery = 1;
  assert_status(RESIL_OK, resil_retry_new(&rc, &during, NULL));
  resil_hedge_config hc;
  resil_hedge_config_init(&hc);
  hc.name = "h";
  hc.delay_ns = MS(5);
  hc.recovery_breaker = br;
  resil_hedge *h = NULL;
  assert_status(RESIL_OK, resil_hedge_new(&hc, &h, NULL));
  char buf[4096];
  /* Retry(Breaker(call)): the retry watches the breaker layer */
  resil_chain *ch = make_chain(MS(2000), NULL, NULL);
  assert_status(RESIL_OK, resil_chain_add_retry(ch, last));
  assert_status(RESIL_OK, resil_chain_add_breaker(ch, br));
  resil_chain_describe(ch, buf, sizeof buf);
  assert_non_null(strstr(buf, "note: retry \"r\" retries last: while breaker \"payments\" is "
                              "HALF_OPEN or ramping after recovery it makes no retry"));
  assert_int_equal(resil_chain_warnings(ch), 0);
  resil_chain_free(ch);
  /* retry_during_recovery: the breaker inside is not watched */
  ch = make_chain(MS(2000), NULL, NULL);
  assert_status(RESIL_OK, resil_chain_add_retry(ch, during));
  assert_status(RESIL_OK, resil_chain_add_breaker(ch, br));
  resil_chain_describe(ch, buf, sizeof buf);
  assert_non_null(strstr(buf, "note: retry \"r2\" retries during recovery too "
                              "(retry_during_recovery): breaker \"payments\" inside it is not "
                              "watched"));
  assert_null(strstr(buf, "retries last"));
  resil_chain_free(ch);
  /* a hedge without a breaker layer: its recovery_breaker; a retry
   * watching nothing gets no note */
  ch = make_chain(MS(2000), NULL, NULL);
  assert_status(RESIL_OK, resil_chain_add_hedge(ch, h));
  resil_chain_describe(ch, buf, sizeof buf);
  assert_non_null(strstr(buf, "note: hedge \"h\" hedges last: while breaker \"payments\" is "
                              "HALF_OPEN or ramping after recovery it sends no hedge"));
  resil_chain_free(ch);
  ch = make_chain(MS(2000), NULL, NULL);
  assert_status(RESIL_OK, resil_chain_add_retry(ch, last));
  resil_chain_describe(ch, buf, sizeof buf);
  assert_null(strstr(buf, "recovery"));
  resil_chain_free(ch);
  resil_hedge_free(h);
  resil_retry_free(during);
  resil_retry_free(last);
  resil_breaker_free(br);
}

static void fallback_tells_rejection_from_failure_and_never_fakes_success(
    void **state) {
  (void)state;
  int dummy = 0;
  fb_seen f = {.answer = RESIL_FALLBACK_CACHED};
  resil_chain *ch = make_chain(0, record_fallback, &f);
  resil_layer l = {.struct_size = sizeof(resil_layer), .kind = RESIL_LAYER_CUSTOM, .name = "p", .policy = &dummy,
                   .run = pass_run};
  assert_status(RESIL_OK, resil_chain_add_layer(ch, &l));

  /* A failing idempotent read: the cached value may be served. */
  resil_ctx ctx;
  resil_ctx_init(&ctx);
  ctx.flags = RESIL_CALL_IDEMPOTENT;
  script s = {.fail_first = 9, .fail_with = resil_outcome_failure()};
  resil_outcome o = resil_chain_run(ch, &ctx, scripted, &s);
  assert_int_equal(f.calls, 1);
  assert_int_equal(f.last.kind, RESIL_ANSWERED);
  assert_int_equal(f.last.reason, RESIL_REASON_FAILURE);
  assert_false(resil_outcome_is_success(&o));
  assert_true(o.flags & RESIL_OF_FALLBACK_CACHED);

  /* A write that may have executed: CACHED is refused, becomes PENDING. */
  ctx.flags = 0;
  s.fail_with = resil_outcome_make(RESIL_UNKNOWN, RESIL_REASON_TIMEOUT);
  o = resil_chain_run(ch, &ctx, scripted, &s);
  assert_int_equal(o.kind, RESIL_UNKNOWN);
  assert_true(o.flags & RESIL_OF_FALLBACK_PENDING);
  assert_false(o.flags & RESIL_OF_FALLBACK_CACHED);

  /* A write that was never sent: UNAVAILABLE. */
  s.fail_with = resil_outcome_make(RESIL_NOT_SENT, RESIL_REASON_CONNECT_REFUSED);
  o = resil_chain_run(ch, &ctx, scripted, &s);
  assert_true(o.flags & RESIL_OF_FALLBACK_UNAVAILABLE);
  resil_chain_free(ch);

  /* A rejection reaches the fallback as REJECTED, not as a failure. */
  f.calls = 0;
  f.answer = RESIL_FALLBACK_UNAVAILABLE;
  ch = make_chain(0, record_fallback, &f);
  resil_layer r = {.struct_size = sizeof(resil_layer), .kind = RESIL_LAYER_BREAKER, .name = "open", .policy = &dummy,
                   .run = reject_run};
  assert_status(RESIL_OK, resil_chain_add_layer(ch, &r));
  o = resil_chain_run(ch, NULL, scripted, &s);
  assert_int_equal(f.calls, 1);
  assert_int_equal(f.last.kind, RESIL_REJECTED);
  assert_int_equal(o.kind, RESIL_REJECTED);
  /* A success never reaches the fallback. */
  s.fail_first = 0;
  s.calls = 0;
  resil_chain_free(ch);
  ch = make_chain(0, record_fallback, &f);
  assert_status(RESIL_OK, resil_chain_add_layer(ch, &l));
  o = resil_chain_run(ch, NULL, scripted, &s);
  assert_true(resil_outcome_is_success(&o));
  assert_int_equal(f.calls, 1);
  assert_int_equal(o.flags, 0);
  resil_chain_free(ch);
}

#define AMP(a, w) {.struct_size = sizeof(resil_amp_layer), .max_attempts = (a), .wait_per_run_ns = (w)}

static void amplification_of_nested_retries(void **state) {
  (void)state;
  resil_amp_layer l[3] = {AMP(2, MS(100)), AMP(3, MS(150)), AMP(2, MS(50))};
  resil_amplification a;
  assert_status(RESIL_OK, resil_amplification_compute(l, 3, MS(500), &a));
  assert_int_equal(a.attempts, 12);
  /* 100 once + 150 twice + 50 six times = 700 ms of backoff. */
  assert_int_equal(a.wait_ns, MS(700));
  assert_int_equal(a.time_ns, MS(6700));
  resil_amp_layer r[3] = {AMP(3, 0), AMP(4, 0), AMP(3, 0)}; /* "retries 2/3/2" */
  assert_status(RESIL_OK, resil_amplification_compute(r, 3, 0, &a));
  assert_int_equal(a.attempts, 36);
  resil_amp_layer bad = AMP(0, 0);
  assert_status(RESIL_EINVAL, resil_amplification_compute(&bad, 1, 0, &a));
  assert_status(RESIL_EINVAL, resil_amplification_compute(l, 0, 0, &a));
  resil_amp_layer huge[2] = {AMP(UINT32_MAX, INT64_MAX), AMP(UINT32_MAX, INT64_MAX)};
  assert_status(RESIL_OK, resil_amplification_compute(huge, 2, INT64_MAX, &a));
  assert_int_equal(a.time_ns, INT64_MAX); /* saturates */
}

static void chain_applies_total_deadline_once(void **state) {
  (void)state;
  resil_manual_clock *mc;
  assert_status(RESIL_OK, resil_manual_clock_new(MS(1000), 0, &mc));
  resil_chain_config cc;
  resil_chain_config_init(&cc);
  cc.total_timeout_ns = MS(700);
  cc.clock = resil_manual_clock_get(mc);
  resil_chain *ch;
  assert_status(RESIL_OK, resil_chain_new(&cc, &ch, NULL));
  int dummy = 0;
  resil_layer l = {.struct_size = sizeof(resil_layer), .kind = RESIL_LAYER_CUSTOM, .policy = &dummy, .run = pass_run};
  assert_status(RESIL_OK, resil_chain_add_layer(ch, &l));
  int64_t seen = 0;
  resil_ctx ctx;
  resil_ctx_init(&ctx);
  ctx.user = &seen;
  resil_outcome o = resil_chain_run(ch, &ctx, (resil_call_fn)NULL, NULL);
  assert_int_equal(o.reason, RESIL_REASON_LOCAL_ERROR); /* NULL fn refused */
  /* A ctx never passed through resil_ctx_init() is refused too. */
  resil_ctx raw;
  memset(&raw, 0, sizeof raw);
  script s = {.fail_first = 0};
  o = resil_chain_run(ch, &raw, scripted, &s);
  assert_int_equal(o.reason, RESIL_REASON_LOCAL_ERROR);
  assert_int_equal(s.calls, 0);
  /* NULL handles: 0, nothing written, RESIL_EMISUSE. */
  char buf[8] = "x";
  assert_int_equal(resil_chain_describe(NULL, buf, sizeof buf), 0);
  assert_string_equal(buf, "");
  assert_int_equal(resil_chain_layers(NULL), 0);
  assert_int_equal(resil_chain_warnings(NULL), 0);
  resil_layer_stats ls;
  assert_status(RESIL_EMISUSE, resil_chain_call_stats(NULL, &ls));
  assert_status(RESIL_EINVAL, resil_chain_call_stats(ch, NULL));
  resil_amplification am;
  assert_status(RESIL_EMISUSE, resil_chain_amplification(NULL, &am));
  resil_chain_free(ch);
  resil_manual_clock_free(mc);
}

static void config_validation_names_the_field(void **state) {
  (void)state;
  resil_chain_config cc;
  resil_chain_config_init(&cc);
  cc.total_timeout_ns = -1;
  resil_chain *ch = (resil_chain *)&cc;
  resil_error e;
  assert_status(RESIL_EINVAL, resil_chain_new(&cc, &ch, &e));
  assert_null(ch);
  assert_string_equal(e.field, "total_timeout_ns");
  assert_int_equal(e.got, -1);
  /* A config never passed through _init is refused, naming the fix. */
  memset(&cc, 0, sizeof cc);
  assert_status(RESIL_EINVAL, resil_chain_new(&cc, &ch, &e));
  assert_string_equal(e.field, "struct_size");
  assert_non_null(strstr(e.msg, "call resil_chain_config_init()"));
  resil_chain_free(NULL);
}

static void allocation_failures_leave_nothing_behind(void **state) {
  (void)state;
  for (long fail = 1; fail < 10; fail++) {
    test_alloc ta;
    test_alloc_init(&ta, fail);
    resil_chain_config cc;
    resil_chain_config_init(&cc);
    cc.alloc = &ta.a;
    resil_chain *ch = NULL;
    resil_status st = resil_chain_new(&cc, &ch, NULL);
    if (st == RESIL_OK) {
      int dummy = 0;
      resil_layer l = {.struct_size = sizeof(resil_layer), .kind = RESIL_LAYER_CUSTOM, .name = "x", .policy = &dummy,
                       .run = pass_run};
      resil_status st2 = resil_chain_add_layer(ch, &l);
      assert_true(st2 == RESIL_OK || st2 == RESIL_ENOMEM);
      resil_chain_free(ch);
    } else {
      assert_status(RESIL_ENOMEM, st);
    }
    assert_int_equal(ta.live, 0);
  }
}

/* A layer that runs its call on a detached thread and stops waiting at
 * once, like a time limiter whose timeout fired: the frames below it must
 * stay valid until the abandoned call ends (ASan checks). */
typedef struct abandon_job {
  resil_call_fn fn;
  void *arg;
  resil_ctx ctx;
  atomic_int *done;
} abandon_job;

static void *abandon_thread(void *p) {
  abandon_job *j = p;
  test_sleep_ms(20); /* let the caller return first */
  j->fn(j->arg, &j->ctx);
  atomic_fetch_add(j->done, 1);
  free(j);
  return NULL;
}

static resil_outcome abandon_run(void *policy, const resil_ctx *ctx,
                                 resil_call_fn fn, void *arg) {
  abandon_job *j = malloc(sizeof *j);
  j->fn = fn;
  j->arg = arg;
  j->ctx = *ctx;
  j->done = policy;
  pthread_t t;
  pthread_create(&t, NULL, abandon_thread, j);
  pthread_detach(t);
  return resil_outcome_make(RESIL_UNKNOWN, RESIL_REASON_TIMEOUT);
}

static atomic_int effects;
static resil_outcome count_effect(void *arg, const resil_ctx *ctx) {
  (void)arg;
  (void)ctx;
  atomic_fetch_add(&effects, 1);
  return resil_outcome_ok();
}

static void frames_below_an_abandoning_layer_outlive_the_caller(void **state) {
  (void)state;
  atomic_int done = 0;
  int dummy = 0;
  resil_chain *ch = make_chain(0, NULL, NULL);
  resil_layer tl = {.struct_size = sizeof(resil_layer), .kind = RESIL_LAYER_TIMELIMITER, .name = "tl",
                    .policy = &done, .run = abandon_run,
                    .attempt_timeout_ns = MS(25)};
  resil_layer inner = {.struct_size = sizeof(resil_layer), .kind = RESIL_LAYER_BULKHEAD, .name = "bh",
                       .policy = &dummy, .run = pass_run};
  assert_status(RESIL_OK, resil_chain_add_layer(ch, &tl));
  assert_status(RESIL_OK, resil_chain_add_layer(ch, &inner));
  for (int i = 0; i < 3; i++) {
    resil_outcome o = resil_chain_run(ch, NULL, count_effect, NULL);
    assert_int_equal(o.kind, RESIL_UNKNOWN);
  }
  for (int i = 0; i < 200 && atomic_load(&done) < 3; i++) test_sleep_ms(5);
  assert_int_equal(atomic_load(&done), 3);
  assert_int_equal(atomic_load(&effects), 3);
  resil_layer_stats st;
  resil_chain_layer_stats(ch, 1, &st);
  assert_int_equal(st.calls_in, 3);
  resil_chain_free(ch);
}


/* Turns the success from below into a failure when *(int *)policy is set. */
static resil_outcome spoil_run(void *policy, const resil_ctx *ctx,
                               resil_call_fn fn, void *arg) {
  resil_outcome o = fn(arg, ctx);
  if (*(int *)policy && resil_outcome_is_success(&o)) o = resil_outcome_failure();
  return o;
}

/* Calls below twice, successes or not, and returns the second outcome. */
static resil_outcome twice_run(void *policy, const resil_ctx *ctx,
                               resil_call_fn fn, void *arg) {
  (void)policy;
  (void)fn(arg, ctx);
  return fn(arg, ctx);
}

static void expect_layer(resil_chain *ch, size_t i, uint64_t in, uint64_t out,
                         uint64_t ok, uint64_t answered) {
  resil_layer_stats st;
  if (i == SIZE_MAX)
    assert_status(RESIL_OK, resil_chain_call_stats(ch, &st));
  else
    assert_status(RESIL_OK, resil_chain_layer_stats(ch, i, &st));
  assert_int_equal(st.calls_in, in);
  assert_int_equal(st.attempts_out, out);
  assert_int_equal(st.successes, ok);
  assert_int_equal(st.by_kind[RESIL_ANSWERED], answered);
}

/* A pass in which every layer makes one attempt and succeeds is counted
 * once for the whole chain (one atomic add); the figures read must stay
 * those of counting every layer, also when a later attempt, a layer that
 * changes the outcome or a layer that calls twice makes such a pass part
 * of a different logical call. */
static void chain_counts_clean_passes_like_every_layer(void **state) {
  (void)state;
  int three = 3, spoil = 0, dummy = 0;
  resil_chain *ch = make_chain(0, NULL, NULL);
  resil_layer r = {.struct_size = sizeof(resil_layer), .kind = RESIL_LAYER_RETRY, .name = "r",
                   .policy = &three, .run = again_run, .max_attempts = 3};
  resil_layer b = {.struct_size = sizeof(resil_layer), .kind = RESIL_LAYER_BREAKER, .name = "b",
                   .policy = &dummy, .run = pass_run};
  resil_layer x = {.struct_size = sizeof(resil_layer), .kind = RESIL_LAYER_CUSTOM, .name = "x",
                   .policy = &spoil, .run = spoil_run};
  assert_status(RESIL_OK, resil_chain_add_layer(ch, &r));
  assert_status(RESIL_OK, resil_chain_add_layer(ch, &b));
  assert_status(RESIL_OK, resil_chain_add_layer(ch, &x));

  /* Two clean calls. */
  for (int k = 0; k < 2; k++) {
    script s = {0};
    resil_outcome o = resil_chain_run(ch, NULL, scripted, &s);
    assert_true(resil_outcome_is_success(&o));
  }
  expect_layer(ch, 0, 2, 2, 2, 2);
  expect_layer(ch, 1, 2, 2, 2, 2);
  expect_layer(ch, 2, 2, 2, 2, 2);
  expect_layer(ch, SIZE_MAX, 2, 2, 2, 2);

  /* One failed attempt, then a clean pass below the retry. */
  script s1 = {.fail_first = 1, .fail_with = resil_outcome_failure()};
  resil_outcome o = resil_chain_run(ch, NULL, scripted, &s1);
  assert_true(resil_outcome_is_success(&o));
  expect_layer(ch, 0, 3, 4, 3, 3);
  expect_layer(ch, 1, 4, 4, 3, 4);
  expect_layer(ch, 2, 4, 4, 3, 4);
  expect_layer(ch, SIZE_MAX, 4, 4, 3, 4);

  /* The call succeeds, layer x fails it: every attempt is a failure above
   * x, a success at the call. */
  spoil = 1;
  script s2 = {0};
  o = resil_chain_run(ch, NULL, scripted, &s2);
  assert_false(resil_outcome_is_success(&o));
  assert_int_equal(s2.calls, 3);
  expect_layer(ch, 0, 4, 7, 3, 4);
  expect_layer(ch, 1, 7, 7, 3, 7);
  expect_layer(ch, 2, 7, 7, 3, 7);
  expect_layer(ch, SIZE_MAX, 7, 7, 6, 7);
  resil_chain_free(ch);

  /* A layer that calls twice after a first clean pass. */
  ch = make_chain(0, NULL, NULL);
  resil_layer t = {.struct_size = sizeof(resil_layer), .kind = RESIL_LAYER_CUSTOM, .name = "t",
                   .policy = &dummy, .run = twice_run};
  assert_status(RESIL_OK, resil_chain_add_layer(ch, &t));
  assert_status(RESIL_OK, resil_chain_add_layer(ch, &b));
  script s3 = {0};
  o = resil_chain_run(ch, NULL, scripted, &s3);
  assert_true(resil_outcome_is_success(&o));
  assert_int_equal(s3.calls, 2);
  expect_layer(ch, 0, 1, 2, 1, 1);
  expect_layer(ch, 1, 2, 2, 2, 2);
  expect_layer(ch, SIZE_MAX, 2, 2, 2, 2);
  resil_chain_free(ch);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(chain_prints_nesting_and_counts_each_layer),
      cmocka_unit_test(chain_counts_clean_passes_like_every_layer),
      cmocka_unit_test(chain_counts_rejections_of_the_refusing_layer),
      cmocka_unit_test(recommended_order_with_a_deadline_has_no_warning),
      cmocka_unit_test(describe_names_the_breaker_retries_and_hedges_watch),
      cmocka_unit_test(fallback_tells_rejection_from_failure_and_never_fakes_success),
      cmocka_unit_test(amplification_of_nested_retries),
      cmocka_unit_test(chain_applies_total_deadline_once),
      cmocka_unit_test(config_validation_names_the_field),
      cmocka_unit_test(allocation_failures_leave_nothing_behind),
      cmocka_unit_test(frames_below_an_abandoning_layer_outlive_the_caller),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
