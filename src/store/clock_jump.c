/* SPDX-License-Identifier: Apache-2.0 */
/* clock_jump.c - a step of Redis' clock, seen from its replies (clock_jump.h). */
#include "store/clock_jump.h"

#include <stdio.h>

int64_t clock_jump_feed(struct clock_jump *c, int64_t redis_ms, uint64_t sent_us, uint64_t recv_us)
{
    if (redis_ms <= 0 || recv_us < sent_us)
        return 0;
    /* the offset lies in [lo, hi] */
    int64_t redis_us = redis_ms * 1000;
    int64_t lo = redis_us - (int64_t)recv_us, hi = redis_us + 1000 - (int64_t)sent_us;
    int64_t step = 0;

    if (!c->have) {
        c->have = 1;
        c->base_us = lo + (hi - lo) / 2;
        return 0;
    }
    if (lo > c->base_us + CLOCK_JUMP_MIN_US || hi < c->base_us - CLOCK_JUMP_MIN_US) {
        int64_t mid = lo + (hi - lo) / 2;
        step = mid - c->base_us;
        c->base_us = mid;
        c->last_us = recv_us > 0 ? recv_us : 1;
        c->last_step_us = step;
        return step;
    }
    /* as little a move as this reply needs */
    if (c->base_us < lo)
        c->base_us = lo;
    else if (c->base_us > hi)
        c->base_us = hi;
    return 0;
}

int clock_jump_quiet(const struct clock_jump *c, uint64_t now_us)
{
    return c->last_us != 0 && now_us >= c->last_us + CLOCK_JUMP_QUIET_US;
}

void clock_jump_cleared(struct clock_jump *c)
{
    c->last_us = 0;
    c->last_step_us = 0;
}

int clock_jump_message(char *buf, size_t size, int64_t step_us)
{
    int64_t ms = step_us < 0 ? -step_us / 1000 : step_us / 1000;
    if (step_us < 0)
        return snprintf(buf, size,
                        "Redis' clock stepped back %lld.%03lld s: the scripts rebase the "
                        "buckets and windows they meet (no lockout; what fell between the "
                        "last call and the step is not refilled); fix NTP/chrony on the "
                        "Redis host (slew, do not step)",
                        (long long)(ms / 1000), (long long)(ms % 1000));
    return snprintf(buf, size,
                    "Redis' clock stepped forward %lld.%03lld s: up to one extra burst "
                    "(b + H) per key, once; fix NTP/chrony on the Redis host (slew, do not "
                    "step)",
                    (long long)(ms / 1000), (long long)(ms % 1000));
}
