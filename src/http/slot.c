/* Pool slots: one libcurl easy handle per slot, driven by the slot's own
 * multi handle, with the options that never change set once, and the
 * callbacks that watch every request libcurl puts on the wire.
 *
 * Why not one connection cache shared by all slots through a CURLSH with
 * CURL_LOCK_DATA_CONNECT: libcurl documents that sharing the connection
 * cache between concurrently running threads is not supported (a known
 * bug in 7.x). Each slot therefore keeps its own single idle connection,
 * and the lease prefers a slot whose connection goes to the wanted origin.
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
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

#include "http_int.h"

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
  if (n >= 12 && ieq_prefix(buf, n, "http/")) {
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
    return n;
  }
  x->hdr_bytes += n;
  const char *colon = memchr(buf, ':', n);
  /* Keep at most 256 KiB of headers; more are read but not stored. */
  if (!colon || colon == buf || x->hdr_bytes > (256u << 10)) return n;
  size_t vlen = n - (size_t)(colon + 1 - buf);
  if (resil__http_response_add_header(r, buf, (size_t)(colon - buf), colon + 1, vlen) != 0)
    return 0; /* out of memory: abort the transfer (CURLE_WRITE_ERROR) */
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
  if (resil__http_buf_append(x->client->alloc, &r->body, buf, n) != 0) return 0;
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
  x->resp_deadline = resil__sat_add(resil__http_mono_ns(), x->response_timeout_ns);
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
  if (fd != CURL_SOCKET_BAD) x->sockets++;
  return fd;
}

int resil__http_slot_setup(resil_http_client *c, http_slot *s) {
  s->e = curl_easy_init();
  s->m = curl_multi_init();
  if (!s->e || !s->m) goto fail;
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
  SET(CURLOPT_USERAGENT, c->user_agent);
  SET(CURLOPT_MAXCONNECTS, 1L);
  SET(CURLOPT_TCP_NODELAY, 1L);
#undef SET
  if (rc != CURLE_OK) goto fail;
  if (curl_multi_setopt(s->m, CURLMOPT_MAXCONNECTS, 1L) != CURLM_OK) goto fail;
  s->method_set = -1;
  return 0;
fail:
  if (s->m) curl_multi_cleanup(s->m);
  if (s->e) curl_easy_cleanup(s->e);
  s->m = NULL;
  s->e = NULL;
  return -1;
}

void resil__http_slot_cleanup(const resil_http_client *c, http_slot *s) {
  const resil_allocator *a = c->alloc;
  /* The multi handle owns the cached connection: close it first. */
  if (s->m) curl_multi_cleanup(s->m);
  if (s->e) curl_easy_cleanup(s->e);
  s->m = NULL;
  s->e = NULL;
  if (s->res) resil_http_response_free(s->res);
  s->res = NULL;
  resil__free(a, s->nodes);
  resil__free(a, s->ic_offs);
  resil__http_buf_free(a, &s->ic);
  resil__http_buf_free(a, &s->url);
  resil__http_buf_free(a, &s->log);
}
