/* SPDX-License-Identifier: Apache-2.0 */
/* test_rules_diff.c - the unified diff of --rules-diff (rules_diff.h): the
 * hunks diff -u writes for small edits (the table's expectations are diff
 * -u's own, and diff -u is asked again when it is installed), and for any
 * pair of texts, a diff that patches the first into the second; 1 MiB
 * texts within the bounds, shown whole past them. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check_util.h"
#include "rules_redis/rules_diff.h"

static const struct {
    const char *what, *a, *b, *want;
} cases[] = {
    {"identical", "[rule:a]\nrate = 1/1s\n", "[rule:a]\nrate = 1/1s\n", ""},
    {"both empty", "", "", ""},
    {"insertion", "a\nb\nc\n", "a\nb\nX\nc\n", "--- A\n+++ B\n@@ -1,3 +1,4 @@\n a\n b\n+X\n c\n"},
    {"deletion", "1\n2\n3\n4\n5\n6\n7\n8\n9\n10\n", "1\n2\n3\n4\n6\n7\n8\n9\n10\n",
     "--- A\n+++ B\n@@ -2,7 +2,6 @@\n 2\n 3\n 4\n-5\n 6\n 7\n 8\n"},
    {"two changes, two hunks",
     "1\n2\n3\n4\n5\n6\n7\n8\n9\n10\n11\n12\n13\n14\n15\n16\n17\n18\n19\n20\n",
     "1\ntwo\n3\n4\n5\n6\n7\n8\n9\n10\n11\n12\n13\n14\n15\n16\n17\neighteen\n19\n20\n",
     "--- A\n+++ B\n@@ -1,5 +1,5 @@\n 1\n-2\n+two\n 3\n 4\n 5\n"
     "@@ -15,6 +15,6 @@\n 15\n 16\n 17\n-18\n+eighteen\n 19\n 20\n"},
    {"changes six lines apart, one hunk", "1\n2\n3\n4\n5\n6\n7\n8\n9\n10\n",
     "0\n2\n3\n4\n5\n6\n7\neight\n9\n10\n",
     "--- A\n+++ B\n@@ -1,10 +1,10 @@\n-1\n+0\n 2\n 3\n 4\n 5\n 6\n 7\n-8\n+eight\n 9\n 10\n"},
    {"seven lines apart, two hunks", "1\n2\n3\n4\n5\n6\n7\n8\n9\n10\n",
     "0\n2\n3\n4\n5\n6\n7\n8\nnine\n10\n",
     "--- A\n+++ B\n@@ -1,4 +1,4 @@\n-1\n+0\n 2\n 3\n 4\n"
     "@@ -6,5 +6,5 @@\n 6\n 7\n 8\n-9\n+nine\n 10\n"},
    {"newline added at the end", "a\nb", "a\nb\n",
     "--- A\n+++ B\n@@ -1,2 +1,2 @@\n a\n-b\n\\ No newline at end of file\n+b\n"},
    {"no newline at the end of either", "a\nb", "a\nc",
     "--- A\n+++ B\n@@ -1,2 +1,2 @@\n a\n-b\n\\ No newline at end of file\n+c\n"
     "\\ No newline at end of file\n"},
    {"from empty", "", "x\n", "--- A\n+++ B\n@@ -0,0 +1 @@\n+x\n"},
    {"to empty", "x\n", "", "--- A\n+++ B\n@@ -1 +0,0 @@\n-x\n"},
    {"context without newline", "a\nb\nc", "A\nb\nc",
     "--- A\n+++ B\n@@ -1,3 +1,3 @@\n-a\n+A\n b\n c\n\\ No newline at end of file\n"},
};

/* The text of the unified diff d applied to a, as patch(1) would: every
 * hunk's context and deletions must be a's lines at its place. NULL when
 * the diff does not apply. */
static char *apply(const char *a, const char *d)
{
    size_t alen = strlen(a), cap = alen + strlen(d) + 1, o = 0, ai = 0;
    char *out = malloc(cap);
    const char *p = strchr(d, '\n') + 1; /* past "--- " */

    p = strchr(p, '\n') + 1; /* past "+++ " */
    long aline = 1;          /* the 1-based line of a at ai */
    while (*p) {
        long start;
        ck_assert_msg(sscanf(p, "@@ -%ld", &start) == 1, "not a hunk: %.40s", p);
        const char *comma = strchr(p, ',');
        const char *space = strchr(p + 4, ' ');
        long count = comma && comma < space ? strtol(comma + 1, NULL, 10) : 1;
        if (count == 0)
            start++; /* the line before an empty range */
        p = strchr(p, '\n') + 1;
        for (; aline < start; aline++) { /* copy a's lines before the hunk */
            const char *nl = memchr(a + ai, '\n', alen - ai);
            size_t l = nl ? (size_t)(nl - (a + ai)) + 1 : alen - ai;
            memcpy(out + o, a + ai, l), o += l, ai += l;
        }
        while (*p && *p != '@') {
            const char *nl = strchr(p, '\n');
            size_t l = (size_t)(nl - p); /* without the '\n' */
            int nonl = nl[1] == '\\';    /* followed by "\ No newline" */
            size_t ll = l - 1 + !nonl;   /* the line's bytes, with its '\n' */
            if (*p == ' ' || *p == '-') {
                if (ai + ll > alen || memcmp(a + ai, p + 1, ll) != 0) {
                    free(out);
                    return NULL;
                }
                ai += ll, aline++;
            }
            if (*p == ' ' || *p == '+')
                memcpy(out + o, p + 1, ll), o += ll;
            p = nl + 1;
            if (nonl)
                p = strchr(p, '\n') + 1;
        }
    }
    memcpy(out + o, a + ai, alen - ai), o += alen - ai;
    out[o] = '\0';
    return out;
}

static char *diff_of(const char *a, const char *b, int *whole)
{
    size_t len;
    char *d = rules_diff(a, strlen(a), b, strlen(b), "A", "B", &len, whole);

    ck_assert_ptr_nonnull(d);
    ck_assert_uint_eq(len, strlen(d));
    return d;
}

/* d must turn a into b. */
static void patches(const char *a, const char *b, const char *d)
{
    if (!*d) {
        ck_assert_str_eq(a, b);
        return;
    }
    char *got = apply(a, d);
    ck_assert_msg(got != NULL, "the diff does not apply");
    ck_assert_msg(strcmp(got, b) == 0, "the diff does not give the second text");
    free(got);
}

/* diff -u's own answer for the two texts, or NULL when it is not there. */
static char *gnu_diff(const char *a, const char *b)
{
    char fa[] = "/tmp/rl-diff-a-XXXXXX", fb[] = "/tmp/rl-diff-b-XXXXXX", cmd[256];
    int da = mkstemp(fa), db = mkstemp(fb);
    static char out[4096];
    size_t n;
    FILE *p;

    ck_assert(da >= 0 && db >= 0);
    ck_assert(write(da, a, strlen(a)) == (ssize_t)strlen(a));
    ck_assert(write(db, b, strlen(b)) == (ssize_t)strlen(b));
    close(da), close(db);
    snprintf(cmd, sizeof(cmd), "diff -u --label A --label B %s %s 2>/dev/null", fa, fb);
    p = popen(cmd, "r");
    n = p ? fread(out, 1, sizeof(out) - 1, p) : 0;
    int st = p ? pclose(p) : -1;
    unlink(fa), unlink(fb);
    out[n] = '\0';
    /* 0 same, 1 differ; anything else: no diff here */
    return st == 0 || (st != -1 && WIFEXITED(st) && WEXITSTATUS(st) == 1) ? out : NULL;
}

START_TEST(small_edits)
{
    int whole;
    char *d = diff_of(cases[_i].a, cases[_i].b, &whole);
    const char *gnu = gnu_diff(cases[_i].a, cases[_i].b);

    ck_assert_msg(strcmp(d, cases[_i].want) == 0, "%s:\n%s", cases[_i].what, d);
    ck_assert_int_eq(whole, 0);
    if (gnu)
        ck_assert_msg(strcmp(d, gnu) == 0, "%s: diff -u says\n%s", cases[_i].what, gnu);
    patches(cases[_i].a, cases[_i].b, d);
    free(d);
}
END_TEST

/* Texts of n lines drawn from a few values (many equal lines: the search
 * has choices), every pair's diff patches. */
static char *random_text(unsigned *seed, int n, int values)
{
    char *t = malloc((size_t)n * 8 + 1);
    size_t o = 0;

    for (int i = 0; i < n; i++)
        o += (size_t)sprintf(t + o, "%d\n", rand_r(seed) % values);
    if (n && rand_r(seed) % 3 == 0)
        o--; /* no newline at the end */
    t[o] = '\0';
    return t;
}

START_TEST(random_pairs_patch)
{
    unsigned seed = 45;

    for (int i = 0; i < 300; i++) {
        int whole;
        char *a = random_text(&seed, rand_r(&seed) % 40, 2 + i % 6);
        char *b = random_text(&seed, rand_r(&seed) % 40, 2 + i % 6);
        char *d = diff_of(a, b, &whole);
        ck_assert_int_eq(whole, 0);
        patches(a, b, d);
        free(a), free(b), free(d);
    }
}
END_TEST

#define MIB (1024 * 1024)

/* About 1 MiB of rule-like lines; every `every`-th one says tag instead. */
static char *big_text(const char *tag, int every)
{
    char *t = malloc(MIB + 1);
    size_t o = 0;

    for (int i = 0; o + 40 < MIB; i++)
        o += (size_t)snprintf(t + o, 40, "rate = %d/1s ; %s\n", i,
                              every && i % every == 0 ? tag : "same");
    t[o] = '\0';
    return t;
}

/* One line changed in the middle of 1 MiB: one small hunk. */
START_TEST(large_one_change)
{
    char *a = big_text("", 0), *b = strdup(a);
    int whole;

    memcpy(strstr(b + strlen(b) / 2, "same"), "SAME", 4);
    char *d = diff_of(a, b, &whole);
    ck_assert_int_eq(whole, 0);
    ck_assert_uint_lt(strlen(d), 400);
    ck_assert_ptr_nonnull(strstr(d, "+rate = "));
    patches(a, b, d);
    free(a), free(b), free(d);
}
END_TEST

/* Every 7th line of 1 MiB changed: past RULES_DIFF_MAX_EDITS, shown as one
 * replacement between the common head and tail, which still patches. */
START_TEST(large_many_changes_whole)
{
    char *a = big_text("a", 7), *b = big_text("b", 7);
    int whole;

    char *d = diff_of(a, b, &whole);
    ck_assert_int_eq(whole, 1);
    ck_assert_ptr_nonnull(strstr(d, "\n@@ -1,"));
    patches(a, b, d);
    free(a), free(b), free(d);
}
END_TEST

/* Two unrelated 1 MiB texts (no line in common): the search's worst case,
 * bounded. */
START_TEST(large_unrelated)
{
    char *a = big_text("a", 1), *b = big_text("b", 1);
    int whole;

    char *d = diff_of(a, b, &whole);
    ck_assert_int_eq(whole, 1);
    patches(a, b, d);
    free(a), free(b), free(d);
}
END_TEST

int main(void)
{
    TCase *tc = tcase_create("rules_diff");

    tcase_set_timeout(tc, 60);
    CHECK_LOOP(tc, small_edits, cases);
    CHECK_ADD(tc, random_pairs_patch, large_one_change, large_many_changes_whole, large_unrelated);
    return check_run_case("rules_diff", tc);
}
