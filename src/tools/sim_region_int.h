/* SPDX-License-Identifier: Apache-2.0 */
/* sim_region_int.h - spoa-sim --regions' state, shared by sim_region.c (the
 * model) and sim_region_fail.c (its failures: --global-restart,
 * --claimer-kill). Internal to the simulator. */
#ifndef SIM_REGION_INT_H
#define SIM_REGION_INT_H

#include <stdint.h>

#include "global/gplan.h"
#include "store/script.h"
#include "tools/sim_fleet_int.h"

struct rkey {                                   /* one key in one region */
    struct gkey k;                              /* the claimer's state (gplan.h) */
    uint64_t granted, mine, lease_ms, retry_ms; /* the global bucket's answer to its call */
    uint64_t last_req;                          /* its last request in the region (0: none) */
};

struct region {
    struct sim_redis *redis;
    char id[24];
    struct rkey *k;
    uint32_t *active; /* keys that hold or saw demand */
    size_t nactive;
    unsigned char *is_active;
    int inflight, down, backstop;
    uint64_t sent_at;
    int dead;            /* --claimer-kill: no claimer until a successor takes the lock */
    uint64_t lock_until; /* the claimer's lease lock in the regional Redis, renewed each tick */
};

struct sim_regions_run {
    unsigned n, per;
    uint64_t nkeys;
    struct region *r;
    struct sim_redis *global;
    uint64_t gttl_us, gtimeout_us, down_start, down_end;
    uint64_t *down_adm;        /* per key: admitted during --global-down */
    uint64_t settle_end;       /* backstop tokens are gone by then */
    struct sim_bound outbound; /* b + r T outside [down_start, settle_end) */
    struct sim_window *outwin; /* per key */
    /* sim_region_fail.c */
    int dl_rule; /* the claimer sends the deadline (dl) with its deposits (off: :nodeadline) */
    uint64_t lock_ttl_us, takeover_at;
};

/* sim_region_pool.c: the name of key k's bucket (global: in the global
 * Redis), and the registry's tb_pool (the claimer's regional script, lua/README.md
 * "Fed buckets") on region R's bucket of key k: move amt tokens in or out;
 * dl_ms > 0 stores the deadline dl_ms from now (< 0 clears it, 0 leaves it).
 * out: POOL_R_* (tokens lost past a deadline are counted as refused). */
size_t sim_region_key_name(uint32_t k, int global, char *buf);
int sim_region_pool(struct sim *s, struct region *R, uint32_t k, int64_t amt, int64_t dl_ms,
                    int64_t out[POOL_R_COUNT]);
/* The claimer's settings for the rule (gplan.h). */
struct gplan_cfg sim_region_cfg(const struct sim *s);
/* sim_region_fail.c: queue the failures' events; run one (EV_REGION with
 * arg SIM_REGION_RESTART or SIM_REGION_KILL); a tick of a dead claimer's
 * region (1: it stays idle); the successor's start. */
#define SIM_REGION_RESTART 1u
#define SIM_REGION_KILL 2u
void sim_region_fail_setup(struct sim *s);
void sim_region_fail_event(struct sim *s, unsigned region, uint32_t what);
int sim_region_fail_tick(struct sim *s, struct region *R);

#endif
