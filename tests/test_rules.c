/* test_rules.c - rule matching, keys and ACK variables, without sockets. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bucket.h"
#include "config/config.h"
#include "rules.h"
#include "spop/spop.h"

static const char *const ini =
    "[agent]\nmax_key = 32\n"
    "[rule:api]\nmessage = check-rate\nkey = key\nmatch = path ^/api/\nrate = 10/1m\n"
    "[rule:pair]\nkey = key, ip\nrate = 5/1s\nburst = 2\n"
    "[rule:shadow]\nkey = ip\nrate = 1/1m\nshadow = yes\n";

static struct ruleset *load(const char *text)
{
    struct config *cfg;
    char err[1024];
    ck_assert_msg(config_load_string(text, "t.ini", &cfg, err, sizeof(err)) == 0, "%s", err);
    struct ruleset *rs = ruleset_new(cfg);
    ck_assert_ptr_nonnull(rs);
    return rs;
}

/* A NOTIFY payload with one message of string args (NULL value = NULL type). */
static size_t payload(uint8_t *buf, size_t cap, const char *msg, const char *const *kv, int n)
{
    struct spop_writer w = {buf, buf + cap};
    ck_assert_int_eq(spop_put_str(&w, msg, strlen(msg)), 0);
    *w.p++ = (uint8_t)n;
    for (int i = 0; i < n; i++) {
        struct spop_data d;
        ck_assert_int_eq(spop_put_str(&w, kv[2 * i], strlen(kv[2 * i])), 0);
        if (kv[2 * i + 1])
            d = spop_string(kv[2 * i + 1], strlen(kv[2 * i + 1]));
        else
            d.type = SPOP_DATA_NULL;
        ck_assert_int_eq(spop_put_data(&w, &d), 0);
    }
    return (size_t)(w.p - buf);
}

START_TEST(match_and_keys)
{
    struct ruleset *rs = load(ini);
    struct rule_eval ev = {0};
    uint8_t buf[512];
    const char *args[] = {"key", "tenant-1", "path", "/api/v1", "ip", "10.0.0.1"};
    size_t n = payload(buf, sizeof(buf), "check-rate", args, 3);

    ck_assert_int_eq(rules_match(rs, buf, n, &ev), 0);
    ck_assert_uint_eq(ev.nhits, 3);
    ck_assert_str_eq(rules_hit_key(&ev, &ev.hits[0]), "tenant-1");
    ck_assert_str_eq(rules_hit_key(&ev, &ev.hits[1]), "tenant-1|10.0.0.1");
    ck_assert_str_eq(rules_hit_key(&ev, &ev.hits[2]), "10.0.0.1");

    /* another message: "api" is bound to check-rate */
    n = payload(buf, sizeof(buf), "other", args, 3);
    ck_assert_int_eq(rules_match(rs, buf, n, &ev), 0);
    ck_assert_uint_eq(ev.nhits, 2);
    ck_assert_uint_eq(ev.hits[0].rule, 1);

    /* path does not match; NULL and empty args skip the rule */
    const char *a2[] = {"key", "", "path", "/static", "ip", NULL};
    n = payload(buf, sizeof(buf), "check-rate", a2, 3);
    ck_assert_int_eq(rules_match(rs, buf, n, &ev), 0);
    ck_assert_uint_eq(ev.nhits, 0);

    /* long keys are hashed to a fixed size */
    const char *a3[] = {"key", "0123456789012345678901234567890123456789", "path", "/api/"};
    n = payload(buf, sizeof(buf), "check-rate", a3, 2);
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

/* The operator's lookup finds the key a request builds: the same text up to
 * max_key, the same hash past it, for one key arg and for several. */
START_TEST(client_key_as_requests_build_it)
{
    struct ruleset *rs = load(ini); /* max_key = 32 */
    struct rule_eval ev = {0};
    uint8_t buf[1024];
    char out[128];
    static const char *const values[] = {"tenant-1", "0123456789012345678901234567890",
                                         "01234567890123456789012345678901",
                                         "012345678901234567890123456789012"};

    for (size_t i = 0; i < sizeof(values) / sizeof(values[0]); i++) {
        const char *args[] = {"key", values[i], "path", "/api/", "ip", "10.0.0.1"};
        size_t n = payload(buf, sizeof(buf), "check-rate", args, 3);
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
    struct bucket_params lim = {0, 100, 60000000, 20};
    ck_assert_int_eq(rules_client_key("t", 1, &lim, 32, out, sizeof(out)), 16);
    ck_assert_str_eq(out, "t\x1f"
                          "100/60000ms/20");
    ck_assert_int_eq(rules_client_key("tenant-1234567890123456", 23, &lim, 32, out, sizeof(out)),
                     33);
    rules_eval_free(&ev);
    ruleset_unref(rs);
}
END_TEST

/* Decode the actions of an encoded ACK body into a small table. */
struct vars {
    char name[16][32];
    struct spop_data val[16];
    char str[16][128];
    int n;
};

static void decode(const uint8_t *p, size_t len, struct vars *v)
{
    struct spop_reader r = {p, p + len};
    uint8_t act, scope;
    struct spop_str name;
    struct spop_data d;
    v->n = 0;
    while (spop_action_next(&r, &act, &scope, &name, &d) == 1) {
        ck_assert_int_eq(act, SPOP_ACT_SET_VAR);
        ck_assert_int_eq(scope, SPOP_SCOPE_TXN);
        snprintf(v->name[v->n], 32, "%.*s", (int)name.len, name.ptr);
        v->val[v->n] = d;
        if (d.type == SPOP_DATA_STR)
            snprintf(v->str[v->n], 128, "%.*s", (int)d.u.buf.len, d.u.buf.ptr);
        v->n++;
    }
}

static const struct spop_data *var(const struct vars *v, const char *name)
{
    for (int i = 0; i < v->n; i++)
        if (strcmp(v->name[i], name) == 0)
            return &v->val[i];
    return NULL;
}

static const char *var_str(const struct vars *v, const char *name)
{
    for (int i = 0; i < v->n; i++)
        if (strcmp(v->name[i], name) == 0)
            return v->str[i];
    return NULL;
}

/* The scenario through buckets and encoding: 10/1m burst 10. */
START_TEST(ten_per_minute_vars)
{
    struct ruleset *rs = load(ini);
    struct bucket_table *t = bucket_table_new(4);
    struct rule_eval ev = {0};
    uint8_t buf[512], out[1024];
    const char *args[] = {"key", "k", "path", "/api/"};
    size_t n = payload(buf, sizeof(buf), "check-rate", args, 2);
    struct vars v;

    for (int i = 0; i < 14; i++) {
        ck_assert_int_eq(rules_match(rs, buf, n, &ev), 0);
        ck_assert_uint_eq(ev.nhits, 1);
        bucket_table_take(t, "api", "k", 1, &rs->params[0], 1000000 + (uint64_t)i, 1,
                          &ev.hits[0].out.res);
        struct spop_writer w = {out, out + sizeof(out)};
        ck_assert_int_eq(rules_encode_actions(&w, rs, &ev), 0);
        decode(out, (size_t)(w.p - out), &v);
        ck_assert_int_eq(var(&v, "blocked")->u.sint, i >= 10);
        ck_assert_str_eq(var_str(&v, "rule"), "api");
        ck_assert_int_eq(var(&v, "limit")->u.sint, 10);
        ck_assert_str_eq(var_str(&v, "policy"), "\"api\";q=10;w=60");
        if (i < 10) {
            ck_assert_int_eq(var(&v, "remaining")->u.sint, 9 - i);
            ck_assert_ptr_null(var(&v, "retry_after"));
        } else {
            ck_assert_int_eq(var(&v, "remaining")->u.sint, 0);
            ck_assert_int_ge(var(&v, "retry_after")->u.sint, 1);
            ck_assert_int_le(var(&v, "retry_after")->u.sint, 6);
            ck_assert_int_eq(var(&v, "reset")->u.sint, 60);
            ck_assert_str_eq(var_str(&v, "ratelimit"), "\"api\";r=0;t=60");
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
    struct ruleset *rs = load(ini);
    struct rule_eval ev = {0};
    uint8_t buf[512], out[1024];
    const char *args[] = {"key", "k", "path", "/api/", "ip", "::1"};
    size_t n = payload(buf, sizeof(buf), "check-rate", args, 3);
    struct vars v;

    ck_assert_int_eq(rules_match(rs, buf, n, &ev), 0);
    ck_assert_uint_eq(ev.nhits, 3);
    /* api allows with 5 left, pair allows with 1 left, shadow denies */
    ev.hits[0].out.res = (struct bucket_result){1, 5, 30000000, 0};
    ev.hits[1].out.res = (struct bucket_result){1, 1, 1500000, 0};
    ev.hits[2].out.res = (struct bucket_result){0, 0, 60000000, 60000000};
    struct spop_writer w = {out, out + sizeof(out)};
    ck_assert_int_eq(rules_encode_actions(&w, rs, &ev), 0);
    decode(out, (size_t)(w.p - out), &v);
    ck_assert_int_eq(var(&v, "blocked")->u.sint, 0);
    ck_assert_int_eq(var(&v, "would_block")->u.sint, 1);
    ck_assert_str_eq(var_str(&v, "rule"), "pair");
    ck_assert_int_eq(var(&v, "remaining")->u.sint, 1);
    ck_assert_int_eq(var(&v, "reset")->u.sint, 2);

    /* the blocking rule wins, with the longest wait among blockers */
    ev.hits[0].out.res = (struct bucket_result){0, 0, 60000000, 6000000};
    ev.hits[1].out.res = (struct bucket_result){0, 0, 1500000, 500000};
    w = (struct spop_writer){out, out + sizeof(out)};
    ck_assert_int_eq(rules_encode_actions(&w, rs, &ev), 0);
    decode(out, (size_t)(w.p - out), &v);
    ck_assert_int_eq(var(&v, "blocked")->u.sint, 1);
    ck_assert_str_eq(var_str(&v, "rule"), "api");
    ck_assert_int_eq(var(&v, "retry_after")->u.sint, 6);

    /* no hit: blocked=false alone */
    ev.nhits = 0;
    w = (struct spop_writer){out, out + sizeof(out)};
    ck_assert_int_eq(rules_encode_actions(&w, rs, &ev), 0);
    decode(out, (size_t)(w.p - out), &v);
    ck_assert_int_eq(v.n, 1);
    ck_assert_str_eq(v.name[0], "blocked");
    rules_eval_free(&ev);
    ruleset_unref(rs);
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

static Suite *rules_suite(void)
{
    Suite *s = suite_create("rules");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, match_and_keys);
    tcase_add_test(tc, client_key_as_requests_build_it);
    tcase_add_test(tc, ten_per_minute_vars);
    tcase_add_test(tc, deciding_rule_and_shadow);
    tcase_add_loop_test(tc, value_text, 0, 8);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(rules_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
