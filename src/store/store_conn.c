/* SPDX-License-Identifier: Apache-2.0 */
/* store_conn.c - one asynchronous Redis connection (hiredis 0.14 + libev):
 * EVALSHA with NOSCRIPT reload and retry, redirects handed to the owner,
 * the commands in flight, a watchdog, keepalive, reconnect with backoff. The
 * setup commands and what a refusal means are store_conn_setup.c's, below
 * it: it answers, this file acts.
 *
 * Lifetime rules. A hiredis callback cannot be cancelled, and a context given
 * up with redisAsyncFree() runs its pending callbacks with a NULL reply, at
 * once or (inside one of its callbacks) right after that callback returns. So:
 * a reply callback never touches its priv when the reply is NULL (the command
 * has failed or will fail through the list walk of conn_lost); every callback
 * ignores a context that is not conn->ac any more; conn->ac is cleared before
 * the context is freed. A connection is never freed from inside its own
 * callbacks, so ac->data is valid whenever hiredis calls us.
 */
#include "store_conn.h"

#include <errno.h>
#include <ev.h>
#include <hiredis/adapters/libev.h>
#include <hiredis/async.h>
#include <hiredis/hiredis.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "core/net.h"
#include "core/util.h"
#include "core/warning.h"
#include "metrics/metrics.h"
#include "store_backoff.h"
#include "store_conn_setup.h"
#include "store_errors.h"
#include "store_lookup.h"
#include "store_reply.h"
#include "store_reply_check.h"
#include "store_reply_pool.h"
#include "store_why.h"

#define WATCHDOG_EVERY 0.05

static void set_addr_owned(struct store_conn *conn, char *h, int port);

/* ---- commands in flight ---------------------------------------------------- */

static void cmd_link(struct store_conn *conn, struct store_cmd *c)
{
    c->conn = conn;
    c->prev = conn->tail;
    c->next = NULL;
    if (conn->tail)
        conn->tail->next = c;
    else
        conn->head = c;
    conn->tail = c;
    conn->inflight++;
    conn->env->pending++;
}

static void cmd_unlink(struct store_cmd *c)
{
    struct store_conn *conn = c->conn;

    if (c->prev)
        c->prev->next = c->next;
    else
        conn->head = c->next;
    if (c->next)
        c->next->prev = c->prev;
    else
        conn->tail = c->prev;
    c->prev = c->next = NULL;
    c->conn = NULL;
    conn->inflight--;
    conn->env->pending--;
}

/* Take the queue over (the caller sends or fails every command on it). */
static struct store_cmd *queue_take(struct store_conn *conn)
{
    struct store_cmd *q = conn->qhead;

    conn->env->pending -= conn->qlen;
    conn->qhead = conn->qtail = NULL;
    conn->qlen = 0;
    return q;
}

static void fail_list(struct store_cmd *c, const char *why)
{
    struct store_cmd *next;

    for (; c; c = next) {
        next = c->next;
        c->next = NULL;
        METRIC_INC(redis_errors);
        store_cmd_fail(c, STORE_DOWN, why);
    }
}

/* Fail what waits to be sent again after a TRYAGAIN. */
static void later_fail(struct store_conn *conn, const char *why)
{
    struct store_cmd *l = conn->lhead;

    ev_timer_stop(conn->env->loop, &conn->later);
    for (struct store_cmd *c = l; c; c = c->next)
        conn->env->pending--;
    conn->lhead = conn->ltail = NULL;
    fail_list(l, why);
}

/* ---- connection state ---------------------------------------------------- */

static void set_ready(struct store_conn *conn, int ready)
{
    if (conn->ready == ready)
        return;
    conn->ready = ready;
    if (conn->hooks->state)
        conn->hooks->state(conn->owner, conn, ready);
}

/* The connection is gone, or given up. ac: a context to free (NULL when
 * hiredis is freeing it already). Fails what is in flight; retry: schedule the
 * retry hook after the backoff. */
static void conn_lost(struct store_conn *conn, redisAsyncContext *ac, const char *why, int retry)
{
    char reason[ERR_LEN];
    struct store_cmd *c;

    snprintf(reason, sizeof(reason), "%s", why); /* why may live in ac */
    if (conn->trial)
        ; /* the trial's owner says it */
    else if (conn->ready && !conn->refused)
        LOG_WARN("\"redis connection lost\" addr=%s err=\"%s\"", log_val(conn->name),
                 log_esc(reason, strlen(reason)));
    else if (strcmp(conn->last_err, reason) != 0)
        LOG_WARN("\"redis unreachable\" addr=%s err=\"%s\"", log_val(conn->name),
                 log_esc(reason, strlen(reason)));
    if (retry && !conn->trial) /* (not a deliberate restart) */
        store_why_note(conn->name, reason);
    snprintf(conn->last_err, sizeof(conn->last_err), "%s", reason);
    conn->ac = NULL;
    conn->connected = 0;
    conn->loading = 0;
    conn->fcall_loading = 0;
    store_conn_set_fcall(conn, 0);
    conn->ping_us = 0;
    ev_timer_stop(conn->env->loop, &conn->watchdog);
    if (ac)
        redisAsyncFree(ac); /* deferred by hiredis when inside one of its callbacks */
    set_ready(conn, 0);
    while ((c = conn->head)) {
        cmd_unlink(c);
        METRIC_INC(redis_errors);
        store_cmd_fail(c, STORE_DOWN, reason);
    }
    fail_list(queue_take(conn), reason);
    later_fail(conn, reason);
    if (retry)
        store_conn_retry_later(conn);
}

/* Reply of a setup command (AUTH, SELECT, ROLE, SCRIPT LOAD, the probe;
 * priv says which): store_conn_setup.c judges it, this acts. */
static void on_setup_reply(redisAsyncContext *ac, void *r, void *priv)
{
    struct store_conn *conn = ac->data;
    redisReply *reply = r;

    if (!reply || conn->ac != ac)
        return; /* going away: conn_lost handles it */
    conn->io_us = util_now_us();
    switch (store_conn_setup_reply(conn, (long)(intptr_t)priv, reply)) {
    case STORE_CONN_SETUP_READY:
        /* the backoff goes back to its minimum once this lasts (watchdog):
         * a Redis that breaks every connection at its first call must not
         * be reconnected to at the minimum each time */
        conn->ready_us = conn->io_us;
        set_ready(conn, 1);
        break;
    case STORE_CONN_SETUP_LOST:
        conn_lost(conn, ac, conn->last_err, 1);
        break;
    case STORE_CONN_SETUP_WAIT:
        break;
    }
}

static void on_connect(const redisAsyncContext *ac, int status)
{
    struct store_conn *conn = ac->data;

    if (conn->ac != ac)
        return;
    if (status != REDIS_OK) {
        /* hiredis frees ac after this callback */
        conn_lost(conn, NULL, ac->errstr[0] ? ac->errstr : "connect failed", 1);
        return;
    }
    conn->connected = 1;
}

static void on_disconnect(const redisAsyncContext *ac, int status)
{
    struct store_conn *conn = ac->data;
    char why[ERR_LEN];

    if (conn->ac != ac)
        return; /* a context we gave up already */
    if (status != REDIS_OK && conn->cap.unasked) {
        /* hiredis would abort on it: a broken or hostile server */
        store_conn_bad(conn, METRICS_REDIS_BAD_REPLY, "a reply", conn->cap.why, -1);
        conn_lost(conn, NULL, conn->last_err, 1);
        return;
    }
    if (status != REDIS_OK && store_reply_cap_refused(&conn->cap)) {
        /* the reader refused an object (its error reads "Out of memory") */
        store_conn_too_large(conn, why, sizeof(why));
        conn_lost(conn, NULL, why, 1);
        return;
    }
    if (status != REDIS_OK && ac->err == REDIS_ERR_PROTOCOL) {
        /* bytes that are no RESP: what else it says cannot be trusted */
        store_conn_bad(conn, METRICS_REDIS_BAD_REPLY, "a reply", ac->errstr, -1);
        conn_lost(conn, NULL, conn->last_err, 1);
        return;
    }
    conn_lost(conn, NULL, status == REDIS_OK ? "closed" : (ac->errstr[0] ? ac->errstr : "error"),
              1);
}

/* Readable: stamp the time, then let hiredis read and run the callbacks
 * (redisLibevReadEvent, plus the stamp). Then the bytes of a reply not
 * parsed yet: hiredis makes a bulk string only once all of it is in, so a
 * header announcing 512 MB would be buffered whole; past the caps' buffer
 * the connection is given up, which frees them (store_reply_cap.h). conn
 * outlives the read; e->context may not. */
static void read_cb(struct ev_loop *loop, ev_io *w, int revents)
{
    const redisLibevEvents *e = w->data;
    struct store_conn *conn = e->context->data;
    char why[ERR_LEN];

    conn->read_us = util_now_us();
    redisAsyncHandleRead(e->context);
    if (conn->ac && store_reply_cap_buffer(conn->ac->c.reader, &conn->cap) < 0) {
        store_conn_too_large(conn, why, sizeof(why));
        conn_lost(conn, conn->ac, why, 1);
    }
}

/* Connect to ip (numeric: hiredis then looks nothing up) or the unix path. */
static void connect_to(struct store_conn *conn, const char *ip)
{
    struct ev_loop *loop = conn->env->loop;
    redisAsyncContext *ac;

    if (conn->unix_path)
        ac = redisAsyncConnectUnix(conn->unix_path);
    else
        ac = redisAsyncConnect(ip, conn->port);
    if (!ac || ac->err) {
        char why[ERR_LEN];
        snprintf(why, sizeof(why), "%s", ac ? ac->errstr : "out of memory");
        if (ac)
            redisAsyncFree(ac);
        conn_lost(conn, NULL, why, 1);
        return;
    }
    ac->data = conn;
    /* reply structs recycled, and none past the caps */
    store_reply_cap_install(ac->c.reader, &conn->cap, &store_reply_pool_fns);
    store_reply_cap_expect(&conn->cap, &ac->replies);
    if (!conn->unix_path && net_tcp_keepalive(ac->c.fd, STORE_TCP_KEEPIDLE, STORE_TCP_KEEPINTVL,
                                              STORE_TCP_KEEPCNT) == -1)
        LOG_DEBUG("\"redis tcp keepalive not set\" addr=%s err=\"%s\"", log_val(conn->name),
                  log_esc(strerror(errno), strlen(strerror(errno))));
    conn->ac = ac;
    conn->connect_us = conn->io_us = util_now_us();
    if (redisLibevAttach(loop, ac) == REDIS_OK) /* (a new context: it is) */
        ev_set_cb(&((redisLibevEvents *)ac->ev.data)->rev, read_cb);
    redisAsyncSetConnectCallback(ac, on_connect);
    redisAsyncSetDisconnectCallback(ac, on_disconnect);
    /* Commands queue until the connection is made, in order. */
    store_conn_send_setup(conn, on_setup_reply);
    ev_timer_again(loop, &conn->watchdog);
}

static void on_lookup(void *arg, const char *ip, const char *err)
{
    struct store_conn *conn = arg;

    conn->lookup = NULL;
    if (!ip) {
        conn_lost(conn, NULL, err, 1);
        return;
    }
    connect_to(conn, ip);
}

void store_conn_connect(struct store_conn *conn)
{
    if (conn->ac || conn->lookup)
        return;
    ev_timer_stop(conn->env->loop, &conn->retry);
    if (!conn->host && !conn->unix_path) {
        conn_lost(conn, NULL, "no address", 1);
        return;
    }
    if (conn->unix_path || net_host_is_numeric(conn->host)) {
        connect_to(conn, conn->host);
        return;
    }
    /* a name: looked up off the loop (store_lookup.h); not usable meanwhile */
    conn->lookup = store_lookup_start(conn->env->loop, conn->host, on_lookup, conn);
    if (!conn->lookup)
        conn_lost(conn, NULL, "cannot start a name lookup", 1);
}

static void retry_cb(struct ev_loop *loop, ev_timer *t, int revents)
{
    struct store_conn *conn = t->data;

    if (conn->ac || conn->lookup)
        return;
    if (conn->hooks->retry)
        conn->hooks->retry(conn->owner, conn);
    else
        store_conn_connect(conn);
}

void store_conn_retry_later(struct store_conn *conn)
{
    struct ev_loop *loop = conn->env->loop;

    /* xorshift32: jitter only, no secret */
    conn->rnd ^= conn->rnd << 13;
    conn->rnd ^= conn->rnd >> 17;
    conn->rnd ^= conn->rnd << 5;
    ev_timer_stop(loop, &conn->retry);
    ev_timer_set(&conn->retry, store_backoff_wait(conn->backoff, conn->rnd), 0.);
    ev_timer_start(loop, &conn->retry);
    conn->backoff = store_backoff_next(conn->backoff);
}

int store_conn_restart(struct store_conn *conn, const char *host, int port, const char *why)
{
    char *h = strdup(host);

    if (!h)
        return -1;
    if (conn->ac)
        conn_lost(conn, conn->ac, why, 0);
    set_addr_owned(conn, h, port);
    conn->backoff = STORE_BACKOFF_MIN;
    store_conn_connect(conn);
    return 0;
}

void store_conn_drop(struct store_conn *conn, const char *why)
{
    if (conn->ac)
        conn_lost(conn, conn->ac, why, 1);
}

/* The keepalive PING's reply. An error reply counts as a failed command does;
 * the connection stays (a late or missing reply is the watchdog's). */
static void on_ping_reply(redisAsyncContext *ac, void *r, void *priv)
{
    struct store_conn *conn = ac->data;
    redisReply *reply = r;

    if (!reply || conn->ac != ac)
        return; /* going away: conn_lost handles it */
    conn->ping_us = 0;
    conn->io_us = util_now_us();
    if (reply->type == REDIS_REPLY_ERROR) {
        METRIC_INC(redis_errors);
        LOG_DEBUG("\"redis keepalive failed\" addr=%s err=\"%s\"", log_val(conn->name),
                  log_esc(reply->str, strlen(reply->str)));
        /* counted by kind; an ACL without +ping is said (not acted on) */
        store_conn_note_error(conn, store_error_kind(reply->str), reply->str, "PING (keepalive)");
    }
}

/* A ready connection without traffic for keepalive_us (nothing in flight or
 * queued) gets a PING, which Redis and every proxy on the way see as
 * traffic. A PING past the timeout counts as an error, as a call would. */
static void keepalive(struct store_conn *conn, uint64_t now)
{
    const struct store_env *env = conn->env;

    if (conn->ping_us) {
        if (!conn->ping_late && now - conn->ping_us > env->timeout_us) {
            conn->ping_late = 1;
            METRIC_INC(redis_errors);
        }
        return;
    }
    if (!env->keepalive_us || !conn->ready || conn->head || conn->qhead ||
        now - conn->io_us < env->keepalive_us)
        return;
    if (redisAsyncCommand(conn->ac, on_ping_reply, NULL, "PING") != REDIS_OK)
        return; /* disconnecting: on_disconnect follows */
    METRIC_INC(redis_keepalives);
    conn->ping_us = conn->io_us = now;
    conn->ping_late = 0;
}

/* ---- Redis' clock ----------------------------------------------------------- */

/* The last step of a Redis server's clock any connection saw (monotonic us;
 * 0: none, or the warning was cleared): the warning is the agent's, one for
 * all its connections, and clears CLOCK_JUMP_QUIET_US after the last. */
static _Atomic uint64_t clock_jump_last_us;

/* Redis' time in a reply (redis_ms; 0: none) of a call sent at sent_us and
 * read at now: a step of Redis' clock over 1 s raises redis_clock_jump,
 * naming its size and sign (clock_jump.h). The scripts rebase what a step
 * back leaves ahead (lua/README.md); a step forward costs up to one extra
 * burst per key: the warning says which. */
static void clock_seen(struct store_conn *conn, int64_t redis_ms, uint64_t sent_us, uint64_t now)
{
    char msg[WARNING_MESSAGE_MAX];
    int64_t step = redis_ms ? clock_jump_feed(&conn->clock, redis_ms, sent_us, now) : 0;

    if (!step)
        return;
    clock_jump_message(msg, sizeof(msg), step);
    METRIC_INC(redis_clock_jumps);
    atomic_store(&clock_jump_last_us, now);
    LOG_WARN("\"redis clock jump\" addr=%s step_ms=%lld", log_val(conn->name),
             (long long)(step / 1000));
    warning_raise(WARNING_REDIS_CLOCK_JUMP, "%s (%s)", msg, conn->name);
}

/* The watchdog's: clear redis_clock_jump once no step came for the quiet
 * period. */
static void clock_quiet(uint64_t now)
{
    uint64_t last = atomic_load(&clock_jump_last_us);

    if (last && now >= last + CLOCK_JUMP_QUIET_US &&
        atomic_compare_exchange_strong(&clock_jump_last_us, &last, 0))
        warning_clear(WARNING_REDIS_CLOCK_JUMP);
}

/* A connection whose oldest command (or keepalive PING) waits far beyond
 * the timeout is stuck (Redis frozen, a partition without RST), and so is a
 * connect or a setup that does not finish: drop it and start over.
 * Otherwise send the keepalive PING if one is due. */
static void watchdog_cb(struct ev_loop *loop, ev_timer *t, int revents)
{
    struct store_conn *conn = t->data;
    uint64_t now = util_now_us();
    uint64_t oldest = conn->head ? conn->head->sent_us : 0;

    if (!conn->ac) {
        ev_timer_stop(loop, t);
        return;
    }
    if (conn->ping_us && (!oldest || conn->ping_us < oldest))
        oldest = conn->ping_us;
    if (oldest && now - oldest > conn->env->dead_after_us) {
        LOG_WARN("\"redis not answering; reconnecting\" addr=%s waited_ms=%llu",
                 log_val(conn->name), (unsigned long long)((now - oldest) / 1000));
        conn_lost(conn, conn->ac, "not answering", 1);
    } else if (!conn->ready && now - conn->connect_us > conn->env->dead_after_us) {
        conn_lost(conn, conn->ac, conn->connected ? "setup timed out" : "connect timed out", 1);
    } else {
        keepalive(conn, now);
        if (conn->ready && now - conn->ready_us >= STORE_BACKOFF_HEALTHY_US)
            conn->backoff = STORE_BACKOFF_MIN;
    }
    clock_quiet(now);
}

/* ---- EVALSHA --------------------------------------------------------------- */

static void on_eval_reply(redisAsyncContext *ac, void *r, void *priv);

/* Put cmd on the wire now (the clock read by the caller: one reading for a
 * run of commands sent together). 0 in flight, -1 not sent (the caller owns
 * it). */
static int wire_send(struct store_conn *conn, struct store_cmd *c, uint64_t now)
{
    struct store_resp *w = &conn->env->resp;

    struct store_call call = {"EVALSHA", NULL};

    if (!conn->ac)
        return -1;
    c->fcall = 0;
    if (!c->read) {
        c->fcall = conn->fcall != 0;
        call.verb = c->fcall ? "FCALL" : "EVALSHA";
        call.id = c->fcall ? store_conn_library()->fn[c->script] : conn->env->sha[c->script];
    }
    /* (a read was written when made: this copies it, one memcpy, so that
     * every command is sent from one place, the one test_resp checks) */
    if (store_cmd_format(c, &call, w) < 0)
        return -1;
    if (c->asking) {
        if (redisAsyncCommand(conn->ac, NULL, NULL, "ASKING") != REDIS_OK)
            return -1;
        METRIC_INC(redis_commands);
    }
    /* Written by us into one reused buffer: hiredis would build it with an
     * sds grown per argument (store_resp.h). */
    if (redisAsyncFormattedCommand(conn->ac, on_eval_reply, c, w->buf, w->len) != REDIS_OK)
        return -1;
    METRIC_INC(redis_commands);
    c->sent_us = conn->io_us = now;
    if (!c->first_us)
        c->first_us = c->sent_us;
    cmd_link(conn, c);
    return 0;
}

/* Send the calls of list (linked by mnext, n of them): alone, or as a batch. */
static void send_group(struct store_conn *conn, struct store_cmd *list, unsigned n, uint64_t now)
{
    struct store_cmd *c = list;

    if (n > 1) {
        c = store_batch_new(list, n);
        if (!c) { /* out of memory: send them one by one */
            struct store_cmd *m, *next;
            for (m = list; m; m = next) {
                next = m->mnext;
                m->mnext = NULL;
                send_group(conn, m, 1, now);
            }
            return;
        }
        METRIC_INC(redis_batches);
        METRIC_ADD(redis_batched_calls, n);
    }
    if (wire_send(conn, c, now) < 0) {
        METRIC_INC(redis_errors);
        store_cmd_fail(c, STORE_DOWN, "send failed");
    }
}

/* Send the queue: one batch of everything (with STORE_CONN_SLOTS, one per
 * hash slot, pipelined). A redirected call, or a batch being resent, goes
 * alone: it must keep its own ASKING. */
static void flush(struct store_conn *conn)
{
    struct store_cmd *q;
    uint64_t now;

    if (!conn->qhead) /* after most replies: nothing queued, no clock read */
        return;
    q = queue_take(conn);
    /* one clock reading for the run (a few hundred plain SETs at times: a
     * clock read is ~5% of the agent's CPU on a VM's paravirtual clock) */
    now = util_now_us();

    while (q) {
        struct store_cmd *first = q, *rest = NULL, **rt = &rest, *c, *next;
        struct store_cmd *group = first, **gt = &first->mnext;
        unsigned n = 1;
        size_t len;
        int alone = first->batch || first->asking || first->read;

        first->mnext = NULL;
        if (alone) { /* nothing joins it: no scan of the rest (a run of plain
                        SETs, limiter_first.c, would cost a scan each) */
            q = first->next;
            first->next = NULL;
            send_group(conn, first, 1, now);
            continue;
        }
        const char *key = store_cmd_key(first, &len);
        unsigned slot = util_redis_slot(key, len);
        for (c = first->next; c; c = next) {
            next = c->next;
            c->next = NULL;
            key = store_cmd_key(c, &len);
            if (!alone && !c->batch && !c->asking && !c->read && n < STORE_CONN_BATCH_MAX &&
                (!conn->slots || util_redis_slot(key, len) == slot)) {
                *gt = c;
                gt = &c->mnext;
                c->mnext = NULL;
                n++;
            } else {
                *rt = c;
                rt = &c->next;
            }
        }
        first->next = NULL;
        send_group(conn, group, n, now);
        q = rest;
    }
}

int store_conn_send(struct store_conn *conn, struct store_cmd *c)
{
    uint64_t now;

    if (!conn->ac)
        return -1;
    now = util_now_us();
    if (!c->first_us)
        c->first_us = now; /* latency includes the wait for a batch */
    if (!conn->env->corked && conn->inflight < STORE_CONN_MAX_INFLIGHT && !conn->qhead)
        return wire_send(conn, c, now);
    c->next = NULL;
    if (conn->qtail)
        conn->qtail->next = c;
    else
        conn->qhead = c;
    conn->qtail = c;
    conn->qlen++;
    conn->env->pending++;
    if (conn->qlen >= STORE_CONN_BATCH_MAX)
        flush(conn);
    return 0;
}

void store_conn_uncork(struct store_conn *conn)
{
    if (conn->qhead && conn->inflight < STORE_CONN_MAX_INFLIGHT)
        flush(conn);
}

/* Send c again after an error reply (it had not run), or fail it. */
static void resend(struct store_conn *conn, struct store_cmd *c)
{
    if (wire_send(conn, c, util_now_us()) == 0)
        return;
    METRIC_INC(redis_errors);
    store_cmd_fail(c, STORE_DOWN, "send failed");
}

/* The TRYAGAIN timer: send again what waited. */
static void later_cb(struct ev_loop *loop, ev_timer *t, int revents)
{
    struct store_conn *conn = t->data;
    struct store_cmd *c = conn->lhead, *next;

    conn->lhead = conn->ltail = NULL;
    for (; c; c = next) {
        next = c->next;
        c->next = NULL;
        conn->env->pending--;
        resend(conn, c);
    }
}

/* TRYAGAIN: a Cluster slot migration has some of c's keys on each side, for
 * a moment. Sent again after a short wait, as Redis Cluster clients do
 * (store_error_retry_wait), on this connection: once the slot has moved,
 * the answer is a -MOVED, followed as ever. 1 when c was taken care of. */
static int try_again(struct store_conn *conn, struct store_cmd *c, enum metrics_redis_error kind)
{
    uint64_t now = util_now_us();
    long long wait =
        store_error_retry_wait(kind, c->tries, now - c->first_us, conn->env->timeout_us);

    if (wait < 0)
        return 0; /* failed as any error reply: counted, warned */
    METRIC_INC(redis_error_replies[kind]);
    c->tries++;
    c->next = NULL;
    if (conn->ltail)
        conn->ltail->next = c;
    else
        conn->lhead = c;
    conn->ltail = c;
    conn->env->pending++;
    if (!ev_is_active(&conn->later)) {
        ev_timer_set(&conn->later, (double)wait / 1e6, 0.);
        ev_timer_start(conn->env->loop, &conn->later);
    }
    LOG_DEBUG("\"redis TRYAGAIN: sending again\" addr=%s tries=%u", log_val(conn->name),
              (unsigned)c->tries);
    return 1;
}

/* TRYAGAIN to batch b: a Cluster slot migration has some of its keys on
 * each side. A batch cannot follow an -ASK for some of its keys, and
 * waiting until the slot has moved can outlast the timeout (the backstop
 * then decides: issue 42 measured +3 to +6 over the bound). Its calls go
 * again one by one, at once: a call of one key never meets TRYAGAIN; the
 * source runs it, or answers -ASK for a key already moved, followed as
 * ever. The batch itself owns nothing but itself. */
static void split_batch(struct store_conn *conn, struct store_cmd *b)
{
    struct store_cmd *m = b->members, *next;

    METRIC_INC(redis_error_replies[METRICS_REDIS_TRYAGAIN]);
    LOG_DEBUG("\"redis TRYAGAIN: sending a batch's calls one by one\" addr=%s calls=%u",
              log_val(conn->name), b->nmembers);
    b->members = NULL;
    store_cmd_free(b);
    for (; m; m = next) {
        next = m->mnext;
        m->mnext = NULL;
        resend(conn, m);
    }
}

/* An error reply to c, sent as FCALL, that EVALSHA would not get. No such
 * function (FUNCTION FLUSH, a Redis restarted without its data): load the
 * library again and send c again, in order on this connection, once; then
 * as EVALSHA. An ACL that refuses FCALL: EVALSHA on this connection from now
 * on, c sent again so. 1 when c was taken care of. */
static int fcall_failed(struct store_conn *conn, redisAsyncContext *ac, struct store_cmd *c,
                        const char *err, enum metrics_redis_error kind)
{
    if (strncmp(err, "ERR Function not found", 22) == 0) {
        /* one FUNCTION LOAD for all the calls that were in flight: c goes
         * after it on this connection either way */
        if (c->fn_retried) {
            store_conn_set_fcall(conn, 0);
        } else if (!conn->fcall_loading) {
            LOG_INFO("\"redis lost its functions; reloading\" addr=%s function=%s",
                     log_val(conn->name), store_conn_library()->fn[c->script]);
            if (store_conn_load_library(conn, on_setup_reply) < 0)
                store_conn_set_fcall(conn, 0);
        }
        c->fn_retried = 1;
    } else if (kind == METRICS_REDIS_NOPERM && (strstr(err, "fcall") || strstr(err, "FCALL"))) {
        if (!conn->fcall_off) /* (once: the other calls in flight get it too) */
            LOG_INFO("\"redis ACL refused FCALL: calling the scripts with EVALSHA\" addr=%s "
                     "err=\"%s\"",
                     log_val(conn->name), log_esc(err, strnlen(err, 200)));
        store_conn_set_fcall(conn, 0);
        conn->fcall_off = 1;
        conn->fcall_off_auth = conn->env->auth_gen;
    } else {
        return 0;
    }
    resend(conn, c);
    return 1;
}

/* Error replies that are not the script's answer. 1 when c was taken care of. */
static int handle_error(struct store_conn *conn, redisAsyncContext *ac, struct store_cmd *c,
                        const char *err)
{
    char host[256];
    int ask, slot, port;
    enum metrics_redis_error kind = store_error_kind(err);

    if (c->fcall && fcall_failed(conn, ac, c, err, kind))
        return 1;
    if (kind == METRICS_REDIS_TRYAGAIN && c->batch) {
        split_batch(conn, c);
        return 1;
    }
    if (kind == METRICS_REDIS_TRYAGAIN && try_again(conn, c, kind))
        return 1;
    if (kind == METRICS_REDIS_NOSCRIPT)
        METRIC_INC(redis_error_replies[kind]);
    if (kind == METRICS_REDIS_NOSCRIPT && c->noscript_retried && !c->read) {
        /* NOSCRIPT again after the script was loaded on this connection, in
         * order: the reload does not stick, and every call would wait for
         * reload round trips to fail anyway. Down (decisions fall back at
         * once), tried again after the backoff, a probe first. */
        char command[64];
        size_t len;
        const char *key = store_cmd_key(c, &len);

        snprintf(command, sizeof(command), "EVALSHA %s", store_conn_script_names[c->script]);
        METRIC_INC(redis_errors);
        store_conn_bad(conn, kind, command, "NOSCRIPT right after SCRIPT LOAD",
                       (int)util_redis_slot(key, len));
        conn_lost(conn, ac, conn->last_err, 1);
        store_cmd_fail(c, STORE_DOWN, "NOSCRIPT");
        return 1;
    }
    if (kind == METRICS_REDIS_NOSCRIPT && !c->noscript_retried && !c->read) {
        /* Redis lost its scripts (restart, failover, SCRIPT FLUSH): load the
         * script again and retry; both go out in order on this connection. */
        c->noscript_retried = 1;
        LOG_INFO("\"redis lost its scripts; reloading\" addr=%s script=%s", log_val(conn->name),
                 store_conn_script_names[c->script]);
        if (redisAsyncCommand(ac, on_setup_reply, (void *)(intptr_t)c->script, "SCRIPT LOAD %s",
                              store_conn_script_src[c->script]) == REDIS_OK) {
            METRIC_INC(redis_commands);
            conn->loading++;
            resend(conn, c);
            return 1;
        }
        METRIC_INC(redis_errors);
        store_cmd_fail(c, STORE_DOWN, "send failed");
        return 1;
    }
    if (conn->hooks->redirect &&
        store_reply_redirect(err, conn->host, &ask, &slot, host, sizeof(host), &port) == 0) {
        LOG_DEBUG("\"redis redirect\" from=%s err=\"%s\"", log_val(conn->name),
                  log_esc(err, strlen(err)));
        conn->hooks->redirect(conn->owner, conn, c, ask, slot, host, port);
        return 1;
    }
    if (store_error_refusal(kind) && (!c->read || c->write)) {
        /* Every call would get it (a replica, an ACL, a full Redis): down
         * until a probe passes, not one refused call per decision. */
        char command[64];
        size_t len;
        const char *key = store_cmd_key(c, &len);

        snprintf(command, sizeof(command), "%s %s",
                 c->read    ? "SET"
                 : c->fcall ? "FCALL"
                            : "EVALSHA",
                 c->read ? "(new key)" : store_conn_script_names[c->script]);
        METRIC_INC(redis_errors);
        store_conn_note_error(conn, kind, err, command);
        store_conn_refused(conn, kind, err, (int)util_redis_slot(key, len));
        conn_lost(conn, ac, conn->last_err, 1);
        store_cmd_fail(c, STORE_DOWN, metrics_redis_error_names[kind]);
        return 1;
    }
    return 0;
}

/* The hash slot of c's key (a batch: its first member's). */
static int cmd_slot(const struct store_cmd *c)
{
    size_t len;
    const char *key = store_cmd_key(c, &len);

    return (int)util_redis_slot(key, len);
}

static void on_eval_reply(redisAsyncContext *ac, void *r, void *priv)
{
    redisReply *reply = r;
    struct store_cmd *c = priv;
    struct store_conn *conn = ac->data;
    struct store_result res = {0};
    uint64_t now;
    const char *bad = NULL; /* what is wrong with the reply (store_reply_check.h) */
    int bad_script = 0, bad_slot = -1;

    if (!reply || conn->ac != ac)
        return; /* going away: c has failed, or fails, in conn_lost (c may be gone) */
    cmd_unlink(c);
    /* when this read began (read_cb): one clock reading for all the replies
     * one read brought, not one per reply; never before the send */
    now = conn->read_us > c->sent_us ? conn->read_us : c->sent_us;
    conn->io_us = now;
    metrics_hist_observe(&metrics.redis_latency, (now - c->sent_us) * 1000);
    if (reply->type == REDIS_REPLY_ERROR && handle_error(conn, ac, c, reply->str))
        goto next;
    res.latency_us = now - c->first_us;
    if (c->read) {
        store_cmd_read_reply(c, reply, now);
        goto next;
    }
    bad_script = c->script;
    if (reply->type == REDIS_REPLY_ARRAY && c->batch) {
        clock_seen(conn, store_batch_reply(c, reply, now, &bad, &bad_script), c->sent_us, now);
        if (bad)
            bad_slot = cmd_slot(c);
        store_cmd_free(c);
        goto checked;
    }
    if (reply->type == REDIS_REPLY_ARRAY && !c->batch) {
        store_reply_values(reply, &res);
        bad = res.status != STORE_OK
                  ? res.err
                  : store_reply_check(c->script, &res, reply->elements, c->argc - 4, c->argv + 4);
        if (bad) {
            res.status = STORE_ERR;
            res.err = bad;
        } else {
            clock_seen(conn, store_reply_time_ms(c->script, &res), c->sent_us, now);
        }
    } else {
        res.status = STORE_ERR;
        res.err = reply->type == REDIS_REPLY_ERROR ? reply->str : "unexpected reply type";
        if (reply->type != REDIS_REPLY_ERROR)
            bad = reply->type == REDIS_REPLY_NIL       ? "a nil reply, not an array"
                  : reply->type == REDIS_REPLY_INTEGER ? "an integer reply, not an array"
                                                       : "a string reply, not an array";
    }
    if (res.status != STORE_OK) {
        METRIC_INC(redis_errors);
        if (reply->type == REDIS_REPLY_ERROR) {
            char command[64];
            snprintf(command, sizeof(command), "%s %s", c->fcall ? "FCALL" : "EVALSHA",
                     store_conn_script_names[c->script]);
            store_conn_note_error(conn, store_error_kind(res.err), res.err, command);
        }
    }
    if (bad)
        bad_slot = cmd_slot(c);
    c->cb(c->arg, &res);
    store_cmd_free(c);
checked:
    /* A malformed reply: nothing this connection says can be trusted (the
     * call above fell back). Down, until a probe gets a well-formed reply. */
    if (bad && conn->ac == ac) {
        store_conn_bad(conn, METRICS_REDIS_BAD_REPLY, store_conn_script_names[bad_script], bad,
                       bad_slot);
        conn_lost(conn, ac, conn->last_err, 1);
    }
next:
    /* What queued while this call was out goes now, together. The context
     * may have been lost in a callback above: then the queue has failed. */
    if (conn->ac == ac && !conn->env->corked && conn->inflight < STORE_CONN_MAX_INFLIGHT)
        flush(conn);
}

/* Before the loop waits: write what commands queued in this iteration. hiredis
 * would start a write watcher and write once the next poll said writable:
 * two epoll_ctl calls and a poll more per batch. Writing here, where no
 * hiredis callback is running, stops that watcher before libev tells the
 * kernel about it. A failed write is handled as from the watcher. */
static void write_early_cb(struct ev_loop *loop, ev_prepare *w, int revents)
{
    struct store_conn *conn = w->data;
    redisAsyncContext *ac = conn->ac;
    const redisLibevEvents *e;

    if (!ac || (ac->c.flags & (REDIS_DISCONNECTING | REDIS_FREEING)) ||
        !(ac->c.flags & REDIS_CONNECTED))
        return; /* connecting: hiredis waits for writable to finish the connect */
    e = ac->ev.data;
    if (e && e->writing)
        redisAsyncHandleWrite(ac);
}

/* ---- lifecycle and accessors --------------------------------------------- */

/* Take h (malloc'd) as the TCP host. */
static void set_addr_owned(struct store_conn *conn, char *h, int port)
{
    store_lookup_cancel(conn->lookup); /* of the old name */
    conn->lookup = NULL;
    free(conn->host);
    conn->host = h;
    conn->port = port;
    if (strchr(h, ':'))
        snprintf(conn->name, sizeof(conn->name), "[%s]:%d", h, port);
    else
        snprintf(conn->name, sizeof(conn->name), "%s:%d", h, port);
}

int store_conn_set_addr(struct store_conn *conn, const char *host, int port)
{
    char *h = strdup(host);

    if (!h)
        return -1;
    set_addr_owned(conn, h, port);
    return 0;
}

struct store_conn *store_conn_new(struct store_env *env, const struct store_conn_hooks *hooks,
                                  void *owner, const char *host, int port, const char *unix_path,
                                  int flags)
{
    struct store_conn *conn = calloc(1, sizeof(*conn));

    if (!conn)
        return NULL;
    conn->env = env;
    conn->hooks = hooks;
    conn->owner = owner;
    conn->must_be_master = (flags & STORE_CONN_CHECK_ROLE) != 0;
    conn->slots = (flags & STORE_CONN_SLOTS) != 0;
    conn->trial = (flags & STORE_CONN_TRIAL) != 0;
    conn->backoff = STORE_BACKOFF_MIN;
    conn->rnd = (uint32_t)(util_now_us() ^ (uintptr_t)conn) | 1;
    conn->probe_slot = -1;
    snprintf(conn->name, sizeof(conn->name), "-");
    if (unix_path) {
        if (!(conn->unix_path = strdup(unix_path)))
            goto oom;
        snprintf(conn->name, sizeof(conn->name), "%s", unix_path);
    } else if (host && store_conn_set_addr(conn, host, port) < 0) {
        goto oom;
    }
    ev_timer_init(&conn->retry, retry_cb, 0., 0.);
    conn->retry.data = conn;
    ev_timer_init(&conn->later, later_cb, 0., 0.);
    conn->later.data = conn;
    ev_timer_init(&conn->watchdog, watchdog_cb, 0., WATCHDOG_EVERY);
    conn->watchdog.data = conn;
    ev_prepare_init(&conn->write_early, write_early_cb);
    conn->write_early.data = conn;
    ev_prepare_start(env->loop, &conn->write_early);
    ev_unref(env->loop); /* it alone does not keep the loop running */
    return conn;
oom:
    free(conn->unix_path);
    free(conn);
    return NULL;
}

void store_conn_free(struct store_conn *conn)
{
    struct store_cmd *c;

    if (!conn)
        return;
    ev_timer_stop(conn->env->loop, &conn->retry);
    ev_timer_stop(conn->env->loop, &conn->watchdog);
    ev_ref(conn->env->loop); /* undoes the ev_unref of store_conn_new */
    ev_prepare_stop(conn->env->loop, &conn->write_early);
    store_lookup_cancel(conn->lookup);
    if (conn->ac) {
        redisAsyncContext *ac = conn->ac;
        conn->ac = NULL;    /* on_disconnect ignores it */
        redisAsyncFree(ac); /* pending callbacks run with NULL */
    }
    while ((c = conn->head)) {
        cmd_unlink(c);
        store_cmd_fail(c, STORE_DOWN, "connection closed");
    }
    fail_list(queue_take(conn), "connection closed");
    later_fail(conn, "connection closed");
    store_conn_set_fcall(conn, 0);
    free(conn->host);
    free(conn->unix_path);
    free(conn);
}

int store_conn_ready(const struct store_conn *conn)
{
    return conn && conn->ready;
}

int store_conn_usable(const struct store_conn *conn)
{
    return conn && conn->ac != NULL;
}

const char *store_conn_name(const struct store_conn *conn)
{
    return conn->name;
}

const char *store_conn_last_error(const struct store_conn *conn)
{
    return conn->last_err;
}

const char *store_conn_host(const struct store_conn *conn)
{
    return conn->host;
}

int store_conn_port(const struct store_conn *conn)
{
    return conn->port;
}
