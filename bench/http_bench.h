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

#endif
