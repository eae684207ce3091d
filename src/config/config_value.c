/* config_value.c - the syntax of configuration values: numbers, durations,
 * rates, booleans, shares, CIDRs, listen addresses, Redis URLs, rule names
 * and comma-separated lists; and the peer check against [agent] allow.
 *
 * Pure string and address work: no inih, no parse state, no error text (the
 * caller words the error: config_set.c). config.c keeps the file and sections.
 */
#include "config_value.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/un.h>

#include "config.h"

/* ---- value parsers --------------------------------------------------------- */

/* Exactly len decimal digits (len > 0), no sign, no overflow. */
int config_parse_digits(const char *s, size_t len, uint64_t *v)
{
    uint64_t n = 0;

    if (len == 0)
        return -1;
    for (size_t i = 0; i < len; i++) {
        if (s[i] < '0' || s[i] > '9')
            return -1;
        if (n > (UINT64_MAX - (uint64_t)(s[i] - '0')) / 10)
            return -1;
        n = n * 10 + (uint64_t)(s[i] - '0');
    }
    *v = n;
    return 0;
}

static int unit_ms(const char *u, uint64_t *mult)
{
    static const struct {
        const char *name;
        uint64_t ms;
    } units[] = {{"ms", 1}, {"s", 1000}, {"m", 60000}, {"h", 3600000}, {"d", 86400000}};

    for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++) {
        if (strcmp(u, units[i].name) == 0) {
            *mult = units[i].ms;
            return 0;
        }
    }
    return -1;
}

int config_parse_duration(const char *s, uint64_t *ms)
{
    size_t ndig = 0;
    uint64_t n, mult;

    if (!s)
        return -1;
    while (s[ndig] >= '0' && s[ndig] <= '9')
        ndig++;
    if (config_parse_digits(s, ndig, &n) == -1 || unit_ms(s + ndig, &mult) == -1)
        return -1;
    if (n == 0 || n > CFG_MAX_DURATION_MS / mult)
        return -1;
    *ms = n * mult;
    return 0;
}

int config_parse_rate(const char *s, uint64_t *n, uint64_t *period_ms)
{
    const char *slash;
    uint64_t count, mult;

    if (!s || !(slash = strchr(s, '/')))
        return -1;
    if (config_parse_digits(s, (size_t)(slash - s), &count) == -1 || count < 1 ||
        count > CFG_MAX_COUNT)
        return -1;
    /* "100/m" reads as "100/1m" */
    if (unit_ms(slash + 1, &mult) == 0)
        *period_ms = mult;
    else if (config_parse_duration(slash + 1, period_ms) == -1)
        return -1;
    *n = count;
    return 0;
}

int config_parse_bool(const char *s, int *b)
{
    static const char *const yes[] = {"yes", "on", "true", "1"};
    static const char *const no[] = {"no", "off", "false", "0"};

    if (!s)
        return -1;
    for (size_t i = 0; i < 4; i++) {
        if (strcasecmp(s, yes[i]) == 0) {
            *b = 1;
            return 0;
        }
        if (strcasecmp(s, no[i]) == 0) {
            *b = 0;
            return 0;
        }
    }
    return -1;
}

int config_parse_cidr(const char *s, struct cfg_cidr *c)
{
    char buf[INET6_ADDRSTRLEN];
    const char *slash;
    size_t alen;
    unsigned maxbits;
    uint64_t prefix;

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
    if (slash &&
        (config_parse_digits(slash + 1, strlen(slash + 1), &prefix) == -1 || prefix > maxbits))
        return -1;
    c->prefix = (unsigned)prefix;
    /* keep the network part only, as HAProxy does with "10.1.2.3/8" */
    for (unsigned bit = c->prefix; bit < maxbits; bit++)
        c->addr[bit / 8] &= (uint8_t) ~(0x80u >> (bit % 8));
    return 0;
}

/* (0, 1]; NaN fails both comparisons. */
int config_parse_share(const char *s, double *d)
{
    char *end;
    double v;

    if (!*s || isspace((unsigned char)*s))
        return -1;
    errno = 0;
    v = strtod(s, &end);
    if (*end || errno || !(v > 0.0 && v <= 1.0))
        return -1;
    *d = v;
    return 0;
}

/* ---- address syntax -------------------------------------------------------- */

static int valid_port(const char *s)
{
    uint64_t port;

    return config_parse_digits(s, strlen(s), &port) == 0 && port >= 1 && port <= 65535 ? 0 : -1;
}

/* A hostname or IPv4 literal; any_ok also accepts "" and "*" (all addresses). */
static int valid_host(const char *h, size_t len, int any_ok)
{
    char buf[INET_ADDRSTRLEN];
    struct in_addr a;
    size_t i;

    if (len == 0 || (len == 1 && h[0] == '*'))
        return any_ok ? 0 : -1;
    if (len > 253 || h[0] == '-' || h[0] == '.')
        return -1;
    for (i = 0; i < len && (isdigit((unsigned char)h[i]) || h[i] == '.'); i++)
        ;
    if (i == len) { /* all digits and dots: must be a real IPv4 address */
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

/* host:port or [v6]:port */
int config_valid_hostport(const char *s, int any_ok)
{
    const char *colon;

    if (s[0] == '[') {
        char buf[INET6_ADDRSTRLEN];
        struct in6_addr a;
        const char *close = strchr(s, ']');
        size_t len = close ? (size_t)(close - s - 1) : 0;

        if (!close || close[1] != ':' || len == 0 || len >= sizeof(buf))
            return -1;
        memcpy(buf, s + 1, len);
        buf[len] = '\0';
        if (inet_pton(AF_INET6, buf, &a) != 1)
            return -1;
        return valid_port(close + 2);
    }
    colon = strrchr(s, ':');
    if (!colon || memchr(s, ':', (size_t)(colon - s))) /* IPv6 needs brackets */
        return -1;
    if (valid_host(s, (size_t)(colon - s), any_ok) == -1)
        return -1;
    return valid_port(colon + 1);
}

static int valid_unix_path(const char *path)
{
    return path[0] == '/' && strlen(path) < sizeof(((struct sockaddr_un *)0)->sun_path) ? 0 : -1;
}

int config_valid_listen(const char *s)
{
    if (strncmp(s, "unix:", 5) == 0)
        return valid_unix_path(s + 5);
    return config_valid_hostport(s, 1);
}

/* redis://[:password@]host:port[/db] or unix:/path; syntax only, the store
 * module takes the URL apart. */
int config_valid_redis_url(const char *s)
{
    char hp[CONFIG_MAX_ITEM];
    const char *p, *at, *slash;
    uint64_t db;
    size_t len;

    if (strncmp(s, "unix:", 5) == 0)
        return valid_unix_path(s + 5);
    if (strncmp(s, "redis://", 8) != 0)
        return -1;
    p = s + 8;
    at = strrchr(p, '@'); /* the password may itself hold '@' */
    if (at) {
        if (p[0] != ':' || at - p < 2)
            return -1;
        p = at + 1;
    }
    slash = strchr(p, '/');
    len = slash ? (size_t)(slash - p) : strlen(p);
    if (len >= sizeof(hp))
        return -1;
    memcpy(hp, p, len);
    hp[len] = '\0';
    if (config_valid_hostport(hp, 0) == -1)
        return -1;
    if (slash && (config_parse_digits(slash + 1, strlen(slash + 1), &db) == -1 || db > 65535))
        return -1;
    return 0;
}

int config_valid_rule_name(const char *s, size_t len)
{
    if (len == 0 || len > CFG_MAX_NAME)
        return -1;
    for (size_t i = 0; i < len; i++) {
        if (!isalnum((unsigned char)s[i]) && !strchr("_.-", s[i]))
            return -1;
    }
    return 0;
}

/* Next comma-separated item of *p, trimmed, copied into item (CONFIG_MAX_ITEM
 * bytes). Returns 1 for an item, 0 at the end, -1 when the item is too long
 * (item then holds its start). Empty items are skipped. */
int config_next_item(const char **p, char *item)
{
    for (;;) {
        const char *s = *p, *e;
        size_t len;

        if (!*s)
            return 0;
        e = strchr(s, ',');
        if (!e)
            e = s + strlen(s);
        *p = *e ? e + 1 : e;
        while (s < e && isspace((unsigned char)*s))
            s++;
        while (e > s && isspace((unsigned char)e[-1]))
            e--;
        len = (size_t)(e - s);
        if (len == 0)
            continue;
        if (len >= CONFIG_MAX_ITEM) {
            memcpy(item, s, CONFIG_MAX_ITEM - 1);
            item[CONFIG_MAX_ITEM - 1] = '\0';
            return -1;
        }
        memcpy(item, s, len);
        item[len] = '\0';
        return 1;
    }
}

/* ---- peers ------------------------------------------------------------------ */

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

int config_peer_allowed(const struct config *cfg, const struct sockaddr *sa)
{
    uint8_t v4[4], v6[16];
    int has4 = 0, has6 = 0;

    if (cfg->nallow == 0)
        return 1;
    if (!sa)
        return 0;
    if (sa->sa_family == AF_UNIX)
        return 1;
    if (sa->sa_family == AF_INET) {
        struct sockaddr_in sin;

        memcpy(&sin, sa, sizeof(sin)); /* sa may be less aligned than sockaddr_in */
        memcpy(v4, &sin.sin_addr, 4);
        has4 = 1;
    } else if (sa->sa_family == AF_INET6) {
        struct sockaddr_in6 sin6;

        memcpy(&sin6, sa, sizeof(sin6));
        memcpy(v6, &sin6.sin6_addr, 16);
        has6 = 1;
        if (IN6_IS_ADDR_V4MAPPED(&sin6.sin6_addr)) { /* ::ffff:a.b.c.d on a dual-stack socket */
            memcpy(v4, v6 + 12, 4);
            has4 = 1;
        }
    }
    for (size_t i = 0; i < cfg->nallow; i++) {
        const struct cfg_cidr *c = &cfg->allow[i];

        if ((c->family == AF_INET && has4 && prefix_match(c->addr, v4, c->prefix)) ||
            (c->family == AF_INET6 && has6 && prefix_match(c->addr, v6, c->prefix)))
            return 1;
    }
    return 0;
}
