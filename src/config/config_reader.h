/* config_reader.h - the config module's line reader and error list.
 * Private to src/config*.c (see config_internal.h).
 */
#ifndef CONFIG_READER_H
#define CONFIG_READER_H

#include <stddef.h>

#include "config_internal.h"

/* Records "message" for line (0: the whole file). The first ERR_KEEP errors
 * are kept, later ones only counted. */
void config_add_error(struct parse_state *st, unsigned line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Marks the current line as one inih also counts as an error (a handler
 * failure or a syntax error); only the first such line is remembered. */
void config_flag_line(struct parse_state *st);

/* The first of chars in s, or an inline comment (a comment prefix after
 * whitespace) as inih sees it, or the terminating NUL. */
const char *config_find_chars_or_comment(const char *s, const char *chars);

/* The ini_reader for ini_parse_stream; stream is the struct parse_state.
 * Reads st->fp, or st->text when fp is NULL. */
char *config_read_line(char *str, int num, void *stream);

/* Writes the kept errors, sorted by line (st->errors is sorted in place),
 * into err: "FILE:LINE: message\n", or "FILE: message\n" for line 0, then a
 * count of the dropped ones. Whole lines while they fit, the first one
 * truncated if even it does not. Nothing when err is NULL or errlen is 0. */
void config_write_errors(struct parse_state *st, char *err, size_t errlen);

#endif
