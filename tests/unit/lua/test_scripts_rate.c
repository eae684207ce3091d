/* SPDX-License-Identifier: Apache-2.0 */
/* test_scripts_rate.c - rate leases in tb_claim.lua (and tb_return.lua)
 * against a real redis-server: shares and slices, what Redis counts while a
 * grant is on its way, the central refill at r - P, and a random sequence
 * that keeps t + H <= b and P <= r after every call. The harness (server,
 * loading, calls) is scripts_harness.c. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check_util.h"
#include "scripts_harness.h"

#define POOL 0.7 /* RATE_POOL in tb_claim.lua */
#define S_SHARE CLAIM_R_SHARE_PPM
#define S_HAD CLAIM_R_HAD

/* 100 per 10 s (0.01 token/ms), burst 20, leases of 30 s. */
static const struct rule warm = {100, 10000, 20, 30000};

/* A rate lease's claim: want tokens for waiting requests, returned ones
 * given back, a share of ppm wanted for a demand of dppm. */
static void rclaim(const char *key, const char *agent, const struct rule *ru, long long want,
                   long long ret, long long ppm, long long dppm, long long *out)
{
    long long nums[] = {ru->limit, ru->period_ms, ru->burst, want, 0, ret, ru->ttl_ms, ppm, dppm};
    call_ints(TB_CLAIM, key, agent, nums, 9, out, R_N);
    ck_assert_int_ge(out[R_GRANTED], 0);
    ck_assert_int_ge(out[R_MINE], 0);
    ck_assert_int_ge(out[S_SHARE], 0);
    ck_assert_int_le(out[S_SHARE], ppm); /* never more than asked */
    ck_assert_int_le(out[S_SHARE], (long long)(POOL * 1e6) + 1);
    ck_assert_int_eq(out[R_LEASE], out[R_MINE] > 0 ? ru->ttl_ms : 0);
}

/* A hash field as a real number (NAN when missing). */
static double hget_d(const char *key, const char *field)
{
    redisReply *r = cmd("HGET %s %s", key, field);
    double v = r->type == REDIS_REPLY_STRING ? strtod(r->str, NULL) : NAN;
    freeReplyObject(r);
    return v;
}

static double field_of(const char *key, const char *prefix, const char *agent)
{
    char f[64];
    snprintf(f, sizeof(f), "%s:%s", prefix, agent);
    return hget_d(key, f);
}

/* Sum of every agent's counted share (q:), in millionths of the rate. */
static double shares_ppm(const char *key, const struct rule *ru)
{
    redisReply *r = cmd("HGETALL %s", key);
    double q = 0;
    for (size_t i = 0; i + 1 < r->elements; i += 2)
        if (strncmp(r->element[i]->str, "q:", 2) == 0)
            q += strtod(r->element[i + 1]->str, NULL);
    freeReplyObject(r);
    return q / ((double)ru->limit / ((double)ru->period_ms * 1000)) * 1e6;
}

/* The invariants, read back: t + H <= b, P <= r; per agent hn <= h and
 * qn <= q (the counted values are never below the last grant). */
static void assert_rate_invariant(const char *key, const struct rule *ru)
{
    struct state st;
    assert_tb_invariant(key, ru->burst, &st);
    ck_assert_msg(shares_ppm(key, ru) <= 1e6 + 1e-3, "P %.3f ppm > r", shares_ppm(key, ru));
    redisReply *r = cmd("HGETALL %s", key);
    for (size_t i = 0; i + 1 < r->elements; i += 2) {
        const char *name = r->element[i]->str;
        if (strncmp(name, "hn:", 3) == 0 || strncmp(name, "qn:", 3) == 0) {
            char counted[256];
            snprintf(counted, sizeof(counted), "%c:%s", name[0], name + 3);
            const redisReply *c = hash_field(r, counted);
            ck_assert_msg(c != NULL, "%s without %s", name, counted);
            ck_assert_msg(strtod(r->element[i + 1]->str, NULL) <= strtod(c->str, NULL) + 1e-12,
                          "%s %s above %s %s", name, r->element[i + 1]->str, counted, c->str);
        }
    }
    freeReplyObject(r);
}

START_TEST(first_grant_share_and_slice)
{
    char key[128];
    long long o[R_N];
    mkkey(key, sizeof(key), "first");

    /* Alone: 30 % asked, below the pool and half of it: granted. The slice
     * follows the share (20 * 0.3 = 6), filled with tokens from the full
     * bucket (above the reserve of 30 % of it), plus the one taken for the
     * waiting request (no more: the slice is full). */
    rclaim(key, "A", &warm, 1, 0, 300000, 150000, o);
    ck_assert_int_eq(o[S_SHARE], 300000);
    ck_assert_int_eq(o[R_MINE], 6);
    ck_assert_int_eq(o[R_GRANTED], 7);
    ck_assert_int_eq(o[R_REMAINING], 13);
    ck_assert_int_eq(o[R_HELD], 6);
    ck_assert_int_eq(o[S_HAD], 0);
    ck_assert_int_eq(hget_ll(key, "hn:A"), 6);
    ck_assert(fabs(field_of(key, "d", "A") - 150000) < 1e-6);
    assert_rate_invariant(key, &warm);
    /* Its local bucket ran dry: a request waits; the slice stays, the one
     * taken for it and one more for the bucket */
    rclaim(key, "A", &warm, 1, 0, 300000, 150000, o);
    ck_assert_int_eq(o[R_MINE], 6);
    ck_assert_int_eq(o[R_GRANTED], 2);
    ck_assert_int_eq(o[R_REMAINING], 11);

    /* A first share takes at most half of what is free: B asks for all. */
    rclaim(key, "B", &warm, 0, 0, 1000000, 150000, o);
    ck_assert_int_le(o[S_SHARE], 200000 + 1); /* (0.7 - 0.3) / 2 */
    ck_assert_int_ge(o[S_SHARE], 200000 - 1);
    assert_rate_invariant(key, &warm);

    /* A again: Redis had its lease (had = its slice). */
    rclaim(key, "A", &warm, 0, 0, 300000, 150000, o);
    ck_assert_int_eq(o[S_HAD], 6);
    ck_assert_int_eq(o[R_GRANTED], 0); /* no request waits: no token taken */
    ck_assert_int_eq(o[R_HOLDERS], 2);
}
END_TEST

/* Many agents asking for all of it: shares stay within the pool, and once
 * every one has renewed twice they are the demand-weighted split. */
START_TEST(pool_split_by_demand)
{
    char key[128];
    long long o[R_N];
    static const char *const ag[] = {"a", "b", "c", "d"};
    static const long long dem[] = {100000, 100000, 200000, 400000}; /* weights 1:1:2:4 */
    mkkey(key, sizeof(key), "split");
    for (int round = 0; round < 4; round++) {
        for (int i = 0; i < 4; i++) {
            rclaim(key, ag[i], &warm, 0, 0, 1000000, dem[i], o);
            ck_assert_msg(shares_ppm(key, &warm) <= POOL * 1e6 + 1, "round %d: P %.1f ppm", round,
                          shares_ppm(key, &warm));
            assert_rate_invariant(key, &warm);
        }
    }
    for (int i = 0; i < 4; i++) {
        double want = POOL * 1e6 * (double)dem[i] / 800000.0;
        double got = field_of(key, "qn", ag[i]) / (100.0 / 1e7) * 1e6;
        ck_assert_msg(fabs(got - want) < 2, "%s: share %.1f ppm, want %.1f", ag[i], got, want);
    }
}
END_TEST

/* A grant that shrinks stays counted at its old value until the caller's
 * next call (its agent may use the old one until the reply reaches it); a
 * share the caller cuts itself is free at once. */
START_TEST(shrink_counted_until_next_call)
{
    char key[128];
    long long o[R_N];
    mkkey(key, sizeof(key), "shrink");
    /* shares come back floored to whole ppm: 299999 for 0.3 */
    rclaim(key, "A", &warm, 0, 0, 300000, 300000, o); /* 0.3, slice 6 */
    ck_assert_int_ge(o[S_SHARE], 299999);
    ck_assert_int_eq(o[R_MINE], 6);
    rclaim(key, "B", &warm, 0, 0, 300000, 300000, o); /* a first share: (0.7-0.3)/2 */
    ck_assert_int_ge(o[S_SHARE], 199999);
    ck_assert_int_le(o[S_SHARE], 200000);
    rclaim(key, "B", &warm, 0, 0, 300000, 300000, o); /* now all it asks for */
    ck_assert_int_ge(o[S_SHARE], 299999);

    /* C's demand makes A's weighted share 0.7 * 3/9: A asks the same, gets
     * less; Redis still counts 0.3 for A until A's next call. */
    rclaim(key, "C", &warm, 0, 0, 300000, 300000, o);
    ck_assert_int_le(o[S_SHARE], 50000);                      /* half of the 0.1 left */
    ck_assert(fabs(field_of(key, "d", "C") - 300000) < 1e-6); /* its demand counts */
    rclaim(key, "A", &warm, 0, 0, 300000, 300000, o);
    long long a1 = o[S_SHARE];
    ck_assert_int_le(a1, 233334);
    ck_assert_int_ge(a1, 233332);
    ck_assert_int_eq(o[R_MINE], 5);                                     /* ceil(20 * 0.2333) */
    ck_assert(fabs(field_of(key, "q", "A") / 1e-5 * 1e6 - 300000) < 1); /* still 0.3 counted */
    ck_assert_int_eq(hget_ll(key, "h:A"), 6);                           /* and the slice */
    assert_rate_invariant(key, &warm);
    rclaim(key, "A", &warm, 0, 0, 300000, 300000, o); /* A's next call: down to the grant */
    ck_assert(field_of(key, "q", "A") / 1e-5 * 1e6 <= (double)a1 + 1);
    ck_assert_int_eq(hget_ll(key, "h:A"), 5);

    /* B cuts its own share to 10 %: counted at once. */
    rclaim(key, "B", &warm, 0, 0, 100000, 100000, o);
    ck_assert_int_le(o[S_SHARE], 100000);
    ck_assert(field_of(key, "q", "B") / 1e-5 * 1e6 <= 100000 + 1);
    assert_rate_invariant(key, &warm);
}
END_TEST

/* While rate leases hold P of the rate, the central bucket refills at r - P
 * only: 1 token/ms, a share of 50 % (slice 50), 0.5 tokens/ms refill into at
 * most 50. A refill at the full rate would exceed the upper bound below
 * whenever fewer than 100 ms pass; on a slower run both stop at the cap. */
START_TEST(central_refill_runs_at_r_minus_p)
{
    const struct rule fast = {1000, 1000, 100, 30000};
    char key[128];
    long long o[R_N], x[X_N];
    mkkey(key, sizeof(key), "central");
    rclaim(key, "A", &fast, 0, 0, 500000, 500000, o);
    rclaim(key, "A", &fast, 0, 0, 500000, 500000, o); /* a first grant takes half: renew */
    ck_assert_int_ge(o[S_SHARE], 499999);
    ck_assert_int_eq(o[R_MINE], 50);
    /* Drain t in one call, taking what a first call (cost 1000: never
     * taken) says is left. Calls one by one would never drain it where each
     * takes 2 ms or more (it refills 0.5 a ms); this way what refilled
     * between the two calls, or while this process paused after them, only
     * adds to the time r0 starts the bound from. */
    long long r0 = redis_now_us();
    exact(TB_EXACT, key, &fast, 1000, x);
    ck_assert_int_eq(x[X_ALLOWED], 0);
    ck_assert_int_ge(x[X_REMAINING], 1);
    exact(TB_EXACT, key, &fast, x[X_REMAINING], x);
    ck_assert_int_eq(x[X_ALLOWED], 1);
    sleep_ms(40);
    exact(TB_EXACT, key, &fast, 1000, x); /* cost 1000: never taken, reports remaining */
    long long r1 = redis_now_us();
    double ms = (double)(r1 - r0) / 1000;
    ck_assert_msg(x[X_REMAINING] <= 0.5 * ms + 1, "refilled %lld in %.1f ms: above r - P",
                  x[X_REMAINING], ms);
    ck_assert_msg(x[X_REMAINING] >= 0.5 * 30 - 1, "refilled only %lld in %.1f ms", x[X_REMAINING],
                  ms);
}
END_TEST

/* tb_return gives back the slice last granted less what was spent of it,
 * and the share to the central refill. */
START_TEST(return_gives_back_unspent_slice)
{
    char key[128];
    long long o[R_N];
    struct state st;
    mkkey(key, sizeof(key), "ret");
    rclaim(key, "A", &warm, 0, 0, 300000, 300000, o);
    ck_assert_int_eq(o[R_MINE], 6);
    ck_assert_int_eq(o[R_REMAINING], 14);
    /* 2 of the 6 spent: 4 go back */
    give_back(TB_RETURN, key, "A", &warm, 2, o);
    ck_assert_int_eq(o[R_REMAINING], 18);
    ck_assert_int_eq(o[R_HELD], 0);
    ck_assert(isnan(field_of(key, "q", "A")));
    ck_assert(isnan(field_of(key, "hn", "A")));
    ck_assert(isnan(field_of(key, "d", "A")));
    assert_tb_invariant(key, warm.burst, &st);
}
END_TEST

/* A token claim from an agent holding a rate lease ends its share (counted
 * until that agent's next call), and the lease is a token lease again. */
START_TEST(token_claim_ends_share)
{
    char key[128];
    long long o[R_N];
    mkkey(key, sizeof(key), "totoken");
    rclaim(key, "A", &warm, 0, 0, 300000, 300000, o);
    claim(TB_CLAIM, key, "A", &warm, 2, 6, 0, o); /* all 6 of the slice reported spent */
    ck_assert_int_eq(o[S_SHARE], 0);
    ck_assert_int_eq(o[R_MINE], 2);
    ck_assert(field_of(key, "q", "A") > 0); /* counted until the next call */
    claim(TB_CLAIM, key, "A", &warm, 0, 0, 0, o);
    ck_assert(isnan(field_of(key, "q", "A")));
    ck_assert_int_eq(hget_ll(key, "h:A"), 2);
    assert_rate_invariant(key, &warm);
}
END_TEST

/* An expired rate lease gives its share and slice back: the bucket refills
 * at the full rate again. */
START_TEST(expired_share_returns_to_central)
{
    const struct rule shortl = {1000, 1000, 100, 50};
    char key[128];
    long long o[R_N], x[X_N];
    mkkey(key, sizeof(key), "expire");
    rclaim(key, "A", &shortl, 0, 0, 800000, 800000, o);
    rclaim(key, "A", &shortl, 0, 0, 800000, 800000, o);
    ck_assert_int_gt(o[S_SHARE], 0);
    double t0 = mono_ms();
    while (!isnan(field_of(key, "q", "A")) && mono_ms() - t0 < 5000) {
        exact(TB_EXACT, key, &shortl, 1000, x); /* runs advance(): drops it once expired */
        sleep_ms(10);
    }
    ck_assert(isnan(field_of(key, "q", "A")));
    ck_assert_int_eq(hget_ll(key, "h:A"), -1);
}
END_TEST

START_TEST(random_sequence_keeps_invariants)
{
    const long long ttls[] = {5, 20, 1000};
    struct rule ru = {20, 20, 30, 0}; /* 1 token/ms, burst 30 */
    static const char *const agents[] = {"a0", "a1", "a2", "a3", "a4"};
    long long slice[5] = {0};
    char key[128];
    long long o[R_N], x[X_N];
    long long shares = 0, grants = 0;
    mkkey(key, sizeof(key), "rrandom");
    rng = 0x51ed270b27cfd4f1ULL;

    /* At least 2000 calls, then on until the sequence has granted shares
     * and tokens often enough to have tested something. How often a share
     * is granted depends on Redis TIME between the calls (the x of a
     * denial lasts a ttl of wall time: a slower machine sees fewer), so
     * the floor is reached by running longer, up to ten times as long,
     * never asserted after a fixed count. */
    int i;
    for (i = 0; i < 20000 && (i < 2000 || shares < 30 || grants < 100); i++) {
        int a = (int)rnd_below(5);
        ru.ttl_ms = ttls[rnd_below(3)];
        long long op = rnd_below(100);
        if (op < 45) { /* a rate lease's claim: waiters, a give-back now and then */
            long long ret = rnd_below(4) == 0 ? rnd_below(slice[a] + 1) : 0;
            rclaim(key, agents[a], &ru, rnd_below(3), ret, rnd_below(1000001), rnd_below(2000001),
                   o);
            slice[a] = o[R_MINE];
            shares += o[S_SHARE] > 0;
            grants += o[R_GRANTED];
        } else if (op < 60) { /* a token claim with a report */
            claim(TB_CLAIM, key, agents[a], &ru, rnd_below(5), rnd_below(slice[a] + 2),
                  rnd_below(2), o);
            slice[a] = o[R_MINE];
        } else if (op < 70) { /* give back */
            give_back(TB_RETURN, key, agents[a], &ru, rnd_below(slice[a] + 1), o);
            slice[a] = 0;
        } else { /* exact decisions */
            exact(TB_EXACT, key, &ru, 1 + rnd_below(3), x);
        }
        if (rnd_below(30) == 0)
            sleep_ms((double)rnd_below(6));
        assert_rate_invariant(key, &ru);
    }
    ck_assert_msg(shares >= 30 && grants >= 100,
                  "%d calls granted only %lld shares and %lld tokens: the share path untested", i,
                  shares, grants);
}
END_TEST

/* A request of a rate lease denied while the demands add up to the rate:
 * the key is at its limit, and no share is granted for a ttl (x). */
START_TEST(limit_reached_stops_shares)
{
    char key[128];
    long long o[R_N], x[X_N];
    mkkey(key, sizeof(key), "limit");
    rclaim(key, "A", &warm, 0, 0, 1000000, 1000000, o);
    ck_assert_int_gt(o[S_SHARE], 0);
    for (int i = 0; i < 40; i++) { /* drain t */
        exact(TB_EXACT, key, &warm, 1, x);
        if (!x[X_ALLOWED])
            break;
    }
    ck_assert_int_eq(x[X_ALLOWED], 0);
    ck_assert(isnan(hget_d(key, "x")));
    rclaim(key, "B", &warm, 1, 0, 1000000, 1000000, o); /* its waiter is denied */
    ck_assert_int_eq(o[R_GRANTED], 0);
    ck_assert(hget_d(key, "x") > 0);
    rclaim(key, "A", &warm, 0, 0, 1000000, 1000000, o); /* A's lease ends */
    ck_assert_int_eq(o[S_SHARE], 0);
    ck_assert_int_eq(o[R_MINE], 0);
    ck_assert_int_eq(o[R_LEASE], 0);
    assert_rate_invariant(key, &warm);
}
END_TEST

static Suite *rate_suite(void)
{
    Suite *s = suite_create("scripts_rate");
    TCase *tc = scripts_tcase("rate_lease");
    tcase_set_timeout(tc, 60);
    CHECK_ADD(tc, first_grant_share_and_slice, pool_split_by_demand, shrink_counted_until_next_call,
              central_refill_runs_at_r_minus_p, return_gives_back_unspent_slice,
              token_claim_ends_share, expired_share_returns_to_central, limit_reached_stops_shares,
              random_sequence_keeps_invariants);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return scripts_main(rate_suite());
}
