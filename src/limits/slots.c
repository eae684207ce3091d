/* SPDX-License-Identifier: Apache-2.0 */
/* slots.c - the in-memory slot table (slots.h): a chained hash table of
 * (rule, key) entries, each an array of held slots with their deadlines. */
#include "limits/slots.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "core/util.h"

#define NBUCKETS 4096
#define RETRY_MAX_US 1000000 /* a denied request retries within a second */

struct slot {
    uint64_t id, deadline_us;
};

struct slot_entry {
    struct slot_entry *next;
    struct slot *slots;
    size_t n, cap;
    size_t rule_len, keylen;
    char name[]; /* rule, NUL, key */
};

struct slot_table {
    pthread_mutex_t lock;
    struct slot_entry *buckets[NBUCKETS];
    size_t count;
};

struct slot_table *slot_table_new(void)
{
    struct slot_table *t = calloc(1, sizeof(*t));

    if (t)
        pthread_mutex_init(&t->lock, NULL);
    return t;
}

static void entry_free(struct slot_entry *e)
{
    free(e->slots);
    free(e);
}

void slot_table_free(struct slot_table *t)
{
    if (!t)
        return;
    for (size_t i = 0; i < NBUCKETS; i++) {
        struct slot_entry *e = t->buckets[i], *next;
        for (; e; e = next) {
            next = e->next;
            entry_free(e);
        }
    }
    pthread_mutex_destroy(&t->lock);
    free(t);
}

/* splitmix64: a bijection, so a counter through it never repeats, and its
 * output does not show the counter. */
static uint64_t mix(uint64_t x)
{
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

static uint64_t id_seed;
static atomic_uint_fast64_t id_counter;
static pthread_once_t id_once = PTHREAD_ONCE_INIT;

/* Agents of a fleet draw their ids from different random seeds: ids of two
 * agents meet with odds of 2^-64 per pair. */
static void id_seed_init(void)
{
    if (getrandom(&id_seed, sizeof(id_seed), 0) != (ssize_t)sizeof(id_seed))
        id_seed = util_now_us() ^ ((uint64_t)getpid() << 32);
}

uint64_t slots_new_id(void)
{
    pthread_once(&id_once, id_seed_init);
    for (;;) {
        uint64_t id = mix(id_seed + atomic_fetch_add(&id_counter, 1));
        if (id)
            return id;
    }
}

static size_t entry_hash(const char *rule, const char *key, size_t keylen)
{
    uint64_t h = util_hash(UTIL_HASH_INIT, rule, strlen(rule));
    return (size_t)(util_hash(h, key, keylen) % NBUCKETS);
}

/* The entry of (rule, key) and the link that points to it; NULL when none. */
static struct slot_entry *find(struct slot_table *t, const char *rule, const char *key,
                               size_t keylen, struct slot_entry ***link)
{
    size_t rl = strlen(rule);
    struct slot_entry **l = &t->buckets[entry_hash(rule, key, keylen)];

    for (; *l; l = &(*l)->next) {
        struct slot_entry *e = *l;
        if (e->rule_len == rl && e->keylen == keylen && memcmp(e->name, rule, rl) == 0 &&
            memcmp(e->name + rl + 1, key, keylen) == 0)
            break;
    }
    *link = l;
    return *l;
}

/* Free the slots past their deadline: how many. */
static uint64_t drop_expired(struct slot_table *t, struct slot_entry *e, uint64_t now_us)
{
    size_t kept = 0;

    for (size_t i = 0; i < e->n; i++)
        if (e->slots[i].deadline_us > now_us)
            e->slots[kept++] = e->slots[i];
    uint64_t gone = e->n - kept;
    e->n = kept;
    t->count -= gone;
    return gone;
}

/* Unlink and free e when it holds nothing. */
static void drop_if_empty(struct slot_entry **link, struct slot_entry *e)
{
    if (e->n == 0) {
        *link = e->next;
        entry_free(e);
    }
}

int slot_table_take(struct slot_table *t, const char *rule, const char *key, size_t keylen,
                    uint64_t limit, uint64_t hold_us, uint64_t id, uint64_t now_us,
                    struct slot_take *out)
{
    struct slot_entry **link, *e;
    int ret = 0;

    memset(out, 0, sizeof(*out));
    pthread_mutex_lock(&t->lock);
    e = find(t, rule, key, keylen, &link);
    if (!e) {
        size_t rl = strlen(rule);
        e = calloc(1, sizeof(*e) + rl + 1 + keylen + 1);
        if (!e) {
            ret = -1;
            goto out;
        }
        e->rule_len = rl;
        e->keylen = keylen;
        memcpy(e->name, rule, rl + 1);
        memcpy(e->name + rl + 1, key, keylen);
        *link = e;
    }
    out->expired = drop_expired(t, e, now_us);
    if (e->n >= limit) {
        uint64_t first = UINT64_MAX;
        for (size_t i = 0; i < e->n; i++)
            if (e->slots[i].deadline_us < first)
                first = e->slots[i].deadline_us;
        out->retry_us = first - now_us < RETRY_MAX_US ? first - now_us : RETRY_MAX_US;
        out->held = e->n;
        goto out;
    }
    if (e->n == e->cap) {
        size_t cap = e->cap ? e->cap * 2 : 4;
        struct slot *grown = realloc(e->slots, cap * sizeof(*grown));
        if (!grown) {
            drop_if_empty(link, e);
            ret = -1;
            goto out;
        }
        e->slots = grown;
        e->cap = cap;
    }
    e->slots[e->n++] = (struct slot){id, now_us + hold_us};
    t->count++;
    out->allowed = 1;
    out->held = e->n;
out:
    pthread_mutex_unlock(&t->lock);
    return ret;
}

int slot_table_release(struct slot_table *t, const char *rule, const char *key, size_t keylen,
                       uint64_t id, uint64_t now_us)
{
    struct slot_entry **link, *e;
    int found = 0;

    pthread_mutex_lock(&t->lock);
    e = find(t, rule, key, keylen, &link);
    for (size_t i = 0; e && i < e->n; i++) {
        if (e->slots[i].id != id)
            continue;
        found = e->slots[i].deadline_us > now_us; /* an expired one was freed already */
        e->slots[i] = e->slots[--e->n];
        t->count--;
        break;
    }
    if (e)
        drop_if_empty(link, e);
    pthread_mutex_unlock(&t->lock);
    return found;
}

uint64_t slot_table_peek(struct slot_table *t, const char *rule, const char *key, size_t keylen,
                         uint64_t now_us, uint64_t *earliest_us, uint64_t *expired)
{
    struct slot_entry **link, *e;
    uint64_t held = 0, first = 0, gone = 0;

    pthread_mutex_lock(&t->lock);
    e = find(t, rule, key, keylen, &link);
    if (e) {
        gone = drop_expired(t, e, now_us);
        held = e->n;
        for (size_t i = 0; i < e->n; i++)
            if (!first || e->slots[i].deadline_us - now_us < first)
                first = e->slots[i].deadline_us - now_us;
        drop_if_empty(link, e);
    }
    pthread_mutex_unlock(&t->lock);
    if (earliest_us)
        *earliest_us = first;
    if (expired)
        *expired = gone;
    return held;
}

uint64_t slot_table_reset(struct slot_table *t, const char *rule, const char *key, size_t keylen,
                          uint64_t now_us)
{
    struct slot_entry **link, *e;
    uint64_t held = 0;

    pthread_mutex_lock(&t->lock);
    e = find(t, rule, key, keylen, &link);
    if (e) {
        drop_expired(t, e, now_us);
        held = e->n;
        t->count -= e->n;
        e->n = 0;
        drop_if_empty(link, e);
    }
    pthread_mutex_unlock(&t->lock);
    return held;
}

uint64_t slot_table_expire(struct slot_table *t, uint64_t now_us, slot_expired_cb *on_expired,
                           void *ctx)
{
    uint64_t total = 0;

    pthread_mutex_lock(&t->lock);
    for (size_t i = 0; i < NBUCKETS; i++) {
        struct slot_entry **link = &t->buckets[i];
        while (*link) {
            struct slot_entry *e = *link;
            uint64_t gone = drop_expired(t, e, now_us);
            if (gone && on_expired)
                on_expired(ctx, e->name, gone);
            total += gone;
            if (e->n == 0) {
                *link = e->next;
                entry_free(e);
            } else {
                link = &e->next;
            }
        }
    }
    pthread_mutex_unlock(&t->lock);
    return total;
}

size_t slot_table_count(struct slot_table *t)
{
    pthread_mutex_lock(&t->lock);
    size_t n = t->count;
    pthread_mutex_unlock(&t->lock);
    return n;
}
