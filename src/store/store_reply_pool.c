/* SPDX-License-Identifier: Apache-2.0 */
/* store_reply_pool.c - hiredis reply objects, recycled (store_reply_pool.h). */
#include "store_reply_pool.h"

#include <hiredis/hiredis.h>
#include <stdlib.h>
#include <string.h>

#define POOL_MAX 8192 /* reply structs kept per thread: a full batch's worth, ~400 KB */

struct free_reply {
    struct free_reply *next;
};

_Static_assert(sizeof(redisReply) >= sizeof(struct free_reply), "a free reply holds a link");

static _Thread_local struct free_reply *pool;
static _Thread_local unsigned pool_len;

static redisReply *reply_new(const redisReadTask *task, int type)
{
    redisReply *r;

    if (pool) {
        r = (redisReply *)pool;
        pool = pool->next;
        pool_len--;
    } else if (!(r = malloc(sizeof(*r)))) {
        return NULL;
    }
    memset(r, 0, sizeof(*r));
    r->type = type;
    if (task->parent) { /* as hiredis' own functions: link into the parent array */
        redisReply *parent = task->parent->obj;
        parent->element[task->idx] = r;
    }
    return r;
}

static void reply_free(void *obj)
{
    redisReply *r = obj;

    if (!r)
        return;
    if (r->type == REDIS_REPLY_ARRAY) {
        for (size_t i = 0; r->element && i < r->elements; i++)
            reply_free(r->element[i]);
        free(r->element);
    } else {
        free(r->str); /* NULL for integers and nil */
    }
    if (pool_len < POOL_MAX) {
        struct free_reply *f = (struct free_reply *)r;
        f->next = pool;
        pool = f;
        pool_len++;
        return;
    }
    free(r);
}

static void *create_string(const redisReadTask *task, char *str, size_t len)
{
    char *buf = malloc(len + 1);
    redisReply *r;

    if (!buf)
        return NULL;
    /* task->type is STRING, STATUS or ERROR, as hiredis makes them */
    if (!(r = reply_new(task, task->type))) {
        free(buf);
        return NULL;
    }
    memcpy(buf, str, len);
    buf[len] = '\0';
    r->str = buf;
    r->len = len;
    return r;
}

static void *create_array(const redisReadTask *task, int elements)
{
    redisReply **element = NULL;
    redisReply *r;

    if (elements > 0 && !(element = calloc((size_t)elements, sizeof(*element))))
        return NULL;
    if (!(r = reply_new(task, REDIS_REPLY_ARRAY))) {
        free(element);
        return NULL;
    }
    r->element = element;
    r->elements = elements > 0 ? (size_t)elements : 0;
    return r;
}

static void *create_integer(const redisReadTask *task, long long value)
{
    redisReply *r = reply_new(task, REDIS_REPLY_INTEGER);

    if (r)
        r->integer = value;
    return r;
}

static void *create_nil(const redisReadTask *task)
{
    return reply_new(task, REDIS_REPLY_NIL);
}

redisReplyObjectFunctions store_reply_pool_fns = {
    create_string, create_array, create_integer, create_nil, reply_free,
};

void store_reply_pool_drain(void)
{
    while (pool) {
        struct free_reply *f = pool;
        pool = f->next;
        free(f);
    }
    pool_len = 0;
}
