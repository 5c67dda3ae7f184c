#include <stdio.h>

#include "internal.h"

resil_outcome resil_outcome_make(resil_outcome_kind kind, resil_reason reason) {
  resil_outcome o;
  o.kind = kind;
  o.reason = reason;
  o.http_status = 0;
  o.retry_after_ms = -1;
  o.flags = 0;
  o.stop = RESIL_STOP_NONE;
  o.attempts = 0;
  return o;
}

resil_outcome resil_outcome_ok(void) {
  return resil_outcome_make(RESIL_ANSWERED, RESIL_REASON_OK);
}

resil_outcome resil_outcome_failure(void) {
  return resil_outcome_make(RESIL_ANSWERED, RESIL_REASON_FAILURE);
}

resil_outcome resil_outcome_http(int http_status) {
  resil_outcome o = resil_outcome_make(RESIL_ANSWERED, RESIL_REASON_HTTP);
  o.http_status = http_status;
  return o;
}

resil_outcome_class resil_outcome_classify(const resil_outcome *o) {
  switch (o->kind) {
  case RESIL_NOT_SENT:
    return RESIL_CLASS_NOT_SENT;
  case RESIL_UNKNOWN:
    return RESIL_CLASS_UNKNOWN;
  case RESIL_REJECTED:
    return RESIL_CLASS_REJECTED;
  case RESIL_ANSWERED:
    break;
  }
  switch (o->reason) {
  case RESIL_REASON_OK:
    return RESIL_CLASS_SUCCESS;
  case RESIL_REASON_FAILURE:
  case RESIL_REASON_DECODE:
    return RESIL_CLASS_SERVER_ERROR;
  case RESIL_REASON_BUSINESS:
    return RESIL_CLASS_CLIENT_ERROR;
  default:
    break;
  }
  int s = o->http_status;
  if (s == 408) return RESIL_CLASS_HTTP_408;
  if (s == 425) return RESIL_CLASS_HTTP_425;
  if (s == 429) return RESIL_CLASS_HTTP_429;
  if (s >= 500) return RESIL_CLASS_SERVER_ERROR;
  if (s >= 400) return RESIL_CLASS_CLIENT_ERROR;
  if (s >= 300) return RESIL_CLASS_REDIRECT;
  if (s == 0 && o->reason != RESIL_REASON_HTTP) return RESIL_CLASS_SERVER_ERROR;
  return RESIL_CLASS_SUCCESS;
}

int resil_outcome_is_success(const resil_outcome *o) {
  resil_outcome_class c = resil_outcome_classify(o);
  return c == RESIL_CLASS_SUCCESS || c == RESIL_CLASS_REDIRECT;
}

int resil_outcome_maybe_executed(const resil_outcome *o) {
  if (o->flags & RESIL_OF_PRIOR_MAYBE_EXECUTED) return 1;
  switch (resil_outcome_classify(o)) {
  case RESIL_CLASS_SUCCESS:
  case RESIL_CLASS_REDIRECT:
  case RESIL_CLASS_SERVER_ERROR:
  case RESIL_CLASS_HTTP_408:
  case RESIL_CLASS_HTTP_425:
  case RESIL_CLASS_HTTP_429:
  case RESIL_CLASS_UNKNOWN:
    return 1;
  default:
    return 0;
  }
}

const char *resil_outcome_kind_name(resil_outcome_kind k) {
  switch (k) {
  case RESIL_NOT_SENT:
    return "NOT_SENT";
  case RESIL_UNKNOWN:
    return "UNKNOWN";
  case RESIL_ANSWERED:
    return "ANSWERED";
  case RESIL_REJECTED:
    return "REJECTED";
  }
  return "?";
}

const char *resil_reason_name(resil_reason r) {
  switch (r) {
#define RESIL__CASE(name, kind, text)                                          \
  case RESIL_REASON_##name:                                                    \
    return #name;
    RESIL_REASON_MAP(RESIL__CASE)
#undef RESIL__CASE
  case RESIL_REASON_COUNT_:
    break;
  }
  return "?";
}

const char *resil_reason_text(resil_reason r) {
  switch (r) {
#define RESIL__CASE(name, kind, text)                                          \
  case RESIL_REASON_##name:                                                    \
    return text;
    RESIL_REASON_MAP(RESIL__CASE)
#undef RESIL__CASE
  case RESIL_REASON_COUNT_:
    break;
  }
  return "?";
}

const char *resil_outcome_class_name(resil_outcome_class c) {
  switch (c) {
  case RESIL_CLASS_SUCCESS:
    return "SUCCESS";
  case RESIL_CLASS_CLIENT_ERROR:
    return "CLIENT_ERROR";
  case RESIL_CLASS_SERVER_ERROR:
    return "SERVER_ERROR";
  case RESIL_CLASS_HTTP_408:
    return "HTTP_408";
  case RESIL_CLASS_HTTP_425:
    return "HTTP_425";
  case RESIL_CLASS_HTTP_429:
    return "HTTP_429";
  case RESIL_CLASS_REDIRECT:
    return "REDIRECT";
  case RESIL_CLASS_NOT_SENT:
    return "NOT_SENT";
  case RESIL_CLASS_UNKNOWN:
    return "UNKNOWN";
  case RESIL_CLASS_REJECTED:
    return "REJECTED";
  case RESIL_CLASS_COUNT_:
    break;
  }
  return "?";
}

const char *resil_stop_name(resil_stop s) {
  switch (s) {
  case RESIL_STOP_NONE:
    return "NONE";
  case RESIL_STOP_SUCCESS:
    return "SUCCESS";
  case RESIL_STOP_NOT_RETRYABLE:
    return "NOT_RETRYABLE";
  case RESIL_STOP_UNSAFE:
    return "UNSAFE";
  case RESIL_STOP_MAX_ATTEMPTS:
    return "MAX_ATTEMPTS";
  case RESIL_STOP_DEADLINE:
    return "DEADLINE";
  case RESIL_STOP_BUDGET:
    return "BUDGET";
  case RESIL_STOP_CANCELLED:
    return "CANCELLED";
  case RESIL_STOP_RECOVERING:
    return "RECOVERING";
  }
  return "?";
}

char *resil_outcome_format(const resil_outcome *o, char *buf,
                           unsigned long size) {
  if (!buf || size == 0) return buf;
  if (o->kind == RESIL_ANSWERED && o->reason == RESIL_REASON_HTTP)
    snprintf(buf, size, "ANSWERED(%d)", o->http_status);
  else
    snprintf(buf, size, "%s(%s)", resil_outcome_kind_name(o->kind),
             resil_reason_text(o->reason));
  return buf;
}
