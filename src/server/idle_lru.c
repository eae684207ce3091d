/* SPDX-License-Identifier: Apache-2.0 */
/* idle_lru.c - connections by their last whole frame (see idle_lru.h). */
#include "idle_lru.h"

void idle_lru_init(struct idle_lru *l)
{
    dlist_init(&l->head);
    l->n = 0;
}

void idle_lru_touch(struct idle_lru *l, struct idle_lru_node *n, uint64_t now_us)
{
    if (dlist_linked(&n->link))
        dlist_del(&n->link);
    else
        l->n++;
    if (!dlist_empty(&l->head)) {
        const struct idle_lru_node *tail = IDLE_LRU_ENTRY(l->head.prev, struct idle_lru_node, link);
        if (now_us < tail->last_us)
            now_us = tail->last_us;
    }
    n->last_us = now_us;
    dlist_push_tail(&l->head, &n->link);
}

void idle_lru_del(struct idle_lru *l, struct idle_lru_node *n)
{
    if (!dlist_linked(&n->link))
        return;
    dlist_del(&n->link);
    l->n--;
}

struct idle_lru_node *idle_lru_oldest(const struct idle_lru *l)
{
    if (dlist_empty(&l->head))
        return NULL;
    return IDLE_LRU_ENTRY(l->head.next, struct idle_lru_node, link);
}

struct idle_lru_node *idle_lru_evictable(const struct idle_lru *l, uint64_t now_us,
                                         uint64_t grace_us)
{
    struct idle_lru_node *n = idle_lru_oldest(l);

    /* now_us earlier than the last touch (another clock read): idle 0 */
    if (!n || now_us < n->last_us || now_us - n->last_us < grace_us)
        return NULL;
    return n;
}
