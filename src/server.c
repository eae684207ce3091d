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

#include "config/config.h"
#include "limiter.h"
#include "log.h"
#include "metrics.h"
#include "net.h"
#include "rules.h"
#include "spop/spop_conn.h"
#include "util.h"

#define LISTEN_BACKLOG 4096   /* an HAProxy reload opens a burst of connections */
#define ACCEPT_BATCH 64       /* accepts per wake-up, to stay fair to open connections */
#define OUT_HIGH_WATER (1u << 20) /* stop reading while this much output is unsent */

struct worker;

/* Connections past their HELLO, health checks excluded: "HAProxy connected"
 * and "no HAProxy connection left" are logged on its 0 <-> 1 transitions, so
 * health checks (a connection every few seconds) do not flood the log. */
static atomic_uint ready_conns;

struct conn {
    struct worker *w;
    int fd;
    ev_io rio, wio;
    struct spop_conn sp;
    int closing;   /* close once out[] is flushed */
    int reading;   /* rio started */
    int dead;      /* socket closed; freed when the last pending request ends */
    int ready;     /* counted in ready_conns: HELLO done, not a health check */
    unsigned npending; /* requests waiting for Redis */
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
    ev_async wake;
    ev_io *accept_io; /* one per listener */
    struct conn *conns;
    struct ruleset *rs;            /* in force on this worker */
    struct ruleset *_Atomic next_rs; /* handed over by server_set_ruleset */
    atomic_int stop;
    int stopping;
    uint64_t acked_t0[256];        /* NOTIFY read times of ACKs queued, not yet written */
    unsigned nacked;
    struct request *free_reqs;     /* recycled requests */
    unsigned nfree;
    unsigned pending;              /* requests waiting for Redis */
    pthread_mutex_t done_lock;     /* requests completed by the limiter's thread */
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
    atomic_int running;
    pthread_mutex_t done_lock;
    pthread_cond_t done_cond;
    unsigned done;
};

/* ---- connections -------------------------------------------------------- */

static void worker_maybe_done(struct worker *w);

/* Close the socket now; free the memory now, or when the last request that
 * still points to it comes back from the limiter (never from under it). */
static void conn_free(struct conn *c)
{
    struct worker *w = c->w;

    if (!c->dead) {
        ev_io_stop(w->loop, &c->rio);
        ev_io_stop(w->loop, &c->wio);
        close(c->fd);
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
        if (len > OUT_HIGH_WATER && c->reading) {
            ev_io_stop(w->loop, &c->rio);
            c->reading = 0;
        }
        return 0;
    }
    ev_io_stop(w->loop, &c->wio);
    if (c->closing) {
        conn_free(c);
        return -1;
    }
    if (!c->reading && !w->stopping) {
        ev_io_start(w->loop, &c->rio);
        c->reading = 1;
    }
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
        return 0;
    }
    request_finish(r);
    request_put(w, r);
    return 0;
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
            break;
        }
        n = recv(c->fd, p, room, 0);
        if (n == 0 || (n == -1 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
            conn_free(c);
            observe_written(w);
            return;
        }
        if (n == -1)
            break;
        int closing = spop_conn_in_commit(&c->sp, (size_t)n, on_notify, c);
        if (!c->ready && c->sp.state == SPOP_CONN_READY) {
            c->ready = 1;
            if (atomic_fetch_add(&ready_conns, 1) == 0)
                LOG_INFO("\"HAProxy connected\"");
        }
        if (closing) {
            c->closing = 1;
            ev_io_stop(loop, &c->rio);
            c->reading = 0;
            break;
        }
        if ((size_t)n < room)
            break;
    }
    conn_flush(c);
    observe_written(w);
}

static void conn_write_cb(struct ev_loop *loop, ev_io *io, int revents)
{
    conn_flush(io->data);
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
            if (errno == EMFILE || errno == ENFILE)
                LOG_WARN("\"accept failed\" err=\"%s\"", strerror(errno));
            return; /* EAGAIN: another worker took it */
        }
        if (!net_peer_allowed(w->rs->cfg->allow, w->rs->cfg->nallow, (struct sockaddr *)&ss)) {
            LOG_DEBUG("\"peer refused by allow list\"");
            close(fd);
            continue;
        }
        if (ss.ss_family != AF_UNIX)
            setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));

        struct conn *c = calloc(1, sizeof(*c));
        if (!c || spop_conn_init(&c->sp, w->srv->max_frame) < 0) {
            LOG_WARN("\"out of memory accepting a connection\"");
            free(c);
            close(fd);
            continue;
        }
        c->w = w;
        c->fd = fd;
        ev_io_init(&c->rio, conn_read_cb, fd, EV_READ);
        ev_io_init(&c->wio, conn_write_cb, fd, EV_WRITE);
        c->rio.data = c->wio.data = c;
        ev_io_start(loop, &c->rio);
        c->reading = 1;
        c->next = w->conns;
        if (w->conns)
            w->conns->prev = c;
        w->conns = c;
        atomic_fetch_add(&metrics.connections, 1);
        METRIC_INC(connections_total);
    }
}

/* ---- workers ------------------------------------------------------------ */

/* Stopping: no more accepts, no more reads; every connection is told we go
 * away once what it is owed has been written. */
static void worker_begin_stop(struct worker *w)
{
    struct conn *c, *next;

    w->stopping = 1;
    for (size_t i = 0; i < w->srv->nlfds; i++)
        ev_io_stop(w->loop, &w->accept_io[i]);
    for (c = w->conns; c; c = next) {
        next = c->next;
        ev_io_stop(w->loop, &c->rio);
        c->reading = 0;
        if (c->npending)
            continue; /* answered first, then closed (wake_cb) */
        if (c->sp.state == SPOP_CONN_READY)
            spop_conn_disconnect(&c->sp, SPOP_ST_NONE);
        c->closing = 1;
        conn_flush(c);
    }
    worker_maybe_done(w);
}

/* A stopping worker's loop ends once nothing is open or pending. */
static void worker_maybe_done(struct worker *w)
{
    if (w->stopping && !w->conns && w->pending == 0 && ev_is_active(&w->wake))
        ev_async_stop(w->loop, &w->wake);
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
        if (!c->dead) {
            request_finish(r);
            if (w->stopping && c->npending == 0 && !c->closing) {
                if (c->sp.state == SPOP_CONN_READY)
                    spop_conn_disconnect(&c->sp, SPOP_ST_NONE);
                c->closing = 1;
            }
        }
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
    pthread_mutex_lock(&w->srv->done_lock);
    w->srv->done++;
    pthread_cond_broadcast(&w->srv->done_cond);
    pthread_mutex_unlock(&w->srv->done_lock);
    return NULL;
}

struct server *server_new(const struct config *cfg, struct ruleset *rs, struct limiter *lim,
                          char *err, size_t errlen)
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
        w->loop = ev_loop_new(EVFLAG_AUTO);
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
    }
    return s;
fail:
    server_free(s);
    return NULL;
}

int server_start(struct server *s)
{
    for (unsigned i = 0; i < s->nworkers; i++) {
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
            ev_loop_destroy(w->loop);
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
