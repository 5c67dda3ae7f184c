/* resil_deadline_from_headers (deadline.h): the server's side of deadline
 * propagation, on the one parser of the grammar (timeout_hdr.c). */
#include <string.h>

#include "core/timeout_hdr.h"
#include "resil/deadline.h"

/* One header's value into *best when valid and smaller. */
static void take(const char *v, int ms, unsigned bit, int64_t *best, unsigned *from,
                 unsigned *invalid) {
  if (!v) return;
  int64_t ns;
  int rc = ms ? resil__timeout_ms_parse(v, strlen(v), &ns) : resil__timeout_parse(v, strlen(v), &ns);
  if (rc != 0) {
    *invalid |= bit;
    return;
  }
  /* Envoy's 0 is "no timeout". */
  if (ms && ns == 0) return;
  if (ns < *best) {
    *best = ns;
    *from = bit;
  }
}

resil_deadline_verdict resil_deadline_from_headers(const char *header, const char *grpc,
                                                   const char *envoy, int64_t max_ns,
                                                   int64_t floor_ns, int64_t *budget_ns,
                                                   unsigned *from, unsigned *invalid) {
  unsigned f = 0, bad = 0;
  int64_t best = INT64_MAX;
  if (!budget_ns) return RESIL_DEADLINE_NONE;
  if (max_ns < 0) max_ns = 0;
  if (floor_ns < 0) floor_ns = 0;
  take(header, 0, RESIL_DEADLINE_FROM_HEADER, &best, &f, &bad);
  take(grpc, 0, RESIL_DEADLINE_FROM_GRPC, &best, &f, &bad);
  take(envoy, 1, RESIL_DEADLINE_FROM_ENVOY, &best, &f, &bad);
  if (from) *from = f;
  if (invalid) *invalid = bad;
  if (!f) {
    *budget_ns = max_ns > 0 ? max_ns : INT64_MAX;
    return RESIL_DEADLINE_NONE;
  }
  if (max_ns > 0 && best > max_ns) best = max_ns;
  *budget_ns = best;
  return best < floor_ns ? RESIL_DEADLINE_REFUSE : RESIL_DEADLINE_GIVEN;
}
