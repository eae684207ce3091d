/* SPDX-License-Identifier: Apache-2.0 */
/* config_set.c - one key's value into its field of struct config or of the
 * current rule: checked with the value parsers of config_value.c, each
 * failure worded as a "FILE:LINE:" error naming the key. Addresses are
 * stored twice: as written (to show) and parsed (to use).
 *
 * The key table that says which field and type each key has is in config_keys.c.
 */
#include "config_set.h"

#include <ctype.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "config_errors.h"
#include "config_value.h"
#include "core/net.h"
#include "core/hostname.h"

static int set_string(struct parse_state *st, char **field, const char *value)
{
    char *copy = strdup(value);

    if (!copy) {
        config_errors_add(&st->errors, st->line, "out of memory");
        return -1;
    }
    free(*field);
    *field = copy;
    return 0;
}

static void set_uint(struct parse_state *st, const struct key_def *d, void *field, const char *v)
{
    uint64_t n;

    if (config_parse_digits(v, strlen(v), &n) == -1 || n < d->min || n > d->max) {
        config_errors_add(&st->errors, st->line,
                          "bad number '%.80s' for '%s' (expected an integer from %llu to %llu)", v,
                          d->name, (unsigned long long)d->min, (unsigned long long)d->max);
        return;
    }
    /* fields are int, uint32_t, size_t or uint64_t; values fit the field by range */
    if (d->size == sizeof(uint32_t)) {
        uint32_t n32 = (uint32_t)n;
        memcpy(field, &n32, sizeof(n32));
    } else {
        memcpy(field, &n, sizeof(n));
    }
}

static void set_enum(struct parse_state *st, const struct key_def *d, int *field, const char *v)
{
    char expected[128] = "";
    size_t i;

    for (i = 0; d->names[i]; i++) {
        if (strcmp(v, d->names[i]) == 0) {
            *field = (int)i;
            return;
        }
    }
    for (i = 0; d->names[i]; i++) {
        const char *sep = i == 0 ? "" : d->names[i + 1] ? ", " : " or ";
        size_t used = strlen(expected);

        snprintf(expected + used, sizeof(expected) - used, "%s%s", sep, d->names[i]);
    }
    config_errors_add(&st->errors, st->line, "bad value '%.80s' for '%s' (expected %s)", v, d->name,
                      expected);
}

/* Appends hp to hosts. 0, or -1 when out of memory. */
static int hosts_add(struct cfg_hosts *hosts, const struct net_hostport *hp)
{
    struct net_hostport *grown = realloc(hosts->list, (hosts->n + 1) * sizeof(*grown));

    if (!grown)
        return -1;
    hosts->list = grown;
    hosts->list[hosts->n++] = *hp;
    return 0;
}

/* cluster / sentinel: a list of host:port, kept as "h1:p1,h2:p2" and parsed
 * into hosts; a continuation line appends to both. */
static void set_hosts(struct parse_state *st, const struct key_def *d, char **field,
                      struct cfg_hosts *hosts, const char *v)
{
    char item[CONFIG_MAX_ITEM];
    const char *p = v;
    char *list = NULL;
    size_t len = 0;
    int r, n = 0;

    if (st->cont && *field) { /* take the list over, give it back at the end */
        list = *field;
        len = strlen(list);
        *field = NULL;
    } else {
        free(hosts->list);
        hosts->list = NULL;
        hosts->n = 0;
        if (!*v) { /* empty: unset */
            free(*field);
            *field = NULL;
            return;
        }
    }
    while ((r = config_next_item(&p, item)) != 0) {
        struct net_hostport hp;
        char *grown;

        if (r == -1 || net_parse_hostport(item, strlen(item), 0, &hp) == -1) {
            /* not the item: it may hold a password */
            if (strchr(item, '@'))
                config_errors_add(&st->errors, st->line,
                                  "bad address in '%s': no user or password here (expected "
                                  "host:port; credentials go in %s)",
                                  d->name,
                                  strcmp(d->name, "sentinel") == 0
                                      ? "sentinel_username and sentinel_password"
                                      : "username and password");
            else
                config_errors_add(&st->errors, st->line,
                                  "bad address '%.80s' in '%s' (expected host:port or [v6]:port)",
                                  item, d->name);
            goto out;
        }
        if (!(grown = realloc(list, len + strlen(item) + 2)) || hosts_add(hosts, &hp) == -1) {
            if (grown)
                list = grown;
            config_errors_add(&st->errors, st->line, "out of memory");
            goto out;
        }
        list = grown;
        len += (size_t)sprintf(list + len, "%s%s", len ? "," : "", item);
        n++;
    }
    if (n == 0)
        config_errors_add(&st->errors, st->line, "empty list for '%s'", d->name);
out:
    free(*field);
    *field = list;
}

/* A CIDR list (d->off: the array, d->parsed: its count). The key's first line
 * replaces the default list; its continuation lines add to it. */
static void set_allow(struct parse_state *st, const struct key_def *d, const char *v)
{
    struct net_cidr *list = (struct net_cidr *)(void *)((char *)st->cfg + d->off);
    size_t *n = (size_t *)(void *)((char *)st->cfg + d->parsed);
    char item[CONFIG_MAX_ITEM];
    const char *p = v;
    int r;

    if (!st->cont)
        *n = 0;
    while ((r = config_next_item(&p, item)) != 0) {
        struct net_cidr c;

        if (r == -1 || net_cidr_parse(item, &c) == -1) {
            config_errors_add(&st->errors, st->line, "bad CIDR '%.80s' in '%s'", item, d->name);
            continue;
        }
        if (*n == CFG_MAX_ALLOW) {
            config_errors_add(&st->errors, st->line, "too many entries in '%s' (max %d)", d->name,
                              CFG_MAX_ALLOW);
            return;
        }
        list[(*n)++] = c;
    }
    /* "allow =" alone is the default: any peer; "stats_allow =" alone: any peer too */
}

/* stats_hosts: names or addresses with an optional :port, apart by commas
 * or blanks, kept lowercase as "a,b:1"; a continuation line appends, ""
 * alone unsets. */
static void set_names(struct parse_state *st, const struct key_def *d, char **field, const char *v)
{
    char item[HOSTNAME_ITEM_MAX];
    size_t len = st->cont && *field ? strlen(*field) : 0;
    char *list = len ? *field : NULL;

    if (!st->cont) {
        free(*field);
        *field = NULL;
    }
    while (*v) {
        size_t n = strcspn(v, ", \t");
        char *grown;

        if (n == 0) {
            v++;
            continue;
        }
        if (n < sizeof(item)) {
            memcpy(item, v, n);
            item[n] = '\0';
        }
        if (n >= sizeof(item) || hostname_item(item, item, sizeof(item)) == -1) {
            config_errors_add(&st->errors, st->line,
                              "bad host '%.*s' in '%s' (expected a name or address with an "
                              "optional :port, e.g. stats.example.com or 10.0.0.5:9145)",
                              (int)(n > 80 ? 80 : n), v, d->name);
            v += n;
            continue;
        }
        if (!(grown = realloc(list, len + n + 2))) {
            config_errors_add(&st->errors, st->line, "out of memory");
            break;
        }
        list = grown;
        len += (size_t)sprintf(list + len, "%s%s", len ? "," : "", item);
        v += n;
    }
    *field = list;
}

static void set_keys(struct parse_state *st, struct cfg_rule *rule, const char *v)
{
    char item[CONFIG_MAX_ITEM];
    const char *p = v;
    int r, n = 0;

    while ((r = config_next_item(&p, item)) != 0) {
        size_t i;

        n++;
        for (i = 0; r == 1 && item[i]; i++) {
            if (isspace((unsigned char)item[i]))
                break;
        }
        if (r == -1 || item[i]) {
            config_errors_add(&st->errors, st->line, "bad arg name '%.80s' in 'key'", item);
            continue;
        }
        for (i = 0; i < rule->nkeys && strcmp(rule->keys[i], item) != 0; i++)
            ;
        if (i < rule->nkeys) {
            config_errors_add(&st->errors, st->line, "arg '%s' appears twice in 'key'", item);
            continue;
        }
        if (rule->nkeys == CFG_MAX_KEY_ARGS) {
            config_errors_add(&st->errors, st->line, "too many args in 'key' (max %d)",
                              CFG_MAX_KEY_ARGS);
            return;
        }
        if (!(rule->keys[rule->nkeys] = strdup(item))) {
            config_errors_add(&st->errors, st->line, "out of memory");
            return;
        }
        rule->key_lens[rule->nkeys] = strlen(item);
        rule->nkeys++;
    }
    if (n == 0)
        config_errors_add(&st->errors, st->line, "empty list for 'key'");
}

/* match = ARG REGEX: the regex is the rest of the line, so it may hold spaces
 * (but not " ;", which inih takes for a comment). */
static void set_match(struct parse_state *st, struct cfg_rule *rule, const char *v)
{
    struct cfg_match *m;
    const char *sp = v, *re;

    while (*sp && !isspace((unsigned char)*sp))
        sp++;
    re = sp;
    while (isspace((unsigned char)*re))
        re++;
    if (sp == v || !*re) {
        config_errors_add(&st->errors, st->line,
                          "'match' needs an arg and a regex: match = ARG REGEX");
        return;
    }
    if (rule->nmatches == CFG_MAX_MATCHES) {
        config_errors_add(&st->errors, st->line, "too many 'match' lines (max %d)",
                          CFG_MAX_MATCHES);
        return;
    }
    m = &rule->matches[rule->nmatches];
    m->arg = strndup(v, (size_t)(sp - v));
    m->pattern = strdup(re);
    if (!m->arg || !m->pattern) {
        config_errors_add(&st->errors, st->line, "out of memory");
        goto fail;
    }
    /* compiled once the whole rule set is read, within its budget
     * (config_budget.c) */
    m->line = st->line;
    rule->nmatches++;
    return;
fail:
    free(m->arg);
    free(m->pattern);
    m->arg = m->pattern = NULL;
}

static void set_str(struct parse_state *st, const struct key_def *d, char **field, const char *v)
{
    if ((d->flags & F_NONEMPTY) && !*v)
        config_errors_add(&st->errors, st->line, "empty value for '%s'", d->name);
    else if (d->max && strlen(v) > d->max) /* max: longest value, 0 = no limit */
        config_errors_add(&st->errors, st->line, "'%s' is longer than %llu bytes", d->name,
                          (unsigned long long)d->max);
    else
        set_string(st, field, v);
}

static void set_duration(struct parse_state *st, const struct key_def *d, uint64_t *field,
                         const char *v)
{
    int off = (d->flags & F_ZERO) != 0;
    int rc = off ? config_duration_or_off(v, field) : config_duration(v, field);

    if (rc == CONFIG_ETOOLONG)
        config_errors_add(
            &st->errors, st->line,
            "duration '%.80s' for '%s' is longer than the maximum of " CFG_MAX_DURATION_TEXT, v,
            d->name);
    else if (rc != 0)
        config_errors_add(&st->errors, st->line,
                          "bad duration '%.80s' for '%s' (expected %san integer > 0 and a unit: "
                          "ms, s, m, h, d or w)",
                          v, d->name, off ? "0 for off, or " : "");
    else if (*field != 0 && *field < d->min)
        config_errors_add(&st->errors, st->line,
                          "duration '%.80s' for '%s' is too short: %sat least %llums", v, d->name,
                          off ? "0 (off) or " : "", (unsigned long long)d->min);
}

static void set_bool(struct parse_state *st, const struct key_def *d, int *field, const char *v)
{
    if (config_parse_bool(v, field) == -1)
        config_errors_add(
            &st->errors, st->line,
            "bad boolean '%.80s' for '%s' (expected yes, no, on, off, true, false, 1 or 0)", v,
            d->name);
}

/* A share, or "auto" (CFG_SHARE_AUTO). */
static void set_share_auto(struct parse_state *st, const struct key_def *d, double *field,
                           const char *v)
{
    if (strcmp(v, "auto") == 0) {
        *field = CFG_SHARE_AUTO;
        return;
    }
    if (config_parse_share(v, field) == -1)
        config_errors_add(&st->errors, st->line,
                          "bad value '%.80s' for '%s' (expected auto or a number in (0, 1])", v,
                          d->name);
}

static void set_share(struct parse_state *st, const struct key_def *d, double *field, const char *v)
{
    char *end;

    if ((d->flags & F_ZERO) && *v && !isspace((unsigned char)*v) && strtod(v, &end) == 0.0 &&
        !*end) {
        *field = 0;
        return;
    }
    if (config_parse_share(v, field) == -1)
        config_errors_add(&st->errors, st->line, "bad value '%.80s' for '%s' (expected a number in %s1])",
                          v, d->name, d->flags & F_ZERO ? "[0, " : "(0, ");
}

/* listen, stats: kept as written and parsed. "" unsets an optional one. */
static void set_addr(struct parse_state *st, const struct key_def *d, char **field,
                     struct net_addr *addr, const char *v)
{
    struct net_addr parsed;

    if (!*v && (d->flags & F_OPT)) {
        free(*field);
        *field = NULL;
        memset(addr, 0, sizeof(*addr));
    } else if (net_parse_addr(v, NET_ANY_HOST, &parsed) == -1) {
        config_errors_add(
            &st->errors, st->line,
            "bad address '%.80s' for '%s' (expected host:port, [v6]:port or unix:/path)", v,
            d->name);
    } else if (set_string(st, field, v) == 0) {
        *addr = parsed;
    }
}

/* [redis] url: kept as written and taken apart. "" unsets it. */
static void set_url(struct parse_state *st, char **field, struct cfg_redis_url *url, const char *v)
{
    struct cfg_redis_url parsed = {.password = NULL};
    const char *user, *pw;
    size_t userlen, pwlen;

    if (!*v) {
        free(*field);
        *field = NULL;
        free(url->user);
        free(url->password);
        memset(url, 0, sizeof(*url));
        return;
    }
    if (config_parse_redis_url(v, &parsed.addr, &parsed.db, &user, &userlen, &pw, &pwlen) == -1) {
        /* an error line may reach a log: what precedes the last '@' may be
         * a password */
        const char *at = strrchr(v, '@');
        config_errors_add(
            &st->errors, st->line,
            "bad url '%s%.80s' (expected redis://[[user]:password@]host:port[/db] or unix:/path)",
            at ? "redis://***" : "", at ? at : v);
        return;
    }
    if ((pw && !(parsed.password = malloc(pwlen + 1))) ||
        (user && !(parsed.user = malloc(userlen + 1)))) {
        free(parsed.password);
        config_errors_add(&st->errors, st->line, "out of memory");
        return;
    }
    /* userinfo is percent-encoded: "p%40ss" is the password "p@ss" */
    if ((pw && config_percent_decode(pw, pwlen, parsed.password, &pwlen) == -1) ||
        (user && config_percent_decode(user, userlen, parsed.user, &userlen) == -1)) {
        free(parsed.user);
        free(parsed.password);
        config_errors_add(&st->errors, st->line,
                          "bad url: a '%%' in its user or password must start an escape such as "
                          "%%40 for '@' (two hex digits, not %%00)");
        return;
    }
    if (set_string(st, field, v) == -1) {
        free(parsed.user);
        free(parsed.password);
        return;
    }
    free(url->user);
    free(url->password);
    *url = parsed;
}

static void set_rate(struct parse_state *st, const struct key_def *d, uint64_t *n,
                     uint64_t *period_ms, const char *v)
{
    int rc = config_rate(v, n, period_ms);

    if (rc == CONFIG_ETOOLONG)
        config_errors_add(
            &st->errors, st->line,
            "rate '%.80s': the duration is longer than the maximum of " CFG_MAX_DURATION_TEXT, v);
    else if (rc != 0)
        config_errors_add(&st->errors, st->line,
                          "bad rate '%.80s'%s%s%s (expected N/DURATION such as 100/1m or 10/1h)", v,
                          d->type == T_RATE ? "" : " for '", d->type == T_RATE ? "" : d->name,
                          d->type == T_RATE ? "" : "'");
}

/* "arg:NAME" for a key that may take its value per request (F_ARG): the
 * arg's name into the rule. A name is what HAProxy's SPOE "args" accepts:
 * no spaces, no commas. */
static void set_arg(struct parse_state *st, const struct key_def *d, struct cfg_rule *rule,
                    const char *name)
{
    char **field = (char **)((char *)rule + d->parsed);
    size_t len = strlen(name);

    for (size_t i = 0; i < len; i++) {
        if (isspace((unsigned char)name[i]) || name[i] == ',') {
            len = 0;
            break;
        }
    }
    if (len == 0 || len > CONFIG_MAX_ITEM) {
        config_errors_add(&st->errors, st->line, "bad arg name in '%s = arg:%.80s'", d->name, name);
        return;
    }
    set_string(st, field, name);
}

void config_set_value(struct parse_state *st, const struct key_def *d, const char *v)
{
    struct cfg_rule *rule = d->section == SEC_RULE ? &st->cfg->rules[st->rule] : NULL;
    void *field = (rule ? (char *)rule : (char *)st->cfg) + d->off;
    void *parsed = (char *)st->cfg + d->parsed;

    if ((d->flags & F_ARG) && strncmp(v, "arg:", 4) == 0) {
        set_arg(st, d, rule, v + 4);
        return;
    }
    switch (d->type) {
    case T_STR:
        set_str(st, d, field, v);
        break;
    case T_UINT:
        set_uint(st, d, field, v);
        break;
    case T_DUR:
        set_duration(st, d, field, v);
        break;
    case T_BOOL:
        set_bool(st, d, field, v);
        break;
    case T_SHARE:
        set_share(st, d, field, v);
        break;
    case T_SHARE_AUTO:
        set_share_auto(st, d, field, v);
        break;
    case T_ENUM:
        set_enum(st, d, field, v);
        break;
    case T_ADDR:
        set_addr(st, d, field, parsed, v);
        break;
    case T_URL:
        set_url(st, field, parsed, v);
        break;
    case T_HOSTS:
        set_hosts(st, d, field, parsed, v);
        break;
    case T_ALLOW:
        set_allow(st, d, v);
        break;
    case T_NAMES:
        set_names(st, d, field, v);
        break;
    case T_KEYS:
        set_keys(st, rule, v);
        break;
    case T_MATCH:
        set_match(st, rule, v);
        break;
    case T_RATE:
        set_rate(st, d, &rule->rate_n, &rule->rate_period_ms, v);
        break;
    case T_MAX_RATE:
        set_rate(st, d, &rule->max_rate_n, &rule->max_rate_period_ms, v);
        break;
    }
}
