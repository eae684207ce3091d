/* SPDX-License-Identifier: Apache-2.0 */
/* listener.c - the accept path shared by the SPOP and stats listeners (see
 * listener.h): the accept loop, the accept guard, the peer check and the
 * refusal counters; the owner's callbacks do the rest. */
#include "listener.h"

#include <errno.h>
#include <stdlib.h>
#include <unistd.h>

#include "core/log.h"
#include "core/net.h"

#define REFUSE_LOG_EVERY_S 10.0

/* Warnings about refused peers: one gate for the process (only the stats
 * listener warns, and there is one). */
static struct log_gate refuse_gate;

void listener_count(const struct listener *l, enum metrics_refusal reason)
{
    METRIC_INC(refused[l->ops->kind][reason]);
}

/* 1 when peer is in the owner's allow list; a refusal is counted and logged. */
static int peer_allowed(struct listener *l, const struct sockaddr *peer)
{
    size_t n = 0;
    const struct net_cidr *allow = l->ops->allow(l->ctx, &n);
    unsigned long long suppressed;
    char text[NET_PEER_TEXT_MAX] = "?";

    if (net_peer_allowed(allow, n, peer))
        return 1;
    listener_count(l, METRICS_REFUSED_ALLOW);
    if (!l->ops->warn_refused)
        LOG_DEBUG("\"%s\"", l->ops->refused_line);
    else if (log_gate_open(&refuse_gate, REFUSE_LOG_EVERY_S, &suppressed))
        LOG_WARN("\"%s\" peer=%s refused_not_logged=%llu", l->ops->refused_line,
                 net_format_peer(peer, 0, text, sizeof(text)), suppressed);
    return 0;
}

static void accept_cb(struct ev_loop *loop, ev_io *io, int revents)
{
    struct listener *l = io->data;

    for (unsigned i = 0; i < l->ops->budget; i++) {
        struct sockaddr_storage ss;
        socklen_t sl = sizeof(ss);
        int fd = accept4(io->fd, (struct sockaddr *)&ss, &sl, SOCK_NONBLOCK | SOCK_CLOEXEC);

        if (fd == -1) {
            if (accept_guard_failed(&l->guard, errno))
                return;
            continue;
        }
        accept_guard_ok(&l->guard);
        if (!peer_allowed(l, (struct sockaddr *)&ss)) {
            close(fd);
            continue;
        }
        if (l->ops->admit(l->ctx, (struct sockaddr *)&ss) < 0) {
            listener_count(l, METRICS_REFUSED_MAX_CONNS);
            close(fd);
            continue;
        }
        l->ops->take(l->ctx, fd, &ss, sl);
    }
}

int listener_init(struct listener *l, struct ev_loop *loop, const int *fds, size_t n,
                  const struct listener_ops *ops, void *ctx)
{
    l->loop = loop;
    l->ops = ops;
    l->ctx = ctx;
    l->nios = n;
    if (!(l->ios = calloc(n, sizeof(*l->ios))))
        return -1;
    for (size_t i = 0; i < n; i++) {
        ev_io_init(&l->ios[i], accept_cb, fds[i], EV_READ);
        l->ios[i].data = l;
        ev_io_start(loop, &l->ios[i]);
    }
    accept_guard_init(&l->guard, loop, l->ios, n, ops->name, &metrics.accept_pauses[ops->kind]);
    return 0;
}

void listener_stop(struct listener *l)
{
    if (!l->ios)
        return;
    accept_guard_stop(&l->guard);
    for (size_t i = 0; i < l->nios; i++)
        ev_io_stop(l->loop, &l->ios[i]);
}

void listener_free(struct listener *l)
{
    free(l->ios);
    l->ios = NULL;
}
