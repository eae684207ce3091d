/* SPDX-License-Identifier: Apache-2.0 */
/* test_scripts_claim.c - the token bucket's lease scripts of lua/ (tb_claim,
 * tb_return) against a real redis-server: grants, refill, settling what was
 * used and returned, vanished agents, clock steps, burst changes, expiry and
 * random sequences that keep t + H <= b.
 *
 * Uses the server at 127.0.0.1:$REDIS_PORT when REDIS_PORT is set; otherwise
 * starts its own redis-server on a random loopback port (no persistence) and
 * stops it at the end (scripts_harness.c). The scripts are read from $LUA_DIR
 * (default BUILDDIR "/lua"), loaded with SCRIPT LOAD and called with EVALSHA, as
 * the agent does; a NOSCRIPT reply reloads the script once. Every test works
 * on keys of its own ("test_scripts:<pid>:<seq>:<name>"), so a shared server
 * is fine. Timing assertions bracket Redis time between local clock readings
 * taken before sending and after receiving, so they hold on a slow machine.
 */
#include <check.h>
#include <hiredis/hiredis.h>

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check_util.h"
#include "scripts_harness.h"

/* ---- token bucket ----------------------------------------------------------- */

START_TEST(tb_fresh_bucket_grants_min_want_floor_t)
{
    char key[128];
    long long o[R_N];
    struct state st;
    mkkey(key, sizeof(key), "fresh");

    claim(TB_CLAIM, key, "A", &slow, 4, 0, 0, o);
    long long want1[R_N] = {4, 6, 4, 1, 0, 0, 5000, 4};
    for (int i = 0; i < R_N; i++)
        ck_assert_int_eq(o[i], want1[i]);

    claim(TB_CLAIM, key, "B", &slow, 100, 0, 0, o); /* only floor(t) = 6 left */
    ck_assert_int_eq(o[R_GRANTED], 6);
    ck_assert_int_eq(o[R_REMAINING], 0);
    ck_assert_int_eq(o[R_HELD], 10);
    ck_assert_int_eq(o[R_HOLDERS], 2);
    ck_assert_int_eq(o[R_MINE], 6);
    /* b - H = 0: no token before a lease ends (A's, in ~5 s) */
    ck_assert_int_ge(o[R_RETRY], 4000);
    ck_assert_int_le(o[R_RETRY], 5000);
    assert_tb_invariant(key, slow.burst, &st);

    claim(TB_CLAIM, key, "C", &slow, 1, 0, 0, o);
    ck_assert_int_eq(o[R_GRANTED], 0);
    ck_assert_int_eq(o[R_LEASE], 0);
    ck_assert_int_eq(o[R_MINE], 0);
    ck_assert_int_eq(hget_ll(key, "h:C"), -1);

    /* A spent all 4: its lease closes; the next token is a refill away. */
    claim(TB_CLAIM, key, "A", &slow, 0, 4, 0, o);
    ck_assert_int_eq(o[R_MINE], 0);
    ck_assert_int_eq(o[R_HELD], 6);
    ck_assert_int_eq(o[R_HOLDERS], 1);
    ck_assert_int_eq(o[R_REMAINING], 0);
    ck_assert_int_gt(o[R_RETRY], 900);
    ck_assert_int_le(o[R_RETRY], 1000);
    ck_assert_int_gt(o[R_RESET], 3900);
    ck_assert_int_le(o[R_RESET], 4000);
    ck_assert_int_eq(hget_ll(key, "h:A"), -1);
    ck_assert_int_eq(hget_ll(key, "e:A"), -1);
    ck_assert_int_eq(hget_ll(key, "h:B"), 6);
    assert_tb_invariant(key, slow.burst, &st);
}
END_TEST

START_TEST(tb_refills_over_time)
{
    /* 0.02 token/ms; leases live 60 s: B still holds its own below however
     * slowly this runs */
    const struct rule ru = {20, 1000, 5, 60000};
    char key[128];
    long long o[R_N];
    struct state st;
    mkkey(key, sizeof(key), "refill");

    double m0 = mono_ms();
    claim(TB_CLAIM, key, "A", &ru, 5, 0, 0, o);
    ck_assert_int_eq(o[R_GRANTED], 5);
    claim(TB_CLAIM, key, "A", &ru, 0, 5, 0, o); /* spent them all */
    ck_assert_int_eq(o[R_HELD], 0);
    double m1 = mono_ms();
    sleep_ms(150);
    double m2 = mono_ms();
    claim(TB_CLAIM, key, "B", &ru, 100, 0, 0, o);
    double m3 = mono_ms();
    long long lo = (long long)floor((m2 - m1) * 0.02);
    long long hi = (long long)floor((m3 - m0) * 0.02);
    if (hi > 5)
        hi = 5;
    ck_assert_int_ge(lo, 3);
    ck_assert_msg(o[R_GRANTED] >= lo && o[R_GRANTED] <= hi, "granted %lld not in [%lld, %lld]",
                  o[R_GRANTED], lo, hi);
    long long g = o[R_GRANTED];

    /* B keeps holding g: refill stops at b - g. */
    sleep_ms(300);
    claim(TB_CLAIM, key, "C", &ru, 0, 0, 0, o);
    ck_assert_int_eq(o[R_REMAINING], 5 - g);
    ck_assert_int_eq(o[R_HELD], g);
    ck_assert_int_eq(o[R_RESET], 0);
    assert_tb_invariant(key, ru.burst, &st);
    ck_assert_msg(st.t == (double)(5 - g), "t %.17g", st.t);
}
END_TEST

START_TEST(tb_settles_used_and_returned)
{
    const struct rule ru = {1, 1000000, 10, 60000}; /* refill negligible */
    char key[128];
    long long o[R_N];
    struct state st;
    mkkey(key, sizeof(key), "settle");

    claim(TB_CLAIM, key, "A", &ru, 5, 0, 0, o);
    ck_assert_int_eq(o[R_GRANTED], 5);
    ck_assert_int_eq(o[R_REMAINING], 5);

    claim(TB_CLAIM, key, "A", &ru, 0, 2, 1, o); /* spent 2, gives 1 back */
    ck_assert_int_eq(o[R_GRANTED], 0);
    ck_assert_int_eq(o[R_MINE], 2);
    ck_assert_int_eq(o[R_HELD], 2);
    ck_assert_int_eq(o[R_REMAINING], 6);
    ck_assert_int_eq(o[R_LEASE], 60000);
    ck_assert_int_eq(hget_ll(key, "h:A"), 2);
    assert_tb_invariant(key, ru.burst, &st);

    claim(TB_CLAIM, key, "A", &ru, 0, 0, 10, o); /* over-return: capped at 2 */
    ck_assert_int_eq(o[R_MINE], 0);
    ck_assert_int_eq(o[R_HELD], 0);
    ck_assert_int_eq(o[R_HOLDERS], 0);
    ck_assert_int_eq(o[R_REMAINING], 8);
    ck_assert_int_eq(o[R_LEASE], 0);
    ck_assert_int_eq(hget_ll(key, "h:A"), -1);
    ck_assert_int_eq(hget_ll(key, "e:A"), -1);

    claim(TB_CLAIM, key, "A", &ru, 3, 0, 0, o);
    ck_assert_int_eq(o[R_REMAINING], 5);
    claim(TB_CLAIM, key, "A", &ru, 0, 100, 100, o); /* over-use: all 3 spent, none back */
    ck_assert_int_eq(o[R_MINE], 0);
    ck_assert_int_eq(o[R_REMAINING], 5);

    claim(TB_CLAIM, key, "B", &ru, 0, 0, 5, o); /* B holds nothing: creates nothing */
    ck_assert_int_eq(o[R_REMAINING], 5);
    ck_assert_int_eq(o[R_MINE], 0);
    assert_tb_invariant(key, ru.burst, &st);
    ck_assert_msg(st.t < 5.01, "t %.17g", st.t);

    /* claim and report in one call: settle first, then grant */
    claim(TB_CLAIM, key, "B", &ru, 2, 0, 0, o);
    claim(TB_CLAIM, key, "B", &ru, 4, 1, 1, o);
    ck_assert_int_eq(o[R_GRANTED], 4);
    ck_assert_int_eq(o[R_MINE], 4);
    ck_assert_int_eq(o[R_REMAINING], 0);
    assert_tb_invariant(key, ru.burst, &st);
}
END_TEST

START_TEST(tb_return_gives_back_unspent)
{
    char key[128];
    long long o[R_N];
    struct state st;
    mkkey(key, sizeof(key), "return");

    claim(TB_CLAIM, key, "A", &slow, 6, 0, 0, o);
    ck_assert_int_eq(o[R_REMAINING], 4);
    give_back(TB_RETURN, key, "A", &slow, 2, o);
    ck_assert_int_eq(o[R_REMAINING], 8);
    ck_assert_int_eq(o[R_HELD], 0);
    ck_assert_int_eq(o[R_HOLDERS], 0);
    ck_assert_int_eq(hget_ll(key, "h:A"), -1);
    ck_assert_int_eq(hget_ll(key, "e:A"), -1);
    give_back(TB_RETURN, key, "A", &slow, 0, o); /* nothing left to return */
    ck_assert_int_eq(o[R_REMAINING], 8);

    claim(TB_CLAIM, key, "B", &slow, 1, 0, 0, o);
    claim(TB_CLAIM, key, "A", &slow, 2, 0, 0, o);
    ck_assert_int_eq(o[R_REMAINING], 5);
    give_back(TB_RETURN, key, "A", &slow, 0, o);
    ck_assert_int_eq(o[R_REMAINING], 7);
    ck_assert_int_eq(o[R_HELD], 1);
    ck_assert_int_eq(o[R_HOLDERS], 1);
    give_back(TB_RETURN, key, "A", &slow, 50, o); /* used beyond held: no effect */
    ck_assert_int_eq(o[R_REMAINING], 7);
    assert_tb_invariant(key, slow.burst, &st);

    /* a give-back on a missing bucket: full, nothing held */
    char key2[128];
    mkkey(key2, sizeof(key2), "return-missing");
    give_back(TB_RETURN, key2, "A", &slow, 3, o);
    ck_assert_int_eq(o[R_REMAINING], 10);
    ck_assert_int_eq(o[R_RESET], 0);
}
END_TEST

START_TEST(tb_vanished_agent_lease_dropped_not_returned)
{
    const struct rule ru = {1, 1000000, 10, 50};
    char key[128];
    long long o[R_N];
    struct state st;
    mkkey(key, sizeof(key), "vanish");

    claim(TB_CLAIM, key, "A", &ru, 4, 0, 0, o);
    ck_assert_int_eq(o[R_GRANTED], 4);
    ck_assert_int_eq(o[R_LEASE], 50);
    sleep_ms(120);

    claim(TB_CLAIM, key, "B", &ru, 0, 0, 0, o);
    ck_assert_int_eq(o[R_HELD], 0);
    ck_assert_int_eq(o[R_HOLDERS], 0);
    ck_assert_int_eq(o[R_REMAINING], 6); /* A's 4 tokens are gone */
    ck_assert_int_eq(hget_ll(key, "h:A"), -1);
    ck_assert_int_eq(hget_ll(key, "e:A"), -1);

    claim(TB_CLAIM, key, "A", &ru, 0, 0, 4, o); /* too late to return them */
    ck_assert_int_eq(o[R_REMAINING], 6);
    ck_assert_int_eq(o[R_MINE], 0);
    give_back(TB_RETURN, key, "A", &ru, 0, o);
    ck_assert_int_eq(o[R_REMAINING], 6);
    assert_tb_invariant(key, ru.burst, &st);
}
END_TEST

/* A forward step of Redis' clock by D (or a failover to a master whose clock
 * is ahead) is the same, to the scripts, as every stored time being D older:
 * shift ts and e:<agent> back to play it. Leases expire in Redis while their
 * agents, on their own clocks, may still spend them, and the bucket refills
 * up to b - H without them: at most one extra b + H (lua/README.md). */
START_TEST(tb_redis_clock_forward_step_costs_at_most_b_plus_h)
{
    const struct rule ru = {1, 1000000, 10, 60000}; /* refill negligible, lease 1 min */
    char key[128];
    long long o[R_N];
    struct state st;
    mkkey(key, sizeof(key), "clock-step");

    claim(TB_CLAIM, key, "A", &ru, 6, 0, 0, o);
    ck_assert_int_eq(o[R_GRANTED], 6); /* A holds 6 (H), t = 4 */
    claim(TB_CLAIM, key, "B", &ru, 4, 0, 0, o);
    ck_assert_int_eq(o[R_GRANTED], 4); /* t = 0: the fleet holds b */

    /* the clock jumps a day forward */
    redisReply *r = cmd("EVAL %s 1 %s %s",
                        "local d = tonumber(ARGV[1]) "
                        "local f = redis.call('HGETALL', KEYS[1]) "
                        "for i = 1, #f, 2 do "
                        "  if f[i] == 'ts' or string.sub(f[i], 1, 2) == 'e:' then "
                        "    redis.call('HSET', KEYS[1], f[i], "
                        "               string.format('%.17g', tonumber(f[i + 1]) - d)) end end "
                        "return 1",
                        key, "86400000000");
    ck_assert_int_eq(r->type, REDIS_REPLY_INTEGER);
    freeReplyObject(r);

    /* C's claim: both leases are gone in Redis (counted as spent), and the
     * bucket refills to b, while A and B still spend what they hold */
    claim(TB_CLAIM, key, "C", &ru, 100, 0, 0, o);
    ck_assert_int_eq(o[R_HELD], o[R_GRANTED]);
    ck_assert_int_eq(o[R_GRANTED], ru.burst);
    ck_assert_int_le(o[R_GRANTED] + 6 + 4, 2 * ru.burst); /* b + H, H = 10 at the step */
    assert_tb_invariant(key, ru.burst, &st);
    /* A's and B's reports find nothing to settle: nothing is counted twice */
    claim(TB_CLAIM, key, "A", &ru, 0, 6, 0, o);
    ck_assert_int_eq(o[R_MINE], 0);
    ck_assert_int_eq(o[R_REMAINING], 0);
    assert_tb_invariant(key, ru.burst, &st);
}
END_TEST

/* Tokens held (spent or not) cap the refill for as long as they are held:
 * when a lease ends, by expiry or by a report, the cap lifts from then on,
 * with no refill banked from before. Without this, b + H goes through at
 * once when a fully spent lease ends. */
START_TEST(tb_no_banked_refill_when_lease_ends)
{
    const struct rule expiring = {10, 100, 10, 100}; /* 0.1 token/ms, ttl 100 ms */
    const struct rule lasting = {10, 100, 10, 5000}; /* ttl 5 s */
    char key[128];
    long long o[R_N];
    struct state st;

    /* by expiry: A takes all 10, its lease ends at +100 ms, B asks at +150 */
    mkkey(key, sizeof(key), "bank-expiry");
    long long t_a = redis_now_us(); /* A's claim runs after this (Redis' clock) */
    claim(TB_CLAIM, key, "A", &expiring, 10, 0, 0, o);
    ck_assert_int_eq(o[R_GRANTED], 10);
    sleep_ms(150);
    claim(TB_CLAIM, key, "B", &expiring, 10, 0, 0, o);
    /* time since A's lease ended, at most: B ran before this TIME, A after t_a */
    double refill_ms = (double)(redis_now_us() - t_a) / 1000.0 - 100;
    ck_assert_msg(o[R_GRANTED] <= (long long)(refill_ms * 0.1) + 1,
                  "B got %lld, at most %.1f ms after A's lease ended", o[R_GRANTED], refill_ms);
    if (refill_ms < 90) /* else a full refill is right: the bound above says it all */
        ck_assert_int_lt(o[R_GRANTED], 10);
    assert_tb_invariant(key, expiring.burst, &st);

    /* by a report: A spends all 10 and says so 150 ms later. What B may get
     * is what refilled since the report, 0.1 token/ms of the time between
     * the two calls: measured on Redis' clock (TIME before the report and
     * after B's claim, an upper bound of that time), not assumed short; a
     * loaded machine can put tens of ms between them. */
    mkkey(key, sizeof(key), "bank-report");
    claim(TB_CLAIM, key, "A", &lasting, 10, 0, 0, o);
    ck_assert_int_eq(o[R_GRANTED], 10);
    sleep_ms(150);
    long long t_report = redis_now_us();
    claim(TB_CLAIM, key, "A", &lasting, 0, 10, 0, o);
    ck_assert_int_eq(o[R_MINE], 0);
    ck_assert_int_le(o[R_REMAINING], 1);
    claim(TB_CLAIM, key, "B", &lasting, 10, 0, 0, o);
    long long gap_us = redis_now_us() - t_report;
    long long refilled = gap_us / 10000; /* 0.1 token per ms */
    ck_assert_msg(o[R_GRANTED] <= (refilled > 1 ? refilled : 1),
                  "B got %lld tokens %lld us after A reported 10 spent: at most %lld refilled",
                  o[R_GRANTED], gap_us, refilled > 1 ? refilled : 1);
    assert_tb_invariant(key, lasting.burst, &st);
}
END_TEST

START_TEST(tb_refill_capped_while_leases_held)
{
    const struct rule ru = {10, 100, 10, 3000}; /* 0.1 token/ms */
    char key[128];
    long long o[R_N], x[X_N];
    struct state st;
    mkkey(key, sizeof(key), "cap");

    long long t_a = redis_now_us(); /* A's claim runs after this (Redis' clock) */
    claim(TB_CLAIM, key, "A", &ru, 6, 0, 0, o);
    ck_assert_int_eq(o[R_GRANTED], 6);
    sleep_ms(150); /* would refill 15 tokens */
    claim(TB_CLAIM, key, "B", &ru, 0, 0, 0, o);
    ck_assert_int_eq(o[R_REMAINING], 4); /* b - H, not b */
    ck_assert_int_eq(o[R_HELD], 6);
    assert_tb_invariant(key, ru.burst, &st);
    ck_assert_msg(st.t == 4.0, "t %.17g", st.t);

    claim(TB_CLAIM, key, "B", &ru, 100, 0, 0, o);
    ck_assert_int_eq(o[R_GRANTED], 4);
    ck_assert_int_eq(o[R_HELD], 10);
    sleep_ms(100);
    exact(TB_EXACT, key, &ru, 1, x);
    ck_assert_int_eq(x[X_ALLOWED], 0); /* everything is held */
    ck_assert_int_eq(x[X_REMAINING], 0);
    /* until the first lease ends: A's ttl from its claim, which ran between
     * t_a and this call (the elapsed time measured, not assumed short) */
    long long since_a = x[X_TIME] - t_a / 1000;
    ck_assert_msg(x[X_RETRY] >= 3000 - since_a - 1 && x[X_RETRY] <= 3000,
                  "retry %lld, %lld ms after A's claim", x[X_RETRY], since_a);
    assert_tb_invariant(key, ru.burst, &st);

    give_back(TB_RETURN, key, "A", &ru, 0, o);
    ck_assert_int_eq(o[R_REMAINING], 6);
    ck_assert_int_eq(o[R_HELD], 4);
    assert_tb_invariant(key, ru.burst, &st);
    ck_assert_msg(st.t == 6.0, "t %.17g", st.t);
}
END_TEST

START_TEST(tb_burst_shrink_clamps)
{
    struct rule ru = {1, 1000000, 10, 60000};
    char key[128];
    long long o[R_N];
    struct state st;
    mkkey(key, sizeof(key), "shrink");

    claim(TB_CLAIM, key, "A", &ru, 3, 0, 0, o);
    ck_assert_int_eq(o[R_REMAINING], 7);
    ru.burst = 5;
    claim(TB_CLAIM, key, "C", &ru, 0, 0, 0, o);
    ck_assert_int_eq(o[R_REMAINING], 2);
    ck_assert_int_eq(o[R_HELD], 3);
    assert_tb_invariant(key, ru.burst, &st);
    ck_assert_msg(st.t == 2.0, "t %.17g", st.t);

    ru.burst = 2; /* below what is held: t becomes a debt */
    claim(TB_CLAIM, key, "C", &ru, 1, 0, 0, o);
    ck_assert_int_eq(o[R_GRANTED], 0);
    ck_assert_int_eq(o[R_REMAINING], 0);
    assert_tb_invariant(key, ru.burst, &st);
    ck_assert_msg(st.t == -1.0, "t %.17g", st.t);

    claim(TB_CLAIM, key, "A", &ru, 0, 3, 0, o);
    ck_assert_int_eq(o[R_HELD], 0);
    ck_assert_int_eq(o[R_REMAINING], 0);
    assert_tb_invariant(key, ru.burst, &st);
    ck_assert_msg(st.t < 0, "t %.17g", st.t);
}
END_TEST

/* Redis' clock stepping back (NTP, a restored VM, a failover to a master
 * behind) leaves a bucket's ts ahead of now: play it by writing ts (and what
 * else the key stores as a time) 20 s ahead. The next call rebases the key:
 * the refill restarts from now with the tokens there are (none credited for
 * the step, none twice), so the key admits at its rate again instead of
 * nothing for 20 s; a lease keeps the life it had left (never beyond now +
 * ttl) and a block ends block_ms after it began, not 20 s later. */
START_TEST(tb_clock_step_back_rebases)
{
    const struct rule ru = {10, 1000, 10, 1000}; /* 100 ms per token, lease 1 s */
    const long long step = 20000000LL;           /* 20 s, us */
    char key[128], skey[128];
    long long o[R_N], x[X_N];
    mkkey(key, sizeof(key), "clock-back");
    mkkey(skey, sizeof(skey), "clock-back-string");

    /* the last call at `last` (20 s ahead of the clock now) granted B 3 tokens
     * for 1 s and left the bucket empty */
    long long before = redis_now_us(), last = before + step;
    freeReplyObject(cmd("HSET %s t 0 ts %lld h:B 3 e:B %lld", key, last, last + 1000000));
    char sval[64]; /* the string layout: "1 t ts" */
    snprintf(sval, sizeof(sval), "1 0 %lld", last);
    freeReplyObject(cmd("SET %s %s", skey, sval));

    exact(TB_EXACT, key, &ru, 1, x);
    long long after = redis_now_us();
    ck_assert_int_eq(x[X_ALLOWED], 0); /* t was 0: nothing credited for the step */
    long long ts = hash_get_ll(key, "ts"), e = hash_get_ll(key, "e:B");
    ck_assert_msg(ts >= before && ts <= after, "ts %lld not rebased to now", ts);
    ck_assert_msg(e <= after + ru.ttl_ms * 1000 && e > before, "e:B %lld, now %lld", e, after);

    /* admitted again at the rate: a token within about 100 ms, not after 20 s
     * (deadline 5 s for a slow machine) */
    double t0 = mono_ms();
    int allowed = 0;
    while (!allowed && mono_ms() - t0 < 5000) {
        sleep_ms(20);
        exact(TB_EXACT, key, &ru, 1, x);
        allowed = (int)x[X_ALLOWED];
    }
    ck_assert_msg(allowed, "no admission %.0f ms after a 20 s step back", mono_ms() - t0);
    t0 = mono_ms();
    for (allowed = 0; !allowed && mono_ms() - t0 < 5000;) {
        sleep_ms(20);
        exact(TB_EXACT, skey, &ru, 1, x); /* the string layout too */
        allowed = (int)x[X_ALLOWED];
    }
    ck_assert_msg(allowed, "string key: no admission after a 20 s step back");
    ck_assert_int_le(hget_ll(skey, "ts"), redis_now_us());
    struct state st;
    assert_tb_invariant(key, ru.burst, &st);

    /* a claim too: its lease expiry counts from now, e:A <= now + ttl */
    claim(TB_CLAIM, key, "A", &ru, 1, 0, 0, o);
    ck_assert_int_le(hash_get_ll(key, "e:A"), redis_now_us() + ru.ttl_ms * 1000);

    /* a block that began at the last call (1 s) ends 1 s after it, not 21 s */
    mkkey(key, sizeof(key), "clock-back-block");
    before = redis_now_us(), last = before + step;
    freeReplyObject(cmd("HSET %s t 10 ts %lld bu %lld", key, last, last + 1000000));
    long long xb[] = {ru.limit, ru.period_ms, ru.burst, 1, 1000};
    call_ints(TB_EXACT, key, NULL, xb, 5, x, X_N);
    ck_assert_int_eq(x[X_ALLOWED], 0);
    ck_assert_int_le(x[X_RETRY], 1000);
    ck_assert_int_le(hash_get_ll(key, "bu"), redis_now_us() + 1000000);
}
END_TEST

START_TEST(tb_key_expires)
{
    const struct rule ru = {10, 100, 10, 100}; /* full in 100 ms, lease 100 ms */
    char key[128], key2[128];
    long long o[R_N], x[X_N];
    mkkey(key, sizeof(key), "ttl");
    mkkey(key2, sizeof(key2), "ttl-exact");

    /* The expiry times against Redis' clock around the calls, not a PTTL
     * read some time later (a busy machine can put 100 ms in between). */
    long long r0 = redis_now_us() / 1000;
    claim(TB_CLAIM, key, "A", &ru, 10, 0, 0, o);
    long long r1 = redis_now_us() / 1000;
    ck_assert_int_eq(o[R_GRANTED], 10);
    long long e1 = cmd_int("PEXPIRETIME %s", key); /* = the claim's time + its ttl */
    ck_assert_msg(e1 - r0 > 1000 && e1 - r1 <= 1100,
                  "expires %lld ms after a time before "
                  "the claim, %lld ms after one after it",
                  e1 - r0, e1 - r1);

    /* the exact call's expiry is set by its SET, after its time_ms (TIME at
     * the script's start) and before the TIME read after the call */
    exact(TB_EXACT, key2, &ru, 1, x);
    long long r2 = redis_now_us() / 1000;
    ck_assert_int_eq(x[X_ALLOWED], 1);
    long long e2 = cmd_int("PEXPIRETIME %s", key2);
    ck_assert_msg(e2 - x[X_TIME] > 900 && e2 - r2 <= 1010,
                  "expires %lld ms after its "
                  "decision, %lld ms after a time after it",
                  e2 - x[X_TIME], e2 - r2);

    /* once Redis' clock is past both */
    sleep_ms((double)((e1 > e2 ? e1 : e2) - redis_now_us() / 1000) + 20);
    ck_assert_int_eq(cmd_int("EXISTS %s", key), 0);
    ck_assert_int_eq(cmd_int("EXISTS %s", key2), 0);
    claim(TB_CLAIM, key, "A", &ru, 10, 0, 0, o); /* gone = full */
    ck_assert_int_eq(o[R_GRANTED], 10);
}
END_TEST

/* xorshift64*: deterministic sequences */
START_TEST(tb_random_sequence_keeps_invariant)
{
    const long long ttls[] = {1, 3, 10, 1000};
    struct rule ru = {20, 20, 30, 0}; /* 1 token/ms, burst 30 */
    static const char *const agents[] = {"a0", "a1", "a2", "a3", "a4"};
    long long L[5] = {0};
    char key[128];
    long long o[R_N], x[X_N];
    struct state st;
    long long grants = 0, denied = 0, capped = 0;
    mkkey(key, sizeof(key), "random");
    rng = 0x9e3779b97f4a7c15ULL;

    /* Blocks of 100 calls alternate between overload (the bucket runs dry)
     * and calm (it refills up to b - H while leases are held). */
    for (int i = 0; i < 2000; i++) {
        int calm = (i / 100) % 2;
        int a = (int)rnd_below(5);
        ru.ttl_ms = ttls[rnd_below(4)];
        long long op = rnd_below(100);
        int lease_op = 1;
        if (op < 50) { /* claim, with a report */
            long long want = calm ? rnd_below(6) == 0 : rnd_below(12);
            long long used = rnd_below(L[a] + 1);
            long long ret = rnd_below(3) == 0 ? rnd_below(L[a] - used + 1) : 0;
            if (rnd_below(20) == 0) { /* a confused agent over-reports */
                used += rnd_below(5);
                ret += rnd_below(5);
            }
            claim(TB_CLAIM, key, agents[a], &ru, want, used, ret, o);
            grants += o[R_GRANTED];
            denied += want > 0 && o[R_GRANTED] == 0;
        } else if (op < 65) { /* give back */
            give_back(TB_RETURN, key, agents[a], &ru, rnd_below(L[a] + 1), o);
        } else if (op < 85 && !calm) { /* exact decision */
            exact(TB_EXACT, key, &ru, 1 + rnd_below(3), x);
            lease_op = 0;
        } else { /* report only */
            claim(TB_CLAIM, key, agents[a], &ru, 0, rnd_below(L[a] + 1), 0, o);
        }
        if (rnd_below(calm ? 4 : 40) == 0)
            sleep_ms((double)rnd_below(4));

        assert_tb_invariant(key, ru.burst, &st);
        long long rem = st.t < 0 ? 0 : (long long)floor(st.t);
        capped += st.held > 0 && st.t > (double)(ru.burst - st.held) - 1;
        if (lease_op) {
            ck_assert_int_eq(o[R_REMAINING], rem);
            ck_assert_int_eq(o[R_HELD], st.held);
            ck_assert_int_eq(o[R_HOLDERS], st.holders);
            char field[16];
            snprintf(field, sizeof(field), "h:%s", agents[a]);
            ck_assert_int_eq(hget_ll(key, field), o[R_MINE] > 0 ? o[R_MINE] : -1);
            L[a] = o[R_MINE];
        } else {
            ck_assert_int_eq(x[X_REMAINING], rem);
        }
    }
    /* the sequence exercised the interesting paths */
    ck_assert_int_gt(grants, 0);
    ck_assert_int_gt(denied, 0);
    ck_assert_int_gt(capped, 50); /* often full up to b - H while leases were held */
}
END_TEST

static Suite *scripts_claim_suite(void)
{
    Suite *s = suite_create("scripts_claim");
    TCase *tb = scripts_tcase("token_bucket");
    CHECK_ADD(tb, tb_fresh_bucket_grants_min_want_floor_t, tb_refills_over_time,
              tb_settles_used_and_returned, tb_return_gives_back_unspent,
              tb_vanished_agent_lease_dropped_not_returned, tb_refill_capped_while_leases_held,
              tb_no_banked_refill_when_lease_ends, tb_burst_shrink_clamps,
              tb_clock_step_back_rebases, tb_redis_clock_forward_step_costs_at_most_b_plus_h,
              tb_key_expires, tb_random_sequence_keeps_invariant);
    suite_add_tcase(s, tb);
    return s;
}

int main(void)
{
    return scripts_main(scripts_claim_suite());
}
