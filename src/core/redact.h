/* Redaction of secrets in URLs and messages (redact.c): the one set of
 * rules used by the HTTP log and the event log (libresil-http), the store's
 * messages (libresil-store) and the fixture. Compiled into every library
 * that uses it, as the other core helpers are (CMakeLists.txt). Matching is
 * case-insensitive and errs on the side of hiding too much. Not
 * installed. */
#ifndef RESIL_CORE_REDACT_H
#define RESIL_CORE_REDACT_H

#include <stddef.h>

#define RESIL__REDACTED "[REDACTED]"

/* 1 when a[0..alen) equals the lower-case b, ignoring case. */
int resil__ieq(const char *a, size_t alen, const char *b);
/* 1 when the lower-case needle occurs in s[0..len), ignoring case. */
int resil__icontains(const char *s, size_t len, const char *needle);

/* Where redacted text goes: appends s[0..n) to out; returns 0, or -1 (out
 * of memory: the redaction stops with -1). */
typedef int (*resil__put_fn)(void *out, const char *s, size_t n);

/* 1 when a parameter's (or JSON key's, form field's) value must never be
 * shown: its name, percent-decoded (and \u-decoded when json), holds token,
 * key, secret, pass, pwd, sig, auth, credential, session, cookie, jwt or
 * assertion, or is code, otp or pin. A name too long to decode is secret. */
int resil__secret_name(const char *name, size_t len, int json);

/* Puts s[0..len), name=value pairs separated by any byte of seps, with the
 * value of every secret-looking pair replaced ("a=1&token=[REDACTED]"); a
 * bare secret-looking word (no '=') goes too. So does a value holding a
 * URL with userinfo, plain or percent-encoded ("next=https://u:p@h/",
 * "r=http%3A%2F%2Fu%3Ap%40h", "to=u:p@h/x"). */
int resil__redact_pairs(resil__put_fn put, void *out, const char *s, size_t len,
                        const char *seps);

/* Puts url[0..len) with its userinfo replaced ("https://[REDACTED]@h/";
 * also without a scheme: "u:p@h/x" -> "[REDACTED]@h/x"), its query
 * redacted as resil__redact_pairs does ('&' and ';'), the fragment dropped. */
int resil__redact_url(resil__put_fn put, void *out, const char *url, size_t len);

/* Puts free text (a header value, an error message) with the userinfo of
 * every "scheme://user:pw@host" in it and the value of every secret-looking
 * name=value pair in it replaced (pairs end at ? # & ; , < > " ' space or
 * tab). */
int resil__redact_text(resil__put_fn put, void *out, const char *s, size_t len);

/* resil__redact_text for prose (an error message, libpq's): the same,
 * except that a bare secret-looking word stays ("password authentication
 * failed" is not a secret; "password=x" is). */
int resil__redact_message(resil__put_fn put, void *out, const char *s, size_t len);

/* What resil__redact_excerpt does to its text before escaping it. */
typedef enum resil__redact_mode {
  RESIL__REDACT_NONE = 0,  /* nothing: only escaped and cut           */
  RESIL__REDACT_PAIRS = 1, /* resil__redact_pairs, '&' and ';'        */
  RESIL__REDACT_URL = 2,   /* resil__redact_url                       */
  RESIL__REDACT_TEXT = 3,  /* resil__redact_text                      */
  RESIL__REDACT_MESSAGE = 4 /* resil__redact_message                  */
} resil__redact_mode;

/* Writes into dst[0..cap) an excerpt of s[0..len) fit to quote in a
 * message: redacted by mode; then, when secrets_of is not NULL (a URI or
 * conninfo string), every occurrence of its secrets (userinfo, its
 * password, values of secret-looking parameters, raw and percent-decoded)
 * replaced, for text that may quote them out of context (libpq's
 * messages); control bytes, DEL and bytes >= 0x80 escaped as "\xNN"; cut
 * with "..." (never inside an escape) to fit. When out of memory, dst
 * holds "[REDACTED]". */
void resil__redact_excerpt(char *dst, size_t cap, const char *s, size_t len,
                           resil__redact_mode mode, const char *secrets_of);

#endif
