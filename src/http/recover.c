/* The client recovery flow (DESIGN §6): after a keyed write attempt that may
 * have executed, ask the status endpoint before deciding anything.
 * COMMITTED gives the stored result, PENDING is waited for within the
 * deadline, and UNKNOWN (a 404 included) goes back to the retry policy,
 * which re-sends with the same key. Every physical request (write or
 * status query) runs through the caller's chain; the retry drives the
 * writes through its split form (one small block below). See
 * resil_http_call_keyed() and resil_http_operation_status() in
 * include/resil/http.h. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "http_int.h"

#define RECOVER_DAY_NS (INT64_C(86400) * RESIL_NS_PER_S)
/* The classes that may have executed: the only ones a status query can
 * tell anything about. */
#define RECOVER_QUERY_CLASSES                                                  \
  (RESIL_CLASS_BIT(RESIL_CLASS_UNKNOWN) | RESIL_CLASS_BIT(RESIL_CLASS_SERVER_ERROR) | \
   RESIL_CLASSES_THROTTLED)

/* ---- configuration -------------------------------------------------------- */

resil_status resil__http_recovery_check(const resil_http_client_config *cfg,
                                        resil_error *err) {
  resil_status st;
  if (cfg->status_query_classes & ~(uint32_t)RECOVER_QUERY_CLASSES)
    return resil__err(err, RESIL_EINVAL, "status_query_classes",
                      "may hold only the UNKNOWN, SERVER_ERROR and THROTTLED bits "
                      "(0x%x), got 0x%x",
                      (unsigned)RECOVER_QUERY_CLASSES, (unsigned)cfg->status_query_classes);
  if ((st = resil__check_range(err, "status_poll_ns", cfg->status_poll_ns, RESIL_NS_PER_MS,
                               RECOVER_DAY_NS)))
    return st;
  return resil__check_range(err, "pending_wait_max_ns", cfg->pending_wait_max_ns, 0,
                            RECOVER_DAY_NS);
}

/* 1 when template t has a {key} placeholder. */
static int tpl_has_key(const http_tpl *t) {
  for (uint32_t i = 0; t->src && i < t->nparts; i++) {
    const http_tpl_part *p = &t->parts[i];
    if (p->is_var && p->len == 3 && memcmp(t->src + p->off, "key", 3) == 0) return 1;
  }
  return 0;
}

resil_status resil__http_recovery_setup(resil_http_client *c,
                                        const resil_http_client_config *cfg,
                                        resil_error *err) {
  c->status_query_classes = cfg->status_query_classes;
  c->status_poll_ns = cfg->status_poll_ns;
  c->pending_wait_max_ns = cfg->pending_wait_max_ns;
  atomic_init(&c->st_status_queries, 0);
  atomic_init(&c->st_status_committed, 0);
  atomic_init(&c->st_status_pending, 0);
  atomic_init(&c->st_status_unknown, 0);
  atomic_init(&c->st_recovered, 0);
  for (size_t i = 0; i < c->neps; i++) c->eps[i].status_ep = -1;
  for (size_t i = 0; i < c->neps; i++) {
    const char *sn = c->eps[i].status_name;
    if (!sn) continue;
    char field[48];
    snprintf(field, sizeof field, "endpoints[%zu].status_endpoint", i);
    const char *en = c->eps[i].name;
    size_t j = 0;
    while (j < c->neps && strcmp(c->eps[j].name, sn) != 0) j++;
    if (j == c->neps)
      return resil__err(err, RESIL_EINVAL, field,
                        "endpoint '%s': status endpoint '%.60s' is not in the table", en, sn);
    if (j == i)
      return resil__err(err, RESIL_EINVAL, field,
                        "endpoint '%s': status endpoint must be another endpoint", en);
    const http_endpoint *s = &c->eps[j];
    /* A status query is asked again and again: only a safe method fits. */
    if (s->method != RESIL_HTTP_GET)
      return resil__err(err, RESIL_EINVAL, field,
                        "endpoint '%s': status endpoint '%s' must use GET", en, s->name);
    if (!tpl_has_key(&s->path) && !tpl_has_key(&s->query))
      return resil__err(err, RESIL_EINVAL, field,
                        "endpoint '%s': status endpoint '%s' needs a {key} placeholder in "
                        "its path or query",
                        en, s->name);
    c->eps[i].status_ep = (int32_t)j;
  }
  return RESIL_OK;
}

/* ---- the retry's split form ------------------------------------------------
 * Everything the keyed flow asks of the retry goes through these four
 * functions, so that a change of the split form's API (an opaque state, one
 * decision type) touches this block only. retry NULL drives exactly one
 * attempt. */

typedef struct keyed_retry {
  resil_retry *r;
  resil_retry_state *st; /* NULL without a retry                         */
  resil_ctx ctx; /* the attempt's context when no retry drives the call */
} keyed_retry;

/* Starts the logical call: 1 to make the first attempt with kr_ctx(), 0
 * when the retry refused it (*final says why). kr_free() in every case. */
static int kr_begin(keyed_retry *kr, resil_retry *r, const resil_ctx *ctx,
                    resil_outcome *final) {
  kr->r = r;
  kr->st = NULL;
  kr->ctx = *ctx;
  if (!r) return 1;
  if (resil_retry_state_new(NULL, &kr->st) != RESIL_OK) {
    *final = resil_outcome_make(RESIL_NOT_SENT, RESIL_REASON_LOCAL_ERROR);
    return 0;
  }
  if (resil_retry_begin(r, ctx, kr->st) != RESIL_DECISION_DENY) return 1;
  *final = resil_retry_result(kr->st);
  return 0;
}

static void kr_free(keyed_retry *kr) { resil_retry_state_free(kr->st); }

/* The context for the next attempt (numbered by the retry). */
static const resil_ctx *kr_ctx(const keyed_retry *kr) {
  return kr->st ? resil_retry_state_ctx(kr->st) : &kr->ctx;
}

/* Records the attempt's outcome (which took duration_ns): 1 with *delay for
 * another attempt, 0 with *final the call's outcome. */
static int kr_next(keyed_retry *kr, const resil_outcome *o, int64_t duration_ns,
                   int64_t *delay, resil_outcome *final) {
  *delay = 0;
  if (!kr->r) {
    *final = *o;
    return 0;
  }
  if (resil_retry_next_timed(kr->r, kr->st, o, duration_ns, delay) != RESIL_DECISION_DENY)
    return 1;
  *final = resil_retry_result(kr->st);
  return 0;
}

/* Ends the call on o whatever the retry would do next: its own stop when
 * it stops, else o with stop `stop_if_not`. no_time_left moves the
 * attempt's deadline to now first (unless cancelled), so that the retry
 * stops the call as one after which no time is left, and counts it. */
static resil_outcome kr_end(keyed_retry *kr, const resil_outcome *o, int64_t duration_ns,
                            resil_stop stop_if_not, int no_time_left) {
  if (!kr->r) return *o;
  resil_ctx *sc = resil_retry_state_ctx(kr->st);
  if (no_time_left && !resil_cancel_is_set(sc->cancel)) {
    int64_t now = resil_clock_now_ns(sc->clock);
    if (sc->deadline_ns > now) sc->deadline_ns = now;
  }
  int64_t d = 0;
  if (resil_retry_next_timed(kr->r, kr->st, o, duration_ns, &d) == RESIL_DECISION_DENY)
    return resil_retry_result(kr->st);
  resil_outcome f = *o;
  f.stop = stop_if_not;
  f.attempts = sc->attempt > 0 ? sc->attempt - 1 : 0;
  return f;
}

/* ---- one logical keyed call ------------------------------------------------ */

typedef struct keyed_call {
  resil_http_client *c;
  const char *key;          /* the call's idempotency key                 */
  const http_endpoint *ep;  /* the write endpoint                        */
  const http_endpoint *sep; /* its status endpoint; NULL: no recovery    */
  resil_chain *chain;       /* wraps every physical request; may be NULL */
  resil_http_param *sparams; /* {key} first, then the call's params      */
  size_t nsparams;
  const resil_http_param *headers;
  size_t nheaders;
  resil_http_recovery *rep;
  int pending_started;
  int64_t pending_since; /* ctx clock, first PENDING answer of the call  */
  /* The last status query, reported to the client's listener once what
   * follows it is known. */
  int query_unreported;
  resil_outcome query_o;
  int64_t query_ns;
  int64_t query_wait_before;
} keyed_call;

typedef enum rec_result { REC_UNKNOWN = 0, REC_PENDING, REC_COMMITTED } rec_result;

/* One physical request of the call, through the caller's chain. */
static resil_outcome physical(const keyed_call *k, resil_http_request *req,
                              const resil_ctx *ctx) {
  return k->chain ? resil_chain_run(k->chain, ctx, resil_http_request_attempt, req)
                  : resil_http_request_attempt(req, ctx);
}

/* NULL when chain may wrap a physical request, else why not. */
static const char *chain_refused(resil_chain *chain) {
  if (!chain) return NULL;
  resil_amplification amp;
  if (resil_chain_amplification(chain, &amp) != RESIL_OK) return "chain: invalid handle";
  if (amp.attempts > 1)
    return "chain: it has a retry layer, which would re-send a write before its status is "
           "asked; pass the retry as the retry argument and keep the chain for the other "
           "policies";
  return NULL;
}

/* Reports the last status query to the client's listener. */
static void flush_query(keyed_call *k, int64_t next_wait_ns, resil_stop stop) {
  if (!k->query_unreported) return;
  k->query_unreported = 0;
  resil__http_report(k->c, k->rep->status_queries, &k->query_o, k->query_ns,
                     k->query_wait_before, next_wait_ns, stop, k->key);
}

static void log_recovered(const resil_http_client *c, const keyed_call *k,
                          const resil_http_response *r) {
  if (c->log_level == RESIL_HTTP_LOG_NONE) return;
  char ob[96], line[320];
  resil_outcome_format(&r->outcome, ob, sizeof ob);
  double ms = (double)r->info.total_ns / 1e6;
  if (c->log_level == RESIL_HTTP_LOG_METADATA) {
    snprintf(line, sizeof line,
             "method=%s endpoint=%s status=%d duration_ms=%.3f outcome=%s attempt=%u "
             "recovered_from=%s",
             resil__http_method_name(k->ep->method), k->ep->name, r->status, ms, ob,
             r->info.attempt, k->sep->name);
    c->log_fn(c->log_user, RESIL_HTTP_LOG_METADATA, line);
  } else {
    snprintf(line, sizeof line,
             "<-- %d endpoint=%s attempt=%u outcome=%s (stored result read from %s, %.3f ms)",
             r->status, k->ep->name, r->info.attempt, ob, k->sep->name, ms);
    c->log_fn(c->log_user, RESIL_HTTP_LOG_BASIC, line);
  }
}

/* The stored answer as the write endpoint's response: decoded like a live
 * one, the decoder hook applied, marked recovered. NULL when out of
 * memory. */
static resil_http_response *make_recovered(keyed_call *k, int status, const char *body,
                                           size_t len, const resil_http_response *q,
                                           uint32_t write_attempt) {
  resil_http_client *c = k->c;
  resil_http_response *r = resil__http_response_new(c->alloc);
  if (!r) return NULL;
  if (len && resil__http_buf_append(c->alloc, &r->body, body, len) != 0) {
    resil_http_response_free(r);
    return NULL;
  }
  r->status = status;
  r->info = q->info;
  r->info.attempt = write_attempt;
  r->recovered = 1;
  resil__http_response_set_key(r, k->key);
  resil_outcome o = resil_outcome_http(status);
  resil__http_decode(k->ep, r, &o);
  resil_http_decoder_fn dec = k->ep->decoder ? k->ep->decoder : c->decoder;
  if (dec) {
    r->outcome = o;
    o = dec(k->ep->decoder ? k->ep->decoder_user : c->decoder_user, r, o);
  }
  o.flags |= RESIL_OF_RECOVERED;
  r->outcome = o;
  log_recovered(c, k, r);
  return r;
}

/* RFC 4648 base64 (standard alphabet, padding optional) of s[0..n) into a
 * new buffer. Returns 0, -1 for text that is not base64, -2 when out of
 * memory. */
static int base64_decode(const resil_allocator *a, const char *s, size_t n, http_buf *out) {
  while (n > 0 && s[n - 1] == '=') n--;
  if (n % 4 == 1) return -1;
  if (resil__http_buf_reserve(a, out, n / 4 * 3 + 3) != 0) return -2;
  uint32_t acc = 0;
  int bits = 0;
  for (size_t i = 0; i < n; i++) {
    int ch = (unsigned char)s[i], v;
    if (ch >= 'A' && ch <= 'Z') v = ch - 'A';
    else if (ch >= 'a' && ch <= 'z') v = ch - 'a' + 26;
    else if (ch >= '0' && ch <= '9') v = ch - '0' + 52;
    else if (ch == '+') v = 62;
    else if (ch == '/') v = 63;
    else return -1;
    acc = (acc << 6) | (uint32_t)v;
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out->p[out->len++] = (char)((acc >> bits) & 0xff);
    }
  }
  out->p[out->len] = '\0';
  return 0;
}

/* Reads a 200 answer of the status endpoint. Returns the state, or -1 when
 * the body is not the contract (then the query had no usable answer). For
 * COMMITTED, *rec receives the recovered response (-1 when it cannot be
 * made). */
static int read_answer(keyed_call *k, const resil_http_response *q, uint32_t write_attempt,
                       resil_http_response **rec) {
  json_t *owned = NULL;
  json_t *j = resil_http_response_json(q);
  if (!j) {
    size_t n = 0;
    const char *b = resil_http_response_body(q, &n);
    /* A stored body may hold NUL bytes (\u0000 in its JSON string). */
    j = owned = json_loadb(b, n, JSON_ALLOW_NUL, NULL);
  }
  int state = -1;
  const char *s = json_string_value(json_object_get(j, "state"));
  json_t *jk = json_object_get(j, "key");
  /* An answer about another key says nothing about this one. */
  if (!s || (jk && (!json_is_string(jk) || strcmp(json_string_value(jk), k->key) != 0))) {
    state = -1;
  } else if (strcmp(s, "PENDING") == 0) {
    state = RESIL_HTTP_OP_PENDING;
  } else if (strcmp(s, "UNKNOWN") == 0) {
    state = RESIL_HTTP_OP_UNKNOWN;
  } else if (strcmp(s, "FAILED") == 0) {
    state = RESIL_HTTP_OP_FAILED;
  } else if (strcmp(s, "COMMITTED") == 0) {
    json_t *js = json_object_get(j, "status");
    json_t *jb = json_object_get(j, "body");
    json_t *j64 = json_object_get(j, "body_base64");
    json_int_t st = json_is_integer(js) ? json_integer_value(js) : 0;
    /* A stored answer is a final one: an informational status is not. */
    if (st >= 200 && st <= 599) {
      /* The contract stores the body as a string of its bytes, or (not
       * UTF-8) as base64; a server that embeds a JSON value instead gets
       * it back serialised. */
      char *dumped = NULL;
      http_buf raw = {0};
      const char *body = "";
      size_t len = 0;
      int ok = 1;
      if (j64) {
        ok = json_is_string(j64) &&
             base64_decode(k->c->alloc, json_string_value(j64), json_string_length(j64),
                           &raw) == 0;
        if (ok) {
          body = raw.p;
          len = raw.len;
        }
      } else if (json_is_string(jb)) {
        body = json_string_value(jb);
        len = json_string_length(jb);
      } else if (jb && !json_is_null(jb)) {
        dumped = json_dumps(jb, JSON_COMPACT | JSON_ENCODE_ANY);
        ok = dumped != NULL;
        if (ok) {
          body = dumped;
          len = strlen(dumped);
        }
      }
      if (ok) *rec = make_recovered(k, (int)st, body, len, q, write_attempt);
      if (*rec) state = RESIL_HTTP_OP_COMMITTED;
      free(dumped);
      resil__http_buf_free(k->c->alloc, &raw);
    }
  }
  if (owned) json_decref(owned);
  return state;
}

/* One status query: its own logical call on the status endpoint, through
 * the caller's chain, within the write's deadline and token. Returns the
 * state it learned; *usable is 0 when the query got no usable answer (the
 * state is then UNKNOWN). *qout (may be NULL: dropped) receives the
 * query's own response. */
static resil_http_op_state query_status(keyed_call *k, const resil_ctx *actx,
                                        uint32_t write_attempt, int64_t wait_before,
                                        int *usable, int64_t *retry_after_ms,
                                        resil_http_response **rec, resil_http_response **qout) {
  resil_http_client *c = k->c;
  resil_http_recovery *rep = k->rep;
  *usable = 0;
  *retry_after_ms = -1;
  flush_query(k, wait_before, RESIL_STOP_NONE);
  rep->status_queries++;
  atomic_fetch_add_explicit(&c->st_status_queries, 1, memory_order_relaxed);
  resil_http_args a;
  resil_http_args_init(&a);
  a.params = k->sparams;
  a.param_count = k->nsparams;
  a.headers = k->headers;
  a.header_count = k->nheaders;
  resil_http_request *sreq = NULL;
  resil_outcome qo = resil_outcome_make(RESIL_NOT_SENT, RESIL_REASON_LOCAL_ERROR);
  resil_http_response *q = NULL;
  int64_t t0 = resil__http_mono_ns();
  if (resil_http_request_new(c, k->sep->name, &a, &sreq, NULL) == RESIL_OK) {
    resil_ctx qctx = *actx;
    /* A status query is a safe read, numbered within the write's call. */
    qctx.flags = RESIL_CALL_IDEMPOTENT;
    qctx.attempt = rep->status_queries;
    qctx.idempotency_key = k->key;
    qo = physical(k, sreq, &qctx);
    q = resil_http_request_take_response(sreq);
    resil_http_request_free(sreq);
  }
  k->query_unreported = 1;
  k->query_o = qo;
  k->query_ns = resil__http_mono_ns() - t0;
  k->query_wait_before = wait_before;
  rep->last_query = qo;
  int state = -1;
  /* The server's answer: a chain that refused the query (REJECTED) or a
   * time limiter that gave up on it has none. */
  if (qo.kind == RESIL_ANSWERED && q && resil_http_response_outcome(q).kind == RESIL_ANSWERED) {
    int code = resil_http_response_status(q);
    if (code == 404)
      state = RESIL_HTTP_OP_UNKNOWN;
    else if (code == 200)
      state = read_answer(k, q, write_attempt, rec);
    *retry_after_ms = qo.retry_after_ms;
  }
  if (qout) *qout = q;
  else resil_http_response_free(q);
  switch (state) {
  case RESIL_HTTP_OP_COMMITTED:
    atomic_fetch_add_explicit(&c->st_status_committed, 1, memory_order_relaxed);
    break;
  case RESIL_HTTP_OP_PENDING:
    rep->pending_answers++;
    atomic_fetch_add_explicit(&c->st_status_pending, 1, memory_order_relaxed);
    break;
  case RESIL_HTTP_OP_UNKNOWN:
  case RESIL_HTTP_OP_FAILED:
    rep->unknown_answers++;
    atomic_fetch_add_explicit(&c->st_status_unknown, 1, memory_order_relaxed);
    break;
  default:
    rep->failed_queries++;
    atomic_fetch_add_explicit(&c->st_status_unknown, 1, memory_order_relaxed);
    return RESIL_HTTP_OP_UNKNOWN;
  }
  *usable = 1;
  return (resil_http_op_state)state;
}

/* Asks the status endpoint after a write attempt that may have executed,
 * and waits while the operation is PENDING (a failed query after a PENDING
 * answer is no news, and is asked again the same way). */
static rec_result recover(keyed_call *k, const resil_ctx *actx, uint32_t write_attempt,
                          resil_http_response **rec) {
  resil_http_client *c = k->c;
  int seen_pending = 0;
  int64_t waited = 0;
  for (;;) {
    int usable = 0;
    int64_t ra = -1;
    resil_http_op_state s = query_status(k, actx, write_attempt, waited, &usable, &ra, rec, NULL);
    if (usable || !seen_pending) k->rep->state = s;
    if (usable && s == RESIL_HTTP_OP_COMMITTED) return REC_COMMITTED;
    if (usable && s == RESIL_HTTP_OP_PENDING)
      seen_pending = 1;
    else if (usable || !seen_pending)
      return REC_UNKNOWN;
    if (resil_cancel_is_set(actx->cancel)) return REC_PENDING;
    int64_t now = resil_clock_now_ns(actx->clock);
    if (!k->pending_started) {
      k->pending_started = 1;
      k->pending_since = now;
    }
    int64_t limit = resil__sat_add(k->pending_since, c->pending_wait_max_ns);
    if (actx->deadline_ns < limit) limit = actx->deadline_ns;
    /* A Retry-After may lengthen the wait, never shorten it below the poll
     * interval: a "0" must not turn the wait into a busy loop. */
    int64_t wait = c->status_poll_ns;
    if (ra >= 0 && resil__sat_mul(ra, RESIL_NS_PER_MS) > wait)
      wait = resil__sat_mul(ra, RESIL_NS_PER_MS);
    /* No sleep that would leave no time for the next question. */
    if (wait >= limit - now) return REC_PENDING;
    int cancelled = resil_clock_sleep_ns(actx->clock, wait, actx->cancel);
    int64_t slept = resil_clock_now_ns(actx->clock) - now;
    waited = slept > 0 ? slept : 0;
    k->rep->pending_wait_ns += waited;
    if (cancelled) return REC_PENDING;
  }
}

/* Sets up k's status query bindings: {key} first (the template lookup
 * takes the first binding of a name), then the caller's params. Returns 0
 * or -1 when out of memory. */
static int bind_status(keyed_call *k, const resil_http_args *args) {
  resil_http_client *c = k->c;
  size_t np = args ? args->param_count : 0;
  k->sparams = resil__alloc(c->alloc, (np + 1) * sizeof *k->sparams);
  if (!k->sparams) return -1;
  k->sparams[0].name = "key";
  k->sparams[0].value = k->key;
  if (np) memcpy(&k->sparams[1], args->params, np * sizeof *k->sparams);
  k->nsparams = np + 1;
  k->headers = args ? args->headers : NULL;
  k->nheaders = args ? args->header_count : 0;
  return 0;
}

static resil_outcome call_keyed(resil_http_client *c, const char *endpoint,
                                const resil_http_args *uargs, resil_retry *retry,
                                resil_chain *chain, const resil_ctx *ctx,
                                resil_http_response **out, resil_http_recovery *rep) {
  resil_ctx lc;
  const resil_ctx *uc = resil__ctx_in(&lc, ctx);
  if (!uc) return resil__http_not_built(c, "ctx: call resil_ctx_init()", out);
  if (uc != &lc) lc = *uc;
  const char *why = chain_refused(chain);
  if (why) return resil__http_not_built(c, why, out);
  /* The caller's args as a full-size copy: the status query reads them. */
  resil_http_args args;
  resil_error err;
  if (resil__http_args_in(&args, uargs, &err) != RESIL_OK)
    return resil__http_not_built(c, err.msg, out);
  resil_http_request *req = NULL;
  if (resil_http_request_new(c, endpoint, &args, &req, &err) != RESIL_OK)
    return resil__http_not_built(c, err.msg, out);
  if (req->key) snprintf(rep->idempotency_key, sizeof rep->idempotency_key, "%s", req->key);

  keyed_call k;
  memset(&k, 0, sizeof k);
  k.c = c;
  k.key = req->key;
  k.ep = req->ep;
  k.rep = rep;
  k.chain = chain;
  if (req->key && k.ep->status_ep >= 0 && c->status_query_classes) {
    k.sep = &c->eps[k.ep->status_ep];
    if (bind_status(&k, &args) != 0) {
      resil_http_request_free(req);
      return resil__http_not_built(c, "out of memory", out);
    }
  }
  lc.flags |= req->flags;
  lc.idempotency_key = req->key;

  resil_outcome final = resil_outcome_make(RESIL_NOT_SENT, RESIL_REASON_LOCAL_ERROR);
  resil_http_response *rec = NULL;
  keyed_retry kr;
  int go = kr_begin(&kr, retry, &lc, &final);
  while (go) {
    const resil_ctx *actx = kr_ctx(&kr);
    int64_t t0 = resil__http_mono_ns();
    resil_outcome o = physical(&k, req, actx);
    int64_t dur = resil__http_mono_ns() - t0;
    rep->write_attempts++;
    int ask = k.sep && (c->status_query_classes & RESIL_CLASS_BIT(resil_outcome_classify(&o)));
    /* Without a retry the client decided this attempt: it reports it. */
    if (!retry)
      resil__http_report(c, 1, &o, dur, 0, ask ? 0 : -1,
                         RESIL_STOP_NONE, k.key);
    rec_result rr = ask ? recover(&k, actx, actx->attempt, &rec) : REC_UNKNOWN;
    if (rr == REC_COMMITTED) {
      /* The operation is done: its stored result is the answer, and no
       * write is sent again whatever the stored status is. */
      atomic_fetch_add_explicit(&c->st_recovered, 1, memory_order_relaxed);
      final = kr_end(&kr, &rec->outcome, dur, RESIL_STOP_NOT_RETRYABLE, 0);
      break;
    }
    if (rr == REC_PENDING) {
      /* Accepted and not finished: re-sending would at best be told "in
       * progress", so the call ends here as if no time were left (a
       * cancelled call stops as cancelled instead). */
      o.flags |= RESIL_OF_STATUS_PENDING;
      final = kr_end(&kr, &o, dur, RESIL_STOP_DEADLINE, 1);
      break;
    }
    int64_t delay = 0;
    go = kr_next(&kr, &o, dur, &delay, &final);
    if (!go) break;
    flush_query(&k, delay, RESIL_STOP_NONE);
    /* A token that fires during the wait stops the next attempt before it
     * sends (NOT_SENT(CANCELLED)), and the retry then ends the call. */
    const resil_ctx *nctx = kr_ctx(&kr);
    if (delay > 0) (void)resil_clock_sleep_ns(nctx->clock, delay, nctx->cancel);
  }
  flush_query(&k, -1, final.stop);
  kr_free(&kr);

  resil_http_response *r = resil_http_request_take_response(req);
  if (rec) {
    resil_http_response_free(r);
    r = rec;
  }
  if (out) *out = r;
  else resil_http_response_free(r);
  if (k.sparams) resil__free(c->alloc, k.sparams);
  resil_http_request_free(req);
  return final;
}

resil_outcome resil_http_call_keyed_sized(resil_http_client *c, const char *endpoint,
                                          const resil_http_args *args, resil_retry *retry,
                                          resil_chain *chain, const resil_ctx *ctx,
                                          resil_http_response **out,
                                          resil_http_recovery *report, size_t report_size) {
  resil_http_recovery rep;
  memset(&rep, 0, sizeof rep);
  rep.struct_size = sizeof rep;
  if (out) *out = NULL;
  resil_outcome o = call_keyed(c, endpoint, args, retry, chain, ctx, out, &rep);
  if (report) resil__sized_out(report, report_size, &rep, sizeof rep);
  return o;
}

resil_outcome resil_http_operation_status(resil_http_client *c, const char *endpoint,
                                          const char *key, const resil_http_args *uargs,
                                          resil_chain *chain, const resil_ctx *ctx,
                                          resil_http_op_state *state,
                                          resil_http_response **out) {
  resil_outcome bad = resil_outcome_make(RESIL_NOT_SENT, RESIL_REASON_LOCAL_ERROR);
  if (!state) return bad;
  *state = RESIL_HTTP_OP_NONE;
  if (out) *out = NULL;
  resil_ctx lc;
  const resil_ctx *uc = resil__ctx_in(&lc, ctx);
  if (!uc) return resil__http_not_built(c, "ctx: call resil_ctx_init()", out);
  if (!c || c->magic != RESIL_MAGIC_HTTP_CLIENT || !endpoint)
    return resil__http_not_built(c, "client and endpoint must not be NULL", out);
  const char *why = chain_refused(chain);
  if (why) return resil__http_not_built(c, why, out);
  const http_endpoint *ep = resil__http_find_endpoint(c, endpoint);
  if (!ep) return resil__http_not_built(c, "unknown endpoint", out);
  if (ep->status_ep < 0)
    return resil__http_not_built(c, "endpoint has no status_endpoint", out);
  if (!resil__http_key_ok(key)) return resil__http_not_built(c, "key: must be 1..255 visible ASCII characters", out);
  resil_http_args args;
  resil_error err;
  if (resil__http_args_in(&args, uargs, &err) != RESIL_OK)
    return resil__http_not_built(c, err.msg, out);

  resil_http_recovery rep;
  memset(&rep, 0, sizeof rep);
  keyed_call k;
  memset(&k, 0, sizeof k);
  k.c = c;
  k.key = key;
  k.ep = ep;
  k.sep = &c->eps[ep->status_ep];
  k.rep = &rep;
  k.chain = chain;
  if (bind_status(&k, &args) != 0) return resil__http_not_built(c, "out of memory", out);
  int usable = 0;
  int64_t ra = -1;
  resil_http_response *rec = NULL, *q = NULL;
  resil_http_op_state s = query_status(&k, uc, 0, 0, &usable, &ra, &rec, &q);
  flush_query(&k, -1, RESIL_STOP_NONE);
  resil__free(c->alloc, k.sparams);
  *state = s;
  resil_outcome o = rep.last_query;
  if (s == RESIL_HTTP_OP_COMMITTED && rec) {
    o = rec->outcome;
    resil_http_response_free(q);
    q = rec;
  }
  if (out) *out = q;
  else resil_http_response_free(q);
  return o;
}

int resil_http_response_recovered(const resil_http_response *r) {
  return r && r->magic == RESIL_MAGIC_HTTP_RESPONSE && r->recovered;
}
