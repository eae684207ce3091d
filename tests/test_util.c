/* test_util.c - CRC16 and Redis Cluster key slots against the published
 * values (the cluster spec's check value, and slots Redis reports). */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

struct slot_case {
    const char *key;
    unsigned slot;
};

static const struct slot_case slots[] = {
    {"foo", 12182},
    {"bar", 5061},
    {"{foo}.bar", 12182},          /* hashtag */
    {"x{foo}y{bar}", 12182},       /* the first {...} counts */
    {"{}foo", 0},                  /* empty tag: whole key (filled in below) */
    {"foo{", 12182 + 0},           /* no closing brace: whole key (filled in below) */
};

START_TEST(crc16_check_value)
{
    ck_assert_uint_eq(util_crc16("123456789", 9), 0x31c3);
    ck_assert_uint_eq(util_crc16("", 0), 0);
}
END_TEST

START_TEST(key_slots)
{
    struct slot_case c = slots[_i];
    if (strcmp(c.key, "{}foo") == 0 || strcmp(c.key, "foo{") == 0)
        c.slot = util_crc16(c.key, strlen(c.key)) & 16383;
    ck_assert_uint_eq(util_redis_slot(c.key, strlen(c.key)), c.slot);
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

int main(void)
{
    Suite *s = suite_create("util");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, crc16_check_value);
    tcase_add_loop_test(tc, key_slots, 0, sizeof(slots) / sizeof(slots[0]));
    tcase_add_test(tc, hash_is_fnv1a);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
