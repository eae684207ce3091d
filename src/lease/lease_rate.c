/* SPDX-License-Identifier: Apache-2.0 */
/* lease_rate.c - rate leases: the policy for warm keys (see lua/README.md
 * for the script's side and the proof of the bound).
 *
 * A token lease pays only for a key this agent sees at least about once per
 * interval: it is topped up every interval and gives back what it did not
 * spend. A key seen now and then (a few times a second, a few times a
 * minute) would cost one Redis call per request. For such a warm key the
 * agent asks instead for a rate lease: a share of the rule's rate, sized by
 * the key's demand here, and a slice of its burst, for rate_ttl. Its local
 * bucket refills at that share up to that slice, so requests are decided
 * here until the lease ends; a request that finds it empty takes one token
 * from the central bucket (one call, which also resizes the share), and a
 * lease that still sees demand is renewed in its last quarter, in the
 * background (prefetch). Hot keys keep token leases, which cost nothing per
 * request there; a rate lease whose key turns hot is ended, and so is one
 * whose key went quiet (its tokens are given back). */
#include <math.h>

#include "lease_int.h"
#include "metrics/metrics.h"

#define RATE_WORTH 4.0    /* requests expected in a lease's life for it to pay */
#define RATE_HOT 1.0      /* decisions per interval from which token leases win */
#define RATE_HEADROOM 2.0 /* a share: up to this many times the demand here */
#define RATE_RENEW 4      /* renew in the last 1/RATE_RENEW of the lease */
#define RATE_IDLE 2       /* give back after 1/RATE_IDLE of a lease without use */
#define RATE_MIN_SLICE 2  /* tb_claim.lua's RATE_MIN_SLICE */

void rate_set_share(struct lease_entry *e, double share)
{
    if ((e->share > 0) != (share > 0))
        atomic_fetch_add(&metrics.lease_rate_keys, share > 0 ? 1 : -1);
    e->share = share;
}

void rate_refill(struct lease_entry *e, uint64_t now_us)
{
    uint64_t to = now_us < e->deadline_us ? now_us : e->deadline_us;

    if (e->share <= 0 || to <= e->refill_us)
        return;
    if (e->tokens >= e->slice) {
        e->frac = 0;
    } else {
        double add = e->frac + e->share * (double)(to - e->refill_us);
        double room = (double)(e->slice - e->tokens);
        if (add >= room) {
            e->tokens = e->slice;
            e->frac = 0;
        } else {
            double whole = floor(add);
            e->tokens += (uint64_t)whole;
            e->frac = add - whole;
        }
    }
    e->refill_us = to;
}

/* Requests per us on this key here: since the last call of the current rate
 * lease once that ran an eighth of its life, else over the entry's life (at
 * least 3 sightings). */
static double demand_per_us(const struct lease_table *t, const struct lease_entry *e,
                            uint64_t now_us)
{
    if (e->share > 0 && lease_since(now_us, e->rl_since_us) >= t->cfg.rate_ttl_us / RATE_RENEW / 2)
        return (double)e->rl_hits / (double)(now_us - e->rl_since_us);
    if (e->seen < 3 || now_us <= e->first_us)
        return 0;
    return (double)(e->seen - 1) / (double)(now_us - e->first_us);
}

/* Hot: about one decision per interval or more, on average (the smoothed
 * per-tick demand alone jumps with two requests in one tick). */
static int hot(const struct lease_table *t, const struct lease_entry *e, uint64_t now_us)
{
    return e->demand >= 2 * RATE_HOT ||
           demand_per_us(t, e, now_us) * (double)t->cfg.interval_us >= RATE_HOT;
}

/* Warm: seen often enough here for a rate lease to pay, not hot, and not
 * at its limit (Redis' last word was an empty bucket: splitting the rate of
 * a contested key strands it; token leases do better there). */
static int warm(const struct lease_table *t, const struct lease_entry *e, uint64_t now_us)
{
    if (e->known && e->t_last < 1)
        return 0;
    double d = demand_per_us(t, e, now_us);
    double r = (double)e->limit / (double)e->period_us;
    /* The slice its share would bring (burst x share / rate) must reach the
     * 2 tokens tb_claim.lua grants at least: a key seen here far less often
     * than the rate (many agents share it) would strand what it holds. */
    /* A lease that runs keeps going down to half of that: a key near the
     * line would otherwise start and end leases over and over. */
    double min_slice = e->share > 0 ? RATE_MIN_SLICE / 2.0 : RATE_MIN_SLICE;
    return !hot(t, e, now_us) && d * (double)t->cfg.rate_ttl_us >= RATE_WORTH &&
           (double)e->burst * RATE_HEADROOM * d / r >= min_slice;
}

int rate_wanted(const struct lease_table *t, const struct lease_entry *e, uint64_t now_us)
{
    if (t->cfg.rate_ttl_us == 0 || e->algorithm != BUCKET_TOKEN_BUCKET || e->burst < 1)
        return 0;
    return e->share > 0 || warm(t, e, now_us);
}

void rate_claim(const struct lease_table *t, struct lease_entry *e, struct lease_job *j,
                uint64_t now_us)
{
    j->rated = 1;
    j->ttl_ms = t->cfg.rate_ttl_us / 1000;
    METRIC_INC(lease_rate_claims);
    /* Taken from the central bucket for the waiters (tb_claim adds one for
     * the local bucket that ran dry, when the central bucket can spare it). */
    j->want = e->nwait;
    if (warm(t, e, now_us)) {
        double r = (double)e->limit / (double)e->period_us; /* tokens per us */
        double d = demand_per_us(t, e, now_us) / r * 1e6;
        double want = RATE_HEADROOM * d;
        j->rate_ppm = want >= 1e6 ? 1000000 : (uint64_t)ceil(want);
        j->demand_ppm = d >= 1e9 ? 1000000000 : (uint64_t)ceil(d);
    }
    rate_refill(e, now_us);
    if (j->rate_ppm == 0 && e->share > 0 && e->used < LEASE_VOID) {
        /* The lease ends (its key turned hot, or went below the line): its
         * tokens go back with this call rather than be dropped. */
        j->returned = e->tokens;
        METRIC_ADD(lease_tokens_returned, e->tokens);
        e->tokens = 0;
    }
    /* A share larger than the one asked for is cut here, now: Redis frees
     * the difference when the call runs (tb_claim), and the local refill
     * must not run on at the old share after that. */
    double asked = (double)j->rate_ppm * (double)e->limit / (double)e->period_us / 1e6;
    if (e->share > asked)
        rate_set_share(e, asked);
    e->rl_hits = 0;
    e->rl_since_us = now_us;
}

void rate_apply(const struct lease_table *t, struct lease_entry *e, const struct lease_job *j,
                uint64_t granted, uint64_t mine, uint64_t share_ppm, uint64_t had,
                uint64_t lease_ms, uint64_t now_us)
{
    rate_refill(e, now_us);
    /* Our tokens survive only if Redis still had our lease when the call
     * ran; otherwise it counted them as spent. */
    int kept = had > 0 && now_us < e->deadline_us;
    uint64_t have = kept ? e->tokens : 0;

    e->used = 0; /* a rate lease reports no spends: Redis counts the slice */
    if (!kept || e->share <= 0)
        e->frac = 0; /* else the refill under way carries on */
    e->refill_us = now_us;
    if (share_ppm > 0 && mine > 0 && lease_ms > 0) {
        rate_set_share(e, (double)share_ppm * (double)e->limit / (double)e->period_us / 1e6);
        e->slice = mine;
        e->tokens = have + granted;
        e->deadline_us = j->sent_us + lease_ms * 1000 - lease_margin_for(t, lease_ms * 1000);
    } else {
        /* No share: granted tokens are for the waiters, now or never. */
        rate_set_share(e, 0);
        e->slice = 0;
        e->tokens = granted;
        e->deadline_us = now_us + 1;
    }
}

/* A lease is renewed (resized, extended) in its last quarter when it still
 * sees demand, and, so that shares follow demand across the fleet, also once
 * it has run half its life since the last call and served at least
 * RATE_WORTH requests here since (renewals stay a small share of them). */
static int renew_due(const struct lease_table *t, const struct lease_entry *e, uint64_t now_us)
{
    uint64_t quarter = t->cfg.rate_ttl_us / RATE_RENEW;

    uint64_t ran = lease_since(now_us, e->rl_since_us);

    if (e->deadline_us - now_us < quarter)
        return e->rl_hits > 0;
    /* Holding much more than the demand seen here since the last call asks
     * for (a first estimate from a few close requests can be far too high):
     * give it up early, other agents may be short of it. */
    if (ran >= quarter / 2 && e->share > 1.5 * RATE_HEADROOM * (double)e->rl_hits / (double)ran)
        return 1;
    return ran >= 2 * quarter && e->rl_hits >= RATE_WORTH;
}

int rate_tick(const struct lease_table *t, struct lease_entry *e, uint64_t now_us)
{
    if (hot(t, e, now_us))
        return RATE_RENEW; /* rate_claim ends it, token leases take over */
    if (lease_since(now_us, e->last_hit_us) > t->cfg.rate_ttl_us / RATE_IDLE)
        return RATE_RETURN;
    return renew_due(t, e, now_us) ? RATE_RENEW : RATE_KEEP;
}

int rate_prefetch(const struct lease_table *t, const struct lease_entry *e, uint64_t now_us)
{
    return e->share > 0 && !e->inflight && renew_due(t, e, now_us);
}
