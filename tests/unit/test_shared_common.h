/* What the shared-segment tests share: the monotonic clock in ns, and
 * segment configs with a name of this process (PREFIX<pid>-TAG-<seq>),
 * required, each remembered so that the group's teardown removes every
 * object the file's tests created (seg_unlink_all: no segment is left in
 * /dev/shm). Header-only, one test file at a time: the file defines
 * SHARED_TEST_PREFIX ("br") before including it. */
#ifndef RESIL_TEST_SHARED_COMMON_H
#define RESIL_TEST_SHARED_COMMON_H

#include <stdio.h>
#include <time.h>
#include <unistd.h>

#include "test_util.h"

#include "resil/shared.h"

static int64_t mono(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

enum { SEG_NAMES_MAX = 256 };
static char seg_names[SEG_NAMES_MAX][RESIL_SHARED_NAME_MAX + 1];
static int seg_count;

static void seg_config(resil_shared_config *sc, char *name, size_t n, const char *tag) {
  static int seq;
  snprintf(name, n, "%s%ld-%s-%d", SHARED_TEST_PREFIX, (long)getpid(), tag, seq++);
  resil_shared_config_init(sc);
  sc->name = name;
  sc->required = 1;
  if (seg_count < SEG_NAMES_MAX) snprintf(seg_names[seg_count++], sizeof seg_names[0], "%s", name);
}

/* Opens sc's segment (required: a failure fails the test). */
static resil_shared *seg_open(resil_shared_config *sc) {
  resil_shared *seg = NULL;
  resil_error err;
  if (resil_shared_open(sc, &seg, &err) != RESIL_OK) fail_msg("%s", err.msg);
  return seg;
}

/* Closes the handle and removes the segment's object. */
static void seg_done(resil_shared *seg, resil_shared_config *sc) {
  resil_shared_close(seg);
  assert_status(RESIL_OK, resil_shared_unlink(sc, NULL));
}

/* Group teardown: unlinks every POSIX shm segment named by seg_config in
 * this process (a test that moved one to a directory removes it itself;
 * one already unlinked is ENOENT, ignored). */
static int seg_unlink_all(void **state) {
  (void)state;
  for (int i = 0; i < seg_count; i++) {
    resil_shared_config c;
    resil_shared_config_init(&c);
    c.name = seg_names[i];
    (void)resil_shared_unlink(&c, NULL);
  }
  seg_count = 0;
  return 0;
}

#endif
