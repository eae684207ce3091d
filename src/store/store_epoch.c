/* SPDX-License-Identifier: Apache-2.0 */
/* store_epoch.c - the keyspace's epoch, and its loss named (see store_epoch.h). */
#include "store_epoch.h"

#include <ev.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "core/log.h"
#include "core/util.h"
#include "core/warning.h"
#include "metrics/metrics.h"
#include "store.h"

/* KEYS[1] the epoch key, ARGV[1] a fresh id. Answers {1, ARGV[1]} when it
 * wrote it (there was none), else {0, the id there}. No expiry: the key
 * lives as long as the buckets it vouches for, through restarts with
 * persistence and failovers to replicas that have it. */
static const char epoch_script[] = "local cur = redis.call('GET', KEYS[1])\n"
                                   "if cur then return {0, cur} end\n"
                                   "redis.call('SET', KEYS[1], ARGV[1])\n"
                                   "return {1, ARGV[1]}\n";

/* One epoch key and the id remembered for it ("" until its first answer). */
struct epoch_mark {
    struct store_epoch *ep; /* a check's callback argument */
    char key[128];
    char known[STORE_EPOCH_ID_MAX + 1];
};

struct store_epoch {
    struct ev_loop *loop;
    struct store *s;
    ev_timer timer; /* every [redis] epoch_check */
    ev_timer clear; /* STORE_EPOCH_WARN_FOR after the last loss */
    void (*on_lost)(void *arg);
    void *arg;
    const struct store_epoch_names *names; /* which Redis: its warning, counter, words */
    unsigned pending; /* checks of this round still out: one round at a time */
    int stopped;
    /* this round's losses: how many marks, the first one's words */
    unsigned lost;
    int created;
    char lost_key[128], was[STORE_EPOCH_ID_MAX + 1], now[STORE_EPOCH_ID_MAX + 1];
    unsigned nmarks;
    struct epoch_mark marks[STORE_EPOCH_SPREAD];
};

enum store_epoch_verdict store_epoch_judge(const char *known, const char *cur, size_t cur_len)
{
    if (!known[0])
        return STORE_EPOCH_ADOPTED;
    if (strlen(known) == cur_len && memcmp(known, cur, cur_len) == 0)
        return STORE_EPOCH_SAME;
    return STORE_EPOCH_LOST;
}

/* Cluster: a key per 16384 / STORE_EPOCH_SPREAD slots, PREFIX "epoch{TAG}"
 * with TAG found so that the key's slot falls in its range, so that every
 * master holding that many slots in a row holds one. 0 when the prefix
 * keeps every key in one slot (a {hashtag}): then one key does. */
static int spread_marks(struct store_epoch *ep, const char *prefix)
{
    const unsigned range = 16384 / STORE_EPOCH_SPREAD;

    for (unsigned i = 0; i < STORE_EPOCH_SPREAD; i++) {
        struct epoch_mark *m = &ep->marks[i];
        unsigned n = 0;
        for (;; n++) {
            if (n == 100000)
                return 0;
            int len = snprintf(m->key, sizeof(m->key), "%sepoch{%u.%u}", prefix, i, n);
            if (len <= 0 || (size_t)len >= sizeof(m->key))
                return 0;
            if (util_redis_slot(m->key, (size_t)len) / range == i)
                break;
        }
    }
    return 1;
}

/* 32 hex digits from getrandom; the clock and pid if it fails. */
static void new_id(char *out, size_t outlen)
{
    unsigned char raw[16];

    if (getrandom(raw, sizeof(raw), GRND_NONBLOCK) != (ssize_t)sizeof(raw)) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        unsigned long long x = (unsigned long long)ts.tv_sec * 1000000007ull ^
                               (unsigned long long)ts.tv_nsec ^ (unsigned long long)getpid() << 32;
        memcpy(raw, &x, sizeof(x));
        memcpy(raw + 8, &x, sizeof(x));
    }
    for (size_t i = 0; i < sizeof(raw) && 2 * i + 2 < outlen; i++)
        snprintf(out + 2 * i, 3, "%02x", raw[i]);
}

/* [redis]: the agent's own keyspace. */
static const struct store_epoch_names redis_names = {
    WARNING_REDIS_STATE_LOST, &metrics.redis_state_lost, "redis state lost",
    "Redis lost the agent's keys",
    "Buckets restart full: up to one extra burst per key may be admitted; leases held were "
    "dropped."};

/* [global]: the global buckets of scope = global rules. */
const struct store_epoch_names store_epoch_global = {
    WARNING_GLOBAL_STATE_LOST, &metrics.global_state_lost, "global state lost",
    "The global Redis lost the global buckets",
    "They restart full while the regions still hold what they were granted: up to one "
    "extra burst per scope = global key may be admitted across the regions."};

/* A round found lost marks: one loss. */
static void lost(struct store_epoch *ep)
{
    const struct store_epoch_names *n = ep->names;

    atomic_fetch_add(n->counter, 1);
    LOG_WARN("\"%s\" key=%s epoch_was=%s epoch=\"%s\" by=%s keys_lost=%u keys=%u", n->log,
             log_val(ep->lost_key), log_val(ep->was), log_esc(ep->now, strlen(ep->now)),
             ep->created ? "this_agent" : "another_agent", ep->lost, ep->nmarks);
    warning_raise(n->kind,
                  "%s (the epoch key %s was %s): it restarted empty, was flushed "
                  "(FLUSHDB/FLUSHALL) or failed over to a replica without them. %s Enable "
                  "persistence (appendonly) and check failovers and replication.",
                  n->what, ep->lost_key, ep->created ? "gone" : "replaced", n->cost);
    ev_timer_stop(ep->loop, &ep->clear);
    ev_timer_set(&ep->clear, STORE_EPOCH_WARN_FOR, 0.);
    ev_timer_start(ep->loop, &ep->clear);
    if (ep->on_lost)
        ep->on_lost(ep->arg);
}

/* What one mark's answer says; a lost mark is noted for its round. */
static void judge_mark(struct store_epoch *ep, struct epoch_mark *m, int created, const char *cur,
                       size_t len)
{
    switch (store_epoch_judge(m->known, cur, len)) {
    case STORE_EPOCH_SAME:
        return;
    case STORE_EPOCH_ADOPTED:
        if (m != &ep->marks[0]) /* once, not once per Cluster key */
            break;
        LOG_INFO("\"redis epoch\" key=%s epoch=\"%s\" by=%s", log_val(m->key), log_esc(cur, len),
                 created ? "this_agent" : "another_agent");
        break;
    case STORE_EPOCH_LOST:
        if (ep->lost++ == 0) {
            ep->created = created;
            snprintf(ep->lost_key, sizeof(ep->lost_key), "%s", m->key);
            snprintf(ep->was, sizeof(ep->was), "%s", m->known);
            memcpy(ep->now, cur, len);
            ep->now[len] = '\0';
        }
        break;
    }
    memcpy(m->known, cur, len);
    m->known[len] = '\0';
}

static void on_reply(void *arg, const struct store_result *res)
{
    struct epoch_mark *m = arg;
    struct store_epoch *ep = m->ep;

    if (res->status == STORE_ERR)
        LOG_DEBUG("\"epoch check failed\" key=%s err=%s", log_val(m->key),
                  log_val(res->err ? res->err : "?"));
    if (res->status == STORE_OK && res->nstr == 2 && res->str_len[1] > 0 &&
        res->str_len[1] <= STORE_EPOCH_ID_MAX)
        judge_mark(ep, m, res->str_len[0] == 1 && res->str[0][0] == '1', res->str[1],
                   res->str_len[1]);
    if (--ep->pending > 0)
        return;
    if (ep->lost > 0 && !ep->stopped)
        lost(ep);
}

/* A round: every mark checked now (unless a round is out, or Redis is down). */
static void check(struct store_epoch *ep)
{
    char id[STORE_EPOCH_ID_MAX + 1] = "";
    const char *argv[5];
    size_t argvlen[5];

    if (ep->stopped || ep->pending || !store_up(ep->s))
        return;
    ep->lost = 0;
    ep->pending = ep->nmarks;
    for (unsigned i = 0; i < ep->nmarks; i++) {
        struct epoch_mark *m = &ep->marks[i];
        new_id(id, sizeof(id));
        argv[0] = "EVAL";
        argv[1] = epoch_script;
        argv[2] = "1";
        argv[3] = m->key;
        argv[4] = id;
        for (int k = 0; k < 5; k++)
            argvlen[k] = strlen(argv[k]);
        /* the callback may run before this returns (Redis down): pending
         * counts it already */
        store_read(ep->s, m->key, strlen(m->key), 5, argv, argvlen, on_reply, m);
    }
}

static void timer_cb(struct ev_loop *loop, ev_timer *t, int revents)
{
    (void)loop;
    (void)revents;
    check(t->data);
}

static void clear_cb(struct ev_loop *loop, ev_timer *t, int revents)
{
    (void)loop;
    (void)revents;
    warning_clear(((struct store_epoch *)t->data)->names->kind);
}

/* Redis just came up (perhaps restarted, perhaps another master): check at
 * once, not a period later. */
static void on_state(void *arg, int up)
{
    if (up)
        check(arg);
}

struct store_epoch *store_epoch_new(struct ev_loop *loop, struct store *s, const char *prefix,
                                    double every, void (*on_lost)(void *arg), void *arg)
{
    return store_epoch_new_as(loop, s, prefix, every, &redis_names, on_lost, arg);
}

struct store_epoch *store_epoch_new_as(struct ev_loop *loop, struct store *s, const char *prefix,
                                       double every, const struct store_epoch_names *names,
                                       void (*on_lost)(void *arg), void *arg)
{
    struct store_epoch *ep = calloc(1, sizeof(*ep));

    if (!ep)
        return NULL;
    ep->loop = loop;
    ep->s = s;
    ep->names = names;
    ep->on_lost = on_lost;
    ep->arg = arg;
    if (!prefix)
        prefix = "";
    ep->nmarks = store_clustered(s) && spread_marks(ep, prefix) ? STORE_EPOCH_SPREAD : 1;
    if (ep->nmarks == 1)
        snprintf(ep->marks[0].key, sizeof(ep->marks[0].key), "%sepoch", prefix);
    for (unsigned i = 0; i < ep->nmarks; i++)
        ep->marks[i].ep = ep;
    ev_timer_init(&ep->timer, timer_cb, every, every);
    ep->timer.data = ep;
    ev_timer_start(loop, &ep->timer);
    ev_timer_init(&ep->clear, clear_cb, STORE_EPOCH_WARN_FOR, 0.);
    ep->clear.data = ep;
    store_on_state(s, on_state, ep);
    return ep;
}

void store_epoch_stop(struct store_epoch *ep)
{
    if (!ep)
        return;
    ep->stopped = 1;
    ev_timer_stop(ep->loop, &ep->timer);
    ev_timer_stop(ep->loop, &ep->clear);
}

void store_epoch_free(struct store_epoch *ep)
{
    if (!ep)
        return;
    store_epoch_stop(ep);
    free(ep);
}
