/* SPDX-License-Identifier: Apache-2.0 */
/* slab.h - fixed-size slots carved from chunks the kernel fills at once.
 *
 * For the lease cache: on the cold path (a new client key per decision)
 * every entry was fresh heap memory, and each new page cost a page fault,
 * which on a virtual machine is dear (it showed as a large part of the
 * agent's CPU per decision). Here chunks are mapped with MAP_POPULATE, one
 * system call for many pages; they grow from SLAB_MIN_CHUNK to
 * SLAB_MAX_CHUNK bytes, so a small cache stays small. Freed slots are kept
 * for reuse and the chunks are unmapped only by slab_release(): memory is
 * bounded by what the cache held at its peak ([agent] max_entries).
 *
 * Not thread-safe: the owner locks (the lease cache: per stripe). Built
 * with AddressSanitizer, slots are plain calloc/free so that overruns are
 * still caught.
 */
#ifndef SLAB_H
#define SLAB_H

#include <stddef.h>

#define SLAB_MIN_CHUNK (16u << 10)
#define SLAB_MAX_CHUNK (1u << 20)

struct slab_chunk;
struct slab_slot;

struct slab {
    size_t slot;               /* bytes per slot, a multiple of 16 */
    struct slab_slot *free;    /* freed slots */
    struct slab_chunk *chunks; /* every chunk mapped, for slab_release */
    char *carve, *carve_end;   /* the newest chunk's slots not handed out yet */
    size_t next_chunk;         /* bytes of the next chunk */
};

/* An empty slab of slots of at least size bytes (rounded up to 16). */
void slab_init(struct slab *s, size_t size);

/* A zeroed slot, or NULL when out of memory. */
void *slab_alloc(struct slab *s);

/* Give back a slot of s (NULL: no-op). */
void slab_free(struct slab *s, void *p);

/* Unmap every chunk: every slot must be free or no longer used. s is empty
 * afterwards (as after slab_init). */
void slab_release(struct slab *s);

#endif
