/* What the lab's multi-process experiments share: a resil_shared segment
 * in a fresh temporary directory, removed afterwards (nothing is left in
 * /dev/shm), and a page the forked workers write their counts to (the M
 * family: exp_shared.c, exp_shared_chaos.c); a throwaway PostgreSQL server
 * of the lab's own (F5, exp_fleet.c). */
#ifndef RESIL_LAB_PROCS_H
#define RESIL_LAB_PROCS_H

#include <stddef.h>
#include <sys/types.h>

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

/* A throwaway PostgreSQL server that an experiment starts and stops
 * itself (`resil lab` runs without scripts/pg-start.sh): initdb and
 * postgres from $RESIL_PG_BINDIR, else Debian's /usr/lib/postgresql/<N>/bin
 * (the highest N); a new cluster in a fresh temp dir ($TMPDIR or /tmp),
 * superuser "resil" trusted, listening on 127.0.0.1 on a free port and on a
 * Unix socket in that dir; fsync and full-page writes off (the cluster
 * dies with the run; no experiment crashes the server or the machine).
 * PostgreSQL refuses to run as root: a lab run as root runs both as the
 * system user "postgres" (or "resil-pg", which scripts/pg-start.sh
 * creates) and fails saying so when neither exists. Both are started with
 * fork/exec, the server killed by the kernel if the thread that started it
 * dies (PR_SET_PDEATHSIG), and stopped by its PID. Not thread-safe: one
 * thread starts and stops a given server. */
typedef struct lab_pg {
  pid_t pid;      /* the postmaster; 0: not running */
  int port;
  char dir[96];   /* the temp dir: data/, the socket, initdb.log, server.log */
  char uri[96];   /* postgresql://resil@127.0.0.1:PORT/postgres */
} lab_pg;

/* initdb, then the server, waiting until it accepts connections (at most
 * 60 s for initdb, 30 s for the start). 0, or -1 with r's reason recorded
 * (the log's last line quoted) and nothing left running or on disk. */
int lab_pg_start(lab_result *r, lab_pg *pg);
/* Stops the server (SIGINT: a fast shutdown; SIGKILL after 10 s), reaps it
 * and removes its directory. A zeroed or stopped pg is a no-op. */
void lab_pg_stop(lab_pg *pg);

#endif
