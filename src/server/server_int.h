/* SPDX-License-Identifier: Apache-2.0 */
/* server_int.h - the SPOP server's private parts, shared by server.c (the
 * listeners, the workers and their lifecycle) and server_conn.c (one
 * connection's I/O and its requests). Nothing outside those files includes
 * it. */
#ifndef SERVER_INT_H
#define SERVER_INT_H

#include <ev.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/socket.h>

#include "core/dlist.h"
#include "idle_lru.h"
#include "limiter/limiter.h"
#include "listener.h"
#include "spop/spop_conn.h"

struct worker;

struct conn {
    struct worker *w;
    int fd;
    ev_io rio, wio;
    ev_timer timer; /* the HELLO deadline; after the peer's EOF, the drain deadline;
                       between the two, while out_stalled, the write deadline */
    struct spop_conn sp;
    int closing;                  /* close once out[] is flushed */
    int reading;                  /* rio started */
    int eof;                      /* the peer half-closed: answer what it is owed, then close */
    int out_stalled;              /* over OUT_HIGH_WATER unsent: the peer must take some within
                                     DRAIN_TIMEOUT_S (timer) or is closed */
    int dead;                     /* socket closed; freed when the last pending request ends */
    int ready;                    /* counted in ready_conns: HELLO done, not a health check */
    struct dlist hs;              /* on the worker's handshake list (linked): no HELLO yet */
    struct idle_lru_node idle;    /* on the worker's idle list, by its last whole frame */
    uint64_t frames_seen;         /* sp.frames_in at that frame */
    struct sockaddr_storage peer; /* for logs */
    unsigned npending;            /* requests waiting for Redis */
    struct conn *flush_next;      /* on the worker's to-flush list */
    int to_flush;
    struct conn *prev, *next;
};

/* One NOTIFY being decided. Recycled through a per-worker free list so the
 * request path does not allocate once warm. */
struct request {
    struct limiter_req lr; /* first: done() gets a pointer to it */
    struct worker *w;
    struct conn *conn;
    uint64_t stream_id, frame_id;
    uint64_t t0;
    struct request *next;
};

struct worker {
    struct server *srv;
    unsigned id;
    pthread_t thread;
    struct ev_loop *loop;
    /* Runs on the main loop, without a thread of its own (one worker): see
     * server_new(). */
    int inline_loop;
    ev_async wake;
    /* Inline only: before the main loop polls, the limiter's queued jobs go
     * out (limiter_pump) and the requests it completed are answered
     * (done_inline set): no ev_async, whose wake-up on its own thread still
     * cost the loop one more poll per batch. See pump_cb in server.c. */
    ev_prepare pump;
    int done_inline;
    /* Ticks every STALL_TICK_S at top priority; one far late means the whole
     * loop was stopped (SIGSTOP, a long pause): see stall_cb in server.c. */
    ev_timer stall;
    ev_tstamp stall_last; /* ev_now() at the last tick */
    struct listener lis;  /* the server's listening sockets, on this loop */
    struct conn *conns;
    /* Connections that have not finished their HELLO, oldest first: the
     * first is closed when a cap is reached (see conn_admit). At most
     * hs_cap, this worker's share of [agent] max_handshakes. */
    struct dlist handshakes; /* struct conn, by hs */
    unsigned nhandshakes;
    /* Peers of the connections evicted since this worker last logged it. */
    struct sockaddr_storage evicted_peers[4];
    unsigned nevicted_peers;
    /* Every open connection, the one without a whole frame for the longest
     * first: at max_connections, the head is closed to admit a new one once
     * idle for [agent] idle_grace (see evict_idle). */
    struct idle_lru idle;
    struct sockaddr_storage idle_evicted_peers[4]; /* since the last such line */
    unsigned nidle_evicted_peers;
    struct ruleset *rs;              /* in force on this worker */
    struct ruleset *_Atomic next_rs; /* handed over by server_set_ruleset */
    atomic_int stop;
    int stopping;
    uint64_t acked_t0[256]; /* NOTIFY read times of ACKs queued, not yet written */
    unsigned nacked;
    struct request *free_reqs; /* recycled requests */
    unsigned nfree;
    unsigned pending;          /* requests waiting for Redis */
    pthread_mutex_t done_lock; /* requests completed by the limiter's thread */
    struct request *done_reqs;
};

struct server {
    int *lfds;
    size_t nlfds;
    char *unix_path; /* unlinked at free */
    unsigned nworkers;
    struct worker *workers;
    struct limiter *lim;
    uint32_t max_frame;
    atomic_uint nconns; /* open connections, for [agent] max_connections */
    atomic_int running;
    pthread_mutex_t done_lock;
    pthread_cond_t done_cond;
    unsigned done;
};

/* ---- connections and the worker's end (server_conn.c) --------------------- */

/* Close c's socket; free c now, or once its last pending request is back. */
void conn_free(struct conn *c);
/* Start or stop reading c as it can take more or not. */
void conn_update_reading(struct conn *c);
/* Write what c has pending. -1 when c is gone (freed). */
int conn_flush(struct conn *c);
/* How a worker's listener admits and takes SPOP connections (its ctx: the
 * worker). */
extern const struct listener_ops conn_listener_ops;
/* Answer the requests the limiter completed for w, and write them out. */
void finish_done_requests(struct worker *w);
/* End w's loop once it is stopping and nothing is open or pending. */
void worker_maybe_done(struct worker *w);
/* Count w as finished for server_join(). */
void worker_finished(struct worker *w);

#endif
