/* SPDX-License-Identifier: Apache-2.0 */
/* limiter_int.h - the limiter's bridge and its operator files only
 * (limiter.c, limiter_admin.c, limiter_reset.c): struct limiter, the core
 * it runs (limiter_core.h) with the loop and the store around it, and its
 * parts. Everything else goes through limiter.h (decisions,
 * limiter_inspect, limiter_reset), so that how a bucket or lease is read
 * and cleared stays in one place.
 */
#ifndef LIMITER_INT_H
#define LIMITER_INT_H

#include <ev.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "limiter/limiter_core.h"

struct bucket_table;
struct cfg_rule;
struct lease_job;
struct lease_table;
struct lease_waiter;
struct limiter;
struct limiter_req;
struct metrics_rule;
struct slot_table;
struct store;

/* What the limiter is made of: its in-memory buckets (used standalone), the
 * fail-open backstop buckets, and in Redis mode the lease cache and the
 * store (NULL standalone). The tables are thread-safe; the store is for the
 * limiter's thread only. */
struct limiter_parts {
    struct bucket_table *buckets, *backstop;
    struct lease_table *leases;
    struct store *store;
    struct slot_table *slots; /* concurrency: standalone, and the local share */
    struct slot_table *taken; /* concurrency: slots taken from Redis (limiter_cc.c) */
};
void limiter_parts(struct limiter *l, struct limiter_parts *out);

struct limiter {
    struct limiter_core core; /* what decides: buckets, backstop, slots, leases */
    /* Redis mode */
    struct store *store;
    struct store_heartbeat *heartbeat; /* with Redis: counts the fleet (fleet.h) */
    struct store_epoch *epoch;         /* with Redis: names a lost keyspace (store_epoch.h) */
    struct limiter_resets *resets;     /* with Redis: fleet-wide resets (limiter_reset.c) */
    struct gclaim *global;             /* with [global]: one quota across regions (gclaim.h) */
    struct ev_loop *loop;
    ev_async wake;
    /* One worker on this loop's own thread (limiter_inline): what it queues
     * is sent by limiter_pump() before the loop polls again, not through
     * the ev_async, which made the loop poll once more (an epoll_wait with
     * no timeout) for every batch. owner: the thread that runs loop. */
    int inline_on, inline_queued;
    pthread_t owner;
    /* on_set corked the store for the script calls of keys that were there
     * after all: wake_cb sends them (limiter thread only) */
    int evals_corked;
    ev_timer tick, timeouts;
    pthread_mutex_t qlock;
    struct rjob *queue;
    atomic_int up;
    atomic_int stalled; /* a call timed out and no reply came since */
    atomic_uint_fast64_t last_probe_us;
    uint64_t stall_logged_us; /* limiter thread only */
    int stall_announced;      /* the warning went out: say when it ends */
    /* redis_slow (limiter thread only): calls past timeout since it was
     * raised, the last one's time, and how long without one clears it */
    uint64_t slow_calls, slow_last_us, slow_quiet_us;
    struct rjob *ihead, *itail; /* in flight, in the order sent */
    struct rjob *icheck;        /* the first of them not timed out yet (the
                                   timed-out ones are a prefix of the list) */
    uint64_t timeout_us;
    uint64_t ttl_ms;
};

/* limiter_reset.c: fleet-wide resets. _new starts polling PREFIX "resets"
 * (NULL when out of memory); _publish tells the fleet that the client
 * client_key of rule (its Redis bucket redis_key) was reset here
 * and calls cb with the fleet's size and the agents that confirmed (this
 * one included) once all did or RESET_WAIT_S passed; _stop (before the
 * store is freed) answers what is still waiting; _free after the store. */
typedef void limiter_fleet_cb(void *arg, unsigned agents, unsigned confirmed);
struct limiter_resets *limiter_resets_new(struct limiter *l, double every_s);
void limiter_resets_publish(struct limiter *l, const char *rule, const char *client_key,
                            size_t client_keylen, const char *redis_key, size_t redis_keylen,
                            limiter_fleet_cb *cb, void *arg);
void limiter_resets_stop(struct limiter_resets *r);
void limiter_resets_free(struct limiter_resets *r);

#endif
