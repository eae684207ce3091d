/* SPDX-License-Identifier: Apache-2.0 */
/* lease_int.h - the lease cache's private parts, shared by lease_cache.c (the
 * cache and token leases), lease_rate.c (rate leases) and lease_ops.c (one
 * key, for the operator). Nothing outside those files includes it. */
#ifndef LEASE_INT_H
#define LEASE_INT_H

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>

#include "core/dlist.h"
#include "core/slab.h"
#include "lease.h"

/* A report of "everything held was spent": scripts cap a report at what is held. */
#define LEASE_VOID 1000000000000ull

/* Each stripe keeps two lists beside its hash table, so that a tick costs
 * what is active, not what is known:
 *   active  entries the tick must look at: seen since the last tick, or
 *           holding tokens (to give back or top up);
 *   age     every entry, least recently touched first (a decision, or a
 *           reply from Redis). An entry untouched for longer than ttl has
 *           no lease left in Redis; the tick forgets such entries from the
 *           front of this list, a bounded number per tick. */
struct lease_entry {
    struct lease_entry *next; /* hash chain */
    uint64_t hash;            /* of the key, mixed: see util_stripe() */
    unsigned stripe;
    struct dlist active, age;
    uint64_t touch_us;    /* last decision or reply: the age list's order */
    uint32_t demand_tick; /* the stripe tick demand was last brought to */
    /* parameters in force (updated by every decision: reloads apply) */
    enum bucket_algorithm algorithm;
    uint64_t limit, period_us, burst;
    uint64_t block_us;  /* block_for: a denial in Redis blocks the key this long */
    uint64_t offset_us; /* a fixed window's window_offset */
    uint64_t period_ms, block_ms, offset_ms; /* the same in ms (bucket.h) */
    int fed;                                 /* a scope = global rule's (bucket.h) */
    /* the local lease */
    uint64_t tokens;      /* L: may still be spent */
    uint64_t used;        /* spent since the last report sent */
    uint64_t deadline_us; /* spend only before this (local clock) */
    struct lease_job *inflight;
    struct lease_waiter *wait_head, *wait_tail;
    unsigned nwait;
    /* demand */
    uint32_t hits; /* decisions since the last tick */
    double demand; /* decisions per interval, smoothed */
    uint64_t last_hit_us;
    /* what Redis said last */
    int known;
    double t_last;        /* tokens in the bucket (sw: remaining) */
    uint64_t others_held; /* held by other agents */
    uint64_t holders;
    uint64_t reply_us;
    uint64_t reset_ms;
    uint64_t blocked_until_us; /* negative cache */
    uint64_t redis_exp_us;     /* our lease in Redis ends before this (local clock) */
    /* A rate lease (lease_rate.c; share == 0: a token lease, or none). Its
     * tokens (above) refill here at share, up to slice, until deadline_us;
     * Redis counts the slice and the share, not the spends (used stays 0). */
    double share;       /* tokens per us */
    double frac;        /* refill not yet a whole token */
    uint64_t refill_us; /* refilled up to this time */
    uint64_t slice;     /* capacity: Redis' `mine` */
    /* demand over a longer run than one tick, to find warm keys */
    uint32_t seen;        /* decisions since the entry was made */
    uint32_t cost;        /* the last decision's cost (a check counts 1) */
    uint64_t first_us;    /* the first of them */
    uint32_t rl_hits;     /* decisions since the last rate lease call */
    uint64_t rl_since_us; /* that call */
    /* What the backstop admitted for the key while Redis did not decide and
     * Redis has not been charged yet (at most the backstop's burst, share
     * x b: lease_fallback_note).
     * Paid from the next tokens Redis grants the key (repay), each counted
     * in *repaid, the rule's fallback_repaid_total. */
    uint64_t owed;
    atomic_uint_fast64_t *repaid;
    /* The backstop's view of the key's Redis bucket (lease_fallback_check):
     * its level at fb_us, from Redis' last word (t_last at reply_us) less
     * what the backstop admitted since, refilled at the rule's rate. */
    double fb_level;
    uint64_t fb_us;
    /* What this agent admitted for the key from Redis' grants (lease spends,
     * exact calls) since the table's confirmation epoch taken_epoch
     * (lease_confirmed; an older epoch counts nothing), and how much of it
     * the backstop was charged already (lease_fallback_unconfirmed). */
    uint64_t taken_epoch;
    uint64_t taken, taken_charged;
    size_t keylen;
    char key[]; /* the Redis key, NUL-terminated */
};

/* What a retired entry leaves behind (lease_entry_retire): the little the
 * cache knows of a key it holds nothing for, so that the key's next request
 * within ttl is treated as the entry would have treated it. */
struct lease_ghost {
    uint64_t hash;     /* 0: empty */
    uint64_t touch_us; /* when retired: the ghost lasts ttl from then */
    uint64_t reply_us, reset_ms;
    double t_last, demand;
    uint32_t demand_tick, hits;
    /* what the key took from Redis' grants and the backstop was not charged
     * for (taken - taken_charged), in the confirmation epoch of these low
     * bits: a cold key's exact calls come and go, each with an entry of its
     * own, and the count must outlive them (whatever the ghost's age) */
    uint32_t taken_epoch, taken;
};

/* Ghost slots of a table, over all its stripes (direct-mapped: a newer
 * ghost takes an older one's slot). 64k x 64 bytes, made at the first
 * retirement. */
#define LEASE_GHOSTS 65536

/* Entries are slab slots (slab.h: no page fault per new key) when their key
 * is this long or shorter, as nearly all are; longer ones are calloc'd. */
#define LEASE_SLOT_KEY 95

struct lease_stripe {
    pthread_mutex_t lock;
    struct lease_entry **chains; /* nchains hash chains */
    size_t nchains, count;
    struct dlist active, age;
    uint32_t tick; /* ticks so far */
    /* Until then a new entry's first report is LEASE_VOID: an entry with a
     * spend not reported yet was evicted while its lease in Redis may still
     * live (stripe_evict). */
    uint64_t void_until_us;
    struct slab slab; /* entries with keys up to LEASE_SLOT_KEY bytes */
    /* Jobs whose replies were applied, kept for the next ones (new_job in
     * lease_cache.c): each is a block of its own, from calloc. */
    struct lease_job *free_jobs;
    unsigned nfree_jobs;
    struct lease_ghost *ghosts; /* NULL until the first retirement */
    size_t nghosts;
} __attribute__((aligned(64)));

/* A zeroed entry for a key of keylen bytes (its stripe's lock held); NULL
 * when out of memory. */
static inline struct lease_entry *lease_entry_alloc(struct lease_stripe *s, size_t keylen)
{
    struct lease_entry *e;

    if (keylen > LEASE_SLOT_KEY)
        return calloc(1, sizeof(*e) + keylen + 1);
    return slab_alloc(&s->slab);
}

static inline void lease_entry_free(struct lease_stripe *s, struct lease_entry *e)
{
    if (e->keylen <= LEASE_SLOT_KEY) /* as lease_entry_alloc chose */
        slab_free(&s->slab, e);
    else
        free(e);
}

struct lease_table {
    struct lease_config cfg;
    uint64_t margin_us;
    unsigned nstripes;
    struct lease_stripe *stripes;
    struct bucket_budget *budget; /* [agent] max_entries; NULL: no cap */
    size_t job_room;              /* lease_table_set_job_room */
    /* Sentinel: bumped by each confirmation of the master (lease_confirmed);
     * unconfirmed while none came for the window (lease_unconfirmed). */
    atomic_uint_fast64_t confirm_epoch;
    atomic_int unconfirmed;
};

/* ---- where entries live (lease_table.c); the caller holds s's lock -------- */

/* The entry of key (hash h, as util_hash_mix(util_hash_words(...))) in s, or NULL. */
struct lease_entry *lease_entry_find(const struct lease_stripe *s, uint64_t h, const char *key,
                                     size_t keylen);
/* The entry of key, made when there is none (s is stripe number `stripe`; a
 * new one past the budget drops an old one first); NULL when out of memory. */
struct lease_entry *lease_entry_get(const struct lease_table *t, struct lease_stripe *s,
                                    unsigned stripe, uint64_t h, const char *key, size_t keylen,
                                    uint64_t now_us);
/* Whether e may be retired now (lease_entry_retire), right after its reply:
 * it was made for one request, whose exact call is answered (allowed; a
 * denial is cached), and holds nothing: no tokens, no spend to report, no
 * lease in Redis (an exact call takes none), nobody waiting, no call in
 * flight. Rate leases (which count sightings over seconds) keep entries. */
int lease_entry_retirable(const struct lease_table *t, const struct lease_entry *e,
                          uint64_t now_us);
/* Drop e now, leaving a ghost of what it knew (its stripe s locked). */
void lease_entry_retire(const struct lease_table *t, struct lease_stripe *s, struct lease_entry *e,
                        uint64_t now_us);
/* The ghost of hash h in s (its lock held) if one is there and younger than
 * ttl at now_us; else NULL. */
struct lease_ghost *lease_ghost_find(const struct lease_table *t, const struct lease_stripe *s,
                                     uint64_t h, uint64_t now_us);
/* Forget idle entries from the old end of s's age list: those untouched for
 * longer than ttl, at most a bounded number per call. One that must stay (a
 * negative-cache entry, a lease still active) goes to the young end to be
 * looked at again a ttl later. */
void lease_sweep(const struct lease_table *t, struct lease_stripe *s, uint64_t now_us);
/* A zeroed job (with the caller's job_room) for an entry of s; NULL when
 * out of memory. */
struct lease_job *lease_job_alloc(const struct lease_table *t, struct lease_stripe *s);
/* Give a job back to s, whose entry it was for (lease_table.c). */
void lease_job_free(struct lease_stripe *s, struct lease_job *job);

/* A decision or a reply: e moves to the young end of the age list. */
static inline void lease_entry_touch(struct lease_stripe *s, struct lease_entry *e, uint64_t now_us)
{
    e->touch_us = now_us;
    dlist_move_tail(&s->age, &e->age);
}

/* Demand after a tick that saw hits: a key's decisions per interval,
 * smoothed (tick_entry, and a ghost brought back after a tick it missed). */
static inline double lease_demand_fold(double demand, uint32_t hits)
{
    return 0.5 * demand + 0.5 * (double)hits;
}

/* Put e on the active list, first bringing its demand up to date: demand
 * halves every tick without hits, which the tick does not do for entries off
 * the list. */
static inline void lease_entry_activate(struct lease_stripe *s, struct lease_entry *e)
{
    if (dlist_linked(&e->active))
        return;
    uint32_t idle = s->tick - e->demand_tick;
    e->demand = idle >= 64 ? 0 : ldexp(e->demand, -(int)idle);
    e->demand_tick = s->tick;
    dlist_push_tail(&s->active, &e->active);
}

/* n tokens of Redis' (a lease's, an exact call's) were admitted here for e
 * (its stripe locked): counted since the last confirmation of the master, a
 * counter of an older epoch starting again at zero. */
static inline void lease_entry_taken(const struct lease_table *t, struct lease_entry *e, uint64_t n)
{
    uint64_t ep = atomic_load_explicit(&t->confirm_epoch, memory_order_relaxed);

    if (e->taken_epoch != ep) {
        e->taken_epoch = ep;
        e->taken = 0;
        e->taken_charged = 0;
    }
    e->taken += n;
}

/* lease_cache.c: void e's lease (its stripe locked): spend nothing more from
 * it, and let its next claim report all Redis counts held as spent (a
 * report is capped at that). Under-admission only. */
void lease_entry_void(struct lease_entry *e);

/* Pay e's debt (owed: lease_fallback_note) from the tokens it holds, right
 * after Redis granted them: a token lease reports them spent (used; tokens
 * + used stays what Redis counts held for us), a rate lease just does not
 * spend them (Redis counts its slice spent). So tokens the backstop already
 * admitted are never admitted again. */
static inline void lease_entry_repay(struct lease_entry *e)
{
    uint64_t x = e->owed < e->tokens ? e->owed : e->tokens;

    if (x == 0)
        return;
    e->tokens -= x;
    if (e->share <= 0 && e->used < LEASE_VOID)
        e->used += x;
    e->owed -= x;
    if (e->repaid)
        atomic_fetch_add_explicit(e->repaid, x, memory_order_relaxed);
}

/* lease_ops.c: the entry of key, locked in its stripe (the caller unlocks
 * *sp), or NULL (nothing locked). */
struct lease_entry *lease_find_locked(struct lease_table *t, const char *key, size_t keylen,
                                      struct lease_stripe **sp);

/* ---- rate leases (lease_rate.c); the caller holds e's stripe lock ---------- */

/* Set e's share (0: none), keeping the count of rate leases (metrics). */
void rate_set_share(struct lease_entry *e, double share);
/* Bring e's local bucket up to now (no refill past its deadline). */
void rate_refill(struct lease_entry *e, uint64_t now_us);
/* Whether a claim for e now should be a rate lease's: a token bucket, rate
 * leases on, and e warm (seen often enough in a rate lease's life to pay, not
 * so often that token leases cost nothing), or e holds one already. */
int rate_wanted(const struct lease_table *t, const struct lease_entry *e, uint64_t now_us);
/* Make j (a claim of e, its report already taken) a rate lease's claim:
 * share and demand, the rate ttl; or, when e holds one but is no longer
 * warm, the claim that ends it (share 0). */
void rate_claim(const struct lease_table *t, struct lease_entry *e, struct lease_job *j,
                uint64_t now_us);
/* Apply the reply of a rate lease's claim: share, slice, deadline, tokens
 * (what e had, if Redis still had it, plus granted, to be capped at the slice
 * once the waiters are served). */
void rate_apply(const struct lease_table *t, struct lease_entry *e, const struct lease_job *j,
                uint64_t granted, uint64_t mine, uint64_t share_ppm, uint64_t had,
                uint64_t lease_ms, uint64_t now_us);
/* The tick's word on a rate lease: RATE_KEEP, RATE_RENEW (prefetch: it ends
 * soon and still sees demand; or it ends: it is no longer warm), or
 * RATE_RETURN (idle: give it back). */
enum { RATE_KEEP = 0, RATE_RENEW, RATE_RETURN };
int rate_tick(const struct lease_table *t, struct lease_entry *e, uint64_t now_us);
/* Whether a decision that just spent from e's rate lease should renew it in
 * the background (its last quarter, no call in flight). */
int rate_prefetch(const struct lease_table *t, const struct lease_entry *e, uint64_t now_us);

/* The margin of a lease of lease_us: margin_us for a full ttl, less for a
 * shorter one in proportion. A sliding window's lease ends with its window,
 * so it may be much shorter than ttl; the whole margin would leave nothing
 * to spend (a lease of 30 ms against 50 ms), and the agent would claim,
 * and be charged, again and again until the window ends. The margin covers
 * clock rate error, which grows with the lease's length. */
static inline uint64_t lease_margin_for(const struct lease_table *t, uint64_t lease_us)
{
    if (lease_us >= t->cfg.ttl_us)
        return t->margin_us;
    return (uint64_t)((double)t->margin_us * (double)lease_us / (double)t->cfg.ttl_us);
}

/* now - then, 0 when then is later: a time read on another thread (a
 * worker's decision, the limiter's reply or tick) may be behind the one it is
 * compared with by the microseconds between the two reads. */
static inline uint64_t lease_since(uint64_t now, uint64_t then)
{
    return now > then ? now - then : 0;
}

/* A reply's value: negative ones read as 0 (nonneg); milliseconds capped
 * (ms_capped). Shared by lease_cache.c and lease_ops.c. */
static inline uint64_t nonneg(int64_t x)
{
    return x > 0 ? (uint64_t)x : 0;
}

/* Milliseconds that stay far from overflow once made microseconds and added
 * to a clock reading: at most BUCKET_MAX_PERIOD_US. */
static inline uint64_t ms_capped(int64_t v)
{
    uint64_t ms = nonneg(v);
    return ms < BUCKET_MAX_PERIOD_US / 1000 ? ms : BUCKET_MAX_PERIOD_US / 1000;
}

#endif
