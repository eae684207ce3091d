/* test_util.c - CRC16 and Redis Cluster key slots against published values
 * (the cluster spec's check value, and slots a real Redis reports); how the
 * striped tables split a key hash. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

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
    {"123456789", 12739},            /* CRC16 0x31C3 & 16383 */
    {"{foo}.bar", 12182},            /* hashtag: "foo" */
    {"x{foo}y{bar}", 12182},         /* the first {...} counts */
    {"{user1000}.following", 3443},  /* the spec's example pair: one slot */
    {"{user1000}.followers", 3443},
    {"foo{bar}{zap}", 5061},         /* spec: "bar" is hashed */
    {"foo{{bar}}zap", 4015},         /* spec: "{bar" is hashed */
    {"{bar", 4015},                  /* ... the same slot as the key "{bar" */
    {"{}foo", 9500},                 /* empty tag: the whole key */
    {"foo{}{bar}", 8363},            /* spec: empty first tag, the whole key */
    {"foo{", 7673},                  /* no closing brace: the whole key */
};

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

START_TEST(hash_is_fnv1a)
{
    /* FNV-1a 64 of "a" */
    ck_assert_uint_eq(util_hash(UTIL_HASH_INIT, "a", 1), 0xaf63dc4c8601ec8cULL);
    ck_assert_uint_eq(util_us_to_s_ceil(0), 0);
    ck_assert_uint_eq(util_us_to_s_ceil(1), 1);
    ck_assert_uint_eq(util_us_to_s_ceil(1000000), 1);
    ck_assert_uint_eq(util_us_to_s_ceil(1000001), 2);
}
END_TEST

START_TEST(stripe_and_slot_use_different_bits)
{
    ck_assert_uint_eq(util_stripe(0xabcdef0123456789ULL, 16), 0x1);
    ck_assert_uint_eq(util_slot(0xabcdef0123456789ULL, 256), 0x89);
    ck_assert_uint_eq(util_hash_mix(0), 0);

    /* The keys of one stripe still spread over the slots of its table. */
    enum { STRIPES = 64, SLOTS = 64, KEYS = 4096 };
    int seen[SLOTS] = {0}, in_stripe = 0, distinct = 0;
    for (int i = 0; i < KEYS; i++) {
        char key[32];
        int n = snprintf(key, sizeof(key), "10.0.%d.%d", i / 256, i % 256);
        uint64_t h = util_hash_mix(util_hash(UTIL_HASH_INIT, key, (size_t)n));
        if (util_stripe(h, STRIPES) != 0)
            continue;
        in_stripe++;
        if (!seen[util_slot(h, SLOTS)]++)
            distinct++;
    }
    ck_assert_int_gt(in_stripe, KEYS / STRIPES / 2);
    ck_assert_int_gt(distinct, SLOTS / 3);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("util");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, crc16_check_value);
    tcase_add_loop_test(tc, key_slots, 0, sizeof(slots) / sizeof(slots[0]));
    tcase_add_test(tc, hash_is_fnv1a);
    tcase_add_test(tc, stripe_and_slot_use_different_bits);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
