/* SPDX-License-Identifier: Apache-2.0 */
/* fleet.h - how many agents share the limits, and the fail-open share that
 * follows from it.
 *
 * The heartbeat (store/store_heartbeat.c) reads the count of agents live in
 * the fleet while Redis is up and records it here. [fallback] share = auto
 * gives each agent 1/N of every rule, and N must not collapse when the
 * heartbeat set is lost or being rebuilt (Redis restarted empty, FLUSHDB, a
 * forward step of Redis' clock, a partition): N is the largest count read
 * over the last FLEET_WINDOW_US (a decaying max, in FLEET_SLOTS slots, so
 * the max falls FLEET_WINDOW_US - FLEET_SLOT_US to FLEET_WINDOW_US after a
 * real scale-down, and rises at once on a scale-up). A count read while the
 * set is being rebuilt (just after Redis came up) can raise N but never
 * lowers it, and keeps the N held alive. While Redis is down no count comes
 * and N stays as it is: the agents serving in fallback keep counting.
 *
 * An agent that stops cleanly leaves at once: it removes its heartbeat and
 * adds one to the fleet's count of departures; each agent that reads that
 * count grow by k lowers every count its window holds by k (never below the
 * count read with it), so N follows a deploy within a heartbeat. Only a
 * departure said so lowers N: a lost set or counter never does (a counter
 * that went back is taken as the new base, nothing subtracted).
 *
 * The window is pure (time passed in; fleet_window_*); the process-wide
 * copy is written from the loop thread only and read from every worker
 * through an atomic, no lock.
 */
#ifndef FLEET_H
#define FLEET_H

#include <stdint.h>

/* Longer than the heartbeat's liveness (STORE_HEARTBEAT_LIVE, 20 s) with
 * room to spare: three of them (checked in store_heartbeat.c). */
#define FLEET_WINDOW_US 60000000ULL
#define FLEET_SLOTS 6
#define FLEET_SLOT_US (FLEET_WINDOW_US / FLEET_SLOTS)

/* The largest count of each slot of FLEET_SLOT_US, by the slot's number
 * (now_us / FLEET_SLOT_US); zero-initialised = nothing seen. */
struct fleet_window {
    uint64_t slot_no[FLEET_SLOTS];
    unsigned slot_max[FLEET_SLOTS];
    unsigned n;     /* the N in force: the max over the window at the last add */
    uint64_t left;  /* the fleet's count of clean departures last read */
    int left_known; /* left was read once: the base later reads are to */
};

/* Record a count n >= 1 read at now_us (monotonic). rebuilding: the read
 * came while the heartbeat set may still be filling up again (just after
 * Redis came up): then it counts as max(n, the N in force). Returns the N in
 * force afterwards: the max over the slots of the last FLEET_WINDOW_US.
 * n == 0 is ignored (no count). */
unsigned fleet_window_add(struct fleet_window *w, unsigned n, uint64_t now_us, int rebuilding);

/* Read with the count n: the fleet's count of clean departures, left. What
 * it grew by since the last read is taken off every slot (not below n, nor
 * 1); the first read, or a count lower than the last (the counter was lost),
 * only sets the base. Call before fleet_window_add of the same n. Returns
 * the departures taken off. */
unsigned fleet_window_left(struct fleet_window *w, uint64_t left, unsigned n);

/* The N in force (0: no count yet). Unchanged between two adds: it decays
 * only as new counts come, never while Redis is down. */
unsigned fleet_window_get(const struct fleet_window *w);

/* The process-wide window: fleet_window_add on it, from the loop thread. */
void fleet_set_agents(unsigned n, uint64_t now_us, int rebuilding);

/* fleet_window_left on the process-wide window, before fleet_set_agents. */
unsigned fleet_set_left(uint64_t left, unsigned n);

/* The N in force process-wide, 0 while no count came (Redis never reached). */
unsigned fleet_agents(void);

/* Forget every count (tests, and nothing else). */
void fleet_reset(void);

/* The share the fallback backstop gets: configured when it is a number in
 * (0, 1]; for CFG_SHARE_AUTO (0), 1/N with N = fleet_agents(), and 1 while
 * N is unknown (an agent that never reached Redis cannot know its fleet:
 * failing open, it takes the whole limit rather than a guess). */
double fleet_share(double configured);

#endif
