/* SPDX-License-Identifier: Apache-2.0 */
/* sim_region_fail.c - two failures of spoa-sim --regions (sim_region.c) at
 * the global level, with what they may over-admit (doc/design.md,
 * "Regions", the failure table):
 *
 * - --global-restart AT: the global Redis restarts empty at AT. Every
 *   global bucket is full again and counts no region as holding anything,
 *   while the regions still hold (and spend) what they were granted. The
 *   tokens held came from the old bucket, whose b + r*T counts them: over
 *   any interval the fleet admits at most b + r*T + b (one extra b, as for
 *   one region's Redis restarted empty). The claimers' later reports err
 *   towards "still held" (the new bucket caps them at what it counts).
 *
 * - --claimer-kill R:AT[:LEN][:nodeadline]: region R's claimer dies at AT: its grants in
 *   flight are lost, its memory (deadlines, what the global bucket counts
 *   the region holds, grants not deposited) with it. Its lease lock in the
 *   regional Redis, renewed at every tick, lasts lock_ttl = global ttl -
 *   regional ttl - 2 intervals (shorter than the global ttl less a regional
 *   ttl and an interval, an interval spared for the successor's tick);
 *   another agent of the region takes the lock at its first tick once the
 *   lock expired and LEN passed, and starts from what the regional Redis
 *   says: the free tokens, leases and unmet demand in each key's bucket
 *   (a fresh struct gkey, as the agent's successor starts), and, with the
 *   design's rule, the deadline stored there (dl, sent with every deposit
 *   as gplan_reply says: the fed scripts grant nothing from dl = deadline -
 *   regional ttl on, and drop what is free). Without the rule (:nodeadline) the region
 *   spends what it held past the global lease's expiry, when the global
 *   bucket has counted it spent and given it out again: the bound b + r*T
 *   breaks, by up to what the region held.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/strbuf.h"
#include "tools/sim_fleet_int.h"
#include "tools/sim_redis.h"
#include "tools/sim_region_int.h"

int sim_region_fail_opts(const char *restart, const char *kill, struct sim_opts *o, char *err,
                         size_t errlen)
{
    if (restart[0]) {
        if (sim_parse_us(restart, &o->global_restart_us) < 0) {
            snprintf(err, errlen, "bad --global-restart: want a time (e.g. 5s)");
            return -1;
        }
        o->global_restart = 1;
    }
    if (kill[0]) {
        char buf[96], *at, *len, *end, *off;
        snprintf(buf, sizeof(buf), "%s", kill);
        if ((off = strstr(buf, ":nodeadline")) && off[11] == '\0') { /* the rule off */
            *off = '\0';
            o->claimer_no_deadline = 1;
        }
        unsigned long r = strtoul(buf, &end, 10);
        at = end != buf && *end == ':' ? end + 1 : NULL;
        len = at ? strchr(at, ':') : NULL;
        if (len)
            *len++ = '\0';
        if (!at || r >= o->regions || sim_parse_us(at, &o->claimer_kill_at_us) < 0 ||
            (len && sim_parse_us(len, &o->claimer_kill_len_us) < 0)) {
            snprintf(err, errlen,
                     "bad --claimer-kill: want R:AT[:LEN][:nodeadline], "
                     "R < --regions (e.g. 1:5s)");
            return -1;
        }
        o->claimer_kill_region = (unsigned)r;
        o->claimer_kill = 1;
    }
    return 0;
}

void sim_region_fail_setup(struct sim *s)
{
    const struct sim_opts *o = s->o;
    struct sim_regions_run *g = s->rg;
    uint64_t spare = s->lc.ttl_us + 2 * s->lc.interval_us;

    g->lock_ttl_us = g->gttl_us > 2 * spare ? g->gttl_us - spare : g->gttl_us / 2;
    g->dl_rule = !o->claimer_no_deadline; /* the agent always sends it */
    if (o->global_restart) {
        s->res->regions.restart_allowance = (double)s->p.burst;
        sim_fleet_push(s, SIM_T0_US + o->global_restart_us, EV_REGION, 0, NULL, SIM_REGION_RESTART);
    }
    if (o->claimer_kill) {
        s->res->regions.lock_ttl_ms = (double)g->lock_ttl_us / 1000.0;
        sim_fleet_push(s, SIM_T0_US + o->claimer_kill_at_us, EV_REGION, o->claimer_kill_region,
                       NULL, SIM_REGION_KILL);
    }
}

/* The global Redis comes back empty: note what the regions held (per key,
 * the most), and drop its keyspace. */
static void restart(struct sim *s)
{
    struct sim_regions_run *g = s->rg;
    char err[128];
    int64_t v[POOL_R_COUNT];

    for (uint32_t k = 0; k < g->nkeys; k++) {
        uint64_t held = 0;
        for (unsigned i = 0; i < g->n; i++) {
            struct region *R = &g->r[i];
            if (R->is_active[k] && sim_region_pool(s, R, k, 0, 0, v) == 0)
                held += R->k[k].k.pool + (uint64_t)v[POOL_R_REMAINING] + (uint64_t)v[POOL_R_HELD];
        }
        if (held > s->res->regions.restart_held)
            s->res->regions.restart_held = held;
    }
    struct sim_redis *fresh = sim_redis_new(err, sizeof(err));
    if (!fresh) {
        if (s->res->redis_errors++ == 0)
            snprintf(s->res->redis_error, sizeof(s->res->redis_error), "restart: %s", err);
        return;
    }
    sim_redis_free(g->global);
    g->global = fresh;
}

void sim_region_fail_event(struct sim *s, unsigned region, uint32_t what)
{
    struct sim_regions_run *g = s->rg;
    struct region *R = &g->r[region];

    if (what == SIM_REGION_RESTART) {
        restart(s);
        return;
    }
    R->dead = 1; /* its lock stays until it expires */
    g->takeover_at = R->lock_until > s->now + s->o->claimer_kill_len_us
                         ? R->lock_until
                         : s->now + s->o->claimer_kill_len_us;
}

int sim_region_fail_tick(struct sim *s, struct region *R)
{
    struct sim_regions_run *g = s->rg;

    if (s->now < g->takeover_at || R->inflight) /* (the dead one's call still out) */
        return 1;
    R->dead = 0;
    R->down = 0;
    s->res->regions.takeover_ms = (double)(s->now - SIM_T0_US - s->o->claimer_kill_at_us) / 1000.0;
    /* what the regional Redis says, nothing more: its rounds read it */
    memset(R->k, 0, g->nkeys * sizeof(*R->k));
    return 0;
}

/* ---- output ---------------------------------------------------------------------------- */

void sim_region_fail_print(const struct sim_opts *o, const struct sim_result *r)
{
    const struct sim_regions *x = &r->regions;
    if (o->global_restart)
        printf("    global restarted empty at %gs: the regions held %llu of a key then; worst "
               "excess over b+rT %.3f (allowance: one extra b = %g)\n",
               (double)o->global_restart_us / 1e6, (unsigned long long)x->restart_held,
               r->worst_window_excess, x->restart_allowance);
    if (o->claimer_kill)
        printf("    region %u's claimer killed at %gs: lock ttl %gms, successor from +%gms; "
               "deadline in the regional bucket %s (%llu tokens refused past it); worst "
               "excess over b+rT %.3f (must be <= 0)\n",
               o->claimer_kill_region, (double)o->claimer_kill_at_us / 1e6, x->lock_ttl_ms,
               x->takeover_ms, o->claimer_no_deadline ? "off" : "on",
               (unsigned long long)x->deadline_refused, r->worst_window_excess);
    fflush(stdout);
}

void sim_region_fail_json(struct strbuf *b, const struct sim_opts *o, const struct sim_result *r)
{
    const struct sim_regions *x = &r->regions;
    if (o->global_restart)
        strbuf_printf(b, ",\"global_restart_s\":%g,\"restart_held\":%llu,\"restart_allowance\":%g",
                      (double)o->global_restart_us / 1e6, (unsigned long long)x->restart_held,
                      x->restart_allowance);
    if (o->claimer_kill)
        strbuf_printf(b,
                      ",\"claimer_kill_region\":%u,\"claimer_kill_s\":%g,\"lock_ttl_ms\":%g,"
                      "\"takeover_ms\":%g,\"deadline_rule\":%s,\"deadline_refused\":%llu",
                      o->claimer_kill_region, (double)o->claimer_kill_at_us / 1e6, x->lock_ttl_ms,
                      x->takeover_ms, o->claimer_no_deadline ? "false" : "true",
                      (unsigned long long)x->deadline_refused);
}

int sim_region_fail_verdict(const struct sim_opts *o, const struct sim_result *r)
{
    const struct sim_regions *x = &r->regions;
    /* (an outage's verdict is sim_region_verdict's; a killed claimer's is
     * the bound's, as spoa-sim checks it) */
    if (o->global_down_len_us || !o->global_restart)
        return 0;
    if (!(r->worst_window_excess <= x->restart_allowance + 1e-9)) {
        fprintf(stderr,
                "spoa-sim: with the global Redis restarted empty the bound b + r*T was "
                "exceeded by %.3f requests, over its allowance b = %g\n",
                r->worst_window_excess, x->restart_allowance);
        return -1;
    }
    return 0;
}
