/* SPDX-License-Identifier: Apache-2.0 */
/* slab.c - fixed-size slots from populated chunks (slab.h). */
#include "slab.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#if defined(__SANITIZE_ADDRESS__)
#define SLAB_PLAIN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SLAB_PLAIN 1
#endif
#endif

struct slab_chunk {
    struct slab_chunk *next;
    size_t bytes;
} __attribute__((aligned(16)));

struct slab_slot {
    struct slab_slot *next;
};

void slab_init(struct slab *s, size_t size)
{
    memset(s, 0, sizeof(*s));
    if (size < sizeof(struct slab_slot))
        size = sizeof(struct slab_slot);
    s->slot = (size + 15) & ~(size_t)15;
    s->next_chunk = SLAB_MIN_CHUNK;
}

#ifdef SLAB_PLAIN

void *slab_alloc(struct slab *s)
{
    return calloc(1, s->slot);
}

void slab_free(struct slab *s, void *p)
{
    (void)s;
    free(p);
}

void slab_release(struct slab *s)
{
    slab_init(s, s->slot);
}

#else

/* Map a new chunk to carve from. 0, or -1 when out of memory. */
static int grow(struct slab *s)
{
    size_t bytes = s->next_chunk;
    struct slab_chunk *c;

    while (bytes < sizeof(*c) + s->slot)
        bytes *= 2;
    c = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1,
             0);
    if (c == MAP_FAILED)
        return -1;
    c->next = s->chunks;
    c->bytes = bytes;
    s->chunks = c;
    s->carve = (char *)(c + 1);
    s->carve_end = (char *)c + bytes;
    if (s->next_chunk < SLAB_MAX_CHUNK)
        s->next_chunk *= 2;
    return 0;
}

void *slab_alloc(struct slab *s)
{
    void *p;

    if (s->free) {
        p = s->free;
        s->free = s->free->next;
        memset(p, 0, s->slot);
        return p;
    }
    if ((size_t)(s->carve_end - s->carve) < s->slot && grow(s) < 0)
        return NULL;
    p = s->carve; /* fresh from mmap: already zero */
    s->carve += s->slot;
    return p;
}

void slab_free(struct slab *s, void *p)
{
    struct slab_slot *f = p;

    if (!f)
        return;
    f->next = s->free;
    s->free = f;
}

void slab_release(struct slab *s)
{
    while (s->chunks) {
        struct slab_chunk *c = s->chunks;
        s->chunks = c->next;
        munmap(c, c->bytes);
    }
    slab_init(s, s->slot);
}

#endif
