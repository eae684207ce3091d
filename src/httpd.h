/* httpd.h - the stats listener: a tiny HTTP/1.x server on the main event
 * loop answering GET /metrics (Prometheus text 0.0.4) and GET /top (JSON).
 * One request per connection; requests over 8 KiB or slower than 5 s are
 * dropped.
 */
#ifndef HTTPD_H
#define HTTPD_H

#include <stddef.h>

struct ev_loop;
struct httpd;
struct net_addr;

/* Listen on addr (net_listen). NULL with a message in err on failure. */
struct httpd *httpd_new(struct ev_loop *loop, const struct net_addr *addr, char *err,
                        size_t errlen);
void httpd_free(struct httpd *h);

#endif
