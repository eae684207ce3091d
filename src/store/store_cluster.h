/* SPDX-License-Identifier: Apache-2.0 */
/* store_cluster.h - Redis Cluster: the slot map, one connection per master,
 * routing by key slot, -MOVED and -ASK. Internal to the store module.
 *
 * The map comes from CLUSTER SLOTS, asked of the known masters and then the
 * seeds, in order, each within the timeout; it is asked again (at most every
 * 100 ms) after a -MOVED, when a node connection is lost, and until a first
 * map is loaded. Every master of the map gets a store_conn (scripts loaded at
 * its connect); masters that left the map are closed.
 *
 * Up: the map is loaded and at least one master connection is ready. A
 * command whose master is not connected fails alone with STORE_DOWN, so only
 * the keys of that master fall back.
 */
#ifndef STORE_CLUSTER_H
#define STORE_CLUSTER_H

#include <stddef.h>
#include <stdint.h>

#define STORE_CLUSTER_SLOTS 16384

struct net_hostport;
struct store_env;
struct store_conn;
struct store_cmd;
struct store_cluster;
struct store_auth;

/* The hash slot of a key: CRC16 (XMODEM: polynomial 0x1021, initial value 0)
 * of the key, or of its {hashtag} when it has a non-empty one, mod 16384. */
unsigned store_cluster_slot(const char *key, size_t len);

/* Keep the seeds[0..n) (copied) and ask the first map at once (after AUTH
 * with auth, the nodes' credentials, when it has a password; owned by the
 * caller, see store_probe.h). up_cb runs on every change of "up". NULL with a
 * message in err on an empty list or out of memory. */
struct store_cluster *store_cluster_new(struct store_env *env, const struct net_hostport *seeds,
                                        size_t n, const struct store_auth *auth,
                                        void (*up_cb)(void *arg, int up), void *arg, char *err,
                                        size_t errlen);

/* Give up every node connection and connect again at once (new
 * credentials): their commands in flight fail with STORE_DOWN. Not from
 * inside a node's hooks. */
void store_cluster_reconnect(struct store_cluster *cl, const char *why);

/* Close every node connection: commands in flight fail with STORE_DOWN.
 * NULL no-op. */
void store_cluster_free(struct store_cluster *cl);

/* 1 when up (see the top). */
int store_cluster_up(const struct store_cluster *cl);

/* Send cmd to the master of its key's slot. 0 in flight; -1 not sent (no map
 * for the slot, or its master is not connected): the caller still owns cmd. */
int store_cluster_send(struct store_cluster *cl, struct store_cmd *cmd);

/* fn(arg, conn) when a master's connection becomes ready, before the
 * cluster's up state is updated, e.g. to read its INFO. */
void store_cluster_on_node_ready(struct store_cluster *cl,
                                 void (*fn)(void *arg, struct store_conn *conn), void *arg);

/* fn(arg, conn) for every master connection that is ready. */
void store_cluster_each_ready(struct store_cluster *cl,
                              void (*fn)(void *arg, struct store_conn *conn), void *arg);

/* store_conn_uncork() on every node connection. */
void store_cluster_uncork(struct store_cluster *cl);

#endif
