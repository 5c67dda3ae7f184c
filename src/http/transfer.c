/* One physical attempt on a libcurl easy handle, the rules written once for
 * the blocking pool (request.c, slot.c) and the async engine (src/engine):
 * the options that never change and the callbacks that watch every request
 * libcurl puts on the wire (the refusal of hidden re-sends), the per-attempt
 * options (URL, method, headers, timeouts from the deadline), the
 * classification of a finished transfer into an outcome, decoding, the
 * response info and counters, and redacted logging. How the transfer is
 * driven (a slot's own multi handle polled by the calling thread, or the
 * engine's multi_socket handle) is the caller's.
 *
 * Hidden re-sends. In libcurl 7.88, Curl_retry_request() (lib/transfer.c)
 * decides to send the same request again on a fresh connection when
 *   - the request went out on a reused connection (conn->bits.reuse), and
 *   - not a single response byte came back (bytecount + headerbytecount
 *     == 0), for HTTP even when no body was expected;
 * up to CONN_MAX_RETRIES (5) times. lib/multi.c calls it in two places:
 * in MSTATE_PERFORMING when the transfer ends "done" or with
 * CURLE_RECV_ERROR (the server closed the kept-alive connection after
 * reading the request), and in MSTATE_DO when sending fails with
 * CURLE_SEND_ERROR on a reused connection. The state machine then goes
 * back to MSTATE_CONNECT (Curl_follow with FOLLOW_RETRY) and the transfer
 * reports success if the second request is answered. A body set with
 * CURLOPT_POSTFIELDS needs no rewind and goes out again as is; a body from
 * CURLOPT_READFUNCTION is rewound (state.rewindbeforesend, Curl_readrewind
 * calling CURLOPT_SEEKFUNCTION) only when body bytes had been written. So
 * a POST that the server executed before closing the connection is
 * executed twice, and an empty POST or a GET is re-sent without any
 * callback being asked. Other re-sends in 7.88 (HTTP/2 REFUSED_STREAM, the
 * CURLE_HTTP2_STREAM "Downgrades to HTTP/1.1" retry in MSTATE_PERFORMING,
 * a 417 answer to Expect: 100-continue, multi-pass authentication) are
 * switched off by the options below (HTTP/1.1 only, no Expect header, no
 * negotiated authentication), and would be caught below all the same.
 *
 * Every request libcurl sends passes MSTATE_DO, which calls
 * CURLOPT_PREREQFUNCTION right before the request is sent; every new
 * connection opens a socket through CURLOPT_OPENSOCKETFUNCTION. A second
 * request in one transfer that does not follow a redirect answer, or a
 * socket opened after a request that got no response byte, is a hidden
 * re-send: refused (CURL_PREREQFUNC_ABORT or CURL_SOCKET_BAD), or allowed
 * once and counted when the call is safe to repeat and the client says
 * RESIL_HTTP_RESEND_IF_SAFE. (libcurl 8.16 added CURLOPT_FORBID_RETRY_ON_REUSE
 * for the same purpose; 7.88 has no such option.) */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

#include "transfer.h"

#define ieq resil__http_ieq

static const char empty_body[1] = "";

/* libcurl's own Accept line, sent from the list with c->ua_line. */
static char accept_any[] = "Accept: */*";

static int ieq_prefix(const char *s, size_t n, const char *lower) {
  size_t k = strlen(lower);
  if (n < k) return 0;
  for (size_t i = 0; i < k; i++) {
    int c = (unsigned char)s[i];
    if (c >= 'A' && c <= 'Z') c += 32;
    if (c != lower[i]) return 0;
  }
  return 1;
}

static size_t on_header(char *buf, size_t size, size_t nitems, void *ud) {
  http_slot *s = ud;
  http_xfer *x = &s->x;
  size_t n = size * nitems;
  x->got_bytes = 1;
  resil_http_response *r = x->res;
  if (n >= 12 && (buf[0] | 32) == 'h' && ieq_prefix(buf, n, "http/")) {
    /* A new status line: 1xx, a redirect, or the final response. Only the
     * headers after the last status line are kept. */
    size_t i = 5;
    while (i < n && buf[i] != ' ') i++;
    int code = 0;
    if (i + 3 < n && buf[i] == ' ') {
      for (size_t k = i + 1; k < i + 4; k++) {
        if (buf[k] < '0' || buf[k] > '9') {
          code = 0;
          break;
        }
        code = code * 10 + (buf[k] - '0');
      }
    }
    x->last_status = code;
    r->status = code;
    r->hdr.len = 0;
    if (r->hdr.p) r->hdr.p[0] = '\0';
    x->hdr_bytes = 0;
    x->retry_after_at = 0;
    return n;
  }
  x->hdr_bytes += n;
  /* Keep at most 256 KiB of headers; more are read but not stored. */
  if (x->hdr_bytes > (256u << 10)) return n;
  long stored = resil__http_response_add_line(r, buf, n);
  if (stored < 0) return 0; /* out of memory: abort the transfer (CURLE_WRITE_ERROR) */
  /* Noted as it is stored, so that attempt_end finds the entry that
   * resil_http_response_header(res, "retry-after") would return without
   * scanning every header again. */
  if (stored && !x->retry_after_at) {
    const char *h = r->hdr.p + stored - 1;
    if ((h[0] | 32) == 'r' && strlen(h) == 11 && ieq(h, 11, "retry-after", 11))
      x->retry_after_at = (size_t)stored;
  }
  return n;
}

static size_t on_body(char *buf, size_t size, size_t nitems, void *ud) {
  http_slot *s = ud;
  http_xfer *x = &s->x;
  size_t n = size * nitems;
  resil_http_response *r = x->res;
  if (r->body.len + n > x->max_body) {
    x->too_large = 1;
    return 0;
  }
  if (resil__http_buf_append(x->tp->alloc, &r->body, buf, n) != 0) return 0;
  return n;
}

/* A hidden re-send is about to happen: may it? Counts it when it may. */
static int resend_allowed(http_xfer *x) {
  if (x->resend_ok && x->resends == 0) return 1;
  x->resend_refused = 1;
  return 0;
}

/* 1 when url's origin ("scheme://host:port", as client.c keys origins)
 * is not `origin`; a URL that cannot be parsed counts as another origin. */
static int other_origin(const char *url, const char *origin) {
  CURLU *u = curl_url();
  char *scheme = NULL, *host = NULL, *port = NULL;
  int other = 1;
  if (u && url && curl_url_set(u, CURLUPART_URL, url, 0) == CURLUE_OK &&
      curl_url_get(u, CURLUPART_SCHEME, &scheme, 0) == CURLUE_OK &&
      curl_url_get(u, CURLUPART_HOST, &host, 0) == CURLUE_OK &&
      curl_url_get(u, CURLUPART_PORT, &port, CURLU_DEFAULT_PORT) == CURLUE_OK) {
    char key[320];
    int n = snprintf(key, sizeof key, "%s://%s:%s", scheme, host, port);
    if (n > 0 && (size_t)n < sizeof key) {
      for (char *p = key; *p; p++)
        if (*p >= 'A' && *p <= 'Z') *p = (char)(*p + 32);
      other = strcmp(key, origin) != 0;
    }
  }
  curl_free(scheme);
  curl_free(host);
  curl_free(port);
  curl_url_cleanup(u);
  return other;
}

/* Takes every header the redactor treats as secret (log.c,
 * resil__http_secret_header) out of the attempt's header list before
 * libcurl builds the next request: the list is the slot's own nodes, which
 * libcurl reads again for every request it sends. The first node stays the
 * list's head, so a secret there becomes a removal line ("Name:" with no
 * value) for a header nobody sends. */
static void withhold_secrets(http_slot *s) {
  static char placeholder[] = "X-Resil-Withheld:";
  struct curl_slist *prev = NULL;
  for (struct curl_slist *n = s->has_nodes ? s->nodes : NULL; n; n = n->next) {
    size_t nl = strcspn(n->data, ":;");
    if (!resil__http_secret_header(n->data, nl)) {
      prev = n;
    } else if (!prev) {
      n->data = placeholder;
      prev = n;
    } else {
      prev->next = n->next;
    }
  }
}

/* Writes the value of the slot's deadline header line: the time left at
 * `now` until the call's deadline, in gRPC's grammar rounded down
 * (core/timeout_hdr.h). */
static void write_budget(http_slot *s, int64_t now) {
  const http_xfer *x = &s->x;
  resil__timeout_format(x->budget_end - now, s->dl_line + x->tp->dl_header_len + 2);
}

static int on_prereq(void *ud, char *conn_primary_ip, char *conn_local_ip,
                     int conn_primary_port, int conn_local_port) {
  (void)conn_primary_ip;
  (void)conn_local_ip;
  (void)conn_primary_port;
  http_slot *s = ud;
  http_xfer *x = &s->x;
  if (x->prereqs > 0) {
    int hop = x->follow && x->got_bytes && x->last_status >= 300 && x->last_status < 400;
    if (hop) {
      x->hops++;
      /* Secrets go to the origin they were written for, not to whatever
       * origin a Location names (once withheld, for the rest of the
       * attempt). */
      char *url = NULL;
      if (!x->withheld && (curl_easy_getinfo(s->e, CURLINFO_EFFECTIVE_URL, &url) != CURLE_OK ||
                           other_origin(url, x->origin))) {
        withhold_secrets(s);
        x->withheld = 1;
      }
    } else {
      if (!resend_allowed(x)) return CURL_PREREQFUNC_ABORT;
      x->resends++;
    }
  }
  x->prereqs++;
  x->got_bytes = 0;
  x->local_port = conn_local_port > 0 ? (unsigned)conn_local_port : 0;
  int64_t now = resil__http_mono_ns();
  x->resp_deadline = resil__sat_add(now, x->response_timeout_ns);
  /* libcurl builds the request from the list after this callback: the
   * budget it carries is the one left now, after connecting, the lease
   * wait and any backoff, and again for each redirect hop. */
  if (x->budget_end != INT64_MAX) write_budget(s, now);
  if (x->on_sent) x->on_sent(x->on_sent_arg);
  return CURL_PREREQFUNC_OK;
}

static curl_socket_t on_opensocket(void *ud, curlsocktype purpose,
                                   struct curl_sockaddr *addr) {
  (void)purpose;
  http_slot *s = ud;
  http_xfer *x = &s->x;
  /* A connection opened after a request that got no response byte can
   * only carry a re-send of that request. Refusing it here means the
   * server does not even see a new connection. */
  if (x->prereqs > 0 && !x->got_bytes && !resend_allowed(x)) return CURL_SOCKET_BAD;
  curl_socket_t fd = socket(addr->family, addr->socktype | SOCK_CLOEXEC, addr->protocol);
  /* libcurl keeps no errno of a failed socket(): the last one's is kept. */
  if (fd != CURL_SOCKET_BAD) {
    x->sockets++;
    x->sock_errno = 0;
  } else {
    x->sock_errno = errno;
  }
  return fd;
}

int resil__http_easy_setup(const resil_http_client *cl, http_slot *s, long maxconnects) {
  const http_transport *c = resil__http_tpc(cl);
  s->e = curl_easy_init();
  if (!s->e) return -1;
  CURL *e = s->e;
  CURLcode rc = CURLE_OK;
#define SET(opt, val)                                                          \
  do {                                                                         \
    if (rc == CURLE_OK) rc = curl_easy_setopt(e, opt, val);                    \
  } while (0)
  SET(CURLOPT_NOSIGNAL, 1L);
  SET(CURLOPT_PRIVATE, (void *)s);
  SET(CURLOPT_ERRORBUFFER, s->errbuf);
  SET(CURLOPT_WRITEFUNCTION, on_body);
  SET(CURLOPT_WRITEDATA, (void *)s);
  SET(CURLOPT_HEADERFUNCTION, on_header);
  SET(CURLOPT_HEADERDATA, (void *)s);
  SET(CURLOPT_PREREQFUNCTION, on_prereq);
  SET(CURLOPT_PREREQDATA, (void *)s);
  SET(CURLOPT_OPENSOCKETFUNCTION, on_opensocket);
  SET(CURLOPT_OPENSOCKETDATA, (void *)s);
  SET(CURLOPT_PROTOCOLS_STR, "http,https");
  SET(CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
  /* HTTP/1.1 only: no HTTP/2 REFUSED_STREAM re-sends, one request per
   * connection at a time. */
  SET(CURLOPT_HTTP_VERSION, (long)CURL_HTTP_VERSION_1_1);
  SET(CURLOPT_HTTP09_ALLOWED, 0L);
  SET(CURLOPT_NETRC, (long)CURL_NETRC_IGNORED);
  /* "" disables proxies even when http_proxy and friends are set. */
  SET(CURLOPT_PROXY, c->proxy ? c->proxy : "");
  /* Basic authentication (from userinfo in the base URL) needs no second
   * request; negotiated schemes would. */
  SET(CURLOPT_HTTPAUTH, (long)CURLAUTH_BASIC);
  SET(CURLOPT_PROXYAUTH, (long)CURLAUTH_BASIC);
  SET(CURLOPT_FOLLOWLOCATION, (long)c->follow_redirects);
  SET(CURLOPT_MAXREDIRS, (long)c->max_redirects);
  if (c->response_decompression) SET(CURLOPT_ACCEPT_ENCODING, "");
  SET(CURLOPT_SSL_VERIFYPEER, (long)c->verify_peer);
  SET(CURLOPT_SSL_VERIFYHOST, c->verify_peer ? 2L : 0L);
  if (c->ca_file) SET(CURLOPT_CAINFO, c->ca_file);
  /* The User-Agent and Accept-Encoding lines go at the head of the
   * attempt's header list when they can (c->ua_line, link_headers):
   * libcurl 7.88 formats them anew for every request from
   * CURLOPT_USERAGENT and CURLOPT_ACCEPT_ENCODING (an aprintf of 1400 to
   * 2300 instructions each, twice per transfer), a list line it copies.
   * The request is the same on the wire, lines and order, and a header of
   * that name from the request or an interceptor replaces each, as it
   * replaces libcurl's own. CURLOPT_ACCEPT_ENCODING stays set: it is what
   * turns decoding on. With a proxy, CURLOPT_USERAGENT, which libcurl also
   * puts in a CONNECT. */
  if (!c->ua_line) SET(CURLOPT_USERAGENT, c->user_agent);
  /* No proxy at all: the no_proxy environment variables cannot matter, and
   * an explicit empty list spares libcurl two getenv() scans of the
   * environment per transfer. */
  if (!c->proxy) SET(CURLOPT_NOPROXY, "");
  if (maxconnects > 0) SET(CURLOPT_MAXCONNECTS, maxconnects);
  SET(CURLOPT_TCP_NODELAY, 1L);
#undef SET
  if (rc != CURLE_OK) {
    curl_easy_cleanup(s->e);
    s->e = NULL;
    return -1;
  }
  s->method_set = -1;
  s->connect_to_set = -1;
  s->timeout_set = -1;
  /* The deadline header's name, once: each attempt writes only the value
   * (on_prereq). */
  if (c->dl_header) {
    memcpy(s->dl_line, c->dl_header, c->dl_header_len);
    memcpy(s->dl_line + c->dl_header_len, ": 0n", 5);
  }
  /* A new handle sends no custom headers. */
  s->headers_set = NULL;
  s->headers_known = 1;
  return 0;
}

static long ceil_ms(int64_t ns) {
  if (ns <= 0) return 1;
  int64_t ms = (ns + RESIL_NS_PER_MS - 1) / RESIL_NS_PER_MS;
  return ms > (int64_t)0x7fffffff ? 0x7fffffffL : (long)ms;
}


static RESIL_HTTP_COLD void set_error(resil_http_response *r, const char *fmt,
                                      const char *detail) {
  snprintf(r->error, sizeof r->error, fmt, detail);
  r->has_error = 1;
}

/* The errno of a limit of this process or host, not of the upstream: no
 * descriptor (EMFILE: the process's RLIMIT_NOFILE; ENFILE: the system's
 * table), no buffer or memory for a socket, no free local address or port
 * (EADDRNOTAVAIL: the ephemeral ports are used up). NULL for any other. */
static const char *local_limit(long e) {
  switch (e) {
  case EMFILE: return "EMFILE (too many open files in this process)";
  case ENFILE: return "ENFILE (too many open files in the system)";
  case ENOBUFS: return "ENOBUFS (no buffer space for a socket)";
  case ENOMEM: return "ENOMEM (no memory for a socket)";
  case EADDRNOTAVAIL: return "EADDRNOTAVAIL (no free local address or port)";
  default: return NULL;
  }
}

/* classify() for every transfer but one that libcurl finished without an
 * error, nothing refused or aborted. */
static RESIL_HTTP_COLD resil_outcome classify_rest(http_slot *s, int aborted, CURLcode rc,
                                                   resil_http_response *res,
                                                   const http_transport *c) {
  http_xfer *x = &s->x;
  int sent = x->prereqs > 0;
  if (x->resend_refused) {
    set_error(res, "%s", "the reused keep-alive connection closed without a response; "
                         "libcurl's hidden re-send on a new connection was refused");
    resil_outcome o = resil_outcome_make(RESIL_UNKNOWN, RESIL_REASON_CONNECTION_CLOSED);
    o.flags |= RESIL_OF_RESEND_PREVENTED;
    return o;
  }
  switch (aborted) {
  case ABORT_CANCEL:
    set_error(res, "%s", "cancelled");
    return resil_outcome_make(sent ? RESIL_UNKNOWN : RESIL_NOT_SENT, RESIL_REASON_CANCELLED);
  case ABORT_DEADLINE:
  case ABORT_RESPONSE:
    set_error(res, "%s", aborted == ABORT_DEADLINE ? "deadline reached" : "response timeout");
    return sent ? resil_outcome_make(RESIL_UNKNOWN, RESIL_REASON_TIMEOUT)
                : resil_outcome_make(RESIL_NOT_SENT, RESIL_REASON_CONNECT_TIMEOUT);
  case ABORT_LOCAL:
    set_error(res, "%s", "libcurl multi interface failure");
    return sent ? resil_outcome_make(RESIL_UNKNOWN, RESIL_REASON_CONNECTION_CLOSED)
                : resil_outcome_make(RESIL_NOT_SENT, RESIL_REASON_LOCAL_ERROR);
  default:
    break;
  }
  if (rc == CURLE_OK) return resil_outcome_http(x->last_status);
  set_error(res, "%s", s->errbuf[0] ? s->errbuf : curl_easy_strerror(rc));
  /* The last hop was a complete redirect answer that was not followed. */
  if (rc == CURLE_TOO_MANY_REDIRECTS && x->last_status >= 300 && x->last_status < 400)
    return resil_outcome_http(x->last_status);
  /* A complete redirect answer whose Location libresil does not follow (a
   * protocol other than http and https, or no URL at all): nothing more
   * was sent, and the answer stands. Only the scheme is quoted: the rest
   * of a URL may carry credentials. */
  if ((rc == CURLE_UNSUPPORTED_PROTOCOL || rc == CURLE_URL_MALFORMAT) && x->follow &&
      x->got_bytes && x->last_status >= 300 && x->last_status < 400) {
    const char *loc = resil_http_response_header(res, "location");
    size_t sl = loc ? strspn(loc, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789+.-")
                    : 0;
    if (loc && loc[sl] == ':' && sl <= 16)
      snprintf(res->error, sizeof res->error,
               "redirect to a %.*s: URL refused (only http and https are followed); the %d "
               "answer is returned",
               (int)sl, loc, x->last_status);
    else
      snprintf(res->error, sizeof res->error,
               "redirect not followed: its Location is not a URL libresil follows; the %d "
               "answer is returned",
               x->last_status);
    return resil_outcome_http(x->last_status);
  }
  if (x->too_large) {
    snprintf(res->error, sizeof res->error, "response body larger than max_response_bytes (%zu)",
             c->max_response_bytes);
    return resil_outcome_make(RESIL_UNKNOWN, RESIL_REASON_RESPONSE_TOO_LARGE);
  }
  long oserr = 0;
  curl_easy_getinfo(s->e, CURLINFO_OS_ERRNO, &oserr);
  switch (rc) {
  case CURLE_COULDNT_RESOLVE_HOST:
  case CURLE_COULDNT_RESOLVE_PROXY:
    return resil_outcome_make(RESIL_NOT_SENT, RESIL_REASON_DNS);
  case CURLE_COULDNT_CONNECT:
    if (!sent) {
      /* A local limit (socket() or connect() failed for this host's or
       * process's resources) says nothing of the upstream: REJECTED, which
       * no breaker counts (outcome.h, LOCAL_RESOURCES). */
      const char *lim = local_limit(x->sock_errno);
      if (!lim) lim = local_limit(oserr);
      if (lim) {
        set_error(res, "local resource limit, the upstream was not contacted: %s", lim);
        return resil_outcome_make(RESIL_REJECTED, RESIL_REASON_LOCAL_RESOURCES);
      }
      return resil_outcome_make(RESIL_NOT_SENT, oserr == ETIMEDOUT ? RESIL_REASON_CONNECT_TIMEOUT
                                                                   : RESIL_REASON_CONNECT_REFUSED);
    }
    break;
  case CURLE_OPERATION_TIMEDOUT:
    return sent ? resil_outcome_make(RESIL_UNKNOWN, RESIL_REASON_TIMEOUT)
                : resil_outcome_make(RESIL_NOT_SENT, RESIL_REASON_CONNECT_TIMEOUT);
  default:
    break;
  }
  if (!sent) return resil_outcome_make(RESIL_NOT_SENT, RESIL_REASON_LOCAL_ERROR);
  return resil_outcome_make(RESIL_UNKNOWN, oserr == ECONNRESET ? RESIL_REASON_CONNECTION_RESET
                                                               : RESIL_REASON_CONNECTION_CLOSED);
}

/* The outcome of the transfer libcurl finished with rc, or that was ended
 * by `aborted`; the reason in res->error when it failed. */
static inline resil_outcome classify(http_slot *s, int aborted, CURLcode rc,
                                     resil_http_response *res, const http_transport *c) {
  if (RESIL_LIKELY(rc == CURLE_OK && aborted == ABORT_NONE && !s->x.resend_refused))
    return resil_outcome_http(s->x.last_status);
  return classify_rest(s, aborted, rc, res, c);
}

void resil__http_decode(const http_endpoint *ep, resil_http_response *r, resil_outcome *o) {
  int st = r->status;
  int no_content = st == 204 || st == 205 || st == 304;
  int ok2xx = st >= 200 && st < 300;
  if (no_content || r->body.len == 0) {
    if (ep->resp_codec == RESIL_HTTP_CODEC_JSON && ep->empty_is_error && !no_content && ok2xx) {
      snprintf(r->decode_error, sizeof r->decode_error, "empty body");
      r->has_decode_error = 1;
      resil_outcome d = resil_outcome_make(RESIL_ANSWERED, RESIL_REASON_DECODE);
      d.http_status = st;
      *o = d;
      return;
    }
    r->empty = 1;
    return;
  }
  if (ep->resp_codec != RESIL_HTTP_CODEC_JSON) return;
  json_error_t je;
  /* Valid JSON may hold NUL bytes in strings (\u0000): json_string_length
   * gives them all. */
  r->json = json_loadb(r->body.p, r->body.len, JSON_DECODE_ANY | JSON_ALLOW_NUL, &je);
  if (r->json) return;
  snprintf(r->decode_error, sizeof r->decode_error, "invalid JSON at line %d column %d: %.120s",
           je.line, je.column, je.text);
  r->has_decode_error = 1;
  /* Only a success that cannot be read is a decode failure: an error page
   * that is not JSON stays the error status it is. */
  if (ok2xx) {
    resil_outcome d = resil_outcome_make(RESIL_ANSWERED, RESIL_REASON_DECODE);
    d.http_status = st;
    *o = d;
  }
}

/* ---- logging ------------------------------------------------------------------------ */

static void emit(const http_transport *c, http_slot *s, resil_http_log_level lv) {
  resil__http_log_emit(c->alloc, c->log_fn, c->log_user, lv, &s->log);
}

static void log_puts(const http_transport *c, http_slot *s, const char *t) {
  (void)resil__http_buf_puts(c->alloc, &s->log, t);
}

/* Appends a header line "  Name: value", redacted (log.c). */
static void log_header(const http_transport *c, http_slot *s, const char *name,
                       size_t nl, const char *value) {
  (void)resil__http_log_header(c->alloc, &s->log, name, nl, value, strlen(value));
}

static void log_body(const http_transport *c, http_slot *s, const char *body, size_t len,
                     int gzipped) {
  char tmp[64];
  if (gzipped) {
    snprintf(tmp, sizeof tmp, "  [gzip body, %zu bytes]", len);
    log_puts(c, s, tmp);
    return;
  }
  log_puts(c, s, "  ");
  size_t from = s->log.len;
  (void)resil__http_redact_body(c->alloc, &s->log, body, len, 4096);
  for (size_t i = from; i < s->log.len; i++) {
    unsigned char ch = (unsigned char)s->log.p[i];
    if (ch == '\r' || ch == '\n' || ch == '\t') s->log.p[i] = ' ';
    else if (ch < 0x20 || ch == 0x7f) s->log.p[i] = '.';
  }
}

static RESIL_HTTP_COLD void log_request(const http_transport *c, http_slot *s,
                        const resil_http_request *req, uint32_t attempt) {
  char tmp[96];
  log_puts(c, s, "--> ");
  log_puts(c, s, resil__http_method_name(req->ep->method));
  log_puts(c, s, " ");
  (void)resil__http_redact_url(c->alloc, &s->log, s->inst ? s->ubuf.p : req->url);
  snprintf(tmp, sizeof tmp, " endpoint=%s attempt=%u", req->ep->name, attempt);
  log_puts(c, s, tmp);
  emit(c, s, RESIL_HTTP_LOG_BASIC);
  if (c->log_level < RESIL_HTTP_LOG_HEADERS) return;
  for (const struct curl_slist *n = s->has_nodes ? s->nodes : NULL; n; n = n->next) {
    /* The lines that stand for libcurl's own, which are not logged. */
    if (n->data == c->ua_line || n->data == accept_any || n->data == c->ae_line) continue;
    const char *colon = strchr(n->data, ':');
    const char *semi = strchr(n->data, ';');
    if (!colon && semi) colon = semi;
    if (!colon) continue;
    const char *v = colon + 1;
    while (*v == ' ') v++;
    log_header(c, s, n->data, (size_t)(colon - n->data), v);
    emit(c, s, RESIL_HTTP_LOG_HEADERS);
  }
  if (c->log_level < RESIL_HTTP_LOG_FULL || !req->has_body) return;
  int gz = 0;
  for (uint32_t i = 0; i < req->nhdrs; i++)
    if (ieq(req->hdr_store + req->hdr_offs[i], req->hdr_nlen[i], "content-encoding", 16)) gz = 1;
  log_body(c, s, req->body ? (const char *)req->body : "", req->body_len, gz);
  emit(c, s, RESIL_HTTP_LOG_FULL);
}

static RESIL_HTTP_COLD void log_result(const http_transport *c, http_slot *s,
                                       const resil_http_request *req,
                       const resil_http_response *r, uint32_t attempt) {
  char ob[96], tmp[320];
  resil_outcome_format(&r->outcome, ob, sizeof ob);
  double ms = (double)r->info.total_ns / 1e6;
  if (c->log_level == RESIL_HTTP_LOG_METADATA) {
    snprintf(tmp, sizeof tmp, "method=%s endpoint=%s status=%d duration_ms=%.3f outcome=%s attempt=%u",
             resil__http_method_name(req->ep->method), req->ep->name, r->status, ms, ob, attempt);
    log_puts(c, s, tmp);
    emit(c, s, RESIL_HTTP_LOG_METADATA);
    return;
  }
  if (r->status)
    snprintf(tmp, sizeof tmp, "<-- %d endpoint=%s attempt=%u outcome=%s (%.3f ms)", r->status,
             req->ep->name, attempt, ob, ms);
  else
    snprintf(tmp, sizeof tmp, "<-- no response endpoint=%s attempt=%u outcome=%s (%.3f ms)",
             req->ep->name, attempt, ob, ms);
  log_puts(c, s, tmp);
  emit(c, s, RESIL_HTTP_LOG_BASIC);
  if (c->log_level < RESIL_HTTP_LOG_HEADERS || !s->e) return;
  const char *p = r->hdr.p, *end = r->hdr.p ? r->hdr.p + r->hdr.len : NULL;
  while (p && p < end) {
    size_t kl = strlen(p);
    const char *v = p + kl + 1;
    log_header(c, s, p, kl, v);
    emit(c, s, RESIL_HTTP_LOG_HEADERS);
    p = v + strlen(v) + 1;
  }
  if (c->log_level < RESIL_HTTP_LOG_FULL || r->body.len == 0) return;
  log_body(c, s, r->body.p, r->body.len, 0);
  emit(c, s, RESIL_HTTP_LOG_FULL);
}

void resil__http_count_outcome(resil_http_client *cl, const resil_outcome *o) {
  http_transport *c = resil__http_tp(cl);
  unsigned k = (unsigned)o->kind;
  if (k < 5) atomic_fetch_add_explicit(&c->st_outcomes[k], 1, memory_order_relaxed);
  if (o->kind == RESIL_ANSWERED && o->reason == RESIL_REASON_DECODE)
    atomic_fetch_add_explicit(&c->st_decode_errors, 1, memory_order_relaxed);
}


/* set_method() for a handle that needs an option set: key (method and
 * whether a body goes) is not what it has, or a body goes. */
static RESIL_HTTP_OUTLINE CURLcode set_method_opts(http_slot *s, const resil_http_request *req,
                                                   int key) {
  CURL *e = s->e;
  CURLcode rc = CURLE_OK;
#define SETM(opt, val)                                                         \
  do {                                                                         \
    if (rc == CURLE_OK) rc = curl_easy_setopt(e, opt, val);                    \
  } while (0)
  resil_http_method m = req->ep->method;
  if (s->method_set != key) {
    s->method_set = -1;
    SETM(CURLOPT_NOBODY, 0L);
    if (m == RESIL_HTTP_HEAD) {
      SETM(CURLOPT_POSTFIELDS, (char *)NULL);
      SETM(CURLOPT_NOBODY, 1L);
      SETM(CURLOPT_CUSTOMREQUEST, (char *)NULL);
    } else if (req->has_body) {
      SETM(CURLOPT_POST, 1L);
      SETM(CURLOPT_CUSTOMREQUEST, m == RESIL_HTTP_POST ? NULL : resil__http_method_name(m));
    } else {
      SETM(CURLOPT_POSTFIELDS, (char *)NULL);
      SETM(CURLOPT_HTTPGET, 1L);
      SETM(CURLOPT_CUSTOMREQUEST, m == RESIL_HTTP_GET ? NULL : resil__http_method_name(m));
    }
    if (rc == CURLE_OK) s->method_set = key;
  }
  if (req->has_body) {
    SETM(CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)req->body_len);
    SETM(CURLOPT_POSTFIELDS, req->body ? (const char *)req->body : empty_body);
  }
#undef SETM
  return rc;
}

/* Sets the method and body, skipping what the handle already has. Returns
 * nonzero when libcurl refused (out of memory): the handle then must not
 * be used for this request. */
static inline CURLcode set_method(http_slot *s, const resil_http_request *req) {
  int key = (int)req->ep->method * 2 + (req->has_body ? 1 : 0);
  if (s->method_set == key && !req->has_body) return CURLE_OK;
  return set_method_opts(s, req, key);
}

/* 1, 2, 4 for a header named User-Agent, Accept, Accept-Encoding, else 0. */
static unsigned lead_header(const char *name, size_t n) {
  if (n == 10 && ieq(name, n, "user-agent", 10)) return 1;
  if (n == 6 && ieq(name, n, "accept", 6)) return 2;
  if (n == 15 && ieq(name, n, "accept-encoding", 15)) return 4;
  return 0;
}

/* Which of User-Agent, Accept, Accept-Encoding (lead_header's bits) the
 * request's headers or the interceptors' set themselves. */
static RESIL_HTTP_OUTLINE unsigned own_lead_headers(const http_slot *s,
                                                    const resil_http_request *req) {
  unsigned own = 0;
  for (uint32_t i = 0; i < req->nhdrs; i++)
    own |= lead_header(req->hdr_store + req->hdr_offs[i], req->hdr_nlen[i]);
  for (uint32_t j = 0; j < s->ic_count; j++) {
    if (s->ic_offs[j] == UINT32_MAX) continue;
    const char *e = s->ic.p + s->ic_offs[j];
    const char *colon = strchr(e, ':');
    if (colon) own |= lead_header(e, (size_t)(colon - e));
  }
  return own;
}

/* Puts the request's headers (but those an interceptor overrides), then
 * the interceptors', into s->nodes from index k on; returns the new count.
 * With dl, a header named as the deadline header is left out, whoever set
 * it: the library's value, computed at send time, is the one sent. */
static RESIL_HTTP_OUTLINE uint32_t link_custom(const http_transport *c, http_slot *s,
                                               const resil_http_request *req, uint32_t k,
                                               int dl) {
  for (uint32_t i = 0; i < req->nhdrs; i++) {
    const char *h = req->hdr_store + req->hdr_offs[i];
    if (dl && ieq(h, req->hdr_nlen[i], c->dl_header, c->dl_header_len)) continue;
    int overridden = 0;
    for (uint32_t j = 0; j < s->ic_count && !overridden; j++) {
      if (s->ic_offs[j] == UINT32_MAX) continue;
      const char *e = s->ic.p + s->ic_offs[j];
      const char *colon = strchr(e, ':');
      overridden = colon && ieq(e, (size_t)(colon - e), h, req->hdr_nlen[i]);
    }
    if (!overridden) s->nodes[k++].data = (char *)(uintptr_t)h;
  }
  for (uint32_t j = 0; j < s->ic_count; j++) {
    if (s->ic_offs[j] == UINT32_MAX) continue;
    const char *e = s->ic.p + s->ic_offs[j];
    if (dl) {
      const char *colon = strchr(e, ':');
      if (colon && ieq(e, (size_t)(colon - e), c->dl_header, c->dl_header_len)) continue;
    }
    s->nodes[k++].data = (char *)(uintptr_t)e;
  }
  return k;
}

/* Grows s->nodes to total entries. */
static RESIL_HTTP_OUTLINE int grow_nodes(const http_transport *c, http_slot *s, uint32_t total) {
  struct curl_slist *n = resil__alloc(c->alloc, total * sizeof *n);
  if (!n) return -1;
  if (s->nodes) resil__free(c->alloc, s->nodes);
  s->nodes = n;
  s->nodes_cap = total;
  return 0;
}

/* Links the request's headers and the interceptors' into the slot's own
 * curl_slist nodes: no allocation once the slot has grown to size. With
 * dl, the deadline header line (s->dl_line) comes last. */
static int link_headers(const http_transport *c, http_slot *s, const resil_http_request *req,
                        int dl) {
  uint32_t total = req->nhdrs + s->ic_count + 4;
  if (total > s->nodes_cap && grow_nodes(c, s, total) != 0) return -1;
  int custom = req->nhdrs || s->ic_count;
  uint32_t k = 0;
  if (c->ua_line) {
    /* First, as libcurl writes its own lines before the custom ones:
     * User-Agent, Accept, Accept-Encoding, each left out when the request
     * or an interceptor sets a header of that name. */
    unsigned own = custom ? own_lead_headers(s, req) : 0;
    if (!(own & 1)) s->nodes[k++].data = c->ua_line;
    if (!(own & 2)) s->nodes[k++].data = accept_any;
    if (!(own & 4) && c->ae_line) s->nodes[k++].data = c->ae_line;
  }
  if (custom) k = link_custom(c, s, req, k, dl);
  if (dl) s->nodes[k++].data = s->dl_line;
  for (uint32_t i = 0; i < k; i++) s->nodes[i].next = i + 1 < k ? &s->nodes[i + 1] : NULL;
  s->has_nodes = k > 0;
  struct curl_slist *want = k ? s->nodes : NULL;
  if (!s->headers_known || s->headers_set != want) {
    s->headers_known = curl_easy_setopt(s->e, CURLOPT_HTTPHEADER, want) == CURLE_OK;
    s->headers_set = want;
  }
  return 0;
}


/* ---- interceptor headers ------------------------------------------------------ */

resil_status resil_http_headers_set(resil_http_headers *h, const char *name,
                                    const char *value) {
  if (!h || !h->slot || !name || !value) return RESIL_EINVAL;
  size_t nl = strlen(name), vl = strlen(value);
  if (nl == 0) return RESIL_EINVAL;
  for (size_t i = 0; i < nl; i++)
    if (!resil__http_tchar((unsigned char)name[i])) return RESIL_EINVAL;
  if (!resil__http_value_ok(value, vl)) return RESIL_EINVAL;
  const http_transport *c = h->tp;
  /* The idempotency key is fixed for the logical call: an interceptor may
   * refresh a signature, never the key. */
  if (ieq(name, nl, c->idem_header, c->idem_header_len) || resil__http_reserved_header(name, nl))
    return RESIL_EMISUSE;
  http_slot *s = h->slot;
  const resil_allocator *a = c->alloc;
  for (uint32_t i = 0; i < s->ic_count; i++) {
    if (s->ic_offs[i] == UINT32_MAX) continue;
    const char *e = s->ic.p + s->ic_offs[i];
    const char *colon = strchr(e, ':');
    if (colon && ieq(e, (size_t)(colon - e), name, nl)) s->ic_offs[i] = UINT32_MAX;
  }
  if (s->ic_count == s->ic_cap) {
    uint32_t cap = s->ic_cap ? s->ic_cap * 2 : 8;
    uint32_t *o = resil__alloc(a, cap * sizeof *o);
    if (!o) return RESIL_ENOMEM;
    if (s->ic_count) memcpy(o, s->ic_offs, s->ic_count * sizeof *o);
    if (s->ic_offs) resil__free(a, s->ic_offs);
    s->ic_offs = o;
    s->ic_cap = cap;
  }
  size_t off = s->ic.len;
  if (resil__http_buf_reserve(a, &s->ic, nl + vl + 3) != 0) return RESIL_ENOMEM;
  resil__http_buf_append(a, &s->ic, name, nl);
  resil__http_buf_append(a, &s->ic, ": ", 2);
  resil__http_buf_append(a, &s->ic, value, vl);
  resil__http_buf_append(a, &s->ic, "", 1);
  s->ic_offs[s->ic_count++] = (uint32_t)off;
  return RESIL_OK;
}

/* ---- one attempt ---------------------------------------------------------------- */

/* Runs the client's interceptors for this attempt (they add headers to
 * s->ic); 1 when one refused it (the reason in s->res), else 0. */
static RESIL_HTTP_OUTLINE int run_interceptors(const http_transport *c,
                                               const resil_http_request *req, http_slot *s,
                                               uint32_t attempt) {
  const http_endpoint *ep = req->ep;
  resil_http_response *res = s->res;
  resil_http_attempt_info info = {sizeof info, ep->name, resil__http_method_name(ep->method),
                                  s->inst ? s->ubuf.p : req->url, req->body, req->body_len,
                                  req->key, attempt};
  resil_http_headers h = {s, c};
  for (size_t i = 0; i < c->ninterceptors; i++) {
    resil_status st = c->interceptors[i].fn(c->interceptors[i].user, &info, &h);
    if (st != RESIL_OK) {
      snprintf(res->error, sizeof res->error, "interceptor %zu refused the attempt: %s", i,
               resil_status_name(st));
      res->has_error = 1;
      return 1;
    }
  }
  return 0;
}

/* The URL of an attempt to instance i: its base, then what follows the
 * endpoint's base in the request's URL (path and query), in s->ubuf.
 * 1 when out of memory (the reason in s->res), else 0. */
static RESIL_HTTP_OUTLINE int instance_url(const http_transport *c, http_slot *s,
                                           const resil_http_request *req, const http_inst *i) {
  const char *rest = req->url + req->ep->base_len;
  s->ubuf.len = 0;
  if (resil__http_buf_append(c->alloc, &s->ubuf, i->base, i->base_len) != 0 ||
      resil__http_buf_append(c->alloc, &s->ubuf, rest, strlen(rest) + 1) != 0) {
    set_error(s->res, "%s", "out of memory");
    return 1;
  }
  s->ubuf.len--; /* the NUL is not counted */
  return 0;
}

/* Sets url (ul bytes) on the handle and notes it in s->url. */
static RESIL_HTTP_OUTLINE CURLcode set_url(const http_transport *c, http_slot *s,
                                           const char *url, size_t ul) {
  s->url.len = 0;
  CURLcode src = curl_easy_setopt(s->e, CURLOPT_URL, url);
  if (src == CURLE_OK && resil__http_buf_append(c->alloc, &s->url, url, ul) != 0) s->url.len = 0;
  return src;
}

int resil__http_attempt_begin(resil_http_client *cl, const resil_http_request *req,
                              http_slot *s, uint32_t attempt, uint32_t flags, int64_t left,
                              int64_t budget_end, resil_outcome *out) {
  http_transport *c = resil__http_tp(cl);
  const http_endpoint *ep = req->ep;
  resil_outcome o;
  resil_http_response *res = s->res;
  resil__http_response_reset(res);
  atomic_fetch_add_explicit(&c->st_attempts, 1, memory_order_relaxed);
  const http_inst *inst = s->inst;
  s->origin = (int32_t)(inst ? inst->origin : ep->origin);
  int refused = 0;
  if (inst) {
    res->instance = (int)inst->index + 1;
    refused = instance_url(c, s, req, inst);
  }

  s->ic.len = 0;
  s->ic_count = 0;
  if (!refused && c->ninterceptors) refused = run_interceptors(c, req, s, attempt);
  /* s->dl_line holds "Name: " since resil__http_easy_setup. */
  int dl = budget_end != INT64_MAX && c->dl_header && !ep->no_deadline;
  if (!refused && RESIL_UNLIKELY(link_headers(c, s, req, dl) != 0)) {
    refused = 1;
    set_error(res, "%s", "out of memory");
  }
  if (refused) {
    o = resil_outcome_make(RESIL_NOT_SENT, RESIL_REASON_LOCAL_ERROR);
  } else {
    const char *url = inst ? s->ubuf.p : req->url;
    size_t ul = inst ? s->ubuf.len : strlen(req->url);
    CURLcode src = CURLE_OK;
    if (s->url.len != ul || memcmp(s->url.p, url, ul) != 0) src = set_url(c, s, url, ul);
    const struct curl_slist *ct = inst ? inst->connect_to : NULL;
    if (src == CURLE_OK && ct != s->ct_set) {
      src = curl_easy_setopt(s->e, CURLOPT_CONNECT_TO, ct);
      s->ct_set = src == CURLE_OK ? ct : NULL;
    }
    if (src == CURLE_OK) src = set_method(s, req);
    if (RESIL_UNLIKELY(src != CURLE_OK)) {
      /* The handle may still hold the previous request's URL or method. */
      s->url.len = 0;
      s->method_set = -1;
      set_error(res, "%s", "libcurl refused the request options (out of memory)");
      o = resil_outcome_make(RESIL_NOT_SENT, RESIL_REASON_LOCAL_ERROR);
      goto done;
    }
    /* Set only when they change (without a deadline they never do). */
    long cto = ceil_ms(c->connect_timeout_ns < left ? c->connect_timeout_ns : left);
    long to = left == INT64_MAX ? 0L : ceil_ms(left);
    if (cto != s->connect_to_set)
      s->connect_to_set =
          curl_easy_setopt(s->e, CURLOPT_CONNECTTIMEOUT_MS, cto) == CURLE_OK ? cto : -1;
    if (to != s->timeout_set)
      s->timeout_set = curl_easy_setopt(s->e, CURLOPT_TIMEOUT_MS, to) == CURLE_OK ? to : -1;
    http_xfer *x = &s->x;
    memset(x, 0, sizeof *x);
    x->tp = c;
    x->res = res;
    x->follow = c->follow_redirects;
    x->origin = c->origins[s->origin];
    x->resend_ok = c->resend_stale == RESIL_HTTP_RESEND_IF_SAFE &&
                   ((req->flags | flags) & (RESIL_CALL_IDEMPOTENT | RESIL_CALL_STABLE_KEY));
    x->response_timeout_ns = c->response_timeout_ns < left ? c->response_timeout_ns : left;
    x->max_body = c->max_response_bytes;
    x->budget_end = dl ? budget_end : INT64_MAX;
    /* on_prereq writes the value for each request sent; the request log
     * (HEADERS and up), written before, shows it as of now. */
    if (dl && c->log_level >= RESIL_HTTP_LOG_HEADERS && c->log_level != RESIL_HTTP_LOG_METADATA)
      write_budget(s, resil__http_mono_ns());
    s->errbuf[0] = '\0';
    if (c->log_level != RESIL_HTTP_LOG_NONE && c->log_level != RESIL_HTTP_LOG_METADATA)
      log_request(c, s, req, attempt);

    return 0;
  }
done:
  *out = o;
  return -1;
}

resil_outcome resil__http_attempt_end(resil_http_client *cl, const resil_http_request *req,
                                     http_slot *s, int aborted, CURLcode rc) {
  http_transport *c = resil__http_tp(cl);
  const http_endpoint *ep = req->ep;
  resil_http_response *res = s->res;
  http_xfer *x = &s->x;
  resil_outcome o;
  o = classify(s, aborted, rc, res, c);
  if (o.kind == RESIL_ANSWERED) {
    resil__http_decode(ep, res, &o);
    /* The entry resil_http_response_header(res, "retry-after") returns. */
    const char *ra = x->retry_after_at ? res->hdr.p + x->retry_after_at - 1 + 12 : NULL;
    int64_t ms = -1;
    if (ra && resil_retry_after_parse(ra, strlen(ra), resil_clock_wall_ms(c->clock), &ms) ==
                  RESIL_OK)
      o.retry_after_ms = ms;
    resil_http_decoder_fn dec = ep->decoder ? ep->decoder : c->decoder;
    if (dec) {
      res->outcome = o;
      o = dec(ep->decoder ? ep->decoder_user : c->decoder_user, res, o);
    }
  }
  res->info.hops = x->hops;
  res->info.resends = x->resends;
  res->info.connections = x->sockets;
  res->info.local_port = x->local_port;
  res->info.reused_connection = x->prereqs > 0 && x->sockets == 0;
  if (x->prereqs) {
    curl_off_t us = 0;
    curl_easy_getinfo(s->e, CURLINFO_CONNECT_TIME_T, &us);
    res->info.connect_ns = (int64_t)us * 1000;
    us = 0;
    curl_easy_getinfo(s->e, CURLINFO_STARTTRANSFER_TIME_T, &us);
    res->info.first_byte_ns = (int64_t)us * 1000;
  }
  atomic_fetch_add_explicit(&c->st_sent, x->prereqs, memory_order_relaxed);
  if (x->hops) atomic_fetch_add_explicit(&c->st_hops, x->hops, memory_order_relaxed);
  if (x->sockets) atomic_fetch_add_explicit(&c->st_conns, x->sockets, memory_order_relaxed);
  if (x->resend_refused) atomic_fetch_add_explicit(&c->st_prevented, 1, memory_order_relaxed);
  if (x->resends) {
    atomic_fetch_add_explicit(&c->st_counted, x->resends, memory_order_relaxed);
    atomic_fetch_add_explicit(&c->st_attempts, x->resends, memory_order_relaxed);
  }
  return o;
}

void resil__http_attempt_done(resil_http_client *cl, const resil_http_request *req,
                              http_slot *s, const resil_outcome *op, uint32_t attempt,
                              int64_t lease_wait_ns, int64_t total_ns) {
  http_transport *c = resil__http_tp(cl);
  resil_http_response *res = s->res;
  resil_outcome o = *op;
  res->outcome = o;
  resil__http_response_set_key(res, req->key);
  res->info.attempt = attempt;
  res->info.lease_wait_ns = lease_wait_ns;
  res->info.total_ns = total_ns;
  if (c->log_level != RESIL_HTTP_LOG_NONE) log_result(c, s, req, res, attempt);
  resil__http_count_outcome(cl, &o);
  if (s->inst) {
    http_inst *i = s->inst;
    s->inst = NULL;
    resil__http_inst_done(i, s->probe, &o);
  }
}

void resil__http_log_bare(const resil_http_client *cl, const http_endpoint *ep,
                          const resil_outcome *o, uint32_t attempt, int64_t total) {
  const http_transport *c = resil__http_tpc(cl);
  if (c->log_level == RESIL_HTTP_LOG_NONE) return;
  char ob[96], line[320];
  resil_outcome_format(o, ob, sizeof ob);
  if (c->log_level == RESIL_HTTP_LOG_METADATA)
    snprintf(line, sizeof line, "method=%s endpoint=%s status=0 duration_ms=%.3f outcome=%s attempt=%u",
             resil__http_method_name(ep->method), ep->name, (double)total / 1e6, ob, attempt);
  else
    snprintf(line, sizeof line, "<-- not sent endpoint=%s attempt=%u outcome=%s (%.3f ms)",
             ep->name, attempt, ob, (double)total / 1e6);
  c->log_fn(c->log_user, c->log_level == RESIL_HTTP_LOG_METADATA ? RESIL_HTTP_LOG_METADATA
                                                                 : RESIL_HTTP_LOG_BASIC,
            line);
}
