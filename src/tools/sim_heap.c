/* SPDX-License-Identifier: Apache-2.0 */
/* sim_heap.c - the simulators' event queue (see sim_heap.h). */
#include "tools/sim_heap.h"

#include <stdlib.h>

static int ev_less(const struct sim_event *a, const struct sim_event *b)
{
    return a->at < b->at || (a->at == b->at && a->seq < b->seq);
}

int sim_heap_push(struct sim_heap *h, uint64_t at, int kind, unsigned agent, uint32_t key, void *p)
{
    if (h->n == h->cap) {
        size_t cap = h->cap ? h->cap * 2 : 4096;
        struct sim_event *ev = realloc(h->ev, cap * sizeof(*ev));
        if (!ev)
            return -1;
        h->ev = ev;
        h->cap = cap;
    }
    struct sim_event e = {
        .at = at, .seq = h->seq++, .kind = kind, .agent = agent, .key = key, .p = p};
    size_t i = h->n++;
    while (i > 0 && ev_less(&e, &h->ev[(i - 1) / 2])) {
        h->ev[i] = h->ev[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    h->ev[i] = e;
    return 0;
}

struct sim_event sim_heap_pop(struct sim_heap *h)
{
    struct sim_event top = h->ev[0], last = h->ev[--h->n];
    size_t i = 0;

    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= h->n)
            break;
        if (c + 1 < h->n && ev_less(&h->ev[c + 1], &h->ev[c]))
            c++;
        if (!ev_less(&h->ev[c], &last))
            break;
        h->ev[i] = h->ev[c];
        i = c;
    }
    if (h->n > 0)
        h->ev[i] = last;
    return top;
}

void sim_heap_free(struct sim_heap *h)
{
    free(h->ev);
    h->ev = NULL;
    h->n = h->cap = 0;
}
