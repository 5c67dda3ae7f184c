/* The smallest libresil program: a retry around a circuit breaker around a
 * call that fails twice, then succeeds. Built by scripts/install-check.sh
 * against the installed headers and libraries (pkg-config resil).
 *
 *   cc hello_breaker.c $(pkg-config --cflags --libs resil) */
#include <resil/chain.h>
#include <resil/resil.h>
#include <stdio.h>

static int calls;

static resil_outcome flaky(void *arg, const resil_ctx *ctx) {
  (void)arg;
  (void)ctx;
  calls++;
  if (calls <= 2)
    return resil_outcome_make(RESIL_NOT_SENT, RESIL_REASON_CONNECT_REFUSED);
  return resil_outcome_ok();
}

int main(void) {
  resil_error err;
  resil_breaker_config bc;
  resil_breaker_config_init(&bc);
  bc.name = "inventory";
  bc.window_size = 10;
  bc.minimum_calls = 5;
  resil_breaker *br = NULL;
  if (resil_breaker_new(&bc, &br, &err) != RESIL_OK) {
    fprintf(stderr, "%s\n", err.msg);
    return 1;
  }
  resil_retry_config rc;
  resil_retry_config_init(&rc);
  rc.wait_ns = 1000000; /* 1 ms */
  resil_retry *rt = NULL;
  if (resil_retry_new(&rc, &rt, &err) != RESIL_OK) {
    fprintf(stderr, "%s\n", err.msg);
    return 1;
  }
  resil_chain_config cc;
  resil_chain_config_init(&cc);
  cc.total_timeout_ns = 2000000000; /* 2 s for the whole logical call */
  resil_chain *ch = NULL;
  if (resil_chain_new(&cc, &ch, &err) != RESIL_OK ||
      resil_chain_add_retry(ch, rt) != RESIL_OK ||
      resil_chain_add_breaker(ch, br) != RESIL_OK) {
    fprintf(stderr, "chain setup failed\n");
    return 1;
  }
  resil_outcome o = resil_chain_run(ch, NULL, flaky, NULL);
  char buf[64], nest[128];
  resil_chain_nesting(ch, nest, sizeof nest);
  printf("%s: %s after %u attempts, breaker %s (libresil %s)\n", nest,
         resil_outcome_format(&o, buf, sizeof buf), o.attempts,
         resil_breaker_state_name(resil_breaker_state(br)), resil_version());
  int ok = resil_outcome_is_success(&o) && o.attempts == 3;
  resil_chain_free(ch);
  resil_retry_free(rt);
  resil_breaker_free(br);
  return ok ? 0 : 1;
}
