/* SPDX-License-Identifier: Apache-2.0 */
/* noop_agent.c - the reference of `make bench`: an SPOP agent that decides
 * nothing. It answers every NOTIFY at once, from one thread, with the
 * project's own SPOP codec (spop_conn.h) and libev, and no rule, bucket,
 * lease, metric or log on the way:
 *
 *   noop_agent ADDR:PORT [blocked|full]
 *
 * blocked (the default): an ACK that sets txn.<prefix>.blocked to false,
 * what a do-nothing agent answers. full: the seven variables an allowed
 * decision of spoa-ratelimit sets (blocked, rule, limit, policy, remaining,
 * reset, ratelimit; doc/haproxy.md), with fixed values: the same answer
 * without the deciding, so that what HAProxy and the load generator do with
 * a bigger answer is told apart from what the decision costs. Not a test: it
 * asserts nothing. SIGTERM or SIGINT stops it. */
#include <errno.h>
#include <ev.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/net.h"
#include "spop/spop_conn.h"

#define MAX_FRAME 16380

struct conn {
    ev_io rio, wio;
    struct spop_conn sp;
    int closing;
};

static int full;

#define VAR(s) s, sizeof(s) - 1
#define TXN SPOP_SCOPE_TXN

static int encode(struct spop_writer *w, void *arg)
{
    struct spop_data no = spop_bool(0);
    int ret;

    (void)arg;
    if ((ret = spop_put_set_var_len(w, TXN, VAR("blocked"), &no)) < 0 || !full)
        return ret;
    if ((ret = spop_put_set_var_str(w, TXN, VAR("rule"), VAR("bench"))) < 0 ||
        (ret = spop_put_set_var_int(w, TXN, VAR("limit"), 1000000)) < 0 ||
        (ret = spop_put_set_var_str(w, TXN, VAR("policy"), VAR("\"bench\";q=1000000;w=1"))) < 0 ||
        (ret = spop_put_set_var_int(w, TXN, VAR("remaining"), 999999)) < 0 ||
        (ret = spop_put_set_var_int(w, TXN, VAR("reset"), 1)) < 0)
        return ret;
    return spop_put_set_var_str(w, TXN, VAR("ratelimit"), VAR("\"bench\";r=999999;t=1"));
}

static int on_notify(void *ctx, struct spop_conn *sp, const struct spop_frame *f)
{
    (void)ctx;
    return spop_conn_ack(sp, f->stream_id, f->frame_id, encode, NULL) < 0 ? SPOP_ST_RES_ALLOC_ERR
                                                                          : 0;
}

static void conn_close(struct ev_loop *loop, struct conn *c)
{
    ev_io_stop(loop, &c->rio);
    ev_io_stop(loop, &c->wio);
    close(c->rio.fd);
    spop_conn_release(&c->sp);
    free(c);
}

/* Write what is queued; 1 when the connection is gone. */
static int conn_flush(struct ev_loop *loop, struct conn *c)
{
    const uint8_t *p;
    size_t len;

    while ((p = spop_conn_out(&c->sp, &len)), len > 0) {
        ssize_t n = send(c->rio.fd, p, len, MSG_NOSIGNAL);
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            ev_io_start(loop, &c->wio);
            return 0;
        }
        if (n <= 0) {
            conn_close(loop, c);
            return 1;
        }
        spop_conn_out_consumed(&c->sp, (size_t)n);
    }
    ev_io_stop(loop, &c->wio);
    if (c->closing) {
        conn_close(loop, c);
        return 1;
    }
    return 0;
}

static void write_cb(struct ev_loop *loop, ev_io *w, int revents)
{
    (void)revents;
    conn_flush(loop, (struct conn *)((char *)w - offsetof(struct conn, wio)));
}

static void read_cb(struct ev_loop *loop, ev_io *w, int revents)
{
    struct conn *c = (struct conn *)w;
    size_t room;
    ssize_t n;

    (void)revents;
    for (;;) {
        uint8_t *p = spop_conn_in_space(&c->sp, &room);
        if (room == 0) {
            conn_close(loop, c);
            return;
        }
        n = recv(w->fd, p, room, 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            break;
        if (n <= 0) {
            conn_close(loop, c);
            return;
        }
        if (spop_conn_in_commit(&c->sp, (size_t)n, on_notify, NULL)) {
            c->closing = 1;
            ev_io_stop(loop, &c->rio);
            break;
        }
        if ((size_t)n < room)
            break;
    }
    conn_flush(loop, c);
}

static void accept_cb(struct ev_loop *loop, ev_io *w, int revents)
{
    (void)revents;
    for (;;) {
        int fd = accept4(w->fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC), one = 1;
        if (fd < 0)
            return;
        struct conn *c = calloc(1, sizeof(*c));
        if (!c || spop_conn_init(&c->sp, MAX_FRAME) < 0) {
            free(c);
            close(fd);
            continue;
        }
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        ev_io_init(&c->rio, read_cb, fd, EV_READ);
        ev_io_init(&c->wio, write_cb, fd, EV_WRITE);
        ev_io_start(loop, &c->rio);
    }
}

static void stop_cb(struct ev_loop *loop, ev_signal *w, int revents)
{
    (void)w;
    (void)revents;
    ev_break(loop, EVBREAK_ALL);
}

int main(int argc, char **argv)
{
    struct ev_loop *loop = EV_DEFAULT;
    ev_io lio;
    ev_signal term, intr;
    struct net_addr addr;
    char err[512];
    int fd;

    if (argc < 2 || argc > 3 ||
        (argc == 3 && strcmp(argv[2], "blocked") != 0 && strcmp(argv[2], "full") != 0)) {
        fprintf(stderr, "usage: %s ADDR:PORT [blocked|full]\n", argv[0]);
        return 2;
    }
    full = argc == 3 && strcmp(argv[2], "full") == 0;
    if (net_parse_addr(argv[1], 0, &addr) < 0) {
        fprintf(stderr, "%s: not an address: %s\n", argv[0], argv[1]);
        return 2;
    }
    if ((fd = net_listen(&addr, 1024, err, sizeof(err))) < 0) {
        fprintf(stderr, "%s: %s\n", argv[0], err);
        return 1;
    }
    ev_io_init(&lio, accept_cb, fd, EV_READ);
    ev_io_start(loop, &lio);
    ev_signal_init(&term, stop_cb, SIGTERM);
    ev_signal_init(&intr, stop_cb, SIGINT);
    ev_signal_start(loop, &term);
    ev_signal_start(loop, &intr);
    ev_run(loop, 0);
    close(fd);
    return 0;
}
