/* --config FILE for the serving commands (config_serve.h). */
#include "config_serve.h"

#include <stdio.h>

#ifdef RESIL_HAVE_CONFIG

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "resil/registry.h"
#ifdef RESIL_HAVE_HTTP
#include "resil/events.h"

/* The one sink of --events (a command has one registry). */
static resil_event_sink *events_sink;
static int events_fd = -1;
static const char *events_path; /* argv's */
#endif

static void say_error(const char *prog, const char *what, const resil_registry_error *err) {
  char line[1024];
  resil_registry_error_format(err, line, sizeof line);
  fprintf(stderr, "%s: %s%s\n", prog, what, line);
}

int resil_cli_config_open(const char *prog, const char *path, resil_metrics *m,
                          resil_registry **out) {
  resil_registry_error err;
  resil_registry_error_init(&err);
  resil_registry *reg = NULL;
  if (resil_registry_load_file(path, &reg, &err) != RESIL_OK) {
    say_error(prog, "--config: ", &err);
    return -1;
  }
  resil_status st = m ? resil_registry_metrics_add(reg, m) : RESIL_OK;
  if (st != RESIL_OK) {
    fprintf(stderr, "%s: --config: cannot add its instances to /metrics: %s\n", prog,
            resil_strerror(st));
    resil_registry_free(reg);
    return -1;
  }
  *out = reg;
  return 0;
}

int resil_cli_config_reload(const char *prog, resil_registry *reg, const char *path) {
  resil_registry_error err;
  resil_registry_error_init(&err);
  if (resil_registry_reload(reg, path, &err) != RESIL_OK) {
    say_error(prog, "reload failed, configuration unchanged: ", &err);
    return -1;
  }
  resil_registry_reload_stats rs;
  if (resil_registry_last_reload(reg, &rs) == RESIL_OK)
    fprintf(stderr, "%s: reloaded %s: %zu kept, %zu replaced, %zu added, %zu removed\n", prog,
            path, rs.kept, rs.replaced, rs.added, rs.removed);
  return 0;
}

#ifdef RESIL_HAVE_HTTP
int resil_cli_config_events(const char *prog, resil_registry *reg, const char *path) {
  int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) {
    fprintf(stderr, "%s: --events: cannot open %s: %s\n", prog, path, strerror(errno));
    return -1;
  }
  resil_event_sink_config sc;
  resil_event_sink_config_init(&sc);
  sc.fd = fd;
  resil_event_sink *s = NULL;
  if (resil_event_sink_new(&sc, &s, NULL) != RESIL_OK ||
      resil_registry_events_attach(reg, s) != RESIL_OK) {
    fprintf(stderr, "%s: --events: cannot set up the event log\n", prog);
    resil_event_sink_free(s);
    close(fd);
    return -1;
  }
  events_sink = s;
  events_fd = fd;
  events_path = path;
  return 0;
}

int resil_cli_config_events_reopen(const char *prog) {
  if (events_fd < 0) return 0;
  int fd = open(events_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) {
    fprintf(stderr, "%s: --events: cannot reopen %s (still writing to the old file): %s\n",
            prog, events_path, strerror(errno));
    return -1;
  }
  /* dup2 replaces events_fd atomically: a write in progress on another
   * thread finishes on the old file, the next one goes to the new file.
   * (The process never forks: FD_CLOEXEC set just after is enough.) */
  int rc = fd == events_fd ? 0 : dup2(fd, events_fd);
  if (rc >= 0) rc = fcntl(events_fd, F_SETFD, FD_CLOEXEC);
  int e = errno;
  if (fd != events_fd) close(fd);
  if (rc < 0) {
    fprintf(stderr, "%s: --events: cannot reopen %s (still writing to the old file): %s\n",
            prog, events_path, strerror(e));
    return -1;
  }
  return 0;
}

void resil_cli_config_close(resil_registry *reg) {
  resil_registry_free(reg); /* detaches the sink */
  resil_event_sink_free(events_sink);
  events_sink = NULL;
  if (events_fd >= 0) close(events_fd);
  events_fd = -1;
  events_path = NULL;
}
#else
int resil_cli_config_events(const char *prog, resil_registry *reg, const char *path) {
  (void)reg, (void)path;
  fprintf(stderr, "%s: --events: this resil was built without libresil-http\n", prog);
  return -1;
}

void resil_cli_config_close(resil_registry *reg) { resil_registry_free(reg); }

int resil_cli_config_events_reopen(const char *prog) {
  (void)prog;
  return 0;
}
#endif

/* ---- the reload thread ---------------------------------------------------- */

struct resil_cli_reloader {
  const char *prog, *path;
  resil_registry *reg;
  pthread_t thread;
  pthread_mutex_t mu;
  pthread_cond_t cv; /* on the monotonic clock */
  int pending, stopping, ended; /* under mu */
};

static void *reloader_main(void *arg) {
  resil_cli_reloader *r = arg;
  pthread_mutex_lock(&r->mu);
  for (;;) {
    while (!r->pending && !r->stopping) pthread_cond_wait(&r->cv, &r->mu);
    if (r->stopping) break;
    r->pending = 0;
    pthread_mutex_unlock(&r->mu);
    (void)resil_cli_config_reload(r->prog, r->reg, r->path);
    pthread_mutex_lock(&r->mu);
  }
  r->ended = 1;
  pthread_cond_broadcast(&r->cv);
  pthread_mutex_unlock(&r->mu);
  return NULL;
}

int resil_cli_reloader_start(const char *prog, resil_registry *reg, const char *path,
                             resil_cli_reloader **out) {
  resil_cli_reloader *r = calloc(1, sizeof *r);
  pthread_condattr_t ca;
  int ok = r && pthread_condattr_init(&ca) == 0;
  if (ok) {
    ok = pthread_condattr_setclock(&ca, CLOCK_MONOTONIC) == 0 &&
         pthread_cond_init(&r->cv, &ca) == 0;
    pthread_condattr_destroy(&ca);
  }
  if (ok && pthread_mutex_init(&r->mu, NULL) != 0) {
    pthread_cond_destroy(&r->cv);
    ok = 0;
  }
  if (ok) {
    r->prog = prog;
    r->path = path;
    r->reg = reg;
    if (pthread_create(&r->thread, NULL, reloader_main, r) != 0) {
      pthread_mutex_destroy(&r->mu);
      pthread_cond_destroy(&r->cv);
      ok = 0;
    }
  }
  if (!ok) {
    free(r);
    fprintf(stderr, "%s: --config: cannot start the reload thread\n", prog);
    return -1;
  }
  *out = r;
  return 0;
}

void resil_cli_reloader_kick(resil_cli_reloader *r) {
  pthread_mutex_lock(&r->mu);
  r->pending = 1;
  pthread_cond_signal(&r->cv);
  pthread_mutex_unlock(&r->mu);
}

int resil_cli_reloader_stop(resil_cli_reloader *r, int wait_ms) {
  if (!r) return 0;
  struct timespec until;
  clock_gettime(CLOCK_MONOTONIC, &until);
  until.tv_sec += wait_ms / 1000;
  until.tv_nsec += (long)(wait_ms % 1000) * 1000000L;
  if (until.tv_nsec >= 1000000000L) {
    until.tv_sec++;
    until.tv_nsec -= 1000000000L;
  }
  pthread_mutex_lock(&r->mu);
  r->stopping = 1;
  pthread_cond_broadcast(&r->cv);
  while (!r->ended && pthread_cond_timedwait(&r->cv, &r->mu, &until) == 0) {
  }
  int ended = r->ended;
  pthread_mutex_unlock(&r->mu);
  if (!ended) return -1; /* r stays the running thread's */
  pthread_join(r->thread, NULL);
  pthread_mutex_destroy(&r->mu);
  pthread_cond_destroy(&r->cv);
  free(r);
  return 0;
}

#else

int resil_cli_config_open(const char *prog, const char *path, resil_metrics *m,
                          resil_registry **out) {
  (void)path, (void)m, (void)out;
  fprintf(stderr, "%s: --config: this resil was built without libresil-config (libyaml)\n",
          prog);
  return -1;
}

int resil_cli_config_reload(const char *prog, resil_registry *reg, const char *path) {
  (void)prog, (void)reg, (void)path;
  return -1;
}

int resil_cli_config_events(const char *prog, resil_registry *reg, const char *path) {
  (void)prog, (void)reg, (void)path;
  return -1;
}

void resil_cli_config_close(resil_registry *reg) { (void)reg; }

int resil_cli_config_events_reopen(const char *prog) {
  (void)prog;
  return 0;
}

/* Never started: resil_cli_config_open fails first. */
int resil_cli_reloader_start(const char *prog, resil_registry *reg, const char *path,
                             resil_cli_reloader **out) {
  (void)prog, (void)reg, (void)path, (void)out;
  return -1;
}

void resil_cli_reloader_kick(resil_cli_reloader *r) { (void)r; }

int resil_cli_reloader_stop(resil_cli_reloader *r, int wait_ms) {
  (void)r, (void)wait_ms;
  return 0;
}

#endif
