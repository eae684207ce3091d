/* SPDX-License-Identifier: Apache-2.0 */
/* config_errors.c - the error list of one config load (see config_errors.h). */
#include "config_errors.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

void config_errors_add(struct config_errors *e, unsigned line, const char *fmt, ...)
{
    va_list ap;
    struct config_error *err;

    if (e->nkept == ERR_KEEP) {
        e->ndropped++;
        return;
    }
    err = &e->kept[e->nkept];
    err->line = line;
    err->seq = (unsigned)e->nkept++;
    va_start(ap, fmt);
    vsnprintf(err->msg, sizeof(err->msg), fmt, ap);
    va_end(ap);
}

size_t config_errors_count(const struct config_errors *e)
{
    return e->nkept + e->ndropped;
}

static int cmp_error(const void *a, const void *b)
{
    const struct config_error *x = a, *y = b;

    if (x->line != y->line)
        return x->line < y->line ? -1 : 1;
    return x->seq < y->seq ? -1 : x->seq > y->seq;
}

/* Whole lines while they fit; the first one truncated if even it does not. */
void config_errors_write(struct config_errors *e, const char *name, char *err, size_t errlen)
{
    size_t used = 0;

    if (!err || errlen == 0)
        return;
    err[0] = '\0';
    qsort(e->kept, e->nkept, sizeof(e->kept[0]), cmp_error);
    for (size_t i = 0; i <= e->nkept; i++) {
        const struct config_error *k = &e->kept[i];
        int n;

        if (i < e->nkept && k->line)
            n = snprintf(err + used, errlen - used, "%s:%u: %s\n", name, k->line, k->msg);
        else if (i < e->nkept)
            n = snprintf(err + used, errlen - used, "%s: %s\n", name, k->msg);
        else if (e->ndropped)
            n = snprintf(err + used, errlen - used, "%s: %zu more errors not shown\n", name,
                         e->ndropped);
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
