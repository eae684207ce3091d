/* SPDX-License-Identifier: Apache-2.0 */
/* sim_heap.h - the simulators' event queue in virtual time: a binary heap
 * ordered by time, then by push order (so events due at the same time run
 * in the order they were pushed, and a run is deterministic for a seed).
 * Shared by the token-lease run (sim_fleet.c) and the rate-lease model
 * (sim_rate.c); what an event means (kind, agent, key, p) is theirs. */
#ifndef SIM_HEAP_H
#define SIM_HEAP_H

#include <stddef.h>
#include <stdint.h>

struct sim_event {
    uint64_t at;  /* virtual time, us */
    uint64_t seq; /* push order: ties run first in, first out */
    int kind;
    unsigned agent;
    uint32_t key;
    void *p; /* the caller's: a command, a call, or NULL */
};

struct sim_heap {
    struct sim_event *ev;
    size_t n, cap;
    uint64_t seq;
};

/* Queue an event. 0, or -1 when out of memory (the heap is unchanged). */
int sim_heap_push(struct sim_heap *h, uint64_t at, int kind, unsigned agent, uint32_t key, void *p);
/* Take the earliest event; the heap must not be empty (h->n > 0). */
struct sim_event sim_heap_pop(struct sim_heap *h);
/* Free the array (events still queued are dropped: pop them first to free
 * what their p points to). */
void sim_heap_free(struct sim_heap *h);

#endif
