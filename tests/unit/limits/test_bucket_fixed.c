/* SPDX-License-Identifier: Apache-2.0 */
/* test_bucket_fixed.c - the fixed window on one bucket and in a table:
 * windows aligned to the epoch (a day resets at 00:00 UTC, a week on a
 * Thursday), window_offset, the boundary to the microsecond, cost, retry and
 * reset counted to the boundary, a clock that goes back, idleness and expiry
 * on the wall clock. Times are wall-clock microseconds since the epoch,
 * passed in, so every case is exact. */
#include "limits/bucket.h"

#include <check.h>
#include <stdint.h>

#include "bucket_fixture.h"
#include "check_util.h"

#define FW 2 /* BUCKET_FIXED_WINDOW */
#define WEEK (7 * DAY)
/* 2026-12-04 00:00 UTC: a day boundary, far from the epoch */
#define D0 (20791ULL * DAY)

static struct bucket_params fw(uint64_t limit, uint64_t period_us, uint64_t offset_us)
{
    struct bucket_params p = {.algorithm = BUCKET_FIXED_WINDOW,
                              .limit = limit,
                              .period_us = period_us,
                              .offset_us = offset_us};
    return p;
}

START_TEST(test_fw_day_quota)
{
    /* 5/1d at 10:00 UTC: 5 pass, then denied until 00:00 UTC (14 h) */
    struct bucket_params p = fw(5, DAY, 0);
    struct bucket b;
    struct bucket_result r;
    uint64_t now = D0 + 10 * HOUR;

    ck_assert_int_eq(FW, BUCKET_FIXED_WINDOW);
    bucket_init(&b, &p, now);
    for (uint64_t i = 0; i < 5; i++) {
        bucket_take(&b, &p, now + i * SEC, 1, &r);
        ck_assert_int_eq(r.allowed, 1);
        ck_assert_uint_eq(r.remaining, 4 - i);
        ck_assert_uint_eq(r.retry_us, 0);
        ck_assert_uint_eq(r.reset_us, D0 + DAY - (now + i * SEC));
    }
    bucket_take(&b, &p, now + 10 * SEC, 1, &r);
    ck_assert_int_eq(r.allowed, 0);
    ck_assert_uint_eq(r.remaining, 0);
    ck_assert_uint_eq(r.retry_us, 14 * HOUR - 10 * SEC);
    ck_assert_uint_eq(r.reset_us, 14 * HOUR - 10 * SEC);
    /* a microsecond before midnight: still denied, for 1 us */
    bucket_take(&b, &p, D0 + DAY - 1, 1, &r);
    ck_assert_int_eq(r.allowed, 0);
    ck_assert_uint_eq(r.retry_us, 1);
    /* at midnight a fresh window */
    bucket_take(&b, &p, D0 + DAY, 1, &r);
    ck_assert_int_eq(r.allowed, 1);
    ck_assert_uint_eq(r.remaining, 4);
    ck_assert_uint_eq(r.reset_us, DAY);
}
END_TEST

START_TEST(test_fw_no_sliding_weight)
{
    /* a full window does not weigh on the next one (a sliding window's
     * would: 10 in the last second leave ~10 in the first second after) */
    struct bucket_params p = fw(10, MINUTE, 0);
    struct bucket b;
    struct bucket_result r;

    bucket_init(&b, &p, D0);
    for (int i = 0; i < 10; i++) {
        bucket_take(&b, &p, D0 + MINUTE - SEC, 1, &r);
        ck_assert_int_eq(r.allowed, 1);
    }
    for (int i = 0; i < 10; i++) {
        bucket_take(&b, &p, D0 + MINUTE, 1, &r);
        ck_assert_int_eq(r.allowed, 1);
    }
    bucket_take(&b, &p, D0 + MINUTE, 1, &r);
    ck_assert_int_eq(r.allowed, 0);
    ck_assert_uint_eq(r.retry_us, MINUTE);
}
END_TEST

START_TEST(test_fw_cost)
{
    /* 10/1m: costs 4, 4, 4, 2 -> allowed, allowed, denied, allowed; 11
     * never fits (one period) and takes nothing; 0 is a check */
    struct bucket_params p = fw(10, MINUTE, 0);
    struct bucket b;
    struct bucket_result r;
    uint64_t now = D0 + 15 * SEC;
    static const uint64_t costs[] = {4, 4, 4, 2};
    static const int allowed[] = {1, 1, 0, 1};
    static const uint64_t remaining[] = {6, 2, 2, 0};

    bucket_init(&b, &p, now);
    for (int i = 0; i < 4; i++) {
        bucket_take(&b, &p, now, costs[i], &r);
        ck_assert_int_eq(r.allowed, allowed[i]);
        ck_assert_uint_eq(r.remaining, remaining[i]);
        if (!allowed[i])
            ck_assert_uint_eq(r.retry_us, 45 * SEC);
    }
    bucket_init(&b, &p, now);
    bucket_take(&b, &p, now, 11, &r);
    ck_assert_int_eq(r.allowed, 0);
    ck_assert_uint_eq(r.retry_us, MINUTE);
    ck_assert_uint_eq(r.remaining, 10);
    ck_assert_uint_eq(r.reset_us, 0);
    bucket_take(&b, &p, now, 0, &r);
    ck_assert_int_eq(r.allowed, 1);
    ck_assert_uint_eq(r.remaining, 10);
    bucket_take(&b, &p, now, 10, &r);
    ck_assert_int_eq(r.allowed, 1);
    bucket_take(&b, &p, now, 0, &r); /* a check where 1 would be denied */
    ck_assert_int_eq(r.allowed, 0);
}
END_TEST

START_TEST(test_fw_offset)
{
    /* 5/1d with window_offset 2h: windows start at 02:00 UTC */
    struct bucket_params p = fw(5, DAY, 2 * HOUR);
    struct bucket b;
    struct bucket_result r;

    bucket_init(&b, &p, D0 + HOUR); /* 01:00: in the window of yesterday 02:00 */
    ck_assert_uint_eq(b.ts_us, D0 - DAY + 2 * HOUR);
    for (int i = 0; i < 5; i++)
        bucket_take(&b, &p, D0 + HOUR, 1, &r);
    bucket_take(&b, &p, D0 + HOUR, 1, &r);
    ck_assert_int_eq(r.allowed, 0);
    ck_assert_uint_eq(r.retry_us, HOUR);
    bucket_take(&b, &p, D0 + 2 * HOUR - 1, 1, &r);
    ck_assert_int_eq(r.allowed, 0);
    bucket_take(&b, &p, D0 + 2 * HOUR, 1, &r);
    ck_assert_int_eq(r.allowed, 1);
    ck_assert_uint_eq(b.ts_us, D0 + 2 * HOUR);
    ck_assert_uint_eq(r.reset_us, DAY);
}
END_TEST

START_TEST(test_fw_week)
{
    /* 1w windows start on Thursdays (1970-01-01 was one); window_offset 4d
     * moves them to Mondays 00:00 UTC (1970-01-05) */
    struct bucket_params thu = fw(1, WEEK, 0), mon = fw(1, WEEK, 4 * DAY);
    struct bucket b;
    uint64_t now = D0 + 10 * HOUR; /* a Friday (2026-12-04) */

    bucket_init(&b, &thu, now);
    ck_assert_uint_eq(b.ts_us, D0 - DAY);    /* Thursday 2026-12-03 */
    ck_assert_uint_eq(b.ts_us / DAY % 7, 0); /* day 0 of each 7: a Thursday */
    bucket_init(&b, &mon, now);
    ck_assert_uint_eq(b.ts_us, D0 - 4 * DAY); /* Monday 2026-11-30 */
    ck_assert_uint_eq(b.ts_us / DAY % 7, 4);  /* day 4: a Monday */
}
END_TEST

START_TEST(test_fw_clock_backward)
{
    /* the wall clock steps back over a boundary: the current window and its
     * count stay (never a second N), and the wait counts from its start */
    struct bucket_params p = fw(2, MINUTE, 0);
    struct bucket b;
    struct bucket_result r;

    bucket_init(&b, &p, D0 + MINUTE + SEC);
    bucket_take(&b, &p, D0 + MINUTE + SEC, 2, &r);
    ck_assert_int_eq(r.allowed, 1);
    bucket_take(&b, &p, D0 + 30 * SEC, 1, &r);
    ck_assert_int_eq(r.allowed, 0);
    ck_assert_uint_eq(r.retry_us, MINUTE);
    bucket_take(&b, &p, D0 + 2 * MINUTE, 1, &r);
    ck_assert_int_eq(r.allowed, 1);
}
END_TEST

START_TEST(test_fw_peek_idle)
{
    struct bucket_params p = fw(5, HOUR, 0);
    struct bucket b;
    struct bucket_result r;
    struct bucket_state st;
    uint64_t now = D0 + 30 * MINUTE;

    bucket_init(&b, &p, now);
    ck_assert(bucket_idle(&b, &p, now));
    bucket_take(&b, &p, now, 3, &r);
    ck_assert(!bucket_idle(&b, &p, now));
    ck_assert(!bucket_idle(&b, &p, D0 + HOUR - 1));
    ck_assert(bucket_idle(&b, &p, D0 + HOUR));
    bucket_peek(&b, &p, now, &st);
    ck_assert_uint_eq(st.window_start_us, D0);
    ck_assert_uint_eq(st.remaining, 2);
    ck_assert_uint_eq(st.reset_us, 30 * MINUTE);
    ck_assert(st.cur == 3.0);
    ck_assert_int_eq(st.blocked, 0);
    bucket_take(&b, &p, now, 2, &r);
    bucket_peek(&b, &p, now, &st);
    ck_assert_int_eq(st.blocked, 1);
    ck_assert_uint_eq(st.retry_us, 30 * MINUTE);
    bucket_peek(&b, &p, D0 + HOUR, &st); /* the next window: empty */
    ck_assert_uint_eq(st.remaining, 5);
    ck_assert_uint_eq(st.window_start_us, D0 + HOUR);
}
END_TEST

static const struct bucket_params *fw_params_of(void *ctx, const char *rule)
{
    (void)rule;
    return ctx;
}

START_TEST(test_fw_table_expire_wall)
{
    /* A table's expiry judges fixed windows on the wall clock: a monotonic
     * now far below the window's start must not drop a full window. */
    struct bucket_params p = fw(1, HOUR, 0);
    struct bucket_table *t = bucket_table_new(4);
    struct bucket_result r;
    uint64_t wall = D0 + 10 * MINUTE, mono = 5 * SEC;

    ck_assert_ptr_nonnull(t);
    bucket_table_take(t, "q", "k", 1, &p, wall, 1, &r);
    ck_assert_int_eq(r.allowed, 1);
    ck_assert_uint_eq(bucket_table_expire_at(t, mono, wall + SEC, 100, fw_params_of, &p), 0);
    bucket_table_take(t, "q", "k", 1, &p, wall + SEC, 1, &r);
    ck_assert_int_eq(r.allowed, 0);
    ck_assert_uint_eq(bucket_table_expire_at(t, mono, D0 + HOUR, 100, fw_params_of, &p), 1);
    ck_assert_uint_eq(bucket_table_count(t), 0);
    bucket_table_free(t);
}
END_TEST

/* block_for on a fixed window: a denial of a cost that fits N starts a
 * block, as sw_exact.lua's fixed mode says (need <= limit), whatever the
 * rule's burst (a token bucket's, unused by windows: here 5 under N = 10). */
START_TEST(test_fw_block_capacity_is_n)
{
    struct bucket_params p = fw(10, MINUTE, 0);
    struct bucket b;
    struct bucket_result r;
    uint64_t now = D0 + 10 * SEC;

    p.burst = 5;
    p.block_us = 3 * SEC;
    bucket_init(&b, &p, now);
    bucket_take(&b, &p, now, 5, &r);
    ck_assert_int_eq(r.allowed, 1);
    /* 6 more do not fit in what is left (5), but 6 <= N: a block */
    bucket_take(&b, &p, now + 1, 6, &r);
    ck_assert_int_eq(r.allowed, 0);
    ck_assert_uint_eq(r.retry_us, 3 * SEC);
    bucket_take(&b, &p, now + 2, 1, &r);
    ck_assert_int_eq(r.allowed, 0);
    /* 11 > N never fits: the client's error, no block */
    bucket_init(&b, &p, now);
    bucket_take(&b, &p, now, 11, &r);
    ck_assert_int_eq(r.allowed, 0);
    bucket_take(&b, &p, now + 1, 1, &r);
    ck_assert_int_eq(r.allowed, 1);
}
END_TEST

static Suite *bucket_fixed_suite(void)
{
    Suite *s = suite_create("bucket_fixed");
    TCase *tc = tcase_create("fixed_window");

    tcase_add_test(tc, test_fw_day_quota);
    tcase_add_test(tc, test_fw_no_sliding_weight);
    tcase_add_test(tc, test_fw_cost);
    tcase_add_test(tc, test_fw_offset);
    tcase_add_test(tc, test_fw_week);
    tcase_add_test(tc, test_fw_clock_backward);
    tcase_add_test(tc, test_fw_peek_idle);
    tcase_add_test(tc, test_fw_table_expire_wall);
    tcase_add_test(tc, test_fw_block_capacity_is_n);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return check_run(bucket_fixed_suite());
}
