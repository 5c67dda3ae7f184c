/* libresil-http internal, layer 4 (see src/http/README.md): what
 * client.c offers: the client object (its transport part first, see
 * transfer.h), the endpoint table lookup and the pool of transfer slots
 * (lease and release). Uses transfer.h and slot.h. Not installed. */
#ifndef RESIL_HTTP_CLIENT_INT_H
#define RESIL_HTTP_CLIENT_INT_H

#include <pthread.h>
#include <stdatomic.h>

#include "instances.h"
#include "slot.h"
#include "transfer.h"

#define RESIL_MAGIC_HTTP_CLIENT 0x48434c54u /* "HCLT" */

struct resil_http_client {
  /* First (resil__http_tp): the settings and counters a transfer reads. */
  http_transport t;
  /* Written by every request, next to the transport's counters (which end
   * t) and apart from the fields every request only reads: with callers
   * on several CPUs, a write to a cache line makes every other CPU read it
   * again. */
  atomic_int refs;
  atomic_uint_fast64_t st_requests;
  atomic_uint_fast64_t st_lease_timeouts;
  char pad_written[64];
  /* Read by every request, written once (user_freed: when freed). */
  uint32_t magic;
  atomic_int user_freed;
  char *name;
  http_endpoint *eps;
  size_t neps;
  http_slot *slots;
  uint32_t nslots;
  uint32_t per_host;
  /* Settings. */
  int64_t lease_timeout_ns;
  int request_gzip;
  size_t gzip_min_bytes;
  int curl_inited;
  /* Recovery flow (recover.c). */
  uint32_t status_query_classes;
  int64_t status_poll_ns;
  int64_t pending_wait_max_ns;
  atomic_uint_fast64_t st_status_queries;
  atomic_uint_fast64_t st_status_committed;
  atomic_uint_fast64_t st_status_pending;
  atomic_uint_fast64_t st_status_unknown;
  atomic_uint_fast64_t st_recovered;
  /* Attempt listener (client config on_attempt), NULL none. */
  resil_attempt_listener_fn on_attempt;
  void *on_attempt_user;
  char pad_pool[64];
  /* Pool, under mu: a stack of free slot indexes, attempts in flight per
   * origin (t.origins), a count of waiters, slots leased now (atomic for
   * the stats, which read it without mu). */
  pthread_mutex_t mu;
  pthread_cond_t cv;
  uint32_t *free_stack;
  uint32_t *origin_inuse;
  uint32_t nfree;
  uint32_t waiters;
  atomic_uint st_leased;
  /* Many instances (instances.c, DESIGN §8.4), fixed once created but for
   * what the resolver adds: the upstreams of several instances (groups[0]
   * the client's own when it has them), every instance by index (all,
   * nall published), the origins' capacity, and the thread re-resolving
   * names (resolver_on when it runs; rstop under rmu stops it). */
  http_group **groups;
  uint32_t ngroups;
  /* By origin (t.norigins): the upstream whose instance it is, NULL for
   * an origin of its own (resil__http_origin_cap). */
  http_group **origin_group;
  http_inst **all;
  atomic_uint nall;
  uint32_t all_cap;
  uint32_t origins_cap;
  int64_t resolve_interval_ns;
  int resolver_on;
  int rstop;
  pthread_t resolver;
  pthread_mutex_t rmu;
  pthread_cond_t rcv;
  /* Told when a resolved name's first lookup ends (under rmu): the
   * engines on this client (resil__http_client_watch). */
  struct http_watch *watchers;
};

/* A watcher of the first lookups of a client's resolved names: fn(arg)
 * runs on the resolver thread, with the client's resolver mutex held,
 * after each name's first lookup ended (resil__http_group_ready turned
 * 1). fn must only hand the news over to its own thread (the engine
 * wakes its loop) and take no lock of the client. */
typedef struct http_watch {
  struct http_watch *next;
  void (*fn)(void *arg);
  void *arg;
} http_watch;

/* Adds w (fn, arg set by the caller), or does nothing when c resolves no
 * name. After resil__http_client_unwatch(c, w) returns, fn is not running
 * and will not run again. Any thread. */
void resil__http_client_watch(resil_http_client *c, http_watch *w);
void resil__http_client_unwatch(resil_http_client *c, http_watch *w);

_Static_assert(offsetof(struct resil_http_client, t) == 0,
               "resil__http_tp(): the transport is the client's first member");

void resil__http_client_ref(resil_http_client *c);
void resil__http_client_unref(resil_http_client *c);
const http_endpoint *resil__http_find_endpoint(const resil_http_client *c,
                                               const char *name);

/* Instance idx's base URL and its upstream as a metric label shows them
 * (metrics_http.c): redacted as the log redacts a URL (userinfo, secret-
 * looking query values), a resolved name's "@address" kept, cut to fit.
 * Returns 0, or -1 when idx is out of range (nothing written). */
int resil__http_instance_labels(const resil_http_client *c, size_t idx, char *inst,
                                size_t ni, char *up, size_t nu);

typedef enum http_lease_rc {
  HTTP_LEASE_OK = 0,
  HTTP_LEASE_TIMEOUT = 1,
  HTTP_LEASE_CANCELLED = 2
} http_lease_rc;

/* Takes a free slot for `origin` within timeout_ns (monotonic), preferring
 * one whose cached connection goes to that origin. *waited (may be NULL)
 * is set to 1 when no slot was free at once and the call had to wait (or
 * gave up), else 0: a lease that did not wait read no clock. */
http_lease_rc resil__http_pool_lease(resil_http_client *c, uint32_t origin,
                                     int64_t timeout_ns, resil_cancel *cancel,
                                     http_slot **out, int *waited);
void resil__http_pool_release(resil_http_client *c, http_slot *s,
                              uint32_t origin);

/* Attempts in flight at once to `origin`, of the blocking pool's slots or
 * an engine's connections (max_connections): max_connections_per_host,
 * and for an instance of an upstream (instances.c) at most
 * max_connections / its live instances (at least 1), so that the idle
 * connections of all the instances fit in the pool together and none is
 * closed to open another instance's. */
static inline uint32_t resil__http_origin_cap(const resil_http_client *c, uint32_t origin) {
  const http_group *g = c->origin_group ? c->origin_group[origin] : NULL;
  if (!g) return c->per_host;
  unsigned live = atomic_load_explicit(&((http_group *)g)->live, memory_order_relaxed);
  uint32_t share = live > 1 ? c->nslots / live : c->nslots;
  if (share < 1) share = 1;
  return share < c->per_host ? share : c->per_host;
}

#endif
