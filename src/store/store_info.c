/* SPDX-License-Identifier: Apache-2.0 */
/* store_info.c - INFO polling for eviction (see store_info.h). */
#include "store_info.h"

#include <ev.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "core/warning.h"
#include "metrics/metrics.h"
#include "store_conn.h"

#define POLL_EVERY 60.0 /* seconds between two INFO of one server */
#define NAME_MAX_LEN 128

/* One server, by the name of its connection ("host:port" or a path). Kept
 * once seen, so that a reconnect does not repeat the warning. */
struct server {
    char name[NAME_MAX_LEN];
    int gate;    /* asked at connect, no answer yet */
    int known;   /* answered at least once */
    int evicts;  /* the last answer: store_info_can_evict() */
    int warned;  /* the eviction warning was logged */
    int blocked; /* the require_noeviction error was logged */
    uint64_t evicted_keys;
    int has_evicted;
    uint64_t maxmemory; /* the last answer's, for the warning's message */
    char policy[32];
};

struct store_info {
    struct ev_loop *loop;
    ev_timer timer;
    int require;
    void (*poll)(void *arg);
    void (*changed)(void *arg);
    void *arg;
    struct server *srv;
    size_t n, cap;
    int denied_logged; /* INFO refused: said once */
};

/* The record an INFO call carries: the store_info and the server's name
 * (the server table may grow, moving the servers, before the reply). */
struct ask {
    struct store_info *si;
    char name[NAME_MAX_LEN];
};

static struct server *server_get(struct store_info *si, const char *name)
{
    for (size_t i = 0; i < si->n; i++)
        if (strcmp(si->srv[i].name, name) == 0)
            return &si->srv[i];
    if (si->n == si->cap) {
        size_t cap = si->cap ? si->cap * 2 : 4;
        struct server *grown = realloc(si->srv, cap * sizeof(*grown));
        if (!grown)
            return NULL;
        si->srv = grown;
        si->cap = cap;
    }
    struct server *s = &si->srv[si->n++];
    memset(s, 0, sizeof(*s));
    snprintf(s->name, sizeof(s->name), "%s", name);
    return s;
}

/* The gauges from every server's last answer, and the warning
 * redis_may_evict (core/warning.h) naming the first server that can evict
 * and what to change on it. */
static void publish(struct store_info *si)
{
    const struct server *first = NULL;
    size_t possible = 0;
    uint64_t evicted = 0;

    for (size_t i = 0; i < si->n; i++) {
        if (si->srv[i].known && si->srv[i].evicts && !possible++)
            first = &si->srv[i];
        evicted += si->srv[i].evicted_keys;
    }
    atomic_store(&metrics.redis_eviction_possible, possible > 0);
    atomic_store(&metrics.redis_evicted_keys, evicted);
    if (!first) {
        warning_clear(WARNING_REDIS_MAY_EVICT);
        return;
    }
    warning_raise(WARNING_REDIS_MAY_EVICT,
                  "Redis %s%s has maxmemory %" PRIu64 " and maxmemory-policy %s: under memory "
                  "pressure it evicts the agent's buckets, which come back full and admit more "
                  "than the limit. Set maxmemory-policy noeviction there (CONFIG SET and "
                  "redis.conf), or [redis] require_noeviction = yes to treat it as down",
                  first->name, possible > 1 ? " (and others)" : "", first->maxmemory,
                  first->policy);
}

static void judge(struct store_info *si, struct server *s, const struct store_info_mem *m)
{
    int evicts = store_info_can_evict(m);

    if (evicts && !s->warned) {
        LOG_WARN("\"redis can evict the agent's keys: an evicted bucket comes back full and "
                 "admits more than its limit\" addr=%s maxmemory=%" PRIu64
                 " maxmemory_policy=%s hint=\"maxmemory-policy noeviction, or more maxmemory\"",
                 log_val(s->name), m->maxmemory, log_val(m->policy));
        s->warned = 1;
    } else if (!evicts && s->warned) {
        LOG_INFO("\"redis no longer evicts\" addr=%s maxmemory=%" PRIu64 " maxmemory_policy=%s",
                 log_val(s->name), m->maxmemory, log_val(m->policy));
        s->warned = 0;
    }
    if (si->require && evicts && !s->blocked) {
        LOG_ERROR("\"redis treated as down: its maxmemory-policy can evict the agent's keys and "
                  "[redis] require_noeviction = yes\" addr=%s maxmemory=%" PRIu64
                  " maxmemory_policy=%s",
                  log_val(s->name), m->maxmemory, log_val(m->policy));
        s->blocked = 1;
    } else if (!evicts && s->blocked) {
        s->blocked = 0;
    }
    if (m->has_evicted) {
        if (s->has_evicted && m->evicted_keys > s->evicted_keys)
            LOG_WARN("\"redis evicted keys\" addr=%s evicted_keys=%" PRIu64 " new=%" PRIu64,
                     log_val(s->name), m->evicted_keys, m->evicted_keys - s->evicted_keys);
        s->evicted_keys = m->evicted_keys;
        s->has_evicted = 1;
    }
    s->known = 1;
    s->evicts = evicts;
    s->maxmemory = m->maxmemory;
    snprintf(s->policy, sizeof(s->policy), "%s", m->policy);
}

static void on_info(void *arg, const struct store_result *res)
{
    struct ask *a = arg;
    struct store_info *si = a->si;
    struct server *s = server_get(si, a->name);
    int was_ok = store_info_ok(si);

    if (!s) {
        free(a);
        return;
    }
    if (res->status == STORE_OK && res->nstr == 1) {
        struct store_info_mem m;
        store_info_parse(res->str[0], res->str_len[0], &m);
        judge(si, s, &m);
    } else if (res->status == STORE_ERR) {
        /* NOPERM (ACL), ERR unknown command (renamed): not ours to fix */
        if (!si->denied_logged)
            LOG_WARN("\"redis refused INFO: eviction not checked\" addr=%s err=%s",
                     log_val(s->name), log_val(res->err ? res->err : "?"));
        si->denied_logged = 1;
    }
    /* STORE_DOWN: the connection went; it is asked again when back */
    s->gate = 0;
    free(a);
    publish(si);
    if (si->changed && (was_ok != store_info_ok(si) || si->require))
        si->changed(si->arg);
}

void store_info_ask(struct store_info *si, struct store_conn *conn, int at_connect)
{
    static const char *const argv[] = {"INFO"};
    static const size_t argvlen[] = {4};
    struct server *s = server_get(si, store_conn_name(conn));
    struct ask *a = malloc(sizeof(*a));
    struct store_cmd *c;

    if (!s || !a) {
        free(a);
        return;
    }
    a->si = si;
    snprintf(a->name, sizeof(a->name), "%s", s->name);
    c = store_cmd_new_read("", 0, 1, argv, argvlen, on_info, a);
    if (!c) {
        free(a);
        return;
    }
    if (store_conn_send(conn, c) < 0) {
        store_cmd_free(c);
        free(a);
        return;
    }
    if (at_connect)
        s->gate = 1;
}

int store_info_ok(const struct store_info *si)
{
    if (!si || !si->require)
        return 1;
    for (size_t i = 0; i < si->n; i++)
        if (si->srv[i].gate || (si->srv[i].known && si->srv[i].evicts))
            return 0;
    return 1;
}

static void timer_cb(struct ev_loop *loop, ev_timer *t, int revents)
{
    struct store_info *si = t->data;

    (void)loop;
    (void)revents;
    si->poll(si->arg);
}

struct store_info *store_info_new(struct ev_loop *loop, int require_noeviction,
                                  void (*poll)(void *arg), void (*changed)(void *arg), void *arg)
{
    struct store_info *si = calloc(1, sizeof(*si));

    if (!si)
        return NULL;
    si->loop = loop;
    si->require = require_noeviction;
    si->poll = poll;
    si->changed = changed;
    si->arg = arg;
    ev_timer_init(&si->timer, timer_cb, POLL_EVERY, POLL_EVERY);
    si->timer.data = si;
    ev_timer_start(loop, &si->timer);
    return si;
}

void store_info_stop(struct store_info *si)
{
    if (si)
        ev_timer_stop(si->loop, &si->timer);
}

void store_info_free(struct store_info *si)
{
    if (!si)
        return;
    store_info_stop(si);
    free(si->srv);
    free(si);
}
