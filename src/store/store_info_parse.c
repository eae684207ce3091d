/* SPDX-License-Identifier: Apache-2.0 */
/* store_info_parse.c - the INFO fields about eviction (store_info_parse.h); pure. */
#include "store_info_parse.h"

#include <stdlib.h>
#include <string.h>

/* The value of line [p, end) when it is "name:value", else NULL. */
static const char *field(const char *p, const char *end, const char *name, size_t *vlen)
{
    size_t n = strlen(name);

    if ((size_t)(end - p) <= n || memcmp(p, name, n) != 0 || p[n] != ':')
        return NULL;
    *vlen = (size_t)(end - p) - n - 1;
    return p + n + 1;
}

static int to_u64(const char *v, size_t len, uint64_t *out)
{
    uint64_t n = 0;

    if (len == 0 || len > 19)
        return -1;
    for (size_t i = 0; i < len; i++) {
        if (v[i] < '0' || v[i] > '9')
            return -1;
        n = n * 10 + (uint64_t)(v[i] - '0');
    }
    *out = n;
    return 0;
}

void store_info_parse(const char *text, size_t len, struct store_info_mem *out)
{
    const char *p = text, *end = text + len;

    memset(out, 0, sizeof(*out));
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        const char *eol = nl ? nl : end;
        const char *v;
        size_t vlen;

        if (eol > p && eol[-1] == '\r')
            eol--;
        if ((v = field(p, eol, "maxmemory", &vlen)))
            out->has_maxmemory = to_u64(v, vlen, &out->maxmemory) == 0;
        else if ((v = field(p, eol, "evicted_keys", &vlen)))
            out->has_evicted = to_u64(v, vlen, &out->evicted_keys) == 0;
        else if ((v = field(p, eol, "maxmemory_policy", &vlen)) && vlen < sizeof(out->policy)) {
            memcpy(out->policy, v, vlen);
            out->policy[vlen] = '\0';
            out->has_policy = 1;
        }
        p = nl ? nl + 1 : end;
    }
}

int store_info_can_evict(const struct store_info_mem *m)
{
    if (!m->has_maxmemory || m->maxmemory == 0 || !m->has_policy)
        return 0;
    return strcmp(m->policy, "noeviction") != 0;
}
