/* SPDX-License-Identifier: Apache-2.0 */
/* http_host.h - which Host headers the stats listener answers: the
 * defence against DNS rebinding. A page of evil.example whose name is made
 * to resolve to 127.0.0.1 reaches the listener as same-origin, but its
 * requests carry Host: evil.example[:PORT]; answering only the listener's
 * own address, localhost and the names the operator lists ([agent]
 * stats_hosts) leaves such a page nothing to read (421 Misdirected
 * Request). Pure: no sockets, only the address the connection came in on.
 */
#ifndef HTTP_HOST_H
#define HTTP_HOST_H

#include <stddef.h>

struct sockaddr;

/* Longest stats_hosts item kept, NUL included (a DNS name is at most 253
 * bytes, then ":65535"). */
#define HTTP_HOST_ITEM_MAX 264

/* "name[:port]" or "[v6][:port]" taken apart: the name without brackets
 * (pointing into v) and its length, the port (0: none). -1 when v is not
 * that: an empty name, a character a host name or address cannot hold, a
 * port that is not 1 to 65535, brackets around something else than a v6
 * address. */
int http_host_split(const char *v, size_t len, const char **name, size_t *nlen,
                    unsigned *port);

/* One item of [agent] stats_hosts checked and written lowercase into out
 * (cap bytes): 0, or -1 when it is not a host name or address with an
 * optional :port (http_host_split) or longer than cap. */
int http_host_item(const char *item, char *out, size_t cap);

/* 1 when a request with Host value v (len bytes; v NULL: no Host header)
 * may be answered by a listener whose connection came in on self (the
 * local address, AF_INET or AF_INET6). Allowed: self's address with its
 * port ([v6]:port for v6; without the port when it is 80), localhost,
 * 127.0.0.1 and [::1] with that port (localhost without one too), and the
 * items of names (stats_hosts normalised: "a,b:8080"; NULL: none) -- an
 * item without a port with self's port or none, one with a port with that
 * port only. A listener on another family (unix:) allows every Host: no
 * browser reaches it. */
int http_host_allowed(const char *v, size_t len, const struct sockaddr *self,
                      const char *names);

#endif
