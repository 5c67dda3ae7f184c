#define _GNU_SOURCE /* MAP_ANONYMOUS */
/* The retry budget in a shared segment (DESIGN §8.1): one balance for
 * every process, exact withdrawals across processes, the recorded config,
 * and SIGKILL chaos. Real processes (fork); every child is waited for. */
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "test_util.h"

#include "resil/retry.h"
#include "resil/shared.h"
#include "shared/shared_int.h"

#define SHARED_TEST_PREFIX "bg"
#include "test_shared_common.h"

static resil_retry_budget *budget(resil_shared *seg, resil_retry_budget_mode mode) {
  resil_retry_budget_config c;
  resil_retry_budget_config_init(&c);
  c.name = "api";
  c.mode = mode;
  c.min_retries_per_s = 0;
  c.percent_can_retry_pct = 20;
  c.ttl_ns = RESIL_S(60);
  c.shared = seg;
  resil_retry_budget *b = NULL;
  resil_error err;
  if (resil_retry_budget_new(&c, &b, &err) != RESIL_OK) fail_msg("%s", err.msg);
  return b;
}

#define KIDS 4

static void withdrawals_across_processes_never_exceed_the_shared_balance(void **state) {
  (void)state;
  resil_shared_config sc;
  char name[64];
  seg_config(&sc, name, sizeof name, "fin");
  resil_shared *seg = seg_open(&sc);
  resil_retry_budget *b = budget(seg, RESIL_BUDGET_FINAGLE);
  for (int i = 0; i < 50; i++) assert_status(RESIL_OK, resil_retry_budget_deposit(b));
  assert_int_equal(resil_retry_budget_balance(b), 10); /* 50 calls x 20 % */
  _Atomic int64_t *granted = mmap(NULL, sizeof *granted, PROT_READ | PROT_WRITE,
                                  MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  assert_true(granted != MAP_FAILED);
  atomic_init(granted, 0);
  int go[2];
  assert_int_equal(pipe(go), 0);
  pid_t kids[KIDS];
  for (int k = 0; k < KIDS; k++) {
    kids[k] = fork();
    assert_true(kids[k] >= 0);
    if (kids[k] == 0) {
      close(go[1]);
      char c;
      if (read(go[0], &c, 1) != 1) _exit(9);
      /* Half the children open a handle of their own. */
      resil_retry_budget *mine = b;
      resil_shared *s2 = NULL;
      if (k % 2) {
        if (resil_shared_open(&sc, &s2, NULL) != RESIL_OK) _exit(1);
        mine = budget(s2, RESIL_BUDGET_FINAGLE);
      }
      for (int i = 0; i < 100; i++)
        if (resil_retry_budget_try_withdraw(mine)) atomic_fetch_add(granted, 1);
      _exit(0);
    }
  }
  close(go[0]);
  assert_int_equal(write(go[1], "gggg", KIDS), KIDS);
  close(go[1]);
  for (int k = 0; k < KIDS; k++) {
    int status = 0;
    assert_int_equal(waitpid(kids[k], &status, 0), kids[k]);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  assert_int_equal(atomic_load(granted), 10);
  assert_int_equal(resil_retry_budget_balance(b), 0);
  assert_false(resil_retry_budget_try_withdraw(b));
  /* A child's deposits count for the parent. */
  pid_t d = fork();
  assert_true(d >= 0);
  if (d == 0) {
    for (int i = 0; i < 5; i++) resil_retry_budget_deposit(b);
    _exit(0);
  }
  assert_int_equal(waitpid(d, NULL, 0), d);
  assert_true(resil_retry_budget_try_withdraw(b));
  assert_false(resil_retry_budget_try_withdraw(b));
  munmap((void *)granted, sizeof *granted);
  resil_retry_budget_free(b);
  seg_done(seg, &sc);
}

static void grpc_tokens_and_the_recorded_config_are_shared(void **state) {
  (void)state;
  resil_shared_config sc;
  char name[64];
  seg_config(&sc, name, sizeof name, "grpc");
  resil_shared *seg = seg_open(&sc);
  resil_retry_budget *b = budget(seg, RESIL_BUDGET_GRPC);
  assert_int_equal(resil_retry_budget_balance(b), 10);
  pid_t d = fork();
  assert_true(d >= 0);
  if (d == 0) {
    for (int i = 0; i < 6; i++) resil_retry_budget_record_failure(b);
    _exit(0);
  }
  assert_int_equal(waitpid(d, NULL, 0), d);
  assert_int_equal(resil_retry_budget_balance(b), 4);
  assert_false(resil_retry_budget_try_withdraw(b)); /* 4 is not above 10 / 2 */

  resil_retry_budget_config c;
  resil_retry_budget_config_init(&c);
  c.name = "api";
  c.mode = RESIL_BUDGET_GRPC;
  c.min_retries_per_s = 0;
  c.percent_can_retry_pct = 20;
  c.ttl_ns = RESIL_S(60);
  c.max_tokens = 20;
  c.shared = seg;
  resil_retry_budget *other = NULL;
  resil_error err;
  assert_status(RESIL_EINVAL, resil_retry_budget_new(&c, &other, &err));
  assert_string_equal(err.field, "max_tokens");
  assert_non_null(strstr(err.msg, "retry_budget 'api' exists in segment"));
  c.max_tokens = 10;
  resil_manual_clock *mc = NULL;
  assert_status(RESIL_OK, resil_manual_clock_new(0, 0, &mc));
  c.clock = resil_manual_clock_get(mc);
  assert_status(RESIL_EINVAL, resil_retry_budget_new(&c, &other, &err));
  assert_string_equal(err.field, "clock");
  resil_manual_clock_free(mc);
  assert_status(RESIL_OK, resil_shared_reset(seg, "api", NULL));
  assert_int_equal(resil_retry_budget_balance(b), 10);
  resil_retry_budget_free(b);
  seg_done(seg, &sc);
}

/* ---- SIGKILL chaos: nobody wedged, the balance stays consistent ----------- */

#define CHAOS_KIDS 4

static void chaos_kid(resil_retry_budget *b) {
  for (;;) {
    resil_retry_budget_deposit(b);
    (void)resil_retry_budget_try_withdraw(b);
  }
}

static void sigkill_chaos_never_wedges_the_budget(void **state) {
  (void)state;
  resil_shared_config sc;
  char name[64];
  seg_config(&sc, name, sizeof name, "chaos");
  resil_shared *seg = seg_open(&sc);
  resil_retry_budget *b = budget(seg, RESIL_BUDGET_FINAGLE);
  pid_t kids[CHAOS_KIDS];
  for (int k = 0; k < CHAOS_KIDS; k++) {
    kids[k] = fork();
    assert_true(kids[k] >= 0);
    if (kids[k] == 0) chaos_kid(b);
  }
  unsigned seed = (unsigned)getpid();
  long kills = 0;
  int64_t end = mono() + RESIL_S(1);
  while (mono() < end) {
    struct timespec ts = {0, (long)(rand_r(&seed) % 2000000)};
    nanosleep(&ts, NULL);
    int k = rand_r(&seed) % CHAOS_KIDS;
    assert_int_equal(kill(kids[k], SIGKILL), 0);
    assert_int_equal(waitpid(kids[k], NULL, 0), kids[k]);
    kills++;
    kids[k] = fork();
    assert_true(kids[k] >= 0);
    if (kids[k] == 0) chaos_kid(b);
  }
  for (int k = 0; k < CHAOS_KIDS; k++) {
    assert_int_equal(kill(kids[k], SIGKILL), 0);
    assert_int_equal(waitpid(kids[k], NULL, 0), kids[k]);
  }
  /* The next withdrawal is not wedged, even if a dead child held the lock. */
  for (int i = 0; i < 10; i++) resil_retry_budget_deposit(b);
  int64_t t0 = mono();
  (void)resil_retry_budget_try_withdraw(b);
  int64_t ms = (mono() - t0) / 1000000;
  int64_t bal = resil_retry_budget_balance(b);
  print_message("kills %ld, withdrawal after %lld ms, balance %lld\n", kills,
                (long long)ms, (long long)bal);
  assert_true(kills >= 50);
  assert_true(ms < 1000);
  assert_true(bal >= 0);
  resil_retry_budget_free(b);
  seg_done(seg, &sc);
}

/* White-box: the lock word (word 11 of the slot: ten slice epochs, the
 * token count, the lock) left held by a process that died. */
static void a_lock_left_by_a_dead_process_is_taken_over(void **state) {
  (void)state;
  resil_shared_config sc;
  char name[64];
  seg_config(&sc, name, sizeof name, "dead");
  resil_shared *seg = seg_open(&sc);
  resil_retry_budget *b = budget(seg, RESIL_BUDGET_FINAGLE);
  for (int i = 0; i < 10; i++) resil_retry_budget_deposit(b);
  uint64_t *w = NULL;
  assert_status(RESIL_OK, resil__shared_find(seg, RESIL__SHK_BUDGET, "api", &w, NULL));
  pid_t d = fork();
  assert_true(d >= 0);
  if (d == 0) {
    uint64_t me = resil__shared_owner_self();
    __atomic_store_n(&w[11], me, __ATOMIC_RELEASE); /* takes the lock, dies */
    _exit(0);
  }
  assert_int_equal(waitpid(d, NULL, 0), d);
  assert_int_equal(__atomic_load_n(&w[11], __ATOMIC_ACQUIRE) >> 32, (uint64_t)d);
  int64_t t0 = mono();
  assert_true(resil_retry_budget_try_withdraw(b));
  int64_t us = (mono() - t0) / 1000;
  print_message("lock of dead pid %ld taken over in %lld us\n", (long)d, (long long)us);
  assert_true(us < 1000000);
  assert_int_equal(__atomic_load_n(&w[11], __ATOMIC_ACQUIRE), 0);
  /* A live holder's lock is not taken: the withdrawal waits until it is
   * released. */
  pid_t l = fork();
  assert_true(l >= 0);
  if (l == 0) {
    uint64_t me = resil__shared_owner_self();
    __atomic_store_n(&w[11], me, __ATOMIC_RELEASE);
    struct timespec ts = {0, 100000000};
    nanosleep(&ts, NULL);
    __atomic_store_n(&w[11], 0, __ATOMIC_RELEASE);
    _exit(0);
  }
  while (__atomic_load_n(&w[11], __ATOMIC_ACQUIRE) == 0) test_sleep_ms(1);
  t0 = mono();
  (void)resil_retry_budget_try_withdraw(b);
  int64_t ms = (mono() - t0) / 1000000;
  assert_int_equal(waitpid(l, NULL, 0), l);
  print_message("withdrawal waited %lld ms for a live holder\n", (long long)ms);
  assert_true(ms >= 50);
  resil__shared_release(seg);
  resil_retry_budget_free(b);
  seg_done(seg, &sc);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(withdrawals_across_processes_never_exceed_the_shared_balance),
      cmocka_unit_test(grpc_tokens_and_the_recorded_config_are_shared),
      cmocka_unit_test(sigkill_chaos_never_wedges_the_budget),
      cmocka_unit_test(a_lock_left_by_a_dead_process_is_taken_over),
  };
  return cmocka_run_group_tests(tests, NULL, seg_unlink_all);
}
