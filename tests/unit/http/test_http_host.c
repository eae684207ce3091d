/* SPDX-License-Identifier: Apache-2.0 */
/* test_http_host.c - the stats listener's Host check (http_host.h): Host
 * values taken apart, stats_hosts items checked, and which Host a listener
 * on v4, v6, a dual-stack socket, port 80 or a unix path answers: its own
 * address, localhost, loopback, listed names; never a rebinding page's
 * name, a missing Host or one with the wrong port. */
#include "http/http_host.h"

#include <arpa/inet.h>
#include <check.h>
#include <netinet/in.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>

#include "check_util.h"
#include "core/hostname.h"

static const struct {
    const char *v;
    int ok;
    const char *name;
    unsigned port;
} splits[] = {
    {"127.0.0.1:9145", 1, "127.0.0.1", 9145},
    {"localhost", 1, "localhost", 0},
    {"Stats.Example.COM:80", 1, "Stats.Example.COM", 80},
    {"[::1]:9145", 1, "::1", 9145},
    {"[::1]", 1, "::1", 0},
    {"[2001:db8::7]:65535", 1, "2001:db8::7", 65535},
    {"a_b-c.d", 1, "a_b-c.d", 0},
    {"", 0, NULL, 0},
    {":9145", 0, NULL, 0},
    {"host:", 0, NULL, 0},
    {"host:0", 0, NULL, 0},
    {"host:65536", 0, NULL, 0},
    {"host:123456", 0, NULL, 0},
    {"host:+80", 0, NULL, 0},
    {"host:80:81", 0, NULL, 0},
    {"ho st", 0, NULL, 0},
    {"user@host", 0, NULL, 0},
    {"host/path", 0, NULL, 0},
    {"[]:80", 0, NULL, 0},
    {"[::1", 0, NULL, 0},
    {"[::1]x", 0, NULL, 0},
    {"[evil.example]:80", 0, NULL, 0},
    {"::1", 0, NULL, 0},
};

START_TEST(test_split)
{
    const char *name = NULL;
    size_t nlen = 0;
    unsigned port = 7;
    int rc = hostname_split(splits[_i].v, strlen(splits[_i].v), &name, &nlen, &port);

    ck_assert_msg(rc == (splits[_i].ok ? 0 : -1), "'%s': rc %d", splits[_i].v, rc);
    if (!splits[_i].ok)
        return;
    ck_assert_uint_eq(nlen, strlen(splits[_i].name));
    ck_assert(memcmp(name, splits[_i].name, nlen) == 0);
    ck_assert_uint_eq(port, splits[_i].port);
}
END_TEST

START_TEST(test_item)
{
    char out[HOSTNAME_ITEM_MAX];
    char longname[400];

    ck_assert_int_eq(hostname_item("Stats.Example.com:8443", out, sizeof(out)), 0);
    ck_assert_str_eq(out, "stats.example.com:8443");
    ck_assert_int_eq(hostname_item("[2001:DB8::1]", out, sizeof(out)), 0);
    ck_assert_str_eq(out, "[2001:db8::1]");
    ck_assert_int_eq(hostname_item("http://x", out, sizeof(out)), -1);
    ck_assert_int_eq(hostname_item("x:99999", out, sizeof(out)), -1);
    memset(longname, 'a', sizeof(longname) - 1);
    longname[sizeof(longname) - 1] = '\0';
    ck_assert_int_eq(hostname_item(longname, out, sizeof(out)), -1);
    ck_assert_int_eq(hostname_item("abc", out, 3), -1); /* no room for the NUL */
}
END_TEST

static struct sockaddr_storage self;

static const struct sockaddr *v4(const char *ip, unsigned port)
{
    struct sockaddr_in *in = (struct sockaddr_in *)&self;

    memset(&self, 0, sizeof(self));
    in->sin_family = AF_INET;
    in->sin_port = htons((uint16_t)port);
    ck_assert_int_eq(inet_pton(AF_INET, ip, &in->sin_addr), 1);
    return (const struct sockaddr *)&self;
}

static const struct sockaddr *v6(const char *ip, unsigned port)
{
    struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)&self;

    memset(&self, 0, sizeof(self));
    in6->sin6_family = AF_INET6;
    in6->sin6_port = htons((uint16_t)port);
    ck_assert_int_eq(inet_pton(AF_INET6, ip, &in6->sin6_addr), 1);
    return (const struct sockaddr *)&self;
}

static int allowed(const char *host, const struct sockaddr *sa, const char *names)
{
    return http_host_allowed(host, host ? strlen(host) : 0, sa, names);
}

START_TEST(test_v4_listener)
{
    ck_assert_int_eq(allowed("127.0.0.1:9145", v4("127.0.0.1", 9145), NULL), 1);
    ck_assert_int_eq(allowed("localhost:9145", v4("127.0.0.1", 9145), NULL), 1);
    ck_assert_int_eq(allowed("LOCALHOST", v4("127.0.0.1", 9145), NULL), 1);
    ck_assert_int_eq(allowed("[::1]:9145", v4("127.0.0.1", 9145), NULL), 1);
    ck_assert_int_eq(allowed("10.1.2.3:9145", v4("10.1.2.3", 9145), NULL), 1);
    ck_assert_int_eq(allowed("127.0.0.1:9145", v4("10.1.2.3", 9145), NULL), 1);
    /* the rebinding page: its own name, with or without the port */
    ck_assert_int_eq(allowed("evil.example:9145", v4("127.0.0.1", 9145), NULL), 0);
    ck_assert_int_eq(allowed("evil.example", v4("127.0.0.1", 9145), NULL), 0);
    /* a missing or malformed Host */
    ck_assert_int_eq(allowed(NULL, v4("127.0.0.1", 9145), NULL), 0);
    ck_assert_int_eq(allowed("", v4("127.0.0.1", 9145), NULL), 0);
    ck_assert_int_eq(allowed("127.0.0.1:9145 x", v4("127.0.0.1", 9145), NULL), 0);
    /* another port, or none on a port other than 80 */
    ck_assert_int_eq(allowed("127.0.0.1:9146", v4("127.0.0.1", 9145), NULL), 0);
    ck_assert_int_eq(allowed("127.0.0.1", v4("127.0.0.1", 9145), NULL), 0);
    ck_assert_int_eq(allowed("localhost:9146", v4("127.0.0.1", 9145), NULL), 0);
    /* another address of the host, or one in the wrong syntax */
    ck_assert_int_eq(allowed("10.9.9.9:9145", v4("10.1.2.3", 9145), NULL), 0);
    ck_assert_int_eq(allowed("127.0.0.2:9145", v4("127.0.0.1", 9145), NULL), 0);
    ck_assert_int_eq(allowed("[127.0.0.1]:9145", v4("127.0.0.1", 9145), NULL), 0);
    ck_assert_int_eq(allowed("2130706433:9145", v4("127.0.0.1", 9145), NULL), 0);
}
END_TEST

START_TEST(test_port_80)
{
    ck_assert_int_eq(allowed("127.0.0.1", v4("127.0.0.1", 80), NULL), 1);
    ck_assert_int_eq(allowed("127.0.0.1:80", v4("127.0.0.1", 80), NULL), 1);
    ck_assert_int_eq(allowed("[::1]", v6("::1", 80), NULL), 1);
    ck_assert_int_eq(allowed("localhost", v4("127.0.0.1", 80), NULL), 1);
    ck_assert_int_eq(allowed("evil.example", v4("127.0.0.1", 80), NULL), 0);
}
END_TEST

START_TEST(test_v6_listener)
{
    ck_assert_int_eq(allowed("[::1]:9145", v6("::1", 9145), NULL), 1);
    ck_assert_int_eq(allowed("[0:0::1]:9145", v6("::1", 9145), NULL), 1);
    ck_assert_int_eq(allowed("[2001:db8::7]:9145", v6("2001:db8::7", 9145), NULL), 1);
    ck_assert_int_eq(allowed("[2001:DB8::7]:9145", v6("2001:db8::7", 9145), NULL), 1);
    ck_assert_int_eq(allowed("127.0.0.1:9145", v6("::1", 9145), NULL), 1);
    ck_assert_int_eq(allowed("[2001:db8::8]:9145", v6("2001:db8::7", 9145), NULL), 0);
    ck_assert_int_eq(allowed("[::1]:9146", v6("::1", 9145), NULL), 0);
    ck_assert_int_eq(allowed("evil.example:9145", v6("::1", 9145), NULL), 0);
    /* a dual-stack socket: a v4 peer arrives on ::ffff:10.1.2.3 */
    ck_assert_int_eq(allowed("10.1.2.3:9145", v6("::ffff:10.1.2.3", 9145), NULL), 1);
    ck_assert_int_eq(allowed("10.1.2.4:9145", v6("::ffff:10.1.2.3", 9145), NULL), 0);
}
END_TEST

START_TEST(test_listed)
{
    const char *names = "stats.example.com,mon.example.com:8443,[2001:db8::9]";

    ck_assert_int_eq(allowed("stats.example.com", v4("10.1.2.3", 9145), names), 1);
    ck_assert_int_eq(allowed("STATS.example.com:9145", v4("10.1.2.3", 9145), names), 1);
    ck_assert_int_eq(allowed("stats.example.com:9999", v4("10.1.2.3", 9145), names), 0);
    ck_assert_int_eq(allowed("mon.example.com:8443", v4("10.1.2.3", 9145), names), 1);
    ck_assert_int_eq(allowed("mon.example.com", v4("10.1.2.3", 9145), names), 0);
    ck_assert_int_eq(allowed("mon.example.com:9145", v4("10.1.2.3", 9145), names), 0);
    ck_assert_int_eq(allowed("[2001:db8::9]:9145", v4("10.1.2.3", 9145), names), 1);
    ck_assert_int_eq(allowed("example.com:9145", v4("10.1.2.3", 9145), names), 0);
    ck_assert_int_eq(allowed("stats.example.co", v4("10.1.2.3", 9145), names), 0);
    ck_assert_int_eq(allowed("evil.example:9145", v4("10.1.2.3", 9145), names), 0);
    ck_assert_int_eq(allowed("stats.example.com", v4("10.1.2.3", 9145), ""), 0);
}
END_TEST

START_TEST(test_unix_listener)
{
    struct sockaddr_un un = {.sun_family = AF_UNIX};

    ck_assert_int_eq(allowed("evil.example", (const struct sockaddr *)&un, NULL), 1);
    ck_assert_int_eq(allowed(NULL, (const struct sockaddr *)&un, NULL), 1);
}
END_TEST

static Suite *http_host_suite(void)
{
    Suite *s = suite_create("http_host");
    TCase *tc = tcase_create("host");

    CHECK_LOOP(tc, test_split, splits);
    CHECK_ADD(tc, test_item, test_v4_listener, test_port_80, test_v6_listener, test_listed,
              test_unix_listener);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return check_run(http_host_suite());
}
