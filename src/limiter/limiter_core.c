/* SPDX-License-Identifier: Apache-2.0 */
/* limiter_core.c - the core's decisions (limiter_core.h): a request's hits
 * from the in-memory buckets (standalone), the leases, an exact or
 * concurrency call (a job handed back), or the fallback while Redis cannot
 * answer; and what each kind of reply, or a call's timeout, does to the
 * decisions waiting for it. No loop, no socket: the bridge (limiter.c) sends
 * what this returns and feeds back what Redis says. */
#include "limiter/limiter_core.h"
#include "limiter/limiter_cc.h"

#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/config.h"
#include "lease/lease.h"
#include "limiter/limiter_req.h"
#include "limits/slots.h"
#include "metrics/metrics.h"
#include "store/store_reply.h"
#include "store/store_result.h"

#define CLOSED_RETRY_US 1000000   /* fail-closed answers: retry in a second */
#define FALLBACK_REPAY_US 1000000 /* repay_cap: stalls up to 1 s are repaid whole */

/* A script reply fits in a store_result. */
_Static_assert(CLAIM_R_COUNT <= STORE_MAX_VALUES && EXACT_R_COUNT <= STORE_MAX_VALUES,
               "a script reply fits in a store_result");

/* ---- the core's tables ---------------------------------------------------- */

int core_init(struct limiter_core *c, size_t max_entries, unsigned stripes,
              const struct lease_config *lc, const char *prefix)
{
    memset(c, 0, sizeof(*c));
    atomic_init(&c->budget.count, 0);
    atomic_init(&c->budget.max, max_entries);
    c->wall_us = util_wall_us;
    c->buckets = bucket_table_new(stripes);
    c->backstop = bucket_table_new(stripes);
    c->slots = slot_table_new();
    if (!c->buckets || !c->backstop || !c->slots)
        return -1;
    bucket_table_set_budget(c->buckets, &c->budget);
    bucket_table_set_budget(c->backstop, &c->budget);
    if (!lc)
        return 0;
    c->leases = lease_table_new(lc, stripes);
    c->taken = slot_table_new();
    if (!c->leases || !c->taken)
        return -1;
    lease_table_set_budget(c->leases, &c->budget);
    lease_table_set_job_room(c->leases, sizeof(struct rjob)); /* core_lease_rjob */
    snprintf(c->prefix, sizeof(c->prefix), "%s", prefix ? prefix : "");
    c->prefix_len = strlen(c->prefix);
    return 0;
}

void core_free(struct limiter_core *c)
{
    bucket_table_free(c->buckets);
    bucket_table_free(c->backstop);
    slot_table_free(c->slots);
    slot_table_free(c->taken);
    lease_table_free(c->leases);
    c->buckets = c->backstop = NULL;
    c->slots = c->taken = NULL;
    c->leases = NULL;
}

/* Note where an allowed decision took its tokens (how: enum rule_charged),
 * and when (see rule_outcome's charged_at); a denied one took nothing. The
 * core's bookkeeping: only the decisions here say what they charged. */
static void note_charged(struct rule_outcome *o, int how, uint64_t at)
{
    o->charged = o->res.allowed ? how : RULE_CHARGED_NONE;
    o->charged_at = at;
}

/* ---- fallback ------------------------------------------------------------- */

/* What one agent's backstop may owe a key at most: share x (b + r x
 * FALLBACK_REPAY_US), its own bucket over that much time (p is the
 * backstop's: share x the rule). A stall shorter than that is repaid whole;
 * a longer outage keeps the rest (doc/design.md, "Repaying the fallback":
 * charging all of it would lock out, after a fleet-wide outage, clients that
 * stayed within their limit, whose tokens Redis refilled meanwhile). */
static uint64_t repay_cap(const struct bucket_params *p)
{
    double r = p->period_us ? (double)p->limit / (double)p->period_us : 0;
    return p->burst + (uint64_t)ceil(r * FALLBACK_REPAY_US);
}

/* Decide k's hit without Redis (the fallback, as degraded). */
static void fallback(struct limiter_core *c, struct limiter_req *req, const struct hit_keys *k,
                     uint64_t now_us)
{
    struct rule_hit *h = k->h;
    const struct cfg_rule *r = k->r;

    h->out.degraded = 1;
    if (r->on_redis_down == DOWN_CLOSED) {
        h->out.res.allowed = 0;
        h->out.res.remaining = 0;
        h->out.res.retry_us = CLOSED_RETRY_US;
        h->out.res.reset_us = CLOSED_RETRY_US;
        note_charged(&h->out, RULE_CHARGED_NONE, 0);
        return;
    }
    if (h->params.algorithm == BUCKET_CONCURRENCY) { /* the local share of the slots */
        core_cc_local(c, req, k, &h->backstop, now_us);
        h->out.degraded = 1;
        return;
    }
    /* A leased key: the backstop starts from what the lease knew of it,
     * and what it admits is owed to Redis (lease_fallback_note). */
    const char *key = r->lease && c->leases ? k->redis : NULL;
    size_t klen = key ? k->redis_len : 0;
    uint64_t retry_us;
    /* The master unconfirmed (Sentinel): what this agent took from it since
     * the sentinels' last answer, the same tokens a replica they promoted
     * hands out again, comes off the backstop first (below zero if need
     * be): over an outage D from the cut the agent then admits at most its
     * share x (b + r x D) in all (doc/design.md, the split brain). */
    uint64_t taken = klen ? lease_fallback_unconfirmed(c->leases, key, klen) : 0;
    if (taken)
        bucket_table_charge_seeded(c->backstop, r->name, r->name_len, k->seed, k->client,
                                   k->client_len, &h->backstop, k->at, taken);
    if (klen && !lease_fallback_check(c->leases, key, klen, h->cost, now_us, &retry_us)) {
        h->out.res.allowed = 0;
        h->out.res.remaining = 0;
        h->out.res.retry_us = retry_us;
        h->out.res.reset_us = retry_us;
        note_charged(&h->out, RULE_CHARGED_NONE, 0);
        return;
    }
    bucket_table_take_seeded(c->backstop, r->name, r->name_len, k->seed, k->client, k->client_len,
                             &h->backstop, k->at, h->cost, &h->out.res);
    note_charged(&h->out, RULE_CHARGED_BACKSTOP, k->at);
    if (klen && h->out.res.allowed && h->cost > 0)
        lease_fallback_note(c->leases, key, klen, h->cost, repay_cap(&h->backstop),
                            &req->rs->metrics[h->rule]->fallback_repaid);
}

void core_fallback(struct limiter_core *c, struct limiter_req *req, size_t i, uint64_t now_us)
{
    struct hit_keys k;

    core_hit_keys(c, req, i, now_us, &k);
    fallback(c, req, &k, now_us);
    core_hit_keys_free(&k);
}

void core_hit_done(struct limiter_req *req)
{
    if (atomic_fetch_sub_explicit(&req->waiting, 1, memory_order_acq_rel) == 1)
        req->done(req);
}

/* Complete the waiters of two lists: decided ones and fallback ones. */
static void complete_waiters(struct limiter_core *c, struct lease_waiter *done,
                             struct lease_waiter *fallback, uint64_t now_us)
{
    struct lease_waiter *w, *next;

    for (w = done; w; w = next) {
        next = w->next;
        struct limiter_req *req = w->req;
        struct rule_outcome *out = &req->ev.hits[w->hit].out;
        out->degraded = 0;
        note_charged(out, w->exact ? RULE_CHARGED_EXACT : RULE_CHARGED_LEASE,
                     w->exact ? w->taken_ms : now_us);
        core_hit_done(req);
    }
    for (w = fallback; w; w = next) {
        next = w->next;
        struct limiter_req *req = w->req;
        core_fallback(c, req, w->hit, now_us);
        core_hit_done(req);
    }
}

/* ---- replies -------------------------------------------------------------- */

/* Complete the decision w waited for with the reply of an exact script
 * (enum script_exact_reply), or by fallback when res is NULL (failed) or
 * short. */
static void exact_reply(struct limiter_core *c, struct lease_waiter *w,
                        const struct store_result *res, uint64_t now_us)
{
    struct limiter_req *req = w->req;

    if (res && store_reply_exact(res->v, res->n, w->out) == 0) {
        struct rule_outcome *out = &req->ev.hits[w->hit].out;
        out->degraded = 0;
        note_charged(out, RULE_CHARGED_EXACT,
                     res->v[EXACT_R_TIME_MS] > 0 ? (uint64_t)res->v[EXACT_R_TIME_MS] : 0);
    } else {
        core_fallback(c, req, w->hit, now_us);
    }
    core_hit_done(req);
}

struct rjob *core_reply(struct limiter_core *c, struct rjob *j, const struct store_result *res,
                        uint64_t now_us)
{
    int ok = res && res->status == STORE_OK;

    if (j->kind == RJOB_EXACT) {
        if (ok && j->leased) /* the lease's estimates: its tick may claim */
            lease_note_exact(c->leases, j->key, j->keylen, res->v, res->n, now_us);
        if (j->w)
            exact_reply(c, j->w, ok ? res : NULL, now_us);
        free(j);
        return NULL;
    }
    if (j->kind == RJOB_REFUND) { /* a failed one gives nothing back: under-admits only */
        uint64_t given, remaining;
        if (ok && store_reply_refund(res->v, res->n, &given, &remaining) == 0 && given > 0) {
            atomic_fetch_add_explicit(&j->m->refunded, given, memory_order_relaxed);
            /* a leased key's estimates */
            lease_note_refund(c->leases, j->key, j->keylen, remaining, now_us);
        }
        free(j);
        return NULL;
    }
    if (j->kind == RJOB_CC || j->kind == RJOB_CC_RELEASE) {
        struct lease_waiter *w = NULL;
        switch (core_cc_reply(c, j, ok ? res : NULL, now_us, &w)) {
        case CORE_CC_SEND:
            return j;
        case CORE_CC_FALLBACK:
            core_fallback(c, w->req, w->hit, now_us);
            core_hit_done(w->req);
            break;
        case CORE_CC_DECIDED:
            core_hit_done(w->req);
            break;
        case CORE_CC_FREED:
            break;
        }
        return NULL;
    }

    struct lease_waiter *done = NULL, *fallback = NULL;
    struct lease_job *next = NULL;
    lease_reply(c->leases, j->lj, ok, res ? res->v : NULL, res ? res->n : 0, now_us, &done,
                &fallback, &next); /* frees j */
    complete_waiters(c, done, fallback, now_us);
    return next ? core_lease_rjob(next) : NULL;
}

void core_timeout(struct limiter_core *c, struct rjob *j, uint64_t now_us)
{
    if (j->kind != RJOB_LEASE) { /* exact, concurrency: a release has no waiter */
        if (j->w) {
            struct limiter_req *req = j->w->req;
            core_fallback(c, req, j->w->hit, now_us);
            j->w = NULL;
            core_hit_done(req);
        }
    } else {
        struct lease_waiter *fallback = NULL;
        lease_timeout(c->leases, j->lj, &fallback);
        complete_waiters(c, NULL, fallback, now_us);
    }
}

/* ---- decisions ------------------------------------------------------------ */

/* Standalone: hit k from the in-memory buckets, at once. */
static void decide_standalone(struct limiter_core *c, struct limiter_req *req,
                              const struct hit_keys *k, uint64_t now_us)
{
    struct rule_hit *h = k->h;

    if (h->params.algorithm == BUCKET_CONCURRENCY) {
        core_cc_local(c, req, k, &h->params, now_us);
        return;
    }
    /* the rule's part of the bucket's hash from the ruleset: no strlen, no
     * hash of the name per decision */
    bucket_table_take_seeded(c->buckets, k->r->name, k->r->name_len, k->seed, k->client,
                             k->client_len, &h->params, k->at, h->cost, &h->out.res);
    h->out.degraded = 0;
    note_charged(&h->out, RULE_CHARGED_BUCKET, k->at);
}

/* One waiter per hit, kept in req from one request to the next. */
static int reserve_waiters(struct limiter_req *req)
{
    size_t n = req->ev.nhits;

    if (req->waiters_cap < n) {
        struct lease_waiter *w = realloc(req->waiters, n * sizeof(*w));
        if (!w)
            return -1;
        req->waiters = w;
        req->waiters_cap = n;
    }
    return 0;
}

/* Hit k with one exact script call (a rule with lease = off, or a cost its
 * lease does not hold), to out.
 * Returns 0 when queued, -1 when it cannot be (Redis down, out of memory). */
static int queue_exact(struct limiter_req *req, const struct hit_keys *k, int leased, int ask,
                       struct core_jobs *out)
{
    struct rjob *j = ask ? core_key_call(RJOB_EXACT, k->h, k->redis, k->redis_len) : NULL;

    if (!j)
        return -1;
    j->leased = leased;
    j->w = &req->waiters[k->i];
    core_jobs_push(out, j);
    return 0;
}

/* Hit k of a leased rule: from the local lease, or by a claim (queued). */
static int decide_leased(struct limiter_core *c, struct limiter_req *req, const struct hit_keys *k,
                         uint64_t now_us, int ask, struct core_jobs *out)
{
    struct rule_hit *h = k->h;
    struct lease_job *lj = NULL;
    int v = lease_decide_cost(c->leases, k->redis, k->redis_len, &h->params, h->cost, now_us, ask,
                              &req->waiters[k->i], &h->out.res, &lj);

    if (v == LEASE_EXACT) /* a cost the lease does not hold */
        v = queue_exact(req, k, 1, ask, out) == 0 ? LEASE_PENDING : LEASE_DOWN;
    if (v == LEASE_DONE)
        note_charged(&h->out, RULE_CHARGED_LEASE, now_us);
    if (v == LEASE_DOWN)
        fallback(c, req, k, now_us);
    if (lj)
        core_jobs_push(out, core_lease_rjob(lj));
    return v != LEASE_PENDING;
}

/* Decide hit k of req with Redis, or hand back the call it waits for.
 * Returns 1 when decided here, 0 when it waits. */
static int decide_hit(struct limiter_core *c, struct limiter_req *req, const struct hit_keys *k,
                      uint64_t now_us, int ask, struct core_jobs *out)
{
    struct rule_hit *h = k->h;
    struct lease_waiter *w = &req->waiters[k->i];

    h->out.degraded = 0;
    w->out = &h->out.res;
    w->req = req;
    w->hit = k->i;
    if (k->redis && h->params.algorithm == BUCKET_CONCURRENCY) {
        if (core_cc_queue(req, k, ask, out) == 0)
            return 0;
    } else if (k->redis && k->r->lease) {
        return decide_leased(c, req, k, now_us, ask, out);
    } else if (k->redis && queue_exact(req, k, 0, ask, out) == 0) {
        return 0;
    }
    fallback(c, req, k, now_us); /* no key, or no call to be made */
    return 1;
}

long core_decide(struct limiter_core *c, struct limiter_req *req, uint64_t now_us, int up, int ask,
                 struct core_jobs *out)
{
    unsigned decided = 0;

    if (req->ev.nreleases) /* release messages: never waited for */
        core_cc_releases(c, req, now_us, up, out);
    if (!c->redis) { /* at once, nothing waits: no waiter, no count */
        for (size_t i = 0; i < req->ev.nhits; i++) {
            struct hit_keys k;
            core_hit_keys(c, req, i, now_us, &k);
            decide_standalone(c, req, &k, now_us);
        }
        return (long)req->ev.nhits;
    }
    if (reserve_waiters(req) < 0)
        return -1;
    /* One count per hit still to decide, and one held by this call, so that
     * replies arriving meanwhile cannot complete req before it returns. No
     * other thread sees req before a waiter is published under a stripe's
     * lock, which orders this store: relaxed. */
    atomic_store_explicit(&req->waiting, (unsigned)req->ev.nhits + 1, memory_order_relaxed);
    for (size_t i = 0; i < req->ev.nhits; i++) {
        struct hit_keys k;
        core_hit_keys(c, req, i, now_us, &k);
        decided += (unsigned)decide_hit(c, req, &k, now_us, ask, out);
        core_hit_keys_free(&k);
    }
    return (long)decided;
}

int core_decide_end(struct limiter_req *req, unsigned decided)
{
    /* Every hit decided here (the common case: a leased or cached key): no
     * waiter was published, no other thread knows req. */
    if (decided == req->ev.nhits)
        return 0;
    if (atomic_fetch_sub_explicit(&req->waiting, decided + 1, memory_order_acq_rel) == decided + 1)
        return 0;
    return 1;
}
