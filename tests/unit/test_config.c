/* test_config.c - unit tests of the configuration module: value parsers,
 * defaults, a full file, every kind of error with its FILE:LINE, peers. */
#include "config/config.h"
#include "http/config_page.h"

#include <arpa/inet.h>
#include <check.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#define ERRLEN 4096

/* Load text as "t.ini"; fail the test with the errors when it is invalid. */
static struct config *load_ok(const char *text)
{
    char err[ERRLEN];
    struct config *cfg = NULL;
    int rc = config_load_string(text, "t.ini", &cfg, err, sizeof(err));

    ck_assert_msg(rc == 0, "unexpected errors:\n%s", err);
    ck_assert_ptr_nonnull(cfg);
    return cfg;
}

/* Load text that must be invalid; err receives the messages. */
static void load_bad(const char *text, char *err, size_t errlen)
{
    struct config *cfg = (struct config *)1;

    ck_assert_int_eq(config_load_string(text, "t.ini", &cfg, err, errlen), -1);
    ck_assert_ptr_null(cfg);
}

/* ---- value parsers ------------------------------------------------------------ */

static const struct {
    const char *s;
    uint64_t ms; /* 0: must be rejected */
} durations[] = {
    {"1ms", 1},
    {"250ms", 250},
    {"1s", 1000},
    {"1m", 60000},
    {"1h", 3600000},
    {"1d", 86400000},
    {"007s", 7000},
    {"31536000000ms", 31536000000ULL}, /* CFG_MAX_DURATION_MS: one year */
    {"31536000s", 31536000000ULL},
    {"525600m", 31536000000ULL},
    {"8760h", 31536000000ULL},
    {"365d", 31536000000ULL},
    {"31536000001ms", 0},
    {"31536001s", 0},
    {"8761h", 0},
    {"366d", 0},
    {"20000000d", 0},
    {"18446744073709551ms", 0},
    {"", 0},
    {"0s", 0},
    {"0ms", 0},
    {"1", 0},
    {"s", 0},
    {"1x", 0},
    {"1S", 0},
    {"1sec", 0},
    {"1.5s", 0},
    {"-1s", 0},
    {"+1s", 0},
    {" 1s", 0},
    {"1 s", 0},
    {"1s ", 0},
    {"18446744073709552ms", 0},
    {"18446744073709551616ms", 0},
    {"99999999999999999999d", 0},
    {"213503982335d", 0},
};

START_TEST(test_duration)
{
    uint64_t ms = 42;
    int rc = config_parse_duration(durations[_i].s, &ms);

    if (durations[_i].ms) {
        ck_assert_msg(rc == 0, "'%s' rejected", durations[_i].s);
        ck_assert_uint_eq(ms, durations[_i].ms);
    } else {
        ck_assert_msg(rc == -1, "'%s' accepted", durations[_i].s);
    }
}
END_TEST

static const struct {
    const char *s;
    uint64_t n, period_ms; /* n == 0: must be rejected */
} rates[] = {
    {"100/1m", 100, 60000},
    {"10/1h", 10, 3600000},
    {"5/1s", 5, 1000},
    {"1000/10s", 1000, 10000},
    {"1/250ms", 1, 250},
    {"100/m", 100, 60000},
    {"7/d", 7, 86400000},
    {"1000000000000000/1s", 1000000000000000ULL, 1000},
    {"0/1s", 0, 0},
    {"100", 0, 0},
    {"/1m", 0, 0},
    {"100/", 0, 0},
    {"100/0s", 0, 0},
    {"100/1x", 0, 0},
    {"100/1", 0, 0},
    {"-1/1s", 0, 0},
    {"1e3/1s", 0, 0},
    {"100 /1m", 0, 0},
    {"100/ 1m", 0, 0},
    {"1/1s/1s", 0, 0},
    {"1000000000000001/1s", 0, 0},
    {"1/365d", 1, 31536000000ULL},
    {"1/366d", 0, 0},
    {"1/20000000d", 0, 0},
    {"", 0, 0},
};

START_TEST(test_rate)
{
    uint64_t n = 0, p = 0;
    int rc = config_parse_rate(rates[_i].s, &n, &p);

    if (rates[_i].n) {
        ck_assert_msg(rc == 0, "'%s' rejected", rates[_i].s);
        ck_assert_uint_eq(n, rates[_i].n);
        ck_assert_uint_eq(p, rates[_i].period_ms);
    } else {
        ck_assert_msg(rc == -1, "'%s' accepted", rates[_i].s);
    }
}
END_TEST

static const struct {
    const char *s;
    int b; /* -1: must be rejected */
} bools[] = {
    {"yes", 1}, {"no", 0}, {"on", 1},      {"off", 0},   {"true", 1},  {"false", 0},
    {"1", 1},   {"0", 0},  {"YES", 1},     {"Off", 0},   {"TRUE", 1},  {"", -1},
    {"y", -1},  {"2", -1}, {"enable", -1}, {"yes ", -1}, {"nope", -1}, {"01", -1},
};

START_TEST(test_bool)
{
    int b = 7;
    int rc = config_parse_bool(bools[_i].s, &b);

    if (bools[_i].b >= 0) {
        ck_assert_msg(rc == 0, "'%s' rejected", bools[_i].s);
        ck_assert_int_eq(b, bools[_i].b);
    } else {
        ck_assert_msg(rc == -1, "'%s' accepted", bools[_i].s);
    }
}
END_TEST

static const struct {
    const char *s;
    int family; /* 0: must be rejected */
    unsigned prefix;
    const char *net; /* the stored network, as text */
} cidrs[] = {
    {"127.0.0.0/8", AF_INET, 8, "127.0.0.0"},
    {"10.1.2.3/8", AF_INET, 8, "10.0.0.0"}, /* host bits dropped */
    {"192.168.1.7", AF_INET, 32, "192.168.1.7"},
    {"0.0.0.0/0", AF_INET, 0, "0.0.0.0"},
    {"172.16.255.255/12", AF_INET, 12, "172.16.0.0"},
    {"::1/128", AF_INET6, 128, "::1"},
    {"::1", AF_INET6, 128, "::1"},
    {"2001:db8::/32", AF_INET6, 32, "2001:db8::"},
    {"2001:db8:ffff::1/33", AF_INET6, 33, "2001:db8:8000::"},
    {"::/0", AF_INET6, 0, "::"},
    {"::ffff:10.0.0.1/128", AF_INET6, 128, "::ffff:10.0.0.1"},
    {"", 0, 0, NULL},
    {"/8", 0, 0, NULL},
    {"10.0.0.0/", 0, 0, NULL},
    {"10.0.0.0/33", 0, 0, NULL},
    {"10.0.0.0/-1", 0, 0, NULL},
    {"10.0.0.0/8x", 0, 0, NULL},
    {"10.0.0/8", 0, 0, NULL},
    {"256.0.0.0/8", 0, 0, NULL},
    {"10.0.0.0 /8", 0, 0, NULL},
    {"::1/129", 0, 0, NULL},
    {"2001:db8:::1/64", 0, 0, NULL},
    {"localhost", 0, 0, NULL},
    {"10.0.0.0/8/8", 0, 0, NULL},
};

START_TEST(test_cidr)
{
    struct cfg_cidr c;
    char text[INET6_ADDRSTRLEN];
    int rc = config_parse_cidr(cidrs[_i].s, &c);

    if (!cidrs[_i].family) {
        ck_assert_msg(rc == -1, "'%s' accepted", cidrs[_i].s);
        return;
    }
    ck_assert_msg(rc == 0, "'%s' rejected", cidrs[_i].s);
    ck_assert_int_eq(c.family, cidrs[_i].family);
    ck_assert_uint_eq(c.prefix, cidrs[_i].prefix);
    ck_assert_ptr_nonnull(inet_ntop(c.family, c.addr, text, sizeof(text)));
    ck_assert_str_eq(text, cidrs[_i].net);
}
END_TEST

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
    struct config *cfg = load_ok(full_config);
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
    ck_assert_int_eq(regexec(&r->matches[0].re, "/api/v1", 0, NULL, 0), 0);
    ck_assert_int_eq(regexec(&r->matches[0].re, "/web/api/", 0, NULL, 0), REG_NOMATCH);
    ck_assert_int_eq(regexec(&r->matches[1].re, "HEAD", 0, NULL, 0), 0);
    ck_assert_int_eq(regexec(&r->matches[1].re, "POST", 0, NULL, 0), REG_NOMATCH);
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
    struct config *cfg = load_ok("; nothing but a comment\n");
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
    cfg = load_ok("");
    config_free(cfg);
    cfg = load_ok("[agent]\nstats =\n[redis]\nurl =\ncluster =\n");
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

    cfg = load_ok("[agent]\nlisten = [::1]:8080\nstats = unix:/run/rl.sock\n");
    ck_assert_str_eq(cfg->listen, "[::1]:8080");
    ck_assert_str_eq(cfg->stats, "unix:/run/rl.sock");
    config_free(cfg);

    cfg = load_ok("\xEF\xBB\xBF[agent]\r\nlisten: unix:/run/spoa.sock\r\nworkers=256\r\n"
                  "max_frame_size = 16777216\n");
    ck_assert_str_eq(cfg->listen, "unix:/run/spoa.sock");
    ck_assert_int_eq(cfg->workers, 256);
    ck_assert_uint_eq(cfg->max_frame_size, 16777216);
    config_free(cfg);

    /* [redis] keepalive: a duration, or 0 (off) with or without a unit */
    static const struct {
        const char *v;
        uint64_t ms;
    } keepalives[] = {{"0", 0}, {"0s", 0}, {"00ms", 0}, {"100ms", 100}, {"250ms", 250},
                      {"2s", 2000}, {"1m", 60000}, {"365d", 31536000000ULL}};
    for (size_t i = 0; i < sizeof(keepalives) / sizeof(keepalives[0]); i++) {
        char text[128];
        snprintf(text, sizeof(text), "[redis]\nurl = redis://127.0.0.1:6379\nkeepalive = %s\n",
                 keepalives[i].v);
        cfg = load_ok(text);
        ck_assert_uint_eq(cfg->redis_keepalive_ms, keepalives[i].ms);
        config_free(cfg);
    }

    cfg = load_ok("[agent]\nmax_entries = 5000\n");
    ck_assert_uint_eq(cfg->max_entries, 5000);
    config_free(cfg);

    cfg = load_ok("[agent]\nlisten = *:12345\nstats = :9145\nmax_frame_size = 256\n"
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

    cfg = load_ok("[redis]\ncluster = 127.0.0.1:7000,127.0.0.1:7001\n"
                  "[agent]\nallow = 10.0.0.0/8,\n        192.168.0.0/16\n        ::1\n");
    ck_assert_str_eq(cfg->redis_cluster, "127.0.0.1:7000,127.0.0.1:7001");
    ck_assert_uint_eq(cfg->nallow, 3);
    ck_assert_uint_eq(cfg->allow[2].prefix, 128);
    config_free(cfg);

    cfg = load_ok("[ agent ]\nlisten = 0.0.0.0:1\n[rule:r]\nrate = 1/1s\n"
                  "key = a, ; inline comments end continuation lines too\n"
                  "  b ; like this\n");
    ck_assert_str_eq(cfg->listen, "0.0.0.0:1");
    ck_assert_uint_eq(cfg->rules[0].nkeys, 2);
    ck_assert_str_eq(cfg->rules[0].keys[1], "b");
    config_free(cfg);

    cfg = load_ok("[redis]\nurl = unix:/run/redis/redis.sock\n");
    ck_assert_str_eq(cfg->redis_url, "unix:/run/redis/redis.sock");
    config_free(cfg);
    cfg = load_ok("[redis]\nurl = redis://redis.local:6379\n");
    config_free(cfg);
    cfg = load_ok("[redis]\nurl = redis://:p@ss@[::1]:6379/0\n");
    config_free(cfg);
    /* a Redis 6+ ACL user: redis://USER:PASSWORD@host */
    cfg = load_ok("[redis]\nurl = redis://ratelimit:p@ss@127.0.0.1:6379/3\n");
    ck_assert_str_eq(cfg->redis_server.user, "ratelimit");
    ck_assert_str_eq(cfg->redis_server.password, "p@ss");
    ck_assert_int_eq(cfg->redis_server.db, 3);
    config_free(cfg);
}
END_TEST

/* ---- errors ----------------------------------------------------------------------- */

static const struct {
    const char *text;
    const char *err; /* the whole error output */
} bad_configs[] = {
    {"[agent]\nfoo = 1\n", "t.ini:2: unknown key 'foo' in [agent]\n"},
    {"[rule:r]\nrate = 1/1s\nlimit = 5\n", "t.ini:3: unknown key 'limit' in [rule:r]\n"},
    {"[agnet]\nlisten = nonsense\n", "t.ini:1: unknown section [agnet]\n"},
    {"[rule]\nrate = 1/1s\n", "t.ini:1: unknown section [rule]\n"},
    {"[rule:a]\nrate = 1/1s\n\n[rule:a]\nrate = 2/1s\n",
     "t.ini:4: duplicate rule name 'a' (first at line 1)\n"},
    {"[rule:a b]\nrate = 1/1s\n", "t.ini:1: bad rule name 'a b' (1 to 40 of A-Z a-z 0-9 _ . -)\n"},
    {"[rule:]\n", "t.ini:1: bad rule name '' (1 to 40 of A-Z a-z 0-9 _ . -)\n"},
    {"[rule:a23456789012345678901234567890123456789xy]\nrate = 1/1s\n",
     "t.ini:1: bad rule name 'a23456789012345678901234567890123456789xy' (1 to 40 of A-Z a-z 0-9 "
     "_ . -)\n"},
    {"[rule:a/b]\n", "t.ini:1: bad rule name 'a/b' (1 to 40 of A-Z a-z 0-9 _ . -)\n"},
    {"[agent]\n\nworkers = two\n",
     "t.ini:3: bad number 'two' for 'workers' (expected an integer from 1 to 256)\n"},
    {"[agent]\nworkers = 0\n",
     "t.ini:2: bad number '0' for 'workers' (expected an integer from 1 to 256)\n"},
    {"[agent]\nworkers = 257\n",
     "t.ini:2: bad number '257' for 'workers' (expected an integer from 1 to 256)\n"},
    {"[agent]\nmax_entries = 0\n", "t.ini:2: bad number '0' for 'max_entries' (expected an "
                                   "integer from 1 to 1000000000000)\n"},
    {"[agent]\nmax_frame_size = 255\n", "t.ini:2: bad number '255' for 'max_frame_size' "
                                        "(expected an integer from 256 to 16777216)\n"},
    {"[agent]\nmax_frame_size = 16777217\n", "t.ini:2: bad number '16777217' for "
                                             "'max_frame_size' (expected an integer from 256 to "
                                             "16777216)\n"},
    /* HAProxy's ACK must hold every variable of the largest answer */
    {"[agent]\nmax_frame_size = 256\n[rule:rrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrr]\nrate = 1/1h\n",
     "t.ini:2: max_frame_size 256 is too small for the ACK of rule "
     "'rrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrr' (up to 319 bytes): raise it to at least 319 or "
     "shorten the rule name\n"},
    {"[rule:a]\nrate = 1/1s\n[rule:rrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrr]\nrate = 1/1h\n[agent]\n"
     "max_frame_size = 290\n",
     "t.ini:6: max_frame_size 290 is too small for the ACK of rule "
     "'rrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrr' (up to 298 bytes): raise it to at least 298 or "
     "shorten the rule name\n"},
    {"[redis]\nurl = redis://127.0.0.1:6379\nprefix = rl{x:\n",
     "t.ini:3: prefix 'rl{x:': a '{' must be closed by '}' (a Redis Cluster hashtag), or client "
     "keys would choose their slot\n"},
    /* durations are capped at a year, with their own message */
    {"[rule:r]\nrate = 1/20000000d\n",
     "t.ini:2: rate '1/20000000d': the duration is longer than the maximum of 365d\n"},
    {"[rule:r]\nrate = 1/99999999999999999999999ms\n",
     "t.ini:2: rate '1/99999999999999999999999ms': the duration is longer than the maximum of "
     "365d\n"},
    {"[lease]\n\nttl = 366d\n",
     "t.ini:3: duration '366d' for 'ttl' is longer than the maximum of 365d\n"},
    {"[redis]\ntimeout = 100\n", "t.ini:2: bad duration '100' for 'timeout' (expected an integer "
                                 "> 0 and a unit: ms, s, m, h or d)\n"},
    {"[rule:r]\nrate = 100\n",
     "t.ini:2: bad rate '100' (expected N/DURATION such as 100/1m or 10/1h)\n"},
    {"[redis]\nkeepalive = 5\n", "t.ini:2: bad duration '5' for 'keepalive' (expected 0 for off, "
                                 "or an integer > 0 and a unit: ms, s, m, h or d)\n"},
    {"[redis]\nkeepalive = -1s\n", "t.ini:2: bad duration '-1s' for 'keepalive' (expected 0 for "
                                   "off, or an integer > 0 and a unit: ms, s, m, h or d)\n"},
    {"[redis]\nkeepalive = 0x\n", "t.ini:2: bad duration '0x' for 'keepalive' (expected 0 for "
                                  "off, or an integer > 0 and a unit: ms, s, m, h or d)\n"},
    {"[redis]\nkeepalive = 99ms\n",
     "t.ini:2: duration '99ms' for 'keepalive' is too short: 0 (off) or at least 100ms\n"},
    {"[redis]\nkeepalive = 400d\n",
     "t.ini:2: duration '400d' for 'keepalive' is longer than the maximum of 365d\n"},
    {"[redis]\ntimeout = 0\n", "t.ini:2: bad duration '0' for 'timeout' (expected an integer "
                               "> 0 and a unit: ms, s, m, h or d)\n"},
    {"[agent]\nshadow = maybe\n", "t.ini:2: bad boolean 'maybe' for 'shadow' (expected yes, no, "
                                  "on, off, true, false, 1 or 0)\n"},
    {"[rule:r]\nrate = 1/1s\nmatch = path ^(/api\n",
     "t.ini:3: bad regex '^(/api' in 'match': Unmatched ( or \\(\n"},
    {"[agent]\nallow = 10.0.0.0/8, 10.0.0.0/33\n", "t.ini:2: bad CIDR '10.0.0.0/33' in 'allow'\n"},
    {"[agent]\nlisten = localhost\n", "t.ini:2: bad address 'localhost' for 'listen' (expected "
                                      "host:port, [v6]:port or unix:/path)\n"},
    {"[agent]\nlisten = ::1:80\n", "t.ini:2: bad address '::1:80' for 'listen' (expected "
                                   "host:port, [v6]:port or unix:/path)\n"},
    {"[agent]\nstats = 127.0.0.1:65536\n", "t.ini:2: bad address '127.0.0.1:65536' for 'stats' "
                                           "(expected host:port, [v6]:port or unix:/path)\n"},
    {"[agent]\nlisten = unix:run/x.sock\n", "t.ini:2: bad address 'unix:run/x.sock' for 'listen' "
                                            "(expected host:port, [v6]:port or unix:/path)\n"},
    {"\n[rule:r]\nkey = k\n", "t.ini:2: rule 'r' has no rate\n"},
    {"[rule:r]\nrate = 1/1s\nburst = 0\n", "t.ini:3: bad number '0' for 'burst' (expected an "
                                           "integer from 1 to 1000000000000000)\n"},
    {"[agent]\nlog_level = verbose\n",
     "t.ini:2: bad value 'verbose' for 'log_level' (expected error, warn, info or debug)\n"},
    {"[rule:r]\nrate = 1/1s\nalgorithm = leaky\n", "t.ini:3: bad value 'leaky' for 'algorithm' "
                                                   "(expected token-bucket or sliding-window)\n"},
    {"[rule:r]\nrate = 1/1s\non_redis_down = deny\n",
     "t.ini:3: bad value 'deny' for 'on_redis_down' (expected open or closed)\n"},
    {"[fallback]\nshare = 0\n",
     "t.ini:2: bad value '0' for 'share' (expected auto or a number in (0, 1])\n"},
    {"[lease]\nmax_fraction = 1.5\n",
     "t.ini:2: bad value '1.5' for 'max_fraction' (expected a number in (0, 1])\n"},
    {"[agent]\nalert_share = nan\n",
     "t.ini:2: bad value 'nan' for 'alert_share' (expected a number in (0, 1])\n"},
    {"[rule:r]\nrate = 1/1s\nmatch = path\n",
     "t.ini:3: 'match' needs an arg and a regex: match = ARG REGEX\n"},
    {"[rule:r]\nrate = 1/1s\nkey =\n", "t.ini:3: empty list for 'key'\n"},
    {"[rule:r]\nrate = 1/1s\nkey = , ,\n", "t.ini:3: empty list for 'key'\n"},
    {"[rule:r]\nrate = 1/1s\nkey = a, b, a\n", "t.ini:3: arg 'a' appears twice in 'key'\n"},
    {"[rule:r]\nrate = 1/1s\nmessage =\n", "t.ini:3: empty value for 'message'\n"},
    {"[redis]\nurl = redis://127.0.0.1:6379\ncluster = 127.0.0.1:7000\n",
     "t.ini:3: 'url' and 'cluster' cannot be used together (lines 2 and 3)\n"},
    {"[redis]\nsentinel = 127.0.0.1:26379\nmaster = m\nurl = redis://127.0.0.1:6379\n",
     "t.ini:4: 'url' and 'sentinel' cannot be used together (lines 2 and 4)\n"},
    {"[redis]\nsentinel = 127.0.0.1:26379\n", "t.ini:2: 'sentinel' needs 'master'\n"},
    {"[redis]\ncluster = 127.0.0.1:7000\nsentinel = 127.0.0.1:26379\nmaster = m\n",
     "t.ini:3: 'cluster' and 'sentinel' cannot be used together (lines 2 and 3)\n"},
    {"[redis]\nmaster = m\n", "t.ini:2: 'master' is only used with 'sentinel'\n"},
    {"[redis]\ncluster = 127.0.0.1:7000, redis\n",
     "t.ini:2: bad address 'redis' in 'cluster' (expected host:port or [v6]:port)\n"},
    {"[redis]\nurl = http://127.0.0.1:6379\n",
     "t.ini:2: bad url 'http://127.0.0.1:6379' "
     "(expected redis://[[user]:password@]host:port[/db] or unix:/path)\n"},
    {"[redis]\nurl = redis://pw@127.0.0.1:6379\n",
     "t.ini:2: bad url 'redis://***@127.0.0.1:6379' "
     "(expected redis://[[user]:password@]host:port[/db] or unix:/path)\n"},
    /* credentials: one source each, a user needs a password */
    {"[redis]\nurl = redis://127.0.0.1:6379\npassword = a\npassword_file = /nonexistent\n",
     "t.ini:4: 'password' and 'password_file' cannot be used together (lines 3 and 4)\n"
     "t.ini:4: cannot read password_file '/nonexistent': No such file or directory\n"},
    {"[redis]\nurl = redis://:x@127.0.0.1:6379\npassword = a\n",
     "t.ini:3: 'password' and the url's password cannot be used together (lines 2 and 3)\n"},
    {"[redis]\nusername = u\nurl = redis://v:x@127.0.0.1:6379\n",
     "t.ini:3: 'username' and the url's user name cannot be used together (lines 2 and 3)\n"},
    {"[redis]\nurl = redis://127.0.0.1:6379\nusername = u\n",
     "t.ini:3: 'username' needs a password (password, password_file or the url's)\n"},
    {"[redis]\npassword = a\n",
     "t.ini:2: 'password' is only used with url, cluster or sentinel\n"},
    {"[redis]\nurl = redis://127.0.0.1:6379\npassword =\n",
     "t.ini:3: empty value for 'password'\n"},
    {"[redis]\nurl = redis://127.0.0.1:6379\nsentinel_password = a\n",
     "t.ini:3: 'sentinel_password' is only used with 'sentinel'\n"},
    {"[redis]\nsentinel = 127.0.0.1:26379\nmaster = m\nsentinel_username = u\n",
     "t.ini:4: 'sentinel_username' needs 'sentinel_password'\n"},
    {"[redis]\nsentinel = :pw@127.0.0.1:26379\nmaster = m\n",
     "t.ini:2: bad address in 'sentinel': no user or password here (expected host:port; "
     "credentials go in sentinel_username and sentinel_password)\n"
     "t.ini:3: 'master' is only used with 'sentinel'\n"},
    {"[redis]\nurl = redis://:p%4@127.0.0.1:6379\n",
     "t.ini:2: bad url: a '%' in its user or password must start an escape such as %40 for "
     "'@' (two hex digits, not %00)\n"},
    {"[redis]\nurl = redis://:p%00@127.0.0.1:6379\n",
     "t.ini:2: bad url: a '%' in its user or password must start an escape such as %40 for "
     "'@' (two hex digits, not %00)\n"},
    {"[lease]\ninterval = 1s\nttl = 1s\n",
     "t.ini:3: lease ttl (1000 ms) must be longer than interval (1000 ms)\n"},
    {"[lease]\ninterval = 2s\n",
     "t.ini:2: lease ttl (1000 ms) must be longer than interval (2000 ms)\n"},
    {"[agent]\nworkers = 2\nworkers = 3\n",
     "t.ini:3: duplicate key 'workers' (first set at line 2)\n"},
    {"[agent]\nshadow = no\n[agent]\nshadow = yes\n",
     "t.ini:4: duplicate key 'shadow' (first set at line 2)\n"},
    {"listen = 1.2.3.4:5\n", "t.ini:1: key 'listen' outside any section\n"},
    {"[agent\nlisten = 1.2.3.4:5\n", "t.ini:1: syntax error: missing ']' in section header\n"},
    {"[agent]\nlisten\n", "t.ini:2: syntax error: expected 'key = value' or '[section]'\n"},
    {"[agent]\nworkers = 2\n  3\n",
     "t.ini:3: 'workers' takes one line (is this line indented by mistake?)\n"},
    {"[rule:r]\nrate = 1/1s\nburst = 5\nburst = 6\n",
     "t.ini:4: duplicate key 'burst' (first set at line 3)\n"},
    {"[redis]\nprefix = 12345678901234567890123456789012345678901234567890123456789012345\n",
     "t.ini:2: 'prefix' is longer than 64 bytes\n"},
    /* limits from args: each with its ceiling, and no ceiling without one */
    {"[rule:r]\nkey = k\nrate = arg:limit\n",
     "t.ini:3: rate = arg:limit needs max_rate = N/DURATION in the same rule (the highest rate "
     "the arg may ask for)\n"},
    {"[rule:r]\nrate = 10/1m\nmax_rate = 100/1m\n",
     "t.ini:3: 'max_rate' is only used with rate = arg:NAME\n"},
    {"[rule:r]\nrate = 10/1m\nburst = arg:b\n",
     "t.ini:3: burst = arg:b needs max_burst = N in the same rule (the highest burst the arg may "
     "ask for)\n"},
    {"[rule:r]\nrate = 10/1m\nmax_burst = 5\n",
     "t.ini:3: 'max_burst' is only used with burst = arg:NAME, or with rate = arg:NAME and no "
     "burst\n"},
    {"[rule:r]\nrate = arg:l\nmax_rate = 10/1m\nburst = 5\nmax_burst = 5\n",
     "t.ini:5: 'max_burst' is only used with burst = arg:NAME, or with rate = arg:NAME and no "
     "burst\n"},
    {"[rule:r]\nrate = arg:\n", "t.ini:2: bad arg name in 'rate = arg:'\n"},
    {"[rule:r]\nrate = 1/1s\nburst = arg:a b\nmax_burst = 3\n",
     "t.ini:3: bad arg name in 'burst = arg:a b'\n"},
    {"[rule:r]\nrate = arg:l\nmax_rate = 10\n",
     "t.ini:3: bad rate '10' for 'max_rate' (expected N/DURATION such as 100/1m or 10/1h)\n"},
    {"[rule:r]\nrate = arg:l\nmax_rate = 10/1m\nmax_burst = 0\n",
     "t.ini:4: bad number '0' for 'max_burst' (expected an integer from 1 to "
     "1000000000000000)\n"},
    {"[rule:r]\nrate = arg:l\nrate = 1/1s\nmax_rate = 10/1m\n",
     "t.ini:3: duplicate key 'rate' (first set at line 2)\n"},
};

START_TEST(test_bad)
{
    char err[ERRLEN];

    load_bad(bad_configs[_i].text, err, sizeof(err));
    ck_assert_str_eq(err, bad_configs[_i].err);
}
END_TEST

/* The smallest frame HAProxy allows holds the ACK of a usual rule. */
START_TEST(test_small_frame_ok)
{
    struct config *cfg = load_ok("[agent]\nmax_frame_size = 256\n"
                                 "[rule:api-key]\nkey = key\nrate = 100/1m\nburst = 20\n");

    ck_assert_uint_le(config_ack_max_size(&cfg->rules[0]), 256);
    config_free(cfg);
}
END_TEST

START_TEST(test_many_errors)
{
    char err[ERRLEN];
    static const char text[] = "[agent]\n"          /* 1 */
                               "workers = -1\n"     /* 2 */
                               "bogus = 1\n"        /* 3 */
                               "[fallback]\n"       /* 4 */
                               "mode = half-open\n" /* 5 */
                               "[rule:norate]\n"    /* 6 */
                               "burst = 10\n"       /* 7 */
                               "[lease]\n"          /* 8 */
                               "ttl = 10ms\n"       /* 9 */
                               "junk\n"             /* 10 */
                               "[rule:x]\n"         /* 11 */
                               "rate = 10/1y\n"     /* 12 */
                               "match = a (\n"      /* 13 */
                               "[nope]\n"           /* 14 */
                               "anything = goes\n"; /* 15 */

    load_bad(text, err, sizeof(err));
    ck_assert_str_eq(err,
                     "t.ini:2: bad number '-1' for 'workers' (expected an integer from 1 to 256)\n"
                     "t.ini:3: unknown key 'bogus' in [agent]\n"
                     "t.ini:5: bad value 'half-open' for 'mode' (expected open or closed)\n"
                     "t.ini:6: rule 'norate' has no rate\n"
                     "t.ini:9: lease ttl (10 ms) must be longer than interval (100 ms)\n"
                     "t.ini:10: syntax error: expected 'key = value' or '[section]'\n"
                     "t.ini:12: bad rate '10/1y' (expected N/DURATION such as 100/1m or 10/1h)\n"
                     "t.ini:13: bad regex '(' in 'match': Unmatched ( or \\(\n"
                     "t.ini:14: unknown section [nope]\n");
}
END_TEST

/* Only whole lines go into a short buffer, which is always terminated. */
START_TEST(test_error_buffer)
{
    static const char text[] = "[agent]\nworkers = 0\nfoo = 1\n";
    const char *first =
        "t.ini:2: bad number '0' for 'workers' (expected an integer from 1 to 256)\n";
    char err[200];
    struct config *cfg;

    memset(err, 'x', sizeof(err));
    load_bad(text, err, strlen(first) + 5);
    ck_assert_str_eq(err, first);
    memset(err, 'x', sizeof(err));
    load_bad(text, err, 10);
    ck_assert_str_eq(err, "t.ini:2: ");
    load_bad(text, NULL, 0);
    ck_assert_int_eq(config_load_string(text, NULL, &cfg, err, sizeof(err)), -1);
    ck_assert_ptr_eq(strstr(err, "<string>:2: "), err);
}
END_TEST

/* Past the kept errors, the rest are counted. */
START_TEST(test_error_flood)
{
    char *text = malloc(100 * 16 + 16), *p = text;
    char err[ERRLEN * 4];

    p += sprintf(p, "[agent]\n");
    for (int i = 0; i < 100; i++)
        p += sprintf(p, "k%d = 1\n", i);
    load_bad(text, err, sizeof(err));
    ck_assert_ptr_nonnull(strstr(err, "t.ini:65: unknown key 'k63' in [agent]\n"));
    ck_assert_ptr_null(strstr(err, "k64"));
    ck_assert_ptr_nonnull(strstr(err, "t.ini: 36 more errors not shown\n"));
    free(text);
}
END_TEST

/* Lists past their CFG_MAX_* bounds. */
START_TEST(test_limits)
{
    char *text = malloc(1100 * 32), *p;
    char err[ERRLEN];
    struct config *cfg;

    p = text + sprintf(text, "[rule:r]\nrate = 1/1s\n");
    for (int i = 0; i < CFG_MAX_MATCHES + 1; i++)
        p += sprintf(p, "match = a%d ^x\n", i);
    load_bad(text, err, sizeof(err));
    ck_assert_str_eq(err, "t.ini:19: too many 'match' lines (max 16)\n");

    p = text + sprintf(text, "[rule:r]\nrate = 1/1s\nkey = k0");
    for (int i = 1; i < CFG_MAX_KEY_ARGS + 1; i++)
        p += sprintf(p, ",k%d", i);
    strcpy(p, "\n");
    load_bad(text, err, sizeof(err));
    ck_assert_str_eq(err, "t.ini:3: too many args in 'key' (max 16)\n");

    p = text + sprintf(text, "[agent]\nallow = 10.0.0.0/8\n");
    for (int i = 1; i < CFG_MAX_ALLOW + 1; i++)
        p += sprintf(p, "    10.0.%d.1\n", i);
    load_bad(text, err, sizeof(err));
    ck_assert_str_eq(err, "t.ini:66: too many entries in 'allow' (max 64)\n");

    p = text;
    for (int i = 0; i < CFG_MAX_RULES; i++)
        p += sprintf(p, "[rule:r%d]\nrate = 1/1s\n", i);
    cfg = load_ok(text);
    ck_assert_uint_eq(cfg->nrules, CFG_MAX_RULES);
    ck_assert_str_eq(cfg->rules[CFG_MAX_RULES - 1].name, "r1023");
    config_free(cfg);
    sprintf(p, "[rule:one-more]\nrate = 1/1s\n");
    load_bad(text, err, sizeof(err));
    ck_assert_str_eq(err, "t.ini:2049: too many rules (max 1024)\n");
    free(text);
}
END_TEST

/* Long lines: beyond inih's stock 200 bytes is fine; beyond ours is an error
 * that does not shift the line numbers after it. */
START_TEST(test_long_lines)
{
    char *text = malloc(8192), *p;
    char err[ERRLEN];
    struct config *cfg;

    p = text + sprintf(text, "[rule:r]\nrate = 1/1s\nmatch = path ^/(");
    for (int i = 0; i < 100; i++)
        p += sprintf(p, "a%d|", i);
    sprintf(p, "zz)$\n");
    cfg = load_ok(text);
    ck_assert_uint_eq(cfg->rules[0].nmatches, 1);
    ck_assert_int_eq(regexec(&cfg->rules[0].matches[0].re, "/a99", 0, NULL, 0), 0);
    config_free(cfg);

    p = text + sprintf(text, "[agent]\nstats = ");
    memset(p, 'x', 5000);
    p += 5000;
    sprintf(p, "\nworkers = 0\n");
    load_bad(text, err, sizeof(err));
    ck_assert_str_eq(err, "t.ini:2: line too long (max 4094 bytes)\n"
                          "t.ini:3: bad number '0' for 'workers' (expected an integer from 1 to "
                          "256)\n");
    free(text);
}
END_TEST

/* ---- rule semantics ------------------------------------------------------------------- */

START_TEST(test_resolution)
{
    struct config *cfg;

    /* [fallback] after the rules still gives their default on_redis_down */
    cfg = load_ok("[rule:a]\nrate = 1/1s\n"
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
    cfg = load_ok("[rule:a]\nrate = 1/1s\nshadow = no\n"
                  "[rule:b]\nrate = 1/1s\n"
                  "[agent]\nshadow = yes\n");
    ck_assert_int_eq(cfg->shadow, 1);
    ck_assert_int_eq(cfg->rules[0].shadow, 1);
    ck_assert_int_eq(cfg->rules[1].shadow, 1);
    ck_assert_int_eq(cfg->rules[0].on_redis_down, DOWN_OPEN);
    config_free(cfg);

    /* burst defaults to N, also when rate comes after other keys */
    cfg = load_ok("[rule:a]\nkey = k\nrate = 30/1m\n[rule:b]\nburst = 7\nrate = 30/1m\n");
    ck_assert_uint_eq(cfg->rules[0].burst, 30);
    ck_assert_uint_eq(cfg->rules[1].burst, 7);
    config_free(cfg);
}
END_TEST

/* rate = arg:NAME, burst = arg:NAME and their ceilings */
START_TEST(test_arg_limits)
{
    struct config *cfg;
    const struct cfg_rule *r;

    cfg = load_ok("[rule:a]\nkey = k\nrate = arg:limit\nmax_rate = 1000/1m\n"
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
    cfg = load_ok("[rule:r]\n"
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
    ck_assert_int_eq(regexec(&r->matches[0].re, "paid", 0, NULL, 0), 0);
    ck_assert_int_eq(regexec(&r->matches[0].re, "unpaid", 0, NULL, 0), REG_NOMATCH);
    ck_assert_int_eq(regexec(&r->matches[1].re, "Mozilla/5.0 X11; Linux", 0, NULL, 0), 0);
    ck_assert_int_eq(regexec(&r->matches[3].re, "www.example.com", 0, NULL, 0), 0);
    ck_assert_uint_eq(r->nkeys, 3);
    ck_assert_str_eq(r->keys[2], "c");
    config_free(cfg);
}
END_TEST

/* ---- match regexes that regcomp would take seconds and gigabytes for ---- */

#define BAD_RE(re, why) {re, "t.ini:3: bad regex '" re "' in 'match': " why "\n"}
static const struct {
    const char *re;
    const char *err;
} costly_regexes[] = {
    /* stacked repetitions: undefined in POSIX, and glibc doubles 'a' per '+' */
    BAD_RE("a++++++++++++++++++++++++", "'+' follows another repetition (undefined in POSIX "
                                        "extended regexes)"),
    BAD_RE("a*+", "'+' follows another repetition (undefined in POSIX extended regexes)"),
    BAD_RE("^x.*?$", "'?' follows another repetition (undefined in POSIX extended regexes)"),
    BAD_RE("a{2}{3}", "'{3}' follows another repetition (undefined in POSIX extended regexes)"),
    BAD_RE("(ab)+{2,}", "'{2,}' follows another repetition (undefined in POSIX extended "
                        "regexes)"),
    /* counts, nested ones multiplied */
    BAD_RE("((a{1,255}){1,255}){1,255}", "repetition counts over 1000 (nested ones multiplied)"),
    BAD_RE("(a{1,40}){1,40}", "repetition counts over 1000 (nested ones multiplied)"),
    BAD_RE("([0-9]{2,}|x){500}", "repetition counts over 1000 (nested ones multiplied)"),
    BAD_RE(".{0,2048}", "repetition counts over 1000 (nested ones multiplied)"),
    BAD_RE("x{,1001}", "repetition counts over 1000 (nested ones multiplied)"),
    BAD_RE("a{99999999999999999999}", "repetition counts over 1000 (nested ones multiplied)"),
    /* grouping each '+' doubles as well: bounded by the total */
    BAD_RE("((((((((((((a+)+)+)+)+)+)+)+)+)+)+)+)+", "repetitions expand it to more than 2048 "
                                                    "atoms"),
    BAD_RE("(a?){1000}(b?){1000}(c?){1000}", "repetitions expand it to more than 2048 atoms"),
    BAD_RE("(abc){700}", "repetitions expand it to more than 2048 atoms"),
    /* back-references: matching them backtracks (19 s for 60 bytes) */
    BAD_RE("(a*)(a*)(a*)\\3\\2\\1c", "back-reference '\\3' (undefined in POSIX extended "
                                      "regexes; glibc may take exponential time to match it)"),
};

START_TEST(test_costly_regex)
{
    char text[512], err[ERRLEN];
    struct timespec t0, t1;

    snprintf(text, sizeof(text), "[rule:r]\nrate = 1/1s\nmatch = path %s\n",
             costly_regexes[_i].re);
    clock_gettime(CLOCK_MONOTONIC, &t0);
    load_bad(text, err, sizeof(err));
    clock_gettime(CLOCK_MONOTONIC, &t1);
    ck_assert_str_eq(err, costly_regexes[_i].err);
    /* refused before regcomp: 24 '+' took regcomp gigabytes and minutes */
    ck_assert_int_lt((t1.tv_sec - t0.tv_sec) * 1000000000L + (t1.tv_nsec - t0.tv_nsec),
                     500000000L);
}
END_TEST

/* What operators write stays accepted, and means what it did. */
static const struct {
    const char *re;
    const char *hit, *miss;
} plain_regexes[] = {
    {"^/api/", "/api/v1", "/web/api/"},
    {"^(GET|POST)$", "POST", "PUT"},
    {"[0-9]{1,3}", "x42", "x"},
    {"\\.(png|jpg)$", "/a/b.png", "/a/bpng"},
    {"^[a-f0-9]{64}$", "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
     "0123"},
    {"^/v[12]/(users|orders)/[^/]+$", "/v1/users/42", "/v3/users/42"},
    {"^.{0,1000}$", "short", NULL},
    {"(a+)+b", "aaab", "aaa"},
    {"^([a-z]+\\.)*example\\.com$", "a.b.example.com", "example.org"},
    {"[]{}+*?]", "{", "a"},
    {"[[:alpha:]]+[[:digit:]]{2}", "ab12", "ab1"},
    {"a\\{2}", "a{2}", "aa"},
    {"x{2,}", "xx", "x"},
    {"(ab){1,10}(cd){1,10}", "abcd", "ac"},
};

START_TEST(test_plain_regex)
{
    char text[512];
    struct config *cfg;

    snprintf(text, sizeof(text), "[rule:r]\nrate = 1/1s\nmatch = path %s\n",
             plain_regexes[_i].re);
    cfg = load_ok(text);
    ck_assert_str_eq(cfg->rules[0].matches[0].pattern, plain_regexes[_i].re);
    ck_assert_int_eq(regexec(&cfg->rules[0].matches[0].re, plain_regexes[_i].hit, 0, NULL, 0),
                     0);
    if (plain_regexes[_i].miss)
        ck_assert_int_eq(
            regexec(&cfg->rules[0].matches[0].re, plain_regexes[_i].miss, 0, NULL, 0),
            REG_NOMATCH);
    config_free(cfg);
}
END_TEST

/* The pattern's length is bounded too (lines may hold 4094 bytes). */
START_TEST(test_regex_length)
{
    char text[2048], err[ERRLEN];
    struct config *cfg;
    int n = sprintf(text, "[rule:r]\nrate = 1/1s\nmatch = path ");

    memset(text + n, 'a', CFG_REGEX_MAX_LEN);
    strcpy(text + n + CFG_REGEX_MAX_LEN, "\n");
    cfg = load_ok(text);
    config_free(cfg);
    memset(text + n, 'a', CFG_REGEX_MAX_LEN + 1);
    strcpy(text + n + CFG_REGEX_MAX_LEN + 1, "\n");
    load_bad(text, err, sizeof(err));
    ck_assert_ptr_nonnull(strstr(err, "t.ini:3: bad regex 'aaaa"));
    ck_assert_ptr_nonnull(strstr(err, "' in 'match': longer than 1024 bytes\n"));
}
END_TEST

/* ---- peers ------------------------------------------------------------------------------ */

static const struct {
    const char *addr;
    int allowed;
} peers[] = {
    {"127.0.0.1", 1},
    {"127.255.0.9", 1},
    {"128.0.0.1", 0},
    {"10.1.200.3", 1},
    {"10.2.0.1", 0},
    {"192.0.2.77", 1},
    {"192.0.2.78", 0},
    {"::1", 1},
    {"::2", 0},
    {"2001:db8::1", 1},
    {"2001:db9::1", 0},
    {"::ffff:127.0.0.1", 1},
    {"::ffff:10.1.0.1", 1},
    {"::ffff:8.8.8.8", 0},
    {"::127.0.0.1", 0},
    {"64:ff9b::127.0.0.1", 0},
};

static const char peer_config[] =
    "[agent]\nallow = 127.0.0.0/8, 10.1.0.0/16, 192.0.2.77, ::1/128, 2001:db8::/32\n";

START_TEST(test_peer)
{
    struct config *cfg = load_ok(peer_config);
    struct sockaddr_storage ss;

    memset(&ss, 0, sizeof(ss));
    if (strchr(peers[_i].addr, ':')) {
        struct sockaddr_in6 *sin6 = (struct sockaddr_in6 *)&ss;
        sin6->sin6_family = AF_INET6;
        ck_assert_int_eq(inet_pton(AF_INET6, peers[_i].addr, &sin6->sin6_addr), 1);
    } else {
        struct sockaddr_in *sin = (struct sockaddr_in *)&ss;
        sin->sin_family = AF_INET;
        ck_assert_int_eq(inet_pton(AF_INET, peers[_i].addr, &sin->sin_addr), 1);
    }
    ck_assert_msg(config_peer_allowed(cfg, (struct sockaddr *)&ss) == peers[_i].allowed,
                  "%s: expected %d", peers[_i].addr, peers[_i].allowed);
    config_free(cfg);
}
END_TEST

START_TEST(test_peer_special)
{
    struct config *cfg = load_ok(peer_config);
    struct config *any = load_ok("");
    struct sockaddr_un sun;
    struct sockaddr_in sin;
    struct sockaddr_in6 sin6;

    memset(&sun, 0, sizeof(sun));
    sun.sun_family = AF_UNIX;
    ck_assert_int_eq(config_peer_allowed(cfg, (struct sockaddr *)&sun), 1);
    memset(&sin, 0, sizeof(sin));
    sin.sin_family = AF_INET;
    inet_pton(AF_INET, "8.8.8.8", &sin.sin_addr);
    ck_assert_int_eq(config_peer_allowed(cfg, (struct sockaddr *)&sin), 0);
    ck_assert_int_eq(config_peer_allowed(any, (struct sockaddr *)&sin), 1);
    ck_assert_int_eq(config_peer_allowed(cfg, NULL), 0);
    config_free(cfg);
    config_free(any);

    /* ::ffff:0:0/96 is a v6 CIDR that holds every v4-mapped peer */
    cfg = load_ok("[agent]\nallow = ::ffff:0.0.0.0/96, 0.0.0.0/32\n");
    inet_pton(AF_INET, "1.2.3.4", &sin.sin_addr);
    ck_assert_int_eq(config_peer_allowed(cfg, (struct sockaddr *)&sin), 0);
    memset(&sin6, 0, sizeof(sin6));
    sin6.sin6_family = AF_INET6;
    inet_pton(AF_INET6, "::ffff:1.2.3.4", &sin6.sin6_addr);
    ck_assert_int_eq(config_peer_allowed(cfg, (struct sockaddr *)&sin6), 1);
    config_free(cfg);

    /* "allow =" alone is the default: any peer */
    cfg = load_ok("[agent]\nallow =\n");
    ck_assert_uint_eq(cfg->nallow, 0);
    ck_assert_int_eq(config_peer_allowed(cfg, (struct sockaddr *)&sin6), 1);
    config_free(cfg);
}
END_TEST

/* ---- files --------------------------------------------------------------------------------- */

START_TEST(test_file)
{
    char path[] = "/tmp/test_config_XXXXXX";
    char err[ERRLEN], expect[ERRLEN];
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
        {"", ""},           {"plain", "plain"},     {"p%40ss", "p@ss"},
        {"%3a%2F%25", ":/%"}, {"%7e%7E", "~~"},      {"a%", NULL},
        {"a%4", NULL},       {"%g0", NULL},          {"%00", NULL},
        {"p%40ss%3Aw%2Frd", "p@ss:w/rd"},
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
    char path[] = "/tmp/test_config_pw_XXXXXX", text[512], err[ERRLEN];
    struct config *cfg;
    size_t len;
    char *out;
    int fd = mkstemp(path);
    FILE *fp;

    cfg = load_ok("[redis]\nurl = redis://li%6Dit:p%40ss%3Aw%2Frd@127.0.0.1:6379/1\n");
    ck_assert_str_eq(cfg->redis_auth_user, "limit");
    ck_assert_str_eq(cfg->redis_auth_password, "p@ss:w/rd");
    out = config_render(cfg, &len);
    ck_assert_ptr_null(strstr(out, "p%40ss"));
    ck_assert_ptr_nonnull(strstr(out, "url = redis://li%6Dit:***@127.0.0.1:6379/1\n"));
    free(out);
    config_free(cfg);

    cfg = load_ok("[redis]\ncluster = 127.0.0.1:7000\nusername = limiter\npassword = s3cret\n");
    ck_assert_str_eq(cfg->redis_auth_user, "limiter");
    ck_assert_str_eq(cfg->redis_auth_password, "s3cret");
    out = config_render(cfg, &len);
    ck_assert_ptr_null(strstr(out, "s3cret"));
    ck_assert_ptr_nonnull(strstr(out, "username = limiter\npassword = ***\n"));
    free(out);
    config_free(cfg);

    cfg = load_ok("[redis]\nsentinel = 127.0.0.1:26379\nmaster = m\npassword = m4ster\n"
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
    cfg = load_ok(text);
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
    cfg = load_ok(text);
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

/* [agent] max_connections and stats_allow: defaults (1024; loopback only),
 * values, a list over continuation lines that replaces the default, the
 * empty list (any peer), errors naming the key. */
START_TEST(test_listener_limits)
{
    struct config *cfg = load_ok("");
    struct sockaddr_in lo = {.sin_family = AF_INET}, other = {.sin_family = AF_INET};
    struct sockaddr_in6 lo6 = {.sin6_family = AF_INET6};
    char err[ERRLEN];

    inet_pton(AF_INET, "127.0.0.1", &lo.sin_addr);
    inet_pton(AF_INET, "192.0.2.1", &other.sin_addr);
    inet_pton(AF_INET6, "::1", &lo6.sin6_addr);
    ck_assert_uint_eq(cfg->max_connections, 1024);
    ck_assert_uint_eq(cfg->nstats_allow, 2);
    ck_assert(net_peer_allowed(cfg->stats_allow, cfg->nstats_allow, (struct sockaddr *)&lo));
    ck_assert(net_peer_allowed(cfg->stats_allow, cfg->nstats_allow, (struct sockaddr *)&lo6));
    ck_assert(!net_peer_allowed(cfg->stats_allow, cfg->nstats_allow, (struct sockaddr *)&other));
    config_free(cfg);

    cfg = load_ok("[agent]\nmax_connections = 1\nstats_allow = 192.0.2.0/24,\n  10.0.0.0/8\n");
    ck_assert_uint_eq(cfg->max_connections, 1);
    ck_assert_uint_eq(cfg->nstats_allow, 2);
    ck_assert_uint_eq(cfg->stats_allow[1].prefix, 8);
    ck_assert(net_peer_allowed(cfg->stats_allow, cfg->nstats_allow, (struct sockaddr *)&other));
    ck_assert(!net_peer_allowed(cfg->stats_allow, cfg->nstats_allow, (struct sockaddr *)&lo));
    ck_assert_uint_eq(cfg->nallow, 0); /* the SPOP list is another one */
    config_free(cfg);

    cfg = load_ok("[agent]\nstats_allow =\n");
    ck_assert_uint_eq(cfg->nstats_allow, 0);
    ck_assert(net_peer_allowed(cfg->stats_allow, cfg->nstats_allow, (struct sockaddr *)&other));
    config_free(cfg);

    load_bad("[agent]\nstats_allow = 10.0.0.0/33\n", err, sizeof(err));
    ck_assert_str_eq(err, "t.ini:2: bad CIDR '10.0.0.0/33' in 'stats_allow'\n");
    load_bad("[agent]\nmax_connections = 0\n", err, sizeof(err));
    ck_assert_str_eq(err, "t.ini:2: bad number '0' for 'max_connections' (expected an integer "
                          "from 1 to 1000000)\n");
    load_bad("[agent]\nmax_connections = 100\nmax_connections = 200\n", err, sizeof(err));
    ck_assert_str_eq(err, "t.ini:3: duplicate key 'max_connections' (first set at line 2)\n");
}
END_TEST

/* [agent] max_handshakes and hello_timeout: defaults (128, 5s), values,
 * bounds. */
START_TEST(test_handshake_budget)
{
    struct config *cfg = load_ok("");
    char err[ERRLEN];

    ck_assert_uint_eq(cfg->max_handshakes, 128);
    ck_assert_uint_eq(cfg->hello_timeout_ms, 5000);
    ck_assert_uint_lt(cfg->max_handshakes, cfg->max_connections);
    config_free(cfg);
    cfg = load_ok("[agent]\nmax_handshakes = 16\nhello_timeout = 250ms\n");
    ck_assert_uint_eq(cfg->max_handshakes, 16);
    ck_assert_uint_eq(cfg->hello_timeout_ms, 250);
    config_free(cfg);
    cfg = load_ok("[agent]\nhello_timeout = 1m\n");
    ck_assert_uint_eq(cfg->hello_timeout_ms, 60000);
    config_free(cfg);
    load_bad("[agent]\nmax_handshakes = 0\n", err, sizeof(err));
    ck_assert_str_eq(err, "t.ini:2: bad number '0' for 'max_handshakes' (expected an integer "
                          "from 1 to 1000000)\n");
    load_bad("[agent]\n\nhello_timeout = 61s\n", err, sizeof(err));
    ck_assert_str_eq(err, "t.ini:3: hello_timeout longer than 60s: a connection that has not "
                          "said HELLO by then never will\n");
    load_bad("[agent]\nhello_timeout = 5\n", err, sizeof(err));
    ck_assert_str_eq(err, "t.ini:2: bad duration '5' for 'hello_timeout' (expected an integer > 0 "
                          "and a unit: ms, s, m, h or d)\n");
}
END_TEST

#define LOOP(tc, fn, table) tcase_add_loop_test(tc, fn, 0, (int)(sizeof(table) / sizeof(table[0])))

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
        if (strstr(files[i], "arg:")) { /* limits from args are printed as such */
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
    struct config *a = load_ok("[agent]\nworkers = 2\n[redis]\nurl = redis://:pw1@127.0.0.1:6379\n"
                               "[rule:r]\nrate = 1/1s\n");
    struct config *b = load_ok("[agent]\nworkers = 3\nlisten = 127.0.0.1:1\n[redis]\n"
                               "url = redis://:pw2@127.0.0.1:6379\n[lease]\nttl = 2s\n"
                               "[rule:r]\nrate = 2/1s\n");
    char got[1024] = "";
    size_t len, body_len;

    ck_assert_uint_eq(config_page_pending(a, a, note, got), 0);
    /* a url changed in place (here its password) is applied by the reload */
    ck_assert_uint_eq(config_page_pending(a, b, note, got), 3);
    ck_assert_str_eq(got,
                     "listen: 127.0.0.1:12345 -> 127.0.0.1:1\n"
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

static Suite *config_suite(void)
{
    Suite *s = suite_create("config");
    TCase *tc;

    tc = tcase_create("values");
    LOOP(tc, test_duration, durations);
    LOOP(tc, test_rate, rates);
    LOOP(tc, test_bool, bools);
    LOOP(tc, test_cidr, cidrs);
    suite_add_tcase(s, tc);

    tc = tcase_create("files");
    tcase_add_test(tc, print_round_trip);
    tcase_add_test(tc, test_full);
    tcase_add_test(tc, test_defaults);
    tcase_add_test(tc, test_variants);
    tcase_add_test(tc, test_resolution);
    tcase_add_test(tc, test_match);
    tcase_add_test(tc, test_arg_limits);
    tcase_add_test(tc, test_file);
    tcase_add_test(tc, test_percent_decode);
    tcase_add_test(tc, test_credentials);
    tcase_add_test(tc, test_config_page);
    suite_add_tcase(s, tc);

    tc = tcase_create("errors");
    LOOP(tc, test_bad, bad_configs);
    tcase_add_test(tc, test_many_errors);
    tcase_add_test(tc, test_small_frame_ok);
    tcase_add_test(tc, test_error_buffer);
    tcase_add_test(tc, test_error_flood);
    tcase_add_test(tc, test_limits);
    tcase_add_test(tc, test_long_lines);
    LOOP(tc, test_costly_regex, costly_regexes);
    LOOP(tc, test_plain_regex, plain_regexes);
    tcase_add_test(tc, test_regex_length);
    tcase_set_timeout(tc, 30); /* the limits test is slow under sanitizers */
    suite_add_tcase(s, tc);

    tc = tcase_create("peers");
    LOOP(tc, test_peer, peers);
    tcase_add_test(tc, test_peer_special);
    tcase_add_test(tc, test_listener_limits);
    tcase_add_test(tc, test_handshake_budget);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(config_suite());
    int failed;

    srunner_run_all(sr, CK_NORMAL);
    failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
