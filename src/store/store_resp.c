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

/* prefix, n in decimal, CRLF: the header of an array or a bulk string. */
static void header(struct store_resp *w, char prefix, uint64_t n, size_t extra)
{
    char *p;

    if (reserve(w, 1 + UTIL_U64_DEC_MAX + 2 + extra) < 0)
        return;
    p = w->buf + w->len;
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
    w->len = (size_t)(p - w->buf);
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

void store_resp_bulk_u64(struct store_resp *w, uint64_t v)
{
    char digits[UTIL_U64_DEC_MAX];

    store_resp_bulk(w, digits, util_u64_dec(digits, v));
}

void store_resp_free(struct store_resp *w)
{
    free(w->buf);
    w->buf = NULL;
    w->len = w->cap = 0;
    w->oom = 0;
}
