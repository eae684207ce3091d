/* SPDX-License-Identifier: Apache-2.0 */
/* store_reply.c - what a script's reply, or a redirect, says. */
#include "store_reply.h"

#include <errno.h>
#include <hiredis/hiredis.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "script.h"

/* An integer of a script reply (Lua numbers come back as integers; a string
 * is parsed, whole: "nan", "inf", "1.5", "" or a number past 64 bits is no
 * integer). -1 when e is neither. */
static int reply_int(const redisReply *e, int64_t *v)
{
    char *end;

    if (e->type == REDIS_REPLY_INTEGER) {
        *v = e->integer;
        return 0;
    }
    if (e->type != REDIS_REPLY_STRING || e->len == 0 || e->len > 20 ||
        !(e->str[0] == '-' || (e->str[0] >= '0' && e->str[0] <= '9')))
        return -1;
    errno = 0;
    *v = strtoll(e->str, &end, 10);
    if (errno || end != e->str + e->len)
        return -1;
    return 0;
}

void store_reply_values(const redisReply *reply, struct store_result *res)
{
    res->status = STORE_OK;
    for (size_t i = 0; i < reply->elements && i < STORE_MAX_VALUES; i++) {
        if (reply_int(reply->element[i], &res->v[i]) < 0) {
            res->status = STORE_ERR;
            res->err = "an element that is no integer";
        }
        res->n = (int)i + 1;
    }
}

void store_reply_batch_next(const redisReply *reply, size_t *at, struct store_result *res)
{
    int64_t n, x;

    res->status = STORE_ERR;
    res->err = "short batch reply";
    res->n = 0;
    if (*at >= reply->elements || reply_int(reply->element[*at], &n) < 0 || n < 0 ||
        (uint64_t)n >= reply->elements - *at) {
        *at = reply->elements; /* malformed: fail the rest */
        return;
    }
    res->status = STORE_OK;
    res->err = NULL;
    if (n > STORE_MAX_VALUES) {
        res->status = STORE_ERR;
        res->err = "more values than any script answers";
    }
    for (int64_t i = 1; i <= n; i++) {
        if (reply_int(reply->element[*at + (size_t)i], &x) < 0) {
            res->status = STORE_ERR;
            res->err = "an element that is no integer";
        } else if (res->n < STORE_MAX_VALUES) {
            res->v[res->n++] = x;
        }
    }
    *at += 1 + (size_t)n;
}

/* Milliseconds from Redis as microseconds: negative reads as 0, and a value
 * past BUCKET_MAX_PERIOD_US (285 years) as that, so that it can be added to
 * a clock reading. */
static uint64_t ms_to_us(int64_t ms)
{
    if (ms <= 0)
        return 0;
    if ((uint64_t)ms > BUCKET_MAX_PERIOD_US / 1000)
        return BUCKET_MAX_PERIOD_US;
    return (uint64_t)ms * 1000;
}

int store_reply_exact(const int64_t *v, int n, struct bucket_result *out)
{
    if (n < EXACT_R_COUNT)
        return -1;
    out->allowed = v[EXACT_R_ALLOWED] == 1;
    out->remaining = v[EXACT_R_REMAINING] > 0 ? (uint64_t)v[EXACT_R_REMAINING] : 0;
    out->retry_us = 0;
    if (!out->allowed) {
        out->retry_us = ms_to_us(v[EXACT_R_RETRY_MS]);
        if (out->retry_us == 0)
            out->retry_us = 1000;
    }
    out->reset_us = ms_to_us(v[EXACT_R_RESET_MS]);
    return 0;
}

int store_reply_refund(const int64_t *v, int n, uint64_t *given, uint64_t *remaining)
{
    if (n < REFUND_R_COUNT)
        return -1;
    *given = v[REFUND_R_GIVEN] > 0 ? (uint64_t)v[REFUND_R_GIVEN] : 0;
    *remaining = v[REFUND_R_REMAINING] > 0 ? (uint64_t)v[REFUND_R_REMAINING] : 0;
    return 0;
}

int store_reply_cc(const int64_t *v, int n, struct bucket_result *out, uint64_t *expired)
{
    if (n < CC_R_COUNT || store_reply_exact(v, n, out) < 0)
        return -1;
    out->reset_us = 0; /* a slot comes back with its release, not with time */
    if (out->allowed)
        out->retry_us = 0;
    *expired = v[CC_R_EXPIRED] > 0 ? (uint64_t)v[CC_R_EXPIRED] : 0;
    return 0;
}

int store_reply_cc_release(const int64_t *v, int n)
{
    if (n < CC_RELEASE_R_COUNT)
        return -1;
    return v[CC_RELEASE_R_RELEASED] == 1;
}

int store_reply_redirect(const char *err, const char *self, int *ask, int *slot, char *host,
                         size_t hostcap, int *port)
{
    const char *p, *colon;
    char *end;
    long v;

    if (strncmp(err, "MOVED ", 6) == 0) {
        *ask = 0;
        p = err + 6;
    } else if (strncmp(err, "ASK ", 4) == 0) {
        *ask = 1;
        p = err + 4;
    } else {
        return -1;
    }
    v = strtol(p, &end, 10);
    if (end == p || *end != ' ' || v < 0 || v > 16383)
        return -1;
    *slot = (int)v;
    p = end + 1;
    colon = strrchr(p, ':');
    if (!colon || (size_t)(colon - p) >= hostcap)
        return -1;
    v = strtol(colon + 1, &end, 10);
    if (end == colon + 1 || *end || v <= 0 || v > 65535)
        return -1;
    *port = (int)v;
    if (colon == p) {
        if (!self || strlen(self) >= hostcap)
            return -1;
        strcpy(host, self);
    } else if (*p == '[' && colon[-1] == ']') { /* [v6]:port */
        memcpy(host, p + 1, (size_t)(colon - p - 2));
        host[colon - p - 2] = '\0';
    } else {
        memcpy(host, p, (size_t)(colon - p));
        host[colon - p] = '\0';
    }
    return 0;
}

void store_reply_strings(const struct redisReply *reply, const char **str, size_t *len,
                         char (*num)[24])
{
    for (size_t i = 0; i < reply->elements; i++) {
        const redisReply *e = reply->element[i];
        if (e->type == REDIS_REPLY_STRING || e->type == REDIS_REPLY_STATUS) {
            str[i] = e->str;
            len[i] = e->len;
        } else if (e->type == REDIS_REPLY_INTEGER) {
            len[i] = (size_t)snprintf(num[i], sizeof(num[i]), "%lld", e->integer);
            str[i] = num[i];
        } else {
            str[i] = "";
            len[i] = 0;
        }
    }
}
