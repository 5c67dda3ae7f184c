/* The lab's experiment families: each family's table, defined in its
 * exp_*.c, and the registration table that lists them in order
 * (lab_families.c, where the steps to add a family are). */
#ifndef RESIL_TOOL_LAB_FAMILIES_H
#define RESIL_TOOL_LAB_FAMILIES_H

#include "lab_result.h"

/* Each family's experiments, terminated by {NULL}; a family whose
 * dependencies are not built defines an empty table ({{NULL}}). */
/* P1-P12, P14 (exp_policies.c). */
extern const lab_experiment lab_policy_experiments[];
/* P13 and H1-H16 (exp_http.c): empty unless the fixture is built. */
extern const lab_experiment lab_http_experiments[];
/* I1-I8 (exp_idem.c): empty unless the fixture and the store are built. */
extern const lab_experiment lab_idem_experiments[];
/* A1-A6 and A8 (exp_async.c): empty unless the built-in loop is built. */
extern const lab_experiment lab_async_experiments[];
/* A7 (exp_async_keyed.c): empty unless the built-in loop, the fixture and
 * the store are built. */
extern const lab_experiment lab_async_keyed_experiments[];
/* O1 (exp_registry.c): empty unless the built-in loop, the fixture and
 * libresil-config are built. */
extern const lab_experiment lab_registry_experiments[];
/* M1-M3, M5, M6 (exp_shared.c): state shared by processes (fork()ed
 * workers, `resil call --state` invocations; M5 only when the fixture is
 * built) and the fallback when a segment cannot be opened. */
extern const lab_experiment lab_shared_experiments[];
/* M4 (exp_shared_chaos.c): SIGKILL chaos on shared state (fork()ed
 * workers killed and respawned). */
extern const lab_experiment lab_shared_chaos_experiments[];
/* G1-G4 (exp_redis.c): the rate limiter on Redis (libresil-redis) against
 * a redis-server the experiment starts; empty unless libresil-redis is
 * built. */
extern const lab_experiment lab_redis_experiments[];
/* D1-D4: deadlines across hops (exp_hops.c). */
extern const lab_experiment lab_hops_experiments[];
/* F1-F4: many instances of one upstream (exp_instances.c; F3 only when
 * the built-in loop is built): empty unless the fixture is built. */
extern const lab_experiment lab_instances_experiments[];
/* F5 (exp_fleet.c): 4 `resil upstream` processes on one PostgreSQL the
 * experiment starts, one killed and one restarted under keyed payments;
 * empty unless libresil-http, the store, the fixture and libresil-mhd are
 * built. */
extern const lab_experiment lab_fleet_experiments[];

/* R1-R3 (exp_recovery.c): recovery in the seed's order (the breaker's
 * ramp after HALF_OPEN -> CLOSED, retries last) against the fixture;
 * empty unless the fixture is built. */
extern const lab_experiment lab_recovery_experiments[];

/* The registration table: every family's table, in the order `resil lab`
 * runs and lists them, then NULL. */
extern const lab_experiment *const lab_families[];

#endif
