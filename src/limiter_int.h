/* limiter_int.h - the limiter's own files only (limiter.c, limiter_ops.c):
 * its parts, and the Redis key of a client. Everything else goes through
 * limiter.h (decisions, limiter_inspect, limiter_reset), so that how a
 * bucket or lease is read and cleared stays in one place.
 */
#ifndef LIMITER_INT_H
#define LIMITER_INT_H

#include <stddef.h>
#include <stdint.h>

#include "bucket.h"
#include "core/util.h"

struct bucket_table;
struct cfg_rule;
struct lease_table;
struct limiter;
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
};
void limiter_parts(struct limiter *l, struct limiter_parts *out);

struct limiter_req;

/* All of req's decisions are in (limiter_decide() or the last reply): with
 * [agent] charge = all-or-nothing and a non-shadow rule blocking req, give
 * back what the other non-shadow rules took for it (limiter_charge.c). A
 * shadow rule is charged alone: it keeps its tokens, and its would_block
 * refunds nothing. Any thread; once per request, before its ACK. */
void limiter_settle(struct limiter *l, struct limiter_req *req, uint64_t now_us);

/* Queue the refund script call for hit i of req (decided by an exact call:
 * out.charged_at is its Redis time) and wake the limiter's thread. 0, or -1
 * when it cannot be (out of memory, a key too long): the tokens then stay
 * taken, which only under-admits. Any thread. */
int limiter_queue_refund(struct limiter *l, const struct limiter_req *req, size_t i);

/* The time a bucket under p is taken (and given back) at: now_us, or for a
 * fixed window, aligned to the epoch, the wall clock (bucket.h). */
static inline uint64_t bucket_clock(const struct bucket_params *p, uint64_t now_us)
{
    return p->algorithm == BUCKET_FIXED_WINDOW ? util_wall_us() : now_us;
}

#endif
