/* SPDX-License-Identifier: Apache-2.0 */
/* test_lease_exact.c - a cold key's claim as an exact call (exact_cold: the
 * agent's way), with a fake clock and hand-written Redis replies: a cold key
 * goes exact, a denial is cached, failures and arrivals meanwhile, a blocked
 * key's retry keeps the cap. */
#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check_util.h"
#include "lease/lease.h"
#include "lease_fixture.h"
#include "metrics/metrics.h"

static const struct lease_config cfg_exact = {100 * MS, 1 * S, 0.1, 0, 1, 0};

static void exact_reply(struct lease_table *t, struct lease_job *j, int ok, int64_t allowed,
                        int64_t remaining, int64_t retry_ms, uint64_t now,
                        struct lease_waiter **done, struct lease_waiter **fb,
                        struct lease_job **next)
{
    int64_t v[EXACT_R_COUNT] = {[EXACT_R_ALLOWED] = allowed,
                                [EXACT_R_REMAINING] = remaining,
                                [EXACT_R_RETRY_MS] = retry_ms,
                                [EXACT_R_RESET_MS] = 3000};
    *done = *fb = NULL;
    *next = NULL;
    lease_reply(t, j, ok, ok ? v : NULL, ok ? EXACT_R_COUNT : 0, now, done, fb, next);
}

/* A retry_ms at or past the cap (a reply may say any integer) stays at the
 * cap once the interval's worth is added: the answer's retry and the cached
 * block never pass BUCKET_MAX_PERIOD_US (fuzz_reply found 2^53 + 90 ms). */
START_TEST(blocked_retry_keeps_the_cap)
{
    /* 5 tokens added a block */
    const struct bucket_params p100 = {0, 100, 1 * S, 50, 0, 0, 1 * 1000, 0, 0, 0};
    static const int64_t retries[] = {9999999999999, INT64_MAX,
                                      (int64_t)(BUCKET_MAX_PERIOD_US / MS),
                                      (int64_t)(BUCKET_MAX_PERIOD_US / MS) - 1};
    struct lease_job *j, *next;
    struct lease_waiter *done, *fb;
    struct lt_req r;

    for (size_t i = 0; i < sizeof(retries) / sizeof(retries[0]); i++) {
        struct lease_table *t = lease_table_new(&lt_cfg, 4);
        lt_decide(t, "fast", &p100, 10 * S, 1, &r, &j);
        j->sent_us = 10 * S;
        lt_reply(t, j, (const int64_t[8]){0, 0, 0, 0, retries[i], 10, 0, 0}, 10 * S, &done, &fb,
                 &next);
        ck_assert(!r.res.allowed);
        ck_assert_uint_le(r.res.retry_us, BUCKET_MAX_PERIOD_US);
        ck_assert_uint_ge(r.res.retry_us, BUCKET_MAX_PERIOD_US - 1000 * MS);
        ck_assert_uint_le(r.res.reset_us, BUCKET_MAX_PERIOD_US);
        ck_assert_int_eq(lt_decide(t, "fast", &p100, 11 * S, 1, &r, &j), LEASE_DONE);
        ck_assert(!r.res.allowed);
        ck_assert_uint_le(r.res.retry_us, BUCKET_MAX_PERIOD_US);
        lease_table_free(t);

        /* the same through an exact denial (fuzz_reply's reproducer) */
        t = lease_table_new(&cfg_exact, 4);
        lt_decide(t, "fast", &p100, 10 * S, 1, &r, &j);
        ck_assert_uint_eq(j->kind, LEASE_JOB_EXACT);
        exact_reply(t, j, 1, 0, 0, retries[i], 10 * S, &done, &fb, &next);
        ck_assert(!r.res.allowed);
        ck_assert_uint_le(r.res.retry_us, BUCKET_MAX_PERIOD_US);
        ck_assert_uint_ge(r.res.retry_us, BUCKET_MAX_PERIOD_US - 1000 * MS);
        lease_table_free(t);
    }
}
END_TEST

START_TEST(cold_key_goes_exact)
{
    struct lease_table *t = lease_table_new(&cfg_exact, 4);
    struct lease_job *j, *next;
    struct lease_waiter *done, *fb;
    struct lt_req r[3];

    ck_assert_int_eq(lt_decide(t, "k", &lt_pbig, 10 * S, 1, &r[0], &j), LEASE_PENDING);
    ck_assert_ptr_nonnull(j);
    ck_assert_uint_eq(j->kind, LEASE_JOB_EXACT);
    ck_assert_uint_eq(j->want, 1);
    ck_assert_uint_eq(j->used, 0);
    j->sent_us = 10 * S;
    exact_reply(t, j, 1, 1, 999, 0, 10 * S + 500, &done, &fb, &next);
    ck_assert_int_eq(lt_count(done), 1);
    ck_assert_ptr_null(fb);
    ck_assert_ptr_null(next);
    ck_assert(r[0].res.allowed);
    ck_assert_uint_eq(r[0].res.remaining, 999);
    /* nothing was leased: the key's next request asks Redis again, and a key
     * seen twice claims for more than itself (a lease), not exactly */
    ck_assert_int_eq(lt_decide(t, "k", &lt_pbig, 10 * S + 600, 1, &r[1], &j), LEASE_PENDING);
    ck_assert_ptr_nonnull(j);
    ck_assert_uint_eq(j->kind, LEASE_JOB_CLAIM);
    ck_assert_uint_gt(j->want, 1);
    lease_timeout(t, j, &fb);
    ck_assert_int_eq(lt_count(fb), 1);
    exact_reply(t, j, 0, 0, 0, 0, 10 * S + 700, &done, &fb, &next); /* settle it */
    lease_table_free(t);
}
END_TEST

START_TEST(exact_denial_is_cached)
{
    struct lease_table *t = lease_table_new(&cfg_exact, 4);
    struct lease_job *j, *next;
    struct lease_waiter *done, *fb;
    struct lt_req r[2];

    ck_assert_int_eq(lt_decide(t, "k", &lt_p10, 10 * S, 1, &r[0], &j), LEASE_PENDING);
    ck_assert_uint_eq(j->kind, LEASE_JOB_EXACT);
    exact_reply(t, j, 1, 0, 0, 2500, 10 * S, &done, &fb, &next);
    ck_assert_int_eq(lt_count(done), 1);
    ck_assert(!r[0].res.allowed);
    ck_assert_uint_eq(r[0].res.retry_us, 2500 * MS);
    ck_assert_ptr_null(next);
    /* blocked until the retry time without asking Redis */
    ck_assert_int_eq(lt_decide(t, "k", &lt_p10, 12 * S, 1, &r[1], &j), LEASE_DONE);
    ck_assert_ptr_null(j);
    ck_assert(!r[1].res.allowed);
    ck_assert_uint_eq(r[1].res.retry_us, 500 * MS);
    lease_table_free(t);
}
END_TEST

/* A fed bucket (scope = global) is refilled by its region's deposits, at
 * any round: its denial is cached an interval at most, not the rule's
 * rate's wait (a minute here), which would deny the key a minute with
 * tokens deposited; a penalty box (block_for) is still cached to its end. */
START_TEST(fed_denial_cached_an_interval)
{
    struct bucket_params fed = lt_p10;
    struct lease_table *t = lease_table_new(&cfg_exact, 4);
    struct lease_job *j, *next;
    struct lease_waiter *done, *fb;
    struct lt_req r[3];

    fed.fed = 1;
    ck_assert_int_eq(lt_decide(t, "k", &fed, 10 * S, 1, &r[0], &j), LEASE_PENDING);
    exact_reply(t, j, 1, 0, 0, 60000, 10 * S, &done, &fb, &next);
    ck_assert(!r[0].res.allowed);
    ck_assert_uint_le(r[0].res.retry_us, cfg_exact.interval_us);
    ck_assert_uint_gt(r[0].res.retry_us, 0);
    /* within it: answered from the cache; past it: Redis is asked again */
    ck_assert_int_eq(lt_decide(t, "k", &fed, 10 * S + 50 * MS, 1, &r[1], &j), LEASE_DONE);
    ck_assert(!r[1].res.allowed);
    ck_assert_int_eq(lt_decide(t, "k", &fed, 10 * S + 150 * MS, 1, &r[2], &j), LEASE_PENDING);
    exact_reply(t, j, 1, 1, 4, 0, 10 * S + 150 * MS, &done, &fb, &next);
    ck_assert(r[2].res.allowed);
    lease_table_free(t);

    /* block_for 5 s: the block is Redis', to its end */
    t = lease_table_new(&cfg_exact, 4);
    fed.block_us = 5 * S;
    fed.block_ms = 5000;
    ck_assert_int_eq(lt_decide(t, "b", &fed, 10 * S, 1, &r[0], &j), LEASE_PENDING);
    exact_reply(t, j, 1, 0, 0, 5000, 10 * S, &done, &fb, &next);
    ck_assert_uint_eq(r[0].res.retry_us, 5 * S);
    ck_assert_int_eq(lt_decide(t, "b", &fed, 14 * S, 1, &r[1], &j), LEASE_DONE);
    ck_assert(!r[1].res.allowed);
    lease_table_free(t);
}
END_TEST

/* block_for: the jobs carry the rule's block, and a denial (Redis answers
 * retry_ms = the block's rest) is cached to the block's end exactly, not
 * stretched to an interval's worth of tokens as an empty bucket's is. */
START_TEST(block_cached_to_its_end)
{
    /* 100/s, burst 100: an empty bucket's denial would wait 9 tokens more */
    const struct bucket_params p = {0, 6000, 60 * S, 100, 3 * S, 0, 60 * 1000, 3 * 1000, 0, 0};
    struct lease_table *t = lease_table_new(&cfg_exact, 4);
    struct lease_job *j, *next;
    struct lease_waiter *done, *fb;
    struct lt_req r[4];

    ck_assert_int_eq(lt_decide(t, "k", &p, 10 * S, 1, &r[0], &j), LEASE_PENDING);
    ck_assert_uint_eq(j->kind, LEASE_JOB_EXACT);
    ck_assert_uint_eq(j->block_ms, 3000);
    exact_reply(t, j, 1, 0, 0, 3000, 10 * S, &done, &fb, &next);
    ck_assert(!r[0].res.allowed);
    ck_assert_uint_eq(r[0].res.retry_us, 3 * S);
    /* 2.999 s on: still denied locally, no call */
    ck_assert_int_eq(lt_decide(t, "k", &p, 13 * S - MS, 1, &r[1], &j), LEASE_DONE);
    ck_assert_ptr_null(j);
    ck_assert(!r[1].res.allowed);
    ck_assert_uint_eq(r[1].res.retry_us, MS);
    /* at its end Redis is asked again, with the block */
    ck_assert_int_eq(lt_decide(t, "k", &p, 13 * S, 1, &r[2], &j), LEASE_PENDING);
    ck_assert_ptr_nonnull(j);
    ck_assert_uint_eq(j->block_ms, 3000);
    ck_assert_uint_eq(j->kind, LEASE_JOB_CLAIM); /* seen twice: a claim */
    j->sent_us = 13 * S;
    lt_reply(t, j, (const int64_t[8]){1, 0, 1, 1, 0, 10, 1000, 1}, 13 * S, &done, &fb, &next);
    ck_assert(r[2].res.allowed);
    lease_table_free(t);
}
END_TEST

START_TEST(exact_failure_and_arrivals)
{
    struct lease_table *t = lease_table_new(&cfg_exact, 4);
    struct lease_job *j, *j2, *next;
    struct lease_waiter *done, *fb;
    struct lt_req r[4];

    /* a failed exact call: its waiter goes to the fallback; nothing was held,
     * so nothing is voided (the next call reports no spend) */
    ck_assert_int_eq(lt_decide(t, "a", &lt_pbig, 10 * S, 1, &r[0], &j), LEASE_PENDING);
    ck_assert_uint_eq(j->kind, LEASE_JOB_EXACT);
    exact_reply(t, j, 0, 0, 0, 0, 10 * S, &done, &fb, &next);
    ck_assert_ptr_null(done);
    ck_assert_int_eq(lt_count(fb), 1);
    ck_assert_ptr_null(next);
    ck_assert_int_eq(lt_decide(t, "a", &lt_pbig, 20 * S, 1, &r[1], &j), LEASE_PENDING);
    ck_assert_uint_eq(j->used, 0);
    exact_reply(t, j, 1, 1, 5, 0, 20 * S, &done, &fb, &next);
    ck_assert_ptr_null(next);
    /* requests that come while the exact call is out wait on it; the one it
     * was for is decided by it, the others by a claim sent then */
    ck_assert_int_eq(lt_decide(t, "b", &lt_pbig, 30 * S, 1, &r[1], &j), LEASE_PENDING);
    ck_assert_uint_eq(j->kind, LEASE_JOB_EXACT);
    ck_assert_int_eq(lt_decide(t, "b", &lt_pbig, 30 * S + 1, 1, &r[2], &j2), LEASE_PENDING);
    ck_assert_ptr_null(j2);
    ck_assert_int_eq(lt_decide(t, "b", &lt_pbig, 30 * S + 2, 1, &r[3], &j2), LEASE_PENDING);
    ck_assert_ptr_null(j2);
    exact_reply(t, j, 1, 1, 900, 0, 30 * S + 300, &done, &fb, &next);
    ck_assert_int_eq(lt_count(done), 1);
    ck_assert(r[1].res.allowed);
    ck_assert_ptr_nonnull(next);
    ck_assert_uint_eq(next->kind, LEASE_JOB_CLAIM);
    ck_assert_uint_ge(next->want, 2);
    j = next;
    j->sent_us = 30 * S + 300;
    const int64_t v[8] = {2, 898, 2, 1, 0, 0, 1000, 2};
    lt_reply(t, j, v, 30 * S + 600, &done, &fb, &next);
    ck_assert_int_eq(lt_count(done), 2);
    ck_assert(r[2].res.allowed && r[3].res.allowed);
    /* allowed, but the bucket is dry after it: those who came meanwhile are
     * denied, without a claim, until the next tokens: 10000/1s brings 1000
     * in an interval, a claim takes at most max_fraction x burst = 100, so
     * the wait is the next token's 40 ms and 99 more at 0.1 ms each */
    ck_assert_int_eq(lt_decide(t, "d", &lt_pbig, 35 * S, 1, &r[1], &j), LEASE_PENDING);
    ck_assert_uint_eq(j->kind, LEASE_JOB_EXACT);
    ck_assert_int_eq(lt_decide(t, "d", &lt_pbig, 35 * S + 1, 1, &r[2], &j2), LEASE_PENDING);
    exact_reply(t, j, 1, 1, 0, 40, 35 * S + 300, &done, &fb, &next);
    ck_assert_int_eq(lt_count(done), 2);
    ck_assert_ptr_null(next);
    ck_assert(r[1].res.allowed && !r[2].res.allowed);
    ck_assert_uint_eq(r[2].res.retry_us, 50 * MS);
    ck_assert_int_eq(lt_decide(t, "d", &lt_pbig, 35 * S + 45 * MS, 1, &r[3], &j2), LEASE_DONE);
    ck_assert(!r[3].res.allowed);
    /* a timed-out exact call: later requests do not wait on it, and its late
     * reply decides nothing twice */
    ck_assert_int_eq(lt_decide(t, "c", &lt_pbig, 40 * S, 1, &r[0], &j), LEASE_PENDING);
    ck_assert_uint_eq(j->kind, LEASE_JOB_EXACT);
    lease_timeout(t, j, &fb);
    ck_assert_int_eq(lt_count(fb), 1);
    ck_assert_int_eq(lt_decide(t, "c", &lt_pbig, 40 * S + 1, 1, &r[1], &j2), LEASE_DOWN);
    exact_reply(t, j, 1, 1, 7, 0, 40 * S + 200, &done, &fb, &next);
    ck_assert_ptr_null(done);
    ck_assert_ptr_null(fb);
    ck_assert_ptr_null(next);
    lease_table_free(t);
}
END_TEST

/* A key seen once and allowed by its exact call holds nothing: its entry is
 * retired at the reply (not kept for ttl, ticked and swept), and what it
 * knew comes back if the key does within ttl: its next call is a script
 * call (not a first SET), and a second hit in the same tick still makes a
 * lease claim. Kept: a denial (the negative cache), a key that had company
 * while its call was out, every entry when rate leases are on. */
START_TEST(seen_once_entry_is_retired)
{
    struct lease_config cfg_rate = cfg_exact;
    struct lease_table *t = lease_table_new(&cfg_exact, 4);
    struct lease_job *j, *next, *jobs = NULL;
    struct lease_waiter *done, *fb;
    struct lease_state st;
    struct lt_req r[3];

    ck_assert_int_eq(lt_decide(t, "k", &lt_pbig, 10 * S, 1, &r[0], &j), LEASE_PENDING);
    ck_assert_uint_eq(j->kind, LEASE_JOB_EXACT);
    ck_assert(j->first); /* never heard of: a first SET */
    exact_reply(t, j, 1, 1, 999, 0, 10 * S + 500, &done, &fb, &next);
    ck_assert_int_eq(lt_count(done), 1);
    ck_assert(r[0].res.allowed);
    ck_assert_uint_eq(lease_count(t), 0);
    ck_assert_int_eq(lease_peek(t, "k", 1, 10 * S + 600, &st), 0);
    /* a tick later, within ttl: the ghost says Redis knows the key */
    lease_tick(t, 10 * S + 100 * MS, 1, &jobs);
    ck_assert_ptr_null(jobs);
    ck_assert_int_eq(lt_decide(t, "k", &lt_pbig, 10 * S + 150 * MS, 1, &r[1], &j), LEASE_PENDING);
    ck_assert_uint_eq(j->kind, LEASE_JOB_EXACT);
    ck_assert(!j->first);
    ck_assert_int_eq(lease_peek(t, "k", 1, 10 * S + 150 * MS, &st), 1);
    ck_assert(st.known);
    ck_assert_double_eq(st.bucket_tokens, 999);
    exact_reply(t, j, 1, 1, 998, 0, 10 * S + 151 * MS, &done, &fb, &next);
    ck_assert_uint_eq(lease_count(t), 0);
    /* past ttl the ghost is gone: a first SET again, as for a swept entry */
    ck_assert_int_eq(lt_decide(t, "k", &lt_pbig, 12 * S, 1, &r[2], &j), LEASE_PENDING);
    ck_assert(j->first);
    exact_reply(t, j, 1, 1, 999, 0, 12 * S + 1, &done, &fb, &next);
    ck_assert_uint_eq(lease_count(t), 0);

    /* a denial is kept, to be answered locally */
    lt_decide(t, "d", &lt_p10, 20 * S, 1, &r[0], &j);
    exact_reply(t, j, 1, 0, 0, 2500, 20 * S, &done, &fb, &next);
    ck_assert_uint_eq(lease_count(t), 1);
    /* so is a key with a second request while its call was out */
    lt_decide(t, "b", &lt_pbig, 30 * S, 1, &r[0], &j);
    lt_decide(t, "b", &lt_pbig, 30 * S + 1, 1, &r[1], &next);
    exact_reply(t, j, 1, 1, 900, 0, 30 * S + 300, &done, &fb, &next);
    ck_assert_ptr_nonnull(next);
    ck_assert_uint_eq(lease_count(t), 2);
    lease_timeout(t, next, &fb);
    exact_reply(t, next, 0, 0, 0, 0, 30 * S + 400, &done, &fb, &next);
    lease_table_free(t);

    t = lease_table_new(&cfg_exact, 4);
    /* a worker's clock, read before the Redis thread's retirement, may be
     * behind it: the ghost is fresh, not ttl old, and its hit and this one
     * fall in one tick: a lease claim, as the kept entry would make */
    ck_assert_int_eq(lt_decide(t, "c", &lt_pbig, 10 * S + 250 * MS, 1, &r[1], &j), LEASE_PENDING);
    ck_assert(j->first);
    exact_reply(t, j, 1, 1, 997, 0, 10 * S + 300 * MS, &done, &fb, &next);
    ck_assert_uint_eq(lease_count(t), 0);
    ck_assert_int_eq(lt_decide(t, "c", &lt_pbig, 10 * S + 299 * MS, 1, &r[1], &j), LEASE_PENDING);
    ck_assert_uint_eq(j->kind, LEASE_JOB_CLAIM);
    ck_assert_uint_gt(j->want, 1);
    lease_timeout(t, j, &fb);
    exact_reply(t, j, 0, 0, 0, 0, 10 * S + 301 * MS, &done, &fb, &next); /* settle it */
    ck_assert_uint_eq(lease_count(t), 1);
    lease_table_free(t);

    /* a reset (the /reset API) of a retired key finds its ghost: the
     * ghost takes the reset's remaining as Redis' last word; with leases
     * held elsewhere, which a ghost cannot carry, it is dropped */
    t = lease_table_new(&cfg_exact, 4);
    lt_decide(t, "g", &lt_pbig, 10 * S, 1, &r[0], &j);
    exact_reply(t, j, 1, 1, 3, 0, 10 * S + 1, &done, &fb, &next);
    ck_assert_uint_eq(lease_count(t), 0);
    ck_assert_int_eq(lease_forget(t, "g", 1, 10 * S + 2, 1000, 0, 0), 1);
    ck_assert_int_eq(lease_forget(t, "nope", 4, 10 * S + 2, 1000, 0, 0), 0);
    lease_tick(t, 10 * S + 100 * MS, 1, &jobs); /* (its hit in a past tick) */
    ck_assert_ptr_null(jobs);
    lt_decide(t, "g", &lt_pbig, 10 * S + 200 * MS, 1, &r[1], &j);
    ck_assert(!j->first);
    ck_assert_int_eq(lease_peek(t, "g", 1, 10 * S + 200 * MS, &st), 1);
    ck_assert_double_eq(st.bucket_tokens, 1000); /* not the 3 of before */
    exact_reply(t, j, 1, 1, 999, 0, 10 * S + 201 * MS, &done, &fb, &next);
    ck_assert_uint_eq(lease_count(t), 0);
    ck_assert_int_eq(lease_forget(t, "g", 1, 10 * S + 202 * MS, 990, 10, 1), 1);
    lt_decide(t, "g", &lt_pbig, 10 * S + 400 * MS, 1, &r[1], &j);
    ck_assert(j->first); /* the ghost went: Redis is asked afresh */
    exact_reply(t, j, 1, 1, 989, 0, 10 * S + 401 * MS, &done, &fb, &next);
    /* a ghost past ttl is no record of the key */
    ck_assert_int_eq(lease_forget(t, "g", 1, 20 * S, 1000, 0, 0), 0);
    lease_table_free(t);

    /* rate leases count sightings over seconds: entries stay */
    cfg_rate.rate_ttl_us = 10 * S;
    t = lease_table_new(&cfg_rate, 4);
    lt_decide(t, "k", &lt_pbig, 10 * S, 1, &r[0], &j);
    ck_assert_uint_eq(j->kind, LEASE_JOB_EXACT);
    exact_reply(t, j, 1, 1, 999, 0, 10 * S + 500, &done, &fb, &next);
    ck_assert_uint_eq(lease_count(t), 1);
    lease_table_free(t);
}
END_TEST

int main(void)
{
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, seen_once_entry_is_retired);

    CHECK_ADD(tc, cold_key_goes_exact, exact_denial_is_cached, fed_denial_cached_an_interval,
              exact_failure_and_arrivals, blocked_retry_keeps_the_cap, block_cached_to_its_end);
    return check_run_case("lease_exact", tc);
}
