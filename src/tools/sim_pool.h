/* SPDX-License-Identifier: Apache-2.0 */
/* sim_pool.h - the allocator of spoa-sim's in-process Redis (sim_redis.c). */
#ifndef SIM_POOL_H
#define SIM_POOL_H

#include <stddef.h>

/* Lua's allocations: size classes of 16 bytes up to POOL_MAX, each with a
 * free list, carved from slabs. The interpreter knows the size of what it
 * frees, so blocks need no header; the scripts allocate and drop many small
 * tables and strings per call, where malloc was a quarter of the time. */
#define POOL_MAX 512
#define POOL_CLASSES (POOL_MAX / 16)
#define SLAB (256 * 1024)

struct sim_pool {
    void *free[POOL_CLASSES + 1];
    char *cur, *end; /* the slab being carved */
    void **slabs;    /* every slab, to free them */
    size_t nslabs, capslabs;
};

/* A lua_Alloc (lua_newstate(sim_pool_alloc, pool)): ud is the pool, which
 * starts zeroed. */
void *sim_pool_alloc(void *ud, void *ptr, size_t osize, size_t nsize);
/* Frees every slab (after lua_close). */
void sim_pool_free(struct sim_pool *p);

#endif
