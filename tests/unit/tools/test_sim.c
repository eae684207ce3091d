/* SPDX-License-Identifier: Apache-2.0 */
/* test_sim.c - the simulator's parts that decide what it reports: the fake
 * Redis running the real scripts (sim_redis.c), the exact window check and
 * the histogram (sim_stats.c), and the script arguments shared with the
 * agent (store/script_args.c). The whole simulator is checked against real
 * agents and a real Redis in tests/integration/test_sim.py. */
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check_util.h"
#include "lease/lease.h"
#include "limiter/script_args.h"
#include "store/script.h"
#include "tools/sim_redis.h"
#include "tools/sim_stats.h"

#define S 1000000ull
#define T0 (1000ull * 3600 * S)

static struct sim_redis *redis_new(void)
{
    char err[256];
    struct sim_redis *r = sim_redis_new(err, sizeof(err));
    ck_assert_msg(r != NULL, "%s", err);
    return r;
}

/* tb_claim for agent a on key k: want, used, returned; the reply in v. */
static int claim(struct sim_redis *r, uint64_t now, const char *k, const char *a, const char *want,
                 const char *used, const char *ret, int64_t *v, size_t *n, const char **err)
{
    const char *argv[CLAIM_ARGC] = {a, "10", "1000", "20", want, used, ret, "1000"};
    size_t len[CLAIM_ARGC], klen = strlen(k);
    for (int i = 0; i < CLAIM_ARGC; i++)
        len[i] = strlen(argv[i]);
    return sim_redis_eval(r, SCRIPT_TB_CLAIM, now, 1, &k, &klen, CLAIM_ARGC, argv, len, v, 16, n,
                          err);
}

START_TEST(claims_as_redis_runs_them)
{
    struct sim_redis *r = redis_new();
    int64_t v[16];
    size_t n;
    const char *err;

    /* a new bucket is full: 5 of 20 granted, 15 left, held 5 by one agent */
    ck_assert_int_eq(claim(r, T0, "rl:tb:x:1", "A", "5", "0", "0", v, &n, &err), 0);
    ck_assert_uint_eq(n, CLAIM_R_COUNT);
    ck_assert_int_eq(v[CLAIM_R_GRANTED], 5);
    ck_assert_int_eq(v[CLAIM_R_REMAINING], 15);
    ck_assert_int_eq(v[CLAIM_R_HELD], 5);
    ck_assert_int_eq(v[CLAIM_R_HOLDERS], 1);
    ck_assert_int_eq(v[CLAIM_R_LEASE_MS], 1000);
    ck_assert_int_eq(v[CLAIM_R_MINE], 5);
    /* B asks for everything: t + H <= b, so 15 */
    ck_assert_int_eq(claim(r, T0 + 1000, "rl:tb:x:1", "B", "40", "0", "0", v, &n, &err), 0);
    ck_assert_int_eq(v[CLAIM_R_GRANTED], 15);
    ck_assert_int_eq(v[CLAIM_R_HOLDERS], 2);
    /* 100 ms later (1 token refilled, but capped at b - H = 0): nothing */
    ck_assert_int_eq(claim(r, T0 + S / 10, "rl:tb:x:1", "C", "1", "0", "0", v, &n, &err), 0);
    ck_assert_int_eq(v[CLAIM_R_GRANTED], 0);
    ck_assert_int_gt(v[CLAIM_R_RETRY_MS], 0);
    /* the leases expire after 1 s: their tokens are spent, refill resumes */
    ck_assert_int_eq(claim(r, T0 + 2 * S, "rl:tb:x:1", "C", "20", "0", "0", v, &n, &err), 0);
    ck_assert_int_eq(v[CLAIM_R_HOLDERS], 1);
    ck_assert_int_le(v[CLAIM_R_GRANTED], 10); /* 1 s of refill after the expiry */
    ck_assert_int_ge(v[CLAIM_R_GRANTED], 9);
    ck_assert_uint_eq(sim_redis_keys(r), 1);
    /* PEXPIRE: once refilled and no lease left, the key is gone */
    ck_assert_int_eq(claim(r, T0 + 60 * S, "rl:tb:x:2", "C", "0", "0", "0", v, &n, &err), 0);
    ck_assert_uint_eq(sim_redis_keys(r), 1);
    sim_redis_free(r);
}
END_TEST

/* A fed bucket (limit = -N, lua/README.md "Fed buckets") and tb_pool, as
 * spoa-sim --regions runs them: the fed scripts' HINCRBY (unmet demand u,
 * tokens lost past the deadline l) run in the fake Redis. */
static int fed_claim(struct sim_redis *r, uint64_t now, const char *a, const char *want, int64_t *v)
{
    const char *k = "rl:t2:f:1", *err;
    const char *argv[CLAIM_ARGC] = {a, "-10", "1000", "20", want, "0", "0", "1000"};
    size_t len[CLAIM_ARGC], klen = strlen(k), n;
    for (int i = 0; i < CLAIM_ARGC; i++)
        len[i] = strlen(argv[i]);
    int rc = sim_redis_eval(r, SCRIPT_TB_CLAIM, now, 1, &k, &klen, CLAIM_ARGC, argv, len, v, 16, &n,
                            &err);
    ck_assert_msg(rc == 0, "%s", rc ? err : "");
    return rc;
}

static void pool(struct sim_redis *r, uint64_t now, const char *amt, const char *dl, int64_t *v)
{
    const char *k = "rl:t2:f:1", *err;
    const char *argv[POOL_ARGC_DEADLINE] = {amt, "20", dl ? dl : ""};
    size_t len[POOL_ARGC_DEADLINE], klen = strlen(k), n;
    for (int i = 0; i < POOL_ARGC_DEADLINE; i++)
        len[i] = strlen(argv[i]);
    int rc = sim_redis_eval(r, SCRIPT_TB_POOL, now, 1, &k, &klen,
                            dl ? POOL_ARGC_DEADLINE : POOL_ARGC, argv, len, v, 16, &n, &err);
    ck_assert_msg(rc == 0, "%s", rc ? err : "");
    ck_assert_uint_eq(n, POOL_R_COUNT);
}

START_TEST(fed_buckets_as_redis_runs_them)
{
    struct sim_redis *r = redis_new();
    int64_t v[16];

    /* a missing fed key is empty: nothing granted, one token of the rule's
     * time to wait, and the demand recorded for the claimer */
    fed_claim(r, T0, "A", "5", v);
    ck_assert_int_eq(v[CLAIM_R_GRANTED], 0);
    ck_assert_int_eq(v[CLAIM_R_RETRY_MS], 100);
    pool(r, T0 + 1000, "0", NULL, v);
    ck_assert_int_eq(v[POOL_R_MOVED], 0);
    ck_assert_int_eq(v[POOL_R_UNMET], 5);
    pool(r, T0 + 2000, "0", NULL, v);
    ck_assert_int_eq(v[POOL_R_UNMET], 0); /* read and cleared */
    /* a deposit with a deadline 500 ms from now; a claim takes from it */
    pool(r, T0 + 3000, "8", "500", v);
    ck_assert_int_eq(v[POOL_R_MOVED], 8);
    ck_assert_int_eq(v[POOL_R_REMAINING], 8);
    ck_assert_int_gt(v[POOL_R_DEADLINE], 0);
    fed_claim(r, T0 + 4000, "A", "3", v);
    ck_assert_int_eq(v[CLAIM_R_GRANTED], 3);
    ck_assert_int_eq(v[CLAIM_R_REMAINING], 5);
    /* never refilled; past the deadline nothing is granted, the free
     * tokens are dropped and reported lost once */
    fed_claim(r, T0 + S / 2 + 5000, "B", "1", v);
    ck_assert_int_eq(v[CLAIM_R_GRANTED], 0);
    pool(r, T0 + S / 2 + 6000, "0", NULL, v);
    ck_assert_int_eq(v[POOL_R_LOST], 5);
    ck_assert_int_eq(v[POOL_R_DEADLINE], 0);
    ck_assert_int_eq(v[POOL_R_HELD], 3);
    pool(r, T0 + S / 2 + 7000, "0", NULL, v);
    ck_assert_int_eq(v[POOL_R_LOST], 0);
    sim_redis_free(r);
}
END_TEST

START_TEST(errors_and_batches)
{
    struct sim_redis *r = redis_new();
    int64_t v[64];
    size_t n;
    const char *err;

    ck_assert_int_eq(claim(r, T0, "k", "A", "x", "0", "0", v, &n, &err), -1);
    ck_assert_ptr_nonnull(strstr(err, "bad ARGV[5]"));
    ck_assert_int_eq(claim(r, T0, "k", "", "1", "0", "0", v, &n, &err), -1);
    ck_assert_ptr_nonnull(strstr(err, "empty agent id"));

    /* the batch script: a claim and an exact decision, "n v1..vn" each */
    const char *keys[2] = {"rl:tb:x:a", "rl:tb:x:b"};
    size_t klen[2] = {9, 9};
    const char *argv[] = {"0", "8",    "A", "10", "1000", "20",   "3", "0",
                          "0", "1000", "2", "3",  "10",   "1000", "20"};
    size_t alen[15];
    for (int i = 0; i < 15; i++)
        alen[i] = strlen(argv[i]);
    ck_assert_int_eq(
        sim_redis_eval(r, SCRIPT_BATCH, T0, 2, keys, klen, 15, argv, alen, v, 64, &n, &err), 0);
    ck_assert_uint_eq(n, 1 + CLAIM_R_COUNT + 1 + EXACT_R_COUNT);
    ck_assert_int_eq(v[0], CLAIM_R_COUNT);
    ck_assert_int_eq(v[1 + CLAIM_R_GRANTED], 3);
    ck_assert_int_eq(v[1 + CLAIM_R_COUNT], EXACT_R_COUNT);
    ck_assert_int_eq(v[2 + CLAIM_R_COUNT + EXACT_R_ALLOWED], 1);
    ck_assert_int_eq(v[2 + CLAIM_R_COUNT + EXACT_R_REMAINING], 19);
    /* a reply longer than the caller's room is an error, not an overflow */
    ck_assert_int_eq(
        sim_redis_eval(r, SCRIPT_BATCH, T0, 2, keys, klen, 15, argv, alen, v, 4, &n, &err), -1);
    /* "=": the script and ARGV of the operation before (here the exact
     * decision on c again: 19 -> 18); only after one of the same script */
    const char *keys3[3] = {"rl:tb:x:a", "rl:tb:x:c", "rl:tb:x:c"};
    size_t klen3[3] = {9, 9, 9};
    const char *argv3[] = {"0",    "8", "A", "10", "1000", "20", "0", "0",          "0",
                           "1000", "2", "3", "10", "1000", "20", "2", BATCH_OP_SAME};
    size_t alen3[17];
    for (int i = 0; i < 17; i++)
        alen3[i] = strlen(argv3[i]);
    ck_assert_int_eq(
        sim_redis_eval(r, SCRIPT_BATCH, T0, 3, keys3, klen3, 17, argv3, alen3, v, 64, &n, &err), 0);
    ck_assert_uint_eq(n, 1 + CLAIM_R_COUNT + 2 * (1 + EXACT_R_COUNT));
    ck_assert_int_eq(v[2 + CLAIM_R_COUNT + EXACT_R_REMAINING], 19);
    ck_assert_int_eq(v[3 + CLAIM_R_COUNT + EXACT_R_COUNT + EXACT_R_ALLOWED], 1);
    ck_assert_int_eq(v[3 + CLAIM_R_COUNT + EXACT_R_COUNT + EXACT_R_REMAINING], 18);
    argv3[15] = "0"; /* "=" after an exact call, for a claim */
    ck_assert_int_eq(
        sim_redis_eval(r, SCRIPT_BATCH, T0, 3, keys3, klen3, 17, argv3, alen3, v, 64, &n, &err),
        -1);
    ck_assert_ptr_nonnull(strstr(err, "bad operation 3"));
    sim_redis_free(r);
}
END_TEST

/* b = 2, r = 1/s: two at once is the bound exactly, three is one over; a
 * third a second later is exactly b + r*T again. */
START_TEST(window_check_is_exact)
{
    struct sim_bound b;
    struct sim_window w = {0};

    sim_bound_init(&b, 1, S, 2);
    ck_assert(sim_bound_worst(&b) == -2);
    sim_bound_admit(&b, &w, 5 * S);
    ck_assert(sim_bound_worst(&b) == -1);
    sim_bound_admit(&b, &w, 5 * S);
    ck_assert(sim_bound_worst(&b) == 0);
    sim_bound_admit(&b, &w, 6 * S);
    ck_assert(sim_bound_worst(&b) == 0); /* 3 in [5 s, 6 s]: b + r*1 */
    sim_bound_admit(&b, &w, 6 * S + S / 2);
    ck_assert(fabs(sim_bound_worst(&b) - 0.5) < 1e-12); /* 4 in 1.5 s: 0.5 over */

    struct sim_window w2 = {0}; /* another key: its own windows */
    sim_bound_init(&b, 1, S, 2);
    sim_bound_admit(&b, &w2, 0);
    sim_bound_admit(&b, &w2, 10 * S);
    ck_assert(sim_bound_worst(&b) == -1);
}
END_TEST

START_TEST(histogram_quantiles)
{
    static struct sim_hist h;
    memset(&h, 0, sizeof(h));
    ck_assert_uint_eq(sim_hist_quantile(&h, 0.99), 0);
    for (uint64_t i = 1; i <= 1000; i++)
        sim_hist_add(&h, i);
    uint64_t p50 = sim_hist_quantile(&h, 0.5), p99 = sim_hist_quantile(&h, 0.99);
    ck_assert_uint_ge(p50, 500); /* never below the true value, 3 % above at most */
    ck_assert_uint_le(p50, 515);
    ck_assert_uint_ge(p99, 990);
    ck_assert_uint_le(p99, 1000); /* capped by the maximum */
    ck_assert_uint_eq(sim_hist_quantile(&h, 1), 1000);
    sim_hist_add(&h, UINT64_MAX);
    ck_assert_uint_eq(h.max, UINT64_MAX);
}
END_TEST

START_TEST(script_args_by_position)
{
    struct lease_job j = {.kind = LEASE_JOB_CLAIM,
                          .algorithm = BUCKET_TOKEN_BUCKET,
                          .limit = 100,
                          .period_ms = 60000,
                          .burst = 20,
                          .want = 3,
                          .used = 2,
                          .returned = 1};
    struct script_args a;

    ck_assert_int_eq(script_lease_args(&j, "agent-1", 1000, &a), SCRIPT_TB_CLAIM);
    ck_assert_int_eq(a.argc, CLAIM_ARGC);
    ck_assert_str_eq(a.argv[CLAIM_ARG_AGENT], "agent-1");
    ck_assert_str_eq(a.argv[CLAIM_ARG_PERIOD_MS], "60000");
    ck_assert_str_eq(a.argv[CLAIM_ARG_WANT], "3");
    ck_assert_str_eq(a.argv[CLAIM_ARG_USED], "2");
    ck_assert_str_eq(a.argv[CLAIM_ARG_RETURNED], "1");
    ck_assert_str_eq(a.argv[CLAIM_ARG_TTL_MS], "1000");
    ck_assert_uint_eq(a.argvlen[CLAIM_ARG_AGENT], 7);
    j.kind = LEASE_JOB_RETURN;
    j.algorithm = BUCKET_SLIDING_WINDOW;
    ck_assert_int_eq(script_lease_args(&j, "agent-1", 1000, &a), SCRIPT_SW_RETURN);
    ck_assert_int_eq(a.argc, RETURN_ARGC);
    ck_assert_str_eq(a.argv[RETURN_ARG_USED], "2");
    ck_assert_int_eq(script_exact_args(BUCKET_TOKEN_BUCKET, 5, 1000, 7, 1, &a), SCRIPT_TB_EXACT);
    ck_assert_int_eq(a.argc, EXACT_ARGC);
    ck_assert_str_eq(a.argv[EXACT_ARG_BURST], "7");
}
END_TEST

/* A fixed window's calls: the sw_* scripts with the mode and the offset
 * appended after every other argument (script.h). */
START_TEST(script_args_fixed_window)
{
    struct lease_job j = {.kind = LEASE_JOB_CLAIM,
                          .algorithm = BUCKET_FIXED_WINDOW,
                          .limit = 5,
                          .period_ms = 86400000,
                          .burst = 5,
                          .want = 3,
                          .offset_ms = 7200000};
    struct script_args a;

    ck_assert_int_eq(script_lease_args(&j, "agent-1", 1000, &a), SCRIPT_SW_CLAIM);
    ck_assert_int_eq(a.argc, CLAIM_ARGC_FIXED);
    ck_assert_str_eq(a.argv[CLAIM_ARG_RATE_PPM], ""); /* no rate lease, no block */
    ck_assert_str_eq(a.argv[CLAIM_ARG_DEMAND_PPM], "");
    ck_assert_str_eq(a.argv[CLAIM_ARG_BLOCK_MS], "");
    ck_assert_str_eq(a.argv[CLAIM_ARG_WINDOW_MODE], "1");
    ck_assert_str_eq(a.argv[CLAIM_ARG_WINDOW_OFFSET_MS], "7200000");
    j.kind = LEASE_JOB_RETURN;
    ck_assert_int_eq(script_lease_args(&j, "agent-1", 1000, &a), SCRIPT_SW_RETURN);
    ck_assert_int_eq(a.argc, RETURN_ARGC_FIXED);
    ck_assert_str_eq(a.argv[RETURN_ARG_WINDOW_MODE], "1");
    j.kind = LEASE_JOB_EXACT; /* a cost of 1 is then sent: the mode follows it */
    ck_assert_int_eq(script_lease_args(&j, "agent-1", 1000, &a), SCRIPT_SW_EXACT);
    ck_assert_int_eq(a.argc, EXACT_ARGC_FIXED);
    ck_assert_str_eq(a.argv[EXACT_ARG_N], "1");
    ck_assert_str_eq(a.argv[EXACT_ARG_BLOCK_MS], "0");
    ck_assert_str_eq(a.argv[EXACT_ARG_WINDOW_OFFSET_MS], "7200000");
    j.block_ms = 900000; /* a penalty box comes before the mode */
    ck_assert_int_eq(script_lease_args(&j, "agent-1", 1000, &a), SCRIPT_SW_EXACT);
    ck_assert_int_eq(a.argc, EXACT_ARGC_FIXED);
    ck_assert_str_eq(a.argv[EXACT_ARG_BLOCK_MS], "900000");
    ck_assert_str_eq(a.argv[EXACT_ARG_WINDOW_MODE], "1");
    j.kind = LEASE_JOB_CLAIM;
    ck_assert_int_eq(script_lease_args(&j, "agent-1", 1000, &a), SCRIPT_SW_CLAIM);
    ck_assert_int_eq(a.argc, CLAIM_ARGC_FIXED);
    ck_assert_str_eq(a.argv[CLAIM_ARG_BLOCK_MS], "900000");
    ck_assert_str_eq(a.argv[CLAIM_ARG_WINDOW_OFFSET_MS], "7200000");
    j.block_ms = 0;
    ck_assert_int_eq(script_exact_args(BUCKET_FIXED_WINDOW, 5, 1000, 5, 3, &a), SCRIPT_SW_EXACT);
    script_window_args(&a, SCRIPT_SW_EXACT, 0);
    ck_assert_int_eq(a.argc, EXACT_ARGC_FIXED);
    ck_assert_str_eq(a.argv[EXACT_ARG_N], "3");
    ck_assert_str_eq(a.argv[EXACT_ARG_WINDOW_MODE], "1");
    ck_assert_str_eq(a.argv[EXACT_ARG_WINDOW_OFFSET_MS], "0");
}
END_TEST

int main(void)
{
    TCase *tc = tcase_create("core");

    CHECK_ADD(tc, claims_as_redis_runs_them, fed_buckets_as_redis_runs_them, errors_and_batches,
              window_check_is_exact, histogram_quantiles, script_args_by_position,
              script_args_fixed_window);
    return check_run_case("sim", tc);
}
