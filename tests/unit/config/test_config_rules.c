/* SPDX-License-Identifier: Apache-2.0 */
/* test_config_rules.c - [rules] (where the rules come from) and rule text
 * from Redis, a cache file or --push: config_load_with_rules parses it with
 * the file's other sections, bounded (size, NUL, rule count), refusing any
 * section but [rule:*], with errors named after each source; and the
 * fleet's view of the rule set (rules_fleet.h) read from its script's reply. */
#include "config/config.h"

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check_util.h"
#include "http/config_page.h"
#include "rules_redis/rules_fleet.h"

#define REDIS_FILE                                                                                 \
    "[agent]\nmax_frame_size = 16380\n[redis]\nurl = redis://127.0.0.1:6379\n"                     \
    "[fallback]\nmode = closed\n[rules]\nsource = redis\ncache = /tmp/x/rules.ini\n"               \
    "[rule:own]\nrate = 1/s\n"

/* The agent's file, written to a temporary path (freed by the caller). */
static char *write_file(const char *text)
{
    char *path = strdup("/tmp/test_config_rules_XXXXXX");
    int fd = mkstemp(path);

    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    close(fd);
    return path;
}

static int load_rules(const char *file_text, const char *rules, struct config **cfg, char *err,
                      size_t errlen)
{
    char *path = write_file(file_text);
    int rc = config_load_with_rules(path, rules, strlen(rules), "redis:v2", cfg, err, errlen);

    unlink(path);
    free(path);
    return rc;
}

START_TEST(test_rules_defaults)
{
    struct config *cfg = check_config_ok("[rule:a]\nrate = 1/s\n");

    ck_assert_int_eq(cfg->rules_source, RULES_SOURCE_FILE);
    ck_assert_uint_eq(cfg->rules_poll_ms, 1000);
    ck_assert_ptr_null(cfg->rules_cache); /* a plain run writes no cache */
    ck_assert_uint_eq(cfg->rules_history, 10);
    config_free(cfg);
    /* with source = redis, the cache has its default path */
    unsetenv("STATE_DIRECTORY");
    cfg = check_config_ok("[redis]\nurl = redis://127.0.0.1:6379\n[rules]\nsource = redis\n");
    ck_assert_int_eq(cfg->rules_source, RULES_SOURCE_REDIS);
    ck_assert_str_eq(cfg->rules_cache, CFG_RULES_DEFAULT_CACHE);
    config_free(cfg);
    /* under systemd: the instance's own state directory (the first of a
     * list), so that spoa-ratelimit@a and @b never share a cache */
    setenv("STATE_DIRECTORY", "/var/lib/spoa-ratelimit/a/:/var/lib/other", 1);
    cfg = check_config_ok("[redis]\nurl = redis://127.0.0.1:6379\n[rules]\nsource = redis\n");
    ck_assert_str_eq(cfg->rules_cache, "/var/lib/spoa-ratelimit/a/rules.ini");
    config_free(cfg);
    /* an explicit cache wins; a relative directory is not systemd's: ignored */
    cfg = check_config_ok("[redis]\nurl = redis://127.0.0.1:6379\n[rules]\nsource = redis\n"
                          "cache = /tmp/r.ini\n");
    ck_assert_str_eq(cfg->rules_cache, "/tmp/r.ini");
    config_free(cfg);
    setenv("STATE_DIRECTORY", "state", 1);
    cfg = check_config_ok("[redis]\nurl = redis://127.0.0.1:6379\n[rules]\nsource = redis\n");
    ck_assert_str_eq(cfg->rules_cache, CFG_RULES_DEFAULT_CACHE);
    config_free(cfg);
    unsetenv("STATE_DIRECTORY");
    /* empty: none */
    cfg = check_config_ok(
        "[redis]\nurl = redis://127.0.0.1:6379\n[rules]\nsource = redis\ncache =\n");
    ck_assert_ptr_null(cfg->rules_cache);
    config_free(cfg);
}
END_TEST

START_TEST(test_rules_keys)
{
    struct config *cfg = check_config_ok("[redis]\nurl = redis://127.0.0.1:6379\n[rules]\nsource = "
                                         "redis\npoll = 250ms\ncache = /tmp/r.ini\nhistory = 3\n");
    size_t len;
    char *text;

    ck_assert_uint_eq(cfg->rules_poll_ms, 250);
    ck_assert_str_eq(cfg->rules_cache, "/tmp/r.ini");
    ck_assert_uint_eq(cfg->rules_history, 3);
    text = config_render(cfg, &len);
    ck_assert_ptr_nonnull(strstr(text, "[rules]\nsource = redis\npoll = 250ms\ncache = "
                                       "/tmp/r.ini\nhistory = 3\n"));
    free(text);
    config_free(cfg);
}
END_TEST

static const struct {
    const char *text, *err;
} bad_keys[] = {
    {"[rules]\nsource = etcd\n", "t.ini:2: bad value 'etcd' for 'source'"},
    {"[rules]\npoll = 10ms\n", "t.ini:2: duration '10ms' for 'poll' is too short"},
    {"[rules]\npoll = 1\n", "t.ini:2: bad duration '1' for 'poll'"},
    {"[rules]\nhistory = 0\n", "t.ini:2: bad number '0' for 'history'"},
    {"[rules]\nhistory = 1001\n", "t.ini:2: bad number '1001' for 'history'"},
    {"[rules]\nwatch = yes\n", "t.ini:2: unknown key 'watch' in [rules]"},
    {"[rules]\nsource = redis\n", "t.ini:2: source = redis needs a [redis] server"},
};

START_TEST(test_rules_bad_keys)
{
    char err[CHECK_ERRLEN];

    check_config_bad(bad_keys[_i].text, err, sizeof(err));
    ck_assert_msg(strstr(err, bad_keys[_i].err), "want %s, got %s", bad_keys[_i].err, err);
}
END_TEST

/* The file's non-rule sections apply to the rules from Redis (here
 * [fallback] mode's default for on_redis_down); the file's own rule is not
 * read. */
START_TEST(test_with_rules)
{
    char err[CHECK_ERRLEN];
    struct config *cfg = NULL;

    ck_assert_int_eq(load_rules(REDIS_FILE,
                                "[rule:a]\nrate = 5/s\nkey = src\n[rule:b]\nrate = "
                                "7/1m\n",
                                &cfg, err, sizeof(err)),
                     0);
    ck_assert_uint_eq(cfg->nrules, 2);
    ck_assert_str_eq(cfg->rules[0].name, "a");
    ck_assert_uint_eq(cfg->rules[0].rate_n, 5);
    ck_assert_int_eq(cfg->rules[0].on_redis_down, DOWN_CLOSED);
    ck_assert_str_eq(cfg->rules[1].name, "b");
    ck_assert_str_eq(cfg->redis_url, "redis://127.0.0.1:6379");
    ck_assert_str_eq(cfg->rules_cache, "/tmp/x/rules.ini");
    config_free(cfg);
    /* no rules at all: a valid (if permissive) rule set */
    ck_assert_int_eq(load_rules(REDIS_FILE, "; nothing\n", &cfg, err, sizeof(err)), 0);
    ck_assert_uint_eq(cfg->nrules, 0);
    config_free(cfg);
}
END_TEST

static const struct {
    const char *rules, *err;
} bad_rules[] = {
    /* a fleet's rule set holds rules only */
    {"[rule:a]\nrate = 1/s\n[agent]\nworkers = 1\n",
     "redis:v2:3: only [rule:*] sections can be pushed as rules, not [agent]\n"},
    {"[redis]\nurl = redis://evil\n",
     "redis:v2:1: only [rule:*] sections can be pushed as rules, not [redis]\n"},
    {"rate = 1/s\n", "redis:v2:1: key 'rate' outside any section\n"},
    /* the normal checks, named after the rule text */
    {"[rule:a]\nkey = src\n", "redis:v2:1: rule 'a' has no rate\n"},
    {"[rule:a]\nrate = 1/s\n[rule:a]\nrate = 2/s\n",
     "redis:v2:3: duplicate rule name 'a' (first at line 1)\n"},
    {"[rule:a]\nrate = 1/s\nmatch = path (a\n", "redis:v2:3: bad regex"},
    {"[rule:a]\nrate = 1/s\nfrobnicate = 1\n", "redis:v2:3: unknown key 'frobnicate' in [rule:a]"},
};

START_TEST(test_with_bad_rules)
{
    char err[CHECK_ERRLEN];
    struct config *cfg = (struct config *)1;

    ck_assert_int_eq(load_rules(REDIS_FILE, bad_rules[_i].rules, &cfg, err, sizeof(err)), -1);
    ck_assert_ptr_null(cfg);
    ck_assert_msg(strncmp(err, bad_rules[_i].err, strlen(bad_rules[_i].err)) == 0,
                  "want %s, got %s", bad_rules[_i].err, err);
}
END_TEST

/* Bounds before parsing: 1 MiB, no NUL byte; the rule count by the
 * parser's CFG_MAX_RULES. */
START_TEST(test_with_rules_bounds)
{
    char err[CHECK_ERRLEN];
    struct config *cfg = (struct config *)1;
    char *path = write_file(REDIS_FILE);
    size_t big = CFG_MAX_RULES_TEXT + 1;
    char *text = malloc(big + 1);

    /* comment lines of 64 bytes */
    for (size_t i = 0; i < big; i++)
        text[i] = i % 64 == 63 ? '\n' : ';';
    text[big] = '\0';
    ck_assert_int_eq(config_load_with_rules(path, text, big, "redis:v9", &cfg, err, sizeof(err)),
                     -1);
    ck_assert_str_eq(err, "redis:v9: larger than 1 MiB: not read\n");
    /* just at the cap: read (comments only) */
    text[big - 1] = '\0';
    text[big - 2] = '\n';
    ck_assert_int_eq(
        config_load_with_rules(path, text, big - 1, "redis:v9", &cfg, err, sizeof(err)), 0);
    config_free(cfg);
    ck_assert_int_eq(
        config_load_with_rules(path, "[rule:a]\0x", 10, "redis:v9", &cfg, err, sizeof(err)), -1);
    ck_assert_str_eq(err, "redis:v9: holds a NUL byte: not text\n");
    free(text);
    /* one rule more than a file may hold */
    size_t cap = (CFG_MAX_RULES + 1) * 32, at = 0;
    text = malloc(cap);
    for (int i = 0; i <= CFG_MAX_RULES; i++)
        at += (size_t)snprintf(text + at, cap - at, "[rule:r%d]\nrate = 1/s\n", i);
    ck_assert_int_eq(config_load_with_rules(path, text, at, "redis:v9", &cfg, err, sizeof(err)),
                     -1);
    ck_assert_ptr_nonnull(strstr(err, "too many rules (max 1024)"));
    free(text);
    unlink(path);
    free(path);
}
END_TEST

/* A bad agent file is still reported under its own name. */
START_TEST(test_with_rules_bad_file)
{
    char err[CHECK_ERRLEN];
    struct config *cfg = NULL;

    ck_assert_int_eq(load_rules("[agent]\nworkers = x\n[rule:own]\nrate = nope\n",
                                "[rule:a]\nrate = 1/s\n", &cfg, err, sizeof(err)),
                     -1);
    ck_assert_ptr_nonnull(strstr(err, ":2: bad number 'x' for 'workers'"));
    /* the file's own rules are not read, so their errors do not count */
    ck_assert_ptr_null(strstr(err, "nope"));
}
END_TEST

static void pending_cb(void *ctx, const char *name, const char *in_force, const char *file)
{
    char *seen = ctx;

    snprintf(seen + strlen(seen), 256 - strlen(seen), "%s=%s>%s;", name, in_force, file);
}

/* [rules] source, poll and cache take effect at a restart: a reload that
 * changes them says so (the log and GET /config). */
START_TEST(test_rules_restart_only)
{
    struct config *a = check_config_ok("[redis]\nurl = redis://127.0.0.1:6379\n");
    struct config *b = check_config_ok("[redis]\nurl = redis://127.0.0.1:6379\n[rules]\n"
                                       "source = redis\npoll = 2s\ncache = /tmp/c.ini\n"
                                       "history = 3\n");
    char seen[256] = "";

    ck_assert_uint_eq(config_page_pending(a, b, pending_cb, seen), 3);
    ck_assert_str_eq(seen, "[rules] source=file>redis;[rules] poll=1000ms>2000ms;"
                           "[rules] cache=>/tmp/c.ini;");
    config_free(a);
    config_free(b);
}
END_TEST

/* lua/rules_fleet.lua's reply: current, Redis time, then per agent: id,
 * seen, version, error. */
static int parse(size_t n, const char *const *str, struct rules_fleet *f)
{
    size_t len[16];

    for (size_t i = 0; i < n; i++)
        len[i] = strlen(str[i]);
    return rules_fleet_parse(n, str, len, f);
}

START_TEST(test_fleet_view)
{
    const char *const reply[] = {"3",
                                 "100000",
                                 "host=lb-1 pid=42 listen=127.0.0.1:12345",
                                 "99000",
                                 "3",
                                 "",
                                 "host=lb-2 pid=7 listen=unix:/run/x",
                                 "95500",
                                 "2",
                                 "version 3: redis:v3:2: bad rate 'x\"\x01'"};
    struct rules_fleet f;
    size_t len;

    ck_assert_int_eq(parse(10, reply, &f), 0);
    ck_assert_uint_eq(f.current, 3);
    ck_assert_uint_eq(f.n, 2);
    ck_assert_str_eq(f.agents[0].host, "lb-1");
    ck_assert_int_eq(f.agents[0].pid, 42);
    ck_assert_str_eq(f.agents[1].listen, "unix:/run/x");
    ck_assert_uint_eq(f.agents[1].version, 2);
    ck_assert_uint_eq(f.agents[1].age_ms, 4500);
    char *json = rules_fleet_json(&f, &len);
    ck_assert_str_eq(json,
                     "{\"current\":3,\"off_current\":1,\"agents\":[{\"host\":\"lb-1\","
                     "\"pid\":42,\"listen\":\"127.0.0.1:12345\",\"version\":3,\"current\":true,"
                     "\"error\":\"\",\"last_seen_s\":1.0},{\"host\":\"lb-2\",\"pid\":7,"
                     "\"listen\":\"unix:/run/x\",\"version\":2,\"current\":false,"
                     "\"error\":\"version 3: redis:v3:2: bad rate 'x\\\"\\u0001'\","
                     "\"last_seen_s\":4.5}]}\n");
    free(json);
    char *text = rules_fleet_text(&f);
    ck_assert_ptr_nonnull(strstr(text, "current version: 3; 2 agents, 1 off it\n"));
    ck_assert_ptr_nonnull(strstr(text, "\n  lb-1 "));
    ck_assert_ptr_nonnull(strstr(text, "\n! lb-2 "));
    ck_assert_ptr_null(strchr(text, '\x01')); /* no control byte reaches a terminal */
    free(text);
    /* --fleet's exit status and the agents it names */
    char *verdict = rules_fleet_verdict(&f);
    ck_assert_str_eq(verdict, "1 of 2 agents off version 3 or with an apply error: lb-2 pid 7 "
                              "(unix:/run/x) on 2 with an error");
    free(verdict);
    rules_fleet_clear(&f);
    /* on the current version, but reporting an error: named too */
    const char *const err_on_current[] = {"3",     "100000", "host=lb-1 pid=42 listen=:1",
                                          "99000", "3",      "version 2: x"};
    ck_assert_int_eq(parse(6, err_on_current, &f), 0);
    verdict = rules_fleet_verdict(&f);
    ck_assert_str_eq(verdict, "1 of 1 agents off version 3 or with an apply error: lb-1 pid 42 "
                              "(:1) on 3 with an error");
    free(verdict);
    rules_fleet_clear(&f);
    /* above the current version: the store lost it, and the way out */
    const char *const above[] = {"0", "100000", "host=lb-1 pid=42 listen=:1", "99000", "7", ""};
    ck_assert_int_eq(parse(6, above, &f), 0);
    verdict = rules_fleet_verdict(&f);
    ck_assert_str_eq(verdict, "1 of 1 agents off version 0 or with an apply error: lb-1 pid 42 "
                              "(:1) on 7. Agents run a version above the current one: the rule "
                              "store lost it (warning rules_store_lost); push the rules again "
                              "with --push RULES --force");
    free(verdict);
    rules_fleet_clear(&f);
    /* all on it: nothing to say */
    ck_assert_int_eq(parse(6, reply, &f), 0);
    verdict = rules_fleet_verdict(&f);
    ck_assert_str_eq(verdict, "");
    free(verdict);
    rules_fleet_clear(&f);
    /* no agent yet */
    ck_assert_int_eq(parse(2, reply, &f), 0);
    ck_assert_uint_eq(f.n, 0);
    rules_fleet_clear(&f);
}
END_TEST

/* Replies without the script's shape are refused whole. */
START_TEST(test_fleet_bad_replies)
{
    const char *const short_reply[] = {"3"};
    const char *const odd[] = {"3", "100", "host=a", "99", "3"};
    const char *const not_number[] = {"3", "100", "host=a", "soon", "3", ""};
    const char *const bad_version[] = {"3", "100", "host=a", "99", "-1", ""};
    const char *const huge[] = {"99999999999999999999", "100"};
    struct rules_fleet f;

    ck_assert_int_eq(parse(1, short_reply, &f), -1);
    ck_assert_int_eq(parse(5, odd, &f), -1);
    ck_assert_int_eq(parse(6, not_number, &f), -1);
    ck_assert_int_eq(parse(6, bad_version, &f), -1);
    ck_assert_int_eq(parse(2, huge, &f), -1);
    ck_assert_uint_eq(f.n, 0);
    ck_assert_ptr_null(f.agents);
}
END_TEST

int main(void)
{
    TCase *tc = tcase_create("rules");

    CHECK_ADD(tc, test_rules_defaults, test_rules_keys, test_with_rules, test_with_rules_bounds,
              test_with_rules_bad_file, test_fleet_view, test_fleet_bad_replies,
              test_rules_restart_only);
    CHECK_LOOP(tc, test_rules_bad_keys, bad_keys);
    CHECK_LOOP(tc, test_with_bad_rules, bad_rules);
    return check_run_case("config_rules", tc);
}
