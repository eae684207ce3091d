/* store_probe.c - one-shot questions to a list of Redis servers (see
 * store_probe.h).
 *
 * One attempt = one context. It ends in exactly one of four places: the
 * connect callback (refused), the disconnect callback (closed before the
 * reply), the reply callback, or the timer. Each clears p->ac before moving
 * on, and every callback ignores a context that is not p->ac, so the late
 * callbacks of an abandoned context (NULL replies, disconnect) do nothing.
 */
#include "store_probe.h"

#include <ev.h>
#include <hiredis/adapters/libev.h>
#include <hiredis/async.h>
#include <hiredis/hiredis.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "metrics.h"

struct store_probe {
    struct ev_loop *loop;
    double timeout;
    redisAsyncContext *ac; /* the attempt under way, or NULL */
    ev_timer timer;
    int running;
    struct store_addr *addrs;
    size_t n, next; /* addrs[next - 1] is being asked */
    int argc;
    char **argv;
    size_t *argvlen;
    store_probe_accept *accept;
    store_probe_done *done;
    void *arg;
};

/* ---- address lists ------------------------------------------------------- */

void store_addr_list_free(struct store_addr *a, size_t n)
{
    if (!a)
        return;
    for (size_t i = 0; i < n; i++)
        free(a[i].host);
    free(a);
}

/* One "host:port" or "[v6]:port" of len bytes. */
static int parse_one(const char *s, size_t len, struct store_addr *out)
{
    const char *colon = NULL, *h = s;
    size_t hl;
    char *end;
    long port;

    for (size_t i = len; i > 0; i--) {
        if (s[i - 1] == ':') {
            colon = s + i - 1;
            break;
        }
    }
    if (!colon || colon == s)
        return -1;
    hl = (size_t)(colon - s);
    if (s[0] == '[') {
        if (hl < 3 || colon[-1] != ']')
            return -1;
        h = s + 1;
        hl -= 2;
    }
    port = strtol(colon + 1, &end, 10);
    if (end != s + len || end == colon + 1 || port <= 0 || port > 65535)
        return -1;
    out->host = malloc(hl + 1);
    if (!out->host)
        return -1;
    memcpy(out->host, h, hl);
    out->host[hl] = '\0';
    out->port = (int)port;
    return 0;
}

int store_addr_list_parse(const char *list, struct store_addr **out, size_t *n, char *err,
                          size_t errlen)
{
    struct store_addr *a = NULL;
    size_t cnt = 0;
    const char *p = list;

    *out = NULL;
    *n = 0;
    while (*p) {
        const char *e = strchr(p, ',');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        struct store_addr *grown;

        while (len > 0 && (*p == ' ' || *p == '\t')) {
            p++;
            len--;
        }
        while (len > 0 && (p[len - 1] == ' ' || p[len - 1] == '\t'))
            len--;
        if (len > 0) {
            grown = realloc(a, (cnt + 1) * sizeof(*a));
            if (!grown || parse_one(p, len, &grown[cnt]) < 0) {
                if (grown)
                    a = grown;
                snprintf(err, errlen, "redis: bad address '%.*s' (expected host:port)",
                         (int)(len > 80 ? 80 : len), p);
                store_addr_list_free(a, cnt);
                return -1;
            }
            a = grown;
            cnt++;
        }
        p += e ? (size_t)(e - p) + 1 : strlen(p);
    }
    if (cnt == 0) {
        snprintf(err, errlen, "redis: empty address list");
        free(a);
        return -1;
    }
    *out = a;
    *n = cnt;
    return 0;
}

/* ---- the walk -------------------------------------------------------------- */

static void reset(struct store_probe *p)
{
    store_addr_list_free(p->addrs, p->n);
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
static void on_connect(const redisAsyncContext *ac, int status);
static void on_disconnect(const redisAsyncContext *ac, int status);

/* Start the next attempt, or finish when none is left. */
static void attempt(struct store_probe *p)
{
    while (p->next < p->n) {
        const struct store_addr *a = &p->addrs[p->next++];
        redisAsyncContext *ac = redisAsyncConnect(a->host, a->port);

        if (!ac || ac->err) {
            LOG_DEBUG("\"redis probe failed\" addr=%s:%d err=\"%s\"", a->host, a->port,
                      ac ? ac->errstr : "out of memory");
            METRIC_INC(redis_errors);
            if (ac)
                redisAsyncFree(ac);
            continue;
        }
        ac->data = p;
        redisLibevAttach(p->loop, ac);
        redisAsyncSetConnectCallback(ac, on_connect);
        redisAsyncSetDisconnectCallback(ac, on_disconnect);
        if (redisAsyncCommandArgv(ac, on_reply, p, p->argc, (const char **)p->argv, p->argvlen) !=
            REDIS_OK) {
            redisAsyncFree(ac);
            continue;
        }
        METRIC_INC(redis_commands);
        p->ac = ac;
        ev_timer_stop(p->loop, &p->timer);
        ev_timer_set(&p->timer, p->timeout, 0.);
        ev_timer_start(p->loop, &p->timer);
        return;
    }
    finish(p, 0);
}

/* The attempt on ac failed: give it up and try the next address. free_it:
 * ac is ours to free (hiredis is not freeing it already). */
static void attempt_failed(struct store_probe *p, redisAsyncContext *ac, const char *why,
                           int free_it)
{
    const struct store_addr *a = &p->addrs[p->next - 1];

    LOG_DEBUG("\"redis probe failed\" addr=%s:%d err=\"%s\"", a->host, a->port, why);
    METRIC_INC(redis_errors);
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

static void on_disconnect(const redisAsyncContext *ac, int status)
{
    struct store_probe *p = ac->data;

    if (p->ac == ac)
        attempt_failed(p, (redisAsyncContext *)ac, "closed", 0);
}

static void on_reply(redisAsyncContext *ac, void *r, void *priv)
{
    struct store_probe *p = priv;
    redisReply *reply = r;
    const struct store_addr *a;

    if (!reply || p->ac != ac)
        return; /* on_connect/on_disconnect/the timer deal with it */
    a = &p->addrs[p->next - 1];
    if (reply->type == REDIS_REPLY_ERROR) {
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

/* ---- lifecycle --------------------------------------------------------------- */

struct store_probe *store_probe_new(struct ev_loop *loop, uint64_t timeout_us)
{
    struct store_probe *p = calloc(1, sizeof(*p));

    if (!p)
        return NULL;
    p->loop = loop;
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

int store_probe_start(struct store_probe *p, const struct store_addr *addrs, size_t n, int argc,
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
    p->n = n;
    for (size_t i = 0; i < n; i++) {
        if (!(p->addrs[i].host = strdup(addrs[i].host)))
            goto oom;
        p->addrs[i].port = addrs[i].port;
    }
    p->argc = argc;
    for (int i = 0; i < argc; i++) {
        if (!(p->argv[i] = strdup(argv[i])))
            goto oom;
        p->argvlen[i] = strlen(argv[i]);
    }
    p->next = 0;
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
