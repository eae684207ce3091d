/* SPDX-License-Identifier: Apache-2.0 */
/* config_reader.c - the config module's input side (see config_reader.h):
 * inih's ini_parse_stream fed by our own line reader.
 *
 * inih splits lines into sections and key = value pairs; everything else is
 * ours. inih 55 as shipped by Debian has no INI_HANDLER_LINENO, so we feed it
 * through our own reader, which counts lines and also sees every section
 * header (inih does not report those to the handler). The reader therefore
 * mirrors inih's line classification; the handler uses the reader's view of
 * the current section and line rather than inih's copy.
 */
#include "config_reader.h"

#include <ctype.h>
#include <errno.h>
#include <ini.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

#include "config_errors.h"

/* Errors inih will also see (handler failures, syntax errors): remember the
 * first, to tell whether inih's own return value reports something else. */
static void flag_line(struct config_reader *r)
{
    if (r->first_flagged == 0)
        r->first_flagged = r->line;
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
static void classify_line(struct config_reader *r, const char *line)
{
    const char *s = line, *e;

    if (r->line == 1 && ini_allow_bom && strncmp(s, "\xEF\xBB\xBF", 3) == 0)
        s += 3;
    while (isspace((unsigned char)*s))
        s++;
    if (!*s || strchr(ini_start_comment_prefixes, *s))
        return; /* blank or comment */
    if (ini_allow_multiline && r->prev_name && s > line) {
        r->cont = 1;
        return;
    }
    if (*s == '[') {
        e = config_find_chars_or_comment(s + 1, "]");
        if (*e != ']') {
            config_errors_add(r->errors, r->line, "syntax error: missing ']' in section header");
            flag_line(r);
            /* the section ends; its keys would only add noise */
            r->hooks->begin_section(r->hooks->ctx, r->line, NULL, 0);
            return;
        }
        r->prev_name = 0;
        r->hooks->begin_section(r->hooks->ctx, r->line, s + 1, (size_t)(e - s - 1));
        return;
    }
    e = config_find_chars_or_comment(s, "=:");
    if (*e != '=' && *e != ':') {
        config_errors_add(r->errors, r->line,
                          "syntax error: expected 'key = value' or '[section]'");
        flag_line(r);
        return;
    }
    r->prev_name = e > s;
}

/* ini_reader: one whole line per call, counted. A line that does not fit num
 * is reported and replaced by a blank one, so inih never splits a line and
 * the count stays right. */
static char *read_line(char *str, int num, void *stream)
{
    struct config_reader *r = stream;
    const char *p;
    size_t len;

    if (r->fp) {
        ssize_t n = getline(&r->buf, &r->bufcap, r->fp);

        if (n == -1) {
            if (ferror(r->fp))
                r->read_errno = errno ? errno : EIO;
            return NULL;
        }
        p = r->buf;
        len = (size_t)n;
    } else {
        const char *nl;

        if (!*r->text)
            return NULL;
        p = r->text;
        nl = strchr(p, '\n');
        len = nl ? (size_t)(nl - p + 1) : strlen(p);
        r->text += len;
    }
    r->line++;
    r->cont = 0;
    if (num < 2)
        return NULL;
    if (len > (size_t)num - 1) {
        config_errors_add(r->errors, r->line, "line too long (max %d bytes)", num - 2);
        strcpy(str, "\n");
        return str;
    }
    memcpy(str, p, len);
    str[len] = '\0';
    classify_line(r, str);
    return str;
}

/* ini_handler: one pair, handed to the hooks; a line they find wrong is
 * counted by inih too. */
static int on_pair(void *user, const char *section, const char *name, const char *value)
{
    struct config_reader *r = user;
    int ok = r->hooks->value(r->hooks->ctx, r->line, r->cont, name, value);

    (void)section; /* the reader's own view of sections is the one used */
    if (!ok)
        flag_line(r);
    return ok;
}

void config_reader_run(struct config_reader *r)
{
    int ret;

    /* Debian's inih reads its line limit (a stack VLA) from this global;
     * 200 is too short for regexes and allow lists. Config loads happen on
     * the main thread only. */
    if (ini_max_line < CONFIG_MAX_LINE)
        ini_max_line = CONFIG_MAX_LINE;
    ret = ini_parse_stream(read_line, r, on_pair, r);
    r->hooks->end_section(r->hooks->ctx);
    if (r->read_errno)
        config_errors_add(r->errors, 0, "read error: %s", strerror(r->read_errno));
    if (ret == -2)
        config_errors_add(r->errors, 0, "out of memory");
    else if (ret > 0 && (unsigned)ret != r->first_flagged)
        config_errors_add(r->errors, (unsigned)ret, "syntax error");
}

void config_reader_release(struct config_reader *r)
{
    free(r->buf);
    r->buf = NULL;
    r->bufcap = 0;
}
