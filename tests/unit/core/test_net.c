/* SPDX-License-Identifier: Apache-2.0 */
/* test_net.c - the address parser (host:port, [v6]:port, unix:/path, bad and
 * missing ports, overlong parts), CIDRs and the peer check, real sockets on
 * loopback (net_listen on 127.0.0.1:0 and a unix path, net_connect), what a
 * listener does after accept fails, the open-file limit, name lookups. */
#include "core/net.h"

#include <arpa/inet.h>
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "check_util.h"

/* ---- address parser ---------------------------------------------------------------- */

static const struct {
    const char *s;
    unsigned flags;
    int kind; /* NET_ADDR_NONE: must be rejected */
    const char *host_or_path;
    int port;
} addrs[] = {
    {"127.0.0.1:12345", 0, NET_ADDR_TCP, "127.0.0.1", 12345},
    {"0.0.0.0:1", 0, NET_ADDR_TCP, "0.0.0.0", 1},
    {"localhost:65535", 0, NET_ADDR_TCP, "localhost", 65535},
    {"redis-1.example_x.com:6379", 0, NET_ADDR_TCP, "redis-1.example_x.com", 6379},
    {"[::1]:8080", 0, NET_ADDR_TCP, "::1", 8080},
    {"[2001:db8::7]:26379", 0, NET_ADDR_TCP, "2001:db8::7", 26379},
    {"[::ffff:10.0.0.1]:80", 0, NET_ADDR_TCP, "::ffff:10.0.0.1", 80},
    {"h:00080", 0, NET_ADDR_TCP, "h", 80}, /* leading zeros */
    {"unix:/run/spoa.sock", 0, NET_ADDR_UNIX, "/run/spoa.sock", 0},
    /* every address: only with NET_ANY_HOST */
    {"*:12345", NET_ANY_HOST, NET_ADDR_TCP, "*", 12345},
    {":9145", NET_ANY_HOST, NET_ADDR_TCP, "", 9145},
    {"*:12345", 0, NET_ADDR_NONE, NULL, 0},
    {":9145", 0, NET_ADDR_NONE, NULL, 0},
    {"[]:80", NET_ANY_HOST, NET_ADDR_NONE, NULL, 0},
    /* bad ports */
    {"h:0", 0, NET_ADDR_NONE, NULL, 0},
    {"h:65536", 0, NET_ADDR_NONE, NULL, 0},
    {"h:99999999999999999999999", 0, NET_ADDR_NONE, NULL, 0},
    {"h:-1", 0, NET_ADDR_NONE, NULL, 0},
    {"h:+80", 0, NET_ADDR_NONE, NULL, 0},
    {"h:80x", 0, NET_ADDR_NONE, NULL, 0},
    {"h:8 0", 0, NET_ADDR_NONE, NULL, 0},
    {"h:http", 0, NET_ADDR_NONE, NULL, 0},
    {"[::1]:0", 0, NET_ADDR_NONE, NULL, 0},
    /* missing port */
    {"localhost", 0, NET_ADDR_NONE, NULL, 0},
    {"h:", 0, NET_ADDR_NONE, NULL, 0},
    {"[::1]", 0, NET_ADDR_NONE, NULL, 0},
    {"[::1]:", 0, NET_ADDR_NONE, NULL, 0},
    {"[::1]80", 0, NET_ADDR_NONE, NULL, 0},
    {"", NET_ANY_HOST, NET_ADDR_NONE, NULL, 0},
    /* bad hosts */
    {"::1:80", 0, NET_ADDR_NONE, NULL, 0}, /* IPv6 needs brackets */
    {"[::1:80", 0, NET_ADDR_NONE, NULL, 0},
    {"[1.2.3.4]:80", 0, NET_ADDR_NONE, NULL, 0},
    {"[::g]:80", 0, NET_ADDR_NONE, NULL, 0},
    {"256.0.0.1:80", 0, NET_ADDR_NONE, NULL, 0},
    {"1.2.3:80", 0, NET_ADDR_NONE, NULL, 0},
    {"-h:80", 0, NET_ADDR_NONE, NULL, 0},
    {".h:80", 0, NET_ADDR_NONE, NULL, 0},
    {"a b:80", 0, NET_ADDR_NONE, NULL, 0},
    {"h/x:80", 0, NET_ADDR_NONE, NULL, 0},
    {"**:80", NET_ANY_HOST, NET_ADDR_NONE, NULL, 0},
    /* unix paths */
    {"unix:run/x.sock", 0, NET_ADDR_NONE, NULL, 0},
    {"unix:", 0, NET_ADDR_NONE, NULL, 0},
    {"unix", 0, NET_ADDR_NONE, NULL, 0},
};

START_TEST(test_parse_addr)
{
    struct net_addr a;
    int rc = net_parse_addr(addrs[_i].s, addrs[_i].flags, &a);

    if (addrs[_i].kind == NET_ADDR_NONE) {
        ck_assert_msg(rc == -1, "'%s' accepted", addrs[_i].s);
        return;
    }
    ck_assert_msg(rc == 0, "'%s' rejected", addrs[_i].s);
    ck_assert_int_eq(a.kind, addrs[_i].kind);
    if (a.kind == NET_ADDR_UNIX) {
        ck_assert_str_eq(a.path, addrs[_i].host_or_path);
    } else {
        ck_assert_str_eq(a.tcp.host, addrs[_i].host_or_path);
        ck_assert_int_eq(a.tcp.port, addrs[_i].port);
    }
}
END_TEST

/* Names up to 253 bytes, unix paths that fit sun_path; one more is too long. */
START_TEST(test_overlong)
{
    char s[600];
    struct net_addr a;

    memset(s, 'a', 253);
    strcpy(s + 253, ":80");
    ck_assert_int_eq(net_parse_addr(s, 0, &a), 0);
    ck_assert_uint_eq(strlen(a.tcp.host), 253);
    memset(s, 'a', 254);
    strcpy(s + 254, ":80");
    ck_assert_int_eq(net_parse_addr(s, 0, &a), -1);
    memset(s, 'a', 500);
    strcpy(s + 500, ":80");
    ck_assert_int_eq(net_parse_addr(s, NET_ANY_HOST, &a), -1);

    /* an IPv6 literal longer than any address */
    snprintf(s, sizeof(s), "[%s]:80", "0000:0000:0000:0000:0000:ffff:255.255.255.2550");
    ck_assert_int_eq(net_parse_addr(s, 0, &a), -1);

    strcpy(s, "unix:/");
    memset(s + 6, 'p', NET_PATH_MAX - 2); /* "/" + that = NET_PATH_MAX - 1 bytes */
    s[6 + NET_PATH_MAX - 2] = '\0';
    ck_assert_int_eq(net_parse_addr(s, 0, &a), 0);
    ck_assert_uint_eq(strlen(a.path), NET_PATH_MAX - 1);
    strcpy(s + 6 + NET_PATH_MAX - 2, "p");
    ck_assert_int_eq(net_parse_addr(s, 0, &a), -1);
}
END_TEST

/* A host:port inside a longer text (a URL) is read by its length only. */
START_TEST(test_parse_hostport_len)
{
    static const char url[] = "10.0.0.1:6379/2";
    struct net_hostport hp;

    ck_assert_int_eq(net_parse_hostport(url, 12, 0, &hp), 0);
    ck_assert_str_eq(hp.host, "10.0.0.1");
    ck_assert_int_eq(hp.port, 637);
    ck_assert_int_eq(net_parse_hostport(url, 13, 0, &hp), 0);
    ck_assert_int_eq(hp.port, 6379);
    ck_assert_int_eq(net_parse_hostport(url, strlen(url), 0, &hp), -1);
    ck_assert_int_eq(net_parse_hostport("[::1]:80", 5, 0, &hp), -1);
    ck_assert_int_eq(net_parse_hostport("[::1]:80", 0, NET_ANY_HOST, &hp), -1);
}
END_TEST

START_TEST(test_format)
{
    static const char *const texts[] = {"127.0.0.1:12345", "[::1]:8080",          "*:1",
                                        ":9145",           "unix:/run/spoa.sock", "localhost:6379"};
    struct net_addr a;
    char buf[64];

    for (size_t i = 0; i < sizeof(texts) / sizeof(texts[0]); i++) {
        ck_assert_int_eq(net_parse_addr(texts[i], NET_ANY_HOST, &a), 0);
        ck_assert_int_eq(net_format_addr(&a, buf, sizeof(buf)), 0);
        ck_assert_str_eq(buf, texts[i]);
    }
    memset(&a, 0, sizeof(a));
    ck_assert_int_eq(net_format_addr(&a, buf, sizeof(buf)), 0);
    ck_assert_str_eq(buf, "off");
    ck_assert_int_eq(net_parse_addr("127.0.0.1:12345", 0, &a), 0);
    ck_assert_int_eq(net_format_addr(&a, buf, 8), -1);
    ck_assert_str_eq(buf, "127.0.0");
}
END_TEST

/* Peers as logs name them: v4, v6 in brackets, v4-mapped v6 as v4, with
 * and without the port, unix, unknown, and cut to the buffer. */
START_TEST(test_format_peer)
{
    struct sockaddr_in in = {.sin_family = AF_INET, .sin_port = htons(4242)};
    struct sockaddr_in6 in6 = {.sin6_family = AF_INET6, .sin6_port = htons(80)};
    struct sockaddr_un un = {.sun_family = AF_UNIX};
    struct sockaddr_storage other = {.ss_family = AF_PACKET};
    char buf[NET_PEER_TEXT_MAX], small[6];

    inet_pton(AF_INET, "192.0.2.7", &in.sin_addr);
    ck_assert_str_eq(net_format_peer((struct sockaddr *)&in, 1, buf, sizeof(buf)),
                     "192.0.2.7:4242");
    ck_assert_str_eq(net_format_peer((struct sockaddr *)&in, 0, buf, sizeof(buf)), "192.0.2.7");
    inet_pton(AF_INET6, "2001:db8::1", &in6.sin6_addr);
    ck_assert_str_eq(net_format_peer((struct sockaddr *)&in6, 1, buf, sizeof(buf)),
                     "[2001:db8::1]:80");
    inet_pton(AF_INET6, "::ffff:10.1.2.3", &in6.sin6_addr);
    ck_assert_str_eq(net_format_peer((struct sockaddr *)&in6, 1, buf, sizeof(buf)), "10.1.2.3:80");
    inet_pton(AF_INET6, "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", &in6.sin6_addr);
    in6.sin6_port = htons(65535);
    ck_assert_str_eq(net_format_peer((struct sockaddr *)&in6, 1, buf, sizeof(buf)),
                     "[ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff]:65535");
    ck_assert_str_eq(net_format_peer((struct sockaddr *)&un, 1, buf, sizeof(buf)), "unix");
    ck_assert_str_eq(net_format_peer((struct sockaddr *)&other, 1, buf, sizeof(buf)), "?");
    ck_assert_str_eq(net_format_peer(NULL, 1, buf, sizeof(buf)), "?");
    ck_assert_str_eq(net_format_peer((struct sockaddr *)&in, 1, small, sizeof(small)), "192.0");
}
END_TEST

/* ---- CIDRs and peers ------------------------------------------------------------------ */

static const struct check_cidr cidrs[] = {
    {"127.0.0.0/8", AF_INET, 8, "127.0.0.0"},
    {"10.1.2.3/8", AF_INET, 8, "10.0.0.0"},
    {"192.168.1.7", AF_INET, 32, "192.168.1.7"},
    {"0.0.0.0/0", AF_INET, 0, "0.0.0.0"},
    {"10.0.0.0/008", AF_INET, 8, "10.0.0.0"},
    {"::1", AF_INET6, 128, "::1"},
    {"2001:db8:ffff::1/33", AF_INET6, 33, "2001:db8:8000::"},
    {"::ffff:10.0.0.1/120", AF_INET6, 120, "::ffff:10.0.0.0"},
    {"", 0, 0, NULL},
    {"/8", 0, 0, NULL},
    {"10.0.0.0/", 0, 0, NULL},
    {"10.0.0.0/33", 0, 0, NULL},
    {"10.0.0.0/99999999999", 0, 0, NULL},
    {"::/129", 0, 0, NULL},
    {"10.0.0.0/8/8", 0, 0, NULL},
    {"example.com/8", 0, 0, NULL},
};

START_TEST(test_cidr_parse)
{
    struct net_cidr c = {0};
    int rc = net_cidr_parse(cidrs[_i].s, &c);

    check_cidr_parsed(&cidrs[_i], rc, c.family, c.prefix, c.addr);
}
END_TEST

static const struct {
    const char *cidr, *peer;
    int match;
} matches[] = {
    {"10.0.0.0/8", "10.255.1.2", 1},
    {"10.0.0.0/8", "11.0.0.1", 0},
    {"10.1.0.0/17", "10.1.127.255", 1},
    {"10.1.0.0/17", "10.1.128.0", 0},
    {"0.0.0.0/0", "203.0.113.9", 1},
    {"192.0.2.77", "192.0.2.77", 1},
    {"192.0.2.77", "192.0.2.78", 0},
    /* v4 CIDRs hold v4-mapped v6 peers, not v4-compatible or NAT64 ones */
    {"10.0.0.0/8", "::ffff:10.9.9.9", 1},
    {"10.0.0.0/8", "::ffff:11.9.9.9", 0},
    {"10.0.0.0/8", "::10.9.9.9", 0},
    {"10.0.0.0/8", "64:ff9b::10.9.9.9", 0},
    {"0.0.0.0/0", "::1", 0},
    /* v6 CIDRs hold v6 peers, v4-mapped ones as v6, never v4 peers */
    {"::1/128", "::1", 1},
    {"::1/128", "::2", 0},
    {"2001:db8::/32", "2001:db8:ffff::1", 1},
    {"2001:db8::/32", "2001:db9::1", 0},
    {"2001:db8:8000::/33", "2001:db8:7fff::1", 0},
    {"::ffff:0.0.0.0/96", "::ffff:1.2.3.4", 1},
    {"::ffff:0.0.0.0/96", "1.2.3.4", 0},
    {"::/0", "127.0.0.1", 0},
};

START_TEST(test_cidr_match)
{
    struct net_cidr c;
    struct sockaddr_storage ss;

    ck_assert_int_eq(net_cidr_parse(matches[_i].cidr, &c), 0);
    check_peer_addr(matches[_i].peer, &ss);
    ck_assert_msg(net_cidr_match(&c, (struct sockaddr *)&ss) == matches[_i].match,
                  "%s in %s: expected %d", matches[_i].peer, matches[_i].cidr, matches[_i].match);
}
END_TEST

START_TEST(test_peer_allowed)
{
    struct net_cidr list[2];
    struct sockaddr_storage ss;
    struct sockaddr_un sun;

    ck_assert_int_eq(net_cidr_parse("127.0.0.0/8", &list[0]), 0);
    ck_assert_int_eq(net_cidr_parse("::1", &list[1]), 0);
    check_peer_addr("127.0.0.2", &ss);
    ck_assert_int_eq(net_peer_allowed(list, 2, (struct sockaddr *)&ss), 1);
    check_peer_addr("::ffff:127.0.0.2", &ss);
    ck_assert_int_eq(net_peer_allowed(list, 2, (struct sockaddr *)&ss), 1);
    check_peer_addr("::1", &ss);
    ck_assert_int_eq(net_peer_allowed(list, 2, (struct sockaddr *)&ss), 1);
    ck_assert_int_eq(net_peer_allowed(list, 1, (struct sockaddr *)&ss), 0);
    check_peer_addr("10.0.0.1", &ss);
    ck_assert_int_eq(net_peer_allowed(list, 2, (struct sockaddr *)&ss), 0);
    /* an empty list lets anyone in; unix peers always; no peer never */
    ck_assert_int_eq(net_peer_allowed(list, 0, (struct sockaddr *)&ss), 1);
    ck_assert_int_eq(net_peer_allowed(NULL, 0, NULL), 1);
    ck_assert_int_eq(net_peer_allowed(list, 2, NULL), 0);
    memset(&sun, 0, sizeof(sun));
    sun.sun_family = AF_UNIX;
    ck_assert_int_eq(net_peer_allowed(list, 2, (struct sockaddr *)&sun), 1);
}
END_TEST

/* ---- sockets -------------------------------------------------------------------------- */

/* The port the kernel chose for fd. */
static int bound_port(int fd)
{
    struct sockaddr_in sin;
    socklen_t len = sizeof(sin);

    ck_assert_int_eq(getsockname(fd, (struct sockaddr *)&sin, &len), 0);
    ck_assert_int_eq(sin.sin_family, AF_INET);
    return ntohs(sin.sin_port);
}

START_TEST(test_listen_tcp)
{
    struct net_addr a = {.kind = NET_ADDR_TCP, .tcp = {"127.0.0.1", 0}}; /* port 0: any */
    char err[256], expect[64];
    int lfd, cfd, afd, busy;

    lfd = net_listen(&a, 16, err, sizeof(err));
    ck_assert_msg(lfd >= 0, "%s", err);
    ck_assert_int_ne(fcntl(lfd, F_GETFL) & O_NONBLOCK, 0);
    ck_assert_int_ne(fcntl(lfd, F_GETFD) & FD_CLOEXEC, 0);
    a.tcp.port = bound_port(lfd);
    ck_assert_int_gt(a.tcp.port, 0);

    cfd = net_connect(&a, err, sizeof(err));
    ck_assert_msg(cfd >= 0, "%s", err);
    afd = accept(lfd, NULL, NULL);
    ck_assert_int_ge(afd, 0);
    ck_assert_int_eq(write(cfd, "x", 1), 1);
    char c = 0;
    ck_assert_int_eq(read(afd, &c, 1), 1);
    ck_assert_int_eq(c, 'x');
    close(afd);
    close(cfd);

    /* the port is taken: the error names the address */
    busy = net_listen(&a, 16, err, sizeof(err));
    ck_assert_int_eq(busy, -1);
    snprintf(expect, sizeof(expect), "127.0.0.1:%d: ", a.tcp.port);
    ck_assert_msg(strncmp(err, expect, strlen(expect)) == 0, "%s", err);
    ck_assert_ptr_nonnull(strstr(err, "in use"));
    close(lfd);

    /* nobody listens any more */
    ck_assert_int_eq(net_connect(&a, err, sizeof(err)), -1);
    ck_assert_int_eq(errno, ECONNREFUSED);
    ck_assert_ptr_nonnull(strstr(err, expect));
}
END_TEST

static int sockopt(int fd, int level, int name)
{
    int v = -1;
    socklen_t len = sizeof(v);

    ck_assert_int_eq(getsockopt(fd, level, name, &v, &len), 0);
    return v;
}

/* The keepalive options are set on a connected socket, as the store sets
 * them on its connections to Redis; a socket that is not TCP refuses. */
START_TEST(test_tcp_keepalive)
{
    struct net_addr a = {.kind = NET_ADDR_TCP, .tcp = {"127.0.0.1", 0}};
    char err[256];
    int lfd, cfd, sv[2];

    lfd = net_listen(&a, 16, err, sizeof(err));
    ck_assert_msg(lfd >= 0, "%s", err);
    a.tcp.port = bound_port(lfd);
    cfd = net_connect(&a, err, sizeof(err));
    ck_assert_msg(cfd >= 0, "%s", err);
    ck_assert_int_eq(sockopt(cfd, SOL_SOCKET, SO_KEEPALIVE), 0);
    ck_assert_int_eq(net_tcp_keepalive(cfd, 10, 5, 3), 0);
    ck_assert_int_ne(sockopt(cfd, SOL_SOCKET, SO_KEEPALIVE), 0);
    ck_assert_int_eq(sockopt(cfd, IPPROTO_TCP, TCP_KEEPIDLE), 10);
    ck_assert_int_eq(sockopt(cfd, IPPROTO_TCP, TCP_KEEPINTVL), 5);
    ck_assert_int_eq(sockopt(cfd, IPPROTO_TCP, TCP_KEEPCNT), 3);
    close(cfd);
    close(lfd);

    ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    ck_assert_int_eq(net_tcp_keepalive(sv[0], 10, 5, 3), -1);
    close(sv[0]);
    close(sv[1]);
}
END_TEST

START_TEST(test_listen_unix)
{
    struct net_addr a;
    char text[64], err[256];
    int lfd, cfd, fd;

    snprintf(text, sizeof(text), "unix:/tmp/test_net_%d.sock", (int)getpid());
    ck_assert_int_eq(net_parse_addr(text, 0, &a), 0);
    unlink(a.path);
    lfd = net_listen(&a, 4, err, sizeof(err));
    ck_assert_msg(lfd >= 0, "%s", err);
    cfd = net_connect(&a, err, sizeof(err));
    ck_assert_msg(cfd >= 0, "%s", err);
    close(cfd);
    close(lfd);

    /* a stale socket left behind is replaced */
    lfd = net_listen(&a, 4, err, sizeof(err));
    ck_assert_msg(lfd >= 0, "%s", err);
    close(lfd);
    unlink(a.path);

    /* anything else at the path is not */
    fd = open(a.path, O_CREAT | O_WRONLY, 0600);
    ck_assert_int_ge(fd, 0);
    close(fd);
    ck_assert_int_eq(net_listen(&a, 4, err, sizeof(err)), -1);
    ck_assert_ptr_nonnull(strstr(err, text));
    ck_assert_ptr_nonnull(strstr(err, "in use"));
    unlink(a.path);
}
END_TEST

START_TEST(test_no_address)
{
    struct net_addr a;
    char err[64];

    memset(&a, 0, sizeof(a));
    ck_assert_int_eq(net_listen(&a, 4, err, sizeof(err)), -1);
    ck_assert_int_eq(net_connect(&a, err, sizeof(err)), -1);
}
END_TEST

/* ---- accept errors and names ------------------------------------------------------ */

static const struct {
    int err;
    int action;
} accept_errs[] = {
    {EAGAIN, NET_ACCEPT_WAIT},
    {EWOULDBLOCK, NET_ACCEPT_WAIT},
    {EBADF, NET_ACCEPT_WAIT},
    {EINVAL, NET_ACCEPT_WAIT},
    {EINTR, NET_ACCEPT_NEXT},
    {ECONNABORTED, NET_ACCEPT_NEXT},
    {EPROTO, NET_ACCEPT_NEXT},
    {EPERM, NET_ACCEPT_NEXT},
    /* the listening socket stays readable: watching it would spin */
    {EMFILE, NET_ACCEPT_PAUSE},
    {ENFILE, NET_ACCEPT_PAUSE},
    {ENOBUFS, NET_ACCEPT_PAUSE},
    {ENOMEM, NET_ACCEPT_PAUSE},
};

START_TEST(test_accept_action)
{
    ck_assert_int_eq(net_accept_action(accept_errs[_i].err), accept_errs[_i].action);
}
END_TEST

/* Check runs each test in a child: the limit changed here is that child's. */
START_TEST(test_raise_nofile)
{
    struct rlimit rl, low;

    ck_assert_int_eq(getrlimit(RLIMIT_NOFILE, &rl), 0);
    ck_assert(net_raise_nofile(0) == (rl.rlim_cur == RLIM_INFINITY ? UINT64_MAX : rl.rlim_cur));
    if (rl.rlim_max != RLIM_INFINITY && rl.rlim_max < 64)
        return;
    low.rlim_cur = 32;
    low.rlim_max = rl.rlim_max;
    ck_assert_int_eq(setrlimit(RLIMIT_NOFILE, &low), 0);
    ck_assert_uint_eq(net_raise_nofile(48), 48);
    ck_assert_uint_eq(net_raise_nofile(40), 48); /* never lowered */
    if (rl.rlim_max != RLIM_INFINITY)            /* never above the hard limit */
        ck_assert_uint_eq(net_raise_nofile((uint64_t)rl.rlim_max + 1), rl.rlim_max);
}
END_TEST

static const struct {
    const char *host;
    int numeric;
} hosts[] = {
    {"127.0.0.1", 1},       {"10.1.2.3", 1},  {"::1", 1},       {"2001:db8::7", 1},
    {"::ffff:10.0.0.1", 1}, {"localhost", 0}, {"redis-1", 0},   {"1.2.3", 0},
    {"[::1]", 0},           {"", 0},          {"256.1.1.1", 0}, {"1.2.3.4.example", 0},
};

START_TEST(test_numeric_host)
{
    ck_assert_int_eq(net_host_is_numeric(hosts[_i].host), hosts[_i].numeric);
}
END_TEST

/* A numeric host is copied without a lookup; "localhost" comes from
 * /etc/hosts (files before dns in every nsswitch.conf we run on); an
 * .invalid name (RFC 6761) never resolves. */
START_TEST(test_resolve_host)
{
    char ip[NET_NUMERIC_MAX], err[128], small[4];

    ck_assert_int_eq(net_resolve_host("10.9.8.7", ip, sizeof(ip), err, sizeof(err)), 0);
    ck_assert_str_eq(ip, "10.9.8.7");
    ck_assert_int_eq(net_resolve_host("2001:db8::7", ip, sizeof(ip), err, sizeof(err)), 0);
    ck_assert_str_eq(ip, "2001:db8::7");
    ck_assert_int_eq(net_resolve_host("10.9.8.7", small, sizeof(small), err, sizeof(err)), -1);

    /* IPv4 first, as hiredis does, even where ::1 is localhost too */
    ck_assert_int_eq(net_resolve_host("localhost", ip, sizeof(ip), err, sizeof(err)), 0);
    ck_assert_str_eq(ip, "127.0.0.1");

    ck_assert_int_eq(net_resolve_host("no-such-host.invalid", ip, sizeof(ip), err, sizeof(err)),
                     -1);
    ck_assert_ptr_nonnull(strstr(err, "no-such-host.invalid: "));
}
END_TEST

#define LOOP(tc, fn, table) tcase_add_loop_test(tc, fn, 0, (int)(sizeof(table) / sizeof(table[0])))

static Suite *net_suite(void)
{
    Suite *s = suite_create("net");
    TCase *tc;

    tc = tcase_create("parse");
    LOOP(tc, test_parse_addr, addrs);
    CHECK_ADD(tc, test_overlong, test_parse_hostport_len, test_format, test_format_peer);
    suite_add_tcase(s, tc);

    tc = tcase_create("cidr");
    LOOP(tc, test_cidr_parse, cidrs);
    LOOP(tc, test_cidr_match, matches);
    tcase_add_test(tc, test_peer_allowed);
    suite_add_tcase(s, tc);

    tc = tcase_create("sockets");
    CHECK_ADD(tc, test_listen_tcp, test_listen_unix, test_tcp_keepalive, test_no_address);
    suite_add_tcase(s, tc);

    tc = tcase_create("accept and names");
    LOOP(tc, test_accept_action, accept_errs);
    tcase_add_test(tc, test_raise_nofile);
    LOOP(tc, test_numeric_host, hosts);
    tcase_add_test(tc, test_resolve_host);
    tcase_set_timeout(tc, 30); /* a lookup of .invalid may ask a slow DNS server */
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return check_run(net_suite());
}
