/* SPDX-License-Identifier: Apache-2.0 */
/* net.h - addresses and sockets: the one place that parses an address or
 * opens a socket on one.
 *
 * The address forms of the configuration and the tools: "host:port",
 * "[v6]:port" and "unix:/path"; listening sockets and blocking connects on a
 * parsed address; CIDR allow lists and the peer check against them.
 *
 * libc only (no libev, no hiredis): the config module parses with it and unit
 * tests link it alone. The parsers are pure and return 0 or -1; the socket
 * functions return an fd, or -1 with "ADDR: reason" in a caller-supplied
 * buffer. Nothing here prints.
 */
#ifndef NET_H
#define NET_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/un.h>

/* A host: a DNS name is at most 253 bytes; 256 also holds any name a Redis
 * node announces (store_cluster.c keeps those under 256 bytes). */
#define NET_HOST_MAX 256
/* A unix socket path, NUL included. */
#define NET_PATH_MAX sizeof(((struct sockaddr_un *)0)->sun_path)

/* Parse flag: the host may be empty or "*", meaning every local address (a
 * listener). Without it the host must name one. */
#define NET_ANY_HOST 1u

/* host:port, taken apart. */
struct net_hostport {
    char host[NET_HOST_MAX]; /* without brackets; "" or "*": every address (NET_ANY_HOST) */
    int port;                /* 1..65535 when parsed */
};

enum net_addr_kind {
    NET_ADDR_NONE = 0, /* no address: a listener that is off */
    NET_ADDR_TCP = 1,
    NET_ADDR_UNIX = 2,
};

/* An address to listen on or connect to. A zeroed struct is NET_ADDR_NONE. */
struct net_addr {
    int kind;                /* enum net_addr_kind */
    struct net_hostport tcp; /* NET_ADDR_TCP */
    char path[NET_PATH_MAX]; /* NET_ADDR_UNIX: an absolute path */
};

/* One CIDR of an allow list. family is AF_INET or AF_INET6; addr holds the
 * network in network order (host bits cleared); a v4 CIDR also matches
 * v4-mapped v6 peers (::ffff:a.b.c.d on a dual-stack socket). */
struct net_cidr {
    int family;
    uint8_t addr[16];
    unsigned prefix;
};

/* ---- parsing ------------------------------------------------------------ */

/* The len bytes at s as "host:port" or "[v6]:port". The port is 1..65535 in
 * decimal digits; the host is an IPv4 address, a DNS name (letters, digits,
 * '-', '.', '_'; at most 253 bytes, not starting with '-' or '.') or, in
 * brackets, an IPv6 address (which needs them). With NET_ANY_HOST the host
 * may also be empty or "*". 0 with *out filled, or -1 (*out undefined). */
int net_parse_hostport(const char *s, size_t len, unsigned flags, struct net_hostport *out);

/* "unix:/path" (absolute, fitting sun_path) or a host:port as above, NUL
 * terminated. 0 with *out filled, or -1. */
int net_parse_addr(const char *s, unsigned flags, struct net_addr *out);

/* The address as text: "host:port", "[v6]:port" or "unix:/path" ("off" for
 * NET_ADDR_NONE). Truncated to fit len; 0, or -1 when it did not fit. */
int net_format_addr(const struct net_addr *a, char *buf, size_t len);

/* "127.0.0.0/8", "::1/128", or an address alone (a /32 or /128). Host bits
 * past the prefix are dropped, as HAProxy does with "10.1.2.3/8". 0 or -1. */
int net_cidr_parse(const char *s, struct net_cidr *c);

/* ---- peers -------------------------------------------------------------- */

/* 1 when the peer (an AF_INET or AF_INET6 sockaddr, possibly less aligned
 * than sockaddr_in) falls in c, else 0. */
int net_cidr_match(const struct net_cidr *c, const struct sockaddr *sa);

/* Whether an allow list of n CIDRs lets the peer in: always with an empty
 * list or a unix socket peer; never for a NULL peer (with a non-empty list);
 * otherwise when some CIDR matches. 1 or 0. */
int net_peer_allowed(const struct net_cidr *allow, size_t n, const struct sockaddr *sa);

/* A peer as text for logs: "a.b.c.d:port", "[v6]:port" (a v4-mapped v6
 * peer as its v4 address), "unix" for a unix socket peer, "?" otherwise.
 * with_port 0 leaves the port out. Truncated to fit len (NET_PEER_TEXT_MAX
 * always fits). Returns buf. */
#define NET_PEER_TEXT_MAX 56
char *net_format_peer(const struct sockaddr *sa, int with_port, char *buf, size_t len);

/* ---- sockets ------------------------------------------------------------ */

/* Set O_NONBLOCK on fd. 0 or -1 (errno set). */
int net_set_nonblock(int fd);

/* TCP keepalive on the connected or connecting TCP socket fd: SO_KEEPALIVE,
 * the first probe after idle_s seconds without traffic, then one every
 * intvl_s, the connection reset after cnt unanswered. A dead peer or a path
 * that dropped the connection is found without sending data, and the
 * probes keep middleboxes (NAT, conntrack) from forgetting an idle
 * connection. 0, or -1 (errno set). */
int net_tcp_keepalive(int fd, int idle_s, int intvl_s, int cnt);

/* Bind and listen on a (TCP or unix). A TCP host "" or "*" binds every
 * address; a v6 socket is v6-only; SO_REUSEADDR is set. A stale unix socket
 * file is replaced (anything else at the path is not). Returns the
 * non-blocking, close-on-exec fd, or -1 with "ADDR: reason" in err. */
int net_listen(const struct net_addr *a, int backlog, char *err, size_t errlen);

/* A blocking connection to a (TCP: the first address the host resolves to,
 * with TCP_NODELAY). Returns the fd, or -1 with "ADDR: reason" in err and
 * errno set. */
int net_connect(const struct net_addr *a, char *err, size_t errlen);

/* Raise the soft open-file limit (RLIMIT_NOFILE) towards want, within the
 * hard limit; never lowers it. Returns the soft limit in force after the call
 * (UINT64_MAX: unlimited; 0: unknown). want 0: only read it. */
uint64_t net_raise_nofile(uint64_t want);

/* What a listener does after accept(2) failed with err. */
enum net_accept_action {
    NET_ACCEPT_WAIT = 0,  /* nothing (left) to accept: wait for the socket to be readable */
    NET_ACCEPT_NEXT = 1,  /* that one connection failed (aborted, EINTR...): take the next */
    NET_ACCEPT_PAUSE = 2, /* out of fds or memory (EMFILE, ENFILE, ENOBUFS, ENOMEM): the
                             socket stays readable, so a watcher that keeps it would spin;
                             stop watching it for a while */
};
int net_accept_action(int err);

/* ---- names -------------------------------------------------------------- */

/* The longest numeric address text, NUL included (an IPv6 address). */
#define NET_NUMERIC_MAX 46

/* 1 when host is a numeric IPv4 or IPv6 address (no brackets): connecting to
 * it needs no name lookup. */
int net_host_is_numeric(const char *host);

/* Blocking: look host up (getaddrinfo, every source nsswitch.conf names) and
 * write its first IPv4 address, or when it has none its first IPv6 address,
 * as numeric text into ip (NET_NUMERIC_MAX bytes). A numeric host is copied.
 * 0, or -1 with the reason in err. May take as long as the resolver's own
 * timeouts: never call it on an event loop. */
int net_resolve_host(const char *host, char *ip, size_t iplen, char *err, size_t errlen);

#endif
