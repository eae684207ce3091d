/* SPDX-License-Identifier: Apache-2.0 */
/* fleet.c - the fleet size and the fail-open share (fleet.h). */
#include "fleet.h"

#include <stdatomic.h>

static atomic_uint agents;

void fleet_set_agents(unsigned n)
{
    atomic_store_explicit(&agents, n, memory_order_relaxed);
}

unsigned fleet_agents(void)
{
    return atomic_load_explicit(&agents, memory_order_relaxed);
}

double fleet_share(double configured)
{
    unsigned n;

    if (configured > 0.0)
        return configured;
    n = fleet_agents();
    return n > 1 ? 1.0 / (double)n : 1.0;
}
