/* SPDX-License-Identifier: Apache-2.0 */
/* server.c - SPOP listeners and workers: making the server, starting and
 * stopping its workers (a thread and a loop each, or one worker on the main
 * loop), handing them a new ruleset. One connection's I/O and its requests
 * are server_conn.c. */
#include "server.h"

#include <errno.h>
#include <ev.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "config/config.h"
#include "core/log.h"
#include "core/net.h"
#include "limiter/limiter.h"
#include "metrics/metrics.h"
#include "rules/rules.h"
#include "server_int.h"
#include "spop/spop_conn.h"

#define LISTEN_BACKLOG 4096 /* an HAProxy reload opens a burst of connections */
#define FD_RESERVE 256      /* fds beside SPOP connections: stats, Redis, loops, logs */

/* A worker whose loop did not run for STALL_RESET_S (SIGSTOP, a long pause of
 * the machine) closes its SPOP connections instead of answering what piled up
 * meanwhile. HAProxy gave up on those NOTIFYs after its "timeout processing"
 * (150ms in the kit) and sent more on the same connections; the late ACKs for
 * them come back as one burst. HAProxy 3.1 to 3.4 (at least up to 3.5-dev5)
 * never reads an SPOP connection again once one read fills its 16 KB demux
 * buffer: SPOP_CF_DEM_BLOCK_ANY includes SPOP_CF_DEM_DFULL, so spop_process()
 * skips the demux that would clear that flag and spop_recv_allowed() refuses
 * to read (see README, "When the agent is down or slow"). Every request sent
 * on such a connection then waits its full "timeout processing", until the
 * connection closes. Closing first (an AGENT-DISCONNECT, then the socket) makes
 * HAProxy open new connections; the requests in flight on the old ones pass
 * undecided, as they would have anyway.
 * STALL_RESET_S is above scheduling delays on a busy machine and above any
 * sane "timeout processing"; the tick costs one wake-up per STALL_TICK_S. */
#define STALL_TICK_S 0.25
#define STALL_RESET_S 0.5

/* ---- workers ------------------------------------------------------------ */

/* Stopping: no more accepts, no more reads; every connection is told we go
 * away once what it is owed has been written. */
static void worker_begin_stop(struct worker *w)
{
    struct conn *c, *next;

    w->stopping = 1;
    ev_timer_stop(w->loop, &w->stall);
    listener_stop(&w->lis);
    for (c = w->conns; c; c = next) {
        next = c->next;
        conn_update_reading(c);
        if (c->npending)
            continue; /* answered first, then closed (wake_cb) */
        if (c->sp.state == SPOP_CONN_READY)
            spop_conn_disconnect(&c->sp, SPOP_ST_NONE);
        c->closing = 1;
        conn_flush(c);
    }
    worker_maybe_done(w);
}

/* Top priority: runs before the I/O callbacks of the same loop iteration, so
 * after a stall the connections are closed before their backlog is read. */
static void stall_cb(struct ev_loop *loop, ev_timer *t, int revents)
{
    struct worker *w = t->data;
    ev_tstamp now = ev_now(loop);
    ev_tstamp late = now - w->stall_last - STALL_TICK_S;
    struct conn *c, *next;
    unsigned n = 0;

    w->stall_last = now;
    if (late < STALL_RESET_S || w->stopping)
        return;
    for (c = w->conns; c; c = next) {
        next = c->next;
        if (c->closing || c->sp.state != SPOP_CONN_READY)
            continue;
        spop_conn_disconnect(&c->sp, SPOP_ST_TIMEOUT);
        c->closing = 1;
        n++;
        conn_flush(c); /* frees c: what it had not read is not answered */
    }
    if (n == 0)
        return; /* e.g. the first tick, late as the agent started */
    LOG_WARN("\"event loop stalled; SPOP connections closed\" worker=%u stalled_ms=%.0f "
             "connections=%u",
             w->id, (late + STALL_TICK_S) * 1000, n);
}

static void wake_cb(struct ev_loop *loop, ev_async *a, int revents)
{
    struct worker *w = a->data;
    struct ruleset *rs = atomic_exchange(&w->next_rs, NULL);

    if (rs) {
        ruleset_unref(w->rs);
        w->rs = rs;
    }
    finish_done_requests(w);
    if (atomic_load(&w->stop) && !w->stopping)
        worker_begin_stop(w);
}

/* Inline worker, before the main loop polls: send what this iteration's
 * decisions queued for Redis, answer what Redis completed, and again while
 * one makes work for the other (an answer's settle may queue a job; a job
 * failed at once, Redis down, completes its requests). What is left after
 * a few rounds wakes the loop, so that the poll does not wait with work
 * pending. */
static void pump_cb(struct ev_loop *loop, ev_prepare *p, int revents)
{
    struct worker *w = p->data;

    for (int round = 0; round < 4; round++) {
        int any = limiter_pump(w->srv->lim);
        if (w->done_inline) {
            w->done_inline = 0;
            finish_done_requests(w);
            any = 1;
        }
        if (!any)
            return;
    }
    ev_async_send(loop, &w->wake);
}

static void *worker_main(void *arg)
{
    struct worker *w = arg;

    metrics_local_enable();
    ev_run(w->loop, 0);
    worker_finished(w);
    return NULL;
}

/* Debian's default soft limit is 1024 fds, below max_connections' default
 * plus what the rest of the agent holds: raise it towards what is needed, as
 * HAProxy does, and say so when the hard limit does not allow it (accepts
 * then pause when fds run out, see accept_guard.h). */
static void raise_nofile(unsigned max_conns)
{
    uint64_t want = (uint64_t)max_conns + FD_RESERVE, got = net_raise_nofile(want);

    if (got < want)
        LOG_WARN("\"open file limit below what max_connections needs\" nofile=%llu "
                 "max_connections=%u wanted=%llu",
                 (unsigned long long)got, max_conns, (unsigned long long)want);
}

struct server *server_new(const struct config *cfg, struct ruleset *rs, struct limiter *lim,
                          struct ev_loop *main_loop, char *err, size_t errlen)
{
    struct server *s = calloc(1, sizeof(*s));
    int fd;

    if (!s) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    pthread_mutex_init(&s->done_lock, NULL);
    pthread_cond_init(&s->done_cond, NULL);
    s->lim = lim;
    s->max_frame = cfg->max_frame_size;
    s->nworkers = (unsigned)cfg->workers;
    raise_nofile(cfg->max_connections);
    fd = net_listen(&cfg->listen_addr, LISTEN_BACKLOG, err, errlen);
    if (fd == -1)
        goto fail;
    s->lfds = malloc(sizeof(int));
    s->workers = calloc(s->nworkers, sizeof(*s->workers));
    if (!s->lfds || !s->workers) {
        close(fd);
        snprintf(err, errlen, "out of memory");
        goto fail;
    }
    s->lfds[0] = fd;
    s->nlfds = 1;
    if (cfg->listen_addr.kind == NET_ADDR_UNIX)
        s->unix_path = strdup(cfg->listen_addr.path);

    for (unsigned i = 0; i < s->nworkers; i++) {
        struct worker *w = &s->workers[i];
        w->srv = s;
        w->id = i;
        dlist_init(&w->handshakes);
        idle_lru_init(&w->idle);
        /* One worker shares the main loop, where the limiter talks to Redis:
         * a decision then costs no hop between threads (an eventfd write, a
         * wake-up and a context switch each way), which cost as much CPU as
         * the decision itself. An ev_async sent from its own loop's thread
         * makes no system call. */
        w->inline_loop = s->nworkers == 1;
        w->loop = w->inline_loop ? main_loop : ev_loop_new(EVFLAG_AUTO);
        if (!w->loop) {
            snprintf(err, errlen, "cannot create event loop");
            goto fail;
        }
        ruleset_ref(rs);
        w->rs = rs;
        pthread_mutex_init(&w->done_lock, NULL);
        ev_async_init(&w->wake, wake_cb);
        w->wake.data = w;
        ev_async_start(w->loop, &w->wake);
        if (w->inline_loop) {
            ev_prepare_init(&w->pump, pump_cb);
            w->pump.data = w;
            ev_prepare_start(w->loop, &w->pump);
            limiter_inline(lim, 1);
        }
        ev_timer_init(&w->stall, stall_cb, STALL_TICK_S, STALL_TICK_S);
        ev_set_priority(&w->stall, EV_MAXPRI);
        w->stall.data = w;
        w->stall_last = ev_now(w->loop);
        ev_timer_start(w->loop, &w->stall);
        if (listener_init(&w->lis, w->loop, s->lfds, s->nlfds, &conn_listener_ops, w) < 0) {
            snprintf(err, errlen, "cannot create event loop");
            goto fail;
        }
    }
    return s;
fail:
    server_free(s);
    return NULL;
}

int server_start(struct server *s)
{
    for (unsigned i = 0; i < s->nworkers; i++) {
        if (s->workers[i].inline_loop) {
            metrics_local_enable(); /* this thread: flushed as its callbacks end */
            continue;               /* runs when the main loop does */
        }
        if (pthread_create(&s->workers[i].thread, NULL, worker_main, &s->workers[i]) != 0) {
            LOG_ERROR("\"cannot start worker thread\" err=\"%s\"", strerror(errno));
            return -1;
        }
    }
    atomic_store(&s->running, 1);
    return 0;
}

void server_set_ruleset(struct server *s, struct ruleset *rs)
{
    for (unsigned i = 0; i < s->nworkers; i++) {
        struct worker *w = &s->workers[i];
        ruleset_ref(rs);
        ruleset_unref(atomic_exchange(&w->next_rs, rs));
        ev_async_send(w->loop, &w->wake);
    }
}

void server_stop(struct server *s)
{
    for (unsigned i = 0; i < s->nworkers; i++) {
        atomic_store(&s->workers[i].stop, 1);
        ev_async_send(s->workers[i].loop, &s->workers[i].wake);
    }
}

int server_stopped(struct server *s)
{
    pthread_mutex_lock(&s->done_lock);
    int done = s->done >= s->nworkers;
    pthread_mutex_unlock(&s->done_lock);
    return done;
}

int server_join(struct server *s, double timeout_s)
{
    struct timespec ts;
    int ret = 0;

    if (!atomic_load(&s->running))
        return 0;
    if (s->workers[0].inline_loop) {
        /* It finishes only while the main loop (the caller's) runs. */
        if (!server_stopped(s))
            return -1;
        atomic_store(&s->running, 0);
        return 0;
    }
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += (time_t)timeout_s;
    ts.tv_nsec += (long)((timeout_s - (double)(time_t)timeout_s) * 1e9);
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&s->done_lock);
    while (s->done < s->nworkers && ret == 0)
        ret = pthread_cond_timedwait(&s->done_cond, &s->done_lock, &ts);
    pthread_mutex_unlock(&s->done_lock);
    if (s->done < s->nworkers)
        return -1;
    for (unsigned i = 0; i < s->nworkers; i++)
        if (!s->workers[i].inline_loop)
            pthread_join(s->workers[i].thread, NULL);
    atomic_store(&s->running, 0);
    return 0;
}

void server_free(struct server *s)
{
    if (!s)
        return;
    if (atomic_load(&s->running))
        return; /* threads still use it; the process is exiting anyway */
    for (unsigned i = 0; s->workers && i < s->nworkers; i++) {
        struct worker *w = &s->workers[i];
        if (w->loop) {
            while (w->conns)
                conn_free(w->conns);
            if (w->inline_loop) { /* the main loop is its owner's to destroy */
                listener_stop(&w->lis);
                ev_async_stop(w->loop, &w->wake);
                ev_prepare_stop(w->loop, &w->pump);
                limiter_inline(s->lim, 0);
                ev_timer_stop(w->loop, &w->stall);
            } else {
                ev_loop_destroy(w->loop);
            }
        }
        listener_free(&w->lis);
        ruleset_unref(w->rs);
        ruleset_unref(atomic_load(&w->next_rs));
        while (w->free_reqs) {
            struct request *r = w->free_reqs;
            w->free_reqs = r->next;
            rules_eval_free(&r->lr.ev);
            limiter_req_release(&r->lr);
            free(r);
        }
        pthread_mutex_destroy(&w->done_lock);
    }
    for (size_t i = 0; i < s->nlfds; i++)
        close(s->lfds[i]);
    if (s->unix_path) {
        unlink(s->unix_path);
        free(s->unix_path);
    }
    free(s->lfds);
    free(s->workers);
    pthread_mutex_destroy(&s->done_lock);
    pthread_cond_destroy(&s->done_cond);
    free(s);
}
