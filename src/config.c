/* config.c - the agent's INI configuration: parse, validate, free.
 *
 * inih splits lines into sections and key = value pairs; everything else is
 * ours. inih 55 as shipped by Debian has no INI_HANDLER_LINENO, so we feed it
 * through our own reader, which counts lines and also sees every section
 * header (inih does not report those to the handler). The reader therefore
 * mirrors inih's line classification; the handler uses the reader's view of
 * the current section and line rather than inih's copy.
 *
 * Errors are collected in one pass, sorted by line and written to the caller's
 * buffer as "FILE:LINE: message" lines.
 */
#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <ini.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config_value.h"
#include "spop.h"

#define CFG_MAX_LINE 4096 /* longest accepted line, newline included */
#define ERR_MSG_MAX 256   /* one message, without the "FILE:LINE: " part */
#define ERR_KEEP 64       /* errors kept; more are only counted */
#define MAX_WORKERS 256
#define MAX_PREFIX 64 /* [redis] prefix */

enum section_kind { SEC_NONE, SEC_SKIP, SEC_AGENT, SEC_REDIS, SEC_LEASE, SEC_FALLBACK, SEC_RULE };

static const char *const section_names[] = {"", "", "agent", "redis", "lease", "fallback", "rule"};

enum value_type {
    T_STR,   /* char *; F_NONEMPTY: "" is an error */
    T_UINT,  /* unsigned integer of the field's size, in [min, max] */
    T_DUR,   /* uint64_t milliseconds */
    T_BOOL,  /* int */
    T_SHARE, /* double in (0, 1] */
    T_ENUM,  /* int: index in names */
    T_ADDR,  /* char *: listen address; F_OPT: "" means unset (NULL) */
    T_URL,   /* char *: redis url, "" means unset */
    T_HOSTS, /* char *: host:port list, normalised to "a:1,b:2", "" means unset */
    T_ALLOW, /* [agent] allow */
    T_KEYS,  /* rule keys */
    T_MATCH, /* rule matches */
    T_RATE,  /* rule rate */
};

#define F_NONEMPTY 1u
#define F_OPT 2u
#define F_LIST 4u  /* continuation lines append to the value */
#define F_MULTI 8u /* the key may be repeated; each line adds */

struct key_def {
    int section;
    const char *name;
    int type;
    size_t off, size; /* the field, in struct config or struct cfg_rule */
    uint64_t min, max;
    unsigned flags;
    const char *const *names; /* T_ENUM */
};

static const char *const log_names[] = {"error", "warn", "info", "debug", NULL};
static const char *const mode_names[] = {"open", "closed", NULL};
static const char *const algo_names[] = {"token-bucket", "sliding-window", NULL};

#define CF(f) offsetof(struct config, f), sizeof(((struct config *)0)->f)
#define RF(f) offsetof(struct cfg_rule, f), sizeof(((struct cfg_rule *)0)->f)

static const struct key_def key_defs[] = {
    {SEC_AGENT, "listen", T_ADDR, CF(listen), 0, 0, 0, NULL},
    {SEC_AGENT, "workers", T_UINT, CF(workers), 1, MAX_WORKERS, 0, NULL},
    {SEC_AGENT, "max_frame_size", T_UINT, CF(max_frame_size), SPOP_MIN_FRAME_SIZE,
     SPOP_MAX_FRAME_SIZE, 0, NULL},
    {SEC_AGENT, "stats", T_ADDR, CF(stats), 0, 0, F_OPT, NULL},
    {SEC_AGENT, "log_level", T_ENUM, CF(log_level), 0, 0, 0, log_names},
    {SEC_AGENT, "shadow", T_BOOL, CF(shadow), 0, 0, 0, NULL},
    {SEC_AGENT, "allow", T_ALLOW, 0, 0, 0, 0, F_LIST, NULL},
    /* a 64-bit hash takes 16 hex digits: a smaller limit would lengthen keys */
    {SEC_AGENT, "max_key", T_UINT, CF(max_key), 16, 65536, 0, NULL},
    {SEC_AGENT, "alert_share", T_SHARE, CF(alert_share), 0, 0, 0, NULL},
    {SEC_REDIS, "url", T_URL, CF(redis_url), 0, 0, 0, NULL},
    {SEC_REDIS, "cluster", T_HOSTS, CF(redis_cluster), 0, 0, F_LIST, NULL},
    {SEC_REDIS, "sentinel", T_HOSTS, CF(redis_sentinel), 0, 0, F_LIST, NULL},
    {SEC_REDIS, "master", T_STR, CF(redis_master), 0, 0, F_NONEMPTY, NULL},
    {SEC_REDIS, "timeout", T_DUR, CF(redis_timeout_ms), 0, 0, 0, NULL},
    {SEC_REDIS, "prefix", T_STR, CF(redis_prefix), 0, MAX_PREFIX, 0, NULL},
    {SEC_LEASE, "interval", T_DUR, CF(lease_interval_ms), 0, 0, 0, NULL},
    {SEC_LEASE, "ttl", T_DUR, CF(lease_ttl_ms), 0, 0, 0, NULL},
    {SEC_LEASE, "max_fraction", T_SHARE, CF(lease_max_fraction), 0, 0, 0, NULL},
    {SEC_FALLBACK, "mode", T_ENUM, CF(fallback_mode), 0, 0, 0, mode_names},
    {SEC_FALLBACK, "share", T_SHARE, CF(fallback_share), 0, 0, 0, NULL},
    {SEC_RULE, "message", T_STR, RF(message), 0, 0, F_NONEMPTY, NULL},
    {SEC_RULE, "key", T_KEYS, 0, 0, 0, 0, F_LIST, NULL},
    {SEC_RULE, "match", T_MATCH, 0, 0, 0, 0, F_LIST | F_MULTI, NULL},
    {SEC_RULE, "rate", T_RATE, 0, 0, 0, 0, 0, NULL},
    {SEC_RULE, "burst", T_UINT, RF(burst), 1, CFG_MAX_COUNT, 0, NULL},
    {SEC_RULE, "algorithm", T_ENUM, RF(algorithm), 0, 0, 0, algo_names},
    {SEC_RULE, "lease", T_BOOL, RF(lease), 0, 0, 0, NULL},
    {SEC_RULE, "on_redis_down", T_ENUM, RF(on_redis_down), 0, 0, 0, mode_names},
    {SEC_RULE, "shadow", T_BOOL, RF(shadow), 0, 0, 0, NULL},
};

#define NKEYS (sizeof(key_defs) / sizeof(key_defs[0]))

struct parse_error {
    unsigned line; /* 0: about the whole file */
    unsigned seq;  /* keeps the order of errors on one line */
    char msg[ERR_MSG_MAX];
};

struct parse_state {
    struct config *cfg;
    const char *name; /* FILE in messages */

    /* input: a FILE (read with getline into buf) or a string cursor */
    FILE *fp;
    const char *text;
    char *buf;
    size_t bufcap;
    int read_errno;

    /* the reader's view of the current line, shared with the handler */
    unsigned line;
    int cont;               /* the line continues the previous key (indented) */
    int prev_name;          /* mirror of inih's prev_name: a key was seen in this section */
    unsigned first_flagged; /* first line where inih also records an error */

    int kind;             /* enum section_kind */
    size_t rule;          /* index of the current rule when kind == SEC_RULE */
    unsigned seen[NKEYS]; /* line where each key was first set; rule keys per rule */

    struct parse_error errors[ERR_KEEP];
    size_t nerrors, ndropped;
};

static void add_error(struct parse_state *st, unsigned line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void add_error(struct parse_state *st, unsigned line, const char *fmt, ...)
{
    va_list ap;
    struct parse_error *e;

    if (st->nerrors == ERR_KEEP) {
        st->ndropped++;
        return;
    }
    e = &st->errors[st->nerrors];
    e->line = line;
    e->seq = (unsigned)st->nerrors++;
    va_start(ap, fmt);
    vsnprintf(e->msg, sizeof(e->msg), fmt, ap);
    va_end(ap);
}

/* Errors inih will also see (handler failures, syntax errors): remember the
 * first, to tell whether inih's own return value reports something else. */
static void flag_line(struct parse_state *st)
{
    if (st->first_flagged == 0)
        st->first_flagged = st->line;
}

/* ---- setters ---------------------------------------------------------------- */

static int set_string(struct parse_state *st, char **field, const char *value)
{
    char *copy = strdup(value);

    if (!copy) {
        add_error(st, st->line, "out of memory");
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
        add_error(st, st->line,
                  "bad number '%.80s' for '%s' (expected an integer from %llu to %llu)", v, d->name,
                  (unsigned long long)d->min, (unsigned long long)d->max);
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
    add_error(st, st->line, "bad value '%.80s' for '%s' (expected %s)", v, d->name, expected);
}

/* cluster / sentinel: a list of host:port, kept as "h1:p1,h2:p2"; a
 * continuation line appends to it. */
static void set_hosts(struct parse_state *st, const struct key_def *d, char **field, const char *v)
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
    } else if (!*v) { /* empty: unset */
        free(*field);
        *field = NULL;
        return;
    }
    while ((r = config_next_item(&p, item)) != 0) {
        char *grown;

        if (r == -1 || config_valid_hostport(item, 0) == -1) {
            add_error(st, st->line, "bad address '%.80s' in '%s' (expected host:port or [v6]:port)",
                      item, d->name);
            goto out;
        }
        if (!(grown = realloc(list, len + strlen(item) + 2))) {
            add_error(st, st->line, "out of memory");
            goto out;
        }
        list = grown;
        len += (size_t)sprintf(list + len, "%s%s", len ? "," : "", item);
        n++;
    }
    if (n == 0)
        add_error(st, st->line, "empty list for '%s'", d->name);
out:
    free(*field);
    *field = list;
}

static void set_allow(struct parse_state *st, const char *v)
{
    struct config *cfg = st->cfg;
    char item[CONFIG_MAX_ITEM];
    const char *p = v;
    int r;

    while ((r = config_next_item(&p, item)) != 0) {
        struct cfg_cidr c;

        if (r == -1 || config_parse_cidr(item, &c) == -1) {
            add_error(st, st->line, "bad CIDR '%.80s' in 'allow'", item);
            continue;
        }
        if (cfg->nallow == CFG_MAX_ALLOW) {
            add_error(st, st->line, "too many entries in 'allow' (max %d)", CFG_MAX_ALLOW);
            return;
        }
        cfg->allow[cfg->nallow++] = c;
    }
    /* "allow =" alone is the default: any peer */
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
            add_error(st, st->line, "bad arg name '%.80s' in 'key'", item);
            continue;
        }
        for (i = 0; i < rule->nkeys && strcmp(rule->keys[i], item) != 0; i++)
            ;
        if (i < rule->nkeys) {
            add_error(st, st->line, "arg '%s' appears twice in 'key'", item);
            continue;
        }
        if (rule->nkeys == CFG_MAX_KEY_ARGS) {
            add_error(st, st->line, "too many args in 'key' (max %d)", CFG_MAX_KEY_ARGS);
            return;
        }
        if (!(rule->keys[rule->nkeys] = strdup(item))) {
            add_error(st, st->line, "out of memory");
            return;
        }
        rule->nkeys++;
    }
    if (n == 0)
        add_error(st, st->line, "empty list for 'key'");
}

/* match = ARG REGEX: the regex is the rest of the line, so it may hold spaces
 * (but not " ;", which inih takes for a comment). */
static void set_match(struct parse_state *st, struct cfg_rule *rule, const char *v)
{
    struct cfg_match *m;
    const char *sp = v, *re;
    int rc;

    while (*sp && !isspace((unsigned char)*sp))
        sp++;
    re = sp;
    while (isspace((unsigned char)*re))
        re++;
    if (sp == v || !*re) {
        add_error(st, st->line, "'match' needs an arg and a regex: match = ARG REGEX");
        return;
    }
    if (rule->nmatches == CFG_MAX_MATCHES) {
        add_error(st, st->line, "too many 'match' lines (max %d)", CFG_MAX_MATCHES);
        return;
    }
    m = &rule->matches[rule->nmatches];
    m->arg = strndup(v, (size_t)(sp - v));
    m->pattern = strdup(re);
    if (!m->arg || !m->pattern) {
        add_error(st, st->line, "out of memory");
        goto fail;
    }
    rc = regcomp(&m->re, m->pattern, REG_EXTENDED | REG_NOSUB);
    if (rc != 0) {
        char why[128];

        regerror(rc, &m->re, why, sizeof(why));
        add_error(st, st->line, "bad regex '%.80s' in 'match': %s", re, why);
        goto fail;
    }
    rule->nmatches++;
    return;
fail:
    free(m->arg);
    free(m->pattern);
    m->arg = m->pattern = NULL;
}

static void set_value(struct parse_state *st, const struct key_def *d, const char *v)
{
    struct cfg_rule *rule = d->section == SEC_RULE ? &st->cfg->rules[st->rule] : NULL;
    char *field = (rule ? (char *)rule : (char *)st->cfg) + d->off;
    uint64_t ms;
    int b;

    switch (d->type) {
    case T_STR: /* max: longest value, 0 = no limit */
        if ((d->flags & F_NONEMPTY) && !*v)
            add_error(st, st->line, "empty value for '%s'", d->name);
        else if (d->max && strlen(v) > d->max)
            add_error(st, st->line, "'%s' is longer than %llu bytes", d->name,
                      (unsigned long long)d->max);
        else
            set_string(st, (char **)field, v);
        break;
    case T_UINT:
        set_uint(st, d, field, v);
        break;
    case T_DUR:
        if (config_parse_duration(v, &ms) == -1)
            add_error(st, st->line,
                      "bad duration '%.80s' for '%s' (expected an integer > 0 and a unit: ms, s, "
                      "m, h or d)",
                      v, d->name);
        else
            memcpy(field, &ms, sizeof(ms));
        break;
    case T_BOOL:
        if (config_parse_bool(v, &b) == -1)
            add_error(
                st, st->line,
                "bad boolean '%.80s' for '%s' (expected yes, no, on, off, true, false, 1 or 0)", v,
                d->name);
        else
            memcpy(field, &b, sizeof(b));
        break;
    case T_SHARE:
        if (config_parse_share(v, (double *)(void *)field) == -1)
            add_error(st, st->line, "bad value '%.80s' for '%s' (expected a number in (0, 1])", v,
                      d->name);
        break;
    case T_ENUM:
        set_enum(st, d, (int *)(void *)field, v);
        break;
    case T_ADDR:
    case T_URL:
        if (!*v && (d->type == T_URL || (d->flags & F_OPT))) {
            free(*(char **)(void *)field);
            *(char **)(void *)field = NULL;
        } else if (d->type == T_ADDR && config_valid_listen(v) == -1) {
            add_error(st, st->line,
                      "bad address '%.80s' for '%s' (expected host:port, [v6]:port or unix:/path)",
                      v, d->name);
        } else if (d->type == T_URL && config_valid_redis_url(v) == -1) {
            add_error(st, st->line,
                      "bad url '%.80s' (expected redis://[:password@]host:port[/db] or unix:/path)",
                      v);
        } else {
            set_string(st, (char **)(void *)field, v);
        }
        break;
    case T_HOSTS:
        set_hosts(st, d, (char **)(void *)field, v);
        break;
    case T_ALLOW:
        set_allow(st, v);
        break;
    case T_KEYS:
        set_keys(st, rule, v);
        break;
    case T_MATCH:
        set_match(st, rule, v);
        break;
    case T_RATE:
        if (config_parse_rate(v, &rule->rate_n, &rule->rate_period_ms) == -1)
            add_error(st, st->line,
                      "bad rate '%.80s' (expected N/DURATION such as 100/1m or 10/1h)", v);
        break;
    }
}

/* ---- sections ----------------------------------------------------------------- */

static const struct key_def *find_key(int section, const char *name)
{
    for (size_t i = 0; i < NKEYS; i++) {
        if (key_defs[i].section == section && strcmp(key_defs[i].name, name) == 0)
            return &key_defs[i];
    }
    return NULL;
}

static unsigned seen_line(const struct parse_state *st, int section, const char *name)
{
    return st->seen[find_key(section, name) - key_defs];
}

static void end_section(struct parse_state *st)
{
    if (st->kind == SEC_RULE && !seen_line(st, SEC_RULE, "rate")) {
        const struct cfg_rule *r = &st->cfg->rules[st->rule];
        add_error(st, r->line, "rule '%s' has no rate", r->name);
    }
    st->kind = SEC_NONE;
}

static void begin_rule(struct parse_state *st, const char *name, size_t len)
{
    struct config *cfg = st->cfg;
    struct cfg_rule *r;

    if (config_valid_rule_name(name, len) == -1) {
        add_error(st, st->line, "bad rule name '%.*s' (1 to %d of A-Z a-z 0-9 _ . -)",
                  (int)(len > 80 ? 80 : len), name, CFG_MAX_NAME);
        return;
    }
    for (size_t i = 0; i < cfg->nrules; i++) {
        if (strlen(cfg->rules[i].name) == len && memcmp(cfg->rules[i].name, name, len) == 0) {
            add_error(st, st->line, "duplicate rule name '%.*s' (first at line %u)", (int)len, name,
                      cfg->rules[i].line);
            return;
        }
    }
    if (cfg->nrules == CFG_MAX_RULES) {
        add_error(st, st->line, "too many rules (max %d)", CFG_MAX_RULES);
        return;
    }
    /* grow by doubling; rules are addressed by index while parsing. realloc
     * moves compiled regex_t objects: glibc's and musl's hold no pointer to
     * themselves, so a moved one stays valid. */
    if ((cfg->nrules & (cfg->nrules - 1)) == 0) {
        size_t cap = cfg->nrules ? cfg->nrules * 2 : 4;
        struct cfg_rule *grown = realloc(cfg->rules, cap * sizeof(*grown));

        if (!grown) {
            add_error(st, st->line, "out of memory");
            return;
        }
        cfg->rules = grown;
    }
    r = &cfg->rules[cfg->nrules];
    memset(r, 0, sizeof(*r));
    if (!(r->name = strndup(name, len))) {
        add_error(st, st->line, "out of memory");
        return;
    }
    r->algorithm = ALGO_TOKEN_BUCKET;
    r->lease = 1;
    r->on_redis_down = -1; /* unset: [fallback] mode, known only at the end */
    r->line = st->line;
    st->rule = cfg->nrules++;
    st->kind = SEC_RULE;
    for (size_t i = 0; i < NKEYS; i++) {
        if (key_defs[i].section == SEC_RULE)
            st->seen[i] = 0;
    }
}

/* A "[name]" line, name not NUL-terminated. */
static void begin_section(struct parse_state *st, const char *name, size_t len)
{
    end_section(st);
    st->kind = SEC_SKIP; /* until proven otherwise: keys of a bad section are ignored */
    while (len && isspace((unsigned char)*name)) {
        name++;
        len--;
    }
    while (len && isspace((unsigned char)name[len - 1]))
        len--;
    if (len >= 5 && memcmp(name, "rule:", 5) == 0) {
        begin_rule(st, name + 5, len - 5);
        return;
    }
    for (int k = SEC_AGENT; k < SEC_RULE; k++) {
        if (strlen(section_names[k]) == len && memcmp(section_names[k], name, len) == 0) {
            st->kind = k;
            return;
        }
    }
    add_error(st, st->line, "unknown section [%.*s]", (int)(len > 80 ? 80 : len), name);
}

/* ---- reader and handler ------------------------------------------------------- */

/* inih's inline-comment rule: a comment prefix counts only after whitespace. */
static const char *find_chars_or_comment(const char *s, const char *chars)
{
    int was_space = 0;

    while (*s && !strchr(chars, *s) &&
           !(ini_allow_inline_comments && was_space && strchr(ini_inline_comment_prefixes, *s))) {
        was_space = isspace((unsigned char)*s);
        s++;
    }
    return s;
}

/* Classify the line the way inih will, to track sections, continuations and
 * syntax errors (inih reports only the first of those, without its text). */
static void classify_line(struct parse_state *st, const char *line)
{
    const char *s = line, *e;

    if (st->line == 1 && ini_allow_bom && strncmp(s, "\xEF\xBB\xBF", 3) == 0)
        s += 3;
    while (isspace((unsigned char)*s))
        s++;
    if (!*s || strchr(ini_start_comment_prefixes, *s))
        return; /* blank or comment */
    if (ini_allow_multiline && st->prev_name && s > line) {
        st->cont = 1;
        return;
    }
    if (*s == '[') {
        e = find_chars_or_comment(s + 1, "]");
        if (*e != ']') {
            add_error(st, st->line, "syntax error: missing ']' in section header");
            flag_line(st);
            end_section(st);
            st->kind = SEC_SKIP; /* its keys would only add noise */
            return;
        }
        st->prev_name = 0;
        begin_section(st, s + 1, (size_t)(e - s - 1));
        return;
    }
    e = find_chars_or_comment(s, "=:");
    if (*e != '=' && *e != ':') {
        add_error(st, st->line, "syntax error: expected 'key = value' or '[section]'");
        flag_line(st);
        return;
    }
    st->prev_name = e > s;
}

/* ini_reader: one whole line per call, counted. A line that does not fit num
 * is reported and replaced by a blank one, so inih never splits a line and
 * the count stays right. */
static char *read_line(char *str, int num, void *stream)
{
    struct parse_state *st = stream;
    const char *p;
    size_t len;

    if (st->fp) {
        ssize_t n = getline(&st->buf, &st->bufcap, st->fp);

        if (n == -1) {
            if (ferror(st->fp))
                st->read_errno = errno ? errno : EIO;
            return NULL;
        }
        p = st->buf;
        len = (size_t)n;
    } else {
        const char *nl;

        if (!*st->text)
            return NULL;
        p = st->text;
        nl = strchr(p, '\n');
        len = nl ? (size_t)(nl - p + 1) : strlen(p);
        st->text += len;
    }
    st->line++;
    st->cont = 0;
    if (num < 2)
        return NULL;
    if (len > (size_t)num - 1) {
        add_error(st, st->line, "line too long (max %d bytes)", num - 2);
        strcpy(str, "\n");
        return str;
    }
    memcpy(str, p, len);
    str[len] = '\0';
    classify_line(st, str);
    return str;
}

/* ini_handler: one key = value (or continuation) line. Returns 0 when the
 * line holds an error, which inih then counts as well. */
static int on_key(void *user, const char *section, const char *name, const char *value)
{
    struct parse_state *st = user;
    const struct key_def *d;
    size_t before = st->nerrors + st->ndropped;
    unsigned *seen;
    char cont_value[CFG_MAX_LINE];

    if (st->kind == SEC_SKIP || !value) /* !value: a syntax error, already reported */
        return 1;
    d = st->kind == SEC_NONE ? NULL : find_key(st->kind, name);
    seen = d ? &st->seen[d - key_defs] : NULL;
    if (st->cont && !d)
        return 1; /* the key's first line was already reported */
    if (st->cont) {
        /* inih 55 leaves inline comments on continuation lines */
        size_t len = (size_t)(find_chars_or_comment(value, "") - value);

        while (len && isspace((unsigned char)value[len - 1]))
            len--;
        if (len >= sizeof(cont_value))
            len = sizeof(cont_value) - 1;
        memcpy(cont_value, value, len);
        cont_value[len] = '\0';
        value = cont_value;
    }
    if (st->kind == SEC_NONE) {
        add_error(st, st->line, "key '%s' outside any section", name);
    } else if (!d) {
        if (st->kind == SEC_RULE)
            add_error(st, st->line, "unknown key '%s' in [rule:%s]", name,
                      st->cfg->rules[st->rule].name);
        else
            add_error(st, st->line, "unknown key '%s' in [%s]", name, section_names[st->kind]);
    } else if (st->cont && !(d->flags & F_LIST)) {
        add_error(st, st->line, "'%s' takes one line (is this line indented by mistake?)", name);
    } else if (!st->cont && *seen && !(d->flags & F_MULTI)) {
        add_error(st, st->line, "duplicate key '%s' (first set at line %u)", name, *seen);
    } else {
        if (!*seen)
            *seen = st->line;
        set_value(st, d, value);
    }
    if (st->nerrors + st->ndropped == before)
        return 1;
    flag_line(st);
    return 0;
}

/* ---- whole-file checks ---------------------------------------------------------- */

static void check_exclusive(struct parse_state *st, const char *a, const char *va, const char *b,
                            const char *vb)
{
    unsigned la = seen_line(st, SEC_REDIS, a), lb = seen_line(st, SEC_REDIS, b);

    if (va && vb)
        add_error(st, la > lb ? la : lb, "'%s' and '%s' cannot be used together (lines %u and %u)",
                  a, b, la < lb ? la : lb, la > lb ? la : lb);
}

/* Checks across keys and sections, and the rule defaults that depend on
 * sections that may come after the rule. */
static void finish(struct parse_state *st)
{
    struct config *cfg = st->cfg;

    check_exclusive(st, "url", cfg->redis_url, "cluster", cfg->redis_cluster);
    check_exclusive(st, "url", cfg->redis_url, "sentinel", cfg->redis_sentinel);
    check_exclusive(st, "cluster", cfg->redis_cluster, "sentinel", cfg->redis_sentinel);
    if (cfg->redis_sentinel && !cfg->redis_master)
        add_error(st, seen_line(st, SEC_REDIS, "sentinel"), "'sentinel' needs 'master'");
    if (cfg->redis_master && !cfg->redis_sentinel)
        add_error(st, seen_line(st, SEC_REDIS, "master"), "'master' is only used with 'sentinel'");

    /* a lease must outlive at least one top-up round, or it is never renewed */
    if (cfg->lease_ttl_ms <= cfg->lease_interval_ms) {
        unsigned line = seen_line(st, SEC_LEASE, "ttl");
        add_error(st, line ? line : seen_line(st, SEC_LEASE, "interval"),
                  "lease ttl (%llu ms) must be longer than interval (%llu ms)",
                  (unsigned long long)cfg->lease_ttl_ms,
                  (unsigned long long)cfg->lease_interval_ms);
    }

    for (size_t i = 0; i < cfg->nrules; i++) {
        struct cfg_rule *r = &cfg->rules[i];

        if (r->burst == 0)
            r->burst = r->rate_n;
        if (r->on_redis_down == -1)
            r->on_redis_down = cfg->fallback_mode;
        r->shadow = r->shadow || cfg->shadow;
    }
}

/* ---- public API ---------------------------------------------------------------- */

static struct config *config_new(const char *path)
{
    struct config *cfg = calloc(1, sizeof(*cfg));
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);

    if (!cfg)
        return NULL;
    cfg->path = strdup(path);
    cfg->listen = strdup("127.0.0.1:12345");
    cfg->redis_prefix = strdup("rl:");
    if (!cfg->path || !cfg->listen || !cfg->redis_prefix) {
        config_free(cfg);
        return NULL;
    }
    cfg->workers = ncpu < 1 ? 1 : ncpu > MAX_WORKERS ? MAX_WORKERS : (int)ncpu;
    cfg->max_frame_size = SPOP_DEFAULT_FRAME_SIZE;
    cfg->log_level = LOG_LVL_INFO;
    cfg->max_key = 512;
    cfg->alert_share = 0.05;
    cfg->redis_timeout_ms = 100;
    cfg->lease_interval_ms = 100;
    cfg->lease_ttl_ms = 1000;
    cfg->lease_max_fraction = 0.1;
    cfg->fallback_mode = DOWN_OPEN;
    cfg->fallback_share = 0.05;
    return cfg;
}

static int cmp_error(const void *a, const void *b)
{
    const struct parse_error *x = a, *y = b;

    if (x->line != y->line)
        return x->line < y->line ? -1 : 1;
    return x->seq < y->seq ? -1 : x->seq > y->seq;
}

/* Whole lines while they fit; the first one truncated if even it does not. */
static void write_errors(struct parse_state *st, char *err, size_t errlen)
{
    size_t used = 0;

    if (!err || errlen == 0)
        return;
    err[0] = '\0';
    qsort(st->errors, st->nerrors, sizeof(st->errors[0]), cmp_error);
    for (size_t i = 0; i <= st->nerrors; i++) {
        const struct parse_error *e = &st->errors[i];
        int n;

        if (i < st->nerrors && e->line)
            n = snprintf(err + used, errlen - used, "%s:%u: %s\n", st->name, e->line, e->msg);
        else if (i < st->nerrors)
            n = snprintf(err + used, errlen - used, "%s: %s\n", st->name, e->msg);
        else if (st->ndropped)
            n = snprintf(err + used, errlen - used, "%s: %zu more errors not shown\n", st->name,
                         st->ndropped);
        else
            break;
        if (n < 0 || (size_t)n >= errlen - used) {
            if (used > 0)
                err[used] = '\0';
            return;
        }
        used += (size_t)n;
    }
}

static int load(struct parse_state *st, struct config **out, char *err, size_t errlen)
{
    int ret;

    *out = NULL;
    if (err && errlen)
        err[0] = '\0';
    /* Debian's inih reads its line limit (a stack VLA) from this global;
     * 200 is too short for regexes and allow lists. Config loads happen on
     * the main thread only. */
    if (ini_max_line < CFG_MAX_LINE)
        ini_max_line = CFG_MAX_LINE;
    ret = ini_parse_stream(read_line, st, on_key, st);
    end_section(st);
    if (st->read_errno)
        add_error(st, 0, "read error: %s", strerror(st->read_errno));
    if (ret == -2)
        add_error(st, 0, "out of memory");
    else if (ret > 0 && (unsigned)ret != st->first_flagged)
        add_error(st, (unsigned)ret, "syntax error");
    finish(st);
    if (st->nerrors + st->ndropped > 0) {
        write_errors(st, err, errlen);
        config_free(st->cfg);
        return -1;
    }
    *out = st->cfg;
    return 0;
}

static struct parse_state *state_new(const char *name, char *err, size_t errlen)
{
    struct parse_state *st = calloc(1, sizeof(*st));

    if (st && !(st->cfg = config_new(name))) {
        free(st);
        st = NULL;
    }
    if (!st && err && errlen)
        snprintf(err, errlen, "%s: out of memory\n", name);
    return st;
}

int config_load_file(const char *path, struct config **out, char *err, size_t errlen)
{
    struct parse_state *st;
    FILE *fp;
    int ret;

    *out = NULL;
    if (!(fp = fopen(path, "r"))) {
        if (err && errlen)
            snprintf(err, errlen, "%s: cannot open: %s\n", path, strerror(errno));
        return -1;
    }
    if (!(st = state_new(path, err, errlen))) {
        fclose(fp);
        return -1;
    }
    st->name = path;
    st->fp = fp;
    ret = load(st, out, err, errlen);
    free(st->buf);
    fclose(fp);
    free(st);
    return ret;
}

int config_load_string(const char *text, const char *name, struct config **out, char *err,
                       size_t errlen)
{
    struct parse_state *st;
    int ret;

    *out = NULL;
    if (!name)
        name = "<string>";
    if (!(st = state_new(name, err, errlen)))
        return -1;
    st->name = name;
    st->text = text ? text : "";
    ret = load(st, out, err, errlen);
    free(st);
    return ret;
}

void config_free(struct config *cfg)
{
    if (!cfg)
        return;
    for (size_t i = 0; i < cfg->nrules; i++) {
        struct cfg_rule *r = &cfg->rules[i];

        free(r->name);
        free(r->message);
        for (size_t k = 0; k < r->nkeys; k++)
            free(r->keys[k]);
        for (size_t m = 0; m < r->nmatches; m++) {
            free(r->matches[m].arg);
            free(r->matches[m].pattern);
            regfree(&r->matches[m].re);
        }
    }
    free(cfg->rules);
    free(cfg->path);
    free(cfg->listen);
    free(cfg->stats);
    free(cfg->redis_url);
    free(cfg->redis_cluster);
    free(cfg->redis_sentinel);
    free(cfg->redis_master);
    free(cfg->redis_prefix);
    free(cfg);
}

int config_standalone(const struct config *cfg)
{
    return !cfg->redis_url && !cfg->redis_cluster && !cfg->redis_sentinel;
}
