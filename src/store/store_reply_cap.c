/* SPDX-License-Identifier: Apache-2.0 */
/* store_reply_cap.c - replies past the agent's largest refused
 * (store_reply_cap.h). */
#include "store_reply_cap.h"

#include <hiredis/async.h>
#include <stdio.h>
#include <string.h>

/* A reply's first object: the counts start again; -1 when no command waits
 * for a reply (hiredis would abort on it). */
static int first(const redisReadTask *task, struct store_reply_cap *cap)
{
    if (task->parent)
        return 0;
    cap->objects = cap->bytes = 0;
    if (cap->waiting && !cap->waiting->head) {
        snprintf(cap->why, sizeof(cap->why), "a reply no command waited for");
        cap->unasked = 1;
        return -1;
    }
    return 0;
}

/* The reply's first object resets the counts; refuse when n more objects
 * (and len more bytes) would take the reply past its caps. */
static int count(const redisReadTask *task, struct store_reply_cap *cap, size_t n, size_t len)
{
    if (first(task, cap) < 0)
        return -1;
    if (n > STORE_REPLY_MAX_OBJECTS - cap->objects) {
        snprintf(cap->why, sizeof(cap->why), "reply of over %u elements in all",
                 STORE_REPLY_MAX_OBJECTS);
        return -1;
    }
    if (len > STORE_REPLY_MAX_BYTES - cap->bytes) {
        snprintf(cap->why, sizeof(cap->why), "reply of over %u bytes of strings",
                 STORE_REPLY_MAX_BYTES);
        return -1;
    }
    cap->objects += n;
    cap->bytes += len;
    return 0;
}

static void *create_string(const redisReadTask *task, char *str, size_t len)
{
    struct store_reply_cap *cap = task->privdata;

    if (len > STORE_REPLY_MAX_STRING) {
        snprintf(cap->why, sizeof(cap->why), "string of %zu bytes (cap %u)", len,
                 STORE_REPLY_MAX_STRING);
        return NULL;
    }
    if (count(task, cap, task->parent ? 0 : 1, len) < 0)
        return NULL;
    return cap->inner->createString(task, str, len);
}

static void *create_array(const redisReadTask *task, int elements)
{
    struct store_reply_cap *cap = task->privdata;
    unsigned depth = 1;

    for (const redisReadTask *t = task->parent; t; t = t->parent)
        depth++;
    if (elements < 0 || (unsigned)elements > STORE_REPLY_MAX_ELEMENTS) {
        snprintf(cap->why, sizeof(cap->why), "array of %d elements (cap %u)", elements,
                 STORE_REPLY_MAX_ELEMENTS);
        return NULL;
    }
    if (depth > STORE_REPLY_MAX_DEPTH) {
        snprintf(cap->why, sizeof(cap->why), "arrays nested %u deep (cap %u)", depth,
                 STORE_REPLY_MAX_DEPTH);
        return NULL;
    }
    /* its elements count when announced: the parser allocates for them now */
    if (count(task, cap, (size_t)elements + (task->parent ? 0 : 1), 0) < 0)
        return NULL;
    return cap->inner->createArray(task, elements);
}

static void *create_integer(const redisReadTask *task, long long value)
{
    struct store_reply_cap *cap = task->privdata;

    if (first(task, cap) < 0)
        return NULL;
    return cap->inner->createInteger(task, value);
}

static void *create_nil(const redisReadTask *task)
{
    struct store_reply_cap *cap = task->privdata;

    if (first(task, cap) < 0)
        return NULL;
    return cap->inner->createNil(task);
}

void store_reply_cap_install(redisReader *r, struct store_reply_cap *cap,
                             const redisReplyObjectFunctions *inner)
{
    if (!inner)
        inner = r->fn;
    memset(cap, 0, sizeof(*cap));
    cap->inner = inner;
    cap->fns = (redisReplyObjectFunctions){create_string, create_array, create_integer, create_nil,
                                           inner->freeObject};
    r->fn = &cap->fns;
    r->privdata = cap;
}

void store_reply_cap_expect(struct store_reply_cap *cap, const struct redisCallbackList *list)
{
    cap->waiting = list;
}

int store_reply_cap_buffer(const redisReader *r, struct store_reply_cap *cap)
{
    size_t unparsed = r->buf && r->len > r->pos ? r->len - r->pos : 0;

    if (unparsed <= STORE_REPLY_MAX_BUFFER)
        return 0;
    snprintf(cap->why, sizeof(cap->why), "%zu bytes of one reply unparsed (cap %u)", unparsed,
             STORE_REPLY_MAX_BUFFER);
    return -1;
}

const char *store_reply_cap_refused(const struct store_reply_cap *cap)
{
    return cap->why[0] ? cap->why : NULL;
}
