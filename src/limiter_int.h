/* limiter_int.h - the limiter's own files only (limiter.c, limiter_ops.c):
 * its parts, and the Redis key of a client. Everything else goes through
 * limiter.h (decisions, limiter_inspect, limiter_reset), so that how a
 * bucket or lease is read and cleared stays in one place.
 */
#ifndef LIMITER_INT_H
#define LIMITER_INT_H

#include <stddef.h>
#include <stdint.h>

struct bucket_table;
struct cfg_rule;
struct lease_table;
struct limiter;
struct limiter_req;
struct metrics_rule;
struct slot_table;
struct store;

/* The Redis key of rule r's client key (as rules_match built it): prefix,
 * algorithm, rule, client key, as decisions use it. Its length, or 0 when it
 * does not fit in cap. */
size_t limiter_redis_key(const struct limiter *l, const struct cfg_rule *r, const char *key,
                         size_t keylen, char *buf, size_t cap);

/* What the limiter is made of: its in-memory buckets (used standalone), the
 * fail-open backstop buckets, and in Redis mode the lease cache and the
 * store (NULL standalone). The tables are thread-safe; the store is for the
 * limiter's thread only. */
struct limiter_parts {
    struct bucket_table *buckets, *backstop;
    struct lease_table *leases;
    struct store *store;
    struct slot_table *slots; /* concurrency: standalone, and the local share */
};
void limiter_parts(struct limiter *l, struct limiter_parts *out);

/* ---- concurrency (limiter_cc.c; the Redis calls in limiter.c) ---- */

struct bucket_params;

/* Decide concurrency hit i of req from the local slot table under p (its
 * limit and max_hold): standalone p is the rule's, in the fallback its
 * local share (the backstop). */
void limiter_cc_local(struct limiter *l, struct limiter_req *req, size_t i,
                      const struct bucket_params *p, uint64_t now_us);
/* Free the slots of req's release messages (ev->releases). */
void limiter_cc_releases(struct limiter *l, struct limiter_req *req, uint64_t now_us);
/* Count a release's outcome (m may be NULL: not counted). */
void limiter_cc_released(struct metrics_rule *m, int ok);
/* Free the local slots past max_hold (counted as expired). */
void limiter_cc_expire(struct limiter *l, uint64_t now_us);
/* Queue a cc_release of slot id of rule r (slot key skey): 0, or -1 when
 * standalone, Redis is down or out of memory (the slot then frees itself
 * after max_hold). Any thread. */
int limiter_queue_release(struct limiter *l, const struct cfg_rule *r, const char *skey,
                          size_t sklen, uint64_t id, struct metrics_rule *m);

#endif
