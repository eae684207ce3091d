/* SPDX-License-Identifier: Apache-2.0 */
/* store_conn.c - one asynchronous Redis connection (hiredis 0.14 + libev):
 * EVALSHA with NOSCRIPT reload and retry, redirects handed to the owner,
 * the commands in flight, a watchdog, keepalive, reconnect with backoff.
 * Below it, sharing its state (store_conn_int.h): the setup commands and
 * what a refusal means (store_conn_setup.c), whether it is stuck, the
 * keepalive PING and Redis' clock (store_conn_watch.c), what an error reply
 * leads to (store_conn_errors.c). They answer, this file acts.
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
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "core/net.h"
#include "core/util.h"
#include "metrics/metrics.h"
#include "store_backoff.h"
#include "store_conn_int.h"
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
    store_conn_fail_list(queue_take(conn), reason);
    store_conn_later_fail(conn, reason);
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

/* Closed: store_conn_errors.c says why (and what it was, when a reply broke
 * it). */
static void on_disconnect(const redisAsyncContext *ac, int status)
{
    struct store_conn *conn = ac->data;
    char why[ERR_LEN];

    if (conn->ac != ac)
        return; /* a context we gave up already */
    conn_lost(conn, NULL, store_conn_closed(conn, ac, status, why, sizeof(why)), 1);
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

/* The watchdog (store_conn_watch.c says whether conn is stuck): a stuck
 * connection is given up and made again. */
static void watchdog_cb(struct ev_loop *loop, ev_timer *t, int revents)
{
    struct store_conn *conn = t->data;
    uint64_t now = util_now_us();
    const char *why;

    if (!conn->ac) {
        ev_timer_stop(loop, t);
        return;
    }
    why = store_conn_watch(conn, now);
    if (why)
        conn_lost(conn, conn->ac, why, 1);
    store_conn_clock_quiet(now);
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

/* Error replies that are not the script's answer: store_conn_errors.c says
 * what follows, this acts. 1 when c was taken care of. */
static int handle_error(struct store_conn *conn, redisAsyncContext *ac, struct store_cmd *c,
                        const char *err)
{
    const char *why = NULL;
    struct store_cmd *m, *next;

    switch (store_conn_error(conn, ac, c, err, on_setup_reply, conn->hooks->redirect, &why)) {
    case STORE_CONN_ERR_ANSWER:
        return 0;
    case STORE_CONN_ERR_DONE:
        break;
    case STORE_CONN_ERR_RESEND:
        resend(conn, c);
        break;
    case STORE_CONN_ERR_SPLIT: /* the batch owns nothing but itself */
        m = c->members;
        c->members = NULL;
        store_cmd_free(c);
        for (; m; m = next) {
            next = m->mnext;
            m->mnext = NULL;
            resend(conn, m);
        }
        break;
    case STORE_CONN_ERR_LOST:
        conn_lost(conn, ac, conn->last_err, 1);
        store_cmd_fail(c, STORE_DOWN, why);
        break;
    }
    return 1;
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
        store_conn_clock_seen(conn, store_batch_reply(c, reply, now, &bad, &bad_script), c->sent_us,
                              now);
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
            store_conn_clock_seen(conn, store_reply_time_ms(c->script, &res), c->sent_us, now);
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
    store_conn_fail_list(queue_take(conn), "connection closed");
    store_conn_later_fail(conn, "connection closed");
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
