/* SPDX-License-Identifier: Apache-2.0 */
/* clock_jump.h - tell a step of Redis' clock from time passing: Redis' time,
 * as the scripts' replies carry it (EXACT_R_TIME_MS), against the agent's own
 * monotonic clock. Pure: every time is passed in; no I/O, no clock read.
 *
 * Each reply bounds the offset o = Redis' clock - the monotonic clock: Redis
 * read its time somewhere between the send and the reply, so o lies in
 * [redis - recv, redis + 1 ms - sent] (the time is floored to ms). The
 * baseline is one offset, moved only as far as each such interval needs (a
 * clock slewed by NTP, or the two clocks' rates, move it slowly and it
 * follows). An interval more than CLOCK_JUMP_MIN_US beyond the baseline, on
 * either side, is a jump: Redis' clock stepped (NTP stepping it, a VM
 * restored, a failover to a master whose clock is off). A slow reply widens
 * its interval and can never make one. The baseline then restarts from it.
 *
 * One per Redis server (a Cluster's nodes have clocks of their own).
 */
#ifndef CLOCK_JUMP_H
#define CLOCK_JUMP_H

#include <stddef.h>
#include <stdint.h>

/* A change of the offset over this, beyond the round trip, is a jump. */
#define CLOCK_JUMP_MIN_US 1000000
/* The warning stays this long after the last jump (doc/operations.md). */
#define CLOCK_JUMP_QUIET_US 60000000

struct clock_jump {
    int have;             /* a baseline (0: none yet) */
    int64_t base_us;      /* the offset, Redis' clock - monotonic, us */
    uint64_t last_us;     /* monotonic time of the last jump; 0: none */
    int64_t last_step_us; /* its size: > 0 forward, < 0 back */
};

/* Feed one reply: redis_ms, Redis' time in it (Unix ms, floored), of a call
 * sent at sent_us and answered at recv_us (monotonic us: sent_us no later than
 * the send, recv_us no earlier than the reply; recv_us >= sent_us). Returns
 * the step in us (> 0: Redis' clock went forward, < 0: back) when it is a
 * jump, else 0. A redis_ms <= 0 (no time) is ignored. */
int64_t clock_jump_feed(struct clock_jump *c, int64_t redis_ms, uint64_t sent_us, uint64_t recv_us);

/* 1 when a jump was seen and none since for CLOCK_JUMP_QUIET_US up to now_us:
 * time to clear the warning (then clock_jump_cleared). */
int clock_jump_quiet(const struct clock_jump *c, uint64_t now_us);

/* Forget the last jump (the warning was cleared); the baseline stays. */
void clock_jump_cleared(struct clock_jump *c);

/* The warning's text for a step of step_us: its size, sign and what it does
 * to the bound. Returns what snprintf returns. */
int clock_jump_message(char *buf, size_t size, int64_t step_us);

#endif
