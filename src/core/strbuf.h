/* SPDX-License-Identifier: Apache-2.0 */
/* strbuf.h - a growing string built with printf-style appends: the one text
 * buffer of the program (the Prometheus text, GET /config's INI text, the
 * JSON bodies that jansson does not write itself).
 *
 * Out of memory is sticky: once an append fails, every later append is a
 * no-op and strbuf_finish() returns NULL, so a caller checks once at the end.
 * The text is always NUL-terminated. Pure: no I/O. Not thread-safe (one
 * buffer, one writer). */
#ifndef CORE_STRBUF_H
#define CORE_STRBUF_H

#include <stddef.h>

struct strbuf {
    char *p;
    size_t len, cap;
    int failed; /* an append ran out of memory (or vsnprintf failed) */
};

#define STRBUF_INIT                                                                                \
    {                                                                                              \
        NULL, 0, 0, 0                                                                              \
    }

/* Appends the formatted text. */
void strbuf_printf(struct strbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Appends len bytes of s (any bytes; a NUL among them is kept). */
void strbuf_put(struct strbuf *b, const char *s, size_t len);

/* Hands the text to the caller (free() it) and its length in *len; NULL
 * (and the buffer freed) if any append failed. The buffer is empty after. */
char *strbuf_finish(struct strbuf *b, size_t *len);

/* Frees the text; the buffer is empty after. */
void strbuf_free(struct strbuf *b);

#endif
