/* SPDX-License-Identifier: Apache-2.0 */
/* test_resp.c - the requests the agent writes itself (store_resp.c,
 * store_cmd_format) byte for byte against what hiredis' own
 * redisFormatCommandArgv() makes of the same arguments: a script call, a
 * read, a batch of calls, empty and binary arguments, and requests larger
 * than the buffer's first allocation. And the reply objects made from a pool
 * (store_reply_pool.c) against those of hiredis' own functions. And the
 * Cluster redirects read from error replies (store_reply_redirect). */
#include <check.h>
#include <hiredis/hiredis.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check_util.h"
#include "core/util.h"
#include "core/warning.h"
#include "store/store_conn.h"
#include "store/store_errors.h"
#include "store/store_why.h"
#include "store/store_reply.h"
#include "store/store_reply_pool.h"
#include "store/store_resp.h"

static const char sha[] = "0123456789abcdef0123456789abcdef01234567";
static const char fn[] = "spoa_ratelimit_0123456789abcdef_tb_exact";

static void noop_cb(void *arg, const struct store_result *res)
{
    (void)arg;
    (void)res;
}

/* What hiredis makes of argv, compared with w's bytes. */
static void assert_same(const struct store_resp *w, int argc, const char **argv,
                        const size_t *argvlen)
{
    char *want = NULL;
    int n = redisFormatCommandArgv(&want, argc, argv, argvlen);

    ck_assert_int_gt(n, 0);
    ck_assert(store_resp_ok(w));
    ck_assert_uint_eq(w->len, (size_t)n);
    ck_assert_int_eq(memcmp(w->buf, want, (size_t)n), 0);
    free(want);
}

START_TEST(bulk_and_array)
{
    struct store_resp w = {0};
    static char big[70000];
    const char *argv[5] = {"", "a\r\n\0b", big, "18446744073709551615", "0"};
    size_t argvlen[5] = {0, 6, sizeof(big), 20, 1};

    memset(big, 'x', sizeof(big));
    for (int round = 0; round < 2; round++) { /* the second reuses the buffer */
        store_resp_reset(&w);
        store_resp_array(&w, 5);
        store_resp_bulk(&w, argv[0], argvlen[0]);
        store_resp_bulk(&w, argv[1], argvlen[1]);
        store_resp_bulk(&w, argv[2], argvlen[2]);
        store_resp_bulk_u64(&w, UINT64_MAX);
        store_resp_bulk_u64(&w, 0);
        assert_same(&w, 5, argv, argvlen);
    }
    store_resp_free(&w);
    store_resp_free(&w); /* twice: a no-op */
}
END_TEST

/* Header lengths on either side of the one- and two-digit shortcuts, many
 * arguments in one store_resp_bulks (one reserve for them all), and the
 * one-digit numbers store_resp_bulk_u64 writes directly. */
START_TEST(bulks_and_digits)
{
    struct store_resp w = {0};
    static char big[70000];
    static const size_t lens[] = {0, 1, 9, 10, 99, 100, 999, 1000, sizeof(big)};
    enum { NL = sizeof(lens) / sizeof(lens[0]), NN = 12 };
    char *argv[NL + NN];
    size_t argvlen[NL + NN];
    char nums[NN][3];

    memset(big, 'y', sizeof(big));
    for (int i = 0; i < NL; i++) {
        argv[i] = big;
        argvlen[i] = lens[i];
    }
    for (int i = 0; i < NN; i++) {
        argvlen[NL + i] = (size_t)snprintf(nums[i], sizeof(nums[i]), "%d", i);
        argv[NL + i] = nums[i];
    }
    store_resp_reset(&w);
    store_resp_array(&w, NL + NN);
    store_resp_bulks(&w, NL, argv, argvlen);
    for (int i = 0; i < NN; i++)
        store_resp_bulk_u64(&w, (uint64_t)i);
    assert_same(&w, NL + NN, (const char **)argv, argvlen);
    store_resp_free(&w);
}
END_TEST

/* A call small enough for a recycled block, and one past it (its own
 * allocation); each made twice, the second from the block the first gave
 * back. */
static const size_t big_arg_sizes[] = {0, 1000};

START_TEST(script_call)
{
    struct store_resp w = {0};
    size_t big = big_arg_sizes[_i];
    char *third = malloc(big + 1);

    ck_assert_ptr_nonnull(third);
    memset(third, 'z', big);
    for (int round = 0; round < 2; round++) {
        const char *args[3] = {"100", "60000", third};
        size_t lens[3] = {3, 5, big};
        struct store_cmd *c = store_cmd_new(SCRIPT_TB_EXACT, "rl:tb:perip:10.0.0.1", 20, 3, args,
                                            lens, noop_cb, NULL);
        const char *argv[7] = {"EVALSHA", sha, "1", "rl:tb:perip:10.0.0.1", "100", "60000", third};
        size_t argvlen[7] = {7, 40, 1, 20, 3, 5, big};
        const struct store_call evalsha = {"EVALSHA", sha}, fcall = {"FCALL", fn};

        ck_assert_ptr_nonnull(c);
        ck_assert_int_eq(store_cmd_format(c, &evalsha, &w), 0);
        assert_same(&w, 7, argv, argvlen);
        /* the same call as FCALL of its function */
        argv[0] = "FCALL";
        argvlen[0] = 5;
        argv[1] = fn;
        argvlen[1] = strlen(fn);
        ck_assert_int_eq(store_cmd_format(c, &fcall, &w), 0);
        assert_same(&w, 7, argv, argvlen);
        store_cmd_free(c);
    }
    store_cmd_pool_drain();
    store_resp_free(&w);
    free(third);
}
END_TEST

START_TEST(read_call)
{
    struct store_resp w = {0};
    const char *argv[2] = {"HGETALL", "rl:tb:perip:10.0.0.1"};
    size_t argvlen[2] = {7, 20};
    struct store_cmd *c = store_cmd_new_read(argv[1], argvlen[1], 2, argv, argvlen, noop_cb, NULL);

    ck_assert_ptr_nonnull(c);
    const struct store_call evalsha = {"EVALSHA", sha};
    ck_assert_int_eq(store_cmd_format(c, &evalsha, &w), 0); /* (a read ignores it) */
    assert_same(&w, 2, argv, argvlen);
    store_cmd_free(c);
    store_resp_free(&w);
}
END_TEST

/* n calls of two shapes (an exact call of 3 args, a claim of 8) in a batch,
 * against the argv the batch script reads: EVALSHA sha n key... then per
 * call script argc args, or script "=" after a call of the same script and
 * args (exact calls 2 and 3, 5 and 6, ...). Loop over n: 1, 2 and 300 (past the buffer's first
 * allocation). */
static const unsigned batch_sizes[] = {1, 2, 300};

START_TEST(batch)
{
    unsigned n = batch_sizes[_i];
    struct store_resp w = {0};
    struct store_cmd *list = NULL, **tail = &list, *b;
    size_t cap = 3 + n * 12, argc = 0;
    const char **argv = calloc(cap, sizeof(*argv));
    size_t *argvlen = calloc(cap, sizeof(*argvlen));
    char(*keys)[32] = calloc(n, sizeof(*keys));
    char(*nums)[8] = calloc(n * 2 + 1, sizeof(*nums));
    const char *exact[3] = {"20", "60000", "20"};
    size_t exact_len[3] = {2, 5, 2};
    const char *claim[8] = {"host:1:abc", "100", "60000", "20", "5", "0", "0", "30000"};
    size_t claim_len[8] = {10, 3, 5, 2, 1, 1, 1, 5};

    ck_assert(argv && argvlen && keys && nums);
    argv[argc] = "EVALSHA";
    argvlen[argc++] = 7;
    argv[argc] = sha;
    argvlen[argc++] = 40;
    argvlen[argc] = (size_t)snprintf(nums[2 * n], sizeof(nums[0]), "%u", n);
    argv[argc++] = nums[2 * n];
    for (unsigned i = 0; i < n; i++) {
        size_t kl =
            (size_t)snprintf(keys[i], sizeof(keys[i]), "rl:tb:perip:10.0.%u.%u", i / 256, i % 256);
        int is_claim = i % 3 == 1;
        struct store_cmd *c =
            is_claim
                ? store_cmd_new(SCRIPT_TB_CLAIM, keys[i], kl, 8, claim, claim_len, noop_cb, NULL)
                : store_cmd_new(SCRIPT_TB_EXACT, keys[i], kl, 3, exact, exact_len, noop_cb, NULL);
        ck_assert_ptr_nonnull(c);
        *tail = c;
        tail = &c->mnext;
        argv[argc] = keys[i];
        argvlen[argc++] = kl;
    }
    for (unsigned i = 0; i < n; i++) {
        int is_claim = i % 3 == 1;
        argvlen[argc] = (size_t)snprintf(nums[2 * i], sizeof(nums[0]), "%d",
                                         is_claim ? SCRIPT_TB_CLAIM : SCRIPT_TB_EXACT);
        argv[argc++] = nums[2 * i];
        if (!is_claim && i > 0 && (i - 1) % 3 != 1) { /* the exact call before: "=" */
            argv[argc] = BATCH_OP_SAME;
            argvlen[argc++] = 1;
            continue;
        }
        argvlen[argc] = (size_t)snprintf(nums[2 * i + 1], sizeof(nums[0]), "%d", is_claim ? 8 : 3);
        argv[argc++] = nums[2 * i + 1];
        for (int k = 0; k < (is_claim ? 8 : 3); k++) {
            argv[argc] = is_claim ? claim[k] : exact[k];
            argvlen[argc++] = is_claim ? claim_len[k] : exact_len[k];
        }
    }
    b = store_batch_new(list, n);
    ck_assert_ptr_nonnull(b);
    const struct store_call evalsha = {"EVALSHA", sha}, fcall = {"FCALL", fn};
    ck_assert_int_eq(store_cmd_format(b, &evalsha, &w), 0);
    assert_same(&w, (int)argc, argv, argvlen);
    /* and as FCALL of the batch function */
    argv[0] = "FCALL";
    argvlen[0] = 5;
    argv[1] = fn;
    argvlen[1] = strlen(fn);
    ck_assert_int_eq(store_cmd_format(b, &fcall, &w), 0);
    assert_same(&w, (int)argc, argv, argvlen);

    size_t klen;
    ck_assert_ptr_eq(store_cmd_key(b, &klen), list->argv[3]); /* routed by its first call */
    ck_assert_uint_eq(klen, list->argvlen[3]);

    for (struct store_cmd *m = list, *next; m; m = next) {
        next = m->mnext;
        store_cmd_free(m);
    }
    store_cmd_free(b);
    store_cmd_pool_drain();
    store_resp_free(&w);
    free(argv);
    free(argvlen);
    free(keys);
    free(nums);
}
END_TEST

/* Two replies are the same tree: types, integers, strings (with their NUL),
 * element counts. */
static void assert_same_reply(const redisReply *a, const redisReply *b)
{
    ck_assert_int_eq(a->type, b->type);
    ck_assert_int_eq(a->integer, b->integer);
    ck_assert_uint_eq(a->len, b->len);
    ck_assert_uint_eq(a->elements, b->elements);
    if (a->str || b->str) {
        ck_assert(a->str && b->str);
        ck_assert_int_eq(memcmp(a->str, b->str, a->len + 1), 0);
    }
    for (size_t i = 0; i < a->elements; i++)
        assert_same_reply(a->element[i], b->element[i]);
}

/* Replies of every type, a batch-like array, nesting, empties and nils;
 * fed whole and then one byte at a time (partial replies held across
 * feeds), three rounds so that recycled structs are reused. */
struct reply_case {
    const char *bytes;
    size_t len;
};

#define REPLY(s)                                                                                   \
    {                                                                                              \
        s, sizeof(s) - 1                                                                           \
    } /* replies hold NUL bytes: no strlen */

static const struct reply_case replies[] = {
    REPLY("+OK\r\n"),
    REPLY("-NOSCRIPT No matching script\r\n"),
    REPLY(":-42\r\n"),
    REPLY("$5\r\nhe\0lo\r\n"),
    REPLY("$0\r\n\r\n"),
    REPLY("$-1\r\n"),
    REPLY("*-1\r\n"),
    REPLY("*0\r\n"),
    REPLY("*8\r\n:3\r\n:1\r\n:19\r\n:0\r\n:2\r\n:0\r\n:60000\r\n$2\r\n17\r\n"),
    REPLY("*3\r\n*2\r\n:1\r\n$-1\r\n*0\r\n*1\r\n+x\r\n"),
};
#undef REPLY

START_TEST(reply_pool)
{
    const char *in = replies[_i].bytes;
    size_t len = replies[_i].len;

    for (int round = 0; round < 3; round++) {
        redisReader *want = redisReaderCreate(), *got = redisReaderCreate();
        void *a = NULL, *b = NULL;

        ck_assert(want && got);
        got->fn = &store_reply_pool_fns;
        ck_assert_int_eq(redisReaderFeed(want, in, len), REDIS_OK);
        ck_assert_int_eq(redisReaderGetReply(want, &a), REDIS_OK);
        ck_assert_ptr_nonnull(a);
        for (size_t i = 0; i < len && !b; i++) { /* byte by byte */
            ck_assert_int_eq(redisReaderFeed(got, in + i, 1), REDIS_OK);
            ck_assert_int_eq(redisReaderGetReply(got, &b), REDIS_OK);
            ck_assert(b == NULL || i == len - 1);
        }
        ck_assert_ptr_nonnull(b);
        assert_same_reply(a, b);
        freeReplyObject(a);
        store_reply_pool_fns.freeObject(b);
        redisReaderFree(want);
        if (round == 2) { /* a partial reply left in the reader: freed with it */
            ck_assert_int_eq(redisReaderFeed(got, "*2\r\n:1\r\n", 8), REDIS_OK);
            ck_assert_int_eq(redisReaderGetReply(got, &b), REDIS_OK);
            ck_assert_ptr_null(b);
        }
        redisReaderFree(got);
    }
    store_reply_pool_drain();
}
END_TEST

/* Error replies and the redirect each means (rc -1: none). */
static const struct {
    const char *err;
    int rc, ask, slot;
    const char *host;
    int port;
} redirects[] = {
    {"MOVED 3999 127.0.0.1:6381", 0, 0, 3999, "127.0.0.1", 6381},
    {"ASK 0 10.0.0.2:7000", 0, 1, 0, "10.0.0.2", 7000},
    {"MOVED 16383 redis-3.internal:65535", 0, 0, 16383, "redis-3.internal", 65535},
    {"MOVED 12 [::1]:7001", 0, 0, 12, "::1", 7001},
    {"MOVED 12 ::1:7001", 0, 0, 12, "::1", 7001},     /* the last colon ends the host */
    {"MOVED 5 :7002", 0, 0, 5, "self.example", 7002}, /* empty host: the server asked */
    {"MOVED 16384 127.0.0.1:6381", -1, 0, 0, NULL, 0},
    {"MOVED -1 127.0.0.1:6381", -1, 0, 0, NULL, 0},
    {"MOVED x 127.0.0.1:6381", -1, 0, 0, NULL, 0},
    {"MOVED 1 127.0.0.1", -1, 0, 0, NULL, 0},
    {"MOVED 1 127.0.0.1:0", -1, 0, 0, NULL, 0},
    {"MOVED 1 127.0.0.1:65536", -1, 0, 0, NULL, 0},
    {"MOVED 1 127.0.0.1:6381x", -1, 0, 0, NULL, 0},
    {"MOVED 1  127.0.0.1:1", 0, 0, 1, " 127.0.0.1", 1}, /* as written; the connect fails */
    {"MOVED 1 a-host-name-longer-than-the-buffer-given:1", -1, 0, 0, NULL, 0},
    {"ASKING", -1, 0, 0, NULL, 0},
    {"ERR unknown command", -1, 0, 0, NULL, 0},
    {"NOSCRIPT No matching script", -1, 0, 0, NULL, 0},
};

START_TEST(redirect)
{
    char host[32];
    int ask = -1, slot = -1, port = -1;
    int rc = store_reply_redirect(redirects[_i].err, "self.example", &ask, &slot, host,
                                  sizeof(host), &port);

    ck_assert_int_eq(rc, redirects[_i].rc);
    if (rc == 0) {
        ck_assert_int_eq(ask, redirects[_i].ask);
        ck_assert_int_eq(slot, redirects[_i].slot);
        ck_assert_str_eq(host, redirects[_i].host);
        ck_assert_int_eq(port, redirects[_i].port);
    }
    /* the server asked has no known name: an empty host is no redirect */
    if (rc == 0 && strcmp(redirects[_i].host, "self.example") == 0)
        ck_assert_int_eq(
            store_reply_redirect(redirects[_i].err, NULL, &ask, &slot, host, sizeof(host), &port),
            -1);
}
END_TEST

/* Error replies by kind, as Redis 7 words them; refusals are the kinds that
 * say Redis cannot decide for us on that connection. */
static const struct {
    const char *err;
    enum metrics_redis_error kind;
    int refusal;
} error_replies[] = {
    {"READONLY You can't write against a read only replica.", METRICS_REDIS_READONLY, 1},
    {"READONLY You can't write against a read only replica. script: 65a6, on @user_script:1.",
     METRICS_REDIS_READONLY, 1},
    {"MASTERDOWN Link with MASTER is down and replica-serve-stale-data is set to 'no'.",
     METRICS_REDIS_MASTERDOWN, 1},
    {"NOPERM this user has no permissions to run the 'evalsha' command", METRICS_REDIS_NOPERM, 1},
    {"NOPERM this user has no permissions to access one of the keys used as arguments",
     METRICS_REDIS_NOPERM, 1},
    {"ERR The user executing the script can't run this command or subcommand script: 65a6, on "
     "@user_script:1.",
     METRICS_REDIS_NOPERM, 1},
    {"OOM command not allowed when used memory > 'maxmemory'. script: c42b, on @user_script:146.",
     METRICS_REDIS_OOM, 1},
    {"NOAUTH Authentication required.", METRICS_REDIS_NOAUTH, 1},
    {"ERR Protocol error: unauthenticated bulk length", METRICS_REDIS_NOAUTH, 1},
    {"WRONGPASS invalid username-password pair or user is disabled.", METRICS_REDIS_WRONGPASS, 1},
    {"NOSCRIPT No matching script. Please use EVAL.", METRICS_REDIS_NOSCRIPT, 0},
    {"NOREPLICAS Not enough good replicas to write.", METRICS_REDIS_NOREPLICAS, 1},
    {"NOREPLICAS Not enough good replicas to write. script: 65a6, on @user_script:1.",
     METRICS_REDIS_NOREPLICAS, 1},
    {"LOADING Redis is loading the dataset in memory", METRICS_REDIS_LOADING, 1},
    {"TRYAGAIN Multiple keys request during rehashing of slot", METRICS_REDIS_TRYAGAIN, 0},
    {"CLUSTERDOWN Hash slot not served", METRICS_REDIS_CLUSTERDOWN, 0},
    {"BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE.",
     METRICS_REDIS_BUSY, 0},
    {"NOREPLICASX not a word of its own", METRICS_REDIS_OTHER, 0},
    {"ERR Error running script: tb_exact: bad ARGV[1]", METRICS_REDIS_OTHER, 0},
    {"MOVED 3999 127.0.0.1:6381", METRICS_REDIS_OTHER, 0},
    {"READONLYX not a word of its own", METRICS_REDIS_OTHER, 0},
    {"OOMPH", METRICS_REDIS_OTHER, 0},
    {"", METRICS_REDIS_OTHER, 0},
};

START_TEST(error_kind)
{
    enum metrics_redis_error k = store_error_kind(error_replies[_i].err);

    ck_assert_msg(k == error_replies[_i].kind, "%s: kind %d", error_replies[_i].err, (int)k);
    ck_assert_int_eq(store_error_refusal(k), error_replies[_i].refusal);
    ck_assert_str_eq(metrics_redis_error_names[METRICS_REDIS_OTHER], "other");
    /* every kind has its label and a hint that names it (other: says where to look) */
    ck_assert_ptr_nonnull(metrics_redis_error_names[k]);
    if (k != METRICS_REDIS_OTHER)
        ck_assert_msg(strstr(store_error_hint(k, 0), metrics_redis_error_names[k]), "%s",
                      store_error_hint(k, 0));
}
END_TEST

/* The code a warning names: the error's first word when it is one. */
static const struct {
    const char *err, *code;
} error_codes[] = {
    {"NOREPLICAS Not enough good replicas to write.", "NOREPLICAS"},
    {"ERR Error running script", "ERR"},
    {"WRONGTYPE Operation against a key", "WRONGTYPE"},
    {"TRYAGAIN", "TRYAGAIN"},
    {"Error without a code", "other"},
    {"lowercase words", "other"},
    {"", "other"},
    {"ABCDEFGHIJKLMNOPQRSTUVWXYZABCDEFGHIJ too long for a code", "other"},
};

START_TEST(error_code)
{
    char out[40];

    store_error_code(error_codes[_i].err, out, sizeof(out));
    ck_assert_str_eq(out, error_codes[_i].code);
}
END_TEST

/* Why Redis is down, by name (store_why.h): the reasons the store logs, as
 * Redis, hiredis and the store word them. */
static const struct {
    const char *why, *name;
} why_names[] = {
    {"AUTH: WRONGPASS invalid username-password pair or user is disabled.", "WRONGPASS"},
    {"WRONGPASS invalid username-password pair or user is disabled.", "WRONGPASS"},
    {"AUTH: ERR AUTH <password> called without any password configured for the default user. "
     "Are you sure your configuration is correct?",
     "ERR"},
    {"SCRIPT LOAD: NOAUTH Authentication required.", "NOAUTH"},
    {"ERR Protocol error: unauthenticated bulk length", "NOAUTH"},
    {"NOPERM this user has no permissions to run the 'evalsha' command", "NOPERM"},
    {"EVALSHA tb_exact (probe): NOPERM No permissions to access a key", "NOPERM"},
    {"READONLY You can't write against a read only replica.", "READONLY"},
    {"LOADING Redis is loading the dataset in memory", "LOADING"},
    {"OOM command not allowed when used memory > 'maxmemory'.", "OOM"},
    {"SELECT: ERR DB index is out of range", "ERR"},
    {"Connection refused", "connection_refused"},
    {"connect timed out", "timeout"},
    {"setup timed out", "timeout"},
    {"Connection timed out", "timeout"},
    {"not answering", "timeout"},
    {"Connection reset by peer", "connection_reset"},
    {"closed", "closed"},
    {"Server closed the connection", "closed"},
    {"No route to host", "host_unreachable"},
    {"Network is unreachable", "network_unreachable"},
    {"No such file or directory", "no_such_socket"},
    {"Permission denied", "permission_denied"},
    {"redis.example: Name or service not known", "name_lookup"},
    {"redis.example: name lookup timed out", "name_lookup"},
    {"ROLE is slave, not master", "not_master"},
    {"master unconfirmed by the sentinels", "master_unconfirmed"},
    {"malformed replies", "bad_reply"},
    {"scripts do not stay loaded", "NOSCRIPT"},
    {"reply too large: a bulk string of 536870912 bytes", "reply_too_large"},
    {"no address", "no_address"},
    {"something else entirely", "error"},
    {"", "error"},
};

START_TEST(why_name)
{
    char out[STORE_WHY_NAME_MAX];

    store_why_name(why_names[_i].why, out, sizeof(out));
    ck_assert_msg(strcmp(out, why_names[_i].name) == 0, "\"%s\": %s, not %s", why_names[_i].why,
                  out, why_names[_i].name);
}
END_TEST

/* The last reason is the process's; an empty one keeps the one before. */
START_TEST(why_last)
{
    struct store_why w;

    store_why_reset();
    ck_assert_int_eq(store_why_last(&w), 0);
    store_why_note("127.0.0.1:6379", "AUTH: WRONGPASS invalid username-password pair");
    store_why_note("127.0.0.1:6379", "");
    ck_assert_int_eq(store_why_last(&w), 1);
    ck_assert_str_eq(w.name, "WRONGPASS");
    ck_assert_str_eq(w.detail, "AUTH: WRONGPASS invalid username-password pair");
    ck_assert_str_eq(w.addr, "127.0.0.1:6379");
    ck_assert(w.at_ms > 1600000000000LL);
    store_why_note("/run/redis.sock", "Connection refused");
    store_why_last(&w);
    ck_assert_str_eq(w.name, "connection_refused");
    ck_assert_str_eq(w.addr, "/run/redis.sock");
    store_why_reset();
}
END_TEST

/* Any error reply but NOSCRIPT raises redis_errors naming its code and what
 * to do; it clears once no error has come for the quiet period. */
START_TEST(errors_warning)
{
    const struct store_error_where w = {"redis", "127.0.0.1:6379", "EVALSHA tb_claim", NULL, "rl:"};
    struct warning_view v[WARNING_KINDS];
    uint64_t now;

    warning_reset();
    store_error_note(METRICS_REDIS_NOSCRIPT, "NOSCRIPT No matching script.", &w);
    ck_assert_int_eq(warning_active(WARNING_REDIS_ERRORS), 0);
    store_error_note(METRICS_REDIS_NOREPLICAS, "NOREPLICAS Not enough good replicas to write.", &w);
    now = util_now_us();
    ck_assert_int_eq(warning_active(WARNING_REDIS_ERRORS), 1);
    ck_assert_uint_eq(warning_list(v, WARNING_KINDS), 1);
    ck_assert_ptr_nonnull(strstr(v[0].message, "NOREPLICAS"));
    ck_assert_ptr_nonnull(strstr(v[0].message, "min-replicas-to-write"));
    store_error_note(METRICS_REDIS_OTHER, "WRONGTYPE Operation against a key", &w);
    ck_assert_uint_eq(warning_list(v, WARNING_KINDS), 1);
    ck_assert_ptr_nonnull(strstr(v[0].message, "WRONGTYPE"));
    now = util_now_us();
    store_errors_tick(now + 1000, 30000000);
    ck_assert_int_eq(warning_active(WARNING_REDIS_ERRORS), 1);
    store_errors_tick(now + 30000000, 30000000);
    ck_assert_int_eq(warning_active(WARNING_REDIS_ERRORS), 0);
}
END_TEST

/* TRYAGAIN is sent again after a short wait while the retries and the
 * timeout allow; nothing else is. */
static const struct {
    enum metrics_redis_error kind;
    unsigned tries;
    uint64_t waited_us, timeout_us;
    long long wait;
} retries[] = {
    {METRICS_REDIS_TRYAGAIN, 0, 0, 100000, STORE_TRYAGAIN_WAIT_US},
    {METRICS_REDIS_TRYAGAIN, STORE_TRYAGAIN_MAX - 1, 40000, 100000, STORE_TRYAGAIN_WAIT_US},
    {METRICS_REDIS_TRYAGAIN, STORE_TRYAGAIN_MAX, 0, 100000, -1},
    {METRICS_REDIS_TRYAGAIN, 1, 95000, 100000, -1},             /* the answer would come too late */
    {METRICS_REDIS_TRYAGAIN, 0, 0, STORE_TRYAGAIN_WAIT_US, -1}, /* a timeout shorter than a wait */
    {METRICS_REDIS_NOREPLICAS, 0, 0, 100000, -1},
    {METRICS_REDIS_CLUSTERDOWN, 0, 0, 100000, -1},
    {METRICS_REDIS_OTHER, 0, 0, 100000, -1},
};

START_TEST(retry_wait)
{
    ck_assert_int_eq(store_error_retry_wait(retries[_i].kind, retries[_i].tries,
                                            retries[_i].waited_us, retries[_i].timeout_us),
                     retries[_i].wait);
}
END_TEST

int main(void)
{
    TCase *tc = tcase_create("core");

    tcase_add_test(tc, bulk_and_array);
    tcase_add_test(tc, bulks_and_digits);
    tcase_add_loop_test(tc, script_call, 0, sizeof(big_arg_sizes) / sizeof(big_arg_sizes[0]));
    tcase_add_test(tc, read_call);
    tcase_add_loop_test(tc, batch, 0, sizeof(batch_sizes) / sizeof(batch_sizes[0]));
    tcase_add_loop_test(tc, reply_pool, 0, sizeof(replies) / sizeof(replies[0]));
    tcase_add_test(tc, errors_warning);
    tcase_add_loop_test(tc, error_code, 0, sizeof(error_codes) / sizeof(error_codes[0]));
    tcase_add_loop_test(tc, why_name, 0, sizeof(why_names) / sizeof(why_names[0]));
    tcase_add_test(tc, why_last);
    tcase_add_loop_test(tc, retry_wait, 0, sizeof(retries) / sizeof(retries[0]));
    tcase_add_loop_test(tc, redirect, 0, sizeof(redirects) / sizeof(redirects[0]));
    tcase_add_loop_test(tc, error_kind, 0, sizeof(error_replies) / sizeof(error_replies[0]));
    return check_run_case("resp", tc);
}
