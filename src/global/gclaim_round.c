/* SPDX-License-Identifier: Apache-2.0 */
/* gclaim_round.c - the claimer's round (gclaim.h): the region's set of
 * active keys, each key's regional bucket read and moved as gplan.h plans,
 * then one corked batch of global claims, and what their answers deposit.
 * On the loop thread; a phase not answered in time gives the round up. */
#include "global/gclaim_int.h"

#include <ev.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "core/util.h"
#include "core/warning.h"
#include "metrics/metrics.h"

/* ---- the round ---------------------------------------------------------------------------- */

/* The next round before the next tick, for a key one claim per interval
 * cannot feed (gplan_next_us). */
void gclaim_soon_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
    struct gclaim *g = w->data;
    (void)loop;
    (void)revents;
    if (!g->stopped && g->st.claimer && !g->in_round)
        gclaim_start_round(g);
}

static void round_end(struct gclaim *g)
{
    g->in_round = 0;
    g->phase = PH_IDLE;
    g->nbatch = 0;
    ev_timer_stop(g->loop, &g->limit);
    uint64_t next = g->interval_us;
    for (size_t i = 0; i < g->tab_cap; i++)
        for (struct gentry *e = g->tab[i]; e; e = e->next) {
            struct gplan_cfg c = gclaim_plan_cfg(g, e);
            uint64_t n = gplan_next_us(&c, &e->k);
            if (n < next)
                next = n;
        }
    if (next < g->interval_us && !g->stopped) {
        ev_timer_stop(g->loop, &g->soon);
        ev_timer_set(&g->soon, (double)next / 1e6, 0.);
        ev_timer_start(g->loop, &g->soon);
    }
}

static void arm(struct gclaim *g, int phase, uint64_t us)
{
    g->phase = phase;
    ev_timer_stop(g->loop, &g->limit);
    ev_timer_set(&g->limit, (double)us / 1e6, 0.);
    ev_timer_start(g->loop, &g->limit);
}

/* The global Redis did not answer an operation (down, cut off, too slow,
 * an error): what was withdrawn for it is lost, and the region goes on its
 * own until a call passes. */
static void global_failed(struct gclaim *g, struct gentry *e, const char *why)
{
    uint64_t lost = gplan_failed(&e->k);
    g->st.forfeited += lost;
    g->st.failed++;
    METRIC_ADD(global_forfeited, lost);
    METRIC_INC(global_failed);
    if (!g->global_down) {
        g->global_down = 1;
        warning_raise(WARNING_GLOBAL_UNREACHABLE,
                      "region %s cannot reach the global Redis ([global]): it spends what it "
                      "holds of each scope = global rule, then admits its backstop share "
                      "(1/%u of the rule) until a call passes: %s",
                      g->region, g->st.regions ? g->st.regions : 1, why);
    }
}

/* A phase not answered in time: the round is given up, its late replies
 * ignored (a late grant is never deposited: the global bucket counts it
 * held until the region's lease expires, under-admission only). */
void gclaim_limit_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
    struct gclaim *g = w->data;
    (void)loop;
    (void)revents;
    if (g->phase == PH_GLOBAL)
        for (size_t i = 0; i < g->tab_cap; i++)
            for (struct gentry *e = g->tab[i]; e; e = e->next)
                if (e->k.op && e->gen == g->gen)
                    global_failed(g, e, "no answer within [global] timeout");
    LOG_DEBUG("\"global round given up\" region=%s phase=%d", g->region, g->phase);
    g->gen++;
    round_end(g);
}

/* tb_pool on e's regional bucket: move amt (0: read), dl_ms > 0 stores the
 * deadline that many ms from now, < 0 clears it. */
static void pool_call(struct gclaim *g, struct gentry *e, int64_t amt, int64_t dl_ms,
                      store_cb *cb, void *arg)
{
    char key[GC_MEMBER_MAX + 128], a[24], b[24], d[24], r[24];
    const char *argv[POOL_ARGC_RESERVE] = {a, b, d, r};
    size_t argvlen[POOL_ARGC_RESERVE];
    if (g->prefix_len + e->keylen >= sizeof(key))
        return;
    memcpy(key, g->prefix, g->prefix_len);
    memcpy(key + g->prefix_len, e->key, e->keylen);
    argvlen[0] = (size_t)snprintf(a, sizeof(a), "%" PRId64, amt);
    argvlen[1] = (size_t)snprintf(b, sizeof(b), "%" PRIu64, e->burst);
    argvlen[2] = (size_t)snprintf(d, sizeof(d), "%" PRId64, dl_ms);
    uint64_t reserve = gclaim_reserve(g, e->burst);
    argvlen[3] = (size_t)snprintf(r, sizeof(r), "%" PRIu64, reserve);
    g->inflight++;
    e->calls++;
    e->pcalls++;
    e->pamt = amt;
    int argc = reserve ? POOL_ARGC_RESERVE : dl_ms ? POOL_ARGC_DEADLINE : POOL_ARGC;
    store_eval(g->reg, SCRIPT_TB_POOL, key, g->prefix_len + e->keylen, argc, argv, argvlen, cb,
               arg);
}

static void on_fire_and_forget(void *arg, const struct store_result *res)
{
    struct gentry *e = arg;
    (void)res;
    gclaim_pool_done(e->g, e);
}

/* Free tokens dropped at a lease's end: forfeited (the global bucket
 * counts them spent at its lease's expiry). */
static void on_forfeit(void *arg, const struct store_result *res)
{
    struct gentry *e = arg;
    if (gclaim_pool_done(e->g, e))
        return;
    if (res->status == STORE_OK && res->n >= 1 && res->v[0] < 0) {
        e->g->st.forfeited += (uint64_t)-res->v[0];
        METRIC_ADD(global_forfeited, (uint64_t)-res->v[0]);
    }
}

static void send_global(struct gclaim *g);

static void phase_done(struct gclaim *g)
{
    if (--g->waits == 0)
        send_global(g);
}

/* The surplus withdrawn (or the backstop deposited): the key's operation. */
static void on_moved(void *arg, const struct store_result *res)
{
    struct gentry *e = arg;
    struct gclaim *g = e->g;
    if (gclaim_pool_done(g, e))
        return;
    /* no answer (the connection lost, or an error): whether it ran is not
     * known. A deposit of backstop tokens counts as made, so that it is
     * never made twice (over-admission); a withdrawal as not made (what it
     * took, if it ran, is lost: under-admission). */
    int64_t moved = res->status == STORE_OK && res->n >= 1 ? res->v[0]
                    : e->pamt > 0                          ? e->pamt
                                                           : 0;
    struct gplan_cfg c = gclaim_plan_cfg(g, e);
    if (moved > 0) { /* (late too: the tokens are in the bucket) */
        gplan_backstop_done(&e->k, (uint64_t)moved);
        g->st.backstop += (uint64_t)moved;
        METRIC_ADD(global_backstop, (uint64_t)moved);
    }
    if (e->gen != g->gen || g->phase != PH_READ)
        return; /* a given-up round's: a late withdrawal is lost, under-admission */
    gplan_withdrawn(&c, &e->k, &e->step, moved < 0 ? (uint64_t)-moved : 0, util_now_us());
    phase_done(g);
}

/* The regional bucket read: plan the key's round. */
static void on_read(void *arg, const struct store_result *res)
{
    struct gentry *e = arg;
    struct gclaim *g = e->g;
    if (gclaim_pool_done(g, e) || e->gen != g->gen || g->phase != PH_READ)
        return;
    if (res->status != STORE_OK || res->n < 6) { /* the regional Redis: nothing this round */
        e->k.op = 0;
        phase_done(g);
        return;
    }
    struct gread r = {res->v[1] > 0 ? (uint64_t)res->v[1] : 0,
                      res->v[2] > 0 ? (uint64_t)res->v[2] : 0,
                      res->v[5] > 0 ? (uint64_t)res->v[5] : 0,
                      e->seen_round == g->round}; /* in the region's set: noted lately */
    struct gplan_cfg c = gclaim_plan_cfg(g, e);
    uint64_t now = util_now_us();
    gplan_round(&c, &e->k, &r, g->global_down, now, &e->step);
    int64_t amt = (int64_t)e->step.backstop - (int64_t)e->step.withdraw;
    if (amt != 0) {
        pool_call(g, e, amt, 0, on_moved, e);
        return;
    }
    gplan_withdrawn(&c, &e->k, &e->step, 0, now);
    phase_done(g);
}

/* The members of the region's set: the keys of this round. */
static void on_active(void *arg, const struct store_result *res)
{
    struct gclaim *g = arg;
    if (gclaim_call_done(g, NULL) || g->phase != PH_ACTIVE)
        return;
    if (res->status == STORE_OK)
        for (size_t i = 0; i < res->nstr; i++) {
            const char *m = res->str[i], *p = m;
            uint64_t v[3];
            char *end;
            int ok = 1;
            for (int j = 0; j < 3 && ok; j++) {
                v[j] = strtoull(p, &end, 10);
                ok = end != p && *end == ':';
                p = end + 1;
            }
            size_t kl = res->str_len[i] - (size_t)(p - m);
            if (!ok || !kl || v[2] == 0 || v[1] == 0)
                continue;
            struct gentry *e = gclaim_upsert(g, p, kl);
            if (!e)
                break;
            e->limit = v[0], e->period_ms = v[1], e->burst = v[2];
            e->seen_round = g->round;
        }
    /* every key followed: read its bucket (those no longer in the set too:
     * what they hold is given back) */
    g->waits = 1;
    g->nbatch = 0;
    arm(g, PH_READ, g->reg_timeout_us);
    store_cork(g->reg, 1); /* the reads go as one batch */
    for (size_t i = 0; i < g->tab_cap; i++)
        for (struct gentry *e = g->tab[i]; e; e = e->next) {
            struct gplan_cfg c = gclaim_plan_cfg(g, e);
            e->k.op = 0;
            if (e->pcalls) /* a given-up round's regional call still out: next round */
                continue;
            e->gen = g->gen;
            if (gplan_expire(&c, &e->k, util_now_us())) {
                pool_call(g, e, -(int64_t)e->burst - 1, -1, on_forfeit, e);
            }
            g->waits++;
            pool_call(g, e, 0, 0, on_read, e);
        }
    store_cork(g->reg, 0);
    phase_done(g);
}

/* KEYS[1] the region's set: drop members older than ARGV[1] ms, answer the
 * newest ARGV[2]. */
static const char active_script[] =
    "local t = redis.call('TIME')\n"
    "local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)\n"
    "redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - tonumber(ARGV[1]))\n"
    "return redis.call('ZREVRANGEBYSCORE', KEYS[1], '+inf', '-inf', 'LIMIT', 0, "
    "tonumber(ARGV[2]))\n";

void gclaim_start_round(struct gclaim *g)
{
    char key[256], ms[24], max[24];
    int kl = snprintf(key, sizeof(key), "%sg:active", g->prefix);
    snprintf(ms, sizeof(ms), "%llu", (unsigned long long)GC_ACTIVE_MS);
    snprintf(max, sizeof(max), "%d", GC_READ_MAX);
    const char *argv[] = {"EVAL", active_script, "1", key, ms, max};
    size_t argvlen[] = {4, sizeof(active_script) - 1, 1, (size_t)kl, strlen(ms), strlen(max)};
    g->round++;
    g->gen++;
    gclaim_sweep(g);
    g->in_round = 1;
    arm(g, PH_ACTIVE, g->reg_timeout_us);
    g->inflight++;
    store_read(g->reg, key, (size_t)kl, 6, argv, argvlen, on_active, g);
}

/* A grant deposited. */
static void on_deposit(void *arg, const struct store_result *res)
{
    struct gentry *e = arg;
    if (gclaim_pool_done(e->g, e))
        return;
    if (res->status == STORE_OK && res->n >= 1 && res->v[0] > 0)
        gplan_deposited(&e->k, (uint64_t)res->v[0]);
    else if (res->status != STORE_OK && e->pamt > 0)
        /* no answer: it may have run. Counted made, never made twice: the
         * tokens, if it did not, are lost (under-admission; the global
         * bucket counts them the region's until its next report) */
        gplan_deposited(&e->k, (uint64_t)e->pamt);
}

/* One global call's operation: its key and round (a reply may come after
 * its round was given up, and after the key's next round began). */
struct gcall {
    struct gentry *e;
    unsigned gen;
};

/* What the global bucket answered for one key. */
static void on_global(void *arg, const struct store_result *res)
{
    struct gcall *gc = arg;
    struct gentry *e = gc->e;
    struct gclaim *g = e->g;
    unsigned gen = gc->gen;
    free(gc);
    if (gclaim_call_done(g, e))
        return;
    if (gen != g->gen || e->gen != gen || g->phase != PH_GLOBAL) {
        /* a given-up round's (see gclaim_limit_cb); an answer says how far the
         * global Redis is now, for the next probe's wait */
        if (res->status == STORE_OK && g->sent_us) {
            double rtt = (double)(util_now_us() - g->sent_us) / 1000.0;
            if (rtt > g->st.rtt_ms)
                g->st.rtt_ms = rtt;
        }
        return;
    }
    uint64_t now = util_now_us();
    if (res->status != STORE_OK || res->n <= CLAIM_R_MINE) {
        global_failed(g, e, res->err ? res->err : "down");
    } else {
        struct gplan_cfg c = gclaim_plan_cfg(g, e);
        uint64_t dl = 0, granted = (uint64_t)res->v[CLAIM_R_GRANTED];
        g->any_ok = 1;
        if (g->global_down) {
            g->global_down = 0;
            warning_clear(WARNING_GLOBAL_UNREACHABLE);
        }
        double rtt = (double)(now - g->sent_us) / 1000.0;
        g->st.rtt_ms = g->st.rtt_ms ? 0.8 * g->st.rtt_ms + 0.2 * rtt : rtt;
        if (gplan_recovered(&e->k))
            pool_call(g, e, -(int64_t)e->burst - 1, 0, on_fire_and_forget, e);
        g->st.granted += granted;
        g->st.returned += e->k.ret;
        METRIC_ADD(global_granted, granted);
        METRIC_ADD(global_returned, e->k.ret);
        uint64_t amt = gplan_reply(&c, &e->k, g->sent_us, now, granted,
                                   (uint64_t)res->v[CLAIM_R_MINE],
                                   (uint64_t)res->v[CLAIM_R_LEASE_MS],
                                   (uint64_t)res->v[CLAIM_R_RETRY_MS], &dl);
        if (amt || dl)
            pool_call(g, e, (int64_t)amt, dl ? (int64_t)(dl / 1000 ? dl / 1000 : 1) : -1,
                      on_deposit, e);
    }
    if (--g->waits == 0)
        round_end(g);
}

static void send_global(struct gclaim *g)
{
    char key[GC_MEMBER_MAX + 128], nums[7][24];
    const char *argv[CLAIM_ARGC];
    size_t argvlen[CLAIM_ARGC];
    size_t n = 0;

    for (size_t i = 0; i < g->tab_cap; i++)
        for (struct gentry *e = g->tab[i]; e; e = e->next)
            n += e->k.op && e->gen == g->gen;
    if (!n) {
        round_end(g);
        return;
    }
    g->sent_us = util_now_us();
    /* down: the call probes; a round waits no longer than a few round trips
     * as last seen (GC_PROBE_MIN at least) for it, so that the backstop's
     * rounds keep coming (gplan_next_us); a late answer lengthens the next
     * probe's wait (on_global) */
    uint64_t wait = g->timeout_us;
    if (g->global_down) {
        uint64_t rtt4 = (uint64_t)(4000 * g->st.rtt_ms);
        wait = rtt4 > GC_PROBE_MIN_US ? rtt4 : GC_PROBE_MIN_US;
        if (wait > g->timeout_us)
            wait = g->timeout_us;
    }
    arm(g, PH_GLOBAL, wait);
    g->waits = 1;
    g->any_ok = 0;
    g->st.calls++;
    METRIC_INC(global_calls);
    store_cork(g->glob, 1);
    for (size_t i = 0; i < g->tab_cap; i++)
        for (struct gentry *e = g->tab[i]; e; e = e->next) {
            if (!e->k.op || e->gen != g->gen || g->gprefix_len + e->keylen >= sizeof(key))
                continue;
            struct gplan_cfg c = gclaim_plan_cfg(g, e);
            uint64_t a[7] = {e->limit, e->period_ms, gplan_global_burst(&c), e->k.want,
                             e->k.used, e->k.ret, c.gttl_us / 1000};
            memcpy(key, g->gprefix, g->gprefix_len);
            memcpy(key + g->gprefix_len, e->key, e->keylen);
            argv[CLAIM_ARG_AGENT] = g->region;
            argvlen[CLAIM_ARG_AGENT] = strlen(g->region);
            for (int j = 0; j < 7; j++) {
                argvlen[CLAIM_ARG_LIMIT + j] =
                    (size_t)snprintf(nums[j], sizeof(nums[j]), "%" PRIu64, a[j]);
                argv[CLAIM_ARG_LIMIT + j] = nums[j];
            }
            struct gcall *gc = malloc(sizeof(*gc));
            if (!gc) {
                e->k.op = 0;
                continue;
            }
            gc->e = e;
            gc->gen = g->gen;
            g->st.claims++;
            METRIC_INC(global_claims);
            g->waits++;
            g->inflight++;
            e->calls++;
            store_eval(g->glob, SCRIPT_TB_CLAIM, key, g->gprefix_len + e->keylen, CLAIM_ARGC, argv,
                       argvlen, on_global, gc);
        }
    store_cork(g->glob, 0);
    if (--g->waits == 0)
        round_end(g);
}
