/* SPDX-License-Identifier: Apache-2.0 */
/* fleet.h - how many agents share the limits, and the fail-open share that
 * follows from it.
 *
 * The heartbeat (store/store_heartbeat.c) counts the agents live in the
 * fleet while Redis is up and records the count here; while Redis is down
 * the last count stays, so that [fallback] share = auto gives each agent
 * 1/N of every rule, N the fleet as it was when Redis was last up. Written
 * from the loop thread, read from every worker: an atomic, no lock.
 */
#ifndef FLEET_H
#define FLEET_H

/* Record the number of live agents (this one included); 0 = not known. */
void fleet_set_agents(unsigned n);

/* The last number recorded, 0 while none was (Redis never reached). */
unsigned fleet_agents(void);

/* The share the fallback backstop gets: configured when it is a number in
 * (0, 1]; for CFG_SHARE_AUTO (0), 1/N with N = fleet_agents(), and 1 while
 * N is unknown (an agent that never reached Redis cannot know its fleet:
 * failing open, it takes the whole limit rather than a guess). */
double fleet_share(double configured);

#endif
