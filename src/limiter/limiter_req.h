/* SPDX-License-Identifier: Apache-2.0 */
/* limiter_req.h - one NOTIFY's decisions (struct limiter_req), apart from
 * limiter.h so that the limiter's lower files (limiter_cc.c,
 * limiter_charge.c, limiter_jobs.c) use it without the limiter's API. */
#ifndef LIMITER_REQ_H
#define LIMITER_REQ_H

#include <stdatomic.h>
#include <stddef.h>

#include "rules/rules.h"

struct lease_waiter;
struct limiter_req;

/* One NOTIFY's decisions. The caller fills ev and rs (holding a reference
 * on rs), and sets done. */
struct limiter_req {
    struct rule_eval ev;
    struct ruleset *rs;
    atomic_uint waiting;
    struct lease_waiter *waiters; /* one per hit */
    size_t waiters_cap;
    /* Called once when decisions had to wait and the last one is in: from
     * the limiter's thread, never from inside limiter_decide(). */
    void (*done)(struct limiter_req *req);
};

#endif
