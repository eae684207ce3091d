/* SPDX-License-Identifier: Apache-2.0 */
/* sim_traffic.h - the requests of a simulation, in time order: generated
 * (Poisson arrivals; Zipf or uniform keys; spread evenly over agents or
 * skewed; rate spikes) or replayed from a trace file. Deterministic for a
 * seed. Never prints: errors go to the caller's buffer. */
#ifndef SIM_TRAFFIC_H
#define SIM_TRAFFIC_H

#include <stddef.h>
#include <stdint.h>

#include "tools/sim.h"

/* xoshiro256**: small, fast, good enough for traffic. */
struct sim_rng {
    uint64_t s[4];
};
void sim_rng_seed(struct sim_rng *r, uint64_t seed);
uint64_t sim_rng_next(struct sim_rng *r);
double sim_rng_unit(struct sim_rng *r); /* [0, 1) */

/* A trace: one request a line, "SECONDS KEY [AGENT]" (seconds since the
 * start, a decimal; the agent a name, any word). Blank lines and lines
 * starting with # are skipped. Keys and agents are numbered in order of
 * first appearance. */
struct sim_trace;
struct sim_trace *sim_trace_load(const char *path, char *err, size_t errlen);
void sim_trace_free(struct sim_trace *t);
uint64_t sim_trace_keys(const struct sim_trace *t);
unsigned sim_trace_agents(const struct sim_trace *t); /* named agents; 0: none named */
uint64_t sim_trace_requests(const struct sim_trace *t);
double sim_trace_seconds(const struct sim_trace *t); /* time of the last request */

struct sim_traffic;
/* Requests for o (o->trace set: its requests; agents beyond o->agents wrap,
 * unnamed ones go round-robin). NULL with a message in err. */
struct sim_traffic *sim_traffic_new(const struct sim_opts *o, char *err, size_t errlen);
void sim_traffic_free(struct sim_traffic *t);
/* The next request: time since the start (us), key (0 = the hottest), agent.
 * 0, or 1 when there are no more before o->seconds. */
int sim_traffic_next(struct sim_traffic *t, uint64_t *at_us, uint32_t *key, unsigned *agent);

#endif
