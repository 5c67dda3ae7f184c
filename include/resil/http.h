/* libresil-http: a declarative HTTP client on libcurl whose every attempt
 * ends in a resil_outcome (DESIGN §1, §3). A separate library: link
 * libresil-http (pkg-config resil-http) and include <resil/http.h>; the
 * umbrella header resil.h does not include it.
 *
 * Objects and their create/free pairs:
 *   resil_http_client    resil_http_client_new / resil_http_client_free
 *                        An endpoint table validated once, a pool of
 *                        connections (one libcurl easy handle and one
 *                        keep-alive connection per pool slot), counters.
 *   resil_http_request   resil_http_request_new / resil_http_request_free
 *                        One logical call: endpoint, bound parameters,
 *                        body, and an Idempotency-Key generated once.
 *                        resil_http_request_attempt() is a resil_call_fn:
 *                        each call makes ONE physical attempt, so policies
 *                        (retry, breaker, time limiter, bulkhead) wrap it.
 *   resil_http_response  resil_http_request_take_response /
 *                        resil_http_response_free
 *
 * Recovery after UNKNOWN (DESIGN §6): resil_http_call_keyed() runs a keyed
 * write and, when an attempt ends in a way that may have executed, asks the
 * endpoint's status endpoint (resil_http_endpoint.status_endpoint, e.g.
 * GET /operations/{key}) what became of the operation before deciding
 * anything: COMMITTED gives the stored result, PENDING is waited for, and
 * UNKNOWN (a 404 included: it never means "did not happen") leaves the
 * decision to the retry policy, which re-sends with the same key. Every
 * write and status query of it goes through the caller's chain (breaker,
 * rate limiter, bulkhead, time limiter), the call's key comes back
 * (resil_http_response_idempotency_key, resil_http_recovery), and
 * resil_http_operation_status() asks about a kept key later.
 *
 * What libresil guarantees on the wire:
 *   - No hidden retries. libcurl re-sends a request by itself when a reused
 *     keep-alive connection turns out dead before any response byte
 *     (Curl_retry_request, lib/transfer.c, driven from lib/multi.c). Every
 *     such re-send is caught before it leaves the client (a second
 *     CURLOPT_PREREQFUNCTION call, or a socket opened, within one attempt
 *     with no response since the previous request) and either refused
 *     (default: the attempt ends UNKNOWN, reason CONNECTION_CLOSED) or, with
 *     resend_stale = RESIL_HTTP_RESEND_IF_SAFE, allowed only for an idempotent
 *     or keyed call and counted (resil_http_stats.resends_counted).
 *     "Expect: 100-continue" is never sent, HTTP/0.9 is refused, HTTP/1.1 is
 *     used, no authentication scheme that needs a second request is enabled,
 *     and redirects are off unless configured (then each hop is counted
 *     apart from attempts, only http and https Locations are followed,
 *     and headers the log redactor treats as secret are not sent to
 *     another origin; see follow_redirects).
 *   - Path parameters cannot change the path's segments: every byte but
 *     A-Za-z0-9-._~ is percent-encoded, '/' included, and a whole value
 *     "." or ".." is sent as %2E or %2E%2E.
 *   - No environment surprises: proxies come only from the config (the
 *     http_proxy family of variables is ignored), .netrc is never read,
 *     and TLS peer and host verification are on unless switched off.
 *
 * Outcome of one attempt (resil_http_request_attempt):
 *   REJECTED(DEADLINE)          no time left before the attempt started.
 *   NOT_SENT(CANCELLED)         the token fired before the request was sent.
 *   NOT_SENT(POOL_TIMEOUT)      no pool slot within the lease timeout.
 *   NOT_SENT(DNS)               name resolution failed.
 *   NOT_SENT(CONNECT_REFUSED)   the connection could not be established.
 *   NOT_SENT(CONNECT_TIMEOUT)   connect (TCP and TLS) timed out.
 *   NOT_SENT(LOCAL_ERROR)       an interceptor refused, TLS failed before the
 *                               request, out of memory before sending.
 *   UNKNOWN(TIMEOUT)            the response timeout or the deadline passed
 *                               after the request was sent.
 *   UNKNOWN(CONNECTION_CLOSED)  closed before a complete response, or a
 *                               hidden re-send was refused.
 *   UNKNOWN(CONNECTION_RESET)   reset before a complete response.
 *   UNKNOWN(CANCELLED)          the token fired after the request was sent.
 *   ANSWERED(status)            a complete response (resil_outcome_http), then
 *                               passed to the decoder hook; a JSON endpoint's
 *                               body that does not parse gives reason DECODE
 *                               with http_status kept. retry_after_ms holds
 *                               a parsed Retry-After header.
 *
 * Thread-safety: a resil_http_client may be shared by any number of threads:
 * every function taking a client is thread-safe. A resil_http_request may
 * have attempts running on several threads at once (a time limiter that
 * gave up on an attempt may leave it running while a retry starts the next);
 * see resil_http_request_attempt() for what becomes of an abandoned attempt.
 * A resil_http_response belongs to whoever took it and is not synchronised.
 * Callbacks (interceptors, decoder, log sink) run on the thread making the
 * attempt, with no library lock held, possibly on several threads at once.
 *
 * Example (H1):
 *
 *   static const char *const item_headers[] = {"X-Token: {token}", NULL};
 *   static const resil_http_endpoint endpoints[] = {
 *       RESIL_HTTP_ENDPOINT(.name = "get_item", .method = RESIL_HTTP_GET,
 *                          .path = "/items/{id}", .headers = item_headers,
 *                          .response_codec = RESIL_HTTP_CODEC_JSON),
 *   };
 *   resil_http_client_config cfg;
 *   resil_http_client_config_init(&cfg);
 *   cfg.base_url = "http://127.0.0.1:8080";
 *   cfg.endpoints = endpoints;
 *   cfg.endpoint_count = 1;
 *   resil_http_client *client = NULL;
 *   resil_error err;
 *   if (resil_http_client_new(&cfg, &client, &err) != RESIL_OK) {
 *     fprintf(stderr, "%s\n", err.msg);
 *     return 1;
 *   }
 *   resil_http_param params[] = {{"id", "42"}, {"token", "s3cret"}};
 *   resil_http_args args;
 *   resil_http_args_init(&args);
 *   args.params = params;
 *   args.param_count = 2;
 *   resil_http_response *resp = NULL;
 *   resil_outcome o = resil_http_call(client, "get_item", &args, NULL, NULL, &resp);
 *   if (resil_outcome_is_success(&o))
 *     printf("%s\n", json_string_value(
 *         json_object_get(resil_http_response_json(resp), "name")));
 *   resil_http_response_free(resp);
 *   resil_http_client_free(client);
 */
#ifndef RESIL_HTTP_H
#define RESIL_HTTP_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "alloc.h"
#include "call.h"
#include "chain.h"
#include "clock.h"
#include "outcome.h"
#include "retry.h"
#include "status.h"
#include "version.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct resil_http_client resil_http_client;
typedef struct resil_http_request resil_http_request;
typedef struct resil_http_response resil_http_response;
/* The headers an interceptor may add or replace; valid during the callback. */
typedef struct resil_http_headers resil_http_headers;

typedef enum resil_http_method {
  RESIL_HTTP_GET = 0,
  RESIL_HTTP_HEAD = 1,
  RESIL_HTTP_POST = 2,
  RESIL_HTTP_PUT = 3,
  RESIL_HTTP_PATCH = 4,
  RESIL_HTTP_DELETE = 5,
  RESIL_HTTP_OPTIONS = 6
} resil_http_method;

/* Whether an endpoint's operation may be executed more than once. */
typedef enum resil_http_idempotency {
  /* From the method (RFC 9110 §9.2.2): GET, HEAD, PUT, DELETE and OPTIONS
   * are idempotent; POST and PATCH are not. */
  RESIL_HTTP_IDEMPOTENT_DEFAULT = 0,
  RESIL_HTTP_IDEMPOTENT_YES = 1,
  RESIL_HTTP_IDEMPOTENT_NO = 2
} resil_http_idempotency;

typedef enum resil_http_codec {
  /* Bytes as they are. Request: Content-Type from the endpoint, else
   * application/octet-stream when a body is given. */
  RESIL_HTTP_CODEC_RAW = 0,
  /* Request: a json_t (serialised once per logical call) or JSON text,
   * Content-Type application/json. Response: Accept: application/json, and
   * a non-empty body is parsed with jansson during the attempt. */
  RESIL_HTTP_CODEC_JSON = 1
} resil_http_codec;

/* Whether a logical call on the endpoint sends an idempotency key. */
typedef enum resil_http_key {
  /* Only a key the caller passes in resil_http_args is sent. */
  RESIL_HTTP_KEY_NONE = 0,
  /* A key is sent on every attempt: the caller's, else a random 128-bit
   * hex key generated once per logical call. */
  RESIL_HTTP_KEY_SEND = 1
} resil_http_key;

/* What libcurl may do when a request sent on a reused keep-alive connection
 * gets no response byte because the connection died (libcurl then re-sends
 * the same request on a new connection by itself). */
typedef enum resil_http_resend {
  /* Refuse the re-send: the attempt ends UNKNOWN(CONNECTION_CLOSED) and the
   * caller's policies decide (the server may have executed the request).
   * Counted in resil_http_stats.resends_prevented. */
  RESIL_HTTP_RESEND_NEVER = 0,
  /* Allow one re-send when the call is idempotent or keyed (endpoint flags,
   * or ctx->flags), the same rule a retry applies to an UNKNOWN outcome;
   * refuse it otherwise. An allowed re-send counts as a physical attempt
   * (resil_http_stats.attempts and .resends_counted, and
   * resil_http_info.resends). */
  RESIL_HTTP_RESEND_IF_SAFE = 1
} resil_http_resend;

/* Decoder hook: sees every attempt that got a complete response, with the
 * outcome the library proposes (ANSWERED(status), or reason DECODE), and
 * returns the outcome to report. Typical: 422 -> reason BUSINESS (a client
 * error, never retried). The response is the attempt's own; read it, do not
 * keep it. Runs on the attempting thread. */
typedef resil_outcome (*resil_http_decoder_fn)(void *user,
                                               const resil_http_response *resp,
                                               resil_outcome proposed);

/* One endpoint of a static, declarative table. Unlike config structs, an
 * endpoint is plain data meant for designated initialisers: every field's
 * zero value is its documented default, except struct_size, which every
 * entry must carry (version.h, "Sized structs"): write each entry with
 * RESIL_HTTP_ENDPOINT(...) or set `.struct_size = sizeof(resil_http_endpoint)`.
 * The library walks the caller's table with the caller's stride (the first
 * entry's struct_size; every entry must say the same) and reads only that
 * much of each entry. Strings are copied by resil_http_client_new(). */
typedef struct resil_http_endpoint {
  /* sizeof(resil_http_endpoint) as the caller was compiled; required. */
  size_t struct_size;
  /* Required. 1..63 characters of [A-Za-z0-9_.-], unique in the table. */
  const char *name;
  /* Default (0) RESIL_HTTP_GET. */
  resil_http_method method;
  /* Required path template, appended to the base URL: starts with '/';
   * literal characters are RFC 3986 pchars and '/' ('%' only as a %XX
   * escape); `{name}` placeholders ([A-Za-z0-9_.-], 1..64 characters) are
   * replaced by percent-encoded parameter values (everything but
   * A-Za-z0-9-._~ is encoded, '/' included, and a whole value "." or ".."
   * becomes %2E or %2E%2E, so that no value changes the segments). */
  const char *path;
  /* Optional query template without the '?', e.g. "q={q}&limit=10"; the
   * same rules as the path ('?' and '/' also allowed literally). */
  const char *query;
  /* Optional NULL-terminated list of "Name: value" templates; placeholders
   * only in the value, inserted verbatim (CR and LF refused). */
  const char *const *headers;
  /* Default (0) RESIL_HTTP_IDEMPOTENT_DEFAULT (from the method). */
  resil_http_idempotency idempotent;
  /* Default (0) RESIL_HTTP_CODEC_RAW. */
  resil_http_codec request_codec;
  /* Default (0) RESIL_HTTP_CODEC_RAW. */
  resil_http_codec response_codec;
  /* Request Content-Type; NULL gives the codec's (see resil_http_codec). */
  const char *content_type;
  /* Default (0) RESIL_HTTP_KEY_NONE. */
  resil_http_key idempotency_key;
  /* 0 (default): a 204, 205 or 304, or any response with an empty body, is
   * "empty" (resil_http_response_is_empty) and never a decode error. 1: an
   * empty body on a JSON endpoint is a decode error, except for 204/205/304. */
  int empty_is_error;
  /* Optional absolute base URL for this endpoint ("https://host:port/api"),
   * NULL for the client's. Each distinct origin has its own per-host limit. */
  const char *base_url;
  /* Optional decoder for this endpoint; NULL uses the client's. */
  resil_http_decoder_fn decoder;
  void *decoder_user;
  /* Optional name of another endpoint of the same table that reports the
   * state of an operation by its idempotency key, e.g.
   *   RESIL_HTTP_ENDPOINT(.name = "op_status", .path = "/operations/{key}",
   *                       .response_codec = RESIL_HTTP_CODEC_JSON)
   * Only resil_http_call_keyed() and resil_http_operation_status() use it
   * (see there for the answers it understands). Checked by resil_http_client_new(): it must name an
   * endpoint of the table other than this one, whose method is GET and
   * whose path or query template has a {key} placeholder. NULL (default):
   * no status queries. */
  const char *status_endpoint;
  /* Since 0.2. 0 (default): the endpoint's attempts carry the deadline
   * header when the client sends it (resil_http_client_config,
   * deadline_propagation); 1: never on this endpoint (an upstream that
   * rejects unknown headers, or one that must not learn the caller's
   * budget). 0 or 1. */
  int no_deadline_header;
  /* Since 0.2. Several instances of this endpoint's upstream (DESIGN
   * §8.4): a NULL-terminated list of 1..64 base URLs, each as base_url
   * (the same rules, one origin each), instead of base_url (give one or
   * the other). Every attempt of a call chooses one (see
   * resil_http_client_config, "Many instances"); NULL (default): the
   * endpoint uses base_url or the client's instances. Copied. */
  const char *const *instances;
  /* Since 0.2. 1: base_url's host name is resolved and every address it
   * has is an instance (see resil_http_client_config.resolve_instances);
   * needs base_url. 0 (default) or 1. */
  int resolve_instances;
} resil_http_endpoint;

/* An endpoint entry with struct_size set, for tables:
 *   static const resil_http_endpoint eps[] = {
 *       RESIL_HTTP_ENDPOINT(.name = "get_item", .path = "/items/{id}"),
 *   };
 * Since 0.2. */
#define RESIL_HTTP_ENDPOINT(...)                                               \
  { .struct_size = sizeof(resil_http_endpoint), __VA_ARGS__ }

/* A name and a value: a placeholder binding, a query parameter or a header.
 * A fixed pair that never grows (so it has no struct_size): arrays of it
 * may be written as {{"id", "42"}, {"token", t}}. */
typedef struct resil_http_param {
  const char *name;
  const char *value;
} resil_http_param;

/* What an interceptor sees of the attempt about to be made. Filled by the
 * library; struct_size is the size it filled (Since 0.2). */
typedef struct resil_http_attempt_info {
  size_t struct_size;
  const char *endpoint;        /* endpoint name                          */
  const char *method;          /* "GET", "POST", ...                     */
  const char *url;             /* full URL, not redacted                 */
  const void *body;            /* request body as sent (maybe gzipped)   */
  size_t body_len;
  const char *idempotency_key; /* NULL when the call sends none          */
  uint32_t attempt;            /* ctx->attempt (0 without a retry layer) */
} resil_http_attempt_info;

/* Runs before every attempt of every call (in the order configured), e.g.
 * to add a fresh signature or timestamp with resil_http_headers_set().
 * Returning anything but RESIL_OK stops the attempt: NOT_SENT(LOCAL_ERROR),
 * nothing sent. */
typedef resil_status (*resil_http_interceptor_fn)(
    void *user, const resil_http_attempt_info *info, resil_http_headers *h);

/* A function and its argument: a fixed pair that never grows. */
typedef struct resil_http_interceptor {
  resil_http_interceptor_fn fn;
  void *user;
} resil_http_interceptor;

/* Adds header `name` or replaces an endpoint or caller header of that name
 * (case-insensitive) for this attempt only. Returns RESIL_OK,
 * RESIL_EMISUSE when name is the idempotency key header (the key is fixed
 * per logical call and is never changed by an interceptor) or a header the
 * library owns (Content-Length, Content-Encoding, Transfer-Encoding, Host,
 * Expect, Connection), RESIL_EINVAL (NULL, a name that is not an HTTP token, a value
 * with CR, LF or NUL), RESIL_ENOMEM. Only valid inside the interceptor
 * callback. Since 0.1. */
RESIL_API resil_status resil_http_headers_set(resil_http_headers *h,
                                              const char *name,
                                              const char *value);

typedef enum resil_http_log_level {
  RESIL_HTTP_LOG_NONE = 0,
  /* Request line (method, redacted URL) and response status with duration
   * and outcome. */
  RESIL_HTTP_LOG_BASIC = 1,
  /* BASIC plus request and response headers, secrets redacted. */
  RESIL_HTTP_LOG_HEADERS = 2,
  /* HEADERS plus bodies (first 4 KiB), with the values of secret-looking
   * JSON keys and form fields redacted. */
  RESIL_HTTP_LOG_FULL = 3,
  /* One line per attempt with metadata only: method, endpoint name, status,
   * duration, outcome, attempt. No URL, header or body. */
  RESIL_HTTP_LOG_METADATA = 4
} resil_http_log_level;

/* Receives one NUL-terminated line without a newline. Redaction happened
 * before, at every level, case-insensitively:
 *   - the whole value of any header whose name contains "auth", "token",
 *     "secret", "passw", "pwd", "jwt", "session", "credential",
 *     "signature", "cookie", "apikey", "api-key" or "api_key", or is "Key"
 *     or ends in "-key" or "_key" (X-Access-Key, Ocp-Apim-Subscription-Key),
 *     except a name ending in "Idempotency-Key"; in both directions;
 *   - in every other header value (Location, Content-Location, Link,
 *     Refresh, Referer, ... in both directions) the userinfo of any URL
 *     ("scheme://user:pw@") and the value of any secret-looking name=value
 *     pair, a query's or a fragment's included;
 *   - in the request URL the userinfo (also without a scheme:
 *     "user:pw@host/path"), the fragment (dropped), and the values of
 *     secret-looking query parameters;
 *   - the whole value of any name=value pair holding a URL with userinfo,
 *     plain or percent-encoded ("?next=https://u:p@h/",
 *     "?r=http%3A%2F%2Fu%3Ap%40h", "?to=u:p@h/x"; a bare "a@b.org" is
 *     kept);
 *   - a name is secret-looking, matched after percent-decoding ("%74oken"
 *     is "token"), when it contains "token", "key", "secret", "pass",
 *     "pwd", "sig", "auth", "credential", "session", "cookie", "jwt" or
 *     "assertion" (client_assertion), or is "code", "otp" or "pin";
 *   - at FULL, the same names as JSON keys (the whole value; \u escapes in
 *     the key decoded) and form fields, and name=value pairs inside JSON
 *     strings.
 * All become "[REDACTED]"; matching errs towards hiding too much. Bodies
 * that are neither JSON nor forms are logged as they are (first 4 KiB).
 * Then every control byte, DEL and byte >= 0x80 of the line (from the
 * network or not) is written as "\xNN" (lower-case hex), so no raw control
 * sequence reaches a terminal; a backslash is left as it is. At FULL, CR,
 * LF and TAB of a body become spaces and its other control bytes '.'. */
typedef void (*resil_http_log_fn)(void *user, resil_http_log_level level,
                                  const char *line);

/* How an attempt chooses among the instances of an upstream (see
 * resil_http_client_config, "Many instances"). Since 0.2. */
typedef enum resil_http_balance {
  /* Two instances drawn at random, the one with fewer attempts in flight
   * (ties: the first drawn). The default. */
  RESIL_HTTP_BALANCE_P2C = 0,
  /* The next instance in turn. */
  RESIL_HTTP_BALANCE_ROUND_ROBIN = 1
} resil_http_balance;

/* The ejection classes by default: the breaker's (breaker.h). */
#define RESIL_HTTP_EJECT_CLASSES_DEFAULT                                       \
  (RESIL_CLASS_BIT(RESIL_CLASS_NOT_SENT) | RESIL_CLASS_BIT(RESIL_CLASS_UNKNOWN) | \
   RESIL_CLASS_BIT(RESIL_CLASS_SERVER_ERROR) | RESIL_CLASSES_THROTTLED)

typedef enum resil_http_instance_event_kind {
  RESIL_HTTP_INSTANCE_EJECTED = 1,   /* out of the choice for duration_ns  */
  RESIL_HTTP_INSTANCE_RETURNED = 2,  /* its probe succeeded: back in (and,
                                        with instance_ramp_ns, its ramp
                                        starts: time_ns)                   */
  RESIL_HTTP_INSTANCE_ADDED = 3,     /* a resolution found a new address   */
  RESIL_HTTP_INSTANCE_REMOVED = 4,   /* a resolution no longer returned it */
  /* Since 0.2: the ramp after a return (instance_ramp_ns) ran its whole
   * duration: the instance takes part in every choice again. time_ns is
   * the ramp's end (the RETURNED event's time_ns + instance_ramp_ns),
   * duration_ns the ramp's duration. There is no timer: the first choice
   * of an instance of that upstream made after the ramp's end notices it
   * (a blocking call's attempt or the engine's, on that thread; stats and
   * metrics only show the share 1), so the event may come later than its
   * time_ns; a compare-and-swap on the ramp makes it told once per ramp
   * whatever the threads choosing at once. A ramp cut short by an
   * ejection is not told ended: the EJECTED event ends it (and the next
   * return starts a new ramp); an ejection that comes after the ramp's
   * time was up tells RAMP_ENDED first if no choice did. An instance a
   * resolution removed (REMOVED) is in no choice: its ramp is told ended
   * once it is back and chosen among. */
  RESIL_HTTP_INSTANCE_RAMP_ENDED = 5
} resil_http_instance_event_kind;

/* What a resil_http_instance_listener_fn is told. Filled by the library;
 * struct_size is the size it filled. Strings live for the call only. */
typedef struct resil_http_instance_event {
  size_t struct_size;
  resil_http_instance_event_kind kind;
  const char *client;     /* the client's name                            */
  const char *upstream;   /* the client's base URL, or the endpoint's name
                             for an endpoint's own instances              */
  const char *instance;   /* the instance's base URL (for a resolved name
                             the name's base_url, and `address` below)    */
  uint32_t index;         /* its index (resil_http_client_instance_stats)  */
  uint64_t ejections;     /* ejections so far, this one included          */
  int64_t duration_ns;    /* EJECTED: how long; RAMP_ENDED: the ramp's
                             duration (instance_ramp_ns)                  */
  uint32_t consecutive;   /* EJECTED: failures in a row that caused it    */
  const char *address;    /* a resolved name's address ("10.0.0.7",
                             "[::1]"), NULL for a listed base URL         */
  /* Since 0.2: the instant the event happened, CLOCK_MONOTONIC ns (the
   * clock of the client's ejection times): the ejection, the probe's
   * success (RETURNED: the ramp's start), the lookup's answer (ADDED,
   * REMOVED), the ramp's end (RAMP_ENDED: however late noticed). */
  int64_t time_ns;
} resil_http_instance_event;

typedef void (*resil_http_instance_listener_fn)(void *user,
                                                const resil_http_instance_event *ev);

typedef struct resil_http_client_config {
  /* Set by resil_http_client_config_init() (version.h, "Sized structs").
   * Fields are only appended. */
  size_t struct_size;
  /* Instance name for logs; copied. NULL gives "http". */
  const char *name;
  /* Required: "http://host[:port][/prefix]" or "https://...", no query, no
   * fragment, no trailing '/' needed (one is removed). Copied. */
  const char *base_url;
  /* Required: 1..1024 endpoints, validated here (templates parsed, names
   * unique). A bad table fails resil_http_client_new() with RESIL_EINVAL and
   * err naming the endpoint and the problem; nothing is ever sent. */
  const resil_http_endpoint *endpoints;
  size_t endpoint_count;
  /* Pool slots: attempts in flight at once, and so connections. 1..1024.
   * Default 16. Each slot keeps at most one idle keep-alive connection. */
  uint32_t max_connections;
  /* Attempts in flight at once to one origin (scheme, host, port).
   * 1..max_connections. Default 16. */
  uint32_t max_connections_per_host;
  /* How long an attempt waits for a pool slot (on an async engine: for a
   * connection in the engine's queue, engine.h) before it ends
   * NOT_SENT(POOL_TIMEOUT) without sending; clipped to the deadline.
   * 0..1 day; 0 fails at once. Default 1 s. */
  int64_t lease_timeout_ns;
  /* Per attempt: DNS + TCP + TLS connect. 1 ms..1 day. Default 10 s. */
  int64_t connect_timeout_ns;
  /* Per attempt: from the moment the request starts being sent (each
   * redirect hop restarts it) to the last byte of the response.
   * 1 ms..1 day. Default 60 s. Every timeout is also clipped to the
   * remaining deadline of the resil_ctx. */
  int64_t response_timeout_ns;
  /* 0 (default): a 3xx comes back as the answer. 1: follow up to
   * max_redirects hops within one attempt; hops are counted apart from
   * attempts (resil_http_info.hops). Past max_redirects, and for a
   * Location that is not an http or https URL (file:, ftp:, ...), nothing
   * more is sent and the last 3xx is the attempt's answer, ANSWERED(3xx),
   * with resil_http_response_error() saying why it was not followed (the
   * refused scheme, never the rest of the URL). From the first hop to
   * another origin (scheme, host or port) on, the attempt no longer sends
   * the headers whose values the log redactor hides (Authorization,
   * Cookie, X-Api-Key, ...: see resil_http_log_fn), whether the table, the
   * caller or an interceptor set them; the idempotency key and the other
   * headers are still sent. */
  int follow_redirects;
  /* 0..50. Default 5. */
  uint32_t max_redirects;
  /* 1: gzip request bodies strictly larger than gzip_min_bytes whose
   * Content-Type media type (parameters ignored, case-insensitive) is in
   * gzip_media_types, and send Content-Encoding: gzip. The server must
   * accept gzip request bodies. 0 or 1. Default 0. */
  int request_gzip;
  /* 0..1 GiB. Default 2048: a 2049-byte body is compressed, 2048 is not. */
  size_t gzip_min_bytes;
  /* NULL-terminated media types; NULL gives application/json,
   * application/xml, text/xml. An empty list matches nothing. Copied. */
  const char *const *gzip_media_types;
  /* 1: send Accept-Encoding with the encodings libcurl can decode (gzip,
   * deflate, ...) and decode the response. 0 or 1. Default 1. */
  int response_decompression;
  /* Default RESIL_HTTP_RESEND_NEVER. */
  resil_http_resend resend_stale;
  /* Header carrying the idempotency key: an HTTP token, not a header
   * libcurl or libresil set (Host, Content-Length, Transfer-Encoding,
   * Expect, Content-Encoding, Connection; RESIL_EINVAL naming the field).
   * Default "Idempotency-Key". Copied. */
  const char *idempotency_header;
  /* Largest response body kept, 1..1 GiB. A larger body aborts the
   * attempt: UNKNOWN(RESPONSE_TOO_LARGE) (the request was executed, its
   * answer was not read whole) with the status kept on the response.
   * Default 64 MiB. */
  size_t max_response_bytes;
  /* Client-wide decoder hook (endpoints may override); NULL for none. */
  resil_http_decoder_fn decoder;
  void *decoder_user;
  /* 0..16 interceptors; copied. Default none. */
  const resil_http_interceptor *interceptors;
  size_t interceptor_count;
  /* Default RESIL_HTTP_LOG_NONE; a level other than NONE needs log_fn. */
  resil_http_log_level log_level;
  resil_http_log_fn log_fn;
  void *log_user;
  /* Proxy URL, or NULL (default) for a direct connection whatever the
   * environment says. Copied. */
  const char *proxy;
  /* TLS: 1 (default) verifies the peer's certificate and host name. 0 is
   * for tests against self-signed servers only. */
  int verify_peer;
  /* CA bundle file, NULL (default) for the system's. Copied. */
  const char *ca_file;
  /* User-Agent; NULL gives "libresil/<version>". Visible
   * ASCII, spaces and tabs only, as an endpoint header value (a control
   * byte, CR/LF among them, DEL or a non-ASCII byte: RESIL_EINVAL naming
   * the field). Copied. */
  const char *user_agent;
  /* Clock for Retry-After HTTP-dates (wall time); NULL = system. Transfers
   * always run on real time; the deadline is read on the ctx's clock once
   * when the attempt starts. */
  const resil_clock *clock;
  /* NULL = malloc/free. Used for libresil's own memory (libcurl, jansson
   * and zlib use their own). */
  const resil_allocator *alloc;
  /* Recovery flow of resil_http_call_keyed(). Outcome classes of a write
   * attempt after which the status endpoint is asked: RESIL_CLASS_BIT() of
   * UNKNOWN, SERVER_ERROR, HTTP_408, HTTP_425 and HTTP_429 only (the classes that may have
   * executed); 0 makes no status queries. Default UNKNOWN | SERVER_ERROR:
   * a 408/425/429 normally means the server refused before executing, and
   * asking an overloaded server one more question does not help it. */
  uint32_t status_query_classes;
  /* Wait between two status queries while the operation is PENDING.
   * 1 ms..1 day. Default 100 ms. A usable Retry-After on a PENDING answer
   * replaces it. */
  int64_t status_poll_ns;
  /* Longest time one logical call waits for a PENDING operation, from its
   * first PENDING answer. 0..1 day; 0 reports PENDING at once. Default
   * 10 s. The wait always ends at the ctx deadline too. */
  int64_t pending_wait_max_ns;
  /* Since 0.2. Attempt listener (call.h), NULL for none. Which attempts
   * the client reports: each physical request is reported exactly once,
   * by the layer that decided to make it.
   *   - The client reports the attempts it decides on itself: the single
   *     attempt of resil_http_call() or resil_http_call_keyed() given no
   *     retry, every status query of resil_http_call_keyed() and
   *     resil_http_operation_status(). For a status query, attempt is the
   *     query's number within the logical call (1, 2, ...), wait_before_ns
   *     the PENDING poll slept before it, next_wait_ns the poll that
   *     follows or -1, stop NONE while the call goes on; since 0.2 the
   *     query that read the operation's stored result (COMMITTED) has
   *     RESIL_OF_RECOVERED in its outcome's flags (blocking calls and
   *     the async engine's resil_engine_call_keyed alike, which reports
   *     each status query as an unretried call: attempt 1, next_wait_ns
   *     -1, the call's key).
   *   - Attempts a retry drives (resil_http_call() or
   *     resil_http_call_keyed() given a retry, or the caller's own retry
   *     around resil_http_request_attempt()) are the retry's to report
   *     (its own on_attempt): the client does not report them. Set the
   *     same listener on both to see every physical request once.
   *   - resil_http_request_attempt() called by the caller (alone or under
   *     the caller's own policies) is the caller's attempt: not reported
   *     by the client.
   * source is the client's name; idempotency_key the call's key, or NULL.
   * Runs on the calling thread, with no library lock held. */
  resil_attempt_listener_fn on_attempt;
  void *on_attempt_user;
  /* Since 0.2. Deadline propagation (DESIGN §8.3). 1 (default): every
   * attempt of a call whose resil_ctx has a deadline carries the budget
   * left for it, in header deadline_header, as a relative duration in
   * gRPC's timeout grammar (1..8 digits and a unit H, M, S, m, u, n:
   * "287513u"), so that the next hop can stop working when the caller
   * stops waiting. The value is read just before libcurl writes each
   * request: after the pool lease, the connect and any backoff, and again
   * for each redirect hop, so a retry carries what is left, never the
   * original budget (envoy#13196). It is the time to the ctx deadline, the
   * call's whole budget as the caller waits for it: not shortened to a
   * per-attempt timeout (response_timeout_ns, the engine's
   * attempt_timeout_ns), which is the client's own choice to give up on
   * one attempt and try again; written in the finest unit that fits 8
   * digits and rounded DOWN: the receiver never gets more time than was
   * left. A call without a deadline sends no header (absent means "no
   * deadline" to every reader of the grammar). Relative values make the
   * hosts' clocks irrelevant.
   * A header of the same name set by the endpoint table, the call's
   * resil_http_args.headers or an interceptor is not sent when the library
   * sends its own (never two values): the library's value is the only one
   * that is right for this attempt at send time, and a caller that wants
   * to give the next hop less sets a shorter ctx deadline. On an attempt
   * without the header (no deadline, the endpoint's no_deadline_header,
   * or propagation off) such a header is sent as given.
   * 0: no attempt of the client carries it. 0 or 1. */
  int deadline_propagation;
  /* Since 0.2. The header's name: an HTTP token of 1..64 characters, not
   * the idempotency header nor a header libcurl or libresil set (Host,
   * Content-Length, Transfer-Encoding, Expect, Content-Encoding,
   * Connection); RESIL_EINVAL naming the field. Read only when
   * deadline_propagation is 1. "grpc-timeout" is allowed (the same
   * grammar). Copied. Default "Request-Timeout". */
  const char *deadline_header;
  /* ---- Many instances of the upstream (DESIGN §8.4). Since 0.2. ----
   *
   * An upstream (the client's, or an endpoint's own) may be several
   * instances: a static list of base URLs (`instances`), or a host name
   * whose every address is one (`resolve_instances`). Each ATTEMPT of a
   * call chooses one instance, so the policies around
   * resil_http_request_attempt() (retry, hedge, breaker) keep counting
   * logical calls and attempts as before:
   *   - choice: `balance`, among the instances neither ejected nor tried
   *     by this call yet; when every live instance was tried, among the
   *     live ones; the last instance is never left out (below).
   *   - retry elsewhere: a retry goes to an instance this logical call
   *     (the resil_http_request) has not tried when one is live; a hedge
   *     (attempts of one request at once) to one other than the running
   *     attempts'. Which attempts may be retried at all does not change:
   *     the retry layer decides (NOT_SENT may move anywhere, an unkeyed
   *     POST included, since it reached nobody; after UNKNOWN only a keyed
   *     or idempotent call moves on). resil_http_call_keyed()'s status
   *     queries prefer an instance other than the one whose write ended
   *     UNKNOWN (the operation store is shared, §6).
   *   - outlier ejection, per instance: eject_consecutive attempts in a
   *     row ending in a class of eject_classes (NOT_SENT counts only for
   *     DNS, CONNECT_REFUSED and CONNECT_TIMEOUT; cancelled attempts,
   *     POOL_TIMEOUT, LOCAL_ERROR and REJECTED count neither way; any
   *     other outcome resets the count) take it out of the choice for
   *     eject_base_ns × (ejections so far), at most eject_max_ns, plus a
   *     random 0..10 % so that clients ejected together do not return
   *     together. Then ONE attempt at a time probes it: a success puts it
   *     back (the multiplier decreases by one per eject_base_ns of health
   *     afterwards), a failure ejects it again, for longer. At most
   *     eject_max_percent of the instances are out (ejected or probing) at
   *     once, rounded down, and never all: a single instance is never
   *     ejected. An instance that would be ejected past the cap stays in
   *     the choice (counted, resil_http_instance_stats.ejections_skipped).
   *   - the client's breaker, around the call, still sees logical calls or
   *     attempts as its place in the chain says; ejection is per instance.
   * An instance's pool origin is its URL's scheme, host and port (lower
   * case, the default port filled in): instances of different origins do
   * not share connections, and max_connections_per_host applies to each.
   * The same origin listed twice (the same URL twice, or spelled
   * differently: "http://a", "http://a:80", "http://a/", or other paths on
   * one host) is accepted and gives two instances of ONE origin: each is
   * chosen, counted (a row of resil_http_client_instance_stats each),
   * ejected, probed and ramped on its own (an ejection of one leaves the
   * other in the choice, though it is the same server; both count in
   * eject_max_percent), and "another instance" for a retry or a hedge may
   * be the other (the same server); but they share the origin's
   * connections: an idle connection of one serves the other, and the
   * origin's cap (max_connections_per_host, and with several instances
   * max_connections / the live instances) applies to the two together,
   * not to each. The same holds for an instance whose origin is base_url's
   * or another upstream's. The response says which instance answered
   * (resil_http_response_instance) and resil_http_client_instance_stats()
   * reads each one's figures.
   *
   * NULL-terminated list of 1..64 base URLs, each as base_url; give
   * base_url or instances, not both. NULL (default): base_url. Copied. */
  const char *const *instances;
  /* 1: base_url's host is a name whose addresses (IPv4 and IPv6, as
   * getaddrinfo gives them, at most 64) are the instances: the client
   * connects to each address (CURLOPT_CONNECT_TO) while the URL, the Host
   * header and the TLS server name stay base_url's. A numeric host is one
   * instance. 0 (default) or 1.
   *
   * The name is looked up on a thread of the client (the resolver, one
   * per client that resolves a name), never on a caller's:
   * resil_http_client_new() starts it and returns at once, without
   * waiting for DNS. Its first lookup begins then; later ones every
   * resolve_interval_ns (every second while no address is known). An
   * address that disappears leaves the choice, one that comes back keeps
   * its figures.
   *
   * An attempt made before the name's first lookup has ended (success or
   * failure) waits for it, as long as it may wait to connect (libcurl
   * counts a lookup in its connect timeout): connect_timeout_ns, cut to
   * the attempt's time left (its ctx deadline, and on the engine
   * policies.attempt_timeout_ns). A cancel token ends the wait (looked at
   * every 10 ms on the blocking path): NOT_SENT(CANCELLED). If the lookup
   * has not ended by then the attempt ends NOT_SENT(DNS), as when the
   * lookup failed or found no address: nothing was sent, so a retry may
   * move it anywhere. Blocking calls (resil_http_call(),
   * resil_http_request_attempt()) wait on a condition variable the
   * resolver signals; the engine never blocks its loop: the call waits in
   * the engine (not counted in max_connections) and starts on the loop
   * thread as soon as the resolver says the lookup ended, in the order
   * the calls came. Once the first lookup has ended no attempt waits for
   * DNS again: later lookups replace the addresses under the calls.
   *
   * resil_http_client_instance_count() counts no address until the first
   * lookup succeeded; on_instance hears each address added, on the
   * resolver's thread. resil_http_client_free() waits for a lookup in
   * progress to return (getaddrinfo cannot be interrupted: up to the
   * system resolver's own timeouts, resolv.conf "timeout" x "attempts").
   * The registry's check mode (RESIL_REGISTRY_NO_OPEN: `resil config
   * check`, `resil describe --config`) looks no name up. */
  int resolve_instances;
  /* 1 s..1 day. Default 30 s. */
  int64_t resolve_interval_ns;
  /* Default RESIL_HTTP_BALANCE_P2C. */
  resil_http_balance balance;
  /* Consecutive failures that eject an instance, 1..1000, or 0: never
   * eject. Default 5. Read only when an upstream has several instances (or
   * resolves a name). */
  uint32_t eject_consecutive;
  /* RESIL_CLASS_BIT() of the classes that count as failures, a subset of
   * NOT_SENT, UNKNOWN, SERVER_ERROR, HTTP_408, HTTP_425, HTTP_429.
   * Default the breaker's: all six (RESIL_HTTP_EJECT_CLASSES_DEFAULT). */
  uint32_t eject_classes;
  /* 1 ms..1 day, and eject_base_ns <= eject_max_ns <= 1 day. Defaults
   * 30 s and 300 s. */
  int64_t eject_base_ns;
  int64_t eject_max_ns;
  /* 0..100. Default 50. */
  uint32_t eject_max_percent;
  /* Told of every ejection, return and end of a return's ramp
   * (resil_http_instance_event), on the thread whose attempt caused it
   * (for RAMP_ENDED the one whose choice noticed it; the resolver's for
   * ADDED and REMOVED), with no library lock held; NULL (default) none.
   * resil_event_instance_listener (events.h) writes them to an event
   * log. */
  resil_http_instance_listener_fn on_instance;
  void *on_instance_user;
  /* The ramp of an instance back from ejection (DESIGN §2.9, §8.4; the
   * breaker's ramp, breaker.h, the same curve and rule): once its probe
   * succeeds, for instance_ramp_ns it takes part in a growing share of the
   * choices, share(t) = max(instance_ramp_min_percent / 100,
   * (t / instance_ramp_ns)^(1 / instance_ramp_aggression)), decided without
   * randomness (over any run of choices it took part in the sum of their
   * shares within one), then in every one (on_instance hears
   * RESIL_HTTP_INSTANCE_RAMP_ENDED once). An instance ejected again
   * during its ramp starts over after its next probe (that ramp is not
   * told ended: the ejection ends it). 0 (default): no ramp,
   * full share at once; else 1 ms..1 day. */
  int64_t instance_ramp_ns;
  /* 1..100. Default 10. */
  uint32_t instance_ramp_min_percent;
  /* Finite and > 0; 1.0 linear. Default 1.0. */
  double instance_ramp_aggression;
} resil_http_client_config;

/* Writes the documented defaults and struct_size (a macro passing
 * sizeof). NULL is a no-op. Since 0.1 (sized since 0.2). */
RESIL_API void resil_http_client_config_init_sized(resil_http_client_config *cfg,
                                                   size_t struct_size);
#define resil_http_client_config_init(cfg)                                     \
  resil_http_client_config_init_sized((cfg), sizeof(resil_http_client_config))

/* Validates cfg and the endpoint table and creates a client; no connection
 * is made yet (pool slots are set up on first use). Returns RESIL_OK,
 * RESIL_EINVAL (NULL argument, a config not passed through
 * resil_http_client_config_init(), an endpoint entry without a valid
 * struct_size, a field out of range, or a bad endpoint: err has the
 * field, e.g. "endpoints[2].path", and a message naming the endpoint and
 * the problem), RESIL_ENOMEM, RESIL_ESYS (mutex or libcurl
 * global initialisation failed). *out untouched on failure. Since 0.1. */
RESIL_API resil_status resil_http_client_new(const resil_http_client_config *cfg,
                                             resil_http_client **out,
                                             resil_error *err);

/* Releases the caller's reference. The client's memory, connections and
 * libcurl handles live until its last request (and the last attempt still
 * running on any thread) is gone, so freeing the client while abandoned
 * attempts run is safe; no new request may be made on it afterwards. NULL
 * is a no-op. Since 0.1. */
RESIL_API void resil_http_client_free(resil_http_client *c);

/* The client's name (owned by c); NULL for a NULL handle. Since 0.1. */
RESIL_API const char *resil_http_client_name(const resil_http_client *c);

/* The counters include the calls an async engine (engine.h) makes on the
 * client: there an attempt starts with a transfer instead of a pool slot
 * (leased and max_connections are the blocking pool's; lease_timeouts also
 * counts the engine's attempts that waited for a connection in vain). */
typedef struct resil_http_stats {
  size_t struct_size;          /* bytes the library wrote (version.h)     */
  uint64_t requests;           /* logical calls (requests) created        */
  uint64_t attempts;           /* attempts that got a pool slot, plus
                                  allowed hidden re-sends                 */
  uint64_t requests_sent;      /* requests put on the wire, every redirect
                                  hop and allowed re-send included        */
  uint64_t hops;               /* redirects followed                      */
  uint64_t connections_opened; /* sockets opened for connections          */
  uint64_t resends_prevented;  /* hidden re-sends refused                 */
  uint64_t resends_counted;    /* hidden re-sends allowed (IF_SAFE)       */
  uint64_t lease_timeouts;     /* attempts ended NOT_SENT(POOL_TIMEOUT)   */
  uint64_t decode_errors;      /* answered attempts with reason DECODE    */
  /* Attempt outcomes by kind, indexed by resil_outcome_kind (0 unused). */
  uint64_t outcomes[5];
  uint32_t leased;             /* pool slots in use now                   */
  uint32_t max_connections;    /* pool size                               */
  /* Recovery flow (resil_http_call_keyed). A status query is a logical
   * call of its own on the status endpoint, so it is also counted in
   * requests, attempts and outcomes above: the write attempts are
   * attempts - status_queries when nothing else runs on the client. */
  uint64_t status_queries;     /* status queries made                     */
  uint64_t status_committed;   /* ... answered COMMITTED                  */
  uint64_t status_pending;     /* ... answered PENDING                    */
  uint64_t status_unknown;     /* ... answered UNKNOWN (404) or FAILED, or
                                  that got no usable answer                */
  uint64_t recovered;          /* keyed calls answered with a stored
                                  result (RESIL_OF_RECOVERED)              */
} resil_http_stats;

/* Snapshot of the counters (each read atomically), written up to the
 * caller's size (a macro passing sizeof). Returns RESIL_OK, RESIL_EINVAL
 * (out NULL), RESIL_EMISUSE (NULL handle). Thread-safe. Since 0.1 (sized
 * since 0.2). */
RESIL_API resil_status resil_http_client_get_stats_sized(const resil_http_client *c,
                                                         resil_http_stats *out,
                                                         size_t struct_size);
#define resil_http_client_get_stats(c, out)                                    \
  resil_http_client_get_stats_sized((c), (out), sizeof(resil_http_stats))

/* Adds the client to a metrics collector (metrics.h) under `name` (NULL:
 * the client's name): resil_http_client_attempts_total{name,outcome},
 * _requests_total, _requests_sent_total, _resends_total{name,kind}
 * (prevented, allowed), _connections_opened_total, _lease_timeouts_total,
 * _pool_in_use, _pool_max, _status_queries_total{name,answer},
 * _recovered_total, from resil_http_client_get_stats; since 0.2 for each
 * instance of an upstream with several (resil_http_client_instance_stats):
 * resil_http_instance_in_flight{name,upstream,instance},
 * _state{...} (0 healthy, 1 out, 2 probing, 3 gone), _ejections_total,
 * _ejections_skipped_total, _attempts_total{...,outcome}, _ramp_ratio{...}
 * (its share of the choices: 1, or its ramp's back from ejection); upstream
 * and instance are the stats' URLs redacted as the HTTP log redacts a URL
 * (userinfo and secret-looking query values replaced). The client is
 * borrowed: remove it (resil_metrics_remove) before freeing it. Part of
 * libresil-http. Same statuses as resil_metrics_add_source. Since 0.2. */
typedef struct resil_metrics resil_metrics;
RESIL_API resil_status resil_http_client_metrics_add(resil_metrics *m, const char *name,
                                                     const resil_http_client *c);

/* One instance of one of the client's upstreams (see
 * resil_http_client_config, "Many instances"). Since 0.2. */
typedef enum resil_http_instance_state {
  RESIL_HTTP_INSTANCE_HEALTHY = 0,
  RESIL_HTTP_INSTANCE_OUT = 1,      /* ejected                              */
  RESIL_HTTP_INSTANCE_PROBING = 2,  /* back from ejection, one attempt at a
                                       time until one succeeds or fails    */
  RESIL_HTTP_INSTANCE_GONE = 3      /* no longer returned by its name's
                                       resolution                           */
} resil_http_instance_state;

typedef struct resil_http_instance_stats {
  size_t struct_size;          /* bytes the library wrote (version.h)     */
  char instance[320];          /* its base URL, for a resolved name's
                                  address "base_url@address"; truncated   */
  char upstream[256];          /* as resil_http_instance_event.upstream   */
  uint32_t upstream_index;     /* 0 the client's, k the k-th endpoint that
                                  has its own instances                   */
  resil_http_instance_state state;
  uint32_t in_flight;          /* attempts chosen for it and not ended    */
  uint32_t consecutive;        /* failures in a row now                   */
  uint64_t ejections;          /* times ejected                           */
  uint64_t ejections_skipped;  /* ejections the cap refused               */
  uint64_t chosen;             /* attempts that chose it                  */
  /* Attempt outcomes by kind, indexed by resil_outcome_kind (0 unused). */
  uint64_t outcomes[5];
  int64_t out_remaining_ns;    /* OUT: time left, else 0                  */
  /* Its share of the choices now: 1.0, or during its ramp after an
   * ejection (instance_ramp_ns) the ramp's share. */
  double ramp_share;
} resil_http_instance_stats;

/* Instances of all the client's upstreams, the client's first: stable
 * indexes for the client's life (a resolved name's addresses keep their
 * index when they disappear and come back). 0 for NULL. Thread-safe.
 * Since 0.2. */
RESIL_API size_t resil_http_client_instance_count(const resil_http_client *c);
/* Snapshot of instance i, written up to the caller's size (a macro passing
 * sizeof). Returns RESIL_OK, RESIL_EINVAL (out NULL, i out of range),
 * RESIL_EMISUSE (NULL handle). Thread-safe. Since 0.2. */
RESIL_API resil_status resil_http_client_instance_stats_sized(const resil_http_client *c,
                                                              size_t i,
                                                              resil_http_instance_stats *out,
                                                              size_t struct_size);
#define resil_http_client_instance_stats(c, i, out)                            \
  resil_http_client_instance_stats_sized((c), (i), (out), sizeof(resil_http_instance_stats))

/* ---- logical calls ---------------------------------------------------- */

/* What the caller binds for one logical call. Pointers are read by
 * resil_http_request_new() and copied; nothing is kept. */
typedef struct resil_http_args {
  /* Set by resil_http_args_init() (version.h, "Sized structs"). */
  size_t struct_size;
  /* Values for the {placeholders} of the path, query and header templates.
   * Every placeholder needs one; extra entries are ignored. */
  const resil_http_param *params;
  size_t param_count;
  /* Extra query parameters appended after the template's (both name and
   * value percent-encoded). */
  const resil_http_param *query;
  size_t query_count;
  /* Extra request headers ("Name", "value"), after the endpoint's. Names
   * libresil owns (Content-Length, Content-Encoding, Transfer-Encoding,
   * Host, Expect, Connection, the idempotency header) are refused. */
  const resil_http_param *headers;
  size_t header_count;
  /* Request body: bytes (RAW) or JSON text (JSON codec). NULL with
   * body_len 0 sends an empty body on POST/PUT/PATCH and none otherwise. */
  const void *body;
  size_t body_len;
  /* JSON codec only: a JSON value serialised once (compact) instead of
   * body. Not kept. */
  const json_t *json;
  /* A caller-chosen idempotency key, sent as is on every attempt (any
   * endpoint); NULL generates one when the endpoint says
   * RESIL_HTTP_KEY_SEND. 1..255 visible ASCII characters. */
  const char *idempotency_key;
} resil_http_args;

/* Writes empty arguments and struct_size (a macro passing sizeof). NULL is
 * a no-op. Since 0.1 (sized since 0.2). */
RESIL_API void resil_http_args_init_sized(resil_http_args *args, size_t struct_size);
#define resil_http_args_init(args) resil_http_args_init_sized((args), sizeof(resil_http_args))

/* Builds a logical call: finds the endpoint, binds the parameters
 * (percent-encoding path and query values), serialises and, when
 * configured, gzips the body, and fixes the idempotency key (random 128-bit
 * hex from getrandom(), generated here once). args may be NULL (no
 * parameters). Returns RESIL_OK, RESIL_EINVAL (args not passed through
 * resil_http_args_init(), unknown endpoint, missing
 * placeholder value, CR/LF in a header value, a reserved header, a bad
 * key, a body on HEAD, a JSON value on a RAW endpoint; err says which),
 * RESIL_EMISUSE (NULL client),
 * RESIL_ENOMEM, RESIL_EIO (getrandom failed). Nothing is sent. Thread-safe.
 * Since 0.1. */
RESIL_API resil_status resil_http_request_new(resil_http_client *c,
                                              const char *endpoint,
                                              const resil_http_args *args,
                                              resil_http_request **out,
                                              resil_error *err);

/* ONE physical attempt of the logical call `req` (a resil_http_request *),
 * with the resil_call_fn signature so that it plugs into any policy:
 *
 *   resil_ctx ctx;
 *   resil_ctx_init(&ctx);
 *   ctx.flags = resil_http_request_call_flags(req);
 *   resil_ctx_set_timeout_ns(&ctx, 700 * 1000000LL);
 *   resil_outcome o = resil_retry_run(retry, &ctx, resil_http_request_attempt, req);
 *
 * ctx may be NULL (no deadline, no token); a ctx not passed through
 * resil_ctx_init() gives NOT_SENT(LOCAL_ERROR), nothing sent. The pool
 * lease, connect and
 * response timeouts are each clipped to the remaining deadline, read once
 * at the start; ctx->cancel aborts the transfer within about 10 ms;
 * ctx->attempt is logged and shown to interceptors. Returns the attempt's
 * outcome (see the top of this file); an invalid req gives
 * NOT_SENT(LOCAL_ERROR).
 *
 * Attempts of one request at once (a hedge: resil_hedge_run_on, a chain's
 * hedge layer): an attempt that had to wait for a pool connection is not
 * sent, and ends NOT_SENT(CANCELLED), when its token was set or another
 * attempt of the same request got an answer (ANSWERED, any status) while
 * it waited: that answer decides the call or hands it to the policy
 * around, and a request sent now would only repeat it (typically the
 * primary held the one connection the hedge waited for). Since 0.2.
 *
 * Abandoned attempts: each attempt writes into its own pool slot's
 * response and, when it ends, publishes it into the request under the
 * request's lock only if no later attempt of the same request has started
 * and the response has not been taken; otherwise its response is dropped.
 * Every running attempt holds a reference on the request (and the request
 * on its client), so resil_http_request_free() and resil_http_client_free()
 * may be called while an abandoned attempt still runs: the memory goes when
 * the last attempt ends. Since 0.1. */
RESIL_API resil_outcome resil_http_request_attempt(void *req,
                                                   const resil_ctx *ctx);

/* RESIL_CALL_IDEMPOTENT when the endpoint is idempotent, and
 * RESIL_CALL_STABLE_KEY when the call carries an idempotency key: the flags
 * a retry layer needs in ctx->flags. 0 for NULL. Since 0.1. */
RESIL_API uint32_t resil_http_request_call_flags(const resil_http_request *req);

/* The call's idempotency key (owned by req), or NULL when it sends none.
 * Since 0.1. */
RESIL_API const char *resil_http_request_idempotency_key(
    const resil_http_request *req);

/* Takes the response of the latest attempt that finished and published
 * (see resil_http_request_attempt), and stops any later publication: an
 * attempt still running afterwards drops its result. The caller owns the
 * result and frees it with resil_http_response_free(). Returns NULL when no
 * attempt has published (none made, all abandoned, or taken before) or out
 * of memory. Thread-safe. Since 0.1. */
RESIL_API resil_http_response *resil_http_request_take_response(
    resil_http_request *req);

/* Releases the caller's reference; attempts still running keep the memory
 * alive until they end. NULL is a no-op. Since 0.1. */
RESIL_API void resil_http_request_free(resil_http_request *req);

/* Convenience: one logical call. Builds the request, sets ctx->flags from
 * it (added to the caller's) and ctx->idempotency_key to the call's key
 * (for the retry's attempt listener), runs it through `retry`
 * (resil_retry_run) or, when retry is NULL, makes exactly one attempt (the
 * HTTP layer never retries by itself), takes the response into *out (may
 * be NULL: then the response is dropped) and frees the request. Policy
 * chains (breaker, time limiter, bulkhead) compose with
 * resil_http_request_attempt, or with resil_http_call_keyed(). A request
 * that cannot be built, or a ctx not passed through resil_ctx_init(),
 * returns NOT_SENT(LOCAL_ERROR) and, when out is not NULL, a response whose
 * resil_http_response_error() says why. Since 0.1. */
RESIL_API resil_outcome resil_http_call(resil_http_client *c,
                                        const char *endpoint,
                                        const resil_http_args *args,
                                        resil_retry *retry,
                                        const resil_ctx *ctx,
                                        resil_http_response **out);

/* ---- recovery after UNKNOWN (DESIGN §6) ------------------------------- */

/* Outcome flags of resil_http_call_keyed() (libresil-http uses 0x1000 to
 * 0x8000 of resil_outcome.flags; see outcome.h and chain.h for the rest). */
/* The answer is the operation's stored result, read from the status
 * endpoint after a write attempt whose own answer was lost: kind ANSWERED,
 * http_status the stored status; resil_http_response_recovered() is 1. */
#define RESIL_OF_RECOVERED 0x1000u
/* The status endpoint said PENDING and the wait for it ended (deadline,
 * pending_wait_max_ns or cancellation) before it said anything else. The
 * outcome stays UNKNOWN: the operation has been accepted and may still
 * commit. A chain fallback can answer RESIL_FALLBACK_PENDING on it. */
#define RESIL_OF_STATUS_PENDING 0x2000u
/* Since 0.2: the attempt ended UNKNOWN(CONNECTION_CLOSED) because a reused
 * keep-alive connection closed without a response and libcurl's hidden
 * re-send on a new connection was refused (resend_stale NEVER, or a request
 * that is not safe to re-send); counted in resends_prevented. */
#define RESIL_OF_RESEND_PREVENTED 0x4000u

/* What a status query said about the operation. */
typedef enum resil_http_op_state {
  RESIL_HTTP_OP_NONE = 0,      /* no status query was made               */
  /* 404, {"state":"UNKNOWN"}, or no usable answer (not sent, timed out,
   * rejected by a policy, another status, a body that is not the contract
   * below). Never "did not happen": only that the server could not say. */
  RESIL_HTTP_OP_UNKNOWN = 1,
  RESIL_HTTP_OP_PENDING = 2,   /* accepted, not finished                 */
  RESIL_HTTP_OP_COMMITTED = 3, /* finished; the stored result came back  */
  RESIL_HTTP_OP_FAILED = 4     /* {"state":"FAILED"}: it did not commit  */
} resil_http_op_state;

/* Longest idempotency key, without its NUL. */
#define RESIL_HTTP_MAX_KEY 255

/* What one resil_http_call_keyed() did, for the caller and for tests. An
 * out struct written up to the caller's size (version.h). */
typedef struct resil_http_recovery {
  size_t struct_size;        /* bytes the library wrote                  */
  uint32_t write_attempts;   /* attempts of the write, counted as the
                                retry counts them                        */
  uint32_t status_queries;   /* status queries made (or tried: one whose
                                request could not be built is a failed
                                query)                                   */
  uint32_t pending_answers;  /* ... answered PENDING                     */
  uint32_t unknown_answers;  /* ... answered 404, UNKNOWN or FAILED      */
  uint32_t failed_queries;   /* ... that got no usable answer            */
  resil_http_op_state state; /* what the last status query said (a failed
                                query after PENDING keeps PENDING)       */
  resil_outcome last_query;  /* outcome of the last status query's
                                attempt; kind 0 when none was made       */
  int64_t pending_wait_ns;   /* time slept waiting on PENDING            */
  /* Since 0.2: the call's idempotency key (the caller's, or the one
   * generated for the call), "" when it sent none: keep it to ask again
   * later with resil_http_operation_status(). */
  char idempotency_key[RESIL_HTTP_MAX_KEY + 1];
} resil_http_recovery;

/* One logical keyed write with the recovery flow. Builds the request as
 * resil_http_call() does (one idempotency key for every attempt), sets
 * ctx->flags and ctx->idempotency_key from it, and drives `retry` through
 * its split form (resil_retry_begin/next), sleeping between attempts on
 * ctx->clock; with retry NULL it makes one write attempt, never more.
 *
 * Policies (Since 0.2): `chain` (may be NULL) wraps every physical request
 * of the call, each write attempt and each status query alike: every one
 * is one resil_chain_run(chain, ...) of resil_http_request_attempt, so the
 * chain's breaker, rate limiter, bulkhead and time limiter see, count and
 * may refuse each of them (resil_chain_layer_stats: calls_in = writes +
 * status queries). The retry stays the `retry` argument, outside: it
 * decides the write attempts, and the status query of each comes before
 * the retry's next decision. A chain that could itself make more than one
 * attempt per run (a retry layer: resil_chain_amplification() attempts >
 * 1) is refused, NOT_SENT(LOCAL_ERROR) with nothing sent: it would re-send
 * a write before its status was asked. A write refused by a layer
 * (REJECTED) goes to the retry as any outcome; a status query refused by
 * one is a query without a usable answer.
 *
 * After each write attempt whose outcome class is in the client's
 * status_query_classes (default: UNKNOWN and 5xx), when the call carries an
 * idempotency key and the endpoint names a status_endpoint, it asks the
 * status endpoint (GET, bound with {key} = the call's key plus the call's
 * params and extra headers; its own logical call, within the same ctx
 * deadline and cancellation token) and acts on the answer:
 *
 *   200 {"state":"COMMITTED","status":S,"body":"..."}
 *   200 {"state":"COMMITTED","status":S,"body_base64":"..."}
 *       The operation is done: returns ANSWERED(S) with RESIL_OF_RECOVERED,
 *       and *out is a response with status S and the stored body (decoded
 *       as the write endpoint's response, its decoder hook applied), marked
 *       recovered. "body" is the body's bytes as a JSON string (NUL bytes
 *       included, as \u0000); "body_base64" (RFC 4648, what
 *       resil_idem_mhd sends for a body that is not UTF-8) is decoded and
 *       wins when both are present; an invalid base64 text is no usable
 *       answer. No further write is sent, whatever S is. An optional "key"
 *       member must equal the call's key.
 *   200 {"state":"PENDING"}
 *       Waits status_poll_ns (or the answer's Retry-After) and asks again,
 *       for at most pending_wait_max_ns from the first PENDING answer and
 *       never past the ctx deadline: it does not sleep when the wait would
 *       reach either. A query that fails meanwhile changes nothing and is
 *       repeated the same way. When the wait ends, the write's own outcome
 *       (UNKNOWN, or the 5xx) is returned with RESIL_OF_STATUS_PENDING and
 *       no write is re-sent: the server is still working on it. A retry
 *       records it as an attempt after which no time is left (stop
 *       DEADLINE, or MAX_ATTEMPTS when that came first; CANCELLED when the
 *       ctx token ended the wait).
 *   404, {"state":"UNKNOWN"}, {"state":"FAILED"}, or no usable answer
 *       Still UNKNOWN (a 404 is never "did not happen"). The write's own
 *       outcome goes to the retry policy, which decides as always (class,
 *       safety, attempts, deadline, budget) whether to re-send the write
 *       with the same key.
 *
 * Without a key, without a status endpoint, or with status_query_classes
 * 0, no status query is made and the call behaves as resil_http_call().
 * It never reports a success the server did not report: a success comes
 * only from a write's own answer or from a COMMITTED status.
 *
 * The final outcome is the retry's (resil_retry.h: stop, attempts, the
 * PRIOR_MAYBE_EXECUTED folding), counting write attempts only; without a
 * retry, the last attempt's, attempts 0. *out (may be NULL: dropped) is the
 * recovered response or the last write attempt's; either carries the
 * call's key (resil_http_response_idempotency_key). A request that cannot
 * be built gives NOT_SENT(LOCAL_ERROR) and a response saying why, as
 * resil_http_call(). An invalid retry handle, or a ctx not passed through
 * resil_ctx_init(), gives NOT_SENT(LOCAL_ERROR) with nothing sent. report
 * (may be NULL) is filled in every case, up to the caller's size (the
 * macro passes sizeof(resil_http_recovery)).
 *
 * Known limit of the retry's counters: a COMMITTED answer whose stored
 * status the retry would retry (a 5xx, or a predicate asking for it) ends
 * the call with stop NOT_RETRYABLE without being counted in
 * resil_retry_get_stats() (the split form has no way to end a call the
 * policy wanted to continue).
 *
 * Example (a payment that must not run twice, through the caller's
 * breaker and bulkhead):
 *
 *   static const resil_http_endpoint endpoints[] = {
 *       RESIL_HTTP_ENDPOINT(.name = "op_status", .path = "/operations/{key}",
 *                           .response_codec = RESIL_HTTP_CODEC_JSON),
 *       RESIL_HTTP_ENDPOINT(.name = "pay", .method = RESIL_HTTP_POST,
 *                           .path = "/payments",
 *                           .request_codec = RESIL_HTTP_CODEC_JSON,
 *                           .response_codec = RESIL_HTTP_CODEC_JSON,
 *                           .idempotency_key = RESIL_HTTP_KEY_SEND,
 *                           .status_endpoint = "op_status"),
 *   };
 *   ...
 *   resil_chain_add_breaker(chain, breaker);     // no retry layer here
 *   resil_chain_add_bulkhead(chain, bulkhead);
 *   resil_ctx ctx;
 *   resil_ctx_init(&ctx);
 *   resil_ctx_set_timeout_ns(&ctx, RESIL_S(2));
 *   resil_http_response *resp = NULL;
 *   resil_http_recovery rep;
 *   resil_outcome o = resil_http_call_keyed(client, "pay", &args, retry, chain,
 *                                           &ctx, &resp, &rep);
 *   if (resil_outcome_is_success(&o))
 *     ...  // paid: resp is the answer, live or stored
 *   else if (o.flags & RESIL_OF_STATUS_PENDING)
 *     ...  // accepted, outcome not known yet: keep rep.idempotency_key
 *   else if (resil_outcome_maybe_executed(&o))
 *     ...  // unknown: keep rep.idempotency_key, ask again later with
 *          // resil_http_operation_status()
 *   resil_http_response_free(resp);
 *
 * Thread-safety: thread-safe (the client may be shared; report and *out
 * belong to the caller). Blocks for the attempts, the queries and the
 * waits, all within the ctx deadline when it has one. Since 0.1 (chain and
 * the sized report since 0.2). */
RESIL_API resil_outcome resil_http_call_keyed_sized(resil_http_client *c,
                                                    const char *endpoint,
                                                    const resil_http_args *args,
                                                    resil_retry *retry,
                                                    resil_chain *chain,
                                                    const resil_ctx *ctx,
                                                    resil_http_response **out,
                                                    resil_http_recovery *report,
                                                    size_t report_size);
#define resil_http_call_keyed(c, endpoint, args, retry, chain, ctx, out, report) \
  resil_http_call_keyed_sized((c), (endpoint), (args), (retry), (chain), (ctx),   \
                              (out), (report), sizeof(resil_http_recovery))

/* Asks once what became of the operation with idempotency key `key`, made
 * earlier on endpoint `endpoint` (the write endpoint, which must name a
 * status_endpoint): the same status query resil_http_call_keyed() makes,
 * for an application that kept the key and asks again later (after a
 * restart, say). args (may be NULL) binds the status endpoint's other
 * placeholders and extra headers; its idempotency_key, query and body are
 * not used. chain (may be NULL; no retry layer, as for
 * resil_http_call_keyed) wraps the query. *state receives what the server
 * said (RESIL_HTTP_OP_UNKNOWN for no usable answer).
 *
 * Returns, for COMMITTED, the stored result's outcome (ANSWERED(S) with
 * RESIL_OF_RECOVERED, the write endpoint's decoder applied) and in *out
 * the stored result as the write endpoint's response (recovered); for any
 * other answer, the status query's own outcome and in *out its response.
 * NOT_SENT(LOCAL_ERROR) with *state RESIL_HTTP_OP_NONE and nothing sent
 * for: an unknown endpoint or one without a status endpoint, a key that
 * is not 1..255 visible ASCII characters, a chain with a retry layer, a
 * ctx not passed through resil_ctx_init(), state NULL (then *out is not
 * touched). out may be NULL. Reported to the client's on_attempt as a
 * status query (attempt 1, next_wait_ns -1). Thread-safe. Since 0.2. */
RESIL_API resil_outcome resil_http_operation_status(resil_http_client *c,
                                                    const char *endpoint,
                                                    const char *key,
                                                    const resil_http_args *args,
                                                    resil_chain *chain,
                                                    const resil_ctx *ctx,
                                                    resil_http_op_state *state,
                                                    resil_http_response **out);

/* ---- responses -------------------------------------------------------- */

/* Per-attempt facts. An out struct written up to the caller's size. */
typedef struct resil_http_info {
  size_t struct_size;     /* bytes the library wrote (version.h)            */
  uint32_t attempt;       /* ctx->attempt of the attempt that produced it   */
  uint32_t hops;          /* redirects followed within the attempt          */
  uint32_t resends;       /* hidden re-sends allowed within the attempt     */
  uint32_t connections;   /* sockets opened by the attempt                  */
  unsigned local_port;    /* local TCP port of the (last) connection, 0 if
                             none was made                                 */
  int reused_connection;  /* 1 when the request went on a pooled connection */
  int64_t lease_wait_ns;  /* waiting for a pool slot                        */
  int64_t connect_ns;     /* CURLINFO_CONNECT_TIME_T (0 when reused)        */
  int64_t first_byte_ns;  /* CURLINFO_STARTTRANSFER_TIME_T                  */
  int64_t total_ns;       /* the whole attempt, lease included              */
} resil_http_info;

/* The outcome of the attempt that produced the response. When a time
 * limiter gave up on that attempt, the chain reports its own timeout while
 * this says what the transfer ended with. Since 0.1. */
RESIL_API resil_outcome resil_http_response_outcome(const resil_http_response *r);
/* HTTP status of the final response (after redirects), 0 when none came
 * back. Since 0.1. */
RESIL_API int resil_http_response_status(const resil_http_response *r);
/* Body bytes (decoded from Content-Encoding), NUL-terminated for
 * convenience (the NUL is not counted); owned by r. *len may be NULL.
 * Never NULL for a valid response ("" when empty). Since 0.1. */
RESIL_API const void *resil_http_response_body(const resil_http_response *r,
                                               size_t *len);
/* The decoded body of a JSON endpoint, owned by r (json_incref to keep it
 * longer); NULL for a RAW endpoint, an empty or undecodable body. Since 0.1. */
RESIL_API json_t *resil_http_response_json(const resil_http_response *r);
/* 1 when the response carries no content: 204, 205, 304, or an empty body
 * (unless the endpoint sets empty_is_error). Since 0.1. */
RESIL_API int resil_http_response_is_empty(const resil_http_response *r);
/* Why the JSON body could not be decoded (jansson's message with line and
 * column), or NULL when it was (or nothing needed decoding). Since 0.1. */
RESIL_API const char *resil_http_response_decode_error(const resil_http_response *r);
/* libcurl's or libresil's message for a failed attempt (e.g. "Failed to
 * connect to 127.0.0.1 port 9: Connection refused"), or NULL. Since 0.1. */
RESIL_API const char *resil_http_response_error(const resil_http_response *r);
/* Since 0.2. The index of the instance the attempt that produced the
 * response went to (resil_http_client_instance_stats), or -1 when it chose
 * none (ended before: no time left, cancelled, no instance known). */
RESIL_API int resil_http_response_instance(const resil_http_response *r);
/* Value of the final response's header `name` (case-insensitive; the first
 * one when repeated), NULL when absent. Owned by r. Since 0.1. */
RESIL_API const char *resil_http_response_header(const resil_http_response *r,
                                                 const char *name);
/* Fills *out up to the caller's size (a macro passing sizeof). Returns
 * RESIL_OK or RESIL_EINVAL (NULL). Since 0.1 (sized since 0.2). */
RESIL_API resil_status resil_http_response_info_sized(const resil_http_response *r,
                                                      resil_http_info *out,
                                                      size_t struct_size);
#define resil_http_response_info(r, out)                                       \
  resil_http_response_info_sized((r), (out), sizeof(resil_http_info))
/* 1 when the response is an operation's stored result read from the
 * status endpoint by resil_http_call_keyed() (its outcome carries
 * RESIL_OF_RECOVERED; it has no headers, and its info describes the status
 * query with info.attempt the write attempt it recovered), 0 otherwise or
 * for NULL. Since 0.1. */
RESIL_API int resil_http_response_recovered(const resil_http_response *r);
/* The idempotency key of the call that produced the response (the
 * caller's, or the one generated for the call: keep it to ask again later
 * with resil_http_operation_status()), owned by r; NULL when the call sent
 * none, or for NULL. Since 0.2. */
RESIL_API const char *resil_http_response_idempotency_key(const resil_http_response *r);
/* NULL is a no-op. Since 0.1. */
RESIL_API void resil_http_response_free(resil_http_response *r);

#ifdef __cplusplus
}
#endif
#endif
