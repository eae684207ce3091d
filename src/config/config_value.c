/* SPDX-License-Identifier: Apache-2.0 */
/* config_value.c - the syntax of configuration values: numbers, durations,
 * rates, booleans, shares, Redis URLs, rule names and comma-separated lists.
 * Addresses and CIDRs are net.c's; the public wrappers for them
 * (config_parse_cidr, config_peer_allowed) are here.
 *
 * Pure string work: no inih, no parse state, no error text (the caller words
 * the error: config_set.c). config_load.c keeps the file and sections.
 */
#include "config_value.h"

#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "config.h"
#include "core/net.h"

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
    } units[] = {{"ms", 1},       {"s", 1000},     {"m", 60000}, {"h", 3600000},
                 {"d", 86400000}, {"w", 604800000}}; /* a week: quotas (fixed windows) */

    for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++) {
        if (strcmp(u, units[i].name) == 0) {
            *mult = units[i].ms;
            return 0;
        }
    }
    return -1;
}

int config_duration(const char *s, uint64_t *ms)
{
    size_t ndig = 0;
    uint64_t n, mult;

    if (!s)
        return -1;
    while (s[ndig] >= '0' && s[ndig] <= '9')
        ndig++;
    if (unit_ms(s + ndig, &mult) == -1)
        return -1;
    if (config_parse_digits(s, ndig, &n) == -1)
        return ndig > 0 ? CONFIG_ETOOLONG : -1; /* digits that overflow 64 bits */
    if (n == 0)
        return -1;
    if (n > CFG_MAX_DURATION_MS / mult)
        return CONFIG_ETOOLONG;
    *ms = n * mult;
    return 0;
}

int config_duration_or_off(const char *s, uint64_t *ms)
{
    size_t zeros = s ? strspn(s, "0") : 0;
    uint64_t mult;

    if (zeros > 0 && (s[zeros] == '\0' || unit_ms(s + zeros, &mult) == 0)) {
        *ms = 0;
        return 0;
    }
    return config_duration(s, ms);
}

int config_parse_duration(const char *s, uint64_t *ms)
{
    return config_duration(s, ms) == 0 ? 0 : -1;
}

int config_rate(const char *s, uint64_t *n, uint64_t *period_ms)
{
    const char *slash;
    uint64_t count, mult;
    int rc;

    if (!s || !(slash = strchr(s, '/')))
        return -1;
    if (config_parse_digits(s, (size_t)(slash - s), &count) == -1 || count < 1 ||
        count > CFG_MAX_COUNT)
        return -1;
    /* "100/m" reads as "100/1m" */
    if (unit_ms(slash + 1, &mult) == 0)
        *period_ms = mult;
    else if ((rc = config_duration(slash + 1, period_ms)) != 0)
        return rc;
    *n = count;
    return 0;
}

int config_parse_rate(const char *s, uint64_t *n, uint64_t *period_ms)
{
    return config_rate(s, n, period_ms) == 0 ? 0 : -1;
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
    return net_cidr_parse(s, c);
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

/* ---- Redis URL ------------------------------------------------------------- */

/* redis://[[user]:password@]host:port[/db] or unix:/path. */
int config_parse_redis_url(const char *s, struct net_addr *addr, int *db, const char **user,
                           size_t *user_len, const char **password, size_t *password_len)
{
    const char *p, *at, *slash, *colon;
    uint64_t n = 0;
    size_t len;

    *user = *password = NULL;
    *user_len = *password_len = 0;
    *db = 0;
    if (strncmp(s, "unix:", 5) == 0)
        return net_parse_addr(s, 0, addr);
    if (strncmp(s, "redis://", 8) != 0)
        return -1;
    p = s + 8;
    at = strrchr(p, '@'); /* the password may itself hold '@' */
    if (at) {
        colon = memchr(p, ':', (size_t)(at - p)); /* a user name holds no ':' */
        if (!colon || at - colon < 2)
            return -1;
        if (colon > p) {
            *user = p;
            *user_len = (size_t)(colon - p);
        }
        *password = colon + 1;
        *password_len = (size_t)(at - colon - 1);
        p = at + 1;
    }
    slash = strchr(p, '/');
    len = slash ? (size_t)(slash - p) : strlen(p);
    memset(addr, 0, sizeof(*addr));
    if (len >= CONFIG_MAX_ITEM || net_parse_hostport(p, len, 0, &addr->tcp) == -1)
        return -1;
    addr->kind = NET_ADDR_TCP;
    if (slash && (config_parse_digits(slash + 1, strlen(slash + 1), &n) == -1 || n > 65535))
        return -1;
    *db = (int)n;
    return 0;
}

/* %XX escapes of a url's userinfo (RFC 3986): "p%40ss" is "p@ss". Writes
 * the decoded bytes and a NUL into out (room for len + 1 bytes); -1 on a '%'
 * not followed by two hex digits, or on %00 (a password is a C string). */
int config_percent_decode(const char *s, size_t len, char *out, size_t *out_len)
{
    size_t n = 0;

    for (size_t i = 0; i < len; i++) {
        int hi, lo;

        if (s[i] != '%') {
            out[n++] = s[i];
            continue;
        }
        hi = i + 1 < len && isxdigit((unsigned char)s[i + 1]) ? s[i + 1] : -1;
        lo = i + 2 < len && isxdigit((unsigned char)s[i + 2]) ? s[i + 2] : -1;
        if (hi < 0 || lo < 0)
            return -1;
        hi = isdigit(hi) ? hi - '0' : (tolower(hi) - 'a' + 10);
        lo = isdigit(lo) ? lo - '0' : (tolower(lo) - 'a' + 10);
        if (hi == 0 && lo == 0)
            return -1;
        out[n++] = (char)(hi * 16 + lo);
        i += 2;
    }
    out[n] = '\0';
    *out_len = n;
    return 0;
}

/* ---- names and lists ------------------------------------------------------- */

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

int config_peer_allowed(const struct config *cfg, const struct sockaddr *sa)
{
    return net_peer_allowed(cfg->allow, cfg->nallow, sa);
}
