/* libresil-http internal, layer 1 (see src/http/README.md): what
 * instances.c offers: the instances of an upstream (DESIGN §8.4), the
 * choice of one for an attempt (P2C by attempts in flight, or round
 * robin, among those this call has not tried), and the outlier ejection
 * each attempt's outcome feeds. The one implementation of these rules:
 * the blocking call (request.c) and the engine choose with
 * resil__http_inst_pick, and every attempt that chose an instance ends in
 * resil__http_inst_done (transfer.c's resil__http_attempt_done, or the
 * caller for an attempt that ended before its transfer began). A resolved
 * name's addresses are kept up to date by resil__http_group_resolve.
 * Uses base.h. Not installed. */
#ifndef RESIL_HTTP_INSTANCES_H
#define RESIL_HTTP_INSTANCES_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include <curl/curl.h>

#include "base.h"
#include "core/ramp.h"

/* Instances per upstream at most (a call's tried set is one 64-bit word). */
#define HTTP_MAX_INSTANCES 64

typedef struct http_inst {
  /* Fixed once published (http_group.n): */
  char *base;                    /* base URL, no trailing '/'           */
  size_t base_len;
  char *label;                   /* base, or "base@address"            */
  struct curl_slist *connect_to; /* resolved: "host:port:addr:port"    */
  uint32_t origin;               /* pool origin (its own)               */
  uint32_t index;                /* client-wide index                   */
  uint32_t bit;                  /* index in its group                  */
  struct http_group *g;
  /* resil_http_instance_state; written under g->mu, read without. */
  atomic_int state;
  atomic_int probe_busy;         /* PROBING: an attempt probes it now   */
  atomic_uint in_flight;
  atomic_uint consecutive;
  atomic_uint mult;              /* ejection multiplier now             */
  atomic_int_fast64_t out_until; /* OUT: monotonic ns                   */
  atomic_int_fast64_t healthy_since; /* back from ejection (monotonic ns) */
  atomic_uint_fast64_t ejections, skipped, chosen;
  /* The ramp after a return (g->ramp.ns > 0): its start (monotonic ns, 0
   * none; set at the return under g->mu, set to 0 by one atomic swap:
   * the choice that sees the time up, which tells RAMP_ENDED, or an
   * ejection) and the admission accumulator (core/ramp.h). */
  atomic_int_fast64_t ramp_start;
  _Atomic uint64_t ramp_acc;
  atomic_uint_fast64_t outcomes[5];
} http_inst;

typedef struct http_group {
  char *name;                    /* upstream label for events and stats */
  uint32_t gindex;               /* 0 the client's, k an endpoint's     */
  http_inst *inst[HTTP_MAX_INSTANCES];
  atomic_uint n;                 /* published instances                 */
  atomic_uint out;               /* OUT or PROBING now                  */
  atomic_uint live;              /* not GONE                            */
  atomic_uint_fast64_t seq;      /* round robin and P2C draws           */
  pthread_mutex_t mu;            /* state changes, adding instances     */
  /* Settings (fixed). */
  int balance;                   /* resil_http_balance                  */
  uint32_t eject_consecutive;
  uint32_t eject_classes;
  int64_t eject_base_ns, eject_max_ns;
  uint32_t eject_max_percent;
  resil__ramp_curve ramp;        /* ramp.ns 0: no ramp after a return   */
  /* Events: the client's listener (may be NULL) and name. */
  resil_http_instance_listener_fn listener;
  void *listener_user;
  const char *client_name;
  /* A resolved name (resolve != 0): host and port looked up, the first
   * origin index reserved for its addresses (HTTP_MAX_INSTANCES of them),
   * and the client-wide index its instances start at. */
  int resolve;
  char *host;                    /* without brackets                    */
  char *port;
  char *ct_host;                 /* as CONNECT_TO wants it (brackets)   */
  uint32_t origin0;
  /* The client's table of all instances and its published count: an
   * instance's index is its place there, in order of appearance (one
   * writer at a time: the client's creation, then its resolver thread). */
  http_inst **all;
  atomic_uint *nall;
  char *base;                    /* the URL's base, for resolved ones   */
  size_t base_len;
  int64_t resolved_at;           /* under mu                            */
  atomic_uint_fast64_t resolutions, resolve_failures;
  /* A resolved name's first lookup has ended (its answer applied, or its
   * failure counted): set once by the resolver thread under mu, which
   * then broadcasts first_cv (CLOCK_MONOTONIC) to the calls waiting for
   * it (resil__http_group_wait_first). */
  atomic_int first_done;
  pthread_cond_t first_cv;
} http_group;

/* Sets up g (zeroed by the caller) with the settings; 0 or -1. */
int resil__http_group_init(http_group *g);
/* Frees g's instances and strings (not g itself). */
void resil__http_group_free(const resil_allocator *a, http_group *g);
/* Adds an instance (base URL of base_len bytes, label, connect_to line or
 * NULL) at the next bit and the next index of the client's table;
 * `origin` given by the client. Only while the client is created, or under
 * g->mu by the resolver. Returns the instance or NULL (out of memory,
 * full). */
http_inst *resil__http_group_add(const resil_allocator *a, http_group *g, const char *base,
                                 size_t base_len, const char *label, const char *connect_to,
                                 uint32_t origin);

/* The share of the choices instance i takes part in now (1.0 outside its
 * ramp). */
double resil__http_inst_share(const http_inst *i);

/* Chooses an instance for an attempt of a call whose tried set is
 * *tried (bits of g's instances; the chosen one's is set) and counts it
 * in flight. *probe is set to 1 when the attempt probes an instance back
 * from ejection. NULL when g has no instance yet (an unresolved name).
 * Runs the group's listener (RAMP_ENDED of the ramps whose time it saw up
 * first) with no lock held. */
http_inst *resil__http_inst_pick(http_group *g, atomic_uint_fast64_t *tried, int *probe);

/* The attempt that chose i (probe as pick said) ended with o: out of
 * flight, counted, and the ejection rules applied. Runs the group's
 * listener (ejected, returned; ramp ended, before an ejection, when the
 * ramp's time was up and no choice told it) with no lock held. */
void resil__http_inst_done(http_inst *i, int probe, const resil_outcome *o);

/* Looks g's name up (getaddrinfo, blocking: only the client's resolver
 * thread calls it) and adds new addresses, marks the ones no longer
 * returned GONE and brings back the ones that return. The first call
 * ends g's first lookup either way (first_done, waiters woken). Returns
 * 0, or -1 when the lookup failed (the instances stay). */
int resil__http_group_resolve(const resil_allocator *a, http_group *g);

/* Has g's first lookup ended? Always 1 for a list of instances. Any
 * thread, no lock. */
static inline int resil__http_group_ready(http_group *g) {
  return !g->resolve || atomic_load_explicit(&g->first_done, memory_order_acquire);
}

/* Waits until g's first lookup has ended or CLOCK_MONOTONIC reaches
 * until_ns, whichever is first. Returns resil__http_group_ready(g). */
int resil__http_group_wait_first(http_group *g, int64_t until_ns);

#endif
