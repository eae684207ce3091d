/* SPDX-License-Identifier: Apache-2.0 */
/* spop_int.h - what spop.c and spop_handshake.c share; not for users of
 * the codec (they include spop.h). */
#ifndef SPOP_INT_H
#define SPOP_INT_H

#include <stddef.h>

#include "spop.h"

/* A reader over n bytes at p; p may be NULL only when n is 0. */
static inline struct spop_reader reader_of(const uint8_t *p, size_t n)
{
    struct spop_reader r;

    r.p = p;
    r.end = p ? p + n : p;
    return r;
}

/* strlen() that stops looking after max bytes (strnlen() is not C11). */
static inline size_t bounded_len(const char *s, size_t max)
{
    size_t n = 0;

    while (n < max && s[n])
        n++;
    return n;
}

#endif
