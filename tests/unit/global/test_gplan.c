/* SPDX-License-Identifier: Apache-2.0 */
/* test_gplan.c - a region's claimer, its decisions (src/global/gplan.h):
 * the standing share of an active key, claims at most max_fraction of the
 * burst, a surplus given back and an idle key forgotten, the lease's
 * deadline and its expiry, the negative cache of an empty global bucket,
 * the backstop share while the global Redis is unreachable and its end, and
 * a failed call's give-back counted lost. Every time is a parameter. */
#include <check.h>
#include <stdint.h>

#include "check_util.h"
#include "global/gplan.h"

#define MS 1000ULL
#define S 1000000ULL
#define T0 (1000 * S)

/* 20/1s burst 10, 2 regions, interval 1 s, lease ttl 5 s, rtt 40 ms. */
static struct gplan_cfg cfg(void)
{
    struct gplan_cfg c = {.limit = 20,
                          .period_us = S,
                          .burst = 10,
                          .interval_us = S,
                          .ttl_us = 5 * S,
                          .rtt_us = 40 * MS,
                          .max_fraction = 0.25,
                          .regions = 2};
    c.gttl_us = gplan_gttl_us(c.interval_us, c.ttl_us, c.rtt_us);
    return c;
}

/* One round with nothing to withdraw or deposit: returns the step. */
static struct gstep round1(const struct gplan_cfg *c, struct gkey *k, uint64_t t, uint64_t held,
                           uint64_t unmet, int down, uint64_t now)
{
    struct gread r = {t, held, unmet, 0};
    struct gstep s;
    gplan_round(c, k, &r, down, now, &s);
    gplan_withdrawn(c, k, &s, s.withdraw, now);
    return s;
}

START_TEST(idle_key_asks_nothing)
{
    struct gplan_cfg c = cfg();
    struct gkey k = {0};
    struct gstep s = round1(&c, &k, 0, 0, 0, 0, T0);
    ck_assert_int_eq(s.op, 0);
    ck_assert_uint_eq(s.want, 0);
    ck_assert_uint_eq(s.backstop, 0);
    for (int i = 0; i < 40; i++)
        round1(&c, &k, 0, 0, 0, 0, T0 + (uint64_t)i * S);
    ck_assert_int_eq(gplan_idle(&k), 1);
}
END_TEST

/* Demand the bucket could not serve: a standing share (burst / regions),
 * claimed at most max_fraction of the burst at once. */
START_TEST(unmet_demand_claims_standing_share_capped)
{
    struct gplan_cfg c = cfg();
    struct gkey k = {0};
    struct gstep s = round1(&c, &k, 0, 0, 3, 0, T0);
    ck_assert_int_eq(s.op, 1);
    ck_assert_uint_gt(s.want, 0);
    ck_assert_uint_le(s.want, 2); /* floor(0.25 * 10) */
    ck_assert_uint_eq(s.used, 0);
    ck_assert_int_eq(gplan_idle(&k), 0);
}
END_TEST

/* A grant: all of it to deposit, the deadline a round before the lease's
 * end, stored with the bucket a regional ttl before that. */
START_TEST(reply_deposits_and_sets_deadline)
{
    struct gplan_cfg c = cfg();
    struct gkey k = {0};
    round1(&c, &k, 0, 0, 3, 0, T0);
    uint64_t dl = 0, sent = T0, now = T0 + 40 * MS;
    uint64_t lease_ms = c.gttl_us / MS;
    uint64_t amt = gplan_reply(&c, &k, sent, now, 2, 2, lease_ms, 0, &dl);
    ck_assert_uint_eq(amt, 2);
    ck_assert_uint_eq(k.gheld, 2);
    ck_assert_uint_eq(k.deadline_us, sent + lease_ms * MS - c.interval_us);
    ck_assert_uint_eq(dl, k.deadline_us - c.ttl_us - now);
    gplan_deposited(&k, 1); /* one did not fit: it waits in the pool */
    ck_assert_uint_eq(k.pool, 1);
}
END_TEST

/* What the region spent is reported: the global bucket's count less what
 * it still holds (free, leased, undeposited). Never more than spent. */
START_TEST(used_is_held_less_still_held)
{
    struct gplan_cfg c = cfg();
    struct gkey k = {0};
    uint64_t dl;
    round1(&c, &k, 0, 0, 3, 0, T0);
    gplan_reply(&c, &k, T0, T0 + 40 * MS, 2, 5, c.gttl_us / MS, 0, &dl);
    gplan_deposited(&k, 2);
    struct gstep s = round1(&c, &k, 1, 2, 0, 0, T0 + S); /* 5 counted, 3 still held */
    ck_assert_uint_eq(s.used, 2);
    s = round1(&c, &k, 9, 9, 0, 0, T0 + 2 * S); /* more held than counted: none spent */
    ck_assert_uint_eq(s.used, 0);
}
END_TEST

/* A reserve of 2 of 4 set aside (doc/design.md "The reserve"): a fresh key reads as
 * holding it and asks nothing; spent below it, the claimer claims the debt
 * back at once, with no demand of its own; once deposited, what fills it is
 * reported spent (the global bucket counts only what the region holds above
 * it), and a surplus given back never dips into it. */
START_TEST(reserve_is_the_regions_own)
{
    struct gplan_cfg c = cfg();
    struct gkey k = {0};
    uint64_t dl;
    c.reserve = 2;
    ck_assert_uint_eq(gplan_global_burst(&c), 6);
    struct gstep s = round1(&c, &k, 2, 0, 0, 0, T0); /* a missing key: its reserve */
    ck_assert_int_eq(s.op, 0);
    for (int i = 1; i < 40; i++) /* nothing to do: forgotten, its reserve kept */
        round1(&c, &k, 2, 0, 0, 0, T0 + (uint64_t)i * S);
    ck_assert_int_eq(gplan_idle(&k), 1);

    k = (struct gkey){0};
    s = round1(&c, &k, 0, 0, 0, 0, T0); /* its reserve spent, no unmet demand */
    ck_assert_int_eq(s.op, 1);
    ck_assert_uint_ge(s.want, 2); /* the debt, at least */
    ck_assert_uint_eq(s.used, 0);
    gplan_reply(&c, &k, T0, T0 + 40 * MS, 2, 2, c.gttl_us / MS, 0, &dl);
    gplan_deposited(&k, 2);
    s = round1(&c, &k, 2, 0, 0, 0, T0 + S); /* full again: the 2 granted filled it */
    ck_assert_uint_eq(s.used, 2);
    gplan_reply(&c, &k, T0 + S, T0 + S + 40 * MS, 0, 0, c.gttl_us / MS, 0, &dl);

    /* a surplus above it goes back, down to the reserve, not into it */
    k = (struct gkey){0};
    gplan_reply(&c, &k, T0, T0 + 40 * MS, 9, 9, c.gttl_us / MS, 0, &dl);
    gplan_deposited(&k, 9);
    uint64_t t = 11, now = T0;
    for (int i = 1; i < 60; i++) {
        now = T0 + (uint64_t)i * S;
        struct gread r = {t, 0, 0, 0};
        gplan_round(&c, &k, &r, 0, now, &s);
        t -= s.withdraw < t ? s.withdraw : t;
        gplan_withdrawn(&c, &k, &s, s.withdraw, now);
        if (s.op)
            gplan_reply(&c, &k, now, now + 40 * MS, 0, k.gheld - s.used - s.ret,
                        c.gttl_us / MS, 0, &dl);
    }
    ck_assert_uint_eq(t, 2);
    ck_assert_uint_eq(k.gheld, 0);
}
END_TEST

/* Demand gone: the surplus goes back (withdrawn first), then the key
 * holds nothing and is forgotten. */
START_TEST(surplus_returned_then_forgotten)
{
    struct gplan_cfg c = cfg();
    struct gkey k = {0};
    uint64_t dl;
    round1(&c, &k, 0, 0, 3, 0, T0);
    gplan_reply(&c, &k, T0, T0 + 40 * MS, 8, 8, c.gttl_us / MS, 0, &dl);
    gplan_deposited(&k, 8);
    uint64_t t = 8, now = T0;
    int gave = 0;
    for (int i = 1; i < 60; i++) {
        now = T0 + (uint64_t)i * S;
        struct gread r = {t, 0, 0, 0};
        struct gstep s;
        gplan_round(&c, &k, &r, 0, now, &s);
        ck_assert_uint_le(s.withdraw, t);
        t -= s.withdraw; /* the bucket gives them all */
        gplan_withdrawn(&c, &k, &s, s.withdraw, now);
        if (s.ret) {
            gave = 1;
            gplan_reply(&c, &k, now, now + 40 * MS, 0, k.gheld - s.ret, c.gttl_us / MS, 0, &dl);
        } else if (k.op) {
            gplan_reply(&c, &k, now, now + 40 * MS, 0, k.gheld, c.gttl_us / MS, 0, &dl);
        }
    }
    ck_assert_int_eq(gave, 1);
    ck_assert_uint_eq(t, 0);
    ck_assert_uint_eq(k.gheld, 0);
    ck_assert_int_eq(gplan_idle(&k), 1);
}
END_TEST

/* An empty global bucket: no claim until its retry time (at most three
 * rounds), then again. */
START_TEST(empty_global_waits_retry)
{
    struct gplan_cfg c = cfg();
    struct gkey k = {0};
    uint64_t dl;
    round1(&c, &k, 0, 0, 3, 0, T0);
    gplan_reply(&c, &k, T0, T0 + 40 * MS, 0, 0, 0, 60000, &dl); /* nothing; retry in 60 s */
    ck_assert_uint_eq(k.retry_at_us, T0 + 3 * S);
    struct gstep s = round1(&c, &k, 0, 0, 3, 0, T0 + S);
    ck_assert_uint_eq(s.want, 0);
    s = round1(&c, &k, 0, 0, 3, 0, T0 + 3 * S);
    ck_assert_uint_gt(s.want, 0);
}
END_TEST

/* The lease near its end: every free token is to go, nothing counted held
 * any more; not before. */
START_TEST(expire_before_deadline)
{
    struct gplan_cfg c = cfg();
    struct gkey k = {0};
    uint64_t dl;
    round1(&c, &k, 0, 0, 3, 0, T0);
    gplan_reply(&c, &k, T0, T0 + 40 * MS, 2, 2, c.gttl_us / MS, 0, &dl);
    ck_assert_int_eq(gplan_expire(&c, &k, T0 + S), 0);
    uint64_t late = k.deadline_us - c.ttl_us - c.interval_us;
    ck_assert_int_eq(gplan_expire(&c, &k, late), 1);
    ck_assert_uint_eq(k.gheld, 0);
    ck_assert_uint_eq(k.deadline_us, 0);
    ck_assert_int_eq(k.forfeited, 1);
}
END_TEST

/* Unreachable with nothing held: the backstop share, a full bucket of
 * burst / regions at first, then the rate / regions; probing each round;
 * a success ends it and its tokens are to be withdrawn. */
START_TEST(backstop_share_while_down)
{
    struct gplan_cfg c = cfg();
    struct gkey k = {0};
    struct gread r = {0, 0, 4, 0};
    struct gstep s;
    gplan_round(&c, &k, &r, 1, T0, &s);
    ck_assert_uint_eq(s.backstop, 5); /* 10 / 2 regions */
    gplan_backstop_done(&k, 5);
    gplan_withdrawn(&c, &k, &s, 0, T0);
    ck_assert_int_eq(s.op, 1); /* probes */
    ck_assert_uint_eq(gplan_failed(&k), 0);
    r = (struct gread){0, 0, 4, 0};
    gplan_round(&c, &k, &r, 1, T0 + S, &s); /* a second: 10/s / 2 regions, capped at 5 */
    ck_assert_uint_eq(s.backstop, 5);
    gplan_backstop_done(&k, 5);
    r = (struct gread){0, 0, 4, 0};
    gplan_round(&c, &k, &r, 1, T0 + S + 100 * MS, &s); /* 100 ms: one token */
    ck_assert_uint_eq(s.backstop, 1);
    ck_assert_int_eq(gplan_recovered(&k), 1);
    ck_assert_int_eq(gplan_recovered(&k), 0);
}
END_TEST

/* On the backstop, demand gone: the bucket's tokens are the backstop's,
 * not the global bucket's; none is withdrawn or given back to it (a
 * give-back carried in the call that succeeds first would credit the
 * global bucket with tokens it never granted). Recovered, the caller
 * drains them, and only then is a surplus given back. */
START_TEST(backstop_tokens_never_given_back)
{
    struct gplan_cfg c = cfg();
    struct gkey k = {0};
    uint64_t dl;
    round1(&c, &k, 0, 0, 3, 0, T0);
    gplan_reply(&c, &k, T0, T0 + 40 * MS, 2, 2, c.gttl_us / MS, 0, &dl);
    gplan_deposited(&k, 2);
    /* the global Redis down, the two spent: the backstop starts */
    struct gread r = {0, 0, 4, 0};
    struct gstep s;
    gplan_round(&c, &k, &r, 1, T0 + S, &s);
    ck_assert_int_eq(k.bs_on, 1);
    ck_assert_uint_eq(s.backstop, 5);
    gplan_backstop_done(&k, 5);
    gplan_withdrawn(&c, &k, &s, s.withdraw, T0 + S);
    gplan_failed(&k);
    /* demand gone for a while: 5 backstop tokens sit in the bucket */
    for (int i = 2; i < 40; i++) {
        r = (struct gread){5, 0, 0, 0};
        gplan_round(&c, &k, &r, 1, T0 + (uint64_t)i * S, &s);
        ck_assert_uint_eq(s.withdraw, 0);
        gplan_withdrawn(&c, &k, &s, 0, T0 + (uint64_t)i * S);
        ck_assert_uint_eq(s.ret, 0);
        gplan_backstop_done(&k, s.backstop);
        gplan_failed(&k);
    }
    ck_assert_int_eq(gplan_recovered(&k), 1); /* the caller drains the bucket */
    /* and while down the bucket never held more than the backstop's burst,
     * 10 / 2 regions: 100/1m burst 100 over 4 regions, unspent for 10
     * minutes, stays at 25 (a backstop topping up what is spent, never
     * piling up to the rule's whole burst) */
    struct gplan_cfg c4 = c;
    c4.limit = 100, c4.period_us = 60 * S, c4.burst = 100, c4.regions = 4;
    struct gkey k4 = {0};
    uint64_t held = 0;
    for (int i = 0; i < 600; i++) {
        r = (struct gread){held, 0, 0, 0};
        gplan_round(&c4, &k4, &r, 1, T0 + (uint64_t)i * S, &s);
        ck_assert_uint_eq(s.withdraw, 0);
        held += s.backstop;
        gplan_backstop_done(&k4, s.backstop);
        ck_assert_uint_le(held, 25);
        gplan_withdrawn(&c4, &k4, &s, 0, T0 + (uint64_t)i * S);
        gplan_failed(&k4);
        if (i == 300)
            held -= 20; /* 20 spent: topped up again, to 25 at most */
    }
    ck_assert_uint_eq(held, 25);
    r = (struct gread){5, 0, 0, 0};
    gplan_round(&c, &k, &r, 0, T0 + 41 * S, &s); /* were they still there: given back */
    ck_assert_uint_gt(s.withdraw, 0);
}
END_TEST

/* A call that failed: what was withdrawn for it is lost (the global bucket
 * counts it spent at the lease's expiry). */
START_TEST(failed_giveback_is_lost)
{
    struct gplan_cfg c = cfg();
    struct gkey k = {0};
    uint64_t dl;
    round1(&c, &k, 0, 0, 3, 0, T0);
    gplan_reply(&c, &k, T0, T0 + 40 * MS, 2, 10, c.gttl_us / MS, 0, &dl);
    gplan_deposited(&k, 2);
    k.est = 0;
    struct gread r = {10, 0, 0, 0};
    struct gstep s;
    gplan_round(&c, &k, &r, 0, T0 + S, &s);
    ck_assert_uint_gt(s.withdraw, 0);
    gplan_withdrawn(&c, &k, &s, 3, T0 + S);
    ck_assert_uint_eq(s.ret, 3);
    ck_assert_uint_eq(gplan_failed(&k), 3);
    ck_assert_int_eq(k.op, 0);
}
END_TEST

/* A key whose demand per interval is more than one claim: its next round
 * comes when that claim is spent, not sooner than the global bucket refills
 * it; a key one claim feeds waits the interval. */
START_TEST(next_round_when_a_claim_cannot_feed)
{
    struct gplan_cfg c = cfg();
    struct gkey k = {0};
    ck_assert_uint_eq(gplan_next_us(&c, &k), c.interval_us);
    k.est = 2; /* one claim (floor(0.25 x 10) = 2) feeds it */
    ck_assert_uint_eq(gplan_next_us(&c, &k), c.interval_us);
    k.est = 10; /* 10 per interval: a claim lasts a fifth, the refill of 2 takes 100 ms */
    ck_assert_uint_eq(gplan_next_us(&c, &k), c.interval_us / 5);
    k.est = 1000; /* the round trip bounds it (40 ms) */
    ck_assert_uint_eq(gplan_next_us(&c, &k), 40 * MS);
    k.short_grant = 1; /* the last claim came back short: the refill bounds it */
    ck_assert_uint_eq(gplan_next_us(&c, &k), 100 * MS);
    c.rtt_us = 300 * MS; /* and the round trip */
    ck_assert_uint_eq(gplan_next_us(&c, &k), 300 * MS);
    /* a slow rule (1/1m): a claim of 2 refills in 2 minutes; granted in
     * full, the next round comes when the claim is spent */
    c.limit = 1, c.period_us = 60 * S, c.rtt_us = 40 * MS;
    k.short_grant = 0, k.est = 8;
    ck_assert_uint_eq(gplan_next_us(&c, &k), c.interval_us / 4);
    k.short_grant = 1;
    ck_assert_uint_eq(gplan_next_us(&c, &k), c.interval_us);
}
END_TEST

/* A claim granted in part marks the key short (its next rounds wait for
 * the global bucket's refill); granted in full, not. */
START_TEST(short_grant_from_the_reply)
{
    struct gplan_cfg c = cfg();
    struct gkey k = {0};
    uint64_t dl;
    round1(&c, &k, 0, 0, 3, 0, T0);
    ck_assert_uint_eq(k.want, 2);
    gplan_reply(&c, &k, T0, T0 + 40 * MS, 1, 1, c.gttl_us / MS, 0, &dl);
    ck_assert_int_eq(k.short_grant, 1);
    ck_assert_uint_eq(k.short_by, 1);
    gplan_deposited(&k, 1);
    round1(&c, &k, 0, 0, 3, 0, T0 + S);
    ck_assert_uint_gt(k.want, 0);
    gplan_reply(&c, &k, T0 + S, T0 + S + 40 * MS, k.want, 1 + k.want, c.gttl_us / MS, 0, &dl);
    ck_assert_int_eq(k.short_grant, 0);
    /* short by 1 of a 20/1s rule: again in 50 ms, not the interval, though
     * one claim feeds its demand; granted in full, the interval */
    k.short_by = 1, k.est = 1;
    ck_assert_uint_eq(gplan_next_us(&c, &k), 50 * MS);
    k.short_by = 0;
    ck_assert_uint_eq(gplan_next_us(&c, &k), c.interval_us);
    /* a round that lacks nothing ends the early rounds */
    k.short_by = 1, k.est = 0;
    k.gheld = 0, k.pool = 0;
    struct gread full = {9, 0, 0, 0};
    struct gstep st;
    gplan_round(&c, &k, &full, 0, T0 + 10 * S, &st);
    ck_assert_uint_eq(st.want, 0);
    ck_assert_uint_eq(k.short_by, 0);
    ck_assert_uint_eq(gplan_next_us(&c, &k), c.interval_us);
    /* a round that asks nothing leaves it as it was */
    k.short_grant = 1, k.want = 0;
    gplan_reply(&c, &k, T0 + 2 * S, T0 + 2 * S + 40 * MS, 0, 3, c.gttl_us / MS, 0, &dl);
    ck_assert_int_eq(k.short_grant, 1);
}
END_TEST

/* Demand is per interval whatever the rounds' spacing: 2 spent in a tenth
 * of an interval is 20 per interval. */
START_TEST(demand_per_interval)
{
    struct gplan_cfg c = cfg();
    struct gkey k = {0};
    uint64_t dl;
    round1(&c, &k, 0, 0, 0, 0, T0);
    gplan_reply(&c, &k, T0, T0, 0, 4, c.gttl_us / MS, 0, &dl);
    round1(&c, &k, 2, 0, 0, 0, T0 + c.interval_us / 10); /* 4 held, 2 left: 2 spent */
    ck_assert(k.est > 19.9 && k.est < 20.1);
}
END_TEST

/* A sparse key, still in the region's set (used lately) but without demand
 * now: it keeps its standing share, and is not forgotten; out of the set it
 * gives the share back. */
START_TEST(active_key_keeps_standing_share)
{
    struct gplan_cfg c = cfg();
    struct gkey k = {0};
    struct gread r = {0, 0, 0, 1};
    struct gstep s;
    gplan_round(&c, &k, &r, 0, T0, &s);
    ck_assert_uint_gt(s.want, 0); /* no demand, but used lately: its share */
    uint64_t dl;
    gplan_withdrawn(&c, &k, &s, 0, T0);
    gplan_reply(&c, &k, T0, T0, 2, 2, c.gttl_us / MS, 0, &dl);
    gplan_deposited(&k, 2);
    for (int i = 1; i < 50; i++) { /* quiet for 50 rounds: kept, nothing given back */
        r = (struct gread){2, 0, 0, 1};
        gplan_round(&c, &k, &r, 0, T0 + (uint64_t)i * S, &s);
        ck_assert_uint_eq(s.withdraw + s.ret, 0);
    }
    ck_assert_int_eq(gplan_idle(&k), 0);
    r = (struct gread){2, 0, 0, 0}; /* out of the set: the share goes back */
    gplan_round(&c, &k, &r, 0, T0 + 60 * S, &s);
    ck_assert_uint_eq(s.withdraw + s.ret, 2);
}
END_TEST

/* On the backstop, a round when half its burst has refilled: 10/2 regions
 * = 5, half 2 tokens at 10/s: 200 ms (not the interval). */
START_TEST(backstop_rounds_at_its_refill)
{
    struct gplan_cfg c = cfg();
    struct gkey k = {0};
    k.bs_on = 1;
    ck_assert_uint_eq(gplan_next_us(&c, &k), 200 * MS);
}
END_TEST

int main(void)
{
    TCase *tc = tcase_create("gplan");

    CHECK_ADD(tc, idle_key_asks_nothing, unmet_demand_claims_standing_share_capped,
              reply_deposits_and_sets_deadline, used_is_held_less_still_held,
              surplus_returned_then_forgotten, empty_global_waits_retry, expire_before_deadline,
              backstop_share_while_down, backstop_tokens_never_given_back, failed_giveback_is_lost,
              next_round_when_a_claim_cannot_feed, short_grant_from_the_reply, demand_per_interval,
              active_key_keeps_standing_share, backstop_rounds_at_its_refill,
              reserve_is_the_regions_own);
    return check_run_case("gplan", tc);
}
