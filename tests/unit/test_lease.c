/* test_lease.c - the lease cache's logic with a fake clock and hand-written
 * Redis replies (the scripts themselves are tested in test_scripts.c). */
#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lease/lease.h"
#include "metrics/metrics.h"

#define MS 1000ull
#define S 1000000ull

/* token leases only; no prefetch: these tests follow each call (see prefetch_*) */
static const struct lease_config cfg = {100 * MS, 1 * S, 0.1, 0, 0, 0};
static const struct bucket_params p10 = {0, 10, 60 * S, 10};      /* 10/1m burst 10 */
static const struct bucket_params pbig = {0, 10000, 1 * S, 1000}; /* 10000/1s burst 1000 */

struct req {
    struct lease_waiter w;
    struct bucket_result res;
};

static int decide(struct lease_table *t, const char *key, const struct bucket_params *p,
                  uint64_t now, int up, struct req *r, struct lease_job **job)
{
    memset(r, 0, sizeof(*r));
    r->w.out = &r->res;
    r->w.req = r;
    *job = NULL;
    return lease_decide(t, key, strlen(key), p, now, up, &r->w, &r->res, job);
}

/* reply: {granted, remaining, held, holders, retry_ms, reset_ms, lease_ms, mine}, then
 * share_ppm 0 (a token lease) and had (what Redis held for us before: mine - granted) */
static void reply(struct lease_table *t, struct lease_job *j, const int64_t v[8], uint64_t now,
                  struct lease_waiter **done, struct lease_waiter **fb, struct lease_job **next)
{
    int64_t w[CLAIM_R_COUNT];
    memcpy(w, v, 8 * sizeof(*v));
    w[CLAIM_R_SHARE_PPM] = 0;
    w[CLAIM_R_HAD] = v[CLAIM_R_MINE] > v[CLAIM_R_GRANTED] ? v[CLAIM_R_MINE] - v[CLAIM_R_GRANTED] : 0;
    *done = *fb = NULL;
    *next = NULL;
    lease_reply(t, j, 1, w, CLAIM_R_COUNT, now, done, fb, next);
}

static int count(struct lease_waiter *w)
{
    int n = 0;
    for (; w; w = w->next)
        n++;
    return n;
}

START_TEST(claim_then_local)
{
    struct lease_table *t = lease_table_new(&cfg, 4);
    struct lease_job *j, *next;
    struct lease_waiter *done, *fb;
    struct req r[3];

    ck_assert_int_eq(decide(t, "k", &pbig, 10 * S, 1, &r[0], &j), LEASE_PENDING);
    ck_assert_ptr_nonnull(j);
    ck_assert_uint_eq(j->kind, LEASE_JOB_CLAIM);
    ck_assert_uint_eq(j->want, 1);
    ck_assert_uint_eq(j->used, 0);
    /* arrivals during the claim wait on it: no second claim */
    ck_assert_int_eq(decide(t, "k", &pbig, 10 * S + 10, 1, &r[1], &next), LEASE_PENDING);
    ck_assert_ptr_null(next);
    j->sent_us = 10 * S;
    const int64_t v[8] = {5, 995, 5, 1, 0, 5, 1000, 5};
    reply(t, j, v, 10 * S + 200, &done, &fb, &next);
    ck_assert_int_eq(count(done), 2);
    ck_assert_int_eq(count(fb), 0);
    ck_assert_ptr_null(next);
    ck_assert(r[0].res.allowed && r[1].res.allowed);
    /* three left locally, spent without Redis */
    for (int i = 0; i < 3; i++) {
        ck_assert_int_eq(decide(t, "k", &pbig, 10 * S + 300, 1, &r[2], &next), LEASE_DONE);
        ck_assert(r[2].res.allowed);
        ck_assert_ptr_null(next);
    }
    /* empty again: the next claim carries the report of the 5 spent */
    ck_assert_int_eq(decide(t, "k", &pbig, 10 * S + 400, 1, &r[2], &j), LEASE_PENDING);
    ck_assert_ptr_nonnull(j);
    ck_assert_uint_eq(j->used, 5);
    ck_assert_uint_ge(j->want, 1);
    ck_assert_uint_le(j->want, 100); /* max_fraction x burst */
    reply(t, j, (const int64_t[8]){0, 0, 0, 0, 1, 0, 0, 0}, 10 * S + 500, &done, &fb, &next);
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
    struct req r;
    uint64_t now = 10 * S;

    ck_assert_int_eq(decide(t, "k", &pbig, now, 1, &r, &j), LEASE_PENDING);
    j->sent_us = now;
    reply(t, j, (const int64_t[8]){8, 900, 8, 1, 0, 1, 1000, 8}, now + 100, &done, &fb, &next);
    ck_assert_int_eq(count(done), 1); /* hit 1: 7 tokens left */
    /* hits 2..5 leave 6, 5, 4, 3 tokens: at least half of the hits so far */
    for (int i = 2; i <= 5; i++) {
        ck_assert_int_eq(decide(t, "k", &pbig, now + 200, 1, &r, &next), LEASE_DONE);
        ck_assert(r.res.allowed);
        ck_assert_ptr_null(next);
    }
    /* hit 6 leaves 2, below 6 / 2: a claim goes now, with the 6 spent */
    ck_assert_int_eq(decide(t, "k", &pbig, now + 300, 1, &r, &j), LEASE_DONE);
    ck_assert(r.res.allowed);
    ck_assert_ptr_nonnull(j);
    ck_assert_uint_eq(j->kind, LEASE_JOB_CLAIM);
    ck_assert_uint_eq(j->used, 6);
    ck_assert_uint_ge(j->want, 2 * 6 - 2); /* two intervals at the pace seen */
    j->sent_us = now + 300;
    /* the two left are spent meanwhile, with no second claim */
    for (int i = 0; i < 2; i++) {
        ck_assert_int_eq(decide(t, "k", &pbig, now + 400, 1, &r, &next), LEASE_DONE);
        ck_assert(r.res.allowed);
        ck_assert_ptr_null(next);
    }
    /* Redis now counts 2 + 20 held: 20 left after the 2 spent meanwhile */
    reply(t, j, (const int64_t[8]){20, 800, 22, 1, 0, 1, 1000, 22}, now + 500, &done, &fb, &next);
    ck_assert_int_eq(count(done), 0);
    ck_assert_ptr_null(next);
    int local = 0;
    for (int i = 0; i < 20; i++) {
        int v = decide(t, "k", &pbig, now + 600, 1, &r, &next);
        ck_assert_int_eq(v, LEASE_DONE);
        local++;
        if (next)
            break; /* the next top-up, never a wait */
    }
    ck_assert_ptr_nonnull(next);
    ck_assert_int_lt(local, 20);
    lease_reply(t, next, 0, NULL, 0, now + 700, &done, &fb, &j); /* failed: voided */
    ck_assert_int_eq(decide(t, "k", &pbig, now + 800, 1, &r, &j), LEASE_PENDING);
    lease_reply(t, j, 0, NULL, 0, now + 900, &done, &fb, &next);
    lease_table_free(t);

    /* Redis said its bucket is empty: no top-up claim, it would get nothing */
    t = lease_table_new(&pf, 4);
    decide(t, "k", &pbig, now, 1, &r, &j);
    j->sent_us = now;
    reply(t, j, (const int64_t[8]){8, 0, 8, 1, 0, 1, 1000, 8}, now + 100, &done, &fb, &next);
    for (int i = 0; i < 7; i++) {
        ck_assert_int_eq(decide(t, "k", &pbig, now + 100, 1, &r, &next), LEASE_DONE);
        ck_assert(r.res.allowed);
        ck_assert_ptr_null(next);
    }
    lease_table_free(t);

    /* a lease that lasts at the pace seen: no claim before the tick */
    t = lease_table_new(&pf, 4);
    decide(t, "k", &pbig, now, 1, &r, &j);
    j->sent_us = now;
    reply(t, j, (const int64_t[8]){100, 800, 100, 1, 0, 1, 1000, 100}, now + 100, &done, &fb,
          &next);
    for (int i = 0; i < 60; i++) {
        ck_assert_int_eq(decide(t, "k", &pbig, now + 200, 1, &r, &next), LEASE_DONE);
        ck_assert_ptr_null(next);
    }
    /* Redis down: spend what is held, claim nothing */
    for (int i = 0; i < 39; i++) {
        ck_assert_int_eq(decide(t, "k", &pbig, now + 300, 0, &r, &next), LEASE_DONE);
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
    const struct bucket_params p100 = {0, 100, 1 * S, 50}; /* 100/1s burst 50 */
    struct lease_table *t = lease_table_new(&cfg, 4);
    struct lease_job *j, *next;
    struct lease_waiter *done, *fb;
    struct req r;

    /* 10/1m: the next token, 6 s away, is the wait */
    decide(t, "slow", &p10, 10 * S, 1, &r, &j);
    j->sent_us = 10 * S;
    reply(t, j, (const int64_t[8]){0, 0, 0, 0, 6000, 6000, 0, 0}, 10 * S + 100, &done, &fb,
          &next);
    ck_assert_int_eq(count(done), 1);
    ck_assert(!r.res.allowed);
    ck_assert_uint_eq(r.res.retry_us, 6000 * MS);
    /* 100/1s: 10 tokens an interval, capped at 0.1 x 50 = 5: the next token's
     * 10 ms and 4 more at 10 ms each */
    decide(t, "fast", &p100, 10 * S, 1, &r, &j);
    j->sent_us = 10 * S;
    reply(t, j, (const int64_t[8]){0, 0, 0, 0, 10, 10, 0, 0}, 10 * S + 100, &done, &fb, &next);
    ck_assert(!r.res.allowed);
    ck_assert_uint_eq(r.res.retry_us, 50 * MS);
    ck_assert_int_eq(decide(t, "fast", &p100, 10 * S + 40 * MS, 1, &r, &j), LEASE_DONE);
    ck_assert(!r.res.allowed); /* cached: no call */
    ck_assert_ptr_null(j);
    /* then one claim, which may take the five */
    ck_assert_int_eq(decide(t, "fast", &p100, 10 * S + 51 * MS, 1, &r, &j), LEASE_PENDING);
    ck_assert_ptr_nonnull(j);
    ck_assert_uint_eq(j->kind, LEASE_JOB_CLAIM);
    ck_assert_uint_le(j->want, 5);
    lease_reply(t, j, 0, NULL, 0, 10 * S + 52 * MS, &done, &fb, &next);
    lease_table_free(t);
}
END_TEST

START_TEST(deadline_and_mine_are_authoritative)
{
    struct lease_table *t = lease_table_new(&cfg, 4);
    struct lease_job *j, *next;
    struct lease_waiter *done, *fb;
    struct req r;

    decide(t, "k", &pbig, 0, 1, &r, &j);
    j->sent_us = 0;
    /* granted 10 but Redis says we hold 4 (an older lease had expired there) */
    reply(t, j, (const int64_t[8]){10, 900, 4, 1, 0, 1, 1000, 4}, 1000, &done, &fb, &next);
    int allowed = 1; /* the waiter */
    for (int i = 0; i < 10; i++)
        if (decide(t, "k", &pbig, 2000, 1, &r, &next) == LEASE_DONE && r.res.allowed)
            allowed++;
        else if (next)
            break;
    ck_assert_int_eq(allowed, 4);
    ck_assert_ptr_nonnull(next);
    lease_reply(t, next, 0, NULL, 0, 3000, &done, &fb, &j);
    lease_table_free(t);

    /* past the local deadline (sent + lease_ms - margin) nothing is spent */
    t = lease_table_new(&cfg, 4);
    decide(t, "k", &pbig, 0, 1, &r, &j);
    j->sent_us = 0;
    reply(t, j, (const int64_t[8]){50, 900, 50, 1, 0, 1, 1000, 50}, 1000, &done, &fb, &next);
    ck_assert_int_eq(decide(t, "k", &pbig, 940 * MS, 1, &r, &next), LEASE_DONE);
    ck_assert_int_eq(decide(t, "k", &pbig, 960 * MS, 1, &r, &j), LEASE_PENDING);
    ck_assert_ptr_nonnull(j);
    lease_reply(t, j, 0, NULL, 0, 970 * MS, &done, &fb, &next);
    lease_table_free(t);
}
END_TEST

START_TEST(negative_cache)
{
    struct lease_table *t = lease_table_new(&cfg, 4);
    struct lease_job *j, *next;
    struct lease_waiter *done, *fb;
    struct req r[2];

    decide(t, "k", &p10, 0, 1, &r[0], &j);
    decide(t, "k", &p10, 1, 1, &r[1], &next);
    j->sent_us = 0;
    /* empty: next token in 6 s */
    reply(t, j, (const int64_t[8]){0, 0, 0, 0, 6000, 60000, 0, 0}, 1000, &done, &fb, &next);
    ck_assert_int_eq(count(done), 2);
    ck_assert_ptr_null(next);
    ck_assert(!r[0].res.allowed && !r[1].res.allowed);
    ck_assert_uint_eq(r[0].res.retry_us, 6 * S);
    ck_assert_uint_eq(r[0].res.remaining, 0);
    /* remembered: blocked locally until then, no Redis call */
    ck_assert_int_eq(decide(t, "k", &p10, 3 * S + 1000, 1, &r[0], &next), LEASE_DONE);
    ck_assert_ptr_null(next);
    ck_assert(!r[0].res.allowed);
    ck_assert_uint_eq(r[0].res.retry_us, 3 * S);
    /* then one probe claim */
    ck_assert_int_eq(decide(t, "k", &p10, 6 * S + 1000, 1, &r[0], &j), LEASE_PENDING);
    ck_assert_ptr_nonnull(j);
    j->sent_us = 6 * S + 1000;
    reply(t, j, (const int64_t[8]){1, 0, 1, 1, 6000, 60000, 1000, 1}, 6 * S + 2000, &done, &fb,
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
    struct lease_table *t = lease_table_new(&cfg, 4);
    struct lease_job *j, *next;
    struct lease_waiter *done, *fb;
    struct lease_state st;
    struct req r;

    ck_assert_int_eq(lease_peek(t, "k", 1, 0, &st), 0);
    ck_assert_int_eq(lease_forget(t, "k", 1, 0, 10, 0, 0), 0);
    decide(t, "k", &p10, 0, 1, &r, &j);
    ck_assert_int_eq(lease_peek(t, "k", 1, 10, &st), 1);
    ck_assert_int_eq(st.inflight, LEASE_JOB_CLAIM);
    ck_assert_uint_eq(st.waiting, 1);
    ck_assert_int_eq(st.known, 0);
    j->sent_us = 0;
    /* granted 3 of what is left; another agent holds 2 */
    reply(t, j, (const int64_t[8]){3, 0, 5, 2, 6000, 60000, 1000, 3}, 1000, &done, &fb, &next);
    decide(t, "k", &p10, 2000, 1, &r, &next);
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
    decide(t, "k", &p10, 4000, 1, &r, &next); /* the last one */
    ck_assert(r.res.allowed);
    ck_assert_int_eq(decide(t, "k", &p10, 5000, 1, &r, &j), LEASE_PENDING);
    j->sent_us = 5000;
    ck_assert_uint_eq(j->used, 3);
    /* the 3 reported spent; nothing left: the other agent holds 2 */
    reply(t, j, (const int64_t[8]){0, 0, 2, 1, 6000, 60000, 0, 0}, 6000, &done, &fb, &next);
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
    ck_assert_int_eq(decide(t, "k", &p10, 9000, 1, &r, &j), LEASE_PENDING);
    ck_assert_ptr_nonnull(j);
    lease_reply(t, j, 0, NULL, 0, 10000, &done, &fb, &next);
    lease_table_free(t);
}
END_TEST

START_TEST(follow_up_claim_for_uncovered_waiters)
{
    struct lease_table *t = lease_table_new(&cfg, 4);
    struct lease_job *j, *next;
    struct lease_waiter *done, *fb;
    struct req r[5];

    decide(t, "k", &pbig, 0, 1, &r[0], &j);
    for (int i = 1; i < 5; i++)
        decide(t, "k", &pbig, 1, 1, &r[i], &next);
    j->sent_us = 0;
    reply(t, j, (const int64_t[8]){1, 500, 1, 1, 0, 1, 1000, 1}, 100, &done, &fb, &next);
    ck_assert_int_eq(count(done), 1);
    ck_assert_ptr_nonnull(next);          /* Redis has tokens: ask again */
    ck_assert_uint_ge(next->want, 4);     /* for the four still waiting */
    ck_assert_uint_eq(next->used, 1);
    next->sent_us = 100;
    struct lease_job *n2;
    reply(t, next, (const int64_t[8]){4, 496, 4, 1, 0, 1, 1000, 4}, 200, &done, &fb, &n2);
    ck_assert_int_eq(count(done), 4);
    ck_assert_ptr_null(n2);
    lease_table_free(t);
}
END_TEST

START_TEST(timeout_failure_and_down)
{
    struct lease_table *t = lease_table_new(&cfg, 4);
    struct lease_job *j, *next;
    struct lease_waiter *done = NULL, *fb = NULL;
    struct req r[3];

    decide(t, "k", &pbig, 0, 1, &r[0], &j);
    j->sent_us = 0;
    lease_timeout(t, j, &fb);
    ck_assert_int_eq(count(fb), 1);
    ck_assert(fb->fallback);
    /* the late reply still lands in the lease */
    reply(t, j, (const int64_t[8]){3, 500, 3, 1, 0, 1, 1000, 3}, 150 * MS, &done, &fb, &next);
    ck_assert_int_eq(count(done), 0);
    ck_assert_int_eq(decide(t, "k", &pbig, 160 * MS, 1, &r[1], &next), LEASE_DONE);
    ck_assert(r[1].res.allowed);
    /* Redis down: a valid lease is still spent; without one, fall back */
    ck_assert_int_eq(decide(t, "k", &pbig, 170 * MS, 0, &r[1], &next), LEASE_DONE);
    ck_assert_int_eq(decide(t, "k", &pbig, 170 * MS, 0, &r[1], &next), LEASE_DONE);
    ck_assert_int_eq(decide(t, "k", &pbig, 170 * MS, 0, &r[1], &next), LEASE_DOWN);
    /* a failed claim sends its waiters to the fallback */
    ck_assert_int_eq(decide(t, "k", &pbig, 180 * MS, 1, &r[2], &j), LEASE_PENDING);
    done = fb = NULL;
    lease_reply(t, j, 0, NULL, 0, 190 * MS, &done, &fb, &next);
    ck_assert_int_eq(count(fb), 1);
    ck_assert_int_eq(count(done), 0);
    lease_table_free(t);
}
END_TEST

START_TEST(tick_top_up_give_back_forget)
{
    struct lease_table *t = lease_table_new(&cfg, 4);
    struct lease_job *j, *next, *jobs;
    struct lease_waiter *done, *fb;
    struct req r;
    uint64_t now = 0;

    decide(t, "k", &pbig, now, 1, &r, &j);
    j->sent_us = now;
    reply(t, j, (const int64_t[8]){60, 900, 60, 1, 0, 1, 1000, 60}, now + 100, &done, &fb, &next);
    /* 50 decisions in the first interval: 10 tokens left, less than demand */
    for (int i = 0; i < 50; i++)
        ck_assert_int_eq(decide(t, "k", &pbig, now + 1000, 1, &r, &next), LEASE_DONE);
    jobs = NULL;
    lease_tick(t, 100 * MS, 1, &jobs);
    ck_assert_ptr_nonnull(jobs);
    ck_assert_uint_eq(jobs->kind, LEASE_JOB_CLAIM);
    ck_assert_uint_eq(jobs->used, 51);
    ck_assert_uint_gt(jobs->want, 10);
    ck_assert_ptr_null(jobs->next);
    jobs->sent_us = 100 * MS;
    reply(t, jobs, (const int64_t[8]){40, 900, 50, 1, 0, 1, 1000, 50}, 101 * MS, &done, &fb,
          &next);
    /* a tick without demand gives the lease back */
    jobs = NULL;
    lease_tick(t, 200 * MS, 1, &jobs);
    ck_assert_ptr_nonnull(jobs);
    ck_assert_uint_eq(jobs->kind, LEASE_JOB_RETURN);
    ck_assert_uint_eq(jobs->returned, 50);
    reply(t, jobs, (const int64_t[8]){0, 1000, 0, 0, 0, 0, 0, 0}, 201 * MS, &done, &fb, &next);
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
    struct lease_table *t = lease_table_new(&cfg, 4);
    struct lease_job *j, *next, *jobs = NULL;
    struct lease_waiter *done, *fb;
    struct req r;
    char key[8];
    int n = 0;

    for (int k = 0; k < 20; k++) {
        snprintf(key, sizeof(key), "k%d", k);
        decide(t, key, &pbig, 0, 1, &r, &j);
        j->sent_us = 0;
        reply(t, j, (const int64_t[8]){7, 900, 7, 1, 0, 1, 1000, 7}, 10, &done, &fb, &next);
    }
    lease_drain(t, 20, &jobs);
    for (; jobs; jobs = next) {
        next = jobs->next;
        ck_assert_uint_eq(jobs->kind, LEASE_JOB_RETURN);
        ck_assert_uint_eq(jobs->returned, 6);
        ck_assert_uint_eq(jobs->used, 1);
        n++;
        struct lease_job *nx;
        reply(t, jobs, (const int64_t[8]){0, 906, 0, 0, 0, 0, 0, 0}, 30, &done, &fb, &nx);
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
    struct lease_table *t = lease_table_new(&cfg, 4);
    struct lease_job *j, *next, *jobs = NULL;
    struct lease_waiter *done, *fb;
    struct req r;
    char key[32];
    const int64_t v[8] = {1, 9, 1, 1, 0, 6000, 1000, 1};
    const size_t nkeys = 20000;

    for (size_t i = 0; i < nkeys; i++) {
        snprintf(key, sizeof(key), "k%zu", i);
        ck_assert_int_eq(decide(t, key, &p10, 10 * S, 1, &r, &j), LEASE_PENDING);
        j->sent_us = 10 * S;
        reply(t, j, v, 10 * S + 100, &done, &fb, &next);
        ck_assert_int_eq(count(done), 1); /* spent at once: nothing held locally */
    }
    ck_assert_uint_eq(lease_count(t), nkeys);
    ck_assert_uint_eq(lease_active(t), nkeys); /* seen in this tick */
    lease_tick(t, 10 * S + 100 * MS, 1, &jobs);
    ck_assert_ptr_null(jobs); /* seen once: no top-up, nothing to give back */
    ck_assert_uint_eq(lease_active(t), 0);
    ck_assert_uint_eq(lease_count(t), nkeys); /* Redis still holds their leases */
    /* one key stays busy: the only one a tick walks */
    ck_assert_int_eq(decide(t, "k0", &p10, 10 * S + 150 * MS, 1, &r, &j), LEASE_PENDING);
    ck_assert_uint_eq(lease_active(t), 1);
    j->sent_us = 10 * S + 150 * MS;
    reply(t, j, v, 10 * S + 151 * MS, &done, &fb, &next);
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
    struct lease_table *t = lease_table_new(&cfg, 1);
    struct lease_job *j, *next, *jobs = NULL;
    struct lease_waiter *done, *fb;
    struct req r;
    uint64_t now = 10 * S;
    const int64_t v[8] = {1, 999, 1, 1, 0, 1, 1000, 1};

    /* 8 hits in one tick: demand 4 after it */
    for (int i = 0; i < 8; i++) {
        int got = decide(t, "k", &pbig, now, 1, &r, &j);
        if (got == LEASE_PENDING && j) {
            j->sent_us = now;
            reply(t, j, v, now, &done, &fb, &next);
        }
    }
    lease_tick(t, now += 100 * MS, 0, &jobs); /* redis down: no jobs, demand 4 */
    ck_assert_ptr_null(jobs);
    /* two idle ticks (off the list): 4 -> 2 -> 1 */
    lease_tick(t, now += 100 * MS, 0, &jobs);
    lease_tick(t, now += 100 * MS, 0, &jobs);
    ck_assert_uint_eq(lease_active(t), 0);
    /* a request now: claim = waiting + ceil(2 * demand) - tokens = 1 + 2 */
    ck_assert_int_eq(decide(t, "k", &pbig, now + 1, 1, &r, &j), LEASE_PENDING);
    ck_assert_ptr_nonnull(j);
    ck_assert_uint_eq(j->want, 3);
    free(j); /* the caller's until replied */
    lease_table_free(t);
}
END_TEST

START_TEST(failed_job_voids_the_lease)
{
    struct lease_table *t = lease_table_new(&cfg, 4);
    struct lease_job *j, *next, *jobs = NULL;
    struct lease_waiter *done, *fb;
    struct req r;
    int allowed = 0;

    decide(t, "k", &pbig, 0, 1, &r, &j);
    j->sent_us = 0;
    reply(t, j, (const int64_t[8]){10, 990, 10, 1, 0, 1, 1000, 10}, 100, &done, &fb, &next);
    allowed++; /* the waiter */
    for (int i = 0; i < 7; i++)
        if (decide(t, "k", &pbig, 1000, 1, &r, &next) == LEASE_DONE && r.res.allowed)
            allowed++;
    ck_assert_int_eq(allowed, 8);
    /* the top-up carrying the report of 8 spent fails */
    lease_tick(t, 100 * MS, 1, &jobs);
    ck_assert_ptr_nonnull(jobs);
    ck_assert_uint_eq(jobs->used, 8);
    done = fb = NULL;
    lease_reply(t, jobs, 0, NULL, 0, 101 * MS, &done, &fb, &next);
    /* the 2 unspent are not spent any more: the next decision claims */
    ck_assert_int_eq(decide(t, "k", &pbig, 102 * MS, 1, &r, &j), LEASE_PENDING);
    ck_assert_ptr_nonnull(j);
    ck_assert_uint_ge(j->used, 10); /* "all I held is spent" (capped by Redis) */
    j->sent_us = 102 * MS;
    /* Redis (which never saw the lost report) settles all 10 and grants 3 */
    reply(t, j, (const int64_t[8]){3, 977, 3, 1, 0, 1, 1000, 3}, 103 * MS, &done, &fb, &next);
    allowed++; /* the waiter */
    for (int i = 0; i < 10; i++)
        if (decide(t, "k", &pbig, 104 * MS, 1, &r, &next) == LEASE_DONE && r.res.allowed)
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
    static const struct bucket_params sw = {BUCKET_SLIDING_WINDOW, 100, 10 * S, 100};
    struct lease_table *t = lease_table_new(&cfg, 1);
    struct lease_job *j, *next;
    struct lease_waiter *done, *fb;
    struct req r[2];

    ck_assert_int_eq(decide(t, "w", &sw, 10 * S, 1, &r[0], &j), LEASE_PENDING);
    j->sent_us = 10 * S;
    reply(t, j, (const int64_t[8]){1, 90, 1, 1, 0, 15000, 30, 1}, 10 * S + 1 * MS, &done, &fb,
          &next);
    ck_assert_int_eq(count(done), 1);
    ck_assert(r[0].res.allowed);
    ck_assert_ptr_null(next);

    /* A grant whose lease ended before its reply came cannot be spent: it
     * goes back with the follow-up claim instead of staying charged. */
    ck_assert_int_eq(decide(t, "w", &sw, 12 * S, 1, &r[1], &j), LEASE_PENDING);
    j->sent_us = 12 * S;
    reply(t, j, (const int64_t[8]){2, 88, 2, 1, 0, 15000, 2, 2}, 12 * S + 5 * MS, &done, &fb,
          &next);
    ck_assert_int_eq(count(done), 0);
    ck_assert_ptr_nonnull(next);
    ck_assert_uint_eq(next->kind, LEASE_JOB_CLAIM);
    ck_assert_uint_eq(next->returned, 2);
    ck_assert_uint_eq(next->used, 0);
    next->sent_us = 12 * S + 5 * MS;
    /* the next window: Redis dropped that lease, grants afresh */
    reply(t, next, (const int64_t[8]){1, 99, 1, 1, 0, 15000, 1000, 1}, 12 * S + 6 * MS, &done,
          &fb, &j);
    ck_assert_int_eq(count(done), 1);
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
    struct lease_table *t = lease_table_new(&cfg, 1); /* one stripe: exact order */
    struct bucket_budget budget = {0};
    struct lease_job *ja, *jb, *jc, *jd, *next;
    struct lease_waiter *done, *fb;
    struct req r[8];
    uint64_t ev0 = atomic_load(&metrics.evictions);

    atomic_store(&budget.max, 2);
    lease_table_set_budget(t, &budget);
    /* a: 5 granted, 1 spent by its waiter: a report pending, lease alive */
    decide(t, "a", &pbig, 0, 1, &r[0], &ja);
    ck_assert_uint_eq(ja->used, 0); /* nothing evicted yet: a plain first claim */
    ja->sent_us = 0;
    reply(t, ja, (const int64_t[8]){5, 995, 5, 1, 0, 5, 1000, 5}, 100, &done, &fb, &next);
    ck_assert_int_eq(count(done), 1);
    /* b: a claim in flight (with its waiter) */
    ck_assert_int_eq(decide(t, "b", &pbig, 200, 1, &r[1], &jb), LEASE_PENDING);
    /* c: over the budget; b must stay, a (the oldest) goes */
    ck_assert_int_eq(decide(t, "c", &pbig, 300, 1, &r[2], &jc), LEASE_PENDING);
    ck_assert_uint_eq(atomic_load(&metrics.evictions), ev0 + 1);
    ck_assert_uint_eq(lease_count(t), 2);
    ck_assert_uint_eq(atomic_load(&budget.count), 2);
    /* c may be a key just dropped: its first claim says all it held is spent */
    ck_assert_uint_ge(jc->used, 1000000000000ull);
    /* c's claim fails: its waiter falls back, nothing points to c any more */
    lease_reply(t, jc, 0, NULL, 0, 350, &done, &fb, &next);
    ck_assert_int_eq(count(fb), 1);
    /* a again: its 1 unreported spend is reported as "all spent", so Redis
     * cannot hand back the 4 it still counts as ours; b still stays, c goes */
    ck_assert_int_eq(decide(t, "a", &pbig, 400, 1, &r[3], &ja), LEASE_PENDING);
    ck_assert_ptr_nonnull(ja);
    ck_assert_uint_ge(ja->used, 5);
    ck_assert_uint_eq(lease_count(t), 2);
    ck_assert_uint_eq(atomic_load(&metrics.evictions), ev0 + 2);
    /* Redis settles all 5 of a's as spent and grants 3: a spends 3, no more */
    ja->sent_us = 400;
    reply(t, ja, (const int64_t[8]){3, 990, 3, 1, 0, 5, 1000, 3}, 500, &done, &fb, &next);
    ck_assert_int_eq(count(done), 1);
    int allowed = 1;
    for (int i = 0; i < 5; i++)
        if (decide(t, "a", &pbig, 600, 1, &r[4], &next) == LEASE_DONE && r[4].res.allowed)
            allowed++;
        else if (next) {
            lease_reply(t, next, 0, NULL, 0, 700, &done, &fb, &jd);
            break;
        }
    ck_assert_int_eq(allowed, 3);
    /* once a second has passed since the last drop, new keys report nothing */
    jb->sent_us = 200;
    lease_reply(t, jb, 0, NULL, 0, 800, &done, &fb, &next);
    ck_assert_int_eq(decide(t, "d", &pbig, 3 * S, 1, &r[5], &jd), LEASE_PENDING);
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
    struct lease_table *t = lease_table_new(&cfg, 1);
    struct bucket_table *b = bucket_table_new(1);
    struct bucket_result res;
    struct lease_job *j;
    struct req r;

    atomic_store(&budget.max, 4);
    lease_table_set_budget(t, &budget);
    bucket_table_set_budget(b, &budget);
    for (int i = 0; i < 4; i++) {
        char key[8];
        snprintf(key, sizeof(key), "b%d", i);
        bucket_table_take(b, "r", key, strlen(key), &p10, 0, 1, &res);
    }
    ck_assert_int_eq(decide(t, "l", &pbig, 0, 1, &r, &j), LEASE_PENDING);
    ck_assert_uint_eq(atomic_load(&budget.count), 5);
    bucket_table_take(b, "r", "b4", 2, &p10, 1, 1, &res); /* two buckets go */
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

/* ---- a cold key's claim as an exact call (exact_cold: the agent's way) ---- */

static const struct lease_config cfg_exact = {100 * MS, 1 * S, 0.1, 0, 1, 0};

static void exact_reply(struct lease_table *t, struct lease_job *j, int ok, int64_t allowed,
                        int64_t remaining, int64_t retry_ms, uint64_t now,
                        struct lease_waiter **done, struct lease_waiter **fb,
                        struct lease_job **next)
{
    int64_t v[EXACT_R_COUNT] = {[EXACT_R_ALLOWED] = allowed, [EXACT_R_REMAINING] = remaining,
                                [EXACT_R_RETRY_MS] = retry_ms, [EXACT_R_RESET_MS] = 3000};
    *done = *fb = NULL;
    *next = NULL;
    lease_reply(t, j, ok, ok ? v : NULL, ok ? EXACT_R_COUNT : 0, now, done, fb, next);
}

/* A retry_ms at or past the cap (a reply may say any integer) stays at the
 * cap once the interval's worth is added: the answer's retry and the cached
 * block never pass BUCKET_MAX_PERIOD_US (fuzz_reply found 2^53 + 90 ms). */
START_TEST(blocked_retry_keeps_the_cap)
{
    const struct bucket_params p100 = {0, 100, 1 * S, 50}; /* 5 tokens added a block */
    static const int64_t retries[] = {9999999999999, INT64_MAX, (int64_t)(BUCKET_MAX_PERIOD_US / MS),
                                      (int64_t)(BUCKET_MAX_PERIOD_US / MS) - 1};
    struct lease_job *j, *next;
    struct lease_waiter *done, *fb;
    struct req r;

    for (size_t i = 0; i < sizeof(retries) / sizeof(retries[0]); i++) {
        struct lease_table *t = lease_table_new(&cfg, 4);
        decide(t, "fast", &p100, 10 * S, 1, &r, &j);
        j->sent_us = 10 * S;
        reply(t, j, (const int64_t[8]){0, 0, 0, 0, retries[i], 10, 0, 0}, 10 * S, &done, &fb,
              &next);
        ck_assert(!r.res.allowed);
        ck_assert_uint_le(r.res.retry_us, BUCKET_MAX_PERIOD_US);
        ck_assert_uint_ge(r.res.retry_us, BUCKET_MAX_PERIOD_US - 1000 * MS);
        ck_assert_uint_le(r.res.reset_us, BUCKET_MAX_PERIOD_US);
        ck_assert_int_eq(decide(t, "fast", &p100, 11 * S, 1, &r, &j), LEASE_DONE);
        ck_assert(!r.res.allowed);
        ck_assert_uint_le(r.res.retry_us, BUCKET_MAX_PERIOD_US);
        lease_table_free(t);

        /* the same through an exact denial (fuzz_reply's reproducer) */
        t = lease_table_new(&cfg_exact, 4);
        decide(t, "fast", &p100, 10 * S, 1, &r, &j);
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
    struct req r[3];

    ck_assert_int_eq(decide(t, "k", &pbig, 10 * S, 1, &r[0], &j), LEASE_PENDING);
    ck_assert_ptr_nonnull(j);
    ck_assert_uint_eq(j->kind, LEASE_JOB_EXACT);
    ck_assert_uint_eq(j->want, 1);
    ck_assert_uint_eq(j->used, 0);
    j->sent_us = 10 * S;
    exact_reply(t, j, 1, 1, 999, 0, 10 * S + 500, &done, &fb, &next);
    ck_assert_int_eq(count(done), 1);
    ck_assert_ptr_null(fb);
    ck_assert_ptr_null(next);
    ck_assert(r[0].res.allowed);
    ck_assert_uint_eq(r[0].res.remaining, 999);
    /* nothing was leased: the key's next request asks Redis again, and a key
     * seen twice claims for more than itself (a lease), not exactly */
    ck_assert_int_eq(decide(t, "k", &pbig, 10 * S + 600, 1, &r[1], &j), LEASE_PENDING);
    ck_assert_ptr_nonnull(j);
    ck_assert_uint_eq(j->kind, LEASE_JOB_CLAIM);
    ck_assert_uint_gt(j->want, 1);
    lease_timeout(t, j, &fb);
    ck_assert_int_eq(count(fb), 1);
    exact_reply(t, j, 0, 0, 0, 0, 10 * S + 700, &done, &fb, &next); /* settle it */
    lease_table_free(t);
}
END_TEST

START_TEST(exact_denial_is_cached)
{
    struct lease_table *t = lease_table_new(&cfg_exact, 4);
    struct lease_job *j, *next;
    struct lease_waiter *done, *fb;
    struct req r[2];

    ck_assert_int_eq(decide(t, "k", &p10, 10 * S, 1, &r[0], &j), LEASE_PENDING);
    ck_assert_uint_eq(j->kind, LEASE_JOB_EXACT);
    exact_reply(t, j, 1, 0, 0, 2500, 10 * S, &done, &fb, &next);
    ck_assert_int_eq(count(done), 1);
    ck_assert(!r[0].res.allowed);
    ck_assert_uint_eq(r[0].res.retry_us, 2500 * MS);
    ck_assert_ptr_null(next);
    /* blocked until the retry time without asking Redis */
    ck_assert_int_eq(decide(t, "k", &p10, 12 * S, 1, &r[1], &j), LEASE_DONE);
    ck_assert_ptr_null(j);
    ck_assert(!r[1].res.allowed);
    ck_assert_uint_eq(r[1].res.retry_us, 500 * MS);
    lease_table_free(t);
}
END_TEST

START_TEST(exact_failure_and_arrivals)
{
    struct lease_table *t = lease_table_new(&cfg_exact, 4);
    struct lease_job *j, *j2, *next;
    struct lease_waiter *done, *fb;
    struct req r[4];

    /* a failed exact call: its waiter goes to the fallback; nothing was held,
     * so nothing is voided (the next call reports no spend) */
    ck_assert_int_eq(decide(t, "a", &pbig, 10 * S, 1, &r[0], &j), LEASE_PENDING);
    ck_assert_uint_eq(j->kind, LEASE_JOB_EXACT);
    exact_reply(t, j, 0, 0, 0, 0, 10 * S, &done, &fb, &next);
    ck_assert_ptr_null(done);
    ck_assert_int_eq(count(fb), 1);
    ck_assert_ptr_null(next);
    ck_assert_int_eq(decide(t, "a", &pbig, 20 * S, 1, &r[1], &j), LEASE_PENDING);
    ck_assert_uint_eq(j->used, 0);
    exact_reply(t, j, 1, 1, 5, 0, 20 * S, &done, &fb, &next);
    ck_assert_ptr_null(next);
    /* requests that come while the exact call is out wait on it; the one it
     * was for is decided by it, the others by a claim sent then */
    ck_assert_int_eq(decide(t, "b", &pbig, 30 * S, 1, &r[1], &j), LEASE_PENDING);
    ck_assert_uint_eq(j->kind, LEASE_JOB_EXACT);
    ck_assert_int_eq(decide(t, "b", &pbig, 30 * S + 1, 1, &r[2], &j2), LEASE_PENDING);
    ck_assert_ptr_null(j2);
    ck_assert_int_eq(decide(t, "b", &pbig, 30 * S + 2, 1, &r[3], &j2), LEASE_PENDING);
    ck_assert_ptr_null(j2);
    exact_reply(t, j, 1, 1, 900, 0, 30 * S + 300, &done, &fb, &next);
    ck_assert_int_eq(count(done), 1);
    ck_assert(r[1].res.allowed);
    ck_assert_ptr_nonnull(next);
    ck_assert_uint_eq(next->kind, LEASE_JOB_CLAIM);
    ck_assert_uint_ge(next->want, 2);
    j = next;
    j->sent_us = 30 * S + 300;
    const int64_t v[8] = {2, 898, 2, 1, 0, 0, 1000, 2};
    reply(t, j, v, 30 * S + 600, &done, &fb, &next);
    ck_assert_int_eq(count(done), 2);
    ck_assert(r[2].res.allowed && r[3].res.allowed);
    /* allowed, but the bucket is dry after it: those who came meanwhile are
     * denied, without a claim, until the next tokens: 10000/1s brings 1000
     * in an interval, a claim takes at most max_fraction x burst = 100, so
     * the wait is the next token's 40 ms and 99 more at 0.1 ms each */
    ck_assert_int_eq(decide(t, "d", &pbig, 35 * S, 1, &r[1], &j), LEASE_PENDING);
    ck_assert_uint_eq(j->kind, LEASE_JOB_EXACT);
    ck_assert_int_eq(decide(t, "d", &pbig, 35 * S + 1, 1, &r[2], &j2), LEASE_PENDING);
    exact_reply(t, j, 1, 1, 0, 40, 35 * S + 300, &done, &fb, &next);
    ck_assert_int_eq(count(done), 2);
    ck_assert_ptr_null(next);
    ck_assert(r[1].res.allowed && !r[2].res.allowed);
    ck_assert_uint_eq(r[2].res.retry_us, 50 * MS);
    ck_assert_int_eq(decide(t, "d", &pbig, 35 * S + 45 * MS, 1, &r[3], &j2), LEASE_DONE);
    ck_assert(!r[3].res.allowed);
    /* a timed-out exact call: later requests do not wait on it, and its late
     * reply decides nothing twice */
    ck_assert_int_eq(decide(t, "c", &pbig, 40 * S, 1, &r[0], &j), LEASE_PENDING);
    ck_assert_uint_eq(j->kind, LEASE_JOB_EXACT);
    lease_timeout(t, j, &fb);
    ck_assert_int_eq(count(fb), 1);
    ck_assert_int_eq(decide(t, "c", &pbig, 40 * S + 1, 1, &r[1], &j2), LEASE_DOWN);
    exact_reply(t, j, 1, 1, 7, 0, 40 * S + 200, &done, &fb, &next);
    ck_assert_ptr_null(done);
    ck_assert_ptr_null(fb);
    ck_assert_ptr_null(next);
    lease_table_free(t);
}
END_TEST

static Suite *lease_suite(void)
{
    Suite *s = suite_create("lease");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, claim_then_local);
    tcase_add_test(tc, prefetch_tops_up_before_dry);
    tcase_add_test(tc, blocked_until_an_intervals_worth);
    tcase_add_test(tc, deadline_and_mine_are_authoritative);
    tcase_add_test(tc, negative_cache);
    tcase_add_test(tc, peek_and_forget);
    tcase_add_test(tc, follow_up_claim_for_uncovered_waiters);
    tcase_add_test(tc, timeout_failure_and_down);
    tcase_add_test(tc, tick_top_up_give_back_forget);
    tcase_add_test(tc, drain_returns_everything);
    tcase_add_test(tc, failed_job_voids_the_lease);
    tcase_add_test(tc, tick_costs_what_is_active);
    tcase_add_test(tc, demand_decays_off_the_list);
    tcase_add_test(tc, short_window_lease_is_spent);
    tcase_add_test(tc, eviction_never_loses_a_report);
    tcase_add_test(tc, budget_shared_with_buckets);
    tcase_add_test(tc, cold_key_goes_exact);
    tcase_add_test(tc, exact_denial_is_cached);
    tcase_add_test(tc, exact_failure_and_arrivals);
    tcase_add_test(tc, blocked_retry_keeps_the_cap);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(lease_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
