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

struct store_epoch {
    struct ev_loop *loop;
    struct store *s;
    ev_timer timer; /* every STORE_EPOCH_EVERY */
    ev_timer clear; /* STORE_EPOCH_WARN_FOR after the last loss */
    void (*on_lost)(void *arg);
    void *arg;
    int inflight; /* one check at a time */
    int stopped;
    char known[STORE_EPOCH_ID_MAX + 1]; /* "" until the first answer */
    char key[96];
};

enum store_epoch_verdict store_epoch_judge(const char *known, const char *cur, size_t cur_len)
{
    if (!known[0])
        return STORE_EPOCH_ADOPTED;
    if (strlen(known) == cur_len && memcmp(known, cur, cur_len) == 0)
        return STORE_EPOCH_SAME;
    return STORE_EPOCH_LOST;
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

static void lost(struct store_epoch *ep, int created, const char *cur, size_t cur_len)
{
    atomic_fetch_add(&metrics.redis_state_lost, 1);
    LOG_WARN("\"redis state lost\" key=%s epoch_was=%s epoch=\"%s\" by=%s", log_val(ep->key),
             log_val(ep->known), log_esc(cur, cur_len), created ? "this_agent" : "another_agent");
    warning_raise(WARNING_REDIS_STATE_LOST,
                  "Redis lost the agent's keys (the epoch key %s was %s): it restarted empty, "
                  "was flushed (FLUSHDB/FLUSHALL) or failed over to a replica without them. "
                  "Buckets restart full: up to one extra burst per key may be admitted; leases "
                  "held were dropped. Enable persistence (appendonly) and check failovers "
                  "and replication.",
                  ep->key, created ? "gone" : "replaced");
    ev_timer_stop(ep->loop, &ep->clear);
    ev_timer_set(&ep->clear, STORE_EPOCH_WARN_FOR, 0.);
    ev_timer_start(ep->loop, &ep->clear);
    if (ep->on_lost)
        ep->on_lost(ep->arg);
}

static void on_reply(void *arg, const struct store_result *res)
{
    struct store_epoch *ep = arg;

    ep->inflight = 0;
    if (res->status == STORE_ERR)
        LOG_DEBUG("\"epoch check failed\" err=%s", log_val(res->err ? res->err : "?"));
    if (res->status != STORE_OK || res->nstr != 2 || res->str_len[1] == 0 ||
        res->str_len[1] > STORE_EPOCH_ID_MAX)
        return;
    int created = res->str_len[0] == 1 && res->str[0][0] == '1';
    const char *cur = res->str[1];
    size_t len = res->str_len[1];

    switch (store_epoch_judge(ep->known, cur, len)) {
    case STORE_EPOCH_SAME:
        return;
    case STORE_EPOCH_ADOPTED:
        LOG_INFO("\"redis epoch\" key=%s epoch=\"%s\" by=%s", log_val(ep->key),
                 log_esc(cur, len), created ? "this_agent" : "another_agent");
        break;
    case STORE_EPOCH_LOST:
        if (!ep->stopped)
            lost(ep, created, cur, len);
        break;
    }
    memcpy(ep->known, cur, len);
    ep->known[len] = '\0';
}

/* Check now (unless one is out, or Redis is down). */
static void check(struct store_epoch *ep)
{
    char id[STORE_EPOCH_ID_MAX + 1] = "";
    const char *argv[5];
    size_t argvlen[5];

    if (ep->stopped || ep->inflight || !store_up(ep->s))
        return;
    new_id(id, sizeof(id));
    argv[0] = "EVAL";
    argv[1] = epoch_script;
    argv[2] = "1";
    argv[3] = ep->key;
    argv[4] = id;
    for (int i = 0; i < 5; i++)
        argvlen[i] = strlen(argv[i]);
    ep->inflight = 1;
    /* the callback may run before this returns (Redis down) */
    store_read(ep->s, ep->key, strlen(ep->key), 5, argv, argvlen, on_reply, ep);
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
    (void)t;
    (void)revents;
    warning_clear(WARNING_REDIS_STATE_LOST);
}

/* Redis just came up (perhaps restarted, perhaps another master): check at
 * once, not a period later. */
static void on_state(void *arg, int up)
{
    if (up)
        check(arg);
}

struct store_epoch *store_epoch_new(struct ev_loop *loop, struct store *s, const char *prefix,
                                    void (*on_lost)(void *arg), void *arg)
{
    struct store_epoch *ep = calloc(1, sizeof(*ep));

    if (!ep)
        return NULL;
    ep->loop = loop;
    ep->s = s;
    ep->on_lost = on_lost;
    ep->arg = arg;
    snprintf(ep->key, sizeof(ep->key), "%sepoch", prefix ? prefix : "");
    ev_timer_init(&ep->timer, timer_cb, STORE_EPOCH_EVERY, STORE_EPOCH_EVERY);
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
