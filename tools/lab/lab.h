/* The lab: experiments of DESIGN §7, each measured against real code (and,
 * for the HTTP ones, a real loopback upstream), each producing one
 * observation line and a JSON object of what it measured.
 *
 * This is the runner's header (lab.c): what the CLI (`resil lab`, main.c)
 * and the tests use to find and run experiments. An experiment file
 * (exp_*.c) does not include it: it works with lab_result.h. */
#ifndef RESIL_TOOL_LAB_H
#define RESIL_TOOL_LAB_H

#include "lab_families.h" /* each family's table, lab_families */
#include "lab_result.h"

/* Runs one experiment into r (fresh) on the blocking path. Returns r->pass. */
int lab_run_one(const lab_experiment *e, lab_result *r);
/* Runs e->run_wrong into r (fresh), as lab_run_one does; returns r->pass,
 * or -1 (r cleared) when e has no wrong variant. */
int lab_run_wrong(const lab_experiment *e, lab_result *r);
/* The same on a given path (LAB_PATH_*): -1 (r cleared) when e does not
 * run on it or the path is not built. */
int lab_run_on(const lab_experiment *e, int path, lab_result *r);
int lab_run_wrong_on(const lab_experiment *e, int path, lab_result *r);
/* 1 when e runs on path in this build. */
int lab_runs_on(const lab_experiment *e, int path);

/* Finds an experiment by id in every family's table (lab_families); NULL
 * when none. */
const lab_experiment *lab_find(const char *id);

/* `resil lab ...` */
int lab_main(int argc, char **argv);

#endif
