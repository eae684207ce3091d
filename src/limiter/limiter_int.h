/* SPDX-License-Identifier: Apache-2.0 */
/* limiter_int.h - the limiter's own files only (limiter*.c):
 * its parts, and the Redis key of a client. Everything else goes through
 * limiter.h (decisions, limiter_inspect, limiter_reset), so that how a
 * bucket or lease is read and cleared stays in one place.
 */
#ifndef LIMITER_INT_H
#define LIMITER_INT_H

#include <ev.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "limits/bucket.h"
#include "core/util.h"

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

struct limiter_req;

/* limiter_settle()'s slots part (limiter_cc.c): a blocked request gives
 * back the slots its concurrency hits took (shadow rules' too). */
void limiter_cc_settle(struct limiter *l, struct limiter_req *req, uint64_t now_us);
/* limiter_settle() (limiter.h), in limiter_charge.c. */
void limiter_charge_settle(struct limiter *l, struct limiter_req *req, uint64_t now_us);

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

/* RJOB_REFUND: tokens an exact decision took go back (limiter_charge.c);
 * nobody waits for it. RJOB_CC takes a concurrency slot (waited for, like
 * RJOB_EXACT); RJOB_CC_RELEASE gives one back (nobody waits: counted when
 * answered). */
enum rjob_kind {
    RJOB_LEASE = 0,
    RJOB_EXACT = 1,
    RJOB_REFUND = 2,
    RJOB_CC = 3,
    RJOB_CC_RELEASE = 4,
};

/* A Redis call: queued by a worker, then in flight on the limiter's thread
 * (limiter.c; limiter_cc.c makes and answers the concurrency ones). */
struct rjob {
    struct rjob *next;               /* queue */
    struct rjob *iprev, *inext;      /* in flight, oldest first */
    struct limiter *l;
    int kind;
    int timed_out;
    uint64_t sent_us;
    struct lease_job *lj;            /* RJOB_LEASE */
    struct lease_waiter *w;          /* RJOB_EXACT: NULL once answered by fallback */
    enum bucket_algorithm algorithm; /* RJOB_EXACT */
    uint64_t limit, period_ms, burst;
    uint64_t offset_ms;              /* RJOB_EXACT, RJOB_REFUND: a fixed window's window_offset */
    uint64_t cost;                   /* RJOB_EXACT: tokens the request takes;
                                        RJOB_REFUND: tokens given back */
    uint64_t block_ms;               /* RJOB_EXACT: the rule's block_for (0: none) */
    uint64_t taken_ms;               /* RJOB_REFUND: EXACT_R_TIME_MS of the take */
    uint64_t slot_id;                /* RJOB_CC, RJOB_CC_RELEASE */
    struct metrics_rule *m;          /* RJOB_REFUND, RJOB_CC, RJOB_CC_RELEASE: the rule's
                                        counters */
    size_t keylen;
    char key[];                      /* RJOB_EXACT, RJOB_REFUND, RJOB_CC, RJOB_CC_RELEASE */
};

struct store_result;

/* What the layers below limiter.c call up to, set by limiter_new (a
 * function pointer, not a call into limiter.c): send j from the limiter's
 * thread; one decision of req is in; decide hit i of req without Redis. */
struct limiter_up {
    void (*send)(struct limiter *l, struct rjob *j);
    void (*hit_done)(struct limiter *l, struct limiter_req *req);
    void (*fallback)(struct limiter *l, struct limiter_req *req, size_t i, uint64_t now_us);
    /* j (in flight) as its script call, now; j's reply (a store callback) */
    void (*eval)(struct limiter *l, struct rjob *j);
    void (*reply)(void *arg, const struct store_result *res);
};

struct limiter {
    struct bucket_table *buckets;  /* standalone */
    struct bucket_table *backstop; /* fail-open while Redis is down */
    struct bucket_budget budget;   /* [agent] max_entries: buckets and leases together */
    struct slot_table *slots;      /* concurrency: standalone, and the local share */
    /* Redis mode */
    struct store *store;
    struct store_heartbeat *heartbeat; /* with Redis: counts the fleet (fleet.h) */
    struct store_epoch *epoch;         /* with Redis: names a lost keyspace (store_epoch.h) */
    struct limiter_resets *resets;     /* with Redis: fleet-wide resets (limiter_reset.c) */
    struct lease_table *leases;
    struct ev_loop *loop;
    ev_async wake;
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
    char prefix[80];
    size_t prefix_len;
    const struct limiter_up *ops; /* limiter.c's, set by limiter_new */
};


/* limiter_reset.c: fleet-wide resets. _new starts polling PREFIX "resets"
 * (NULL when out of memory); _publish tells the fleet that w was reset here
 * and calls cb with the fleet's size and the agents that confirmed (this
 * one included) once all did or RESET_WAIT_S passed; _stop (before the
 * store is freed) answers what is still waiting; _free after the store. */
struct limiter_who;
typedef void limiter_fleet_cb(void *arg, unsigned agents, unsigned confirmed);
struct limiter_resets *limiter_resets_new(struct limiter *l, double every_s);
void limiter_resets_publish(struct limiter *l, const struct limiter_who *w, limiter_fleet_cb *cb,
                            void *arg);
void limiter_resets_stop(struct limiter_resets *r);
void limiter_resets_free(struct limiter_resets *r);

static inline void limiter_job_send(struct limiter *l, struct rjob *j)
{
    l->ops->send(l, j);
}

static inline void limiter_hit_done(struct limiter *l, struct limiter_req *req)
{
    l->ops->hit_done(l, req);
}

static inline void limiter_fallback(struct limiter *l, struct limiter_req *req, size_t i,
                                    uint64_t now_us)
{
    l->ops->fallback(l, req, i, now_us);
}

/* limiter_jobs.c: queue j from any thread (wake: make the limiter's thread
 * send it now); whether Redis is configured and up; the Redis key of hit h
 * of req; a call on one key with hit h's limits and cost (RJOB_EXACT,
 * RJOB_REFUND), NULL when out of memory. */
#define KEYBUF 1024
void limiter_job_queue(struct limiter *l, struct rjob *j, int wake);
int limiter_redis_up(struct limiter *l);
struct rule_hit;
size_t limiter_hit_redis_key(const struct limiter *l, const struct limiter_req *req,
                             const struct rule_hit *h, char *buf, size_t cap);
struct rjob *limiter_key_call(struct limiter *l, int kind, const struct rule_hit *h,
                              const char *key, size_t keylen);

/* ---- a new key's first decision (limiter_first.c) ---- */

/* Send j (in flight) as one plain SET NX GET PX when it is a token bucket's
 * cold exact decision on a key this agent has no record of; its reply comes
 * through l->ops->reply as the script's would. -1: not such a call, nothing
 * sent. */
int limiter_first_send(struct limiter *l, struct rjob *j);

/* ---- concurrency (limiter_cc.c) ---- */

/* A cc_acquire or cc_release call is in (res NULL: failed): frees j. */
void limiter_cc_reply(struct limiter *l, struct rjob *j, const struct store_result *res,
                      uint64_t now_us);
/* Hit i of a concurrency rule: one cc_acquire on Redis key key. 0 when
 * queued, -1 when it cannot be (Redis down, out of memory). */
int limiter_cc_queue(struct limiter *l, struct limiter_req *req, size_t i, const char *key,
                     size_t keylen, int up);

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
