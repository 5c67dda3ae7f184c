/* Lab experiments D (issue 21, "Deadlines across hops", DESIGN §8.3): a
 * chain of hops on 127.0.0.1, each a relay of the fixture library
 * (src/fixture/relay.h: libmicrohttpd, resil_deadline_mhd, libresil-http
 * forwarding with the request's deadline): client -> hop 1 -> hop 2 ->
 * terminal. Every hop records when a request arrived (CLOCK_MONOTONIC), the
 * budget it received, its deadline and when its work ended, so the budgets
 * can be held against what each sender had left.
 *
 * D1: client deadline 300 ms, every hop works 40 ms: each hop's budget is
 *     what its sender had left at send time (no more than what was left
 *     when the sender's work ended, at most 2 ms less than what was left at
 *     arrival), and no hop works past the client's deadline. Wrong variant:
 *     hop 1 does not propagate (hop 2 and the terminal get no budget).
 * D2: hop 2's first attempt to the terminal hangs (150 ms) past hop 2's
 *     80 ms response timeout; its retry (10 ms later) carries what is left,
 *     smaller than the first by at least the 90 ms between their sends.
 *     Wrong variant: hop 2 does not propagate.
 * D3: hop 2 (an idempotent service on a SQLite store, floor 100 ms) gets a
 *     budget below its floor after hop 1's 310 ms of work on a 400 ms
 *     deadline (at most 90 ms: a sleep is never shorter; a late hop 1 only
 *     makes it smaller, and hop 1 itself would stop only 90 ms late):
 *     refused with 504 before any work, no operation stored, no effect,
 *     nothing reaches the terminal, and hop 1 answers the 504 it got.
 *     Wrong variant: hop 2 without a floor (it works, and stores).
 * D4: D1 with the hops' clocks 10 s apart (+10 s, -10 s, +10 s): the same
 *     figures hold, the budgets being relative. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "lab_families.h"
#include "lab_result.h"

#if defined(RESIL_HAVE_HTTP) && defined(RESIL_HAVE_FIXTURE)

#include "fixture/fixture.h"
#include "resil/deadline.h"
#include "resil/http.h"
#include "resil/resil.h"

#define MS INT64_C(1000000)
enum { NHOPS = 3 };

static int64_t mono_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

typedef struct chain {
  resil_relay *hop[NHOPS]; /* hop 1, hop 2, terminal */
  char path[NHOPS][96];
  char dir[64];            /* D3's store directory, "" none */
  char db[96];
} chain;

static const char *const hop_names[NHOPS] = {"hop1", "hop2", "terminal"};

/* Starts the chain from the terminal back; cfg[i] for hop i (to is set
 * here). */
static int chain_start(lab_result *r, chain *c, resil_relay_config cfg[NHOPS]) {
  for (int i = NHOPS - 1; i >= 0; i--) {
    char to[160];
    cfg[i].name = hop_names[i];
    if (i < NHOPS - 1) {
      snprintf(to, sizeof to, "%s/x", resil_relay_url(c->hop[i + 1]));
      cfg[i].to = to;
    } else {
      cfg[i].to = NULL;
    }
    char err[256] = "";
    if (!lab_check(r, resil_relay_start(&cfg[i], &c->hop[i], err, sizeof err) == 0,
                   "%s: %s", hop_names[i], err))
      return -1;
  }
  return 0;
}

static void chain_stop(chain *c) {
  for (int i = 0; i < NHOPS; i++) resil_relay_stop(c->hop[i]);
  if (c->db[0]) {
    static const char *const suffix[] = {"", "-wal", "-shm"};
    char p[128];
    for (int i = 0; i < 3; i++) {
      snprintf(p, sizeof p, "%s%s", c->db, suffix[i]);
      unlink(p);
    }
  }
  if (c->dir[0]) rmdir(c->dir);
}

/* One GET from the client to hop 1 with a deadline of deadline_ms; the
 * status answered (0 for none), *deadline_ns the ctx deadline
 * (CLOCK_MONOTONIC: the system clock) and *t0 the call's start. */
static int client_call(lab_result *r, chain *c, int64_t deadline_ms, int64_t *deadline_ns,
                       int64_t *t0) {
  char base[96];
  snprintf(base, sizeof base, "%s", resil_relay_url(c->hop[0]));
  static const resil_http_endpoint eps[] = {RESIL_HTTP_ENDPOINT(.name = "x", .path = "/x")};
  resil_http_client_config cc;
  resil_http_client_config_init(&cc);
  cc.name = "client";
  cc.base_url = base;
  cc.endpoints = eps;
  cc.endpoint_count = 1;
  resil_http_client *cl = NULL;
  resil_error err;
  if (!lab_check(r, resil_http_client_new(&cc, &cl, &err) == RESIL_OK, "client: %s", err.msg))
    return 0;
  resil_ctx ctx;
  resil_ctx_init(&ctx);
  *t0 = mono_ns();
  resil_ctx_set_timeout_ns(&ctx, deadline_ms * MS);
  *deadline_ns = ctx.deadline_ns;
  resil_http_response *resp = NULL;
  resil_outcome o = resil_http_call(cl, "x", NULL, NULL, &ctx, &resp);
  int status = o.kind == RESIL_ANSWERED ? resil_http_response_status(resp) : 0;
  resil_http_response_free(resp);
  resil_http_client_free(cl);
  return status;
}

static int seen(resil_relay *h, size_t i, resil_relay_seen *s) {
  memset(s, 0, sizeof *s);
  return resil_relay_seen_get(h, i, s);
}

/* ---- D1, D4 ------------------------------------------------------------------ */

static int d1_run(lab_result *r, int wrong, int64_t offset_ns) {
  chain c;
  memset(&c, 0, sizeof c);
  resil_relay_config cfg[NHOPS];
  for (int i = 0; i < NHOPS; i++) {
    resil_relay_config_init(&cfg[i]);
    cfg[i].work_ns = 40 * MS;
    /* D4: +offset, -offset, +offset. */
    cfg[i].clock_offset_ns = i % 2 ? -offset_ns : offset_ns;
  }
  if (wrong) cfg[0].propagate = 0;
  if (chain_start(r, &c, cfg) != 0) {
    chain_stop(&c);
    return r->pass;
  }
  int64_t client_deadline = 0, t0 = 0;
  int status = client_call(r, &c, 300, &client_deadline, &t0);
  /* The senders: the client (sent after t0), then each hop (sent after
   * its work ended). */
  int64_t sender_deadline = client_deadline, sent_after = t0;
  json_t *budgets = json_array(), *errors = json_array();
  int64_t worst_err = 0, late_work = 0;
  int all_seen = 1, within = 1, not_more = 1;
  for (int i = 0; i < NHOPS; i++) {
    resil_relay_seen s;
    if (seen(c.hop[i], 0, &s) != 0) {
      all_seen = 0;
      break;
    }
    json_array_append_new(budgets, s.budget_ns < 0 ? json_null()
                                                   : json_real((double)s.budget_ns / 1e6));
    int64_t left_at_arrival = sender_deadline - s.arrival_ns;
    int64_t e = s.budget_ns - left_at_arrival;
    json_array_append_new(errors, json_integer(s.budget_ns < 0 ? 0 : e / 1000));
    if (s.budget_ns < 0 || e < -2 * MS) within = 0;
    if (s.budget_ns > sender_deadline - sent_after) not_more = 0;
    if (s.budget_ns >= 0 && (e < 0 ? -e : e) > (worst_err < 0 ? -worst_err : worst_err))
      worst_err = e;
    if (s.work_end_ns > client_deadline && s.work_end_ns - client_deadline > late_work)
      late_work = s.work_end_ns - client_deadline;
    sender_deadline = s.deadline_ns;
    sent_after = s.work_end_ns;
  }
  lab_obs_int(r, "client_deadline_ms", 300);
  lab_obs_int(r, "work_per_hop_ms", 40);
  if (offset_ns) lab_obs_int(r, "clock_offsets_s", offset_ns / 1000000000);
  lab_obs_str(r, "propagation", wrong ? "off at hop 1" : "on");
  lab_obs_int(r, "client_status", status);
  lab_obs_json(r, "budgets_ms", budgets);
  lab_obs_json(r, "budget_error_us", errors);
  lab_obs_real(r, "late_work_ms", (double)late_work / 1e6);
  lab_summary(r, "client 300 ms -> hop1 -> hop2 -> terminal, 40 ms of work each%s: status %d, "
                 "worst budget error %+.3f ms against what the sender had left at arrival, "
                 "late work %.3f ms",
              offset_ns ? ", clocks 10 s apart" : "", status, (double)worst_err / 1e6,
              (double)late_work / 1e6);
  lab_expect(r, "every_hop_reached", all_seen && status == 200,
             "client status %d, every hop reached: %d", status, all_seen);
  lab_expect(r, "budgets_match_senders_remaining", all_seen && within && not_more,
             "a hop's budget is missing, more than its sender had left after its work, or "
             "more than 2 ms below what the sender had left at arrival (worst %+.3f ms)",
             (double)worst_err / 1e6);
  lab_expect(r, "no_work_after_client_deadline", late_work == 0,
             "a hop worked %.3f ms past the client's deadline", (double)late_work / 1e6);
  chain_stop(&c);
  return r->pass;
}

static int d1_right(lab_result *r) { return d1_run(r, 0, 0); }
static int d1_wrong(lab_result *r) { return d1_run(r, 1, 0); }
static int d4_right(lab_result *r) { return d1_run(r, 0, INT64_C(10000000000)); }

/* ---- D2 ----------------------------------------------------------------------- */

static int d2_run(lab_result *r, int wrong) {
  chain c;
  memset(&c, 0, sizeof c);
  resil_relay_config cfg[NHOPS];
  for (int i = 0; i < NHOPS; i++) resil_relay_config_init(&cfg[i]);
  cfg[1].response_timeout_ns = 80 * MS;
  cfg[1].attempts = 2;
  cfg[1].backoff_ns = 10 * MS;
  if (wrong) cfg[1].propagate = 0;
  cfg[2].slow_first = 1;
  cfg[2].slow_ns = 150 * MS;
  if (chain_start(r, &c, cfg) != 0) {
    chain_stop(&c);
    return r->pass;
  }
  int64_t client_deadline = 0, t0 = 0;
  int status = client_call(r, &c, 400, &client_deadline, &t0);
  resil_relay_seen hop2, first, retry;
  int ok = seen(c.hop[1], 0, &hop2) == 0 && seen(c.hop[2], 0, &first) == 0 &&
           seen(c.hop[2], 1, &retry) == 0;
  size_t terminal_requests = resil_relay_seen_count(c.hop[2]);
  int64_t elapsed = ok ? retry.arrival_ns - first.arrival_ns : 0;
  lab_obs_int(r, "client_status", status);
  lab_obs_int(r, "terminal_requests", (long long)terminal_requests);
  lab_obs_real(r, "hop2_budget_ms", ok ? (double)hop2.budget_ns / 1e6 : -1);
  /* -1: none received. */
  lab_obs_real(r, "first_budget_ms", ok && first.budget_ns >= 0 ? (double)first.budget_ns / 1e6 : -1.0);
  lab_obs_real(r, "retry_budget_ms", ok && retry.budget_ns >= 0 ? (double)retry.budget_ns / 1e6 : -1.0);
  lab_obs_real(r, "elapsed_between_ms", (double)elapsed / 1e6);
  lab_obs_str(r, "propagation", wrong ? "off at hop 2" : "on");
  lab_summary(r, "hop2's first attempt hangs past its 80 ms timeout; the terminal got %.3f ms, "
                 "then %.3f ms on the retry %.3f ms later (client status %d)",
              ok && first.budget_ns >= 0 ? (double)first.budget_ns / 1e6 : -1.0,
              ok && retry.budget_ns >= 0 ? (double)retry.budget_ns / 1e6 : -1.0,
              (double)elapsed / 1e6, status);
  lab_expect(r, "retried_once_and_answered", ok && terminal_requests == 2 && status == 200,
             "terminal saw %zu requests, client status %d", terminal_requests, status);
  /* The retry went out at least 90 ms (the 80 ms response timeout and the
   * 10 ms backoff) after the first, which went out after hop 2's request
   * arrived: it carries at least 90 ms less, and no more than hop 2 had
   * left 90 ms after that arrival. */
  lab_expect(r, "retry_budget_smaller_by_elapsed",
             ok && first.budget_ns >= 0 && retry.budget_ns >= 0 &&
                 first.budget_ns - retry.budget_ns >= 90 * MS - MS / 1000 &&
                 retry.budget_ns <= hop2.deadline_ns - (hop2.arrival_ns + 90 * MS),
             "first %.3f ms, retry %.3f ms, %.3f ms apart: the retry does not carry what is "
             "left",
             ok ? (double)first.budget_ns / 1e6 : -1, ok ? (double)retry.budget_ns / 1e6 : -1,
             (double)elapsed / 1e6);
  chain_stop(&c);
  return r->pass;
}

static int d2_right(lab_result *r) { return d2_run(r, 0); }
static int d2_wrong(lab_result *r) { return d2_run(r, 1); }

/* ---- D3 ----------------------------------------------------------------------- */

static int d3_run(lab_result *r, int wrong) {
  chain c;
  memset(&c, 0, sizeof c);
  snprintf(c.dir, sizeof c.dir, "/tmp/resil-lab-d3-XXXXXX");
  if (!lab_check(r, mkdtemp(c.dir) != NULL, "mkdtemp: %s", strerror(errno))) {
    c.dir[0] = '\0';
    return r->pass;
  }
  snprintf(c.db, sizeof c.db, "%s/hop2.db", c.dir);
  char uri[128];
  snprintf(uri, sizeof uri, "sqlite:%s", c.db);
  resil_relay_config cfg[NHOPS];
  for (int i = 0; i < NHOPS; i++) resil_relay_config_init(&cfg[i]);
  cfg[0].work_ns = 310 * MS;
  cfg[0].floor_ns = 0;
  cfg[1].store_uri = uri;
  cfg[1].floor_ns = wrong ? 0 : 100 * MS;
  cfg[1].work_ns = 10 * MS;
  if (chain_start(r, &c, cfg) != 0) {
    chain_stop(&c);
    return r->pass;
  }
  int64_t client_deadline = 0, t0 = 0;
  int status = client_call(r, &c, 400, &client_deadline, &t0);
  resil_relay_seen h1, h2;
  int ok = seen(c.hop[0], 0, &h1) == 0 && seen(c.hop[1], 0, &h2) == 0;
  long refused = ok ? h2.refused : 0;
  long effects = resil_relay_effects(c.hop[1]);
  long rows = resil_relay_store_rows(c.hop[1], 0);
  long pending = resil_relay_store_rows(c.hop[1], 1);
  size_t downstream = resil_relay_seen_count(c.hop[2]);
  lab_obs_int(r, "floor_ms", wrong ? 0 : 100);
  lab_obs_real(r, "hop2_budget_ms", ok ? (double)h2.budget_ns / 1e6 : -1);
  lab_obs_int(r, "refused", refused);
  lab_obs_int(r, "effects", effects);
  lab_obs_int(r, "pending_rows", pending);
  lab_obs_int(r, "operations_stored", rows);
  lab_obs_int(r, "terminal_requests", (long long)downstream);
  lab_obs_int(r, "hop1_status", ok ? h1.status : 0);
  lab_obs_int(r, "client_status", status);
  lab_summary(r, "hop2 (floor %d ms) got %.3f ms after hop1's 310 ms of work on 400 ms: refused "
                 "%ld, effects %ld, PENDING rows %ld, operations %ld, hop1 answered %d",
              wrong ? 0 : 100, ok ? (double)h2.budget_ns / 1e6 : -1, refused, effects, pending,
              rows, ok ? h1.status : 0);
  lab_expect(r, "budget_below_floor", ok && h2.budget_ns >= 0 && h2.budget_ns < 100 * MS,
             "hop2's budget %.3f ms is not below 100 ms (or hop2 saw nothing)",
             ok ? (double)h2.budget_ns / 1e6 : -1);
  lab_expect(r, "refused_before_any_work",
             ok && refused == 1 && !h2.worked && h2.status == 504 && effects == 0 &&
                 rows == 0 && pending == 0 && downstream == 0,
             "refused %ld, worked %d, status %d, effects %ld, operations %ld (PENDING %ld), "
             "terminal requests %zu",
             refused, ok ? h2.worked : -1, ok ? h2.status : 0, effects, rows, pending,
             downstream);
  lab_expect(r, "hop1_sees_the_refusal", ok && h1.status == 504 && status == 504,
             "hop1 answered %d, the client got %d (expected the 504 of hop2's refusal)",
             ok ? h1.status : 0, status);
  chain_stop(&c);
  return r->pass;
}

static int d3_right(lab_result *r) { return d3_run(r, 0); }
static int d3_wrong(lab_result *r) { return d3_run(r, 1); }

const lab_experiment lab_hops_experiments[] = {
    {"D1",
     "client (300 ms) -> hop1 -> hop2 -> terminal, 40 ms of work each: every hop's budget is "
     "what its sender had left at send time (within 2 ms), no hop works past the client's "
     "deadline",
     d1_right, d1_wrong, "hop 1 does not propagate its deadline",
     "budgets_match_senders_remaining", 0},
    {"D2",
     "hop2's first attempt times out: its retry carries what is left, smaller by at least the "
     "time elapsed, not the original budget",
     d2_right, d2_wrong, "hop 2 does not propagate its deadline",
     "retry_budget_smaller_by_elapsed", 0},
    {"D3",
     "a budget below the floor at hop2 (an idempotent service on SQLite): 504 before any work, "
     "no PENDING row, no effect, and hop1 answers that 504",
     d3_right, d3_wrong, "hop 2 has no floor", "refused_before_any_work", 0},
    {"D4", "D1 with the hops' clocks 10 s apart: the same figures (relative budgets)", d4_right,
     NULL, NULL, NULL, 0},
    {NULL, NULL, NULL, NULL, NULL, NULL, 0}};

#else

const lab_experiment lab_hops_experiments[] = {{NULL, NULL, NULL, NULL, NULL, NULL, 0}};

#endif
