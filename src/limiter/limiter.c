/* SPDX-License-Identifier: Apache-2.0 */
/* limiter.c - decisions: in-memory buckets, leases, exact Redis calls, and
 * the fallback while Redis is unreachable. */
#include "limiter/limiter.h"
#include "limiter/limiter_int.h"

#include <ev.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/config.h"
#include "core/log.h"
#include "core/util.h"
#include "core/warning.h"
#include "metrics/metrics.h"
#include "limiter/script_args.h"
#include "limits/slots.h"
#include "store/script.h"
#include "store/store.h"
#include "store/store_epoch.h"
#include "store/store_heartbeat.h"
#include "store/store_reply.h"

#define STRIPES 64
#define CLOSED_RETRY_US 1000000 /* fail-closed answers: retry in a second */
#define STALL_PROBE_US 100000  /* while stalled, one decision per 100 ms still asks Redis */
#define FALLBACK_REPAY_US 1000000 /* repay_cap: stalls up to 1 s are repaid whole */
#define STALL_LOG_EVERY_US 10000000 /* a flapping Redis is logged every 10 s at most */

/* A script reply fits in a store_result. */
_Static_assert(CLAIM_R_COUNT <= STORE_MAX_VALUES && EXACT_R_COUNT <= STORE_MAX_VALUES,
               "a script reply fits in a store_result");

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

static void decide_fallback(struct limiter *l, struct limiter_req *req, size_t i,
                            uint64_t now_us)
{
    struct rule_hit *h = &req->ev.hits[i];
    const struct cfg_rule *r = &req->rs->cfg->rules[h->rule];

    h->out.degraded = 1;
    if (r->on_redis_down == DOWN_CLOSED) {
        h->out.res.allowed = 0;
        h->out.res.remaining = 0;
        h->out.res.retry_us = CLOSED_RETRY_US;
        h->out.res.reset_us = CLOSED_RETRY_US;
        rules_charged(&h->out, RULE_CHARGED_NONE, 0);
        return;
    }
    if (h->params.algorithm == BUCKET_CONCURRENCY) { /* the local share of the slots */
        limiter_cc_local(l, req, i, &h->backstop, now_us);
        h->out.degraded = 1;
        return;
    }
    /* A leased key: the backstop starts from what the lease knew of it,
     * and what it admits is owed to Redis (lease_fallback_note). */
    char key[KEYBUF];
    size_t klen = r->lease && l->leases ? limiter_hit_redis_key(l, req, h, key, sizeof(key)) : 0;
    uint64_t retry_us;
    /* The master unconfirmed (Sentinel): what this agent took from it since
     * the sentinels' last answer, the same tokens a replica they promoted
     * hands out again, comes off the backstop first (below zero if need
     * be): over an outage D from the cut the agent then admits at most its
     * share x (b + r x D) in all (doc/design.md, the split brain). */
    uint64_t taken = klen ? lease_fallback_unconfirmed(l->leases, key, klen) : 0;
    if (taken)
        bucket_table_charge_seeded(l->backstop, r->name, r->name_len,
                                   req->rs->bucket_seeds[h->rule], rules_hit_key(&req->ev, h),
                                   h->key_len, &h->backstop, bucket_clock(&h->backstop, now_us),
                                   taken);
    if (klen && !lease_fallback_check(l->leases, key, klen, h->cost, now_us, &retry_us)) {
        h->out.res.allowed = 0;
        h->out.res.remaining = 0;
        h->out.res.retry_us = retry_us;
        h->out.res.reset_us = retry_us;
        rules_charged(&h->out, RULE_CHARGED_NONE, 0);
        return;
    }
    bucket_table_take_seeded(l->backstop, r->name, r->name_len, req->rs->bucket_seeds[h->rule],
                             rules_hit_key(&req->ev, h), h->key_len, &h->backstop,
                             bucket_clock(&h->backstop, now_us), h->cost, &h->out.res);
    rules_charged(&h->out, RULE_CHARGED_BACKSTOP, bucket_clock(&h->backstop, now_us));
    if (klen && h->out.res.allowed && h->cost > 0)
        lease_fallback_note(l->leases, key, klen, h->cost, repay_cap(&h->backstop),
                            &req->rs->metrics[h->rule]->fallback_repaid);
}

/* One decision of req is in: complete req when it was the last (its owner
 * settles it: limiter_decide()). */
static void hit_done(struct limiter *l, struct limiter_req *req)
{
    (void)l;
    if (atomic_fetch_sub_explicit(&req->waiting, 1, memory_order_acq_rel) == 1)
        req->done(req);
}

/* Complete the waiters of two lists: decided ones and fallback ones. */
static void complete_waiters(struct limiter *l, struct lease_waiter *done,
                             struct lease_waiter *fallback, uint64_t now_us)
{
    struct lease_waiter *w, *next;

    for (w = done; w; w = next) {
        next = w->next;
        struct limiter_req *req = w->req;
        struct rule_outcome *out = &req->ev.hits[w->hit].out;
        out->degraded = 0;
        rules_charged(out, w->exact ? RULE_CHARGED_EXACT : RULE_CHARGED_LEASE,
                      w->exact ? w->taken_ms : now_us);
        hit_done(l, req);
    }
    for (w = fallback; w; w = next) {
        next = w->next;
        struct limiter_req *req = w->req;
        decide_fallback(l, req, w->hit, now_us);
        hit_done(l, req);
    }
}

/* ---- Redis calls (limiter thread) ----------------------------------------- */

static void inflight_unlink(struct limiter *l, struct rjob *j)
{
    if (l->icheck == j)
        l->icheck = j->inext;
    if (j->iprev)
        j->iprev->inext = j->inext;
    else
        l->ihead = j->inext;
    if (j->inext)
        j->inext->iprev = j->iprev;
    else
        l->itail = j->iprev;
    j->iprev = j->inext = NULL;
}

/* Wrap a lease job into a Redis call: the call lives in the job's room
 * (lease_table_set_job_room), zeroed, and goes with the job when lease_reply
 * has applied its reply: a cold decision's call is no allocation of its own
 * (two per decision, made by a worker and freed here, were a visible part
 * of the agent's CPU per cold decision). */
static struct rjob *lease_rjob(struct limiter *l, struct lease_job *lj, uint64_t now_us)
{
    struct rjob *j = lease_job_room(lj);

    (void)now_us;
    j->l = l;
    j->kind = RJOB_LEASE;
    j->lj = lj;
    return j;
}

static void send_job(struct limiter *l, struct rjob *j);

/* Complete the decision w waited for with the reply of an exact script
 * (enum script_exact_reply), or by fallback when res is NULL (failed) or
 * short. */
static void exact_reply(struct limiter *l, struct lease_waiter *w, const struct store_result *res,
                        uint64_t now_us)
{
    struct limiter_req *req = w->req;

    if (res && store_reply_exact(res->v, res->n, w->out) == 0) {
        struct rule_outcome *out = &req->ev.hits[w->hit].out;
        out->degraded = 0;
        rules_charged(out, RULE_CHARGED_EXACT,
                      res->v[EXACT_R_TIME_MS] > 0 ? (uint64_t)res->v[EXACT_R_TIME_MS] : 0);
    } else {
        decide_fallback(l, req, w->hit, now_us);
    }
    hit_done(l, req);
}

static void on_reply(void *arg, const struct store_result *res)
{
    struct rjob *j = arg;
    struct limiter *l = j->l;
    uint64_t now = util_now_us();
    int ok = res->status == STORE_OK;

    inflight_unlink(l, j);
    /* Only an answer in time ends a stall: late answers to calls that timed
     * out say Redis is still slow. */
    if (res->status != STORE_DOWN && !j->timed_out && atomic_load(&l->stalled)) {
        atomic_store(&l->stalled, 0);
        if (l->stall_announced) {
            l->stall_announced = 0;
            LOG_INFO("\"redis answering in time again\"");
        }
    }
    if (j->kind == RJOB_EXACT) {
        if (j->w)
            exact_reply(l, j->w, ok ? res : NULL, now);
        free(j);
        return;
    }
    if (j->kind == RJOB_REFUND) { /* a failed one gives nothing back: under-admits only */
        uint64_t given, remaining;
        if (ok && store_reply_refund(res->v, res->n, &given, &remaining) == 0 && given > 0) {
            atomic_fetch_add_explicit(&j->m->refunded, given, memory_order_relaxed);
            /* a leased key's estimates */
            lease_note_refund(l->leases, j->key, j->keylen, remaining, now);
        }
        free(j);
        return;
    }
    if (j->kind == RJOB_CC || j->kind == RJOB_CC_RELEASE) {
        limiter_cc_reply(l, j, ok ? res : NULL, now);
        return;
    }

    struct lease_waiter *done = NULL, *fallback = NULL;
    struct lease_job *next = NULL;
    lease_reply(l->leases, j->lj, ok, res->v, res->n, now, &done, &fallback, &next); /* frees j */
    complete_waiters(l, done, fallback, now);
    if (next && (j = lease_rjob(l, next, now)))
        send_job(l, j);
}

/* Fill *a with the arguments of j's call (store/script_args.c, shared with
 * the simulator); returns the script to call. */
static enum store_script job_args(const struct limiter *l, const struct rjob *j,
                                  struct script_args *a)
{
    if (j->kind == RJOB_EXACT) {
        enum store_script s =
            script_exact_args(j->algorithm, j->limit, j->period_ms, j->burst, j->cost, a);
        script_block_arg(a, s, j->block_ms);
        if (j->algorithm == BUCKET_FIXED_WINDOW)
            script_window_args(a, s, j->offset_ms);
        return s;
    }
    if (j->kind == RJOB_REFUND) {
        enum store_script s = script_refund_args(j->algorithm, j->limit, j->period_ms, j->burst,
                                                 j->cost, j->taken_ms, a);
        if (j->algorithm == BUCKET_FIXED_WINDOW)
            script_window_args(a, s, j->offset_ms);
        return s;
    }
    if (j->kind == RJOB_CC)
        return script_cc_acquire_args(j->limit, j->period_ms, j->slot_id, a);
    if (j->kind == RJOB_CC_RELEASE)
        return script_cc_release_args(j->slot_id, a);
    return script_lease_args(j->lj, store_agent_id(l->store), l->ttl_ms, a);
}

/* j's script call (j is in flight). */
static void send_eval(struct limiter *l, struct rjob *j)
{
    struct script_args a;
    enum store_script script = job_args(l, j, &a);
    const char *key = j->kind != RJOB_LEASE ? j->key : j->lj->key;
    size_t keylen = j->kind != RJOB_LEASE ? j->keylen : j->lj->keylen;

    /* The callback runs now when Redis is down: on_reply unlinks. */
    store_eval(l->store, script, key, keylen, a.argc, a.argv, a.argvlen, on_reply, j);
}

static void send_job(struct limiter *l, struct rjob *j)
{
    j->sent_us = util_now_us();
    if (j->lj)
        j->lj->sent_us = j->sent_us;
    j->iprev = l->itail;
    j->inext = NULL;
    if (l->itail)
        l->itail->inext = j;
    else
        l->ihead = j;
    l->itail = j;
    if (!l->icheck)
        l->icheck = j;
    /* a call for decisions: a claim or top-up (tokens decisions spend), an
     * exact call, a concurrency slot's acquire; not a lease's give-back, a
     * refund or a slot's release (the status page's calls per decision) */
    if (j->kind == RJOB_EXACT || j->kind == RJOB_CC ||
        (j->kind == RJOB_LEASE && j->lj->kind != LEASE_JOB_RETURN))
        METRIC_INC(redis_decision_calls);
    if (limiter_first_send(l, j) < 0) /* (a new key: one plain SET, limiter_first.c) */
        send_eval(l, j);
}

static void wake_cb(struct ev_loop *loop, ev_async *a, int revents)
{
    struct limiter *l = a->data;
    struct rjob *q, *next, *rev = NULL;

    pthread_mutex_lock(&l->qlock);
    q = l->queue;
    l->queue = NULL;
    pthread_mutex_unlock(&l->qlock);
    for (; q; q = next) { /* the queue is LIFO: restore arrival order */
        next = q->next;
        q->next = rev;
        rev = q;
    }
    store_cork(l->store, 1); /* what workers queued together goes out together */
    for (q = rev; q; q = next) {
        next = q->next;
        send_job(l, q);
    }
    store_cork(l->store, 0);
}

/* A call went past [redis] timeout: the fallback decided its requests
 * (each agent's backstop, share x the rule) and Redis never saw them until
 * they are repaid: the agent limits less exactly than the operator thinks,
 * a warning (redis_slow) until [redis] errors_quiet passes without one
 * (slow_tick). */
static void slow_note(struct limiter *l, uint64_t now_us)
{
    l->slow_calls++;
    l->slow_last_us = now_us;
    if (l->slow_calls == 1 || (l->slow_calls & (l->slow_calls - 1)) == 0)
        warning_raise(WARNING_REDIS_SLOW,
                      "Redis answered %llu call%s later than [redis] timeout (%llu ms): "
                      "the fallback decided their requests (its backstop, [fallback] share "
                      "of each rule), repaid once Redis answers. Redis is overloaded or "
                      "blocked (slow commands, a fork, swapping), or the network to it is; "
                      "raise timeout only if Redis is healthy and the network slow",
                      (unsigned long long)l->slow_calls, l->slow_calls == 1 ? "" : "s",
                      (unsigned long long)(l->timeout_us / 1000));
}

static void slow_tick(struct limiter *l, uint64_t now_us)
{
    if (l->slow_calls && now_us - l->slow_last_us >= l->slow_quiet_us) {
        l->slow_calls = 0;
        warning_clear(WARNING_REDIS_SLOW);
    }
}

/* Answer from the fallback whatever has waited past the Redis timeout. */
static void timeouts_cb(struct ev_loop *loop, ev_timer *t, int revents)
{
    struct limiter *l = t->data;
    uint64_t now = util_now_us();

    struct rjob *j;

    /* Calls time out in the order they were sent: start past those that
     * already did, so a frozen Redis does not make this scan grow. */
    for (j = l->icheck; j && now - j->sent_us >= l->timeout_us; j = j->inext) {
        l->icheck = j->inext;
        j->timed_out = 1;
        METRIC_INC(redis_errors);
        slow_note(l, now);
        /* Until Redis answers something, new decisions do not wait for it.
         * Not with a cluster: one slow node says nothing of the others (its
         * keys fall back through their own timeouts). */
        if (!store_clustered(l->store) && !atomic_exchange(&l->stalled, 1) &&
            now - l->stall_logged_us >= STALL_LOG_EVERY_US) {
            l->stall_logged_us = now;
            l->stall_announced = 1;
            LOG_WARN("\"redis slower than timeout: rules fall back\" timeout_ms=%llu",
                     (unsigned long long)(l->timeout_us / 1000));
        }
        if (j->kind != RJOB_LEASE) { /* exact, concurrency: a release has no waiter */
            if (j->w) {
                struct limiter_req *req = j->w->req;
                decide_fallback(l, req, j->w->hit, now);
                j->w = NULL;
                hit_done(l, req);
            }
        } else if (j->kind == RJOB_LEASE) {
            struct lease_waiter *fallback = NULL;
            lease_timeout(l->leases, j->lj, &fallback);
            complete_waiters(l, NULL, fallback, now);
        }
    }
}

static void send_jobs(struct limiter *l, struct lease_job *jobs)
{
    uint64_t now = util_now_us();
    struct lease_job *next;

    store_cork(l->store, 1);
    for (; jobs; jobs = next) {
        next = jobs->next;
        struct rjob *j = lease_rjob(l, jobs, now);
        if (j)
            send_job(l, j);
    }
    store_cork(l->store, 0);
}

static void tick_cb(struct ev_loop *loop, ev_timer *t, int revents)
{
    struct limiter *l = t->data;
    struct lease_job *jobs = NULL;

    uint64_t now = util_now_us();

    lease_tick(l->leases, now, atomic_load(&l->up), &jobs);
    send_jobs(l, jobs);
    slow_tick(l, now);
}

/* "redis down" at most every 10 s for the process (every worker's store
 * goes down with the same Redis; a Redis that breaks each connection at
 * once goes down at each reconnect), with the losses not said since. */
static struct log_gate down_gate;

static void on_state(void *arg, int up)
{
    struct limiter *l = arg;
    unsigned long long before;

    atomic_store(&l->up, up);
    atomic_store(&l->stalled, 0);
    if (!up && (int)LOG_LVL_WARN <= (int)log_level && log_gate_open(&down_gate, 10.0, &before))
        LOG_WARN("\"redis down: rules fall back\" mode=degraded suppressed=%llu", before);
}

/* Sentinel: each answer naming the master starts a new count of what the
 * keys take from it; none for the window makes the fallback charge that
 * count to the backstops (decide_fallback). */
static void on_sentinel(void *arg, int confirmed)
{
    struct limiter *l = arg;

    if (confirmed)
        lease_confirmed(l->leases);
    else
        lease_unconfirmed(l->leases);
}

/* Redis lost the buckets (store_epoch.h): the leases held here were granted
 * from buckets that are gone. Give none back (that would add tokens to
 * buckets made afresh) and spend none more: void them all. What the fleet
 * admits across the loss is then at most one extra b per key: the fresh
 * bucket's. */
static void on_state_lost(void *arg)
{
    struct limiter *l = arg;
    size_t held = lease_void_all(l->leases);

    LOG_INFO("\"leases dropped: redis state lost\" held=%zu", held);
    /* the heartbeat set went with the rest: share = auto must not shrink */
    store_heartbeat_rebuilding(l->heartbeat);
}

/* What the layers below (limiter_cc.c, limiter_jobs.c) call up to (limiter_int.h). */
static const struct limiter_up up_ops = {send_job, hit_done, decide_fallback, send_eval,
                                         on_reply};

/* ---- decisions (worker threads) ------------------------------------------- */

/* While Redis is stalled (a call timed out, none answered since), decisions
 * do not wait for it, but one request per STALL_PROBE_US still goes, so that
 * recovery is seen even when only exact (lease = off) rules are in use. */
static int redis_stalled(struct limiter *l, uint64_t now_us)
{
    if (!atomic_load_explicit(&l->stalled, memory_order_relaxed))
        return 0;
    uint64_t last = atomic_load_explicit(&l->last_probe_us, memory_order_relaxed);
    if (now_us - last >= STALL_PROBE_US &&
        atomic_compare_exchange_strong(&l->last_probe_us, &last, now_us))
        return 0;
    return 1;
}

/* Standalone: every hit from the in-memory buckets, at once. */
static void decide_standalone(struct limiter *l, struct limiter_req *req, uint64_t now_us)
{
    struct rule_eval *ev = &req->ev;

    for (size_t i = 0; i < ev->nhits; i++) {
        struct rule_hit *h = &ev->hits[i];
        const struct cfg_rule *r = &req->rs->cfg->rules[h->rule];
        if (h->params.algorithm == BUCKET_CONCURRENCY) {
            limiter_cc_local(l, req, i, &h->params, now_us);
            continue;
        }
        /* the rule's part of the bucket's hash from the ruleset: no strlen,
         * no hash of the name per decision */
        bucket_table_take_seeded(l->buckets, r->name, r->name_len, req->rs->bucket_seeds[h->rule],
                                 rules_hit_key(ev, h), h->key_len, &h->params,
                                 bucket_clock(&h->params, now_us), h->cost, &h->out.res);
        h->out.degraded = 0;
        rules_charged(&h->out, RULE_CHARGED_BUCKET, bucket_clock(&h->params, now_us));
    }
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

/* Hit i with one exact script call (a rule with lease = off, or a cost its
 * lease does not hold).
 * Returns 0 when queued, -1 when it cannot be (Redis down, out of memory). */
static int queue_exact(struct limiter *l, struct limiter_req *req, size_t i, const char *key,
                       size_t keylen, int up)
{
    struct rjob *j = up ? limiter_key_call(l, RJOB_EXACT, &req->ev.hits[i], key, keylen) : NULL;

    if (!j)
        return -1;
    j->w = &req->waiters[i];
    limiter_job_queue(l, j, 0);
    return 0;
}

/* Hit i of a leased rule: from the local lease, or by a claim (queued). */
static int decide_leased(struct limiter *l, struct limiter_req *req, size_t i, const char *key,
                         size_t keylen, uint64_t now_us, int up, int *queued)
{
    struct rule_hit *h = &req->ev.hits[i];
    struct lease_job *lj = NULL;
    int v = lease_decide_cost(l->leases, key, keylen, &h->params, h->cost, now_us, up,
                              &req->waiters[i], &h->out.res, &lj);

    if (v == LEASE_EXACT) { /* a cost the lease does not hold */
        if (queue_exact(l, req, i, key, keylen, up) == 0) {
            *queued = 1;
            v = LEASE_PENDING;
        } else {
            v = LEASE_DOWN;
        }
    }
    if (v == LEASE_DONE)
        rules_charged(&h->out, RULE_CHARGED_LEASE, now_us);
    if (v == LEASE_DOWN)
        decide_fallback(l, req, i, now_us);
    struct rjob *j = lj ? lease_rjob(l, lj, now_us) : NULL;
    if (j) {
        limiter_job_queue(l, j, 0);
        *queued = 1;
    }
    return v != LEASE_PENDING;
}

/* Decide hit i of req with Redis, or queue the call it waits for (and set
 * *queued). Returns 1 when decided here, 0 when it waits. */
static int decide_hit(struct limiter *l, struct limiter_req *req, size_t i, uint64_t now_us,
                      int up, int *queued)
{
    struct rule_hit *h = &req->ev.hits[i];
    struct lease_waiter *w = &req->waiters[i];
    char buf[KEYBUF];
    char *key = buf;
    size_t klen = limiter_hit_redis_key(l, req, h, buf, sizeof(buf));
    int decided = 1;

    h->out.degraded = 0;
    w->out = &h->out.res;
    w->req = req;
    w->hit = i;
    if (h->params.algorithm == BUCKET_CONCURRENCY) { /* keyed by its slot key: short */
        char skey[RULES_SLOT_KEY_MAX + 1];
        int sk = rules_slot_key(rules_hit_key(&req->ev, h), h->key_len, skey);
        klen = sk < 0 ? 0
                      : limiter_redis_key(l, &req->rs->cfg->rules[h->rule], skey, (size_t)sk,
                                          buf, sizeof(buf));
        if (klen && limiter_cc_queue(l, req, i, buf, klen, up) == 0) {
            *queued = 1;
            return 0;
        }
        decide_fallback(l, req, i, now_us);
        return 1;
    }
    if (klen == 0) { /* a long max_key: build it on the heap */
        size_t cap = l->prefix_len + 4 + CFG_MAX_NAME + sizeof(UTIL_SLOT_FENCE) + h->key_len;
        key = malloc(cap);
        klen = key ? limiter_hit_redis_key(l, req, h, key, cap) : 0;
        if (!klen) {
            free(key);
            decide_fallback(l, req, i, now_us);
            return 1;
        }
    }
    if (req->rs->cfg->rules[h->rule].lease) {
        decided = decide_leased(l, req, i, key, klen, now_us, up, queued);
    } else if (queue_exact(l, req, i, key, klen, up) == 0) {
        *queued = 1;
        decided = 0;
    } else {
        decide_fallback(l, req, i, now_us);
    }
    if (key != buf) /* the lease entry and the call keep their own copies */
        free(key);
    return decided;
}

int limiter_decide(struct limiter *l, struct limiter_req *req, uint64_t now_us)
{
    unsigned decided = 0;
    int queued = 0;
    size_t max_entries = req->rs->cfg->max_entries;

    /* max_entries applies at reload: the ruleset carries it */
    if (atomic_load_explicit(&l->budget.max, memory_order_relaxed) != max_entries)
        atomic_store_explicit(&l->budget.max, max_entries, memory_order_relaxed);

    if (req->ev.nreleases) /* release messages: never waited for */
        limiter_cc_releases(l, req, now_us);
    if (!l->store) {
        decide_standalone(l, req, now_us);
        return 0;
    }
    if (reserve_waiters(req) < 0)
        return -1;
    /* One count per hit still to decide, and one held by this call, so that
     * replies arriving meanwhile cannot complete req before it returns. No
     * other thread sees req before a waiter is published under a stripe's
     * lock, which orders this store: relaxed. */
    atomic_store_explicit(&req->waiting, (unsigned)req->ev.nhits + 1, memory_order_relaxed);
    int up = atomic_load(&l->up) && !redis_stalled(l, now_us);

    for (size_t i = 0; i < req->ev.nhits; i++)
        decided += (unsigned)decide_hit(l, req, i, now_us, up, &queued);
    /* ev_async_send() fences memory twice even when a wake-up is already
     * pending; the queue is taken under qlock after that flag is cleared,
     * so skipping it then loses nothing (libev: ev_async_pending). */
    if (queued && !ev_async_pending(&l->wake))
        ev_async_send(l->loop, &l->wake);
    /* Every hit decided here (the common case: a leased or cached key): no
     * waiter was published, no other thread knows req. */
    if (decided == req->ev.nhits)
        return 0;
    if (atomic_fetch_sub_explicit(&req->waiting, decided + 1, memory_order_acq_rel) ==
        decided + 1)
        return 0;
    return 1;
}

void limiter_settle(struct limiter *l, struct limiter_req *req, uint64_t now_us)
{
    limiter_charge_settle(l, req, now_us);
}

void limiter_req_release(struct limiter_req *req)
{
    free(req->waiters);
    req->waiters = NULL;
    req->waiters_cap = 0;
}

/* ---- lifecycle ------------------------------------------------------------ */

struct limiter *limiter_new(struct ev_loop *loop, const struct config *cfg, char *err,
                            size_t errlen)
{
    struct limiter *l = calloc(1, sizeof(*l));
    if (!l) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    l->ops = &up_ops;
    pthread_mutex_init(&l->qlock, NULL);
    l->loop = loop;
    atomic_init(&l->budget.count, 0);
    atomic_init(&l->budget.max, cfg->max_entries);
    l->buckets = bucket_table_new(STRIPES);
    l->backstop = bucket_table_new(STRIPES);
    l->slots = slot_table_new();
    if (!l->buckets || !l->backstop || !l->slots) {
        snprintf(err, errlen, "out of memory");
        goto fail;
    }
    bucket_table_set_budget(l->buckets, &l->budget);
    bucket_table_set_budget(l->backstop, &l->budget);
    if (config_standalone(cfg))
        return l;

    struct lease_config lc = {cfg->lease_interval_ms * 1000, cfg->lease_ttl_ms * 1000,
                              cfg->lease_max_fraction,
                              cfg->lease_rate ? cfg->lease_rate_ttl_ms * 1000 : 0, 1, 1};
    l->leases = lease_table_new(&lc, STRIPES);
    if (!l->leases) {
        snprintf(err, errlen, "out of memory");
        goto fail;
    }
    lease_table_set_budget(l->leases, &l->budget);
    lease_table_set_job_room(l->leases, sizeof(struct rjob)); /* lease_rjob */
    l->timeout_us = cfg->redis_timeout_ms * 1000;
    l->slow_quiet_us = cfg->redis_errors_quiet_ms * 1000;
    l->ttl_ms = cfg->lease_ttl_ms;
    snprintf(l->prefix, sizeof(l->prefix), "%s", cfg->redis_prefix ? cfg->redis_prefix : "");
    l->prefix_len = strlen(l->prefix);
    ev_async_init(&l->wake, wake_cb);
    l->wake.data = l;
    ev_async_start(loop, &l->wake);
    ev_timer_init(&l->tick, tick_cb, cfg->lease_interval_ms / 1000.,
                  cfg->lease_interval_ms / 1000.);
    l->tick.data = l;
    ev_timer_start(loop, &l->tick);
    double every = cfg->redis_timeout_ms / 1000. / 5;
    if (every < 0.002)
        every = 0.002;
    ev_timer_init(&l->timeouts, timeouts_cb, every, every);
    l->timeouts.data = l;
    ev_timer_start(loop, &l->timeouts);
    struct store_options so;
    store_options_from_config(cfg, &so);
    l->store = store_new(loop, &so, err, errlen);
    if (!l->store)
        goto fail;
    store_on_state(l->store, on_state, l);
    store_on_sentinel(l->store, on_sentinel, l);
    /* the fleet's size (fleet.h): restart-only settings, [redis] prefix and listen */
    l->heartbeat = store_heartbeat_new(loop, l->store, cfg->redis_prefix, cfg->listen);
    if (!l->heartbeat) {
        snprintf(err, errlen, "out of memory");
        goto fail;
    }
    /* other agents' resets, applied here, read every [rules] poll */
    l->resets = limiter_resets_new(l, cfg->rules_poll_ms / 1000.);
    if (!l->resets) {
        snprintf(err, errlen, "out of memory");
        goto fail;
    }
    /* the keyspace's epoch: a loss named, leases settled (on_state_lost);
     * epoch_check = 0: not checked */
    if (cfg->redis_epoch_check_ms)
        l->epoch = store_epoch_new(loop, l->store, cfg->redis_prefix,
                                   cfg->redis_epoch_check_ms / 1000., on_state_lost, l);
    if (cfg->redis_epoch_check_ms && !l->epoch) {
        snprintf(err, errlen, "out of memory");
        goto fail;
    }
    atomic_store(&metrics.redis_configured, 1);
    return l;
fail:
    limiter_free(l);
    return NULL;
}

int limiter_redis(const struct limiter *l)
{
    return l->store != NULL;
}

struct store *limiter_store(struct limiter *l)
{
    return l->store;
}

struct store_heartbeat *limiter_heartbeat(struct limiter *l)
{
    return l->heartbeat;
}

int limiter_reconfigure(struct limiter *l, const struct config *cfg)
{
    struct store_options so;

    if (!l->store)
        return 0;
    store_options_from_config(cfg, &so);
    return store_reconfigure(l->store, &so);
}

static void run_until_idle(struct limiter *l, uint64_t deadline)
{
    while (store_up(l->store) && store_pending(l->store) > 0 && util_now_us() < deadline)
        ev_run(l->loop, EVRUN_ONCE);
}

void limiter_shutdown(struct limiter *l, double timeout_s)
{
    uint64_t deadline = util_now_us() + (uint64_t)(timeout_s * 1e6);
    struct lease_job *jobs = NULL;

    if (!l || !l->store)
        return;
    store_heartbeat_leave(l->heartbeat); /* the others' N follows at once */
    store_epoch_stop(l->epoch);
    wake_cb(l->loop, &l->wake, 0); /* what workers queued last */
    run_until_idle(l, deadline);
    /* A reply that came in meanwhile may have granted an entry more (its
     * claim was in flight at the last pass): go again, a few times at most,
     * within the deadline. What still holds a lease then expires in Redis
     * after [lease] ttl (under-admission only). */
    for (int pass = 0; pass < 5 && store_up(l->store) && util_now_us() < deadline; pass++) {
        jobs = NULL;
        lease_drain(l->leases, util_now_us(), &jobs);
        if (!jobs)
            break;
        send_jobs(l, jobs);
        run_until_idle(l, deadline);
    }
    ev_timer_stop(l->loop, &l->tick);
    ev_timer_stop(l->loop, &l->timeouts);
    ev_async_stop(l->loop, &l->wake);
    limiter_resets_stop(l->resets);
    store_free(l->store); /* fails what is still in flight */
    l->store = NULL;
    store_heartbeat_free(l->heartbeat); /* after its store */
    l->heartbeat = NULL;
    limiter_resets_free(l->resets);
    l->resets = NULL;
    store_epoch_free(l->epoch);
    l->epoch = NULL;
    while (l->ihead) { /* callbacks already ran; nothing should remain */
        struct rjob *j = l->ihead;
        inflight_unlink(l, j);
        if (j->kind != RJOB_LEASE) /* a lease call is its lease job's */
            free(j);
    }
}

void limiter_free(struct limiter *l)
{
    if (!l)
        return;
    store_heartbeat_stop(l->heartbeat);
    store_epoch_stop(l->epoch);
    limiter_resets_stop(l->resets);
    if (l->store) {
        ev_timer_stop(l->loop, &l->tick);
        ev_timer_stop(l->loop, &l->timeouts);
        ev_async_stop(l->loop, &l->wake);
        store_free(l->store);
    }
    store_heartbeat_free(l->heartbeat); /* after its store */
    store_epoch_free(l->epoch);
    limiter_resets_free(l->resets);
    bucket_table_free(l->buckets);
    bucket_table_free(l->backstop);
    slot_table_free(l->slots);
    lease_table_free(l->leases);
    pthread_mutex_destroy(&l->qlock);
    free(l);
}

/* The current parameters of a rule by name, from rs->params or (with
 * backstop) rs->backstop; NULL when the rule is gone. A rule with limits
 * from args has them per bucket: each is judged by those of its last take. */
static const struct bucket_params *rule_params(const struct ruleset *rs, const char *rule,
                                               int backstop)
{
    for (size_t i = 0; i < rs->cfg->nrules; i++) {
        if (strcmp(rs->cfg->rules[i].name, rule) != 0)
            continue;
        /* share = auto: a backstop follows the fleet's size, so each bucket
         * is judged by the limits it was last taken with. */
        if (config_rule_per_request(&rs->cfg->rules[i]) ||
            (backstop && rs->cfg->fallback_share == CFG_SHARE_AUTO))
            return &bucket_params_per_bucket;
        return backstop ? &rs->backstop[i] : &rs->params[i];
    }
    return NULL;
}

static const struct bucket_params *params_of(void *ctx, const char *rule)
{
    return rule_params(ctx, rule, 0);
}

static const struct bucket_params *backstop_of(void *ctx, const char *rule)
{
    return rule_params(ctx, rule, 1);
}

size_t limiter_expire(struct limiter *l, const struct ruleset *rs, uint64_t now_us,
                      size_t max_visit)
{
    uint64_t wall = util_wall_us(); /* fixed windows count on it */
    size_t n = bucket_table_expire_at(l->buckets, now_us, wall, max_visit, params_of, (void *)rs);
    n += bucket_table_expire_at(l->backstop, now_us, wall, max_visit, backstop_of, (void *)rs);
    limiter_cc_expire(l, now_us);
    atomic_store(&metrics.buckets,
                 bucket_table_count(l->buckets) + bucket_table_count(l->backstop));
    return n;
}
