/* libresil-redis's internals shared with its tests. Not installed, not
 * exported (hidden visibility, like every symbol not marked RESIL_API). */
#ifndef RESIL_REDIS_INT_H
#define RESIL_REDIS_INT_H

/* The GCRA script (redis_rl.c says what it does): the tests run it through
 * a bare hiredis client to compare its cost with the limiter's. */
extern const char resil__redis_gcra_script[];

#endif
