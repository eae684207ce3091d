/* SPDX-License-Identifier: Apache-2.0 */
/* net.c - addresses and sockets (see net.h): the address parser, listening
 * sockets, blocking connects, CIDRs and the peer check, what to do when
 * accept(2) fails, and the blocking name lookup the store runs off its loop. */
#include "net.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#define NET_NAME_MAX 253 /* longest DNS name */
#define PORT_MAX 65535
#define ADDR_TEXT_MAX (NET_HOST_MAX + NET_PATH_MAX + 16) /* any address, formatted */

/* ---- parsing ------------------------------------------------------------ */

/* Exactly len decimal digits (len > 0, leading zeros allowed), their value
 * at most max. */
static int parse_uint(const char *s, size_t len, unsigned max, unsigned *v)
{
    unsigned n = 0;

    if (len == 0)
        return -1;
    for (size_t i = 0; i < len; i++) {
        if (s[i] < '0' || s[i] > '9')
            return -1;
        n = n * 10 + (unsigned)(s[i] - '0');
        if (n > max)
            return -1;
    }
    *v = n;
    return 0;
}

static int parse_port(const char *s, size_t len, int *port)
{
    unsigned v;

    if (parse_uint(s, len, PORT_MAX, &v) == -1 || v == 0)
        return -1;
    *port = (int)v;
    return 0;
}

/* A DNS name or an IPv4 address (all digits and dots: then a real one). */
static int valid_host(const char *h, size_t len)
{
    char buf[INET_ADDRSTRLEN];
    struct in_addr a;
    size_t i;

    if (len == 0 || len > NET_NAME_MAX || h[0] == '-' || h[0] == '.')
        return -1;
    for (i = 0; i < len && (isdigit((unsigned char)h[i]) || h[i] == '.'); i++)
        ;
    if (i == len) {
        if (len >= sizeof(buf))
            return -1;
        memcpy(buf, h, len);
        buf[len] = '\0';
        return inet_pton(AF_INET, buf, &a) == 1 ? 0 : -1;
    }
    for (i = 0; i < len; i++) {
        if (!isalnum((unsigned char)h[i]) && h[i] != '-' && h[i] != '.' && h[i] != '_')
            return -1;
    }
    return 0;
}

/* "[v6]:port" of len bytes, s[0] == '['. */
static int parse_bracketed(const char *s, size_t len, struct net_hostport *out)
{
    const char *close = memchr(s, ']', len);
    size_t hlen = close ? (size_t)(close - s - 1) : 0;
    struct in6_addr a;

    if (!close || (size_t)(close - s) + 1 >= len || close[1] != ':' || hlen == 0 ||
        hlen >= INET6_ADDRSTRLEN)
        return -1;
    memcpy(out->host, s + 1, hlen);
    out->host[hlen] = '\0';
    if (inet_pton(AF_INET6, out->host, &a) != 1)
        return -1;
    return parse_port(close + 2, len - (size_t)(close + 2 - s), &out->port);
}

int net_parse_hostport(const char *s, size_t len, unsigned flags, struct net_hostport *out)
{
    const char *colon = NULL;
    size_t hlen;

    if (len > 0 && s[0] == '[')
        return parse_bracketed(s, len, out);
    for (size_t i = 0; i < len; i++) {
        if (s[i] == ':') {
            if (colon) /* an IPv6 address needs brackets */
                return -1;
            colon = s + i;
        }
    }
    if (!colon)
        return -1;
    hlen = (size_t)(colon - s);
    if (hlen == 0 || (hlen == 1 && s[0] == '*')) {
        if (!(flags & NET_ANY_HOST))
            return -1;
    } else if (valid_host(s, hlen) == -1) {
        return -1;
    }
    memcpy(out->host, s, hlen);
    out->host[hlen] = '\0';
    return parse_port(colon + 1, len - hlen - 1, &out->port);
}

int net_parse_addr(const char *s, unsigned flags, struct net_addr *out)
{
    memset(out, 0, sizeof(*out));
    if (strncmp(s, "unix:", 5) == 0) {
        const char *path = s + 5;

        if (path[0] != '/' || strlen(path) >= sizeof(out->path))
            return -1;
        strcpy(out->path, path);
        out->kind = NET_ADDR_UNIX;
        return 0;
    }
    if (net_parse_hostport(s, strlen(s), flags, &out->tcp) == -1)
        return -1;
    out->kind = NET_ADDR_TCP;
    return 0;
}

int net_format_addr(const struct net_addr *a, char *buf, size_t len)
{
    int n;

    if (a->kind == NET_ADDR_UNIX)
        n = snprintf(buf, len, "unix:%s", a->path);
    else if (a->kind == NET_ADDR_TCP)
        n = snprintf(buf, len, strchr(a->tcp.host, ':') ? "[%s]:%d" : "%s:%d", a->tcp.host,
                     a->tcp.port);
    else
        n = snprintf(buf, len, "off");
    return n >= 0 && (size_t)n < len ? 0 : -1;
}

int net_cidr_parse(const char *s, struct net_cidr *c)
{
    char buf[INET6_ADDRSTRLEN];
    const char *slash;
    size_t alen;
    unsigned maxbits, prefix;

    if (!s)
        return -1;
    slash = strchr(s, '/');
    alen = slash ? (size_t)(slash - s) : strlen(s);
    if (alen == 0 || alen >= sizeof(buf))
        return -1;
    memcpy(buf, s, alen);
    buf[alen] = '\0';
    memset(c, 0, sizeof(*c));
    if (inet_pton(AF_INET, buf, c->addr) == 1) {
        c->family = AF_INET;
        maxbits = 32;
    } else if (inet_pton(AF_INET6, buf, c->addr) == 1) {
        c->family = AF_INET6;
        maxbits = 128;
    } else {
        return -1;
    }
    prefix = maxbits;
    if (slash && parse_uint(slash + 1, strlen(slash + 1), maxbits, &prefix) == -1)
        return -1;
    c->prefix = prefix;
    for (unsigned bit = c->prefix; bit < maxbits; bit++)
        c->addr[bit / 8] &= (uint8_t) ~(0x80u >> (bit % 8));
    return 0;
}

/* ---- peers -------------------------------------------------------------- */

/* The peer's address bytes: v4 (also for a v4-mapped v6 peer) and v6. */
struct peer {
    uint8_t v4[4], v6[16];
    int has4, has6;
};

static void peer_of(const struct sockaddr *sa, struct peer *p)
{
    memset(p, 0, sizeof(*p));
    if (sa->sa_family == AF_INET) {
        struct sockaddr_in sin;

        memcpy(&sin, sa, sizeof(sin)); /* sa may be less aligned than sockaddr_in */
        memcpy(p->v4, &sin.sin_addr, 4);
        p->has4 = 1;
    } else if (sa->sa_family == AF_INET6) {
        struct sockaddr_in6 sin6;

        memcpy(&sin6, sa, sizeof(sin6));
        memcpy(p->v6, &sin6.sin6_addr, 16);
        p->has6 = 1;
        if (IN6_IS_ADDR_V4MAPPED(&sin6.sin6_addr)) {
            memcpy(p->v4, p->v6 + 12, 4);
            p->has4 = 1;
        }
    }
}

/* Whether the first prefix bits of net and addr agree. */
static int prefix_match(const uint8_t *net, const uint8_t *addr, unsigned prefix)
{
    unsigned full = prefix / 8, rest = prefix % 8;

    if (memcmp(net, addr, full) != 0)
        return 0;
    if (rest == 0)
        return 1;
    return ((net[full] ^ addr[full]) & (uint8_t)(0xff00u >> rest)) == 0;
}

static int cidr_holds(const struct net_cidr *c, const struct peer *p)
{
    return (c->family == AF_INET && p->has4 && prefix_match(c->addr, p->v4, c->prefix)) ||
           (c->family == AF_INET6 && p->has6 && prefix_match(c->addr, p->v6, c->prefix));
}

int net_cidr_match(const struct net_cidr *c, const struct sockaddr *sa)
{
    struct peer p;

    peer_of(sa, &p);
    return cidr_holds(c, &p);
}

int net_peer_allowed(const struct net_cidr *allow, size_t n, const struct sockaddr *sa)
{
    struct peer p;

    if (n == 0)
        return 1;
    if (!sa)
        return 0;
    if (sa->sa_family == AF_UNIX)
        return 1;
    peer_of(sa, &p);
    for (size_t i = 0; i < n; i++) {
        if (cidr_holds(&allow[i], &p))
            return 1;
    }
    return 0;
}

char *net_format_peer(const struct sockaddr *sa, int with_port, char *buf, size_t len)
{
    char ip[INET6_ADDRSTRLEN] = "?";
    unsigned port = 0;
    int v6 = 0;

    if (len == 0)
        return buf;
    if (sa && sa->sa_family == AF_INET) {
        struct sockaddr_in in;
        memcpy(&in, sa, sizeof(in));
        inet_ntop(AF_INET, &in.sin_addr, ip, sizeof(ip));
        port = ntohs(in.sin_port);
    } else if (sa && sa->sa_family == AF_INET6) {
        struct sockaddr_in6 in6;
        memcpy(&in6, sa, sizeof(in6));
        port = ntohs(in6.sin6_port);
        if (IN6_IS_ADDR_V4MAPPED(&in6.sin6_addr)) {
            inet_ntop(AF_INET, &in6.sin6_addr.s6_addr[12], ip, sizeof(ip));
        } else {
            inet_ntop(AF_INET6, &in6.sin6_addr, ip, sizeof(ip));
            v6 = 1;
        }
    } else {
        snprintf(buf, len, "%s", sa && sa->sa_family == AF_UNIX ? "unix" : "?");
        return buf;
    }
    if (!with_port)
        snprintf(buf, len, "%s", ip);
    else
        snprintf(buf, len, v6 ? "[%s]:%u" : "%s:%u", ip, port);
    return buf;
}

/* ---- sockets ------------------------------------------------------------ */

int net_set_nonblock(int fd)
{
    int fl = fcntl(fd, F_GETFL);

    if (fl == -1 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) == -1)
        return -1;
    return 0;
}

int net_tcp_keepalive(int fd, int idle_s, int intvl_s, int cnt)
{
    int on = 1;

    if (setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &on, sizeof(on)) == -1 ||
        setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle_s, sizeof(idle_s)) == -1 ||
        setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl_s, sizeof(intvl_s)) == -1 ||
        setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof(cnt)) == -1)
        return -1;
    return 0;
}

/* "ADDR: why" into err. */
static void addr_error(const struct net_addr *a, const char *why, char *err, size_t errlen)
{
    char text[ADDR_TEXT_MAX];

    net_format_addr(a, text, sizeof(text));
    snprintf(err, errlen, "%s: %s", text, why);
}

/* The unix socket of a, bound; -1 with errno. */
static int bind_unix(const struct net_addr *a)
{
    struct sockaddr_un sun;
    struct stat st;
    int fd;

    memset(&sun, 0, sizeof(sun));
    sun.sun_family = AF_UNIX;
    memcpy(sun.sun_path, a->path, sizeof(sun.sun_path));
    /* A stale socket from a previous run is replaced, anything else is not. */
    if (stat(a->path, &st) == 0 && S_ISSOCK(st.st_mode))
        unlink(a->path);
    fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd != -1 && bind(fd, (struct sockaddr *)&sun, sizeof(sun)) == -1) {
        int saved = errno;
        close(fd);
        errno = saved;
        return -1;
    }
    return fd;
}

/* The first address of a's host:port (passive: for a listener, where "" and "*" are
 * every address). 0, or -1 with "ADDR: reason" in err. */
static int resolve(const struct net_addr *a, int passive, struct addrinfo **res, char *err,
                   size_t errlen)
{
    const char *host = a->tcp.host;
    struct addrinfo hints;
    char port[8];
    int rc;

    memset(&hints, 0, sizeof(hints));
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_NUMERICSERV | (passive ? AI_PASSIVE : 0);
    snprintf(port, sizeof(port), "%d", a->tcp.port);
    rc = getaddrinfo(*host && strcmp(host, "*") != 0 ? host : NULL, port, &hints, res);
    if (rc != 0) {
        addr_error(a, gai_strerror(rc), err, errlen);
        return -1;
    }
    return 0;
}

/* A TCP socket bound to ai, v6-only for a v6 address; -1 with errno. */
static int bind_tcp(const struct addrinfo *ai)
{
    int one = 1;
    int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);

    if (fd == -1)
        return -1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (ai->ai_family == AF_INET6)
        setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one));
    if (bind(fd, ai->ai_addr, ai->ai_addrlen) == -1) {
        int saved = errno;
        close(fd);
        errno = saved;
        return -1;
    }
    return fd;
}

int net_listen(const struct net_addr *a, int backlog, char *err, size_t errlen)
{
    int fd;

    if (a->kind == NET_ADDR_UNIX) {
        if (!a->path[0]) {
            addr_error(a, "bad unix socket path", err, errlen);
            return -1;
        }
        fd = bind_unix(a);
    } else if (a->kind == NET_ADDR_TCP) {
        struct addrinfo *res;

        if (resolve(a, 1, &res, err, errlen) == -1)
            return -1;
        fd = bind_tcp(res);
        freeaddrinfo(res);
    } else {
        snprintf(err, errlen, "no address to listen on");
        return -1;
    }
    if (fd == -1 || listen(fd, backlog) == -1 || net_set_nonblock(fd) == -1) {
        addr_error(a, strerror(errno), err, errlen);
        if (fd != -1)
            close(fd);
        return -1;
    }
    return fd;
}

int net_connect(const struct net_addr *a, char *err, size_t errlen)
{
    struct sockaddr_un sun;
    struct addrinfo *res = NULL;
    const struct sockaddr *sa;
    socklen_t salen;
    int fd, saved, one = 1;

    if (a->kind == NET_ADDR_UNIX) {
        memset(&sun, 0, sizeof(sun));
        sun.sun_family = AF_UNIX;
        memcpy(sun.sun_path, a->path, sizeof(sun.sun_path));
        sa = (const struct sockaddr *)&sun;
        salen = sizeof(sun);
    } else if (a->kind == NET_ADDR_TCP) {
        if (resolve(a, 0, &res, err, errlen) == -1) {
            errno = EINVAL;
            return -1;
        }
        sa = res->ai_addr;
        salen = res->ai_addrlen;
    } else {
        snprintf(err, errlen, "no address to connect to");
        errno = EINVAL;
        return -1;
    }
    fd = socket(sa->sa_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd != -1 && connect(fd, sa, salen) == 0) {
        if (sa->sa_family != AF_UNIX)
            setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        if (res)
            freeaddrinfo(res);
        return fd;
    }
    saved = errno;
    if (fd != -1)
        close(fd);
    if (res)
        freeaddrinfo(res);
    addr_error(a, strerror(saved), err, errlen);
    errno = saved;
    return -1;
}

uint64_t net_raise_nofile(uint64_t want)
{
    struct rlimit rl;
    rlim_t cur;

    if (getrlimit(RLIMIT_NOFILE, &rl) == -1)
        return 0;
    cur = rl.rlim_cur;
    if (cur != RLIM_INFINITY && cur < want) {
        rl.rlim_cur = rl.rlim_max != RLIM_INFINITY && rl.rlim_max < want ? rl.rlim_max : want;
        if (rl.rlim_cur > cur && setrlimit(RLIMIT_NOFILE, &rl) == 0)
            cur = rl.rlim_cur;
    }
    return cur == RLIM_INFINITY ? UINT64_MAX : (uint64_t)cur;
}

int net_accept_action(int err)
{
    switch (err) {
    case EMFILE:
    case ENFILE:
    case ENOBUFS:
    case ENOMEM:
        return NET_ACCEPT_PAUSE;
    case EINTR:
    case ECONNABORTED:
    case EPROTO:
    case EPERM: /* a firewall rule refused that peer */
        return NET_ACCEPT_NEXT;
    default: /* EAGAIN: another worker took it, or none left */
        return NET_ACCEPT_WAIT;
    }
}

/* ---- names -------------------------------------------------------------- */

int net_host_is_numeric(const char *host)
{
    uint8_t buf[16];

    return inet_pton(AF_INET, host, buf) == 1 || inet_pton(AF_INET6, host, buf) == 1;
}

int net_resolve_host(const char *host, char *ip, size_t iplen, char *err, size_t errlen)
{
    struct addrinfo hints, *res;
    const void *a;
    int rc;

    if (net_host_is_numeric(host)) {
        if (snprintf(ip, iplen, "%s", host) >= (int)iplen) {
            snprintf(err, errlen, "%s: address too long", host);
            return -1;
        }
        return 0;
    }
    /* IPv4 first, then IPv6: what hiredis 0.14 does with a name, so that
     * "localhost" still means 127.0.0.1 where Redis listens on that only */
    memset(&hints, 0, sizeof(hints));
    hints.ai_family = AF_INET;
    hints.ai_socktype = SOCK_STREAM;
    rc = getaddrinfo(host, NULL, &hints, &res);
    if (rc != 0 && rc != EAI_SYSTEM && rc != EAI_AGAIN && rc != EAI_MEMORY) {
        hints.ai_family = AF_INET6;
        rc = getaddrinfo(host, NULL, &hints, &res);
    }
    if (rc != 0) {
        snprintf(err, errlen, "%s: %s", host,
                 rc == EAI_SYSTEM ? strerror(errno) : gai_strerror(rc));
        return -1;
    }
    if (res->ai_family == AF_INET)
        a = &((const struct sockaddr_in *)(const void *)res->ai_addr)->sin_addr;
    else
        a = &((const struct sockaddr_in6 *)(const void *)res->ai_addr)->sin6_addr;
    rc = inet_ntop(res->ai_family, a, ip, (socklen_t)iplen) ? 0 : -1;
    if (rc == -1)
        snprintf(err, errlen, "%s: %s", host, strerror(errno));
    freeaddrinfo(res);
    return rc;
}
