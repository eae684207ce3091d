/* SPDX-License-Identifier: Apache-2.0 */
/* test_config_files.c - whole configuration files: a full one, the
 * defaults, variants, how rules resolve (keys, matches, limits from args),
 * files read from disk, credentials in URLs, --check --print's round trip
 * and the /config page. */
#include "config/config.h"

#include <arpa/inet.h>
#include <check.h>
#include <netinet/in.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "check_util.h"
#include "config/config_access.h"
#include "http/config_page.h"

/* ---- whole files ------------------------------------------------------------------ */

/* interface.md's example, with one Redis mode instead of three */
static const char full_config[] =
    "[agent]\n"
    "listen = 127.0.0.1:12345      ; host:port, [v6]:port, or unix:/path\n"
    "workers = 2                   ; event-loop threads (default: number of CPUs)\n"
    "max_frame_size = 16380        ; upper bound offered in AGENT-HELLO\n"
    "stats = 127.0.0.1:9145        ; HTTP GET /metrics\n"
    "log_level = debug             ; error | warn | info | debug\n"
    "shadow = no                   ; yes: every rule behaves as a shadow rule\n"
    "allow = 127.0.0.0/8, ::1/128  ; SPOP peers allowed to connect\n"
    "max_key = 256                 ; longer client keys are hashed\n"
    "alert_share = 0.2\n"
    "\n"
    "[redis]\n"
    "; comment line\n"
    "url = redis://:s3cret@127.0.0.1:6379/2\n"
    "timeout = 250ms               ; per command\n"
    "prefix = test:\n"
    "\n"
    "[lease]\n"
    "interval = 50ms               ; how often leases are topped up\n"
    "ttl = 2s                      ; a lease lives at most this long: unspent tokens go back to\n"
    "                              ; Redis, and a vanished agent's lease is dropped after it\n"
    "max_fraction = 0.25\n"
    "\n"
    "[fallback]\n"
    "mode = closed                 ; open: local backstop bucket; closed: deny\n"
    "share = 0.5\n"
    "\n"
    "[rule:api-key]\n"
    "message = check-rate          ; SPOE message this rule reads\n"
    "key = key, src                ; comma-separated message args\n"
    "match = path ^/api/           ; optional\n"
    "match = method ^(GET|HEAD)$\n"
    "rate = 100/1m                 ; the limit\n"
    "burst = 20                    ; bucket capacity\n"
    "algorithm = sliding-window    ; token-bucket | sliding-window\n"
    "lease = off\n"
    "on_redis_down = open\n"
    "shadow = yes\n"
    "\n"
    "# hash comments too\n"
    "[rule:v2.global_limit]\n"
    "rate = 5/s\n";

START_TEST(test_full)
{
    struct config *cfg = check_config_ok(full_config);
    const struct cfg_rule *r;
    char text[INET6_ADDRSTRLEN];

    ck_assert_str_eq(cfg->path, "t.ini");
    ck_assert_str_eq(cfg->listen, "127.0.0.1:12345");
    ck_assert_int_eq(cfg->workers, 2);
    ck_assert_uint_eq(cfg->max_frame_size, 16380);
    ck_assert_str_eq(cfg->stats, "127.0.0.1:9145");
    ck_assert_int_eq(cfg->log_level, LOG_LVL_DEBUG);
    ck_assert_int_eq(cfg->shadow, 0);
    ck_assert_uint_eq(cfg->nallow, 2);
    ck_assert_int_eq(cfg->allow[0].family, AF_INET);
    ck_assert_uint_eq(cfg->allow[0].prefix, 8);
    inet_ntop(AF_INET, cfg->allow[0].addr, text, sizeof(text));
    ck_assert_str_eq(text, "127.0.0.0");
    ck_assert_int_eq(cfg->allow[1].family, AF_INET6);
    ck_assert_uint_eq(cfg->allow[1].prefix, 128);
    ck_assert_uint_eq(cfg->max_key, 256);
    ck_assert_double_eq(cfg->alert_share, 0.2);

    ck_assert_str_eq(cfg->redis_url, "redis://:s3cret@127.0.0.1:6379/2");
    ck_assert_ptr_null(cfg->redis_cluster);
    ck_assert_ptr_null(cfg->redis_sentinel);
    ck_assert_ptr_null(cfg->redis_master);
    ck_assert_uint_eq(cfg->redis_timeout_ms, 250);
    ck_assert_str_eq(cfg->redis_prefix, "test:");
    ck_assert_int_eq(config_standalone(cfg), 0);

    ck_assert_uint_eq(cfg->lease_interval_ms, 50);
    ck_assert_uint_eq(cfg->lease_ttl_ms, 2000);
    ck_assert_double_eq(cfg->lease_max_fraction, 0.25);
    ck_assert_int_eq(cfg->fallback_mode, DOWN_CLOSED);
    ck_assert_double_eq(cfg->fallback_share, 0.5);

    ck_assert_uint_eq(cfg->nrules, 2);
    r = &cfg->rules[0];
    ck_assert_str_eq(r->name, "api-key");
    ck_assert_uint_eq(r->line, 28);
    ck_assert_str_eq(r->message, "check-rate");
    ck_assert_uint_eq(r->nkeys, 2);
    ck_assert_str_eq(r->keys[0], "key");
    ck_assert_str_eq(r->keys[1], "src");
    ck_assert_uint_eq(r->nmatches, 2);
    ck_assert_str_eq(r->matches[0].arg, "path");
    ck_assert_str_eq(r->matches[0].pattern, "^/api/");
    ck_assert_str_eq(r->matches[1].arg, "method");
    ck_assert_str_eq(r->matches[1].pattern, "^(GET|HEAD)$");
    ck_assert_int_eq(check_re(r->matches[0].re, "/api/v1"), 1);
    ck_assert_int_eq(check_re(r->matches[0].re, "/web/api/"), 0);
    ck_assert_int_eq(check_re(r->matches[1].re, "HEAD"), 1);
    ck_assert_int_eq(check_re(r->matches[1].re, "POST"), 0);
    ck_assert_uint_eq(r->rate_n, 100);
    ck_assert_uint_eq(r->rate_period_ms, 60000);
    ck_assert_uint_eq(r->burst, 20);
    ck_assert_int_eq(r->algorithm, ALGO_SLIDING_WINDOW);
    ck_assert_int_eq(r->lease, 0);
    ck_assert_int_eq(r->on_redis_down, DOWN_OPEN);
    ck_assert_int_eq(r->shadow, 1);

    r = &cfg->rules[1]; /* defaults of a rule, [fallback] mode closed */
    ck_assert_str_eq(r->name, "v2.global_limit");
    ck_assert_uint_eq(r->line, 41);
    ck_assert_ptr_null(r->message);
    ck_assert_uint_eq(r->nkeys, 0);
    ck_assert_uint_eq(r->nmatches, 0);
    ck_assert_uint_eq(r->rate_n, 5);
    ck_assert_uint_eq(r->rate_period_ms, 1000);
    ck_assert_uint_eq(r->burst, 5);
    ck_assert_int_eq(r->algorithm, ALGO_TOKEN_BUCKET);
    ck_assert_int_eq(r->lease, 1);
    ck_assert_int_eq(r->on_redis_down, DOWN_CLOSED);
    ck_assert_int_eq(r->shadow, 0);
    config_free(cfg);
}
END_TEST

START_TEST(test_defaults)
{
    struct config *cfg = check_config_ok("; nothing but a comment\n");
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);

    ck_assert_str_eq(cfg->listen, "127.0.0.1:12345");
    ck_assert_int_eq(cfg->workers, ncpu < 1 ? 1 : ncpu > 256 ? 256 : (int)ncpu);
    ck_assert_uint_eq(cfg->max_frame_size, 16380);
    ck_assert_ptr_null(cfg->stats);
    ck_assert_int_eq(cfg->log_level, LOG_LVL_INFO);
    ck_assert_int_eq(cfg->shadow, 0);
    ck_assert_uint_eq(cfg->nallow, 0);
    ck_assert_uint_eq(cfg->max_key, 512);
    ck_assert_uint_eq(cfg->max_entries, 1000000);
    ck_assert_double_eq(cfg->alert_share, 0.05);
    ck_assert_ptr_null(cfg->redis_url);
    ck_assert_ptr_null(cfg->redis_cluster);
    ck_assert_ptr_null(cfg->redis_sentinel);
    ck_assert_ptr_null(cfg->redis_master);
    ck_assert_uint_eq(cfg->redis_timeout_ms, 100);
    ck_assert_uint_eq(cfg->redis_keepalive_ms, 1000);
    ck_assert_uint_eq(cfg->redis_sentinel_window_ms, 5000);
    ck_assert_uint_eq(cfg->redis_errors_quiet_ms, 30000);
    ck_assert_uint_eq(cfg->redis_epoch_check_ms, 1000);
    ck_assert_str_eq(cfg->redis_prefix, "rl:");
    ck_assert_int_eq(config_standalone(cfg), 1);
    ck_assert_uint_eq(cfg->lease_interval_ms, 100);
    ck_assert_uint_eq(cfg->lease_ttl_ms, 1000);
    ck_assert_double_eq(cfg->lease_max_fraction, 0.1);
    ck_assert_int_eq(cfg->fallback_mode, DOWN_OPEN);
    ck_assert_double_eq(cfg->fallback_share, CFG_SHARE_AUTO);
    ck_assert_int_eq(cfg->redis_require_noeviction, 0);
    ck_assert_uint_eq(cfg->nrules, 0);
    config_free(cfg);

    /* an empty text, empty url and stats: the same defaults */
    cfg = check_config_ok("");
    config_free(cfg);
    cfg = check_config_ok("[agent]\nstats =\n[redis]\nurl =\ncluster =\n");
    ck_assert_ptr_null(cfg->stats);
    ck_assert_int_eq(config_standalone(cfg), 1);
    config_free(cfg);
    config_free(NULL);
}
END_TEST

/* Accepted syntax variants, each with the value it must produce. */
START_TEST(test_variants)
{
    struct config *cfg;

    cfg = check_config_ok("[agent]\nlisten = [::1]:8080\nstats = unix:/run/rl.sock\n");
    ck_assert_str_eq(cfg->listen, "[::1]:8080");
    ck_assert_str_eq(cfg->stats, "unix:/run/rl.sock");
    config_free(cfg);

    cfg = check_config_ok("\xEF\xBB\xBF[agent]\r\nlisten: unix:/run/spoa.sock\r\nworkers=256\r\n"
                          "max_frame_size = 16777216\n");
    ck_assert_str_eq(cfg->listen, "unix:/run/spoa.sock");
    ck_assert_int_eq(cfg->workers, 256);
    ck_assert_uint_eq(cfg->max_frame_size, 16777216);
    config_free(cfg);

    /* [redis] keepalive: a duration, or 0 (off) with or without a unit */
    static const struct {
        const char *v;
        uint64_t ms;
    } keepalives[] = {{"0", 0},       {"0s", 0},    {"00ms", 0},   {"100ms", 100},
                      {"250ms", 250}, {"2s", 2000}, {"1m", 60000}, {"365d", 31536000000ULL}};
    for (size_t i = 0; i < sizeof(keepalives) / sizeof(keepalives[0]); i++) {
        char text[128];
        snprintf(text, sizeof(text), "[redis]\nurl = redis://127.0.0.1:6379\nkeepalive = %s\n",
                 keepalives[i].v);
        cfg = check_config_ok(text);
        ck_assert_uint_eq(cfg->redis_keepalive_ms, keepalives[i].ms);
        config_free(cfg);
        /* [redis] epoch_check: the same kind of value */
        snprintf(text, sizeof(text), "[redis]\nurl = redis://127.0.0.1:6379\nepoch_check = %s\n",
                 keepalives[i].v);
        cfg = check_config_ok(text);
        ck_assert_uint_eq(cfg->redis_epoch_check_ms, keepalives[i].ms);
        config_free(cfg);
    }

    cfg = check_config_ok("[agent]\nmax_entries = 5000\n");
    ck_assert_uint_eq(cfg->max_entries, 5000);
    config_free(cfg);

    cfg = check_config_ok(
        "[agent]\nlisten = *:12345\nstats = :9145\nmax_frame_size = 256\n"
        "[redis]\nsentinel = 10.0.0.1:26379, [::1]:26380,\n  sentinel.example:26381\n"
        "master = mymaster\nprefix =\n");
    ck_assert_str_eq(cfg->listen, "*:12345");
    ck_assert_str_eq(cfg->stats, ":9145");
    ck_assert_uint_eq(cfg->max_frame_size, 256);
    ck_assert_str_eq(cfg->redis_sentinel, "10.0.0.1:26379,[::1]:26380,sentinel.example:26381");
    ck_assert_str_eq(cfg->redis_master, "mymaster");
    ck_assert_str_eq(cfg->redis_prefix, "");
    ck_assert_int_eq(config_standalone(cfg), 0);
    config_free(cfg);

    cfg = check_config_ok("[redis]\ncluster = 127.0.0.1:7000,127.0.0.1:7001\n"
                          "[agent]\nallow = 10.0.0.0/8,\n        192.168.0.0/16\n        ::1\n");
    ck_assert_str_eq(cfg->redis_cluster, "127.0.0.1:7000,127.0.0.1:7001");
    ck_assert_uint_eq(cfg->nallow, 3);
    ck_assert_uint_eq(cfg->allow[2].prefix, 128);
    config_free(cfg);

    cfg = check_config_ok("[ agent ]\nlisten = 0.0.0.0:1\n[rule:r]\nrate = 1/1s\n"
                          "key = a, ; inline comments end continuation lines too\n"
                          "  b ; like this\n");
    ck_assert_str_eq(cfg->listen, "0.0.0.0:1");
    ck_assert_uint_eq(cfg->rules[0].nkeys, 2);
    ck_assert_str_eq(cfg->rules[0].keys[1], "b");
    config_free(cfg);

    cfg = check_config_ok("[redis]\nurl = unix:/run/redis/redis.sock\n");
    ck_assert_str_eq(cfg->redis_url, "unix:/run/redis/redis.sock");
    config_free(cfg);
    cfg = check_config_ok("[redis]\nurl = redis://redis.local:6379\n");
    config_free(cfg);
    cfg = check_config_ok("[redis]\nurl = redis://:p@ss@[::1]:6379/0\n");
    config_free(cfg);
    /* a Redis 6+ ACL user: redis://USER:PASSWORD@host */
    cfg = check_config_ok("[redis]\nurl = redis://ratelimit:p@ss@127.0.0.1:6379/3\n");
    ck_assert_str_eq(cfg->redis_server.user, "ratelimit");
    ck_assert_str_eq(cfg->redis_server.password, "p@ss");
    ck_assert_int_eq(cfg->redis_server.db, 3);
    config_free(cfg);
}
END_TEST

/* ---- rule semantics ------------------------------------------------------------------- */

START_TEST(test_resolution)
{
    struct config *cfg;

    /* [fallback] after the rules still gives their default on_redis_down */
    cfg = check_config_ok("[rule:a]\nrate = 1/1s\n"
                          "[rule:b]\nrate = 1/1s\non_redis_down = open\nshadow = on\n"
                          "[rule:c]\nrate = 1/1s\non_redis_down = closed\n"
                          "[fallback]\nmode = closed\n");
    ck_assert_int_eq(cfg->rules[0].on_redis_down, DOWN_CLOSED);
    ck_assert_int_eq(cfg->rules[1].on_redis_down, DOWN_OPEN);
    ck_assert_int_eq(cfg->rules[2].on_redis_down, DOWN_CLOSED);
    ck_assert_int_eq(cfg->rules[0].shadow, 0);
    ck_assert_int_eq(cfg->rules[1].shadow, 1);
    config_free(cfg);

    /* [agent] shadow = yes makes every rule a shadow rule, even "shadow = no" */
    cfg = check_config_ok("[rule:a]\nrate = 1/1s\nshadow = no\n"
                          "[rule:b]\nrate = 1/1s\n"
                          "[agent]\nshadow = yes\n");
    ck_assert_int_eq(cfg->shadow, 1);
    ck_assert_int_eq(cfg->rules[0].shadow, 1);
    ck_assert_int_eq(cfg->rules[1].shadow, 1);
    ck_assert_int_eq(cfg->rules[0].on_redis_down, DOWN_OPEN);
    config_free(cfg);

    /* burst defaults to N, also when rate comes after other keys */
    cfg = check_config_ok("[rule:a]\nkey = k\nrate = 30/1m\n[rule:b]\nburst = 7\nrate = 30/1m\n");
    ck_assert_uint_eq(cfg->rules[0].burst, 30);
    ck_assert_uint_eq(cfg->rules[1].burst, 7);
    config_free(cfg);
}
END_TEST

/* cost: 1 by default, any integer >= 0, or an arg with its ceiling */
START_TEST(test_cost)
{
    struct config *cfg =
        check_config_ok("[rule:a]\nrate = 10/1m\n"
                        "[rule:b]\nrate = 10/1m\ncost = 0\n"
                        "[rule:c]\nrate = 10/1m\ncost = 25\n"
                        "[rule:d]\nrate = 10/1m\ncost = arg:size\nmax_cost = 40\n");
    ck_assert_uint_eq(cfg->rules[0].cost, 1);
    ck_assert_ptr_null(cfg->rules[0].cost_arg);
    ck_assert_uint_eq(cfg->rules[0].max_cost, 0);
    ck_assert_uint_eq(cfg->rules[1].cost, 0);
    ck_assert_uint_eq(cfg->rules[2].cost, 25);
    ck_assert_str_eq(cfg->rules[3].cost_arg, "size");
    ck_assert_uint_eq(cfg->rules[3].max_cost, 40);
    /* a cost never makes the limits per request (nor keys buckets by it) */
    ck_assert(!config_rule_per_request(&cfg->rules[3]));
    config_free(cfg);
}
END_TEST

/* block_for: off by default, any duration, on any algorithm */
START_TEST(test_block_for)
{
    struct config *cfg = check_config_ok("[rule:a]\nrate = 10/1m\n"
                                         "[rule:b]\nrate = 10/1h\nblock_for = 15m\n"
                                         "[rule:c]\nrate = 10/1m\nalgorithm = sliding-window\n"
                                         "block_for = 0s\n"
                                         "[rule:d]\nrate = 10/1m\nalgorithm = sliding-window\n"
                                         "block_for = 1500ms\n");
    ck_assert_uint_eq(cfg->rules[0].block_for_ms, 0);
    ck_assert_uint_eq(cfg->rules[1].block_for_ms, 15 * 60 * 1000);
    ck_assert_uint_eq(cfg->rules[2].block_for_ms, 0);
    ck_assert_uint_eq(cfg->rules[3].block_for_ms, 1500);
    config_free(cfg);
}
END_TEST

/* algorithm = fixed-window and window_offset (a duration; weeks parse) */
START_TEST(test_fixed_window)
{
    struct config *cfg = check_config_ok("[rule:a]\nrate = 10000/1d\nalgorithm = fixed-window\n"
                                         "[rule:b]\nrate = 5/1w\nalgorithm = fixed-window\n"
                                         "window_offset = 4d\n"
                                         "[rule:c]\nrate = 5/1d\n");
    ck_assert_int_eq(cfg->rules[0].algorithm, ALGO_FIXED_WINDOW);
    ck_assert_uint_eq(cfg->rules[0].window_offset_ms, 0);
    ck_assert_uint_eq(cfg->rules[1].rate_period_ms, 7 * 86400000ULL);
    ck_assert_uint_eq(cfg->rules[1].window_offset_ms, 4 * 86400000ULL);
    ck_assert_int_eq(cfg->rules[2].algorithm, ALGO_TOKEN_BUCKET);
    config_free(cfg);
}
END_TEST

/* [agent] charge: all-or-nothing by default, or each; --print shows it */
START_TEST(test_charge)
{
    struct config *cfg = check_config_ok("[rule:a]\nrate = 10/1m\n");
    size_t len;
    ck_assert_int_eq(cfg->charge, CHARGE_ALL_OR_NOTHING);
    char *text = config_render(cfg, &len);
    ck_assert_ptr_nonnull(strstr(text, "\ncharge = all-or-nothing\n"));
    free(text);
    config_free(cfg);
    cfg = check_config_ok("[agent]\ncharge = each\n[rule:a]\nrate = 10/1m\n");
    ck_assert_int_eq(cfg->charge, CHARGE_EACH);
    text = config_render(cfg, &len);
    ck_assert_ptr_nonnull(strstr(text, "\ncharge = each\n"));
    free(text);
    config_free(cfg);
    cfg = check_config_ok("[agent]\ncharge = all-or-nothing\n[rule:a]\nrate = 10/1m\n");
    ck_assert_int_eq(cfg->charge, CHARGE_ALL_OR_NOTHING);
    config_free(cfg);
}
END_TEST

/* rate = arg:NAME, burst = arg:NAME and their ceilings */
START_TEST(test_arg_limits)
{
    struct config *cfg;
    const struct cfg_rule *r;

    cfg = check_config_ok("[rule:a]\nkey = k\nrate = arg:limit\nmax_rate = 1000/1m\n"
                          "[rule:b]\nkey = k\nrate = arg:limit\nmax_rate = 5/1s\nmax_burst = 3\n"
                          "[rule:c]\nkey = k\nrate = 10/1m\nburst = arg:b\nmax_burst = 50\n"
                          "[rule:d]\nkey = k\nmax_rate = 1/1h\nburst = arg:b\nrate = arg:l\n"
                          "max_burst = 9\n"
                          "[rule:e]\nkey = k\nrate = arg:l\nmax_rate = 10/1m\nburst = 4\n"
                          "[rule:f]\nrate = 10/1m\n");
    r = &cfg->rules[0];
    ck_assert_str_eq(r->rate_arg, "limit");
    ck_assert_ptr_null(r->burst_arg);
    ck_assert_uint_eq(r->max_rate_n, 1000);
    ck_assert_uint_eq(r->max_rate_period_ms, 60000);
    ck_assert_uint_eq(r->rate_n, 0);
    ck_assert_uint_eq(r->burst, 0);        /* N of each request's rate ... */
    ck_assert_uint_eq(r->max_burst, 1000); /* ... at most max_rate's N by default */
    ck_assert(config_rule_per_request(r));
    r = &cfg->rules[1];
    ck_assert_uint_eq(r->max_rate_period_ms, 1000);
    ck_assert_uint_eq(r->max_burst, 3);
    r = &cfg->rules[2];
    ck_assert_ptr_null(r->rate_arg);
    ck_assert_str_eq(r->burst_arg, "b");
    ck_assert_uint_eq(r->rate_n, 10);
    ck_assert_uint_eq(r->max_burst, 50);
    ck_assert(config_rule_per_request(r));
    r = &cfg->rules[3];
    ck_assert_str_eq(r->rate_arg, "l");
    ck_assert_str_eq(r->burst_arg, "b");
    ck_assert_uint_eq(r->max_rate_n, 1);
    ck_assert_uint_eq(r->max_burst, 9);
    r = &cfg->rules[4];
    ck_assert_uint_eq(r->burst, 4);
    ck_assert_uint_eq(r->max_burst, 0);
    r = &cfg->rules[5];
    ck_assert(!config_rule_per_request(r));
    ck_assert_uint_eq(r->max_burst, 0);
    config_free(cfg);
}
END_TEST

START_TEST(test_match)
{
    struct config *cfg;
    const struct cfg_rule *r;

    /* repeated keys and continuation lines both add a match; the regex
     * keeps inner spaces; "key" continues onto indented lines too */
    cfg = check_config_ok("[rule:r]\n"
                          "rate = 1/1s\n"
                          "match = plan ^paid$\n"
                          "match = ua   Mozilla/5\\.0 (X11|Windows)\n"
                          "    path ^/api/\n"
                          "\thost \\.example\\.com$ ; comment\n"
                          "key = a,\n"
                          "      b , c\n");
    r = &cfg->rules[0];
    ck_assert_uint_eq(r->nmatches, 4);
    ck_assert_str_eq(r->matches[0].arg, "plan");
    ck_assert_str_eq(r->matches[0].pattern, "^paid$");
    ck_assert_str_eq(r->matches[1].arg, "ua");
    ck_assert_str_eq(r->matches[1].pattern, "Mozilla/5\\.0 (X11|Windows)");
    ck_assert_str_eq(r->matches[2].arg, "path");
    ck_assert_str_eq(r->matches[3].arg, "host");
    ck_assert_str_eq(r->matches[3].pattern, "\\.example\\.com$");
    ck_assert_int_eq(check_re(r->matches[0].re, "paid"), 1);
    ck_assert_int_eq(check_re(r->matches[0].re, "unpaid"), 0);
    ck_assert_int_eq(check_re(r->matches[1].re, "Mozilla/5.0 X11; Linux"), 1);
    ck_assert_int_eq(check_re(r->matches[3].re, "www.example.com"), 1);
    ck_assert_uint_eq(r->nkeys, 3);
    ck_assert_str_eq(r->keys[2], "c");
    config_free(cfg);
}
END_TEST

/* ---- files --------------------------------------------------------------------------------- */

START_TEST(test_file)
{
    char path[] = "/tmp/test_config_XXXXXX";
    char err[CHECK_ERRLEN], expect[CHECK_ERRLEN];
    struct config *cfg;
    int fd = mkstemp(path);
    FILE *fp;

    ck_assert_int_ne(fd, -1);
    ck_assert_ptr_nonnull(fp = fdopen(fd, "w"));
    fputs(full_config, fp);
    fclose(fp);
    ck_assert_int_eq(config_load_file(path, &cfg, err, sizeof(err)), 0);
    ck_assert_str_eq(cfg->path, path);
    ck_assert_uint_eq(cfg->nrules, 2);
    ck_assert_uint_eq(cfg->rules[1].line, 41);
    config_free(cfg);

    ck_assert_ptr_nonnull(fp = fopen(path, "w"));
    fputs("[agent]\n; 2\n\nworkers = 1000\n[rule:x]\n", fp); /* no newline at the end */
    fputs("rate = 1", fp);
    fclose(fp);
    ck_assert_int_eq(config_load_file(path, &cfg, err, sizeof(err)), -1);
    ck_assert_ptr_null(cfg);
    snprintf(expect, sizeof(expect),
             "%s:4: bad number '1000' for 'workers' (expected an integer from 1 to 256)\n"
             "%s:6: bad rate '1' (expected N/DURATION such as 100/1m or 10/1h)\n",
             path, path);
    ck_assert_str_eq(err, expect);

    unlink(path);
    ck_assert_int_eq(config_load_file(path, &cfg, err, sizeof(err)), -1);
    ck_assert_ptr_null(cfg);
    snprintf(expect, sizeof(expect), "%s: cannot open: No such file or directory\n", path);
    ck_assert_str_eq(err, expect);

    ck_assert_int_eq(config_load_file("/", &cfg, err, sizeof(err)), -1);
    ck_assert_str_eq(err, "/: read error: Is a directory\n");
}
END_TEST

/* %XX escapes: decoded, case-insensitive; a bad or NUL escape is refused. */
START_TEST(test_percent_decode)
{
    static const struct {
        const char *in, *out; /* out NULL: refused */
    } cases[] = {
        {"", ""},           {"plain", "plain"},
        {"p%40ss", "p@ss"}, {"%3a%2F%25", ":/%"},
        {"%7e%7E", "~~"},   {"a%", NULL},
        {"a%4", NULL},      {"%g0", NULL},
        {"%00", NULL},      {"p%40ss%3Aw%2Frd", "p@ss:w/rd"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char out[64];
        size_t n = 99;
        int rc = config_percent_decode(cases[i].in, strlen(cases[i].in), out, &n);
        if (!cases[i].out) {
            ck_assert_msg(rc == -1, "%s accepted", cases[i].in);
            continue;
        }
        ck_assert_msg(rc == 0, "%s refused", cases[i].in);
        ck_assert_str_eq(out, cases[i].out);
        ck_assert_uint_eq(n, strlen(cases[i].out));
    }
}
END_TEST

/* Credentials: from the url (percent-decoded), the keys or a password file
 * (one trailing newline dropped, read at each load); the sentinels' own;
 * --print masks every password and loads again. */
START_TEST(test_credentials)
{
    char path[] = "/tmp/test_config_pw_XXXXXX", text[512], err[CHECK_ERRLEN];
    struct config *cfg;
    size_t len;
    char *out;
    int fd = mkstemp(path);
    FILE *fp;

    cfg = check_config_ok("[redis]\nurl = redis://li%6Dit:p%40ss%3Aw%2Frd@127.0.0.1:6379/1\n");
    ck_assert_str_eq(cfg->redis_auth_user, "limit");
    ck_assert_str_eq(cfg->redis_auth_password, "p@ss:w/rd");
    out = config_render(cfg, &len);
    ck_assert_ptr_null(strstr(out, "p%40ss"));
    ck_assert_ptr_nonnull(strstr(out, "url = redis://li%6Dit:***@127.0.0.1:6379/1\n"));
    free(out);
    config_free(cfg);

    cfg = check_config_ok(
        "[redis]\ncluster = 127.0.0.1:7000\nusername = limiter\npassword = s3cret\n");
    ck_assert_str_eq(cfg->redis_auth_user, "limiter");
    ck_assert_str_eq(cfg->redis_auth_password, "s3cret");
    out = config_render(cfg, &len);
    ck_assert_ptr_null(strstr(out, "s3cret"));
    ck_assert_ptr_nonnull(strstr(out, "username = limiter\npassword = ***\n"));
    free(out);
    config_free(cfg);

    cfg = check_config_ok("[redis]\nsentinel = 127.0.0.1:26379\nmaster = m\npassword = m4ster\n"
                          "sentinel_username = sen\nsentinel_password = s3nt\n");
    ck_assert_str_eq(cfg->redis_auth_password, "m4ster");
    ck_assert_ptr_null(cfg->redis_auth_user);
    ck_assert_str_eq(cfg->redis_sentinel_username, "sen");
    ck_assert_str_eq(cfg->redis_sentinel_password, "s3nt");
    out = config_render(cfg, &len);
    ck_assert_ptr_null(strstr(out, "m4ster"));
    ck_assert_ptr_null(strstr(out, "s3nt"));
    ck_assert_ptr_nonnull(strstr(out, "sentinel_username = sen\nsentinel_password = ***\n"));
    free(out);
    config_free(cfg);

    /* a password file: its newline dropped; the key shows the path */
    ck_assert_int_ne(fd, -1);
    ck_assert_ptr_nonnull(fp = fdopen(fd, "w"));
    fputs("from file\n", fp);
    fclose(fp);
    snprintf(text, sizeof(text),
             "[redis]\nurl = redis://127.0.0.1:6379\nusername = u\npassword_file = %s\n", path);
    cfg = check_config_ok(text);
    ck_assert_str_eq(cfg->redis_auth_password, "from file");
    ck_assert_str_eq(cfg->redis_auth_user, "u");
    out = config_render(cfg, &len);
    ck_assert_ptr_null(strstr(out, "from file"));
    ck_assert_ptr_nonnull(strstr(out, "password_file = /tmp/test_config_pw_"));
    config_free(cfg);
    /* what --print shows loads again, and reads the file again */
    ck_assert_int_eq(config_load_string(out, "p.ini", &cfg, err, sizeof(err)), 0);
    ck_assert_str_eq(cfg->redis_auth_password, "from file");
    config_free(cfg);
    free(out);
    /* rotated: the next load reads the new secret (CRLF dropped too) */
    ck_assert_ptr_nonnull(fp = fopen(path, "w"));
    fputs("rotated\r\n", fp);
    fclose(fp);
    cfg = check_config_ok(text);
    ck_assert_str_eq(cfg->redis_auth_password, "rotated");
    config_free(cfg);
    /* empty, then gone: FILE:LINE errors */
    ck_assert_ptr_nonnull(fp = fopen(path, "w"));
    fputs("\n", fp);
    fclose(fp);
    ck_assert_int_eq(config_load_string(text, "t.ini", &cfg, err, sizeof(err)), -1);
    ck_assert_ptr_nonnull(strstr(err, "t.ini:4: cannot read password_file '/tmp/test_config_pw_"));
    ck_assert_ptr_nonnull(strstr(err, "': the file is empty\n"));
    unlink(path);
    ck_assert_int_eq(config_load_string(text, "t.ini", &cfg, err, sizeof(err)), -1);
    ck_assert_ptr_nonnull(strstr(err, "': No such file or directory\n"));
    /* not a file: refused at once (a FIFO would hang a reload) */
    ck_assert_int_eq(config_load_string("[redis]\nurl = redis://127.0.0.1:6379\n"
                                        "password_file = /dev/null\n",
                                        "t.ini", &cfg, err, sizeof(err)),
                     -1);
    ck_assert_str_eq(err, "t.ini:3: cannot read password_file '/dev/null': not a regular file\n");
}
END_TEST

/* --check --print: what it prints is a config that means the same (it loads,
 * and prints the same again), with every default written out. */
START_TEST(print_round_trip)
{
    static const char *const files[] = {
        "[rule:r]\nrate = 10/1m\n",
        "[agent]\nlisten = [::1]:9000\nallow = 10.0.0.0/8, ::1\nshadow = yes\n"
        "[redis]\nurl = redis://u:pw@127.0.0.1:6379/2\ntimeout = 1500ms\nkeepalive = 0\n"
        "[lease]\nttl = 2s\n[fallback]\nmode = closed\n"
        "[rule:a]\nmessage = m\nkey = k, ip\nmatch = path ^/a\nmatch = plan x\n"
        "rate = 1000/10s\nburst = 7\nalgorithm = sliding-window\nlease = off\n"
        "[rule:g]\nrate = 5/1d\n",
        "[rule:a]\nkey = k\nrate = arg:limit\nmax_rate = 1000/1m\n"
        "[rule:b]\nkey = k\nrate = arg:limit\nmax_rate = 5/1s\nmax_burst = 3\n"
        "[rule:c]\nkey = k\nrate = 10/1m\nburst = arg:b\nmax_burst = 50\n"
        "[rule:d]\nkey = k\nrate = arg:l\nmax_rate = 90/1h\nburst = arg:b\nmax_burst = 9\n"
        "[rule:e]\nkey = k\nrate = arg:l\nmax_rate = 10/1m\nburst = 4\n",
        "[redis]\nurl = redis://127.0.0.1:6379\nkeepalive = 250ms\n[rule:r]\nrate = 10/1m\n",
        "[rule:a]\nrate = 10/1m\ncost = 0\n[rule:b]\nrate = 10/1m\ncost = arg:n\nmax_cost = 7\n",
        "[rule:a]\nrate = 10/1h\nblock_for = 15m\n[rule:b]\nrate = 10/1m\n",
        "[rule:q]\nrate = 10000/1d\nalgorithm = fixed-window\n"
        "[rule:w]\nrate = 5/1w\nalgorithm = fixed-window\nwindow_offset = 4d\n",
        "[agent]\ncharge = each\n[rule:r]\nrate = 10/1m\n",
    };
    for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
        struct config *cfg, *again;
        char err[4096];
        size_t len, len2;
        ck_assert_int_eq(config_load_string(files[i], "t.ini", &cfg, err, sizeof(err)), 0);
        char *text = config_render(cfg, &len);
        ck_assert_ptr_nonnull(text);
        ck_assert_uint_eq(strlen(text), len);
        ck_assert_msg(config_load_string(text, "t.ini", &again, err, sizeof(err)) == 0,
                      "printed config does not load:\n%s\n%s", err, text);
        char *text2 = config_render(again, &len2);
        ck_assert_str_eq(text2, text);
        ck_assert_uint_eq(config_hash(cfg), config_hash(again));
        ck_assert_ptr_null(strstr(text, "pw@")); /* the password is masked */
        if (strstr(files[i], "keepalive = 0\n")) /* off is printed as such */
            ck_assert_ptr_nonnull(strstr(text, "\nkeepalive = 0 ; off\n"));
        else if (strstr(files[i], "[redis]")) /* and a duration, or the default */
            ck_assert_ptr_nonnull(strstr(text, strstr(files[i], "250ms") ? "\nkeepalive = 250ms\n"
                                                                         : "\nkeepalive = 1s\n"));
        if (strstr(files[i], "block_for")) { /* a penalty box, and its default: off */
            ck_assert_ptr_nonnull(strstr(text, "\nblock_for = 15m\n"));
            ck_assert_ptr_nonnull(strstr(text, "\nblock_for = 0 ; off\n"));
        }
        if (strstr(files[i], "fixed-window")) { /* the algorithm and its offset */
            ck_assert_ptr_nonnull(strstr(text, "rate = 10000/1d\nburst = 10000\n"));
            ck_assert_ptr_nonnull(strstr(text, "algorithm = fixed-window\nwindow_offset = 0\n"));
            ck_assert_ptr_nonnull(strstr(text, "algorithm = fixed-window\nwindow_offset = 4d\n"));
        }
        if (strstr(files[i], "cost = ")) { /* a cost, fixed or from an arg */
            ck_assert_ptr_nonnull(strstr(text, "\ncost = 0\n"));
            ck_assert_ptr_nonnull(strstr(text, "\ncost = arg:n\nmax_cost = 7\n"));
        } else if (strstr(files[i], "arg:")) { /* limits from args are printed as such */
            ck_assert_ptr_nonnull(strstr(text, "rate = arg:limit\nmax_rate = 1000/1m\n"));
            ck_assert_ptr_nonnull(strstr(text, "burst = arg:b\nmax_burst = 9\n"));
            ck_assert_ptr_nonnull(strstr(text, "max_rate = 10/1m\nburst = 4\n"));
        }
        free(text);
        free(text2);
        config_free(again);
        config_free(cfg);
    }
}
END_TEST

/* GET /config: the restart-only settings that differ from those in force,
 * a password masked but its change seen; the page is the rendering under a
 * header. */
static void note(void *ctx, const char *name, const char *in_force, const char *file)
{
    char *out = ctx;
    size_t n = strlen(out);
    snprintf(out + n, 1024 - n, "%s: %s -> %s\n", name, in_force, file);
}

START_TEST(test_config_page)
{
    struct config *a =
        check_config_ok("[agent]\nworkers = 2\n[redis]\nurl = redis://:pw1@127.0.0.1:6379\n"
                        "[rule:r]\nrate = 1/1s\n");
    struct config *b = check_config_ok("[agent]\nworkers = 3\nlisten = 127.0.0.1:1\n[redis]\n"
                                       "url = redis://:pw2@127.0.0.1:6379\n[lease]\nttl = 2s\n"
                                       "[rule:r]\nrate = 2/1s\n");
    char got[1024] = "";
    size_t len, body_len;

    ck_assert_uint_eq(config_page_pending(a, a, note, got), 0);
    /* a url changed in place (here its password) is applied by the reload */
    ck_assert_uint_eq(config_page_pending(a, b, note, got), 3);
    ck_assert_str_eq(got, "listen: 127.0.0.1:12345 -> 127.0.0.1:1\n"
                          "workers: 2 -> 3\n"
                          "[lease] ttl: 1000ms -> 2000ms\n");
    char *page = config_page_render(a, b, 86400, &len);
    char *body = config_render(b, &body_len);
    ck_assert_ptr_nonnull(page);
    ck_assert_ptr_nonnull(strstr(page, "; loaded = 1970-01-02T00:00:00Z (unix 86400)\n"));
    ck_assert_ptr_nonnull(strstr(page, ";   workers = 2 in force; the file says 3\n"));
    ck_assert_ptr_null(strstr(page, "pw"));
    const char *rest = strstr(page, "\n\n");
    ck_assert_ptr_nonnull(rest);
    ck_assert_uint_eq(strlen(rest + 2), body_len);
    ck_assert_str_eq(rest + 2, body);
    free(page);
    free(body);
    page = config_page_render(a, a, 0, &len);
    ck_assert_ptr_nonnull(strstr(page, "; restart pending: none\n"));
    free(page);
    config_free(a);
    config_free(b);
}
END_TEST
/* --check's question for the unit's user, asked here of "nobody" (neither
 * the owner of the test's files nor in their group): a file 0600 or under a
 * 0700 directory is not readable by it, 0644 under 0755 is; an unknown user
 * or a missing file is "unknown" (-1). */
START_TEST(test_user_can_read)
{
    char dir[] = "/tmp/rl-access-XXXXXX", file[64], why[512];

    if (!getpwnam("nobody") || geteuid() == getpwnam("nobody")->pw_uid)
        return; /* no other user to ask about */
    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(file, sizeof(file), "%s/redis.pass", dir);
    FILE *f = fopen(file, "w");
    ck_assert_ptr_nonnull(f);
    fputs("s3cret\n", f);
    fclose(f);
    ck_assert_int_eq(chmod(dir, 0755), 0);
    ck_assert_int_eq(chmod(file, 0600), 0);
    ck_assert_int_eq(config_user_can_read(file, "nobody", why, sizeof(why)), 0);
    ck_assert_msg(strstr(why, "file ") == why && strstr(why, "(mode 0600, "), "%s", why);
    ck_assert_int_eq(chmod(file, 0644), 0);
    ck_assert_int_eq(config_user_can_read(file, "nobody", why, sizeof(why)), 1);
    ck_assert_int_eq(chmod(dir, 0700), 0);
    ck_assert_int_eq(config_user_can_read(file, "nobody", why, sizeof(why)), 0);
    ck_assert_msg(strstr(why, "directory ") == why && strstr(why, "not searchable"), "%s", why);
    ck_assert_int_eq(chmod(dir, 0755), 0);
    ck_assert_int_eq(config_user_can_read(file, "no-such-user-rl", why, sizeof(why)), -1);
    unlink(file);
    ck_assert_int_eq(config_user_can_read(file, "nobody", why, sizeof(why)), -1);
    rmdir(dir);
}
END_TEST

int main(void)
{
    TCase *tc = tcase_create("files");

    CHECK_ADD(tc, test_cost, test_block_for, test_fixed_window, test_charge, print_round_trip,
              test_full, test_defaults, test_variants, test_resolution, test_match, test_arg_limits,
              test_file, test_percent_decode, test_credentials, test_config_page,
              test_user_can_read);
    return check_run_case("config_files", tc);
}
