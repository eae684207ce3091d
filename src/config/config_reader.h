/* SPDX-License-Identifier: Apache-2.0 */
/* config_reader.h - the config module's input side: lines in, sections and
 * key = value pairs out. Private to src/config/ (the public API is config.h).
 *
 * The reader drives inih over a FILE or a string, counts the lines, reports
 * syntax errors, and hands each section header and each pair to the hooks it
 * is given. It knows nothing of keys or sections: it calls nothing above it
 * but those hooks.
 */
#ifndef CONFIG_READER_H
#define CONFIG_READER_H

#include <stddef.h>
#include <stdio.h>

#define CONFIG_MAX_LINE 4096 /* longest accepted line, newline included */

struct config_errors;

/* What the reader reports; ctx is passed back to each. Strings are valid
 * during the call only. */
struct config_reader_hooks {
    /* A "[name]" line (name not NUL-terminated, not trimmed), or name NULL
     * for a malformed header: the current section ends either way, and the
     * keys under a malformed header are to be ignored. */
    void (*begin_section)(void *ctx, unsigned line, const char *name, size_t len);
    /* The end of the input closes the last section. */
    void (*end_section)(void *ctx);
    /* A "name = value" line, or a continuation line of name (cont 1, value
     * as inih gives it: inline comments left in). value NULL: a line inih
     * could not split, already reported. Returns 0 when the line holds an
     * error (already reported), 1 otherwise. */
    int (*value)(void *ctx, unsigned line, int cont, const char *name, const char *value);
    void *ctx;
};

struct config_reader {
    /* set by the caller: a FILE (read with getline), or else a string */
    FILE *fp;
    const char *text;
    struct config_errors *errors;
    const struct config_reader_hooks *hooks;

    /* the reader's own */
    char *buf;
    size_t bufcap;
    int read_errno;
    unsigned line;
    int cont;               /* the line continues the previous key (indented) */
    int prev_name;          /* mirror of inih's prev_name: a key was seen in this section */
    unsigned first_flagged; /* first line where inih also records an error */
};

/* Reads the whole input, calling the hooks, then end_section once. Syntax
 * and read errors go to r->errors. Call once per reader. */
void config_reader_run(struct config_reader *r);

/* Frees what the reader allocated (not the FILE). */
void config_reader_release(struct config_reader *r);

/* The first of chars in s, or an inline comment (a comment prefix after
 * whitespace) as inih sees it, or the terminating NUL. */
const char *config_find_chars_or_comment(const char *s, const char *chars);

#endif
