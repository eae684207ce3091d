/* SPDX-License-Identifier: Apache-2.0 */
/* sim_region.c - spoa-sim --regions: one scope = global rule over several
 * regions, each with its own Redis and agents (sim_fleet.c, unchanged: the
 * real lease code and scripts), and a global Redis running the same
 * tb_claim.lua one level up, where each region is the "agent" of the
 * global bucket: it accounts what each region holds, tokens + sum
 * held[region] <= burst, exactly as a regional bucket accounts its agents.
 *
 * The model (doc/design.md, "Regions") is the agent's own: the claimer's
 * decisions are gplan.h's (one struct gkey per region and key), its
 * regional calls the registry's tb_pool, the agents' regional calls the
 * real scripts in their fed mode (script_fed_arg: limit = -N, a bucket that
 * never refills, a missing key empty, unmet demand recorded for the
 * claimer, no grant past the deadline dl). What is the simulator's own is
 * the plumbing around them, as gclaim.c's is the agent's:
 *
 * - One claimer per region: agent 0 of the region stands for the agent the
 *   lease lock in the regional Redis elects. Every interval, for each key
 *   active in the region (a request reached one of its agents: the agents'
 *   notes of active keys), it runs gplan_expire (and withdraws what is free
 *   when the lease is about to end), reads the bucket with tb_pool (free
 *   tokens, leases, unmet demand: the demand as the agent sees it),
 *   gplan_round, the backstop deposit or surplus withdrawal, gplan_withdrawn;
 *   then one global call carries every key's operation (tb_claim, the region
 *   as the agent). The claimer's regional calls are taken as instant (a
 *   regional RTT beside the global one).
 * - The global call takes the global RTT; its answers go through
 *   gplan_reply and a deposit with the deadline as ms from now (dl).
 * - Global Redis down (refuses calls arriving in the window; the claimer
 *   learns it a global timeout later): gplan_failed, and the backstop share
 *   through gplan_round until a call succeeds (gplan_recovered: backstop
 *   tokens left are withdrawn).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/strbuf.h"
#include "store/script.h"
#include "tools/sim_fleet_int.h"
#include "tools/sim_redis.h"
#include "tools/sim_region_int.h"

#define GLOBAL_MAX_FRACTION 0.25 /* [global] max_fraction's default (interface.md) */

struct gplan_cfg sim_region_cfg(const struct sim *s)
{
    const struct sim_regions_run *g = s->rg;
    return (struct gplan_cfg){
        .limit = s->p.limit,
        .period_us = s->p.period_us,
        .burst = s->p.burst,
        .interval_us = s->lc.interval_us,
        .ttl_us = s->lc.ttl_us,
        .gttl_us = g->gttl_us,
        .rtt_us = s->o->global_rtt_us,
        .max_fraction = GLOBAL_MAX_FRACTION,
        .regions = g->n,
        .reserve = bucket_fed_reserve(s->o->global_reserve, g->n, s->p.burst),
    };
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
    g->gtimeout_us = o->timeout_us ? o->timeout_us : 2 * o->global_rtt_us + 100000;
    /* the global lease's ttl as the agent sets it (gclaim.c): from the
     * round trip or the global timeout, the longer */
    g->gttl_us =
        gplan_gttl_us(o->interval_ms * 1000, o->ttl_ms * 1000,
                      o->global_rtt_us > g->gtimeout_us ? o->global_rtt_us : g->gtimeout_us);
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
        if (!(R->redis = sim_redis_new(err, errlen))) /* (fed buckets: a missing key is empty) */
            return -1;
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
    activate(R, key);
    R->k[key].last_req = s->now;
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

/* ---- the claimer ---------------------------------------------------------------------- */

/* Key k's round (gclaim.c's on_active, on_read, on_moved): 1 when it has an
 * operation for the global call. */
static int plan(struct sim *s, struct region *R, uint32_t k)
{
    struct gkey *st = &R->k[k].k;
    struct gplan_cfg c = sim_region_cfg(s);
    struct gstep step;
    int64_t v[POOL_R_COUNT];

    st->op = 0;
    /* out of lease: the free tokens go (the global bucket drops the lease at
     * its expiry); agents' leases end before the deadline */
    uint64_t pooled = st->pool;
    if (gplan_expire(&c, st, s->now) &&
        sim_region_pool(s, R, k, -(int64_t)s->p.burst - 1, s->rg->dl_rule ? -1 : 0, v) == 0)
        s->res->regions.forfeited += (uint64_t)-v[POOL_R_MOVED] + pooled;
    if (sim_region_pool(s, R, k, 0, 0, v) < 0)
        return 0;
    struct gread r = {v[POOL_R_REMAINING] > 0 ? (uint64_t)v[POOL_R_REMAINING] : 0,
                      v[POOL_R_HELD] > 0 ? (uint64_t)v[POOL_R_HELD] : 0,
                      v[POOL_R_UNMET] > 0 ? (uint64_t)v[POOL_R_UNMET] : 0,
                      /* (the agent: in the region's set of keys noted lately) */
                      R->k[k].last_req && s->now - R->k[k].last_req < GPLAN_ACTIVE_US};
    gplan_round(&c, st, &r, R->down, s->now, &step);
    int64_t amt = (int64_t)step.backstop - (int64_t)step.withdraw, moved = 0;
    if (amt != 0 && sim_region_pool(s, R, k, amt, 0, v) == 0)
        moved = v[POOL_R_MOVED];
    if (moved > 0) {
        gplan_backstop_done(st, (uint64_t)moved);
        s->res->regions.backstop_tokens += (uint64_t)moved;
    }
    return gplan_withdrawn(&c, st, &step, moved < 0 ? (uint64_t)-moved : 0, s->now);
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
    struct gplan_cfg c = sim_region_cfg(s);
    uint64_t a[7] = {s->p.limit, s->p.period_ms, gplan_global_burst(&c), 0, 0, 0,
                     g->gttl_us / 1000};
    argv[CLAIM_ARG_AGENT] = R->id;
    argvlen[CLAIM_ARG_AGENT] = strlen(R->id);
    for (size_t i = 0; i < R->nactive; i++) {
        uint32_t k = R->active[i];
        struct rkey *st = &R->k[k];
        size_t kl = sim_region_key_name(k, 1, key), n = 0;
        const char *err;
        if (!st->k.op)
            continue;
        a[3] = st->k.want, a[4] = st->k.used, a[5] = st->k.ret;
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
            st->k.op = 0;
            continue;
        }
        st->granted = (uint64_t)v[CLAIM_R_GRANTED];
        st->mine = (uint64_t)v[CLAIM_R_MINE];
        st->lease_ms = (uint64_t)v[CLAIM_R_LEASE_MS];
        st->retry_ms = (uint64_t)v[CLAIM_R_RETRY_MS];
    }
    sim_fleet_push(s, s->now + (s->o->global_rtt_us - s->o->global_rtt_us / 2), EV_GREPLY, ri, NULL,
                   0);
}

/* The answer reaches the claimer (gclaim.c's on_global): deposit the
 * grants (what does not fit waits in the key's pool) with the deadline. */
static void on_reply(struct sim *s, unsigned ri, int failed)
{
    struct sim_regions_run *g = s->rg;
    struct region *R = &g->r[ri];
    struct sim_regions *x = &s->res->regions;
    struct gplan_cfg c = sim_region_cfg(s);
    int64_t v[POOL_R_COUNT];

    R->inflight = 0;
    if (R->dead) /* its claimer died: what it was granted is never deposited */
        return;
    if (failed) {
        R->down = 1;
        x->global_failed++;
        for (size_t i = 0; i < R->nactive; i++)
            x->forfeited += gplan_failed(&R->k[R->active[i]].k); /* withdrawn, never given back */
        return;
    }
    R->down = 0;
    for (size_t i = 0; i < R->nactive; i++) {
        uint32_t k = R->active[i];
        struct rkey *st = &R->k[k];
        uint64_t dl = 0;
        if (!st->k.op)
            continue;
        if (gplan_recovered(&st->k)) /* backstop tokens left are not the global bucket's */
            sim_region_pool(s, R, k, -(int64_t)s->p.burst - 1, 0, v);
        x->granted += st->granted;
        x->returned += st->k.ret;
        uint64_t amt = gplan_reply(&c, &st->k, R->sent_at, s->now, st->granted, st->mine,
                                   st->lease_ms, st->retry_ms, &dl);
        /* the deadline, in the regional bucket as ms from now: no grant a
         * regional ttl before it, whoever claims for the region next */
        int64_t dl_ms = !g->dl_rule ? 0 : dl ? (int64_t)(dl / 1000 ? dl / 1000 : 1) : -1;
        if ((amt || dl_ms) && sim_region_pool(s, R, k, (int64_t)amt, dl_ms, v) == 0 &&
            v[POOL_R_MOVED] > 0)
            gplan_deposited(&st->k, (uint64_t)v[POOL_R_MOVED]);
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
