/* SPDX-License-Identifier: Apache-2.0 */
/* sim_pool.c - Lua's allocator in spoa-sim's Redis (sim_pool.h). */
#include "tools/sim_pool.h"

#include <stdlib.h>
#include <string.h>

static void *pool_get(struct sim_pool *p, size_t n)
{
    if (n > POOL_MAX)
        return malloc(n);
    size_t c = (n + 15) / 16;
    void *b = p->free[c];
    if (b) {
        p->free[c] = *(void **)b;
        return b;
    }
    if ((size_t)(p->end - p->cur) < c * 16) {
        if (p->nslabs == p->capslabs) {
            size_t cap = p->capslabs ? p->capslabs * 2 : 64;
            void **s = realloc(p->slabs, cap * sizeof(*s));
            if (!s)
                return NULL;
            p->slabs = s;
            p->capslabs = cap;
        }
        char *slab = malloc(SLAB);
        if (!slab)
            return NULL;
        p->slabs[p->nslabs++] = slab;
        p->cur = slab;
        p->end = slab + SLAB; /* the rest of the old slab is left unused */
    }
    b = p->cur;
    p->cur += c * 16;
    return b;
}

static void pool_put(struct sim_pool *p, void *b, size_t n)
{
    if (n > POOL_MAX) {
        free(b);
        return;
    }
    size_t c = (n + 15) / 16;
    *(void **)b = p->free[c];
    p->free[c] = b;
}

void *sim_pool_alloc(void *ud, void *ptr, size_t osize, size_t nsize)
{
    struct sim_pool *p = ud;
    if (nsize == 0) {
        if (ptr)
            pool_put(p, ptr, osize);
        return NULL;
    }
    if (!ptr)
        return pool_get(p, nsize);
    if (osize > POOL_MAX && nsize > POOL_MAX)
        return realloc(ptr, nsize);
    if (osize <= POOL_MAX && nsize <= POOL_MAX && (osize + 15) / 16 == (nsize + 15) / 16)
        return ptr;
    void *b = pool_get(p, nsize);
    if (!b)
        return NULL; /* Lua keeps ptr */
    memcpy(b, ptr, osize < nsize ? osize : nsize);
    pool_put(p, ptr, osize);
    return b;
}

void sim_pool_free(struct sim_pool *p)
{
    for (size_t i = 0; i < p->nslabs; i++)
        free(p->slabs[i]);
    free(p->slabs);
}
