/* SPDX-License-Identifier: Apache-2.0 */
/* sim_region.c - spoa-sim --regions: one scope = global rule over several
 * regions, each with its own Redis and agents (sim_fleet.c, unchanged: the
 * real lease code and scripts), and a global Redis running the same
 * tb_claim.lua one level up, where each region is the "agent" of the
 * global bucket: it accounts what each region holds, tokens + sum
 * held[region] <= burst, exactly as a regional bucket accounts its agents.
 *
 * The model (doc/design.md, "Regions"):
 *
 * - A global rule's regional bucket never refills by itself: its agents'
 *   calls carry a rate of one token per REGION_PERIOD_MS (about none), and
 *   it is fed by deposits of tokens the region was granted by the global
 *   bucket. The regional key starts empty (a missing key would be full).
 *   The regional script's retry for an empty bucket is replaced by the
 *   rule's own time per token (what a regional script that knows it is fed
 *   would answer).
 * - One claimer per region: agent 0 of the region stands for the agent the
 *   lease lock in the regional Redis would elect. Every interval it reads
 *   what the region still holds per key (free tokens and agents' leases in
 *   its regional bucket, and what it has not deposited yet), reports to the
 *   global bucket what the region spent since (held by the global bucket
 *   minus still held: never more than spent), claims about (2 + global RTT /
 *   interval) intervals of the region's demand less what it holds (at most
 *   GLOBAL_MAX_FRACTION of the burst), gives back a surplus (withdrawn from
 *   the regional bucket before the call is sent), all keys in one call.
 *   The claimer's own regional calls are taken as instant (a regional RTT
 *   beside the global one); the region's demand is its requests per key.
 * - The region spends its tokens only until (time it sent the claim) + the
 *   global lease's ttl - an interval; before that (a regional ttl and an
 *   interval ahead) an unrenewed region withdraws what is free in its
 *   bucket (forfeited: the global bucket counts them spent at the lease's
 *   expiry), and its agents' leases end in time.
 * - Global Redis down (refuses calls arriving in the window; the claimer
 *   learns it a global timeout later): the region spends what it holds, and
 *   once its lease is over feeds its bucket at 1/regions of the rate, up to
 *   1/regions of the burst (the backstop share), until a call succeeds;
 *   backstop tokens left then are withdrawn.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/strbuf.h"
#include "store/script.h"
#include "tools/sim_fleet_int.h"
#include "tools/sim_redis.h"
#include "tools/sim_region_int.h"

#define REGION_PERIOD_MS 1000000000000ull /* a regional bucket's own refill: 1 per ~32 years */
#define RETRY_CAP                                                                                  \
    3                /* a region told the global bucket is empty waits at most this many intervals \
                      */
#define STANDING 1.0 /* an active key's standing share: this x burst / regions */
#define GLOBAL_MAX_FRACTION 0.25 /* [global] max_fraction's default (interface.md) */

static int pool(struct sim *s, struct region *R, uint32_t k, int64_t amt, uint64_t b,
                int64_t out[5])
{
    return sim_region_pool(s, R, k, amt, b, 0, out);
}

static void activate(struct region *R, uint32_t k)
{
    if (!R->is_active[k]) {
        R->is_active[k] = 1;
        R->active[R->nactive++] = k;
    }
}

int sim_region_setup(struct sim *s, char *err, size_t errlen)
{
    const struct sim_opts *o = s->o;
    struct sim_regions_run *g = calloc(1, sizeof(*g));

    if (!g) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    s->rg = g;
    g->n = o->regions;
    g->per = o->agents / o->regions;
    g->nkeys = o->keys;
    /* A region's lease on the global bucket outlives a few of its ticks, a
     * regional lease and the global round trip: renewed every interval, it
     * only runs out when the global Redis stays unreachable. */
    g->gttl_us = 4 * (o->interval_ms * 1000 + o->ttl_ms * 1000 + o->global_rtt_us);
    g->gtimeout_us = o->timeout_us ? o->timeout_us : 2 * o->global_rtt_us + 100000;
    g->down_start = SIM_T0_US + o->global_down_start_us;
    g->down_end = o->global_down_len_us ? g->down_start + o->global_down_len_us : 0;
    s->res->regions.global_ttl_ms = (double)g->gttl_us / 1000.0;
    g->r = calloc(g->n, sizeof(*g->r));
    g->down_adm = calloc(g->nkeys, sizeof(*g->down_adm));
    g->outwin = calloc(g->nkeys, sizeof(*g->outwin));
    g->outbound = s->sc.bound; /* (initialised: sim_score_init runs first) */
    g->settle_end = g->down_end ? g->down_end + g->gtimeout_us + s->lc.interval_us + s->lc.ttl_us +
                                      o->global_rtt_us
                                : 0;
    if (!g->r || !g->down_adm || !g->outwin || !(g->global = sim_redis_new(err, errlen))) {
        if (!g->r || !g->down_adm || !g->outwin)
            snprintf(err, errlen, "out of memory");
        return -1;
    }
    for (unsigned i = 0; i < g->n; i++) {
        struct region *R = &g->r[i];
        snprintf(R->id, sizeof(R->id), "region-%u", i);
        R->k = calloc(g->nkeys, sizeof(*R->k));
        R->active = malloc(g->nkeys * sizeof(*R->active));
        R->is_active = calloc(g->nkeys, 1);
        if (!R->k || !R->active || !R->is_active) {
            snprintf(err, errlen, "out of memory");
            return -1;
        }
        if (!(R->redis = sim_redis_new(err, errlen)) ||
            (R->pool_script = sim_redis_add(R->redis, sim_region_pool_lua, err, errlen)) < 0)
            return -1;
        s->now = SIM_T0_US;
        for (uint32_t k = 0; k < g->nkeys; k++) { /* the regional buckets start empty */
            int64_t v[5];
            if (pool(s, R, k, 0, o->burst, v) < 0) {
                snprintf(err, errlen, "%s", s->res->redis_error);
                return -1;
            }
        }
        /* claimers start at different instants, as agents do */
        sim_fleet_push(s, SIM_T0_US + (uint64_t)(o->interval_ms * 1000) * i / g->n, EV_REGION, i,
                       NULL, 0);
    }
    s->redis = g->r[0].redis;
    sim_region_fail_setup(s);
    return 0;
}

void sim_region_free(struct sim *s)
{
    struct sim_regions_run *g = s->rg;
    if (!g)
        return;
    for (unsigned i = 0; g->r && i < g->n; i++) {
        if (g->r[i].redis == s->redis)
            s->redis = NULL; /* (region 0's: freed here, not by sim_fleet.c's teardown) */
        sim_redis_free(g->r[i].redis);
        free(g->r[i].k);
        free(g->r[i].active);
        free(g->r[i].is_active);
    }
    free(g->r);
    free(g->down_adm);
    free(g->outwin);
    sim_redis_free(g->global);
    free(g);
    s->rg = NULL;
}

struct sim_redis *sim_region_redis(struct sim *s, unsigned ai)
{
    return s->rg->r[ai / s->rg->per].redis;
}

void sim_region_request(struct sim *s, unsigned ai, uint32_t key)
{
    struct region *R = &s->rg->r[ai / s->rg->per];
    R->k[key].demand++;
    activate(R, key);
}

void sim_region_record(struct sim *s, uint32_t key, uint64_t t0, int allowed, int ref_allowed)
{
    struct sim_regions *x = &s->res->regions;
    if (!s->rg->down_end)
        return;
    if (allowed && (s->now < s->rg->down_start || s->now >= s->rg->settle_end))
        sim_bound_admit(&s->rg->outbound, &s->rg->outwin[key], s->now - SIM_T0_US);
    if (t0 < s->rg->down_start || t0 >= s->rg->down_end)
        return;
    x->down_decisions++;
    x->down_admitted += allowed != 0;
    if (allowed && ++s->rg->down_adm[key] > x->down_key_admitted)
        x->down_key_admitted = s->rg->down_adm[key];
    x->down_ref_admitted += ref_allowed != 0;
}

void sim_region_args(struct lease_job *j, uint64_t save[2])
{
    save[0] = j->limit;
    save[1] = j->period_ms;
    j->limit = 1;
    j->period_ms = REGION_PERIOD_MS;
}

void sim_region_args_done(struct lease_job *j, const uint64_t save[2])
{
    j->limit = save[0];
    j->period_ms = save[1];
}

void sim_region_reply(const struct sim *s, int script, int64_t *v, int nv)
{
    double token_ms = (double)s->p.period_ms / (double)s->p.limit;
    int retry = script == SCRIPT_TB_CLAIM ? CLAIM_R_RETRY_MS : EXACT_R_RETRY_MS;
    int reset = script == SCRIPT_TB_CLAIM ? CLAIM_R_RESET_MS : EXACT_R_RESET_MS;
    if (script != SCRIPT_TB_CLAIM && script != SCRIPT_TB_EXACT)
        return;
    if (nv > retry && v[retry] > 0)
        v[retry] = (int64_t)ceil(token_ms);
    if (nv > reset)
        v[reset] = (int64_t)ceil(token_ms * (double)s->p.burst);
}

/* ---- the claimer ---------------------------------------------------------------------- */

/* Feed key k's bucket at the backstop share while the region's lease is over
 * and the global Redis unreachable. */
static void backstop(struct sim *s, struct region *R, struct rkey *st, uint32_t k)
{
    struct sim_regions_run *g = s->rg;
    double rate = (double)s->p.limit / (double)s->p.period_us / g->n;
    uint64_t bcap = s->p.burst / g->n > 0 ? s->p.burst / g->n : 1;
    int64_t v[5];

    if (!st->bs_last)
        st->bs_last = s->now, st->bs_acc = (double)bcap; /* a full backstop bucket */
    st->bs_acc += rate * (double)(s->now - st->bs_last);
    st->bs_last = s->now;
    if (st->bs_acc > (double)bcap)
        st->bs_acc = (double)bcap;
    if (st->bs_acc >= 1 && pool(s, R, k, (int64_t)st->bs_acc, bcap, v) == 0) {
        st->bs_acc -= (double)v[0];
        s->res->regions.backstop_tokens += (uint64_t)v[0];
    }
}

/* One operation for key k in the region's next global call, or none. */
static int plan(struct sim *s, struct region *R, uint32_t k)
{
    struct rkey *st = &R->k[k];
    uint64_t iv = s->lc.interval_us;
    int64_t v[5];

    st->op = 0;
    /* up at once, down over about two seconds of ticks */
    double d = (double)st->demand, ew = 0.8 * st->est + 0.2 * d;
    st->est = d > ew ? d : ew;
    st->demand = 0;
    if (st->est < 0.01)
        st->est = 0;
    /* out of lease: the free tokens go (the global bucket drops the lease at
     * its expiry); agents' leases end before the deadline */
    if (st->deadline && s->now + s->lc.ttl_us + iv >= st->deadline) {
        if (sim_region_pool(s, R, k, -(int64_t)s->p.burst - 1, s->p.burst, s->rg->dl_rule ? -1 : 0,
                            v) == 0)
            s->res->regions.forfeited += (uint64_t)-v[0] + st->pool;
        st->pool = 0;
        st->deadline = 0;
        st->gheld = 0; /* still counted in the global bucket until its expiry: reported
                        * spent, at the latest, by the next call's settling of mine */
        st->forfeited = 1;
    }
    if (pool(s, R, k, 0, s->p.burst, v) < 0)
        return 0;
    uint64_t hold = st->pool + (uint64_t)v[1] + (uint64_t)v[2];
    /* global unreachable and what the region held spent (or its lease
     * over): the backstop share, until a call succeeds again; the claim
     * below probes */
    if (R->down && (st->forfeited || hold == 0))
        st->bs_on = 1;
    if (st->bs_on)
        backstop(s, R, st, k);
    uint64_t used = st->gheld > hold ? st->gheld - hold : 0;
    double ahead = 2.0 + (double)s->o->global_rtt_us / (double)iv;
    uint64_t target = (uint64_t)ceil(st->est * ahead);
    uint64_t cap = (uint64_t)floor(GLOBAL_MAX_FRACTION * (double)s->p.burst);
    /* a key active here keeps a standing share: its next requests are
     * decided at once, not a global round trip later */
    uint64_t standing = (uint64_t)(STANDING * (double)s->p.burst / s->rg->n);
    if (cap < 1)
        cap = 1;
    if (standing < 1)
        standing = 1;
    if (st->est > 0 && target < standing)
        target = standing;
    if (target > (cap > standing ? cap : standing))
        target = cap > standing ? cap : standing;
    uint64_t ret = 0;
    if (hold > 2 * target + 1 || (target == 0 && hold > 0)) { /* give back the surplus */
        uint64_t surplus = hold - target;
        uint64_t fromp = surplus < st->pool ? surplus : st->pool;
        st->pool -= fromp;
        ret = fromp;
        if (surplus > fromp && pool(s, R, k, -(int64_t)(surplus - fromp), s->p.burst, v) == 0)
            ret += (uint64_t)-v[0];
        hold -= ret;
    }
    /* claim when what it holds runs low (half the target), up to the target */
    uint64_t want = target > hold && (hold == 0 || hold <= target / 2) ? target - hold : 0;
    if (want > cap) /* [global] max_fraction: at most this much at once */
        want = cap;
    if (s->now < st->retry_at) /* the global bucket said when it has a token */
        want = 0;
    /* renew a lease past half its life; report an idle key's spending */
    int renew = st->gheld && st->deadline && st->deadline < s->now + s->rg->gttl_us / 2;
    if (!want && !ret && !renew && !(used && st->est == 0))
        return 0;
    st->want = want, st->used = used, st->ret = ret, st->op = 1;
    return 1;
}

static void on_tick(struct sim *s, unsigned ri)
{
    struct sim_regions_run *g = s->rg;
    struct region *R = &g->r[ri];
    unsigned n = 0;

    if (s->now < s->end + s->o->tail_us)
        sim_fleet_push(s, s->now + s->lc.interval_us, EV_REGION, ri, NULL, 0);
    if (R->dead && sim_region_fail_tick(s, R))
        return;
    R->lock_until = s->now + g->lock_ttl_us; /* the lease lock, renewed */
    if (R->inflight)
        return;
    for (size_t i = 0; i < R->nactive; i++)
        n += (unsigned)plan(s, R, R->active[i]);
    if (!n)
        return;
    R->inflight = 1;
    R->sent_at = s->now;
    s->res->regions.global_calls++;
    s->res->regions.global_ops += n;
    sim_fleet_push(s, s->now + s->o->global_rtt_us / 2, EV_GEXEC, ri, NULL, 0);
}

/* The call reaches the global Redis: one tb_claim per key, the region as
 * the agent (one batch call on the wire: atomic per operation, as there). */
static void on_exec(struct sim *s, unsigned ri)
{
    struct sim_regions_run *g = s->rg;
    struct region *R = &g->r[ri];
    char key[KEYBUF], nums[7][24];
    const char *keys[1] = {key}, *argv[CLAIM_ARGC];
    size_t argvlen[CLAIM_ARGC];

    if (g->down_end && s->now >= g->down_start && s->now < g->down_end) {
        sim_fleet_push(s, R->sent_at + g->gtimeout_us, EV_GREPLY, ri, NULL, 1);
        return;
    }
    uint64_t a[7] = {s->p.limit, s->p.period_ms, s->p.burst, 0, 0, 0, g->gttl_us / 1000};
    argv[CLAIM_ARG_AGENT] = R->id;
    argvlen[CLAIM_ARG_AGENT] = strlen(R->id);
    for (size_t i = 0; i < R->nactive; i++) {
        uint32_t k = R->active[i];
        struct rkey *st = &R->k[k];
        size_t kl = sim_region_key_name(k, 1, key), n = 0;
        const char *err;
        if (!st->op)
            continue;
        a[3] = st->want, a[4] = st->used, a[5] = st->ret;
        for (int j = 0; j < 7; j++) {
            argvlen[1 + j] =
                (size_t)snprintf(nums[j], sizeof(nums[j]), "%llu", (unsigned long long)a[j]);
            argv[1 + j] = nums[j];
        }
        int64_t v[CLAIM_R_COUNT];
        if (sim_redis_eval(g->global, SCRIPT_TB_CLAIM, s->now, 1, keys, &kl, CLAIM_ARGC, argv,
                           argvlen, v, CLAIM_R_COUNT, &n, &err) < 0 ||
            n <= CLAIM_R_MINE) {
            if (s->res->redis_errors++ == 0)
                snprintf(s->res->redis_error, sizeof(s->res->redis_error), "global: %s",
                         n ? "short reply" : err);
            st->op = 0;
            continue;
        }
        st->granted = (uint64_t)v[CLAIM_R_GRANTED];
        st->mine = (uint64_t)v[CLAIM_R_MINE];
        st->lease_ms = (uint64_t)v[CLAIM_R_LEASE_MS];
        st->retry_ms = st->want && !st->granted ? (uint64_t)v[CLAIM_R_RETRY_MS] : 0;
    }
    sim_fleet_push(s, s->now + (s->o->global_rtt_us - s->o->global_rtt_us / 2), EV_GREPLY, ri, NULL,
                   0);
}

/* The answer reaches the claimer: deposit the grants (what does not fit now
 * waits in its pool). */
static void on_reply(struct sim *s, unsigned ri, int failed)
{
    struct sim_regions_run *g = s->rg;
    struct region *R = &g->r[ri];
    struct sim_regions *x = &s->res->regions;
    int64_t v[5];

    R->inflight = 0;
    if (R->dead) /* its claimer died: what it was granted is never deposited */
        return;
    if (failed) {
        R->down = 1;
        x->global_failed++;
        for (size_t i = 0; i < R->nactive; i++) {
            struct rkey *st = &R->k[R->active[i]];
            if (st->op)
                x->forfeited += st->ret; /* withdrawn, never given back */
            st->op = 0;
        }
        return;
    }
    R->down = 0;
    for (size_t i = 0; i < R->nactive; i++) {
        uint32_t k = R->active[i];
        struct rkey *st = &R->k[k];
        if (st->bs_on) { /* backstop tokens left are not the global bucket's */
            pool(s, R, k, -(int64_t)s->p.burst - 1, s->p.burst, v);
            st->bs_on = 0, st->bs_last = 0, st->bs_acc = 0;
        }
        st->forfeited = 0;
        if (!st->op)
            continue;
        st->op = 0;
        st->gheld = st->mine;
        st->deadline = st->mine && st->lease_ms * 1000 > s->lc.interval_us
                           ? R->sent_at + st->lease_ms * 1000 - s->lc.interval_us
                           : 0;
        st->pool += st->granted;
        /* a negative cache one level up, as the agent's: no claim until the
         * global bucket's next token (at most RETRY_CAP intervals) */
        uint64_t cap_us = (uint64_t)(RETRY_CAP * (double)s->lc.interval_us);
        uint64_t wait_us = st->retry_ms * 1000 < cap_us ? st->retry_ms * 1000 : cap_us;
        st->retry_at = st->retry_ms ? R->sent_at + wait_us : 0;
        x->granted += st->granted;
        x->returned += st->ret;
        /* the deadline, in the regional bucket: no grant a regional ttl before it */
        int64_t dl = !g->dl_rule                   ? 0
                     : st->deadline > s->lc.ttl_us ? (int64_t)(st->deadline - s->lc.ttl_us)
                                                   : -1;
        if ((st->pool || dl) && sim_region_pool(s, R, k, (int64_t)st->pool, s->p.burst, dl, v) == 0)
            st->pool -= (uint64_t)v[0];
    }
}

void sim_region_event(struct sim *s, int kind, unsigned region, uint32_t arg)
{
    if (kind == EV_REGION && arg)
        sim_region_fail_event(s, region, arg);
    else if (kind == EV_REGION)
        on_tick(s, region);
    else if (kind == EV_GEXEC)
        on_exec(s, region);
    else
        on_reply(s, region, (int)arg);
}

void sim_region_finish(struct sim *s, struct sim_result *r)
{
    struct sim_regions *x = &r->regions;
    struct sim_regions_run *g = s->rg;
    double rate = (double)s->p.limit / (double)s->p.period_us;

    x->global_calls_per_decision =
        r->decisions ? (double)x->global_calls / (double)r->decisions : 0;
    x->global_calls_per_s = s->o->seconds > 0 ? (double)x->global_calls / s->o->seconds : 0;
    if (g->down_end) { /* per key: what the regions held (at most b) and their backstops' */
        x->down_allowance = (double)s->p.burst * 2 + rate * (double)(g->down_end - g->down_start);
        x->outside_worst_window_excess = sim_bound_worst(&g->outbound);
        x->settle_ms = (double)(g->settle_end - g->down_end) / 1000.0;
    }
    size_t peak = 0;
    for (unsigned i = 0; i < g->n; i++)
        if (sim_redis_keys_peak(g->r[i].redis) > peak)
            peak = sim_redis_keys_peak(g->r[i].redis);
    r->redis_keys_peak = peak;
}

/* ---- options and output ------------------------------------------------------------------ */

int sim_region_check(const struct sim_opts *o, int trace, char *err, size_t errlen)
{
    const char *why = NULL;
    if (o->regions > 1000)
        why = "--regions: at most 1000";
    else if (trace)
        why = "--regions: not with --trace";
    else if (o->policy != SIM_POLICY_TOKEN || o->rate_ttl_ms)
        why = "--regions: token leases only (no --policy rate, no rate leases)";
    else if (o->algorithm != BUCKET_TOKEN_BUCKET)
        why = "--regions: token-bucket rules only";
    else if (o->stall_len_us)
        why = "--regions: not with --stall (see --global-down)";
    else if ((uint64_t)o->agents * o->regions > 100000)
        why = "--regions: at most 100000 agents in all";
    if (why)
        snprintf(err, errlen, "%s", why);
    return why ? -1 : 0;
}

void sim_region_print(const struct sim_opts *o, const struct sim_result *r)
{
    const struct sim_regions *x = &r->regions;
    printf("  regions %u x %u agents, global RTT %gms, global lease ttl %gms: %llu global calls "
           "(%.5f/decision, %.1f/s), %llu ops; tokens granted %llu, returned %llu, forfeited %llu\n"
           "    decisions wait (regional only): p99 %.3fms max %.3fms; bound b+rT worst "
           "excess %.3f\n",
           o->regions, o->agents, (double)o->global_rtt_us / 1e3, x->global_ttl_ms,
           (unsigned long long)x->global_calls, x->global_calls_per_decision, x->global_calls_per_s,
           (unsigned long long)x->global_ops, (unsigned long long)x->granted,
           (unsigned long long)x->returned, (unsigned long long)x->forfeited, r->wait_p99_ms,
           r->wait_max_ms, r->worst_window_excess);
    if (o->global_down_len_us)
        printf("    global down %gs at %gs: %llu decisions, %llu admitted (exact: %llu), "
               "the most by one key %llu (allowance 2b + r*LEN %.1f); %llu calls refused, "
               "%llu backstop tokens\n"
               "    outside it (+%.0fms): worst excess over b+rT %.3f (must be <= 0)\n",
               (double)o->global_down_len_us / 1e6, (double)o->global_down_start_us / 1e6,
               (unsigned long long)x->down_decisions, (unsigned long long)x->down_admitted,
               (unsigned long long)x->down_ref_admitted, (unsigned long long)x->down_key_admitted,
               x->down_allowance, (unsigned long long)x->global_failed,
               (unsigned long long)x->backstop_tokens, x->settle_ms,
               x->outside_worst_window_excess);
    sim_region_fail_print(o, r);
}

void sim_region_json(struct strbuf *b, const struct sim_opts *o, const struct sim_result *r)
{
    const struct sim_regions *x = &r->regions;
    strbuf_printf(b,
                  ",\"regions\":%u,\"global_rtt_ms\":%g,\"global_ttl_ms\":%g,"
                  "\"global_calls\":%llu,\"global_ops\":%llu,\"global_calls_per_decision\":%.6f,"
                  "\"global_calls_per_s\":%.1f,\"global_granted\":%llu,\"global_returned\":%llu,"
                  "\"global_forfeited\":%llu,\"global_failed\":%llu,\"backstop_tokens\":%llu",
                  o->regions, (double)o->global_rtt_us / 1e3, x->global_ttl_ms,
                  (unsigned long long)x->global_calls, (unsigned long long)x->global_ops,
                  x->global_calls_per_decision, x->global_calls_per_s,
                  (unsigned long long)x->granted, (unsigned long long)x->returned,
                  (unsigned long long)x->forfeited, (unsigned long long)x->global_failed,
                  (unsigned long long)x->backstop_tokens);
    if (o->global_down_len_us)
        strbuf_printf(b,
                      ",\"global_down_start_s\":%g,\"global_down_s\":%g,\"down_decisions\":%llu,"
                      "\"down_admitted\":%llu,\"down_reference_admitted\":%llu,"
                      "\"down_key_admitted\":%llu,\"down_allowance\":%.3f,"
                      "\"down_outside_worst_window_excess\":%.6f,\"down_settle_ms\":%.3f",
                      (double)o->global_down_start_us / 1e6, (double)o->global_down_len_us / 1e6,
                      (unsigned long long)x->down_decisions, (unsigned long long)x->down_admitted,
                      (unsigned long long)x->down_ref_admitted,
                      (unsigned long long)x->down_key_admitted, x->down_allowance,
                      x->outside_worst_window_excess, x->settle_ms);
    sim_region_fail_json(b, o, r);
}

int sim_region_verdict(const struct sim_opts *o, const struct sim_result *r)
{
    const struct sim_regions *x = &r->regions;
    int rc = sim_region_fail_verdict(o, r);
    if (!o->global_down_len_us)
        return rc;
    if ((double)x->down_key_admitted > x->down_allowance + 1e-9) {
        fprintf(stderr,
                "spoa-sim: during the global outage a key admitted %llu, over its "
                "allowance 2b + r*LEN = %.1f\n",
                (unsigned long long)x->down_key_admitted, x->down_allowance);
        rc = -1;
    }
    if (!(x->outside_worst_window_excess <= 1e-9)) {
        fprintf(stderr,
                "spoa-sim: outside the global outage the bound b + r*T was exceeded by "
                "%.3f requests\n",
                x->outside_worst_window_excess);
        rc = -1;
    }
    return rc;
}
