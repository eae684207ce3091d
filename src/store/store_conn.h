/* SPDX-License-Identifier: Apache-2.0 */
/* store_conn.h - one asynchronous Redis connection and the commands in flight
 * on it. Internal to the store module (store.c, store_sentinel.c,
 * store_cluster.c); nothing outside src/store*.c includes it.
 *
 * A connection is made with hiredis 0.14 and its libev adapter on the loop of
 * its store_env. At connect it sends AUTH and SELECT when configured, ROLE when
 * asked to check it, and SCRIPT LOAD for every script; it is "ready" once all
 * of them succeeded. store_conn_send() queues an EVALSHA (preceded by ASKING
 * for an -ASK redirect); a NOSCRIPT reply reloads the script and retries the
 * command once on the same connection. -MOVED and -ASK replies go to the
 * owner's redirect hook. A refusal (READONLY, NOPERM, OOM...: store_errors.h)
 * fails the call with STORE_DOWN and gives the connection up; it is made
 * again after the backoff and is ready only once a probe (one script call
 * under the prefix) passes. After READONLY or MASTERDOWN a url connection
 * asks ROLE too (store_conn_setup.c). A watchdog drops a connection whose oldest command,
 * or whose connect, takes far longer than the timeout. A connection without
 * traffic for env->keepalive_us gets a PING, so that idle timeouts on the way
 * (Redis' `timeout`, a proxy's) never close it; TCP keepalive is on too
 * (STORE_TCP_KEEP*). After a loss the owner's retry hook runs after a backoff
 * (50 ms doubling to 2 s).
 *
 * Every command handed to a connection completes exactly once: its callback
 * runs with the reply, or with STORE_DOWN when the connection goes away, or
 * the command is handed to the redirect hook, which takes it over.
 */
#ifndef STORE_CONN_H
#define STORE_CONN_H

#include <stddef.h>
#include <stdint.h>

#include "store_cmd.h"
#include "store_env.h"

/* TCP keepalive on every TCP connection to Redis or a Sentinel
 * (net_tcp_keepalive): with no traffic for 10 s a probe, then one every 5 s;
 * 3 unanswered reset the connection, so a peer gone without a word is found
 * within 25 s even when [redis] keepalive is off, and middleboxes (NAT,
 * conntrack) see the connection live. */
#define STORE_TCP_KEEPIDLE 10
#define STORE_TCP_KEEPINTVL 5
#define STORE_TCP_KEEPCNT 3

struct ev_loop;
struct store_conn;

/* Group commit. While STORE_CONN_MAX_INFLIGHT script calls are in flight on a
 * connection, further calls queue; when one returns, the queue goes out as one
 * EVALSHA of the batch script (lua/batch.sh: many keys, per-key results), or
 * per slot with STORE_CONN_SLOTS. A queue of STORE_CONN_BATCH_MAX goes out at
 * once. A lone call is sent at once, as itself. */
#define STORE_CONN_MAX_INFLIGHT 2
#define STORE_CONN_BATCH_MAX 256

/* The owner's side. Hooks run on the loop thread, often from inside a hiredis
 * callback of this connection: they must not free the connection. */
struct store_conn_hooks {
    /* ready went 1 (connected, role checked, scripts loaded) or 0 (lost).
     * On 0 it runs before the commands in flight fail with STORE_DOWN. */
    void (*state)(void *owner, struct store_conn *conn, int ready);
    /* The backoff after a loss (or after store_conn_retry_later) has passed.
     * NULL: reconnect to the same address. The owner may change the address
     * and call store_conn_connect(), or call store_conn_retry_later(). */
    void (*retry)(void *owner, struct store_conn *conn);
    /* -MOVED (ask 0) or -ASK (ask 1) slot host:port. The command is no longer
     * in flight: the hook must send it elsewhere or fail it. host is valid
     * during the call only. NULL: a redirect is an error reply. */
    void (*redirect)(void *owner, struct store_conn *conn, struct store_cmd *cmd, int ask, int slot,
                     const char *host, int port);
};

/* Ask ROLE at connect and drop the connection unless it says master; a
 * -READONLY reply drops it too (Sentinel: the master was demoted). */
#define STORE_CONN_CHECK_ROLE 1
/* Redis Cluster node: a batch carries the keys of one hash slot only. */
#define STORE_CONN_SLOTS 2
/* New credentials on trial (store_auth_trial.h): its failures are not the
 * store's (not logged, not in store_why.h, no `redis_errors` warning; the
 * error replies are counted). */
#define STORE_CONN_TRIAL 4

/* A connection, not connected yet (see store_conn_connect). host NULL and
 * unix_path NULL: no address yet (store_conn_set_addr). NULL when out of
 * memory. */
struct store_conn *store_conn_new(struct store_env *env, const struct store_conn_hooks *hooks,
                                  void *owner, const char *host, int port, const char *unix_path,
                                  int flags);

/* Close: the commands in flight fail with STORE_DOWN, the hooks do not run.
 * Not from inside one of this connection's hooks. NULL no-op. */
void store_conn_free(struct store_conn *conn);

/* Change the TCP address used by the next connect. 0, or -1 out of memory. */
int store_conn_set_addr(struct store_conn *conn, const char *host, int port);

/* Start connecting now unless a connection exists or is being made. A
 * failure shows up later as a loss (state 0 and a retry after the backoff). */
void store_conn_connect(struct store_conn *conn);

/* Run the retry hook after the backoff, which then doubles. */
void store_conn_retry_later(struct store_conn *conn);

/* Give the current connection up now (the commands in flight fail with
 * STORE_DOWN, state 0 runs) and connect to host:port at once. Not from
 * inside one of this connection's hooks. 0, or -1 out of memory (nothing
 * changed). */
int store_conn_restart(struct store_conn *conn, const char *host, int port, const char *why);

/* Give the current connection up now (the commands in flight fail with
 * STORE_DOWN, state 0 runs) and run the retry hook after the backoff, as
 * after a loss. Not from inside one of this connection's hooks. */
void store_conn_drop(struct store_conn *conn, const char *why);

/* 1 when ready: connected, role checked, scripts loaded. */
int store_conn_ready(const struct store_conn *conn);

/* 1 when commands can be queued: connected or connecting (they go out after
 * the setup commands, in order). Only meaningful once env->sha is filled. */
int store_conn_usable(const struct store_conn *conn);

/* Send cmd (EVALSHA, ASKING first when cmd->asking), or queue it for the next
 * batch (see STORE_CONN_MAX_INFLIGHT). 0: taken, it completes as said at the
 * top. -1: not sent, the caller still owns cmd. */
int store_conn_send(struct store_conn *conn, struct store_cmd *cmd);

/* After env->corked went back to 0: send what queued meanwhile, as batches. */
void store_conn_uncork(struct store_conn *conn);

/* "host:port" or the unix path, for logs and comparisons. */
const char *store_conn_name(const struct store_conn *conn);
const char *store_conn_host(const struct store_conn *conn);
/* Why the last attempt to connect (or set up) failed, "" once ready. */
const char *store_conn_last_error(const struct store_conn *conn);
int store_conn_port(const struct store_conn *conn);

#endif
