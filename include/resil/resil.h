/* libresil: make remote calls fail safely. Umbrella header. */
#ifndef RESIL_RESIL_H
#define RESIL_RESIL_H

#include "version.h"
#include "status.h"
#include "alloc.h"
#include "clock.h"
#include "outcome.h"
#include "call.h"
#include "deadline.h"
/* RESIL_POLICY_HEADERS: each policy module adds its header below. */
#include "breaker.h"
#include "retry.h"
#include "ratelimit.h"
#include "bulkhead.h"
#include "shared.h"
#include "timelimit.h"
#include "hedge.h"
#include "chain.h"
#include "metrics.h"

#endif
