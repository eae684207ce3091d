/* SPDX-License-Identifier: Apache-2.0 */
/* test_lease_claim.c - the lease cache's claims, with a fake clock and
 * hand-written Redis replies: a claim then local decisions, prefetch before
 * a lease runs dry, blocked keys, the reply's deadline and share as the
 * truth, the negative cache, peek and forget, follow-up claims. */
#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check_util.h"
#include "lease/lease.h"
#include "lease_fixture.h"
#include "metrics/metrics.h"

START_TEST(claim_then_local)
{
    struct lease_table *t = lease_table_new(&lt_cfg, 4);
    struct lease_job *j, *next;
    struct lease_waiter *done, *fb;
    struct lt_req r[3];

    ck_assert_int_eq(lt_decide(t, "k", &lt_pbig, 10 * S, 1, &r[0], &j), LEASE_PENDING);
    ck_assert_ptr_nonnull(j);
    ck_assert_uint_eq(j->kind, LEASE_JOB_CLAIM);
    ck_assert_uint_eq(j->want, 1);
    ck_assert_uint_eq(j->used, 0);
    /* arrivals during the claim wait on it: no second claim */
    ck_assert_int_eq(lt_decide(t, "k", &lt_pbig, 10 * S + 10, 1, &r[1], &next), LEASE_PENDING);
    ck_assert_ptr_null(next);
    j->sent_us = 10 * S;
    const int64_t v[8] = {5, 995, 5, 1, 0, 5, 1000, 5};
    lt_reply(t, j, v, 10 * S + 200, &done, &fb, &next);
    ck_assert_int_eq(lt_count(done), 2);
    ck_assert_int_eq(lt_count(fb), 0);
    ck_assert_ptr_null(next);
    ck_assert(r[0].res.allowed && r[1].res.allowed);
    /* three left locally, spent without Redis */
    for (int i = 0; i < 3; i++) {
        ck_assert_int_eq(lt_decide(t, "k", &lt_pbig, 10 * S + 300, 1, &r[2], &next), LEASE_DONE);
        ck_assert(r[2].res.allowed);
        ck_assert_ptr_null(next);
    }
    /* empty again: the next claim carries the report of the 5 spent */
    ck_assert_int_eq(lt_decide(t, "k", &lt_pbig, 10 * S + 400, 1, &r[2], &j), LEASE_PENDING);
    ck_assert_ptr_nonnull(j);
    ck_assert_uint_eq(j->used, 5);
    ck_assert_uint_ge(j->want, 1);
    ck_assert_uint_le(j->want, 100); /* max_fraction x burst */
    lt_reply(t, j, (const int64_t[8]){0, 0, 0, 0, 1, 0, 0, 0}, 10 * S + 500, &done, &fb, &next);
    lease_table_free(t);
}
END_TEST

/* [agent] charge = all-or-nothing: a spend not reported yet goes back to
 * the lease (spent again locally, the next report n less); one a claim
 * already reported, one of an ended lease, and one of an unknown key do not
 * (the caller may refund them in Redis); never more than the lease had. */
START_TEST(refund_to_the_lease)
{
    struct lease_table *t = lease_table_new(&lt_cfg, 4);
    struct lease_job *j, *next;
    struct lease_waiter *done, *fb;
    struct lt_req r;
    struct bucket_result res;
    int redis;

    ck_assert_int_eq(lt_decide(t, "k", &lt_pbig, 10 * S, 1, &r, &j), LEASE_PENDING);
    j->sent_us = 10 * S;
    lt_reply(t, j, (const int64_t[8]){5, 995, 5, 1, 0, 5, 1000, 5}, 10 * S + 100, &done, &fb,
             &next);
    ck_assert(r.res.allowed); /* 4 left, 1 unreported */
    ck_assert_int_eq(lt_decide(t, "k", &lt_pbig, 10 * S + 200, 1, &r, &next), LEASE_DONE);
    ck_assert_uint_eq(lease_refund(t, "k", 1, 1, 10 * S + 200, &res, &redis), 1);
    ck_assert_int_eq(redis, 0);
    ck_assert(res.allowed);
    struct lease_state st;
    ck_assert_int_eq(lease_peek(t, "k", 1, 10 * S + 200, &st), 1);
    ck_assert_uint_eq(st.tokens, 4);
    ck_assert_uint_eq(st.unreported, 1);
    /* no more than spent and unreported */
    ck_assert_uint_eq(lease_refund(t, "k", 1, 2, 10 * S + 200, &res, &redis), 0);
    ck_assert_int_eq(redis, 1); /* a token bucket: Redis may take it back */
    /* an unknown key: nothing here */
    ck_assert_uint_eq(lease_refund(t, "other", 5, 1, 10 * S + 200, &res, &redis), 0);
    ck_assert_int_eq(redis, 1);
    /* once the lease ended, nothing goes back to it */
    ck_assert_uint_eq(lease_refund(t, "k", 1, 1, 12 * S, &res, &redis), 0);
    lease_table_free(t);
}
END_TEST

/* A busy token lease that runs low is topped up before it runs dry (one
 * claim in flight, carrying the report), so that no request of a key whose
 * demand grows waits for Redis; a lease that lasts, a cold key and a Redis
 * that is down make no such claim. */
START_TEST(prefetch_tops_up_before_dry)
{
    const struct lease_config pf = {100 * MS, 1 * S, 0.1, 0, 0, 1};
    struct lease_table *t = lease_table_new(&pf, 4);
    struct lease_job *j, *next;
    struct lease_waiter *done, *fb;
    struct lt_req r;
    uint64_t now = 10 * S;

    ck_assert_int_eq(lt_decide(t, "k", &lt_pbig, now, 1, &r, &j), LEASE_PENDING);
    j->sent_us = now;
    lt_reply(t, j, (const int64_t[8]){8, 900, 8, 1, 0, 1, 1000, 8}, now + 100, &done, &fb, &next);
    ck_assert_int_eq(lt_count(done), 1); /* hit 1: 7 tokens left */
    /* hits 2..5 leave 6, 5, 4, 3 tokens: at least half of the hits so far */
    for (int i = 2; i <= 5; i++) {
        ck_assert_int_eq(lt_decide(t, "k", &lt_pbig, now + 200, 1, &r, &next), LEASE_DONE);
        ck_assert(r.res.allowed);
        ck_assert_ptr_null(next);
    }
    /* hit 6 leaves 2, below 6 / 2: a claim goes now, with the 6 spent */
    ck_assert_int_eq(lt_decide(t, "k", &lt_pbig, now + 300, 1, &r, &j), LEASE_DONE);
    ck_assert(r.res.allowed);
    ck_assert_ptr_nonnull(j);
    ck_assert_uint_eq(j->kind, LEASE_JOB_CLAIM);
    ck_assert_uint_eq(j->used, 6);
    ck_assert_uint_ge(j->want, 2 * 6 - 2); /* two intervals at the pace seen */
    j->sent_us = now + 300;
    /* the two left are spent meanwhile, with no second claim */
    for (int i = 0; i < 2; i++) {
        ck_assert_int_eq(lt_decide(t, "k", &lt_pbig, now + 400, 1, &r, &next), LEASE_DONE);
        ck_assert(r.res.allowed);
        ck_assert_ptr_null(next);
    }
    /* Redis now counts 2 + 20 held: 20 left after the 2 spent meanwhile */
    lt_reply(t, j, (const int64_t[8]){20, 800, 22, 1, 0, 1, 1000, 22}, now + 500, &done, &fb,
             &next);
    ck_assert_int_eq(lt_count(done), 0);
    ck_assert_ptr_null(next);
    int local = 0;
    for (int i = 0; i < 20; i++) {
        int v = lt_decide(t, "k", &lt_pbig, now + 600, 1, &r, &next);
        ck_assert_int_eq(v, LEASE_DONE);
        local++;
        if (next)
            break; /* the next top-up, never a wait */
    }
    ck_assert_ptr_nonnull(next);
    ck_assert_int_lt(local, 20);
    lease_reply(t, next, 0, NULL, 0, now + 700, &done, &fb, &j); /* failed: voided */
    ck_assert_int_eq(lt_decide(t, "k", &lt_pbig, now + 800, 1, &r, &j), LEASE_PENDING);
    lease_reply(t, j, 0, NULL, 0, now + 900, &done, &fb, &next);
    lease_table_free(t);

    /* Redis said its bucket is empty: no top-up claim, it would get nothing */
    t = lease_table_new(&pf, 4);
    lt_decide(t, "k", &lt_pbig, now, 1, &r, &j);
    j->sent_us = now;
    lt_reply(t, j, (const int64_t[8]){8, 0, 8, 1, 0, 1, 1000, 8}, now + 100, &done, &fb, &next);
    for (int i = 0; i < 7; i++) {
        ck_assert_int_eq(lt_decide(t, "k", &lt_pbig, now + 100, 1, &r, &next), LEASE_DONE);
        ck_assert(r.res.allowed);
        ck_assert_ptr_null(next);
    }
    lease_table_free(t);

    /* a lease that lasts at the pace seen: no claim before the tick */
    t = lease_table_new(&pf, 4);
    lt_decide(t, "k", &lt_pbig, now, 1, &r, &j);
    j->sent_us = now;
    lt_reply(t, j, (const int64_t[8]){100, 800, 100, 1, 0, 1, 1000, 100}, now + 100, &done, &fb,
             &next);
    for (int i = 0; i < 60; i++) {
        ck_assert_int_eq(lt_decide(t, "k", &lt_pbig, now + 200, 1, &r, &next), LEASE_DONE);
        ck_assert_ptr_null(next);
    }
    /* Redis down: spend what is held, claim nothing */
    for (int i = 0; i < 39; i++) {
        ck_assert_int_eq(lt_decide(t, "k", &lt_pbig, now + 300, 0, &r, &next), LEASE_DONE);
        ck_assert(r.res.allowed);
        ck_assert_ptr_null(next);
    }
    lease_table_free(t);
}
END_TEST

/* A key out of tokens is probed once its next tokens are due: one for a
 * rule that brings less than two per interval, about an interval's worth
 * (at most max_fraction x burst) for a faster one, which the probe's claim
 * then takes in one call. */
START_TEST(blocked_until_an_intervals_worth)
{
    /* 100/1s burst 50 */
    const struct bucket_params p100 = {0, 100, 1 * S, 50, 0, 0, 1 * 1000, 0, 0, 0};
    struct lease_table *t = lease_table_new(&lt_cfg, 4);
    struct lease_job *j, *next;
    struct lease_waiter *done, *fb;
    struct lt_req r;

    /* 10/1m: the next token, 6 s away, is the wait */
    lt_decide(t, "slow", &lt_p10, 10 * S, 1, &r, &j);
    j->sent_us = 10 * S;
    lt_reply(t, j, (const int64_t[8]){0, 0, 0, 0, 6000, 6000, 0, 0}, 10 * S + 100, &done, &fb,
             &next);
    ck_assert_int_eq(lt_count(done), 1);
    ck_assert(!r.res.allowed);
    ck_assert_uint_eq(r.res.retry_us, 6000 * MS);
    /* 100/1s: 10 tokens an interval, capped at 0.1 x 50 = 5: the next token's
     * 10 ms and 4 more at 10 ms each */
    lt_decide(t, "fast", &p100, 10 * S, 1, &r, &j);
    j->sent_us = 10 * S;
    lt_reply(t, j, (const int64_t[8]){0, 0, 0, 0, 10, 10, 0, 0}, 10 * S + 100, &done, &fb, &next);
    ck_assert(!r.res.allowed);
    ck_assert_uint_eq(r.res.retry_us, 50 * MS);
    ck_assert_int_eq(lt_decide(t, "fast", &p100, 10 * S + 40 * MS, 1, &r, &j), LEASE_DONE);
    ck_assert(!r.res.allowed); /* cached: no call */
    ck_assert_ptr_null(j);
    /* then one claim, which may take the five */
    ck_assert_int_eq(lt_decide(t, "fast", &p100, 10 * S + 51 * MS, 1, &r, &j), LEASE_PENDING);
    ck_assert_ptr_nonnull(j);
    ck_assert_uint_eq(j->kind, LEASE_JOB_CLAIM);
    ck_assert_uint_le(j->want, 5);
    lease_reply(t, j, 0, NULL, 0, 10 * S + 52 * MS, &done, &fb, &next);
    lease_table_free(t);
}
END_TEST

START_TEST(deadline_and_mine_are_authoritative)
{
    struct lease_table *t = lease_table_new(&lt_cfg, 4);
    struct lease_job *j, *next;
    struct lease_waiter *done, *fb;
    struct lt_req r;

    lt_decide(t, "k", &lt_pbig, 0, 1, &r, &j);
    j->sent_us = 0;
    /* granted 10 but Redis says we hold 4 (an older lease had expired there) */
    lt_reply(t, j, (const int64_t[8]){10, 900, 4, 1, 0, 1, 1000, 4}, 1000, &done, &fb, &next);
    int allowed = 1; /* the waiter */
    for (int i = 0; i < 10; i++)
        if (lt_decide(t, "k", &lt_pbig, 2000, 1, &r, &next) == LEASE_DONE && r.res.allowed)
            allowed++;
        else if (next)
            break;
    ck_assert_int_eq(allowed, 4);
    ck_assert_ptr_nonnull(next);
    lease_reply(t, next, 0, NULL, 0, 3000, &done, &fb, &j);
    lease_table_free(t);

    /* past the local deadline (sent + lease_ms - margin) nothing is spent */
    t = lease_table_new(&lt_cfg, 4);
    lt_decide(t, "k", &lt_pbig, 0, 1, &r, &j);
    j->sent_us = 0;
    lt_reply(t, j, (const int64_t[8]){50, 900, 50, 1, 0, 1, 1000, 50}, 1000, &done, &fb, &next);
    ck_assert_int_eq(lt_decide(t, "k", &lt_pbig, 940 * MS, 1, &r, &next), LEASE_DONE);
    ck_assert_int_eq(lt_decide(t, "k", &lt_pbig, 960 * MS, 1, &r, &j), LEASE_PENDING);
    ck_assert_ptr_nonnull(j);
    lease_reply(t, j, 0, NULL, 0, 970 * MS, &done, &fb, &next);
    lease_table_free(t);
}
END_TEST

START_TEST(negative_cache)
{
    struct lease_table *t = lease_table_new(&lt_cfg, 4);
    struct lease_job *j, *next;
    struct lease_waiter *done, *fb;
    struct lt_req r[2];

    lt_decide(t, "k", &lt_p10, 0, 1, &r[0], &j);
    lt_decide(t, "k", &lt_p10, 1, 1, &r[1], &next);
    j->sent_us = 0;
    /* empty: next token in 6 s */
    lt_reply(t, j, (const int64_t[8]){0, 0, 0, 0, 6000, 60000, 0, 0}, 1000, &done, &fb, &next);
    ck_assert_int_eq(lt_count(done), 2);
    ck_assert_ptr_null(next);
    ck_assert(!r[0].res.allowed && !r[1].res.allowed);
    ck_assert_uint_eq(r[0].res.retry_us, 6 * S);
    ck_assert_uint_eq(r[0].res.remaining, 0);
    /* remembered: blocked locally until then, no Redis call */
    ck_assert_int_eq(lt_decide(t, "k", &lt_p10, 3 * S + 1000, 1, &r[0], &next), LEASE_DONE);
    ck_assert_ptr_null(next);
    ck_assert(!r[0].res.allowed);
    ck_assert_uint_eq(r[0].res.retry_us, 3 * S);
    /* a cost of 3: one token in 3 s, two more 6 s each later */
    ck_assert_int_eq(
        lease_decide_cost(t, "k", 1, &lt_p10, 3, 3 * S + 1000, 1, &r[0].w, &r[0].res, &next),
        LEASE_DONE);
    ck_assert(!r[0].res.allowed);
    ck_assert_uint_eq(r[0].res.retry_us, 15 * S);
    ck_assert_uint_ge(r[0].res.reset_us, 15 * S);
    /* then one probe claim */
    ck_assert_int_eq(lt_decide(t, "k", &lt_p10, 6 * S + 1000, 1, &r[0], &j), LEASE_PENDING);
    ck_assert_ptr_nonnull(j);
    j->sent_us = 6 * S + 1000;
    lt_reply(t, j, (const int64_t[8]){1, 0, 1, 1, 6000, 60000, 1000, 1}, 6 * S + 2000, &done, &fb,
             &next);
    ck_assert(r[0].res.allowed);
    lease_table_free(t);
}
END_TEST

/* GET /key and POST /reset: peek shows the lease and the negative cache;
 * after a reset in Redis, forget clears the negative cache and keeps the
 * lease (its tokens stay counted held in Redis). */
START_TEST(peek_and_forget)
{
    struct lease_table *t = lease_table_new(&lt_cfg, 4);
    struct lease_job *j, *next;
    struct lease_waiter *done, *fb;
    struct lease_state st;
    struct lt_req r;

    ck_assert_int_eq(lease_peek(t, "k", 1, 0, &st), 0);
    ck_assert_int_eq(lease_forget(t, "k", 1, 0, 10, 0, 0), 0);
    lt_decide(t, "k", &lt_p10, 0, 1, &r, &j);
    ck_assert_int_eq(lease_peek(t, "k", 1, 10, &st), 1);
    ck_assert_int_eq(st.inflight, LEASE_JOB_CLAIM);
    ck_assert_uint_eq(st.waiting, 1);
    ck_assert_int_eq(st.known, 0);
    j->sent_us = 0;
    /* granted 3 of what is left; another agent holds 2 */
    lt_reply(t, j, (const int64_t[8]){3, 0, 5, 2, 6000, 60000, 1000, 3}, 1000, &done, &fb, &next);
    lt_decide(t, "k", &lt_p10, 2000, 1, &r, &next);
    ck_assert_int_eq(lease_peek(t, "k", 1, 3000, &st), 1);
    ck_assert_uint_eq(st.tokens, 1); /* 3 granted, 2 spent */
    ck_assert_uint_eq(st.unreported, 2);
    ck_assert_uint_eq(st.lease_left_us, 1 * S - 3000 - 50 * MS); /* sent + ttl - margin */
    ck_assert_int_eq(st.inflight, -1);
    ck_assert_int_eq(st.known, 1);
    ck_assert_uint_eq(st.others_held, 2);
    ck_assert_uint_eq(st.others, 1);
    /* a reset meanwhile (t = 10 - 5 held, 3 of them ours): the lease runs on */
    ck_assert_int_eq(lease_forget(t, "k", 1, 3000, 5, 5, 2), 1);
    ck_assert_int_eq(lease_peek(t, "k", 1, 3000, &st), 1);
    ck_assert_uint_eq(st.tokens, 1);
    ck_assert_uint_eq(st.unreported, 2);
    ck_assert_uint_eq(st.others_held, 2);
    ck_assert_uint_eq(st.others, 1);
    lt_decide(t, "k", &lt_p10, 4000, 1, &r, &next); /* the last one */
    ck_assert(r.res.allowed);
    ck_assert_int_eq(lt_decide(t, "k", &lt_p10, 5000, 1, &r, &j), LEASE_PENDING);
    j->sent_us = 5000;
    ck_assert_uint_eq(j->used, 3);
    /* the 3 reported spent; nothing left: the other agent holds 2 */
    lt_reply(t, j, (const int64_t[8]){0, 0, 2, 1, 6000, 60000, 0, 0}, 6000, &done, &fb, &next);
    ck_assert(!r.res.allowed);
    ck_assert_int_eq(lease_peek(t, "k", 1, 7000, &st), 1);
    ck_assert_uint_eq(st.blocked_left_us, 6 * S - 1000);

    /* reset in Redis: t = 10 - 2 held by the other agent */
    ck_assert_int_eq(lease_forget(t, "k", 1, 8000, 8, 2, 1), 1);
    ck_assert_int_eq(lease_peek(t, "k", 1, 8000, &st), 1);
    ck_assert_uint_eq(st.blocked_left_us, 0);
    ck_assert(st.bucket_tokens == 8);
    ck_assert_uint_eq(st.others_held, 2);
    ck_assert_uint_eq(st.others, 1);
    /* no longer blocked locally: the next decision asks Redis */
    ck_assert_int_eq(lt_decide(t, "k", &lt_p10, 9000, 1, &r, &j), LEASE_PENDING);
    ck_assert_ptr_nonnull(j);
    lease_reply(t, j, 0, NULL, 0, 10000, &done, &fb, &next);
    lease_table_free(t);
}
END_TEST

START_TEST(follow_up_claim_for_uncovered_waiters)
{
    struct lease_table *t = lease_table_new(&lt_cfg, 4);
    struct lease_job *j, *next;
    struct lease_waiter *done, *fb;
    struct lt_req r[5];

    lt_decide(t, "k", &lt_pbig, 0, 1, &r[0], &j);
    for (int i = 1; i < 5; i++)
        lt_decide(t, "k", &lt_pbig, 1, 1, &r[i], &next);
    j->sent_us = 0;
    lt_reply(t, j, (const int64_t[8]){1, 500, 1, 1, 0, 1, 1000, 1}, 100, &done, &fb, &next);
    ck_assert_int_eq(lt_count(done), 1);
    ck_assert_ptr_nonnull(next);      /* Redis has tokens: ask again */
    ck_assert_uint_ge(next->want, 4); /* for the four still waiting */
    ck_assert_uint_eq(next->used, 1);
    next->sent_us = 100;
    struct lease_job *n2;
    lt_reply(t, next, (const int64_t[8]){4, 496, 4, 1, 0, 1, 1000, 4}, 200, &done, &fb, &n2);
    ck_assert_int_eq(lt_count(done), 4);
    ck_assert_ptr_null(n2);
    lease_table_free(t);
}
END_TEST

/* A cost is spent from the lease at once when it holds it; a larger one
 * (or a check it cannot answer) is LEASE_EXACT, spending nothing here; with
 * Redis down, the fallback. The report counts the tokens, not requests. */
START_TEST(cost_from_the_lease)
{
    struct lease_table *t = lease_table_new(&lt_cfg, 4);
    struct lease_job *j = NULL, *next = NULL;
    struct lease_waiter *done, *fb;
    struct lease_state st;
    struct lt_req r[2];
    uint64_t now = 10 * S;

    ck_assert_int_eq(lt_decide(t, "k", &lt_pbig, now, 1, &r[0], &j), LEASE_PENDING);
    j->sent_us = now;
    lt_reply(t, j, (const int64_t[8]){6, 994, 6, 1, 0, 6, 1000, 6}, now + 100, &done, &fb, &next);
    ck_assert(r[0].res.allowed); /* 5 left here */
    now += 200;
    ck_assert_int_eq(lease_decide_cost(t, "k", 1, &lt_pbig, 4, now, 1, &r[1].w, &r[1].res, &next),
                     LEASE_DONE);
    ck_assert(r[1].res.allowed);
    ck_assert_int_eq(lease_peek(t, "k", 1, now, &st), 1);
    ck_assert_uint_eq(st.tokens, 1);
    ck_assert_int_eq(lease_decide_cost(t, "k", 1, &lt_pbig, 2, now, 1, &r[1].w, &r[1].res, &next),
                     LEASE_EXACT);
    ck_assert_ptr_null(next);
    ck_assert_int_eq(lease_decide_cost(t, "k", 1, &lt_pbig, 2, now, 0, &r[1].w, &r[1].res, &next),
                     LEASE_DOWN);
    ck_assert_int_eq(lease_decide_cost(t, "k", 1, &lt_pbig, 0, now, 1, &r[1].w, &r[1].res, &next),
                     LEASE_DONE); /* a check: one is there, none is taken */
    ck_assert(r[1].res.allowed);
    ck_assert_int_eq(lease_peek(t, "k", 1, now, &st), 1);
    ck_assert_uint_eq(st.tokens, 1);
    ck_assert_uint_eq(st.unreported, 5); /* the first request and the cost of 4 */
    ck_assert_int_eq(lt_decide(t, "k", &lt_pbig, now, 1, &r[1], &next), LEASE_DONE);
    ck_assert_int_eq(lease_decide_cost(t, "k", 1, &lt_pbig, 0, now, 1, &r[1].w, &r[1].res, &next),
                     LEASE_EXACT); /* empty: the check asks Redis */
    /* the next claim reports the 6 tokens spent (1 + 4 + 1), not 3 requests */
    ck_assert_int_eq(lt_decide(t, "k", &lt_pbig, now, 1, &r[1], &j), LEASE_PENDING);
    ck_assert_ptr_nonnull(j);
    ck_assert_uint_eq(j->used, 6);
    lt_reply(t, j, (const int64_t[8]){0, 0, 0, 0, 1, 0, 0, 0}, now + 100, &done, &fb, &next);
    lease_table_free(t);
}
END_TEST

/* Redis lost the buckets (lease_void_all): a lease held here is spent no
 * more and never given back; the next claim reports all of it spent (the
 * scripts cap that at what the new bucket counts held: nothing). */
START_TEST(void_all_after_a_loss)
{
    struct lease_table *t = lease_table_new(&lt_cfg, 4);
    struct lease_job *j, *next, *jobs = NULL;
    struct lease_waiter *done, *fb;
    struct lease_state st;
    struct lt_req r;
    uint64_t now = 10 * S;

    ck_assert_uint_eq(lease_void_all(t), 0); /* nothing held: nothing to do */
    ck_assert_int_eq(lt_decide(t, "k", &lt_pbig, now, 1, &r, &j), LEASE_PENDING);
    j->sent_us = now;
    lt_reply(t, j, (const int64_t[8]){5, 995, 5, 1, 0, 5, 1000, 5}, now + 1 * MS, &done, &fb,
             &next);
    ck_assert_int_eq(lt_decide(t, "k", &lt_pbig, now + 2 * MS, 1, &r, &next), LEASE_DONE);
    ck_assert_int_eq(lease_peek(t, "k", 1, now + 2 * MS, &st), 1);
    ck_assert_uint_eq(st.tokens, 3);
    ck_assert_uint_eq(lease_void_all(t), 1);
    ck_assert_int_eq(lease_peek(t, "k", 1, now + 3 * MS, &st), 1);
    ck_assert_uint_eq(st.tokens, 0);
    ck_assert_int_eq(st.voided, 1);
    /* the tick gives nothing back */
    lease_tick(t, now + 100 * MS, 1, &jobs);
    for (struct lease_job *x = jobs; x; x = x->next)
        ck_assert_int_ne(x->kind, LEASE_JOB_RETURN);
    while (jobs) {
        struct lease_job *x = jobs;
        jobs = x->next;
        lt_reply(t, x, (const int64_t[8]){0, 0, 0, 0, 1, 0, 0, 0}, now + 101 * MS, &done, &fb,
                 &next);
        ck_assert_ptr_null(next);
    }
    lease_table_free(t);
}
END_TEST

int main(void)
{
    TCase *tc = tcase_create("core");

    CHECK_ADD(tc, claim_then_local, refund_to_the_lease, prefetch_tops_up_before_dry,
              blocked_until_an_intervals_worth, deadline_and_mine_are_authoritative, negative_cache,
              peek_and_forget, follow_up_claim_for_uncovered_waiters, cost_from_the_lease,
              void_all_after_a_loss);
    return check_run_case("lease_claim", tc);
}
