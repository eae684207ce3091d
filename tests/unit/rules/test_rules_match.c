/* SPDX-License-Identifier: Apache-2.0 */
/* test_rules_match.c - rule matching, keys (hashed, never cut, not to be
 * aimed at) and the ACK's variables (their size bound, a small frame, the
 * deciding rule and shadow rules), the backstop's share; without sockets. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "limits/bucket.h"
#include "check_util.h"
#include "config/config.h"
#include "limits/fleet.h"
#include "metrics/mismatch.h"
#include "rules/rules.h"
#include "rules_fixture.h"
#include "spop/spop.h"

static const char *const ini =
    "[agent]\nmax_key = 32\n"
    "[rule:api]\nmessage = check-rate\nkey = key\nmatch = path ^/api/\nrate = 10/1m\n"
    "[rule:pair]\nkey = key, ip\nrate = 5/1s\nburst = 2\n"
    "[rule:shadow]\nkey = ip\nrate = 1/1m\nshadow = yes\n";

START_TEST(match_and_keys)
{
    struct ruleset *rs = rt_load(ini);
    struct rule_eval ev = {0};
    uint8_t buf[512];
    const char *args[] = {"key", "tenant-1", "path", "/api/v1", "ip", "10.0.0.1"};
    size_t n = rt_payload(buf, sizeof(buf), "check-rate", args, 3);

    ck_assert_int_eq(rules_match(rs, buf, n, &ev), 0);
    ck_assert_uint_eq(ev.nhits, 3);
    ck_assert_str_eq(rules_hit_key(&ev, &ev.hits[0]), "tenant-1");
    ck_assert_str_eq(rules_hit_key(&ev, &ev.hits[1]), "tenant-1|10.0.0.1");
    ck_assert_str_eq(rules_hit_key(&ev, &ev.hits[2]), "10.0.0.1");

    /* another message: "api" is bound to check-rate */
    n = rt_payload(buf, sizeof(buf), "other", args, 3);
    ck_assert_int_eq(rules_match(rs, buf, n, &ev), 0);
    ck_assert_uint_eq(ev.nhits, 2);
    ck_assert_uint_eq(ev.hits[0].rule, 1);

    /* path does not match; NULL and empty args skip the rule */
    const char *a2[] = {"key", "", "path", "/static", "ip", NULL};
    n = rt_payload(buf, sizeof(buf), "check-rate", a2, 3);
    ck_assert_int_eq(rules_match(rs, buf, n, &ev), 0);
    ck_assert_uint_eq(ev.nhits, 0);

    /* long keys are hashed to a fixed size */
    const char *a3[] = {"key", "0123456789012345678901234567890123456789", "path", "/api/"};
    n = rt_payload(buf, sizeof(buf), "check-rate", a3, 2);
    ck_assert_int_eq(rules_match(rs, buf, n, &ev), 0);
    ck_assert_uint_eq(ev.nhits, 1);
    ck_assert_uint_eq(ev.hits[0].key_len, 33);
    ck_assert_int_eq(rules_hit_key(&ev, &ev.hits[0])[0], '#');

    /* malformed payload */
    ck_assert_int_eq(rules_match(rs, buf, n - 1, &ev), SPOP_EINVAL);
    rules_eval_free(&ev);
    ruleset_unref(rs);
}
END_TEST

/* A client cannot aim at another client's hashed bucket: a key that starts
 * with '#' (such as the stored form of a long key, sent literally) is hashed
 * too, into another hash; the hash is the first 128 bits of SHA-256 (a known
 * value), and rules_client_key() gives what requests get. */
START_TEST(hashed_keys_cannot_be_aimed_at)
{
    struct ruleset *rs = rt_load(ini); /* max_key = 32 */
    struct rule_eval ev = {0};
    uint8_t buf[1024];
    char stored[RULES_HASHED_KEY_LEN + 1], out[128];
    /* 40 bytes: past max_key */
    const char *long_key = "0123456789012345678901234567890123456789";
    const char *a1[] = {"key", long_key, "path", "/api/"};
    size_t n = rt_payload(buf, sizeof(buf), "check-rate", a1, 2);

    ck_assert_int_eq(rules_match(rs, buf, n, &ev), 0);
    ck_assert_uint_eq(ev.nhits, 1);
    snprintf(stored, sizeof(stored), "%s", rules_hit_key(&ev, &ev.hits[0]));
    /* printf 0123...89 | sha256sum: fb526cd4ad0ec978c1a9e78f7c0728711139... */
    ck_assert_str_eq(stored, "#fb526cd4ad0ec978c1a9e78f7c072871");

    /* the same 33 bytes sent as a key: hashed again, another bucket */
    const char *a2[] = {"key", stored, "path", "/api/"};
    n = rt_payload(buf, sizeof(buf), "check-rate", a2, 2);
    ck_assert_int_eq(rules_match(rs, buf, n, &ev), 0);
    ck_assert_uint_eq(ev.nhits, 1);
    ck_assert_uint_eq(ev.hits[0].key_len, RULES_HASHED_KEY_LEN);
    ck_assert_str_ne(rules_hit_key(&ev, &ev.hits[0]), stored);
    ck_assert_int_eq(rules_client_key(stored, strlen(stored), NULL, 32, out, sizeof(out)),
                     RULES_HASHED_KEY_LEN);
    ck_assert_str_eq(out, rules_hit_key(&ev, &ev.hits[0]));

    /* a short key starting with '#' too: hashed, never stored as is */
    const char *a3[] = {"key", "#x", "path", "/api/"};
    n = rt_payload(buf, sizeof(buf), "check-rate", a3, 2);
    ck_assert_int_eq(rules_match(rs, buf, n, &ev), 0);
    ck_assert_uint_eq(ev.hits[0].key_len, RULES_HASHED_KEY_LEN);
    ck_assert_int_eq(rules_client_key("#x", 2, NULL, 32, out, sizeof(out)), RULES_HASHED_KEY_LEN);
    ck_assert_str_eq(out, rules_hit_key(&ev, &ev.hits[0]));
    /* '#' elsewhere is an ordinary byte */
    ck_assert_int_eq(rules_client_key("a#x", 3, NULL, 32, out, sizeof(out)), 3);
    ck_assert_str_eq(out, "a#x");
    rules_eval_free(&ev);
    ruleset_unref(rs);
}
END_TEST

/* The operator's lookup finds the key a request builds: the same text up to
 * max_key, the same hash past it, for one key arg and for several. */
START_TEST(client_key_as_requests_build_it)
{
    struct ruleset *rs = rt_load(ini); /* max_key = 32 */
    struct rule_eval ev = {0};
    uint8_t buf[1024];
    char out[128];
    static const char *const values[] = {"tenant-1", "0123456789012345678901234567890",
                                         "01234567890123456789012345678901",
                                         "012345678901234567890123456789012"};

    for (size_t i = 0; i < sizeof(values) / sizeof(values[0]); i++) {
        const char *args[] = {"key", values[i], "path", "/api/", "ip", "10.0.0.1"};
        size_t n = rt_payload(buf, sizeof(buf), "check-rate", args, 3);
        ck_assert_int_eq(rules_match(rs, buf, n, &ev), 0);
        ck_assert_uint_eq(ev.nhits, 3);
        for (size_t h = 0; h < 2; h++) { /* api: key; pair: key, ip */
            char text[128];
            snprintf(text, sizeof(text), h ? "%s|10.0.0.1" : "%s", values[i]);
            int len =
                rules_client_key(text, strlen(text), NULL, rs->cfg->max_key, out, sizeof(out));
            ck_assert_int_eq(len, (int)ev.hits[h].key_len);
            ck_assert_str_eq(out, rules_hit_key(&ev, &ev.hits[h]));
        }
    }
    /* a long key is hashed: 33 bytes, whatever its length */
    ck_assert_int_eq(rules_client_key(values[3], 33, NULL, 32, out, sizeof(out)), 33);
    ck_assert_int_eq(out[0], '#');
    ck_assert_int_eq(rules_client_key(values[3], 33, NULL, 32, out, 33), -1);
    ck_assert_int_eq(rules_client_key("abc", 3, NULL, 32, out, 3), -1);
    ck_assert_int_eq(rules_client_key("", 0, NULL, 32, out, 1), 0); /* a rule without key */
    /* per-request limits are part of the key, before hashing */
    struct bucket_params lim = {0, 100, 60000000, 20, 0, 0, 60000, 0, 0, 0};
    ck_assert_int_eq(rules_client_key("t", 1, &lim, 32, out, sizeof(out)), 16);
    ck_assert_str_eq(out, "t\x1f"
                          "100/60000ms/20");
    ck_assert_int_eq(rules_client_key("tenant-1234567890123456", 23, &lim, 32, out, sizeof(out)),
                     33);
    rules_eval_free(&ev);
    ruleset_unref(rs);
}
END_TEST

START_TEST(ten_per_minute_vars)
{
    struct ruleset *rs = rt_load(ini);
    struct bucket_table *t = bucket_table_new(4);
    struct rule_eval ev = {0};
    uint8_t buf[512], out[1024];
    const char *args[] = {"key", "k", "path", "/api/"};
    size_t n = rt_payload(buf, sizeof(buf), "check-rate", args, 2);
    struct rt_vars v;

    for (int i = 0; i < 14; i++) {
        ck_assert_int_eq(rules_match(rs, buf, n, &ev), 0);
        ck_assert_uint_eq(ev.nhits, 1);
        bucket_table_take(t, "api", "k", 1, &rs->params[0], 1000000 + (uint64_t)i, 1,
                          &ev.hits[0].out.res);
        struct spop_writer w = {out, out + sizeof(out)};
        ck_assert_int_eq(rules_encode_actions(&w, rs, &ev), 0);
        rt_decode(out, (size_t)(w.p - out), &v);
        /* the rule's head as encoded when the ruleset was built, or per
         * ACK (as for a rule whose limits come from args): the same bytes */
        uint8_t again[1024];
        struct rules_ack_head keep = rs->ack_heads[0];
        struct spop_writer w2 = {again, again + sizeof(again)};
        ck_assert_uint_gt(keep.len[i >= 10], 0);
        rs->ack_heads[0].len[0] = rs->ack_heads[0].len[1] = 0;
        ck_assert_int_eq(rules_encode_actions(&w2, rs, &ev), 0);
        rs->ack_heads[0] = keep;
        ck_assert_uint_eq((size_t)(w2.p - again), (size_t)(w.p - out));
        ck_assert_mem_eq(again, out, (size_t)(w.p - out));
        ck_assert_int_eq(rt_var(&v, "blocked")->u.sint, i >= 10);
        ck_assert_str_eq(rt_var_str(&v, "rule"), "api");
        ck_assert_int_eq(rt_var(&v, "limit")->u.sint, 10);
        ck_assert_str_eq(rt_var_str(&v, "policy"), "\"api\";q=10;w=60");
        if (i < 10) {
            ck_assert_int_eq(rt_var(&v, "remaining")->u.sint, 9 - i);
            ck_assert_ptr_null(rt_var(&v, "retry_after"));
        } else {
            ck_assert_int_eq(rt_var(&v, "remaining")->u.sint, 0);
            ck_assert_int_ge(rt_var(&v, "retry_after")->u.sint, 1);
            ck_assert_int_le(rt_var(&v, "retry_after")->u.sint, 6);
            ck_assert_int_eq(rt_var(&v, "reset")->u.sint, 60);
            ck_assert_str_eq(rt_var_str(&v, "ratelimit"), "\"api\";r=0;t=60");
        }
        ck_assert_int_eq(rules_blocked(rs, &ev), i >= 10);
    }
    rules_eval_free(&ev);
    bucket_table_free(t);
    ruleset_unref(rs);
}
END_TEST

START_TEST(deciding_rule_and_shadow)
{
    struct ruleset *rs = rt_load(ini);
    struct rule_eval ev = {0};
    uint8_t buf[512], out[1024];
    const char *args[] = {"key", "k", "path", "/api/", "ip", "::1"};
    size_t n = rt_payload(buf, sizeof(buf), "check-rate", args, 3);
    struct rt_vars v;

    ck_assert_int_eq(rules_match(rs, buf, n, &ev), 0);
    ck_assert_uint_eq(ev.nhits, 3);
    /* api allows with 5 left, pair allows with 1 left, shadow denies */
    ev.hits[0].out.res = (struct bucket_result){1, 5, 30000000, 0};
    ev.hits[1].out.res = (struct bucket_result){1, 1, 1500000, 0};
    ev.hits[2].out.res = (struct bucket_result){0, 0, 60000000, 60000000};
    struct spop_writer w = {out, out + sizeof(out)};
    ck_assert_int_eq(rules_encode_actions(&w, rs, &ev), 0);
    rt_decode(out, (size_t)(w.p - out), &v);
    ck_assert_int_eq(rt_var(&v, "blocked")->u.sint, 0);
    ck_assert_int_eq(rt_var(&v, "would_block")->u.sint, 1);
    ck_assert_str_eq(rt_var_str(&v, "rule"), "pair");
    ck_assert_int_eq(rt_var(&v, "remaining")->u.sint, 1);
    ck_assert_int_eq(rt_var(&v, "reset")->u.sint, 2);

    /* the blocking rule wins, with the longest wait among blockers */
    ev.hits[0].out.res = (struct bucket_result){0, 0, 60000000, 6000000};
    ev.hits[1].out.res = (struct bucket_result){0, 0, 1500000, 500000};
    w = (struct spop_writer){out, out + sizeof(out)};
    ck_assert_int_eq(rules_encode_actions(&w, rs, &ev), 0);
    rt_decode(out, (size_t)(w.p - out), &v);
    ck_assert_int_eq(rt_var(&v, "blocked")->u.sint, 1);
    ck_assert_str_eq(rt_var_str(&v, "rule"), "api");
    ck_assert_int_eq(rt_var(&v, "retry_after")->u.sint, 6);

    /* no hit: blocked=false alone */
    ev.nhits = 0;
    w = (struct spop_writer){out, out + sizeof(out)};
    ck_assert_int_eq(rules_encode_actions(&w, rs, &ev), 0);
    rt_decode(out, (size_t)(w.p - out), &v);
    ck_assert_int_eq(v.n, 1);
    ck_assert_str_eq(v.name[0], "blocked");
    rules_eval_free(&ev);
    ruleset_unref(rs);
}
END_TEST

/* The largest ACK a rule can produce: every variable, the longest ids, and
 * numbers past every cap. config_ack_max_size() must be exactly its size, or
 * --check would accept a max_frame_size that cuts it (or refuse one that
 * holds it). */
static const struct {
    const char *rate, *burst;
} ack_rates[] = {
    {"1/1ms", "1"},
    {"100/1m", "20"},
    {"1000000000000000/365d", "1"},
    {"1/365d", "1000000000000000"},
    {"7/1s", "239"},
    {"240/1s", "240"},
};

#define NAME40 "rrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrrr"

START_TEST(ack_size_bound_is_exact)
{
    const char *names[] = {"r", "api-key", NAME40};
    char text[512];
    uint8_t buf[256], out[1024];
    struct rule_eval ev = {0};
    const char *args[] = {"k", "v"};
    size_t n = rt_payload(buf, sizeof(buf), "m", args, 1);

    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        snprintf(text, sizeof(text),
                 "[rule:%s]\nkey = k\nrate = %s\nburst = %s\n"
                 "[rule:s]\nkey = k\nrate = 1/1s\nshadow = yes\n",
                 names[i], ack_rates[_i].rate, ack_rates[_i].burst);
        struct ruleset *rs = rt_load(text);
        ck_assert_int_eq(rules_match(rs, buf, n, &ev), 0);
        ck_assert_uint_eq(ev.nhits, 2);
        ev.hits[0].out.res = (struct bucket_result){0, UINT64_MAX, UINT64_MAX, UINT64_MAX};
        ev.hits[0].out.degraded = 1;
        ev.hits[1].out.res = (struct bucket_result){0, 0, 1, 1};

        struct spop_writer w = {out, out + sizeof(out)};
        uint8_t *start;
        ck_assert_int_eq(
            spop_frame_begin(&w, SPOP_FRAME_ACK, SPOP_FLAG_FIN, UINT64_MAX, UINT64_MAX, &start), 0);
        ck_assert_int_eq(rules_encode_actions(&w, rs, &ev), 0);
        ck_assert_int_eq(spop_frame_end(&w, start), 0);
        size_t frame = (size_t)(w.p - out) - SPOP_FRAME_LEN_SIZE;
        ck_assert_uint_eq(frame, config_ack_max_size(&rs->cfg->rules[0]));

        struct rt_vars v;
        rt_decode(start + SPOP_FRAME_LEN_SIZE + 1 + 4 + 20, (size_t)(w.p - start) - 29, &v);
        ck_assert_int_eq(v.n, 10); /* every variable */
        ck_assert_int_eq(rt_var(&v, "reset")->u.sint, (int64_t)RULES_MAX_SECONDS);
        rules_eval_free(&ev);
        ruleset_unref(rs);
    }
}
END_TEST

/* HAProxy may negotiate 256 bytes: an ACK that does not fit carries the
 * decision alone rather than failing (which closed the connection and let
 * the request through). */
START_TEST(ack_degrades_when_frame_is_small)
{
    struct ruleset *rs = rt_load("[rule:" NAME40 "]\nkey = k\nrate = 1/1h\nburst = 1\n");
    struct rule_eval ev = {0};
    uint8_t buf[256], out[SPOP_MIN_FRAME_SIZE + SPOP_FRAME_LEN_SIZE];
    const char *args[] = {"k", "v"};
    size_t n = rt_payload(buf, sizeof(buf), "m", args, 1);
    struct rt_vars v;

    ck_assert_int_eq(rules_match(rs, buf, n, &ev), 0);
    for (int blocked = 0; blocked < 2; blocked++) {
        uint64_t before = atomic_load(&metrics.acks_truncated);
        ev.hits[0].out.res = blocked ? (struct bucket_result){0, 0, 3600000000ULL, 3599000000ULL}
                                     : (struct bucket_result){1, 0, 3600000000ULL, 0};
        /* blocked: 260 bytes in all, one over HAProxy's smallest frame; an
         * allowed answer (no retry_after) fits in 256, so give it 64 */
        struct spop_writer w = {out, out + (blocked ? sizeof(out) : 64)};
        uint8_t *start;
        ck_assert_int_eq(spop_frame_begin(&w, SPOP_FRAME_ACK, SPOP_FLAG_FIN, 1000000, 1, &start),
                         0);
        uint8_t *body = w.p;
        ck_assert_int_eq(rules_encode_actions(&w, rs, &ev), 0);
        ck_assert_int_eq(spop_frame_end(&w, start), 0);
        rt_decode(body, (size_t)(w.p - body), &v);
        ck_assert_int_eq(rt_var(&v, "blocked")->u.sint, blocked);
        if (blocked) {
            ck_assert_int_eq(v.n, 2);
            ck_assert_int_eq(rt_var(&v, "retry_after")->u.sint, 3599);
        } else {
            ck_assert_int_eq(v.n, 1);
        }
        ck_assert_uint_eq(atomic_load(&metrics.acks_truncated), before + 1);
        /* the same ACK with room for it is whole */
        struct spop_writer big = {buf, buf + sizeof(buf)};
        ck_assert_int_eq(rules_encode_actions(&big, rs, &ev), 0);
        rt_decode(buf, (size_t)(big.p - buf), &v);
        ck_assert_str_eq(rt_var_str(&v, "rule"), NAME40);
    }
    rules_eval_free(&ev);
    ruleset_unref(rs);
}
END_TEST

/* share = auto: 1/N of the rule, N the fleet last seen in Redis (1 while
 * unknown); share x burst rounded down, never below one token, and the rate
 * never 0. A number keeps its meaning whatever the fleet. */
static const struct {
    unsigned agents;
    uint64_t burst, sw_limit; /* burst 10 (tb), limit 10 (sw) */
    uint64_t period_us;       /* of 10/1s */
} auto_cases[] = {
    {0, 10, 10, 1000000},                         /* never seen: the whole limit */
    {1, 10, 10, 1000000},                         /* a fleet of one: the whole limit */
    {2, 5, 5, 2000000},       {3, 3, 3, 3000000}, /* 10/3 rounded down */
    {20, 1, 1, 20000000},                         /* 0.5 of a token: one */
    {1000, 1, 1, 1000000000},
};

START_TEST(backstop_auto_follows_fleet)
{
    struct ruleset *rs = rt_load("[rule:tb]\nkey = k\nrate = 10/1s\n"
                                 "[rule:sw]\nkey = k\nrate = 10/1s\nalgorithm = sliding-window\n");
    struct bucket_params p, b;

    ck_assert_double_eq(rs->cfg->fallback_share, CFG_SHARE_AUTO);
    fleet_reset();
    fleet_set_agents(auto_cases[_i].agents, 1000000, 0);
    for (unsigned r = 0; r < 2; r++) {
        ck_assert_int_eq(rules_request_limits(rs, r, NULL, NULL, &p, &b), 0);
        ck_assert_uint_gt(b.limit, 0);
        if (r == 0) {
            ck_assert_uint_eq(b.burst, auto_cases[_i].burst);
            ck_assert_uint_eq(b.period_us, auto_cases[_i].period_us);
            ck_assert_uint_eq(b.limit, 10);
        } else {
            ck_assert_uint_eq(b.limit, auto_cases[_i].sw_limit);
            ck_assert_uint_eq(b.period_us, 1000000);
        }
    }
    ruleset_unref(rs);
    /* a number is a number */
    rs = rt_load("[fallback]\nshare = 0.5\n[rule:tb]\nkey = k\nrate = 10/1s\n");
    ck_assert_int_eq(rules_request_limits(rs, 0, NULL, NULL, &p, &b), 0);
    ck_assert_uint_eq(b.burst, 5);
    ruleset_unref(rs);
    fleet_reset();
}
END_TEST

START_TEST(backstop_share_rounding)
{
    struct bucket_params p = {BUCKET_TOKEN_BUCKET, 9, 1000000, 9, 0, 0, 1000, 0, 0, 0}, b;

    rules_backstop_params(&p, 1.0 / 3, &b); /* 1/3 x 9 is 3, not 2.999... */
    ck_assert_uint_eq(b.burst, 3);
    p.burst = 10;
    rules_backstop_params(&p, 0.05, &b); /* the report of issue 23: 0.5 of a token */
    ck_assert_uint_eq(b.burst, 1);
    ck_assert_uint_eq(b.limit, 9);
    ck_assert_uint_eq(b.period_us, 20000000);
}
END_TEST

/* block_for reaches the rule's limits and its fail-open backstop, so that
 * both the bucket and the backstop (Redis down) keep a blocked key out. */
START_TEST(block_for_in_params_and_backstop)
{
    struct ruleset *rs = rt_load("[rule:a]\nrate = 10/1h\nblock_for = 15m\n"
                                 "[rule:b]\nrate = 10/1m\n");

    ck_assert_uint_eq(rs->params[0].block_us, 15 * 60 * 1000000ULL);
    ck_assert_uint_eq(rs->backstop[0].block_us, 15 * 60 * 1000000ULL);
    ck_assert_uint_eq(rs->params[1].block_us, 0);
    ck_assert_uint_eq(rs->backstop[1].block_us, 0);
    ruleset_unref(rs);
}
END_TEST

/* The backstop stretches the period by 1/share. With a long period and a
 * tiny share that left a uint64_t (undefined; in practice period 0, so the
 * fallback did not limit at all). */
START_TEST(backstop_period_in_range)
{
    ck_assert_uint_eq(rules_backstop_period(1000000, 0.05), 20000000);
    ck_assert_uint_eq(rules_backstop_period(1, 1.0), 1);
    ck_assert_uint_eq(rules_backstop_period(31536000000000ULL, 1e-300), BUCKET_MAX_PERIOD_US);
    ck_assert_uint_eq(rules_backstop_period(UINT64_MAX, 1e-9), BUCKET_MAX_PERIOD_US);
    ck_assert_uint_eq(rules_backstop_period(1000, 0.5), 2000);

    struct ruleset *rs = rt_load("[fallback]\nshare = 1e-300\n"
                                 "[rule:tb]\nkey = k\nrate = 1/365d\n"
                                 "[rule:sw]\nkey = k\nrate = 2/365d\nalgorithm = sliding-window\n");
    struct bucket_table *t = bucket_table_new(1);
    struct bucket_result res;

    ck_assert_uint_eq(rs->backstop[0].period_us, BUCKET_MAX_PERIOD_US);
    ck_assert_uint_eq(rs->backstop[0].burst, 1);
    ck_assert_uint_eq(rs->backstop[1].period_us, 31536000000000ULL); /* windows keep theirs */
    ck_assert_uint_eq(rs->backstop[1].limit, 1);
    for (unsigned r = 0; r < 2; r++) {
        bucket_table_take(t, rs->cfg->rules[r].name, "c", 1, &rs->backstop[r], 1000, 1, &res);
        ck_assert_int_eq(res.allowed, 1);
        bucket_table_take(t, rs->cfg->rules[r].name, "c", 1, &rs->backstop[r], 1000000000, 1, &res);
        ck_assert_msg(!res.allowed, "the backstop of rule %u does not limit", r);
        ck_assert_uint_gt(res.retry_us, 1000000000000ULL);
    }
    bucket_table_free(t);
    ruleset_unref(rs);
}
END_TEST

/* A hashed key (#, 32 hex digits) is longer than max_key can be (16): the
 * room it needs must be made before it is written, wherever in the keys
 * buffer it lands. N rules keyed on a short arg fill the buffer so that the
 * last rule's long key starts at every offset around the first growth
 * (1024 bytes); its hash must be the same as when it is alone. */
static const size_t max_keys[] = {16, 24, 32};

static char *filler_config(size_t max_key, size_t nfill)
{
    size_t cap = 64 + (nfill + 1) * 48;
    char *text = malloc(cap);
    size_t len = 0;

    ck_assert_ptr_nonnull(text);
    len += (size_t)snprintf(text + len, cap - len, "[agent]\nmax_key = %zu\n", max_key);
    for (size_t i = 0; i < nfill; i++)
        len += (size_t)snprintf(text + len, cap - len, "[rule:f%zu]\nkey = a\nrate = 1/1s\n", i);
    snprintf(text + len, cap - len, "[rule:last]\nkey = b\nrate = 1/1s\n");
    return text;
}

START_TEST(hashed_key_never_cut)
{
    size_t max_key = max_keys[_i];
    char a[17], b[64], want[RULES_HASHED_KEY_LEN + 1];
    uint8_t buf[256];
    struct rule_eval ev = {0};
    unsigned checked = 0;

    memset(b, 'y', max_key + 1);
    b[max_key + 1] = '\0';
    /* the key alone */
    {
        char *text = filler_config(max_key, 0);
        struct ruleset *rs = rt_load(text);
        const char *args[] = {"b", b};
        size_t n = rt_payload(buf, sizeof(buf), "m", args, 1);
        ck_assert_int_eq(rules_match(rs, buf, n, &ev), 0);
        ck_assert_uint_eq(ev.nhits, 1);
        ck_assert_uint_eq(ev.hits[0].key_len, RULES_HASHED_KEY_LEN);
        memcpy(want, rules_hit_key(&ev, &ev.hits[0]), sizeof(want));
        ck_assert_int_eq(want[RULES_HASHED_KEY_LEN], '\0');
        rules_eval_free(&ev);
        ruleset_unref(rs);
        free(text);
    }
    /* filler keys of 8, 12, 16 and 17 bytes with their NUL: the long key
     * starts at offsets from 976 to 1024, among them 992 and 1003, where the
     * room left (32 and 21 bytes) holds the key but not its hash. Fewer,
     * longer fillers would mean configs of 500 rules: slow under sanitizers. */
    static const size_t las[] = {7, 11, 15, 16};
    for (size_t li = 0; li < sizeof(las) / sizeof(las[0]); li++) {
        size_t la = las[li];
        memset(a, 'x', la);
        a[la] = '\0';
        /* each filler key takes la + 1 bytes (its NUL) */
        for (size_t nfill = (1024 - 48) / (la + 1); nfill * (la + 1) <= 1024; nfill++) {
            char *text = filler_config(max_key, nfill);
            struct ruleset *rs = rt_load(text);
            const char *args[] = {"a", a, "b", b};
            size_t n = rt_payload(buf, sizeof(buf), "m", args, 2);

            ck_assert_int_eq(rules_match(rs, buf, n, &ev), 0);
            ck_assert_uint_eq(ev.nhits, nfill + 1);
            const struct rule_hit *h = &ev.hits[nfill];
            ck_assert_uint_eq(h->key_off, nfill * (la + 1));
            ck_assert_uint_eq(h->key_len, RULES_HASHED_KEY_LEN);
            ck_assert_msg(memcmp(rules_hit_key(&ev, h), want, sizeof(want)) == 0,
                          "max_key %zu, key at offset %zu: '%.*s' != '%s'", max_key, h->key_off,
                          (int)h->key_len, rules_hit_key(&ev, h), want);
            ck_assert_uint_le(ev.keys_len, ev.keys_cap);
            checked++;
            rules_eval_free(&ev);
            ruleset_unref(rs);
            free(text);
        }
    }
    ck_assert_uint_ge(checked, 14);
}
END_TEST

struct text_case {
    struct spop_data d;
    const char *want;
};

START_TEST(value_text)
{
    static struct text_case cases[8];
    char buf[64];
    const char *out;
    memset(cases, 0, sizeof(cases));
    cases[0].d = spop_int(-5), cases[0].want = "-5";
    cases[1].d = spop_uint(42), cases[1].want = "42";
    cases[2].d = spop_bool(1), cases[2].want = "true";
    cases[3].d.type = SPOP_DATA_IPV4, memcpy(cases[3].d.u.ip, "\x7f\0\0\x01", 4),
    cases[3].want = "127.0.0.1";
    cases[4].d.type = SPOP_DATA_IPV6, cases[4].d.u.ip[15] = 1, cases[4].want = "::1";
    cases[5].d.type = SPOP_DATA_IPV6,
    memcpy(cases[5].d.u.ip, "\0\0\0\0\0\0\0\0\0\0\xff\xff\xc0\x00\x02\x01", 16),
    cases[5].want = "192.0.2.1";
    cases[6].d = spop_string("abc", 3), cases[6].want = "abc";
    cases[7].d.type = SPOP_DATA_NULL, cases[7].want = NULL;

    const struct text_case *c = &cases[_i];
    int n = rules_value_text(&c->d, buf, sizeof(buf), &out);
    if (!c->want) {
        ck_assert_int_eq(n, -1);
        return;
    }
    ck_assert_int_eq(n, (int)strlen(c->want));
    ck_assert_int_eq(memcmp(out, c->want, (size_t)n), 0);
}
END_TEST

int main(void)
{
    TCase *tc = tcase_create("core");

    CHECK_ADD(tc, match_and_keys, client_key_as_requests_build_it, hashed_keys_cannot_be_aimed_at,
              ten_per_minute_vars, deciding_rule_and_shadow);
    tcase_add_loop_test(tc, value_text, 0, 8);
    tcase_add_loop_test(tc, ack_size_bound_is_exact, 0, sizeof(ack_rates) / sizeof(ack_rates[0]));
    CHECK_ADD(tc, ack_degrades_when_frame_is_small, backstop_period_in_range);
    tcase_add_loop_test(tc, backstop_auto_follows_fleet, 0,
                        (int)(sizeof(auto_cases) / sizeof(auto_cases[0])));
    tcase_add_test(tc, backstop_share_rounding);
    tcase_add_test(tc, block_for_in_params_and_backstop);
    tcase_add_loop_test(tc, hashed_key_never_cut, 0, sizeof(max_keys) / sizeof(max_keys[0]));
    tcase_set_timeout(tc, 30); /* hundreds of configs: slow under sanitizers */
    return check_run_case("rules_match", tc);
}
