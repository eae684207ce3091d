/* SPDX-License-Identifier: Apache-2.0 */
/* test_bad_reply.c - a Redis that breaks the protocol: the one check of a
 * script's reply (store/store_reply_check.h) against well-formed replies of
 * every script and against each way a reply can be wrong; integers read
 * whole from text ("nan", "inf", "1.5" are none), through hiredis' own
 * parser; the reconnect backoff (store/store_backoff.h): its jitter bounds,
 * doubling, cap, and the attempts it allows in 10 s. */
#include <check.h>
#include <hiredis/hiredis.h>
#include <stdint.h>
#include <string.h>

#include "check_util.h"
#include "store/script.h"
#include "store/store_backoff.h"
#include "store/store_reply.h"
#include "store/store_reply_check.h"

/* A reply of n values v; argv: the call's ARGV (NULL-terminated). */
struct row {
    const char *name;
    int script;
    int n;
    int64_t v[STORE_MAX_VALUES];
    const char *argv[CLAIM_ARGC_FIXED + 1];
    int good;
};

#define CLAIM(want)                                                                                \
    {                                                                                              \
        "agent", "100", "1000", "50", want, "0", "0", "1000", NULL                                 \
    }
#define EXACT                                                                                      \
    {                                                                                              \
        "100", "1000", "50", NULL                                                                  \
    }

static const struct row rows[] = {
    /* well-formed: what each script answers */
    {"tb_claim", SCRIPT_TB_CLAIM, 10, {5, 10, 5, 1, 0, 100, 1000, 5, 0, 0}, CLAIM("5"), 1},
    {"sw_claim none", SCRIPT_SW_CLAIM, 10, {0, 0, 50, 2, 30, 900, 0, 0, 0, 0}, CLAIM("5"), 1},
    {"tb_return", SCRIPT_TB_RETURN, 10, {0, 10, 0, 0, 0, 0, 0, 0, 0, 3}, {"agent", NULL}, 1},
    {"tb_exact", SCRIPT_TB_EXACT, 5, {1, 9, 0, 100, 1796550000000}, EXACT, 1},
    {"sw_exact denied", SCRIPT_SW_EXACT, 5, {0, 0, 20, 1000, 1796550000000}, EXACT, 1},
    {"tb_reset", SCRIPT_TB_RESET, 4, {50, 0, 0, 3}, EXACT, 1},
    {"tb_refund", SCRIPT_TB_REFUND, 2, {2, 12}, {"100", "1000", "50", "2", "0", NULL}, 1},
    {"cc_acquire", SCRIPT_CC_ACQUIRE, 6, {1, 3, 0, 0, 1796550000000, 0}, {"5", "1000", "x"}, 1},
    {"cc_release", SCRIPT_CC_RELEASE, 2, {1, 0}, {"x", NULL}, 1},
    {"tb_pool deposit", SCRIPT_TB_POOL, 6, {3, 3, 2, 0, 0, 4}, {"5", "10", NULL}, 1},
    {"tb_pool withdraw", SCRIPT_TB_POOL, 6, {-2, 1, 0, 0, 0, 0}, {"-5", "10", NULL}, 1},
    {"g_lock contended", SCRIPT_G_LOCK, 2, {0, 1200}, {"a", "5000", NULL}, 1},
    /* a rate lease grows its slice: not bound by want */
    {"tb_claim rate lease",
     SCRIPT_TB_CLAIM,
     10,
     {20, 10, 20, 1, 0, 100, 1000, 20, 500000, 0},
     {"agent", "100", "1000", "50", "1", "0", "0", "1000", "500000", "500000", NULL},
     1},
    /* malformed */
    {"exact short", SCRIPT_TB_EXACT, 4, {1, 9, 0, 100}, EXACT, 0},
    {"exact long", SCRIPT_TB_EXACT, 6, {1, 9, 0, 100, 1796550000000, 0}, EXACT, 0},
    {"claim short", SCRIPT_TB_CLAIM, 9, {5, 10, 5, 1, 0, 100, 1000, 5, 0}, CLAIM("5"), 0},
    {"negative remaining", SCRIPT_TB_EXACT, 5, {1, -5, 0, 100, 1796550000000}, EXACT, 0},
    {"negative holders", SCRIPT_SW_CLAIM, 10, {0, 0, 50, -1, 30, 900, 0, 0, 0, 0}, CLAIM("5"), 0},
    {"granted above want",
     SCRIPT_TB_CLAIM,
     10,
     {6, 10, 6, 1, 0, 100, 1000, 6, 0, 0},
     CLAIM("5"),
     0},
    {"granted to a settle",
     SCRIPT_SW_CLAIM,
     10,
     {1, 10, 1, 1, 0, 100, 1000, 1, 0, 0},
     CLAIM("0"),
     0},
    {"share above the rate",
     SCRIPT_TB_CLAIM,
     10,
     {0, 10, 0, 1, 0, 100, 1000, 0, 1000001, 0},
     CLAIM("0"),
     0},
    {"allowed 7", SCRIPT_TB_EXACT, 5, {7, 9, 0, 100, 1796550000000}, EXACT, 0},
    {"no time", SCRIPT_SW_EXACT, 5, {1, 9, 0, 100, 0}, EXACT, 0},
    {"a return that grants",
     SCRIPT_SW_RETURN,
     10,
     {3, 10, 0, 0, 0, 0, 0, 3, 0, 0},
     {"agent", NULL},
     0},
    {"given above taken", SCRIPT_SW_REFUND, 2, {3, 12}, {"100", "1000", "50", "2", "0", NULL}, 0},
    {"released 2", SCRIPT_CC_RELEASE, 2, {2, 0}, {"x", NULL}, 0},
    {"pool moved above amt", SCRIPT_TB_POOL, 6, {6, 6, 0, 0, 0, 0}, {"5", "10", NULL}, 0},
    {"pool withdrew on a deposit", SCRIPT_TB_POOL, 6, {-1, 0, 0, 0, 0, 0}, {"5", "10", NULL}, 0},
    {"pool negative unmet", SCRIPT_TB_POOL, 6, {0, 0, 0, 0, 0, -1}, {"0", "10", NULL}, 0},
    {"lock ok 2", SCRIPT_G_LOCK, 2, {2, 0}, {"a", "5000", NULL}, 0},
};

START_TEST(reply_check)
{
    const struct row *r = &rows[_i];
    struct store_result res = {.status = STORE_OK, .n = r->n};
    int argc = 0;

    memcpy(res.v, r->v, sizeof(res.v));
    while (r->argv[argc])
        argc++;
    const char *why =
        store_reply_check(r->script, &res, (size_t)r->n, argc, (char *const *)r->argv);
    if (r->good)
        ck_assert_msg(why == NULL, "%s: rejected: %s", r->name, why);
    else
        ck_assert_msg(why != NULL, "%s: accepted", r->name);
}
END_TEST

/* More elements than STORE_MAX_VALUES keep n at the cap: the element count
 * given apart tells. */
START_TEST(reply_check_counts_elements)
{
    struct store_result res = {
        .status = STORE_OK, .n = CLAIM_R_COUNT, .v = {5, 10, 5, 1, 0, 100, 1000, 5, 0, 0}};
    char *const argv[] = {"agent", "100", "1000", "50", "5", "0", "0", "1000"};

    ck_assert_ptr_null(store_reply_check(SCRIPT_TB_CLAIM, &res, CLAIM_R_COUNT, 8, argv));
    ck_assert_ptr_nonnull(store_reply_check(SCRIPT_TB_CLAIM, &res, CLAIM_R_COUNT + 2, 8, argv));
    /* the batch script, and a script we do not know: not held to a layout */
    ck_assert_ptr_null(store_reply_check(SCRIPT_BATCH, &res, 99, 0, NULL));
}
END_TEST

/* The bytes of one reply through hiredis' parser, then store_reply_values. */
static int values_of(const char *bytes, struct store_result *res)
{
    redisReader *rd = redisReaderCreate();
    void *reply = NULL;

    memset(res, 0, sizeof(*res));
    ck_assert_int_eq(redisReaderFeed(rd, bytes, strlen(bytes)), REDIS_OK);
    ck_assert_int_eq(redisReaderGetReply(rd, &reply), REDIS_OK);
    ck_assert_ptr_nonnull(reply);
    store_reply_values(reply, res);
    freeReplyObject(reply);
    redisReaderFree(rd);
    return res->status;
}

static const struct {
    const char *bytes;
    int status;
    int64_t v0;
} texts[] = {
    {"*2\r\n:42\r\n$2\r\n17\r\n", STORE_OK, 42},
    {"*1\r\n$3\r\n-17\r\n", STORE_OK, -17},
    {"*1\r\n$3\r\nnan\r\n", STORE_ERR, 0},
    {"*1\r\n$3\r\ninf\r\n", STORE_ERR, 0},
    {"*1\r\n$4\r\n-inf\r\n", STORE_ERR, 0},
    {"*1\r\n$3\r\n1.5\r\n", STORE_ERR, 0},
    {"*1\r\n$0\r\n\r\n", STORE_ERR, 0},
    {"*1\r\n$3\r\n 12\r\n", STORE_ERR, 0},
    {"*1\r\n$20\r\n99999999999999999999\r\n", STORE_ERR, 0},
    {"*2\r\n$-1\r\n:1\r\n", STORE_ERR, 0},
    {"*1\r\n*1\r\n:1\r\n", STORE_ERR, 0},
};

START_TEST(integers_read_whole)
{
    struct store_result res;

    ck_assert_int_eq(values_of(texts[_i].bytes, &res), texts[_i].status);
    if (texts[_i].status == STORE_OK)
        ck_assert_int_eq(res.v[0], texts[_i].v0);
    else
        ck_assert_ptr_nonnull(res.err);
}
END_TEST

START_TEST(backoff_jitter_bounds)
{
    for (double b = STORE_BACKOFF_MIN; b <= STORE_BACKOFF_MAX; b *= 2) {
        ck_assert_double_eq_tol(store_backoff_wait(b, 0), b / 2, 1e-9);
        ck_assert_double_eq_tol(store_backoff_wait(b, UINT32_MAX), b, 1e-9);
        double mid = store_backoff_wait(b, UINT32_MAX / 2);
        ck_assert(mid > b / 2 && mid < b);
    }
    /* out of range: held to [MIN, MAX] */
    ck_assert(store_backoff_wait(0, UINT32_MAX) <= STORE_BACKOFF_MIN + 1e-9);
    ck_assert(store_backoff_wait(100, UINT32_MAX) <= STORE_BACKOFF_MAX + 1e-9);
}
END_TEST

START_TEST(backoff_doubles_to_the_cap)
{
    double b = STORE_BACKOFF_MIN;

    ck_assert_double_eq_tol(store_backoff_next(0), STORE_BACKOFF_MIN, 1e-9);
    ck_assert_double_eq_tol(store_backoff_next(b), 2 * b, 1e-9);
    for (int i = 0; i < 20; i++)
        b = store_backoff_next(b);
    ck_assert_double_eq_tol(b, STORE_BACKOFF_MAX, 1e-9);
    /* the cap stays below [redis] errors_quiet's minimum (5 s): a lasting
     * fault, probed once per backoff, does not flap the warning */
    ck_assert(STORE_BACKOFF_MAX < 5.0);
}
END_TEST

/* A Redis that breaks every connection at once, the waits drawn at their
 * shortest: at most this many attempts in 10 s (issue 43: ~90 before). */
START_TEST(backoff_attempts_in_ten_seconds)
{
    double b = STORE_BACKOFF_MIN, t = 0;
    int attempts = 1;

    while ((t += store_backoff_wait(b, 0)) < 10.0) {
        attempts++;
        b = store_backoff_next(b);
    }
    ck_assert_int_le(attempts, 10);
}
END_TEST

int main(void)
{
    TCase *tc = tcase_create("bad_reply");
    CHECK_LOOP(tc, reply_check, rows);
    CHECK_LOOP(tc, integers_read_whole, texts);
    CHECK_ADD(tc, reply_check_counts_elements, backoff_jitter_bounds, backoff_doubles_to_the_cap,
              backoff_attempts_in_ten_seconds);
    return check_run_case("bad_reply", tc);
}
