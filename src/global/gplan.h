/* SPDX-License-Identifier: Apache-2.0 */
/* gplan.h - a region's claimer, its decisions only: for one key of a
 * scope = global rule, what the claimer withdraws from or deposits into the
 * regional bucket, and what it asks of the global bucket, each round
 * (doc/design.md, "Regions").
 *
 * Pure: no Redis, no clock read (times are passed in, microseconds of the
 * caller's monotonic clock). gclaim.c does the I/O around it: the read of
 * the regional bucket (tb_pool with amount 0), the withdrawal, the batched
 * global call (tb_claim, the region as the agent) and the deposit.
 *
 * One round per key, in this order:
 *   gplan_expire()  a lease about to end: what is free in the bucket goes
 *   gplan_round()   from the bucket's read: the backstop deposit, the
 *                   withdrawal of a surplus, and the global operation (want,
 *                   used, returned), or none
 *   gplan_reply()   the global bucket's answer: what to deposit, the deadline
 *   gplan_failed()  or the call failed (global Redis down or cut off)
 */
#ifndef GPLAN_H
#define GPLAN_H

#include <stdint.h>

/* The rule and the region's settings a plan works from. */
struct gplan_cfg {
    uint64_t limit, period_us, burst; /* the rule: limit per period, burst */
    uint64_t interval_us;             /* [global] interval: a round each */
    uint64_t ttl_us;                  /* [lease] ttl: the agents' regional leases */
    uint64_t gttl_us;                 /* the region's lease on the global bucket */
    uint64_t rtt_us;                  /* the global Redis' round trip, as seen */
    double max_fraction;              /* [global] max_fraction of the burst per claim */
    unsigned regions;                 /* regions seen (>= 1): the standing and backstop shares */
    uint64_t reserve; /* the region's reserve of the key (bucket_fed_reserve), each region's */
};

/* The global bucket's capacity: the rule's burst less the regions'
 * reserves (each region holds its reserve of every key without asking:
 * doc/design.md "The reserve"); at least 1. */
uint64_t gplan_global_burst(const struct gplan_cfg *c);

/* The global lease's ttl: a few rounds, a regional lease and the global
 * round trip, so that renewed every round it only ends when the global
 * Redis stays unreachable. */
uint64_t gplan_gttl_us(uint64_t interval_us, uint64_t ttl_us, uint64_t rtt_us);

/* One key's state in the claimer. Zero-initialised: a key never claimed. */
struct gkey {
    uint64_t gheld;       /* what the global bucket counts the region holds (its last "mine") */
    uint64_t pool;        /* granted, not deposited yet (the regional bucket had no room) */
    uint64_t deadline_us; /* the region spends until then (0: holds nothing) */
    uint64_t retry_at_us; /* no claim before: the global bucket was empty */
    int short_grant;      /* the last claim got less than it asked (the global bucket ran low) */
    uint64_t short_by;    /* by how much (0: it got all of it) */
    double est;           /* demand per interval, tokens: up at once, down slowly */
    uint64_t last_us;     /* its last round (0: none) */
    int forfeited;        /* the lease ran out while the global Redis was unreachable */
    int bs_on;            /* fed by the backstop share until a call succeeds */
    double bs_acc;        /* backstop tokens due, not deposited yet */
    uint64_t owed;        /* what its reserve lacked at the last round */
    uint64_t bs_last_us;  /* the backstop's last accrual */
    unsigned idle;        /* rounds in a row with no demand and nothing held */
    /* the operation in the call in flight (op = 1) */
    int op;
    uint64_t want, used, ret;
};

/* What the regional bucket said (tb_pool, amount 0): free tokens, tokens
 * the agents' leases hold, and the demand it could not serve since the last
 * read.
 *
 * With a reserve s (doc/design.md "The reserve"), the first s tokens the
 * region holds are its own, not the global bucket's: the global bucket
 * counts the region holds what it holds above s, and what it holds below s
 * is a debt the claimer claims back (a claim whose grant is reported spent
 * once deposited). */
struct gread {
    uint64_t t, held, unmet;
    int active; /* the key was used in the region within GPLAN_ACTIVE_US */
};

/* A key used in a region within this long keeps its standing share there
 * (burst / regions), demand or not: a sparse client's next request is
 * decided at once. Unused longer, the share goes back; the key's next
 * request there waits for the claimer's first deposit (denied until then). */
#define GPLAN_ACTIVE_US 300000000ULL

/* What one round asks the caller to do, in this order. */
struct gstep {
    uint64_t backstop;  /* deposit this many (backstop tokens), when > 0 */
    uint64_t withdraw;  /* then withdraw up to this many free tokens (a surplus given back) */
    int op;             /* then one operation in the global call: */
    uint64_t want, used, ret;
};

/* A deadline within ttl + interval of now: the caller withdraws every free
 * token (returns 1) before reading the bucket; the global bucket counts them
 * spent at its lease's expiry. The key then holds nothing globally. */
int gplan_expire(const struct gplan_cfg *c, struct gkey *k, uint64_t now_us);

/* Plan key k's round from the read r. The caller deposits s->backstop,
 * withdraws s->withdraw and then calls gplan_withdrawn() with what it really
 * moved, before the global call leaves; global_down: the last call failed
 * (the backstop may start). */
void gplan_round(const struct gplan_cfg *c, struct gkey *k, const struct gread *r,
                 int global_down, uint64_t now_us, struct gstep *s);

/* What the withdrawal really moved out (<= s->withdraw): the operation's
 * returned tokens; a key with nothing left to do drops its operation.
 * Returns 1 when the key has an operation for the global call. */
int gplan_withdrawn(const struct gplan_cfg *c, struct gkey *k, struct gstep *s, uint64_t moved,
                    uint64_t now_us);

/* The backstop deposit really moved this many. */
void gplan_backstop_done(struct gkey *k, uint64_t moved);

/* The global bucket's answer to k's operation of a call sent at sent_us:
 * granted, mine (what it counts the region holds now), lease_ms, retry_ms.
 * Returns the tokens to deposit now (k->pool, all of them; the caller
 * gives back through gplan_deposited what did not fit); *dl_us: the
 * deadline to store with the regional bucket, as time from now_us (0:
 * none). */
uint64_t gplan_reply(const struct gplan_cfg *c, struct gkey *k, uint64_t sent_us, uint64_t now_us,
                     uint64_t granted, uint64_t mine, uint64_t lease_ms, uint64_t retry_ms,
                     uint64_t *dl_us);

/* What a deposit of gplan_reply's amount really moved in. */
void gplan_deposited(struct gkey *k, uint64_t moved);

/* k's operation was in a call that failed: the tokens withdrawn for it are
 * not given back (counted spent at the lease's expiry). Returns them. */
uint64_t gplan_failed(struct gkey *k);

/* A call succeeded again: backstop tokens left are not the global
 * bucket's. Returns 1 when the caller is to withdraw every free token of
 * k's bucket (its backstop ran). */
int gplan_recovered(struct gkey *k);

/* When k wants its next round: an interval, or sooner when its demand per
 * interval is more than one claim (max_fraction of the burst) can feed:
 * the time that claim lasts, not less than a round trip, nor, when the
 * last claim came back short, than the global bucket's refill of it; on
 * the backstop, when half the backstop's burst has refilled. A claim that
 * came back short comes again once the global bucket has refilled what it
 * lacked (a round trip at least), if that is sooner than an interval. */
uint64_t gplan_next_us(const struct gplan_cfg *c, const struct gkey *k);

/* 1 when k can be forgotten: idle for a while, holding nothing. */
int gplan_idle(const struct gkey *k);

#endif
