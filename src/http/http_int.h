/* libresil-http private parts: compiled endpoints, the pool of transfer
 * slots, logical requests and responses. Not installed. */
#ifndef RESIL_HTTP_INT_H
#define RESIL_HTTP_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include <curl/curl.h>

#include "core/internal.h"
#include "resil/http.h"

/* The core's allocation and error helpers (src/core/alloc.c, error.c) are
 * compiled into this library too: libresil.so keeps its resil__* functions
 * hidden, and this library is a separate shared object. */

#define RESIL_MAGIC_HTTP_CLIENT 0x48434c54u   /* "HCLT" */
#define RESIL_MAGIC_HTTP_REQUEST 0x48524551u  /* "HREQ" */
#define RESIL_MAGIC_HTTP_RESPONSE 0x48525350u /* "HRSP" */

/* ---- growable byte buffer (always NUL-terminated when p != NULL) ------ */

typedef struct http_buf {
  char *p;
  size_t len;
  size_t cap;
} http_buf;

/* Makes room for `extra` more bytes plus a NUL. Returns 0, or -1 when out of
 * memory (the buffer is unchanged). */
int resil__http_buf_reserve(const resil_allocator *a, http_buf *b, size_t extra);
int resil__http_buf_append(const resil_allocator *a, http_buf *b,
                           const void *s, size_t n);
static inline int resil__http_buf_puts(const resil_allocator *a, http_buf *b,
                                       const char *s) {
  size_t n = 0;
  while (s[n]) n++;
  return resil__http_buf_append(a, b, s, n);
}
void resil__http_buf_free(const resil_allocator *a, http_buf *b);

/* ---- templates (template.c) -------------------------------------------- */

typedef enum http_tpl_kind {
  HTTP_TPL_PATH = 0,   /* must start with '/'; pchars and '/'            */
  HTTP_TPL_QUERY = 1,  /* pchars, '/' and '?'                            */
  HTTP_TPL_HEADER = 2  /* header value: visible ASCII, SP, HTAB          */
} http_tpl_kind;

/* A literal run or a {placeholder}: off/len index the template source
 * (for a placeholder, its name without the braces). */
typedef struct http_tpl_part {
  uint32_t off;
  uint32_t len;
  uint32_t is_var;
} http_tpl_part;

typedef struct http_tpl {
  const char *src; /* NULL: no template */
  http_tpl_part *parts;
  uint32_t nparts;
} http_tpl;

/* Longest template accepted, and longest placeholder name. */
#define HTTP_TPL_MAX_LEN 8192u
#define HTTP_TPL_MAX_NAME 64u

/* Parses s[0..len) of the given kind. With parts == NULL only counts; else
 * writes at most cap parts. Returns 0 with *nparts set, or -1 with *err_off
 * (byte offset of the problem) and *why (static text) set. */
int resil__http_tpl_parse(const char *s, size_t len, http_tpl_kind kind,
                          http_tpl_part *parts, uint32_t cap, uint32_t *nparts,
                          size_t *err_off, const char **why);

/* Appends the expansion of t to out: literal parts verbatim, each
 * placeholder's value from params (percent-encoded when `encode`).
 * Returns 0, -1 when a placeholder has no value (*missing is its part), -2
 * when out of memory. */
int resil__http_tpl_expand(const resil_allocator *a, const http_tpl *t,
                           const resil_http_param *params, size_t nparams,
                           int encode, http_buf *out,
                           const http_tpl_part **missing);

/* Appends s[0..n) percent-encoding every byte but A-Za-z0-9-._~. */
int resil__http_pct_encode(const resil_allocator *a, http_buf *out,
                           const char *s, size_t n);

/* 1 for an RFC 9110 tchar (header names). */
int resil__http_tchar(int c);

/* ---- redaction and logging (log.c) ------------------------------------- */

/* 1 when a header's value must never be logged (see resil_http_log_fn). */
int resil__http_secret_header(const char *name, size_t len);
/* 1 when a query parameter's (or JSON key's, form field's) value must never
 * be logged. The name is matched percent-decoded. */
int resil__http_secret_param(const char *name, size_t len);
/* Appends url with secret query values and userinfo replaced and the
 * fragment dropped. */
int resil__http_redact_url(const resil_allocator *a, http_buf *out,
                           const char *url);
/* Appends a body excerpt (at most max bytes of it) with secret JSON values
 * and form fields redacted. */
int resil__http_redact_body(const resil_allocator *a, http_buf *out,
                            const char *body, size_t len, size_t max);
/* Appends "  Name: value" for a log line: the whole value redacted when the
 * name looks secret, else the userinfo of any URL in it and the values of
 * secret-looking name=value pairs in it. Returns 0 or -1. */
int resil__http_log_header(const resil_allocator *a, http_buf *out, const char *name,
                           size_t nl, const char *value, size_t vl);
/* Escapes line (control bytes, DEL and bytes >= 0x80 become "\xNN"),
 * passes it to the client's log_fn at level lv and empties it. Every log
 * line that carries bytes from the network leaves through here. */
void resil__http_log_emit(const resil_http_client *c, resil_http_log_level lv,
                          http_buf *line);
/* Writes into dst[0..cap) a quotable excerpt of s[0..len) for an error
 * message: with pairs, secret-looking name=value pairs redacted; always
 * escaped like a log line; cut with "..." to fit. */
void resil__http_redact_excerpt(const resil_allocator *a, char *dst, size_t cap,
                                const char *s, size_t len, int pairs);

/* ---- the client --------------------------------------------------------- */

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
  uint32_t origin;      /* index of the origin (per-host limit)           */
  resil_http_decoder_fn decoder;
  void *decoder_user;
  char *tpl_store;      /* copies of the template sources                 */
  int32_t status_ep;    /* index of the status endpoint, -1 none          */
  /* The caller's status_endpoint string: read only while
   * resil_http_client_new() runs (resil__http_recovery_setup). */
  const char *status_name;
} http_endpoint;

/* Per-attempt transfer state, written by libcurl callbacks on the thread
 * running the attempt. */
typedef struct http_xfer {
  const resil_http_client *client;
  resil_http_response *res;
  int resend_ok;          /* the call is idempotent or keyed             */
  int follow;             /* follow redirects                            */
  uint32_t prereqs;       /* requests about to be sent                   */
  uint32_t hops;
  uint32_t resends;       /* allowed hidden re-sends                     */
  uint32_t sockets;       /* sockets opened                              */
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
  /* Called (when set) each time a request is about to go on the wire,
   * after resp_deadline is set: the engine arms its response timer. */
  void (*on_sent)(void *arg);
  void *on_sent_arg;
  size_t max_body;
  size_t hdr_bytes;
} http_xfer;

/* One pool slot: a libcurl easy handle driven by its own multi handle,
 * which keeps the slot's single idle keep-alive connection between
 * attempts. */
typedef struct http_slot {
  CURL *e;
  CURLM *m;
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
  int has_nodes;            /* HTTPHEADER currently points to nodes     */
  http_buf log;
  char errbuf[CURL_ERROR_SIZE];
} http_slot;

struct resil_http_headers {
  http_slot *slot;
  const resil_http_client *client;
};

struct resil_http_client {
  uint32_t magic;
  atomic_int refs;
  atomic_int user_freed;
  const resil_allocator *alloc;
  const resil_clock *clock;
  char *name;
  http_endpoint *eps;
  size_t neps;
  /* Origins ("scheme://host:port", lower case) and attempts in flight per
   * origin (under mu). */
  char **origins;
  uint32_t norigins;
  uint32_t *origin_inuse;
  /* Pool: slots, a stack of free slot indexes, a count of waiters. */
  pthread_mutex_t mu;
  pthread_cond_t cv;
  http_slot *slots;
  uint32_t nslots;
  uint32_t *free_stack;
  uint32_t nfree;
  uint32_t waiters;
  uint32_t per_host;
  /* Settings. */
  int64_t lease_timeout_ns;
  int64_t connect_timeout_ns;
  int64_t response_timeout_ns;
  int follow_redirects;
  uint32_t max_redirects;
  int request_gzip;
  size_t gzip_min_bytes;
  int response_decompression;
  resil_http_resend resend_stale;
  char *idem_header;
  size_t idem_header_len;
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
  int curl_inited;
  /* Counters. */
  atomic_uint_fast64_t st_requests;
  atomic_uint_fast64_t st_attempts;
  atomic_uint_fast64_t st_sent;
  atomic_uint_fast64_t st_hops;
  atomic_uint_fast64_t st_conns;
  atomic_uint_fast64_t st_prevented;
  atomic_uint_fast64_t st_counted;
  atomic_uint_fast64_t st_lease_timeouts;
  atomic_uint_fast64_t st_decode_errors;
  atomic_uint_fast64_t st_outcomes[5];
  atomic_uint st_leased;
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
};

void resil__http_client_ref(resil_http_client *c);
void resil__http_client_unref(resil_http_client *c);
const http_endpoint *resil__http_find_endpoint(const resil_http_client *c,
                                               const char *name);

typedef enum http_lease_rc {
  HTTP_LEASE_OK = 0,
  HTTP_LEASE_TIMEOUT = 1,
  HTTP_LEASE_CANCELLED = 2
} http_lease_rc;

/* Takes a free slot for `origin` within timeout_ns (monotonic), preferring
 * one whose cached connection goes to that origin. */
http_lease_rc resil__http_pool_lease(resil_http_client *c, uint32_t origin,
                                     int64_t timeout_ns, resil_cancel *cancel,
                                     http_slot **out);
void resil__http_pool_release(resil_http_client *c, http_slot *s,
                              uint32_t origin);
/* Creates the slot's libcurl handles (the easy handle through
 * resil__http_easy_setup, and the slot's own multi). Returns 0 or -1. */
int resil__http_slot_setup(resil_http_client *c, http_slot *s);
void resil__http_slot_cleanup(const resil_http_client *c, http_slot *s);

int64_t resil__http_mono_ns(void);

/* ---- one physical attempt (transfer.c): the transport rules, shared by
 * the blocking pool and the async engine ---------------------------------- */

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
 * reason in s->res. */
int resil__http_attempt_begin(resil_http_client *c, const resil_http_request *req,
                              http_slot *s, uint32_t attempt, uint32_t flags, int64_t left_ns,
                              resil_outcome *out);
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
/* ASCII case-insensitive equality of a[0..alen) and b[0..blen) (request.c). */
int resil__http_ieq(const char *a, size_t alen, const char *b, size_t blen);

/* recover.c: checks the recovery fields of cfg (called by check_config).
 * Returns RESIL_OK or RESIL_EINVAL with err filled. */
resil_status resil__http_recovery_check(const resil_http_client_config *cfg,
                                        resil_error *err);
/* recover.c: copies the recovery settings and resolves every endpoint's
 * status_endpoint once the table is compiled (called by
 * resil_http_client_new). Returns RESIL_OK or RESIL_EINVAL with err naming
 * the endpoint. */
resil_status resil__http_recovery_setup(resil_http_client *c,
                                        const resil_http_client_config *cfg,
                                        resil_error *err);

/* ---- requests and responses ------------------------------------------- */

struct resil_http_response {
  uint32_t magic;
  const resil_allocator *alloc;
  resil_outcome outcome;
  int status;
  int empty;
  int has_decode_error;
  int has_error;
  http_buf body;
  http_buf hdr; /* "name\0value\0" pairs of the final response */
  json_t *json;
  resil_http_info info;
  char decode_error[192];
  char error[CURL_ERROR_SIZE];
  int recovered; /* the stored result of a status query (recover.c) */
  int has_key;   /* key holds the call's idempotency key              */
  char key[RESIL_HTTP_MAX_KEY + 1];
};

/* A fresh, empty response. NULL when out of memory. */
resil_http_response *resil__http_response_new(const resil_allocator *a);
/* Empties r for reuse, keeping its buffers' capacity. */
void resil__http_response_reset(resil_http_response *r);
/* Appends one header (value trimmed). Returns 0 or -1. */
int resil__http_response_add_header(resil_http_response *r, const char *name,
                                    size_t nlen, const char *value,
                                    size_t vlen);

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
  uint32_t seq;          /* number of the latest attempt started */
  int taken;
  resil_http_response *pub;
};

/* The caller's args (NULL: none) as a full-size copy in *dst; RESIL_EINVAL
 * for args not passed through resil_http_args_init() (request.c). */
resil_status resil__http_args_in(resil_http_args *dst, const resil_http_args *src,
                                 resil_error *err);

/* 1 when key is a valid idempotency key: 1..255 visible ASCII characters
 * (request.c). */
int resil__http_key_ok(const char *key);

/* Copies key (NULL: none) into r as the call's idempotency key. */
void resil__http_response_set_key(resil_http_response *r, const char *key);

/* Calls the client's attempt listener, when it has one (request.c). */
void resil__http_report(const resil_http_client *c, uint32_t attempt, const resil_outcome *o,
                        int64_t duration_ns, int64_t wait_before_ns, int64_t next_wait_ns,
                        resil_stop stop, const char *key);

/* NOT_SENT(LOCAL_ERROR) for a call that could not start, with (when out is
 * not NULL) a response whose error is why (request.c). */
resil_outcome resil__http_not_built(const resil_http_client *c, const char *why,
                                    resil_http_response **out);

/* The method's name ("GET"). */
const char *resil__http_method_name(resil_http_method m);

/* Marks r empty or decodes its JSON body as endpoint ep's response, and
 * turns *o into reason DECODE when a success cannot be read (request.c). */
void resil__http_decode(const http_endpoint *ep, resil_http_response *r,
                        resil_outcome *o);

#endif
