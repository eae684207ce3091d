/* SPDX-License-Identifier: Apache-2.0 */
/* test_lease_tick.c - the lease cache over time, with a fake clock and
 * hand-written Redis replies: timeouts, failures and Redis down, the tick
 * (top-ups, give-backs, forgetting) and what it costs, drain at exit,
 * demand decaying, failed jobs, short windows, eviction that never loses a
 * report, the memory budget shared with the buckets. */
#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check_util.h"
#include "lease/lease.h"
#include "lease_fixture.h"
#include "metrics/metrics.h"

START_TEST(timeout_failure_and_down)
{
    struct lease_table *t = lease_table_new(&lt_cfg, 4);
    struct lease_job *j, *next;
    struct lease_waiter *done = NULL, *fb = NULL;
    struct lt_req r[3];

    lt_decide(t, "k", &lt_pbig, 0, 1, &r[0], &j);
    j->sent_us = 0;
    lease_timeout(t, j, &fb);
    ck_assert_int_eq(lt_count(fb), 1);
    ck_assert(fb->fallback);
    /* the late reply still lands in the lease */
    lt_reply(t, j, (const int64_t[8]){3, 500, 3, 1, 0, 1, 1000, 3}, 150 * MS, &done, &fb, &next);
    ck_assert_int_eq(lt_count(done), 0);
    ck_assert_int_eq(lt_decide(t, "k", &lt_pbig, 160 * MS, 1, &r[1], &next), LEASE_DONE);
    ck_assert(r[1].res.allowed);
    /* Redis down: a valid lease is still spent; without one, fall back */
    ck_assert_int_eq(lt_decide(t, "k", &lt_pbig, 170 * MS, 0, &r[1], &next), LEASE_DONE);
    ck_assert_int_eq(lt_decide(t, "k", &lt_pbig, 170 * MS, 0, &r[1], &next), LEASE_DONE);
    ck_assert_int_eq(lt_decide(t, "k", &lt_pbig, 170 * MS, 0, &r[1], &next), LEASE_DOWN);
    /* a failed claim sends its waiters to the fallback */
    ck_assert_int_eq(lt_decide(t, "k", &lt_pbig, 180 * MS, 1, &r[2], &j), LEASE_PENDING);
    done = fb = NULL;
    lease_reply(t, j, 0, NULL, 0, 190 * MS, &done, &fb, &next);
    ck_assert_int_eq(lt_count(fb), 1);
    ck_assert_int_eq(lt_count(done), 0);
    lease_table_free(t);
}
END_TEST

START_TEST(tick_top_up_give_back_forget)
{
    struct lease_table *t = lease_table_new(&lt_cfg, 4);
    struct lease_job *j, *next, *jobs;
    struct lease_waiter *done, *fb;
    struct lt_req r;
    uint64_t now = 0;

    lt_decide(t, "k", &lt_pbig, now, 1, &r, &j);
    j->sent_us = now;
    lt_reply(t, j, (const int64_t[8]){60, 900, 60, 1, 0, 1, 1000, 60}, now + 100, &done, &fb,
             &next);
    /* 50 decisions in the first interval: 10 tokens left, less than demand */
    for (int i = 0; i < 50; i++)
        ck_assert_int_eq(lt_decide(t, "k", &lt_pbig, now + 1000, 1, &r, &next), LEASE_DONE);
    jobs = NULL;
    lease_tick(t, 100 * MS, 1, &jobs);
    ck_assert_ptr_nonnull(jobs);
    ck_assert_uint_eq(jobs->kind, LEASE_JOB_CLAIM);
    ck_assert_uint_eq(jobs->used, 51);
    ck_assert_uint_gt(jobs->want, 10);
    ck_assert_ptr_null(jobs->next);
    jobs->sent_us = 100 * MS;
    lt_reply(t, jobs, (const int64_t[8]){40, 900, 50, 1, 0, 1, 1000, 50}, 101 * MS, &done, &fb,
             &next);
    /* a tick without demand gives the lease back */
    jobs = NULL;
    lease_tick(t, 200 * MS, 1, &jobs);
    ck_assert_ptr_nonnull(jobs);
    ck_assert_uint_eq(jobs->kind, LEASE_JOB_RETURN);
    ck_assert_uint_eq(jobs->returned, 50);
    lt_reply(t, jobs, (const int64_t[8]){0, 1000, 0, 0, 0, 0, 0, 0}, 201 * MS, &done, &fb, &next);
    ck_assert_uint_eq(lease_count(t), 1);
    /* idle for more than 2 x ttl: forgotten */
    jobs = NULL;
    lease_tick(t, 3 * S, 1, &jobs);
    ck_assert_ptr_null(jobs);
    ck_assert_uint_eq(lease_count(t), 0);
    lease_table_free(t);
}
END_TEST

START_TEST(drain_returns_everything)
{
    struct lease_table *t = lease_table_new(&lt_cfg, 4);
    struct lease_job *j, *next, *jobs = NULL;
    struct lease_waiter *done, *fb;
    struct lt_req r;
    char key[8];
    int n = 0;

    for (int k = 0; k < 20; k++) {
        snprintf(key, sizeof(key), "k%d", k);
        lt_decide(t, key, &lt_pbig, 0, 1, &r, &j);
        j->sent_us = 0;
        lt_reply(t, j, (const int64_t[8]){7, 900, 7, 1, 0, 1, 1000, 7}, 10, &done, &fb, &next);
    }
    lease_drain(t, 20, &jobs);
    for (; jobs; jobs = next) {
        next = jobs->next;
        ck_assert_uint_eq(jobs->kind, LEASE_JOB_RETURN);
        ck_assert_uint_eq(jobs->returned, 6);
        ck_assert_uint_eq(jobs->used, 1);
        n++;
        struct lease_job *nx;
        lt_reply(t, jobs, (const int64_t[8]){0, 906, 0, 0, 0, 0, 0, 0}, 30, &done, &fb, &nx);
    }
    ck_assert_int_eq(n, 20);
    lease_table_free(t);
}
END_TEST

/* A job that fails may or may not have run in Redis. Either way the lease is
 * voided: nothing more is spent from it, and the next claim reports all that
 * Redis thinks we hold as spent, so a lost report never comes back as tokens
 * to spend twice (found in review: 114 admitted with b = 100). */
/* A churn of keys seen once: the tick walks only what is active, and forgets
 * the idle entries once ttl has passed, a bounded number per tick. */
START_TEST(tick_costs_what_is_active)
{
    struct lease_table *t = lease_table_new(&lt_cfg, 4);
    struct lease_job *j, *next, *jobs = NULL;
    struct lease_waiter *done, *fb;
    struct lt_req r;
    char key[32];
    const int64_t v[8] = {1, 9, 1, 1, 0, 6000, 1000, 1};
    const size_t nkeys = 20000;

    for (size_t i = 0; i < nkeys; i++) {
        snprintf(key, sizeof(key), "k%zu", i);
        ck_assert_int_eq(lt_decide(t, key, &lt_p10, 10 * S, 1, &r, &j), LEASE_PENDING);
        j->sent_us = 10 * S;
        lt_reply(t, j, v, 10 * S + 100, &done, &fb, &next);
        ck_assert_int_eq(lt_count(done), 1); /* spent at once: nothing held locally */
    }
    ck_assert_uint_eq(lease_count(t), nkeys);
    ck_assert_uint_eq(lease_active(t), nkeys); /* seen in this tick */
    lease_tick(t, 10 * S + 100 * MS, 1, &jobs);
    ck_assert_ptr_null(jobs); /* seen once: no top-up, nothing to give back */
    ck_assert_uint_eq(lease_active(t), 0);
    ck_assert_uint_eq(lease_count(t), nkeys); /* Redis still holds their leases */
    /* one key stays busy: the only one a tick walks */
    ck_assert_int_eq(lt_decide(t, "k0", &lt_p10, 10 * S + 150 * MS, 1, &r, &j), LEASE_PENDING);
    ck_assert_uint_eq(lease_active(t), 1);
    j->sent_us = 10 * S + 150 * MS;
    lt_reply(t, j, v, 10 * S + 151 * MS, &done, &fb, &next);
    /* past ttl: the sweep forgets at most 2048 per stripe and tick */
    size_t before = lease_count(t);
    lease_tick(t, 12 * S, 1, &jobs);
    size_t after = lease_count(t);
    ck_assert_uint_lt(after, before);
    ck_assert_uint_ge(after, before - 4 * 2048);
    for (int i = 0; i < 10 && lease_count(t) > 0; i++)
        lease_tick(t, 12 * S + (uint64_t)(i + 1) * 100 * MS, 1, &jobs);
    ck_assert_uint_eq(lease_count(t), 0);
    ck_assert_ptr_null(jobs);
    lease_table_free(t);
}
END_TEST

/* An entry off the active list keeps its demand halving per tick (lazily):
 * the claim size after a pause is what the tick-by-tick decay gives. */
START_TEST(demand_decays_off_the_list)
{
    struct lease_table *t = lease_table_new(&lt_cfg, 1);
    struct lease_job *j, *next, *jobs = NULL;
    struct lease_waiter *done, *fb;
    struct lt_req r;
    uint64_t now = 10 * S;
    const int64_t v[8] = {1, 999, 1, 1, 0, 1, 1000, 1};

    /* 8 hits in one tick: demand 4 after it */
    for (int i = 0; i < 8; i++) {
        int got = lt_decide(t, "k", &lt_pbig, now, 1, &r, &j);
        if (got == LEASE_PENDING && j) {
            j->sent_us = now;
            lt_reply(t, j, v, now, &done, &fb, &next);
        }
    }
    lease_tick(t, now += 100 * MS, 0, &jobs); /* redis down: no jobs, demand 4 */
    ck_assert_ptr_null(jobs);
    /* two idle ticks (off the list): 4 -> 2 -> 1 */
    lease_tick(t, now += 100 * MS, 0, &jobs);
    lease_tick(t, now += 100 * MS, 0, &jobs);
    ck_assert_uint_eq(lease_active(t), 0);
    /* a request now: claim = waiting + ceil(2 * demand) - tokens = 1 + 2 */
    ck_assert_int_eq(lt_decide(t, "k", &lt_pbig, now + 1, 1, &r, &j), LEASE_PENDING);
    ck_assert_ptr_nonnull(j);
    ck_assert_uint_eq(j->want, 3);
    free(j); /* the caller's until replied */
    lease_table_free(t);
}
END_TEST

START_TEST(failed_job_voids_the_lease)
{
    struct lease_table *t = lease_table_new(&lt_cfg, 4);
    struct lease_job *j, *next, *jobs = NULL;
    struct lease_waiter *done, *fb;
    struct lt_req r;
    int allowed = 0;

    lt_decide(t, "k", &lt_pbig, 0, 1, &r, &j);
    j->sent_us = 0;
    lt_reply(t, j, (const int64_t[8]){10, 990, 10, 1, 0, 1, 1000, 10}, 100, &done, &fb, &next);
    allowed++; /* the waiter */
    for (int i = 0; i < 7; i++)
        if (lt_decide(t, "k", &lt_pbig, 1000, 1, &r, &next) == LEASE_DONE && r.res.allowed)
            allowed++;
    ck_assert_int_eq(allowed, 8);
    /* the top-up carrying the report of 8 spent fails */
    lease_tick(t, 100 * MS, 1, &jobs);
    ck_assert_ptr_nonnull(jobs);
    ck_assert_uint_eq(jobs->used, 8);
    done = fb = NULL;
    lease_reply(t, jobs, 0, NULL, 0, 101 * MS, &done, &fb, &next);
    /* the 2 unspent are not spent any more: the next decision claims */
    ck_assert_int_eq(lt_decide(t, "k", &lt_pbig, 102 * MS, 1, &r, &j), LEASE_PENDING);
    ck_assert_ptr_nonnull(j);
    ck_assert_uint_ge(j->used, 10); /* "all I held is spent" (capped by Redis) */
    j->sent_us = 102 * MS;
    /* Redis (which never saw the lost report) settles all 10 and grants 3 */
    lt_reply(t, j, (const int64_t[8]){3, 977, 3, 1, 0, 1, 1000, 3}, 103 * MS, &done, &fb, &next);
    allowed++; /* the waiter */
    for (int i = 0; i < 10; i++)
        if (lt_decide(t, "k", &lt_pbig, 104 * MS, 1, &r, &next) == LEASE_DONE && r.res.allowed)
            allowed++;
        else if (next) {
            lease_reply(t, next, 0, NULL, 0, 105 * MS, &done, &fb, &j);
            break;
        }
    ck_assert_int_le(allowed, 10 + 3); /* never more than granted */
    ck_assert_int_eq(allowed, 11);
    lease_table_free(t);
}
END_TEST

/* A sliding window's lease ends with its window: it may be far shorter than
 * ttl. The whole margin (ttl / 20 = 50 ms here) used to leave a 30 ms lease
 * nothing to spend, and the agent claimed, and was charged, again and again
 * until the window ended. */
START_TEST(short_window_lease_is_spent)
{
    static const struct bucket_params sw = {
        BUCKET_SLIDING_WINDOW, 100, 10 * S, 100, 0, 0, 10 * 1000, 0, 0, 0};
    struct lease_table *t = lease_table_new(&lt_cfg, 1);
    struct lease_job *j, *next;
    struct lease_waiter *done, *fb;
    struct lt_req r[2];

    ck_assert_int_eq(lt_decide(t, "w", &sw, 10 * S, 1, &r[0], &j), LEASE_PENDING);
    j->sent_us = 10 * S;
    lt_reply(t, j, (const int64_t[8]){1, 90, 1, 1, 0, 15000, 30, 1}, 10 * S + 1 * MS, &done, &fb,
             &next);
    ck_assert_int_eq(lt_count(done), 1);
    ck_assert(r[0].res.allowed);
    ck_assert_ptr_null(next);

    /* A grant whose lease ended before its reply came cannot be spent: it
     * goes back with the follow-up claim instead of staying charged. */
    ck_assert_int_eq(lt_decide(t, "w", &sw, 12 * S, 1, &r[1], &j), LEASE_PENDING);
    j->sent_us = 12 * S;
    lt_reply(t, j, (const int64_t[8]){2, 88, 2, 1, 0, 15000, 2, 2}, 12 * S + 5 * MS, &done, &fb,
             &next);
    ck_assert_int_eq(lt_count(done), 0);
    ck_assert_ptr_nonnull(next);
    ck_assert_uint_eq(next->kind, LEASE_JOB_CLAIM);
    ck_assert_uint_eq(next->returned, 2);
    ck_assert_uint_eq(next->used, 0);
    next->sent_us = 12 * S + 5 * MS;
    /* the next window: Redis dropped that lease, grants afresh */
    lt_reply(t, next, (const int64_t[8]){1, 99, 1, 1, 0, 15000, 1000, 1}, 12 * S + 6 * MS, &done,
             &fb, &j);
    ck_assert_int_eq(lt_count(done), 1);
    ck_assert(r[1].res.allowed);
    lease_table_free(t);
}
END_TEST

/* [agent] max_entries: a new key past the budget drops the least recently
 * used entry without a job in flight or waiters. A spend it had not
 * reported must not come back: while its lease may live in Redis, new
 * entries of the stripe report "all spent" (capped by Redis at what it
 * holds) with their first claim. */
START_TEST(eviction_never_loses_a_report)
{
    struct lease_table *t = lease_table_new(&lt_cfg, 1); /* one stripe: exact order */
    struct bucket_budget budget = {0};
    struct lease_job *ja, *jb, *jc, *jd, *next;
    struct lease_waiter *done, *fb;
    struct lt_req r[8];
    uint64_t ev0 = atomic_load(&metrics.evictions);

    atomic_store(&budget.max, 2);
    lease_table_set_budget(t, &budget);
    /* a: 5 granted, 1 spent by its waiter: a report pending, lease alive */
    lt_decide(t, "a", &lt_pbig, 0, 1, &r[0], &ja);
    ck_assert_uint_eq(ja->used, 0); /* nothing evicted yet: a plain first claim */
    ja->sent_us = 0;
    lt_reply(t, ja, (const int64_t[8]){5, 995, 5, 1, 0, 5, 1000, 5}, 100, &done, &fb, &next);
    ck_assert_int_eq(lt_count(done), 1);
    /* b: a claim in flight (with its waiter) */
    ck_assert_int_eq(lt_decide(t, "b", &lt_pbig, 200, 1, &r[1], &jb), LEASE_PENDING);
    /* c: over the budget; b must stay, a (the oldest) goes */
    ck_assert_int_eq(lt_decide(t, "c", &lt_pbig, 300, 1, &r[2], &jc), LEASE_PENDING);
    ck_assert_uint_eq(atomic_load(&metrics.evictions), ev0 + 1);
    ck_assert_uint_eq(lease_count(t), 2);
    ck_assert_uint_eq(atomic_load(&budget.count), 2);
    /* c may be a key just dropped: its first claim says all it held is spent */
    ck_assert_uint_ge(jc->used, 1000000000000ull);
    /* c's claim fails: its waiter falls back, nothing points to c any more */
    lease_reply(t, jc, 0, NULL, 0, 350, &done, &fb, &next);
    ck_assert_int_eq(lt_count(fb), 1);
    /* a again: its 1 unreported spend is reported as "all spent", so Redis
     * cannot hand back the 4 it still counts as ours; b still stays, c goes */
    ck_assert_int_eq(lt_decide(t, "a", &lt_pbig, 400, 1, &r[3], &ja), LEASE_PENDING);
    ck_assert_ptr_nonnull(ja);
    ck_assert_uint_ge(ja->used, 5);
    ck_assert_uint_eq(lease_count(t), 2);
    ck_assert_uint_eq(atomic_load(&metrics.evictions), ev0 + 2);
    /* Redis settles all 5 of a's as spent and grants 3: a spends 3, no more */
    ja->sent_us = 400;
    lt_reply(t, ja, (const int64_t[8]){3, 990, 3, 1, 0, 5, 1000, 3}, 500, &done, &fb, &next);
    ck_assert_int_eq(lt_count(done), 1);
    int allowed = 1;
    for (int i = 0; i < 5; i++)
        if (lt_decide(t, "a", &lt_pbig, 600, 1, &r[4], &next) == LEASE_DONE && r[4].res.allowed)
            allowed++;
        else if (next) {
            lease_reply(t, next, 0, NULL, 0, 700, &done, &fb, &jd);
            break;
        }
    ck_assert_int_eq(allowed, 3);
    /* once a second has passed since the last drop, new keys report nothing */
    jb->sent_us = 200;
    lease_reply(t, jb, 0, NULL, 0, 800, &done, &fb, &next);
    ck_assert_int_eq(lt_decide(t, "d", &lt_pbig, 3 * S, 1, &r[5], &jd), LEASE_PENDING);
    ck_assert_uint_eq(jd->used, 0);
    lease_reply(t, jd, 0, NULL, 0, 3 * S, &done, &fb, &next);
    lease_table_free(t);
    ck_assert_uint_eq(atomic_load(&budget.count), 0);
}
END_TEST

/* Buckets and lease entries share one budget. */
START_TEST(budget_shared_with_buckets)
{
    struct bucket_budget budget = {0};
    struct lease_table *t = lease_table_new(&lt_cfg, 1);
    struct bucket_table *b = bucket_table_new(1);
    struct bucket_result res;
    struct lease_job *j;
    struct lt_req r;

    atomic_store(&budget.max, 4);
    lease_table_set_budget(t, &budget);
    bucket_table_set_budget(b, &budget);
    for (int i = 0; i < 4; i++) {
        char key[8];
        snprintf(key, sizeof(key), "b%d", i);
        bucket_table_take(b, "r", key, strlen(key), &lt_p10, 0, 1, &res);
    }
    ck_assert_int_eq(lt_decide(t, "l", &lt_pbig, 0, 1, &r, &j), LEASE_PENDING);
    ck_assert_uint_eq(atomic_load(&budget.count), 5);
    bucket_table_take(b, "r", "b4", 2, &lt_p10, 1, 1, &res); /* two buckets go */
    ck_assert_uint_eq(atomic_load(&budget.count), 4);
    ck_assert_uint_eq(bucket_table_count(b) + lease_count(t), 4);
    struct lease_waiter *done = NULL, *fb = NULL;
    struct lease_job *next = NULL;
    lease_reply(t, j, 0, NULL, 0, 10, &done, &fb, &next);
    lease_table_free(t);
    bucket_table_free(b);
    ck_assert_uint_eq(atomic_load(&budget.count), 0);
}
END_TEST

int main(void)
{
    TCase *tc = tcase_create("core");

    CHECK_ADD(tc, timeout_failure_and_down, tick_top_up_give_back_forget, drain_returns_everything,
              failed_job_voids_the_lease, tick_costs_what_is_active, demand_decays_off_the_list,
              short_window_lease_is_spent, eviction_never_loses_a_report,
              budget_shared_with_buckets);
    return check_run_case("lease_tick", tc);
}
