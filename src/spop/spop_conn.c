/* SPDX-License-Identifier: Apache-2.0 */
/* spop_conn.c - SPOP connection state machine (no sockets). */
#include "spop_conn.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "metrics/metrics.h"

#define OUT_INITIAL 4096

/* The counters are indexed by HAProxy's frame types and SPOE's status codes
 * as they are on the wire. */
_Static_assert((int)METRICS_FRAME_HELLO == SPOP_FRAME_HAPROXY_HELLO &&
                   (int)METRICS_FRAME_DISCONNECT == SPOP_FRAME_HAPROXY_DISCONNECT &&
                   (int)METRICS_FRAME_NOTIFY == SPOP_FRAME_NOTIFY &&
                   (int)METRICS_FRAMES == SPOP_FRAME_NOTIFY + 1,
               "frames_in[] by enum spop_frame_type");
_Static_assert(METRICS_STATUSES == SPOP_ST_RES_ALLOC_ERR + 1,
               "protocol_errors[] by enum spop_status");

int spop_conn_init(struct spop_conn *c, uint32_t agent_max_frame)
{
    memset(c, 0, sizeof(*c));
    c->agent_max_frame = agent_max_frame;
    c->max_frame = agent_max_frame;
    c->in_cap = (size_t)agent_max_frame + SPOP_FRAME_LEN_SIZE;
    if (c->in_cap > SPOP_CONN_IN_INITIAL)
        c->in_cap = SPOP_CONN_IN_INITIAL;
    c->in = malloc(c->in_cap);
    if (!c->in)
        return -1;
    return 0;
}

int spop_conn_in_grow(struct spop_conn *c)
{
    size_t full = (size_t)c->agent_max_frame + SPOP_FRAME_LEN_SIZE;
    uint8_t *p;

    if (c->in_cap >= full)
        return 0;
    p = realloc(c->in, full);
    if (!p)
        return -1;
    c->in = p;
    c->in_cap = full;
    return 0;
}

void spop_conn_release(struct spop_conn *c)
{
    free(c->in);
    free(c->out);
    c->in = c->out = NULL;
    c->in_len = c->in_cap = c->out_len = c->out_off = c->out_cap = 0;
}

/* Make room for n more bytes of output. */
static int out_reserve(struct spop_conn *c, size_t n)
{
    if (c->out_off > 0 && c->out_off == c->out_len)
        c->out_off = c->out_len = 0;
    if (c->out_len + n <= c->out_cap)
        return 0;
    if (c->out_off > 0) {
        memmove(c->out, c->out + c->out_off, c->out_len - c->out_off);
        c->out_len -= c->out_off;
        c->out_off = 0;
        if (c->out_len + n <= c->out_cap)
            return 0;
    }
    size_t cap = c->out_cap ? c->out_cap : OUT_INITIAL;
    while (cap < c->out_len + n)
        cap *= 2;
    uint8_t *p = realloc(c->out, cap);
    if (!p)
        return -1;
    c->out = p;
    c->out_cap = cap;
    return 0;
}

void spop_conn_out_consumed(struct spop_conn *c, size_t n)
{
    c->out_off += n;
    if (c->out_off >= c->out_len)
        c->out_off = c->out_len = 0;
}

void spop_conn_disconnect(struct spop_conn *c, unsigned status)
{
    struct spop_writer w;

    if (c->state == SPOP_CONN_CLOSING)
        return;
    c->state = SPOP_CONN_CLOSING;
    c->status = status;
    c->disconnect_sent = 1;
    if (status > 0)
        METRIC_INC(protocol_errors[status < METRICS_STATUSES ? status : 0]);
    /* 4 + 7 + two kv items with a message of at most 255 bytes */
    if (out_reserve(c, 512) < 0)
        return; /* nothing more to say: the close alone tells HAProxy */
    w.p = c->out + c->out_len;
    w.end = c->out + c->out_cap;
    if (spop_agent_disconnect_encode(&w, status, spop_status_str(status)) == 0)
        c->out_len = (size_t)(w.p - c->out);
}

int spop_conn_ack(struct spop_conn *c, uint64_t stream_id, uint64_t frame_id,
                  int (*encode)(struct spop_writer *w, void *arg), void *arg)
{
    struct spop_writer w;
    uint8_t *start;
    size_t room = (size_t)c->max_frame + SPOP_FRAME_LEN_SIZE;

    if (c->state == SPOP_CONN_CLOSING)
        return 1; /* HAProxy will not read it: dropped */
    if (out_reserve(c, room) < 0) {
        spop_conn_disconnect(c, SPOP_ST_RES_ALLOC_ERR);
        return -1;
    }
    w.p = c->out + c->out_len;
    w.end = w.p + room;
    if (spop_frame_begin(&w, SPOP_FRAME_ACK, SPOP_FLAG_FIN, stream_id, frame_id, &start) < 0 ||
        encode(&w, arg) < 0 || spop_frame_end(&w, start) < 0) {
        spop_conn_disconnect(c, SPOP_ST_TOO_BIG);
        return -1;
    }
    c->out_len = (size_t)(w.p - c->out);
    return 0;
}

/* HAPROXY-HELLO: check it, negotiate, answer. Returns a status code (> 0) on
 * refusal, 0 when accepted. */
static unsigned handle_hello(struct spop_conn *c, const struct spop_frame *f)
{
    struct spop_hello h;
    struct spop_writer w;
    uint32_t max;

    if (spop_hello_decode(f, &h) < 0)
        return SPOP_ST_INVALID;
    if (!h.has_version)
        return SPOP_ST_NO_VSN;
    if (!h.version_ok)
        return SPOP_ST_BAD_VSN;
    if (!h.has_max_frame_size)
        return SPOP_ST_NO_FRAME_SIZE;
    if (h.max_frame_size < SPOP_MIN_FRAME_SIZE)
        return SPOP_ST_BAD_FRAME_SIZE;
    if (!h.has_capabilities)
        return SPOP_ST_NO_CAP;

    max = h.max_frame_size < c->agent_max_frame ? (uint32_t)h.max_frame_size : c->agent_max_frame;
    if (out_reserve(c, 256) < 0)
        return SPOP_ST_RES_ALLOC_ERR;
    w.p = c->out + c->out_len;
    w.end = c->out + c->out_cap;
    if (spop_agent_hello_encode(&w, max, h.pipelining ? "pipelining" : "") < 0)
        return SPOP_ST_RES_ALLOC_ERR;
    c->out_len = (size_t)(w.p - c->out);
    c->max_frame = max;
    c->pipelining = h.pipelining;
    c->healthcheck = h.healthcheck;
    c->state = h.healthcheck ? SPOP_CONN_CLOSING : SPOP_CONN_READY;
    return 0;
}

/* Keep what a HAPROXY-DISCONNECT says, for the server's log. */
static void peer_disconnect(struct spop_conn *c, const struct spop_frame *f)
{
    struct spop_disconnect d;
    size_t n;

    c->peer_disconnected = 1;
    if (spop_disconnect_decode(f, &d) != SPOP_OK) {
        c->peer_status = SPOP_ST_UNKNOWN;
        snprintf(c->peer_message, sizeof(c->peer_message), "(unreadable DISCONNECT frame)");
        return;
    }
    c->peer_status = d.status_code > 0xffffffffu ? SPOP_ST_UNKNOWN : (unsigned)d.status_code;
    n = d.message.len < sizeof(c->peer_message) - 1 ? d.message.len : sizeof(c->peer_message) - 1;
    if (n)
        memcpy(c->peer_message, d.message.ptr, n);
    c->peer_message[n] = '\0';
}

/* One whole frame. Returns 0 to go on, 1 to close. */
static int handle_frame(struct spop_conn *c, const struct spop_frame *f, spop_notify_fn *notify,
                        void *ctx)
{
    unsigned st;

    METRIC_INC_LOCAL(frames_in[f->type < METRICS_FRAMES ? f->type : METRICS_FRAME_OTHER]);
    c->frames_in++;
    /* We never negotiate fragmentation: every frame must be whole. */
    if (!(f->flags & SPOP_FLAG_FIN) &&
        (f->type == SPOP_FRAME_HAPROXY_HELLO || f->type == SPOP_FRAME_NOTIFY ||
         f->type == SPOP_FRAME_HAPROXY_DISCONNECT)) {
        spop_conn_disconnect(c, SPOP_ST_FRAG_NOT_SUPPORTED);
        return 1;
    }

    if (c->state == SPOP_CONN_HELLO) {
        if (f->type != SPOP_FRAME_HAPROXY_HELLO) {
            spop_conn_disconnect(c, SPOP_ST_INVALID);
            return 1;
        }
        st = handle_hello(c, f);
        if (st) {
            spop_conn_disconnect(c, st);
            return 1;
        }
        return c->state == SPOP_CONN_CLOSING;
    }

    switch (f->type) {
    case SPOP_FRAME_NOTIFY:
        st = (unsigned)notify(ctx, c, f);
        if (st) {
            spop_conn_disconnect(c, st);
            return 1;
        }
        return c->state == SPOP_CONN_CLOSING;
    case SPOP_FRAME_HAPROXY_DISCONNECT:
        peer_disconnect(c, f);
        spop_conn_disconnect(c, SPOP_ST_NONE);
        return 1;
    case SPOP_FRAME_HAPROXY_HELLO:
        spop_conn_disconnect(c, SPOP_ST_INVALID);
        return 1;
    default:
        return 0; /* unknown frame types are skipped */
    }
}

int spop_conn_in_commit(struct spop_conn *c, size_t n, spop_notify_fn *notify, void *ctx)
{
    size_t off = 0;
    int done = 0;

    c->in_len += n;
    /* A read that filled the buffer past the HELLO: a busy peer (pipelined
     * NOTIFYs) reads into a whole frame's room from now on, one recv() per
     * batch rather than one per SPOP_CONN_IN_INITIAL bytes. Out of memory
     * keeps the small buffer. */
    if (n > 0 && c->in_len == c->in_cap && c->state == SPOP_CONN_READY)
        (void)spop_conn_in_grow(c);
    while (!done && c->state != SPOP_CONN_CLOSING && !c->paused) {
        struct spop_frame f;
        size_t used;
        int ret = spop_frame_decode(c->in + off, c->in_len - off, c->max_frame, &f, &used);

        if (ret == SPOP_EAGAIN)
            break;
        if (ret == SPOP_ETOOBIG) {
            spop_conn_disconnect(c, SPOP_ST_TOO_BIG);
            done = 1;
            break;
        }
        if (ret < 0) {
            spop_conn_disconnect(c, SPOP_ST_INVALID);
            done = 1;
            break;
        }
        done = handle_frame(c, &f, notify, ctx);
        off += used;
    }
    if (c->state == SPOP_CONN_CLOSING) {
        c->in_len = 0;
        return 1;
    }
    /* Compact: frame views are dead now (the callback copied what it kept). */
    if (off > 0) {
        memmove(c->in, c->in + off, c->in_len - off);
        c->in_len -= off;
    }
    return done;
}
