/* httpd.c - GET /metrics and GET /top on the main loop; other paths go to
 * the owner's handler, whose answer may come later (struct httpd_req). */
#include "httpd.h"

#include <arpa/inet.h>
#include <errno.h>
#include <ev.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/log.h"
#include "core/net.h"
#include "core/util.h"
#include "metrics/metrics.h"
#include "server/accept_guard.h"

#define HTTP_REQ_MAX 8192
#define HTTP_TIMEOUT 5.0  /* a connection's whole life: request in, response out */
#define HTTP_MAX_CONNS 64 /* at once; fewer under a small fd limit (conns_cap) */
#define REFUSE_LOG_EVERY_S 10.0

struct http_conn {
    struct httpd *h;
    int fd;
    ev_io io;
    ev_timer timer;
    char req[HTTP_REQ_MAX];
    size_t req_len;
    char *resp; /* header + body, malloc'd */
    size_t resp_len, resp_off;
    struct httpd_req *waiting; /* the handler's answer is still to come */
    int routing;               /* inside route(): an answer is only stored */
    struct sockaddr_storage peer;
    struct http_conn *prev, *next;
};

/* A handler's answer may come after its connection went away: the record
 * outlives it, the connection only clears the pointer back to itself (the
 * rule for callbacks that cannot be cancelled). */
struct httpd_req {
    struct http_conn *c; /* NULL once the connection is gone */
    int head;            /* HEAD: headers only */
};

struct httpd {
    struct ev_loop *loop;
    int fd;
    ev_io accept_io;
    struct accept_guard guard;
    struct http_conn *conns;
    unsigned nconns, max_conns;
    struct net_cidr *allow; /* a copy; none: any peer */
    size_t nallow;
    httpd_handler *handler;
    void *handler_ctx;
};

static struct log_gate refuse_gate;
static struct log_gate evict_gate;

static void http_conn_free(struct http_conn *c)
{
    struct httpd *h = c->h;
    ev_io_stop(h->loop, &c->io);
    ev_timer_stop(h->loop, &c->timer);
    close(c->fd);
    if (c->prev)
        c->prev->next = c->next;
    else
        h->conns = c->next;
    if (c->next)
        c->next->prev = c->prev;
    h->nconns--;
    if (c->waiting)
        c->waiting->c = NULL; /* the handler's answer will find no one */
    free(c->resp);
    free(c);
}

/* headers: extra header lines, each ending in CRLF, or NULL. body is freed;
 * HEAD: only the header is kept. */
static void set_response(struct http_conn *c, const char *status, const char *ctype,
                         const char *headers, char *body, size_t body_len, int head)
{
    char hdr[512];
    int n = snprintf(hdr, sizeof(hdr),
                     "HTTP/1.1 %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n%s"
                     "Connection: close\r\n\r\n",
                     status, ctype, body_len, headers ? headers : "");
    if (n < 0 || (size_t)n >= sizeof(hdr) || !body) {
        free(body);
        return;
    }
    size_t copy = head ? 0 : body_len; /* HEAD: Content-Length as for GET */
    c->resp = malloc((size_t)n + copy);
    if (c->resp) {
        memcpy(c->resp, hdr, (size_t)n);
        if (copy)
            memcpy(c->resp + n, body, copy);
        c->resp_len = (size_t)n + copy;
    }
    free(body);
}

static void start_writing(struct http_conn *c)
{
    ev_io_stop(c->h->loop, &c->io);
    ev_io_set(&c->io, c->fd, EV_WRITE);
    ev_io_start(c->h->loop, &c->io);
}

void httpd_reply(struct httpd_req *req, const char *status, const char *ctype, const char *headers,
                 char *body, size_t len)
{
    struct http_conn *c = req->c;
    int head = req->head;

    free(req);
    if (!c) {
        free(body);
        return;
    }
    c->waiting = NULL;
    set_response(c, status, ctype, headers, body, len, head);
    if (c->routing)
        return; /* route()'s caller goes on */
    if (!c->resp) {
        http_conn_free(c);
        return;
    }
    start_writing(c);
}

void httpd_set_handler(struct httpd *h, httpd_handler *fn, void *ctx)
{
    if (!h)
        return;
    h->handler = fn;
    h->handler_ctx = ctx;
}

static void plain(struct http_conn *c, const char *status, const char *text, int head)
{
    set_response(c, status, "text/plain", NULL, strdup(text), strlen(text), head);
}

/* Hand the request to the owner's handler. 0 when it took it (answered, or
 * will), -1 when it does not know the path. */
static int delegate(struct http_conn *c, const char *method, const char *path, const char *query)
{
    struct httpd *h = c->h;
    struct httpd_req *req;

    if (!h->handler)
        return -1;
    if (!(req = calloc(1, sizeof(*req))))
        return 0; /* no answer: the connection is closed */
    req->c = c;
    req->head = strcmp(method, "HEAD") == 0;
    c->waiting = req;
    if (h->handler(h->handler_ctx, req, method, path, query) == 0)
        return 0;
    c->waiting = NULL;
    free(req);
    return -1;
}

static void route(struct http_conn *c)
{
    char method[8], *target, *end, *query;
    size_t len = 0;
    char *body;
    int head;

    /* "METHOD SP target SP ...": the target in place, up to the whole request */
    target = strchr(c->req, ' ');
    if (sscanf(c->req, "%7s", method) != 1 || !target ||
        target > c->req + strcspn(c->req, "\r\n")) {
        plain(c, "400 Bad Request", "bad request\n", 0);
        return;
    }
    target++;
    end = target + strcspn(target, " \r\n");
    *end = '\0';
    query = strchr(target, '?');
    if (query)
        *query++ = '\0';
    else
        query = end;
    head = strcmp(method, "HEAD") == 0;
    int get = head || strcmp(method, "GET") == 0;
    const char *path = target;
    int builtin = strcmp(path, "/metrics") == 0 || strcmp(path, "/top") == 0 ||
                  strcmp(path, "/") == 0 || strcmp(path, "/health") == 0;

    if (!builtin) {
        c->routing = 1;
        int taken = delegate(c, method, path, query);
        c->routing = 0;
        if (taken == 0)
            return;
    }
    if (!get) {
        set_response(c, "405 Method Not Allowed", "text/plain", "Allow: GET, HEAD\r\n",
                     strdup("GET only\n"), 9, 0);
    } else if (strcmp(path, "/metrics") == 0) {
        body = metrics_render(&len);
        set_response(c, "200 OK", "text/plain; version=0.0.4; charset=utf-8", NULL, body, len,
                     head);
    } else if (strcmp(path, "/top") == 0) {
        body = metrics_top_render(util_now_us(), &len);
        set_response(c, "200 OK", "application/json", NULL, body, len, head);
    } else if (strcmp(path, "/") == 0 || strcmp(path, "/health") == 0) {
        plain(c, "200 OK", "ok\n", head);
    } else {
        plain(c, "404 Not Found", "not found\n", head);
    }
}

static void http_io_cb(struct ev_loop *loop, ev_io *io, int revents)
{
    struct http_conn *c = io->data;

    if (!c->resp) {
        ssize_t n = recv(c->fd, c->req + c->req_len, sizeof(c->req) - 1 - c->req_len, 0);
        if (n == 0 || (n == -1 && errno != EAGAIN && errno != EINTR)) {
            http_conn_free(c);
            return;
        }
        if (n < 0)
            return;
        c->req_len += (size_t)n;
        c->req[c->req_len] = '\0';
        if (!strstr(c->req, "\r\n\r\n") && !strstr(c->req, "\n\n")) {
            if (c->req_len == sizeof(c->req) - 1)
                http_conn_free(c);
            return;
        }
        route(c);
        if (!c->resp && c->waiting) {
            ev_io_stop(loop, &c->io); /* read no more: httpd_reply starts the writing */
            return;
        }
        if (!c->resp) {
            http_conn_free(c);
            return;
        }
        start_writing(c);
    }
    while (c->resp_off < c->resp_len) {
        ssize_t n = send(c->fd, c->resp + c->resp_off, c->resp_len - c->resp_off, MSG_NOSIGNAL);
        if (n == -1) {
            if (errno == EAGAIN || errno == EINTR)
                return;
            break;
        }
        c->resp_off += (size_t)n;
    }
    http_conn_free(c);
}

static void http_timeout_cb(struct ev_loop *loop, ev_timer *t, int revents)
{
    METRIC_INC(timeouts[METRICS_TIMEOUT_STATS]);
    http_conn_free(t->data);
}

/* The stats listener must never take the fds SPOP needs: at most
 * HTTP_MAX_CONNS connections, and at most an eighth of the fd limit. */
static unsigned conns_cap(void)
{
    uint64_t eighth = net_raise_nofile(0) / 8;

    return eighth >= HTTP_MAX_CONNS ? HTTP_MAX_CONNS : eighth < 4 ? 4 : (unsigned)eighth;
}

/* The oldest connection still reading its request (no answer made or
 * awaited), or NULL. The list is newest first and at most max_conns long. */
static struct http_conn *oldest_reading(struct httpd *h)
{
    struct http_conn *oldest = NULL;

    for (struct http_conn *c = h->conns; c; c = c->next)
        if (!c->resp && !c->waiting)
            oldest = c;
    return oldest;
}

/* 1 when the peer may have a connection: in stats_allow, and below the cap,
 * made room for if need be by closing the oldest connection that has not
 * sent its whole request (as SPOP does with connections before their HELLO):
 * idle or slow peers cannot keep a scraper out. With none such, refused. */
static int http_admit(struct httpd *h, const struct sockaddr *peer)
{
    unsigned long long suppressed;
    char text[NET_PEER_TEXT_MAX] = "?";

    if (!net_peer_allowed(h->allow, h->nallow, peer)) {
        METRIC_INC(refused[METRICS_STATS][METRICS_REFUSED_ALLOW]);
        if (log_gate_open(&refuse_gate, REFUSE_LOG_EVERY_S, &suppressed))
            LOG_WARN("\"stats peer refused by stats_allow\" peer=%s refused_not_logged=%llu",
                     net_format_peer(peer, 0, text, sizeof(text)), suppressed);
        return 0;
    }
    if (h->nconns >= h->max_conns) {
        struct http_conn *old = oldest_reading(h);
        if (old) {
            METRIC_INC(refused[METRICS_STATS][METRICS_REFUSED_HANDSHAKE_EVICTED]);
            if (log_gate_open(&evict_gate, REFUSE_LOG_EVERY_S, &suppressed))
                LOG_WARN("\"stats connections closed before a whole request to admit new "
                         "ones\" max=%u peer=%s evicted_not_logged=%llu",
                         h->max_conns,
                         net_format_peer((const struct sockaddr *)&old->peer, 0, text,
                                         sizeof(text)),
                         suppressed);
            http_conn_free(old);
            return 1;
        }
        METRIC_INC(refused[METRICS_STATS][METRICS_REFUSED_MAX_CONNS]);
        LOG_DEBUG("\"stats connection refused: too many open\" max=%u", h->max_conns);
        return 0;
    }
    return 1;
}

static void http_accept_cb(struct ev_loop *loop, ev_io *io, int revents)
{
    struct httpd *h = io->data;

    for (int i = 0; i < 16; i++) {
        struct sockaddr_storage ss;
        socklen_t sl = sizeof(ss);
        int fd = accept4(h->fd, (struct sockaddr *)&ss, &sl, SOCK_NONBLOCK | SOCK_CLOEXEC);

        if (fd == -1) {
            if (accept_guard_failed(&h->guard, errno))
                return;
            continue;
        }
        accept_guard_ok(&h->guard);
        if (!http_admit(h, (struct sockaddr *)&ss)) {
            close(fd);
            continue;
        }
        struct http_conn *c = calloc(1, sizeof(*c));
        if (!c) {
            close(fd);
            continue;
        }
        c->h = h;
        c->fd = fd;
        memcpy(&c->peer, &ss, sl < sizeof(c->peer) ? sl : sizeof(c->peer));
        ev_io_init(&c->io, http_io_cb, fd, EV_READ);
        c->io.data = c;
        ev_timer_init(&c->timer, http_timeout_cb, HTTP_TIMEOUT, 0.);
        c->timer.data = c;
        ev_io_start(loop, &c->io);
        ev_timer_start(loop, &c->timer);
        c->next = h->conns;
        if (h->conns)
            h->conns->prev = c;
        h->conns = c;
        h->nconns++;
    }
}

struct httpd *httpd_new(struct ev_loop *loop, const struct net_addr *addr,
                        const struct net_cidr *allow, size_t nallow, char *err, size_t errlen)
{
    struct httpd *h = calloc(1, sizeof(*h));
    if (!h || httpd_set_allow(h, allow, nallow) < 0) {
        free(h);
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    h->loop = loop;
    h->fd = net_listen(addr, 128, err, errlen);
    if (h->fd == -1) {
        free(h->allow);
        free(h);
        return NULL;
    }
    ev_io_init(&h->accept_io, http_accept_cb, h->fd, EV_READ);
    h->accept_io.data = h;
    ev_io_start(loop, &h->accept_io);
    accept_guard_init(&h->guard, loop, &h->accept_io, 1, "stats",
                      &metrics.accept_pauses[METRICS_STATS]);
    h->max_conns = conns_cap();
    return h;
}

int httpd_set_allow(struct httpd *h, const struct net_cidr *allow, size_t n)
{
    struct net_cidr *copy = NULL;

    if (!h)
        return 0;
    if (n > 0 && !(copy = malloc(n * sizeof(*copy))))
        return -1;
    if (n > 0)
        memcpy(copy, allow, n * sizeof(*copy));
    free(h->allow);
    h->allow = copy;
    h->nallow = n;
    return 0;
}

void httpd_free(struct httpd *h)
{
    if (!h)
        return;
    while (h->conns)
        http_conn_free(h->conns);
    accept_guard_stop(&h->guard);
    ev_io_stop(h->loop, &h->accept_io);
    close(h->fd);
    free(h->allow);
    free(h);
}
