/* SPDX-License-Identifier: Apache-2.0 */
/* sim_stats.h - the simulator's measures: a log-linear histogram for
 * percentiles, and the exact check of the fleet bound over every window. */
#ifndef SIM_STATS_H
#define SIM_STATS_H

#include <stdint.h>

#include "limits/bucket.h"

/* Values 0..31 exactly, then 32 buckets per power of two (3 % wide). */
#define SIM_HIST_BUCKETS (32 + 59 * 32 + 32)

struct sim_hist {
    uint64_t count, max;
    uint64_t b[SIM_HIST_BUCKETS];
};

void sim_hist_add(struct sim_hist *h, uint64_t v);
/* The q-quantile (0..1), rounded up to its bucket's upper edge: never
 * below the true value. 0 when empty. */
uint64_t sim_hist_quantile(const struct sim_hist *h, double q);

/* The bound "at most b + r*T in any interval T" checked exactly, one key's
 * admissions at a time in time order. For admissions i <= j at times t_i <=
 * t_j, the interval [t_i, t_j] holds j - i + 1 of them; its excess
 *   (j - i + 1) - b - r (t_j - t_i),   r = limit / period,
 * times period is A_j - A_i + (1 - b) period with A_k = k period - limit t_k,
 * so the worst window ending at j needs only the least A_i so far: O(1) per
 * admission, in integers. */
struct sim_window {
    uint64_t n;    /* admissions (tokens: sim_bound_admit_n) so far */
    int64_t min_a; /* least A_i */
};

struct sim_bound {
    uint64_t limit, period_us, burst;
    __int128 worst; /* the largest excess x period seen; starts at -burst x period */
    int overflow;   /* A did not fit 64 bits: the check is void */
};

void sim_bound_init(struct sim_bound *b, uint64_t limit, uint64_t period_us, uint64_t burst);
/* The b of the bound b + r*T that a rule of algorithm keeps, given its N
 * (limit) and burst: a token bucket's burst; a sliding window's N (its
 * estimate aims at it: not asserted); a fixed window's 2N: N per window,
 * so N just before a boundary and N just after in any interval, and at
 * most N x (T / period + 2) in one of length T. */
static inline uint64_t sim_bound_burst(enum bucket_algorithm algorithm, uint64_t limit,
                                       uint64_t burst)
{
    return algorithm == BUCKET_FIXED_WINDOW     ? 2 * limit
           : algorithm == BUCKET_SLIDING_WINDOW ? limit
                                                : burst;
}
/* An admission of w's key at t_us (relative to the start, non-decreasing). */
void sim_bound_admit(struct sim_bound *b, struct sim_window *w, uint64_t t_us);
/* The same for an admission of n tokens (a request's cost): the bound is
 * then in tokens. With C_k the tokens of admissions 1..k, the window [t_i,
 * t_j] holds C_j - C_(i-1); with B_i = C_(i-1) period - limit t_i (taken
 * before i's tokens count), its excess x period is
 *   C_j period - limit t_j - B_i - b period,
 * so the least B_i so far still does: n = 1 is sim_bound_admit exactly. */
void sim_bound_admit_n(struct sim_bound *b, struct sim_window *w, uint64_t t_us, uint64_t n);
/* The worst excess in requests (<= 0: the bound held); NaN after overflow. */
double sim_bound_worst(const struct sim_bound *b);

#endif
