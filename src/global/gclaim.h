/* SPDX-License-Identifier: Apache-2.0 */
/* gclaim.h - one quota across regions (doc/design.md, "Regions"): the
 * agent's side of a scope = global rule beyond its decisions, on the loop
 * thread, never on a request's path.
 *
 * Every agent of a region:
 *   - notes the keys of scope = global rules it sends calls for
 *     (gclaim_note), and each [global] interval adds them to the region's
 *     set of active keys, PREFIX "g:active" in the regional Redis (a sorted
 *     set scored by the time last seen, ms; members "LIMIT:PERIOD_MS:BURST:
 *     KEY" with KEY the bucket's name after [redis] prefix);
 *   - each interval asks for the region's lease lock, PREFIX "g:lock"
 *     (g_lock.lua, its ttl three intervals): the one that holds it is the
 *     region's claimer.
 *
 * The claimer, each interval, in one round: reads the active keys, reads
 * each key's regional bucket (tb_pool.lua, nothing moved), plans (gplan.h),
 * withdraws a surplus or deposits a backstop share, then sends one pipelined
 * call to the global Redis (tb_claim.lua on [global] prefix + KEY, the
 * region's name as the agent) for every key with something to do, and
 * deposits what it was granted, with the lease's deadline. Its own store
 * (connection) to the global Redis: a slow or far one delays rounds, never
 * a decision. The number of regions seen (the global set GPREFIX
 * "g:regions", a member per region, scored by its last round) sizes the
 * standing and backstop shares.
 */
#ifndef GCLAIM_H
#define GCLAIM_H

#include <stddef.h>
#include <stdint.h>

#include "store/store_result.h"

struct ev_loop;
struct config;
struct store;
struct gclaim;

/* What the claimer and this agent saw, for /metrics, the status page and
 * /key (loop thread writes; readers take a snapshot). */
struct gclaim_stats {
    int configured;       /* a [global] section */
    int up;               /* the global Redis' connection is up */
    int claimer;          /* this agent holds its region's lease lock */
    unsigned regions;     /* regions seen (0: none yet) */
    uint64_t calls;       /* global calls (batches) sent */
    uint64_t claims;      /* operations in them (one per key and round) */
    uint64_t failed;      /* calls that failed (down, error) */
    uint64_t granted;     /* tokens granted by the global bucket */
    uint64_t returned;    /* tokens given back to it */
    uint64_t backstop;    /* backstop tokens deposited while it was unreachable */
    uint64_t forfeited;   /* tokens dropped at a lease's end or a failed give-back */
    size_t keys;          /* keys the claimer follows */
    double rtt_ms;        /* the global calls' round trip, smoothed */
    char region[64];
};

/* Connect to [global] and start the rounds. regional: the limiter's store
 * ([redis]); agent_id: this agent's (store_agent_id). NULL with a message
 * in err when the settings cannot be used. */
struct gclaim *gclaim_new(struct ev_loop *loop, const struct config *cfg, struct store *regional,
                          const char *agent_id, char *err, size_t errlen);

/* SIGHUP: the global url and credentials, and the reserve (the rest is
 * restart-only). */
int gclaim_reconfigure(struct gclaim *g, const struct config *cfg);

/* The region's reserve of a key of a scope = global rule of burst burst:
 * [global] reserve x burst / regions (bucket_fed_reserve), what a missing
 * regional key holds; 0 while the regions are not known yet, or g NULL.
 * Loop thread. */
uint64_t gclaim_reserve(const struct gclaim *g, uint64_t burst);

/* POST /reset of a scope = global rule's key (after [redis] prefix): its
 * global bucket full again less what the regions hold (tb_reset on the
 * global Redis, at the global bucket's burst: the rule's less the
 * regions' reserves). cb gets tb_reset's reply (store_result) exactly
 * once, on the loop thread. -1 (cb not called): g NULL or stopped. */
int gclaim_reset(struct gclaim *g, const char *key, size_t keylen, uint64_t limit,
                 uint64_t period_ms, uint64_t burst, store_cb *cb, void *arg);

/* The key (after [redis] prefix: "t2:RULE:CLIENT") of a scope = global
 * rule, with its rule's limit, period and burst, was sent a call: it is
 * active in this region. Loop thread; cheap (a set insert). */
void gclaim_note(struct gclaim *g, const char *key, size_t keylen, uint64_t limit,
                 uint64_t period_ms, uint64_t burst);

/* Stop the rounds, give the lock back (when up) and close the global
 * connection; calls on the regional store still in flight complete later
 * (their callbacks do nothing more). Before the regional store is freed. */
void gclaim_stop(struct gclaim *g);
/* After the regional store is freed. NULL: no-op. */
void gclaim_free(struct gclaim *g);

/* A snapshot of the counters. */
void gclaim_stats(const struct gclaim *g, struct gclaim_stats *out);

/* What the claimer holds for KEY (as gclaim_note's), for /key: 0 and *out
 * filled, or -1 when it follows no such key (or this agent is not the
 * claimer). */
struct gclaim_key_state {
    uint64_t gheld, pool, deadline_ms; /* deadline: ms from now (0: holds nothing) */
    double est;
    int backstop;
};
int gclaim_key(const struct gclaim *g, const char *key, size_t keylen,
               struct gclaim_key_state *out);

/* The process-wide instance (NULL: no [global]), for metrics and pages. */
extern struct gclaim *gclaim_current;

#endif
