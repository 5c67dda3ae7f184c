#define _DEFAULT_SOURCE /* MAP_ANONYMOUS, mkdtemp */
#include "lab_procs.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
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
