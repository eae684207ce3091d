/* SPDX-License-Identifier: Apache-2.0 */
/* spop_handshake.c - SPOP 2.0 codec: the handshake frames (HAPROXY-HELLO,
 * AGENT-HELLO, the DISCONNECTs both ways) and the status texts.
 *
 * Pure, like spop.c: libc only, no allocation, no output; built on spop.c's
 * kv-lists and frames.
 */
#include "spop.h"

#include <string.h>

#include "spop_int.h"

/* The only SPOP version we speak, and its major for matching HAProxy's list. */
#define SPOP_VERSION "2.0"
#define SPOP_VERSION_MAJOR 2
#define VERSION_MAX_DIGITS 9 /* keeps "Major.Minor" parsing overflow-free */

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
static int put_kv_frame(struct spop_writer *w, uint8_t type, const struct kv_item *items, size_t n)
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
        {"version", spop_string(SPOP_VERSION, strlen(SPOP_VERSION))},
        {"max-frame-size", spop_uint(max_frame_size)},
        {"capabilities", spop_string(caps, strlen(caps))},
    };

    return put_kv_frame(w, SPOP_FRAME_AGENT_HELLO, items, sizeof(items) / sizeof(items[0]));
}

/* message may be NULL for "". The cut at SPOP_MAX_STATUS_MSG bytes may split
 * a UTF-8 sequence; HAProxy only logs the text. */
int spop_agent_disconnect_encode(struct spop_writer *w, unsigned status, const char *message)
{
    const char *msg = message ? message : "";
    const struct kv_item items[] = {
        {"status-code", spop_uint(status)},
        {"message", spop_string(msg, bounded_len(msg, SPOP_MAX_STATUS_MSG))},
    };

    return put_kv_frame(w, SPOP_FRAME_AGENT_DISCONNECT, items, sizeof(items) / sizeof(items[0]));
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
