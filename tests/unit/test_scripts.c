/* test_scripts.c - the Redis Lua scripts of lua/ against a real redis-server.
 *
 * Uses the server at 127.0.0.1:$REDIS_PORT when REDIS_PORT is set; otherwise
 * starts its own redis-server on a random loopback port (no persistence) and
 * stops it at the end. The scripts are read from $LUA_DIR (default
 * SRCDIR "/lua"), loaded with SCRIPT LOAD and called with EVALSHA, as the
 * agent does; a NOSCRIPT reply reloads the script once. Every test works on
 * keys of its own ("test_scripts:<pid>:<seq>:<name>"), so a shared server is
 * fine. Timing assertions bracket Redis time between local clock readings
 * taken before sending and after receiving, so they hold on a slow machine.
 */
#include <check.h>
#include <hiredis/hiredis.h>

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "scripts_harness.h"

/* ---- token bucket ----------------------------------------------------------- */

/* 10 per 10 s: 0.001 token/ms, so refill is negligible within a test. */
static const struct rule slow = {10, 10000, 10, 5000};

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
    const struct rule ru = {20, 1000, 5, 1000}; /* 0.02 token/ms */
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
    redisReply *r = cmd("EVAL %s 1 %s %s", "local d = tonumber(ARGV[1]) "
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
    const struct rule expiring = {10, 100, 10, 100};  /* 0.1 token/ms, ttl 100 ms */
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
    ck_assert_int_ge(x[X_RETRY], 2000); /* until the first lease ends */
    ck_assert_int_le(x[X_RETRY], 3000);
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

/* Redis time stepping back (failover to a host with another clock) must not
 * credit the same refill twice: ts never moves back. */
START_TEST(tb_clock_step_back_no_double_refill)
{
    const struct rule ru = {10, 100, 10, 1000};
    char key[128];
    long long o[R_N], x[X_N];
    mkkey(key, sizeof(key), "clock-back");
    long long future = redis_now_us() + 10000000LL;
    redisReply *r = cmd("HSET %s t 0 ts %lld", key, future);
    freeReplyObject(r);

    claim(TB_CLAIM, key, "A", &ru, 5, 0, 0, o);
    ck_assert_int_eq(o[R_GRANTED], 0);
    exact(TB_EXACT, key, &ru, 1, x);
    ck_assert_int_eq(x[X_ALLOWED], 0);
    give_back(TB_RETURN, key, "A", &ru, 0, o);
    ck_assert_int_eq(o[R_REMAINING], 0);
    ck_assert_int_eq(hget_ll(key, "ts"), future);
}
END_TEST

START_TEST(tb_key_expires)
{
    const struct rule ru = {10, 100, 10, 100}; /* full in 100 ms, lease 100 ms */
    char key[128], key2[128];
    long long o[R_N], x[X_N];
    mkkey(key, sizeof(key), "ttl");
    mkkey(key2, sizeof(key2), "ttl-exact");

    claim(TB_CLAIM, key, "A", &ru, 10, 0, 0, o);
    ck_assert_int_eq(o[R_GRANTED], 10);
    long long pttl = cmd_int("PTTL %s", key);
    ck_assert_int_gt(pttl, 1000);
    ck_assert_int_le(pttl, 1100);

    exact(TB_EXACT, key2, &ru, 1, x);
    ck_assert_int_eq(x[X_ALLOWED], 1);
    pttl = cmd_int("PTTL %s", key2);
    ck_assert_int_gt(pttl, 900);
    ck_assert_int_le(pttl, 1010);

    sleep_ms(1100 + 50);
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

START_TEST(tb_noscript_after_flush)
{
    char key[128];
    long long o[R_N];
    mkkey(key, sizeof(key), "noscript");

    redisReply *r = cmd("SCRIPT FLUSH");
    ck_assert_int_eq(r->type, REDIS_REPLY_STATUS);
    freeReplyObject(r);
    const char *args[] = {"A", "10", "1000", "10", "1", "0", "0", "1000"};
    r = evalsha_raw(TB_CLAIM, key, 8, args);
    ck_assert_int_eq(r->type, REDIS_REPLY_ERROR);
    ck_assert_msg(strncmp(r->str, "NOSCRIPT", 8) == 0, "error: %s", r->str);
    freeReplyObject(r);
    ck_assert_int_eq(cmd_int("EXISTS %s", key), 0);

    claim(TB_CLAIM, key, "A", &slow, 1, 0, 0, o); /* reloads, then works */
    ck_assert_int_eq(o[R_GRANTED], 1);
}
END_TEST

START_TEST(tb_exact_admits_burst_then_denies)
{
    const struct rule ru = {5, 10000, 5, 1000}; /* 0.0005 token/ms: 2000 ms per token */
    char key[128];
    long long x[X_N], o[R_N];
    struct state st;
    mkkey(key, sizeof(key), "exact");

    for (int i = 0; i < 5; i++) {
        exact(TB_EXACT, key, &ru, 1, x);
        ck_assert_int_eq(x[X_ALLOWED], 1);
        ck_assert_int_eq(x[X_REMAINING], 4 - i);
        if (i < 4)
            ck_assert_int_eq(x[X_RETRY], 0);
    }
    exact(TB_EXACT, key, &ru, 1, x);
    ck_assert_int_eq(x[X_ALLOWED], 0);
    ck_assert_int_eq(x[X_REMAINING], 0);
    ck_assert_int_gt(x[X_RETRY], 1900);
    ck_assert_int_le(x[X_RETRY], 2000);
    ck_assert_int_gt(x[X_RESET], 9900);
    ck_assert_int_le(x[X_RESET], 10000);
    assert_tb_invariant(key, ru.burst, &st);

    /* n > 1 */
    mkkey(key, sizeof(key), "exact-n");
    exact(TB_EXACT, key, &ru, 4, x);
    ck_assert_int_eq(x[X_ALLOWED], 1);
    ck_assert_int_eq(x[X_REMAINING], 1);
    exact(TB_EXACT, key, &ru, 2, x);
    ck_assert_int_eq(x[X_ALLOWED], 0);
    ck_assert_int_eq(x[X_REMAINING], 1);
    ck_assert_int_gt(x[X_RETRY], 1900);
    ck_assert_int_le(x[X_RETRY], 2000);
    long long n3[] = {ru.limit, ru.period_ms, ru.burst}; /* n defaults to 1 */
    call_ints(TB_EXACT, key, NULL, n3, 3, x, X_N);
    ck_assert_int_eq(x[X_ALLOWED], 1);
    ck_assert_int_eq(x[X_REMAINING], 0);

    /* exact and leases on one bucket */
    mkkey(key, sizeof(key), "exact-lease");
    claim(TB_CLAIM, key, "A", &slow, 3, 0, 0, o);
    for (int i = 0; i < 7; i++) {
        exact(TB_EXACT, key, &slow, 1, x);
        ck_assert_int_eq(x[X_ALLOWED], 1);
    }
    exact(TB_EXACT, key, &slow, 1, x);
    ck_assert_int_eq(x[X_ALLOWED], 0);
    ck_assert_int_gt(x[X_RETRY], 900);
    ck_assert_int_le(x[X_RETRY], 1000);
    assert_tb_invariant(key, slow.burst, &st);
    ck_assert_int_eq(st.held, 3);

    /* exact drops an expired lease, without returning its tokens */
    const struct rule short_ttl = {1, 1000000, 10, 30};
    mkkey(key, sizeof(key), "exact-expired");
    claim(TB_CLAIM, key, "A", &short_ttl, 3, 0, 0, o);
    sleep_ms(80);
    exact(TB_EXACT, key, &short_ttl, 1, x);
    ck_assert_int_eq(x[X_ALLOWED], 1);
    ck_assert_int_eq(x[X_REMAINING], 6);
    assert_tb_invariant(key, short_ttl.burst, &st);
    ck_assert_int_eq(st.holders, 0);
}
END_TEST

/* A reset fills the bucket up to b - H: the leases of every agent run on
 * (their agents spend them without asking Redis), so t + H <= b holds across
 * it, and it never takes tokens. */
START_TEST(tb_reset_keeps_leases)
{
    char key[128];
    long long o[R_N], x[X_N], z[Z_N];
    struct state st;
    mkkey(key, sizeof(key), "reset");

    claim(TB_CLAIM, key, "A", &slow, 3, 0, 0, o);
    claim(TB_CLAIM, key, "B", &slow, 4, 0, 0, o);
    for (int i = 0; i < 3; i++) {
        exact(TB_EXACT, key, &slow, 1, x);
        ck_assert_int_eq(x[X_ALLOWED], 1);
    }
    exact(TB_EXACT, key, &slow, 1, x);
    ck_assert_int_eq(x[X_ALLOWED], 0);

    reset(TB_RESET, key, &slow, z);
    ck_assert_int_eq(z[Z_REMAINING], 3); /* b - H = 10 - 7 */
    ck_assert_int_eq(z[Z_HELD], 7);
    ck_assert_int_eq(z[Z_HOLDERS], 2);
    ck_assert_int_eq(z[Z_BEFORE], 0);
    assert_tb_invariant(key, slow.burst, &st);
    ck_assert_int_eq(st.held, 7);
    ck_assert_msg(fabs(st.t - 3.0) < 1e-9, "t = %.17g after the reset", st.t);
    ck_assert_int_eq(hget_ll(key, "h:A"), 3); /* the leases are untouched */
    ck_assert_int_eq(hget_ll(key, "h:B"), 4);
    ck_assert_int_gt(cmd_int("PTTL %s", key), 0);

    /* A spent its 3, B gives its 4 back: full again, never over */
    claim(TB_CLAIM, key, "A", &slow, 0, 3, 0, o);
    ck_assert_int_eq(o[R_REMAINING], 3);
    give_back(TB_RETURN, key, "B", &slow, 0, o);
    ck_assert_int_eq(o[R_REMAINING], 7);
    ck_assert_int_eq(o[R_HELD], 0);
    assert_tb_invariant(key, slow.burst, &st);
}
END_TEST

/* With no lease left a reset deletes the key (a missing bucket is full);
 * an expired lease is dropped first, its tokens counted as spent. */
START_TEST(tb_reset_without_leases_deletes_key)
{
    const struct rule ru = {5, 10000, 5, 1000};
    const struct rule short_ttl = {1, 1000000, 10, 30};
    char key[128];
    long long o[R_N], x[X_N], z[Z_N];
    mkkey(key, sizeof(key), "reset-empty");

    for (int i = 0; i < 5; i++)
        exact(TB_EXACT, key, &ru, 1, x);
    ck_assert_int_eq(x[X_REMAINING], 0);
    reset(TB_RESET, key, &ru, z);
    ck_assert_int_eq(z[Z_REMAINING], 5);
    ck_assert_int_eq(z[Z_HELD], 0);
    ck_assert_int_eq(z[Z_HOLDERS], 0);
    ck_assert_int_eq(z[Z_BEFORE], 0);
    ck_assert_int_eq(cmd_int("EXISTS %s", key), 0);
    exact(TB_EXACT, key, &ru, 1, x);
    ck_assert_int_eq(x[X_ALLOWED], 1);
    ck_assert_int_eq(x[X_REMAINING], 4);

    mkkey(key, sizeof(key), "reset-missing");
    reset(TB_RESET, key, &ru, z);
    ck_assert_int_eq(z[Z_REMAINING], 5);
    ck_assert_int_eq(z[Z_BEFORE], 5);
    ck_assert_int_eq(cmd_int("EXISTS %s", key), 0);

    mkkey(key, sizeof(key), "reset-expired");
    claim(TB_CLAIM, key, "A", &short_ttl, 3, 0, 0, o);
    sleep_ms(80);
    reset(TB_RESET, key, &short_ttl, z);
    ck_assert_int_eq(z[Z_HOLDERS], 0);
    ck_assert_int_eq(z[Z_BEFORE], 7); /* the expired lease's 3 were spent */
    ck_assert_int_eq(z[Z_REMAINING], 10);
    ck_assert_int_eq(cmd_int("EXISTS %s", key), 0);
}
END_TEST

/* Resets among random claims, reports, returns and exact calls of several
 * agents: t + H <= b after every call, and = b right after a reset. */
START_TEST(tb_reset_random_keeps_invariant)
{
    struct rule ru = {20, 20, 30, 0}; /* 1 token/ms, burst 30 */
    static const char *const agents[] = {"a0", "a1", "a2"};
    long long L[3] = {0};
    char key[128];
    long long o[R_N], x[X_N], z[Z_N];
    struct state st;
    int resets = 0, with_leases = 0;
    mkkey(key, sizeof(key), "reset-random");
    rng = 0x6a09e667f3bcc908ULL;

    for (int i = 0; i < 600; i++) {
        int a = (int)rnd_below(3);
        long long op = rnd_below(100);
        ru.ttl_ms = rnd_below(2) ? 5 : 1000;
        if (op < 45) {
            long long used = rnd_below(L[a] + 1);
            claim(TB_CLAIM, key, agents[a], &ru, rnd_below(12), used, 0, o);
            L[a] = o[R_MINE];
        } else if (op < 55) {
            give_back(TB_RETURN, key, agents[a], &ru, rnd_below(L[a] + 1), o);
            L[a] = 0;
        } else if (op < 85) {
            exact(TB_EXACT, key, &ru, 1 + rnd_below(3), x);
        } else {
            reset(TB_RESET, key, &ru, z);
            resets++;
            read_state(key, 0, &st);
            ck_assert_int_eq(st.orphans, 0);
            ck_assert_int_eq(z[Z_HELD], st.held);
            ck_assert_int_eq(z[Z_HOLDERS], st.holders);
            if (z[Z_HOLDERS] == 0) {
                ck_assert(!st.exists);
                continue;
            }
            with_leases++;
            ck_assert_msg(fabs(st.t + (double)st.held - (double)ru.burst) < 1e-6,
                          "after a reset t %.17g + H %lld != b", st.t, st.held);
        }
        if (rnd_below(30) == 0)
            sleep_ms((double)rnd_below(4));
        assert_tb_invariant(key, ru.burst, &st);
    }
    ck_assert_int_gt(resets, 20);
    ck_assert_int_gt(with_leases, 5);
}
END_TEST

/* advance() holds the refill that the bound rests on. Each script must stand
 * alone under EVALSHA, so the four token-bucket scripts carry a copy each:
 * the copies, from refill() (its helpers come first) to the end of advance(),
 * must stay identical, byte for byte. */
static const char *advance_of(enum script s, size_t *len)
{
    const char *start = strstr(script_text[s], "local function refill(");
    ck_assert_msg(start != NULL, "%s: no refill()", script_name[s]);
    const char *adv = strstr(start, "local function advance(");
    ck_assert_msg(adv != NULL, "%s: no advance() after refill()", script_name[s]);
    const char *end = strstr(adv, "\nend\n");
    ck_assert_ptr_nonnull(end);
    *len = (size_t)(end - start) + 5;
    return start;
}

START_TEST(tb_advance_copies_identical)
{
    size_t l0, l1, l2, l3;
    const char *a = advance_of(TB_CLAIM, &l0);
    const char *b = advance_of(TB_RETURN, &l1);
    const char *c = advance_of(TB_EXACT, &l2);
    const char *d = advance_of(TB_RESET, &l3);
    ck_assert_uint_eq(l0, l1);
    ck_assert_uint_eq(l0, l2);
    ck_assert_uint_eq(l0, l3);
    ck_assert_int_eq(memcmp(a, b, l0), 0);
    ck_assert_int_eq(memcmp(a, c, l0), 0);
    ck_assert_int_eq(memcmp(a, d, l0), 0);
}
END_TEST

/* fmt, the text of every number a script stores, must print exactly what
 * string.format('%.17g') prints (the value read back is the value written):
 * one copy in each script, all identical, so the one tested here is each one. */
START_TEST(fmt_copies_identical)
{
    const char *first = NULL;
    size_t len0 = 0;
    for (int s = 0; s < NSCRIPTS; s++) {
        const char *start = strstr(script_text[s], "local fmt = setmetatable(");
        ck_assert_msg(start != NULL, "%s: no fmt", script_name[s]);
        const char *end = strstr(start, "\nend})\n");
        ck_assert_msg(end != NULL, "%s: fmt without its end", script_name[s]);
        size_t len = (size_t)(end - start) + 7;
        if (!first) {
            first = start;
            len0 = len;
            continue;
        }
        ck_assert_msg(len == len0 && memcmp(start, first, len) == 0, "%s: another fmt",
                      script_name[s]);
    }
    /* ... and prints what '%.17g' prints, first seen and remembered. */
    static const char probe[] =
        "local xs = {0, 0 * -1, 1, -1, 19, 0.1, 1 / 3, -2.5, 1e15, 1796278122005322,\n"
        "    2 ^ 53 - 1, 2 ^ 53, 2 ^ 53 + 2, -(2 ^ 53) + 1, -(2 ^ 53), 1e17, 1e300, 5e-324,\n"
        "    1 / 0, -1 / 0, 0 / 0}\n"
        "for _, x in ipairs(xs) do\n"
        "    for _ = 1, 2 do\n"
        "        if fmt[x] ~= format('%.17g', x) then return format('%.17g', x) end\n"
        "    end\n"
        "end\n"
        "return 'same'\n";
    char src[4096];
    int n = snprintf(src, sizeof(src), "local floor, format = math.floor, string.format\n%.*s\n%s",
                     (int)len0, first, probe);
    ck_assert(n > 0 && (size_t)n < sizeof(src));
    redisReply *r = cmd("EVAL %s 0", src);
    ck_assert_msg(r->type == REDIS_REPLY_STRING && strcmp(r->str, "same") == 0,
                  "fmt differs from %%.17g at %s", r->str ? r->str : "?");
    freeReplyObject(r);
}
END_TEST

START_TEST(bad_arguments_are_errors)
{
    char key[128];
    mkkey(key, sizeof(key), "bad");
    static const struct {
        enum script s;
        int n;
        const char *args[8];
        const char *msg;
    } cases[] = {
        {TB_CLAIM, 8, {"A", "10", "0", "10", "1", "0", "0", "1000"}, "bad ARGV[3]"},
        {TB_CLAIM, 8, {"", "10", "1000", "10", "1", "0", "0", "1000"}, "empty agent"},
        {TB_CLAIM, 8, {"A", "10", "1000", "10", "x", "0", "0", "1000"}, "bad ARGV[5]"},
        {TB_CLAIM, 8, {"A", "10", "1000", "10", "1", "-1", "0", "1000"}, "bad ARGV[6]"},
        {TB_CLAIM, 8, {"A", "10", "1000", "10", "1", "0", "0", "0"}, "bad ARGV[8]"},
        {TB_EXACT, 4, {"0", "1000", "10", "1"}, "bad ARGV[1]"},
        {TB_EXACT, 4, {"10", "1000", "10", "0"}, "bad ARGV[4]"},
        {TB_RETURN, 5, {"A", "10", "1000", "-3", "0"}, "bad ARGV[4]"},
        {SW_CLAIM, 8, {"A", "10", "1000", "10", "1", "0", "0", "nan"}, "bad ARGV[8]"},
        {SW_RETURN, 5, {"A", "10", "1000", "10", "inf"}, "bad ARGV[5]"},
        {SW_EXACT, 4, {"10", "-1000", "10", "1"}, "bad ARGV[2]"},
        {TB_RESET, 3, {"10", "1000", "-1"}, "bad ARGV[3]"},
        {TB_RESET, 3, {"10", "x", "10"}, "bad ARGV[2]"},
        {SW_RESET, 3, {"0", "1000", "10"}, "bad ARGV[1]"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        redisReply *r = evalsha(cases[i].s, key, cases[i].n, cases[i].args);
        ck_assert_msg(r->type == REDIS_REPLY_ERROR, "case %zu accepted", i);
        ck_assert_msg(strstr(r->str, cases[i].msg) != NULL, "case %zu: %s", i, r->str);
        freeReplyObject(r);
    }
    ck_assert_int_eq(cmd_int("EXISTS %s", key), 0);
}
END_TEST

/* ---- sliding window --------------------------------------------------------- */

/* Milliseconds left in the current window of Redis time. */
static double window_left_ms(long long period_ms)
{
    long long us = redis_now_us();
    return (double)(period_ms * 1000 - us % (period_ms * 1000)) / 1000.0;
}

START_TEST(sw_claim_return_exact)
{
    const struct rule ru = {10, 10000, 10, 1000};
    char key[128];
    long long o[R_N], x[X_N];
    struct state st;
    mkkey(key, sizeof(key), "sw");
    if (window_left_ms(ru.period_ms) < 2000)
        sleep_ms(window_left_ms(ru.period_ms) + 10);

    claim(SW_CLAIM, key, "A", &ru, 4, 0, 0, o);
    ck_assert_int_eq(o[R_GRANTED], 4);
    ck_assert_int_eq(o[R_REMAINING], 6);
    ck_assert_int_eq(o[R_HELD], 4);
    ck_assert_int_eq(o[R_HOLDERS], 1);
    ck_assert_int_eq(o[R_RETRY], 0);
    ck_assert_int_gt(o[R_RESET], 10000); /* the rest of this window and the next */
    ck_assert_int_le(o[R_RESET], 20000);
    ck_assert_int_eq(o[R_LEASE], 1000);
    ck_assert_int_eq(o[R_MINE], 4);

    const struct rule long_ttl = {10, 10000, 10, 1000000};
    claim(SW_CLAIM, key, "B", &long_ttl, 100, 0, 0, o);
    ck_assert_int_eq(o[R_GRANTED], 6);
    ck_assert_int_eq(o[R_REMAINING], 0);
    ck_assert_int_eq(o[R_HELD], 10);
    ck_assert_int_eq(o[R_HOLDERS], 2);
    /* the lease ends at the window boundary */
    ck_assert_int_gt(o[R_LEASE], 1000);
    ck_assert_int_le(o[R_LEASE], 10000);
    /* one unit frees up a tenth into the next window: boundary + 1000 ms */
    ck_assert_int_eq(o[R_RETRY] - o[R_LEASE] >= 1000 && o[R_RETRY] - o[R_LEASE] <= 1001, 1);

    give_back(SW_RETURN, key, "A", &ru, 1, o); /* 3 unspent units leave the count */
    ck_assert_int_eq(o[R_REMAINING], 3);
    ck_assert_int_eq(o[R_HELD], 6);
    ck_assert_int_eq(o[R_HOLDERS], 1);
    read_state(key, 1, &st);
    ck_assert_int_eq(st.c, 7);
    ck_assert_int_eq(st.p, 0);
    ck_assert_int_eq(st.orphans, 0);

    claim(SW_CLAIM, key, "B", &ru, 0, 2, 1, o); /* spent 2, gives 1 back */
    ck_assert_int_eq(o[R_MINE], 3);
    ck_assert_int_eq(o[R_HELD], 3);
    ck_assert_int_eq(o[R_REMAINING], 4);
    read_state(key, 1, &st);
    ck_assert_int_eq(st.c, 6);
    claim(SW_CLAIM, key, "B", &ru, 0, 3, 0, o); /* spent units stay counted */
    ck_assert_int_eq(o[R_MINE], 0);
    ck_assert_int_eq(o[R_HELD], 0);
    ck_assert_int_eq(o[R_HOLDERS], 0);
    ck_assert_int_eq(o[R_LEASE], 0);
    ck_assert_int_eq(o[R_REMAINING], 4);
    claim(SW_CLAIM, key, "C", &ru, 0, 0, 5, o); /* C holds nothing: uncounts nothing */
    ck_assert_int_eq(o[R_REMAINING], 4);

    exact(SW_EXACT, key, &ru, 1, x);
    ck_assert_int_eq(x[X_ALLOWED], 1);
    ck_assert_int_eq(x[X_REMAINING], 3);
    ck_assert_int_eq(x[X_RETRY], 0);
    exact(SW_EXACT, key, &ru, 4, x);
    ck_assert_int_eq(x[X_ALLOWED], 0);
    ck_assert_int_eq(x[X_REMAINING], 3);
    ck_assert_int_gt(x[X_RETRY], 0);
    exact(SW_EXACT, key, &ru, 3, x);
    ck_assert_int_eq(x[X_ALLOWED], 1);
    ck_assert_int_eq(x[X_REMAINING], 0);
    read_state(key, 1, &st);
    ck_assert_int_eq(st.c, 10);

    long long pttl = cmd_int("PTTL %s", key);
    ck_assert_int_gt(pttl, 10000 + 1000);
    ck_assert_int_le(pttl, 20000 + 1000);
}
END_TEST

/* In a window's last millisecond a lease would be 0 ms long: the claim used
 * to charge its grant anyway (spent by nobody, inflating the next window's
 * estimate, and charged again by the agent's next claim). Windows of 2 ms:
 * about half the calls land in a last millisecond. A fresh agent id per
 * call, so that mine is what this call granted. */
START_TEST(sw_last_ms_grants_nothing)
{
    const struct rule ru = {1000000, 2, 1000000, 1000};
    char key[128], agent[32];
    long long o[R_N];
    int in_last_ms = 0, granted = 0;
    mkkey(key, sizeof(key), "sw-last-ms");

    for (int i = 0; i < 100000 && (in_last_ms < 20 || granted < 20); i++) {
        snprintf(agent, sizeof(agent), "A%d", i);
        claim(SW_CLAIM, key, agent, &ru, 3, 0, 0, o);
        if (o[R_LEASE] == 0) {
            in_last_ms++;
            ck_assert_int_eq(o[R_GRANTED], 0);
            ck_assert_int_eq(o[R_MINE], 0);
            ck_assert_int_ge(o[R_REMAINING], 1); /* refused for the boundary, not the limit */
        } else {
            granted++;
            ck_assert_int_eq(o[R_GRANTED], 3);
            ck_assert_int_ge(o[R_LEASE], 1);
            ck_assert_int_le(o[R_LEASE], 2); /* 2 at the window's very first us */
            ck_assert_int_eq(o[R_MINE], 3);
        }
    }
    ck_assert_int_ge(in_last_ms, 20);
    ck_assert_int_ge(granted, 20);
}
END_TEST

START_TEST(sw_window_roll)
{
    const struct rule ru = {10, 300, 10, 10000};
    char key[128];
    long long o[R_N], x[X_N];
    struct state st;
    mkkey(key, sizeof(key), "sw-roll");
    sleep_ms(window_left_ms(ru.period_ms) + 10); /* just after a boundary */

    claim(SW_CLAIM, key, "A", &ru, 5, 0, 0, o);
    ck_assert_int_eq(o[R_GRANTED], 5);
    ck_assert_int_gt(o[R_LEASE], 150);
    ck_assert_int_le(o[R_LEASE], 290);
    claim(SW_CLAIM, key, "Z", &ru, 1, 0, 0, o); /* Z vanishes */
    ck_assert_int_eq(o[R_GRANTED], 1);
    exact(SW_EXACT, key, &ru, 1, x);
    ck_assert_int_eq(x[X_ALLOWED], 1);
    read_state(key, 1, &st);
    ck_assert_int_eq(st.c, 7);
    ck_assert_int_eq(st.holders, 2);
    ck_assert_int_eq(st.p, 0);
    long long w0 = st.w;

    sleep_ms(window_left_ms(ru.period_ms) + 30); /* next window */
    long long lo = redis_now_us();
    give_back(SW_RETURN, key, "A", &ru, 0, o); /* too late: no subtraction */
    long long hi = redis_now_us();
    read_state(key, 1, &st);
    ck_assert_int_eq(st.w, w0 + 1);
    ck_assert_int_eq(st.p, 7);
    ck_assert_int_eq(st.c, 0);
    ck_assert_int_eq(st.holders, 0);
    ck_assert_int_eq(hget_ll(key, "h:A"), -1);
    ck_assert_int_eq(hget_ll(key, "w:A"), -1);
    double wus = 300000.0;
    double el_lo = (double)(lo % 300000), el_hi = (double)(hi % 300000);
    ck_assert(el_lo <= el_hi); /* same window */
    long long rlo = (long long)floor(10 - 7 * (1 - el_lo / wus));
    long long rhi = (long long)floor(10 - 7 * (1 - el_hi / wus));
    ck_assert_msg(o[R_REMAINING] >= rlo && o[R_REMAINING] <= rhi,
                  "remaining %lld not in [%lld, %lld]", o[R_REMAINING], rlo, rhi);

    /* Z's lease of the old window is no longer counted as held */
    claim(SW_CLAIM, key, "B", &ru, 1, 0, 0, o);
    ck_assert_int_eq(o[R_GRANTED], 1);
    ck_assert_int_eq(o[R_HOLDERS], 1);
    ck_assert_int_eq(o[R_HELD], 1);
    ck_assert_int_eq(hget_ll(key, "h:Z"), -1);

    sleep_ms(2 * 300 + 50); /* two windows later everything is forgotten */
    exact(SW_EXACT, key, &ru, 1, x);
    ck_assert_int_eq(x[X_ALLOWED], 1);
    ck_assert_int_eq(x[X_REMAINING], 9);
    read_state(key, 1, &st);
    ck_assert_int_eq(st.p, 0);
    ck_assert_int_eq(st.c, 1);
}
END_TEST

START_TEST(sw_random_sequence_keeps_counts)
{
    const struct rule ru = {20, 50, 20, 1000};
    static const char *const agents[] = {"a0", "a1", "a2", "a3"};
    long long L[4] = {0};
    char key[128];
    long long o[R_N], x[X_N];
    struct state st;
    long long grants = 0, denied = 0;
    mkkey(key, sizeof(key), "sw-random");
    rng = 0x243f6a8885a308d3ULL;

    for (int i = 0; i < 800; i++) {
        int a = (int)rnd_below(4);
        long long op = rnd_below(100);
        int lease_op = 1;
        if (op < 55) {
            long long want = rnd_below(8);
            long long used = rnd_below(L[a] + 1);
            long long ret = rnd_below(2) ? rnd_below(L[a] - used + 1) : 0;
            if (rnd_below(20) == 0)
                ret += rnd_below(5);
            claim(SW_CLAIM, key, agents[a], &ru, want, used, ret, o);
            grants += o[R_GRANTED];
            denied += want > 0 && o[R_GRANTED] == 0;
        } else if (op < 70) {
            give_back(SW_RETURN, key, agents[a], &ru, rnd_below(L[a] + 1), o);
        } else {
            exact(SW_EXACT, key, &ru, 1 + rnd_below(2), x);
            lease_op = 0;
        }
        if (rnd_below(25) == 0)
            sleep_ms((double)rnd_below(5));

        read_state(key, 1, &st);
        ck_assert_int_eq(st.orphans, 0);
        ck_assert_int_ge(st.c, 0);
        ck_assert_int_le(st.c, ru.limit);
        ck_assert_int_le(st.held, st.c);
        if (lease_op) {
            ck_assert_int_le(o[R_REMAINING], ru.limit - st.c);
            ck_assert_int_eq(o[R_HELD], st.held);
            ck_assert_int_eq(o[R_HOLDERS], st.holders);
            ck_assert_int_le(o[R_LEASE], ru.period_ms);
            L[a] = o[R_MINE];
        } else {
            ck_assert_int_le(x[X_REMAINING], ru.limit - st.c);
        }
    }
    ck_assert_int_gt(grants, 0);
    ck_assert_int_gt(denied, 0);
}
END_TEST

/* A reset of a sliding window keeps the units held by leases of the
 * current window (c = held, p = 0), and deletes a counter without any. */
START_TEST(sw_reset_keeps_leases)
{
    const struct rule ru = {10, 60000, 10, 5000};
    char key[128];
    long long o[R_N], x[X_N], z[Z_N];
    struct state st;
    mkkey(key, sizeof(key), "sw-reset");
    if (window_left_ms(ru.period_ms) < 8000)
        sleep_ms(window_left_ms(ru.period_ms) + 10);

    claim(SW_CLAIM, key, "A", &ru, 3, 0, 0, o);
    claim(SW_CLAIM, key, "B", &ru, 2, 0, 0, o);
    for (int i = 0; i < 4; i++)
        exact(SW_EXACT, key, &ru, 1, x);
    ck_assert_int_eq(x[X_REMAINING], 1);
    reset(SW_RESET, key, &ru, z);
    ck_assert_int_eq(z[Z_REMAINING], 5);
    ck_assert_int_eq(z[Z_HELD], 5);
    ck_assert_int_eq(z[Z_HOLDERS], 2);
    ck_assert_int_eq(z[Z_BEFORE], 1);
    read_state(key, 1, &st);
    ck_assert_int_eq(st.c, 5);
    ck_assert_int_eq(st.p, 0);
    ck_assert_int_eq(st.held, 5);
    /* A spent 1 and returns 2: they leave the count as before the reset */
    give_back(SW_RETURN, key, "A", &ru, 1, o);
    ck_assert_int_eq(o[R_REMAINING], 7);

    /* a previous window's count goes too; no lease left: the key goes */
    mkkey(key, sizeof(key), "sw-reset-prev");
    long long w = redis_now_us() / (ru.period_ms * 1000);
    redisReply *r = cmd("HSET %s w %lld c 4 p 6", key, w);
    freeReplyObject(r);
    double left_hi = window_left_ms(ru.period_ms);
    reset(SW_RESET, key, &ru, z);
    double left_lo = window_left_ms(ru.period_ms);
    /* before = floor(10 - (6 x left / period + 4)) */
    ck_assert_int_ge(z[Z_BEFORE], (long long)floor(6.0 - 6.0 * left_hi / 60000.0));
    ck_assert_int_le(z[Z_BEFORE], (long long)floor(6.0 - 6.0 * left_lo / 60000.0));
    ck_assert_int_eq(z[Z_REMAINING], 10);
    ck_assert_int_eq(z[Z_HOLDERS], 0);
    ck_assert_int_eq(cmd_int("EXISTS %s", key), 0);
}
END_TEST

/* ---- the contract of src/store/script.h -------------------------------------- */

/* Arguments filled by position name, as the agent fills them. */
struct args {
    int n;
    const char *v[MAX_ARGS];
    char num[MAX_ARGS][24];
};

static void arg_num(struct args *a, int i, long long v)
{
    snprintf(a->num[i], sizeof(a->num[i]), "%lld", v);
    a->v[i] = a->num[i];
}

static void claim_args(struct args *a, const char *agent, const struct rule *ru, long long want,
                       long long used, long long returned)
{
    a->n = CLAIM_ARGC;
    a->v[CLAIM_ARG_AGENT] = agent;
    arg_num(a, CLAIM_ARG_LIMIT, ru->limit);
    arg_num(a, CLAIM_ARG_PERIOD_MS, ru->period_ms);
    arg_num(a, CLAIM_ARG_BURST, ru->burst);
    arg_num(a, CLAIM_ARG_WANT, want);
    arg_num(a, CLAIM_ARG_USED, used);
    arg_num(a, CLAIM_ARG_RETURNED, returned);
    arg_num(a, CLAIM_ARG_TTL_MS, ru->ttl_ms);
}

static void return_args(struct args *a, const char *agent, const struct rule *ru, long long used)
{
    a->n = RETURN_ARGC;
    a->v[RETURN_ARG_AGENT] = agent;
    arg_num(a, RETURN_ARG_LIMIT, ru->limit);
    arg_num(a, RETURN_ARG_PERIOD_MS, ru->period_ms);
    arg_num(a, RETURN_ARG_BURST, ru->burst);
    arg_num(a, RETURN_ARG_USED, used);
}

/* n = 0: what the agent sends (no cost: 1). */
static void exact_args(struct args *a, const struct rule *ru, long long n)
{
    a->n = n ? EXACT_ARGC_MAX : EXACT_ARGC;
    arg_num(a, EXACT_ARG_LIMIT, ru->limit);
    arg_num(a, EXACT_ARG_PERIOD_MS, ru->period_ms);
    arg_num(a, EXACT_ARG_BURST, ru->burst);
    if (n)
        arg_num(a, EXACT_ARG_N, n);
}

/* Call s with a; the reply must be exactly count integers. */
static void call_args(enum script s, const char *key, const struct args *a, long long *out,
                      int count)
{
    redisReply *r = evalsha(s, key, a->n, a->v);
    ck_assert_msg(r->type == REDIS_REPLY_ARRAY, "%s: %s", script_name[s],
                  r->type == REDIS_REPLY_ERROR ? r->str : "not an array");
    ck_assert_uint_eq(r->elements, (size_t)count);
    for (int i = 0; i < count; i++) {
        ck_assert_int_eq(r->element[i]->type, REDIS_REPLY_INTEGER);
        out[i] = r->element[i]->integer;
    }
    freeReplyObject(r);
}

/* out[pos] within [lo, hi], the message naming the position. */
#define EXPECT(out, pos, lo, hi) expect_in((out), (pos), #pos, (lo), (hi))
#define EXPECT_EQ(out, pos, v) EXPECT(out, pos, v, v)
static void expect_in(const long long *out, int pos, const char *name, long long lo, long long hi)
{
    ck_assert_msg(out[pos] >= lo && out[pos] <= hi, "%s = %lld, expected %lld..%lld", name,
                  out[pos], lo, hi);
}

/* 20 per minute, burst 20: a token bucket refills one token every 3 s, so
 * the few ms between calls add a fraction of one. Leases of 5 s outlive the
 * test; a sliding window test starts with at least 8 s of its window left,
 * so that lease_ms is the ttl there too. */
static const struct rule contract_rule = {20, 60000, 20, 5000};
#define FAR_MS 1000000000LL /* "any time" as an upper bound */

/* The claim scripts. B holds 3, A claims 4, then reports 1 spent and claims
 * 3 more: every position holds a different number. Then B takes the rest. */
static void contract_claim(enum script s, const char *key, int sw)
{
    struct args a;
    long long o[CLAIM_R_COUNT];

    claim_args(&a, "B", &contract_rule, 3, 0, 0);
    call_args(s, key, &a, o, CLAIM_R_COUNT);
    claim_args(&a, "A", &contract_rule, 4, 0, 0);
    call_args(s, key, &a, o, CLAIM_R_COUNT);
    claim_args(&a, "A", &contract_rule, 3, 1, 0);
    call_args(s, key, &a, o, CLAIM_R_COUNT);
    EXPECT_EQ(o, CLAIM_R_GRANTED, 3);
    EXPECT_EQ(o, CLAIM_R_REMAINING, 10); /* 20 - 3 - 4 - 3: the spent one stays spent */
    EXPECT_EQ(o, CLAIM_R_HELD, 9);       /* B's 3, A's 6 */
    EXPECT_EQ(o, CLAIM_R_HOLDERS, 2);
    EXPECT_EQ(o, CLAIM_R_RETRY_MS, 0);
    if (sw) /* 10 counted: the rest of this window and the next one */
        EXPECT(o, CLAIM_R_RESET_MS, 60000 + 1, 120000);
    else /* t + H = 19: one token short of the burst */
        EXPECT(o, CLAIM_R_RESET_MS, 2000 + 1, 3000);
    EXPECT_EQ(o, CLAIM_R_LEASE_MS, contract_rule.ttl_ms);
    EXPECT_EQ(o, CLAIM_R_MINE, 6);

    claim_args(&a, "B", &contract_rule, 100, 0, 0);
    call_args(s, key, &a, o, CLAIM_R_COUNT);
    EXPECT_EQ(o, CLAIM_R_GRANTED, 10);
    EXPECT_EQ(o, CLAIM_R_REMAINING, 0);
    EXPECT_EQ(o, CLAIM_R_HELD, 19);
    if (sw) /* the estimate 20 falls to 19 a twentieth into the next window */
        EXPECT(o, CLAIM_R_RETRY_MS, 3000 + 1, 63000);
    else
        EXPECT(o, CLAIM_R_RETRY_MS, 2000 + 1, 3000);
    EXPECT_EQ(o, CLAIM_R_MINE, 13);
}

/* The return scripts: A holds 5 and B 2; A spent 2 and gives 3 back. */
static void contract_return(enum script claim_s, enum script s, const char *key, int sw)
{
    struct args a;
    long long o[CLAIM_R_COUNT];

    claim_args(&a, "A", &contract_rule, 5, 0, 0);
    call_args(claim_s, key, &a, o, CLAIM_R_COUNT);
    claim_args(&a, "B", &contract_rule, 2, 0, 0);
    call_args(claim_s, key, &a, o, CLAIM_R_COUNT);
    return_args(&a, "A", &contract_rule, 2);
    call_args(s, key, &a, o, CLAIM_R_COUNT);
    EXPECT_EQ(o, CLAIM_R_GRANTED, 0);
    EXPECT_EQ(o, CLAIM_R_REMAINING, 16); /* 20 - 5 - 2 + 3 */
    EXPECT_EQ(o, CLAIM_R_HELD, 2);
    EXPECT_EQ(o, CLAIM_R_HOLDERS, 1);
    EXPECT_EQ(o, CLAIM_R_RETRY_MS, 0);
    if (sw)
        EXPECT(o, CLAIM_R_RESET_MS, 60000 + 1, 120000);
    else /* t + H = 18: two tokens short */
        EXPECT(o, CLAIM_R_RESET_MS, 5000 + 1, 6000);
    EXPECT_EQ(o, CLAIM_R_LEASE_MS, 0);
    EXPECT_EQ(o, CLAIM_R_MINE, 0);
}

/* The exact scripts: a cost of 3 passes, one of 18 does not, the default
 * cost (what the agent sends) is 1. */
static void contract_exact(enum script s, const char *key, int sw)
{
    struct args a;
    long long x[EXACT_R_COUNT];

    exact_args(&a, &contract_rule, 3);
    call_args(s, key, &a, x, EXACT_R_COUNT);
    EXPECT_EQ(x, EXACT_R_ALLOWED, 1);
    EXPECT_EQ(x, EXACT_R_REMAINING, 17);
    EXPECT_EQ(x, EXACT_R_RETRY_MS, 0);
    if (sw)
        EXPECT(x, EXACT_R_RESET_MS, 60000 + 1, 120000);
    else
        EXPECT(x, EXACT_R_RESET_MS, 8000 + 1, 9000);

    exact_args(&a, &contract_rule, 18);
    call_args(s, key, &a, x, EXACT_R_COUNT);
    EXPECT_EQ(x, EXACT_R_ALLOWED, 0);
    EXPECT_EQ(x, EXACT_R_REMAINING, 17);
    if (sw) /* the estimate 3 falls to 2 a third into the next window */
        EXPECT(x, EXACT_R_RETRY_MS, 20000 + 1, 80000);
    else
        EXPECT(x, EXACT_R_RETRY_MS, 2000 + 1, 3000);

    exact_args(&a, &contract_rule, 0);
    call_args(s, key, &a, x, EXACT_R_COUNT);
    EXPECT_EQ(x, EXACT_R_ALLOWED, 1);
    EXPECT_EQ(x, EXACT_R_REMAINING, 16);
    EXPECT(x, EXACT_R_RESET_MS, 1, FAR_MS);
}

/* The reset scripts: A holds 3, B 2, an exact call took 4; the reset
 * keeps the 5 held. */
static void contract_reset(enum script claim_s, enum script exact_s, enum script s, const char *key)
{
    struct args a;
    long long o[CLAIM_R_COUNT], x[EXACT_R_COUNT], z[RESET_R_COUNT];

    claim_args(&a, "A", &contract_rule, 3, 0, 0);
    call_args(claim_s, key, &a, o, CLAIM_R_COUNT);
    claim_args(&a, "B", &contract_rule, 2, 0, 0);
    call_args(claim_s, key, &a, o, CLAIM_R_COUNT);
    exact_args(&a, &contract_rule, 4);
    call_args(exact_s, key, &a, x, EXACT_R_COUNT);
    a.n = RESET_ARGC;
    arg_num(&a, RESET_ARG_LIMIT, contract_rule.limit);
    arg_num(&a, RESET_ARG_PERIOD_MS, contract_rule.period_ms);
    arg_num(&a, RESET_ARG_BURST, contract_rule.burst);
    call_args(s, key, &a, z, RESET_R_COUNT);
    EXPECT_EQ(z, RESET_R_REMAINING, 15); /* 20 - 5 */
    EXPECT_EQ(z, RESET_R_HELD, 5);
    EXPECT_EQ(z, RESET_R_HOLDERS, 2);
    EXPECT_EQ(z, RESET_R_BEFORE, 11); /* 20 - 3 - 2 - 4 */
}

START_TEST(reply_layout_matches_script_h)
{
    enum script s = (enum script)_i;
    int sw = s == SW_CLAIM || s == SW_RETURN || s == SW_EXACT || s == SW_RESET;
    char key[128];

    mkkey(key, sizeof(key), script_name[s]);
    if (sw && window_left_ms(contract_rule.period_ms) < 8000)
        sleep_ms(window_left_ms(contract_rule.period_ms) + 10);
    switch (s) {
    case TB_CLAIM:
    case SW_CLAIM:
        contract_claim(s, key, sw);
        break;
    case TB_RETURN:
        contract_return(TB_CLAIM, s, key, sw);
        break;
    case SW_RETURN:
        contract_return(SW_CLAIM, s, key, sw);
        break;
    case TB_EXACT:
    case SW_EXACT:
        contract_exact(s, key, sw);
        break;
    case TB_RESET:
        contract_reset(TB_CLAIM, TB_EXACT, s, key);
        break;
    case SW_RESET:
        contract_reset(SW_CLAIM, SW_EXACT, s, key);
        break;
    default:
        ck_abort_msg("script %d", _i);
    }
}
END_TEST

/* ---- main ------------------------------------------------------------------- */

static Suite *scripts_suite(void)
{
    Suite *s = suite_create("scripts");
    TCase *tb = tcase_create("token_bucket");
    tcase_add_checked_fixture(tb, setup, teardown);
    tcase_set_timeout(tb, 30);
    tcase_add_test(tb, tb_fresh_bucket_grants_min_want_floor_t);
    tcase_add_test(tb, tb_refills_over_time);
    tcase_add_test(tb, tb_settles_used_and_returned);
    tcase_add_test(tb, tb_return_gives_back_unspent);
    tcase_add_test(tb, tb_vanished_agent_lease_dropped_not_returned);
    tcase_add_test(tb, tb_refill_capped_while_leases_held);
    tcase_add_test(tb, tb_no_banked_refill_when_lease_ends);
    tcase_add_test(tb, tb_advance_copies_identical);
    tcase_add_test(tb, fmt_copies_identical);
    tcase_add_test(tb, tb_burst_shrink_clamps);
    tcase_add_test(tb, tb_clock_step_back_no_double_refill);
    tcase_add_test(tb, tb_redis_clock_forward_step_costs_at_most_b_plus_h);
    tcase_add_test(tb, tb_key_expires);
    tcase_add_test(tb, tb_random_sequence_keeps_invariant);
    tcase_add_test(tb, tb_noscript_after_flush);
    tcase_add_test(tb, tb_exact_admits_burst_then_denies);
    tcase_add_test(tb, bad_arguments_are_errors);
    tcase_add_test(tb, tb_reset_keeps_leases);
    tcase_add_test(tb, tb_reset_without_leases_deletes_key);
    tcase_add_test(tb, tb_reset_random_keeps_invariant);
    suite_add_tcase(s, tb);

    TCase *sw = tcase_create("sliding_window");
    tcase_add_checked_fixture(sw, setup, teardown);
    tcase_set_timeout(sw, 30);
    tcase_add_test(sw, sw_claim_return_exact);
    tcase_add_test(sw, sw_window_roll);
    tcase_add_test(sw, sw_last_ms_grants_nothing);
    tcase_add_test(sw, sw_random_sequence_keeps_counts);
    tcase_add_test(sw, sw_reset_keeps_leases);
    suite_add_tcase(s, sw);

    TCase *contract = tcase_create("contract");
    tcase_add_checked_fixture(contract, setup, teardown);
    tcase_set_timeout(contract, 30);
    tcase_add_loop_test(contract, reply_layout_matches_script_h, 0, NSCRIPTS);
    suite_add_tcase(s, contract);
    return s;
}

int main(void)
{
    return scripts_main(scripts_suite());
}
