/* SPDX-License-Identifier: Apache-2.0 */
/* config_errors.h - the errors of one config load: kept in the order they
 * are found, written out sorted by line as "FILE:LINE: message" lines.
 * Private to src/config/ (the public API is config.h).
 *
 * A leaf of the config module: the reader, the handler and the setters all
 * report here, and it calls none of them.
 */
#ifndef CONFIG_ERRORS_H
#define CONFIG_ERRORS_H

#include <stddef.h>

#define ERR_MSG_MAX 256 /* one message, without the "FILE:LINE: " part */
#define ERR_KEEP 64     /* errors kept; more are only counted */

struct config_error {
    unsigned line; /* 0: about the whole file */
    unsigned seq;  /* keeps the order of errors on one line */
    char msg[ERR_MSG_MAX];
};

struct config_errors {
    struct config_error kept[ERR_KEEP];
    size_t nkept, ndropped;
};

/* Records "message" for line (0: the whole file). The first ERR_KEEP errors
 * are kept, later ones only counted. */
void config_errors_add(struct config_errors *e, unsigned line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Errors so far, kept and dropped. */
size_t config_errors_count(const struct config_errors *e);

/* Writes the kept errors, sorted by line (e->kept is sorted in place), into
 * err: "NAME:LINE: message\n", or "NAME: message\n" for line 0, then a count
 * of the dropped ones. Whole lines while they fit, the first one truncated if
 * even it does not. Nothing when err is NULL or errlen is 0. */
void config_errors_write(struct config_errors *e, const char *name, char *err, size_t errlen);

#endif
