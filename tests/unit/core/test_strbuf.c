/* SPDX-License-Identifier: Apache-2.0 */
/* test_strbuf.c - the one text buffer (core/strbuf) and what the program
 * adds to jansson (core/json): growth across the first 4096-byte block, bytes
 * kept as given (a NUL among them), the sticky failure; every byte 0..255 of
 * a client key as JSON, and the body framing. */
#include <check.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/json.h"
#include "core/strbuf.h"

/* Appends of the same piece, n times: below, at and across the first block
 * (4096 bytes, the NUL included), by strbuf_put and by strbuf_printf. */
static const struct grow_case {
    size_t piece, n;
    int printf_;
} grow_cases[] = {
    {1, 5000, 0},  {1, 5000, 1},  {4095, 1, 0}, {4095, 1, 1}, {4096, 1, 0},
    {4096, 1, 1},  {4097, 3, 0},  {4097, 3, 1}, {100, 41, 0}, {100, 41, 1},
    {10000, 2, 0}, {10000, 2, 1}, {0, 3, 0},
};

START_TEST(grows_across_blocks)
{
    const struct grow_case *c = &grow_cases[_i];
    struct strbuf b = STRBUF_INIT;
    char *piece = malloc(c->piece + 1);
    size_t len = 12345;

    ck_assert_ptr_nonnull(piece);
    for (size_t i = 0; i < c->piece; i++)
        piece[i] = (char)('a' + i % 26);
    piece[c->piece] = '\0';
    for (size_t k = 0; k < c->n; k++) {
        if (c->printf_)
            strbuf_printf(&b, "%s", piece);
        else
            strbuf_put(&b, piece, c->piece);
        ck_assert_uint_eq(b.len, (k + 1) * c->piece);
        ck_assert_int_eq(b.failed, 0);
        if (b.p) {
            ck_assert_uint_gt(b.cap, b.len); /* room for the NUL */
            ck_assert_int_eq(b.p[b.len], '\0');
        }
    }
    char *text = strbuf_finish(&b, &len);
    ck_assert_ptr_nonnull(text);
    ck_assert_uint_eq(len, c->n * c->piece);
    ck_assert_int_eq(text[len], '\0');
    int same = 1;
    for (size_t k = 0; k < c->n; k++)
        same &= memcmp(text + k * c->piece, piece, c->piece) == 0;
    ck_assert_msg(same, "piece %zu x %zu: text differs", c->piece, c->n);
    ck_assert_ptr_null(b.p); /* handed over: the buffer is empty */
    ck_assert_uint_eq(b.len, 0);
    free(text);
    free(piece);
}
END_TEST

START_TEST(put_keeps_nul)
{
    struct strbuf b = STRBUF_INIT;
    size_t len;

    strbuf_put(&b, "a\0b", 3);
    strbuf_printf(&b, "%d", 7);
    strbuf_put(&b, "\0", 1);
    char *text = strbuf_finish(&b, &len);
    ck_assert_ptr_nonnull(text);
    ck_assert_uint_eq(len, 5);
    ck_assert_int_eq(memcmp(text, "a\0b7\0", 6), 0);
    free(text);
    /* nothing appended: an empty text, not NULL */
    text = strbuf_finish(&b, &len);
    ck_assert_ptr_nonnull(text);
    ck_assert_uint_eq(len, 0);
    ck_assert_str_eq(text, "");
    free(text);
}
END_TEST

/* A length no buffer can hold fails before anything is read or allocated;
 * from then on every append is a no-op and finish says NULL. */
START_TEST(failure_is_sticky)
{
    struct strbuf b = STRBUF_INIT;
    size_t len = 99;

    strbuf_printf(&b, "before");
    strbuf_put(&b, "x", SIZE_MAX - 8);
    ck_assert_int_eq(b.failed, 1);
    ck_assert_uint_eq(b.len, 6);
    strbuf_printf(&b, "after");
    strbuf_put(&b, "after", 5);
    ck_assert_uint_eq(b.len, 6);
    ck_assert_ptr_null(strbuf_finish(&b, &len));
    ck_assert_uint_eq(len, 99); /* untouched */
    /* finish freed it: usable again */
    ck_assert_ptr_null(b.p);
    ck_assert_int_eq(b.failed, 0);
    strbuf_printf(&b, "again");
    char *text = strbuf_finish(&b, &len);
    ck_assert_str_eq(text, "again");
    free(text);
    /* strbuf_free after a failure too */
    strbuf_put(&b, "x", SIZE_MAX - 8);
    strbuf_free(&b);
    ck_assert_int_eq(b.failed, 0);
    ck_assert_ptr_null(b.p);
}
END_TEST

/* A one-byte key as jansson writes it: short escapes where JSON has them,
 * \u00XX for the other control bytes and every byte >= 0x80, DEL as is. */
static const struct key_case {
    unsigned char byte;
    const char *json;
} key_cases[] = {
    {0x00, "\"\\u0000\""}, {0x01, "\"\\u0001\""}, {0x08, "\"\\b\""},     {0x09, "\"\\t\""},
    {0x0a, "\"\\n\""},     {0x0c, "\"\\f\""},     {0x0d, "\"\\r\""},     {0x1f, "\"\\u001F\""},
    {0x20, "\" \""},       {'"', "\"\\\"\""},     {'\\', "\"\\\\\""},    {'/', "\"/\""},
    {'A', "\"A\""},        {0x7e, "\"~\""},       {0x7f, "\"\x7f\""},    {0x80, "\"\\u0080\""},
    {0xc3, "\"\\u00C3\""}, {0xe9, "\"\\u00E9\""}, {0xff, "\"\\u00FF\""},
};

static char *dump_key(const char *s, size_t len)
{
    json_t *j = json_latin1(s, len);
    ck_assert_ptr_nonnull(j);
    char *text = json_dumps(j, JSON_OUT_FLAGS | JSON_ENCODE_ANY);
    json_decref(j);
    ck_assert_ptr_nonnull(text);
    return text;
}

START_TEST(key_byte_escapes)
{
    const struct key_case *c = &key_cases[_i];
    char *text = dump_key((const char *)&c->byte, 1);
    ck_assert_msg(strcmp(text, c->json) == 0, "byte 0x%02x: %s, not %s", c->byte, text, c->json);
    free(text);
}
END_TEST

/* Every byte alone, then all 256 in one key: ASCII out, and read back (as a
 * JSON reader would) each byte is the code point of the same number. */
START_TEST(every_byte_round_trips)
{
    char all[256];
    for (int i = 0; i < 256; i++)
        all[i] = (char)i;
    for (int i = 0; i <= 256; i++) {
        const char *s = i < 256 ? all + i : all;
        size_t n = i < 256 ? 1 : sizeof(all);
        char *text = dump_key(s, n);
        int ascii = 1;
        for (const char *p = text; *p; p++)
            ascii &= (unsigned char)*p < 0x80;
        ck_assert_msg(ascii, "byte %d: not ASCII", i);

        json_error_t err;
        json_t *back = json_loads(text, JSON_DECODE_ANY | JSON_ALLOW_NUL, &err);
        ck_assert_ptr_nonnull(back);
        size_t ulen;
        char *want = json_latin1_utf8(s, n, &ulen);
        ck_assert_uint_eq(json_string_length(back), ulen);
        ck_assert_msg(memcmp(json_string_value(back), want, ulen) == 0, "byte %d: read back", i);
        free(want);
        json_decref(back);
        free(text);
    }
}
END_TEST

START_TEST(latin1_utf8)
{
    size_t n;
    char *u = json_latin1_utf8("a\0\x7f\x80\xff", 5, &n);
    ck_assert_ptr_nonnull(u);
    ck_assert_uint_eq(n, 7);
    ck_assert_int_eq(memcmp(u, "a\0\x7f\xc2\x80\xc3\xbf", 8), 0); /* and the NUL */
    free(u);
    u = json_latin1_utf8("", 0, NULL);
    ck_assert_str_eq(u, "");
    free(u);
}
END_TEST

START_TEST(body_and_put_str)
{
    size_t len = 0;
    char *body = json_body(json_pack("{s:i,s:[s,i]}", "b", 1, "a", "x\xc3\xa9", 2), &len);
    ck_assert_str_eq(body, "{\"b\":1,\"a\":[\"x\\u00E9\",2]}\n"); /* order kept, compact */
    ck_assert_uint_eq(len, strlen(body));
    free(body);
    ck_assert_ptr_null(json_body(NULL, &len)); /* a build that ran out of memory */

    struct strbuf b = STRBUF_INIT;
    strbuf_printf(&b, "{\"k\":");
    json_put_str(&b, "q\"\xe9\n", 4);
    strbuf_printf(&b, "}");
    char *text = strbuf_finish(&b, &len);
    ck_assert_str_eq(text, "{\"k\":\"q\\\"\\u00E9\\n\"}");
    free(text);
}
END_TEST

int main(void)
{
    Suite *su = suite_create("strbuf");
    TCase *tb = tcase_create("strbuf");
    TCase *tj = tcase_create("json");
    SRunner *sr;
    int failed;

    tcase_add_loop_test(tb, grows_across_blocks, 0, sizeof(grow_cases) / sizeof(grow_cases[0]));
    tcase_add_test(tb, put_keeps_nul);
    tcase_add_test(tb, failure_is_sticky);
    tcase_add_loop_test(tj, key_byte_escapes, 0, sizeof(key_cases) / sizeof(key_cases[0]));
    tcase_add_test(tj, every_byte_round_trips);
    tcase_add_test(tj, latin1_utf8);
    tcase_add_test(tj, body_and_put_str);
    suite_add_tcase(su, tb);
    suite_add_tcase(su, tj);
    sr = srunner_create(su);
    srunner_run_all(sr, CK_NORMAL);
    failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
