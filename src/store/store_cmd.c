/* SPDX-License-Identifier: Apache-2.0 */
/* store_cmd.c - one script call: its copy of the arguments, a batch of many
 * (the group commit of store_conn.c: one EVALSHA of the batch script), and
 * reading their replies. No I/O: store_conn.c sends them. */
#include "store_cmd.h"

#include <hiredis/hiredis.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "metrics/metrics.h"
#include "store_reply.h"
#include "store_reply_check.h"
#include "store_resp.h"

/* Calls are made and freed by the thousand per second, in batches, on the
 * store's loop thread. glibc keeps only 7 free blocks of a size per thread
 * in its fast cache, so most of them went through its slower bins (a visible
 * part of the agent's CPU). Blocks of up to CMD_BLOCK bytes (a script call
 * with its arguments, a batch) are recycled here instead, per thread: a
 * store is used from one thread only. */
#define CMD_BLOCK 512
#define CMD_POOL_MAX 4096 /* at most 2 MB kept */

struct cmd_block {
    struct cmd_block *next;
};

static _Thread_local struct cmd_block *cmd_pool;
static _Thread_local unsigned cmd_pool_len;

/* A block of size bytes with a zeroed struct store_cmd at its start (the
 * rest uninitialised); NULL when out of memory. */
static struct store_cmd *cmd_alloc(size_t size)
{
    struct store_cmd *c;

    if (size > CMD_BLOCK)
        return calloc(1, size);
    if (cmd_pool) {
        c = (struct store_cmd *)cmd_pool;
        cmd_pool = cmd_pool->next;
        cmd_pool_len--;
    } else if (!(c = malloc(CMD_BLOCK))) {
        return NULL;
    }
    memset(c, 0, sizeof(*c));
    c->pooled = 1;
    return c;
}

void store_cmd_free(struct store_cmd *c)
{
    if (!c)
        return;
    /* A single call is one block (store_cmd_new); a batch owns nothing but
     * itself (its members are freed as they complete). */
    if (c->pooled && cmd_pool_len < CMD_POOL_MAX) {
        struct cmd_block *b = (struct cmd_block *)c;
        b->next = cmd_pool;
        cmd_pool = b;
        cmd_pool_len++;
        return;
    }
    free(c);
}

void store_cmd_pool_drain(void)
{
    while (cmd_pool) {
        struct cmd_block *b = cmd_pool;
        cmd_pool = b->next;
        free(b);
    }
    cmd_pool_len = 0;
}

/* The bytes of the arguments of argvlen[0..argc), each with its NUL. */
static size_t args_bytes(int argc, const size_t *argvlen)
{
    size_t bytes = 0;

    for (int i = 0; i < argc; i++)
        bytes += argvlen[i] + 1;
    return bytes;
}

/* The size of a block for a command of n arguments of bytes in all. */
static size_t block_size(int n, size_t bytes)
{
    return sizeof(struct store_cmd) + (size_t)n * (sizeof(char *) + sizeof(size_t)) + bytes;
}

/* Lay c's argv and argvlen out (n entries) right after it in its block: the
 * bytes of the arguments follow them, at the address returned. */
static char *lay_out(struct store_cmd *c, int n, store_cb *cb, void *arg)
{
    c->cb = cb;
    c->arg = arg;
    c->argc = n;
    c->argv = (char **)(c + 1);
    c->argvlen = (size_t *)(c->argv + n);
    return (char *)(c->argvlen + n);
}

/* Copy len bytes of s, then a NUL, to p as c's argument i; the bytes after. */
static char *put_arg(struct store_cmd *c, char *p, int i, const char *s, size_t len)
{
    c->argv[i] = p;
    c->argvlen[i] = len;
    memcpy(p, s, len);
    p[len] = '\0';
    return p + len + 1;
}

/* One block: the command, its argv and argvlen arrays, then the bytes of
 * every argument (each NUL-terminated), so a call costs one allocation. */
struct store_cmd *store_cmd_new(enum store_script script, const char *key, size_t keylen, int argc,
                                const char *const *argv, const size_t *argvlen, store_cb *cb,
                                void *arg)
{
    static const char one[] = "1";
    int n = argc + 4;
    size_t bytes = sizeof(one) + keylen + 1 + args_bytes(argc, argvlen);
    struct store_cmd *c = cmd_alloc(block_size(n, bytes));
    char *p;

    if (!c)
        return NULL;
    c->script = script;
    p = lay_out(c, n, cb, arg);
    /* the verb and the sha or function: store_cmd_format writes them */
    c->argv[0] = c->argv[1] = NULL;
    c->argvlen[0] = c->argvlen[1] = 0;
    p = put_arg(c, p, 2, one, sizeof(one) - 1);
    p = put_arg(c, p, 3, key, keylen);
    for (int i = 0; i < argc; i++)
        p = put_arg(c, p, 4 + i, argv[i], argvlen[i]);
    return c;
}

/* One block, from this thread's pool as a script call's: the command, its
 * request already written as RESP, then the routing key. Written here once,
 * not copied argument by argument and formatted again when sent: a new key's
 * plain SET (limiter_first.c) is one read per cold decision, and the copy,
 * the calloc and the second pass were a tenth of the agent's instructions
 * per cold decision. */
struct store_cmd *store_cmd_new_read(const char *key, size_t keylen, int argc,
                                     const char *const *argv, const size_t *argvlen, store_cb *cb,
                                     void *arg)
{
    struct store_cmd *c =
        cmd_alloc(sizeof(*c) + store_resp_command_bound(argc, argvlen) + keylen + 1);
    char *p;

    if (!c)
        return NULL;
    c->read = 1;
    c->script = -1;
    c->cb = cb;
    c->arg = arg;
    p = (char *)(c + 1);
    c->raw = p;
    c->rawlen = store_resp_put_command(p, argc, argv, argvlen);
    p += c->rawlen;
    memcpy(p, key, keylen);
    p[keylen] = '\0';
    c->rkey = p;
    c->rkeylen = keylen;
    return c;
}

const char *store_cmd_key(const struct store_cmd *c, size_t *len)
{
    if (c->batch) /* its first member's: they share a connection (and slot) */
        return store_cmd_key(c->members, len);
    if (c->read) {
        *len = c->rkeylen;
        return c->rkey;
    }
    *len = c->argvlen[3];
    return c->argv[3];
}

void store_cmd_fail(struct store_cmd *c, int status, const char *err)
{
    struct store_result res = {.status = status, .err = err};
    c->cb(c->arg, &res);
    store_cmd_free(c);
}

/* A batch that failed as a whole: so does every call in it. */
static void batch_failed(void *arg, const struct store_result *res)
{
    struct store_cmd *b = arg, *m, *next;

    for (m = b->members; m; m = next) {
        next = m->mnext;
        store_cmd_fail(m, res->status, res->err);
    }
    b->members = NULL;
}

/* A batch of the n calls of list (linked by mnext). Its request is written
 * from the members when sent (store_cmd_format). NULL when out of memory
 * (list untouched). */
struct store_cmd *store_batch_new(struct store_cmd *list, unsigned n)
{
    struct store_cmd *b = cmd_alloc(sizeof(*b));

    if (!b)
        return NULL;
    b->batch = 1;
    b->script = SCRIPT_BATCH;
    b->cb = batch_failed;
    b->arg = b;
    b->members = list;
    b->nmembers = n;
    return b;
}

/* The batch script reads each call as "script argc args...". */
_Static_assert(BATCH_OP_SCRIPT == 0 && BATCH_OP_ARGC == 1 && BATCH_OP_HEAD == 2,
               "store_cmd_format writes a call's head in this order");

/* Whether m has the script and ARGV of p, the call before it: then it goes
 * as "script =" (BATCH_OP_SAME), the batch script reusing p's ARGV. A batch
 * of one rule's cold decisions repeats the rule's numbers in every call, and
 * each argument costs Redis a string object and Lua a string and a table
 * slot: a repeated call costs Redis two arguments instead of five. */
static int same_args(const struct store_cmd *p, const struct store_cmd *m)
{
    if (!p || p->script != m->script || p->argc != m->argc)
        return 0;
    for (int i = 4; i < m->argc; i++)
        if (p->argvlen[i] != m->argvlen[i] || memcmp(p->argv[i], m->argv[i], m->argvlen[i]) != 0)
            return 0;
    return 1;
}

/* EVALSHA sha (or FCALL fn) n key... then per call "script argc args..." or
 * "script =" (lua/batch.sh). */
static void format_batch(const struct store_cmd *b, const struct store_call *call,
                         struct store_resp *w)
{
    const struct store_cmd *m, *p;
    size_t argc = 3 + b->nmembers;

    for (m = b->members, p = NULL; m; p = m, m = m->mnext)
        argc += BATCH_OP_HEAD + (same_args(p, m) ? 0 : (size_t)(m->argc - 4));
    store_resp_array(w, argc);
    store_resp_bulk(w, call->verb, strlen(call->verb));
    store_resp_bulk(w, call->id, strlen(call->id));
    store_resp_bulk_u64(w, b->nmembers);
    for (m = b->members; m; m = m->mnext) /* keys */
        store_resp_bulk(w, m->argv[3], m->argvlen[3]);
    for (m = b->members, p = NULL; m; p = m, m = m->mnext) { /* operations */
        store_resp_bulk_u64(w, (uint64_t)m->script);
        if (same_args(p, m)) {
            store_resp_bulk(w, BATCH_OP_SAME, sizeof(BATCH_OP_SAME) - 1);
            continue;
        }
        store_resp_bulk_u64(w, (uint64_t)(m->argc - 4));
        store_resp_bulks(w, m->argc - 4, m->argv + 4, m->argvlen + 4);
    }
}

int store_cmd_format(const struct store_cmd *c, const struct store_call *call, struct store_resp *w)
{
    store_resp_reset(w);
    if (c->read) {
        store_resp_raw(w, c->raw, c->rawlen);
    } else if (c->batch) {
        format_batch(c, call, w);
    } else {
        store_resp_array(w, (size_t)c->argc);
        store_resp_bulk(w, call->verb, strlen(call->verb));
        store_resp_bulk(w, call->id, strlen(call->id));
        for (int i = 2; i < c->argc; i++)
            store_resp_bulk(w, c->argv[i], c->argvlen[i]);
    }
    return store_resp_ok(w) ? 0 : -1;
}

/* A read's reply: an array's elements as text (integers printed into num),
 * an integer as v[0], nil as nothing. */
void store_cmd_read_reply(struct store_cmd *c, const struct redisReply *reply, uint64_t now)
{
    struct store_result res = {.status = STORE_OK, .latency_us = now - c->first_us};
    size_t n = reply->type == REDIS_REPLY_ARRAY ? reply->elements : 0;
    const char **str = n ? calloc(n, sizeof(*str)) : NULL;
    size_t *len = n ? calloc(n, sizeof(*len)) : NULL;
    char(*num)[24] = n ? calloc(n, sizeof(*num)) : NULL;

    if (n && (!str || !len || !num)) {
        res.status = STORE_ERR;
        res.err = "out of memory";
        n = 0;
    }
    if (n)
        store_reply_strings(reply, str, len, num);
    res.nstr = n;
    res.str = str;
    res.str_len = len;
    if (reply->type == REDIS_REPLY_INTEGER) {
        res.v[0] = reply->integer;
        res.n = 1;
    } else if (reply->type == REDIS_REPLY_STRING || reply->type == REDIS_REPLY_STATUS) {
        res.nstr = 1;
        res.str = (const char *const *)&reply->str;
        res.str_len = &reply->len;
    } else if (reply->type == REDIS_REPLY_ERROR) {
        res.status = STORE_ERR;
        res.err = reply->str;
        /* WRONGTYPE answered a SET NX GET of a key that is a hash (the first
         * SET before 0343eb4; limiter_first.c still reads it as "the key is
         * there"): an answer, not a failure */
        if (strncmp(reply->str, "WRONGTYPE", 9) != 0)
            METRIC_INC(redis_errors);
    }
    c->cb(c->arg, &res);
    free(str);
    free(len);
    free(num);
    store_cmd_free(c);
}

int64_t store_reply_time_ms(int script, const struct store_result *res)
{
    if (res->status != STORE_OK || res->n <= EXACT_R_TIME_MS)
        return 0;
    if (script != SCRIPT_TB_EXACT && script != SCRIPT_SW_EXACT && script != SCRIPT_CC_ACQUIRE)
        return 0;
    return res->v[EXACT_R_TIME_MS] > 0 ? res->v[EXACT_R_TIME_MS] : 0;
}

int64_t store_batch_reply(struct store_cmd *b, const struct redisReply *reply, uint64_t now,
                          const char **bad, int *bad_script)
{
    struct store_cmd *m, *next;
    size_t at = 0;
    int64_t time_ms = 0;

    for (m = b->members; m; m = next) {
        struct store_result res = {0};
        const char *why;
        next = m->mnext;
        store_reply_batch_next(reply, &at, &res);
        why = res.status != STORE_OK
                  ? res.err
                  : store_reply_check(m->script, &res, (size_t)res.n, m->argc - 4, m->argv + 4);
        if (why) {
            res.status = STORE_ERR;
            res.err = why;
            if (!*bad) {
                *bad = why;
                *bad_script = m->script;
            }
        }
        if (res.status != STORE_OK)
            METRIC_INC(redis_errors);
        res.latency_us = now - m->first_us;
        if (!time_ms && !why) /* (one TIME for the whole batch) */
            time_ms = store_reply_time_ms(m->script, &res);
        m->cb(m->arg, &res);
        store_cmd_free(m);
    }
    b->members = NULL;
    if (!*bad && at != reply->elements) {
        *bad = "more values than the batch's calls answer";
        *bad_script = SCRIPT_BATCH;
    }
    return time_ms;
}
