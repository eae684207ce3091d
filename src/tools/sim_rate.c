/* SPDX-License-Identifier: Apache-2.0 */
/* sim_rate.c - spoa-sim --policy rate: the MODEL of rate leases (Google
 * Doorman's "capacity leases") written in the simulator before the agent
 * had any, kept to compare designs. The agent's own rate leases came later
 * (lease_rate.c and its script, [lease] rate_leases) and differ from this
 * model (they keep token leases for hot keys, give back, and batch); the
 * simulator runs them with --rate-leases on. The central grant logic below
 * is C standing in for a Redis script that was never written this way.
 *
 * The model, per key with rate r and burst b:
 *   - An agent holds a lease (r_i, b_i, until E): a local token bucket of
 *     capacity b_i refilled at r_i, usable until E (Redis time; the
 *     simulator's agents and Redis share one clock, a real implementation
 *     needs a clock-skew margin).
 *   - Redis keeps the remainder as a central bucket: capacity b - sum b_i,
 *     refill r - sum r_i. Tokens are only ever moved or dropped, never
 *     created, so the fleet's tokens never exceed b and refill at r at most:
 *     at most b + r*T in any interval T (sim_stats.c checks it exactly).
 *   - Grants are sized by observed demand: every call reports the agent's
 *     request rate d_i on the key; r_i = (1 - RESERVE) r d_i / sum d, at
 *     most HEADROOM d_i, b_i = b r_i / r, both capped by what the others
 *     hold (the central bucket keeps RESERVE of the rate and of the burst).
 *     No lease when b_i < 1 token (more agents on the key than tokens in
 *     its burst), nor when the agent expects fewer than WORTH requests in
 *     the lease's lifetime (d_i ttl < WORTH): such a lease costs a renewal
 *     call per ttl and strands what it holds. A lease far from its end is
 *     resized only for RESIZE x more rate.
 *   - Renewal (prefetch): a request that finds its lease within RENEW x ttl
 *     of its end sends a renewal in the background. A renewal may change
 *     r_i and b_i at once; Redis counts max(old, new) until the old end, so
 *     the agent may use the old grant until the reply arrives.
 *   - An agent without a lease, or with an empty local bucket, asks the
 *     central bucket (one call per request: take one token, and get a lease
 *     when worth it). A denial carries the time the central bucket will
 *     have a token: the agent denies locally until then.
 * Not modelled: a lease's unspent tokens are lost when it lapses (no give
 * back), idle agents' demand reports stay in sum d, the connection is
 * simple (every call is its own round trip: no batching, no in-flight
 * limit), and no clock skew between agents and Redis. */
#include "tools/sim.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tools/sim_heap.h"
#include "tools/sim_score.h"
#include "tools/sim_stats.h"
#include "tools/sim_traffic.h"

#define RESERVE 0.2  /* share of the rate kept central for agents without a lease */
#define WORTH 4.0    /* requests per lease lifetime for a lease to pay */
#define RENEW 0.25   /* renew when less than this share of ttl is left */
#define RESIZE 1.25  /* resize a lease before renewal only for this much more rate */
#define HEADROOM 2.0 /* a lease's rate: up to this many times the agent's demand */

enum { EV_REQ, EV_EXEC, EV_REPLY };
enum { CALL_TAKE, CALL_RENEW };

/* Redis: one agent's lease on a key. Counted as max(r, rh) and max(b, bh)
 * until hold_until (the previous grant, still in the agent's hands until it
 * reads the renewal), then as (r, b) until E. */
struct holder {
    unsigned agent;
    double r, b, rh, bh;
    uint64_t e, hold_until;
};

/* Redis: the central state of one key. */
struct ckey {
    double c;      /* central tokens */
    uint64_t last; /* when c was brought up to date */
    struct holder *h;
    unsigned nh, caph;
    double dsum; /* sum of the latest demand reports (per us) */
    float *dem;  /* per agent, the latest report; NULL until a call */
};

/* An agent's state for one key. */
struct aent {
    uint64_t id; /* agent << 32 | key, + 1 (0: empty slot) */
    double tok, r, b;
    uint64_t tlast, e, empty_until;
    uint32_t cnt_cur, cnt_prev;
    uint64_t win_start, prev_start;
    int renewing;
};

struct call {
    unsigned agent, kind;
    uint32_t key;
    double d;
    uint64_t t0;
    int ref_allowed;
    /* the reply */
    int allowed, grant;
    double r, b, moved;
    uint64_t e, retry_at;
};

struct rsim {
    const struct sim_opts *o;
    struct sim_result *res;
    struct bucket_params p;
    double rate, burst; /* per us, tokens */
    uint64_t ttl, now;
    struct ckey *ck;
    struct aent *tab;
    size_t tabcap, tabn;
    struct sim_heap q;   /* events */
    struct sim_score sc; /* the reference, the checks, the waits */
    int oom;
};

/* ---- the event queue --------------------------------------------------------------- */

static void push(struct rsim *s, uint64_t at, int kind, unsigned agent, uint32_t key,
                 struct call *c)
{
    if (sim_heap_push(&s->q, at, kind, agent, key, c) < 0)
        s->oom = 1;
}

/* ---- the agents' per-key state: one open-addressing table ---------------------------- */

static uint64_t mix(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    return x;
}

static struct aent *aent_get(struct rsim *s, unsigned agent, uint32_t key)
{
    uint64_t id = ((uint64_t)agent << 32 | key) + 1;
    if (2 * (s->tabn + 1) > s->tabcap) {
        size_t cap = s->tabcap ? s->tabcap * 2 : 1 << 16;
        struct aent *t = calloc(cap, sizeof(*t));
        if (!t) {
            s->oom = 1;
            return NULL;
        }
        for (size_t i = 0; i < s->tabcap; i++) {
            if (!s->tab[i].id)
                continue;
            size_t j = mix(s->tab[i].id) & (cap - 1);
            while (t[j].id)
                j = (j + 1) & (cap - 1);
            t[j] = s->tab[i];
        }
        free(s->tab);
        s->tab = t;
        s->tabcap = cap;
    }
    size_t j = mix(id) & (s->tabcap - 1);
    while (s->tab[j].id && s->tab[j].id != id)
        j = (j + 1) & (s->tabcap - 1);
    if (!s->tab[j].id) {
        memset(&s->tab[j], 0, sizeof(s->tab[j]));
        s->tab[j].id = id;
        s->tab[j].win_start = s->tab[j].prev_start = s->now;
        s->tabn++;
    }
    return &s->tab[j];
}

/* The agent's demand estimate (requests per us): the current and the
 * previous window of ttl, over at least one ttl. A shorter span (1 s was
 * tried) warms up faster but lets two close requests of a cold key win a
 * lease that strands burst: more false denials, not fewer calls. */
static double demand(const struct rsim *s, const struct aent *a)
{
    double span = (double)(s->now - a->prev_start);
    if (span < (double)s->ttl)
        span = (double)s->ttl;
    /* minus the request that triggers the report: it is always there
     * (inspection bias), and counting it makes cold keys look warm */
    return (double)(a->cnt_cur + a->cnt_prev - 1) / span;
}

static void count_request(struct rsim *s, struct aent *a)
{
    if (s->now - a->win_start >= s->ttl) {
        int gap = s->now - a->win_start >= 2 * s->ttl;
        a->cnt_prev = gap ? 0 : a->cnt_cur;
        a->prev_start = gap ? s->now - s->ttl : a->win_start;
        a->win_start = s->now;
        a->cnt_cur = 0;
    }
    a->cnt_cur++;
}

/* ---- Redis: the central grant logic (the model of a future script) --------------------- */

static double counted_r(const struct holder *h, uint64_t t)
{
    if (t >= h->e)
        return 0;
    return t < h->hold_until && h->rh > h->r ? h->rh : h->r;
}

static double counted_b(const struct holder *h, uint64_t t)
{
    if (t >= h->e)
        return 0;
    return t < h->hold_until && h->bh > h->b ? h->bh : h->b;
}

/* Bring the central bucket up to t: refill piecewise between the instants
 * where holds and leases end (the central rate and capacity change there),
 * then forget the leases that ended. */
static void advance(struct rsim *s, struct ckey *k, uint64_t t)
{
    while (k->last < t) {
        uint64_t nb = t;
        double sr = 0, sb = 0;
        for (unsigned i = 0; i < k->nh; i++) {
            const struct holder *h = &k->h[i];
            if (h->hold_until > k->last && h->hold_until < nb)
                nb = h->hold_until;
            if (h->e > k->last && h->e < nb)
                nb = h->e;
            sr += counted_r(h, k->last);
            sb += counted_b(h, k->last);
        }
        double cap = s->burst - sb, rc = s->rate - sr;
        k->c += (rc > 0 ? rc : 0) * (double)(nb - k->last);
        if (k->c > cap)
            k->c = cap;
        if (k->c < 0)
            k->c = 0;
        k->last = nb;
    }
    for (unsigned i = 0; i < k->nh;) {
        if (k->h[i].e <= t)
            k->h[i] = k->h[--k->nh];
        else
            i++;
    }
}

static void central_clip(struct rsim *s, struct ckey *k, uint64_t t)
{
    double sb = 0;
    for (unsigned i = 0; i < k->nh; i++)
        sb += counted_b(&k->h[i], t);
    if (k->c > s->burst - sb)
        k->c = s->burst - sb;
    if (k->c < 0)
        k->c = 0;
}

/* Decide whether agent c->agent gets (or renews) a lease, and its size. */
static void grant(struct rsim *s, struct ckey *k, struct call *c, uint64_t t)
{
    struct holder *me = NULL;
    double or = 0, ob = 0;

    for (unsigned i = 0; i < k->nh; i++) {
        if (k->h[i].agent == c->agent)
            me = &k->h[i];
        else
            or += counted_r(&k->h[i], t), ob += counted_b(&k->h[i], t);
    }
    /* A renewal comes near the lease's end; a take from an agent with a
     * lease means its local bucket ran dry: resize it now. */
    if (c->d * (double)s->ttl < WORTH || k->dsum <= 0)
        return;
    /* the agent's share of what is leased out, at most HEADROOM x its own
     * demand (so that the first agent to ask does not take it all) */
    double target = (1 - RESERVE) * s->rate * c->d / (k->dsum > c->d ? k->dsum : c->d);
    if (target > HEADROOM * c->d)
        target = HEADROOM * c->d;
    double r = target < s->rate - or ? target : s->rate - or ;
    /* Its slice of the burst, in proportion, out of what the others leave
     * of the leased part (the central bucket keeps RESERVE of the burst
     * too). Less than one token: no lease, the agent asks per request. */
    double b = s->burst * target / s->rate;
    double bfree = (1 - RESERVE) * s->burst - ob;
    if (b > bfree)
        b = bfree;
    if (r <= 0 || b < 1)
        return;
    /* A lease far from its end is resized only when that gives the agent
     * clearly more: each resize keeps max(old, new) counted until the old
     * end, rate and burst that nobody may use meanwhile. */
    if (me && me->e - t > (uint64_t)(RENEW * (double)s->ttl) && r < RESIZE * me->r)
        return;
    if (me) {
        if (t < me->e) { /* the old grant stays counted until it ends */
            double rh = t < me->hold_until && me->rh > me->r ? me->rh : me->r;
            double bh = t < me->hold_until && me->bh > me->b ? me->bh : me->b;
            me->rh = rh;
            me->bh = bh;
            me->hold_until = me->e;
        }
        c->moved = 0;
    } else {
        if (k->nh == k->caph) {
            unsigned cap = k->caph ? k->caph * 2 : 4;
            struct holder *h = realloc(k->h, cap * sizeof(*h));
            if (!h) {
                s->oom = 1;
                return;
            }
            k->h = h;
            k->caph = cap;
        }
        me = &k->h[k->nh++];
        memset(me, 0, sizeof(*me));
        me->agent = c->agent;
        c->moved = k->c < b ? k->c : b; /* tokens move, never appear */
        k->c -= c->moved;
    }
    me->r = r;
    me->b = b;
    me->e = t + s->ttl;
    central_clip(s, k, t);
    c->grant = 1;
    c->r = r;
    c->b = b;
    c->e = me->e;
    s->res->claims++;
}

static void exec_call(struct rsim *s, struct call *c)
{
    struct ckey *k = &s->ck[c->key];
    uint64_t t = s->now;

    advance(s, k, t);
    if (!k->dem && !(k->dem = calloc(s->o->agents, sizeof(*k->dem)))) {
        s->oom = 1;
        return;
    }
    k->dsum += c->d - k->dem[c->agent];
    k->dem[c->agent] = (float)c->d;
    if (c->kind == CALL_TAKE) {
        if (k->c >= 1) {
            k->c -= 1;
            c->allowed = 1;
        } else {
            double sr = 0;
            for (unsigned i = 0; i < k->nh; i++)
                sr += counted_r(&k->h[i], t);
            double rc = s->rate - sr;
            double wait = rc > 0 ? (1 - k->c) / rc : (double)s->ttl;
            c->retry_at = t + (uint64_t)(wait < (double)s->ttl ? wait : (double)s->ttl);
        }
    }
    grant(s, k, c, t);
}

/* ---- the agents --------------------------------------------------------------------------- */

static void record(struct rsim *s, uint32_t key, int allowed, int ref_allowed, uint64_t wait)
{
    sim_score_record(&s->sc, s->res, key, allowed, ref_allowed, s->now, wait);
}

static void send_call(struct rsim *s, unsigned agent, uint32_t key, int kind, double d,
                      int ref_allowed)
{
    struct call *c = calloc(1, sizeof(*c));
    if (!c) {
        s->oom = 1;
        return;
    }
    c->agent = agent;
    c->key = key;
    c->kind = (unsigned)kind;
    c->d = d;
    c->t0 = s->now;
    c->ref_allowed = ref_allowed;
    s->res->redis_calls++;
    s->res->script_ops++;
    push(s, s->now + s->o->rtt_us / 2, EV_EXEC, agent, key, c);
}

static void refill(const struct rsim *s, struct aent *a)
{
    uint64_t t = s->now < a->e ? s->now : a->e;
    if (t > a->tlast) {
        a->tok += a->r * (double)(t - a->tlast);
        if (a->tok > a->b)
            a->tok = a->b;
        a->tlast = t;
    }
}

static void on_request(struct rsim *s, unsigned agent, uint32_t key)
{
    struct aent *a = aent_get(s, agent, key);

    if (!a)
        return;
    int ref_allowed = sim_score_reference(&s->sc, s->res, key, s->now);
    count_request(s, a);
    if (s->now < a->e && !a->renewing && a->e - s->now < (uint64_t)(RENEW * (double)s->ttl)) {
        a->renewing = 1; /* prefetch: renew before the end, in the background */
        send_call(s, agent, key, CALL_RENEW, demand(s, a), 0);
    }
    if (s->now < a->e) {
        refill(s, a);
        if (a->tok >= 1) {
            a->tok -= 1;
            record(s, key, 1, ref_allowed, 0);
            return;
        }
    }
    if (s->now < a->empty_until) {
        record(s, key, 0, ref_allowed, 0);
        return;
    }
    send_call(s, agent, key, CALL_TAKE, demand(s, a), ref_allowed);
}

static void on_reply(struct rsim *s, struct call *c)
{
    struct aent *a = aent_get(s, c->agent, c->key);
    if (!a)
        return;
    if (c->kind == CALL_RENEW)
        a->renewing = 0;
    else if (!c->allowed)
        a->empty_until = c->retry_at;
    if (c->grant) {
        int had = s->now < a->e;
        if (had)
            refill(s, a);
        else
            a->tok = 0;
        a->tok += c->moved;
        if (a->tok > c->b)
            a->tok = c->b;
        a->r = c->r;
        a->b = c->b;
        a->e = c->e;
        a->tlast = s->now;
    }
    if (c->kind == CALL_TAKE)
        record(s, c->key, c->allowed, c->ref_allowed, s->now - c->t0);
}

/* ---- the run ------------------------------------------------------------------------------ */

int sim_run_rate(const struct sim_opts *o, struct sim_result *res, char *err, size_t errlen)
{
    struct rsim *s = calloc(1, sizeof(*s));
    struct sim_traffic *tr = NULL;
    struct timespec w0, w1;
    uint64_t at, keys = o->trace ? sim_trace_keys(o->trace) : o->keys;
    uint32_t key;
    unsigned agent;
    int rc = -1;

    clock_gettime(CLOCK_MONOTONIC, &w0);
    memset(res, 0, sizeof(*res));
    if (!s) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    s->o = o;
    s->res = res;
    if (o->algorithm != BUCKET_TOKEN_BUCKET) {
        snprintf(err, errlen, "--policy rate models token buckets only");
        goto out;
    }
    s->p.algorithm = o->algorithm;
    s->p.limit = o->limit;
    s->p.period_us = o->period_ms * 1000;
    s->p.period_ms = o->period_ms;
    s->p.burst = o->burst;
    s->rate = (double)o->limit / (double)s->p.period_us;
    s->burst = (double)o->burst;
    s->ttl = o->ttl_ms * 1000;
    s->ck = calloc(keys, sizeof(*s->ck));
    if (!s->ck || sim_score_init(&s->sc, &s->p, keys) < 0 ||
        !(tr = sim_traffic_new(o, err, errlen))) {
        if (!tr)
            goto out;
        snprintf(err, errlen, "out of memory");
        goto out;
    }
    for (uint64_t k = 0; k < keys; k++) {
        s->ck[k].c = s->burst; /* full, as the reference */
        s->ck[k].last = SIM_T0_US;
    }
    if (sim_traffic_next(tr, &at, &key, &agent) == 0)
        push(s, SIM_T0_US + at, EV_REQ, agent, key, NULL);
    while (s->q.n > 0 && !s->oom) {
        struct sim_event e = sim_heap_pop(&s->q);
        s->now = e.at;
        switch (e.kind) {
        case EV_REQ:
            on_request(s, e.agent, e.key);
            if (sim_traffic_next(tr, &at, &key, &agent) == 0)
                push(s, SIM_T0_US + at, EV_REQ, agent, key, NULL);
            break;
        case EV_EXEC:
            exec_call(s, e.p);
            push(s, s->now + (o->rtt_us - o->rtt_us / 2), EV_REPLY, e.agent, e.key, e.p);
            break;
        case EV_REPLY:
            on_reply(s, e.p);
            free(e.p);
            break;
        }
    }
    if (s->oom) {
        snprintf(err, errlen, "out of memory");
        goto out;
    }
    res->calls_per_decision =
        res->decisions ? (double)res->redis_calls / (double)res->decisions : 0;
    res->ops_per_decision = res->calls_per_decision;
    res->calls_per_s = (double)res->redis_calls / o->seconds;
    sim_score_finish(&s->sc, res);
    res->sim_seconds = o->seconds;
    rc = 0;
out:
    while (s->q.n > 0) {
        struct sim_event e = sim_heap_pop(&s->q);
        if (e.kind != EV_REQ)
            free(e.p);
    }
    for (uint64_t k = 0; s->ck && k < keys; k++) {
        free(s->ck[k].h);
        free(s->ck[k].dem);
    }
    sim_traffic_free(tr);
    free(s->ck);
    sim_score_free(&s->sc);
    free(s->tab);
    sim_heap_free(&s->q);
    free(s);
    clock_gettime(CLOCK_MONOTONIC, &w1);
    res->wall_s = (double)(w1.tv_sec - w0.tv_sec) + (double)(w1.tv_nsec - w0.tv_nsec) / 1e9;
    return rc;
}
