/* SPDX-License-Identifier: Apache-2.0 */
/* test_clock_jump.c - the detector of Redis clock steps (store/clock_jump.h):
 * steps of either sign over 1 s are jumps, slow replies and slow drift are
 * not, the baseline follows the step, the quiet period, the message. Every
 * time is a parameter: nothing here reads a clock. */
#include <check.h>
#include <stdint.h>
#include <string.h>

#include "check_util.h"
#include "store/clock_jump.h"

#define S 1000000ULL /* one second, us */

/* A reply to a call sent at mono (us) that took rtt us, Redis' clock reading
 * redis_at_send_ms at the send plus half the round trip. */
static int64_t feed(struct clock_jump *c, uint64_t mono, uint64_t rtt, int64_t redis_at_send_ms)
{
    return clock_jump_feed(c, redis_at_send_ms + (int64_t)(rtt / 2000), mono, mono + rtt);
}

/* rows: a step (ms, signed) after a steady start; jump expected or not */
static const struct {
    int64_t step_ms;
    uint64_t rtt_us;
    int jump;
} steps[] = {
    {0, 500, 0},
    {500, 500, 0},
    {-500, 500, 0},
    {999, 200, 0},
    {1500, 500, 1},
    {-1500, 500, 1},
    {-20000, 300, 1},
    {3600000, 300, 1},
    /* a reply slower than the step hides it: never a false jump */
    {1500, 3 * S, 0},
    {-1500, 3 * S, 0},
};

START_TEST(step_sign_and_size)
{
    struct clock_jump c = {0};
    const int64_t wall0 = 1796550000000; /* Redis' clock at mono 10 s, ms */
    uint64_t mono = 10 * S;

    for (int i = 0; i < 50; i++, mono += 20000) { /* steady: replies 0.1..2 ms */
        int64_t at = wall0 + (int64_t)(mono - 10 * S) / 1000;
        ck_assert_int_eq(feed(&c, mono, 100 + (uint64_t)i * 40, at), 0);
    }
    int64_t at = wall0 + (int64_t)(mono - 10 * S) / 1000 + steps[_i].step_ms;
    int64_t got = feed(&c, mono, steps[_i].rtt_us, at);
    if (!steps[_i].jump) {
        ck_assert_int_eq(got, 0);
        ck_assert_uint_eq(c.last_us, 0);
        return;
    }
    /* the size within the round trip and the ms rounding */
    ck_assert_msg(got > steps[_i].step_ms * 1000 - 3000 && got < steps[_i].step_ms * 1000 + 3000,
                  "step %lld ms read as %lld us", (long long)steps[_i].step_ms, (long long)got);
    ck_assert_int_eq(c.last_step_us, got);
    ck_assert_uint_ne(c.last_us, 0);
    /* the baseline follows: the next replies on the new clock are no jump */
    for (int i = 1; i <= 20; i++) {
        mono += 50000;
        ck_assert_int_eq(feed(&c, mono, 400, at + i * 50), 0);
    }
}
END_TEST

/* Two clocks drifting apart at 500 ppm (NTP's largest slew) for an hour: the
 * offset moves 1.8 s, but never 1 s at once: no jump. */
START_TEST(slow_drift_is_no_jump)
{
    struct clock_jump c = {0};
    const int64_t wall0 = 1796550000000;
    for (uint64_t t = 0; t <= 3600 * S; t += 100000) { /* a reply every 100 ms */
        int64_t redis_ms = wall0 + (int64_t)(t / 1000) + (int64_t)(t / 1000) / 2000;
        ck_assert_int_eq(feed(&c, 5 * S + t, 300, redis_ms), 0);
    }
    ck_assert_uint_eq(c.last_us, 0);
}
END_TEST

/* A stall: replies arrive late (the agent's loop or Redis busy), late by
 * far more than a second, with Redis' clock steady: no jump. */
START_TEST(late_replies_are_no_jump)
{
    struct clock_jump c = {0};
    const int64_t wall0 = 1796550000000;
    uint64_t mono = 1 * S;
    ck_assert_int_eq(feed(&c, mono, 200, wall0), 0);
    /* sent at 2 s, Redis answered at once, read 5 s later */
    ck_assert_int_eq(clock_jump_feed(&c, wall0 + 1000, 2 * S, 7 * S), 0);
    /* sent at 2 s, Redis ran it 4.9 s later (queued), read at once */
    ck_assert_int_eq(clock_jump_feed(&c, wall0 + 5900, 2 * S, 7 * S), 0);
    ck_assert_int_eq(feed(&c, 8 * S, 200, wall0 + 7000), 0);
    /* no time in the reply, a reply before its send: ignored */
    ck_assert_int_eq(clock_jump_feed(&c, 0, 9 * S, 9 * S), 0);
    ck_assert_int_eq(clock_jump_feed(&c, wall0 + 50000, 10 * S, 9 * S), 0);
    ck_assert_uint_eq(c.last_us, 0);
}
END_TEST

/* The warning stays CLOCK_JUMP_QUIET_US after the last jump; another jump
 * restarts the wait. */
START_TEST(quiet_period)
{
    struct clock_jump c = {0};
    const int64_t wall0 = 1796550000000;
    ck_assert_int_eq(clock_jump_quiet(&c, 100 * S), 0); /* nothing seen */
    ck_assert_int_eq(feed(&c, 1 * S, 200, wall0), 0);
    ck_assert_int_lt(feed(&c, 2 * S, 200, wall0 + 1000 - 20000), 0); /* back 20 s */
    ck_assert_int_eq(clock_jump_quiet(&c, 2 * S + CLOCK_JUMP_QUIET_US - 1), 0);
    ck_assert_int_gt(feed(&c, 30 * S, 200, wall0 + 29000), 0); /* forward 20 s */
    ck_assert_int_eq(clock_jump_quiet(&c, 2 * S + CLOCK_JUMP_QUIET_US + 1), 0);
    ck_assert_int_eq(clock_jump_quiet(&c, 30 * S + CLOCK_JUMP_QUIET_US + 200), 1);
    clock_jump_cleared(&c);
    ck_assert_int_eq(clock_jump_quiet(&c, 1000 * S), 0);
    ck_assert_int_eq(feed(&c, 31 * S, 200, wall0 + 30000), 0); /* baseline kept */
}
END_TEST

START_TEST(message_names_size_sign_and_meaning)
{
    char buf[320];
    clock_jump_message(buf, sizeof(buf), -20000400);
    ck_assert_msg(strstr(buf, "back 20.000 s") != NULL, "%s", buf);
    ck_assert_msg(strstr(buf, "rebase") != NULL, "%s", buf);
    clock_jump_message(buf, sizeof(buf), 3600000000LL);
    ck_assert_msg(strstr(buf, "forward 3600.000 s") != NULL, "%s", buf);
    ck_assert_msg(strstr(buf, "extra burst") != NULL, "%s", buf);
    ck_assert_msg(strstr(buf, "NTP") != NULL, "%s", buf);
}
END_TEST

int main(void)
{
    TCase *tc = tcase_create("clock_jump");
    CHECK_LOOP(tc, step_sign_and_size, steps);
    CHECK_ADD(tc, slow_drift_is_no_jump, late_replies_are_no_jump, quiet_period,
              message_names_size_sign_and_meaning);
    return check_run_case("clock_jump", tc);
}
