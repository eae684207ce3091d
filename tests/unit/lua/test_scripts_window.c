/* SPDX-License-Identifier: Apache-2.0 */
/* test_scripts_window.c - the sliding window's scripts of lua/ (sw_claim,
 * sw_return, sw_exact, sw_reset) against a real redis-server: claims,
 * returns and exact calls, the last millisecond of a window, window roll,
 * random sequences that keep the counts, resets that keep leases.
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

/* ---- sliding window --------------------------------------------------------- */
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

/* One run of sw_window_roll on a new key: 0 when this machine did not run
 * a step's calls within the part of a 300 ms window that step needs (Redis'
 * clock read around them), so that the caller tries again; 1 when it did
 * and every assertion held. */
static int sw_window_roll_once(void)
{
    const struct rule ru = {10, 300, 10, 10000};
    const long long wus = ru.period_ms * 1000;
    char key[128];
    long long o[R_N], oa[R_N], oz[R_N], x[X_N];
    struct state st;
    mkkey(key, sizeof(key), "sw-roll");
    sleep_ms(window_left_ms(ru.period_ms) + 10); /* just after a boundary */

    long long a0 = redis_now_us();
    claim(SW_CLAIM, key, "A", &ru, 5, 0, 0, oa);
    claim(SW_CLAIM, key, "Z", &ru, 1, 0, 0, oz); /* Z vanishes */
    exact(SW_EXACT, key, &ru, 1, x);
    read_state(key, 1, &st);
    /* A's lease ends at the boundary: more than 150 ms away only when its
     * claim ran in the window's first half */
    if (a0 / wus != redis_now_us() / wus || redis_now_us() % wus >= wus / 2)
        return 0;
    ck_assert_int_eq(oa[R_GRANTED], 5);
    ck_assert_int_gt(oa[R_LEASE], 150);
    ck_assert_int_le(oa[R_LEASE], 290);
    ck_assert_int_eq(oz[R_GRANTED], 1);
    ck_assert_int_eq(x[X_ALLOWED], 1);
    ck_assert_int_eq(st.c, 7);
    ck_assert_int_eq(st.holders, 2);
    ck_assert_int_eq(st.p, 0);
    long long w0 = st.w;

    sleep_ms(window_left_ms(ru.period_ms) + 30); /* next window */
    long long lo = redis_now_us();
    give_back(SW_RETURN, key, "A", &ru, 0, o); /* too late: no subtraction */
    long long hi = redis_now_us();
    if (lo / wus != w0 + 1 || hi / wus != w0 + 1) /* slept past it, or crossed one */
        return 0;
    read_state(key, 1, &st);
    ck_assert_int_eq(st.w, w0 + 1);
    ck_assert_int_eq(st.p, 7);
    ck_assert_int_eq(st.c, 0);
    ck_assert_int_eq(st.holders, 0);
    ck_assert_int_eq(hget_ll(key, "h:A"), -1);
    ck_assert_int_eq(hget_ll(key, "w:A"), -1);
    double el_lo = (double)(lo % wus), el_hi = (double)(hi % wus);
    long long rlo = (long long)floor(10 - 7 * (1 - el_lo / (double)wus));
    long long rhi = (long long)floor(10 - 7 * (1 - el_hi / (double)wus));
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
    return 1;
}

/* Windows of 300 ms: a step that must fall in one window is tried again on
 * a new key when a busy machine let a boundary fall inside it (up to 10
 * times, then the test fails: never skipped). */
START_TEST(sw_window_roll)
{
    int tries = 0;
    while (!sw_window_roll_once())
        ck_assert_msg(++tries < 10, "10 tries, each crossing a 300 ms window's boundary");
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

    /* At least 800 calls, then on until a claim was granted and one denied
     * (up to ten times as long): how many calls share a 50 ms window, and
     * so whether one is denied, depends on the machine's speed. */
    int i;
    for (i = 0; i < 8000 && (i < 800 || grants == 0 || denied == 0); i++) {
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
    ck_assert_msg(grants > 0 && denied > 0, "%d calls: %lld granted, %lld denied", i, grants,
                  denied);
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

/* Redis' clock stepping back 20 s leaves a key's window 20 windows ahead of
 * now's: written so here. The next call moves the count to now's window as
 * it is (nothing lost, a full window stays full to its end), keeps the leases
 * of that window and drops older ones, so the key admits again after one
 * window instead of 20 s; and a count never counts twice (fixed mode: the
 * next window admits exactly limit). */
START_TEST(sw_clock_step_back_rebases)
{
    const struct rule ru = {5, 1000, 5, 1000}; /* 5 per 1 s window */
    const long long wus = ru.period_ms * 1000;
    char key[128], key2[128], key3[128];
    long long o[R_N], x[X_N];
    struct state st;
    mkkey(key, sizeof(key), "sw-clock-back");
    mkkey(key2, sizeof(key2), "sw-clock-back-stale");
    mkkey(key3, sizeof(key3), "fw-clock-back");
    if (window_left_ms(ru.period_ms) < 400)
        sleep_ms(window_left_ms(ru.period_ms) + 10);

    long long k = redis_now_us() / wus, W = k + 20;
    freeReplyObject(cmd("HSET %s w %lld c 5 p 0 h:B 2 w:B %lld h:C 1 w:C %lld", key, W, W, W - 1));
    /* the window before the key's is now's: its lease must not read as current */
    freeReplyObject(cmd("HSET %s w %lld c 2 p 0 h:C 1 w:C %lld", key2, k + 1, k));
    exact(SW_EXACT, key, &ru, 1, x);
    ck_assert_int_eq(x[X_ALLOWED], 0); /* the full count moved with the window */
    read_state(key, 1, &st);
    ck_assert_int_eq(st.w, k);
    ck_assert_int_eq(st.c, 5);
    ck_assert_int_eq(st.held, 2); /* B's lease kept, C's (an older window) dropped */
    ck_assert_int_eq(st.holders, 1);
    ck_assert_int_eq(cmd_int("HEXISTS %s h:C", key), 0);
    claim(SW_CLAIM, key2, "C", &ru, 0, 0, 1, o); /* gives back 1 of a lease not current */
    ck_assert_int_eq(o[R_MINE], 0);
    read_state(key2, 1, &st);
    ck_assert_int_eq(st.w, k);
    ck_assert_int_eq(st.c, 2); /* its units stay counted */

    /* admitted again once the estimate falls, about a window on, not after
     * 20 s (deadline 5 s for a slow machine) */
    double t0 = mono_ms();
    int allowed = 0;
    while (!allowed && mono_ms() - t0 < 5000) {
        sleep_ms(20);
        exact(SW_EXACT, key, &ru, 1, x);
        allowed = (int)x[X_ALLOWED];
    }
    ck_assert_msg(allowed, "no admission %.0f ms after a 20 s step back", mono_ms() - t0);

    /* fixed mode: the planted count is window k's; the next admits limit, once */
    if (window_left_ms(ru.period_ms) < 400)
        sleep_ms(window_left_ms(ru.period_ms) + 10);
    k = redis_now_us() / wus;
    freeReplyObject(cmd("HSET %s w %lld c 5 p 0", key3, k + 20));
    long long fx[] = {ru.limit, ru.period_ms, ru.burst, 1, 0, 1, 0};
    call_ints(SW_EXACT, key3, NULL, fx, 7, x, X_N);
    ck_assert_int_eq(x[X_ALLOWED], 0);
    ck_assert_int_le(x[X_RETRY], ru.period_ms);
    sleep_ms(window_left_ms(ru.period_ms) + 10);
    int n = 0;
    for (int i = 0; i < 6; i++) {
        call_ints(SW_EXACT, key3, NULL, fx, 7, x, X_N);
        n += (int)x[X_ALLOWED];
    }
    ck_assert_int_eq(n, 5);
}
END_TEST

static Suite *scripts_window_suite(void)
{
    Suite *s = suite_create("scripts_window");
    TCase *sw = scripts_tcase("sliding_window");
    CHECK_ADD(sw, sw_claim_return_exact, sw_window_roll, sw_last_ms_grants_nothing,
              sw_random_sequence_keeps_counts, sw_reset_keeps_leases, sw_clock_step_back_rebases);
    suite_add_tcase(s, sw);
    return s;
}

int main(void)
{
    return scripts_main(scripts_window_suite());
}
