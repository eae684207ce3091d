/* test_bucket.c - token bucket, sliding window and bucket table. */
#include "bucket.h"
#include "metrics/metrics.h"

#include <check.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SEC 1000000ULL
#define MINUTE (60 * SEC)
#define HOUR (60 * MINUTE)
#define DAY (24 * HOUR)

#define TB 0 /* enum cfg_algorithm */
#define SW 1

static struct bucket_params params(int algorithm, uint64_t limit, uint64_t period_us,
                                   uint64_t burst)
{
    struct bucket_params p = {algorithm, limit, period_us, burst};
    return p;
}

/* Deterministic xorshift64* so the randomised tests replay exactly. */
static uint64_t rng_next(uint64_t *s)
{
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return *s * 0x2545f4914f6cdd1dULL;
}

/* Take on a copy, so a probe does not disturb the state it probes. */
static int allowed_at(const struct bucket *b, const struct bucket_params *p, uint64_t now,
                      uint64_t n)
{
    struct bucket c = *b;
    struct bucket_result r;
    bucket_take(&c, p, now, n, &r);
    return r.allowed;
}

/* ---- token bucket ------------------------------------------------------- */

START_TEST(test_tb_ten_per_minute)
{
    /* The reference scenario: "10/1m burst 10", 14 requests at once. */
    struct bucket_params p = params(TB, 10, MINUTE, 10);
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
    ck_assert_int_eq(allowed_at(&b, &p, 6 * SEC - 1, 1), 0);
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
    {10, MINUTE, 10, 1, 10, 6 * SEC, 60 * SEC},            /* 10/1m */
    {10, MINUTE, 20, 1, 20, 6 * SEC, 120 * SEC},           /* burst > N */
    {10, MINUTE, 2, 1, 2, 6 * SEC, 12 * SEC},              /* burst < N */
    {10000, SEC, 10000, 1, 10000, 100, SEC},            /* high rate */
    {1000000, SEC, 5, 1, 5, 1, 5},                      /* one token per us */
    {10, HOUR, 10, 1, 10, 360 * SEC, HOUR},             /* 10/1h */
    {1, DAY, 1, 1, 1, DAY, DAY},                        /* 1/1d */
    {10, MINUTE, 10, 3, 3, 12 * SEC, 54 * SEC},            /* n > 1, 1 token left */
    {7, SEC, 7, 1, 7, 142858, SEC},                     /* 1e6/7 us per token */
    {3, 10 * SEC, 5, 2, 2, 3333334, 13333334},          /* uneven everything */
    {100, 1000, 1, 1, 1, 10, 10},                       /* 100 per ms */
};

START_TEST(test_tb_cases)
{
    const struct tb_case *c = &tb_cases[_i];
    struct bucket_params p = params(TB, c->limit, c->period_us, c->burst);
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
    ck_assert_int_eq(allowed_at(&b, &p, t0 + c->retry_us - 1, c->n), 0);
    ck_assert_int_eq(allowed_at(&b, &p, t0 + c->retry_us, c->n), 1);
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
    struct bucket_params p = params(TB, 10, MINUTE, 10);
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
    struct bucket_params p = params(TB, 10, MINUTE, 10);
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
    struct bucket_params p = params(TB, 10, MINUTE, 10);
    struct bucket b;
    struct bucket_result r;
    bucket_init(&b, &p, 100 * SEC);
    for (int i = 0; i < 10; i++)
        bucket_take(&b, &p, 100 * SEC, 1, &r);
    bucket_take(&b, &p, 50 * SEC, 1, &r); /* earlier: no refill, no wrap */
    ck_assert_int_eq(r.allowed, 0);
    ck_assert_uint_eq(r.retry_us, 6 * SEC);
    ck_assert_int_eq(allowed_at(&b, &p, 106 * SEC, 1), 1);
}
END_TEST

START_TEST(test_tb_never_fits)
{
    /* n above the burst, or a rate of 0: denied, with a finite hint > 0. */
    struct bucket_params p = params(TB, 10, MINUTE, 2);
    struct bucket b;
    struct bucket_result r;
    bucket_init(&b, &p, 0);
    bucket_take(&b, &p, 0, 3, &r);
    ck_assert_int_eq(r.allowed, 0);
    ck_assert_uint_eq(r.remaining, 2);
    ck_assert_uint_gt(r.retry_us, 0);
    ck_assert_uint_eq(r.reset_us, 0);

    p = params(TB, 0, MINUTE, 1);
    bucket_init(&b, &p, 0);
    bucket_take(&b, &p, 0, 1, &r);
    ck_assert_int_eq(r.allowed, 1);
    bucket_take(&b, &p, DAY, 1, &r);
    ck_assert_int_eq(r.allowed, 0);
    ck_assert_uint_gt(r.retry_us, 0);
    ck_assert_uint_lt(r.reset_us, UINT64_MAX / 2);
}
END_TEST

/* No interval [a, b] may admit more than burst + r * (b - a) units. The
 * tightest intervals start and end on admissions, so checking every pair of
 * admissions checks every interval. */
struct tb_prop_case {
    uint64_t limit, period_us, burst, max_n;
};

static const struct tb_prop_case tb_prop_cases[] = {
    {10, MINUTE, 10, 1},   {10, MINUTE, 3, 1},   {100, SEC, 50, 3},
    {5, SEC, 20, 4},    {1000, 10 * SEC, 1, 1}, {7, 3 * SEC, 7, 2},
};

#define PROP_ARRIVALS 3000

START_TEST(test_tb_interval_bound)
{
    const struct tb_prop_case *c = &tb_prop_cases[_i];
    struct bucket_params p = params(TB, c->limit, c->period_us, c->burst);
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
        uint64_t x = rng_next(&seed);
        if (x % 4 != 0)
            t += rng_next(&seed) % (gap + 1);
        uint64_t n = 1 + rng_next(&seed) % c->max_n;
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
    struct bucket_params p = params(SW, 10, MINUTE, 999 /* unused */);
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
    ck_assert_int_eq(allowed_at(&b, &p, 11 * MINUTE - 1, 1), 0);
}
END_TEST

START_TEST(test_sw_weighted)
{
    struct bucket_params p = params(SW, 10, MINUTE, 10);
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
    struct bucket_params p = params(SW, c->limit, c->period_us, c->limit);
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
    ck_assert_int_eq(allowed_at(&b, &p, c->probe + r.retry_us, c->n), 1);
    ck_assert_int_eq(allowed_at(&b, &p, c->probe + r.retry_us - 1, c->n), 0);
    if (r.retry_us > 1000)
        ck_assert_int_eq(allowed_at(&b, &p, c->probe + r.retry_us - 1000, c->n), 0);
    /* Empty at reset: a full window's worth passes again. */
    ck_assert(bucket_idle(&b, &p, c->probe + r.reset_us) ||
              allowed_at(&b, &p, c->probe + r.reset_us, c->limit));
}
END_TEST

START_TEST(test_sw_idle)
{
    struct bucket_params p = params(SW, 10, MINUTE, 10);
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
            struct bucket_params p = params(algo, 1, periods[i], 1);
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
    struct bucket_params p = params(SW, 20, SEC, 20);
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
        t += rng_next(&seed) % 40000;
    }
    for (int w = 0; w < 60; w++) {
        ck_assert_uint_le(per_window[w], 20);
        ck_assert_uint_ge(per_window[w], 5); /* and it does admit */
    }
}
END_TEST

/* ---- table -------------------------------------------------------------- */

/* params_of for the table tests: a small list of named rules. */
struct rule_set {
    const char *names[4];
    struct bucket_params p[4];
    int n;
};

static const struct bucket_params *rule_params(void *ctx, const char *rule)
{
    struct rule_set *rs = ctx;
    for (int i = 0; i < rs->n; i++)
        if (strcmp(rs->names[i], rule) == 0)
            return &rs->p[i];
    return NULL;
}

static int ttake(struct bucket_table *t, const char *rule, const char *key,
                 const struct bucket_params *p, uint64_t now, struct bucket_result *r)
{
    ck_assert_int_eq(bucket_table_take(t, rule, key, strlen(key), p, now, 1, r), 0);
    return r->allowed;
}

START_TEST(test_table_keys)
{
    struct bucket_table *t = bucket_table_new(8);
    struct bucket_params p = params(TB, 3, MINUTE, 3);
    struct bucket_result r;

    ck_assert_ptr_nonnull(t);
    for (int i = 0; i < 3; i++)
        ck_assert(ttake(t, "r", "a", &p, 0, &r));
    ck_assert(!ttake(t, "r", "a", &p, 0, &r)); /* same key shares the bucket */
    ck_assert(ttake(t, "r", "b", &p, 0, &r));  /* other key: own bucket */
    ck_assert_uint_eq(r.remaining, 2);
    ck_assert(ttake(t, "r2", "a", &p, 0, &r)); /* other rule: own bucket */
    ck_assert_uint_eq(r.remaining, 2);
    /* The split between rule and key is part of the identity. */
    ck_assert(ttake(t, "ab", "c", &p, 0, &r));
    ck_assert(ttake(t, "a", "bc", &p, 0, &r));
    ck_assert_uint_eq(r.remaining, 2);
    /* Keys are bytes: embedded NULs and the empty key work. */
    ck_assert_int_eq(bucket_table_take(t, "r", "x\0y", 3, &p, 0, 1, &r), 0);
    ck_assert_int_eq(bucket_table_take(t, "r", "x\0z", 3, &p, 0, 1, &r), 0);
    ck_assert_uint_eq(r.remaining, 2);
    ck_assert_int_eq(bucket_table_take(t, "r", "", 0, &p, 0, 1, &r), 0);
    ck_assert_int_eq(bucket_table_take(t, "r", "", 0, &p, 0, 1, &r), 0);
    ck_assert_uint_eq(r.remaining, 1);
    ck_assert_uint_eq(bucket_table_count(t), 8);
    bucket_table_free(t);
    bucket_table_free(NULL);
}
END_TEST

static const struct bucket_params *same_params(void *ctx, const char *rule)
{
    (void)rule;
    return ctx;
}

/* [agent] max_entries: past the budget a new bucket drops the least recently
 * used one of its stripe, which starts full again. One stripe: exact LRU. */
START_TEST(test_table_lru_eviction)
{
    struct bucket_budget budget = {0};
    struct bucket_table *t = bucket_table_new(1);
    struct bucket_params p = params(TB, 1, HOUR, 1);
    struct bucket_result r;
    uint64_t ev0 = atomic_load(&metrics.evictions);

    atomic_store(&budget.max, 3);
    bucket_table_set_budget(t, &budget);
    ck_assert(ttake(t, "r", "a", &p, 0, &r));
    ck_assert(ttake(t, "r", "b", &p, 1, &r));
    ck_assert(ttake(t, "r", "c", &p, 2, &r));
    ck_assert(!ttake(t, "r", "a", &p, 3, &r)); /* a used again: b is the oldest */
    ck_assert_uint_eq(atomic_load(&budget.count), 3);
    ck_assert(ttake(t, "r", "d", &p, 4, &r)); /* drops b */
    ck_assert_uint_eq(bucket_table_count(t), 3);
    ck_assert_uint_eq(atomic_load(&budget.count), 3);
    ck_assert_uint_eq(atomic_load(&metrics.evictions), ev0 + 1);
    ck_assert(!ttake(t, "r", "a", &p, 5, &r)); /* kept: still empty */
    ck_assert(!ttake(t, "r", "c", &p, 6, &r));
    /* b was forgotten: full again, one burst more than the limit (and it
     * drops d, now the oldest) */
    ck_assert(ttake(t, "r", "b", &p, 7, &r));
    ck_assert_uint_eq(atomic_load(&metrics.evictions), ev0 + 2);
    ck_assert(ttake(t, "r", "d", &p, 8, &r));

    /* a lower cap (a reload) is reached back: two dropped per new bucket */
    atomic_store(&budget.max, 1);
    ck_assert(ttake(t, "r", "e", &p, 9, &r));
    ck_assert_uint_eq(bucket_table_count(t), 2);
    ck_assert(ttake(t, "r", "f", &p, 10, &r));
    ck_assert_uint_eq(bucket_table_count(t), 1);
    ck_assert_uint_eq(atomic_load(&budget.count), 1);
    /* idle buckets expire as before, and leave the budget */
    ck_assert_uint_eq(bucket_table_expire(t, 10 * HOUR, 100, same_params, &p), 1);
    ck_assert_uint_eq(atomic_load(&budget.count), 0);
    bucket_table_free(t);
}
END_TEST

/* Many stripes, many keys: the table stays at the budget. */
START_TEST(test_table_budget_many_keys)
{
    struct bucket_budget budget = {0};
    struct bucket_table *t = bucket_table_new(64);
    struct bucket_params p = params(TB, 1, HOUR, 1);
    struct bucket_result r;
    char key[32];

    atomic_store(&budget.max, 1000);
    bucket_table_set_budget(t, &budget);
    for (int i = 0; i < 100000; i++) {
        int n = snprintf(key, sizeof(key), "client-%d", i);
        ck_assert_int_eq(bucket_table_take(t, "r", key, (size_t)n, &p, (uint64_t)i, 1, &r), 0);
        ck_assert_uint_le(atomic_load(&budget.count), 1000 + 64);
    }
    ck_assert_uint_eq(bucket_table_count(t), atomic_load(&budget.count));
    ck_assert_uint_ge(bucket_table_count(t), 1000 - 64);
    /* the most recent keys are still there (and empty) */
    for (int i = 100000 - 10; i < 100000; i++) {
        int n = snprintf(key, sizeof(key), "client-%d", i);
        ck_assert_int_eq(bucket_table_take(t, "r", key, (size_t)n, &p, 100000, 1, &r), 0);
        ck_assert(!r.allowed);
    }
    bucket_table_free(t);
    ck_assert_uint_eq(atomic_load(&budget.count), 0);
}
END_TEST

START_TEST(test_table_reload)
{
    struct bucket_table *t = bucket_table_new(1);
    struct bucket_params p = params(TB, 10, MINUTE, 20);
    struct bucket_result r;

    ttake(t, "r", "k", &p, 0, &r);
    ck_assert_uint_eq(r.remaining, 19);
    p.burst = 5; /* reloaded with a smaller burst: clamp */
    ck_assert(ttake(t, "r", "k", &p, 0, &r));
    ck_assert_uint_eq(r.remaining, 4);
    p.burst = 20; /* and back: no free tokens */
    ck_assert(ttake(t, "r", "k", &p, 0, &r));
    ck_assert_uint_eq(r.remaining, 3);
    /* Switching algorithm starts afresh. */
    p = params(SW, 10, MINUTE, 10);
    ck_assert(ttake(t, "r", "k", &p, 0, &r));
    ck_assert_uint_eq(r.remaining, 9);
    ck_assert_uint_eq(bucket_table_count(t), 1);
    bucket_table_free(t);
}
END_TEST

START_TEST(test_table_expire)
{
    struct bucket_table *t = bucket_table_new(4);
    struct rule_set rs = {
        {"tb", "sw"}, {params(TB, 10, MINUTE, 10), params(SW, 10, MINUTE, 10)}, 2};
    struct bucket_result r;

    ttake(t, "tb", "light", &rs.p[0], 0, &r); /* refilled after 6 s */
    for (int i = 0; i < 10; i++)
        ttake(t, "tb", "heavy", &rs.p[0], 0, &r); /* full after 60 s */
    ttake(t, "sw", "a", &rs.p[1], 0, &r);          /* empty after 120 s */
    ck_assert_uint_eq(bucket_table_count(t), 3);

    ck_assert_uint_eq(bucket_table_expire(t, 6 * SEC - 1, SIZE_MAX, rule_params, &rs), 0);
    ck_assert_uint_eq(bucket_table_expire(t, 6 * SEC, SIZE_MAX, rule_params, &rs), 1);
    ck_assert_uint_eq(bucket_table_count(t), 2);
    /* The survivor kept its state. */
    ck_assert(ttake(t, "tb", "heavy", &rs.p[0], 6 * SEC, &r));
    ck_assert_uint_eq(r.remaining, 0);
    ck_assert_uint_eq(bucket_table_expire(t, 60 * SEC, SIZE_MAX, rule_params, &rs), 0);
    ck_assert_uint_eq(bucket_table_expire(t, 66 * SEC, SIZE_MAX, rule_params, &rs), 1);
    ck_assert_uint_eq(bucket_table_expire(t, 2 * MINUTE - 1, SIZE_MAX, rule_params, &rs), 0);
    ck_assert_uint_eq(bucket_table_expire(t, 2 * MINUTE, SIZE_MAX, rule_params, &rs), 1);
    ck_assert_uint_eq(bucket_table_count(t), 0);

    /* A rule that disappeared takes its buckets along, busy or not. */
    for (int i = 0; i < 10; i++)
        ttake(t, "tb", "heavy", &rs.p[0], 0, &r);
    ttake(t, "sw", "a", &rs.p[1], 0, &r);
    rs.n = 1;
    ck_assert_uint_eq(bucket_table_expire(t, 0, SIZE_MAX, rule_params, &rs), 1);
    ck_assert_uint_eq(bucket_table_count(t), 1);
    ck_assert_uint_eq(bucket_table_expire(t, 0, 0, rule_params, &rs), 0);
    bucket_table_free(t);
}
END_TEST

/* max_visit bounds the work per call, and successive calls cover the whole
 * table from where the previous one stopped, for any stripe count. */
static const unsigned visit_stripes[] = {1, 2, 16, 64};

START_TEST(test_table_expire_max_visit)
{
    struct bucket_table *t = bucket_table_new(visit_stripes[_i]);
    struct rule_set rs = {{"r"}, {params(TB, 10, SEC, 10)}, 1};
    struct bucket_result r;
    char key[32];

    for (int i = 0; i < 1000; i++) {
        snprintf(key, sizeof(key), "k%d", i);
        ttake(t, "r", key, &rs.p[0], 0, &r);
    }
    /* Nothing idle: a bounded call drops nothing. */
    ck_assert_uint_eq(bucket_table_expire(t, 0, 10, rule_params, &rs), 0);
    size_t total = 0;
    int calls = 0;
    while (bucket_table_count(t) > 0) {
        size_t d = bucket_table_expire(t, SEC, 7, rule_params, &rs);
        ck_assert_uint_le(d, 7);
        total += d;
        ck_assert_uint_eq(bucket_table_count(t), 1000 - total);
        ck_assert_int_lt(++calls, 1000);
    }
    ck_assert_uint_eq(total, 1000);
    ck_assert_int_ge(calls, 1000 / 7);
    bucket_table_free(t);
}
END_TEST

START_TEST(test_table_million)
{
    struct bucket_table *t = bucket_table_new(16);
    struct bucket_params p = params(TB, 10, SEC, 10);
    struct rule_set rs = {{"r"}, {p}, 1};
    struct bucket_result r;
    const uint64_t n = 1000000;

    uint64_t ok = 0;
    for (uint64_t i = 0; i < n; i++)
        ok += bucket_table_take(t, "r", &i, sizeof(i), &p, 0, 1, &r) == 0 && r.allowed;
    ck_assert_uint_eq(ok, n);
    ck_assert_uint_eq(bucket_table_count(t), n);
    /* A second pass finds every bucket again. */
    ok = 0;
    for (uint64_t i = 0; i < n; i++) {
        bucket_table_take(t, "r", &i, sizeof(i), &p, 0, 1, &r);
        ok += r.remaining == 8;
    }
    ck_assert_uint_eq(ok, n);
    ck_assert_uint_eq(bucket_table_expire(t, 0, SIZE_MAX, rule_params, &rs), 0);
    size_t total = 0;
    for (int calls = 0; bucket_table_count(t) > 0; calls++) {
        ck_assert_int_lt(calls, 1000);
        total += bucket_table_expire(t, SEC, 100000, rule_params, &rs);
    }
    ck_assert_uint_eq(total, n);
    bucket_table_free(t);
}
END_TEST

START_TEST(test_table_limits)
{
    struct bucket_table *t = bucket_table_new(0);
    struct bucket_params p = params(TB, 10, SEC, 10);
    struct bucket_result r;
    ck_assert_ptr_nonnull(t);
    ck_assert(ttake(t, "r", "k", &p, 0, &r));
#if SIZE_MAX > UINT32_MAX
    /* A key too long to hold is refused (denied, -1) without reading it. */
    ck_assert_int_eq(bucket_table_take(t, "r", "k", (size_t)UINT32_MAX + 1, &p, 0, 1, &r), -1);
    ck_assert_int_eq(r.allowed, 0);
    ck_assert_uint_gt(r.retry_us, 0);
#endif
    ck_assert_uint_eq(bucket_table_count(t), 1);
    bucket_table_free(t);
}
END_TEST

/* ---- threads ------------------------------------------------------------ */

#define THREADS 4
#define TAKES 50000

struct worker {
    struct bucket_table *t;
    const struct bucket_params *p;
    int id;
    uint64_t allowed;
};

static void *take_one_key(void *arg)
{
    struct worker *w = arg;
    struct bucket_result r;
    for (int i = 0; i < TAKES; i++) {
        if (bucket_table_take(w->t, "r", "shared", 6, w->p, 0, 1, &r) == 0 && r.allowed)
            w->allowed++;
    }
    return NULL;
}

START_TEST(test_threads_one_key)
{
    /* The burst admits exactly half of all takes; a lost update would show
     * as more. */
    struct bucket_table *t = bucket_table_new(8);
    struct bucket_params p = params(TB, 1, DAY, THREADS * TAKES / 2);
    struct worker w[THREADS];
    pthread_t th[THREADS];
    uint64_t total = 0;

    for (int i = 0; i < THREADS; i++) {
        w[i] = (struct worker){t, &p, i, 0};
        ck_assert_int_eq(pthread_create(&th[i], NULL, take_one_key, &w[i]), 0);
    }
    for (int i = 0; i < THREADS; i++) {
        pthread_join(th[i], NULL);
        total += w[i].allowed;
    }
    ck_assert_uint_eq(total, THREADS * TAKES / 2);
    ck_assert_uint_eq(bucket_table_count(t), 1);
    bucket_table_free(t);
}
END_TEST

static void *take_many_keys(void *arg)
{
    struct worker *w = arg;
    struct bucket_result r;
    for (uint64_t i = 0; i < TAKES; i++) {
        uint64_t key = i % 5000;
        /* time moves on, so buckets keep becoming idle under the expirer */
        bucket_table_take(w->t, "r", &key, sizeof(key), w->p, i * 100, 1, &r);
    }
    return NULL;
}

struct expirer {
    struct bucket_table *t;
    struct rule_set *rs;
    atomic_int *stop;
};

static void *expire_loop(void *arg)
{
    struct expirer *x = arg;
    uint64_t now = 0;
    while (!atomic_load(x->stop)) {
        bucket_table_expire(x->t, now, 500, rule_params, x->rs);
        bucket_table_count(x->t);
        now += 10000;
    }
    return NULL;
}

START_TEST(test_threads_expire)
{
    /* Takes on many keys racing an expirer: no crash, no leak, and the count
     * stays consistent with the entries actually present. */
    struct bucket_table *t = bucket_table_new(4);
    struct rule_set rs = {{"r"}, {params(TB, 1000, SEC, 5)}, 1};
    struct worker w[THREADS];
    pthread_t th[THREADS], ex;
    atomic_int stop = 0;
    struct expirer x = {t, &rs, &stop};

    ck_assert_int_eq(pthread_create(&ex, NULL, expire_loop, &x), 0);
    for (int i = 0; i < THREADS; i++) {
        w[i] = (struct worker){t, &rs.p[0], i, 0};
        ck_assert_int_eq(pthread_create(&th[i], NULL, take_many_keys, &w[i]), 0);
    }
    for (int i = 0; i < THREADS; i++)
        pthread_join(th[i], NULL);
    atomic_store(&stop, 1);
    pthread_join(ex, NULL);
    ck_assert_uint_le(bucket_table_count(t), 5000);
    size_t left = bucket_table_count(t);
    ck_assert_uint_eq(bucket_table_expire(t, UINT64_MAX / 4, SIZE_MAX, rule_params, &rs), left);
    ck_assert_uint_eq(bucket_table_count(t), 0);
    bucket_table_free(t);
}
END_TEST

/* GET /key: peek shows what a take would find, changes nothing; POST
 * /reset: drop makes the next take find the bucket full. */
START_TEST(test_table_peek_drop)
{
    struct bucket_table *t = bucket_table_new(4);
    struct bucket_params tb = params(TB, 10, MINUTE, 10), sw = params(SW, 10, MINUTE, 10);
    struct bucket_result r;
    struct bucket_state st;
    uint64_t now = 1000 * MINUTE;

    ck_assert_int_eq(bucket_table_peek(t, "r", "k", 1, &tb, now, &st), 0);
    for (int i = 0; i < 10; i++)
        bucket_table_take(t, "r", "k", 1, &tb, now, 1, &r);
    ck_assert_int_eq(bucket_table_peek(t, "r", "k", 1, &tb, now + 3 * SEC, &st), 1);
    ck_assert(st.level > 0.49 && st.level < 0.51); /* 3 s of 6 s per token */
    ck_assert_uint_eq(st.remaining, 0);
    ck_assert_int_eq(st.blocked, 1);
    ck_assert_uint_eq(st.retry_us, 3 * SEC);
    ck_assert_uint_eq(st.reset_us, 57 * SEC);
    /* peeking took nothing: still blocked at the same instant */
    ck_assert_int_eq(bucket_table_peek(t, "r", "k", 1, &tb, now + 3 * SEC, &st), 1);
    ck_assert_int_eq(st.blocked, 1);
    ck_assert_int_eq(bucket_table_peek(t, "r", "k", 1, &tb, now + 6 * SEC, &st), 1);
    ck_assert_int_eq(st.blocked, 0);
    ck_assert_uint_eq(st.remaining, 1);
    ck_assert_uint_eq(st.retry_us, 0);
    /* another algorithm: the next take starts afresh, as if there were none */
    ck_assert_int_eq(bucket_table_peek(t, "r", "k", 1, &sw, now, &st), 0);

    ck_assert_int_eq(bucket_table_drop(t, "r", "k", 1), 1);
    ck_assert_int_eq(bucket_table_drop(t, "r", "k", 1), 0);
    ck_assert_uint_eq(bucket_table_count(t), 0);
    bucket_table_take(t, "r", "k", 1, &tb, now, 1, &r);
    ck_assert_int_eq(r.allowed, 1);
    ck_assert_uint_eq(r.remaining, 9);

    /* sliding window: the two counts and the estimate */
    uint64_t w0 = 2000 * MINUTE; /* a window start */
    for (int i = 0; i < 6; i++)
        bucket_table_take(t, "s", "k", 1, &sw, w0 + 10 * SEC, 1, &r);
    for (int i = 0; i < 2; i++)
        bucket_table_take(t, "s", "k", 1, &sw, w0 + MINUTE + SEC, 1, &r);
    ck_assert_int_eq(bucket_table_peek(t, "s", "k", 1, &sw, w0 + MINUTE + 30 * SEC, &st), 1);
    ck_assert(st.prev == 6 && st.cur == 2);
    ck_assert(st.level > 4.99 && st.level < 5.01); /* 6 x 1/2 + 2 */
    ck_assert_uint_eq(st.remaining, 5);
    ck_assert_int_eq(st.blocked, 0);
    ck_assert_uint_eq(st.reset_us, 90 * SEC);
    ck_assert_int_eq(bucket_table_drop(t, "s", "k", 1), 1);
    bucket_table_free(t);
}
END_TEST

static Suite *bucket_suite(void)
{
    Suite *s = suite_create("bucket");

    TCase *tc = tcase_create("token_bucket");
    tcase_add_test(tc, test_tb_ten_per_minute);
    tcase_add_loop_test(tc, test_tb_cases, 0, sizeof(tb_cases) / sizeof(tb_cases[0]));
    tcase_add_test(tc, test_tb_partial_refill);
    tcase_add_test(tc, test_tb_no_drift);
    tcase_add_test(tc, test_tb_clock_backward);
    tcase_add_test(tc, test_tb_never_fits);
    tcase_add_loop_test(tc, test_tb_interval_bound, 0,
                        sizeof(tb_prop_cases) / sizeof(tb_prop_cases[0]));
    tcase_set_timeout(tc, 60);
    suite_add_tcase(s, tc);

    tc = tcase_create("sliding_window");
    tcase_add_test(tc, test_sw_basic);
    tcase_add_test(tc, test_sw_weighted);
    tcase_add_loop_test(tc, test_sw_retry, 0, sizeof(sw_cases) / sizeof(sw_cases[0]));
    tcase_add_test(tc, test_sw_idle);
    tcase_add_test(tc, test_sw_window_bound);
    tcase_add_test(tc, test_huge_period);
    suite_add_tcase(s, tc);

    tc = tcase_create("table");
    tcase_add_test(tc, test_table_keys);
    tcase_add_test(tc, test_table_reload);
    tcase_add_test(tc, test_table_lru_eviction);
    tcase_add_test(tc, test_table_budget_many_keys);
    tcase_add_test(tc, test_table_expire);
    tcase_add_loop_test(tc, test_table_expire_max_visit, 0,
                        sizeof(visit_stripes) / sizeof(visit_stripes[0]));
    tcase_add_test(tc, test_table_million);
    tcase_add_test(tc, test_table_limits);
    tcase_add_test(tc, test_table_peek_drop);
    tcase_set_timeout(tc, 300);
    suite_add_tcase(s, tc);

    tc = tcase_create("threads");
    tcase_add_test(tc, test_threads_one_key);
    tcase_add_test(tc, test_threads_expire);
    tcase_set_timeout(tc, 300);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(bucket_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
