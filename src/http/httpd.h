/* SPDX-License-Identifier: Apache-2.0 */
/* httpd.h - the stats listener: a tiny HTTP/1.x server on the main event
 * loop answering GET /metrics (Prometheus text 0.0.4), GET /top (JSON) and
 * GET /health, and the owner's routes (struct httpd_route: the status
 * page, GET /config, GET /key, GET /rules/N, POST /reset...), which may
 * answer later (after a Redis reply) without blocking the loop. One request per connection;
 * requests over 8 KiB or slower than 5 s are dropped, one holding a NUL byte gets 400 at once.
 * Every answer carries X-Content-Type-Options: nosniff and
 * Cross-Origin-Resource-Policy: same-origin. Peers outside the allow list ([agent] stats_allow) are
 * closed at accept, and so is a connection past the cap: 64 at once, at most an eighth of the fd
 * limit (the stats listener must not starve SPOP). Out of fds, the listener pauses
 * (accept_guard.h).
 */
#ifndef HTTPD_H
#define HTTPD_H

#include <stddef.h>

struct ev_loop;
struct httpd;
struct net_addr;
struct net_cidr;

/* Listen on addr (net_listen), letting in the peers of the allow list (n
 * CIDRs, copied; n = 0: any peer). NULL with a message in err on failure. */
struct httpd *httpd_new(struct ev_loop *loop, const struct net_addr *addr,
                        const struct net_cidr *allow, size_t nallow, char *err, size_t errlen);
/* Peers allowed from now on, for new connections (a copy of n CIDRs; n = 0:
 * any peer). 0, or -1 out of memory (the old list stays). NULL h: no-op. */
int httpd_set_allow(struct httpd *h, const struct net_cidr *allow, size_t n);
void httpd_free(struct httpd *h);
/* HTTP Basic auth on every path but /health from now on: credentials is
 * USER:PASSWORD (copied), NULL for none. 0, or -1 out of memory (the old
 * setting stays). NULL h: no-op. */
int httpd_set_auth(struct httpd *h, const char *credentials);

/* The Host names answered from now on besides the listener's own address
 * and localhost (http_host.h): names is [agent] stats_hosts normalised
 * ("a,b:1", copied), NULL for none. Any other Host gets 421 Misdirected
 * Request, and so does an HTTP/1.1 request without one. 0, or -1 out of
 * memory (the old list stays). NULL h: no-op. */
int httpd_set_hosts(struct httpd *h, const char *names);

/* One request waiting for its answer. */
struct httpd_req;

/* The paths the listener serves, one table: the listener's own (GET
 * /metrics, /top, /health, in httpd.c) and the owner's, set here. A route's
 * path is matched exactly, or as a prefix when it ends with '/' (rest: what
 * follows it; "" for an exact match). A path in no table gets 404; a method
 * the route does not take gets 405 with the Allow line its methods make.
 * query: what follows '?', still percent-encoded (util_query_param), ""
 * without one. Strings valid during the call only. The route answers
 * through httpd_reply(), now or later, exactly once. */
enum { HTTPD_GET = 1, HTTPD_POST = 2 }; /* HTTPD_GET takes HEAD too */
typedef void httpd_route_fn(void *ctx, struct httpd_req *req, const char *rest, const char *query);
struct httpd_route {
    const char *path;
    unsigned methods;
    httpd_route_fn *fn;
};
/* The owner's routes (n of them, the array kept, not copied: a static
 * table), each called with ctx. NULL h: no-op. */
void httpd_set_routes(struct httpd *h, const struct httpd_route *routes, size_t n, void *ctx);

/* The value of a request header (name case-insensitive), blanks trimmed,
 * its length in *len; NULL when absent. Valid during the handler call only
 * (not once the answer is deferred). */
const char *httpd_req_header(const struct httpd_req *req, const char *name, size_t *len);

/* Answer req with status ("200 OK"), content type, extra header lines
 * ("Cache-Control: no-store\r\n", or NULL) and body (malloc'd, taken
 * over; NULL when out of memory: the connection is closed). A HEAD request
 * gets the headers only. req is freed: never use it again. When its
 * connection went away meanwhile (timeout, peer gone, httpd_free), the
 * answer is dropped. */
void httpd_reply(struct httpd_req *req, const char *status, const char *ctype, const char *headers,
                 char *body, size_t len);

#endif
