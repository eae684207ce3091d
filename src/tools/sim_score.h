/* SPDX-License-Identifier: Apache-2.0 */
/* sim_score.h - what both runs (sim_fleet.c, sim_rate.c) measure the same
 * way: beside the fleet, one exact in-memory bucket per key (bucket.c, as a
 * standalone agent) decides every request too, the reference for
 * utilisation and false denials; the fleet's and the reference's admissions
 * are checked against the bound b + r T over every window (sim_stats.h); and
 * the decisions' waits go into a histogram. Single-threaded; never prints. */
#ifndef SIM_SCORE_H
#define SIM_SCORE_H

#include <stdint.h>

#include "limits/bucket.h"
#include "tools/sim.h"
#include "tools/sim_stats.h"

struct sim_score {
    struct bucket_params p; /* the rule */
    struct bucket *ref;     /* the reference, per key */
    struct sim_window *win, *refwin;
    struct sim_bound bound, refbound; /* the fleet's and the reference's */
    struct sim_hist wait_h;
    int tokens;  /* --cost: utilisation in tokens (admitted / the reference's) */
    int nobound; /* --concurrency: no rate, no b + r*T to check */
};

/* For keys keys of rule p (its burst, or its limit for a sliding window,
 * is the bound's b), every bucket full (or empty) at SIM_T0_US. 0, or -1
 * out of memory (free it still). */
int sim_score_init(struct sim_score *sc, const struct bucket_params *p, uint64_t keys);
void sim_score_free(struct sim_score *sc);

/* The reference's decision for a request on key at now (virtual time): 1
 * admitted (counted in r->ref_admitted), 0 denied. */
int sim_score_reference(struct sim_score *sc, struct sim_result *r, uint32_t key, uint64_t now);

/* The same for a request of n tokens (--cost): the bound counts tokens. With
 * the rule's block_for, a denial inside the reference's own block counts in
 * r->models.ref_block_denials, one that starts a block in blocks_started. */
int sim_score_reference_n(struct sim_score *sc, struct sim_result *r, uint32_t key, uint64_t now,
                          uint64_t n);

/* The fleet's decision for a request on key, taken at now after waiting
 * wait_us; ref_allowed is the reference's. Counted in r. */
void sim_score_record(struct sim_score *sc, struct sim_result *r, uint32_t key, int allowed,
                      int ref_allowed, uint64_t now, uint64_t wait_us);

/* The same for a request of n tokens. */
void sim_score_record_n(struct sim_score *sc, struct sim_result *r, uint32_t key, int allowed,
                        int ref_allowed, uint64_t now, uint64_t wait_us, uint64_t n);

/* r's utilisation, window excesses and waits, from the score. */
void sim_score_finish(const struct sim_score *sc, struct sim_result *r);

#endif
