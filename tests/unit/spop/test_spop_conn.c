/* SPDX-License-Identifier: Apache-2.0 */
/* test_spop_conn.c - the SPOP connection state machine (spop_conn.c): the
 * pause at the waiting-NOTIFY cap, the input buffer growing, HAProxy's
 * DISCONNECT; and the decoders fed pseudo-random bytes. */
#include "spop/spop.h"

#include <check.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check_util.h"
#include "spop/spop_conn.h"
#include "spop_fixture.h"
#include "spop_vectors.h"

#define FUZZ_ITERATIONS 20000
#define FUZZ_SEED 0x5eed5eed12345678ULL

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
    int rc =
        spop_frame_decode(p, n, rng() & 1 ? SPOP_DEFAULT_FRAME_SIZE : rng() % 300, &f, &consumed);

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
    st_run_messages(f.payload, f.payload_len);
    r = st_reader(f.payload, f.payload_len);
    while ((rc = spop_action_next(&r, &a, &sc, &s, &v)) == 1)
        ck_assert(r.p <= p + n);
    ck_assert(rc == 0 || rc == SPOP_EINVAL);
    r = st_reader(f.payload, f.payload_len);
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

/* A busy peer: reads that fill the buffer with whole NOTIFYs (nothing left
 * over, so no frame needs more room) grow it to a whole frame once the HELLO
 * is done, one recv() per batch from then on; a read that does not fill it
 * leaves it as it is. */
START_TEST(test_conn_in_grows_when_busy)
{
    const struct spop_vector *hello = &spop_vectors[SPOP_VEC_HAPROXY_HELLO];
    const struct spop_vector *notify = &spop_vectors[SPOP_VEC_NOTIFY_IPV4];
    struct pause_ctx ctx = {0, 0};
    struct spop_conn c;
    size_t room;
    uint8_t *p;

    ck_assert_int_eq(spop_conn_init(&c, 16380), 0);
    p = spop_conn_in_space(&c, &room);
    memcpy(p, hello->data, hello->len);
    memcpy(p + hello->len, notify->data, notify->len);
    ck_assert_int_eq(spop_conn_in_commit(&c, hello->len + notify->len, pause_notify, &ctx), 0);
    ck_assert_int_eq(c.state, SPOP_CONN_READY);
    ck_assert_uint_eq(c.in_cap, SPOP_CONN_IN_INITIAL); /* not full: as it was */

    /* whole NOTIFYs up to the room, the last one cut to end exactly there:
     * its rest comes with the next read */
    size_t k = SPOP_CONN_IN_INITIAL / notify->len, cut = SPOP_CONN_IN_INITIAL - k * notify->len;
    p = spop_conn_in_space(&c, &room);
    ck_assert_uint_eq(room, SPOP_CONN_IN_INITIAL);
    for (size_t i = 0; i < k; i++)
        memcpy(p + i * notify->len, notify->data, notify->len);
    memcpy(p + k * notify->len, notify->data, cut);
    ck_assert_int_eq(spop_conn_in_commit(&c, room, pause_notify, &ctx), 0);
    ck_assert_uint_eq(ctx.seen, 1 + k);
    ck_assert_uint_eq(c.in_cap, 16380 + 4); /* filled: a whole frame's room */
    ck_assert_uint_eq(c.in_len, cut);
    p = spop_conn_in_space(&c, &room);
    ck_assert_uint_ge(room, 8 * notify->len);
    memcpy(p, notify->data + cut, notify->len - cut);
    ck_assert_int_eq(spop_conn_in_commit(&c, notify->len - cut, pause_notify, &ctx), 0);
    ck_assert_uint_eq(ctx.seen, 2 + k);
    ck_assert_uint_eq(c.in_len, 0);
    spop_conn_release(&c);
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
        uint8_t *buf = st_dup_exact(v->data, n);
        unsigned nmut = 1 + (unsigned)(rng() % 4);

        for (unsigned k = 0; k < nmut && n > 0; k++) {
            /* mostly leave the length prefix alone, to reach the payload */
            size_t lo = rng() % 4 ? SPOP_FRAME_LEN_SIZE : 0;
            size_t off = n > lo ? lo + (size_t)(rng() % (n - lo)) : 0;

            switch (rng() % 4) {
            case 0:
                buf[off] = (uint8_t)rng();
                break;
            case 1:
                buf[off] ^= (uint8_t)(1u << (rng() % 8));
                break;
            case 2:
                buf[off] = (uint8_t)(0xf0 | (rng() & 0x0f));
                break;
            default:
                buf[off] = (uint8_t)(rng() % 16);
                break;
            }
        }
        fuzz_decoders(buf, n);
        free(buf);
    }
}
END_TEST

static Suite *spop_conn_suite(void)
{
    Suite *s = suite_create("spop_conn");
    TCase *tc;

    tc = tcase_create("connection");
    CHECK_ADD(tc, test_conn_pause, test_conn_peer_disconnect, test_conn_in_grows,
              test_conn_in_grows_when_busy);
    suite_add_tcase(s, tc);

    tc = tcase_create("fuzz");
    tcase_set_timeout(tc, 60); /* sanitizers slow it down */
    tcase_add_test(tc, test_fuzz);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return check_run(spop_conn_suite());
}
