/* SPDX-License-Identifier: Apache-2.0 */
/* sim_region_int.h - spoa-sim --regions' state, shared by sim_region.c (the
 * model) and sim_region_fail.c (its failures: --global-restart,
 * --claimer-kill). Internal to the simulator. */
#ifndef SIM_REGION_INT_H
#define SIM_REGION_INT_H

#include <stdint.h>

#include "tools/sim_fleet_int.h"

struct rkey {          /* one key in one region */
    uint64_t gheld;    /* what the global bucket counted the region held, at its last answer */
    uint64_t pool;     /* granted, not yet deposited (the regional bucket was full) */
    uint64_t demand;   /* requests in the region since the claimer's last tick */
    double est;        /* demand per interval, decaying */
    uint64_t deadline; /* the region may spend until then (0: holds nothing) */
    uint64_t want, used, ret;         /* the call in flight's operation */
    uint64_t granted, mine, lease_ms; /* its answer */
    uint64_t retry_ms;                /* the global bucket's wait for a token, when empty */
    uint64_t retry_at;                /* no claim before (the global bucket was empty) */
    int op;                           /* in the call in flight */
    double bs_acc;                    /* backstop tokens due, not yet deposited */
    uint64_t bs_last;                 /* the backstop's last deposit */
    int forfeited;                    /* the lease ran out while the global Redis was down */
    int bs_on;                        /* fed by the backstop */
};

struct region {
    struct sim_redis *redis;
    int pool_script;
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
    int dl_rule; /* the deadline lives in the regional bucket (dl): no grant past it */
    uint64_t lock_ttl_us, takeover_at;
};

/* sim_region_pool.c: the claimer's regional script, the name of key k's
 * bucket (global: in the global Redis), and that script on region R's bucket of key
 * k: move amt tokens in or out; dl > 0 stores the time from which the
 * bucket grants nothing (dl < 0 clears it). out: {moved, floor(t), H, dl, lost}. */
extern const char sim_region_pool_lua[];
size_t sim_region_key_name(uint32_t k, int global, char *buf);
int sim_region_pool(struct sim *s, struct region *R, uint32_t k, int64_t amt, uint64_t b,
                    int64_t dl, int64_t out[5]);
/* sim_region_fail.c: queue the failures' events; run one (EV_REGION with
 * arg SIM_REGION_RESTART or SIM_REGION_KILL); a tick of a dead claimer's
 * region (1: it stays idle); the successor's start. */
#define SIM_REGION_RESTART 1u
#define SIM_REGION_KILL 2u
void sim_region_fail_setup(struct sim *s);
void sim_region_fail_event(struct sim *s, unsigned region, uint32_t what);
int sim_region_fail_tick(struct sim *s, struct region *R);

#endif
