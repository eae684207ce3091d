/* SPDX-License-Identifier: Apache-2.0 */
/* idle_lru.h - connections ordered by their last whole frame, to find the
 * one idle the longest in O(1).
 *
 * An intrusive list (a struct idle_lru_node in each connection, no
 * allocation): touching a node moves it to the tail with the time given,
 * so the head is always the node whose last touch is the oldest. A
 * connection that sends nothing, or only part of a frame, is never touched
 * and drifts to the head. The clock is passed in (monotonic microseconds),
 * never read here: pure, unit-tested without sockets.
 *
 * One list per owner (a server worker); not thread-safe.
 */
#ifndef IDLE_LRU_H
#define IDLE_LRU_H

#include <stddef.h>
#include <stdint.h>

#include "core/dlist.h"

struct idle_lru_node {
    struct dlist link; /* zeroed (calloc): on no list */
    uint64_t last_us;  /* the last touch */
};

struct idle_lru {
    struct dlist head; /* head.next: idle the longest */
    size_t n;
};

/* The node holding link n, a member called field of type. */
#define IDLE_LRU_ENTRY(n, type, field) ((type *)((char *)(n)-offsetof(type, field)))

void idle_lru_init(struct idle_lru *l);

/* n was active at now_us: it goes (or moves) to the tail. A time earlier
 * than the tail's (a caller's clock read before another's) takes the tail's,
 * so that the list stays ordered. */
void idle_lru_touch(struct idle_lru *l, struct idle_lru_node *n, uint64_t now_us);

/* Take n off the list; a node on none is left as it is. */
void idle_lru_del(struct idle_lru *l, struct idle_lru_node *n);

/* The node idle the longest, or NULL when the list is empty. */
struct idle_lru_node *idle_lru_oldest(const struct idle_lru *l);

/* The node idle the longest if it has been idle at least grace_us at now_us,
 * else NULL (then every node is younger than the grace). */
struct idle_lru_node *idle_lru_evictable(const struct idle_lru *l, uint64_t now_us,
                                         uint64_t grace_us);

#endif
