/* SPDX-License-Identifier: Apache-2.0 */
/* spop.h - SPOP 2.0 codec (HAProxy's Stream Processing Offload Protocol).
 *
 * Pure encoding and decoding: no sockets, no allocation, no globals. Decoders
 * work on a cursor (struct spop_reader) over a caller-owned buffer; every read
 * is bounds-checked. Decoded strings and binaries are VIEWS into that buffer:
 * they stay valid only as long as the buffer is neither freed nor compacted.
 *
 * The wire format follows HAProxy's doc/SPOE.txt, as HAProxy really encodes
 * it where the two differ: the typed-data type is in the LOW nibble and the
 * flags in the high one, and varints use the "peers" encoding (at most 10
 * bytes here: HAProxy's decoder does not cap the shift).
 *
 * Return convention: 0 (or a positive count) on success, a negative SPOP_E*
 * code on failure.
 */
#ifndef SPOP_H
#define SPOP_H

#include <stddef.h>
#include <stdint.h>

#define SPOP_VARINT_MAX_LEN 10  /* UINT64_MAX takes 10 bytes */
#define SPOP_VARINT_ONE_BYTE_LIMIT 240
#define SPOP_VARINT_FIRST_MARK 0xf0
#define SPOP_VARINT_FIRST_BITS 4
#define SPOP_VARINT_GROUP_BITS 7
#define SPOP_VARINT_MORE 0x80
#define SPOP_FRAME_LEN_SIZE 4   /* big-endian length prefix */
#define SPOP_FRAME_MIN_LEN 7    /* type + flags + 2 one-byte varints */
#define SPOP_MIN_FRAME_SIZE 256 /* smallest max-frame-size allowed */
#define SPOP_DEFAULT_FRAME_SIZE 16380
#define SPOP_MAX_FRAME_SIZE (16 * 1024 * 1024) /* hard cap whatever is configured */
#define SPOP_MAX_ARGS 255                      /* NB-ARGS is one byte */
#define SPOP_MAX_VAR_NAME 48                   /* HAProxy builds "scope.prefix.name" in 64 bytes */
#define SPOP_MAX_STATUS_MSG 255

/* Return codes */
#define SPOP_OK 0
#define SPOP_EAGAIN (-1)  /* frame incomplete: need more bytes */
#define SPOP_EINVAL (-2)  /* malformed or inconsistent data */
#define SPOP_ETOOBIG (-3) /* frame length above the allowed maximum */
#define SPOP_ENOSPC (-4)  /* output buffer too small */

enum spop_frame_type {
    SPOP_FRAME_UNSET = 0,
    SPOP_FRAME_HAPROXY_HELLO = 1,
    SPOP_FRAME_HAPROXY_DISCONNECT = 2,
    SPOP_FRAME_NOTIFY = 3,
    SPOP_FRAME_AGENT_HELLO = 101,
    SPOP_FRAME_AGENT_DISCONNECT = 102,
    SPOP_FRAME_ACK = 103,
};

#define SPOP_FLAG_FIN 0x00000001u
#define SPOP_FLAG_ABORT 0x00000002u

enum spop_data_type {
    SPOP_DATA_NULL = 0,
    SPOP_DATA_BOOL = 1,
    SPOP_DATA_INT32 = 2,
    SPOP_DATA_UINT32 = 3,
    SPOP_DATA_INT64 = 4,
    SPOP_DATA_UINT64 = 5,
    SPOP_DATA_IPV4 = 6,
    SPOP_DATA_IPV6 = 7,
    SPOP_DATA_STR = 8,
    SPOP_DATA_BIN = 9,
};
#define SPOP_DATA_TYPE_MASK 0x0f
#define SPOP_DATA_FLAG_TRUE 0x10 /* booleans: flag in the high nibble */

/* Status codes of SPOE.txt section 3.5, one to one. */
enum spop_status {
    SPOP_ST_NONE = 0,
    SPOP_ST_IO = 1,
    SPOP_ST_TIMEOUT = 2,
    SPOP_ST_TOO_BIG = 3,
    SPOP_ST_INVALID = 4,
    SPOP_ST_NO_VSN = 5,
    SPOP_ST_NO_FRAME_SIZE = 6,
    SPOP_ST_NO_CAP = 7,
    SPOP_ST_BAD_VSN = 8,
    SPOP_ST_BAD_FRAME_SIZE = 9,
    SPOP_ST_FRAG_NOT_SUPPORTED = 10,
    SPOP_ST_INTERLACED_FRAMES = 11,
    SPOP_ST_FRAMEID_NOTFOUND = 12,
    SPOP_ST_RES_ALLOC_ERR = 13,
    SPOP_ST_UNKNOWN = 99,
};

/* Variable scopes of set-var / unset-var. */
enum spop_scope {
    SPOP_SCOPE_PROC = 0,
    SPOP_SCOPE_SESS = 1,
    SPOP_SCOPE_TXN = 2,
    SPOP_SCOPE_REQ = 3,
    SPOP_SCOPE_RES = 4,
};

enum spop_action {
    SPOP_ACT_SET_VAR = 1,
    SPOP_ACT_UNSET_VAR = 2,
};

/* A length-delimited view into a buffer; not NUL-terminated. */
struct spop_str {
    const char *ptr;
    size_t len;
};

/* A typed value. For STR and BIN, u.buf is a view into the decoded buffer. */
struct spop_data {
    uint8_t type; /* enum spop_data_type */
    union {
        int64_t sint;        /* BOOL (0 or 1), INT32, INT64 */
        uint64_t uint;       /* UINT32, UINT64 */
        uint8_t ip[16];      /* IPV4 in ip[0..3], IPV6 in ip[0..15], network order */
        struct spop_str buf; /* STR, BIN */
    } u;
};

/* Read cursor: p advances, never past end. */
struct spop_reader {
    const uint8_t *p;
    const uint8_t *end;
};

/* Write cursor: p advances, never past end. On SPOP_ENOSPC the content written
 * so far is undefined, but p never passes end. */
struct spop_writer {
    uint8_t *p;
    uint8_t *end;
};

/* A decoded frame. payload is a view into the input buffer. */
struct spop_frame {
    uint8_t type;
    uint32_t flags;
    uint64_t stream_id;
    uint64_t frame_id;
    const uint8_t *payload;
    size_t payload_len;
};

/* What an HAPROXY-HELLO says, as far as the agent cares. */
struct spop_hello {
    int has_version; /* supported-versions item present */
    int version_ok;  /* it lists a 2.x version */
    int has_max_frame_size;
    uint64_t max_frame_size;
    int has_capabilities;
    int pipelining;    /* "pipelining" is among the capabilities */
    int async;         /* "async" is among the capabilities */
    int fragmentation; /* "fragmentation" is among the capabilities */
    int healthcheck;   /* healthcheck item true */
    struct spop_str engine_id;
};

/* What a HAPROXY-DISCONNECT (or AGENT-DISCONNECT) says. */
struct spop_disconnect {
    uint64_t status_code;
    struct spop_str message;
};

/* One argument of a NOTIFY message. An unnamed arg has an empty name. */
struct spop_arg {
    struct spop_str name;
    struct spop_data value;
};

/* One message of a NOTIFY frame. */
struct spop_message {
    struct spop_str name;
    unsigned nargs;
    struct spop_arg args[SPOP_MAX_ARGS];
};

/* ---- primitives ---------------------------------------------------------- */

/* Decode a varint. SPOP_EINVAL if truncated or longer than 10 bytes (or if
 * it overflows 64 bits). */
int spop_get_varint(struct spop_reader *r, uint64_t *v);

/* Encode v into out, which must hold SPOP_VARINT_MAX_LEN bytes; returns the
 * length. Inline for writers that checked their room once for a whole
 * template (the ACK's remaining and reset). */
static inline size_t spop_varint_encode(uint8_t *out, uint64_t v)
{
    size_t n = 0;

    if (v < SPOP_VARINT_ONE_BYTE_LIMIT) {
        out[n++] = (uint8_t)v;
        return n;
    }
    out[n++] = (uint8_t)(v | SPOP_VARINT_FIRST_MARK);
    v = (v - SPOP_VARINT_ONE_BYTE_LIMIT) >> SPOP_VARINT_FIRST_BITS;
    while (v >= SPOP_VARINT_MORE) {
        out[n++] = (uint8_t)(v | SPOP_VARINT_MORE);
        v = (v - SPOP_VARINT_MORE) >> SPOP_VARINT_GROUP_BITS;
    }
    out[n++] = (uint8_t)v;
    return n;
}
/* Encode a varint (1..10 bytes). */
int spop_put_varint(struct spop_writer *w, uint64_t v);
/* Number of bytes spop_put_varint() would write for v. */
size_t spop_varint_len(uint64_t v);

/* A name/string: varint length then bytes (no type byte). */
int spop_get_str(struct spop_reader *r, struct spop_str *s);
int spop_put_str(struct spop_writer *w, const char *s, size_t len);

/* A typed value: type byte (low nibble type, high nibble flags) then data.
 * Unknown types are SPOP_EINVAL. */
int spop_get_data(struct spop_reader *r, struct spop_data *d);
int spop_put_data(struct spop_writer *w, const struct spop_data *d);

/* ---- frames -------------------------------------------------------------- */

/* Decode one frame from buf[0..len). max_len bounds the frame length (the
 * 4-byte prefix not counted) and is checked before anything else is read.
 * Returns SPOP_OK and sets *consumed (prefix included), SPOP_EAGAIN when buf
 * holds less than a whole frame, SPOP_ETOOBIG when the announced length is
 * above max_len, SPOP_EINVAL when the header is malformed (length below
 * SPOP_FRAME_MIN_LEN, bad varint). Types and flags are not judged here. */
int spop_frame_decode(const uint8_t *buf, size_t len, size_t max_len, struct spop_frame *f,
                      size_t *consumed);

/* Start a frame: reserve the length prefix, write the header. *start is set
 * to the frame's first byte, to be given to spop_frame_end(). */
int spop_frame_begin(struct spop_writer *w, uint8_t type, uint32_t flags, uint64_t stream_id,
                     uint64_t frame_id, uint8_t **start);
/* Finish a frame: fill in its length prefix. */
int spop_frame_end(struct spop_writer *w, uint8_t *start);

/* ---- kv-lists (HELLO, DISCONNECT) ---------------------------------------- */

/* Next item of a kv-list: returns 1 and fills key/val, 0 at the end of the
 * list, SPOP_EINVAL if malformed. */
int spop_kv_next(struct spop_reader *r, struct spop_str *key, struct spop_data *val);
int spop_put_kv(struct spop_writer *w, const char *key, const struct spop_data *val);

/* Decode the payload of an HAPROXY-HELLO. Unknown items are ignored; item
 * types that do not match the spec are SPOP_EINVAL. Presence checks are the
 * caller's (so it can choose status 5, 6 or 7). */
int spop_hello_decode(const struct spop_frame *f, struct spop_hello *h);
/* Decode the payload of a DISCONNECT frame. */
int spop_disconnect_decode(const struct spop_frame *f, struct spop_disconnect *d);

/* Encode whole frames: an AGENT-HELLO (version "2.0", max-frame-size,
 * capabilities, possibly empty) and an AGENT-DISCONNECT (status + message,
 * message truncated to 255 bytes). */
int spop_agent_hello_encode(struct spop_writer *w, uint32_t max_frame_size,
                            const char *capabilities);
int spop_agent_disconnect_encode(struct spop_writer *w, unsigned status, const char *message);

/* ---- NOTIFY messages and ACK actions ------------------------------------- */

/* Next message of a NOTIFY payload: returns 1 and fills *m, 0 at the end,
 * SPOP_EINVAL if malformed. */
int spop_message_next(struct spop_reader *r, struct spop_message *m);

/* ACK actions. */
int spop_put_set_var(struct spop_writer *w, uint8_t scope, const char *name,
                     const struct spop_data *val);
/* The same with the name's length given (no scan: the ACK's names are
 * literals); SPOP_EINVAL unless 1 <= len <= SPOP_MAX_VAR_NAME. */
int spop_put_set_var_len(struct spop_writer *w, uint8_t scope, const char *name, size_t len,
                         const struct spop_data *val);
/* The same for an INT64 and a STR value: the bytes of spop_put_set_var_len()
 * with spop_int(v) or spop_string(s, slen), written in place in one step when
 * the writer has room for the longest encoding (an ACK's every variable). */
int spop_put_set_var_int(struct spop_writer *w, uint8_t scope, const char *name, size_t len,
                         int64_t v);
int spop_put_set_var_str(struct spop_writer *w, uint8_t scope, const char *name, size_t len,
                         const char *s, size_t slen);
int spop_put_unset_var(struct spop_writer *w, uint8_t scope, const char *name);
/* Items this codec encoded earlier (e.g. a run of actions kept to be sent
 * again), copied as they are: SPOP_ENOSPC when they do not fit. */
int spop_put_encoded(struct spop_writer *w, const uint8_t *bytes, size_t n);
/* Decode one action (for tests and the bench). Returns 1, 0 at the end,
 * SPOP_EINVAL if malformed. For unset-var, val->type is SPOP_DATA_NULL. */
int spop_action_next(struct spop_reader *r, uint8_t *action, uint8_t *scope, struct spop_str *name,
                     struct spop_data *val);

/* Constructors for encoding. */
struct spop_data spop_bool(int b);
struct spop_data spop_int(int64_t v);   /* encoded as INT64, HAProxy's own choice */
struct spop_data spop_uint(uint32_t v); /* UINT32 */
struct spop_data spop_string(const char *s, size_t len);

/* Human-readable name of a status code, "unknown" for others. */
const char *spop_status_str(unsigned status);

#endif
