/* SPDX-License-Identifier: Apache-2.0 */
/* sim_region_pool.c - spoa-sim --regions: the claimer's call of the
 * registry's tb_pool (lua/README.md, "Fed buckets") on a region's bucket of
 * one key, below both sim_region.c (the claimer) and sim_region_fail.c (the
 * failures), which call it, as gclaim.c's pool_call() does. */
#include "tools/sim_region_int.h"

#include <stdio.h>
#include <string.h>

#include "limits/bucket.h"
#include "tools/sim_fleet_int.h"
#include "tools/sim_redis.h"

size_t sim_region_key_name(uint32_t k, int global, char *buf)
{
    return (size_t)snprintf(buf, KEYBUF, KEY_PREFIX "%st2:" RULE_NAME ":%u", global ? "g:" : "", k);
}

/* What a missing regional key holds: the [global] reserve split over the
 * regions (bucket_fed_reserve), as gclaim_reserve() gives the agent's calls. */
uint64_t sim_region_reserve(const struct sim *s, uint64_t burst)
{
    return bucket_fed_reserve(s->o->global_reserve, s->rg->n, burst);
}

int sim_region_pool(struct sim *s, struct region *R, uint32_t k, int64_t amt, int64_t dl_ms,
                    int64_t out[POOL_R_COUNT])
{
    char key[KEYBUF], a[32], bb[32], d[32], rr[32];
    const char *keys[1] = {key}, *argv[POOL_ARGC_RESERVE] = {a, bb, d, rr};
    size_t kl = sim_region_key_name(k, 0, key), al[POOL_ARGC_RESERVE], n = 0;
    const char *err;

    al[POOL_ARG_AMOUNT] = (size_t)snprintf(a, sizeof(a), "%lld", (long long)amt);
    al[POOL_ARG_BURST] = (size_t)snprintf(bb, sizeof(bb), "%llu", (unsigned long long)s->p.burst);
    al[POOL_ARG_DEADLINE] = (size_t)snprintf(d, sizeof(d), "%lld", (long long)dl_ms);
    uint64_t reserve = sim_region_reserve(s, s->p.burst);
    al[POOL_ARG_RESERVE] =
        (size_t)snprintf(rr, sizeof(rr), "%llu", (unsigned long long)reserve);
    memset(out, 0, POOL_R_COUNT * sizeof(*out));
    int rc = sim_redis_eval(R->redis, SCRIPT_TB_POOL, s->now, 1, keys, &kl,
                            reserve ? POOL_ARGC_RESERVE
                            : dl_ms      ? POOL_ARGC_DEADLINE
                                         : POOL_ARGC,
                            argv, al, out, POOL_R_COUNT, &n,
                            &err);
    if (rc < 0 || n != POOL_R_COUNT) {
        if (s->res->redis_errors++ == 0)
            snprintf(s->res->redis_error, sizeof(s->res->redis_error), "tb_pool: %s",
                     rc < 0 ? err : "short reply");
        memset(out, 0, POOL_R_COUNT * sizeof(*out));
        return -1;
    }
    /* tokens the fed scripts dropped past the deadline, reported once */
    if (out[POOL_R_LOST] > 0)
        s->res->regions.deadline_refused += (uint64_t)out[POOL_R_LOST];
    return 0;
}
