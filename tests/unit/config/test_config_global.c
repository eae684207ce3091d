/* SPDX-License-Identifier: Apache-2.0 */
/* test_config_global.c - the configuration of regions (v1.2, doc/design.md
 * "Regions"): [global] (the Redis every region shares: [redis]'s connection
 * keys, interval, max_fraction, region), a rule's scope, their errors, the
 * region's default derived from [redis], scope in rule text from Redis,
 * the printed form, the restart-only settings, and the store options built
 * from [global] (store_options_from_global). */
#include "config/config.h"

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check_util.h"
#include "http/config_page.h"
#include "store/store.h"

#define REDIS "[redis]\nurl = redis://10.0.0.1:6379/2\n"

/* A file written to a temporary path (freed by the caller). */
static char *write_file(const char *text)
{
    char *path = strdup("/tmp/test_config_global_XXXXXX");
    int fd = mkstemp(path);

    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    close(fd);
    return path;
}

/* ---- keys and defaults ------------------------------------------------------- */

START_TEST(test_global_every_key)
{
    char *pwfile = write_file("pw-from-file\n");
    char text[1024];
    struct config *cfg;

    snprintf(text, sizeof(text),
             REDIS "[global]\nsentinel = g1:26379, g2:26379\nmaster = gmaster\n"
                   "timeout = 300ms\nkeepalive = 0\nprefix = {g}:\nusername = claimer\n"
                   "password_file = %s\nsentinel_username = sen\nsentinel_password = senpw\n"
                   "interval = 100ms\nmax_fraction = 0.5\nreserve = 0.4\nregion = eu-west\n",
             pwfile);
    cfg = check_config_ok(text);
    ck_assert_int_eq(config_global(cfg), 1);
    ck_assert_str_eq(cfg->global_sentinel, "g1:26379,g2:26379");
    ck_assert_double_eq(cfg->global_reserve, 0.4);
    ck_assert_uint_eq(cfg->global_sentinel_hosts.n, 2);
    ck_assert_str_eq(cfg->global_sentinel_hosts.list[1].host, "g2");
    ck_assert_int_eq(cfg->global_sentinel_hosts.list[1].port, 26379);
    ck_assert_str_eq(cfg->global_master, "gmaster");
    ck_assert_uint_eq(cfg->global_timeout_ms, 300);
    ck_assert_uint_eq(cfg->global_keepalive_ms, 0);
    ck_assert_str_eq(cfg->global_prefix, "{g}:");
    ck_assert_str_eq(cfg->global_username, "claimer");
    ck_assert_str_eq(cfg->global_password_file, pwfile);
    ck_assert_str_eq(cfg->global_auth_user, "claimer");
    ck_assert_str_eq(cfg->global_auth_password, "pw-from-file");
    ck_assert_str_eq(cfg->global_sentinel_username, "sen");
    ck_assert_str_eq(cfg->global_sentinel_password, "senpw");
    ck_assert_uint_eq(cfg->global_interval_ms, 100);
    ck_assert_double_eq(cfg->global_max_fraction, 0.5);
    ck_assert_str_eq(cfg->global_region, "eu-west");
    ck_assert_int_eq(cfg->global_region_derived, 0);
    /* [redis] is untouched by [global]'s keys */
    ck_assert_ptr_null(cfg->redis_auth_password);
    ck_assert_str_eq(cfg->redis_prefix, "rl:");
    ck_assert_uint_eq(cfg->redis_timeout_ms, 100);
    config_free(cfg);

    /* cluster, and the url's own credentials */
    cfg = check_config_ok(REDIS "[global]\ncluster = c1:7000,\n  c2:7001\npassword = p\n");
    ck_assert_str_eq(cfg->global_cluster, "c1:7000,c2:7001");
    ck_assert_uint_eq(cfg->global_cluster_hosts.n, 2);
    ck_assert_str_eq(cfg->global_auth_password, "p");
    ck_assert_ptr_null(cfg->global_auth_user);
    config_free(cfg);
    cfg = check_config_ok(REDIS "[global]\nurl = redis://u%40x:p%3Aw@g.example:6380/3\n");
    ck_assert_str_eq(cfg->global_server.addr.tcp.host, "g.example");
    ck_assert_int_eq(cfg->global_server.addr.tcp.port, 6380);
    ck_assert_int_eq(cfg->global_server.db, 3);
    ck_assert_str_eq(cfg->global_auth_user, "u@x");
    ck_assert_str_eq(cfg->global_auth_password, "p:w");
    config_free(cfg);
    unlink(pwfile);
    free(pwfile);
}
END_TEST

START_TEST(test_global_defaults)
{
    struct config *cfg = check_config_ok(REDIS "[global]\nurl = redis://g.example:6379\n"
                                               "[rule:a]\nrate = 1/s\n");

    ck_assert_int_eq(config_global(cfg), 1);
    ck_assert_uint_eq(cfg->global_timeout_ms, 1000);
    ck_assert_uint_eq(cfg->global_keepalive_ms, 1000);
    ck_assert_str_eq(cfg->global_prefix, "rl:");
    ck_assert_uint_eq(cfg->global_interval_ms, 1000);
    ck_assert_double_eq(cfg->global_max_fraction, 0.25);
    ck_assert_double_eq(cfg->global_reserve, 0.2);
    ck_assert_str_eq(cfg->global_region, "10.0.0.1:6379/2");
    ck_assert_int_eq(cfg->global_region_derived, 1);
    ck_assert_ptr_null(cfg->global_auth_password);
    ck_assert_int_eq(cfg->rules[0].scope, SCOPE_REGION);
    config_free(cfg);

    /* no [global]: nothing global, no region */
    cfg = check_config_ok(REDIS "[rule:a]\nrate = 1/s\n");
    ck_assert_int_eq(config_global(cfg), 0);
    ck_assert_ptr_null(cfg->global_region);
    ck_assert_int_eq(cfg->rules[0].scope, SCOPE_REGION);
    config_free(cfg);
    cfg = check_config_ok("[rule:a]\nrate = 1/s\nscope = region\n");
    ck_assert_int_eq(cfg->rules[0].scope, SCOPE_REGION);
    config_free(cfg);
}
END_TEST

/* The region's default names the [redis] topology as configured, so that
 * two regions with different Redis get different names. */
static const struct {
    const char *redis;
    const char *region;
} derived[] = {
    {"url = redis://10.0.0.1:6379\n", "10.0.0.1:6379/0"},
    {"url = redis://10.0.0.1:6379/5\n", "10.0.0.1:6379/5"},
    {"url = redis://:pw@redis.eu.example:6380/1\n", "redis.eu.example:6380/1"},
    {"url = redis://[::1]:6379\n", "[::1]:6379/0"},
    {"url = unix:/run/redis/redis.sock\n", "unix:/run/redis/redis.sock/0"},
    {"sentinel = s1:26379, s2:26379\nmaster = eu\n", "eu@s1:26379"},
    {"cluster = c1.us:7000, c2.us:7000\n", "cluster@c1.us:7000"},
};

START_TEST(test_region_derived)
{
    char text[512];
    struct config *cfg;

    snprintf(text, sizeof(text), "[redis]\n%s[global]\nurl = redis://g:6379\n", derived[_i].redis);
    cfg = check_config_ok(text);
    ck_assert_str_eq(cfg->global_region, derived[_i].region);
    ck_assert_int_eq(cfg->global_region_derived, 1);
    config_free(cfg);
    /* set, it is taken as written */
    snprintf(text, sizeof(text), "[redis]\n%s[global]\nurl = redis://g:6379\nregion = ap\n",
             derived[_i].redis);
    cfg = check_config_ok(text);
    ck_assert_str_eq(cfg->global_region, "ap");
    ck_assert_int_eq(cfg->global_region_derived, 0);
    config_free(cfg);
}
END_TEST

/* A rule's scope, on each rule it may be set on. */
START_TEST(test_scope_parsed)
{
    struct config *cfg = check_config_ok(REDIS "[rule:g]\nrate = 20/1s\nburst = 10\n"
                                               "scope = global\n[rule:r]\nrate = 1/s\n"
                                               "scope = region\n[rule:s]\nrate = 1/s\n"
                                               "shadow = yes\nscope = global\n"
                                               "[global]\nurl = redis://g:6379\n");

    ck_assert_int_eq(cfg->rules[0].scope, SCOPE_GLOBAL);
    ck_assert_int_eq(cfg->rules[1].scope, SCOPE_REGION);
    /* a shadow rule may be global */
    ck_assert_int_eq(cfg->rules[2].scope, SCOPE_GLOBAL);
    ck_assert_int_eq(cfg->rules[2].shadow, 1);
    config_free(cfg);
    /* [agent] shadow = yes too */
    cfg = check_config_ok("[agent]\nshadow = yes\n" REDIS "[global]\nurl = redis://g:6379\n"
                          "[rule:g]\nrate = 1/s\nscope = global\n");
    ck_assert_int_eq(cfg->rules[0].scope, SCOPE_GLOBAL);
    config_free(cfg);
}
END_TEST

/* ---- errors ------------------------------------------------------------------- */

static const struct {
    const char *text;
    const char *err; /* the whole error output */
} bad[] = {
    /* a region decides from its own Redis: [global] needs [redis] */
    {"[global]\nurl = redis://g:6379\n",
     "t.ini:1: [global] needs a [redis] server (url, cluster or sentinel): each region decides "
     "from its own Redis, never from the global one\n"},
    {REDIS "[global]\ninterval = 2s\n",
     "t.ini:3: [global] needs one of url, cluster or sentinel (the Redis every region shares)\n"},
    {REDIS "[global]\nurl = redis://g:6379\ncluster = c:7000\n",
     "t.ini:5: [global] 'url' and 'cluster' cannot be used together (lines 4 and 5)\n"},
    {REDIS "[global]\nsentinel = s:26379\nurl = redis://g:6379\nmaster = m\n",
     "t.ini:5: [global] 'url' and 'sentinel' cannot be used together (lines 4 and 5)\n"},
    {REDIS "[global]\ncluster = c:7000\nsentinel = s:26379\nmaster = m\n",
     "t.ini:5: [global] 'cluster' and 'sentinel' cannot be used together (lines 4 and 5)\n"},
    {REDIS "[global]\nsentinel = s:26379\n", "t.ini:4: [global] 'sentinel' needs 'master'\n"},
    {REDIS "[global]\nurl = redis://g:6379\nmaster = m\n",
     "t.ini:5: [global] 'master' is only used with 'sentinel'\n"},
    {REDIS "[global]\nurl = redis://g:6379\npassword = a\npassword_file = /nonexistent/x\n",
     "t.ini:6: [global] 'password' and 'password_file' cannot be used together (lines 5 and 6)\n"
     "t.ini:6: [global] cannot read password_file '/nonexistent/x': No such file or directory\n"},
    {REDIS "[global]\nurl = redis://:x@g:6379\npassword = a\n",
     "t.ini:5: [global] 'password' and the url's password cannot be used together (lines 4 and "
     "5)\n"},
    {REDIS "[global]\nurl = redis://g:6379\nusername = u\n",
     "t.ini:5: [global] 'username' needs a password (password, password_file or the url's)\n"},
    {REDIS "[global]\nurl = redis://g:6379\nsentinel_password = x\n",
     "t.ini:5: [global] 'sentinel_password' is only used with 'sentinel'\n"},
    {REDIS "[global]\nurl = redis://g:6379\nprefix = g{x:\n",
     "t.ini:5: prefix 'g{x:': a '{' must be closed by '}' (a Redis Cluster hashtag), or client "
     "keys would choose their slot\n"},
    {REDIS "[global]\nurl = redis://g:6379\ninterval = 50ms\n",
     "t.ini:5: duration '50ms' for 'interval' is too short: at least 100ms\n"},
    {REDIS "[global]\nurl = redis://g:6379\nmax_fraction = 0\n",
     "t.ini:5: bad value '0' for 'max_fraction' (expected a number in (0, 1])\n"},
    {REDIS "[global]\nurl = redis://g:6379\nmax_fraction = 1.5\n",
     "t.ini:5: bad value '1.5' for 'max_fraction' (expected a number in (0, 1])\n"},
    {REDIS "[global]\nurl = redis://g:6379\nreserve = 0.6\n",
     "t.ini:5: [global] reserve = 0.6: at most 0.5 (the share of a key's burst set aside for "
     "the regions' reserves; the rest is the global bucket)\n"},
    {REDIS "[global]\nurl = redis://g:6379\nreserve = -1\n",
     "t.ini:5: bad value '-1' for 'reserve' (expected a number in [0, 1])\n"},
    {REDIS "[global]\nurl = redis://g:6379\nregion = eu west\n",
     "t.ini:5: bad region 'eu west' (1 to 128 printable characters, without blanks, quotes, "
     "'\\', ',', ';', '#' or '=')\n"},
    {REDIS "[global]\nurl = redis://g:6379\nregion =\n", "t.ini:5: empty value for 'region'\n"},
    {REDIS "[global]\nurl = redis://g:6379\nttl = 1s\n",
     "t.ini:5: unknown key 'ttl' in [global]\n"},
    {REDIS "[global]\nurl = g:6379\n",
     "t.ini:4: bad url 'g:6379' (expected redis://[[user]:password@]host:port[/db] or "
     "unix:/path)\n"},
    /* scope */
    {REDIS "[rule:g]\nrate = 1/s\nscope = global\n",
     "t.ini:3: rule 'g' has scope = global but there is no [global] section (url, cluster or "
     "sentinel: the Redis every region shares)\n"},
    {REDIS "[rule:g]\nrate = 1/s\nscope = world\n",
     "t.ini:5: bad value 'world' for 'scope' (expected region or global)\n"},
    {REDIS "[global]\nurl = redis://g:6379\n[rule:g]\nrate = 1/s\nscope = global\n"
           "algorithm = sliding-window\n",
     "t.ini:7: scope = global supports token buckets only (rule 'g' is algorithm = "
     "sliding-window): use scope = region, or algorithm = token-bucket\n"},
    {REDIS "[global]\nurl = redis://g:6379\n[rule:g]\nrate = 1/s\nalgorithm = fixed-window\n"
           "scope = global\n",
     "t.ini:8: scope = global supports token buckets only (rule 'g' is algorithm = "
     "fixed-window): use scope = region, or algorithm = token-bucket\n"},
    {REDIS "[global]\nurl = redis://g:6379\n[rule:c]\nalgorithm = concurrency\nlimit = 2\n"
           "release = done\nscope = global\n",
     "t.ini:9: scope = global supports token buckets only (rule 'c' is algorithm = "
     "concurrency): use scope = region, or algorithm = token-bucket\n"},
    /* a shadow rule may be global, but still needs [global] */
    {REDIS "[rule:s]\nrate = 1/s\nshadow = yes\nscope = global\n",
     "t.ini:3: rule 's' has scope = global but there is no [global] section (url, cluster or "
     "sentinel: the Redis every region shares)\n"},
};

START_TEST(test_bad)
{
    char err[CHECK_ERRLEN];

    check_config_bad(bad[_i].text, err, sizeof(err));
    ck_assert_str_eq(err, bad[_i].err);
}
END_TEST

/* ---- rules from Redis text ------------------------------------------------------ */

static int load_rules(const char *file_text, const char *rules, struct config **cfg, char *err,
                      size_t errlen)
{
    char *path = write_file(file_text);
    int rc = config_load_with_rules(path, rules, strlen(rules), "redis:v2", cfg, err, errlen);

    unlink(path);
    free(path);
    return rc;
}

/* Rule text from Redis (or --push) is parsed with the file's other sections:
 * its scope with the same parser and checks, its errors named after it. */
START_TEST(test_scope_from_redis_text)
{
    const char *with_global = REDIS "[global]\nurl = redis://g:6379\n[rules]\nsource = redis\n"
                                    "cache =\n";
    struct config *cfg = NULL;
    char err[CHECK_ERRLEN];

    ck_assert_int_eq(load_rules(with_global,
                                "[rule:g]\nrate = 20/1s\nburst = 10\nscope = global\n"
                                "[rule:r]\nrate = 1/s\n",
                                &cfg, err, sizeof(err)),
                     0);
    ck_assert_uint_eq(cfg->nrules, 2);
    ck_assert_int_eq(cfg->rules[0].scope, SCOPE_GLOBAL);
    ck_assert_int_eq(cfg->rules[1].scope, SCOPE_REGION);
    ck_assert_str_eq(cfg->global_region, "10.0.0.1:6379/2");
    config_free(cfg);

    /* no [global] in the agent's file: the rule text's error, at its line */
    ck_assert_int_eq(load_rules(REDIS "[rules]\nsource = redis\ncache =\n",
                                "\n[rule:g]\nrate = 20/1s\nscope = global\n", &cfg, err,
                                sizeof(err)),
                     -1);
    ck_assert_ptr_null(cfg);
    ck_assert_str_eq(err, "redis:v2:4: scope = global needs a [global] section (url, cluster or "
                          "sentinel: the Redis every region shares) in the agent's file\n");

    ck_assert_int_eq(load_rules(with_global,
                                "[rule:w]\nrate = 20/1s\nalgorithm = sliding-window\n"
                                "scope = global\n",
                                &cfg, err, sizeof(err)),
                     -1);
    ck_assert_str_eq(err, "redis:v2:4: scope = global supports token buckets only (rule 'w' is "
                          "algorithm = sliding-window): use scope = region, or algorithm = "
                          "token-bucket\n");
    ck_assert_int_eq(
        load_rules(with_global, "[rule:w]\nrate = 20/1s\nscope = both\n", &cfg, err, sizeof(err)),
        -1);
    ck_assert_str_eq(err, "redis:v2:3: bad value 'both' for 'scope' (expected region or global)\n");
    /* [global] is each agent's own: it cannot be pushed */
    ck_assert_int_eq(
        load_rules(with_global, "[global]\nurl = redis://h:6379\n", &cfg, err, sizeof(err)), -1);
    ck_assert_str_eq(err, "redis:v2:1: only [rule:*] sections can be pushed as rules, not "
                          "[global]\n");
}
END_TEST

/* ---- printing, reloads, store options ---------------------------------------------- */

START_TEST(test_render)
{
    struct config *plain = check_config_ok(REDIS "[rule:r]\nrate = 1/s\n");
    struct config *cfg;
    size_t len;
    char *text;

    cfg = check_config_ok(REDIS "[global]\nurl = redis://claimer:s3cret@g.example:6379/1\n"
                                "interval = 1500ms\n"
                                "[rule:g]\nrate = 1/s\nscope = global\n[rule:r]\nrate = 1/s\n");
    text = config_render(cfg, &len);
    ck_assert_ptr_nonnull(text);
    ck_assert_ptr_null(strstr(text, "s3cret"));
    ck_assert_ptr_nonnull(strstr(text, "\n[global]\nurl = redis://claimer:***@g.example:6379/1\n"
                                       "timeout = 1s\nkeepalive = 1s\nprefix = rl:\n"
                                       "interval = 1500ms\nmax_fraction = 0.25\nreserve = 0.2\n"
                                       "region = 10.0.0.1:6379/2 ; derived from [redis]\n\n"));
    ck_assert_ptr_nonnull(strstr(text, "[rule:g]\n"));
    ck_assert_ptr_nonnull(strstr(strstr(text, "[rule:g]\n"), "\nscope = global\n"));
    ck_assert_ptr_nonnull(strstr(strstr(text, "[rule:r]\n"), "\nscope = region\n"));
    free(text);
    /* the render reads back to the same configuration */
    {
        struct config *set = check_config_ok(REDIS "[global]\nurl = redis://g:6379\nregion = eu\n"
                                                   "[rule:g]\nrate = 1/s\nscope = global\n");
        struct config *again;

        text = config_render(set, &len);
        again = check_config_ok(text);
        ck_assert_uint_eq(config_hash(again), config_hash(set));
        free(text);
        config_free(again);
        config_free(set);
    }
    /* the hash says scope and [global] */
    ck_assert_uint_ne(config_hash(cfg), config_hash(plain));
    text = config_render(plain, &len);
    ck_assert_ptr_null(strstr(text, "[global]"));
    free(text);
    config_free(plain);
    config_free(cfg);

    cfg = check_config_ok(REDIS "[global]\nsentinel = s:1\nmaster = m\npassword = pw\n"
                                "sentinel_password = spw\nregion = us\n");
    text = config_render(cfg, &len);
    ck_assert_ptr_null(strstr(text, "spw"));
    ck_assert_ptr_nonnull(strstr(text, "\n[global]\nsentinel = s:1\nmaster = m\npassword = ***\n"
                                       "sentinel_password = ***\n"));
    ck_assert_ptr_nonnull(strstr(text, "\nregion = us\n\n"));
    free(text);
    config_free(cfg);
}
END_TEST

static void pending_cb(void *ctx, const char *name, const char *in_force, const char *file)
{
    char *seen = ctx;

    snprintf(seen + strlen(seen), 512 - strlen(seen), "%s=%s>%s;", name, in_force, file);
}

/* A reload keeps [global]'s topology, region and pace: it says each change
 * waits for a restart (the log and GET /config), as [redis]'s. A new url in
 * url mode and new credentials are not listed: a reload applies them. */
START_TEST(test_global_restart_only)
{
    struct config *a = check_config_ok(REDIS "[global]\nurl = redis://g:6379\n");
    struct config *b = check_config_ok(REDIS "[global]\nurl = redis://:pw@g2:6379\n");
    struct config *c = check_config_ok(REDIS "[global]\ncluster = c:7000\ninterval = 2s\n"
                                             "max_fraction = 0.5\nregion = eu\nprefix = g:\n"
                                             "timeout = 2s\n");
    struct config *none = check_config_ok(REDIS);
    char seen[512] = "";

    ck_assert_uint_eq(config_page_pending(a, b, pending_cb, seen), 0);
    ck_assert_uint_eq(config_page_pending(a, c, pending_cb, seen), 7);
    ck_assert_str_eq(seen, "[global] url=redis://g:6379>;[global] cluster=>c:7000;"
                           "[global] timeout=1000ms>2000ms;[global] prefix=rl:>g:;"
                           "[global] interval=1000ms>2000ms;[global] max_fraction=0.25>0.5;"
                           "[global] region=10.0.0.1:6379/2>eu;");
    ck_assert_uint_eq(strlen(seen) > 0, 1);
    seen[0] = '\0';
    /* adding [global] waits for a restart too */
    ck_assert_uint_eq(config_page_pending(none, a, pending_cb, seen), 5);
    ck_assert_str_eq(
        seen, "[global] url=>redis://g:6379;[global] prefix=>rl:;[global] interval=0ms>1000ms;"
              "[global] max_fraction=0>0.25;[global] region=>10.0.0.1:6379/2;");
    config_free(a);
    config_free(b);
    config_free(c);
    config_free(none);
}
END_TEST

START_TEST(test_store_options_from_global)
{
    struct config *cfg = check_config_ok(
        "[redis]\nurl = redis://:rpw@10.0.0.1:6379/2\ntimeout = 50ms\nprefix = r:\n"
        "require_noeviction = yes\nfunctions = off\nsentinel_window = 3s\nerrors_quiet = 6s\n"
        "[global]\nurl = redis://gu:gpw@g.example:6380/4\ntimeout = 250ms\nkeepalive = 0\n"
        "prefix = g:\n");
    struct store_options o, r;

    store_options_from_global(cfg, &o);
    ck_assert_ptr_eq(o.server, &cfg->global_server.addr);
    ck_assert_str_eq(o.server->tcp.host, "g.example");
    ck_assert_int_eq(o.db, 4);
    ck_assert_uint_eq(o.ncluster, 0);
    ck_assert_uint_eq(o.nsentinels, 0);
    ck_assert_str_eq(o.user, "gu");
    ck_assert_str_eq(o.password, "gpw");
    ck_assert_str_eq(o.prefix, "g:");
    ck_assert_uint_eq(o.timeout_us, 250000);
    ck_assert_uint_eq(o.keepalive_us, 0);
    ck_assert_uint_eq(o.dead_after_us, 2500000); /* 10 timeouts */
    /* [redis]'s, [global] has no such keys */
    ck_assert_int_eq(o.require_noeviction, 1);
    ck_assert_int_eq(o.functions, 0);
    ck_assert_uint_eq(o.sentinel_window_us, 3000000);
    ck_assert_uint_eq(o.errors_quiet_us, 6000000);
    /* and [redis]'s own options are still [redis]'s */
    store_options_from_config(cfg, &r);
    ck_assert_str_eq(r.prefix, "r:");
    ck_assert_str_eq(r.password, "rpw");
    ck_assert_uint_eq(r.timeout_us, 50000);
    ck_assert_uint_eq(r.dead_after_us, 1000000); /* at least 1 s */
    config_free(cfg);

    cfg = check_config_ok(REDIS "[global]\nsentinel = s1:26379,s2:26379\nmaster = gm\n"
                                "sentinel_username = su\nsentinel_password = sp\n");
    store_options_from_global(cfg, &o);
    ck_assert_uint_eq(o.nsentinels, 2);
    ck_assert_ptr_eq(o.sentinels, cfg->global_sentinel_hosts.list);
    ck_assert_str_eq(o.master, "gm");
    ck_assert_str_eq(o.sentinel_user, "su");
    ck_assert_str_eq(o.sentinel_password, "sp");
    ck_assert_ptr_null(o.password);
    ck_assert_int_eq(o.server->kind, NET_ADDR_NONE);
    ck_assert_uint_eq(o.timeout_us, 1000000);
    ck_assert_uint_eq(o.keepalive_us, 1000000);
    config_free(cfg);
}
END_TEST

int main(void)
{
    TCase *tc = tcase_create("global");

    CHECK_ADD(tc, test_global_every_key, test_global_defaults, test_scope_parsed,
              test_scope_from_redis_text, test_render, test_global_restart_only,
              test_store_options_from_global);
    CHECK_LOOP(tc, test_region_derived, derived);
    CHECK_LOOP(tc, test_bad, bad);
    return check_run_case("config_global", tc);
}
