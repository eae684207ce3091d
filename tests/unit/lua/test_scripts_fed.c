/* SPDX-License-Identifier: Apache-2.0 */
/* test_scripts_fed.c - fed buckets (lua/README.md "Fed buckets": the
 * regional bucket of a scope = global rule, limit = -N in the tb_* scripts)
 * and the claimer's scripts tb_pool and g_lock, against a real redis-server:
 * a missing key is empty; deposits are what agents claim; no refill ever;
 * unmet demand recorded and cleared; the deadline refuses grants and drops
 * free tokens; t + H <= b and exact token accounting under random deposits,
 * withdrawals, claims, returns, exact decisions and refunds; the lock.
 *
 * Server, scripts and keys as the other test_scripts_* (scripts_harness.c).
 * Timing assertions bracket Redis time (TIME read before and after a call).
 */
#include <check.h>
#include <hiredis/hiredis.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check_util.h"
#include "scripts_harness.h"

/* 1000 per second, burst 10: a non-fed bucket would refill in 10 ms. Fed:
 * limit -1000. Leases of 60 s outlive every test. */
static const struct rule fed = {-1000, 1000, 10, 60000};

/* tb_pool: amt into (or out of) key, burst b, dl (0: not sent). */
static void pool(const char *key, long long amt, long long b, long long dl, long long *out)
{
    long long nums[] = {amt, b, dl};
    call_ints(TB_POOL, key, NULL, nums, dl ? 3 : 2, out, POOL_R_COUNT);
}

/* g_lock: {ok, ms}; release when rel. */
static void lock(const char *key, const char *agent, long long ttl_ms, int rel, long long *out)
{
    char t[24];
    const char *argv[LOCK_ARGC_RELEASE];

    snprintf(t, sizeof(t), "%lld", ttl_ms);
    argv[LOCK_ARG_AGENT] = agent;
    argv[LOCK_ARG_TTL_MS] = t;
    argv[LOCK_ARG_RELEASE] = "release";
    redisReply *r = evalsha(G_LOCK, key, rel ? LOCK_ARGC_RELEASE : LOCK_ARGC, argv);
    ck_assert_msg(r->type == REDIS_REPLY_ARRAY && r->elements == LOCK_R_COUNT, "g_lock: %s",
                  r->type == REDIS_REPLY_ERROR ? r->str : "bad reply");
    for (int i = 0; i < LOCK_R_COUNT; i++)
        out[i] = r->element[i]->integer;
    freeReplyObject(r);
}

static void refund(const char *key, const struct rule *ru, long long n, long long *out)
{
    long long nums[] = {ru->limit, ru->period_ms, ru->burst, n, 0};
    call_ints(TB_REFUND, key, NULL, nums, 5, out, REFUND_R_COUNT);
}

/* A script call that must fail with an error containing what. */
static void expect_error(enum script s, const char *key, int n, const char *const *argv,
                         const char *what)
{
    redisReply *r = evalsha_raw(s, key, n, argv);
    ck_assert_msg(r->type == REDIS_REPLY_ERROR && strstr(r->str, what) != NULL,
                  "%s: expected an error with \"%s\", got %s", script_name[s], what,
                  r->type == REDIS_REPLY_ERROR ? r->str : "a reply");
    freeReplyObject(r);
}

START_TEST(missing_key_is_empty)
{
    char key[128];
    long long o[R_N], x[X_N], z[Z_N], g[REFUND_R_COUNT];

    mkkey(key, sizeof(key), "fed_missing");
    claim(TB_CLAIM, key, "A", &fed, 3, 0, 0, o);
    ck_assert_int_eq(o[R_GRANTED], 0);
    ck_assert_int_eq(o[R_REMAINING], 0);
    ck_assert_int_eq(o[R_MINE], 0);
    ck_assert_int_eq(o[R_RETRY], 1);  /* one token of the rule: 1000 / 1000 ms */
    ck_assert_int_eq(o[R_RESET], 10); /* burst x time per token */
    ck_assert_int_eq(hash_get_ll(key, "u"), 3);

    mkkey(key, sizeof(key), "fed_missing_exact");
    exact(TB_EXACT, key, &fed, 1, x);
    ck_assert_int_eq(x[X_ALLOWED], 0);
    ck_assert_int_eq(x[X_REMAINING], 0);
    ck_assert_int_eq(x[X_RETRY], 1);
    redisReply *r = cmd("TYPE %s", key); /* a fed key is always a hash */
    ck_assert_str_eq(r->str, "hash");
    freeReplyObject(r);
    ck_assert_int_ge(cmd_int("PTTL %s", key), 55000); /* it holds unmet demand */
    ck_assert_int_eq(hash_get_ll(key, "u"), 1);

    mkkey(key, sizeof(key), "fed_missing_refund");
    refund(key, &fed, 4, g);
    ck_assert_int_eq(g[REFUND_R_GIVEN], 0);
    ck_assert_int_eq(g[REFUND_R_REMAINING], 0);
    ck_assert_int_eq(cmd_int("EXISTS %s", key), 0);

    mkkey(key, sizeof(key), "fed_missing_reset");
    reset(TB_RESET, key, &fed, z);
    ck_assert_int_eq(z[Z_REMAINING], 0);
    ck_assert_int_eq(cmd_int("EXISTS %s", key), 0);

    /* the same key, not fed: full */
    mkkey(key, sizeof(key), "fed_missing_plain");
    const struct rule plain = {1000, 1000, 10, 60000};
    claim(TB_CLAIM, key, "A", &plain, 3, 0, 0, o);
    ck_assert_int_eq(o[R_GRANTED], 3);
}
END_TEST

START_TEST(deposits_then_claims)
{
    char key[128];
    long long p[POOL_R_COUNT], o[R_N], x[X_N];
    struct state st;

    mkkey(key, sizeof(key), "fed_deposit");
    pool(key, 5, 10, 0, p);
    ck_assert_int_eq(p[POOL_R_MOVED], 5);
    ck_assert_int_eq(p[POOL_R_REMAINING], 5);
    ck_assert_int_eq(p[POOL_R_DEADLINE], 0);
    claim(TB_CLAIM, key, "A", &fed, 3, 0, 0, o);
    ck_assert_int_eq(o[R_GRANTED], 3);
    ck_assert_int_eq(o[R_REMAINING], 2);
    ck_assert_int_eq(o[R_RETRY], 0);
    claim(TB_CLAIM, key, "B", &fed, 3, 0, 0, o);
    ck_assert_int_eq(o[R_GRANTED], 2);
    ck_assert_int_eq(o[R_HELD], 5);
    ck_assert_int_eq(o[R_REMAINING], 0);
    ck_assert_int_eq(o[R_RETRY], 1);
    exact(TB_EXACT, key, &fed, 2, x); /* the exact path: nothing free */
    ck_assert_int_eq(x[X_ALLOWED], 0);
    assert_tb_invariant(key, 10, &st);

    /* room: b - H - t = 10 - 5 - 0; unmet: B's 1 and the exact 2 */
    pool(key, 100, 10, 0, p);
    ck_assert_int_eq(p[POOL_R_MOVED], 5);
    ck_assert_int_eq(p[POOL_R_REMAINING], 5);
    ck_assert_int_eq(p[POOL_R_HELD], 5);
    ck_assert_int_eq(p[POOL_R_UNMET], 3);
    ck_assert_int_eq(hash_get_ll(key, "u"), -1);
    pool(key, 0, 10, 0, p);
    ck_assert_int_eq(p[POOL_R_MOVED], 0);
    ck_assert_int_eq(p[POOL_R_UNMET], 0);

    /* A reports 1 spent, returns 2: they go back to t; the pool withdraws */
    claim(TB_CLAIM, key, "A", &fed, 0, 1, 2, o);
    ck_assert_int_eq(o[R_MINE], 0);
    ck_assert_int_eq(o[R_REMAINING], 7);
    give_back(TB_RETURN, key, "B", &fed, 0, o);
    ck_assert_int_eq(o[R_REMAINING], 9);
    pool(key, -4, 10, 0, p);
    ck_assert_int_eq(p[POOL_R_MOVED], -4);
    ck_assert_int_eq(p[POOL_R_REMAINING], 5);
    pool(key, -100, 10, 0, p);
    ck_assert_int_eq(p[POOL_R_MOVED], -5);
    ck_assert_int_eq(p[POOL_R_REMAINING], 0);
    exact(TB_EXACT, key, &fed, 1, x);
    ck_assert_int_eq(x[X_ALLOWED], 0);
    assert_tb_invariant(key, 10, &st);

    /* a fed reset makes no token */
    long long z[Z_N];
    pool(key, 2, 10, 0, p);
    reset(TB_RESET, key, &fed, z);
    ck_assert_int_eq(z[Z_REMAINING], 2);
    ck_assert_int_eq(z[Z_BEFORE], 2);
}
END_TEST

/* At 1000/s a plain bucket refills a token a ms: a fed one, never. */
START_TEST(no_refill)
{
    char key[128];
    long long p[POOL_R_COUNT], o[R_N], x[X_N];
    struct state st;

    mkkey(key, sizeof(key), "fed_norefill");
    pool(key, 4, 10, 0, p);
    claim(TB_CLAIM, key, "A", &fed, 4, 0, 0, o);
    ck_assert_int_eq(o[R_GRANTED], 4);
    claim(TB_CLAIM, key, "A", &fed, 0, 4, 0, o); /* all spent: H = 0, t = 0 */
    ck_assert_int_eq(o[R_HELD], 0);
    long long t0 = redis_now_us();
    sleep_ms(300);
    ck_assert_int_ge(redis_now_us() - t0, 250000); /* Redis' clock moved on */
    claim(TB_CLAIM, key, "B", &fed, 1, 0, 0, o);
    ck_assert_int_eq(o[R_GRANTED], 0);
    ck_assert_int_eq(o[R_REMAINING], 0);
    exact(TB_EXACT, key, &fed, 1, x);
    ck_assert_int_eq(x[X_ALLOWED], 0);
    read_state(key, 0, &st);
    ck_assert(st.t == 0.0);
    pool(key, 0, 10, 0, p);
    ck_assert_int_eq(p[POOL_R_REMAINING], 0);
    ck_assert_int_eq(p[POOL_R_UNMET], 2);

    /* a plain exact call on a key the same age refills (the test can fail) */
    char plain_key[128];
    const struct rule plain = {1000, 1000, 10, 60000};
    mkkey(plain_key, sizeof(plain_key), "fed_norefill_plain");
    for (int i = 0; i < 10; i++)
        exact(TB_EXACT, plain_key, &plain, 1, x);
    sleep_ms(300);
    exact(TB_EXACT, plain_key, &plain, 1, x);
    ck_assert_int_eq(x[X_ALLOWED], 1);
}
END_TEST

/* The deadline: granted before it (bracketed), nothing from it on; free
 * tokens dropped, returns after it dropped too; tb_pool reports them lost
 * and clears it; a new deposit with a later deadline is granted again. */
START_TEST(deadline_refuses_and_drops)
{
    char key[128];
    long long p[POOL_R_COUNT], o[R_N], x[X_N], g[REFUND_R_COUNT];

    mkkey(key, sizeof(key), "fed_deadline");
    long long before = redis_now_us();
    pool(key, 6, 10, 400, p); /* the deadline 400 ms from the call */
    long long dl = p[POOL_R_DEADLINE];
    ck_assert_int_ge(dl, before + 400000);
    ck_assert_int_le(dl, redis_now_us() + 400000);
    ck_assert_int_eq(hash_get_ll(key, "dl"), dl);
    claim(TB_CLAIM, key, "A", &fed, 2, 0, 0, o);
    if (redis_now_us() < dl) /* the call came before the deadline */
        ck_assert_int_eq(o[R_GRANTED], 2);
    long long granted = o[R_GRANTED];
    while (redis_now_us() <= dl)
        sleep_ms(20);
    claim(TB_CLAIM, key, "B", &fed, 1, 0, 0, o);
    ck_assert_int_eq(o[R_GRANTED], 0);
    ck_assert_int_eq(o[R_REMAINING], 0);
    ck_assert_int_eq(hash_get_ll(key, "l"), 6 - granted); /* dropped */
    exact(TB_EXACT, key, &fed, 1, x);
    ck_assert_int_eq(x[X_ALLOWED], 0);
    give_back(TB_RETURN, key, "A", &fed, 0, o); /* A's unspent tokens: dropped */
    ck_assert_int_eq(o[R_REMAINING], 0);
    refund(key, &fed, 1, g);
    ck_assert_int_eq(g[REFUND_R_GIVEN], 0);
    ck_assert_int_eq(g[REFUND_R_REMAINING], 0);

    pool(key, 0, 10, 0, p);
    ck_assert_int_eq(p[POOL_R_LOST], 6 + 1); /* the free ones, A's, the refund's */
    ck_assert_int_eq(p[POOL_R_DEADLINE], 0);
    ck_assert_int_eq(p[POOL_R_REMAINING], 0);
    ck_assert_int_eq(hash_get_ll(key, "dl"), -1);
    ck_assert_int_eq(hash_get_ll(key, "l"), -1);
    pool(key, 0, 10, 0, p);
    ck_assert_int_eq(p[POOL_R_LOST], 0);

    /* deposited with a deadline far ahead: granted; cleared by a negative one */
    pool(key, 3, 10, 120000, p);
    ck_assert_int_eq(p[POOL_R_MOVED], 3);
    ck_assert_int_ge(cmd_int("PTTL %s", key), 115000); /* the key outlives dl */
    claim(TB_CLAIM, key, "B", &fed, 1, 0, 0, o);
    ck_assert_int_eq(o[R_GRANTED], 1);
    ck_assert_int_ge(cmd_int("PTTL %s", key), 115000);
    pool(key, 0, 10, -1, p);
    ck_assert_int_eq(p[POOL_R_DEADLINE], 0);
    ck_assert_int_eq(hash_get_ll(key, "dl"), -1);

    /* a deadline 1 ms ahead, passed: the next claim drops at once */
    pool(key, 0, 10, 1, p);
    while (redis_now_us() <= p[POOL_R_DEADLINE])
        sleep_ms(2);
    claim(TB_CLAIM, key, "C", &fed, 1, 0, 0, o);
    ck_assert_int_eq(o[R_GRANTED], 0);
    pool(key, 0, 10, 0, p);
    ck_assert_int_eq(p[POOL_R_LOST], 2);
}
END_TEST

/* A fed key holding tokens lives at least a minute; leases keep it longer. */
START_TEST(key_kept_alive)
{
    char key[128];
    long long p[POOL_R_COUNT], o[R_N], x[X_N];
    const struct rule long_lease = {-1000, 1000, 10, 200000};

    mkkey(key, sizeof(key), "fed_alive");
    pool(key, 5, 10, 0, p);
    ck_assert_int_ge(cmd_int("PTTL %s", key), 55000);
    exact(TB_EXACT, key, &fed, 1, x); /* no lease: a plain 1000/s key would get ~1 s */
    ck_assert_int_eq(x[X_ALLOWED], 1);
    ck_assert_int_ge(cmd_int("PTTL %s", key), 55000);
    exact(TB_EXACT, key, &fed, 4, x); /* empty, and unmet demand: kept */
    exact(TB_EXACT, key, &fed, 1, x);
    ck_assert_int_eq(x[X_ALLOWED], 0);
    ck_assert_int_ge(cmd_int("PTTL %s", key), 55000);
    pool(key, 0, 10, 0, p); /* read: nothing kept it any more, but never shortened */
    ck_assert_int_eq(p[POOL_R_UNMET], 1);
    ck_assert_int_ge(cmd_int("PTTL %s", key), 50000);
    pool(key, 5, 10, 0, p);
    claim(TB_CLAIM, key, "B", &long_lease, 1, 0, 0, o);
    ck_assert_int_ge(cmd_int("PTTL %s", key), 195000);
    pool(key, 1, 10, 0, p); /* never shortened */
    ck_assert_int_ge(cmd_int("PTTL %s", key), 195000);
}
END_TEST

/* The region's reserve (lib/fed.lua, ARGV after the optional ones, sent as
 * "none" before it, as script_fed_arg does): a missing fed key holds it, so
 * a key new to the region is decided at once; a key below it is kept (made
 * again it would hold the reserve: a debt forgiven); tb_pool reads it and
 * deposits above it. Without it, a missing key is empty (above). */
START_TEST(reserve_is_what_a_missing_key_holds)
{
    char key[128], k2[128], k3[128];
    long long o[R_N], x[X_N], p[POOL_R_COUNT];
    /* tb_claim: agent, -N, period, b, want, used, returned, ttl, rate, demand, block, reserve */
    /* (a lease of 1 s: the key must outlive it, its tokens may be spent) */
    const char *c3[] = {"A", "-1000", "1000", "10", "3", "0", "0", "1000", "", "", "", "3"};
    const char *ret3[] = {"A", "-1000", "1000", "10", "3", "3"}; /* used 3, reserve 3 */
    /* tb_exact: -N, period, b, n, block, reserve */
    const char *x1[] = {"-1000", "1000", "10", "1", "0", "2"};
    const char *p0[] = {"0", "10", "0", "3"}, *p2[] = {"2", "10", "0", "3"};

    _Static_assert(CLAIM_ARG_RESERVE == 11 && RETURN_ARG_RESERVE == 5 &&
                       EXACT_ARG_RESERVE == 5 && POOL_ARG_RESERVE == 3,
                   "the positions this test sends");
    mkkey(key, sizeof(key), "fed_reserve");
    call_strs(TB_CLAIM, key, 12, c3, o, R_N);
    ck_assert_int_eq(o[R_GRANTED], 3); /* all of its reserve, at once */
    ck_assert_int_eq(o[R_REMAINING], 0);
    /* all of it leased, none free: kept, though the lease ends in 1 s (an
     * agent never returns a lease it spent: made again, the key would hold
     * its reserve, a debt forgiven) */
    ck_assert_int_ge(cmd_int("PTTL %s", key), 55000);
    call_strs(TB_CLAIM, key, 12, c3, o, R_N); /* no more: the rest is the claimer's to feed */
    ck_assert_int_eq(o[R_GRANTED], 0);
    call_strs(TB_RETURN, key, 6, ret3, o, R_N); /* all spent: below its reserve, kept */
    ck_assert_int_eq(o[R_HELD], 0);
    ck_assert_int_ge(cmd_int("PTTL %s", key), 55000);
    call_strs(TB_POOL, key, 4, p0, p, POOL_R_COUNT); /* the claimer sees it owes 3 */
    ck_assert_int_eq(p[POOL_R_REMAINING], 0);
    ck_assert_int_eq(p[POOL_R_UNMET], 3); /* the second claim's */
    ck_assert_int_ge(cmd_int("PTTL %s", key), 55000);

    mkkey(k2, sizeof(k2), "fed_reserve_exact");
    call_strs(TB_EXACT, k2, 6, x1, x, X_N);
    ck_assert_int_eq(x[X_ALLOWED], 1);
    ck_assert_int_eq(x[X_REMAINING], 1);
    ck_assert_int_ge(cmd_int("PTTL %s", k2), 55000); /* 1 < 2: kept */

    mkkey(k3, sizeof(k3), "fed_reserve_pool");
    call_strs(TB_POOL, k3, 4, p0, p, POOL_R_COUNT); /* a read of a missing key: its reserve */
    ck_assert_int_eq(p[POOL_R_REMAINING], 3);
    ck_assert_int_eq(cmd_int("EXISTS %s", k3), 0); /* (a read writes nothing) */
    call_strs(TB_POOL, k3, 4, p2, p, POOL_R_COUNT); /* a deposit lands above it */
    ck_assert_int_eq(p[POOL_R_MOVED], 2);
    ck_assert_int_eq(p[POOL_R_REMAINING], 5);
}
END_TEST

/* Random deposits, withdrawals, claims, reports, returns, exact decisions
 * and refunds on one fed key (no lease expires): after every call t + H <= b,
 * t + H is exactly what was deposited less what was withdrawn and spent,
 * and the unmet demand tb_pool reads is what the calls could not serve. */
START_TEST(random_accounting)
{
    char key[128];
    static const char *const agents[] = {"A", "B", "C"};
    long long mine[3] = {0, 0, 0};
    long long ledger = 0, unmet = 0;
    long long p[POOL_R_COUNT], o[R_N], x[X_N], g[REFUND_R_COUNT];
    struct state st;
    const long long b = 12;
    const struct rule ru = {-50, 1000, b, 60000};

    mkkey(key, sizeof(key), "fed_random");
    for (int step = 0; step < 600; step++) {
        int a = (int)rnd_below(3);
        switch (rnd_below(6)) {
        case 0: { /* deposit or withdraw */
            long long amt = rnd_below(9) - 3;
            pool(key, amt, b, 0, p);
            ck_assert_int_le(p[POOL_R_MOVED] > 0 ? p[POOL_R_MOVED] : -p[POOL_R_MOVED],
                             amt > 0 ? amt : -amt);
            ledger += p[POOL_R_MOVED];
            ck_assert_int_eq(p[POOL_R_UNMET], unmet);
            unmet = 0;
            break;
        }
        case 1:
        case 2: { /* claim, with a report */
            long long want = rnd_below(5), used = rnd_below(mine[a] + 1);
            long long ret = rnd_below(mine[a] - used + 1);
            claim(TB_CLAIM, key, agents[a], &ru, want, used, ret, o);
            ck_assert_int_eq(o[CLAIM_R_HAD], mine[a]);
            ledger -= used;
            unmet += want - o[R_GRANTED];
            mine[a] = o[R_MINE];
            break;
        }
        case 3: { /* return */
            long long used = rnd_below(mine[a] + 1);
            give_back(TB_RETURN, key, agents[a], &ru, used, o);
            ledger -= used;
            mine[a] = 0;
            break;
        }
        case 4: { /* an exact decision, sometimes refunded */
            long long n = 1 + rnd_below(3);
            exact(TB_EXACT, key, &ru, n, x);
            if (x[X_ALLOWED]) {
                ledger -= n;
                if (rnd_below(2)) {
                    refund(key, &ru, n, g);
                    ck_assert_int_eq(g[REFUND_R_GIVEN], n); /* room: it was there */
                    ledger += n;
                }
            } else {
                unmet += n;
            }
            break;
        }
        default: /* a claim of nothing: only settles */
            claim(TB_CLAIM, key, agents[a], &ru, 0, 0, 0, o);
            mine[a] = o[R_MINE];
            break;
        }
        if (cmd_int("EXISTS %s", key) == 0) {
            ck_assert_int_eq(ledger, 0); /* only an empty key may be gone */
            continue;
        }
        assert_tb_invariant(key, b, &st);
        ck_assert_msg(st.t >= 0.0, "t %.17g < 0", st.t);
        ck_assert_msg(st.t + (double)st.held == (double)ledger, "step %d: t %.17g + H %lld != %lld",
                      step, st.t, st.held, ledger);
        ck_assert_int_eq(st.held, mine[0] + mine[1] + mine[2]);
    }
}
END_TEST

START_TEST(lock_acquire_renew_contend_release)
{
    char key[128];
    long long l[LOCK_R_COUNT];

    mkkey(key, sizeof(key), "g_lock");
    lock(key, "a1", 5000, 0, l);
    ck_assert_int_eq(l[LOCK_R_OK], 1);
    ck_assert_int_eq(l[LOCK_R_MS], 5000);
    lock(key, "a2", 5000, 0, l); /* contended */
    ck_assert_int_eq(l[LOCK_R_OK], 0);
    ck_assert_int_gt(l[LOCK_R_MS], 0);
    ck_assert_int_le(l[LOCK_R_MS], 5000);
    lock(key, "a1", 30000, 0, l); /* renewed, longer */
    ck_assert_int_eq(l[LOCK_R_OK], 1);
    ck_assert_int_gt(cmd_int("PTTL %s", key), 5000);
    lock(key, "a2", 5000, 1, l); /* not a2's: kept */
    ck_assert_int_eq(l[LOCK_R_OK], 0);
    ck_assert_int_gt(l[LOCK_R_MS], 5000);
    ck_assert_int_eq(cmd_int("EXISTS %s", key), 1);
    lock(key, "a1", 0, 1, l); /* released by its holder (ttl ignored) */
    ck_assert_int_eq(l[LOCK_R_OK], 1);
    ck_assert_int_eq(cmd_int("EXISTS %s", key), 0);
    lock(key, "a1", 5000, 1, l); /* nobody's */
    ck_assert_int_eq(l[LOCK_R_OK], 0);
    ck_assert_int_eq(l[LOCK_R_MS], 0);
    lock(key, "a2", 5000, 0, l);
    ck_assert_int_eq(l[LOCK_R_OK], 1);

    /* a holder that stops renewing loses it at its ttl */
    mkkey(key, sizeof(key), "g_lock_expiry");
    lock(key, "a1", 150, 0, l);
    ck_assert_int_eq(l[LOCK_R_OK], 1);
    double until = mono_ms() + 10000;
    while (cmd_int("EXISTS %s", key) == 1 && mono_ms() < until)
        sleep_ms(20);
    lock(key, "a2", 5000, 0, l);
    ck_assert_int_eq(l[LOCK_R_OK], 1);

    const char *bad_agent[] = {"", "5000"};
    expect_error(G_LOCK, key, 2, bad_agent, "empty agent id");
    const char *bad_ttl[] = {"a3", "0"};
    expect_error(G_LOCK, key, 2, bad_ttl, "bad ARGV[2]");
    const char *bad_op[] = {"a3", "5000", "steal"};
    expect_error(G_LOCK, key, 3, bad_op, "bad ARGV[3]");
}
END_TEST

/* A limit in (-1, 1) is still an error (a fed one is -N, N >= 1). */
START_TEST(bad_limits)
{
    char key[128];

    mkkey(key, sizeof(key), "fed_bad");
    const char *zero[] = {"A", "0", "1000", "10", "1", "0", "0", "1000"};
    expect_error(TB_CLAIM, key, 8, zero, "bad ARGV[2]");
    const char *half[] = {"A", "-0.5", "1000", "10", "1", "0", "0", "1000"};
    expect_error(TB_CLAIM, key, 8, half, "bad ARGV[2]");
    const char *x0[] = {"0", "1000", "10", "1"};
    expect_error(TB_EXACT, key, 4, x0, "bad ARGV[1]");
    const char *r0[] = {"A", "0", "1000", "10", "0"};
    expect_error(TB_RETURN, key, 5, r0, "bad ARGV[2]");
    const char *p0[] = {"x", "10"};
    expect_error(TB_POOL, key, 2, p0, "bad ARGV[1]");
    const char *p1[] = {"1", "-1"};
    expect_error(TB_POOL, key, 2, p1, "bad ARGV[2]");
    ck_assert_int_eq(cmd_int("EXISTS %s", key), 0);
}
END_TEST

static Suite *scripts_fed_suite(void)
{
    Suite *s = suite_create("scripts_fed");
    TCase *tc = scripts_tcase("fed");
    CHECK_ADD(tc, missing_key_is_empty, deposits_then_claims, no_refill, deadline_refuses_and_drops,
              key_kept_alive, reserve_is_what_a_missing_key_holds, random_accounting,
              lock_acquire_renew_contend_release, bad_limits);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return scripts_main(scripts_fed_suite());
}
