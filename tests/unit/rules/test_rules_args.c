/* SPDX-License-Identifier: Apache-2.0 */
/* test_rules_args.c - limits taken from a request's args (rate = arg:NAME,
 * burst from an arg): their params, keys, sliding windows, ACK variables
 * and expiry, missing or invalid values and the mismatch counters that
 * report them, and how two rates compare. */
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

/* ---- limits from args (rate = arg:NAME) ------------------------------------ */

static const char *const arg_ini =
    "[fallback]\nshare = 0.05\n"
    "[rule:custom]\nkey = key\nrate = arg:limit\nmax_rate = 1000/1m\n"
    "[rule:fixed]\nkey = key\nrate = 10/1m\nburst = 4\n"
    "[rule:burst]\nmessage = b\nkey = key\nrate = 60/1m\nburst = arg:burst\nmax_burst = 50\n"
    "[rule:both]\nmessage = b\nkey = key\nrate = arg:limit\nmax_rate = 100/1s\n"
    "burst = arg:burst\nmax_burst = 50\n"
    "[rule:capped]\nmessage = c\nkey = key\nrate = arg:limit\nmax_rate = 1000/1m\n"
    "max_burst = 30\n"
    "[rule:fixedburst]\nmessage = c\nkey = key\nrate = arg:limit\nmax_rate = 1000/1m\n"
    "burst = 7\n";

/* Match one message "m" with args key and limit (NULL: a NULL value). */
static void match_limit(struct ruleset *rs, struct rule_eval *ev, const char *msg, const char *key,
                        const char *limit, const char *burst)
{
    uint8_t buf[512];
    const char *args[] = {"key", key, "limit", limit, "burst", burst};
    size_t n = rt_payload(buf, sizeof(buf), msg, args, burst ? 3 : 2);
    ck_assert_int_eq(rules_match(rs, buf, n, ev), 0);
}

static const struct rule_hit *hit_of(const struct ruleset *rs, const struct rule_eval *ev,
                                     const char *rule)
{
    for (size_t i = 0; i < ev->nhits; i++)
        if (strcmp(rs->cfg->rules[ev->hits[i].rule].name, rule) == 0)
            return &ev->hits[i];
    return NULL;
}

static void assert_params(const struct bucket_params *p, uint64_t limit, uint64_t period_ms,
                          uint64_t burst)
{
    ck_assert_uint_eq(p->limit, limit);
    ck_assert_uint_eq(p->period_us, period_ms * 1000);
    ck_assert_uint_eq(p->burst, burst);
}

static const struct {
    const char *limit;
    uint64_t n, period_ms, burst; /* what the request gets */
} arg_rates[] = {
    {"5/1m", 5, 60000, 5},           {"12/m", 12, 60000, 12},
    {"1000/1m", 1000, 60000, 1000},  /* at the ceiling */
    {"2000/2m", 2000, 120000, 1000}, /* the same rate: kept; its burst capped */
    {"10/1h", 10, 3600000, 10},      {"1001/1m", 1000, 60000, 1000}, /* above: the ceiling */
    {"100/1s", 1000, 60000, 1000},   {"1000000000000000/1ms", 1000, 60000, 1000},
};

START_TEST(arg_rate_params)
{
    struct ruleset *rs = rt_load(arg_ini);
    struct rule_eval ev = {0};
    char want[128];

    match_limit(rs, &ev, "m", "acme", arg_rates[_i].limit, NULL);
    ck_assert_uint_eq(ev.nhits, 2);
    const struct rule_hit *h = hit_of(rs, &ev, "custom");
    ck_assert_ptr_nonnull(h);
    assert_params(&h->params, arg_rates[_i].n, arg_rates[_i].period_ms, arg_rates[_i].burst);
    /* the backstop is derived from the request's limits as for a fixed rule */
    struct bucket_params b;
    rules_backstop_params(&h->params, rs->cfg->fallback_share, &b);
    ck_assert_mem_eq(&h->backstop, &b, sizeof(b));
    ck_assert_uint_eq(h->backstop.period_us, h->params.period_us * 20);
    snprintf(want, sizeof(want), "acme\x1f%llu/%llums/%llu", (unsigned long long)arg_rates[_i].n,
             (unsigned long long)arg_rates[_i].period_ms, (unsigned long long)arg_rates[_i].burst);
    ck_assert_str_eq(rules_hit_key(&ev, h), want);
    ck_assert_uint_eq(h->key_len, strlen(want));
    /* a fixed rule keeps its key and the rule's limits */
    h = hit_of(rs, &ev, "fixed");
    ck_assert_str_eq(rules_hit_key(&ev, h), "acme");
    ck_assert_mem_eq(&h->params, &rs->params[1], sizeof(h->params));
    ck_assert_mem_eq(&h->backstop, &rs->backstop[1], sizeof(h->backstop));
    rules_eval_free(&ev);
    ruleset_unref(rs);
}
END_TEST

/* A limit arg that is not there skips the rule: counted as a mismatch when
 * never sent or not a rate, silently when NULL or empty (no entry in the
 * map and no default), like a key arg. */
START_TEST(arg_rate_missing_or_invalid)
{
    static const struct {
        const char *limit; /* "-": not sent */
        int counted;
    } cases[] = {{"-", 1},
                 {NULL, 0},
                 {"", 0},
                 {"garbage", 1},
                 {"10", 1},
                 {"0/1m", 1},
                 {"10/1y", 1},
                 {"5/1m ", 1},
                 {"1111111111111111111111111111111111111111111111111111111111111111111/1m", 1}};
    struct ruleset *rs = rt_load(arg_ini);
    struct rule_eval ev = {0};
    uint8_t buf[512];

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        uint64_t before = mismatch_total(MISMATCH_ARG);
        if (cases[i].limit && strcmp(cases[i].limit, "-") == 0) {
            const char *args[] = {"key", "acme"};
            size_t n = rt_payload(buf, sizeof(buf), "m", args, 1);
            ck_assert_int_eq(rules_match(rs, buf, n, &ev), 0);
        } else {
            match_limit(rs, &ev, "m", "acme", cases[i].limit, NULL);
        }
        ck_assert_msg(ev.nhits == 1, "limit %s", cases[i].limit);
        ck_assert_ptr_nonnull(hit_of(rs, &ev, "fixed")); /* the other rule still applies */
        ck_assert_uint_eq(mismatch_total(MISMATCH_ARG), before + (uint64_t)cases[i].counted);
    }
    rules_eval_free(&ev);
    ruleset_unref(rs);
}
END_TEST

static char reported[MISMATCH_SAMPLE + 1];

static void on_mismatch(enum mismatch_kind kind, const char *rule, uint64_t n, const char *sample)
{
    if (kind == MISMATCH_ARG && rule && strcmp(rule, "custom") == 0)
        snprintf(reported, sizeof(reported), "%s", sample);
}

/* The example of an invalid limit shows its value. */
START_TEST(arg_rate_invalid_sample)
{
    struct ruleset *rs = rt_load(arg_ini);
    struct rule_eval ev = {0};

    mismatch_reset();
    match_limit(rs, &ev, "m", "acme", "lots", NULL);
    mismatch_report(0, 1, on_mismatch);
    ck_assert_str_eq(reported, "limit=lots");
    rules_eval_free(&ev);
    ruleset_unref(rs);
}
END_TEST

struct seen {
    int calls;
    uint64_t n[MISMATCH_KINDS], custom, other;
    char sample[MISMATCH_KINDS][MISMATCH_SAMPLE + 1];
};
static struct seen seen;

static void on_seen(enum mismatch_kind kind, const char *rule, uint64_t n, const char *sample)
{
    seen.calls++;
    if (kind == MISMATCH_ARG && rule)
        *(strcmp(rule, "custom") == 0 ? &seen.custom : &seen.other) += n;
    seen.n[kind] += n;
    snprintf(seen.sample[kind], sizeof(seen.sample[kind]), "%s", sample);
}

/* Every mismatch is counted; one example is kept per report period (the
 * first since the last report), by kind and, for arguments, by rule. */
START_TEST(mismatch_counts_and_examples)
{
    mismatch_reset();
    memset(&seen, 0, sizeof(seen));
    ck_assert_int_eq(mismatch_wanted(MISMATCH_NO_RULE), 1);
    mismatch_note(MISMATCH_MESSAGE, NULL, "first", 5);
    mismatch_note(MISMATCH_MESSAGE, NULL, "second", 6);
    mismatch_note(MISMATCH_NO_RULE, NULL, "", 0); /* counted, no example built */
    ck_assert_int_eq(mismatch_wanted(MISMATCH_NO_RULE), 1);
    mismatch_note(MISMATCH_NO_RULE, NULL, "message=x", 9);
    ck_assert_int_eq(mismatch_wanted(MISMATCH_NO_RULE), 0);
    mismatch_note(MISMATCH_NO_RULE, NULL, "message=y", 9);
    mismatch_note(MISMATCH_ARG, "custom", "limit", 5);
    mismatch_note(MISMATCH_ARG, "other", "key", 3);
    mismatch_note(MISMATCH_ARG, "custom", "limit", 5);
    ck_assert_uint_eq(mismatch_total(MISMATCH_MESSAGE), 2);
    ck_assert_uint_eq(mismatch_total(MISMATCH_NO_RULE), 3);
    ck_assert_uint_eq(mismatch_total(MISMATCH_ARG), 3);

    mismatch_report(1000, 10, on_seen);
    ck_assert_int_eq(seen.calls, 4); /* two kinds, two rules */
    ck_assert_uint_eq(seen.n[MISMATCH_MESSAGE], 2);
    ck_assert_str_eq(seen.sample[MISMATCH_MESSAGE], "first");
    ck_assert_uint_eq(seen.n[MISMATCH_NO_RULE], 3);
    ck_assert_str_eq(seen.sample[MISMATCH_NO_RULE], "message=x");
    ck_assert_uint_eq(seen.custom, 2);
    ck_assert_uint_eq(seen.other, 1);
    ck_assert_int_eq(mismatch_wanted(MISMATCH_NO_RULE), 1); /* re-armed */

    /* the next period: only what is new, with a new example */
    mismatch_note(MISMATCH_MESSAGE, NULL, "third", 5);
    mismatch_note(MISMATCH_MESSAGE, NULL, "fourth", 6);
    memset(&seen, 0, sizeof(seen));
    mismatch_report(1005, 10, on_seen); /* too soon */
    ck_assert_int_eq(seen.calls, 0);
    mismatch_report(1010, 10, on_seen);
    ck_assert_int_eq(seen.calls, 1);
    ck_assert_uint_eq(seen.n[MISMATCH_MESSAGE], 2);
    ck_assert_str_eq(seen.sample[MISMATCH_MESSAGE], "third");
    ck_assert_uint_eq(mismatch_total(MISMATCH_MESSAGE), 4);
}
END_TEST

/* Keys given different limits never share a bucket; the same limit does. */
START_TEST(arg_rate_keys)
{
    struct ruleset *rs = rt_load(arg_ini);
    struct rule_eval ev = {0};
    char k[4][64];
    const char *limits[] = {"5/1m", "12/1m", "5/1m", "300/1h"};

    for (int i = 0; i < 4; i++) {
        match_limit(rs, &ev, "m", "acme", limits[i], NULL);
        snprintf(k[i], sizeof(k[i]), "%s", rules_hit_key(&ev, hit_of(rs, &ev, "custom")));
    }
    ck_assert_str_ne(k[0], k[1]);
    ck_assert_str_eq(k[0], k[2]);
    ck_assert_str_ne(k[0], k[3]); /* the same rate per second, another bucket */
    rules_eval_free(&ev);
    ruleset_unref(rs);
}
END_TEST

/* burst = arg:NAME, max_burst, and a fixed burst with a rate from an arg. */
START_TEST(arg_burst)
{
    struct ruleset *rs = rt_load(arg_ini);
    struct rule_eval ev = {0};
    uint64_t before;

    match_limit(rs, &ev, "b", "acme", "10/1s", "8");
    ck_assert_uint_eq(ev.nhits, 4); /* custom and fixed read every message */
    assert_params(&hit_of(rs, &ev, "burst")->params, 60, 60000, 8);
    ck_assert_str_eq(rules_hit_key(&ev, hit_of(rs, &ev, "burst")), "acme\x1f"
                                                                   "60/60000ms/8");
    assert_params(&hit_of(rs, &ev, "both")->params, 10, 1000, 8);
    ck_assert_str_eq(rules_hit_key(&ev, hit_of(rs, &ev, "both")), "acme\x1f"
                                                                  "10/1000ms/8");

    match_limit(rs, &ev, "b", "acme", "1000/1s", "51"); /* both above their ceilings */
    assert_params(&hit_of(rs, &ev, "burst")->params, 60, 60000, 50);
    assert_params(&hit_of(rs, &ev, "both")->params, 100, 1000, 50);

    before = mismatch_total(MISMATCH_ARG);
    match_limit(rs, &ev, "b", "acme", "10/1s", "0");
    ck_assert_uint_eq(ev.nhits, 2);
    ck_assert_ptr_null(hit_of(rs, &ev, "burst"));
    ck_assert_ptr_null(hit_of(rs, &ev, "both"));
    match_limit(rs, &ev, "b", "acme", "10/1s", "-3");
    ck_assert_uint_eq(ev.nhits, 2);
    ck_assert_uint_eq(mismatch_total(MISMATCH_ARG), before + 4); /* two rules, twice */

    /* the default burst (N of the request's rate) stops at max_burst; a fixed
     * burst stays */
    match_limit(rs, &ev, "c", "acme", "20/1m", NULL);
    assert_params(&hit_of(rs, &ev, "capped")->params, 20, 60000, 20);
    assert_params(&hit_of(rs, &ev, "fixedburst")->params, 20, 60000, 7);
    match_limit(rs, &ev, "c", "acme", "900/1m", NULL);
    assert_params(&hit_of(rs, &ev, "capped")->params, 900, 60000, 30);
    assert_params(&hit_of(rs, &ev, "fixedburst")->params, 900, 60000, 7);
    ck_assert_str_eq(rules_hit_key(&ev, hit_of(rs, &ev, "fixedburst")), "acme\x1f"
                                                                        "900/60000ms/7");
    rules_eval_free(&ev);
    ruleset_unref(rs);
}
END_TEST

/* A sliding window admits its N at once: N is bounded like a burst. The
 * longest period the syntax allows gives a backstop that still fits. */
START_TEST(arg_rate_sliding_window)
{
    struct ruleset *rs = rt_load("[rule:sw]\nkey = key\nrate = arg:limit\nmax_rate = 1000/1m\n"
                                 "algorithm = sliding-window\n"
                                 "[rule:swb]\nkey = key\nrate = arg:limit\nmax_rate = 1000/1m\n"
                                 "max_burst = 100\nalgorithm = sliding-window\n");
    struct rule_eval ev = {0};

    match_limit(rs, &ev, "m", "acme", "500/1m", NULL);
    assert_params(&hit_of(rs, &ev, "sw")->params, 500, 60000, 500);
    assert_params(&hit_of(rs, &ev, "swb")->params, 100, 60000, 100);
    match_limit(rs, &ev, "m", "acme", "1000000/1000m", NULL); /* the same rate as max_rate */
    assert_params(&hit_of(rs, &ev, "sw")->params, 1000, 60000000, 1000);
    assert_params(&hit_of(rs, &ev, "swb")->params, 100, 60000000, 100);
    /* the longest period a duration may have (a year): a window keeps it */
    match_limit(rs, &ev, "m", "acme", "1/365d", NULL);
    const struct rule_hit *h = hit_of(rs, &ev, "sw");
    ck_assert_uint_eq(h->params.period_us, 365ULL * 86400 * 1000000);
    ck_assert_uint_eq(h->backstop.period_us, h->params.period_us);
    ck_assert_uint_eq(h->backstop.limit, 1);
    /* past it the value is invalid: the rule does not apply */
    match_limit(rs, &ev, "m", "acme", "1/366d", NULL);
    ck_assert_ptr_null(hit_of(rs, &ev, "sw"));
    rules_eval_free(&ev);
    ruleset_unref(rs);

    /* a token bucket stretches the period by 1/share: capped, not overflowed */
    rs = rt_load("[fallback]\nshare = 0.0001\n"
                 "[rule:tb]\nkey = key\nrate = arg:limit\nmax_rate = 1000/1m\n");
    match_limit(rs, &ev, "m", "acme", "1/365d", NULL);
    ck_assert_uint_eq(ev.hits[0].backstop.period_us, BUCKET_MAX_PERIOD_US);
    rules_eval_free(&ev);
    ruleset_unref(rs);
}
END_TEST

/* limit and policy are the request's own; remaining from its bucket. */
START_TEST(arg_rate_vars)
{
    struct ruleset *rs =
        rt_load("[rule:custom]\nkey = key\nrate = arg:limit\nmax_rate = 1000/1m\n");
    struct bucket_table *t = bucket_table_new(4);
    struct rule_eval ev = {0};
    uint8_t out[1024];
    struct rt_vars v;
    const char *limits[] = {"5/1m", "12/2m"};
    const char *policies[] = {"\"custom\";q=5;w=60", "\"custom\";q=12;w=120"};

    for (int c = 0; c < 2; c++) {
        for (uint64_t i = 0; i < 14; i++) {
            match_limit(rs, &ev, "m", "acme", limits[c], NULL);
            ck_assert_uint_eq(ev.nhits, 1);
            struct rule_hit *h = &ev.hits[0];
            bucket_table_take(t, "custom", rules_hit_key(&ev, h), h->key_len, &h->params,
                              1000000 + i, 1, &h->out.res);
            struct spop_writer w = {out, out + sizeof(out)};
            ck_assert_int_eq(rules_encode_actions(&w, rs, &ev), 0);
            rt_decode(out, (size_t)(w.p - out), &v);
            ck_assert_int_eq(rt_var(&v, "limit")->u.sint, c ? 12 : 5);
            ck_assert_str_eq(rt_var_str(&v, "policy"), policies[c]);
            ck_assert_int_eq(rt_var(&v, "blocked")->u.sint, i >= (c ? 12 : 5));
        }
    }
    ck_assert_uint_eq(bucket_table_count(t), 2);
    rules_eval_free(&ev);
    bucket_table_free(t);
    ruleset_unref(rs);
}
END_TEST

static const struct bucket_params *per_bucket(void *ctx, const char *rule)
{
    return &bucket_params_per_bucket;
}

/* Expiry judges each bucket by its own limits: a bucket is dropped when it is
 * full again under the limits it was taken with, not before. */
START_TEST(arg_rate_expiry)
{
    struct ruleset *rs =
        rt_load("[rule:custom]\nkey = key\nrate = arg:limit\nmax_rate = 1000/1m\n");
    struct bucket_table *t = bucket_table_new(4);
    struct rule_eval ev = {0};
    const uint64_t s = 1000000;

    match_limit(rs, &ev, "m", "small", "5/1m", NULL); /* emptied: full after 60 s */
    for (int i = 0; i < 5; i++)
        bucket_table_take(t, "custom", rules_hit_key(&ev, &ev.hits[0]), ev.hits[0].key_len,
                          &ev.hits[0].params, 0, 1, &ev.hits[0].out.res);
    match_limit(rs, &ev, "m", "big", "12/1m", NULL); /* one taken: full after 5 s */
    bucket_table_take(t, "custom", rules_hit_key(&ev, &ev.hits[0]), ev.hits[0].key_len,
                      &ev.hits[0].params, 0, 1, &ev.hits[0].out.res);
    ck_assert_uint_eq(bucket_table_count(t), 2);
    ck_assert_uint_eq(bucket_table_expire(t, 5 * s - 1, SIZE_MAX, per_bucket, NULL), 0);
    ck_assert_uint_eq(bucket_table_expire(t, 5 * s, SIZE_MAX, per_bucket, NULL), 1);
    ck_assert_uint_eq(bucket_table_expire(t, 60 * s - 1, SIZE_MAX, per_bucket, NULL), 0);
    ck_assert_uint_eq(bucket_table_expire(t, 60 * s, SIZE_MAX, per_bucket, NULL), 1);
    ck_assert_uint_eq(bucket_table_count(t), 0);
    rules_eval_free(&ev);
    bucket_table_free(t);
    ruleset_unref(rs);
}
END_TEST

/* Rates compared exactly, also where doubles cannot tell them apart. */
static const struct {
    uint64_t n1, p1, n2, p2;
    int above;
} rate_cmp[] = {
    {1, 1, 1, 1, 0},
    {2000, 60000, 1000, 60000, 1},
    {100, 1000, 1000, 60000, 1},
    {1000, 60000, 1000, 60000, 0},
    {2000, 120000, 1000, 60000, 0},
    {999, 60000, 1000, 60000, 0},
    {1000000000000000, 18446744073709551, 999999999999999, 18446744073709533, 1},
    {999999999999999, 18446744073709533, 1000000000000000, 18446744073709551, 0},
    {999999999999999, 999999999999998, 1000000000000000, 999999999999999, 1},
    {1000000000000000, 999999999999999, 999999999999999, 999999999999998, 0},
    {1000000000000000, 1, 1000000000000000, 1, 0},
    {1, 18446744073709551, 1, 18446744073709550, 0},
    {1, 18446744073709550, 1, 18446744073709551, 1},
};

START_TEST(rate_above)
{
    ck_assert_int_eq(
        rules_rate_above(rate_cmp[_i].n1, rate_cmp[_i].p1, rate_cmp[_i].n2, rate_cmp[_i].p2),
        rate_cmp[_i].above);
}
END_TEST

/* cost = arg:NAME: the arg's integer, clamped to max_cost; a missing, NULL,
 * empty or invalid one costs 1 (never 0), is counted as a mismatch, and
 * does not skip the rule. A fixed cost is the same for every request. */
START_TEST(arg_cost)
{
    static const struct {
        const char *cost; /* "-": not sent */
        uint64_t want;
        int counted;
    } cases[] = {
        {"4", 4, 0}, {"0", 0, 0},  {"40", 40, 0}, {"41", 40, 0}, {"99999999999999999999999", 40, 0},
        {"-", 1, 1}, {NULL, 1, 1}, {"", 1, 1},    {"-3", 1, 1},  {"4x", 1, 1},
        {" 4", 1, 1}};
    struct ruleset *rs = rt_load("[rule:c]\nkey = key\nrate = 10/1m\ncost = arg:cost\n"
                                 "max_cost = 40\n[rule:fixed]\nkey = key\nrate = 10/1m\n"
                                 "cost = 3\n[rule:one]\nkey = key\nrate = 10/1m\n");
    struct rule_eval ev = {0};
    uint8_t buf[512];

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        uint64_t before = mismatch_total(MISMATCH_ARG);
        int sent = !(cases[i].cost && strcmp(cases[i].cost, "-") == 0);
        const char *args[] = {"key", "acme", "cost", cases[i].cost};
        size_t n = rt_payload(buf, sizeof(buf), "m", args, sent ? 2 : 1);

        ck_assert_int_eq(rules_match(rs, buf, n, &ev), 0);
        ck_assert_msg(ev.nhits == 3, "cost %s", cases[i].cost);
        ck_assert_msg(hit_of(rs, &ev, "c")->cost == cases[i].want, "cost %s: %llu", cases[i].cost,
                      (unsigned long long)hit_of(rs, &ev, "c")->cost);
        ck_assert_uint_eq(hit_of(rs, &ev, "fixed")->cost, 3);
        ck_assert_uint_eq(hit_of(rs, &ev, "one")->cost, 1);
        ck_assert_uint_eq(mismatch_total(MISMATCH_ARG), before + (uint64_t)cases[i].counted);
    }
    rules_eval_free(&ev);
    ruleset_unref(rs);
}
END_TEST

static Suite *rules_args_suite(void)
{
    Suite *s = suite_create("rules_args");
    TCase *tc = tcase_create("mismatch");
    tcase_add_test(tc, mismatch_counts_and_examples);
    tcase_set_timeout(tc, 30);
    suite_add_tcase(s, tc);
    tc = tcase_create("arg-limits");
    tcase_add_loop_test(tc, arg_rate_params, 0, (int)(sizeof(arg_rates) / sizeof(arg_rates[0])));
    CHECK_ADD(tc, arg_rate_missing_or_invalid, arg_rate_invalid_sample, arg_rate_keys, arg_burst,
              arg_rate_sliding_window, arg_rate_vars, arg_rate_expiry, arg_cost);
    tcase_add_loop_test(tc, rate_above, 0, (int)(sizeof(rate_cmp) / sizeof(rate_cmp[0])));
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return check_run(rules_args_suite());
}
