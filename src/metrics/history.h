/* SPDX-License-Identifier: Apache-2.0 */
/* history.h - the last five minutes, one sample a second: each rule's
 * decisions, blocks and would-be blocks, and Redis' latency, so that the
 * status page shows history the moment it opens.
 *
 * Bounded memory: HISTORY_SECONDS samples per rule (three 32-bit counts
 * each, about 3.6 KB a rule) and HISTORY_LATENCY_S histogram snapshots.
 * Rules are the metrics records (metrics_rule_get), which live until exit.
 *
 * Threads: history_sample() and the readers run on one thread (the main
 * loop: a 1 s timer and the stats listener). The counters it reads are the
 * relaxed atomics the workers write. Pure otherwise: the time is passed in. */
#ifndef HISTORY_H
#define HISTORY_H

#include <stddef.h>
#include <stdint.h>

#include "metrics.h"

#define HISTORY_SECONDS 300  /* the sparklines' span */
#define HISTORY_LATENCY_S 60 /* Redis latency percentiles over the last minute */

struct history;

struct history *history_new(void);
void history_free(struct history *h);

/* One sample: what each rule decided since the previous one (the first
 * sample of a rule only sets its baseline), Redis' latency histogram, and
 * Redis' up/down state (for history_redis_down_since). now_s: Unix seconds.
 * Out of memory for a new rule: that rule has no history (its counters are
 * still in /metrics). */
void history_sample(struct history *h, uint64_t now_s);

/* A rule's series after Unix second since (0: all), oldest first, into the
 * arrays (each of HISTORY_SECONDS entries; NULL: not wanted); returns how
 * many samples that is (0 to HISTORY_SECONDS), *last_s the second of the
 * newest (0 with none). A second with no sample (the agent busy, a clock
 * step) counts as zero. */
size_t history_rule(const struct history *h, const struct metrics_rule *r, uint64_t since,
                    uint32_t *decisions, uint32_t *blocks, uint32_t *would_blocks,
                    uint64_t *last_s);

/* Decisions per second of a rule over the last n samples (n >= 1). */
double history_rule_rate(const struct history *h, const struct metrics_rule *r, unsigned n);

/* Redis latency quantile q (0..1) in seconds over the last minute, from the
 * histogram's buckets: the upper bound of the bucket it falls in (an
 * over-estimate by at most one bucket; past the largest bound, 1 s, that
 * bound); -1 with no call in that minute. */
double history_redis_latency(const struct history *h, double q);

/* Unix seconds since when Redis has been down (as sampled), 0 while up or
 * when no Redis is configured. */
uint64_t history_redis_down_since(const struct history *h);

#endif
