/* SPDX-License-Identifier: Apache-2.0 */
/* test_rules_redis.c - the pure parts of the rule store (rules_redis.h):
 * the one check every rule set passes (--push, --rollback, an agent applying
 * a version, the cache at start), and the cache file, written by two agents
 * of one host at once, never through a symlink planted at its names. */
#include <check.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check_util.h"
#include "config/config.h"
#include "rules_redis/rules_redis.h"

#define GOOD "[rule:api]\nkey = key\nrate = 10/1m\n"

static char dir[64];
static char ini[128];

/* A directory of the test's own, and the agent's INI in it (no rules). */
static void setup(void)
{
    FILE *fp;

    snprintf(dir, sizeof(dir), "/tmp/rl-rules-store-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(ini, sizeof(ini), "%s/agent.ini", dir);
    ck_assert_ptr_nonnull(fp = fopen(ini, "w"));
    fputs("[agent]\nworkers = 1\n[redis]\nurl = redis://127.0.0.1:1\n[rules]\nsource = redis\n",
          fp);
    fclose(fp);
}

static void teardown(void)
{
    char cmd[128];

    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    ck_assert_int_eq(system(cmd), 0);
}

/* The names in the directory other than agent.ini, space-separated. */
static void others(char *out, size_t cap)
{
    DIR *d = opendir(dir);
    struct dirent *e;

    out[0] = '\0';
    ck_assert_ptr_nonnull(d);
    while ((e = readdir(d))) {
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..") && strcmp(e->d_name, "agent.ini"))
            snprintf(out + strlen(out), cap - strlen(out), "%s ", e->d_name);
    }
    closedir(d);
}

static const struct {
    const char *text;
    const char *err; /* NULL: passes */
} texts[] = {
    {GOOD, NULL},
    {"", "v: no [rule:*] section: every agent would allow every request"},
    {"; no rules, comments only\n\n", "v: no [rule:*] section"},
    {"[rule:api]\nkey = key\nrate = lots\n", "v:3: bad rate 'lots'"},
    {GOOD "[agent]\nworkers = 64\n", "v:4: only [rule:*] sections can be pushed"},
};

START_TEST(check_text)
{
    char err[CHECK_ERRLEN] = "";
    struct config *cfg = NULL;
    int rc = rules_redis_check_text(ini, texts[_i].text, strlen(texts[_i].text), "v", &cfg, err,
                                    sizeof(err));

    if (!texts[_i].err) {
        ck_assert_msg(rc == 0, "refused: %s", err);
        ck_assert_ptr_nonnull(cfg);
        ck_assert_uint_eq(cfg->nrules, 1);
        config_free(cfg);
    } else {
        ck_assert_int_eq(rc, -1);
        ck_assert_ptr_null(cfg);
        ck_assert_msg(strstr(err, texts[_i].err), "%s", err);
    }
}
END_TEST

/* A version from Redis: its sha256 first, then the same check. */
START_TEST(check_version)
{
    char sha[65], empty_sha[65], err[CHECK_ERRLEN];
    struct config *cfg = NULL;

    rules_redis_sha256(GOOD, strlen(GOOD), sha);
    rules_redis_sha256("", 0, empty_sha);
    ck_assert_int_eq(
        rules_redis_check_version(ini, GOOD, strlen(GOOD), sha, "redis:v1", &cfg, err, sizeof(err)),
        0);
    ck_assert_uint_eq(cfg->nrules, 1);
    config_free(cfg);
    /* no checksum, or another text's: refused before it is parsed */
    ck_assert_int_eq(
        rules_redis_check_version(ini, GOOD, strlen(GOOD), "", "redis:v2", &cfg, err, sizeof(err)),
        -1);
    ck_assert_ptr_null(cfg);
    ck_assert_str_eq(err, "redis:v2: no sha256: not a version --push wrote\n");
    ck_assert_int_eq(rules_redis_check_version(ini, GOOD, strlen(GOOD), NULL, "redis:v2", NULL, err,
                                               sizeof(err)),
                     -1);
    ck_assert_int_eq(rules_redis_check_version(ini, GOOD, strlen(GOOD), empty_sha, "redis:v3", NULL,
                                               err, sizeof(err)),
                     -1);
    ck_assert_str_eq(err, "redis:v3: its sha256 does not match its text\n");
    ck_assert_int_eq(rules_redis_check_version(ini, GOOD, strlen(GOOD), "abc", "redis:v3", NULL,
                                               err, sizeof(err)),
                     -1);
    /* an empty set with its right checksum: still refused */
    ck_assert_int_eq(
        rules_redis_check_version(ini, "", 0, empty_sha, "redis:v4", NULL, err, sizeof(err)), -1);
    ck_assert_msg(strstr(err, "redis:v4: no [rule:*] section"), "%s", err);
}
END_TEST

START_TEST(cache_round_trip)
{
    char path[160], err[512], left[256];
    char *text;
    size_t len;
    uint64_t version;

    snprintf(path, sizeof(path), "%s/rules.ini", dir);
    ck_assert_int_eq(rules_redis_write_cache(path, GOOD, strlen(GOOD), 7, err, sizeof(err)), 0);
    ck_assert_int_eq(rules_redis_read_cache(path, &text, &len, &version, err, sizeof(err)), 0);
    ck_assert_uint_eq(version, 7);
    ck_assert_uint_eq(len, strlen(GOOD));
    ck_assert_str_eq(text, GOOD);
    free(text);
    others(left, sizeof(left));
    ck_assert_str_eq(left, "rules.ini "); /* no temporary file left */
    /* a directory that does not exist: said, nothing left anywhere */
    snprintf(path, sizeof(path), "%s/gone/rules.ini", dir);
    ck_assert_int_eq(rules_redis_write_cache(path, GOOD, strlen(GOOD), 8, err, sizeof(err)), -1);
    ck_assert_msg(strstr(err, "cannot write"), "%s", err);
    others(left, sizeof(left));
    ck_assert_str_eq(left, "rules.ini ");
}
END_TEST

/* The contents of a small file, "" when unreadable. */
static void slurp(const char *path, char *out, size_t cap)
{
    FILE *fp = fopen(path, "r");
    size_t n = fp ? fread(out, 1, cap - 1, fp) : 0;

    out[n] = '\0';
    if (fp)
        fclose(fp);
}

/* Symlinks planted where a writer with fixed names would follow them (the
 * old "PATH.tmp", and the cache path itself) lead nowhere: the victim file
 * stays as it was, the cache becomes a file of its own, and the only new
 * name is the cache's (the temp file is made with O_EXCL: mkstemp). */
START_TEST(cache_symlinks_not_followed)
{
    char path[160], tmp[176], victim[160], err[512], got[256], left[256];
    FILE *fp;

    snprintf(path, sizeof(path), "%s/rules.ini", dir);
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    snprintf(victim, sizeof(victim), "%s/victim", dir);
    ck_assert_ptr_nonnull(fp = fopen(victim, "w"));
    fputs("precious\n", fp);
    fclose(fp);
    ck_assert_int_eq(symlink(victim, tmp), 0);
    ck_assert_int_eq(symlink(victim, path), 0);
    ck_assert_int_eq(rules_redis_write_cache(path, GOOD, strlen(GOOD), 9, err, sizeof(err)), 0);
    slurp(victim, got, sizeof(got));
    ck_assert_str_eq(got, "precious\n");
    struct stat st;
    ck_assert_int_eq(lstat(path, &st), 0);
    ck_assert(S_ISREG(st.st_mode));
    ck_assert_uint_eq(st.st_mode & 0777, 0640);
    ck_assert_int_eq(lstat(tmp, &st), 0);
    ck_assert(S_ISLNK(st.st_mode)); /* untouched */
    unlink(tmp);
    unlink(victim);
    others(left, sizeof(left));
    ck_assert_str_eq(left, "rules.ini ");
}
END_TEST

#define WRITES 300

/* Version v's text: a few KiB, so that writes take long enough to overlap. */
static size_t text_of(uint64_t v, char *out, size_t cap)
{
    size_t n = (size_t)snprintf(out, cap, "[rule:r%llu]\nkey = key\nrate = %llu/1m\n",
                                (unsigned long long)v, (unsigned long long)v);
    while (n + 40 < cap && n < 6000)
        n += (size_t)snprintf(out + n, cap - n, "; padding of version %llu\n",
                              (unsigned long long)v);
    return n;
}

/* Two agents of one host, one cache path: each write is whole (a reader
 * never sees one version's line over another's text), none fails, and no
 * temporary file is left. A fixed temporary name fails this: one writer
 * truncates the file the other renames, or renames it away first. */
START_TEST(cache_two_writers)
{
    char path[160], err[512], want[8192], left[256];
    pid_t kids[2];
    int reads = 0;

    snprintf(path, sizeof(path), "%s/rules.ini", dir);
    for (int k = 0; k < 2; k++) {
        ck_assert_int_ne(kids[k] = fork(), -1);
        if (kids[k] == 0) {
            int failed = 0;
            for (uint64_t i = 1; i <= WRITES; i++) {
                uint64_t v = (uint64_t)(k + 1) * 100000 + i;
                size_t n = text_of(v, want, sizeof(want));
                failed += rules_redis_write_cache(path, want, n, v, err, sizeof(err)) < 0;
            }
            _exit(failed ? 1 : 0);
        }
    }
    for (int done = 0; done < 2;) {
        char *text;
        size_t len;
        uint64_t version;
        if (rules_redis_read_cache(path, &text, &len, &version, err, sizeof(err)) == 0) {
            size_t n = text_of(version, want, sizeof(want));
            ck_assert_msg(len == n && memcmp(text, want, n) == 0, "version %llu: torn text",
                          (unsigned long long)version);
            free(text);
            reads++;
        }
        done = 0;
        for (int k = 0; k < 2; k++) {
            int st;
            if (kids[k] > 0 && waitpid(kids[k], &st, WNOHANG) == kids[k]) {
                ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "a writer failed");
                kids[k] = 0;
            }
            done += kids[k] == 0;
        }
    }
    /* the last write stands whole whoever made it */
    char *text;
    size_t len;
    uint64_t version;
    ck_assert_int_eq(rules_redis_read_cache(path, &text, &len, &version, err, sizeof(err)), 0);
    ck_assert(version % 100000 == WRITES);
    ck_assert_uint_eq(len, text_of(version, want, sizeof(want)));
    free(text);
    printf("  two writers, %d writes each: %d whole reads while they wrote\n", WRITES, reads);
    others(left, sizeof(left));
    ck_assert_str_eq(left, "rules.ini ");
}
END_TEST

int main(void)
{
    TCase *tc = tcase_create("rules_redis");

    tcase_add_checked_fixture(tc, setup, teardown);
    CHECK_LOOP(tc, check_text, texts);
    CHECK_ADD(tc, check_version, cache_round_trip, cache_symlinks_not_followed, cache_two_writers);
    return check_run_case("rules_redis", tc);
}
