/* SPDX-License-Identifier: Apache-2.0 */
/* bucket_fixture.h - what the bucket tests (test_bucket_*.c) share: time
 * units in microseconds, the two algorithms, params in one call, a
 * replayable random sequence and a probe that leaves the bucket alone.
 * bt_: bucket tests. */
#ifndef BUCKET_FIXTURE_H
#define BUCKET_FIXTURE_H

#include <stdint.h>

#include "limits/bucket.h"

#define SEC 1000000ULL
#define MINUTE (60 * SEC)
#define HOUR (60 * MINUTE)
#define DAY (24 * HOUR)

#define TB 0 /* enum cfg_algorithm */
#define SW 1

static inline struct bucket_params bt_params(int algorithm, uint64_t limit, uint64_t period_us,
                                             uint64_t burst)
{
    struct bucket_params p = {.algorithm = algorithm,
                              .limit = limit,
                              .period_us = period_us,
                              .burst = burst,
                              .period_ms = period_us / 1000};
    return p;
}

/* Deterministic xorshift64* so the randomised tests replay exactly. */
static inline uint64_t bt_rng_next(uint64_t *s)
{
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return *s * 0x2545f4914f6cdd1dULL;
}

/* Take on a copy, so a probe does not disturb the state it probes. */
static inline int bt_allowed_at(const struct bucket *b, const struct bucket_params *p, uint64_t now,
                                uint64_t n)
{
    struct bucket c = *b;
    struct bucket_result r;
    bucket_take(&c, p, now, n, &r);
    return r.allowed;
}

#endif
