/* SPDX-License-Identifier: Apache-2.0 */
/* store_sentinel.h - where the master is, according to Redis Sentinel.
 * Internal to the store module.
 *
 * Asks the sentinels in their configured order, each within the timeout,
 * SENTINEL get-master-addr-by-name <master>, on demand and every second in
 * the background (so a failover is noticed even when the old master stays
 * reachable). Logs the master's address once per change.
 *
 * Split brain: an agent cut from every sentinel cannot learn that they
 * promoted a replica; the master it writes to may be the minority's. With
 * store_sentinel_watch, the owner hears when no sentinel has confirmed the
 * master for longer than a window (the sentinels' own failover time), and
 * treats the master as unconfirmed until one does again.
 */
#ifndef STORE_SENTINEL_H
#define STORE_SENTINEL_H

#include <stddef.h>
#include <stdint.h>

struct ev_loop;
struct net_hostport;
struct store_sentinel;
struct store_auth;

/* An answer: host:port of the master (valid during the call only), or host
 * NULL when no sentinel knew it. Runs on the loop thread after every
 * resolution, asked for or periodic. */
typedef void store_sentinel_cb(void *arg, const char *host, int port);

/* sentinels[0..n) (copied), asked in that order, after AUTH with auth when
 * it has a password (the sentinels' own: [redis] sentinel_username and
 * sentinel_password; owned by the caller, see store_probe.h). NULL with a
 * message in err when the list is empty, master is missing or memory is
 * short. Nothing is asked before store_sentinel_resolve. */
struct store_sentinel *store_sentinel_new(struct ev_loop *loop, uint64_t timeout_us,
                                          const struct net_hostport *sentinels, size_t n,
                                          const char *master, const struct store_auth *auth,
                                          store_sentinel_cb *cb, void *arg, char *err,
                                          size_t errlen);

/* No sentinel has confirmed the master for the window: runs once per
 * streak, on the loop thread; the next answer naming a master ends it (cb
 * runs with it as always). */
typedef void store_sentinel_lost_cb(void *arg);

/* Watch the confirmations: lost runs (with store_sentinel_new's arg) when
 * window_us passes after the last answer naming the master. The clock starts
 * at the first such answer: before it, nothing was confirmed to be lost (the
 * owner is not connected yet). */
void store_sentinel_watch(struct store_sentinel *sn, uint64_t window_us,
                          store_sentinel_lost_cb *lost);

/* NULL no-op; cb does not run any more. */
void store_sentinel_free(struct store_sentinel *sn);

/* Ask now (unless a question is under way: its answer will do), then keep
 * asking every second. cb may run before this returns. */
void store_sentinel_resolve(struct store_sentinel *sn);

#endif
