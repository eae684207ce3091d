/* SPDX-License-Identifier: Apache-2.0 */
/* store_resp.c - RESP requests into one reusable buffer (store_resp.h). */
#include "store_resp.h"

#include <stdlib.h>
#include <string.h>

#include "core/util.h"

#define RESP_MIN_CAP 4096

/* Room for extra more bytes; 0, or -1 (w->oom set) when memory runs out. */
static int reserve(struct store_resp *w, size_t extra)
{
    size_t cap = w->cap ? w->cap : RESP_MIN_CAP;
    char *p;

    if (w->oom)
        return -1;
    if (w->len + extra <= w->cap)
        return 0;
    while (cap < w->len + extra)
        cap *= 2;
    p = realloc(w->buf, cap);
    if (!p) {
        w->oom = 1;
        return -1;
    }
    w->buf = p;
    w->cap = cap;
    return 0;
}

void store_resp_reset(struct store_resp *w)
{
    w->len = 0;
    w->oom = 0;
}

/* prefix, n in decimal, CRLF at p (room for 1 + UTIL_U64_DEC_MAX + 2
 * bytes): the header of an array or a bulk string; the byte after it. */
static inline char *put_header(char *p, char prefix, uint64_t n)
{
    *p++ = prefix;
    /* Most headers are of an argument under 100 bytes: written directly
     * rather than through util_u64_dec (a batch has ~10 per decision). */
    if (n < 10) {
        *p++ = (char)('0' + n);
    } else if (n < 100) {
        *p++ = (char)('0' + n / 10);
        *p++ = (char)('0' + n % 10);
    } else {
        p += util_u64_dec(p, n);
    }
    *p++ = '\r';
    *p++ = '\n';
    return p;
}

/* The header of an array or a bulk string, and room for extra more bytes. */
static void header(struct store_resp *w, char prefix, uint64_t n, size_t extra)
{
    if (reserve(w, 1 + UTIL_U64_DEC_MAX + 2 + extra) < 0)
        return;
    w->len = (size_t)(put_header(w->buf + w->len, prefix, n) - w->buf);
}

void store_resp_array(struct store_resp *w, size_t n)
{
    header(w, '*', n, 0);
}

void store_resp_bulk(struct store_resp *w, const char *s, size_t len)
{
    header(w, '$', len, len + 2); /* reserves the body too */
    if (w->oom)
        return;
    memcpy(w->buf + w->len, s, len);
    w->buf[w->len + len] = '\r';
    w->buf[w->len + len + 1] = '\n';
    w->len += len + 2;
}

void store_resp_bulks(struct store_resp *w, int n, char *const *argv, const size_t *argvlen)
{
    size_t bytes = 0;
    char *p;

    /* One reserve for them all: a batch writes a few per decision. */
    for (int i = 0; i < n; i++)
        bytes += 1 + UTIL_U64_DEC_MAX + 2 + argvlen[i] + 2;
    if (reserve(w, bytes) < 0)
        return;
    p = w->buf + w->len;
    for (int i = 0; i < n; i++) {
        p = put_header(p, '$', argvlen[i]);
        memcpy(p, argv[i], argvlen[i]);
        p += argvlen[i];
        *p++ = '\r';
        *p++ = '\n';
    }
    w->len = (size_t)(p - w->buf);
}

void store_resp_bulk_u64(struct store_resp *w, uint64_t v)
{
    char digits[UTIL_U64_DEC_MAX];

    if (v < 10) { /* a batch's script numbers and argument counts: two per call */
        if (reserve(w, 7) < 0)
            return;
        memcpy(w->buf + w->len, "$1\r\n0\r\n", 7);
        w->buf[w->len + 4] = (char)('0' + v);
        w->len += 7;
        return;
    }
    store_resp_bulk(w, digits, util_u64_dec(digits, v));
}

void store_resp_raw(struct store_resp *w, const char *p, size_t len)
{
    if (reserve(w, len) < 0)
        return;
    memcpy(w->buf + w->len, p, len);
    w->len += len;
}

size_t store_resp_command_bound(int argc, const size_t *argvlen)
{
    size_t bytes = 1 + UTIL_U64_DEC_MAX + 2;

    for (int i = 0; i < argc; i++)
        bytes += 1 + UTIL_U64_DEC_MAX + 2 + argvlen[i] + 2;
    return bytes;
}

size_t store_resp_put_command(char *p, int argc, const char *const *argv, const size_t *argvlen)
{
    char *start = p;

    p = put_header(p, '*', (uint64_t)argc);
    for (int i = 0; i < argc; i++) {
        p = put_header(p, '$', argvlen[i]);
        memcpy(p, argv[i], argvlen[i]);
        p += argvlen[i];
        *p++ = '\r';
        *p++ = '\n';
    }
    return (size_t)(p - start);
}

void store_resp_free(struct store_resp *w)
{
    free(w->buf);
    w->buf = NULL;
    w->len = w->cap = 0;
    w->oom = 0;
}
