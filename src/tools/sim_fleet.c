/* SPDX-License-Identifier: Apache-2.0 */
/* sim_fleet.c - one simulation run: a fleet of agents, each with its own
 * lease table driven exactly as limiter.c drives it (lease_decide for every
 * request, lease_tick every interval, lease_reply for every answer), their
 * script calls built by the agent's own argument code (store/script_args.c),
 * sent over a model of the agent's Redis connection (store_conn.c: at most
 * two calls in flight, the rest go out together as one batch call), and run
 * by sim_redis on the agent's Lua scripts. All in virtual time, one event
 * queue (sim_heap.c); Redis runs each call when it arrives, at the
 * virtual time it reads with TIME.
 *
 * Beside the fleet, one exact in-memory bucket per key (bucket.c, as a
 * standalone agent) decides every request too: the reference for
 * utilisation and false denials (sim_score.c).
 *
 * --stall: for a while Redis answers nothing (the connection stays open:
 * calls run when it wakes up, in order). Each call then fails after the
 * timeout (lease_timeout, as limiter.c's timeouts_cb: waiters fall back,
 * the late reply still settles the grant), the agent counts as stalled
 * (decisions do not wait for Redis, one per STALL_PROBE_US still asks)
 * until a reply comes in time, and fallback decisions take from a backstop
 * bucket per agent and key, as limiter.c's decide_fallback (fail open).
 * As there, a call's timeout runs from when the agent hands it to its
 * connection (queued behind the two in flight or not), and is checked every
 * timeout / 5, so waits reach 1.2 x timeout. The watchdog that drops a
 * connection frozen past 10 x timeout is not modelled (the agent then
 * decides by fallback at once, as a stalled agent does between probes).
 *
 * This file: the agents' decisions, the reference and the run's event loop;
 * the connection and Redis are sim_fleet_conn.c. */
#include "tools/sim.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "lease/lease.h"
#include "store/script.h"
#include "tools/sim_fleet_int.h"
#include "tools/sim_redis.h"
#include "tools/sim_stats.h"
#include "tools/sim_traffic.h"

/* ---- keys --------------------------------------------------------------------------- */

/* The Redis key of client key k, as limiter.c's redis_key() builds it:
 * prefix, algorithm, rule, client key. */
static size_t key_name(const struct sim *s, uint32_t k, char *buf)
{
    return (size_t)snprintf(buf, KEYBUF, KEY_PREFIX "%s" RULE_NAME ":%u",
                            s->p.algorithm == BUCKET_FIXED_WINDOW     ? "fw:"
                            : s->p.algorithm == BUCKET_SLIDING_WINDOW ? "sw:"
                                                                      : "t2:",
                            k);
}

static uint32_t key_id(const char *key, size_t len)
{
    const char *p = key + len;
    while (p > key && p[-1] != ':')
        p--;
    return (uint32_t)strtoul(p, NULL, 10);
}

/* ---- decisions --------------------------------------------------------------------- */

/* A decision for a request of n tokens that arrived at t0, taken now
 * (blocked: a block ran on its key then, --block-for). */
static void record_n(struct sim *s, uint32_t key, int allowed, int ref_allowed, uint64_t t0,
                     uint64_t n, int blocked)
{
    struct sim_result *r = s->res;
    uint64_t wait_us = s->now - t0;

    sim_score_record_n(&s->sc, r, key, allowed, ref_allowed, s->now, wait_us, n);
    r->models.block_denials += blocked && !allowed;
    r->models.block_admits += blocked && allowed;
    if (s->rg)
        sim_region_record(s, key, t0, allowed, ref_allowed);
    if (!s->stall_end)
        return;
    if (t0 >= s->stall_start && t0 < s->stall_end) {
        r->stall.decisions++;
        r->stall.admitted += allowed != 0;
        r->stall.false_denials += !allowed && ref_allowed;
        sim_hist_add(&s->stall_wait_h, wait_us);
    }
    if (allowed && (s->now < s->stall_start || s->now >= s->settle_end))
        sim_bound_admit(&s->outbound, &s->outwin[key], s->now - SIM_T0_US);
}

static void record(struct sim *s, uint32_t key, int allowed, int ref_allowed, uint64_t t0)
{
    record_n(s, key, allowed, ref_allowed, t0, 1, 0);
}

/* A decided waiter. */
static void record_wait(struct sim *s, const struct wait *x)
{
    record_n(s, x->key, x->out.allowed, x->ref_allowed, x->t0, x->cost, x->blocked);
}

/* Decided without Redis: limiter.c's decide_fallback, fail open, from the
 * agent's backstop bucket for the key. */
static void fallback(struct sim *s, unsigned ai, uint32_t key, int ref_allowed, uint64_t t0)
{
    struct bucket_result br;

    s->res->fallbacks++;
    if (!s->bs) { /* no stall: a fallback is a fault, counted and denied */
        record(s, key, 0, ref_allowed, t0);
        return;
    }
    size_t i = (size_t)ai * s->nkeys + key;
    bucket_take(&s->bs[i], &s->o->backstop, s->now, 1, &br);
    s->res->stall.fallbacks++;
    if (!s->bs_first[i])
        s->bs_first[i] = s->now;
    s->bs_last[i] = s->now;
    s->last_fb = s->now;
    if (br.allowed) {
        s->res->stall.fallback_admitted++;
        sim_bound_admit(&s->bsbound, &s->bswin[i], s->now - SIM_T0_US);
    }
    record(s, key, br.allowed, ref_allowed, t0);
}

static struct wait *wait_get(struct sim *s)
{
    struct wait *w = s->free_waits;
    if (w) {
        s->free_waits = w->free_next;
        return w;
    }
    w = malloc(sizeof(*w));
    if (!w)
        s->oom = 1;
    return w;
}

static void wait_put(struct sim *s, struct wait *w)
{
    w->free_next = s->free_waits;
    s->free_waits = w;
}

/* Waiters of agent ai decided by a reply (done) or left to the fallback (fb). */
static void complete(struct sim *s, unsigned ai, struct lease_waiter *done, struct lease_waiter *fb)
{
    struct lease_waiter *w, *next;
    for (w = done; w; w = next) {
        next = w->next;
        struct wait *x = (struct wait *)w;
        record_wait(s, x);
        wait_put(s, x);
    }
    for (w = fb; w; w = next) {
        next = w->next;
        struct wait *x = (struct wait *)w;
        fallback(s, ai, x->key, x->ref_allowed, x->t0);
        wait_put(s, x);
    }
}

/* ---- replies and timeouts ------------------------------------------------------------- */

/* Every check_every: the calls that waited the timeout fail, their waiters
 * fall back and the agent is stalled (limiter.c's timeouts_cb). */
static void on_timeouts(struct sim *s, unsigned ai)
{
    struct agent *a = &s->agents[ai];
    struct sent *x;

    for (x = a->icheck; x && s->now - x->at >= s->o->timeout_us; x = x->next) {
        struct lease_waiter *fb = NULL;
        a->icheck = x->next;
        x->timed_out = 1;
        a->stalled = 1;
        s->res->stall.timeouts++;
        lease_timeout(a->leases, x->job, &fb);
        complete(s, ai, NULL, fb);
    }
}

/* The reply reaches the agent: limiter.c's on_reply() for each job, in
 * order; what they send goes out at once when the connection allows. */
static void on_reply(struct sim *s, struct command *c)
{
    unsigned ai = c->agent;
    struct agent *a = &s->agents[ai];

    a->inflight--;
    for (unsigned i = 0; i < c->n; i++) {
        struct lease_waiter *done = NULL, *fb = NULL;
        struct lease_job *next = NULL;
        /* only an answer in time ends a stall */
        if (s->stall_end && !sim_fleet_sent_done(s, a, c->jobs[i]))
            a->stalled = 0;
        if (sim_cost_mine(c->jobs[i])) { /* an exact call (--cost, --lease off) */
            struct wait *x = sim_cost_reply(s, c->jobs[i], c->ok[i], c->v[i], c->nv[i]);
            if (!x) /* a release */
                continue;
            if (x->w.fallback)
                fallback(s, ai, x->key, x->ref_allowed, x->t0);
            else
                record_wait(s, x);
            wait_put(s, x);
            continue;
        }
        lease_reply(a->leases, c->jobs[i], c->ok[i], c->v[i], c->nv[i], s->now, &done, &fb, &next);
        complete(s, ai, done, fb);
        if (next)
            sim_fleet_conn_send(s, ai, next, 0);
    }
    sim_fleet_command_free(c);
    sim_fleet_uncork(s, ai);
}

/* ---- requests, ticks, samples ---------------------------------------------------------- */

static void on_request(struct sim *s, uint32_t key, unsigned ai)
{
    struct agent *a = &s->agents[ai];
    struct lease_job *job = NULL;
    char name[KEYBUF];
    size_t len = key_name(s, key, name);
    struct wait *w = wait_get(s);

    if (!w)
        return;
    uint64_t n = s->o->models ? sim_cost_draw(s) : 1;
    int ref_allowed =
        s->cc ? sim_cc_reference(s, key) : sim_score_reference_n(&s->sc, s->res, key, s->now, n);
    if (ref_allowed && s->now >= s->stall_start && s->now < s->stall_end)
        s->res->stall.ref_admitted++;
    memset(w, 0, sizeof(*w));
    w->w.out = &w->out;
    w->w.req = w;
    w->t0 = s->now;
    w->key = key;
    w->ref_allowed = ref_allowed;
    w->cost = n;
    w->blocked = s->o->models && sim_cost_blocked(s, name, len);
    if (s->rg)
        sim_region_request(s, ai, key);
    if (s->cc) { /* --concurrency: one cc_acquire (limiter_cc.c) */
        sim_cc_acquire(s, ai, name, len, w);
        return;
    }
    /* limiter.c's redis_stalled(): while stalled, only a probe asks Redis */
    int up = 1;
    if (a->stalled) {
        if (s->now - a->last_probe >= STALL_PROBE_US)
            a->last_probe = s->now;
        else
            up = 0;
    }
    /* lease_decide is lease_decide_cost of 1 */
    int v = s->o->lease_off ? LEASE_EXACT
                            : lease_decide_cost(a->leases, name, len, &s->p, n, s->now, up, &w->w,
                                                &w->out, &job);
    if (v == LEASE_EXACT) { /* limiter_core.c's decide_leased: one exact call */
        v = up ? LEASE_PENDING : LEASE_DOWN;
        if (up)
            sim_cost_exact(s, ai, name, len, w);
    }
    if (v == LEASE_DOWN)
        fallback(s, ai, key, ref_allowed, s->now);
    else if (v == LEASE_DONE)
        record_wait(s, w);
    if (v != LEASE_PENDING)
        wait_put(s, w);
    if (job) { /* limiter.c queues it; the Redis thread sends it corked */
        sim_fleet_conn_send(s, ai, job, 1);
        sim_fleet_uncork(s, ai);
    }
}

static void on_tick(struct sim *s, unsigned ai)
{
    struct lease_job *jobs = NULL, *next;

    lease_tick(s->agents[ai].leases, s->now, 1, &jobs);
    for (; jobs; jobs = next) { /* limiter.c's send_jobs(): corked */
        next = jobs->next;
        sim_fleet_conn_send(s, ai, jobs, 1);
    }
    sim_fleet_uncork(s, ai);
}

static void held_cb(void *ctx, const char *key, size_t keylen, uint64_t tokens)
{
    struct sim *s = ctx;
    uint32_t k = key_id(key, keylen);
    if (s->held[k] == 0)
        s->touched[s->ntouched++] = k;
    s->held[k] += tokens;
}

/* Tokens held on agents, per key that any agent holds some for. */
static void on_sample(struct sim *s)
{
    for (unsigned i = 0; i < s->o->agents; i++)
        lease_foreach_held(s->agents[i].leases, s->now, held_cb, s);
    for (size_t i = 0; i < s->ntouched; i++) {
        sim_hist_add(&s->held_h, s->held[s->touched[i]]);
        s->held[s->touched[i]] = 0;
    }
    s->ntouched = 0;
}

/* ---- the run ------------------------------------------------------------------------------ */

static int setup(struct sim *s, char *err, size_t errlen)
{
    const struct sim_opts *o = s->o;
    uint64_t keys = o->trace ? sim_trace_keys(o->trace) : o->keys;
    struct sim_rng rng;

    s->p.algorithm = o->algorithm;
    s->p.limit = o->limit;
    s->p.period_us = o->period_ms * 1000;
    s->p.period_ms = o->period_ms;
    s->p.burst = o->burst;
    /* --regions: one scope = global rule, whose regional buckets are fed,
     * as the agent's rule set marks them (rules_set.c): a blocked fed key
     * waits an interval at most for its claimer's deposit (lease_cache.c,
     * block_waiters), not the rule's retry */
    s->p.fed = o->regions > 0;
    s->lc.interval_us = o->interval_ms * 1000;
    s->lc.ttl_us = o->ttl_ms * 1000;
    s->lc.max_fraction = o->max_fraction;
    s->lc.rate_ttl_us = o->rate_ttl_ms * 1000;
    s->lc.exact_cold = 1; /* as the agent */
    s->lc.prefetch = 1;
    s->end = SIM_T0_US + (uint64_t)(o->seconds * 1e6);
    s->agents = calloc(o->agents, sizeof(*s->agents));
    s->held = calloc(keys, sizeof(*s->held));
    s->touched = malloc(keys * sizeof(*s->touched));
    s->args = malloc(CONN_BATCH_MAX * sizeof(*s->args));
    s->bkeys = malloc(CONN_BATCH_MAX * sizeof(*s->bkeys));
    s->bkeylen = malloc(CONN_BATCH_MAX * sizeof(*s->bkeylen));
    s->bargv = malloc(CONN_BATCH_MAX * (2 + SCRIPT_MAX_ARGC) * sizeof(*s->bargv));
    s->bargvlen = malloc(CONN_BATCH_MAX * (2 + SCRIPT_MAX_ARGC) * sizeof(*s->bargvlen));
    if (!s->agents || !s->held || !s->touched || !s->args || !s->bkeys || !s->bkeylen ||
        !s->bargv || !s->bargvlen || sim_score_init(&s->sc, &s->p, keys) < 0) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    if (o->models)
        sim_cost_setup(s);
    if (o->cc_limit && sim_cc_setup(s, keys, err, errlen) < 0)
        return -1;
    if (o->regions ? sim_region_setup(s, err, errlen) < 0
                   : !(s->redis = sim_redis_new(err, errlen)))
        return -1;
    if (!(s->traffic = sim_traffic_new(o, err, errlen)))
        return -1;
    if (o->stall_len_us > 0) {
        size_t n = (size_t)o->agents * keys;
        s->nkeys = keys;
        s->stall_start = SIM_T0_US + o->stall_start_us;
        s->stall_end = s->stall_start + o->stall_len_us;
        s->settle_end = s->stall_end + o->timeout_us + s->lc.interval_us;
        if (keys > UINT32_MAX || n / o->agents != keys || n > 50000000) {
            snprintf(err, errlen,
                     "--stall keeps a backstop per agent and key: agents x keys "
                     "at most 50,000,000");
            return -1;
        }
        s->bs = malloc(n * sizeof(*s->bs));
        s->bswin = calloc(n, sizeof(*s->bswin));
        s->bs_first = calloc(n, sizeof(*s->bs_first));
        s->bs_last = calloc(n, sizeof(*s->bs_last));
        s->outwin = calloc(keys, sizeof(*s->outwin));
        if (!s->bs || !s->bswin || !s->bs_first || !s->bs_last || !s->outwin) {
            snprintf(err, errlen, "out of memory");
            return -1;
        }
        for (size_t i = 0; i < n; i++)
            bucket_init(&s->bs[i], &o->backstop, SIM_T0_US);
        const struct bucket_params *bp = &o->backstop;
        sim_bound_init(&s->bsbound, bp->limit, bp->period_us,
                       sim_bound_burst(bp->algorithm, bp->limit, bp->burst));
        s->outbound = s->sc.bound;
        s->check_every = o->timeout_us / 5 > 2000 ? o->timeout_us / 5 : 2000;
        for (unsigned i = 0; i < o->agents; i++)
            sim_fleet_push(s, SIM_T0_US + s->check_every, EV_TIMEOUT, i, NULL, 0);
    }
    sim_rng_seed(&rng, o->seed ^ 0x5eedull);
    for (unsigned i = 0; i < o->agents; i++) {
        struct agent *a = &s->agents[i];
        snprintf(a->id, sizeof(a->id), "sim-agent-%u", i);
        if (!(a->leases = lease_table_new(&s->lc, STRIPES))) {
            snprintf(err, errlen, "out of memory");
            return -1;
        }
        /* Agents start at different instants: their ticks are not aligned. */
        sim_fleet_push(s, SIM_T0_US + (uint64_t)(sim_rng_unit(&rng) * (double)s->lc.interval_us),
                       EV_TICK, i, NULL, 0);
    }
    return 0;
}

static void teardown(struct sim *s)
{
    while (s->q.n > 0) { /* only after an error */
        struct sim_event e = sim_heap_pop(&s->q);
        if (e.kind == EV_EXEC || e.kind == EV_REPLY)
            sim_fleet_command_free(e.p);
    }
    for (unsigned i = 0; s->agents && i < s->o->agents; i++) {
        struct sent *x, *next;
        for (x = s->agents[i].ihead; x; x = next) { /* only after an error */
            next = x->next;
            free(x);
        }
        lease_table_free(s->agents[i].leases);
    }
    while (s->free_sent) {
        struct sent *x = s->free_sent;
        s->free_sent = x->next;
        free(x);
    }
    while (s->free_waits) {
        struct wait *w = s->free_waits;
        s->free_waits = w->free_next;
        free(w);
    }
    sim_region_free(s);
    sim_cc_free(s);
    sim_redis_free(s->redis);
    sim_traffic_free(s->traffic);
    free(s->agents);
    sim_score_free(&s->sc);
    free(s->held);
    free(s->touched);
    free(s->args);
    free(s->bkeys);
    free(s->bkeylen);
    free(s->bargv);
    free(s->bargvlen);
    sim_heap_free(&s->q);
    free(s->bs);
    free(s->bswin);
    free(s->bs_first);
    free(s->bs_last);
    free(s->outwin);
}

/* How often stranded tokens are counted: every interval for short runs,
 * 50 samples or more, at most 1 s apart (a count walks every agent). */
static uint64_t sample_every(const struct sim *s)
{
    double every = s->o->seconds * 1e6 / 50;
    if (every > 1e6)
        every = 1e6;
    if (every < (double)s->lc.interval_us)
        every = (double)s->lc.interval_us;
    return (uint64_t)every;
}

static void finish(struct sim *s, struct sim_result *r)
{
    double secs = s->o->seconds;
    r->calls_per_decision = r->decisions ? (double)r->redis_calls / (double)r->decisions : 0;
    r->ops_per_decision = r->decisions ? (double)r->script_ops / (double)r->decisions : 0;
    r->calls_per_s = secs > 0 ? (double)r->redis_calls / secs : 0;
    sim_score_finish(&s->sc, r);
    r->stranded_p99 = (double)sim_hist_quantile(&s->held_h, 0.99);
    r->stranded_max = (double)s->held_h.max;
    r->redis_keys_peak = sim_redis_keys_peak(s->redis);
    r->sim_seconds = secs;
    if (s->rg)
        sim_region_finish(s, r);
    if (!s->stall_end)
        return;
    struct sim_stall *st = &r->stall;
    const struct bucket_params *bp = &s->o->backstop;
    double rate = (double)bp->limit / (double)bp->period_us;
    size_t n = (size_t)s->o->agents * s->nkeys;
    for (size_t i = 0; i < n; i++)
        if (s->bs_first[i])
            st->backstop_allowed +=
                (double)(bucket_windowed(bp->algorithm) ? bp->limit : bp->burst) +
                rate * (double)(s->bs_last[i] - s->bs_first[i]);
    st->backstop_worst_excess = st->fallbacks ? sim_bound_worst(&s->bsbound) : 0;
    st->outside_worst_window_excess = sim_bound_worst(&s->outbound);
    st->settle_ms = (double)(s->settle_end - s->stall_end) / 1000.0;
    st->wait_p50_ms = (double)sim_hist_quantile(&s->stall_wait_h, 0.5) / 1000.0;
    st->wait_p99_ms = (double)sim_hist_quantile(&s->stall_wait_h, 0.99) / 1000.0;
    st->wait_max_ms = (double)s->stall_wait_h.max / 1000.0;
    st->recovery_ms = s->last_fb > s->stall_end ? (double)(s->last_fb - s->stall_end) / 1000.0 : 0;
}

int sim_run(const struct sim_opts *o, struct sim_result *res, char *err, size_t errlen)
{
    struct sim *s = calloc(1, sizeof(*s));
    struct timespec w0, w1;
    uint64_t at;
    uint32_t key;
    unsigned agent;
    int rc = -1;

    if (o->policy == SIM_POLICY_RATE) {
        free(s);
        return sim_run_rate(o, res, err, errlen);
    }
    clock_gettime(CLOCK_MONOTONIC, &w0);
    memset(res, 0, sizeof(*res));
    if (!s) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    struct sim_opts ro;
    if (o->regions) { /* --agents is per region */
        ro = *o;
        ro.agents = o->agents * o->regions;
        o = &ro;
    }
    s->o = o;
    s->res = res;
    if (setup(s, err, errlen) < 0)
        goto out;
    uint64_t every = sample_every(s);
    sim_fleet_push(s, SIM_T0_US + every, EV_SAMPLE, 0, NULL, 0);
    if (sim_traffic_next(s->traffic, &at, &key, &agent) == 0)
        sim_fleet_push(s, SIM_T0_US + at, EV_REQ, agent, NULL, key);
    /* Requests and samples stop at the end, ticks after the tail (leases
     * given back); the calls in flight and the claims they lead to run to
     * completion, so every request is decided. */
    while (s->q.n > 0 && !s->oom) {
        struct sim_event e = sim_heap_pop(&s->q);
        s->now = e.at;
        switch (e.kind) {
        case EV_REQ:
            on_request(s, e.key, e.agent);
            if (sim_traffic_next(s->traffic, &at, &key, &agent) == 0)
                sim_fleet_push(s, SIM_T0_US + at, EV_REQ, agent, NULL, key);
            break;
        case EV_TICK:
            if (s->now < s->end + s->o->tail_us) {
                on_tick(s, e.agent);
                sim_fleet_push(s, s->now + s->lc.interval_us, EV_TICK, e.agent, NULL, 0);
            }
            break;
        case EV_EXEC:
            sim_fleet_exec(s, e.p);
            sim_fleet_push(s, ((struct command *)e.p)->reply_at, EV_REPLY, e.agent, e.p, 0);
            break;
        case EV_REPLY:
            on_reply(s, e.p);
            break;
        case EV_TIMEOUT:
            /* as the ticks: until the tail's end, while calls are still out */
            if (s->now < s->end + s->o->tail_us || s->agents[e.agent].ihead) {
                on_timeouts(s, e.agent);
                sim_fleet_push(s, s->now + s->check_every, EV_TIMEOUT, e.agent, NULL, 0);
            }
            break;
        case EV_CC_END:
            sim_cc_end(s, e.agent, e.key, e.p);
            break;
        case EV_REGION:
        case EV_GEXEC:
        case EV_GREPLY:
            sim_region_event(s, e.kind, e.agent, e.key);
            break;
        case EV_SAMPLE:
            if (s->now < s->end) {
                on_sample(s);
                sim_fleet_push(s, s->now + every, EV_SAMPLE, 0, NULL, 0);
            }
            break;
        }
    }
    if (s->oom) {
        snprintf(err, errlen, "out of memory");
        goto out;
    }
    finish(s, res);
    rc = 0;
out:
    teardown(s);
    free(s);
    clock_gettime(CLOCK_MONOTONIC, &w1);
    res->wall_s = (double)(w1.tv_sec - w0.tv_sec) + (double)(w1.tv_nsec - w0.tv_nsec) / 1e9;
    return rc;
}
