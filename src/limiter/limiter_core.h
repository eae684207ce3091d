/* SPDX-License-Identifier: Apache-2.0 */
/* limiter_core.h - the limiter's pure core, inside src/limiter/ only: what a
 * request's hits decide (in-memory buckets, leases, exact and concurrency
 * calls, the fallback while Redis is down, cost, all-or-nothing refunds,
 * block_for), what goes to Redis (struct rjob: a job, as data) and what a
 * reply does (applied as data). Given the clock, the rules, whether Redis
 * is up and the replies: no event loop, no Redis client, no socket.
 *
 * The bridge (limiter.c) is above it: it runs the core on the limiter's
 * loop, sends the jobs the core hands back (struct core_jobs) through the
 * store, and feeds the replies back in (core_reply, core_timeout). The core
 * never calls up: what is to be sent is returned.
 */
#ifndef LIMITER_CORE_H
#define LIMITER_CORE_H

#include <stddef.h>
#include <stdint.h>

#include "core/util.h"
#include "limits/bucket.h"
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
struct store_result;

#define KEYBUF 1024

/* What the core decides with: the in-memory buckets (standalone), the
 * fail-open backstop, the slots (standalone, and the local share), and in
 * Redis mode the lease cache. The tables are thread-safe. */
struct limiter_core {
    struct bucket_table *buckets, *backstop;
    struct bucket_budget budget; /* [agent] max_entries: buckets and leases together */
    struct slot_table *slots;
    struct lease_table *leases; /* NULL standalone */
    int redis;                  /* Redis is configured */
    char prefix[80];            /* [redis] prefix */
    size_t prefix_len;
};

struct lease_config;

/* Make c's tables (stripes each), budgeted to max_entries: standalone when
 * lc is NULL, else with the lease cache under lc and Redis keys under
 * prefix. 0, or -1 when out of memory (core_free() then). */
int core_init(struct limiter_core *c, size_t max_entries, unsigned stripes,
              const struct lease_config *lc, const char *prefix);
/* Free c's tables (not c). */
void core_free(struct limiter_core *c);

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
    struct rjob *next;               /* queue, struct core_jobs */
    struct rjob *iprev, *inext;      /* (bridge) in flight, oldest first */
    struct limiter *l;               /* (bridge) */
    int timed_out;                   /* (bridge) */
    uint64_t sent_us;                /* (bridge) */
    int kind;
    struct lease_job *lj;            /* RJOB_LEASE */
    struct lease_waiter *w;          /* RJOB_EXACT, RJOB_CC: NULL once answered by fallback */
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
 * fixed window, aligned to the epoch, the wall clock (bucket.h). */
static inline uint64_t bucket_clock(const struct bucket_params *p, uint64_t now_us)
{
    return p->algorithm == BUCKET_FIXED_WINDOW ? util_wall_us() : now_us;
}

/* ---- keys and jobs (limiter_jobs.c) ---- */

/* The Redis key of rule r's client key (as rules_match built it): prefix,
 * algorithm, rule, client key. Its length, or 0 when it does not fit in
 * cap. */
size_t core_redis_key(const struct limiter_core *c, const struct cfg_rule *r, const char *key,
                      size_t keylen, char *buf, size_t cap);
/* The Redis key of hit h of req. */
size_t core_hit_redis_key(const struct limiter_core *c, const struct limiter_req *req,
                          const struct rule_hit *h, char *buf, size_t cap);
/* A call on one key with hit h's limits and cost (RJOB_EXACT, RJOB_REFUND),
 * NULL when out of memory. */
struct rjob *core_key_call(int kind, const struct rule_hit *h, const char *key, size_t keylen);
/* The call a lease job is sent as: it lives in the job's room, and goes
 * with the job. */
struct rjob *core_lease_rjob(struct lease_job *lj);
/* j's script and its arguments (agent_id and ttl_ms: a lease job's). */
enum store_script core_job_args(const struct rjob *j, const char *agent_id, uint64_t ttl_ms,
                                struct script_args *a);
/* The key j is called on. */
const char *core_job_key(const struct rjob *j, size_t *keylen);

/* ---- decisions (limiter_core.c) ---- */

/* Decide req's hits at now_us: up = Redis is up (release calls), ask = and
 * decisions may wait for it (not stalled). Jobs to send go to out (their
 * waiters are req's). Returns the number of hits decided here, or -1 when
 * out of memory. The caller sends out's jobs, then core_decide_end(). */
long core_decide(struct limiter_core *c, struct limiter_req *req, uint64_t now_us, int up,
                 int ask, struct core_jobs *out);
/* After core_decide() returned decided (>= 0) and its jobs are queued: 0
 * when req is complete, 1 when req->done will be called once the rest is
 * in (limiter_decide()'s answer). */
int core_decide_end(struct limiter_req *req, unsigned decided);
/* Decide hit i of req without Redis (the fallback, as degraded). */
void core_fallback(struct limiter_core *c, struct limiter_req *req, size_t i, uint64_t now_us);
/* One decision of req is in: complete req when it was the last. */
void core_hit_done(struct limiter_req *req);

/* A reply to j (res NULL: failed or short, or the store down), applied at
 * now_us: decisions completed, refunds counted. Frees j, or returns the job
 * to send now (j again as a release, or a lease's next call). */
struct rjob *core_reply(struct limiter_core *c, struct rjob *j, const struct store_result *res,
                        uint64_t now_us);
/* j went past [redis] timeout: what waits for it is decided by the
 * fallback (j stays in flight: its reply comes later). */
void core_timeout(struct limiter_core *c, struct rjob *j, uint64_t now_us);

/* ---- settling (limiter_charge.c, limiter_cc.c) ---- */

/* limiter_settle(): a blocked request gives back its slots and, under
 * [agent] charge = all-or-nothing, what its allowing rules took. Redis
 * calls go to out (up: Redis is up, for slot releases). */
void core_settle(struct limiter_core *c, struct limiter_req *req, uint64_t now_us, int up,
                 struct core_jobs *out);

/* ---- concurrency (limiter_cc.c) ---- */

/* Decide concurrency hit i of req from the local slot table under p (its
 * limit and max_hold): standalone p is the rule's, in the fallback its
 * local share (the backstop). */
void core_cc_local(struct limiter_core *c, struct limiter_req *req, size_t i,
                   const struct bucket_params *p, uint64_t now_us);
/* Hit i of a concurrency rule: one cc_acquire on Redis key key, to out. 0,
 * or -1 when it cannot be (Redis down, out of memory). */
int core_cc_queue(struct limiter_req *req, size_t i, const char *key, size_t keylen, int ask,
                  struct core_jobs *out);
/* Free the slots of req's release messages (ev->releases). */
void core_cc_releases(struct limiter_core *c, struct limiter_req *req, uint64_t now_us, int up,
                      struct core_jobs *out);
/* A cc_acquire or cc_release reply (res NULL: failed): frees j, or returns
 * it to be sent again as a release. */
struct rjob *core_cc_reply(struct limiter_core *c, struct rjob *j, const struct store_result *res,
                           uint64_t now_us);
/* The blocked request's slots go back (core_settle). */
void core_cc_settle(struct limiter_core *c, struct limiter_req *req, uint64_t now_us, int up,
                    struct core_jobs *out);
/* Free the local slots past max_hold (counted as expired). */
void core_cc_expire(struct limiter_core *c, uint64_t now_us);

/* ---- a new key's first decision (limiter_first.c) ---- */

/* The plain SET NX GET PX j is sent as, when it is a token bucket's cold
 * exact decision on a key this agent has no record of: 7 arguments into
 * argv/argvlen (valid until the next call on this thread), or -1: send j's
 * script. */
int core_first_args(const struct rjob *j, const char *argv[7], size_t argvlen[7]);
enum core_first_verdict {
    CORE_FIRST_EVAL,  /* the key was there: send j's script after all */
    CORE_FIRST_REPLY, /* *out is j's reply, as the script's would be */
};
/* What the SET's reply res does: *out is filled for CORE_FIRST_REPLY. */
enum core_first_verdict core_first_reply(const struct rjob *j, const struct store_result *res,
                                         struct store_result *out);

#endif
