/* config_reader.c - the config module's input side: the line reader fed to
 * inih's ini_parse_stream, and the list of errors it and the handler collect.
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
#include "config_reader.h"

#include <ctype.h>
#include <errno.h>
#include <ini.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

/* ---- errors --------------------------------------------------------------------- */

void config_add_error(struct parse_state *st, unsigned line, const char *fmt, ...)
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
void config_flag_line(struct parse_state *st)
{
    if (st->first_flagged == 0)
        st->first_flagged = st->line;
}

static int cmp_error(const void *a, const void *b)
{
    const struct parse_error *x = a, *y = b;

    if (x->line != y->line)
        return x->line < y->line ? -1 : 1;
    return x->seq < y->seq ? -1 : x->seq > y->seq;
}

/* Whole lines while they fit; the first one truncated if even it does not. */
void config_write_errors(struct parse_state *st, char *err, size_t errlen)
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

/* ---- reader --------------------------------------------------------------------- */

/* inih's inline-comment rule: a comment prefix counts only after whitespace. */
const char *config_find_chars_or_comment(const char *s, const char *chars)
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
        e = config_find_chars_or_comment(s + 1, "]");
        if (*e != ']') {
            config_add_error(st, st->line, "syntax error: missing ']' in section header");
            config_flag_line(st);
            config_end_section(st);
            st->kind = SEC_SKIP; /* its keys would only add noise */
            return;
        }
        st->prev_name = 0;
        config_begin_section(st, s + 1, (size_t)(e - s - 1));
        return;
    }
    e = config_find_chars_or_comment(s, "=:");
    if (*e != '=' && *e != ':') {
        config_add_error(st, st->line, "syntax error: expected 'key = value' or '[section]'");
        config_flag_line(st);
        return;
    }
    st->prev_name = e > s;
}

/* ini_reader: one whole line per call, counted. A line that does not fit num
 * is reported and replaced by a blank one, so inih never splits a line and
 * the count stays right. */
char *config_read_line(char *str, int num, void *stream)
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
        config_add_error(st, st->line, "line too long (max %d bytes)", num - 2);
        strcpy(str, "\n");
        return str;
    }
    memcpy(str, p, len);
    str[len] = '\0';
    classify_line(st, str);
    return str;
}
