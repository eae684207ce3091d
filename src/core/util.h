/* SPDX-License-Identifier: Apache-2.0 */
/* util.h - small helpers shared by every module: monotonic time, hashing,
 * the choice of stripe and chain in the striped hash tables, URL query
 * parameters. */
#ifndef UTIL_H
#define UTIL_H

#include <stddef.h>
#include <stdint.h>

/* Microseconds on CLOCK_MONOTONIC. */
uint64_t util_now_us(void);
/* The wall clock (CLOCK_REALTIME), microseconds since the Unix epoch: what
 * fixed windows, aligned to it, are counted in. */
uint64_t util_wall_us(void);

/* 64-bit FNV-1a over len bytes, continuing from h (start with UTIL_HASH_INIT). */
#define UTIL_HASH_INIT 0xcbf29ce484222325ULL
uint64_t util_hash(uint64_t h, const void *data, size_t len);

/* A finalizer that spreads every bit of h over all 64 (a bijection): the low
 * bits of FNV-1a depend only on the low bits of each byte, and its high bits
 * are poorly mixed. Hash tables index with util_hash_mix(util_hash_words(...)). */
uint64_t util_hash_mix(uint64_t h);
/* A hash for the agent's own tables, chained like util_hash: eight bytes per
 * step, where FNV-1a takes one (a Redis key of 30 bytes: 6 ns against 18).
 * Its values never leave the process; util_hash's do (hashed client keys,
 * the config's digest), so that one stays as it is. Index with
 * util_hash_mix(util_hash_words(...)). */
uint64_t util_hash_words(uint64_t h, const void *data, size_t len);

/* The striped hash tables (buckets, leases) split a mixed key hash in two:
 * its high 32 bits choose the stripe (the lock), its low bits the chain inside
 * that stripe's table, so that the keys of one stripe still spread over all
 * its chains. nstripes and nchains are powers of two; nstripes <= 2^32. */
static inline unsigned util_stripe(uint64_t mixed, unsigned nstripes)
{
    return (unsigned)(mixed >> 32) & (nstripes - 1);
}

static inline size_t util_chain(uint64_t mixed, size_t nchains)
{
    return (size_t)(mixed & (nchains - 1));
}

/* CRC16/XMODEM (polynomial 0x1021, initial 0, no reflection): the Redis
 * Cluster key hash. "123456789" -> 0x31c3. */
uint16_t util_crc16(const void *data, size_t len);

/* The Redis Cluster slot of a key (0..16383): the CRC16 of the whole key, or
 * of the part between the first '{' and the next '}' when that is not empty. */
unsigned util_redis_slot(const char *key, size_t len);

/* The value of parameter name in a URL query string ("rule=a&key=x%20y"),
 * percent-decoded ('+' is a space), NUL-terminated into out (cap >= 1
 * bytes; the value may hold NUL bytes: its length says where it ends). The
 * first occurrence counts; "name" alone is an empty value. Returns its
 * length, UTIL_QUERY_ABSENT, or UTIL_QUERY_BAD for a broken %-escape or a
 * value longer than cap - 1. */
#define UTIL_QUERY_ABSENT (-1)
#define UTIL_QUERY_BAD (-2)
long util_query_param(const char *query, const char *name, char *out, size_t cap);

/* Redis Cluster hashes only the part of a key between the first '{' and the
 * next '}' (a hashtag) when it is not empty. Redis keys are PREFIX + "t2:" +
 * RULE + ":" + CLIENT KEY, so a client key holding "{x}" would choose its
 * own slot and could pile keys onto one master. A client key holding '{' is
 * therefore written after UTIL_SLOT_FENCE, an empty hashtag: Redis (and
 * util_redis_slot) then hash the whole key. Other keys are written as they
 * are, so their Redis names do not change; fenced keys are the only ones to
 * start with '{', so two client keys never share a Redis key. Returns the
 * bytes to write before key: 0, or 2 for the fence. */
#define UTIL_SLOT_FENCE "{}"
size_t util_slot_fence(const char *key, size_t len);

/* v in decimal into buf, which holds UTIL_U64_DEC_MAX bytes or more (no NUL
 * written); returns the length. For the request path, where the
 * printf family's parsing and locale work cost more than the digits. */
#define UTIL_U64_DEC_MAX 20
size_t util_u64_dec(char *buf, uint64_t v);

/* The dotted quad of an IPv4 address (4 bytes, network order) into buf,
 * which holds UTIL_IPV4_TEXT_MAX bytes or more, NUL-terminated as
 * inet_ntop() writes it; returns the length without the NUL. */
#define UTIL_IPV4_TEXT_MAX 16
size_t util_ipv4_text(char *buf, const uint8_t ip[4]);

/* Ceiling division of microseconds into whole seconds (without adding
 * first: that would wrap for waits near UINT64_MAX). */
/* Standard base64 (RFC 4648, with padding) of n bytes into out, which has
 * room for 4 * ((n + 2) / 3) + 1 bytes; NUL-terminated. */
void util_base64(const void *in, size_t n, char *out);

static inline uint64_t util_us_to_s_ceil(uint64_t us)
{
    return us / 1000000 + (us % 1000000 != 0);
}

#endif
