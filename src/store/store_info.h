/* SPDX-License-Identifier: Apache-2.0 */
/* store_info.h - what INFO says about eviction on each Redis the agent uses
 * (the url's server, the master Sentinel names, every Cluster master).
 * Internal to the store module; the parser of INFO's fields is pure, in
 * store_info_parse.h (libcore), so that unit tests reach it.
 *
 * A Redis with maxmemory set and a maxmemory-policy that can evict our keys
 * (allkeys-*, and volatile-* since every key the agent writes has a TTL)
 * drops buckets under memory pressure: a dropped bucket comes back full, and
 * the limit silently lets more through. Each connection is asked INFO when
 * it becomes ready and every minute after. An eviction-prone server is
 * reported once (a warning, the gauge redis_eviction_possible); its
 * evicted_keys goes to a gauge and a growth is logged. With [redis]
 * require_noeviction = yes such a server counts as down (an error line) until
 * its policy changes. An INFO that is refused (an ACL without it, a managed
 * Redis that renamed it) is said once; the agent goes on without the check.
 */
#ifndef STORE_INFO_H
#define STORE_INFO_H

#include "store_info_parse.h"

struct ev_loop;
struct store_conn;
struct store_info;

/* poll(arg) is asked every minute to call store_info_ask() on every ready
 * connection; changed(arg) runs when store_info_ok() may have changed. */
struct store_info *store_info_new(struct ev_loop *loop, int require_noeviction,
                                  void (*poll)(void *arg), void (*changed)(void *arg), void *arg);

/* Stop the timer. Call before the connections are freed (their INFO
 * callbacks still run then), and store_info_free() after. */
void store_info_stop(struct store_info *si);
void store_info_free(struct store_info *si); /* NULL no-op */

/* Send INFO on conn (ready). at_connect: the connection just became ready;
 * with require_noeviction, store_info_ok() is 0 until it answers. */
void store_info_ask(struct store_info *si, struct store_conn *conn, int at_connect);

/* 0 when require_noeviction is on and a server in use can evict our keys, or
 * a new connection's answer is still awaited; else 1. */
int store_info_ok(const struct store_info *si);

#endif
