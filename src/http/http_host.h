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

/* 1 when a request with Host value v (len bytes; v NULL: no Host header)
 * may be answered by a listener whose connection came in on self (the
 * local address, AF_INET or AF_INET6). Allowed: self's address with its
 * port ([v6]:port for v6; without the port when it is 80), localhost,
 * 127.0.0.1 and [::1] with that port (localhost without one too), and the
 * items of names (stats_hosts normalised: "a,b:8080"; NULL: none) -- an
 * item without a port with self's port or none, one with a port with that
 * port only. A listener on another family (unix:) allows every Host: no
 * browser reaches it. */
int http_host_allowed(const char *v, size_t len, const struct sockaddr *self, const char *names);

#endif
