/* SPDX-License-Identifier: Apache-2.0 */
/* limiter_first.h - a token bucket's cold decision on a key this agent has
 * no record of, as one plain SET (limiter_first.c): what to send, and what
 * its reply means. Part of the limiter's core. */
#ifndef LIMITER_FIRST_H
#define LIMITER_FIRST_H

#include <stddef.h>

#include "limiter/limiter_jobs.h"

struct store_result;

/* The plain SET key v NX PX px j is sent as, when it is a token bucket's
 * cold exact decision on a key this agent has no record of: CORE_FIRST_ARGC
 * arguments into argv/argvlen (valid until the next call on this thread), or
 * -1: send j's script. */
#define CORE_FIRST_ARGC 6
int core_first_args(const struct rjob *j, const char *argv[CORE_FIRST_ARGC],
                    size_t argvlen[CORE_FIRST_ARGC]);
enum core_first_verdict {
    CORE_FIRST_EVAL,  /* the key was there: send j's script after all */
    CORE_FIRST_REPLY, /* *out is j's reply, as the script's would be */
};
/* What the SET's reply res (at wall_us, the agent's wall clock: Redis'
 * time is not known here) does: *out is filled for CORE_FIRST_REPLY. */
enum core_first_verdict core_first_reply(const struct rjob *j, const struct store_result *res,
                                         uint64_t wall_us, struct store_result *out);

#endif
