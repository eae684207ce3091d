/* SPDX-License-Identifier: Apache-2.0 */
/* hostname.c - "name[:port]" taken apart and checked (hostname.h). */
#include "core/hostname.h"

#include <ctype.h>
#include <string.h>

/* A name or v4 address: what DNS and the URL syntax's reg-name allow that
 * a Host may hold; anything else (spaces, '@', '/', '%') is not a host. */
static int name_char(int c)
{
    return isalnum(c) || c == '-' || c == '.' || c == '_';
}

int hostname_split(const char *v, size_t len, const char **name, size_t *nlen, unsigned *port)
{
    const char *end, *p;
    size_t n;

    *port = 0;
    if (!v || len == 0)
        return -1;
    end = v + len;
    if (v[0] == '[') {
        const char *close = memchr(v, ']', len);
        if (!close || close == v + 1)
            return -1;
        for (p = v + 1; p < close; p++)
            if (!isxdigit((unsigned char)*p) && *p != ':' && *p != '.')
                return -1;
        *name = v + 1;
        *nlen = (size_t)(close - v - 1);
        p = close + 1;
        if (p < end && *p != ':')
            return -1;
    } else {
        for (p = v; p < end && *p != ':'; p++)
            if (!name_char((unsigned char)*p))
                return -1;
        if (p == v)
            return -1;
        *name = v;
        *nlen = (size_t)(p - v);
    }
    if (p == end)
        return 0;
    p++; /* the ':' */
    n = (size_t)(end - p);
    if (n == 0 || n > 5)
        return -1;
    unsigned num = 0;
    for (; p < end; p++) {
        if (!isdigit((unsigned char)*p))
            return -1;
        num = num * 10 + (unsigned)(*p - '0');
    }
    if (num == 0 || num > 65535)
        return -1;
    *port = num;
    return 0;
}

int hostname_item(const char *item, char *out, size_t cap)
{
    size_t len = strlen(item), nlen;
    const char *name;
    unsigned port;

    if (len + 1 > cap || hostname_split(item, len, &name, &nlen, &port) == -1)
        return -1;
    for (size_t i = 0; i < len; i++)
        out[i] = (char)tolower((unsigned char)item[i]);
    out[len] = '\0';
    return 0;
}
