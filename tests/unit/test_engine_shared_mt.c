/* The engine's waiting on shared instances (DESIGN 8.1, issue 20: "the
 * engine's waiting (bulkhead queue, rate-limiter reservation) works with
 * shared instances without a thread per waiter"): engine calls against the
 * real fixture on 127.0.0.1, with a bulkhead or a rate limiter kept in a
 * resil_shared segment, and another real process using the same instance.
 *
 * The other process is this test binary exec'ed again ("hold ..."), not a
 * bare fork: the fixture's server threads are running when a test starts,
 * and a child forked from a threaded process may only call
 * async-signal-safe functions. It opens the segment by name, creates the
 * instance with the same configuration, takes what the test asks, says 'y'
 * on its stdout and waits for a byte on its stdin ('r': give back and exit
 * 0). Every child is waited for or killed by its PID, within bounded
 * time. */
#include "test_engine_common.h"

#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>

#include "resil/bulkhead.h"
#include "resil/ratelimit.h"
#include "resil/shared.h"

#define SHARED_TEST_PREFIX "eng"
#include "test_shared_common.h"

extern char **environ;

static const resil_http_endpoint eps[] = {
    {.struct_size = sizeof(resil_http_endpoint), .name = "item", .path = "/items/{id}"},
};
#define NEPS (sizeof eps / sizeof eps[0])

enum { RL_LIMIT = 3 };
#define RL_PERIOD RESIL_S(1)
#define BH_WAIT RESIL_S(10)

static resil_bulkhead *shared_bulkhead(resil_shared *seg) {
  resil_bulkhead_config c;
  resil_bulkhead_config_init(&c);
  c.name = "db";
  c.max_concurrent = 1;
  c.max_wait_ns = BH_WAIT;
  c.shared = seg;
  resil_bulkhead *bh = NULL;
  resil_error err;
  if (resil_bulkhead_new(&c, &bh, &err) != RESIL_OK) {
    fprintf(stderr, "bulkhead: %s\n", err.msg);
    return NULL;
  }
  return bh;
}

static resil_ratelimiter *shared_limiter(resil_shared *seg) {
  resil_ratelimiter_config c;
  resil_ratelimiter_config_init(&c);
  c.name = "api";
  c.limit_for_period = RL_LIMIT;
  c.refresh_period_ns = RL_PERIOD;
  c.timeout_ns = RESIL_S(5);
  c.shared = seg;
  resil_ratelimiter *rl = NULL;
  resil_error err;
  if (resil_ratelimiter_new(&c, &rl, &err) != RESIL_OK) {
    fprintf(stderr, "limiter: %s\n", err.msg);
    return NULL;
  }
  return rl;
}

/* ---- the other process ------------------------------------------------------ */

/* `hold bh SEGMENT`: takes the bulkhead's one permit; `hold rl SEGMENT`:
 * takes every permit of the limiter's current cycle. Exit codes: 0 done,
 * 2.. a step failed. */
static int hold_main(const char *what, const char *segname) {
  resil_shared_config sc;
  resil_shared_config_init(&sc);
  sc.name = segname;
  sc.required = 1;
  resil_shared *seg = NULL;
  resil_error err;
  if (resil_shared_open(&sc, &seg, &err) != RESIL_OK) {
    fprintf(stderr, "hold: %s\n", err.msg);
    return 2;
  }
  char c = 'n';
  resil_bulkhead *bh = NULL;
  resil_ratelimiter *rl = NULL;
  if (strcmp(what, "bh") == 0) {
    if (!(bh = shared_bulkhead(seg))) return 3;
    if (resil_bulkhead_try_acquire(bh, NULL) == RESIL_DECISION_GO) c = 'y';
  } else {
    if (!(rl = shared_limiter(seg))) return 3;
    /* Everything the cycle has left: a deadline 1 ns away turns a permit
     * of a coming cycle into a refusal (nothing consumed). */
    int got = 0;
    for (;;) {
      resil_ctx ctx;
      resil_ctx_init(&ctx);
      resil_ctx_set_timeout_ns(&ctx, 1);
      if (resil_ratelimiter_reserve(rl, 1, &ctx, NULL, NULL) != RESIL_DECISION_GO) break;
      got++;
    }
    if (got > 0) c = 'y';
  }
  if (write(1, &c, 1) != 1 || c != 'y') return 4;
  if (read(0, &c, 1) != 1) return 5;
  int rc = 0;
  if (bh && resil_bulkhead_release(bh) != RESIL_OK) rc = 6;
  resil_bulkhead_free(bh);
  resil_ratelimiter_free(rl);
  resil_shared_close(seg);
  return rc;
}

typedef struct holder {
  pid_t pid;
  int to;   /* its stdin */
  int from; /* its stdout */
} holder;

static char exe[4096];

static holder spawn_holder(const char *what, const char *segname) {
  int in[2], out[2];
  assert_int_equal(pipe(in), 0);
  assert_int_equal(pipe(out), 0);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, in[0], 0);
  posix_spawn_file_actions_adddup2(&fa, out[1], 1);
  posix_spawn_file_actions_addclose(&fa, in[1]);
  posix_spawn_file_actions_addclose(&fa, out[0]);
  char *argv[] = {exe, (char *)"hold", (char *)what, (char *)segname, NULL};
  holder h = {-1, in[1], out[0]};
  assert_int_equal(posix_spawn(&h.pid, exe, &fa, NULL, argv, environ), 0);
  posix_spawn_file_actions_destroy(&fa);
  close(in[0]);
  close(out[1]);
  /* Its answer, within 10 s. */
  struct pollfd p = {h.from, POLLIN, 0};
  assert_int_equal(poll(&p, 1, 10000), 1);
  char c = 0;
  assert_int_equal(read(h.from, &c, 1), 1);
  assert_int_equal(c, 'y');
  return h;
}

/* Tells it to give back and exit (or kills it), and reaps it: its exit
 * status (0 expected), or the signal's number + 128. */
static int end_holder(holder *h, int kill_it) {
  if (kill_it) assert_int_equal(kill(h->pid, SIGKILL), 0);
  else assert_int_equal(write(h->to, "r", 1), 1);
  int st = 0;
  int64_t t0 = mono();
  pid_t r;
  while ((r = waitpid(h->pid, &st, WNOHANG)) == 0 && mono() - t0 < RESIL_S(10)) test_sleep_ms(1);
  if (r == 0) {
    kill(h->pid, SIGKILL);
    waitpid(h->pid, &st, 0);
  }
  close(h->to);
  close(h->from);
  h->pid = -1;
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* ---- tests --------------------------------------------------------------------- */

/* Another process holds the shared bulkhead's only permit: three engine
 * calls queue (no thread per waiter: they wait in the bulkhead's queue,
 * woken by its one helper thread) and nothing is sent; the other process
 * releases: the calls run one at a time and all succeed. */
static void engine_calls_wait_for_a_permit_another_process_releases(void **state) {
  fx_state *s = *state;
  resil_shared_config sc;
  char name[64];
  seg_config(&sc, name, sizeof name, "bh");
  resil_shared *seg = seg_open(&sc);
  resil_bulkhead *bh = shared_bulkhead(seg);
  assert_non_null(bh);
  holder h = spawn_holder("bh", name);
  assert_int_equal(resil_bulkhead_available(bh), 0);

  te_env *t = te_open(s->f, eps, NEPS, NULL, NULL);
  resil_engine_policies pol;
  resil_engine_policies_init(&pol);
  pol.bulkhead = bh;
  done_rec *d = rec_new();
  for (size_t i = 0; i < 3; i++)
    assert_int_equal(submit(t->e, d, i, "item", KV("id", "1"), &pol, NULL, NULL), RESIL_OK);
  /* 200 ms of loop: all three wait, nothing sent. */
  int64_t t0 = mono();
  while (mono() - t0 < RESIL_MS(200)) tl_run_once(&t->l, 10);
  assert_int_equal(atomic_load(&d->done), 0);
  assert_int_equal(resil_fixture_attempts(s->f, "items"), 0);
  resil_bulkhead_metrics m;
  assert_int_equal(resil_bulkhead_get_metrics(bh, &m), RESIL_OK);
  assert_int_equal(m.waiting, 3);

  int64_t released = mono();
  assert_int_equal(end_holder(&h, 0), 0);
  assert_true(tl_run_until(&t->l, &d->done, 3, 30000));
  print_message("first call done %.1f ms after the other process released\n",
                (double)(d->at_ms[0] * 1000000 - released) / 1e6);
  for (size_t i = 0; i < 3; i++) {
    assert_int_equal(d->count[i], 1);
    assert_int_equal(d->status[i], 200);
  }
  assert_int_equal(resil_bulkhead_get_metrics(bh, &m), RESIL_OK);
  assert_int_equal(m.waiting, 0);
  assert_int_equal(m.in_flight, 0);
  assert_true(resil_engine_peak_in_flight(t->e) <= 1);
  assert_int_equal(resil_bulkhead_available(bh), 1);
  assert_int_equal(d->wrong_thread, 0);
  te_close(t);
  resil_bulkhead_free(bh);
  seg_done(seg, &sc);
}

/* The other process holding the permit is SIGKILLed: its permit comes back
 * (DESIGN 8.1: within 1 s) and the waiting engine call runs. */
static void a_permit_of_a_killed_process_starts_the_waiting_engine_call(void **state) {
  fx_state *s = *state;
  resil_shared_config sc;
  char name[64];
  seg_config(&sc, name, sizeof name, "bhk");
  resil_shared *seg = seg_open(&sc);
  resil_bulkhead *bh = shared_bulkhead(seg);
  assert_non_null(bh);
  holder h = spawn_holder("bh", name);

  te_env *t = te_open(s->f, eps, NEPS, NULL, NULL);
  resil_engine_policies pol;
  resil_engine_policies_init(&pol);
  pol.bulkhead = bh;
  done_rec *d = rec_new();
  assert_int_equal(submit(t->e, d, 0, "item", KV("id", "2"), &pol, NULL, NULL), RESIL_OK);
  int64_t t0 = mono();
  while (mono() - t0 < RESIL_MS(100)) tl_run_once(&t->l, 10);
  assert_int_equal(atomic_load(&d->done), 0);

  int64_t killed = mono();
  assert_int_equal(end_holder(&h, 1), 128 + SIGKILL);
  assert_true(tl_run_until(&t->l, &d->done, 1, 30000));
  double after_ms = (double)(d->at_ms[0] * 1000000 - killed) / 1e6;
  print_message("the waiting call done %.1f ms after the holder was killed\n", after_ms);
  assert_int_equal(d->status[0], 200);
  assert_true(after_ms < 1000 + 500); /* 1 s, and the call itself */
  assert_int_equal(resil_bulkhead_available(bh), 1);
  te_close(t);
  resil_bulkhead_free(bh);
  seg_done(seg, &sc);
}

/* Another process took every permit of the shared limiter's cycle: this
 * process sees none left, and its engine calls become timers (no thread
 * sleeps) that start in a later cycle, never before the reading's
 * nanos_to_wait. With a per-process limiter they would start at once. */
static void engine_reservations_count_the_permits_another_process_took(void **state) {
  fx_state *s = *state;
  resil_shared_config sc;
  char name[64];
  seg_config(&sc, name, sizeof name, "rl");
  resil_shared *seg = seg_open(&sc);
  resil_ratelimiter *rl = shared_limiter(seg);
  assert_non_null(rl);
  holder h = spawn_holder("rl", name);

  /* read_at is taken before the reading: nanos_to_wait counts from an
   * instant at or after it, so the calls start at least nanos_to_wait
   * after read_at (taken after, a slow return would shorten it). */
  resil_ratelimiter_metrics m;
  int64_t read_at = mono();
  assert_int_equal(resil_ratelimiter_get_metrics(rl, &m), RESIL_OK);
  /* Unless the cycle turned between the child's acquisitions and this
   * reading (then the child takes the new cycle's permits on a retry). */
  for (int tries = 0; m.available != 0 && tries < 3; tries++) {
    assert_int_equal(end_holder(&h, 0), 0);
    h = spawn_holder("rl", name);
    read_at = mono();
    assert_int_equal(resil_ratelimiter_get_metrics(rl, &m), RESIL_OK);
  }
  assert_int_equal(m.available, 0);
  assert_true(m.nanos_to_wait > 0);

  te_env *t = te_open(s->f, eps, NEPS, NULL, NULL);
  resil_engine_policies pol;
  resil_engine_policies_init(&pol);
  pol.ratelimiter = rl;
  done_rec *d = rec_new();
  for (size_t i = 0; i < 2; i++)
    assert_int_equal(submit(t->e, d, i, "item", KV("id", "3"), &pol, NULL, NULL), RESIL_OK);
  assert_true(tl_run_until(&t->l, &d->done, 2, 30000));
  for (size_t i = 0; i < 2; i++) {
    assert_int_equal(d->status[i], 200);
    double waited_ms = (double)(d->at_ms[i] * 1000000 - read_at) / 1e6;
    print_message("call %zu done %.1f ms after the reading (nanos_to_wait %.1f ms)\n", i,
                  waited_ms, (double)m.nanos_to_wait / 1e6);
    /* 11 ms of slack: a limiter of a 1 s period reads the coarse clock
     * (ratelimit.c rl_now: one scheduler tick, at most 10 ms behind), so
     * nanos_to_wait may count from up to a tick before read_at; and at_ms
     * has ms resolution. The call came 1.8 ms before nanos_to_wait once
     * under ASan. A per-process limiter starts the calls at once (a few
     * ms), ~990 ms before this bound. */
    assert_true(waited_ms >= (double)m.nanos_to_wait / 1e6 - 11.0);
  }
  assert_int_equal(resil_ratelimiter_get_metrics(rl, &m), RESIL_OK);
  assert_int_equal(m.reserved, 2);
  assert_int_equal(m.refused, 0);
  assert_int_equal(end_holder(&h, 0), 0);
  te_close(t);
  resil_ratelimiter_free(rl);
  seg_done(seg, &sc);
}

int main(int argc, char **argv) {
  if (argc == 4 && strcmp(argv[1], "hold") == 0) return hold_main(argv[2], argv[3]);
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n <= 0) return 1;
  exe[n] = '\0';
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(engine_calls_wait_for_a_permit_another_process_releases,
                                      fx_setup, fx_teardown),
      cmocka_unit_test_setup_teardown(a_permit_of_a_killed_process_starts_the_waiting_engine_call,
                                      fx_setup, fx_teardown),
      cmocka_unit_test_setup_teardown(engine_reservations_count_the_permits_another_process_took,
                                      fx_setup, fx_teardown),
  };
  return cmocka_run_group_tests(tests, NULL, seg_unlink_all);
}
