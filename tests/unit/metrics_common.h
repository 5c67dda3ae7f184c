/* One instance of every core kind, driven to fixed figures on a manual
 * clock, for the exposition tests (test_metrics.c, test_metrics_prom_mt.c). */
#ifndef RESIL_TEST_METRICS_COMMON_H
#define RESIL_TEST_METRICS_COMMON_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "test_util.h"

typedef struct mx_set {
  resil_manual_clock *mc;
  resil_breaker *br;
  resil_retry *rt;
  resil_ratelimiter *rl;
  resil_bulkhead *bh;
  resil_timelimiter *tl;
  resil_hedge *hg;
  resil_chain *ch;
  resil_metrics *m;
} mx_set;

static resil_outcome mx_ok(void *arg, const resil_ctx *ctx) {
  (void)arg, (void)ctx;
  return resil_outcome_http(200);
}

static resil_outcome mx_fail(void *arg, const resil_ctx *ctx) {
  (void)arg, (void)ctx;
  return resil_outcome_make(RESIL_NOT_SENT, RESIL_REASON_CONNECT_REFUSED);
}

/* Builds the set and adds every instance to a new collector. The breaker
 * has 2 successes and 2 failures recorded (window 10, minimum 4: 50 %),
 * the retry one success without retry, the chain Retry(Breaker(call)) two
 * logical calls. */
static inline void mx_make(mx_set *s) {
  memset(s, 0, sizeof *s);
  assert_status(RESIL_OK, resil_manual_clock_new(0, 0, &s->mc));
  const resil_clock *clk = resil_manual_clock_get(s->mc);

  resil_breaker_config bc;
  resil_breaker_config_init(&bc);
  bc.name = "payments";
  bc.window_size = 10;
  bc.minimum_calls = 4;
  bc.failure_rate_threshold_pct = 60;
  bc.clock = clk;
  assert_status(RESIL_OK, resil_breaker_new(&bc, &s->br, NULL));

  resil_retry_config rc;
  resil_retry_config_init(&rc);
  rc.name = "payments_retry";
  rc.max_attempts = 2;
  rc.wait_ns = 0;
  rc.clock = clk;
  assert_status(RESIL_OK, resil_retry_new(&rc, &s->rt, NULL));

  resil_ratelimiter_config lc;
  resil_ratelimiter_config_init(&lc);
  lc.name = "api";
  lc.limit_for_period = 5;
  lc.clock = clk;
  assert_status(RESIL_OK, resil_ratelimiter_new(&lc, &s->rl, NULL));

  resil_bulkhead_config hc;
  resil_bulkhead_config_init(&hc);
  hc.name = "db";
  hc.max_concurrent = 3;
  assert_status(RESIL_OK, resil_bulkhead_new(&hc, &s->bh, NULL));

  resil_timelimiter_config tc;
  resil_timelimiter_config_init(&tc);
  tc.name = "slow";
  assert_status(RESIL_OK, resil_timelimiter_new(&tc, &s->tl, NULL));

  resil_hedge_config gc;
  resil_hedge_config_init(&gc);
  gc.name = "search";
  gc.delay_ns = RESIL_MS(50);
  gc.clock = clk;
  assert_status(RESIL_OK, resil_hedge_new(&gc, &s->hg, NULL));

  resil_chain_config cc;
  resil_chain_config_init(&cc);
  cc.name = "checkout";
  cc.clock = clk;
  assert_status(RESIL_OK, resil_chain_new(&cc, &s->ch, NULL));
  assert_status(RESIL_OK, resil_chain_add_retry(s->ch, s->rt));
  assert_status(RESIL_OK, resil_chain_add_breaker(s->ch, s->br));

  /* Two logical calls through the chain: one success, one success after
   * nothing else (the failing ones are recorded on the breaker directly). */
  resil_chain_run(s->ch, NULL, mx_ok, NULL);
  resil_chain_run(s->ch, NULL, mx_ok, NULL);
  for (int i = 0; i < 2; i++) {
    resil_breaker_permit p;
    assert_int_equal(RESIL_DECISION_GO, resil_breaker_try_acquire(s->br, &p));
    resil_outcome o = resil_outcome_make(RESIL_NOT_SENT, RESIL_REASON_CONNECT_REFUSED);
    assert_status(RESIL_OK, resil_breaker_record(s->br, &p, &o, 0));
  }
  resil_decision d = resil_ratelimiter_reserve(s->rl, 2, NULL, NULL, NULL);
  assert_int_equal(RESIL_DECISION_GO, d);
  assert_int_equal(RESIL_DECISION_GO, resil_bulkhead_try_acquire(s->bh, NULL));

  assert_status(RESIL_OK, resil_metrics_new(NULL, &s->m));
  assert_status(RESIL_OK, resil_metrics_add_breaker(s->m, NULL, s->br));
  assert_status(RESIL_OK, resil_metrics_add_retry(s->m, NULL, s->rt));
  assert_status(RESIL_OK, resil_metrics_add_ratelimiter(s->m, NULL, s->rl));
  assert_status(RESIL_OK, resil_metrics_add_bulkhead(s->m, NULL, s->bh));
  assert_status(RESIL_OK, resil_metrics_add_timelimiter(s->m, NULL, s->tl));
  assert_status(RESIL_OK, resil_metrics_add_hedge(s->m, NULL, s->hg));
  assert_status(RESIL_OK, resil_metrics_add_chain(s->m, "checkout", s->ch));
  (void)mx_fail;
}

static inline void mx_free(mx_set *s) {
  resil_metrics_free(s->m);
  resil_chain_free(s->ch);
  resil_bulkhead_release(s->bh);
  resil_hedge_free(s->hg);
  resil_timelimiter_free(s->tl);
  resil_bulkhead_free(s->bh);
  resil_ratelimiter_free(s->rl);
  resil_retry_free(s->rt);
  resil_breaker_free(s->br);
  resil_manual_clock_free(s->mc);
}

/* Runs `promtool check metrics` on m's exposition (stdin). Skipped when
 * promtool is not installed, except under CI=true, where it fails. */
static inline void mx_promtool_check(resil_metrics *m) {
  if (system("command -v promtool >/dev/null 2>&1") != 0) {
    const char *ci = getenv("CI");
    if (ci && strcmp(ci, "true") == 0)
      fail_msg("promtool not found and CI=true: install Debian's prometheus (scripts/deps.sh)");
    fprintf(stderr, "SKIPPED: promtool not found (Debian package prometheus)\n");
    skip();
  }
  char path[] = "/tmp/resil_promtool_XXXXXX";
  int fd = mkstemp(path);
  assert_true(fd >= 0);
  assert_status(RESIL_OK, resil_metrics_write_fd(m, fd));
  close(fd);
  char cmd[256], out[] = "/tmp/resil_promtool_out_XXXXXX";
  int ofd = mkstemp(out);
  assert_true(ofd >= 0);
  close(ofd);
  snprintf(cmd, sizeof cmd, "promtool check metrics < %s > %s 2>&1", path, out);
  int rc = system(cmd);
  FILE *f = fopen(out, "r");
  char line[512];
  int lines = 0;
  while (f && fgets(line, sizeof line, f)) {
    fprintf(stderr, "promtool: %s", line);
    lines++;
  }
  if (f) fclose(f);
  unlink(out);
  unlink(path);
  /* promtool exits 0 and prints nothing when the text parses and every
   * lint passes; lint findings alone exit 3. */
  assert_int_equal(0, rc);
  assert_int_equal(0, lines);
}

#endif
