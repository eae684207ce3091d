/* SPDX-License-Identifier: Apache-2.0 */
/* test_scripts_cc.c - the concurrency scripts of lua/ (cc_acquire,
 * cc_release, cc_reset) against a real redis-server: the bound (never more
 * than limit unexpired members) under random takes and releases, expiry by
 * max_hold (not before, counted once), releases of unknown slots, reset.
 *
 * Server, scripts and keys as the other test_scripts_* (scripts_harness.c).
 * Timing assertions bracket Redis time between local clock readings.
 */
#include <check.h>
#include <hiredis/hiredis.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check_util.h"
#include "scripts_harness.h"

static void acquire(const char *key, long long limit, long long hold_ms, const char *id,
                    long long *out)
{
    char l[24], h[24];
    const char *argv[CC_ARGC];

    snprintf(l, sizeof(l), "%lld", limit);
    snprintf(h, sizeof(h), "%lld", hold_ms);
    argv[CC_ARG_LIMIT] = l;
    argv[CC_ARG_HOLD_MS] = h;
    argv[CC_ARG_ID] = id;
    redisReply *r = evalsha(CC_ACQUIRE, key, CC_ARGC, argv);
    ck_assert_msg(r->type == REDIS_REPLY_ARRAY && r->elements == CC_R_COUNT, "cc_acquire: %s",
                  r->type == REDIS_REPLY_ERROR ? r->str : "bad reply");
    for (int i = 0; i < CC_R_COUNT; i++)
        out[i] = r->element[i]->integer;
    freeReplyObject(r);
}

static long long release_slot(const char *key, const char *id)
{
    const char *argv[CC_RELEASE_ARGC] = {[CC_RELEASE_ARG_ID] = id};
    redisReply *r = evalsha(CC_RELEASE, key, CC_RELEASE_ARGC, argv);
    ck_assert_int_eq(r->type, REDIS_REPLY_ARRAY);
    long long v = r->element[CC_RELEASE_R_RELEASED]->integer;
    freeReplyObject(r);
    return v;
}

/* Unexpired members, read independently of the scripts. */
static long long live(const char *key)
{
    long long now_ms = redis_now_us() / 1000;
    return cmd_int("ZCOUNT %s (%lld +inf", key, now_ms);
}

START_TEST(limit_two_then_release)
{
    char key[128];
    long long o[CC_R_COUNT];

    mkkey(key, sizeof(key), "cc");
    acquire(key, 2, 60000, "a", o);
    ck_assert_int_eq(o[EXACT_R_ALLOWED], 1);
    ck_assert_int_eq(o[EXACT_R_REMAINING], 1);
    acquire(key, 2, 60000, "b", o);
    ck_assert_int_eq(o[EXACT_R_REMAINING], 0);
    acquire(key, 2, 60000, "c", o);
    ck_assert_int_eq(o[EXACT_R_ALLOWED], 0);
    ck_assert_int_eq(o[EXACT_R_RETRY_MS], 1000); /* the earliest deadline is a minute away */
    ck_assert_int_eq(live(key), 2);
    ck_assert_int_eq(release_slot(key, "zzz"), 0); /* unknown: harmless */
    ck_assert_int_eq(live(key), 2);
    ck_assert_int_eq(release_slot(key, "a"), 1);
    ck_assert_int_eq(release_slot(key, "a"), 0); /* freed already */
    acquire(key, 2, 60000, "c", o);
    ck_assert_int_eq(o[EXACT_R_ALLOWED], 1);
    /* the key lives at least twice max_hold */
    ck_assert_int_gt(cmd_int("PTTL %s", key), 60000);
}
END_TEST

START_TEST(expiry_by_max_hold)
{
    char key[128];
    long long o[CC_R_COUNT];
    const long long hold = 300;

    mkkey(key, sizeof(key), "cc_exp");
    double t0 = mono_ms();
    acquire(key, 2, hold, "a", o);
    acquire(key, 2, hold, "b", o);
    acquire(key, 2, hold, "c", o);
    double t1 = mono_ms();
    ck_assert_int_eq(o[EXACT_R_ALLOWED], 0);
    ck_assert_int_ge(o[EXACT_R_RETRY_MS], 1);
    ck_assert_int_le(o[EXACT_R_RETRY_MS], hold);
    /* not before max_hold: a call that surely ran before t0 + hold is denied */
    if (mono_ms() - t1 < hold - 50) {
        acquire(key, 2, hold, "c", o);
        if (mono_ms() < t0 + hold - 10)
            ck_assert_int_eq(o[EXACT_R_ALLOWED], 0);
    }
    sleep_ms(t1 + hold + 20 - mono_ms());
    acquire(key, 2, hold, "c", o);
    ck_assert_int_eq(o[EXACT_R_ALLOWED], 1);
    ck_assert_int_eq(o[CC_R_EXPIRED], 2); /* counted once, by the call that freed them */
    acquire(key, 2, hold, "d", o);
    ck_assert_int_eq(o[EXACT_R_ALLOWED], 1);
    ck_assert_int_eq(o[CC_R_EXPIRED], 0);
    /* an expired slot's release frees nothing */
    ck_assert_int_eq(release_slot(key, "a"), 0);
}
END_TEST

/* Redis' clock stepping back 20 s leaves a slot's deadline 20 s + max_hold
 * ahead (planted so here): a denial moves it to now + max_hold, so a slot
 * whose release never comes frees after max_hold, not after the step too. */
START_TEST(step_back_deadline_clamped)
{
    char key[128];
    long long o[CC_R_COUNT];
    const long long hold = 300;

    mkkey(key, sizeof(key), "cc_step");
    long long now_ms = redis_now_us() / 1000;
    freeReplyObject(cmd("ZADD %s %lld lost", key, now_ms + 20000 + hold));
    acquire(key, 1, hold, "a", o);
    ck_assert_int_eq(o[EXACT_R_ALLOWED], 0);
    ck_assert_int_le(o[EXACT_R_RETRY_MS], hold);
    redisReply *r = cmd("ZSCORE %s lost", key);
    ck_assert_int_eq(r->type, REDIS_REPLY_STRING);
    long long score = atoll(r->str);
    freeReplyObject(r);
    ck_assert_int_le(score, redis_now_us() / 1000 + hold);
    double t0 = mono_ms();
    int allowed = 0;
    while (!allowed && mono_ms() - t0 < 5000) { /* ~300 ms; 5 s for a slow machine */
        sleep_ms(20);
        acquire(key, 1, hold, "a", o);
        allowed = (int)o[EXACT_R_ALLOWED];
    }
    ck_assert_msg(allowed, "the slot still held %.0f ms after max_hold", mono_ms() - t0);
}
END_TEST

/* Random takes (limits 1..4, holds 50..400 ms) and releases on a few keys:
 * after every call the set holds at most limit unexpired members, and an
 * acquire is admitted whenever fewer than limit are live. */
START_TEST(invariant_random)
{
    char keys[3][128], id[32];
    long long o[CC_R_COUNT];
    const long long limit = 3;
    unsigned n = 0;

    for (int k = 0; k < 3; k++)
        mkkey(keys[k], sizeof(keys[k]), "cc_inv");
    for (int step = 0; step < 400; step++) {
        const char *key = keys[rnd_below(3)];
        if (rnd_below(3) == 0) {
            snprintf(id, sizeof(id), "%lld", rnd_below(n + 1));
            release_slot(key, id);
        } else {
            long long before = live(key);
            snprintf(id, sizeof(id), "%u", n++);
            acquire(key, limit, 50 + rnd_below(350), id, o);
            if (before < limit - 1) /* room before, and only expiry could add room */
                ck_assert_int_eq(o[EXACT_R_ALLOWED], 1);
        }
        ck_assert_int_le(live(key), limit);
        ck_assert_int_le(cmd_int("ZCARD %s", key), limit);
        if (step % 50 == 0)
            sleep_ms(rnd_below(100));
    }
}
END_TEST

START_TEST(reset_reads_and_frees)
{
    char key[128];
    long long o[CC_R_COUNT], z[CC_RESET_R_COUNT];
    const char *argv[CC_RESET_ARGC];

    mkkey(key, sizeof(key), "cc_reset");
    acquire(key, 5, 60000, "a", o);
    acquire(key, 5, 30000, "b", o);
    argv[CC_RESET_ARG_FREE] = "0";
    redisReply *r = evalsha(CC_RESET, key, CC_RESET_ARGC, argv);
    for (int i = 0; i < CC_RESET_R_COUNT; i++)
        z[i] = r->element[i]->integer;
    freeReplyObject(r);
    ck_assert_int_eq(z[CC_RESET_R_HELD], 2);
    ck_assert_int_le(z[CC_RESET_R_EARLIEST_MS], 30000);
    ck_assert_int_gt(z[CC_RESET_R_LATEST_MS], 30000);
    ck_assert_int_eq(live(key), 2);
    argv[CC_RESET_ARG_FREE] = "1";
    r = evalsha(CC_RESET, key, CC_RESET_ARGC, argv);
    ck_assert_int_eq(r->element[CC_RESET_R_HELD]->integer, 2);
    freeReplyObject(r);
    ck_assert_int_eq(cmd_int("EXISTS %s", key), 0);
    argv[CC_RESET_ARG_FREE] = "2";
    r = evalsha(CC_RESET, key, CC_RESET_ARGC, argv);
    ck_assert_int_eq(r->type, REDIS_REPLY_ERROR);
    freeReplyObject(r);
}
END_TEST

static Suite *scripts_cc_suite(void)
{
    Suite *s = suite_create("scripts_cc");
    TCase *tc = scripts_tcase("cc");
    CHECK_ADD(tc, limit_two_then_release, expiry_by_max_hold, invariant_random,
              reset_reads_and_frees, step_back_deadline_clamped);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return scripts_main(scripts_cc_suite());
}
