/* resil__ctx_in (internal.h): the caller's context as a full-size one. A
 * file of its own so that libresil-http (and any library built on the core)
 * can compile it in: libresil.so does not export resil__* helpers. */
#include "core/internal.h"

const resil_ctx *resil__ctx_in(resil_ctx *local, const resil_ctx *ctx) {
  if (ctx && RESIL_LIKELY(ctx->struct_size == sizeof *ctx)) return ctx;
  resil_ctx_init_sized(local, sizeof *local);
  if (ctx && resil__sized_in(local, sizeof *local, ctx, RESIL__CTX_MIN_SIZE,
                             "resil_ctx", "resil_ctx_init", NULL) != RESIL_OK)
    return NULL;
  return local;
}
