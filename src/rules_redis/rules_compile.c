/* SPDX-License-Identifier: Apache-2.0 */
/* rules_compile.c - rule sets loaded in a thread, put in force on the loop
 * (see rules_compile.h).
 *
 * A load is one thread, joined on the loop once it signalled its end: the
 * join orders what it wrote before what the loop reads. The ev_async is
 * active only while a load is in flight, so that it never keeps a loop run
 * at shutdown going.
 */
#include "rules_redis/rules_compile.h"

#include <ev.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/config.h"
#include "core/log.h"
#include "rules_redis/rules_check.h"

#define ERRBUF 4096

struct rules_compile {
    struct ev_loop *loop;
    ev_async done;
    pthread_t thread;
    int busy;
    rules_compile_done_fn *cb;
    void *ctx;
    /* a SIGHUP waiting for the load in flight */
    int reload;
    char *reload_path;
    const struct rules_in_force *reload_rules; /* NULL: the file's rules alone */
    rules_compile_done_fn *reload_cb;
    void *reload_ctx;
    /* the job, read by the thread; then its outcome, written by it */
    char *path, *text, *sha256, *name;
    size_t len;
    struct config *cfg;
    char err[ERRBUF];
};

static void *load_thread(void *arg)
{
    struct rules_compile *c = arg;
    int rc;

    c->err[0] = '\0';
    if (!c->text)
        rc = config_load_file(c->path, &c->cfg, c->err, sizeof(c->err));
    else if (!c->sha256)
        rc = config_load_with_rules(c->path, c->text, c->len, c->name, &c->cfg, c->err,
                                    sizeof(c->err));
    else
        rc = rules_redis_check_version(c->path, c->text, c->len, c->sha256, c->name, &c->cfg,
                                       c->err, sizeof(c->err));
    if (rc < 0)
        c->cfg = NULL;
    ev_async_send(c->loop, &c->done);
    return NULL;
}

/* The job's strings and a config nobody took; idle again. */
static void clear(struct rules_compile *c)
{
    config_free(c->cfg);
    c->cfg = NULL;
    free(c->path);
    free(c->text);
    free(c->sha256);
    free(c->name);
    c->path = c->text = c->sha256 = c->name = NULL;
    c->busy = 0;
}

/* The SIGHUP that waited: the rules in force now. Out of memory, or no
 * thread: its done at once, with the reason. */
static void start_reload(struct rules_compile *c)
{
    struct rules_compile_result res = {NULL, "reload failed: out of memory or no thread", NULL, 0};
    const struct rules_in_force *f = c->reload_rules;
    const char *text = f ? f->text : NULL;
    size_t len = f && text ? f->len : 0;
    char name[48];

    snprintf(name, sizeof(name), "redis:v%llu", (unsigned long long)(f ? f->version : 0));
    c->reload = 0;
    if (rules_compile_start(c, c->reload_path, text, len, NULL, name, c->reload_cb, c->reload_ctx) <
        0)
        c->reload_cb(c->reload_ctx, &res);
}

static void done_cb(struct ev_loop *loop, ev_async *w, int revents)
{
    struct rules_compile *c = w->data;
    struct rules_compile_result res;

    ev_async_stop(loop, &c->done);
    pthread_join(c->thread, NULL); /* it has signalled: it is returning */
    res.cfg = c->cfg;
    res.err = c->cfg ? NULL : c->err[0] ? c->err : "refused";
    res.text = c->text;
    res.len = c->len;
    c->cfg = NULL; /* the callee's */
    c->cb(c->ctx, &res);
    clear(c);
    if (c->reload)
        start_reload(c);
}

struct rules_compile *rules_compile_new(struct ev_loop *loop)
{
    struct rules_compile *c = calloc(1, sizeof(*c));

    if (!c)
        return NULL;
    c->loop = loop;
    ev_async_init(&c->done, done_cb);
    c->done.data = c;
    return c;
}

static char *dup_or_null(const char *s, int *failed)
{
    char *d = s ? strdup(s) : NULL;

    if (s && !d)
        *failed = 1;
    return d;
}

int rules_compile_start(struct rules_compile *c, const char *path, const char *text, size_t len,
                        const char *sha256, const char *name, rules_compile_done_fn *done,
                        void *ctx)
{
    sigset_t all, old;
    int failed = 0, rc;

    if (c->busy)
        return -1;
    c->busy = 1;
    c->path = dup_or_null(path, &failed);
    c->sha256 = dup_or_null(sha256, &failed);
    c->name = dup_or_null(name, &failed);
    if (text && (c->text = malloc(len + 1))) {
        memcpy(c->text, text, len);
        c->text[len] = '\0';
    } else if (text) {
        failed = 1;
    }
    c->len = len;
    if (failed) {
        clear(c);
        return -1;
    }
    c->cb = done;
    c->ctx = ctx;
    ev_async_start(c->loop, &c->done);
    /* signals stay the loop's (SIGHUP, SIGTERM): the thread blocks them all */
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    rc = pthread_create(&c->thread, NULL, load_thread, c);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0) {
        LOG_ERROR("\"cannot start a thread to load rules\" err=\"%s\"", strerror(rc));
        ev_async_stop(c->loop, &c->done);
        clear(c);
        return -1;
    }
    return 0;
}

int rules_compile_busy(const struct rules_compile *c)
{
    return c->busy;
}

int rules_compile_reload(struct rules_compile *c, const char *path,
                         const struct rules_in_force *in_force, rules_compile_done_fn *done,
                         void *ctx)
{
    char *p = strdup(path);

    if (!p)
        return -1;
    free(c->reload_path);
    c->reload_path = p;
    c->reload_rules = in_force;
    c->reload_cb = done;
    c->reload_ctx = ctx;
    c->reload = 1;
    if (!c->busy) /* else after the load in flight (done_cb) */
        start_reload(c);
    return 0;
}

void rules_compile_free(struct rules_compile *c)
{
    if (!c)
        return;
    if (c->busy) {
        pthread_join(c->thread, NULL);
        ev_async_stop(c->loop, &c->done);
        clear(c);
    }
    free(c->reload_path);
    free(c);
}
