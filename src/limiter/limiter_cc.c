/* SPDX-License-Identifier: Apache-2.0 */
/* limiter_cc.c - concurrency rules in the limiter's core: slots from the
 * in-memory table (standalone, and the local share while Redis is down),
 * the Redis calls that take and give them back (cc_acquire, cc_release, as
 * jobs for the bridge to send), the slots release messages give back, and
 * those of blocked requests. */
#include "limiter/limiter_cc.h"
#include "lease/lease.h"
#include "limiter/limiter_req.h"

#include <stdlib.h>
#include <string.h>

#include "config/config.h"
#include "metrics/metrics.h"
#include "limits/slots.h"
#include "store/store_reply.h"

#define RETRY_NOMEM_US 1000000

/* Count a release's outcome (m may be NULL: not counted); held: and it
 * lowers slots_held (a slot of the local table). */
static void cc_released(struct metrics_rule *m, int ok, int held)
{
    if (!m)
        return;
    atomic_fetch_add_explicit(ok ? &m->slots_released_ok : &m->slots_released_unknown, 1,
                              memory_order_relaxed);
    if (ok && held)
        atomic_fetch_sub_explicit(&m->slots_held, 1, memory_order_relaxed);
}

/* A slot this agent took from Redis (key: its Redis key) is no longer
 * held: its release message came here, or the request was blocked. Lowers
 * slots_held once, whether or not Redis still knew the slot (one past
 * max_hold was already lowered by core_cc_expire). */
static void taken_release(struct limiter_core *c, struct metrics_rule *m, const char *key,
                          size_t keylen, uint64_t id, uint64_t now_us)
{
    if (c->taken && slot_table_release(c->taken, m->name, key, keylen, id, now_us))
        atomic_fetch_sub_explicit(&m->slots_held, 1, memory_order_relaxed);
}

/* An acquire completes its waiter: with the slot, denied, or (failed) by
 * the fallback, which the caller runs; one that timed out was answered by
 * the fallback already, so a slot Redis gave it late goes back at once
 * (else it would stay held until max_hold). A release is counted. */
enum core_cc_verdict core_cc_reply(struct limiter_core *c, struct rjob *j,
                                   const struct store_result *res, uint64_t now_us,
                                   struct lease_waiter **wp)
{
    struct bucket_result out;
    uint64_t expired = 0;

    if (j->kind == RJOB_CC_RELEASE) {
        int released = res ? store_reply_cc_release(res->v, res->n) : -1;
        if (released >= 0) /* slots_held: lowered when the release came */
            cc_released(j->m, released, 0);
        free(j);
        return CORE_CC_FREED;
    }
    int ok = res && store_reply_cc(res->v, res->n, &out, &expired) == 0;
    if (expired)
        atomic_fetch_add_explicit(&j->m->slots_expired, expired, memory_order_relaxed);
    if (!j->w) {
        if (ok && out.allowed) {
            j->kind = RJOB_CC_RELEASE;
            j->m = NULL; /* not counted: no client released it */
            return CORE_CC_SEND;
        }
        free(j);
        return CORE_CC_FREED;
    }
    struct lease_waiter *w = *wp = j->w;
    struct rule_hit *h = &((struct limiter_req *)w->req)->ev.hits[w->hit];
    if (ok) {
        h->out.res = out;
        h->out.degraded = 0;
        if (out.allowed) {
            struct slot_take t;
            h->slot_id = j->slot_id;
            h->slot_src = RULES_SLOT_REDIS;
            /* held until its release, or until Redis frees it at max_hold;
             * out of memory: not counted (never held, never lowered) */
            if (slot_table_take(c->taken, j->m->name, j->key, j->keylen, UINT64_MAX,
                                j->period_ms * 1000, j->slot_id, now_us, &t) == 0) {
                /* the key's slots past max_hold, freed by the take */
                atomic_fetch_add_explicit(&j->m->slots_held,
                                          (int64_t)t.allowed - (int64_t)t.expired,
                                          memory_order_relaxed);
            }
        }
    }
    free(j);
    return ok ? CORE_CC_DECIDED : CORE_CC_FALLBACK;
}

/* Under a new slot id. */
int core_cc_queue(struct limiter_req *req, const struct hit_keys *k, int ask, struct core_jobs *out)
{
    const struct rule_hit *h = k->h;
    struct rjob *j = ask ? calloc(1, sizeof(*j) + k->redis_len + 1) : NULL;

    if (!j)
        return -1;
    j->kind = RJOB_CC;
    j->w = &req->waiters[k->i];
    j->limit = h->params.limit;
    j->period_ms = h->params.period_ms; /* max_hold */
    j->slot_id = slots_new_id();
    j->m = req->rs->metrics[h->rule];
    j->keylen = k->redis_len;
    memcpy(j->key, k->redis, k->redis_len);
    core_jobs_push(out, j); /* limiter_decide wakes the thread */
    return 0;
}

/* A cc_release of slot id of rule r (slot key skey, the rule's counters
 * m) to out, and the slot no longer held here (taken_release). counted:
 * the release is counted when Redis answers (a client's release message;
 * not a blocked request's). Redis down (!up) or out of memory: not sent,
 * the slot then frees itself after max_hold. */
static void queue_release(struct limiter_core *c, const struct cfg_rule *r, const char *skey,
                          size_t sklen, uint64_t id, struct metrics_rule *m, int counted, int up,
                          uint64_t now_us, struct core_jobs *out)
{
    char buf[KEYBUF];
    size_t keylen = core_redis_key(c, r, skey, sklen, buf, sizeof(buf));
    struct rjob *j;

    if (!keylen)
        return;
    taken_release(c, m, buf, keylen, id, now_us);
    if (!up || !(j = calloc(1, sizeof(*j) + keylen + 1)))
        return;
    j->kind = RJOB_CC_RELEASE;
    j->slot_id = id;
    j->m = counted ? m : NULL;
    j->keylen = keylen;
    memcpy(j->key, buf, keylen);
    core_jobs_push(out, j);
}

void core_cc_local(struct limiter_core *c, struct limiter_req *req, const struct hit_keys *k,
                   const struct bucket_params *p, uint64_t now_us)
{
    struct rule_hit *h = k->h;
    struct metrics_rule *m = req->rs->metrics[h->rule];
    uint64_t id = slots_new_id();
    struct slot_take t = {0};

    memset(&h->out.res, 0, sizeof(h->out.res));
    if (k->slot_len < 0 || slot_table_take(c->slots, k->r->name, k->slot, (size_t)k->slot_len,
                                           p->limit, p->period_us, id, now_us, &t) < 0) {
        h->out.res.retry_us = RETRY_NOMEM_US; /* out of memory: denied */
        return;
    }
    if (t.expired) { /* freed by this take: no longer held */
        atomic_fetch_add_explicit(&m->slots_expired, t.expired, memory_order_relaxed);
        atomic_fetch_sub_explicit(&m->slots_held, (int64_t)t.expired, memory_order_relaxed);
    }
    h->out.res.allowed = t.allowed;
    h->out.res.remaining = t.allowed && p->limit > t.held ? p->limit - t.held : 0;
    h->out.res.retry_us = t.allowed ? 0 : t.retry_us ? t.retry_us : 1000;
    if (t.allowed) {
        h->slot_id = id;
        h->slot_src = RULES_SLOT_LOCAL;
        atomic_fetch_add_explicit(&m->slots_held, 1, memory_order_relaxed);
    }
}

void core_cc_releases(struct limiter_core *c, struct limiter_req *req, uint64_t now_us, int up,
                      struct core_jobs *out)
{
    const struct ruleset *rs = req->rs;

    for (size_t i = 0; i < req->ev.nreleases; i++) {
        struct rule_release *rel = &req->ev.releases[i];
        const char *skey = req->ev.keys + rel->key_off;

        if (rel->rule < 0) {
            cc_released(rs->metrics[rel->via], 0, 0);
            continue;
        }
        const struct cfg_rule *r = &rs->cfg->rules[rel->rule];
        struct metrics_rule *m = rs->metrics[rel->rule];
        if (rel->src == RULES_SLOT_LOCAL) {
            rel->freed = slot_table_release(c->slots, r->name, skey, rel->key_len, rel->id, now_us);
            cc_released(m, rel->freed, 1);
        } else if (!c->redis) { /* a Redis slot, and this agent has no Redis */
            cc_released(m, 0, 0);
        } else {
            /* counted when Redis answers; Redis down: it frees itself after
             * max_hold, counted by the acquire that finds it expired */
            queue_release(c, r, skey, rel->key_len, rel->id, m, 1, up, now_us, out);
        }
    }
}

void core_cc_settle(struct limiter_core *c, struct limiter_req *req, uint64_t now_us, int up,
                    struct core_jobs *out)
{
    struct rule_eval *ev = &req->ev;
    int any = 0;

    for (size_t i = 0; i < ev->nhits && !any; i++)
        any = ev->hits[i].slot_id != 0;
    if (!any || !rules_blocked(req->rs, ev))
        return;
    for (size_t i = 0; i < ev->nhits; i++) {
        struct rule_hit *h = &ev->hits[i];
        const struct cfg_rule *r = &req->rs->cfg->rules[h->rule];
        struct metrics_rule *m = req->rs->metrics[h->rule];
        char skey[RULES_SLOT_KEY_MAX + 1];
        int sk;

        if (!h->slot_id)
            continue;
        sk = rules_slot_key(rules_hit_key(ev, h), h->key_len, skey);
        if (sk >= 0 && h->slot_src == RULES_SLOT_LOCAL) {
            slot_table_release(c->slots, r->name, skey, (size_t)sk, h->slot_id, now_us);
            atomic_fetch_sub_explicit(&m->slots_held, 1, memory_order_relaxed);
        } else if (sk >= 0) { /* not counted as a release: no client sent one */
            queue_release(c, r, skey, (size_t)sk, h->slot_id, m, 0, up, now_us, out);
        }
        h->slot_id = 0;
        /* the request holds nothing: remaining as if it had not come */
        h->out.res.remaining++;
    }
}

/* slot_table_expire's callback: count a rule's expired slots. */
static void on_expired(void *ctx, const char *rule, uint64_t n)
{
    struct metrics_rule *m = metrics_rule_get(rule);

    (void)ctx;
    if (m) {
        atomic_fetch_add_explicit(&m->slots_expired, n, memory_order_relaxed);
        atomic_fetch_sub_explicit(&m->slots_held, (int64_t)n, memory_order_relaxed);
    }
}

/* slot_table_expire's callback for the slots taken from Redis: Redis
 * frees them at max_hold (and counts them expired when an acquire finds
 * them): here they stop being held. */
static void on_taken_expired(void *ctx, const char *rule, uint64_t n)
{
    struct metrics_rule *m = metrics_rule_get(rule);

    (void)ctx;
    if (m)
        atomic_fetch_sub_explicit(&m->slots_held, (int64_t)n, memory_order_relaxed);
}

void core_cc_expire(struct limiter_core *c, uint64_t now_us)
{
    slot_table_expire(c->slots, now_us, on_expired, NULL);
    if (c->taken)
        slot_table_expire(c->taken, now_us, on_taken_expired, NULL);
}
