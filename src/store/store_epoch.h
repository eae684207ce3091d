/* SPDX-License-Identifier: Apache-2.0 */
/* store_epoch.h - the agent's keyspace is marked, so that its loss is named.
 *
 * One key per prefix, PREFIX "epoch", holds a random id: the keyspace's
 * epoch. The first agent to find it missing writes it (one EVAL: GET, and
 * SET when there is none, atomically); every agent of the fleet then shares
 * that id and remembers it. Every [redis] epoch_check (1 s), and at once
 * whenever the store comes up, each agent sends that EVAL again with a fresh
 * candidate id:
 *
 *   the id it remembers    nothing happened;
 *   no key                 the keyspace vanished (Redis restarted empty,
 *                          FLUSHDB/FLUSHALL, a failover to a replica that
 *                          lacked it): this agent's candidate is the new
 *                          epoch; a loss;
 *   another id             another agent saw the loss first and marked the
 *                          keyspace again; a loss.
 *
 * So every agent counts each loss once (metrics.redis_state_lost), however
 * many agents there are, and a later check finds the new epoch. A loss raises
 * the warning redis_state_lost (warning.h) for STORE_EPOCH_WARN_FOR, then
 * clears it; and calls the owner's on_lost (the limiter voids its leases:
 * lease_void_all). The first answer after start only adopts the id.
 *
 * Redis Cluster: a flush or an empty restart is per master, so there are
 * STORE_EPOCH_SPREAD epoch keys, PREFIX "epoch{TAG}", one in each range of
 * 16384 / STORE_EPOCH_SPREAD slots: every master holding that many slots in
 * a row holds one. A round (one EVAL per key, each to its master) that finds
 * any of them lost counts one loss. A prefix with a {hashtag} keeps every
 * key in one slot: then PREFIX "epoch" alone, in that slot, sees it all.
 *
 * What it cannot see: a loss that spares the epoch key(s), i.e. a replica
 * that missed recent writes but had them, or a Cluster master holding fewer
 * than 16384 / STORE_EPOCH_SPREAD slots in a row. Two losses between two
 * checks of an agent count once there.
 *
 * A client of the store through store.h alone, as store_heartbeat.h is.
 */
#ifndef STORE_EPOCH_H
#define STORE_EPOCH_H

#include <stddef.h>
#include <stdatomic.h>

#define STORE_EPOCH_WARN_FOR 600.0 /* seconds redis_state_lost stays raised after a loss */
#define STORE_EPOCH_ID_MAX 64      /* bytes of an id kept (ours are 32 hex digits) */
#define STORE_EPOCH_SPREAD 16      /* Cluster: epoch keys, one per 1024 slots */

struct ev_loop;
struct store;
struct store_epoch;

/* What one answer means for an agent that remembers the id known ("" when
 * none yet), when Redis answered cur (cur_len bytes; whether it was this
 * agent's SET that wrote it does not matter). */
enum store_epoch_verdict {
    STORE_EPOCH_SAME = 0,    /* the keyspace is the one it knew */
    STORE_EPOCH_ADOPTED = 1, /* its first answer: the id is remembered, no loss */
    STORE_EPOCH_LOST = 2,    /* the keyspace vanished or changed: remember cur */
};
enum store_epoch_verdict store_epoch_judge(const char *known, const char *cur, size_t cur_len);

/* Check the epoch under prefix on s every `every` seconds ([redis]
 * epoch_check) and whenever s comes up (store_on_state). on_lost(arg) runs
 * on the loop's thread after each loss is counted (may be NULL). NULL when
 * out of memory. */
struct store_epoch *store_epoch_new(struct ev_loop *loop, struct store *s, const char *prefix,
                                    double every, void (*on_lost)(void *arg), void *arg);

/* What a loss is called, for one Redis: the warning it raises (and clears
 * STORE_EPOCH_WARN_FOR later), the counter it adds to, the log message, and
 * the warning's words: what was lost, and what that costs. */
struct store_epoch_names {
    int kind;                  /* enum warning_kind */
    atomic_uint_fast64_t *counter; /* in metrics */
    const char *log, *what, *cost;
};
/* The global Redis' ([global]: global_state_lost, global_state_lost_total);
 * store_epoch_new's are [redis]'s (redis_state_lost). */
extern const struct store_epoch_names store_epoch_global;

/* store_epoch_new() for another Redis than [redis]: its loss is named by
 * names. */
struct store_epoch *store_epoch_new_as(struct ev_loop *loop, struct store *s, const char *prefix,
                                       double every, const struct store_epoch_names *names,
                                       void (*on_lost)(void *arg), void *arg);

/* Stop checking: before the store is freed (a check in flight then
 * completes with STORE_DOWN). store_epoch_free() after the store is freed,
 * since the store calls its watcher until then. */
void store_epoch_stop(struct store_epoch *ep); /* NULL no-op */
void store_epoch_free(struct store_epoch *ep); /* NULL no-op */

#endif
