/* spop.c - SPOP 2.0 codec: varints, typed data, kv-lists, frames, NOTIFY
 * messages and ACK actions.
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

/* Peers varint: values below 240 are one byte; longer ones carry 4 bits in
 * the first byte, then 7 bits per byte, the high bit meaning "more follows". */
#define VARINT_ONE_BYTE_LIMIT 240
#define VARINT_FIRST_MARK 0xf0
#define VARINT_FIRST_BITS 4
#define VARINT_GROUP_BITS 7
#define VARINT_MORE 0x80

#define FLAGS_SIZE 4
#define IPV4_SIZE 4
#define IPV6_SIZE 16
#define FRAME_HEADER_FIXED (SPOP_FRAME_LEN_SIZE + 1 + FLAGS_SIZE) /* prefix, type, flags */

/* The only SPOP version we speak, and its major for matching HAProxy's list. */
#define SPOP_VERSION "2.0"
#define SPOP_VERSION_MAJOR 2
#define VERSION_MAX_DIGITS 9 /* keeps "Major.Minor" parsing overflow-free */

#define SET_VAR_NB_ARGS 3
#define UNSET_VAR_NB_ARGS 2

/* ---- cursors ------------------------------------------------------------- */

/* A reader over n bytes at p; p may be NULL only when n is 0. */
static struct spop_reader reader_of(const uint8_t *p, size_t n)
{
    struct spop_reader r;

    r.p = p;
    r.end = p ? p + n : p;
    return r;
}

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

/* Encode v into out, which must hold SPOP_VARINT_MAX_LEN bytes; returns the
 * length. Encoding to a scratch buffer first lets callers reserve the exact
 * size at once, so a short writer never gets a partial varint. */
static size_t varint_encode(uint8_t *out, uint64_t v)
{
    size_t n = 0;

    if (v < VARINT_ONE_BYTE_LIMIT) {
        out[n++] = (uint8_t)v;
        return n;
    }
    out[n++] = (uint8_t)(v | VARINT_FIRST_MARK);
    v = (v - VARINT_ONE_BYTE_LIMIT) >> VARINT_FIRST_BITS;
    while (v >= VARINT_MORE) {
        out[n++] = (uint8_t)(v | VARINT_MORE);
        v = (v - VARINT_MORE) >> VARINT_GROUP_BITS;
    }
    out[n++] = (uint8_t)v;
    return n;
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
    return (struct spop_data){ .type = SPOP_DATA_BOOL, .u.sint = b != 0 };
}

struct spop_data spop_int(int64_t v)
{
    return (struct spop_data){ .type = SPOP_DATA_INT64, .u.sint = v };
}

struct spop_data spop_uint(uint32_t v)
{
    return (struct spop_data){ .type = SPOP_DATA_UINT32, .u.uint = v };
}

struct spop_data spop_string(const char *s, size_t len)
{
    return (struct spop_data){ .type = SPOP_DATA_STR, .u.buf = { s, len } };
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

/* strlen() that stops looking after max bytes (strnlen() is not C11). */
static size_t bounded_len(const char *s, size_t max)
{
    size_t n = 0;

    while (n < max && s[n])
        n++;
    return n;
}

static int str_eq(const struct spop_str *s, const char *lit)
{
    size_t n = strlen(lit);

    return s->len == n && (n == 0 || memcmp(s->ptr, lit, n) == 0);
}

static int is_blank(char c)
{
    return c == ' ' || c == '\t';
}

static int is_digit(char c)
{
    return c >= '0' && c <= '9';
}

/* Next token of a comma-separated list, blanks around it dropped. Returns 0
 * once the list is used up; empty tokens (",,") come out empty. */
static int next_token(struct spop_str *list, struct spop_str *tok)
{
    const char *p, *end, *comma, *tend;

    if (list->len == 0)
        return 0;
    p = list->ptr;
    end = p + list->len;
    comma = memchr(p, ',', list->len);
    tend = comma ? comma : end;
    while (p < tend && is_blank(*p))
        p++;
    while (tend > p && is_blank(tend[-1]))
        tend--;
    tok->ptr = p;
    tok->len = (size_t)(tend - p);
    list->ptr = comma ? comma + 1 : end;
    list->len = (size_t)(end - list->ptr);
    return 1;
}

/* Parse "Major" or "Major.Minor" (1 to VERSION_MAX_DIGITS digits each).
 * Returns 0 and sets *major, or -1 on anything else. */
static int version_major(const struct spop_str *tok, unsigned long *major)
{
    size_t i = 0, start;
    unsigned long maj = 0;

    while (i < tok->len && i < VERSION_MAX_DIGITS && is_digit(tok->ptr[i]))
        maj = maj * 10 + (unsigned long)(tok->ptr[i++] - '0');
    if (i == 0)
        return -1;
    if (i < tok->len) {
        if (tok->ptr[i++] != '.')
            return -1;
        start = i;
        while (i < tok->len && i - start < VERSION_MAX_DIGITS && is_digit(tok->ptr[i]))
            i++;
        if (i == start || i != tok->len)
            return -1;
    }
    *major = maj;
    return 0;
}

/* A malformed entry is skipped, not fatal: the list may hold versions from
 * the future whose syntax we cannot know. */
static int versions_accept(struct spop_str list)
{
    struct spop_str tok;
    unsigned long major;

    while (next_token(&list, &tok))
        if (version_major(&tok, &major) == 0 && major == SPOP_VERSION_MAJOR)
            return 1;
    return 0;
}

static void parse_capabilities(struct spop_str list, struct spop_hello *h)
{
    struct spop_str tok;

    h->pipelining = h->async = h->fragmentation = 0;
    while (next_token(&list, &tok)) {
        if (str_eq(&tok, "pipelining"))
            h->pipelining = 1;
        else if (str_eq(&tok, "async"))
            h->async = 1;
        else if (str_eq(&tok, "fragmentation"))
            h->fragmentation = 1;
    }
}

/* The spec says UINT32, but HAProxy reads any integer type back as int64, so
 * a peer might send any of them; only negatives and non-integers are wrong. */
static int data_to_uint(const struct spop_data *d, uint64_t *v)
{
    switch (d->type) {
    case SPOP_DATA_UINT32:
    case SPOP_DATA_UINT64:
        *v = d->u.uint;
        return SPOP_OK;
    case SPOP_DATA_INT32:
    case SPOP_DATA_INT64:
        if (d->u.sint < 0)
            return SPOP_EINVAL;
        *v = (uint64_t)d->u.sint;
        return SPOP_OK;
    default:
        return SPOP_EINVAL;
    }
}

/* An absent engine-id is left as { NULL, 0 }; a present empty one points into
 * the payload. A repeated item overrides the earlier one. The frame type is
 * not checked: dispatching on it is the caller's job. */
int spop_hello_decode(const struct spop_frame *f, struct spop_hello *h)
{
    struct spop_reader r = reader_of(f->payload, f->payload_len);
    struct spop_hello out;
    struct spop_str key;
    struct spop_data val;
    int rc;

    memset(&out, 0, sizeof(out));
    while ((rc = spop_kv_next(&r, &key, &val)) == 1) {
        if (str_eq(&key, "supported-versions")) {
            if (val.type != SPOP_DATA_STR)
                return SPOP_EINVAL;
            out.has_version = 1;
            out.version_ok = versions_accept(val.u.buf);
        } else if (str_eq(&key, "max-frame-size")) {
            if (data_to_uint(&val, &out.max_frame_size) < 0)
                return SPOP_EINVAL;
            out.has_max_frame_size = 1;
        } else if (str_eq(&key, "capabilities")) {
            if (val.type != SPOP_DATA_STR)
                return SPOP_EINVAL;
            out.has_capabilities = 1;
            parse_capabilities(val.u.buf, &out);
        } else if (str_eq(&key, "healthcheck")) {
            if (val.type != SPOP_DATA_BOOL)
                return SPOP_EINVAL;
            out.healthcheck = (int)val.u.sint;
        } else if (str_eq(&key, "engine-id")) {
            if (val.type != SPOP_DATA_STR)
                return SPOP_EINVAL;
            out.engine_id = val.u.buf;
        }
    }
    if (rc < 0)
        return rc;
    *h = out;
    return SPOP_OK;
}

/* Works for HAPROXY-DISCONNECT and AGENT-DISCONNECT alike. Missing items
 * leave status 0 and a { NULL, 0 } message. */
int spop_disconnect_decode(const struct spop_frame *f, struct spop_disconnect *d)
{
    struct spop_reader r = reader_of(f->payload, f->payload_len);
    struct spop_disconnect out;
    struct spop_str key;
    struct spop_data val;
    int rc;

    memset(&out, 0, sizeof(out));
    while ((rc = spop_kv_next(&r, &key, &val)) == 1) {
        if (str_eq(&key, "status-code")) {
            if (data_to_uint(&val, &out.status_code) < 0)
                return SPOP_EINVAL;
        } else if (str_eq(&key, "message")) {
            if (val.type != SPOP_DATA_STR)
                return SPOP_EINVAL;
            out.message = val.u.buf;
        }
    }
    if (rc < 0)
        return rc;
    *d = out;
    return SPOP_OK;
}

struct kv_item {
    const char *key;
    struct spop_data val;
};

/* A whole frame whose payload is a kv-list, as the handshake frames are. */
static int put_kv_frame(struct spop_writer *w, uint8_t type, const struct kv_item *items,
                        size_t n)
{
    uint8_t *save = w->p, *start;
    int rc;

    rc = spop_frame_begin(w, type, SPOP_FLAG_FIN, 0, 0, &start);
    for (size_t i = 0; rc == SPOP_OK && i < n; i++)
        rc = spop_put_kv(w, items[i].key, &items[i].val);
    if (rc == SPOP_OK)
        rc = spop_frame_end(w, start);
    if (rc < 0)
        w->p = save;
    return rc;
}

/* capabilities may be NULL for "": the item itself is always sent, because
 * HAProxy 3.1's health check fails without it. */
int spop_agent_hello_encode(struct spop_writer *w, uint32_t max_frame_size,
                            const char *capabilities)
{
    const char *caps = capabilities ? capabilities : "";
    const struct kv_item items[] = {
        { "version", spop_string(SPOP_VERSION, strlen(SPOP_VERSION)) },
        { "max-frame-size", spop_uint(max_frame_size) },
        { "capabilities", spop_string(caps, strlen(caps)) },
    };

    return put_kv_frame(w, SPOP_FRAME_AGENT_HELLO, items, sizeof(items) / sizeof(items[0]));
}

/* message may be NULL for "". The cut at SPOP_MAX_STATUS_MSG bytes may split
 * a UTF-8 sequence; HAProxy only logs the text. */
int spop_agent_disconnect_encode(struct spop_writer *w, unsigned status, const char *message)
{
    const char *msg = message ? message : "";
    const struct kv_item items[] = {
        { "status-code", spop_uint(status) },
        { "message", spop_string(msg, bounded_len(msg, SPOP_MAX_STATUS_MSG)) },
    };

    return put_kv_frame(w, SPOP_FRAME_AGENT_DISCONNECT, items, sizeof(items) / sizeof(items[0]));
}

/* ---- NOTIFY messages and ACK actions ------------------------------------- */

/* *m is filled in place (it is ~10 KB, too big to stage on the stack) and is
 * meaningless after an error; m->nargs is reset first so that a caller that
 * ignores the error at least sees no arguments. */
int spop_message_next(struct spop_reader *r, struct spop_message *m)
{
    struct spop_reader c = *r;
    uint8_t nargs;

    m->nargs = 0;
    if (at_end(&c))
        return 0;
    if (spop_get_str(&c, &m->name) < 0 || get_u8(&c, &nargs) < 0)
        return SPOP_EINVAL;
    for (unsigned i = 0; i < nargs; i++) {
        struct spop_arg *a = &m->args[i];

        if (spop_get_str(&c, &a->name) < 0 || spop_get_data(&c, &a->value) < 0)
            return SPOP_EINVAL;
    }
    m->nargs = nargs;
    *r = c;
    return 1;
}

/* Common head of both actions, all or nothing. The name limit keeps
 * HAProxy's 64-byte "scope.prefix.name" buffer from truncating it. */
static int put_action_head(struct spop_writer *w, uint8_t action, uint8_t nb_args,
                           uint8_t scope, const char *name, size_t len)
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

/* A NULL val is allowed on the wire: HAProxy then unsets the variable. */
/* The longest name a caller may pass, plus one: longer is SPOP_EINVAL. */
static size_t name_len(const char *name)
{
    return name ? bounded_len(name, SPOP_MAX_VAR_NAME + 1) : 0;
}

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

int spop_put_unset_var(struct spop_writer *w, uint8_t scope, const char *name)
{
    return put_action_head(w, SPOP_ACT_UNSET_VAR, UNSET_VAR_NB_ARGS, scope, name,
                           name_len(name));
}

/* Stricter than HAProxy (which stops at the first action it does not know):
 * this decoder checks what we send, so any surprise is an error. */
int spop_action_next(struct spop_reader *r, uint8_t *action, uint8_t *scope,
                     struct spop_str *name, struct spop_data *val)
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

/* The texts of SPOE.txt section 3.5, indexed by status code. */
static const char *const status_texts[] = {
    [SPOP_ST_NONE] = "normal",
    [SPOP_ST_IO] = "I/O error",
    [SPOP_ST_TIMEOUT] = "a timeout occurred",
    [SPOP_ST_TOO_BIG] = "frame is too big",
    [SPOP_ST_INVALID] = "invalid frame received",
    [SPOP_ST_NO_VSN] = "version value not found",
    [SPOP_ST_NO_FRAME_SIZE] = "max-frame-size value not found",
    [SPOP_ST_NO_CAP] = "capabilities value not found",
    [SPOP_ST_BAD_VSN] = "unsupported version",
    [SPOP_ST_BAD_FRAME_SIZE] = "max-frame-size too big or too small",
    [SPOP_ST_FRAG_NOT_SUPPORTED] = "payload fragmentation is not supported",
    [SPOP_ST_INTERLACED_FRAMES] = "invalid interlaced frames",
    [SPOP_ST_FRAMEID_NOTFOUND] = "frame-id not found",
    [SPOP_ST_RES_ALLOC_ERR] = "resource allocation error",
};

const char *spop_status_str(unsigned status)
{
    if (status == SPOP_ST_UNKNOWN)
        return "an unknown error occurred";
    if (status < sizeof(status_texts) / sizeof(status_texts[0]))
        return status_texts[status];
    return "unknown";
}
