/* SPDX-License-Identifier: Apache-2.0 */
/* rules_key.c - client keys, the keys of an evaluation and a value's text: what both rule
 * matching (rules.c) and concurrency slots (rules_slot.c) build keys with.
 * The stored form of a key (hashed when too long) is decided here. */
#include "rules_key.h"

#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/sha256.h"
#include "core/util.h"

int rules_value_text(const struct spop_data *d, char *buf, size_t cap, const char **out)
{
    int n;

    *out = buf;
    switch (d->type) {
    case SPOP_DATA_STR:
    case SPOP_DATA_BIN:
        *out = d->u.buf.ptr;
        return (int)d->u.buf.len;
    case SPOP_DATA_BOOL:
        n = snprintf(buf, cap, "%s", d->u.sint ? "true" : "false");
        break;
    case SPOP_DATA_INT32:
    case SPOP_DATA_INT64:
        n = snprintf(buf, cap, "%" PRId64, d->u.sint);
        break;
    case SPOP_DATA_UINT32:
    case SPOP_DATA_UINT64:
        n = snprintf(buf, cap, "%" PRIu64, d->u.uint);
        break;
    case SPOP_DATA_IPV4: /* not inet_ntop: it formats with sprintf */
        if (cap < UTIL_IPV4_TEXT_MAX)
            return -1;
        n = (int)util_ipv4_text(buf, d->u.ip);
        break;
    case SPOP_DATA_IPV6: {
        static const uint8_t v4mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
        /* One client, one key: a v4-mapped address is the v4 address. */
        if (memcmp(d->u.ip, v4mapped, 12) == 0) {
            if (cap < UTIL_IPV4_TEXT_MAX)
                return -1;
            n = (int)util_ipv4_text(buf, d->u.ip + 12);
        } else if (inet_ntop(AF_INET6, d->u.ip, buf, (socklen_t)cap)) {
            n = (int)strlen(buf);
        } else {
            return -1;
        }
        break;
    }
    default: /* NULL: the sample could not be fetched */
        return -1;
    }
    return n < 0 || (size_t)n >= cap ? -1 : n;
}

int rules_keys_grow(struct rule_eval *ev, size_t extra)
{
    size_t need = ev->keys_len + extra;
    if (need <= ev->keys_cap)
        return 0;
    size_t cap = ev->keys_cap ? ev->keys_cap : 1024;
    while (cap < need)
        cap *= 2;
    char *p = realloc(ev->keys, cap);
    if (!p)
        return -ENOMEM;
    ev->keys = p;
    ev->keys_cap = cap;
    return 0;
}

int rules_eval_keys_append(struct rule_eval *ev, const char *s, size_t len, size_t *off)
{
    if (rules_keys_reserve(ev, len + 1) < 0)
        return -ENOMEM;
    *off = ev->keys_len;
    memcpy(ev->keys + ev->keys_len, s, len);
    ev->keys[ev->keys_len + len] = '\0';
    ev->keys_len += len + 1;
    return 0;
}

/* The stored form of a client key that is too long, or that starts with
 * HASHED_KEY_MARK: the mark and the first 128 bits of the SHA-256 of the
 * key (a, then b) in hex, NUL-terminated in out (RULES_HASHED_KEY_LEN + 1
 * bytes). Every stored key that starts with the mark is such a hash, so no
 * client key can name another client's hashed bucket, and SHA-256 keeps
 * anyone from crafting two keys with one hash. */
void rules_hash_key(char *out, const void *a, size_t alen, const void *b, size_t blen)
{
    static const char hex[] = "0123456789abcdef";
    uint8_t d[SHA256_LEN];
    struct sha256 s;

    sha256_init(&s);
    sha256_update(&s, a, alen);
    sha256_update(&s, b, blen);
    sha256_final(&s, d);
    out[0] = HASHED_KEY_MARK;
    for (int i = 0; i < (RULES_HASHED_KEY_LEN - 1) / 2; i++) {
        out[1 + 2 * i] = hex[d[i] >> 4];
        out[2 + 2 * i] = hex[d[i] & 15];
    }
    out[RULES_HASHED_KEY_LEN] = '\0';
}

int rules_client_key(const char *key, size_t len, const struct bucket_params *limits,
                     size_t max_key, char *out, size_t cap)
{
    char suffix[80];
    size_t slen = 0;

    if (limits) {
        int n = snprintf(suffix, sizeof(suffix), "%c%" PRIu64 "/%" PRIu64 "ms/%" PRIu64,
                         RULES_LIMITS_SEP, limits->limit, limits->period_us / 1000, limits->burst);
        slen = n > 0 ? (size_t)n : 0;
    }
    if (len + slen > max_key || (len + slen > 0 && (len ? key[0] : suffix[0]) == HASHED_KEY_MARK)) {
        /* As finish_key in rules.c (hashing key then suffix hashes their concatenation) */
        if (cap < RULES_HASHED_KEY_LEN + 1)
            return -1;
        rules_hash_key(out, key, len, suffix, slen);
        return RULES_HASHED_KEY_LEN;
    }
    if (len + slen + 1 > cap)
        return -1;
    memcpy(out, key, len);
    memcpy(out + len, suffix, slen);
    out[len + slen] = '\0';
    return (int)(len + slen);
}
