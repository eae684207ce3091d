/* SPDX-License-Identifier: Apache-2.0 */
/* gplan.c - a region's claimer, its decisions only (gplan.h): the model
 * doc/design.md's "Regions" chose in the simulator, for one key. */
#include "global/gplan.h"

#include <math.h>

#define GPLAN_RETRY_CAP 3 /* a region told the global bucket is empty waits at most this many rounds */
#define GPLAN_IDLE_ROUNDS 30 /* rounds without demand or holding before a key is forgotten */
#define GPLAN_MIN_ROUND_US 10000 /* rounds never come faster than this */

uint64_t gplan_global_burst(const struct gplan_cfg *c)
{
    uint64_t kept = (uint64_t)(c->regions ? c->regions : 1) * c->reserve;
    return kept < c->burst ? c->burst - kept : 1;
}

uint64_t gplan_gttl_us(uint64_t interval_us, uint64_t ttl_us, uint64_t rtt_us)
{
    return 4 * (interval_us + ttl_us + rtt_us);
}

int gplan_expire(const struct gplan_cfg *c, struct gkey *k, uint64_t now_us)
{
    if (!k->deadline_us || now_us + c->ttl_us + c->interval_us < k->deadline_us)
        return 0;
    /* the global bucket counts what it granted until its lease's expiry, and
     * the next call's report settles it: the region stops spending first */
    k->pool = 0;
    k->deadline_us = 0;
    k->gheld = 0;
    k->forfeited = 1;
    return 1;
}

/* The backstop share while the global Redis is unreachable and the region
 * holds nothing of it: 1/regions of the rate, up to 1/regions of the burst,
 * which is also what the bucket may hold after the deposit (hold: what it
 * holds now). A region on the backstop gives nothing back (gplan_round), so
 * without that cap an unspent backstop would pile up to the rule's whole
 * burst in every region. */
static uint64_t backstop(const struct gplan_cfg *c, struct gkey *k, uint64_t now_us,
                         uint64_t hold)
{
    double n = c->regions ? (double)c->regions : 1.0;
    double rate = (double)c->limit / (double)c->period_us / n;
    double cap = floor((double)c->burst / n);

    if (cap < 1)
        cap = 1;
    if (!k->bs_last_us)
        k->bs_last_us = now_us, k->bs_acc = cap; /* a full backstop bucket */
    if (now_us > k->bs_last_us)
        k->bs_acc += rate * (double)(now_us - k->bs_last_us);
    k->bs_last_us = now_us;
    if (k->bs_acc > cap)
        k->bs_acc = cap;
    uint64_t due = k->bs_acc >= 1 ? (uint64_t)k->bs_acc : 0, room = (uint64_t)cap;
    room = hold < room ? room - hold : 0;
    return due < room ? due : room;
}

void gplan_backstop_done(struct gkey *k, uint64_t moved)
{
    k->bs_acc -= (double)moved;
    if (k->bs_acc < 0)
        k->bs_acc = 0;
}

void gplan_round(const struct gplan_cfg *c, struct gkey *k, const struct gread *r,
                 int global_down, uint64_t now_us, struct gstep *s)
{
    uint64_t all = k->pool + r->t + r->held;
    /* what it holds of the global bucket's (above its reserve), and what it
     * owes its reserve (below it) */
    uint64_t hold = all > c->reserve ? all - c->reserve : 0;
    uint64_t owed = c->reserve > all ? c->reserve - all : 0;
    uint64_t used = k->gheld > hold ? k->gheld - hold : 0;

    *s = (struct gstep){0};
    k->op = 0;
    /* demand per interval: what the region spent and what it asked for in
     * vain since the last round (rounds come faster for a key a claim per
     * interval cannot feed: gplan_next_us); up at once, down over a few
     * intervals */
    uint64_t spent_reserve = owed > k->owed ? owed - k->owed : 0;
    k->owed = owed;
    double d = (double)(used + r->unmet + spent_reserve), w = 0.8;
    if (k->last_us && now_us > k->last_us && c->interval_us) {
        double span = (double)(now_us - k->last_us) / (double)c->interval_us;
        d /= span < 1e-3 ? 1e-3 : span;
        w = pow(0.8, span);
    }
    k->last_us = now_us;
    double ew = w * k->est + (1 - w) * d;
    k->est = d > ew ? d : ew;
    if (k->est < 0.01)
        k->est = 0;
    k->idle = k->est == 0 && hold == 0 && !owed && !k->gheld && !r->active ? k->idle + 1 : 0;
    /* unreachable, and what the region held is spent, its reserve too (or
     * its lease over): the backstop share until a call succeeds */
    if (global_down && (k->forfeited || all == 0))
        k->bs_on = 1;
    if (k->bs_on)
        s->backstop = backstop(c, k, now_us, all);

    double ahead = 2.0 + (double)c->rtt_us / (double)(c->interval_us ? c->interval_us : 1);
    uint64_t target = (uint64_t)ceil(k->est * ahead);
    uint64_t cap = (uint64_t)floor(c->max_fraction * (double)c->burst);
    /* (the standing shares split what the global bucket can hold: the
     * rule's burst less the regions' reserves) */
    uint64_t standing = (uint64_t)((double)gplan_global_burst(c) / (c->regions ? c->regions : 1));
    if (cap < 1)
        cap = 1;
    if (standing < 1)
        standing = 1;
    /* a key active here (demand now, or noted within GPLAN_ACTIVE_US: a
     * sparse client) keeps a standing share: its next requests are decided
     * at once, not a global round trip later */
    if ((k->est > 0 || r->active) && target < standing)
        target = standing;
    uint64_t top = cap > standing ? cap : standing;
    if (target > top)
        target = top;
    /* give back the surplus; never on the backstop: what the bucket holds
     * then may be backstop tokens, which a give-back would credit to the
     * global bucket (gplan_recovered's caller drains them instead) */
    if (!k->bs_on && (hold > 2 * target + 1 || (target == 0 && hold > 0))) {
        uint64_t surplus = hold - target;
        uint64_t fromp = surplus < k->pool ? surplus : k->pool;
        k->pool -= fromp;
        s->ret = fromp;
        s->withdraw = surplus - fromp;
        hold -= fromp;
    }
    /* claim when what it holds runs low (half the target), up to the target,
     * at most max_fraction of the burst at once */
    uint64_t want = target > hold && (hold == 0 || hold <= target / 2) ? target - hold : 0;
    /* a reserve spent below its level is claimed back at once (what fills
     * it is reported spent: gone from the global bucket for good): on top
     * of the claim's cap for a key one claim feeds (capped with it, a warm
     * key's claim only refilled its reserve, and its next requests waited
     * a round: denied), within it for a hot one (on top, its claims
     * doubled, and the grants the global bucket counts held until the next
     * report filled it: utilisation 90 -> 84 %) */
    int warm = k->est <= (double)cap;
    if (!warm)
        want += k->bs_on ? 0 : owed;
    if (want > cap)
        want = cap;
    if (warm)
        want += k->bs_on ? 0 : owed;
    if (!want) /* nothing lacking: no early round for a short claim (gplan_next_us) */
        k->short_by = 0;
    if (now_us < k->retry_at_us)
        want = 0;
    s->want = want;
    s->used = used;
}

int gplan_withdrawn(const struct gplan_cfg *c, struct gkey *k, struct gstep *s, uint64_t moved,
                    uint64_t now_us)
{
    s->ret += moved < s->withdraw ? moved : s->withdraw;
    /* renew a lease past half its life; report an idle key's spending; a
     * region on its backstop probes */
    int renew = k->gheld && k->deadline_us && k->deadline_us < now_us + c->gttl_us / 2;
    s->op = s->want || s->ret || renew || (s->used && k->est == 0) || k->bs_on;
    k->op = s->op;
    k->want = s->want, k->used = s->used, k->ret = s->ret;
    return s->op;
}

uint64_t gplan_reply(const struct gplan_cfg *c, struct gkey *k, uint64_t sent_us, uint64_t now_us,
                     uint64_t granted, uint64_t mine, uint64_t lease_ms, uint64_t retry_ms,
                     uint64_t *dl_us)
{
    k->op = 0;
    k->forfeited = 0;
    k->gheld = mine;
    k->deadline_us = mine && lease_ms * 1000 > c->interval_us
                         ? sent_us + lease_ms * 1000 - c->interval_us
                         : 0;
    k->pool += granted;
    /* a negative cache one level up, as the agent's: no claim until the
     * global bucket's next token (at most GPLAN_RETRY_CAP rounds) */
    uint64_t cap_us = GPLAN_RETRY_CAP * c->interval_us;
    uint64_t wait_us = retry_ms * 1000 < cap_us ? retry_ms * 1000 : cap_us;
    k->retry_at_us = k->want && !granted && retry_ms ? sent_us + wait_us : 0;
    if (k->retry_at_us) /* (the negative cache paces it, not a short claim's early rounds) */
        k->short_by = 0;
    if (k->want) { /* (a round that asked nothing says nothing of the global bucket) */
        k->short_grant = granted < k->want;
        k->short_by = granted < k->want ? k->want - granted : 0;
    }
    /* the deadline, with the regional bucket: no grant a regional ttl
     * before it, whoever claims for the region next */
    *dl_us = k->deadline_us > now_us + c->ttl_us ? k->deadline_us - c->ttl_us - now_us : 0;
    return k->pool;
}

void gplan_deposited(struct gkey *k, uint64_t moved)
{
    k->pool -= moved < k->pool ? moved : k->pool;
}

uint64_t gplan_failed(struct gkey *k)
{
    uint64_t lost = k->op ? k->ret : 0;
    k->op = 0;
    return lost;
}

int gplan_recovered(struct gkey *k)
{
    int was = k->bs_on;
    k->bs_on = 0, k->bs_last_us = 0, k->bs_acc = 0;
    return was;
}

uint64_t gplan_next_us(const struct gplan_cfg *c, const struct gkey *k)
{
    double cap = floor(c->max_fraction * (double)c->burst);
    if (cap < 1)
        cap = 1;
    if (k->bs_on && c->limit && c->interval_us) {
        /* on the backstop: a round when half its bucket has refilled, so that
         * it is not capped at burst / regions per interval */
        double n = c->regions ? (double)c->regions : 1.0;
        double bcap = floor((double)c->burst / n), half = bcap / 2 < 1 ? 1 : floor(bcap / 2);
        double us = half * (double)c->period_us * n / (double)c->limit;
        if (us < (double)c->rtt_us)
            us = (double)c->rtt_us;
        if (us < GPLAN_MIN_ROUND_US)
            us = GPLAN_MIN_ROUND_US;
        return us < (double)c->interval_us ? (uint64_t)us : c->interval_us;
    }
    /* a claim that came back short: again when the global bucket has
     * refilled what it lacked (a warm key's region waited a whole interval
     * with its next requests due: denied) */
    double again = (double)c->interval_us;
    if (k->short_by && c->limit) {
        again = (double)k->short_by * (double)c->period_us / (double)c->limit;
        if (again < (double)c->rtt_us)
            again = (double)c->rtt_us;
        if (again < GPLAN_MIN_ROUND_US)
            again = GPLAN_MIN_ROUND_US;
        if (again > (double)c->interval_us)
            again = (double)c->interval_us;
    }
    if (k->est <= cap || !c->interval_us)
        return (uint64_t)again;
    /* one claim feeds this key for interval x cap / demand; not sooner,
     * nor than a round trip. A global bucket that came up short refills a
     * claim's worth in cap / rate: not sooner than that either. One that
     * granted the whole claim may have more (a key's first burst: a slow
     * rule's refill, 90 s for 25 tokens of 1000/1h, would feed it a claim
     * an interval) */
    double us = (double)c->interval_us * cap / k->est;
    double refill = c->limit && k->short_grant ? cap * (double)c->period_us / (double)c->limit : 0;
    if (us < refill)
        us = refill;
    if (us < (double)c->rtt_us)
        us = (double)c->rtt_us;
    if (us < GPLAN_MIN_ROUND_US)
        us = GPLAN_MIN_ROUND_US;
    return us < (double)c->interval_us ? (uint64_t)us : c->interval_us;
}

int gplan_idle(const struct gkey *k)
{
    return k->idle >= GPLAN_IDLE_ROUNDS && !k->op && !k->pool && !k->gheld;
}
