/* SPDX-License-Identifier: Apache-2.0 */
/* test_util.c - CRC16 and Redis Cluster key slots against published values
 * (the cluster spec's check value, and slots a real Redis reports); how the
 * striped tables split a key hash. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <arpa/inet.h>
#include <inttypes.h>
#include <sys/socket.h>

#include "check_util.h"
#include "core/sha256.h"
#include "core/util.h"
#include "store/store_info.h"

struct slot_case {
    const char *key;
    unsigned slot;
};

/* Every expected slot is what a real cluster node answered, never a value
 * computed with the code under test: `redis-cli -p PORT CLUSTER KEYSLOT KEY`
 * against redis-server 7.0.15 (Debian 12) started with --cluster-enabled yes.
 * The hashtag cases are the examples of the Redis Cluster specification
 * ("Hash tags"). */
static const struct slot_case slots[] = {
    {"foo", 12182},
    {"bar", 5061},
    {"a", 15495},
    {"", 0},
    {"123456789", 12739},           /* CRC16 0x31C3 & 16383 */
    {"{foo}.bar", 12182},           /* hashtag: "foo" */
    {"x{foo}y{bar}", 12182},        /* the first {...} counts */
    {"{user1000}.following", 3443}, /* the spec's example pair: one slot */
    {"{user1000}.followers", 3443},
    {"foo{bar}{zap}", 5061}, /* spec: "bar" is hashed */
    {"foo{{bar}}zap", 4015}, /* spec: "{bar" is hashed */
    {"{bar", 4015},          /* ... the same slot as the key "{bar" */
    {"{}foo", 9500},         /* empty tag: the whole key */
    {"foo{}{bar}", 8363},    /* spec: empty first tag, the whole key */
    {"foo{", 7673},          /* no closing brace: the whole key */
    /* from CLUSTER KEYSLOT of redis-server 7.0 in cluster mode, not from
     * the code under test */
    {"x", 16287},
    {"rl:tb:api:{x}1", 16287}, /* a client's hashtag chooses the slot... */
    {"rl:tb:api:{x}2", 16287},
    {"rl:tb:api:{}{x}1", 13944}, /* ...unless fenced: the whole key counts */
    {"rl:tb:api:{}{x}2", 1563},
    {"rl:tb:api:{}{}", 12656},
    {"rl:sw:login:{}{user}", 3949},
    {"{}{a}b", 14354},
};

/* SHA-256: the FIPS 180-4 examples, a million 'a' fed in odd-sized pieces,
 * and the lengths around the padding's block boundary (55/56, 63/64/65,
 * 119/120 bytes of 0, 1, 2, ...), against sha256sum/hashlib. */
static void hex32(const uint8_t d[SHA256_LEN], char out[2 * SHA256_LEN + 1])
{
    for (int i = 0; i < SHA256_LEN; i++)
        snprintf(out + 2 * i, 3, "%02x", d[i]);
}

START_TEST(sha256_vectors)
{
    static const struct {
        const char *in, *want;
    } fips[] = {
        {"", "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"},
        {"abc", "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"},
        {"abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq",
         "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"},
    };
    static const struct {
        size_t n;
        const char *want;
    } edges[] = {
        {55, "463eb28e72f82e0a96c0a4cc53690c571281131f672aa229e0d45ae59b598b59"},
        {56, "da2ae4d6b36748f2a318f23e7ab1dfdf45acdc9d049bd80e59de82a60895f562"},
        {63, "29af2686fd53374a36b0846694cc342177e428d1647515f078784d69cdb9e488"},
        {64, "fdeab9acf3710362bd2658cdc9a29e8f9c757fcf9811603a8c447cd1d9151108"},
        {65, "4bfd2c8b6f1eec7a2afeb48b934ee4b2694182027e6d0fc075074f2fabb31781"},
        {119, "da18797ed7c3a777f0847f429724a2d8cd5138e6ed2895c3fa1a6d39d18f7ec6"},
        {120, "f52b23db1fbb6ded89ef42a23ce0c8922c45f25c50b568a93bf1c075420bbb7c"},
    };
    struct sha256 s;
    uint8_t d[SHA256_LEN], bytes[120], as[997];
    char got[2 * SHA256_LEN + 1];

    for (size_t i = 0; i < sizeof(fips) / sizeof(fips[0]); i++) {
        sha256_init(&s);
        sha256_update(&s, fips[i].in, strlen(fips[i].in));
        sha256_final(&s, d);
        hex32(d, got);
        ck_assert_str_eq(got, fips[i].want);
    }
    for (size_t i = 0; i < sizeof(bytes); i++)
        bytes[i] = (uint8_t)i;
    for (size_t i = 0; i < sizeof(edges) / sizeof(edges[0]); i++) {
        for (size_t split = 0; split <= edges[i].n; split += 7) { /* any split, one result */
            sha256_init(&s);
            sha256_update(&s, bytes, split);
            sha256_update(&s, bytes + split, edges[i].n - split);
            sha256_final(&s, d);
            hex32(d, got);
            ck_assert_str_eq(got, edges[i].want);
        }
    }
    memset(as, 'a', sizeof(as));
    sha256_init(&s);
    for (size_t left = 1000000; left > 0;) {
        size_t n = left < sizeof(as) ? left : sizeof(as);
        sha256_update(&s, as, n);
        left -= n;
    }
    sha256_final(&s, d);
    hex32(d, got);
    ck_assert_str_eq(got, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}
END_TEST

START_TEST(crc16_check_value)
{
    /* the cluster spec's reference: CRC16/XMODEM of "123456789" is 0x31C3 */
    ck_assert_uint_eq(util_crc16("123456789", 9), 0x31c3);
    ck_assert_uint_eq(util_crc16("", 0), 0);
}
END_TEST

START_TEST(key_slots)
{
    const struct slot_case *c = &slots[_i];
    ck_assert_msg(util_redis_slot(c->key, strlen(c->key)) == c->slot, "slot of \"%s\": %u, want %u",
                  c->key, util_redis_slot(c->key, strlen(c->key)), c->slot);
}
END_TEST

/* A client key holding '{' gets the fence, which makes the whole Redis key
 * count; no two client keys end up with the same text. */
START_TEST(slot_fence)
{
    static const char *const plain[] = {"", "x", "user}1", "a}b{", "10.0.0.1"};
    static const char *const fenced[] = {"{x}1", "a{", "{", "{}", "}{x}"};
    char key[64];

    for (size_t i = 0; i < sizeof(plain) / sizeof(plain[0]); i++)
        ck_assert_uint_eq(util_slot_fence(plain[i], strlen(plain[i])),
                          strchr(plain[i], '{') ? 2 : 0);
    for (size_t i = 0; i < sizeof(fenced) / sizeof(fenced[0]); i++) {
        ck_assert_uint_eq(util_slot_fence(fenced[i], strlen(fenced[i])), 2);
        int n = snprintf(key, sizeof(key), "rl:tb:r:%s%s", UTIL_SLOT_FENCE, fenced[i]);
        ck_assert_uint_eq(util_redis_slot(key, (size_t)n), util_crc16(key, (size_t)n) & 16383);
    }
    /* the client's {x} no longer decides: 100 such keys spread over slots */
    unsigned first = 0, distinct = 0;
    for (int i = 0; i < 100; i++) {
        int n = snprintf(key, sizeof(key), "{x}%d", i);
        size_t f = util_slot_fence(key, (size_t)n);
        char full[80];
        int m = snprintf(full, sizeof(full), "rl:tb:r:%.*s%s", (int)f, UTIL_SLOT_FENCE, key);
        unsigned s = util_redis_slot(full, (size_t)m);
        if (i == 0)
            first = s;
        distinct += s != first;
    }
    ck_assert_uint_gt(distinct, 90);
}
END_TEST

START_TEST(hash_is_fnv1a)
{
    /* FNV-1a 64 of "a" */
    ck_assert_uint_eq(util_hash(UTIL_HASH_INIT, "a", 1), 0xaf63dc4c8601ec8cULL);
    ck_assert_uint_eq(util_us_to_s_ceil(0), 0);
    ck_assert_uint_eq(util_us_to_s_ceil(1), 1);
    ck_assert_uint_eq(util_us_to_s_ceil(1000000), 1);
    ck_assert_uint_eq(util_us_to_s_ceil(1000001), 2);
    ck_assert_uint_eq(util_us_to_s_ceil(UINT64_MAX), UINT64_MAX / 1000000 + 1); /* no wrap */
}
END_TEST

START_TEST(stripe_and_slot_use_different_bits)
{
    ck_assert_uint_eq(util_stripe(0xabcdef0123456789ULL, 16), 0x1);
    ck_assert_uint_eq(util_chain(0xabcdef0123456789ULL, 256), 0x89);
    ck_assert_uint_eq(util_hash_mix(0), 0);

    /* The keys of one stripe still spread over the slots of its table. */
    enum { STRIPES = 64, SLOTS = 64, KEYS = 4096 };
    int seen[SLOTS] = {0}, in_stripe = 0, distinct = 0;
    for (int i = 0; i < KEYS; i++) {
        char key[32];
        int n = snprintf(key, sizeof(key), "10.0.%d.%d", i / 256, i % 256);
        uint64_t h = util_hash_mix(util_hash_words(UTIL_HASH_INIT, key, (size_t)n));
        if (util_stripe(h, STRIPES) != 0)
            continue;
        in_stripe++;
        if (!seen[util_chain(h, SLOTS)]++)
            distinct++;
    }
    ck_assert_int_gt(in_stripe, KEYS / STRIPES / 2);
    ck_assert_int_gt(distinct, SLOTS / 3);
}
END_TEST

/* The tables' hash: every byte of a key counts, in every place and at every
 * length (the tail of a key shorter than a word included), and the keys the
 * agent meets (addresses, Redis keys) spread evenly over the slots. */
START_TEST(hash_words_every_byte_counts)
{
    unsigned char key[40];

    for (size_t len = 0; len <= sizeof(key); len++) {
        memset(key, 'k', sizeof(key));
        uint64_t base = util_hash_words(UTIL_HASH_INIT, key, len);
        if (len > 0) /* a longer key is another key */
            ck_assert_uint_ne(base, util_hash_words(UTIL_HASH_INIT, key, len - 1));
        for (size_t at = 0; at < len; at++)
            for (int bit = 0; bit < 8; bit++) {
                key[at] ^= (unsigned char)(1u << bit);
                ck_assert_uint_ne(util_hash_words(UTIL_HASH_INIT, key, len), base);
                key[at] ^= (unsigned char)(1u << bit);
            }
    }
    /* chained: the split between two parts counts */
    ck_assert_uint_ne(util_hash_words(util_hash_words(UTIL_HASH_INIT, "ab", 2), "c", 1),
                      util_hash_words(util_hash_words(UTIL_HASH_INIT, "a", 1), "bc", 2));

    enum { SLOTS = 256, KEYS = 256 * 64 };
    static int count[SLOTS];
    memset(count, 0, sizeof(count));
    for (int i = 0; i < KEYS; i++) {
        char k[64];
        int n = i % 2 ? snprintf(k, sizeof(k), "10.%d.%d.%d", i >> 16, (i >> 8) & 255, i & 255)
                      : snprintf(k, sizeof(k), "rl:{api}key-%d", i);
        count[util_chain(util_hash_mix(util_hash_words(UTIL_HASH_INIT, k, (size_t)n)), SLOTS)]++;
    }
    /* 64 expected per slot: a fair spread stays well inside [16, 128] */
    for (int i = 0; i < SLOTS; i++) {
        ck_assert_int_ge(count[i], 16);
        ck_assert_int_le(count[i], 128);
    }
}
END_TEST

START_TEST(query_params)
{
    char out[16];

    ck_assert_int_eq(util_query_param("rule=api&key=t%2D1+x", "rule", out, sizeof(out)), 3);
    ck_assert_str_eq(out, "api");
    ck_assert_int_eq(util_query_param("rule=api&key=t%2D1+x", "key", out, sizeof(out)), 5);
    ck_assert_str_eq(out, "t-1 x");
    ck_assert_int_eq(util_query_param("rulex=1&rule=2", "rule", out, sizeof(out)), 1);
    ck_assert_str_eq(out, "2");
    ck_assert_int_eq(util_query_param("a=1&a=2", "a", out, sizeof(out)), 1);
    ck_assert_str_eq(out, "1");
    ck_assert_int_eq(util_query_param("key&x=1", "key", out, sizeof(out)), 0);
    ck_assert_int_eq(util_query_param("key=", "key", out, sizeof(out)), 0);
    ck_assert_int_eq(util_query_param("k=a%00b", "k", out, sizeof(out)), 3);
    ck_assert_int_eq(memcmp(out, "a\0b", 4), 0);
    ck_assert_int_eq(util_query_param("", "key", out, sizeof(out)), UTIL_QUERY_ABSENT);
    ck_assert_int_eq(util_query_param("rule=a", "key", out, sizeof(out)), UTIL_QUERY_ABSENT);
    ck_assert_int_eq(util_query_param("k=%4", "k", out, sizeof(out)), UTIL_QUERY_BAD);
    ck_assert_int_eq(util_query_param("k=%zz", "k", out, sizeof(out)), UTIL_QUERY_BAD);
    ck_assert_int_eq(util_query_param("k=0123456789abcdef", "k", out, sizeof(out)), UTIL_QUERY_BAD);
    ck_assert_int_eq(util_query_param("k=0123456789abcde", "k", out, sizeof(out)), 15);
}
END_TEST

/* util_u64_dec against printf at the boundaries of every digit count. The
 * buffer is exactly UTIL_U64_DEC_MAX bytes on the heap so that ASan sees a
 * write past it. */
static const uint64_t dec_cases[] = {0,
                                     1,
                                     9,
                                     10,
                                     99,
                                     100,
                                     999,
                                     1000,
                                     65535,
                                     4294967295ULL,
                                     4294967296ULL,
                                     999999999999999999ULL,
                                     1000000000000000000ULL,
                                     9999999999999999999ULL,
                                     10000000000000000000ULL,
                                     UINT64_MAX};

START_TEST(u64_dec)
{
    char want[32];
    char *got = malloc(UTIL_U64_DEC_MAX);
    uint64_t v = dec_cases[_i];
    int n = snprintf(want, sizeof(want), "%" PRIu64, v);

    ck_assert_ptr_nonnull(got);
    ck_assert_uint_eq(util_u64_dec(got, v), (size_t)n);
    ck_assert_int_eq(memcmp(got, want, (size_t)n), 0);
    free(got);
}
END_TEST

/* ... and on a million values of every size, odd and even digit counts. */
START_TEST(u64_dec_many)
{
    char want[32], got[UTIL_U64_DEC_MAX];
    uint64_t x = 88172645463325252ULL;

    for (int i = 0; i < 1000000; i++) {
        x ^= x << 13; /* xorshift64 */
        x ^= x >> 7;
        x ^= x << 17;
        uint64_t v = x >> (i % 64);
        int n = snprintf(want, sizeof(want), "%" PRIu64, v);
        if (util_u64_dec(got, v) != (size_t)n || memcmp(got, want, (size_t)n) != 0)
            ck_abort_msg("util_u64_dec(%s) wrong", want);
    }
}
END_TEST

/* util_ipv4_text against inet_ntop, over every byte value in each place. */
START_TEST(ipv4_text)
{
    char want[INET_ADDRSTRLEN];
    char *got = malloc(UTIL_IPV4_TEXT_MAX);

    ck_assert_ptr_nonnull(got);
    for (unsigned b = 0; b < 256; b++) {
        for (int at = 0; at < 4; at++) {
            uint8_t ip[4] = {255, 0, 10, 100};
            ip[at] = (uint8_t)b;
            ck_assert_ptr_nonnull(inet_ntop(AF_INET, ip, want, sizeof(want)));
            ck_assert_uint_eq(util_ipv4_text(got, ip), strlen(want));
            ck_assert_str_eq(got, want);
        }
    }
    free(got);
}

/* INFO's eviction fields (store_info_parse) and the verdict. */
static const struct {
    const char *text;
    int can_evict;
    uint64_t maxmemory, evicted;
    const char *policy;
} info_cases[] = {
    {"# Memory\r\nmaxmemory:2097152\r\nmaxmemory_human:2.00M\r\nmaxmemory_policy:allkeys-lru\r\n"
     "# Stats\r\nevicted_keys:2751\r\n",
     1, 2097152, 2751, "allkeys-lru"},
    {"maxmemory:2097152\nmaxmemory_policy:noeviction\nevicted_keys:0\n", 0, 2097152, 0,
     "noeviction"},
    {"maxmemory:0\r\nmaxmemory_policy:allkeys-lru\r\n", 0, 0, 0, "allkeys-lru"}, /* no limit */
    {"maxmemory:1000\r\nmaxmemory_policy:volatile-ttl\r\n", 1, 1000, 0, "volatile-ttl"},
    {"maxmemory_human:1\r\nevicted_keys_x:9\r\n", 0, 0, 0, ""},                /* look-alikes */
    {"maxmemory:12x\r\nmaxmemory_policy:allkeys-lfu", 0, 0, 0, "allkeys-lfu"}, /* bad number */
    {"", 0, 0, 0, ""},
};

START_TEST(info_eviction)
{
    struct store_info_mem m;
    const char *t = info_cases[_i].text;
    size_t len = strlen(t);
    char *exact = malloc(len ? len : 1); /* no NUL after the text: ASan sees over-reads */

    memcpy(exact, t, len);
    store_info_parse(exact, len, &m);
    ck_assert_int_eq(store_info_can_evict(&m), info_cases[_i].can_evict);
    ck_assert_uint_eq(m.maxmemory, info_cases[_i].maxmemory);
    ck_assert_uint_eq(m.evicted_keys, info_cases[_i].evicted);
    ck_assert_str_eq(m.policy, info_cases[_i].policy);
    free(exact);
}
END_TEST

END_TEST

int main(void)
{
    TCase *tc = tcase_create("core");

    CHECK_ADD(tc, crc16_check_value, sha256_vectors);
    tcase_add_loop_test(tc, key_slots, 0, sizeof(slots) / sizeof(slots[0]));
    CHECK_ADD(tc, slot_fence, hash_is_fnv1a, hash_words_every_byte_counts,
              stripe_and_slot_use_different_bits, query_params);
    tcase_add_loop_test(tc, u64_dec, 0, sizeof(dec_cases) / sizeof(dec_cases[0]));
    CHECK_ADD(tc, u64_dec_many, ipv4_text);
    tcase_add_loop_test(tc, info_eviction, 0, sizeof(info_cases) / sizeof(info_cases[0]));
    return check_run_case("util", tc);
}
