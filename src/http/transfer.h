/* libresil-http internal, layer 2 (see src/http/README.md): what
 * transfer.c offers, the libcurl specifics of one physical attempt shared
 * by the blocking pool (slot.c, client.c, request.c) and the engine
 * (src/engine): the client's transport settings and counters
 * (http_transport), the compiled endpoint and the built request as a
 * transfer reads them, the per-attempt state and the slot that carries it,
 * and the attempt functions. The layers above fill these structs
 * (client.c compiles endpoints, message.c builds requests); this layer
 * never calls up. Uses base.h, template.h, log_int.h, response_int.h.
 * Not installed. */
#ifndef RESIL_HTTP_TRANSFER_H
#define RESIL_HTTP_TRANSFER_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include <curl/curl.h>

#include "base.h"
#include "core/timeout_hdr.h"
#include "instances.h"
#include "log_int.h"
#include "response_int.h"
#include "template.h"

#define RESIL_MAGIC_HTTP_REQUEST 0x48524551u /* "HREQ" */
/* Longest deadline header name (resil_http_client_config.deadline_header). */
#define HTTP_DL_HEADER_MAX 64

/* The part of a client a transfer reads: its settings (fixed once
 * resil_http_client_new() returns) and its per-attempt counters. struct
 * resil_http_client (client_int.h) begins with it, so this layer reaches
 * it from a client pointer through resil__http_tp() without seeing the
 * rest of the client. */
typedef struct http_transport {
  const resil_allocator *alloc;
  const resil_clock *clock;
  /* Origins ("scheme://host:port", lower case), indexed by
   * http_endpoint.origin. */
  char **origins;
  uint32_t norigins;
  int64_t connect_timeout_ns;
  int64_t response_timeout_ns;
  int follow_redirects;
  uint32_t max_redirects;
  int response_decompression;
  resil_http_resend resend_stale;
  char *idem_header;
  size_t idem_header_len;
  /* Deadline propagation (DESIGN §8.3): the header carrying each attempt's
   * remaining budget, NULL when the client does not send it. */
  char *dl_header;
  size_t dl_header_len;
  size_t max_response_bytes;
  resil_http_decoder_fn decoder;
  void *decoder_user;
  resil_http_interceptor *interceptors;
  size_t ninterceptors;
  resil_http_log_level log_level;
  resil_http_log_fn log_fn;
  void *log_user;
  char *proxy;
  int verify_peer;
  char *ca_file;
  char *user_agent;
  /* The lines libcurl would write itself at the head of every request,
   * "User-Agent: <user_agent>" and, with response_decompression,
   * "Accept-Encoding: <every encoding libcurl decodes>", formatted once and
   * sent at the head of each attempt's header list (transfer.c,
   * link_headers), when no proxy is configured and the user agent is not
   * empty; NULL: libcurl writes them (CURLOPT_USERAGENT,
   * CURLOPT_ACCEPT_ENCODING). ae_line is NULL whenever ua_line is. */
  char *ua_line;
  char *ae_line;
  /* Counters, written by every attempt: apart from the settings above,
   * which every attempt reads (see struct resil_http_client). */
  char pad_settings[64];
  atomic_uint_fast64_t st_attempts;
  atomic_uint_fast64_t st_sent;
  atomic_uint_fast64_t st_hops;
  atomic_uint_fast64_t st_conns;
  atomic_uint_fast64_t st_prevented;
  atomic_uint_fast64_t st_counted;
  atomic_uint_fast64_t st_decode_errors;
  atomic_uint_fast64_t st_outcomes[5];
} http_transport;

/* The transport of client c (its first member, see client_int.h). */
static inline http_transport *resil__http_tp(resil_http_client *c) {
  return (http_transport *)(void *)c;
}
static inline const http_transport *resil__http_tpc(const resil_http_client *c) {
  return (const http_transport *)(const void *)c;
}

/* ---- the compiled endpoint (compiled by client.c) ------------------------ */

typedef struct http_header_tpl {
  char *name;
  size_t name_len;
  http_tpl value;
} http_header_tpl;

typedef struct http_endpoint {
  char *name;
  resil_http_method method;
  int idempotent;
  resil_http_codec req_codec;
  resil_http_codec resp_codec;
  resil_http_key key_mode;
  int empty_is_error;
  char *content_type;   /* NULL: none */
  int gzip_type;        /* content type is in the gzip list               */
  http_tpl path;
  http_tpl query;
  http_header_tpl *headers;
  uint32_t nheaders;
  char *base;           /* base URL without the trailing '/'              */
  size_t base_len;
  /* base + path when the path has no placeholder, else NULL: what every
   * request's URL starts with, built once. */
  char *fixed_url;
  size_t fixed_url_len;
  uint32_t origin;      /* index of the origin (per-host limit)           */
  resil_http_decoder_fn decoder;
  void *decoder_user;
  char *tpl_store;      /* copies of the template sources                 */
  int32_t status_ep;    /* index of the status endpoint, -1 none          */
  int no_deadline;      /* never send the deadline header                 */
  /* The caller's status_endpoint string: read only while
   * resil_http_client_new() runs (client.c, recovery_setup). */
  const char *status_name;
  /* The endpoint's upstream when it has several instances (its own or the
   * client's, instances.c), else NULL: base/origin above then say where
   * every attempt goes. With a group, base is its first instance's (or the
   * resolved name's) and a request's URL is rebuilt per attempt as the
   * chosen instance's base + what follows base_len. */
  http_group *group;
} http_endpoint;

/* Per-attempt transfer state, written by libcurl callbacks on the thread
 * running the attempt. */
typedef struct http_xfer {
  const http_transport *tp; /* the client's transport settings         */
  resil_http_response *res;
  int resend_ok;          /* the call is idempotent or keyed             */
  int follow;             /* follow redirects                            */
  uint32_t prereqs;       /* requests about to be sent                   */
  uint32_t hops;
  uint32_t resends;       /* allowed hidden re-sends                     */
  uint32_t sockets;       /* sockets opened                              */
  int sock_errno;         /* errno of the last socket() if it failed, else 0 */
  int got_bytes;          /* a response byte since the last request      */
  int resend_refused;     /* a hidden re-send was caught and refused     */
  int too_large;
  int withheld;           /* secret headers withheld after a redirect to
                             another origin                             */
  const char *origin;     /* the request's origin ("scheme://host:port") */
  int last_status;
  unsigned local_port;
  int64_t response_timeout_ns;
  int64_t resp_deadline;  /* monotonic ns; valid once prereqs > 0        */
  /* The call's deadline on CLOCK_MONOTONIC when the attempt carries the
   * deadline header (s->dl_line), else INT64_MAX. */
  int64_t budget_end;
  /* Called (when set) each time a request is about to go on the wire,
   * after resp_deadline is set: the engine arms its response timer. */
  void (*on_sent)(void *arg);
  void *on_sent_arg;
  size_t max_body;
  size_t hdr_bytes;
  size_t retry_after_at;  /* 1 + offset in res->hdr of the final response's
                             first Retry-After entry, 0 none              */
} http_xfer;

/* One pool slot: a libcurl easy handle driven by its own multi handle,
 * which keeps the slot's single idle keep-alive connection between
 * attempts. */
typedef struct http_slot {
  CURL *e;
  CURLM *m;
  CURLSH *dns;              /* the slot's DNS cache (slot.c), NULL none  */
  int32_t origin;           /* origin of the cached connection, -1 none */
  uint32_t index;
  pthread_t last_thread;    /* thread that last released it (under c->mu) */
  int has_last_thread;
  http_xfer x;
  resil_http_response *res; /* this slot's response; swapped on publish */
  struct curl_slist *nodes;
  uint32_t nodes_cap;
  /* Interceptor headers for the current attempt: "Name: value\0" runs. */
  http_buf ic;
  uint32_t *ic_offs;
  uint32_t ic_count;
  uint32_t ic_cap;
  http_buf url;             /* URL last set on the handle               */
  int method_set;           /* method last set, -1 none                 */
  long connect_to_set;      /* CONNECTTIMEOUT_MS last set, -1 none      */
  long timeout_set;         /* TIMEOUT_MS last set, -1 none             */
  int has_nodes;            /* HTTPHEADER currently points to nodes     */
  /* The list HTTPHEADER was last set to (libcurl reads the list itself at
   * each request, so the same pointer needs no new setopt); valid when
   * headers_known. */
  const struct curl_slist *headers_set;
  int headers_known;
  http_buf log;
  char errbuf[CURL_ERROR_SIZE];
  /* The instance the current attempt chose (NULL: the endpoint's base)
   * and whether it probes it; resil__http_attempt_done hands both back
   * (resil__http_inst_done) and clears inst. */
  http_inst *inst;
  int probe;
  /* CURLOPT_CONNECT_TO last set (NULL none). */
  const struct curl_slist *ct_set;
  /* The URL of an attempt to an instance, built here. */
  http_buf ubuf;
  /* "Name: value" of the deadline header, the value rewritten for every
   * request the attempt sends (transfer.c, on_prereq); a node of the
   * attempt's list points here when it carries one. */
  char dl_line[HTTP_DL_HEADER_MAX + 2 + RESIL__TIMEOUT_BUF];
} http_slot;

struct resil_http_headers {
  http_slot *slot;
  const http_transport *tp; /* the client's transport settings         */
};

/* ---- the built request (built by message.c) ------------------------------
 * What a transfer sends: the endpoint, URL, headers, body, key and call
 * flags, fixed once built. The rest (refs, mu, seq, taken, pub) is the
 * blocking call's (message.c, request.c). */

struct resil_http_request {
  uint32_t magic;
  atomic_int refs;
  resil_http_client *client;
  const http_endpoint *ep;
  char *url;
  /* "Name: value" strings, NUL-separated, in hdr_store; hdr_offs[i] is the
   * offset of the i-th, hdr_nlen[i] its name length. */
  char *hdr_store;
  uint32_t *hdr_offs;
  uint32_t *hdr_nlen;
  uint32_t nhdrs;
  unsigned char *body;
  size_t body_len;
  int has_body;
  char *key;
  uint32_t flags;
  pthread_mutex_t mu;
  /* Number of the latest attempt started: incremented without mu (an
   * attempt that starts always publishes later, under mu, so a publisher
   * that missed the increment is overwritten); compared under mu. */
  _Atomic uint32_t seq;
  /* Attempts that ended ANSWERED, incremented before their pool slot is
   * given back: an attempt that waited for a slot sees a sibling's answer
   * (request.c). */
  _Atomic uint32_t answered;
  int taken;
  resil_http_response *pub;
  /* Bits of the instances of ep->group this call's attempts chose
   * (instances.c), and the last one's bit + 1 (0 none): a status query
   * about this call prefers another instance. */
  atomic_uint_fast64_t tried;
  atomic_uint last_bit;
};

/* ---- one physical attempt (transfer.c) ---------------------------------- */

/* How a transfer was ended before libcurl finished it. */
enum { ABORT_NONE = 0, ABORT_CANCEL, ABORT_DEADLINE, ABORT_RESPONSE, ABORT_LOCAL };

/* Creates s->e with the options every attempt shares and the guards that
 * refuse (or count) libcurl's hidden re-sends (CURLOPT_PRIVATE = s).
 * maxconnects > 0 sets CURLOPT_MAXCONNECTS. Returns 0 or -1. */
int resil__http_easy_setup(const resil_http_client *c, http_slot *s, long maxconnects);
/* Prepares s (whose s->res must exist) for one attempt of req: runs the
 * interceptors, links the headers, sets URL, method, body and the connect
 * and whole-transfer timeouts from left_ns (INT64_MAX: no deadline), resets
 * the transfer state, logs the request. Counts the attempt. Returns 0 when
 * the transfer may start, or -1 with *out NOT_SENT(LOCAL_ERROR) and the
 * reason in s->res.
 *
 * budget_end: the call's deadline on CLOCK_MONOTONIC (the ctx deadline
 * converted once by the caller), INT64_MAX when the call has no deadline.
 * When finite and the client and endpoint send the deadline header, every
 * request of the attempt carries budget_end - now as read just before
 * libcurl builds it. */
int resil__http_attempt_begin(resil_http_client *c, const resil_http_request *req,
                              http_slot *s, uint32_t attempt, uint32_t flags, int64_t left_ns,
                              int64_t budget_end, resil_outcome *out);
/* Classifies the transfer libcurl finished with rc (or that was ended by
 * `aborted`, ABORT_*) into an outcome; decodes an answer, parses
 * Retry-After, runs the decoder hook, fills the response info and the
 * client's counters. */
resil_outcome resil__http_attempt_end(resil_http_client *c, const resil_http_request *req,
                                     http_slot *s, int aborted, CURLcode rc);
/* Closes the attempt: writes o and the timings into s->res, logs the
 * result (redacted) and counts the outcome. */
void resil__http_attempt_done(resil_http_client *c, const resil_http_request *req,
                              http_slot *s, const resil_outcome *o, uint32_t attempt,
                              int64_t lease_wait_ns, int64_t total_ns);
/* Counts o in the client's outcome counters. */
void resil__http_count_outcome(resil_http_client *c, const resil_outcome *o);
/* Logs an attempt that ended before any transfer (no time, cancelled, no
 * slot, refused by a policy). */
void resil__http_log_bare(const resil_http_client *c, const http_endpoint *ep,
                          const resil_outcome *o, uint32_t attempt, int64_t total_ns);

/* Marks r empty or decodes its JSON body as endpoint ep's response, and
 * turns *o into reason DECODE when a success cannot be read. */
void resil__http_decode(const http_endpoint *ep, resil_http_response *r,
                        resil_outcome *o);

#endif
