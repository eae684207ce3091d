/* SPDX-License-Identifier: Apache-2.0 */
/* haproxy_parse.c - HAProxy config and SPOE files split into sections,
 * lines and words as HAProxy splits them (haproxy_int.h).
 *
 * The word rules are HAProxy's (its parse_line()): blanks separate words; a
 * '#' outside quotes starts a comment; a backslash escapes the next
 * character (\t \n \r and \xHH too) outside single quotes; double quotes
 * expand $NAME and ${NAME} from the environment, single quotes nothing.
 * There is no line continuation in HAProxy's format.
 */
#include "haproxy_int.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

struct word_buf {
    char *p;
    size_t len, cap;
};

static int put(struct word_buf *b, const char *s, size_t n)
{
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 64;
        while (cap < b->len + n + 1)
            cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p)
            return -1;
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
    return 0;
}

static const struct hc_env *env_find(const struct hc_file *f, const char *name, size_t len)
{
    for (size_t i = 0; i < f->nenv; i++)
        if (strlen(f->env[i].name) == len && memcmp(f->env[i].name, name, len) == 0)
            return &f->env[i];
    return NULL;
}

/* The value HAProxy would expand for the len bytes of name; NULL: unset. */
static const char *env_get(const struct hc_file *f, const char *name, size_t len)
{
    const struct hc_env *e = env_find(f, name, len);
    char key[256];

    if (e)
        return e->value;
    if (!f->io || !f->io->get_env || len >= sizeof(key))
        return NULL;
    memcpy(key, name, len);
    key[len] = '\0';
    return f->io->get_env(f->io->ctx, key);
}

/* setenv (overwrite 1), presetenv (0) or unsetenv (value NULL). */
static int env_set(struct hc_file *f, const char *name, const char *value, int overwrite)
{
    struct hc_env *e = (struct hc_env *)env_find(f, name, strlen(name));

    if (!overwrite && env_get(f, name, strlen(name)))
        return 0;
    if (!e) {
        if (f->nenv == f->envcap) {
            size_t cap = f->envcap ? 2 * f->envcap : 8;
            struct hc_env *n = realloc(f->env, cap * sizeof(*n));
            if (!n)
                return -1;
            f->env = n;
            f->envcap = cap;
        }
        e = &f->env[f->nenv];
        if (!(e->name = strdup(name)))
            return -1;
        e->value = NULL;
        f->nenv++;
    }
    free(e->value);
    e->value = NULL;
    if (value && !(e->value = strdup(value)))
        return -1;
    return 0;
}

static int hexval(int c)
{
    return isdigit(c) ? c - '0' : isxdigit(c) ? (tolower(c) - 'a' + 10) : -1;
}

/* One expansion at s ($NAME or ${NAME}) into b; the bytes used in *used
 * (0: not a variable, the '$' is kept as it is). */
static int expand(const struct hc_file *f, const char *s, struct word_buf *b, size_t *used)
{
    size_t i = 1, start, end;
    int braces = s[1] == '{';

    *used = 0;
    if (braces)
        i++;
    start = i;
    while (isalnum((unsigned char)s[i]) || s[i] == '_')
        i++;
    end = i;
    if (end == start || (braces && s[i] != '}'))
        return 0;
    if (braces)
        i++;
    const char *v = env_get(f, s + start, end - start);
    *used = i;
    return v ? put(b, v, strlen(v)) : 0;
}

/* Split line s (no newline) into l's words. -1 out of memory. */
static int split(const struct hc_file *f, const char *s, struct hc_line *l)
{
    struct word_buf b = {0};
    char *words[HC_MAX_WORDS];
    size_t n = 0;
    int quote = 0, inword = 0;

    for (;;) {
        char c = *s;
        if (!c || (!quote && (c == ' ' || c == '\t' || c == '#'))) {
            if (inword && n < HC_MAX_WORDS) {
                if (put(&b, "", 0) < 0 || !(words[n++] = strdup(b.p)))
                    goto oom;
            }
            b.len = 0;
            inword = 0;
            if (!c || c == '#')
                break;
            s++;
            continue;
        }
        inword = 1;
        if (c == '"' && quote != '\'') {
            quote = quote ? 0 : '"';
            s++;
        } else if (c == '\'' && quote != '"') {
            quote = quote ? 0 : '\'';
            s++;
        } else if (c == '\\' && quote != '\'' && s[1]) {
            char e = s[1];
            int hi, lo;
            s += 2;
            if (e == 't')
                e = '\t';
            else if (e == 'n')
                e = '\n';
            else if (e == 'r')
                e = '\r';
            else if (e == 'x' && (hi = hexval(s[0])) >= 0 && (lo = hexval(s[1])) >= 0) {
                e = (char)(hi * 16 + lo);
                s += 2;
            }
            if (put(&b, &e, 1) < 0)
                goto oom;
        } else if (c == '$' && quote == '"') {
            size_t used;
            if (expand(f, s, &b, &used) < 0)
                goto oom;
            if (!used && put(&b, s, 1) < 0)
                goto oom;
            s += used ? used : 1;
        } else {
            if (put(&b, s, 1) < 0)
                goto oom;
            s++;
        }
    }
    free(b.p);
    l->n = n;
    l->w = NULL;
    if (n) { /* a line of no word (a comment) has no array */
        if (!(l->w = malloc(n * sizeof(char *))))
            goto oom_words;
        memcpy(l->w, words, n * sizeof(char *));
    }
    return 0;
oom:
    free(b.p);
oom_words:
    for (size_t i = 0; i < n; i++)
        free(words[i]);
    return -1;
}

static void line_free(struct hc_line *l)
{
    for (size_t i = 0; i < l->n; i++)
        free(l->w[i]);
    free(l->w);
}

int hc_word_is(const struct hc_line *l, size_t i, const char *s)
{
    return i < l->n && strcmp(l->w[i], s) == 0;
}

/* The kind of section line l opens, or 0. */
static int opens(const struct hc_line *l, int spoe)
{
    static const char *const other[] = {
        "userlist", "peers",    "resolvers",   "mailers",   "program", "http-errors", "ring",
        "cache",    "fcgi-app", "log-forward", "crt-store", "traces",  "acme",
    };
    if (spoe)
        return hc_word_is(l, 0, "spoe-agent")     ? HC_AGENT
               : hc_word_is(l, 0, "spoe-message") ? HC_MESSAGE
               : hc_word_is(l, 0, "spoe-group")   ? HC_GROUP
                                                  : 0;
    if (hc_word_is(l, 0, "global"))
        return HC_GLOBAL;
    if (hc_word_is(l, 0, "defaults"))
        return HC_DEFAULTS;
    if (hc_word_is(l, 0, "frontend"))
        return HC_FRONTEND;
    if (hc_word_is(l, 0, "backend"))
        return HC_BACKEND;
    if (hc_word_is(l, 0, "listen"))
        return HC_LISTEN;
    for (size_t i = 0; i < sizeof(other) / sizeof(other[0]); i++)
        if (hc_word_is(l, 0, other[i]))
            return HC_OTHER;
    return 0;
}

static int add_sect(struct hc_file *f, int kind, struct hc_line *l)
{
    if (f->ns == f->cap) {
        size_t cap = f->cap ? 2 * f->cap : 16;
        struct hc_sect *s = realloc(f->s, cap * sizeof(*s));
        if (!s)
            return -1;
        f->s = s;
        f->cap = cap;
    }
    struct hc_sect *s = &f->s[f->ns];
    memset(s, 0, sizeof(*s));
    s->kind = kind;
    s->no = l->no;
    if (l->n > 1 && !(s->name = strdup(l->w[1])))
        return -1;
    f->ns++;
    return 0;
}

static int add_line(struct hc_sect *s, struct hc_line *l)
{
    if (s->nlines == s->cap) {
        size_t cap = s->cap ? 2 * s->cap : 16;
        struct hc_line *n = realloc(s->lines, cap * sizeof(*n));
        if (!n)
            return -1;
        s->lines = n;
        s->cap = cap;
    }
    s->lines[s->nlines++] = *l;
    return 0;
}

/* The global keywords that change the environment of the lines after them. */
static int global_env(struct hc_file *f, const struct hc_line *l)
{
    if ((hc_word_is(l, 0, "setenv") || hc_word_is(l, 0, "presetenv")) && l->n >= 3)
        return env_set(f, l->w[1], l->w[2], hc_word_is(l, 0, "setenv"));
    if (hc_word_is(l, 0, "unsetenv"))
        for (size_t i = 1; i < l->n; i++)
            if (env_set(f, l->w[i], NULL, 1) < 0)
                return -1;
    return 0;
}

/* "[name]" alone on its line: 1 with the name in *name (len bytes). */
static int scope_line(const char *s, size_t len, const char **name, size_t *nlen)
{
    while (len && (*s == ' ' || *s == '\t'))
        s++, len--;
    while (len && (s[len - 1] == ' ' || s[len - 1] == '\t'))
        len--;
    if (len < 2 || s[0] != '[' || s[len - 1] != ']')
        return 0;
    *name = s + 1;
    *nlen = len - 2;
    return 1;
}

int hc_parse(struct hc_file *f, const char *text, int spoe, const char *scope,
             const struct hc_file *cfg)
{
    const char *p = text;
    unsigned no = 0;
    int in_scope = !spoe || !scope;
    char *copy = NULL;

    if (spoe && cfg) {
        /* the environment the config's global section built */
        for (size_t i = 0; i < cfg->nenv; i++)
            if (env_set(f, cfg->env[i].name, cfg->env[i].value, 1) < 0)
                goto oom;
    }
    while (*p) {
        const char *eol = strchr(p, '\n');
        size_t len = eol ? (size_t)(eol - p) : strlen(p);
        const char *name;
        size_t nlen;
        struct hc_line l = {.no = ++no};

        if (len && p[len - 1] == '\r')
            len--;
        if (spoe && scope_line(p, len, &name, &nlen)) {
            in_scope = scope && strlen(scope) == nlen && memcmp(scope, name, nlen) == 0;
            f->found_scope |= in_scope;
        } else if (in_scope) {
            char *c = realloc(copy, len + 1);
            if (!c)
                goto oom;
            copy = c;
            memcpy(copy, p, len);
            copy[len] = '\0';
            if (split(f, copy, &l) < 0)
                goto oom;
            int kind = l.n ? opens(&l, spoe) : 0;
            if (!l.n || l.w[0][0] == '.') {
                /* empty, or a .if/.elif/.else/.endif/.notice line */
                line_free(&l);
            } else if (kind) {
                int rc = add_sect(f, kind, &l);
                line_free(&l);
                if (rc < 0)
                    goto oom;
            } else if (!f->ns) {
                line_free(&l); /* before any section: HAProxy refuses it */
            } else {
                struct hc_sect *s = &f->s[f->ns - 1];
                if (s->kind == HC_GLOBAL && global_env(f, &l) < 0) {
                    line_free(&l);
                    goto oom;
                }
                if (add_line(s, &l) < 0) {
                    line_free(&l);
                    goto oom;
                }
            }
        }
        p = eol ? eol + 1 : p + strlen(p);
    }
    free(copy);
    return 0;
oom:
    free(copy);
    f->oom = 1;
    return -1;
}

void hc_file_release(struct hc_file *f)
{
    for (size_t i = 0; i < f->ns; i++) {
        for (size_t j = 0; j < f->s[i].nlines; j++)
            line_free(&f->s[i].lines[j]);
        free(f->s[i].lines);
        free(f->s[i].name);
    }
    free(f->s);
    for (size_t i = 0; i < f->nenv; i++) {
        free(f->env[i].name);
        free(f->env[i].value);
    }
    free(f->env);
    free(f->path);
    memset(f, 0, sizeof(*f));
}
