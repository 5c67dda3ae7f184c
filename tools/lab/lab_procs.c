#define _DEFAULT_SOURCE /* MAP_ANONYMOUS, mkdtemp, setgroups */
#define _XOPEN_SOURCE 700 /* nftw */
#include "lab_procs.h"

#include "fixture/redis_server.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <grp.h>
#include <netinet/in.h>
#include <pwd.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

int lab_seg_dir(lab_result *r, lab_seg *s, const char *tag) {
  const char *tmp = getenv("TMPDIR");
  snprintf(s->dir, sizeof s->dir, "%s/resil-%s-XXXXXX",
           tmp && *tmp && strlen(tmp) < 40 ? tmp : "/tmp", tag);
  s->seg = NULL;
  if (!lab_check(r, mkdtemp(s->dir) != NULL, "mkdtemp: %s", strerror(errno))) {
    s->dir[0] = '\0';
    return -1;
  }
  snprintf(s->name, sizeof s->name, "%s-%ld", tag, (long)getpid());
  resil_shared_config_init(&s->sc);
  s->sc.name = s->name;
  s->sc.dir = s->dir;
  s->sc.required = 1;
  return 0;
}

int lab_seg_open(lab_result *r, lab_seg *s, const char *tag) {
  if (lab_seg_dir(r, s, tag) != 0) return -1;
  resil_error err;
  if (!lab_check(r, resil_shared_open(&s->sc, &s->seg, &err) == RESIL_OK, "segment: %s",
                 err.msg)) {
    s->seg = NULL;
    return -1;
  }
  return 0;
}

void lab_seg_done(lab_seg *s) {
  if (s->seg) {
    resil_shared_close(s->seg);
    (void)resil_shared_unlink(&s->sc, NULL);
    s->seg = NULL;
  }
  if (s->dir[0]) rmdir(s->dir);
  s->dir[0] = '\0';
}

void *lab_board(size_t n) {
  void *b = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (b == MAP_FAILED) return NULL;
  memset(b, 0, n);
  return b;
}

/* ---- a throwaway PostgreSQL server (lab_pg) ------------------------------ */

#define PG_MS INT64_C(1000000)

/* $RESIL_PG_BINDIR, else /usr/lib/postgresql/<N>/bin of the highest N that
 * has initdb and postgres: 1 with the directory in out, 0 (out saying what
 * was looked for) when there is none. */
static int pg_bindir(char *out, size_t n) {
  const char *env = getenv("RESIL_PG_BINDIR");
  char p[300];
  if (env && *env) {
    snprintf(out, n, "%s", env);
    snprintf(p, sizeof p, "%s/postgres", env);
    return strlen(env) < n && access(p, X_OK) == 0;
  }
  long best = -1;
  DIR *d = opendir("/usr/lib/postgresql");
  struct dirent *e;
  while (d && (e = readdir(d)) != NULL) {
    char *end = NULL;
    long v = strtol(e->d_name, &end, 10);
    if (end == e->d_name || *end || v <= best) continue;
    char q[300];
    snprintf(p, sizeof p, "/usr/lib/postgresql/%s/bin/initdb", e->d_name);
    snprintf(q, sizeof q, "/usr/lib/postgresql/%s/bin/postgres", e->d_name);
    if (access(p, X_OK) == 0 && access(q, X_OK) == 0) best = v;
  }
  if (d) closedir(d);
  if (best < 0) {
    snprintf(out, n, "no /usr/lib/postgresql/<N>/bin/initdb");
    return 0;
  }
  snprintf(out, n, "/usr/lib/postgresql/%ld/bin", best);
  return 1;
}

/* fork/exec of argv with stdin /dev/null and stdout and stderr appended to
 * log; as uid/gid when as_other. The pid, or -1. Between fork and exec only
 * async-signal-safe calls. */
static pid_t pg_spawn(char *const argv[], const char *log, int as_other, uid_t uid, gid_t gid) {
  pid_t parent = getpid();
  pid_t pid = fork();
  if (pid != 0) return pid < 0 ? -1 : pid;
  int in = open("/dev/null", O_RDONLY);
  int out = open(log, O_WRONLY | O_CREAT | O_APPEND, 0600);
  if (in < 0 || out < 0 || dup2(in, STDIN_FILENO) < 0 || dup2(out, STDOUT_FILENO) < 0 ||
      dup2(out, STDERR_FILENO) < 0)
    _exit(126);
  if (as_other && (setgroups(0, NULL) != 0 || setgid(gid) != 0 || setuid(uid) != 0)) _exit(126);
  /* After setuid, which clears it. */
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != parent) _exit(126);
  execv(argv[0], argv);
  _exit(127);
}

/* Waits for pid to end, at most timeout_ns: 1 with its wait status in
 * *status, 0 when it still runs. */
static int pg_wait(pid_t pid, int64_t timeout_ns, int *status) {
  for (int64_t waited = 0;; waited += 5 * PG_MS) {
    pid_t w = waitpid(pid, status, WNOHANG);
    if (w == pid || (w < 0 && errno != EINTR)) return 1;
    if (waited >= timeout_ns) return 0;
    struct timespec ts = {0, 5 * PG_MS};
    nanosleep(&ts, NULL);
  }
}

/* The last non-empty line of a log (at most n - 1 bytes of it). */
static void pg_log_tail(const char *path, char *out, size_t n) {
  out[0] = '\0';
  FILE *f = fopen(path, "r");
  if (!f) return;
  char line[512];
  while (fgets(line, sizeof line, f)) {
    line[strcspn(line, "\n")] = '\0';
    size_t k = strlen(line);
    if (k == 0) continue;
    if (k >= n) k = n - 1;
    memcpy(out, line, k);
    out[k] = '\0';
  }
  fclose(f);
}

/* 1 once postmaster.pid says "ready" (its 8th line, as pg_ctl -w reads). */
static int pg_ready(const lab_pg *pg) {
  char p[160];
  snprintf(p, sizeof p, "%s/data/postmaster.pid", pg->dir);
  FILE *f = fopen(p, "r");
  if (!f) return 0;
  char line[128];
  int ready = 0;
  for (int i = 1; fgets(line, sizeof line, f); i++)
    if (i == 8) ready = strncmp(line, "ready", 5) == 0;
  fclose(f);
  return ready;
}

static int pg_rm(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
  (void)sb;
  (void)flag;
  (void)ftw;
  (void)remove(path);
  return 0;
}

static void pg_kill(lab_pg *pg) {
  if (pg->pid <= 0) return;
  int st;
  kill(pg->pid, SIGINT);
  if (!pg_wait(pg->pid, 10000 * PG_MS, &st)) {
    kill(pg->pid, SIGKILL);
    while (waitpid(pg->pid, &st, 0) < 0 && errno == EINTR) {
    }
  }
  pg->pid = 0;
}

void lab_pg_stop(lab_pg *pg) {
  pg_kill(pg);
  if (pg->dir[0]) nftw(pg->dir, pg_rm, 16, FTW_DEPTH | FTW_PHYS);
  pg->dir[0] = '\0';
}

int lab_pg_start(lab_result *r, lab_pg *pg) {
  memset(pg, 0, sizeof *pg);
  char bindir[200], tail[240];
  if (!lab_check(r, pg_bindir(bindir, sizeof bindir),
                 "no PostgreSQL server binaries (%s): scripts/deps.sh installs Debian's "
                 "postgresql; RESIL_PG_BINDIR names another directory",
                 bindir))
    return -1;
  /* Who runs it: this process, or a system user when this is root. */
  int as_other = geteuid() == 0;
  uid_t uid = 0;
  gid_t gid = 0;
  if (as_other) {
    static const char *const users[] = {"postgres", "resil-pg"};
    int found = 0;
    for (int i = 0; i < 2 && !found; i++) {
      struct passwd pw, *res = NULL;
      char buf[1024];
      if (getpwnam_r(users[i], &pw, buf, sizeof buf, &res) == 0 && res) {
        uid = pw.pw_uid;
        gid = pw.pw_gid;
        found = 1;
      }
    }
    if (!lab_check(r, found,
                   "PostgreSQL refuses to run as root and there is no user postgres or "
                   "resil-pg to run it as (scripts/pg-start.sh creates resil-pg)"))
      return -1;
  }
  const char *tmp = getenv("TMPDIR");
  snprintf(pg->dir, sizeof pg->dir, "%s/resil-pg-XXXXXX",
           tmp && *tmp && strlen(tmp) < 40 ? tmp : "/tmp");
  if (!lab_check(r, mkdtemp(pg->dir) != NULL, "mkdtemp: %s", strerror(errno))) {
    pg->dir[0] = '\0';
    return -1;
  }
  if (!lab_check(r, chmod(pg->dir, 0700) == 0 && (!as_other || chown(pg->dir, uid, gid) == 0),
                 "%s: chmod/chown: %s", pg->dir, strerror(errno)))
    goto fail;
  char initdb[240], postgres[240], data[120], log[120];
  snprintf(initdb, sizeof initdb, "%s/initdb", bindir);
  snprintf(postgres, sizeof postgres, "%s/postgres", bindir);
  snprintf(data, sizeof data, "%s/data", pg->dir);
  snprintf(log, sizeof log, "%s/initdb.log", pg->dir);
  char *const iargv[] = {initdb, "-D", data, "-U", "resil", "--auth=trust", "-E", "UTF8",
                         "--locale=C", "--no-sync", NULL};
  pid_t ipid = pg_spawn(iargv, log, as_other, uid, gid);
  int st = 0;
  if (!lab_check(r, ipid > 0, "fork: %s", strerror(errno))) goto fail;
  if (!pg_wait(ipid, 60000 * PG_MS, &st)) {
    kill(ipid, SIGKILL);
    waitpid(ipid, &st, 0);
    lab_check(r, 0, "initdb did not finish within 60 s (log: %s)", log);
    goto fail;
  }
  pg_log_tail(log, tail, sizeof tail);
  if (!lab_check(r, WIFEXITED(st) && WEXITSTATUS(st) == 0, "%s failed (status %d): %s", initdb,
                 WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st), tail))
    goto fail;
  snprintf(log, sizeof log, "%s/server.log", pg->dir);
  /* A port free a moment ago; taken meanwhile, the start fails: another. */
  for (int attempt = 0; attempt < 3; attempt++) {
    if (!lab_check(r, (pg->port = resil_fx_free_port()) > 0, "no free port on 127.0.0.1")) goto fail;
    char port[16];
    snprintf(port, sizeof port, "%d", pg->port);
    char *const sargv[] = {postgres, "-D", data, "-p", port, "-k", pg->dir,
                           "-c", "listen_addresses=127.0.0.1",
                           "-c", "fsync=off", "-c", "full_page_writes=off", NULL};
    pg->pid = pg_spawn(sargv, log, as_other, uid, gid);
    if (!lab_check(r, pg->pid > 0, "fork: %s", strerror(errno))) {
      pg->pid = 0;
      goto fail;
    }
    for (int64_t waited = 0; waited < 30000 * PG_MS; waited += 10 * PG_MS) {
      if (pg_ready(pg)) {
        snprintf(pg->uri, sizeof pg->uri, "postgresql://resil@127.0.0.1:%d/postgres", pg->port);
        return 0;
      }
      if (waitpid(pg->pid, &st, WNOHANG) == pg->pid) {
        pg->pid = 0;
        break;
      }
      struct timespec ts = {0, 10 * PG_MS};
      nanosleep(&ts, NULL);
    }
    pg_kill(pg); /* not ready within 30 s, or exited */
  }
  pg_log_tail(log, tail, sizeof tail);
  lab_check(r, 0, "postgres did not start (3 ports tried): %s", tail);
fail:
  lab_pg_stop(pg);
  return -1;
}
