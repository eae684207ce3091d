/* SPDX-License-Identifier: Apache-2.0 */
/* server_conn.c - one SPOP connection on a worker's loop: accepting and
 * admitting it, non-blocking reads and writes, the HELLO and drain deadlines,
 * and the NOTIFYs it sends, handed to the limiter and answered when their
 * decisions come back; and the end of a stopping worker, which its last
 * connection or request brings. The listeners and the workers' lifecycle
 * are server.c; the accept loop itself is listener.c. */
#include "server_int.h"

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
#include <unistd.h>

#include "config/config.h"
#include "core/log.h"
#include "core/net.h"
#include "core/util.h"
#include "limiter/limiter.h"
#include "metrics/metrics.h"
#include "rules/rules.h"
#include "spop/spop_conn.h"

#define ACCEPT_BATCH 64           /* accepts per wake-up, to stay fair to open connections */
#define OUT_HIGH_WATER (1u << 20) /* stop reading while this much output is unsent */
#define DRAIN_TIMEOUT_S 5.0       /* a half-closed peer gets its answers within this, or none */
/* NOTIFYs of one connection waiting for Redis at once. HAProxy sends at most
 * max-waiting-frames (20 by default) before it waits for ACKs; past this the
 * connection's frames stay unread until answers go out (TCP pushes back),
 * rather than a DISCONNECT, which HAProxy would take as an error for every
 * request in flight on it. */
#define MAX_WAITING_PER_CONN 256
#define REFUSE_LOG_EVERY_S 10.0
#define EVICT_LOG_EVERY_S 10.0
#define ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))
/* Candidates for an idle eviction found with bytes unread, at most, before
 * the new connection is refused instead (see evict_idle). */
#define IDLE_PEEK_MAX 4
/* DISCONNECT lines: bursts of 20, ten a second on average, the rest counted
 * in the next line (a peer that connects and disconnects in a loop cannot
 * flood the log). */
#define DISCONNECT_LOG_EVERY_S 0.1
#define DISCONNECT_LOG_BURST 20

/* Connections past their HELLO, health checks excluded: "HAProxy connected"
 * and "no HAProxy connection left" are logged on its 0 <-> 1 transitions, so
 * health checks (a connection every few seconds) do not flood the log. */
static atomic_uint ready_conns;

/* ---- the worker's end ---------------------------------------------------- */

/* A worker ends when its last connection closes and its last request is
 * answered, both seen here. */
void worker_finished(struct worker *w)
{
    pthread_mutex_lock(&w->srv->done_lock);
    w->srv->done++;
    pthread_cond_broadcast(&w->srv->done_cond);
    pthread_mutex_unlock(&w->srv->done_lock);
}

/* A stopping worker's loop ends once nothing is open or pending; a worker on
 * the main loop is counted as finished then (that loop goes on). */
void worker_maybe_done(struct worker *w)
{
    if (w->stopping && !w->conns && w->pending == 0 && ev_is_active(&w->wake)) {
        ev_async_stop(w->loop, &w->wake);
        if (w->inline_loop)
            worker_finished(w);
    }
}

/* ---- connections -------------------------------------------------------- */

static struct log_gate refuse_gate;     /* "max_connections reached" lines */
static struct log_gate evict_gate;      /* "closed before their HELLO" lines */
static struct log_gate idle_gate;       /* "idle connections closed" lines */
static struct log_gate disconnect_gate; /* DISCONNECT lines, both ways */

/* ---- the handshake list --------------------------------------------------

 * A connection is on its worker's handshake list from accept until its
 * HAPROXY-HELLO is in (or it closes). Accepting appends, so the head is the
 * oldest: the one conn_admit closes when a cap is reached. Connections
 * past their HELLO are never closed to make room. */

static void handshake_add(struct worker *w, struct conn *c)
{
    dlist_push_tail(&w->handshakes, &c->hs);
    w->nhandshakes++;
}

static void handshake_end(struct conn *c)
{
    if (!dlist_linked(&c->hs))
        return;
    dlist_del(&c->hs);
    c->w->nhandshakes--;
}

/* This worker's share of [agent] max_handshakes: the listening socket is
 * shared, so a flood lands on every worker about evenly, and each makes
 * room among its own connections. */
static unsigned handshake_cap(const struct worker *w, const struct config *cfg)
{
    unsigned n = w->srv->nworkers ? w->srv->nworkers : 1;
    unsigned cap = cfg->max_handshakes / n + (cfg->max_handshakes % n != 0);

    return cap ? cap : 1;
}

/* Why a connection ended, when a DISCONNECT frame said it: once per
 * connection, with the peer's address, so that an operator can tell from the
 * log why HAProxy dropped the agent (or the agent HAProxy). A normal end is
 * info: status 0, and HAProxy's own timeout (status 2), which HAProxy 2.6
 * sends when it closes an idle connection (`timeout idle` of the SPOE file),
 * several times an hour on a healthy setup: a warning there would teach
 * operators to ignore warnings. Any other status, and a timeout the agent
 * sends (no HELLO in time, a stalled peer), is a warning. */
static void conn_log_disconnect(const struct conn *c)
{
    const struct spop_conn *sp = &c->sp;
    unsigned status = sp->peer_disconnected ? sp->peer_status : sp->status;
    int normal = !status || (sp->peer_disconnected && status == SPOP_ST_TIMEOUT);
    int lvl = normal ? LOG_LVL_INFO : LOG_LVL_WARN;
    unsigned long long suppressed;
    char peer[NET_PEER_TEXT_MAX];

    if (!sp->peer_disconnected && !sp->disconnect_sent)
        return; /* closed without a word: EOF, reset, eviction (counted elsewhere) */
    net_format_peer((const struct sockaddr *)&c->peer, 1, peer, sizeof(peer));
    if (sp->peer_disconnected) /* the status page's "last DISCONNECT" */
        metrics_note_disconnect((int)status, sp->peer_message, strlen(sp->peer_message), peer);
    if (lvl > log_level || !log_gate_open_burst(&disconnect_gate, DISCONNECT_LOG_EVERY_S,
                                                DISCONNECT_LOG_BURST, &suppressed))
        return;
    if (sp->peer_disconnected)
        log_write(lvl,
                  "\"HAPROXY-DISCONNECT received\" peer=%s status=%u message=\"%s\" "
                  "disconnects_not_logged=%llu",
                  peer, status, log_esc(sp->peer_message, strlen(sp->peer_message)), suppressed);
    else
        log_write(lvl,
                  "\"AGENT-DISCONNECT sent\" peer=%s status=%u message=\"%s\" during=%s "
                  "disconnects_not_logged=%llu",
                  peer, status, spop_status_str(status), c->ready ? "session" : "hello",
                  suppressed);
}

/* Close the socket now; free the memory now, or when the last request that
 * still points to it comes back from the limiter (never from under it). */
void conn_free(struct conn *c)
{
    struct worker *w = c->w;

    if (!c->dead) {
        handshake_end(c);
        idle_lru_del(&w->idle, &c->idle);
        conn_log_disconnect(c);
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
void conn_update_reading(struct conn *c)
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

/* A peer that takes none of its answers while more than OUT_HIGH_WATER is
 * unsent has its reading stopped (conn_update_reading), so an EOF it sent
 * after its last frames is never read and the drain deadline never starts:
 * without this it would be kept for ever. The write deadline runs from the
 * last write that made progress; a peer that reads again stops it. Not
 * before the HELLO is in (its own deadline runs then) nor after the EOF
 * (the drain deadline runs). */
static void write_deadline(struct conn *c, size_t unsent, int progress)
{
    struct worker *w = c->w;
    int stalled = unsent > OUT_HIGH_WATER;

    if (c->eof || c->sp.state == SPOP_CONN_HELLO)
        return;
    if (stalled && (progress || !ev_is_active(&c->timer))) {
        ev_timer_stop(w->loop, &c->timer);
        ev_timer_set(&c->timer, DRAIN_TIMEOUT_S, 0.);
        ev_timer_start(w->loop, &c->timer);
    } else if (!stalled && c->out_stalled) {
        ev_timer_stop(w->loop, &c->timer);
    }
    c->out_stalled = stalled;
}

/* Write what is pending. Returns -1 when the connection is gone (freed). */
int conn_flush(struct conn *c)
{
    struct worker *w = c->w;
    size_t len;
    const uint8_t *p;
    int progress = 0;

    metrics_local_flush(); /* what the answers below report is counted first */
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
        progress = 1;
    }
    spop_conn_out(&c->sp, &len);
    write_deadline(c, len, progress);
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
    r->lr.rs = NULL; /* a reference, if it held one, went in finish_done_requests */
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

/* Settle, account, answer, recycle. The one limiter_settle() a request
 * gets (the limiter leaves it to us): now_us is the decision's time for a
 * request answered in on_notify (r->t0, no clock read), the reply's for
 * one that waited. */
static void request_finish(struct request *r, uint64_t now_us)
{
    struct conn *c = r->conn;
    struct ack_arg a = {r->lr.rs, &r->lr.ev};

    limiter_settle(r->w->srv->lim, &r->lr, now_us);
    rules_account(r->lr.rs, &r->lr.ev, r->t0);
    int ret = spop_conn_ack(&c->sp, r->stream_id, r->frame_id, encode_ack, &a);
    if (ret == 0)
        METRIC_INC_LOCAL(acks);
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
    metrics_local_flush();
    if (w->nacked == 0)
        return; /* no clock read when nothing was answered */
    metrics_hist_observe_since(&metrics.decision, util_now_us(), w->acked_t0, w->nacked);
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
    if (w->inline_loop) /* this thread: pump_cb answers it before the loop polls */
        w->done_inline = 1;
    else if (!ev_async_pending(&w->wake)) /* as in limiter_decide(): no second fence */
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
    /* Read per NOTIFY, not once per read batch: a lease spends a token only
     * before its deadline, margin ahead of Redis dropping it, and a time as
     * old as a preempted batch's processing could pass that check after
     * the lease is gone (doc/performance.md, the reverted clock reads). */
    r->t0 = util_now_us();
    r->w = w;
    r->conn = c;
    r->stream_id = f->stream_id;
    r->frame_id = f->frame_id;
    r->lr.done = request_done;
    /* The worker's reference keeps w->rs alive until this returns (a reload
     * swaps it in wake_cb, on this thread): a request answered here takes
     * none of its own, two atomic operations fewer per decision. */
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
    if (ret == 1) {            /* waits for Redis: answered from wake_cb */
        ruleset_ref(r->lr.rs); /* past a reload, until it is answered */
        c->npending++;
        w->pending++;
        atomic_fetch_add(&metrics.notifies_waiting, 1);
        if (c->npending >= MAX_WAITING_PER_CONN) {
            c->sp.paused = 1; /* the next frames wait in in[] (see MAX_WAITING_PER_CONN) */
            METRIC_INC(notify_read_pauses);
        }
        return 0;
    }
    request_finish(r, r->t0);
    request_put(w, r);
    return 0;
}

/* Parse n more bytes (0: the frames a pause left in in[]). Returns 1 when
 * reading must stop: the connection is closing, or paused at the cap. */
static int conn_parse(struct conn *c, size_t n)
{
    struct worker *w = c->w;
    int closing = spop_conn_in_commit(&c->sp, n, on_notify, c);

    if (c->sp.frames_in != c->frames_seen) { /* a whole frame: not idle */
        c->frames_seen = c->sp.frames_in;
        idle_lru_touch(&w->idle, &c->idle, util_now_us());
    }
    if (dlist_linked(&c->hs) && c->sp.state != SPOP_CONN_HELLO)
        handshake_end(c); /* the HELLO is in (or refused: closing) */
    if (c->sp.state != SPOP_CONN_HELLO && !c->eof)
        ev_timer_stop(w->loop, &c->timer);
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

        if (room == 0) { /* out of memory growing in[] (a full-size one has room) */
            spop_conn_disconnect(&c->sp, SPOP_ST_RES_ALLOC_ERR);
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

/* No HELLO in time, a half-closed peer still owed answers past the drain
 * deadline, or a peer that took none of its answers past the write deadline. */
static void conn_timer_cb(struct ev_loop *loop, ev_timer *t, int revents)
{
    struct conn *c = t->data;

    if (c->eof || c->out_stalled) {
        METRIC_INC(timeouts[METRICS_TIMEOUT_DRAIN]);
        LOG_DEBUG("\"%s\" waiting=%u",
                  c->eof ? "half-closed connection not drained in time"
                         : "peer not reading its answers; closing",
                  c->npending);
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

/* A new connection on w from peer (sl bytes), on its handshake list, or
 * NULL with the fd closed (out of memory). */
static struct conn *conn_new(struct worker *w, int fd, const struct sockaddr_storage *peer,
                             socklen_t sl)
{
    struct conn *c = calloc(1, sizeof(*c));

    if (!c || spop_conn_init(&c->sp, w->srv->max_frame) < 0) {
        LOG_WARN("\"out of memory accepting a connection\"");
        free(c);
        close(fd);
        return NULL;
    }
    c->w = w;
    c->fd = fd;
    memcpy(&c->peer, peer, sl < sizeof(c->peer) ? sl : sizeof(c->peer));
    ev_io_init(&c->rio, conn_read_cb, fd, EV_READ);
    ev_io_init(&c->wio, conn_write_cb, fd, EV_WRITE);
    ev_timer_init(&c->timer, conn_timer_cb, (double)w->rs->cfg->hello_timeout_ms / 1000., 0.);
    c->rio.data = c->wio.data = c->timer.data = c;
    ev_io_start(w->loop, &c->rio);
    ev_timer_start(w->loop, &c->timer);
    c->reading = 1;
    c->next = w->conns;
    if (w->conns)
        w->conns->prev = c;
    w->conns = c;
    handshake_add(w, c);
    idle_lru_touch(&w->idle, &c->idle, util_now_us()); /* idle from its accept */
    atomic_fetch_add(&metrics.connections, 1);
    METRIC_INC(connections_total);
    return c;
}

/* Whether two peers have the same address (ports aside). */
static int same_host(const struct sockaddr_storage *a, const struct sockaddr_storage *b)
{
    if (a->ss_family != b->ss_family)
        return 0;
    if (a->ss_family == AF_INET)
        return ((const struct sockaddr_in *)(const void *)a)->sin_addr.s_addr ==
               ((const struct sockaddr_in *)(const void *)b)->sin_addr.s_addr;
    if (a->ss_family == AF_INET6)
        return memcmp(&((const struct sockaddr_in6 *)(const void *)a)->sin6_addr,
                      &((const struct sockaddr_in6 *)(const void *)b)->sin6_addr, 16) == 0;
    return 1; /* unix: all one "host" */
}

/* Remember peer in list (n of max), once per host, for the next log line. */
static void note_peer(struct sockaddr_storage *list, unsigned *n, unsigned max,
                      const struct sockaddr_storage *peer)
{
    unsigned i;

    for (i = 0; i < *n; i++)
        if (same_host(&list[i], peer))
            return;
    if (i < max)
        list[(*n)++] = *peer;
}

/* The n peers of list as "a,b,c" into out (room for 4), for a log line. */
static void format_peers(const struct sockaddr_storage *list, unsigned n, char *out, size_t len)
{
    char one[NET_PEER_TEXT_MAX], *p = out;

    *out = '\0';
    for (unsigned i = 0; i < n; i++) {
        net_format_peer((const struct sockaddr *)&list[i], 0, one, sizeof(one));
        p += snprintf(p, len - (size_t)(p - out), "%s%s", i ? "," : "", one);
    }
}

/* Close w's oldest connection still in its handshake, to admit a new one
 * (cap: which cap was reached, for the log). 0 when w has none. The warning
 * names the peers evicted since the last one, at most every
 * EVICT_LOG_EVERY_S. */
static int evict_oldest_handshake(struct worker *w, const char *cap)
{
    const struct config *cfg = w->rs->cfg;
    unsigned long long suppressed;
    char peers[4 * (NET_PEER_TEXT_MAX + 1)];

    if (dlist_empty(&w->handshakes))
        return 0;
    struct conn *c = DLIST_ENTRY(w->handshakes.next, struct conn, hs);
    listener_count(&w->lis, METRICS_REFUSED_HANDSHAKE_EVICTED);
    note_peer(w->evicted_peers, &w->nevicted_peers, ARRAY_LEN(w->evicted_peers), &c->peer);
    if (log_gate_open(&evict_gate, EVICT_LOG_EVERY_S, &suppressed)) {
        format_peers(w->evicted_peers, w->nevicted_peers, peers, sizeof(peers));
        LOG_WARN("\"connections closed before their HELLO to admit new ones\" cap=%s "
                 "max_handshakes=%u max_connections=%u handshakes_on_worker=%u peers=%s "
                 "evicted_not_logged=%llu",
                 cap, cfg->max_handshakes, cfg->max_connections, w->nhandshakes, log_val(peers),
                 suppressed);
        w->nevicted_peers = 0;
    }
    conn_free(c);
    return 1;
}

/* Close w's connection idle the longest, past its HELLO, to admit a new one
 * at max_connections: 0 when it has had a whole frame within [agent]
 * idle_grace (so has every other one: the new connection is refused). Only
 * this worker's connections are looked at, not another worker's (their
 * lists are theirs, on their threads). A warning at most every
 * EVICT_LOG_EVERY_S names the peers evicted since the last one and counts
 * the evictions it did not log. */
static int evict_idle(struct worker *w)
{
    const struct config *cfg = w->rs->cfg;
    uint64_t now = util_now_us();
    struct idle_lru_node *n;
    struct conn *c;
    unsigned long long suppressed;
    char peers[4 * (NET_PEER_TEXT_MAX + 1)];
    char byte;

    for (unsigned tries = 0;; tries++) {
        n = idle_lru_evictable(&w->idle, now, cfg->idle_grace_ms * 1000);
        if (!n || tries == IDLE_PEEK_MAX)
            return 0;
        c = IDLE_LRU_ENTRY(n, struct conn, idle);
        /* Bytes waiting unread: the peer is not idle. They came in this
         * loop iteration, their read callback to run after this accept's
         * (libev runs the latest event first): an HAProxy's NOTIFY, lost
         * if it were closed now. Or its reading is paused (answers owed). */
        if (recv(c->fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT) <= 0)
            break;
        idle_lru_touch(&w->idle, n, now);
    }
    listener_count(&w->lis, METRICS_REFUSED_IDLE_EVICTED);
    note_peer(w->idle_evicted_peers, &w->nidle_evicted_peers, ARRAY_LEN(w->idle_evicted_peers),
              &c->peer);
    if (log_gate_open(&idle_gate, EVICT_LOG_EVERY_S, &suppressed)) {
        format_peers(w->idle_evicted_peers, w->nidle_evicted_peers, peers, sizeof(peers));
        LOG_WARN("\"idle connections closed to admit new ones\" max_connections=%u "
                 "idle_grace_ms=%llu idle_ms=%llu peers=%s evicted_not_logged=%llu",
                 cfg->max_connections, (unsigned long long)cfg->idle_grace_ms,
                 (unsigned long long)((now - n->last_us) / 1000), log_val(peers), suppressed);
        w->nidle_evicted_peers = 0;
    }
    conn_free(c);
    return 1;
}

/* The listener's peer check: [agent] allow of the ruleset in force. */
static const struct net_cidr *conn_allow(void *ctx, size_t *n)
{
    const struct config *cfg = ((struct worker *)ctx)->rs->cfg;

    *n = cfg->nallow;
    return cfg->allow;
}

/* 0 when an allowed peer may have a connection (then counted in nconns):
 * with room below max_connections and this worker's share of
 * max_handshakes, made if need be by closing the worker's oldest connection
 * still in its handshake (OpenSSH's MaxStartups, with the oldest instead of
 * a random one: a peer that has not said HELLO in the time the cap takes to
 * fill again is not a live HAProxy). With none, at max_connections, the
 * connection idle the longest is closed if it has sent no whole frame for
 * [agent] idle_grace (longer than HAProxy keeps an idle SPOE connection:
 * silent peers cannot lock HAProxy out); else the new one is refused (-1). */
static int conn_admit(void *ctx, const struct sockaddr *peer)
{
    struct worker *w = ctx;
    const struct config *cfg = w->rs->cfg;
    unsigned long long suppressed;

    while (w->nhandshakes >= handshake_cap(w, cfg))
        evict_oldest_handshake(w, "max_handshakes");
    while (atomic_fetch_add(&w->srv->nconns, 1) >= cfg->max_connections) {
        atomic_fetch_sub(&w->srv->nconns, 1);
        if (evict_oldest_handshake(w, "max_connections") || evict_idle(w))
            continue;
        if (log_gate_open(&refuse_gate, REFUSE_LOG_EVERY_S, &suppressed))
            LOG_WARN("\"connection refused: max_connections reached\" max_connections=%u "
                     "refused_not_logged=%llu",
                     cfg->max_connections, suppressed);
        return -1;
    }
    return 0;
}

/* An admitted connection (counted in nconns) becomes a struct conn. */
static void conn_take(void *ctx, int fd, const struct sockaddr_storage *peer, socklen_t len)
{
    struct worker *w = ctx;
    int one = 1;

    if (peer->ss_family != AF_UNIX)
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    struct conn *c = conn_new(w, fd, peer, len);
    if (!c) {
        atomic_fetch_sub(&w->srv->nconns, 1);
        return;
    }
    /* HAProxy sends its HELLO right after connecting: it is often in
     * already, and read now it takes the connection off the handshake
     * list before the next accepts could evict it. */
    conn_read_cb(w->loop, &c->rio, EV_READ);
}

const struct listener_ops conn_listener_ops = {
    .name = "spop",
    .kind = METRICS_SPOP,
    .budget = ACCEPT_BATCH,
    .refused_line = "peer refused by allow list",
    .warn_refused = 0,
    .allow = conn_allow,
    .admit = conn_admit,
    .take = conn_take,
};

/* ---- answers from the limiter ------------------------------------------- */

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
void finish_done_requests(struct worker *w)
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
            request_finish(r, util_now_us());
        else /* no ACK, but slots and charges still go back */
            limiter_settle(w->srv->lim, &r->lr, util_now_us());
        ruleset_unref(r->lr.rs); /* the one on_notify took as it waited */
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
