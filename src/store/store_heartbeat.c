/* SPDX-License-Identifier: Apache-2.0 */
/* store_heartbeat.c - the fleet's heartbeats (see store_heartbeat.h). */
#include "store_heartbeat.h"

#include <ev.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "autoconfig.h"

#include "core/log.h"
#include "core/util.h"
#include "limits/fleet.h"
#include "metrics/metrics.h"
#include "store.h"

/* KEYS[1] the fleet's set, KEYS[2] its count of clean departures, KEYS[3]
 * the agents' rows (a hash, member -> row; all three in one slot), ARGV[1]
 * this agent, ARGV[2] the live window in ms, ARGV[3] this agent's row (its
 * counters, STORE_HEARTBEAT_ROW_MAX bytes at most), ARGV[4] the most rows
 * to answer. Answers {the agents live, the departures, Redis' time in ms,
 * then member, last beat (ms), row for each of the most recent live agents
 * with a row}: at most STORE_HEARTBEAT_ROWS rows of at most
 * STORE_HEARTBEAT_ROW_MAX bytes, whatever another agent wrote. Redis' own
 * clock, so that agents' clocks need not agree. Before Redis 5, writing
 * after TIME needs effects replication (replicate_commands). */
static const char beat_script[] =
    "if redis.replicate_commands then redis.replicate_commands() end\n"
    "local t = redis.call('TIME')\n"
    "local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)\n"
    "local live = tonumber(ARGV[2])\n"
    "local old = string.format('(%d', now - live)\n"
    "local gone = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', old, 'LIMIT', 0, 1000)\n"
    "if #gone > 0 then redis.call('HDEL', KEYS[3], unpack(gone)) end\n"
    "redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', old)\n"
    "redis.call('ZADD', KEYS[1], string.format('%d', now), ARGV[1])\n"
    "redis.call('PEXPIRE', KEYS[1], live)\n"
    "redis.call('HSET', KEYS[3], ARGV[1], ARGV[3])\n"
    "redis.call('PEXPIRE', KEYS[3], live)\n"
    "local left = tonumber(redis.call('GET', KEYS[2]) or '0') or 0\n"
    "if left > 0 then redis.call('PEXPIRE', KEYS[2], 30 * live) end\n"
    "local out = {redis.call('ZCARD', KEYS[1]), left, now}\n"
    "local m = redis.call('ZREVRANGE', KEYS[1], 0, tonumber(ARGV[4]) - 1, 'WITHSCORES')\n"
    "for i = 1, #m, 2 do\n"
    "  local row = redis.call('HGET', KEYS[3], m[i])\n"
    "  if row and #row <= " STORE_HEARTBEAT_ROW_MAX_S " and #m[i] <= 400 then\n"
    "    out[#out + 1] = m[i]; out[#out + 1] = m[i + 1]; out[#out + 1] = row\n"
    "  end\n"
    "end\n"
    "return out\n";

/* Leaving cleanly (SIGTERM): this agent's member and row go, the
 * departures go up by one, so that the others' N follows at their next
 * beat. */
static const char leave_script[] = "redis.call('HDEL', KEYS[3], ARGV[1])\n"
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
    uint64_t started_unix;
    char key[96];
    char left_key[112];  /* key's departures, in key's hash slot */
    char stats_key[112]; /* the agents' rows, in key's hash slot */
    char member[384];
    char host[128];
    char listen[128];
    /* the last beat's rows (store_heartbeat_rows): rows[i]'s strings point
     * into text; beat_us: when that reply came (monotonic us) */
    struct store_heartbeat_row *rows;
    size_t nrows;
    char *text;
    uint64_t redis_now_ms, beat_us;
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

/* A string for the row's JSON: printable ASCII but '"' and '\\', others as
 * '?' (a hostname or an address: nothing to escape in practice). */
static void json_safe(char *out, size_t cap, const char *in)
{
    size_t i = 0;

    for (; in && *in && i + 1 < cap; in++)
        out[i++] = (*in >= 0x20 && *in < 0x7f && *in != '"' && *in != '\\') ? *in : '?';
    out[i] = '\0';
}

/* This agent's row: what the fleet table shows of it, from the counters. */
static void make_row(const struct store_heartbeat *hb, char *out, size_t cap)
{
    uint64_t decisions = 0, blocked = 0, would = 0, degraded = 0, expired = 0;
    int64_t held = 0;

    for (struct metrics_rule *r = metrics_rules(); r; r = r->next) {
        uint64_t b = metrics_ld(&r->blocked), w = metrics_ld(&r->would_block);
        decisions += metrics_ld(&r->allowed) + b + w;
        blocked += b;
        would += w;
        degraded += metrics_ld(&r->degraded);
        held += atomic_load_explicit(&r->slots_held, memory_order_relaxed);
        expired += metrics_ld(&r->slots_expired);
    }
    snprintf(out, cap,
             "{\"host\":\"%s\",\"pid\":%d,\"listen\":\"%s\",\"version\":\"%s\","
             "\"started_unix\":%llu,\"decisions\":%llu,\"blocked\":%llu,\"would_block\":%llu,"
             "\"degraded\":%llu,\"notifies\":%llu,\"redis_errors\":%llu,"
             "\"rules_version\":%llu,\"redis_up\":%d,\"entries\":%llu,\"evictions\":%llu,"
             "\"slots_held\":%lld,\"slots_expired\":%llu}",
             hb->host, (int)getpid(), hb->listen, PACKAGE_VERSION,
             (unsigned long long)hb->started_unix, (unsigned long long)decisions,
             (unsigned long long)blocked, (unsigned long long)would, (unsigned long long)degraded,
             (unsigned long long)metrics_ld(&metrics.frames_in[METRICS_FRAME_NOTIFY]),
             (unsigned long long)metrics_ld(&metrics.redis_errors),
             (unsigned long long)metrics_ld(&metrics.rules_version),
             atomic_load_explicit(&metrics.redis_up, memory_order_relaxed) ? 1 : 0,
             (unsigned long long)(metrics_ld(&metrics.buckets) +
                                  (uint64_t)atomic_load_explicit(&metrics.lease_keys,
                                                                 memory_order_relaxed)),
             (unsigned long long)metrics_ld(&metrics.evictions), (long long)held,
             (unsigned long long)expired);
}

/* Keep the beat's rows: {count, left, now, then member, seen, row ...}, in
 * one copy. Out of memory: the last rows stay. */
static void keep_rows(struct store_heartbeat *hb, const struct store_result *res)
{
    uint64_t now_ms;
    size_t n = (res->nstr - 3) / 3, bytes = 0;

    if (parse_count(res->str[2], res->str_len[2], &now_ms) < 0)
        return;
    if (n > STORE_HEARTBEAT_ROWS)
        n = STORE_HEARTBEAT_ROWS;
    for (size_t i = 0; i < 3 * n; i++)
        bytes += res->str_len[3 + i] + 1;
    struct store_heartbeat_row *rows = calloc(n ? n : 1, sizeof(*rows));
    char *text = malloc(bytes ? bytes : 1), *p = text;
    if (!rows || !text) {
        free(rows);
        free(text);
        return;
    }
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        const size_t at = 3 + 3 * i;
        uint64_t seen;
        if (parse_count(res->str[at + 1], res->str_len[at + 1], &seen) < 0)
            continue;
        rows[k].seen_ms = seen;
        rows[k].member = p;
        memcpy(p, res->str[at], res->str_len[at]);
        p += res->str_len[at];
        *p++ = '\0';
        rows[k].row = p;
        rows[k].row_len = res->str_len[at + 2];
        memcpy(p, res->str[at + 2], res->str_len[at + 2]);
        p += res->str_len[at + 2];
        *p++ = '\0';
        rows[k].self = strcmp(rows[k].member, hb->member) == 0;
        k++;
    }
    free(hb->rows);
    free(hb->text);
    hb->rows = rows;
    hb->text = text;
    hb->nrows = k;
    hb->redis_now_ms = now_ms;
    hb->beat_us = util_now_us();
}

static void on_beat(void *arg, const struct store_result *res)
{
    struct store_heartbeat *hb = arg;

    hb->inflight = 0;
    if (res->status == STORE_ERR)
        LOG_DEBUG("\"heartbeat failed\" err=%s", log_val(res->err ? res->err : "?"));
    if (res->status != STORE_OK || res->nstr < 3)
        return;
    keep_rows(hb, res);
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

/* EVAL script over the set, its departures and the rows for this agent. */
static void send_script(struct store_heartbeat *hb, const char *script, store_cb *cb)
{
    char live[24], max[24], row[STORE_HEARTBEAT_ROW_MAX];
    const char *argv[10];
    size_t argvlen[10];

    snprintf(live, sizeof(live), "%d", STORE_HEARTBEAT_LIVE);
    snprintf(max, sizeof(max), "%d", STORE_HEARTBEAT_ROWS);
    make_row(hb, row, sizeof(row));
    argv[0] = "EVAL";
    argv[1] = script;
    argv[2] = "3";
    argv[3] = hb->key;
    argv[4] = hb->left_key;
    argv[5] = hb->stats_key;
    argv[6] = hb->member;
    argv[7] = live;
    argv[8] = row;
    argv[9] = max;
    for (int i = 0; i < 10; i++)
        argvlen[i] = strlen(argv[i]);
    /* the callback may run before this returns (Redis down) */
    store_read(hb->s, hb->key, strlen(hb->key), 10, argv, argvlen, cb, hb);
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
    hb->started_unix = (uint64_t)time(NULL);
    gethostname(host, sizeof(host) - 1);
    json_safe(hb->host, sizeof(hb->host), host);
    json_safe(hb->listen, sizeof(hb->listen), listen);
    snprintf(hb->key, sizeof(hb->key), "%sagents", prefix ? prefix : "");
    /* in key's slot on a Cluster: key's own hash tag, or key as the tag */
    const char *open = strchr(hb->key, '{'), *close = open ? strchr(open + 1, '}') : NULL;
    if (close && close > open + 1) {
        snprintf(hb->left_key, sizeof(hb->left_key), "%s:left", hb->key);
        snprintf(hb->stats_key, sizeof(hb->stats_key), "%s:stats", hb->key);
    } else {
        snprintf(hb->left_key, sizeof(hb->left_key), "{%s}:left", hb->key);
        snprintf(hb->stats_key, sizeof(hb->stats_key), "{%s}:stats", hb->key);
    }
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
    free(hb->rows);
    free(hb->text);
    free(hb);
}

uint64_t store_heartbeat_beat(const struct store_heartbeat *hb)
{
    return hb ? hb->beat_us : 0;
}

size_t store_heartbeat_rows(const struct store_heartbeat *hb,
                            const struct store_heartbeat_row **rows, uint64_t *age_ms)
{
    if (!hb || !hb->beat_us) {
        *rows = NULL;
        *age_ms = UINT64_MAX;
        return 0;
    }
    *rows = hb->rows;
    *age_ms = (util_now_us() - hb->beat_us) / 1000;
    for (size_t i = 0; i < hb->nrows; i++) /* as of the beat, in Redis' clock */
        hb->rows[i].ago_ms =
            hb->redis_now_ms > hb->rows[i].seen_ms ? hb->redis_now_ms - hb->rows[i].seen_ms : 0;
    return hb->nrows;
}
