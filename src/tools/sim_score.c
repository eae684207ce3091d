/* SPDX-License-Identifier: Apache-2.0 */
/* sim_score.c - the reference and the measures both runs share (see
 * sim_score.h). */
#include "tools/sim_score.h"

#include <stdlib.h>
#include <string.h>

int sim_score_init(struct sim_score *sc, const struct bucket_params *p, uint64_t keys)
{
    memset(sc, 0, sizeof(*sc));
    sc->p = *p;
    sc->ref = malloc(keys * sizeof(*sc->ref));
    sc->win = calloc(keys, sizeof(*sc->win));
    sc->refwin = calloc(keys, sizeof(*sc->refwin));
    if (!sc->ref || !sc->win || !sc->refwin)
        return -1;
    for (uint64_t k = 0; k < keys; k++) /* full (token bucket) or empty (window) from the start */
        bucket_init(&sc->ref[k], p, SIM_T0_US);
    sim_bound_init(&sc->bound, p->limit, p->period_us,
                   sim_bound_burst(p->algorithm, p->limit, p->burst));
    sc->refbound = sc->bound;
    return 0;
}

void sim_score_free(struct sim_score *sc)
{
    free(sc->ref);
    free(sc->win);
    free(sc->refwin);
    sc->ref = NULL;
    sc->win = sc->refwin = NULL;
}

int sim_score_reference(struct sim_score *sc, struct sim_result *r, uint32_t key, uint64_t now)
{
    return sim_score_reference_n(sc, r, key, now, 1);
}

int sim_score_reference_n(struct sim_score *sc, struct sim_result *r, uint32_t key, uint64_t now,
                          uint64_t n)
{
    struct bucket_result rr;
    struct bucket *b = &sc->ref[key];
    int in_block = sc->p.block_us && b->blocked_until_us > now;

    bucket_take(b, &sc->p, now, n, &rr);
    if (!rr.allowed) {
        r->models.ref_block_denials += in_block;
        r->models.blocks_started += !in_block && sc->p.block_us && b->blocked_until_us > now;
        return 0;
    }
    r->ref_admitted++;
    r->models.ref_admitted_tokens += n;
    sim_bound_admit_n(&sc->refbound, &sc->refwin[key], now - SIM_T0_US, n);
    return 1;
}

void sim_score_record(struct sim_score *sc, struct sim_result *r, uint32_t key, int allowed,
                      int ref_allowed, uint64_t now, uint64_t wait_us)
{
    sim_score_record_n(sc, r, key, allowed, ref_allowed, now, wait_us, 1);
}

void sim_score_record_n(struct sim_score *sc, struct sim_result *r, uint32_t key, int allowed,
                        int ref_allowed, uint64_t now, uint64_t wait_us, uint64_t n)
{
    r->decisions++;
    r->models.tokens += n;
    sim_hist_add(&sc->wait_h, wait_us);
    if (wait_us > 0)
        r->waited++;
    if (allowed) {
        r->admitted++;
        r->models.admitted_tokens += n;
        if (!sc->nobound)
            sim_bound_admit_n(&sc->bound, &sc->win[key], now - SIM_T0_US, n);
        if (!ref_allowed)
            r->extra_admits++;
    } else if (ref_allowed) {
        r->false_denials++;
    }
}

void sim_score_finish(const struct sim_score *sc, struct sim_result *r)
{
    if (sc->tokens) /* --cost: in tokens */
        r->utilisation = r->models.ref_admitted_tokens ? (double)r->models.admitted_tokens /
                                                             (double)r->models.ref_admitted_tokens
                                                       : 1;
    else
        r->utilisation = r->ref_admitted ? (double)r->admitted / (double)r->ref_admitted : 1;
    r->worst_window_excess = sim_bound_worst(&sc->bound);
    r->ref_worst_window_excess = sim_bound_worst(&sc->refbound);
    r->wait_p99_ms = (double)sim_hist_quantile(&sc->wait_h, 0.99) / 1000.0;
    r->wait_max_ms = (double)sc->wait_h.max / 1000.0;
}
