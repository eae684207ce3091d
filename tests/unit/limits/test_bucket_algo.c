/* SPDX-License-Identifier: Apache-2.0 */
/* test_bucket_algo.c - the two algorithms on one bucket: token bucket
 * (refill, drift, clock steps, requests that never fit, the bound over any
 * interval) and sliding window (weights, retry times, idle windows, huge
 * periods, the bound over any window). */
#include "limits/bucket.h"
#include "metrics/metrics.h"

#include <check.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bucket_fixture.h"
#include "check_util.h"

/* ---- token bucket ------------------------------------------------------- */

START_TEST(test_tb_ten_per_minute)
{
    /* The reference scenario: "10/1m burst 10", 14 requests at once. */
    struct bucket_params p = bt_params(TB, 10, MINUTE, 10);
    struct bucket b;
    struct bucket_result r;
    bucket_init(&b, &p, 0);
    for (int i = 0; i < 14; i++) {
        bucket_take(&b, &p, 0, 1, &r);
        if (i < 10) {
            ck_assert_int_eq(r.allowed, 1);
            ck_assert_uint_eq(r.remaining, 9 - i);
            ck_assert_uint_eq(r.retry_us, 0);
        } else {
            ck_assert_int_eq(r.allowed, 0);
            ck_assert_uint_eq(r.remaining, 0);
            ck_assert_uint_gt(r.retry_us, 0);
            ck_assert_uint_le(r.retry_us, 6 * SEC);
            ck_assert_uint_eq(r.reset_us, 60 * SEC);
        }
    }
    ck_assert_int_eq(bt_allowed_at(&b, &p, 6 * SEC - 1, 1), 0);
    bucket_take(&b, &p, 6 * SEC, 1, &r);
    ck_assert_int_eq(r.allowed, 1);
    ck_assert_uint_eq(r.remaining, 0);
    ck_assert_uint_eq(r.reset_us, 60 * SEC);
    bucket_take(&b, &p, 6 * SEC, 1, &r);
    ck_assert_int_eq(r.allowed, 0);
    ck_assert_uint_eq(r.retry_us, 6 * SEC);
}
END_TEST

/* Drain at t0, then check the first denial and that exactly retry_us later
 * (and not one microsecond earlier) one more request of n passes. */
struct tb_case {
    uint64_t limit, period_us, burst, n;
    uint64_t allowed;  /* admitted at t0 */
    uint64_t retry_us; /* of the first denial */
    uint64_t reset_us; /* of the first denial */
};

static const struct tb_case tb_cases[] = {
    {10, MINUTE, 10, 1, 10, 6 * SEC, 60 * SEC},  /* 10/1m */
    {10, MINUTE, 20, 1, 20, 6 * SEC, 120 * SEC}, /* burst > N */
    {10, MINUTE, 2, 1, 2, 6 * SEC, 12 * SEC},    /* burst < N */
    {10000, SEC, 10000, 1, 10000, 100, SEC},     /* high rate */
    {1000000, SEC, 5, 1, 5, 1, 5},               /* one token per us */
    {10, HOUR, 10, 1, 10, 360 * SEC, HOUR},      /* 10/1h */
    {1, DAY, 1, 1, 1, DAY, DAY},                 /* 1/1d */
    {10, MINUTE, 10, 3, 3, 12 * SEC, 54 * SEC},  /* n > 1, 1 token left */
    {7, SEC, 7, 1, 7, 142858, SEC},              /* 1e6/7 us per token */
    {3, 10 * SEC, 5, 2, 2, 3333334, 13333334},   /* uneven everything */
    {100, 1000, 1, 1, 1, 10, 10},                /* 100 per ms */
};

START_TEST(test_tb_cases)
{
    const struct tb_case *c = &tb_cases[_i];
    struct bucket_params p = bt_params(TB, c->limit, c->period_us, c->burst);
    const uint64_t t0 = 123456789;
    struct bucket b;
    struct bucket_result r;

    bucket_init(&b, &p, t0);
    ck_assert(bucket_idle(&b, &p, t0));
    for (uint64_t i = 0; i < c->allowed; i++) {
        bucket_take(&b, &p, t0, c->n, &r);
        ck_assert_int_eq(r.allowed, 1);
        ck_assert_uint_eq(r.remaining, c->burst - c->n * (i + 1));
        /* until the (i + 1) * n tokens taken so far are back, rounded up */
        uint64_t used = c->n * (i + 1);
        ck_assert_uint_eq(r.reset_us, (used * c->period_us + c->limit - 1) / c->limit);
    }
    ck_assert(!bucket_idle(&b, &p, t0));
    for (int i = 0; i < 4; i++) {
        bucket_take(&b, &p, t0, c->n, &r);
        ck_assert_int_eq(r.allowed, 0);
        ck_assert_uint_eq(r.remaining, c->burst - c->n * c->allowed);
        ck_assert_uint_eq(r.retry_us, c->retry_us);
        ck_assert_uint_eq(r.reset_us, c->reset_us);
    }
    ck_assert_int_eq(bt_allowed_at(&b, &p, t0 + c->retry_us - 1, c->n), 0);
    ck_assert_int_eq(bt_allowed_at(&b, &p, t0 + c->retry_us, c->n), 1);
    ck_assert(!bucket_idle(&b, &p, t0 + c->reset_us - 1));
    ck_assert(bucket_idle(&b, &p, t0 + c->reset_us));
    /* Far in the future the bucket is full again, not fuller. */
    bucket_take(&b, &p, t0 + 1000 * c->reset_us + 1, 1, &r);
    ck_assert_int_eq(r.allowed, 1);
    ck_assert_uint_eq(r.remaining, c->burst - 1);
}
END_TEST

START_TEST(test_tb_partial_refill)
{
    struct bucket_params p = bt_params(TB, 10, MINUTE, 10);
    struct bucket b;
    struct bucket_result r;
    bucket_init(&b, &p, 0);
    for (int i = 0; i < 10; i++)
        bucket_take(&b, &p, 0, 1, &r);
    /* Half a period refills half the bucket. */
    for (int i = 0; i < 6; i++) {
        bucket_take(&b, &p, 30 * SEC, 1, &r);
        if (i < 5) {
            ck_assert_int_eq(r.allowed, 1);
            ck_assert_uint_eq(r.remaining, 4 - i);
        } else {
            ck_assert_int_eq(r.allowed, 0);
            ck_assert_uint_eq(r.retry_us, 6 * SEC);
            ck_assert_uint_eq(r.reset_us, 60 * SEC);
        }
    }
    /* 3 s later half a token: not enough, and retry says the other 3 s. */
    bucket_take(&b, &p, 33 * SEC, 1, &r);
    ck_assert_int_eq(r.allowed, 0);
    ck_assert_uint_eq(r.retry_us, 3 * SEC);
    ck_assert_uint_eq(r.reset_us, 57 * SEC);
    bucket_take(&b, &p, 36 * SEC, 1, &r);
    ck_assert_int_eq(r.allowed, 1);
}
END_TEST

START_TEST(test_tb_no_drift)
{
    /* One request every 6 s on an empty 10/1m bucket, probed 1 us early each
     * time: the probe refills 0.9999998 tokens and the next microsecond must
     * complete exactly one token, for thousands of rounds. */
    struct bucket_params p = bt_params(TB, 10, MINUTE, 10);
    struct bucket b;
    struct bucket_result r;
    bucket_init(&b, &p, 0);
    for (int i = 0; i < 10; i++)
        bucket_take(&b, &p, 0, 1, &r);
    for (uint64_t k = 1; k <= 5000; k++) {
        bucket_take(&b, &p, k * 6 * SEC - 1, 1, &r);
        ck_assert_int_eq(r.allowed, 0);
        ck_assert_uint_eq(r.retry_us, 1);
        bucket_take(&b, &p, k * 6 * SEC, 1, &r);
        ck_assert_int_eq(r.allowed, 1);
        ck_assert_uint_eq(r.remaining, 0);
        ck_assert_uint_eq(r.reset_us, 60 * SEC);
    }
}
END_TEST

START_TEST(test_tb_clock_backward)
{
    struct bucket_params p = bt_params(TB, 10, MINUTE, 10);
    struct bucket b;
    struct bucket_result r;
    bucket_init(&b, &p, 100 * SEC);
    for (int i = 0; i < 10; i++)
        bucket_take(&b, &p, 100 * SEC, 1, &r);
    bucket_take(&b, &p, 50 * SEC, 1, &r); /* earlier: no refill, no wrap */
    ck_assert_int_eq(r.allowed, 0);
    ck_assert_uint_eq(r.retry_us, 6 * SEC);
    ck_assert_int_eq(bt_allowed_at(&b, &p, 106 * SEC, 1), 1);
}
END_TEST

START_TEST(test_tb_never_fits)
{
    /* n above the burst, or a rate of 0: denied, with a finite hint > 0. */
    struct bucket_params p = bt_params(TB, 10, MINUTE, 2);
    struct bucket b;
    struct bucket_result r;
    bucket_init(&b, &p, 0);
    bucket_take(&b, &p, 0, 3, &r);
    ck_assert_int_eq(r.allowed, 0);
    ck_assert_uint_eq(r.remaining, 2);
    ck_assert_uint_gt(r.retry_us, 0);
    ck_assert_uint_eq(r.reset_us, 0);

    p = bt_params(TB, 0, MINUTE, 1);
    bucket_init(&b, &p, 0);
    bucket_take(&b, &p, 0, 1, &r);
    ck_assert_int_eq(r.allowed, 1);
    bucket_take(&b, &p, DAY, 1, &r);
    ck_assert_int_eq(r.allowed, 0);
    ck_assert_uint_gt(r.retry_us, 0);
    ck_assert_uint_lt(r.reset_us, UINT64_MAX / 2);
}
END_TEST

/* A request's cost (issue 28): burst 10, costs 4, 4, 4, 2 -> allowed,
 * allowed, denied (2 left, retry when 4 exist), allowed; a cost over the
 * burst (a window's N) is denied and takes nothing; cost 0 passes where 1
 * would and takes nothing. */
START_TEST(test_cost)
{
    static const uint64_t costs[] = {4, 4, 4, 2};
    static const int allowed[] = {1, 1, 0, 1};
    static const uint64_t left[] = {6, 2, 2, 0};

    for (int algo = TB; algo <= SW; algo++) {
        struct bucket_params p = bt_params(algo, 10, MINUTE, 10);
        struct bucket b;
        struct bucket_result r;

        bucket_init(&b, &p, 0);
        bucket_take(&b, &p, 0, 11, &r);
        ck_assert_int_eq(r.allowed, 0);
        ck_assert_uint_eq(r.remaining, 10); /* untouched */
        ck_assert_uint_eq(r.retry_us, MINUTE);
        for (int i = 0; i < 4; i++) {
            bucket_take(&b, &p, 0, costs[i], &r);
            ck_assert_msg(r.allowed == allowed[i], "algo %d, request %d", algo, i);
            ck_assert_uint_eq(r.remaining, left[i]);
            if (algo == TB && i == 2)
                ck_assert_uint_eq(r.retry_us, 12 * SEC); /* 2 more tokens at 6 s each */
        }
        bucket_take(&b, &p, 0, 0, &r); /* a check: empty, so denied */
        ck_assert_int_eq(r.allowed, 0);
        ck_assert_uint_gt(r.retry_us, 0);
        if (algo == TB) {
            ck_assert_uint_eq(r.retry_us, 6 * SEC); /* until one token */
            bucket_take(&b, &p, 6 * SEC, 0, &r);
            ck_assert_int_eq(r.allowed, 1);
            ck_assert_uint_eq(r.remaining, 1); /* nothing taken */
            bucket_take(&b, &p, 6 * SEC, 1, &r);
            ck_assert_int_eq(r.allowed, 1);
            ck_assert_uint_eq(r.remaining, 0);
        }
    }
}
END_TEST

/* block_for (issue 28): 60/1m, burst 1, block 3 s: allowed, denied (the
 * block starts: retry and reset 3 s), still denied 1.5 s on though a token
 * is back, allowed at 3 s and not a microsecond before; a sliding window
 * the same once its windows emptied. A cost that never fits starts none;
 * a peek sees the block and bucket_idle keeps the bucket. */
START_TEST(test_block_for)
{
    for (int algo = TB; algo <= SW; algo++) {
        struct bucket_params p =
            algo == TB ? bt_params(TB, 60, MINUTE, 1) : bt_params(SW, 1, SEC / 2, 1);
        struct bucket b;
        struct bucket_result r;
        struct bucket_state st;

        p.block_us = 3 * SEC;
        bucket_init(&b, &p, 0);
        bucket_take(&b, &p, 0, 2, &r); /* over the capacity: denied, no block */
        ck_assert_int_eq(r.allowed, 0);
        ck_assert_uint_eq(b.blocked_until_us, 0);
        bucket_take(&b, &p, 0, 1, &r);
        ck_assert_int_eq(r.allowed, 1);
        bucket_take(&b, &p, 1, 1, &r);
        ck_assert_int_eq(r.allowed, 0);
        ck_assert_uint_eq(r.retry_us, 3 * SEC);
        ck_assert_uint_ge(r.reset_us, 3 * SEC);
        bucket_take(&b, &p, 1 * SEC + SEC / 2, 1, &r);
        ck_assert_msg(r.allowed == 0, "algo %d: allowed 1.5 s into the block", algo);
        ck_assert_uint_eq(r.retry_us, 3 * SEC + 1 - (SEC + SEC / 2));
        ck_assert_uint_eq(r.reset_us, 3 * SEC + 1 - (SEC + SEC / 2)); /* the block's rest */
        ck_assert_uint_eq(r.remaining, 0);
        ck_assert(!bucket_idle(&b, &p, 2 * SEC));
        bucket_peek(&b, &p, 2 * SEC, &st);
        ck_assert(st.blocked);
        ck_assert_uint_eq(st.blocked_left_us, SEC + 1);
        ck_assert_uint_eq(st.retry_us, SEC + 1);
        bucket_take(&b, &p, 3 * SEC, 1, &r); /* 1 us before the end */
        ck_assert_int_eq(r.allowed, 0);
        ck_assert_uint_eq(r.retry_us, 1);
        bucket_take(&b, &p, 3 * SEC + 1, 1, &r);
        ck_assert_msg(r.allowed == 1, "algo %d: still denied after the block", algo);
        /* the rule without block_for: the same bucket decides as usual */
        p.block_us = 0;
        bucket_take(&b, &p, 3 * SEC + 2, 1, &r);
        ck_assert_int_eq(r.allowed, 0);
        ck_assert_uint_lt(r.retry_us, 3 * SEC);
    }
}
END_TEST

/* Refunds ([agent] charge = all-or-nothing): a token bucket gets the cost
 * back up to its burst, never above where it would be without the take; a
 * sliding window only within the window of the take. */
START_TEST(test_refund)
{
    struct bucket_params p = bt_params(TB, 10, MINUTE, 10);
    struct bucket b;
    struct bucket_result r;

    bucket_init(&b, &p, 0);
    bucket_take(&b, &p, 0, 4, &r);
    ck_assert_uint_eq(r.remaining, 6);
    ck_assert_uint_eq(bucket_refund(&b, &p, 0, 0, 4), 4);
    bucket_take(&b, &p, 0, 0, &r);
    ck_assert_uint_eq(r.remaining, 10);                   /* as if never taken */
    ck_assert_uint_eq(bucket_refund(&b, &p, 0, 0, 3), 0); /* full: nothing more */
    bucket_take(&b, &p, 0, 3, &r);
    /* 12 s later two tokens refilled (9): a refund of 3 tops up to the burst only */
    ck_assert_uint_eq(bucket_refund(&b, &p, 0, 12 * SEC, 3), 1);
    bucket_take(&b, &p, 12 * SEC, 0, &r);
    ck_assert_uint_eq(r.remaining, 10);
    bucket_take(&b, &p, 12 * SEC, 5, &r);
    ck_assert_uint_eq(bucket_refund(&b, &p, 12 * SEC, 12 * SEC, 0), 0); /* a check took nothing */

    p = bt_params(SW, 10, MINUTE, 10);
    bucket_init(&b, &p, 0);
    bucket_take(&b, &p, SEC, 4, &r);
    ck_assert_uint_eq(r.remaining, 6);
    ck_assert_uint_eq(bucket_refund(&b, &p, SEC, 30 * SEC, 4), 4); /* same window */
    bucket_take(&b, &p, 30 * SEC, 0, &r);
    ck_assert_uint_eq(r.remaining, 10);
    bucket_take(&b, &p, 30 * SEC, 3, &r);
    ck_assert_uint_eq(bucket_refund(&b, &p, 30 * SEC, 30 * SEC, 5), 3); /* no more than counted */
    bucket_take(&b, &p, 50 * SEC, 6, &r);
    /* the window rolled since the take: nothing back */
    ck_assert_uint_eq(bucket_refund(&b, &p, 50 * SEC, MINUTE + SEC, 6), 0);
    bucket_take(&b, &p, MINUTE + SEC, 0, &r);
    ck_assert_uint_lt(r.remaining, 10);
}
END_TEST

/* No interval [a, b] may admit more than burst + r * (b - a) units. The
 * tightest intervals start and end on admissions, so checking every pair of
 * admissions checks every interval. */
struct tb_prop_case {
    uint64_t limit, period_us, burst, max_n;
};

static const struct tb_prop_case tb_prop_cases[] = {
    {10, MINUTE, 10, 1}, {10, MINUTE, 3, 1},     {100, SEC, 50, 3},
    {5, SEC, 20, 4},     {1000, 10 * SEC, 1, 1}, {7, 3 * SEC, 7, 2},
};

#define PROP_ARRIVALS 3000

START_TEST(test_tb_interval_bound)
{
    const struct tb_prop_case *c = &tb_prop_cases[_i];
    struct bucket_params p = bt_params(TB, c->limit, c->period_us, c->burst);
    static uint64_t at[PROP_ARRIVALS];
    static uint64_t units[PROP_ARRIVALS + 1]; /* prefix sums of admitted units */
    uint64_t seed = 0x9e3779b97f4a7c15ULL ^ (uint64_t)_i;
    uint64_t gap = 2 * c->period_us / c->limit; /* mean arrival at the rate */
    uint64_t t = 1000, k = 0;
    struct bucket b;
    struct bucket_result r;

    bucket_init(&b, &p, t);
    units[0] = 0;
    for (int i = 0; i < PROP_ARRIVALS; i++) {
        /* Bursts of simultaneous arrivals and long pauses both occur. */
        uint64_t x = bt_rng_next(&seed);
        if (x % 4 != 0)
            t += bt_rng_next(&seed) % (gap + 1);
        uint64_t n = 1 + bt_rng_next(&seed) % c->max_n;
        bucket_take(&b, &p, t, n, &r);
        if (r.allowed) {
            at[k] = t;
            units[k + 1] = units[k] + n;
            k++;
        } else {
            ck_assert_uint_gt(r.retry_us, 0);
        }
    }
    ck_assert_uint_gt(k, PROP_ARRIVALS / 10);
    /* Asserting per pair would cost a Check round trip each: find the worst
     * pair and assert once. */
    double worst = -1e300;
    uint64_t wi = 0, wj = 0;
    for (uint64_t i = 0; i < k; i++) {
        for (uint64_t j = i; j < k; j++) {
            double bound = (double)c->burst +
                           (double)c->limit * (double)(at[j] - at[i]) / (double)c->period_us;
            double excess = (double)(units[j + 1] - units[i]) - bound;
            if (excess > worst) {
                worst = excess;
                wi = i;
                wj = j;
            }
        }
    }
    ck_assert_msg(worst <= 1e-6, "%llu units in [%llu, %llu], %f over the bound",
                  (unsigned long long)(units[wj + 1] - units[wi]), (unsigned long long)at[wi],
                  (unsigned long long)at[wj], worst);
}
END_TEST

/* ---- sliding window ----------------------------------------------------- */

START_TEST(test_sw_basic)
{
    struct bucket_params p = bt_params(SW, 10, MINUTE, 999 /* unused */);
    struct bucket b;
    struct bucket_result r;
    uint64_t t0 = 10 * MINUTE + 15 * SEC; /* 15 s into a window */

    bucket_init(&b, &p, t0);
    ck_assert(bucket_idle(&b, &p, t0));
    for (int i = 0; i < 11; i++) {
        bucket_take(&b, &p, t0, 1, &r);
        if (i < 10) {
            ck_assert_int_eq(r.allowed, 1);
            ck_assert_uint_eq(r.remaining, 9 - i);
        } else {
            ck_assert_int_eq(r.allowed, 0);
            ck_assert_uint_eq(r.remaining, 0);
            /* The next window starts in 45 s with an estimate of 10 that
             * loses 1 per 6 s. */
            ck_assert_uint_eq(r.retry_us, 45 * SEC + 6 * SEC);
        }
        /* Empty once the next window is over too. */
        ck_assert_uint_eq(r.reset_us, 45 * SEC + MINUTE);
    }
    /* The rest of this window admits nothing more. */
    ck_assert_int_eq(bt_allowed_at(&b, &p, 11 * MINUTE - 1, 1), 0);
}
END_TEST

START_TEST(test_sw_weighted)
{
    struct bucket_params p = bt_params(SW, 10, MINUTE, 10);
    struct bucket b;
    struct bucket_result r;
    int n;

    bucket_init(&b, &p, 0);
    for (int i = 0; i < 10; i++)
        bucket_take(&b, &p, 0, 1, &r);
    /* Half into the next window the previous 10 weigh 5. */
    for (n = 0; n < 20; n++) {
        bucket_take(&b, &p, MINUTE + 30 * SEC, 1, &r);
        if (!r.allowed)
            break;
    }
    ck_assert_int_eq(n, 5);
    ck_assert_uint_eq(r.reset_us, 30 * SEC + MINUTE);
    /* Three quarters in: 2.5 + 5 = 7.5, room for two (remaining 1 then 0). */
    bucket_take(&b, &p, MINUTE + 45 * SEC, 1, &r);
    ck_assert_int_eq(r.allowed, 1);
    ck_assert_uint_eq(r.remaining, 1);
    bucket_take(&b, &p, MINUTE + 45 * SEC, 1, &r);
    ck_assert_int_eq(r.allowed, 1);
    ck_assert_uint_eq(r.remaining, 0);
    bucket_take(&b, &p, MINUTE + 45 * SEC, 1, &r);
    ck_assert_int_eq(r.allowed, 0);
    /* The window after: previous count 7, fading. */
    bucket_take(&b, &p, 2 * MINUTE, 1, &r);
    ck_assert_int_eq(r.allowed, 1);
    ck_assert_uint_eq(r.remaining, 2);
    /* Only previous-window weight left: empty at the end of this window. */
    bucket_init(&b, &p, 0);
    bucket_take(&b, &p, 0, 1, &r);
    bucket_take(&b, &p, MINUTE + 20 * SEC, 11, &r); /* n > limit: cannot fit */
    ck_assert_int_eq(r.allowed, 0);
    ck_assert_uint_gt(r.retry_us, 0);
    ck_assert_uint_eq(r.reset_us, 40 * SEC);
}
END_TEST

/* State built by fills, then a denied probe: the retry hint must be exact
 * (passes at retry_us, not at retry_us - 1 nor - 1000). */
struct sw_fill {
    uint64_t t, count;
};

struct sw_case {
    uint64_t limit, period_us, n;
    struct sw_fill fills[4];
    uint64_t probe;
    uint64_t retry_us; /* expected, 0 = only check that it is exact */
};

static const struct sw_case sw_cases[] = {
    /* cur = 10, same window: next window plus 6 s */
    {10, MINUTE, 1, {{0, 10}}, 30 * SEC, 36 * SEC},
    /* prev 10 fading at 70 s, cur 1: fits at 12 s into the window */
    {10, MINUTE, 1, {{0, 10}, {70 * SEC, 1}}, 70 * SEC, 2 * SEC},
    /* prev 10, cur 5 at 90 s: fits at 36 s into the window */
    {10, MINUTE, 1, {{0, 10}, {90 * SEC, 5}}, 90 * SEC, 6 * SEC},
    /* prev 10, cur 9 at 119 s: only at the next window start */
    {10, MINUTE, 1, {{0, 10}, {119 * SEC, 9}}, 119 * SEC, SEC},
    /* 1/1d: a single request blocks until the end of the next window */
    {1, DAY, 1, {{0, 1}}, 5 * SEC, 2 * DAY - 5 * SEC},
    /* uneven numbers */
    {7, 3 * SEC, 1, {{1, 7}, {5 * SEC, 4}}, 5 * SEC + 7, 0},
    {100, SEC, 1, {{SEC / 2, 100}, {SEC + 333333, 33}}, SEC + 333333, 0},
    {100, SEC, 3, {{SEC / 2, 60}, {SEC + 100000, 44}}, SEC + 100000, 16667},
    {1000, HOUR, 1, {{0, 1000}, {HOUR + HOUR / 2, 500}}, HOUR + HOUR / 2, 3600 * 1000},
    /* n > 1, only the current window: 1 s to the next, then 2.5 s */
    {5, 10 * SEC, 2, {{9 * SEC, 4}}, 9 * SEC, 3500 * 1000},
};

START_TEST(test_sw_retry)
{
    const struct sw_case *c = &sw_cases[_i];
    struct bucket_params p = bt_params(SW, c->limit, c->period_us, c->limit);
    struct bucket b;
    struct bucket_result r;

    bucket_init(&b, &p, c->fills[0].t);
    for (int i = 0; i < 4 && c->fills[i].count; i++) {
        for (uint64_t j = 0; j < c->fills[i].count; j++) {
            bucket_take(&b, &p, c->fills[i].t, 1, &r);
            ck_assert_int_eq(r.allowed, 1);
        }
    }
    bucket_take(&b, &p, c->probe, c->n, &r);
    ck_assert_int_eq(r.allowed, 0);
    ck_assert_uint_gt(r.retry_us, 0);
    if (c->retry_us)
        ck_assert_uint_eq(r.retry_us, c->retry_us);
    ck_assert_int_eq(bt_allowed_at(&b, &p, c->probe + r.retry_us, c->n), 1);
    ck_assert_int_eq(bt_allowed_at(&b, &p, c->probe + r.retry_us - 1, c->n), 0);
    if (r.retry_us > 1000)
        ck_assert_int_eq(bt_allowed_at(&b, &p, c->probe + r.retry_us - 1000, c->n), 0);
    /* Empty at reset: a full window's worth passes again. */
    ck_assert(bucket_idle(&b, &p, c->probe + r.reset_us) ||
              bt_allowed_at(&b, &p, c->probe + r.reset_us, c->limit));
}
END_TEST

START_TEST(test_sw_idle)
{
    struct bucket_params p = bt_params(SW, 10, MINUTE, 10);
    struct bucket b;
    struct bucket_result r;
    bucket_init(&b, &p, 5 * MINUTE + 1);
    bucket_take(&b, &p, 5 * MINUTE + 1, 1, &r);
    ck_assert(!bucket_idle(&b, &p, 5 * MINUTE + 1));
    ck_assert(!bucket_idle(&b, &p, 6 * MINUTE + 30 * SEC));
    ck_assert(!bucket_idle(&b, &p, 7 * MINUTE - 1));
    ck_assert(bucket_idle(&b, &p, 7 * MINUTE));
    ck_assert_uint_eq(r.reset_us, 2 * MINUTE - 1);
    /* Two windows later the state is gone: a full window passes again. */
    for (int i = 0; i < 10; i++) {
        bucket_take(&b, &p, 7 * MINUTE, 1, &r);
        ck_assert_int_eq(r.allowed, 1);
    }
}
END_TEST

/* Periods past BUCKET_MAX_PERIOD_US count as it: 2 x period (the window
 * pair) stays in range and the bucket still limits. */
START_TEST(test_huge_period)
{
    const uint64_t periods[] = {BUCKET_MAX_PERIOD_US, BUCKET_MAX_PERIOD_US + 1, UINT64_MAX / 2 + 1,
                                UINT64_MAX};
    for (size_t i = 0; i < sizeof(periods) / sizeof(periods[0]); i++) {
        for (int algo = TB; algo <= SW; algo++) {
            struct bucket_params p = bt_params(algo, 1, periods[i], 1);
            struct bucket b;
            struct bucket_result r;
            uint64_t now = 5 * DAY;

            bucket_init(&b, &p, now);
            bucket_take(&b, &p, now, 1, &r);
            ck_assert_int_eq(r.allowed, 1);
            ck_assert(!bucket_idle(&b, &p, now + DAY));
            bucket_take(&b, &p, now + DAY, 1, &r);
            ck_assert_msg(!r.allowed, "period %llu, algorithm %d: not limited",
                          (unsigned long long)periods[i], algo);
            ck_assert_uint_ge(r.retry_us, BUCKET_MAX_PERIOD_US - 2 * DAY);
            ck_assert_uint_le(r.retry_us, 2 * BUCKET_MAX_PERIOD_US);
            ck_assert_uint_le(r.reset_us, 2 * BUCKET_MAX_PERIOD_US);
            ck_assert_uint_ge(r.reset_us, BUCKET_MAX_PERIOD_US - 2 * DAY);
        }
    }
}
END_TEST

START_TEST(test_sw_window_bound)
{
    /* Randomised: no aligned window ever admits more than the limit, and no
     * two consecutive ones more than twice of it. */
    struct bucket_params p = bt_params(SW, 20, SEC, 20);
    struct bucket b;
    struct bucket_result r;
    uint64_t seed = 42, t = 0;
    uint64_t per_window[64] = {0};

    bucket_init(&b, &p, 0);
    while (t < 60 * SEC) {
        bucket_take(&b, &p, t, 1, &r);
        if (r.allowed)
            per_window[t / SEC]++;
        else
            ck_assert_uint_gt(r.retry_us, 0);
        t += bt_rng_next(&seed) % 40000;
    }
    for (int w = 0; w < 60; w++) {
        ck_assert_uint_le(per_window[w], 20);
        ck_assert_uint_ge(per_window[w], 5); /* and it does admit */
    }
}
END_TEST

static Suite *bucket_algo_suite(void)
{
    Suite *s = suite_create("bucket_algo");

    TCase *tc = tcase_create("token_bucket");
    tcase_add_test(tc, test_tb_ten_per_minute);
    tcase_add_loop_test(tc, test_tb_cases, 0, sizeof(tb_cases) / sizeof(tb_cases[0]));
    CHECK_ADD(tc, test_tb_partial_refill, test_tb_no_drift, test_tb_clock_backward,
              test_tb_never_fits, test_cost, test_block_for, test_refund);
    tcase_add_loop_test(tc, test_tb_interval_bound, 0,
                        sizeof(tb_prop_cases) / sizeof(tb_prop_cases[0]));
    tcase_set_timeout(tc, 60);
    suite_add_tcase(s, tc);

    tc = tcase_create("sliding_window");
    CHECK_ADD(tc, test_sw_basic, test_sw_weighted);
    tcase_add_loop_test(tc, test_sw_retry, 0, sizeof(sw_cases) / sizeof(sw_cases[0]));
    CHECK_ADD(tc, test_sw_idle, test_sw_window_bound, test_huge_period);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return check_run(bucket_algo_suite());
}
