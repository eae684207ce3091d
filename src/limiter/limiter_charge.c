/* SPDX-License-Identifier: Apache-2.0 */
/* limiter_charge.c - [agent] charge = all-or-nothing: a request that a
 * non-shadow rule blocks takes nothing from the other rules. Once all of a
 * request's decisions are in, what each allowing rule took goes back where
 * it came from: the standalone bucket, the fail-open backstop, this agent's
 * lease (locally), or the Redis bucket (a refund script call). A refund
 * never gives back more than was taken, nor more than the request's absence
 * would have left: it may under-admit for a moment, never over-admit. */
#include "limiter/limiter_charge.h"
#include "limiter/limiter_cc.h"

#include <stdatomic.h>
#include <string.h>

#include "config/config.h"
#include "lease/lease.h"
#include "limiter/limiter_req.h"
#include "metrics/metrics.h"

/* The refund script call for hit k (decided by an exact call:
 * out.charged_at is its Redis time), to out. 0, or -1 when it cannot be
 * (out of memory, no key): the tokens then stay taken, which only
 * under-admits. */
static int queue_refund(const struct limiter_req *req, const struct hit_keys *k,
                        struct core_jobs *out)
{
    const struct rule_hit *h = k->h;
    struct rjob *j = k->redis ? core_key_call(RJOB_REFUND, h, k->redis, k->redis_len) : NULL;

    if (!j)
        return -1;
    j->taken_ms = h->out.charged_at;
    j->m = req->rs->metrics[h->rule];
    core_jobs_push(out, j);
    return 0;
}

/* Give back the tokens of hit k to the bucket, backstop or lease they came
 * from, and report the bucket as it is after in the hit's outcome (the
 * ACK's remaining and reset); an exact hit's refund is a Redis call whose
 * result comes after the ACK: remaining counts it given back. One case per
 * kind; the algorithms' own cases are in bucket_refund() and the scripts. */
static uint64_t refund_hit(struct limiter_core *c, struct limiter_req *req,
                           const struct hit_keys *k, uint64_t now_us, struct core_jobs *out)
{
    struct rule_hit *h = k->h;
    struct bucket_state st;
    uint64_t back = 0;

    switch (h->out.charged) {
    case RULE_CHARGED_BUCKET:
    case RULE_CHARGED_BACKSTOP: {
        int backstop = h->out.charged == RULE_CHARGED_BACKSTOP;
        const struct bucket_params *p = backstop ? &h->backstop : &h->params;
        back = bucket_table_refund(backstop ? c->backstop : c->buckets, k->r->name, k->client,
                                   k->client_len, p, h->out.charged_at, k->at, h->cost, &st);
        if (back) {
            h->out.res.remaining = st.remaining;
            h->out.res.reset_us = st.reset_us;
        }
        break;
    }
    case RULE_CHARGED_LEASE: {
        int redis = 0;
        if (k->redis)
            back = lease_refund(c->leases, k->redis, k->redis_len, h->cost, now_us, &h->out.res,
                                &redis);
        /* The spend already went to Redis with a claim (a top-up sent
         * between the decision and now): a token bucket takes it back
         * there, as an exact decision's (tb_refund ignores taken_ms). */
        if (!back && redis && h->params.algorithm == BUCKET_TOKEN_BUCKET)
            queue_refund(req, k, out);
        return back; /* a Redis refund is counted when Redis says */
    }
    case RULE_CHARGED_EXACT:
        if (queue_refund(req, k, out) == 0) {
            uint64_t cap = rules_capacity(&h->params);
            uint64_t rem = h->out.res.remaining + h->cost;
            h->out.res.remaining = rem < cap ? rem : cap;
        }
        return 0; /* counted when Redis says what it gave back */
    default:
        return 0;
    }
    return back;
}

void core_settle(struct limiter_core *c, struct limiter_req *req, uint64_t now_us, int up,
                 struct core_jobs *out)
{
    const struct ruleset *rs = req->rs;

    if (rs->has_concurrency) /* slots go back whatever charge says */
        core_cc_settle(c, req, now_us, up, out);

    /* One hit has nothing to give back (blocked, it took nothing; a shadow
     * one keeps its charge): no search for the deciding hit then. */
    if (req->ev.nhits < 2 || rs->cfg->charge == CHARGE_EACH || !rules_blocked(rs, &req->ev))
        return;
    for (size_t i = 0; i < req->ev.nhits; i++) {
        struct rule_hit *h = &req->ev.hits[i];

        /* A shadow rule is charged as if it enforced, alone. */
        if (rs->cfg->rules[h->rule].shadow || !h->out.res.allowed || h->cost == 0 ||
            h->out.charged == RULE_CHARGED_NONE)
            continue;
        struct hit_keys k;
        core_hit_keys(c, req, i, now_us, &k);
        uint64_t back = refund_hit(c, req, &k, now_us, out);
        core_hit_keys_free(&k);
        h->out.charged = RULE_CHARGED_NONE; /* once */
        h->out.refunded = back;
        if (back)
            atomic_fetch_add_explicit(&rs->metrics[h->rule]->refunded, back, memory_order_relaxed);
    }
}
