/* store_pg.c as compiled against a libpq without pipelining (before 14):
 * its #ifndef LIBPQ_HAS_PIPELINING paths must build with the project's
 * warnings as errors. Compiled only (an object library), never linked. */
#include <libpq-fe.h>
#undef LIBPQ_HAS_PIPELINING
#include "store/store_pg.c"
