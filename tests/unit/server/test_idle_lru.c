/* SPDX-License-Identifier: Apache-2.0 */
/* test_idle_lru.c - the idle list of connections: order by last touch, a
 * touch moving a node to the tail, removal, the grace boundary, a clock
 * read out of order, and the head against a brute-force scan over a
 * shuffled sequence of touches and removals.
 */
#include "server/idle_lru.h"

#include <check.h>
#include <stdint.h>
#include <stdlib.h>

#include "check_util.h"

#define S 1000000ULL /* one second, in microseconds */

struct fake_conn {
    int id;
    struct idle_lru_node idle;
};

static int oldest_id(const struct idle_lru *l)
{
    struct idle_lru_node *n = idle_lru_oldest(l);
    return n ? IDLE_LRU_ENTRY(n, struct fake_conn, idle)->id : -1;
}

START_TEST(empty)
{
    struct idle_lru l;

    idle_lru_init(&l);
    ck_assert_ptr_null(idle_lru_oldest(&l));
    ck_assert_ptr_null(idle_lru_evictable(&l, 100 * S, 0));
    ck_assert_uint_eq(l.n, 0);
}
END_TEST

START_TEST(order_and_touch)
{
    struct idle_lru l;
    struct fake_conn c[3] = {{0, {{0}, 0}}, {1, {{0}, 0}}, {2, {{0}, 0}}};

    idle_lru_init(&l);
    for (int i = 0; i < 3; i++)
        idle_lru_touch(&l, &c[i].idle, (uint64_t)(i + 1) * S);
    ck_assert_uint_eq(l.n, 3);
    ck_assert_int_eq(oldest_id(&l), 0);
    idle_lru_touch(&l, &c[0].idle, 10 * S); /* a frame from 0: 1 is the oldest now */
    ck_assert_uint_eq(l.n, 3);
    ck_assert_int_eq(oldest_id(&l), 1);
    ck_assert_uint_eq(c[0].idle.last_us, 10 * S);
    idle_lru_del(&l, &c[1].idle);
    ck_assert_uint_eq(l.n, 2);
    ck_assert_int_eq(oldest_id(&l), 2);
    idle_lru_del(&l, &c[1].idle); /* on no list: nothing */
    ck_assert_uint_eq(l.n, 2);
    idle_lru_del(&l, &c[2].idle);
    idle_lru_del(&l, &c[0].idle);
    ck_assert_uint_eq(l.n, 0);
    ck_assert_ptr_null(idle_lru_oldest(&l));
    idle_lru_touch(&l, &c[1].idle, 20 * S); /* back on after removal */
    ck_assert_int_eq(oldest_id(&l), 1);
    ck_assert_uint_eq(l.n, 1);
}
END_TEST

START_TEST(grace_boundary)
{
    struct idle_lru l;
    struct fake_conn a = {1, {{0}, 0}}, b = {2, {{0}, 0}};

    idle_lru_init(&l);
    idle_lru_touch(&l, &a.idle, 5 * S);
    idle_lru_touch(&l, &b.idle, 6 * S);
    /* younger than the grace: none */
    ck_assert_ptr_null(idle_lru_evictable(&l, 5 * S + 30 * S - 1, 30 * S));
    /* exactly the grace: the oldest, never the younger one */
    ck_assert_ptr_eq(idle_lru_evictable(&l, 35 * S, 30 * S), &a.idle);
    ck_assert_ptr_eq(idle_lru_evictable(&l, 100 * S, 30 * S), &a.idle);
    /* a clock read before the last touch counts as no idle time */
    ck_assert_ptr_null(idle_lru_evictable(&l, 1 * S, 1));
    /* a frame from a: b is the candidate, not yet idle enough */
    idle_lru_touch(&l, &a.idle, 40 * S);
    ck_assert_ptr_null(idle_lru_evictable(&l, 35 * S, 30 * S));
    ck_assert_ptr_eq(idle_lru_evictable(&l, 36 * S, 30 * S), &b.idle);
}
END_TEST

START_TEST(clock_out_of_order)
{
    struct idle_lru l;
    struct fake_conn a = {1, {{0}, 0}}, b = {2, {{0}, 0}};

    idle_lru_init(&l);
    idle_lru_touch(&l, &a.idle, 10 * S);
    idle_lru_touch(&l, &b.idle, 9 * S); /* read before a's: takes a's time */
    ck_assert_uint_eq(b.idle.last_us, 10 * S);
    ck_assert_int_eq(oldest_id(&l), 1);
    ck_assert_ptr_eq(idle_lru_evictable(&l, 12 * S, 2 * S), &a.idle);
}
END_TEST

/* Random touches and removals; the head is always the node with the
 * smallest last touch among those on the list (ties: the earliest touched). */
START_TEST(against_scan)
{
    enum { N = 64, ROUNDS = 5000 };
    struct idle_lru l;
    struct fake_conn c[N] = {{0}};
    int on[N] = {0};
    unsigned long order[N] = {0}, seq = 0;
    uint64_t now = S;

    srand(42);
    idle_lru_init(&l);
    for (int i = 0; i < N; i++)
        c[i].id = i;
    for (int r = 0; r < ROUNDS; r++) {
        int i = rand() % N;
        size_t count = 0;
        int best = -1;

        now += (uint64_t)(rand() % 3); /* ties too */
        if (rand() % 4 == 0) {
            idle_lru_del(&l, &c[i].idle);
            on[i] = 0;
        } else {
            idle_lru_touch(&l, &c[i].idle, now);
            on[i] = 1;
            order[i] = ++seq;
        }
        for (int j = 0; j < N; j++) {
            if (!on[j])
                continue;
            count++;
            if (best < 0 || order[j] < order[best])
                best = j;
        }
        ck_assert_uint_eq(l.n, count);
        ck_assert_int_eq(oldest_id(&l), best);
        if (best >= 0) {
            ck_assert_ptr_eq(idle_lru_evictable(&l, now, now - c[best].idle.last_us),
                             &c[best].idle);
            ck_assert_ptr_null(idle_lru_evictable(&l, now, now - c[best].idle.last_us + 1));
        }
    }
}
END_TEST

static Suite *idle_lru_suite(void)
{
    Suite *s = suite_create("idle_lru");
    TCase *tc = tcase_create("idle_lru");
    CHECK_ADD(tc, empty, order_and_touch, grace_boundary, clock_out_of_order, against_scan);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return check_run(idle_lru_suite());
}
