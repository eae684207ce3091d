/* test_spop.c - unit tests of the SPOP codec (src/spop/spop.c).
 *
 * Every decoder input lives in a heap buffer of exactly its size, so that
 * AddressSanitizer reports a read of even one byte past the end. The real
 * frames come from tests/unit/spop_vectors.h (HAProxy 2.6 captures). One test
 * drives the connection state machine (spop_conn.c): the pause at the
 * waiting-NOTIFY cap.
 */
#include "spop/spop.h"

#include <check.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "spop/spop_conn.h"
#include "spop_vectors.h"

#define FUZZ_ITERATIONS 20000
#define FUZZ_SEED 0x5eed5eed12345678ULL
#define NELEM(a) ((int)(sizeof(a) / sizeof((a)[0])))

/* ---- helpers ------------------------------------------------------------- */

/* A heap copy of exactly n bytes. */
static uint8_t *dup_exact(const void *src, size_t n)
{
    uint8_t *p = malloc(n);

    ck_assert_ptr_nonnull(p);
    if (n)
        memcpy(p, src, n);
    return p;
}

static int hex_nibble(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    ck_assert_msg(0, "bad hex digit '%c'", c);
    return -1;
}

/* Hex (blanks allowed) to an exact-size heap buffer. */
static uint8_t *hex_dup(const char *hex, size_t *n)
{
    uint8_t tmp[512];
    size_t len = 0;

    for (const char *s = hex; *s;) {
        if (*s == ' ') {
            s++;
            continue;
        }
        ck_assert(s[1] && len < sizeof(tmp));
        tmp[len++] = (uint8_t)(hex_nibble(s[0]) << 4 | hex_nibble(s[1]));
        s += 2;
    }
    *n = len;
    return dup_exact(tmp, len);
}

static struct spop_reader reader(const uint8_t *p, size_t n)
{
    return (struct spop_reader){ p, p + n };
}

static struct spop_writer writer(uint8_t *p, size_t n)
{
    return (struct spop_writer){ p, p + n };
}

/* Decode the whole frame at p[0..n), which must be valid. */
static void frame_ok(const uint8_t *p, size_t n, struct spop_frame *f)
{
    size_t consumed = 0;

    ck_assert_int_eq(spop_frame_decode(p, n, SPOP_DEFAULT_FRAME_SIZE, f, &consumed), SPOP_OK);
    ck_assert_uint_eq(consumed, n);
}

static int str_is(struct spop_str s, const char *lit)
{
    return s.len == strlen(lit) && (s.len == 0 || memcmp(s.ptr, lit, s.len) == 0);
}

#define ck_assert_spop_str(s, lit)                                                      \
    ck_assert_msg(str_is((s), (lit)), "got \"%.*s\", want \"%s\"", (int)(s).len,      \
                  (s).ptr ? (s).ptr : "", (lit))

/* ---- varints ------------------------------------------------------------- */

static void check_varint(uint64_t v, size_t want_len, const char *hex)
{
    size_t len = spop_varint_len(v), n;
    uint8_t *buf = malloc(len), *want;
    struct spop_writer w = writer(buf, len);
    struct spop_reader r;
    uint64_t got;

    ck_assert_uint_eq(len, want_len);
    ck_assert_int_eq(spop_put_varint(&w, v), SPOP_OK);
    ck_assert_ptr_eq(w.p, buf + len);
    if (hex) {
        want = hex_dup(hex, &n);
        ck_assert_uint_eq(n, len);
        ck_assert_mem_eq(buf, want, n);
        free(want);
    }
    /* a roomy writer encodes in place: the same bytes */
    uint8_t roomy[SPOP_VARINT_MAX_LEN + 2];
    w = writer(roomy, sizeof(roomy));
    ck_assert_int_eq(spop_put_varint(&w, v), SPOP_OK);
    ck_assert_ptr_eq(w.p, roomy + len);
    ck_assert_mem_eq(roomy, buf, len);
    /* one byte short: nothing written, cursor unmoved */
    w = writer(buf, len - 1);
    ck_assert_int_eq(spop_put_varint(&w, v), SPOP_ENOSPC);
    ck_assert_ptr_eq(w.p, buf);
    /* w wrote the whole varint earlier; decode it from an exact copy */
    for (size_t cut = 0; cut <= len; cut++) {
        uint8_t *copy = dup_exact(buf, cut);

        r = reader(copy, cut);
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
    uint8_t *buf = hex_dup(spop_data_cases[_i].hex, &n), *raw = NULL, *out;
    struct spop_reader r = reader(buf, n);
    struct spop_writer w;
    struct spop_data d;

    ck_assert_int_eq(spop_get_data(&r, &d), SPOP_OK);
    ck_assert_ptr_eq(r.p, buf + n);
    ck_assert_uint_eq(d.type, spop_data_cases[_i].type);
    if (spop_data_cases[_i].raw)
        raw = hex_dup(spop_data_cases[_i].raw, &rawn);
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
        uint8_t *copy = dup_exact(buf, cut);
        struct spop_data junk;

        r = reader(copy, cut);
        ck_assert_int_eq(spop_get_data(&r, &junk), SPOP_EINVAL);
        ck_assert_ptr_eq(r.p, copy);
        free(copy);
    }
    if (spop_data_cases[_i].canonical) {
        /* too small at every size, then exact */
        for (size_t size = 0; size <= n; size++) {
            out = malloc(size ? size : 1);
            w = writer(out, size);
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
    struct spop_writer w = writer(buf, sizeof(buf));
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
    ck_assert(d.type == SPOP_DATA_STR && str_is(d.u.buf, "ab"));
}
END_TEST

/* ---- real frames --------------------------------------------------------- */

/* Decode vector i from an exact heap copy, which the caller frees. */
static uint8_t *decode_vector(size_t i, struct spop_frame *f)
{
    uint8_t *buf = dup_exact(spop_vectors[i].data, spop_vectors[i].len);

    frame_ok(buf, spop_vectors[i].len, f);
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
        uint8_t *copy = dup_exact(v->data, cut);

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
    buf = dup_exact(all, total);
    for (size_t i = 0; i < SPOP_NVECTORS; i++) {
        ck_assert_int_eq(spop_frame_decode(buf + off, total - off, SPOP_DEFAULT_FRAME_SIZE, &f,
                                           &consumed),
                         SPOP_OK);
        ck_assert_uint_eq(consumed, spop_vectors[i].len);
        ck_assert_uint_eq(f.type, spop_vector_headers[i].type);
        off += consumed;
    }
    ck_assert_int_eq(spop_frame_decode(buf + off, total - off, SPOP_DEFAULT_FRAME_SIZE, &f,
                                       &consumed),
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
    static const char *const names[] = { "key", "ip",  "path",    "method", "plan",
                                         "n",   "neg", "missing", "b" };
    static const uint8_t ipv4[4] = { 127, 0, 0, 1 };
    static const uint8_t ipv6[16] = { [15] = 1 };
    static struct spop_message m; /* ~10 KB: keep it off the stack */
    int v6 = _i == SPOP_VEC_NOTIFY_IPV6;
    struct spop_frame f;
    uint8_t *buf = decode_vector((size_t)_i, &f);
    struct spop_reader r = reader(f.payload, f.payload_len);
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
        { "00004000", SPOP_DEFAULT_FRAME_SIZE },
        { "ffffffff", SPOP_DEFAULT_FRAME_SIZE },
        { "ffffffff", SIZE_MAX },
        { "01000001", SIZE_MAX }, /* SPOP_MAX_FRAME_SIZE + 1: the hard cap */
        { "00000100", 255 },
    };
    struct spop_frame f;
    size_t n, consumed;

    for (int i = 0; i < NELEM(cases); i++) {
        uint8_t *buf = hex_dup(cases[i].hex, &n);

        ck_assert_int_eq(spop_frame_decode(buf, n, cases[i].max_len, &f, &consumed),
                         SPOP_ETOOBIG);
        free(buf);
    }
    /* exactly at the limit is fine, merely incomplete */
    uint8_t *buf = hex_dup("00003ffc 03", &n);
    ck_assert_int_eq(spop_frame_decode(buf, n, SPOP_DEFAULT_FRAME_SIZE, &f, &consumed),
                     SPOP_EAGAIN);
    free(buf);
}
END_TEST

START_TEST(test_frame_too_short)
{
    uint8_t full[16] = { 0, 0, 0, (uint8_t)_i, SPOP_FRAME_NOTIFY, 0, 0, 0, 1, 0, 0 };
    struct spop_frame f;
    size_t consumed;

    for (size_t n = SPOP_FRAME_LEN_SIZE; n <= SPOP_FRAME_LEN_SIZE + (size_t)_i; n++) {
        uint8_t *buf = dup_exact(full, n);

        ck_assert_int_eq(spop_frame_decode(buf, n, SPOP_DEFAULT_FRAME_SIZE, &f, &consumed),
                         SPOP_EINVAL);
        free(buf);
    }
}
END_TEST

/* ---- corrupted NOTIFY payloads ------------------------------------------- */

static int run_messages(const uint8_t *p, size_t n)
{
    static struct spop_message m;
    struct spop_reader r = reader(p, n);
    const uint8_t *before;
    int rc;

    do {
        before = r.p;
        rc = spop_message_next(&r, &m);
        ck_assert(r.p >= p && r.p <= p + n);
        ck_assert(rc == 1 ? r.p > before : r.p == before);
    } while (rc == 1);
    ck_assert(rc == 0 || rc == SPOP_EINVAL);
    return rc;
}

START_TEST(test_notify_corrupt)
{
    const struct spop_vector *v = &spop_vectors[SPOP_VEC_NOTIFY_IPV4];
    size_t hdr = SPOP_FRAME_LEN_SIZE + SPOP_FRAME_MIN_LEN, n = v->len - hdr;
    uint8_t *p = dup_exact(v->data + hdr, n);

    ck_assert_int_eq(run_messages(p, n), 0);
    ck_assert_uint_eq(p[0], 0x0a);
    ck_assert_uint_eq(p[11], 0x09);
    for (int i = 0; i < NELEM(spop_notify_corruptions); i++) {
        uint8_t saved = p[spop_notify_corruptions[i].off];

        p[spop_notify_corruptions[i].off] = spop_notify_corruptions[i].val;
        ck_assert_int_eq(run_messages(p, n), SPOP_EINVAL);
        p[spop_notify_corruptions[i].off] = saved;
    }
    /* every byte, a few nasty values: an answer, never a crash */
    for (size_t off = 0; off < n; off++) {
        static const uint8_t vals[] = { 0x00, 0x01, 0x7f, 0x80, 0xef, 0xf0, 0xff };
        uint8_t saved = p[off];

        for (size_t k = 0; k < sizeof(vals); k++) {
            p[off] = vals[k];
            run_messages(p, n);
        }
        p[off] = saved;
    }
    /* every truncation of the payload but the empty one is malformed */
    for (size_t cut = 1; cut < n; cut++) {
        uint8_t *copy = dup_exact(p, cut);

        ck_assert_int_eq(run_messages(copy, cut), SPOP_EINVAL);
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
    struct spop_writer w = writer(tmp, sizeof(tmp));
    struct spop_frame f;
    size_t len;
    int rc;

    ck_assert_int_eq(spop_frame_begin(&w, SPOP_FRAME_HAPROXY_HELLO, SPOP_FLAG_FIN, 0, 0, &start),
                     SPOP_OK);
    for (size_t i = 0; i < n; i++)
        ck_assert_int_eq(spop_put_kv(&w, keys[i], &vals[i]), SPOP_OK);
    ck_assert_int_eq(spop_frame_end(&w, start), SPOP_OK);
    len = (size_t)(w.p - tmp);
    buf = dup_exact(tmp, len);
    frame_ok(buf, len, &f);
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
    d = i == 0 ? spop_uint(2) : i == 1 ? str_data("16380") : i == 2 ? spop_bool(1)
        : i == 3 ? str_data("true") : spop_int(1);
    ck_assert_int_eq(hello_from(&keys[i], &d, 1, &h), SPOP_EINVAL);
}
END_TEST

START_TEST(test_hello_items)
{
    static const char *const keys[] = { "max-frame-size", "foo", "healthcheck", "engine-id" };
    struct spop_data vals[4] = { spop_int(4096), spop_int(-1), spop_bool(0), str_data("") };
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
        uint8_t *copy = dup_exact(f.payload, f.payload_len - cut);

        g.payload = copy;
        g.payload_len = f.payload_len - cut;
        ck_assert_int_eq(spop_hello_decode(&g, &h), SPOP_EINVAL);
        free(copy);
    }
    free(buf);
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
        struct spop_writer w = writer(buf, size);

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
    struct spop_writer w = writer(out, sizeof(out));
    struct spop_frame f;
    struct spop_reader r;
    struct spop_str key;
    struct spop_data val;
    size_t n;

    ck_assert_int_eq(spop_agent_hello_encode(&w, SPOP_DEFAULT_FRAME_SIZE, "pipelining"), SPOP_OK);
    want = hex_dup(spop_golden_agent_hello, &n);
    ck_assert_uint_eq((size_t)(w.p - out), n);
    ck_assert_mem_eq(out, want, n);
    free(want);
    check_nospc(enc_hello, "pipelining", n, 1);

    /* no capabilities: the item is still there, empty */
    w = writer(out, sizeof(out));
    ck_assert_int_eq(spop_agent_hello_encode(&w, 1024, NULL), SPOP_OK);
    frame_ok(out, (size_t)(w.p - out), &f);
    ck_assert(f.type == SPOP_FRAME_AGENT_HELLO && f.flags == SPOP_FLAG_FIN);
    ck_assert(f.stream_id == 0 && f.frame_id == 0);
    r = reader(f.payload, f.payload_len);
    ck_assert_int_eq(spop_kv_next(&r, &key, &val), 1);
    ck_assert(str_is(key, "version") && val.type == SPOP_DATA_STR && str_is(val.u.buf, "2.0"));
    ck_assert_int_eq(spop_kv_next(&r, &key, &val), 1);
    ck_assert(str_is(key, "max-frame-size") && val.type == SPOP_DATA_UINT32);
    ck_assert_uint_eq(val.u.uint, 1024);
    ck_assert_int_eq(spop_kv_next(&r, &key, &val), 1);
    ck_assert(str_is(key, "capabilities") && val.type == SPOP_DATA_STR && val.u.buf.len == 0);
    ck_assert_int_eq(spop_kv_next(&r, &key, &val), 0);
}
END_TEST

START_TEST(test_agent_disconnect)
{
    char long_msg[301];
    uint8_t out[512];
    struct spop_writer w = writer(out, sizeof(out));
    struct spop_frame f;
    struct spop_disconnect d;
    size_t len;

    memset(long_msg, 'x', 300);
    long_msg[300] = '\0';
    ck_assert_int_eq(spop_agent_disconnect_encode(&w, SPOP_ST_TOO_BIG, long_msg), SPOP_OK);
    len = (size_t)(w.p - out);
    frame_ok(out, len, &f);
    ck_assert(f.type == SPOP_FRAME_AGENT_DISCONNECT && f.flags == SPOP_FLAG_FIN);
    ck_assert_int_eq(spop_disconnect_decode(&f, &d), SPOP_OK);
    ck_assert_uint_eq(d.status_code, SPOP_ST_TOO_BIG);
    ck_assert_uint_eq(d.message.len, SPOP_MAX_STATUS_MSG);
    ck_assert(memcmp(d.message.ptr, long_msg, SPOP_MAX_STATUS_MSG) == 0);
    check_nospc(enc_disconnect, long_msg, len, 1);

    w = writer(out, sizeof(out));
    ck_assert_int_eq(spop_agent_disconnect_encode(&w, SPOP_ST_NONE, NULL), SPOP_OK);
    frame_ok(out, (size_t)(w.p - out), &f);
    ck_assert_int_eq(spop_disconnect_decode(&f, &d), SPOP_OK);
    ck_assert_uint_eq(d.status_code, 0);
    ck_assert_spop_str(d.message, "");
}
END_TEST

START_TEST(test_frame_begin_end)
{
    uint8_t out[64], *start = NULL;
    struct spop_writer w = writer(out, sizeof(out));

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
        struct spop_writer s = writer(buf, size);

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
    struct spop_writer w = writer(buf, size);

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
        { SPOP_ACT_SET_VAR, SPOP_SCOPE_TXN, SPOP_DATA_BOOL, "blocked", 1 },
        { SPOP_ACT_SET_VAR, SPOP_SCOPE_TXN, SPOP_DATA_INT64, "retry_after", 3 },
        { SPOP_ACT_SET_VAR, SPOP_SCOPE_REQ, SPOP_DATA_STR, "plan", 0 },
        { SPOP_ACT_SET_VAR, SPOP_SCOPE_SESS, SPOP_DATA_NULL, "gone", 0 },
        { SPOP_ACT_UNSET_VAR, SPOP_SCOPE_TXN, SPOP_DATA_NULL, "limit", 0 },
    };
    uint8_t out[256], *start, *buf, *gold;
    struct spop_writer w = writer(out, sizeof(out));
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
    buf = dup_exact(out, len);
    frame_ok(buf, len, &f);
    ck_assert(f.type == SPOP_FRAME_ACK && f.stream_id == 1ULL << 40 && f.frame_id == 7);
    gold = hex_dup(spop_golden_actions, &n);
    ck_assert_uint_eq(f.payload_len, n);
    ck_assert_mem_eq(f.payload, gold, n);
    check_nospc(enc_actions, NULL, n, 0);

    r = reader(f.payload, f.payload_len);
    for (int i = 0; i < NELEM(want); i++) {
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
    struct spop_writer w = writer(out, sizeof(out));
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
    struct spop_writer wa = writer(a, sizeof(a)), wb = writer(b, sizeof(b));
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
                    struct spop_writer wa = writer(a, cap), wb = writer(b, cap);
                    struct spop_data d;
                    int ra, rb;
                    const char *nm = name_lens[nl] == 49 ? "abcdefghijklmnopqrstuvwxyzabcdefghijklm"
                                                           "nopqrstuvw" : name48;
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
    uint8_t *buf = hex_dup(spop_bad_cases[_i].hex, &n), action, scope;
    struct spop_reader r = reader(buf, n);
    struct spop_frame f;
    struct spop_data d;
    struct spop_str name;
    uint64_t v;
    int rc = 0;

    switch (spop_bad_cases[_i].kind) {
    case SPOP_BAD_VARINT: rc = spop_get_varint(&r, &v); break;
    case SPOP_BAD_DATA: rc = spop_get_data(&r, &d); break;
    case SPOP_BAD_ACTION: rc = spop_action_next(&r, &action, &scope, &name, &d); break;
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

/* ---- fuzz ---------------------------------------------------------------- */

static uint64_t rng_state = FUZZ_SEED;

/* xorshift64: deterministic, so a failure reproduces. The masks keep even
 * clang's -fsanitize=integer quiet about the bits shifted out. */
static uint64_t rng(void)
{
    rng_state ^= (rng_state & (UINT64_MAX >> 13)) << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= (rng_state & (UINT64_MAX >> 17)) << 17;
    return rng_state;
}

/* Run every decoder on n bytes at p; only crashes and wild cursors fail. */
static void fuzz_decoders(const uint8_t *p, size_t n)
{
    struct spop_frame f;
    struct spop_hello h;
    struct spop_disconnect d;
    struct spop_reader r;
    struct spop_str s;
    struct spop_data v;
    size_t consumed, hdr = SPOP_FRAME_LEN_SIZE + SPOP_FRAME_MIN_LEN;
    uint8_t a, sc;
    int rc = spop_frame_decode(p, n, rng() & 1 ? SPOP_DEFAULT_FRAME_SIZE : rng() % 300, &f,
                               &consumed);

    ck_assert(rc == SPOP_OK || rc == SPOP_EAGAIN || rc == SPOP_EINVAL || rc == SPOP_ETOOBIG);
    if (rc == SPOP_OK) {
        ck_assert(consumed <= n && f.payload >= p && f.payload + f.payload_len <= p + n);
        ck_assert(spop_hello_decode(&f, &h) <= 0);
        ck_assert(spop_disconnect_decode(&f, &d) <= 0);
    }
    if (n < hdr)
        return;
    /* whatever the header says, try the rest as every kind of payload */
    f.payload = p + hdr;
    f.payload_len = n - hdr;
    ck_assert(spop_hello_decode(&f, &h) <= 0);
    ck_assert(spop_disconnect_decode(&f, &d) <= 0);
    run_messages(f.payload, f.payload_len);
    r = reader(f.payload, f.payload_len);
    while ((rc = spop_action_next(&r, &a, &sc, &s, &v)) == 1)
        ck_assert(r.p <= p + n);
    ck_assert(rc == 0 || rc == SPOP_EINVAL);
    r = reader(f.payload, f.payload_len);
    while ((rc = spop_kv_next(&r, &s, &v)) == 1)
        ck_assert(r.p <= p + n);
    ck_assert(rc == 0 || rc == SPOP_EINVAL);
}

/* ---- connection: pausing at the waiting-NOTIFY cap ------------------------ */

struct pause_ctx {
    unsigned seen, pause_at;
};

static int pause_notify(void *ctx, struct spop_conn *c, const struct spop_frame *f)
{
    struct pause_ctx *p = ctx;

    (void)f;
    if (++p->seen == p->pause_at)
        c->paused = 1;
    return 0;
}

/* A HELLO and 5 NOTIFYs in one read: the callback pauses at the 2nd, the
 * other 3 stay whole in in[] (nothing is dropped or answered); cleared, a
 * call with n = 0 handles them. */
START_TEST(test_conn_pause)
{
    const struct spop_vector *hello = &spop_vectors[SPOP_VEC_HAPROXY_HELLO];
    const struct spop_vector *notify = &spop_vectors[SPOP_VEC_NOTIFY_IPV4];
    struct pause_ctx ctx = {0, 2};
    struct spop_conn c;
    size_t room, out_len;
    uint8_t *p;

    ck_assert_int_eq(spop_conn_init(&c, 16380), 0);
    p = spop_conn_in_space(&c, &room);
    ck_assert_uint_ge(room, hello->len + 5 * notify->len);
    memcpy(p, hello->data, hello->len);
    for (int i = 0; i < 5; i++)
        memcpy(p + hello->len + (size_t)i * notify->len, notify->data, notify->len);
    ck_assert_int_eq(spop_conn_in_commit(&c, hello->len + 5 * notify->len, pause_notify, &ctx), 0);
    ck_assert_int_eq(c.state, SPOP_CONN_READY);
    ck_assert_uint_eq(ctx.seen, 2);
    ck_assert_int_eq(c.paused, 1);
    ck_assert_uint_eq(c.in_len, 3 * notify->len);
    ck_assert_mem_eq(c.in, notify->data, notify->len);
    spop_conn_out(&c, &out_len);
    ck_assert_uint_gt(out_len, 0); /* the AGENT-HELLO */

    /* still paused: nothing is parsed */
    ck_assert_int_eq(spop_conn_in_commit(&c, 0, pause_notify, &ctx), 0);
    ck_assert_uint_eq(ctx.seen, 2);

    c.paused = 0;
    ck_assert_int_eq(spop_conn_in_commit(&c, 0, pause_notify, &ctx), 0);
    ck_assert_uint_eq(ctx.seen, 5);
    ck_assert_uint_eq(c.in_len, 0);
    spop_conn_release(&c);
}
END_TEST

/* The read buffer starts at SPOP_CONN_IN_INITIAL bytes and grows to a whole
 * frame when a read fills it: a 3,000-byte frame (of a type the agent skips)
 * fed through spop_conn_in_space() as a socket would, then a NOTIFY, both
 * handled. */
START_TEST(test_conn_in_grows)
{
    const struct spop_vector *hello = &spop_vectors[SPOP_VEC_HAPROXY_HELLO];
    const struct spop_vector *notify = &spop_vectors[SPOP_VEC_NOTIFY_IPV4];
    struct pause_ctx ctx = {0, 0};
    struct spop_conn c;
    static uint8_t big[3000 + 4];
    size_t room, off = 0, total;
    uint8_t *stream = malloc(hello->len + sizeof(big) + notify->len);

    ck_assert_ptr_nonnull(stream);
    /* length, type 50 (unknown), FIN, stream-id 0, frame-id 0, filler */
    big[0] = 0, big[1] = 0, big[2] = (3000 >> 8) & 0xff, big[3] = 3000 & 0xff;
    big[4] = 50, big[5] = 0, big[6] = 0, big[7] = 0, big[8] = 1, big[9] = 0, big[10] = 0;
    memcpy(stream, hello->data, hello->len);
    memcpy(stream + hello->len, big, sizeof(big));
    memcpy(stream + hello->len + sizeof(big), notify->data, notify->len);
    total = hello->len + sizeof(big) + notify->len;

    ck_assert_int_eq(spop_conn_init(&c, 16380), 0);
    ck_assert_uint_eq(c.in_cap, SPOP_CONN_IN_INITIAL);
    while (off < total) {
        uint8_t *p = spop_conn_in_space(&c, &room);
        size_t n = total - off < room ? total - off : room;
        ck_assert_uint_gt(room, 0);
        memcpy(p, stream + off, n);
        off += n;
        ck_assert_int_eq(spop_conn_in_commit(&c, n, pause_notify, &ctx), 0);
    }
    ck_assert_uint_eq(c.in_cap, 16380 + 4);
    ck_assert_int_eq(c.state, SPOP_CONN_READY);
    ck_assert_uint_eq(ctx.seen, 1);
    ck_assert_uint_eq(c.in_len, 0);
    spop_conn_release(&c);
    free(stream);
}
END_TEST

/* A HAPROXY-DISCONNECT after the HELLO: what it said is kept for the
 * server's log (status and message), and answered with an AGENT-DISCONNECT
 * of status 0, which the connection records as sent. */
START_TEST(test_conn_peer_disconnect)
{
    const struct spop_vector *hello = &spop_vectors[SPOP_VEC_HAPROXY_HELLO];
    const struct spop_vector *bye = &spop_vectors[SPOP_VEC_HAPROXY_DISCONNECT];
    struct pause_ctx ctx = {0, 0};
    struct spop_conn c;
    size_t room;
    uint8_t *p;

    ck_assert_int_eq(spop_conn_init(&c, 16380), 0);
    p = spop_conn_in_space(&c, &room);
    memcpy(p, hello->data, hello->len);
    memcpy(p + hello->len, bye->data, bye->len);
    ck_assert_int_eq(c.disconnect_sent, 0);
    ck_assert_int_eq(spop_conn_in_commit(&c, hello->len + bye->len, pause_notify, &ctx), 1);
    ck_assert_int_eq(c.state, SPOP_CONN_CLOSING);
    ck_assert_int_eq(c.peer_disconnected, 1);
    ck_assert_uint_eq(c.peer_status, SPOP_ST_TIMEOUT);
    ck_assert_str_eq(c.peer_message, "a timeout occurred");
    ck_assert_int_eq(c.disconnect_sent, 1);
    ck_assert_uint_eq(c.status, SPOP_ST_NONE);
    spop_conn_release(&c);

    /* a frame before the HELLO: our AGENT-DISCONNECT, nothing from the peer */
    ck_assert_int_eq(spop_conn_init(&c, 16380), 0);
    p = spop_conn_in_space(&c, &room);
    memcpy(p, bye->data, bye->len);
    ck_assert_int_eq(spop_conn_in_commit(&c, bye->len, pause_notify, &ctx), 1);
    ck_assert_int_eq(c.peer_disconnected, 0);
    ck_assert_int_eq(c.disconnect_sent, 1);
    ck_assert_uint_eq(c.status, SPOP_ST_INVALID);
    spop_conn_release(&c);
}
END_TEST

START_TEST(test_fuzz)
{
    for (int it = 0; it < FUZZ_ITERATIONS; it++) {
        const struct spop_vector *v = &spop_vectors[rng() % SPOP_NVECTORS];
        size_t n = rng() % 8 ? v->len : (size_t)(rng() % (v->len + 1));
        uint8_t *buf = dup_exact(v->data, n);
        unsigned nmut = 1 + (unsigned)(rng() % 4);

        for (unsigned k = 0; k < nmut && n > 0; k++) {
            /* mostly leave the length prefix alone, to reach the payload */
            size_t lo = rng() % 4 ? SPOP_FRAME_LEN_SIZE : 0;
            size_t off = n > lo ? lo + (size_t)(rng() % (n - lo)) : 0;

            switch (rng() % 4) {
            case 0: buf[off] = (uint8_t)rng(); break;
            case 1: buf[off] ^= (uint8_t)(1u << (rng() % 8)); break;
            case 2: buf[off] = (uint8_t)(0xf0 | (rng() & 0x0f)); break;
            default: buf[off] = (uint8_t)(rng() % 16); break;
            }
        }
        fuzz_decoders(buf, n);
        free(buf);
    }
}
END_TEST

/* ---- runner -------------------------------------------------------------- */

static Suite *spop_suite(void)
{
    Suite *s = suite_create("spop");
    TCase *tc;

    tc = tcase_create("varint");
    tcase_add_loop_test(tc, test_varint_cases, 0, NELEM(spop_varint_cases));
    tcase_add_test(tc, test_varint_widths);
    suite_add_tcase(s, tc);

    tc = tcase_create("data");
    tcase_add_loop_test(tc, test_data_cases, 0, NELEM(spop_data_cases));
    tcase_add_test(tc, test_data_put_invalid);
    tcase_add_test(tc, test_constructors);
    suite_add_tcase(s, tc);

    tc = tcase_create("frames");
    tcase_add_loop_test(tc, test_frame_vectors, 0, (int)SPOP_NVECTORS);
    tcase_add_test(tc, test_frame_stream);
    tcase_add_test(tc, test_hello_vector);
    tcase_add_test(tc, test_hello_healthcheck_vector);
    tcase_add_loop_test(tc, test_notify_vectors, SPOP_VEC_NOTIFY_IPV4, SPOP_VEC_NOTIFY_IPV6 + 1);
    tcase_add_test(tc, test_disconnect_vector);
    tcase_add_test(tc, test_frame_too_big);
    tcase_add_loop_test(tc, test_frame_too_short, 0, SPOP_FRAME_MIN_LEN);
    tcase_add_test(tc, test_notify_corrupt);
    suite_add_tcase(s, tc);

    tc = tcase_create("hello");
    tcase_add_loop_test(tc, test_hello_item_types, 0, 5);
    tcase_add_test(tc, test_hello_items);
    tcase_add_loop_test(tc, test_hello_versions, 0, NELEM(spop_version_cases));
    tcase_add_loop_test(tc, test_hello_capabilities, 0, NELEM(spop_capability_cases));
    tcase_add_test(tc, test_hello_truncated_payload);
    suite_add_tcase(s, tc);

    tc = tcase_create("encoders");
    tcase_add_test(tc, test_agent_hello);
    tcase_add_test(tc, test_agent_disconnect);
    tcase_add_test(tc, test_frame_begin_end);
    tcase_add_test(tc, test_frame_end_too_big);
    tcase_add_test(tc, test_actions);
    tcase_add_test(tc, test_actions_invalid_put);
    tcase_add_test(tc, test_set_var_typed_same_bytes);
    tcase_add_test(tc, test_status_str);
    suite_add_tcase(s, tc);

    tc = tcase_create("connection");
    tcase_add_test(tc, test_conn_pause);
    tcase_add_test(tc, test_conn_peer_disconnect);
    tcase_add_test(tc, test_conn_in_grows);
    suite_add_tcase(s, tc);

    tc = tcase_create("malformed");
    tcase_add_loop_test(tc, test_malformed, 0, NELEM(spop_bad_cases));
    suite_add_tcase(s, tc);

    tc = tcase_create("fuzz");
    tcase_set_timeout(tc, 60); /* sanitizers slow it down */
    tcase_add_test(tc, test_fuzz);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(spop_suite());
    int failed;

    srunner_run_all(sr, CK_NORMAL);
    failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
