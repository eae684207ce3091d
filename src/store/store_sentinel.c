/* SPDX-License-Identifier: Apache-2.0 */
/* store_sentinel.c - master discovery through Redis Sentinel (see
 * store_sentinel.h). The connection to the master itself is store.c's. */
#include "store_sentinel.h"

#include <ev.h>
#include <hiredis/hiredis.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "core/net.h"
#include "metrics/metrics.h"
#include "store_probe.h"
#include "store_why.h"

#define RECHECK_EVERY 1.0 /* seconds between background questions */
#define HOST_MAX 256

struct store_sentinel {
    struct ev_loop *loop;
    struct store_probe *probe;
    struct net_hostport *sentinels;
    size_t nsentinels;
    char *master;
    store_sentinel_cb *cb;
    void *arg;
    ev_timer recheck;
    ev_timer window; /* store_sentinel_watch: restarted by every answer */
    store_sentinel_lost_cb *lost;
    uint64_t window_us;
    int want_timing;     /* a master (again): ask its down-after-milliseconds next */
    int failing;         /* the last walk found nothing (log once per streak) */
    char host[HOST_MAX]; /* the last answer, "" before the first */
    int port;
    char logged[HOST_MAX + 8]; /* the address last logged */
};

/* SENTINEL get-master-addr-by-name answers [ip, port], or nil when the
 * master is unknown to that sentinel. */
static int accept_reply(void *arg, const struct redisReply *r, const char *host, int port)
{
    struct store_sentinel *sn = arg;
    const redisReply *reply = (const redisReply *)r;
    long p;
    char *end;

    if (reply->type != REDIS_REPLY_ARRAY || reply->elements != 2 ||
        reply->element[0]->type != REDIS_REPLY_STRING ||
        reply->element[1]->type != REDIS_REPLY_STRING || reply->element[0]->len == 0 ||
        reply->element[0]->len >= HOST_MAX) {
        LOG_DEBUG("\"sentinel does not know the master\" sentinel=%s:%d master=%s", log_val(host),
                  port, log_val(sn->master));
        return 0;
    }
    p = strtol(reply->element[1]->str, &end, 10);
    if (*end || p <= 0 || p > 65535)
        return 0;
    memcpy(sn->host, reply->element[0]->str, reply->element[0]->len + 1);
    sn->port = (int)p;
    return 1;
}

static void on_done(void *arg, int ok)
{
    struct store_sentinel *sn = arg;
    char addr[sizeof(sn->logged)];

    if (!ok) {
        const char *why = store_probe_last_error(sn->probe);
        store_why_note("sentinels", why);
        if (!sn->failing)
            LOG_WARN("\"no sentinel knows the master\" master=%s sentinels=%zu last_err=\"%s\"",
                     log_val(sn->master), sn->nsentinels, log_esc(why, strlen(why)));
        sn->failing = 1;
        sn->cb(sn->arg, NULL, 0);
        return;
    }
    sn->failing = 0;
    if (sn->lost) /* confirmed: the window starts again */
        ev_timer_again(sn->loop, &sn->window);
    snprintf(addr, sizeof(addr), strchr(sn->host, ':') ? "[%s]:%d" : "%s:%d", sn->host, sn->port);
    if (strcmp(addr, sn->logged) != 0) {
        sn->want_timing = sn->lost != NULL;
        LOG_INFO("\"redis master\" master=%s addr=%s", log_val(sn->master), log_val(addr));
        if (sn->logged[0]) /* not the first answer: the sentinels chose another master */
            METRIC_INC(redis_failovers);
        memcpy(sn->logged, addr, sizeof(addr));
    }
    sn->cb(sn->arg, sn->host, sn->port);
}

static void ask(struct store_sentinel *sn)
{
    const char *argv[3] = {"SENTINEL", "get-master-addr-by-name", sn->master};

    if (store_probe_running(sn->probe))
        return;
    store_probe_optional(sn->probe, 0);
    if (store_probe_start(sn->probe, sn->sentinels, sn->nsentinels, 3, argv, accept_reply, on_done,
                          sn) < 0)
        sn->cb(sn->arg, NULL, 0); /* out of memory: the caller retries later */
}

/* SENTINEL MASTER <name> answers field, value, field, value... (RESP2):
 * the value of name, NULL when absent. */
static const char *field_str(const redisReply *r, const char *name)
{
    for (size_t i = 0; r->type == REDIS_REPLY_ARRAY && i + 1 < r->elements; i += 2) {
        const redisReply *k = r->element[i], *v = r->element[i + 1];
        if (k->type == REDIS_REPLY_STRING && v->type == REDIS_REPLY_STRING &&
            strcmp(k->str, name) == 0)
            return v->str;
    }
    return NULL;
}

static long long field(const redisReply *r, const char *name)
{
    const char *v = field_str(r, name);

    return v ? strtoll(v, NULL, 10) : -1;
}

static int accept_timing(void *arg, const struct redisReply *r, const char *host, int port)
{
    struct store_sentinel *sn = arg;
    long long down_ms = field((const redisReply *)r, "down-after-milliseconds");
    long long failover_ms = field((const redisReply *)r, "failover-timeout");
    const char *ip = field_str((const redisReply *)r, "ip");

    if (down_ms <= 0)
        return 0;
    /* it names the master we use: a confirmation as good as the usual one
     * (not past the window: the usual answer ends that, and tells the owner) */
    if (ip && strcmp(ip, sn->host) == 0 && field((const redisReply *)r, "port") == sn->port &&
        ev_is_active(&sn->window))
        ev_timer_again(sn->loop, &sn->window);
    /* The sentinels start a failover down_ms after they lost the master:
     * an agent cut from them must have stopped writing to it by then. */
    if (sn->window_us >= (uint64_t)down_ms * 1000)
        LOG_WARN("\"[redis] sentinel_window is not shorter than the sentinels' "
                 "down-after-milliseconds: an agent cut from them may still write to the old "
                 "master when they promote a replica; lower sentinel_window\" master=%s "
                 "sentinel=%s:%d sentinel_window_ms=%llu down_after_ms=%lld "
                 "failover_timeout_ms=%lld",
                 log_val(sn->master), log_val(host), port,
                 (unsigned long long)(sn->window_us / 1000), down_ms, failover_ms);
    else
        LOG_DEBUG("\"sentinel timing\" master=%s down_after_ms=%lld failover_timeout_ms=%lld",
                  log_val(sn->master), down_ms, failover_ms);
    return 1;
}

static void timing_done(void *arg, int ok)
{
    struct store_sentinel *sn = arg;

    if (!ok) /* (an ACL without SENTINEL MASTER: not checked, not asked again) */
        LOG_DEBUG("\"sentinel timing not read\" master=%s err=\"%s\"", log_val(sn->master),
                  store_probe_last_error(sn->probe));
    ask(sn); /* the question it took the place of (the owner may be waiting) */
}

/* Every second: where the master is; once per master, in its place, how
 * long the sentinels wait before a failover (checked against the window). */
static void recheck_cb(struct ev_loop *loop, ev_timer *t, int revents)
{
    struct store_sentinel *sn = t->data;
    const char *argv[3] = {"SENTINEL", "MASTER", sn->master};

    if (!sn->want_timing || store_probe_running(sn->probe)) {
        ask(sn);
        return;
    }
    sn->want_timing = 0;
    store_probe_optional(sn->probe, 1);
    store_probe_start(sn->probe, sn->sentinels, sn->nsentinels, 3, argv, accept_timing, timing_done,
                      sn);
}

static void window_cb(struct ev_loop *loop, ev_timer *t, int revents)
{
    struct store_sentinel *sn = t->data;

    ev_timer_stop(loop, t); /* until the next answer */
    sn->lost(sn->arg);
}

void store_sentinel_watch(struct store_sentinel *sn, uint64_t window_us,
                          store_sentinel_lost_cb *lost)
{
    sn->lost = lost;
    sn->window_us = window_us;
    ev_timer_stop(sn->loop, &sn->window);
    ev_timer_set(&sn->window, 0., (double)window_us / 1e6);
}

void store_sentinel_resolve(struct store_sentinel *sn)
{
    if (!ev_is_active(&sn->recheck))
        ev_timer_again(sn->loop, &sn->recheck);
    ask(sn);
}

struct store_sentinel *store_sentinel_new(struct ev_loop *loop, uint64_t timeout_us,
                                          const struct net_hostport *sentinels, size_t n,
                                          const char *master, const struct store_auth *auth,
                                          store_sentinel_cb *cb, void *arg, char *err,
                                          size_t errlen)
{
    struct store_sentinel *sn = calloc(1, sizeof(*sn));

    if (!sn) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    sn->loop = loop;
    sn->cb = cb;
    sn->arg = arg;
    ev_timer_init(&sn->recheck, recheck_cb, 0., RECHECK_EVERY);
    sn->recheck.data = sn;
    ev_timer_init(&sn->window, window_cb, 0., 5.);
    sn->window.data = sn;
    if (!master || !*master) {
        snprintf(err, errlen, "redis: sentinel needs master = NAME");
        goto fail;
    }
    if (n == 0) {
        snprintf(err, errlen, "redis: empty address list");
        goto fail;
    }
    sn->sentinels = malloc(n * sizeof(*sn->sentinels));
    sn->master = strdup(master);
    sn->probe = store_probe_new(loop, timeout_us, auth);
    if (!sn->sentinels || !sn->master || !sn->probe) {
        snprintf(err, errlen, "out of memory");
        goto fail;
    }
    memcpy(sn->sentinels, sentinels, n * sizeof(*sn->sentinels));
    sn->nsentinels = n;
    return sn;
fail:
    store_sentinel_free(sn);
    return NULL;
}

void store_sentinel_free(struct store_sentinel *sn)
{
    if (!sn)
        return;
    ev_timer_stop(sn->loop, &sn->recheck);
    ev_timer_stop(sn->loop, &sn->window);
    store_probe_free(sn->probe);
    free(sn->sentinels);
    free(sn->master);
    free(sn);
}
