/* SPDX-License-Identifier: Apache-2.0 */
/* store_lookup.h - host name lookups off the event loop. Internal to the
 * store module.
 *
 * hiredis resolves the host it is given with a blocking getaddrinfo() on the
 * calling thread: for a name, on the loop that also runs every Redis call,
 * the fallback timers and the stats listener, so one slow DNS answer would
 * stall them all, at every reconnect. The store therefore hands hiredis only
 * numeric addresses: a name (from [redis] url, cluster, sentinel, or learned
 * at run time from CLUSTER SLOTS, -MOVED/-ASK or Sentinel, which announce
 * names when Redis is set up to, e.g. cluster-preferred-endpoint-type
 * hostname or sentinel announce-hostnames yes) is looked up on a short-lived
 * thread of its own, at every connect, so that a changed DNS record is
 * followed. The answer comes back on the loop.
 *
 * A lookup ends in exactly one callback: the address, a failure, or a
 * timeout (STORE_LOOKUP_TIMEOUT_S, beyond the resolver's own), unless it is
 * cancelled first. At most STORE_LOOKUP_MAX run at once.
 */
#ifndef STORE_LOOKUP_H
#define STORE_LOOKUP_H

struct ev_loop;
struct store_lookup;

#define STORE_LOOKUP_TIMEOUT_S 10.0
#define STORE_LOOKUP_MAX 32

/* ip: the host's first TCP address, numeric (valid during the call); NULL on
 * failure, with the reason in err. Runs on the loop's thread; the lookup is
 * gone when it returns. */
typedef void store_lookup_cb(void *arg, const char *ip, const char *err);

/* Start looking host up; cb runs later, on loop, never from inside this
 * call. NULL when no lookup could start (out of memory, threads, or
 * STORE_LOOKUP_MAX reached): nothing runs then. */
struct store_lookup *store_lookup_start(struct ev_loop *loop, const char *host, store_lookup_cb *cb,
                                        void *arg);

/* The callback will not run. Only before it ran. NULL no-op. */
void store_lookup_cancel(struct store_lookup *l);

#endif
