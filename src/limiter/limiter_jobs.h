/* SPDX-License-Identifier: Apache-2.0 */
/* limiter_jobs.h - what the limiter's core files share, below all of them
 * (limiter_jobs.c): the core's tables (struct limiter_core), a Redis call as
 * data (struct rjob) and the list the core hands them back in (struct
 * core_jobs), a client's Redis key, and the script a job is sent with.
 */
#ifndef LIMITER_JOBS_H
#define LIMITER_JOBS_H

#include <stddef.h>
#include <stdint.h>

#include "core/util.h"
#include "limits/bucket.h"
#include "rules/rules.h"
#include "store/script.h"

struct bucket_table;
struct cfg_rule;
struct lease_job;
struct lease_table;
struct lease_waiter;
struct limiter;
struct limiter_req;
struct metrics_rule;
struct rule_hit;
struct script_args;
struct slot_table;

#define KEYBUF 1024

/* What the core decides with: the in-memory buckets (standalone), the
 * fail-open backstop, the slots (standalone, and the local share), and in
 * Redis mode the lease cache. The tables are thread-safe. */
struct limiter_core {
    struct bucket_table *buckets, *backstop;
    struct bucket_budget budget; /* [agent] max_entries: buckets and leases together */
    struct slot_table *slots;
    /* Redis mode: the slots this agent took from Redis, by Redis key, each
     * until its release message or its max_hold (when Redis frees it):
     * what spoa_ratelimit_slots_held counts of them (limiter_cc.c). */
    struct slot_table *taken;
    struct lease_table *leases; /* NULL standalone */
    int redis;                  /* Redis is configured */
    /* The wall clock fixed windows count on (aligned to the epoch):
     * util_wall_us, set by core_init; a test's own. The core reads no
     * clock itself: the monotonic one comes with each call. */
    uint64_t (*wall_us)(void);
    char prefix[80]; /* [redis] prefix */
    size_t prefix_len;
};

/* RJOB_REFUND: tokens an exact decision took go back; nobody waits for it.
 * RJOB_CC takes a concurrency slot (waited for, like RJOB_EXACT);
 * RJOB_CC_RELEASE gives one back (nobody waits: counted when answered). */
enum rjob_kind {
    RJOB_LEASE = 0,
    RJOB_EXACT = 1,
    RJOB_REFUND = 2,
    RJOB_CC = 3,
    RJOB_CC_RELEASE = 4,
};

/* A Redis call, as data: made by the core, sent by the bridge, answered
 * back into the core (core_reply). The first fields are the bridge's. */
struct rjob {
    struct rjob *next;          /* queue, struct core_jobs */
    struct rjob *iprev, *inext; /* (bridge) in flight, oldest first */
    struct limiter *l;          /* (bridge) */
    int timed_out;              /* (bridge) */
    uint64_t sent_us;           /* (bridge) */
    int kind;
    struct lease_job *lj;            /* RJOB_LEASE */
    struct lease_waiter *w;          /* RJOB_EXACT, RJOB_CC: NULL once answered by fallback */
    enum bucket_algorithm algorithm; /* RJOB_EXACT */
    uint64_t limit, period_ms, burst;
    int fed;                /* RJOB_EXACT, RJOB_REFUND: a scope = global rule's bucket */
    uint64_t offset_ms;     /* RJOB_EXACT, RJOB_REFUND: a fixed window's window_offset */
    uint64_t cost;          /* RJOB_EXACT: tokens the request takes;
                               RJOB_REFUND: tokens given back */
    uint64_t block_ms;      /* RJOB_EXACT: the rule's block_for (0: none) */
    int leased;             /* RJOB_EXACT: for a leased key (lease_note_exact) */
    uint64_t taken_ms;      /* RJOB_REFUND: EXACT_R_TIME_MS of the take */
    uint64_t slot_id;       /* RJOB_CC, RJOB_CC_RELEASE */
    struct metrics_rule *m; /* RJOB_REFUND, RJOB_CC, RJOB_CC_RELEASE: the rule's
                               counters */
    size_t keylen;
    char key[]; /* RJOB_EXACT, RJOB_REFUND, RJOB_CC, RJOB_CC_RELEASE */
};

/* Jobs the core hands back to be sent, in the order made. */
struct core_jobs {
    struct rjob *head, *tail;
};

static inline void core_jobs_push(struct core_jobs *o, struct rjob *j)
{
    j->next = NULL;
    if (o->tail)
        o->tail->next = j;
    else
        o->head = j;
    o->tail = j;
}

/* The time a bucket under p is taken (and given back) at: now_us, or for a
 * fixed window, aligned to the epoch, c's wall clock (bucket.h). */
static inline uint64_t core_clock(const struct limiter_core *c, const struct bucket_params *p,
                                  uint64_t now_us)
{
    return p->algorithm == BUCKET_FIXED_WINDOW ? c->wall_us() : now_us;
}

/* What hit i of a request is decided on, worked out once before it is
 * (core_hit_keys), so that the decision, its fallback and its refund read
 * it instead of each building it again: the rule, the client key (for a
 * concurrency rule, its slot key), the clock its buckets are taken at
 * (the backstop counts with the rule's algorithm, so the same clock), and
 * in Redis mode the Redis key. */
struct hit_keys {
    size_t i;
    struct rule_hit *h;
    const struct cfg_rule *r;
    uint64_t seed;      /* the rule's part of the bucket hash (ruleset) */
    const char *client; /* the client key, as rules_match built it */
    size_t client_len;
    int slot_len; /* concurrency: the slot key's length, -1 when none */
    char slot[RULES_SLOT_KEY_MAX + 1];
    uint64_t at; /* core_clock() of the hit's params */
    char *redis; /* the Redis key: buf, or the heap for a long max_key;
                    NULL standalone, or when it cannot be made */
    size_t redis_len;
    char buf[KEYBUF];
};

/* ---- keys and jobs (limiter_jobs.c) ---- */

/* Work out k for hit i of req at now_us; the Redis key when c has Redis.
 * core_hit_keys_free() after. */
void core_hit_keys(const struct limiter_core *c, const struct limiter_req *req, size_t i,
                   uint64_t now_us, struct hit_keys *k);
void core_hit_keys_free(struct hit_keys *k);

/* The Redis key of rule r's client key (as rules_match built it): prefix,
 * algorithm, rule, client key. Its length, or 0 when it does not fit in
 * cap. */
size_t core_redis_key(const struct limiter_core *c, const struct cfg_rule *r, const char *key,
                      size_t keylen, char *buf, size_t cap);
/* A call on one key with hit h's limits and cost (RJOB_EXACT, RJOB_REFUND),
 * NULL when out of memory. */
struct rjob *core_key_call(int kind, const struct rule_hit *h, const char *key, size_t keylen);
/* The call a lease job is sent as: it lives in the job's room, and goes
 * with the job. */
struct rjob *core_lease_rjob(struct lease_job *lj);
/* j's script and its arguments (agent_id and ttl_ms: a lease job's;
 * reserve: a scope = global rule's, the region's reserve of the key,
 * gclaim_reserve). */
enum store_script core_job_args(const struct rjob *j, const char *agent_id, uint64_t ttl_ms,
                                uint64_t reserve, struct script_args *a);
/* The key j is called on. */
const char *core_job_key(const struct rjob *j, size_t *keylen);

#endif
