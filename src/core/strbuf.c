/* SPDX-License-Identifier: Apache-2.0 */
/* strbuf.c - a growing string (strbuf.h). */
#include "strbuf.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define STRBUF_FIRST 4096

/* Room for need more bytes and the NUL; 0, or -1 with b->failed set. */
static int reserve(struct strbuf *b, size_t need)
{
    if (b->failed)
        return -1;
    if (b->p && need < b->cap - b->len)
        return 0;
    size_t cap = b->cap ? b->cap : STRBUF_FIRST;
    while (cap - b->len <= need) {
        if (cap > ((size_t)-1) / 2) {
            b->failed = 1;
            return -1;
        }
        cap *= 2;
    }
    char *p = realloc(b->p, cap);
    if (!p) {
        b->failed = 1;
        return -1;
    }
    b->p = p;
    b->cap = cap;
    return 0;
}

void strbuf_printf(struct strbuf *b, const char *fmt, ...)
{
    va_list ap;

    for (int pass = 0; pass < 2; pass++) {
        if (b->failed)
            return;
        va_start(ap, fmt);
        int n = vsnprintf(b->p ? b->p + b->len : NULL, b->p ? b->cap - b->len : 0, fmt, ap);
        va_end(ap);
        if (n < 0) {
            b->failed = 1;
            return;
        }
        if (b->p && (size_t)n < b->cap - b->len) {
            b->len += (size_t)n;
            return;
        }
        if (reserve(b, (size_t)n) != 0)
            return;
    }
}

void strbuf_put(struct strbuf *b, const char *s, size_t len)
{
    if (reserve(b, len) != 0)
        return;
    memcpy(b->p + b->len, s, len);
    b->len += len;
    b->p[b->len] = '\0';
}

char *strbuf_finish(struct strbuf *b, size_t *len)
{
    if (b->failed || reserve(b, 0) != 0) {
        strbuf_free(b);
        return NULL;
    }
    /* nothing appended: the block reserve() just allocated holds no NUL */
    b->p[b->len] = '\0';
    char *p = b->p;
    if (len)
        *len = b->len;
    b->p = NULL;
    b->len = b->cap = 0;
    return p;
}

void strbuf_free(struct strbuf *b)
{
    free(b->p);
    b->p = NULL;
    b->len = b->cap = 0;
    b->failed = 0;
}
