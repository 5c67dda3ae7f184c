/* The SQLite backend's VFS: the default VFS with one change, in how WAL
 * frames reach the file.
 *
 * SQLite writes every WAL frame with two writes, its 24-byte header and
 * then its page, one pwrite each, and a transaction's frames one after
 * another; a keyed operation appends about eight frames in its two
 * commits, so it made about sixteen pwrite system calls (each several
 * microseconds on a virtual disk) where two would do. Here the writes to a
 * WAL file that continue one another are gathered in a buffer and go to
 * the file in one write when the frame that commits the transaction is
 * complete (its header's "database size after commit" field is not zero),
 * or before anything else is done to the file: a write elsewhere, a read,
 * a sync, a size, a truncation, a lock, a file control, the shared memory,
 * close; and whenever HOLD_MAX bytes are gathered. Every other operation
 * thus sees the file exactly as it would without this VFS, and no byte is
 * ever held past a commit: the commit frame's write takes everything
 * gathered with it, before SQLite updates the wal-index that tells other
 * connections to read the new frames. Nothing else would write them in
 * time: the shared-memory calls that publish a commit go to the database
 * file's handle, not the WAL file's, and under synchronous=NORMAL no sync
 * follows a commit. The commit frame is recognised by the frame header
 * written last (every 24-byte write to a WAL file is one), also when its
 * page did not fit behind it in the buffer and went out after it.
 * Same bytes, same order, the same syncs: durability is the default VFS's
 * (synchronous=FULL syncs the WAL file after the commit frame; with
 * effects_in_store, a begin committing under synchronous=NORMAL makes no
 * sync and the completion's FULL commit syncs the file, every frame written
 * before it included, whichever connection or process wrote them). Locking,
 * the shared memory and every other file are the default VFS's own,
 * untouched, so connections through this VFS and through any other share a
 * database as usual.
 *
 * The VFS wrapped is the default one (sqlite3_vfs_find(NULL)) when the
 * first store opens a SQLite file; a default VFS registered later is not
 * picked up by this process's stores.
 *
 * A failure to write gathered bytes is returned by the call that wrote them
 * (to SQLite, the failure a direct write would have reported a few calls
 * earlier, within the same transaction: the transaction fails). Calls that
 * cannot return one (xShmBarrier) keep it for the file's next call that
 * can. Memory: a WAL file's buffer grows to the largest run of frames
 * gathered (at most HOLD_MAX bytes) and is freed at close. */
#include <pthread.h>
#include <sqlite3.h>
#include <string.h>

#include "store/store_int.h"

#define VFS_NAME "resil-store"
/* SQLite's WAL format: a 32-byte file header, then frames of a 24-byte
 * header and a page; bytes 4..7 of a frame header are the database size
 * after the commit, not zero only in a transaction's commit frame. */
#define WAL_HDR 32
#define FRAME_HDR 24
/* At most this many bytes are gathered, and so passed to the default VFS
 * in one call: no more than SQLite itself passes (a 64 KB page; the unix
 * VFS writes at most 0x1ffff bytes per call: it masks the length). With
 * 4 KB pages a commit of up to 15 frames goes in one write; a longer run
 * of frames goes in pieces of up to this size. */
#define HOLD_MAX 65536

typedef struct wal_file {
  sqlite3_file base; /* our methods */
  int is_wal;
  int held_len;          /* bytes gathered (0: none) */
  sqlite3_int64 held_off; /* where they go in the file */
  int held_rc;           /* a failure to report at the next call that can */
  unsigned char *held;   /* the gathered bytes */
  int held_cap;
  /* The last frame header written (a write of FRAME_HDR bytes) and where:
   * its page may come after the gathered bytes were written out. */
  unsigned char last_hdr[FRAME_HDR];
  sqlite3_int64 last_hdr_off; /* -1: none */
  sqlite3_file *real;    /* the default VFS's file, right after this struct */
} wal_file;

static sqlite3_vfs *base_vfs;
static sqlite3_vfs wal_vfs;
static sqlite3_io_methods wal_methods;
static int vfs_rc = SQLITE_ERROR;
static pthread_once_t vfs_once = PTHREAD_ONCE_INIT;

static wal_file *wf(sqlite3_file *f) { return (wal_file *)f; }

/* Writes the gathered bytes out, or reports the failure kept for now. */
static int flush_held(wal_file *f) {
  if (f->held_rc) {
    int rc = f->held_rc;
    f->held_rc = SQLITE_OK;
    return rc;
  }
  if (!f->held_len) return SQLITE_OK;
  int n = f->held_len;
  f->held_len = 0;
  return f->real->pMethods->xWrite(f->real, f->held, n, f->held_off);
}

#define FLUSH_OR_RETURN(f)                                                      \
  do {                                                                         \
    int frc_ = flush_held(f);                                                  \
    if (frc_ != SQLITE_OK) return frc_;                                        \
  } while (0)

static int x_close(sqlite3_file *pf) {
  wal_file *f = wf(pf);
  int rc = flush_held(f);
  int crc = f->real->pMethods->xClose(f->real);
  sqlite3_free(f->held);
  f->held = NULL;
  return rc != SQLITE_OK ? rc : crc;
}

static int x_read(sqlite3_file *pf, void *buf, int n, sqlite3_int64 off) {
  wal_file *f = wf(pf);
  FLUSH_OR_RETURN(f);
  return f->real->pMethods->xRead(f->real, buf, n, off);
}

/* 1 when the n bytes written at off are a frame's page whose header (the
 * last one written, FRAME_HDR bytes right before it) marks the
 * transaction's commit. A page is a write longer than a frame header that
 * starts where a frame's page starts. The header is the remembered one, not
 * the buffer's: when a page did not fit behind its header, the header went
 * out first. */
static int ends_commit(const wal_file *f, sqlite3_int64 off, int n) {
  if (n <= FRAME_HDR || off < WAL_HDR + FRAME_HDR || f->last_hdr_off != off - FRAME_HDR ||
      (off - WAL_HDR - FRAME_HDR) % (n + FRAME_HDR) != 0)
    return 0;
  const unsigned char *h = f->last_hdr;
  return (h[4] | h[5] | h[6] | h[7]) != 0;
}

static int x_write(sqlite3_file *pf, const void *buf, int n, sqlite3_int64 off) {
  wal_file *f = wf(pf);
  if (!f->is_wal) return f->real->pMethods->xWrite(f->real, buf, n, off);
  if (n == FRAME_HDR) {
    memcpy(f->last_hdr, buf, FRAME_HDR);
    f->last_hdr_off = off;
  }
  if (f->held_rc ||
      (f->held_len && (off != f->held_off + f->held_len || n > HOLD_MAX - f->held_len)))
    FLUSH_OR_RETURN(f);
  if (n <= 0 || n > HOLD_MAX) return f->real->pMethods->xWrite(f->real, buf, n, off);
  int at = f->held_len;
  if (at + n > f->held_cap) {
    int cap = f->held_cap ? f->held_cap : HOLD_MAX / 8;
    while (cap < at + n) cap = cap > HOLD_MAX / 2 ? HOLD_MAX : 2 * cap;
    unsigned char *p = sqlite3_realloc(f->held, cap);
    if (!p) {
      /* No room to gather: the bytes held so far, then this write, as
       * they come. */
      FLUSH_OR_RETURN(f);
      return f->real->pMethods->xWrite(f->real, buf, n, off);
    }
    f->held = p;
    f->held_cap = cap;
  }
  if (!at) f->held_off = off;
  memcpy(f->held + at, buf, (size_t)n);
  f->held_len = at + n;
  return ends_commit(f, off, n) ? flush_held(f) : SQLITE_OK;
}

static int x_truncate(sqlite3_file *pf, sqlite3_int64 size) {
  wal_file *f = wf(pf);
  FLUSH_OR_RETURN(f);
  return f->real->pMethods->xTruncate(f->real, size);
}

static int x_sync(sqlite3_file *pf, int flags) {
  wal_file *f = wf(pf);
  FLUSH_OR_RETURN(f);
  return f->real->pMethods->xSync(f->real, flags);
}

static int x_file_size(sqlite3_file *pf, sqlite3_int64 *size) {
  wal_file *f = wf(pf);
  FLUSH_OR_RETURN(f);
  return f->real->pMethods->xFileSize(f->real, size);
}

static int x_lock(sqlite3_file *pf, int level) {
  wal_file *f = wf(pf);
  FLUSH_OR_RETURN(f);
  return f->real->pMethods->xLock(f->real, level);
}

static int x_unlock(sqlite3_file *pf, int level) {
  wal_file *f = wf(pf);
  FLUSH_OR_RETURN(f);
  return f->real->pMethods->xUnlock(f->real, level);
}

static int x_check_reserved(sqlite3_file *pf, int *out) {
  wal_file *f = wf(pf);
  FLUSH_OR_RETURN(f);
  return f->real->pMethods->xCheckReservedLock(f->real, out);
}

static int x_file_control(sqlite3_file *pf, int op, void *arg) {
  wal_file *f = wf(pf);
  FLUSH_OR_RETURN(f);
  if (op == SQLITE_FCNTL_VFSNAME) {
    int rc = f->real->pMethods->xFileControl(f->real, op, arg);
    if (rc == SQLITE_OK) {
      char *inner = *(char **)arg;
      *(char **)arg = sqlite3_mprintf(VFS_NAME "/%z", inner);
    }
    return rc;
  }
  return f->real->pMethods->xFileControl(f->real, op, arg);
}

static int x_sector_size(sqlite3_file *pf) {
  wal_file *f = wf(pf);
  return f->real->pMethods->xSectorSize(f->real);
}

static int x_device_characteristics(sqlite3_file *pf) {
  wal_file *f = wf(pf);
  return f->real->pMethods->xDeviceCharacteristics(f->real);
}

static int x_shm_map(sqlite3_file *pf, int pg, int pgsz, int extend, void volatile **pp) {
  wal_file *f = wf(pf);
  FLUSH_OR_RETURN(f);
  return f->real->pMethods->xShmMap(f->real, pg, pgsz, extend, pp);
}

static int x_shm_lock(sqlite3_file *pf, int offset, int n, int flags) {
  wal_file *f = wf(pf);
  FLUSH_OR_RETURN(f);
  return f->real->pMethods->xShmLock(f->real, offset, n, flags);
}

static void x_shm_barrier(sqlite3_file *pf) {
  wal_file *f = wf(pf);
  if (f->held_len && !f->held_rc) f->held_rc = flush_held(f);
  f->real->pMethods->xShmBarrier(f->real);
}

static int x_shm_unmap(sqlite3_file *pf, int del) {
  wal_file *f = wf(pf);
  FLUSH_OR_RETURN(f);
  return f->real->pMethods->xShmUnmap(f->real, del);
}

static int x_fetch(sqlite3_file *pf, sqlite3_int64 off, int n, void **pp) {
  wal_file *f = wf(pf);
  FLUSH_OR_RETURN(f);
  if (f->real->pMethods->iVersion < 3) {
    *pp = NULL; /* no memory mapping: SQLite reads instead */
    return SQLITE_OK;
  }
  return f->real->pMethods->xFetch(f->real, off, n, pp);
}

static int x_unfetch(sqlite3_file *pf, sqlite3_int64 off, void *p) {
  wal_file *f = wf(pf);
  FLUSH_OR_RETURN(f);
  if (f->real->pMethods->iVersion < 3) return SQLITE_OK;
  return f->real->pMethods->xUnfetch(f->real, off, p);
}

static int x_open(sqlite3_vfs *vfs, const char *name, sqlite3_file *pf, int flags,
                  int *out_flags) {
  (void)vfs;
  wal_file *f = wf(pf);
  memset(f, 0, sizeof *f);
  f->last_hdr_off = -1;
  f->real = (sqlite3_file *)(f + 1);
  int rc = base_vfs->xOpen(base_vfs, name, f->real, flags, out_flags);
  /* The default VFS's file is closed through ours whenever it has methods
   * (also after a failed open), as SQLite closes every file that has. */
  if (f->real->pMethods) {
    f->is_wal = (flags & SQLITE_OPEN_WAL) != 0;
    pf->pMethods = &wal_methods;
  }
  return rc;
}

/* The rest of the VFS is the default one's. */
static int x_delete(sqlite3_vfs *v, const char *n, int sync) {
  (void)v;
  return base_vfs->xDelete(base_vfs, n, sync);
}
static int x_access(sqlite3_vfs *v, const char *n, int flags, int *out) {
  (void)v;
  return base_vfs->xAccess(base_vfs, n, flags, out);
}
static int x_full_pathname(sqlite3_vfs *v, const char *n, int len, char *out) {
  (void)v;
  return base_vfs->xFullPathname(base_vfs, n, len, out);
}
static void *x_dl_open(sqlite3_vfs *v, const char *n) {
  (void)v;
  return base_vfs->xDlOpen(base_vfs, n);
}
static void x_dl_error(sqlite3_vfs *v, int n, char *msg) {
  (void)v;
  base_vfs->xDlError(base_vfs, n, msg);
}
static void (*x_dl_sym(sqlite3_vfs *v, void *h, const char *sym))(void) {
  (void)v;
  return base_vfs->xDlSym(base_vfs, h, sym);
}
static void x_dl_close(sqlite3_vfs *v, void *h) {
  (void)v;
  base_vfs->xDlClose(base_vfs, h);
}
static int x_randomness(sqlite3_vfs *v, int n, char *out) {
  (void)v;
  return base_vfs->xRandomness(base_vfs, n, out);
}
static int x_sleep(sqlite3_vfs *v, int us) {
  (void)v;
  return base_vfs->xSleep(base_vfs, us);
}
static int x_current_time(sqlite3_vfs *v, double *out) {
  (void)v;
  return base_vfs->xCurrentTime(base_vfs, out);
}
static int x_get_last_error(sqlite3_vfs *v, int n, char *out) {
  (void)v;
  return base_vfs->xGetLastError ? base_vfs->xGetLastError(base_vfs, n, out) : 0;
}
static int x_current_time_int64(sqlite3_vfs *v, sqlite3_int64 *out) {
  (void)v;
  return base_vfs->xCurrentTimeInt64(base_vfs, out);
}

static void vfs_register(void) {
  base_vfs = sqlite3_vfs_find(NULL);
  /* Version 1 file methods lack the shared memory WAL needs; a default VFS
   * that old is used as it is. */
  if (!base_vfs || base_vfs->iVersion < 2) return;
  wal_methods = (sqlite3_io_methods){
      .iVersion = 3,
      .xClose = x_close,
      .xRead = x_read,
      .xWrite = x_write,
      .xTruncate = x_truncate,
      .xSync = x_sync,
      .xFileSize = x_file_size,
      .xLock = x_lock,
      .xUnlock = x_unlock,
      .xCheckReservedLock = x_check_reserved,
      .xFileControl = x_file_control,
      .xSectorSize = x_sector_size,
      .xDeviceCharacteristics = x_device_characteristics,
      .xShmMap = x_shm_map,
      .xShmLock = x_shm_lock,
      .xShmBarrier = x_shm_barrier,
      .xShmUnmap = x_shm_unmap,
      .xFetch = x_fetch,
      .xUnfetch = x_unfetch,
  };
  wal_vfs = (sqlite3_vfs){
      .iVersion = 2,
      .szOsFile = (int)sizeof(wal_file) + base_vfs->szOsFile,
      .mxPathname = base_vfs->mxPathname,
      .zName = VFS_NAME,
      .xOpen = x_open,
      .xDelete = x_delete,
      .xAccess = x_access,
      .xFullPathname = x_full_pathname,
      .xDlOpen = x_dl_open,
      .xDlError = x_dl_error,
      .xDlSym = x_dl_sym,
      .xDlClose = x_dl_close,
      .xRandomness = x_randomness,
      .xSleep = x_sleep,
      .xCurrentTime = x_current_time,
      .xGetLastError = x_get_last_error,
      .xCurrentTimeInt64 = x_current_time_int64,
  };
  vfs_rc = sqlite3_vfs_register(&wal_vfs, 0);
}

const char *resil__sqlite_vfs(void) {
  pthread_once(&vfs_once, vfs_register);
  return vfs_rc == SQLITE_OK ? VFS_NAME : NULL;
}
