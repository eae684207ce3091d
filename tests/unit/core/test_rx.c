/* SPDX-License-Identifier: Apache-2.0 */
/* test_rx.c - core/rx: PCRE2 within bounds. Patterns are refused with
 * PCRE2's reason or ours; texts that make a backtracking matcher take
 * exponential time stop at a limit; the POSIX meanings operators rely on
 * hold ($ at the very end only, bytes not UTF-8). */
#include "core/rx.h"

#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "check_util.h"

static struct rx *compile_ok(const char *pattern)
{
    char err[256] = "";
    struct rx *re = rx_compile(pattern, err, sizeof(err));
    ck_assert_msg(re != NULL, "%s: %s", pattern, err);
    return re;
}

static void compile_bad(const char *pattern, const char *want)
{
    char err[256] = "";
    struct rx *re = rx_compile(pattern, err, sizeof(err));
    ck_assert_msg(re == NULL, "%s compiled", pattern);
    ck_assert_msg(strstr(err, want) != NULL, "%s: '%s' lacks '%s'", pattern, err, want);
}

static int match_len(const struct rx *re, const char *s, size_t len)
{
    struct rx_scratch scr = {0};
    int rc = rx_match(re, s, len, &scr);
    rx_scratch_free(&scr);
    return rc;
}

START_TEST(test_bounds_at_compile)
{
    char *long_re = malloc(RX_MAX_LEN + 2);
    memset(long_re, 'a', RX_MAX_LEN + 1);
    long_re[RX_MAX_LEN + 1] = '\0';
    compile_bad(long_re, "longer than 1024 bytes");
    long_re[RX_MAX_LEN] = '\0';
    rx_free(compile_ok(long_re));
    free(long_re);

    char nest[2 * RX_MAX_NEST + 8], *p = nest;
    for (int i = 0; i < RX_MAX_NEST + 1; i++)
        *p++ = '(';
    *p++ = 'a';
    for (int i = 0; i < RX_MAX_NEST + 1; i++)
        *p++ = ')';
    *p = '\0';
    compile_bad(nest, "parentheses are too deeply nested");
    /* 52 KB of code for PCRE2, over our 32 KiB */
    compile_bad("(abcdefghij){2000}", "compiles to ");
    rx_free(compile_ok("(abcdefghij){500}"));
    /* a pattern cannot switch modes that change what it means or costs */
    compile_bad("(*UTF)a", "using UTF is disabled");
    compile_bad("a\\Cb", "using \\C is disabled");
    compile_bad("(a)\\1", "non-existent");
}
END_TEST

/* Texts that take a backtracking matcher exponential time: the match stops
 * at a limit, however the pattern tries to raise it. */
START_TEST(test_bounds_at_match)
{
    static const char *patterns[] = {
        "^(a|aa)+$",
        "^(a+)+$",
        "^(a|a)*$",
        "(*LIMIT_MATCH=100000000)(*LIMIT_DEPTH=100000000)(*LIMIT_HEAP=100000000)^(a|aa)+$",
    };
    char subject[4002];
    memset(subject, 'a', 4000);
    subject[4000] = 'c';
    subject[4001] = '\0';
    for (size_t i = 0; i < sizeof(patterns) / sizeof(patterns[0]); i++) {
        struct rx *re = compile_ok(patterns[i]);
        ck_assert_int_eq(check_re(re, subject), RX_ELIMIT);
        ck_assert_int_eq(check_re(re, "aaaa"), 1); /* short texts still answer */
        ck_assert_int_eq(check_re(re, "aaac"), 0);
        rx_free(re);
    }
}
END_TEST

START_TEST(test_posix_meanings)
{
    struct rx *re = compile_ok("^/api/v[12]$");
    ck_assert_int_eq(check_re(re, "/api/v1"), 1);
    ck_assert_int_eq(check_re(re, "/api/v1\n"), 0); /* $ at the very end, as in POSIX */
    ck_assert_int_eq(check_re(re, "/web/api/v1"), 0);
    rx_free(re);

    /* the whole text counts, NULs included (regexec stopped at the first) */
    re = compile_ok("^ab$");
    ck_assert_int_eq(match_len(re, "ab\0c", 4), 0);
    ck_assert_int_eq(match_len(re, "ab\0c", 2), 1);
    rx_free(re);
    re = compile_ok("x\\x00y");
    ck_assert_int_eq(match_len(re, "x\0y", 3), 1);
    rx_free(re);

    /* bytes: '.' is one byte of a UTF-8 sequence, invalid UTF-8 is fine */
    re = compile_ok("^..$");
    ck_assert_int_eq(check_re(re, "\xc3\xa9"), 1);
    ck_assert_int_eq(check_re(re, "\xff\xfe"), 1);
    rx_free(re);

    /* POSIX classes and what operators write */
    re = compile_ok("^[[:alpha:]]+[[:digit:]]{2}$");
    ck_assert_int_eq(check_re(re, "ab12"), 1);
    ck_assert_int_eq(check_re(re, "ab1"), 0);
    rx_free(re);
    re = compile_ok("^(paid|enterprise)$");
    ck_assert_int_eq(check_re(re, "enterprise"), 1);
    ck_assert_int_eq(check_re(re, "paid2"), 0);
    rx_free(re);
}
END_TEST

/* One scratch serves many regexes and matches. */
START_TEST(test_scratch_reuse)
{
    struct rx *a = compile_ok("^a"), *b = compile_ok("b$");
    struct rx_scratch scr = {0};
    for (int i = 0; i < 1000; i++) {
        ck_assert_int_eq(rx_match(a, "abc", 3, &scr), 1);
        ck_assert_int_eq(rx_match(b, "abc", 3, &scr), 0);
        ck_assert_int_eq(rx_match(b, "ab", 2, &scr), 1);
    }
    rx_scratch_free(&scr);
    rx_scratch_free(&scr); /* twice is harmless */
    rx_free(a);
    rx_free(b);
    rx_free(NULL);
}
END_TEST

int main(void)
{
    TCase *tc = tcase_create("re");

    CHECK_ADD(tc, test_bounds_at_compile, test_bounds_at_match, test_posix_meanings,
              test_scratch_reuse);
    return check_run_case("re", tc);
}
