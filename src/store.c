/* store.c - asynchronous Redis client (hiredis 0.14 + libev adapter). */
#include "store.h"

#include <errno.h>
#include <ev.h>
#include <hiredis/adapters/libev.h>
#include <hiredis/async.h>
#include <hiredis/hiredis.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config.h"
#include "log.h"
#include "metrics.h"
#include "scripts.h"
#include "util.h"

#define BACKOFF_MIN 0.05
#define BACKOFF_MAX 2.0
#define WATCHDOG_EVERY 0.05
#define SHA_LEN 40

struct store_cmd {
    struct store *s;
    store_cb *cb;
    void *arg;
    uint64_t sent_us;
    int script;
    int retried;
    int argc;      /* EVALSHA sha numkeys key args... */
    char **argv;   /* argv[1] is the sha slot */
    size_t *argvlen;
    struct store_cmd *prev, *next; /* outstanding, oldest first */
};

struct store {
    struct ev_loop *loop;
    redisAsyncContext *ac;
    int up;           /* scripts loaded, ready for EVALSHA */
    int connected;    /* TCP/unix connection made */
    int loading;      /* SCRIPT LOAD replies still expected */
    double backoff;
    ev_timer reconnect;
    ev_timer watchdog;
    uint64_t dead_after_us;
    /* where */
    char *host;
    int port;
    char *unix_path;
    char *user, *password;
    int db;
    char sha[SCRIPT_COUNT][SHA_LEN + 1];
    struct store_cmd *head, *tail;
    unsigned pending;
    void (*state_fn)(void *, int);
    void *state_arg;
    char agent_id[128];
    char last_err[256];
};

static const char *const script_src[SCRIPT_COUNT] = {
    script_tb_claim, script_tb_return, script_tb_exact,
    script_sw_claim, script_sw_return, script_sw_exact,
};
static const char *const script_names[SCRIPT_COUNT] = {
    "tb_claim", "tb_return", "tb_exact", "sw_claim", "sw_return", "sw_exact",
};

static void store_connect(struct store *s);

/* ---- URL ---------------------------------------------------------------- */

static int parse_url(struct store *s, const char *url, char *err, size_t errlen)
{
    if (strncmp(url, "unix:", 5) == 0) {
        s->unix_path = strdup(url + 5);
        return s->unix_path ? 0 : -1;
    }
    if (strncmp(url, "redis://", 8) != 0) {
        snprintf(err, errlen, "redis url %s: expected redis://[:password@]host:port[/db]", url);
        return -1;
    }
    const char *p = url + 8, *at = strrchr(p, '@');
    if (at) {
        const char *colon = memchr(p, ':', (size_t)(at - p));
        if (colon) {
            if (colon > p)
                s->user = strndup(p, (size_t)(colon - p));
            s->password = strndup(colon + 1, (size_t)(at - colon - 1));
        } else {
            s->password = strndup(p, (size_t)(at - p));
        }
        p = at + 1;
    }
    const char *slash = strchr(p, '/');
    size_t hp_len = slash ? (size_t)(slash - p) : strlen(p);
    char hostport[300];
    if (hp_len == 0 || hp_len >= sizeof(hostport)) {
        snprintf(err, errlen, "redis url %s: bad host", url);
        return -1;
    }
    memcpy(hostport, p, hp_len);
    hostport[hp_len] = '\0';
    char *h = hostport, *port = NULL;
    if (*h == '[') {
        char *e = strchr(h, ']');
        if (!e) {
            snprintf(err, errlen, "redis url %s: bad [v6] host", url);
            return -1;
        }
        *e = '\0';
        h++;
        if (e[1] == ':')
            port = e + 2;
    } else if ((port = strrchr(h, ':'))) {
        *port++ = '\0';
    }
    s->host = strdup(h);
    s->port = port ? atoi(port) : 6379;
    s->db = slash && slash[1] ? atoi(slash + 1) : 0;
    if (s->port <= 0 || s->port > 65535) {
        snprintf(err, errlen, "redis url %s: bad port", url);
        return -1;
    }
    return s->host ? 0 : -1;
}

/* ---- outstanding commands ------------------------------------------------ */

static void cmd_unlink(struct store *s, struct store_cmd *c)
{
    if (c->prev)
        c->prev->next = c->next;
    else
        s->head = c->next;
    if (c->next)
        c->next->prev = c->prev;
    else
        s->tail = c->prev;
    c->prev = c->next = NULL;
    s->pending--;
}

static void cmd_link(struct store *s, struct store_cmd *c)
{
    c->prev = s->tail;
    c->next = NULL;
    if (s->tail)
        s->tail->next = c;
    else
        s->head = c;
    s->tail = c;
    s->pending++;
}

static void cmd_free(struct store_cmd *c)
{
    if (!c)
        return;
    for (int i = 0; i < c->argc; i++)
        free(c->argv[i]);
    free(c->argv);
    free(c->argvlen);
    free(c);
}

static void cmd_finish(struct store_cmd *c, struct store_result *res)
{
    c->cb(c->arg, res);
    cmd_free(c);
}

static void fail_cmd(struct store_cmd *c, int status, const char *err)
{
    struct store_result res = {.status = status, .err = err};
    cmd_finish(c, &res);
}

/* ---- connection state ---------------------------------------------------- */

static void set_up(struct store *s, int up)
{
    if (s->up == up)
        return;
    s->up = up;
    atomic_store(&metrics.redis_up, up);
    if (up)
        LOG_INFO("\"redis up\" %s%s%s:%d", s->unix_path ? "path=" : "addr=",
                 s->unix_path ? s->unix_path : s->host, s->unix_path ? "" : "",
                 s->unix_path ? 0 : s->port);
    if (s->state_fn)
        s->state_fn(s->state_arg, up);
}

static void schedule_reconnect(struct store *s)
{
    ev_timer_stop(s->loop, &s->reconnect);
    ev_timer_set(&s->reconnect, s->backoff, 0.);
    ev_timer_start(s->loop, &s->reconnect);
    s->backoff = s->backoff * 2 > BACKOFF_MAX ? BACKOFF_MAX : s->backoff * 2;
}

/* The connection is gone (or never came): fail what waits, try again later. */
static void connection_lost(struct store *s, const char *why)
{
    struct store_cmd *c;

    if (s->up || s->connected)
        LOG_WARN("\"redis connection lost\" err=\"%s\"", why);
    else if (strcmp(s->last_err, why) != 0)
        LOG_WARN("\"redis unreachable\" err=\"%s\"", why);
    snprintf(s->last_err, sizeof(s->last_err), "%s", why);
    s->ac = NULL;
    s->connected = 0;
    s->loading = 0;
    set_up(s, 0);
    while ((c = s->head)) {
        cmd_unlink(s, c);
        METRIC_INC(redis_errors);
        fail_cmd(c, STORE_DOWN, why);
    }
    schedule_reconnect(s);
}

static void on_connect(const redisAsyncContext *ac, int status)
{
    struct store *s = ac->data;
    if (status != REDIS_OK) {
        /* hiredis frees ac after this callback. */
        connection_lost(s, ac->errstr[0] ? ac->errstr : "connect failed");
        return;
    }
    s->connected = 1;
}

static void on_disconnect(const redisAsyncContext *ac, int status)
{
    struct store *s = ac->data;
    if (s->ac != ac)
        return; /* an old context we already gave up on */
    connection_lost(s, status == REDIS_OK ? "closed" : (ac->errstr[0] ? ac->errstr : "error"));
}

/* Reply of a setup command (AUTH, SELECT, SCRIPT LOAD). */
static void on_setup_reply(redisAsyncContext *ac, void *r, void *priv)
{
    struct store *s = ac->data;
    redisReply *reply = r;
    long idx = (long)(intptr_t)priv;

    if (!reply)
        return; /* connection going away: connection_lost handles it */
    if (reply->type == REDIS_REPLY_ERROR) {
        char why[200];
        snprintf(why, sizeof(why), "%s: %s",
                 idx < 0 ? (idx == -1 ? "AUTH" : "SELECT") : "SCRIPT LOAD", reply->str);
        METRIC_INC(redis_errors);
        if (strcmp(s->last_err, why) != 0)
            LOG_ERROR("\"redis refused setup\" err=\"%s\"", why);
        snprintf(s->last_err, sizeof(s->last_err), "%s", why);
        redisAsyncDisconnect(ac);
        return;
    }
    if (idx >= 0 && reply->type == REDIS_REPLY_STRING && reply->len == SHA_LEN)
        memcpy(s->sha[idx], reply->str, SHA_LEN + 1);
    if (idx >= 0 && --s->loading == 0) {
        s->backoff = BACKOFF_MIN;
        s->last_err[0] = '\0';
        set_up(s, 1);
    }
}

static void send_setup(struct store *s)
{
    if (s->password) {
        if (s->user)
            redisAsyncCommand(s->ac, on_setup_reply, (void *)(intptr_t)-1, "AUTH %s %s", s->user,
                              s->password);
        else
            redisAsyncCommand(s->ac, on_setup_reply, (void *)(intptr_t)-1, "AUTH %s",
                              s->password);
        METRIC_INC(redis_commands);
    }
    if (s->db) {
        redisAsyncCommand(s->ac, on_setup_reply, (void *)(intptr_t)-2, "SELECT %d", s->db);
        METRIC_INC(redis_commands);
    }
    s->loading = SCRIPT_COUNT;
    for (long i = 0; i < SCRIPT_COUNT; i++) {
        redisAsyncCommand(s->ac, on_setup_reply, (void *)(intptr_t)i, "SCRIPT LOAD %s",
                          script_src[i]);
        METRIC_INC(redis_commands);
    }
}

static void store_connect(struct store *s)
{
    redisAsyncContext *ac;

    if (s->unix_path)
        ac = redisAsyncConnectUnix(s->unix_path);
    else
        ac = redisAsyncConnect(s->host, s->port);
    if (!ac || ac->err) {
        char why[160];
        snprintf(why, sizeof(why), "%s", ac ? ac->errstr : "out of memory");
        if (ac)
            redisAsyncFree(ac);
        connection_lost(s, why);
        return;
    }
    ac->data = s;
    s->ac = ac;
    redisLibevAttach(s->loop, ac);
    redisAsyncSetConnectCallback(ac, on_connect);
    redisAsyncSetDisconnectCallback(ac, on_disconnect);
    /* Commands queue until the connection is made, in order. */
    send_setup(s);
}

static void reconnect_cb(struct ev_loop *loop, ev_timer *t, int revents)
{
    struct store *s = t->data;
    if (!s->ac)
        store_connect(s);
}

/* A connection whose oldest command waits far beyond the timeout is stuck
 * (Redis frozen, a partition without RST): drop it and start over. */
static void watchdog_cb(struct ev_loop *loop, ev_timer *t, int revents)
{
    struct store *s = t->data;
    if (s->ac && s->head && util_now_us() - s->head->sent_us > s->dead_after_us) {
        redisAsyncContext *ac = s->ac;
        LOG_WARN("\"redis not answering; reconnecting\" waited_ms=%llu",
                 (unsigned long long)((util_now_us() - s->head->sent_us) / 1000));
        s->ac = NULL; /* on_disconnect ignores it from now on */
        redisAsyncFree(ac); /* runs the pending hiredis callbacks with NULL */
        connection_lost(s, "not answering");
    }
}

/* ---- commands ------------------------------------------------------------ */

static void on_eval_reply(redisAsyncContext *ac, void *r, void *priv);

static int send_cmd(struct store *s, struct store_cmd *c)
{
    memcpy(c->argv[1], s->sha[c->script], SHA_LEN);
    c->sent_us = util_now_us();
    if (redisAsyncCommandArgv(s->ac, on_eval_reply, c, c->argc, (const char **)c->argv,
                              c->argvlen) != REDIS_OK)
        return -1;
    METRIC_INC(redis_commands);
    return 0;
}

static void on_eval_reply(redisAsyncContext *ac, void *r, void *priv)
{
    struct store_cmd *c = priv;
    struct store *s = c->s;
    redisReply *reply = r;
    struct store_result res = {0};

    if (!reply) {
        /* Disconnect or free: connection_lost() fails the list; when the
         * context was dropped by the watchdog the command is already unlinked
         * and failed there. */
        return;
    }
    cmd_unlink(s, c);
    res.latency_us = util_now_us() - c->sent_us;
    metrics_hist_observe(&metrics.redis_latency, res.latency_us * 1000);
    if (reply->type == REDIS_REPLY_ERROR && strncmp(reply->str, "NOSCRIPT", 8) == 0 &&
        !c->retried && s->ac) {
        /* Redis lost its scripts (restart, failover, SCRIPT FLUSH): load the
         * script again and retry; both go out in order on this connection. */
        c->retried = 1;
        LOG_INFO("\"redis lost its scripts; reloading\" script=%s", script_names[c->script]);
        s->loading++;
        redisAsyncCommand(s->ac, on_setup_reply, (void *)(intptr_t)c->script, "SCRIPT LOAD %s",
                          script_src[c->script]);
        METRIC_INC(redis_commands);
        cmd_link(s, c);
        if (send_cmd(s, c) == 0)
            return;
        cmd_unlink(s, c);
        fail_cmd(c, STORE_DOWN, "send failed");
        return;
    }
    if (reply->type == REDIS_REPLY_ARRAY) {
        res.status = STORE_OK;
        for (size_t i = 0; i < reply->elements && i < STORE_MAX_VALUES; i++) {
            redisReply *e = reply->element[i];
            if (e->type == REDIS_REPLY_INTEGER) {
                res.v[i] = e->integer;
            } else if (e->type == REDIS_REPLY_STRING) {
                res.v[i] = strtoll(e->str, NULL, 10);
            } else {
                res.status = STORE_ERR;
                res.err = "unexpected reply element";
            }
            res.n = (int)i + 1;
        }
    } else {
        res.status = STORE_ERR;
        res.err = reply->type == REDIS_REPLY_ERROR ? reply->str : "unexpected reply type";
    }
    if (res.status != STORE_OK) {
        METRIC_INC(redis_errors);
        LOG_DEBUG("\"redis script error\" script=%s err=\"%s\"", script_names[c->script],
                  res.err);
    }
    cmd_finish(c, &res);
}

int store_eval(struct store *s, enum store_script script, const char *key, size_t keylen,
               int argc, const char *const *argv, const size_t *argvlen, store_cb *cb,
               void *arg)
{
    struct store_cmd *c;
    int n = argc + 4;

    if (!s->up || !s->ac) {
        struct store_result res = {.status = STORE_DOWN, .err = "redis down"};
        cb(arg, &res);
        return -1;
    }
    c = calloc(1, sizeof(*c));
    if (!c)
        goto oom;
    c->s = s;
    c->cb = cb;
    c->arg = arg;
    c->script = script;
    c->argc = n;
    c->argv = calloc((size_t)n, sizeof(char *));
    c->argvlen = calloc((size_t)n, sizeof(size_t));
    if (!c->argv || !c->argvlen)
        goto oom;
    c->argv[0] = strdup("EVALSHA");
    c->argv[1] = malloc(SHA_LEN + 1);
    c->argv[2] = strdup("1");
    c->argv[3] = malloc(keylen + 1);
    if (!c->argv[0] || !c->argv[1] || !c->argv[2] || !c->argv[3])
        goto oom;
    c->argvlen[0] = 7;
    c->argvlen[1] = SHA_LEN;
    c->argvlen[2] = 1;
    memcpy(c->argv[3], key, keylen);
    c->argvlen[3] = keylen;
    for (int i = 0; i < argc; i++) {
        c->argv[4 + i] = malloc(argvlen[i] + 1);
        if (!c->argv[4 + i])
            goto oom;
        memcpy(c->argv[4 + i], argv[i], argvlen[i]);
        c->argvlen[4 + i] = argvlen[i];
    }
    cmd_link(s, c);
    if (send_cmd(s, c) < 0) {
        cmd_unlink(s, c);
        METRIC_INC(redis_errors);
        fail_cmd(c, STORE_DOWN, "send failed");
        return -1;
    }
    return 0;
oom:
    cmd_free(c);
    {
        struct store_result res = {.status = STORE_ERR, .err = "out of memory"};
        cb(arg, &res);
    }
    return -1;
}

/* ---- lifecycle ----------------------------------------------------------- */

struct store *store_new(struct ev_loop *loop, const struct config *cfg, char *err,
                        size_t errlen)
{
    struct store *s = calloc(1, sizeof(*s));
    char host[64] = "agent";

    if (!s) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    if (!cfg->redis_url || !*cfg->redis_url) {
        snprintf(err, errlen, "redis: only url is supported by this build (cluster and "
                              "sentinel are not implemented yet)");
        free(s);
        return NULL;
    }
    if (parse_url(s, cfg->redis_url, err, errlen) < 0) {
        store_free(s);
        return NULL;
    }
    s->loop = loop;
    s->backoff = BACKOFF_MIN;
    /* Frozen past 10 x timeout (at least 1 s): give the connection up. */
    s->dead_after_us = cfg->redis_timeout_ms * 10000;
    if (s->dead_after_us < 1000000)
        s->dead_after_us = 1000000;
    gethostname(host, sizeof(host) - 1);
    snprintf(s->agent_id, sizeof(s->agent_id), "%s:%d:%08x", host, (int)getpid(),
             (unsigned)(util_hash(UTIL_HASH_INIT, &s, sizeof(s)) ^ util_now_us()));
    ev_timer_init(&s->reconnect, reconnect_cb, 0., 0.);
    s->reconnect.data = s;
    ev_timer_init(&s->watchdog, watchdog_cb, WATCHDOG_EVERY, WATCHDOG_EVERY);
    s->watchdog.data = s;
    ev_timer_start(loop, &s->watchdog);
    store_connect(s);
    return s;
}

void store_free(struct store *s)
{
    if (!s)
        return;
    if (s->loop) {
        ev_timer_stop(s->loop, &s->reconnect);
        ev_timer_stop(s->loop, &s->watchdog);
    }
    if (s->ac) {
        redisAsyncContext *ac = s->ac;
        s->ac = NULL;
        redisAsyncFree(ac);
    }
    struct store_cmd *c;
    while ((c = s->head)) {
        cmd_unlink(s, c);
        fail_cmd(c, STORE_DOWN, "shutting down");
    }
    free(s->host);
    free(s->unix_path);
    free(s->user);
    free(s->password);
    free(s);
}

int store_up(const struct store *s)
{
    return s && s->up;
}

unsigned store_pending(const struct store *s)
{
    return s ? s->pending : 0;
}

void store_on_state(struct store *s, void (*fn)(void *arg, int up), void *arg)
{
    s->state_fn = fn;
    s->state_arg = arg;
}

const char *store_agent_id(const struct store *s)
{
    return s->agent_id;
}
