/* What the HTTP benchmark files share (http_cases.c, async_cases.c); only
 * in builds with libresil-http (RESIL_BENCH_HTTP). */
#ifndef RESIL_BENCH_HTTP_BENCH_H
#define RESIL_BENCH_HTTP_BENCH_H

#include <curl/curl.h>

#define BENCH_USER_AGENT "resil-bench"

/* Sets on a bare easy handle the options of libresil's client
 * (src/http/transfer.c resil__http_easy_setup) that matter on the wire or to
 * the connection, and the client's default timeouts: GET of url, HTTP/1.1,
 * HTTP/0.9 refused, no proxy, .netrc ignored, no redirects, Accept-Encoding
 * with every encoding libcurl decodes, the same User-Agent, TCP_NODELAY,
 * signals off, the body to wr(wd). maxconnects > 0 also sets
 * CURLOPT_MAXCONNECTS (the cache of curl_easy_perform; a multi handle's
 * is CURLMOPT_MAXCONNECTS). Returns the first failing setopt's code. */
CURLcode bench_bare_setopts(CURL *e, const char *url, curl_write_callback wr, void *wd,
                            long maxconnects);

/* libresil's side of the HTTP cases (http_cases.c, blocking), the async
 * cases (async_cases.c, the engine) and the many-instances engine case
 * (instances_cases.c): a client of `endpoints` on base_url (or on
 * instances) and the policies both wrap around it, configured alike: the default
 * retry, a breaker with a count window of 100 (minimum 100 calls) and slow
 * calls at slow_call_ns, a bulkhead of bulkhead_max (0: its default). */
#include <stddef.h>
#include <stdint.h>

#include "resil/breaker.h"
#include "resil/bulkhead.h"
#include "resil/http.h"
#include "resil/retry.h"

typedef struct bench_policies_config {
  const char *base_url;
  /* NULL, or the NULL-terminated base URLs of several instances of the
   * upstream (resil_http_client_config.instances); base_url is then not
   * used. */
  const char *const *instances;
  const resil_http_endpoint *endpoints;
  size_t endpoint_count;
  uint32_t max_connections;   /* the total limit, and the per-host limit
                                 unless max_connections_per_host is set */
  uint32_t max_connections_per_host; /* 0: max_connections               */
  int64_t lease_timeout_ns;   /* < 0: the client's default             */
  int64_t slow_call_ns;
  uint32_t bulkhead_max;      /* 0: the bulkhead's default             */
} bench_policies_config;

typedef struct bench_policies {
  resil_http_client *client;
  resil_retry *rt;
  resil_breaker *br;
  resil_bulkhead *bh;
} bench_policies;

/* Creates them all. Returns 0, or -1 with why ("resil_breaker_new: ...")
 * and nothing left allocated. */
int bench_policies_open(bench_policies *p, const bench_policies_config *cfg, char *why,
                        size_t whylen);
/* Frees what bench_policies_open made (each may be NULL). */
void bench_policies_close(bench_policies *p);

/* An async engine on adapter ad for p's client, and *pol its policies
 * {retry, breaker, bulkhead} of p: the engine cases' libresil side.
 * RESIL_OK, or resil_engine_new's status with err. */
struct resil_loop_adapter;
struct resil_engine;
struct resil_engine_policies;
resil_status bench_policies_engine(const bench_policies *p, struct resil_loop_adapter *ad,
                                   struct resil_engine **eng,
                                   struct resil_engine_policies *pol, resil_error *err);

#endif
