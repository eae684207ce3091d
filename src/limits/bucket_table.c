/* SPDX-License-Identifier: Apache-2.0 */
/* bucket_table.c - a striped hash table of buckets (bucket.c) keyed by
 * (rule name, client key): the standalone mode's state and the fail-open
 * backstop.
 *
 * The table is nstripes independent chained hash tables, each behind its own
 * mutex, chosen by util_stripe() from the key hash; a decision locks exactly
 * one stripe. Memory stays bounded because bucket_table_expire() drops buckets
 * that hold no information any more (see bucket_idle()), and, with a budget
 * ([agent] max_entries), because a new bucket past it drops the least
 * recently used one of its stripe: each stripe keeps its entries on an age
 * list, most recently used last.
 */
#include "limits/bucket.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "core/dlist.h"
#include "core/util.h"
#include "metrics/metrics.h"

/* Retry hint when a decision could not be made for lack of memory. */
#define OOM_RETRY_US 1000000u

/* Per-stripe chain array bounds; stripes start with no array at all so an
 * idle table costs only its stripes. */
#define MIN_CHAINS 8u
#define MAX_STRIPES 65536u

/* Rule names and keys longer than this are refused (they would not fit the
 * entry's length fields); the caller hashes long keys well before. */
#define MAX_RULE_LEN UINT16_MAX
#define MAX_KEY_LEN UINT32_MAX

const struct bucket_params bucket_params_per_bucket = {.algorithm = BUCKET_TOKEN_BUCKET};

/* One (rule, key) bucket. data holds the rule name, a NUL (so that data is
 * the rule as a C string for params_of), then keylen key bytes. */
struct entry {
    struct entry *next;
    struct dlist age; /* on the stripe's age list, most recently used last */
    uint64_t hash;
    struct bucket b;
    uint32_t keylen;
    uint16_t rulelen;
    uint8_t algorithm; /* of the parameters last used, to notice a switch */
    /* The parameters of the last take, for expiry when they differ per
     * bucket (bucket_params_per_bucket): dropping a bucket that is not full
     * by its own parameters would admit more than its limit. */
    uint64_t limit, period_us, burst;
    char data[];
};

/* Aligned to a cache line so that threads working on neighbouring stripes
 * do not bounce each other's lock. */
struct stripe {
    _Alignas(64) pthread_mutex_t lock;
    struct entry **chains; /* nchains chains; NULL while nchains is 0 */
    size_t nchains;        /* 0 or a power of two */
    size_t count;
    struct dlist age;    /* every entry, least recently used first */
    struct entry *spare; /* freed entries of ENTRY_BLOCK bytes (entry_alloc) */
    unsigned nspare;
};

struct bucket_table {
    struct stripe *stripes;
    unsigned nstripes;            /* power of two */
    struct bucket_budget *budget; /* NULL: no cap */
    /* Expiry cursor: stripe, chain, and entries of that chain already
     * visited and kept. Guarded by cursor_lock, which is always taken before
     * a stripe lock, never after. */
    pthread_mutex_t cursor_lock;
    unsigned cur_stripe;
    size_t cur_chain;
    size_t cur_skip;
};

uint64_t bucket_rule_seed(const char *rule, size_t rulelen)
{
    return util_hash_words(UTIL_HASH_INIT, rule, rulelen);
}

static uint64_t seeded_hash(uint64_t seed, const void *key, size_t keylen)
{
    return util_hash_mix(util_hash_words(seed, key, keylen));
}

static uint64_t key_hash(const char *rule, size_t rulelen, const void *key, size_t keylen)
{
    return seeded_hash(bucket_rule_seed(rule, rulelen), key, keylen);
}

static struct stripe *stripe_of(struct bucket_table *t, uint64_t hash)
{
    return &t->stripes[util_stripe(hash, t->nstripes)];
}

/* Rehash stripe s into nchains chains (a power of two, or 0 only when s
 * holds no entry).
 * Returns 0, or -1 when out of memory with s unchanged. */
static int stripe_resize(struct stripe *s, size_t nchains)
{
    struct entry **chains = NULL;
    if (nchains) {
        chains = calloc(nchains, sizeof(*chains));
        if (!chains)
            return -1;
    }
    for (size_t i = 0; i < s->nchains; i++) {
        struct entry *e = s->chains[i];
        while (e) {
            struct entry *next = e->next;
            size_t j = util_chain(e->hash, nchains);
            e->next = chains[j];
            chains[j] = e;
            e = next;
        }
    }
    free(s->chains);
    s->chains = chains;
    s->nchains = nchains;
    return 0;
}

static struct entry *stripe_find(struct stripe *s, uint64_t hash, const char *rule, size_t rulelen,
                                 const void *key, size_t keylen)
{
    if (!s->nchains)
        return NULL;
    for (struct entry *e = s->chains[util_chain(hash, s->nchains)]; e; e = e->next) {
        if (e->hash == hash && e->rulelen == rulelen && e->keylen == keylen &&
            memcmp(e->data, rule, rulelen) == 0 && memcmp(e->data + rulelen + 1, key, keylen) == 0)
            return e;
    }
    return NULL;
}

/* Entries of up to this many bytes (most: a rule name and a client key
 * under 64 bytes) are one size, kept per stripe when freed for the next new
 * key. A cold key per decision (a million clients) made and freed an entry
 * each time through malloc's bins, a visible part of the standalone cold
 * decision. ASan builds keep none, so a use after free is still caught. */
#define ENTRY_BLOCK (sizeof(struct entry) + 64)
#define SPARE_MAX 256 /* per stripe: the expiry frees a stripe at a time */

#if defined(__SANITIZE_ADDRESS__)
#define ENTRY_PLAIN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define ENTRY_PLAIN 1
#endif
#endif

/* An entry of bytes bytes for s (its lock held); NULL when out of memory. */
static struct entry *entry_alloc(struct stripe *s, size_t bytes)
{
    struct entry *e = s->spare;

    if (bytes > ENTRY_BLOCK)
        return malloc(bytes);
    if (!e)
        return malloc(ENTRY_BLOCK);
    s->spare = e->next;
    s->nspare--;
    return e;
}

/* Free e, an entry of s (its lock held). */
static void entry_free(struct stripe *s, struct entry *e)
{
#ifndef ENTRY_PLAIN
    if (sizeof(*e) + e->rulelen + 1 + e->keylen <= ENTRY_BLOCK && s->nspare < SPARE_MAX) {
        e->next = s->spare;
        s->spare = e;
        s->nspare++;
        return;
    }
#else
    (void)s;
#endif
    free(e);
}

/* Add a new entry for (rule, key) to s. Returns it, or NULL when out of
 * memory. Growing keeps the load factor at most 1; when growing fails but
 * there is an array, the entry goes in anyway with longer chains. */
static struct entry *stripe_insert(struct stripe *s, uint64_t hash, const char *rule,
                                   size_t rulelen, const void *key, size_t keylen)
{
    if (s->count + 1 > s->nchains) {
        size_t want = s->nchains ? s->nchains * 2 : MIN_CHAINS;
        if (stripe_resize(s, want) != 0 && !s->nchains)
            return NULL;
    }
    if (keylen > SIZE_MAX - sizeof(struct entry) - rulelen - 1)
        return NULL; /* only reachable where size_t is 32 bits */
    struct entry *e = entry_alloc(s, sizeof(*e) + rulelen + 1 + keylen);
    if (!e)
        return NULL;
    e->hash = hash;
    e->rulelen = (uint16_t)rulelen;
    e->keylen = (uint32_t)keylen;
    memcpy(e->data, rule, rulelen);
    e->data[rulelen] = '\0';
    if (keylen)
        memcpy(e->data + rulelen + 1, key, keylen);
    size_t j = util_chain(hash, s->nchains);
    e->next = s->chains[j];
    s->chains[j] = e;
    dlist_push_tail(&s->age, &e->age);
    s->count++;
    return e;
}

/* Unlink e from its chain and the age list, and free it. */
static void stripe_remove(struct stripe *s, struct entry *e)
{
    struct entry **pp = &s->chains[util_chain(e->hash, s->nchains)];

    while (*pp != e)
        pp = &(*pp)->next;
    *pp = e->next;
    dlist_del(&e->age);
    s->count--;
    entry_free(s, e);
}

/* Over the budget: drop up to n of the least recently used entries of s. */
static void stripe_evict(struct bucket_table *t, struct stripe *s, unsigned n)
{
    for (; n > 0 && !dlist_empty(&s->age); n--) {
        stripe_remove(s, DLIST_ENTRY(s->age.next, struct entry, age));
        bucket_budget_sub(t->budget, 1);
        METRIC_INC(evictions);
    }
}

struct bucket_table *bucket_table_new(unsigned nstripes)
{
    unsigned n = 1;
    while (n < nstripes && n < MAX_STRIPES)
        n <<= 1;

    struct bucket_table *t = calloc(1, sizeof(*t));
    if (!t)
        return NULL;
    t->stripes = aligned_alloc(_Alignof(struct stripe), n * sizeof(struct stripe));
    if (!t->stripes) {
        free(t);
        return NULL;
    }
    memset(t->stripes, 0, n * sizeof(struct stripe));
    t->nstripes = n;
    for (unsigned i = 0; i < n; i++) {
        pthread_mutex_init(&t->stripes[i].lock, NULL);
        dlist_init(&t->stripes[i].age);
    }
    pthread_mutex_init(&t->cursor_lock, NULL);
    return t;
}

void bucket_table_set_budget(struct bucket_table *t, struct bucket_budget *b)
{
    t->budget = b;
}

void bucket_table_free(struct bucket_table *t)
{
    if (!t)
        return;
    for (unsigned i = 0; i < t->nstripes; i++) {
        struct stripe *s = &t->stripes[i];
        bucket_budget_sub(t->budget, s->count);
        for (size_t j = 0; j < s->nchains; j++) {
            struct entry *e = s->chains[j];
            while (e) {
                struct entry *next = e->next;
                free(e);
                e = next;
            }
        }
        while (s->spare) {
            struct entry *e = s->spare;
            s->spare = e->next;
            free(e);
        }
        free(s->chains);
        pthread_mutex_destroy(&s->lock);
    }
    pthread_mutex_destroy(&t->cursor_lock);
    free(t->stripes);
    free(t);
}

static void deny_oom(struct bucket_result *res)
{
    res->allowed = 0;
    res->remaining = 0;
    res->reset_us = 0;
    res->retry_us = OOM_RETRY_US;
}

int bucket_table_take(struct bucket_table *t, const char *rule, const void *key, size_t keylen,
                      const struct bucket_params *p, uint64_t now_us, uint64_t n,
                      struct bucket_result *res)
{
    size_t rulelen = strlen(rule);

    return bucket_table_take_seeded(t, rule, rulelen, bucket_rule_seed(rule, rulelen), key, keylen,
                                    p, now_us, n, res);
}

/* The entry of (rule, key) under p, made when there is none (or afresh when
 * it counts with another algorithm), its stripe locked in *sp; NULL (nothing
 * locked) when out of memory or when rule or key cannot be held. */
static struct entry *entry_get(struct bucket_table *t, const char *rule, size_t rulelen,
                               uint64_t seed, const void *key, size_t keylen,
                               const struct bucket_params *p, uint64_t now_us, struct stripe **sp)
{
    if (rulelen > MAX_RULE_LEN || (uint64_t)keylen > MAX_KEY_LEN)
        return NULL;
    uint64_t hash = seeded_hash(seed, key, keylen);
    struct stripe *s = stripe_of(t, hash);

    pthread_mutex_lock(&s->lock);
    struct entry *e = stripe_find(s, hash, rule, rulelen, key, keylen);
    if (!e) {
        stripe_evict(t, s, bucket_budget_add(t->budget));
        e = stripe_insert(s, hash, rule, rulelen, key, keylen);
        if (!e) {
            bucket_budget_sub(t->budget, 1);
            pthread_mutex_unlock(&s->lock);
            return NULL;
        }
        bucket_init(&e->b, p, now_us);
        e->algorithm = (uint8_t)p->algorithm;
    } else if (e->algorithm != (uint8_t)p->algorithm) {
        /* Tokens and window counts mean different things: start afresh. */
        bucket_init(&e->b, p, now_us);
        e->algorithm = (uint8_t)p->algorithm;
    }
    *sp = s;
    return e;
}

/* e was used under p at now: remember p, and e as the stripe's newest. */
static void entry_used(struct stripe *s, struct entry *e, const struct bucket_params *p)
{
    e->limit = p->limit;
    e->period_us = p->period_us;
    e->burst = p->burst;
    dlist_move_tail(&s->age, &e->age);
    pthread_mutex_unlock(&s->lock);
}

int bucket_table_take_seeded(struct bucket_table *t, const char *rule, size_t rulelen,
                             uint64_t seed, const void *key, size_t keylen,
                             const struct bucket_params *p, uint64_t now_us, uint64_t n,
                             struct bucket_result *res)
{
    struct stripe *s;
    struct entry *e = entry_get(t, rule, rulelen, seed, key, keylen, p, now_us, &s);

    if (!e) {
        deny_oom(res);
        return -1;
    }
    /* A reload that lowered the burst needs no special case: the refill in
     * bucket_take caps the level at the current burst. */
    bucket_take(&e->b, p, now_us, n, res);
    entry_used(s, e, p);
    return 0;
}

int bucket_table_charge_seeded(struct bucket_table *t, const char *rule, size_t rulelen,
                               uint64_t seed, const void *key, size_t keylen,
                               const struct bucket_params *p, uint64_t now_us, uint64_t n)
{
    struct stripe *s;
    struct entry *e = entry_get(t, rule, rulelen, seed, key, keylen, p, now_us, &s);

    if (!e)
        return -1;
    bucket_charge(&e->b, p, now_us, n);
    entry_used(s, e, p);
    return 0;
}

uint64_t bucket_table_refund(struct bucket_table *t, const char *rule, const void *key,
                             size_t keylen, const struct bucket_params *p, uint64_t taken_us,
                             uint64_t now_us, uint64_t n, struct bucket_state *st)
{
    size_t rulelen = strlen(rule);
    uint64_t back = 0;

    if (rulelen > MAX_RULE_LEN || (uint64_t)keylen > MAX_KEY_LEN)
        return 0;
    uint64_t hash = key_hash(rule, rulelen, key, keylen);
    struct stripe *s = stripe_of(t, hash);

    pthread_mutex_lock(&s->lock);
    struct entry *e = stripe_find(s, hash, rule, rulelen, key, keylen);
    if (e && e->algorithm == (uint8_t)p->algorithm) {
        back = bucket_refund(&e->b, p, taken_us, now_us, n);
        if (st)
            bucket_peek(&e->b, p, now_us, st);
    }
    pthread_mutex_unlock(&s->lock);
    return back;
}

int bucket_table_peek(struct bucket_table *t, const char *rule, const void *key, size_t keylen,
                      const struct bucket_params *p, uint64_t now_us, struct bucket_state *st)
{
    size_t rulelen = strlen(rule);
    if (rulelen > MAX_RULE_LEN || (uint64_t)keylen > MAX_KEY_LEN)
        return 0;
    uint64_t hash = key_hash(rule, rulelen, key, keylen);
    struct stripe *s = stripe_of(t, hash);
    int found = 0;

    pthread_mutex_lock(&s->lock);
    struct entry *e = stripe_find(s, hash, rule, rulelen, key, keylen);
    if (e && e->algorithm == (uint8_t)p->algorithm) {
        bucket_peek(&e->b, p, now_us, st);
        found = 1;
    }
    pthread_mutex_unlock(&s->lock);
    return found;
}

int bucket_table_drop(struct bucket_table *t, const char *rule, const void *key, size_t keylen)
{
    size_t rulelen = strlen(rule);
    if (rulelen > MAX_RULE_LEN || (uint64_t)keylen > MAX_KEY_LEN)
        return 0;
    uint64_t hash = key_hash(rule, rulelen, key, keylen);
    struct stripe *s = stripe_of(t, hash);
    struct entry *e;
    int dropped = 0;

    pthread_mutex_lock(&s->lock);
    e = stripe_find(s, hash, rule, rulelen, key, keylen);
    if (e) {
        dropped = 1;
        /* The expiry cursor may skip one entry of this chain on its next
         * visit (it counts kept entries): that entry is looked at a round
         * later, which is harmless. */
        stripe_remove(s, e);
        bucket_budget_sub(t->budget, 1);
    }
    pthread_mutex_unlock(&s->lock);
    return dropped;
}

/* Shrink a stripe whose load fell below 1/4 so that expiring a burst of
 * clients gives the chain array back too (entirely when empty). */
static void stripe_maybe_shrink(struct stripe *s)
{
    if (s->count == 0) {
        if (s->nchains)
            stripe_resize(s, 0);
        return;
    }
    if (s->nchains <= MIN_CHAINS || s->count * 4 >= s->nchains)
        return;
    size_t want = MIN_CHAINS;
    while (want < s->count * 2)
        want <<= 1;
    stripe_resize(s, want); /* on failure the larger array simply stays */
}

size_t bucket_table_expire(struct bucket_table *t, uint64_t now_us, size_t max_visit,
                           const struct bucket_params *(*params_of)(void *ctx, const char *rule),
                           void *ctx)
{
    return bucket_table_expire_at(t, now_us, now_us, max_visit, params_of, ctx);
}

size_t bucket_table_expire_at(struct bucket_table *t, uint64_t now_us, uint64_t wall_us,
                              size_t max_visit,
                              const struct bucket_params *(*params_of)(void *ctx, const char *rule),
                              void *ctx)
{
    size_t visited = 0, dropped = 0, scanned = 0, stripes_done = 0;
    /* Empty chains cost time too: bound them so one call holds a stripe lock
     * for a time proportional to max_visit even in a sparse table. */
    size_t chain_budget = max_visit <= (SIZE_MAX - 64) / 4 ? max_visit * 4 + 64 : SIZE_MAX;

    if (max_visit == 0)
        return 0;
    pthread_mutex_lock(&t->cursor_lock);
    while (visited < max_visit && scanned < chain_budget && stripes_done <= t->nstripes) {
        struct stripe *s = &t->stripes[t->cur_stripe];
        pthread_mutex_lock(&s->lock);
        while (t->cur_chain < s->nchains && visited < max_visit && scanned < chain_budget) {
            struct entry **pp = &s->chains[t->cur_chain];
            /* Entries kept by an earlier call are skipped, not re-checked, so
             * a chain longer than max_visit still makes progress. */
            for (size_t skip = t->cur_skip; *pp && skip > 0; skip--)
                pp = &(*pp)->next;
            while (*pp && visited < max_visit) {
                struct entry *e = *pp;
                const struct bucket_params *p = params_of(ctx, e->data);
                struct bucket_params own;
                if (p == &bucket_params_per_bucket) {
                    own = (struct bucket_params){.algorithm = e->algorithm,
                                                 .limit = e->limit,
                                                 .period_us = e->period_us,
                                                 .burst = e->burst};
                    p = &own;
                }
                visited++;
                /* (a fixed window's idleness does not depend on its offset) */
                uint64_t at = e->algorithm == BUCKET_FIXED_WINDOW ? wall_us : now_us;
                if (!p || (uint8_t)p->algorithm != e->algorithm || bucket_idle(&e->b, p, at)) {
                    *pp = e->next;
                    dlist_del(&e->age);
                    entry_free(s, e);
                    s->count--;
                    bucket_budget_sub(t->budget, 1);
                    dropped++;
                } else {
                    pp = &e->next;
                    t->cur_skip++;
                }
            }
            if (*pp)
                break; /* budget spent mid-chain; resume here */
            t->cur_chain++;
            t->cur_skip = 0;
            scanned++;
        }
        if (t->cur_chain >= s->nchains) {
            stripe_maybe_shrink(s);
            t->cur_stripe = (t->cur_stripe + 1) & (t->nstripes - 1);
            t->cur_chain = 0;
            t->cur_skip = 0;
            stripes_done++;
        }
        pthread_mutex_unlock(&s->lock);
    }
    pthread_mutex_unlock(&t->cursor_lock);
    return dropped;
}

size_t bucket_table_count(struct bucket_table *t)
{
    size_t n = 0;
    for (unsigned i = 0; i < t->nstripes; i++) {
        pthread_mutex_lock(&t->stripes[i].lock);
        n += t->stripes[i].count;
        pthread_mutex_unlock(&t->stripes[i].lock);
    }
    return n;
}
