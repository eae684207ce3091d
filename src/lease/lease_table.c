/* SPDX-License-Identifier: Apache-2.0 */
/* lease_table.c - where the lease cache's entries live: the table and its
 * stripes, each a hash table behind its own lock, with an age list (least
 * recently touched first: what the sweep forgets and the eviction drops) and
 * an active list (what a tick walks). The lease protocol itself is lease_cache.c. */
#include <stdlib.h>
#include <string.h>

#include "core/dlist.h"
#include "core/util.h"
#include "lease_int.h"
#include "metrics/metrics.h"

/* Entries the sweep looks at per stripe and tick, at most: a churn of keys is
 * forgotten over several ticks rather than in one long stall. */
#define SWEEP_MAX 2048

/* A job's block: the job, then the caller's room (lease_job_room). */
#define JOB_HEAD ((sizeof(struct lease_job) + 15) & ~(size_t)15)
#define JOB_POOL_MAX 64 /* kept per stripe */

#if defined(__SANITIZE_ADDRESS__)
#define JOB_PLAIN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define JOB_PLAIN 1
#endif
#endif

void *lease_job_room(struct lease_job *j)
{
    return (char *)j + JOB_HEAD;
}

/* A zeroed job block for an entry of s (its lock held). A cold key costs a
 * job per decision, made by a worker and freed by the Redis thread: through
 * malloc that was a slow cross-thread free and a refill from the bins each
 * time (a visible part of the agent's CPU per cold decision). Kept per
 * stripe instead, under the lock already held. Each block is its own
 * calloc, so a caller may still free() a job it drops. AddressSanitizer
 * builds keep none, so a use after free is still caught. */
struct lease_job *lease_job_alloc(const struct lease_table *t, struct lease_stripe *s)
{
    size_t bytes = JOB_HEAD + t->job_room;
    struct lease_job *j = s->free_jobs;

    if (!j)
        return calloc(1, bytes);
    s->free_jobs = j->next;
    s->nfree_jobs--;
    memset(j, 0, bytes);
    return j;
}

/* Give job back to s (its lock held). */
void lease_job_free(struct lease_stripe *s, struct lease_job *job)
{
#ifndef JOB_PLAIN
    if (s->nfree_jobs < JOB_POOL_MAX) {
        job->next = s->free_jobs;
        s->free_jobs = job;
        s->nfree_jobs++;
        return;
    }
#else
    (void)s;
#endif
    free(job);
}

struct lease_table *lease_table_new(const struct lease_config *cfg, unsigned nstripes)
{
    struct lease_table *t = calloc(1, sizeof(*t));
    unsigned n = 1;

    if (!t)
        return NULL;
    while (n < nstripes)
        n <<= 1;
    t->cfg = *cfg;
    atomic_init(&t->confirm_epoch, 0);
    atomic_init(&t->unconfirmed, 0);
    /* Our deadline must end before Redis drops the lease. The two clocks run
     * at the same rate and Redis starts later, so any margin is safe; a small
     * one covers clock rate error and the script's own run time. */
    t->margin_us = cfg->ttl_us / 20;
    if (t->margin_us < 1000)
        t->margin_us = 1000;
    t->nstripes = n;
    t->stripes = aligned_alloc(64, sizeof(struct lease_stripe) * n);
    if (!t->stripes) {
        free(t);
        return NULL;
    }
    memset(t->stripes, 0, sizeof(struct lease_stripe) * n);
    for (unsigned i = 0; i < n; i++) {
        pthread_mutex_init(&t->stripes[i].lock, NULL);
        slab_init(&t->stripes[i].slab, sizeof(struct lease_entry) + LEASE_SLOT_KEY + 1);
        dlist_init(&t->stripes[i].active);
        dlist_init(&t->stripes[i].age);
    }
    return t;
}

void lease_table_set_budget(struct lease_table *t, struct bucket_budget *b)
{
    t->budget = b;
}

void lease_table_set_job_room(struct lease_table *t, size_t room)
{
    t->job_room = room;
}

void lease_table_free(struct lease_table *t)
{
    if (!t)
        return;
    for (unsigned i = 0; i < t->nstripes; i++) {
        struct lease_stripe *s = &t->stripes[i];
        bucket_budget_sub(t->budget, s->count);
        for (size_t j = 0; j < s->nchains; j++) {
            struct lease_entry *e = s->chains[j], *next;
            for (; e; e = next) {
                next = e->next;
                rate_set_share(e, 0);
                lease_entry_free(s, e);
            }
        }
        slab_release(&s->slab);
        while (s->free_jobs) {
            struct lease_job *j = s->free_jobs;
            s->free_jobs = j->next;
            free(j);
        }
        free(s->chains);
        free(s->ghosts);
        pthread_mutex_destroy(&s->lock);
    }
    free(t->stripes);
    free(t);
}

size_t lease_count(struct lease_table *t)
{
    size_t n = 0;
    for (unsigned i = 0; i < t->nstripes; i++) {
        pthread_mutex_lock(&t->stripes[i].lock);
        n += t->stripes[i].count;
        pthread_mutex_unlock(&t->stripes[i].lock);
    }
    return n;
}

size_t lease_active(struct lease_table *t)
{
    size_t n = 0;
    for (unsigned i = 0; i < t->nstripes; i++) {
        pthread_mutex_lock(&t->stripes[i].lock);
        for (struct dlist *d = t->stripes[i].active.next; d != &t->stripes[i].active; d = d->next)
            n++;
        pthread_mutex_unlock(&t->stripes[i].lock);
    }
    return n;
}

/* ---- hash table (stripe locked by the caller) ----------------------------- */

static int stripe_grow(struct lease_stripe *s)
{
    size_t n = s->nchains ? s->nchains * 2 : 64;
    struct lease_entry **chains = calloc(n, sizeof(*chains));
    if (!chains)
        return -1;
    for (size_t i = 0; i < s->nchains; i++) {
        struct lease_entry *e = s->chains[i], *next;
        for (; e; e = next) {
            next = e->next;
            size_t chain = util_chain(e->hash, n);
            e->next = chains[chain];
            chains[chain] = e;
        }
    }
    free(s->chains);
    s->chains = chains;
    s->nchains = n;
    return 0;
}

static void stripe_evict(const struct lease_table *t, struct lease_stripe *s, unsigned n,
                         uint64_t now_us);

/* The ghost slot of hash h in s (the low bits pick the hash chain too; a
 * chain and a ghost slot sharing them is no matter). */
static struct lease_ghost *ghost_of(const struct lease_stripe *s, uint64_t h)
{
    return &s->ghosts[(h >> 7) & (s->nghosts - 1)];
}

struct lease_ghost *lease_ghost_find(const struct lease_table *t, const struct lease_stripe *s,
                                     uint64_t h, uint64_t now_us)
{
    struct lease_ghost *g;

    if (!s->ghosts || (g = ghost_of(s, h))->hash != h)
        return NULL;
    /* (now_us may be before touch_us: a worker read its clock before the
     * Redis thread retired the entry; the ghost is fresh then) */
    if (now_us > g->touch_us && now_us - g->touch_us > t->cfg.ttl_us)
        return NULL; /* the entry would have been swept by now */
    return g;
}

/* A new entry e of s whose key left a ghost less than ttl ago takes back
 * what its retired entry knew: Redis' last word (so its next call is a
 * script call, not a first SET) and its demand, brought to the tick the
 * entry would have been ticked at (as tick_entry and lease_entry_activate
 * would have done), so that a key back within the tick counts both hits. */
static void ghost_restore(const struct lease_table *t, struct lease_stripe *s,
                          struct lease_entry *e, uint64_t now_us)
{
    struct lease_ghost *g;
    uint64_t ep = atomic_load_explicit(&t->confirm_epoch, memory_order_relaxed);

    if (!s->ghosts || (g = ghost_of(s, e->hash))->hash != e->hash)
        return;
    /* the count since the last confirmation, however old the ghost */
    if (g->taken && g->taken_epoch == (uint32_t)ep) {
        e->taken_epoch = ep;
        e->taken = g->taken;
    }
    g->taken = 0;
    if (!lease_ghost_find(t, s, e->hash, now_us))
        return;
    g->hash = 0;
    e->known = 1;
    e->t_last = g->t_last;
    e->reset_ms = g->reset_ms;
    e->reply_us = g->reply_us;
    e->demand = g->demand;
    e->demand_tick = g->demand_tick;
    e->hits = g->hits;
    if (g->hits && g->demand_tick != s->tick) {
        e->demand = lease_demand_fold(e->demand, g->hits);
        e->demand_tick = g->demand_tick + 1;
        e->hits = 0;
    }
}

struct lease_entry *lease_entry_find(const struct lease_stripe *s, uint64_t h, const char *key,
                                     size_t keylen)
{
    if (!s->nchains)
        return NULL;
    for (struct lease_entry *e = s->chains[util_chain(h, s->nchains)]; e; e = e->next)
        if (e->hash == h && e->keylen == keylen && memcmp(e->key, key, keylen) == 0)
            return e;
    return NULL;
}

struct lease_entry *lease_entry_get(const struct lease_table *t, struct lease_stripe *s,
                                    unsigned stripe, uint64_t h, const char *key, size_t keylen,
                                    uint64_t now_us)
{
    struct lease_entry *e = lease_entry_find(s, h, key, keylen);

    if (e)
        return e;
    /* A new key: its ghost slot is a cache miss (the table is larger than
     * the caches), which the eviction and the entry's making can hide. */
    if (s->ghosts)
        __builtin_prefetch(ghost_of(s, h));
    stripe_evict(t, s, bucket_budget_add(t->budget), now_us);
    if ((s->count >= s->nchains && stripe_grow(s) < 0) || !(e = lease_entry_alloc(s, keylen))) {
        bucket_budget_sub(t->budget, 1);
        return NULL;
    }
    e->hash = h;
    e->stripe = stripe;
    if (now_us < s->void_until_us)
        e->used = LEASE_VOID; /* it may be a key just evicted: see stripe_evict */
    e->keylen = keylen;
    memcpy(e->key, key, keylen);
    e->demand_tick = s->tick;
    dlist_push_tail(&s->age, &e->age);
    size_t chain = util_chain(h, s->nchains);
    e->next = s->chains[chain];
    s->chains[chain] = e;
    s->count++;
    ghost_restore(t, s, e, now_us);
    return e;
}

/* Unlink e from its hash chain and lists, and free it. */
static void entry_remove(const struct lease_table *t, struct lease_stripe *s, struct lease_entry *e)
{
    struct lease_entry **link = &s->chains[util_chain(e->hash, s->nchains)];

    while (*link != e)
        link = &(*link)->next;
    *link = e->next;
    if (dlist_linked(&e->active))
        dlist_del(&e->active);
    dlist_del(&e->age);
    s->count--;
    rate_set_share(e, 0);
    bucket_budget_sub(t->budget, 1);
    lease_entry_free(s, e);
}

int lease_entry_retirable(const struct lease_table *t, const struct lease_entry *e, uint64_t now_us)
{
    return t->cfg.rate_ttl_us == 0 && e->seen == 1 && e->known && !e->inflight && !e->wait_head &&
           e->tokens == 0 && e->used == 0 && e->share <= 0 && e->holders == 0 &&
           e->others_held == 0 && now_us >= e->blocked_until_us && e->owed == 0;
}

/* Most of a million per-IP keys are seen once: kept for ttl, their entries
 * were most of the table, and making, ticking and sweeping them (each a
 * cache miss by then) was about a third of the agent's CPU per cold
 * decision. Retired at their reply instead, while still in cache, they
 * leave 64 bytes in a slot of their own. A ghost lost to a newer one costs
 * the key only its first request going as a first SET again, which Redis
 * turns back to the script call when the key is there. */
void lease_entry_retire(const struct lease_table *t, struct lease_stripe *s, struct lease_entry *e,
                        uint64_t now_us)
{
    if (!s->ghosts) {
        size_t n = LEASE_GHOSTS / t->nstripes;
        s->nghosts = n < 64 ? 64 : n;
        s->ghosts = calloc(s->nghosts, sizeof(*s->ghosts));
    }
    if (s->ghosts) { /* else out of memory: retired all the same, forgotten */
        struct lease_ghost *g = ghost_of(s, e->hash);
        g->hash = e->hash;
        g->touch_us = now_us;
        g->reply_us = e->reply_us;
        g->reset_ms = e->reset_ms;
        g->t_last = e->t_last;
        g->demand = e->demand;
        g->demand_tick = e->demand_tick;
        g->hits = e->hits;
        uint64_t due = e->taken - e->taken_charged;
        g->taken_epoch = (uint32_t)e->taken_epoch;
        g->taken = due < UINT32_MAX ? (uint32_t)due : UINT32_MAX;
    }
    entry_remove(t, s, e);
}

/* Entries the eviction looks at, from the old end of the age list, for one
 * it may drop: O(1) per new key even when the oldest must stay. */
#define EVICT_SCAN 8

/* Over the budget: drop up to n entries, the least recently used first,
 * among the EVICT_SCAN oldest of s. An entry with a job in flight or
 * waiters stays (both point to it).
 *
 * What an entry knows that Redis does not is its spend since the last
 * report (used). Dropped while our lease in Redis lives, that spend would
 * come back: the next entry for the key would claim, get from Redis the
 * tokens Redis still counts as ours, and spend them twice. So after such a
 * drop, and until that lease has surely expired in Redis, every new entry of
 * the stripe reports LEASE_VOID first: "everything you count as mine is
 * spent", which the scripts cap at what Redis holds for us. For a key that
 * was not dropped Redis holds nothing for us (a new entry is a key never
 * seen, or one forgotten after its lease expired), so the report is 0. For
 * the dropped one, tokens it held unspent count as spent: under-admission,
 * never over. */
static void stripe_evict(const struct lease_table *t, struct lease_stripe *s, unsigned n,
                         uint64_t now_us)
{
    struct dlist *d = s->age.next, *next;

    for (unsigned seen = 0; n > 0 && d != &s->age && seen < EVICT_SCAN; d = next, seen++) {
        struct lease_entry *e = DLIST_ENTRY(d, struct lease_entry, age);
        next = d->next;
        if (e->inflight || e->wait_head)
            continue;
        if ((e->used > 0 || e->share > 0) && now_us < e->redis_exp_us &&
            s->void_until_us < e->redis_exp_us)
            s->void_until_us = e->redis_exp_us;
        entry_remove(t, s, e);
        METRIC_INC(evictions);
        n--;
    }
}

/* Whether e can be forgotten: idle, and whatever Redis holds for us has
 * expired there (counted as spent), so nothing is left to spend or to report.
 * Dropping the entry earlier would forget an unreported spend that a new
 * entry's first claim would then get back as tokens. */
static int entry_idle(const struct lease_table *t, const struct lease_entry *e, uint64_t now_us)
{
    return !e->inflight && e->tokens == 0 && !e->wait_head && !dlist_linked(&e->active) &&
           now_us >= e->blocked_until_us && now_us >= e->redis_exp_us &&
           lease_since(now_us, e->last_hit_us) > t->cfg.ttl_us;
}

void lease_sweep(const struct lease_table *t, struct lease_stripe *s, uint64_t now_us)
{
    for (unsigned n = 0; n < SWEEP_MAX && !dlist_empty(&s->age); n++) {
        struct lease_entry *e = DLIST_ENTRY(s->age.next, struct lease_entry, age);
        if (lease_since(now_us, e->touch_us) <= t->cfg.ttl_us)
            break; /* the rest is younger */
        if (entry_idle(t, e, now_us))
            entry_remove(t, s, e);
        else
            lease_entry_touch(s, e, now_us);
    }
}
