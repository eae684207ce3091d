/* SPDX-License-Identifier: Apache-2.0 */
/* test_reply_cap.c - the caps on Redis' replies (store_reply_cap.c): RESP
 * bytes fed to a hiredis reader with the caps installed, no socket. The
 * largest replies the agent gets pass, as hiredis' own functions and the
 * store's pool make them; a huge array header is refused at its header, a
 * huge bulk string by the unparsed buffer's cap before its body is in,
 * arrays nested too deep, too many elements or bytes in one reply, each with
 * a reason; the counts start again at each reply; a reply of any type while
 * no command waits is refused (hiredis would abort on it). */
#include <check.h>
#include <hiredis/async.h>
#include <hiredis/hiredis.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check_util.h"
#include "store/store_reply_cap.h"
#include "store/store_reply_pool.h"

/* A reader with the caps, the pool's objects on odd loop iterations. */
static redisReader *capped(struct store_reply_cap *cap, int pool)
{
    redisReader *r = redisReaderCreate();

    ck_assert_ptr_nonnull(r);
    store_reply_cap_install(r, cap, pool ? &store_reply_pool_fns : NULL);
    return r;
}

/* Feed s (n bytes) and read one reply: 0 and *reply, or -1 (refused). */
static int feed_get(redisReader *r, const char *s, size_t n, redisReply **reply)
{
    void *obj = NULL;

    *reply = NULL;
    ck_assert_int_eq(redisReaderFeed(r, s, n), REDIS_OK);
    if (redisReaderGetReply(r, &obj) != REDIS_OK)
        return -1;
    *reply = obj;
    return 0;
}

/* A growing RESP text. */
struct text {
    char *s;
    size_t len, cap;
};

static void put(struct text *t, const char *s, size_t n)
{
    if (t->len + n + 1 > t->cap) {
        t->cap = (t->len + n + 1) * 2;
        t->s = realloc(t->s, t->cap);
        ck_assert_ptr_nonnull(t->s);
    }
    memcpy(t->s + t->len, s, n);
    t->len += n;
    t->s[t->len] = '\0';
}

static void putf(struct text *t, const char *fmt, unsigned long long v)
{
    char buf[64];
    int n = snprintf(buf, sizeof(buf), fmt, v);

    put(t, buf, (size_t)n);
}

/* An array header of n, then n integers. */
static void put_ints(struct text *t, size_t n)
{
    putf(t, "*%llu\r\n", n);
    for (size_t i = 0; i < n; i++)
        put(t, ":7\r\n", 4);
}

/* A bulk string of n bytes. */
static void put_bulk(struct text *t, size_t n)
{
    putf(t, "$%llu\r\n", n);
    if (t->len + n + 3 > t->cap) {
        t->cap = (t->len + n + 3) * 2;
        t->s = realloc(t->s, t->cap);
        ck_assert_ptr_nonnull(t->s);
    }
    memset(t->s + t->len, 'x', n);
    t->len += n;
    put(t, "\r\n", 2);
}

/* The largest legitimate replies pass whole. */
START_TEST(largest_pass)
{
    struct store_reply_cap cap;
    redisReader *r = capped(&cap, _i);
    struct text t = {0};
    redisReply *reply;

    /* the fleet view of RULES_FLEET_MAX agents, rounded up to the cap */
    put_ints(&t, STORE_REPLY_MAX_ELEMENTS);
    ck_assert_int_eq(feed_get(r, t.s, t.len, &reply), 0);
    ck_assert_ptr_nonnull(reply);
    ck_assert_uint_eq(reply->elements, STORE_REPLY_MAX_ELEMENTS);
    ck_assert_int_eq(reply->element[STORE_REPLY_MAX_ELEMENTS - 1]->integer, 7);
    freeReplyObject(reply);
    /* the rule text at its cap, with its sha256 (lua/rules_fetch.lua) */
    t.len = 0;
    put(&t, "*2\r\n", 4);
    put_bulk(&t, STORE_REPLY_MAX_STRING);
    put_bulk(&t, 64);
    ck_assert_int_eq(feed_get(r, t.s, t.len, &reply), 0);
    ck_assert_ptr_nonnull(reply);
    ck_assert_uint_eq(reply->element[0]->len, STORE_REPLY_MAX_STRING);
    freeReplyObject(reply);
    /* CLUSTER SLOTS' nesting: range, node, the node's metadata */
    const char *slots = "*1\r\n*3\r\n:0\r\n:16383\r\n*4\r\n$9\r\n127.0.0.1\r\n:7000\r\n"
                        "$2\r\nid\r\n*2\r\n$8\r\nhostname\r\n$2\r\nh1\r\n";
    ck_assert_int_eq(feed_get(r, slots, strlen(slots), &reply), 0);
    ck_assert_ptr_nonnull(reply);
    ck_assert_str_eq(reply->element[0]->element[2]->element[3]->element[1]->str, "h1");
    freeReplyObject(reply);
    /* small ones: nil, an integer, an error, an empty array */
    const char *small = "$-1\r\n:5\r\n-ERR no\r\n*0\r\n*-1\r\n";
    ck_assert_int_eq(redisReaderFeed(r, small, strlen(small)), REDIS_OK);
    for (int i = 0; i < 5; i++) {
        void *obj = NULL;
        ck_assert_int_eq(redisReaderGetReply(r, &obj), REDIS_OK);
        ck_assert_ptr_nonnull(obj);
        freeReplyObject(obj);
    }
    ck_assert_ptr_null(store_reply_cap_refused(&cap));
    ck_assert_int_eq(store_reply_cap_buffer(r, &cap), 0);
    free(t.s);
    redisReaderFree(r);
    store_reply_pool_drain();
}
END_TEST

/* What one reply may hold in all counts per reply: two replies of 3/4 of the
 * element cap each pass. */
START_TEST(counts_per_reply)
{
    struct store_reply_cap cap;
    redisReader *r = capped(&cap, _i);
    struct text t = {0};
    redisReply *reply;
    const size_t arrays = STORE_REPLY_MAX_OBJECTS / STORE_REPLY_MAX_ELEMENTS * 3 / 4;

    for (int k = 0; k < 2; k++) {
        t.len = 0;
        putf(&t, "*%llu\r\n", arrays);
        for (size_t i = 0; i < arrays; i++)
            put_ints(&t, STORE_REPLY_MAX_ELEMENTS - 1);
        ck_assert_int_eq(feed_get(r, t.s, t.len, &reply), 0);
        ck_assert_ptr_nonnull(reply);
        ck_assert_uint_eq(reply->elements, arrays);
        freeReplyObject(reply);
    }
    ck_assert_ptr_null(store_reply_cap_refused(&cap));
    free(t.s);
    redisReaderFree(r);
    store_reply_pool_drain();
}
END_TEST

static const struct refusal {
    const char *resp; /* fed as is; NULL: built by the test (below) */
    const char *why;  /* in the reason */
} refusals[] = {
    /* the header alone is refused: nothing allocated for its elements */
    {"*100000000\r\n", "array of 100000000 elements"},
    {"*65537\r\n:1\r\n", "array of 65537 elements"},
    {"*1\r\n*2147483647\r\n", "array of 2147483647 elements"},
    /* five arrays deep */
    {"*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n:1\r\n", "arrays nested 5 deep"},
    /* a string one byte past the cap, whole */
    {NULL, "string of 1048577 bytes"},
    /* too many elements, or bytes, in one reply (built) */
    {NULL, "elements in all"},
    {NULL, "bytes of strings"},
    /* an error line past the cap */
    {NULL, "string of 1048599 bytes"},
};

START_TEST(refused)
{
    const struct refusal *f = &refusals[_i / 2];
    struct store_reply_cap cap;
    redisReader *r = capped(&cap, _i % 2);
    struct text t = {0};
    redisReply *reply;

    if (f->resp) {
        put(&t, f->resp, strlen(f->resp));
    } else if (strstr(f->why, "1048577")) {
        put_bulk(&t, STORE_REPLY_MAX_STRING + 1);
    } else if (strstr(f->why, "elements in all")) {
        size_t arrays = STORE_REPLY_MAX_OBJECTS / STORE_REPLY_MAX_ELEMENTS + 1;
        putf(&t, "*%llu\r\n", arrays);
        for (size_t i = 0; i < arrays; i++)
            put_ints(&t, STORE_REPLY_MAX_ELEMENTS);
    } else if (strstr(f->why, "bytes of strings")) {
        size_t n = STORE_REPLY_MAX_BYTES / STORE_REPLY_MAX_STRING + 1;
        putf(&t, "*%llu\r\n", n);
        for (size_t i = 0; i < n; i++)
            put_bulk(&t, STORE_REPLY_MAX_STRING);
    } else {
        put(&t, "-", 1);
        for (size_t i = 0; i < STORE_REPLY_MAX_STRING + 23; i++)
            put(&t, "e", 1);
        put(&t, "\r\n", 2);
    }
    ck_assert_int_eq(feed_get(r, t.s, t.len, &reply), -1);
    ck_assert_ptr_null(reply);
    ck_assert_ptr_nonnull(store_reply_cap_refused(&cap));
    if (!strstr(store_reply_cap_refused(&cap), f->why))
        ck_abort_msg("why: %s, not %s", store_reply_cap_refused(&cap), f->why);
    free(t.s);
    redisReaderFree(r);
    store_reply_pool_drain();
}
END_TEST

/* A bulk string of 512 MB: the reader waits for its body, which the buffer's
 * cap stops at a little over one string's cap, long before it is in. */
START_TEST(huge_bulk_buffered)
{
    struct store_reply_cap cap;
    redisReader *r = capped(&cap, _i);
    static char chunk[16 * 1024];
    const char *head = "$536870912\r\n";
    redisReply *reply;
    size_t fed = 0;
    int stopped = 0;

    memset(chunk, 'x', sizeof(chunk));
    ck_assert_int_eq(feed_get(r, head, strlen(head), &reply), 0);
    ck_assert_ptr_null(reply); /* waits for the body */
    while (fed < 4u * STORE_REPLY_MAX_BUFFER) {
        ck_assert_int_eq(feed_get(r, chunk, sizeof(chunk), &reply), 0);
        ck_assert_ptr_null(reply);
        fed += sizeof(chunk);
        if (store_reply_cap_buffer(r, &cap) < 0) {
            stopped = 1;
            break;
        }
        ck_assert_ptr_null(store_reply_cap_refused(&cap));
    }
    ck_assert_int_eq(stopped, 1);
    ck_assert_uint_gt(fed, STORE_REPLY_MAX_BUFFER - sizeof(chunk));
    ck_assert_uint_le(fed, STORE_REPLY_MAX_BUFFER + sizeof(chunk));
    ck_assert_ptr_nonnull(strstr(store_reply_cap_refused(&cap), "unparsed"));
    redisReaderFree(r);
    store_reply_pool_drain();
}
END_TEST

/* A legitimate string at the cap, arriving a read at a time, never trips
 * the buffer's cap. */
START_TEST(string_at_cap_buffered)
{
    struct store_reply_cap cap;
    redisReader *r = capped(&cap, _i);
    struct text t = {0};
    redisReply *reply = NULL;

    put_bulk(&t, STORE_REPLY_MAX_STRING);
    put(&t, ":1\r\n", 4);
    for (size_t at = 0; at < t.len && !reply; at += 16 * 1024) {
        size_t n = t.len - at < 16 * 1024 ? t.len - at : 16 * 1024;
        ck_assert_int_eq(feed_get(r, t.s + at, n, &reply), 0);
        ck_assert_int_eq(store_reply_cap_buffer(r, &cap), 0);
    }
    ck_assert_ptr_nonnull(reply);
    ck_assert_uint_eq(reply->len, STORE_REPLY_MAX_STRING);
    freeReplyObject(reply);
    free(t.s);
    redisReaderFree(r);
    store_reply_pool_drain();
}
END_TEST

/* A reply with no command waiting (the async context's list empty) is
 * refused at its first object, whatever its type; with one waiting it
 * passes. */
START_TEST(unasked_refused)
{
    static const char *const replies[] = {"+OK\r\n",      ":1\r\n",       "$-1\r\n",
                                          "*1\r\n:1\r\n", "$2\r\nhi\r\n", "-ERR max clients\r\n"};
    struct store_reply_cap cap;
    redisReader *r = capped(&cap, _i % 2);
    redisCallbackList list = {0};
    redisCallback waiting = {0};
    redisReply *reply;
    const char *s = replies[_i / 2];

    store_reply_cap_expect(&cap, &list);
    ck_assert_int_eq(feed_get(r, s, strlen(s), &reply), -1);
    ck_assert_ptr_null(reply);
    ck_assert_int_eq(cap.unasked, 1);
    ck_assert_str_eq(store_reply_cap_refused(&cap), "a reply no command waited for");
    redisReaderFree(r);

    r = capped(&cap, _i % 2);
    list.head = list.tail = &waiting;
    store_reply_cap_expect(&cap, &list);
    ck_assert_int_eq(feed_get(r, s, strlen(s), &reply), 0);
    ck_assert_ptr_nonnull(reply);
    ck_assert_int_eq(cap.unasked, 0);
    freeReplyObject(reply);
    redisReaderFree(r);
    store_reply_pool_drain();
}
END_TEST

int main(void)
{
    TCase *tc = tcase_create("core");

    tcase_set_timeout(tc, 60);
    tcase_add_loop_test(tc, largest_pass, 0, 2);
    tcase_add_loop_test(tc, counts_per_reply, 0, 2);
    tcase_add_loop_test(tc, refused, 0, 2 * (int)(sizeof(refusals) / sizeof(refusals[0])));
    tcase_add_loop_test(tc, huge_bulk_buffered, 0, 2);
    tcase_add_loop_test(tc, string_at_cap_buffered, 0, 2);
    tcase_add_loop_test(tc, unasked_refused, 0, 12);
    return check_run_case("reply_cap", tc);
}
