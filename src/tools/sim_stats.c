/* SPDX-License-Identifier: Apache-2.0 */
/* sim_stats.c - histogram and window check of the simulator. */
#include "tools/sim_stats.h"

#include <math.h>

static unsigned bucket_of(uint64_t v)
{
    if (v < 32)
        return (unsigned)v;
    unsigned e = 63u - (unsigned)__builtin_clzll(v); /* 2^e <= v < 2^(e+1), e >= 5 */
    return 32 + (e - 5) * 32 + (unsigned)((v >> (e - 5)) - 32);
}

/* The largest value that falls in bucket i. */
static uint64_t upper_of(unsigned i)
{
    if (i < 32)
        return i;
    unsigned e = (i - 32) / 32 + 5, sub = (i - 32) % 32;
    uint64_t lo = ((uint64_t)(32 + sub)) << (e - 5);
    return lo + (((uint64_t)1) << (e - 5)) - 1;
}

void sim_hist_add(struct sim_hist *h, uint64_t v)
{
    h->b[bucket_of(v)]++;
    h->count++;
    if (v > h->max)
        h->max = v;
}

uint64_t sim_hist_quantile(const struct sim_hist *h, double q)
{
    if (h->count == 0)
        return 0;
    uint64_t rank = (uint64_t)ceil(q * (double)h->count), seen = 0;
    if (rank < 1)
        rank = 1;
    for (unsigned i = 0; i < SIM_HIST_BUCKETS; i++) {
        seen += h->b[i];
        if (seen >= rank) {
            uint64_t u = upper_of(i);
            return u < h->max ? u : h->max;
        }
    }
    return h->max;
}

void sim_bound_init(struct sim_bound *b, uint64_t limit, uint64_t period_us, uint64_t burst)
{
    b->limit = limit;
    b->period_us = period_us;
    b->burst = burst;
    b->worst = -(__int128)burst * period_us; /* the empty window */
    b->overflow = 0;
}

void sim_bound_admit(struct sim_bound *b, struct sim_window *w, uint64_t t_us)
{
    sim_bound_admit_n(b, w, t_us, 1);
}

void sim_bound_admit_n(struct sim_bound *b, struct sim_window *w, uint64_t t_us, uint64_t n)
{
    __int128 a = (__int128)w->n * b->period_us - (__int128)b->limit * t_us;
    if (a > INT64_MAX || a < INT64_MIN) {
        b->overflow = 1;
        return;
    }
    if (w->n == 0 || a < w->min_a)
        w->min_a = (int64_t)a;
    w->n += n;
    __int128 excess = a - w->min_a + ((__int128)n - (__int128)b->burst) * b->period_us;
    if (excess > b->worst)
        b->worst = excess;
}

double sim_bound_worst(const struct sim_bound *b)
{
    if (b->overflow)
        return NAN;
    return (double)b->worst / (double)b->period_us;
}
