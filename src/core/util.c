/* SPDX-License-Identifier: Apache-2.0 */
/* util.c - monotonic and wall time, hashing, URL query parameters. */
#include "util.h"

#include <string.h>
#include <time.h>

uint64_t util_now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

uint64_t util_wall_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

static int hex_digit(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

long util_query_param(const char *query, const char *name, char *out, size_t cap)
{
    size_t nlen = strlen(name);
    const char *p = query;

    while (p && *p) {
        const char *end = strchr(p, '&');
        size_t plen = end ? (size_t)(end - p) : strlen(p);
        if (plen >= nlen && strncmp(p, name, nlen) == 0 && (plen == nlen || p[nlen] == '=')) {
            size_t n = 0;
            for (size_t i = plen == nlen ? plen : nlen + 1; i < plen; i++) {
                char c = p[i];
                if (c == '%') {
                    int hi = i + 2 < plen ? hex_digit(p[i + 1]) : -1;
                    int lo = hi >= 0 ? hex_digit(p[i + 2]) : -1;
                    if (lo < 0)
                        return UTIL_QUERY_BAD;
                    c = (char)(hi * 16 + lo);
                    i += 2;
                } else if (c == '+') {
                    c = ' ';
                }
                if (n + 1 >= cap)
                    return UTIL_QUERY_BAD;
                out[n++] = c;
            }
            out[n] = '\0';
            return (long)n;
        }
        p = end ? end + 1 : NULL;
    }
    return UTIL_QUERY_ABSENT;
}

uint64_t util_hash(uint64_t h, const void *data, size_t len)
{
    const unsigned char *p = data;
    for (size_t i = 0; i < len; i++) {
        h ^= p[i];
        h *= 0x100000001b3ULL;
    }
    return h;
}

uint64_t util_hash_words(uint64_t h, const void *data, size_t len)
{
    const unsigned char *p = data;
    uint64_t w;
    int whole_word = len >= 8;

    h ^= (uint64_t)len * 0x9e3779b97f4a7c15ULL; /* ("ab", "c") and ("a", "bc") differ */
    for (; len >= 8; p += 8, len -= 8) {
        memcpy(&w, p, 8);
        h = (h ^ w) * 0xbf58476d1ce4e5b9ULL;
        h ^= h >> 31;
    }
    if (len) { /* the last 1 to 7 bytes (memcpy of a variable size is a call) */
        w = 0;
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
        /* The same w as the byte loop below, in a few loads (every key and
         * rule name is hashed per decision): the word that ends with them,
         * shifted, when the data had a whole word; else 4, 2 and 1 bytes. */
        if (whole_word) {
            memcpy(&w, p + len - 8, 8);
            w >>= 8 * (8 - len);
        } else {
            size_t i = 0;
            if (len & 4) {
                uint32_t v4;
                memcpy(&v4, p, 4);
                w = v4;
                i = 4;
            }
            if (len & 2) {
                uint16_t v2;
                memcpy(&v2, p + i, 2);
                w |= (uint64_t)v2 << (8 * i);
                i += 2;
            }
            if (len & 1)
                w |= (uint64_t)p[i] << (8 * i);
        }
#else
        (void)whole_word;
        for (size_t i = 0; i < len; i++)
            w |= (uint64_t)p[i] << (8 * i);
#endif
        h = (h ^ w) * 0x94d049bb133111ebULL;
        h ^= h >> 31;
    }
    return h;
}

uint64_t util_hash_mix(uint64_t h)
{
    /* MurmurHash3's fmix64. */
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdULL;
    h ^= h >> 33;
    h *= 0xc4ceb9fe1a85ec53ULL;
    h ^= h >> 33;
    return h;
}

uint16_t util_crc16(const void *data, size_t len)
{
    const unsigned char *p = data;
    uint16_t crc = 0;

    /* Bit by bit: keys are short and a table would not buy much. */
    while (len--) {
        crc ^= (uint16_t)(*p++ << 8);
        for (int i = 0; i < 8; i++)
            crc = (crc & 0x8000) ? (uint16_t)((crc << 1) ^ 0x1021) : (uint16_t)(crc << 1);
    }
    return crc;
}

unsigned util_redis_slot(const char *key, size_t len)
{
    const char *open = memchr(key, '{', len);

    if (open) {
        size_t rest = len - (size_t)(open + 1 - key);
        const char *close = memchr(open + 1, '}', rest);
        if (close && close > open + 1) { /* "{}" hashes the whole key */
            key = open + 1;
            len = (size_t)(close - key);
        }
    }
    return util_crc16(key, len) & 16383;
}

size_t util_slot_fence(const char *key, size_t len)
{
    return len && memchr(key, '{', len) ? sizeof(UTIL_SLOT_FENCE) - 1 : 0;
}

static const char digit_pairs[201] = "00010203040506070809101112131415161718192021222324"
                                     "25262728293031323334353637383940414243444546474849"
                                     "50515253545556575859606162636465666768697071727374"
                                     "75767778798081828384858687888990919293949596979899";

/* 10^0 .. 10^19: a number has n digits when it is below pow10[n] */
static const uint64_t pow10[UTIL_U64_DEC_MAX] = {1ULL,
                                                 10ULL,
                                                 100ULL,
                                                 1000ULL,
                                                 10000ULL,
                                                 100000ULL,
                                                 1000000ULL,
                                                 10000000ULL,
                                                 100000000ULL,
                                                 1000000000ULL,
                                                 10000000000ULL,
                                                 100000000000ULL,
                                                 1000000000000ULL,
                                                 10000000000000ULL,
                                                 100000000000000ULL,
                                                 1000000000000000ULL,
                                                 10000000000000000ULL,
                                                 100000000000000000ULL,
                                                 1000000000000000000ULL,
                                                 10000000000000000000ULL};

size_t util_u64_dec(char *buf, uint64_t v)
{
    /* digits: from the bit length (log10(2) ~ 1233 / 4096), then one check */
    size_t n = ((size_t)(64 - __builtin_clzll(v | 1)) * 1233) >> 12;

    n += n < UTIL_U64_DEC_MAX && v >= pow10[n];
    n += n == 0;
    /* two digits per division, from the last */
    char *p = buf + n;
    while (v >= 100) {
        unsigned d = (unsigned)(v % 100) * 2;
        v /= 100;
        *--p = digit_pairs[d + 1];
        *--p = digit_pairs[d];
    }
    if (v >= 10) {
        *--p = digit_pairs[v * 2 + 1];
        *--p = digit_pairs[v * 2];
    } else {
        *--p = (char)('0' + v);
    }
    return n;
}

size_t util_ipv4_text(char *buf, const uint8_t ip[4])
{
    char *p = buf;

    for (int i = 0; i < 4; i++) {
        unsigned b = ip[i];
        if (i)
            *p++ = '.';
        if (b >= 100)
            *p++ = (char)('0' + b / 100);
        if (b >= 10)
            *p++ = (char)('0' + b / 10 % 10);
        *p++ = (char)('0' + b % 10);
    }
    *p = '\0';
    return (size_t)(p - buf);
}

void util_base64(const void *in, size_t n, char *out)
{
    static const char tab[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    const uint8_t *p = in;
    size_t o = 0;

    for (size_t i = 0; i < n; i += 3) {
        uint32_t v = (uint32_t)p[i] << 16;
        if (i + 1 < n)
            v |= (uint32_t)p[i + 1] << 8;
        if (i + 2 < n)
            v |= p[i + 2];
        out[o++] = tab[(v >> 18) & 63];
        out[o++] = tab[(v >> 12) & 63];
        out[o++] = i + 1 < n ? tab[(v >> 6) & 63] : '=';
        out[o++] = i + 2 < n ? tab[v & 63] : '=';
    }
    out[o] = '\0';
}
