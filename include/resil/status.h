/* resil_status: did a libresil *function* do its job?
 *
 * This is not what happened to a remote call; that is resil_outcome
 * (outcome.h). A refused permit is a REJECTED outcome, not an error.
 *
 * ABI promise: values are appended only, never renumbered or removed.
 * Thread-safety: every function here is thread-safe (static data only). */
#ifndef RESIL_STATUS_H
#define RESIL_STATUS_H

#include <stdint.h>

#include "version.h"

#ifdef __cplusplus
extern "C" {
#endif

/* X(name, message): the one table the enum, names and messages come from. */
#define RESIL_STATUS_MAP(X)                                                    \
  X(OK, "success")                                                             \
  X(EINVAL, "invalid argument or configuration")                              \
  X(ENOMEM, "out of memory")                                                   \
  X(EMISUSE, "library misuse: wrong call order or NULL handle")                \
  X(EIO, "transport or store failure")                                         \
  X(ESTATE, "operation not allowed in the current state")                      \
  X(ESYS, "system resource failure (thread, mutex or condition variable)")     \
  X(ETIMEDOUT, "timed out waiting")                                            \
  X(EBUSY, "object still in use")

typedef enum resil_status {
#define RESIL__STATUS_ENUM(name, msg) RESIL_##name,
  RESIL_STATUS_MAP(RESIL__STATUS_ENUM)
#undef RESIL__STATUS_ENUM
  RESIL_STATUS_COUNT_ /* not a status; keeps the list append-only */
} resil_status;

/* Human-readable message. Static text, never NULL; an unknown value gets
 * "unknown status". Since 0.1. */
RESIL_API const char *resil_strerror(resil_status st);
/* "RESIL_EINVAL": the enumerator's name, for logs and the CLI. Static text,
 * never NULL ("RESIL_UNKNOWN" for an unknown value). Since 0.1. */
RESIL_API const char *resil_status_name(resil_status st);

/* Detail of a failed call, filled by constructors and other functions that
 * take a `resil_error *` (always optional: NULL is accepted).
 *
 * For a rejected configuration, `field` names the config field, and when the
 * field is numeric `has_range` is 1 with the allowed [min, max] and the value
 * received in `got`, so callers and tests check data, not message text.
 * `msg` is a complete sentence for humans, e.g.
 *   "minimum_calls: must be 1..window_size (20), got 100". */
typedef struct resil_error {
  resil_status status;
  char field[48];
  int has_range;
  int64_t min;
  int64_t max;
  int64_t got;
  char msg[192];
} resil_error;

/* Reset *err to status OK with empty texts. NULL is a no-op. Since 0.1. */
RESIL_API void resil_error_clear(resil_error *err);

#ifdef __cplusplus
}
#endif
#endif
