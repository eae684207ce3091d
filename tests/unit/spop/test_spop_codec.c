/* SPDX-License-Identifier: Apache-2.0 */
/* test_spop_codec.c - unit tests of the SPOP codec (src/spop/spop.c):
 * varints, typed data, the encoders (AGENT-HELLO, AGENT-DISCONNECT, frame
 * headers, ACK actions), malformed input and status texts. Every decoder
 * input lives in a heap buffer of exactly its size (spop_fixture.h). */
#include "spop/spop.h"

#include <check.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check_util.h"
#include "spop_fixture.h"
#include "spop_vectors.h"

/* ---- varints ------------------------------------------------------------- */

static void check_varint(uint64_t v, size_t want_len, const char *hex)
{
    size_t len = spop_varint_len(v), n;
    uint8_t *buf = malloc(len), *want;
    struct spop_writer w = st_writer(buf, len);
    struct spop_reader r;
    uint64_t got;

    ck_assert_uint_eq(len, want_len);
    ck_assert_int_eq(spop_put_varint(&w, v), SPOP_OK);
    ck_assert_ptr_eq(w.p, buf + len);
    if (hex) {
        want = st_hex_dup(hex, &n);
        ck_assert_uint_eq(n, len);
        ck_assert_mem_eq(buf, want, n);
        free(want);
    }
    /* a roomy writer encodes in place: the same bytes */
    uint8_t roomy[SPOP_VARINT_MAX_LEN + 2];
    w = st_writer(roomy, sizeof(roomy));
    ck_assert_int_eq(spop_put_varint(&w, v), SPOP_OK);
    ck_assert_ptr_eq(w.p, roomy + len);
    ck_assert_mem_eq(roomy, buf, len);
    /* one byte short: nothing written, cursor unmoved */
    w = st_writer(buf, len - 1);
    ck_assert_int_eq(spop_put_varint(&w, v), SPOP_ENOSPC);
    ck_assert_ptr_eq(w.p, buf);
    /* w wrote the whole varint earlier; decode it from an exact copy */
    for (size_t cut = 0; cut <= len; cut++) {
        uint8_t *copy = st_dup_exact(buf, cut);

        r = st_reader(copy, cut);
        if (cut < len) {
            ck_assert_int_eq(spop_get_varint(&r, &got), SPOP_EINVAL);
            ck_assert_ptr_eq(r.p, copy);
        } else {
            ck_assert_int_eq(spop_get_varint(&r, &got), SPOP_OK);
            ck_assert_uint_eq(got, v);
            ck_assert_ptr_eq(r.p, copy + len);
        }
        free(copy);
    }
    free(buf);
}

START_TEST(test_varint_cases)
{
    check_varint(spop_varint_cases[_i].v, spop_varint_cases[_i].len, spop_varint_cases[_i].hex);
}
END_TEST

/* Width k ends at B(k) - 1: B(1) = 240, B(k+1) = B(k) + 2^(4 + 7k). */
START_TEST(test_varint_widths)
{
    uint64_t b = 240;

    for (int k = 1; k < SPOP_VARINT_MAX_LEN; k++) {
        check_varint(b - 1, (size_t)k, NULL);
        check_varint(b, (size_t)k + 1, NULL);
        if (k + 1 < SPOP_VARINT_MAX_LEN)
            b += 1ULL << (4 + 7 * k);
    }
}
END_TEST

/* ---- typed data ---------------------------------------------------------- */

START_TEST(test_data_cases)
{
    size_t n, rawn = 0;
    uint8_t *buf = st_hex_dup(spop_data_cases[_i].hex, &n), *raw = NULL, *out;
    struct spop_reader r = st_reader(buf, n);
    struct spop_writer w;
    struct spop_data d;

    ck_assert_int_eq(spop_get_data(&r, &d), SPOP_OK);
    ck_assert_ptr_eq(r.p, buf + n);
    ck_assert_uint_eq(d.type, spop_data_cases[_i].type);
    if (spop_data_cases[_i].raw)
        raw = st_hex_dup(spop_data_cases[_i].raw, &rawn);
    switch (d.type) {
    case SPOP_DATA_BOOL:
    case SPOP_DATA_INT32:
    case SPOP_DATA_INT64:
        ck_assert_int_eq(d.u.sint, spop_data_cases[_i].sint);
        break;
    case SPOP_DATA_UINT32:
    case SPOP_DATA_UINT64:
        ck_assert_uint_eq(d.u.uint, spop_data_cases[_i].uint);
        break;
    case SPOP_DATA_IPV4:
    case SPOP_DATA_IPV6:
        ck_assert_mem_eq(d.u.ip, raw, rawn);
        break;
    case SPOP_DATA_STR:
    case SPOP_DATA_BIN:
        ck_assert_uint_eq(d.u.buf.len, rawn);
        ck_assert_ptr_eq(d.u.buf.ptr, (const char *)buf + n - rawn); /* a view */
        if (rawn)
            ck_assert_mem_eq(d.u.buf.ptr, raw, rawn);
        break;
    }
    /* every strict prefix is refused without moving the cursor */
    for (size_t cut = 0; cut < n; cut++) {
        uint8_t *copy = st_dup_exact(buf, cut);
        struct spop_data junk;

        r = st_reader(copy, cut);
        ck_assert_int_eq(spop_get_data(&r, &junk), SPOP_EINVAL);
        ck_assert_ptr_eq(r.p, copy);
        free(copy);
    }
    if (spop_data_cases[_i].canonical) {
        /* too small at every size, then exact */
        for (size_t size = 0; size <= n; size++) {
            out = malloc(size ? size : 1);
            w = st_writer(out, size);
            ck_assert_int_eq(spop_put_data(&w, &d), size < n ? SPOP_ENOSPC : SPOP_OK);
            ck_assert_ptr_eq(w.p, size < n ? out : out + n);
            if (size == n)
                ck_assert_mem_eq(out, buf, n);
            free(out);
        }
    }
    free(raw);
    free(buf);
}
END_TEST

START_TEST(test_data_put_invalid)
{
    uint8_t buf[32];
    struct spop_writer w = st_writer(buf, sizeof(buf));
    struct spop_data d;

    memset(&d, 0, sizeof(d));
    d.type = 10;
    ck_assert_int_eq(spop_put_data(&w, &d), SPOP_EINVAL);
    d.type = SPOP_DATA_INT32;
    d.u.sint = (int64_t)INT32_MAX + 1;
    ck_assert_int_eq(spop_put_data(&w, &d), SPOP_EINVAL);
    d.u.sint = (int64_t)INT32_MIN - 1;
    ck_assert_int_eq(spop_put_data(&w, &d), SPOP_EINVAL);
    d.type = SPOP_DATA_UINT32;
    d.u.uint = (uint64_t)UINT32_MAX + 1;
    ck_assert_int_eq(spop_put_data(&w, &d), SPOP_EINVAL);
    d = spop_string(NULL, 3);
    ck_assert_int_eq(spop_put_data(&w, &d), SPOP_EINVAL);
    ck_assert_int_eq(spop_put_str(&w, NULL, 1), SPOP_EINVAL);
    ck_assert_int_eq(spop_put_str(&w, "x", SIZE_MAX), SPOP_ENOSPC); /* no overflow, no read */
    ck_assert_int_eq(spop_put_kv(&w, NULL, &d), SPOP_EINVAL);
    ck_assert_int_eq(spop_put_kv(&w, "k", NULL), SPOP_EINVAL);
    ck_assert_int_eq(spop_put_kv(&w, "k", &d), SPOP_EINVAL); /* d is still invalid */
    ck_assert_ptr_eq(w.p, buf);
}
END_TEST

START_TEST(test_constructors)
{
    struct spop_data d = spop_bool(7);

    ck_assert(d.type == SPOP_DATA_BOOL && d.u.sint == 1);
    d = spop_bool(0);
    ck_assert(d.type == SPOP_DATA_BOOL && d.u.sint == 0);
    d = spop_int(-5);
    ck_assert(d.type == SPOP_DATA_INT64 && d.u.sint == -5);
    d = spop_uint(UINT32_MAX);
    ck_assert(d.type == SPOP_DATA_UINT32 && d.u.uint == UINT32_MAX);
    d = spop_string("abc", 2);
    ck_assert(d.type == SPOP_DATA_STR && st_str_is(d.u.buf, "ab"));
}
END_TEST

/* ---- encoders ------------------------------------------------------------ */

/* Call enc into exact heap buffers of every size below the needed one. A
 * single encoder call rewinds on failure (atomic); a sequence of calls keeps
 * what fitted, but never goes past the end. */
static void check_nospc(int (*enc)(struct spop_writer *, const void *), const void *arg,
                        size_t need, int atomic)
{
    for (size_t size = 0; size < need; size++) {
        uint8_t *buf = malloc(size ? size : 1);
        struct spop_writer w = st_writer(buf, size);

        ck_assert_int_eq(enc(&w, arg), SPOP_ENOSPC);
        ck_assert(atomic ? w.p == buf : w.p >= buf && w.p <= buf + size);
        free(buf);
    }
}

static int enc_hello(struct spop_writer *w, const void *caps)
{
    return spop_agent_hello_encode(w, SPOP_DEFAULT_FRAME_SIZE, caps);
}

static int enc_disconnect(struct spop_writer *w, const void *msg)
{
    return spop_agent_disconnect_encode(w, SPOP_ST_TOO_BIG, msg);
}

START_TEST(test_agent_hello)
{
    uint8_t out[256], *want;
    struct spop_writer w = st_writer(out, sizeof(out));
    struct spop_frame f;
    struct spop_reader r;
    struct spop_str key;
    struct spop_data val;
    size_t n;

    ck_assert_int_eq(spop_agent_hello_encode(&w, SPOP_DEFAULT_FRAME_SIZE, "pipelining"), SPOP_OK);
    want = st_hex_dup(spop_golden_agent_hello, &n);
    ck_assert_uint_eq((size_t)(w.p - out), n);
    ck_assert_mem_eq(out, want, n);
    free(want);
    check_nospc(enc_hello, "pipelining", n, 1);

    /* no capabilities: the item is still there, empty */
    w = st_writer(out, sizeof(out));
    ck_assert_int_eq(spop_agent_hello_encode(&w, 1024, NULL), SPOP_OK);
    st_frame_ok(out, (size_t)(w.p - out), &f);
    ck_assert(f.type == SPOP_FRAME_AGENT_HELLO && f.flags == SPOP_FLAG_FIN);
    ck_assert(f.stream_id == 0 && f.frame_id == 0);
    r = st_reader(f.payload, f.payload_len);
    ck_assert_int_eq(spop_kv_next(&r, &key, &val), 1);
    ck_assert(st_str_is(key, "version") && val.type == SPOP_DATA_STR &&
              st_str_is(val.u.buf, "2.0"));
    ck_assert_int_eq(spop_kv_next(&r, &key, &val), 1);
    ck_assert(st_str_is(key, "max-frame-size") && val.type == SPOP_DATA_UINT32);
    ck_assert_uint_eq(val.u.uint, 1024);
    ck_assert_int_eq(spop_kv_next(&r, &key, &val), 1);
    ck_assert(st_str_is(key, "capabilities") && val.type == SPOP_DATA_STR && val.u.buf.len == 0);
    ck_assert_int_eq(spop_kv_next(&r, &key, &val), 0);
}
END_TEST

START_TEST(test_agent_disconnect)
{
    char long_msg[301];
    uint8_t out[512];
    struct spop_writer w = st_writer(out, sizeof(out));
    struct spop_frame f;
    struct spop_disconnect d;
    size_t len;

    memset(long_msg, 'x', 300);
    long_msg[300] = '\0';
    ck_assert_int_eq(spop_agent_disconnect_encode(&w, SPOP_ST_TOO_BIG, long_msg), SPOP_OK);
    len = (size_t)(w.p - out);
    st_frame_ok(out, len, &f);
    ck_assert(f.type == SPOP_FRAME_AGENT_DISCONNECT && f.flags == SPOP_FLAG_FIN);
    ck_assert_int_eq(spop_disconnect_decode(&f, &d), SPOP_OK);
    ck_assert_uint_eq(d.status_code, SPOP_ST_TOO_BIG);
    ck_assert_uint_eq(d.message.len, SPOP_MAX_STATUS_MSG);
    ck_assert(memcmp(d.message.ptr, long_msg, SPOP_MAX_STATUS_MSG) == 0);
    check_nospc(enc_disconnect, long_msg, len, 1);

    w = st_writer(out, sizeof(out));
    ck_assert_int_eq(spop_agent_disconnect_encode(&w, SPOP_ST_NONE, NULL), SPOP_OK);
    st_frame_ok(out, (size_t)(w.p - out), &f);
    ck_assert_int_eq(spop_disconnect_decode(&f, &d), SPOP_OK);
    ck_assert_uint_eq(d.status_code, 0);
    ck_assert_spop_str(d.message, "");
}
END_TEST

START_TEST(test_frame_begin_end)
{
    uint8_t out[64], *start = NULL;
    struct spop_writer w = st_writer(out, sizeof(out));

    ck_assert_int_eq(spop_frame_end(&w, NULL), SPOP_EINVAL);
    ck_assert_int_eq(spop_frame_begin(&w, SPOP_FRAME_ACK, SPOP_FLAG_FIN, UINT64_MAX, 1, &start),
                     SPOP_OK);
    ck_assert_ptr_eq(start, out);
    ck_assert_uint_eq((size_t)(w.p - out), 4 + 1 + 4 + 10 + 1);
    ck_assert_int_eq(spop_frame_end(&w, out + 10), SPOP_EINVAL); /* too little behind it */
    ck_assert_int_eq(spop_frame_end(&w, start), SPOP_OK);
    ck_assert_uint_eq(out[3], 4 + 1 + 4 + 10 + 1 - SPOP_FRAME_LEN_SIZE);
    /* every too-small writer */
    for (size_t size = 0; size < 20; size++) {
        uint8_t *buf = malloc(size ? size : 1);
        struct spop_writer s = st_writer(buf, size);

        ck_assert_int_eq(spop_frame_begin(&s, 3, 1, UINT64_MAX, 1, &start), SPOP_ENOSPC);
        ck_assert_ptr_eq(s.p, buf);
        free(buf);
    }
}
END_TEST

/* A frame over the hard cap is refused by the encoder as the decoder would. */
START_TEST(test_frame_end_too_big)
{
    size_t size = SPOP_FRAME_LEN_SIZE + SPOP_MAX_FRAME_SIZE + 1;
    uint8_t *buf = malloc(size), *start;
    struct spop_writer w = st_writer(buf, size);

    ck_assert_ptr_nonnull(buf);
    ck_assert_int_eq(spop_frame_begin(&w, SPOP_FRAME_ACK, SPOP_FLAG_FIN, 1, 1, &start), SPOP_OK);
    w.p = buf + size - 1; /* a payload exactly at the cap */
    ck_assert_int_eq(spop_frame_end(&w, start), SPOP_OK);
    w.p = buf + size;
    ck_assert_int_eq(spop_frame_end(&w, start), SPOP_ETOOBIG);
    free(buf);
}
END_TEST

/* ---- ACK actions --------------------------------------------------------- */

static int enc_actions(struct spop_writer *w, const void *unused)
{
    struct spop_data v = spop_bool(1);
    int rc = spop_put_set_var(w, SPOP_SCOPE_TXN, "blocked", &v);

    if (rc == SPOP_OK) {
        v = spop_int(3);
        rc = spop_put_set_var(w, SPOP_SCOPE_TXN, "retry_after", &v);
    }
    if (rc == SPOP_OK) {
        v = spop_string("gold", 4);
        rc = spop_put_set_var(w, SPOP_SCOPE_REQ, "plan", &v);
    }
    if (rc == SPOP_OK) {
        memset(&v, 0, sizeof(v)); /* NULL: HAProxy unsets the variable */
        rc = spop_put_set_var(w, SPOP_SCOPE_SESS, "gone", &v);
    }
    if (rc == SPOP_OK)
        rc = spop_put_unset_var(w, SPOP_SCOPE_TXN, "limit");
    return rc;
}

START_TEST(test_actions)
{
    static const struct {
        uint8_t action, scope, type;
        const char *name;
        int64_t sint;
    } want[] = {
        {SPOP_ACT_SET_VAR, SPOP_SCOPE_TXN, SPOP_DATA_BOOL, "blocked", 1},
        {SPOP_ACT_SET_VAR, SPOP_SCOPE_TXN, SPOP_DATA_INT64, "retry_after", 3},
        {SPOP_ACT_SET_VAR, SPOP_SCOPE_REQ, SPOP_DATA_STR, "plan", 0},
        {SPOP_ACT_SET_VAR, SPOP_SCOPE_SESS, SPOP_DATA_NULL, "gone", 0},
        {SPOP_ACT_UNSET_VAR, SPOP_SCOPE_TXN, SPOP_DATA_NULL, "limit", 0},
    };
    uint8_t out[256], *start, *buf, *gold;
    struct spop_writer w = st_writer(out, sizeof(out));
    struct spop_frame f;
    struct spop_reader r;
    struct spop_str name;
    struct spop_data val;
    uint8_t action, scope;
    size_t n, len;

    ck_assert_int_eq(spop_frame_begin(&w, SPOP_FRAME_ACK, SPOP_FLAG_FIN, 1ULL << 40, 7, &start),
                     SPOP_OK);
    ck_assert_int_eq(enc_actions(&w, NULL), SPOP_OK);
    ck_assert_int_eq(spop_frame_end(&w, start), SPOP_OK);
    len = (size_t)(w.p - out);
    buf = st_dup_exact(out, len);
    st_frame_ok(buf, len, &f);
    ck_assert(f.type == SPOP_FRAME_ACK && f.stream_id == 1ULL << 40 && f.frame_id == 7);
    gold = st_hex_dup(spop_golden_actions, &n);
    ck_assert_uint_eq(f.payload_len, n);
    ck_assert_mem_eq(f.payload, gold, n);
    check_nospc(enc_actions, NULL, n, 0);

    r = st_reader(f.payload, f.payload_len);
    for (int i = 0; i < ST_NELEM(want); i++) {
        ck_assert_int_eq(spop_action_next(&r, &action, &scope, &name, &val), 1);
        ck_assert_uint_eq(action, want[i].action);
        ck_assert_uint_eq(scope, want[i].scope);
        ck_assert_spop_str(name, want[i].name);
        ck_assert_uint_eq(val.type, want[i].type);
        if (val.type == SPOP_DATA_STR)
            ck_assert_spop_str(val.u.buf, "gold");
        else if (val.type != SPOP_DATA_NULL)
            ck_assert_int_eq(val.u.sint, want[i].sint);
    }
    ck_assert_int_eq(spop_action_next(&r, &action, &scope, &name, &val), 0);
    free(gold);
    free(buf);
}
END_TEST

START_TEST(test_actions_invalid_put)
{
    static const char name48[] = "abcdefghijklmnopqrstuvwxyzabcdefghijklmnopqrstuv";
    static const char name49[] = "abcdefghijklmnopqrstuvwxyzabcdefghijklmnopqrstuvw";
    uint8_t out[128];
    struct spop_writer w = st_writer(out, sizeof(out));
    struct spop_data v = spop_bool(1);

    ck_assert_int_eq(spop_put_set_var(&w, SPOP_SCOPE_RES + 1, "x", &v), SPOP_EINVAL);
    ck_assert_int_eq(spop_put_set_var(&w, SPOP_SCOPE_TXN, "", &v), SPOP_EINVAL);
    ck_assert_int_eq(spop_put_set_var(&w, SPOP_SCOPE_TXN, NULL, &v), SPOP_EINVAL);
    ck_assert_int_eq(spop_put_set_var(&w, SPOP_SCOPE_TXN, "x", NULL), SPOP_EINVAL);
    ck_assert_int_eq(spop_put_set_var(&w, SPOP_SCOPE_TXN, name49, &v), SPOP_EINVAL);
    ck_assert_int_eq(spop_put_unset_var(&w, SPOP_SCOPE_TXN, name49), SPOP_EINVAL);
    /* the same checks when the caller gives the name's length */
    ck_assert_int_eq(spop_put_set_var_len(&w, SPOP_SCOPE_TXN, "x", 0, &v), SPOP_EINVAL);
    ck_assert_int_eq(spop_put_set_var_len(&w, SPOP_SCOPE_TXN, NULL, 1, &v), SPOP_EINVAL);
    ck_assert_int_eq(spop_put_set_var_len(&w, SPOP_SCOPE_TXN, name49, 49, &v), SPOP_EINVAL);
    ck_assert_int_eq(spop_put_set_var_len(&w, SPOP_SCOPE_RES + 1, "x", 1, &v), SPOP_EINVAL);
    v.type = 12;
    ck_assert_int_eq(spop_put_set_var(&w, SPOP_SCOPE_TXN, "x", &v), SPOP_EINVAL);
    ck_assert_ptr_eq(w.p, out);
    v = spop_bool(0);
    ck_assert_int_eq(spop_put_set_var(&w, SPOP_SCOPE_PROC, name48, &v), SPOP_OK);
    ck_assert_uint_eq((size_t)(w.p - out), 3 + 1 + 48 + 1);
    /* a length shorter than the string takes that prefix, as the same bytes */
    uint8_t a[64], b[64];
    struct spop_writer wa = st_writer(a, sizeof(a)), wb = st_writer(b, sizeof(b));
    ck_assert_int_eq(spop_put_set_var_len(&wa, SPOP_SCOPE_TXN, "limitless", 5, &v), SPOP_OK);
    ck_assert_int_eq(spop_put_set_var(&wb, SPOP_SCOPE_TXN, "limit", &v), SPOP_OK);
    ck_assert_uint_eq((size_t)(wa.p - a), (size_t)(wb.p - b));
    ck_assert_mem_eq(a, b, (size_t)(wb.p - b));
}
END_TEST

/* spop_put_set_var_int/_str write the bytes spop_put_set_var_len writes,
 * with the same errors and the same rollback, at every writer size (the
 * in-place path and the generic one alike). */
START_TEST(test_set_var_typed_same_bytes)
{
    static const char name48[] = "abcdefghijklmnopqrstuvwxyzabcdefghijklmnopqrstuv";
    static const int64_t ints[] = {0, 1, 239, 240, 2287, 2288, 999999, -1, INT64_MAX, INT64_MIN};
    static char text[300];
    static const size_t str_lens[] = {0, 1, 25, 239, 240, 300};
    static const size_t name_lens[] = {0, 1, 9, 48, 49};
    static const uint8_t scopes[] = {SPOP_SCOPE_TXN, SPOP_SCOPE_RES, SPOP_SCOPE_RES + 1};
    uint8_t a[400], b[400];

    memset(text, 'r', sizeof(text));
    for (size_t s = 0; s < sizeof(scopes); s++)
        for (size_t nl = 0; nl < sizeof(name_lens) / sizeof(name_lens[0]); nl++)
            for (size_t k = 0; k < 10 + 6; k++)
                for (size_t cap = 0; cap <= 360; cap += cap < 80 ? 1 : 37) {
                    struct spop_writer wa = st_writer(a, cap), wb = st_writer(b, cap);
                    struct spop_data d;
                    int ra, rb;
                    const char *nm = name_lens[nl] == 49 ? "abcdefghijklmnopqrstuvwxyzabcdefghijklm"
                                                           "nopqrstuvw"
                                                         : name48;
                    memset(a, 0xee, sizeof(a));
                    memset(b, 0xee, sizeof(b));
                    if (k < 10) {
                        d = spop_int(ints[k]);
                        ra = spop_put_set_var_int(&wa, scopes[s], nm, name_lens[nl], ints[k]);
                    } else {
                        d = spop_string(text, str_lens[k - 10]);
                        ra = spop_put_set_var_str(&wa, scopes[s], nm, name_lens[nl], text,
                                                  str_lens[k - 10]);
                    }
                    rb = spop_put_set_var_len(&wb, scopes[s], nm, name_lens[nl], &d);
                    ck_assert_int_eq(ra, rb);
                    ck_assert_uint_eq((size_t)(wa.p - a), (size_t)(wb.p - b));
                    ck_assert_mem_eq(a, b, (size_t)(wb.p - b));
                }
}
END_TEST

/* Every decoder refuses its bad input without consuming anything. */
START_TEST(test_malformed)
{
    size_t n, consumed;
    uint8_t *buf = st_hex_dup(spop_bad_cases[_i].hex, &n), action, scope;
    struct spop_reader r = st_reader(buf, n);
    struct spop_frame f;
    struct spop_data d;
    struct spop_str name;
    uint64_t v;
    int rc = 0;

    switch (spop_bad_cases[_i].kind) {
    case SPOP_BAD_VARINT:
        rc = spop_get_varint(&r, &v);
        break;
    case SPOP_BAD_DATA:
        rc = spop_get_data(&r, &d);
        break;
    case SPOP_BAD_ACTION:
        rc = spop_action_next(&r, &action, &scope, &name, &d);
        break;
    case SPOP_BAD_FRAME:
        rc = spop_frame_decode(buf, n, SPOP_DEFAULT_FRAME_SIZE, &f, &consumed);
        break;
    }
    ck_assert_msg(rc == SPOP_EINVAL, "\"%s\": %d", spop_bad_cases[_i].hex, rc);
    ck_assert_ptr_eq(r.p, buf);
    free(buf);
}
END_TEST

START_TEST(test_status_str)
{
    ck_assert_str_eq(spop_status_str(SPOP_ST_NONE), "normal");
    ck_assert_str_eq(spop_status_str(SPOP_ST_TIMEOUT), "a timeout occurred");
    ck_assert_str_eq(spop_status_str(SPOP_ST_RES_ALLOC_ERR), "resource allocation error");
    for (unsigned s = 0; s <= SPOP_ST_RES_ALLOC_ERR; s++)
        ck_assert_str_ne(spop_status_str(s), "unknown");
    ck_assert_str_ne(spop_status_str(SPOP_ST_UNKNOWN), "unknown");
    ck_assert_str_eq(spop_status_str(14), "unknown");
    ck_assert_str_eq(spop_status_str(100), "unknown");
}
END_TEST

static Suite *spop_codec_suite(void)
{
    Suite *s = suite_create("spop_codec");
    TCase *tc;

    tc = tcase_create("varint");
    tcase_add_loop_test(tc, test_varint_cases, 0, ST_NELEM(spop_varint_cases));
    tcase_add_test(tc, test_varint_widths);
    suite_add_tcase(s, tc);

    tc = tcase_create("data");
    tcase_add_loop_test(tc, test_data_cases, 0, ST_NELEM(spop_data_cases));
    CHECK_ADD(tc, test_data_put_invalid, test_constructors);
    suite_add_tcase(s, tc);

    tc = tcase_create("encoders");
    CHECK_ADD(tc, test_agent_hello, test_agent_disconnect, test_frame_begin_end,
              test_frame_end_too_big, test_actions, test_actions_invalid_put,
              test_set_var_typed_same_bytes, test_status_str);
    suite_add_tcase(s, tc);

    tc = tcase_create("malformed");
    tcase_add_loop_test(tc, test_malformed, 0, ST_NELEM(spop_bad_cases));
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return check_run(spop_codec_suite());
}
