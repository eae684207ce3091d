/* SPDX-License-Identifier: Apache-2.0 */
/* test_spop_frames.c - whole SPOP frames through the codec: the real
 * frames of tests/unit/spop_vectors.h (HAProxy 2.6 captures), one after the
 * other in a stream, header errors, corrupted NOTIFY payloads, and the items
 * of HAPROXY-HELLO (types, versions, capabilities, a cut payload). */
#include "spop/spop.h"

#include <check.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check_util.h"
#include "spop_fixture.h"
#include "spop_vectors.h"

/* ---- real frames --------------------------------------------------------- */

/* Decode vector i from an exact heap copy, which the caller frees. */
static uint8_t *decode_vector(size_t i, struct spop_frame *f)
{
    uint8_t *buf = st_dup_exact(spop_vectors[i].data, spop_vectors[i].len);

    st_frame_ok(buf, spop_vectors[i].len, f);
    return buf;
}

START_TEST(test_frame_vectors)
{
    const struct spop_vector *v = &spop_vectors[_i];
    struct spop_frame f;
    uint8_t *buf = decode_vector((size_t)_i, &f);
    size_t consumed;

    ck_assert_uint_eq(f.type, spop_vector_headers[_i].type);
    ck_assert_uint_eq(f.flags, SPOP_FLAG_FIN);
    ck_assert_uint_eq(f.stream_id, spop_vector_headers[_i].stream_id);
    ck_assert_uint_eq(f.frame_id, spop_vector_headers[_i].frame_id);
    ck_assert_ptr_eq(f.payload, buf + SPOP_FRAME_LEN_SIZE + SPOP_FRAME_MIN_LEN);
    ck_assert_uint_eq(f.payload_len, v->len - SPOP_FRAME_LEN_SIZE - SPOP_FRAME_MIN_LEN);
    /* one byte over the limit is refused, from the prefix alone */
    ck_assert_int_eq(spop_frame_decode(buf, SPOP_FRAME_LEN_SIZE, v->len - SPOP_FRAME_LEN_SIZE - 1,
                                       &f, &consumed),
                     SPOP_ETOOBIG);
    free(buf);
    for (size_t cut = 0; cut < v->len; cut++) {
        uint8_t *copy = st_dup_exact(v->data, cut);

        ck_assert_int_eq(spop_frame_decode(copy, cut, SPOP_DEFAULT_FRAME_SIZE, &f, &consumed),
                         SPOP_EAGAIN);
        free(copy);
    }
}
END_TEST

START_TEST(test_frame_stream)
{
    uint8_t all[1024], *buf;
    size_t total = 0, off = 0, consumed;
    struct spop_frame f;

    for (size_t i = 0; i < SPOP_NVECTORS; i++) {
        memcpy(all + total, spop_vectors[i].data, spop_vectors[i].len);
        total += spop_vectors[i].len;
    }
    buf = st_dup_exact(all, total);
    for (size_t i = 0; i < SPOP_NVECTORS; i++) {
        ck_assert_int_eq(
            spop_frame_decode(buf + off, total - off, SPOP_DEFAULT_FRAME_SIZE, &f, &consumed),
            SPOP_OK);
        ck_assert_uint_eq(consumed, spop_vectors[i].len);
        ck_assert_uint_eq(f.type, spop_vector_headers[i].type);
        off += consumed;
    }
    ck_assert_int_eq(
        spop_frame_decode(buf + off, total - off, SPOP_DEFAULT_FRAME_SIZE, &f, &consumed),
        SPOP_EAGAIN);
    ck_assert_int_eq(spop_frame_decode(NULL, 0, SPOP_DEFAULT_FRAME_SIZE, &f, &consumed),
                     SPOP_EAGAIN);
    free(buf);
}
END_TEST

START_TEST(test_hello_vector)
{
    struct spop_frame f;
    struct spop_hello h;
    uint8_t *buf = decode_vector(SPOP_VEC_HAPROXY_HELLO, &f);

    ck_assert_int_eq(spop_hello_decode(&f, &h), SPOP_OK);
    ck_assert(h.has_version && h.version_ok);
    ck_assert(h.has_max_frame_size);
    ck_assert_uint_eq(h.max_frame_size, 16380);
    ck_assert(h.has_capabilities && h.pipelining && h.async && !h.fragmentation);
    ck_assert(!h.healthcheck);
    ck_assert_spop_str(h.engine_id, "d6e5236e-9b4c-4024-bd03-9d0a8bba70f0");
    free(buf);
}
END_TEST

START_TEST(test_hello_healthcheck_vector)
{
    struct spop_frame f;
    struct spop_hello h;
    uint8_t *buf = decode_vector(SPOP_VEC_HAPROXY_HELLO_HEALTHCHECK, &f);

    ck_assert_int_eq(spop_hello_decode(&f, &h), SPOP_OK);
    ck_assert(h.has_version && h.version_ok);
    ck_assert_uint_eq(h.max_frame_size, 16380);
    ck_assert(h.has_capabilities && !h.pipelining && !h.async && !h.fragmentation);
    ck_assert(h.healthcheck);
    ck_assert_ptr_null(h.engine_id.ptr);
    ck_assert_uint_eq(h.engine_id.len, 0);
    free(buf);
}
END_TEST

START_TEST(test_notify_vectors)
{
    static const char *const names[] = {"key", "ip",  "path",    "method", "plan",
                                        "n",   "neg", "missing", "b"};
    static const uint8_t ipv4[4] = {127, 0, 0, 1};
    static const uint8_t ipv6[16] = {[15] = 1};
    static struct spop_message m; /* ~10 KB: keep it off the stack */
    int v6 = _i == SPOP_VEC_NOTIFY_IPV6;
    struct spop_frame f;
    uint8_t *buf = decode_vector((size_t)_i, &f);
    struct spop_reader r = st_reader(f.payload, f.payload_len);
    const struct spop_arg *a = m.args;

    ck_assert_int_eq(spop_message_next(&r, &m), 1);
    ck_assert_spop_str(m.name, "check-rate");
    ck_assert_uint_eq(m.nargs, 9);
    for (unsigned i = 0; i < m.nargs; i++)
        ck_assert_spop_str(a[i].name, names[i]);
    ck_assert(a[0].value.type == SPOP_DATA_STR);
    ck_assert_spop_str(a[0].value.u.buf, v6 ? "k2" : "tenant-1");
    ck_assert_uint_eq(a[1].value.type, v6 ? SPOP_DATA_IPV6 : SPOP_DATA_IPV4);
    ck_assert_mem_eq(a[1].value.u.ip, v6 ? ipv6 : ipv4, v6 ? 16 : 4);
    ck_assert_spop_str(a[2].value.u.buf, v6 ? "/login" : "/api/v1/items");
    ck_assert_spop_str(a[3].value.u.buf, "GET");
    ck_assert_spop_str(a[4].value.u.buf, "free");
    ck_assert(a[5].value.type == SPOP_DATA_INT64 && a[5].value.u.sint == 42);
    ck_assert(a[6].value.type == SPOP_DATA_INT64 && a[6].value.u.sint == -5);
    ck_assert(a[7].value.type == SPOP_DATA_NULL);
    ck_assert(a[8].value.type == SPOP_DATA_BOOL && a[8].value.u.sint == 1);
    ck_assert_int_eq(spop_message_next(&r, &m), 0);
    ck_assert_uint_eq(m.nargs, 0);
    free(buf);
}
END_TEST

START_TEST(test_disconnect_vector)
{
    struct spop_frame f;
    struct spop_disconnect d;
    uint8_t *buf = decode_vector(SPOP_VEC_HAPROXY_DISCONNECT, &f);

    ck_assert_int_eq(spop_disconnect_decode(&f, &d), SPOP_OK);
    ck_assert_uint_eq(d.status_code, SPOP_ST_TIMEOUT);
    ck_assert_spop_str(d.message, "a timeout occurred");
    free(buf);
}
END_TEST

/* ---- frame header errors ------------------------------------------------- */

START_TEST(test_frame_too_big)
{
    static const struct {
        const char *hex;
        size_t max_len;
    } cases[] = {
        {"00004000", SPOP_DEFAULT_FRAME_SIZE},
        {"ffffffff", SPOP_DEFAULT_FRAME_SIZE},
        {"ffffffff", SIZE_MAX},
        {"01000001", SIZE_MAX}, /* SPOP_MAX_FRAME_SIZE + 1: the hard cap */
        {"00000100", 255},
    };
    struct spop_frame f;
    size_t n, consumed;

    for (int i = 0; i < ST_NELEM(cases); i++) {
        uint8_t *buf = st_hex_dup(cases[i].hex, &n);

        ck_assert_int_eq(spop_frame_decode(buf, n, cases[i].max_len, &f, &consumed), SPOP_ETOOBIG);
        free(buf);
    }
    /* exactly at the limit is fine, merely incomplete */
    uint8_t *buf = st_hex_dup("00003ffc 03", &n);
    ck_assert_int_eq(spop_frame_decode(buf, n, SPOP_DEFAULT_FRAME_SIZE, &f, &consumed),
                     SPOP_EAGAIN);
    free(buf);
}
END_TEST

START_TEST(test_frame_too_short)
{
    uint8_t full[16] = {0, 0, 0, (uint8_t)_i, SPOP_FRAME_NOTIFY, 0, 0, 0, 1, 0, 0};
    struct spop_frame f;
    size_t consumed;

    for (size_t n = SPOP_FRAME_LEN_SIZE; n <= SPOP_FRAME_LEN_SIZE + (size_t)_i; n++) {
        uint8_t *buf = st_dup_exact(full, n);

        ck_assert_int_eq(spop_frame_decode(buf, n, SPOP_DEFAULT_FRAME_SIZE, &f, &consumed),
                         SPOP_EINVAL);
        free(buf);
    }
}
END_TEST

START_TEST(test_notify_corrupt)
{
    const struct spop_vector *v = &spop_vectors[SPOP_VEC_NOTIFY_IPV4];
    size_t hdr = SPOP_FRAME_LEN_SIZE + SPOP_FRAME_MIN_LEN, n = v->len - hdr;
    uint8_t *p = st_dup_exact(v->data + hdr, n);

    ck_assert_int_eq(st_run_messages(p, n), 0);
    ck_assert_uint_eq(p[0], 0x0a);
    ck_assert_uint_eq(p[11], 0x09);
    for (int i = 0; i < ST_NELEM(spop_notify_corruptions); i++) {
        uint8_t saved = p[spop_notify_corruptions[i].off];

        p[spop_notify_corruptions[i].off] = spop_notify_corruptions[i].val;
        ck_assert_int_eq(st_run_messages(p, n), SPOP_EINVAL);
        p[spop_notify_corruptions[i].off] = saved;
    }
    /* every byte, a few nasty values: an answer, never a crash */
    for (size_t off = 0; off < n; off++) {
        static const uint8_t vals[] = {0x00, 0x01, 0x7f, 0x80, 0xef, 0xf0, 0xff};
        uint8_t saved = p[off];

        for (size_t k = 0; k < sizeof(vals); k++) {
            p[off] = vals[k];
            st_run_messages(p, n);
        }
        p[off] = saved;
    }
    /* every truncation of the payload but the empty one is malformed */
    for (size_t cut = 1; cut < n; cut++) {
        uint8_t *copy = st_dup_exact(p, cut);

        ck_assert_int_eq(st_run_messages(copy, cut), SPOP_EINVAL);
        free(copy);
    }
    free(p);
}
END_TEST

/* ---- HELLO items --------------------------------------------------------- */

/* Build a HAPROXY-HELLO holding items, decode it from an exact heap copy. */
static int hello_from(const char *const *keys, const struct spop_data *vals, size_t n,
                      struct spop_hello *h)
{
    uint8_t tmp[1024], *start, *buf;
    struct spop_writer w = st_writer(tmp, sizeof(tmp));
    struct spop_frame f;
    size_t len;
    int rc;

    ck_assert_int_eq(spop_frame_begin(&w, SPOP_FRAME_HAPROXY_HELLO, SPOP_FLAG_FIN, 0, 0, &start),
                     SPOP_OK);
    for (size_t i = 0; i < n; i++)
        ck_assert_int_eq(spop_put_kv(&w, keys[i], &vals[i]), SPOP_OK);
    ck_assert_int_eq(spop_frame_end(&w, start), SPOP_OK);
    len = (size_t)(w.p - tmp);
    buf = st_dup_exact(tmp, len);
    st_frame_ok(buf, len, &f);
    rc = spop_hello_decode(&f, h);
    free(buf);
    return rc;
}

static struct spop_data str_data(const char *s)
{
    return spop_string(s, strlen(s));
}

START_TEST(test_hello_item_types)
{
    static const char *const keys[] = {
        "supported-versions", "max-frame-size", "capabilities", "healthcheck", "engine-id",
    };
    struct spop_data d;
    struct spop_hello h;
    int i = _i;

    /* each known key with a wrong type */
    d = i == 0   ? spop_uint(2)
        : i == 1 ? str_data("16380")
        : i == 2 ? spop_bool(1)
        : i == 3 ? str_data("true")
                 : spop_int(1);
    ck_assert_int_eq(hello_from(&keys[i], &d, 1, &h), SPOP_EINVAL);
}
END_TEST

START_TEST(test_hello_items)
{
    static const char *const keys[] = {"max-frame-size", "foo", "healthcheck", "engine-id"};
    struct spop_data vals[4] = {spop_int(4096), spop_int(-1), spop_bool(0), str_data("")};
    struct spop_hello h;

    ck_assert_int_eq(hello_from(keys, vals, 4, &h), SPOP_OK);
    ck_assert(h.has_max_frame_size && h.max_frame_size == 4096);
    ck_assert(!h.has_version && !h.has_capabilities && !h.healthcheck);
    ck_assert_ptr_nonnull(h.engine_id.ptr); /* present, empty */
    ck_assert_uint_eq(h.engine_id.len, 0);

    vals[0].type = SPOP_DATA_UINT64;
    vals[0].u.uint = 1ULL << 40;
    ck_assert_int_eq(hello_from(keys, vals, 1, &h), SPOP_OK);
    ck_assert_uint_eq(h.max_frame_size, 1ULL << 40);
    vals[0].type = SPOP_DATA_INT32;
    vals[0].u.sint = 300;
    ck_assert_int_eq(hello_from(keys, vals, 1, &h), SPOP_OK);
    ck_assert_uint_eq(h.max_frame_size, 300);
    vals[0] = spop_int(-1);
    ck_assert_int_eq(hello_from(keys, vals, 1, &h), SPOP_EINVAL);
    ck_assert_int_eq(hello_from(keys, vals, 0, &h), SPOP_OK);
    ck_assert(!h.has_max_frame_size);
}
END_TEST

START_TEST(test_hello_versions)
{
    static const char *const key = "supported-versions";
    struct spop_data d = str_data(spop_version_cases[_i].s);
    struct spop_hello h;

    ck_assert_int_eq(hello_from(&key, &d, 1, &h), SPOP_OK);
    ck_assert(h.has_version);
    ck_assert_msg(h.version_ok == spop_version_cases[_i].ok, "\"%s\"", spop_version_cases[_i].s);
}
END_TEST

START_TEST(test_hello_capabilities)
{
    static const char *const key = "capabilities";
    struct spop_data d = str_data(spop_capability_cases[_i].s);
    struct spop_hello h;

    ck_assert_int_eq(hello_from(&key, &d, 1, &h), SPOP_OK);
    ck_assert(h.has_capabilities);
    ck_assert_int_eq(h.pipelining, spop_capability_cases[_i].pipelining);
    ck_assert_int_eq(h.async, spop_capability_cases[_i].async);
    ck_assert_int_eq(h.fragmentation, spop_capability_cases[_i].fragmentation);
}
END_TEST

START_TEST(test_hello_truncated_payload)
{
    struct spop_frame f;
    struct spop_hello h;
    uint8_t *buf = decode_vector(SPOP_VEC_HAPROXY_HELLO, &f);

    /* the payload ends inside the engine-id string */
    for (size_t cut = 1; cut < 37; cut++) {
        struct spop_frame g = f;
        uint8_t *copy = st_dup_exact(f.payload, f.payload_len - cut);

        g.payload = copy;
        g.payload_len = f.payload_len - cut;
        ck_assert_int_eq(spop_hello_decode(&g, &h), SPOP_EINVAL);
        free(copy);
    }
    free(buf);
}
END_TEST

static Suite *spop_frames_suite(void)
{
    Suite *s = suite_create("spop_frames");
    TCase *tc;

    tc = tcase_create("frames");
    tcase_add_loop_test(tc, test_frame_vectors, 0, (int)SPOP_NVECTORS);
    CHECK_ADD(tc, test_frame_stream, test_hello_vector, test_hello_healthcheck_vector);
    tcase_add_loop_test(tc, test_notify_vectors, SPOP_VEC_NOTIFY_IPV4, SPOP_VEC_NOTIFY_IPV6 + 1);
    CHECK_ADD(tc, test_disconnect_vector, test_frame_too_big);
    tcase_add_loop_test(tc, test_frame_too_short, 0, SPOP_FRAME_MIN_LEN);
    tcase_add_test(tc, test_notify_corrupt);
    suite_add_tcase(s, tc);

    tc = tcase_create("hello");
    tcase_add_loop_test(tc, test_hello_item_types, 0, 5);
    tcase_add_test(tc, test_hello_items);
    tcase_add_loop_test(tc, test_hello_versions, 0, ST_NELEM(spop_version_cases));
    tcase_add_loop_test(tc, test_hello_capabilities, 0, ST_NELEM(spop_capability_cases));
    tcase_add_test(tc, test_hello_truncated_payload);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return check_run(spop_frames_suite());
}
