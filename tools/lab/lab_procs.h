/* What the lab's multi-process experiments (the M family: exp_shared.c,
 * exp_shared_chaos.c) share: a resil_shared segment in a fresh temporary
 * directory, removed afterwards (nothing is left in /dev/shm), and a page
 * the forked workers write their counts to. */
#ifndef RESIL_LAB_PROCS_H
#define RESIL_LAB_PROCS_H

#include <stddef.h>

#include "lab_result.h"
#include "resil/shared.h"

typedef struct lab_seg {
  char dir[80];
  char name[40];
  resil_shared_config sc;
  resil_shared *seg;
} lab_seg;

/* A fresh temp dir ($TMPDIR or /tmp) for the segment "<tag>-<pid>"
 * (s->dir, s->name, s->sc required; not opened). 0, or -1 with r's reason
 * recorded. */
int lab_seg_dir(lab_result *r, lab_seg *s, const char *tag);
/* lab_seg_dir, then opens (creating) the segment. 0 or -1 (r says why). */
int lab_seg_open(lab_result *r, lab_seg *s, const char *tag);
/* Closes the handle, removes the segment's file and the directory. */
void lab_seg_done(lab_seg *s);

/* n bytes of zeroed MAP_SHARED | MAP_ANONYMOUS memory (inherited by
 * fork()ed workers), or NULL. Free with munmap. */
void *lab_board(size_t n);

#endif
