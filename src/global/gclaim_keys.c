/* SPDX-License-Identifier: Apache-2.0 */
/* gclaim_keys.c - the claimer's state below its I/O (gclaim_int.h): the
 * table of the keys it follows, each key's plan settings, the count of its
 * calls in flight and the end of a claimer freed while some were, and the
 * reserve a missing regional key holds. Calls nothing above it: gclaim.c
 * (notes, lock, life) and gclaim_round.c (a round) both use it. */
#include "global/gclaim_int.h"

#include <stdlib.h>
#include <string.h>

#include "limits/bucket.h"

uint64_t gclaim_hash(const char *s, size_t n)
{
    uint64_t h = 1469598103934665603ULL; /* FNV-1a */
    for (size_t i = 0; i < n; i++)
        h = (h ^ (unsigned char)s[i]) * 1099511628211ULL;
    return h ? h : 1;
}

struct gplan_cfg gclaim_plan_cfg(const struct gclaim *g, const struct gentry *e)
{
    uint64_t rtt = (uint64_t)(g->st.rtt_ms * 1000);
    return (struct gplan_cfg){
        .limit = e->limit,
        .period_us = e->period_ms * 1000,
        .burst = e->burst,
        .interval_us = g->interval_us,
        .ttl_us = g->ttl_us,
        .gttl_us = gplan_gttl_us(g->interval_us, g->ttl_us, rtt > g->timeout_us ? rtt : g->timeout_us),
        .rtt_us = rtt,
        .max_fraction = g->max_fraction,
        .regions = g->st.regions ? g->st.regions : 1,
        .reserve = gclaim_reserve(g, e->burst),
    };
}

static int call_end(struct gclaim *g)
{
    g->inflight--;
    if (g->zombie && !g->inflight) {
        gclaim_destroy(g);
        return 1;
    }
    return g->stopped;
}

/* A call of ours is answered (e: on that key, or NULL). 1: do nothing more
 * (stopped; after gclaim_free, the last one frees g). */
int gclaim_call_done(struct gclaim *g, struct gentry *e)
{
    if (e)
        e->calls--;
    return call_end(g);
}

/* A regional (tb_pool) call on e answered. */
int gclaim_pool_done(struct gclaim *g, struct gentry *e)
{
    e->pcalls--;
    return gclaim_call_done(g, e);
}

/* ---- the key table ---------------------------------------------------------------------- */

struct gentry *gclaim_lookup(const struct gclaim *g, const char *key, size_t keylen)
{
    if (!g->tab_cap)
        return NULL;
    for (struct gentry *e = g->tab[gclaim_hash(key, keylen) & (g->tab_cap - 1)]; e; e = e->next)
        if (e->keylen == keylen && memcmp(e->key, key, keylen) == 0)
            return e;
    return NULL;
}

struct gentry *gclaim_upsert(struct gclaim *g, const char *key, size_t keylen)
{
    struct gentry *e = gclaim_lookup(g, key, keylen);
    if (e)
        return e;
    if (g->nkeys + 1 > g->tab_cap / 2) { /* grow */
        size_t cap = g->tab_cap ? g->tab_cap * 2 : 64;
        struct gentry **t = calloc(cap, sizeof(*t));
        if (!t)
            return NULL;
        for (size_t i = 0; i < g->tab_cap; i++)
            for (struct gentry *x = g->tab[i], *nx; x; x = nx) {
                nx = x->next;
                size_t b = gclaim_hash(x->key, x->keylen) & (cap - 1);
                x->next = t[b];
                t[b] = x;
            }
        free(g->tab);
        g->tab = t;
        g->tab_cap = cap;
    }
    e = calloc(1, sizeof(*e) + keylen + 1);
    if (!e)
        return NULL;
    e->g = g;
    e->keylen = keylen;
    memcpy(e->key, key, keylen);
    size_t b = gclaim_hash(key, keylen) & (g->tab_cap - 1);
    e->next = g->tab[b];
    g->tab[b] = e;
    g->nkeys++;
    return e;
}

/* Forget the keys idle for a while (no call of ours on them). */
void gclaim_sweep(struct gclaim *g)
{
    for (size_t i = 0; i < g->tab_cap; i++)
        for (struct gentry **p = &g->tab[i]; *p;) {
            struct gentry *e = *p;
            if (gplan_idle(&e->k) && e->seen_round != g->round && !e->calls) {
                *p = e->next;
                free(e);
                g->nkeys--;
            } else {
                p = &e->next;
            }
        }
}

void gclaim_destroy(struct gclaim *g)
{
    for (size_t i = 0; i < g->tab_cap; i++)
        for (struct gentry *e = g->tab[i], *nx; e; e = nx) {
            nx = e->next;
            free(e);
        }
    free(g->tab);
    for (size_t i = 0; i < g->nnotes; i++)
        free(g->notes[i]);
    free(g->notes);
    free(g->note_hash);
    free(g->prev_hash);
    free(g->prefix);
    free(g->gprefix);
    free(g->agent);
    free(g);
}

uint64_t gclaim_reserve(const struct gclaim *g, uint64_t burst)
{
    return g ? bucket_fed_reserve(g->reserve, g->st.regions, burst) : 0;
}
