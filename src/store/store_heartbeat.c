/* SPDX-License-Identifier: Apache-2.0 */
/* store_heartbeat.c - the fleet's heartbeats (see store_heartbeat.h). */
#include "store_heartbeat.h"

#include <ev.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/log.h"
#include "core/util.h"
#include "limits/fleet.h"
#include "metrics/metrics.h"
#include "store.h"

/* KEYS[1] the fleet's set, KEYS[2] its count of clean departures (same
 * slot), ARGV[1] this agent, ARGV[2] the live window in ms. Answers {the
 * agents live, the departures}. Redis' own clock, so that agents' clocks
 * need not agree. Before Redis 5, writing after TIME needs effects
 * replication (replicate_commands). */
static const char beat_script[] =
    "if redis.replicate_commands then redis.replicate_commands() end\n"
    "local t = redis.call('TIME')\n"
    "local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)\n"
    "local live = tonumber(ARGV[2])\n"
    "redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', string.format('(%d', now - live))\n"
    "redis.call('ZADD', KEYS[1], string.format('%d', now), ARGV[1])\n"
    "redis.call('PEXPIRE', KEYS[1], live)\n"
    "local left = tonumber(redis.call('GET', KEYS[2]) or '0') or 0\n"
    "if left > 0 then redis.call('PEXPIRE', KEYS[2], 30 * live) end\n"
    "return {redis.call('ZCARD', KEYS[1]), left}\n";

/* Leaving cleanly (SIGTERM): this agent's member goes, the departures go up
 * by one, so that the others' N follows at their next beat. */
static const char leave_script[] =
    "if redis.call('ZREM', KEYS[1], ARGV[1]) == 1 then\n"
    "  redis.call('INCR', KEYS[2])\n"
    "  redis.call('PEXPIRE', KEYS[2], 30 * tonumber(ARGV[2]))\n"
    "end\n"
    "return 1\n";

/* The window that keeps N must outlast an agent's absence from the set. */
_Static_assert(FLEET_WINDOW_US > 2ULL * STORE_HEARTBEAT_LIVE * 1000,
               "fleet window shorter than twice the heartbeat's liveness");

struct store_heartbeat {
    struct ev_loop *loop;
    struct store *s;
    ev_timer timer;
    int inflight;      /* one beat at a time */
    int stopped;       /* store_heartbeat_stop: no beat any more */
    unsigned last;     /* the count last logged */
    unsigned last_max; /* the fleet's N last logged */
    uint64_t up_us;    /* when Redis last came up (monotonic us), 0 never */
    char key[96];
    char left_key[112]; /* key's departures, in key's hash slot */
    char member[384];
};

/* A reply's element as a count: decimal digits alone, else -1. */
static int parse_count(const char *s, size_t len, uint64_t *out)
{
    uint64_t v = 0;

    if (!s || len == 0 || len > 18)
        return -1;
    for (size_t i = 0; i < len; i++) {
        if (s[i] < '0' || s[i] > '9')
            return -1;
        v = v * 10 + (uint64_t)(s[i] - '0');
    }
    *out = v;
    return 0;
}

static void on_beat(void *arg, const struct store_result *res)
{
    struct store_heartbeat *hb = arg;

    hb->inflight = 0;
    if (res->status == STORE_ERR)
        LOG_DEBUG("\"heartbeat failed\" err=%s", log_val(res->err ? res->err : "?"));
    if (res->status != STORE_OK || res->nstr != 2)
        return;
    uint64_t count, left;
    if (parse_count(res->str[0], res->str_len[0], &count) < 0 || count < 1 ||
        parse_count(res->str[1], res->str_len[1], &left) < 0)
        return;
    unsigned n = count > 1000000 ? 1000000 : (unsigned)count;
    uint64_t now = util_now_us();
    unsigned gone = fleet_set_left(left, n);
    /* Just after Redis came up the set may be filling again (it was lost, or
     * others have not beaten yet): such a count can raise N, never lower it. */
    int rebuilding = now - hb->up_us < STORE_HEARTBEAT_REBUILD_US;
    fleet_set_agents(n, now, rebuilding);
    unsigned max = fleet_agents();
    atomic_store(&metrics.fleet_agents, n);
    atomic_store(&metrics.fleet_agents_max, max);
    if (n != hb->last || max != hb->last_max)
        LOG_INFO("\"fleet size\" agents=%u max=%u left=%u", n, max, gone);
    hb->last = n;
    hb->last_max = max;
}

/* EVAL script over the set and its departures for this agent. */
static void send_script(struct store_heartbeat *hb, const char *script, store_cb *cb)
{
    char live[24];
    const char *argv[7];
    size_t argvlen[7];

    snprintf(live, sizeof(live), "%d", STORE_HEARTBEAT_LIVE);
    argv[0] = "EVAL";
    argv[1] = script;
    argv[2] = "2";
    argv[3] = hb->key;
    argv[4] = hb->left_key;
    argv[5] = hb->member;
    argv[6] = live;
    for (int i = 0; i < 7; i++)
        argvlen[i] = strlen(argv[i]);
    /* the callback may run before this returns (Redis down) */
    store_read(hb->s, hb->key, strlen(hb->key), 7, argv, argvlen, cb, hb);
}

/* Beat now (unless one is out, or Redis is down). */
static void beat(struct store_heartbeat *hb)
{
    if (hb->stopped || hb->inflight || !store_up(hb->s))
        return;
    hb->inflight = 1;
    send_script(hb, beat_script, on_beat);
}

static void on_leave(void *arg, const struct store_result *res)
{
    (void)arg;
    if (res->status != STORE_OK)
        LOG_DEBUG("\"fleet leave failed\" err=%s", log_val(res->err ? res->err : "?"));
}

static void timer_cb(struct ev_loop *loop, ev_timer *t, int revents)
{
    (void)loop;
    (void)revents;
    beat(t->data);
}

/* Redis just came up: the fleet's size at once, not a period later. */
static void on_state(void *arg, int up)
{
    struct store_heartbeat *hb = arg;

    if (!up)
        return;
    hb->up_us = util_now_us();
    beat(hb);
}

void store_heartbeat_rebuilding(struct store_heartbeat *hb)
{
    if (!hb)
        return;
    hb->up_us = util_now_us();
    beat(hb);
}

struct store_heartbeat *store_heartbeat_new(struct ev_loop *loop, struct store *s,
                                            const char *prefix, const char *listen)
{
    struct store_heartbeat *hb = calloc(1, sizeof(*hb));
    char host[128] = "agent";

    if (!hb)
        return NULL;
    hb->loop = loop;
    hb->s = s;
    gethostname(host, sizeof(host) - 1);
    snprintf(hb->key, sizeof(hb->key), "%sagents", prefix ? prefix : "");
    /* in key's slot on a Cluster: key's own hash tag, or key as the tag */
    const char *open = strchr(hb->key, '{'), *close = open ? strchr(open + 1, '}') : NULL;
    if (close && close > open + 1)
        snprintf(hb->left_key, sizeof(hb->left_key), "%s:left", hb->key);
    else
        snprintf(hb->left_key, sizeof(hb->left_key), "{%s}:left", hb->key);
    snprintf(hb->member, sizeof(hb->member), "host=%s pid=%d listen=%s", host, (int)getpid(),
             listen ? listen : "");
    ev_timer_init(&hb->timer, timer_cb, STORE_HEARTBEAT_EVERY, STORE_HEARTBEAT_EVERY);
    hb->timer.data = hb;
    ev_timer_start(loop, &hb->timer);
    store_on_state(s, on_state, hb);
    return hb;
}

void store_heartbeat_stop(struct store_heartbeat *hb)
{
    if (!hb)
        return;
    hb->stopped = 1;
    ev_timer_stop(hb->loop, &hb->timer);
}

void store_heartbeat_leave(struct store_heartbeat *hb)
{
    if (!hb || hb->stopped)
        return;
    store_heartbeat_stop(hb);
    if (store_up(hb->s))
        send_script(hb, leave_script, on_leave);
}

void store_heartbeat_free(struct store_heartbeat *hb)
{
    if (!hb)
        return;
    store_heartbeat_stop(hb);
    free(hb);
}
