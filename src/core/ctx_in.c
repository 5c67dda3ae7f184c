/* resil__ctx_in_slow (internal.h): the caller's context as a full-size one
 * when it is not the library's size. A file of its own so that libresil-http
 * (and any library built on the core) can compile it in: libresil.so does
 * not export resil__* helpers. */
#include "core/internal.h"

const resil_ctx *resil__ctx_in_slow(resil_ctx *local, const resil_ctx *ctx) {
  resil_ctx_init_sized(local, sizeof *local);
  if (ctx && resil__sized_in(local, sizeof *local, ctx, RESIL__CTX_MIN_SIZE,
                             "resil_ctx", "resil_ctx_init", NULL) != RESIL_OK)
    return NULL;
  return local;
}
