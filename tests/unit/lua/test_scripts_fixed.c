/* SPDX-License-Identifier: Apache-2.0 */
/* test_scripts_fixed.c - the sw_* scripts' fixed mode (algorithm =
 * fixed-window) against a real redis-server, every argument filled by its
 * script.h name (CLAIM_ARG_WINDOW_MODE, ...): N per window, windows shifted
 * by the offset, retry and reset counted to the boundary, nothing carried
 * over into the next window, leases that end at the boundary, a return that
 * uncounts, a reset that empties the window.
 *
 * Each test picks an offset that puts the next boundary of a 1-day window a
 * chosen time after Redis' now, so the boundary is where the test wants it
 * whatever the time of day. Server and scripts as in scripts_harness.c. */
#include <check.h>
#include <hiredis/hiredis.h>

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "check_util.h"
#include "scripts_harness.h"

#define DAY_MS 86400000LL

struct fargs {
    int n;
    const char *v[MAX_ARGS];
    char num[MAX_ARGS][24];
};

static void put(struct fargs *a, int i, long long v)
{
    snprintf(a->num[i], sizeof(a->num[i]), "%lld", v);
    a->v[i] = a->num[i];
    if (a->n < i + 1)
        a->n = i + 1;
}

/* The offset of a 1-day window whose next start is in_ms after Redis' now. */
static long long offset_for(long long in_ms)
{
    long long now_ms = redis_now_us() / 1000;
    return (now_ms + in_ms) % DAY_MS;
}

static void run(enum script s, const char *key, struct fargs *a, long long *out, size_t nout)
{
    call_strs(s, key, a->n, a->v, out, nout);
}

static void fw_exact(const char *key, long long limit, long long offset, long long n, long long *x)
{
    struct fargs a = {0};
    put(&a, EXACT_ARG_LIMIT, limit);
    put(&a, EXACT_ARG_PERIOD_MS, DAY_MS);
    put(&a, EXACT_ARG_BURST, limit);
    put(&a, EXACT_ARG_N, n);
    put(&a, EXACT_ARG_BLOCK_MS, 0); /* no penalty box */
    put(&a, EXACT_ARG_WINDOW_MODE, 1);
    put(&a, EXACT_ARG_WINDOW_OFFSET_MS, offset);
    ck_assert_int_eq(a.n, EXACT_ARGC_FIXED);
    run(SW_EXACT, key, &a, x, X_N);
}

static void fw_claim(const char *key, const char *agent, long long limit, long long offset,
                     long long want, long long used, long long ret, long long *o)
{
    struct fargs a = {0};
    a.v[CLAIM_ARG_AGENT] = agent;
    put(&a, CLAIM_ARG_LIMIT, limit);
    put(&a, CLAIM_ARG_PERIOD_MS, DAY_MS);
    put(&a, CLAIM_ARG_BURST, limit);
    put(&a, CLAIM_ARG_WANT, want);
    put(&a, CLAIM_ARG_USED, used);
    put(&a, CLAIM_ARG_RETURNED, ret);
    put(&a, CLAIM_ARG_TTL_MS, DAY_MS);
    put(&a, CLAIM_ARG_RATE_PPM, 0);
    put(&a, CLAIM_ARG_DEMAND_PPM, 0);
    put(&a, CLAIM_ARG_BLOCK_MS, 0); /* no penalty box */
    put(&a, CLAIM_ARG_WINDOW_MODE, 1);
    put(&a, CLAIM_ARG_WINDOW_OFFSET_MS, offset);
    ck_assert_int_eq(a.n, CLAIM_ARGC_FIXED);
    run(SW_CLAIM, key, &a, o, R_N);
}

static void fw_return(const char *key, const char *agent, long long limit, long long offset,
                      long long used, long long *o)
{
    struct fargs a = {0};
    a.v[RETURN_ARG_AGENT] = agent;
    put(&a, RETURN_ARG_LIMIT, limit);
    put(&a, RETURN_ARG_PERIOD_MS, DAY_MS);
    put(&a, RETURN_ARG_BURST, limit);
    put(&a, RETURN_ARG_USED, used);
    put(&a, RETURN_ARG_WINDOW_MODE, 1);
    put(&a, RETURN_ARG_WINDOW_OFFSET_MS, offset);
    ck_assert_int_eq(a.n, RETURN_ARGC_FIXED);
    run(SW_RETURN, key, &a, o, R_N);
}

static void fw_reset(const char *key, long long limit, long long offset, long long *z)
{
    struct fargs a = {0};
    put(&a, RESET_ARG_LIMIT, limit);
    put(&a, RESET_ARG_PERIOD_MS, DAY_MS);
    put(&a, RESET_ARG_BURST, limit);
    put(&a, RESET_ARG_WINDOW_MODE, 1);
    put(&a, RESET_ARG_WINDOW_OFFSET_MS, offset);
    ck_assert_int_eq(a.n, RESET_ARGC_FIXED);
    run(SW_RESET, key, &a, z, Z_N);
}

START_TEST(fw_exact_counts_to_the_boundary)
{
    char key[128];
    long long x[X_N];
    mkkey(key, sizeof(key), "fw_exact");
    long long off = offset_for(30000); /* the window ends 30 s from now */

    for (int i = 0; i < 3; i++) {
        fw_exact(key, 3, off, 1, x);
        ck_assert_int_eq(x[X_ALLOWED], 1);
        ck_assert_int_eq(x[X_REMAINING], 2 - i);
    }
    ck_assert_int_gt(x[X_RESET], 25000);
    ck_assert_int_le(x[X_RESET], 30000);
    fw_exact(key, 3, off, 1, x);
    ck_assert_int_eq(x[X_ALLOWED], 0);
    ck_assert_int_eq(x[X_REMAINING], 0);
    ck_assert_int_gt(x[X_RETRY], 25000); /* to the boundary, not a sliding fade */
    ck_assert_int_le(x[X_RETRY], 30000);
    ck_assert_int_eq(x[X_RETRY], x[X_RESET]);
    ck_assert_int_eq(hget_ll(key, "p"), 0);
    /* a cost over N never fits: one period */
    mkkey(key, sizeof(key), "fw_exact_over");
    fw_exact(key, 3, off, 4, x);
    ck_assert_int_eq(x[X_ALLOWED], 0);
    ck_assert_int_eq(x[X_RETRY], DAY_MS);
    ck_assert_int_eq(x[X_REMAINING], 3);
    /* costs: 2 then 2 does not fit in 3, 1 does */
    fw_exact(key, 3, off, 2, x);
    ck_assert_int_eq(x[X_ALLOWED], 1);
    fw_exact(key, 3, off, 2, x);
    ck_assert_int_eq(x[X_ALLOWED], 0);
    fw_exact(key, 3, off, 1, x);
    ck_assert_int_eq(x[X_ALLOWED], 1);
}
END_TEST

START_TEST(fw_next_window_starts_empty)
{
    /* a full window, then the next one: N again at once (a sliding window
     * would still weigh the last one in) */
    char key[128];
    long long x[X_N];
    mkkey(key, sizeof(key), "fw_roll");
    long long off = offset_for(1500);

    for (int i = 0; i < 3; i++)
        fw_exact(key, 3, off, 1, x);
    fw_exact(key, 3, off, 1, x);
    ck_assert_int_eq(x[X_ALLOWED], 0);
    ck_assert_int_le(x[X_RETRY], 1500);
    sleep_ms((double)x[X_RETRY] + 50);
    for (int i = 0; i < 3; i++) {
        fw_exact(key, 3, off, 1, x);
        ck_assert_int_eq(x[X_ALLOWED], 1);
        ck_assert_int_eq(x[X_REMAINING], 2 - i);
    }
    ck_assert_int_gt(x[X_RESET], DAY_MS - 10000); /* a whole new day-long window */
    ck_assert_int_eq(hget_ll(key, "p"), 0);
}
END_TEST

START_TEST(fw_lease_ends_at_the_boundary)
{
    char key[128];
    long long o[R_N], x[X_N];
    mkkey(key, sizeof(key), "fw_lease");
    long long off = offset_for(20000);

    fw_claim(key, "A", 5, off, 10, 0, 0, o);
    ck_assert_int_eq(o[R_GRANTED], 5);
    ck_assert_int_eq(o[R_REMAINING], 0);
    ck_assert_int_eq(o[R_MINE], 5);
    ck_assert_int_gt(o[R_LEASE], 15000); /* the window's end, not the day-long ttl */
    ck_assert_int_le(o[R_LEASE], 20000);
    ck_assert_int_eq(o[R_RETRY], o[R_RESET]);
    fw_exact(key, 5, off, 1, x); /* the lease holds the whole window */
    ck_assert_int_eq(x[X_ALLOWED], 0);
    /* 2 spent, 3 returned: they leave the count */
    fw_return(key, "A", 5, off, 2, o);
    ck_assert_int_eq(o[R_REMAINING], 3);
    ck_assert_int_eq(o[R_HOLDERS], 0);
    fw_claim(key, "B", 5, off, 2, 0, 0, o);
    ck_assert_int_eq(o[R_GRANTED], 2);
    ck_assert_int_eq(o[R_HELD], 2);
    /* a reset keeps B's lease counted, empties the rest */
    long long z[Z_N];
    fw_reset(key, 5, off, z);
    ck_assert_int_eq(z[Z_BEFORE], 1);
    ck_assert_int_eq(z[Z_REMAINING], 3);
    ck_assert_int_eq(z[Z_HELD], 2);
    fw_return(key, "B", 5, off, 0, o);
    fw_reset(key, 5, off, z);
    ck_assert_int_eq(z[Z_REMAINING], 5);
    ck_assert_int_eq(cmd_int("EXISTS %s", key), 0);
}
END_TEST

START_TEST(fw_offset_shifts_the_window)
{
    /* the same key seen under two offsets: each call computes its window id
     * from its own offset (w = floor((now - offset) / period)) */
    char key[128];
    long long x[X_N];
    mkkey(key, sizeof(key), "fw_off");
    long long off = offset_for(10000);

    fw_exact(key, 3, off, 1, x);
    long long w = hget_ll(key, "w");
    long long now_ms = redis_now_us() / 1000;
    ck_assert_int_eq(w, (now_ms - off) / DAY_MS);
    ck_assert_int_gt(x[X_RESET], 5000);
    ck_assert_int_le(x[X_RESET], 10000);
}
END_TEST

static Suite *scripts_fixed_suite(void)
{
    Suite *s = suite_create("scripts_fixed");
    TCase *fw = scripts_tcase("fixed_window");

    CHECK_ADD(fw, fw_exact_counts_to_the_boundary, fw_next_window_starts_empty,
              fw_lease_ends_at_the_boundary, fw_offset_shifts_the_window);
    suite_add_tcase(s, fw);
    return s;
}

int main(void)
{
    return scripts_main(scripts_fixed_suite());
}
