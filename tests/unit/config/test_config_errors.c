/* SPDX-License-Identifier: Apache-2.0 */
/* test_config_errors.c - configurations the agent refuses: every kind of
 * error with its FILE:LINE, many errors at once, the error buffer, limits
 * and long lines, and match regexes too costly or too long to compile. */
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

/* ---- errors ----------------------------------------------------------------------- */

static const struct {
    const char *text;
    const char *err; /* the whole error output */
} bad_configs[] = {
    {"[agent]\nfoo = 1\n", "t.ini:2: unknown key 'foo' in [agent]\n"},
    {"[rule:r]\nrate = 1/1s\nlimit = 5\n",
     "t.ini:3: 'limit' is only used with algorithm = concurrency\n"},
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
    {"[agent]\nmax_frame_size = 256\n[rule:rrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrr]\nrate = "
     "1/1h\n",
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
                                 "> 0 and a unit: ms, s, m, h, d or w)\n"},
    {"[rule:r]\nrate = 100\n",
     "t.ini:2: bad rate '100' (expected N/DURATION such as 100/1m or 10/1h)\n"},
    {"[redis]\nkeepalive = 5\n", "t.ini:2: bad duration '5' for 'keepalive' (expected 0 for off, "
                                 "or an integer > 0 and a unit: ms, s, m, h, d or w)\n"},
    {"[redis]\nkeepalive = -1s\n", "t.ini:2: bad duration '-1s' for 'keepalive' (expected 0 for "
                                   "off, or an integer > 0 and a unit: ms, s, m, h, d or w)\n"},
    {"[redis]\nkeepalive = 0x\n", "t.ini:2: bad duration '0x' for 'keepalive' (expected 0 for "
                                  "off, or an integer > 0 and a unit: ms, s, m, h, d or w)\n"},
    {"[redis]\nkeepalive = 99ms\n",
     "t.ini:2: duration '99ms' for 'keepalive' is too short: 0 (off) or at least 100ms\n"},
    /* the sentinels are asked every second: a shorter window would flap */
    {"[redis]\nsentinel_window = 1s\n",
     "t.ini:2: duration '1s' for 'sentinel_window' is too short: at least 2000ms\n"},
    /* a lasting refusal is probed every 2 s at most: a shorter quiet would flap */
    {"[redis]\nerrors_quiet = 4s\n",
     "t.ini:2: duration '4s' for 'errors_quiet' is too short: at least 5000ms\n"},
    {"[redis]\nkeepalive = 400d\n",
     "t.ini:2: duration '400d' for 'keepalive' is longer than the maximum of 365d\n"},
    {"[redis]\ntimeout = 0\n", "t.ini:2: bad duration '0' for 'timeout' (expected an integer "
                               "> 0 and a unit: ms, s, m, h, d or w)\n"},
    {"[agent]\nshadow = maybe\n", "t.ini:2: bad boolean 'maybe' for 'shadow' (expected yes, no, "
                                  "on, off, true, false, 1 or 0)\n"},
    {"[rule:r]\nrate = 1/1s\nmatch = path ^(/api\n",
     "t.ini:3: bad regex '^(/api' in 'match': missing closing parenthesis at offset 6\n"},
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
    {"[agent]\ncharge = some\n",
     "t.ini:2: bad value 'some' for 'charge' (expected all-or-nothing or each)\n"},
    {"[agent]\nlog_level = verbose\n",
     "t.ini:2: bad value 'verbose' for 'log_level' (expected error, warn, info or debug)\n"},
    {"[rule:r]\nrate = 1/1s\nalgorithm = leaky\n", "t.ini:3: bad value 'leaky' for 'algorithm' "
                                                   "(expected token-bucket, sliding-window, "
                                                   "fixed-window or concurrency)\n"},
    /* window_offset: 0 <= offset < the window, and only for fixed windows */
    {"[rule:r]\nrate = 5/1d\nalgorithm = fixed-window\nwindow_offset = 1d\n",
     "t.ini:4: window_offset (86400000ms) must be shorter than the window (86400000ms, the "
     "rate's DURATION)\n"},
    {"[rule:r]\nrate = 5/1h\nalgorithm = fixed-window\nwindow_offset = 2h\n",
     "t.ini:4: window_offset (7200000ms) must be shorter than the window (3600000ms, the "
     "rate's DURATION)\n"},
    {"[rule:r]\nrate = 5/1d\nwindow_offset = 2h\n",
     "t.ini:3: 'window_offset' is only used with algorithm = fixed-window\n"},
    {"[rule:r]\nrate = 5/1d\nalgorithm = fixed-window\nwindow_offset = soon\n",
     "t.ini:4: bad duration 'soon' for 'window_offset' (expected 0 for off, or an integer > 0 and "
     "a unit: ms, s, m, h, d or w)\n"},
    /* algorithm = concurrency: limit and release required, no rate keys */
    {"[rule:c]\nalgorithm = concurrency\nrelease = r\n",
     "t.ini:1: rule 'c' (algorithm = concurrency) has no limit (requests in flight per key, "
     ">= 1)\n"},
    {"[rule:c]\nalgorithm = concurrency\nlimit = 2\n",
     "t.ini:1: rule 'c' (algorithm = concurrency) has no release (the SPOE message whose arg "
     "slot gives a slot back)\n"},
    {"[rule:c]\nalgorithm = concurrency\nlimit = 2\nrelease = r\nrate = 1/1s\nburst = 3\n",
     "t.ini:5: 'rate' is not used with algorithm = concurrency\n"
     "t.ini:6: 'burst' is not used with algorithm = concurrency\n"},
    {"[rule:c]\nalgorithm = concurrency\nlimit = 2\nrelease = r\ncost = 2\n",
     "t.ini:5: 'cost' is not used with algorithm = concurrency\n"},
    {"[rule:c]\nalgorithm = concurrency\nlimit = 2\nrelease = r\nblock_for = 1m\n",
     "t.ini:5: 'block_for' is not used with algorithm = concurrency\n"},
    {"[rule:c]\nmessage = m\nalgorithm = concurrency\nlimit = 2\nrelease = m\n",
     "t.ini:5: release 'm' is the rule's own message: a release must be a message of its "
     "own\n"},
    {"[rule:c]\nalgorithm = concurrency\nlimit = 2\nrelease = r\nmax_hold = 0\n",
     "t.ini:5: bad duration '0' for 'max_hold' (expected an integer > 0 and a unit: ms, s, m, "
     "h, d or w)\n"},
    {"[rule:r]\nrate = 1/1s\nmax_hold = 5s\n",
     "t.ini:3: 'max_hold' is only used with algorithm = concurrency\n"},
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
    {"[redis]\npassword = a\n", "t.ini:2: 'password' is only used with url, cluster or sentinel\n"},
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
    /* block_for: a duration, or 0 for off */
    {"[rule:r]\nrate = 10/1m\nblock_for = -1s\n",
     "t.ini:3: bad duration '-1s' for 'block_for' (expected 0 for off, or an integer > 0 and a "
     "unit: ms, s, m, h, d or w)\n"},
    {"[rule:r]\nrate = 10/1m\nblock_for = 15\n",
     "t.ini:3: bad duration '15' for 'block_for' (expected 0 for off, or an integer > 0 and a "
     "unit: ms, s, m, h, d or w)\n"},
    /* cost: an integer >= 0, or arg:NAME with max_cost */
    {"[rule:r]\nrate = 10/1m\ncost = -1\n",
     "t.ini:3: bad number '-1' for 'cost' (expected an integer from 0 to 1000000000000000)\n"},
    {"[rule:r]\nrate = 10/1m\ncost = 2x\n",
     "t.ini:3: bad number '2x' for 'cost' (expected an integer from 0 to 1000000000000000)\n"},
    {"[rule:r]\nrate = 10/1m\ncost = arg:c\n",
     "t.ini:3: cost = arg:c needs max_cost = N in the same rule (the highest cost the arg may "
     "ask for)\n"},
    {"[rule:r]\nrate = 10/1m\ncost = 3\nmax_cost = 5\n",
     "t.ini:4: 'max_cost' is only used with cost = arg:NAME\n"},
    {"[rule:r]\nrate = 10/1m\ncost = arg:c\nmax_cost = 0\n",
     "t.ini:4: bad number '0' for 'max_cost' (expected an integer from 1 to 1000000000000000)\n"},
    {"[rule:r]\nrate = 10/1m\ncost = arg:a,b\nmax_cost = 3\n",
     "t.ini:3: bad arg name in 'cost = arg:a,b'\n"
     "t.ini:4: 'max_cost' is only used with cost = arg:NAME\n"},
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
    char err[CHECK_ERRLEN];

    check_config_bad(bad_configs[_i].text, err, sizeof(err));
    ck_assert_str_eq(err, bad_configs[_i].err);
}
END_TEST

/* The smallest frame HAProxy allows holds the ACK of a usual rule. */
START_TEST(test_small_frame_ok)
{
    struct config *cfg = check_config_ok("[agent]\nmax_frame_size = 256\n"
                                         "[rule:api-key]\nkey = key\nrate = 100/1m\nburst = 20\n");

    ck_assert_uint_le(config_ack_max_size(&cfg->rules[0]), 256);
    config_free(cfg);
}
END_TEST

START_TEST(test_many_errors)
{
    char err[CHECK_ERRLEN];
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

    check_config_bad(text, err, sizeof(err));
    ck_assert_str_eq(err,
                     "t.ini:2: bad number '-1' for 'workers' (expected an integer from 1 to 256)\n"
                     "t.ini:3: unknown key 'bogus' in [agent]\n"
                     "t.ini:5: bad value 'half-open' for 'mode' (expected open or closed)\n"
                     "t.ini:6: rule 'norate' has no rate\n"
                     "t.ini:9: lease ttl (10 ms) must be longer than interval (100 ms)\n"
                     "t.ini:10: syntax error: expected 'key = value' or '[section]'\n"
                     "t.ini:12: bad rate '10/1y' (expected N/DURATION such as 100/1m or 10/1h)\n"
                     "t.ini:13: bad regex '(' in 'match': missing closing parenthesis at offset 1\n"
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
    check_config_bad(text, err, strlen(first) + 5);
    ck_assert_str_eq(err, first);
    memset(err, 'x', sizeof(err));
    check_config_bad(text, err, 10);
    ck_assert_str_eq(err, "t.ini:2: ");
    check_config_bad(text, NULL, 0);
    ck_assert_int_eq(config_load_string(text, NULL, &cfg, err, sizeof(err)), -1);
    ck_assert_ptr_eq(strstr(err, "<string>:2: "), err);
}
END_TEST

/* Past the kept errors, the rest are counted. */
START_TEST(test_error_flood)
{
    char *text = malloc(100 * 16 + 16), *p = text;
    char err[CHECK_ERRLEN * 4];

    p += sprintf(p, "[agent]\n");
    for (int i = 0; i < 100; i++)
        p += sprintf(p, "k%d = 1\n", i);
    check_config_bad(text, err, sizeof(err));
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
    char err[CHECK_ERRLEN];
    struct config *cfg;

    p = text + sprintf(text, "[rule:r]\nrate = 1/1s\n");
    for (int i = 0; i < CFG_MAX_MATCHES + 1; i++)
        p += sprintf(p, "match = a%d ^x\n", i);
    check_config_bad(text, err, sizeof(err));
    ck_assert_str_eq(err, "t.ini:19: too many 'match' lines (max 16)\n");

    p = text + sprintf(text, "[rule:r]\nrate = 1/1s\nkey = k0");
    for (int i = 1; i < CFG_MAX_KEY_ARGS + 1; i++)
        p += sprintf(p, ",k%d", i);
    strcpy(p, "\n");
    check_config_bad(text, err, sizeof(err));
    ck_assert_str_eq(err, "t.ini:3: too many args in 'key' (max 16)\n");

    p = text + sprintf(text, "[agent]\nallow = 10.0.0.0/8\n");
    for (int i = 1; i < CFG_MAX_ALLOW + 1; i++)
        p += sprintf(p, "    10.0.%d.1\n", i);
    check_config_bad(text, err, sizeof(err));
    ck_assert_str_eq(err, "t.ini:66: too many entries in 'allow' (max 64)\n");

    p = text;
    for (int i = 0; i < CFG_MAX_RULES; i++)
        p += sprintf(p, "[rule:r%d]\nrate = 1/1s\n", i);
    cfg = check_config_ok(text);
    ck_assert_uint_eq(cfg->nrules, CFG_MAX_RULES);
    ck_assert_str_eq(cfg->rules[CFG_MAX_RULES - 1].name, "r1023");
    config_free(cfg);
    sprintf(p, "[rule:one-more]\nrate = 1/1s\n");
    check_config_bad(text, err, sizeof(err));
    ck_assert_str_eq(err, "t.ini:2049: too many rules (max 1024)\n");
    free(text);
}
END_TEST

/* Long lines: beyond inih's stock 200 bytes is fine; beyond ours is an error
 * that does not shift the line numbers after it. */
START_TEST(test_long_lines)
{
    char *text = malloc(8192), *p;
    char err[CHECK_ERRLEN];
    struct config *cfg;

    p = text + sprintf(text, "[rule:r]\nrate = 1/1s\nmatch = path ^/(");
    for (int i = 0; i < 100; i++)
        p += sprintf(p, "a%d|", i);
    sprintf(p, "zz)$\n");
    cfg = check_config_ok(text);
    ck_assert_uint_eq(cfg->rules[0].nmatches, 1);
    ck_assert_int_eq(check_re(cfg->rules[0].matches[0].re, "/a99"), 1);
    config_free(cfg);

    p = text + sprintf(text, "[agent]\nstats = ");
    memset(p, 'x', 5000);
    p += 5000;
    sprintf(p, "\nworkers = 0\n");
    check_config_bad(text, err, sizeof(err));
    ck_assert_str_eq(err, "t.ini:2: line too long (max 4094 bytes)\n"
                          "t.ini:3: bad number '0' for 'workers' (expected an integer from 1 to "
                          "256)\n");
    free(text);
}
END_TEST

/* ---- match regexes that could eat the agent ----
 *
 * glibc's regcomp took gigabytes for 'a' and 24 stacked '+', and its
 * regexec 19 s for a back-reference against 60 bytes. With PCRE2 each of
 * these is refused with PCRE2's reason, or compiles small and matches
 * within the limits of core/rx.h (test_rx.c checks the limits). */

static const struct {
    const char *re;
    const char *why; /* PCRE2's reason, or NULL: accepted, and bounded */
} costly_regexes[] = {
    {"a++++++++++++++++++++++++", "quantifier does not follow a repeatable item"},
    {"a{2}{3}", "quantifier does not follow a repeatable item"},
    {"((a{1,255}){1,255}){1,255}", "regular expression is too large"},
    {"a{99999999999999999999}", "number too big in {} quantifier"},
    /* no captures: back-references name nothing */
    {"(a*)(a*)(a*)\\3\\2\\1c", "reference to non-existent subpattern"},
    {"(?<x>a)\\k<x>", NULL}, /* a named group still captures: matched within limits */
    {"((((((((((((a+)+)+)+)+)+)+)+)+)+)+)+)+", NULL},
    {"(a?){1000}(b?){1000}(c?){1000}", NULL},
    {"([0-9]{2,}|x){500}", NULL},
    {"(abc){700}", NULL},
    {"^(a|aa)+$", NULL},
    {"(?:a|a)*(?:b|b)*(?:c|c)*x", NULL},
};

START_TEST(test_costly_regex)
{
    char text[512], err[CHECK_ERRLEN], want[256];
    char subject[4002];

    snprintf(text, sizeof(text), "[rule:r]\nrate = 1/1s\nmatch = path %s\n", costly_regexes[_i].re);
    if (costly_regexes[_i].why) {
        check_config_bad(text, err, sizeof(err));
        snprintf(want, sizeof(want), "t.ini:3: bad regex '%s' in 'match': %s at offset ",
                 costly_regexes[_i].re, costly_regexes[_i].why);
        ck_assert_msg(strncmp(err, want, strlen(want)) == 0, "%s", err);
        return;
    }
    struct config *cfg = check_config_ok(text);
    /* the texts that make a backtracking matcher take exponential time */
    memset(subject, 'a', 4000);
    subject[4000] = 'c';
    subject[4001] = '\0';
    int rc = check_re(cfg->rules[0].matches[0].re, subject);
    ck_assert_msg(rc == 0 || rc == 1 || rc == RX_ELIMIT, "rc %d", rc);
    config_free(cfg);
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
    {"^[a-f0-9]{64}$", "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef", "0123"},
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

    snprintf(text, sizeof(text), "[rule:r]\nrate = 1/1s\nmatch = path %s\n", plain_regexes[_i].re);
    cfg = check_config_ok(text);
    ck_assert_str_eq(cfg->rules[0].matches[0].pattern, plain_regexes[_i].re);
    ck_assert_int_eq(check_re(cfg->rules[0].matches[0].re, plain_regexes[_i].hit), 1);
    if (plain_regexes[_i].miss)
        ck_assert_int_eq(check_re(cfg->rules[0].matches[0].re, plain_regexes[_i].miss), 0);
    config_free(cfg);
}
END_TEST

/* The pattern's length is bounded too (lines may hold 4094 bytes). */
START_TEST(test_regex_length)
{
    char text[2048], err[CHECK_ERRLEN];
    struct config *cfg;
    int n = sprintf(text, "[rule:r]\nrate = 1/1s\nmatch = path ");

    memset(text + n, 'a', RX_MAX_LEN);
    strcpy(text + n + RX_MAX_LEN, "\n");
    cfg = check_config_ok(text);
    config_free(cfg);
    memset(text + n, 'a', RX_MAX_LEN + 1);
    strcpy(text + n + RX_MAX_LEN + 1, "\n");
    check_config_bad(text, err, sizeof(err));
    ck_assert_ptr_nonnull(strstr(err, "t.ini:3: bad regex 'aaaa"));
    ck_assert_ptr_nonnull(strstr(err, "' in 'match': longer than 1024 bytes\n"));
}
END_TEST

int main(void)
{
    TCase *tc = tcase_create("errors");

    CHECK_LOOP(tc, test_bad, bad_configs);
    CHECK_ADD(tc, test_many_errors, test_small_frame_ok, test_error_buffer, test_error_flood,
              test_limits, test_long_lines);
    CHECK_LOOP(tc, test_costly_regex, costly_regexes);
    CHECK_LOOP(tc, test_plain_regex, plain_regexes);
    tcase_add_test(tc, test_regex_length);
    tcase_set_timeout(tc, 30); /* the limits test is slow under sanitizers */
    return check_run_case("config_errors", tc);
}
