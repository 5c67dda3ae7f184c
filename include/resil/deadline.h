/* Deadlines received from the caller (DESIGN §8.3): the server side of
 * deadline propagation, for any server. A client that propagates its
 * deadline (libresil-http's deadline_propagation, gRPC, Envoy) sends the
 * time it will still wait as a relative duration; the server takes it as
 * its own deadline for the request, bounded by its own maximum, and
 * refuses at once, before any work, a request whose budget is below a
 * floor: the caller will have given up before an answer could come back.
 *
 * Three headers are read, each optional:
 *   the configured one (Request-Timeout by default, what libresil-http
 *     sends) and grpc-timeout: gRPC's grammar, 1..8 digits and a unit H,
 *     M, S, m, u or n ("300m", "287513u");
 *   x-envoy-expected-rq-timeout-ms: Envoy's integer milliseconds. "0" is
 *     Envoy's "no timeout" (its route timeout 0 disables the timeout), and
 *     counts as absent.
 * Optional whitespace around a value is allowed; anything else (a sign,
 * inner spaces, a 9th digit, another unit) makes the value invalid.
 *
 * Precedence: the smallest valid value wins, whichever header carries it:
 * each of them is a caller's statement of how long it waits, and the
 * shortest one is the one that is true for all of them.
 *
 * Invalid values are ignored, as if absent, and reported (the `invalid`
 * bits): a deadline header is advice from a peer that may be buggy or
 * untrusted (Linkerd's warning), refusing the request over a malformed
 * value would turn a peer's formatting bug into an outage, and the
 * server's own maximum still bounds the work. A request whose only
 * deadline value is invalid runs with the server's maximum.
 *
 * libmicrohttpd servers: <resil/deadline_mhd.h> (libresil-mhd) reads the
 * headers of a connection, counts, and answers the refusal.
 *
 * Thread-safety: pure functions. */
#ifndef RESIL_DEADLINE_H
#define RESIL_DEADLINE_H

#include <stdint.h>

#include "version.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The header libresil-http sends by default. */
#define RESIL_DEADLINE_HEADER "Request-Timeout"
/* The default floor: a budget below it is refused. */
#define RESIL_DEADLINE_FLOOR_NS (INT64_C(5) * 1000000)

typedef enum resil_deadline_verdict {
  /* No valid deadline value: the server's own maximum applies
   * (*budget_ns = max_ns, or INT64_MAX, no deadline, when max_ns is 0). */
  RESIL_DEADLINE_NONE = 0,
  /* The caller's budget, at most max_ns, in *budget_ns. */
  RESIL_DEADLINE_GIVEN = 1,
  /* The caller's budget (in *budget_ns) is below the floor: answer at once
   * (504 by default) without doing any work. */
  RESIL_DEADLINE_REFUSE = 2
} resil_deadline_verdict;

/* The headers, as bits of *from and *invalid. */
#define RESIL_DEADLINE_FROM_HEADER 0x1u /* the configured header */
#define RESIL_DEADLINE_FROM_GRPC 0x2u   /* grpc-timeout */
#define RESIL_DEADLINE_FROM_ENVOY 0x4u  /* x-envoy-expected-rq-timeout-ms */

/* The request's budget from the values of the three headers (each NULL
 * when absent; NUL-terminated), the server's maximum max_ns (> 0; 0: none)
 * and its floor floor_ns (>= 0; RESIL_DEADLINE_FLOOR_NS is the usual one).
 * *budget_ns gets the budget (see the verdicts; min(value, max_ns) for
 * GIVEN and REFUSE); *from (may be NULL) the bit of the header whose value
 * won (0 for NONE); *invalid (may be NULL) the bits of the headers present
 * with an invalid value. A negative max_ns or floor_ns counts as 0. The
 * deadline is then now + *budget_ns on the server's clock (resil_ctx:
 * resil_ctx_set_timeout_ns). budget_ns NULL: RESIL_DEADLINE_NONE and
 * nothing written. Since 0.2. */
RESIL_API resil_deadline_verdict resil_deadline_from_headers(const char *header,
                                                             const char *grpc,
                                                             const char *envoy,
                                                             int64_t max_ns, int64_t floor_ns,
                                                             int64_t *budget_ns,
                                                             unsigned *from, unsigned *invalid);

#ifdef __cplusplus
}
#endif
#endif
