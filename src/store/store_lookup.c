/* SPDX-License-Identifier: Apache-2.0 */
/* store_lookup.c - host name lookups on threads, answers on the loop (see
 * store_lookup.h).
 *
 * A lookup has two owners, its thread and the loop side, counted in refs;
 * the last one to let go frees it. The thread only ever writes the result,
 * signals the ev_async and lets go, so the loop side may give up (cancel,
 * time out) at any moment: a signal to a stopped ev_async does nothing.
 */
#include "store_lookup.h"

#include <ev.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/net.h"

#define ERR_MAX (NET_HOST_MAX + 64)

struct store_lookup {
    atomic_int refs;
    struct ev_loop *loop;
    ev_async done;
    ev_timer timer;
    store_lookup_cb *cb;
    void *arg;
    char host[NET_HOST_MAX];
    /* written by the thread before it signals done */
    int rc;
    char ip[NET_NUMERIC_MAX];
    char err[ERR_MAX];
};

static atomic_int running; /* lookups whose thread has not let go */

static void unref(struct store_lookup *l)
{
    if (atomic_fetch_sub(&l->refs, 1) == 1)
        free(l);
}

static void *lookup_thread(void *arg)
{
    struct store_lookup *l = arg;

    l->rc = net_resolve_host(l->host, l->ip, sizeof(l->ip), l->err, sizeof(l->err));
    ev_async_send(l->loop, &l->done);
    atomic_fetch_sub(&running, 1);
    unref(l);
    return NULL;
}

/* The loop side lets go: no callback after this. */
static void finish(struct store_lookup *l)
{
    ev_async_stop(l->loop, &l->done);
    ev_timer_stop(l->loop, &l->timer);
    unref(l);
}

static void done_cb(struct ev_loop *loop, ev_async *a, int revents)
{
    struct store_lookup *l = a->data;
    store_lookup_cb *cb = l->cb;
    void *arg = l->arg;
    char ip[NET_NUMERIC_MAX], err[ERR_MAX];
    int rc = l->rc;

    /* the thread wrote these before signalling: the async's pipe orders them */
    memcpy(ip, l->ip, sizeof(ip));
    memcpy(err, l->err, sizeof(err));
    finish(l);
    cb(arg, rc == 0 ? ip : NULL, err);
}

static void timeout_cb(struct ev_loop *loop, ev_timer *t, int revents)
{
    struct store_lookup *l = t->data;
    store_lookup_cb *cb = l->cb;
    void *arg = l->arg;
    char err[ERR_MAX];

    snprintf(err, sizeof(err), "%s: name lookup timed out", l->host);
    finish(l);
    cb(arg, NULL, err);
}

struct store_lookup *store_lookup_start(struct ev_loop *loop, const char *host, store_lookup_cb *cb,
                                        void *arg)
{
    struct store_lookup *l;
    pthread_attr_t attr;
    pthread_t th;
    int rc;

    if (strlen(host) >= NET_HOST_MAX)
        return NULL;
    if (atomic_fetch_add(&running, 1) >= STORE_LOOKUP_MAX) {
        atomic_fetch_sub(&running, 1);
        return NULL;
    }
    if (!(l = calloc(1, sizeof(*l)))) {
        atomic_fetch_sub(&running, 1);
        return NULL;
    }
    atomic_init(&l->refs, 2);
    l->loop = loop;
    l->cb = cb;
    l->arg = arg;
    strcpy(l->host, host);
    ev_async_init(&l->done, done_cb);
    l->done.data = l;
    ev_timer_init(&l->timer, timeout_cb, STORE_LOOKUP_TIMEOUT_S, 0.);
    l->timer.data = l;
    ev_async_start(loop, &l->done);
    ev_timer_start(loop, &l->timer);
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    rc = pthread_create(&th, &attr, lookup_thread, l);
    pthread_attr_destroy(&attr);
    if (rc != 0) {
        atomic_fetch_sub(&running, 1);
        ev_async_stop(loop, &l->done);
        ev_timer_stop(loop, &l->timer);
        free(l);
        return NULL;
    }
    return l;
}

void store_lookup_cancel(struct store_lookup *l)
{
    if (l)
        finish(l);
}
