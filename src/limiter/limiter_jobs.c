/* SPDX-License-Identifier: Apache-2.0 */
/* limiter_jobs.c - what the limiter's files share, below all of them: the
 * queue of Redis calls, a client's Redis key, a call on one key (exact,
 * refund) and the limiter's parts. It never calls up: what must (sending a
 * job, a decision that is in, the fallback) goes through the limiter's ops
 * (struct limiter_up, set by limiter_new in limiter.c). */
#include "limiter/limiter_int.h"

#include <ev.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "config/config.h"
#include "core/util.h"
#include "lease/lease.h"
#include "limiter/limiter_req.h"
#include "metrics/metrics.h"

void limiter_job_queue(struct limiter *l, struct rjob *j, int wake)
{
    pthread_mutex_lock(&l->qlock);
    j->next = l->queue;
    l->queue = j;
    pthread_mutex_unlock(&l->qlock);
    if (wake && !ev_async_pending(&l->wake))
        ev_async_send(l->loop, &l->wake);
}

int limiter_redis_up(struct limiter *l)
{
    return l->store && atomic_load(&l->up);
}

/* The Redis key: the client key goes after an empty hashtag
 * when it holds '{', so that clients cannot choose their Cluster slot
 * (util_slot_fence). */
size_t limiter_redis_key(const struct limiter *l, const struct cfg_rule *r, const char *key,
                         size_t keylen, char *buf, size_t cap)
{
    size_t rl = r->name_len;
    size_t fence = util_slot_fence(key, keylen);
    size_t n = l->prefix_len + 3 + rl + 1 + fence + keylen;

    if (n > cap)
        return 0;
    memcpy(buf, l->prefix, l->prefix_len);
    memcpy(buf + l->prefix_len,
           r->algorithm == BUCKET_FIXED_WINDOW     ? "fw:"
           : r->algorithm == BUCKET_SLIDING_WINDOW ? "sw:"
           : r->algorithm == BUCKET_CONCURRENCY    ? "cc:"
                                                   : "t2:",
           3);
    memcpy(buf + l->prefix_len + 3, r->name, rl);
    buf[l->prefix_len + 3 + rl] = ':';
    memcpy(buf + l->prefix_len + 4 + rl, UTIL_SLOT_FENCE, fence);
    memcpy(buf + l->prefix_len + 4 + rl + fence, key, keylen);
    return n;
}

size_t limiter_hit_redis_key(const struct limiter *l, const struct limiter_req *req,
                        const struct rule_hit *h, char *buf, size_t cap)
{
    return limiter_redis_key(l, &req->rs->cfg->rules[h->rule], rules_hit_key(&req->ev, h),
                             h->key_len, buf, cap);
}

struct rjob *limiter_key_call(struct limiter *l, int kind, const struct rule_hit *h,
                                 const char *key, size_t keylen)
{
    struct rjob *j = calloc(1, sizeof(*j) + keylen + 1);

    if (!j)
        return NULL;
    j->l = l;
    j->kind = kind;
    j->algorithm = h->params.algorithm;
    j->limit = h->params.limit;
    j->period_ms = h->params.period_us / 1000;
    j->burst = h->params.burst;
    j->offset_ms = h->params.offset_us / 1000;
    j->block_ms = (h->params.block_us + 999) / 1000;
    j->cost = h->cost;
    j->keylen = keylen;
    memcpy(j->key, key, keylen);
    return j;
}

int limiter_queue_refund(struct limiter *l, const struct limiter_req *req, size_t i)
{
    const struct rule_hit *h = &req->ev.hits[i];
    char buf[KEYBUF];
    size_t klen = limiter_hit_redis_key(l, req, h, buf, sizeof(buf));
    /* a key past KEYBUF (a long max_key) keeps its charge: under-admission only */
    struct rjob *j = klen ? limiter_key_call(l, RJOB_REFUND, h, buf, klen) : NULL;

    if (!j)
        return -1;
    j->taken_ms = h->out.charged_at;
    j->m = req->rs->metrics[h->rule];
    limiter_job_queue(l, j, 1);
    return 0;
}

void limiter_parts(struct limiter *l, struct limiter_parts *out)
{
    out->buckets = l->buckets;
    out->backstop = l->backstop;
    out->leases = l->leases;
    out->store = l->store;
    out->slots = l->slots;
}
