/* SPDX-License-Identifier: Apache-2.0 */
/* test_fleet.c - the fleet size behind share = auto (fleet.h): a steady N,
 * a heartbeat set emptied under the fleet (empty restart, FLUSHDB) that
 * keeps N for the window, a real scale-down followed once the window has
 * passed, a scale-up taken at once, counts read while the set is rebuilt,
 * N kept through an outage, and clean departures taken off at once while a
 * lost count of them takes nothing off. Every time is a parameter. */
#include <check.h>
#include <stdint.h>

#include "check_util.h"
#include "limits/fleet.h"

#define S 1000000ULL        /* one second, us */
#define BEAT (5 * S)        /* STORE_HEARTBEAT_EVERY */
#define T0 (1000 * S + 123) /* a monotonic clock's reading, off slot edges */

/* Beats of count n every BEAT from *t for d us (settled counts). */
static unsigned beats(struct fleet_window *w, unsigned n, uint64_t *t, uint64_t d)
{
    unsigned got = 0;

    for (uint64_t end = *t + d; *t < end; *t += BEAT)
        got = fleet_window_add(w, n, *t, 0);
    return got;
}

START_TEST(steady)
{
    struct fleet_window w = {0};
    uint64_t t = T0;

    ck_assert_uint_eq(fleet_window_get(&w), 0);
    ck_assert_uint_eq(fleet_window_add(&w, 0, t, 0), 0); /* no count: nothing */
    for (int i = 0; i < 100; i++, t += BEAT)
        ck_assert_uint_eq(fleet_window_add(&w, 3, t, 0), 3);
    ck_assert_uint_eq(fleet_window_get(&w), 3);
}
END_TEST

/* Redis restarted empty (or FLUSHDB, or a forward step of its clock that
 * drops every member): the set reads 1, then fills again; N stays. */
START_TEST(empty_restart_keeps_n)
{
    struct fleet_window w = {0};
    uint64_t t = T0;

    beats(&w, 3, &t, 120 * S);
    /* this agent beats first: 1, even settled, and for most of a window
     * after the last 3 (read one beat ago) */
    for (uint64_t end = t - BEAT + FLEET_WINDOW_US - FLEET_SLOT_US; t < end; t += BEAT)
        ck_assert_uint_eq(fleet_window_add(&w, 1, t, 0), 3);
    /* the set filled again: 3 keeps it from then on */
    ck_assert_uint_eq(beats(&w, 3, &t, 300 * S), 3);
}
END_TEST

/* A count read while the set is rebuilt never lowers N and keeps it alive:
 * a crash loop (up 1 s, down 6 s, over and over) never shrinks it. */
START_TEST(rebuilding_never_lowers)
{
    struct fleet_window w = {0};
    uint64_t t = T0;

    beats(&w, 3, &t, 60 * S);
    for (int i = 0; i < 200; i++, t += 7 * S)
        ck_assert_uint_eq(fleet_window_add(&w, 1, t, 1), 3);
    /* but a larger count while rebuilding is a scale-up, taken at once */
    ck_assert_uint_eq(fleet_window_add(&w, 5, t, 1), 5);
}
END_TEST

/* A real scale-down from 5 to 2: N stays 5 for at least the window less a
 * slot after the last 5 was read, and is 2 once a whole window has passed. */
START_TEST(scale_down_after_window)
{
    struct fleet_window w = {0};
    uint64_t t = T0;

    beats(&w, 5, &t, 60 * S);
    uint64_t down = t - BEAT; /* the last 5 */
    for (; t < down + FLEET_WINDOW_US - FLEET_SLOT_US; t += BEAT)
        ck_assert_uint_eq(fleet_window_add(&w, 2, t, 0), 5);
    for (; t < down + FLEET_WINDOW_US; t += BEAT) {
        unsigned n = fleet_window_add(&w, 2, t, 0);
        ck_assert(n == 5 || n == 2);
    }
    for (; t < down + 3 * FLEET_WINDOW_US; t += BEAT) /* every time, not once */
        ck_assert_uint_eq(fleet_window_add(&w, 2, t, 0), 2);
}
END_TEST

/* A scale-up is taken on the count that shows it, with no window. */
START_TEST(scale_up_immediate)
{
    struct fleet_window w = {0};
    uint64_t t = T0;

    beats(&w, 2, &t, 60 * S);
    ck_assert_uint_eq(fleet_window_add(&w, 7, t, 0), 7);
    t += BEAT;
    ck_assert_uint_eq(fleet_window_add(&w, 7, t, 0), 7);
}
END_TEST

/* While Redis is down no count comes: N does not decay with time alone. On
 * the way back the first counts are rebuilding ones and keep N; a settled
 * lower count after that lowers it only once a window has passed. */
START_TEST(outage_keeps_n)
{
    struct fleet_window w = {0};
    uint64_t t = T0;

    beats(&w, 4, &t, 60 * S);
    t += 3600 * S; /* an hour down */
    ck_assert_uint_eq(fleet_window_get(&w), 4);
    ck_assert_uint_eq(fleet_window_add(&w, 1, t, 1), 4);
    t += BEAT;
    ck_assert_uint_eq(fleet_window_add(&w, 2, t, 1), 4);
    t += BEAT;
    ck_assert_uint_eq(fleet_window_add(&w, 2, t, 0), 4);
    ck_assert_uint_eq(beats(&w, 2, &t, 2 * FLEET_WINDOW_US), 2);
}
END_TEST

/* Agents that stop cleanly are counted out at once: 2 of 5 leave, N is 3 at
 * the next beat (not a window later); the same departures read again take
 * nothing more; the counter lost (it reads lower) or read for the first
 * time takes nothing off; never below the count read with it. */
START_TEST(clean_departures_at_once)
{
    struct fleet_window w = {0};
    uint64_t t = T0;

    ck_assert_uint_eq(fleet_window_left(&w, 7, 5), 0); /* the first read: a base */
    beats(&w, 5, &t, 30 * S);
    ck_assert_uint_eq(fleet_window_left(&w, 9, 3), 2);
    ck_assert_uint_eq(fleet_window_get(&w), 3);
    ck_assert_uint_eq(fleet_window_add(&w, 3, t, 0), 3);
    ck_assert_uint_eq(fleet_window_left(&w, 9, 3), 0);
    ck_assert_uint_eq(fleet_window_add(&w, 3, t + BEAT, 0), 3);
    /* FLUSHDB took the counter and the set: nothing taken off, N kept */
    ck_assert_uint_eq(fleet_window_left(&w, 0, 1), 0);
    ck_assert_uint_eq(fleet_window_add(&w, 1, t + 2 * BEAT, 1), 3);
    ck_assert_uint_eq(fleet_window_left(&w, 1, 1), 1); /* one more leaves after */
    ck_assert_uint_eq(fleet_window_add(&w, 1, t + 3 * BEAT, 0), 2);
    /* more departures than the window counted: down to the count, not below */
    ck_assert_uint_eq(fleet_window_left(&w, 6, 1), 5);
    ck_assert_uint_eq(fleet_window_get(&w), 1);
    ck_assert_uint_eq(fleet_window_add(&w, 1, t + 4 * BEAT, 0), 1);
}
END_TEST

/* The process-wide copy and the share that follows from it. */
START_TEST(process_share)
{
    fleet_reset();
    ck_assert_uint_eq(fleet_agents(), 0);
    ck_assert_double_eq(fleet_share(0.0), 1.0);
    fleet_set_agents(4, T0, 0);
    ck_assert_uint_eq(fleet_agents(), 4);
    ck_assert_double_eq(fleet_share(0.0), 0.25);
    fleet_set_agents(1, T0 + BEAT, 1);
    ck_assert_double_eq(fleet_share(0.0), 0.25);
    ck_assert_double_eq(fleet_share(0.5), 0.5);
    fleet_reset();
    ck_assert_uint_eq(fleet_agents(), 0);
}
END_TEST

int main(void)
{
    TCase *tc = tcase_create("fleet");

    CHECK_ADD(tc, steady, empty_restart_keeps_n, rebuilding_never_lowers, scale_down_after_window,
              scale_up_immediate, outage_keeps_n, clean_departures_at_once, process_share);
    return check_run_case("fleet", tc);
}
