/* SPDX-License-Identifier: Apache-2.0 */
/* test_scripts_bucket.c - the two writings of the limits' arithmetic side
 * by side: the C bucket module (src/limits/bucket.c, what the agent decides
 * alone: fallback, lease = off without Redis) and the Redis scripts'
 * exact decisions (tb_exact and sw_exact, plain and in fixed mode, the very
 * text the agent loads) fed the same seeded sequences of (time, cost)
 * requests must allow and deny the same requests and answer the same
 * remaining counts.
 *
 * The scripts run in sim_redis.c's embedded Lua 5.1, the simulator's
 * stand-in for Redis, because its TIME is the clock passed to each call: a
 * real Redis (tests/unit/lua/scripts_harness.c) answers its own time, and these
 * sequences need microseconds chosen by the test. Times are random to the
 * microsecond, so that no request falls exactly on a refill's boundary,
 * where the C module's rounding tolerance (bucket.c, tolerance()) may
 * decide a token that the scripts' exact doubles leave a hair short. */
#include <check.h>
#include <inttypes.h>
#include <stdlib.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#include "check_util.h"
#include "limits/bucket.h"
#include "store/script.h"
#include "tools/sim_redis.h"

#define S 1000000ull
#define T0 (1700000000ull * S + 123457) /* an epoch time, as Redis answers */
#define STEPS 1500
#define SEEDS 8

struct rule {
    enum bucket_algorithm algorithm;
    uint64_t limit, period_ms, burst, block_ms, offset_ms;
};

static uint64_t rnd_state;

static uint64_t rnd(void) /* xorshift64*: the same sequence for a seed everywhere */
{
    rnd_state ^= rnd_state >> 12;
    rnd_state ^= rnd_state << 25;
    rnd_state ^= rnd_state >> 27;
    return rnd_state * 2685821657736338717ull;
}

static uint64_t below(uint64_t n)
{
    return n ? rnd() % n : 0;
}

/* The gap before the next request, in us: mostly around the time one unit
 * takes to come back, some bursts, some long pauses. */
static uint64_t next_gap(const struct rule *r)
{
    uint64_t period = r->period_ms * 1000;
    uint64_t unit = period / r->limit;
    uint64_t k = below(10);
    if (k < 5)
        return below(2 * unit + 1);
    if (k < 9)
        return below(1000);
    return below(3 * period);
}

/* What the next request costs: mostly 1, some 0 (a check), some more, some
 * more than ever fits. */
static uint64_t next_cost(const struct rule *r)
{
    uint64_t cap = r->algorithm == BUCKET_TOKEN_BUCKET ? r->burst : r->limit;
    uint64_t k = below(20);
    if (k < 12)
        return 1;
    if (k < 13)
        return 0;
    if (k < 19)
        return 1 + below(cap > 1 ? cap : 1);
    return cap + 1;
}

/* One decision of the script for r on key at now: allowed, remaining, retry
 * ms in v (the reply {allowed, remaining, retry_ms, reset_ms, time_ms}). */
static void script_take(struct sim_redis *sr, const struct rule *r, const char *key, uint64_t now,
                        uint64_t n, int64_t *v)
{
    char a[7][24];
    snprintf(a[0], sizeof(a[0]), "%" PRIu64, r->limit);
    snprintf(a[1], sizeof(a[1]), "%" PRIu64, r->period_ms);
    snprintf(a[2], sizeof(a[2]), "%" PRIu64, r->burst);
    snprintf(a[3], sizeof(a[3]), "%" PRIu64, n);
    snprintf(a[4], sizeof(a[4]), "%" PRIu64, r->block_ms);
    snprintf(a[5], sizeof(a[5]), "%d", r->algorithm == BUCKET_FIXED_WINDOW);
    snprintf(a[6], sizeof(a[6]), "%" PRIu64, r->offset_ms);
    int argc = r->algorithm == BUCKET_TOKEN_BUCKET ? 5 : 7;
    const char *argv[7];
    size_t len[7], klen = strlen(key);
    for (int i = 0; i < argc; i++) {
        argv[i] = a[i];
        len[i] = strlen(a[i]);
    }
    int script = r->algorithm == BUCKET_TOKEN_BUCKET ? SCRIPT_TB_EXACT : SCRIPT_SW_EXACT;
    size_t got;
    const char *err = NULL;
    int rc = sim_redis_eval(sr, script, now, 1, &key, &klen, argc, argv, len, v, 8, &got, &err);
    ck_assert_msg(rc == 0, "%s: %s", key, err ? err : "?");
    ck_assert_uint_eq(got, 5);
}

/* Seeded sequences of requests on one rule: the C bucket and the script
 * decide each one the same. */
static void same_decisions(const struct rule *r, const char *name)
{
    char err[256];
    struct sim_redis *sr = sim_redis_new(err, sizeof(err));
    ck_assert_msg(sr != NULL, "%s", err);
    struct bucket_params p = {
        .algorithm = r->algorithm,
        .limit = r->limit,
        .period_us = r->period_ms * 1000,
        .burst = r->burst,
        .block_us = r->block_ms * 1000,
        .offset_us = r->offset_ms * 1000,
    };
    int allowed = 0, denied = 0;
    for (uint64_t seed = 1; seed <= SEEDS; seed++) {
        char key[64];
        snprintf(key, sizeof(key), "rl:%s:%" PRIu64, name, seed);
        rnd_state = seed * 0x9E3779B97F4A7C15ull;
        uint64_t now = T0 + below(r->period_ms * 1000);
        struct bucket b;
        bucket_init(&b, &p, now);
        for (int i = 0; i < STEPS; i++) {
            uint64_t n = next_cost(r);
            struct bucket_result res;
            int64_t v[8];
            bucket_take(&b, &p, now, n, &res);
            script_take(sr, r, key, now, n, v);
            if (getenv("TRACE")) /* TRACE=1: every decision on stderr */
                fprintf(stderr, "%d +%llu n=%llu C %d %llu r%llu bu+%lld / L %lld %lld r%lld\n", i,
                        (unsigned long long)(now - T0), (unsigned long long)n, res.allowed,
                        (unsigned long long)res.remaining, (unsigned long long)res.retry_us,
                        (long long)(b.blocked_until_us - T0), (long long)v[0], (long long)v[1],
                        (long long)v[2]);
            ck_assert_msg(v[0] == res.allowed && (uint64_t)v[1] == res.remaining,
                          "%s seed %" PRIu64 " request %d (at +%" PRIu64 " us, cost %" PRIu64
                          "): C %s, %" PRIu64 " left; script %s, %" PRId64 " left",
                          name, seed, i, (uint64_t)(now - T0), n,
                          res.allowed ? "allowed" : "denied", res.remaining,
                          v[0] ? "allowed" : "denied", v[1]);
            /* a denial's retry: the script's whole ms, rounded up; the C
             * module's us (one ms of slack for the two roundings) */
            if (!res.allowed) {
                int64_t c_ms = (int64_t)((res.retry_us + 999) / 1000);
                ck_assert_msg(v[2] >= c_ms - 1 && v[2] <= c_ms + 1,
                              "%s seed %" PRIu64 " request %d: retry C %" PRIu64
                              " us, script %" PRId64 " ms",
                              name, seed, i, res.retry_us, v[2]);
            }
            allowed += res.allowed;
            denied += !res.allowed;
            now += next_gap(r);
        }
    }
    /* the sequences reach both sides of the limit, or they test nothing */
    ck_assert_msg(allowed > STEPS && denied > STEPS, "%s: %d allowed, %d denied", name, allowed,
                  denied);
    sim_redis_free(sr);
}

START_TEST(token_bucket_same_as_tb_exact)
{
    same_decisions(&(struct rule){BUCKET_TOKEN_BUCKET, 10, 1000, 10, 0, 0}, "tb10");
    same_decisions(&(struct rule){BUCKET_TOKEN_BUCKET, 100, 60000, 20, 0, 0}, "tb100m");
    same_decisions(&(struct rule){BUCKET_TOKEN_BUCKET, 3, 1000, 1, 0, 0}, "tb3b1");
    same_decisions(&(struct rule){BUCKET_TOKEN_BUCKET, 7, 900, 30, 0, 0}, "tb7");
}
END_TEST

START_TEST(token_bucket_block_same_as_tb_exact)
{
    same_decisions(&(struct rule){BUCKET_TOKEN_BUCKET, 10, 1000, 5, 2500, 0}, "tbblock");
}
END_TEST

/* A window's burst is its N, as the config makes it by default (the scripts
 * ignore it, and so does bucket.c: a window's capacity is N). */
START_TEST(sliding_window_same_as_sw_exact)
{
    same_decisions(&(struct rule){BUCKET_SLIDING_WINDOW, 10, 1000, 10, 0, 0}, "sw10");
    same_decisions(&(struct rule){BUCKET_SLIDING_WINDOW, 50, 60000, 50, 0, 0}, "sw50m");
    same_decisions(&(struct rule){BUCKET_SLIDING_WINDOW, 10, 1000, 10, 3000, 0}, "swblock");
}
END_TEST

START_TEST(fixed_window_same_as_sw_exact_fixed)
{
    same_decisions(&(struct rule){BUCKET_FIXED_WINDOW, 10, 1000, 10, 0, 0}, "fw10");
    same_decisions(&(struct rule){BUCKET_FIXED_WINDOW, 20, 60000, 20, 0, 15000}, "fwoff");
    same_decisions(&(struct rule){BUCKET_FIXED_WINDOW, 5, 1000, 5, 2000, 250}, "fwblock");
    /* a burst under N (a token bucket's, unused): blocks as N says */
    same_decisions(&(struct rule){BUCKET_FIXED_WINDOW, 10, 1000, 4, 2000, 0}, "fwburst");
}
END_TEST

int main(void)
{
    TCase *tc = tcase_create("core");
    CHECK_ADD(tc, token_bucket_same_as_tb_exact, token_bucket_block_same_as_tb_exact,
              sliding_window_same_as_sw_exact, fixed_window_same_as_sw_exact_fixed);
    return check_run_case("scripts_bucket", tc);
}
