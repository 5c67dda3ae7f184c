/* Relative timeouts on the wire (DESIGN §8.3): gRPC's timeout grammar,
 * written by the HTTP client for every attempt that has a deadline and read
 * by the server side, and Envoy's integer milliseconds. One implementation
 * for both directions. Pure functions over byte ranges: they never read past
 * len and need no NUL. Internal; not installed. A file of its own so that
 * libresil-http can compile it in (libresil.so does not export resil__*).
 *
 * gRPC (doc/PROTOCOL-HTTP2.md): Timeout = TimeoutValue TimeoutUnit, the
 * value a positive integer of at most 8 ASCII digits, the unit one of
 * H (hours), M (minutes), S (seconds), m (milliseconds), u (microseconds),
 * n (nanoseconds). */
#ifndef RESIL_CORE_TIMEOUT_HDR_H
#define RESIL_CORE_TIMEOUT_HDR_H

#include <stddef.h>
#include <stdint.h>

/* Room for the longest value, "99999999H", and its NUL. */
#define RESIL__TIMEOUT_BUF 16

/* Writes ns as a gRPC timeout into out (NUL-terminated) and returns its
 * length (2..9). The unit is the finest whose value fits in 8 digits, the
 * value rounded DOWN in it, so that a receiver never gets more time than
 * was left (gRPC's own encoder rounds up; a budget is a promise, and an
 * upper bound must not grow in transit). ns <= 0 gives "0n". */
size_t resil__timeout_format(int64_t ns, char out[RESIL__TIMEOUT_BUF]);

/* Parses a gRPC timeout from value[0..len): optional whitespace (SP, HTAB)
 * around it, then 1..8 digits and one unit letter, nothing else (no sign,
 * no inner space, no second unit, no 9th digit). Returns 0 with *ns the
 * duration in nanoseconds (saturated at INT64_MAX: 99999999H does not fit),
 * or -1 (then *ns is untouched). */
int resil__timeout_parse(const char *value, size_t len, int64_t *ns);

/* Parses Envoy's x-envoy-expected-rq-timeout-ms: optional whitespace, then
 * 1..18 digits (milliseconds), nothing else. Returns 0 with *ns (saturated
 * at INT64_MAX), or -1. */
int resil__timeout_ms_parse(const char *value, size_t len, int64_t *ns);

#endif
