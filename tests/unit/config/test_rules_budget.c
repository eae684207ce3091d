/* SPDX-License-Identifier: Apache-2.0 */
/* test_rules_budget.c - the budget of a whole rule set (config.h:
 * CFG_BUDGET_*, config_budget.c): 1,024 rules of 16 regexes, each within
 * core/rx.h's own bounds, are refused by the check --push, --check and an
 * agent applying a version all run, the error naming the budget and its
 * figures without a line; a large realistic set passes, well within it. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check_util.h"
#include "config/config.h"
#include "core/strbuf.h"
#include "rules_redis/rules_redis.h"

static char dir[64];
static char ini[128];

/* The agent's INI, without rules, in a directory of the test's own. */
static void setup(void)
{
    FILE *fp;

    snprintf(dir, sizeof(dir), "/tmp/rl-budget-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(ini, sizeof(ini), "%s/agent.ini", dir);
    ck_assert_ptr_nonnull(fp = fopen(ini, "w"));
    fputs("[agent]\nworkers = 1\n[redis]\nurl = redis://127.0.0.1:1\n[rules]\nsource = redis\n",
          fp);
    fclose(fp);
}

static void teardown(void)
{
    unlink(ini);
    rmdir(dir);
}

/* The j-th regex of rule i, into out. */
typedef void pattern_fn(char *out, size_t cap, int i, int j);

/* nrules rules of nmatch match lines each, their regexes from pattern;
 * malloc'd, its length in *len, the regexes' bytes in *pbytes. */
static char *rule_set(int nrules, int nmatch, pattern_fn *pattern, size_t *len, size_t *pbytes)
{
    struct strbuf b = STRBUF_INIT;
    char re[RX_MAX_LEN + 1];

    *pbytes = 0;
    for (int i = 0; i < nrules; i++) {
        strbuf_printf(&b, "[rule:r%d]\nkey = ip, path\nrate = 100/1m\n", i);
        for (int j = 0; j < nmatch; j++) {
            pattern(re, sizeof(re), i, j);
            *pbytes += strlen(re);
            strbuf_printf(&b, "match = a%d %s\n", j, re);
        }
    }
    char *text = strbuf_finish(&b, len);
    ck_assert_ptr_nonnull(text);
    return text;
}

/* What --push and an agent run on the set: refused, err filled. */
static void refused(const char *text, size_t len, char *err, size_t errlen)
{
    struct config *cfg = (void *)1;

    ck_assert_int_eq(rules_redis_check_text(ini, text, len, "rules.ini", &cfg, err, errlen), -1);
    ck_assert_ptr_null(cfg);
    /* about the whole set: its name, no line; and where the budget is told */
    ck_assert_msg(strncmp(err, "rules.ini: rule set over its budget: ", 37) == 0, "%s", err);
    ck_assert_ptr_nonnull(strstr(err, "\"The budget of a rule set\""));
    ck_assert_ptr_eq(strchr(err, '\n'), err + strlen(err) - 1); /* one line */
}

static void finding(char *out, size_t cap, int i, int j)
{
    snprintf(out, cap, "^/p%d/(alpha|beta|gamma)[0-9]+/x%d[a-z]*$", i, j);
}

/* The set of the finding: 1,024 rules x 16 regexes of ~40 bytes (0.9 MB,
 * every regex well within core/rx.h's bounds): its text alone is over. */
START_TEST(huge_set_refused_by_its_text)
{
    char err[CHECK_ERRLEN], want[160];
    size_t len, pbytes;
    char *text = rule_set(CFG_MAX_RULES, CFG_MAX_MATCHES, finding, &len, &pbytes);

    ck_assert_uint_lt(len, CFG_MAX_RULES_TEXT); /* within every other bound */
    refused(text, len, err, sizeof(err));
    snprintf(want, sizeof(want), "its 16384 regexes hold %zu bytes of text, more than the %d ",
             pbytes, CFG_BUDGET_PATTERN_BYTES);
    ck_assert_msg(strstr(err, want), "%s", err);
    free(text);
}
END_TEST

static void tiny(char *out, size_t cap, int i, int j)
{
    snprintf(out, cap, "^/x%dy%d", i, j);
}

/* The same shape with regexes short enough for the text budget: their
 * compiled code (JIT included) goes over, and compiling stops there. */
START_TEST(huge_set_refused_by_its_code)
{
    char err[CHECK_ERRLEN], want[96];
    size_t len, pbytes;
    char *text = rule_set(CFG_MAX_RULES, CFG_MAX_MATCHES, tiny, &len, &pbytes);

    ck_assert_uint_le(pbytes, CFG_BUDGET_PATTERN_BYTES);
    refused(text, len, err, sizeof(err));
    snprintf(want, sizeof(want), "its regexes compile to more than %d bytes with their JIT code",
             CFG_BUDGET_COMPILED_BYTES);
    /* without JIT (a platform without it) the code alone may fit; on a slow
     * build (sanitizers) the CPU budget may go over first */
    if (!rx_jit_available() && !strstr(err, "over its budget")) {
        free(text);
        return;
    }
    ck_assert_msg(strstr(err, want) || strstr(err, "compiling its regexes took more than"), "%s",
                  err);
    ck_assert_msg(strstr(err, " of 16384)"), "%s", err);
    free(text);
}
END_TEST

static void costly(char *out, size_t cap, int i, int j)
{
    snprintf(out, cap, "(?:ab?){0,600}z");
}

/* Costly regexes (each under RX_MAX_COMPILED, with tens of KB of JIT code)
 * go over after a few dozen: the rest are never compiled. */
START_TEST(costly_regexes_refused)
{
    char err[CHECK_ERRLEN];
    size_t len, pbytes;
    char *text = rule_set(CFG_MAX_RULES, 1, costly, &len, &pbytes);

    refused(text, len, err, sizeof(err));
    ck_assert_msg(strstr(err, " of 1024)"), "%s", err);
    free(text);
}
END_TEST

/* An API path, a list of bot user agents, a host, methods. */
static void realistic(char *out, size_t cap, int i, int j)
{
    switch (j % 4) {
    case 0:
        snprintf(out, cap,
                 "^/api/v[0-9]+/(users|orders|items|carts|payments)/[0-9]+(/[a-z_]+)?"
                 "%d/%d$",
                 i, j);
        break;
    case 1:
        snprintf(out, cap,
                 "(?i)(curl|wget|python-requests|go-http-client|libwww-perl|scrapy|"
                 "okhttp|axios)/%d\\.%d",
                 i, j);
        break;
    case 2:
        snprintf(out, cap, "^(www\\.|api\\.)?shop%d-%d\\.example\\.(com|net|org)$", i, j);
        break;
    default:
        snprintf(out, cap, "^(GET|HEAD|POST)$");
        break;
    }
}

/* A large real rule set: 200 rules of 4 regexes of the shapes operators
 * write (API paths, bot user agents, hosts, methods). Accepted, and well
 * within each budget: a quarter of the text and half the code at most. */
START_TEST(large_realistic_set_accepted)
{
    struct config *cfg;
    char err[CHECK_ERRLEN];
    size_t len, pbytes;
    char *text = rule_set(200, 4, realistic, &len, &pbytes);

    ck_assert_msg(rules_redis_check_text(ini, text, len, "rules.ini", &cfg, err, sizeof(err)) == 0,
                  "%s", err);
    const struct cfg_regex_use *u = &cfg->regex_use;
    printf("  200 rules x 4 regexes: %zu bytes of text, %zu compiled (JIT included), %llu ms "
           "of CPU\n",
           u->pattern_bytes, u->compiled_bytes, (unsigned long long)(u->compile_us / 1000));
    ck_assert_uint_eq(u->regexes, 800);
    ck_assert_uint_eq(u->pattern_bytes, pbytes);
    ck_assert_uint_lt(u->pattern_bytes, CFG_BUDGET_PATTERN_BYTES / 4);
    ck_assert_uint_lt(u->compiled_bytes, CFG_BUDGET_COMPILED_BYTES / 2);
    ck_assert_ptr_nonnull(cfg->rules[199].matches[3].re);
    ck_assert_int_eq(check_re(cfg->rules[7].matches[0].re, "/api/v2/orders/427/0"), 1);
    ck_assert_int_eq(check_re(cfg->rules[7].matches[2].re, "www.shop7-2.example.net"), 1);
    config_free(cfg);
    free(text);
}
END_TEST

/* The text budget's edge, in a file (--check): 256 regexes of 1,024 bytes
 * (the longest one may be) are exactly the budget; one byte more is over,
 * and then nothing is compiled. */
START_TEST(text_budget_edge)
{
    char pattern[RX_MAX_LEN + 1], err[CHECK_ERRLEN];
    int n = CFG_BUDGET_PATTERN_BYTES / RX_MAX_LEN;
    struct strbuf b = STRBUF_INIT;
    struct config *cfg;
    size_t len;

    ck_assert_int_le(n, CFG_MAX_RULES);
    memset(pattern, 'a', RX_MAX_LEN);
    pattern[RX_MAX_LEN] = '\0';
    for (int i = 0; i < n; i++)
        strbuf_printf(&b, "[rule:r%d]\nkey = ip\nrate = 1/1m\nmatch = a %s\n", i, pattern);
    strbuf_printf(&b, "[rule:one-more]\nkey = ip\nrate = 1/1m\n");
    char *text = strbuf_finish(&b, &len);
    ck_assert_ptr_nonnull(text);
    cfg = check_config_ok(text);
    ck_assert_uint_eq(cfg->regex_use.pattern_bytes, CFG_BUDGET_PATTERN_BYTES);
    ck_assert_ptr_nonnull(cfg->rules[n - 1].matches[0].re);
    config_free(cfg);
    strbuf_printf(&b, "%smatch = a b\n", text);
    free(text);
    text = strbuf_finish(&b, &len);
    check_config_bad(text, err, sizeof(err));
    ck_assert_msg(strncmp(err,
                          "t.ini: rule set over its budget: its 257 regexes hold 262145 "
                          "bytes of text",
                          73) == 0,
                  "%s", err);
    free(text);
}
END_TEST

/* Compiled after the whole set is read, a bad regex is still named at its
 * own line, next to the other errors of the file. */
START_TEST(bad_regex_keeps_its_line)
{
    char err[CHECK_ERRLEN];

    check_config_bad("[rule:a]\nkey = ip\nrate = 1/1m\nmatch = path ^/ok\n"
                     "  method (unclosed\nburst = lots\n",
                     err, sizeof(err));
    ck_assert_msg(strstr(err, "t.ini:5: bad regex '(unclosed' in 'match': "), "%s", err);
    ck_assert_msg(strstr(err, "t.ini:6: "), "%s", err);
}
END_TEST

int main(void)
{
    TCase *tc = tcase_create("rules_budget");

    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 60); /* sanitizer builds compile thousands of regexes */
    CHECK_ADD(tc, huge_set_refused_by_its_text, huge_set_refused_by_its_code,
              costly_regexes_refused, large_realistic_set_accepted, text_budget_edge,
              bad_regex_keeps_its_line);
    return check_run_case("rules_budget", tc);
}
