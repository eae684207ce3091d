/* SPDX-License-Identifier: Apache-2.0 */
/* store_probe.c - one-shot questions to a list of Redis servers (see
 * store_probe.h).
 *
 * One attempt = one context. It ends in exactly one of four places: the
 * connect callback (refused), the disconnect callback (closed before the
 * reply), the reply callback, or the timer. Each clears p->ac before moving
 * on, and every callback ignores a context that is not p->ac, so the late
 * callbacks of an abandoned context (NULL replies, disconnect) do nothing.
 * A host name is looked up first, off the loop (store_lookup.h): that wait is
 * bounded by the lookup's own timeout, not the attempt's.
 */
#include "store_probe.h"

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
#include "metrics/metrics.h"
#include "store_conn.h"
#include "store_errors.h"
#include "store_lookup.h"
#include "store_reply_cap.h"

struct store_probe {
    struct ev_loop *loop;
    double timeout;
    redisAsyncContext *ac;       /* the attempt under way, or NULL */
    struct store_lookup *lookup; /* or the name of addrs[next - 1] being looked up */
    ev_timer timer;
    int running;
    struct net_hostport *addrs; /* a copy */
    size_t n, next;             /* addrs[next - 1] is being asked */
    int argc;
    char **argv;
    size_t *argvlen;
    store_probe_accept *accept;
    store_probe_done *done;
    void *arg;
    const struct store_auth *auth;
    int optional; /* store_probe_optional: the command's error replies are not noted */
    char last_err[160];
    struct store_reply_cap cap; /* the attempt's reader's (store_reply_cap.h) */
};

/* ---- the walk -------------------------------------------------------------- */

static void reset(struct store_probe *p)
{
    store_lookup_cancel(p->lookup);
    p->lookup = NULL;
    free(p->addrs);
    p->addrs = NULL;
    p->n = p->next = 0;
    for (int i = 0; i < p->argc; i++)
        free(p->argv[i]);
    free(p->argv);
    free(p->argvlen);
    p->argv = NULL;
    p->argvlen = NULL;
    p->argc = 0;
}

static void finish(struct store_probe *p, int ok)
{
    store_probe_done *done = p->done;
    void *arg = p->arg;

    ev_timer_stop(p->loop, &p->timer);
    reset(p);
    p->running = 0;
    done(arg, ok); /* may start the next walk */
}

static void on_reply(redisAsyncContext *ac, void *r, void *priv);
static void on_auth_reply(redisAsyncContext *ac, void *r, void *priv);
static void on_connect(const redisAsyncContext *ac, int status);
static void on_disconnect(const redisAsyncContext *ac, int status);
static void read_cb(struct ev_loop *loop, ev_io *w, int revents);

/* Connect to ip (numeric) for addrs[next - 1] and send the command. 0, or
 * -1 when that failed at once (counted). */
static int connect_to(struct store_probe *p, const char *ip)
{
    const struct net_hostport *a = &p->addrs[p->next - 1];
    redisAsyncContext *ac = redisAsyncConnect(ip, a->port);

    if (!ac || ac->err) {
        const char *why = ac ? ac->errstr : "out of memory";
        LOG_DEBUG("\"redis probe failed\" addr=%s:%d err=\"%s\"", log_val(a->host), a->port,
                  log_esc(why, strlen(why)));
        METRIC_INC(redis_errors);
        if (ac)
            redisAsyncFree(ac);
        return -1;
    }
    ac->data = p;
    store_reply_cap_install(ac->c.reader, &p->cap, NULL); /* the replies of a question are small */
    store_reply_cap_expect(&p->cap, &ac->replies);        /* and none unasked */
    if (net_tcp_keepalive(ac->c.fd, STORE_TCP_KEEPIDLE, STORE_TCP_KEEPINTVL, STORE_TCP_KEEPCNT) ==
        -1)
        LOG_DEBUG("\"redis tcp keepalive not set\" addr=%s:%d err=\"%s\"", log_val(a->host),
                  a->port, log_esc(strerror(errno), strlen(strerror(errno))));
    if (redisLibevAttach(p->loop, ac) == REDIS_OK)
        ev_set_cb(&((redisLibevEvents *)ac->ev.data)->rev, read_cb);
    redisAsyncSetConnectCallback(ac, on_connect);
    redisAsyncSetDisconnectCallback(ac, on_disconnect);
    if (p->auth && p->auth->password) {
        int rc = p->auth->user
                     ? redisAsyncCommand(ac, on_auth_reply, p, "AUTH %s %s", p->auth->user,
                                         p->auth->password)
                     : redisAsyncCommand(ac, on_auth_reply, p, "AUTH %s", p->auth->password);
        if (rc != REDIS_OK) {
            redisAsyncFree(ac);
            return -1;
        }
        METRIC_INC(redis_commands);
    }
    if (redisAsyncCommandArgv(ac, on_reply, p, p->argc, (const char **)p->argv, p->argvlen) !=
        REDIS_OK) {
        redisAsyncFree(ac);
        return -1;
    }
    METRIC_INC(redis_commands);
    p->ac = ac;
    ev_timer_stop(p->loop, &p->timer);
    ev_timer_set(&p->timer, p->timeout, 0.);
    ev_timer_start(p->loop, &p->timer);
    return 0;
}

static void attempt(struct store_probe *p);

static void on_lookup(void *arg, const char *ip, const char *err)
{
    struct store_probe *p = arg;

    p->lookup = NULL;
    if (!ip) {
        LOG_DEBUG("\"redis probe failed\" err=\"%s\"", log_esc(err, strlen(err)));
        METRIC_INC(redis_errors);
    } else if (connect_to(p, ip) == 0) {
        return;
    }
    attempt(p);
}

/* Start the next attempt, or finish when none is left. */
static void attempt(struct store_probe *p)
{
    while (p->next < p->n) {
        const struct net_hostport *a = &p->addrs[p->next++];

        if (net_host_is_numeric(a->host)) {
            if (connect_to(p, a->host) == 0)
                return;
            continue;
        }
        if ((p->lookup = store_lookup_start(p->loop, a->host, on_lookup, p)))
            return;
        LOG_DEBUG("\"redis probe failed\" addr=%s:%d err=\"cannot start a name lookup\"",
                  log_val(a->host), a->port);
        METRIC_INC(redis_errors);
    }
    finish(p, 0);
}

/* The attempt on ac failed: give it up and try the next address. free_it:
 * ac is ours to free (hiredis is not freeing it already). */
static void attempt_failed(struct store_probe *p, redisAsyncContext *ac, const char *why,
                           int free_it)
{
    const struct net_hostport *a = &p->addrs[p->next - 1];

    LOG_DEBUG("\"redis probe failed\" addr=%s:%d err=\"%s\"", log_val(a->host), a->port,
              log_esc(why, strlen(why)));
    METRIC_INC(redis_errors);
    snprintf(p->last_err, sizeof(p->last_err), "%s", why);
    p->ac = NULL;
    if (free_it)
        redisAsyncFree(ac); /* deferred by hiredis inside its callbacks */
    attempt(p);
}

static void on_connect(const redisAsyncContext *ac, int status)
{
    struct store_probe *p = ac->data;

    if (p->ac == ac && status != REDIS_OK)
        attempt_failed(p, (redisAsyncContext *)ac, ac->errstr[0] ? ac->errstr : "connect failed",
                       0);
}

/* An error reply from addrs[next - 1] (or a reply past the caps: kind
 * reply_too_large): counted, and said when it is a refusal (a password
 * missing or wrong, an ACL). */
static void note_kind(struct store_probe *p, enum metrics_redis_error kind, const char *command,
                      const char *err)
{
    const struct net_hostport *a = &p->addrs[p->next - 1];
    char addr[sizeof(a->host) + 16];
    struct store_error_where w = {p->auth && p->auth->server ? p->auth->server : "redis", addr,
                                  command, p->auth ? p->auth->user : NULL, NULL};

    snprintf(addr, sizeof(addr), strchr(a->host, ':') ? "[%s]:%d" : "%s:%d", a->host, a->port);
    store_error_note(kind, err, &w);
}

static void note_error(struct store_probe *p, const char *command, const char *err)
{
    note_kind(p, store_error_kind(err), command, err);
}

/* A reply past the caps: noted; why receives the reason. */
static void too_large(struct store_probe *p, char *why, size_t len)
{
    snprintf(why, len, "reply too large: %s", p->cap.why);
    note_kind(p, METRICS_REDIS_REPLY_TOO_LARGE, p->argv[0], why);
}

static void on_disconnect(const redisAsyncContext *ac, int status)
{
    struct store_probe *p = ac->data;
    char why[192];

    if (p->ac != ac)
        return;
    if (status != REDIS_OK && store_reply_cap_refused(&p->cap)) {
        too_large(p, why, sizeof(why)); /* (the reader's error reads "Out of memory") */
        attempt_failed(p, (redisAsyncContext *)ac, why, 0);
        return;
    }
    attempt_failed(p, (redisAsyncContext *)ac, "closed", 0);
}

/* Readable: hiredis reads and answers, then the bytes of a reply not parsed
 * yet are held to the caps' buffer (a bulk string is buffered whole before
 * it is made): past it the attempt is given up, which frees them. */
static void read_cb(struct ev_loop *loop, ev_io *w, int revents)
{
    const redisLibevEvents *e = w->data;
    struct store_probe *p = e->context->data;
    char why[192];

    redisAsyncHandleRead(e->context);
    if (p->ac && store_reply_cap_buffer(p->ac->c.reader, &p->cap) < 0) {
        too_large(p, why, sizeof(why));
        attempt_failed(p, p->ac, why, 1);
    }
}

static void on_auth_reply(redisAsyncContext *ac, void *r, void *priv)
{
    struct store_probe *p = priv;
    redisReply *reply = r;

    if (!reply || p->ac != ac || reply->type != REDIS_REPLY_ERROR)
        return; /* the command's reply follows */
    note_error(p, "AUTH", reply->str);
    attempt_failed(p, ac, reply->str, 1);
}

static void on_reply(redisAsyncContext *ac, void *r, void *priv)
{
    struct store_probe *p = priv;
    redisReply *reply = r;
    const struct net_hostport *a;

    if (!reply || p->ac != ac)
        return; /* on_connect/on_disconnect/the timer deal with it */
    a = &p->addrs[p->next - 1];
    if (reply->type == REDIS_REPLY_ERROR) {
        char command[64];
        snprintf(command, sizeof(command), "%s%s%s", p->argv[0], p->argc > 1 ? " " : "",
                 p->argc > 1 ? p->argv[1] : "");
        if (!p->optional)
            note_error(p, command, reply->str);
        attempt_failed(p, ac, reply->str, 1);
        return;
    }
    if (!p->accept(p->arg, reply, a->host, a->port)) {
        attempt_failed(p, ac, "answer not usable", 1);
        return;
    }
    p->ac = NULL;
    redisAsyncDisconnect(ac); /* after this callback: nothing else is pending */
    finish(p, 1);
}

static void timer_cb(struct ev_loop *loop, ev_timer *t, int revents)
{
    struct store_probe *p = t->data;

    if (p->ac)
        attempt_failed(p, p->ac, "timed out", 1);
}

void store_probe_optional(struct store_probe *p, int optional)
{
    p->optional = optional;
}

/* ---- lifecycle --------------------------------------------------------------- */

struct store_probe *store_probe_new(struct ev_loop *loop, uint64_t timeout_us,
                                    const struct store_auth *auth)
{
    struct store_probe *p = calloc(1, sizeof(*p));

    if (!p)
        return NULL;
    p->loop = loop;
    p->auth = auth;
    p->timeout = (double)timeout_us / 1e6;
    ev_timer_init(&p->timer, timer_cb, 0., 0.);
    p->timer.data = p;
    return p;
}

void store_probe_free(struct store_probe *p)
{
    if (!p)
        return;
    ev_timer_stop(p->loop, &p->timer);
    if (p->ac) {
        redisAsyncContext *ac = p->ac;
        p->ac = NULL;
        redisAsyncFree(ac);
    }
    reset(p);
    free(p);
}

int store_probe_running(const struct store_probe *p)
{
    return p->running;
}

const char *store_probe_last_error(const struct store_probe *p)
{
    return p->last_err;
}

int store_probe_start(struct store_probe *p, const struct net_hostport *addrs, size_t n, int argc,
                      const char *const *argv, store_probe_accept *accept, store_probe_done *done,
                      void *arg)
{
    if (p->running || n == 0)
        return -1;
    p->addrs = calloc(n, sizeof(*p->addrs));
    p->argv = calloc((size_t)argc, sizeof(char *));
    p->argvlen = calloc((size_t)argc, sizeof(size_t));
    if (!p->addrs || !p->argv || !p->argvlen)
        goto oom;
    memcpy(p->addrs, addrs, n * sizeof(*p->addrs));
    p->n = n;
    p->argc = argc;
    for (int i = 0; i < argc; i++) {
        if (!(p->argv[i] = strdup(argv[i])))
            goto oom;
        p->argvlen[i] = strlen(argv[i]);
    }
    p->next = 0;
    p->last_err[0] = '\0';
    p->accept = accept;
    p->done = done;
    p->arg = arg;
    p->running = 1;
    attempt(p);
    return 0;
oom:
    reset(p);
    return -1;
}
