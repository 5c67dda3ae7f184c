#define _GNU_SOURCE /* memmem */
/* The shared segment (DESIGN §8.1): naming, permissions, header checks,
 * instance slots, races between creators, robust repair and fallback.
 * Processes are real (fork); every child is waited for. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "test_util.h"

#include "resil/bulkhead.h"
#include "resil/metrics.h"
#include "resil/ratelimit.h"
#include "resil/retry.h"
#include "resil/shared.h"
#include "shared/shared_int.h"

/* A configuration record as a policy would pass one. */
typedef struct rec {
  int64_t limit;
  int64_t period_ns;
} rec;

static const resil__shared_field rec_fields[] = {
    {"limit_for_period", offsetof(rec, limit), sizeof(int64_t)},
    {"refresh_period_ns", offsetof(rec, period_ns), sizeof(int64_t)},
};

static resil__shared_req req_of(const char *name, const rec *r, const uint64_t *init,
                                size_t ninit) {
  resil__shared_req q;
  memset(&q, 0, sizeof q);
  q.kind = RESIL__SHK_RATELIMITER;
  q.name = name;
  q.cfg = r;
  q.cfg_len = sizeof *r;
  q.fields = rec_fields;
  q.nfields = 2;
  q.init = init;
  q.init_words = ninit;
  return q;
}

static void unique_name(char *buf, size_t n, const char *tag) {
  static int seq;
  snprintf(buf, n, "t%ld-%s-%d", (long)getpid(), tag, seq++);
}

static void cfg_for(resil_shared_config *c, const char *name, const char *dir) {
  resil_shared_config_init(c);
  c->name = name;
  c->dir = dir;
  c->required = 1;
}

static void wait_ok(pid_t pid) {
  int status = 0;
  assert_int_equal(waitpid(pid, &status, 0), pid);
  assert_true(WIFEXITED(status));
  assert_int_equal(WEXITSTATUS(status), 0);
}

/* ---- naming, mode, two processes ---------------------------------------- */

static void two_processes_share_one_slot_in_a_0600_object_named_by_uid_and_layout(
    void **state) {
  (void)state;
  char name[64];
  unique_name(name, sizeof name, "two");
  resil_shared_config sc;
  cfg_for(&sc, name, NULL);
  resil_shared *seg = NULL;
  resil_error err;
  assert_int_equal(resil_shared_open(&sc, &seg, &err), RESIL_OK);
  assert_false(resil_shared_is_fallback(seg));
  assert_int_equal(resil_shared_capacity(seg), 64);
  char want[128];
  snprintf(want, sizeof want, "/resil-%lu-v%d-%s", (unsigned long)geteuid(),
           RESIL_SHARED_LAYOUT, name);
  assert_string_equal(resil_shared_path(seg), want);
  char dev[160];
  snprintf(dev, sizeof dev, "/dev/shm%s", want);
  struct stat sb;
  assert_int_equal(stat(dev, &sb), 0);
  assert_int_equal(sb.st_mode & 07777, 0600);
  assert_int_equal(sb.st_uid, geteuid());

  rec r = {100, 1000000000};
  uint64_t init[2] = {7, 9};
  resil__shared_req q = req_of("lim", &r, init, 2);
  uint64_t *st = NULL;
  assert_int_equal(resil__shared_attach(seg, &q, &st, &err), RESIL_OK);
  assert_int_equal(__atomic_load_n(&st[0], __ATOMIC_ACQUIRE), 7);
  assert_int_equal(__atomic_load_n(&st[1], __ATOMIC_ACQUIRE), 9);

  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    /* A process of its own: opens by name, finds the same slot. */
    resil_shared *s2 = NULL;
    uint64_t *w = NULL;
    resil_error e2;
    if (resil_shared_open(&sc, &s2, &e2) != RESIL_OK) {
      fprintf(stderr, "child: %s\n", e2.msg);
      _exit(1);
    }
    if (resil__shared_attach(s2, &q, &w, NULL) != RESIL_OK) _exit(2);
    if (__atomic_load_n(&w[0], __ATOMIC_ACQUIRE) != 7) _exit(3);
    __atomic_store_n(&w[0], 42, __ATOMIC_RELEASE);
    resil__shared_release(s2);
    resil_shared_close(s2);
    _exit(0);
  }
  wait_ok(pid);
  assert_int_equal(__atomic_load_n(&st[0], __ATOMIC_ACQUIRE), 42);
  assert_int_equal(resil_shared_fallbacks(seg), 0);
  resil__shared_release(seg);
  resil_shared_close(seg);
  assert_int_equal(resil_shared_unlink(&sc, NULL), RESIL_OK);
}

static int count_fn(void *user, const char *kind, const char *name, uint64_t gen) {
  int *n = user;
  (void)kind;
  (void)name;
  (void)gen;
  (*n)++;
  return 0;
}

static int first_fn(void *user, const char *kind, const char *name, uint64_t gen) {
  char *out = user;
  snprintf(out, 128, "%s/%s/%llu", kind, name, (unsigned long long)gen);
  return 1;
}

static void make_tmpdir(char *dir, size_t n) {
  snprintf(dir, n, "/tmp/resil-shared-XXXXXX");
  assert_non_null(mkdtemp(dir));
}

static void rm_dir_segment(const resil_shared_config *sc, const char *dir) {
  resil_shared_unlink(sc, NULL);
  rmdir(dir);
}

static void a_segment_with_another_mode_or_owner_is_refused_naming_it(void **state) {
  (void)state;
  char dir[64];
  make_tmpdir(dir, sizeof dir);
  resil_shared_config sc;
  cfg_for(&sc, "mode", dir);
  resil_shared *seg = NULL;
  resil_error err;
  assert_int_equal(resil_shared_open(&sc, &seg, &err), RESIL_OK);
  const char *path = resil_shared_path(seg);
  char p[256];
  snprintf(p, sizeof p, "%s", path);
  resil_shared_close(seg);
  struct stat sb;
  assert_int_equal(stat(p, &sb), 0);
  assert_int_equal(sb.st_mode & 07777, 0600);

  assert_int_equal(chmod(p, 0644), 0);
  assert_int_equal(resil_shared_open(&sc, &seg, &err), RESIL_ESTATE);
  assert_string_equal(err.field, "segment");
  assert_non_null(strstr(err.msg, "has mode 0644, expected 0600"));
  assert_int_equal(chmod(p, 0600), 0);

  if (geteuid() == 0) {
    /* Only root can give a file away: nobody's segment. */
    assert_int_equal(chown(p, 65534, 65534), 0);
    assert_int_equal(resil_shared_open(&sc, &seg, &err), RESIL_ESTATE);
    assert_non_null(strstr(err.msg, "belongs to uid 65534, not 0"));
    assert_int_equal(chown(p, 0, 0), 0);
  }
  /* A symbolic link is not followed. */
  char link[300];
  resil_shared_config lc;
  cfg_for(&lc, "link", dir);
  snprintf(link, sizeof link, "%s/resil-%lu-v%d-link", dir, (unsigned long)geteuid(),
           RESIL_SHARED_LAYOUT);
  assert_int_equal(symlink(p, link), 0);
  assert_int_equal(resil_shared_open(&lc, &seg, &err), RESIL_ESYS);
  assert_non_null(strstr(err.msg, "cannot open segment"));
  unlink(link);

  /* A FIFO under the name is refused without blocking. */
  resil_shared_config fc;
  cfg_for(&fc, "fifo", dir);
  char fifo[300];
  snprintf(fifo, sizeof fifo, "%s/resil-%lu-v%d-fifo", dir, (unsigned long)geteuid(),
           RESIL_SHARED_LAYOUT);
  assert_int_equal(mkfifo(fifo, 0600), 0);
  assert_int_equal(resil_shared_open(&fc, &seg, &err), RESIL_ESTATE);
  assert_non_null(strstr(err.msg, "is not a regular file"));
  unlink(fifo);

  /* Bad names. */
  resil_shared_config bad;
  cfg_for(&bad, "a/b", NULL);
  assert_int_equal(resil_shared_open(&bad, &seg, &err), RESIL_EINVAL);
  assert_string_equal(err.field, "name");
  bad.name = "..";
  assert_int_equal(resil_shared_open(&bad, &seg, &err), RESIL_EINVAL);
  bad.name = "ok";
  bad.capacity = 0;
  assert_int_equal(resil_shared_open(&bad, &seg, &err), RESIL_EINVAL);
  assert_string_equal(err.field, "capacity");
  bad.capacity = 64;
  bad.mode = 0666;
  assert_int_equal(resil_shared_open(&bad, &seg, &err), RESIL_EINVAL);
  assert_string_equal(err.field, "mode");
  rm_dir_segment(&sc, dir);
}

/* Finds the boot id in the header and overwrites it. */
static void fake_boot_id(const char *path) {
  char real[64] = {0};
  FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");
  assert_non_null(f);
  assert_non_null(fgets(real, sizeof real, f));
  fclose(f);
  real[strcspn(real, "\n")] = 0;
  int fd = open(path, O_RDWR);
  assert_true(fd >= 0);
  char hdr[4096];
  assert_int_equal(pread(fd, hdr, sizeof hdr, 0), (ssize_t)sizeof hdr);
  char *at = memmem(hdr, sizeof hdr, real, strlen(real));
  assert_non_null(at);
  memset(at, 'f', strlen(real));
  assert_int_equal(pwrite(fd, hdr, sizeof hdr, 0), (ssize_t)sizeof hdr);
  close(fd);
}

static void a_segment_from_an_earlier_boot_is_reinitialised(void **state) {
  (void)state;
  char dir[64];
  make_tmpdir(dir, sizeof dir);
  resil_shared_config sc;
  cfg_for(&sc, "boot", dir);
  resil_shared *seg = NULL;
  resil_error err;
  assert_int_equal(resil_shared_open(&sc, &seg, &err), RESIL_OK);
  rec r = {5, 10};
  uint64_t init[1] = {1};
  resil__shared_req q = req_of("old", &r, init, 1);
  uint64_t *st;
  assert_int_equal(resil__shared_attach(seg, &q, &st, &err), RESIL_OK);
  __atomic_store_n(&st[0], 99, __ATOMIC_RELAXED);
  char p[256];
  snprintf(p, sizeof p, "%s", resil_shared_path(seg));
  resil__shared_release(seg);
  resil_shared_close(seg);

  /* Same boot: the instance is there. */
  assert_int_equal(resil_shared_open(&sc, &seg, &err), RESIL_OK);
  int n = 0;
  assert_int_equal(resil_shared_foreach(seg, count_fn, &n), 1);
  resil_shared_close(seg);

  fake_boot_id(p);
  assert_int_equal(resil_shared_open(&sc, &seg, &err), RESIL_OK);
  n = 0;
  assert_int_equal(resil_shared_foreach(seg, count_fn, &n), 0);
  assert_int_equal(resil__shared_attach(seg, &q, &st, &err), RESIL_OK);
  assert_int_equal(__atomic_load_n(&st[0], __ATOMIC_RELAXED), 1);
  resil__shared_release(seg);
  resil_shared_close(seg);
  rm_dir_segment(&sc, dir);
}

/* White-box: the time namespace recorded in the header (the 8 bytes after
 * the 40-byte boot id) is another one: CLOCK_MONOTONIC would differ. */
static void a_segment_of_another_time_namespace_is_refused(void **state) {
  (void)state;
  struct stat ns;
  if (stat("/proc/self/ns/time", &ns) != 0) skip(); /* kernel without them */
  char dir[64];
  make_tmpdir(dir, sizeof dir);
  resil_shared_config sc;
  cfg_for(&sc, "timens", dir);
  resil_shared *seg = NULL;
  resil_error err;
  assert_int_equal(resil_shared_open(&sc, &seg, &err), RESIL_OK);
  char p[256];
  snprintf(p, sizeof p, "%s", resil_shared_path(seg));
  resil_shared_close(seg);
  char real[64] = {0};
  FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");
  assert_non_null(f);
  assert_non_null(fgets(real, sizeof real, f));
  fclose(f);
  real[strcspn(real, "\n")] = 0;
  int fd = open(p, O_RDWR);
  assert_true(fd >= 0);
  char hdr[4096];
  assert_int_equal(pread(fd, hdr, sizeof hdr, 0), (ssize_t)sizeof hdr);
  char *at = memmem(hdr, sizeof hdr, real, strlen(real));
  assert_non_null(at);
  uint64_t ino;
  memcpy(&ino, at + 40, sizeof ino);
  assert_int_equal(ino, (uint64_t)ns.st_ino);
  ino += 1;
  memcpy(at + 40, &ino, sizeof ino);
  assert_int_equal(pwrite(fd, hdr, sizeof hdr, 0), (ssize_t)sizeof hdr);
  close(fd);
  assert_int_equal(resil_shared_open(&sc, &seg, &err), RESIL_ESTATE);
  assert_non_null(strstr(err.msg, "was created in another time namespace"));
  rm_dir_segment(&sc, dir);
}

static void another_config_names_the_first_differing_field_and_full_is_clear(
    void **state) {
  (void)state;
  char name[64];
  unique_name(name, sizeof name, "cfg");
  resil_shared_config sc;
  cfg_for(&sc, name, NULL);
  sc.capacity = 2;
  resil_shared *seg = NULL;
  resil_error err;
  assert_int_equal(resil_shared_open(&sc, &seg, &err), RESIL_OK);
  assert_int_equal(resil_shared_capacity(seg), 2);
  rec r = {100, 1000};
  uint64_t *st;
  resil__shared_req q = req_of("a", &r, NULL, 0);
  assert_int_equal(resil__shared_attach(seg, &q, &st, &err), RESIL_OK);
  rec r2 = {50, 1000};
  resil__shared_req q2 = req_of("a", &r2, NULL, 0);
  assert_int_equal(resil__shared_attach(seg, &q2, &st, &err), RESIL_EINVAL);
  assert_string_equal(err.field, "limit_for_period");
  assert_non_null(strstr(err.msg, "ratelimiter 'a' exists in segment"));
  assert_non_null(strstr(err.msg, "with limit_for_period 100; this config has 50"));
  rec r3 = {100, 2000};
  resil__shared_req q3 = req_of("a", &r3, NULL, 0);
  assert_int_equal(resil__shared_attach(seg, &q3, &st, &err), RESIL_EINVAL);
  assert_string_equal(err.field, "refresh_period_ns");

  /* Same name, another kind: another instance. */
  resil__shared_req qb = req_of("a", &r, NULL, 0);
  qb.kind = RESIL__SHK_BULKHEAD;
  assert_int_equal(resil__shared_attach(seg, &qb, &st, &err), RESIL_OK);
  resil__shared_req qc = req_of("c", &r, NULL, 0);
  assert_int_equal(resil__shared_attach(seg, &qc, &st, &err), RESIL_ESTATE);
  assert_string_equal(err.field, "shared");
  assert_non_null(strstr(err.msg, "is full (capacity 2): no slot for ratelimiter 'c'"));

  /* Replace: a new config, a new generation, the state reset. */
  uint64_t init[1] = {5};
  resil__shared_req qr = req_of("a", &r2, init, 1);
  uint64_t *st2;
  assert_int_equal(resil__shared_replace(seg, &qr, &st2, &err), RESIL_OK);
  assert_int_equal(__atomic_load_n(&st2[0], __ATOMIC_RELAXED), 5);
  assert_int_equal(resil__shared_attach(seg, &qr, &st, &err), RESIL_OK);
  assert_ptr_equal(st, st2);
  char first[128];
  assert_int_equal(resil_shared_foreach(seg, first_fn, first), 1);
  assert_string_equal(first, "ratelimiter/a/2");

  /* Reset: back to the initial state. */
  __atomic_store_n(&st2[0], 77, __ATOMIC_RELAXED);
  __atomic_store_n(&st2[100], 77, __ATOMIC_RELAXED);
  assert_int_equal(resil_shared_reset(seg, "a", &err), RESIL_OK);
  assert_int_equal(__atomic_load_n(&st2[0], __ATOMIC_RELAXED), 5);
  assert_int_equal(__atomic_load_n(&st2[100], __ATOMIC_RELAXED), 0);
  assert_int_equal(resil_shared_reset(seg, "zz", &err), RESIL_ESTATE);
  assert_non_null(strstr(err.msg, "no instance 'zz'"));
  for (int i = 0; i < 4; i++) resil__shared_release(seg); /* a, bulkhead a, replace, attach */
  resil_shared_close(seg);
  assert_int_equal(resil_shared_unlink(&sc, NULL), RESIL_OK);
}

/* ---- races and crashes --------------------------------------------------- */

#define CREATORS 8

static void creators_racing_make_one_segment_and_one_instance(void **state) {
  (void)state;
  for (int round = 0; round < 5; round++) {
    char name[64];
    unique_name(name, sizeof name, "race");
    resil_shared_config sc;
    cfg_for(&sc, name, NULL);
    int go[2];
    assert_int_equal(pipe(go), 0);
    pid_t pids[CREATORS];
    for (int i = 0; i < CREATORS; i++) {
      pids[i] = fork();
      assert_true(pids[i] >= 0);
      if (pids[i] == 0) {
        close(go[1]);
        char c;
        if (read(go[0], &c, 1) != 1) _exit(9);
        resil_shared *s = NULL;
        uint64_t *w = NULL;
        rec r = {1, 2};
        resil__shared_req q = req_of("x", &r, NULL, 0);
        if (resil_shared_open(&sc, &s, NULL) != RESIL_OK) _exit(1);
        if (resil_shared_is_fallback(s)) _exit(2);
        if (resil__shared_attach(s, &q, &w, NULL) != RESIL_OK) _exit(3);
        __atomic_fetch_add(&w[0], 1, __ATOMIC_ACQ_REL);
        _exit(0);
      }
    }
    close(go[0]);
    char gos[CREATORS];
    memset(gos, 'g', sizeof gos);
    assert_int_equal(write(go[1], gos, sizeof gos), CREATORS);
    close(go[1]);
    for (int i = 0; i < CREATORS; i++) wait_ok(pids[i]);
    resil_shared *seg = NULL;
    assert_int_equal(resil_shared_open(&sc, &seg, NULL), RESIL_OK);
    int n = 0;
    assert_int_equal(resil_shared_foreach(seg, count_fn, &n), 1);
    rec r = {1, 2};
    resil__shared_req q = req_of("x", &r, NULL, 0);
    uint64_t *w = NULL;
    assert_int_equal(resil__shared_attach(seg, &q, &w, NULL), RESIL_OK);
    assert_int_equal(__atomic_load_n(&w[0], __ATOMIC_ACQUIRE), CREATORS);
    resil__shared_release(seg);
    resil_shared_close(seg);
    assert_int_equal(resil_shared_unlink(&sc, NULL), RESIL_OK);
  }
}

static void a_process_killed_inside_a_table_change_is_repaired_by_the_next(void **state) {
  (void)state;
  char name[64];
  unique_name(name, sizeof name, "owner");
  resil_shared_config sc;
  cfg_for(&sc, name, NULL);
  resil_shared *seg = NULL;
  assert_int_equal(resil_shared_open(&sc, &seg, NULL), RESIL_OK);
  rec r = {3, 4};
  uint64_t init[1] = {11};
  resil__shared_req q = req_of("half", &r, init, 1);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    resil_shared *s = NULL;
    if (resil_shared_open(&sc, &s, NULL) != RESIL_OK) _exit(1);
    if (resil__shared_test_die_mid_apply(s, &q, NULL) != RESIL_OK) _exit(2);
    kill(getpid(), SIGKILL); /* holding the table mutex, op = 1 */
    _exit(3);
  }
  int status = 0;
  assert_int_equal(waitpid(pid, &status, 0), pid);
  assert_true(WIFSIGNALED(status));
  /* The next locker gets EOWNERDEAD, applies the staged image and goes on. */
  int n = 0;
  assert_int_equal(resil_shared_foreach(seg, count_fn, &n), 1);
  uint64_t *w = NULL;
  resil_error err;
  assert_int_equal(resil__shared_attach(seg, &q, &w, &err), RESIL_OK);
  assert_int_equal(__atomic_load_n(&w[0], __ATOMIC_ACQUIRE), 11);
  /* And the mutex works again for everybody. */
  rec r2 = {5, 6};
  resil__shared_req q2 = req_of("next", &r2, NULL, 0);
  assert_int_equal(resil__shared_attach(seg, &q2, &w, &err), RESIL_OK);
  resil__shared_release(seg);
  resil__shared_release(seg);
  resil_shared_close(seg);
  assert_int_equal(resil_shared_unlink(&sc, NULL), RESIL_OK);
}

static void an_object_whose_creator_died_before_ready_is_initialised_again(void **state) {
  (void)state;
  char dir[64];
  make_tmpdir(dir, sizeof dir);
  resil_shared_config sc;
  cfg_for(&sc, "torn", dir);
  /* What a creator killed after ftruncate leaves: a zero-filled file. */
  char p[256];
  snprintf(p, sizeof p, "%s/resil-%lu-v%d-torn", dir, (unsigned long)geteuid(),
           RESIL_SHARED_LAYOUT);
  int fd = open(p, O_RDWR | O_CREAT | O_EXCL, 0600);
  assert_true(fd >= 0);
  assert_int_equal(ftruncate(fd, 65536), 0);
  close(fd);
  resil_shared *seg = NULL;
  resil_error err;
  assert_int_equal(resil_shared_open(&sc, &seg, &err), RESIL_OK);
  assert_int_equal(resil_shared_capacity(seg), 64);
  resil_shared_close(seg);
  /* Garbage is not taken for a segment. */
  fd = open(p, O_RDWR);
  assert_int_equal(pwrite(fd, "garbage!", 8, 0), 8);
  close(fd);
  assert_int_equal(resil_shared_open(&sc, &seg, &err), RESIL_ESTATE);
  assert_non_null(strstr(err.msg, "is not a resil segment"));
  rm_dir_segment(&sc, dir);
}

/* ---- fallback ------------------------------------------------------------------ */

typedef struct hook_seen {
  int calls;
  char instance[64];
  char msg[192];
} hook_seen;

static void hook(void *user, const char *instance, const resil_error *why) {
  hook_seen *h = user;
  h->calls++;
  snprintf(h->instance, sizeof h->instance, "%s", instance ? instance : "(segment)");
  snprintf(h->msg, sizeof h->msg, "%s", why->msg);
}

static void a_segment_that_cannot_be_used_falls_back_or_fails_when_required(void **state) {
  (void)state;
  resil_shared_config sc;
  cfg_for(&sc, "fb", "/nonexistent-resil-dir");
  sc.required = 0;
  hook_seen h = {0};
  sc.on_fallback = hook;
  sc.user = &h;
  resil_shared *seg = NULL;
  resil_error err;
  assert_int_equal(resil_shared_open(&sc, &seg, &err), RESIL_OK);
  assert_true(resil_shared_is_fallback(seg));
  assert_int_equal(resil_shared_fallbacks(seg), 1);
  assert_int_equal(resil_shared_capacity(seg), 0);
  assert_int_equal(h.calls, 1);
  assert_string_equal(h.instance, "(segment)");
  assert_non_null(strstr(h.msg, "cannot open segment /nonexistent-resil-dir/resil-"));
  assert_non_null(strstr(h.msg, "No such file or directory"));
  int n = 0;
  assert_int_equal(resil_shared_foreach(seg, count_fn, &n), 0);
  /* A policy asking for a slot falls back too, counted once more. */
  rec r = {1, 1};
  resil__shared_req q = req_of("p", &r, NULL, 0);
  uint64_t *st;
  assert_int_equal(resil__shared_attach(seg, &q, &st, &err), RESIL_ESTATE);
  assert_int_equal(resil__shared_fallback(seg, "p", &err), 1);
  assert_int_equal(resil_shared_fallbacks(seg), 2);
  assert_int_equal(h.calls, 2);
  assert_string_equal(h.instance, "p");
  resil_shared_close(seg);

  sc.required = 1;
  assert_int_equal(resil_shared_open(&sc, &seg, &err), RESIL_ESYS);
  assert_string_equal(err.field, "segment");
  assert_non_null(strstr(err.msg, "No such file or directory"));
  assert_int_equal(h.calls, 2);
}

/* replace_differing (the registry's mode): another config replaces the
 * instance (generation + 1, state reset) instead of failing; the same
 * config attaches (a second process applying the same change replaces
 * nothing). */
static void replace_differing_replaces_another_config_once(void **state) {
  (void)state;
  char dir[64], name[64];
  make_tmpdir(dir, sizeof dir);
  unique_name(name, sizeof name, "repl");
  resil_shared_config sc;
  cfg_for(&sc, name, dir);
  resil_shared *strict, *repl;
  assert_int_equal(resil_shared_open(&sc, &strict, NULL), RESIL_OK);
  sc.replace_differing = 1;
  assert_int_equal(resil_shared_open(&sc, &repl, NULL), RESIL_OK);
  sc.replace_differing = 2;
  resil_error err;
  resil_shared *bad;
  assert_int_equal(resil_shared_open(&sc, &bad, &err), RESIL_EINVAL);
  assert_string_equal(err.field, "replace_differing");

  rec r1 = {5, 1000000000}, r2 = {7, 1000000000};
  uint64_t init1[1] = {5}, init2[1] = {7};
  resil__shared_req q1 = req_of("lim", &r1, init1, 1), q2 = req_of("lim", &r2, init2, 1);
  uint64_t *w;
  assert_int_equal(resil__shared_attach(strict, &q1, &w, NULL), RESIL_OK);
  w[0] = 1; /* state in use */
  resil__shared_release(strict);
  /* strict: a mismatch */
  assert_int_equal(resil__shared_attach(strict, &q2, &w, &err), RESIL_EINVAL);
  assert_string_equal(err.field, "limit_for_period");
  /* replace_differing: replaced, generation 2, state reset */
  assert_int_equal(resil__shared_attach(repl, &q2, &w, NULL), RESIL_OK);
  assert_int_equal(w[0], 7);
  w[0] = 3;
  resil__shared_release(repl);
  char first[128] = "";
  assert_int_equal(resil_shared_foreach(repl, first_fn, first), 1);
  assert_string_equal(first, "ratelimiter/lim/2");
  /* the same config again: attached, not replaced */
  assert_int_equal(resil__shared_attach(repl, &q2, &w, NULL), RESIL_OK);
  assert_int_equal(w[0], 3);
  resil__shared_release(repl);
  assert_int_equal(resil_shared_foreach(repl, first_fn, first), 1);
  assert_string_equal(first, "ratelimiter/lim/2");
  resil_shared_close(strict);
  resil_shared_close(repl);
  rm_dir_segment(&sc, dir);
}

/* The policies' peeks read an instance without creating one; the
 * segment's figures render. */
static void peeks_read_without_creating_and_segment_figures_render(void **state) {
  (void)state;
  char dir[64], name[64];
  make_tmpdir(dir, sizeof dir);
  unique_name(name, sizeof name, "peek");
  resil_shared_config sc;
  cfg_for(&sc, name, dir);
  resil_shared *seg;
  /* existing_only: an absent segment is not created */
  sc.existing_only = 1;
  resil_error e0;
  assert_int_equal(resil_shared_open(&sc, &seg, &e0), RESIL_ESTATE);
  assert_non_null(strstr(e0.msg, "no segment"));
  sc.existing_only = 0;
  assert_int_equal(resil_shared_open(&sc, &seg, NULL), RESIL_OK);
  assert_string_equal(resil_shared_name(seg), name);
  resil_error err;
  int64_t avail = -1, limit = -1;
  assert_int_equal(resil_ratelimiter_shared_peek(seg, "rl", &avail, &limit, &err),
                   RESIL_ESTATE);
  int n = 0;
  assert_int_equal(resil_shared_foreach(seg, count_fn, &n), 0); /* nothing created */

  resil_ratelimiter_config rc;
  resil_ratelimiter_config_init(&rc);
  rc.name = "rl";
  rc.limit_for_period = 3;
  rc.refresh_period_ns = 3600 * 1000000000LL;
  rc.shared = seg;
  resil_ratelimiter *rl;
  assert_int_equal(resil_ratelimiter_new(&rc, &rl, NULL), RESIL_OK);
  assert_int_equal(resil_ratelimiter_acquire(rl, 1, NULL, NULL), RESIL_DECISION_GO);
  assert_int_equal(resil_ratelimiter_shared_peek(seg, "rl", &avail, &limit, NULL), RESIL_OK);
  assert_int_equal(avail, 2);
  assert_int_equal(limit, 3);

  resil_bulkhead_config bc;
  resil_bulkhead_config_init(&bc);
  bc.name = "bh";
  bc.max_concurrent = 4;
  bc.shared = seg;
  resil_bulkhead *bh;
  assert_int_equal(resil_bulkhead_new(&bc, &bh, NULL), RESIL_OK);
  assert_int_equal(resil_bulkhead_try_acquire(bh, NULL), RESIL_DECISION_GO);
  uint32_t av = 0, mx = 0;
  assert_int_equal(resil_bulkhead_shared_peek(seg, "bh", &av, &mx, NULL), RESIL_OK);
  assert_int_equal(av, 3);
  assert_int_equal(mx, 4);
  resil_bulkhead_release(bh);

  resil_retry_budget_config gc;
  resil_retry_budget_config_init(&gc);
  gc.name = "rb";
  gc.mode = RESIL_BUDGET_GRPC;
  gc.max_tokens = 10;
  gc.shared = seg;
  resil_retry_budget *rb;
  assert_int_equal(resil_retry_budget_new(&gc, &rb, NULL), RESIL_OK);
  int64_t tokens = -1;
  assert_int_equal(resil_retry_budget_shared_peek(seg, "rb", &tokens, NULL), RESIL_OK);
  assert_int_equal(tokens, resil_retry_budget_balance(rb));
  assert_int_equal(resil_bulkhead_shared_peek(seg, "rl", &av, &mx, &err), RESIL_ESTATE);

  resil_metrics *m;
  assert_int_equal(resil_metrics_new(NULL, &m), RESIL_OK);
  assert_int_equal(resil_shared_metrics_add(m, "app", seg), RESIL_OK);
  char *text;
  assert_int_equal(resil_metrics_render_alloc(m, &text, NULL), RESIL_OK);
  assert_non_null(strstr(text, "resil_shared_slots_used{name=\"app\"} 3\n"));
  assert_non_null(strstr(text, "resil_shared_slots_capacity{name=\"app\"} 64\n"));
  assert_non_null(strstr(text, "resil_shared_fallback_mode{name=\"app\"} 0\n"));
  assert_non_null(strstr(text, "# TYPE resil_shared_fallback_total counter\n"));
  assert_non_null(strstr(text, "resil_shared_fallback_total{name=\"app\"} 0\n"));
  resil_metrics_text_free(m, text);
  resil_metrics_free(m);

  resil_retry_budget_free(rb);
  resil_bulkhead_free(bh);
  resil_ratelimiter_free(rl);
  resil_shared_close(seg);
  rm_dir_segment(&sc, dir);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(two_processes_share_one_slot_in_a_0600_object_named_by_uid_and_layout),
      cmocka_unit_test(a_segment_with_another_mode_or_owner_is_refused_naming_it),
      cmocka_unit_test(a_segment_from_an_earlier_boot_is_reinitialised),
      cmocka_unit_test(a_segment_of_another_time_namespace_is_refused),
      cmocka_unit_test(another_config_names_the_first_differing_field_and_full_is_clear),
      cmocka_unit_test(creators_racing_make_one_segment_and_one_instance),
      cmocka_unit_test(a_process_killed_inside_a_table_change_is_repaired_by_the_next),
      cmocka_unit_test(an_object_whose_creator_died_before_ready_is_initialised_again),
      cmocka_unit_test(a_segment_that_cannot_be_used_falls_back_or_fails_when_required),
      cmocka_unit_test(replace_differing_replaces_another_config_once),
      cmocka_unit_test(peeks_read_without_creating_and_segment_figures_render),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
