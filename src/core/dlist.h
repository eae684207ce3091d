/* SPDX-License-Identifier: Apache-2.0 */
/* dlist.h - an intrusive doubly-linked list: a struct dlist member in each
 * element, a struct dlist as the head (a circle through the head: an empty
 * list points at itself). No allocation; O(1) insert, remove and move.
 *
 * Pure, header only. Not thread-safe: the owner's lock protects a list.
 */
#ifndef DLIST_H
#define DLIST_H

#include <stddef.h>

struct dlist {
    struct dlist *prev, *next;
};

/* The element holding the link p, a member called field of type. */
#define DLIST_ENTRY(p, type, field) ((type *)((char *)(p)-offsetof(type, field)))

static inline void dlist_init(struct dlist *head)
{
    head->prev = head->next = head;
}

static inline int dlist_empty(const struct dlist *head)
{
    return head->next == head;
}

/* 1 when n is on a list: a link is zeroed (calloc) or cleared by dlist_del. */
static inline int dlist_linked(const struct dlist *n)
{
    return n->next != NULL;
}

static inline void dlist_del(struct dlist *n)
{
    n->prev->next = n->next;
    n->next->prev = n->prev;
    n->prev = n->next = NULL;
}

/* Append n (not on a list) at the tail. */
static inline void dlist_push_tail(struct dlist *head, struct dlist *n)
{
    n->prev = head->prev;
    n->next = head;
    head->prev->next = n;
    head->prev = n;
}

/* Move n (on this list or none) to the tail. */
static inline void dlist_move_tail(struct dlist *head, struct dlist *n)
{
    if (dlist_linked(n))
        dlist_del(n);
    dlist_push_tail(head, n);
}

#endif
