/* SPDX-License-Identifier: Apache-2.0 */
/* accept_guard.c - pausing a listener that is out of file descriptors (see
 * accept_guard.h). */
#include "accept_guard.h"

#include <string.h>

#include "core/log.h"
#include "core/net.h"
#include "core/util.h"

#define WARN_EVERY_S 10.0

/* One gate for every listener of the process: when fds run out, all of them
 * (and every worker) fail together, and one line says it. */
static struct log_gate pause_gate;

static void resume_cb(struct ev_loop *loop, ev_timer *t, int revents)
{
    struct accept_guard *g = t->data;

    if (g->stopped)
        return;
    for (size_t i = 0; i < g->nios; i++)
        ev_io_start(loop, &g->ios[i]);
}

void accept_guard_init(struct accept_guard *g, struct ev_loop *loop, ev_io *ios, size_t nios,
                       const char *listener, atomic_uint_fast64_t *pauses)
{
    memset(g, 0, sizeof(*g));
    g->loop = loop;
    g->ios = ios;
    g->nios = nios;
    g->listener = listener;
    g->pauses = pauses;
    g->delay = ACCEPT_PAUSE_MIN;
    ev_timer_init(&g->timer, resume_cb, 0., 0.);
    g->timer.data = g;
}

int accept_guard_failed(struct accept_guard *g, int err)
{
    unsigned long long suppressed;

    switch (net_accept_action(err)) {
    case NET_ACCEPT_NEXT:
        return 0;
    case NET_ACCEPT_WAIT:
        return 1;
    default:
        break;
    }
    for (size_t i = 0; i < g->nios; i++)
        ev_io_stop(g->loop, &g->ios[i]);
    if (g->pauses)
        atomic_fetch_add_explicit(g->pauses, 1, memory_order_relaxed);
    if (log_gate_open(&pause_gate, WARN_EVERY_S, &suppressed))
        LOG_WARN("\"cannot accept connections, pausing the listener\" listener=%s err=\"%s\" "
                 "pause_ms=%d pauses_not_logged=%llu",
                 g->listener, strerror(err), (int)(g->delay * 1000), suppressed);
    if (!g->stopped) {
        ev_timer_stop(g->loop, &g->timer);
        ev_timer_set(&g->timer, g->delay, 0.);
        ev_timer_start(g->loop, &g->timer);
    }
    g->delay = g->delay * 2 > ACCEPT_PAUSE_MAX ? ACCEPT_PAUSE_MAX : g->delay * 2;
    return 1;
}

int accept_guard_paused(const struct accept_guard *g)
{
    return ev_is_active(&g->timer);
}

void accept_guard_stop(struct accept_guard *g)
{
    g->stopped = 1;
    ev_timer_stop(g->loop, &g->timer);
}
