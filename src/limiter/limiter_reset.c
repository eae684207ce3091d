/* SPDX-License-Identifier: Apache-2.0 */
/* limiter_reset.c - a reset for the whole fleet (POST /reset, --reset).
 *
 * The agent that resets a key (limiter_admin.c: the Redis bucket, its own
 * lease entry and backstop) then tells the others through Redis: a member
 * of the sorted set PREFIX "resets" (reset_msg.h), scored by Redis' time in
 * ms, the set trimmed to the last RESET_KEEP_MS. Every agent reads the set
 * every [rules] poll (1 s by default; one ZRANGEBYSCORE from a little before the newest
 * entry it saw: entries seen are skipped by a ring of their hashes, and
 * applying one twice is harmless anyway), drops its lease, negative cache
 * (the penalty box of block_for) and backstop bucket of the key, and acks:
 * SADD of its id to PREFIX "resets:" ID (expiring with the entry). The
 * resetter counts the acks every RESET_COUNT_S for up to RESET_WAIT_S, or
 * until every agent of the heartbeat set (fleet_agents) confirmed, itself
 * included, and answers with both counts.
 *
 * One poll per agent and [rules] poll whatever the traffic; nothing on the
 * request path. An operator who wants an idle agent's Redis connection
 * quiet (a proxy's idle timeout without keepalive) raises [rules] poll, as
 * [redis] epoch_check: a reset then reaches the others within that. The ordering that makes it
 * work: the entry is added after the Redis bucket's reset answered, so an agent that drops its
 * state asks Redis again and finds the reset bucket; on one connection a claim's reply that
 * predates the reset is applied before the poll's. */
#include <ev.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "core/util.h"
#include "lease/lease.h"
#include "limiter/limiter_int.h"
#include "limits/bucket.h"
#include "limits/reset_msg.h"
#include "metrics/metrics.h"
#include "store/store.h"

#define RESET_COUNT_S 0.1
#define RESET_WAIT_S 2.0
#define RESET_KEEP_MS 60000
#define RESET_OVERLAP_MS 1000 /* read again from this long before the newest seen */
#define RESET_READ_MAX "256"
#define RESET_SEEN 512 /* hashes of the entries applied lately */

static const char publish_script[] =
    "local t = redis.call('TIME')\n"
    "local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)\n"
    "redis.call('ZADD', KEYS[1], string.format('%d', now), ARGV[1])\n"
    "redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', string.format('%d', now - "
    "tonumber(ARGV[2])))\n"
    "redis.call('PEXPIRE', KEYS[1], ARGV[2])\n"
    "return now\n";

static const char ack_script[] = "redis.call('SADD', KEYS[1], ARGV[1])\n"
                                 "redis.call('PEXPIRE', KEYS[1], ARGV[2])\n"
                                 "return 1\n";

struct pub;

struct limiter_resets {
    struct limiter *l;
    ev_timer poll;
    int inflight, stopped;
    int64_t since_ms; /* -1: from the start */
    uint64_t seen[RESET_SEEN];
    unsigned nseen;
    uint64_t counter;
    struct pub *pubs;
    char key[128];
};

/* One reset being confirmed. */
struct pub {
    struct pub *next;
    struct limiter_resets *r;
    ev_timer count, deadline;
    limiter_fleet_cb *cb;
    void *arg;
    int inflight, finished;
    unsigned agents, confirmed;
    char ackkey[256];
};

static void send_eval(struct limiter_resets *r, const char *script, const char *key,
                      const char *arg1, store_cb *cb, void *cbarg)
{
    char keep[24];
    snprintf(keep, sizeof(keep), "%d", RESET_KEEP_MS);
    const char *argv[] = {"EVAL", script, "1", key, arg1, keep};
    size_t argvlen[6];
    for (int i = 0; i < 6; i++)
        argvlen[i] = strlen(argv[i]);
    store_write(r->l->store, key, strlen(key), 6, argv, argvlen, cb, cbarg);
}

/* ---- every agent: read the set, apply, ack ---------------------------------- */

static void on_ack(void *arg, const struct store_result *res)
{
    (void)arg;
    if (res->status != STORE_OK)
        LOG_DEBUG("\"fleet reset ack failed\" err=%s", res->err ? res->err : "redis down");
}

static int seen_before(struct limiter_resets *r, const char *s, size_t len)
{
    uint64_t h = util_hash_words(UTIL_HASH_INIT, s, len) | 1;

    for (unsigned i = 0; i < RESET_SEEN; i++)
        if (r->seen[i] == h)
            return 1;
    r->seen[r->nseen++ % RESET_SEEN] = h;
    return 0;
}

static void apply(struct limiter_resets *r, const char *s, size_t len)
{
    struct limiter *l = r->l;
    struct reset_msg m;
    char *buf = malloc(len + 1);

    if (!buf || reset_msg_parse(s, len, buf, &m) < 0) {
        free(buf);
        return;
    }
    const char *self = store_agent_id(l->store);
    if (!reset_msg_from(m.id, self)) { /* the resetter cleared its own */
        int lease = lease_reset_local(l->core.leases, m.redis_key, m.redis_keylen, util_now_us());
        int backstop = bucket_table_drop(l->core.backstop, m.rule, m.client_key, m.client_keylen);
        LOG_INFO("\"fleet reset\" rule=%s id=%s lease=%d backstop=%d", m.rule, m.id, lease,
                 backstop);
        char ackkey[sizeof(r->key) + RESET_MSG_ID_MAX + 2];
        snprintf(ackkey, sizeof(ackkey), "%s:%s", r->key, m.id);
        send_eval(r, ack_script, ackkey, self, on_ack, NULL);
    }
    free(buf);
}

static void on_poll(void *arg, const struct store_result *res)
{
    struct limiter_resets *r = arg;

    r->inflight = 0;
    if (r->stopped || res->status != STORE_OK)
        return;
    for (size_t i = 0; i + 1 < res->nstr; i += 2) {
        int64_t score = strtoll(res->str[i + 1], NULL, 10);
        if (score - RESET_OVERLAP_MS > r->since_ms)
            r->since_ms = score - RESET_OVERLAP_MS;
        if (!seen_before(r, res->str[i], res->str_len[i]))
            apply(r, res->str[i], res->str_len[i]);
    }
}

static void poll_cb(struct ev_loop *loop, ev_timer *t, int revents)
{
    struct limiter_resets *r = t->data;
    char since[24];
    (void)loop;
    (void)revents;

    if (r->inflight || r->stopped || !store_up(r->l->store))
        return;
    if (r->since_ms < 0)
        snprintf(since, sizeof(since), "-inf");
    else
        snprintf(since, sizeof(since), "%" PRId64, r->since_ms);
    const char *argv[] = {"ZRANGEBYSCORE", r->key,  since, "+inf",
                          "WITHSCORES",    "LIMIT", "0",   RESET_READ_MAX};
    size_t argvlen[8];
    for (int i = 0; i < 8; i++)
        argvlen[i] = strlen(argv[i]);
    r->inflight = 1; /* (the callback may run before store_read returns) */
    store_read(r->l->store, r->key, strlen(r->key), 8, argv, argvlen, on_poll, r);
}

struct limiter_resets *limiter_resets_new(struct limiter *l, double every_s)
{
    struct limiter_resets *r = calloc(1, sizeof(*r));

    if (!r)
        return NULL;
    r->l = l;
    r->since_ms = -1;
    snprintf(r->key, sizeof(r->key), "%.*sresets", (int)l->core.prefix_len, l->core.prefix);
    ev_timer_init(&r->poll, poll_cb, every_s, every_s);
    r->poll.data = r;
    ev_timer_start(l->loop, &r->poll);
    return r;
}

/* ---- the resetter: publish, count the acks ---------------------------------- */

static void pub_free_if_done(struct pub *p)
{
    if (p->finished && !p->inflight)
        free(p);
}

static void pub_finish(struct pub *p)
{
    struct limiter_resets *r = p->r;

    if (p->finished)
        return;
    p->finished = 1;
    ev_timer_stop(r->l->loop, &p->count);
    ev_timer_stop(r->l->loop, &p->deadline);
    for (struct pub **pp = &r->pubs; *pp; pp = &(*pp)->next)
        if (*pp == p) {
            *pp = p->next;
            break;
        }
    p->cb(p->arg, p->agents, p->confirmed);
    pub_free_if_done(p);
}

static void on_count(void *arg, const struct store_result *res)
{
    struct pub *p = arg;

    p->inflight = 0;
    if (p->finished) { /* answered meanwhile (the deadline, a stop) */
        pub_free_if_done(p);
        return;
    }
    if (res->status == STORE_OK && res->n == 1 && res->v[0] >= 0)
        p->confirmed = 1 + (unsigned)res->v[0]; /* the acks and this agent */
    if (p->confirmed >= p->agents)
        pub_finish(p); /* (frees p) */
}

static void count_cb(struct ev_loop *loop, ev_timer *t, int revents)
{
    struct pub *p = t->data;
    (void)loop;
    (void)revents;

    if (p->inflight || p->finished)
        return;
    const char *argv[] = {"SCARD", p->ackkey};
    size_t argvlen[] = {5, strlen(p->ackkey)};
    p->inflight = 1;
    store_read(p->r->l->store, p->ackkey, argvlen[1], 2, argv, argvlen, on_count, p);
}

static void deadline_cb(struct ev_loop *loop, ev_timer *t, int revents)
{
    (void)loop;
    (void)revents;
    pub_finish(t->data);
}

static void on_published(void *arg, const struct store_result *res)
{
    struct pub *p = arg;

    p->inflight = 0;
    if (p->finished) {
        pub_free_if_done(p);
        return;
    }
    if (res->status != STORE_OK) {
        LOG_WARN("\"fleet reset not sent\" err=%s", res->err ? res->err : "redis down");
        pub_finish(p);
        return;
    }
    if (p->confirmed >= p->agents) {
        pub_finish(p);
        return;
    }
    ev_timer_start(p->r->l->loop, &p->count);
    ev_timer_start(p->r->l->loop, &p->deadline);
}

void limiter_resets_publish(struct limiter *l, const char *rule, const char *client_key,
                            size_t client_keylen, const char *redis_key, size_t redis_keylen,
                            limiter_fleet_cb *cb, void *arg)
{
    struct limiter_resets *r = l->resets;
    unsigned agents = atomic_load(&metrics.fleet_agents);
    struct pub *p = r && !r->stopped ? calloc(1, sizeof(*p)) : NULL;

    if (!p) {
        cb(arg, agents ? agents : 1, 1);
        return;
    }
    const char *self = store_agent_id(l->store);
    char id[RESET_MSG_ID_MAX + 1];
    snprintf(id, sizeof(id), "%.*s:%" PRIu64, RESET_MSG_ID_MAX - 24, self, ++r->counter);
    size_t cap = reset_msg_size(strlen(id), strlen(rule), client_keylen, redis_keylen);
    char *member = malloc(cap);
    if (!member || !reset_msg_format(member, cap, id, rule, client_key, client_keylen, redis_key,
                                     redis_keylen)) {
        free(member);
        free(p);
        cb(arg, agents ? agents : 1, 1);
        return;
    }
    p->r = r;
    p->cb = cb;
    p->arg = arg;
    p->agents = agents ? agents : 1;
    p->confirmed = 1;
    snprintf(p->ackkey, sizeof(p->ackkey), "%s:%s", r->key, id);
    ev_timer_init(&p->count, count_cb, RESET_COUNT_S, RESET_COUNT_S);
    p->count.data = p;
    ev_timer_init(&p->deadline, deadline_cb, RESET_WAIT_S, 0);
    p->deadline.data = p;
    p->next = r->pubs;
    r->pubs = p;
    p->inflight = 1;
    send_eval(r, publish_script, r->key, member, on_published, p);
    free(member);
}

void limiter_resets_stop(struct limiter_resets *r)
{
    if (!r)
        return;
    r->stopped = 1;
    ev_timer_stop(r->l->loop, &r->poll);
    while (r->pubs)
        pub_finish(r->pubs);
}

void limiter_resets_free(struct limiter_resets *r)
{
    free(r);
}
