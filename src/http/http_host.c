/* SPDX-License-Identifier: Apache-2.0 */
/* http_host.c - the stats listener's Host check (http_host.h). */
#include "http_host.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <netinet/in.h>
#include <stdint.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>

#include "core/hostname.h"

/* The address part of a Host name as binary: AF_INET or AF_INET6 in
 * *family, 0 when the name is not an address. A v6 one only in brackets
 * (bracketed: 1), a v4 one only without. */
static void parse_ip(const char *name, size_t nlen, int bracketed, int *family,
                     unsigned char out[16])
{
    char text[INET6_ADDRSTRLEN];

    *family = 0;
    if (nlen >= sizeof(text))
        return;
    memcpy(text, name, nlen);
    text[nlen] = '\0';
    if (bracketed && inet_pton(AF_INET6, text, out) == 1)
        *family = AF_INET6;
    else if (!bracketed && inet_pton(AF_INET, text, out) == 1)
        *family = AF_INET;
}

/* self's address and port, a v4-mapped v6 one (a dual-stack socket) as v4.
 * 0, or -1 for a family that is not IP. */
static int self_addr(const struct sockaddr *self, int *family, unsigned char addr[16],
                     unsigned *port)
{
    if (self->sa_family == AF_INET) {
        const struct sockaddr_in *in = (const struct sockaddr_in *)(const void *)self;
        *family = AF_INET;
        memcpy(addr, &in->sin_addr, 4);
        *port = ntohs(in->sin_port);
        return 0;
    }
    if (self->sa_family == AF_INET6) {
        const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)(const void *)self;
        *port = ntohs(in6->sin6_port);
        if (IN6_IS_ADDR_V4MAPPED(&in6->sin6_addr)) {
            *family = AF_INET;
            memcpy(addr, in6->sin6_addr.s6_addr + 12, 4);
        } else {
            *family = AF_INET6;
            memcpy(addr, in6->sin6_addr.s6_addr, 16);
        }
        return 0;
    }
    return -1;
}

/* The port a browser sends for the listener's: its own, or none when it is
 * HTTP's default. */
static int port_ok(unsigned got, unsigned lport)
{
    return got == lport || (got == 0 && lport == 80);
}

static int same_name(const char *a, size_t alen, const char *b)
{
    return alen == strlen(b) && strncasecmp(a, b, alen) == 0;
}

/* 1 when name:port matches one item of names ("a,b:8080"). */
static int listed(const char *name, size_t nlen, unsigned port, unsigned lport, const char *names)
{
    const char *p = names;

    while (p && *p) {
        const char *comma = strchr(p, ','), *iname;
        size_t ilen = comma ? (size_t)(comma - p) : strlen(p), inlen;
        unsigned iport;

        if (hostname_split(p, ilen, &iname, &inlen, &iport) == 0 && inlen == nlen &&
            strncasecmp(iname, name, nlen) == 0 &&
            (iport ? port == iport : port == 0 || port == lport))
            return 1;
        p = comma ? comma + 1 : NULL;
    }
    return 0;
}

int http_host_allowed(const char *v, size_t len, const struct sockaddr *self, const char *names)
{
    static const unsigned char v4_loop[4] = {127, 0, 0, 1};
    static const unsigned char v6_loop[16] = {[15] = 1};
    unsigned char laddr[16], haddr[16];
    int lfamily, hfamily;
    unsigned lport, port;
    const char *name;
    size_t nlen;

    if (self_addr(self, &lfamily, laddr, &lport) == -1)
        return 1;
    if (!v || hostname_split(v, len, &name, &nlen, &port) == -1)
        return 0;
    if (listed(name, nlen, port, lport, names))
        return 1;
    if (same_name(name, nlen, "localhost"))
        return port == 0 || port == lport;
    if (!port_ok(port, lport))
        return 0;
    parse_ip(name, nlen, v[0] == '[', &hfamily, haddr);
    if (hfamily == AF_INET)
        return memcmp(haddr, v4_loop, 4) == 0 ||
               (lfamily == AF_INET && memcmp(haddr, laddr, 4) == 0);
    if (hfamily == AF_INET6)
        return memcmp(haddr, v6_loop, 16) == 0 ||
               (lfamily == AF_INET6 && memcmp(haddr, laddr, 16) == 0);
    return 0;
}
