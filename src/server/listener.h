/* SPDX-License-Identifier: Apache-2.0 */
/* listener.h - accepting connections: the one path the SPOP listeners
 * (server_conn.c) and the stats listener (http/httpd.c) share.
 *
 * On a readable listening socket the listener accepts, non-blocking and
 * close-on-exec, at most `budget` connections per wake-up (fair to the
 * connections already open on the same loop). accept(2) failures go to the
 * accept guard, which pauses the listener when fds run out (accept_guard.h).
 * A peer outside the allow list is closed at once; the owner then admits the
 * connection (its caps, making room by evicting a connection still in its
 * handshake) and takes it. Refusals are counted by reason in
 * refused[kind][reason] (spoa_ratelimit_connections_refused_total), pauses
 * in accept_pauses[kind].
 *
 * What a connection is, and what a handshake is, stay the owner's: the
 * listener_ops callbacks. A listener lives on one event loop (an SPOP
 * worker's, or the main loop); every call on that loop's thread.
 */
#ifndef LISTENER_H
#define LISTENER_H

#include <ev.h>
#include <stddef.h>
#include <sys/socket.h>

#include "accept_guard.h"
#include "metrics/metrics.h"

struct net_cidr;

/* What one kind of listener is: constants and the owner's callbacks (ctx is
 * the owner's, given to listener_init). */
struct listener_ops {
    const char *name;           /* "spop" or "stats", for the guard's logs */
    enum metrics_listener kind; /* whose counters */
    unsigned budget;            /* accepts per wake-up */
    /* The line for a peer outside the allow list (without quotes): at debug
     * level, or with warn_refused a warning naming the peer, at most one per
     * 10 s for every listener that warns. */
    const char *refused_line;
    int warn_refused;
    /* The peers allowed now (*n = 0: any peer). Asked at each accept: the
     * list may change (a reload). */
    const struct net_cidr *(*allow)(void *ctx, size_t *n);
    /* Room for a connection from an allowed peer: 0 admitted (after closing
     * another one still in its handshake if need be, counted by the owner
     * with listener_count), -1 refused at the connection cap (the listener
     * counts it, the owner logs it). */
    int (*admit)(void *ctx, const struct sockaddr *peer);
    /* The admitted connection fd (the owner's to close) from peer (len
     * bytes of it). */
    void (*take)(void *ctx, int fd, const struct sockaddr_storage *peer, socklen_t len);
};

struct listener {
    struct ev_loop *loop;
    ev_io *ios; /* one watcher per listening socket; NULL before init */
    size_t nios;
    struct accept_guard guard; /* pauses all of ios together */
    const struct listener_ops *ops;
    void *ctx;
};

/* Watch the n listening sockets fds (the caller's, left open by
 * listener_free) on loop, started at once. 0, or -1 out of memory. */
int listener_init(struct listener *l, struct ev_loop *loop, const int *fds, size_t n,
                  const struct listener_ops *ops, void *ctx);

/* Stop accepting for good (watchers and guard). Safe before init and twice. */
void listener_stop(struct listener *l);

/* Free the watchers; does not touch the loop (which may be destroyed
 * already: stop first on a loop that lives on). */
void listener_free(struct listener *l);

/* Count a refusal of l's kind (the owner's evictions). */
void listener_count(const struct listener *l, enum metrics_refusal reason);

#endif
