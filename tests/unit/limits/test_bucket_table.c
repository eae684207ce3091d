/* SPDX-License-Identifier: Apache-2.0 */
/* test_bucket_table.c - the bucket table: keys per rule, reloads, LRU
 * eviction within the memory budget, expiry (and how much of it one call
 * visits), a million keys, limits, peek and drop, and threads taking and
 * expiring at once; a take by the rule's seed. */
#include "limits/bucket.h"
#include "metrics/metrics.h"

#include <check.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bucket_fixture.h"
#include "check_util.h"

/* ---- table -------------------------------------------------------------- */

/* params_of for the table tests: a small list of named rules. */
struct rule_set {
    const char *names[4];
    struct bucket_params p[4];
    int n;
};

static const struct bucket_params *rule_params(void *ctx, const char *rule)
{
    struct rule_set *rs = ctx;
    for (int i = 0; i < rs->n; i++)
        if (strcmp(rs->names[i], rule) == 0)
            return &rs->p[i];
    return NULL;
}

static int ttake(struct bucket_table *t, const char *rule, const char *key,
                 const struct bucket_params *p, uint64_t now, struct bucket_result *r)
{
    ck_assert_int_eq(bucket_table_take(t, rule, key, strlen(key), p, now, 1, r), 0);
    return r->allowed;
}

START_TEST(test_table_keys)
{
    struct bucket_table *t = bucket_table_new(8);
    struct bucket_params p = bt_params(TB, 3, MINUTE, 3);
    struct bucket_result r;

    ck_assert_ptr_nonnull(t);
    for (int i = 0; i < 3; i++)
        ck_assert(ttake(t, "r", "a", &p, 0, &r));
    ck_assert(!ttake(t, "r", "a", &p, 0, &r)); /* same key shares the bucket */
    ck_assert(ttake(t, "r", "b", &p, 0, &r));  /* other key: own bucket */
    ck_assert_uint_eq(r.remaining, 2);
    ck_assert(ttake(t, "r2", "a", &p, 0, &r)); /* other rule: own bucket */
    ck_assert_uint_eq(r.remaining, 2);
    /* The split between rule and key is part of the identity. */
    ck_assert(ttake(t, "ab", "c", &p, 0, &r));
    ck_assert(ttake(t, "a", "bc", &p, 0, &r));
    ck_assert_uint_eq(r.remaining, 2);
    /* Keys are bytes: embedded NULs and the empty key work. */
    ck_assert_int_eq(bucket_table_take(t, "r", "x\0y", 3, &p, 0, 1, &r), 0);
    ck_assert_int_eq(bucket_table_take(t, "r", "x\0z", 3, &p, 0, 1, &r), 0);
    ck_assert_uint_eq(r.remaining, 2);
    ck_assert_int_eq(bucket_table_take(t, "r", "", 0, &p, 0, 1, &r), 0);
    ck_assert_int_eq(bucket_table_take(t, "r", "", 0, &p, 0, 1, &r), 0);
    ck_assert_uint_eq(r.remaining, 1);
    ck_assert_uint_eq(bucket_table_count(t), 8);
    bucket_table_free(t);
    bucket_table_free(NULL);
}
END_TEST

/* A refund goes to the bucket of (rule, key) only when there is one; it
 * never makes one. */
START_TEST(test_table_refund)
{
    struct bucket_table *t = bucket_table_new(8);
    struct bucket_params p = bt_params(TB, 3, MINUTE, 3);
    struct bucket_result r;
    struct bucket_state st;

    ck_assert_uint_eq(bucket_table_refund(t, "r", "a", 1, &p, 0, 0, 1, &st), 0);
    ck_assert_uint_eq(bucket_table_count(t), 0);
    ck_assert(ttake(t, "r", "a", &p, 0, &r));
    ck_assert(ttake(t, "r", "a", &p, 0, &r));
    ck_assert_uint_eq(bucket_table_refund(t, "r", "a", 1, &p, 0, 0, 1, &st), 1);
    ck_assert_uint_eq(st.remaining, 2);
    ck_assert_uint_eq(bucket_table_refund(t, "r", "b", 1, &p, 0, 0, 1, NULL), 0);
    ck_assert_uint_eq(bucket_table_count(t), 1);
    bucket_table_free(t);
}
END_TEST

/* A take with the rule's seed (what a ruleset keeps per rule) finds the
 * bucket bucket_table_take, refund, peek and drop find, and no other
 * rule's: the seed stands for the name in the hash only. */
START_TEST(test_table_seeded)
{
    struct bucket_table *t = bucket_table_new(8);
    struct bucket_params p = bt_params(TB, 3, MINUTE, 3);
    struct bucket_result r;
    struct bucket_state st;
    uint64_t seed = bucket_rule_seed("rule", 4);

    ck_assert(ttake(t, "rule", "k", &p, 0, &r));
    ck_assert_int_eq(bucket_table_take_seeded(t, "rule", 4, seed, "k", 1, &p, 0, 1, &r), 0);
    ck_assert(r.allowed);
    ck_assert_uint_eq(r.remaining, 1);
    ck_assert_int_eq(bucket_table_peek(t, "rule", "k", 1, &p, 0, &st), 1);
    ck_assert_uint_eq(st.remaining, 1);
    ck_assert_uint_eq(bucket_table_refund(t, "rule", "k", 1, &p, 0, 0, 1, NULL), 1);
    ck_assert(ttake(t, "rule", "k", &p, 0, &r));
    ck_assert_uint_eq(r.remaining, 1);
    /* "rulE" has its own bucket even when handed "rule"'s seed (a hash
     * that collides): names are compared */
    ck_assert_int_eq(bucket_table_take_seeded(t, "rulE", 4, seed, "k", 1, &p, 0, 1, &r), 0);
    ck_assert_uint_eq(r.remaining, 2);
    ck_assert_uint_eq(bucket_table_count(t), 2);
    ck_assert_int_eq(bucket_table_drop(t, "rule", "k", 1), 1);
    ck_assert_int_eq(bucket_table_take_seeded(t, "rule", 4, seed, "k", 1, &p, 0, 1, &r), 0);
    ck_assert_uint_eq(r.remaining, 2);
    bucket_table_free(t);
}
END_TEST

static const struct bucket_params *same_params(void *ctx, const char *rule)
{
    (void)rule;
    return ctx;
}

/* [agent] max_entries: past the budget a new bucket drops the least recently
 * used one of its stripe, which starts full again. One stripe: exact LRU. */
START_TEST(test_table_lru_eviction)
{
    struct bucket_budget budget = {0};
    struct bucket_table *t = bucket_table_new(1);
    struct bucket_params p = bt_params(TB, 1, HOUR, 1);
    struct bucket_result r;
    uint64_t ev0 = atomic_load(&metrics.evictions);

    atomic_store(&budget.max, 3);
    bucket_table_set_budget(t, &budget);
    ck_assert(ttake(t, "r", "a", &p, 0, &r));
    ck_assert(ttake(t, "r", "b", &p, 1, &r));
    ck_assert(ttake(t, "r", "c", &p, 2, &r));
    ck_assert(!ttake(t, "r", "a", &p, 3, &r)); /* a used again: b is the oldest */
    ck_assert_uint_eq(atomic_load(&budget.count), 3);
    ck_assert(ttake(t, "r", "d", &p, 4, &r)); /* drops b */
    ck_assert_uint_eq(bucket_table_count(t), 3);
    ck_assert_uint_eq(atomic_load(&budget.count), 3);
    ck_assert_uint_eq(atomic_load(&metrics.evictions), ev0 + 1);
    ck_assert(!ttake(t, "r", "a", &p, 5, &r)); /* kept: still empty */
    ck_assert(!ttake(t, "r", "c", &p, 6, &r));
    /* b was forgotten: full again, one burst more than the limit (and it
     * drops d, now the oldest) */
    ck_assert(ttake(t, "r", "b", &p, 7, &r));
    ck_assert_uint_eq(atomic_load(&metrics.evictions), ev0 + 2);
    ck_assert(ttake(t, "r", "d", &p, 8, &r));

    /* a lower cap (a reload) is reached back: two dropped per new bucket */
    atomic_store(&budget.max, 1);
    ck_assert(ttake(t, "r", "e", &p, 9, &r));
    ck_assert_uint_eq(bucket_table_count(t), 2);
    ck_assert(ttake(t, "r", "f", &p, 10, &r));
    ck_assert_uint_eq(bucket_table_count(t), 1);
    ck_assert_uint_eq(atomic_load(&budget.count), 1);
    /* idle buckets expire as before, and leave the budget */
    ck_assert_uint_eq(bucket_table_expire(t, 10 * HOUR, 100, same_params, &p), 1);
    ck_assert_uint_eq(atomic_load(&budget.count), 0);
    bucket_table_free(t);
}
END_TEST

/* Many stripes, many keys: the table stays at the budget. */
START_TEST(test_table_budget_many_keys)
{
    struct bucket_budget budget = {0};
    struct bucket_table *t = bucket_table_new(64);
    struct bucket_params p = bt_params(TB, 1, HOUR, 1);
    struct bucket_result r;
    char key[32];

    atomic_store(&budget.max, 1000);
    bucket_table_set_budget(t, &budget);
    for (int i = 0; i < 100000; i++) {
        int n = snprintf(key, sizeof(key), "client-%d", i);
        ck_assert_int_eq(bucket_table_take(t, "r", key, (size_t)n, &p, (uint64_t)i, 1, &r), 0);
        ck_assert_uint_le(atomic_load(&budget.count), 1000 + 64);
    }
    ck_assert_uint_eq(bucket_table_count(t), atomic_load(&budget.count));
    ck_assert_uint_ge(bucket_table_count(t), 1000 - 64);
    /* the most recent keys are still there (and empty) */
    for (int i = 100000 - 10; i < 100000; i++) {
        int n = snprintf(key, sizeof(key), "client-%d", i);
        ck_assert_int_eq(bucket_table_take(t, "r", key, (size_t)n, &p, 100000, 1, &r), 0);
        ck_assert(!r.allowed);
    }
    bucket_table_free(t);
    ck_assert_uint_eq(atomic_load(&budget.count), 0);
}
END_TEST

START_TEST(test_table_reload)
{
    struct bucket_table *t = bucket_table_new(1);
    struct bucket_params p = bt_params(TB, 10, MINUTE, 20);
    struct bucket_result r;

    ttake(t, "r", "k", &p, 0, &r);
    ck_assert_uint_eq(r.remaining, 19);
    p.burst = 5; /* reloaded with a smaller burst: clamp */
    ck_assert(ttake(t, "r", "k", &p, 0, &r));
    ck_assert_uint_eq(r.remaining, 4);
    p.burst = 20; /* and back: no free tokens */
    ck_assert(ttake(t, "r", "k", &p, 0, &r));
    ck_assert_uint_eq(r.remaining, 3);
    /* Switching algorithm starts afresh. */
    p = bt_params(SW, 10, MINUTE, 10);
    ck_assert(ttake(t, "r", "k", &p, 0, &r));
    ck_assert_uint_eq(r.remaining, 9);
    ck_assert_uint_eq(bucket_table_count(t), 1);
    bucket_table_free(t);
}
END_TEST

START_TEST(test_table_expire)
{
    struct bucket_table *t = bucket_table_new(4);
    struct rule_set rs = {
        {"tb", "sw"}, {bt_params(TB, 10, MINUTE, 10), bt_params(SW, 10, MINUTE, 10)}, 2};
    struct bucket_result r;

    ttake(t, "tb", "light", &rs.p[0], 0, &r); /* refilled after 6 s */
    for (int i = 0; i < 10; i++)
        ttake(t, "tb", "heavy", &rs.p[0], 0, &r); /* full after 60 s */
    ttake(t, "sw", "a", &rs.p[1], 0, &r);         /* empty after 120 s */
    ck_assert_uint_eq(bucket_table_count(t), 3);

    ck_assert_uint_eq(bucket_table_expire(t, 6 * SEC - 1, SIZE_MAX, rule_params, &rs), 0);
    ck_assert_uint_eq(bucket_table_expire(t, 6 * SEC, SIZE_MAX, rule_params, &rs), 1);
    ck_assert_uint_eq(bucket_table_count(t), 2);
    /* The survivor kept its state. */
    ck_assert(ttake(t, "tb", "heavy", &rs.p[0], 6 * SEC, &r));
    ck_assert_uint_eq(r.remaining, 0);
    ck_assert_uint_eq(bucket_table_expire(t, 60 * SEC, SIZE_MAX, rule_params, &rs), 0);
    ck_assert_uint_eq(bucket_table_expire(t, 66 * SEC, SIZE_MAX, rule_params, &rs), 1);
    ck_assert_uint_eq(bucket_table_expire(t, 2 * MINUTE - 1, SIZE_MAX, rule_params, &rs), 0);
    ck_assert_uint_eq(bucket_table_expire(t, 2 * MINUTE, SIZE_MAX, rule_params, &rs), 1);
    ck_assert_uint_eq(bucket_table_count(t), 0);

    /* A rule that disappeared takes its buckets along, busy or not. */
    for (int i = 0; i < 10; i++)
        ttake(t, "tb", "heavy", &rs.p[0], 0, &r);
    ttake(t, "sw", "a", &rs.p[1], 0, &r);
    rs.n = 1;
    ck_assert_uint_eq(bucket_table_expire(t, 0, SIZE_MAX, rule_params, &rs), 1);
    ck_assert_uint_eq(bucket_table_count(t), 1);
    ck_assert_uint_eq(bucket_table_expire(t, 0, 0, rule_params, &rs), 0);
    bucket_table_free(t);
}
END_TEST

/* max_visit bounds the work per call, and successive calls cover the whole
 * table from where the previous one stopped, for any stripe count. */
static const unsigned visit_stripes[] = {1, 2, 16, 64};

START_TEST(test_table_expire_max_visit)
{
    struct bucket_table *t = bucket_table_new(visit_stripes[_i]);
    struct rule_set rs = {{"r"}, {bt_params(TB, 10, SEC, 10)}, 1};
    struct bucket_result r;
    char key[32];

    for (int i = 0; i < 1000; i++) {
        snprintf(key, sizeof(key), "k%d", i);
        ttake(t, "r", key, &rs.p[0], 0, &r);
    }
    /* Nothing idle: a bounded call drops nothing. */
    ck_assert_uint_eq(bucket_table_expire(t, 0, 10, rule_params, &rs), 0);
    size_t total = 0;
    int calls = 0;
    while (bucket_table_count(t) > 0) {
        size_t d = bucket_table_expire(t, SEC, 7, rule_params, &rs);
        ck_assert_uint_le(d, 7);
        total += d;
        ck_assert_uint_eq(bucket_table_count(t), 1000 - total);
        ck_assert_int_lt(++calls, 1000);
    }
    ck_assert_uint_eq(total, 1000);
    ck_assert_int_ge(calls, 1000 / 7);
    bucket_table_free(t);
}
END_TEST

START_TEST(test_table_million)
{
    struct bucket_table *t = bucket_table_new(16);
    struct bucket_params p = bt_params(TB, 10, SEC, 10);
    struct rule_set rs = {{"r"}, {p}, 1};
    struct bucket_result r;
    const uint64_t n = 1000000;

    uint64_t ok = 0;
    for (uint64_t i = 0; i < n; i++)
        ok += bucket_table_take(t, "r", &i, sizeof(i), &p, 0, 1, &r) == 0 && r.allowed;
    ck_assert_uint_eq(ok, n);
    ck_assert_uint_eq(bucket_table_count(t), n);
    /* A second pass finds every bucket again. */
    ok = 0;
    for (uint64_t i = 0; i < n; i++) {
        bucket_table_take(t, "r", &i, sizeof(i), &p, 0, 1, &r);
        ok += r.remaining == 8;
    }
    ck_assert_uint_eq(ok, n);
    ck_assert_uint_eq(bucket_table_expire(t, 0, SIZE_MAX, rule_params, &rs), 0);
    size_t total = 0;
    for (int calls = 0; bucket_table_count(t) > 0; calls++) {
        ck_assert_int_lt(calls, 1000);
        total += bucket_table_expire(t, SEC, 100000, rule_params, &rs);
    }
    ck_assert_uint_eq(total, n);
    bucket_table_free(t);
}
END_TEST

START_TEST(test_table_limits)
{
    struct bucket_table *t = bucket_table_new(0);
    struct bucket_params p = bt_params(TB, 10, SEC, 10);
    struct bucket_result r;
    ck_assert_ptr_nonnull(t);
    ck_assert(ttake(t, "r", "k", &p, 0, &r));
#if SIZE_MAX > UINT32_MAX
    /* A key too long to hold is refused (denied, -1) without reading it. */
    ck_assert_int_eq(bucket_table_take(t, "r", "k", (size_t)UINT32_MAX + 1, &p, 0, 1, &r), -1);
    ck_assert_int_eq(r.allowed, 0);
    ck_assert_uint_gt(r.retry_us, 0);
#endif
    ck_assert_uint_eq(bucket_table_count(t), 1);
    bucket_table_free(t);
}
END_TEST

/* ---- threads ------------------------------------------------------------ */

#define THREADS 4
#define TAKES 50000

struct worker {
    struct bucket_table *t;
    const struct bucket_params *p;
    int id;
    uint64_t allowed;
};

static void *take_one_key(void *arg)
{
    struct worker *w = arg;
    struct bucket_result r;
    for (int i = 0; i < TAKES; i++) {
        if (bucket_table_take(w->t, "r", "shared", 6, w->p, 0, 1, &r) == 0 && r.allowed)
            w->allowed++;
    }
    return NULL;
}

START_TEST(test_threads_one_key)
{
    /* The burst admits exactly half of all takes; a lost update would show
     * as more. */
    struct bucket_table *t = bucket_table_new(8);
    struct bucket_params p = bt_params(TB, 1, DAY, THREADS * TAKES / 2);
    struct worker w[THREADS];
    pthread_t th[THREADS];
    uint64_t total = 0;

    for (int i = 0; i < THREADS; i++) {
        w[i] = (struct worker){t, &p, i, 0};
        ck_assert_int_eq(pthread_create(&th[i], NULL, take_one_key, &w[i]), 0);
    }
    for (int i = 0; i < THREADS; i++) {
        pthread_join(th[i], NULL);
        total += w[i].allowed;
    }
    ck_assert_uint_eq(total, THREADS * TAKES / 2);
    ck_assert_uint_eq(bucket_table_count(t), 1);
    bucket_table_free(t);
}
END_TEST

static void *take_many_keys(void *arg)
{
    struct worker *w = arg;
    struct bucket_result r;
    for (uint64_t i = 0; i < TAKES; i++) {
        uint64_t key = i % 5000;
        /* time moves on, so buckets keep becoming idle under the expirer */
        bucket_table_take(w->t, "r", &key, sizeof(key), w->p, i * 100, 1, &r);
    }
    return NULL;
}

struct expirer {
    struct bucket_table *t;
    struct rule_set *rs;
    atomic_int *stop;
};

static void *expire_loop(void *arg)
{
    struct expirer *x = arg;
    uint64_t now = 0;
    while (!atomic_load(x->stop)) {
        bucket_table_expire(x->t, now, 500, rule_params, x->rs);
        bucket_table_count(x->t);
        now += 10000;
    }
    return NULL;
}

START_TEST(test_threads_expire)
{
    /* Takes on many keys racing an expirer: no crash, no leak, and the count
     * stays consistent with the entries actually present. */
    struct bucket_table *t = bucket_table_new(4);
    struct rule_set rs = {{"r"}, {bt_params(TB, 1000, SEC, 5)}, 1};
    struct worker w[THREADS];
    pthread_t th[THREADS], ex;
    atomic_int stop = 0;
    struct expirer x = {t, &rs, &stop};

    ck_assert_int_eq(pthread_create(&ex, NULL, expire_loop, &x), 0);
    for (int i = 0; i < THREADS; i++) {
        w[i] = (struct worker){t, &rs.p[0], i, 0};
        ck_assert_int_eq(pthread_create(&th[i], NULL, take_many_keys, &w[i]), 0);
    }
    for (int i = 0; i < THREADS; i++)
        pthread_join(th[i], NULL);
    atomic_store(&stop, 1);
    pthread_join(ex, NULL);
    ck_assert_uint_le(bucket_table_count(t), 5000);
    size_t left = bucket_table_count(t);
    ck_assert_uint_eq(bucket_table_expire(t, UINT64_MAX / 4, SIZE_MAX, rule_params, &rs), left);
    ck_assert_uint_eq(bucket_table_count(t), 0);
    bucket_table_free(t);
}
END_TEST

/* GET /key: peek shows what a take would find, changes nothing; POST
 * /reset: drop makes the next take find the bucket full. */
START_TEST(test_table_peek_drop)
{
    struct bucket_table *t = bucket_table_new(4);
    struct bucket_params tb = bt_params(TB, 10, MINUTE, 10), sw = bt_params(SW, 10, MINUTE, 10);
    struct bucket_result r;
    struct bucket_state st;
    uint64_t now = 1000 * MINUTE;

    ck_assert_int_eq(bucket_table_peek(t, "r", "k", 1, &tb, now, &st), 0);
    for (int i = 0; i < 10; i++)
        bucket_table_take(t, "r", "k", 1, &tb, now, 1, &r);
    ck_assert_int_eq(bucket_table_peek(t, "r", "k", 1, &tb, now + 3 * SEC, &st), 1);
    ck_assert(st.level > 0.49 && st.level < 0.51); /* 3 s of 6 s per token */
    ck_assert_uint_eq(st.remaining, 0);
    ck_assert_int_eq(st.blocked, 1);
    ck_assert_uint_eq(st.retry_us, 3 * SEC);
    ck_assert_uint_eq(st.reset_us, 57 * SEC);
    /* peeking took nothing: still blocked at the same instant */
    ck_assert_int_eq(bucket_table_peek(t, "r", "k", 1, &tb, now + 3 * SEC, &st), 1);
    ck_assert_int_eq(st.blocked, 1);
    ck_assert_int_eq(bucket_table_peek(t, "r", "k", 1, &tb, now + 6 * SEC, &st), 1);
    ck_assert_int_eq(st.blocked, 0);
    ck_assert_uint_eq(st.remaining, 1);
    ck_assert_uint_eq(st.retry_us, 0);
    /* another algorithm: the next take starts afresh, as if there were none */
    ck_assert_int_eq(bucket_table_peek(t, "r", "k", 1, &sw, now, &st), 0);

    ck_assert_int_eq(bucket_table_drop(t, "r", "k", 1), 1);
    ck_assert_int_eq(bucket_table_drop(t, "r", "k", 1), 0);
    ck_assert_uint_eq(bucket_table_count(t), 0);
    bucket_table_take(t, "r", "k", 1, &tb, now, 1, &r);
    ck_assert_int_eq(r.allowed, 1);
    ck_assert_uint_eq(r.remaining, 9);

    /* sliding window: the two counts and the estimate */
    uint64_t w0 = 2000 * MINUTE; /* a window start */
    for (int i = 0; i < 6; i++)
        bucket_table_take(t, "s", "k", 1, &sw, w0 + 10 * SEC, 1, &r);
    for (int i = 0; i < 2; i++)
        bucket_table_take(t, "s", "k", 1, &sw, w0 + MINUTE + SEC, 1, &r);
    ck_assert_int_eq(bucket_table_peek(t, "s", "k", 1, &sw, w0 + MINUTE + 30 * SEC, &st), 1);
    ck_assert(st.prev == 6 && st.cur == 2);
    ck_assert(st.level > 4.99 && st.level < 5.01); /* 6 x 1/2 + 2 */
    ck_assert_uint_eq(st.remaining, 5);
    ck_assert_int_eq(st.blocked, 0);
    ck_assert_uint_eq(st.reset_us, 90 * SEC);
    ck_assert_int_eq(bucket_table_drop(t, "s", "k", 1), 1);
    bucket_table_free(t);
}
END_TEST

static Suite *bucket_table_suite(void)
{
    Suite *s = suite_create("bucket_table");

    TCase *tc = tcase_create("table");
    CHECK_ADD(tc, test_table_keys, test_table_refund, test_table_reload, test_table_lru_eviction,
              test_table_budget_many_keys, test_table_expire);
    tcase_add_loop_test(tc, test_table_expire_max_visit, 0,
                        sizeof(visit_stripes) / sizeof(visit_stripes[0]));
    CHECK_ADD(tc, test_table_million, test_table_limits, test_table_peek_drop, test_table_seeded);
    tcase_set_timeout(tc, 300);
    suite_add_tcase(s, tc);

    tc = tcase_create("threads");
    CHECK_ADD(tc, test_threads_one_key, test_threads_expire);
    tcase_set_timeout(tc, 300);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return check_run(bucket_table_suite());
}
