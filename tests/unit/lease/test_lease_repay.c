/* SPDX-License-Identifier: Apache-2.0 */
/* test_lease_repay.c - what the backstop admits for a leased key while Redis
 * does not decide, with a fake clock and hand-written Redis replies: a late
 * claim reply pays for it before anything is spent from it, a debt larger
 * than a grant is paid from the next ones (never more than burst), and the
 * backstop starts from what the lease last knew of the key. */
#include <check.h>
#include <stdatomic.h>
#include <stdint.h>

#include "check_util.h"
#include "lease/lease.h"
#include "lease_fixture.h"
#include "store/script.h"

/* A claim times out; the backstop admits 3 of the key's requests; the late
 * reply grants 5: 3 of them are reported spent (never spent again), 2 are
 * left to spend, and the next claim reports all 5. */
START_TEST(late_reply_pays_the_backstop)
{
    struct lease_table *t = lease_table_new(&lt_cfg, 4);
    struct lease_job *j, *next;
    struct lease_waiter *done = NULL, *fb = NULL;
    struct lease_state st;
    struct lt_req r;
    atomic_uint_fast64_t repaid = 0;
    uint64_t now = 10 * S;

    ck_assert_int_eq(lt_decide(t, "k", &lt_pbig, now, 1, &r, &j), LEASE_PENDING);
    j->sent_us = now;
    lease_timeout(t, j, &fb);
    ck_assert_int_eq(lt_count(fb), 1);
    /* later arrivals do not wait on the late call */
    ck_assert_int_eq(lt_decide(t, "k", &lt_pbig, now + 150 * MS, 1, &r, &next), LEASE_DOWN);
    ck_assert_ptr_null(next);
    uint64_t retry = 1;
    ck_assert_int_eq(lease_fallback_check(t, "k", 1, 1, now + 150 * MS, &retry), 1); /* unknown */
    ck_assert_uint_eq(retry, 0);
    ck_assert_uint_eq(lease_fallback_note(t, "k", 1, 3, 0, &repaid), 3);
    ck_assert_uint_eq(lease_fallback_note(t, "nokey", 5, 3, 0, &repaid), 0); /* no entry */
    lt_reply(t, j, (const int64_t[8]){5, 995, 5, 1, 0, 5, 1000, 5}, now + 300 * MS, &done, &fb,
             &next);
    ck_assert_ptr_null(next);
    ck_assert_uint_eq(atomic_load(&repaid), 3);
    ck_assert_int_eq(lease_peek(t, "k", 1, now + 300 * MS, &st), 1);
    ck_assert_uint_eq(st.tokens, 2);
    ck_assert_uint_eq(st.unreported, 3);
    for (int i = 0; i < 2; i++)
        ck_assert_int_eq(lt_decide(t, "k", &lt_pbig, now + 310 * MS, 1, &r, &next), LEASE_DONE);
    ck_assert_int_eq(lt_decide(t, "k", &lt_pbig, now + 320 * MS, 1, &r, &j), LEASE_PENDING);
    ck_assert_ptr_nonnull(j);
    ck_assert_uint_eq(j->used, 5);
    lt_reply(t, j, (const int64_t[8]){0, 0, 0, 0, 1, 0, 0, 0}, now + 330 * MS, &done, &fb, &next);
    lease_table_free(t);
}
END_TEST

/* A debt over burst is kept at burst (the floor), and paid from as many
 * grants as it takes; each paid token is counted once. */
START_TEST(debt_paid_over_grants_up_to_burst)
{
    struct lease_table *t = lease_table_new(&lt_cfg, 4);
    struct lease_job *j, *next;
    struct lease_waiter *done = NULL, *fb = NULL;
    struct lease_state st;
    struct lt_req r;
    atomic_uint_fast64_t repaid = 0;
    uint64_t now = 10 * S;

    ck_assert_int_eq(lt_decide(t, "k", &lt_p10, now, 1, &r, &j), LEASE_PENDING);
    j->sent_us = now;
    lease_timeout(t, j, &fb);
    ck_assert_uint_eq(lease_fallback_note(t, "k", 1, 2, 1, &repaid), 1);   /* at most cap */
    ck_assert_uint_eq(lease_fallback_note(t, "k", 1, 15, 0, &repaid), 10); /* burst 10 */
    ck_assert_uint_eq(lease_fallback_note(t, "k", 1, 1, 0, &repaid), 10);
    /* a grant of 4: all of it pays */
    lt_reply(t, j, (const int64_t[8]){4, 0, 4, 1, 6000, 6000, 1000, 4}, now + 200 * MS, &done, &fb,
             &next);
    ck_assert_uint_eq(atomic_load(&repaid), 4);
    ck_assert_int_eq(lease_peek(t, "k", 1, now + 200 * MS, &st), 1);
    ck_assert_uint_eq(st.tokens, 0);
    /* the next request claims (in time): 6 of its 8 pay, 1 serves it, 1 is left */
    ck_assert_int_eq(lt_decide(t, "k", &lt_p10, now + 300 * MS, 1, &r, &j), LEASE_PENDING);
    ck_assert_ptr_nonnull(j);
    ck_assert_uint_eq(j->used, 4);
    j->sent_us = now + 300 * MS;
    lt_reply(t, j, (const int64_t[8]){8, 0, 8, 1, 0, 0, 1000, 8}, now + 301 * MS, &done, &fb,
             &next);
    ck_assert_int_eq(lt_count(done), 1);
    ck_assert(r.res.allowed);
    ck_assert_uint_eq(atomic_load(&repaid), 10);
    ck_assert_int_eq(lease_peek(t, "k", 1, now + 301 * MS, &st), 1);
    ck_assert_uint_eq(st.tokens, 1);
    ck_assert_uint_eq(st.unreported, 7);
    lease_table_free(t);
}
END_TEST

/* The backstop starts from the key's last known level: a key Redis showed
 * empty stays exhausted until its rate brings a token, and what the backstop
 * admits is spent from that view too. */
START_TEST(backstop_starts_from_what_was_known)
{
    struct lease_table *t = lease_table_new(&lt_cfg, 4);
    struct lease_job *j, *next;
    struct lease_waiter *done = NULL, *fb = NULL;
    struct lt_req r;
    atomic_uint_fast64_t repaid = 0;
    uint64_t now = 10 * S, retry = 0;

    /* 10/1m: one token per 6 s; Redis says the bucket is empty */
    ck_assert_int_eq(lt_decide(t, "k", &lt_p10, now, 1, &r, &j), LEASE_PENDING);
    j->sent_us = now;
    lt_reply(t, j, (const int64_t[8]){0, 0, 0, 0, 6000, 60000, 0, 0}, now + 1 * MS, &done, &fb,
             &next);
    ck_assert(!r.res.allowed);
    ck_assert_int_eq(lease_fallback_check(t, "k", 1, 1, now + 1 * S, &retry), 0);
    ck_assert_uint_ge(retry, 4 * S);
    ck_assert_uint_le(retry, 5 * S + 1 * MS); /* from the reply, 1 ms in */
    /* a token due by 6 s: one, then none */
    ck_assert_int_eq(lease_fallback_check(t, "k", 1, 1, now + 6100 * MS, &retry), 1);
    ck_assert_uint_eq(lease_fallback_note(t, "k", 1, 1, 0, &repaid), 1);
    ck_assert_int_eq(lease_fallback_check(t, "k", 1, 1, now + 6200 * MS, &retry), 0);
    ck_assert_int_eq(lease_fallback_check(t, "k", 1, 0, now + 6200 * MS, &retry), 0); /* check */
    /* never a lock-out: the view refills at the rule's rate */
    ck_assert_int_eq(lease_fallback_check(t, "k", 1, 1, now + 13 * S, &retry), 1);
    /* a key with no entry, or one Redis never answered: the backstop alone */
    ck_assert_int_eq(lease_fallback_check(t, "other", 5, 1, now, &retry), 1);
    lease_table_free(t);
}
END_TEST

/* A cold key's exact call times out and the backstop admits its request;
 * Redis, late, allowed it too: its token pays for that one. */
START_TEST(late_exact_pays_one)
{
    static const struct lease_config cfg_exact = {100 * MS, 1 * S, 0.1, 0, 1, 0};
    struct lease_table *t = lease_table_new(&cfg_exact, 4);
    struct lease_job *j, *next = NULL;
    struct lease_waiter *done = NULL, *fb = NULL;
    struct lt_req r;
    atomic_uint_fast64_t repaid = 0;
    uint64_t now = 10 * S;

    ck_assert_int_eq(lt_decide(t, "k", &lt_pbig, now, 1, &r, &j), LEASE_PENDING);
    ck_assert_uint_eq(j->kind, LEASE_JOB_EXACT);
    j->sent_us = now;
    lease_timeout(t, j, &fb);
    ck_assert_int_eq(lt_count(fb), 1);
    ck_assert_uint_eq(lease_fallback_note(t, "k", 1, 2, 0, &repaid), 2);
    int64_t v[EXACT_R_COUNT] = {
        [EXACT_R_ALLOWED] = 1, [EXACT_R_REMAINING] = 999, [EXACT_R_RESET_MS] = 1};
    fb = NULL;
    lease_reply(t, j, 1, v, EXACT_R_COUNT, now + 300 * MS, &done, &fb, &next);
    ck_assert_int_eq(lt_count(done), 0);
    ck_assert_int_eq(lt_count(fb), 0);
    ck_assert_uint_eq(atomic_load(&repaid), 1);
    /* one still owed: the next note adds to it */
    ck_assert_uint_eq(lease_fallback_note(t, "k", 1, 1, 0, &repaid), 2);
    lease_table_free(t);

    /* an exact call answered in time while the key owes: Redis' token pays,
     * and its request is denied (for a millisecond: Redis had more) */
    t = lease_table_new(&cfg_exact, 4);
    repaid = 0;
    done = NULL;
    ck_assert_int_eq(lt_decide(t, "k", &lt_pbig, now, 1, &r, &j), LEASE_PENDING);
    ck_assert_uint_eq(j->kind, LEASE_JOB_EXACT);
    j->sent_us = now;
    ck_assert_uint_eq(lease_fallback_note(t, "k", 1, 1, 0, &repaid), 1);
    lease_reply(t, j, 1, v, EXACT_R_COUNT, now + MS, &done, &fb, &next);
    ck_assert_int_eq(lt_count(done), 1);
    ck_assert(!r.res.allowed);
    ck_assert_uint_eq(atomic_load(&repaid), 1);
    /* paid off */
    ck_assert_uint_eq(lease_fallback_note(t, "k", 1, 0, 0, &repaid), 0);
    lease_table_free(t);
}
END_TEST

/* The cap the caller passes holds, above the key's burst too (the agent
 * passes share x (b + r x 1 s), so that a stall under a second is repaid
 * whole); 0 means the burst. */
START_TEST(debt_cap_is_the_callers)
{
    struct lease_table *t = lease_table_new(&lt_cfg, 4);
    struct lease_job *j, *next;
    struct lease_waiter *done = NULL, *fb = NULL;
    struct lt_req r;
    atomic_uint_fast64_t repaid = 0;
    uint64_t now = 10 * S;

    ck_assert_int_eq(lt_decide(t, "k", &lt_p10, now, 1, &r, &j), LEASE_PENDING);
    j->sent_us = now;
    lease_timeout(t, j, &fb);
    ck_assert_uint_eq(lease_fallback_note(t, "k", 1, 12, 14, &repaid), 12);   /* over b = 10 */
    ck_assert_uint_eq(lease_fallback_note(t, "k", 1, 5, 14, &repaid), 14);    /* at the cap */
    ck_assert_uint_eq(lease_fallback_note(t, "k", 1, 5, 0, &repaid), 14);     /* 0: b, none added */
    ck_assert_uint_eq(lease_fallback_note(t, "nokey", 5, 5, 14, &repaid), 0); /* no entry */
    /* the late reply frees the call (a job in flight is its caller's) */
    lt_reply(t, j, (const int64_t[8]){0, 0, 0, 0, 1, 0, 0, 0}, now + 300 * MS, &done, &fb, &next);
    lease_table_free(t);
}
END_TEST

int main(void)
{
    TCase *tc = tcase_create("core");

    CHECK_ADD(tc, late_reply_pays_the_backstop, debt_paid_over_grants_up_to_burst,
              backstop_starts_from_what_was_known, late_exact_pays_one, debt_cap_is_the_callers);
    return check_run_case("lease_repay", tc);
}
