/* httpd.h - the stats listener: a tiny HTTP/1.x server on the main event
 * loop answering GET /metrics (Prometheus text 0.0.4) and GET /top (JSON).
 * One request per connection; requests over 8 KiB or slower than 5 s are
 * dropped. Peers outside the allow list ([agent] stats_allow) are closed at
 * accept, and so is a connection past the cap: 64 at once, at most an eighth
 * of the fd limit (the stats listener must not starve SPOP). Out of fds, the
 * listener pauses (accept_guard.h).
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

#endif
