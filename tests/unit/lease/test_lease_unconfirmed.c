/* SPDX-License-Identifier: Apache-2.0 */
/* test_lease_unconfirmed.c - what a Sentinel agent's backstop is charged
 * when its master turns unconfirmed (a split brain, doc/design.md), with a
 * fake clock and hand-written Redis replies: each key counts what it
 * admitted from Redis' grants since the last confirmation (lazily, a new
 * epoch starting it again), the fallback takes that count once, spends of a
 * lease still held keep adding, a cold key's count outlives its retired
 * entries, and nothing is charged outside an unconfirmed streak; the
 * backstop bucket takes the charge below zero and refills from there. */
#include <check.h>
#include <stdint.h>

#include "limits/bucket.h"
#include "check_util.h"
#include "lease/lease.h"
#include "lease_fixture.h"
#include "store/script.h"

/* A lease of 5; spends before and after a confirmation; only those after
 * the last one are charged, once each. */
START_TEST(charges_what_was_taken_since_the_last_confirmation)
{
    struct lease_table *t = lease_table_new(&lt_cfg, 4);
    struct lease_job *j, *next = NULL;
    struct lease_waiter *done = NULL, *fb = NULL;
    struct lt_req r;
    uint64_t now = 10 * S;

    lease_confirmed(t);
    ck_assert_int_eq(lt_decide(t, "k", &lt_pbig, now, 1, &r, &j), LEASE_PENDING);
    j->sent_us = now;
    lt_reply(t, j, (const int64_t[8]){5, 995, 5, 1, 0, 5, 1000, 5}, now + 1 * MS, &done, &fb,
             &next);
    ck_assert_int_eq(lt_count(done), 1); /* the waiter: 1 of the grant */
    ck_assert_int_eq(lt_decide(t, "k", &lt_pbig, now + 2 * MS, 1, &r, &next), LEASE_DONE);
    /* confirmed: the master was the sentinels' then, nothing charged */
    ck_assert_uint_eq(lease_fallback_unconfirmed(t, "k", 1), 0);
    lease_confirmed(t);
    ck_assert_int_eq(lt_decide(t, "k", &lt_pbig, now + 3 * MS, 1, &r, &next), LEASE_DONE);
    ck_assert_int_eq(lt_decide(t, "k", &lt_pbig, now + 4 * MS, 1, &r, &next), LEASE_DONE);
    ck_assert_uint_eq(lease_fallback_unconfirmed(t, "k", 1), 0); /* not unconfirmed */
    lease_unconfirmed(t);
    ck_assert_uint_eq(lease_fallback_unconfirmed(t, "k", 1), 2); /* since the last answer */
    ck_assert_uint_eq(lease_fallback_unconfirmed(t, "k", 1), 0); /* once */
    /* Redis down, the lease still held: its last token is spent, and charged */
    ck_assert_int_eq(lt_decide(t, "k", &lt_pbig, now + 5 * MS, 0, &r, &next), LEASE_DONE);
    ck_assert_int_eq(lt_decide(t, "k", &lt_pbig, now + 6 * MS, 0, &r, &next), LEASE_DOWN);
    ck_assert_uint_eq(lease_fallback_unconfirmed(t, "k", 1), 1);
    ck_assert_uint_eq(lease_fallback_unconfirmed(t, "other", 5), 0);
    /* a sentinel answers: the streak ends, a new count starts */
    lease_confirmed(t);
    ck_assert_uint_eq(lease_fallback_unconfirmed(t, "k", 1), 0);
    lease_unconfirmed(t);
    ck_assert_uint_eq(lease_fallback_unconfirmed(t, "k", 1), 0); /* nothing since */
    lease_table_free(t);
}
END_TEST

/* Without any confirmation (the table's first epoch) the count runs from
 * the start, and waiters served from a grant count as spends. */
START_TEST(waiters_count_from_the_first_epoch)
{
    struct lease_table *t = lease_table_new(&lt_cfg, 4);
    struct lease_job *j, *next = NULL;
    struct lease_waiter *done = NULL, *fb = NULL;
    struct lt_req r[3];
    uint64_t now = 10 * S;

    ck_assert_int_eq(lt_decide(t, "k", &lt_pbig, now, 1, &r[0], &j), LEASE_PENDING);
    ck_assert_int_eq(lt_decide(t, "k", &lt_pbig, now, 1, &r[1], &next), LEASE_PENDING);
    ck_assert_int_eq(lt_decide(t, "k", &lt_pbig, now, 1, &r[2], &next), LEASE_PENDING);
    j->sent_us = now;
    lt_reply(t, j, (const int64_t[8]){2, 995, 2, 1, 0, 5, 1000, 2}, now + 1 * MS, &done, &fb,
             &next);
    ck_assert_int_eq(lt_count(done), 2); /* the grant served two of the three */
    lease_unconfirmed(t);
    ck_assert_uint_eq(lease_fallback_unconfirmed(t, "k", 1), 2);
    if (next) /* a follow-up claim for the third: answer it, nothing granted */
        lt_reply(t, next, (const int64_t[8]){0, 0, 2, 1, 1, 5, 1000, 2}, now + 2 * MS, &done, &fb,
                 &next);
    lease_table_free(t);
}
END_TEST

/* A cold key's exact call: its entry is retired at the allowed reply, and
 * its count goes to the ghost and back, past ttl too. */
START_TEST(exact_calls_count_across_retirement)
{
    static const struct lease_config cfg_exact = {100 * MS, 1 * S, 0.1, 0, 1, 0};
    struct lease_table *t = lease_table_new(&cfg_exact, 4);
    struct lease_job *j, *next = NULL;
    struct lease_waiter *done = NULL, *fb = NULL;
    struct lease_state st;
    struct lt_req r;
    uint64_t now = 10 * S;
    int64_t v[EXACT_R_COUNT] = {
        [EXACT_R_ALLOWED] = 1, [EXACT_R_REMAINING] = 999, [EXACT_R_RESET_MS] = 1};

    lease_confirmed(t);
    ck_assert_int_eq(lt_decide(t, "k", &lt_pbig, now, 1, &r, &j), LEASE_PENDING);
    ck_assert_uint_eq(j->kind, LEASE_JOB_EXACT);
    lease_reply(t, j, 1, v, EXACT_R_COUNT, now + MS, &done, &fb, &next);
    ck_assert_int_eq(lt_count(done), 1);
    ck_assert(r.res.allowed);
    ck_assert_int_eq(lease_peek(t, "k", 1, now + MS, &st), 0); /* retired */
    lease_unconfirmed(t);
    /* Redis down 5 s later (the ghost past ttl): the entry made again has it */
    ck_assert_int_eq(lt_decide(t, "k", &lt_pbig, now + 5 * S, 0, &r, &j), LEASE_DOWN);
    ck_assert_uint_eq(lease_fallback_unconfirmed(t, "k", 1), 1);
    ck_assert_uint_eq(lease_fallback_unconfirmed(t, "k", 1), 0);
    lease_table_free(t);
}
END_TEST

/* The backstop bucket takes the charge below zero, from where it refills at
 * its rate; a bucket not made yet is made full first. */
START_TEST(backstop_charged_below_zero)
{
    /* a token per 6 s */
    static const struct bucket_params p = {0, 10, 60 * S, 10, 0, 0, 60 * 1000, 0, 0, 0};
    static const struct bucket_params w = {
        BUCKET_SLIDING_WINDOW, 10, 60 * S, 10, 0, 0, 60 * 1000, 0, 0, 0};
    struct bucket_table *bt = bucket_table_new(4);
    struct bucket_result res;
    uint64_t now = 100 * S;

    ck_assert_int_eq(
        bucket_table_charge_seeded(bt, "r", 1, bucket_rule_seed("r", 1), "a", 1, &p, now, 3), 0);
    for (int i = 0; i < 7; i++) {
        bucket_table_take(bt, "r", "a", 1, &p, now, 1, &res);
        ck_assert(res.allowed);
    }
    bucket_table_take(bt, "r", "a", 1, &p, now, 1, &res);
    ck_assert(!res.allowed);
    /* 0 - 5: five tokens to make up, one more to pass: 36 s */
    bucket_table_charge_seeded(bt, "r", 1, bucket_rule_seed("r", 1), "a", 1, &p, now, 5);
    bucket_table_take(bt, "r", "a", 1, &p, now + 35 * S, 1, &res);
    ck_assert(!res.allowed);
    ck_assert_uint_eq(res.remaining, 0);
    ck_assert_uint_le(res.retry_us, 1 * S);
    bucket_table_take(bt, "r", "a", 1, &p, now + 36 * S, 1, &res);
    ck_assert(res.allowed);
    /* a window is not charged so */
    bucket_table_charge_seeded(bt, "w", 1, bucket_rule_seed("w", 1), "a", 1, &w, now, 50);
    bucket_table_take(bt, "w", "a", 1, &w, now, 1, &res);
    ck_assert(res.allowed);
    bucket_table_free(bt);
}
END_TEST

int main(void)
{
    TCase *tc = tcase_create("core");

    CHECK_ADD(tc, charges_what_was_taken_since_the_last_confirmation,
              waiters_count_from_the_first_epoch, exact_calls_count_across_retirement,
              backstop_charged_below_zero);
    return check_run_case("lease_unconfirmed", tc);
}
