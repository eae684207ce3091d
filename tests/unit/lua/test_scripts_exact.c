/* SPDX-License-Identifier: Apache-2.0 */
/* test_scripts_exact.c - the token bucket's other scripts of lua/ against a
 * real redis-server: exact calls (tb_exact), resets that keep leases
 * (tb_reset), NOSCRIPT after a flush, the number formatting (fmt), bad
 * arguments.
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

START_TEST(tb_noscript_after_flush)
{
    char key[128];
    long long o[R_N];
    mkkey(key, sizeof(key), "noscript");

    /* (as functions: FUNCTION FLUSH, and no such function) */
    redisReply *r = cmd(scripts_fcall ? "FUNCTION FLUSH" : "SCRIPT FLUSH");
    ck_assert_int_eq(r->type, REDIS_REPLY_STATUS);
    freeReplyObject(r);
    const char *args[] = {"A", "10", "1000", "10", "1", "0", "0", "1000"};
    r = evalsha_raw(TB_CLAIM, key, 8, args);
    ck_assert_int_eq(r->type, REDIS_REPLY_ERROR);
    ck_assert_msg(strncmp(r->str, scripts_fcall ? "ERR Function not found" : "NOSCRIPT",
                          scripts_fcall ? 22 : 8) == 0,
                  "error: %s", r->str);
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
    /* Redis' clock before the first take: what refilled since is at most
     * what the time up to a denial's time_ms refills (measured, not
     * assumed under 100 ms: a busy machine can stall that long) */
    long long r0 = redis_now_us() / 1000;

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
    long long since = x[X_TIME] - r0;
    ck_assert_msg(x[X_RETRY] >= 2000 - since - 1 && x[X_RETRY] <= 2000, "retry %lld, %lld ms on",
                  x[X_RETRY], since);
    ck_assert_msg(x[X_RESET] >= 10000 - since - 1 && x[X_RESET] <= 10000, "reset %lld, %lld ms on",
                  x[X_RESET], since);
    assert_tb_invariant(key, ru.burst, &st);

    /* n > 1 */
    mkkey(key, sizeof(key), "exact-n");
    r0 = redis_now_us() / 1000;
    exact(TB_EXACT, key, &ru, 4, x);
    ck_assert_int_eq(x[X_ALLOWED], 1);
    ck_assert_int_eq(x[X_REMAINING], 1);
    exact(TB_EXACT, key, &ru, 2, x);
    ck_assert_int_eq(x[X_ALLOWED], 0);
    ck_assert_int_eq(x[X_REMAINING], 1);
    since = x[X_TIME] - r0;
    ck_assert_msg(x[X_RETRY] >= 2000 - since - 1 && x[X_RETRY] <= 2000, "retry %lld, %lld ms on",
                  x[X_RETRY], since);
    long long n3[] = {ru.limit, ru.period_ms, ru.burst}; /* n defaults to 1 */
    call_ints(TB_EXACT, key, NULL, n3, 3, x, X_N);
    ck_assert_int_eq(x[X_ALLOWED], 1);
    ck_assert_int_eq(x[X_REMAINING], 0);

    /* exact and leases on one bucket */
    mkkey(key, sizeof(key), "exact-lease");
    r0 = redis_now_us() / 1000;
    claim(TB_CLAIM, key, "A", &slow, 3, 0, 0, o);
    for (int i = 0; i < 7; i++) {
        exact(TB_EXACT, key, &slow, 1, x);
        ck_assert_int_eq(x[X_ALLOWED], 1);
    }
    exact(TB_EXACT, key, &slow, 1, x);
    ck_assert_int_eq(x[X_ALLOWED], 0);
    since = x[X_TIME] - r0;
    ck_assert_msg(x[X_RETRY] >= 1000 - since - 1 && x[X_RETRY] <= 1000, "retry %lld, %lld ms on",
                  x[X_RETRY], since);
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

    /* At least 600 calls, then on until 21 resets were made, 6 of them
     * with leases held, up to ten times as long: whether a lease of 5 ms is
     * still held at a reset depends on Redis TIME between the calls, so the
     * floor is reached by running longer, never asserted after a fixed
     * count. */
    int i;
    for (i = 0; i < 6000 && (i < 600 || resets <= 20 || with_leases <= 5); i++) {
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
    ck_assert_msg(resets > 20 && with_leases > 5,
                  "%d calls made only %d resets, %d of them with leases: the path untested", i,
                  resets, with_leases);
}
END_TEST

/* fmt, the text of every number a script stores, must print exactly what
 * string.format('%.17g') prints (the value read back is the value written):
 * lua/lib/fmt.lua, one text that every script but the cc_* ones includes,
 * taken here from tb_exact. */
START_TEST(fmt_is_17g)
{
    const char *first = strstr(script_text[TB_EXACT], "local fmt = setmetatable(");
    ck_assert_msg(first != NULL, "tb_exact: no fmt");
    const char *end = strstr(first, "\nend})\n");
    ck_assert_msg(end != NULL, "tb_exact: fmt without its end");
    size_t len0 = (size_t)(end - first) + 7;
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
        {TB_EXACT, 4, {"10", "1000", "10", "-1"}, "bad ARGV[4]"},
        {SW_EXACT, 4, {"10", "1000", "10", "x"}, "bad ARGV[4]"},
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

/* A request's cost (issue 28): taken at once or not at all; a cost over the
 * capacity never passes and takes nothing; cost 0 is a check, allowed where
 * 1 would be; an exact cost takes only what no lease holds. */
START_TEST(exact_cost_takes_all_or_nothing)
{
    char key[128];
    long long x[X_N], o[R_N];
    struct state st;
    static const long long costs[] = {4, 4, 4, 2};
    static const int allowed[] = {1, 1, 0, 1};
    static const long long left[] = {6, 2, 2, 0};
    static const enum script scripts[] = {TB_EXACT, SW_EXACT};

    for (size_t s = 0; s < 2; s++) {
        mkkey(key, sizeof(key), s ? "cost-sw" : "cost-tb");
        exact(scripts[s], key, &slow, 11, x); /* over the burst (sw: N) */
        ck_assert_int_eq(x[X_ALLOWED], 0);
        ck_assert_int_eq(x[X_REMAINING], 10);
        for (size_t i = 0; i < 4; i++) {
            exact(scripts[s], key, &slow, costs[i], x);
            ck_assert_msg(x[X_ALLOWED] == allowed[i], "script %zu cost %zu", s, i);
            ck_assert_int_eq(x[X_REMAINING], left[i]);
        }
        exact(scripts[s], key, &slow, 0, x); /* a check: nothing left, denied */
        ck_assert_int_eq(x[X_ALLOWED], 0);
        ck_assert_int_gt(x[X_RETRY], 0);
    }

    /* a check with tokens left takes none */
    mkkey(key, sizeof(key), "cost-zero");
    exact(TB_EXACT, key, &slow, 9, x);
    exact(TB_EXACT, key, &slow, 0, x);
    ck_assert_int_eq(x[X_ALLOWED], 1);
    ck_assert_int_eq(x[X_REMAINING], 1);
    ck_assert_int_eq(x[X_RETRY], 0);

    /* with 3 leased, an exact cost of 8 does not fit in t = 7; 7 does */
    mkkey(key, sizeof(key), "cost-lease");
    claim(TB_CLAIM, key, "A", &slow, 3, 0, 0, o);
    exact(TB_EXACT, key, &slow, 8, x);
    ck_assert_int_eq(x[X_ALLOWED], 0);
    ck_assert_int_eq(x[X_REMAINING], 7);
    exact(TB_EXACT, key, &slow, 7, x);
    ck_assert_int_eq(x[X_ALLOWED], 1);
    assert_tb_invariant(key, slow.burst, &st);
    ck_assert_int_eq(st.held, 3);
}
END_TEST

/* ---- refunds ([agent] charge = all-or-nothing) ------------------------------ */

/* *_refund of n taken at taken_ms: {given, remaining}. */
static void refund(enum script s, const char *key, const struct rule *ru, long long n,
                   long long taken_ms, long long *out)
{
    long long nums[] = {ru->limit, ru->period_ms, ru->burst, n, taken_ms};
    call_ints(s, key, NULL, nums, 5, out, REFUND_R_COUNT);
    ck_assert_int_ge(out[REFUND_R_GIVEN], 0);
    ck_assert_int_le(out[REFUND_R_GIVEN], n); /* never more than was taken */
}

/* tb_refund gives back what an exact call took, but never lifts t above
 * b - H: A holds 4, an exact call took 3 (t = 3), refunds of 3 and 3 give 3
 * and 0 back (t = 6 = b - H). A missing key is a full bucket: nothing to
 * give back, and it is not made again. */
START_TEST(tb_refund_caps_at_b_minus_held)
{
    char key[128];
    long long o[R_N], x[X_N], g[REFUND_R_COUNT];
    struct state st;

    mkkey(key, sizeof(key), "refund");
    claim(TB_CLAIM, key, "A", &slow, 4, 0, 0, o);
    exact(TB_EXACT, key, &slow, 3, x);
    ck_assert_int_eq(x[X_ALLOWED], 1);
    ck_assert_int_eq(x[X_REMAINING], 3);
    refund(TB_REFUND, key, &slow, 3, x[X_TIME], g);
    ck_assert_int_eq(g[REFUND_R_GIVEN], 3);
    ck_assert_int_eq(g[REFUND_R_REMAINING], 6);
    refund(TB_REFUND, key, &slow, 3, x[X_TIME], g); /* a second one finds no room */
    ck_assert_int_eq(g[REFUND_R_GIVEN], 0);
    assert_tb_invariant(key, slow.burst, &st);
    ck_assert(st.t <= (double)(slow.burst - st.held) + 1e-9);

    mkkey(key, sizeof(key), "refund-missing");
    refund(TB_REFUND, key, &slow, 2, 0, g);
    ck_assert_int_eq(g[REFUND_R_GIVEN], 0);
    ck_assert_int_eq(g[REFUND_R_REMAINING], slow.burst);
    ck_assert_int_eq(cmd_int("EXISTS %s", key), 0);
}
END_TEST

/* Refunds among random claims, reports, returns, expiries and exact calls of
 * several agents: t + H <= b after every call, and a refund never lifts t
 * above b - H nor gives more than was taken. */
START_TEST(tb_refund_random_keeps_invariant)
{
    struct rule ru = {20, 20, 30, 0}; /* 1 token/ms, burst 30 */
    static const char *const agents[] = {"a0", "a1", "a2"};
    long long L[3] = {0}, taken[8] = {0}, taken_ms[8] = {0};
    int ntaken = 0, refunds = 0;
    char key[128];
    long long o[R_N], x[X_N], g[REFUND_R_COUNT];
    struct state st;
    mkkey(key, sizeof(key), "refund-random");
    rng = 0xbb67ae8584caa73bULL;

    /* At least 600 calls, then on until 16 refunds were made, up to ten
     * times as long: how many exact calls are allowed (and so can be
     * refunded) depends on Redis TIME between the calls, so the floor is
     * reached by running longer, never asserted after a fixed count. */
    int i;
    for (i = 0; i < 6000 && (i < 600 || refunds < 16); i++) {
        int a = (int)rnd_below(3);
        long long op = rnd_below(100);
        ru.ttl_ms = rnd_below(2) ? 5 : 1000;
        if (op < 40) {
            long long used = rnd_below(L[a] + 1);
            claim(TB_CLAIM, key, agents[a], &ru, rnd_below(12), used, 0, o);
            L[a] = o[R_MINE];
        } else if (op < 50) {
            give_back(TB_RETURN, key, agents[a], &ru, rnd_below(L[a] + 1), o);
            L[a] = 0;
        } else if (op < 75) {
            long long n = 1 + rnd_below(3);
            exact(TB_EXACT, key, &ru, n, x);
            if (x[X_ALLOWED] && ntaken < 8) {
                taken[ntaken] = n;
                taken_ms[ntaken++] = x[X_TIME];
            }
        } else if (ntaken > 0) {
            int k = (int)rnd_below(ntaken);
            refund(TB_REFUND, key, &ru, taken[k], taken_ms[k], g);
            taken[k] = taken[--ntaken];
            taken_ms[k] = taken_ms[ntaken];
            refunds++;
            read_state(key, 0, &st);
            if (st.exists && st.has_t)
                ck_assert_msg(st.t <= (double)(ru.burst - st.held) + 1e-6,
                              "a refund lifted t %.17g above b - H = %lld", st.t,
                              ru.burst - st.held);
        }
        if (rnd_below(30) == 0)
            sleep_ms((double)rnd_below(4));
        assert_tb_invariant(key, ru.burst, &st);
    }
    ck_assert_msg(refunds >= 16, "%d calls made only %d refunds: the refund path untested", i,
                  refunds);
}
END_TEST

/* sw_refund takes the units off the window of the take only: 4 counted,
 * 4 back; after the window rolled, nothing back. */
START_TEST(sw_refund_same_window_only)
{
    const struct rule w = {10, 1000, 10, 0}; /* 10 per 1 s windows */
    char key[128];
    long long x[X_N], g[REFUND_R_COUNT];

    mkkey(key, sizeof(key), "sw-refund");
    if (window_left_ms(w.period_ms) < 400)
        sleep_ms(window_left_ms(w.period_ms) + 10);
    exact(SW_EXACT, key, &w, 4, x);
    ck_assert_int_eq(x[X_ALLOWED], 1);
    ck_assert_int_eq(x[X_REMAINING], 6);
    refund(SW_REFUND, key, &w, 4, x[X_TIME], g);
    ck_assert_int_eq(g[REFUND_R_GIVEN], 4);
    ck_assert_int_eq(g[REFUND_R_REMAINING], 10);
    ck_assert_int_eq(hget_ll(key, "c"), 0);
    refund(SW_REFUND, key, &w, 4, x[X_TIME], g); /* nothing more than counted */
    ck_assert_int_eq(g[REFUND_R_GIVEN], 0);
    exact(SW_EXACT, key, &w, 5, x);
    ck_assert_int_eq(x[X_ALLOWED], 1);
    sleep_ms(window_left_ms(w.period_ms) + 10); /* the window rolls */
    refund(SW_REFUND, key, &w, 5, x[X_TIME], g);
    ck_assert_int_eq(g[REFUND_R_GIVEN], 0);
    ck_assert_int_eq(hget_ll(key, "c"), 5); /* untouched (not rolled by a refund) */
}
END_TEST

/* ---- layouts: a string until a lease is claimed, then a hash ----------------- */

static int is_type(const char *key, const char *type)
{
    redisReply *r = cmd("TYPE %s", key);
    int same = r->type == REDIS_REPLY_STATUS && strcmp(r->str, type) == 0;
    freeReplyObject(r);
    return same;
}

/* The same decisions on a string key (tb_exact alone: a new key first) and
 * on a hash key (a full bucket written as tb_claim keeps one) give the same
 * replies, and the keys the same TTL; the string stays a string. */
START_TEST(tb_exact_layouts_answer_alike)
{
    const struct rule ru = {5, 10000, 5, 1000}; /* 2000 ms per token */
    const long long costs[] = {1, 3, 0, 2, 9, 1, 0, 1};
    char skey[128], hkey[128];
    long long xs[X_N], xh[X_N], first = 0;

    mkkey(skey, sizeof(skey), "layout-s");
    mkkey(hkey, sizeof(hkey), "layout-h");
    freeReplyObject(cmd("HSET %s t 5 ts 1", hkey)); /* ts long past: full */
    for (size_t i = 0; i < sizeof(costs) / sizeof(costs[0]); i++) {
        exact(TB_EXACT, skey, &ru, costs[i], xs);
        exact(TB_EXACT, hkey, &ru, costs[i], xh);
        /* The calls are apart by their time in Redis (a few ms on a loaded
         * machine). Both buckets refill from their first call on, so the
         * tokens they hold differ by the refill of the first pair's gap less
         * this pair's: the retry and reset times they answer differ by at
         * most the two gaps, plus a ms boundary each. */
        long long g = xh[X_TIME] - xs[X_TIME];
        if (i == 0)
            first = g;
        long long gap = first + g + 2;
        ck_assert_int_eq(xs[X_ALLOWED], xh[X_ALLOWED]);
        ck_assert_int_eq(xs[X_REMAINING], xh[X_REMAINING]);
        ck_assert_int_le(llabs(xs[X_RETRY] - xh[X_RETRY]), gap);
        ck_assert_int_le(llabs(xs[X_RESET] - xh[X_RESET]), gap);
        /* expiry times: two PTTLs would differ by the time between them too */
        long long ps = cmd_int("PEXPIRETIME %s", skey), ph = cmd_int("PEXPIRETIME %s", hkey);
        ck_assert_msg(ps > 0 && llabs(ps - ph) <= 5 + 2 * gap, "pexpiretime %lld vs %lld", ps, ph);
        ck_assert(is_type(skey, "string"));
        ck_assert(is_type(hkey, "hash"));
    }
    redisReply *r = cmd("GET %s", skey);
    ck_assert_int_eq(r->type, REDIS_REPLY_STRING);
    ck_assert_msg(strncmp(r->str, "1 ", 2) == 0, "layout version: %s", r->str);
    freeReplyObject(r);
}
END_TEST

/* A string key met by a script that writes fields (claim, refund, reset,
 * return) becomes the hash of the same state, with its TTL; tb_exact then
 * keeps it a hash. */
START_TEST(tb_string_key_becomes_hash)
{
    char key[128];
    long long x[X_N], o[R_N], g[REFUND_R_COUNT], z[Z_N];
    struct state st;

    mkkey(key, sizeof(key), "to-hash-claim");
    exact(TB_EXACT, key, &slow, 4, x);
    ck_assert(is_type(key, "string"));
    claim(TB_CLAIM, key, "A", &slow, 10, 0, 0, o);
    ck_assert(is_type(key, "hash"));
    ck_assert_int_eq(o[R_GRANTED], 6); /* what exact left */
    ck_assert_int_gt(cmd_int("PTTL %s", key), 0);
    assert_tb_invariant(key, slow.burst, &st);
    exact(TB_EXACT, key, &slow, 1, x);
    ck_assert_int_eq(x[X_ALLOWED], 0);
    ck_assert(is_type(key, "hash"));

    mkkey(key, sizeof(key), "to-hash-refund");
    exact(TB_EXACT, key, &slow, 3, x);
    long long ttl = cmd_int("PTTL %s", key);
    refund(TB_REFUND, key, &slow, 2, x[X_TIME], g);
    ck_assert_int_eq(g[REFUND_R_GIVEN], 2);
    ck_assert_int_eq(g[REFUND_R_REMAINING], 9);
    ck_assert(is_type(key, "hash"));
    long long ttl2 = cmd_int("PTTL %s", key);
    ck_assert_msg(ttl2 > 0 && ttl2 <= ttl, "ttl %lld, then %lld", ttl, ttl2);

    mkkey(key, sizeof(key), "to-hash-return");
    exact(TB_EXACT, key, &slow, 3, x);
    give_back(TB_RETURN, key, "A", &slow, 0, o);
    ck_assert(is_type(key, "hash"));
    ck_assert_int_eq(o[R_REMAINING], 7);

    mkkey(key, sizeof(key), "reset-string");
    exact(TB_EXACT, key, &slow, 3, x);
    reset(TB_RESET, key, &slow, z);
    ck_assert_int_eq(z[Z_BEFORE], 7);
    ck_assert_int_eq(z[Z_REMAINING], slow.burst);
    ck_assert_int_eq(cmd_int("EXISTS %s", key), 0); /* no lease: gone */
}
END_TEST

/* A pair of keys in the same state, t = b - 4 made at one Redis ms: a
 * string "2 t px" as the agent's plain SET NX PX px writes it (a new key
 * decided without Lua), and a "1 t ts" of the same creation time and expiry. */
static void first_pair(const char *k2, const char *k1, long long t, long long px)
{
    char v[64]; /* (one argument: hiredis splits the format at spaces) */
    snprintf(v, sizeof(v), "2 %lld %lld", t, px);
    freeReplyObject(cmd("SET %s %s NX PX %lld", k2, v, px));
    long long e = cmd_int("PEXPIRETIME %s", k2);
    ck_assert_int_gt(e, 0);
    snprintf(v, sizeof(v), "1 %lld %lld", t, (e - px) * 1000);
    freeReplyObject(cmd("SET %s %s PXAT %lld", k1, v, e));
}

/* calls of a command since the last CONFIG RESETSTAT */
static long long command_calls(const char *name)
{
    char field[64];
    snprintf(field, sizeof(field), "cmdstat_%s:calls=", name);
    redisReply *r = cmd("INFO commandstats");
    ck_assert_int_eq(r->type, REDIS_REPLY_STRING);
    const char *p = strstr(r->str, field);
    long long n = p ? atoll(p + strlen(field)) : 0;
    freeReplyObject(r);
    return n;
}

/* tb_exact reads the key first (GET): most of its calls come for a key the
 * agent decided before (a new one goes as a plain SET), and a SET NX GET
 * tried first failed on every one of them. One SET per decision, on a
 * "2 t px" key, a "1 t ts" one and a new one alike. */
START_TEST(tb_exact_reads_the_key_first)
{
    char k2[128], k1[128], k0[128];
    long long x[X_N];

    mkkey(k2, sizeof(k2), "read-first-2");
    mkkey(k1, sizeof(k1), "read-first-1");
    mkkey(k0, sizeof(k0), "read-first-0");
    first_pair(k2, k1, slow.burst - 1, 1000 + 1000);
    exact(TB_EXACT, k0, &slow, 0, x); /* (the script loaded: NOSCRIPT no more) */
    cmd_int("DEL %s", k0);
    freeReplyObject(cmd("CONFIG RESETSTAT"));
    exact(TB_EXACT, k2, &slow, 1, x);
    ck_assert_int_eq(x[X_ALLOWED], 1);
    exact(TB_EXACT, k1, &slow, 1, x);
    ck_assert_int_eq(x[X_ALLOWED], 1);
    exact(TB_EXACT, k0, &slow, 1, x);
    ck_assert_int_eq(x[X_ALLOWED], 1);
    ck_assert_int_eq(x[X_REMAINING], slow.burst - 1);
    ck_assert_int_eq(command_calls("get"), 3);
    ck_assert_int_eq(command_calls("set"), 3);
    ck_assert_int_eq(command_calls("pexpiretime"), 1);
}
END_TEST

/* Every tb_* script reads a "2 t px" key as the "1 t ts" key of its creation
 * time (within the 1 ms it adds: retry and reset may differ by a ms), and
 * writes it back in its own layout with its TTL. */
START_TEST(tb_first_set_key_reads_as_created)
{
    const long long t = slow.burst - 4, px = 4000 + 1000; /* 1000 ms per token */
    char k2[128], k1[128];
    long long a[X_N], b[X_N], oa[R_N], ob[R_N], za[Z_N], zb[Z_N];
    long long ga[REFUND_R_COUNT], gb[REFUND_R_COUNT];

    mkkey(k2, sizeof(k2), "first-exact-2");
    mkkey(k1, sizeof(k1), "first-exact-1");
    first_pair(k2, k1, t, px);
    for (int i = 0; i < 3; i++) {
        exact(TB_EXACT, k2, &slow, 2, a);
        exact(TB_EXACT, k1, &slow, 2, b);
        /* plus the time between the two calls (ms on a loaded machine) */
        long long gap = b[X_TIME] - a[X_TIME];
        ck_assert_int_eq(a[X_ALLOWED], b[X_ALLOWED]);
        ck_assert_int_eq(a[X_REMAINING], b[X_REMAINING]);
        ck_assert_int_le(llabs(a[X_RETRY] - b[X_RETRY]), 2 + gap);
        ck_assert_int_le(llabs(a[X_RESET] - b[X_RESET]), 2 + gap);
        /* the expiry times, not PTTL: two PTTLs read at two moments differ by
         * the time between them too (ms next to CPU hogs) */
        long long pa = cmd_int("PEXPIRETIME %s", k2), pb = cmd_int("PEXPIRETIME %s", k1);
        ck_assert_msg(pa > 0 && llabs(pa - pb) <= 5 + 2 * gap, "pexpiretime %lld vs %lld", pa, pb);
    }
    ck_assert_int_eq(a[X_ALLOWED], 1); /* 6, 4, 2 taken: 0 left */
    ck_assert_int_eq(a[X_REMAINING], 0);
    redisReply *r = cmd("GET %s", k2);
    ck_assert_int_eq(r->type, REDIS_REPLY_STRING);
    ck_assert_msg(strncmp(r->str, "1 ", 2) == 0, "layout version: %s", r->str);
    freeReplyObject(r);

    mkkey(k2, sizeof(k2), "first-claim-2");
    mkkey(k1, sizeof(k1), "first-claim-1");
    first_pair(k2, k1, t, px);
    claim(TB_CLAIM, k2, "A", &slow, 10, 0, 0, oa);
    claim(TB_CLAIM, k1, "A", &slow, 10, 0, 0, ob);
    ck_assert_int_eq(oa[R_GRANTED], 6);
    ck_assert_int_eq(oa[R_GRANTED], ob[R_GRANTED]);
    ck_assert_int_eq(oa[R_REMAINING], ob[R_REMAINING]);
    ck_assert(is_type(k2, "hash"));
    ck_assert_int_gt(cmd_int("PTTL %s", k2), 0);

    mkkey(k2, sizeof(k2), "first-return-2");
    mkkey(k1, sizeof(k1), "first-return-1");
    first_pair(k2, k1, t, px);
    give_back(TB_RETURN, k2, "A", &slow, 0, oa);
    give_back(TB_RETURN, k1, "A", &slow, 0, ob);
    ck_assert_int_eq(oa[R_REMAINING], 6);
    ck_assert_int_eq(oa[R_REMAINING], ob[R_REMAINING]);
    ck_assert(is_type(k2, "hash"));

    mkkey(k2, sizeof(k2), "first-refund-2");
    mkkey(k1, sizeof(k1), "first-refund-1");
    first_pair(k2, k1, t, px);
    long long now_us = redis_now_us(), now_ms = now_us / 1000;
    refund(TB_REFUND, k2, &slow, 3, now_ms, ga);
    refund(TB_REFUND, k1, &slow, 3, now_ms, gb);
    ck_assert_int_eq(ga[REFUND_R_GIVEN], 3);
    ck_assert_int_eq(ga[REFUND_R_REMAINING], 9);
    ck_assert_int_eq(ga[REFUND_R_GIVEN], gb[REFUND_R_GIVEN]);
    ck_assert_int_eq(ga[REFUND_R_REMAINING], gb[REFUND_R_REMAINING]);
    ck_assert(is_type(k2, "hash"));
    long long pa = cmd_int("PTTL %s", k2), pb = cmd_int("PTTL %s", k1);
    long long spent = (redis_now_us() - now_us) / 1000; /* ms on a loaded machine */
    ck_assert_msg(pa > 0 && llabs(pa - pb) <= 5 + 2 * spent, "pttl %lld vs %lld", pa, pb);

    mkkey(k2, sizeof(k2), "first-reset-2");
    mkkey(k1, sizeof(k1), "first-reset-1");
    first_pair(k2, k1, t, px);
    reset(TB_RESET, k2, &slow, za);
    reset(TB_RESET, k1, &slow, zb);
    ck_assert_int_eq(za[Z_BEFORE], 6);
    ck_assert_int_eq(za[Z_BEFORE], zb[Z_BEFORE]);
    ck_assert_int_eq(za[Z_REMAINING], zb[Z_REMAINING]);
}
END_TEST

static Suite *scripts_exact_suite(void)
{
    Suite *s = suite_create("scripts_exact");
    TCase *tb = scripts_tcase("token_bucket");
    CHECK_ADD(tb, fmt_is_17g, tb_noscript_after_flush, tb_exact_admits_burst_then_denies,
              exact_cost_takes_all_or_nothing, bad_arguments_are_errors, tb_reset_keeps_leases,
              tb_reset_without_leases_deletes_key, tb_reset_random_keeps_invariant,
              tb_refund_caps_at_b_minus_held, tb_refund_random_keeps_invariant,
              sw_refund_same_window_only, tb_exact_layouts_answer_alike, tb_string_key_becomes_hash,
              tb_first_set_key_reads_as_created, tb_exact_reads_the_key_first);
    suite_add_tcase(s, tb);
    return s;
}

int main(void)
{
    return scripts_main(scripts_exact_suite());
}
