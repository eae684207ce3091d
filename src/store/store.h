/* SPDX-License-Identifier: Apache-2.0 */
/* store.h - the Redis client: the only module that includes hiredis.
 *
 * Asynchronous connections (hiredis + its libev adapter) on the loop given to
 * store_new(), normally the main thread's, to one of three topologies:
 *
 *   url       one server (TCP or unix socket, AUTH, SELECT);
 *   sentinel  the master that the sentinels name, asked in order at start,
 *             after every loss and every second; a connection must answer
 *             ROLE "master", and a new address (failover) is used at once;
 *   cluster   Redis Cluster: the slot map from CLUSTER SLOTS (seeds, then
 *             the known masters), one connection per master, each call sent
 *             to the master of its key's slot (CRC16, {hashtags}); -MOVED
 *             refreshes the map and retries once at the new master, -ASK
 *             retries once with ASKING.
 *
 * Scripts are loaded on every connection when it is made: SCRIPT LOAD of
 * each, and FUNCTION LOAD of the library where Redis has functions (7+),
 * then called with FCALL, else EVALSHA (store_conn_setup.c); a NOSCRIPT
 * reply (Redis restarted, SCRIPT FLUSH) reloads the script and retries the
 * call, transparently. A lost connection
 * is re-established with backoff; one that stops answering is dropped.
 *
 * Every store_eval() callback runs exactly once, on the loop thread: with the
 * reply, or with STORE_DOWN when the connection is lost or not up. Callers
 * must not call store functions from another thread.
 */
#ifndef STORE_H
#define STORE_H

#include <stddef.h>
#include <stdint.h>

#include "script.h"
#include "store_result.h"

struct ev_loop;
struct config;
struct net_addr;
struct net_hostport;
struct store;

/* The [redis] settings the store works from. The strings and lists are
 * borrowed: they need to live through store_new() or store_reconfigure()
 * only (the store copies what it keeps). */
struct store_options {
    /* The topology, the first one set: cluster seeds, sentinels (and the
     * master's name), or one server (url). */
    const struct net_hostport *cluster;
    size_t ncluster;
    const struct net_hostport *sentinels;
    size_t nsentinels;
    const char *master;
    const struct net_addr *server; /* url: TCP host:port or unix path, or NET_ADDR_NONE */
    int db;                        /* url: SELECT at connect when not 0 */
    /* Credentials in force, of the data nodes (url, Cluster nodes, the
     * Sentinel master) and of the sentinels. NULL user: password only;
     * NULL password: no AUTH. */
    const char *user, *password;
    const char *sentinel_user, *sentinel_password;
    const char *prefix; /* of every key; never NULL */
    /* Not [redis]: the claimer's store to [global] (gclaim.h). Its state
     * is not the process' "Redis up" (metrics redis_up): the claimer says
     * what it knows (global_up, the warning global_unreachable). */
    int secondary;
    int require_noeviction;
    int functions;          /* [redis] functions: FCALL where Redis allows (store_conn_setup.h) */
    uint64_t timeout_us;    /* [redis] timeout: a sentinel or seed question, a late PING */
    uint64_t keepalive_us;  /* [redis] keepalive: PING after this long idle; 0 off */
    uint64_t dead_after_us; /* a connection silent this long is given up */
    uint64_t sentinel_window_us; /* [redis] sentinel_window: no sentinel this long, the
                                  * master is unconfirmed (store_sentinel.h) */
    uint64_t errors_quiet_us;    /* [redis] errors_quiet: redis_errors clears after it */
};

/* The options of cfg's [redis] section, into o: the one place the config's
 * milliseconds become the store's clocks. o borrows from cfg. */
void store_options_from_config(const struct config *cfg, struct store_options *o);

/* The same from cfg's [global] section (config_global(cfg) true), for the
 * store a region's claimer opens to the global Redis: its topology,
 * credentials, prefix, timeout and keepalive; require_noeviction,
 * functions, sentinel_window and errors_quiet are [redis]'s. o borrows
 * from cfg. */
void store_options_from_global(const struct config *cfg, struct store_options *o);

/* Connect per o. The first attempt (connection, sentinel question, or slot
 * map) is made at once or on the next loop iteration; its outcome arrives
 * later (see store_up). NULL with a message in err when the settings cannot
 * be used. */
struct store *store_new(struct ev_loop *loop, const struct store_options *o, char *err,
                        size_t errlen);

/* SIGHUP: apply o's credentials (from [redis] username, password or
 * password_file, the url's userinfo, sentinel_*) and, in url mode, its url
 * (server, db). When they changed, the connections are made again at once
 * (those in flight fail with STORE_DOWN, as when Redis restarts); but new
 * data credentials while Redis is up (and the url the same) are tried on a
 * connection of their own first (store_auth_trial.h): the connections are
 * made again with them once that passes, and keep those in force while it
 * fails (warning redis_auth_refused). The
 * topology itself (url, cluster, sentinel, master), the timeouts, the prefix
 * and require_noeviction only change at a restart. 0, or -1 out of memory
 * (what was in use stays). */
int store_reconfigure(struct store *s, const struct store_options *o);

/* Close every connection. Pending callbacks run with STORE_DOWN. NULL no-op. */
void store_free(struct store *s);

/* 1 when connected and scripts are loaded. Cluster: when the slot map is
 * loaded and at least one master's connection is ready; a call whose master
 * is not connected then fails alone with STORE_DOWN (only the keys of that
 * master fall back), and a call for a slot no master serves likewise. */
int store_up(const struct store *s);

/* url and Sentinel: why the last attempt to connect to Redis failed
 * ("Connection refused", "WRONGPASS ..."), "" none yet or once ready;
 * Cluster: "". For the one-shot commands, which give up at once on a
 * refusal that waiting does not cure. */
const char *store_last_error(const struct store *s);

/* Number of commands sent and not answered yet (all connections). */
unsigned store_pending(const struct store *s);

/* EVALSHA script with one key and argc args. The args are copied. */
int store_eval(struct store *s, enum store_script script, const char *key, size_t keylen, int argc,
               const char *const *argv, const size_t *argvlen, store_cb *cb, void *arg);

/* A read-only command about one key, for the operator (GET /key): argv is
 * the whole command (HGETALL key, PTTL key, TIME), key routes it (Cluster:
 * to the master of key's slot; otherwise the one connection), so that
 * several reads about one key answer from one server, in order. The
 * callback runs exactly once as store_eval()'s does: an array reply comes
 * as res->str, an integer one as res->v[0] (n = 1), an error as STORE_ERR.
 * Never batched (pipelined alone); not for the request path. */
int store_read(struct store *s, const char *key, size_t keylen, int argc, const char *const *argv,
               const size_t *argvlen, store_cb *cb, void *arg);

/* A plain command that writes one key, on the request path: the SET NX of
 * a new key (limiter_first.c). Sent, routed and answered as store_read();
 * an error reply that every write would get (READONLY, OOM, NOPERM) takes
 * the store down until a probe passes, as a script call's does. */
int store_write(struct store *s, const char *key, size_t keylen, int argc, const char *const *argv,
                const size_t *argvlen, store_cb *cb, void *arg);

/* Group commit (see store_conn.h): between store_cork(s, 1) and
 * store_cork(s, 0), store_eval() calls only queue, and the uncork sends them
 * as batches, one per connection (Cluster: per hash slot). For a run of
 * calls made at once, e.g. a tick's top-ups or what workers queued. */
void store_cork(struct store *s, int on);

/* Call fn on every up/down transition (from the loop thread), after those
 * added before it (the limiter's, then the heartbeat's). At most
 * STORE_WATCHERS; none is taken back: the store is freed first. */
#define STORE_WATCHERS 4
void store_on_state(struct store *s, void (*fn)(void *arg, int up), void *arg);

/* Sentinel mode: fn(arg, 1) at each sentinel answer naming a master (a
 * confirmation, about every second), fn(arg, 0) when none came for
 * sentinel_window (redis_unconfirmed), before the store goes down for it.
 * One listener (the limiter, which charges its backstops: lease.h); on the
 * loop thread. Never called in the other modes. */
void store_on_sentinel(struct store *s, void (*fn)(void *arg, int confirmed), void *arg);

/* 1 with Redis Cluster (several nodes: one slow node says nothing of the
 * others), 0 with one server (url, sentinel). */
int store_clustered(const struct store *s);

/* The agent id this process uses in lease records: host:pid:random. */
const char *store_agent_id(const struct store *s);

#endif
