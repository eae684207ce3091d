/* SPDX-License-Identifier: Apache-2.0 */
/* test_slots.c - concurrency slots without Redis: the in-memory slot table
 * (take, release, unknown release, expiry by max_hold, reset, the sweep),
 * the slot token (encode, parse, garbage), the release message's tokens, and
 * a concurrency rule in the config (defaults, --print round trip).
 */
#include "limits/slots.h"

#include <check.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check_util.h"
#include "rules_fixture.h"
#include "config/config.h"
#include "rules/rules.h"
#include "spop/spop.h"

#define HOLD_US 2000000ULL

START_TEST(take_release_unknown)
{
    struct slot_table *t = slot_table_new();
    struct slot_take r;

    ck_assert_int_eq(slot_table_take(t, "r", "k", 1, 2, HOLD_US, 11, 100, &r), 0);
    ck_assert(r.allowed);
    ck_assert_uint_eq(r.held, 1);
    slot_table_take(t, "r", "k", 1, 2, HOLD_US, 12, 200, &r);
    ck_assert(r.allowed);
    ck_assert_uint_eq(r.held, 2);
    slot_table_take(t, "r", "k", 1, 2, HOLD_US, 13, 300, &r);
    ck_assert(!r.allowed);
    ck_assert_uint_eq(r.held, 2);
    ck_assert_uint_eq(r.retry_us, 1000000); /* the earliest deadline is 2 s away: 1 s */
    /* another key, another rule: their own slots */
    slot_table_take(t, "r", "k2", 2, 2, HOLD_US, 14, 300, &r);
    ck_assert(r.allowed);
    slot_table_take(t, "s", "k", 1, 2, HOLD_US, 15, 300, &r);
    ck_assert(r.allowed);
    /* unknown ids, keys, rules: nothing freed */
    ck_assert_int_eq(slot_table_release(t, "r", "k", 1, 99, 400), 0);
    ck_assert_int_eq(slot_table_release(t, "r", "x", 1, 11, 400), 0);
    ck_assert_int_eq(slot_table_release(t, "q", "k", 1, 11, 400), 0);
    ck_assert_uint_eq(slot_table_peek(t, "r", "k", 1, 400, NULL, NULL), 2);
    /* a release frees exactly its slot, once */
    ck_assert_int_eq(slot_table_release(t, "r", "k", 1, 11, 400), 1);
    ck_assert_int_eq(slot_table_release(t, "r", "k", 1, 11, 400), 0);
    slot_table_take(t, "r", "k", 1, 2, HOLD_US, 16, 500, &r);
    ck_assert(r.allowed);
    ck_assert_uint_eq(r.held, 2);
    ck_assert_uint_eq(slot_table_count(t), 4);
    ck_assert_uint_eq(slot_table_reset(t, "r", "k", 1, 600), 2);
    ck_assert_uint_eq(slot_table_count(t), 2);
    slot_table_free(t);
}
END_TEST

START_TEST(expiry_by_max_hold)
{
    struct slot_table *t = slot_table_new();
    struct slot_take r;
    uint64_t first = 0, expired = 0;

    slot_table_take(t, "r", "k", 1, 2, HOLD_US, 1, 0, &r);
    slot_table_take(t, "r", "k", 1, 2, HOLD_US, 2, 500000, &r);
    slot_table_take(t, "r", "k", 1, 2, HOLD_US, 3, 1800000, &r);
    ck_assert(!r.allowed);
    ck_assert_uint_eq(r.retry_us, 200000); /* slot 1's deadline is sooner than 1 s */
    ck_assert_uint_eq(slot_table_peek(t, "r", "k", 1, 1900000, &first, &expired), 2);
    ck_assert_uint_eq(first, 100000);
    ck_assert_uint_eq(expired, 0);
    /* not before its deadline, then at once */
    slot_table_take(t, "r", "k", 1, 2, HOLD_US, 3, HOLD_US - 1, &r);
    ck_assert(!r.allowed);
    slot_table_take(t, "r", "k", 1, 2, HOLD_US, 3, HOLD_US, &r);
    ck_assert(r.allowed);
    ck_assert_uint_eq(r.expired, 1);
    /* an expired slot's release is unknown: it was freed already */
    ck_assert_int_eq(slot_table_release(t, "r", "k", 1, 2, 2500000), 0);
    /* the sweep frees what nobody asks for any more */
    ck_assert_uint_eq(slot_table_expire(t, 10 * HOLD_US, NULL, NULL), 1);
    ck_assert_uint_eq(slot_table_count(t), 0);
    slot_table_free(t);
}
END_TEST

START_TEST(ids_unique_nonzero)
{
    uint64_t a = slots_new_id(), b = slots_new_id();
    ck_assert(a && b && a != b);
}
END_TEST

START_TEST(token_round_trip)
{
    char tok[RULES_SLOT_TOKEN_MAX], skey[RULES_SLOT_KEY_MAX + 1];
    struct rules_slot s;
    static const char key[] = "api key|with:colons and spaces";
    int sk = rules_slot_key(key, sizeof(key) - 1, skey);

    ck_assert_int_eq(sk, (int)sizeof(key) - 1);
    size_t n = rules_slot_token(tok, "in-flight", 9, 'r', 0x0123456789abcdefULL, skey, (size_t)sk);
    ck_assert(memchr(tok, ' ', n) == NULL); /* tokens are space separated */
    ck_assert_int_eq(rules_slot_parse(tok, n, &s), 0);
    ck_assert_uint_eq(s.rule_len, 9);
    ck_assert(memcmp(s.rule, "in-flight", 9) == 0);
    ck_assert_int_eq(s.src, 'r');
    ck_assert(s.id == 0x0123456789abcdefULL);
    ck_assert_uint_eq(s.key_len, (size_t)sk);
    ck_assert(memcmp(s.key, key, s.key_len) == 0);

    /* a long key: its hash, so that a token has a bound */
    char long_key[600];
    memset(long_key, 'x', sizeof(long_key));
    sk = rules_slot_key(long_key, sizeof(long_key), skey);
    ck_assert_int_eq(sk, RULES_HASHED_KEY_LEN);
    ck_assert_int_eq(skey[0], '#');
    char name[CFG_MAX_NAME];
    memset(name, 'n', sizeof(name));
    n = rules_slot_token(tok, name, sizeof(name), 'l', UINT64_MAX, skey, (size_t)sk);
    ck_assert_uint_eq(n, RULES_SLOT_TOKEN_MAX);
    ck_assert_int_eq(rules_slot_parse(tok, n, &s), 0);
    ck_assert_int_eq(s.src, 'l');
    /* an empty key (a rule without key) */
    n = rules_slot_token(tok, "g", 1, 'r', 5, "", 0);
    ck_assert_int_eq(rules_slot_parse(tok, n, &s), 0);
    ck_assert_uint_eq(s.key_len, 0);
}
END_TEST

static const char *const garbage[] = {
    "",
    "x",
    ":",
    "r:",
    "r:r0123456789abcdef",
    "r:r0123456789abcde:",
    ":r0123456789abcdef:",
    "r:x0123456789abcdef:",
    "r:r0123456789abcdeg:",
    "r:r0123456789ABCDEF:",
    "r:r0123456789abcdef:6",
    "r:r0123456789abcdef:zz",
    "r:r0000000000000000:",
    "r:r0123456789abcdef;",
    "r:r0123456789abcdef:6b ",
    "nnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnn:r0123456789abcdef:",
    "r:r0123456789abcdef:"
    "6161616161616161616161616161616161616161616161616161616161616161616161",
};

START_TEST(token_garbage)
{
    struct rules_slot s;
    const char *g = garbage[_i];
    ck_assert_msg(rules_slot_parse(g, strlen(g), &s) == -1, "parsed: '%s'", g);
}
END_TEST

static const char CC_INI[] = "[rule:in-flight]\n"
                             "message = check-rate\n"
                             "key = key\n"
                             "algorithm = concurrency\n"
                             "limit = 2\n"
                             "release = release-slot\n";

START_TEST(config_defaults_and_print)
{
    struct config *cfg = check_config_ok(CC_INI);
    const struct cfg_rule *r = &cfg->rules[0];
    size_t len;

    ck_assert_int_eq(r->algorithm, ALGO_CONCURRENCY);
    ck_assert_uint_eq(r->cc_limit, 2);
    ck_assert_str_eq(r->release, "release-slot");
    ck_assert_uint_eq(r->max_hold_ms, CFG_DEFAULT_MAX_HOLD_MS);
    ck_assert_int_eq(r->lease, 0);
    char *text = config_render(cfg, &len);
    ck_assert_ptr_nonnull(strstr(text, "algorithm = concurrency\nlimit = 2\nrelease = "
                                       "release-slot\nmax_hold = 1m\n"));
    ck_assert_ptr_null(strstr(text, "rate ="));
    /* what --print shows loads again, to the same config */
    const char *body = strchr(text, '\n') + 1;
    struct config *again = check_config_ok(body);
    ck_assert(config_hash(again) == config_hash(cfg));
    free(text);
    config_free(again);
    config_free(cfg);
}
END_TEST

/* A release message: each token into ev->releases, garbage as unknown, and
 * no rule counts it as a request. */
START_TEST(release_message_tokens)
{
    struct ruleset *rs = rt_load("[rule:in-flight]\n"
                                 "key = key\n"
                                 "algorithm = concurrency\n"
                                 "limit = 2\n"
                                 "release = release-slot\n"
                                 "[rule:every]\n"
                                 "rate = 10/1s\n");
    struct rule_eval ev = {0};
    char tok[RULES_SLOT_TOKEN_MAX + 16];
    size_t n = rules_slot_token(tok, "in-flight", 9, 'l', 42, "k", 1);
    memcpy(tok + n, " junk", 6);
    uint8_t buf[512];
    const char *kv[] = {"slot", tok};
    size_t len = rt_payload(buf, sizeof(buf), "release-slot", kv, 1);

    ck_assert_int_eq(rules_match(rs, buf, len, &ev), 0);
    ck_assert_uint_eq(ev.nhits, 0);
    ck_assert_uint_eq(ev.nreleases, 2);
    ck_assert_int_eq(ev.releases[0].rule, 0);
    ck_assert(ev.releases[0].id == 42);
    ck_assert_int_eq(ev.releases[0].src, 'l');
    ck_assert_uint_eq(ev.releases[0].key_len, 1);
    ck_assert_int_eq(ev.keys[ev.releases[0].key_off], 'k');
    ck_assert_int_eq(ev.releases[1].rule, -1);
    ck_assert_uint_eq(ev.releases[1].via, 0);
    rules_eval_free(&ev);
    ruleset_unref(rs);
}
END_TEST

/* The ACK of a request two concurrency rules admitted carries both tokens
 * in slot, space separated; a blocked one carries none. */
START_TEST(ack_slot_var)
{
    struct ruleset *rs = rt_load("[rule:a]\nmessage = check-rate\nkey = key\n"
                                 "algorithm = concurrency\nlimit = 2\nrelease = rel\n"
                                 "[rule:b]\nmessage = check-rate\nkey = key\n"
                                 "algorithm = concurrency\nlimit = 3\nrelease = rel\n"
                                 "[rule:g]\nmessage = check-rate\nrate = 5/1s\n");
    struct rule_eval ev = {0};
    uint8_t buf[256], out[2048];
    const char *kv[] = {"key", "k"};
    size_t n = rt_payload(buf, sizeof(buf), "check-rate", kv, 1);
    struct rt_vars v;
    struct rules_slot s1, s2;

    ck_assert_int_eq(rules_match(rs, buf, n, &ev), 0);
    ck_assert_uint_eq(ev.nhits, 3);
    for (size_t i = 0; i < 3; i++) {
        ev.hits[i].out.res = (struct bucket_result){1, 1, 0, 0};
        ev.hits[i].slot_id = i < 2 ? 100 + i : 0;
        ev.hits[i].slot_src = i == 0 ? RULES_SLOT_REDIS : RULES_SLOT_LOCAL;
    }
    struct spop_writer w = {out, out + sizeof(out)};
    ck_assert_int_eq(rules_encode_actions(&w, rs, &ev), 0);
    rt_decode(out, (size_t)(w.p - out), &v);
    const char *slot = rt_var_str(&v, "slot");
    ck_assert_ptr_nonnull(slot);
    const char *sp = strchr(slot, ' ');
    ck_assert_ptr_nonnull(sp);
    ck_assert_int_eq(rules_slot_parse(slot, (size_t)(sp - slot), &s1), 0);
    ck_assert_int_eq(rules_slot_parse(sp + 1, strlen(sp + 1), &s2), 0);
    ck_assert(s1.id == 100 && s1.src == 'r' && s1.rule_len == 1 && s1.rule[0] == 'a');
    ck_assert(s2.id == 101 && s2.src == 'l' && s2.rule_len == 1 && s2.rule[0] == 'b');
    ck_assert(s1.key_len == 1 && s1.key[0] == 'k');

    ev.hits[2].out.res = (struct bucket_result){0, 0, 1000000, 1000000}; /* g blocks */
    w = (struct spop_writer){out, out + sizeof(out)};
    ck_assert_int_eq(rules_encode_actions(&w, rs, &ev), 0);
    rt_decode(out, (size_t)(w.p - out), &v);
    ck_assert_int_eq(rt_var(&v, "blocked")->u.sint, 1);
    ck_assert_ptr_null(rt_var(&v, "slot"));
    rules_eval_free(&ev);
    ruleset_unref(rs);
}
END_TEST

static Suite *slots_suite(void)
{
    Suite *s = suite_create("slots");
    TCase *tc = tcase_create("slots");
    CHECK_ADD(tc, take_release_unknown, expiry_by_max_hold, ids_unique_nonzero, token_round_trip,
              config_defaults_and_print, release_message_tokens, ack_slot_var);
    CHECK_LOOP(tc, token_garbage, garbage);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return check_run(slots_suite());
}
