/* SPDX-License-Identifier: Apache-2.0 */
/* spop_vectors.h - test vectors of the SPOP codec, for the SPOP unit tests
 * (tests/unit/spop/test_spop_*.c) and the SPOP fuzz target (tests/fuzz/fuzz_spop.c).
 *
 * First the real frames captured from HAProxy 2.6.12 (Debian 12) between it
 * and an agent, kept here byte for byte (4-byte length prefix included),
 * then hand-made cases: boundary values, expected encodings, malformed input.
 *
 * The captures: The NOTIFYs carry one "check-rate" message with the args
 *   key=req.hdr(x-api-key) ip=src path=path method=method plan=str(free)
 *   n=int(42) neg=int(-5) missing=req.hdr(x-none) b=bool(1)
 * first over IPv4 (GET /api/v1/items, key tenant-1), then over IPv6 (GET /login,
 * key k2).
 */
#ifndef SPOP_VECTORS_H
#define SPOP_VECTORS_H

#include <stddef.h>
#include <stdint.h>

#include "spop/spop.h"

/* Frames as captured, 12 bytes a line: left as they are (clang-format off). */
/* clang-format off */
static const uint8_t spop_vec_haproxy_hello_healthcheck[] = {
    0x00, 0x00, 0x00, 0x4e, 0x01, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x12,
    0x73, 0x75, 0x70, 0x70, 0x6f, 0x72, 0x74, 0x65, 0x64, 0x2d, 0x76, 0x65,
    0x72, 0x73, 0x69, 0x6f, 0x6e, 0x73, 0x08, 0x03, 0x32, 0x2e, 0x30, 0x0e,
    0x6d, 0x61, 0x78, 0x2d, 0x66, 0x72, 0x61, 0x6d, 0x65, 0x2d, 0x73, 0x69,
    0x7a, 0x65, 0x03, 0xfc, 0xf0, 0x06, 0x0c, 0x63, 0x61, 0x70, 0x61, 0x62,
    0x69, 0x6c, 0x69, 0x74, 0x69, 0x65, 0x73, 0x08, 0x00, 0x0b, 0x68, 0x65,
    0x61, 0x6c, 0x74, 0x68, 0x63, 0x68, 0x65, 0x63, 0x6b, 0x11,
};

static const uint8_t spop_vec_haproxy_hello[] = {
    0x00, 0x00, 0x00, 0x81, 0x01, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x12,
    0x73, 0x75, 0x70, 0x70, 0x6f, 0x72, 0x74, 0x65, 0x64, 0x2d, 0x76, 0x65,
    0x72, 0x73, 0x69, 0x6f, 0x6e, 0x73, 0x08, 0x03, 0x32, 0x2e, 0x30, 0x0e,
    0x6d, 0x61, 0x78, 0x2d, 0x66, 0x72, 0x61, 0x6d, 0x65, 0x2d, 0x73, 0x69,
    0x7a, 0x65, 0x03, 0xfc, 0xf0, 0x06, 0x0c, 0x63, 0x61, 0x70, 0x61, 0x62,
    0x69, 0x6c, 0x69, 0x74, 0x69, 0x65, 0x73, 0x08, 0x10, 0x70, 0x69, 0x70,
    0x65, 0x6c, 0x69, 0x6e, 0x69, 0x6e, 0x67, 0x2c, 0x61, 0x73, 0x79, 0x6e,
    0x63, 0x09, 0x65, 0x6e, 0x67, 0x69, 0x6e, 0x65, 0x2d, 0x69, 0x64, 0x08,
    0x24, 0x64, 0x36, 0x65, 0x35, 0x32, 0x33, 0x36, 0x65, 0x2d, 0x39, 0x62,
    0x34, 0x63, 0x2d, 0x34, 0x30, 0x32, 0x34, 0x2d, 0x62, 0x64, 0x30, 0x33,
    0x2d, 0x39, 0x64, 0x30, 0x61, 0x38, 0x62, 0x62, 0x61, 0x37, 0x30, 0x66,
    0x30,
};

static const uint8_t spop_vec_notify_ipv4[] = {
    0x00, 0x00, 0x00, 0x73, 0x03, 0x00, 0x00, 0x00, 0x01, 0x00, 0x01, 0x0a,
    0x63, 0x68, 0x65, 0x63, 0x6b, 0x2d, 0x72, 0x61, 0x74, 0x65, 0x09, 0x03,
    0x6b, 0x65, 0x79, 0x08, 0x08, 0x74, 0x65, 0x6e, 0x61, 0x6e, 0x74, 0x2d,
    0x31, 0x02, 0x69, 0x70, 0x06, 0x7f, 0x00, 0x00, 0x01, 0x04, 0x70, 0x61,
    0x74, 0x68, 0x08, 0x0d, 0x2f, 0x61, 0x70, 0x69, 0x2f, 0x76, 0x31, 0x2f,
    0x69, 0x74, 0x65, 0x6d, 0x73, 0x06, 0x6d, 0x65, 0x74, 0x68, 0x6f, 0x64,
    0x08, 0x03, 0x47, 0x45, 0x54, 0x04, 0x70, 0x6c, 0x61, 0x6e, 0x08, 0x04,
    0x66, 0x72, 0x65, 0x65, 0x01, 0x6e, 0x04, 0x2a, 0x03, 0x6e, 0x65, 0x67,
    0x04, 0xfb, 0xf0, 0xfe, 0xfe, 0xfe, 0xfe, 0xfe, 0xfe, 0xfe, 0x0e, 0x07,
    0x6d, 0x69, 0x73, 0x73, 0x69, 0x6e, 0x67, 0x00, 0x01, 0x62, 0x11,
};

static const uint8_t spop_vec_notify_ipv6[] = {
    0x00, 0x00, 0x00, 0x72, 0x03, 0x00, 0x00, 0x00, 0x01, 0x02, 0x01, 0x0a,
    0x63, 0x68, 0x65, 0x63, 0x6b, 0x2d, 0x72, 0x61, 0x74, 0x65, 0x09, 0x03,
    0x6b, 0x65, 0x79, 0x08, 0x02, 0x6b, 0x32, 0x02, 0x69, 0x70, 0x07, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x01, 0x04, 0x70, 0x61, 0x74, 0x68, 0x08, 0x06, 0x2f, 0x6c,
    0x6f, 0x67, 0x69, 0x6e, 0x06, 0x6d, 0x65, 0x74, 0x68, 0x6f, 0x64, 0x08,
    0x03, 0x47, 0x45, 0x54, 0x04, 0x70, 0x6c, 0x61, 0x6e, 0x08, 0x04, 0x66,
    0x72, 0x65, 0x65, 0x01, 0x6e, 0x04, 0x2a, 0x03, 0x6e, 0x65, 0x67, 0x04,
    0xfb, 0xf0, 0xfe, 0xfe, 0xfe, 0xfe, 0xfe, 0xfe, 0xfe, 0x0e, 0x07, 0x6d,
    0x69, 0x73, 0x73, 0x69, 0x6e, 0x67, 0x00, 0x01, 0x62, 0x11,
};

static const uint8_t spop_vec_haproxy_disconnect[] = {
    0x00, 0x00, 0x00, 0x31, 0x02, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x0b,
    0x73, 0x74, 0x61, 0x74, 0x75, 0x73, 0x2d, 0x63, 0x6f, 0x64, 0x65, 0x03,
    0x02, 0x07, 0x6d, 0x65, 0x73, 0x73, 0x61, 0x67, 0x65, 0x08, 0x12, 0x61,
    0x20, 0x74, 0x69, 0x6d, 0x65, 0x6f, 0x75, 0x74, 0x20, 0x6f, 0x63, 0x63,
    0x75, 0x72, 0x72, 0x65, 0x64,
};

struct spop_vector {
    const char *label;
    const uint8_t *data;
    size_t len;
};

/* Every frame above, in capture order; loop tests index this table. */
static const struct spop_vector spop_vectors[] = {
    { "haproxy-hello-healthcheck", spop_vec_haproxy_hello_healthcheck,
      sizeof(spop_vec_haproxy_hello_healthcheck) },
    { "haproxy-hello", spop_vec_haproxy_hello,
      sizeof(spop_vec_haproxy_hello) },
    { "notify-ipv4", spop_vec_notify_ipv4,
      sizeof(spop_vec_notify_ipv4) },
    { "notify-ipv6", spop_vec_notify_ipv6,
      sizeof(spop_vec_notify_ipv6) },
    { "haproxy-disconnect", spop_vec_haproxy_disconnect,
      sizeof(spop_vec_haproxy_disconnect) },
};
#define SPOP_NVECTORS (sizeof(spop_vectors) / sizeof(spop_vectors[0]))

/* Indexes into spop_vectors[]. */
enum {
    SPOP_VEC_HAPROXY_HELLO_HEALTHCHECK = 0,
    SPOP_VEC_HAPROXY_HELLO = 1,
    SPOP_VEC_NOTIFY_IPV4 = 2,
    SPOP_VEC_NOTIFY_IPV6 = 3,
    SPOP_VEC_HAPROXY_DISCONNECT = 4,
};

/* What the header of each capture holds. */
static const struct {
    uint8_t type;
    uint64_t stream_id, frame_id;
} spop_vector_headers[SPOP_NVECTORS] = {
    { SPOP_FRAME_HAPROXY_HELLO, 0, 0 },
    { SPOP_FRAME_HAPROXY_HELLO, 0, 0 },
    { SPOP_FRAME_NOTIFY, 0, 1 }, /* the first NOTIFY of a 2.6 process has stream-id 0 */
    { SPOP_FRAME_NOTIFY, 2, 1 },
    { SPOP_FRAME_HAPROXY_DISCONNECT, 0, 0 },
};

/* ---- hand-made vectors ---------------------------------------------------- */

/* Varints at the width boundaries (the peers encoding changes width at 240,
 * 2288, 264432, 33818864, 4328786160, ...). hex is the checked encoding. */
static const struct {
    uint64_t v;
    size_t len;
    const char *hex;
} spop_varint_cases[] = {
    { 0, 1, "00" },
    { 1, 1, "01" },
    { 239, 1, "ef" },
    { 240, 2, "f000" },
    { 2287, 2, "ff7f" },
    { 2288, 3, "f08000" },
    { 16380, 3, "fcf006" },
    { 65535, 3, "fff01e" },
    { 264431, 3, NULL },
    { 264432, 4, NULL },
    { 33818863, 4, NULL },
    { 33818864, 5, NULL },
    { 4294967295ULL, 5, "fff0fefe7e" },
    { 4328786159ULL, 5, NULL },
    { 4328786160ULL, 6, NULL },
    { 1ULL << 63, 10, "f0f1fefefefefefefe06" },
    { UINT64_MAX - 4, 10, "fbf0fefefefefefefe0e" }, /* int64 -5, as HAProxy sends it */
    { UINT64_MAX, 10, "fff0fefefefefefefe0e" },
};

/* Typed data that decodes; raw is the IP bytes or string contents in hex.
 * Non-canonical cases decode but are encoded differently. */
static const struct {
    const char *hex;
    uint8_t type;
    int64_t sint;
    uint64_t uint;
    const char *raw;
    int canonical;
} spop_data_cases[] = {
    { "00", SPOP_DATA_NULL, 0, 0, NULL, 1 },
    { "01", SPOP_DATA_BOOL, 0, 0, NULL, 1 },
    { "11", SPOP_DATA_BOOL, 1, 0, NULL, 1 },
    { "f1", SPOP_DATA_BOOL, 1, 0, NULL, 0 },
    { "0205", SPOP_DATA_INT32, 5, 0, NULL, 1 },
    { "02 fbf0fefefefefefefe0e", SPOP_DATA_INT32, -5, 0, NULL, 1 },
    { "02 fbf0fefe7e", SPOP_DATA_INT32, -5, 0, NULL, 0 }, /* INT32 -5 as 32-bit two's complement */
    { "03 fff0fefe7e", SPOP_DATA_UINT32, 0, 4294967295ULL, NULL, 1 },
    { "04 2a", SPOP_DATA_INT64, 42, 0, NULL, 1 },
    { "14 2a", SPOP_DATA_INT64, 42, 0, NULL, 0 }, /* flags of a non-boolean are ignored */
    { "04 fbf0fefefefefefefe0e", SPOP_DATA_INT64, -5, 0, NULL, 1 },
    { "04 f0f1fefefefefefefe06", SPOP_DATA_INT64, INT64_MIN, 0, NULL, 1 },
    { "05 fff0fefefefefefefe0e", SPOP_DATA_UINT64, 0, UINT64_MAX, NULL, 1 },
    { "06 7f000001", SPOP_DATA_IPV4, 0, 0, "7f000001", 1 },
    { "07 00000000000000000000000000000001", SPOP_DATA_IPV6, 0, 0, "00000000000000000000000000000001", 1 },
    { "08 03 474554", SPOP_DATA_STR, 0, 0, "474554", 1 },
    { "08 00", SPOP_DATA_STR, 0, 0, "", 1 },
    { "09 03 00ff10", SPOP_DATA_BIN, 0, 0, "00ff10", 1 },
};

/* Input each decoder must refuse with SPOP_EINVAL, cursor unmoved. */
enum { SPOP_BAD_VARINT, SPOP_BAD_DATA, SPOP_BAD_FRAME, SPOP_BAD_ACTION };

static const struct {
    int kind;
    const char *hex;
} spop_bad_cases[] = {
    { SPOP_BAD_VARINT, "" },
    { SPOP_BAD_VARINT, "f0" },
    { SPOP_BAD_VARINT, "f080" },
    { SPOP_BAD_VARINT, "ff ff ff ff ff ff ff ff ff" },       /* 9 bytes, all "more" */
    { SPOP_BAD_VARINT, "f0 80 80 80 80 80 80 80 80 80" },    /* 10th byte says "more" */
    { SPOP_BAD_VARINT, "f0 80 80 80 80 80 80 80 80 80 00" }, /* 11 bytes */
    { SPOP_BAD_VARINT, "f0 80 80 80 80 80 80 80 80 10" },    /* bits past bit 63 */
    { SPOP_BAD_VARINT, "ff f0 fe fe fe fe fe fe fe 0f" },    /* UINT64_MAX + 2^60 */
    { SPOP_BAD_DATA, "" },
    { SPOP_BAD_DATA, "02" },
    { SPOP_BAD_DATA, "04 f0" },
    { SPOP_BAD_DATA, "04 f0 80" },
    { SPOP_BAD_DATA, "06 7f0000" },
    { SPOP_BAD_DATA, "07 000000000000000000000000000000" },
    { SPOP_BAD_DATA, "08" },
    { SPOP_BAD_DATA, "08 05 616263" }, /* string past the end */
    { SPOP_BAD_DATA, "09 ff" },
    { SPOP_BAD_DATA, "09 f0 80 00" },
    { SPOP_BAD_DATA, "0a" }, /* types 10..15 are reserved */
    { SPOP_BAD_DATA, "0b 00" },
    { SPOP_BAD_DATA, "0c" },
    { SPOP_BAD_DATA, "0d" },
    { SPOP_BAD_DATA, "0e" },
    { SPOP_BAD_DATA, "0f" },
    { SPOP_BAD_DATA, "1a" },
    { SPOP_BAD_DATA, "ff" },
    { SPOP_BAD_FRAME, "00000007 03 00000001 f0 80 00" },       /* stream-id past the frame */
    { SPOP_BAD_FRAME, "00000007 03 00000001 00 f0 00" },       /* frame-id past the frame */
    { SPOP_BAD_FRAME, "00000009 03 00000001 ff 7f f0 80 00" }, /* same, after a long one */
    { SPOP_BAD_FRAME, "00000006 03 00000001 00" },             /* below the minimum */
    { SPOP_BAD_FRAME, "00000000" },
    { SPOP_BAD_ACTION, "03 02 02 01 61" },    /* unknown action */
    { SPOP_BAD_ACTION, "01 02 02 01 61" },    /* set-var with 2 args */
    { SPOP_BAD_ACTION, "02 03 02 01 61 11" }, /* unset-var with 3 args */
    { SPOP_BAD_ACTION, "01 03 05 01 61 11" }, /* unknown scope */
    { SPOP_BAD_ACTION, "01 03 02 01 61" },    /* value missing */
    { SPOP_BAD_ACTION, "01 03 02 05 61 11" }, /* name past the end */
    { SPOP_BAD_ACTION, "01 03 02 01 61 0f" }, /* reserved type */
    { SPOP_BAD_ACTION, "01" },
    { SPOP_BAD_ACTION, "01 03" },
    { SPOP_BAD_ACTION, "01 03 02" },
};

/* Corruptions of the first NOTIFY's payload that spop_message_next() must
 * refuse: byte offset and the value written there. */
static const struct {
    size_t off;
    uint8_t val;
} spop_notify_corruptions[] = {
    { 0, 0x7f },  /* message name longer than the payload */
    { 0, 0xff },  /* message name length: a huge varint */
    { 11, 0x0a }, /* nb-args: one more arg than present */
    { 11, 0xff },
    { 12, 0xf5 }, /* length of the name "key" */
    { 16, 0x0a }, /* type of key's value: reserved */
    { 17, 0x7f }, /* length of "tenant-1" */
    { 17, 0xf8 },
};

/* supported-versions lists and whether they offer SPOP 2.x. */
static const struct {
    const char *s;
    int ok;
} spop_version_cases[] = {
    { "2.0", 1 },   { "2.0, 1.5", 1 }, { " 1.0 ,2.1 ", 1 }, { "1.0,\t2.10", 1 },
    { "2", 1 },     { "02.0", 1 },     { "1.0", 0 },        { "3.0", 0 },
    { "", 0 },      { "20.0", 0 },     { "12.0", 0 },       { "2.x", 0 },
    { "2.", 0 },    { ".0", 0 },       { "2 .0", 0 },       { "2.0.1", 0 },
    { ",,2.0,", 1 }, { "9999999999.0, 2.0", 1 },
};

/* capabilities lists and the flags they set. */
static const struct {
    const char *s;
    int pipelining, async, fragmentation;
} spop_capability_cases[] = {
    { "", 0, 0, 0 },
    { "pipelining,async", 1, 1, 0 },
    { " pipelining , async ,fragmentation ", 1, 1, 1 },
    { "fragmentation", 0, 0, 1 },
    { "pipelin,pipeliningx,Async", 0, 0, 0 },
    { ",,async,,", 0, 1, 0 },
    { "\tpipelining\t", 1, 0, 0 },
};

/* AGENT-HELLO for max-frame-size 16380 and capabilities "pipelining". */
static const char spop_golden_agent_hello[] = "00000040 65 00000001 00 00"
                                              " 07 76657273696f6e 08 03 322e30"
                                              " 0e 6d61782d6672616d652d73697a65 03 fcf006"
                                              " 0c 6361706162696c6974696573 08 0a"
                                              " 706970656c696e696e67";

/* ACK payload: set-var txn.blocked true, txn.retry_after 3, req.plan "gold",
 * sess.gone NULL, then unset-var txn.limit. */
static const char spop_golden_actions[] = "01 03 02 07 626c6f636b6564 11"
                                          " 01 03 02 0b 72657472795f6166746572 04 03"
                                          " 01 03 03 04 706c616e 08 04 676f6c64"
                                          " 01 03 01 04 676f6e65 00"
                                          " 02 02 02 05 6c696d6974";

/* clang-format on */

#endif
