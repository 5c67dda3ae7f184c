/* resil call: a curl-like HTTP call for scripts, made through libresil-http
 * and a resil_retry (split form), so that the exit status says which of the
 * outcomes of DESIGN §1 the call ended in.
 *
 *   resil call [-X METHOD] [-H 'Name: value']... [-d BODY|@FILE|@-] [-L]
 *              [--max-body BYTES]
 *              [--connect-timeout MS] [--timeout MS] [--deadline MS]
 *              [--deadline-header NAME|none]
 *              [--retry N] [--backoff exp:INITIAL,MULT,CAP|fixed:MS]
 *              [--idempotency-key auto|KEY] [--unsafe-retries] [-v|-vv]
 *              [--instance BASE_URL]... [--resolve] [--balance p2c|round_robin] URL
 *   resil call --config FILE --chain NAME [options but --retry/--backoff/
 *              --unsafe-retries] URL
 *
 * With --config and --chain (built with libresil-config), the call runs
 * through chain NAME of the registry file (registry.h): resil_chain_run of
 * resil_http_request_attempt, the chain's layers (its retry, breaker, ...)
 * replacing --retry and --backoff, its total_timeout the deadline unless
 * --deadline is given. -v then prints the chain's nesting and each layer's
 * counters after the call.
 *
 * The response body of an answered call (any status) goes to stdout byte for
 * byte; everything else (warnings, -v lines, the one-line summary of a call
 * that got no answer) goes to stderr.
 *
 * Exit status (also in --help):
 *   0  answered with success: 2xx (or 1xx/3xx: a redirect is followed only
 *      with -L)
 *   1  local failure: out of memory, the HTTP client could not be set up,
 *      stdout could not be written, or one of stdin, stdout and stderr was
 *      closed at start (checked before anything is opened)
 *   2  bad usage: a one-line error naming the argument
 *   3  NOT_SENT: the request never reached the server (DNS, connection
 *      refused, connect timeout); repeating it is safe
 *   4  UNKNOWN: the request was sent, or may have been, and no complete answer
 *      came back: the server MAY HAVE EXECUTED it. A call whose last attempt
 *      was NOT_SENT or REJECTED after an earlier attempt that may have run
 *      also ends here (the retry's folding, retry.h)
 *   5  answered 4xx, except 408, 425 and 429: fix the request
 *   6  answered 5xx, 408, 425 or 429
 *   7  REJECTED: refused locally before sending (deadline too short)
 *   8  -L given and the answer is still a redirect (a 3xx with Location)
 *      that was not followed: more than 5 hops, or a target libresil
 *      refuses; its body is written as for any answer
 *
 * A response body larger than --max-body (default 64 MiB, the library's
 * max_response_bytes) ends the attempt UNKNOWN (exit 4) with a message.
 *
 * Error messages never quote the URL, a header's value or a body: they may
 * hold credentials. The -v lines come from the library's log, redacted.
 *
 * How the call is built: one client with ONE endpoint whose base URL is the
 * URL's scheme://authority and whose path and query templates are the URL's
 * path and query, taken literally: a byte that a template may not hold
 * literally ('{', '}', space, '%' not starting a %XX escape, non-ASCII, ...)
 * is percent-encoded, so no placeholder can ever be read into a user's URL.
 * The fragment is dropped, as curl does. --retry N is the retry's
 * max_attempts (the first attempt included); the HTTP layer never retries by
 * itself.
 *
 * Several instances (http.h, "Many instances"): each --instance BASE_URL is
 * one more instance of the URL's upstream (the URL's scheme://authority is
 * the first; with --instance the URL may also be a path alone, "/x?y", and
 * then only the --instance URLs are instances); --resolve makes every
 * address of the URL's host name an instance. Each attempt chooses one
 * (--balance), a retry one this call has not tried; stderr says which
 * instance the last attempt went to (and -v each attempt's), its URL
 * redacted. */
#include <stdio.h>

#include "cmds.h"

#ifdef RESIL_HAVE_HTTP

#include <ctype.h>
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include <sys/stat.h>

#include "cli.h"
#include "resil/http.h"
#include "resil/resil.h"
#include "resil/retry.h"
#include "resil/shared.h"
#ifdef RESIL_HAVE_CONFIG
#include "resil/registry.h"
#endif

#define PROG "resil call"
#define NS_PER_MS INT64_C(1000000)
#define MAX_MS INT64_C(86400000)
/* Instances of one upstream, the URL's origin included (http.h: 1..64). */
#define MAX_INSTANCES 64
/* Largest -d body read from a file or stdin: exactly 1 GiB is accepted. */
#define MAX_BODY_BYTES ((size_t)1 << 30)
/* Largest --max-body, the library's max_response_bytes range. */
#define MAX_RESPONSE_BYTES ((size_t)1 << 30)
/* Hops -L follows within one attempt. */
#define MAX_REDIRECTS 5u

enum {
  EXIT_OK = 0,
  EXIT_LOCAL = 1,
  EXIT_USAGE = 2,
  EXIT_NOT_SENT = 3,
  EXIT_UNKNOWN = 4,
  EXIT_CLIENT_ERROR = 5,
  EXIT_SERVER_ERROR = 6,
  EXIT_REJECTED = 7,
  EXIT_REDIRECT = 8
};

static void usage(FILE *f) {
  fprintf(
      f,
      "usage: resil call [OPTIONS] URL\n"
      "       resil call [OPTIONS] --instance BASE_URL [--instance BASE_URL]... PATH\n"
      "Makes one logical HTTP call through libresil (every attempt counted, a\n"
      "retry only when it is safe, one total deadline), writes the response\n"
      "body to stdout as received, and says by its exit status what happened.\n"
      "  -X, --request METHOD    GET, HEAD, POST, PUT, PATCH, DELETE or OPTIONS\n"
      "                          (default GET, or POST when -d is given)\n"
      "  -H, --header 'Name: value'\n"
      "                          add a request header (repeatable); 'Name:' sends\n"
      "                          an empty value. Host, Content-Length,\n"
      "                          Content-Encoding, Transfer-Encoding, Expect and\n"
      "                          Connection belong to libresil; the idempotency\n"
      "                          key is set with --idempotency-key\n"
      "  -d, --data BODY         request body, sent byte for byte; @FILE reads a\n"
      "                          file and @- standard input (newlines kept, unlike\n"
      "                          curl -d), at most 1 GiB. Content-Type defaults to\n"
      "                          application/x-www-form-urlencoded, as with curl\n"
      "  -L, --location          follow redirects (at most 5 hops per attempt; a\n"
      "                          hop is not a retry); still a redirect after\n"
      "                          that exits 8\n"
      "  --max-body BYTES        largest response body accepted, 1..1073741824\n"
      "                          (default 67108864); a larger one ends the\n"
      "                          attempt UNKNOWN (exit 4) with a message\n"
      "  --connect-timeout MS    connect timeout per attempt (default 10000)\n"
      "  --timeout MS            response timeout per attempt, from sending to the\n"
      "                          last byte (default 60000)\n"
      "  --deadline MS           total time of the call, every attempt and wait\n"
      "                          included; each timeout is clipped to it\n"
      "                          (default: none). Each attempt tells the server\n"
      "                          the time left when it is sent, in header\n"
      "                          Request-Timeout (gRPC's timeout grammar, e.g.\n"
      "                          287513u; a retry sends what is left)\n"
      "  --deadline-header NAME  send that budget in header NAME instead (e.g.\n"
      "                          grpc-timeout); 'none' sends no such header. A\n"
      "                          -H of the same name is replaced by it while a\n"
      "                          deadline runs\n"
      "  --retry N               at most N attempts, the first included: --retry 3\n"
      "                          makes at most 3 calls (1..1000; default 1, no\n"
      "                          retry). NOT_SENT is retried; UNKNOWN, 5xx, 408,\n"
      "                          425 and 429 only for GET, HEAD, PUT, DELETE and\n"
      "                          OPTIONS or with an idempotency key; other 4xx\n"
      "                          never\n"
      "  --backoff exp:INITIAL,MULT,CAP\n"
      "                          wait before each retry, in ms: INITIAL, then\n"
      "                          multiplied by MULT (1..100) up to CAP (default\n"
      "                          exp:100,2,2000); fixed:MS waits MS every time.\n"
      "                          A Retry-After from the server replaces the wait,\n"
      "                          capped at CAP (fixed: MS) and at the deadline\n"
      "  --idempotency-key auto|KEY\n"
      "                          send Idempotency-Key with the same value on every\n"
      "                          attempt: auto makes a random 128-bit key once per\n"
      "                          call, KEY is 1..255 visible ASCII characters.\n"
      "                          Retrying a POST is then safe when the server\n"
      "                          deduplicates by the key\n"
      "  --unsafe-retries        DANGER: also retry UNKNOWN, 5xx, 408, 425 and 429\n"
      "                          of a request that is neither idempotent nor keyed;\n"
      "                          every retry may repeat the side effect\n"
      "  -v, --verbose           on stderr: the idempotency key, one line per\n"
      "                          attempt (outcome, status, duration, wait before\n"
      "                          the next) and the result; -vv adds the request\n"
      "                          and response headers (secrets redacted)\n"
      "  --config FILE --chain NAME\n"
      "                          run the call through chain NAME of registry\n"
      "                          file FILE (resil config check FILE): its layers\n"
      "                          replace --retry and --backoff, its total_timeout\n"
      "                          is the deadline unless --deadline is given\n"
      "  --state NAME            keep the call's policies in the shared segment\n"
      "                          NAME of this user (DESIGN 8.1), so that\n"
      "                          successive invocations (a script, a cron job)\n"
      "                          share them: with --rate, one rate limiter, with\n"
      "                          --breaker, one circuit breaker for every call\n"
      "                          made with --state NAME (needs one or both). A\n"
      "                          different --rate or --breaker replaces the\n"
      "                          recorded one (its state starts over). `resil\n"
      "                          state show NAME` lists them\n"
      "  --state-dir DIR         the segment is a file in DIR (default: POSIX\n"
      "                          shared memory, /dev/shm)\n"
      "  --rate N/PERIOD         with --state: at most N calls per PERIOD (e.g.\n"
      "                          100/1s, 2/1h, 5/500ms), across invocations; a\n"
      "                          call over the rate is not made: exit 7,\n"
      "                          REJECTED(no rate limiter permit)\n"
      "  --breaker KEY=V[,KEY=V...]\n"
      "                          with --state: a circuit breaker around the call\n"
      "                          (one result per invocation, after its retries)\n"
      "                          across invocations, on a count window; keys:\n"
      "                          window=N (calls, default 10), min=N (calls\n"
      "                          before it can open, 1..window, default window),\n"
      "                          rate=PCT (failure rate that opens it, default\n"
      "                          50), wait=DURATION (OPEN, e.g. 300ms, 10s, 5m;\n"
      "                          default 60s), probes=N (calls let through after\n"
      "                          the wait, default 1). Failures: not sent,\n"
      "                          unknown, 5xx, 408, 425, 429. While open the call\n"
      "                          is not made: exit 7, REJECTED(circuit breaker\n"
      "                          open). E.g. --breaker window=5,min=5,wait=10s\n"
      "                          Its ramp after recovery (DESIGN 2.9, the\n"
      "                          registry's ramp_duration, ramp_min_percent,\n"
      "                          ramp_aggression): ramp=DURATION (0 = none, the\n"
      "                          default, or at least 1ms), ramp_min=PCT\n"
      "                          (1..100, default 10), ramp_aggression=X (> 0,\n"
      "                          default 1: linear). Once a probe closes it, it\n"
      "                          admits ramp_min %% of the calls, then a share\n"
      "                          growing to all over the ramp; a call not\n"
      "                          admitted is not made: exit 7,\n"
      "                          REJECTED(recovering). While it is HALF_OPEN or\n"
      "                          ramping, --retry makes no retry (retries last:\n"
      "                          the call stops after its attempt)\n"
      "  --retry-during-recovery with --breaker: retry even while the breaker\n"
      "                          is HALF_OPEN or ramping (the registry's\n"
      "                          retry_during_recovery: true)\n"
      "  --instance BASE_URL     one more instance of the URL's upstream\n"
      "                          (repeatable, at most 64 with the URL's): each\n"
      "                          attempt goes to one of them, a retry to one\n"
      "                          this call has not tried yet. BASE_URL is\n"
      "                          http(s)://HOST[:PORT]; the URL's own\n"
      "                          scheme://HOST[:PORT] is the first instance, or\n"
      "                          give the URL as a path alone (/items/1?x=y) and\n"
      "                          only the --instance URLs are. A NOT_SENT attempt\n"
      "                          (connection refused) moves even for a POST\n"
      "  --resolve               every address of the URL's host name is an\n"
      "                          instance (connecting by address, the Host\n"
      "                          header and TLS name the URL's); not with\n"
      "                          --instance\n"
      "  --balance p2c|round_robin\n"
      "                          how an attempt chooses among the instances:\n"
      "                          the less busy of two drawn at random (p2c, the\n"
      "                          default) or in turn; needs --instance or\n"
      "                          --resolve\n"
      "                          With several instances (or --resolve), stderr\n"
      "                          says which one the last attempt went to\n"
      "                          (\"resil call: answered by instance 1: URL\"),\n"
      "                          -v each attempt's; the URL redacted\n"
      "  -h, --help              print this help\n"
      "Options take their value as the next argument, or --opt=VALUE (long) and\n"
      "-XVALUE (short); '--' ends the options.\n"
      "Warnings on stderr: --retry above 1 without --deadline, or with a\n"
      "deadline but no --timeout; --timeout longer than --deadline;\n"
      "--unsafe-retries.\n"
      "Exit status:\n"
      "  0  answered 2xx (or 1xx/3xx: redirects are followed only with -L)\n"
      "  1  local failure (out of memory, client setup, writing stdout, stdin,\n"
      "     stdout or stderr closed)\n"
      "  2  bad usage\n"
      "  3  NOT_SENT: the request never reached the server; safe to repeat\n"
      "  4  UNKNOWN: sent or maybe sent, no complete answer: the server MAY HAVE\n"
      "     EXECUTED it (also when a later attempt was not sent or refused)\n"
      "  5  answered 4xx other than 408, 425, 429: fix the request\n"
      "  6  answered 5xx, 408, 425 or 429\n"
      "  7  REJECTED: refused locally before sending (deadline too short,\n"
      "     over --rate, --breaker open, or not admitted by its ramp)\n"
      "  8  -L: still a redirect after 5 hops, or one that cannot be followed\n");
}

typedef struct call_opts {
  const char *url;
  int method;                 /* resil_http_method, or -1 for the default */
  resil_http_param *headers;  /* names and values point into hdr_store     */
  char **hdr_store;           /* one allocation per -H                     */
  size_t header_count;
  char *body;                 /* owned                                     */
  size_t body_len;
  int has_body;
  int64_t connect_timeout_ns; /* 0: the client's default                   */
  int64_t timeout_ns;         /* 0: the client's default                   */
  int64_t deadline_ns;        /* 0: none                                   */
  const char *deadline_header; /* NULL: the library's; "": none           */
  uint32_t attempts;
  int fixed_backoff;
  int64_t initial_wait_ns;
  double multiplier;
  int64_t cap_ns;
  const char *idem_key;       /* NULL: none or auto                        */
  int idem_auto;
  int unsafe;
  int follow;
  size_t max_body;            /* 0: the client's default                   */
  int verbose;
  const char *config;         /* --config FILE (a registry file)           */
  const char *chain;          /* --chain NAME                              */
  int retry_options;          /* --retry, --backoff or --unsafe-retries given */
  const char *state;          /* --state NAME: the shared segment          */
  const char *state_dir;      /* --state-dir DIR                            */
  int64_t rate_n;             /* --rate N/PERIOD; 0: none                   */
  int64_t rate_period_ns;
  /* --breaker SPEC: a shared circuit breaker around the call (count
   * window), kept across invocations; br_window 0: none. */
  uint32_t br_window;
  uint32_t br_min;
  uint32_t br_rate_pct;
  int64_t br_wait_ns;
  uint32_t br_probes;
  /* Its ramp after recovery (breaker.h "Ramp"): ramp=, ramp_min=,
   * ramp_aggression=; br_ramp_ns 0: none. Ranges are the breaker's. */
  int64_t br_ramp_ns;
  uint32_t br_ramp_min_pct;
  double br_ramp_aggression;
  /* --retry-during-recovery: the retry does not watch the breaker. */
  int retry_during_recovery;
  /* Several instances (--instance, --resolve, --balance). */
  const char **instances;     /* the --instance values, in order           */
  size_t instance_count;
  int resolve;
  int balance;                /* resil_http_balance, or -1: the default    */
} call_opts;

static void opts_free(call_opts *o) {
  for (size_t i = 0; i < o->header_count; i++) free(o->hdr_store[i]);
  free(o->hdr_store);
  free(o->headers);
  free(o->body);
  free(o->instances);
}

static int bad(const char *arg, const char *fmt, const char *v) {
  fprintf(stderr, PROG ": %s: ", arg);
  fprintf(stderr, fmt, v);
  fputc('\n', stderr);
  return EXIT_USAGE;
}

/* Matches argv[*i] against a value option: "-X V", "-XV" (short) or
 * "--name V", "--name=V" (long). Returns 1 with *v set, 0 when argv[*i] is
 * another argument, -1 (error printed) when the value is missing. */
static int opt_value(int argc, char **argv, int *i, const char *shortname,
                     const char *longname, const char **v) {
  const char *a = argv[*i];
  const char *name = NULL;
  if (shortname && strncmp(a, shortname, 2) == 0) {
    name = shortname;
    if (a[2]) {
      *v = a + 2;
      return 1;
    }
  } else {
    size_t n = strlen(longname);
    if (strncmp(a, longname, n) != 0) return 0;
    if (a[n] == '=') {
      *v = a + n + 1;
      return 1;
    }
    if (a[n] != '\0') return 0;
    name = longname;
  }
  if (*i + 1 >= argc) {
    fprintf(stderr, PROG ": %s: needs a value (see --help)\n", name);
    return -1;
  }
  *v = argv[++*i];
  return 1;
}

static int parse_ms(const char *arg, const char *v, int64_t min, int64_t *out) {
  char *end = NULL;
  errno = 0;
  long long x = (*v >= '0' && *v <= '9') ? strtoll(v, &end, 10) : -1;
  if (x < 0 || errno != 0 || *end != '\0' || x < min || x > MAX_MS) {
    fprintf(stderr, PROG ": %s: expected milliseconds %lld..%lld, got '%s'\n",
            arg, (long long)min, (long long)MAX_MS, v);
    return -1;
  }
  *out = (int64_t)x * NS_PER_MS;
  return 0;
}

/* Indexed by resil_http_method. */
static const char *const method_names[] = {"GET",   "HEAD",   "POST",   "PUT",
                                           "PATCH", "DELETE", "OPTIONS"};

/* --rate N/PERIOD: N 1..1000000000 calls per PERIOD (a duration with its
 * unit, as in registry files: 1s, 500ms, 1h; a bare unit means 1 of it). */
static int parse_rate(call_opts *o, const char *v) {
  const char *slash = strchr(v, '/');
  char *end = NULL;
  errno = 0;
  long long n = (*v >= '0' && *v <= '9') ? strtoll(v, &end, 10) : -1;
  if (!slash || n < 1 || n > 1000000000 || errno || end != slash)
    return bad("--rate", "expected N/PERIOD such as 100/1s or 2/1h (N 1..1000000000), got '%s'",
               v);
#ifdef RESIL_HAVE_CONFIG
  char period[64];
  const char *p = slash + 1;
  snprintf(period, sizeof period, "%s%s", (*p >= 'a' && *p <= 'z') ? "1" : "", p);
  int64_t ns = 0;
  char why[160];
  if (resil_parse_duration(period, &ns, why, sizeof why) != RESIL_OK || ns <= 0)
    return bad("--rate", "expected a PERIOD such as 1s, 500ms or 1h after the '/', got '%s'",
               slash + 1);
  o->rate_n = n;
  o->rate_period_ns = ns;
  return 0;
#else
  (void)o;
  return bad("--rate", "%s", "this resil was built without libresil-config (durations)");
#endif
}

/* --breaker KEY=VALUE[,KEY=VALUE...]: window=N (the count window, 1..13632,
 * default 10), min=N (minimum calls, 1..window, default window), rate=PCT
 * (failure rate threshold, 1..100, default 50), wait=DURATION (OPEN wait,
 * default 60s), probes=N (HALF_OPEN calls, 1..window, default 1), and the
 * ramp after recovery, the registry's ramp_duration, ramp_min_percent and
 * ramp_aggression: ramp=DURATION (default 0, none), ramp_min=PCT (default
 * 10), ramp_aggression=X (default 1). A value that is not a number of its
 * kind is refused here; the ramp's ranges are the breaker's own
 * (resil_breaker_new, as for a registry file), reported by open_state. An
 * error names the argument and the key. */
static int parse_breaker(call_opts *o, const char *v) {
  o->br_window = 10;
  o->br_min = 0;
  o->br_rate_pct = 50;
  o->br_wait_ns = 60 * 1000 * NS_PER_MS;
  o->br_probes = 1;
  o->br_ramp_ns = 0;
  o->br_ramp_min_pct = 10;
  o->br_ramp_aggression = 1.0;
  const char *p = v;
  while (*p) {
    const char *end = strchr(p, ',');
    size_t len = end ? (size_t)(end - p) : strlen(p);
    char item[96];
    if (len == 0 || len >= sizeof item)
      return bad("--breaker",
                 "expected KEY=VALUE[,KEY=VALUE...] such as window=5,min=5,rate=50,wait=10s, "
                 "got '%s'",
                 v);
    memcpy(item, p, len);
    item[len] = '\0';
    char *eq = strchr(item, '=');
    if (!eq || eq == item || eq[1] == '\0') {
      fprintf(stderr, PROG ": --breaker: expected KEY=VALUE, got '%s'\n", item);
      return EXIT_USAGE;
    }
    *eq = '\0';
    const char *key = item, *val = eq + 1;
    if (strcmp(key, "wait") == 0) {
#ifdef RESIL_HAVE_CONFIG
      int64_t ns = 0;
      char why[160];
      if (resil_parse_duration(val, &ns, why, sizeof why) != RESIL_OK || ns < NS_PER_MS) {
        fprintf(stderr,
                PROG ": --breaker: wait: expected a duration of at least 1ms such as 300ms, "
                     "10s or 5m, got '%s'\n",
                val);
        return EXIT_USAGE;
      }
      o->br_wait_ns = ns;
#else
      return bad("--breaker", "%s", "wait: this resil was built without libresil-config (durations)");
#endif
    } else if (strcmp(key, "ramp") == 0) {
#ifdef RESIL_HAVE_CONFIG
      char why[160];
      if (resil_parse_duration(val, &o->br_ramp_ns, why, sizeof why) != RESIL_OK) {
        fprintf(stderr,
                PROG ": --breaker: ramp: expected a duration such as 500ms, 2s or 0 (no "
                     "ramp), got '%s'\n",
                val);
        return EXIT_USAGE;
      }
#else
      return bad("--breaker", "%s", "ramp: this resil was built without libresil-config (durations)");
#endif
    } else if (strcmp(key, "ramp_min") == 0) {
      /* A percent, "20" or "20%" as in a registry file. */
      char *e = NULL;
      errno = 0;
      long long n = (*val >= '0' && *val <= '9') ? strtoll(val, &e, 10) : -1;
      if (n >= 0 && e && *e == '%') e++;
      if (n < 0 || errno || *e || n > UINT32_MAX) {
        fprintf(stderr, PROG ": --breaker: ramp_min: expected a whole number (percent), got '%s'\n",
                val);
        return EXIT_USAGE;
      }
      o->br_ramp_min_pct = (uint32_t)n;
    } else if (strcmp(key, "ramp_aggression") == 0) {
      char *e = NULL;
      errno = 0;
      double d = strtod(val, &e);
      if (errno || e == val || *e || d != d) {
        fprintf(stderr, PROG ": --breaker: ramp_aggression: expected a number, got '%s'\n", val);
        return EXIT_USAGE;
      }
      o->br_ramp_aggression = d;
    } else {
      uint32_t *dst = strcmp(key, "window") == 0   ? &o->br_window
                      : strcmp(key, "min") == 0    ? &o->br_min
                      : strcmp(key, "rate") == 0   ? &o->br_rate_pct
                      : strcmp(key, "probes") == 0 ? &o->br_probes
                                                   : NULL;
      if (!dst) {
        fprintf(stderr,
                PROG ": --breaker: unknown key '%s' (window, min, rate, wait, probes, ramp, "
                     "ramp_min, ramp_aggression)\n",
                key);
        return EXIT_USAGE;
      }
      long long max = dst == &o->br_rate_pct ? 100 : 1000000;
      char *e = NULL;
      errno = 0;
      long long n = (*val >= '0' && *val <= '9') ? strtoll(val, &e, 10) : -1;
      if (n < 1 || errno || *e || n > max) {
        fprintf(stderr, PROG ": --breaker: %s: expected %s1..%lld, got '%s'\n", key,
                dst == &o->br_rate_pct ? "a failure rate in percent " : "a count ", max, val);
        return EXIT_USAGE;
      }
      *dst = (uint32_t)n;
    }
    p += len + (end ? 1 : 0);
    if (end && *p == '\0')
      return bad("--breaker", "a trailing ',' in '%s'", v);
  }
  if (!o->br_min) o->br_min = o->br_window;
  if (o->br_min > o->br_window) {
    fprintf(stderr, PROG ": --breaker: min: must be at most window (%u), got %u\n",
            (unsigned)o->br_window, (unsigned)o->br_min);
    return EXIT_USAGE;
  }
  if (o->br_probes > o->br_window) {
    fprintf(stderr, PROG ": --breaker: probes: must be at most window (%u), got %u\n",
            (unsigned)o->br_window, (unsigned)o->br_probes);
    return EXIT_USAGE;
  }
  return 0;
}

static int parse_method(const char *v, int *out) {
  for (int m = 0; m < (int)(sizeof method_names / sizeof method_names[0]); m++) {
    if (strcasecmp(v, method_names[m]) == 0) {
      *out = m;
      return 0;
    }
  }
  return -1;
}

static int is_tchar(int c) {
  return isalnum(c) || (c != 0 && strchr("!#$%&'*+-.^_`|~", c) != NULL);
}

static int ieq(const char *a, size_t alen, const char *b) {
  return strlen(b) == alen && strncasecmp(a, b, alen) == 0;
}

/* --deadline-header NAME|none: an HTTP token of 1..64 characters, checked
 * here so that a bad one is a usage error (the client checks the rest:
 * not a header libresil owns). */
static int set_deadline_header(call_opts *o, const char *v) {
  if (strcmp(v, "none") == 0) {
    o->deadline_header = "";
    return 0;
  }
  size_t n = strlen(v);
  if (n == 0 || n > 64)
    return bad("--deadline-header", "%s", "expected a header name of 1..64 characters or 'none'");
  for (size_t k = 0; k < n; k++)
    if (!is_tchar((unsigned char)v[k]))
      return bad("--deadline-header", "%s", "the header name must be an HTTP token (no spaces)");
  static const char *const owned[] = {"Content-Length", "Content-Encoding", "Transfer-Encoding",
                                      "Host", "Expect", "Connection", "Idempotency-Key"};
  for (size_t k = 0; k < sizeof owned / sizeof owned[0]; k++)
    if (ieq(v, n, owned[k]))
      return bad("--deadline-header", "%s cannot carry the deadline", owned[k]);
  o->deadline_header = v;
  return 0;
}

/* "Name: value" into a stored copy split at the colon. Leading and
 * trailing blanks of the value are dropped, as HTTP does. */
static int add_header(call_opts *o, const char *v) {
  const char *colon = strchr(v, ':');
  /* The argument is never quoted whole: its value may be a credential. */
  if (!colon || colon == v)
    return bad("-H", "%s", "expected 'Name: value' (no colon found)");
  size_t nl = (size_t)(colon - v);
  for (size_t k = 0; k < nl; k++)
    if (!is_tchar((unsigned char)v[k]))
      return bad("-H", "%s", "the header name must be an HTTP token (no spaces)");
  for (const char *p = colon + 1; *p; p++)
    if (*p == '\r' || *p == '\n') {
      fprintf(stderr, PROG ": -H: the value of %.*s must not contain CR or LF\n", (int)nl, v);
      return EXIT_USAGE;
    }
  static const char *const owned[] = {"Content-Length", "Content-Encoding",
                                      "Transfer-Encoding", "Host", "Expect",
                                      "Connection"};
  for (size_t k = 0; k < sizeof owned / sizeof owned[0]; k++)
    if (ieq(v, nl, owned[k]))
      return bad("-H", "%s is set by libresil and cannot be given", owned[k]);
  if (ieq(v, nl, "Idempotency-Key"))
    return bad("-H", "%s", "use --idempotency-key KEY to send Idempotency-Key");
  char *s = malloc(strlen(v) + 1);
  if (!s) {
    fprintf(stderr, PROG ": out of memory\n");
    return EXIT_LOCAL;
  }
  strcpy(s, v);
  s[nl] = '\0';
  char *val = s + nl + 1;
  while (*val == ' ' || *val == '\t') val++;
  size_t vl = strlen(val);
  while (vl > 0 && (val[vl - 1] == ' ' || val[vl - 1] == '\t')) val[--vl] = '\0';
  o->hdr_store[o->header_count] = s;
  o->headers[o->header_count].name = s;
  o->headers[o->header_count].value = val;
  o->header_count++;
  return 0;
}

/* Reads all of f into o->body, refusing more than MAX_BODY_BYTES: a
 * regular file by its size before a byte is read, anything else (a pipe,
 * a terminal) by reading at most one byte more than the limit. */
static int read_body(call_opts *o, FILE *f, const char *what) {
  struct stat sb;
  size_t cap = 4096, len = 0;
  if (fstat(fileno(f), &sb) == 0 && S_ISREG(sb.st_mode)) {
    if ((uintmax_t)sb.st_size > MAX_BODY_BYTES)
      return bad("-d", "'%s' is larger than 1 GiB (1073741824 bytes)", what);
    /* One byte more than the size shows whether the file grew. */
    cap = (size_t)sb.st_size + 1;
  }
  char *buf = malloc(cap);
  if (!buf) {
    fprintf(stderr, PROG ": out of memory\n");
    return EXIT_LOCAL;
  }
  for (;;) {
    if (len == cap) {
      if (cap > MAX_BODY_BYTES) break;
      size_t ncap = cap > MAX_BODY_BYTES / 2 ? MAX_BODY_BYTES + 1 : cap * 2;
      char *nb = realloc(buf, ncap);
      if (!nb) {
        free(buf);
        fprintf(stderr, PROG ": out of memory\n");
        return EXIT_LOCAL;
      }
      buf = nb;
      cap = ncap;
    }
    size_t n = fread(buf + len, 1, cap - len, f);
    len += n;
    if (n == 0) break;
  }
  if (len > MAX_BODY_BYTES) {
    free(buf);
    return bad("-d", "'%s' is larger than 1 GiB (1073741824 bytes)", what);
  }
  if (ferror(f)) {
    int e = errno;
    free(buf);
    fprintf(stderr, PROG ": -d: cannot read '%s': %s\n", what, strerror(e));
    return EXIT_USAGE;
  }
  o->body = buf;
  o->body_len = len;
  return 0;
}

static int set_body(call_opts *o, const char *v) {
  if (o->has_body) return bad("-d", "%s", "given more than once");
  o->has_body = 1;
  if (v[0] != '@') {
    o->body_len = strlen(v);
    o->body = malloc(o->body_len + 1);
    if (!o->body) {
      fprintf(stderr, PROG ": out of memory\n");
      return EXIT_LOCAL;
    }
    memcpy(o->body, v, o->body_len + 1);
    return 0;
  }
  const char *path = v + 1;
  if (strcmp(path, "-") == 0) return read_body(o, stdin, "standard input");
  FILE *f = fopen(path, "rb");
  if (!f) {
    fprintf(stderr, PROG ": -d: cannot open '%s': %s\n", path, strerror(errno));
    return EXIT_USAGE;
  }
  int rc = read_body(o, f, path);
  fclose(f);
  return rc;
}

static int parse_backoff(call_opts *o, const char *v) {
  static const char *const expect =
      "expected exp:INITIAL_MS,MULTIPLIER,CAP_MS (e.g. exp:100,2,2000) or fixed:MS, got '%s'";
  char *end = NULL;
  if (strncmp(v, "fixed:", 6) == 0) {
    const char *p = v + 6;
    errno = 0;
    long long ms = (*p >= '0' && *p <= '9') ? strtoll(p, &end, 10) : -1;
    if (ms < 0 || errno || *end) return bad("--backoff", expect, v);
    if (ms > MAX_MS) return bad("--backoff", "fixed wait must be 0..86400000 ms, got '%s'", v);
    o->fixed_backoff = 1;
    o->initial_wait_ns = (int64_t)ms * NS_PER_MS;
    o->cap_ns = o->initial_wait_ns;
    return 0;
  }
  if (strncmp(v, "exp:", 4) != 0) return bad("--backoff", expect, v);
  const char *p = v + 4;
  errno = 0;
  long long initial = (*p >= '0' && *p <= '9') ? strtoll(p, &end, 10) : -1;
  if (initial < 0 || errno || *end != ',') return bad("--backoff", expect, v);
  p = end + 1;
  double mult = (*p >= '0' && *p <= '9') ? strtod(p, &end) : -1.0;
  if (mult < 0 || errno || *end != ',') return bad("--backoff", expect, v);
  p = end + 1;
  long long cap = (*p >= '0' && *p <= '9') ? strtoll(p, &end, 10) : -1;
  if (cap < 0 || errno || *end != '\0') return bad("--backoff", expect, v);
  if (initial < 1 || initial > MAX_MS)
    return bad("--backoff", "INITIAL must be 1..86400000 ms, got '%s'", v);
  if (!(mult >= 1.0 && mult <= 100.0))
    return bad("--backoff", "MULT must be 1..100, got '%s'", v);
  if (cap < initial || cap > MAX_MS)
    return bad("--backoff", "CAP must be INITIAL..86400000 ms, got '%s'", v);
  o->fixed_backoff = 0;
  o->initial_wait_ns = (int64_t)initial * NS_PER_MS;
  o->multiplier = mult;
  o->cap_ns = (int64_t)cap * NS_PER_MS;
  return 0;
}

static int parse_key(call_opts *o, const char *v) {
  if (strcmp(v, "auto") == 0) {
    o->idem_auto = 1;
    o->idem_key = NULL;
    return 0;
  }
  size_t n = strlen(v);
  int ok = n >= 1 && n <= 255;
  for (size_t k = 0; ok && k < n; k++)
    ok = (unsigned char)v[k] > 0x20 && (unsigned char)v[k] < 0x7f;
  if (!ok)
    return bad("--idempotency-key",
               "expected auto or 1..255 visible ASCII characters (no spaces), got '%s'", v);
  o->idem_auto = 0;
  o->idem_key = v;
  return 0;
}

/* Returns 0, or the exit status of a usage error (already reported), or
 * -1 after --help. */
static int parse_args(int argc, char **argv, call_opts *o) {
  o->method = -1;
  o->attempts = 1;
  o->initial_wait_ns = 100 * NS_PER_MS;
  o->multiplier = 2.0;
  o->cap_ns = 2000 * NS_PER_MS;
  o->balance = -1;
  o->headers = calloc((size_t)argc, sizeof *o->headers);
  o->hdr_store = calloc((size_t)argc, sizeof *o->hdr_store);
  o->instances = calloc((size_t)argc, sizeof *o->instances);
  if (!o->headers || !o->hdr_store || !o->instances) {
    fprintf(stderr, PROG ": out of memory\n");
    return EXIT_LOCAL;
  }
  int options_done = 0;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    const char *v = NULL;
    int m, rc = 0;
    if (options_done || a[0] != '-' || a[1] == '\0') {
      if (o->url) {
        /* Neither is quoted: a URL may carry credentials. */
        fprintf(stderr, PROG ": URL: given twice (argument %d is a second URL)\n", i);
        return EXIT_USAGE;
      }
      o->url = a;
      continue;
    }
    if (strcmp(a, "--") == 0) {
      options_done = 1;
    } else if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
      usage(stdout);
      return -1;
    } else if (strcmp(a, "-v") == 0 || strcmp(a, "--verbose") == 0) {
      o->verbose++;
    } else if (strcmp(a, "-vv") == 0) {
      o->verbose += 2;
    } else if (strcmp(a, "-L") == 0 || strcmp(a, "--location") == 0) {
      o->follow = 1;
    } else if (strcmp(a, "--resolve") == 0) {
      o->resolve = 1;
    } else if (strcmp(a, "--unsafe-retries") == 0) {
      o->retry_options = 1;
      o->unsafe = 1;
    } else if (strcmp(a, "--retry-during-recovery") == 0) {
      o->retry_options = 1;
      o->retry_during_recovery = 1;
    } else if ((m = opt_value(argc, argv, &i, "-X", "--request", &v)) != 0) {
      if (m < 0) return EXIT_USAGE;
      if (parse_method(v, &o->method) != 0)
        return bad("-X", "expected GET, HEAD, POST, PUT, PATCH, DELETE or OPTIONS, got '%s'", v);
    } else if ((m = opt_value(argc, argv, &i, "-H", "--header", &v)) != 0) {
      if (m < 0) return EXIT_USAGE;
      if ((rc = add_header(o, v)) != 0) return rc;
    } else if ((m = opt_value(argc, argv, &i, "-d", "--data", &v)) != 0) {
      if (m < 0) return EXIT_USAGE;
      if ((rc = set_body(o, v)) != 0) return rc;
    } else if ((m = opt_value(argc, argv, &i, NULL, "--connect-timeout", &v)) != 0) {
      if (m < 0 || parse_ms("--connect-timeout", v, 1, &o->connect_timeout_ns)) return EXIT_USAGE;
    } else if ((m = opt_value(argc, argv, &i, NULL, "--timeout", &v)) != 0) {
      if (m < 0 || parse_ms("--timeout", v, 1, &o->timeout_ns)) return EXIT_USAGE;
    } else if ((m = opt_value(argc, argv, &i, NULL, "--deadline-header", &v)) != 0) {
      if (m < 0) return EXIT_USAGE;
      if ((rc = set_deadline_header(o, v)) != 0) return rc;
    } else if ((m = opt_value(argc, argv, &i, NULL, "--deadline", &v)) != 0) {
      if (m < 0 || parse_ms("--deadline", v, 1, &o->deadline_ns)) return EXIT_USAGE;
    } else if ((m = opt_value(argc, argv, &i, NULL, "--config", &v)) != 0) {
      if (m < 0) return EXIT_USAGE;
      o->config = v;
    } else if ((m = opt_value(argc, argv, &i, NULL, "--state-dir", &v)) != 0) {
      if (m < 0) return EXIT_USAGE;
      o->state_dir = v;
    } else if ((m = opt_value(argc, argv, &i, NULL, "--state", &v)) != 0) {
      if (m < 0) return EXIT_USAGE;
      o->state = v;
    } else if ((m = opt_value(argc, argv, &i, NULL, "--rate", &v)) != 0) {
      if (m < 0) return EXIT_USAGE;
      if ((rc = parse_rate(o, v)) != 0) return rc;
    } else if ((m = opt_value(argc, argv, &i, NULL, "--breaker", &v)) != 0) {
      if (m < 0) return EXIT_USAGE;
      if ((rc = parse_breaker(o, v)) != 0) return rc;
    } else if ((m = opt_value(argc, argv, &i, NULL, "--chain", &v)) != 0) {
      if (m < 0) return EXIT_USAGE;
      o->chain = v;
    } else if ((m = opt_value(argc, argv, &i, NULL, "--retry", &v)) != 0) {
      if (m < 0) return EXIT_USAGE;
      o->retry_options = 1;
      char *end = NULL;
      errno = 0;
      long n = (*v >= '0' && *v <= '9') ? strtol(v, &end, 10) : -1;
      if (n < 1 || errno || *end || n > (long)RESIL_RETRY_MAX_ATTEMPTS)
        return bad("--retry",
                   "expected attempts 1..1000, the first included (--retry 3 = at most 3 "
                   "calls), got '%s'",
                   v);
      o->attempts = (uint32_t)n;
    } else if ((m = opt_value(argc, argv, &i, NULL, "--max-body", &v)) != 0) {
      if (m < 0) return EXIT_USAGE;
      char *end = NULL;
      errno = 0;
      unsigned long long n = (*v >= '0' && *v <= '9') ? strtoull(v, &end, 10) : 0;
      if (n < 1 || errno || *end || n > MAX_RESPONSE_BYTES)
        return bad("--max-body", "expected bytes 1..1073741824, got '%s'", v);
      o->max_body = (size_t)n;
    } else if ((m = opt_value(argc, argv, &i, NULL, "--backoff", &v)) != 0) {
      if (m < 0) return EXIT_USAGE;
      o->retry_options = 1;
      if ((rc = parse_backoff(o, v)) != 0) return rc;
    } else if ((m = opt_value(argc, argv, &i, NULL, "--instance", &v)) != 0) {
      if (m < 0) return EXIT_USAGE;
      /* Checked by the client (base_url's rules); never quoted here. */
      if (strncasecmp(v, "http://", 7) != 0 && strncasecmp(v, "https://", 8) != 0)
        return bad("--instance", "%s", "must start with http:// or https://");
      o->instances[o->instance_count++] = v;
    } else if ((m = opt_value(argc, argv, &i, NULL, "--balance", &v)) != 0) {
      if (m < 0) return EXIT_USAGE;
      if (strcmp(v, "p2c") == 0)
        o->balance = RESIL_HTTP_BALANCE_P2C;
      else if (strcmp(v, "round_robin") == 0)
        o->balance = RESIL_HTTP_BALANCE_ROUND_ROBIN;
      else
        return bad("--balance", "expected p2c or round_robin, got '%s'", v);
    } else if ((m = opt_value(argc, argv, &i, NULL, "--idempotency-key", &v)) != 0) {
      if (m < 0) return EXIT_USAGE;
      if ((rc = parse_key(o, v)) != 0) return rc;
    } else {
      fprintf(stderr, PROG ": unknown option '%s' (see --help)\n", a);
      return EXIT_USAGE;
    }
  }
  if (!o->url) {
    fprintf(stderr, PROG ": URL: missing (see --help)\n");
    return EXIT_USAGE;
  }
  if (o->resolve && o->instance_count)
    return bad("--resolve", "%s",
               "--resolve and --instance: give one or the other (the URL's addresses, or "
               "a list of base URLs)");
  if (o->balance >= 0 && !o->resolve && !o->instance_count)
    return bad("--balance", "%s", "needs --instance or --resolve (one instance: nothing to choose)");
  if (o->resolve && o->url[0] == '/')
    return bad("--resolve", "%s", "needs a URL with a host name, not a path");
  if ((o->config != NULL) != (o->chain != NULL))
    return bad(o->config ? "--config" : "--chain", "%s",
               "--config FILE and --chain NAME go together");
  if (o->rate_n && !o->state)
    return bad("--rate", "%s", "needs --state NAME (the segment that keeps it across calls)");
  if (o->br_window && !o->state)
    return bad("--breaker", "%s", "needs --state NAME (the segment that keeps it across calls)");
  if (o->retry_during_recovery && !o->br_window)
    return bad("--retry-during-recovery", "%s",
               "needs --breaker SPEC (without one no breaker is watched: retries are never "
               "held back)");
  if (o->state_dir && !o->state) return bad("--state-dir", "%s", "needs --state NAME");
  if (o->state && !o->rate_n && !o->br_window)
    return bad("--state", "%s",
               "needs --rate N/PERIOD or --breaker SPEC (the policies to keep in the segment)");
  if (o->state && o->chain)
    return bad("--state", "%s",
               "a --chain's file names its own segments (its `shared:` section)");
  if (o->chain && o->retry_options)
    return bad("--chain", "%s",
               "the chain's layers replace --retry, --backoff, --unsafe-retries and "
               "--retry-during-recovery");
#ifndef RESIL_HAVE_CONFIG
  if (o->config)
    return bad("--config", "%s", "this resil was built without libresil-config (libyaml)");
#endif
  if (o->method < 0) o->method = o->has_body ? RESIL_HTTP_POST : RESIL_HTTP_GET;
  if (o->method == RESIL_HTTP_HEAD && o->has_body && o->body_len > 0)
    return bad("-d", "%s", "a HEAD request has no body");
  return 0;
}

/* ---- URL ------------------------------------------------------------------ */

static int url_literal_ok(int c, int query) {
  if (isalnum(c) || (c != 0 && strchr("-._~!$&'()*+,;=:@/", c))) return 1;
  return query && c == '?';
}

static int is_hex(int c) { return isxdigit(c) != 0; }

/* Copies s[0..n) percent-encoding every byte a path (or query) template may
 * not hold literally; "%XX" escapes are kept. */
static char *escape_part(const char *s, size_t n, int query) {
  static const char hex[] = "0123456789ABCDEF";
  char *out = malloc(3 * n + 1), *w = out;
  if (!out) return NULL;
  for (size_t i = 0; i < n; i++) {
    unsigned char c = (unsigned char)s[i];
    if (c == '%' && i + 2 < n && is_hex((unsigned char)s[i + 1]) &&
        is_hex((unsigned char)s[i + 2])) {
      memcpy(w, s + i, 3);
      w += 3;
      i += 2;
    } else if (c != '%' && url_literal_ok(c, query)) {
      *w++ = (char)c;
    } else {
      *w++ = '%';
      *w++ = hex[c >> 4];
      *w++ = hex[c & 15];
    }
  }
  *w = '\0';
  return out;
}

typedef struct url_parts {
  char *base;  /* "http://host:port" */
  char *path;  /* "/a/b", never empty */
  char *query; /* without '?'; NULL when absent or empty */
} url_parts;

static void url_parts_free(url_parts *u) {
  free(u->base);
  free(u->path);
  free(u->query);
}

/* Returns 0, EXIT_USAGE (reported) or EXIT_LOCAL (reported). A path alone
 * ("/x?y", path_only: with --instance) leaves u->base NULL. */
static int split_url(const char *url, int path_only, url_parts *u) {
  size_t slen;
  const char *scheme;
  if (path_only && url[0] == '/') {
    slen = 0;
    scheme = NULL;
  } else if (strncasecmp(url, "http://", 7) == 0) {
    slen = 7;
    scheme = "http://";
  } else if (strncasecmp(url, "https://", 8) == 0) {
    slen = 8;
    scheme = "https://";
  } else {
    /* Not quoted: even a mistyped URL may carry credentials. */
    return bad("URL", "%s",
               path_only ? "must start with http:// or https://, or be a path starting with /"
                         : "must start with http:// or https://");
  }
  const char *auth = url + slen;
  size_t alen = scheme ? strcspn(auth, "/?#") : 0;
  if (scheme && alen == 0) return bad("URL", "%s", "has no host");
  const char *rest = auth + alen;
  size_t plen = strcspn(rest, "?#");
  const char *q = rest + plen;
  size_t qlen = 0;
  if (*q == '?') {
    q++;
    qlen = strcspn(q, "#");
  }
  u->base = scheme ? malloc(slen + alen + 1) : NULL;
  u->path = plen ? escape_part(rest, plen, 0) : malloc(2);
  u->query = qlen ? escape_part(q, qlen, 1) : NULL;
  if ((scheme && !u->base) || !u->path || (qlen && !u->query)) {
    fprintf(stderr, PROG ": out of memory\n");
    return EXIT_LOCAL;
  }
  if (scheme) {
    memcpy(u->base, scheme, slen);
    memcpy(u->base + slen, auth, alen);
    u->base[slen + alen] = '\0';
  }
  if (!plen) strcpy(u->path, "/");
  return 0;
}

/* ---- the call ------------------------------------------------------------- */

static int64_t mono_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * INT64_C(1000000000) + ts.tv_nsec;
}

static void log_line(void *user, resil_http_log_level level, const char *line) {
  (void)user;
  (void)level;
  fprintf(stderr, "* %s\n", line);
}

static int exit_status(const resil_outcome *o) {
  switch (o->kind) {
  case RESIL_NOT_SENT:
    return EXIT_NOT_SENT;
  case RESIL_UNKNOWN:
    return EXIT_UNKNOWN;
  case RESIL_REJECTED:
    return EXIT_REJECTED;
  case RESIL_ANSWERED:
    switch (resil_outcome_classify(o)) {
    case RESIL_CLASS_SUCCESS:
    case RESIL_CLASS_REDIRECT:
      return EXIT_OK;
    case RESIL_CLASS_CLIENT_ERROR:
      return EXIT_CLIENT_ERROR;
    default:
      return EXIT_SERVER_ERROR;
    }
  }
  return EXIT_LOCAL;
}

/* Why the retry stopped, in words, for the result line. */
static const char *stop_hint(const resil_outcome *o) {
  switch (o->stop) {
  case RESIL_STOP_UNSAFE:
    return "not retried: the request may have executed and is neither idempotent nor "
           "keyed; --idempotency-key auto makes a retry safe if the server deduplicates";
  case RESIL_STOP_NOT_RETRYABLE:
    return o->kind == RESIL_ANSWERED ? "not retried: a client error is never retried"
                                     : "not retried";
  case RESIL_STOP_DEADLINE:
    return "the deadline left no time for another attempt";
  case RESIL_STOP_MAX_ATTEMPTS:
    return "all --retry attempts made";
  case RESIL_STOP_RECOVERING:
    return "not retried: the --breaker is recovering (HALF_OPEN, this call its probe, or "
           "ramping): retries last; --retry-during-recovery retries anyway";
  default:
    return NULL;
  }
}

static void print_warnings(const call_opts *o, const resil_retry_config *rc) {
  if (o->unsafe)
    fprintf(stderr,
            PROG ": WARNING: --unsafe-retries: UNKNOWN, 5xx, 408, 425 and 429 outcomes of a "
                 "request that is neither idempotent nor keyed will be retried; every retry "
                 "may repeat the side effect (a duplicate order, a double payment)\n");
  if (o->attempts > 1 && o->deadline_ns == 0) {
    int64_t per_attempt = (o->connect_timeout_ns ? o->connect_timeout_ns : 10000 * NS_PER_MS) +
                          (o->timeout_ns ? o->timeout_ns : 60000 * NS_PER_MS);
    int64_t wait = resil_retry_worst_wait_ns(rc);
    fprintf(stderr,
            PROG ": warning: --retry %u without --deadline: the call may take up to %.1f s "
                 "(%u attempts x %.1f s of connect and response timeouts, + %.1f s of waits); "
                 "set --deadline MS\n",
            (unsigned)o->attempts,
            (double)o->attempts * (double)per_attempt / 1e9 + (double)wait / 1e9,
            (unsigned)o->attempts, (double)per_attempt / 1e9, (double)wait / 1e9);
  }
  if (o->deadline_ns && o->timeout_ns > o->deadline_ns)
    fprintf(stderr,
            PROG ": warning: --timeout %lld ms is longer than --deadline %lld ms: an attempt "
                 "is cut at the deadline, and one slow attempt leaves no time for a retry\n",
            (long long)(o->timeout_ns / NS_PER_MS), (long long)(o->deadline_ns / NS_PER_MS));
  else if (o->deadline_ns && o->attempts > 1 && o->timeout_ns == 0)
    fprintf(stderr,
            PROG ": warning: --retry %u with --deadline but no --timeout: one slow attempt "
                 "can use the whole deadline and leave no time for a retry\n",
            (unsigned)o->attempts);
}

static void fmt_status(char *buf, size_t n, const resil_outcome *o) {
  if (o->http_status > 0)
    snprintf(buf, n, "%d", o->http_status);
  else
    snprintf(buf, n, "-");
}

/* The attempts each instance was chosen for (several instances): which
 * instance an attempt went to is the one whose count grew, since this
 * process makes one attempt at a time. */
typedef struct chosen_watch {
  const resil_http_client *client; /* NULL: one instance, nothing watched */
  uint64_t *chosen;
  size_t n;
} chosen_watch;

static void watch_snapshot(chosen_watch *w) {
  if (!w->client) return;
  size_t n = resil_http_client_instance_count(w->client);
  if (n > w->n) {
    uint64_t *nv = realloc(w->chosen, n * sizeof *nv);
    if (!nv) return; /* then the lines say no instance */
    memset(nv + w->n, 0, (n - w->n) * sizeof *nv);
    w->chosen = nv;
    w->n = n;
  }
  for (size_t i = 0; i < w->n; i++) {
    resil_http_instance_stats st;
    if (resil_http_client_instance_stats(w->client, i, &st) == RESIL_OK) w->chosen[i] = st.chosen;
  }
}

/* The instance chosen since the last snapshot (and a new snapshot), or -1. */
static long watch_chosen(chosen_watch *w) {
  long which = -1;
  for (size_t i = 0; w->client && i < w->n; i++) {
    resil_http_instance_stats st;
    if (resil_http_client_instance_stats(w->client, i, &st) == RESIL_OK &&
        st.chosen != w->chosen[i]) {
      which = (long)i;
      w->chosen[i] = st.chosen;
    }
  }
  return which;
}

/* Instance i's URL, redacted (a base URL may carry userinfo); resolved:
 * --resolve's "URL@address". */
static void instance_url(const resil_http_client *c, long i, int resolved, char *buf, size_t n) {
  resil_http_instance_stats st;
  if (i < 0 || resil_http_client_instance_stats(c, (size_t)i, &st) != RESIL_OK) {
    snprintf(buf, n, "?");
    return;
  }
  resil_cli_instance_text(buf, n, st.instance, resolved);
}

/* Runs the attempts with the retry's split form, printing one line per
 * attempt with -v (with the instance it went to when w watches several).
 * Returns the final outcome. */
static resil_outcome run_call(const call_opts *o, resil_retry *retry,
                              resil_http_request *req, chosen_watch *w) {
  resil_ctx ctx;
  resil_ctx_init(&ctx);
  ctx.flags = resil_http_request_call_flags(req);
  if (o->deadline_ns) resil_ctx_set_timeout_ns(&ctx, o->deadline_ns);
  resil_retry_state *st = NULL;
  if (resil_retry_state_new(NULL, &st) != RESIL_OK)
    return resil_outcome_make(RESIL_NOT_SENT, RESIL_REASON_LOCAL_ERROR);
  resil_decision d = resil_retry_begin(retry, &ctx, st);
  if (d == RESIL_DECISION_DENY && o->verbose) {
    resil_outcome r = resil_retry_result(st);
    char ob[96];
    fprintf(stderr, "no attempt made: %s\n", resil_outcome_format(&r, ob, sizeof ob));
  }
  while (d != RESIL_DECISION_DENY) {
    if (o->verbose) watch_snapshot(w);
    int64_t t0 = mono_ns();
    resil_outcome a = resil_http_request_attempt(req, resil_retry_state_ctx(st));
    int64_t took = mono_ns() - t0;
    uint32_t n = resil_retry_state_ctx(st)->attempt;
    int64_t delay = 0;
    d = resil_retry_next_timed(retry, st, &a, took, &delay);
    if (o->verbose) {
      char ob[96], sb[16], ib[440] = "";
      resil_outcome_format(&a, ob, sizeof ob);
      fmt_status(sb, sizeof sb, &a);
      if (w->client) {
        long which = watch_chosen(w);
        char url[400];
        instance_url(w->client, which, o->resolve, url, sizeof url);
        if (which >= 0)
          snprintf(ib, sizeof ib, " instance %ld (%s)", which, url);
        else
          snprintf(ib, sizeof ib, " no instance");
      }
      if (d != RESIL_DECISION_DENY) {
        fprintf(stderr, "attempt %u: %s status=%s %.1f ms%s, next in %lld ms%s\n", (unsigned)n,
                ob, sb, (double)took / 1e6, ib, (long long)(delay / NS_PER_MS),
                a.retry_after_ms > 0 ? " (Retry-After)" : "");
      } else {
        resil_outcome r = resil_retry_result(st);
        fprintf(stderr, "attempt %u: %s status=%s %.1f ms%s, stop: %s\n", (unsigned)n, ob, sb,
                (double)took / 1e6, ib, resil_stop_name(r.stop));
      }
    }
    if (d == RESIL_DECISION_WAIT) {
      resil_clock_sleep_ns(NULL, delay, NULL);
      /* Retries last after the wait too: a --breaker that began recovering
       * meanwhile stops the call (RECOVERING). */
      d = resil_retry_proceed(retry, st);
    }
  }
  resil_outcome final = resil_retry_result(st);
  resil_retry_state_free(st);
  return final;
}

#ifdef RESIL_HAVE_CONFIG
/* One logical call through the chain (resil_chain_run of the request's
 * attempts); with -v, the nesting before and each layer's counters after. */
static resil_outcome run_chain(const call_opts *o, resil_chain *ch, resil_http_request *req) {
  resil_ctx ctx;
  resil_ctx_init(&ctx);
  ctx.flags = resil_http_request_call_flags(req);
  if (o->deadline_ns) resil_ctx_set_timeout_ns(&ctx, o->deadline_ns);
  if (o->verbose) {
    char nest[512];
    resil_chain_nesting(ch, nest, sizeof nest);
    fprintf(stderr, "chain %s: %s\n", o->chain, nest);
  }
  resil_outcome fin = resil_chain_run(ch, &ctx, resil_http_request_attempt, req);
  if (o->verbose) {
    for (size_t i = 0; i < resil_chain_layers(ch); i++) {
      resil_layer_stats ls;
      if (resil_chain_layer_stats(ch, i, &ls) != RESIL_OK) continue;
      fprintf(stderr, "layer %zu: calls %llu, attempts out %llu, rejections %llu\n", i + 1,
              (unsigned long long)ls.calls_in, (unsigned long long)ls.attempts_out,
              (unsigned long long)ls.rejections);
    }
  }
  return fin;
}
#endif

static int write_body(const resil_http_response *resp) {
  size_t len = 0;
  const void *body = resil_http_response_body(resp, &len);
  if ((len && fwrite(body, 1, len, stdout) != len) || fflush(stdout) != 0) {
    fprintf(stderr, PROG ": stdout: write error: %s\n", strerror(errno));
    return -1;
  }
  return 0;
}

/* Reports a client or request setup error: usage (2) when the error is about
 * what the user gave, else local (1). url_first: the client's instances[0]
 * is the URL's (else an --instance). */
static int setup_error(resil_status st, const resil_error *err, int url_first) {
  const char *msg = err->msg;
  size_t fl = strlen(err->field);
  if (fl && strncmp(msg, err->field, fl) == 0 && msg[fl] == ':') msg += fl + 1;
  while (*msg == ' ') msg++;
  if (st != RESIL_EINVAL) {
    fprintf(stderr, PROG ": %s\n", err->msg[0] ? err->msg : resil_strerror(st));
    return EXIT_LOCAL;
  }
  const char *arg = err->field;
  size_t item = 0;
  int used = 0;
  if (strcmp(arg, "base_url") == 0 || strncmp(arg, "endpoints[0].", 13) == 0)
    arg = "URL";
  else if (sscanf(arg, "instances[%zu]%n", &item, &used) == 1 && arg[used] == '\0')
    arg = item == 0 && url_first ? "URL" : "--instance";
  else if (strcmp(arg, "instances") == 0)
    arg = "--instance";
  else if (strcmp(arg, "resolve_instances") == 0 || strcmp(arg, "resolve_interval_ns") == 0)
    arg = "--resolve";
  else if (strcmp(arg, "balance") == 0)
    arg = "--balance";
  else if (strcmp(arg, "headers") == 0)
    arg = "-H";
  else if (strcmp(arg, "body") == 0)
    arg = "-d";
  else if (strcmp(arg, "idempotency_key") == 0)
    arg = "--idempotency-key";
  fprintf(stderr, PROG ": %s: %s\n", arg[0] ? arg : "error", msg);
  return EXIT_USAGE;
}

/* 1 when -L was given and the answer is a redirect libcurl would follow (a
 * 3xx other than 304, with a Location) that was not followed. */
static int redirect_left(const call_opts *o, const resil_http_response *resp) {
  int st = resil_http_response_status(resp);
  return o->follow && st >= 300 && st < 400 && st != 304 && st != 305 && st != 306 &&
         resil_http_response_header(resp, "location") != NULL;
}

static void state_fallback(void *user, const char *instance, const resil_error *why) {
  (void)user, (void)instance;
  fprintf(stderr, PROG ": warning: --state: %s: this call's policies are not shared\n",
          why->msg);
}

/* --breaker's circuit breaker, in segment seg (NULL: this process's, as
 * open_state makes to check the spec before the segment is opened). An
 * error is reported naming the spec's key, with the breaker's own message
 * (its ranges, the ramp's among them, as for a registry file). */
static resil_status new_breaker(const call_opts *o, resil_shared *seg, resil_breaker **br) {
  resil_breaker_config bc;
  resil_breaker_config_init(&bc);
  bc.name = "breaker";
  bc.window_type = RESIL_BREAKER_WINDOW_COUNT;
  bc.window_size = o->br_window;
  bc.minimum_calls = o->br_min;
  bc.failure_rate_threshold_pct = o->br_rate_pct;
  bc.open_wait_ns = o->br_wait_ns;
  bc.half_open_permitted_calls = o->br_probes;
  bc.ramp_duration_ns = o->br_ramp_ns;
  bc.ramp_min_percent = o->br_ramp_min_pct;
  bc.ramp_aggression = o->br_ramp_aggression;
  /* half_open_max_wait_ns keeps its default (60 s): a probe whose
   * process is killed before its result is given up then. */
  bc.event_capacity = 0; /* no one reads this process's events */
  bc.shared = seg;
  resil_error err;
  resil_status st = resil_breaker_new(&bc, br, &err);
  if (st != RESIL_OK) {
    /* named by the spec's key (a shared window's limit is the slot's) */
    static const char *const keys[][2] = {{"window_size", "window"},
                                          {"minimum_calls", "min"},
                                          {"failure_rate_threshold_pct", "rate"},
                                          {"open_wait_ns", "wait"},
                                          {"half_open_permitted_calls", "probes"},
                                          {"ramp_duration_ns", "ramp"},
                                          {"ramp_min_percent", "ramp_min"},
                                          {"ramp_aggression", "ramp_aggression"}};
    const char *key = err.field, *m = err.msg;
    size_t fl = strlen(err.field);
    if (fl && strncmp(m, err.field, fl) == 0 && m[fl] == ':' && m[fl + 1] == ' ') m += fl + 2;
    for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++)
      if (strcmp(err.field, keys[k][0]) == 0) key = keys[k][1];
    fprintf(stderr, PROG ": --breaker: %s%s%s\n", key, *key ? ": " : "", m);
  }
  return st;
}

/* --state: the segment (created if needed) and the policies kept in it;
 * the command line is the truth, as a registry file is (replace_differing).
 * A segment that cannot be used falls back to per-call state with a
 * warning. Returns 0, EXIT_USAGE or EXIT_LOCAL (reported). */
static int open_state(const call_opts *o, resil_shared **seg, resil_ratelimiter **rate,
                      resil_breaker **br) {
  resil_status st;
  if (o->br_window) {
    /* The spec checked first, so that a bad one creates no segment. */
    if ((st = new_breaker(o, NULL, br)) != RESIL_OK)
      return st == RESIL_EINVAL ? EXIT_USAGE : EXIT_LOCAL;
    resil_breaker_free(*br);
    *br = NULL;
  }
  resil_shared_config sc;
  resil_shared_config_init(&sc);
  sc.name = o->state;
  sc.dir = o->state_dir;
  sc.replace_differing = 1;
  sc.on_fallback = state_fallback;
  resil_error err;
  st = resil_shared_open(&sc, seg, &err);
  if (st != RESIL_OK) {
    const char *m = err.msg;
    size_t fl = strlen(err.field);
    if (fl && strncmp(m, err.field, fl) == 0 && m[fl] == ':' && m[fl + 1] == ' ') m += fl + 2;
    fprintf(stderr, PROG ": %s: %s\n", strcmp(err.field, "dir") == 0 ? "--state-dir" : "--state",
            m);
    return st == RESIL_EINVAL ? EXIT_USAGE : EXIT_LOCAL;
  }
  if (o->rate_n) {
    resil_ratelimiter_config rc;
    resil_ratelimiter_config_init(&rc);
    rc.name = "rate";
    rc.limit_for_period = o->rate_n;
    rc.refresh_period_ns = o->rate_period_ns;
    rc.timeout_ns = 0; /* one call: over the rate it is not made */
    rc.shared = *seg;
    if ((st = resil_ratelimiter_new(&rc, rate, &err)) != RESIL_OK) {
      fprintf(stderr, PROG ": --rate: %s\n", err.msg);
      return st == RESIL_EINVAL ? EXIT_USAGE : EXIT_LOCAL;
    }
  }
  if (o->br_window && (st = new_breaker(o, *seg, br)) != RESIL_OK)
    return st == RESIL_EINVAL ? EXIT_USAGE : EXIT_LOCAL;
  return 0;
}

int resil_cmd_call(int argc, char **argv) {
  /* Before anything is opened: a closed descriptor 0..2 would be reused by
   * the next one opened (libcurl's socketpair), and the body meant for
   * stdout would go into it. */
  int closed = resil_cli_closed_std_fd();
  if (closed >= 0) {
    if (closed != 2)
      fprintf(stderr, PROG ": file descriptor %d (%s) is closed; run with it open\n", closed,
              closed == 0 ? "stdin" : "stdout");
    return EXIT_LOCAL;
  }
  call_opts o;
  memset(&o, 0, sizeof o);
  url_parts u;
  memset(&u, 0, sizeof u);
  resil_http_client *client = NULL;
  resil_http_request *req = NULL;
  resil_retry *retry = NULL;
  resil_http_response *resp = NULL;
#ifdef RESIL_HAVE_CONFIG
  resil_registry *reg = NULL;
  resil_chain *chain = NULL;
#endif
  resil_shared *seg = NULL;
  resil_ratelimiter *rate = NULL;
  resil_breaker *br = NULL;
  const char **inst = NULL;         /* the client's instances (--instance) */
  chosen_watch watch = {NULL, NULL, 0};
  resil_error err;
  resil_status st;
  int rc = parse_args(argc, argv, &o);
  int several = o.instance_count > 0 || o.resolve;
  if (rc != 0) {
    rc = rc < 0 ? EXIT_OK : rc;
    goto done;
  }
  if ((rc = split_url(o.url, o.instance_count > 0, &u)) != 0) goto done;
  if (o.instance_count + (u.base ? 1u : 0u) > MAX_INSTANCES) {
    /* The client would say "got 65" without saying the URL's origin is one
     * of them (http.h: 1..64 instances). */
    if (u.base)
      fprintf(stderr,
              PROG ": --instance: at most %d instances with the URL's own, got %zu (%zu "
                   "--instance and the URL's origin)\n",
              MAX_INSTANCES, o.instance_count + 1, o.instance_count);
    else
      fprintf(stderr, PROG ": --instance: at most %d instances, got %zu\n", MAX_INSTANCES,
              o.instance_count);
    rc = EXIT_USAGE;
    goto done;
  }
#ifdef RESIL_HAVE_CONFIG
  if (o.config) {
    resil_registry_error rerr;
    resil_registry_error_init(&rerr);
    if (resil_registry_load_file(o.config, &reg, &rerr) != RESIL_OK) {
      char line[1024];
      resil_registry_error_format(&rerr, line, sizeof line);
      fprintf(stderr, "%s\n", line);
      rc = EXIT_USAGE;
      goto done;
    }
    chain = resil_registry_chain(reg, o.chain);
    if (!chain) {
      fprintf(stderr, PROG ": --chain: no chain '%s' in %s\n", o.chain, o.config);
      rc = EXIT_USAGE;
      goto done;
    }
  }
#endif

  if (o.state && (rc = open_state(&o, &seg, &rate, &br)) != 0) goto done;

  resil_retry_config rcfg;
  resil_retry_config_init(&rcfg);
  rcfg.name = "call";
  rcfg.max_attempts = o.attempts;
  if (o.fixed_backoff) {
    rcfg.backoff = RESIL_RETRY_FIXED;
    rcfg.wait_ns = o.initial_wait_ns;
    /* A Retry-After is capped at the fixed wait, as --help says; with no
     * wait at all (0 would mean "the default cap") it is not used. */
    rcfg.max_retry_after_ns = o.initial_wait_ns;
  } else {
    rcfg.backoff = RESIL_RETRY_EXPONENTIAL;
    rcfg.initial_wait_ns = o.initial_wait_ns;
    rcfg.multiplier = o.multiplier;
    rcfg.max_wait_ns = o.cap_ns;
  }
  rcfg.respect_retry_after = !o.fixed_backoff || o.initial_wait_ns > 0;
  rcfg.unsafe_retry_non_idempotent = o.unsafe;
  /* Retries last (DESIGN §2.9), the registry's default: the retry watches
   * the --breaker around it and makes no retry while it is HALF_OPEN (this
   * invocation is its probe) or ramping, unless --retry-during-recovery. */
  rcfg.recovery_breaker = br;
  rcfg.retry_during_recovery = o.retry_during_recovery;
  if (!o.chain && (st = resil_retry_new(&rcfg, &retry, &err)) != RESIL_OK) {
    fprintf(stderr, PROG ": %s: %s\n", st == RESIL_EINVAL ? "--backoff" : "retry", err.msg);
    rc = st == RESIL_EINVAL ? EXIT_USAGE : EXIT_LOCAL;
    goto done;
  }

  resil_http_endpoint ep;
  memset(&ep, 0, sizeof ep);
  ep.struct_size = sizeof ep;
  ep.name = "call";
  ep.method = (resil_http_method)o.method;
  ep.path = u.path;
  ep.query = u.query;
  /* curl's default for -d; a -H Content-Type replaces it. */
  ep.content_type = o.has_body ? "application/x-www-form-urlencoded" : NULL;
  ep.idempotency_key = o.idem_auto ? RESIL_HTTP_KEY_SEND : RESIL_HTTP_KEY_NONE;
  resil_http_client_config cc;
  resil_http_client_config_init(&cc);
  cc.name = "call";
  if (o.instance_count) {
    /* The URL's origin first (when it has one), then each --instance. */
    inst = calloc(o.instance_count + 2, sizeof *inst);
    if (!inst) {
      fprintf(stderr, PROG ": out of memory\n");
      rc = EXIT_LOCAL;
      goto done;
    }
    size_t k = 0;
    if (u.base) inst[k++] = u.base;
    for (size_t i = 0; i < o.instance_count; i++) inst[k++] = o.instances[i];
    inst[k] = NULL;
    cc.instances = inst;
  } else {
    cc.base_url = u.base;
  }
  cc.resolve_instances = o.resolve;
  if (o.balance >= 0) cc.balance = (resil_http_balance)o.balance;
  cc.endpoints = &ep;
  cc.endpoint_count = 1;
  /* One logical call, one attempt at a time: one connection is enough. */
  cc.max_connections = 1;
  cc.max_connections_per_host = 1;
  if (o.connect_timeout_ns) cc.connect_timeout_ns = o.connect_timeout_ns;
  if (o.timeout_ns) cc.response_timeout_ns = o.timeout_ns;
  cc.follow_redirects = o.follow;
  cc.max_redirects = MAX_REDIRECTS;
  if (o.max_body) cc.max_response_bytes = o.max_body;
  if (o.deadline_header && !o.deadline_header[0]) cc.deadline_propagation = 0;
  else if (o.deadline_header) cc.deadline_header = o.deadline_header;
  if (o.verbose >= 2) {
    cc.log_level = RESIL_HTTP_LOG_HEADERS;
    cc.log_fn = log_line;
  }
  if ((st = resil_http_client_new(&cc, &client, &err)) != RESIL_OK) {
    rc = setup_error(st, &err, u.base != NULL);
    goto done;
  }
  if (several) watch.client = client;
  resil_http_args args;
  resil_http_args_init(&args);
  args.headers = o.headers;
  args.header_count = o.header_count;
  args.body = o.body;
  args.body_len = o.body_len;
  args.idempotency_key = o.idem_key;
  if ((st = resil_http_request_new(client, "call", &args, &req, &err)) != RESIL_OK) {
    rc = setup_error(st, &err, u.base != NULL);
    goto done;
  }

  if (!o.chain) print_warnings(&o, &rcfg);
  uint32_t flags = resil_http_request_call_flags(req);
  if (o.verbose) {
    const char *key = resil_http_request_idempotency_key(req);
    /* The URL is not repeated here: it may carry credentials, and -vv shows
     * it as sent, redacted by the library. */
    if (o.chain)
      fprintf(stderr, "request: %s (%s, through chain %s)\n", method_names[o.method],
              (flags & RESIL_CALL_IDEMPOTENT) ? "idempotent" : "not idempotent", o.chain);
    else
      fprintf(stderr, "request: %s (%s, at most %u attempt%s)\n", method_names[o.method],
              (flags & RESIL_CALL_IDEMPOTENT) ? "idempotent" : "not idempotent",
              (unsigned)o.attempts, o.attempts == 1 ? "" : "s");
    fprintf(stderr, "idempotency key: %s\n", key ? key : "none");
  }

  resil_outcome fin;
  resil_reason why = RESIL_REASON_OK;
  /* The shared breaker outside the rate limiter (a call it refuses takes
   * no rate permit), one result per invocation, after its retries. */
  resil_breaker_permit permit;
  int held = 0, made = 0;
  int64_t t0 = 0;
  resil_reason refusal = RESIL_REASON_BREAKER_OPEN;
  if (br && resil_breaker_try_acquire_why(br, &permit, &refusal) != RESIL_DECISION_GO) {
    /* BREAKER_OPEN, or RECOVERING: its ramp did not admit this call */
    fin = resil_outcome_make(RESIL_REJECTED, refusal);
  } else {
    held = br != NULL;
    if (rate && resil_ratelimiter_acquire(rate, 1, NULL, &why) != RESIL_DECISION_GO) {
      fin = resil_outcome_make(RESIL_REJECTED, why == RESIL_REASON_OK ? RESIL_REASON_RATE_LIMITED
                                                                       : why);
    } else {
      made = 1;
      t0 = mono_ns();
#ifdef RESIL_HAVE_CONFIG
      if (chain)
        fin = run_chain(&o, chain, req);
      else
#endif
        fin = run_call(&o, retry, req, &watch);
    }
  }
  if (held && !made) {
    (void)resil_breaker_release(br, &permit); /* the rate refused it: not made */
  } else if (held) {
    int64_t took = mono_ns() - t0;
    (void)resil_breaker_record(br, &permit, &fin, took > 0 ? took : 0);
  }
  resp = resil_http_request_take_response(req);
  rc = exit_status(&fin);
  if (several && resp && resil_http_response_instance(resp) >= 0) {
    long which = resil_http_response_instance(resp);
    char url[400];
    instance_url(client, which, o.resolve, url, sizeof url);
    fprintf(stderr, PROG ": %s instance %ld: %s\n",
            fin.kind == RESIL_ANSWERED ? "answered by" : "the last attempt went to", which, url);
  }
  const char *detail = resp ? resil_http_response_error(resp) : NULL;
  char ob[96];
  resil_outcome_format(&fin, ob, sizeof ob);
  const char *hint = stop_hint(&fin);
  const char *maybe = (fin.flags & RESIL_OF_PRIOR_MAYBE_EXECUTED)
                          ? "; an earlier attempt may have executed"
                          : "";
  if (o.verbose) {
    fprintf(stderr, "result: %s after %u attempt%s, stop: %s%s%s%s%s, exit %d\n", ob,
            (unsigned)fin.attempts, fin.attempts == 1 ? "" : "s", resil_stop_name(fin.stop),
            hint ? " (" : "", hint ? hint : "", hint ? ")" : "", maybe, rc);
    if (detail) fprintf(stderr, "error: %s\n", detail);
  } else if (fin.kind != RESIL_ANSWERED) {
    /* A call that got no answer says why, in one line; an answer speaks
     * through its body and the exit status. */
    fprintf(stderr, PROG ": %s after %u attempt%s%s%s%s%s\n", ob, (unsigned)fin.attempts,
            fin.attempts == 1 ? "" : "s",
            fin.kind == RESIL_UNKNOWN ? ": the server MAY HAVE EXECUTED the request" : "",
            maybe, detail ? ": " : "", detail ? detail : "");
  }
  if (rc == EXIT_OK && resp && fin.kind == RESIL_ANSWERED && redirect_left(&o, resp)) {
    resil_http_info info;
    memset(&info, 0, sizeof info);
    (void)resil_http_response_info(resp, &info);
    /* The Location is not printed: it may carry a token. */
    if (info.hops >= MAX_REDIRECTS)
      fprintf(stderr, PROG ": -L: still a %d redirect after %u hops (the limit): not followed\n",
              resil_http_response_status(resp), (unsigned)info.hops);
    else
      fprintf(stderr, PROG ": -L: the %d redirect after %u hop%s could not be followed%s%s\n",
              resil_http_response_status(resp), (unsigned)info.hops, info.hops == 1 ? "" : "s",
              detail ? ": " : "", detail ? detail : "");
    rc = EXIT_REDIRECT;
  }
  if (resp && resil_http_response_status(resp) > 0 &&
      resil_http_response_outcome(resp).kind == RESIL_ANSWERED && write_body(resp) != 0)
    rc = EXIT_LOCAL;

done:
  resil_http_response_free(resp);
  resil_http_request_free(req);
  resil_http_client_free(client);
  resil_retry_free(retry);
  resil_ratelimiter_free(rate);
  resil_breaker_free(br);
  resil_shared_close(seg);
#ifdef RESIL_HAVE_CONFIG
  resil_registry_free(reg);
#endif
  free(inst);
  free(watch.chosen);
  url_parts_free(&u);
  opts_free(&o);
  return rc;
}

#else

int resil_cmd_call(int argc, char **argv) {
  (void)argc;
  (void)argv;
  fprintf(stderr, "resil call: this resil was built without libresil-http "
                  "(RESIL_WITH_HTTP=OFF)\n");
  return 2;
}

#endif
