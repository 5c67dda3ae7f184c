/* Pool slots of the blocking path: one libcurl easy handle per slot (set up
 * by transfer.c with the options and guards every attempt shares), driven
 * by the slot's own multi handle, which keeps the slot's single idle
 * keep-alive connection between attempts.
 *
 * Why not one connection cache shared by all slots through a CURLSH with
 * CURL_LOCK_DATA_CONNECT: libcurl documents that sharing the connection
 * cache between concurrently running threads is not supported (a known
 * bug in 7.x). Each slot therefore keeps its own single idle connection,
 * and the lease prefers a slot whose connection goes to the wanted origin.
 *
 * Each slot's DNS cache lives in a CURLSH of its own (CURL_LOCK_DATA_DNS,
 * used by that one handle only, so it needs no lock callbacks) rather than
 * in the slot's multi handle: the same cache, same lifetime, same entry
 * timeout, but libcurl 7.88 walks every bucket of it on each transfer
 * (Curl_hostcache_prune) and a multi handle's has 71 buckets where a
 * share's has 23 (a curl_easy_perform handle's private one has 7). Measured
 * with callgrind on a keep-alive GET: the walk costs 576 instructions less
 * per request, the share's (lock-free) lock calls 146 more.
 */
#include "slot.h"

#include "response_int.h"
#include "template.h"

int resil__http_slot_setup(resil_http_client *c, http_slot *s) {
  if (resil__http_easy_setup(c, s, 1L) != 0) return -1;
  s->m = curl_multi_init();
  s->dns = curl_share_init();
  if (!s->m || curl_multi_setopt(s->m, CURLMOPT_MAXCONNECTS, 1L) != CURLM_OK || !s->dns ||
      curl_share_setopt(s->dns, CURLSHOPT_SHARE, CURL_LOCK_DATA_DNS) != CURLSHE_OK ||
      curl_easy_setopt(s->e, CURLOPT_SHARE, s->dns) != CURLE_OK) {
    if (s->m) curl_multi_cleanup(s->m);
    curl_easy_cleanup(s->e);
    if (s->dns) curl_share_cleanup(s->dns);
    s->m = NULL;
    s->e = NULL;
    s->dns = NULL;
    return -1;
  }
  return 0;
}

void resil__http_slot_cleanup(const resil_http_client *c, http_slot *s) {
  const resil_allocator *a = resil__http_tpc(c)->alloc;
  /* The multi handle owns the cached connection: close it first. */
  if (s->m) curl_multi_cleanup(s->m);
  if (s->e) curl_easy_cleanup(s->e);
  /* After the handle that used it. */
  if (s->dns) curl_share_cleanup(s->dns);
  s->m = NULL;
  s->e = NULL;
  s->dns = NULL;
  if (s->res) resil_http_response_free(s->res);
  s->res = NULL;
  resil__free(a, s->nodes);
  resil__free(a, s->ic_offs);
  resil__http_buf_free(a, &s->ic);
  resil__http_buf_free(a, &s->url);
  resil__http_buf_free(a, &s->ubuf);
  resil__http_buf_free(a, &s->log);
}
