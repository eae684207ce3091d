/* SPDX-License-Identifier: Apache-2.0 */
/* limiter_cc.h - concurrency in the limiter's core (limiter_cc.c), below
 * limiter_core.c: slots taken locally or by a cc_acquire job, given back by
 * release messages and by blocked requests, and what a reply did. */
#ifndef LIMITER_CC_H
#define LIMITER_CC_H

#include <stddef.h>
#include <stdint.h>

#include "limiter/limiter_jobs.h"

struct store_result;

/* Decide concurrency hit k of req from the local slot table under p (its
 * limit and max_hold): standalone p is the rule's, in the fallback its
 * local share (the backstop). */
void core_cc_local(struct limiter_core *c, struct limiter_req *req, const struct hit_keys *k,
                   const struct bucket_params *p, uint64_t now_us);
/* Hit k of a concurrency rule: one cc_acquire on its Redis key, to out. 0,
 * or -1 when it cannot be (Redis down, out of memory). */
int core_cc_queue(struct limiter_req *req, const struct hit_keys *k, int ask,
                  struct core_jobs *out);
/* Free the slots of req's release messages (ev->releases). */
void core_cc_releases(struct limiter_core *c, struct limiter_req *req, uint64_t now_us, int up,
                      struct core_jobs *out);
/* What a cc_acquire or cc_release reply (res NULL: failed) did to j: */
enum core_cc_verdict {
    CORE_CC_FREED,    /* nothing waited: j freed */
    CORE_CC_DECIDED,  /* *w's hit decided: j freed, one decision of w->req in */
    CORE_CC_FALLBACK, /* *w's hit is for the fallback to decide: j freed */
    CORE_CC_SEND,     /* a slot nobody waits for any more: send j, now its release */
};
enum core_cc_verdict core_cc_reply(struct limiter_core *c, struct rjob *j,
                                   const struct store_result *res, uint64_t now_us,
                                   struct lease_waiter **w);
/* Free the local slots past max_hold (counted as expired). */
void core_cc_expire(struct limiter_core *c, uint64_t now_us);

/* The blocked request's slots go back (core_settle). */
void core_cc_settle(struct limiter_core *c, struct limiter_req *req, uint64_t now_us, int up,
                    struct core_jobs *out);

#endif
