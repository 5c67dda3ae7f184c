/* bench_policies_open (http_bench.h): the client and the Retry, Breaker and
 * Bulkhead of libresil's side, shared by the HTTP and the async cases. */
#ifdef RESIL_BENCH_HTTP
#include <stdio.h>
#include <string.h>

#include "http_bench.h"
#include "resil/engine.h"

int bench_policies_open(bench_policies *p, const bench_policies_config *cfg, char *why,
                        size_t whylen) {
  memset(p, 0, sizeof *p);
  resil_error err;
  memset(&err, 0, sizeof err);
  resil_status st;
  resil_http_client_config hc;
  resil_http_client_config_init(&hc);
  hc.name = "bench";
  if (cfg->instances)
    hc.instances = cfg->instances;
  else
    hc.base_url = cfg->base_url;
  hc.endpoints = cfg->endpoints;
  hc.endpoint_count = cfg->endpoint_count;
  hc.max_connections = cfg->max_connections;
  hc.max_connections_per_host =
      cfg->max_connections_per_host ? cfg->max_connections_per_host : cfg->max_connections;
  if (cfg->lease_timeout_ns >= 0) hc.lease_timeout_ns = cfg->lease_timeout_ns;
  hc.user_agent = BENCH_USER_AGENT;
  const char *what = "resil_http_client_new";
  if ((st = resil_http_client_new(&hc, &p->client, &err)) != RESIL_OK) goto fail;

  resil_retry_config rc;
  resil_retry_config_init(&rc);
  rc.name = "bench";
  what = "resil_retry_new";
  if ((st = resil_retry_new(&rc, &p->rt, &err)) != RESIL_OK) goto fail;

  resil_breaker_config bc;
  resil_breaker_config_init(&bc);
  bc.name = "bench";
  bc.window_type = RESIL_BREAKER_WINDOW_COUNT;
  bc.window_size = 100;
  bc.minimum_calls = 100;
  bc.slow_call_duration_ns = cfg->slow_call_ns;
  what = "resil_breaker_new";
  if ((st = resil_breaker_new(&bc, &p->br, &err)) != RESIL_OK) goto fail;

  resil_bulkhead_config kc;
  resil_bulkhead_config_init(&kc);
  kc.name = "bench";
  if (cfg->bulkhead_max) kc.max_concurrent = cfg->bulkhead_max;
  what = "resil_bulkhead_new";
  if ((st = resil_bulkhead_new(&kc, &p->bh, &err)) != RESIL_OK) goto fail;
  return 0;
fail:
  snprintf(why, whylen, "%s: %s (%s)", what, resil_status_name(st), err.msg);
  bench_policies_close(p);
  return -1;
}

void bench_policies_close(bench_policies *p) {
  resil_bulkhead_free(p->bh);
  resil_breaker_free(p->br);
  resil_retry_free(p->rt);
  resil_http_client_free(p->client);
  memset(p, 0, sizeof *p);
}
#else
/* Without libresil-http there is nothing to share (ISO C wants a
 * declaration in every translation unit). */
typedef int bench_http_policies_unused;
#endif

resil_status bench_policies_engine(const bench_policies *p, resil_loop_adapter *ad,
                                   resil_engine **eng, resil_engine_policies *pol,
                                   resil_error *err) {
  resil_engine_config ec;
  resil_engine_config_init(&ec);
  ec.adapter = ad;
  ec.client = p->client;
  resil_status st = resil_engine_new(&ec, eng, err);
  if (st != RESIL_OK) return st;
  resil_engine_policies_init(pol);
  pol->retry = p->rt;
  pol->breaker = p->br;
  pol->bulkhead = p->bh;
  return RESIL_OK;
}
