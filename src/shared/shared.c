/* Shared segment (DESIGN §8.1): a POSIX shared-memory object or a file,
 * mapped MAP_SHARED, holding a header and a fixed table of instance slots.
 *
 * Layout (RESIL_SHARED_LAYOUT 2 since 0.2's breaker ramp: a breaker's
 * configuration record holds the ramp's fields and, with a ramp, its state
 * words hold the ramp before the windows), offsets in bytes:
 *
 *   0      header: magic, layout, ready, size, capacity, slot size, boot
 *          id, time namespace, creation time, the table mutex and the redo
 *          record (op, op_slot)
 *   4096   staging: one slot image (the redo log, below)
 *   8192   slots[capacity], 4096 bytes each: status, kind, generation,
 *          name, configuration record, initial state, then (at 512) the
 *          state words the policy owns
 *
 * Creation. Every opener takes flock(LOCK_EX) on the object (bounded:
 * LOCK_NB retried for up to 2 s) and looks at the header: an empty object,
 * one whose magic is still 0 or whose `ready` is not 1 (its initialiser
 * died: the kernel dropped its flock), or one from an earlier boot is
 * (re)initialised by the lock holder; otherwise it is checked and used.
 * `ready` is stored last, so a header that says ready is complete. The
 * flock is released explicitly (a mapping keeps the open file description
 * and its lock alive past close) and by the kernel when its holder dies,
 * so no crash wedges an opener.
 *
 * The slot table. Creating, replacing and resetting an instance happen
 * under one robust process-shared mutex in the header. Each such change is
 * "write this 4 KiB image into slot i": the image is first written to
 * staging, then op_slot = i and op = 1 are stored (op with release order),
 * then the image is copied into the slot and op is cleared. A process
 * killed anywhere in there leaves the mutex to the next locker with
 * EOWNERDEAD, which re-applies the staged image when op is 1 (the copy is
 * idempotent) and only then marks the mutex consistent. A slot is therefore
 * either free, or holds a complete (kind, name, configuration, state).
 *
 * State words are never written here except by the copy, with atomic
 * 64-bit stores (the policies of other processes may be updating them at
 * the same moment with compare-and-swap; either write wins whole). */
#define _GNU_SOURCE /* O_NOFOLLOW, flock, posix_fallocate already POSIX */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "core/internal.h"
#include "resil/shared.h"
#include "shared/shared_int.h"
#include "resil/metrics.h"

#define SH_MAGIC UINT64_C(0x4d48534c49534552) /* "RESILSHM" little-endian */
#define SH_HANDLE_MAGIC 0x5348524du          /* "SHRM" */
#define SH_SLOT_SIZE 4096u
#define SH_HEADER_SIZE 4096u
#define SH_SLOTS_OFFSET (SH_HEADER_SIZE + SH_SLOT_SIZE)
#define SH_BOOT_ID_LEN 40
#define SH_LOCK_WAIT_NS (2 * RESIL_NS_PER_S)
#define SH_NAME_BUF 72

enum { SLOT_FREE = 0, SLOT_USED = 1 };

typedef struct sh_slot {
  uint32_t status;
  uint32_t kind;
  uint64_t generation;
  char name[SH_NAME_BUF];
  uint32_t cfg_len;
  uint32_t init_words;
  unsigned char cfg[RESIL__SHARED_CFG_MAX];
  uint64_t init[RESIL__SHARED_INIT_WORDS];
  uint32_t lock_word; /* resil__shared_req.lock_word (0 in older slots) */
  unsigned char pad_[28];
  uint64_t state[RESIL__SHARED_STATE_WORDS];
} sh_slot;

_Static_assert(sizeof(sh_slot) == SH_SLOT_SIZE, "slot is 4 KiB");
_Static_assert(offsetof(sh_slot, state) % 64 == 0, "state is cache-line aligned");

typedef struct sh_header {
  uint64_t magic;
  uint32_t layout;
  _Atomic uint32_t ready;
  uint64_t size;
  uint32_t capacity;
  uint32_t slot_size;
  char boot_id[SH_BOOT_ID_LEN];
  uint64_t timens;
  int64_t created_ns;
  pthread_mutex_t mu;
  _Atomic uint32_t op; /* 1: staging is being applied to slot op_slot */
  _Atomic uint32_t op_slot;
} sh_header;

_Static_assert(sizeof(sh_header) <= SH_HEADER_SIZE, "header fits its page");

struct resil_shared {
  unsigned magic;
  _Atomic long refs;
  _Atomic uint64_t fallbacks;
  int required;
  int fallback;
  int replace_differing;
  char *name;
  resil_shared_fallback_fn on_fallback;
  void *user;
  char *path;
  unsigned char *base;
  size_t size;
  sh_header *hdr;
  sh_slot *staging;
  sh_slot *slots;
  uint32_t capacity;
};

static const char *kind_name(uint32_t kind) {
  switch (kind) {
  case RESIL__SHK_RATELIMITER: return "ratelimiter";
  case RESIL__SHK_BULKHEAD: return "bulkhead";
  case RESIL__SHK_BREAKER: return "breaker";
  case RESIL__SHK_BUDGET: return "retry_budget";
  default: return "unknown";
  }
}

/* ---- configuration ------------------------------------------------------- */

#define SH_CONFIG_MIN_SIZE                                                     \
  (offsetof(resil_shared_config, user) + sizeof(void *))

static void config_defaults(resil_shared_config *cfg) {
  memset(cfg, 0, sizeof *cfg);
  cfg->struct_size = sizeof *cfg;
  cfg->name = NULL;
  cfg->dir = NULL;
  cfg->capacity = 64;
  cfg->mode = 0600;
  cfg->required = 0;
  cfg->on_fallback = NULL;
  cfg->user = NULL;
}

void resil_shared_config_init_sized(resil_shared_config *cfg, size_t n) {
  if (!cfg) return;
  resil_shared_config full;
  config_defaults(&full);
  resil__sized_out(cfg, n, &full, sizeof full);
}

static resil_status check_name(const char *name, resil_error *err) {
  if (!name) return resil__err(err, RESIL_EINVAL, "name", "must be set");
  size_t n = strlen(name);
  if (n < 1 || n > RESIL_SHARED_NAME_MAX)
    return resil__err(err, RESIL_EINVAL, "name",
                      "must be 1..%d characters, got %zu", RESIL_SHARED_NAME_MAX, n);
  if (strcmp(name, ".") == 0 || strcmp(name, "..") == 0)
    return resil__err(err, RESIL_EINVAL, "name", "must not be \".\" or \"..\"");
  for (size_t i = 0; i < n; i++) {
    char c = name[i];
    if (!((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
          (c >= '0' && c <= '9') || c == '_' || c == '.' || c == '-'))
      return resil__err(err, RESIL_EINVAL, "name",
                        "must be made of [A-Za-z0-9_.-], got a byte 0x%02x at %zu",
                        (unsigned)(unsigned char)c, i);
  }
  return RESIL_OK;
}

static resil_status read_config(const resil_shared_config *ucfg,
                                resil_shared_config *full, resil_error *err) {
  if (!ucfg) return resil__err(err, RESIL_EINVAL, "cfg", "must not be NULL");
  config_defaults(full);
  resil_status st = resil__sized_in(full, sizeof *full, ucfg, SH_CONFIG_MIN_SIZE,
                                    "resil_shared_config",
                                    "resil_shared_config_init", err);
  if (st != RESIL_OK) return st;
  if ((st = check_name(full->name, err))) return st;
  if ((st = resil__check_range(err, "capacity", full->capacity, 1,
                               RESIL_SHARED_CAPACITY_MAX)))
    return st;
  if (full->mode != 0600 && full->mode != 0640 && full->mode != 0660)
    return resil__err(err, RESIL_EINVAL, "mode",
                      "must be 0600, 0640 or 0660, got 0%o", full->mode);
  if (full->required != 0 && full->required != 1)
    return resil__err_range(err, "required", 0, 1, full->required, NULL);
  if (full->replace_differing != 0 && full->replace_differing != 1)
    return resil__err_range(err, "replace_differing", 0, 1, full->replace_differing, NULL);
  if (full->existing_only != 0 && full->existing_only != 1)
    return resil__err_range(err, "existing_only", 0, 1, full->existing_only, NULL);
  if (full->dir && !full->dir[0])
    return resil__err(err, RESIL_EINVAL, "dir", "must be NULL or a directory");
  return RESIL_OK;
}

resil_status resil_shared_config_check(const resil_shared_config *cfg, resil_error *err) {
  resil_shared_config full;
  return read_config(cfg, &full, err);
}

/* The object's name (POSIX shm) or path (dir). */
static char *make_path(const resil_shared_config *cfg) {
  char obj[128];
  snprintf(obj, sizeof obj, "resil-%lu-v%d-%s", (unsigned long)geteuid(),
           RESIL_SHARED_LAYOUT, cfg->name);
  size_t n = (cfg->dir ? strlen(cfg->dir) : 0) + strlen(obj) + 2;
  char *p = malloc(n);
  if (!p) return NULL;
  if (cfg->dir)
    snprintf(p, n, "%s/%s", cfg->dir, obj);
  else
    snprintf(p, n, "/%s", obj);
  return p;
}

/* ---- host facts ---------------------------------------------------------- */

static void read_boot_id(char out[SH_BOOT_ID_LEN]) {
  memset(out, 0, SH_BOOT_ID_LEN);
  int fd = open("/proc/sys/kernel/random/boot_id", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return;
  ssize_t n = read(fd, out, SH_BOOT_ID_LEN - 1);
  close(fd);
  if (n <= 0) {
    memset(out, 0, SH_BOOT_ID_LEN);
    return;
  }
  for (ssize_t i = 0; i < n; i++)
    if (out[i] == '\n') out[i] = 0;
}

static uint64_t read_timens(void) {
  struct stat st;
  if (stat("/proc/self/ns/time", &st) != 0) return 0;
  return (uint64_t)st.st_ino;
}

static int64_t mono_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * RESIL_NS_PER_S + ts.tv_nsec;
}

/* ---- the table mutex and its repair --------------------------------------- */

/* Copies a slot image: the descriptive part plainly (it is read only under
 * the mutex), the state words with atomic stores (policies update them
 * without the mutex). */
static void copy_slot(sh_slot *dst, const sh_slot *src) {
  memcpy(dst, src, offsetof(sh_slot, state));
  for (size_t i = 0; i < RESIL__SHARED_STATE_WORDS; i++)
    __atomic_store_n(&dst->state[i], src->state[i], __ATOMIC_RELAXED);
  atomic_thread_fence(memory_order_release);
}

/* Writes *img into slot i through the redo log (mutex held). */
static void apply(resil_shared *seg, uint32_t i, const sh_slot *img) {
  sh_header *h = seg->hdr;
  if (img != seg->staging) memcpy(seg->staging, img, sizeof *img);
  atomic_store_explicit(&h->op_slot, i, memory_order_relaxed);
  atomic_store_explicit(&h->op, 1, memory_order_release);
  copy_slot(&seg->slots[i], seg->staging);
  atomic_store_explicit(&h->op, 0, memory_order_release);
}

/* After EOWNERDEAD: finish the change the dead owner was making. */
static void repair(resil_shared *seg) {
  sh_header *h = seg->hdr;
  if (atomic_load_explicit(&h->op, memory_order_acquire) == 1) {
    uint32_t i = atomic_load_explicit(&h->op_slot, memory_order_relaxed);
    if (i < seg->capacity) copy_slot(&seg->slots[i], seg->staging);
    atomic_store_explicit(&h->op, 0, memory_order_release);
  }
}

static resil_status lock_table(resil_shared *seg, resil_error *err) {
  int rc = pthread_mutex_lock(&seg->hdr->mu);
  if (rc == EOWNERDEAD) {
    repair(seg);
    rc = pthread_mutex_consistent(&seg->hdr->mu);
  }
  if (rc != 0)
    return resil__err(err, RESIL_ESYS, "segment", "cannot lock segment %s: %s",
                      seg->path, strerror(rc));
  return RESIL_OK;
}

static void unlock_table(resil_shared *seg) { pthread_mutex_unlock(&seg->hdr->mu); }

/* ---- opening ---------------------------------------------------------------- */

static size_t segment_size(uint32_t capacity) {
  return (size_t)SH_SLOTS_OFFSET + (size_t)capacity * SH_SLOT_SIZE;
}

/* flock(LOCK_EX), retried for up to SH_LOCK_WAIT_NS. */
static resil_status lock_file(int fd, const char *path, resil_error *err) {
  int64_t until = mono_ns() + SH_LOCK_WAIT_NS;
  for (;;) {
    if (flock(fd, LOCK_EX | LOCK_NB) == 0) return RESIL_OK;
    if (errno != EWOULDBLOCK && errno != EINTR)
      return resil__err(err, RESIL_ESYS, "segment", "flock(%s): %s", path,
                        strerror(errno));
    if (mono_ns() >= until)
      return resil__err(err, RESIL_ESTATE, "segment",
                        "segment %s is locked by another process for more than 2 s",
                        path);
    struct timespec ts = {0, 1000000};
    nanosleep(&ts, NULL);
  }
}

/* Initialises the object (its flock held): size, header, mutex. */
static resil_status init_segment(int fd, const resil_shared_config *cfg,
                                 const char *path, const char *boot_id,
                                 uint64_t timens, resil_shared *seg,
                                 resil_error *err) {
  size_t size = segment_size(cfg->capacity);
  if (fchmod(fd, (mode_t)cfg->mode) != 0)
    return resil__err(err, RESIL_ESYS, "segment", "fchmod(%s): %s", path,
                      strerror(errno));
  /* Empty first: a segment from an earlier boot comes back all zeros. */
  if (ftruncate(fd, 0) != 0 || ftruncate(fd, (off_t)size) != 0)
    return resil__err(err, RESIL_ESYS, "segment", "ftruncate(%s, %zu): %s", path,
                      size, strerror(errno));
  int rc = posix_fallocate(fd, 0, (off_t)size);
  if (rc != 0 && rc != EOPNOTSUPP && rc != EINVAL)
    return resil__err(err, RESIL_ESTATE, "segment",
                      "segment %s: no space for %zu bytes (%s)", path, size,
                      strerror(rc));
  void *base = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (base == MAP_FAILED)
    return resil__err(err, RESIL_ESYS, "segment", "mmap(%s): %s", path,
                      strerror(errno));
  sh_header *h = base;
  h->magic = SH_MAGIC;
  h->layout = RESIL_SHARED_LAYOUT;
  h->size = size;
  h->capacity = cfg->capacity;
  h->slot_size = SH_SLOT_SIZE;
  memcpy(h->boot_id, boot_id, SH_BOOT_ID_LEN);
  h->timens = timens;
  h->created_ns = mono_ns();
  atomic_store_explicit(&h->op, 0, memory_order_relaxed);
  atomic_store_explicit(&h->op_slot, 0, memory_order_relaxed);
  pthread_mutexattr_t ma;
  rc = pthread_mutexattr_init(&ma);
  if (rc == 0) rc = pthread_mutexattr_setpshared(&ma, PTHREAD_PROCESS_SHARED);
  if (rc == 0) rc = pthread_mutexattr_setrobust(&ma, PTHREAD_MUTEX_ROBUST);
  if (rc == 0) rc = pthread_mutex_init(&h->mu, &ma);
  pthread_mutexattr_destroy(&ma);
  if (rc != 0) {
    munmap(base, size);
    return resil__err(err, RESIL_ESYS, "segment",
                      "cannot create the robust mutex of %s: %s", path, strerror(rc));
  }
  atomic_store_explicit(&h->ready, 1, memory_order_release);
  seg->base = base;
  seg->size = size;
  return RESIL_OK;
}

/* Maps an initialised object and checks its header (flock held). *reinit
 * is set (nothing mapped) when it is from an earlier boot. */
static resil_status map_existing(int fd, const struct stat *st, const char *path,
                                 const char *boot_id, uint64_t timens,
                                 resil_shared *seg, int *reinit,
                                 resil_error *err) {
  sh_header h;
  *reinit = 0;
  if (pread(fd, &h, sizeof h, 0) != (ssize_t)sizeof h)
    return resil__err(err, RESIL_ESTATE, "segment",
                      "segment %s: cannot read its header", path);
  if (h.magic != SH_MAGIC)
    return resil__err(err, RESIL_ESTATE, "segment",
                      "%s is not a resil segment (bad magic)", path);
  if (h.layout != RESIL_SHARED_LAYOUT || h.slot_size != SH_SLOT_SIZE)
    return resil__err(err, RESIL_ESTATE, "segment",
                      "segment %s has layout %u, this library uses %d", path,
                      h.layout, RESIL_SHARED_LAYOUT);
  if (memcmp(h.boot_id, boot_id, SH_BOOT_ID_LEN) != 0) {
    *reinit = 1; /* an earlier boot: CLOCK_MONOTONIC restarted */
    return RESIL_OK;
  }
  if (h.timens != timens && h.timens != 0 && timens != 0)
    return resil__err(err, RESIL_ESTATE, "segment",
                      "segment %s was created in another time namespace "
                      "(CLOCK_MONOTONIC differs)",
                      path);
  if (h.capacity < 1 || h.capacity > RESIL_SHARED_CAPACITY_MAX ||
      h.size != segment_size(h.capacity) || (uint64_t)st->st_size != h.size)
    return resil__err(err, RESIL_ESTATE, "segment",
                      "segment %s: size %lld does not match its header "
                      "(capacity %u)",
                      path, (long long)st->st_size, h.capacity);
  void *base = mmap(NULL, h.size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (base == MAP_FAILED)
    return resil__err(err, RESIL_ESYS, "segment", "mmap(%s): %s", path,
                      strerror(errno));
  seg->base = base;
  seg->size = h.size;
  return RESIL_OK;
}

static resil_status open_object(const resil_shared_config *cfg, resil_shared *seg,
                                resil_error *err) {
  const char *path = seg->path;
  int fd;
  int creat = cfg->existing_only ? 0 : O_CREAT;
  /* O_NONBLOCK: a FIFO or device planted under the name does not block
   * the open (it is then refused as not a regular file). */
  if (cfg->dir)
    fd = open(path, O_RDWR | creat | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK,
              (mode_t)cfg->mode);
  else
    fd = shm_open(path, O_RDWR | creat, (mode_t)cfg->mode); /* + NOFOLLOW, CLOEXEC */
  if (fd < 0 && errno == ENOENT && cfg->existing_only)
    return resil__err(err, RESIL_ESTATE, "segment", "no segment %s", path);
  if (fd < 0)
    return resil__err(err, errno == EACCES || errno == EPERM ? RESIL_ESTATE : RESIL_ESYS,
                      "segment", "cannot open segment %s: %s", path, strerror(errno));
  resil_status st = lock_file(fd, path, err);
  if (st != RESIL_OK) goto out;
  struct stat sb;
  if (fstat(fd, &sb) != 0) {
    st = resil__err(err, RESIL_ESYS, "segment", "fstat(%s): %s", path, strerror(errno));
    goto out;
  }
  if (!S_ISREG(sb.st_mode)) {
    st = resil__err(err, RESIL_ESTATE, "segment", "segment %s is not a regular file",
                    path);
    goto out;
  }
  if (sb.st_uid != geteuid()) {
    st = resil__err(err, RESIL_ESTATE, "segment", "segment %s belongs to uid %lu, not %lu",
                    path, (unsigned long)sb.st_uid, (unsigned long)geteuid());
    goto out;
  }
  char boot_id[SH_BOOT_ID_LEN];
  read_boot_id(boot_id);
  uint64_t timens = read_timens();
  /* Uninitialised: empty, still zero, or its initialiser died. */
  int fresh = sb.st_size < (off_t)SH_SLOTS_OFFSET;
  if (!fresh) {
    sh_header h;
    if (pread(fd, &h, sizeof h, 0) != (ssize_t)sizeof h) {
      st = resil__err(err, RESIL_ESTATE, "segment", "segment %s: cannot read its header",
                      path);
      goto out;
    }
    fresh = h.magic == 0 || (h.magic == SH_MAGIC && atomic_load(&h.ready) != 1);
  }
  int reinit = 0;
  if (!fresh) {
    st = map_existing(fd, &sb, path, boot_id, timens, seg, &reinit, err);
    if (st != RESIL_OK) goto out;
  }
  if (fresh || reinit) {
    st = init_segment(fd, cfg, path, boot_id, timens, seg, err);
    if (st != RESIL_OK) goto out;
    if (fstat(fd, &sb) != 0) {
      st = resil__err(err, RESIL_ESYS, "segment", "fstat(%s): %s", path, strerror(errno));
      goto out;
    }
  }
  if ((sb.st_mode & 07777) != cfg->mode) {
    st = resil__err(err, RESIL_ESTATE, "segment", "segment %s has mode 0%o, expected 0%o",
                    path, (unsigned)(sb.st_mode & 07777), cfg->mode);
    goto out;
  }
  seg->hdr = (sh_header *)seg->base;
  seg->staging = (sh_slot *)(seg->base + SH_HEADER_SIZE);
  seg->slots = (sh_slot *)(seg->base + SH_SLOTS_OFFSET);
  seg->capacity = seg->hdr->capacity;
out:
  if (st != RESIL_OK && seg->base) {
    munmap(seg->base, seg->size);
    seg->base = NULL;
  }
  /* The mapping holds the open file description, and with it the flock:
   * closing the descriptor alone would not release it. */
  flock(fd, LOCK_UN);
  close(fd);
  return st;
}

static void tell_fallback(resil_shared *seg, const char *instance,
                          const resil_error *why) {
  atomic_fetch_add_explicit(&seg->fallbacks, 1, memory_order_relaxed);
  if (seg->on_fallback) seg->on_fallback(seg->user, instance, why);
}

resil_status resil_shared_open(const resil_shared_config *ucfg, resil_shared **out,
                               resil_error *err) {
  resil_shared_config cfg;
  resil_status st = read_config(ucfg, &cfg, err);
  if (st != RESIL_OK) return st;
  if (!out) return resil__err(err, RESIL_EINVAL, "out", "must not be NULL");
  resil_shared *seg = calloc(1, sizeof *seg);
  if (!seg) return resil__err(err, RESIL_ENOMEM, NULL, "out of memory");
  seg->path = make_path(&cfg);
  if (!seg->path) {
    free(seg);
    return resil__err(err, RESIL_ENOMEM, NULL, "out of memory");
  }
  seg->name = strdup(cfg.name);
  if (!seg->name) {
    free(seg->path);
    free(seg);
    return resil__err(err, RESIL_ENOMEM, NULL, "out of memory");
  }
  seg->required = cfg.required;
  seg->replace_differing = cfg.replace_differing;
  seg->on_fallback = cfg.on_fallback;
  seg->user = cfg.user;
  atomic_init(&seg->refs, 1);
  atomic_init(&seg->fallbacks, 0);
  resil_error why;
  resil_error_clear(&why);
  st = open_object(&cfg, seg, &why);
  if (st != RESIL_OK) {
    if (cfg.required) {
      if (err) *err = why;
      free(seg->name);
      free(seg->path);
      free(seg);
      return st;
    }
    seg->fallback = 1;
    tell_fallback(seg, NULL, &why);
  }
  seg->magic = SH_HANDLE_MAGIC;
  *out = seg;
  return RESIL_OK;
}

static int valid(const resil_shared *seg) {
  return seg && seg->magic == SH_HANDLE_MAGIC;
}

int resil__shared_valid(const resil_shared *seg) { return valid(seg); }

static void unref(resil_shared *seg) {
  if (atomic_fetch_sub_explicit(&seg->refs, 1, memory_order_acq_rel) != 1) return;
  if (seg->base) munmap(seg->base, seg->size);
  seg->magic = RESIL_MAGIC_DEAD;
  free(seg->name);
  free(seg->path);
  free(seg);
}

void resil_shared_close(resil_shared *seg) {
  if (!valid(seg)) return;
  unref(seg);
}

void resil__shared_release(resil_shared *seg) {
  if (seg) unref(seg);
}

resil_status resil_shared_unlink(const resil_shared_config *ucfg, resil_error *err) {
  resil_shared_config cfg;
  resil_status st = read_config(ucfg, &cfg, err);
  if (st != RESIL_OK) return st;
  char *path = make_path(&cfg);
  if (!path) return resil__err(err, RESIL_ENOMEM, NULL, "out of memory");
  int rc = cfg.dir ? unlink(path) : shm_unlink(path);
  if (rc != 0)
    st = resil__err(err, RESIL_ESYS, "segment", "cannot unlink %s: %s", path,
                    strerror(errno));
  free(path);
  return st;
}

int resil_shared_is_fallback(const resil_shared *seg) {
  return valid(seg) && seg->fallback;
}

uint64_t resil_shared_fallbacks(const resil_shared *seg) {
  if (!valid(seg)) return 0;
  return atomic_load_explicit(&((resil_shared *)seg)->fallbacks, memory_order_relaxed);
}

const char *resil_shared_path(const resil_shared *seg) {
  return valid(seg) ? seg->path : NULL;
}

uint32_t resil_shared_capacity(const resil_shared *seg) {
  return valid(seg) && !seg->fallback ? seg->capacity : 0;
}

int resil__shared_live(const resil_shared *seg) {
  return valid(seg) && !seg->fallback;
}

int resil__shared_fallback(resil_shared *seg, const char *instance,
                           const resil_error *why) {
  if (seg->required) return 0;
  tell_fallback(seg, instance, why);
  return 1;
}

resil_status resil__shared_join(resil_shared *seg, const void *clock, const char *what,
                                const resil__shared_req *req, uint64_t **state,
                                resil_error *err) {
  *state = NULL;
  if (!valid(seg)) return resil__err(err, RESIL_EINVAL, "shared", "is not a resil_shared handle");
  if (clock && clock != (const void *)resil_clock_system())
    return resil__err(err, RESIL_EINVAL, "clock",
                      "a shared %s needs the system clock (NULL): its times are "
                      "counted on CLOCK_MONOTONIC in every process",
                      what);
  resil_error why;
  resil_error_clear(&why);
  resil_status st;
  if (!seg->fallback)
    st = resil__shared_attach(seg, req, state, &why);
  else
    st = resil__err(&why, RESIL_ESTATE, "shared",
                    "segment %s could not be opened: per-process state", seg->path);
  if (st == RESIL_OK) return RESIL_OK;
  *state = NULL;
  /* Another config is always an error; the rest falls back unless the
   * segment is required. */
  if (st == RESIL_EINVAL || !resil__shared_fallback(seg, req->name, &why)) {
    if (err) *err = why;
    return st;
  }
  return RESIL_OK;
}

/* ---- instances ---------------------------------------------------------- */

/* The slot of (kind, name), or -1; the first free slot in *free_i (-1 if
 * none). Mutex held. */
static long find_slot(resil_shared *seg, uint32_t kind, const char *name,
                      long *free_i) {
  *free_i = -1;
  for (uint32_t i = 0; i < seg->capacity; i++) {
    const sh_slot *s = &seg->slots[i];
    if (s->status == SLOT_FREE) {
      if (*free_i < 0) *free_i = i;
      continue;
    }
    if (s->kind == kind && strncmp(s->name, name, SH_NAME_BUF) == 0) return i;
  }
  return -1;
}

/* The image of a new instance (generation gen) in staging. */
static void stage_new(resil_shared *seg, const resil__shared_req *req, uint64_t gen) {
  sh_slot *img = seg->staging;
  memset(img, 0, sizeof *img);
  img->status = SLOT_USED;
  img->kind = req->kind;
  img->generation = gen;
  memcpy(img->name, req->name, strlen(req->name));
  img->cfg_len = (uint32_t)req->cfg_len;
  memcpy(img->cfg, req->cfg, req->cfg_len);
  img->init_words = (uint32_t)req->init_words;
  img->lock_word = req->lock_word;
  for (size_t k = 0; k < req->init_words; k++) img->init[k] = img->state[k] = req->init[k];
}

/* err for a differing field of an existing instance. */
static resil_status mismatch(resil_shared *seg, const resil__shared_req *req,
                             const sh_slot *s, resil_error *err) {
  const unsigned char *mine = req->cfg;
  for (size_t f = 0; f < req->nfields; f++) {
    const resil__shared_field *fd = &req->fields[f];
    if (memcmp(mine + fd->offset, s->cfg + fd->offset, fd->size) == 0) continue;
    if (fd->size == 8) {
      int64_t theirs, ours;
      memcpy(&theirs, s->cfg + fd->offset, 8);
      memcpy(&ours, mine + fd->offset, 8);
      return resil__err(err, RESIL_EINVAL, fd->name,
                        "%s '%s' exists in segment %s with %s %lld; this config has %lld",
                        kind_name(req->kind), req->name, seg->path, fd->name,
                        (long long)theirs, (long long)ours);
    }
    return resil__err(err, RESIL_EINVAL, fd->name,
                      "%s '%s' exists in segment %s with another %s",
                      kind_name(req->kind), req->name, seg->path, fd->name);
  }
  return resil__err(err, RESIL_EINVAL, "config",
                    "%s '%s' exists in segment %s with another configuration",
                    kind_name(req->kind), req->name, seg->path);
}

/* Takes the policy lock of slot s (its lock_word), for a reset or replace
 * about to rewrite the state: waits for a live holder (policies hold it
 * for a few instructions), takes it over from a dead one (the new image
 * replaces whatever it left). Returns the token it holds the lock with, 0
 * when the slot has no policy lock. Mutex held. */
static uint64_t take_policy_lock(sh_slot *s) {
  uint32_t lw = s->lock_word;
  if (lw == 0 || lw > RESIL__SHARED_STATE_WORDS) return 0;
  uint64_t *l = &s->state[lw - 1];
  uint64_t me = resil__shared_owner_self();
  for (unsigned n = 1;; n++) {
    uint64_t cur = __atomic_load_n(l, __ATOMIC_RELAXED);
    if ((cur == 0 || (n % 4 == 0 && cur != me && resil__shared_owner_gone(cur))) &&
        __atomic_compare_exchange_n(l, &cur, me, 0, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED))
      return me;
    sched_yield();
  }
}

/* Writes img into slot i (apply) with the slot's policy lock held, and
 * releases the lock after the whole image is in. Mutex held. */
static void apply_locked(resil_shared *seg, uint32_t i, sh_slot *img) {
  sh_slot *s = &seg->slots[i];
  uint32_t lw = s->lock_word;
  uint64_t tok = take_policy_lock(s);
  if (tok) img->state[lw - 1] = tok; /* the copy keeps it held */
  apply(seg, i, img);
  if (tok) __atomic_store_n(&s->state[lw - 1], 0, __ATOMIC_RELEASE);
}

static resil_status check_req(resil_shared *seg, const resil__shared_req *req,
                              resil_error *err) {
  if (!valid(seg) || seg->fallback)
    return resil__err(err, RESIL_ESTATE, "shared", "the segment is in fallback mode");
  size_t n = req->name ? strlen(req->name) : 0;
  if (n < 1 || n > RESIL_SHARED_NAME_MAX)
    return resil__err(err, RESIL_EINVAL, "name",
                      "a shared instance's name must be 1..%d bytes, got %zu",
                      RESIL_SHARED_NAME_MAX, n);
  if (req->cfg_len > RESIL__SHARED_CFG_MAX || req->init_words > RESIL__SHARED_INIT_WORDS)
    return resil__err(err, RESIL_EINVAL, NULL, "internal: shared record too large");
  return RESIL_OK;
}

static resil_status attach(resil_shared *seg, const resil__shared_req *req,
                           int replace, uint64_t **state, resil_error *err) {
  resil_status st = check_req(seg, req, err);
  if (st != RESIL_OK) return st;
  if ((st = lock_table(seg, err))) return st;
  long free_i;
  long i = find_slot(seg, req->kind, req->name, &free_i);
  if (i >= 0 && !replace) {
    const sh_slot *s = &seg->slots[i];
    if (s->cfg_len != req->cfg_len || memcmp(s->cfg, req->cfg, req->cfg_len) != 0) {
      if (!seg->replace_differing) {
        st = mismatch(seg, req, s, err);
        goto out;
      }
      stage_new(seg, req, s->generation + 1);
      apply(seg, (uint32_t)i, seg->staging);
    }
  } else if (i >= 0) {
    stage_new(seg, req, seg->slots[i].generation + 1);
    apply_locked(seg, (uint32_t)i, seg->staging);
  } else if (free_i < 0) {
    st = resil__err(err, RESIL_ESTATE, "shared",
                    "segment %s is full (capacity %u): no slot for %s '%s'", seg->path,
                    seg->capacity, kind_name(req->kind), req->name);
    goto out;
  } else {
    i = free_i;
    stage_new(seg, req, 1);
    apply(seg, (uint32_t)i, seg->staging);
  }
  atomic_fetch_add_explicit(&seg->refs, 1, memory_order_relaxed);
  *state = seg->slots[i].state;
out:
  unlock_table(seg);
  return st;
}

resil_status resil__shared_attach(resil_shared *seg, const resil__shared_req *req,
                                  uint64_t **state, resil_error *err) {
  return attach(seg, req, 0, state, err);
}

resil_status resil__shared_replace(resil_shared *seg, const resil__shared_req *req,
                                   uint64_t **state, resil_error *err) {
  return attach(seg, req, 1, state, err);
}

resil_status resil__shared_find(resil_shared *seg, uint32_t kind, const char *name,
                                uint64_t **state, resil_error *err) {
  if (!valid(seg) || seg->fallback || !name)
    return resil__err(err, RESIL_ESTATE, "shared", "no segment");
  resil_status st = lock_table(seg, err);
  if (st != RESIL_OK) return st;
  long free_i;
  long i = find_slot(seg, kind, name, &free_i);
  if (i >= 0) {
    atomic_fetch_add_explicit(&seg->refs, 1, memory_order_relaxed);
    *state = seg->slots[i].state;
  } else {
    st = resil__err(err, RESIL_ESTATE, "instance", "no %s '%s' in segment %s",
                    kind_name(kind), name, seg->path);
  }
  unlock_table(seg);
  return st;
}

resil_status resil__shared_find_cfg(resil_shared *seg, uint32_t kind, const char *name,
                                    void *cfg, size_t cfg_len, resil_error *err) {
  if (!valid(seg) || seg->fallback || !name)
    return resil__err(err, RESIL_ESTATE, "shared", "no segment");
  resil_status st = lock_table(seg, err);
  if (st != RESIL_OK) return st;
  long free_i;
  long i = find_slot(seg, kind, name, &free_i);
  if (i < 0)
    st = resil__err(err, RESIL_ESTATE, "instance", "no %s '%s' in segment %s",
                    kind_name(kind), name, seg->path);
  else if (seg->slots[i].cfg_len != cfg_len)
    st = resil__err(err, RESIL_ESTATE, "instance",
                    "%s '%s' in segment %s has a configuration of another size",
                    kind_name(kind), name, seg->path);
  else
    memcpy(cfg, seg->slots[i].cfg, cfg_len);
  unlock_table(seg);
  return st;
}

const char *resil_shared_name(const resil_shared *seg) {
  return valid(seg) ? seg->name : NULL;
}

static int count_one(void *user, const char *kind, const char *name, uint64_t gen) {
  (void)user, (void)kind, (void)name, (void)gen;
  return 0;
}

typedef struct sh_metrics_snap {
  double used, capacity, fallback_mode, fallbacks;
} sh_metrics_snap;

static resil_status sh_metrics_snapshot(const void *obj, void *snap) {
  resil_shared *seg = (resil_shared *)obj;
  sh_metrics_snap *s = snap;
  int n = resil_shared_foreach(seg, count_one, NULL);
  s->used = n > 0 ? (double)n : 0;
  s->capacity = (double)resil_shared_capacity(seg);
  s->fallback_mode = seg->fallback ? 1 : 0;
  s->fallbacks = (double)resil_shared_fallbacks(seg);
  return RESIL_OK;
}

static const resil_metric_family sh_families[] = {
    {"resil_shared_slots_used", RESIL_METRIC_GAUGE, "Instances in the shared segment"},
    {"resil_shared_slots_capacity", RESIL_METRIC_GAUGE,
     "Instance slots of the shared segment (0 in fallback mode)"},
    {"resil_shared_fallback_mode", RESIL_METRIC_GAUGE,
     "1 when the segment could not be used and instances have per-process state"},
    {"resil_shared_fallback_total", RESIL_METRIC_COUNTER,
     "Fallbacks to per-process state (the segment, or an instance)"},
};

static void sh_metrics_emit(const void *snap, size_t family, resil_metrics_emitter *e) {
  const sh_metrics_snap *s = snap;
  double v = family == 0 ? s->used : family == 1 ? s->capacity
             : family == 2 ? s->fallback_mode : s->fallbacks;
  resil_metrics_sample(e, v, 0, NULL);
}

static const resil_metrics_source sh_source = {
    sizeof(resil_metrics_source), sh_families, sizeof sh_families / sizeof sh_families[0],
    sizeof(sh_metrics_snap), sh_metrics_snapshot, sh_metrics_emit};

resil_status resil_shared_metrics_add(struct resil_metrics *m, const char *name,
                                      resil_shared *seg) {
  if (!valid(seg)) return RESIL_EINVAL;
  return resil_metrics_add_source(m, name ? name : seg->name, &sh_source, seg);
}

int resil_shared_foreach(resil_shared *seg, resil_shared_foreach_fn fn, void *user) {
  if (!valid(seg) || !fn) return -1;
  if (seg->fallback) return 0;
  if (lock_table(seg, NULL) != RESIL_OK) return -1;
  int n = 0;
  for (uint32_t i = 0; i < seg->capacity; i++) {
    const sh_slot *s = &seg->slots[i];
    if (s->status != SLOT_USED) continue;
    char name[SH_NAME_BUF];
    memcpy(name, s->name, sizeof name);
    name[SH_NAME_BUF - 1] = 0;
    n++;
    if (fn(user, kind_name(s->kind), name, s->generation)) break;
  }
  unlock_table(seg);
  return n;
}

resil_status resil_shared_reset(resil_shared *seg, const char *instance,
                                resil_error *err) {
  if (!valid(seg) || !instance)
    return resil__err(err, RESIL_EINVAL, seg ? "instance" : "seg", "must not be NULL");
  if (seg->fallback)
    return resil__err(err, RESIL_ESTATE, "shared", "the segment is in fallback mode");
  resil_status st = lock_table(seg, err);
  if (st != RESIL_OK) return st;
  int found = 0;
  for (uint32_t i = 0; i < seg->capacity; i++) {
    sh_slot *s = &seg->slots[i];
    if (s->status != SLOT_USED || strncmp(s->name, instance, SH_NAME_BUF) != 0) continue;
    sh_slot *img = seg->staging;
    memcpy(img, s, offsetof(sh_slot, state));
    memset(img->state, 0, sizeof img->state);
    for (uint32_t k = 0; k < s->init_words && k < RESIL__SHARED_INIT_WORDS; k++)
      img->state[k] = s->init[k];
    apply_locked(seg, i, img);
    found++;
  }
  unlock_table(seg);
  if (!found)
    return resil__err(err, RESIL_ESTATE, "instance", "no instance '%s' in segment %s",
                      instance, seg->path);
  return RESIL_OK;
}

resil_status resil__shared_test_die_mid_apply(resil_shared *seg,
                                              const resil__shared_req *req,
                                              resil_error *err) {
  resil_status st = check_req(seg, req, err);
  if (st != RESIL_OK) return st;
  if ((st = lock_table(seg, err))) return st;
  long free_i;
  if (find_slot(seg, req->kind, req->name, &free_i) >= 0 || free_i < 0) {
    unlock_table(seg);
    return resil__err(err, RESIL_ESTATE, NULL, "exists or full");
  }
  stage_new(seg, req, 1);
  atomic_store_explicit(&seg->hdr->op_slot, (uint32_t)free_i, memory_order_relaxed);
  atomic_store_explicit(&seg->hdr->op, 1, memory_order_release);
  return RESIL_OK; /* mutex held, slot not written */
}

/* ---- owners of shared state ------------------------------------------------ */

/* The state char and start time of a process from /proc/<pid>/stat: 1
 * when read, 0 when the process is gone (or its stat unreadable). */
static int proc_stat(long pid, char *state, uint64_t *start) {
  char path[64], buf[1024];
  snprintf(path, sizeof path, "/proc/%ld/stat", pid);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n <= 0) return 0;
  buf[n] = 0;
  /* "pid (comm) S ppid ...": comm may hold spaces and parentheses, so the
   * fields are counted from the last ')'. */
  char *p = strrchr(buf, ')');
  if (!p || p[1] != ' ') return 0;
  p += 2;
  *state = *p;
  for (int field = 3; field < 22; field++) {
    p = strchr(p, ' ');
    if (!p) return 0;
    p++;
  }
  *start = strtoull(p, NULL, 10);
  return 1;
}

uint64_t resil__shared_owner_self(void) {
  long pid = (long)getpid();
  char st;
  uint64_t start = 0;
  if (!proc_stat(pid, &st, &start)) start = 0;
  return ((uint64_t)pid << 32) | (uint32_t)start;
}

int resil__shared_owner_gone(uint64_t word) {
  long pid = (long)(word >> 32);
  char st = 0;
  uint64_t start = 0;
  if (kill((pid_t)pid, 0) != 0 && errno == ESRCH) return 1;
  if (!proc_stat(pid, &st, &start)) return 1; /* gone between the two looks */
  return st == 'Z' || st == 'X' || (uint32_t)start != (uint32_t)word;
}
