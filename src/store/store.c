/* SPDX-License-Identifier: Apache-2.0 */
/* store.c - the Redis client behind store.h: the [redis] settings (struct
 * store_options; store_options.c builds them from the config), the topology
 * (one server by url, the master Sentinel names, or a Redis Cluster), the
 * up/down state, and store_eval() handing each call to its connection.
 *
 * The pieces: store_conn.c (one connection: EVALSHA, NOSCRIPT, watchdog,
 * backoff; its setup commands in store_conn_setup.c), store_probe.c (one-shot
 * questions to a list of servers), store_sentinel.c (where the master is),
 * store_cluster.c (slot map, routing, redirects), store_info.c (INFO:
 * eviction). store_heartbeat.c is a client above the store, not a piece.
 */
#include "store.h"

#include <assert.h>
#include <ev.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/log.h"
#include "core/net.h"
#include "core/util.h"
#include "core/warning.h"
#include "metrics/metrics.h"
#include "store_auth_trial.h"
#include "store_cluster.h"
#include "store_conn.h"
#include "store_errors.h"
#include "store_info.h"
#include "store_probe.h"
#include "store_reply_pool.h"
#include "store_sentinel.h"

struct store {
    struct store_env env;
    struct store_conn *conn;         /* url and sentinel: the one connection */
    struct store_sentinel *sentinel; /* sentinel: where the master is */
    int resolving;                   /* sentinel: the connection waits for an answer */
    int unconfirmed;                 /* sentinel: none confirmed the master for sentinel_window */
    uint64_t sentinel_window_us;
    uint64_t errors_quiet_us;      /* [redis] errors_quiet (store_errors_tick) */
    ev_timer tick;                 /* every second: store_errors_tick */
    struct store_cluster *cluster; /* cluster: the slot map and the masters */
    int up;                        /* what callers see: connected and store_info_ok() */
    int was_up;                    /* it has been up: the next up is a reconnect */
    int linked;                    /* connected (url, sentinel: ready; cluster: up) */
    int closing;                   /* store_free is failing what is in flight */
    int secondary;                 /* store_options.secondary: not the process' redis_up */
    struct store_info *info;       /* INFO: eviction (store_info.h) */
    /* url: copies, the config may be replaced by a reload */
    char *host;
    int port;
    char *unix_path;
    int db;
    /* credentials (copies): of the data nodes (url, Cluster nodes, the
     * Sentinel master) and of the sentinels */
    struct store_auth auth, sentinel_auth;
    /* a reload's new data credentials, tried before they go in force
     * (store_auth_trial.h); NULL: none */
    struct store_auth_trial *trial;
    char *prefix;
    char *master; /* sentinel: the master's name, for logs */
    struct {
        void (*fn)(void *arg, int up);
        void *arg;
    } watch[STORE_WATCHERS]; /* store_on_state, in the order added */
    int nwatch;
    void (*sentinel_fn)(void *arg, int confirmed); /* store_on_sentinel */
    void *sentinel_arg;
    char agent_id[128];
};

#define SENTINEL_WINDOW_US 5000000ULL /* [redis] sentinel_window's default */
#define ERRORS_QUIET_US 30000000ULL   /* [redis] errors_quiet's default */

/* Stores (one per worker) whose master is unconfirmed: the warning is the
 * process's, raised by the first and cleared by the last. */
static atomic_int unconfirmed_stores;

/* ---- up and down ---------------------------------------------------------- */

/* Up: connected, (require_noeviction) no server that can evict, and
 * (Sentinel) a master some sentinel confirmed within sentinel_window. */
static void set_up(struct store *s, int linked)
{
    int up;

    s->linked = linked;
    if (s->closing)
        return;
    up = linked && store_info_ok(s->info) && !s->unconfirmed;
    if (s->up == up)
        return;
    s->up = up;
    if (!s->secondary)
        atomic_store(&metrics.redis_up, up);
    if (up && s->was_up)
        METRIC_INC(redis_reconnects);
    if (up)
        s->was_up = 1;
    if (up) {
        if (s->cluster)
            LOG_INFO("\"redis up\" mode=cluster");
        else if (s->sentinel)
            LOG_INFO("\"redis up\" master=%s addr=%s", log_val(s->master),
                     log_val(store_conn_name(s->conn)));
        else
            LOG_INFO("\"redis up\" %s=%s", s->unix_path ? "path" : "addr",
                     log_val(store_conn_name(s->conn)));
    }
    for (int i = 0; i < s->nwatch; i++)
        s->watch[i].fn(s->watch[i].arg, up);
}

static void conn_state(void *owner, struct store_conn *conn, int ready)
{
    struct store *s = owner;

    if (ready && s->info)
        store_info_ask(s->info, conn, 1);
    set_up(s, ready);
}

static void cluster_state(void *arg, int up)
{
    set_up(arg, up);
}

/* A Cluster master's connection is ready: its INFO too. */
static void cluster_node_ready(void *arg, struct store_conn *conn)
{
    struct store *s = arg;

    if (s->info)
        store_info_ask(s->info, conn, 1);
    set_up(s, s->linked);
}

/* ---- INFO ------------------------------------------------------------------ */

static void info_ask(void *arg, struct store_conn *conn)
{
    struct store *s = arg;

    store_info_ask(s->info, conn, 0);
}

/* Every minute: INFO of every server in use. */
static void info_poll(void *arg)
{
    struct store *s = arg;

    if (s->cluster)
        store_cluster_each_ready(s->cluster, info_ask, s);
    else if (s->conn && store_conn_ready(s->conn))
        info_ask(s, s->conn);
}

/* An INFO answer may have changed store_info_ok(). */
static void info_changed(void *arg)
{
    struct store *s = arg;

    set_up(s, s->linked);
}

/* ---- sentinel ---------------------------------------------------------------- */

/* No sentinel answered for sentinel_window (store_sentinel_watch): they may
 * have promoted a replica while this agent, cut from them, still writes to
 * the old master (split brain). The master counts as unconfirmed: down (rules
 * fall back), the connection given up; it is made again, ROLE checked, only
 * once a sentinel names the master. */
static void on_unconfirmed(void *arg)
{
    struct store *s = arg;

    if (s->unconfirmed)
        return;
    s->unconfirmed = 1;
    atomic_fetch_add(&unconfirmed_stores, 1);
    if (s->sentinel_fn) /* before the fallback starts: it charges from then */
        s->sentinel_fn(s->sentinel_arg, 0);
    warning_raise(WARNING_REDIS_UNCONFIRMED,
                  "no sentinel has confirmed master %s (at %s) for %llu ms ([redis] "
                  "sentinel_window): the sentinels may have promoted a replica; rules fall back "
                  "until one answers. Check the network between this agent and the sentinels",
                  s->master ? s->master : "-", store_conn_name(s->conn),
                  (unsigned long long)(s->sentinel_window_us / 1000));
    set_up(s, s->linked);
    store_conn_drop(s->conn, "master unconfirmed by the sentinels");
}

/* A sentinel named the master again. */
static void confirmed(struct store *s)
{
    if (!s->unconfirmed)
        return;
    s->unconfirmed = 0;
    if (atomic_fetch_sub(&unconfirmed_stores, 1) == 1)
        warning_clear(WARNING_REDIS_UNCONFIRMED);
    LOG_INFO("\"redis master confirmed by a sentinel\" master=%s", log_val(s->master));
    set_up(s, s->linked);
}

/* The connection's backoff after a loss passed: ask where the master is now. */
static void sentinel_retry(void *owner, struct store_conn *conn)
{
    struct store *s = owner;

    s->resolving = 1;
    store_sentinel_resolve(s->sentinel);
}

/* An answer, asked for or periodic. A new address is used at once (a
 * failover: the old master may still be up, demoted or about to be); the same
 * address only when the connection was waiting for it. */
static void on_master(void *arg, const char *host, int port)
{
    struct store *s = arg;
    const char *cur = store_conn_host(s->conn);
    int waiting = s->resolving;

    s->resolving = 0;
    if (!host) {
        if (waiting)
            store_conn_retry_later(s->conn);
        return;
    }
    if (s->sentinel_fn)
        s->sentinel_fn(s->sentinel_arg, 1);
    if (s->unconfirmed) { /* given up at the window: connect again (ROLE first) */
        confirmed(s);
        waiting = 1;
    }
    if (cur && strcmp(cur, host) == 0 && store_conn_port(s->conn) == port) {
        if (waiting)
            store_conn_connect(s->conn);
        return;
    }
    if (store_conn_restart(s->conn, host, port, "the master moved") < 0 && waiting)
        store_conn_retry_later(s->conn);
}

static const struct store_conn_hooks url_hooks = {conn_state, NULL, NULL};
static const struct store_conn_hooks sentinel_hooks = {conn_state, sentinel_retry, NULL};

/* ---- commands ------------------------------------------------------------ */

/* Redis is down (or the store closing): cb runs at once with STORE_DOWN, 1.
 * 0 when a call may go. */
static int down(const struct store *s, store_cb *cb, void *arg)
{
    if (s->closing || !s->up || (s->conn && !store_conn_ready(s->conn))) {
        struct store_result res = {.status = STORE_DOWN, .err = "redis down"};
        cb(arg, &res);
        return 1;
    }
    return 0;
}

/* Hand c (NULL: it could not be made) to its connection. 0, or -1 when it
 * could not go: cb has run. */
static int submit(struct store *s, struct store_cmd *c, store_cb *cb, void *arg)
{
    if (!c) {
        struct store_result res = {.status = STORE_ERR, .err = "out of memory"};
        cb(arg, &res);
        return -1;
    }
    if ((s->cluster ? store_cluster_send(s->cluster, c) : store_conn_send(s->conn, c)) < 0) {
        METRIC_INC(redis_errors);
        store_cmd_fail(c, STORE_DOWN, s->cluster ? "redis node down" : "send failed");
        return -1;
    }
    return 0;
}

int store_eval(struct store *s, enum store_script script, const char *key, size_t keylen, int argc,
               const char *const *argv, const size_t *argvlen, store_cb *cb, void *arg)
{
    if (down(s, cb, arg))
        return -1;
    return submit(s, store_cmd_new(script, key, keylen, argc, argv, argvlen, cb, arg), cb, arg);
}

int store_read(struct store *s, const char *key, size_t keylen, int argc, const char *const *argv,
               const size_t *argvlen, store_cb *cb, void *arg)
{
    if (down(s, cb, arg))
        return -1;
    return submit(s, store_cmd_new_read(key, keylen, argc, argv, argvlen, cb, arg), cb, arg);
}

int store_write(struct store *s, const char *key, size_t keylen, int argc, const char *const *argv,
                const size_t *argvlen, store_cb *cb, void *arg)
{
    if (down(s, cb, arg))
        return -1;
    struct store_cmd *c = store_cmd_new_read(key, keylen, argc, argv, argvlen, cb, arg);
    if (c)
        c->write = 1;
    return submit(s, c, cb, arg);
}

void store_cork(struct store *s, int on)
{
    s->env.corked = on;
    if (on)
        return;
    if (s->cluster)
        store_cluster_uncork(s->cluster);
    else if (s->conn)
        store_conn_uncork(s->conn);
}

/* ---- lifecycle ----------------------------------------------------------- */

static void tick_cb(struct ev_loop *loop, ev_timer *t, int revents)
{
    struct store *s = t->data;

    store_errors_tick(util_now_us(), s->errors_quiet_us);
}

/* Free a secret, wiped first. */
static void drop_secret(char *v)
{
    if (v)
        explicit_bzero(v, strlen(v));
    free(v);
}

static int same(const char *a, const char *b)
{
    return a == b || (a && b && strcmp(a, b) == 0);
}

#define AUTH_DATA 1     /* the data nodes' credentials changed */
#define AUTH_SENTINEL 2 /* the sentinels' */

/* The credentials of o into s (and env): AUTH_DATA | AUTH_SENTINEL for
 * what changed (0: nothing), or -1 out of memory (nothing changed). */
static int take_auth(struct store *s, const struct store_options *o)
{
    const char *want[4] = {o->user, o->password, o->sentinel_user, o->sentinel_password};
    char **have[4] = {&s->auth.user, &s->auth.password, &s->sentinel_auth.user,
                      &s->sentinel_auth.password};
    char *copy[4] = {NULL, NULL, NULL, NULL};
    int changed = 0;

    for (int i = 0; i < 4; i++) {
        if (!same(*have[i], want[i]))
            changed |= i < 2 ? AUTH_DATA : AUTH_SENTINEL;
        if (want[i] && !(copy[i] = strdup(want[i]))) {
            for (int j = 0; j < i; j++)
                drop_secret(copy[j]);
            return -1;
        }
    }
    for (int i = 0; i < 4; i++) {
        drop_secret(*have[i]);
        *have[i] = copy[i];
    }
    s->env.user = s->auth.user;
    s->env.password = s->auth.password;
    return changed;
}

/* One server, by [redis] url (parsed by the config). */
static int setup_url(struct store *s, const struct net_addr *addr, int db, char *err, size_t errlen)
{
    if (addr->kind == NET_ADDR_UNIX)
        s->unix_path = strdup(addr->path);
    else
        s->host = strdup(addr->tcp.host);
    s->port = addr->tcp.port;
    s->db = db;
    if (!s->unix_path && !s->host) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    s->env.db = s->db;
    s->conn = store_conn_new(&s->env, &url_hooks, s, s->host, s->port, s->unix_path, 0);
    if (!s->conn) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    store_conn_connect(s->conn);
    return 0;
}

static int setup_topology(struct store *s, struct ev_loop *loop, const struct store_options *o,
                          char *err, size_t errlen)
{
    if (o->ncluster > 0) {
        s->cluster = store_cluster_new(&s->env, o->cluster, o->ncluster, &s->auth, cluster_state, s,
                                       err, errlen);
        if (!s->cluster)
            return -1;
        store_cluster_on_node_ready(s->cluster, cluster_node_ready, s);
        return 0;
    }
    if (o->nsentinels > 0) {
        s->master = strdup(o->master ? o->master : "");
        s->conn = store_conn_new(&s->env, &sentinel_hooks, s, NULL, 0, NULL, STORE_CONN_CHECK_ROLE);
        s->sentinel = store_sentinel_new(loop, s->env.timeout_us, o->sentinels, o->nsentinels,
                                         o->master, &s->sentinel_auth, on_master, s, err, errlen);
        if (!s->sentinel)
            return -1;
        if (!s->conn || !s->master) {
            snprintf(err, errlen, "out of memory");
            return -1;
        }
        store_sentinel_watch(s->sentinel, s->sentinel_window_us, on_unconfirmed);
        s->resolving = 1;
        store_sentinel_resolve(s->sentinel);
        return 0;
    }
    if (!o->server || o->server->kind == NET_ADDR_NONE) {
        snprintf(err, errlen, "redis: no url, cluster or sentinel");
        return -1;
    }
    return setup_url(s, o->server, o->db, err, errlen);
}

struct store *store_new(struct ev_loop *loop, const struct store_options *o, char *err,
                        size_t errlen)
{
    struct store *s = calloc(1, sizeof(*s));
    char host[64] = "agent";

    if (!s) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    s->env.loop = loop;
    s->env.timeout_us = o->timeout_us;
    s->env.keepalive_us = o->keepalive_us;
    s->env.functions = o->functions;
    s->env.dead_after_us = o->dead_after_us;
    s->sentinel_window_us = o->sentinel_window_us ? o->sentinel_window_us : SENTINEL_WINDOW_US;
    s->errors_quiet_us = o->errors_quiet_us ? o->errors_quiet_us : ERRORS_QUIET_US;
    ev_timer_init(&s->tick, tick_cb, 1., 1.);
    s->tick.data = s;
    ev_timer_start(loop, &s->tick);
    ev_unref(loop); /* it alone does not keep the loop running */
    s->auth.server = "redis";
    s->sentinel_auth.server = "sentinel";
    s->secondary = o->secondary;
    s->prefix = strdup(o->prefix ? o->prefix : "");
    s->env.prefix = s->prefix;
    if (!s->prefix || take_auth(s, o) < 0) {
        snprintf(err, errlen, "out of memory");
        store_free(s);
        return NULL;
    }
    gethostname(host, sizeof(host) - 1);
    snprintf(s->agent_id, sizeof(s->agent_id), "%s:%d:%08x", host, (int)getpid(),
             (unsigned)(util_hash(UTIL_HASH_INIT, &s, sizeof(s)) ^ util_now_us()));
    s->info = store_info_new(loop, o->require_noeviction, info_poll, info_changed, s);
    if (!s->info) {
        snprintf(err, errlen, "out of memory");
        store_free(s);
        return NULL;
    }
    if (setup_topology(s, loop, o, err, errlen) < 0) {
        store_free(s);
        return NULL;
    }
    return s;
}

void store_free(struct store *s)
{
    if (!s)
        return;
    s->closing = 1; /* failing callbacks that call store_eval get STORE_DOWN */
    if (ev_is_active(&s->tick)) {
        ev_ref(s->env.loop); /* undoes the ev_unref of store_new */
        ev_timer_stop(s->env.loop, &s->tick);
    }
    if (s->unconfirmed && atomic_fetch_sub(&unconfirmed_stores, 1) == 1)
        warning_clear(WARNING_REDIS_UNCONFIRMED);
    if (s->trial)
        warning_clear(WARNING_REDIS_AUTH_REFUSED);
    store_auth_trial_free(s->trial);
    store_info_stop(s->info);
    store_cluster_free(s->cluster);
    store_sentinel_free(s->sentinel);
    store_conn_free(s->conn);
    /* after the connections: their INFO callbacks have run */
    store_info_free(s->info);
    store_resp_free(&s->env.resp);
    store_cmd_pool_drain();
    store_reply_pool_drain();
    free(s->host);
    free(s->unix_path);
    drop_secret(s->auth.user);
    drop_secret(s->auth.password);
    drop_secret(s->sentinel_auth.user);
    drop_secret(s->sentinel_auth.password);
    free(s->prefix);
    free(s->master);
    free(s);
}

/* url mode: o's url differs from the one in use. */
static int url_changed(const struct store *s, const struct store_options *o)
{
    const struct net_addr *addr = o->server;

    if (o->db != s->db)
        return 1;
    if (addr->kind == NET_ADDR_UNIX)
        return !same(s->unix_path, addr->path);
    return s->unix_path || !same(s->host, addr->tcp.host) || s->port != addr->tcp.port;
}

/* Replace the url connection by a new one to host:port or path (copied).
 * The old one goes at once: its calls fail (STORE_DOWN: they fall back), as
 * when Redis restarts. 0, or -1 out of memory (nothing changed). */
static int replace_conn(struct store *s, const char *host, int port, const char *path)
{
    char *h = host ? strdup(host) : NULL, *p = path ? strdup(path) : NULL;
    struct store_conn *conn = NULL, *old = s->conn;

    if ((host && !h) || (path && !p) ||
        !(conn = store_conn_new(&s->env, &url_hooks, s, h, port, p, 0))) {
        free(h);
        free(p);
        return -1;
    }
    free(s->host);
    free(s->unix_path);
    s->host = h;
    s->unix_path = p;
    s->port = port;
    s->conn = conn;
    set_up(s, 0);
    store_conn_free(old);
    store_conn_connect(s->conn);
    return 0;
}

/* The data nodes' connections made again with the credentials in force
 * (those in flight fail with STORE_DOWN). 0, or -1 out of memory. */
static int reconnect_data(struct store *s)
{
    if (s->cluster) {
        store_cluster_reconnect(s->cluster, "credentials changed");
    } else if (s->conn && store_conn_host(s->conn)) {
        if (store_conn_restart(s->conn, store_conn_host(s->conn), store_conn_port(s->conn),
                               "credentials changed") < 0)
            return -1;
    } else if (s->conn && s->unix_path) {
        return replace_conn(s, NULL, 0, s->unix_path);
    }
    return 0;
}

static void first_ready(void *arg, struct store_conn *conn)
{
    struct store_conn **first = arg;

    if (!*first)
        *first = conn;
}

/* store_auth_trial_where: a server in use now. */
static int trial_where(void *arg, const char **host, int *port, const char **path, int *flags)
{
    struct store *s = arg;
    struct store_conn *on = s->conn;

    if (s->cluster)
        store_cluster_each_ready(s->cluster, first_ready, &on);
    if (!on || (!store_conn_host(on) && !s->unix_path))
        return -1;
    *host = store_conn_host(on);
    *port = store_conn_port(on);
    *path = s->cluster ? NULL : s->unix_path;
    *flags = s->cluster ? STORE_CONN_SLOTS : s->sentinel ? STORE_CONN_CHECK_ROLE : 0;
    return 0;
}

/* store_auth_trial_pass: the credentials on trial go in force, the data
 * connections are made again with them. */
static void trial_pass(void *arg, const char *user, const char *password)
{
    struct store *s = arg;
    struct store_options o = {.user = user,
                              .password = password,
                              .sentinel_user = s->sentinel_auth.user,
                              .sentinel_password = s->sentinel_auth.password};

    if (take_auth(s, &o) < 0) {
        LOG_ERROR("\"redis credentials passed but not taken: out of memory\"");
        return; /* the trial stays, and tries again */
    }
    s->env.auth_gen++;
    store_auth_trial_free(s->trial);
    s->trial = NULL;
    warning_clear(WARNING_REDIS_AUTH_REFUSED); /* (when raised) */
    LOG_INFO("\"redis credentials changed: reconnecting\" tried=yes");
    if (reconnect_data(s) < 0)
        LOG_ERROR("\"redis reconnect failed: out of memory\"");
}

int store_reconfigure(struct store *s, const struct store_options *o)
{
    const struct net_addr *addr = o->server;
    int auth, moved = 0, db = s->db;
    struct store_options keep;

    s->env.functions = o->functions; /* (from the next connect) */
    if (!s->cluster && !s->sentinel && addr && addr->kind != NET_ADDR_NONE)
        moved = url_changed(s, o);
    store_auth_trial_free(s->trial); /* those in force, or others asked for */
    s->trial = NULL;
    if (!moved && s->up && (!same(s->auth.user, o->user) || !same(s->auth.password, o->password))) {
        /* Redis works with those in force: keep them until the new pass */
        if (!(s->trial =
                  store_auth_trial_new(&s->env, o->user, o->password, trial_where, trial_pass, s)))
            return -1;
        keep = *o;
        keep.user = s->auth.user;
        keep.password = s->auth.password;
        o = &keep; /* the sentinels' below */
    } else {
        /* those in force asked for, or the new ones in force below */
        warning_clear(WARNING_REDIS_AUTH_REFUSED);
    }
    if ((auth = take_auth(s, o)) < 0)
        return -1;
    if (auth)
        s->env.auth_gen++;
    if (auth == AUTH_SENTINEL && !moved) { /* the next question uses them */
        LOG_INFO("\"sentinel credentials changed\"");
        return 0;
    }
    if (!auth && !moved)
        return 0;
    LOG_INFO("\"redis %s changed: reconnecting\"", moved && auth ? "url and credentials"
                                                   : moved       ? "url"
                                                                 : "credentials");
    if (moved) {
        s->db = s->env.db = o->db;
        if (replace_conn(s, addr->kind == NET_ADDR_UNIX ? NULL : addr->tcp.host, addr->tcp.port,
                         addr->kind == NET_ADDR_UNIX ? addr->path : NULL) < 0) {
            s->db = s->env.db = db;
            return -1;
        }
        return 0;
    }
    return reconnect_data(s);
}

const char *store_last_error(const struct store *s)
{
    return s->conn ? store_conn_last_error(s->conn) : "";
}

int store_up(const struct store *s)
{
    return s && s->up;
}

unsigned store_pending(const struct store *s)
{
    return s ? s->env.pending : 0;
}

void store_on_sentinel(struct store *s, void (*fn)(void *arg, int confirmed), void *arg)
{
    s->sentinel_fn = fn;
    s->sentinel_arg = arg;
}

void store_on_state(struct store *s, void (*fn)(void *arg, int up), void *arg)
{
    assert(s->nwatch < STORE_WATCHERS);
    s->watch[s->nwatch].fn = fn;
    s->watch[s->nwatch].arg = arg;
    s->nwatch++;
}

const char *store_agent_id(const struct store *s)
{
    return s->agent_id;
}

int store_clustered(const struct store *s)
{
    return s && s->cluster != NULL;
}
