/* SPDX-License-Identifier: Apache-2.0 */
/* limiter_jobs.c - the core's Redis calls as data: a client's Redis key, a
 * call on one key (exact, refund), a lease job's call, and the script and
 * arguments each is sent with (script_args.c, shared with the simulator). */
#include "limiter/limiter_jobs.h"

#include <stdlib.h>
#include <string.h>

#include "config/config.h"
#include "core/util.h"
#include "lease/lease.h"
#include "limiter/limiter_req.h"
#include "limiter/script_args.h"

/* The Redis key: the client key goes after an empty hashtag
 * when it holds '{', so that clients cannot choose their Cluster slot
 * (util_slot_fence). */
size_t core_redis_key(const struct limiter_core *c, const struct cfg_rule *r, const char *key,
                      size_t keylen, char *buf, size_t cap)
{
    size_t rl = r->name_len;
    size_t fence = util_slot_fence(key, keylen);
    size_t n = c->prefix_len + 3 + rl + 1 + fence + keylen;

    if (n > cap)
        return 0;
    memcpy(buf, c->prefix, c->prefix_len);
    memcpy(buf + c->prefix_len, rules_redis_tag(r->algorithm), 3);
    memcpy(buf + c->prefix_len + 3, r->name, rl);
    buf[c->prefix_len + 3 + rl] = ':';
    memcpy(buf + c->prefix_len + 4 + rl, UTIL_SLOT_FENCE, fence);
    memcpy(buf + c->prefix_len + 4 + rl + fence, key, keylen);
    return n;
}

_Static_assert(KEYBUF >= RULES_REDIS_HEAD_MAX, "a head's whole array fits in hit_keys' buf");

void core_hit_keys(const struct limiter_core *c, const struct limiter_req *req, size_t i,
                   uint64_t now_us, struct hit_keys *k)
{
    struct rule_hit *h = &req->ev.hits[i];
    const char *key;
    size_t keylen;

    k->i = i;
    k->h = h;
    k->r = &req->rs->cfg->rules[h->rule];
    k->seed = req->rs->bucket_seeds[h->rule];
    k->client = rules_hit_key(&req->ev, h);
    k->client_len = h->key_len;
    k->at = core_clock(c, &h->params, now_us);
    k->slot_len = -1;
    k->redis = NULL;
    k->redis_len = 0;
    key = k->client;
    keylen = k->client_len;
    if (h->params.algorithm == BUCKET_CONCURRENCY) { /* keyed by its slot key: short */
        k->slot_len = rules_slot_key(k->client, k->client_len, k->slot);
        if (k->slot_len < 0)
            return;
        key = k->slot;
        keylen = (size_t)k->slot_len;
    }
    if (!c->redis)
        return;
    if (req->rs->redis_heads) { /* the rule's head whole, then the client key */
        const struct rules_redis_head *hd = &req->rs->redis_heads[h->rule];
        size_t fence = util_slot_fence(key, keylen), n = hd->len + fence + keylen;
        if (n <= sizeof(k->buf)) {
            /* the head's whole array, a copy of fixed size (inlined): the
             * fence and the key then overwrite what is past its length */
            memcpy(k->buf, hd->s, sizeof(hd->s));
            if (fence)
                memcpy(k->buf + hd->len, UTIL_SLOT_FENCE, sizeof(UTIL_SLOT_FENCE) - 1);
            memcpy(k->buf + hd->len + fence, key, keylen);
            k->redis = k->buf;
            k->redis_len = n;
            return;
        }
    }
    k->redis_len = core_redis_key(c, k->r, key, keylen, k->buf, sizeof(k->buf));
    if (k->redis_len) {
        k->redis = k->buf;
        return;
    }
    /* a long max_key: on the heap */
    size_t cap = c->prefix_len + 4 + CFG_MAX_NAME + sizeof(UTIL_SLOT_FENCE) + keylen;
    k->redis = malloc(cap);
    k->redis_len = k->redis ? core_redis_key(c, k->r, key, keylen, k->redis, cap) : 0;
    if (!k->redis_len) {
        free(k->redis);
        k->redis = NULL;
    }
}

void core_hit_keys_free(struct hit_keys *k)
{
    if (k->redis != k->buf)
        free(k->redis);
    k->redis = NULL;
}

struct rjob *core_key_call(int kind, const struct rule_hit *h, const char *key, size_t keylen)
{
    struct rjob *j = calloc(1, sizeof(*j) + keylen + 1);

    if (!j)
        return NULL;
    j->kind = kind;
    j->algorithm = h->params.algorithm;
    j->limit = h->params.limit;
    j->fed = h->params.fed;
    j->period_ms = h->params.period_ms;
    j->burst = h->params.burst;
    j->offset_ms = h->params.offset_ms;
    j->block_ms = h->params.block_ms;
    j->cost = h->cost;
    j->keylen = keylen;
    memcpy(j->key, key, keylen);
    return j;
}

/* Wrap a lease job into a Redis call: the call lives in the job's room
 * (lease_table_set_job_room), zeroed, and goes with the job when lease_reply
 * has applied its reply: a cold decision's call is no allocation of its own
 * (two per decision, made by a worker and freed here, were a visible part
 * of the agent's CPU per cold decision). */
struct rjob *core_lease_rjob(struct lease_job *lj)
{
    struct rjob *j = lease_job_room(lj);

    j->kind = RJOB_LEASE;
    j->lj = lj;
    return j;
}

enum store_script core_job_args(const struct rjob *j, const char *agent_id, uint64_t ttl_ms,
                                uint64_t reserve, struct script_args *a)
{
    if (j->kind == RJOB_EXACT) {
        enum store_script s =
            script_exact_args(j->algorithm, j->limit, j->period_ms, j->burst, j->cost, a);
        script_block_arg(a, s, j->block_ms);
        if (j->fed)
            script_fed_arg(a, s, reserve);
        if (j->algorithm == BUCKET_FIXED_WINDOW)
            script_window_args(a, s, j->offset_ms);
        return s;
    }
    if (j->kind == RJOB_REFUND) {
        enum store_script s = script_refund_args(j->algorithm, j->limit, j->period_ms, j->burst,
                                                 j->cost, j->taken_ms, a);
        if (j->fed)
            script_fed_arg(a, s, reserve);
        if (j->algorithm == BUCKET_FIXED_WINDOW)
            script_window_args(a, s, j->offset_ms);
        return s;
    }
    if (j->kind == RJOB_CC)
        return script_cc_acquire_args(j->limit, j->period_ms, j->slot_id, a);
    if (j->kind == RJOB_CC_RELEASE)
        return script_cc_release_args(j->slot_id, a);
    enum store_script s = script_lease_args(j->lj, agent_id, ttl_ms, a);
    if (j->lj->fed)
        script_fed_arg(a, s, reserve);
    return s;
}

const char *core_job_key(const struct rjob *j, size_t *keylen)
{
    *keylen = j->kind != RJOB_LEASE ? j->keylen : j->lj->keylen;
    return j->kind != RJOB_LEASE ? j->key : j->lj->key;
}
