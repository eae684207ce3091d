/* server.c - SPOP listeners, workers, non-blocking connection I/O. */
#include "server.h"

#include <errno.h>
#include <ev.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "accept_guard.h"
#include "config/config.h"
#include "limiter.h"
#include "log.h"
#include "metrics.h"
#include "net.h"
#include "rules.h"
#include "spop/spop_conn.h"
#include "util.h"

#define LISTEN_BACKLOG 4096       /* an HAProxy reload opens a burst of connections */
#define ACCEPT_BATCH 64           /* accepts per wake-up, to stay fair to open connections */
#define OUT_HIGH_WATER (1u << 20) /* stop reading while this much output is unsent */
#define HELLO_TIMEOUT_S 5.0       /* a new connection must complete its HAPROXY-HELLO in this */
#define DRAIN_TIMEOUT_S 5.0       /* a half-closed peer gets its answers within this, or none */
/* NOTIFYs of one connection waiting for Redis at once. HAProxy sends at most
 * max-waiting-frames (20 by default) before it waits for ACKs; past this the
 * connection's frames stay unread until answers go out (TCP pushes back),
 * rather than a DISCONNECT, which HAProxy would take as an error for every
 * request in flight on it. */
#define MAX_WAITING_PER_CONN 256
#define FD_RESERVE 256 /* fds beside SPOP connections: stats, Redis, loops, logs */
#define REFUSE_LOG_EVERY_S 10.0

struct worker;

/* Connections past their HELLO, health checks excluded: "HAProxy connected"
 * and "no HAProxy connection left" are logged on its 0 <-> 1 transitions, so
 * health checks (a connection every few seconds) do not flood the log. */
static atomic_uint ready_conns;

struct conn {
    struct worker *w;
    int fd;
    ev_io rio, wio;
    ev_timer timer; /* the HELLO deadline; after the peer's EOF, the drain deadline */
    struct spop_conn sp;
    int closing;             /* close once out[] is flushed */
    int reading;             /* rio started */
    int eof;                 /* the peer half-closed: answer what it is owed, then close */
    int dead;                /* socket closed; freed when the last pending request ends */
    int ready;               /* counted in ready_conns: HELLO done, not a health check */
    unsigned npending;       /* requests waiting for Redis */
    struct conn *flush_next; /* on the worker's to-flush list */
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
    ev_io *accept_io;          /* one per listener */
    struct accept_guard guard; /* pauses accept_io when out of fds */
    struct conn *conns;
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

/* ---- connections -------------------------------------------------------- */

static void worker_maybe_done(struct worker *w);
static struct log_gate refuse_gate; /* "max_connections reached" lines */

/* Close the socket now; free the memory now, or when the last request that
 * still points to it comes back from the limiter (never from under it). */
static void conn_free(struct conn *c)
{
    struct worker *w = c->w;

    if (!c->dead) {
        ev_io_stop(w->loop, &c->rio);
        ev_io_stop(w->loop, &c->wio);
        ev_timer_stop(w->loop, &c->timer);
        close(c->fd);
        atomic_fetch_sub(&w->srv->nconns, 1);
        if (c->prev)
            c->prev->next = c->next;
        else
            w->conns = c->next;
        if (c->next)
            c->next->prev = c->prev;
        spop_conn_release(&c->sp);
        atomic_fetch_sub(&metrics.connections, 1);
        if (c->ready && atomic_fetch_sub(&ready_conns, 1) == 1 && !w->stopping)
            LOG_INFO("\"no HAProxy connection left\"");
        c->dead = 1;
    }
    if (c->npending == 0)
        free(c);
    worker_maybe_done(w);
}

/* Read while the connection can take more: the worker is not stopping, the
 * connection is not closing or half-closed, not paused at the waiting-NOTIFY
 * cap, and not too far behind writing. */
static void conn_update_reading(struct conn *c)
{
    struct worker *w = c->w;
    size_t len;
    int want;

    spop_conn_out(&c->sp, &len);
    want = !w->stopping && !c->closing && !c->eof && !c->sp.paused && len <= OUT_HIGH_WATER;
    if (want && !c->reading)
        ev_io_start(w->loop, &c->rio);
    else if (!want && c->reading)
        ev_io_stop(w->loop, &c->rio);
    c->reading = want;
}

/* Write what is pending. Returns -1 when the connection is gone (freed). */
static int conn_flush(struct conn *c)
{
    struct worker *w = c->w;
    size_t len;
    const uint8_t *p;

    while ((p = spop_conn_out(&c->sp, &len)), len > 0) {
        ssize_t n = send(c->fd, p, len, MSG_NOSIGNAL);
        if (n == -1) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK)
                break;
            /* ECONNRESET / EPIPE: HAProxy closed; a normal end. */
            conn_free(c);
            return -1;
        }
        spop_conn_out_consumed(&c->sp, (size_t)n);
    }
    spop_conn_out(&c->sp, &len);
    if (len > 0) {
        ev_io_start(w->loop, &c->wio);
        conn_update_reading(c);
        return 0;
    }
    ev_io_stop(w->loop, &c->wio);
    if (c->closing) {
        conn_free(c);
        return -1;
    }
    conn_update_reading(c);
    return 0;
}

struct ack_arg {
    const struct ruleset *rs;
    const struct rule_eval *ev;
};

static int encode_ack(struct spop_writer *wr, void *arg)
{
    struct ack_arg *a = arg;
    return rules_encode_actions(wr, a->rs, a->ev);
}

#define MAX_FREE_REQS 256

static struct request *request_get(struct worker *w)
{
    struct request *r = w->free_reqs;
    if (r) {
        w->free_reqs = r->next;
        w->nfree--;
        return r;
    }
    return calloc(1, sizeof(*r));
}

static void request_put(struct worker *w, struct request *r)
{
    ruleset_unref(r->lr.rs);
    r->lr.rs = NULL;
    r->conn = NULL;
    if (w->nfree >= MAX_FREE_REQS) {
        rules_eval_free(&r->lr.ev);
        limiter_req_release(&r->lr);
        free(r);
        return;
    }
    r->next = w->free_reqs;
    w->free_reqs = r;
    w->nfree++;
}

/* Account, answer, recycle. */
static void request_finish(struct request *r)
{
    struct conn *c = r->conn;
    struct ack_arg a = {r->lr.rs, &r->lr.ev};

    rules_account(r->lr.rs, &r->lr.ev, r->t0);
    int ret = spop_conn_ack(&c->sp, r->stream_id, r->frame_id, encode_ack, &a);
    if (ret == 0)
        METRIC_INC(acks);
    else if (ret < 0)
        c->closing = 1; /* an AGENT-DISCONNECT was queued instead */
    /* decision_seconds runs to the ACK's write: observed after the flush. */
    struct worker *w = r->w;
    if (w->nacked == sizeof(w->acked_t0) / sizeof(w->acked_t0[0]))
        metrics_hist_observe(&metrics.decision, (util_now_us() - r->t0) * 1000);
    else
        w->acked_t0[w->nacked++] = r->t0;
}

/* The ACKs queued since the last call have been written (or their
 * connection is gone): observe their decision times. */
static void observe_written(struct worker *w)
{
    uint64_t now = util_now_us();
    for (unsigned i = 0; i < w->nacked; i++)
        metrics_hist_observe(&metrics.decision, (now - w->acked_t0[i]) * 1000);
    w->nacked = 0;
}

/* limiter thread: the last decision of r is in; hand r to its worker. */
static void request_done(struct limiter_req *lr)
{
    struct request *r = (struct request *)lr;
    struct worker *w = r->w;

    pthread_mutex_lock(&w->done_lock);
    r->next = w->done_reqs;
    w->done_reqs = r;
    pthread_mutex_unlock(&w->done_lock);
    if (!ev_async_pending(&w->wake)) /* as in limiter_decide(): no second fence */
        ev_async_send(w->loop, &w->wake);
}

static int on_notify(void *ctx, struct spop_conn *sp, const struct spop_frame *f)
{
    struct conn *c = ctx;
    struct worker *w = c->w;
    struct request *r = request_get(w);
    int ret;

    if (!r)
        return SPOP_ST_RES_ALLOC_ERR;
    r->t0 = util_now_us();
    r->w = w;
    r->conn = c;
    r->stream_id = f->stream_id;
    r->frame_id = f->frame_id;
    r->lr.done = request_done;
    ruleset_ref(w->rs);
    r->lr.rs = w->rs;
    ret = rules_match(r->lr.rs, f->payload, f->payload_len, &r->lr.ev);
    if (ret < 0) {
        request_put(w, r);
        return ret == SPOP_EINVAL ? SPOP_ST_INVALID : SPOP_ST_RES_ALLOC_ERR;
    }
    ret = limiter_decide(w->srv->lim, &r->lr, r->t0);
    if (ret < 0) {
        request_put(w, r);
        return SPOP_ST_RES_ALLOC_ERR;
    }
    if (ret == 1) { /* waits for Redis: answered from wake_cb */
        c->npending++;
        w->pending++;
        atomic_fetch_add(&metrics.notifies_waiting, 1);
        if (c->npending >= MAX_WAITING_PER_CONN) {
            c->sp.paused = 1; /* the next frames wait in in[] (see MAX_WAITING_PER_CONN) */
            METRIC_INC(notify_read_pauses);
        }
        return 0;
    }
    request_finish(r);
    request_put(w, r);
    return 0;
}

/* Parse n more bytes (0: the frames a pause left in in[]). Returns 1 when
 * reading must stop: the connection is closing, or paused at the cap. */
static int conn_parse(struct conn *c, size_t n)
{
    struct worker *w = c->w;
    int closing = spop_conn_in_commit(&c->sp, n, on_notify, c);

    if (c->sp.state != SPOP_CONN_HELLO && !c->eof)
        ev_timer_stop(w->loop, &c->timer); /* the HELLO is in */
    if (!c->ready && c->sp.state == SPOP_CONN_READY) {
        c->ready = 1;
        if (atomic_fetch_add(&ready_conns, 1) == 0)
            LOG_INFO("\"HAProxy connected\"");
    }
    if (closing)
        c->closing = 1;
    conn_update_reading(c);
    return closing || c->sp.paused;
}

/* The peer half-closed its side (or closed): nothing more comes. The NOTIFYs
 * it sent that wait for Redis are still answered (an HAProxy that only shut
 * down its writing side reads them), then the connection closes; at most
 * DRAIN_TIMEOUT_S later either way, also when the peer does not read. A peer
 * that closed altogether makes the writes fail, which frees it sooner. */
static void conn_eof(struct conn *c)
{
    struct worker *w = c->w;

    c->eof = 1;
    conn_update_reading(c);
    if (c->npending == 0)
        c->closing = 1;
    ev_timer_stop(w->loop, &c->timer);
    ev_timer_set(&c->timer, DRAIN_TIMEOUT_S, 0.);
    ev_timer_start(w->loop, &c->timer);
}

static void conn_read_cb(struct ev_loop *loop, ev_io *io, int revents)
{
    struct conn *c = io->data;
    struct worker *w = c->w;

    for (int rounds = 0; rounds < 4; rounds++) {
        size_t room;
        uint8_t *p = spop_conn_in_space(&c->sp, &room);
        ssize_t n;

        if (room == 0) { /* cannot happen: in[] holds a whole max frame */
            spop_conn_disconnect(&c->sp, SPOP_ST_TOO_BIG);
            c->closing = 1;
            conn_update_reading(c);
            break;
        }
        n = recv(c->fd, p, room, 0);
        if (n == 0) {
            conn_eof(c);
            break;
        }
        if (n == -1) {
            if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)
                break;
            conn_free(c); /* reset: nobody reads the answers */
            observe_written(w);
            return;
        }
        if (conn_parse(c, (size_t)n) || (size_t)n < room)
            break;
    }
    conn_flush(c);
    observe_written(w);
}

/* No HELLO in time, or a half-closed peer still owed answers past the drain
 * deadline. */
static void conn_timer_cb(struct ev_loop *loop, ev_timer *t, int revents)
{
    struct conn *c = t->data;

    if (c->eof) {
        METRIC_INC(timeouts[METRICS_TIMEOUT_DRAIN]);
        LOG_DEBUG("\"half-closed connection not drained in time\" waiting=%u", c->npending);
        conn_free(c);
        return;
    }
    METRIC_INC(timeouts[METRICS_TIMEOUT_HELLO]);
    LOG_DEBUG("\"no HAPROXY-HELLO in time; closing\"");
    spop_conn_disconnect(&c->sp, SPOP_ST_TIMEOUT);
    c->closing = 1;
    conn_update_reading(c);
    /* one try to say why; a peer that does not read is not waited for */
    if (conn_flush(c) == 0)
        conn_free(c);
}

static void conn_write_cb(struct ev_loop *loop, ev_io *io, int revents)
{
    conn_flush(io->data);
}

/* A new connection on w, or -1 with the fd closed (out of memory). */
static int conn_new(struct worker *w, int fd)
{
    struct conn *c = calloc(1, sizeof(*c));

    if (!c || spop_conn_init(&c->sp, w->srv->max_frame) < 0) {
        LOG_WARN("\"out of memory accepting a connection\"");
        free(c);
        close(fd);
        return -1;
    }
    c->w = w;
    c->fd = fd;
    ev_io_init(&c->rio, conn_read_cb, fd, EV_READ);
    ev_io_init(&c->wio, conn_write_cb, fd, EV_WRITE);
    ev_timer_init(&c->timer, conn_timer_cb, HELLO_TIMEOUT_S, 0.);
    c->rio.data = c->wio.data = c->timer.data = c;
    ev_io_start(w->loop, &c->rio);
    ev_timer_start(w->loop, &c->timer);
    c->reading = 1;
    c->next = w->conns;
    if (w->conns)
        w->conns->prev = c;
    w->conns = c;
    atomic_fetch_add(&metrics.connections, 1);
    METRIC_INC(connections_total);
    return 0;
}

/* 1 when the peer may have a connection: in the allow list, and below
 * max_connections (then counted in nconns). */
static int conn_admit(struct worker *w, const struct sockaddr *peer)
{
    const struct config *cfg = w->rs->cfg;
    unsigned long long suppressed;

    if (!net_peer_allowed(cfg->allow, cfg->nallow, peer)) {
        METRIC_INC(refused[METRICS_SPOP][METRICS_REFUSED_ALLOW]);
        LOG_DEBUG("\"peer refused by allow list\"");
        return 0;
    }
    if (atomic_fetch_add(&w->srv->nconns, 1) >= cfg->max_connections) {
        atomic_fetch_sub(&w->srv->nconns, 1);
        METRIC_INC(refused[METRICS_SPOP][METRICS_REFUSED_MAX_CONNS]);
        if (log_gate_open(&refuse_gate, REFUSE_LOG_EVERY_S, &suppressed))
            LOG_WARN("\"connection refused: max_connections reached\" max_connections=%u "
                     "refused_not_logged=%llu",
                     cfg->max_connections, suppressed);
        return 0;
    }
    return 1;
}

static void accept_cb(struct ev_loop *loop, ev_io *io, int revents)
{
    struct worker *w = io->data;

    for (int i = 0; i < ACCEPT_BATCH; i++) {
        struct sockaddr_storage ss;
        socklen_t sl = sizeof(ss);
        int one = 1;
        int fd = accept4(io->fd, (struct sockaddr *)&ss, &sl, SOCK_NONBLOCK | SOCK_CLOEXEC);

        if (fd == -1) {
            if (accept_guard_failed(&w->guard, errno))
                return;
            continue;
        }
        accept_guard_ok(&w->guard);
        if (!conn_admit(w, (struct sockaddr *)&ss)) {
            close(fd);
            continue;
        }
        if (ss.ss_family != AF_UNIX)
            setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        if (conn_new(w, fd) < 0)
            atomic_fetch_sub(&w->srv->nconns, 1);
    }
}

/* ---- workers ------------------------------------------------------------ */

/* Stopping: no more accepts, no more reads; every connection is told we go
 * away once what it is owed has been written. */
static void worker_begin_stop(struct worker *w)
{
    struct conn *c, *next;

    w->stopping = 1;
    accept_guard_stop(&w->guard);
    for (size_t i = 0; i < w->srv->nlfds; i++)
        ev_io_stop(w->loop, &w->accept_io[i]);
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

static void worker_finished(struct worker *w)
{
    pthread_mutex_lock(&w->srv->done_lock);
    w->srv->done++;
    pthread_cond_broadcast(&w->srv->done_cond);
    pthread_mutex_unlock(&w->srv->done_lock);
}

/* A stopping worker's loop ends once nothing is open or pending; a worker on
 * the main loop is counted as finished then (that loop goes on). */
static void worker_maybe_done(struct worker *w)
{
    if (w->stopping && !w->conns && w->pending == 0 && ev_is_active(&w->wake)) {
        ev_async_stop(w->loop, &w->wake);
        if (w->inline_loop)
            worker_finished(w);
    }
}

/* Answers went out on live connection c: parse the frames a pause left
 * unread once half the cap is free again, and close it once nothing is owed
 * when the worker stops or the peer half-closed. */
static void conn_answered(struct conn *c)
{
    struct worker *w = c->w;

    /* half-way down before reading on: not a parse per answer at the cap */
    if (c->sp.paused && c->npending <= MAX_WAITING_PER_CONN / 2 && !c->closing) {
        c->sp.paused = 0;
        conn_parse(c, 0);
    }
    if ((w->stopping || c->eof) && c->npending == 0 && !c->sp.paused && !c->closing) {
        if (w->stopping && c->sp.state == SPOP_CONN_READY)
            spop_conn_disconnect(&c->sp, SPOP_ST_NONE);
        c->closing = 1;
    }
}

/* Answer the requests the limiter completed, then write each connection
 * once (many ACKs in one write). */
static void finish_done_requests(struct worker *w)
{
    struct request *r, *next;
    struct conn *flush = NULL, *c;

    pthread_mutex_lock(&w->done_lock);
    r = w->done_reqs;
    w->done_reqs = NULL;
    pthread_mutex_unlock(&w->done_lock);
    for (; r; r = next) {
        next = r->next;
        c = r->conn;
        w->pending--;
        c->npending--;
        atomic_fetch_sub(&metrics.notifies_waiting, 1);
        if (!c->dead)
            request_finish(r);
        request_put(w, r);
        if (!c->to_flush) { /* dead ones too: freed below, once */
            c->to_flush = 1;
            c->flush_next = flush;
            flush = c;
        }
    }
    while ((c = flush)) {
        flush = c->flush_next;
        c->to_flush = 0;
        if (c->dead) {
            if (c->npending == 0)
                conn_free(c);
        } else {
            conn_answered(c);
            conn_flush(c);
        }
    }
    observe_written(w);
    worker_maybe_done(w);
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

static void *worker_main(void *arg)
{
    struct worker *w = arg;

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
        /* One worker shares the main loop, where the limiter talks to Redis:
         * a decision then costs no hop between threads (an eventfd write, a
         * wake-up and a context switch each way), which cost as much CPU as
         * the decision itself. An ev_async sent from its own loop's thread
         * makes no system call. */
        w->inline_loop = s->nworkers == 1;
        w->loop = w->inline_loop ? main_loop : ev_loop_new(EVFLAG_AUTO);
        w->accept_io = calloc(s->nlfds, sizeof(ev_io));
        if (!w->loop || !w->accept_io) {
            snprintf(err, errlen, "cannot create event loop");
            goto fail;
        }
        ruleset_ref(rs);
        w->rs = rs;
        pthread_mutex_init(&w->done_lock, NULL);
        ev_async_init(&w->wake, wake_cb);
        w->wake.data = w;
        ev_async_start(w->loop, &w->wake);
        for (size_t l = 0; l < s->nlfds; l++) {
            ev_io_init(&w->accept_io[l], accept_cb, s->lfds[l], EV_READ);
            w->accept_io[l].data = w;
            ev_io_start(w->loop, &w->accept_io[l]);
        }
        accept_guard_init(&w->guard, w->loop, w->accept_io, s->nlfds, "spop",
                          &metrics.accept_pauses[METRICS_SPOP]);
    }
    return s;
fail:
    server_free(s);
    return NULL;
}

int server_start(struct server *s)
{
    for (unsigned i = 0; i < s->nworkers; i++) {
        if (s->workers[i].inline_loop)
            continue; /* runs when the main loop does */
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
    if (s->nworkers == 1 && s->workers[0].inline_loop) {
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
                for (size_t l = 0; w->accept_io && l < s->nlfds; l++)
                    ev_io_stop(w->loop, &w->accept_io[l]);
                if (w->guard.loop)
                    accept_guard_stop(&w->guard);
                ev_async_stop(w->loop, &w->wake);
            } else {
                ev_loop_destroy(w->loop);
            }
        }
        free(w->accept_io);
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
