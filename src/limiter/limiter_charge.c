/* SPDX-License-Identifier: Apache-2.0 */
/* limiter_charge.c - [agent] charge = all-or-nothing: a request that a
 * non-shadow rule blocks takes nothing from the other rules. Once all of a
 * request's decisions are in, what each allowing rule took goes back where
 * it came from: the standalone bucket, the fail-open backstop, this agent's
 * lease (locally), or the Redis bucket (a refund script call). A refund
 * never gives back more than was taken, nor more than the request's absence
 * would have left: it may under-admit for a moment, never over-admit. */
#include "limiter/limiter_int.h"

#include <stdatomic.h>
#include <string.h>

#include "config/config.h"
#include "lease/lease.h"
#include "limiter/limiter_req.h"

#define KEYBUF 1024

/* Give back the tokens of hit i to the bucket, backstop or lease they came
 * from, and report the bucket as it is after in the hit's outcome (the
 * ACK's remaining and reset); an exact hit's refund is a Redis call whose
 * result comes after the ACK: remaining counts it given back. One case per
 * kind; the algorithms' own cases are in bucket_refund() and the scripts. */
static uint64_t refund_hit(struct limiter *l, struct limiter_req *req, size_t i,
                           uint64_t now_us)
{
    struct rule_hit *h = &req->ev.hits[i];
    const struct cfg_rule *r = &req->rs->cfg->rules[h->rule];
    struct limiter_parts parts;
    struct bucket_state st;
    uint64_t back = 0;

    limiter_parts(l, &parts);
    switch (h->out.charged) {
    case RULE_CHARGED_BUCKET:
    case RULE_CHARGED_BACKSTOP: {
        int backstop = h->out.charged == RULE_CHARGED_BACKSTOP;
        const struct bucket_params *p = backstop ? &h->backstop : &h->params;
        back = bucket_table_refund(backstop ? parts.backstop : parts.buckets, r->name,
                                   rules_hit_key(&req->ev, h), h->key_len, p,
                                   h->out.charged_at, bucket_clock(p, now_us), h->cost, &st);
        if (back) {
            h->out.res.remaining = st.remaining;
            h->out.res.reset_us = st.reset_us;
        }
        break;
    }
    case RULE_CHARGED_LEASE: {
        char key[KEYBUF];
        size_t klen = limiter_redis_key(l, r, rules_hit_key(&req->ev, h), h->key_len, key,
                                        sizeof(key));
        int redis = 0;
        /* a key past KEYBUF (a long max_key) keeps its charge: under-admission only */
        if (klen)
            back = lease_refund(parts.leases, key, klen, h->cost, now_us, &h->out.res, &redis);
        /* The spend already went to Redis with a claim (a top-up sent
         * between the decision and now): a token bucket takes it back
         * there, as an exact decision's (tb_refund ignores taken_ms). */
        if (!back && redis && h->params.algorithm == BUCKET_TOKEN_BUCKET)
            limiter_queue_refund(l, req, i);
        return back; /* a Redis refund is counted when Redis says */
    }
    case RULE_CHARGED_EXACT:
        if (limiter_queue_refund(l, req, i) == 0) {
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

void limiter_charge_settle(struct limiter *l, struct limiter_req *req, uint64_t now_us)
{
    const struct ruleset *rs = req->rs;

    limiter_cc_settle(l, req, now_us); /* slots go back whatever charge says */

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
        uint64_t back = refund_hit(l, req, i, now_us);
        h->out.charged = RULE_CHARGED_NONE; /* once */
        h->out.refunded = back;
        if (back)
            atomic_fetch_add_explicit(&rs->metrics[h->rule]->refunded, back,
                                      memory_order_relaxed);
    }
}
