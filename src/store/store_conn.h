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

#include "store.h"
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

/* One store_eval() call: EVALSHA sha 1 key args... Owned by the store until
 * its callback has run (store_cmd_fail or a reply). */
struct store_cmd {
    store_cb *cb;
    void *arg;
    uint64_t sent_us;        /* last sent; the watchdog looks at the oldest */
    uint64_t first_us;       /* first sent: the latency reported to the caller */
    int script;
    unsigned noscript_retried : 1;
    unsigned moved : 1;      /* followed a -MOVED already */
    unsigned asked : 1;      /* followed an -ASK already */
    unsigned asking : 1;     /* send ASKING first (the last redirect was -ASK) */
    unsigned batch : 1;      /* carries members (below) */
    unsigned read : 1;       /* store_read(): argv is the command as is, no sha;
                              * never batched; key in rkey */
    unsigned pooled : 1;     /* a CMD_BLOCK block, recycled (store_cmd.c) */
    int argc;                /* a batch: 0 (its request is written from its members) */
    char **argv;             /* argv[1] is NULL: the sha is written when sent */
    size_t *argvlen;
    struct store_conn *conn; /* where it is in flight; NULL when not */
    struct store_cmd *prev, *next;
    /* A batch: the calls it carries, in reply order (linked by mnext); its
     * argv borrows their keys and arguments. NULL for a single call. */
    struct store_cmd *members, *mnext;
    unsigned nmembers;
    const char *rkey;        /* a read's routing key (in the same block) */
    size_t rkeylen;
};

/* A copy of the call; NULL when out of memory. */
struct store_cmd *store_cmd_new(enum store_script script, const char *key, size_t keylen, int argc,
                                const char *const *argv, const size_t *argvlen, store_cb *cb,
                                void *arg);

/* A copy of a read command (store_read): argv as given, routed by key.
 * NULL when out of memory. */
struct store_cmd *store_cmd_new_read(const char *key, size_t keylen, int argc,
                                     const char *const *argv, const size_t *argvlen, store_cb *cb,
                                     void *arg);

/* Free a command (a batch: not its members). NULL no-op. */
void store_cmd_free(struct store_cmd *c);

/* Free the blocks this thread keeps for new commands (store_cmd_free
 * recycles them). For the end of a store, on its thread. */
void store_cmd_pool_drain(void);

/* One EVALSHA of the batch script carrying the n calls of list (linked by
 * mnext, each a store_cmd_new() of one script): "EVALSHA sha n key... then
 * per call script argc args...". Its callback fails every member; a reply
 * goes to store_batch_reply(). NULL when out of memory (list untouched). */
struct store_cmd *store_batch_new(struct store_cmd *list, unsigned n);

/* The request of c (a call, a read, or a batch) into w, reset first: sha
 * (STORE_SHA_LEN bytes; unused for a read) goes in place of argv[1], and a
 * batch is written from its members. 0, or -1 when out of memory. */
int store_cmd_format(const struct store_cmd *c, const char *sha, struct store_resp *w);

struct redisReply;

/* Hand each member of batch b its part of reply ("n v1 .. vn" per call, in
 * order: lua/batch.sh), running and freeing each; members the reply does not
 * cover fail. now: for the latency reported. */
void store_batch_reply(struct store_cmd *b, const struct redisReply *reply, uint64_t now);

/* Hand a read command its reply (strings of an array, or an integer), run
 * its callback and free it. now: for the latency reported. */
void store_cmd_read_reply(struct store_cmd *c, const struct redisReply *reply, uint64_t now);

/* The key of the command (argv[3]; a read's routing key; a batch's first
 * member's). */
const char *store_cmd_key(const struct store_cmd *c, size_t *len);

/* Run the callback with status (STORE_DOWN or STORE_ERR) and err, then free
 * the command. It must not be in flight. */
void store_cmd_fail(struct store_cmd *c, int status, const char *err);

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
    void (*redirect)(void *owner, struct store_conn *conn, struct store_cmd *cmd, int ask,
                     int slot, const char *host, int port);
};

/* Ask ROLE at connect and drop the connection unless it says master; a
 * -READONLY reply drops it too (Sentinel: the master was demoted). */
#define STORE_CONN_CHECK_ROLE 1
/* Redis Cluster node: a batch carries the keys of one hash slot only. */
#define STORE_CONN_SLOTS 2

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
int store_conn_port(const struct store_conn *conn);

#endif
