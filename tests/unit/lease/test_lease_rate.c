/* SPDX-License-Identifier: Apache-2.0 */
/* test_lease_rate.c - rate leases in the lease cache (lease_rate.c), with a
 * fake clock and hand-written Redis replies (the script's side is tested in
 * test_scripts_rate.c against a real redis-server). */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "check_util.h"
#include "lease/lease.h"

#define MS 1000ull
#define S 1000000ull

/* interval 100 ms, ttl 1 s, rate leases of 30 s */
static const struct lease_config cfg = {100 * MS, 1 * S, 0.1, 30 * S, 0, 0};
/* 100/10s b 20 */
static const struct bucket_params p = {BUCKET_TOKEN_BUCKET, 100, 10 * S, 20, 0, 0, 10 * 1000, 0, 0, 0};

struct req {
    struct lease_waiter w;
    struct bucket_result res;
};

static int decide(struct lease_table *t, uint64_t now, struct req *r, struct lease_job **job)
{
    memset(r, 0, sizeof(*r));
    r->w.out = &r->res;
    r->w.req = r;
    *job = NULL;
    return lease_decide(t, "k", 1, &p, now, 1, &r->w, &r->res, job);
}

/* {granted, remaining, held, holders, retry_ms, reset_ms, lease_ms, mine, share_ppm, had} */
static void reply(struct lease_table *t, struct lease_job *j, const int64_t v[CLAIM_R_COUNT],
                  uint64_t now, struct lease_waiter **done, struct lease_job **next)
{
    struct lease_waiter *fb = NULL;
    *done = NULL;
    *next = NULL;
    lease_reply(t, j, 1, v, CLAIM_R_COUNT, now, done, &fb, next);
    ck_assert_ptr_null(fb);
}

static struct lease_state peek(struct lease_table *t, uint64_t now)
{
    struct lease_state st;
    ck_assert_int_eq(lease_peek(t, "k", 1, now, &st), 1);
    return st;
}

/* The key is seen at 0 and 0.6 s (token claims of 1, answered), then at
 * 1.2 s: warm (about 1.7 requests/s here, far from hot at 10/s), so that
 * claim asks for a rate lease. Its reply: share 20 % (2 tokens/s), slice 4,
 * 1 taken for the waiter and 4 moved to the local bucket. */
static struct lease_table *warm_up(void)
{
    struct lease_table *t = lease_table_new(&cfg, 1);
    struct lease_job *j, *next;
    struct lease_waiter *done;
    struct req r;

    for (int i = 0; i < 2; i++) {
        uint64_t now = (uint64_t)i * 600 * MS;
        ck_assert_int_eq(decide(t, now, &r, &j), LEASE_PENDING);
        ck_assert_ptr_nonnull(j);
        ck_assert_int_eq(j->rated, 0); /* seen too few times yet */
        j->sent_us = now;
        reply(t, j, (const int64_t[CLAIM_R_COUNT]){1, 19, 1, 1, 0, 50, 1000, 1, 0, 0}, now + 1,
              &done, &next);
        ck_assert(r.res.allowed);
    }
    ck_assert_int_eq(decide(t, 1200 * MS, &r, &j), LEASE_PENDING);
    ck_assert_ptr_nonnull(j);
    ck_assert_int_eq(j->rated, 1);
    ck_assert_uint_eq(j->ttl_ms, 30000);
    ck_assert_uint_eq(j->want, 1);            /* the waiter (tb_claim may add one for the bucket) */
    ck_assert_uint_ge(j->demand_ppm, 150000); /* 2 gaps in 1.2 s: 1.67/s, of 10/s */
    ck_assert_uint_le(j->demand_ppm, 180000);
    ck_assert_uint_eq(j->rate_ppm, 2 * j->demand_ppm);
    j->sent_us = 1200 * MS;
    reply(t, j, (const int64_t[CLAIM_R_COUNT]){5, 15, 4, 1, 0, 0, 30000, 4, 200000, 1}, 1201 * MS,
          &done, &next);
    ck_assert(r.res.allowed);
    ck_assert_ptr_null(next);
    struct lease_state st = peek(t, 1201 * MS);
    ck_assert_uint_eq(st.tokens, 4); /* capped at the slice */
    ck_assert_uint_eq(st.slice, 4);
    ck_assert(st.share_per_s > 1.99 && st.share_per_s < 2.01);
    ck_assert_uint_eq(st.unreported, 0);
    return t;
}

START_TEST(warm_key_spends_and_refills_locally)
{
    struct lease_table *t = warm_up();
    struct lease_job *j;
    struct req r;

    for (int i = 0; i < 4; i++) { /* the slice, spent here, no Redis call */
        ck_assert_int_eq(decide(t, 2 * S, &r, &j), LEASE_DONE);
        ck_assert(r.res.allowed);
        ck_assert_ptr_null(j);
    }
    ck_assert_uint_eq(peek(t, 2 * S).unreported, 0); /* Redis counts the slice, not spends */
    /* 0.6 s at 2 tokens/s: one more token, refilled here */
    ck_assert_int_eq(decide(t, 2600 * MS, &r, &j), LEASE_DONE);
    ck_assert(r.res.allowed);
    ck_assert_ptr_null(j);
    /* empty: this one waits on a claim (still a rate lease's) */
    ck_assert_int_eq(decide(t, 2600 * MS, &r, &j), LEASE_PENDING);
    ck_assert_ptr_nonnull(j);
    ck_assert_int_eq(j->rated, 1);
    ck_assert_uint_eq(j->used, 0);
    lease_reply(t, j, 0, NULL, 0, 2700 * MS, &(struct lease_waiter *){NULL},
                &(struct lease_waiter *){NULL}, &(struct lease_job *){NULL});
    lease_table_free(t);
}
END_TEST

/* A request a second until 14 s: decided here, nothing sent (the lease is
 * neither due for renewal nor holding more than the demand needs). */
static void keep_busy(struct lease_table *t)
{
    struct lease_job *j;
    struct req r;
    for (uint64_t s = 2; s <= 14; s++) {
        ck_assert_int_eq(decide(t, s * S, &r, &j), LEASE_DONE);
        ck_assert(r.res.allowed);
        ck_assert_ptr_null(j);
    }
}

/* In its last quarter, a decision renews the lease in the background. */
START_TEST(prefetch_before_the_end)
{
    struct lease_table *t = warm_up();
    struct lease_job *j, *next;
    struct lease_waiter *done;
    struct req r;
    uint64_t now = 25 * S; /* the lease (sent at 1.2 s) ends at 31.2 s less its margin */

    keep_busy(t);
    ck_assert_int_eq(decide(t, now, &r, &j), LEASE_DONE);
    ck_assert(r.res.allowed);
    ck_assert_ptr_nonnull(j); /* the renewal: nothing waits on it */
    ck_assert_int_eq(j->rated, 1);
    ck_assert_uint_gt(j->rate_ppm, 0);
    ck_assert_uint_eq(j->want, 0);
    j->sent_us = now;
    /* Redis had dropped our lease (had = 0): the 3 tokens left here were
     * counted as spent there; only what this reply grants may be spent. */
    reply(t, j, (const int64_t[CLAIM_R_COUNT]){2, 10, 5, 1, 0, 0, 30000, 5, 200000, 0}, now + 1,
          &done, &next);
    ck_assert_uint_eq(peek(t, now + 1).tokens, 2);
    lease_table_free(t);

    t = warm_up();
    keep_busy(t);
    ck_assert_int_eq(decide(t, now, &r, &j), LEASE_DONE);
    ck_assert_ptr_nonnull(j);
    ck_assert_uint_gt(j->rate_ppm, 0); /* still warm: a renewal, not an end */
    ck_assert_uint_eq(j->returned, 0);
    j->sent_us = now;
    /* It still had it: the 3 left plus 2 more, under the new slice of 5 */
    reply(t, j, (const int64_t[CLAIM_R_COUNT]){2, 10, 5, 1, 0, 0, 30000, 5, 200000, 4}, now + 1,
          &done, &next);
    ck_assert_uint_eq(peek(t, now + 1).tokens, 5);
    ck_assert(peek(t, now + 1).lease_left_us > 29 * S);
    lease_table_free(t);
}
END_TEST

/* A lease whose key slowed down below the line ends at its renewal, its
 * local tokens given back with that call. */
START_TEST(slowed_key_ends_and_gives_back)
{
    struct lease_table *t = warm_up();
    struct lease_job *j;
    struct req r;

    /* one request in 24 s: 0.04/s here, about one per rate_ttl */
    ck_assert_int_eq(decide(t, 25 * S, &r, &j), LEASE_DONE);
    ck_assert(r.res.allowed);
    ck_assert_ptr_nonnull(j);
    ck_assert_int_eq(j->rated, 1);
    ck_assert_uint_eq(j->rate_ppm, 0); /* the end of the rate lease */
    ck_assert_uint_eq(j->returned, 3); /* its 4 refilled, less this request */
    ck_assert_uint_eq(peek(t, 25 * S).tokens, 0);
    lease_reply(t, j, 0, NULL, 0, 25 * S + 1, &(struct lease_waiter *){NULL},
                &(struct lease_waiter *){NULL}, &(struct lease_job *){NULL});
    lease_table_free(t);
}
END_TEST

/* A lease no request used for half its life goes back at a tick, its
 * unspent tokens with it: the report says slice - tokens spent. */
START_TEST(quiet_lease_given_back)
{
    struct lease_table *t = warm_up();
    struct lease_job *jobs = NULL, *j;
    struct req r;

    ck_assert_int_eq(decide(t, 2 * S, &r, &j), LEASE_DONE); /* 3 left */
    lease_tick(t, 10 * S, 1, &jobs);
    ck_assert_ptr_null(jobs); /* 8 s quiet: not yet */
    lease_tick(t, 18 * S, 1, &jobs);
    ck_assert_ptr_nonnull(jobs);
    ck_assert_uint_eq(jobs->kind, LEASE_JOB_RETURN);
    ck_assert_uint_eq(jobs->used, 0);     /* refilled to the full slice by then */
    ck_assert_uint_eq(jobs->returned, 4); /* all of it goes back */
    ck_assert_uint_eq(peek(t, 18 * S).tokens, 0);
    ck_assert(peek(t, 18 * S).share_per_s == 0);
    struct lease_waiter *done, *fb;
    struct lease_job *next;
    lease_reply(t, jobs, 1, (const int64_t[CLAIM_R_COUNT]){0, 20, 0, 0, 0, 0, 0, 0, 0, 4},
                CLAIM_R_COUNT, 18 * S + 1, &done, &fb, &next);
    lease_table_free(t);
}
END_TEST

/* A key that turns hot leaves its rate lease: the next claim asks for no
 * share (token leases take over). */
START_TEST(hot_key_ends_rate_lease)
{
    struct lease_table *t = warm_up();
    struct lease_job *j, *next, *none;
    struct lease_waiter *done;
    struct req r[30];

    for (int i = 0; i < 4; i++)
        ck_assert_int_eq(decide(t, 2 * S, &r[0], &j), LEASE_DONE);
    ck_assert_int_eq(decide(t, 2 * S, &r[0], &j), LEASE_PENDING); /* empty: a claim */
    ck_assert_ptr_nonnull(j);
    ck_assert_int_eq(j->rated, 1);
    ck_assert_uint_gt(j->rate_ppm, 0);
    for (int i = 1; i < 30; i++) { /* 30 more in no time: hot */
        ck_assert_int_eq(decide(t, 2 * S, &r[i], &none), LEASE_PENDING);
        ck_assert_ptr_null(none);
    }
    j->sent_us = 2 * S;
    reply(t, j, (const int64_t[CLAIM_R_COUNT]){2, 10, 4, 1, 0, 0, 30000, 4, 200000, 4}, 2 * S + 1,
          &done, &next);
    ck_assert_ptr_nonnull(next); /* for the waiters left */
    ck_assert_int_eq(next->rated, 1);
    ck_assert_uint_eq(next->rate_ppm, 0);
    next->sent_us = 2 * S + 1;
    /* Redis ends the share: slice 0, the tokens taken for the waiters only */
    reply(t, next, (const int64_t[CLAIM_R_COUNT]){10, 0, 4, 1, 100, 0, 0, 0, 0, 4}, 2 * S + 2,
          &done, &j);
    struct lease_state st = peek(t, 2 * S + 2);
    ck_assert(st.share_per_s == 0);
    ck_assert_uint_eq(st.tokens, 0); /* none kept: they were for the waiters */
    lease_table_free(t);
}
END_TEST

/* A failed call voids the rate lease too: nothing more is spent from it,
 * and the next claim reports the slice spent. */
START_TEST(failure_voids_rate_lease)
{
    struct lease_table *t = warm_up();
    struct lease_job *j, *next;
    struct lease_waiter *done, *fb;
    struct req r;

    keep_busy(t);
    ck_assert_int_eq(decide(t, 25 * S, &r, &j), LEASE_DONE); /* a prefetch */
    ck_assert_ptr_nonnull(j);
    lease_reply(t, j, 0, NULL, 0, 25 * S + 1, &done, &fb, &next);
    struct lease_state st = peek(t, 25 * S + 1);
    ck_assert_uint_eq(st.tokens, 0);
    ck_assert(st.share_per_s == 0);
    ck_assert(st.voided);
    ck_assert_int_eq(decide(t, 25 * S + 2, &r, &j), LEASE_PENDING);
    ck_assert_ptr_nonnull(j);
    ck_assert_uint_ge(j->used, 1000000000000ull);
    lease_reply(t, j, 0, NULL, 0, 25 * S + 3, &done, &fb, &next);
    lease_table_free(t);
}
END_TEST

/* rate_ttl 0 (rate_leases = off): the same traffic keeps token leases. */
START_TEST(off_keeps_token_leases)
{
    const struct lease_config off = {100 * MS, 1 * S, 0.1, 0, 0, 0};
    struct lease_table *t = lease_table_new(&off, 1);
    struct lease_job *j, *next;
    struct lease_waiter *done;
    struct req r;

    for (int i = 0; i < 6; i++) {
        uint64_t now = (uint64_t)i * 600 * MS;
        ck_assert_int_eq(decide(t, now, &r, &j), LEASE_PENDING);
        ck_assert_int_eq(j->rated, 0);
        j->sent_us = now;
        reply(t, j, (const int64_t[CLAIM_R_COUNT]){1, 19, 1, 1, 0, 50, 1000, 1, 0, 0}, now + 1,
              &done, &next);
    }
    lease_table_free(t);
}
END_TEST

int main(void)
{
    TCase *tc = tcase_create("core");

    CHECK_ADD(tc, warm_key_spends_and_refills_locally, prefetch_before_the_end,
              quiet_lease_given_back, slowed_key_ends_and_gives_back, hot_key_ends_rate_lease,
              failure_voids_rate_lease, off_keeps_token_leases);
    return check_run_case("lease_rate", tc);
}
