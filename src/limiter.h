/* limiter.h - where decisions are taken: in-memory buckets (standalone mode
 * and the fail-open backstop) or, with Redis, the lease cache and exact
 * script calls.
 *
 * Threads: limiter_decide() runs on worker threads; everything that talks to
 * Redis runs on the loop given to limiter_new() (the main thread), which
 * workers wake with an ev_async. A request whose decisions must wait for
 * Redis is completed from that thread through its done() callback.
 */
#ifndef LIMITER_H
#define LIMITER_H

#include <stdatomic.h>
#include <stdint.h>

#include "bucket.h"
#include "lease/lease.h"
#include "rules/rules.h"

struct ev_loop;
struct config;
struct limiter;

/* One NOTIFY's decisions. The caller fills ev and rs (holding a reference
 * on rs), and sets done. */
struct limiter_req {
    struct rule_eval ev;
    struct ruleset *rs;
    atomic_uint waiting;
    struct lease_waiter *waiters; /* one per hit */
    size_t waiters_cap;
    /* Called once when decisions had to wait and the last one is in: from
     * the limiter's thread, never from inside limiter_decide(). */
    void (*done)(struct limiter_req *req);
};

/* Standalone when cfg has no Redis. NULL with a message in err on failure. */
struct limiter *limiter_new(struct ev_loop *loop, const struct config *cfg, char *err,
                            size_t errlen);
/* Give back every leased token, wait (at most timeout_s) for Redis to answer,
 * close the connection. The loop must not be running elsewhere. */
void limiter_shutdown(struct limiter *l, double timeout_s);
void limiter_free(struct limiter *l);

/* Decide every hit of req->ev at now_us. Returns 0 when all outcomes are
 * filled, 1 when some wait for Redis (req->done will be called), -1 when
 * out of memory. */
int limiter_decide(struct limiter *l, struct limiter_req *req, uint64_t now_us);

/* Release what limiter_decide() allocated in req (not req itself). */
void limiter_req_release(struct limiter_req *req);

/* Drop idle in-memory buckets (call from a timer on the limiter's loop); rs
 * gives the current parameters. */
size_t limiter_expire(struct limiter *l, const struct ruleset *rs, uint64_t now_us,
                      size_t max_visit);

/* 1 with Redis configured, 0 standalone. */
int limiter_redis(const struct limiter *l);

/* ---- one client, for the operator (GET /key, POST /reset: keyapi.c) ------ */

struct cfg_rule;
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

#endif
