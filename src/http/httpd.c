/* SPDX-License-Identifier: Apache-2.0 */
/* httpd.c - the stats listener on the main loop: the Host check
 * (http_host.h), HTTP Basic auth when configured, and one route table for
 * its own paths (GET /metrics, /top, /health) and the owner's, whose
 * answers may come later (struct httpd_req). */
#include "httpd.h"

#include <arpa/inet.h>
#include <errno.h>
#include <ev.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/dlist.h"
#include "core/log.h"
#include "core/net.h"
#include "core/util.h"
#include "http_host.h"
#include "metrics/metrics.h"
#include "server/listener.h"

#define HTTP_REQ_MAX 8192
#define HTTP_TIMEOUT 5.0     /* a connection's whole life: request in, response out */
#define HTTP_MAX_CONNS 64    /* at once; fewer under a small fd limit (conns_cap) */
#define HTTP_ACCEPT_BATCH 16 /* accepts per wake-up */
#define EVICT_LOG_EVERY_S 10.0

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
    const char *headers;       /* in req: the '\n' that ends the request line */
    struct sockaddr_storage peer;
    struct sockaddr_storage self; /* the local address it came in on: the Host check's */
    struct dlist link;            /* on h->conns */
    struct dlist reading;         /* on h->reading until its whole request is in */
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
    struct listener lis;
    struct dlist conns;   /* struct http_conn, by link */
    struct dlist reading; /* those still reading their request, oldest first */
    unsigned nconns, max_conns;
    struct net_cidr *allow; /* a copy; none: any peer */
    size_t nallow;
    const struct httpd_route *routes; /* the owner's (httpd_set_routes) */
    size_t nroutes;
    void *routes_ctx;
    char *auth;  /* base64(USER:PASSWORD) expected after "Basic "; NULL: no auth */
    char *hosts; /* [agent] stats_hosts, "a,b:1"; NULL: none */
};

/* On every answer: no other site's page may load one as a script or style
 * (nosniff) or embed it at all (CORP); the status page's policy already has
 * both. */
#define SAFE_HEADERS                                                                               \
    "X-Content-Type-Options: nosniff\r\nCross-Origin-Resource-Policy: same-origin\r\n"

static struct log_gate evict_gate;

static void http_conn_free(struct http_conn *c)
{
    struct httpd *h = c->h;
    ev_io_stop(h->loop, &c->io);
    ev_timer_stop(h->loop, &c->timer);
    close(c->fd);
    dlist_del(&c->link);
    if (dlist_linked(&c->reading))
        dlist_del(&c->reading);
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
    char hdr[2048]; /* the status page's policy headers are the longest */
    int safe = !headers || !strcasestr(headers, "X-Content-Type-Options:");
    int n = snprintf(hdr, sizeof(hdr),
                     "HTTP/1.1 %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n%s%s"
                     "Connection: close\r\n\r\n",
                     status, ctype, body_len, headers ? headers : "", safe ? SAFE_HEADERS : "");
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

void httpd_set_routes(struct httpd *h, const struct httpd_route *routes, size_t n, void *ctx)
{
    if (!h)
        return;
    h->routes = routes;
    h->nroutes = n;
    h->routes_ctx = ctx;
}
/* The value of header name (case-insensitive) in the header lines after
 * line (the '\n' ending the request line; NULL: none), without surrounding
 * blanks, its length in *len; NULL when absent. */
static const char *find_header(const char *line, const char *name, size_t *len)
{
    size_t nlen = strlen(name);

    while (line && line[1] != '\r' && line[1] != '\n' && line[1] != '\0') {
        line++;
        size_t llen = strcspn(line, "\r\n");
        if (llen > nlen && line[nlen] == ':' && strncasecmp(line, name, nlen) == 0) {
            const char *v = line + nlen + 1, *e = line + llen;
            while (v < e && (*v == ' ' || *v == '\t'))
                v++;
            while (e > v && (e[-1] == ' ' || e[-1] == '\t'))
                e--;
            *len = (size_t)(e - v);
            return v;
        }
        line = strchr(line, '\n');
    }
    return NULL;
}

const char *httpd_req_header(const struct httpd_req *req, const char *name, size_t *len)
{
    return req->c ? find_header(req->c->headers, name, len) : NULL;
}

/* Constant time in the length of want: a guess of the credentials learns
 * nothing from how long the comparison took. */
static int same_secret(const char *got, size_t glen, const char *want)
{
    size_t wlen = strlen(want);
    unsigned char diff = glen != wlen;

    for (size_t i = 0; i < wlen; i++)
        diff |= (unsigned char)(want[i] ^ (i < glen ? got[i] : 0));
    return diff == 0;
}

/* 1 when the request may go on: no auth configured, or its Authorization
 * header carries the credentials. The scheme's name is case-insensitive
 * (RFC 7235): "basic" from a client is "Basic". */
static int authorized(const struct http_conn *c)
{
    size_t len, skip = 6;
    const char *v;

    if (!c->h->auth)
        return 1;
    v = find_header(c->headers, "Authorization", &len);
    if (!v || len <= skip || strncasecmp(v, "Basic ", skip) != 0)
        return 0;
    while (skip < len && v[skip] == ' ')
        skip++;
    return same_secret(v + skip, len - skip, c->h->auth);
}

int httpd_set_auth(struct httpd *h, const char *credentials)
{
    char *auth = NULL;

    if (!h)
        return 0;
    if (credentials) {
        size_t n = strlen(credentials);
        if (!(auth = malloc(4 * ((n + 2) / 3) + 1)))
            return -1;
        util_base64(credentials, n, auth);
    }
    if (h->auth)
        explicit_bzero(h->auth, strlen(h->auth));
    free(h->auth);
    h->auth = auth;
    return 0;
}

static void plain(struct http_conn *c, const char *status, const char *text, int head)
{
    set_response(c, status, "text/plain", NULL, strdup(text), strlen(text), head);
}

/* The Host check on every request (http_host.h): a page whose name was
 * made to resolve to this listener (DNS rebinding) gets nothing. version:
 * what follows the target on the request line; an HTTP/1.0 request (or
 * one without a version) may come without Host, an HTTP/1.1 one may not. */
static int host_ok(const struct http_conn *c, const char *version)
{
    size_t len = 0;
    const char *v = find_header(c->headers, "Host", &len);

    if (!v && strncmp(version, "HTTP/1.1", 8) != 0)
        return strncmp(version, "HTTP/", 5) != 0 || strncmp(version, "HTTP/1.0", 8) == 0;
    return http_host_allowed(v, len, (const struct sockaddr *)&c->self, c->h->hosts);
}

/* ---- the listener's own routes ------------------------------------------- */

static void metrics_get(void *ctx, struct httpd_req *req, const char *rest, const char *query)
{
    size_t len = 0;
    char *body = metrics_render(&len);

    httpd_reply(req, "200 OK", "text/plain; version=0.0.4; charset=utf-8", NULL, body, len);
}

static void top_get(void *ctx, struct httpd_req *req, const char *rest, const char *query)
{
    size_t len = 0;
    char *body = metrics_top_render(util_now_us(), &len);

    httpd_reply(req, "200 OK", "application/json", NULL, body, len);
}

static void health_get(void *ctx, struct httpd_req *req, const char *rest, const char *query)
{
    httpd_reply(req, "200 OK", "text/plain", NULL, strdup("ok\n"), 3);
}

/* clang-format off */
static const struct httpd_route own_routes[] = {
    {"/metrics", HTTPD_GET, metrics_get},
    {"/top", HTTPD_GET, top_get},
    {"/health", HTTPD_GET, health_get},
};
/* clang-format on */

/* path's route in t (n routes), what follows a prefix route in *rest. */
static const struct httpd_route *find_route(const struct httpd_route *t, size_t n, const char *path,
                                            const char **rest)
{
    for (size_t i = 0; i < n; i++) {
        size_t len = strlen(t[i].path);
        int prefix = len > 1 && t[i].path[len - 1] == '/';
        if (prefix ? strncmp(path, t[i].path, len) == 0 : strcmp(path, t[i].path) == 0) {
            *rest = path + (prefix ? len : strlen(path));
            return &t[i];
        }
    }
    return NULL;
}

/* A route's answer, or 404 / 405 (an unknown path asked with a method
 * other than GET or HEAD: 405, as it always was). */
static void dispatch(struct http_conn *c, const char *method, const char *path, const char *query,
                     int head)
{
    struct httpd *h = c->h;
    const char *rest = "";
    const struct httpd_route *r =
        find_route(own_routes, sizeof(own_routes) / sizeof(own_routes[0]), path, &rest);
    void *ctx = NULL;
    unsigned m = head || strcmp(method, "GET") == 0 ? HTTPD_GET
                 : strcmp(method, "POST") == 0      ? HTTPD_POST
                                                    : 0;

    if (!r && (r = find_route(h->routes, h->nroutes, path, &rest)))
        ctx = h->routes_ctx;
    if (!r && m == HTTPD_GET) {
        plain(c, "404 Not Found", "not found\n", head);
        return;
    }
    if (!r || !(m & r->methods)) {
        int post = r && r->methods == HTTPD_POST;
        set_response(c, "405 Method Not Allowed", "text/plain",
                     post ? "Allow: POST\r\n" : "Allow: GET, HEAD\r\n",
                     strdup(post ? "POST only\n" : "GET only\n"), post ? 10 : 9, 0);
        return;
    }
    struct httpd_req *req = calloc(1, sizeof(*req));
    if (!req)
        return; /* no answer: the connection is closed */
    req->c = c;
    req->head = head;
    c->waiting = req;
    c->routing = 1;
    r->fn(ctx, req, rest, query);
    c->routing = 0;
}

static void route(struct http_conn *c)
{
    char method[8], *target, *end, *query;
    int head;

    /* "METHOD SP target SP ...": the target in place, up to the whole request;
     * the header lines after it stay as they are */
    c->headers = strchr(c->req, '\n');
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
    const char *path = target;

    if (!host_ok(c, end + 1)) {
        plain(c, "421 Misdirected Request",
              "misdirected request: this Host is not served here (the listener's own "
              "address, localhost, or a name of [agent] stats_hosts)\n",
              head);
        return;
    }

    /* Every path but /health (which tells nothing) behind the credentials,
     * as HAProxy's `stats auth` does. */
    if (strcmp(path, "/health") != 0 && !authorized(c)) {
        set_response(c, "401 Unauthorized", "text/plain",
                     "WWW-Authenticate: Basic realm=\"spoa-ratelimit\", charset=\"UTF-8\"\r\n",
                     strdup("authentication required\n"), 24, head);
        return;
    }
    dispatch(c, method, path, query, head);
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
        /* a NUL would end the text the parser sees: the request could never
         * be whole, and its sender would wait out the timeout for nothing */
        int nul = memchr(c->req + c->req_len, '\0', (size_t)n) != NULL;
        c->req_len += (size_t)n;
        c->req[c->req_len] = '\0';
        if (nul) {
            dlist_del(&c->reading);
            plain(c, "400 Bad Request", "bad request: NUL byte\n", 0);
            if (!c->resp) {
                http_conn_free(c);
                return;
            }
            start_writing(c);
            return;
        }
        if (!strstr(c->req, "\r\n\r\n") && !strstr(c->req, "\n\n")) {
            if (c->req_len == sizeof(c->req) - 1)
                http_conn_free(c);
            return;
        }
        dlist_del(&c->reading); /* a whole request: no longer evicted to admit others */
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
 * awaited), or NULL. */
static struct http_conn *oldest_reading(struct httpd *h)
{
    if (dlist_empty(&h->reading))
        return NULL;
    return DLIST_ENTRY(h->reading.next, struct http_conn, reading);
}

/* The listener's peer check: [agent] stats_allow. */
static const struct net_cidr *http_allow(void *ctx, size_t *n)
{
    struct httpd *h = ctx;

    *n = h->nallow;
    return h->allow;
}

/* 0 when an allowed peer may have a connection: below the cap, made room
 * for if need be by closing the oldest connection that has not sent its
 * whole request (as SPOP does with connections before their HELLO): idle or
 * slow peers cannot keep a scraper out. With none such, refused (-1). */
static int http_admit(void *ctx, const struct sockaddr *peer)
{
    struct httpd *h = ctx;
    unsigned long long suppressed;
    char text[NET_PEER_TEXT_MAX] = "?";

    if (h->nconns >= h->max_conns) {
        struct http_conn *old = oldest_reading(h);
        if (old) {
            listener_count(&h->lis, METRICS_REFUSED_HANDSHAKE_EVICTED);
            if (log_gate_open(&evict_gate, EVICT_LOG_EVERY_S, &suppressed))
                LOG_WARN(
                    "\"stats connections closed before a whole request to admit new "
                    "ones\" max=%u peer=%s evicted_not_logged=%llu",
                    h->max_conns,
                    net_format_peer((const struct sockaddr *)&old->peer, 0, text, sizeof(text)),
                    suppressed);
            http_conn_free(old);
            return 0;
        }
        LOG_DEBUG("\"stats connection refused: too many open\" max=%u", h->max_conns);
        return -1;
    }
    return 0;
}

/* An admitted connection becomes a struct http_conn, reading its request. */
static void http_take(void *ctx, int fd, const struct sockaddr_storage *peer, socklen_t len)
{
    struct httpd *h = ctx;
    struct http_conn *c = calloc(1, sizeof(*c));
    socklen_t self_len = sizeof(struct sockaddr_storage);

    /* without its local address the Host check could not be made */
    if (!c || getsockname(fd, (struct sockaddr *)&c->self, &self_len) == -1) {
        free(c);
        close(fd);
        return;
    }
    c->h = h;
    c->fd = fd;
    memcpy(&c->peer, peer, len < sizeof(c->peer) ? len : sizeof(c->peer));
    ev_io_init(&c->io, http_io_cb, fd, EV_READ);
    c->io.data = c;
    ev_timer_init(&c->timer, http_timeout_cb, HTTP_TIMEOUT, 0.);
    c->timer.data = c;
    ev_io_start(h->loop, &c->io);
    ev_timer_start(h->loop, &c->timer);
    dlist_push_tail(&h->conns, &c->link);
    dlist_push_tail(&h->reading, &c->reading);
    h->nconns++;
}

static const struct listener_ops http_listener_ops = {
    .name = "stats",
    .kind = METRICS_STATS,
    .budget = HTTP_ACCEPT_BATCH,
    .refused_line = "stats peer refused by stats_allow",
    .warn_refused = 1,
    .allow = http_allow,
    .admit = http_admit,
    .take = http_take,
};

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
    dlist_init(&h->conns);
    dlist_init(&h->reading);
    h->fd = net_listen(addr, 128, err, errlen);
    if (h->fd == -1) {
        free(h->allow);
        free(h);
        return NULL;
    }
    if (listener_init(&h->lis, loop, &h->fd, 1, &http_listener_ops, h) < 0) {
        snprintf(err, errlen, "out of memory");
        close(h->fd);
        free(h->allow);
        free(h);
        return NULL;
    }
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

int httpd_set_hosts(struct httpd *h, const char *names)
{
    char *copy = NULL;

    if (!h)
        return 0;
    if (names && !(copy = strdup(names)))
        return -1;
    free(h->hosts);
    h->hosts = copy;
    return 0;
}

void httpd_free(struct httpd *h)
{
    if (!h)
        return;
    while (!dlist_empty(&h->conns))
        http_conn_free(DLIST_ENTRY(h->conns.next, struct http_conn, link));
    listener_stop(&h->lis);
    listener_free(&h->lis);
    close(h->fd);
    free(h->allow);
    httpd_set_auth(h, NULL);
    free(h->hosts);
    free(h);
}
