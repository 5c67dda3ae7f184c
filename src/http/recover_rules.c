/* The rules of the client recovery flow (DESIGN §6), shared by the
 * blocking resil_http_call_keyed() (recover.c) and the engine's
 * resil_engine_call_keyed() (src/engine/keyed.c): see recover_rules.h. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "recover_rules.h"

#include "base.h"
#include "response_int.h"
#include "template.h"
#include "transfer.h"

/* ---- the retry's split form ------------------------------------------------ */

/* Starts the logical call: 1 to make the first attempt with kr_ctx(), 0
 * when the retry refused it (*final says why). kr_free() in every case. */
int resil__kr_begin(resil__kr *kr, resil_retry *r, const resil_ctx *ctx,
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

void resil__kr_free(resil__kr *kr) { resil_retry_state_free(kr->st); }

/* The context for the next attempt (numbered by the retry). */
const resil_ctx *resil__kr_ctx(const resil__kr *kr) {
  return kr->st ? resil_retry_state_ctx(kr->st) : &kr->ctx;
}

/* Records the attempt's outcome (which took duration_ns): 1 with *delay for
 * another attempt, 0 with *final the call's outcome. */
int resil__kr_next(resil__kr *kr, const resil_outcome *o, int64_t duration_ns,
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
static resil_outcome kr_end(resil__kr *kr, const resil_outcome *o, int64_t duration_ns,
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

/* ---- reading a status answer ------------------------------------------------ */

static void log_recovered(const resil_http_client *c, const resil__recov *k,
                          const resil_http_response *r) {
  if (c->t.log_level == RESIL_HTTP_LOG_NONE) return;
  char ob[96], line[320];
  resil_outcome_format(&r->outcome, ob, sizeof ob);
  double ms = (double)r->info.total_ns / 1e6;
  if (c->t.log_level == RESIL_HTTP_LOG_METADATA) {
    snprintf(line, sizeof line,
             "method=%s endpoint=%s status=%d duration_ms=%.3f outcome=%s attempt=%u "
             "recovered_from=%s",
             resil__http_method_name(k->ep->method), k->ep->name, r->status, ms, ob,
             r->info.attempt, k->sep->name);
    c->t.log_fn(c->t.log_user, RESIL_HTTP_LOG_METADATA, line);
  } else {
    snprintf(line, sizeof line,
             "<-- %d endpoint=%s attempt=%u outcome=%s (stored result read from %s, %.3f ms)",
             r->status, k->ep->name, r->info.attempt, ob, k->sep->name, ms);
    c->t.log_fn(c->t.log_user, RESIL_HTTP_LOG_BASIC, line);
  }
}

/* The stored answer as the write endpoint's response: decoded like a live
 * one, the decoder hook applied, marked recovered. NULL when out of
 * memory. */
static resil_http_response *make_recovered(resil__recov *k, int status, const char *body,
                                           size_t len, const resil_http_response *q,
                                           uint32_t write_attempt) {
  resil_http_client *c = k->c;
  resil_http_response *r = resil__http_response_new(c->t.alloc);
  if (!r) return NULL;
  if (len && resil__http_buf_append(c->t.alloc, &r->body, body, len) != 0) {
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
  resil_http_decoder_fn dec = k->ep->decoder ? k->ep->decoder : c->t.decoder;
  if (dec) {
    r->outcome = o;
    o = dec(k->ep->decoder ? k->ep->decoder_user : c->t.decoder_user, r, o);
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
static int read_answer(resil__recov *k, const resil_http_response *q, uint32_t write_attempt,
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
             base64_decode(k->c->t.alloc, json_string_value(j64), json_string_length(j64),
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
      resil__http_buf_free(k->c->t.alloc, &raw);
    }
  }
  if (owned) json_decref(owned);
  return state;
}

/* ---- the call's recovery state --------------------------------------------- */

/* Binds the status query: {key} first (the template lookup takes the first
 * binding of a name), then the caller's params. Returns 0 or -1 when out of
 * memory. */
static int bind_status(resil__recov *k, const resil_http_args *args) {
  resil_http_client *c = k->c;
  size_t np = args ? args->param_count : 0;
  k->sparams = resil__alloc(c->t.alloc, (np + 1) * sizeof *k->sparams);
  if (!k->sparams) return -1;
  k->sparams[0].name = "key";
  k->sparams[0].value = k->key;
  if (np) memcpy(&k->sparams[1], args->params, np * sizeof *k->sparams);
  k->nsparams = np + 1;
  k->headers = args ? args->headers : NULL;
  k->nheaders = args ? args->header_count : 0;
  return 0;
}

static void recov_base(resil__recov *k, resil_http_client *c, const http_endpoint *ep,
                       const char *key, resil_http_recovery *rep) {
  memset(k, 0, sizeof *k);
  k->c = c;
  k->key = key;
  k->ep = ep;
  k->rep = rep;
}

int resil__recov_init(resil__recov *k, resil_http_client *c, const http_endpoint *ep,
                      const char *key, const resil_http_args *args, resil_http_recovery *rep) {
  recov_base(k, c, ep, key, rep);
  if (!key || ep->status_ep < 0 || !c->status_query_classes) return 0;
  k->sep = &c->eps[ep->status_ep];
  return bind_status(k, args);
}

int resil__recov_init_status(resil__recov *k, resil_http_client *c, const http_endpoint *ep,
                             const char *key, const resil_http_args *args,
                             resil_http_recovery *rep) {
  recov_base(k, c, ep, key, rep);
  k->sep = &c->eps[ep->status_ep];
  return bind_status(k, args);
}

void resil__recov_free(resil__recov *k) {
  if (k->sparams) resil__free(k->c->t.alloc, k->sparams);
  k->sparams = NULL;
}

int resil__recov_should_ask(const resil__recov *k, const resil_outcome *o) {
  return k->sep && (k->c->status_query_classes & RESIL_CLASS_BIT(resil_outcome_classify(o)));
}

void resil__recov_query_begin(resil__recov *k, const resil_ctx *actx, resil_http_args *a,
                              resil_ctx *qctx) {
  k->rep->status_queries++;
  atomic_fetch_add_explicit(&k->c->st_status_queries, 1, memory_order_relaxed);
  resil_http_args_init(a);
  a->params = k->sparams;
  a->param_count = k->nsparams;
  a->headers = k->headers;
  a->header_count = k->nheaders;
  *qctx = *actx;
  /* A status query is a safe read, numbered within the write's call. */
  qctx->flags = RESIL_CALL_IDEMPOTENT;
  qctx->attempt = k->rep->status_queries;
  qctx->idempotency_key = k->key;
}

resil_http_op_state resil__recov_query_end(resil__recov *k, const resil_outcome *qo,
                                           const resil_http_response *q,
                                           uint32_t write_attempt, int *usable,
                                           int64_t *retry_after_ms, resil_http_response **rec) {
  resil_http_client *c = k->c;
  resil_http_recovery *rep = k->rep;
  *usable = 0;
  *retry_after_ms = -1;
  rep->last_query = *qo;
  int state = -1;
  /* The server's answer: a chain that refused the query (REJECTED) or a
   * time limiter that gave up on it has none. */
  if (qo->kind == RESIL_ANSWERED && q && resil_http_response_outcome(q).kind == RESIL_ANSWERED) {
    int code = resil_http_response_status(q);
    if (code == 404)
      state = RESIL_HTTP_OP_UNKNOWN;
    else if (code == 200)
      state = read_answer(k, q, write_attempt, rec);
    *retry_after_ms = qo->retry_after_ms;
  }
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

/* A failed query after a PENDING answer is no news, and is asked again the
 * same way. */
resil__recov_step resil__recov_after(resil__recov *k, int usable, resil_http_op_state s) {
  if (usable || !k->seen_pending) k->rep->state = s;
  if (usable && s == RESIL_HTTP_OP_COMMITTED) return RESIL__RECOV_COMMITTED;
  if (usable && s == RESIL_HTTP_OP_PENDING)
    k->seen_pending = 1;
  else if (usable || !k->seen_pending)
    return RESIL__RECOV_UNKNOWN;
  return RESIL__RECOV_POLL;
}

int64_t resil__recov_poll_wait(resil__recov *k, const resil_ctx *actx, int64_t ra) {
  resil_http_client *c = k->c;
  if (resil_cancel_is_set(actx->cancel)) return -1;
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
  if (wait >= limit - now) return -1;
  return wait;
}

resil_outcome resil__recov_final_committed(resil__recov *k, resil__kr *kr,
                                           const resil_http_response *rec, int64_t duration_ns) {
  /* The operation is done: its stored result is the answer, and no write
   * is sent again whatever the stored status is. */
  atomic_fetch_add_explicit(&k->c->st_recovered, 1, memory_order_relaxed);
  return kr_end(kr, &rec->outcome, duration_ns, RESIL_STOP_NOT_RETRYABLE, 0);
}

resil_outcome resil__recov_final_pending(resil__kr *kr, const resil_outcome *wo,
                                         int64_t duration_ns) {
  /* Accepted and not finished: re-sending would at best be told "in
   * progress", so the call ends here as if no time were left (a cancelled
   * call stops as cancelled instead). */
  resil_outcome o = *wo;
  o.flags |= RESIL_OF_STATUS_PENDING;
  return kr_end(kr, &o, duration_ns, RESIL_STOP_DEADLINE, 1);
}

resil_outcome resil__recov_query_reported(const resil_outcome *qo, int usable,
                                          resil_http_op_state s) {
  resil_outcome o = *qo;
  if (usable && s == RESIL_HTTP_OP_COMMITTED) o.flags |= RESIL_OF_RECOVERED;
  return o;
}
