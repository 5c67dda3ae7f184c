/* The client recovery flow (DESIGN §6): after a keyed write attempt that may
 * have executed, ask the status endpoint before deciding anything.
 * COMMITTED gives the stored result, PENDING is waited for within the
 * deadline, and UNKNOWN (a 404 included) goes back to the retry policy,
 * which re-sends with the same key. See resil_http_call_keyed() in
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
    const char *sn = cfg->endpoints[i].status_endpoint;
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

/* ---- one logical keyed call ------------------------------------------------ */

typedef struct keyed_call {
  resil_http_client *c;
  resil_http_request *req;
  const http_endpoint *ep;  /* the write endpoint                        */
  const http_endpoint *sep; /* its status endpoint; NULL: no recovery    */
  resil_http_param *sparams; /* {key} first, then the call's params      */
  size_t nsparams;
  const resil_http_param *headers;
  size_t nheaders;
  resil_http_recovery *rep;
  int pending_started;
  int64_t pending_since; /* ctx clock, first PENDING answer of the call  */
} keyed_call;

typedef enum rec_result { REC_UNKNOWN = 0, REC_PENDING, REC_COMMITTED } rec_result;

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
    j = owned = json_loadb(b, n, 0, NULL);
  }
  int state = -1;
  const char *s = json_string_value(json_object_get(j, "state"));
  json_t *jk = json_object_get(j, "key");
  /* An answer about another key says nothing about this one. */
  if (!s || (jk && (!json_is_string(jk) || strcmp(json_string_value(jk), k->req->key) != 0))) {
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
    json_int_t st = json_is_integer(js) ? json_integer_value(js) : 0;
    /* A stored answer is a final one: an informational status is not. */
    if (st >= 200 && st <= 599) {
      /* The contract stores the body as a string of its bytes; a server
       * that embeds a JSON value instead gets it back serialised. */
      char *dumped = NULL;
      const char *body = "";
      size_t len = 0;
      int ok = 1;
      if (json_is_string(jb)) {
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
    }
  }
  if (owned) json_decref(owned);
  return state;
}

/* One status query: its own logical call on the status endpoint, within
 * the write's deadline and token. Returns the state it learned; *usable is
 * 0 when the query got no usable answer (the state is then UNKNOWN). */
static resil_http_op_state query_status(keyed_call *k, const resil_ctx *actx,
                                        uint32_t write_attempt, int *usable,
                                        int64_t *retry_after_ms, resil_http_response **rec) {
  resil_http_client *c = k->c;
  resil_http_recovery *rep = k->rep;
  *usable = 0;
  *retry_after_ms = -1;
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
  if (resil_http_request_new(c, k->sep->name, &a, &sreq, NULL) == RESIL_OK) {
    resil_ctx qctx = *actx;
    /* A status query is a safe read, numbered within the write's call. */
    qctx.flags = RESIL_CALL_IDEMPOTENT;
    qctx.attempt = rep->status_queries;
    qo = resil_http_request_attempt(sreq, &qctx);
    q = resil_http_request_take_response(sreq);
    resil_http_request_free(sreq);
  }
  rep->last_query = qo;
  int state = -1;
  if (qo.kind == RESIL_ANSWERED && q) {
    int code = resil_http_response_status(q);
    if (code == 404)
      state = RESIL_HTTP_OP_UNKNOWN;
    else if (code == 200)
      state = read_answer(k, q, write_attempt, rec);
    *retry_after_ms = qo.retry_after_ms;
  }
  resil_http_response_free(q);
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
  for (;;) {
    int usable = 0;
    int64_t ra = -1;
    resil_http_op_state s = query_status(k, actx, write_attempt, &usable, &ra, rec);
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
    k->rep->pending_wait_ns += slept > 0 ? slept : 0;
    if (cancelled) return REC_PENDING;
  }
}

/* The request could not be built: the same answer as resil_http_call(). */
static resil_outcome not_built(resil_http_client *c, const char *why,
                               resil_http_response **out) {
  resil_outcome o = resil_outcome_make(RESIL_NOT_SENT, RESIL_REASON_LOCAL_ERROR);
  if (out) {
    const resil_allocator *a = c && c->magic == RESIL_MAGIC_HTTP_CLIENT ? c->alloc : NULL;
    resil_http_response *r = resil__http_response_new(a);
    if (r) {
      r->outcome = o;
      snprintf(r->error, sizeof r->error, "%s", why);
      r->has_error = 1;
    }
    *out = r;
  }
  return o;
}

resil_outcome resil_http_call_keyed(resil_http_client *c, const char *endpoint,
                                    const resil_http_args *args, resil_retry *retry,
                                    const resil_ctx *ctx, resil_http_response **out,
                                    resil_http_recovery *report) {
  resil_http_recovery local;
  resil_http_recovery *rep = report ? report : &local;
  memset(rep, 0, sizeof *rep);
  if (out) *out = NULL;
  resil_http_request *req = NULL;
  resil_error err;
  if (resil_http_request_new(c, endpoint, args, &req, &err) != RESIL_OK)
    return not_built(c, err.msg, out);

  keyed_call k;
  memset(&k, 0, sizeof k);
  k.c = c;
  k.req = req;
  k.ep = req->ep;
  k.rep = rep;
  if (req->key && k.ep->status_ep >= 0 && c->status_query_classes) {
    k.sep = &c->eps[k.ep->status_ep];
    size_t np = args ? args->param_count : 0;
    k.sparams = resil__alloc(c->alloc, (np + 1) * sizeof *k.sparams);
    if (!k.sparams) {
      resil_http_request_free(req);
      return not_built(c, "out of memory", out);
    }
    /* First: the template lookup takes the first binding of a name. */
    k.sparams[0].name = "key";
    k.sparams[0].value = req->key;
    if (np) memcpy(&k.sparams[1], args->params, np * sizeof *k.sparams);
    k.nsparams = np + 1;
    k.headers = args ? args->headers : NULL;
    k.nheaders = args ? args->header_count : 0;
  }

  resil_ctx lc;
  if (ctx) lc = *ctx;
  else resil_ctx_init(&lc);
  lc.flags |= req->flags;

  resil_outcome final = resil_outcome_make(RESIL_NOT_SENT, RESIL_REASON_LOCAL_ERROR);
  resil_http_response *rec = NULL;
  resil_retry_state *st = NULL;
  const resil_ctx *actx = &lc;
  resil_decision d = RESIL_DECISION_GO;
  if (retry) {
    if (resil_retry_state_new(NULL, &st) != RESIL_OK) {
      d = RESIL_DECISION_DENY;
    } else {
      d = resil_retry_begin(retry, &lc, st);
      actx = resil_retry_state_ctx(st);
      if (d == RESIL_DECISION_DENY) final = resil_retry_result(st);
    }
  }
  while (d != RESIL_DECISION_DENY) {
    resil_outcome o = resil_http_request_attempt(req, actx);
    rep->write_attempts++;
    rec_result rr = REC_UNKNOWN;
    if (k.sep && (c->status_query_classes & RESIL_CLASS_BIT(resil_outcome_classify(&o))))
      rr = recover(&k, actx, actx->attempt, &rec);
    if (rr == REC_COMMITTED) {
      /* The operation is done: its stored result is the answer, and no
       * write is sent again whatever the stored status is. */
      atomic_fetch_add_explicit(&c->st_recovered, 1, memory_order_relaxed);
      final = rec->outcome;
      if (retry) {
        if (resil_retry_next(retry, st, &final, NULL) == RESIL_DECISION_DENY) {
          final = resil_retry_result(st);
        } else {
          final.stop = RESIL_STOP_NOT_RETRYABLE;
          final.attempts = actx->attempt - 1;
        }
      }
      break;
    }
    if (rr == REC_PENDING) {
      /* Accepted and not finished: re-sending would at best be told "in
       * progress", so the call ends here as if no time were left. Moving
       * the state's deadline to now makes the retry stop it that way (and
       * count it); a cancelled call stops as cancelled instead. */
      o.flags |= RESIL_OF_STATUS_PENDING;
      final = o;
      if (retry) {
        if (!resil_cancel_is_set(actx->cancel)) {
          resil_ctx *sc = resil_retry_state_ctx(st);
          int64_t now = resil_clock_now_ns(sc->clock);
          if (sc->deadline_ns > now) sc->deadline_ns = now;
        }
        if (resil_retry_next(retry, st, &o, NULL) == RESIL_DECISION_DENY) {
          final = resil_retry_result(st);
        } else {
          final.stop = RESIL_STOP_DEADLINE;
          final.attempts = actx->attempt - 1;
        }
      }
      break;
    }
    if (!retry) {
      final = o;
      break;
    }
    int64_t delay = 0;
    d = resil_retry_next(retry, st, &o, &delay);
    if (d == RESIL_DECISION_DENY) {
      final = resil_retry_result(st);
      break;
    }
    /* A token that fires during the wait stops the next attempt before it
     * sends (NOT_SENT(CANCELLED)), and the retry then ends the call. */
    if (delay > 0) (void)resil_clock_sleep_ns(actx->clock, delay, actx->cancel);
  }
  resil_retry_state_free(st);

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

int resil_http_response_recovered(const resil_http_response *r) {
  return r && r->magic == RESIL_MAGIC_HTTP_RESPONSE && r->recovered;
}
