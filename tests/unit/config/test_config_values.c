/* SPDX-License-Identifier: Apache-2.0 */
/* test_config_values.c - the configuration's value parsers (durations,
 * rates, booleans, CIDRs) and the keys of who may talk to the agent: peers,
 * [agent] max_connections, stats_allow and stats_hosts, the handshake budget. */
#include "config/config.h"

#include <arpa/inet.h>
#include <check.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "check_util.h"

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

static const struct check_cidr cidrs[] = {
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
    struct cfg_cidr c = {0};
    int rc = config_parse_cidr(cidrs[_i].s, &c);

    check_cidr_parsed(&cidrs[_i], rc, c.family, c.prefix, c.addr);
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
    struct config *cfg = check_config_ok(peer_config);
    struct sockaddr_storage ss;

    check_peer_addr(peers[_i].addr, &ss);
    ck_assert_msg(config_peer_allowed(cfg, (struct sockaddr *)&ss) == peers[_i].allowed,
                  "%s: expected %d", peers[_i].addr, peers[_i].allowed);
    config_free(cfg);
}
END_TEST

START_TEST(test_peer_special)
{
    struct config *cfg = check_config_ok(peer_config);
    struct config *any = check_config_ok("");
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
    cfg = check_config_ok("[agent]\nallow = ::ffff:0.0.0.0/96, 0.0.0.0/32\n");
    inet_pton(AF_INET, "1.2.3.4", &sin.sin_addr);
    ck_assert_int_eq(config_peer_allowed(cfg, (struct sockaddr *)&sin), 0);
    memset(&sin6, 0, sizeof(sin6));
    sin6.sin6_family = AF_INET6;
    inet_pton(AF_INET6, "::ffff:1.2.3.4", &sin6.sin6_addr);
    ck_assert_int_eq(config_peer_allowed(cfg, (struct sockaddr *)&sin6), 1);
    config_free(cfg);

    /* "allow =" alone is the default: any peer */
    cfg = check_config_ok("[agent]\nallow =\n");
    ck_assert_uint_eq(cfg->nallow, 0);
    ck_assert_int_eq(config_peer_allowed(cfg, (struct sockaddr *)&sin6), 1);
    config_free(cfg);
}
END_TEST

/* [agent] max_connections and stats_allow: defaults (1024; loopback only),
 * values, a list over continuation lines that replaces the default, the
 * empty list (any peer), errors naming the key. */
START_TEST(test_listener_limits)
{
    struct config *cfg = check_config_ok("");
    struct sockaddr_in lo = {.sin_family = AF_INET}, other = {.sin_family = AF_INET};
    struct sockaddr_in6 lo6 = {.sin6_family = AF_INET6};
    char err[CHECK_ERRLEN];

    inet_pton(AF_INET, "127.0.0.1", &lo.sin_addr);
    inet_pton(AF_INET, "192.0.2.1", &other.sin_addr);
    inet_pton(AF_INET6, "::1", &lo6.sin6_addr);
    ck_assert_uint_eq(cfg->max_connections, 1024);
    ck_assert_uint_eq(cfg->nstats_allow, 2);
    ck_assert(net_peer_allowed(cfg->stats_allow, cfg->nstats_allow, (struct sockaddr *)&lo));
    ck_assert(net_peer_allowed(cfg->stats_allow, cfg->nstats_allow, (struct sockaddr *)&lo6));
    ck_assert(!net_peer_allowed(cfg->stats_allow, cfg->nstats_allow, (struct sockaddr *)&other));
    config_free(cfg);

    cfg = check_config_ok(
        "[agent]\nmax_connections = 1\nstats_allow = 192.0.2.0/24,\n  10.0.0.0/8\n");
    ck_assert_uint_eq(cfg->max_connections, 1);
    ck_assert_uint_eq(cfg->nstats_allow, 2);
    ck_assert_uint_eq(cfg->stats_allow[1].prefix, 8);
    ck_assert(net_peer_allowed(cfg->stats_allow, cfg->nstats_allow, (struct sockaddr *)&other));
    ck_assert(!net_peer_allowed(cfg->stats_allow, cfg->nstats_allow, (struct sockaddr *)&lo));
    ck_assert_uint_eq(cfg->nallow, 0); /* the SPOP list is another one */
    config_free(cfg);

    cfg = check_config_ok("[agent]\nstats_allow =\n");
    ck_assert_uint_eq(cfg->nstats_allow, 0);
    ck_assert(net_peer_allowed(cfg->stats_allow, cfg->nstats_allow, (struct sockaddr *)&other));
    config_free(cfg);

    check_config_bad("[agent]\nstats_allow = 10.0.0.0/33\n", err, sizeof(err));
    ck_assert_str_eq(err, "t.ini:2: bad CIDR '10.0.0.0/33' in 'stats_allow'\n");
    check_config_bad("[agent]\nmax_connections = 0\n", err, sizeof(err));
    ck_assert_str_eq(err, "t.ini:2: bad number '0' for 'max_connections' (expected an integer "
                          "from 1 to 1000000)\n");
    check_config_bad("[agent]\nmax_connections = 100\nmax_connections = 200\n", err, sizeof(err));
    ck_assert_str_eq(err, "t.ini:3: duplicate key 'max_connections' (first set at line 2)\n");
}
END_TEST

/* [agent] stats_hosts: none by default; commas, blanks and continuation
 * lines apart, kept lowercase as "a,b:1"; empty unsets; a URL, a bad port,
 * a user@ refused naming the key. */
START_TEST(test_stats_hosts)
{
    struct config *cfg = check_config_ok("");
    char err[CHECK_ERRLEN];

    ck_assert_ptr_null(cfg->stats_hosts);
    config_free(cfg);
    cfg = check_config_ok("[agent]\nstats_hosts = Stats.Example.com, mon.example.com:8443 "
                          "[2001:DB8::1]\n  10.0.0.5:9145,,other\n");
    ck_assert_str_eq(cfg->stats_hosts,
                     "stats.example.com,mon.example.com:8443,[2001:db8::1],10.0.0.5:9145,other");
    config_free(cfg);
    cfg = check_config_ok("[agent]\nstats_hosts =\n");
    ck_assert_ptr_null(cfg->stats_hosts);
    config_free(cfg);

    check_config_bad("[agent]\nstats_hosts = http://x.example/\n", err, sizeof(err));
    ck_assert_str_eq(err, "t.ini:2: bad host 'http://x.example/' in 'stats_hosts' (expected a "
                          "name or address with an optional :port, e.g. stats.example.com or "
                          "10.0.0.5:9145)\n");
    check_config_bad("[agent]\nstats_hosts = ok.example\n  x:0\n", err, sizeof(err));
    ck_assert_msg(strstr(err, "t.ini:3: bad host 'x:0' in 'stats_hosts'"), "%s", err);
    check_config_bad("[agent]\nstats_hosts = a@b\n", err, sizeof(err));
    ck_assert_msg(strstr(err, "bad host 'a@b'"), "%s", err);
}
END_TEST

/* [agent] max_handshakes and hello_timeout: defaults (128, 5s), values,
 * bounds. */
START_TEST(test_handshake_budget)
{
    struct config *cfg = check_config_ok("");
    char err[CHECK_ERRLEN];

    ck_assert_uint_eq(cfg->max_handshakes, 128);
    ck_assert_uint_eq(cfg->hello_timeout_ms, 5000);
    ck_assert_uint_lt(cfg->max_handshakes, cfg->max_connections);
    config_free(cfg);
    cfg = check_config_ok("[agent]\nmax_handshakes = 16\nhello_timeout = 250ms\n");
    ck_assert_uint_eq(cfg->max_handshakes, 16);
    ck_assert_uint_eq(cfg->hello_timeout_ms, 250);
    config_free(cfg);
    cfg = check_config_ok("[agent]\nhello_timeout = 1m\n");
    ck_assert_uint_eq(cfg->hello_timeout_ms, 60000);
    config_free(cfg);
    check_config_bad("[agent]\nmax_handshakes = 0\n", err, sizeof(err));
    ck_assert_str_eq(err, "t.ini:2: bad number '0' for 'max_handshakes' (expected an integer "
                          "from 1 to 1000000)\n");
    check_config_bad("[agent]\n\nhello_timeout = 61s\n", err, sizeof(err));
    ck_assert_str_eq(err, "t.ini:3: hello_timeout longer than 60s: a connection that has not "
                          "said HELLO by then never will\n");
    check_config_bad("[agent]\nhello_timeout = 5\n", err, sizeof(err));
    ck_assert_str_eq(err, "t.ini:2: bad duration '5' for 'hello_timeout' (expected an integer > 0 "
                          "and a unit: ms, s, m, h, d or w)\n");
}
END_TEST

/* [agent] idle_grace: default 30s, values, bounds (1s to 1h). */
START_TEST(test_idle_grace)
{
    struct config *cfg = check_config_ok("");
    char err[CHECK_ERRLEN];

    ck_assert_uint_eq(cfg->idle_grace_ms, 30000);
    config_free(cfg);
    cfg = check_config_ok("[agent]\nidle_grace = 2s\n");
    ck_assert_uint_eq(cfg->idle_grace_ms, 2000);
    config_free(cfg);
    cfg = check_config_ok("[agent]\nidle_grace = 1h\n");
    ck_assert_uint_eq(cfg->idle_grace_ms, 3600000);
    config_free(cfg);
    check_config_bad("[agent]\nidle_grace = 999ms\n", err, sizeof(err));
    ck_assert_str_eq(err, "t.ini:2: duration '999ms' for 'idle_grace' is too short: at least "
                          "1000ms\n");
    check_config_bad("[agent]\n\nidle_grace = 61m\n", err, sizeof(err));
    ck_assert_str_eq(err, "t.ini:3: idle_grace longer than 1h: a connection silent that long is "
                          "not an HAProxy's\n");
    check_config_bad("[agent]\nidle_grace = 0\n", err, sizeof(err));
    ck_assert_str_eq(err, "t.ini:2: bad duration '0' for 'idle_grace' (expected an integer > 0 "
                          "and a unit: ms, s, m, h, d or w)\n");
}
END_TEST

static Suite *config_values_suite(void)
{
    Suite *s = suite_create("config_values");
    TCase *tc;

    tc = tcase_create("values");
    CHECK_LOOP(tc, test_duration, durations);
    CHECK_LOOP(tc, test_rate, rates);
    CHECK_LOOP(tc, test_bool, bools);
    CHECK_LOOP(tc, test_cidr, cidrs);
    suite_add_tcase(s, tc);

    tc = tcase_create("peers");
    CHECK_LOOP(tc, test_peer, peers);
    CHECK_ADD(tc, test_peer_special, test_listener_limits, test_stats_hosts, test_handshake_budget,
              test_idle_grace);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return check_run(config_values_suite());
}
