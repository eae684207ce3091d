/* SPDX-License-Identifier: Apache-2.0 */
/* store_cluster.c - Redis Cluster routing (see store_cluster.h): the slot
 * map from CLUSTER SLOTS, one store_conn per master, CRC16 key slots,
 * -MOVED (update the slot, refresh the map, retry once at the new master)
 * and -ASK (ASKING then the command at the named node, once).
 *
 * The map is only ever replaced from a probe callback or a timer, never from
 * inside a node connection's callbacks, so closing a master that left the
 * map cannot free a connection under its own feet.
 */
#include "store_cluster.h"

#include <ev.h>
#include <hiredis/hiredis.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "core/net.h"
#include "core/util.h"
#include "metrics/metrics.h"
#include "store_conn.h"
#include "store_probe.h"
#include "store_why.h"

#define REFRESH_MIN_US 100000 /* at most one CLUSTER SLOTS per 100 ms */
#define REFRESH_PARTIAL 1.0   /* seconds: ask again while slots are unassigned */
#define BACKOFF_MIN 0.05
#define BACKOFF_MAX 2.0
#define HOST_MAX 256

struct store_cluster {
    struct store_env *env;
    void (*up_cb)(void *arg, int up);
    void *up_arg;
    int up;
    struct net_hostport *seeds;
    size_t nseeds;
    struct store_conn **nodes; /* every master connection we hold */
    size_t nnodes, capnodes;
    struct store_conn *slots[STORE_CLUSTER_SLOTS]; /* NULL: unassigned */
    int loaded;                                    /* a map came in */
    uint64_t map_sig;                              /* of the map last logged */
    unsigned covered;                              /* assigned slots */
    struct store_probe *probe;
    ev_timer refresh;
    int refresh_again; /* asked for while a refresh ran */
    uint64_t last_refresh_us;
    double backoff; /* between refreshes while no node answers */
    int failing;    /* the last refresh failed (log once per streak) */
    void (*node_ready)(void *arg, struct store_conn *conn); /* store_cluster_on_node_ready */
    void *node_ready_arg;
};

/* ---- key slots --------------------------------------------------------------- */

unsigned store_cluster_slot(const char *key, size_t len)
{
    return util_redis_slot(key, len);
}

/* ---- nodes --------------------------------------------------------------------- */

static void refresh_soon(struct store_cluster *cl);

static void update_up(struct store_cluster *cl)
{
    int up = 0;

    for (size_t i = 0; cl->loaded && i < cl->nnodes && !up; i++)
        up = store_conn_ready(cl->nodes[i]);
    if (up == cl->up)
        return;
    cl->up = up;
    cl->up_cb(cl->up_arg, up);
}

static void node_state(void *owner, struct store_conn *conn, int ready)
{
    struct store_cluster *cl = owner;

    if (ready)
        LOG_INFO("\"redis cluster node ready\" addr=%s", log_val(store_conn_name(conn)));
    else
        refresh_soon(cl); /* a failover may have moved its slots */
    /* before up is judged: the owner may hold it until this node is checked */
    if (ready && cl->node_ready)
        cl->node_ready(cl->node_ready_arg, conn);
    update_up(cl);
}

/* Backoff after a loss elapsed: check the map (coalesced) and reconnect. */
static void node_retry(void *owner, struct store_conn *conn)
{
    refresh_soon(owner);
    store_conn_connect(conn);
}

static void node_redirect(void *owner, struct store_conn *from, struct store_cmd *cmd, int ask,
                          int slot, const char *host, int port);

static const struct store_conn_hooks node_hooks = {node_state, node_retry, node_redirect};

/* The connection to host:port, made (and connecting) when new. NULL when out
 * of memory. */
static struct store_conn *node_get(struct store_cluster *cl, const char *host, int port)
{
    struct store_conn *conn;

    for (size_t i = 0; i < cl->nnodes; i++) {
        const char *h = store_conn_host(cl->nodes[i]);
        if (store_conn_port(cl->nodes[i]) == port && h && strcmp(h, host) == 0)
            return cl->nodes[i];
    }
    if (cl->nnodes == cl->capnodes) {
        size_t cap = cl->capnodes ? cl->capnodes * 2 : 8;
        struct store_conn **grown = realloc(cl->nodes, cap * sizeof(*grown));
        if (!grown)
            return NULL;
        cl->nodes = grown;
        cl->capnodes = cap;
    }
    conn = store_conn_new(cl->env, &node_hooks, cl, host, port, NULL, STORE_CONN_SLOTS);
    if (!conn)
        return NULL;
    cl->nodes[cl->nnodes++] = conn;
    store_conn_connect(conn);
    return conn;
}

static void node_redirect(void *owner, struct store_conn *from, struct store_cmd *cmd, int ask,
                          int slot, const char *host, int port)
{
    struct store_cluster *cl = owner;
    struct store_conn *to;

    if (ask ? cmd->asked : cmd->moved) {
        METRIC_INC(redis_errors);
        store_cmd_fail(cmd, STORE_ERR, "redirected again");
        return;
    }
    to = node_get(cl, host, port);
    if (ask) {
        cmd->asked = 1;
        cmd->asking = 1;
    } else {
        cmd->moved = 1;
        cmd->asking = 0;
        if (to)
            cl->slots[slot] = to;
        refresh_soon(cl);
    }
    if (!to || store_conn_send(to, cmd) < 0) {
        METRIC_INC(redis_errors);
        store_cmd_fail(cmd, STORE_DOWN, "redirect target down");
    }
}

/* ---- the slot map ----------------------------------------------------------------- */

/* The master of one CLUSTER SLOTS entry: [start, end, [host, port, id, ...],
 * replicas...]. 0 with the parts; 1 when the master has no known endpoint
 * ("?"): leave the range unassigned; -1 malformed. */
static int parse_entry(const redisReply *e, const char *asked, long *start, long *end,
                       const char **host, int *port)
{
    const redisReply *m;

    if (e->type != REDIS_REPLY_ARRAY || e->elements < 3 ||
        e->element[0]->type != REDIS_REPLY_INTEGER || e->element[1]->type != REDIS_REPLY_INTEGER)
        return -1;
    *start = (long)e->element[0]->integer;
    *end = (long)e->element[1]->integer;
    m = e->element[2];
    if (*start < 0 || *end < *start || *end >= STORE_CLUSTER_SLOTS ||
        m->type != REDIS_REPLY_ARRAY || m->elements < 2 ||
        m->element[0]->type != REDIS_REPLY_STRING || m->element[1]->type != REDIS_REPLY_INTEGER ||
        m->element[1]->integer <= 0 || m->element[1]->integer > 65535 ||
        m->element[0]->len >= HOST_MAX)
        return -1;
    *port = (int)m->element[1]->integer;
    *host = m->element[0]->len ? m->element[0]->str : asked; /* "": the node we asked */
    return strcmp(*host, "?") == 0 ? 1 : 0;
}

/* A fingerprint of the map (which run of slots goes where) and its size. */
static uint64_t map_signature(const struct store_cluster *cl, unsigned *covered)
{
    uint64_t h = UTIL_HASH_INIT;
    const struct store_conn *prev = NULL;

    *covered = 0;
    for (unsigned s = 0; s < STORE_CLUSTER_SLOTS; s++) {
        const struct store_conn *n = cl->slots[s];
        if (n)
            (*covered)++;
        if (n == prev)
            continue;
        prev = n;
        h = util_hash(h, &s, sizeof(s));
        if (n)
            h = util_hash(h, store_conn_name(n), strlen(store_conn_name(n)));
    }
    return h;
}

/* 0 when every entry of a CLUSTER SLOTS reply parses: a map is taken whole
 * or not at all. -1 otherwise. */
static int map_check(const redisReply *reply, const char *asked)
{
    if (reply->type != REDIS_REPLY_ARRAY || reply->elements == 0)
        return -1;
    for (size_t i = 0; i < reply->elements; i++) {
        long start, end;
        const char *host;
        int port;
        if (parse_entry(reply->element[i], asked, &start, &end, &host, &port) < 0)
            return -1;
    }
    return 0;
}

/* The slot table of a checked reply (malloc'd, STORE_CLUSTER_SLOTS entries,
 * NULL where no master is known), connecting to the masters not held yet.
 * NULL when out of memory. */
static struct store_conn **map_table(struct store_cluster *cl, const redisReply *reply,
                                     const char *asked)
{
    struct store_conn **table = calloc(STORE_CLUSTER_SLOTS, sizeof(*table));

    if (!table)
        return NULL;
    for (size_t i = 0; i < reply->elements; i++) {
        long start, end;
        const char *host;
        int port;
        struct store_conn *node;
        if (parse_entry(reply->element[i], asked, &start, &end, &host, &port) != 0)
            continue;
        if (!(node = node_get(cl, host, port))) {
            free(table);
            return NULL;
        }
        for (long s = start; s <= end; s++)
            table[s] = node;
    }
    return table;
}

/* Keep in cl->nodes, in their order, the masters that own a slot of
 * cl->slots; move the others to gone (room for cl->nnodes). used: cl->nnodes
 * zeroed bytes of scratch. Returns how many went to gone. */
static size_t drop_unmapped(struct store_cluster *cl, unsigned char *used, struct store_conn **gone)
{
    struct store_conn *last = NULL;
    size_t ngone = 0, kept = 0;

    for (size_t s = 0; s < STORE_CLUSTER_SLOTS; s++) {
        if (!cl->slots[s] || cl->slots[s] == last)
            continue;
        last = cl->slots[s];
        for (size_t j = 0; j < cl->nnodes; j++) {
            if (cl->nodes[j] == last) {
                used[j] = 1;
                break;
            }
        }
    }
    for (size_t i = 0; i < cl->nnodes; i++) {
        if (used[i])
            cl->nodes[kept++] = cl->nodes[i];
        else
            gone[ngone++] = cl->nodes[i];
    }
    cl->nnodes = kept;
    return ngone;
}

/* Count the assigned slots; log the map once each time it changes. */
static void note_map(struct store_cluster *cl)
{
    unsigned covered;
    uint64_t sig = map_signature(cl, &covered);

    cl->covered = covered;
    if (sig != cl->map_sig) {
        LOG_INFO("\"redis cluster map\" masters=%zu slots=%u", cl->nnodes, covered);
        if (cl->map_sig) /* not the first map: slots changed owners */
            METRIC_INC(redis_failovers);
        cl->map_sig = sig;
    }
}

/* Install the map of a CLUSTER SLOTS reply; close the masters that left it.
 * 1 installed, 0 unusable (nothing changed). */
static int apply_map(struct store_cluster *cl, const redisReply *reply, const char *asked)
{
    struct store_conn **table, **gone;
    unsigned char *used;
    size_t ngone;

    if (map_check(reply, asked) < 0)
        return 0;
    if (!(table = map_table(cl, reply, asked)))
        return 0;
    /* Taken before the map changes, so that running out leaves it as it was. */
    used = calloc(cl->nnodes ? cl->nnodes : 1, 1);
    gone = calloc(cl->nnodes ? cl->nnodes : 1, sizeof(*gone));
    if (!used || !gone) {
        free(used);
        free(gone);
        free(table);
        return 0;
    }
    memcpy(cl->slots, table, sizeof(cl->slots));
    free(table);
    ngone = drop_unmapped(cl, used, gone);
    cl->loaded = 1;
    note_map(cl);
    /* Out of every structure first: their failing commands may route again. */
    for (size_t i = 0; i < ngone; i++) {
        LOG_INFO("\"redis cluster node left the map\" addr=%s", log_val(store_conn_name(gone[i])));
        store_conn_free(gone[i]);
    }
    free(gone);
    free(used);
    update_up(cl);
    return 1;
}

static int accept_map(void *arg, const struct redisReply *r, const char *host, int port)
{
    return apply_map(arg, (const redisReply *)r, host);
}

static void map_done(void *arg, int ok)
{
    struct store_cluster *cl = arg;

    if (!ok) {
        const char *why = store_probe_last_error(cl->probe);
        store_why_note("cluster seeds", why);
        if (!cl->failing)
            LOG_WARN("\"redis cluster: no node gave a slot map\" seeds=%zu masters=%zu "
                     "last_err=\"%s\"",
                     cl->nseeds, cl->nnodes, log_esc(why, strlen(why)));
        cl->failing = 1;
        ev_timer_stop(cl->env->loop, &cl->refresh);
        ev_timer_set(&cl->refresh, cl->backoff, 0.);
        ev_timer_start(cl->env->loop, &cl->refresh);
        cl->backoff = cl->backoff * 2 > BACKOFF_MAX ? BACKOFF_MAX : cl->backoff * 2;
        return;
    }
    cl->failing = 0;
    cl->backoff = BACKOFF_MIN;
    if (cl->refresh_again) {
        refresh_soon(cl);
    } else if (cl->covered < STORE_CLUSTER_SLOTS && !ev_is_active(&cl->refresh)) {
        /* a cluster being set up or resharded: its slots come soon */
        ev_timer_set(&cl->refresh, REFRESH_PARTIAL, 0.);
        ev_timer_start(cl->env->loop, &cl->refresh);
    }
}

/* Ask the masters we know, then the seeds. */
static void refresh_cb(struct ev_loop *loop, ev_timer *t, int revents)
{
    struct store_cluster *cl = t->data;
    const char *argv[2] = {"CLUSTER", "SLOTS"};
    struct net_hostport *cand;
    size_t n = 0;

    if (store_probe_running(cl->probe))
        return;
    cand = calloc(cl->nnodes + cl->nseeds, sizeof(*cand));
    if (!cand) {
        map_done(cl, 0);
        return;
    }
    for (size_t i = 0; i < cl->nnodes; i++) { /* hosts under HOST_MAX: they fit */
        snprintf(cand[n].host, sizeof(cand[n].host), "%s", store_conn_host(cl->nodes[i]));
        cand[n++].port = store_conn_port(cl->nodes[i]);
    }
    for (size_t i = 0; i < cl->nseeds; i++)
        cand[n++] = cl->seeds[i];
    cl->refresh_again = 0;
    cl->last_refresh_us = util_now_us();
    if (store_probe_start(cl->probe, cand, n, 2, argv, accept_map, map_done, cl) < 0)
        map_done(cl, 0);
    free(cand);
}

/* Ask for the map soon: coalesced, at most once per REFRESH_MIN_US. */
static void refresh_soon(struct store_cluster *cl)
{
    uint64_t now = util_now_us(), due = cl->last_refresh_us + REFRESH_MIN_US;

    if (store_probe_running(cl->probe)) {
        cl->refresh_again = 1;
        return;
    }
    if (ev_is_active(&cl->refresh))
        return;
    ev_timer_set(&cl->refresh, due > now ? (double)(due - now) / 1e6 : 0., 0.);
    ev_timer_start(cl->env->loop, &cl->refresh);
}

/* ---- API ------------------------------------------------------------------------------ */

int store_cluster_send(struct store_cluster *cl, struct store_cmd *cmd)
{
    size_t len;
    const char *key = store_cmd_key(cmd, &len);
    struct store_conn *node = cl->slots[store_cluster_slot(key, len)];

    if (!node) {
        refresh_soon(cl);
        return -1;
    }
    return store_conn_send(node, cmd);
}

int store_cluster_up(const struct store_cluster *cl)
{
    return cl && cl->up;
}

struct store_cluster *store_cluster_new(struct store_env *env, const struct net_hostport *seeds,
                                        size_t n, const struct store_auth *auth,
                                        void (*up_cb)(void *arg, int up), void *arg, char *err,
                                        size_t errlen)
{
    struct store_cluster *cl = calloc(1, sizeof(*cl));

    if (!cl) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    cl->env = env;
    cl->up_cb = up_cb;
    cl->up_arg = arg;
    cl->backoff = BACKOFF_MIN;
    ev_timer_init(&cl->refresh, refresh_cb, 0., 0.);
    cl->refresh.data = cl;
    if (n == 0) {
        snprintf(err, errlen, "redis: empty address list");
        goto fail;
    }
    if (!(cl->seeds = malloc(n * sizeof(*cl->seeds)))) {
        snprintf(err, errlen, "out of memory");
        goto fail;
    }
    memcpy(cl->seeds, seeds, n * sizeof(*cl->seeds));
    cl->nseeds = n;
    if (!(cl->probe = store_probe_new(env->loop, env->timeout_us, auth))) {
        snprintf(err, errlen, "out of memory");
        goto fail;
    }
    refresh_soon(cl); /* the first map, from the next loop iteration */
    return cl;
fail:
    store_cluster_free(cl);
    return NULL;
}

void store_cluster_free(struct store_cluster *cl)
{
    struct store_conn **nodes;
    size_t n;

    if (!cl)
        return;
    ev_timer_stop(cl->env->loop, &cl->refresh);
    store_probe_free(cl->probe);
    cl->probe = NULL;
    nodes = cl->nodes;
    n = cl->nnodes;
    cl->nodes = NULL;
    cl->nnodes = cl->capnodes = 0;
    memset(cl->slots, 0, sizeof(cl->slots));
    cl->loaded = 0;
    for (size_t i = 0; i < n; i++)
        store_conn_free(nodes[i]);
    free(nodes);
    free(cl->seeds);
    free(cl);
}

void store_cluster_on_node_ready(struct store_cluster *cl,
                                 void (*fn)(void *arg, struct store_conn *conn), void *arg)
{
    cl->node_ready = fn;
    cl->node_ready_arg = arg;
}

void store_cluster_each_ready(struct store_cluster *cl,
                              void (*fn)(void *arg, struct store_conn *conn), void *arg)
{
    for (size_t i = 0; i < cl->nnodes; i++)
        if (store_conn_ready(cl->nodes[i]))
            fn(arg, cl->nodes[i]);
}

void store_cluster_reconnect(struct store_cluster *cl, const char *why)
{
    /* a restart may fail commands whose callbacks route again: over a copy */
    size_t n = cl->nnodes;
    struct store_conn **nodes = malloc((n ? n : 1) * sizeof(*nodes));

    if (!nodes)
        return;
    memcpy(nodes, cl->nodes, n * sizeof(*nodes));
    for (size_t i = 0; i < n; i++) {
        const char *host = store_conn_host(nodes[i]);
        if (host)
            store_conn_restart(nodes[i], host, store_conn_port(nodes[i]), why);
    }
    free(nodes);
    refresh_soon(cl);
}

void store_cluster_uncork(struct store_cluster *cl)
{
    for (size_t i = 0; i < cl->nnodes; i++)
        store_conn_uncork(cl->nodes[i]);
}
