/* SPDX-License-Identifier: Apache-2.0 */
/* spop_conn.h - the agent side of one SPOP connection, without sockets.
 *
 * Bytes go in (spop_conn_in_space / spop_conn_in_commit), frames are parsed
 * and answered: HELLO negotiation, health checks, DISCONNECT, protocol errors
 * (an AGENT-DISCONNECT with the SPOE.txt status code, then close). NOTIFY
 * frames are handed to a callback that answers now or later with
 * spop_conn_ack(). Output accumulates in out[] for the caller to write; every
 * frame is appended whole, so one write(2) never splits a frame header from
 * its body unless the socket itself does.
 */
#ifndef SPOP_CONN_H
#define SPOP_CONN_H

#include <stddef.h>
#include <stdint.h>

#include "spop.h"

/* What is kept of a HAPROXY-DISCONNECT's message, for the log (SPOE.txt
 * allows 255 bytes). */
#define SPOP_CONN_PEER_MESSAGE_MAX 256

enum spop_conn_state {
    SPOP_CONN_HELLO = 0, /* waiting for HAPROXY-HELLO */
    SPOP_CONN_READY,     /* NOTIFYs flow */
    SPOP_CONN_CLOSING,   /* last frame queued: flush out[], then close */
};

struct spop_conn {
    int state;
    int pipelining;
    int healthcheck;
    uint32_t agent_max_frame; /* our offer */
    uint32_t max_frame;       /* negotiated (agent_max_frame until HELLO) */
    unsigned status;          /* status of the AGENT-DISCONNECT sent, if any */
    int disconnect_sent;      /* an AGENT-DISCONNECT was queued (with status) */
    int peer_disconnected;    /* HAProxy sent a HAPROXY-DISCONNECT: */
    unsigned peer_status;     /* its status-code (SPOP_ST_UNKNOWN when unreadable) */
    char peer_message[SPOP_CONN_PEER_MESSAGE_MAX]; /* its message, NUL-terminated, cut */
    uint64_t frames_in; /* whole frames parsed (a peer that sends none is idle) */
    int paused;         /* set by the NOTIFY callback: parse no further frame (they
                           stay in in[]) until cleared and in_commit is called again */
    uint8_t *in;        /* read buffer: SPOP_CONN_IN_INITIAL bytes, grown to
                           agent_max_frame + 4 once a read fills it */
    size_t in_len, in_cap;
    uint8_t *out; /* pending output */
    size_t out_off, out_len, out_cap;
};

/* NOTIFY callback. f and its payload are valid only during the call. Return 0
 * when the frame was taken (answered now or later with spop_conn_ack), or an
 * SPOE status code (e.g. SPOP_ST_INVALID, SPOP_ST_RES_ALLOC_ERR) to
 * disconnect. */
typedef int spop_notify_fn(void *ctx, struct spop_conn *c, const struct spop_frame *f);

/* Initialise with our max-frame-size. Returns 0 or -1 (out of memory). */
int spop_conn_init(struct spop_conn *c, uint32_t agent_max_frame);
void spop_conn_release(struct spop_conn *c);

/* The read buffer starts small: a connection that never gets past its HELLO
 * (a flood of them is capped by [agent] max_handshakes, but each one's
 * buffer is touched memory) costs this much, not a whole frame. HAProxy's
 * HELLO is about 100 bytes. */
#define SPOP_CONN_IN_INITIAL 1024

/* Grow the read buffer to its full size (agent_max_frame + 4). 0, or -1
 * when out of memory (the buffer is unchanged). */
int spop_conn_in_grow(struct spop_conn *c);

/* Where to read into and how much fits: a full buffer is grown first. A
 * room of 0 means out of memory (a full-size buffer always has room: every
 * whole frame in it has been parsed and consumed). */
static inline uint8_t *spop_conn_in_space(struct spop_conn *c, size_t *room)
{
    if (c->in_len == c->in_cap && spop_conn_in_grow(c) < 0) {
        *room = 0;
        return c->in + c->in_len;
    }
    *room = c->in_cap - c->in_len;
    return c->in + c->in_len;
}

/* Account n bytes read, then parse and answer every whole frame, or stop
 * after the frame whose NOTIFY callback set paused (the rest stays in in[];
 * clear paused and call again with n = 0 to go on). Returns 0 to go on, 1
 * when the connection must close once out[] is flushed. */
int spop_conn_in_commit(struct spop_conn *c, size_t n, spop_notify_fn *notify, void *ctx);

/* Queue an ACK for (stream_id, frame_id) whose actions are written by the
 * encode callback. Returns 0; 1 when the connection is closing (the ACK is
 * dropped); or -1 when out of memory / the actions do not fit in the
 * negotiated frame size (then an AGENT-DISCONNECT is queued instead and the
 * state becomes CLOSING). */
int spop_conn_ack(struct spop_conn *c, uint64_t stream_id, uint64_t frame_id,
                  int (*encode)(struct spop_writer *w, void *arg), void *arg);

/* Queue an AGENT-DISCONNECT with status and its standard message; state
 * becomes CLOSING. */
void spop_conn_disconnect(struct spop_conn *c, unsigned status);

/* Pending output and its consumption by the writer. NULL with *len 0 while
 * nothing was ever queued (out is allocated lazily). */
static inline const uint8_t *spop_conn_out(const struct spop_conn *c, size_t *len)
{
    *len = c->out_len - c->out_off;
    return c->out ? c->out + c->out_off : NULL;
}
void spop_conn_out_consumed(struct spop_conn *c, size_t n);

#endif
