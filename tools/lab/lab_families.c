/* The registration table of the lab's experiment families: `resil lab`
 * runs and lists the experiments family by family in this order (lab.c),
 * and lab_find looks ids up here. The runner knows the families only
 * through this table; a family knows nothing of the runner or of another
 * family.
 *
 * Adding a family X (as G, D, F and R were):
 *  1. tools/lab/exp_X.c (CMake globs the folder's .c files): the
 *     experiments and their table, terminated by {NULL}, and an empty
 *     table {{NULL}} in a build without what the family needs (see
 *     exp_async.c); the fields are lab_experiment's (lab_result.h):
 *       const lab_experiment lab_X_experiments[] = {
 *           {"X1", "title", x1, x1_wrong, "what x1_wrong gets wrong",
 *            "named_check_that_must_fail_there", 0},
 *           {NULL, NULL, NULL, NULL, NULL, NULL, 0}};
 *     It includes lab_result.h (the result and the checks), lab_families.h
 *     (its table's declaration) and, as it needs them, lab_ops.h (--metrics
 *     and --events), lab_engine.h (the engine path), lab_procs.h (a
 *     shared segment in a temp dir, a page for forked workers), public headers
 *     (resil/...) and fixture/fixture.h; never the runner's lab.h, another
 *     exp_*.c, or tools/resil (scripts/check-layers.sh checks it).
 *  2. lab_families.h: extern const lab_experiment lab_X_experiments[];
 *  3. The table below: one line, lab_X_experiments, where its experiments
 *     are to run (scripts/check-layers.sh fails while an exp_*.c's table is
 *     missing here).
 *  4. A test, tests/unit/test_lab_X_mt.c, that runs each experiment and its
 *     wrong variant (see test_lab_http_mt.c; tests/CMakeLists.txt links
 *     every test_lab* with the lab; add it to the lab_timing lock there
 *     when it measures time), and the ids in lab.c's usage and README's
 *     "The lab". */
#include "lab_families.h"

#include <stddef.h>

const lab_experiment *const lab_families[] = {
    lab_policy_experiments,      /* P1-P12, P14 (exp_policies.c) */
    lab_http_experiments,        /* P13, H1-H16 (exp_http.c) */
    lab_idem_experiments,        /* I1-I8 (exp_idem.c) */
    lab_async_experiments,       /* A1-A6, A8 (exp_async.c) */
    lab_async_keyed_experiments, /* A7 (exp_async_keyed.c) */
    lab_registry_experiments,    /* O1 (exp_registry.c) */
    lab_shared_experiments,      /* M1-M3, M5, M6 (exp_shared.c) */
    lab_shared_chaos_experiments, /* M4 (exp_shared_chaos.c) */
    lab_redis_experiments,       /* G1-G4 (exp_redis.c) */
    lab_hops_experiments,        /* D1-D4 (exp_hops.c) */
    lab_instances_experiments,   /* F1-F4 (exp_instances.c) */
    lab_fleet_experiments,       /* F5 (exp_fleet.c) */
    lab_recovery_experiments,    /* R1-R3 (exp_recovery.c) */
    NULL};
