/* libresil-redis: the rate limiter on Redis (include/resil/redis.h,
 * DESIGN §8.2), plugged into libresil's limiter as a backend
 * (resil_ratelimiter_new_backed, ratelimit.h).
 *
 * I/O. hiredis only formats commands (redisFormatCommandArgv) and parses
 * replies (redisReader); the sockets are this file's: non-blocking, every
 * wait a poll() against one deadline per decision on CLOCK_MONOTONIC, and
 * every send with MSG_NOSIGNAL (hiredis's blocking context writes with
 * write(), which raises SIGPIPE on a connection Redis closed, and its
 * timeouts bound each read, not a decision). The engine path ("the engine
 * path" below) pipelines the same commands on a connection per engine
 * loop, driven by that loop.
 *
 * A connection is a mutex, a socket and a reader. A decision takes the
 * first free one (trylock), or waits for one (in turn) on
 * pthread_mutex_clocklock until its deadline. An I/O error or a timeout
 * closes the connection (the reader may hold half a reply, the socket a
 * late one); the next decision on it connects again. */
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <hiredis/hiredis.h>

#include "core/internal.h"
#include "core/redact.h"
#include "redis/redis_int.h"
#include "resil/metrics.h"
#include "resil/redis.h"

/* Numbers the script handles stay below 2^53 (Lua's doubles are exact
 * there): the config's bounds keep them below 2^50. */
#define RR_EXACT_MAX (INT64_C(1) << 50)

/* The GCRA script. ARGV: permits (0 = peek), limit_for_period, period (us),
 * burst, the longest wait a reservation may have (us). The theoretical
 * arrival time (TAT) is tat + fr / limit microseconds (0 <= fr < limit); the
 * emission interval T = period / limit is q + r / limit. A request for n
 * permits at `now` is allowed at TAT' - burst × T, where TAT' = max(now,
 * TAT) + n × T: GO when that is not after now, a reservation when it comes
 * within the longest wait (the TAT moves, the wait is rounded up to the
 * microsecond), a refusal otherwise (nothing written). The key keeps
 * "tat fr limit period" and expires once TAT has passed (a missing key is
 * the same state). Replies {allowed, wait_us} ({0, wait_us, available} for
 * a peek). */
const char resil__redis_gcra_script[] =
    "local n = tonumber(ARGV[1])\n"
    "local limit = tonumber(ARGV[2])\n"
    "local period = tonumber(ARGV[3])\n"
    "local burst = tonumber(ARGV[4])\n"
    "local maxw = tonumber(ARGV[5])\n"
    "local t = redis.call('TIME')\n"
    "local now = tonumber(t[1]) * 1000000 + tonumber(t[2])\n"
    "local q = math.floor(period / limit)\n"
    "local r = period - q * limit\n"
    "local tat, fr = now, 0\n"
    "local v = redis.call('GET', KEYS[1])\n"
    "if v then\n"
    "  local a, b, l, p = string.match(v, '^(%d+) (%d+) (%d+) (%d+)$')\n"
    "  if not a then\n"
    "    return redis.error_reply('RESIL ' .. KEYS[1] .. ' does not hold a resil rate limiter')\n"
    "  end\n"
    "  if tonumber(l) ~= limit or tonumber(p) ~= period then\n"
    "    if ARGV[6] ~= '1' then\n"
    "      return redis.error_reply('RESIL ' .. KEYS[1] .. ' holds a limit of ' .. l .. ' per ' ..\n"
    "        p .. ' us, not ' .. ARGV[2] .. ' per ' .. ARGV[3] .. ' us')\n"
    "    end\n"
    "    a, b = now, 0\n"
    "  end\n"
    "  tat = tonumber(a)\n"
    "  fr = tonumber(b)\n"
    "  if tat < now then tat = now; fr = 0 end\n"
    "end\n"
    "if n < 0 then\n"
    "  if not v then return {1, 0} end\n"
    "  local g = -n\n"
    "  local f = fr - g * r\n"
    "  local c = math.floor(f / limit)\n"
    "  local ntat = tat - g * q + c\n"
    "  local nfr = f - c * limit\n"
    "  if ntat < now then ntat = now; nfr = 0 end\n"
    "  redis.call('SET', KEYS[1], string.format('%d %d %d %d', ntat, nfr, limit, period),\n"
    "    'PX', math.floor((ntat - now) / 1000) + 1)\n"
    "  return {1, 0}\n"
    "end\n"
    "local m = n\n"
    "if m == 0 then m = 1 end\n"
    "local f = fr + m * r\n"
    "local c = math.floor(f / limit)\n"
    "local ntat = tat + m * q + c\n"
    "local nfr = f - c * limit\n"
    "local bf = burst * r\n"
    "local bc = math.floor(bf / limit)\n"
    "local aq = ntat - burst * q - bc\n"
    "local afr = nfr - (bf - bc * limit)\n"
    "if afr < 0 then afr = afr + limit; aq = aq - 1 end\n"
    "local wait = 0\n"
    "if aq > now then\n"
    "  wait = aq - now\n"
    "  if afr > 0 then wait = wait + 1 end\n"
    "elseif aq == now and afr > 0 then\n"
    "  wait = 1\n"
    "end\n"
    "if n == 0 then\n"
    "  return {0, wait, math.floor(((now - tat) * limit - fr + burst * period) / period)}\n"
    "end\n"
    "if wait > maxw then return {0, wait} end\n"
    "redis.call('SET', KEYS[1], string.format('%d %d %d %d', ntat, nfr, limit, period),\n"
    "  'PX', math.floor((ntat - now) / 1000) + 1)\n"
    "return {1, wait}\n";

typedef struct rr_uri {
  char *host;
  char port[8];
  long db;
  char *user; /* NULL: none */
  char *pass; /* NULL: no AUTH */
} rr_uri;

typedef struct rr_conn {
  pthread_mutex_t mu;
  int fd; /* -1: not connected */
  redisReader *rd;
  char sha[48]; /* the script's SHA1, from SCRIPT LOAD on this connection */
} rr_conn;

enum {
  M_DECISIONS,
  M_ERRORS,
  M_BREAKER,
  M_BUSY,
  M_OPEN,
  M_CLOSED,
  M_LOCAL,
  M_NOSCRIPT,
  M_CONNECTS,
  M_ENTERED,
  M_WRITES,
  M_GIVEN_BACK,
  M_COUNT
};

typedef struct rr {
  const resil_allocator *alloc;
  char *key;
  const char *name; /* the name in key (after the prefix) */
  rr_uri u;
  int64_t limit, period_us, burst;
  int64_t redis_timeout_ns;
  resil_redis_failure failure;
  char a_limit[24], a_period[24], a_burst[24];
  resil_breaker *br;
  resil_ratelimiter *local;
  int nconn;
  rr_conn *conns;
  _Atomic unsigned next;
  _Atomic uint64_t m[M_COUNT];
  _Atomic int64_t last_ns, max_ns, total_ns;
  _Atomic int failing; /* 1 from a decision Redis did not make to one it made */
  /* 1 until a decision of this limiter wrote its key: the script may take
   * over a key of another rate (cfg.take_over_other_rate). */
  _Atomic int take_over;
  /* The engine path: one connection per loop (see "the engine path"). */
  pthread_mutex_t amu;
  struct rr_aconn *aconns;
  int dead; /* the limiter was freed: the last loop's end frees this (amu) */
  void (*on_fallback)(void *user, const char *name, int entered, const char *cause);
  void *on_fallback_user;
} rr;

static int64_t mono_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * RESIL_NS_PER_S + ts.tv_nsec;
}

static void bump(rr *r, int k) { atomic_fetch_add_explicit(&r->m[k], 1, memory_order_relaxed); }

/* ---- the URI ------------------------------------------------------------- */

static int hexval(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

/* s[0..n) percent-decoded into a new string; NULL with *bad set when a
 * '%' is not followed by two hex digits, or out of memory (*bad 0). */
static char *pct_dup(const resil_allocator *a, const char *s, size_t n, int *bad) {
  *bad = 0;
  char *o = resil__alloc(a, n + 1);
  if (!o) return NULL;
  size_t k = 0;
  for (size_t i = 0; i < n; i++) {
    if (s[i] == '%') {
      int h = -1;
      if (i + 2 < n) {
        int hi = hexval(s[i + 1]), lo = hexval(s[i + 2]);
        if (hi >= 0 && lo >= 0) h = hi * 16 + lo;
      }
      if (h <= 0) { /* a bad escape; a NUL byte cannot be passed on either */
        *bad = 1;
        resil__free(a, o);
        return NULL;
      }
      o[k++] = (char)h;
      i += 2;
    } else {
      o[k++] = s[i];
    }
  }
  o[k] = '\0';
  return o;
}

static void uri_free(const resil_allocator *a, rr_uri *u) {
  resil__free(a, u->host);
  resil__free(a, u->user);
  if (u->pass) {
    memset(u->pass, 0, strlen(u->pass));
    resil__free(a, u->pass);
  }
  memset(u, 0, sizeof *u);
}

static resil_status uri_err(resil_error *err, const char *uri, const char *why) {
  char shown[96];
  resil__redact_excerpt(shown, sizeof shown, uri, strlen(uri), RESIL__REDACT_URL, uri);
  return resil__err(err, RESIL_EINVAL, "uri",
                    "must be redis://[[USER]:PASSWORD@]HOST[:PORT][/DB], got \"%s\": %s", shown,
                    why);
}

static resil_status parse_uri(const resil_allocator *a, const char *uri, rr_uri *u,
                              resil_error *err) {
  memset(u, 0, sizeof *u);
  if (!uri) return resil__err(err, RESIL_EINVAL, "uri", "must be set (redis://HOST:PORT/DB)");
  if (strncasecmp(uri, "redis://", 8) != 0)
    return uri_err(err, uri, "the scheme is not redis://");
  const char *s = uri + 8;
  if (strpbrk(s, "?#")) return uri_err(err, uri, "a query or fragment (not supported)");
  size_t alen = strcspn(s, "/");
  const char *at = NULL;
  for (size_t i = 0; i < alen; i++)
    if (s[i] == '@') at = s + i;
  const char *h = s;
  int bad = 0;
  if (at) {
    const char *colon = memchr(s, ':', (size_t)(at - s));
    if (!colon) return uri_err(err, uri, "userinfo must be [USER]:PASSWORD");
    if (colon > s && !(u->user = pct_dup(a, s, (size_t)(colon - s), &bad))) goto fail_dec;
    if (!(u->pass = pct_dup(a, colon + 1, (size_t)(at - colon - 1), &bad))) goto fail_dec;
    h = at + 1;
  }
  const char *end = s + alen;
  const char *hend, *p;
  if (*h == '[') {
    const char *rb = memchr(h, ']', (size_t)(end - h));
    if (!rb) {
      uri_free(a, u);
      return uri_err(err, uri, "an IPv6 address without ']'");
    }
    u->host = resil__alloc(a, (size_t)(rb - h));
    if (!u->host) goto nomem;
    memcpy(u->host, h + 1, (size_t)(rb - h - 1));
    u->host[rb - h - 1] = '\0';
    hend = rb + 1;
  } else {
    hend = h;
    while (hend < end && *hend != ':') hend++;
    u->host = resil__alloc(a, (size_t)(hend - h) + 1);
    if (!u->host) goto nomem;
    memcpy(u->host, h, (size_t)(hend - h));
    u->host[hend - h] = '\0';
  }
  if (!u->host[0]) {
    uri_free(a, u);
    return uri_err(err, uri, "no host");
  }
  long port = 6379;
  p = hend;
  if (p < end && *p == ':') {
    p++;
    port = 0;
    if (p == end) port = -1;
    for (; p < end && port >= 0; p++) {
      if (*p < '0' || *p > '9' || port > 65535) port = -1;
      else port = port * 10 + (*p - '0');
    }
  } else if (p != end) {
    port = -1;
  }
  if (port < 1 || port > 65535) {
    uri_free(a, u);
    return uri_err(err, uri, "the port must be 1..65535");
  }
  snprintf(u->port, sizeof u->port, "%ld", port);
  u->db = 0;
  if (*end == '/' && end[1]) {
    const char *d = end + 1;
    long db = 0;
    for (; *d && db >= 0; d++) {
      if (*d < '0' || *d > '9' || db > 214748364) db = -1;
      else db = db * 10 + (*d - '0');
    }
    if (db < 0 || db > 2147483647) {
      uri_free(a, u);
      return uri_err(err, uri, "the database must be 0..2147483647");
    }
    u->db = db;
  }
  return RESIL_OK;
fail_dec:
  uri_free(a, u);
  if (bad) return uri_err(err, uri, "a bad percent escape in the userinfo");
  return resil__err(err, RESIL_ENOMEM, NULL, "out of memory");
nomem:
  uri_free(a, u);
  return resil__err(err, RESIL_ENOMEM, NULL, "out of memory");
}

/* ---- the protocol: one implementation for both paths ------------------------
 *
 * The blocking path (one command, one reply, under a deadline) and the
 * engine path (commands pipelined on one non-blocking connection per loop)
 * format the same commands and read the same replies with these. */

/* SCRIPT LOAD of the GCRA script, formatted: its length, or -1. */
static int fmt_load(char **cmd) {
  const char *argv[3] = {"SCRIPT", "LOAD", resil__redis_gcra_script};
  size_t lens[3] = {6, 4, sizeof resil__redis_gcra_script - 1};
  return redisFormatCommandArgv(cmd, 3, argv, lens);
}

/* The decision's EVALSHA, formatted (its length, or -1): permits (0 = a
 * peek), and the longest wait a reservation may have, max_wait_ns less
 * the elapsed_ns the decision has already spent (waiting for a connection,
 * connecting, in the engine's queue), read when the command is made. */
static int fmt_eval(const rr *r, const char *sha, int64_t permits, int64_t max_wait_ns,
                    int64_t elapsed_ns, char **cmd) {
  char a_n[24], a_w[24];
  int64_t maxw_us = (max_wait_ns - elapsed_ns) / 1000;
  if (maxw_us < 0) maxw_us = 0;
  if (maxw_us > RR_EXACT_MAX) maxw_us = RR_EXACT_MAX;
  snprintf(a_n, sizeof a_n, "%lld", (long long)permits);
  snprintf(a_w, sizeof a_w, "%lld", (long long)maxw_us);
  /* ARGV[6] "1": take over a key of another rate (take_over_other_rate,
   * until a decision of this limiter wrote the key). */
  const char *argv[10] = {"EVALSHA", sha, "1", r->key, a_n, r->a_limit, r->a_period,
                          r->a_burst, a_w, "1"};
  int argc = atomic_load_explicit(&r->take_over, memory_order_relaxed) ? 10 : 9;
  size_t lens[10];
  for (int i = 0; i < argc; i++) lens[i] = strlen(argv[i]);
  return redisFormatCommandArgv(cmd, argc, argv, lens);
}

/* A reply to AUTH, SELECT or SCRIPT LOAD: 1 when it is a status or a
 * string (copied into copy, cap bytes, when copy is not NULL), else 0. */
static int reply_setup_ok(const redisReply *rep, char *copy, size_t cap) {
  int ok = rep->type == REDIS_REPLY_STATUS || rep->type == REDIS_REPLY_STRING;
  if (ok && copy) {
    if (rep->len >= cap) ok = 0;
    else memcpy(copy, rep->str, rep->len + 1);
  }
  return ok;
}

/* Redis no longer has the script (restart, failover, SCRIPT FLUSH). */
static int reply_noscript(const redisReply *rep) {
  return rep->type == REDIS_REPLY_ERROR && rep->str && strncmp(rep->str, "NOSCRIPT", 8) == 0;
}

/* The script's reply: {allowed, wait_us[, available]}. */
static int reply_decision_ok(const redisReply *rep) {
  return rep->type == REDIS_REPLY_ARRAY && rep->elements >= 2 &&
         rep->element[0]->type == REDIS_REPLY_INTEGER &&
         rep->element[1]->type == REDIS_REPLY_INTEGER;
}

/* ---- connections ------------------------------------------------------- */

static void conn_close(rr_conn *k) {
  if (k->fd >= 0) close(k->fd);
  k->fd = -1;
  if (k->rd) redisReaderFree(k->rd);
  k->rd = NULL;
  k->sha[0] = '\0';
}

/* 1 when fd is ready for ev before the deadline, 0 at the deadline, -1 on
 * an error. */
static int wait_fd(int fd, short ev, int64_t deadline) {
  for (;;) {
    int64_t left = deadline - mono_ns();
    if (left <= 0) return 0;
    struct pollfd pfd = {.fd = fd, .events = ev, .revents = 0};
    /* ppoll: to the nanosecond (poll's milliseconds, rounded up, would
     * overshoot the bound by up to 1 ms). */
    struct timespec ts = {.tv_sec = (time_t)(left / RESIL_NS_PER_S),
                          .tv_nsec = (long)(left % RESIL_NS_PER_S)};
    int n = ppoll(&pfd, 1, &ts, NULL);
    if (n > 0) return 1;
    if (n < 0 && errno != EINTR) return -1;
  }
}

/* One formatted command (freed here), one reply (which may be an error
 * reply). 0, or -1 (I/O, protocol or the deadline: the connection must be
 * closed). */
static int conn_cmd_raw(rr_conn *k, int64_t deadline, char *cmd, int len, redisReply **out) {
  *out = NULL;
  if (len < 0 || !cmd) return -1;
  size_t off = 0;
  int rc = 0;
  while (off < (size_t)len) {
    ssize_t w = send(k->fd, cmd + off, (size_t)len - off, MSG_NOSIGNAL);
    if (w > 0) {
      off += (size_t)w;
    } else if (w < 0 && errno == EINTR) {
      continue;
    } else if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      if (wait_fd(k->fd, POLLOUT, deadline) != 1) {
        rc = -1;
        break;
      }
    } else {
      rc = -1;
      break;
    }
  }
  redisFreeCommand(cmd);
  if (rc) return -1;
  for (;;) {
    void *reply = NULL;
    if (redisReaderGetReply(k->rd, &reply) != REDIS_OK) return -1;
    if (reply) {
      *out = reply;
      return 0;
    }
    char buf[4096];
    ssize_t n = recv(k->fd, buf, sizeof buf, 0);
    if (n > 0) {
      if (redisReaderFeed(k->rd, buf, (size_t)n) != REDIS_OK) return -1;
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      if (wait_fd(k->fd, POLLIN, deadline) != 1) return -1;
    } else {
      return -1; /* closed, or an error */
    }
  }
}

static int conn_cmd(rr_conn *k, int64_t deadline, int argc, const char **argv,
                    const size_t *lens, redisReply **out) {
  char *cmd = NULL;
  int len = redisFormatCommandArgv(&cmd, argc, argv, lens);
  return conn_cmd_raw(k, deadline, cmd, len, out);
}

/* A command whose reply must be +OK-like (status or string): 0, or -1. */
static int conn_expect(rr_conn *k, int64_t deadline, int argc, const char **argv,
                       char *copy, size_t cap) {
  size_t lens[4];
  for (int i = 0; i < argc; i++) lens[i] = strlen(argv[i]);
  redisReply *rep;
  if (conn_cmd(k, deadline, argc, argv, lens, &rep)) return -1;
  int ok = reply_setup_ok(rep, copy, cap);
  freeReplyObject(rep);
  return ok ? 0 : -1;
}

static int conn_load(rr_conn *k, int64_t deadline) {
  char *cmd = NULL;
  int len = fmt_load(&cmd);
  redisReply *rep;
  if (conn_cmd_raw(k, deadline, cmd, len, &rep)) return -1;
  int ok = reply_setup_ok(rep, k->sha, sizeof k->sha);
  freeReplyObject(rep);
  return ok ? 0 : -1;
}

/* Connects, authenticates, selects the database and loads the script,
 * all before the deadline. 0, or -1 (closed again). */
static int conn_open(rr *r, rr_conn *k, int64_t deadline) {
  struct addrinfo hints, *res = NULL;
  memset(&hints, 0, sizeof hints);
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  if (getaddrinfo(r->u.host, r->u.port, &hints, &res) != 0 || !res) return -1;
  int fd = -1;
  for (struct addrinfo *ai = res; ai && fd < 0; ai = ai->ai_next) {
    fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) continue;
    int rc = connect(fd, ai->ai_addr, ai->ai_addrlen);
    if (rc != 0 && errno == EINPROGRESS) {
      int soerr = 0;
      socklen_t sl = sizeof soerr;
      rc = wait_fd(fd, POLLOUT, deadline) == 1 &&
                   getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) == 0 && soerr == 0
               ? 0
               : -1;
    }
    if (rc != 0) {
      close(fd);
      fd = -1;
    }
  }
  freeaddrinfo(res);
  if (fd < 0) return -1;
  int one = 1;
  (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  k->fd = fd;
  k->rd = redisReaderCreate();
  if (!k->rd) {
    conn_close(k);
    return -1;
  }
  bump(r, M_CONNECTS);
  if (r->u.pass) {
    const char *argv[3] = {"AUTH", r->u.user ? r->u.user : r->u.pass, r->u.pass};
    if (conn_expect(k, deadline, r->u.user ? 3 : 2, argv, NULL, 0)) goto fail;
  }
  if (r->u.db) {
    char db[16];
    snprintf(db, sizeof db, "%ld", r->u.db);
    const char *argv[2] = {"SELECT", db};
    if (conn_expect(k, deadline, 2, argv, NULL, 0)) goto fail;
  }
  if (conn_load(k, deadline)) goto fail;
  return 0;
fail:
  conn_close(k);
  return -1;
}

/* Locks mu, waiting until the deadline (CLOCK_MONOTONIC): 0, or an
 * error number. pthread_mutex_clocklock; under ThreadSanitizer, which
 * (GCC 12's) does not intercept it and would then report every access of
 * the lock's holder as a race, pthread_mutex_timedlock at the same instant
 * on CLOCK_REALTIME (a step of that clock moves the wait's end: sanitizer
 * builds only). */
static int lock_until(pthread_mutex_t *mu, int64_t deadline) {
#if defined(__SANITIZE_THREAD__)
  struct timespec rt;
  clock_gettime(CLOCK_REALTIME, &rt);
  int64_t at = (int64_t)rt.tv_sec * RESIL_NS_PER_S + rt.tv_nsec + (deadline - mono_ns());
  struct timespec ts = {.tv_sec = (time_t)(at / RESIL_NS_PER_S),
                        .tv_nsec = (long)(at % RESIL_NS_PER_S)};
  return pthread_mutex_timedlock(mu, &ts);
#else
  struct timespec ts = {.tv_sec = (time_t)(deadline / RESIL_NS_PER_S),
                        .tv_nsec = (long)(deadline % RESIL_NS_PER_S)};
  return pthread_mutex_clocklock(mu, CLOCK_MONOTONIC, &ts);
#endif
}

/* A connection of the pool, locked; NULL when none came free before the
 * deadline. */
static rr_conn *conn_take(rr *r, int64_t deadline) {
  /* The first free one: a single caller keeps using one connection, more
   * connections are made only when callers overlap. */
  for (int i = 0; i < r->nconn; i++) {
    rr_conn *k = &r->conns[i];
    if (pthread_mutex_trylock(&k->mu) == 0) return k;
  }
  unsigned start = atomic_fetch_add_explicit(&r->next, 1, memory_order_relaxed);
  rr_conn *k = &r->conns[start % (unsigned)r->nconn];
  return lock_until(&k->mu, deadline) == 0 ? k : NULL;
}

/* ---- decisions ----------------------------------------------------------- */

typedef enum { RUN_OK, RUN_IO, RUN_REPLY } run_rc;

/* EVALSHA on k (connected first when needed), loading the script again on
 * NOSCRIPT (once). The longest wait a reservation may have is max_wait_ns
 * less the time since t0 (the wait for the connection, connecting), read
 * when the command is sent. RUN_OK with *out the script's array reply;
 * RUN_IO (the connection is closed); RUN_REPLY (an error reply or an
 * unexpected reply: the connection stays). */
static run_rc run_script(rr *r, rr_conn *k, int64_t t0, int64_t deadline, int64_t permits,
                         int64_t max_wait_ns, redisReply **out) {
  *out = NULL;
  /* A connection made before this decision may be stale (Redis restarted,
   * an idle connection dropped): when it fails before the deadline, it is
   * made again once and the command sent again. A command Redis ran whose
   * reply was lost is then run twice: a permit spent unused, never one too
   * many. */
  int fresh = k->fd < 0;
  if (fresh && conn_open(r, k, deadline)) return RUN_IO;
  for (int attempt = 0;; attempt++) {
    char *cmd = NULL;
    int len = fmt_eval(r, k->sha, permits, max_wait_ns, mono_ns() - t0, &cmd);
    redisReply *rep;
    if (conn_cmd_raw(k, deadline, cmd, len, &rep)) {
      conn_close(k);
      if (fresh || mono_ns() >= deadline || conn_open(r, k, deadline)) return RUN_IO;
      fresh = 1;
      attempt = -1; /* the new connection loaded the script */
      continue;
    }
    if (attempt == 0 && reply_noscript(rep)) {
      freeReplyObject(rep);
      bump(r, M_NOSCRIPT);
      if (conn_load(k, deadline)) {
        conn_close(k);
        return RUN_IO;
      }
      continue;
    }
    if (!reply_decision_ok(rep)) {
      freeReplyObject(rep);
      return RUN_REPLY;
    }
    *out = rep;
    return RUN_OK;
  }
}

/* The bound on a decision's wait for Redis (DESIGN 8.2): min(the
 * limiter's wait, the ctx's remaining deadline, redis_timeout_ns). The
 * limiter's wait, max_wait_ns (min of its timeout_ns and the deadline, as
 * the limiter computes it), counts when it is above 0: a caller willing
 * to wait that long for a permit is not kept longer by Redis; a fail-fast
 * limiter (timeout 0: no wait for a permit) still asks Redis, within the
 * other two. Both paths. */
static int64_t io_bound(const rr *r, const resil_ctx *ctx, int64_t max_wait_ns) {
  int64_t bound = r->redis_timeout_ns;
  if (max_wait_ns > 0 && max_wait_ns < bound) bound = max_wait_ns;
  if (ctx && ctx->deadline_ns != RESIL_NO_DEADLINE) {
    int64_t left = resil_ctx_remaining_ns(ctx);
    if (left < bound) bound = left;
  }
  return bound;
}

static void note_max(rr *r, int64_t d) {
  int64_t mx = atomic_load_explicit(&r->max_ns, memory_order_relaxed);
  while (d > mx && !atomic_compare_exchange_weak_explicit(&r->max_ns, &mx, d,
                                                          memory_order_relaxed,
                                                          memory_order_relaxed)) {
  }
}

/* A round trip ended (rc) after d ns: the breaker records it, the counters
 * count it; *cause says what a failure was. Both paths. */
static void note_round(rr *r, resil_breaker_permit *bp, run_rc rc, int64_t permits, int64_t d,
                       const char **cause) {
  resil_outcome o = rc == RUN_OK ? resil_outcome_make(RESIL_ANSWERED, RESIL_REASON_OK)
                                 : resil_outcome_make(RESIL_UNKNOWN, RESIL_REASON_TIMEOUT);
  resil_breaker_record(r->br, bp, &o, d < 0 ? 0 : d);
  if (rc == RUN_OK && permits > 0) { /* a peek is no decision */
    bump(r, M_DECISIONS);
    atomic_store_explicit(&r->last_ns, d, memory_order_relaxed);
    atomic_fetch_add_explicit(&r->total_ns, d, memory_order_relaxed);
  } else if (rc != RUN_OK) {
    bump(r, M_ERRORS);
    *cause = rc == RUN_REPLY ? "Redis answered with an error"
                             : "no answer from Redis (connection error or timeout)";
  }
}

/* The breaker's permit for a round trip: 1, or 0 (counted; *cause set). */
static int breaker_enter(rr *r, resil_breaker_permit *bp, const char **cause) {
  if (resil_breaker_try_acquire(r->br, bp) == RESIL_DECISION_GO) return 1;
  bump(r, M_BREAKER);
  *cause = "the breaker on the Redis connection is open";
  return 0;
}

static const char CAUSE_BUSY[] = "no connection came free within the bound";

/* One round trip under the breaker and the bound: RUN_OK with *out, or a
 * failure (counted; *cause says what it was). */
static run_rc decide(rr *r, const resil_ctx *ctx, int64_t permits, int64_t max_wait_ns,
                     redisReply **out, const char **cause) {
  *out = NULL;
  *cause = NULL;
  const int64_t t0 = mono_ns();
  int64_t bound = io_bound(r, ctx, max_wait_ns);
  resil_breaker_permit bp;
  if (!breaker_enter(r, &bp, cause)) return RUN_IO;
  run_rc rc = RUN_IO;
  rr_conn *k = bound > 0 ? conn_take(r, t0 + bound) : NULL;
  if (!k) {
    bump(r, M_BUSY);
    *cause = CAUSE_BUSY;
    resil_breaker_release(r->br, &bp);
  } else {
    rc = run_script(r, k, t0, t0 + bound, permits, max_wait_ns, out);
    pthread_mutex_unlock(&k->mu);
    note_round(r, &bp, rc, permits, mono_ns() - t0, cause);
  }
  note_max(r, mono_ns() - t0);
  return rc;
}

static resil_decision fallback(rr *r, int permits, const resil_ctx *ctx, int64_t *wait_ns,
                               resil_reason *why) {
  switch (r->failure) {
  case RESIL_REDIS_FAILURE_OPEN:
    bump(r, M_OPEN);
    *wait_ns = 0;
    *why = RESIL_REASON_OK;
    return RESIL_DECISION_GO;
  case RESIL_REDIS_FAILURE_LOCAL:
    bump(r, M_LOCAL);
    return resil_ratelimiter_reserve(r->local, permits, ctx, wait_ns, why);
  default:
    bump(r, M_CLOSED);
    *wait_ns = 0;
    *why = RESIL_REASON_RATE_LIMITER_UNAVAILABLE;
    return RESIL_DECISION_DENY;
  }
}

static int64_t us_to_ns(long long us) {
  return us >= INT64_MAX / 1000 ? INT64_MAX : (int64_t)us * 1000;
}

/* Redis could not decide (cause): the failure policy decides, and
 * on_fallback is told when it takes over. Both paths. */
static resil_decision decide_failed(rr *r, int permits, const resil_ctx *ctx, const char *cause,
                                    int64_t *wait_ns, resil_reason *why) {
  if (!atomic_exchange_explicit(&r->failing, 1, memory_order_acq_rel)) {
    bump(r, M_ENTERED);
    if (r->on_fallback) r->on_fallback(r->on_fallback_user, r->name, 1, cause);
  }
  return fallback(r, permits, ctx, wait_ns, why);
}

/* Redis decided (rep: reply_decision_ok): its answer, and on_fallback told
 * when Redis decides again. Both paths. */
static resil_decision decide_answered(rr *r, const redisReply *rep, int64_t *wait_ns,
                                      resil_reason *why) {
  if (atomic_load_explicit(&r->failing, memory_order_relaxed) &&
      atomic_exchange_explicit(&r->failing, 0, memory_order_acq_rel) && r->on_fallback)
    r->on_fallback(r->on_fallback_user, r->name, 0, NULL);
  long long allowed = rep->element[0]->integer, w = rep->element[1]->integer;
  *wait_ns = us_to_ns(w < 0 ? 0 : w);
  if (!allowed) {
    *why = RESIL_REASON_RATE_LIMITED;
    return RESIL_DECISION_DENY;
  }
  /* Granted: the script wrote the key under this limiter's rate. */
  if (atomic_load_explicit(&r->take_over, memory_order_relaxed))
    atomic_store_explicit(&r->take_over, 0, memory_order_relaxed);
  *why = RESIL_REASON_OK;
  return *wait_ns > 0 ? RESIL_DECISION_WAIT : RESIL_DECISION_GO;
}

/* More permits than a burst: never granted, no need to ask. Both paths. */
static int over_burst(const rr *r, int permits, int64_t *wait_ns, resil_reason *why) {
  if (permits <= r->burst) return 0;
  *wait_ns = INT64_MAX;
  *why = RESIL_REASON_RATE_LIMITED;
  return 1;
}

static resil_decision rr_reserve(void *self, int permits, const resil_ctx *ctx,
                                 int64_t max_wait_ns, int64_t *wait_ns, resil_reason *why) {
  rr *r = self;
  if (over_burst(r, permits, wait_ns, why)) return RESIL_DECISION_DENY;
  redisReply *rep;
  const char *cause;
  if (decide(r, ctx, permits, max_wait_ns, &rep, &cause) != RUN_OK)
    return decide_failed(r, permits, ctx, cause, wait_ns, why);
  resil_decision d = decide_answered(r, rep, wait_ns, why);
  freeReplyObject(rep);
  return d;
}

/* ---- the engine path ----------------------------------------------------------
 *
 * On the async engine (engine.h; reserve_async, ratelimit.h) a decision
 * never blocks the loop. Each loop that asks (each engine) gets one
 * connection of its own (rr_aconn), driven only by that loop's thread: its
 * fd is watched through the engine, its one timer is on the engine's heap.
 * The blocking pool (cfg.connections) is not used. Decisions are
 * pipelined: each EVALSHA is appended to the output buffer, written when
 * the fd is next writable (the decisions of one loop iteration go out in
 * one write), and its reply matched in FIFO order (the fifo ring: one entry
 * per command sent, setup commands included). Connecting is non-blocking
 * (the connect, AUTH, SELECT and SCRIPT LOAD pipelined); the decisions
 * that arrive meanwhile wait in wq and are sent once the script's SHA is
 * known. Each decision is bounded by io_bound (min(redis_timeout_ns, the
 * ctx's remaining deadline)) on the loop's clock: at its end the failure
 * policy answers it and its late reply, if one comes, is discarded (the
 * decision stays in the fifo without its request: an orphan). A withdrawn
 * decision becomes an orphan too. A connection error sends every pending
 * decision to the failure policy, except those sent on a connection made
 * before they began, which are sent again once on a new one within their
 * bound (as on the blocking path); NOSCRIPT loads the script once (one
 * SCRIPT LOAD for every decision pipelined before it) and sends the
 * decision again. The breaker, the counters, the failure policy and the
 * replies are the blocking path's (the functions above). */

enum { AC_CLOSED, AC_CONNECTING, AC_SETUP, AC_READY };
enum { K_EVAL, K_AUTH, K_SELECT, K_LOAD };

/* Output beyond which a decision is not queued (Redis not reading): the
 * failure policy decides, counted as busy. */
#define AC_OBUF_MAX ((size_t)4 << 20)

typedef struct rr_adec {
  resil_ratelimiter_request *q; /* NULL: answered (timed out) or withdrawn */
  struct rr_adec *next;         /* in wq, or in a list being ended       */
  struct rr_adec *due;          /* in the timer's list of ended bounds   */
  struct rr_aconn *ac;
  int64_t t0, deadline;         /* loop clock                            */
  int64_t max_wait_ns;
  int permits;
  int bp_held;   /* the breaker permit is not recorded yet              */
  int may_retry; /* began on a ready connection: sent again once on a new one */
  int noscript;  /* NOSCRIPT answered once                               */
  uint64_t seq;  /* the command's number on its connection               */
  resil_breaker_permit bp;
} rr_adec;

typedef struct rr_afifo {
  rr_adec *d; /* K_EVAL */
  int kind;
  uint64_t seq;
} rr_afifo;

typedef struct rr_aconn {
  rr *r;
  const resil_ratelimiter_loop *lp;
  struct rr_aconn *next;
  int fd, state;
  unsigned watched;
  redisReader *rd;
  char sha[48];
  char *obuf;
  size_t olen, ocap;
  rr_afifo *fifo; /* ring */
  size_t fhead, fcount, fcap;
  rr_adec *wq_head, *wq_tail; /* not sent: waiting for the connection */
  uint64_t seq, load_seq;     /* commands sent; the last SCRIPT LOAD's number */
  uint64_t gen;               /* connections made                              */
  void *timer;
  int64_t timer_at; /* INT64_MAX: not armed */
} rr_aconn;

static void ac_on_io(void *arg, int fd, unsigned events);

static int64_t ac_now(const rr_aconn *ac) { return ac->lp->now_ns(ac->lp->self); }

static void ac_watch(rr_aconn *ac) {
  unsigned ev = 0;
  if (ac->fd >= 0) {
    if (ac->state != AC_CONNECTING) ev |= RESIL_IO_READ;
    if (ac->state == AC_CONNECTING || ac->olen) ev |= RESIL_IO_WRITE;
  }
  if (ev == ac->watched) return;
  if (ac->lp->watch(ac->lp->self, ac->fd, ev, ac_on_io, ac) == 0) ac->watched = ev;
}

static int ac_append(rr_aconn *ac, char *cmd, int len) {
  if (len < 0 || !cmd) return -1;
  size_t n = (size_t)len;
  if (ac->olen + n > ac->ocap) {
    size_t nc = ac->ocap ? ac->ocap : 4096;
    while (nc < ac->olen + n) nc *= 2;
    char *b = resil__alloc(ac->r->alloc, nc);
    if (!b) {
      redisFreeCommand(cmd);
      return -1;
    }
    if (ac->olen) memcpy(b, ac->obuf, ac->olen);
    resil__free(ac->r->alloc, ac->obuf);
    ac->obuf = b;
    ac->ocap = nc;
  }
  memcpy(ac->obuf + ac->olen, cmd, n);
  ac->olen += n;
  redisFreeCommand(cmd);
  return 0;
}

static int fifo_push(rr_aconn *ac, rr_adec *d, int kind, uint64_t seq) {
  if (ac->fcount == ac->fcap) {
    size_t nc = ac->fcap ? ac->fcap * 2 : 64;
    rr_afifo *v = resil__alloc(ac->r->alloc, nc * sizeof *v);
    if (!v) return -1;
    for (size_t i = 0; i < ac->fcount; i++) v[i] = ac->fifo[(ac->fhead + i) % ac->fcap];
    resil__free(ac->r->alloc, ac->fifo);
    ac->fifo = v;
    ac->fhead = 0;
    ac->fcap = nc;
  }
  ac->fifo[(ac->fhead + ac->fcount) % ac->fcap] = (rr_afifo){d, kind, seq};
  ac->fcount++;
  return 0;
}

/* Queues a formatted command with its fifo entry: 0, or -1 (out of memory:
 * nothing queued). */
static int ac_send(rr_aconn *ac, char *cmd, int len, rr_adec *d, int kind) {
  size_t olen = ac->olen;
  if (ac_append(ac, cmd, len)) return -1;
  if (fifo_push(ac, d, kind, ac->seq + 1)) {
    ac->olen = olen;
    return -1;
  }
  ac->seq++;
  if (d) d->seq = ac->seq;
  if (kind == K_LOAD) ac->load_seq = ac->seq;
  return 0;
}

static int ac_send_eval(rr_aconn *ac, rr_adec *d) {
  char *cmd = NULL;
  int len = fmt_eval(ac->r, ac->sha, d->permits, d->max_wait_ns, ac_now(ac) - d->t0, &cmd);
  return ac_send(ac, cmd, len, d, K_EVAL);
}

static int ac_send_load(rr_aconn *ac) {
  char *cmd = NULL;
  int len = fmt_load(&cmd);
  return ac_send(ac, cmd, len, NULL, K_LOAD);
}

static void ac_free_dec(rr_aconn *ac, rr_adec *d) { resil__free(ac->r->alloc, d); }

/* The decision ends with rc (RUN_OK: rep is Redis's answer): the breaker
 * and the counters note it (unless done at its timeout), and its request,
 * if it still has one, is answered. d is freed. */
static void ac_settle(rr_aconn *ac, rr_adec *d, run_rc rc, const redisReply *rep,
                      const char *cause, int keep) {
  rr *r = ac->r;
  int64_t dur = ac_now(ac) - d->t0;
  if (d->bp_held) {
    d->bp_held = 0;
    note_round(r, &d->bp, rc, d->permits, dur, &cause);
  }
  resil_ratelimiter_request *q = d->q;
  int permits = d->permits;
  d->q = NULL;
  if (!keep) ac_free_dec(ac, d);
  if (!q) return;
  note_max(r, dur);
  q->backend = NULL;
  int64_t w = 0;
  resil_reason why = RESIL_REASON_OK;
  resil_decision dec = rc == RUN_OK ? decide_answered(r, rep, &w, &why)
                                    : decide_failed(r, permits, q->ctx, cause, &w, &why);
  q->answer(q, dec, w, why);
}

/* ac_settle, d freed. */
static void ac_end(rr_aconn *ac, rr_adec *d, run_rc rc, const redisReply *rep,
                   const char *cause) {
  ac_settle(ac, d, rc, rep, cause, 0);
}

static void ac_arm(rr_aconn *ac, int64_t at) {
  if (at >= ac->timer_at) return;
  if (ac->lp->timer_arm(ac->lp->self, ac->timer, at) == 0) ac->timer_at = at;
}

static int ac_connect(rr_aconn *ac);

/* Sends the decisions waiting for the connection (it is ready). */
static void ac_flush_wq(rr_aconn *ac) {
  while (ac->wq_head) {
    rr_adec *d = ac->wq_head;
    ac->wq_head = d->next;
    if (!ac->wq_head) ac->wq_tail = NULL;
    d->next = NULL;
    if (ac_send_eval(ac, d)) {
      bump(ac->r, M_BUSY);
      ac_end(ac, d, RUN_IO, NULL, CAUSE_BUSY); /* out of memory */
    }
  }
  ac_watch(ac);
}

static void wq_push(rr_aconn *ac, rr_adec *d) {
  d->next = NULL;
  if (ac->wq_tail) ac->wq_tail->next = d;
  else ac->wq_head = d;
  ac->wq_tail = d;
}

/* Closes the connection (cause: why) and ends what was pending on it:
 * orphans are dropped, decisions that may be retried wait for a new
 * connection, the others go to the failure policy. */
static void ac_fail(rr_aconn *ac, const char *cause) {
  if (ac->fd >= 0) {
    if (ac->watched) ac->lp->watch(ac->lp->self, ac->fd, 0, ac_on_io, ac);
    close(ac->fd);
  }
  ac->watched = 0;
  ac->fd = -1;
  ac->state = AC_CLOSED;
  if (ac->rd) redisReaderFree(ac->rd);
  ac->rd = NULL;
  ac->olen = 0;
  ac->sha[0] = '\0';
  /* What was pending, in order: the commands sent, then those not sent. */
  rr_adec *head = NULL, **tail = &head;
  for (size_t i = 0; i < ac->fcount; i++) {
    rr_afifo *f = &ac->fifo[(ac->fhead + i) % ac->fcap];
    if (f->kind != K_EVAL) continue;
    f->d->next = NULL;
    *tail = f->d;
    tail = &f->d->next;
  }
  ac->fhead = ac->fcount = 0;
  *tail = ac->wq_head;
  ac->wq_head = ac->wq_tail = NULL;
  int64_t now = ac_now(ac);
  rr_adec *again = NULL, **atail = &again;
  while (head) {
    rr_adec *d = head;
    head = d->next;
    d->next = NULL;
    if (d->q && d->may_retry && now < d->deadline) {
      d->may_retry = 0;
      *atail = d;
      atail = &d->next;
    } else {
      ac_end(ac, d, RUN_IO, NULL, cause); /* may queue new decisions */
    }
  }
  if (!again) return;
  /* Sent again on a new connection, ahead of any queued meanwhile. */
  *atail = ac->wq_head;
  ac->wq_head = again;
  if (!*atail) ac->wq_tail = NULL;
  ac->wq_tail = NULL;
  for (rr_adec *d = ac->wq_head; d; d = d->next) ac->wq_tail = d;
  if (ac->state == AC_CLOSED && ac_connect(ac) != 0) {
    while (ac->wq_head) { /* no new connection: the failure policy */
      rr_adec *d = ac->wq_head;
      ac->wq_head = d->next;
      if (!ac->wq_head) ac->wq_tail = NULL;
      ac_end(ac, d, RUN_IO, NULL, cause);
    }
  }
}

/* The connection is made: AUTH, SELECT and SCRIPT LOAD, pipelined. */
static void ac_setup(rr_aconn *ac) {
  rr *r = ac->r;
  ac->state = AC_SETUP;
  int bad = 0;
  if (r->u.pass) {
    const char *argv[3] = {"AUTH", r->u.user ? r->u.user : r->u.pass, r->u.pass};
    char *cmd = NULL;
    int len = redisFormatCommand(&cmd, r->u.user ? "AUTH %s %s" : "AUTH %s", argv[1], argv[2]);
    bad |= ac_send(ac, cmd, len, NULL, K_AUTH);
  }
  if (!bad && r->u.db) {
    char *cmd = NULL;
    int len = redisFormatCommand(&cmd, "SELECT %ld", r->u.db);
    bad |= ac_send(ac, cmd, len, NULL, K_SELECT);
  }
  if (!bad) bad |= ac_send_load(ac);
  if (bad) {
    ac_fail(ac, "no answer from Redis (connection error or timeout)");
    return;
  }
  ac_watch(ac);
}

/* Starts a connection (non-blocking): 0, or -1 (the decisions waiting for
 * it were ended). A host name is resolved by getaddrinfo, which may block
 * (redis.h says so): an address does not. */
static int ac_connect(rr_aconn *ac) {
  rr *r = ac->r;
  struct addrinfo hints, *res = NULL;
  memset(&hints, 0, sizeof hints);
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  int fd = -1, rc = -1;
  if (getaddrinfo(r->u.host, r->u.port, &hints, &res) == 0 && res) {
    for (struct addrinfo *ai = res; ai && fd < 0; ai = ai->ai_next) {
      fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol);
      if (fd < 0) continue;
      rc = connect(fd, ai->ai_addr, ai->ai_addrlen);
      if (rc != 0 && errno == EINPROGRESS) rc = 1;
      if (rc < 0) {
        close(fd);
        fd = -1;
      }
    }
    freeaddrinfo(res);
  }
  if (fd >= 0) ac->rd = redisReaderCreate();
  if (fd < 0 || !ac->rd) {
    if (fd >= 0) close(fd);
    return -1;
  }
  int one = 1;
  (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  ac->fd = fd;
  ac->gen++;
  bump(r, M_CONNECTS);
  if (rc == 1) {
    ac->state = AC_CONNECTING;
    ac_watch(ac);
  } else {
    ac_setup(ac);
  }
  return ac->state == AC_CLOSED ? -1 : 0;
}

/* One reply, matched with the oldest command sent. */
static void ac_reply(rr_aconn *ac, redisReply *rep) {
  if (!ac->fcount) {
    ac_fail(ac, "Redis answered with an error"); /* a reply nobody asked for */
    return;
  }
  rr_afifo f = ac->fifo[ac->fhead];
  ac->fhead = (ac->fhead + 1) % ac->fcap;
  ac->fcount--;
  if (f.kind != K_EVAL) {
    if (!reply_setup_ok(rep, f.kind == K_LOAD ? ac->sha : NULL, sizeof ac->sha)) {
      ac_fail(ac, "Redis answered with an error");
      return;
    }
    if (f.kind == K_LOAD && ac->state == AC_SETUP) {
      ac->state = AC_READY;
      ac_flush_wq(ac);
    }
    return;
  }
  rr_adec *d = f.d;
  if (reply_noscript(rep) && !d->noscript) {
    /* One SCRIPT LOAD for every EVALSHA sent before it; then this one
     * again (Redis runs them in order). */
    d->noscript = 1;
    if (!d->q) { /* an orphan: nothing to send again */
      ac_end(ac, d, RUN_REPLY, rep, NULL);
      return;
    }
    int load = f.seq > ac->load_seq; /* no SCRIPT LOAD sent after it yet */
    if (load) bump(ac->r, M_NOSCRIPT);
    if ((load && ac_send_load(ac)) || ac_send_eval(ac, d)) {
      ac_fail(ac, "no answer from Redis (connection error or timeout)");
      return;
    }
    ac_watch(ac);
    return;
  }
  ac_end(ac, d, reply_decision_ok(rep) ? RUN_OK : RUN_REPLY, rep, NULL);
}

static void ac_on_io(void *arg, int fd, unsigned events) {
  rr_aconn *ac = arg;
  (void)fd;
  if (ac->fd < 0) return;
  if (ac->state == AC_CONNECTING) {
    int soerr = 0;
    socklen_t sl = sizeof soerr;
    if (!(events & (RESIL_IO_WRITE | RESIL_IO_ERROR))) return;
    if (getsockopt(ac->fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) != 0 || soerr != 0) {
      ac_fail(ac, "no answer from Redis (connection error or timeout)");
      return;
    }
    ac_setup(ac);
    return;
  }
  if ((events & RESIL_IO_WRITE) && ac->olen) {
    size_t off = 0;
    while (off < ac->olen) {
      ssize_t w = send(ac->fd, ac->obuf + off, ac->olen - off, MSG_NOSIGNAL);
      if (w > 0) {
        off += (size_t)w;
      } else if (w < 0 && errno == EINTR) {
        continue;
      } else if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        break;
      } else {
        ac_fail(ac, "no answer from Redis (connection error or timeout)");
        return;
      }
    }
    if (off) {
      memmove(ac->obuf, ac->obuf + off, ac->olen - off);
      ac->olen -= off;
      bump(ac->r, M_WRITES);
    }
  }
  if (events & (RESIL_IO_READ | RESIL_IO_ERROR)) {
    int gone = 0; /* closed or an error: after the replies already read */
    const uint64_t gen = ac->gen;
    for (int rounds = 0; rounds < 64; rounds++) {
      char buf[16384];
      ssize_t n = recv(ac->fd, buf, sizeof buf, 0);
      if (n > 0) {
        if (redisReaderFeed(ac->rd, buf, (size_t)n) != REDIS_OK) {
          ac_fail(ac, "no answer from Redis (connection error or timeout)");
          return;
        }
        if ((size_t)n < sizeof buf) break;
      } else if (n < 0 && errno == EINTR) {
        continue;
      } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        break;
      } else {
        gone = 1;
        break;
      }
    }
    /* Replies, one at a time: an answer may queue new commands, or fail
     * the connection (its reader is then gone). */
    while (ac->rd) {
      void *reply = NULL;
      redisReader *rd = ac->rd;
      if (redisReaderGetReply(rd, &reply) != REDIS_OK) {
        ac_fail(ac, "no answer from Redis (connection error or timeout)");
        return;
      }
      if (!reply) break;
      ac_reply(ac, reply);
      freeReplyObject(reply);
    }
    if (gone && ac->gen == gen && ac->fd >= 0) {
      ac_fail(ac, "no answer from Redis (connection error or timeout)");
      return;
    }
  }
  if (ac->fd >= 0) ac_watch(ac);
}

/* The timer: the decisions whose bound has passed go to the failure
 * policy (their late replies will be discarded). */
static void ac_on_timer(void *arg) {
  rr_aconn *ac = arg;
  ac->timer_at = INT64_MAX;
  int64_t now = ac_now(ac);
  /* Collected first, answered after: an answer may queue commands. */
  rr_adec *due = NULL, **tail = &due;
  for (size_t i = 0; i < ac->fcount; i++) { /* sent: stay in the fifo, as orphans */
    rr_afifo *f = &ac->fifo[(ac->fhead + i) % ac->fcap];
    if (f->kind == K_EVAL && f->d->q && f->d->deadline <= now) {
      f->d->due = NULL;
      *tail = f->d;
      tail = &f->d->due;
    }
  }
  rr_adec *gone = NULL; /* not sent: off the queue */
  for (rr_adec **pp = &ac->wq_head; *pp;) {
    rr_adec *d = *pp;
    if (d->deadline <= now) {
      *pp = d->next;
      d->next = gone;
      gone = d;
    } else {
      pp = &d->next;
    }
  }
  ac->wq_tail = NULL;
  for (rr_adec *d = ac->wq_head; d; d = d->next) ac->wq_tail = d;
  static const char timeout[] = "no answer from Redis (connection error or timeout)";
  while (due) {
    rr_adec *d = due;
    due = d->due;
    ac_settle(ac, d, RUN_IO, NULL, timeout, 1);
  }
  while (gone) {
    rr_adec *d = gone;
    gone = d->next;
    ac_end(ac, d, RUN_IO, NULL, timeout);
  }
  /* The next bound to watch. */
  int64_t next = INT64_MAX;
  for (size_t i = 0; i < ac->fcount; i++) {
    rr_afifo *f = &ac->fifo[(ac->fhead + i) % ac->fcap];
    if (f->kind == K_EVAL && f->d->q && f->d->deadline < next) next = f->d->deadline;
  }
  for (rr_adec *d = ac->wq_head; d; d = d->next)
    if (d->deadline < next) next = d->deadline;
  if (next != INT64_MAX) ac_arm(ac, next);
}

static void ac_loop_end(void *arg);

/* The loop's connection, made on first use (NULL: out of memory). */
static rr_aconn *ac_of(rr *r, const resil_ratelimiter_loop *lp) {
  pthread_mutex_lock(&r->amu);
  rr_aconn *ac = r->aconns;
  while (ac && ac->lp != lp) ac = ac->next;
  if (!ac && (ac = resil__calloc(r->alloc, sizeof *ac)) != NULL) {
    ac->r = r;
    ac->lp = lp;
    ac->fd = -1;
    ac->timer_at = INT64_MAX;
    if (!(ac->timer = lp->timer_new(lp->self, ac_on_timer, ac)) ||
        lp->on_end(lp->self, ac_loop_end, ac) != 0) {
      if (ac->timer) lp->timer_free(lp->self, ac->timer);
      resil__free(r->alloc, ac);
      ac = NULL;
    } else {
      ac->next = r->aconns;
      r->aconns = ac;
    }
  }
  pthread_mutex_unlock(&r->amu);
  return ac;
}

static int rr_reserve_async(void *self, const resil_ratelimiter_loop *lp,
                            resil_ratelimiter_request *q, resil_decision *dec, int64_t *wait_ns,
                            resil_reason *why) {
  rr *r = self;
  if (over_burst(r, q->permits, wait_ns, why)) {
    *dec = RESIL_DECISION_DENY;
    return 0;
  }
  const char *cause = NULL;
  int64_t bound = io_bound(r, q->ctx, q->max_wait_ns);
  rr_aconn *ac = NULL;
  resil_breaker_permit bp;
  if (!breaker_enter(r, &bp, &cause)) {
    *dec = decide_failed(r, q->permits, q->ctx, cause, wait_ns, why);
    return 0;
  }
  rr_adec *d = NULL;
  if (bound <= 0 || !(ac = ac_of(r, lp)) || ac->olen > AC_OBUF_MAX ||
      !(d = resil__calloc(r->alloc, sizeof *d))) {
    resil_breaker_release(r->br, &bp);
    bump(r, M_BUSY);
    *dec = decide_failed(r, q->permits, q->ctx, CAUSE_BUSY, wait_ns, why);
    return 0;
  }
  int64_t now = ac_now(ac);
  d->q = q;
  d->t0 = now;
  d->deadline = resil__sat_add(now, bound);
  d->max_wait_ns = q->max_wait_ns;
  d->permits = q->permits;
  d->bp = bp;
  d->bp_held = 1;
  d->may_retry = ac->state == AC_READY;
  d->ac = ac;
  if (ac->state == AC_CLOSED && ac_connect(ac) != 0) {
    /* No connection: the failure policy answers now (never later from
     * inside this call). */
    ac_free_dec(ac, d);
    note_round(r, &bp, RUN_IO, q->permits, 0, &cause);
    *dec = decide_failed(r, q->permits, q->ctx, cause, wait_ns, why);
    return 0;
  }
  q->backend = d;
  if (ac->state == AC_READY) {
    if (ac_send_eval(ac, d)) {
      q->backend = NULL;
      ac_free_dec(ac, d);
      resil_breaker_release(r->br, &bp);
      bump(r, M_BUSY);
      *dec = decide_failed(r, q->permits, q->ctx, CAUSE_BUSY, wait_ns, why);
      return 0;
    }
    ac_watch(ac);
  } else {
    wq_push(ac, d);
  }
  ac_arm(ac, d->deadline);
  return 1;
}

static void rr_withdraw(void *self, resil_ratelimiter_request *q) {
  rr *r = self;
  rr_adec *d = q->backend;
  if (!d) return;
  q->backend = NULL;
  d->q = NULL;
  if (d->seq) return; /* sent: its reply is discarded when it comes */
  rr_aconn *ac = d->ac;
  rr_adec *prev = NULL;
  for (rr_adec *x = ac->wq_head; x; prev = x, x = x->next) {
    if (x != d) continue;
    if (prev) prev->next = d->next;
    else ac->wq_head = d->next;
    if (ac->wq_tail == d) ac->wq_tail = prev;
    if (d->bp_held) resil_breaker_release(r->br, &d->bp);
    ac_free_dec(ac, d);
    return;
  }
}

/* Frees ac and what it holds, its watch and timer given back to the loop. */
static void ac_destroy(rr_aconn *ac) {
  rr *r = ac->r;
  if (ac->fd >= 0) {
    if (ac->watched) ac->lp->watch(ac->lp->self, ac->fd, 0, ac_on_io, ac);
    close(ac->fd);
  }
  if (ac->rd) redisReaderFree(ac->rd);
  for (size_t i = 0; i < ac->fcount; i++) {
    rr_afifo *f = &ac->fifo[(ac->fhead + i) % ac->fcap];
    if (f->kind != K_EVAL) continue;
    if (f->d->bp_held) resil_breaker_release(r->br, &f->d->bp);
    ac_free_dec(ac, f->d);
  }
  while (ac->wq_head) {
    rr_adec *d = ac->wq_head;
    ac->wq_head = d->next;
    if (d->bp_held) resil_breaker_release(r->br, &d->bp);
    ac_free_dec(ac, d);
  }
  ac->lp->timer_free(ac->lp->self, ac->timer);
  resil__free(r->alloc, ac->fifo);
  resil__free(r->alloc, ac->obuf);
  resil__free(r->alloc, ac);
}

static void rr_free_now(rr *r);

/* The loop's owner ends (rll.on_end): its connection goes; the last one
 * of a limiter already freed frees the rest. */
static void ac_loop_end(void *arg) {
  rr_aconn *ac = arg;
  rr *r = ac->r;
  pthread_mutex_lock(&r->amu);
  rr_aconn **pp = &r->aconns;
  while (*pp && *pp != ac) pp = &(*pp)->next;
  if (*pp) *pp = ac->next;
  int last = r->dead && !r->aconns;
  pthread_mutex_unlock(&r->amu);
  ac_destroy(ac);
  if (last) rr_free_now(r);
}

/* A reserved wait was cancelled (the blocking path's acquire): its
 * permits go back, the key's theoretical arrival time moved back by as
 * many emission intervals (never before now), as the local limiter gives
 * back. One round trip bounded as a decision; when Redis cannot answer
 * they stay spent (never one too many). */
static void rr_give_back(void *self, int permits) {
  rr *r = self;
  redisReply *rep;
  const char *cause;
  if (permits <= 0) return;
  if (decide(r, NULL, -(int64_t)permits, 0, &rep, &cause) == RUN_OK) {
    bump(r, M_GIVEN_BACK);
    freeReplyObject(rep);
  }
}

static int rr_peek(void *self, int64_t *available, int64_t *nanos_to_wait) {
  rr *r = self;
  redisReply *rep;
  const char *cause;
  if (decide(r, NULL, 0, 0, &rep, &cause) != RUN_OK) return -1;
  int ok = rep->elements >= 3 && rep->element[2]->type == REDIS_REPLY_INTEGER;
  if (ok) {
    *nanos_to_wait = us_to_ns(rep->element[1]->integer);
    *available = rep->element[2]->integer;
  }
  freeReplyObject(rep);
  return ok ? 0 : -1;
}

/* The handle is freed: the rest now, or, while engines still have a
 * connection of it (their loops watch its fd, its timer is on their heap),
 * at the last one's end (ac_loop_end). */
static void rr_free(void *self) {
  rr *r = self;
  if (!r) return;
  pthread_mutex_lock(&r->amu);
  r->dead = 1;
  int later = r->aconns != NULL;
  pthread_mutex_unlock(&r->amu);
  if (!later) rr_free_now(r);
}

static void rr_free_now(rr *r) {
  const resil_allocator *a = r->alloc;
  for (int i = 0; r->conns && i < r->nconn; i++) {
    conn_close(&r->conns[i]);
    pthread_mutex_destroy(&r->conns[i].mu);
  }
  resil__free(a, r->conns);
  pthread_mutex_destroy(&r->amu);
  resil_breaker_free(r->br);
  resil_ratelimiter_free(r->local);
  uri_free(a, &r->u);
  resil__free(a, r->key);
  resil__free(a, r);
}

/* ---- configuration -------------------------------------------------------- */

static void config_defaults(resil_redis_ratelimiter_config *cfg) {
  memset(cfg, 0, sizeof *cfg);
  cfg->struct_size = sizeof *cfg;
  cfg->name = "ratelimiter";
  cfg->key_prefix = "resil:rl:";
  cfg->limit_for_period = 50;
  cfg->refresh_period_ns = RESIL_NS_PER_S;
  cfg->burst = 0;
  cfg->timeout_ns = 5 * RESIL_NS_PER_S;
  cfg->redis_timeout_ns = 20 * RESIL_NS_PER_MS;
  cfg->failure = RESIL_REDIS_FAILURE_LOCAL;
  cfg->expected_instances = 1;
  cfg->connections = 4;
}

void resil_redis_ratelimiter_config_init_sized(resil_redis_ratelimiter_config *cfg, size_t n) {
  if (!cfg) return;
  resil_redis_ratelimiter_config full;
  config_defaults(&full);
  resil__sized_out(cfg, n, &full, sizeof full);
}

static resil_status validate(const resil_redis_ratelimiter_config *cfg, int64_t burst,
                             resil_error *err) {
  resil_status st;
  if ((st = resil__check_range(err, "limit_for_period", cfg->limit_for_period, 1,
                               INT64_C(2147483647))))
    return st;
  if ((st = resil__check_ns(err, "refresh_period_ns", cfg->refresh_period_ns, 1000,
                            RR_EXACT_MAX * 1000)))
    return st;
  if (cfg->refresh_period_ns % 1000 != 0)
    return resil__err(err, RESIL_EINVAL, "refresh_period_ns",
                      "must be a whole number of microseconds (Redis's clock), got %lld ns",
                      (long long)cfg->refresh_period_ns);
  if ((st = resil__check_range(err, "burst", cfg->burst, 0, INT64_C(2147483647)))) return st;
  const int64_t period_us = cfg->refresh_period_ns / 1000;
  if (burst > RR_EXACT_MAX / cfg->limit_for_period || burst > RR_EXACT_MAX / period_us)
    return resil__err(err, RESIL_EINVAL, "burst",
                      "burst x limit_for_period and burst x refresh_period (us) must not "
                      "exceed 2^50, got burst %lld",
                      (long long)burst);
  if ((st = resil__check_ns(err, "timeout_ns", cfg->timeout_ns, 0, RR_EXACT_MAX * 1000)))
    return st;
  if ((st = resil__check_ns(err, "redis_timeout_ns", cfg->redis_timeout_ns, RESIL_NS_PER_MS,
                            60 * RESIL_NS_PER_S)))
    return st;
  if (cfg->failure != RESIL_REDIS_FAILURE_OPEN && cfg->failure != RESIL_REDIS_FAILURE_CLOSED &&
      cfg->failure != RESIL_REDIS_FAILURE_LOCAL)
    return resil__err(err, RESIL_EINVAL, "failure",
                      "must be RESIL_REDIS_FAILURE_OPEN, _CLOSED or _LOCAL, got %d",
                      (int)cfg->failure);
  if ((st = resil__check_range(err, "expected_instances", cfg->expected_instances, 1, 1000000)))
    return st;
  if ((st = resil__check_range(err, "connections", cfg->connections, 1, 64))) return st;
  if (!cfg->key_prefix) return resil__err(err, RESIL_EINVAL, "key_prefix", "must not be NULL");
  return RESIL_OK;
}

/* The breaker on the connection: cfg->breaker, or the default. */
static resil_status make_breaker(rr *r, const resil_redis_ratelimiter_config *cfg,
                                 const char *name, resil_error *err) {
  resil_breaker_config bc;
  char bname[256];
  if (cfg->breaker) {
    /* Copied at the caller's size, the rest defaults. */
    resil_breaker_config_init(&bc);
    size_t n = resil__sized_size(cfg->breaker);
    if (n > sizeof bc) n = sizeof bc;
    if (n >= sizeof(size_t)) memcpy(&bc, cfg->breaker, n);
  } else {
    resil_breaker_config_init(&bc);
    snprintf(bname, sizeof bname, "%.249s:redis", name);
    bc.name = bname;
    bc.window_size = 10;
    bc.minimum_calls = 5;
    bc.failure_rate_threshold_pct = 50;
    bc.open_wait_ns = RESIL_NS_PER_S;
    bc.half_open_permitted_calls = 1;
  }
  if (!bc.clock) bc.clock = cfg->clock;
  if (!bc.alloc) bc.alloc = cfg->alloc;
  resil_error be;
  resil_status st = resil_breaker_new(&bc, &r->br, &be);
  if (st != RESIL_OK)
    return resil__err(err, st, "breaker", "%s", be.msg);
  return RESIL_OK;
}

resil_status resil_redis_ratelimiter_new(const resil_redis_ratelimiter_config *ucfg,
                                         resil_ratelimiter **out, resil_error *err) {
  if (!ucfg) return resil__err(err, RESIL_EINVAL, "cfg", "must not be NULL");
  if (!out) return resil__err(err, RESIL_EINVAL, "out", "must not be NULL");
  resil_redis_ratelimiter_config full;
  const resil_redis_ratelimiter_config *cfg = &full;
  config_defaults(&full);
  resil_status st = resil__sized_in(&full, sizeof full, ucfg, sizeof full,
                                    "resil_redis_ratelimiter_config",
                                    "resil_redis_ratelimiter_config_init", err);
  if (st != RESIL_OK) return st;
  const int64_t burst = cfg->burst ? cfg->burst : cfg->limit_for_period;
  if ((st = validate(cfg, burst, err))) return st;
  const resil_allocator *a = cfg->alloc;
  const char *name = cfg->name ? cfg->name : "ratelimiter";
  rr *r = resil__calloc(a, sizeof *r);
  if (!r) return resil__err(err, RESIL_ENOMEM, NULL, "out of memory");
  r->alloc = a;
  pthread_mutex_init(&r->amu, NULL);
  if ((st = parse_uri(a, cfg->uri, &r->u, err))) {
    pthread_mutex_destroy(&r->amu);
    resil__free(a, r);
    return st;
  }
  size_t kl = strlen(cfg->key_prefix) + strlen(name) + 1;
  r->key = resil__alloc(a, kl);
  r->nconn = cfg->connections;
  r->conns = resil__calloc(a, sizeof *r->conns * (size_t)r->nconn);
  if (!r->key || !r->conns) {
    resil__free(a, r->conns);
    r->conns = NULL;
    rr_free(r);
    return resil__err(err, RESIL_ENOMEM, NULL, "out of memory");
  }
  snprintf(r->key, kl, "%s%s", cfg->key_prefix, name);
  r->name = r->key + strlen(cfg->key_prefix);
  r->on_fallback = cfg->on_fallback;
  r->on_fallback_user = cfg->on_fallback_user;
  for (int i = 0; i < r->nconn; i++) {
    pthread_mutex_init(&r->conns[i].mu, NULL);
    r->conns[i].fd = -1;
  }
  r->limit = cfg->limit_for_period;
  r->period_us = cfg->refresh_period_ns / 1000;
  r->burst = burst;
  r->redis_timeout_ns = cfg->redis_timeout_ns;
  r->failure = cfg->failure;
  atomic_init(&r->take_over, cfg->take_over_other_rate ? 1 : 0);
  snprintf(r->a_limit, sizeof r->a_limit, "%lld", (long long)r->limit);
  snprintf(r->a_period, sizeof r->a_period, "%lld", (long long)r->period_us);
  snprintf(r->a_burst, sizeof r->a_burst, "%lld", (long long)r->burst);
  if ((st = make_breaker(r, cfg, name, err))) {
    rr_free(r);
    return st;
  }
  if (r->failure == RESIL_REDIS_FAILURE_LOCAL) {
    resil_ratelimiter_config lc;
    resil_ratelimiter_config_init(&lc);
    char lname[256];
    snprintf(lname, sizeof lname, "%.249s:local", name);
    lc.name = lname;
    int64_t share = r->limit / cfg->expected_instances;
    lc.limit_for_period = share > 0 ? share : 1;
    lc.refresh_period_ns = cfg->refresh_period_ns;
    lc.timeout_ns = cfg->timeout_ns;
    lc.clock = cfg->clock;
    lc.alloc = a;
    lc.shared = cfg->shared;
    if ((st = resil_ratelimiter_new(&lc, &r->local, err))) {
      rr_free(r);
      return st;
    }
  }
  resil_ratelimiter_backend be;
  resil_ratelimiter_backend_init(&be);
  be.self = r;
  be.reserve = rr_reserve;
  be.peek = rr_peek;
  be.give_back = rr_give_back;
  be.reserve_async = rr_reserve_async;
  be.withdraw = rr_withdraw;
  be.free = rr_free;
  resil_ratelimiter_config rc;
  resil_ratelimiter_config_init(&rc);
  rc.name = name;
  rc.limit_for_period = r->limit;
  rc.refresh_period_ns = cfg->refresh_period_ns;
  rc.timeout_ns = cfg->timeout_ns;
  rc.clock = cfg->clock;
  rc.alloc = a;
  return resil_ratelimiter_new_backed(&rc, &be, out, err); /* frees r on failure */
}

static rr *rr_of(const resil_ratelimiter *rl) {
  const resil_ratelimiter_backend *be = resil_ratelimiter_backend_of(rl);
  return be && be->reserve == rr_reserve ? be->self : NULL;
}

resil_status resil_redis_ratelimiter_get_metrics_sized(const resil_ratelimiter *rl,
                                                       resil_redis_ratelimiter_metrics *dst,
                                                       size_t n) {
  rr *r = rr_of(rl);
  if (!r) return RESIL_EMISUSE;
  if (!dst) return RESIL_EINVAL;
  resil_redis_ratelimiter_metrics m;
  memset(&m, 0, sizeof m);
  m.struct_size = sizeof m;
  uint64_t v[M_COUNT];
  for (int i = 0; i < M_COUNT; i++) v[i] = atomic_load_explicit(&r->m[i], memory_order_relaxed);
  m.redis_decisions = v[M_DECISIONS];
  m.redis_errors = v[M_ERRORS];
  m.breaker_rejected = v[M_BREAKER];
  m.busy = v[M_BUSY];
  m.fallback_open = v[M_OPEN];
  m.fallback_closed = v[M_CLOSED];
  m.fallback_local = v[M_LOCAL];
  m.noscript_reloads = v[M_NOSCRIPT];
  m.connects = v[M_CONNECTS];
  m.fallbacks_entered = v[M_ENTERED];
  m.writes = v[M_WRITES];
  m.given_back = v[M_GIVEN_BACK];
  m.last_decision_ns = atomic_load_explicit(&r->last_ns, memory_order_relaxed);
  m.max_decision_ns = atomic_load_explicit(&r->max_ns, memory_order_relaxed);
  m.total_decision_ns = atomic_load_explicit(&r->total_ns, memory_order_relaxed);
  resil__sized_out(dst, n, &m, sizeof m);
  return RESIL_OK;
}

resil_breaker *resil_redis_ratelimiter_breaker(const resil_ratelimiter *rl) {
  rr *r = rr_of(rl);
  return r ? r->br : NULL;
}

resil_ratelimiter *resil_redis_ratelimiter_local(const resil_ratelimiter *rl) {
  rr *r = rr_of(rl);
  return r ? r->local : NULL;
}

/* ---- metrics (resil_metrics source) ---------------------------------------- */

static const resil_metric_family rr_fams[] = {
    {"resil_redis_ratelimiter_decisions_total", RESIL_METRIC_COUNTER,
     "Decisions by who made them: redis, or the failure policy (open, closed, local)"},
    {"resil_redis_ratelimiter_failures_total", RESIL_METRIC_COUNTER,
     "Decisions Redis did not make, by cause: error (I/O, timeout, error reply), "
     "breaker_open, busy (no free connection within the bound)"},
    {"resil_redis_ratelimiter_noscript_reloads_total", RESIL_METRIC_COUNTER,
     "Script loaded again after NOSCRIPT"},
    {"resil_redis_ratelimiter_connects_total", RESIL_METRIC_COUNTER,
     "Connections made to Redis"},
    {"resil_redis_ratelimiter_fallbacks_entered_total", RESIL_METRIC_COUNTER,
     "Times the failure policy took over from Redis"},
    {"resil_redis_ratelimiter_writes_total", RESIL_METRIC_COUNTER,
     "Writes to Redis of the engine path, each carrying the commands pipelined since the last"},
    {"resil_redis_ratelimiter_decision_seconds_total", RESIL_METRIC_COUNTER,
     "Time of the decisions Redis made, summed (divide by decisions_total{by=\"redis\"})"},
    {"resil_redis_ratelimiter_decision_seconds", RESIL_METRIC_GAUGE,
     "The last Redis decision's time (stat=last), the longest decision's (stat=max)"},
    {"resil_redis_ratelimiter_given_back_total", RESIL_METRIC_COUNTER,
     "Permits of cancelled reserved waits given back to Redis"},
};

static resil_status rr_snapshot(const void *obj, void *snap) {
  return resil_redis_ratelimiter_get_metrics(obj, snap);
}

static void rr_by(resil_metrics_emitter *e, const char *label, const char *value, double v) {
  const char *l[2] = {label, value};
  resil_metrics_sample(e, v, 1, l);
}

static void rr_emit(const void *snap, size_t family, resil_metrics_emitter *e) {
  const resil_redis_ratelimiter_metrics *m = snap;
  switch (family) {
  case 0:
    rr_by(e, "by", "redis", (double)m->redis_decisions);
    rr_by(e, "by", "open", (double)m->fallback_open);
    rr_by(e, "by", "closed", (double)m->fallback_closed);
    rr_by(e, "by", "local", (double)m->fallback_local);
    break;
  case 1:
    rr_by(e, "cause", "error", (double)m->redis_errors);
    rr_by(e, "cause", "breaker_open", (double)m->breaker_rejected);
    rr_by(e, "cause", "busy", (double)m->busy);
    break;
  case 2: resil_metrics_sample(e, (double)m->noscript_reloads, 0, NULL); break;
  case 3: resil_metrics_sample(e, (double)m->connects, 0, NULL); break;
  case 4: resil_metrics_sample(e, (double)m->fallbacks_entered, 0, NULL); break;
  case 5: resil_metrics_sample(e, (double)m->writes, 0, NULL); break;
  case 6: resil_metrics_sample(e, (double)m->total_decision_ns / 1e9, 0, NULL); break;
  case 7:
    rr_by(e, "stat", "last", (double)m->last_decision_ns / 1e9);
    rr_by(e, "stat", "max", (double)m->max_decision_ns / 1e9);
    break;
  case 8: resil_metrics_sample(e, (double)m->given_back, 0, NULL); break;
  default: break;
  }
}

static const resil_metrics_source rr_src = {
    sizeof(resil_metrics_source), rr_fams, sizeof rr_fams / sizeof rr_fams[0],
    sizeof(resil_redis_ratelimiter_metrics), rr_snapshot, rr_emit};

resil_status resil_redis_ratelimiter_metrics_add(resil_metrics *m, const char *name,
                                                 const resil_ratelimiter *rl) {
  if (!m) return RESIL_EMISUSE;
  if (!rr_of(rl)) return RESIL_EINVAL;
  return resil_metrics_add_source(m, name ? name : resil_ratelimiter_name(rl), &rr_src, rl);
}
