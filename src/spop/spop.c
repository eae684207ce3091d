/* SPDX-License-Identifier: Apache-2.0 */
/* spop.c - SPOP 2.0 codec: varints, typed data, kv-lists, frames, NOTIFY
 * messages and ACK actions.
 *
 * The handshake (HELLO, DISCONNECT) is in spop_handshake.c.
 *
 * Pure: libc only, no allocation, no output. Every byte read goes through
 * take() and every byte written through reserve(): they are the only places
 * that compare a cursor with its end.
 *
 * Decoders work on a copy of the caller's cursor and store it back only on
 * success, so a failed call consumes nothing and its outputs are not touched
 * (except spop_message_next(), whose large output is filled in place). Encoders
 * likewise rewind the writer when they fail, so a SPOP_ENOSPC never leaves
 * half an item behind.
 */
#include "spop.h"

#include <string.h>

#include "spop_int.h"

/* Peers varint (spop.h: SPOP_VARINT_*): values below 240 are one byte;
 * longer ones carry 4 bits in the first byte, then 7 bits per byte, the
 * high bit meaning "more follows". */
#define VARINT_ONE_BYTE_LIMIT SPOP_VARINT_ONE_BYTE_LIMIT
#define VARINT_FIRST_BITS SPOP_VARINT_FIRST_BITS
#define VARINT_GROUP_BITS SPOP_VARINT_GROUP_BITS
#define VARINT_MORE SPOP_VARINT_MORE

#define FLAGS_SIZE 4
#define IPV4_SIZE 4
#define IPV6_SIZE 16
#define FRAME_HEADER_FIXED (SPOP_FRAME_LEN_SIZE + 1 + FLAGS_SIZE) /* prefix, type, flags */

#define SET_VAR_NB_ARGS 3
#define UNSET_VAR_NB_ARGS 2

/* ---- cursors ------------------------------------------------------------- */

static int at_end(const struct spop_reader *r)
{
    return r->p >= r->end;
}

/* The bounds check of every decoder: returns the next n bytes and advances
 * past them, or NULL, cursor untouched, when fewer remain. n is 64-bit because
 * lengths arrive as varints and must be checked before any narrowing. */
static const uint8_t *take(struct spop_reader *r, uint64_t n)
{
    const uint8_t *p = r->p;

    if ((uint64_t)(r->end - r->p) < n)
        return NULL;
    r->p += (size_t)n;
    return p;
}

static int get_u8(struct spop_reader *r, uint8_t *v)
{
    const uint8_t *p = take(r, 1);

    if (!p)
        return SPOP_EINVAL;
    *v = *p;
    return SPOP_OK;
}

/* The bounds check of every encoder: returns room for n bytes and advances
 * past it, or NULL, cursor untouched. */
static uint8_t *reserve(struct spop_writer *w, size_t n)
{
    uint8_t *p = w->p;

    if ((size_t)(w->end - w->p) < n)
        return NULL;
    w->p += n;
    return p;
}

static int put_bytes(struct spop_writer *w, const void *src, size_t n)
{
    uint8_t *p = reserve(w, n);

    if (!p)
        return SPOP_ENOSPC;
    if (n) /* memcpy() from NULL is undefined even for 0 bytes */
        memcpy(p, src, n);
    return SPOP_OK;
}

static int put_u8(struct spop_writer *w, uint8_t v)
{
    return put_bytes(w, &v, 1);
}

static uint32_t get_be32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static void put_be32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

/* Two's complement reinterpretation without implementation-defined casts. */
static int64_t u64_to_s64(uint64_t v)
{
    if (v <= INT64_MAX)
        return (int64_t)v;
    return -(int64_t)(UINT64_MAX - v) - 1;
}

/* ---- varints ------------------------------------------------------------- */

/* spop_varint_encode() (spop.h): encoding to a scratch buffer first lets
 * callers reserve the exact size at once, so a short writer never gets a
 * partial varint. */
static size_t varint_encode(uint8_t *out, uint64_t v)
{
    return spop_varint_encode(out, v);
}

size_t spop_varint_len(uint64_t v)
{
    uint8_t tmp[SPOP_VARINT_MAX_LEN];

    return varint_encode(tmp, v);
}

int spop_put_varint(struct spop_writer *w, uint64_t v)
{
    uint8_t tmp[SPOP_VARINT_MAX_LEN];

    if ((size_t)(w->end - w->p) >= SPOP_VARINT_MAX_LEN) { /* room for any: in place */
        w->p += varint_encode(w->p, v);
        return SPOP_OK;
    }
    return put_bytes(w, tmp, varint_encode(tmp, v));
}

/* Each byte after the first adds b << shift, its marker bit included (this is
 * what undoes the encoder's subtractions). The 10-byte cap bounds the shift
 * at 60, and each addition is checked so that no value above UINT64_MAX can
 * wrap around into a valid-looking one. */
int spop_get_varint(struct spop_reader *r, uint64_t *v)
{
    struct spop_reader c = *r;
    unsigned shift = VARINT_FIRST_BITS;
    uint64_t val, add;
    uint8_t b;

    if (get_u8(&c, &b) < 0)
        return SPOP_EINVAL;
    val = b;
    if (b >= VARINT_ONE_BYTE_LIMIT) {
        for (int n = 1;; n++) {
            if (n >= SPOP_VARINT_MAX_LEN || get_u8(&c, &b) < 0)
                return SPOP_EINVAL;
            if (b > UINT64_MAX >> shift)
                return SPOP_EINVAL;
            add = (uint64_t)b << shift;
            if (val > UINT64_MAX - add)
                return SPOP_EINVAL;
            val += add;
            if (b < VARINT_MORE)
                break;
            shift += VARINT_GROUP_BITS;
        }
    }
    *v = val;
    *r = c;
    return SPOP_OK;
}

/* ---- strings and typed data ---------------------------------------------- */

int spop_get_str(struct spop_reader *r, struct spop_str *s)
{
    struct spop_reader c = *r;
    const uint8_t *p;
    uint64_t n;

    if (spop_get_varint(&c, &n) < 0 || !(p = take(&c, n)))
        return SPOP_EINVAL;
    s->ptr = (const char *)p;
    s->len = (size_t)n;
    *r = c;
    return SPOP_OK;
}

int spop_put_str(struct spop_writer *w, const char *s, size_t len)
{
    uint8_t tmp[SPOP_VARINT_MAX_LEN];
    size_t n;
    uint8_t *p;

    if (!s && len)
        return SPOP_EINVAL;
    if (len > SIZE_MAX - SPOP_VARINT_MAX_LEN)
        return SPOP_ENOSPC;
    if ((size_t)(w->end - w->p) >= SPOP_VARINT_MAX_LEN + len) { /* the common case */
        p = w->p;
        p += varint_encode(p, len);
        if (len)
            memcpy(p, s, len);
        w->p = p + len;
        return SPOP_OK;
    }
    n = varint_encode(tmp, len);
    p = reserve(w, n + len);
    if (!p)
        return SPOP_ENOSPC;
    memcpy(p, tmp, n);
    if (len)
        memcpy(p + n, s, len);
    return SPOP_OK;
}

/* INT32 is read as leniently as HAProxy does: any varint is taken. A value in
 * (INT32_MAX, UINT32_MAX] can only be a 32-bit two's complement negative;
 * anything else is a 64-bit one, which is how HAProxy itself encodes. */
static int64_t int32_from_varint(uint64_t v)
{
    if (v > INT32_MAX && v <= UINT32_MAX)
        return (int64_t)v - ((int64_t)1 << 32);
    return u64_to_s64(v);
}

int spop_get_data(struct spop_reader *r, struct spop_data *d)
{
    struct spop_reader c = *r;
    struct spop_data out;
    const uint8_t *p;
    uint64_t v;
    uint8_t tb;

    memset(&out, 0, sizeof(out));
    if (get_u8(&c, &tb) < 0)
        return SPOP_EINVAL;
    out.type = tb & SPOP_DATA_TYPE_MASK;
    switch (out.type) {
    case SPOP_DATA_NULL:
        break;
    case SPOP_DATA_BOOL:
        out.u.sint = (tb & SPOP_DATA_FLAG_TRUE) != 0;
        break;
    case SPOP_DATA_INT32:
    case SPOP_DATA_INT64:
        if (spop_get_varint(&c, &v) < 0)
            return SPOP_EINVAL;
        out.u.sint = out.type == SPOP_DATA_INT32 ? int32_from_varint(v) : u64_to_s64(v);
        break;
    case SPOP_DATA_UINT32:
    case SPOP_DATA_UINT64:
        /* lenient like HAProxy: a UINT32 above 2^32-1 is kept, not refused */
        if (spop_get_varint(&c, &out.u.uint) < 0)
            return SPOP_EINVAL;
        break;
    case SPOP_DATA_IPV4:
    case SPOP_DATA_IPV6: {
        size_t n = out.type == SPOP_DATA_IPV4 ? IPV4_SIZE : IPV6_SIZE;

        if (!(p = take(&c, n)))
            return SPOP_EINVAL;
        memcpy(out.u.ip, p, n);
        break;
    }
    case SPOP_DATA_STR:
    case SPOP_DATA_BIN:
        if (spop_get_str(&c, &out.u.buf) < 0)
            return SPOP_EINVAL;
        break;
    default: /* 10..15 are reserved */
        return SPOP_EINVAL;
    }
    *d = out;
    *r = c;
    return SPOP_OK;
}

/* Strict on output: an INT32 or UINT32 that does not fit its type is a bug
 * in the caller, not something to send HAProxy. */
int spop_put_data(struct spop_writer *w, const struct spop_data *d)
{
    uint8_t *save = w->p;
    int rc;

    switch (d->type) {
    case SPOP_DATA_NULL:
        rc = put_u8(w, SPOP_DATA_NULL);
        break;
    case SPOP_DATA_BOOL:
        rc = put_u8(w, SPOP_DATA_BOOL | (d->u.sint ? SPOP_DATA_FLAG_TRUE : 0));
        break;
    case SPOP_DATA_INT32:
    case SPOP_DATA_INT64:
        if (d->type == SPOP_DATA_INT32 && (d->u.sint < INT32_MIN || d->u.sint > INT32_MAX))
            return SPOP_EINVAL;
        rc = put_u8(w, d->type);
        if (rc == SPOP_OK)
            rc = spop_put_varint(w, (uint64_t)d->u.sint);
        break;
    case SPOP_DATA_UINT32:
    case SPOP_DATA_UINT64:
        if (d->type == SPOP_DATA_UINT32 && d->u.uint > UINT32_MAX)
            return SPOP_EINVAL;
        rc = put_u8(w, d->type);
        if (rc == SPOP_OK)
            rc = spop_put_varint(w, d->u.uint);
        break;
    case SPOP_DATA_IPV4:
    case SPOP_DATA_IPV6:
        rc = put_u8(w, d->type);
        if (rc == SPOP_OK)
            rc = put_bytes(w, d->u.ip, d->type == SPOP_DATA_IPV4 ? IPV4_SIZE : IPV6_SIZE);
        break;
    case SPOP_DATA_STR:
    case SPOP_DATA_BIN:
        if (!d->u.buf.ptr && d->u.buf.len)
            return SPOP_EINVAL;
        rc = put_u8(w, d->type);
        if (rc == SPOP_OK)
            rc = spop_put_str(w, d->u.buf.ptr, d->u.buf.len);
        break;
    default:
        return SPOP_EINVAL;
    }
    if (rc < 0)
        w->p = save;
    return rc;
}

struct spop_data spop_bool(int b)
{
    return (struct spop_data){.type = SPOP_DATA_BOOL, .u.sint = b != 0};
}

struct spop_data spop_int(int64_t v)
{
    return (struct spop_data){.type = SPOP_DATA_INT64, .u.sint = v};
}

struct spop_data spop_uint(uint32_t v)
{
    return (struct spop_data){.type = SPOP_DATA_UINT32, .u.uint = v};
}

struct spop_data spop_string(const char *s, size_t len)
{
    return (struct spop_data){.type = SPOP_DATA_STR, .u.buf = {s, len}};
}

/* ---- frames -------------------------------------------------------------- */

/* The length is judged as soon as its 4 bytes are in: a peer announcing a
 * huge frame is refused at once instead of being buffered for. The header
 * varints are read through a reader that ends with the frame, so they cannot
 * borrow bytes from the next frame. */
int spop_frame_decode(const uint8_t *buf, size_t len, size_t max_len, struct spop_frame *f,
                      size_t *consumed)
{
    struct spop_reader r = reader_of(buf, len);
    struct spop_frame out;
    const uint8_t *p;
    uint32_t flen;

    if (!(p = take(&r, SPOP_FRAME_LEN_SIZE)))
        return SPOP_EAGAIN;
    flen = get_be32(p);
    if (flen > max_len || flen > SPOP_MAX_FRAME_SIZE)
        return SPOP_ETOOBIG;
    if (flen < SPOP_FRAME_MIN_LEN)
        return SPOP_EINVAL;
    if (!(p = take(&r, flen)))
        return SPOP_EAGAIN;

    r = reader_of(p, flen);
    memset(&out, 0, sizeof(out));
    if (get_u8(&r, &out.type) < 0 || !(p = take(&r, FLAGS_SIZE)))
        return SPOP_EINVAL;
    out.flags = get_be32(p);
    if (spop_get_varint(&r, &out.stream_id) < 0 || spop_get_varint(&r, &out.frame_id) < 0)
        return SPOP_EINVAL;
    out.payload = r.p;
    out.payload_len = (size_t)(r.end - r.p);
    *f = out;
    *consumed = SPOP_FRAME_LEN_SIZE + (size_t)flen;
    return SPOP_OK;
}

int spop_frame_begin(struct spop_writer *w, uint8_t type, uint32_t flags, uint64_t stream_id,
                     uint64_t frame_id, uint8_t **start)
{
    uint8_t *save = w->p;
    uint8_t *p = reserve(w, FRAME_HEADER_FIXED);

    if (!p)
        return SPOP_ENOSPC;
    put_be32(p, 0); /* filled in by spop_frame_end() */
    p[SPOP_FRAME_LEN_SIZE] = type;
    put_be32(p + SPOP_FRAME_LEN_SIZE + 1, flags);
    if (spop_put_varint(w, stream_id) < 0 || spop_put_varint(w, frame_id) < 0) {
        w->p = save;
        return SPOP_ENOSPC;
    }
    *start = p;
    return SPOP_OK;
}

/* start must come from spop_frame_begin() on this writer: anything shorter
 * than a minimal frame behind it is refused rather than patched blindly. */
int spop_frame_end(struct spop_writer *w, uint8_t *start)
{
    size_t flen;

    if (!start || start > w->p || (size_t)(w->p - start) < SPOP_FRAME_LEN_SIZE + SPOP_FRAME_MIN_LEN)
        return SPOP_EINVAL;
    flen = (size_t)(w->p - start) - SPOP_FRAME_LEN_SIZE;
    if (flen > SPOP_MAX_FRAME_SIZE) /* the peer's decoder would refuse it too */
        return SPOP_ETOOBIG;
    put_be32(start, (uint32_t)flen);
    return SPOP_OK;
}

/* ---- kv-lists ------------------------------------------------------------ */

int spop_kv_next(struct spop_reader *r, struct spop_str *key, struct spop_data *val)
{
    struct spop_reader c = *r;
    struct spop_str k;
    struct spop_data v;

    if (at_end(&c))
        return 0;
    if (spop_get_str(&c, &k) < 0 || spop_get_data(&c, &v) < 0)
        return SPOP_EINVAL;
    *key = k;
    *val = v;
    *r = c;
    return 1;
}

int spop_put_kv(struct spop_writer *w, const char *key, const struct spop_data *val)
{
    uint8_t *save = w->p;
    int rc;

    if (!key || !val)
        return SPOP_EINVAL;
    rc = spop_put_str(w, key, strlen(key));
    if (rc == SPOP_OK)
        rc = spop_put_data(w, val);
    if (rc < 0)
        w->p = save;
    return rc;
}

/* ---- NOTIFY messages and ACK actions ------------------------------------- */

/* *m is filled in place (it is ~10 KB, too big to stage on the stack) and is
 * meaningless after an error; m->nargs is reset first so that a caller that
 * ignores the error at least sees no arguments. */
/* The common string of a NOTIFY, inline: a one-byte length (< 240) and
 * its bytes in bounds. Returns 1 with *s set and r advanced; 0, r
 * untouched, for spop_get_str() to decide (longer, truncated, invalid). */
static inline int get_short_str(struct spop_reader *r, struct spop_str *s)
{
    const uint8_t *p = r->p;

    if (p == r->end || *p >= VARINT_ONE_BYTE_LIMIT || (size_t)(r->end - p - 1) < *p)
        return 0;
    s->ptr = (const char *)p + 1;
    s->len = *p;
    r->p = p + 1 + *p;
    return 1;
}

/* spop_get_str() with get_short_str() first. */
static inline int get_str_fast(struct spop_reader *r, struct spop_str *s)
{
    return get_short_str(r, s) ? SPOP_OK : spop_get_str(r, s);
}

/* spop_get_data() with its two common cases of a NOTIFY inline, giving
 * the same *d: a short STR or BIN, and an IPV4. A failure leaves *d
 * partly written (spop_message_next() then fails as a whole). */
static inline int get_data_fast(struct spop_reader *r, struct spop_data *d)
{
    struct spop_reader c = *r;
    uint8_t type;

    if (c.p == c.end)
        return SPOP_EINVAL;
    type = *c.p++ & SPOP_DATA_TYPE_MASK;
    if (type == SPOP_DATA_STR || type == SPOP_DATA_BIN) {
        if (get_short_str(&c, &d->u.buf)) {
            d->type = type;
            *r = c;
            return SPOP_OK;
        }
    } else if (type == SPOP_DATA_IPV4 && (size_t)(c.end - c.p) >= IPV4_SIZE) {
        d->type = type;
        memset(&d->u, 0, sizeof(d->u));
        memcpy(d->u.ip, c.p, IPV4_SIZE);
        r->p = c.p + IPV4_SIZE;
        return SPOP_OK;
    }
    return spop_get_data(r, d);
}

int spop_message_next(struct spop_reader *r, struct spop_message *m)
{
    struct spop_reader c = *r;
    uint8_t nargs;

    m->nargs = 0;
    if (at_end(&c))
        return 0;
    if (get_str_fast(&c, &m->name) < 0 || get_u8(&c, &nargs) < 0)
        return SPOP_EINVAL;
    for (unsigned i = 0; i < nargs; i++) {
        struct spop_arg *a = &m->args[i];

        if (get_str_fast(&c, &a->name) < 0 || get_data_fast(&c, &a->value) < 0)
            return SPOP_EINVAL;
    }
    m->nargs = nargs;
    *r = c;
    return 1;
}

/* Common head of both actions, all or nothing. The name limit keeps
 * HAProxy's 64-byte "scope.prefix.name" buffer from truncating it. */
static int put_action_head(struct spop_writer *w, uint8_t action, uint8_t nb_args, uint8_t scope,
                           const char *name, size_t len)
{
    uint8_t head[3], *save = w->p;
    int rc;

    if (!name || scope > SPOP_SCOPE_RES || len == 0 || len > SPOP_MAX_VAR_NAME)
        return SPOP_EINVAL;
    head[0] = action;
    head[1] = nb_args;
    head[2] = scope;
    rc = put_bytes(w, head, sizeof(head));
    if (rc == SPOP_OK)
        rc = spop_put_str(w, name, len);
    if (rc < 0)
        w->p = save;
    return rc;
}

int spop_put_encoded(struct spop_writer *w, const uint8_t *bytes, size_t n)
{
    if (!bytes && n)
        return SPOP_EINVAL;
    return put_bytes(w, bytes, n);
}

/* The longest name a caller may pass, plus one: longer is SPOP_EINVAL. */
static size_t name_len(const char *name)
{
    return name ? bounded_len(name, SPOP_MAX_VAR_NAME + 1) : 0;
}

/* A NULL val is allowed on the wire: HAProxy then unsets the variable. */
int spop_put_set_var(struct spop_writer *w, uint8_t scope, const char *name,
                     const struct spop_data *val)
{
    return spop_put_set_var_len(w, scope, name, name_len(name), val);
}

int spop_put_set_var_len(struct spop_writer *w, uint8_t scope, const char *name, size_t len,
                         const struct spop_data *val)
{
    uint8_t *save = w->p;
    int rc;

    if (!val)
        return SPOP_EINVAL;
    rc = put_action_head(w, SPOP_ACT_SET_VAR, SET_VAR_NB_ARGS, scope, name, len);
    if (rc == SPOP_OK)
        rc = spop_put_data(w, val);
    if (rc < 0)
        w->p = save;
    return rc;
}

/* A set-var action up to its value's bytes, in place at p: the caller has
 * checked the room, the scope and that 1 <= len <= SPOP_MAX_VAR_NAME (below
 * VARINT_ONE_BYTE_LIMIT: its length is one byte). */
static uint8_t *set_var_head(uint8_t *p, uint8_t scope, const char *name, size_t len, uint8_t type)
{
    p[0] = SPOP_ACT_SET_VAR;
    p[1] = SET_VAR_NB_ARGS;
    p[2] = scope;
    p[3] = (uint8_t)len;
    memcpy(p + 4, name, len);
    p[4 + len] = type;
    return p + 5 + len;
}

_Static_assert(SPOP_MAX_VAR_NAME < VARINT_ONE_BYTE_LIMIT, "a name's length is one byte");

static int set_var_fits(const struct spop_writer *w, uint8_t scope, const char *name, size_t len,
                        size_t value_max)
{
    return name && scope <= SPOP_SCOPE_RES && len >= 1 && len <= SPOP_MAX_VAR_NAME &&
           (size_t)(w->end - w->p) >= 5 + len + value_max;
}

int spop_put_set_var_int(struct spop_writer *w, uint8_t scope, const char *name, size_t len,
                         int64_t v)
{
    if (!set_var_fits(w, scope, name, len, SPOP_VARINT_MAX_LEN)) {
        struct spop_data d = spop_int(v);
        return spop_put_set_var_len(w, scope, name, len, &d);
    }
    uint8_t *p = set_var_head(w->p, scope, name, len, SPOP_DATA_INT64);
    w->p = p + varint_encode(p, (uint64_t)v);
    return SPOP_OK;
}

int spop_put_set_var_str(struct spop_writer *w, uint8_t scope, const char *name, size_t len,
                         const char *s, size_t slen)
{
    if (slen >= VARINT_ONE_BYTE_LIMIT || (!s && slen) ||
        !set_var_fits(w, scope, name, len, 1 + slen)) {
        struct spop_data d = spop_string(s, slen);
        return spop_put_set_var_len(w, scope, name, len, &d);
    }
    uint8_t *p = set_var_head(w->p, scope, name, len, SPOP_DATA_STR);
    *p++ = (uint8_t)slen;
    if (slen)
        memcpy(p, s, slen);
    w->p = p + slen;
    return SPOP_OK;
}

int spop_put_unset_var(struct spop_writer *w, uint8_t scope, const char *name)
{
    return put_action_head(w, SPOP_ACT_UNSET_VAR, UNSET_VAR_NB_ARGS, scope, name, name_len(name));
}

/* Stricter than HAProxy (which stops at the first action it does not know):
 * this decoder checks what we send, so any surprise is an error. */
int spop_action_next(struct spop_reader *r, uint8_t *action, uint8_t *scope, struct spop_str *name,
                     struct spop_data *val)
{
    struct spop_reader c = *r;
    struct spop_data v;
    struct spop_str n;
    uint8_t act, nb, sc;

    if (at_end(&c))
        return 0;
    if (get_u8(&c, &act) < 0 || get_u8(&c, &nb) < 0 || get_u8(&c, &sc) < 0)
        return SPOP_EINVAL;
    if (sc > SPOP_SCOPE_RES || spop_get_str(&c, &n) < 0)
        return SPOP_EINVAL;
    if (act == SPOP_ACT_SET_VAR && nb == SET_VAR_NB_ARGS) {
        if (spop_get_data(&c, &v) < 0)
            return SPOP_EINVAL;
    } else if (act == SPOP_ACT_UNSET_VAR && nb == UNSET_VAR_NB_ARGS) {
        memset(&v, 0, sizeof(v));
        v.type = SPOP_DATA_NULL;
    } else {
        return SPOP_EINVAL;
    }
    *action = act;
    *scope = sc;
    *name = n;
    *val = v;
    *r = c;
    return 1;
}
