/* SPDX-License-Identifier: Apache-2.0 */
/* test_reset_local.c - the pure parts of a fleet-wide reset: its member in
 * Redis (reset_msg.h: any byte of a key survives the round trip, the
 * resetter's own entries are known as such, malformed members are refused)
 * and what another agent drops of a reset key (lease_reset_local, with a
 * fake clock and hand-written Redis replies): a blocked key's negative
 * cache (block_for's penalty box alike) goes, so the next decision asks
 * Redis; a held lease is voided, not spent here again, and its next claim
 * reports it all spent (nothing given back to the reset bucket); other
 * keys are untouched. */
#include <check.h>
#include <stdint.h>
#include <string.h>

#include "check_util.h"
#include "lease/lease.h"
#include "lease_fixture.h"
#include "limits/reset_msg.h"
#include "store/script.h"

START_TEST(member_round_trip)
{
    const char ckey[] = "a\tb\0c\xff", rkey[] = "rl:tb:api:a";
    char out[256], buf[256];
    struct reset_msg m;
    size_t n = reset_msg_format(out, sizeof(out), "host:1:ab:7", "api", ckey, sizeof(ckey) - 1,
                                rkey, sizeof(rkey) - 1);

    ck_assert_uint_gt(n, 0);
    ck_assert_uint_eq(n + 1, reset_msg_size(11, 3, sizeof(ckey) - 1, sizeof(rkey) - 1));
    ck_assert_int_eq(reset_msg_parse(out, n, buf, &m), 0);
    ck_assert_str_eq(m.id, "host:1:ab:7");
    ck_assert_str_eq(m.rule, "api");
    ck_assert_uint_eq(m.client_keylen, sizeof(ckey) - 1);
    ck_assert_int_eq(memcmp(m.client_key, ckey, sizeof(ckey) - 1), 0);
    ck_assert_uint_eq(m.redis_keylen, sizeof(rkey) - 1);
    ck_assert_int_eq(memcmp(m.redis_key, rkey, sizeof(rkey) - 1), 0);
    /* whose: the agent id, then ':' */
    ck_assert_int_eq(reset_msg_from(m.id, "host:1:ab"), 1);
    ck_assert_int_eq(reset_msg_from(m.id, "host:1:a"), 0);
    ck_assert_int_eq(reset_msg_from(m.id, "host:1:abc"), 0);
    /* an empty client key is a key */
    n = reset_msg_format(out, sizeof(out), "x:1", "r", "", 0, "k", 1);
    ck_assert_int_eq(reset_msg_parse(out, n, buf, &m), 0);
    ck_assert_uint_eq(m.client_keylen, 0);
}
END_TEST

START_TEST(member_refused)
{
    char out[16], buf[64];
    struct reset_msg m;

    /* too small, or fields that would break the layout */
    ck_assert_uint_eq(reset_msg_format(out, sizeof(out), "id:1", "rule", "0123456789", 10, "k", 1),
                      0);
    ck_assert_uint_eq(reset_msg_format(out, sizeof(out), "id\t1", "r", "", 0, "k", 1), 0);
    ck_assert_uint_eq(reset_msg_format(out, sizeof(out), "id:1", "", "", 0, "k", 1), 0);
    static const char *const bad[] = {
        "",
        "id\tr\t61",
        "id\tr\t61\t6b\tx",
        "id\tr\t6\t6b",
        "id\tr\t61\t",
        "\tr\t61\t6b",
        "id\t\t61\t6b",
        "id\tr\tzz\t6b",
        "id\tr\t61\t6B",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(*bad); i++)
        ck_assert_msg(reset_msg_parse(bad[i], strlen(bad[i]), buf, &m) < 0, "%s", bad[i]);
    ck_assert_int_eq(reset_msg_parse("id\tr\t61\t6b", 10, buf, &m), 0);
}
END_TEST

/* Claim reply: nothing granted, blocked for retry_ms (block_for's end). */
static void blocked_reply(struct lease_table *t, struct lease_job *j, uint64_t now,
                          int64_t retry_ms)
{
    struct lease_waiter *done = NULL, *fb = NULL;
    struct lease_job *next = NULL;

    j->sent_us = now;
    lt_reply(t, j, (const int64_t[8]){0, 0, 0, 0, retry_ms, retry_ms, 0, 0}, now + 1 * MS, &done,
             &fb, &next);
    ck_assert_ptr_null(next);
}

START_TEST(negative_cache_dropped)
{
    struct lease_table *t = lease_table_new(&lt_cfg, 4);
    struct lease_job *j = NULL, *none = NULL;
    struct lt_req r;
    struct lease_state st;
    uint64_t now = 10 * S;

    ck_assert_int_eq(lt_decide(t, "k", &lt_p10, now, 1, &r, &j), LEASE_PENDING);
    blocked_reply(t, j, now, 30000); /* a 30 s penalty box */
    ck_assert_int_eq(lt_decide(t, "k", &lt_p10, now + 2 * MS, 1, &r, &none), LEASE_DONE);
    ck_assert_int_eq(r.res.allowed, 0); /* answered here: blocked */
    ck_assert_ptr_null(none);
    ck_assert_int_eq(lt_decide(t, "other", &lt_p10, now, 1, &r, &j), LEASE_PENDING);
    blocked_reply(t, j, now, 30000);

    ck_assert_int_eq(lease_reset_local(t, "k", 1, now + 3 * MS), 1);
    ck_assert_int_eq(lease_peek(t, "k", 1, now + 3 * MS, &st), 1);
    ck_assert_uint_eq(st.blocked_left_us, 0);
    ck_assert_int_eq(st.known, 0);
    /* the next decision asks Redis */
    ck_assert_int_eq(lt_decide(t, "k", &lt_p10, now + 4 * MS, 1, &r, &j), LEASE_PENDING);
    ck_assert_ptr_nonnull(j);
    struct lease_waiter *done = NULL, *fb = NULL;
    struct lease_job *next = NULL;
    j->sent_us = now + 4 * MS;
    lt_reply(t, j, (const int64_t[8]){1, 9, 1, 1, 0, 0, 1000, 1}, now + 5 * MS, &done, &fb, &next);
    ck_assert_int_eq(lt_count(done), 1);
    /* the other key still sits in its box */
    ck_assert_int_eq(lease_peek(t, "other", 5, now + 5 * MS, &st), 1);
    ck_assert_uint_gt(st.blocked_left_us, 0);
    /* no entry: nothing to drop */
    ck_assert_int_eq(lease_reset_local(t, "none", 4, now), 0);
    lease_table_free(t);
}
END_TEST

START_TEST(lease_voided_not_returned)
{
    struct lease_table *t = lease_table_new(&lt_cfg, 4);
    struct lease_job *j = NULL, *next = NULL;
    struct lease_waiter *done = NULL, *fb = NULL;
    struct lt_req r;
    struct lease_state st;
    uint64_t now = 10 * S;

    ck_assert_int_eq(lt_decide(t, "k", &lt_pbig, now, 1, &r, &j), LEASE_PENDING);
    j->sent_us = now;
    lt_reply(t, j, (const int64_t[8]){5, 995, 5, 1, 0, 5, 1000, 5}, now + 1 * MS, &done, &fb,
             &next);
    ck_assert_int_eq(lt_count(done), 1);
    ck_assert_int_eq(lease_peek(t, "k", 1, now + 2 * MS, &st), 1);
    ck_assert_uint_eq(st.tokens, 4);

    ck_assert_int_eq(lease_reset_local(t, "k", 1, now + 2 * MS), 1);
    ck_assert_int_eq(lease_peek(t, "k", 1, now + 2 * MS, &st), 1);
    ck_assert_uint_eq(st.tokens, 0);
    ck_assert_int_eq(st.voided, 1);
    /* not spent here again: the next decision claims, and gives nothing back */
    j = NULL;
    ck_assert_int_eq(lt_decide(t, "k", &lt_pbig, now + 3 * MS, 1, &r, &j), LEASE_PENDING);
    ck_assert_ptr_nonnull(j);
    ck_assert_int_eq(j->kind, LEASE_JOB_CLAIM);
    ck_assert_uint_eq(j->returned, 0);
    j->sent_us = now + 3 * MS;
    lt_reply(t, j, (const int64_t[8]){5, 995, 5, 1, 0, 5, 1000, 5}, now + 4 * MS, &done, &fb,
             &next);
    lease_table_free(t);
}
END_TEST

int main(void)
{
    TCase *tc = tcase_create("reset_local");

    tcase_add_test(tc, member_round_trip);
    tcase_add_test(tc, member_refused);
    tcase_add_test(tc, negative_cache_dropped);
    tcase_add_test(tc, lease_voided_not_returned);
    return check_run_case("reset_local", tc);
}
