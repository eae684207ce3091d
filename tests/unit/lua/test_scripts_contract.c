/* SPDX-License-Identifier: Apache-2.0 */
/* test_scripts_contract.c - every script of lua/ against the contract of
 * src/store/script.h, on a real redis-server: arguments by position name as
 * the agent fills them, replies of the length and in the ranges the header
 * says.
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

#include "scripts_harness.h"

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

/* The refund scripts: A holds 3, an exact call took 4 at EXACT_R_TIME_MS;
 * the refund of 3 of them gives 3 back: 20 - 3 - 4 + 3 = 16 left. */
static void contract_refund(enum script claim_s, enum script exact_s, enum script s,
                            const char *key)
{
    struct args a;
    long long o[CLAIM_R_COUNT], x[EXACT_R_COUNT], z[REFUND_R_COUNT];

    claim_args(&a, "A", &contract_rule, 3, 0, 0);
    call_args(claim_s, key, &a, o, CLAIM_R_COUNT);
    exact_args(&a, &contract_rule, 4);
    call_args(exact_s, key, &a, x, EXACT_R_COUNT);
    EXPECT(x, EXACT_R_TIME_MS, 1600000000000LL, 4000000000000LL); /* ms since 1970 */
    a.n = REFUND_ARGC;
    arg_num(&a, REFUND_ARG_LIMIT, contract_rule.limit);
    arg_num(&a, REFUND_ARG_PERIOD_MS, contract_rule.period_ms);
    arg_num(&a, REFUND_ARG_BURST, contract_rule.burst);
    arg_num(&a, REFUND_ARG_N, 3);
    arg_num(&a, REFUND_ARG_TAKEN_MS, x[EXACT_R_TIME_MS]);
    call_args(s, key, &a, z, REFUND_R_COUNT);
    EXPECT_EQ(z, REFUND_R_GIVEN, 3);
    EXPECT_EQ(z, REFUND_R_REMAINING, 16);
}

/* The concurrency scripts: limit 2, max_hold 60 s. Two slots, a third
 * denied, a reset reads then frees them; a release of a held and of an
 * unknown slot. */
static void cc_acquire_args(struct args *a, const char *id)
{
    a->n = CC_ARGC;
    arg_num(a, CC_ARG_LIMIT, 2);
    arg_num(a, CC_ARG_HOLD_MS, 60000);
    a->v[CC_ARG_ID] = id;
}

static void contract_cc(enum script s, const char *key)
{
    struct args a;
    long long x[CC_R_COUNT], r[CC_RELEASE_R_COUNT], z[CC_RESET_R_COUNT];

    cc_acquire_args(&a, "00000000000000a1");
    call_args(CC_ACQUIRE, key, &a, x, CC_R_COUNT);
    EXPECT_EQ(x, EXACT_R_ALLOWED, 1);
    EXPECT_EQ(x, EXACT_R_REMAINING, 1);
    EXPECT_EQ(x, EXACT_R_RETRY_MS, 0);
    EXPECT_EQ(x, EXACT_R_RESET_MS, 0);
    EXPECT_EQ(x, CC_R_EXPIRED, 0);
    cc_acquire_args(&a, "00000000000000a2");
    call_args(CC_ACQUIRE, key, &a, x, CC_R_COUNT);
    EXPECT_EQ(x, EXACT_R_REMAINING, 0);
    cc_acquire_args(&a, "00000000000000a3");
    call_args(CC_ACQUIRE, key, &a, x, CC_R_COUNT);
    EXPECT_EQ(x, EXACT_R_ALLOWED, 0);
    EXPECT(x, EXACT_R_RETRY_MS, 1, 1000);
    if (s == CC_RELEASE) {
        a.n = CC_RELEASE_ARGC;
        a.v[CC_RELEASE_ARG_ID] = "00000000000000a1";
        call_args(s, key, &a, r, CC_RELEASE_R_COUNT);
        EXPECT_EQ(r, CC_RELEASE_R_RELEASED, 1);
        EXPECT_EQ(r, CC_RELEASE_R_HELD, 1);
        call_args(s, key, &a, r, CC_RELEASE_R_COUNT); /* again: unknown now */
        EXPECT_EQ(r, CC_RELEASE_R_RELEASED, 0);
        EXPECT_EQ(r, CC_RELEASE_R_HELD, 1);
    } else if (s == CC_RESET) {
        a.n = CC_RESET_ARGC;
        arg_num(&a, CC_RESET_ARG_FREE, 0);
        call_args(s, key, &a, z, CC_RESET_R_COUNT);
        EXPECT_EQ(z, CC_RESET_R_HELD, 2);
        EXPECT(z, CC_RESET_R_EARLIEST_MS, 59000, 60000);
        EXPECT(z, CC_RESET_R_LATEST_MS, z[CC_RESET_R_EARLIEST_MS], 60000);
        arg_num(&a, CC_RESET_ARG_FREE, 1);
        call_args(s, key, &a, z, CC_RESET_R_COUNT);
        EXPECT_EQ(z, CC_RESET_R_HELD, 2);
        call_args(s, key, &a, z, CC_RESET_R_COUNT);
        EXPECT_EQ(z, CC_RESET_R_HELD, 0);
        EXPECT_EQ(z, CC_RESET_R_EARLIEST_MS, 0);
    }
}

/* tb_pool and g_lock (the claimer's scripts of a fed bucket, lua/README.md
 * "Fed buckets"): a deposit with a deadline, an agent's fed claim asking
 * more than there is (unmet demand), a read; a lock taken, contended,
 * released. */
static void contract_pool(enum script s, const char *key)
{
    struct args a;
    long long p[POOL_R_COUNT], o[CLAIM_R_COUNT];
    const struct rule fed = {-contract_rule.limit, contract_rule.period_ms, contract_rule.burst,
                             contract_rule.ttl_ms};
    long long before = redis_now_us();

    a.n = POOL_ARGC_DEADLINE;
    arg_num(&a, POOL_ARG_AMOUNT, 7);
    arg_num(&a, POOL_ARG_BURST, contract_rule.burst);
    arg_num(&a, POOL_ARG_DEADLINE, 600000); /* ms from now */
    call_args(s, key, &a, p, POOL_R_COUNT);
    long long dl = p[POOL_R_DEADLINE]; /* Redis time of the call + 600 s */
    ck_assert_int_ge(dl, before + 600000000LL);
    ck_assert_int_le(dl, redis_now_us() + 600000000LL);
    EXPECT_EQ(p, POOL_R_MOVED, 7);
    EXPECT_EQ(p, POOL_R_REMAINING, 7);
    EXPECT_EQ(p, POOL_R_HELD, 0);
    EXPECT_EQ(p, POOL_R_LOST, 0);
    EXPECT_EQ(p, POOL_R_UNMET, 0);
    claim_args(&a, "A", &fed, 9, 0, 0);
    call_args(TB_CLAIM, key, &a, o, CLAIM_R_COUNT);
    EXPECT_EQ(o, CLAIM_R_GRANTED, 7);
    a.n = POOL_ARGC;
    arg_num(&a, POOL_ARG_AMOUNT, -1);
    arg_num(&a, POOL_ARG_BURST, contract_rule.burst);
    call_args(s, key, &a, p, POOL_R_COUNT);
    EXPECT_EQ(p, POOL_R_MOVED, 0);
    EXPECT_EQ(p, POOL_R_REMAINING, 0);
    EXPECT_EQ(p, POOL_R_HELD, 7);
    EXPECT_EQ(p, POOL_R_DEADLINE, dl);
    EXPECT_EQ(p, POOL_R_LOST, 0);
    EXPECT_EQ(p, POOL_R_UNMET, 2);
}

static void contract_lock(enum script s, const char *key)
{
    struct args a;
    long long l[LOCK_R_COUNT];

    a.n = LOCK_ARGC;
    a.v[LOCK_ARG_AGENT] = "A";
    arg_num(&a, LOCK_ARG_TTL_MS, 60000);
    call_args(s, key, &a, l, LOCK_R_COUNT);
    EXPECT_EQ(l, LOCK_R_OK, 1);
    EXPECT_EQ(l, LOCK_R_MS, 60000);
    a.v[LOCK_ARG_AGENT] = "B";
    call_args(s, key, &a, l, LOCK_R_COUNT);
    EXPECT_EQ(l, LOCK_R_OK, 0);
    EXPECT(l, LOCK_R_MS, 1, 60000);
    a.n = LOCK_ARGC_RELEASE;
    a.v[LOCK_ARG_AGENT] = "A";
    a.v[LOCK_ARG_RELEASE] = "release";
    call_args(s, key, &a, l, LOCK_R_COUNT);
    EXPECT_EQ(l, LOCK_R_OK, 1);
    EXPECT_EQ(l, LOCK_R_MS, 0);
}

START_TEST(reply_layout_matches_script_h)
{
    enum script s = (enum script)_i;
    int sw = s == SW_CLAIM || s == SW_RETURN || s == SW_EXACT || s == SW_RESET || s == SW_REFUND;
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
    case TB_REFUND:
        contract_refund(TB_CLAIM, TB_EXACT, s, key);
        break;
    case SW_REFUND:
        contract_refund(SW_CLAIM, SW_EXACT, s, key);
        break;
    case CC_ACQUIRE:
    case CC_RELEASE:
    case CC_RESET:
        contract_cc(s, key);
        break;
    case TB_POOL:
        contract_pool(s, key);
        break;
    case G_LOCK:
        contract_lock(s, key);
        break;
    default:
        ck_abort_msg("script %d", _i);
    }
}
END_TEST

/* ---- block_for (issue 28): CLAIM_ARG_BLOCK_MS and EXACT_ARG_BLOCK_MS ------- */

/* A token every 100 ms, burst 1 (sw: 1 per 100 ms window); a claim's sliding
 * window of 10 s, so that no grant falls in a window's last ms. */
static const struct rule block_rule = {1, 100, 1, 5000};
static const struct rule block_sw_claim = {1, 10000, 1, 5000};
#define BLOCK_MS 2000LL

static void block_exact_args(struct args *a, long long n)
{
    exact_args(a, &block_rule, n);
    a->n = EXACT_ARGC_BLOCK;
    arg_num(a, EXACT_ARG_BLOCK_MS, BLOCK_MS);
}

/* A token lease's claim with a block: the rate lease's two sent empty. */
static void block_claim_args(struct args *a, const struct rule *ru, const char *agent,
                             long long want, long long used)
{
    claim_args(a, agent, ru, want, used, 0);
    a->v[CLAIM_ARG_RATE_PPM] = "";
    a->v[CLAIM_ARG_DEMAND_PPM] = "";
    a->n = CLAIM_ARGC_BLOCK;
    arg_num(a, CLAIM_ARG_BLOCK_MS, BLOCK_MS);
}

/* The block is field bu of the key's hash (Redis time, us), ending within
 * BLOCK_MS, and the key outlives it. */
static void assert_block_field(const char *key)
{
    long long bu = hget_ll(key, "bu"), now = redis_now_us();
    ck_assert_msg(bu > now && bu <= now + BLOCK_MS * 1000, "bu %lld, now %lld", bu, now);
    ck_assert_int_gt(cmd_int("PTTL %s", key), (bu - now) / 1000);
}

/* The exact scripts: a cost over the capacity starts no block; a denial
 * does (retry the whole block); 250 ms on a token is back (tb) or both
 * windows are past (sw) and the key is still denied, with the rest of the
 * block; the reset scripts lift it. The token bucket's block then ends at
 * bu, not before. */
START_TEST(block_for_exact)
{
    static const enum script exact_s[] = {TB_EXACT, SW_EXACT}, reset_s[] = {TB_RESET, SW_RESET};
    struct args a;
    long long x[EXACT_R_COUNT], z[RESET_R_COUNT];
    char key[128];

    for (int sw = 0; sw < 2; sw++) {
        for (int tries = 1;; tries++) {
            mkkey(key, sizeof(key), sw ? "block-sw" : "block-tb");
            block_exact_args(&a, 2); /* never fits: the client's error, no block */
            call_args(exact_s[sw], key, &a, x, EXACT_R_COUNT);
            EXPECT_EQ(x, EXACT_R_ALLOWED, 0);
            ck_assert_int_eq(hget_ll(key, "bu"), -1);
            block_exact_args(&a, 1);
            long long t0 = redis_now_us();
            call_args(exact_s[sw], key, &a, x, EXACT_R_COUNT);
            EXPECT_EQ(x, EXACT_R_ALLOWED, 1);
            call_args(exact_s[sw], key, &a, x, EXACT_R_COUNT);
            /* a token is back 100 ms after the last one was taken: a busy
             * machine that put that much between the two calls gets a new
             * key (up to 10 tries), a quicker allowed one fails below */
            if (!x[EXACT_R_ALLOWED] || redis_now_us() - t0 < 100000 || tries == 10)
                break;
        }
        EXPECT_EQ(x, EXACT_R_ALLOWED, 0);
        EXPECT_EQ(x, EXACT_R_REMAINING, 0);
        EXPECT_EQ(x, EXACT_R_RETRY_MS, BLOCK_MS);
        EXPECT(x, EXACT_R_RESET_MS, BLOCK_MS, FAR_MS);
        assert_block_field(key);
        sleep_ms(250);
        call_args(exact_s[sw], key, &a, x, EXACT_R_COUNT);
        EXPECT_EQ(x, EXACT_R_ALLOWED, 0);
        EXPECT_EQ(x, EXACT_R_REMAINING, 0);
        EXPECT(x, EXACT_R_RETRY_MS, 1, BLOCK_MS - 250);
        arg_num(&a, RESET_ARG_LIMIT, block_rule.limit);
        arg_num(&a, RESET_ARG_PERIOD_MS, block_rule.period_ms);
        arg_num(&a, RESET_ARG_BURST, block_rule.burst);
        a.n = RESET_ARGC;
        call_args(reset_s[sw], key, &a, z, RESET_R_COUNT);
        ck_assert_int_eq(hget_ll(key, "bu"), -1);
        block_exact_args(&a, 1);
        call_args(exact_s[sw], key, &a, x, EXACT_R_COUNT);
        EXPECT_EQ(x, EXACT_R_ALLOWED, 1);
    }

    /* the end of a block: allowed once Redis' time passed bu, and not before */
    mkkey(key, sizeof(key), "block-end");
    block_exact_args(&a, 1);
    call_args(TB_EXACT, key, &a, x, EXACT_R_COUNT);
    call_args(TB_EXACT, key, &a, x, EXACT_R_COUNT);
    EXPECT_EQ(x, EXACT_R_ALLOWED, 0);
    long long bu = hget_ll(key, "bu");
    double deadline = mono_ms() + BLOCK_MS + 3000;
    for (;;) {
        long long before = redis_now_us();
        call_args(TB_EXACT, key, &a, x, EXACT_R_COUNT);
        if (x[EXACT_R_ALLOWED]) {
            ck_assert_int_ge(redis_now_us(), bu);
            break;
        }
        ck_assert_msg(before < bu, "denied at %lld, after the block's end %lld", before, bu);
        ck_assert_msg(mono_ms() < deadline, "never allowed after the block");
        sleep_ms(20);
    }
}
END_TEST

/* The claim scripts: A takes the only token; B's claim finds none and
 * starts the block; A's next claim grants nothing and ends its lease
 * (mine 0, lease_ms 0), with the rest of the block as retry. */
START_TEST(block_for_claim)
{
    static const enum script claim_s[] = {TB_CLAIM, SW_CLAIM}, reset_s[] = {TB_RESET, SW_RESET};
    struct args a;
    long long o[CLAIM_R_COUNT], z[RESET_R_COUNT];
    char key[128];

    for (int sw = 0; sw < 2; sw++) {
        const struct rule *ru = sw ? &block_sw_claim : &block_rule;
        mkkey(key, sizeof(key), sw ? "block-claim-sw" : "block-claim-tb");
        block_claim_args(&a, ru, "A", 1, 0);
        call_args(claim_s[sw], key, &a, o, CLAIM_R_COUNT);
        EXPECT_EQ(o, CLAIM_R_GRANTED, 1);
        ck_assert_int_eq(hget_ll(key, "bu"), -1);
        block_claim_args(&a, ru, "B", 1, 0);
        call_args(claim_s[sw], key, &a, o, CLAIM_R_COUNT);
        EXPECT_EQ(o, CLAIM_R_GRANTED, 0);
        EXPECT_EQ(o, CLAIM_R_REMAINING, 0);
        EXPECT_EQ(o, CLAIM_R_RETRY_MS, BLOCK_MS);
        assert_block_field(key);
        sleep_ms(5);
        block_claim_args(&a, ru, "A", 1, 0);
        call_args(claim_s[sw], key, &a, o, CLAIM_R_COUNT);
        EXPECT_EQ(o, CLAIM_R_GRANTED, 0);
        EXPECT_EQ(o, CLAIM_R_MINE, 0);
        EXPECT_EQ(o, CLAIM_R_LEASE_MS, 0);
        EXPECT(o, CLAIM_R_RETRY_MS, 1, BLOCK_MS - 1);
        arg_num(&a, RESET_ARG_LIMIT, ru->limit);
        arg_num(&a, RESET_ARG_PERIOD_MS, ru->period_ms);
        arg_num(&a, RESET_ARG_BURST, ru->burst);
        a.n = RESET_ARGC;
        call_args(reset_s[sw], key, &a, z, RESET_R_COUNT);
        ck_assert_int_eq(hget_ll(key, "bu"), -1);
    }
}
END_TEST

static Suite *scripts_contract_suite(void)
{
    Suite *s = suite_create("scripts_contract");
    TCase *contract = scripts_tcase("contract");
    tcase_add_loop_test(contract, reply_layout_matches_script_h, 0, NSCRIPTS);
    tcase_add_test(contract, block_for_exact);
    tcase_add_test(contract, block_for_claim);
    suite_add_tcase(s, contract);
    return s;
}

int main(void)
{
    return scripts_main(scripts_contract_suite());
}
