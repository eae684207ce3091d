/* SPDX-License-Identifier: Apache-2.0 */
/* store_auth_trial.c - new Redis credentials tried on a connection of their
 * own before the store switches to them (store_auth_trial.h): a store_conn
 * with an env of its own (the new credentials, the scripts' SHA1s it
 * loads), never reconnected, one probe call once it is ready, and the
 * warning `redis_auth_refused` while they fail.
 */
#include "store_auth_trial.h"

#include <ev.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "core/warning.h"
#include "store_cmd.h"
#include "store_conn.h"
#include "store_errors.h"
#include "store_why.h"

#define WHY_MAX 256

struct store_auth_trial {
    const struct store_env *store_env; /* the store's */
    struct store_env env;              /* a try's: the store's, but the credentials and the SHA1s */
    struct store_conn *conn;           /* the try in progress, or NULL between tries */
    char *user, *password;
    store_auth_trial_where *where;
    store_auth_trial_pass *pass;
    void *arg;
    ev_timer timer; /* the outcome (out of the connection's callbacks), or the next try */
    int finished;   /* the try in progress has its outcome */
    int ok;
    char why[WHY_MAX];
    char addr[300];
};

/* The probe's arguments, as the connection setup's own probe: a bucket that
 * never runs dry, gone a second later. */
static const char *const probe_argv[] = {"1000", "1000", "1000"};
static const size_t probe_len[] = {4, 4, 4};

static void try_now(struct store_auth_trial *t);

static void end_try(struct store_auth_trial *t)
{
    t->finished = 1; /* the probe, if out, fails with the connection: ignored */
    store_conn_free(t->conn);
    t->conn = NULL;
    store_resp_free(&t->env.resp);
}

/* The try's outcome, on the trial's timer. */
static void finish(struct store_auth_trial *t, int ok, const char *why)
{
    if (t->finished)
        return;
    t->finished = 1;
    t->ok = ok;
    snprintf(t->why, sizeof(t->why), "%s", why && why[0] ? why : ok ? "" : "failed");
    ev_timer_stop(t->env.loop, &t->timer);
    ev_timer_set(&t->timer, 0., 0.);
    ev_timer_start(t->env.loop, &t->timer);
}

static void failed(struct store_auth_trial *t)
{
    char name[STORE_WHY_NAME_MAX];

    store_why_name(t->why, name, sizeof(name));
    /* logged once at warn when it starts (the registry) */
    warning_raise(WARNING_REDIS_AUTH_REFUSED,
                  "the [redis] credentials of the last reload are not in force: a connection "
                  "trying them failed (%s: %s, at %s) and the connections keep those in force. "
                  "Fix username, password or password_file (or Redis' ACL) and reload; they are "
                  "tried again every %d s",
                  name, t->why, t->addr, (int)STORE_AUTH_TRIAL_RETRY_S);
    ev_timer_set(&t->timer, STORE_AUTH_TRIAL_RETRY_S, 0.);
    ev_timer_start(t->env.loop, &t->timer);
}

static void timer_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
    struct store_auth_trial *t = w->data;

    if (!t->conn || !t->finished) { /* between tries: the next one */
        try_now(t);
        return;
    }
    end_try(t);
    if (t->ok)
        t->pass(t->arg, t->user, t->password); /* may free t */
    else
        failed(t);
}

/* The probe call's answer: an error that is no refusal (a Cluster -MOVED:
 * the key's slot is another master's) says the credentials passed too. */
static void probe_cb(void *arg, const struct store_result *res)
{
    struct store_auth_trial *t = arg;

    if (res->status == STORE_OK ||
        (res->status == STORE_ERR && !store_error_refusal(store_error_kind(res->err))))
        finish(t, 1, NULL);
    else
        finish(t, 0, res->err && res->err[0] ? res->err : store_conn_last_error(t->conn));
}

static void on_state(void *owner, struct store_conn *conn, int ready)
{
    struct store_auth_trial *t = owner;
    char key[160];
    struct store_cmd *c;

    if (!ready || t->finished)
        return; /* a loss: the probe fails with it, or the retry hook says it */
    snprintf(key, sizeof(key), "%sprobe", t->env.prefix ? t->env.prefix : "");
    c = store_cmd_new(SCRIPT_TB_EXACT, key, strlen(key), 3, probe_argv, probe_len, probe_cb, t);
    if (!c) {
        finish(t, 0, "out of memory");
        return;
    }
    if (store_conn_send(conn, c) < 0) {
        store_cmd_free(c);
        finish(t, 0, "send failed");
    }
}

/* The connection was lost (before it was ready, or with the probe): it is
 * not made again. */
static void on_retry(void *owner, struct store_conn *conn)
{
    struct store_auth_trial *t = owner;

    finish(t, 0, store_conn_last_error(conn));
}

static const struct store_conn_hooks trial_hooks = {on_state, on_retry, NULL};

/* A new try, on a new connection (none in progress). */
static void try_now(struct store_auth_trial *t)
{
    const struct store_env *e = t->store_env;
    const char *host = NULL, *path = NULL;
    int port = 0, flags = 0;

    if (t->where(t->arg, &host, &port, &path, &flags) < 0) {
        ev_timer_set(&t->timer, STORE_AUTH_TRIAL_RETRY_S, 0.);
        ev_timer_start(e->loop, &t->timer);
        return;
    }
    memset(&t->env, 0, sizeof(t->env));
    t->env.loop = e->loop;
    t->env.timeout_us = e->timeout_us;
    t->env.dead_after_us = e->dead_after_us;
    t->env.db = e->db;
    t->env.functions = e->functions;
    t->env.auth_gen = e->auth_gen + 1;
    t->env.prefix = e->prefix;
    t->env.user = t->user;
    t->env.password = t->password;
    t->finished = 0;
    t->conn = store_conn_new(&t->env, &trial_hooks, t, host, port, path, flags | STORE_CONN_TRIAL);
    if (!t->conn) {
        snprintf(t->why, sizeof(t->why), "out of memory");
        failed(t);
        return;
    }
    snprintf(t->addr, sizeof(t->addr), "%s", store_conn_name(t->conn));
    store_conn_connect(t->conn);
}

static char *dup_or_null(const char *v, int *oom)
{
    char *c = v ? strdup(v) : NULL;

    if (v && !c)
        *oom = 1;
    return c;
}

static void wipe(char *v)
{
    if (v)
        explicit_bzero(v, strlen(v));
    free(v);
}

struct store_auth_trial *store_auth_trial_new(const struct store_env *env, const char *user,
                                              const char *password, store_auth_trial_where *where,
                                              store_auth_trial_pass *pass, void *arg)
{
    struct store_auth_trial *t = calloc(1, sizeof(*t));
    int oom = 0;

    if (!t)
        return NULL;
    t->store_env = env;
    t->env.loop = env->loop;
    t->user = dup_or_null(user, &oom);
    t->password = dup_or_null(password, &oom);
    t->where = where;
    t->pass = pass;
    t->arg = arg;
    ev_timer_init(&t->timer, timer_cb, 0., 0.);
    t->timer.data = t;
    if (oom) {
        store_auth_trial_free(t);
        return NULL;
    }
    LOG_INFO("\"redis credentials changed: trying them on a new connection\"");
    try_now(t);
    return t;
}

void store_auth_trial_free(struct store_auth_trial *t)
{
    if (!t)
        return;
    end_try(t);
    ev_timer_stop(t->env.loop, &t->timer);
    wipe(t->user);
    wipe(t->password);
    free(t);
}
