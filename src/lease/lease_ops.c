/* SPDX-License-Identifier: Apache-2.0 */
/* lease_ops.c - one key of the lease cache, for the operator (GET /key,
 * POST /reset), for observers (the simulator's count of held tokens), for
 * the fallback (its start and its debt: lease_fallback_check/_note; what
 * it takes over from an unconfirmed master: lease_fallback_unconfirmed),
 * and every key at once when Redis lost them (lease_void_all); one key
 * reset on another agent (lease_reset_local). */
#include <math.h>
#include <string.h>

#include "core/util.h"
#include "lease_int.h"

/* The stripe of key, locked, and key's hash in *hp. */
static struct lease_stripe *stripe_lock(struct lease_table *t, const char *key, size_t keylen,
                                        uint64_t *hp)
{
    uint64_t h = util_hash_mix(util_hash_words(UTIL_HASH_INIT, key, keylen));
    struct lease_stripe *s = &t->stripes[util_stripe(h, t->nstripes)];

    pthread_mutex_lock(&s->lock);
    *hp = h;
    return s;
}

struct lease_entry *lease_find_locked(struct lease_table *t, const char *key, size_t keylen,
                                      struct lease_stripe **sp)
{
    uint64_t h;
    struct lease_stripe *s = stripe_lock(t, key, keylen, &h);
    struct lease_entry *e = lease_entry_find(s, h, key, keylen);
    if (e)
        *sp = s;
    else
        pthread_mutex_unlock(&s->lock);
    return e;
}

int lease_peek(struct lease_table *t, const char *key, size_t keylen, uint64_t now_us,
               struct lease_state *st)
{
    struct lease_stripe *s;
    struct lease_entry *e = lease_find_locked(t, key, keylen, &s);

    memset(st, 0, sizeof(*st));
    st->inflight = -1;
    if (!e)
        return 0;
    if (e->tokens > 0 && now_us < e->deadline_us) {
        st->tokens = e->tokens;
        st->lease_left_us = e->deadline_us - now_us;
    }
    st->voided = e->used >= LEASE_VOID;
    st->unreported = st->voided ? 0 : e->used;
    st->blocked_left_us = e->blocked_until_us > now_us ? e->blocked_until_us - now_us : 0;
    st->inflight = e->inflight ? e->inflight->kind : -1;
    st->waiting = e->nwait;
    st->demand = e->demand;
    if (e->share > 0 && now_us < e->deadline_us) {
        st->share_per_s = e->share * 1e6;
        st->slice = e->slice;
    }
    st->known = e->known;
    if (e->known) {
        st->bucket_tokens = e->t_last;
        st->others_held = e->others_held;
        st->others = e->holders;
        st->reply_age_us = now_us > e->reply_us ? now_us - e->reply_us : 0;
    }
    pthread_mutex_unlock(&s->lock);
    return 1;
}

int lease_forget(struct lease_table *t, const char *key, size_t keylen, uint64_t now_us,
                 uint64_t remaining, uint64_t held, uint64_t holders)
{
    uint64_t h;
    struct lease_stripe *s = stripe_lock(t, key, keylen, &h);
    struct lease_entry *e = lease_entry_find(s, h, key, keylen);

    if (!e) {
        /* A retired entry's ghost: it holds nothing here, so it takes the
         * reset's answer as Redis' last word; unless other agents hold
         * leases on the key, which a ghost cannot say: then it goes, and
         * the key's next call is a first SET (turned into a script call). */
        struct lease_ghost *g = lease_ghost_find(t, s, h, now_us);
        if (g && held == 0) {
            g->t_last = (double)remaining;
            g->reply_us = now_us;
            g->reset_ms = 0;
        } else if (g) {
            g->hash = 0;
        }
        pthread_mutex_unlock(&s->lock);
        return g != NULL;
    }
    e->blocked_until_us = 0;
    /* What Redis counts held for us: our tokens and the unreported spend
     * (unknown once voided: then the others are taken to hold it all). */
    uint64_t mine = e->used >= LEASE_VOID ? 0 : e->tokens + e->used;
    e->known = 1;
    e->t_last = (double)remaining;
    e->reply_us = now_us;
    e->others_held = held > mine ? held - mine : 0;
    e->holders = holders > 0 && mine > 0 ? holders - 1 : holders;
    if (held == 0)
        e->reset_ms = 0;
    pthread_mutex_unlock(&s->lock);
    return 1;
}

int lease_reset_local(struct lease_table *t, const char *key, size_t keylen, uint64_t now_us)
{
    uint64_t h;
    struct lease_stripe *s = stripe_lock(t, key, keylen, &h);
    struct lease_entry *e = lease_entry_find(s, h, key, keylen);

    if (!e) {
        struct lease_ghost *g = lease_ghost_find(t, s, h, now_us);
        if (g) /* its last word predates the reset: the next call asks Redis */
            g->hash = 0;
        pthread_mutex_unlock(&s->lock);
        return g != NULL;
    }
    e->blocked_until_us = 0;
    if (e->tokens > 0 || e->slice > 0 || e->used > 0)
        lease_entry_void(e);
    e->known = 0;
    e->reset_ms = 0;
    pthread_mutex_unlock(&s->lock);
    return 1;
}

size_t lease_void_all(struct lease_table *t)
{
    size_t held = 0;

    for (unsigned i = 0; i < t->nstripes; i++) {
        struct lease_stripe *s = &t->stripes[i];

        pthread_mutex_lock(&s->lock);
        /* the age list holds every entry; those holding tokens are also active */
        for (struct dlist *n = s->age.next; n != &s->age; n = n->next) {
            struct lease_entry *e = DLIST_ENTRY(n, struct lease_entry, age);
            if (e->tokens == 0 && e->slice == 0 && e->used == 0)
                continue; /* nothing held here, nothing to report */
            held += e->tokens > 0 || e->slice > 0;
            lease_entry_void(e);
        }
        pthread_mutex_unlock(&s->lock);
    }
    return held;
}

void lease_foreach_held(struct lease_table *t, uint64_t now_us,
                        void (*fn)(void *ctx, const char *key, size_t keylen, uint64_t tokens),
                        void *ctx)
{
    for (unsigned i = 0; i < t->nstripes; i++) {
        struct lease_stripe *s = &t->stripes[i];

        pthread_mutex_lock(&s->lock);
        for (struct dlist *n = s->active.next; n != &s->active; n = n->next) {
            struct lease_entry *e = DLIST_ENTRY(n, struct lease_entry, active);
            if (e->tokens > 0 && now_us < e->deadline_us)
                fn(ctx, e->key, e->keylen, e->tokens);
        }
        pthread_mutex_unlock(&s->lock);
    }
}

int lease_fallback_check(struct lease_table *t, const char *key, size_t keylen, uint64_t n,
                         uint64_t now_us, uint64_t *retry_us)
{
    struct lease_stripe *s;
    struct lease_entry *e = lease_find_locked(t, key, keylen, &s);
    int ok = 1;

    *retry_us = 0;
    if (!e)
        return 1;
    if (e->known && e->algorithm == BUCKET_TOKEN_BUCKET && e->limit > 0 && e->period_us > 0) {
        double rate = (double)e->limit / (double)e->period_us;
        if (e->fb_us < e->reply_us || e->fb_us == 0) {
            /* Redis said since: start there, less what it is still owed */
            e->fb_level = e->t_last - (double)e->owed;
            e->fb_us = e->reply_us;
        }
        /* A bucket of its own, refilled at r up to b (not capped at what
         * others held: they may have spent it since), so that it cannot
         * lock a key out for an outage; the backstop's share caps it too. */
        if (now_us > e->fb_us) {
            e->fb_level += rate * (double)(now_us - e->fb_us);
            e->fb_us = now_us;
        }
        if (e->fb_level > (double)e->burst)
            e->fb_level = (double)e->burst;
        double need = n ? (double)n : 1; /* a check (n = 0) passes where 1 would */
        if (e->fb_level + 1e-9 < need) {
            double us = ceil((need - e->fb_level) / rate);
            *retry_us = us < (double)BUCKET_MAX_PERIOD_US ? (uint64_t)us : BUCKET_MAX_PERIOD_US;
            ok = 0;
        }
    }
    pthread_mutex_unlock(&s->lock);
    return ok;
}

uint64_t lease_fallback_note(struct lease_table *t, const char *key, size_t keylen, uint64_t n,
                             uint64_t cap, atomic_uint_fast64_t *repaid)
{
    struct lease_stripe *s;
    struct lease_entry *e = lease_find_locked(t, key, keylen, &s);

    if (!e)
        return 0;
    if (cap == 0)
        cap = e->burst;
    uint64_t room = cap > e->owed ? cap - e->owed : 0;
    e->owed += n < room ? n : room;
    if (e->fb_us)
        e->fb_level -= (double)n; /* the backstop's view spends it too */
    if (repaid)
        e->repaid = repaid;
    uint64_t owed = e->owed;
    pthread_mutex_unlock(&s->lock);
    return owed;
}

void lease_confirmed(struct lease_table *t)
{
    atomic_fetch_add_explicit(&t->confirm_epoch, 1, memory_order_relaxed);
    atomic_store(&t->unconfirmed, 0);
}

void lease_unconfirmed(struct lease_table *t)
{
    atomic_store(&t->unconfirmed, 1);
}

uint64_t lease_fallback_unconfirmed(struct lease_table *t, const char *key, size_t keylen)
{
    struct lease_stripe *s;
    struct lease_entry *e;
    uint64_t due = 0;

    if (!atomic_load(&t->unconfirmed))
        return 0;
    e = lease_find_locked(t, key, keylen, &s);
    if (!e)
        return 0;
    if (e->taken_epoch == atomic_load_explicit(&t->confirm_epoch, memory_order_relaxed)) {
        due = e->taken - e->taken_charged;
        e->taken_charged = e->taken;
    }
    pthread_mutex_unlock(&s->lock);
    return due;
}

/* ---- what exact and refund replies tell a lease ---------------------------- */

void lease_note_refund(struct lease_table *t, const char *key, size_t keylen, uint64_t remaining,
                       uint64_t now_us)
{
    uint64_t h = util_hash_mix(util_hash_words(UTIL_HASH_INIT, key, keylen));
    struct lease_stripe *s = &t->stripes[util_stripe(h, t->nstripes)];

    pthread_mutex_lock(&s->lock);
    struct lease_entry *e = lease_entry_find(s, h, key, keylen);
    if (e && e->known && e->algorithm == BUCKET_TOKEN_BUCKET) {
        e->t_last = (double)(remaining < e->burst ? remaining : e->burst);
        e->reply_us = now_us;
    }
    pthread_mutex_unlock(&s->lock);
}

void lease_note_exact(struct lease_table *t, const char *key, size_t keylen, const int64_t *v,
                      int n, uint64_t now_us)
{
    uint64_t h = util_hash_mix(util_hash_words(UTIL_HASH_INIT, key, keylen));
    struct lease_stripe *s = &t->stripes[util_stripe(h, t->nstripes)];

    if (n < EXACT_R_COUNT)
        return;
    pthread_mutex_lock(&s->lock);
    struct lease_entry *e = lease_entry_find(s, h, key, keylen);
    if (e) { /* what others hold, it does not say: the last claim's word stays */
        e->known = 1;
        e->t_last = (double)nonneg(v[EXACT_R_REMAINING]);
        e->reset_ms = ms_capped(v[EXACT_R_RESET_MS]);
        e->reply_us = now_us;
    }
    pthread_mutex_unlock(&s->lock);
}
