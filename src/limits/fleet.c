/* SPDX-License-Identifier: Apache-2.0 */
/* fleet.c - the fleet size over a window and the fail-open share (fleet.h). */
#include "limits/fleet.h"

#include <stdatomic.h>
#include <string.h>

static struct fleet_window window; /* the loop thread's */
static atomic_uint agents;         /* window.n, for the workers */

static void slot_put(struct fleet_window *w, unsigned n, uint64_t now_us)
{
    uint64_t no = now_us / FLEET_SLOT_US;
    unsigned i = (unsigned)(no % FLEET_SLOTS);

    if (w->slot_no[i] != no || w->slot_max[i] == 0) {
        w->slot_no[i] = no;
        w->slot_max[i] = n;
    } else if (n > w->slot_max[i]) {
        w->slot_max[i] = n;
    }
}

unsigned fleet_window_add(struct fleet_window *w, unsigned n, uint64_t now_us, int rebuilding)
{
    uint64_t no = now_us / FLEET_SLOT_US;
    unsigned max = 0;

    if (n == 0)
        return w->n;
    /* A set being rebuilt under-counts: what it says can only add. */
    if (rebuilding && n < w->n)
        n = w->n;
    slot_put(w, n, now_us);
    for (unsigned i = 0; i < FLEET_SLOTS; i++) {
        /* slots of the current window only: numbers no-FLEET_SLOTS+1 .. no
         * (a slot from a clock ahead, which a monotonic clock never is,
         * would count too: never less) */
        if (w->slot_max[i] && w->slot_no[i] + FLEET_SLOTS > no && w->slot_max[i] > max)
            max = w->slot_max[i];
    }
    w->n = max;
    return max;
}

unsigned fleet_window_left(struct fleet_window *w, uint64_t left, unsigned n)
{
    uint64_t k = w->left_known && left > w->left ? left - w->left : 0;
    unsigned floor = n ? n : 1, max = 0;

    w->left = left;
    w->left_known = 1;
    if (k == 0)
        return 0;
    for (unsigned i = 0; i < FLEET_SLOTS; i++) {
        if (!w->slot_max[i])
            continue;
        w->slot_max[i] = w->slot_max[i] > floor + k ? w->slot_max[i] - (unsigned)k
                         : w->slot_max[i] > floor   ? floor
                                                    : w->slot_max[i];
        if (w->slot_max[i] > max)
            max = w->slot_max[i];
    }
    if (w->n > max)
        w->n = max;
    return k > 1000000 ? 1000000 : (unsigned)k;
}

unsigned fleet_window_get(const struct fleet_window *w)
{
    return w->n;
}

void fleet_set_agents(unsigned n, uint64_t now_us, int rebuilding)
{
    unsigned v = fleet_window_add(&window, n, now_us, rebuilding);

    atomic_store_explicit(&agents, v, memory_order_relaxed);
}

unsigned fleet_set_left(uint64_t left, unsigned n)
{
    return fleet_window_left(&window, left, n);
}

unsigned fleet_agents(void)
{
    return atomic_load_explicit(&agents, memory_order_relaxed);
}

void fleet_reset(void)
{
    memset(&window, 0, sizeof(window));
    atomic_store_explicit(&agents, 0, memory_order_relaxed);
}

double fleet_share(double configured)
{
    unsigned n;

    if (configured > 0.0)
        return configured;
    n = fleet_agents();
    return n > 1 ? 1.0 / (double)n : 1.0;
}
