/* SPDX-License-Identifier: Apache-2.0 */
/* accept_guard.h - a listener that runs out of file descriptors (or kernel
 * memory) must not spin.
 *
 * When accept(2) fails with EMFILE, ENFILE, ENOBUFS or ENOMEM the pending
 * connection stays queued and the listening socket stays readable, so a
 * level-triggered watcher would call accept again at once, forever, on every
 * worker. The guard instead stops the listener's watchers for a back-off
 * (100 ms, doubling up to 1 s; an accept that succeeds resets it) and starts
 * them again from a timer. Queued connections wait in the backlog meanwhile.
 * One warning line per 10 s at most, process-wide; every pause is counted.
 *
 * One guard per event loop and listener set; all calls on that loop's thread.
 */
#ifndef ACCEPT_GUARD_H
#define ACCEPT_GUARD_H

#include <ev.h>
#include <stdatomic.h>
#include <stddef.h>

#include "core/log.h" /* log_gate, which its users share */

#define ACCEPT_PAUSE_MIN 0.1 /* seconds */
#define ACCEPT_PAUSE_MAX 1.0

struct accept_guard {
    struct ev_loop *loop;
    ev_io *ios; /* the listener watchers paused together (borrowed) */
    size_t nios;
    ev_timer timer;
    double delay;                 /* the next pause; ACCEPT_PAUSE_MIN after a success */
    const char *listener;         /* "spop" or "stats", for logs */
    atomic_uint_fast64_t *pauses; /* counter to bump per pause (a metric), or NULL */
    int stopped;                  /* the owner stopped listening for good */
};

/* Set up (the watchers are started and stopped by the owner as usual). */
void accept_guard_init(struct accept_guard *g, struct ev_loop *loop, ev_io *ios, size_t nios,
                       const char *listener, atomic_uint_fast64_t *pauses);

/* accept(2) returned -1 with err. Returns 1 when the caller must stop
 * accepting for now (nothing left, or paused: the watchers are stopped and
 * a timer restarts them), 0 when it may accept the next connection. */
int accept_guard_failed(struct accept_guard *g, int err);

/* An accept succeeded: the next pause starts short again. */
static inline void accept_guard_ok(struct accept_guard *g)
{
    g->delay = ACCEPT_PAUSE_MIN;
}

/* 1 while the watchers are paused by the guard. */
int accept_guard_paused(const struct accept_guard *g);

/* The owner stops listening: the timer stops and never restarts the
 * watchers (which the owner stops itself). */
void accept_guard_stop(struct accept_guard *g);

#endif
