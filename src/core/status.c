#include <stdio.h>
#include <string.h>

#include "resil/status.h"
#include "resil/version.h"

const char *resil_strerror(resil_status st) {
  switch (st) {
#define RESIL__CASE(name, msg)                                                 \
  case RESIL_##name:                                                           \
    return msg;
    RESIL_STATUS_MAP(RESIL__CASE)
#undef RESIL__CASE
  case RESIL_STATUS_COUNT_:
    break;
  }
  return "unknown status";
}

const char *resil_status_name(resil_status st) {
  switch (st) {
#define RESIL__CASE(name, msg)                                                 \
  case RESIL_##name:                                                           \
    return "RESIL_" #name;
    RESIL_STATUS_MAP(RESIL__CASE)
#undef RESIL__CASE
  case RESIL_STATUS_COUNT_:
    break;
  }
  return "RESIL_UNKNOWN";
}

void resil_error_clear(resil_error *err) {
  if (!err) return;
  memset(err, 0, sizeof *err);
  err->status = RESIL_OK;
}

const char *resil_version(void) { return RESIL_VERSION_STRING; }
unsigned resil_version_num(void) { return RESIL_VERSION_NUM; }
